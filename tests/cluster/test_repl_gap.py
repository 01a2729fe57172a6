"""A leader's log with a gap (offsets it never assigned), between real
ternd-test processes (tests/cluster/harness.py): the queue engine's
recovery leaves one (tn_plog_advance) when a channel refers to a tail the
log lost, and a follower whose copy ends inside it was answered nothing
for ever, so it fell out of the ISR and, with min_insync_replicas 2,
writes stopped. The test-only hook TERN_TEST_LEADER_GAP makes every
leader of topic `gap` skip 1000 offsets after its first epoch-start
record. The followers are answered GAP, skip the same offsets and copy
what follows: every produce is acknowledged (min_insync 2), the ISR stays
whole, the leader's SIGKILL loses nothing (the new leader, a follower
that skipped, serves every acknowledged message and makes a gap of its
own, which the remaining follower skips too), and the killed node catches
up across both gaps when it comes back.

Run: python3 tests/cluster/test_repl_gap.py --ternd build/ternd-test
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from test_replica import LAG, ReplicaBase  # noqa: E402

GAP = 1000


class Gap(ReplicaBase):
    def test_followers_skip_the_leaders_gap(self):
        c = self.make(3, args=[LAG, "--member-session-timeout=2s",
                               "--cluster-heartbeat-interval=500ms"])
        env = c.env()
        env["TERN_TEST_LEADER_GAP"] = f"gap={GAP}"
        for node in c.nodes:
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": "gap", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        lead = self.node(c, wait_until("a leader of gap/0", lambda: self.leader(c.nodes[0], "gap", 0)))
        acked = []
        for i in range(20):
            self.produce_acked(lead, "gap", 0, f"a{i}")
            acked.append(f"a{i}")
        # The gap is in the leader's log: its next offset is past it.
        self.assertGreaterEqual(self.log_end(lead, "gap", 0), GAP + 20)
        wait_until("gap/0 with 3 in-sync replicas", lambda: self.in_sync(c, "gap", 0, 3))
        followers = [n for n in c.nodes if n is not lead]
        for f in followers:
            wait_until(f"node {f.id} skipped the gap",
                       lambda f=f: (f.metric("tern_replica_gap_skips_total") or 0) >= 1)
        self.assertEqual(set(self.wait_all(lead, "gap", 0, acked)), set(acked))

        # The leader's SIGKILL: a follower that skipped the gap leads with
        # every acknowledged message, and makes a gap of its own (the hook
        # again), which the last follower skips to acknowledge more.
        lead.kill()
        new_id = wait_until("a new leader of gap/0", lambda: (
            lambda l: l if l not in (None, str(lead.id)) else None)(
                self.leader(followers[0], "gap", 0)), timeout=60)
        new = self.node(c, new_id)
        for i in range(10):
            self.produce_acked(new, "gap", 0, f"b{i}")
            acked.append(f"b{i}")
        self.assertGreaterEqual(self.log_end(new, "gap", 0), 2 * GAP + 30)
        got = self.wait_all(new, "gap", 0, acked)
        self.assertEqual(set(got), set(acked))  # nothing that was never produced

        # The killed node comes back (without the hook), skips the new
        # leader's gap and rejoins the ISR.
        lead.start()
        lead.wait_ready()
        wait_until("gap/0 with 3 in-sync replicas again", lambda: self.in_sync(c, "gap", 0, 3),
                   timeout=90)
        wait_until(f"node {lead.id} skipped the new leader's gap",
                   lambda: (lead.metric("tern_replica_gap_skips_total") or 0) >= 1)
        for i in range(5):
            self.produce_acked(new, "gap", 0, f"c{i}")
            acked.append(f"c{i}")
        self.assertEqual(set(self.wait_all(new, "gap", 0, acked)), set(acked))


if __name__ == "__main__":
    harness.main()
