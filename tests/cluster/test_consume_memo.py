"""A queue consume's calls to other nodes (tests/cluster/harness.py;
api/v1/forward.c, "the empty memo" and step 3's POLL_DELAY_MS): an owner
whose probe found nothing is not probed again by a consume with a wait
while the memo holds, but always by one without a wait, and a probe that
finds messages forgets it; a waiting consume's lanes wait alone before its
long poll goes out, so a message this node gets meanwhile answers it with
no call to another node. Both windows are held for the test's length by
ternd-test's TERN_TEST_CONSUME_MEMO_MS and TERN_TEST_CONSUME_POLL_DELAY_MS
(50-60 s), so what the test counts (node RPC CONSUME calls in /metrics) does
not depend on how fast the machine is.

Run: python3 tests/cluster/test_consume_memo.py --ternd build/ternd-test
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
CALLS = 'tern_cluster_rpc_requests_total{op="consume",outcome="ok"}'


class ConsumeMemo(harness.ClusterTest):
    node_args = ["--default-replication-factor=1"]

    def start(self, memo_ms, delay_ms):
        c = self.make(3, args=["--http-max-consume-wait=60s"])
        for node in c.nodes:
            env = c.env()
            env["TERN_TEST_CONSUME_MEMO_MS"] = str(memo_ms)
            env["TERN_TEST_CONSUME_POLL_DELAY_MS"] = str(delay_ms)
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        return c

    def topic(self, c, name):
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": name, "partitions": 3})
        self.assertEqual(status, 201, body)
        want = ["1", "2", "3"]
        wait_until("the owners everywhere", lambda: all(n.owners(name) == want for n in c.nodes))

    def calls(self, node):
        """CONSUME calls node made that were answered (0 before its first)."""
        return node.metric(CALLS) or 0.0

    def consume(self, node, topic, wait):
        status, body = node.request("GET", f"/v1/topics/{topic}/consume?wait={wait}", timeout=90)
        self.assertIn(status, (200, 204), body)
        return body if status == 200 else None

    def produce(self, node, topic, partition, payload):
        status, body = node.request("POST", f"/v1/topics/{topic}/produce?partition={partition}",
                                    payload.encode(), headers=OCTET)
        self.assertEqual(status, 202, body)

    def test_memo_spares_probes_of_waiting_consumes_only(self):
        c = self.start(memo_ms=60000, delay_ms=60000)
        self.topic(c, "m")
        a, b = c.nodes[0], c.nodes[1]  # a owns partition 0, b partition 1
        base = self.calls(a)
        # Nothing anywhere: a consume without a wait probes both other
        # owners, and their "nothing" is remembered.
        self.assertIsNone(self.consume(a, "m", "0s"))
        self.assertEqual(self.calls(a), base + 2)
        # Without a wait the memo is never used: both probed again.
        self.assertIsNone(self.consume(a, "m", "0s"))
        self.assertEqual(self.calls(a), base + 4)
        # With a wait shorter than the long poll's delay the long poll
        # goes out at once (one call); the probes, before it and in its
        # rounds, are spared by the memo.
        self.assertIsNone(self.consume(a, "m", "1s"))
        self.assertEqual(self.calls(a), base + 5)
        # A message at b: a waiting consume through a still takes b as
        # empty (no probe; its long poll goes to the owner of the turn,
        # which may be b: either way at most that one call) ...
        self.produce(b, "m", 1, "at-b")
        before = self.calls(a)
        got = self.consume(a, "m", "1s")
        self.assertLessEqual(self.calls(a), before + 1)
        if got is None:
            # ... and one without a wait probes b and finds it, which
            # forgets b's memo.
            got = self.consume(a, "m", "0s")
        self.assertIsNotNone(got)
        self.assertEqual(got["payload"], "at-b")
        status, body = a.request("POST", f"/v1/topics/m/ack?receipt_handle={got['receipt_handle']}",
                                 None, headers={"X-Tern-Client": "test-consume-memo"})
        self.assertEqual(status, 204, body)

    def test_local_message_during_the_delay_costs_no_call(self):
        c = self.start(memo_ms=0, delay_ms=50000)
        self.topic(c, "d")
        a = c.nodes[0]  # owns partition 0
        got = {}

        def waiter():
            got["m"] = self.consume(a, "d", "58s")

        base = self.calls(a)
        t = threading.Thread(target=waiter)
        t.start()
        try:
            # The consume found nothing here, probed nodes 2 and 3 (two
            # calls) and now waits on its lanes alone for 50 s.
            wait_until("the two probes", lambda: self.calls(a) >= base + 2)
            self.produce(a, "d", 0, "local")
            t.join(timeout=60)
            self.assertFalse(t.is_alive())
        finally:
            t.join()
        self.assertIsNotNone(got.get("m"))
        self.assertEqual(got["m"]["payload"], "local")
        # No long poll went out: the probes were its only calls.
        self.assertEqual(self.calls(a), base + 2)


if __name__ == "__main__":
    harness.main()
