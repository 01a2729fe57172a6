#!/usr/bin/env python3
"""Writes the seed inputs of the fetch_frame fuzz target (FETCH requests and
replies to src/cluster/fetch.h) into corpus/; libFuzzer grows the corpus
from these (`make fuzz`)."""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fetch_parts import corpus_writer, parts, s  # noqa: E402


def req(node, inc, wait, maxb, tuples, count=None):
    return struct.pack(">IQIII", node, inc, wait, maxb,
                       len(tuples) if count is None else count) + parts(tuples)


def records(hw, frm, count, epochs, recs):
    out = struct.pack(">HQQII", 0, hw, frm, count, len(epochs))
    for e, start in epochs:
        out += struct.pack(">IQ", e, start)
    return out + s(recs)


def reply(parts, count=None):
    return struct.pack(">I", len(parts) if count is None else count) + b"".join(parts)


def main():
    write = corpus_writer(__file__)

    two = req(3, 0x1122334455667788, 500, 1 << 20,
              [(b"orders", 7, 4, 1000, 3, 998, 12), (b"x", 0, 1, 0, 0, 0, 1)])
    write("seed-request-two", two)
    write("seed-request-one", req(2, 1, 0, 0, [(b"t", 0, 1, 0, 0, 0, 1)]))
    write("seed-request-none", req(2, 1, 0, 0, []))
    write("seed-request-empty-topic", req(2, 1, 0, 0, [(b"", 0, 1, 0, 0, 0, 1)]))
    write("seed-request-count-more", req(2, 1, 0, 0, [(b"t", 0, 1, 0, 0, 0, 1)], count=2))
    write("seed-request-short", two[:-3])
    write("seed-request-trailing", two + b"\0")
    rec = records(95, 90, 2, [(3, 90), (4, 91)], b"TNR1" + b"\0" * 40)
    write("seed-reply-records", reply([rec]))
    write("seed-reply-mixed", reply([rec, records(7, 7, 0, [], b""),
                                     struct.pack(">HQIQ", 1, 5, 2, 40),
                                     struct.pack(">HQ", 2, 1), struct.pack(">HQ", 3, 0),
                                     struct.pack(">HQ", 4, 0), struct.pack(">HQ", 5, 0),
                                     struct.pack(">HQQ", 6, 900, 800),
                                     struct.pack(">HQQ", 7, 30, 4000)]))
    write("seed-reply-out-of-range-short", reply([struct.pack(">HQ", 6, 0)]))
    write("seed-reply-gap-short", reply([struct.pack(">HQ", 7, 0)]))
    write("seed-reply-bad-status", reply([struct.pack(">HQ", 8, 0)]))
    write("seed-reply-many-epochs", reply([struct.pack(">HQQII", 0, 0, 0, 1, 4097)]))
    write("seed-reply-epochs-past-end", reply([struct.pack(">HQQII", 0, 0, 0, 1, 1000) + s(b"r")]))
    write("seed-reply-zero-count-bytes", reply([records(0, 0, 0, [], b"r")]))
    write("seed-reply-count-more", reply([rec], count=2))


if __name__ == "__main__":
    main()
