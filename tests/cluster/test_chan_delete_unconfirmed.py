"""A channel deletion through a node that does not lead the metastore
whose confirmation fails (docs/cluster.md "Deleting through a
follower"): on three ternd-test nodes with Raft over TLS, a channel made
through the leader, then deleted with nsqd's POST /channel/delete through
another node, L, whose replica receives nothing from the leader while a
hold file exists (TERN_TEST_RAFT_HOLD). The leader commits the deletion
and answers L over node RPC, but L's replica cannot apply it, so L's
confirmation times out: L answers 503 although the deletion is
committed, and leaves its engine's channel alone (deleting it while the
replica still records the channel is what made it come back). Then what
a client retrying does:
- again while L's replica is held: 503 again (the leader has no such
  channel, and L still cannot confirm), the channel still in L's engine
  and not recorded again;
- once the hold is gone and L's catalog has followed the deletion (no
  channel in its engine): 404 CHANNEL_NOT_FOUND, as nsqd answers for a
  channel it does not have.
In the end no node has the channel, in its engine or its records.

Run: python3 tests/cluster/test_chan_delete_unconfirmed.py --ternd build/ternd-test
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TOPIC = "cdu"
CHANNEL = "c"


class ChanDeleteUnconfirmed(harness.ClusterTest):
    def engine_channels(self, node, topic=TOPIC):
        """The topic's channels in node's engine (None: no answer, or no
        such topic there)."""
        status, body = node.request("GET", "/stats?format=json")
        if status != 200 or not isinstance(body, dict):
            return None
        for t in body.get("topics", []):
            if t["topic_name"] == topic:
                return sorted(ch["channel_name"] for ch in t["channels"])
        return None

    def listed(self, node):
        """/channels?topic=: node's engine's channels and its records'."""
        status, body = node.nsq_http("GET", f"/channels?topic={TOPIC}")
        self.assertEqual(status, 200, body)
        return sorted(body["channels"])

    def delete(self, node):
        return node.nsq_http("POST", f"/channel/delete?topic={TOPIC}&channel={CHANNEL}",
                             timeout=120)

    def test_unconfirmed_deletion_then_retried(self):
        c = self.make(3, tls=True)
        holds = {}
        for n in c.nodes:
            env = c.env()
            holds[n.id] = os.path.join(n.dir, "raft-hold")
            env["TERN_TEST_RAFT_HOLD"] = holds[n.id]
            n.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        lead = c.find_leader()
        late = next(n for n in c.nodes if n is not lead)

        status, body = lead.nsq_http("POST", f"/topic/create?topic={TOPIC}")
        self.assertEqual(status, 200, body)
        status, body = lead.nsq_http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")
        self.assertEqual(status, 200, body)
        for n in c.nodes:
            wait_until(f"channel {CHANNEL} on node {n.id}",
                       lambda x=n: CHANNEL in (self.engine_channels(x) or []), timeout=90)

        open(holds[late.id], "w").close()
        status, body = self.delete(late)
        self.assertEqual(status, 503, body)
        # Committed all the same, and L's engine kept the channel.
        wait_until("the deletion in the leader's records",
                   lambda: CHANNEL not in self.listed(lead), timeout=30)
        self.assertIn(CHANNEL, self.engine_channels(late) or [])

        status, body = self.delete(late)
        self.assertEqual(status, 503, body)
        self.assertIn(CHANNEL, self.engine_channels(late) or [])

        os.unlink(holds[late.id])
        wait_until(f"node {late.id}'s catalog following the deletion",
                   lambda: self.engine_channels(late) not in (None, [CHANNEL]), timeout=90)
        status, body = self.delete(late)
        self.assertEqual((status, body), (404, {"message": "CHANNEL_NOT_FOUND"}))

        # Settled: every catalog followed a record made after the hold.
        status, body = lead.nsq_http("POST", "/topic/create?topic=after")
        self.assertEqual(status, 200, body)
        for n in c.nodes:
            wait_until(f"node {n.id}'s catalog following the records after the hold",
                       lambda x=n: self.engine_channels(x, "after") is not None, timeout=60)
        for n in c.nodes:
            self.assertNotIn(CHANNEL, self.engine_channels(n) or [], f"node {n.id}'s engine")
            self.assertNotIn(CHANNEL, self.listed(n), f"node {n.id}'s /channels")


if __name__ == "__main__":
    harness.main()
