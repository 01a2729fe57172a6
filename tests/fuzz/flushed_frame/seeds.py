#!/usr/bin/env python3
"""Writes the seed inputs of the flushed_frame fuzz target (FLUSHED reports
to src/cluster/fetch.h: a header, then FETCH's partition layout, written by
../fetch_parts.py) into corpus/; libFuzzer grows the corpus from these
(`make fuzz`)."""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fetch_parts import corpus_writer, parts  # noqa: E402


def report(node, inc, tuples, count=None):
    return struct.pack(">IQI", node, inc, len(tuples) if count is None else count) + parts(tuples)


def main():
    write = corpus_writer(__file__)

    two = report(3, 0x1122334455667788,
                 [(b"orders", 7, 4, 1002, 4, 1000, 12), (b"x", 0, 1, 0, 0, 0, 1)])
    write("seed-report-two", two)
    write("seed-report-one", report(2, 1, [(b"t", 0, 1, 5, 1, 5, 1)]))
    write("seed-report-long-topic", report(2, 1, [(b"a" * 255, 0, 1, 5, 1, 5, 1)]))
    write("seed-report-topic-too-long", report(2, 1, [(b"a" * 256, 0, 1, 5, 1, 5, 1)]))
    write("seed-report-none", report(2, 1, []))
    write("seed-report-empty-topic", report(2, 1, [(b"", 0, 1, 5, 1, 5, 1)]))
    write("seed-report-count-more", report(2, 1, [(b"t", 0, 1, 5, 1, 5, 1)], count=2))
    write("seed-report-count-huge", report(2, 1, [(b"t", 0, 1, 5, 1, 5, 1)], count=0xFFFFFFFF))
    write("seed-report-short", two[:-3])
    write("seed-report-trailing", two + b"\0")
    write("seed-report-header-only", two[:16])


if __name__ == "__main__":
    main()
