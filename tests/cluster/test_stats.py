"""Partition stats gathered from their owners (GET /v1/topics/{t}, node RPC
PSTATS) across real ternd nodes (tests/cluster/harness.py): on 3 nodes, a
3-partition topic with messages produced into each partition (through the
owner and through other nodes) shows the same numbers for every partition
through every node, next_offset being what was produced, and
?partition=N only that one. An owner stopped with SIGSTOP is "owner
unreachable" (the answer still 200, the others' numbers there), then
"owner is down" once the cluster marks it dead, and its numbers come back
after SIGCONT; an owner killed with SIGKILL is unreachable or down the
same way, and after its restart every node shows its numbers again.

Each failure case is asserted on an answer made while the metastore
replica of the node asked held the liveness the case needs (read just
before and just after) and the other owners answered in time: a loaded
machine can delay a registration past dead-after and mark a live member
dead for a while, or a live owner past the PSTATS timeout, and such an
answer is not the case's.

Run: python3 tests/cluster/test_stats.py --ternd build/ternd
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
NUMBERS = ("segments", "oldest_offset", "next_offset", "high_watermark", "size_bytes")
# Messages produced into partitions 0, 1 and 2: distinct, so a number shown
# for the wrong partition cannot pass.
COUNTS = [3, 5, 2]


class Stats(harness.ClusterTest):
    # Factor 1: owners and the ingress log; next_offset is the count produced
    # (no control records).
    node_args = ["--default-replication-factor=1"]

    def stats(self, node, topic, query=""):
        """partition_stats through node (asserting the answer is 200)."""
        status, body = node.request("GET", f"/v1/topics/{topic}{query}")
        self.assertEqual(status, 200, body)
        return body["partition_stats"]

    def settled(self, node, topic):
        """partition_stats through node when every entry has its numbers
        and next_offset is what was produced; else None."""
        entries = self.stats(node, topic)
        if len(entries) != len(COUNTS):
            return None
        for p, e in enumerate(entries):
            if "error" in e or e.get("next_offset") != COUNTS[p] or \
                    e.get("high_watermark") != COUNTS[p]:
                return None
        return entries

    def check_entry(self, e, p):
        self.assertEqual(e["index"], p, e)
        self.assertEqual(e["owner_node"], str(p + 1), e)
        self.assertNotIn("error", e)
        self.assertEqual(e["next_offset"], COUNTS[p], e)
        self.assertEqual(e["high_watermark"], COUNTS[p], e)
        self.assertEqual(e["oldest_offset"], 0, e)
        self.assertGreaterEqual(e["segments"], 1, e)
        self.assertGreater(e["size_bytes"], 0, e)

    def without_numbers(self, e, p, error):
        self.assertEqual(e, {"index": p, "owner_node": str(p + 1), "error": error})

    def members(self, node):
        """{node id: status} as node's metastore replica has them; None
        when it does not answer 200."""
        status, body = node.request("GET", "/v1/cluster/members")
        if status != 200:
            return None
        return {str(m["id"]): m["status"] for m in body["members"]}

    def stats_when(self, node, topic, alive, dead=()):
        """partition_stats through node when its replica marks every node
        of alive alive and every node of dead dead both just before and
        just after the read (so the answer was made in that state); else
        None."""
        want = {str(n.id): "alive" for n in alive}
        want.update({str(n.id): "dead" for n in dead})

        def held():
            m = self.members(node)
            return m is not None and all(m.get(i) == s for i, s in want.items())

        if not held():
            return None
        entries = self.stats(node, topic)
        return entries if held() else None

    def failure_case(self, node, topic, p, errors, alive, dead=()):
        """stats_when's entries when partition p's says one of errors and
        every other entry came without one (a live owner slower than the
        PSTATS timeout on a loaded machine is rightly "owner unreachable"
        for that read: not the case asked for); else None."""
        entries = self.stats_when(node, topic, alive, dead)
        if entries is None or entries[p].get("error") not in errors:
            return None
        if any("error" in e for q, e in enumerate(entries) if q != p):
            return None
        return entries

    def test_same_numbers_everywhere_and_owner_failures(self):
        c = self.make(3, args=["--cluster-heartbeat-interval=500ms",
                               "--cluster-dead-after=8s"]).start()
        c.wait_alive(3)
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "st", "partitions": 3})
        self.assertEqual(status, 201, body)
        for node in c.nodes:
            wait_until(f"the owners of st on node {node.id}",
                       lambda n=node: [e["owner_node"] for e in self.stats(n, "st")] ==
                       ["1", "2", "3"], 30)
        # Partition p lives on node p + 1. Its messages go in through every
        # node in turn: the owner's own log, or another node's ingress log
        # and dispatcher.
        for p, count in enumerate(COUNTS):
            for i in range(count):
                via = c.nodes[(p + i) % 3]
                status, answer = wait_until(
                    f"a produce to partition {p} through node {via.id}",
                    lambda v=via, q=p, k=i: (lambda r: r if r[0] == 202 else None)(
                        v.request("POST", f"/v1/topics/st/produce?partition={q}",
                                  f"m{q}.{k}".encode(), headers=OCTET)), 30)
                self.assertEqual(status, 202, answer)
        # Through every node: every partition's numbers, next_offset what
        # was produced, and the same entries everywhere.
        seen = []
        for node in c.nodes:
            entries = wait_until(f"every partition's numbers through node {node.id}",
                                 lambda n=node: self.settled(n, "st"), 60)
            for p, e in enumerate(entries):
                self.check_entry(e, p)
            seen.append(entries)
        self.assertEqual(seen[0], seen[1])
        self.assertEqual(seen[0], seen[2])
        # ?partition=N gathers only that one, from its owner.
        [one] = self.stats(c.nodes[0], "st", "?partition=1")
        self.assertEqual(one, seen[0][1])
        [one] = self.stats(c.nodes[1], "st", "?partition=2")
        self.assertEqual(one, seen[0][2])

        # SIGSTOP the owner of partition 1: unreachable before it is down.
        # dead-after is 8 s so that, however slow the machine, the stopped
        # member stays alive in the metastore for several PSTATS timeouts
        # (2 s): long enough to see it unreachable.
        stopped, asker = c.nodes[1], c.nodes[0]
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            entries = wait_until(
                "partition 1's owner unreachable while every member is alive",
                lambda: self.failure_case(asker, "st", 1, ("owner unreachable",),
                                          alive=c.nodes), 60)
            self.without_numbers(entries[1], 1, "owner unreachable")
            self.check_entry(entries[0], 0)
            self.check_entry(entries[2], 2)
            # Once the replica asked marks it dead, its entry says so at once.
            entries = wait_until(
                "partition 1's owner marked down",
                lambda: self.failure_case(c.nodes[2], "st", 1, ("owner is down",),
                                          alive=[c.nodes[0], c.nodes[2]], dead=[stopped]), 120)
            self.without_numbers(entries[1], 1, "owner is down")
            self.check_entry(entries[0], 0)
            self.check_entry(entries[2], 2)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        wait_until("the stopped member alive again", lambda: asker.alive_members() == 3, 120)
        for node in c.nodes:
            wait_until(f"every partition's numbers again through node {node.id}",
                       lambda n=node: self.settled(n, "st"), 60)

        # SIGKILL the owner of partition 2: the others' numbers stay, and
        # its entry says why it has none.
        killed = c.nodes[2]
        killed.kill()
        entries = wait_until(
            "partition 2's owner unreachable or down while the others are alive",
            lambda: self.failure_case(asker, "st", 2, ("owner unreachable", "owner is down"),
                                      alive=c.nodes[:2]), 60)
        self.without_numbers(entries[2], 2, entries[2]["error"])
        self.check_entry(entries[0], 0)
        self.check_entry(entries[1], 1)
        entries = wait_until(
            "partition 2's owner marked down",
            lambda: self.failure_case(c.nodes[1], "st", 2, ("owner is down",),
                                      alive=c.nodes[:2], dead=[killed]), 120)
        self.without_numbers(entries[2], 2, "owner is down")
        self.check_entry(entries[0], 0)
        self.check_entry(entries[1], 1)
        # Back, its log is as it was: every node shows it again.
        killed.start()
        killed.wait_ready()
        wait_until("the killed member alive again", lambda: asker.alive_members() == 3, 120)
        for node in c.nodes:
            entries = wait_until(f"every partition's numbers after the restart via node {node.id}",
                                 lambda n=node: self.settled(n, "st"), 60)
            for p, e in enumerate(entries):
                self.check_entry(e, p)


if __name__ == "__main__":
    harness.main()
