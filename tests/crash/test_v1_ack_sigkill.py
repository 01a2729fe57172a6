#!/usr/bin/env python3
"""Crash test of the /v1 ack promise on one node: an ack answered 204 is
durable (docs/http-api.md, ack), so SIGKILL right after a burst of 204s
loses none of them.

Each round: ternd starts on the same data directory, a backlog is
produced (batch produce, 202 = durable), and consumers take messages and
ack them one handle per request, several connections at once, so the
channel's group commit always has acks in flight. As soon as the test has
seen BURST acks answered 204 in the round, it SIGKILLs ternd (while other
acks are still being written). After ROUNDS rounds a last start drains
the channel. Checks:

- no message whose ack answered 204 is delivered again (in a later round
  or in the drain): the answer left only after its WAL record's
  fdatasync;
- missing = 0: every produced message was acked or is drained (an ack
  the kill cut off before its answer may have been applied or not).

The load is bounded (a few seconds a round). TERN_ACK_CRASH_ROUNDS sets
the number of rounds (default 3)."""
import argparse
import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import crashutil
from crashutil import PASSWORD, call, wait_ready

TOPIC = "acks"
BACKLOG = 1500  # messages produced per round
BURST = 400  # acks answered 204 in a round before the kill
CONSUMERS = 6


class Round:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = []  # bodies whose ack answered 204
        self.delivered = []  # bodies consumed
        self.unanswered = []  # bodies whose ack the kill cut off: done or not
        self.burst = threading.Event()
        self.errors = []


def consumer(port, rd, stop):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while not stop.is_set():
            status, data = call(c, "GET", f"/v1/topics/{TOPIC}/consume?max=10&wait=1s")
            if status == 204:
                continue
            if status != 200:
                raise AssertionError(f"consume answered {status}: {data!r}")
            msgs = json.loads(data)["messages"]
            with rd.lock:
                rd.delivered.extend(m["payload"] for m in msgs)
            for m in msgs:
                try:
                    status, data = call(
                        c, "POST", f"/v1/topics/{TOPIC}/ack?receipt_handle={m['receipt_handle']}")
                except (OSError, http.client.HTTPException):
                    with rd.lock:
                        rd.unanswered.append(m["payload"])
                    raise
                if status != 204:
                    raise AssertionError(f"ack answered {status}: {data!r}")
                with rd.lock:
                    rd.acked.append(m["payload"])
                    if len(rd.acked) >= BURST:
                        rd.burst.set()
    except (OSError, http.client.HTTPException):
        pass  # the daemon was killed
    except AssertionError as e:
        rd.errors.append(str(e))
        rd.burst.set()


def produce(port, start, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for k in range(start, start + n, 100):
        bodies = [f"m{i}" for i in range(k, min(k + 100, start + n))]
        status, data = call(c, "POST", f"/v1/topics/{TOPIC}/produce/batch",
                            json.dumps([{"payload": b} for b in bodies]).encode())
        if status != 202:
            raise AssertionError(f"produce answered {status}: {data!r}")
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args = ap.parse_args()
    rounds = int(os.environ.get("TERN_ACK_CRASH_ROUNDS", "3"))
    work = tempfile.mkdtemp(prefix="tern-ack-crash-")
    data = os.path.join(work, "data")
    produced = set()
    acked = {}  # body -> round its ack answered 204 in
    unanswered = set()
    later = []  # (body, round) deliveries
    p = None
    try:
        for r in range(rounds):
            p, port = crashutil.start_ternd(args.ternd, data, "HTTP listening on port ",
                                            "metastore ready",
                                            env={"TERN_ADMIN_PASSWORD": PASSWORD})
            wait_ready(port)
            if r == 0:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                status, body = call(c, "POST", "/v1/topics",
                                    json.dumps({"name": TOPIC, "partitions": 2}).encode())
                c.close()
                if status != 201:
                    raise AssertionError(f"creating the topic answered {status}: {body!r}")
            produce(port, r * BACKLOG, BACKLOG)
            produced.update(f"m{i}" for i in range(r * BACKLOG, (r + 1) * BACKLOG))
            rd = Round()
            stop = threading.Event()
            threads = [threading.Thread(target=consumer, args=(port, rd, stop))
                       for _ in range(CONSUMERS)]
            for t in threads:
                t.start()
            if not rd.burst.wait(timeout=120):
                raise AssertionError(f"round {r}: only {len(rd.acked)} acks in 120 s")
            p.send_signal(signal.SIGKILL)
            p.wait()
            p = None
            stop.set()
            for t in threads:
                t.join(timeout=30)
            if rd.errors:
                raise AssertionError(f"round {r}: {rd.errors[0]}")
            with rd.lock:
                later.extend((b, r) for b in rd.delivered)
                unanswered.update(rd.unanswered)
                for b in rd.acked:
                    acked.setdefault(b, r)
            print(f"round {r}: {len(rd.acked)} acks answered 204, then SIGKILL")
        # The drain: everything not acked comes back once the leases of the
        # killed runs are gone with their process.
        p, port = crashutil.start_ternd(args.ternd, data, "HTTP listening on port ",
                                        "metastore ready", env={"TERN_ADMIN_PASSWORD": PASSWORD})
        wait_ready(port)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        drained = set()
        while True:
            status, body = call(c, "GET", f"/v1/topics/{TOPIC}/consume?max=100&wait=2s")
            if status == 204:
                break
            if status != 200:
                raise AssertionError(f"drain consume answered {status}: {body!r}")
            msgs = json.loads(body)["messages"]
            later.extend((m["payload"], rounds) for m in msgs)
            drained.update(m["payload"] for m in msgs)
            status, body = call(c, "POST", f"/v1/topics/{TOPIC}/ack/batch",
                                json.dumps([m["receipt_handle"] for m in msgs]).encode())
            if status != 200:
                raise AssertionError(f"drain ack answered {status}: {body!r}")
        c.close()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        p = None
        again = sorted({b for b, r in later if b in acked and r > acked[b]})
        missing = produced - set(acked) - drained - unanswered
        print(f"rounds {rounds}, produced {len(produced)}, acked {len(acked)}, "
              f"drained {len(drained)}, acked-then-delivered-again {len(again)}, "
              f"missing {len(missing)}")
        if again:
            print("acked (204) yet delivered again after the kill (first 10):", again[:10])
            return 1
        if missing:
            print("missing (first 10):", sorted(missing)[:10])
            return 1
        return 0
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
