"""Faults at a partition move's hand-over (issue 24's promise: whatever node
is SIGKILLed at whatever moment of a move, no acknowledged message and no
acknowledged FIN/ack is lost, and nothing is delivered on a channel again
after its FIN/ack was answered OK; docs/cluster.md "Partition moves").

test_moves.py and test_moves_f1.py kill a node while the target is frozen,
so the move waits before its copy. These cases kill at the hand-over:
every target member in the ISR (the move `handing_over`), the old leader
holding its deliveries with its leases requeued, the completion not yet
applied. The metastore leader proposes a ready move's completion within
200 ms; every node here runs ternd-test with
TERN_TEST_MOVE_COMPLETE_DELAY_MS, so a metastore leader proposes it only
once it has seen the move ready for that long (a new leader counts again),
which holds the hand-over open for the fault whatever the machine's speed,
and TERN_TEST_MOVE_COMPLETE_HOLD_FILE, so that it holds only while a file
of the test's exists: once the fault is done and what it causes seen (a
node fenced, a new leader), the case removes the file (release) and the
move completes as soon as it is ready. The classes whose faults come
while the copy runs hold nothing.

Under the replication suite's load (test_replication.py: /v1 and NSQ
producers and consumers acking on every node) and its ledger checker
(lost, phantom, conflict, hole, diverged, gapped and resurrected-FIN all
0); each case also checks that the move ends (done or aborted) and that
the partition ends led with its whole ISR and takes produces.

Four nodes, topic rv with four partitions of factor 3 (MoveFaults):
  test_target_killed_handing_over   the new member, in the ISR, SIGKILLed;
  test_source_killed_handing_over   the old leader (moved off), SIGKILLed;
  test_metastore_leader_killed_handing_over  the metastore leader, a
                                    member the move drops, SIGKILLed: the
                                    next metastore leader completes it;
  test_abort_handing_over           DELETE /v1/cluster/moves/{id} while it
                                    hands over: aborted, back on the old
                                    replicas, delivering again;
  test_abort_after_target_took_the_lead  the new member forced to lead
                                    (clean) while it hands over, acks
                                    answered by it, then the abort: the
                                    lead goes back to an old member;
  test_new_leader_killed_after_switch  the new member that took the lead at
                                    the completion SIGKILLed at once;
  test_decommissioned_member_killed_handing_over  a member being
                                    decommissioned, a leader, SIGKILLed while
                                    a move off it hands over: it ends holding
                                    nothing.
Four nodes, move-rate 256 KiB/s and a 2 MB backlog on the partition moved
(MoveFaultsCopying), so the fault lands mid-copy:
  test_source_killed_copying        the leader (moved off) SIGKILLed: the
                                    target copies the rest from the next;
  test_target_killed_copying        the new member SIGKILLed holding the
                                    leader's channel state (its snapshot
                                    comes before the records): restarted,
                                    it copies the rest, with no hole.
  test_target_killed_before_its_copy_opens  the new member SIGKILLed once
                                    the leader's channel state came before
                                    its copy was open (TERN_TEST_COPY_OPEN_HOLD
                                    holds the open): the state waits for
                                    the copy, open and marked a replica's,
                                    and no hole is left.
Three nodes, rv and rn at factor 1 (MoveFaultsF1):
  test_source_killed_after_switch   the source SIGKILLed as soon as the
                                    move is done (the target leads);
  test_target_killed_handing_over   the target (the ISR's other member)
                                    SIGKILLed while it hands over.
The same, move-rate 256 KiB/s and a 2 MB backlog (MoveFaultsF1Copying):
  test_target_killed_copying        the target SIGKILLed mid-copy holding the
                                    owner's channel state, its records all
                                    below the owner's first epoch: restarted,
                                    it copies the rest, with no hole.
  test_target_killed_before_its_copy_opens  the same before the target's
                                    copy opened: the only copy once the
                                    move is done, it holds every record.

Run: python3 tests/cluster/test_move_faults.py --ternd build/ternd-test \
         --ternctl build/ternctl [MoveFaults.test_...]
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_moves as tm  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402

# test_moves_f1's import sets the suite's arguments to factor 1: kept for
# MoveFaultsF1 alone.
REPL_ARGS = tr.REPL_ARGS
import test_moves_f1 as f1  # noqa: E402
F1_ARGS, tr.REPL_ARGS = tr.REPL_ARGS, REPL_ARGS

V1 = tr.V1
# Long enough to see the hand-over and act in it on a loaded machine, and
# past the member session (3 s), so a member killed in it is fenced before
# the completion is proposed.
HOLD_MS = 8000


class Faults:
    """What both classes share (a mixin before tm.Moves)."""

    hold = True  # the class's faults come in a hand-over, held open

    def make(self, n, **kw):
        c = super().make(n, **kw)
        env = c.env()
        # A node's own copy of a partition this file lists ("topic/p") is
        # not opened while it exists (hold_open).
        self.open_hold_file = os.path.join(c.dir, "hold-open")
        env.update(TERN_TEST_COPY_OPEN_HOLD=self.open_hold_file)
        if self.hold:
            # Moves are held while this file exists (release).
            self.hold_file = os.path.join(c.dir, "hold-moves")
            open(self.hold_file, "w").close()
            env.update(TERN_TEST_MOVE_COMPLETE_DELAY_MS=str(HOLD_MS),
                       TERN_TEST_MOVE_COMPLETE_HOLD_FILE=self.hold_file)
        for node in c.nodes:
            orig = node.start

            def start(*extra, env=None, orig=orig, mine=env):
                return orig(*extra, env=env if env is not None else mine)
            node.start = start
        return c

    def release(self):
        """The case's fault is done and its effect seen: no move is held
        any longer (each completes once it is ready)."""
        tr.log("moves no longer held in their hand-over")
        os.unlink(self.hold_file)

    def handing_over(self, mid, node):
        """Wait for move mid to hand over (as node lists it)."""
        m = self.wait_state(mid, ("handing_over", "done", "aborted", "failed"), 120, node)
        self.assertEqual(m["state"], "handing_over", m)
        tr.log(f"move {mid} handing over: {m}")
        return m

    def acked_on(self, p, since):
        return sum(1 for o in list(self.history.ops)
                   if o.partition == p and o.outcome == "ok" and o.t_invoke >= since and
                   o.topic == V1)

    def backlog(self, p, n=128, size=16384):
        node = self.leader(p)
        prod = self.history.producer(f"{V1}.backlog", V1, "/v1 produce (backlog)", partition=p)
        for _ in range(n):
            seqs, ids = prod.next_ids(1)
            op = self.history.invoke(prod.name, seqs, ids, V1, p, prod.door)
            status, body = node.request("POST", f"/v1/topics/{V1}/produce?partition={p}",
                                        tr.rl.make_body(ids[0], size), headers=tr.OCTET,
                                        timeout=8)
            self.history.complete(op, "ok" if status == 202 else
                                  "unknown" if status is None else "fail", (node.id, status))

    def mid_copy(self, mid, node, p=None, target=None):
        """Wait for move mid to be mid-copy (as node lists it); with
        target, also for target's copy of rv/p to hold the leader's channel
        state (installed from its snapshot before the records are copied:
        it then refers past the copy's end)."""
        installed = f"setrepl: channel {tr.V1_CHANNEL} of {V1}/{p}: installed the leader's state"

        def copying():
            m = self.find_move(mid, node)
            if m is not None and m["state"] in ("done", "aborted", "failed"):
                self.fail(f"move {mid} ended before the fault: {m}")
            ok = m is not None and isinstance(m.get("bytes_copied"), int) and \
                isinstance(m.get("bytes_total"), int) and \
                0 < m["bytes_copied"] < m["bytes_total"] // 2 and \
                (target is None or installed in target.log())
            return m if ok else None
        m = wait_until(f"move {mid} mid-copy", copying, 60, 0.1)
        tr.log(f"move {mid} mid-copy: {m}")
        return m

    def hold_open(self, p):
        """From now on, no node opens a copy of its own of rv/p (ensure_log
        in cluster/replica.c asks again on its tick) until open_held_killed
        ends the hold."""
        with open(self.open_hold_file, "w") as f:
            f.write(f"{V1}/{p}\n")

    def open_held_killed(self, mid, p, target):
        """target, a new member of rv/p whose copy hold_open keeps from
        opening, is SIGKILLed once the leader's channel state came to it
        first: installed (the window: a copy not marked a replica's yet
        holds a channel that refers past its log's end) or refused (503
        until the copy is open and marked). The hold ends, target comes
        back, the move completes, and target's engine never skipped its
        copy of rv/p forward at the start (queue/channel.c,
        check_lost_tail): its copy has no hole (the ledger checks the rest
        in finish)."""
        held = f"replica {V1}/{p}: opening its copy held"
        installed = f"setrepl: channel {tr.V1_CHANNEL} of {V1}/{p}: installed the leader's state"
        refused = f"setrepl: channel {tr.V1_CHANNEL} of {V1}/{p}: this node's copy of the " \
            "partition is not open yet"

        def came():
            text = target.log()
            if held not in text:
                return None
            return "installed" if installed in text else "refused" if refused in text else None
        how = wait_until(f"the leader's channel state of {V1}/{p} at node {target.id}, its "
                         "copy not open", came, 60, 0.1)
        m = self.find_move(mid)
        self.assertIn(m["state"], ("copying", "catching_up"), m)
        self.kill(target, f"the new member of {V1}/{p}, its copy not open, the leader's channel "
                          f"state {how}")
        self.flowing(40)
        os.unlink(self.open_hold_file)
        self.restart(target)
        done = self.wait_state(mid, ("done", "aborted", "failed"), 180)
        self.assertEqual(done["state"], "done", done)
        skipped = [line for line in target.log().splitlines()
                   if f"partition {V1}/{p}: channel " in line and "skipping them" in line]
        self.expect(f"node {target.id} skipped its copy of {V1}/{p} forward at its start",
                    skipped, [])

    def serves(self, p, n=20):
        t = time.monotonic()
        wait_until(f"{n} produces to {V1}/{p} acknowledged",
                   lambda: self.acked_on(p, t) >= n, 90)


class MoveFaults(Faults, tm.Moves):
    # No rebalance when a killed node comes back: one under way as the test
    # ends is read as the partition's end state (its old members still in
    # the ISR), and its dropped member's copy then counts as a short one.
    node_args = ("--auto-rebalance=false",)

    def test_target_killed_handing_over(self):
        """The new member SIGKILLed in the ISR while the move hands over:
        fenced out of the ISR, the move waits for it (catching_up again)
        and completes once it is back."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = self.partition_spared_by_meta_leader()
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.handing_over(mid, meta)
        self.kill(self.node(spare), f"the new member of {V1}/{p}, handing over")
        time.sleep(tr.SESSION + 1)
        self.release()
        self.restart(self.node(spare))
        done = self.wait_state(mid, ("done", "aborted", "failed"), 120, meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.serves(p)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_source_killed_handing_over(self):
        """The old leader (not in the new list) SIGKILLed while the move
        hands over, its deliveries held and its leases requeued: the
        partition fails over to a target member, the move completes."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        # A partition not led by the metastore leader: the control plane
        # stays up.
        p = next(q for q in range(4) if self.layout(q)[0] != str(meta.id))
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.handing_over(mid, meta)
        self.kill(self.node(leader), f"the leader of {V1}/{p}, moved off, handing over")
        self.new_leader(p, self.node(leader))
        self.release()
        done = self.wait_state(mid, ("done", "aborted", "failed"), 120, meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.assertIn(ps.leader, target, ps)
        self.serves(p)
        self.restart(self.node(leader))
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_metastore_leader_killed_handing_over(self):
        """The metastore leader, a follower of the partition that the move
        drops, SIGKILLed while the move hands over: the next metastore
        leader completes it."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        me = str(meta.id)
        p = next((q for q in range(4) if me in self.layout(q)[1] and self.layout(q)[0] != me),
                 None)
        if p is None:
            self.fail(f"no partition that node {me} follows")
        leader, replicas, spare = self.layout(p)
        target = [spare if r == me else r for r in replicas]
        mid = self.begin(p, target, meta)
        self.handing_over(mid, meta)
        self.kill(meta, f"the metastore leader, dropped from {V1}/{p}, handing over")
        others = [n for n in self.c.nodes if n is not meta]
        new_meta = self.c.find_leader(others, 60)
        tr.log(f"metastore led by node {new_meta.id} now")
        wait_until(f"node {me} fenced out of {V1}/{p}'s ISR",
                   lambda: (lambda ps: ps is not None and me not in ps[p].isr)(
                       self.partitions(new_meta, V1)), tr.SESSION + 30, 0.2)
        self.release()
        done = self.wait_state(mid, ("done", "aborted", "failed"), 120, new_meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(new_meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.serves(p)
        self.restart(meta)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_abort_handing_over(self):
        """DELETE of a move while it hands over (the old leader holding
        its deliveries, its leases requeued, the new member in the ISR):
        aborted, the partition back on its old replicas, led by its old
        leader, which delivers again."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = 0
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.handing_over(mid, meta)
        self.history.fault(f"abort move {mid} of {V1}/{p}, handing over")
        status, answer = meta.request("DELETE", f"/v1/cluster/moves/{mid}")
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["state"], "aborted", answer)
        wait_until(f"{V1}/{p} back on {replicas} on every node",
                   lambda: self.on_replicas_everywhere(p, replicas), 30)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.leader, leader, ps)
        # Its deliveries go on: ids produced to it after the abort come
        # back to the consumers.
        t = time.monotonic()
        self.serves(p)
        wait_until(f"messages of {V1}/{p} produced after the abort delivered",
                   lambda: self.delivered_on(p, t) >= 10, 90)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_abort_after_target_took_the_lead(self):
        """A new member made leader (a forced clean election) while the
        move hands over, acks answered by it, then the move aborted: the
        leadership goes back to an old member, the new one is dropped with
        what it leads, and nothing it acknowledged is lost or delivered
        again after its ack."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = 0
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.handing_over(mid, meta)
        self.history.fault(f"leader of {V1}/{p} forced to node {spare}, handing over")
        status, answer = meta.request("POST", f"/v1/topics/{V1}/partitions/{p}/leader",
                                      {"node": spare})
        self.assertEqual(status, 200, answer)
        t = time.monotonic()
        wait_until(f"{V1}/{p} led by node {spare}",
                   lambda: self.partitions(meta, V1)[p].leader == spare, 30, 0.1)
        wait_until(f"acks of {V1}/{p} answered by its new leader {spare}",
                   lambda: self.acks_since(p, t) >= 5, 30, 0.1)
        self.history.fault(f"abort move {mid} of {V1}/{p}, led by its new member")
        status, answer = meta.request("DELETE", f"/v1/cluster/moves/{mid}")
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["state"], "aborted", answer)
        wait_until(f"{V1}/{p} back on {replicas} on every node",
                   lambda: self.on_replicas_everywhere(p, replicas), 30)
        ps = self.partitions(meta, V1)[p]
        self.assertIn(ps.leader, replicas, ps)
        t = time.monotonic()
        self.serves(p)
        wait_until(f"messages of {V1}/{p} produced after the abort delivered",
                   lambda: self.delivered_on(p, t) >= 10, 90)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_new_leader_killed_after_switch(self):
        """The new member that took the lead at the completion SIGKILLed
        as soon as the move is done: the partition fails over to another
        member of the new list."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = self.partition_spared_by_meta_leader()
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.handing_over(mid, meta)
        self.release()  # the fault comes after the switch
        done = self.wait_state(mid, ("done", "aborted", "failed"), 60, meta)
        self.assertEqual(done["state"], "done", done)
        new = self.partitions(meta, V1)[p].leader
        self.assertEqual(new, spare)
        self.kill(self.node(new), f"the new leader of {V1}/{p}, right after the switch")
        self.new_leader(p, self.node(new))
        self.serves(p)
        self.restart(self.node(new))
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_decommissioned_member_killed_handing_over(self):
        """A member being decommissioned, leader of a partition, SIGKILLed
        while one of the moves off it hands over: the moves go on from the
        other members (its partitions fail over), and it ends holding
        nothing."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        ps = self.info(V1)
        vid = next(p.leader for p in ps if p.leader != str(meta.id))
        status, body = meta.request("POST", f"/v1/cluster/members/{vid}/decommission",
                                    headers=tr.CLIENT)
        self.assertEqual(status, 204, body)
        self.history.fault(f"decommission member {vid}")

        def off_it_handing_over():
            return next((m for m in self.moves(meta) if vid in m["from"] and
                         vid not in m["to"] and m["state"] == "handing_over"), None)
        m = wait_until(f"a move off member {vid} handing over", off_it_handing_over, 120, 0.1)
        tr.log(f"move off {vid} handing over: {m}")
        self.kill(self.node(vid), f"member {vid}, decommissioned, a move off it handing over")
        # Once its partitions failed over (its session ended), no move is
        # held: the one handing over at the kill was held past the fence,
        # and the rest of the decommission's moves need no hold.
        wait_until(f"no partition of {V1} led by member {vid}",
                   lambda: (lambda ps: ps and all(p.leader and p.leader != vid for p in ps))(
                       self.info(V1)), tr.SESSION + 30, 0.2)
        self.release()

        def holds_nothing():
            status, body = meta.request("GET", "/v1/cluster/members")
            if status != 200:
                return None
            mb = next(x for x in body["members"] if x["id"] == vid)
            return mb if mb["replica_partitions"] == 0 else None
        mb = wait_until(f"member {vid} holds no replica", holds_nothing, 240, 0.5)
        tr.log(f"member {vid} after the decommission: {mb}")

        def gone_everywhere():
            # Every running node's metastore replica applied the last move.
            for n in self.c.nodes:
                ps = self.partitions(n, V1) if n.running() else []
                if ps is None or any(vid in x.replicas for x in ps):
                    return None
            return True
        wait_until(f"member {vid} in no replica list of {V1} on any running node",
                   gone_everywhere, 60)
        for p in range(4):
            self.serves(p, 5)
        self.restart(self.node(vid))
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def acks_since(self, p, since):
        """Acks of rv/p answered OK since (the router settles an ack on
        the partition's leader: after the forced election, the new member)."""
        with self.history.lock:
            return sum(1 for f in self.history.fins if f[1] == V1 and f[3] == p and f[0] >= since)

    def delivered_on(self, p, since):
        with self.history.lock:
            return sum(1 for d in self.history.deliveries
                       if d[1] == V1 and d[3] == p and d[0] >= since)


class MoveFaultsCopying(Faults, tm.Moves):
    """Faults while the copy runs: move-rate holds it to 256 KiB/s and
    the partition gets a backlog of 2 MB first (ids of the ledger), so the
    move is seen mid-copy, a part of the log on the target, whatever the
    machine's speed."""
    node_args = ("--move-rate=256KiB", "--auto-rebalance=false")
    hold = False  # the faults come while the copy runs

    def test_source_killed_copying(self):
        """The leader (moved off) SIGKILLed while the target copies: the
        partition fails over to an old follower, the target copies the
        rest from it, the move completes."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(60)
        meta = self.c.find_leader()
        p = next(q for q in range(4) if self.layout(q)[0] != str(meta.id))
        self.backlog(p)
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.mid_copy(mid, meta)
        self.kill(self.node(leader), f"the leader of {V1}/{p}, moved off, mid-copy")
        self.new_leader(p, self.node(leader))
        done = self.wait_state(mid, ("done", "aborted", "failed"), 180, meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.serves(p)
        self.restart(self.node(leader))
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()

    def test_target_killed_copying(self):
        """The new member SIGKILLed with part of the log copied and the
        leader's channel state installed (it refers past the copy's end):
        once back, it copies the rest from its own copy's end on, leaving
        no hole (the engine used to skip its log to the channel's end at
        the start, taking the missing records for a lost tail), and the
        move completes."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(60)
        meta = self.c.find_leader()
        p = self.partition_spared_by_meta_leader()
        self.backlog(p)
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        mid = self.begin(p, target, meta)
        self.mid_copy(mid, meta, p, self.node(spare))
        self.kill(self.node(spare), f"the new member of {V1}/{p}, mid-copy, holding the "
                                    "leader's channel state")
        self.flowing(40)
        self.restart(self.node(spare))
        done = self.wait_state(mid, ("done", "aborted", "failed"), 180, meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.serves(p)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()


    def test_target_killed_before_its_copy_opens(self):
        """The new member SIGKILLed when the leader's channel state came
        before its replica manager opened its copy (TERN_TEST_COPY_OPEN_HOLD
        holds the open): the state waits for the copy (503) and once back
        the target copies the whole log. It used to install the state in a
        copy not marked a replica's yet, whose engine at the next start
        skipped the log to the channel's end: a hole in the copy for good."""
        self.cluster(n=4)
        self.load.start()
        self.flowing(60)
        meta = self.c.find_leader()
        p = self.partition_spared_by_meta_leader()
        leader, replicas, spare = self.layout(p)
        target = [spare] + [r for r in replicas if r != leader]
        self.hold_open(p)
        mid = self.begin(p, target, meta)
        self.open_held_killed(mid, p, self.node(spare))
        ps = self.partitions(meta, V1)[p]
        self.assertEqual(ps.replicas, target, ps)
        self.serves(p)
        wait_until("every partition of rv with its whole ISR", self.settled4, 90)
        self.finish()


class MoveFaultsF1(Faults, f1.MovesF1):
    """Both topics at factor 1 (rv asks for it, rn, NSQ-made, takes the
    default), as test_moves_f1.py, whose helpers these are."""
    node_args = ("--auto-rebalance=false",)  # as MoveFaults

    def cluster(self, n=3, **kw):
        tr.REPL_ARGS = F1_ARGS
        try:
            return super().cluster(n=n, **kw)
        finally:
            tr.REPL_ARGS = REPL_ARGS

    def settled3(self):
        return self.settled(V1, 3)

    def pick(self):
        """(p, source, target) of rv, neither the metastore leader."""
        meta = str(self.c.find_leader().id)
        ps = self.info(V1)
        p = next(x.index for x in ps if x.leader != meta)
        src = ps[p].leader
        dst = next(str(n.id) for n in self.c.nodes if str(n.id) not in (src, meta))
        return p, src, dst

    def test_source_killed_after_switch(self):
        """The source of a factor-1 move SIGKILLed as soon as the target
        leads (the move done), consumers acking throughout: the target
        serves every acknowledged message, nothing acked comes again."""
        self.cluster()
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p, src, dst = self.pick()
        mid = self.begin(p, [dst], meta)
        self.handing_over(mid, meta)
        self.release()  # the fault comes after the switch
        done = self.wait_state(mid, ("done", "aborted", "failed"), 60, meta)
        self.assertEqual(done["state"], "done", done)
        self.kill(self.node(src), f"the source of {V1}/{p}, right after the switch")
        ps = self.partitions(meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.serves(p)
        self.restart(self.node(src))
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()

    def test_target_killed_handing_over(self):
        """The target of a factor-1 move SIGKILLed in the ISR while the
        move hands over: the source keeps the partition, the move completes
        once the target is back."""
        self.cluster()
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p, src, dst = self.pick()
        mid = self.begin(p, [dst], meta)
        self.handing_over(mid, meta)
        self.kill(self.node(dst), f"the target of {V1}/{p}, handing over")
        time.sleep(tr.SESSION + 1)
        self.release()
        self.restart(self.node(dst))
        done = self.wait_state(mid, ("done", "aborted", "failed"), 120, meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.serves(p)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()


class MoveFaultsF1Copying(MoveFaultsF1):
    """Factor 1, the copy held to 256 KiB/s with a 2 MB backlog."""
    node_args = ("--move-rate=256KiB", "--auto-rebalance=false")
    hold = False  # the fault comes while the copy runs

    def test_target_killed_copying(self):
        """The target of a factor-1 move SIGKILLed mid-copy, holding the
        owner's channel state: the records it copied so far are below the
        owner's first epoch (the owner's log had none before the move);
        restarted, it copies the rest with no hole, and the move completes."""
        self.cluster()
        self.load.start()
        self.flowing(60)
        meta = self.c.find_leader()
        p, src, dst = self.pick()
        self.backlog(p)
        mid = self.begin(p, [dst], meta)
        self.mid_copy(mid, meta, p, self.node(dst))
        self.kill(self.node(dst), f"the target of {V1}/{p}, mid-copy, holding the owner's "
                                  "channel state")
        self.flowing(40)
        self.restart(self.node(dst))
        done = self.wait_state(mid, ("done", "aborted", "failed"), 180, meta)
        self.assertEqual(done["state"], "done", done)
        ps = self.partitions(meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.serves(p)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()


    def test_target_killed_before_its_copy_opens(self):
        """The target of a factor-1 move SIGKILLed when the owner's channel
        state came before its replica manager opened its copy (as
        MoveFaultsCopying's case): the target, the only copy once the move
        is done, holds every acknowledged record (it used to skip to the
        channel's end at its start: phantom, acknowledged records that no
        copy kept)."""
        self.cluster()
        self.load.start()
        self.flowing(60)
        meta = self.c.find_leader()
        p, src, dst = self.pick()
        self.hold_open(p)
        mid = self.begin(p, [dst], meta)
        self.open_held_killed(mid, p, self.node(dst))
        ps = self.partitions(meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.serves(p)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()


# Only this file's cases.
for _cls in (MoveFaults, MoveFaultsCopying, MoveFaultsF1, MoveFaultsF1Copying):
    for _name in dir(_cls):
        if _name.startswith("test") and _name not in vars(_cls):
            setattr(_cls, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
