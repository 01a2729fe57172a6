"""Seed helpers shared by the fuzz targets of the two frames that carry
FETCH's partition tuples (src/cluster/fetch.h): fetch_frame/seeds.py and
flushed_frame/seeds.py, as fetch_parts.h shares their checks."""
import os
import struct


def s(b):
    """A u32-length-prefixed byte string."""
    return struct.pack(">I", len(b)) + b


def parts(tuples):
    """Partition tuples (topic, partition, leader_epoch, fetch_offset,
    last_fetched_epoch, flushed_offset, partition_epoch), encoded."""
    out = b""
    for topic, p, le, off, lfe, flushed, pe in tuples:
        out += s(topic) + struct.pack(">IIQIQI", p, le, off, lfe, flushed, pe)
    return out


def corpus_writer(seeds_py):
    """A write(name, data) that puts a seed into the corpus/ beside the
    seeds.py whose __file__ is seeds_py."""
    d = os.path.join(os.path.dirname(os.path.abspath(seeds_py)), "corpus")
    os.makedirs(d, exist_ok=True)

    def write(name, data):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)

    return write
