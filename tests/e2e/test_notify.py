#!/usr/bin/env python3
"""ternd under a service manager's notify protocol (Type=notify units):
the test binds the datagram socket systemd would (abstract and path
names, SO_PASSCRED on) and passes it in NOTIFY_SOCKET. READY=1 must come
once and only when /readyz answers 200, with MAINPID and the sender's
credentials naming ternd; STATUS= lines come before it; STOPPING=1 at the
start of a shutdown. A node of a two-voter cluster whose peer is down never
becomes ready, so it must never send READY=1."""
import argparse
import http.client
import os
import signal
import socket
import struct
import sys
import tempfile
import time
import unittest

from daemon import Daemon
import daemon as daemon_mod

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from harness import free_port  # noqa: E402  (below 32768, free over TCP and UDP)


def readyz(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/readyz")
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


class Manager:
    """The service manager's end: a SOCK_DGRAM socket with SO_PASSCRED."""

    def __init__(self, name):
        self.name = name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind("\0" + name[1:] if name.startswith("@") else name)
        self.messages = []  # (pid, {name: value}) per datagram

    def receive(self, timeout):
        """The next datagram as (sender pid, assignments), or None."""
        self.sock.settimeout(timeout)
        try:
            data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", payload[:12])[0]
        fields = {}
        for line in data.decode().split("\n"):
            if line:
                k, _, v = line.partition("=")
                fields[k] = v
        self.messages.append((pid, fields))
        return pid, fields

    def wait_for(self, key, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.receive(max(0.1, deadline - time.monotonic()))
            if m is not None and key in m[1]:
                return m
        raise AssertionError(f"no {key} came; got {self.messages}")

    def close(self):
        self.sock.close()
        if not self.name.startswith("@") and os.path.exists(self.name):
            os.unlink(self.name)


class NotifyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = None

    def tearDown(self):
        if self.d is not None and self.d.proc.poll() is None:
            self.d.kill()
        self.tmp.cleanup()

    def start(self, notify_socket, *args):
        env = dict(os.environ, NOTIFY_SOCKET=notify_socket)
        self.d = Daemon(os.path.join(self.tmp.name, "data"), *args, env=env)
        return self.d

    def check_lifecycle(self, name):
        m = Manager(name)
        try:
            d = self.start(name)
            pid, ready = m.wait_for("READY")
            self.assertEqual(ready["READY"], "1")
            self.assertEqual(pid, d.proc.pid)
            self.assertEqual(ready["MAINPID"], str(d.proc.pid))
            self.assertIn("serving", ready["STATUS"])
            d.wait_for("ready: data")
            # READY=1 means what /readyz says; it came only once.
            self.assertEqual(readyz(d.http_port), 200)
            before = [f for _, f in m.messages[:-1]]
            self.assertTrue(any("recovering" in f.get("STATUS", "") for f in before), before)
            self.assertFalse(any("READY" in f for f in before), before)
            self.assertTrue(all(p == d.proc.pid for p, _ in m.messages), m.messages)
            d.proc.send_signal(signal.SIGTERM)
            _, stopping = m.wait_for("STOPPING")
            self.assertEqual(stopping["STOPPING"], "1")
            # "draining" where SIGTERM drains first (branch drain), else
            # "shutting down".
            self.assertRegex(stopping["STATUS"], r"^(shutting down|draining)")
            # The one SIGTERM ends it (stop() would send another).
            self.assertEqual(d.proc.wait(timeout=60), 0)
            d.stop()
            self.assertFalse(any("READY" in f for _, f in m.messages[m.messages.index(
                (d.proc.pid, ready)) + 1:]), m.messages)
        finally:
            m.close()

    def test_abstract_socket(self):
        self.check_lifecycle(f"@tern-e2e-notify-{os.getpid()}")

    def test_path_socket(self):
        self.check_lifecycle(os.path.join(self.tmp.name, "notify"))

    def test_bad_socket_is_reported_and_ignored(self):
        d = self.start("relative/notify")
        line = d.wait_for("not notifying the service manager")
        self.assertIn("NOTIFY_SOCKET=relative/notify: not a socket path", line)
        d.wait_for("ready: data")
        # /readyz also waits for the metastore's replica (its own barrier)
        # and for the root user in it (api/users.h).
        d.wait_for("metastore ready")
        d.wait_for("root user admin created")
        self.assertEqual(readyz(d.http_port), 200)
        self.assertEqual(d.stop(), 0)

    def test_no_quorum_never_ready(self):
        # Node 1 of two voters; node 2 never starts, so there is no leader
        # and /readyz stays 503: READY=1 must not come.
        ports = [free_port() for _ in range(3)]
        secret = os.path.join(self.tmp.name, "secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        name = f"@tern-e2e-notify-quorum-{os.getpid()}"
        m = Manager(name)
        try:
            d = self.start(name, "--node-id=1", f"--raft-address=127.0.0.1:{ports[0]}",
                           f"--http-address=127.0.0.1:{ports[1]}",
                           f"--peers=1@127.0.0.1:{ports[0]},2@127.0.0.1:{ports[2]}",
                           f"--cluster-secret-file={secret}", "--security-enabled=false",
                           "--allow-insecure-cluster")
            m.wait_for("STATUS")
            d.wait_for("HTTP listening on port")
            # Readiness is polled every 100 ms: give it many rounds.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                self.assertEqual(readyz(d.http_port), 503)
                msg = m.receive(0.2)
                self.assertTrue(msg is None or "READY" not in msg[1], m.messages)
            self.assertIn("waiting for the metastore",
                          [f for _, f in m.messages if "STATUS" in f][-1]["STATUS"])
            d.proc.send_signal(signal.SIGTERM)
            m.wait_for("STOPPING")
            self.assertEqual(d.proc.wait(timeout=60), 0)
            d.stop()
            self.assertFalse(any("READY" in f for _, f in m.messages), m.messages)
        finally:
            m.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
