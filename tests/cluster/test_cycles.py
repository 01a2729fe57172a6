"""Stop/start cycles of a three-node cluster (tests/cluster/harness.py):
every node stopped gracefully (SIGTERM, by PID, all at once) and started
again on its data directory, with metadata writes in between: 15 cycles
in the ordinary suite (make test, make asan: five writes through each
node), 200 under TERN_SOAK (make soak; 50 under the sanitizers:
TERN_SANITIZED), or --cycles N. Each stop must exit 0 (a crash inside
libraft's close, or anything else, fails it), every start must come back
ready, and every acknowledged write must be on every node at the end.

Run: python3 tests/cluster/test_cycles.py --ternd build/ternd [--cycles N]
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Cluster  # noqa: E402

CYCLES = 15
SOAK_CYCLES = 200
SOAK_CYCLES_SANITIZED = 50


class Cycles(unittest.TestCase):
    def test_stop_start_cycles(self):
        c = Cluster(3, args=["--raft-election-timeout=500ms"])
        self.addCleanup(c.close)
        c.start()
        acked = []
        started = time.monotonic()
        for cycle in range(CYCLES):
            # A write on a follower (forwarded over node RPC) before the stop.
            leader = c.find_leader()
            node = c.nodes[cycle % 3]
            name = f"cycle-{cycle}"
            status, body = node.request("POST", "/v1/topics", {"name": name, "partitions": 1})
            if status == 201:
                acked.append(name)
            else:
                # Not acknowledged: allowed only while leadership moves.
                self.assertIn(status, (503, None), (cycle, node.id, body, leader.id))
            codes = c.stop(timeout=60)
            for n in c.nodes:
                self.assertEqual(codes[n.id], 0, f"cycle {cycle}: node {n.id} exited "
                                 f"{codes[n.id]}:\n{n.log()[-4000:]}")
            c.start()
        elapsed = time.monotonic() - started
        sys.stderr.write(f"{CYCLES} cycles in {elapsed:.0f} s, {len(acked)} writes acknowledged\n")
        self.assertGreater(len(acked), CYCLES // 2)
        for n in c.nodes:
            listed = set(n.topics())
            missing = [a for a in acked if a not in listed]
            self.assertEqual(missing, [], f"node {n.id} lost acknowledged writes")
            self.assertEqual(n.log().count("metastore: new cluster bootstrapped"), 1)


def configure(args):
    global CYCLES
    if args.cycles is not None:
        CYCLES = args.cycles
    elif harness.soak():
        # An instrumented build is several times slower: fewer cycles keep
        # the sanitizer soak's run time in bounds and still cross every
        # close path many times.
        CYCLES = SOAK_CYCLES_SANITIZED if os.environ.get("TERN_SANITIZED") else SOAK_CYCLES


if __name__ == "__main__":
    harness.main([("--cycles", {"type": int})], configure)
