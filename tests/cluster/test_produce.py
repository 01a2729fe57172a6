"""Produce on any node (tests/cluster/harness.py): a produce for a partition
another node owns is accepted into this node's ingress log, acknowledged
once durable there, and moved to the owner by the dispatcher; it survives
the SIGKILL of the node that took it; an unpinned record whose owner dies
goes to a partition with a live owner; the NSQ doors publish on every
node.

Run: python3 tests/cluster/test_produce.py --ternd build/ternd
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}


class Produce(harness.ClusterTest):
    # Factor 1: these tests are about owners, the ingress log and its dispatcher.
    node_args = ["--default-replication-factor=1"]

    def node(self, c, node_id):
        return [n for n in c.nodes if str(n.id) == str(node_id)][0]

    def produce(self, node, topic, body, query=""):
        return node.request("POST", f"/v1/topics/{topic}/produce{query}", body.encode(),
                            headers=OCTET)

    def read_partition(self, owner, topic, p):
        """Every payload partition p holds, read on its owner (replay reads
        from offset 0 until there is nothing more)."""
        out, offset = [], 0
        while True:
            status, m = owner.request(
                "GET", f"/v1/topics/{topic}/consume?partition={p}&offset={offset}")
            if status == 204:
                return out
            if status == 503:  # a growth this node's engine has not opened yet
                return None
            self.assertEqual(status, 200, m)
            out.append(m["payload"])
            offset += 1

    def wait_partition(self, c, topic, p, expect, timeout=60):
        owner = self.node(c, c.nodes[0].owners(topic)[p])
        wait_until(f"{topic}/{p} on node {owner.id} holding {len(expect)}",
                   lambda: sorted(self.read_partition(owner, topic, p) or [None]) == sorted(expect),
                   timeout)

    def start(self, n=3, **kw):
        c = self.make(n, **kw).start()
        c.wait_alive(n)
        return c

    def test_produce_to_every_partition_through_every_node(self):
        c = self.start()
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "t", "partitions": 3})
        self.assertEqual(status, 201, body)
        wait_until("the owners everywhere",
                   lambda: all(n.owners("t") == ["1", "2", "3"] for n in c.nodes))
        expect = {p: [] for p in range(3)}
        for node in c.nodes:
            for p in range(3):
                body = f"n{node.id}p{p}"
                status, answer = self.produce(node, "t", body, f"?partition={p}")
                self.assertEqual(status, 202, answer)
                expect[p].append(body)
            # A batch through this node, split over the owners.
            batch = [{"payload": f"b{node.id}p{p}", "partition": p} for p in range(3)]
            status, answer = node.request("POST", "/v1/topics/t/produce/batch", batch)
            self.assertEqual(status, 202, answer)
            self.assertEqual(answer, {"accepted": 3})
            for p in range(3):
                expect[p].append(f"b{node.id}p{p}")
        for p in range(3):
            self.wait_partition(c, "t", p, expect[p])
        # The nodes that took others' records moved them all.
        for node in c.nodes:
            wait_until(f"node {node.id}'s ingress log empty",
                       lambda n=node: self.metric(n, "tern_ingress_records") == 0)
            self.assertGreaterEqual(
                self.metric(node, 'tern_dispatch_records_total{outcome="committed"}'), 4)

    def test_produce_to_a_partition_just_grown(self):
        """A produce pinned to a partition a growth just added, through
        every node as soon as its replica shows the growth: a node whose
        engine has not grown yet takes it into its ingress log (never a
        500), and it reaches the new partition's owner."""
        c = self.start()
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "g", "partitions": 1})
        self.assertEqual(status, 201, body)
        wait_until("g everywhere", lambda: all(n.owners("g") == ["1"] for n in c.nodes))
        status, body = c.nodes[0].request("PATCH", "/v1/topics/g", {"partitions": 3})
        self.assertEqual(status, 200, body)
        wait_until("three partitions in every replica",
                   lambda: all(len(n.owners("g") or []) == 3 for n in c.nodes), 30)
        expect = {1: [], 2: []}
        for node in c.nodes:
            for p in (1, 2):
                payload = f"grown n{node.id}p{p}"
                status, answer = self.produce(node, "g", payload, f"?partition={p}")
                self.assertIn(status, (200, 202), answer)
                expect[p].append(payload)
        for p in (1, 2):
            self.wait_partition(c, "g", p, expect[p])

    def metric(self, node, name):
        value = node.metric(name)
        self.assertIsNotNone(value, f"no {name} in node {node.id}'s /metrics")
        return value

    def test_nsq_publish_on_nodes_without_a_partition(self):
        c = self.start()
        status, answer = c.nodes[0].request("POST", "/topic/create?topic=nsq", b"", auth=False)
        self.assertEqual(status, 200, answer)
        wait_until("its owner everywhere",
                   lambda: all(n.owners("nsq") == ["1"] for n in c.nodes))
        expect = []
        for node in c.nodes:
            status, answer = node.request("POST", "/pub?topic=nsq", f"pub{node.id}".encode(),
                                          auth=False)
            self.assertEqual(status, 200, answer)
            expect.append(f"pub{node.id}")
            status, answer = node.request("POST", "/mpub?topic=nsq",
                                          f"m{node.id}a\nm{node.id}b".encode(), auth=False)
            self.assertEqual(status, 200, answer)
            expect += [f"m{node.id}a", f"m{node.id}b"]
        # Each node's first publish grew the topic by a partition of its own
        # (tests/cluster/test_fleet.py); what any node took, an owner holds.
        def held():
            owners = c.nodes[0].owners("nsq") or []
            out = []
            for p, o in enumerate(owners):
                out += self.read_partition(self.node(c, o), "nsq", p)
            return sorted(out)
        wait_until("every publish at an owner", lambda: held() == sorted(expect), 60)

    def test_accepted_records_survive_sigkill_of_the_node_that_took_them(self):
        c = self.start()
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "k", "partitions": 3})
        self.assertEqual(status, 201, body)
        wait_until("the owners everywhere",
                   lambda: all(n.owners("k") == ["1", "2", "3"] for n in c.nodes))
        taker, owner = c.nodes[0], c.nodes[1]
        owner.kill()  # the records wait in the taker's ingress log
        expect = []
        for i in range(20):
            status, answer = self.produce(taker, "k", f"k{i}", "?partition=1")
            self.assertEqual(status, 202, answer)
            expect.append(f"k{i}")
        taker.kill()
        owner.start()
        taker.start()
        c.wait_ready()
        self.wait_partition(c, "k", 1, expect)

    def test_unpinned_records_of_a_dead_owner_go_to_a_live_one(self):
        c = self.start(args=["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s"])
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "r", "partitions": 2})
        self.assertEqual(status, 201, body)
        wait_until("the owners everywhere",
                   lambda: all(n.owners("r") == ["1", "2"] for n in c.nodes))
        taker = c.nodes[2]  # owns no partition of r: every produce goes through its log
        # One record through the taker to partition 1's owner first: the
        # taker then has a connection to it, over which a commit to the
        # owner once it is killed gets no answer at all (a fresh dial
        # would fail within its dial timeout instead).
        status, answer = self.produce(taker, "r", "before", "?partition=1")
        self.assertEqual(status, 202, answer)
        self.wait_partition(c, "r", 1, ["before"])
        c.nodes[1].kill()   # the owner of partition 1, not yet known dead
        expect = []
        for i in range(20):
            status, answer = self.produce(taker, "r", f"r{i}")
            self.assertEqual(status, 202, answer)
            expect.append(f"r{i}")
        # Once partition 1's owner is dead, what waited for it goes to 0,
        # a batch already sent to it too: abandoned when the taker's
        # replica marks the owner dead, not left to fail by itself (the
        # connection's end, or its commit's 30 s budget: 6 to 27 s later
        # here before), so all of it is there within seconds.
        wait_until(f"node {c.nodes[1].id} marked dead in node {taker.id}'s replica",
                   lambda: taker.alive_members() == 2, 60)
        self.wait_partition(c, "r", 0, expect, timeout=5)
        self.assertGreater(self.metric(taker, 'tern_dispatch_records_total{outcome="rerouted"}'),
                           0)


if __name__ == "__main__":
    harness.main()
