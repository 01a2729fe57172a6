#!/usr/bin/env python3
"""Crash test through the NSQ protocol: producers publish (PUB and MPUB)
and track every OK, a consumer FINs what it receives, and the daemon is
SIGKILLed at random moments and restarted on the same data directory, many
times. Afterwards a consumer drains the channel. Checks:

- missing = 0: every message acknowledged with OK is delivered (before a
  kill, or in the final drain);
- a FIN sent well before a kill (500 ms: the channel log commits within
  milliseconds) is never followed by a redelivery of that message.

TERN_NSQ_CRASH_KILLS sets the number of kills (default 25)."""
import argparse
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import crashutil  # noqa: E402
import nsqwire  # noqa: E402
from nsqwire import FRAME_RESPONSE, Conn  # noqa: E402

TOPIC = "crash"
CHANNEL = "ch"
DURABLE_FIN_S = 0.5


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = set()
        self.fins = []  # (body, time, round)
        self.received = []  # (body, time)
        self.round = 0
        self.ids = []


def start(ternd, data):
    return crashutil.start_ternd(ternd, data, "NSQ TCP listening on port ", " ready:")


def producer(port, pid, st, stop, counter):
    try:
        c = Conn(port, timeout=5)
        c.identify()
        while not stop.is_set():
            # Every body is published once: a publish cut off by a kill is
            # not retried (its record may exist without an OK).
            seq = counter[pid]
            counter[pid] += 1
            if seq % 5 == 4:
                bodies = [f"p{pid}-{seq}-{k}".encode() for k in range(8)]
                kind, data = c.mpub(TOPIC, bodies)
            else:
                bodies = [f"p{pid}-{seq}".encode()]
                kind, data = c.pub(TOPIC, bodies[0])
            if (kind, data) != (FRAME_RESPONSE, b"OK"):
                raise AssertionError(f"publish answered {kind} {data!r}")
            with st.lock:
                st.acked.update(bodies)
    except (OSError, nsqwire.Closed, socket.timeout):
        pass  # the daemon was killed


def consumer(port, st, stop):
    try:
        c = Conn(port, timeout=5)
        c.identify(heartbeat_interval=5000)
        c.sub(TOPIC, CHANNEL)
        c.rdy(50)
        while not stop.is_set():
            m = c.read_message()
            now = time.monotonic()
            with st.lock:
                st.received.append((m.body, now))
                st.ids.append((m.body, m.id, m.attempts))
            c.fin(m.id)
            with st.lock:
                st.fins.append((m.body, time.monotonic(), st.round))
    except (OSError, nsqwire.Closed, socket.timeout, AssertionError):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args = ap.parse_args()
    kills = int(os.environ.get("TERN_NSQ_CRASH_KILLS", "25"))
    rnd = random.Random(int(os.environ.get("TERN_CRASH_SEED", str(int(time.time())))))
    work = tempfile.mkdtemp(prefix="tern-nsq-crash-")
    data = os.path.join(work, "data")
    st = State()
    counters = [0] * 4
    kill_times = []
    try:
        for k in range(kills):
            st.round = k
            p, port = start(args.ternd, data)
            stop = threading.Event()
            threads = [threading.Thread(target=producer, args=(port, i, st, stop, counters))
                       for i in range(4)]
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
        # Final drain.
        p, port = start(args.ternd, data)
        c = Conn(port, timeout=10)
        c.identify()
        c.sub(TOPIC, CHANNEL)
        c.rdy(500)
        drained = []
        c.sock.settimeout(3)
        try:
            while True:
                m = c.read_message()
                drained.append(m.body)
                c.fin(m.id)
        except socket.timeout:
            pass
        c.close()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        seen = {b for b, _ in st.received} | set(drained)
        missing = st.acked - seen
        # A FIN sent DURABLE_FIN_S before the kill that ended its round is
        # durable: the message must never be delivered again.
        durable = {}
        for body, t, rnd_no in st.fins:
            if t < kill_times[rnd_no] - DURABLE_FIN_S and body not in durable:
                durable[body] = t
        redelivered = [b for b, t in st.received if b in durable and t > durable[b]]
        redelivered += [b for b in drained if b in durable]
        print(f"kills={kills} acked={len(st.acked)} delivered={len(seen)} "
              f"drained={len(drained)} missing={len(missing)} durable_fins={len(durable)} "
              f"redelivered_after_durable_fin={len(redelivered)} exit={rc}")
        if missing:
            print("missing (first 10):", sorted(missing)[:10])
            return 1
        if redelivered:
            print("redelivered after a durable FIN (first 10):", redelivered[:10])
            for b in redelivered[:5]:
                fins = [(round(t - kill_times[r], 3), r) for bb, t, r in st.fins if bb == b]
                recv = [round(t - kill_times[0], 3) for bb, t in st.received if bb == b]
                print(f"  {b!r}: FINs (s before its round's kill, round) {fins}; "
                      f"received at {recv}; in drain: {b in drained}; "
                      f"ids {[(i, a) for bb, i, a in st.ids if bb == b]}")
            return 1
        if rc != 0:
            print("ternd did not exit cleanly")
            return 1
        if len(st.acked) == 0 or len(durable) == 0:
            print("the test made no progress")
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
