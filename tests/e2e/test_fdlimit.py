#!/usr/bin/env python3
"""End-to-end tests of the descriptor limit: clients that open connections,
or create topics, until ternd runs out of file descriptors must not leave
the existing partitions without any. Each test starts ternd with RLIMIT_NOFILE at 64 (soft and hard, so
ternd cannot raise it) and small segments, so a publish soon needs a new
segment file while the connections are still open."""
import argparse
import base64
import http.client
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
import unittest

import daemon as daemon_mod
from daemon import Daemon
from nsqwire import FRAME_RESPONSE, Conn

NOFILE = 64
PASSWORD = "fdlimit-tests-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode(),
         "Content-Type": "application/json"}
FLOOD = 150  # connections: more than the whole limit


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


class FdLimit(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-fdlimit-")
        self.d = Daemon(os.path.join(self.dir, "data"), "--segment-bytes=64KiB",
                        preexec_fn=low_nofile, env=dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD))
        self.d.wait_for("ready")
        self.socks = []
        self.producer = Conn(self.d.tcp_port)
        self.assertEqual(self.producer.pub("t0", b"first"), (FRAME_RESPONSE, b"OK"))

    def tearDown(self):
        self.producer.close()
        for s in self.socks:
            s.close()
        rc = self.d.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(rc, 0, self.d.log())

    def flood(self, port, hello, answered):
        """Opens FLOOD connections one after another, each sending hello and
        waiting for an answer (held: kept open) or the end of the stream
        (refused). Returns how many were held."""
        held = 0
        for _ in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            self.socks.append(s)
            try:
                s.sendall(hello)
                got = s.recv(100)
            except (ConnectionResetError, BrokenPipeError):
                got = b""
            if got:
                self.assertTrue(answered(got), got)
                held += 1
        return held

    def publish_across_segments(self):
        """Enough publishes to seal several 64 KiB segments, each answered OK."""
        for i in range(40):
            self.assertEqual(self.producer.pub("t0", b"%d" % i + b"y" * 8000),
                             (FRAME_RESPONSE, b"OK"), f"publish {i}\n{self.d.log()}")

    def after_the_flood(self, held):
        self.assertGreater(held, 0)
        self.assertLess(held, FLOOD)
        fds = len(os.listdir(f"/proc/{self.d.proc.pid}/fd"))
        self.assertLess(fds, NOFILE, "descriptors left for storage")
        self.publish_across_segments()
        for s in self.socks:
            s.close()
        self.socks = []
        fresh = Conn(self.d.tcp_port)
        try:
            self.assertEqual(fresh.pub("t0", b"last"), (FRAME_RESPONSE, b"OK"))
        finally:
            fresh.close()

    def test_nsq_connections_leave_descriptors_for_storage(self):
        identify = b"  V2IDENTIFY\n" + len(b"{}").to_bytes(4, "big") + b"{}"
        held = self.flood(self.d.tcp_port, identify, lambda got: got.endswith(b"OK"))
        self.after_the_flood(held)

    def test_http_connections_leave_descriptors_for_storage(self):
        ping = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
        held = self.flood(self.d.http_port, ping, lambda got: got.startswith(b"HTTP/1.1 200"))
        self.after_the_flood(held)

    def raft_port(self):
        """The port of ternd's third TCP listener (it logs Raft's as
        127.0.0.1:0): its listening sockets, found by their inodes."""
        pid = self.d.proc.pid
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        with open(f"/proc/{pid}/net/tcp") as f:
            ports = {int(row[1].split(":")[1], 16) for row in (l.split() for l in f)
                     if row[3] == "0A" and row[9] in inodes}
        ports -= {self.d.tcp_port, self.d.http_port}
        self.assertEqual(len(ports), 1, ports)
        return ports.pop()

    def test_raft_connections_leave_descriptors_for_storage(self):
        # The metastore's Raft port answers nothing before a handshake, so
        # the flood waits for the state instead: the descriptors in use
        # reaching Raft's mark (thirteen sixteenths of the limit).
        port = self.raft_port()
        for _ in range(FLOOD):
            self.socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{self.d.proc.pid}/fd")) < NOFILE * 13 // 16 - 1:
            self.assertLess(time.monotonic(), deadline, "the flood was never accepted")
            time.sleep(0.02)
        self.publish_across_segments()

    def test_a_door_flood_leaves_the_raft_port_to_the_peers(self):
        # Clients filling the doors up to their mark must not lock the
        # metastore's peers out: Raft's incoming connections have a mark of
        # their own above the doors' (a node that could take no peer's
        # connection would hear no leader and stand for election forever).
        port = self.raft_port()
        ping = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
        held = self.flood(self.d.http_port, ping, lambda got: got.startswith(b"HTTP/1.1 200"))
        self.assertLess(held, FLOOD)
        peer = socket.create_connection(("127.0.0.1", port), timeout=1)
        self.socks.append(peer)
        try:
            got = peer.recv(100)  # a refused connection is closed at once
        except socket.timeout:
            got = None  # accepted: waiting for the handshake
        except ConnectionResetError:
            got = b""
        self.assertIsNone(got, "the Raft port refused a connection after a door flood")

    def test_new_topics_leave_descriptors_for_the_ones_there(self):
        # Every topic and channel holds descriptors: creating them stops
        # short of the limit (a clear error), and the topics already there
        # can still seal a segment and begin the next.
        flood = Conn(self.d.tcp_port)
        # Opened first: past the connections' mark no new one is taken.
        self.http = http.client.HTTPConnection("127.0.0.1", self.d.http_port, timeout=30)
        deadline = time.monotonic() + 10
        while self.request("GET", "/v1/topics/t0")[0] != 200:  # the metastore has it
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        refused = None
        for i in range(NOFILE):
            kind, data = flood.pub(f"u{i}", b"x")
            if kind != FRAME_RESPONSE:
                refused = data
                break
        flood.close()
        self.assertIsNotNone(refused, "every topic was created")
        self.assertTrue(refused.startswith(b"E_PUB_FAILED"), refused)
        self.assertIn(b"too many open files", refused)
        # The /v1 doors say why too, as a 503 to retry, and record nothing.
        st, hdrs, body = self.request("POST", "/v1/topics", b'{"name":"v1late"}')
        self.assertEqual(st, 503, body)
        self.assertIn("too many open files", json.loads(body)["error"])
        self.assertEqual(hdrs.get("retry-after"), "1")
        self.assertEqual(self.request("GET", "/v1/topics/v1late")[0], 404)
        # A new channel, by consuming from it.
        st, hdrs, body = self.request("GET", "/v1/topics/t0/consume?channel=late&wait=0s")
        self.assertEqual(st, 503, body)
        self.assertIn("too many open files", json.loads(body)["error"])
        self.assertEqual(hdrs.get("retry-after"), "1")
        self.publish_across_segments()
        self.http.close()

    def test_a_creation_the_engine_refuses_keeps_no_record(self):
        # Room for a topic at the check before its record, but not for its
        # 40 partitions' files: the answer is the same 503 to retry, and
        # the record made for it is taken back, so the retry (with fewer
        # partitions) makes the topic rather than meeting "already exists"
        # and a topic without partitions.
        self.http = http.client.HTTPConnection("127.0.0.1", self.d.http_port, timeout=30)
        deadline = time.monotonic() + 10
        while self.request("GET", "/v1/topics/t0")[0] != 200:  # the metastore caught up
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        st, hdrs, body = self.request("POST", "/v1/topics", b'{"name":"wide","partitions":40}')
        self.assertEqual(st, 503, body)
        self.assertIn("too many open files", json.loads(body)["error"])
        st, _, body = self.request("GET", "/v1/topics/wide")
        self.assertEqual(st, 404, body)
        # What it made goes without a restart: its directory, with every
        # partition's (before, they stayed until the next start).
        wide = os.path.join(self.dir, "data", "topics", "wide")
        deadline = time.monotonic() + 5
        while os.path.exists(wide):
            self.assertLess(time.monotonic(), deadline, os.listdir(wide))
            time.sleep(0.05)
        st, _, body = self.request("POST", "/v1/topics", b'{"name":"wide","partitions":2}')
        self.assertEqual(st, 201, body)
        st, _, body = self.request("POST", "/v1/topics/wide/produce", b'{"n":1}')
        self.assertEqual(st, 202, body)
        self.publish_across_segments()
        self.http.close()

    def request(self, method, path, body=None):
        self.http.request(method, path, body=body, headers=ADMIN)
        r = self.http.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


class RaisedLimit(unittest.TestCase):
    def test_the_soft_limit_is_raised_to_the_hard_one(self):
        tmp = tempfile.mkdtemp(prefix="tern-fdlimit-")
        d = Daemon(os.path.join(tmp, "data"),
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, 256)))
        try:
            d.wait_for("ready")
            with open(f"/proc/{d.proc.pid}/limits") as f:
                line = next(l for l in f if l.startswith("Max open files"))
            self.assertEqual(line.split()[3:5], ["256", "256"], line)
        finally:
            rc = d.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertEqual(rc, 0, d.log())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
