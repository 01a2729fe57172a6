#!/usr/bin/env python3
"""tern-storage-bench, briefly: it runs every configuration on a temporary
directory, reports a row for each with figures that parse, and cleans up
after itself. (The figures themselves are for docs/performance.md; no
speed is asserted here.)"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BENCH = None


class StorageBench(unittest.TestCase):
    def test_every_configuration_reports(self):
        top = tempfile.mkdtemp(prefix="tern-sbench-")
        try:
            data = os.path.join(top, "data")
            r = subprocess.run([BENCH, "--dir", data, "--seconds", "0.2"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertRegex(r.stdout, r"raw write 4 KiB \+ fdatasync: \d+/s")
            rows = re.findall(r"^\| (\d+) \| (\d+) B \| (\d+) \| ([\d.]+) \| ([\d.]+) \| (\d+) "
                              r"\| (\d+) us \| (\d+) us \|$", r.stdout, re.M)
            self.assertEqual([(a, b) for a, b, *_ in rows],
                             [("1", "200"), ("16", "200"), ("64", "200"),
                              ("1", "4096"), ("16", "4096"), ("64", "4096")], r.stdout)
            for row in rows:
                self.assertGreater(int(row[2]), 0, row)  # records/s
                self.assertLessEqual(int(row[6]), int(row[7]), row)  # p50 <= p99
            self.assertRegex(r.stdout, r"64 appenders x 200 B: [\d.]+x the raw fdatasync rate")
            self.assertFalse(os.path.exists(data), "the bench left its data behind")
        finally:
            shutil.rmtree(top, ignore_errors=True)

    def test_bad_arguments(self):
        r = subprocess.run([BENCH, "--frobnicate"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage:", r.stderr)


def main():
    global BENCH
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    args, rest = ap.parse_known_args()
    BENCH = os.path.abspath(args.bench)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
