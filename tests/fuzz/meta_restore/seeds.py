#!/usr/bin/env python3
"""Writes the seed inputs of the meta_restore fuzz target (the rewrite of a
backup's metastore snapshot, src/meta/restore.h) into corpus/: real
snapshots (TMS1 with topics, partition states and members, to the command
layout of src/meta/cmd.c), with the members and copies the target's input
header gives the rewrite, plus truncations and damaged ones. libFuzzer
grows the corpus from these (`make fuzz`)."""
import os
import struct

NONE = 0


def mstr(s):
    return struct.pack("<H", len(s)) + s


def cmd(ctype, payload):
    """A metastore command (meta/cmd.h): header, payload, zero padding."""
    b = b"TM" + bytes([1, ctype]) + struct.pack("<I", len(payload)) + payload
    return b + b"\x00" * ((8 - len(b) % 8) % 8)


def topic_put(name, partitions, factor=3, min_insync=2):
    """TOPIC_PUT (type 1) of a native topic, as a snapshot names it."""
    flags = 1 | 2 | (32 if (factor, min_insync) != (1, 1) else 0)
    p = bytes([flags]) + mstr(name)
    p += struct.pack("<IqqqqBBqIq", partitions, 604800000, 30000, 1024, 1024, 0, 1, 0, 0,
                     1700000000000)
    p += mstr(b"") + mstr(b"") + struct.pack("<qQ", 0, 0)
    if flags & 32:
        p += bytes([factor, min_insync])
    return cmd(1, p)


def channel_put(topic, channel, stamp):
    return cmd(3, bytes([0]) + mstr(topic) + mstr(channel) + struct.pack("<Q", stamp))


def members(v):
    return struct.pack("<B", len(v)) + b"".join(struct.pack("<IQ", n, inc) for n, inc in v)


def part_state(topic, part, replicas, leader, leader_epoch, partition_epoch, isr, elr=(),
               min_insync=2, corrupt=0, unclean=0, move=None):
    """PART_STATE (type 20): a partition's state; move is (target, old,
    move_id, started_ms) or None."""
    p = mstr(topic) + struct.pack("<I", part) + bytes([len(replicas)])
    p += b"".join(struct.pack("<I", r) for r in replicas)
    p += struct.pack("<III", leader, leader_epoch, partition_epoch)
    p += members(isr) + members(elr) + struct.pack("<BIB", min_insync, corrupt, unclean)
    if move is not None:
        target, old, move_id, started = move
        p += bytes([len(target)]) + b"".join(struct.pack("<I", n) for n in target)
        p += bytes([len(old)]) + b"".join(struct.pack("<I", n) for n in old)
        p += struct.pack("<Qq", move_id, started)
    return cmd(20, p)


def member_rec(node, incarnation, boot):
    """MEMBER_REC (type 14): a registered member with its incarnation."""
    p = struct.pack("<Q", node) + mstr(b"10.0.0.%d:4153" % node) + mstr(b"10.0.0.%d:4151" % node)
    p += struct.pack("<q", 1000) + mstr(b"") + mstr(b"") + struct.pack("<HH", 4150, 4151)
    p += mstr(b"1.0.0") + struct.pack("<QQ", incarnation, boot)
    return cmd(14, p)


def member_fence(node, incarnation):
    return cmd(16, struct.pack("<QQ", node, incarnation))


def snapshot(recs):
    return b"TMS1" + struct.pack("<IQQ", 0, 1, len(recs)) + b"".join(recs)


def copy(present=True, damaged=False, last=0, end=0, top=None, fail=False, wide=None):
    """One copy as the target's callback hands it out."""
    top = last if top is None else top
    if wide is None:
        wide = last > 255 or end > 255 or top > 255
    flags = (1 if present else 0) | (2 if damaged else 0) | (4 if fail else 0) | (8 if wide else 0)
    if wide:
        return bytes([flags]) + struct.pack("<IQI", last, end, top)
    return bytes([flags, last, end, top])


def member_ids(ids):
    out = bytes([len(ids)])
    for i in ids:
        out += bytes([i]) if i < 0x80 else b"\xff" + struct.pack("<Q", i)
    return out


def seed(ids, copies, snap, bid=True):
    cb = b"".join(copies)
    return member_ids(ids) + bytes([1 if bid else 0]) + struct.pack("<H", len(cb)) + cb + snap


def main():
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(d, exist_ok=True)

    def write(name, data):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)

    regs = [member_rec(n, 0x100 + n, 0x900 + n) for n in (1, 2, 3)]
    three = [(1, 0x101), (2, 0x102), (3, 0x103)]
    # rt/0 with node 3 ahead; rt/1 with no copy at all (offline).
    rt = snapshot([topic_put(b"rt", 2), channel_put(b"rt", b"audit", 0xC4A1),
                   part_state(b"rt", 0, [1, 2, 3], 2, 4, 17, three[1:2], elr=three[2:],
                              corrupt=1, unclean=1),
                   part_state(b"rt", 1, [2, 3, 1], 2, 1, 1, three)] + regs)
    rt_copies = [copy(last=3, end=10), copy(last=3, end=10), copy(last=3, end=12)]
    write("seed-rewrite", seed([1, 2, 3], rt_copies, rt))
    write("seed-no-id", seed([1, 2, 3], rt_copies, rt, bid=False))
    write("seed-all-missing", seed([1, 2, 3], [], rt))
    write("seed-damaged", seed([1, 2, 3], [copy(damaged=True, top=9), copy(present=False),
                                           copy(last=1, end=3)], rt))
    write("seed-callback-fails", seed([1, 2, 3], [copy(last=3, end=1), copy(fail=True)], rt))
    write("seed-not-restored", seed([1, 3], rt_copies, rt))
    write("seed-no-members", seed([], rt_copies, rt))
    write("seed-wide", seed([1, 2, 3], [copy(last=70000, end=1 << 40, top=70001)] * 3, rt))
    # Epochs at the top of their range: none lies above them.
    write("seed-epoch-top", seed([1, 2, 3], [copy(last=5, end=1, top=0xFFFFFFFF)], rt))
    write("seed-last-epoch-top", seed([1, 2, 3], [copy(last=0xFFFFFFFF, end=1)], rt))
    top = snapshot([topic_put(b"rt", 1),
                    part_state(b"rt", 0, [1, 2, 3], 2, 0xFFFFFFFF, 0xFFFFFFFF, three[1:2])] + regs)
    write("seed-snapshot-epoch-top", seed([1, 2, 3], rt_copies, top))
    # Member ids no node has: 0, above 32 bits, and one whose low 32 bits
    # are a replica's.
    write("seed-member-zero", seed([0, 1, 2, 3], [copy(present=False)] * 3 + [copy(last=9)], rt))
    write("seed-member-wide", seed([1, 2, 3, (1 << 32) + 1],
                                   [copy(present=False)] * 3 + [copy(last=9, end=4)], rt))
    write("seed-member-none", seed([1, 2, 3, 1 << 32],
                                   [copy(present=False)] * 3 + [copy(last=9, end=4)], rt))
    # A moved partition: rm/0 on {2, 3}, node 1's whole copy taken before
    # the move (restore.h step 3a).
    regs4 = regs + [member_rec(4, 0x104, 0x904)]
    rm = snapshot([topic_put(b"rm", 1, 2, 1),
                   part_state(b"rm", 0, [2, 3], 2, 2, 7, [(2, 0x102)], min_insync=1)] + regs4)
    empty = copy(last=0, end=0)
    write("seed-moved", seed([1, 2, 3, 4], [empty, empty, copy(last=1, end=5), copy(present=False)],
                             rm))
    # A move under way (target {3}, old {2}): node 1 joins as an old replica.
    mv = snapshot([topic_put(b"rm", 1, 2, 1),
                   part_state(b"rm", 0, [3, 2], 2, 2, 7, [(2, 0x102)], min_insync=1,
                              move=([3], [2], 99, 1700000000000))] + regs4)
    write("seed-move-under-way", seed([1, 2, 3], [empty, empty, copy(last=1, end=5)], mv))
    # No room for another replica: refused.
    eight = list(range(10, 18))
    full = snapshot([topic_put(b"rf", 1, 5, 1),
                     part_state(b"rf", 0, eight, 10, 3, 3, [(10, 1)], min_insync=1)] +
                    [member_rec(1, 0x101, 0x901)])
    write("seed-full", seed([1], [copy(present=False)] * 8 + [copy(last=3, end=9)], full))
    # A fenced member's session: cleared by the restore.
    fenced = snapshot([topic_put(b"rt", 1),
                       part_state(b"rt", 0, [1, 2, 3], 2, 4, 17, three[1:2])] + regs +
                      [member_fence(2, 0x102)])
    write("seed-fenced", seed([1, 2, 3], rt_copies, fenced))
    # Truncations and damage.
    s = seed([1, 2, 3], rt_copies, rt)
    for cut in (1, 7, 24, 100, len(s) // 2, len(s) - 9, len(s) - 1):
        write("seed-cut-%d" % cut, s[:len(s) - cut])
    bad = bytearray(s)
    bad[s.index(b"TMS1") + 3] = ord("2")
    write("seed-newer-format", bytes(bad))
    bad = bytearray(s)
    bad[s.index(b"TMS1") + 16] += 1  # one record more than it holds
    write("seed-count", bytes(bad))


if __name__ == "__main__":
    main()
