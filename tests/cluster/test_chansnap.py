"""Channel state for a member that joins the ISR later (issue 23, fault
case 06; cluster/setrepl.h CHAN_SNAP, docs/replication.md "Channel
state"): on three nodes, a topic with replication factor 3 and
min_insync_replicas 2; 200 messages published to its partition's leader,
all 200 delivered and every other one acked (/v1, 204 answers: the
channel's acked-ahead set holds them, its frontier stays low); a follower
is SIGKILLed, its data directory removed, and it is started again (a new
incarnation: it is fenced out of the ISR). Once it is back in the ISR on
every node, it is made the leader (a clean election) and the old leader,
which held the leases, is SIGKILLed. Everything the wiped node then
delivers is consumed: none of the messages whose ack was answered 204
comes back (the node got the channel's state as a snapshot before the ISR
took it in), and every message never acked is delivered.

Without the snapshot the wiped node rejoined the ISR with its record log
only and, elected, delivered again every acked message.

A second test does the same on five nodes (the partition on three) with
the leader killed as well while the wiped node is down: the last replica
leads with an ISR of itself, below min_insync, and serves only once the
wiped node joined through the channel gate.

Run: python3 tests/cluster/test_chansnap.py --ternd build/ternd
"""
import os
import shutil
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TOPIC = "cs"
CLIENT = {"X-Tern-Client": "cluster-test"}
VISIBILITY_MS = 120000  # nothing may come back by a lease running out
ARGS = ["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--min-insync-replicas=2",
        "--member-session-timeout=3s"]
N = 200


class ChanSnap(harness.OnePartition, harness.ClusterTest):
    topic = TOPIC
    isr_timeout = 180
    elect_timeout = 240

    def consume(self, node, want, deadline_s=120):
        """Messages node delivers (payload -> receipt handle) until want
        (a set) are all in, or the deadline; ones outside want too."""
        got = {}
        deadline = time.monotonic() + deadline_s
        while not want <= set(got) and time.monotonic() < deadline:
            s, b = node.request(
                "GET", f"/v1/topics/{TOPIC}/consume?partition=0&max=100&wait=2s",
                headers=CLIENT)
            if s in (503, 421, None):  # a new leader not serving yet
                time.sleep(0.5)
                continue
            if s == 204:
                continue
            self.assertEqual(s, 200, b)
            for m in b["messages"]:
                self.assertNotIn(m["payload"], got, "delivered twice by one node")
                got[m["payload"]] = m["receipt_handle"]
        return got

    def setup_topic(self, c):
        """The topic made, its ISR whole everywhere, N messages produced
        through the leader, all delivered, every other one acked. Returns
        (leader, acked: answered 204, never_acked)."""
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": TOPIC, "partitions": 1, "replication_factor": 3,
             "min_insync_replicas": 2, "visibility_timeout_ms": VISIBILITY_MS},
            headers=CLIENT)
        self.assertEqual(status, 201, body)
        self.in_sync_everywhere(c)
        lead = self.node(c, self.part(c.nodes[0])["leader"])

        def produce():
            s, b = lead.request("POST", f"/v1/topics/{TOPIC}/produce/batch",
                                [{"payload": f"m{i}", "partition": 0} for i in range(N)],
                                headers=CLIENT)
            return s == 202
        wait_until("the leader takes produces", produce, timeout=60, interval=0.5)

        # Every message delivered; every other one acked, out of order.
        everything = {f"m{i}" for i in range(N)}
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        acked, tried, answers = set(), set(), {}
        for i in range(0, N, 2):
            p = f"m{i}"
            tried.add(p)
            # A 503 (too few in-sync replicas for a moment, on a busy
            # machine) is retryable: the same ack again.
            deadline = time.monotonic() + 30
            while True:
                s, b = lead.request(
                    "POST", f"/v1/topics/{TOPIC}/ack?receipt_handle={got[p]}", headers=CLIENT)
                answers[s] = b
                if s != 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            if s == 204:
                acked.add(p)
        self.assertGreater(len(acked), N // 4, f"too few acks answered 204: {answers}")
        return lead, acked, everything - tried

    def check_delivers(self, node, acked, never_acked):
        """What node delivers: every message never acked, and no message
        whose ack was answered 204."""
        delivered = set(self.consume(node, never_acked, deadline_s=180))
        s, b = node.request("GET", f"/v1/topics/{TOPIC}/consume?partition=0&max=100&wait=3s",
                            headers=CLIENT)
        if s == 200:
            delivered |= {m["payload"] for m in b["messages"]}
        self.assertEqual(sorted(acked & delivered), [],
                         f"messages acked with 204 delivered again by node {node.id}")
        self.assertEqual(sorted(never_acked - delivered), [],
                         f"messages never acked that node {node.id} did not deliver")

    def test_wiped_follower_rejoins_with_channel_state(self):
        c = self.make(3, args=ARGS).start()
        c.wait_alive(3)
        lead, acked, never_acked = self.setup_topic(c)

        # A follower loses its disk and comes back: a new incarnation, out
        # of the ISR until it caught up, the channel's state included.
        wiped = next(n for n in c.nodes if n is not lead)
        wiped.kill()
        shutil.rmtree(wiped.data)
        wait_until(f"node {wiped.id} out of the ISR",
                   lambda: str(wiped.id) not in (self.part(lead) or {}).get("isr", [str(wiped.id)]),
                   timeout=120, interval=0.5)
        wiped.start()
        wiped.wait_ready(120)

        # Back in the ISR everywhere: make it the leader, then kill the old
        # leader, which held the leases.
        self.elect(c, lead, wiped)
        lead.kill()
        self.check_delivers(wiped, acked, never_acked)

    def test_rejoins_a_leader_that_cannot_serve_yet(self):
        """Five nodes (a metastore quorum without two of the replicas),
        the partition on three of them. A follower is wiped and its
        leader killed: the last replica leads with an ISR of one, below
        min_insync, so it does not serve until a follower is added, and a
        follower is added only with its channels caught up. The wiped node
        (started again) must get there; then the old leader comes back,
        the wiped node is elected, the others' leader is killed, and it
        delivers no acked message and every unacked one."""
        c = self.make(5, args=ARGS).start()
        c.wait_alive(5)
        lead, acked, never_acked = self.setup_topic(c)
        replicas = self.part(lead)["replicas"]
        wiped = next(n for n in c.nodes if str(n.id) in replicas and n is not lead)
        last = next(n for n in c.nodes if str(n.id) in replicas and n not in (lead, wiped))
        wiped.kill()
        shutil.rmtree(wiped.data)
        lead.kill()
        wait_until(f"node {last.id} leads with an ISR of itself", lambda: (
            lambda p: p is not None and p.get("leader") == str(last.id) and
            p.get("isr") == [str(last.id)])(self.part(last)), timeout=120, interval=0.5)
        wiped.start()
        wiped.wait_ready(120)
        wait_until(f"node {wiped.id} back in the ISR of node {last.id}", lambda: sorted(
            (self.part(last) or {}).get("isr", [])) == sorted([str(last.id), str(wiped.id)]),
            timeout=180, interval=0.5)
        lead.start()
        lead.wait_ready(120)
        self.elect(c, last, wiped)
        last.kill()
        self.check_delivers(wiped, acked, never_acked)


if __name__ == "__main__":
    harness.main()
