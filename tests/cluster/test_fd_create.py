"""A topic created through one node whose partition's owner is another
node at its descriptor limit (tests/e2e/test_fdlimit.py: creations stop
short of it): the creation is recorded and answered 201 by the node that
took it, the owner cannot open the partition then, and makes it by itself
once descriptors free up there (trying again every second), with no
other change of the metastore to prompt it, and says so in its log
(before, the refusal was silent and only the next metastore change or a
restart made the partition: with none, it stayed missing and its
produces waited in the ingress log).

Node 2 runs with RLIMIT_NOFILE at 128. The test holds NSQ connections to
it up to the doors' mark (three quarters of the limit), then creates
3-partition topics (partition 1 is node 2's, factor 1) through node 1 until
node 2 cannot make one, or its channel (the limit meets whichever comes
first); closing the connections frees the descriptors.

And a creation the asked node itself cannot make for its descriptors
after the record (room for the check, not for every partition's files):
the record is taken back and every node's files removed before the 503,
so the retry creates the topic.

Run: python3 tests/cluster/test_fd_create.py --ternd build/ternd
"""
import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

NOFILE = 128
OCTET = {"Content-Type": "application/octet-stream"}


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


class FdCreate(harness.ClusterTest):
    node_args = ["--default-replication-factor=1"]

    def made(self, node, topic):
        """Whether node's view of topic shows partition 1 (node 2's) open."""
        st, body = node.request("GET", f"/v1/topics/{topic}")
        if st != 200 or not isinstance(body, dict):
            return False
        return "error" not in body["partition_stats"][1]

    def has_channel(self, node, topic):
        """Whether node made topic's channel default, as its log says (its
        HTTP door refuses connections near the descriptor limit)."""
        return f"channel default of {topic} created" in node.log()

    def hold_connections(self, node):
        """NSQ connections to node up to its doors' mark (three quarters
        of NOFILE), closed at the end of the test: the list of sockets."""
        fds = lambda: len(os.listdir(f"/proc/{node.pid}/fd"))  # noqa: E731
        st, info = node.nsq_http("GET", "/info")
        self.assertEqual(st, 200, info)
        held = []
        self.addCleanup(lambda: [s.close() for s in held])
        for _ in range(NOFILE):
            if fds() >= NOFILE * 3 // 4 - 2:
                break
            held.append(socket.create_connection(("127.0.0.1", info["tcp_port"]), timeout=10))
            held[-1].sendall(b"  V2")
            time.sleep(0.01)
        self.assertGreater(len(held), 10)
        return held

    def test_a_partition_refused_for_descriptors_is_made_once_they_free(self):
        c = self.make(3)
        n1, n2, n3 = c.nodes
        n1.start()
        n2.start(preexec_fn=low_nofile)
        n3.start()
        c.wait_ready()
        c.wait_alive(3)
        held = self.hold_connections(n2)
        missing = None
        for i in range(NOFILE // 2):
            name = f"fdc{i}"
            st, body = n1.request("POST", "/v1/topics", {"name": name, "partitions": 3})
            self.assertEqual(st, 201, body)
            try:
                wait_until(f"{name}/1 open on node 2, with its channel",
                           lambda t=name: self.made(n1, t) and self.has_channel(n2, t), 5)
            except AssertionError:
                missing = name
                break
        self.assertIsNotNone(missing, "node 2 made every topic")
        # The limit met either the partition or, the partition made, its
        # channel (a few descriptors more): each is refused, said so, and
        # made once they free up.
        if self.made(n1, missing):
            what = f"channel default of {missing}"
        else:
            what = f"topic {missing}"
            st, body = n1.request("GET", f"/v1/topics/{missing}")
            self.assertIn("owner has no such topic", body["partition_stats"][1]["error"], body)
        time.sleep(2)
        self.assertFalse(self.made(n1, missing) and self.has_channel(n2, missing))
        # Descriptors free up on node 2, and nothing else changes.
        for s in held:
            s.close()
        held.clear()
        wait_until(f"{missing}/1 made on node 2 once descriptors freed, with its channel",
                   lambda: self.made(n1, missing) and self.has_channel(n2, missing), 5)
        # Said when refused, not only seen in the stats.
        self.assertIn(f"metastore: {what} is recorded but cannot be made here now: too many open "
                      "files", n2.log())
        st, body = n1.request("POST", f"/v1/topics/{missing}/produce?partition=1", b"made",
                              headers=OCTET)
        self.assertEqual(st, 202, body)

        def consumed():
            st, body = n1.request("GET", f"/v1/topics/{missing}/consume?partition=1&wait=1s")
            return body if st == 200 else None
        got = wait_until("the produce consumed", consumed, 30)
        self.assertEqual(got["payload"] if isinstance(got, dict) else got, "made", got)

    def test_a_creation_refused_where_it_was_asked_keeps_no_record(self):
        # Node 1 (the one asked) has room for the check before the record,
        # not for its share of 90 partitions' files: the 503 comes once
        # the record is taken back and every node removed what it made, so
        # no node keeps the topic and the retry creates it.
        c = self.make(3)
        n1, n2, n3 = c.nodes
        n1.start(preexec_fn=low_nofile)
        n2.start()
        n3.start()
        c.wait_ready()
        c.wait_alive(3)
        held = self.hold_connections(n1)
        st, body = n1.request("POST", "/v1/topics", {"name": "wide", "partitions": 90})
        self.assertEqual(st, 503, body)
        self.assertIn("too many open files", body["error"])
        # Refused after the record (the check before it had room).
        self.assertIn("topic wide: creating it in the queue engine failed", n1.log())
        for node in c.nodes:
            wait_until(f"node {node.id} without the record", lambda n=node: n.request(
                "GET", "/v1/topics/wide")[0] == 404, 10)
            wait_until(f"node {node.id} without the topic's files",
                       lambda n=node: not os.path.exists(os.path.join(n.data, "topics", "wide")),
                       10)
        for sock in held:
            sock.close()
        held.clear()
        st, body = n1.request("POST", "/v1/topics", {"name": "wide", "partitions": 3})
        self.assertEqual(st, 201, body)
        wait_until("every partition of the retried topic open", lambda: all(
            self.made_all(node, "wide") for node in c.nodes), 20)

    def made_all(self, node, topic):
        st, body = node.request("GET", f"/v1/topics/{topic}")
        return st == 200 and all("error" not in p for p in body["partition_stats"])


if __name__ == "__main__":
    harness.main()
