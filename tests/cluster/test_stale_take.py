"""A restarted replica given its partition's leadership back never leads
from a stale log (docs/replication.md, "A stale engine log"), between real
ternd-test processes (tests/cluster/harness.py).

The fault (cluster_decommission's DeadMember case, about 1 run in 6): the
restarted node's engine recovered the partition's old copy and set it
aside; the replica manager, a follower again, opened a log object of its
own on the same files (the engine's topic was being grown, so its
set-aside log was out of sight) and caught up; given the leadership back,
the engine took back its stale object and the node led from its old end:
the records after it were not served, and the followers left the ISR. The
test-only hook TERN_TEST_OWN_LOG makes that state on purpose, for two
topics: with sa=1 the manager's own log beside the engine's is followed by
the close of the engine's (what the manager now does whenever it finds
one); with sb=2 the engine's stale log is left open, so the hand-back
reaches it and the leader's check (leader_take) must refuse to lead from
it and have the partition opened from its files again.

Both topics have their durable channel (default); X delivered and acked
sa's BEFORE messages before its SIGKILL. Restarted, X's engine holds the
channel's log of each partition (a follower's settles go through it), and
the hand-back closes it before it opens the partition's files again, so X
then holds one handle on each channel WAL, not two (the held log was left
open beside the new one before), and delivers none of the acked messages
again.

Steps: 3 nodes, topics sa and sb of 3 partitions and factor 3; X, the
preferred leader of sa/0, also prefers one partition of sb. Records are
acknowledged (min_insync 2), X is SIGKILLed, many more records are
acknowledged by the interim leaders, X restarts with the hook on every
node's environment, copies what it missed (on its own log objects), and
PART_REBALANCE (leader-rebalance-delay 1s) gives both partitions back to
it. Then X leads both from their whole log: every acknowledged record is
read back from X, nothing else is there, the ISR is whole again (no
follower refused to truncate), and produces to X are acknowledged.

Run: python3 tests/cluster/test_stale_take.py --ternd build/ternd-test
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from test_replica import LAG, ReplicaBase  # noqa: E402

BEFORE = 10  # acknowledged before X's SIGKILL: where X's old copy ends
WHILE = 40  # acknowledged while X is down: what X must copy and then serve
CLIENT = {"X-Tern-Client": "cluster-test"}


class StaleTake(ReplicaBase):
    def preferred(self, node, topic, p):
        ps = self.pstats(node, topic, p)
        return ps["replicas"][0] if ps and ps.get("replicas") else None

    def consume(self, node, topic, p, want, deadline_s=60):
        """The default channel's deliveries of topic/p on node (payload ->
        receipt handle) until want (a set) are all in, or the deadline."""
        got = {}
        deadline = time.monotonic() + deadline_s
        while not want <= set(got) and time.monotonic() < deadline:
            s, b = node.request("GET", f"/v1/topics/{topic}/consume?partition={p}&max=100&wait=2s",
                                headers=CLIENT)
            if s in (503, 421, 204, None):  # not serving yet, or nothing new
                time.sleep(0.2)
                continue
            self.assertEqual(s, 200, b)
            for m in b["messages"]:
                got[m["payload"]] = m["receipt_handle"]
        return got

    def ack(self, node, topic, handle):
        """Ack until 204 (503: too few in-sync replicas for a moment)."""
        wait_until(f"an ack on {topic} answered 204", lambda: node.request(
            "POST", f"/v1/topics/{topic}/ack?receipt_handle={handle}", headers=CLIENT)[0] == 204,
            timeout=30)

    def wal_handles(self, node, topic, p, channel):
        """How many of node's open file descriptors are the channel's WAL."""
        end = f"/{topic}/{p}/{channel}.wal"
        n = 0
        for fd in os.listdir(f"/proc/{node.pid}/fd"):
            try:
                n += os.readlink(f"/proc/{node.pid}/fd/{fd}").endswith(end)
            except OSError:
                pass  # closed meanwhile
        return n

    def test_restarted_replica_leads_from_its_whole_log(self):
        c = self.make(3, args=[LAG, "--member-session-timeout=2s",
                               "--cluster-heartbeat-interval=500ms",
                               "--leader-rebalance-delay=1s"])
        env = c.env()
        env["TERN_TEST_OWN_LOG"] = "sa=1,sb=2"
        for node in c.nodes:
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        for topic in ("sa", "sb"):
            status, body = c.nodes[0].request(
                "POST", "/v1/topics", {"name": topic, "partitions": 3, "replication_factor": 3,
                                       "min_insync_replicas": 2})
            self.assertEqual(status, 201, body)
        first = c.nodes[0]
        x_id = wait_until("sa/0's preferred leader", lambda: self.preferred(first, "sa", 0))
        (q,) = wait_until(f"the partition of sb node {x_id} prefers", lambda: next(
            ((p,) for p in range(3) if self.preferred(first, "sb", p) == x_id), None))
        parts = [("sa", 0), ("sb", q)]
        for topic, p in parts:
            wait_until(f"{topic}/{p} led by node {x_id} with 3 in-sync replicas",
                       lambda t=topic, p=p: self.leader(first, t, p) == x_id
                       and self.in_sync(c, t, p, 3))
        x = self.node(c, x_id)
        acked = {part: [] for part in parts}

        def produce(node, part, n):
            for _ in range(n):
                body = f"{part[0]}{part[1]}-{len(acked[part])}"
                self.produce_acked(node, part[0], part[1], body)
                acked[part].append(body)

        for part in parts:
            produce(x, part, BEFORE)
            wait_until(f"{part} with 3 in-sync replicas", lambda t=part[0], p=part[1]:
                       self.in_sync(c, t, p, 3))
        # sa's channel: X delivers and acks the BEFORE messages.
        settled = set(acked[("sa", 0)])
        got = self.consume(x, "sa", 0, settled)
        self.assertEqual(set(got), settled)
        for body in sorted(settled):
            self.ack(x, "sa", got[body])

        # X's SIGKILL: another replica leads each and acknowledges many
        # more records, which X's old copy does not hold.
        x.kill()
        others = [n for n in c.nodes if n is not x]
        for part in parts:
            lead = self.node(c, wait_until(f"a new leader of {part}", lambda t=part[0],
                                           p=part[1]: (lambda l: l if l not in (None, x_id)
                                                       else None)(self.leader(others[0], t, p)),
                                           timeout=60))
            produce(lead, part, WHILE)

        # X comes back: its engine recovers the old copies and sets them
        # aside; its manager follows on logs of its own (the hook), copies
        # the rest, and the preferred-leader rebalance hands both back.
        x.start(env=env)
        x.wait_ready()
        for topic, p in parts:
            wait_until(f"{topic}/{p} led by node {x_id} again, with 3 in-sync replicas",
                       lambda t=topic, p=p: all(self.leader(n, t, p) == x_id for n in c.nodes)
                       and self.in_sync(c, t, p, 3), timeout=120)
        for part in parts:
            produce(x, part, 5)
        for topic, p in parts:
            got = self.wait_all(x, topic, p, acked[(topic, p)])
            self.assertEqual(sorted(got), sorted(acked[(topic, p)]))  # nothing else
            # The leader serves its whole log: its end is past every
            # record acknowledged (each epoch adds a start record).
            self.assertGreaterEqual(self.log_end(x, topic, p), BEFORE + WHILE + 5)
            wait_until(f"{topic}/{p} with 3 in-sync replicas after the hand-back",
                       lambda t=topic, p=p: self.in_sync(c, t, p, 3), timeout=60)
        log = x.log()
        self.assertNotIn("refusing to truncate", "".join(n.log() for n in others))
        # sa: the engine's stale log was closed as soon as the manager's
        # own was open, so the hand-back opened the files; sb: the stale log
        # was served back, and the leader refused it once, then led.
        self.assertIn("partition sa/0: the log set aside here was written through another", log)
        self.assertRegex(log, rf"replica sb/{q}: the engine's log ends at \d+, below epoch \d+'s "
                              r"start \d+: not leading from it")
        self.assertNotIn("opened from its files, the log still ends", log)
        # The default channel's log of each X's engine held was closed
        # before the files were opened again: one handle on its WAL, and
        # sa's acked messages are not delivered again.
        for topic, p in parts:
            self.assertEqual(self.wal_handles(x, topic, p, "default"), 1, (topic, p))
            self.assertIn(f"topic {topic}: closing 1 channel log(s) still held", log)
        rest = set(acked[("sa", 0)]) - settled
        again = self.consume(x, "sa", 0, rest)
        self.assertEqual(set(again), rest)


if __name__ == "__main__":
    harness.main()
