#!/usr/bin/env python3
"""SIGKILL crash test of the storage engine.

For each durability mode, a driver process appends and acknowledges
records (and FINs some) into one data directory; it is killed with SIGKILL
at a random moment, again and again, each run recovering what the previous
one left. The driver logs every acknowledgement to a ledger as it happens;
`verify` then recovers the directory and checks the ledger: in durable mode
no acknowledged record may be missing, and in every mode nothing corrupt
may be read and no acknowledged FIN may be lost.
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


def run_mode(driver, mode, kills, rng):
    root = tempfile.mkdtemp(prefix="tern-crash-")
    data = os.path.join(root, "data")
    ledger = os.path.join(root, "ledger")
    try:
        with open(ledger, "ab") as out:
            for i in range(kills):
                proc = subprocess.Popen(
                    [driver, "run", data, mode, str(i * 10_000_000)],
                    stdout=out, stderr=subprocess.PIPE)
                time.sleep(rng.uniform(0.02, 0.25))
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace")
                    print(f"FAIL {mode}: driver exited early ({proc.returncode}): {err}")
                    return False
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stderr.close()
                drop_cut_line(ledger)
                if (i + 1) % 50 == 0 or i + 1 == kills:
                    if not verify(driver, data, mode, ledger, f"after {i + 1} kills"):
                        return False
        return True
    finally:
        shutil.rmtree(root, ignore_errors=True)


def drop_cut_line(ledger):
    """A kill can cut the ledger line being written (a write that crosses
    a page boundary of the file stops between pages). The next run would
    append to it and the merged line would read as a wrong record id, so
    the cut line goes: its record was acknowledged, but only its check is
    lost."""
    with open(ledger, "r+b") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return
        back = min(size, 4096)
        f.seek(size - back)
        tail = f.read(back)
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        f.truncate(size - back + cut + 1 if cut >= 0 else size - back)


def verify(driver, data, mode, ledger, when):
    res = subprocess.run([driver, "verify", data, mode, ledger],
                         capture_output=True, text=True, timeout=600)
    summary = res.stdout.strip()
    print(f"{mode} {when}: {summary}")
    if res.returncode != 0:
        print(f"FAIL {mode}: {res.stderr.strip()[-2000:]}")
        return False
    counts = dict(kv.split("=") for kv in summary.split())
    if int(counts["records"]) == 0:
        print(f"FAIL {mode}: nothing was acknowledged")
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--kills", type=int,
                    default=int(os.environ.get("TERN_CRASH_KILLS", "200")))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}")
    plan = [("durable", args.kills), ("write_ack", max(1, args.kills // 4)),
            ("relaxed", max(1, args.kills // 4))]
    passed = failed = 0
    for mode, kills in plan:
        if run_mode(args.driver, mode, kills, rng):
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
