"""Moves of factor-1 partitions (issue 24; docs/replication.md "Moving a
factor-1 partition"): the partition becomes a one-replica replicated
partition for the move (its owner leads it in a state of its own), the
target catches up through the follower fetch with the channel state,
leadership is handed over and the source's copy is set aside. Under the
replication suite's load (test_replication.py: /v1 and NSQ producers and
consumers on every node) and its ledger checker (lost, phantom, conflict,
hole, diverged and resurrected-FIN all 0), with both topics at factor 1:
`rv` made through /v1 (three partitions, one per node) and `rn` made by
the NSQ doors (default-replication-factor 1).

  test_move_with_backlog  rv/p moves off its owner under the load, and
                          rs/0 (an NSQ-made topic with no consumer) with a
                          backlog on its channel `slow`: 40 messages, ten
                          leased, three of them acked ahead of the
                          frontier, one deferred (NSQ REQ, five minutes):
                          both moves complete, each partition led by its
                          target alone, the old owner's NSQ consumer of rs
                          is dropped, /lookup names rs's new owner, the
                          leased messages are delivered again there, the
                          acked ones never, the deferred one not before
                          its time; refusals of bad lists first;
  test_target_killed      the target is SIGKILLed before it copied anything
                          (frozen as the move began): the partition keeps
                          taking produces on its owner, the move stays
                          catching_up and completes once the target is back;
  test_source_killed      the source (the leader) is SIGKILLed while the
                          move waits for its frozen target: the partition
                          waits for its only copy (as a factor-1 partition
                          does), and once both are back the move completes;
  test_abort              a move aborted (DELETE) while its target is frozen:
                          the partition stays on its owner, led there, and
                          takes produces;
  test_metastore_leader_killed  the metastore leader is SIGKILLed while the
                          move waits for its frozen target: the next
                          metastore leader completes it.

Run: python3 tests/cluster/test_moves_f1.py --ternd build/ternd --ternctl build/ternctl
         [MovesF1.test_...]
"""
import os
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_moves as tm  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Closed, Conn, FRAME_MESSAGE  # noqa: E402  (tests/e2e)

V1, NSQ = tr.V1, tr.NSQ
SLOW, BACKLOG = "slow", "rs"
# Both topics at factor 1: rv asks for it, rn (NSQ-made) takes the default.
tr.REPL_ARGS = ["--default-replication-factor=1", "--min-insync-replicas=1",
                f"--member-session-timeout={int(tr.SESSION)}s"]


def closed_within(conn, seconds):
    """Whether the server closes conn within seconds (frames before the
    close, heartbeats included, are skipped; a heartbeat does not extend
    the wait, as it would Conn.expect_closed's)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn.read_frame()
        except Closed:
            return True
        except (socket.timeout, OSError):
            return False
    return False


class MovesF1(tm.Moves):
    def topics(self, partitions):
        c = self.c
        status, body = c.nodes[0].request(
            "POST", "/v1/topics", {"name": V1, "partitions": partitions,
                                   "replication_factor": 1, "durability": "durable",
                                   "visibility_timeout_ms": tr.VISIBILITY_MS})
        self.assertEqual(status, 201, body)
        self.assertEqual(body.get("replication_factor"), 1, body)
        status, answer = c.nodes[0].request("POST", f"/topic/create?topic={NSQ}", auth=False)
        self.assertEqual(status, 200, answer)
        for topic, ch in ((V1, tr.V1_CHANNEL), (NSQ, tr.NSQ_CHANNEL)):
            status, answer = c.nodes[0].request(
                "POST", f"/channel/create?topic={topic}&channel={ch}", auth=topic == V1)
            self.assertEqual(status, 200, answer)
        wait_until(f"every partition of {V1} owned", lambda: self.settled(V1, partitions), 90)

    def partitions(self, node, topic, timeout=5):
        """As the suite's, with a factor-1 partition that never moved (no
        state: no replicas or ISR shown) read as its owner alone, in sync:
        the ledger then checks the owner's log complete to the hw, and a
        copy a move set aside counts for its own CRCs only."""
        ps = super().partitions(node, topic, timeout)
        for p in ps or []:
            if not p.replicas and p.leader:
                p.replicas, p.isr = [p.leader], [p.leader]
        return ps

    def settled(self, topic, n=None, exclude=()):
        ps = self.info(topic, exclude)
        if not ps or (n is not None and len(ps) != n):
            return False
        return all(p.leader and p.isr == p.replicas for p in ps)

    def settled3(self):
        return self.settled(V1, 3)

    def spare_of(self, p, exclude=()):
        """(owner of rv/p, a member other than it and exclude)."""
        owner = self.info(V1)[p].leader
        others = [str(n.id) for n in self.c.nodes if str(n.id) != owner and
                  str(n.id) not in exclude]
        return owner, others[0]

    def partition_off_meta_leader(self):
        meta = str(self.c.find_leader().id)
        ps = self.info(V1)
        return next(p.index for p in ps if p.leader != meta)

    def acked_on(self, p, since):
        return sum(1 for o in list(self.history.ops)
                   if o.partition == p and o.outcome == "ok" and o.t_invoke >= since and
                   o.topic == V1)

    def consume(self, node, topic, p, n=10):
        status, answer = node.request(
            "GET", f"/v1/topics/{topic}/consume?channel={SLOW}&partition={p}&wait=1s&max={n}",
            headers=tr.CLIENT, timeout=8)
        if status != 200 or not isinstance(answer, dict):
            return []
        return answer.get("messages", [])

    # cases

    def test_move_with_backlog(self):
        self.cluster(n=3)
        self.load.start()
        self.flowing(150)
        meta = self.c.find_leader()
        p = self.partition_off_meta_leader()
        src, dst = self.spare_of(p, exclude=(str(meta.id),))
        # Refusals first: a factor-1 topic moves to exactly one member,
        # never to its owner, never to an unknown one.
        for body, want, words in (
                ({"replicas": [src, dst]}, 400, "exactly one member"),
                ({"replicas": [src]}, 400, "has these replicas already"),
                ({"replicas": ["9"]}, 400, "member 9 is not a known member")):
            status, answer = meta.request("PATCH", f"/v1/topics/{V1}/partitions/{p}", body)
            self.assertEqual(status, want, (body, answer))
            self.assertIn(words, answer["error"], (body, answer))
        self.assertEqual(self.info(V1)[p].replicas, [src])
        # The backlog: NSQ-made topic rs (one partition), its channel slow
        # with 40 messages, ten leased, three of them acked (ahead of the
        # frontier: the first is not), one deferred by an NSQ REQ.
        status, answer = meta.request("POST", f"/topic/create?topic={BACKLOG}", auth=False)
        self.assertEqual(status, 200, answer)
        status, answer = meta.request("POST", f"/channel/create?topic={BACKLOG}&channel={SLOW}",
                                      auth=False)
        self.assertEqual(status, 200, answer)
        bs = wait_until(f"{BACKLOG}/0 owned", lambda: (lambda ps: ps if ps and ps[0].leader
                                                       else None)(self.info(BACKLOG)), 30)
        bsrc = bs[0].leader
        bdst = next(str(n.id) for n in self.c.nodes if str(n.id) != bsrc)
        owner = self.node(bsrc)
        # info() shows the first node that knows the topic: the owner's own
        # metastore replica may apply the create a moment later (a /v1
        # produce through it answers 404 until then), so wait for its view.
        wait_until(f"{BACKLOG}/0 owned by node {bsrc} as it shows it itself",
                   lambda: (lambda ps: ps and ps[0].leader == bsrc)(
                       self.partitions(owner, BACKLOG)), 30)
        for i in range(40):
            status, _ = owner.request("POST", f"/v1/topics/{BACKLOG}/produce?partition=0",
                                      f"backlog {i}".encode(), headers=tr.OCTET)
            self.assertEqual(status, 202)
        leased = []
        wait_until(f"ten messages of {BACKLOG}/0 on {SLOW}",
                   lambda: leased.extend(self.consume(owner, BACKLOG, 0, 10 - len(leased))) or
                   len(leased) >= 10, 30)
        acked = set()
        for m in leased[2:8:2]:
            status, _ = owner.request(
                "POST",
                f"/v1/topics/{BACKLOG}/ack?channel={SLOW}&receipt_handle={m['receipt_handle']}",
                headers=tr.CLIENT)
            self.assertEqual(status, 204)
            acked.add(m["offset"])
        again = {m["offset"] for m in leased} - acked
        status, info = owner.request("GET", "/info", auth=False)
        conn = Conn(info["tcp_port"], host=owner.host, timeout=10)
        try:
            conn.identify(msg_timeout=tr.VISIBILITY_MS)
            self.assertEqual(conn.sub(BACKLOG, SLOW), (0, b"OK"))
            conn.rdy(1)
            kind, data = conn.read_frame()
            self.assertEqual(kind, FRAME_MESSAGE)
            nid = data[10:26].decode()
            deferred = tr.rl.nsq_position(nid)[1]
            conn.req(nid, 300000)
            conn.rdy(0)
            wait_until("the REQ applied", lambda: self.deferred_count(owner) >= 1, 30)
        finally:
            conn.close()
        tr.log(f"{SLOW} on {BACKLOG}/0: leased {sorted(again)}, acked {sorted(acked)}, "
               f"deferred {deferred}")
        # An NSQ consumer of the old owner (RDY 0: it takes nothing).
        watcher = Conn(info["tcp_port"], host=owner.host, timeout=10)
        self.addCleanup(watcher.close)
        watcher.identify(msg_timeout=tr.VISIBILITY_MS)
        self.assertEqual(watcher.sub(BACKLOG, SLOW), (0, b"OK"))
        # Both move: rs/0 with its backlog, rv/p under the load.
        bmid = self.begin_of(BACKLOG, 0, [bdst], meta)
        mid = self.begin(p, [dst], meta)
        for n in self.c.nodes:
            wait_until(f"node {n.id} lists move {mid}",
                       lambda: self.find_move(mid, n) is not None, 30)
        for m, topic, part, a, b in ((mid, V1, p, src, dst), (bmid, BACKLOG, 0, bsrc, bdst)):
            done = self.wait_state(m, ("done",), 120, meta)
            tr.log(f"move {m} done: {done}")
            self.assertEqual((done["from"], done["to"]), ([a], [b]), done)
            # Asked of the first node, whose metastore replica may apply the
            # completion a moment after the metastore leader's listed it.
            ps = wait_until(f"{topic}/{part} on {b} alone as node {self.c.nodes[0].id} shows it",
                            lambda: (lambda x: x if (x.leader, x.replicas, x.isr) == (b, [b], [b])
                                     else None)(self.info(topic)[part]), 30)
            self.assertEqual((ps.leader, ps.replicas, ps.isr), (b, [b], [b]), ps)
        status, members = meta.request("GET", "/v1/cluster/members")
        self.assertEqual(status, 200, members)
        self.assertTrue(all(m["outbound_moves"] == 0 for m in members["members"]), members)
        # The old owner's NSQ consumer is dropped after the hand-off, to
        # look the topic up again (as nsqd drops those of a deleted topic).
        self.assertTrue(closed_within(watcher, 30), "the old owner's NSQ consumer stays")
        # rv/p takes produces on its new owner.
        t = time.monotonic()
        wait_until(f"20 produces to {V1}/{p} acknowledged after the move",
                   lambda: self.acked_on(p, t) >= 20, 60)
        # /lookup names rs's new owner only.
        status, lk = meta.request("GET", f"/lookup?topic={BACKLOG}", auth=False)
        self.assertEqual(status, 200, lk)
        ports = {pr["tcp_port"] for pr in lk["producers"]}
        status, info = self.node(bdst).request("GET", "/info", auth=False)
        self.assertEqual(ports, {info["tcp_port"]}, lk)
        # The leased messages are delivered again by the new owner, the
        # acked ones never, the deferred one not before its time; the rest
        # of the backlog follows.
        seen = []
        target = self.node(bdst)

        def drained():
            seen.extend(self.consume(target, BACKLOG, 0, 50))
            return len({m["offset"] for m in seen}) >= 40 - len(acked) - 1
        wait_until(f"the backlog of {SLOW} delivered by the new owner", drained, 60)
        offsets = {m["offset"] for m in seen}
        self.assertTrue(again <= offsets, (again, offsets))
        self.assertEqual(acked & offsets, set(), "an acked message came again")
        self.assertNotIn(deferred, offsets, "the deferred message came before its time")
        self.assertGreaterEqual(self.deferred_count(target), 1)
        self.flowing(60)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()

    def begin_of(self, topic, p, target, node):
        status, body = node.request("PATCH", f"/v1/topics/{topic}/partitions/{p}",
                                    {"replicas": [str(x) for x in target]})
        self.assertEqual(status, 202, body)
        tr.log(f"move {body['id']} of {topic}/{p}: {body['from']} -> {body['to']}")
        self.history.fault(f"move {topic}/{p} {body['from']} -> {body['to']}")
        return body["id"]

    def deferred_count(self, node):
        """The deferred messages of rs's channel slow on node's own
        partitions (nsqd's /stats)."""
        status, st = node.request("GET", f"/stats?format=json&topic={BACKLOG}&channel={SLOW}",
                                  auth=False)
        if status != 200 or not isinstance(st, dict):
            return 0
        for t in st.get("topics") or []:
            for ch in t.get("channels") or []:
                if ch.get("channel_name") == SLOW:
                    return ch.get("deferred_count", 0)
        return 0

    def test_target_killed(self):
        self.cluster(n=3)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = self.partition_off_meta_leader()
        src, dst = self.spare_of(p, exclude=(str(meta.id),))
        victim = self.node(dst) if dst != str(meta.id) else None
        if victim is None:
            self.fail("no member other than the owner and the metastore leader")
        os.kill(victim.pid, signal.SIGSTOP)
        self.history.fault(f"SIGSTOP node {dst}")
        mid = self.begin(p, [dst], meta)
        self.kill(victim, "the target of a factor-1 move, before it copied anything")
        time.sleep(tr.SESSION + 2)  # past the target's session: it cannot join the ISR
        m = self.find_move(mid, meta)
        self.assertEqual(m["state"], "catching_up", m)
        self.assertEqual(self.info(V1)[p].leader, src)
        t = time.monotonic()
        wait_until(f"20 produces to {V1}/{p} acknowledged while the target is down",
                   lambda: self.acked_on(p, t) >= 20, 60)
        self.restart(victim)
        done = self.wait_state(mid, ("done",), 120, meta)
        tr.log(f"move {mid} done after the target's restart: {done}")
        ps = self.partitions(meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.flowing(60)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()

    def test_source_killed(self):
        self.cluster(n=3)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = self.partition_off_meta_leader()
        src, dst = self.spare_of(p, exclude=(str(meta.id),))
        source, target = self.node(src), self.node(dst)
        os.kill(target.pid, signal.SIGSTOP)
        self.addCleanup(lambda: target.running() and os.kill(target.pid, signal.SIGCONT))
        self.history.fault(f"SIGSTOP node {dst}")
        mid = self.begin(p, [dst], meta)
        self.kill(source, "the source (and leader) of a factor-1 move")
        os.kill(target.pid, signal.SIGCONT)
        self.history.fault(f"SIGCONT node {dst}")
        # Its only complete copy is down: the move waits (it is not lost),
        # the partition with it.
        time.sleep(tr.SESSION + 2)
        m = self.find_move(mid, meta)
        self.assertIn(m["state"], ("catching_up", "done"), m)
        self.restart(source)
        done = self.wait_state(mid, ("done",), 120, meta)
        tr.log(f"move {mid} done after the source's restart: {done}")
        ps = self.partitions(meta, V1)[p]  # the restarted source's replica may lag
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.flowing(60)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()

    def test_abort(self):
        """A factor-1 move aborted while its target is frozen: the
        partition stays on its owner, led there (a one-replica replicated
        partition now), taking produces throughout."""
        self.cluster(n=3)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = self.partition_off_meta_leader()
        src, dst = self.spare_of(p, exclude=(str(meta.id),))
        target = self.node(dst)
        os.kill(target.pid, signal.SIGSTOP)
        self.addCleanup(lambda: target.running() and os.kill(target.pid, signal.SIGCONT))
        self.history.fault(f"SIGSTOP node {dst}")
        try:
            mid = self.begin(p, [dst], meta)
            self.assertEqual(self.partitions(meta, V1)[p].replicas, [dst, src])
            status, answer = meta.request("DELETE", f"/v1/cluster/moves/{mid}")
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["state"], "aborted", answer)
        finally:
            os.kill(target.pid, signal.SIGCONT)
            self.history.fault(f"SIGCONT node {dst}")
        ps = self.partitions(meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas, ps.isr), (src, [src], [src]), ps)
        self.assertIn("aborted by admin", self.find_move(mid, meta)["error"])
        t = time.monotonic()
        wait_until(f"20 produces to {V1}/{p} acknowledged after the abort",
                   lambda: self.acked_on(p, t) >= 20, 60)
        self.flowing(60)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()

    def test_metastore_leader_killed(self):
        """The metastore leader is SIGKILLed while a factor-1 move waits
        for its frozen target: the next metastore leader completes it."""
        self.cluster(n=3)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        p = self.partition_off_meta_leader()
        src, dst = self.spare_of(p, exclude=(str(meta.id),))
        target = self.node(dst)
        os.kill(target.pid, signal.SIGSTOP)
        self.addCleanup(lambda: target.running() and os.kill(target.pid, signal.SIGCONT))
        self.history.fault(f"SIGSTOP node {dst}")
        mid = self.begin(p, [dst], meta)
        self.kill(meta, "the metastore leader, while a factor-1 move waits for its target")
        os.kill(target.pid, signal.SIGCONT)
        self.history.fault(f"SIGCONT node {dst}")
        new_meta = self.c.find_leader([n for n in self.c.nodes if n is not meta], 60)
        tr.log(f"metastore led by node {new_meta.id} now")
        done = self.wait_state(mid, ("done",), 120, new_meta)
        tr.log(f"move {mid} done under the new metastore leader: {done}")
        ps = self.partitions(new_meta, V1)[p]
        self.assertEqual((ps.leader, ps.replicas), (dst, [dst]), ps)
        self.restart(meta)
        self.flowing(60)
        wait_until("every partition of rv in sync", self.settled3, 90)
        self.finish()


for _name in dir(tm.Moves):
    if _name.startswith("test") and _name not in vars(MovesF1):
        setattr(MovesF1, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
