#!/usr/bin/env python3
"""Crash test through the native /v1 API: producers produce (single and
batches) and track every 202, a consumer consumes and acks, and the
daemon is SIGKILLed at random moments and restarted on the same data
directory, many times. Afterwards a consumer drains the channel. Checks:

- missing = 0: every message acknowledged with 202 is consumed (before a
  kill, or in the final drain);
- a message acked (204) well before a kill (500 ms: the channel log
  commits within milliseconds) is never delivered again.

TERN_V1_CRASH_KILLS sets the number of kills (default 15)."""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

import crashutil
from crashutil import PASSWORD, call, wait_ready

TOPIC = "crash"
DURABLE_ACK_S = 0.5


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = set()
        self.acks = []  # (body, time)
        self.received = []  # (body, time)


def start(ternd, data):
    return crashutil.start_ternd(ternd, data, "HTTP listening on port ", "metastore ready",
                                 env={"TERN_ADMIN_PASSWORD": PASSWORD})


def producer(port, pid, st, stop, counter):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        while not stop.is_set():
            # Every body is produced once: one cut off by a kill is not retried.
            seq = counter[pid]
            counter[pid] += 1
            if seq % 4 == 3:
                bodies = [f"p{pid}-{seq}-{k}" for k in range(5)]
                status, _ = call(c, "POST", f"/v1/topics/{TOPIC}/produce/batch",
                                 json.dumps([{"payload": b} for b in bodies]).encode())
            else:
                bodies = [f"p{pid}-{seq}"]
                status, _ = call(c, "POST", f"/v1/topics/{TOPIC}/produce", bodies[0].encode())
            if status != 202:
                raise AssertionError(f"produce answered {status}")
            with st.lock:
                st.acked.update(bodies)
    except (OSError, http.client.HTTPException):
        pass  # the daemon was killed


def consumer(port, st, stop):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        while not stop.is_set():
            status, data = call(c, "GET", f"/v1/topics/{TOPIC}/consume?max=20&wait=1s")
            if status == 204:
                continue
            if status != 200:
                raise AssertionError(f"consume answered {status}")
            msgs = json.loads(data)["messages"]
            now = time.monotonic()
            with st.lock:
                st.received.extend((m["payload"], now) for m in msgs)
            handles = json.dumps([m["receipt_handle"] for m in msgs]).encode()
            status, data = call(c, "POST", f"/v1/topics/{TOPIC}/ack/batch", handles)
            if status != 200:
                raise AssertionError(f"ack answered {status}")
            now = time.monotonic()
            results = json.loads(data)["results"]
            with st.lock:
                for m, r in zip(msgs, results):
                    if r["status"] == 204:
                        st.acks.append((m["payload"], now))
    except (OSError, http.client.HTTPException):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args = ap.parse_args()
    kills = int(os.environ.get("TERN_V1_CRASH_KILLS", "15"))
    rnd = random.Random(int(os.environ.get("TERN_CRASH_SEED", str(int(time.time())))))
    work = tempfile.mkdtemp(prefix="tern-v1-crash-")
    data = os.path.join(work, "data")
    st = State()
    counters = [0] * 3
    kill_times = []
    try:
        for k in range(kills):
            p, port = start(args.ternd, data)
            wait_ready(port)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            status, _ = call(c, "POST", "/v1/topics",
                             json.dumps({"name": TOPIC, "partitions": 2}).encode())
            c.close()
            if status not in (201, 409):
                raise AssertionError(f"creating the topic answered {status}")
            stop = threading.Event()
            threads = [threading.Thread(target=producer, args=(port, i, st, stop, counters))
                       for i in range(3)]
            threads.append(threading.Thread(target=consumer, args=(port, st, stop)))
            for t in threads:
                t.start()
            time.sleep(rnd.uniform(0.3, 1.2))
            kill_times.append(time.monotonic())
            p.send_signal(signal.SIGKILL)
            p.wait()
            stop.set()
            for t in threads:
                t.join(timeout=10)
        # Final drain: leases of the killed runs are gone with the process.
        p, port = start(args.ternd, data)
        wait_ready(port)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        drained = []
        while True:
            status, body = call(c, "GET", f"/v1/topics/{TOPIC}/consume?max=100&wait=2s")
            if status == 204:
                break
            msgs = json.loads(body)["messages"]
            drained.extend(m["payload"] for m in msgs)
            call(c, "POST", f"/v1/topics/{TOPIC}/ack/batch",
                 json.dumps([m["receipt_handle"] for m in msgs]).encode())
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        got = {b for b, _ in st.received} | set(drained)
        missing = st.acked - got
        # Acked well before a kill, yet delivered again later.
        redelivered = 0
        seen_after = {}
        for body, t in st.received:
            seen_after.setdefault(body, []).append(t)
        drained_set = set(drained)
        for body, t in st.acks:
            nxt = [k for k in kill_times if k > t]
            if not nxt or nxt[0] - t < DURABLE_ACK_S:
                continue
            later = [x for x in seen_after.get(body, []) if x > nxt[0]]
            if later or body in drained_set:
                redelivered += 1
        print(f"kills {kills}, acked {len(st.acked)}, received {len(got)}, "
              f"missing {len(missing)}, acked-then-redelivered {redelivered}")
        if missing:
            print("missing (first 10):", sorted(missing)[:10])
            return 1
        if len(st.acked) == 0:
            print("nothing was produced: the test did not run")
            return 1
        return 1 if redelivered else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
