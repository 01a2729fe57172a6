"""Ready means usable, on a cluster (tests/cluster/harness.py): on a fresh
three-node cluster, under a CPU hog this test starts itself, every node's
/readyz is polled as fast as a thread per node can, and the moment a node
says 200 authenticated requests go to it (list the members, create a
topic, read the root user): none may be answered 401. The root user is
seeded through the metastore (whichever node's proposal the leader
applies first), so a follower is ready only once that write is applied in
its own replica. Before a node is ready, an authenticated request gets
200 or 503 with Retry-After, never 401. The same after a restart of one
node, for the root user and for a user made before it (what the replica
held). A node without a quorum is never ready, and answers every
credential 503.

Run: python3 tests/cluster/test_ready_auth.py --ternd build/ternd
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import cpu_hog  # noqa: E402
from harness import basic, wait_until  # noqa: E402

ROUNDS = 3  # fresh clusters
BOUND = 90  # seconds a node may take to become ready
ADMIN = basic("admin", harness.PASSWORD)
ALICE = basic("alice", "alice-pw-1")



def watch(node, tag, auth, problems):
    """Poll node's /readyz as fast as we can; before 200 send an
    authenticated request between polls (200 or 503 + Retry-After, never
    401); at 200 at once list the members, create a topic and read the
    root user. What goes wrong is appended to problems."""
    deadline = time.monotonic() + BOUND
    headers = {"Authorization": auth}
    while time.monotonic() < deadline:
        if not node.running():
            problems.append(f"node {node.id} exited")
            return
        status, _ = node.request("GET", "/readyz", auth=False, timeout=10)
        if status == 200:
            break
        status, body = node.request("GET", "/v1/cluster/members", auth=False,
                                    headers=headers, timeout=10)
        if status not in (None, 200, 503):
            problems.append(f"node {node.id} before ready: {status} {body}")
        if status == 503 and body != {"error": "control plane not caught up"}:
            problems.append(f"node {node.id} before ready: 503 {body}")
    else:
        problems.append(f"node {node.id} not ready after {BOUND} s")
        return
    # The moment /readyz said 200.
    checks = [("GET", "/v1/cluster/members", None, 200),
              ("POST", "/v1/topics", {"name": f"{tag}n{node.id}", "partitions": 1}, 201),
              ("GET", "/v1/users/admin", None, 200)]
    for method, path, body, want in checks:
        status, answer = node.request(method, path, body, auth=False, headers=headers,
                                      timeout=30)
        if status != want:
            problems.append(f"node {node.id} right after ready: {method} {path}: "
                            f"{status} {answer}")


class ReadyAuth(harness.ClusterTest):
    maxDiff = None

    def watch_all(self, c, nodes, tag, auth=ADMIN):
        problems = []
        threads = [threading.Thread(target=watch, args=(n, tag, auth, problems))
                   for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(problems, [])

    def test_fresh_clusters(self):
        with cpu_hog():
            for r in range(ROUNDS):
                c = self.make(3)
                for node in c.nodes:
                    node.start()
                self.watch_all(c, c.nodes, f"fresh{r}")
                c.close()

    def test_no_quorum_is_503_not_401(self):
        # One node of three: no leader, so no user can be judged. Right,
        # wrong and unknown credentials alike get 503 with Retry-After.
        c = self.make(3)
        lone = c.nodes[0].start()
        wait_until("the lone node to listen", lambda: lone.readyz() == 503, 60)
        wrong = basic("admin", "wrong-pw")
        nobody = basic("nobody", "nobody-pw")
        for i in range(30):
            auth = (ADMIN, wrong, nobody)[i % 3]
            status, body = lone.request("GET", "/v1/topics", auth=False,
                                        headers={"Authorization": auth})
            self.assertEqual((status, body), (503, {"error": "control plane not caught up"}))
            self.assertEqual(lone.readyz(), 503)
        # The others come: then it serves, and the root user works the
        # moment each node says ready.
        for node in c.nodes[1:]:
            node.start()
        self.watch_all(c, c.nodes, "quorum")
        status, body = lone.request("GET", "/v1/topics", auth=False,
                                    headers={"Authorization": wrong})
        self.assertEqual(status, 401, body)

    def test_restart_of_one_node(self):
        c = self.make(3).start()
        status, body = c.nodes[0].request("POST", "/v1/users", {
            "username": "alice", "password": "alice-pw-1",
            "grants": [{"action": "consume", "patterns": ["*"]}]})
        self.assertEqual(status, 201, body)
        # alice reaches every replica before the restart.
        for node in c.nodes:
            wait_until(f"alice on node {node.id}",
                       lambda n=node: n.request("GET", "/v1/users/alice")[0] == 200, 30)
        with cpu_hog():
            for r, node in enumerate(c.nodes[:2]):
                node.stop()
                node.start()
                self.watch_all(c, [node], f"restart{r}")
                status, body = node.request("GET", "/v1/topics", auth=False,
                                            headers={"Authorization": ALICE})
                self.assertEqual(status, 200, body)
            # alice herself, the moment a restarted node is ready.
            node = c.nodes[2]
            node.kill()
            node.start()
            problems = []
            watch_alice(node, problems)
            self.assertEqual(problems, [])


def watch_alice(node, problems):
    """As watch, for alice (consume on every topic): listing topics the
    moment /readyz says 200."""
    headers = {"Authorization": ALICE}
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if not node.running():
            problems.append(f"node {node.id} exited")
            return
        if node.request("GET", "/readyz", auth=False, timeout=10)[0] == 200:
            break
        status, body = node.request("GET", "/v1/topics", auth=False, headers=headers,
                                    timeout=10)
        if status not in (None, 200, 503):
            problems.append(f"node {node.id} before ready: {status} {body}")
    else:
        problems.append(f"node {node.id} not ready after {BOUND} s")
        return
    status, body = node.request("GET", "/v1/topics", auth=False, headers=headers, timeout=30)
    if status != 200:
        problems.append(f"node {node.id} right after ready: {status} {body}")


if __name__ == "__main__":
    harness.main()
