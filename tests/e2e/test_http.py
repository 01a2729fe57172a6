#!/usr/bin/env python3
"""End-to-end tests of the HTTP door against the real ternd: nsqd's /ping,
/info, /pub and /mpub with their answers and error codes, health, routing
(404/405), keep-alive and pipelining, chunked bodies, 100-continue, HEAD,
and the server's bounds (oversized and slow heads, malformed requests,
bodies over their limit)."""
import argparse
import base64
import http.client
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import threading
import uuid
import zlib

import daemon as daemon_mod
from daemon import Daemon
from nsqwire import Conn


def request(port, method, path, body=None, headers=None):
    """One request on a connection of its own: status, headers, body."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def fresh(prefix="h"):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


ADMIN_PASSWORD = "http-tests-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()}


class AdminDaemon:
    """One ternd for the test class, started with ARGS and the admin
    password ADMIN_PASSWORD."""
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-http-")
        cls.d = Daemon(os.path.join(cls.dir, "data"), *cls.ARGS,
                       env=dict(os.environ, TERN_ADMIN_PASSWORD=ADMIN_PASSWORD))
        cls.d.wait_for("ready")
        cls.port = cls.d.http_port
        cls.d.wait_for("root user admin created")

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"


class HTTP(AdminDaemon, unittest.TestCase):
    def request(self, method, path, body=None, headers=None):
        return request(self.port, method, path, body, headers)

    def raw(self, data, timeout=10):
        """Send raw bytes, return everything the server sends until it
        closes (or the timeout)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(data)
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (socket.timeout, ConnectionResetError):
                    break
                if not chunk:
                    break
                out += chunk
            return out
        finally:
            s.close()

    def consume(self, topic, n):
        c = Conn(self.d.tcp_port)
        c.identify()
        c.sub(topic, "ch")
        c.rdy(n + 10)
        got = [c.read_message() for _ in range(n)]
        c.close()
        return got

    # -- nsqd endpoints -------------------------------------------------

    def test_ping(self):
        status, headers, body = self.request("GET", "/ping")
        self.assertEqual((status, body), (200, b"OK"))
        self.assertNotIn("X-NSQ-Content-Type", headers)

    def test_info(self):
        status, headers, body = self.request("GET", "/info")
        self.assertEqual(status, 200)
        info = json.loads(body)
        self.assertEqual(info["tcp_port"], self.d.tcp_port)
        self.assertEqual(info["http_port"], self.port)
        self.assertEqual(info["max_heartbeat_interval"], 60 * 10**9)  # ns, as nsqd
        self.assertIn("version", info)

    def test_health(self):
        self.assertEqual(self.request("GET", "/healthz")[0], 200)
        self.assertEqual(self.request("GET", "/readyz")[0], 200)

    def test_pub_then_consume(self):
        t = fresh()
        status, headers, body = self.request("POST", f"/pub?topic={t}", b"hello http")
        self.assertEqual((status, body), (200, b"OK"))
        self.assertEqual(self.consume(t, 1)[0].body, b"hello http")

    def test_pub_errors(self):
        t = fresh()
        cases = [
            (f"/pub", b"x", 400, "MISSING_ARG_TOPIC"),
            (f"/pub?topic=", b"x", 400, "INVALID_TOPIC"),  # as nsqd 1.3.0
            (f"/pub?topic=bad/name", b"x", 400, "INVALID_TOPIC"),
            (f"/pub?topic={t}", b"", 400, "MSG_EMPTY"),
            (f"/pub?topic={t}&defer=-1", b"x", 400, "INVALID_DEFER"),
            (f"/pub?topic={t}&defer=3600001", b"x", 400, "INVALID_DEFER"),
            (f"/pub?topic={t}", b"x" * (1024 * 1024 + 1), 413, "MSG_TOO_BIG"),
        ]
        for path, body, want_status, want in cases:
            status, headers, out = self.request("POST", path, body)
            self.assertEqual(status, want_status, (path, out))
            self.assertEqual(json.loads(out)["message"], want, path)

    def test_deferred_pub(self):
        t = fresh()
        start = time.monotonic()
        self.assertEqual(self.request("POST", f"/pub?topic={t}&defer=400", b"later")[0], 200)
        m = self.consume(t, 1)[0]
        self.assertEqual(m.body, b"later")
        self.assertGreaterEqual(time.monotonic() - start, 0.4)

    def test_mpub_text_and_binary(self):
        t = fresh()
        status, _, body = self.request("POST", f"/mpub?topic={t}", b"one\ntwo\n\nthree\n")
        self.assertEqual((status, body), (200, b"OK"))
        payload = struct.pack(">I", 2)
        for m in (b"four", b"five"):
            payload += struct.pack(">I", len(m)) + m
        status, _, body = self.request("POST", f"/mpub?topic={t}&binary=true", payload)
        self.assertEqual((status, body), (200, b"OK"))
        got = [m.body for m in self.consume(t, 5)]
        self.assertEqual(got, [b"one", b"two", b"three", b"four", b"five"])

    def test_mpub_errors(self):
        t = fresh()
        self.assertEqual(self.request("POST", f"/mpub?topic={t}", b"")[0], 200)  # nothing
        bad = struct.pack(">I", 2) + struct.pack(">I", 1) + b"a"
        status, _, body = self.request("POST", f"/mpub?topic={t}&binary=true", bad)
        self.assertEqual((status, json.loads(body)["message"]), (413, "BAD_MESSAGE"))  # nsqd's
        trailing = struct.pack(">I", 1) + struct.pack(">I", 1) + b"a" + b"junk"
        status, _, body = self.request("POST", f"/mpub?topic={t}&binary=true", trailing)
        self.assertEqual((status, json.loads(body)["message"]), (413, "BAD_BODY"))
        empty_msg = struct.pack(">I", 1) + struct.pack(">I", 0)
        status, _, body = self.request("POST", f"/mpub?topic={t}&binary=true", empty_msg)
        self.assertEqual((status, json.loads(body)["message"]), (413, "BAD_MESSAGE"))

    def test_v1_negotiation(self):
        t = fresh()
        hdr = {"Accept": "application/vnd.nsq; version=1.0"}
        status, headers, body = self.request("POST", f"/pub?topic={t}", b"x", hdr)
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("X-NSQ-Content-Type"), "nsq; version=1.0")
        status, headers, body = self.request("POST", "/pub", b"x", hdr)
        self.assertEqual(headers.get("X-NSQ-Content-Type"), "nsq; version=1.0")

    def test_stats_has_what_nsqadmin_reads(self):
        # The fields nsqadmin and nsq_stat decode from a node's /stats, with
        # the JSON types their Go structs need (a string where a number is
        # expected fails the whole decode).
        t = fresh()
        self.request("POST", f"/pub?topic={t}", b"a")
        c = Conn(self.d.tcp_port)
        c.identify(client_id="admin-view", hostname="h2", user_agent="ua/1")
        c.sub(t, "ch")
        c.rdy(1)
        c.read_message()
        st = json.loads(self.request("GET", f"/stats?format=json&topic={t}")[2])
        num, text, flag = (int,), (str,), (bool,)
        self.assertIsInstance(st["version"], str)
        self.assertRegex(st["version"], r"^\d+\.\d+\.\d+")
        self.assertIsInstance(st["start_time"], int)
        [topic] = st["topics"]
        # nsqadmin derives memory_depth itself (depth - backend_depth).
        for k, ty in {"topic_name": text, "depth": num, "backend_depth": num,
                      "message_count": num, "message_bytes": num, "paused": flag,
                      "channels": (list,), "e2e_processing_latency": (dict,)}.items():
            self.assertIsInstance(topic[k], ty, k)
        [ch] = topic["channels"]
        for k, ty in {"channel_name": text, "depth": num, "backend_depth": num,
                      "in_flight_count": num, "deferred_count": num,
                      "requeue_count": num, "timeout_count": num, "message_count": num,
                      "client_count": num, "paused": flag, "clients": (list,),
                      "e2e_processing_latency": (dict,)}.items():
            self.assertIsInstance(ch[k], ty, k)
        [cl] = ch["clients"]
        # Exactly nsqd 1.3's keys, in its order (authed only once AUTHed,
        # pub_counts only once published: omitempty there).
        self.assertEqual(list(cl), [
            "client_id", "hostname", "version", "remote_address", "state", "ready_count",
            "in_flight_count", "message_count", "finish_count", "requeue_count", "connect_ts",
            "sample_rate", "deflate", "snappy", "user_agent", "tls", "tls_cipher_suite",
            "tls_version", "tls_negotiated_protocol", "tls_negotiated_protocol_is_mutual"])
        for k, ty in {"client_id": text, "hostname": text, "version": text,
                      "remote_address": text, "user_agent": text, "connect_ts": num,
                      "ready_count": num, "in_flight_count": num, "message_count": num,
                      "finish_count": num, "requeue_count": num, "sample_rate": num,
                      "tls": flag, "deflate": flag, "snappy": flag, "tls_cipher_suite": text,
                      "tls_version": text, "tls_negotiated_protocol": text,
                      "tls_negotiated_protocol_is_mutual": flag}.items():
            self.assertIsInstance(cl[k], ty, k)
        self.assertEqual((cl["state"], cl["tls"], cl["tls_version"]), (3, False, ""))
        c.close()

    def test_stats(self):
        t = fresh()
        self.request("POST", f"/mpub?topic={t}", b"a\nb\nc\n")
        c = Conn(self.d.tcp_port)
        c.identify(client_id="stats-client", hostname="h1")
        c.sub(t, "ch")
        c.rdy(1)
        m = c.read_message()
        status, _, body = self.request("GET", f"/stats?format=json&topic={t}")
        self.assertEqual(status, 200)
        st = json.loads(body)
        self.assertEqual(st["health"], "OK")
        self.assertIsNone(st["producers"])
        [topic] = st["topics"]
        self.assertEqual(topic["topic_name"], t)
        self.assertEqual(topic["message_count"], 3)
        self.assertIn("e2e_processing_latency", topic)
        [ch] = topic["channels"]
        self.assertEqual(ch["channel_name"], "ch")
        self.assertEqual((ch["depth"], ch["in_flight_count"], ch["client_count"]), (2, 1, 1))
        self.assertIn("e2e_processing_latency", ch)
        [client] = ch["clients"]
        self.assertEqual((client["client_id"], client["hostname"]), ("stats-client", "h1"))
        self.assertEqual((client["ready_count"], client["in_flight_count"]), (1, 1))
        # Filters and nulls, as nsqd.
        st = json.loads(self.request("GET", f"/stats?format=json&topic={t}&include_clients=false")[2])
        self.assertIsNone(st["topics"][0]["channels"][0]["clients"])
        st = json.loads(self.request("GET", "/stats?format=json&topic=nosuchtopic")[2])
        self.assertIsNone(st["topics"])
        # A channel filter leaves out the topics without that channel (nsqd).
        st = json.loads(self.request("GET", f"/stats?format=json&topic={t}&channel=none")[2])
        self.assertEqual(st["topics"], [])
        status, headers, text = self.request("GET", f"/stats?topic={t}")
        self.assertEqual(status, 200)
        self.assertIn(t.encode(), text)
        self.assertIn(b"inflt: 1", text)
        c.fin(m.id)
        c.close()

    def test_lookupd_endpoints(self):
        t = fresh()
        self.request("POST", f"/pub?topic={t}", b"x")
        c = Conn(self.d.tcp_port)
        c.identify()
        c.sub(t, "lch")
        status, headers, body = self.request("GET", f"/lookup?topic={t}")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("X-NSQ-Content-Type"), "nsq; version=1.0")
        lk = json.loads(body)
        self.assertEqual(lk["channels"], ["lch"])
        [p] = lk["producers"]
        self.assertEqual((p["tcp_port"], p["http_port"]), (self.d.tcp_port, self.port))
        self.assertEqual(self.request("GET", "/lookup?topic=nosuch")[0], 404)
        self.assertIn(t, json.loads(self.request("GET", "/topics")[2])["topics"])
        self.assertEqual(json.loads(self.request("GET", f"/channels?topic={t}")[2]),
                         {"channels": ["lch"]})
        [node] = json.loads(self.request("GET", "/nodes")[2])["producers"]
        self.assertEqual(len(node["topics"]), len(node["tombstones"]))
        self.assertIn(t, node["topics"])
        c.close()

    def test_topic_and_channel_management(self):
        t = fresh()
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        self.assertIn(t, json.loads(self.request("GET", "/topics")[2])["topics"])
        # /channel/create does not create the topic, as in nsqd.
        status, _, body = self.request("POST", f"/channel/create?topic={fresh()}&channel=c")
        self.assertEqual((status, json.loads(body)["message"]), (404, "TOPIC_NOT_FOUND"))
        self.assertEqual(self.request("POST", f"/channel/create?topic={t}&channel=c")[0], 200)
        self.assertEqual(json.loads(self.request("GET", f"/channels?topic={t}")[2]),
                         {"channels": ["c"]})
        # Pause holds deliveries; unpause releases them.
        self.assertEqual(self.request("POST", f"/channel/pause?topic={t}&channel=c")[0], 200)
        self.request("POST", f"/pub?topic={t}", b"held")
        c = Conn(self.d.tcp_port)
        c.identify()
        c.sub(t, "c")
        c.rdy(5)
        c.sock.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            c.read_message()
        c.sock.settimeout(10)
        st = json.loads(self.request("GET", f"/stats?format=json&topic={t}")[2])
        self.assertTrue(st["topics"][0]["channels"][0]["paused"])
        self.assertEqual(self.request("POST", f"/channel/unpause?topic={t}&channel=c")[0], 200)
        self.assertEqual(c.read_message().body, b"held")
        # Empty drops the backlog.
        self.request("POST", f"/channel/pause?topic={t}&channel=c")
        self.request("POST", f"/mpub?topic={t}", b"x\ny\n")
        self.assertEqual(self.request("POST", f"/channel/empty?topic={t}&channel=c")[0], 200)
        st = json.loads(self.request("GET", f"/stats?format=json&topic={t}")[2])
        self.assertEqual(st["topics"][0]["channels"][0]["depth"], 0)
        self.assertEqual(self.request("POST", f"/topic/pause?topic={t}")[0], 200)
        self.assertTrue(json.loads(self.request("GET", f"/stats?format=json&topic={t}")[2])
                        ["topics"][0]["paused"])
        self.assertEqual(self.request("POST", f"/topic/unpause?topic={t}")[0], 200)
        c.close()

    def test_topic_and_channel_delete(self):
        t = fresh()
        self.request("POST", f"/mpub?topic={t}", b"old1\nold2\n")
        c = Conn(self.d.tcp_port)
        c.identify()
        c.sub(t, "c")
        c.rdy(1)
        c.read_message()
        other = Conn(self.d.tcp_port)
        other.identify()
        other.sub(t, "c2")
        # Deleting a channel disconnects its consumers and removes its files.
        self.assertEqual(self.request("POST", f"/channel/delete?topic={t}&channel=c2")[0], 200)
        self.assertTrue(other.expect_closed())
        self.assertEqual(json.loads(self.request("GET", f"/channels?topic={t}")[2]),
                         {"channels": ["c"]})
        pdir = os.path.join(self.dir, "data", "topics", t, "0")
        self.assertFalse(os.path.exists(os.path.join(pdir, "c2.ckpt")))
        self.assertEqual(self.request("POST", f"/channel/delete?topic={t}&channel=c2")[0], 404)
        # Deleting the topic: consumers gone, directory gone, name free again.
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}")[0], 200)
        self.assertTrue(c.expect_closed())
        self.assertNotIn(t, json.loads(self.request("GET", "/topics")[2])["topics"])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "data", "topics", t)))
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}")[0], 404)
        self.request("POST", f"/pub?topic={t}", b"new")
        st = json.loads(self.request("GET", f"/stats?format=json&topic={t}")[2])
        self.assertEqual(st["topics"][0]["message_count"], 1)
        self.assertEqual(self.consume(t, 1)[0].body, b"new")
        c.close()
        other.close()

    def test_client_leaving_a_parked_publish(self):
        # Each client sends a /pub and hangs up at once, often while the
        # request is parked (topic creation, the group commit). The
        # publishes still complete; nothing crashes or leaks.
        t = fresh()
        for i in range(50):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            s.sendall(f"POST /pub?topic={t} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"
                      f"{i % 10}".encode())
            s.close()
        deadline = time.monotonic() + 10
        count = 0
        while time.monotonic() < deadline:
            st = json.loads(self.request("GET", f"/stats?format=json&topic={t}")[2])
            count = st["topics"][0]["message_count"] if st["topics"] else 0
            if count == 50:
                break
            time.sleep(0.05)
        self.assertEqual(count, 50)
        self.assertEqual(self.request("GET", "/ping")[0], 200)

    def test_management_errors(self):
        cases = [
            ("/topic/create", 400, "MISSING_ARG_TOPIC"),
            ("/topic/create?topic=a/b", 400, "INVALID_TOPIC"),
            (f"/topic/pause?topic={fresh()}", 404, "TOPIC_NOT_FOUND"),
            ("/channel/create?topic=a/b&channel=c", 400, "INVALID_ARG_TOPIC"),
            ("/channel/create?topic=abc", 400, "MISSING_ARG_CHANNEL"),
            ("/channel/create?topic=abc&channel=c*", 400, "INVALID_ARG_CHANNEL"),
        ]
        for path, want_status, want in cases:
            status, _, body = self.request("POST", path)
            self.assertEqual((status, json.loads(body)["message"]), (want_status, want), path)
        t = fresh()
        self.request("POST", f"/topic/create?topic={t}")
        status, _, body = self.request("POST", f"/channel/pause?topic={t}&channel=nope")
        self.assertEqual((status, json.loads(body)["message"]), (404, "CHANNEL_NOT_FOUND"))

    def test_gzip_and_zstd_bodies(self):
        t = fresh()
        gz = zlib.compressobj(6, zlib.DEFLATED, 16 + 15)
        body = gz.compress(b"a\nb\nc\n") + gz.flush()
        status, _, out = self.request("POST", f"/mpub?topic={t}", body,
                                      {"Content-Encoding": "gzip"})
        self.assertEqual((status, out), (200, b"OK"))
        self.assertEqual([m.body for m in self.consume(t, 3)], [b"a", b"b", b"c"])
        # A small gzip body that inflates past the route limit is refused.
        gz = zlib.compressobj(9, zlib.DEFLATED, 16 + 15)
        bomb = gz.compress(b"x" * (2 * 1024 * 1024)) + gz.flush()
        status, _, out = self.request("POST", f"/pub?topic={t}", bomb,
                                      {"Content-Encoding": "gzip"})
        self.assertEqual((status, json.loads(out)["message"]), (413, "MSG_TOO_BIG"))
        status, _, out = self.request("POST", f"/pub?topic={t}", b"not gzip",
                                      {"Content-Encoding": "gzip"})
        self.assertEqual((status, json.loads(out)["message"]), (400, "BAD_CONTENT_ENCODING"))
        status, _, out = self.request("POST", f"/pub?topic={t}", b"x",
                                      {"Content-Encoding": "br"})
        self.assertEqual(status, 415)
        # zstd: a frame built by hand (raw block), since the standard
        # library has no zstd: magic, header (single segment, 1-byte size),
        # one last raw block of 5 bytes.
        frame = bytes([0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x05]) + bytes([0x29, 0x00, 0x00]) + b"zstd!"
        t2 = fresh()
        status, _, out = self.request("POST", f"/pub?topic={t2}", frame,
                                      {"Content-Encoding": "zstd"})
        self.assertEqual((status, out), (200, b"OK"))
        self.assertEqual(self.consume(t2, 1)[0].body, b"zstd!")

    def test_metrics(self):
        t = fresh()
        self.request("POST", f"/pub?topic={t}", b"m")
        c = Conn(self.d.tcp_port)
        c.identify()
        c.sub(t, "mc")
        c.rdy(1)
        c.read_message()
        # On the API port /metrics needs credentials, as /v1 does.
        self.assertEqual(self.request("GET", "/metrics")[0], 401)
        status, headers, body = self.request("GET", "/metrics", headers=ADMIN)
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        text = body.decode()
        for needle in ("tern_publish_duration_seconds_bucket{le=\"+Inf\"}",
                       "tern_fsync_duration_seconds_count{log=\"partition\"}",
                       "tern_inflight_messages ", "tern_nsq_connections ",
                       f"tern_topic_messages_total{{topic=\"{t}\"}} 1",
                       f"tern_channel_in_flight{{topic=\"{t}\",channel=\"mc\"}} 1",
                       "tern_nsq_errors_total{code=\"E_INVALID\"}",
                       "tern_http_responses_total{class=\"2xx\"}", "tern_disk_high 0",
                       "tern_busy_poll_seconds_total ",
                       "tern_commit_flowing{log=\"partition\"} ",
                       "tern_commit_pace_epochs_total{log=\"channel\",way=\"flow\"} ",
                       "tern_commit_pace_switches_total{log=\"partition\"} "):
            self.assertIn(needle, text)
        # Every sample line parses: name{labels} value.
        for line in text.splitlines():
            if line and not line.startswith("#"):
                float(line.rsplit(" ", 1)[1])
        c.close()

    def metric(self, line_start):
        status, _, body = self.request("GET", "/metrics", headers=ADMIN)
        self.assertEqual(status, 200)
        for line in body.decode().splitlines():
            if line.startswith(line_start + " "):
                return float(line.rsplit(" ", 1)[1])
        self.fail(f"no {line_start} in /metrics")

    def test_commit_pace_measures_both_ways(self):
        """Under a closed-loop load of 8 publishers the partition log's
        storage thread runs measured epochs of both ways of gathering
        rounds (operations.md, "Group commit"): cohort first, then a probe
        of flow. Which one wins depends on the machine, so only that both
        were measured is checked; the choice itself is unit-tested."""
        exe = os.path.join(os.path.dirname(daemon_mod.TERND), "tern-bench")
        way = 'tern_commit_pace_epochs_total{log="partition",way="%s"}'
        t = fresh("pace")
        for _ in range(20):  # each run adds epochs; a busy machine needs more
            r = subprocess.run([exe, "--addr", f"127.0.0.1:{self.d.tcp_port}", "--producers", "8",
                                "--consumers", "0", "--batch", "1", "--size", "100",
                                "--duration", "2s", "--topic", t],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            cohort, flow = self.metric(way % "cohort"), self.metric(way % "flow")
            if cohort >= 1 and flow >= 1:
                break
        self.assertGreaterEqual(cohort, 1)
        self.assertGreaterEqual(flow, 1)
        self.assertIn(self.metric('tern_commit_flowing{log="partition"}'), (0, 1))

    # -- the server core -------------------------------------------------

    def test_404_and_405(self):
        status, _, body = self.request("GET", "/nope")
        self.assertEqual(status, 404)
        status, headers, _ = self.request("GET", "/pub?topic=x")
        self.assertEqual(status, 405)
        self.assertIn("POST", headers["Allow"])

    def test_config_log_level_and_unknown_options(self):
        """nsqd's /config/:opt: log_level reads as nsqd's number (1 debug ..
        5 fatal) and is set by name; any other option is 400 INVALID_OPTION
        (a PUT's body is checked first: an empty one is 413)."""
        v1 = {"Accept": "application/vnd.nsq; version=1.0"}

        def config(method, opt, body=None, headers=None):
            st, h, b = self.request(method, f"/config/{opt}", body, headers)
            self.assertEqual(h.get("Content-Type"), "application/json; charset=utf-8")
            self.assertEqual(h.get("X-NSQ-Content-Type"), "nsq; version=1.0")
            return st, json.loads(b)

        self.assertEqual(config("GET", "log_level"), (200, 2))  # --log-level info
        try:
            self.assertEqual(config("PUT", "log_level", b"debug"), (200, 1))
            self.assertEqual(config("GET", "log_level", headers=v1), (200, 1))
            self.assertEqual(config("PUT", "log_level", b"WARN"), (200, 3))
            self.assertEqual(config("PUT", "log_level", b"Error"), (200, 4))
            self.assertEqual(config("GET", "log_level"), (200, 4))
            for bad in (b"warning", b"verbose", b"debug\n", b"x"):
                self.assertEqual(config("PUT", "log_level", bad), (400, {"message": "INVALID_VALUE"}),
                                 bad)
            self.assertEqual(config("GET", "log_level"), (200, 4))
            self.assertEqual(config("PUT", "log_level", b""), (413, {"message": "INVALID_VALUE"}))
        finally:
            self.assertEqual(config("PUT", "log_level", b"info"), (200, 2))
        self.assertEqual(config("GET", "bogus"), (400, {"message": "INVALID_OPTION"}))
        self.assertEqual(config("GET", "bogus", headers=v1), (400, {"message": "INVALID_OPTION"}))
        self.assertEqual(config("PUT", "bogus", b"x"), (400, {"message": "INVALID_OPTION"}))
        self.assertEqual(config("PUT", "bogus", b""), (413, {"message": "INVALID_VALUE"}))
        status, headers, _ = self.request("POST", "/config/log_level")
        self.assertEqual(status, 405)
        self.assertIn("PUT", headers["Allow"])

    def test_head(self):
        status, headers, body = self.request("HEAD", "/ping")
        self.assertEqual((status, body, headers["Content-Length"]), (200, b"", "2"))

    def test_keepalive_and_pipelining(self):
        t = fresh()
        req = (f"POST /pub?topic={t} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA"
               f"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
               f"POST /pub?topic={t} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
               f"Connection: close\r\n\r\nB").encode()
        out = self.raw(req)
        self.assertEqual(out.count(b"HTTP/1.1 200 OK"), 3)
        self.assertTrue(out.endswith(b"OK"))
        self.assertEqual([m.body for m in self.consume(t, 2)], [b"A", b"B"])

    def test_chunked_body(self):
        t = fresh()
        req = (f"POST /pub?topic={t} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               f"Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").encode()
        out = self.raw(req)
        self.assertIn(b"200 OK", out)
        self.assertEqual(self.consume(t, 1)[0].body, b"hello world")

    def test_expect_continue(self):
        t = fresh()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(f"POST /pub?topic={t} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                  f"Expect: 100-continue\r\n\r\n".encode())
        self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 100 Continue"))
        s.sendall(b"abc")
        self.assertIn(b"200 OK", s.recv(1000))
        s.close()

    def test_malformed_request_line(self):
        out = self.raw(b"GARBAGE\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out)

    def test_oversized_head(self):
        head = b"GET /ping HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 70000 + b"\r\n\r\n"
        out = self.raw(head)
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:80])

    def test_declared_huge_body_refused_before_reading(self):
        t = fresh()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(f"POST /mpub?topic={t} HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Length: {1 << 30}\r\n\r\n".encode() + b"x" * 1000)
        out = s.recv(1000)
        self.assertTrue(out.startswith(b"HTTP/1.1 413"), out)
        self.assertIn(b"TOO_BIG", out)
        s.close()

    def trickle(self, data, piece=8):
        """Send data in small TCP segments; the CPU seconds ternd spent
        meanwhile, and the answer."""
        def cpu():
            with open(f"/proc/{self.d.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            before = cpu()
            for i in range(0, len(data), piece):
                s.sendall(data[i:i + piece])
                time.sleep(0.0001)  # a segment each, as a slow client sends
            out = s.recv(1000)
            return cpu() - before, out
        finally:
            s.close()

    def test_a_trickled_head_is_not_parsed_again_on_every_read(self):
        # A head parsed from its start on every read costs its length once
        # per segment: 60 KB in 8-byte segments, ~7,500 parses of 30 KB on
        # average, a third of a second of the loop for one connection.
        # Taken as cheaply as a body of that size.
        t = fresh()
        head = (b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 60000 +
                b"\r\nConnection: close\r\n\r\n")
        body = b"b" * len(head)
        head_cpu, out = self.trickle(head)
        self.assertTrue(out.startswith(b"HTTP/1.1 200 OK"), out)
        body_cpu, out = self.trickle(b"POST /pub?topic=%s HTTP/1.1\r\nHost: x\r\n"
                                     b"Connection: close\r\nContent-Length: %d\r\n\r\n"
                                     % (t.encode(), len(body)) + body)
        self.assertTrue(out.startswith(b"HTTP/1.1 200 OK"), out)
        self.assertLess(head_cpu, 2 * body_cpu + 0.05, (head_cpu, body_cpu))
        # Each line ending may cost a parse, so empty lines before a request
        # are bounded (header lines are: 100).
        lines, out, _ = self.answers(b"\r\n" * 16 + b"GET /ping HTTP/1.1\r\nHost: x\r\n"
                                     b"Connection: close\r\n\r\n")
        self.assertEqual(lines, [b"HTTP/1.1 200 OK"], out)
        self.assert_refused(b"\r\n" * 17 + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")

    def test_slow_head_times_out(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=15)
        s.sendall(b"GET /ping HTTP/1.1\r\nHo")
        start = time.monotonic()
        out = s.recv(1000)
        self.assertTrue(out.startswith(b"HTTP/1.1 408"), out)
        self.assertGreaterEqual(time.monotonic() - start, 4)
        s.close()

    def test_version_not_supported(self):
        out = self.raw(b"GET /ping HTTP/2.0\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 505"), out)

    def test_text_after_the_version_is_a_bad_request(self):
        # Only a well-formed line with another version is 505; text after
        # the version makes the line malformed.
        out = self.raw(b"GET /ping HTTP/1.1 x\r\nHost: a\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out)
        out = self.raw(b"GET /ping HTTP/1.10\r\nHost: a\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out)

    def answers(self, data, timeout=5):
        """Send raw bytes; (the answers' status lines, all bytes read,
        whether the server closed the connection within the timeout)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        out, closed = b"", False
        try:
            s.sendall(data)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                out += chunk
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed = True
        finally:
            s.close()
        return re.findall(rb"HTTP/1\.[01] [0-9]{3} [^\r\n]*", out), out, closed

    def assert_refused(self, data, status=400, code=b"BAD_REQUEST"):
        """One answer, status with code, then the connection closed."""
        lines, out, closed = self.answers(data)
        self.assertEqual(len(lines), 1, (data, out))
        self.assertTrue(lines[0].startswith(b"HTTP/1.1 %d " % status), (data, out))
        self.assertIn(code, out, data)
        self.assertIn(b"Connection: close\r\n", out, data)
        self.assertTrue(closed, data)

    def test_chunked_framing_is_strict(self):
        # RFC 9112 7.1: chunk-size [ BWS ";" chunk-ext ] CRLF, data CRLF,
        # trailer fields, CRLF. Whatever another parser could read as other
        # framing (a bare LF or CR, text after the size, an extension that is
        # no token list, a trailer line that is no field) is refused, as the
        # chunk sizes a front proxy and tern would read differently.
        t = fresh()
        head = (f"POST /pub?topic={t} HTTP/1.1\r\nHost: x\r\n"
                f"Transfer-Encoding: chunked\r\n\r\n").encode()
        for body in (b"5 6\r\nhello\r\n0\r\n\r\n",       # text after the size
                     b"5\r5\r\nhello\r\n0\r\n\r\n",        # bare CR inside the size
                     b"5\nhello\r\n0\r\n\r\n",            # bare LF after the size
                     b"5;a\nhello\r\n0\r\n\r\n",          # ... after an extension
                     b"5;a\rb\r\nhello\r\n0\r\n\r\n",     # bare CR in an extension
                     b"5;a b\r\nhello\r\n0\r\n\r\n",       # an extension no token list
                     b"5;\r\nhello\r\n0\r\n\r\n",          # an extension without a name
                     b"5;a=\"b\r\nhello\r\n0\r\n\r\n",     # an unended quoted string
                     b"5\r\nhello\n0\r\n\r\n",            # bare LF after the data
                     b"5\r\nhello\r\n0\n\r\n",            # bare LF after the last size
                     b"5\r\nhello\r\n0\r\n\n",            # bare LF ending the trailers
                     b"5\r\nhello\r\n0\r\nX: y\n\r\n",      # ... ending a trailer
                     b"5\r\nhello\r\n0\r\nno colon\r\n\r\n"):  # a trailer no field
            self.assert_refused(head + body + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n",
                                code=b"BAD_CHUNKED_BODY")
        for body in (b"5;a=b\r\nhello\r\n0\r\n\r\n",
                     b"5 ; a = \"b \\\" c\" ;d\r\nhello\r\n0\r\nX-T: y z\r\n\r\n"):
            lines, out, _ = self.answers(head + body + b"GET /ping HTTP/1.1\r\nHost: x\r\n"
                                         b"Connection: close\r\n\r\n")
            self.assertEqual(lines, [b"HTTP/1.1 200 OK"] * 2, (body, out))
        self.assertEqual([m.body for m in self.consume(t, 2)], [b"hello", b"hello"])

    def test_bare_lf_line_endings_are_refused(self):
        # A proxy that ends lines only at CRLF reads "a\nTransfer-Encoding:
        # chunked" as one header: tern must not read two.
        self.assert_refused(b"GET /ping HTTP/1.1\nHost: x\n\n")
        self.assert_refused(b"GET /ping HTTP/1.1\r\nHost: x\nX: y\r\n\r\n")
        self.assert_refused(b"GET /ping HTTP/1.1\r\nHost: x\r\n\n")

    def test_transfer_encoding_framing(self):
        # RFC 9112 6.1: chunked not last is 400 (no length can be known),
        # and an HTTP/1.0 message with Transfer-Encoding has faulty framing.
        t = fresh()
        for te in (b"gzip", b"chunked, gzip"):
            self.assert_refused(b"POST /pub?topic=%s HTTP/1.1\r\nHost: x\r\n"
                                b"Transfer-Encoding: %s\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                                % (t.encode(), te))
        self.assert_refused(b"POST /pub?topic=%s HTTP/1.1\r\nHost: x\r\n"
                            b"Transfer-Encoding: gzip, chunked\r\n\r\n" % t.encode(),
                            status=501, code=b"NOT_IMPLEMENTED")
        lines, out, closed = self.answers(
            b"POST /pub?topic=%s HTTP/1.0\r\nConnection: keep-alive\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            b"GET /ping HTTP/1.0\r\n\r\n" % t.encode())
        self.assertEqual(lines, [b"HTTP/1.1 400 Bad Request"], out)
        self.assertTrue(closed)

    def test_request_target_forms(self):
        # RFC 9112 3.2.2: a server must accept the absolute form; the
        # asterisk form is for OPTIONS alone.
        t = fresh()
        lines, out, _ = self.answers(
            b"GET http://example.com/ping HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST HTTP://x:4151/pub?topic=%s HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA"
            b"GET https://x/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            % t.encode())
        self.assertEqual(lines, [b"HTTP/1.1 200 OK"] * 3, out)
        self.assertEqual(self.consume(t, 1)[0].body, b"A")
        # RFC 9112 3.2: a Host (or an absolute form's authority) that is no
        # host[:port] is 400; an empty one is allowed.
        for host in (b"a b", b"a/b", b"u@a", b"a?b", b"a\xff"):
            self.assert_refused(b"GET /ping HTTP/1.1\r\nHost: %s\r\n\r\n" % host)
        self.assert_refused(b"GET http://a\"b/ping HTTP/1.1\r\nHost: x\r\n\r\n")
        lines, out, _ = self.answers(b"GET /ping HTTP/1.1\r\nHost: [::1]:4151\r\n\r\n"
                                     b"GET /ping HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n")
        self.assertEqual(lines, [b"HTTP/1.1 200 OK"] * 2, out)
        for target in (b"*", b"ftp://x/ping", b"http:/ping", b"http:///ping", b"http://u@x/ping",
                       b"http://"):
            self.assert_refused(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target)

    def test_options_asterisk(self):
        # RFC 9110 9.3.7: OPTIONS * asks about the server in general: 200,
        # no body, Allow with every method the server takes (was: 404).
        lines, out, _ = self.answers(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"
                                     b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(lines, [b"HTTP/1.1 200 OK"] * 2, out)
        head, rest = out.split(b"\r\n\r\n", 1)
        self.assertTrue(rest.startswith(b"HTTP/1.1 200 OK"), out)  # no body
        self.assertIn(b"\r\nContent-Length: 0", head, out)
        allow = re.search(rb"\r\nAllow: ([^\r]*)", head)
        self.assertIsNotNone(allow, out)
        methods = allow.group(1).split(b", ")
        self.assertEqual(methods, sorted(methods), out)
        for m in (b"DELETE", b"GET", b"HEAD", b"OPTIONS", b"POST", b"PUT"):
            self.assertIn(m, methods, out)

    def test_no_content_length_on_204(self):
        # RFC 9110 8.6: never in a 204; the next answer follows right after.
        t = fresh()
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        auth = ADMIN["Authorization"].encode()
        lines, out, _ = self.answers(
            b"GET /v1/topics/%s/consume HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n\r\n"
            b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            % (t.encode(), auth))
        self.assertEqual(lines, [b"HTTP/1.1 204 No Content", b"HTTP/1.1 200 OK"], out)
        head = out.split(b"\r\n\r\n", 1)[0]
        self.assertNotIn(b"content-length", head.lower(), out)


class HTTPBounds(unittest.TestCase):
    """Bounds that need their own daemon: the connection cap and the
    node-wide budget for large bodies."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-http-")
        self.d = Daemon(os.path.join(self.dir, "data"), "--http-max-connections=2",
                        "--http-large-body-budget=2MiB", "--http-body-timeout=1s",
                        "--http-idle-timeout=2s")
        self.d.wait_for("ready")
        self.port = self.d.http_port

    def tearDown(self):
        rc = self.d.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(rc, 0)

    def test_extra_connections_wait_in_the_backlog(self):
        a = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        b = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        a.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIn(b"200 OK", a.recv(1000))
        # The third connects (the kernel's backlog) but is not served...
        c = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        c.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        c.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            c.recv(1000)
        # ...until one of the first two closes.
        a.close()
        c.settimeout(5)
        self.assertIn(b"200 OK", c.recv(1000))
        b.close()
        c.close()

    def test_stalled_body_times_out(self):
        # Declares 64 KiB, sends 1 KiB, stalls: 408 once the body pauses
        # for --http-body-timeout, and the connection closes.
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(f"POST /pub?topic={fresh()} HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Length: 65536\r\n\r\n".encode() + b"x" * 1024)
        start = time.monotonic()
        out = s.recv(1000)
        self.assertTrue(out.startswith(b"HTTP/1.1 408"), out)
        self.assertGreaterEqual(time.monotonic() - start, 0.9)
        s.close()

    def test_idle_keepalive_closes(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIn(b"200 OK", s.recv(1000))
        start = time.monotonic()
        self.assertEqual(s.recv(1000), b"")  # closed by the server, silently
        self.assertGreaterEqual(time.monotonic() - start, 1.9)
        s.close()

    def rss_kib(self):
        with open(f"/proc/{self.d.proc.pid}/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS")).split()[1])

    def test_thousands_of_pipelined_requests_in_one_write(self):
        # Answered one after another from the same read: the stack stays
        # flat (each synchronous answer used to start the next request
        # from inside itself, and 3,000 of them overflowed the stack).
        n = 3000
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"GET /stats?format=json HTTP/1.1\r\nHost: x\r\n\r\n" * n)
        got = b""
        while got.count(b"HTTP/1.1 200 OK") < n:
            more = s.recv(1 << 20)
            self.assertTrue(more, f"closed after {got.count(b'HTTP/1.1 200 OK')} answers")
            got += more
        s.close()
        self.assertIsNone(self.d.proc.poll())

    def test_a_client_that_does_not_read_its_answers_is_not_read_either(self):
        # 10,000 requests for a 7 KiB asset, never read: the server stops
        # taking requests once a little output waits, rather than holding
        # 70 MB of answers.
        before = self.rss_kib()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", self.port))
        sender = threading.Thread(target=s.sendall,
                                  args=(b"GET /console/app.css HTTP/1.1\r\nHost: x\r\n\r\n" * 10000,))
        sender.start()
        deadline = time.monotonic() + 1  # within --http-idle-timeout (2 s)
        peak = before
        while time.monotonic() < deadline:  # a window to observe, not a wait
            peak = max(peak, self.rss_kib())
            self.assertLess(peak - before, 16 * 1024, "KiB of memory held for one client")
            time.sleep(0.05)
        # Reading resumes it: every answer arrives.
        s.settimeout(10)
        got, tail = 0, b""
        while got < 10000:
            more = s.recv(1 << 20)
            self.assertTrue(more, f"closed after {got} answers")
            more = tail + more
            got += more.count(b"HTTP/1.1 200 OK")
            tail = more[-14:]  # a status line cut between two reads counts once
        sender.join()
        s.close()

    def test_large_bodies_share_a_budget(self):
        t = fresh()
        # One 1.5 MiB body declared and stalled holds most of the 2 MiB...
        a = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        a.sendall(f"POST /mpub?topic={t} HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Length: {1536 * 1024}\r\n\r\n".encode() + b"x" * 1000)
        time.sleep(0.2)
        # ...so a second large one is refused with 503 and Retry-After.
        b = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        b.sendall(f"POST /mpub?topic={t} HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Length: {1536 * 1024}\r\n\r\n".encode())
        out = b.recv(1000)
        self.assertTrue(out.startswith(b"HTTP/1.1 503"), out)
        self.assertIn(b"Retry-After: 1", out)
        # Small bodies are not affected.
        status = HTTP.request(self, "POST", f"/pub?topic={t}", b"small")[0]
        self.assertEqual(status, 200)
        a.close()
        b.close()


class SlowReader(AdminDaemon, unittest.TestCase):
    """--http-idle-timeout against one long answer: a client taking a
    multi-megabyte answer slowly is not cut while it reads at some pace;
    one that reads none of it is closed after the idle timeout and its
    descriptor freed (nsqd sets no WriteTimeout and never cuts a slow
    reader; a client that never reads it can hold a connection forever)."""

    BODY = 900_000  # five of them: a consume answer of some 4.5 MB
    ARGS = ("--http-idle-timeout=1s",)

    def big_answer_request(self, close=False):
        """A socket with a small receive buffer that asked for five 900 KB
        messages in one /v1 consume answer."""
        t = fresh("slow")
        for _ in range(5):
            st, _, out = request(self.port, "POST", f"/pub?topic={t}", b"x" * self.BODY)
            self.assertEqual(st, 200, out)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", self.port))
        auth = ADMIN["Authorization"]
        last = "Connection: close\r\n" if close else ""
        s.sendall(f"GET /v1/topics/{t}/consume?max=5 HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: {auth}\r\nX-Tern-Client: slow\r\n{last}\r\n".encode())
        return s

    def server_holds(self, s):
        """Whether ternd still has a descriptor for the server side of s."""
        port = s.getsockname()[1]
        inodes = set()
        with open("/proc/net/tcp") as f:
            for line in list(f)[1:]:
                cols = line.split()
                lport = int(cols[1].split(":")[1], 16)
                rport = int(cols[2].split(":")[1], 16)
                if lport == self.port and rport == port:
                    inodes.add(cols[9])
        fds = os.listdir(f"/proc/{self.d.proc.pid}/fd")
        links = set()
        for fd in fds:
            try:
                links.add(os.readlink(f"/proc/{self.d.proc.pid}/fd/{fd}"))
            except OSError:
                pass
        return any(f"socket:[{i}]" in links for i in inodes if i != "0")

    def both_ways(self, check):
        """check(close), with a keep-alive request and a Connection: close
        one (which arms no other timer)."""
        for close in (False, True):
            with self.subTest(connection_close=close):
                check(close)

    def test_a_slow_reader_gets_the_whole_answer(self):
        self.both_ways(self.slow_read)

    def slow_read(self, close):
        s = self.big_answer_request(close)
        s.settimeout(10)
        got = b""
        end = time.monotonic() + 3  # three idle timeouts
        while time.monotonic() < end:
            more = s.recv(4096)
            self.assertTrue(more, f"closed after {len(got)} bytes")
            got += more
            time.sleep(0.1)
        while True:
            head, sep, body = got.partition(b"\r\n\r\n")
            if sep:
                n = int(next(l for l in head.split(b"\r\n")
                             if l.lower().startswith(b"content-length:")).split(b":")[1])
                if len(body) >= n:
                    break
            more = s.recv(1 << 20)
            self.assertTrue(more, f"closed after {len(got)} bytes")
            got += more
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
        self.assertEqual(len(body), n)
        msgs = json.loads(body)["messages"]
        self.assertEqual([len(m["payload"]) for m in msgs], [self.BODY] * 5)
        s.close()

    def test_a_reader_that_reads_nothing_is_closed(self):
        self.both_ways(self.no_read)

    def no_read(self, close):
        s = self.big_answer_request(close)
        time.sleep(0.3)
        self.assertTrue(self.server_holds(s))
        start = time.monotonic()
        while self.server_holds(s):
            self.assertLess(time.monotonic() - start, 5, "descriptor still held")
            time.sleep(0.1)
        self.assertGreaterEqual(time.monotonic() - start, 0.5)
        # What the kernel held arrives, then the end: the rest is gone.
        s.settimeout(10)
        got = 0
        try:
            while True:
                more = s.recv(1 << 20)
                if not more:
                    break
                got += len(more)
        except ConnectionResetError:
            pass
        self.assertLess(got, 5 * self.BODY)
        s.close()


class MetricsListener(unittest.TestCase):
    def test_separate_listener_and_topic_cap(self):
        d = tempfile.mkdtemp(prefix="tern-http-")
        try:
            dm = Daemon(os.path.join(d, "data"), "--metrics-address=127.0.0.1:0",
                        "--metrics-max-topics=1")
            dm.wait_for("ready")
            dm.wait_for("root user admin created")
            for name in ("ma", "mb", "mc"):
                c = http.client.HTTPConnection("127.0.0.1", dm.http_port, timeout=10)
                c.request("POST", f"/pub?topic={name}", body=b"x")
                c.getresponse().read()
                c.close()
            c = http.client.HTTPConnection("127.0.0.1", dm.metrics_port, timeout=10)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
            self.assertIn("tern_metrics_topics_omitted 2", text)
            self.assertEqual(text.count("tern_topic_messages_total{"), 1)
            # Not on the API port when it has a listener of its own (the
            # API port asks for credentials first, then has no such route).
            with open(os.path.join(d, "data", "admin-password")) as f:
                pw = f.read().strip()
            auth = {"Authorization": "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode()}
            for headers, want in (({}, 401), (auth, 404)):
                c = http.client.HTTPConnection("127.0.0.1", dm.http_port, timeout=10)
                c.request("GET", "/metrics", headers=headers)
                self.assertEqual(c.getresponse().status, want)
                c.close()
            self.assertEqual(dm.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class LogLevelNotice(unittest.TestCase):
    def test_notice_reads_as_its_name_and_round_trips(self):
        """tern's notice has no nsqd number: GET /config/log_level answers
        "notice", and a PUT of what GET answered (that, or a number, as
        the body) sets the level it read, so a script can put it back."""
        d = tempfile.mkdtemp(prefix="tern-http-")
        dm = None
        try:
            dm = Daemon(os.path.join(d, "data"), "--log-level=notice")
            dm.wait_for("ready")

            def config(method, body=None):
                st, _, out = request(dm.http_port, method, "/config/log_level", body)
                return st, out

            got = config("GET")
            self.assertEqual(got, (200, b'"notice"'))
            self.assertEqual(config("PUT", got[1]), (200, b'"notice"'))
            self.assertEqual(config("GET"), (200, b'"notice"'))
            self.assertEqual(config("PUT", b"NOTICE"), (200, b'"notice"'))
            # nsqd's levels read as its numbers, which PUT takes back too.
            self.assertEqual(config("PUT", b"debug"), (200, b"1"))
            self.assertEqual(config("PUT", b"1"), (200, b"1"))
            self.assertEqual(config("PUT", b"5"), (200, b"4"))  # nsqd's fatal: error
            for bad in (b"0", b"6", b"2.5", b"notice\n", b'"notice', b'"2"'):
                self.assertEqual(config("PUT", bad), (400, b'{"message":"INVALID_VALUE"}'), bad)
            self.assertEqual(config("PUT", got[1]), (200, b'"notice"'))
            dm.wait_for('log level set to notice by PUT /config')
        finally:
            if dm is not None:
                self.assertEqual(dm.stop(), 0)
            shutil.rmtree(d, ignore_errors=True)


class FakeLookupd:
    """An nsqlookupd stand-in speaking its TCP protocol: records IDENTIFY
    bodies and REGISTER/UNREGISTER lines, answers OK frames."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.events = []
        self.identities = []
        self.closed = 0  # connections the node closed
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        buf = b""

        def need(n):
            nonlocal buf
            while len(buf) < n:
                chunk = conn.recv(65536)
                if not chunk:
                    raise EOFError
                buf += chunk

        ok = struct.pack(">Ii", 6, 0) + b"OK"
        try:
            need(4)
            assert buf[:4] == b"  V1"
            buf = buf[4:]
            while True:
                while b"\n" not in buf:
                    need(len(buf) + 1)
                line, buf = buf.split(b"\n", 1)
                if line == b"IDENTIFY":
                    need(4)
                    n = struct.unpack(">I", buf[:4])[0]
                    need(4 + n)
                    with self.lock:
                        self.identities.append(json.loads(buf[4:4 + n]))
                    buf = buf[4 + n:]
                elif line != b"PING":
                    with self.lock:
                        self.events.append(line.decode())
                conn.sendall(ok)
        except EOFError:
            with self.lock:
                self.closed += 1
            conn.close()
        except (OSError, AssertionError):
            conn.close()

    def wait_for(self, event, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if event in self.events:
                    return True
            time.sleep(0.05)
        raise AssertionError(f"lookupd never saw {event!r}; saw {self.events}")

    def wait_until(self, what, cond, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if cond():
                    return
            time.sleep(0.05)
        raise AssertionError(f"lookupd never saw {what}; saw {self.events}, "
                             f"{len(self.identities)} IDENTIFY, {self.closed} closed")

    def close(self):
        self.sock.close()


class LookupdRegistration(unittest.TestCase):
    def test_registers_and_follows_changes(self):
        lk = FakeLookupd()
        d = tempfile.mkdtemp(prefix="tern-http-")
        try:
            data = os.path.join(d, "data")
            dm = Daemon(data, f"--lookupd-tcp-address=127.0.0.1:{lk.port}",
                        "--broadcast-address=127.0.0.1")
            dm.wait_for("ready")
            c = http.client.HTTPConnection("127.0.0.1", dm.http_port, timeout=10)
            c.request("POST", "/pub?topic=lkt", body=b"x")
            c.getresponse().read()
            lk.wait_for("REGISTER lkt")
            ident = lk.identities[0]
            self.assertEqual((ident["tcp_port"], ident["http_port"]), (dm.tcp_port, dm.http_port))
            self.assertEqual(ident["broadcast_address"], "127.0.0.1")
            c.request("POST", "/channel/create?topic=lkt&channel=lkc")
            c.getresponse().read()
            lk.wait_for("REGISTER lkt lkc")
            c.request("POST", "/channel/delete?topic=lkt&channel=lkc")
            c.getresponse().read()
            lk.wait_for("UNREGISTER lkt lkc")
            c.close()
            self.assertEqual(dm.stop(), 0)
            # A restart registers what is on disk; nsqd's config spelling works.
            conf = os.path.join(d, "nsqd.cfg")
            with open(conf, "w") as f:
                f.write(f'nsqlookupd_tcp_addresses = ["127.0.0.1:{lk.port}"]\n')
            with lk.lock:
                lk.events.clear()
            dm = Daemon(data, f"--config={conf}")
            dm.wait_for("ready")
            lk.wait_for("REGISTER lkt")
            self.assertEqual(dm.stop(), 0)
        finally:
            lk.close()
            shutil.rmtree(d, ignore_errors=True)

    def test_put_config_moves_the_registration(self):
        """nsqd's PUT /config/nsqlookupd_tcp_addresses: the new lookupds get
        IDENTIFY and every REGISTER, the connections to dropped ones close;
        GET answers the list as set; nothing of it survives a restart."""
        a, b = FakeLookupd(), FakeLookupd()
        d = tempfile.mkdtemp(prefix="tern-http-")
        dm = None
        try:
            data = os.path.join(d, "data")
            dm = Daemon(data, "--broadcast-address=127.0.0.1")
            dm.wait_for("ready")

            def config(method, body=None):
                c = http.client.HTTPConnection("127.0.0.1", dm.http_port, timeout=10)
                try:
                    c.request(method, "/config/nsqlookupd_tcp_addresses", body=body)
                    r = c.getresponse()
                    self.assertEqual(r.getheader("Content-Type"), "application/json; charset=utf-8")
                    return r.status, json.loads(r.read())
                finally:
                    c.close()

            c = http.client.HTTPConnection("127.0.0.1", dm.http_port, timeout=10)
            for path in ("/topic/create?topic=mvt", "/channel/create?topic=mvt&channel=mvc"):
                c.request("POST", path)
                self.assertEqual(c.getresponse().read(), b"")
            c.close()
            self.assertEqual(config("GET"), (200, []))
            # No lookupd was configured: the first PUT starts registering.
            addr_a, addr_b = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
            self.assertEqual(config("PUT", json.dumps([addr_a])), (200, [addr_a]))
            a.wait_for("REGISTER mvt mvc")
            a.wait_for("REGISTER mvt")
            self.assertEqual(a.identities[0]["broadcast_address"], "127.0.0.1")
            self.assertEqual(config("GET"), (200, [addr_a]))
            # Moving to b: b hears everything, a's connection closes.
            self.assertEqual(config("PUT", json.dumps([addr_b])), (200, [addr_b]))
            b.wait_for("REGISTER mvt mvc")
            a.wait_until("its connection closed", lambda: a.closed == 1)
            self.assertEqual(len(b.identities), 1)
            self.assertEqual(config("GET"), (200, [addr_b]))
            # Both: b's connection stays as it is, a registers anew.
            with a.lock:
                a.events.clear()
            self.assertEqual(config("PUT", json.dumps([addr_b, addr_a])), (200, [addr_b, addr_a]))
            a.wait_for("REGISTER mvt mvc")
            self.assertEqual((len(a.identities), len(b.identities), b.closed), (2, 1, 0))
            # nsqd's answers to bad bodies; the list stays.
            for bad in (b"notjson", b'"x"', b"[1]", b'["x", 2]', b"{}", b"[[]]", b"[] []"):
                self.assertEqual(config("PUT", bad), (400, {"message": "INVALID_VALUE"}), bad)
            self.assertEqual(config("PUT", b""), (413, {"message": "INVALID_VALUE"}))
            self.assertEqual(config("GET"), (200, [addr_b, addr_a]))
            # An address nsqd cannot dial is taken as it takes it (and logged).
            self.assertEqual(config("PUT", b'["nohost"]'), (200, ["nohost"]))
            a.wait_until("its second connection closed", lambda: a.closed == 2)
            b.wait_until("its connection closed", lambda: b.closed == 1)
            self.assertEqual(config("PUT", b"[]"), (200, []))
            self.assertEqual(config("PUT", b"null"), (200, None))
            self.assertEqual(config("PUT", json.dumps([addr_a])), (200, [addr_a]))
            a.wait_until("a third IDENTIFY", lambda: len(a.identities) == 3)
            self.assertEqual(dm.stop(), 0)
            # Not persisted, as in nsqd: a restart has the flags' list.
            dm = Daemon(data)
            dm.wait_for("ready")
            self.assertEqual(config("GET"), (200, []))
            rc, dm = dm.stop(), None
            self.assertEqual(rc, 0)
        finally:
            if dm is not None:
                dm.stop()
            a.close()
            b.close()
            shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
