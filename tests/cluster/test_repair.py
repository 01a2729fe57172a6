"""Repair of a damaged replica between real ternd processes
(tests/cluster/harness.py; docs/replication.md, "Repair of a damaged
replica"): a byte flipped in a sealed segment of a follower, found by a
scrub, takes that replica out of the ISR; it copies the damaged segment's
records back from the leader, keeps the damaged file beside the new one,
and rejoins the ISR with a log identical to the others' (every record's
CRC and digest compared below the high watermark); a node restarted after
the damage was found and before its repair finds it again (its record in
the partition's directory) and repairs it. The same for the
leader: its partition moves to a clean in-sync replica, every acknowledged
message is still readable there, and the old leader repairs itself as a
follower. The same for the ACTIVE segment (the last, still taking
appends): a follower's damage found by recovery at its restart, the
leader's found by a scrub; each copies what the leader holds of it below
its hw and rejoins the ISR; an old leader whose unacknowledged tail
began below its damaged active segment is told it parts from the leader
there, and truncates rather than copying onto that tail; a follower's
active segment that begins below the leader's log start (retention) ends
there and restarts at the leader's start. A damaged `epochs` file is
rebuilt from the copy's own EPOCH_START records, also beside a damaged
active segment (first). A partition whose every replica is damaged in the
same range goes offline, says so (/v1 `damaged`,
tern_replica_damaged_partitions, a log line on each node) and never
serves the bad bytes.

Run: python3 tests/cluster/test_repair.py --ternd build/ternd
"""
import glob
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import repl_ledger as rl  # noqa: E402
from harness import wait_until  # noqa: E402

CLIENT = {"X-Tern-Client": "repair-test"}
ARGS = ["--replica-lag-time-max=2s", "--min-insync-replicas=2",
        "--member-session-timeout=3s", "--segment-bytes=64KiB"]
TOPIC = "rp"


class RepairCase(harness.ClusterTest):
    """The helpers of the tests below: a cluster of three with TOPIC (one
    partition, factor 3) made by start()."""

    def start_cluster(self, args, env=None):
        """env: more environment for every node (the TN_TEST hooks of
        ternd-test)."""
        self.c = self.make(3, args=args)
        full = dict(self.c.env(), **(env or {}))
        for node in self.c.nodes:
            node.start(env=full)
        self.c.wait_ready()
        self.c.wait_alive(3)
        status, body = self.c.nodes[0].request(
            "POST", "/v1/topics", {"name": TOPIC, "partitions": 1, "replication_factor": 3})
        self.assertEqual(status, 201, body)
        self.acked = []
        self.seq = 0
        wait_until("a leader of rp/0", lambda: self.leader() is not None)

    # --- helpers -------------------------------------------------------------------

    def node(self, node_id):
        return next(n for n in self.c.nodes if str(n.id) == str(node_id))

    def pstats(self, node):
        status, body = node.request("GET", f"/v1/topics/{TOPIC}")
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"][0]

    def leader(self, via=None):
        for n in [via] if via else self.c.running():
            ps = self.pstats(n)
            if ps and ps.get("leader"):
                return self.node(ps["leader"])
        return None

    def produce_batch(self, n, via=None):
        """n messages of 1000 bytes in one /v1 batch through the leader (as
        via tells, when given), retried until acknowledged (a new leader
        answers 503 at first)."""
        ids = [f"m{self.seq + i}" for i in range(n)]
        self.seq += n
        bodies = [rl.make_body(i, 1000).decode() for i in ids]
        items = [{"payload": b, "partition": 0} for b in bodies]

        def send():
            lead = self.leader(via)
            if lead is None:
                return False
            status, body = lead.request("POST", f"/v1/topics/{TOPIC}/produce/batch", items,
                                        headers=CLIENT, timeout=30)
            return status == 202
        wait_until("a batch acknowledged", send, timeout=60, interval=0.5)
        self.acked += bodies

    def wait_isr(self, n, timeout=90):
        def whole():
            for node in self.c.running():
                ps = self.pstats(node)
                if ps is None or len(ps.get("isr", [])) != n or ps.get("damaged"):
                    return False
            return True
        wait_until(f"{TOPIC}/0 with {n} in-sync replicas and none damaged", whole, timeout)

    def pdir(self, node):
        return os.path.join(node.data, "topics", TOPIC, "0")

    def segments(self, node):
        return sorted(glob.glob(os.path.join(self.pdir(node), "*.log")))

    def flip(self, node, offset=None, segment=0):
        """Flip a body byte of a message record in the first segment of
        node's copy (sealed: later ones follow; segment=-1: the active one):
        the record past the middle, or the one at offset. Returns that
        record's offset."""
        path = self.segments(node)[segment]
        with open(path, "r+b") as f:
            data = f.read()
            recs = rl.parse_segment(data)
            # The records' length (an active segment has zeroed space after them).
            total = sum(rl.REC_HDR.size + len(r.key) + len(r.body) for r in recs)
            pos = 0
            for rec in recs:
                size = rl.REC_HDR.size + len(rec.key) + len(rec.body)
                pick = rec.offset == offset if offset is not None else (
                    pos > total // 2 and not rec.control and len(rec.body) > 40)
                if pick:
                    break
                pos += size
            else:
                self.fail(f"no record to flip in {path}")
            at = pos + rl.REC_HDR.size + len(rec.key) + len(rec.body) // 2
            f.seek(at)
            f.write(bytes([data[at] ^ 0x20]))
            f.flush()
            os.fsync(f.fileno())
        return rec.offset

    def active(self, node):
        with open(self.segments(node)[-1], "rb") as f:
            return f.read()

    def flip_durable_active(self, node):
        """Flip a record of node's active segment (node stopped) that a
        later record's sync mark says was durable: recovery takes the
        damage for what it is, not for a torn tail it may cut."""
        data = self.active(node)
        pos, marks = 0, []
        for rec in rl.parse_segment(data):
            marks.append((pos, rec, rl.REC_HDR.unpack_from(data, pos)[6]))
            pos += rl.REC_HDR.size + len(rec.key) + len(rec.body)
        target = next((rec for i, (p, rec, _) in enumerate(marks)
                       if not rec.control and any(m > p for _, _, m in marks[i + 1:])), None)
        self.assertIsNotNone(target, "no record of the active segment known durable")
        self.flip(node, offset=target.offset, segment=-1)

    def scrub(self, node, read_offset=None):
        """Scrub node: it finds the damage in rp/0 and isolates the copy.
        With read_offset: or a read of that offset found it first (a
        follower's repair asks the leader for the range), and the scrub
        skipped the copy already isolated."""
        status, rep = node.request("POST", "/v1/storage/scrub?wait=true", headers=CLIENT,
                                   timeout=120)
        self.assertEqual(status, 200, rep)
        found = [e for e in rep["errors"] if e["topic"] == TOPIC and e["partition"] == 0]
        if not found and read_offset is not None:
            self.assertIn(f"partition {TOPIC}/0: reading offset {read_offset} of segment 0: "
                          "data failed its checksum", node.log(), rep)
            return
        self.assertTrue(found and found[0]["isolated"], rep)

    def repairs(self, node):
        return node.metric("tern_replica_repairs_total") or 0

    def expect_identical(self, gaps=False):
        """Every replica's records below the high watermark: CRC good and
        the same (a digest without the segment-local sync mark) on each;
        dense from 0, or with gaps=True at the same offsets on each (the
        same gaps)."""
        hw = self.pstats(self.leader())["high_watermark"]
        self.assertGreater(hw, 300)
        copies = {}
        offsets = None
        for n in self.c.nodes:
            recs = [r for r in rl.read_partition(self.pdir(n)) if r.offset < hw]
            offsets = offsets or [r.offset for r in recs]
            self.assertEqual([r.offset for r in recs], offsets if gaps else list(range(hw)),
                             f"node {n.id}")
            bad = [r.offset for r in recs if not r.crc_ok]
            self.assertEqual(bad, [], f"records failing their CRC on node {n.id}")
            copies[n.id] = [r.digest for r in recs]
        first = copies[self.c.nodes[0].id]
        for node_id, digests in copies.items():
            self.assertEqual(digests, first, f"node {node_id} differs below hw {hw}")

    def expect_readable(self, node):
        """Every acknowledged message readable on node (replay reads)."""
        end = self.pstats(node)["high_watermark"]
        got = set()
        for off in range(end):
            status, m = node.request("GET", f"/v1/topics/{TOPIC}/consume?partition=0&offset={off}")
            if status == 200 and m.get("offset") == off:
                got.add(m["payload"])
        self.assertEqual([b[:40] for b in self.acked if b not in got], [], "acknowledged lost")

    def repaired(self, victim, before):
        wait_until(f"node {victim.id} repaired its copy", lambda: self.repairs(victim) > before,
                   timeout=90)
        kept = glob.glob(os.path.join(self.pdir(victim), "*.log.damaged.*"))
        self.assertEqual(len(kept), 1, kept)
        self.assertIn("repaired offsets", victim.log())

    def copy_end(self, node):
        recs = rl.parse_segment(self.active(node))
        return recs[-1].offset + 1 if recs else 0

    def small_batches_copied(self, lead, follower):
        """A new segment of small batches, copied one by one by follower
        (so that later records' sync marks prove the earlier durable)."""
        for _ in range(4):
            self.produce_batch(5)
            end = self.pstats(lead)["log_end"]
            wait_until(f"node {follower.id} holds offsets below {end}",
                       lambda: self.copy_end(follower) >= end)

    def flip_epochs(self, node):
        """Flip a byte inside the first entry of node's `epochs` file."""
        path = os.path.join(self.pdir(node), "epochs")
        with open(path, "r+b") as f:
            f.seek(14)
            b = f.read(1)
            f.seek(14)
            f.write(bytes([b[0] ^ 0x01]))


class Repair(RepairCase):
    def setUp(self):
        self.start_cluster(ARGS)
        # Several sealed segments (64 KiB each) on every replica.
        for _ in range(6):
            self.produce_batch(60)
        self.wait_isr(3)
        for n in self.c.nodes:
            wait_until(f"three segments of {TOPIC}/0 on node {n.id}",
                       lambda n=n: len(self.segments(n)) >= 3)

    # --- tests ---------------------------------------------------------------------

    def test_follower_then_leader(self):
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead)
        before = self.repairs(follower)
        off = self.flip(follower)
        self.scrub(follower)
        self.assertIn("this copy is damaged", wait_until(
            "the damage logged", lambda: "this copy is damaged" in follower.log() and
            follower.log()))
        self.repaired(follower, before)
        self.produce_batch(30)  # writes go on meanwhile and after
        self.wait_isr(3)
        self.expect_identical()
        # The repaired range reads as the leader's on the follower itself.
        with open(self.segments(follower)[0], "rb") as f:
            recs = {r.offset: r for r in rl.parse_segment(f.read())}
        self.assertTrue(recs[off].crc_ok)

        # Now the leader: its partition moves to a clean in-sync replica,
        # which serves every acknowledged message, and it repairs itself.
        old = self.leader()
        before = self.repairs(old)
        self.flip(old)
        self.scrub(old)
        new = wait_until("another leader of rp/0", lambda: (
            lambda l: l if l is not None and l is not old else None)(self.leader(follower)))
        self.repaired(old, before)
        self.produce_batch(30)
        self.wait_isr(3)
        self.expect_identical()
        self.expect_readable(self.leader())
        self.assertIsNot(new, old)

    def test_active_segment(self):
        # Damage in the ACTIVE segment (the last, still taking appends) of
        # a follower, found by recovery at its restart, then of the leader,
        # found by a scrub: each copy is repaired from the leader (the
        # leader steps down first) and rejoins the ISR, identical below the
        # hw. Before, both stayed isolated: "cannot repair this copy: the
        # damage is not in the records of a sealed segment".
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead)
        self.small_batches_copied(lead, follower)
        follower.kill()
        self.flip_durable_active(follower)
        follower.start()
        follower.wait_ready()
        wait_until("the damage found at the restart", lambda: "this copy is damaged" in
                   follower.log())
        self.repaired(follower, 0)
        self.assertIn("(the active segment) from node", follower.log())
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical()

        old = self.leader()
        before = self.repairs(old)
        self.flip(old, segment=-1)
        self.scrub(old)
        new = wait_until("another leader of rp/0", lambda: (
            lambda l: l if l is not None and l is not old else None)(self.leader(follower)))
        self.repaired(old, before)
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical()
        self.expect_readable(self.leader())
        self.assertIsNot(new, old)

    def test_active_segment_past_divergence(self):
        # The damaged active segment lies in a tail the new leader never
        # had, and that tail began in the segment before it: this copy and
        # the leader part below the damaged segment. The leader refuses the
        # copy (diverging), the segment is emptied, and the usual fetch
        # truncates to where the logs part and copies the rest. Copying
        # the leader's records onto the old tail would leave records below
        # the hw that differ from the others' (expect_identical).
        lead = self.leader()
        others = [n for n in self.c.nodes if n is not lead]
        # The followers killed, not stopped: an answer the leader sent to a
        # parked fetch would reach a stopped one when it goes on, and the
        # new leader would hold part of the tail.
        for n in others:
            n.kill()
        # A whole segment's batch, then small ones each synced in a new (the
        # active) segment: none acknowledged, written all the same.
        bodies = [rl.make_body(f"x{i}", 1000).decode() for i in range(60)]
        lead.request("POST", f"/v1/topics/{TOPIC}/produce/batch",
                     [{"payload": b, "partition": 0} for b in bodies], headers=CLIENT, timeout=1)
        for k in range(3):
            small = [{"payload": rl.make_body(f"y{k}.{i}", 1000).decode(), "partition": 0}
                     for i in range(5)]
            before = len(rl.read_partition(self.pdir(lead)))
            lead.request("POST", f"/v1/topics/{TOPIC}/produce/batch", small, headers=CLIENT,
                         timeout=1)
            wait_until(f"node {lead.id} wrote the batch",
                       lambda: len(rl.read_partition(self.pdir(lead))) >= before + 5)
        lead.kill()
        for n in others:
            n.start()
        for n in others:
            n.wait_ready()
        wait_until("a new leader of rp/0", lambda: (
            lambda l: l if l is not None and l is not lead else None)(self.leader(others[0])))
        end = max(r.offset for r in rl.read_partition(self.pdir(lead))) + 1
        # A partition's stats lack high_watermark while the node asked has
        # not read them from its leader yet (just elected): 0 then.
        while (self.pstats(self.leader(others[0])) or {}).get("high_watermark", 0) <= end:
            self.produce_batch(30)
        self.flip_durable_active(lead)
        lead.start()
        lead.wait_ready()
        wait_until(f"node {lead.id} repaired its copy", lambda: self.repairs(lead) > 0,
                   timeout=90)
        self.assertIn("parts from node", lead.log())
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical()
        self.expect_readable(self.leader())

    def test_epochs_file(self):
        # A follower's `epochs` file damaged (found at its restart): the
        # history is rebuilt from its records' EPOCH_START records, the
        # leader telling the epoch of its first offset, and it rejoins the
        # ISR. Before, it stayed isolated for good.
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead)
        follower.kill()
        self.flip_epochs(follower)
        follower.start()
        follower.wait_ready()
        wait_until("the damage found at the restart", lambda: "this copy is damaged" in
                   follower.log())
        wait_until(f"node {follower.id} rebuilt its epochs file",
                   lambda: self.repairs(follower) > 0, timeout=90)
        self.assertIn("rebuilt its epochs file from its records", follower.log())
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical()

    def test_active_segment_and_epochs_file(self):
        # A follower's active segment AND its `epochs` file damaged, both
        # found at its restart: the history is rebuilt first, from the
        # records below the damaged segment, then the segment is repaired;
        # the copy rejoins the ISR identical below the hw. Before, every
        # attempt (each 2 s) copied the segment from the leader, kept
        # another `.log.damaged.` copy of it, and failed on the epochs file.
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead)
        self.small_batches_copied(lead, follower)
        follower.kill()
        self.flip_durable_active(follower)
        self.flip_epochs(follower)
        follower.start()
        follower.wait_ready()
        wait_until("the damage found at the restart", lambda: "this copy is damaged" in
                   follower.log())
        kept = os.path.join(self.pdir(follower), "*.log.damaged.*")
        wait_until(f"node {follower.id} repaired its active segment", lambda: (
            "(the active segment) from node" in follower.log() or len(glob.glob(kept)) > 1),
            timeout=90)
        self.assertEqual(len(glob.glob(kept)), 1, glob.glob(kept))
        log = follower.log()
        self.assertIn("rebuilt its epochs file from its records", log)
        self.assertLess(log.index("rebuilt its epochs file"), log.index("(the active segment)"))
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical()

    def test_restart_before_the_repair(self):
        # The damage is found while the other two are stopped (no quorum:
        # not reported, nothing to copy from), then the damaged node is
        # killed and restarted. Its segment's sidecar is intact, so
        # recovery alone would not see the damage: the record of it in the
        # partition's directory isolates the copy again at open, and it is
        # repaired as soon as it has a leader (before the record existed it
        # rejoined the ISR with the bad record in its log).
        lead = self.leader()
        victim = next(n for n in self.c.nodes if n is not lead)
        others = [n for n in self.c.nodes if n is not victim]
        self.flip(victim)
        for n in others:
            os.kill(n.daemon.proc.pid, signal.SIGSTOP)
        try:
            self.scrub(victim)
            wait_until("the damage recorded on the victim's disk",
                       lambda: os.path.exists(os.path.join(self.pdir(victim), "damage")))
            victim.kill()
        finally:
            for n in others:
                os.kill(n.daemon.proc.pid, signal.SIGCONT)
        victim.start()
        victim.wait_ready()
        wait_until("the damage found again at the restart", lambda: "before the restart and is "
                   "not repaired yet" in victim.log())
        self.repaired(victim, 0)
        self.assertFalse(os.path.exists(os.path.join(self.pdir(victim), "damage")))
        self.produce_batch(30)
        self.wait_isr(3)
        self.expect_identical()

    def test_every_replica_damaged(self):
        lead = self.leader()
        # The same record damaged on every replica (a range none can copy).
        off = self.flip(lead)
        for n in self.c.nodes:
            if n is not lead:
                self.flip(n, offset=off)
        for n in [x for x in self.c.nodes if x is not lead]:
            self.scrub(n)
        # The followers' repairs read the range from the leader: that read
        # may find the damage before the leader's scrub does.
        self.scrub(lead, read_offset=off)

        def stuck():
            for n in self.c.nodes:
                ps = self.pstats(n)
                if ps is None or ps.get("leader") is not None or len(ps.get("damaged", [])) != 3:
                    return False
            return True
        wait_until("rp/0 offline with every replica damaged", stuck, timeout=60)
        for n in self.c.nodes:
            wait_until(f"node {n.id} counts its damaged replica",
                       lambda n=n: n.metric("tern_replica_damaged_partitions") == 1)
            wait_until(f"node {n.id} says it cannot repair", lambda n=n: "no leader to copy from"
                       in n.log(), timeout=90)
            self.assertEqual(self.repairs(n), 0)
            # A copy no repair can reach is a storage failure of the node:
            # nsqd's health says so and a load balancer takes it out.
            status, text = n.nsq_http("GET", "/ping")
            self.assertEqual(status, 500, (n.id, text))
            self.assertTrue(text.startswith(f"NOK - partition {TOPIC}/0: ".encode()), text)
            status, body = n.request("GET", "/readyz", auth=False)
            self.assertEqual(status, 503, body)
            self.assertTrue(body["error"].startswith(f"partition {TOPIC}/0: "), body)
            # Never the bad bytes: the damaged record is refused, or served
            # from memory as it was written (its digest holds).
            status, m = n.request("GET", f"/v1/topics/{TOPIC}/consume?partition=0&offset={off}")
            if status == 200:
                self.assertIsNotNone(rl.parse_body(m["payload"]), m)
                self.assertIn(m["payload"], self.acked)


# TERN_TEST_LEADER_GAP: each leader of rp skips this many offsets right
# after its first epoch-start record (once per process).
GAP = 1000


class RepairAcrossGap(RepairCase):
    """A leader's log with gaps (offsets it never assigned: tn_plog_advance,
    as the queue engine's recovery of a channel that refers to a lost tail
    leaves one), made by ternd-test's TERN_TEST_LEADER_GAP: the repair
    copies up to a gap and the copy ends with the leader's gap, as a fetch
    skips it. Before, the leader answered the repair's read inside the gap
    with `error`, every 2 s, and the damaged copy stayed out of the ISR for
    good."""

    def setUp(self):
        self.start_cluster(ARGS, env={"TERN_TEST_LEADER_GAP": f"{TOPIC}={GAP}"})
        for _ in range(3):
            self.produce_batch(60)
        self.wait_isr(3)

    def test_sealed_then_active_segment_before_a_gap(self):
        # The first leader skipped offsets 1..GAP after its epoch start at
        # 0: every copy's first segment holds that one record, sealed, and
        # the gap follows it up to the next segment's base.
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead)
        bases = [int(os.path.basename(p).split(".")[0]) for p in self.segments(follower)]
        self.assertEqual(bases[:2], [0, GAP + 1])
        before = self.repairs(follower)
        self.assertEqual(self.flip(follower, offset=0), 0)
        self.scrub(follower)
        self.repaired(follower, before)
        self.assertIn(f"repaired offsets 0..0 (then the leader's gap up to {GAP + 1})",
                      follower.log())
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical(gaps=True)

        # The active segment: a follower's copy damaged while it is down,
        # and meanwhile a new leader (a process that did not lead before)
        # makes a gap past this copy's end. The repair reads the leader's
        # records from the segment's base up to the gap, the copy ends
        # there, and the fetch skips the gap.
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead and n is not follower)
        self.produce_batch(60)  # the segment rolls: a small active one follows
        self.small_batches_copied(lead, follower)
        follower.kill()
        self.flip_durable_active(follower)
        end = self.pstats(lead)["log_end"]
        lead.kill()
        lead.start(env=dict(self.c.env(), TERN_TEST_LEADER_GAP=f"{TOPIC}={GAP}"))
        lead.wait_ready()
        wait_until("a new leader's gap", lambda: (
            lambda l: l is not None and (self.pstats(l) or {}).get("log_end", 0) > end + GAP)(
                self.leader()), timeout=90)
        self.produce_batch(5)
        follower.start(env=dict(self.c.env(), TERN_TEST_LEADER_GAP=f"{TOPIC}={GAP}"))
        follower.wait_ready()
        wait_until("the damage found at the restart", lambda: "this copy is damaged" in
                   follower.log())
        self.repaired(follower, 0)
        log = follower.log()
        self.assertIn("'s log has a gap at offsets", log)
        self.assertIn("(the active segment) from node", log)
        self.produce_batch(5)
        self.wait_isr(3)
        self.expect_identical(gaps=True)


CAP_TOPIC = "rc"
CAP_PARTS = 3


class RepairCap(RepairCase):
    """max-repairs-per-node 1 on every node: a node whose copies of several
    partitions are damaged at once repairs them one at a time, the others
    waiting their turn, and all are repaired; a leader serving two
    followers' repair reads at once answers the second busy, which asks
    again and keeps its copy, and both are repaired, with no failed
    attempt. ternd-test's TERN_TEST_REPAIR_DELAY_MS (a repair holds its
    slot 1 s before its first read) and TERN_TEST_REPAIR_READ_DELAY_MS (a
    read served holds its slot 2.5 s) make them overlap for sure."""

    def setUp(self):
        self.c = self.make(3, args=ARGS + ["--max-repairs-per-node=1"])
        env = dict(self.c.env(), TERN_TEST_REPAIR_DELAY_MS=f"{CAP_TOPIC}=1000",
                   TERN_TEST_REPAIR_READ_DELAY_MS=f"{CAP_TOPIC}=2500")
        for node in self.c.nodes:
            node.start(env=env)
        self.c.wait_ready()
        self.c.wait_alive(3)
        status, body = self.c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": CAP_TOPIC, "partitions": CAP_PARTS, "replication_factor": 3})
        self.assertEqual(status, 201, body)
        for p in range(CAP_PARTS):
            wait_until(f"a leader of {CAP_TOPIC}/{p}", lambda p=p: self.cap_leader(p))
            for i in range(3):  # a sealed segment (64 KiB) on every copy
                self.cap_produce(p, f"p{p}.{i}")
        self.cap_whole()
        for p in range(CAP_PARTS):
            for n in self.c.nodes:
                wait_until(f"two segments of {CAP_TOPIC}/{p} on node {n.id}",
                           lambda n=n, p=p: len(self.cap_segments(n, p)) >= 2)

    def cap_pstats(self, node, p):
        status, body = node.request("GET", f"/v1/topics/{CAP_TOPIC}")
        if status != 200 or "partition_stats" not in body:
            return None
        return next((x for x in body["partition_stats"] if x.get("index") == p), None)

    def cap_leader(self, p):
        for n in self.c.running():
            ps = self.cap_pstats(n, p)
            if ps and ps.get("leader"):
                return self.node(ps["leader"])
        return None

    def cap_produce(self, p, tag):
        items = [{"payload": rl.make_body(f"{tag}.{i}", 1000).decode(), "partition": p}
                 for i in range(30)]

        def send():
            lead = self.cap_leader(p)
            if lead is None:
                return False
            status, _ = lead.request("POST", f"/v1/topics/{CAP_TOPIC}/produce/batch", items,
                                     headers=CLIENT, timeout=30)
            return status == 202
        wait_until(f"a batch to {CAP_TOPIC}/{p} acknowledged", send, timeout=60, interval=0.5)

    def cap_segments(self, node, p):
        return sorted(glob.glob(os.path.join(node.data, "topics", CAP_TOPIC, str(p), "*.log")))

    def cap_flip(self, node, p):
        """Flip a body byte of a message record in node's first (sealed)
        segment of CAP_TOPIC/p."""
        path = self.cap_segments(node, p)[0]
        with open(path, "r+b") as f:
            data = f.read()
            pos = 0
            for rec in rl.parse_segment(data):
                if not rec.control and len(rec.body) > 40:
                    break
                pos += rl.REC_HDR.size + len(rec.key) + len(rec.body)
            at = pos + rl.REC_HDR.size + len(rec.key) + len(rec.body) // 2
            f.seek(at)
            f.write(bytes([data[at] ^ 0x20]))
            f.flush()
            os.fsync(f.fileno())

    def cap_scrub(self, node, parts):
        status, rep = node.request("POST", "/v1/storage/scrub?wait=true", headers=CLIENT,
                                   timeout=120)
        self.assertEqual(status, 200, rep)
        found = {e["partition"] for e in rep["errors"] if e["topic"] == CAP_TOPIC}
        self.assertEqual(found, set(parts), rep)

    def cap_whole(self):
        def whole():
            for p in range(CAP_PARTS):
                for node in self.c.running():
                    ps = self.cap_pstats(node, p)
                    if ps is None or len(ps.get("isr", [])) != 3 or ps.get("damaged"):
                        return False
            return True
        wait_until(f"every partition of {CAP_TOPIC} with 3 in-sync replicas, none damaged",
                   whole, timeout=120)

    def test_repairs_take_turns(self):
        # One node's copies of every partition damaged at once: repaired
        # one at a time, the others waiting their turn, all of them.
        victim = self.c.nodes[1]
        for p in range(CAP_PARTS):
            self.cap_flip(victim, p)
        self.cap_scrub(victim, range(CAP_PARTS))
        # Copies that wait for (or undergo) their repair from the leader
        # are no failure of this node's storage: every request it takes is
        # served (by the leaders), so /ping stays OK and /readyz 200 (was:
        # /ping 500 "NOK - partition rc/0: ...; it refuses writes until
        # restart"). Some copy is still damaged after the look.
        self.assertEqual(victim.nsq_http("GET", "/ping"), (200, b"OK"))
        self.assertEqual(victim.readyz(), 200)
        self.assertLess(self.repairs(victim), CAP_PARTS)
        wait_until(f"node {victim.id} repaired {CAP_PARTS} copies",
                   lambda: self.repairs(victim) >= CAP_PARTS, timeout=120)
        self.cap_whole()
        self.assertEqual(victim.metric("tern_replica_repairs_running_peak"), 1)
        self.assertEqual(victim.metric("tern_replica_repairs_running"), 0)
        self.assertEqual(victim.metric("tern_replica_repairs_waiting"), 0)
        log = victim.log()
        self.assertIn("waiting its turn to be repaired", log)
        self.assertIn("(1 of at most 1 repairs at once here)", log)

        # Both followers of one partition damaged at once: their reads
        # meet at the leader, which serves one and answers the other busy;
        # that one asks again (no failed attempt) and both are repaired.
        lead = self.cap_leader(0)
        followers = [n for n in self.c.nodes if n is not lead]
        before = {n.id: (self.repairs(n), n.metric("tern_replica_repairs_failed_total") or 0)
                  for n in followers}
        for n in followers:
            self.cap_flip(n, 0)
        for n in followers:
            self.cap_scrub(n, [0])
        for n in followers:
            wait_until(f"node {n.id} repaired its copy of {CAP_TOPIC}/0",
                       lambda n=n: self.repairs(n) > before[n.id][0], timeout=120)
        self.cap_whole()
        self.assertGreaterEqual(lead.metric('tern_replica_repair_busy_total{side="served"}'), 1)
        self.assertGreaterEqual(sum(n.metric('tern_replica_repair_busy_total{side="asked"}')
                                    for n in followers), 1)
        self.assertTrue(any("is busy serving other repairs" in n.log() for n in followers))
        for n in followers:
            self.assertEqual(n.metric("tern_replica_repairs_failed_total") or 0, before[n.id][1],
                             f"node {n.id}")
            self.assertEqual(n.metric("tern_replica_repairs_running_peak"), 1)


# Retention of 5 s, checked every second: segments go soon after they seal.
RETENTION_ARGS = ARGS + ["--retention=5s", "--gc-interval=1s"]


class RepairPastRetention(RepairCase):
    def setUp(self):
        self.start_cluster(RETENTION_ARGS)

    def base_of_active(self, node):
        return int(os.path.basename(self.segments(node)[-1]).split(".")[0])

    def expect_identical_held(self):
        """expect_identical for what each replica still holds below the hw
        (retention drops the oldest segments on each one's own clock):
        CRC good, dense up to the hw, the same where two of them hold an
        offset."""
        hw = self.pstats(self.leader())["high_watermark"]

        def held(n):
            try:  # a segment retention deletes while it is listed: again
                return [r for r in rl.read_partition(self.pdir(n)) if r.offset < hw]
            except FileNotFoundError:
                return None
        copies = {}
        for n in self.c.nodes:
            recs = wait_until(f"node {n.id}'s records", lambda n=n: held(n))
            offs = [r.offset for r in recs]
            self.assertEqual(offs, list(range(offs[0], hw)), f"node {n.id}")
            self.assertEqual([r.offset for r in recs if not r.crc_ok], [], f"node {n.id}")
            copies[n.id] = {r.offset: r.digest for r in recs}
        common = set.intersection(*(set(c) for c in copies.values()))
        self.assertTrue(common, copies.keys())
        first = next(iter(copies.values()))
        for node_id, c in copies.items():
            self.assertEqual([o for o in sorted(common) if c[o] != first[o]], [],
                             f"node {node_id} differs below hw {hw}")

    def test_active_segment_below_the_leaders_start(self):
        # A follower writes each fetch's answer whole, so it rolls at the
        # start of the answer that would overflow its segment, and the
        # leader at the batch that does: the follower's active segment
        # begins a few records below the leader's. Once the leader's
        # retention drops the segment before its own active one, its log
        # starts above the base of the follower's active segment. Damage
        # there must still be repaired: the leader says where its log
        # starts (OUT_OF_RANGE), the copy ends below it, and the usual fetch
        # restarts the log at the leader's start. Before, the leader
        # answered "error" (it cannot read below its start), every 2 s, and
        # the copy stayed out of the ISR for good.
        lead = self.leader()
        follower = next(n for n in self.c.nodes if n is not lead)
        self.produce_batch(5, via=lead)
        wait_until(f"node {follower.id} holds offsets below 5",
                   lambda: self.copy_end(follower) >= 5)
        # Stopped while a segment's worth of small batches is written: it
        # then copies them in one answer of its next fetch.
        os.kill(follower.pid, signal.SIGSTOP)
        try:
            for _ in range(15):
                self.produce_batch(5, via=lead)
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        end = self.pstats(lead)["log_end"]
        wait_until(f"node {follower.id} holds offsets below {end}",
                   lambda: self.copy_end(follower) >= end)
        fbase, lbase = self.base_of_active(follower), self.base_of_active(lead)
        self.assertLess(fbase, lbase, "the follower's active segment begins below the leader's")
        wait_until(f"the leader's log to start past {fbase}",
                   lambda: self.pstats(lead)["oldest_offset"] > fbase, timeout=60)
        self.flip(follower, segment=-1)
        self.scrub(follower)
        wait_until(f"node {follower.id} repaired its copy", lambda: self.repairs(follower) > 0,
                   timeout=90)
        self.assertIn(f"'s log starts at {lbase}", follower.log())
        self.produce_batch(5, via=lead)
        self.wait_isr(3)
        self.expect_identical_held()


if __name__ == "__main__":
    harness.main()
