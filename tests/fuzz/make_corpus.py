#!/usr/bin/env python3
"""Writes the seed inputs of the storage fuzz targets (valid records,
segments, checkpoints and WALs built to the formats in
docs/storage-format.md, plus torn and damaged variants) and of the node RPC
wire targets (frames, requests, replies and proofs to src/cluster/wire.h). libFuzzer grows the
corpus from these (`make fuzz`); the grown corpus is checked in."""
import hashlib
import hmac
import os
import struct

POLY = 0x82F63B78
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def record(offset, body, key=b"", flags=0, sync_mark=0, deliver_at=0):
    rest = struct.pack("<QqqIIHH", offset, 1700000000000000000 + offset, deliver_at,
                       len(body), sync_mark, len(key), flags)
    crc = crc32c(rest + key + body)
    return struct.pack("<II", 0x31524E54, crc) + rest + key + body


def wal_frame(op, seq, payload, sync_mark=0):
    rest = struct.pack("<BBHIQ", op, len(payload), 0x5754, sync_mark, seq) + payload
    return struct.pack("<I", crc32c(rest)) + rest


def ingress_frame(seq, topic, body, key=b"", partition=0, pinned=False, sync_mark=0,
                  deliver_at=0, created=1700000000000):
    payload = (struct.pack("<BBIH", 1, 1 if pinned else 0, sync_mark, len(topic)) + topic +
               struct.pack("<H", len(key)) + key +
               struct.pack("<IqqI", partition, deliver_at, created, len(body)) + body)
    return b"TNI1" + struct.pack("<IQI", len(payload), seq, crc32c(payload)) + payload


def checkpoint(seq, frontier, settled=(), requeued=(), paused=False):
    body = struct.pack("<IIQQQQQII", 1, 1 if paused else 0, seq, frontier, 5, 2, 1,
                       len(settled), len(requeued))
    for s in settled:
        body += struct.pack("<Q", s)
    for off, due, att in requeued:
        body += struct.pack("<QqI", off, due, att)
    return struct.pack("<II", 0x31434E54, crc32c(body)) + body


def epochs_file(entries, count=None, version=1, magic=b"TNE1"):
    body = magic + struct.pack("<II", version, len(entries) if count is None else count)
    for epoch, start in entries:
        body += struct.pack("<IQ", epoch, start)
    return body + struct.pack("<I", crc32c(body))


def wire_frame(ftype, rid, payload):
    return b"TNR1" + struct.pack(">BBHQI", 1, ftype, 0, rid, len(payload)) + payload


def wire_str(b):
    return struct.pack(">I", len(b)) + b


def settle_fields(topic, channel, how, vis, handles):
    out = wire_str(topic) + wire_str(channel) + struct.pack(">BqI", how, vis, len(handles))
    for part, off, nonce in handles:
        out += struct.pack(">IQI", part, off, nonce)
    return out


def setrepl_fields(topic, partition, epoch, channel, stream, first, recs, base=0):
    out = (wire_str(topic) + struct.pack(">II", partition, epoch) + wire_str(channel) +
           struct.pack(">QQQI", stream, first, base, len(recs)))
    for op, off, due, attempts, value in recs:
        out += struct.pack(">BQqIQ", op, off, due, attempts, value)
    return out


def settle_repl_seeds(here):
    sp = os.path.join(here, "settle_repl_frame", "corpus")
    recs = [(1, 17, 0, 0, 0), (2, 18, 1764590000123, 3, 0), (3, 0, 0, 0, 1),
            (4, 40, 0, 0, 0), (5, 0, 0, 0, 9)]
    write(sp, "seed-all-ops", setrepl_fields(b"orders", 7, 42, b"billing", 0x1122334455667788,
                                             1000, recs, base=12345))
    write(sp, "seed-one-fin", setrepl_fields(b"t", 0, 1, b"c", 1, 1, recs[:1]))
    write(sp, "seed-max", setrepl_fields(b"t", 0, 1, b"c", 1, 1, [(1, i, 0, 0, 0)
                                                                  for i in range(1024)]))
    write(sp, "seed-too-many", setrepl_fields(b"t", 0, 1, b"c", 1, 1, [(1, 0, 0, 0, 0)] * 1025))
    write(sp, "seed-none", setrepl_fields(b"t", 0, 1, b"c", 1, 1, []))
    write(sp, "seed-skip", setrepl_fields(b"t", 0, 1, b"c", 1, 1, [(6, 3, 0, 0, 0)]))
    write(sp, "seed-bad-op", setrepl_fields(b"t", 0, 1, b"c", 1, 1, [(7, 0, 0, 0, 0)]))
    write(sp, "seed-epoch-zero", setrepl_fields(b"t", 0, 0, b"c", 1, 1, recs[:2]))
    write(sp, "seed-seq-zero", setrepl_fields(b"t", 0, 1, b"c", 1, 0, recs[:2]))
    write(sp, "seed-seq-wrap", setrepl_fields(b"t", 0, 1, b"c", 1, 2**64 - 1, recs[:2]))
    write(sp, "seed-trailing", setrepl_fields(b"t", 0, 1, b"c", 1, 1, recs) + b"\x00")
    write(sp, "seed-short", setrepl_fields(b"t", 0, 1, b"c", 1, 1, recs)[:-5])
    write(sp, "seed-empty-channel", setrepl_fields(b"t", 0, 1, b"", 1, 1, recs[:1]))
    # After the records: the channel's stamp, then the follower's
    # incarnation (with it, the stamp is written even when 0).
    one = setrepl_fields(b"t", 0, 1, b"c", 1, 1, recs[:1])
    write(sp, "seed-stamp", one + struct.pack(">Q", 0xABCD))
    write(sp, "seed-stamp-zero", one + struct.pack(">Q", 0))
    write(sp, "seed-incarnation", one + struct.pack(">QQ", 0, 0x77))
    write(sp, "seed-stamp-incarnation", one + struct.pack(">QQ", 0xABCD, 0x77))
    write(sp, "seed-incarnation-zero", one + struct.pack(">QQ", 0xABCD, 0))
    write(sp, "seed-incarnation-cut", one + struct.pack(">QQ", 0xABCD, 0x77)[:-3])


def ckpt_image(frontier, settled, requeued, paused=False, seq=0, counts=(0, 0, 0)):
    """A channel checkpoint image (storage/cursor.h, TNC1)."""
    body = struct.pack("<IIQQQQQII", 1, 1 if paused else 0, seq, frontier, counts[0], counts[1],
                       counts[2], len(settled), len(requeued))
    for off in settled:
        body += struct.pack("<Q", off)
    for off, due, attempts in requeued:
        body += struct.pack("<QqI", off, due, attempts)
    return struct.pack("<II", 0x31434E54, crc32c(body)) + body


def chansnap_fields(topic, partition, epoch, channel, stream, seq, inc, image):
    """A CHAN_SNAP request's fields (after the opcode byte)."""
    return (wire_str(topic) + struct.pack(">II", partition, epoch) + wire_str(channel) +
            struct.pack(">QQQI", stream, seq, inc, len(image)) + image)


def chan_snap_seeds(here):
    cs = os.path.join(here, "chan_snap_frame", "corpus")
    full = ckpt_image(100, [102, 105, 200], [(100, 1764590000123, 2), (101, 0, 1)], paused=True,
                      seq=7, counts=(40, 3, 1))
    write(cs, "seed-full", chansnap_fields(b"orders", 7, 42, b"billing", 0x1122334455667788, 99,
                                          0xABCDEF0123456789, full))
    write(cs, "seed-empty-state", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0, ckpt_image(0, [], [])))
    write(cs, "seed-bad-crc", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0,
                                              full[:4] + b"\0\0\0\0" + full[8:]))
    write(cs, "seed-settled-below", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0,
                                                    ckpt_image(10, [5], [])))
    write(cs, "seed-unsorted", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0,
                                               ckpt_image(0, [9, 3], [])))
    write(cs, "seed-epoch-zero", chansnap_fields(b"t", 0, 0, b"c", 1, 0, 0, ckpt_image(0, [], [])))
    write(cs, "seed-empty-channel", chansnap_fields(b"t", 0, 1, b"", 1, 0, 0,
                                                    ckpt_image(0, [], [])))
    write(cs, "seed-trailing", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0, full) + b"\x00")
    write(cs, "seed-short", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0, full)[:-3])
    write(cs, "seed-no-state", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0, b""))
    # After the state: the channel's stamp (not 0), absent for an older
    # build's request or a channel without one.
    one = chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0, full)
    write(cs, "seed-stamp", one + struct.pack(">Q", 0xABCDEF0123456789))
    write(cs, "seed-stamp-zero", one + struct.pack(">Q", 0))
    write(cs, "seed-stamp-cut", one + struct.pack(">Q", 0xABCD)[:-3])
    write(cs, "seed-stamp-long", one + struct.pack(">QB", 0xABCD, 0))
    write(cs, "seed-stamp-empty-state", chansnap_fields(b"t", 0, 1, b"c", 1, 0, 0, b"") +
          struct.pack(">Q", 0xABCD))


def pstats_fields(topic, parts):
    """A PSTATS request's fields (after the opcode byte)."""
    return wire_str(topic) + struct.pack(">I", len(parts)) + b"".join(
        struct.pack(">I", p) for p in parts)


def pstats_reply(entries):
    """A PSTATS 200 reply body: (index, status, numbers or None) each."""
    out = struct.pack(">I", len(entries))
    for index, status, numbers in entries:
        out += struct.pack(">IH", index, status)
        if numbers is not None:
            out += struct.pack(">IQQQQ", *numbers)
    return out


def perrs_reply(entries):
    """A PERRS 200 reply body: (index, [(node, text), ...]) each."""
    out = struct.pack(">I", len(entries))
    for index, errs in entries:
        out += struct.pack(">IB", index, len(errs))
        for node, text in errs:
            out += struct.pack(">I", node) + wire_str(text)
    return out


def moveprog_fields(topic, partition):
    return wire_str(topic) + struct.pack(">I", partition)


def moveprog_reply(known, copied, total, lag):
    return struct.pack(">BQQQ", known, copied, total, lag)


def propose_at_reply(status, index):
    """A META_PROPOSE_AT 200 reply (opcode 21): the answer and the entry's index."""
    return struct.pack(">iQ", status, index)


def replerr_fields(node, incarnation, topic, partition, epoch, error):
    """A REPLICA_ERROR request's fields (opcode 19): a follower's append error."""
    return (struct.pack(">IQ", node, incarnation) + wire_str(topic) +
            struct.pack(">II", partition, epoch) + wire_str(error))


def purge_fields(topic, created_at_ms):
    return wire_str(topic) + struct.pack(">q", created_at_ms)


def rcheck_fields(remote, remote_id, topic):
    """A REMOTE_CHECK request's fields (after the opcode byte)."""
    return wire_str(remote) + struct.pack(">Q", remote_id) + wire_str(topic)


def rcheck_result(cls, status, ms, detail):
    """A REMOTE_CHECK 200 answer's body."""
    return struct.pack(">BHI", cls, status, ms) + wire_str(detail)


def rcheck_seeds(here):
    rc = os.path.join(here, "remote_check", "corpus")
    write(rc, "seed-request-topic", rcheck_fields(b"eu", 0x9f1c2e0a4b7d3e11, b"orders"))
    write(rc, "seed-request-no-topic", rcheck_fields(b"eu-west.1", 1, b""))
    write(rc, "seed-request-empty-remote", rcheck_fields(b"", 1, b"t"))
    write(rc, "seed-request-long-remote", rcheck_fields(b"r" * 65, 1, b"t"))
    write(rc, "seed-request-trailing", rcheck_fields(b"eu", 1, b"t") + b"\x00")
    write(rc, "seed-request-cut", rcheck_fields(b"eu", 1, b"topic")[:-2])
    write(rc, "seed-result-ok", rcheck_result(0, 400, 12, b""))
    write(rc, "seed-result-tls", rcheck_result(2, 0, 10001, b"TLS: certificate verify failed"))
    write(rc, "seed-result-bad-class", rcheck_result(8, 0, 1, b"x"))
    write(rc, "seed-result-bad-status", rcheck_result(0, 42, 1, b"x"))
    write(rc, "seed-reply-error",
          b'{"error":"remote eu is not in this node\'s metastore replica"}')
    write(rc, "seed-reply-empty-error", b'{"error":""}')
    write(rc, "seed-reply-not-object", b"[1]")


def commit_fields(topic, partition, recs):
    """A COMMIT request's fields (after the opcode byte)."""
    out = wire_str(topic) + struct.pack(">II", partition, len(recs))
    for key, body, at, created in recs:
        out += wire_str(key) + wire_str(body) + struct.pack(">qq", at, created)
    return out


def wire_seeds(here):
    ping, request, reply, auth, cancel = 4, 8, 9, 10, 6
    ekm = bytes(range(32))
    proof = hmac.new(b"fuzz cluster secret", b"client" + ekm, hashlib.sha256).digest()
    echo = b"\x01" + wire_str(b"hello")
    join = b"\x03" + struct.pack(">Q", 2) + wire_str(b"127.0.0.1:4262") + wire_str(b"127.0.0.1:4252")
    ok = struct.pack(">H", 200) + wire_str(b"application/json") + wire_str(b'{"ok":true}')
    commit = commit_fields(b"orders", 1, [(b"k1", b"body one", 0, 1700000000000),
                                          (b"", b"deferred", 1700000060000, 1700000000001)])

    cr = os.path.join(here, "commit_request", "corpus")
    write(cr, "seed-batch", commit)
    write(cr, "seed-one", commit_fields(b"t", 0, [(b"", b"x", 0, 0)]))
    write(cr, "seed-empty-batch", commit_fields(b"t", 0, []))
    write(cr, "seed-big-body", commit_fields(b"t", 0, [(b"", b"b" * 1025, 0, 0)]))
    write(cr, "seed-negative-time", commit_fields(b"t", 0, [(b"", b"x", -1, 0)]))
    write(cr, "seed-big-then-torn", wire_str(b"t") + struct.pack(">II", 0, 2) + wire_str(b"") +
          wire_str(b"b" * 1025) + b"\x00" * 5)
    write(cr, "seed-huge-count", wire_str(b"t") + struct.pack(">II", 0, 0xFFFFFFFF))
    write(cr, "seed-trailing", commit + b"\x00")
    write(cr, "seed-reply-ok", b'{"first_offset":12}')
    write(cr, "seed-reply-owner", b'{"error":"partition 1 of t is not on this node",'
                                  b'"owner_node":"3"}')
    write(cr, "seed-reply-null-owner", b'{"error":"x","owner_node":null}')

    pr = os.path.join(here, "produce_frame", "corpus")

    def produce_fields(topic, partition, epoch, node, seq, recs):
        out = wire_str(topic) + struct.pack(">IIQQI", partition, epoch, node, seq, len(recs))
        for key, body, at, created in recs:
            out += wire_str(key) + wire_str(body) + struct.pack(">qq", at, created)
        return out

    produce = produce_fields(b"orders", 1, 4, 2, 1 << 40,
                             [(b"k1", b"body one", 0, 1700000000000),
                              (b"", b"deferred", 1700000060000, 1700000000001)])
    ctl = struct.pack("<BQQI", 2, 2, 7, 2)  # record.h: little-endian
    write(pr, "seed-batch", produce)
    write(pr, "seed-one", produce_fields(b"t", 0, 0, 1, 1, [(b"", b"x", 0, 0)]))
    write(pr, "seed-empty-batch", produce_fields(b"t", 0, 0, 1, 1, []))
    write(pr, "seed-empty-topic", produce_fields(b"", 0, 0, 1, 1, [(b"", b"x", 0, 0)]))
    write(pr, "seed-big-body", produce_fields(b"t", 0, 0, 1, 1, [(b"", b"b" * 1025, 0, 0)]))
    write(pr, "seed-negative-time", produce_fields(b"t", 0, 0, 1, 1, [(b"", b"x", -1, 0)]))
    write(pr, "seed-huge-count", wire_str(b"t") + struct.pack(">IIQQI", 0, 0, 1, 1, 0xFFFFFFFF))
    write(pr, "seed-trailing", produce + b"\x00")
    write(pr, "seed-reply-ok", b'{"first_offset":12}')
    write(pr, "seed-reply-leader", b'{"error":"not the leader","leader_node":"3"}')
    write(pr, "seed-reply-few", b'{"error":"not enough in-sync replicas","reason":"few_replicas"}')
    write(pr, "seed-ctl", ctl)
    write(pr, "seed-tail", record(10, ctl, flags=3) + record(11, b"x"))
    settle_repl_seeds(here)
    chan_snap_seeds(here)

    sr = os.path.join(here, "settle_request", "corpus")
    three = [(0, 12, 1), (1, 7, 3), (2, 0, 4294967295)]
    write(sr, "seed-ack", settle_fields(b"orders", b"default", 1, 0, three))
    write(sr, "seed-extend", settle_fields(b"orders", b"billing", 2, 30000, three[:1]))
    write(sr, "seed-nack", settle_fields(b"t", b"c", 3, 0, three[1:]))
    write(sr, "seed-full", settle_fields(b"t", b"c", 1, 0, [(i, i, i + 1) for i in range(100)]))
    write(sr, "seed-too-many", settle_fields(b"t", b"c", 1, 0, [(0, 0, 1)] * 101))
    write(sr, "seed-none", settle_fields(b"t", b"c", 1, 0, []))
    write(sr, "seed-bad-how", settle_fields(b"t", b"c", 4, 0, three))
    write(sr, "seed-negative-vis", settle_fields(b"t", b"c", 2, -1, three))
    write(sr, "seed-trailing", settle_fields(b"t", b"c", 1, 0, three) + b"\x00")
    write(sr, "seed-short", settle_fields(b"t", b"c", 1, 0, three)[:-3])
    write(sr, "seed-reply", struct.pack(">IHHHH", 4, 204, 410, 503, 421))

    ps = os.path.join(here, "pstats_request", "corpus")
    write(ps, "seed-three", pstats_fields(b"orders", [0, 1, 2]))
    write(ps, "seed-one", pstats_fields(b"t", [7]))
    write(ps, "seed-none", pstats_fields(b"t", []))
    write(ps, "seed-empty-topic", pstats_fields(b"", [0]))
    write(ps, "seed-huge-count", wire_str(b"t") + struct.pack(">I", 0xFFFFFFFF))
    write(ps, "seed-short", pstats_fields(b"t", [0, 1])[:-1])
    write(ps, "seed-trailing", pstats_fields(b"t", [0]) + b"\x00")
    write(ps, "seed-reply", pstats_reply([(0, 200, (1, 0, 42, 40, 4096)), (1, 421, None),
                                          (2, 416, None), (3, 404, None), (4, 503, None)]))
    write(ps, "seed-reply-bad-status", pstats_reply([(0, 418, None)]))
    write(ps, "seed-reply-short", pstats_reply([(0, 200, (1, 0, 42, 40, 4096))])[:-2])
    write(ps, "seed-perrs-reply", perrs_reply([(0, [(2, b"no space left on device"),
                                                    (3, b"i/o error")]), (1, []),
                                               (5, [(4, b"x")])]))
    write(ps, "seed-perrs-none", perrs_reply([(0, []), (1, []), (2, [])]))
    write(ps, "seed-perrs-eight", perrs_reply([(7, [(n, b"e" * 96) for n in range(1, 9)])]))
    write(ps, "seed-perrs-nine", perrs_reply([(7, [(n, b"e") for n in range(1, 10)])]))
    write(ps, "seed-perrs-node-zero", perrs_reply([(0, [(0, b"e")])]))
    write(ps, "seed-perrs-empty-text", perrs_reply([(0, [(1, b"")])]))
    write(ps, "seed-perrs-long-text", perrs_reply([(0, [(1, b"e" * 97)])]))
    write(ps, "seed-perrs-control", perrs_reply([(0, [(1, b"a\nb")])]))
    write(ps, "seed-perrs-short", perrs_reply([(0, [(1, b"abc")])])[:-1])
    write(ps, "seed-perrs-trailing", perrs_reply([(0, [(1, b"abc")])]) + b"\x00")
    pa = os.path.join(here, "propose_at_reply", "corpus")
    write(pa, "seed-applied", propose_at_reply(0, 4242))
    write(pa, "seed-exists", propose_at_reply(-17, 90))
    write(pa, "seed-not-applied", propose_at_reply(-5, 0))
    write(pa, "seed-old-reply", struct.pack(">i", 0))
    write(pa, "seed-short", propose_at_reply(0, 1)[:-1])
    write(pa, "seed-trailing", propose_at_reply(0, 1) + b"\x00")
    mp = os.path.join(here, "move_progress", "corpus")
    write(mp, "seed-request", moveprog_fields(b"orders", 7))
    write(mp, "seed-long-name", moveprog_fields(b"t" * 255, 0))
    write(mp, "seed-too-long-name", moveprog_fields(b"t" * 256, 0))
    write(mp, "seed-empty-name", moveprog_fields(b"", 1))
    write(mp, "seed-nul-in-name", moveprog_fields(b"t\x00u", 1))
    write(mp, "seed-trailing", moveprog_fields(b"t", 1) + b"\x00")
    write(mp, "seed-short", moveprog_fields(b"t", 1)[:-1])
    write(mp, "seed-reply-all", moveprog_reply(3, 1048576, 4194304, 812))
    write(mp, "seed-reply-lag", moveprog_reply(2, 0, 0, 0))
    write(mp, "seed-reply-none", moveprog_reply(0, 0, 0, 0))
    write(mp, "seed-reply-bad-bit", moveprog_reply(4, 0, 0, 0))
    write(mp, "seed-reply-bytes-without-bit", moveprog_reply(2, 1, 2, 0))
    write(mp, "seed-reply-short", moveprog_reply(3, 1, 2, 3)[:-1])
    pr = os.path.join(here, "purge_request", "corpus")
    write(pr, "seed-purge", purge_fields(b"orders", 1764590000000))
    write(pr, "seed-nsq-topic", purge_fields(b"a.b-c_d", 0))
    write(pr, "seed-long-name", purge_fields(b"t" * 255, 1))
    write(pr, "seed-too-long-name", purge_fields(b"t" * 256, 1))
    write(pr, "seed-empty-name", purge_fields(b"", 1))
    write(pr, "seed-negative-time", purge_fields(b"t", -1))
    write(pr, "seed-nul-in-name", purge_fields(b"t\x00u", 1))
    write(pr, "seed-trailing", purge_fields(b"t", 1) + b"\x00")
    write(pr, "seed-short", purge_fields(b"t", 1)[:-3])
    write(pr, "seed-reply-error", b'{"error":"deleting topic t here failed: not found"}')
    write(pr, "seed-reply-not-object", b'["error"]')
    write(pr, "seed-reply-empty-error", b'{"error":""}')

    wf = os.path.join(here, "wire_frame", "corpus")
    stream = (wire_frame(auth, 0, proof) + wire_frame(request, 1, echo) +
              wire_frame(reply, 1, ok) + wire_frame(ping, 2, b"") + wire_frame(cancel, 1, b""))
    write(wf, "seed-session-whole", b"\x00" + stream)
    write(wf, "seed-session-chunk7", b"\x07" + stream)
    write(wf, "seed-session-bytes", b"\x01" + stream)
    write(wf, "seed-over-preauth", b"\x03" + wire_frame(auth, 0, proof + b"x" * 13))
    write(wf, "seed-torn", b"\x05" + stream[:-9])
    write(wf, "seed-bad-reserved", b"\x00" + wire_frame(ping, 0, b"")[:6] + b"\x00\x01" +
          wire_frame(ping, 0, b"")[8:])

    wr = os.path.join(here, "wire_request", "corpus")
    write(wr, "seed-echo", echo)
    write(wr, "seed-propose", b"\x02" + wire_str(b"TM\x01\x01\x00\x00\x00\x00"))
    write(wr, "seed-join", join)
    write(wr, "seed-leader-index", b"\x04")
    write(wr, "seed-node-status", b"\x05")
    write(wr, "seed-unknown-op", b"\x63" + wire_str(b"x"))
    write(wr, "seed-join-trailing", join + b"\x00")
    write(wr, "seed-commit", b"\x06" + commit)
    write(wr, "seed-commit-short", b"\x06" + commit[:-1])
    write(wr, "seed-pstats", b"\x09" + pstats_fields(b"t", [0, 2]))
    write(wr, "seed-perrs", b"\x14" + pstats_fields(b"t", [0, 2]))
    write(wr, "seed-perrs-none", b"\x14" + pstats_fields(b"t", []))
    write(wr, "seed-settle", b"\x07" + settle_fields(b"t", b"default", 1, 0, [(0, 1, 1)]))
    write(wr, "seed-purge", b"\x0a" + purge_fields(b"orders", 1764590000000))
    write(wr, "seed-chan-snap", b"\x0f" + chansnap_fields(b"t", 0, 1, b"c", 1, 3, 0,
                                                          ckpt_image(4, [6], [(5, 0, 1)])))
    write(wr, "seed-purge-negative", b"\x0a" + purge_fields(b"orders", -5))
    write(wr, "seed-remote-check", b"\x11" + rcheck_fields(b"eu", 7, b"orders"))
    write(wr, "seed-replica-error", b"\x13" + replerr_fields(3, 9, b"orders", 0, 2,
                                                             b"no space left on device"))
    write(wr, "seed-replica-error-cleared", b"\x13" + replerr_fields(3, 9, b"t", 1, 1, b""))
    write(wr, "seed-replica-error-epoch0", b"\x13" + replerr_fields(3, 9, b"t", 1, 0, b"x"))
    write(wr, "seed-replica-error-control", b"\x13" + replerr_fields(3, 9, b"t", 1, 1, b"a\nb"))
    write(wr, "seed-replica-error-long", b"\x13" + replerr_fields(3, 9, b"t", 1, 1, b"e" * 97))
    write(wr, "seed-replica-error-trailing",
          b"\x13" + replerr_fields(3, 9, b"t", 1, 1, b"eio") + b"\x00")
    write(wr, "seed-flushed", b"\x10" + struct.pack(">IQI", 2, 77, 1) + wire_str(b"t") +
          struct.pack(">IIQIQI", 1, 3, 10, 3, 9, 4))
    write(wr, "seed-reply", ok)
    write(wr, "seed-reply-empty", struct.pack(">H", 204) + wire_str(b"") + wire_str(b""))

    wp = os.path.join(here, "wire_proof", "corpus")
    write(wp, "seed-good", ekm + wire_frame(auth, 0, proof))
    write(wp, "seed-server-role", ekm + wire_frame(
        auth, 0, hmac.new(b"fuzz cluster secret", b"server" + ekm, hashlib.sha256).digest()))
    write(wp, "seed-request-first", ekm + wire_frame(request, 1, echo))
    write(wp, "seed-short-proof", ekm + wire_frame(auth, 0, proof[:31]))
    write(wp, "seed-too-big", ekm + wire_frame(auth, 0, proof + b"y" * 13))


def meta_cmd(ctype, payload):
    """A metastore command (meta/cmd.h): header, payload, zero padding."""
    b = b"TM" + bytes([1, ctype]) + struct.pack("<I", len(payload)) + payload
    return b + b"\x00" * ((8 - len(b) % 8) % 8)


def mstr(s):
    return struct.pack("<H", len(s)) + s


def remote_put(name, cond=1, salt=b"\x07" * 32, ca=b"", sealed=b"\xaa" * 40, version=1,
               expect=None):
    """A REMOTE_PUT (meta/remote.h); the sealed bytes are opaque here."""
    p = bytes([cond]) + salt + mstr(name) + struct.pack("<Q", 0x1122334455667788)
    p += mstr(b"https://eu.example.com:4443") + mstr(b"mirror") + mstr(ca)
    p += struct.pack("<H", len(sealed)) + sealed + struct.pack("<IQQ", version, 1000, 2000)
    p += mstr(b"admin") + mstr(b"admin") + mstr(b"00000000deadbeef")
    if expect is not None:
        p += struct.pack("<Q", expect)
    return meta_cmd(30, p)


def remote_seeds(here):
    """Remotes in the metastore (fuzz target meta_cmd): the salt, puts,
    deletes, a snapshot of them, and damaged ones."""
    mc = os.path.join(here, "meta_cmd", "corpus")
    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    salt = meta_cmd(32, b"\x07" * 32)
    write(mc, "seed-remote-salt", salt + meta_cmd(32, b"\x08" * 32))
    write(mc, "seed-remote-no-salt", remote_put(b"eu"))
    put = salt + remote_put(b"eu")
    write(mc, "seed-remote-put", put)
    write(mc, "seed-remote-put-ca", salt + remote_put(b"us.east", ca=ca))
    write(mc, "seed-remote-put-again", put + remote_put(b"eu", cond=1 | 128))
    write(mc, "seed-remote-put-unchanged", put + remote_put(b"eu", cond=2, version=2,
                                                            expect=0x0123456789abcdef))
    write(mc, "seed-remote-other-salt", put + remote_put(b"ap", salt=b"\x08" * 32))
    delete = meta_cmd(31, mstr(b"eu") + mstr(b"admin") + mstr(b"00000000deadbeef"))
    write(mc, "seed-remote-delete", put + delete + delete)
    write(mc, "seed-remote-short-seal", salt + remote_put(b"eu", sealed=b"\xaa" * 27))
    write(mc, "seed-remote-bad-cond", salt + remote_put(b"eu", cond=3))
    write(mc, "seed-remote-http", put.replace(b"https://", b"http:///"))
    recs = [salt, remote_put(b"eu", cond=0), remote_put(b"us", cond=0, ca=ca)]
    snap = b"TMS1" + struct.pack("<IQQ", 0, 1, len(recs)) + b"".join(recs)
    write(mc, "seed-remote-snapshot", snap)
    dup = b"TMS1" + struct.pack("<IQQ", 0, 1, 3) + salt + recs[1] + recs[1]
    write(mc, "seed-remote-snapshot-dup", dup)
    nosalt = b"TMS1" + struct.pack("<IQQ", 0, 1, 1) + recs[1]
    write(mc, "seed-remote-snapshot-no-salt", nosalt)


# A TOPIC_PUT of "orders" (4 partitions), as the meta_cmd corpus holds it.
TOPIC_ORDERS = bytes.fromhex(
    "544d01015c0000000106006f72646572730300000000840c240000000030750000000000000004000000000000000400"
    "000000000000882900001061000000000000000068e5cf8b0100000500616c69636500000000000000000000000000000000000000000000")


def move_mark(topic, part, move_id, marks):
    """A MOVE_MARK (meta/cmd.h, type 25): a move's stall marks, (node, end, ms) each."""
    p = mstr(topic) + struct.pack("<IQB", part, move_id, len(marks))
    for node, end, ms in marks:
        p += struct.pack("<IQq", node, end, ms)
    return meta_cmd(25, p)


def move_mark_seeds(here):
    """Stall marks in the metastore (fuzz target meta_cmd): good ones (the
    topic has no move: refused at apply), none, and damaged ones."""
    mc = os.path.join(here, "meta_cmd", "corpus")
    two = [(4, 52, 1760000001000), (2, 0, 1760000000500)]
    write(mc, "seed-move-mark", TOPIC_ORDERS + move_mark(b"orders", 0, 0x77, two))
    write(mc, "seed-move-mark-none", TOPIC_ORDERS + move_mark(b"orders", 1, 0x77, []))
    write(mc, "seed-move-mark-dup", move_mark(b"orders", 0, 0x77, [two[0], two[0]]))
    write(mc, "seed-move-mark-id0", move_mark(b"orders", 0, 0, two))
    write(mc, "seed-move-mark-negative", move_mark(b"orders", 0, 1, [(4, 1, -1)]))


def rchild_put(parent, remote, child, cond=1, remote_id=0x1122334455667788, epoch=7, delay=0):
    """A REMOTE_CHILD_PUT (meta/remote.h)."""
    p = bytes([cond]) + mstr(parent) + mstr(remote) + struct.pack("<Q", remote_id) + mstr(child)
    p += struct.pack("<QqQ", epoch, delay, 1000) + mstr(b"admin") + mstr(b"00000000cafef00d")
    return meta_cmd(33, p)


def rchild_seeds(here):
    """Remote children in the metastore (fuzz target meta_cmd)."""
    mc = os.path.join(here, "meta_cmd", "corpus")
    salt = meta_cmd(32, b"\x07" * 32)
    base = salt + remote_put(b"eu") + TOPIC_ORDERS
    put = rchild_put(b"orders", b"eu", b"orders")
    write(mc, "seed-rchild-put", base + put + put + rchild_put(b"orders", b"eu", b"orders", epoch=8))
    write(mc, "seed-rchild-no-parent", salt + remote_put(b"eu") + put)
    write(mc, "seed-rchild-other-id", base + rchild_put(b"orders", b"eu", b"o", remote_id=5))
    write(mc, "seed-rchild-bad-delay", base + rchild_put(b"orders", b"eu", b"o", delay=-1))
    delete = meta_cmd(34, mstr(b"orders") + mstr(b"eu") + mstr(b"orders") + mstr(b"admin") +
                      mstr(b"00000000cafef00d"))
    rdel = meta_cmd(31, mstr(b"eu") + mstr(b"admin") + mstr(b"00000000deadbeef"))
    write(mc, "seed-rchild-delete", base + put + rdel + delete + delete + rdel)
    recs = [TOPIC_ORDERS, salt, remote_put(b"eu", cond=0), rchild_put(b"orders", b"eu", b"x", cond=0)]
    snap = b"TMS1" + struct.pack("<IQQ", 0, 1, len(recs)) + b"".join(recs)
    write(mc, "seed-rchild-snapshot", snap)


def chan_put(topic, channel, stamp=None, if_absent=0):
    """A CHANNEL_PUT (meta/cmd.h, type 3): [8] stamp after the names, or none
    (an older build's entry); CHANNEL_DELETE (type 4) when stamp is "delete"."""
    p = bytes([if_absent]) + mstr(topic) + mstr(channel)
    if stamp == "delete":
        return meta_cmd(4, p)
    if stamp is not None:
        p += struct.pack("<Q", stamp)
    return meta_cmd(3, p)


def take_back_seeds(here):
    """A /v1 creation's take-back (fuzz target meta_cmd): TOPIC_DELETE with
    the record's creation time (applied), with another one (refused, the
    record stays), with none (an older build's, unconditional), and with
    the stamp cut short or too long (refused)."""
    mc = os.path.join(here, "meta_cmd", "corpus")
    made_at = struct.unpack_from("<q", TOPIC_ORDERS, 8 + 1 + 2 + 6 + 4 + 4 * 8 + 2 + 8 + 4)[0]
    name = mstr(b"orders")
    write(mc, "seed-take-back", TOPIC_ORDERS + meta_cmd(2, name + struct.pack("<q", made_at)))
    write(mc, "seed-take-back-stale", TOPIC_ORDERS +
          meta_cmd(2, name + struct.pack("<q", made_at - 1)) + meta_cmd(2, name))
    write(mc, "seed-take-back-cut", TOPIC_ORDERS + meta_cmd(2, name + b"\x01\x02\x03"))
    write(mc, "seed-take-back-long", TOPIC_ORDERS +
          meta_cmd(2, name + struct.pack("<qB", made_at, 0)))


def chan_stamp_seeds(here):
    """Channel stamps in the metastore (fuzz target meta_cmd): put with and
    without one, again with another (the record keeps its first), deleted
    and made again, a stamp of 0 or cut short (refused), a snapshot of
    stamped and unstamped channels."""
    mc = os.path.join(here, "meta_cmd", "corpus")
    put = chan_put(b"orders", b"billing", 0x0123456789ABCDEF)
    write(mc, "seed-chan-stamp", TOPIC_ORDERS + put)
    write(mc, "seed-chan-stamp-again", TOPIC_ORDERS + put +
          chan_put(b"orders", b"billing", 0x1111, if_absent=1) +
          chan_put(b"orders", b"billing", 0x2222))
    write(mc, "seed-chan-stamp-remade", TOPIC_ORDERS + put +
          chan_put(b"orders", b"billing", "delete") + chan_put(b"orders", b"billing", 0x3333))
    write(mc, "seed-chan-stamp-none", TOPIC_ORDERS + chan_put(b"orders", b"billing") +
          chan_put(b"orders", b"audit", 0xFFFFFFFFFFFFFFFF))
    write(mc, "seed-chan-stamp-zero", TOPIC_ORDERS + chan_put(b"orders", b"billing", 0))
    cut = bytes([0]) + mstr(b"orders") + mstr(b"billing") + b"\x01\x02\x03"
    write(mc, "seed-chan-stamp-cut", TOPIC_ORDERS + meta_cmd(3, cut))
    long = bytes([0]) + mstr(b"orders") + mstr(b"billing") + struct.pack("<QB", 5, 0)
    write(mc, "seed-chan-stamp-long", TOPIC_ORDERS + meta_cmd(3, long))
    write(mc, "seed-chan-delete-stamp", TOPIC_ORDERS + put +
          meta_cmd(4, bytes([0]) + mstr(b"orders") + mstr(b"billing") + struct.pack("<Q", 5)))
    recs = [TOPIC_ORDERS, chan_put(b"orders", b"billing", 0xABCDEF, if_absent=1),
            chan_put(b"orders", b"audit", if_absent=1)]
    snap = b"TMS1" + struct.pack("<IQQ", 0, 1, len(recs)) + b"".join(recs)
    write(mc, "seed-chan-stamp-snapshot", snap)
    recs[1] = chan_put(b"orders", b"billing", 0, if_absent=1)
    snap = b"TMS1" + struct.pack("<IQQ", 0, 1, len(recs)) + b"".join(recs)
    write(mc, "seed-chan-stamp-snapshot-zero", snap)


def record_file(magic, payload):
    """A small record file (storage/io.h): u32 magic, u32 CRC32C, payload."""
    return struct.pack("<II", magic, crc32c(payload)) + payload


def record_file_seeds(here):
    """The record_file target: byte 0 picks the file (0 channel stamp, 1
    topic stamp, 2 floor, 3 damage), the rest is its contents."""
    rf = os.path.join(here, "record_file", "corpus")
    cstamp, tstamp, floor, damage = 0x43534E54, 0x31534E54, 0x31464E54, 0x31444E54
    good = record_file(cstamp, struct.pack("<Q", 0x0123456789ABCDEF))
    write(rf, "seed-cstamp", b"\x00" + good)
    write(rf, "seed-cstamp-zero", b"\x00" + record_file(cstamp, struct.pack("<Q", 0)))
    write(rf, "seed-cstamp-bad-crc", b"\x00" + good[:4] + b"\0\0\0\0" + good[8:])
    write(rf, "seed-cstamp-short", b"\x00" + good[:-1])
    write(rf, "seed-cstamp-long", b"\x00" + good + b"\x00")
    write(rf, "seed-cstamp-topic-magic", b"\x00" + record_file(tstamp, struct.pack("<Q", 5)))
    write(rf, "seed-cstamp-empty", b"\x00")
    write(rf, "seed-tstamp", b"\x01" + record_file(tstamp, struct.pack("<q", 1764590000123)))
    write(rf, "seed-tstamp-negative", b"\x01" + record_file(tstamp, struct.pack("<q", -1)))
    write(rf, "seed-floor", b"\x02" + record_file(floor, struct.pack("<Q", 4096)))
    write(rf, "seed-floor-zero", b"\x02" + record_file(floor, struct.pack("<Q", 0)))
    active = 0xFFFFFFFFFFFFFFFF
    write(rf, "seed-damage-active", b"\x03" + record_file(damage, struct.pack("<QQ", 0, active)))
    write(rf, "seed-damage-sealed", b"\x03" + record_file(damage, struct.pack("<QQ", 0, 100)))
    write(rf, "seed-damage-other", b"\x03" + record_file(damage, struct.pack("<QQ", 500, active)))
    write(rf, "seed-damage-empty-range", b"\x03" + record_file(damage, struct.pack("<QQ", 7, 7)))
    write(rf, "seed-damage-reversed", b"\x03" + record_file(damage, struct.pack("<QQ", 9, 3)))
    bad = record_file(damage, struct.pack("<QQ", 0, active))
    write(rf, "seed-damage-bad-crc", b"\x03" + bad[:5] + b"\xff" + bad[6:])
    write(rf, "seed-damage-short", b"\x03" + bad[:-8])


def manifest(paths, isolated=""):
    """A backup manifest (docs/storage-format.md) of node 1 holding paths
    (and isolated, the text of its "isolated" array, when given)."""
    files = ",".join('{"path":"%s","length":0,"crc32c":0}' % p for p in sorted(paths))
    return ('{"format":"tern-backup 1","storage_format":1,"session":"2a341846682ba06f",'
            '"node_id":1,"created_ms":1796160311654,"ttl_ms":600000,"metastore":{"path":'
            '"metastore.snapshot","length":504,"crc32c":2750604445,"applied_index":9,"voters":'
            '[{"id":1,"raft_address":"127.0.0.1:0"}]},"files":[%s]%s}' %
            (files, ',"isolated":[%s]' % isolated if isolated else "")).encode()


def backup_manifest_seeds(here):
    """Manifests whose channel files do and do not go together (restore's
    channel check), with the incarnation, channel stamp and damage files."""
    bm = os.path.join(here, "backup_manifest", "corpus")
    seg = "00000000000000000000.log"
    good = ["FORMAT", "incarnation", "topics/t/c.cstamp", "topics/t/stamp"]
    for p in range(3):
        good += ["topics/t/%d/%s" % (p, seg), "topics/t/%d/c.wal" % p, "topics/t/%d/c.ckpt" % p]
    write(bm, "seed-channels", manifest(good))
    odd = ["topics/t/0/%s" % seg, "topics/t/0/c.wal", "topics/t/0/c.ckpt", "topics/t/0/damage",
           "topics/t/1/%s" % seg, "topics/t/1/c.wal",
           "topics/t/2/%s" % seg, "topics/t/2/c.ckpt", "topics/t/2/d.ckpt",
           "topics/t/3/%s" % seg,
           "topics/u/0/x.wal", "topics/u/0/.wal", "topics/u/0/.ckpt", "topics/u/x/y.ckpt",
           "topics/u/4294967296/a.ckpt", "topics/u/07/b.wal", "topics/u/1/sub/c.ckpt"]
    write(bm, "seed-channels-odd", manifest(odd))
    # A partition isolated for damage, copied whole (api/backup.c take_whole).
    whole = ["FORMAT", "topics/t/0/%s" % seg, "topics/t/0/00000000000000000100.log",
             "topics/t/0/00000000000000000100.idx", "topics/t/0/00000000000000000200.log"]
    # The same target decodes backup.json (tn_manifest_set_parse).
    write(bm, "seed-set", b'{"format":"tern-backup-set 1","id":"0123456789abcdef0123456789abcdef",'
                          b'"metastore_from":2,"nodes":[1,2,3]}\n')
    write(bm, "seed-set-old", b'{"format":"tern-backup-set 1","metastore_from":1,"nodes":[1]}')
    write(bm, "seed-nested", b"[" * 600 + b"]" * 600)
    write(bm, "seed-isolated", manifest(whole, '{"topic":"t","partition":0,"error":"partition '
                                                't/0: segment /d/t/0/00000000000000000100.log: '
                                                'bad record at byte 9 in a sealed segment"}'))


def write(dirname, name, data):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, name), "wb") as f:
        f.write(data)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    rd = os.path.join(here, "record_decode", "corpus")
    write(rd, "seed-plain", record(7, b"hello world"))
    write(rd, "seed-key", record(1, b"body", key=b"user-42", flags=1))
    write(rd, "seed-empty", record(0, b""))
    write(rd, "seed-torn", record(3, b"abcdefgh")[:-3])
    write(rd, "seed-control", record(5, b"\x01" + struct.pack("<I", 7), flags=2))

    ss = os.path.join(here, "segment_scan", "corpus")
    seg = b"".join(record(i, (b"message %d " % i) * (1 + i % 5)) for i in range(40))
    write(ss, "seed-clean", b"\x00" + seg)
    write(ss, "seed-torn", b"\x01" + seg[:-7])
    write(ss, "seed-zero-tail", b"\x02" + seg + b"\x00" * 300)
    batch = record(0, b"one", flags=1) + record(1, b"two", flags=1)
    write(ss, "seed-open-batch", b"\x03" + batch)
    durable = record(0, b"a" * 50) + record(1, b"b" * 50)
    damaged = bytearray(durable + record(2, b"c", sync_mark=len(durable)))
    damaged[60] ^= 0x20
    write(ss, "seed-durable-damage", b"\x04" + bytes(damaged))

    # raw_append: u64 first offset, u32 the follower's sync mark, then the
    # leader's records (flags 2: a control record; 1: batch continues).
    ra = os.path.join(here, "raw_append", "corpus")
    epoch_start = record(10, b"\x01" + struct.pack("<I", 4), flags=2)
    producer = record(11, b"\x02" + struct.pack("<QQI", 3, 99, 2), flags=3)
    run = (epoch_start + producer + record(12, b"one", flags=1) +
           record(13, b"two", key=b"k", sync_mark=4096) + record(14, b"three"))
    write(ra, "seed-run", struct.pack("<QI", 10, 777) + run)
    write(ra, "seed-open-batch", struct.pack("<QI", 10, 0) + run[:len(run) - len(record(14, b"three")) - len(record(13, b"two", key=b"k", sync_mark=4096))])
    write(ra, "seed-not-dense", struct.pack("<QI", 9, 0) + run)
    write(ra, "seed-short-ctrl", struct.pack("<QI", 0, 0) + record(0, b"\x01\x00", flags=2))
    write(ra, "seed-reserved-ctrl", struct.pack("<QI", 0, 0) + record(0, b"\x09", flags=2))
    write(ra, "seed-torn", struct.pack("<QI", 10, 0) + run[:-5])

    wr = os.path.join(here, "wal_replay", "corpus")
    ck = checkpoint(3, 10, settled=(12, 15), requeued=((11, 999, 2),))
    frames = (wal_frame(1, 4, struct.pack("<Q", 10)) + wal_frame(1, 5, struct.pack("<Q", 11)) +
              wal_frame(2, 6, struct.pack("<QqI", 13, 5000, 3)) + wal_frame(3, 7, b"\x01") +
              wal_frame(4, 8, struct.pack("<Q", 14)) + wal_frame(5, 9, struct.pack("<Q", 4)))
    write(wr, "seed-full", struct.pack("<H", len(ck)) + ck + frames)
    write(wr, "seed-no-checkpoint", struct.pack("<H", 0) + wal_frame(1, 1, struct.pack("<Q", 0)))
    write(wr, "seed-torn", struct.pack("<H", len(ck)) + ck + frames[:-5])
    write(wr, "seed-old-frames", struct.pack("<H", len(ck)) + ck +
          wal_frame(1, 2, struct.pack("<Q", 3)) + wal_frame(1, 3, struct.pack("<Q", 4)) +
          wal_frame(1, 4, struct.pack("<Q", 10)))

    il = os.path.join(here, "ilog_record", "corpus")
    frames = b"".join(ingress_frame(i, b"orders", (b"produce %d " % i) * (1 + i % 4),
                                    key=b"user-%d" % i if i % 2 else b"", partition=i % 3,
                                    pinned=i % 2 == 1, sync_mark=40 * i,
                                    deliver_at=5000 if i % 5 == 0 else 0)
                      for i in range(12))
    write(il, "seed-segment", frames)
    write(il, "seed-one", ingress_frame(0, b"t", b"hello"))
    write(il, "seed-empty-body", ingress_frame(9, b"a.b-c_d", b"", key=b"k"))
    write(il, "seed-torn", frames[:-9])
    bad = bytearray(frames)
    bad[len(frames) // 2] ^= 0x10
    write(il, "seed-damaged", bytes(bad))

    ep = os.path.join(here, "epochs_file", "corpus")
    three = epochs_file([(0, 0), (3, 120), (7, 4096)])
    write(ep, "seed-empty", epochs_file([]))
    write(ep, "seed-one", epochs_file([(1, 0)]))
    write(ep, "seed-three", three)
    write(ep, "seed-retained", epochs_file([(12, 1 << 40), (13, (1 << 40) + 5)]))
    write(ep, "seed-torn", three[:-7])
    flipped = bytearray(three)
    flipped[20] ^= 0x04
    write(ep, "seed-bad-crc", bytes(flipped))
    write(ep, "seed-unordered", epochs_file([(3, 0), (2, 10)]))
    write(ep, "seed-same-start", epochs_file([(1, 10), (2, 10)]))
    write(ep, "seed-bad-count", epochs_file([(1, 0)], count=2))
    write(ep, "seed-version-2", epochs_file([(1, 0)], version=2))
    write(ep, "seed-bad-magic", epochs_file([(1, 0)], magic=b"TNE2"))

    wire_seeds(here)
    rcheck_seeds(here)
    remote_seeds(here)
    rchild_seeds(here)
    move_mark_seeds(here)
    chan_stamp_seeds(here)
    take_back_seeds(here)
    record_file_seeds(here)
    backup_manifest_seeds(here)


if __name__ == "__main__":
    main()
