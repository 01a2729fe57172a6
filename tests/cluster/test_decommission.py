"""Decommissioning a member (issue 24; docs/cluster.md "Decommissioning a
member"): POST /v1/cluster/members/{id}/decommission marks it draining,
and the metastore leader moves every replica it holds of a replicated
partition to the least loaded other members (meta/placement.h), at most
two moves off it at once, under the replication suite's load (producers
and consumers on the /v1 and NSQ doors) and its ledger checker (lost,
phantom, conflict, hole, diverged and resurrected-FIN all 0). Four nodes,
topic rv with four partitions of factor 3: the member ends holding
nothing (`replica_partitions` 0, `decommissioned` true), every partition
has its three replicas on the other three with its whole ISR, every
move is listed done, and the member asks for no new partition of an NSQ
topic while it drains.

The decommission goes through `ternctl cluster decommission ID --wait`,
which exits 0 once the member holds nothing.

Run: python3 tests/cluster/test_decommission.py --ternd build/ternd --ternctl build/ternctl
"""
import os
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


class Decommission(tm.Moves):
    def member(self, node, mid):
        status, body = node.request("GET", "/v1/cluster/members")
        self.assertEqual(status, 200, body)
        return next(m for m in body["members"] if m["id"] == str(mid))

    def test_decommission_moves_every_replica_off(self):
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        victim = next(n for n in self.c.nodes if n is not meta)
        vid = str(victim.id)
        held = [p for p in range(4) if vid in self.info(V1)[p].replicas]
        self.assertTrue(held, "the member holds no replica to move")
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
        for p in range(4):
            ps = self.info(V1)[p]
            self.assertNotIn(vid, ps.replicas, ps)
            self.assertEqual(len(ps.replicas), 3, ps)
        # Every move it made took a replica off the member and is done (the
        # NSQ topic's partitions moved too; the list keeps the last 64).
        moves = [m for m in self.moves(meta) if m["id"] not in before]
        self.assertTrue(moves)
        bad = [m for m in moves
               if m["state"] != "done" or vid not in m["from"] or vid in m["to"]]
        self.assertEqual(bad, [])
        rv_moved = sorted(m["partition"] for m in moves if m["topic"] == V1)
        self.assertTrue(set(rv_moved) <= set(held), (rv_moved, held))
        # A draining member grows no NSQ topic (its NSQ publishes go to the
        # partitions elsewhere): before, each partition moved off it was
        # followed by a new one there, without end.
        self.flowing(60)
        self.assertEqual(victim.log().count("has no partition on this node: asking for one"),
                         asks)
        wait_until("every partition of rv with its whole ISR", self.settled4, 120)
        self.finish()


# Only this file's case.
for _name in dir(tm.Moves):
    if _name.startswith("test"):
        setattr(Decommission, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
