"""A channel deleted and made again under the same name (its topic kept)
while a node was down: when that node comes back, its files of the old
channel (its position, its acks) are not taken for the new one. Each
channel's stamp (the random id of its metastore record, CHANNEL_PUT) is
kept on disk beside its files (storage-format.md, "Channel stamp"), and
the node's catalog replaces a channel loaded with another stamp than its
record's, as for a topic (test_topic_remade.py).

- Factor 3: 100 messages acked on the channel (each follower's replicator
  writes its log), a follower F stopped, the channel deleted and made
  again, all 100 delivered again on it and every other one acked; F comes
  back, is elected (a clean election, the whole ISR back on every node)
  and the old leader SIGKILLed: F delivers every message never acked on
  the new channel and none of those whose ack was answered 204.
- Factor 1: the partition's owner O stopped after its channel acked every
  message; the channel deleted and made again; O comes back and delivers
  every retained message on the new channel (the first durable channel
  of its topic starts at the retained backlog). Once with O down through
  the deletion and creation, once with O's catalog held
  (TERN_TEST_CATALOG_HOLD, ternd-test) while its metastore replica takes
  both, so that O starts with the new record already in its replica. In
  the first, a consume waiting at O on the old channel when O's catalog
  replaces it (its replica taken for not current until then,
  TERN_TEST_CATALOG_UNCONFIRMED) is answered 503 with Retry-After, not
  404 "deleted" (a CI rehearsal's consume failed on that 404).

Before the fix the stamp was kept in memory only: O (and F) loaded the old
channel from disk and took for it the stamp of the record its replica
held when its catalog first looked: the old one if the replica still
had it (then the channel was replaced, as now), the new one otherwise
(always with the replica current): O then delivered none of the 100 (the
old channel had finished them). F's replaced channel, made while its
partition's log was set aside here, had no log on it: elected, F served
it from offset 0 and delivered the acked messages again.

Run: python3 tests/cluster/test_chan_remade_down.py --ternd build/ternd-test
"""
import http.client
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_chan_remade as base  # noqa: E402
from harness import wait_until  # noqa: E402

REPLACED = f"channel {base.CHANNEL} of {base.TOPIC} is recorded with another stamp"


class ChanRemadeDown(base.ChanBase):
    def remake_without(self, c, down):
        """The channel deleted and made again while down is stopped, through
        the metastore leader (a 503 retried: a new leader catching up after
        the stop); waits for the running nodes."""
        running = [n for n in c.nodes if n is not down]

        def call(path):
            via = c.find_leader()  # any running node, down too when held
            s, b = via.request("POST", path, timeout=60)
            return (s, b) if s != 503 else None
        s, b = wait_until("the deletion taken", lambda: call(
            f"/channel/delete?topic={base.TOPIC}&channel={base.CHANNEL}"), timeout=60)
        self.assertEqual(s, 200, b)
        for n in running:
            wait_until(f"channel {base.CHANNEL} gone from node {n.id}",
                       lambda x=n: self.channels(x) is not None
                       and base.CHANNEL not in self.channels(x), timeout=60)
        s, b = wait_until("the creation taken", lambda: call(
            f"/channel/create?topic={base.TOPIC}&channel={base.CHANNEL}"), timeout=60)
        self.assertEqual(s, 200, b)
        for n in running:
            wait_until(f"channel {base.CHANNEL} on node {n.id}",
                       lambda x=n: base.CHANNEL in (self.channels(x) or []), timeout=60)

    def test_replicated_channel_made_again_while_a_follower_was_down(self):
        c = self.make(3, args=base.ARGS).start()
        c.wait_alive(3)
        lead, everything = self.make_topic(c)
        down = next(n for n in c.nodes if n is not lead)

        # The first channel: every message acked (the followers' replicators
        # write its log), on the follower's disk too before it stops.
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        for p in sorted(got):
            self.assertEqual(self.ack(lead, got[p]), 204)
        self.in_sync_everywhere(c)
        self.assertEqual(down.stop(), 0)

        self.remake_without(c, down)
        # The new channel (the retained backlog: every message again), every
        # other message acked (lead and the other follower: min_insync 2).
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        acked, tried = set(), set()
        for i in range(0, base.N, 2):
            p = f"m{i}"
            tried.add(p)
            if self.ack(lead, got[p]) == 204:
                acked.add(p)
        self.assertGreater(len(acked), base.N // 4)
        never_acked = everything - tried

        down.start()
        c.wait_ready([down])
        # The follower elected, the old leader (which holds the leases)
        # killed.
        self.elect_and_check(c, lead, down, acked, never_acked)
        self.assertIn(REPLACED, down.log())

    def factor_1(self, replica_current):
        """The factor-1 case; replica_current: the owner's metastore replica
        has the deletion and the new record before it stops (its catalog
        held meanwhile, TERN_TEST_CATALOG_HOLD), so it loads the old
        channel's files with the new record already in its replica."""
        c = self.make(3, args=base.ARGS)
        hold = {}
        for n in c.nodes:
            env = c.env()
            hold[n.id] = os.path.join(n.dir, "catalog-hold")
            env["TERN_TEST_CATALOG_HOLD"] = hold[n.id]
            n.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": base.TOPIC, "partitions": 1, "replication_factor": 1,
             "visibility_timeout_ms": base.VISIBILITY_MS},
            headers=base.CLIENT)
        self.assertEqual(status, 201, body)
        owner = wait_until("the partition placed, on every node",
                           lambda: len({str((n.owners(base.TOPIC) or [None])[0])
                                        for n in c.nodes} - {"None", "0"}) == 1
                           and c.nodes[0].owners(base.TOPIC)[0], timeout=30)
        down = self.node(c, owner)
        via = next(n for n in c.nodes if n is not down)
        # 404 until via's catalog made the topic in its engine.
        wait_until("the channel made", lambda: via.request(
            "POST", f"/channel/create?topic={base.TOPIC}&channel={base.CHANNEL}")[0] == 200,
            timeout=60)
        self.make_channel(c, via)
        everything = {f"m{i}" for i in range(base.N)}
        s, b = down.request("POST", f"/v1/topics/{base.TOPIC}/produce/batch",
                            [{"payload": p, "partition": 0} for p in sorted(everything)],
                            headers=base.CLIENT)
        self.assertEqual(s, 202, b)
        got = self.consume(down, everything)
        self.assertEqual(set(got), everything)
        for p in sorted(got):
            self.assertEqual(self.ack(down, got[p]), 204)

        if replica_current:
            if c.find_leader() is down:
                # The owner must not take the deletion itself (its door
                # deletes its engine's channel at once, and nothing is
                # left to replace): a restart hands the metastore's
                # leadership to another node.
                self.assertEqual(down.stop(), 0)
                env = c.env()
                env["TERN_TEST_CATALOG_HOLD"] = hold[down.id]
                down.start(env=env)
                c.wait_ready([down])
                wait_until("another metastore leader", lambda: c.find_leader() is not down,
                           timeout=60)
                # ... which reaches the owner again (its partition's
                # numbers read there), or the deletion's call to it fails.
                wait_until("the owner reachable from the metastore leader", lambda: "next_offset" in (
                    c.find_leader().request("GET", f"/v1/topics/{base.TOPIC}", headers=base.CLIENT)
                    [1].get("partition_stats") or [{}])[0], timeout=60)
            open(hold[down.id], "w").close()
            self.remake_without(c, down)
            # A topic recorded after: once the owner's replica has it, it
            # has the deletion and the new channel record too.
            leader = c.find_leader()
            s, b = leader.request("POST", "/v1/topics", {"name": "marker", "partitions": 1},
                                  headers=base.CLIENT)
            self.assertEqual(s, 201, b)
            wait_until("the owner's replica current", lambda: down.request(
                "GET", "/v1/topics/marker")[0] == 200, timeout=60)
            self.assertIn(base.CHANNEL, self.channels(down) or [])  # the old one, held
            self.assertEqual(down.stop(), 0)
            os.unlink(hold[down.id])
        else:
            self.assertEqual(down.stop(), 0)
            self.remake_without(c, down)
            # Back with its replica taken for not current yet (so its
            # catalog follows no deletion): the old channel loaded, a
            # consume waiting on it, then the catalog replaces it.
            unconfirmed = os.path.join(down.dir, "unconfirmed")
            open(unconfirmed, "w").close()
        env = c.env()
        env["TERN_TEST_CATALOG_HOLD"] = hold[down.id]
        if not replica_current:
            env["TERN_TEST_CATALOG_UNCONFIRMED"] = unconfirmed
        down.start(env=env)
        c.wait_ready([down])
        if not replica_current:
            self.kicked_by_replacement(c, down, unconfirmed)
        # Every retained message on the new channel, through any node.
        delivered = self.consume(via, everything, deadline_s=180)
        self.assertEqual(sorted(everything - set(delivered)), [],
                         "retained messages the new channel did not deliver")
        self.assertIn(REPLACED, down.log())

    def kicked_by_replacement(self, c, owner, unconfirmed):
        """A consume waiting on the old channel at owner when its catalog
        replaces it is answered 503 with Retry-After (come back: the
        channel exists, made anew), not 404 "deleted"."""
        answer = {}

        def wait():
            h = dict(base.CLIENT)
            h["Authorization"] = harness.basic("admin", harness.PASSWORD)
            conn = http.client.HTTPConnection(owner.host, owner.http_port, timeout=60)
            try:
                conn.request("GET", f"/v1/topics/{base.TOPIC}/consume?partition=0"
                             f"&channel={base.CHANNEL}&max=100&wait=30s", headers=h)
                r = conn.getresponse()
                answer["r"] = (r.status, r.getheader("Retry-After"), r.read())
            finally:
                conn.close()
        t = threading.Thread(target=wait)
        t.start()
        try:
            wait_until("the consume parked on the old channel", lambda: any(
                ch.get("channel_name") == base.CHANNEL and ch.get("clients")
                for tp in (owner.request("GET", "/stats?format=json")[1].get("topics") or [])
                if tp.get("topic_name") == base.TOPIC for ch in tp.get("channels") or []),
                timeout=30)
            os.unlink(unconfirmed)
            # A change of the replica has the catalog look again.
            wait_until("a topic recorded", lambda: c.find_leader().request(
                "POST", "/v1/topics", {"name": "marker2", "partitions": 1},
                headers=base.CLIENT)[0] in (201, 409), timeout=60)
        finally:
            if os.path.exists(unconfirmed):
                os.unlink(unconfirmed)
            t.join(70)
        status, retry_after, body = answer["r"]
        self.assertEqual(status, 503, body)
        self.assertIn("made again", body.decode())
        self.assertEqual(retry_after, "1")

    def test_factor_1_channel_made_again_while_its_owner_was_down(self):
        self.factor_1(replica_current=False)

    def test_factor_1_owner_back_with_a_current_replica(self):
        self.factor_1(replica_current=True)

if __name__ == "__main__":
    harness.main()
