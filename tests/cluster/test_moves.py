"""Partition moves (issue 24, its core; docs/cluster.md "Partition moves"):
a replicated partition's replicas reassigned online, under the
replication suite's load (producers and consumers on the /v1 and NSQ
doors, tests/cluster/test_replication.py) and its ledger checker (lost,
phantom, conflict, hole, diverged and resurrected-FIN all 0).

Four nodes, topic rv with four partitions of factor 3:
  test_move_off_the_leader  the leader of rv/0 is replaced by node N (the
                            one that held no replica): N catches up from an
                            empty log, joins the ISR, the metastore leader
                            completes the move, leadership moves to the
                            target, the old leader's copy goes to its
                            quarantine/ while it runs (the engine closed its
                            log and channel logs) and grows no more there;
                            it serves its other partitions; then rv/1 the
                            same way through `ternctl partitions move --wait`;
  test_abort_and_refusals   a move whose target is stopped (SIGSTOP) stays
                            catching_up, answers 409 to a second move, and
                            is aborted (DELETE): the partition is back on
                            its old replicas; bad inputs get their
                            400/404/409;
  test_target_killed        the target is SIGKILLed while the move waits for
                            it (frozen as the move began, so it copied
                            nothing): the move stays catching_up while it is
                            down and completes once it is back;
  test_metastore_leader_killed  the metastore leader is SIGKILLed while a
                            move waits for its (frozen) target: the next
                            metastore leader completes it.
Progress.test_progress_on_every_node  (move-rate 64 KiB/s, a topic of its
                            own with a 1.6 MB backlog) the move's bytes and
                            lag shown mid-copy on every node, the leader's
                            asked over node RPC.

Run: python3 tests/cluster/test_moves.py --ternd build/ternd --ternctl build/ternctl
         [Moves.test_...]
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402

V1 = tr.V1
TERNCTL = None


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


class Moves(tr.Replication):
    # helpers

    def moves(self, node=None):
        node = node or self.up_node()
        status, body = node.request("GET", "/v1/cluster/moves")
        self.assertEqual(status, 200, body)
        return body["moves"]

    def up_node(self, exclude=()):
        return next(n for n in self.c.nodes if n.running() and n.id not in exclude)

    def find_move(self, mid, node=None):
        for m in self.moves(node):
            if m["id"] == mid:
                return m
        return None

    def begin(self, p, target, node=None):
        node = node or self.up_node()
        status, body = node.request("PATCH", f"/v1/topics/{V1}/partitions/{p}",
                                    {"replicas": [str(x) for x in target]})
        self.assertEqual(status, 202, body)
        self.assertEqual(body["to"], [str(x) for x in target], body)
        tr.log(f"move {body['id']} of {V1}/{p}: {body['from']} -> {body['to']}")
        self.history.fault(f"move {V1}/{p} {body['from']} -> {body['to']}")
        return body["id"]

    def wait_state(self, mid, states, timeout=120, node=None):
        def there():
            m = self.find_move(mid, node)
            return m if m is not None and m["state"] in states else None
        return wait_until(f"move {mid} {states}", there, timeout, 0.3)

    def layout(self, p):
        """(leader, replicas, the member holding no replica) of rv/p."""
        ps = self.info(V1)
        ids = [str(n.id) for n in self.c.nodes]
        spare = [i for i in ids if i not in ps[p].replicas]
        self.assertEqual(len(spare), 1, ps[p])
        return ps[p].leader, ps[p].replicas, spare[0]

    def partition_spared_by_meta_leader(self):
        """A partition of rv whose spare member (the one holding no
        replica) is not the metastore leader: stopping that member leaves
        the control plane up."""
        meta = str(self.c.find_leader().id)
        for p in range(4):
            if self.layout(p)[2] != meta:
                return p
        self.fail("every partition's spare member is the metastore leader")

    def settled4(self):
        return self.settled(V1, 4)

    def on_replicas_everywhere(self, p, replicas):
        """Whether every node shows rv/p on replicas. A node whose answer
        did not come within partitions()'s 5 s (its GET gathers the owners'
        stats over node RPC: a loaded machine, a node just resumed) is not
        there yet, rather than an error that ends the wait."""
        for n in self.c.nodes:
            ps = self.partitions(n, V1)
            if ps is None or ps[p].replicas != replicas:
                return False
        return True

    # cases

    def test_move_off_the_leader(self):
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        leader, replicas, spare = self.layout(0)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(0, target)
        # Under way, every node lists it; the leader's member shows one
        # outbound move.
        m = self.find_move(mid)
        self.assertIn(m["state"], ("copying", "catching_up", "handing_over", "done"), m)
        for n in self.c.nodes:
            wait_until(f"node {n.id} lists move {mid}",
                       lambda: self.find_move(mid, n) is not None, 30)
        done = self.wait_state(mid, ("done",), 120)
        tr.log(f"move {mid} done: {done}")
        self.assertEqual(done["from"], replicas)
        self.assertEqual(done["to"], target)
        self.assertIsNone(done["error"])
        self.assertIsNotNone(done["finished_ms"])
        ps = self.info(V1)[0]
        self.assertEqual(ps.replicas, target, ps)
        self.assertIn(spare, ps.isr, ps)
        self.assertNotIn(leader, ps.replicas, ps)
        self.assertIn(ps.leader, target, ps)
        self.assertNotEqual(ps.leader, leader, ps)
        # Every node agrees (the state is the metastore's).
        for n in self.c.nodes:
            wait_until(f"node {n.id} lists move {mid} done",
                       lambda: self.find_move(mid, n)["state"] == "done", 30)
        status, members = self.up_node().request("GET", "/v1/cluster/members")
        self.assertEqual(status, 200, members)
        self.assertTrue(all(m["outbound_moves"] == 0 for m in members["members"]), members)
        # The old leader's copy is set aside and, nothing on it using the
        # copy any more (its engine closed the log and the channel logs),
        # moved to its quarantine/ at once: no restart. It follows no more
        # (its segments stop growing while rv/0 takes writes).
        old = self.node(leader)
        qdir = os.path.join(old.data, "quarantine")

        def moved_now():
            q = [e for e in os.listdir(qdir) if e.startswith(f"{V1}.0.pe")]
            gone = not os.path.exists(os.path.join(old.data, "topics", V1, "0"))
            return os.path.join(qdir, q[0]) if len(q) == 1 and gone else None
        pdir = wait_until(f"node {leader}'s dropped copy of {V1}/0 in its quarantine/", moved_now,
                          60)
        self.assertTrue(old.running())
        self.assertIn(f"partition {V1}/0: closing what this node held of it (its log and",
                      old.log())

        def segments():
            return {f: os.path.getsize(os.path.join(pdir, f)) for f in os.listdir(pdir)
                    if f.endswith(".log")}
        before = segments()
        self.assertTrue(before, "the old leader's copy of rv/0 is gone")
        end0 = self.info(V1)[0].log_end
        wait_until("rv/0 takes 20 more records",
                   lambda: (self.info(V1)[0].log_end or 0) >= (end0 or 0) + 20, 60)
        self.assertEqual(segments(), before, "the dropped copy still grows")
        # The same through ternctl, which waits for the end: rv/1 too.
        leader, replicas, spare = self.layout(1)
        target = [spare] + [r for r in replicas if r != leader]
        n = self.up_node()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(HOME=self.c.dir, TERN_URL=f"http://{n.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        r = subprocess.run([TERNCTL, "partitions", "move", V1, "1", "--replicas",
                            ",".join(target), "--wait", "--wait-timeout", "2m"],
                           capture_output=True, text=True, env=env, timeout=180)
        tr.log(f"ternctl partitions move: {r.returncode}\n{r.stdout}{r.stderr}")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(": done", r.stdout)
        self.assertEqual(self.partitions(n, V1)[1].replicas, target)
        r = subprocess.run([TERNCTL, "cluster", "moves"], capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sum(1 for line in r.stdout.splitlines() if " done " in line), 2,
                         r.stdout)
        self.flowing(60)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_abort_and_refusals(self):
        self.cluster(n=4)
        self.load.start()
        self.flowing(60)
        n0 = self.c.nodes[0]
        p = self.partition_spared_by_meta_leader()
        leader, replicas, spare = self.layout(p)
        n0 = self.c.find_leader()  # up throughout
        # Bad inputs.
        cases = [
            ({"replicas": []}, 400, "at least one member"),
            ({"replicas": "2"}, 400, "list of member ids"),
            ({"nodes": ["1"]}, 400, "unknown field"),
            ({}, 400, "replicas required"),
            ({"replicas": ["x"]}, 400, "member id"),
            ({"replicas": ["1", "1", "2"]}, 400, "listed twice"),
            ({"replicas": ["1", "2", "9"]}, 400, "member 9 is not a known member"),
            ({"replicas": replicas}, 400, "has these replicas already"),
            ({"replicas": [spare]}, 400, "replication factor 3 is moved to exactly 3 members"),
        ]
        for body, want, words in cases:
            status, answer = n0.request("PATCH", f"/v1/topics/{V1}/partitions/{p}", body)
            self.assertEqual(status, want, (body, answer))
            self.assertIn(words, answer["error"], (body, answer))
        status, answer = n0.request("PATCH", "/v1/topics/nope/partitions/0", {"replicas": ["1"]})
        self.assertEqual(status, 404, answer)
        status, answer = n0.request("PATCH", f"/v1/topics/{V1}/partitions/9",
                                    {"replicas": ["1", "2"]})
        self.assertEqual(status, 404, answer)
        status, answer = n0.request("POST", "/v1/topics",
                                    {"name": "single", "partitions": 1, "replication_factor": 1})
        self.assertEqual(status, 201, answer)
        status, answer = n0.request("PATCH", "/v1/topics/single/partitions/0",
                                    {"replicas": ["1", "2"]})
        self.assertEqual(status, 400, answer)
        self.assertIn("replication factor 1 is moved to exactly one member", answer["error"])
        status, answer = n0.request("DELETE", "/v1/cluster/moves/00000000000000ff")
        self.assertEqual(status, 404, answer)
        status, answer = n0.request("DELETE", "/v1/cluster/moves/not-an-id")
        self.assertEqual(status, 404, answer)
        # A follower replaced by a target that cannot catch up (stopped
        # within its session: it is live when the move begins).
        follower = next(r for r in replicas if r != leader)
        target = [spare if r == follower else r for r in replicas]
        stopped = self.node(spare)
        os.kill(stopped.pid, signal.SIGSTOP)
        self.addCleanup(lambda: stopped.running() and os.kill(stopped.pid, signal.SIGCONT))
        self.history.fault(f"SIGSTOP node {spare}")
        try:
            mid = self.begin(p, target, n0)
            status, answer = n0.request("PATCH", f"/v1/topics/{V1}/partitions/{p}",
                                        {"replicas": replicas[::-1]})
            self.assertEqual(status, 409, answer)
            self.assertIn("under way", answer["error"])
            time.sleep(tr.SESSION + 1)  # past the stopped node's session
            m = self.find_move(mid, n0)
            self.assertIn(m["state"], ("copying", "catching_up"), m)
            self.assertEqual(self.partitions(n0, V1)[p].replicas, target + [follower])
            status, answer = n0.request("DELETE", f"/v1/cluster/moves/{mid}")
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["state"], "aborted", answer)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
            self.history.fault(f"SIGCONT node {spare}")
        m = self.find_move(mid, n0)
        self.assertEqual(m["state"], "aborted", m)
        self.assertIn("aborted by admin", m["error"])
        wait_until(f"rv/{p} back on {replicas} on every node",
                   lambda: self.on_replicas_everywhere(p, replicas), 30)
        # The resumed node may call a metastore election (503 + Retry-After
        # meanwhile, as the API says).
        status, answer = wait_until(
            "an answer other than 503",
            lambda: (lambda sa: sa if sa[0] != 503 else None)(
                n0.request("DELETE", f"/v1/cluster/moves/{mid}")), 30)
        self.assertEqual(status, 409, answer)
        self.assertIn("has finished (aborted)", answer["error"])
        self.flowing(60)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_target_killed(self):
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        p = self.partition_spared_by_meta_leader()
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        victim = self.node(spare)
        meta = self.c.find_leader()  # asked before the freeze: it answers throughout
        # Frozen first, so that it is live when the move begins (within its
        # session) and has copied nothing when it dies: the move is under
        # way with its target not caught up, whatever the machine's speed.
        os.kill(victim.pid, signal.SIGSTOP)
        self.history.fault(f"SIGSTOP node {spare}")
        mid = self.begin(p, target, meta)
        self.kill(victim, "the target of a move under way, before it caught up")
        # Down, it cannot join the ISR (a CAS adds only a live member): the
        # move waits, past the target's session.
        time.sleep(tr.SESSION + 2)
        m = self.find_move(mid, meta)
        self.assertIn(m["state"], ("copying", "catching_up"), m)
        self.assertNotIn(spare, self.partitions(meta, V1)[p].isr)
        self.flowing(40)
        self.restart(victim)
        done = self.wait_state(mid, ("done",), 120, meta)
        tr.log(f"move {mid} done after the target's restart: {done}")
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.assertIn(ps.leader, target, ps)
        self.flowing(60)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()


    def test_metastore_leader_killed(self):
        """A move under way survives the SIGKILL of the metastore leader:
        its state is in the Raft log, and the next leader completes it."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        # A partition the metastore leader holds a replica of, moved off
        # one of its other replicas (the leader keeps its own).
        mine = [p for p in range(4) if str(meta.id) in self.layout(p)[1]]
        p = mine[0]
        leader, replicas, spare = self.layout(p)
        gone = next(r for r in replicas if r != str(meta.id))
        target = [spare if r == gone else r for r in replicas]
        victim = self.node(spare)
        # The target frozen (live within its session) so that the move
        # waits while the metastore leader dies.
        os.kill(victim.pid, signal.SIGSTOP)
        self.addCleanup(lambda: victim.running() and os.kill(victim.pid, signal.SIGCONT))
        self.history.fault(f"SIGSTOP node {spare}")
        mid = self.begin(p, target, meta)
        self.kill(meta, "the metastore leader, while a move waits for its target")
        os.kill(victim.pid, signal.SIGCONT)
        self.history.fault(f"SIGCONT node {spare}")
        others = [n for n in self.c.nodes if n is not meta]
        new_meta = self.c.find_leader(others, 60)
        tr.log(f"metastore led by node {new_meta.id} now")
        # The killed node is in the target (it kept its replica): the move
        # completes once every target member is in the ISR, so it waits for
        # that node's return (before, the test raced its session's end: on
        # a loaded machine the node was fenced out of the ISR first and the
        # move waited for ever). The next leader completes it.
        self.restart(meta)
        done = self.wait_state(mid, ("done",), 120, new_meta)
        tr.log(f"move {mid} done under the new metastore leader: {done}")
        self.assertEqual(self.partitions(new_meta, V1)[p].replicas, target)
        self.flowing(60)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()


class Progress(Moves):
    # A copy held to 64 KiB/s: a backlog of 1.6 MB takes at least 20 s to
    # copy, whatever the machine's speed, so the move is seen mid-copy.
    node_args = ("--move-rate=64KiB",)

    def test_progress_on_every_node(self):
        """GET /v1/cluster/moves shows a move's bytes_copied, bytes_total
        and lag_records on every node, not only on the partition's leader:
        the others ask the leader over node RPC (MOVE_PROGRESS)."""
        self.cluster(n=4)
        n0 = self.c.nodes[0]
        status, body = n0.request("POST", "/v1/topics", {"name": "mp", "partitions": 1,
                                                        "replication_factor": 3,
                                                        "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        wait_until("mp/0 led", lambda: (lambda ps: ps and ps[0].leader)(self.info("mp")), 30)
        chunk = b"x" * 16384
        for _ in range(100):
            status, _ = n0.request("POST", "/v1/topics/mp/produce?partition=0", chunk,
                                   headers=tr.OCTET)
            self.assertEqual(status, 202)
        ps = self.info("mp")[0]
        spare = next(str(n.id) for n in self.c.nodes if str(n.id) not in ps.replicas)
        follower = next(r for r in ps.replicas if r != ps.leader)
        target = [spare if r == follower else r for r in ps.replicas]
        status, body = n0.request("PATCH", "/v1/topics/mp/partitions/0",
                                  {"replicas": target})
        self.assertEqual(status, 202, body)
        mid = body["id"]
        leader = self.node(ps.leader)

        def mid_copy(node):
            # None: node's metastore replica has not applied the start yet
            # (the PATCH answers once n0's has it; the others follow).
            m = self.find_move(mid, node)
            if m is None:
                return None
            if m["state"] in ("done", "aborted", "failed"):
                self.fail(f"move {mid} not under way on node {node.id}: {m}")
            ok = isinstance(m["bytes_total"], int) and isinstance(m["lag_records"], int) and \
                m["bytes_copied"] < m["bytes_total"] and m["lag_records"] > 0
            return m if ok else None
        seen = wait_until(f"move {mid} mid-copy on its leader {leader.id}",
                          lambda: mid_copy(leader), 60, 0.2)
        tr.log(f"on the leader: {seen}")
        for n in self.c.nodes:
            if n is leader:
                continue
            m = wait_until(f"move {mid}'s progress on node {n.id}", lambda: mid_copy(n), 60, 0.2)
            tr.log(f"on node {n.id}: {m}")
            self.assertEqual(m["state"], "copying", m)  # more than 1 MiB left
            self.assertEqual(m["bytes_total"], seen["bytes_total"], m)  # no writes meanwhile
            self.assertNotIn("progress_error", m)
        status, body = n0.request("DELETE", f"/v1/cluster/moves/{mid}")
        self.assertEqual(status, 200, body)
        m = self.find_move(mid, n0)
        self.assertEqual(m["state"], "aborted", m)
        self.assertIsNone(m["bytes_total"], m)  # finished moves carry no progress


# Only this file's cases: the suite's own stay in test_replication.py.
for _name in dir(tr.Replication):
    if _name.startswith("test"):
        setattr(Moves, _name, None)
for _name in dir(Moves):
    if _name.startswith("test") and _name not in vars(Progress):
        setattr(Progress, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=configure)
