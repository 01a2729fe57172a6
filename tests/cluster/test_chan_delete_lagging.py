"""A channel deleted through a node that does not lead the metastore,
while that node's metastore replica lags the leader (docs/cluster.md
"Deleting through a follower"): on three ternd-test nodes with Raft over
TLS, a channel made through the leader, then deleted with nsqd's
POST /channel/delete through another node, L, whose replica receives
nothing from the leader while a hold file exists (TERN_TEST_RAFT_HOLD;
the leader commits with the third node, and its answer comes to L over
node RPC). L's catalog looks at its replica meanwhile
(TERN_TEST_CATALOG_LAG_MS: a look armed before the hold), and channel
creations take seconds (TERN_TEST_CHANNEL_CREATE_DELAY_MS), so a channel
made from the stale record is still being made when the replica applies
the deletion. Once the hold is gone and every catalog has followed a
change made after it, no node has the channel, neither in its engine
(/stats) nor in its records (/channels), and L never made it again.

Before the fix L deleted its engine's channel as soon as the leader
answered: its catalog, reading the record still in its replica, made the
channel again, and as that creation ended, after the replica applied the
deletion, recorded it anew (CHANNEL_PUT): the channel the user was told
was deleted came back on every node. Now a deletion forwarded to the
leader is answered only once this node's replica has applied it
(tn_meta_confirm), so the engine's part comes after.

Run: python3 tests/cluster/test_chan_delete_lagging.py --ternd build/ternd-test
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TOPIC = "cdl"
CHANNEL = "c"
LAG_MS = 5000
CREATE_DELAY_MS = 4000
LOOKED = "catalog: following the metastore replica (TERN_TEST_CATALOG_LAG_MS)"
REMADE = f"metastore: channel {CHANNEL} of {TOPIC} is recorded; making it here"


class ChanDeleteLagging(harness.ClusterTest):
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

    def create_topic(self, via, name):
        status, body = via.nsq_http("POST", f"/topic/create?topic={name}")
        self.assertEqual(status, 200, body)

    def test_channel_deleted_through_a_lagging_follower(self):
        c = self.make(3, tls=True)
        holds = {}
        for n in c.nodes:
            env = c.env()
            holds[n.id] = os.path.join(n.dir, "raft-hold")
            env["TERN_TEST_RAFT_HOLD"] = holds[n.id]
            env["TERN_TEST_CATALOG_LAG_MS"] = str(LAG_MS)
            env["TERN_TEST_CHANNEL_CREATE_DELAY_MS"] = str(CREATE_DELAY_MS)
            n.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        lead = c.find_leader()
        late = next(n for n in c.nodes if n is not lead)

        self.create_topic(lead, TOPIC)
        status, body = lead.nsq_http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")
        self.assertEqual(status, 200, body)
        for n in c.nodes:
            wait_until(f"channel {CHANNEL} on node {n.id}",
                       lambda x=n: CHANNEL in (self.engine_channels(x) or []), timeout=90)

        # A look of L's catalog armed now and due LAG_MS later: L's
        # catalog has just looked (a topic made through the leader is in
        # its engine), then L's replica applies another record. Armed
        # again if this took too long to leave the hold and the deletion
        # well ahead of the look.
        for attempt in range(5):
            tick = f"tick{attempt}"
            self.create_topic(lead, tick)
            wait_until(f"{tick} in node {late.id}'s engine",
                       lambda: self.engine_channels(late, tick) is not None, timeout=60,
                       interval=0.05)
            looked = time.monotonic()
            self.create_topic(lead, tick + "b")
            wait_until(f"{tick}b in node {late.id}'s replica",
                       lambda: late.request("GET", f"/v1/topics/{tick}b")[0] == 200, timeout=30,
                       interval=0.05)
            if time.monotonic() - looked < LAG_MS / 1000 / 2:
                break
        else:
            self.fail("could not arm the late node's catalog look in time")
        looks = late.log().count(LOOKED)
        made = late.log().count(REMADE)

        # L's replica hears nothing more from the leader; the deletion
        # goes through L (after the fix its answer waits for the hold).
        open(holds[late.id], "w").close()
        answer = {}

        def delete():
            answer["status"] = late.nsq_http(
                "POST", f"/channel/delete?topic={TOPIC}&channel={CHANNEL}", timeout=120)
        t = threading.Thread(target=delete, daemon=True)
        t.start()
        wait_until(f"node {late.id}'s catalog looking while its replica is held",
                   lambda: late.log().count(LOOKED) > looks, timeout=LAG_MS / 1000 + 60,
                   interval=0.05)
        os.unlink(holds[late.id])
        t.join(120)
        self.assertFalse(t.is_alive(), "the deletion still unanswered after the hold")
        status, body = answer["status"]
        self.assertEqual(status, 200, body)

        # Settled: every catalog followed a record made after the hold
        # (and a channel made from the stale record finished being made,
        # with what it proposed as it did).
        remade = late.log().count(REMADE) > made
        if remade:
            wait_until(f"the channel made again on node {late.id} ready",
                       lambda: CHANNEL in (self.engine_channels(late) or []),
                       timeout=CREATE_DELAY_MS / 1000 + 60)
        self.create_topic(lead, "after")
        for n in c.nodes:
            wait_until(f"node {n.id}'s catalog following the records after the hold",
                       lambda x=n: self.engine_channels(x, "after") is not None,
                       timeout=LAG_MS / 1000 + 60)
        if remade:
            # Its record (CHANNEL_PUT) reaches the leader's replica.
            wait_until("the channel made again recorded, or gone",
                       lambda: CHANNEL in self.listed(lead)
                       or CHANNEL not in (self.engine_channels(late) or []),
                       timeout=60)
        for n in c.nodes:
            self.assertNotIn(CHANNEL, self.engine_channels(n) or [], f"node {n.id}'s engine")
            self.assertNotIn(CHANNEL, self.listed(n), f"node {n.id}'s /channels")
        self.assertFalse(remade, f"node {late.id} made the deleted channel again from its "
                                 "replica's stale record")


if __name__ == "__main__":
    harness.main()
