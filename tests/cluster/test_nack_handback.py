"""A nack's attempts survive a hand-back of a replicated partition (issue
23; docs/replication.md "Channel state"; queue.h tn_broker_chan_apply):
on three nodes, a topic with replication factor 3 and min_insync_replicas
2; one message published, never delivered by its first leader A. Node B
is elected (a clean election: A stays a replica, its engine keeps the
channel's log and takes B's channel records through it); B delivers the
message twice and nacks it twice (204 each: the REQ records, attempts 1
and 2, are on the ISR). A is elected again: the message must come with
attempts 3.

Before the fix A's engine applied B's REQ records to the channel's cursor
only, and its scan delivered the message as one never delivered
(attempts 1, and a REQ's delay forgotten the same way: the unit test
test_placement's test_chan_apply_req_keeps_delay has that one).

Run: python3 tests/cluster/test_nack_handback.py --ternd build/ternd
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TOPIC = "nh"
CLIENT = {"X-Tern-Client": "cluster-test"}
VISIBILITY_MS = 120000  # nothing may come back by a lease running out
ARGS = ["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--min-insync-replicas=2", "--member-session-timeout=3s"]


class NackHandBack(harness.OnePartition, harness.ClusterTest):
    topic = TOPIC

    def take_one(self, node):
        """The message, from node once it serves (waiting out a take-over
        hold): (attempts, receipt handle)."""
        def one():
            s, b = node.request(
                "GET", f"/v1/topics/{TOPIC}/consume?partition=0&max=1&wait=2s",
                headers=CLIENT)
            if s == 200 and b["messages"]:
                return b["messages"][0]
            self.assertIn(s, (204, 421, 503, None), b)
            return None
        m = wait_until(f"node {node.id} delivers the message", one, timeout=60, interval=0.2)
        self.assertEqual(m["payload"], "m0", m)
        return m["attempts"], m["receipt_handle"]

    def nack(self, node, handle):
        """A nack answered 204 (503, too few in-sync replicas for a moment
        on a busy machine, is retryable: the same nack again)."""
        deadline = time.monotonic() + 30
        while True:
            s, b = node.request(
                "POST", f"/v1/topics/{TOPIC}/ack?receipt_handle={handle}&extend=0",
                headers=CLIENT)
            if s != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(s, 204, b)

    def test_nacks_attempts_kept_at_hand_back(self):
        c = self.make(3, args=ARGS).start()
        c.wait_alive(3)
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": TOPIC, "partitions": 1, "replication_factor": 3,
             "min_insync_replicas": 2, "visibility_timeout_ms": VISIBILITY_MS},
            headers=CLIENT)
        self.assertEqual(status, 201, body)
        self.in_sync_everywhere(c)
        a = self.node(c, self.part(c.nodes[0])["leader"])

        def produce():
            s, _ = a.request("POST", f"/v1/topics/{TOPIC}/produce/batch",
                             [{"payload": "m0", "partition": 0}], headers=CLIENT)
            return s == 202
        wait_until("the leader takes the produce", produce, timeout=60, interval=0.5)

        # B delivers and nacks it twice; A, a replica meanwhile, takes the
        # REQ records through its engine's log of the channel.
        b = next(n for n in c.nodes if n is not a)
        self.elect(c, a, b)
        for want in (1, 2):
            attempts, handle = self.take_one(b)
            self.assertEqual(attempts, want)
            self.nack(b, handle)

        # Handed back to A: its third delivery.
        self.elect(c, b, a)
        attempts, _ = self.take_one(a)
        self.assertEqual(attempts, 3,
                         f"node {a.id} forgot the attempts of the nacks node {b.id} answered")


if __name__ == "__main__":
    harness.main()
