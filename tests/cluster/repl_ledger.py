"""The replication suite's ledger and its checker (issue 23, "Proof";
docs/replication.md, "Fault matrix").

A History is what the clients of a test saw, with the monotonic time of
each event: every write (invoke, then ok / fail / unknown) with the ids
of the messages it carried, the producer that sent them (a producer
numbers its messages 0, 1, 2, ... and sends them in that order) and the
partition when the write pinned one; every delivery (topic, channel,
partition, offset, the id in its body, the node that delivered it, the
NSQ message id for an NSQ delivery); every settle answered OK (a /v1 ack
204: the FIN of that message on that channel); every fault the test
injected. Replica logs are the partitions' segment files read from the
nodes' data directories after the nodes stopped (read_replica, in the
record format of docs/storage-format.md, with each copy's drop floor),
with the high watermark each partition had before they stopped and the
text of each node's ternd log (where its copies' starts moved on purpose).

check() finds, and Report counts and prints:
  lost          an id acknowledged OK and never delivered;
  phantom       an id delivered and absent from every replica's log;
  conflict      one (topic, partition, offset) delivered or stored with
                two different ids; one NSQ message id delivered for two ids;
  hole          a lost id in no replica's log while a later id of the
                same producer is in the same partition (delivered or in a
                log: NATS #7549's shape);
  diverged      a partition whose replicas' records below the high
                watermark are not identical (compared by a CRC of each
                record without its segment-local sync mark), one that is
                short of the high watermark, or one whose record fails its
                own CRC32C; control records (TN_REC_F_CONTROL) count here
                but nowhere else;
  gapped        a replica's copy lacking records below the high watermark
                that another copy holds: offsets inside its own range, or
                a prefix (it starts above another copy's start) that its
                drop floor does not explain nor a start its node's log
                names (its retention reclaimed the segments below, or it
                was emptied to restart at its leader's log start:
                Final.starts). Records below a copy's start are not
                compared, so without this a copy whose start skipped
                forward (a move's new copy SIGKILLed at the wrong moment,
                skipped at its restart: "(unsynced tail lost); skipping
                them") held a hole for good that nothing else counted;
  resurrected   a message delivered again on a channel after its FIN
                (ack) was answered OK there;
(a copy on a node outside the partition's final replica list, set aside
by a partition move, counts for none of these but its own CRCs and dense
offsets, and as another copy that gapped compares with: Final.set_members)
and counts (without failing) duplicates (an id delivered more than once:
stored twice, at two positions, or delivered again at the same one) and
unknown outcomes (a write that got no answer), and prints availability:
after each fault, how many writes were refused and for how long.

A message body is make_body(id): `R|id|padding|digest` (a corrupt body is
caught: parse_body returns None).

Nothing here needs ternd: tests/cluster/test_repl_ledger_unit.py checks
the checker on hand-made histories.
"""
import glob
import hashlib
import json
import os
import random
import re
import struct
import sys
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from nsqwire import crc32c  # noqa: E402

# docs/storage-format.md, "Record"; the control flag is rstore's
# (src/storage/record.h, TN_REC_F_CONTROL).
REC_HDR = struct.Struct("<IIqqqIIHH")
REC_MAGIC = 0x31524E54
REC_F_MORE = 0x0001
REC_F_CONTROL = 0x0002
FLOOR_MAGIC = 0x31464E54  # "TNF1", docs/storage-format.md "Partition floor"


# -- bodies ----------------------------------------------------------------------

def make_body(mid, size=0):
    """The body of message mid: its id, random padding (to about size
    bytes in all, when given), a digest of both."""
    pad = os.urandom(max(random.randrange(4, 60), size // 2)).hex()
    digest = hashlib.sha256(f"{mid}|{pad}".encode()).hexdigest()[:16]
    return f"R|{mid}|{pad}|{digest}".encode()


def parse_body(data):
    """The id in a body that passes its digest; None otherwise."""
    if isinstance(data, str):
        data = data.encode()
    parts = data.split(b"|")
    if len(parts) != 4 or parts[0] != b"R":
        return None
    try:
        mid, pad, digest = (p.decode("ascii") for p in parts[1:])
    except UnicodeDecodeError:
        return None
    if hashlib.sha256(f"{mid}|{pad}".encode()).hexdigest()[:16] != digest:
        return None
    return mid


def nsq_position(msg_id):
    """(partition, offset) from a tern NSQ message id (16 hex characters:
    partition << 48 | offset, docs/http-api.md)."""
    v = int(msg_id, 16)
    return v >> 48, v & ((1 << 48) - 1)


# -- the history -------------------------------------------------------------------

class Op:
    __slots__ = ("producer", "seqs", "ids", "topic", "partition", "door", "t_invoke",
                 "t_done", "outcome", "detail")

    def __init__(self, producer, seqs, ids, topic, partition, door, t):
        self.producer, self.seqs, self.ids = producer, seqs, ids
        self.topic, self.partition, self.door = topic, partition, door
        self.t_invoke, self.t_done, self.outcome, self.detail = t, None, None, None


class Producer:
    """A producer's ids: name.0, name.1, ... in the order it sends them."""

    def __init__(self, history, name, topic, door, partition=None):
        self.h, self.name, self.topic, self.door = history, name, topic, door
        self.partition = partition
        self.seq = 0

    def next_ids(self, n=1):
        seqs = list(range(self.seq, self.seq + n))
        self.seq += n
        return seqs, [f"{self.name}.{s}" for s in seqs]

    def invoke(self, n=1, partition=None):
        """A write of n new messages: (op, ids, bodies)."""
        seqs, ids = self.next_ids(n)
        op = self.h.invoke(self.name, seqs, ids, self.topic,
                           partition if partition is not None else self.partition, self.door)
        return op, ids, [make_body(i) for i in ids]


class History:
    """Thread-safe record of what the clients saw (see the file's top)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.ops = []
        self.deliveries = []  # (t, topic, channel, partition, offset, id or None, node, nsq id)
        self.fins = []        # (t, topic, channel, partition, offset, id)
        self.faults = []      # (t, label)

    def producer(self, name, topic, door, partition=None):
        return Producer(self, name, topic, door, partition)

    def invoke(self, producer, seqs, ids, topic, partition, door, t=None):
        op = Op(producer, list(seqs), list(ids), topic, partition, door,
                self.clock() if t is None else t)
        with self.lock:
            self.ops.append(op)
        return op

    def complete(self, op, outcome, detail=None, t=None):
        """outcome: "ok" (acknowledged), "fail" (refused: not stored, or
        stored and allowed to be lost) or "unknown" (no answer)."""
        assert outcome in ("ok", "fail", "unknown"), outcome
        op.t_done = self.clock() if t is None else t
        op.outcome, op.detail = outcome, detail

    def deliver(self, topic, channel, partition, offset, body, node, nsq_id=None, t=None,
                mid=None):
        if mid is None:
            mid = parse_body(body)
        with self.lock:
            self.deliveries.append((self.clock() if t is None else t, topic, channel,
                                    partition, offset, mid, node, nsq_id))

    def fin_ok(self, topic, channel, partition, offset, mid, t=None):
        with self.lock:
            self.fins.append((self.clock() if t is None else t, topic, channel, partition,
                              offset, mid))

    def fault(self, label, t=None):
        with self.lock:
            self.faults.append((self.clock() if t is None else t, label))

    def acked_count(self):
        with self.lock:
            return sum(len(o.ids) for o in self.ops if o.outcome == "ok")

    def delivered_ids(self):
        with self.lock:
            return {d[5] for d in self.deliveries if d[5] is not None}

    def missing(self):
        got = self.delivered_ids()
        with self.lock:
            return [i for o in self.ops if o.outcome == "ok" for i in o.ids if i not in got]


# -- replica logs --------------------------------------------------------------------

class Rec:
    __slots__ = ("offset", "flags", "key", "body", "crc_ok", "digest")

    def __init__(self, offset, flags, key, body, crc_ok, digest):
        self.offset, self.flags, self.key, self.body = offset, flags, key, body
        self.crc_ok, self.digest = crc_ok, digest

    @property
    def control(self):
        return bool(self.flags & REC_F_CONTROL)


def encode_record(offset, body, key=b"", flags=0, publish_ns=0, deliver_at_ms=0, sync_mark=0):
    """One record as a segment holds it (for the unit test's segments)."""
    tail = struct.pack("<qqqIIHH", offset, publish_ns, deliver_at_ms, len(body), sync_mark,
                       len(key), flags)[0:36] + key + body
    return struct.pack("<II", REC_MAGIC, crc32c(tail)) + tail


def parse_segment(data):
    """The records of one segment file's bytes, stopping at the first that
    is not whole (the zeroed space ahead, a torn tail); each with whether
    its CRC32C holds and a digest of it without its sync mark."""
    out, pos = [], 0
    while pos + REC_HDR.size <= len(data):
        magic, crc, offset, pub, dat, blen, sync, klen, flags = REC_HDR.unpack_from(data, pos)
        end = pos + REC_HDR.size + klen + blen
        if magic != REC_MAGIC or end > len(data):
            break
        key = data[pos + REC_HDR.size:pos + REC_HDR.size + klen]
        body = data[pos + REC_HDR.size + klen:end]
        ok = crc32c(data[pos + 8:end]) == crc
        canon = struct.pack("<qqqIHH", offset, pub, dat, blen, klen, flags) + key + body
        out.append(Rec(offset, flags, key, body, ok, zlib.crc32(canon)))
        pos = end
    return out


class Copy(list):
    """One node's copy of a partition: its records by offset order, and its
    drop floor (docs/storage-format.md, "Partition floor": records below it
    are dropped on purpose), None when it has no `floor` file."""
    floor = None


def read_floor(directory):
    """A partition directory's drop floor, or None (no file, or one that
    is not a floor: ternd would isolate that partition)."""
    try:
        with open(os.path.join(directory, "floor"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if len(data) != 16 or struct.unpack_from("<I", data)[0] != FLOOR_MAGIC or \
            struct.unpack_from("<I", data, 4)[0] != crc32c(data[8:16]):
        return None
    return struct.unpack_from("<Q", data, 8)[0]


def read_partition(directory):
    """Every record of a partition directory's segments, by offset order
    (a Copy)."""
    recs = Copy()
    for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
        with open(path, "rb") as f:
            recs += parse_segment(f.read())
    recs.sort(key=lambda r: r.offset)
    recs.floor = read_floor(directory)
    return recs


def read_replica(data_dir, topics):
    """{(topic, partition): [Rec]} for every partition of topics under a
    stopped node's data directory (topics/<topic>/<partition>/)."""
    out = {}
    for topic in topics:
        for d in glob.glob(os.path.join(data_dir, "topics", topic, "*")):
            name = os.path.basename(d)
            if name.isdigit() and os.path.isdir(d):
                out[(topic, int(name))] = read_partition(d)
    return out


class Final:
    """The end state: replica logs by node, and each partition's high
    watermark and the replicas expected to hold everything below it."""

    def __init__(self):
        self.logs = {}      # node -> {(topic, p): [Rec]}
        self.hw = {}        # (topic, p) -> high watermark
        self.replicas = {}  # (topic, p) -> node ids that must be complete below hw
        # (topic, p) -> the partition's replica list at the end, when known:
        # a copy on a node outside it was set aside by a partition move
        # (docs/cluster.md, "Partition moves") and is not compared with the
        # replicas (a dropped leader's copy may end with records in flight
        # at the hand-over that the partition never committed); it is
        # still checked for CRCs and dense offsets, and not counted as
        # holding any id (phantom, hole and conflict look at replicas only).
        self.members = {}
        # node -> the text of its ternd log (all its runs), when the test
        # gives it: where its copies' starts moved on purpose (starts()).
        self.texts = {}

    def add_node(self, node, logs, text=None):
        """node's copies ({(topic, p): Copy}, read_replica) and, when
        given, the text of its ternd log (see starts)."""
        self.logs[node] = logs
        if text is not None:
            self.texts[node] = text

    def starts(self, node, key):
        """The offsets where node's log says its copy of partition key was
        made to start on purpose: its retention (GC) reclaimed the segments
        below ("reclaimed N segment(s) ...; oldest offset now X"), or the
        copy was emptied to restart at its leader's log start, which the
        leader's retention had moved ("the leader's log starts at X ...
        emptying it to restart there"; a move's new copy of a log whose
        start moved comes this way too)."""
        topic, p = key
        found = set()
        text = self.texts.get(node, self.texts.get(str(node), ""))
        for pat in (GC_LINE, RESET_LINE):
            for m in pat.finditer(text):
                if m.group(1) == topic and int(m.group(2)) == p:
                    found.add(int(m.group(3)))
        return found

    def set_partition(self, topic, p, hw, replicas):
        self.hw[(topic, p)] = hw
        self.replicas[(topic, p)] = [str(r) for r in replicas]

    def set_members(self, topic, p, members):
        """The partition's replica list at the end (see members above)."""
        self.members[(topic, p)] = [str(m) for m in members]

    def set_aside(self, node, key):
        """Whether node's copy of partition key was set aside (see members)."""
        members = self.members.get(key)
        return members is not None and str(node) not in members


# The log lines that move a copy's start on purpose (Final.starts):
# src/queue/broker.c on_gc_done and src/cluster/replica.c follower_reset.
GC_LINE = re.compile(r"topic ([A-Za-z0-9._-]+)/(\d+): reclaimed \d+ segment\(s\), \d+ bytes; "
                     r"oldest offset now (\d+)")
RESET_LINE = re.compile(r"replica ([A-Za-z0-9._-]+)/(\d+): the leader's log starts at (\d+) and "
                        r"this copy")


# -- the checker ----------------------------------------------------------------------

ANOMALIES = ("lost", "phantom", "conflict", "hole", "diverged", "gapped", "resurrected")


class Report:
    def __init__(self):
        self.examples = {k: [] for k in ANOMALIES}
        self.counts = {k: 0 for k in ANOMALIES}
        self.info = {}
        self.availability = []

    def add(self, kind, example):
        self.counts[kind] += 1
        if len(self.examples[kind]) < 8:
            self.examples[kind].append(example)

    def ok(self):
        return all(v == 0 for v in self.counts.values())

    def text(self):
        lines = ["ledger: " + " ".join(f"{k}={self.counts[k]}" for k in ANOMALIES),
                 "ledger: " + " ".join(f"{k}={v}" for k, v in sorted(self.info.items()))]
        for a in self.availability:
            lines.append(f"availability: after {a['fault']} (+{a['at']:.1f}s): "
                         f"{a['refused']} writes refused, the last "
                         f"{a['refused_for']:.1f}s after the fault; "
                         f"first write ok again {a['ok_after']}")
        for k in ANOMALIES:
            for e in self.examples[k]:
                lines.append(f"  {k}: {e}")
        return "\n".join(lines)


def check(history, final=None):
    """Every check of the file's top; final (a Final) may be None when the
    test could not read the replicas (then phantom and diverged are not
    checked, and info says so)."""
    r = Report()
    ops = list(history.ops)
    deliveries = list(history.deliveries)
    acked = {}   # id -> op
    unknown = {}
    for op in ops:
        for i in op.ids:
            if op.outcome == "ok":
                acked[i] = op
            elif op.outcome in ("unknown", None):
                unknown[i] = op

    delivered = {}  # id -> [(topic, channel, p, off, node, t)]
    position = {}   # (topic, p, off) -> set of ids
    nsq_ids = {}    # (topic, nsq id) -> set of ids
    corrupt = 0
    for t, topic, channel, p, off, mid, node, nsq_id in deliveries:
        if mid is None:
            corrupt += 1
            r.add("conflict", f"a corrupt body delivered at {topic}/{p}@{off} by node {node}")
            continue
        delivered.setdefault(mid, []).append((topic, channel, p, off, node, t))
        position.setdefault((topic, p, off), set()).add(mid)
        if nsq_id is not None:
            nsq_ids.setdefault((topic, nsq_id), set()).add(mid)

    # lost, and holes among them
    present = {}  # (producer, topic, p) -> highest seq present
    id_seq = {}
    for op in ops:
        for s, i in zip(op.seqs, op.ids):
            id_seq[i] = (op.producer, s)
    stored = {}  # id -> set of (topic, p, off) in any replica's final log (messages only)
    if final is not None:
        for node, logs in final.logs.items():
            for (topic, p), recs in logs.items():
                if final.set_aside(node, (topic, p)):
                    continue  # not a replica: check_divergence reads it
                for rec in recs:
                    if rec.control or not rec.crc_ok:
                        continue
                    mid = parse_body(rec.body)
                    if mid is not None:
                        stored.setdefault(mid, set()).add((topic, p, rec.offset))
    for mid in list(delivered) + list(stored):
        if mid not in id_seq:
            continue
        producer, s = id_seq[mid]
        where = [(d[0], d[2]) for d in delivered.get(mid, [])] + \
                [(t, p) for t, p, _ in stored.get(mid, ())]
        for topic, p in set(where):
            k = (producer, topic, p)
            present[k] = max(present.get(k, -1), s)
    for mid, op in acked.items():
        if mid in delivered:
            continue
        r.add("lost", f"{mid} ({op.door}, acknowledged at {op.t_done:.2f}"
                      f"{', stored at ' + str(sorted(stored[mid])) if mid in stored else ''})")
        if mid in stored:
            continue  # in a log, only never delivered: no hole
        producer, s = id_seq[mid]
        parts = [op.partition] if op.partition is not None else \
            [p for (pr, t, p) in present if pr == producer and t == op.topic]
        for p in parts:
            if present.get((producer, op.topic, p), -1) > s:
                r.add("hole", f"{mid} missing in {op.topic}/{p} while {producer}."
                              f"{present[(producer, op.topic, p)]} is there")
                break

    # conflicts: one position, two ids (delivered, or delivered vs stored)
    for (topic, p, off), mids in sorted(position.items(), key=str):
        if len(mids) > 1:
            r.add("conflict", f"{topic}/{p}@{off} delivered as {sorted(mids)}")
    for (topic, nid), mids in nsq_ids.items():
        if len(mids) > 1:
            r.add("conflict", f"NSQ message id {nid} of {topic} reused for {sorted(mids)}")
    if final is not None:
        at = {}  # (topic, p, off) -> ids stored there on some replica below its hw
        for node, logs in final.logs.items():
            for (topic, p), recs in logs.items():
                if final.set_aside(node, (topic, p)):
                    continue
                hw = final.hw.get((topic, p))
                for rec in recs:
                    if rec.control or not rec.crc_ok or (hw is not None and rec.offset >= hw):
                        continue
                    at.setdefault((topic, p, rec.offset), set()).add(parse_body(rec.body))
        for (topic, p, off), mids in at.items():
            if len(mids) > 1:
                r.add("conflict", f"{topic}/{p}@{off} stored as {sorted(map(str, mids))} "
                                  "on different replicas")
            d = position.get((topic, p, off))
            if d and not d <= mids:
                r.add("conflict", f"{topic}/{p}@{off} delivered as {sorted(d)}, stored as "
                                  f"{sorted(map(str, mids))}")

    # phantom: delivered, then in no replica's log
    if final is not None:
        for mid, ds in delivered.items():
            if mid not in stored:
                parts = {(d[0], d[2]) for d in ds}
                if any(any(k in logs for logs in final.logs.values()) for k in parts):
                    r.add("phantom", f"{mid} delivered at {[(d[2], d[3], d[4]) for d in ds]}, "
                                     "in no replica's log")
        check_divergence(r, final)
    else:
        r.info["replicas_not_checked"] = 1

    # resurrected FINs: delivered on a channel after its FIN was answered OK
    fin_at = {}
    for t, topic, channel, p, off, mid in history.fins:
        k = (topic, channel, p, off)
        fin_at[k] = min(fin_at.get(k, t), t)
    for mid, ds in delivered.items():
        for topic, channel, p, off, node, t in ds:
            f = fin_at.get((topic, channel, p, off))
            if f is not None and t > f:
                r.add("resurrected", f"{mid} at {topic}/{p}@{off} delivered on {channel} by "
                                     f"node {node} {t - f:.2f}s after its FIN was answered OK")

    # duplicates and unknowns: counted, not failed on
    dup_ids = {m: ds for m, ds in delivered.items() if len(ds) > 1}
    stored_twice = sum(len({(d[0], d[2], d[3]) for d in ds}) - 1 for ds in dup_ids.values())
    r.info.update({
        "acked": len(acked), "delivered_ids": len(delivered),
        "deliveries": sum(len(ds) for ds in delivered.values()),
        "duplicates": sum(len(ds) - 1 for ds in dup_ids.values()),
        "stored_twice": stored_twice,
        "unknown": len(unknown),
        "unknown_delivered": sum(1 for i in unknown if i in delivered),
        "failed": sum(len(o.ids) for o in ops if o.outcome == "fail"),
        "failed_delivered": sum(1 for o in ops if o.outcome == "fail" for i in o.ids
                                if i in delivered),
        "fins_ok": len(history.fins),
        "corrupt_bodies": corrupt,
    })
    if final is not None:
        r.info["replica_records"] = sum(len(recs) for logs in final.logs.values()
                                        for recs in logs.values())
    r.availability = availability(ops, list(history.faults))
    return r


def check_divergence(r, final):
    """Replicas of a partition identical below its high watermark."""
    keys = set(final.hw)
    for logs in final.logs.values():
        keys |= set(logs)
    for key in sorted(keys):
        topic, p = key
        hw = final.hw.get(key)
        holders = {n: logs[key] for n, logs in final.logs.items() if key in logs}
        must = final.replicas.get(key, list(holders))
        if hw is None:
            # No high watermark known: the common prefix must agree.
            hw = min((max((x.offset for x in recs), default=-1) + 1
                      for recs in holders.values()), default=0)
        ref, ref_node = None, None
        for node in sorted(holders, key=str):
            recs = [x for x in holders[node] if x.offset < hw]
            aside = final.set_aside(node, key)
            bad = [x.offset for x in recs if not x.crc_ok]
            if bad:
                r.add("diverged", f"{topic}/{p} on node {node}: records failing their CRC "
                                  f"below the hw {hw} at {bad[:5]}")
            offs = [x.offset for x in recs]
            if aside and offs and offs != list(range(offs[0], offs[0] + len(offs))):
                r.add("diverged", f"{topic}/{p} on node {node}: offsets not dense below {hw}")
            if str(node) in must and (not offs or offs[-1] != hw - 1) and hw > 0:
                r.add("diverged", f"{topic}/{p} on node {node}: ends at "
                                  f"{offs[-1] + 1 if offs else 0}, short of the hw {hw}")
            if aside:
                r.info["set_aside_copies"] = r.info.get("set_aside_copies", 0) + 1
                continue
            digest = {x.offset: x.digest for x in recs}
            if ref is None:
                ref, ref_node = digest, node
                continue
            common = sorted(set(ref) & set(digest))
            diff = [o for o in common if ref[o] != digest[o]]
            if diff:
                r.add("diverged", f"{topic}/{p}: nodes {ref_node} and {node} differ below the "
                                  f"hw {hw} at offsets {diff[:5]}")
        for n in must:
            if n not in {str(x) for x in holders} and hw > 0:
                r.add("diverged", f"{topic}/{p}: replica {n} holds no log (hw {hw})")
        check_gaps(r, final, key, hw, holders)


def check_gaps(r, final, key, hw, holders):
    """A replica's copy lacking records below the hw that another copy
    holds: a prefix (its first offset above another copy's first) that
    neither its drop floor nor a start its node's log names (Final.starts:
    its retention, or a reset to its leader's log start) explains, or
    offsets inside its own range that another replica holds. Offsets no
    copy holds are not counted here: a gap its leader's log never assigned
    is in every copy (docs/replication.md, "A follower inside a gap of the
    leader's log"), and an acknowledged record missing everywhere is lost."""
    topic, p = key
    offs = {n: sorted({x.offset for x in recs if x.offset < hw}) for n, recs in holders.items()}
    for node in sorted(holders, key=str):
        mine = offs[node]
        if final.set_aside(node, key) or not mine:
            continue
        first, last, have = mine[0], mine[-1], set(mine)
        below = sorted((o[0], str(n)) for n, o in offs.items() if n != node and o and o[0] < first)
        floor = getattr(holders[node], "floor", None)
        explained = below and ((floor is not None and floor >= first) or
                               first in final.starts(node, key))
        if explained:
            # Printed, so that a run shows it met (and let pass) the shape.
            r.info["later_starts_explained"] = r.info.get("later_starts_explained", 0) + 1
        elif below:
            low, other = below[0]
            r.add("gapped", f"{topic}/{p} on node {node}: starts at {first}, node {other}'s copy "
                            f"at {low}; no drop floor, retention or reset of its own put its "
                            f"start there (floor {floor}, starts its log names "
                            f"{sorted(final.starts(node, key))})")
        for n in sorted(holders, key=str):
            if n == node:
                continue
            inside = [o for o in offs[n] if first < o < last and o not in have]
            if inside:
                r.add("gapped", f"{topic}/{p} on node {node}: lacks {len(inside)} offsets inside "
                                f"its log that node {n} holds, from {inside[0]} (below the hw "
                                f"{hw})")
                break


def availability(ops, faults):
    """Per fault: writes invoked after it (before the next fault) that were
    refused or got no answer, how long after the fault the last of them was
    invoked, and when (seconds after the fault) a write invoked after it
    was first acknowledged."""
    out = []
    faults = sorted(faults)
    for k, (t, label) in enumerate(faults):
        end = faults[k + 1][0] if k + 1 < len(faults) else float("inf")
        window = [o for o in ops if t <= o.t_invoke < end]
        refused = [o for o in window if o.outcome != "ok"]
        oks = [o.t_done - t for o in window if o.outcome == "ok" and o.t_done is not None]
        last = max((o.t_invoke for o in refused), default=t)
        out.append({"fault": label, "at": t - (faults[0][0] if faults else t),
                    "refused": len(refused), "refused_for": last - t,
                    "ok_after": f"{min(oks):.1f}s" if oks else "never"})
    return out


def dump(history, path):
    """The history as JSON (kept beside a failing test's logs)."""
    with open(path, "w") as f:
        json.dump({"ops": [{k: getattr(o, k) for k in Op.__slots__ if k != "detail"}
                           for o in history.ops],
                   "deliveries": history.deliveries, "fins": history.fins,
                   "faults": history.faults}, f)
