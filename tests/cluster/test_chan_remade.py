"""A channel of a replicated topic deleted and made again under the same
name (docs/replication.md "Channel state"; cluster/setrepl.h): on three
nodes, a topic with replication factor 3 and min_insync_replicas 2, 100
messages, a channel that delivers and acks every one of them (each
follower then holds that channel's log, written by its replicator); the
channel deleted through a follower (every node removes its files), made
again, all 100 delivered again on it (a new channel starts at the
bootstrap window, which holds them all) and every other one acked (/v1,
204). A follower is elected (a
clean election, the whole ISR back on every node) and the old leader
SIGKILLed: the new leader delivers every message never acked on the new
channel and none of those whose ack was answered 204.

Before the fix a follower's replicator kept the deleted channel's log
open: its engine removed the files under it, the new channel's records
went on into the unlinked file, and the elected follower made the channel
anew at offset 0 and delivered every acked message again.

Run: python3 tests/cluster/test_chan_remade.py --ternd build/ternd
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TOPIC = "cr"
CHANNEL = "c"
CLIENT = {"X-Tern-Client": "cluster-test"}
VISIBILITY_MS = 120000  # nothing may come back by a lease running out
ARGS = ["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--min-insync-replicas=2", "--member-session-timeout=3s"]
N = 100


class ChanBase(harness.ClusterTest):
    """What the tests of a follower's channel logs share (also
    test_chan_given_back.py): TOPIC's partition 0 on three nodes, the
    channel CHANNEL consumed and acked through /v1."""

    def part(self, node):
        """Partition 0 as node's GET /v1/topics/{t} shows it (None: no
        answer)."""
        status, body = node.request("GET", f"/v1/topics/{TOPIC}")
        if status != 200 or not isinstance(body, dict) or not body.get("partition_stats"):
            return None
        return body["partition_stats"][0]

    def in_sync_everywhere(self, c):
        def whole():
            parts = [self.part(n) for n in c.nodes if n.running()]
            if not parts or any(p is None or not p.get("leader") for p in parts):
                return False
            want = sorted(parts[0].get("replicas", []))
            return len(want) == 3 and all(
                sorted(p.get("isr", [])) == want and p["leader"] == parts[0]["leader"]
                for p in parts)
        wait_until(f"{TOPIC}/0 with its whole ISR under one leader on every node", whole,
                   timeout=180, interval=0.5)

    def node(self, c, node_id):
        return next(n for n in c.nodes if str(n.id) == str(node_id))

    def channels(self, node):
        """The channels of the topic in node's engine (None: no answer)."""
        status, body = node.request("GET", "/stats?format=json")
        if status != 200 or not isinstance(body, dict):
            return None
        for t in body.get("topics", []):
            if t["topic_name"] == TOPIC:
                return sorted(ch["channel_name"] for ch in t["channels"])
        return []

    def consume(self, node, want, deadline_s=120):
        """Messages node delivers on the channel (payload -> receipt
        handle) until want (a set) are all in, or the deadline."""
        got = {}
        deadline = time.monotonic() + deadline_s
        while not want <= set(got) and time.monotonic() < deadline:
            s, b = node.request(
                "GET",
                f"/v1/topics/{TOPIC}/consume?partition=0&channel={CHANNEL}&max=100&wait=2s",
                headers=CLIENT)
            # A new leader not serving yet; an owner just restarted that
            # the node's forward could not reach yet (502, nothing taken).
            if s in (502, 503, 421, None):
                time.sleep(0.5)
                continue
            if s == 204:
                continue
            self.assertEqual(s, 200, b)
            for m in b["messages"]:
                self.assertNotIn(m["payload"], got, "delivered twice by one node")
                got[m["payload"]] = m["receipt_handle"]
        return got

    def ack(self, node, handle):
        """The ack's final status (a 503 is retried: too few in-sync
        replicas for a moment on a busy machine)."""
        deadline = time.monotonic() + 30
        while True:
            s, b = node.request(
                "POST", f"/v1/topics/{TOPIC}/ack?receipt_handle={handle}&channel={CHANNEL}",
                headers=CLIENT)
            if s != 503 or time.monotonic() > deadline:
                return s
            time.sleep(0.2)

    def make_channel(self, c, via):
        s, b = via.request("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")
        self.assertEqual(s, 200, b)
        for n in c.nodes:
            wait_until(f"channel {CHANNEL} on node {n.id}",
                       lambda x=n: CHANNEL in (self.channels(x) or []), timeout=60)

    def make_topic(self, c):
        """The topic (factor 3, min_insync 2) with its whole ISR everywhere,
        the channel made, N messages produced through the leader. Returns
        (leader, every payload)."""
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": TOPIC, "partitions": 1, "replication_factor": 3,
             "min_insync_replicas": 2, "visibility_timeout_ms": VISIBILITY_MS},
            headers=CLIENT)
        self.assertEqual(status, 201, body)
        self.in_sync_everywhere(c)
        lead = self.node(c, self.part(c.nodes[0])["leader"])
        self.make_channel(c, lead)

        def produce():
            s, b = lead.request("POST", f"/v1/topics/{TOPIC}/produce/batch",
                                [{"payload": f"m{i}", "partition": 0} for i in range(N)],
                                headers=CLIENT)
            return s == 202
        wait_until("the leader takes produces", produce, timeout=60, interval=0.5)
        return lead, {f"m{i}" for i in range(N)}

    def elect_and_check(self, c, lead, node, acked, never_acked):
        """node elected (a clean election, the whole ISR back everywhere),
        lead (which holds the leases) killed; node delivers every message
        never acked and none of those acked with 204."""
        def elect():
            self.in_sync_everywhere(c)
            s, b = lead.request("POST", f"/v1/topics/{TOPIC}/partitions/0/leader",
                                {"node": str(node.id)}, headers=CLIENT)
            return b if s == 200 else None
        b = wait_until(f"node {node.id} elected", elect, timeout=240)
        self.assertEqual(b["leader"], str(node.id), b)
        wait_until(f"every node sees node {node.id} lead",
                   lambda: all((self.part(n) or {}).get("leader") == str(node.id)
                               for n in c.nodes if n.running()), timeout=60)
        lead.kill()

        delivered = set(self.consume(node, never_acked, deadline_s=180))
        s, b = node.request(
            "GET", f"/v1/topics/{TOPIC}/consume?partition=0&channel={CHANNEL}&max=100&wait=3s",
            headers=CLIENT)
        if s == 200:
            delivered |= {m["payload"] for m in b["messages"]}
        self.assertEqual(sorted(acked & delivered), [],
                         f"messages acked with 204 delivered again by node {node.id}")
        self.assertEqual(sorted(never_acked - delivered), [],
                         f"messages never acked that node {node.id} did not deliver")


class ChanRemade(ChanBase):
    def test_channel_deleted_and_made_again(self):
        c = self.make(3, args=ARGS).start()
        c.wait_alive(3)
        lead, everything = self.make_topic(c)
        follower = next(n for n in c.nodes if n is not lead)

        # The first channel: every message acked (the followers' replicators
        # write its log).
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        for p in sorted(got):
            self.assertEqual(self.ack(lead, got[p]), 204)

        # Deleted through a follower, on every node; then made again.
        s, b = follower.request("POST", f"/channel/delete?topic={TOPIC}&channel={CHANNEL}")
        self.assertEqual(s, 200, b)
        for n in c.nodes:
            wait_until(f"channel {CHANNEL} gone from node {n.id}",
                       lambda x=n: self.channels(x) is not None and CHANNEL not in self.channels(x),
                       timeout=60)
        self.make_channel(c, lead)

        # The new channel (its bootstrap window: every message again), every
        # other message acked.
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        acked, tried = set(), set()
        for i in range(0, N, 2):
            p = f"m{i}"
            tried.add(p)
            if self.ack(lead, got[p]) == 204:
                acked.add(p)
        self.assertGreater(len(acked), N // 4)
        never_acked = everything - tried

        # A follower elected, the old leader (which holds the leases) killed.
        self.elect_and_check(c, lead, follower, acked, never_acked)


if __name__ == "__main__":
    harness.main()
