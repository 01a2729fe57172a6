#!/usr/bin/env python3
"""SIGKILL crash test of the ingress log.

A driver process appends and acknowledges records into the ingress log of
one data directory from 16 concurrent appenders, checkpointing part of
what is durable now and then (so segments rotate and are compacted away);
it is killed with SIGKILL at a random moment, again and again, each run
recovering what the previous one left. The driver logs every
acknowledgement to a ledger as it happens; `verify` then recovers the
directory and checks it: every acknowledged record present and intact
(unless below the checkpoint), seqs dense from the oldest stored to the
next, nothing after a hole, the checkpoint never behind one acknowledged.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_storage_sigkill import drop_cut_line  # noqa: E402


def verify(driver, data, ledger, when):
    res = subprocess.run([driver, "verify", data, ledger],
                         capture_output=True, text=True, timeout=600)
    summary = res.stdout.strip()
    print(f"ingress {when}: {summary}")
    if res.returncode != 0:
        print(f"FAIL: {res.stderr.strip()[-2000:]}")
        return False
    counts = dict(kv.split("=") for kv in summary.split())
    if int(counts["records"]) == 0:
        print("FAIL: nothing was acknowledged")
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--kills", type=int,
                    default=int(os.environ.get("TERN_CRASH_KILLS", "100")))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}")
    root = tempfile.mkdtemp(prefix="tern-crash-ilog-")
    data = os.path.join(root, "data")
    ledger = os.path.join(root, "ledger")
    try:
        with open(ledger, "ab") as out:
            for i in range(args.kills):
                proc = subprocess.Popen([args.driver, "run", data, str(i * 10_000_000)],
                                        stdout=out, stderr=subprocess.PIPE)
                time.sleep(rng.uniform(0.02, 0.25))
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace")
                    print(f"FAIL: driver exited early ({proc.returncode}): {err}")
                    return 1
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stderr.close()
                drop_cut_line(ledger)
                if (i + 1) % 25 == 0 or i + 1 == args.kills:
                    if not verify(args.driver, data, ledger, f"after {i + 1} kills"):
                        return 1
        print("1 passed, 0 failed")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
