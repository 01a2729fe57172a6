"""The cluster's guards, from outside, on real ternd nodes
(tests/cluster/harness.py): a node with a wrong cluster secret cannot make a
single node RPC succeed (and the logs say why, on both ends); a node whose
Raft certificate no CA of the cluster signed cannot take part in Raft;
garbage UDP datagrams and a flood of unauthenticated streams leave a node
serving its honest peers.

Run: python3 tests/cluster/test_security.py --ternd build/ternd --probe build/tern-rpc-probe
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

PROBE = None


def probe(addr, secret_file, count=1):
    """tern-rpc-probe's (exit status, first line, status JSON or "")."""
    r = harness.subprocess.run([PROBE, addr, secret_file, str(count)], capture_output=True,
                               text=True, timeout=120)
    lines = r.stdout.splitlines()
    return r.returncode, lines[0] if lines else r.stderr, lines[1] if len(lines) > 1 else ""


class ClusterTest(harness.ClusterTest):
    def wrong_secret_file(self, c):
        path = os.path.join(c.dir, "wrong-secret")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        return path

    def assert_serving(self, c, name):
        """A metadata write sent to a follower lands on every node: node
        RPC between the honest members still works."""
        leader = c.find_leader()
        follower = [x for x in c.nodes if x is not leader and x.running()][0]
        status, body = follower.request("POST", "/v1/topics", {"name": name, "partitions": 1})
        self.assertEqual(status, 201, body)
        for node in [x for x in c.nodes if x.running() and x.join is None]:
            wait_until(f"{name} on node {node.id}", lambda n=node: name in n.topics(), 30)


class Secret(ClusterTest):
    def test_right_secret_calls_succeed(self):
        # The probe itself works: with the cluster's secret it gets the
        # node's status over node RPC.
        c = self.make(3).start()
        rc, line, status = probe(c.nodes[0].api_address, c.secret_file, 4)
        self.assertEqual(rc, 0, line)
        self.assertEqual(line, "ok 4 failed 0")
        self.assertIn('"node_id":"1"', status)

    def test_wrong_secret_gets_no_call_through(self):
        c = self.make(3).start()
        wrong = self.wrong_secret_file(c)
        for node in c.nodes:
            rc, line, _ = probe(node.api_address, wrong, 8)
            self.assertEqual(rc, 3, line)
            self.assertTrue(line.startswith("ok 0 failed 8 "), line)
            self.assertIn("refused this node's proof of the cluster secret", line)
            wait_until(f"node {node.id} to log the refused stream",
                       lambda n=node: "did not prove the cluster secret" in n.log(), 10)
            self.assertIn("rpc: stream from 127.0.0.1:", node.log())

    def test_node_with_a_wrong_secret_cannot_join(self):
        c = self.make(3).start()
        joiner = c.add_joiner()
        joiner.extra = [f"--cluster-secret-file={self.wrong_secret_file(c)}"]
        joiner.start()
        # Its join calls never get through: it stays out, unready, and says
        # why; the cluster does not list it and keeps working.
        wait_until("the joiner to log why", lambda: "refused this node's proof of the cluster "
                   "secret" in joiner.log(), 30)
        time.sleep(3)
        self.assertTrue(joiner.running(), joiner.log())
        self.assertEqual(joiner.readyz(), 503)
        for node in c.nodes[:3]:
            status, body = node.request("GET", "/v1/cluster/members")
            self.assertEqual(status, 200, body)
            self.assertEqual(sorted(m["id"] for m in body["members"]), ["1", "2", "3"])
            self.assertIn("did not prove the cluster secret", node.log())
        self.assert_serving(c, "after-wrong-secret")


class RaftTls(ClusterTest):
    def test_node_without_a_ca_signed_certificate_cannot_join_raft(self):
        c = self.make(3, tls=True).start()
        joiner = c.add_joiner()
        # The right secret (its JOIN reaches the leader), but a Raft
        # certificate from a CA the cluster does not trust.
        other = harness.make_certs(os.path.join(c.dir, "other"), ["stranger"], "other-ca")
        c.certs[f"node{joiner.id}"] = other["stranger"]
        joiner.start()
        wait_until("the leader to refuse its Raft connection",
                   lambda: any("raft transport: connection" in n.log() and
                               "certificate" in n.log() for n in c.nodes[:3]), 60)
        time.sleep(3)
        self.assertTrue(joiner.running(), joiner.log())
        self.assertEqual(joiner.readyz(), 503)
        self.assertNotIn("metastore ready", joiner.log())
        self.assert_serving(c, "after-stranger")


class Garbage(ClusterTest):
    def test_garbage_datagrams_and_unauthenticated_streams(self):
        c = self.make(3).start()
        target = c.nodes[0]
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        rnd = os.urandom(1 << 20)
        # Random bytes, QUIC-looking long headers with junk after them,
        # empty and maximal datagrams.
        for i in range(3000):
            n = (i * 37) % 1400 + 1
            data = rnd[i * 97 % len(rnd):][:n]
            if i % 3 == 0:
                data = bytes([0xC0 | (i & 0x0F), 0, 0, 0, 1, 8]) + data
            sock.sendto(data, (target.host, target.http_port))
        sock.sendto(b"", (target.host, target.http_port))
        sock.sendto(b"\xff" * 1472, (target.host, target.http_port))
        # A flood of streams that never prove the secret.
        rc, line, _ = probe(target.api_address, self.wrong_secret_file(c), 400)
        self.assertEqual(rc, 3, line)
        self.assertTrue(target.running(), target.log())
        # The node still serves its honest peers and clients.
        rc, line, _ = probe(target.api_address, c.secret_file, 16)
        self.assertEqual(rc, 0, line)
        self.assert_serving(c, "after-garbage")
        self.assertEqual(target.readyz(), 200)


def configure(args):
    global PROBE
    PROBE = os.path.abspath(args.probe)


if __name__ == "__main__":
    harness.main([("--probe", {"required": True})], configure)
