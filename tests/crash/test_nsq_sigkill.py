#!/usr/bin/env python3
"""Crash test through the NSQ protocol: producers publish (PUB and MPUB)
and track every OK, a consumer FINs what it receives, and the daemon is
SIGKILLed at random moments and restarted on the same data directory, many
times. Afterwards a consumer drains the channel. Checks:

- missing = 0: every message acknowledged with OK is delivered (before a
  kill, or in the final drain);
- a FIN the daemon has committed before a kill is never followed by a
  redelivery of that message.

An NSQ FIN has no answer, so how long after sending it the daemon reads
and commits it says nothing (on a loaded machine the daemon may not run
for a second; a FIN it had not committed is rightly delivered again). What
the daemon does report is how many channel-log records it has committed:
the count of tern_channel_log_duration_seconds in /metrics (a record
counts there once its fdatasync is done). In this test every record is a
FIN of the one consumer, read off its one connection, logged and completed
in that order, so a count of n in a round means its first n FINs are
committed; a scraper thread reads the count all through each round. The
final drain checks that premise: its count must equal its FINs.

TERN_NSQ_CRASH_KILLS sets the number of kills (default 25)."""
import argparse
import base64
import http.client
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
PASSWORD = "crash-test-password"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
COMMITTED = "tern_channel_log_duration_seconds_count "


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = set()
        self.fins = []  # (body, time, round, n: the FIN's place in its round)
        self.received = []  # (body, time)
        self.round = 0
        self.ids = []
        self.committed = []  # per round: the largest committed count read
        self.errors = []  # error frames the consumer got


def start(ternd, data):
    """(process, NSQ TCP port, HTTP port)"""
    return crashutil.start_ternd(ternd, data, "NSQ TCP listening on port ", " ready:",
                                 env={"TERN_ADMIN_PASSWORD": PASSWORD}, http_port=True)


def committed_count(conn):
    """The channel-log records the daemon has committed since it started;
    None while the admin user is not made yet (just after the first start)
    or the metastore replica is still replaying its log after a restart
    (503 "control plane not caught up" with Retry-After, docs/http-api.md:
    longer on a loaded machine)."""
    conn.request("GET", "/metrics", headers=AUTH)
    r = conn.getresponse()
    body = r.read().decode()
    if r.status == 401:
        return None
    if r.status == 503 and r.getheader("Retry-After") is not None and \
            '"control plane not caught up"' in body:
        return None
    if r.status != 200:
        raise AssertionError(f"/metrics answered {r.status}: {body[:200]}")
    for line in body.splitlines():
        if line.startswith(COMMITTED):
            return int(line[len(COMMITTED):])
    raise AssertionError("/metrics has no " + COMMITTED.strip())


def scraper(http_port, st, rnd_no, stop):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
        while not stop.is_set():
            n = committed_count(conn)
            with st.lock:
                st.committed[rnd_no] = max(st.committed[rnd_no], n or 0)
            time.sleep(0.02)
    except (OSError, http.client.HTTPException):
        pass  # the daemon was killed
    except AssertionError as e:
        with st.lock:
            st.errors.append((rnd_no, "metrics", str(e)))


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


def consumer(port, st, rnd_no, stop):
    n = 0
    try:
        c = Conn(port, timeout=5)
        c.identify(heartbeat_interval=5000)
        c.sub(TOPIC, CHANNEL)
        c.rdy(50)
        while not stop.is_set():
            kind, data = c.read_frame()
            if kind != nsqwire.FRAME_MESSAGE:
                # A failed FIN would break the count's premise (and no
                # FIN here can fail: each is for a message in flight).
                with st.lock:
                    st.errors.append((rnd_no, kind, data[:200]))
                return
            m = nsqwire.Message(data)
            now = time.monotonic()
            with st.lock:
                st.received.append((m.body, now))
                st.ids.append((m.body, m.id, m.attempts))
            c.fin(m.id)
            n += 1
            with st.lock:
                st.fins.append((m.body, time.monotonic(), rnd_no, n))
    except (OSError, nsqwire.Closed, socket.timeout):
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
            st.committed.append(0)
            p, port, http_port = start(args.ternd, data)
            stop = threading.Event()
            threads = [threading.Thread(target=producer, args=(port, i, st, stop, counters))
                       for i in range(4)]
            threads.append(threading.Thread(target=consumer, args=(port, st, k, stop)))
            threads.append(threading.Thread(target=scraper, args=(http_port, st, k, stop)))
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
        p, port, http_port = start(args.ternd, data)
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
        # The premise of the count: every record is a FIN of the consumer.
        # The drain's FINs were all read before the 3 s of silence ended;
        # their commits complete within the commit delay.
        hc = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
        deadline = time.monotonic() + 30
        drain_committed = committed_count(hc) or 0
        while drain_committed < len(drained) and time.monotonic() < deadline:
            time.sleep(0.05)
            drain_committed = committed_count(hc) or 0
        hc.close()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        seen = {b for b, _ in st.received} | set(drained)
        missing = st.acked - seen
        # A FIN among the first committed[round] of its round was committed
        # before the kill: the message must never be delivered again.
        durable = {}
        for body, t, rnd_no, n in st.fins:
            if n <= st.committed[rnd_no] and body not in durable:
                durable[body] = t
        redelivered = [b for b, t in st.received if b in durable and t > durable[b]]
        redelivered += [b for b in drained if b in durable]
        print(f"kills={kills} acked={len(st.acked)} delivered={len(seen)} "
              f"drained={len(drained)} missing={len(missing)} durable_fins={len(durable)} "
              f"redelivered_after_committed_fin={len(redelivered)} "
              f"drain_fins={len(drained)} drain_committed={drain_committed} exit={rc}")
        if st.errors:
            print("errors (round, frame type or what, data):", st.errors[:10])
            return 1
        if drain_committed != len(drained):
            print(f"the drain's {len(drained)} FINs made {drain_committed} committed records "
                  "(fewer: FINs were not logged; more: records other than this consumer's "
                  "FINs were, and the count cannot stand for its FINs)")
            return 1
        if missing:
            print("missing (first 10):", sorted(missing)[:10])
            return 1
        if redelivered:
            print("redelivered after a committed FIN (first 10):", redelivered[:10])
            for b in redelivered[:5]:
                fins = [(round(t - kill_times[r], 3), r, n, st.committed[r])
                        for bb, t, r, n in st.fins if bb == b]
                recv = [round(t - kill_times[0], 3) for bb, t in st.received if bb == b]
                print(f"  {b!r}: FINs (s to its round's kill, round, place in round, "
                      f"round's committed count) {fins}; "
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
