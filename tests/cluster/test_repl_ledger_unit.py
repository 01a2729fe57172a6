"""The replication ledger's checker (tests/cluster/repl_ledger.py) on
hand-made histories, without ternd: a clean history passes, and each
anomaly (lost, phantom, offset conflict, NSQ id reused, hole, diverged
replicas, resurrected FIN) is found in a history made to hold exactly
that one. Replica logs are real segment files written in the record
format of docs/storage-format.md into a temporary data directory, so the
segment reader is tested too (a flipped byte, a torn tail, zeroed space,
sync marks that differ between replicas, control records).

Run: python3 tests/cluster/test_repl_ledger_unit.py
"""
import os
import shutil
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repl_ledger as rl  # noqa: E402

T = "rt"
CH = "default"


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        self.t += 0.01
        return self.t


class Builder:
    """A history of one producer writing to partition 0 of topic rt (ids
    p.0, p.1, ...), delivered at offsets 0, 1, ... on node 1, and the
    replica logs of nodes 1..3 holding the same records (data dirs under
    root); each test then breaks one thing."""

    def __init__(self, root, n=6, epoch_control=True):
        self.root = root
        self.h = rl.History(clock=Clock())
        self.prod = self.h.producer("p", T, "/v1 produce", partition=0)
        self.records = []  # (offset, body, flags)
        off = 0
        if epoch_control:
            self.records.append((off, b"\x01\x01\x00\x00\x00", rl.REC_F_CONTROL))
            off += 1
        self.ids = []
        for _ in range(n):
            op, ids, bodies = self.prod.invoke()
            self.h.complete(op, "ok")
            self.records.append((off, bodies[0], 0))
            self.ids.append((ids[0], off, bodies[0]))
            off += 1
        self.hw = off
        self.logs = {n: list(self.records) for n in ("1", "2", "3")}
        self.texts = {}  # node -> its ternd log's text (Final.starts)

    def floor(self, node, floor):
        """A drop floor file in node's copy (docs/storage-format.md)."""
        d = os.path.join(self.root, f"node{node}", "topics", T, "0")
        os.makedirs(d, exist_ok=True)
        v = struct.pack("<Q", floor)
        with open(os.path.join(d, "floor"), "wb") as f:
            f.write(struct.pack("<II", rl.FLOOR_MAGIC, rl.crc32c(v)) + v)

    def deliver_all(self, node="1", but=()):
        """Every id delivered by node, but those at the offsets in but."""
        for mid, off, body in self.ids:
            if off not in but:
                self.h.deliver(T, CH, 0, off, body, node)

    def drop(self, nodes, offsets):
        """The records at offsets gone from the copies of nodes."""
        for n in nodes:
            self.logs[n] = [r for r in self.logs[n] if r[0] not in offsets]

    def never_acked(self, offsets):
        """The writes of the ids at offsets refused (so neither lost nor
        a hole when no copy keeps them)."""
        ids = {mid for mid, off, _ in self.ids if off in offsets}
        for op in self.h.ops:
            if set(op.ids) & ids:
                op.outcome = "fail"

    def write(self):
        final = rl.Final()
        for node, recs in self.logs.items():
            d = os.path.join(self.root, f"node{node}", "topics", T, "0")
            os.makedirs(d, exist_ok=True)
            data = b"".join(rl.encode_record(o, b, flags=f, publish_ns=1000 + o,
                                             sync_mark=7 * int(node))
                            for o, b, f in recs)
            for old in os.listdir(d):
                if old.endswith(".log"):
                    os.unlink(os.path.join(d, old))
            # One segment, named by its first record's offset.
            name = f"{recs[0][0] if recs else 0:020d}.log"
            with open(os.path.join(d, name), "wb") as fh:
                fh.write(data + b"\0" * 100)  # the zeroed space ahead
            final.add_node(node, rl.read_replica(os.path.join(self.root, f"node{node}"), [T]),
                           self.texts.get(node))
        final.set_partition(T, 0, self.hw, list(self.logs))
        return final

    def check(self):
        return rl.check(self.h, self.write())


class CheckerTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="repl-ledger-unit-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.b = Builder(self.root)

    def only(self, report, kind):
        """report found kind, and nothing else."""
        sys.stderr.write(report.text() + "\n")
        self.assertGreater(report.counts[kind], 0, f"{kind} not found")
        others = {k: v for k, v in report.counts.items() if k != kind and v}
        self.assertEqual(others, {}, f"more than {kind} found")

    def test_clean_history_passes(self):
        b = self.b
        b.deliver_all()
        # A FIN answered OK, a duplicate redelivery before it, an unknown
        # outcome that was delivered, a refused write never delivered.
        mid, off, body = b.ids[0]
        b.h.deliver(T, CH, 0, off, body, "2")
        b.h.fin_ok(T, CH, 0, off, mid)
        b.h.fault("SIGKILL node 1")
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "unknown")
        b.records.append((b.hw, bodies[0], 0))
        b.h.deliver(T, CH, 0, b.hw, bodies[0], "1")
        b.hw += 1
        b.logs = {n: list(b.records) for n in b.logs}
        op, _, _ = b.prod.invoke()
        b.h.complete(op, "fail")
        r = b.check()
        sys.stderr.write(r.text() + "\n")
        self.assertTrue(r.ok(), r.text())
        self.assertEqual(r.info["duplicates"], 1)
        self.assertEqual(r.info["stored_twice"], 0)
        self.assertEqual(r.info["unknown"], 1)
        self.assertEqual(r.info["unknown_delivered"], 1)
        self.assertEqual(r.info["failed"], 1)
        self.assertEqual(r.info["acked"], 6)
        self.assertEqual(len(r.availability), 1)
        self.assertEqual(r.availability[0]["refused"], 2)

    def test_a_tail_above_the_hw_may_differ(self):
        b = self.b
        b.deliver_all()
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "unknown")
        b.logs["3"].append((b.hw, bodies[0], 0))  # not acknowledged, above the hw
        r = b.check()
        self.assertTrue(r.ok(), r.text())

    def test_lost(self):
        b = self.b
        b.deliver_all()
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "ok")  # acknowledged, never stored nor delivered
        self.only(b.check(), "lost")

    def test_hole(self):
        b = self.b
        b.deliver_all()
        # p.6 acknowledged and gone, p.7 after it delivered.
        op, _, _ = b.prod.invoke()
        b.h.complete(op, "ok")
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "ok")
        for n in b.logs:
            b.logs[n].append((b.hw, bodies[0], 0))
        b.h.deliver(T, CH, 0, b.hw, bodies[0], "1")
        b.hw += 1
        r = b.check()
        sys.stderr.write(r.text() + "\n")
        self.assertEqual(r.counts["hole"], 1)
        self.assertEqual(r.counts["lost"], 1)  # a hole is a lost id too
        self.assertEqual(sum(r.counts.values()), 2)

    def test_stored_and_never_delivered_is_lost_not_a_hole(self):
        b = self.b
        b.deliver_all()
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "ok")
        for n in b.logs:
            b.logs[n].append((b.hw, bodies[0], 0))
        b.hw += 1
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "ok")
        for n in b.logs:
            b.logs[n].append((b.hw, bodies[0], 0))
        b.h.deliver(T, CH, 0, b.hw, bodies[0], "1")
        b.hw += 1
        self.only(b.check(), "lost")

    def test_phantom(self):
        b = self.b
        b.deliver_all()
        # Delivered by an old leader past what survived: no replica holds it.
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "unknown")
        b.h.deliver(T, CH, 0, b.hw, bodies[0], "3")
        self.only(b.check(), "phantom")

    def test_offset_conflict_between_deliveries(self):
        b = self.b
        b.deliver_all()
        # After a failover, another record delivered at an offset already
        # delivered (and that one is in the logs too: no phantom).
        op, ids, bodies = b.prod.invoke()
        b.h.complete(op, "ok")
        for n in b.logs:
            b.logs[n].append((b.hw, bodies[0], 0))
        b.h.deliver(T, CH, 0, b.hw, bodies[0], "1")
        b.hw += 1
        b.h.deliver(T, CH, 0, b.ids[2][1], bodies[0], "2")
        self.only(b.check(), "conflict")

    def test_nsq_message_id_reused(self):
        b = self.b
        # Delivered through NSQ: positions from the ids; one id reused
        # for two messages (a second one of them at the right position).
        for mid, off, body in b.ids:
            nid = f"{(0 << 48) | off:016x}"
            self.assertEqual(rl.nsq_position(nid), (0, off))
            b.h.deliver(T, "ch", 0, off, body, "1", nsq_id=nid)
        r = b.check()
        self.assertTrue(r.ok(), r.text())
        mid, off, body = b.ids[3]
        b.h.deliver(T, "ch", 0, off, body, "1", nsq_id=f"{b.ids[1][1]:016x}")
        self.only(b.check(), "conflict")

    def test_diverged_body(self):
        b = self.b
        b.deliver_all()
        # Node 3 holds another record at an offset below the hw (with its
        # own valid CRC): the replicas diverged.
        o, body, f = b.logs["3"][3]
        b.logs["3"][3] = (o, body.replace(b"R|", b"X|", 1), f)
        r = b.check()
        sys.stderr.write(r.text() + "\n")
        self.assertGreater(r.counts["diverged"], 0)
        self.assertEqual(r.counts["lost"] + r.counts["phantom"] + r.counts["hole"], 0)

    def test_diverged_control_record(self):
        b = self.b
        b.deliver_all()
        # Only the epoch-start control record differs: still divergence.
        b.logs["2"][0] = (0, b"\x01\x02\x00\x00\x00", rl.REC_F_CONTROL)
        self.only(b.check(), "diverged")

    def test_diverged_short_replica(self):
        b = self.b
        b.deliver_all()
        b.logs["2"] = b.logs["2"][:-2]
        self.only(b.check(), "diverged")

    def test_gapped_prefix(self):
        """A replica whose copy starts above the others' start, with no
        floor, retention or reset of its own to explain it (a move's new
        copy skipped forward at its restart): gapped. Nothing else sees
        it: the records it lacks are on the other replicas."""
        b = self.b
        b.deliver_all()
        b.drop(["3"], {0, 1, 2})
        r = b.check()
        self.only(r, "gapped")
        self.assertIn("node 3: starts at 3, node 1's copy at 0", r.text())
        # A start its node's log names for another partition or topic, or
        # a floor below it, explains nothing.
        b.texts["3"] = ("topic rt/1: reclaimed 1 segment(s), 300 bytes; oldest offset now 3\n"
                        "topic rtx/0: reclaimed 1 segment(s), 300 bytes; oldest offset now 3\n"
                        "replica rt/0: the leader's log starts at 2 and this copy (end 0) ...\n")
        b.floor("3", 2)
        self.only(b.check(), "gapped")

    def test_prefix_explained_by_retention_reset_or_floor(self):
        """The same copy, whose start its own retention or a reset to its
        leader's log start put there (its node's log says so), or below
        its drop floor: not counted."""
        b = self.b
        b.deliver_all()
        b.drop(["3"], {0, 1, 2})
        for text in ("[gc] topic rt/0: reclaimed 1 segment(s), 300 bytes; oldest offset now 3\n",
                     "replica rt/0: the leader's log starts at 3 and this copy (end 0) holds "
                     "nothing past it the leader keeps (...): emptying it to restart there\n"):
            b.texts["3"] = text
            r = b.check()
            self.assertTrue(r.ok(), r.text())
            self.assertEqual(r.info["later_starts_explained"], 1)
        b.texts.clear()
        b.floor("3", 3)
        r = b.check()
        self.assertTrue(r.ok(), r.text())
        self.assertEqual(r.info["later_starts_explained"], 1)

    def test_every_copy_starts_at_the_retained_offset(self):
        """Every replica starts at the same offset (retention, a floor):
        no copy lacks what another holds."""
        b = self.b
        b.drop(["1", "2", "3"], {0, 1, 2})
        b.never_acked({1, 2})
        b.deliver_all(but={1, 2})
        r = b.check()
        self.assertTrue(r.ok(), r.text())

    def test_gapped_inside(self):
        """A copy lacking offsets inside its range that the others hold
        (an advance past records it had not copied yet): gapped."""
        b = self.b
        b.deliver_all()
        b.drop(["2"], {3, 4})
        r = b.check()
        self.only(r, "gapped")
        self.assertIn("node 2: lacks 2 offsets inside its log that node 1 holds, from 3", r.text())

    def test_gap_no_copy_holds(self):
        """Offsets no copy holds (a gap the leader's log never assigned,
        every follower skipping it): not counted."""
        b = self.b
        b.drop(["1", "2", "3"], {3, 4})
        b.never_acked({3, 4})
        b.deliver_all(but={3, 4})
        r = b.check()
        self.assertTrue(r.ok(), r.text())

    def test_set_aside_copy_not_compared(self):
        b = self.b
        b.deliver_all()
        # Node 3 was dropped by a partition move: its copy ends with a
        # record the partition never committed. Not a replica any more, it
        # is not compared with the replicas (counted as set aside) ...
        o, body, f = b.logs["3"][-1]
        b.logs["3"][-1] = (o, body.replace(b"R|", b"X|", 1), f)
        final = b.write()
        final.set_members(T, 0, ["1", "2"])
        r = rl.check(b.h, final)
        self.assertEqual(sum(r.counts.values()), 0, r.text())
        self.assertEqual(r.info["set_aside_copies"], 1)
        # ... while the same copy on a replica is divergence (and a
        # conflict: two ids stored at one offset).
        final.set_members(T, 0, ["1", "2", "3"])
        r = rl.check(b.h, final)
        self.assertGreater(r.counts["diverged"], 0, r.text())
        self.assertGreater(r.counts["conflict"], 0, r.text())

    def test_flipped_byte_found(self):
        b = self.b
        b.deliver_all()
        final = b.write()
        path = os.path.join(self.root, "node2", "topics", T, "0", "00000000000000000000.log")
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[rl.REC_HDR.size + 5 + 50] ^= 0x40  # a body byte of the second record
            f.seek(0)
            f.write(data)
        final.add_node("2", rl.read_replica(os.path.join(self.root, "node2"), [T]))
        r = rl.check(b.h, final)
        self.only(r, "diverged")
        self.assertIn("failing their CRC", r.text())

    def test_resurrected_fin(self):
        b = self.b
        b.deliver_all()
        mid, off, body = b.ids[4]
        b.h.fin_ok(T, CH, 0, off, mid)
        b.h.deliver(T, CH, 0, off, body, "2")  # after its FIN was answered OK
        # The same message on another channel is no resurrection.
        b.h.deliver(T, "other", 0, off, body, "2")
        self.only(b.check(), "resurrected")

    def test_torn_tail_and_sync_marks(self):
        """Replicas whose sync marks differ are identical; a torn last
        record is not read; control records are not messages."""
        b = self.b
        b.deliver_all()
        final = b.write()
        path = os.path.join(self.root, "node1", "topics", T, "0", "00000000000000000000.log")
        with open(path, "rb") as f:
            data = f.read().rstrip(b"\0")
        recs = rl.parse_segment(data[:-3])
        self.assertEqual(len(recs), b.hw - 1)
        self.assertTrue(all(r.crc_ok for r in recs))
        self.assertTrue(recs[0].control)
        a = rl.read_replica(os.path.join(self.root, "node1"), [T])[(T, 0)]
        c = rl.read_replica(os.path.join(self.root, "node3"), [T])[(T, 0)]
        self.assertEqual([x.digest for x in a], [x.digest for x in c])
        self.assertTrue(rl.check(b.h, final).ok())

    def test_corrupt_body_delivered(self):
        b = self.b
        b.deliver_all()
        b.h.deliver(T, CH, 0, 1, b"R|p.0|00|0000000000000000", "1")
        self.only(b.check(), "conflict")

    def test_without_replica_logs(self):
        b = self.b
        b.deliver_all()
        r = rl.check(b.h, None)
        self.assertTrue(r.ok(), r.text())
        self.assertEqual(r.info["replicas_not_checked"], 1)

    def test_bodies(self):
        body = rl.make_body("x.1")
        self.assertEqual(rl.parse_body(body), "x.1")
        last = b"0" if body[-1:] != b"0" else b"1"
        self.assertIsNone(rl.parse_body(body[:-1] + last))
        self.assertIsNone(rl.parse_body(b"\xff\xfe"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
