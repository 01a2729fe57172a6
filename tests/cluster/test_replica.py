"""Replicated partitions between real ternd processes (tests/cluster/harness.py):
followers copy their leader's log through FETCH, a produce is acknowledged
once the in-sync replicas flushed it, the SIGKILL of a leader loses no
acknowledged message (a follower takes over), the killed node catches up
when it comes back and rejoins the in-sync replicas, and takes its
partition back when it is the preferred replica (the interim leader steps
down while running); a leader whose ISR shrank below min_insync_replicas
(one follower stopped with min_insync 3, or both followers stopped in a
five-member cluster so the metastore keeps its quorum) refuses produces
until the followers are back; a leader stopped while its epoch-start record
waits for its followers exits 0.

Run: python3 tests/cluster/test_replica.py --ternd build/ternd
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
LAG = "--replica-lag-time-max=2s"


class ReplicaBase(harness.ClusterTest):
    """The helpers of the replicated-partition tests (also
    tests/cluster/test_repl_gap.py's)."""

    def node(self, c, node_id):
        return [n for n in c.nodes if str(n.id) == str(node_id)][0]

    def start(self, n=3, args=()):
        c = self.make(n, args=[LAG, *args]).start()
        c.wait_alive(n)
        return c

    def pstats(self, node, topic, p):
        """Partition p's entry of node's GET /v1/topics/{topic}, or None."""
        status, body = node.request("GET", f"/v1/topics/{topic}")
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"][p]

    def log_end(self, node, topic, p):
        """Partition p's next offset as node's GET shows it, once the
        leader's log is open (a just-placed partition shows none yet)."""
        return wait_until(f"{topic}/{p}'s log end on node {node.id}", lambda: (
            self.pstats(node, topic, p) or {}).get("next_offset"))

    def leader(self, node, topic, p):
        ps = self.pstats(node, topic, p)
        return ps.get("leader") if ps else None

    def produce(self, leader, topic, p, body, timeout=10):
        return leader.request("POST", f"/v1/topics/{topic}/produce?partition={p}",
                              body.encode(), headers=OCTET, timeout=timeout)

    def produce_acked(self, leader, topic, p, body, deadline=60):
        """Produce until acknowledged (2xx); a new leader answers 503 until
        its epoch started."""
        end = time.monotonic() + deadline
        while True:
            status, answer = self.produce(leader, topic, p, body)
            if status is not None and 200 <= status < 300:
                return
            self.assertLess(time.monotonic(), end, (status, answer))
            time.sleep(0.1)

    def read_all(self, node, topic, p, upto):
        """The payloads of partition p's offsets [0, upto) on node (replay
        reads; control records are not messages)."""
        out = []
        for off in range(upto):
            status, m = node.request("GET",
                                     f"/v1/topics/{topic}/consume?partition={p}&offset={off}")
            if status == 200 and m.get("offset") == off:
                out.append(m["payload"])
        return out

    def wait_all(self, node, topic, p, acked):
        """Every acknowledged payload readable on node (a produce that node
        took before it knew it leads went through its ingress log, and
        reaches the log a moment later); returns what the log holds."""
        def read():
            got = self.read_all(node, topic, p, self.log_end(node, topic, p))
            return got if all(b in got for b in acked) else None
        try:
            return wait_until(f"every acknowledged message of {topic}/{p} on node {node.id}",
                              read, timeout=60)
        except AssertionError:
            got = self.read_all(node, topic, p, self.log_end(node, topic, p))
            self.assertEqual([b for b in acked if b not in got], [], "acknowledged messages lost")
            raise

    def in_sync(self, c, topic, p, n):
        """Every running node shows partition p with n ISR members."""
        for node in c.running():
            ps = self.pstats(node, topic, p)
            if ps is None or len(ps.get("isr", [])) != n:
                return False
        return True


class Replica(ReplicaBase):
    def test_copy_failover_and_rejoin(self):
        # The preferred replica takes its partition back a second after it
        # is in sync again: the interim leader steps down while running.
        c = self.start(args=["--leader-rebalance-delay=1s"])
        status, body = c.nodes[0].request(
            "POST", "/v1/topics", {"name": "r", "partitions": 2, "replication_factor": 3})
        self.assertEqual(status, 201, body)
        wait_until("a leader per partition everywhere",
                   lambda: all(self.leader(n, "r", p) for n in c.nodes for p in range(2)))
        acked = {0: [], 1: []}
        for p in range(2):
            lead = self.node(c, self.leader(c.nodes[0], "r", p))
            for i in range(20):
                body = f"p{p}-{i}"
                self.produce_acked(lead, "r", p, body)
                acked[p].append(body)
        # Every follower copied every record: the ISR is whole and the
        # leaders see no lag.
        for p in range(2):
            wait_until(f"r/{p} with 3 in-sync replicas", lambda p=p: self.in_sync(c, "r", p, 3))
        for node in c.nodes:
            wait_until(f"node {node.id}'s followers caught up",
                       lambda n=node: n.metric("tern_replica_lag_records") == 0)
        # SIGKILL the leader of partition 0: a follower takes over with
        # everything acknowledged.
        old = self.node(c, self.leader(c.nodes[0], "r", 0))
        old.kill()
        others = [n for n in c.nodes if n is not old]
        new_id = wait_until("a new leader of r/0", lambda: (
            lambda l: l if l not in (None, str(old.id)) else None)(self.leader(others[0], "r", 0)),
            timeout=60)
        new = self.node(c, new_id)
        for i in range(20, 30):
            body = f"p0-{i}"
            self.produce_acked(new, "r", 0, body)
            acked[0].append(body)
        got = self.wait_all(new, "r", 0, acked[0])
        self.assertEqual(set(got), set(acked[0]))  # nothing that was never produced
        # The killed node comes back, copies what it missed and rejoins.
        old.start()
        old.wait_ready()
        wait_until("r/0 with 3 in-sync replicas again", lambda: self.in_sync(c, "r", 0, 3),
                   timeout=90)
        wait_until("the new leader's followers caught up",
                   lambda: new.metric("tern_replica_lag_records") == 0)
        # The preferred replica (the first leader) leads again once it has
        # been in sync a while; the interim leader follows it, and nothing
        # acknowledged is lost either way.
        wait_until("r/0 led by its preferred replica again",
                   lambda: self.leader(new, "r", 0) == str(old.id), timeout=90)
        for i in range(30, 35):
            body = f"p0-{i}"
            self.produce_acked(old, "r", 0, body)
            acked[0].append(body)
        got = self.wait_all(old, "r", 0, acked[0])
        self.assertEqual(set(got), set(acked[0]))
        wait_until("r/0 with 3 in-sync replicas after the move", lambda: self.in_sync(c, "r", 0, 3),
                   timeout=90)
        # Partition 1 kept its history too.
        lead1 = self.node(c, self.leader(c.nodes[0], "r", 1))
        self.assertEqual(set(self.wait_all(lead1, "r", 1, acked[1])), set(acked[1]))

    def test_isr_shrink_refuses_then_recovers(self):
        # min_insync 3 of 3: one stopped follower is enough to fall below
        # it (stopping both followers of a 3-node cluster would stop the
        # metastore's quorum too, and no ISR change could be recorded).
        c = self.start()
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": "s", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 3})
        self.assertEqual(status, 201, body)
        wait_until("a leader of s/0", lambda: self.leader(c.nodes[0], "s", 0))
        lead = self.node(c, self.leader(c.nodes[0], "s", 0))
        self.produce_acked(lead, "s", 0, "before")
        wait_until("s/0 with 3 in-sync replicas", lambda: self.in_sync(c, "s", 0, 3))
        follower = [n for n in c.nodes if n is not lead][0]
        os.kill(follower.pid, signal.SIGSTOP)
        try:
            def refused():
                status, answer = self.produce(lead, "s", 0, "during", timeout=3)
                return status == 503 and "in-sync" in str(answer)
            wait_until("a produce refused for want of in-sync replicas", refused, timeout=60)
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        wait_until("s/0 with 3 in-sync replicas again", lambda: self.in_sync(c, "s", 0, 3),
                   timeout=90)
        self.produce_acked(lead, "s", 0, "after")
        self.wait_all(lead, "s", 0, ["before", "after"])

    def test_both_followers_stopped(self):
        # Five members, a partition on three of them: with both of its
        # followers stopped, three metastore voters remain, so the ISR
        # shrink is recorded and the leader refuses produces (min_insync 2).
        c = self.start(n=5)
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": "b", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        wait_until("a leader of b/0", lambda: self.leader(c.nodes[0], "b", 0))
        lead = self.node(c, self.leader(c.nodes[0], "b", 0))
        self.produce_acked(lead, "b", 0, "before")
        wait_until("b/0 with 3 in-sync replicas", lambda: self.in_sync(c, "b", 0, 3))
        replicas = self.pstats(lead, "b", 0)["replicas"]
        followers = [self.node(c, r) for r in replicas if r != str(lead.id)]
        self.assertEqual(len(followers), 2)
        for f in followers:
            os.kill(f.pid, signal.SIGSTOP)
        try:
            def refused():
                status, answer = self.produce(lead, "b", 0, "during", timeout=3)
                return status == 503 and "in-sync" in str(answer)
            wait_until("a produce refused for want of in-sync replicas", refused, timeout=60)
        finally:
            for f in followers:
                os.kill(f.pid, signal.SIGCONT)
        wait_until("b/0 with 3 in-sync replicas again",
                   lambda: len((self.pstats(lead, "b", 0) or {}).get("isr", [])) == 3,
                   timeout=90)
        self.produce_acked(lead, "b", 0, "after")
        self.wait_all(lead, "b", 0, ["before", "after"])

    def test_stop_while_the_epoch_start_waits(self):
        # A leader stopped while its epoch-start record waits for followers
        # that never fetch exits 0: closing the replica manager fails that
        # append, whose completion must not free the partition under the
        # close loop (it did: a double free). Five members so that the
        # metastore keeps its quorum with t/0's followers stopped; long
        # lag and session timeouts keep them in the ISR and alive meanwhile.
        c = self.make(5, args=["--replica-lag-time-max=120s",
                               "--member-session-timeout=120s"]).start()
        c.wait_alive(5)
        # Placement (replication.md): partition 0 on the first three
        # members by id, the first live one leading.
        lead, followers = c.nodes[0], c.nodes[1:3]
        for f in followers:
            os.kill(f.pid, signal.SIGSTOP)
        try:
            status, body = lead.request(
                "POST", "/v1/topics",
                {"name": "t", "partitions": 1, "replication_factor": 3,
                 "min_insync_replicas": 2}, timeout=60)
            self.assertEqual(status, 201, body)
            wait_until("node 1 leading t/0",
                       lambda: "replica t/0: leading epoch 1" in lead.log(), 60)
            self.assertEqual(sorted(self.pstats(lead, "t", 0)["replicas"]), ["1", "2", "3"])
            self.assertEqual(lead.stop(), 0, lead.log())
        finally:
            for f in followers:
                os.kill(f.pid, signal.SIGCONT)


if __name__ == "__main__":
    harness.main()
