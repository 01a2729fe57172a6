#!/usr/bin/env python3
"""Proof from the outside that a /v1 ack's 204 leaves only after the
channel WAL record covering it is fdatasync'ed (docs/http-api.md, ack).

ternd runs normally; strace then attaches to every thread of it
(`strace -f -p PID`) and records, in the order they happened, the socket
reads and writes, the writes to files and every fdatasync, with file
descriptors named by their paths (-yy). A client sends acks and nacks one
after the other on one keep-alive connection (the next only after the
previous answer), single and batched. For each of them the trace must
show, in this order:

  1. the read of its request (found by its receipt handles in the bytes);
  2. a write to the channel's WAL file (topics/<t>/<p>/<channel>.wal);
  3. a completed fdatasync of that WAL file;
  4. the write of its answer (HTTP/1.1 204, or 200 for a batch) to the
     same socket.

The order of the lines is the order of the syscalls that matter here:
strace reports a syscall's exit before the traced thread runs on, and the
answer is caused by the sync's completion (another thread) or, on a broken
build, by nothing after the read. A 204 written before a WAL write and a
sync that both follow its request fails the test: the answer went before
anything that could have made it durable, as it did before acks waited for
the channel log (a previous ack's sync landing in between cannot pass for
this one's, since this one's record is written only after its read).

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
from stracelog import answered_after_sync, parse  # noqa: E402

PASSWORD = "strace-test-password"
AUTH = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
HDRS = {"Authorization": AUTH, "X-Tern-Client": "strace-test"}
TOPIC = "acks"
N = 24  # messages: 12 single acks, 2 batches of 4 acks, 4 single nacks


def call(conn, method, path, body=None, headers=None):
    h = dict(HDRS)
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    return r.status, r.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args = ap.parse_args()
    strace = shutil.which("strace")
    if strace is None:
        print("SKIP: strace is not installed (scripts/install-deps.sh installs it)")
        return 0
    daemon_mod.TERND = os.path.abspath(args.ternd)
    tmp = tempfile.mkdtemp(prefix="tern-ack-strace-")
    trace = os.path.join(tmp, "trace")
    d = Daemon(os.path.join(tmp, "data"), env=dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD))
    st = None
    try:
        d.wait_for("ready")
        d.wait_for("root user admin created")
        conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
        status, body = call(conn, "POST", "/v1/topics",
                            json.dumps({"name": TOPIC, "partitions": 1}).encode(),
                            {"Content-Type": "application/json"})
        assert status == 201, (status, body)
        for i in range(N):
            status, body = call(conn, "POST", f"/v1/topics/{TOPIC}/produce", b"m%d" % i)
            assert status == 202, (status, body)
        handles = []
        while len(handles) < N:
            status, body = call(conn, "GET", f"/v1/topics/{TOPIC}/consume?max=100&wait=2s")
            assert status == 200, (status, body)
            handles += [m["receipt_handle"] for m in json.loads(body)["messages"]]
        assert len(handles) == N, handles

        st = subprocess.Popen([strace, "-f", "-p", str(d.proc.pid), "-o", trace, "-yy",
                               "-s", "512", "-e",
                               "trace=fdatasync,read,readv,recvfrom,recvmsg,write,writev,"
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
        for h in handles[:12]:
            status, body = call(conn, "POST", f"/v1/topics/{TOPIC}/ack?receipt_handle={h}")
            assert status == 204, (status, body)
            reqs.append((f"receipt_handle={h} ", "HTTP/1.1 204"))
        for k in (12, 16):
            batch = handles[k:k + 4]
            status, body = call(conn, "POST", f"/v1/topics/{TOPIC}/ack/batch",
                                json.dumps(batch).encode(), {"Content-Type": "application/json"})
            assert status == 200, (status, body)
            assert [r["status"] for r in json.loads(body)["results"]] == [204] * 4, body
            # strace shows the body's quotes escaped.
            reqs.append((json.dumps(batch).replace('"', '\\"'), "HTTP/1.1 200"))
        for h in handles[20:]:
            status, body = call(conn, "POST",
                                f"/v1/topics/{TOPIC}/ack?receipt_handle={h}&extend=0")
            assert status == 204, (status, body)
            reqs.append((f"receipt_handle={h}&extend=0 ", "HTTP/1.1 204"))
        conn.close()

        # SIGINT: strace detaches (ternd runs on) and flushes the trace.
        st.send_signal(signal.SIGINT)
        st.communicate(timeout=60)
        st = None
        events = parse(trace)
        wal = f"/topics/{TOPIC}/0/default.wal"
        syncs = sum(1 for e in events if e[0] == "fdatasync" and e[1].endswith(wal))
        if syncs == 0:
            with open(trace, errors="replace") as f:
                head = f.readlines()[:60]
            raise AssertionError(f"no fdatasync of {wal} in the trace ({len(events)} events); "
                                 "it begins:\n" + "".join(head))
        failures = answered_after_sync(events, [(m, (wal,), a) for m, a in reqs])
        if failures:
            print("FAIL: answers written before their WAL record was synced:")
            for f in failures:
                print("  " + f)
            return 1
        print(f"ok: {len(reqs)} acks and nacks, each answered after a WAL write and an "
              f"fdatasync of {wal} that followed its request ({syncs} syncs, "
              f"{len(events)} traced syscalls)")
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
