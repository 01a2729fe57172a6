"""A new leader never delivers while the old one still may (docs/replication.md
"Leadership changes and deliveries"; cluster/handfence.h): every path
that takes a partition's leadership off a live node, with that node
learning the change late, under the replication suite's load
(test_replication.py: /v1 and NSQ producers and consumers on every node)
and its ledger checker (lost, phantom, conflict, hole, diverged and
resurrected-FIN all 0).

Three nodes, rv with three partitions of factor 3, leader-rebalance-delay
2 s. Node 1 runs with TERN_TEST_PSTATE_LAG_MS=500 (ternd-test): its
replica manager hears of every partition state 500 ms after its
metastore replica applied it, so it goes on leading (and delivering) for
half a second after the others know another node leads. A channel `hf`
of rv is consumed only during each hand-over: through node 1 by a queue
consume (no partition), which its own lanes answer first (so node 1
serves the partition while it still thinks it leads), one message at a
time and never acked; through the other two nodes pinned to the
partition, which reaches the leader their metastore replicas name, ten at
a time and acked. So the new leader's consumers run ahead of the old one:

  1. a forced election (POST .../partitions/p/leader) from node 1 to
     another ISR member of its preferred partition;
  2. the preferred-leader hand-back (PART_REBALANCE) from node 1 of a
     partition it was made to lead by a forced election;
  3. a reorder move (node 1 first in the list, then second): the move
     completes without a leader change, the hand-back that follows it
     takes the leadership off node 1;
  4. a move that drops node 1, the leader, from a partition whose other
     replicas are in the ISR (rv's replication factor lowered to 2, node 1
     last in the partition's list): its completion hands the leadership
     over and node 1 is no replica any more (it never fetches with the new
     epoch: the new leader's hold ends by its bound).

The ledger must find resurrected 0 (and nothing else). HANDFENCE_OFF=n in
this script's environment passes TERN_TEST_HANDFENCE_OFF=n to every node
(bit 0: no take-over hold; bit 1: no hold of the old leader's own; bit 2:
no delivery lease);
HANDFENCE_LAG_MS changes the lag; HANDFENCE_DUMP=path keeps the history.
On 2026-12-03 the runs with n=1, 3 and 7 found resurrected 0 as well: in
paths 1-3 the old leader stays a replica, and the new leader's settles
reach it (settle_repl, which its engine applies) before they are answered,
so it skips what was acked; what it delivers meanwhile comes before the
ack (a duplicate). This case is the regression test of the paths; the
rules' own checks are the unit tests (docs/replication.md).

Run: python3 tests/cluster/test_handfence.py --ternd build/ternd-test --ternctl build/ternctl
"""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_moves as tm  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402

V1 = tr.V1
HF = "hf"
LAG_MS = int(os.environ.get("HANDFENCE_LAG_MS", "500"))


class HandFence(tm.Moves):
    node_args = ("--leader-rebalance-delay=2s",)

    def make(self, n, **kw):
        c = super().make(n, **kw)
        off = os.environ.get("HANDFENCE_OFF", "")
        base = c.env()
        if off not in ("", "0"):
            base["TERN_TEST_HANDFENCE_OFF"] = off
        lag = dict(base, TERN_TEST_PSTATE_LAG_MS=str(LAG_MS))
        for node in c.nodes:
            orig = node.start
            env = lag if node is c.nodes[0] else base

            def start(*extra, env=None, orig=orig, mine=env):
                return orig(*extra, env=env if env is not None else mine)
            node.start = start
        self.lagged = c.nodes[0]
        return c

    def topics(self, partitions):
        super().topics(partitions)
        status, answer = self.c.nodes[0].request(
            "POST", f"/channel/create?topic={V1}&channel={HF}")
        self.assertEqual(status, 200, answer)

    # helpers

    def others(self):
        return [n for n in self.c.nodes if n is not self.lagged]

    def led_everywhere(self, p, leader):
        """Every node's metastore replica shows rv/p led by leader."""
        for n in self.c.nodes:
            ps = self.partitions(n, V1)
            if not ps or ps[p].leader != str(leader):
                return False
        return True

    def wait_led(self, p, leader, timeout=60):
        wait_until(f"{V1}/{p} led by node {leader} on every node",
                   lambda: self.led_everywhere(p, leader), timeout, 0.1)
        if str(leader) == str(self.lagged.id):
            # The lagging node itself hears of it LAG_MS later, and only
            # then takes the lead: a hand-over off it begins after that
            # (no endpoint shows a node's replica manager's own view).
            time.sleep(LAG_MS / 1000 + 1.0)

    def epoch(self, p):
        """The leader epoch of rv/p, the highest any node shows."""
        return max(ps[p].epoch for ps in (self.partitions(n, V1) for n in self.c.nodes) if ps)

    def elected_everywhere(self, p, above):
        """Every node shows rv/p with a leader epoch above `above`."""
        for n in self.c.nodes:
            ps = self.partitions(n, V1)
            if not ps or ps[p].epoch is None or ps[p].epoch <= above:
                return False
        return True

    def preferred_of(self, node):
        """The partition of rv whose preferred replica (first) is node."""
        for p in self.info(V1):
            if p.replicas and p.replicas[0] == str(node.id):
                return p.index
        self.fail(f"no partition of {V1} prefers node {node.id}")

    def force(self, p, leader):
        via = self.others()[0]

        def elected():
            status, body = via.request("POST", f"/v1/topics/{V1}/partitions/{p}/leader",
                                       {"node": str(leader)})
            if status == 503:
                return None
            self.assertEqual(status, 200, body)
            return body
        wait_until(f"the forced election of node {leader} for {V1}/{p}", elected, 60, 0.5)
        self.history.fault(f"forced election: {V1}/{p} to node {leader}")

    def hf_consumer(self, node, p, stop):
        """Consume channel hf of rv through node until stop; every delivery
        and every ack answered 204 goes into the history.

        Through the lagging node: a queue consume (no partition), which
        that node's own lanes answer first, from every partition its
        engine still serves (an old leader that has not heard of the
        change yet included); one message at a time, never acked (an ack
        there goes to the leader the metastore names, which did not issue
        the handle). Through the others: rv/p pinned, which reaches the
        leader their metastore replica names, ten at a time, each batch
        acked. So the new leader's consumers get ahead of what the old
        one delivered, and the old one, asked on, would deliver what the
        new one acked."""
        lagged = node is self.lagged
        q = f"channel={HF}&wait=1s&max=1" if lagged else \
            f"channel={HF}&partition={p}&wait=1s&max=10"
        while not stop.is_set() and node.running():
            status, answer = node.request("GET", f"/v1/topics/{V1}/consume?{q}",
                                          headers=tr.CLIENT, timeout=8)
            if status != 200 or not isinstance(answer, dict):
                time.sleep(0.05)
                continue
            msgs = answer.get("messages", [])
            for m in msgs:
                self.history.deliver(V1, HF, m["partition"], m["offset"], m["payload"], node.id)
            if not msgs:
                continue
            if lagged:
                time.sleep(0.02)
                continue
            status, body = node.request("POST", f"/v1/topics/{V1}/ack/batch?channel={HF}",
                                        [m["receipt_handle"] for m in msgs], headers=tr.CLIENT,
                                        timeout=8)
            if status == 200 and isinstance(body, dict):
                for m, res in zip(msgs, body.get("results", [])):
                    if res.get("status") == 204:
                        self.history.fin_ok(V1, HF, m["partition"], m["offset"],
                                            tr.rl.parse_body(m["payload"]))

    def window(self, label, p, change, epoch0):
        """Consumers of hf on rv/p through every node while change() runs
        and until every node shows a leader epoch of rv/p above epoch0
        (the hand-over off the lagging node) and that node heard of it
        (its lag, and the longest hold after it)."""
        stop = threading.Event()
        delivered = len(self.history.deliveries)
        tr.log(f"{label}: {V1}/{p} (epoch {epoch0}), old leader node {self.lagged.id}")
        self.history.fault(label)
        change()
        # hf's backlog on p (everything published since the last window)
        # is consumed from now on: through the old leader's lanes at once,
        # and through the others once they reach the new leader (not
        # before: they would drain the old leader's backlog themselves).
        self.addCleanup(stop.set)
        threads = [self.load.spawn(self.hf_consumer, self.lagged, p, stop)]
        wait_until(f"{label}: a new leader epoch of {V1}/{p} on every node",
                   lambda: self.elected_everywhere(p, epoch0), 60, 0.1)
        threads += [self.load.spawn(self.hf_consumer, n, p, stop) for n in self.others()]
        tr.log(f"{label}: {self.info(V1)[p]}")
        # The lagging node learns it LAG_MS later, and the new leader's
        # hold lasts at most 3 s (2 x election timeout + 1 s): consume
        # through all of it.
        time.sleep(LAG_MS / 1000 + 3.5)
        stop.set()
        for th in threads:
            th.join(30)
        got = len(self.history.deliveries) - delivered
        tr.log(f"{label}: done, {got} deliveries meanwhile")
        self.assertTrue(self.lagged.running())

    def lower_to_two(self):
        status, body = self.others()[0].request("PATCH", f"/v1/topics/{V1}",
                                                {"replication_factor": 2}, timeout=30)
        self.assertEqual(status, 200, body)
        self.history.fault(f"{V1} replication_factor -> 2")

    # the case

    def test_handovers_from_a_lagging_leader(self):
        self.cluster(n=3)
        X = self.lagged
        self.load.start()
        self.flowing(100)

        # 1. A forced election off node 1 (its preferred partition a).
        a = self.preferred_of(X)
        self.wait_led(a, X.id)
        y, z = [str(n.id) for n in self.others()]
        self.window("forced election", a, lambda: self.force(a, y), self.epoch(a))
        # The hand-back returns a to node 1 (old leader y: no lag there).
        self.wait_led(a, X.id)
        self.flowing(60)

        # 2. The hand-back off node 1: b, preferred by another node, is
        # forced to node 1 and handed back by the metastore leader
        # (leader-rebalance-delay 2 s after).
        b = next(p.index for p in self.info(V1) if p.index != a)
        pref = self.info(V1)[b].replicas[0]
        self.wait_led(b, pref)
        self.force(b, X.id)
        self.wait_led(b, X.id)
        self.window("preferred-leader hand-back", b, lambda: None, self.epoch(b))
        self.wait_led(b, pref)
        self.flowing(60)

        # 3. A reorder move of a (node 1 second): no leader change at its
        # completion; the hand-back that follows takes a off node 1.
        self.wait_led(a, X.id)
        replicas = self.info(V1)[a].replicas
        order = [y, str(X.id)] + [r for r in replicas if r not in (y, str(X.id))]
        moves = []
        self.window("reorder move", a,
                    lambda: moves.append(self.begin(a, order, self.others()[0])), self.epoch(a))
        self.wait_state(moves[-1], ("done",), 60)
        self.wait_led(a, y)
        self.flowing(60)

        # 4. A move that drops node 1, the leader of a again (forced), from
        # a: the target is in the ISR from its start. A move keeps the
        # topic's factor, so it is rv's factor lowered to 2, whose move
        # of a drops the last of a's list (node 1, put there by a reorder
        # first); the other partitions lose their last replica too.
        order = [r for r in self.info(V1)[a].replicas if r != str(X.id)] + [str(X.id)]
        moves.append(self.begin(a, order, self.others()[0]))
        self.wait_state(moves[-1], ("done",), 60)
        self.force(a, X.id)
        self.wait_led(a, X.id)
        target = order[:2]
        self.window("move dropping the leader", a, lambda: self.lower_to_two(), self.epoch(a))
        wait_until(f"{V1}/{a}'s move to {target} done",
                   lambda: any(m["topic"] == V1 and m["partition"] == a and m["to"] == target
                               and m["state"] == "done" for m in self.moves()), 60)
        ps = self.info(V1)[a]
        self.assertEqual(ps.replicas, target, ps)
        self.flowing(60)
        try:
            self.finish()
        finally:
            if os.environ.get("HANDFENCE_DUMP"):
                tr.rl.dump(self.history, os.environ["HANDFENCE_DUMP"])
        hf_fins = sum(1 for f in self.history.fins if f[2] == HF)
        tr.log(f"hf: {sum(1 for d in self.history.deliveries if d[2] == HF)} deliveries, "
               f"{hf_fins} acks answered OK")
        self.assertGreater(hf_fins, 0)


for _name in dir(tm.Moves):
    if _name.startswith("test") and _name not in vars(HandFence):
        setattr(HandFence, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
