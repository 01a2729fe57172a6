"""Removing a member (issue 24; docs/cluster.md "Removing a member"):
DELETE /v1/cluster/members/{id} takes a member that holds nothing out of
the members and out of the metastore's Raft configuration.

Remove.test_remove_after_decommission, four nodes, topic rv with four
partitions of factor 3, under the replication suite's load (producers and
consumers on the /v1 and NSQ doors) and its ledger checker (lost, phantom,
conflict, hole, diverged and resurrected-FIN all 0):
  - DELETE of a member that holds replicas: 409 naming how many it holds;
    of an unknown id: 404; by a user without admin rights: 403;
  - the member is decommissioned, then `ternctl cluster remove ID`: 200;
    it is gone from every node's /v1/cluster/members and from every
    node's Raft configuration (raft_voters), listed among the removed;
  - the copies the moves dropped are in its quarantine/ while it still
    runs (moved at once, nothing using them any more);
  - the removed process stops by itself (exit 0) with one clear line;
    restarted on its old data directory it refuses to start (exit 1);
  - with three members left, another removal is 409 (three voters kept);
  - the metastore leader is SIGKILLed: the three elect another and keep
    serving (a topic create commits; the load goes on), it comes back.

Quarantine.test_given_back, four nodes, topic rv, the suite's load and
ledger: a follower dropped from rv/p by a move has its copy moved to
quarantine/ while it runs (no restart: the directory and
tern_quarantined_partitions say so) and goes on serving its other
partitions; given rv/p back, it starts from an empty log and catches up
like a new replica. Restarted with TERN_TEST_QUARANTINE_HOLD (its dropped
copies of rv stay marked, as one kept in use does), dropped again: the
copy is marked `dropped` and stays; given rv/p back before the move, the
mark goes before it follows, and it catches up from its copy and rejoins
the ISR; dropped again and restarted (no hold), its copy is in
quarantine/, moved by the start, and gone from topics/.

RemoveLeader.test_remove_the_metastore_leader, four nodes, no load: the
metastore leader itself is removed through another node: leadership moves
to another voter, the old leader stops by itself, the three left show
three voters; then the machine comes back under the same id with an empty
data directory and --join, and is a member and a voter again (a new
incarnation), as any joining node is. Then another member is SIGKILLed
and removed while it is down; restarted on its old data directory, it is
told so: it catches up to its own removal and stops, or the leader
refuses its registration first; either way with a line that says what
to do.

Run: python3 tests/cluster/test_remove.py --ternd build/ternd --ternctl build/ternctl
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_moves as tm  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402

V1 = tr.V1
REMOVED_LINE = "was removed from the cluster"


def members_view(node):
    status, body = node.request("GET", "/v1/cluster/members", timeout=5)
    return body if status == 200 and isinstance(body, dict) else None


def gone_from(node, vid, voters):
    """node's view: vid is no member, voters are its Raft voters, and vid
    is listed among the removed."""
    v = members_view(node)
    if v is None:
        return False
    ids = sorted(m["id"] for m in v["members"])
    return (vid not in ids and sorted(v.get("raft_voters", [])) == sorted(voters) and
            vid in [r["id"] for r in v.get("removed", [])])


def wait_exit(node, timeout=60):
    wait_until(f"node {node.id} exited by itself", lambda: not node.running(), timeout)
    return node.daemon.proc.wait()


class Remove(tm.Moves):
    def member(self, node, mid):
        v = members_view(node)
        self.assertIsNotNone(v)
        return next(m for m in v["members"] if m["id"] == str(mid))

    def ternctl(self, node, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(HOME=self.c.dir, TERN_URL=f"http://{node.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        return subprocess.run([tm.TERNCTL, *args], capture_output=True, text=True, env=env,
                              timeout=120)

    def test_remove_after_decommission(self):
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        victim = next(n for n in self.c.nodes if n is not meta)
        vid = str(victim.id)
        others = [n for n in self.c.nodes if n is not victim]
        held = self.member(meta, vid)["replica_partitions"]
        self.assertGreater(held, 0)
        rv_held = [p for p in range(4) if vid in self.info(V1)[p].replicas]
        # Refusals first: it holds replicas (the count in the answer), an
        # unknown id, a user who is not an admin.
        status, body = meta.request("DELETE", f"/v1/cluster/members/{vid}")
        self.assertEqual(status, 409, body)
        self.assertIn(f"member {vid} still holds", body["error"])
        self.assertIn("decommission it first", body["error"])
        count = int(body["error"].split("still holds ")[1].split()[0])
        self.assertGreaterEqual(count, held)
        status, body = meta.request("DELETE", "/v1/cluster/members/77")
        self.assertEqual(status, 404, body)
        status, body = meta.request("DELETE", "/v1/cluster/members/x")
        self.assertEqual(status, 404, body)
        status, body = meta.request("POST", "/v1/users", {
            "username": "ops", "password": "ops-pw-1",
            "grants": [{"action": "consume", "patterns": ["*"]}]})
        self.assertEqual(status, 201, body)
        wait_until("user ops on every node",
                   lambda: all(n.request("GET", "/v1/users/ops")[0] == 200 for n in self.c.nodes),
                   30)
        status, body = meta.request("DELETE", f"/v1/cluster/members/{vid}", auth=False,
                                    headers={"Authorization": harness.basic("ops", "ops-pw-1")})
        self.assertEqual(status, 403, body)
        self.assertEqual(self.member(meta, vid)["status"], "alive")
        # Decommission, then remove through ternctl.
        status, body = meta.request("POST", f"/v1/cluster/members/{vid}/decommission",
                                    headers={"X-Tern-Client": "test"})
        self.assertEqual(status, 204, body)
        self.history.fault(f"decommission member {vid}")
        wait_until(f"member {vid} decommissioned",
                   lambda: self.member(meta, vid)["decommissioned"], 300, 0.5)
        # Its dropped copies go to quarantine/ while it runs, once nothing
        # on it uses them any more (no restart).
        topics = os.path.join(victim.data, "topics", V1)
        vq = os.path.join(victim.data, "quarantine")

        def moved_now():
            q = os.listdir(vq)
            return all(not os.path.exists(os.path.join(topics, str(p))) and
                       any(e.startswith(f"{V1}.{p}.pe") for e in q) for p in rv_held)
        wait_until(f"node {vid}'s dropped copies of {V1} in its quarantine/", moved_now, 60)
        self.assertTrue(victim.running())
        self.assertIn("was dropped from this node's replicas: its copy is in", victim.log())
        # Its producers and consumers stop sending to it: the process ends.
        self.load.avoid.add(victim.id)
        self.flowing(40)
        self.history.fault(f"remove member {vid}")
        out = self.ternctl(others[1], "cluster", "remove", vid)
        tr.log(f"ternctl cluster remove {vid}: {out.returncode}\n{out.stdout}{out.stderr}")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn(f"member {vid} removed: out of the members and the metastore's voters",
                      out.stdout)
        voters = [str(n.id) for n in others]
        for n in others:
            wait_until(f"member {vid} gone from node {n.id}'s members and Raft configuration",
                       lambda n=n: gone_from(n, vid, voters), 30)
        # The removed process stops by itself, and says why.
        code = wait_exit(victim)
        self.assertEqual(code, 0, victim.log()[-3000:])
        self.assertIn(f"this node ({vid}) {REMOVED_LINE}", victim.log())
        self.assertIn("removed from the Raft configuration", "".join(n.log() for n in others))
        # Three members left: the metastore keeps three voters.
        status, body = meta.request("DELETE", f"/v1/cluster/members/{others[2].id}")
        self.assertEqual(status, 409, body)
        self.assertIn("would leave 2 members", body["error"])
        # Restarted on its old data directory (and its command line), it
        # refuses to start.
        victim.start()
        code = wait_exit(victim)
        self.assertEqual(code, 1, victim.log()[-3000:])
        self.assertIn(f"node {vid} {REMOVED_LINE}", victim.log())
        self.assertIn("does not start again", victim.log())
        quarantine = sorted(os.listdir(os.path.join(victim.data, "quarantine")))
        tr.log(f"node {vid}'s quarantine/: {quarantine}")
        for p in rv_held:
            self.assertFalse(os.path.exists(os.path.join(topics, str(p))), quarantine)
            self.assertTrue(any(q.startswith(f"{V1}.{p}.pe") for q in quarantine), quarantine)
        self.c.nodes.remove(victim)  # the suite's end leaves it alone
        # The three keep serving and electing: the metastore leader dies.
        self.flowing(40)
        meta = self.c.find_leader()
        self.kill(meta, "the metastore leader after the removal")
        rest = [n for n in self.c.nodes if n is not meta]
        new = self.c.find_leader(rest, 60)
        self.assertIsNot(new, meta)
        status, body = new.request("POST", "/v1/topics", {"name": "after-remove",
                                                          "partitions": 1})
        self.assertEqual(status, 201, body)
        self.flowing(60)
        self.restart(meta)
        wait_until("every partition of rv with its whole ISR", self.settled4, 120)
        for n in self.c.nodes:
            wait_until(f"node {n.id} with three voters", lambda n=n: gone_from(n, vid, voters), 60)
        self.finish()


class Quarantine(tm.Moves):
    def test_given_back(self):
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        p = 0
        leader, replicas, spare = self.layout(p)
        x = next(r for r in replicas if r != leader)  # a follower
        xnode = self.node(x)
        pdir = os.path.join(xnode.data, "topics", V1, str(p))
        mark = os.path.join(pdir, "dropped")
        qdir = os.path.join(xnode.data, "quarantine")

        def quarantined():
            return sorted(q for q in os.listdir(qdir) if q.startswith(f"{V1}.{p}.pe"))

        def counted(state):
            return xnode.metric(f'tern_quarantined_partitions{{state="{state}"}}')

        def x_in_sync():
            ps = self.info(V1)
            return ps and x in ps[p].replicas and x in ps[p].isr and self.settled4()
        dropped = [spare if r == x else r for r in replicas]
        # Dropped from the running member: its copy goes to quarantine/ at
        # once, without a restart.
        self.wait_state(self.begin(p, dropped), ("done",), 120)

        def moved_now():
            q = quarantined()
            return (q if len(q) == 1 and not os.path.exists(pdir) and counted("moved") == 1 and
                    counted("marked") == 0 else None)
        q = wait_until(f"{V1}/{p}'s dropped copy in node {x}'s quarantine/ (no restart)",
                       moved_now, 60)
        tr.log(f"node {x}'s quarantine/: {os.listdir(qdir)}")
        self.assertTrue(xnode.running())
        self.assertIn(f"partition {V1}/{p} was dropped from this node's replicas", xnode.log())
        # It goes on serving its other partitions.
        self.flowing(40)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        # Given back: it starts from an empty log and catches up.
        self.wait_state(self.begin(p, replicas), ("done",), 180)
        wait_until(f"node {x} back in {V1}/{p}'s ISR from an empty log", x_in_sync, 120)
        self.assertEqual(quarantined(), q)
        self.assertFalse(os.path.exists(mark))
        self.flowing(40)
        # Held (TERN_TEST_QUARANTINE_HOLD: a copy kept in use stays
        # marked), then given back before the move: the mark goes first,
        # then it follows on its copy and rejoins the ISR.
        self.kill(xnode, "restarted with its dropped copies of rv held")
        env = self.c.env()
        env["TERN_TEST_QUARANTINE_HOLD"] = f"{V1}=1"
        xnode.start(env=env)
        xnode.wait_ready(120)
        wait_until(f"node {x} in {V1}/{p}'s ISR after its restart", x_in_sync, 120)
        self.wait_state(self.begin(p, dropped), ("done",), 120)
        wait_until(f"{V1}/{p} marked dropped on node {x}", lambda: os.path.exists(mark), 30)
        wait_until("the marked copy counted", lambda: counted("marked") == 1, 30)
        self.wait_state(self.begin(p, replicas), ("done",), 180)
        self.assertFalse(os.path.exists(mark), f"{V1}/{p} still marked on node {x}")
        wait_until(f"node {x} back in {V1}/{p}'s ISR on its copy", x_in_sync, 120)
        self.assertEqual(quarantined(), q)
        self.flowing(40)
        # Dropped again (still held), then restarted without the hold: the
        # start moves it.
        self.wait_state(self.begin(p, dropped), ("done",), 120)
        wait_until(f"{V1}/{p} marked dropped on node {x} again", lambda: os.path.exists(mark), 30)
        self.kill(xnode, "a dropped copy still marked: quarantined at the start")
        self.restart(xnode)
        q2 = quarantined()
        tr.log(f"node {x}'s quarantine/: {os.listdir(qdir)}")
        self.assertEqual(len(q2), 2, q2)
        self.assertFalse(os.path.isdir(pdir))
        self.assertEqual(counted("moved"), 2)
        self.flowing(40)
        self.finish()


class RemoveLeader(harness.ClusterTest):
    def test_remove_the_metastore_leader(self):
        c = self.make(4).start()
        c.wait_alive(4, 90)
        leader = c.find_leader()
        lid = str(leader.id)
        others = [n for n in c.nodes if n is not leader]
        via = others[0]
        status, body = via.request("DELETE", f"/v1/cluster/members/{lid}")
        self.assertIn(status, (200, 202), body)
        self.assertTrue(body["removed"], body)
        voters = [str(n.id) for n in others]
        for n in others:
            wait_until(f"member {lid} gone from node {n.id}'s members and Raft configuration",
                       lambda n=n: gone_from(n, lid, voters), 30)
        self.assertEqual(wait_exit(leader), 0, leader.log()[-3000:])
        self.assertIn(REMOVED_LINE, leader.log())
        new = c.find_leader(others, 60)
        self.assertIn(str(new.id), voters)
        # The same id, an empty data directory, --join: a new member.
        with open(os.path.join(leader.data, "incarnation")) as f:
            old_inc = f.read().strip()
        shutil.rmtree(leader.data)
        leader.join = ",".join(n.api_address for n in others)
        leader.start()
        leader.wait_ready(120)

        def back():
            v = members_view(new)
            m = next((m for m in (v or {}).get("members", []) if m["id"] == lid), None)
            return (m is not None and m["status"] == "alive" and m["voter"] and
                    m["incarnation"] not in (None, old_inc) and
                    lid in v["raft_voters"] and lid not in [r["id"] for r in v["removed"]])
        wait_until(f"member {lid} back as a new member", back, 60)
        # A member removed while it is down, back on its old data
        # directory once the Raft configuration without it is committed:
        # it is told, with the line that says what to do (it catches up to
        # its own removal and stops, or the leader refuses its
        # registration first).
        down = next(n for n in others if n is not new)
        did = str(down.id)
        down.kill()
        status, body = new.request("DELETE", f"/v1/cluster/members/{did}")
        self.assertIn(status, (200, 202), body)
        self.assertTrue(body["removed"], body)
        left = [str(n.id) for n in c.nodes if n is not down]
        for n in c.nodes:
            if n is not down:
                wait_until(f"member {did} gone from node {n.id}'s view",
                           lambda n=n: gone_from(n, did, left), 30)
        wait_until(f"node {did} out of the Raft configuration",
                   lambda: any(f"node {did} removed from the Raft configuration" in n.log()
                               for n in c.nodes if n is not down), 30)
        down.start()
        wait_until(f"node {did} told it was removed", lambda: REMOVED_LINE in down.log(), 60)
        if down.running():
            down.kill()
        removed = [line for n in c.nodes for line in n.log().splitlines()
                   if "removed" in line or "Raft configuration" in line]
        print("\n".join(removed), flush=True)


# Only this file's cases.
for _name in dir(tm.Moves):
    if _name.startswith("test"):
        setattr(Remove, _name, None)
        setattr(Quarantine, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
