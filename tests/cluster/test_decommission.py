"""Decommissioning a member (issue 24; docs/cluster.md "Decommissioning a
member"): POST /v1/cluster/members/{id}/decommission marks it draining,
and the metastore leader moves every replica it holds of a replicated
partition, and every factor-1 partition it owns (topic r1: four
partitions, one per member), to the least loaded other members
(meta/placement.h), at most
two moves off it at once, under the replication suite's load (producers
and consumers on the /v1 and NSQ doors) and its ledger checker (lost,
phantom, conflict, hole, diverged and resurrected-FIN all 0). Four nodes,
topic rv with four partitions of factor 3: the member ends holding
nothing (`replica_partitions` 0, `decommissioned` true), every partition
has its three replicas on the other three with its whole ISR, every
move is listed done, and the member asks for no new partition of an NSQ
topic while it drains.

The decommission goes through `ternctl cluster decommission ID --wait`,
which exits 0 once the member holds nothing. And self-healing: a member
SIGKILLed and left dead for replace-dead-after (2 s here) has its replicas
re-created on the other three from the surviving ones, every partition
back to three in-sync replicas, nothing lost; a move onto it under way
when it died ends failed (its reason in GET /v1/cluster/moves) with the
partition back on its old replicas; its factor-1 partition, with
no other copy, is reported offline and stays its; back, it holds none of
the replicas until auto-rebalance gives it its share again.

Run: python3 tests/cluster/test_decommission.py --ternd build/ternd --ternctl build/ternctl
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_moves as tm  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402

V1 = tr.V1
SINGLE = "r1"  # a factor-1 topic beside the suite's: its partitions move too


def make_single(test, node):
    """Topic r1: four partitions of factor 1 (one per member), ten
    messages produced to each; the acknowledged bodies."""
    status, body = node.request("POST", "/v1/topics", {"name": SINGLE, "partitions": 4,
                                                      "replication_factor": 1})
    test.assertEqual(status, 201, body)
    test.assertEqual(body["replication_factor"], 1, body)
    wait_until(f"every partition of {SINGLE} owned",
               lambda: (lambda ps: ps and all(p.leader for p in ps))(test.info(SINGLE)), 30)
    sent = set()
    for p in range(4):
        for i in range(10):
            payload = f"{SINGLE} {p} {i}"
            status, _ = node.request("POST", f"/v1/topics/{SINGLE}/produce?partition={p}",
                                     payload.encode(), headers=tr.OCTET)
            test.assertEqual(status, 202)
            sent.add(payload)
    return sent


def consume_all(test, node, want):
    """Consume r1 through node until every body of want came."""
    got = set()

    def all_there():
        status, answer = node.request("GET", f"/v1/topics/{SINGLE}/consume?wait=1s&max=50",
                                      headers=tr.CLIENT, timeout=8)
        if status == 200:
            got.update(m["payload"] for m in answer["messages"])
        return want <= got
    wait_until(f"every message of {SINGLE} consumed", all_there, 60)


class Decommission(tm.Moves):
    def member(self, node, mid):
        status, body = node.request("GET", "/v1/cluster/members")
        self.assertEqual(status, 200, body)
        return next(m for m in body["members"] if m["id"] == str(mid))

    def loaded_four(self):
        """Four nodes under the suite's load: (the metastore leader, another
        member, its id, the partitions of rv it holds a replica of)."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        victim = next(n for n in self.c.nodes if n is not meta)
        vid = str(victim.id)
        held = [p for p in range(4) if vid in self.info(V1)[p].replicas]
        self.assertTrue(held, "the member holds no replica to move")
        return meta, victim, vid, held

    def test_decommission_moves_every_replica_off(self):
        meta, victim, vid, held = self.loaded_four()
        single = make_single(self, meta)
        self.assertIn(vid, [p.leader for p in self.info(SINGLE)])
        before = {m["id"] for m in self.moves(meta)}
        asks = victim.log().count("has no partition on this node: asking for one")
        # Through ternctl, which waits for the end.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(HOME=self.c.dir, TERN_URL=f"http://{meta.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        ctl = subprocess.Popen([tm.TERNCTL, "cluster", "decommission", vid, "--wait",
                                "--wait-timeout", "5m"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env)
        self.history.fault(f"decommission member {vid}")
        most = 0
        try:
            while ctl.poll() is None:
                m = self.member(meta, vid)
                most = max(most, m["outbound_moves"])
                self.assertLessEqual(m["outbound_moves"], 2, m)  # the cap per member
                time.sleep(0.3)
            out = ctl.stdout.read()
        finally:
            if ctl.poll() is None:
                ctl.kill()
            ctl.wait()
        tr.log(f"ternctl cluster decommission: {ctl.returncode}\n{out}")
        self.assertEqual(ctl.returncode, 0, out)
        self.assertIn(f"member {vid} holds no partition: decommissioned", out)
        done = self.member(meta, vid)
        self.assertTrue(done["decommissioned"], done)
        tr.log(f"member {vid} decommissioned: {done}; at most {most} moves off it at once")
        self.assertTrue(done["draining"], done)
        self.assertEqual(done["replica_partitions"], 0, done)
        self.assertEqual(done["owned_partitions"], 0, done)
        # Every node's metastore replica shows it, once it applied the last
        # move (the answer above came from the metastore leader's).
        def gone_everywhere():
            for n in self.c.nodes:
                ps = self.partitions(n, V1)
                if not ps or any(vid in x.replicas or len(x.replicas) != 3 for x in ps):
                    return None
            return True
        wait_until(f"member {vid} in no replica list of {V1} on any node", gone_everywhere, 60)
        # Topics made while it drains are placed past it (the metastore
        # leader's skip list), a factor-3 one too: three members are left.
        for name, factor in (("rd3", 3), ("rd1", 1)):
            status, body = meta.request("POST", "/v1/topics", {"name": name, "partitions": 4,
                                                              "replication_factor": factor})
            self.assertEqual(status, 201, body)
            self.assertEqual(body["replication_factor"], factor, body)
            ps = self.partitions(meta, name)
            self.assertEqual(len(ps), 4, ps)
            self.assertTrue(all(p.leader and p.leader != vid and vid not in p.replicas
                                for p in ps), (name, ps))
        # (logged by the metastore leader, which may have changed since)
        self.assertTrue(any("placed past 1 member(s) not heard from lately or draining" in n.log()
                            for n in self.c.nodes))
        # The factor-1 topic's partition moved off it with its messages.
        ps = self.partitions(meta, SINGLE)
        self.assertTrue(all(p.leader and p.leader != vid for p in ps), ps)
        consume_all(self, meta, single)
        # Every move it made took a replica off the member and is done (the
        # NSQ topic's partitions moved too; the list keeps the last 64).
        moves = [m for m in self.moves(meta) if m["id"] not in before]
        self.assertTrue(moves)
        bad = [m for m in moves
               if m["state"] != "done" or vid not in m["from"] or vid in m["to"]]
        self.assertEqual(bad, [])
        rv_moved = sorted(m["partition"] for m in moves if m["topic"] == V1)
        self.assertTrue(set(rv_moved) <= set(held), (rv_moved, held))
        self.assertEqual([m["to"] != [vid] and len(m["to"]) for m in moves
                          if m["topic"] == SINGLE], [1])
        # A draining member grows no NSQ topic (its NSQ publishes go to the
        # partitions elsewhere): before, each partition moved off it was
        # followed by a new one there, without end.
        self.flowing(60)
        self.assertEqual(victim.log().count("has no partition on this node: asking for one"),
                         asks)
        wait_until("every partition of rv with its whole ISR", self.settled4, 120)
        self.finish()


class DeadMember(tm.Moves):
    node_args = ("--replace-dead-after=2s",)

    def test_dead_member_replaced(self):
        # A member SIGKILLed and marked dead (cluster-dead-after 3 s) for
        # replace-dead-after (2 s): the metastore leader re-creates its
        # replicas on the other three from the surviving ones, and every
        # partition is back to three in-sync replicas without it; nothing
        # acknowledged is lost. Back, it holds none of them (its copies set
        # aside) until auto-rebalance gives it its share again.
        meta, victim, vid, held = self.loaded_four()
        make_single(self, meta)
        mine = [p.index for p in self.info(SINGLE) if p.leader == vid]
        self.assertEqual(len(mine), 1)
        # A move onto it is under way when it dies: frozen first, so that
        # it is live when the move begins (within its session) and copies
        # nothing. The move cannot finish without it: once it is dead for
        # replace-dead-after the metastore leader ends it failed, with the
        # reason, and the partition is back on its old replicas, served
        # throughout (the ledger below).
        p = next(x for x in range(4) if x not in held)
        leader, replicas, spare = self.layout(p)
        self.assertEqual(spare, vid)
        follower = next(r for r in replicas if r != leader)
        target = [vid if r == follower else r for r in replicas]
        os.kill(victim.pid, signal.SIGSTOP)
        self.history.fault(f"SIGSTOP node {vid}")
        mid = self.begin(p, target, meta)
        self.kill(victim, "a member that stays dead, the target of a move under way")
        failed = self.wait_state(mid, ("failed",), 120, meta)
        tr.log(f"move {mid} failed: {failed}")
        self.assertIn(f"target member {vid} was dead for longer than replace-dead-after (2s)",
                      failed["error"])
        self.assertEqual((failed["from"], failed["to"]), (replicas, target), failed)
        self.assertIsNotNone(failed["finished_ms"])
        up = [n for n in self.c.nodes if n is not victim]
        for n in up:
            wait_until(f"node {n.id} lists move {mid} failed",
                       lambda: (self.find_move(mid, n) or {}).get("state") == "failed", 30)
            ps = self.partitions(n, V1)[p]
            self.assertEqual(ps.replicas, replicas, ps)
            self.assertNotEqual(ps.leader, vid, ps)
        wait_until("the failed move counted in /metrics",
                   lambda: any((n.metric('tern_moves_finished_total{outcome="failed"}') or 0) >= 1
                               for n in up), 30)
        self.flowing(40)

        def replaced():
            m = self.member(meta, vid)
            if m["status"] != "dead" or m["replica_partitions"] != 0:
                return None
            for n in self.c.nodes:
                ps = self.partitions(n, V1) if n is not victim else []
                if ps is None or any(vid in x.replicas or len(x.replicas) != 3 or
                                     len(x.isr) != 3 for x in ps):
                    return None
            return True
        wait_until(f"member {vid}'s replicas re-created on the others", replaced, 300, 0.5)
        tr.log(f"member {vid}'s replicas re-created: {self.info(V1, exclude=(victim.id,))}")
        # Audit lines of the metastore leader: the leadership may have moved
        # since (the kill), so any node's log may hold them.
        def logged(line):
            return any(line in n.log() for n in self.c.nodes)
        self.assertTrue(logged(f"replacing dead member {vid}"))
        # Its factor-1 partition has no other copy: reported offline, kept
        # on it, never made again empty elsewhere.
        wait_until("the factor-1 partition reported offline",
                   lambda: logged(f"partition {SINGLE}/{mine[0]} cannot move off it: no alive "
                                  "replica left to copy from"), 30)
        self.assertEqual(self.partitions(meta, SINGLE)[mine[0]].leader, vid)
        self.flowing(60)
        self.restart(victim)
        wait_until(f"member {vid} alive again", lambda: self.member(meta, vid)["status"] == "alive",
                   60)
        # Back holding nothing while the others hold every replica:
        # auto-rebalance (on by default) gives it its share again, every
        # alive member within one replica (docs/cluster.md "Rebalancing the
        # members"; tests/cluster/test_rebalance.py has the rest).
        def rebalanced():
            status, s = meta.request("GET", "/v1/cluster/rebalance")
            if status != 200 or s["running"] or s["moves_under_way"] > 0:
                return None
            counts = {m["id"]: m["replicas"] for m in s["members"] if m["alive"]}
            return s if counts.get(vid, 0) > 0 and \
                max(counts.values()) - min(counts.values()) <= 1 else None
        s = wait_until(f"member {vid} given its share again", rebalanced, 300, 0.5)
        tr.log(f"member {vid} back and rebalanced: {s}")
        self.assertTrue(logged(f"member {vid} joined holding"))
        self.flowing(40)
        wait_until("every partition of rv with its whole ISR", self.settled4, 120)
        self.finish()

    member = Decommission.member
    loaded_four = Decommission.loaded_four


# Only this file's cases.
for _name in dir(tm.Moves):
    if _name.startswith("test"):
        setattr(Decommission, _name, None)
        setattr(DeadMember, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
