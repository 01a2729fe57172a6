#!/usr/bin/env python3
"""Proof from the outside that nsqd's /channel/pause, /channel/unpause and
/channel/empty answer 200 only after the channel WAL record of every
partition the node holds is fdatasync'ed, and for a pause or unpause the
node's pause file written (docs/http-api.md): a SIGKILL right after the
200 must not lose the pause or the emptying.

ternd runs normally with a topic of several partitions; strace then
attaches to every thread of it (`strace -f -p PID`) and records, in the
order they happened, the socket reads and writes, the writes to files and
every fdatasync, with file descriptors named by their paths (-yy). A
client pauses, unpauses and empties channels one after the other on one
keep-alive connection (each request names its own channel, so its records
are told apart by their files). For each request and each partition p the
trace must show, in this order:

  1. the read of the request (found by its path in the bytes);
  2. a write to topics/<t>/<p>/<channel>.wal;
  3. a completed fdatasync of that file;
  4. the write of the answer (HTTP/1.1 200) to the same socket;

and for a pause or unpause, between 1 and 4, the node's pause file
(topics/<t>/<channel>.cpause, docs/storage-format.md "Channel pause")
written: a write of its temporary copy, its fdatasync, then an fsync of
the topic's directory (after the rename).

The order of the lines is the order of the syscalls (strace reports a
syscall's exit before the traced thread runs on; the answer is caused by
the syncs' completions or, on a broken build, by nothing after the read).

/topic/pause and /topic/unpause answer 200 only after the node's pause
file of the topic (topics/<t>/pause, docs/storage-format.md "Topic
pause") is written the same way: its temporary copy written, its
fdatasync, then the directory's fsync. /topic/empty of a paused topic
settles the held messages in every channel (EMPTY records) and rewrites
that file (the new hold points): checked the same way, for the channel's
WAL in each partition and for the pause file.

Skipped (exit 0 with a note) when strace is not installed or cannot
attach (no ptrace permission)."""
import argparse
import base64
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon as daemon_mod  # noqa: E402
from daemon import Daemon  # noqa: E402
from stracelog import FILE_WRITES, answered_after_sync, parse, result  # noqa: E402

PASSWORD = "strace-test-password"
AUTH = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
TOPIC = "pauses"
HELD = "held"  # a paused topic whose held messages /topic/empty settles
PAUSED = "tpaused"  # a topic paused and unpaused
PARTS = 3
OPS = ("pause", "unpause", "empty")


def call(conn, method, path, body=None, headers=None):
    h = {"Authorization": AUTH}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    return r.status, r.read()


def check_pause_file(events, marker, i_read, i_resp, pause):
    """pause: (the pause file's path suffix, its directory's). Between the
    request (event i_read) and its answer (i_resp): a write of the file's
    temporary copy, its fdatasync, then an fsync of the directory (after
    the rename, which is not traced: it names no descriptor). A failure,
    or None."""
    path, tdir = pause
    i_w = next((i for i in range(i_read + 1, i_resp)
                if events[i][0] in FILE_WRITES and events[i][1].endswith(path + ".tmp")
                and (result(events[i][2]) or 0) > 0), None)
    i_s = i_d = None
    if i_w is not None:
        i_s = next((i for i in range(i_w + 1, i_resp)
                    if events[i][0] == "fdatasync" and events[i][1].endswith(path + ".tmp")
                    and result(events[i][2]) == 0), None)
    if i_s is not None:
        i_d = next((i for i in range(i_s + 1, i_resp)
                    if events[i][0] == "fsync" and events[i][1].endswith(tdir)
                    and result(events[i][2]) == 0), None)
    if i_d is None:
        return (f"{marker}: answered (trace event {i_resp}) with no write, fdatasync and "
                f"directory fsync of the node's pause file {path} in between (write at {i_w}, "
                f"fdatasync at {i_s})")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args = ap.parse_args()
    strace = shutil.which("strace")
    if strace is None:
        print("SKIP: strace is not installed (scripts/install-deps.sh installs it)")
        return 0
    daemon_mod.TERND = os.path.abspath(args.ternd)
    tmp = tempfile.mkdtemp(prefix="tern-pause-strace-")
    trace = os.path.join(tmp, "trace")
    data = os.path.join(tmp, "data")
    d = Daemon(data, env=dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD))
    st = None
    try:
        d.wait_for("ready")
        d.wait_for("root user admin created")
        conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
        status, body = call(conn, "POST", "/v1/topics",
                            json.dumps({"name": TOPIC, "partitions": PARTS}).encode(),
                            {"Content-Type": "application/json"})
        assert status == 201, (status, body)
        channels = []
        for op in OPS:
            for k in range(2):
                ch = f"{op}{k}"
                channels.append((op, ch))
                status, body = call(conn, "POST", f"/channel/create?topic={TOPIC}&channel={ch}")
                assert status == 200, (status, body)
        for i in range(6):
            status, body = call(conn, "POST", f"/pub?topic={TOPIC}", b"m%d" % i)
            assert status == 200, (status, body)
        status, body = call(conn, "POST", "/v1/topics",
                            json.dumps({"name": HELD, "partitions": PARTS}).encode(),
                            {"Content-Type": "application/json"})
        assert status == 201, (status, body)
        status, body = call(conn, "POST", f"/channel/create?topic={HELD}&channel=c")
        assert status == 200, (status, body)
        status, body = call(conn, "POST", f"/topic/pause?topic={HELD}")
        assert status == 200, (status, body)
        for p in range(PARTS):
            status, body = call(conn, "POST", f"/v1/topics/{HELD}/produce?partition={p}", b"h",
                                {"Content-Type": "application/octet-stream"})
            assert status == 202, (status, body)
        status, body = call(conn, "POST", "/v1/topics",
                            json.dumps({"name": PAUSED, "partitions": PARTS}).encode(),
                            {"Content-Type": "application/json"})
        assert status == 201, (status, body)
        # The partitions this node holds: one WAL file per channel in each.
        tdir = os.path.join(data, "topics", TOPIC)
        parts = sorted(p for p in os.listdir(tdir) if p.isdigit()
                       and os.path.exists(os.path.join(tdir, p, f"{channels[0][1]}.wal")))
        assert len(parts) == PARTS, (parts, os.listdir(tdir))

        st = subprocess.Popen([strace, "-f", "-p", str(d.proc.pid), "-o", trace, "-yy",
                               "-s", "512", "-e",
                               "trace=fdatasync,fsync,read,readv,recvfrom,recvmsg,write,writev,"
                               "sendto,sendmsg,pwrite64,pwritev,pwritev2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # strace says "Process N attached" per thread, or "Process N attached
        # with T threads" once.
        threads = len(os.listdir(f"/proc/{d.proc.pid}/task"))
        attached = 0
        errs = []
        deadline = time.monotonic() + 30
        while attached < threads and time.monotonic() < deadline:
            line = st.stderr.readline()
            if not line:
                break
            errs.append(line)
            m = re.search(r"attached with (\d+) threads", line)
            if m is not None:
                attached += int(m.group(1))  # strace 5 and later: one line for all
            elif "attached" in line:
                attached += 1
        if attached == 0:
            print("SKIP: strace could not attach:\n" + "".join(errs))
            return 0
        assert attached >= threads, f"strace attached to {attached} of {threads} threads"

        reqs = []
        for op, ch in channels:
            if op == "unpause":
                # An unpause of a paused channel: its own record, after the pause's.
                status, body = call(conn, "POST", f"/channel/pause?topic={TOPIC}&channel={ch}")
                assert status == 200, (status, body)
            path = f"/channel/{op}?topic={TOPIC}&channel={ch}"
            status, body = call(conn, "POST", path)
            assert status == 200, (status, body)
            pause = None
            if op != "empty":
                pause = (f"/topics/{TOPIC}/{ch}.cpause", f"/topics/{TOPIC}")
            extra = None
            if pause is not None:
                def extra(events, i_read, i_resp, marker=path, pause=pause):
                    return check_pause_file(events, marker, i_read, i_resp, pause)
            reqs.append((path + " ", [f"/topics/{TOPIC}/{p}/{ch}.wal" for p in parts],
                         "HTTP/1.1 200", extra))
        def topic_pause_file(topic, marker):
            pause = (f"/topics/{topic}/pause", f"/topics/{topic}")

            def extra(events, i_read, i_resp):
                return check_pause_file(events, marker, i_read, i_resp, pause)
            return extra

        for op in ("pause", "unpause"):
            path = f"/topic/{op}?topic={PAUSED}"
            status, body = call(conn, "POST", path)
            assert status == 200, (status, body)
            reqs.append((path + " ", [], "HTTP/1.1 200", topic_pause_file(PAUSED, path)))
        path = f"/topic/empty?topic={HELD}"
        status, body = call(conn, "POST", path)
        assert status == 200, (status, body)
        reqs.append((path + " ", [f"/topics/{HELD}/{p}/c.wal" for p in parts], "HTTP/1.1 200",
                     topic_pause_file(HELD, path)))
        # The client may read the last answer before strace has recorded
        # the end of its write; the loop thread's next syscalls (this
        # request's read) come only after it.
        status, body = call(conn, "GET", "/ping")
        assert status == 200, (status, body)
        conn.close()

        # SIGINT: strace detaches (ternd runs on) and flushes the trace.
        st.send_signal(signal.SIGINT)
        st.communicate(timeout=60)
        st = None
        events = parse(trace)
        syncs = sum(1 for e in events if e[0] == "fdatasync" and e[1].endswith(".wal"))
        if syncs == 0:
            with open(trace, errors="replace") as f:
                head = f.readlines()[:60]
            raise AssertionError(f"no fdatasync of a channel WAL in the trace ({len(events)} "
                                 "events); it begins:\n" + "".join(head))
        failures = answered_after_sync(events, reqs)
        if failures:
            print("FAIL: answers written before their WAL records were synced:")
            for f in failures:
                print("  " + f)
            return 1
        print(f"ok: {len(reqs)} pauses, unpauses and emptyings (a topic's pause and unpause, "
              f"one emptying of a paused topic), each answered after a write and an fdatasync "
              f"of the channel's WAL in each of {len(parts)} partitions "
              f"and, for a pause or unpause, of the node's pause file and its directory "
              f"({syncs} syncs, {len(events)} traced syscalls)")
        rc = d.stop()
        assert rc == 0, f"ternd exited {rc}:\n{d.log()}"
        return 0
    finally:
        if st is not None and st.poll() is None:
            st.send_signal(signal.SIGINT)
            try:
                st.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                st.kill()
                st.communicate()
        if d.proc.poll() is None:
            d.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
