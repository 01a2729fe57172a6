#!/usr/bin/env python3
"""End-to-end tests of the live WebSocket feed against the real ternd:
the handshake and every refusal in its order, the ready boundary, binary
frames and their header, no replay, pings both ways, the heartbeat,
client data frames, topic deletion and pause, shutdown, capacity, the
frame budget and write deadline, AUTH by header and by control frame (and
again when its grants expire), and the metrics."""
import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
import unittest
import uuid

import daemon as daemon_mod
from authserver import AuthServer
from daemon import Daemon
from nsqwire import Conn
from wsclient import BINARY, CLOSE, PING, PONG, TEXT, WS, Closed, HandshakeError, frame

ORIGIN = "https://app.example.com"


def fresh(prefix="live"):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


ADMIN_PASSWORD = "ws-tests-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()}


class Base(unittest.TestCase):
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-ws-")
        cls.d = Daemon(os.path.join(cls.dir, "data"), "--websocket-enabled",
                       "--ttl-discard-topics=live*=1h", *cls.ARGS,
                       env=dict(os.environ, TERN_ADMIN_PASSWORD=ADMIN_PASSWORD))
        cls.d.wait_for("ready")
        cls.port = cls.d.http_port
        cls.d.wait_for("root user admin created")

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def topic(self, prefix="live"):
        t = fresh(prefix)
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        return t

    def pub(self, t, body):
        self.assertEqual(self.request("POST", f"/pub?topic={t}", body), (200, b"OK"))

    def ws(self, t, **kw):
        return WS(self.port, f"/v1/ws/topics/{t}", **kw)

    def ready(self, t, **kw):
        w = self.ws(t, **kw)
        r = w.recv_json()
        self.assertEqual(r["type"], "ready", r)
        return w, r

    def refused(self, path, status, code, **kw):
        with self.assertRaises(HandshakeError) as cm:
            WS(self.port, path, **kw)
        self.assertEqual(cm.exception.status, status, cm.exception.body)
        body = cm.exception.json()
        self.assertEqual(body["message"], code)
        self.assertTrue(body["detail"])
        return cm.exception

    def metric(self, name):
        _, body = self.request("GET", "/metrics", headers=ADMIN)
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"no {name} in /metrics")


class Feed(Base):
    ARGS = (f"--websocket-allowed-origins={ORIGIN}, http://localhost:8080",
            "--websocket-max-connections-per-topic=3", "--websocket-heartbeat-interval=1s",
            "--max-msg-size=4MiB")

    def test_ready_then_frames_with_their_header(self):
        t = self.topic()
        w, r = self.ready(t)
        self.assertEqual(r["topic"], t)
        self.assertEqual(r["start"], "tail")
        self.assertEqual(r["ack"], "auto")
        self.assertTrue(r["subscription_id"])
        self.assertEqual(w.headers["sec-websocket-protocol"], "tern.live.v1")
        before = time.time_ns()
        bodies = [b"one", b"\x00", bytes(range(256)) * 10]
        for b in bodies:
            self.pub(t, b)
        ids = set()
        for b in bodies:
            m = w.recv_message()
            self.assertEqual(m.magic, b"TNL1")
            self.assertEqual(m.header_len, 24)
            self.assertEqual(m.attempts, 1)
            self.assertEqual(m.body, b)
            self.assertLess(abs(m.timestamp_ns - before), 60 * 10**9)
            ids.add(m.id)
        self.assertEqual(len(ids), 3)
        w.close()

    def test_no_replay_of_what_came_before(self):
        t = self.topic()
        self.pub(t, b"before")
        w, _ = self.ready(t)
        self.pub(t, b"after")
        self.assertEqual(w.recv_message().body, b"after")
        w.close()

    def test_each_connection_gets_every_message(self):
        t = self.topic()
        a, _ = self.ready(t)
        b, _ = self.ready(t)
        self.pub(t, b"x")
        self.assertEqual(a.recv_message().body, b"x")
        self.assertEqual(b.recv_message().body, b"x")
        a.close()
        b.close()

    def test_a_large_message_is_one_frame(self):
        t = self.topic()
        w, _ = self.ready(t)
        big = os.urandom(3 * 1024 * 1024)
        self.pub(t, big)
        self.assertEqual(w.recv_message().body, big)
        w.close()

    def test_query_parameters_are_refused(self):
        t = self.topic()
        self.refused(f"/v1/ws/topics/{t}?token=abc", 400, "E_WS_QUERY_FORBIDDEN")
        self.refused(f"/v1/ws/topics/{t}?", 400, "E_WS_QUERY_FORBIDDEN")

    def test_origin_must_match_exactly(self):
        t = self.topic()
        w, _ = self.ready(t, headers={"Origin": ORIGIN})
        w.close()
        w, _ = self.ready(t, headers={"Origin": "http://localhost:8080"})
        w.close()
        for bad in ("https://app.example.com/", "https://evil.example.com",
                    "https://app.example.com.evil", "null", "HTTPS://APP.EXAMPLE.COM"):
            self.refused(f"/v1/ws/topics/{t}", 403, "E_WS_ORIGIN", headers={"Origin": bad})

    def test_subprotocol_is_required(self):
        t = self.topic()
        self.refused(f"/v1/ws/topics/{t}", 400, "E_WS_SUBPROTOCOL", protocols=())
        self.refused(f"/v1/ws/topics/{t}", 400, "E_WS_SUBPROTOCOL", protocols=("chat",))
        w, _ = self.ready(t, protocols=("chat", "tern.live.v1"))
        w.close()

    def test_handshake_must_be_a_websocket_upgrade(self):
        t = self.topic()
        status, body = self.request("GET", f"/v1/ws/topics/{t}")
        self.assertEqual(status, 426)
        self.assertIn(b"E_WS_HANDSHAKE", body)
        self.refused(f"/v1/ws/topics/{t}", 426, "E_WS_HANDSHAKE", version="8")
        self.refused(f"/v1/ws/topics/{t}", 400, "E_WS_HANDSHAKE", key="short")
        status, _ = self.request("POST", f"/v1/ws/topics/{t}", b"")
        self.assertEqual(status, 405)

    def test_topic_must_exist_and_be_ttl_discard(self):
        self.refused(f"/v1/ws/topics/{fresh()}", 404, "E_BAD_TOPIC")
        self.refused("/v1/ws/topics/bad*name", 400, "E_BAD_TOPIC")
        reliable = self.topic("rel")
        self.refused(f"/v1/ws/topics/{reliable}", 409, "E_WS_TTL_REQUIRED")
        # The feed never creates a topic.
        _, body = self.request("GET", "/stats?format=json")
        self.assertNotIn(b"\"live-never\"", body)

    def test_capacity_per_topic(self):
        t = self.topic()
        conns = [self.ready(t)[0] for _ in range(3)]
        self.refused(f"/v1/ws/topics/{t}", 429, "E_WS_CAPACITY")
        other, _ = self.ready(self.topic())  # other topics are not affected
        other.close()
        conns[0].close_handshake()
        deadline = time.monotonic() + 10
        while True:
            try:
                w, _ = self.ready(t)
                break
            except HandshakeError as e:
                self.assertEqual(e.status, 429)
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.05)
        for c in [w, *conns[1:]]:
            c.close()

    def test_client_data_frames_are_refused(self):
        t = self.topic()
        w, _ = self.ready(t)
        w.send_text("hello")
        err, status = w.expect_error("E_WS_CONTROL")
        self.assertEqual(status, 1008)
        self.assertTrue(err["detail"])
        w.wait_closed()
        w, _ = self.ready(t)
        w.send_frame(BINARY, b"\x00\x01")
        w.expect_error("E_WS_CONTROL")
        w.wait_closed()

    def test_ping_is_answered_and_close_is_echoed(self):
        t = self.topic()
        w, _ = self.ready(t)
        w.send_frame(PING, b"are-you-there")
        while True:
            op, data = w.recv_frame()
            if op == PONG:
                self.assertEqual(data, b"are-you-there")
                break
        w.send_frame(CLOSE, struct.pack(">H", 1000) + b"bye")
        while True:
            op, data = w.recv_frame()
            if op == CLOSE:
                self.assertEqual(struct.unpack(">H", data[:2])[0], 1000)
                break
        w.wait_closed()

    def raw_handshake(self, t, method="GET", version="HTTP/1.1", extra=()):
        """A handshake written by hand: (status line, head, body)."""
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"{method} /v1/ws/topics/{t} {version}", "Host: x", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: tern.live.v1", *extra]
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            out = b""
            while b"\r\n\r\n" not in out:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
            head, _, body = out.partition(b"\r\n\r\n")
            n = int(dict(l.split(b": ", 1) for l in head.split(b"\r\n")[1:]).get(
                b"Content-Length", b"0"))
            s.settimeout(0.5)
            try:
                while len(body) < n + 1:  # one byte more: none may follow
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    body += chunk
            except socket.timeout:
                pass
            return head.split(b"\r\n")[0], head, body
        finally:
            s.close()

    def test_handshake_rfc6455_details(self):
        # RFC 6455 4.1/4.2.1: an HTTP/1.1 GET (RFC 9110 7.8: an HTTP/1.0
        # request's Upgrade is ignored), Sec-WebSocket-Key and -Version once
        # each; the upgrade and connection tokens may sit in lists.
        t = self.topic()
        status, _, body = self.raw_handshake(t, version="HTTP/1.0")
        self.assertEqual(status, b"HTTP/1.0 426 Upgrade Required", body)
        self.assertIn(b"E_WS_HANDSHAKE", body)
        status, head, body = self.raw_handshake(t, method="HEAD")
        self.assertEqual(status, b"HTTP/1.1 426 Upgrade Required", head)
        self.assertEqual(body, b"")
        status, _, body = self.raw_handshake(
            t, extra=["Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)).decode()])
        self.assertEqual(status, b"HTTP/1.1 400 Bad Request", body)
        self.assertIn(b"E_WS_HANDSHAKE", body)
        status, _, body = self.raw_handshake(t, extra=["Sec-WebSocket-Version: 13"])
        self.assertEqual(status, b"HTTP/1.1 400 Bad Request", body)
        w, _ = self.ready(t, headers={"Connection": "keep-alive, Upgrade",
                                      "Upgrade": "foo, WebSocket"})
        w.close()

    def test_frame_protocol_errors_close_with_their_codes(self):
        # RFC 6455 5.5, 7.4.1: each a Close with its status code, then the
        # end of the connection.
        t = self.topic()

        for data, code in ((frame(PING, b"p" * 126), 1002),         # control over 125
                           (frame(PING, b"p", fin=False), 1002),    # fragmented control
                           (frame(CLOSE, b"\x03"), 1002),           # 1-byte close body
                           (frame(BINARY, length=1 << 63) + b"ab", 1002),  # length MSB set
                           (frame(BINARY, length=1 << 40), 1009),   # declared too big
                           (frame(PING, b"x", mask=False), 1002),   # unmasked
                           (frame(PING, b"x", rsv=4), 1002),        # reserved bit
                           (frame(3, b"x"), 1002),                  # reserved opcode
                           (frame(0, b"x"), 1002),                  # nothing to continue
                           (frame(CLOSE, struct.pack(">H", 1005)), 1002),  # reserved code
                           (frame(TEXT, b"a\xff"), 1007),           # not UTF-8
                           (frame(TEXT, b"a" * 70000), 1009)):      # past 64 KiB
            w, _ = self.ready(t)
            w.sock.settimeout(5)  # well before the heartbeat would end it
            w.sock.sendall(data)
            op, body = w.recv()
            self.assertEqual((op, struct.unpack(">H", body[:2])[0] if len(body) >= 2 else None),
                             (CLOSE, code), data[:16])
            w.wait_closed()
            w.sock.close()
        # A ping is answered with its payload, also between the fragments of
        # a text message (which the feed then refuses as a data message).
        w, _ = self.ready(t)
        w.sock.sendall(frame(TEXT, b"ab", fin=False) + frame(PING, b"mid") +
                       frame(0, b"cd"))
        self.assertEqual(w.recv_frame(), (PONG, b"mid"))
        w.expect_error("E_WS_CONTROL")
        w.wait_closed()
        w.sock.close()

    def test_ping_flood_without_reading_is_dropped(self):
        t = self.topic()
        w, _ = self.ready(t)
        before = self.metric('tern_ws_rejected_total{reason="slow_consumer"}')
        ping = bytes([0x89, 0x80 | 125]) + b"\0\0\0\0" + b"p" * 125  # zero mask
        try:
            # ~40 MB of pongs the client never reads: past the kernel's
            # buffers, the server holds at most 1 MiB before dropping it.
            for _ in range(600):
                w.sock.sendall(ping * 500)
        except OSError:
            pass  # dropped while still sending
        deadline = time.monotonic() + 20
        while self.metric('tern_ws_rejected_total{reason="slow_consumer"}') < before + 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        w.sock.close()

    def test_server_pings_and_drops_a_silent_peer(self):
        t = self.topic()
        w, _ = self.ready(t)
        # Answering pings keeps the connection.
        deadline = time.monotonic() + 3.5
        pings = 0
        while time.monotonic() < deadline:
            w.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                op, data = w.recv_frame()
            except socket.timeout:
                break
            if op == PING:
                pings += 1
                w.send_frame(PONG, data)
        self.assertGreaterEqual(pings, 2)
        # Silence: closed after two intervals without a frame.
        w.sock.settimeout(15)
        while True:
            op, data = w.recv_frame()
            if op == PING:
                continue
            self.assertEqual(op, TEXT)
            self.assertIn(b"E_WS_HEARTBEAT", data)
            break
        op, data = w.recv_frame()
        self.assertEqual(op, CLOSE)
        self.assertEqual(data[2:], b"E_WS_HEARTBEAT")
        w.wait_closed()

    def test_topic_deletion_closes_with_topic_closed(self):
        t = self.topic()
        w, _ = self.ready(t)
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}")[0], 200)
        _, status = w.expect_error("E_TOPIC_CLOSED")
        self.assertEqual(status, 1012)
        w.wait_closed()

    def test_a_topic_given_an_owner_closes_open_feeds(self):
        # Without NSQ auth the feed serves only topics without an owner: one
        # given an owner while feeds are open ends them, as it refuses new
        # ones, before its next message goes out.
        t = self.topic()
        w, _ = self.ready(t)
        self.pub(t, b"open")
        self.assertEqual(w.recv_message().body, b"open")
        status, body = self.request("PATCH", f"/v1/topics/{t}", b'{"owner":"admin"}',
                                    dict(ADMIN, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 200, body)
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"owned", ADMIN), (200, b"OK"))
        _, status = w.expect_error("E_UNAUTHORIZED")
        self.assertEqual(status, 1008)
        w.wait_closed()
        self.refused(f"/v1/ws/topics/{t}", 403, "E_UNAUTHORIZED")

    def test_nsq_cannot_join_a_feeds_channel(self):
        # A feed's channel (listed in /stats) is its connection's alone: an
        # NSQ SUB to it would take every other message of the feed.
        t = self.topic()
        w, r = self.ready(t)
        _, body = self.request("GET", f"/stats?format=json&topic={t}")
        chans = [c["channel_name"] for c in json.loads(body)["topics"][0]["channels"]]
        self.assertEqual(len(chans), 1, chans)
        self.assertTrue(chans[0].startswith("ws.") and chans[0].endswith(
            f".{r['subscription_id']}#ephemeral"), chans)
        c = Conn(self.d.tcp_port)
        try:
            c.identify()
            kind, data = c.sub(t, chans[0])
            self.assertIn(b"E_BAD_CHANNEL", data)
        finally:
            c.close()
        for i in range(4):
            self.pub(t, b"m%d" % i)
        self.assertEqual([w.recv_message().body for _ in range(4)], [b"m0", b"m1", b"m2", b"m3"])
        w.close()

    def test_paused_topic_sends_nothing_until_unpaused(self):
        t = self.topic()
        w, _ = self.ready(t)
        self.assertEqual(self.request("POST", f"/topic/pause?topic={t}")[0], 200)
        self.pub(t, b"held")
        w.sock.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            while True:
                op, _ = w.recv_frame()
                self.assertNotEqual(op, BINARY)
        w.sock.settimeout(10)
        self.assertEqual(self.request("POST", f"/topic/unpause?topic={t}")[0], 200)
        self.assertEqual(w.recv_message().body, b"held")
        w.close()

    def test_metrics(self):
        t = self.topic()
        w, _ = self.ready(t)
        before = self.metric("tern_ws_messages_total")
        self.pub(t, b"m")
        w.recv_message()
        deadline = time.monotonic() + 10
        while self.metric("tern_ws_messages_total") < before + 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertGreaterEqual(self.metric("tern_ws_connections"), 1)
        w.close()


class Off(unittest.TestCase):
    def test_off_by_default(self):
        d = tempfile.mkdtemp(prefix="tern-ws-")
        try:
            dm = Daemon(os.path.join(d, "data"), "--ttl-discard-topics=live*=1h")
            dm.wait_for("ready")
            with self.assertRaises(HandshakeError) as cm:
                WS(dm.http_port, "/v1/ws/topics/live-x")
            self.assertEqual(cm.exception.status, 404)
            self.assertEqual(dm.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_bad_origin_option_is_refused_at_startup(self):
        d = tempfile.mkdtemp(prefix="tern-ws-")
        try:
            for bad in ("https://*.example.com", "https://a.example.com/path", "example.com"):
                dm = Daemon(os.path.join(d, "data"), "--websocket-enabled",
                            f"--websocket-allowed-origins={bad}")
                rc = dm.proc.wait(timeout=30)
                dm.lines.append(dm.proc.stderr.read())
                self.assertEqual(rc, 2, dm.log())
                self.assertIn("websocket-allowed-origins", dm.log())
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Limits(Base):
    ARGS = ("--websocket-max-connections=2", "--websocket-frame-inflight-bytes=1MiB",
            "--websocket-write-timeout=1s", "--max-msg-size=4MiB")

    def test_node_wide_capacity_and_write_deadline(self):
        t = self.topic()
        stalled, _ = self.ready(t)
        stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader, _ = self.ready(self.topic())
        self.refused(f"/v1/ws/topics/{t}", 429, "E_WS_CAPACITY")
        self.assertGreaterEqual(self.metric('tern_ws_rejected_total{reason="capacity"}'), 1)
        # The stalled client reads nothing: its frames back up until one
        # misses the write deadline and the connection is dropped.
        big = b"z" * (3 * 1024 * 1024)
        for _ in range(6):
            self.pub(t, big)
        deadline = time.monotonic() + 20
        while self.metric('tern_ws_rejected_total{reason="slow_consumer"}') < 1:
            self.assertLess(time.monotonic(), deadline, self.d.log())
            time.sleep(0.1)
        # Gone from the server (draining what the kernel still holds at a
        # 4 KiB window would take minutes, so the client just hangs up).
        self.assertEqual(self.metric("tern_ws_connections"), 1)
        stalled.sock.close()
        reader.close()

    def test_frame_budget_waits_instead_of_failing(self):
        # Frames larger than the whole budget still go, one at a time.
        t = self.topic()
        w, _ = self.ready(t)
        big = os.urandom(2 * 1024 * 1024)
        for _ in range(3):
            self.pub(t, big)
        for _ in range(3):
            self.assertEqual(w.recv_message().body, big)
        w.close()


class Shutdown(Base):
    def test_shutdown_says_so(self):
        t = self.topic()
        w, _ = self.ready(t)
        self.d.proc.send_signal(2)
        _, status = w.expect_error("E_SHUTDOWN")
        self.assertEqual(status, 1001)
        w.wait_closed()
        self.assertEqual(self.d.proc.wait(timeout=60), 0)


class Auth(Base):
    @classmethod
    def setUpClass(cls):
        cls.auth = AuthServer()
        cls.ARGS = (f"--auth-http-address=127.0.0.1:{cls.auth.port}",
                    "--websocket-auth-timeout=1s", "--ttl-discard-topics=pubx*=1h,live*=1h")
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.auth.close()

    def test_auth_control_frame(self):
        t = self.topic()
        w = self.ws(t)
        self.assertEqual(w.recv_json(), {"type": "auth_required"})
        w.send_json({"type": "auth", "secret": "all"})
        self.assertEqual(w.recv_json()["type"], "ready")
        self.pub(t, b"secret stuff")
        self.assertEqual(w.recv_message().body, b"secret stuff")
        w.close()

    def test_auth_control_frame_failures(self):
        t = self.topic()
        for secret, code in (("deny", "E_AUTH_FAILED"), ("none", "E_UNAUTHORIZED")):
            w = self.ws(t)
            w.recv_json()
            w.send_json({"type": "auth", "secret": secret})
            w.expect_error(code)
            w.wait_closed()
        # Nesting past the JSON readers' depth (ws.c reads the message
        # before any authentication): refused as malformed, the server
        # unharmed, even when the message would otherwise authenticate.
        deep = '{"type":"auth","secret":"all","x":' + "[" * 32000 + "]" * 32000 + "}"
        for bad in ('{"type":"auth"}', "not json", '{"type":"hello","secret":"all"}',
                    "[" * 65536, deep):
            w = self.ws(t)
            w.recv_json()
            w.send_text(bad)
            w.expect_error("E_BAD_AUTH")
            w.wait_closed()

    def test_auth_timeout(self):
        t = self.topic()
        w = self.ws(t)
        self.assertEqual(w.recv_json()["type"], "auth_required")
        w.sock.settimeout(15)
        _, status = w.expect_error("E_AUTH_TIMEOUT")
        self.assertEqual(status, 1008)
        w.wait_closed()

    def test_expired_grants_are_checked_again(self):
        # The grants hold for the auth server's ttl (1 s here): once they
        # ran out, no frame leaves before the secret is checked again, and
        # a secret that no longer permits the topic ends the feed.
        t = self.topic()
        for how in ("header", "frame"):
            with self.subTest(how=how):
                self.auth.revoked.discard("revocable")
                time.sleep(1.2)  # the denial cached for its ttl is gone
                if how == "header":
                    w, _ = self.ready(t, headers={"Authorization": "Bearer revocable"})
                else:
                    w = self.ws(t)
                    self.assertEqual(w.recv_json(), {"type": "auth_required"})
                    w.send_json({"type": "auth", "secret": "revocable"})
                    self.assertEqual(w.recv_json()["type"], "ready")
                time.sleep(1.2)  # expired, still granted: checked again, sent
                self.pub(t, b"still granted")
                self.assertEqual(w.recv_message().body, b"still granted")
                self.auth.revoked.add("revocable")
                time.sleep(1.2)
                self.pub(t, b"after the revocation")
                w.sock.settimeout(10)
                _, status = w.expect_error("E_UNAUTHORIZED")
                self.assertEqual(status, 1008)
                w.wait_closed()

    def test_bearer_header(self):
        t = self.topic()
        w, _ = self.ready(t, headers={"Authorization": "Bearer all"})
        w.close()
        self.refused(f"/v1/ws/topics/{t}", 403, "E_AUTH_FAILED",
                     headers={"Authorization": "Bearer deny"})
        # pub-only may publish to ^pub topics but not subscribe.
        p = self.topic("pubx")
        self.refused(f"/v1/ws/topics/{p}", 403, "E_UNAUTHORIZED",
                     headers={"Authorization": "Bearer pub-only"})
        self.refused(f"/v1/ws/topics/{t}", 400, "E_BAD_AUTH",
                     headers={"Authorization": "Basic dXNlcjpwYXNz"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
