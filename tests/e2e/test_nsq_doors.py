#!/usr/bin/env python3
"""End-to-end tests of the places where the NSQ doors follow nsqd 1.3
exactly, against the real ternd (each checked against a real nsqd 1.3.0
run beside it): nsqd's name rule (64 characters with #ephemeral counted),
ephemeral topics (memory only, gone with their last channel), the bad
magic answer, /stats client and producer entries (TLS fields included),
the v1 response header, /topic/empty and /topic/pause, /mpub's
BODY_TOO_BIG, and the less used requests (NsqdEdges); and a few
compared with nsqd's and nsqlookupd's 1.3.0 source (SourceEdges)."""
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
import urllib.parse
import uuid

import daemon as daemon_mod
from daemon import Daemon
from nsqwire import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Conn
from test_nsq import certs, client_context

PASSWORD = "doors-tests-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
V1 = "nsq; version=1.0"


def fresh(prefix="d", n=10):
    return f"{prefix}{uuid.uuid4().hex[:n]}"


def q(s):
    return urllib.parse.quote(s, safe="")


class Base(unittest.TestCase):
    """A real ternd (with a known root password) per test class, and the
    NSQ connections a test opens, closed after it. test_access.py builds
    on it too."""
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-doors-")
        cls.data = os.path.join(cls.dir, "data")
        cls.start()
        cls.d.wait_for("root user admin created")

    @classmethod
    def start(cls):
        cls.d = Daemon(cls.data, *cls.ARGS, env=dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD))
        cls.d.wait_for("ready")
        cls.port = cls.d.tcp_port
        cls.http = cls.d.http_port

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    def setUp(self):
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()

    def conn(self, **identify):
        """A connection that has IDENTIFYed; the answer is c.identified."""
        c = Conn(self.port)
        self.conns.append(c)
        c.identified = c.identify(**identify)
        return c

    @classmethod
    def request(cls, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", cls.http, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def http_error(self, method, path, body=b""):
        st, h, out = self.request(method, path, body)
        return st, json.loads(out)["message"]

    def refused(self, cases):
        """Each (path, status, code) POSTed (with a body for /pub and
        /mpub) is answered status with that code."""
        for path, status, code in cases:
            body = b"x" if path.startswith(("/pub", "/mpub")) else b""
            self.assertEqual(self.http_error("POST", path, body), (status, code), path)

    def stats(self, topic=""):
        path = "/stats?format=json" + (f"&topic={q(topic)}" if topic else "")
        status, _, body = self.request("GET", path)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def topic_stats(self, topic):
        topics = self.stats(topic)["topics"]
        return topics[0] if topics else None

    def assertError(self, frame, code):
        kind, data = frame
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(code.encode()), data)

    def until(self, what, fn, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = fn()
            if v:
                return v
            time.sleep(0.05)
        self.fail(f"never: {what}")


class Names(Base):
    def test_tcp_names_at_64_and_65(self):
        ok64, bad65 = fresh("n", 10) + "x" * 53, fresh("n", 10) + "x" * 54
        eph64 = fresh("e", 10) + "x" * 43 + "#ephemeral"
        eph65 = fresh("e", 10) + "x" * 44 + "#ephemeral"
        self.assertEqual((len(ok64), len(bad65), len(eph64), len(eph65)), (64, 65, 64, 65))
        c = self.conn()
        self.assertEqual(c.pub(ok64, b"a"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.pub(eph64, b"a"), (FRAME_RESPONSE, b"OK"))
        self.assertError(c.pub(bad65, b"a"), "E_BAD_TOPIC")
        c = self.conn()
        self.assertError(c.pub(eph65, b"a"), "E_BAD_TOPIC")
        c = self.conn()
        self.assertError(c.sub(bad65, "ch"), "E_BAD_TOPIC")
        c = self.conn()
        self.assertError(c.sub(ok64, "c" * 65), "E_BAD_CHANNEL")
        c = self.conn()
        self.assertError(c.sub(ok64, "c" * 55 + "#ephemeral"), "E_BAD_CHANNEL")
        c = self.conn()
        self.assertEqual(c.sub(ok64, "c" * 54 + "#ephemeral"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(len(self.stats(ok64)["topics"][0]["channels"]), 1)

    def test_http_names_at_64_and_65(self):
        ok64, bad65 = fresh("h", 10) + "y" * 53, fresh("h", 10) + "y" * 54
        self.assertEqual(self.request("POST", f"/pub?topic={ok64}", b"m")[0], 200)
        st, _, body = self.request("POST", f"/pub?topic={bad65}", b"m")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_TOPIC"}))
        st, _, body = self.request("POST", f"/topic/create?topic={bad65}")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_TOPIC"}))
        st, _, body = self.request("POST", f"/channel/create?topic={ok64}&channel={'c' * 65}")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_ARG_CHANNEL"}))
        eph = fresh("h", 10) + "z" * 44 + "#ephemeral"  # 65 with the suffix
        st, _, body = self.request("POST", f"/pub?topic={q(eph)}", b"m")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_TOPIC"}))
        eph = eph[:-11] + "#ephemeral"  # 64
        self.assertEqual(self.request("POST", f"/pub?topic={q(eph)}", b"m")[0], 200)

    def test_missing_topics_and_channels_by_any_name(self):
        # nsqd 1.3.0's /topic/delete, /topic/pause and /topic/unpause do not
        # check the name: a topic that cannot exist is one it does not have
        # (404 TOPIC_NOT_FOUND); /topic/empty and the channel endpoints do.
        ok, bad65 = fresh("m", 10), fresh("m", 10) + "y" * 55
        for op in ("delete", "pause", "unpause"):
            for name in (ok, bad65, "a%2Fb"):
                st, _, body = self.request("POST", f"/topic/{op}?topic={name}")
                self.assertEqual((st, json.loads(body)), (404, {"message": "TOPIC_NOT_FOUND"}),
                                 (op, name))
        st, _, body = self.request("POST", f"/topic/empty?topic={bad65}")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_TOPIC"}))
        st, _, body = self.request("POST", f"/channel/delete?topic={ok}&channel=c")
        self.assertEqual((st, json.loads(body)), (404, {"message": "TOPIC_NOT_FOUND"}))
        self.assertEqual(self.request("POST", f"/topic/create?topic={ok}")[0], 200)
        st, _, body = self.request("POST", f"/channel/delete?topic={ok}&channel=c")
        self.assertEqual((st, json.loads(body)), (404, {"message": "CHANNEL_NOT_FOUND"}))
        st, _, body = self.request("POST", f"/channel/delete?topic={bad65}&channel=c")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_ARG_TOPIC"}))

    def test_a_long_v1_topic_is_not_seen_by_the_nsq_doors(self):
        long = fresh("v", 10) + "w" * 90
        st, _, body = self.request("POST", "/v1/topics", json.dumps({"name": long}).encode(),
                                   dict(ADMIN, **{"Content-Type": "application/json"}))
        self.assertEqual(st, 201, body)
        self.assertNotIn(long, [t["topic_name"] for t in self.stats()["topics"]])
        self.assertNotIn(long, json.loads(self.request("GET", "/topics")[2])["topics"])
        self.assertEqual(self.request("GET", f"/lookup?topic={long}")[0], 404)
        st, _, body = self.request("POST", f"/pub?topic={long}", b"m")
        self.assertEqual((st, json.loads(body)), (400, {"message": "INVALID_TOPIC"}))
        c = self.conn()
        self.assertError(c.pub(long, b"m"), "E_BAD_TOPIC")


class Ephemeral(Base):
    def topic_dirs(self):
        d = os.path.join(self.data, "topics")
        return os.listdir(d) if os.path.isdir(d) else []

    def test_held_for_the_first_channel_then_gone_with_the_last(self):
        t = fresh("eph") + "#ephemeral"
        p = self.conn()
        for body in (b"one", b"two"):
            self.assertEqual(p.pub(t, body), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(self.topic_stats(t)["depth"], 2)
        # Never on disk, never in the metastore.
        self.assertFalse([n for n in self.topic_dirs() if "#" in n])
        st = self.request("GET", f"/v1/topics/{q(t)}", headers=ADMIN)[0]
        self.assertIn(st, (400, 404))
        c = self.conn()
        self.assertEqual(c.sub(t, "watch#ephemeral"), (FRAME_RESPONSE, b"OK"))
        c.rdy(5)
        got = [c.read_message() for _ in range(2)]
        self.assertEqual([m.body for m in got], [b"one", b"two"])
        for m in got:
            c.fin(m.id)
        self.assertEqual(p.pub(t, b"three"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.read_message().body, b"three")
        c.close()
        self.until("the topic goes with its last channel", lambda: self.topic_stats(t) is None)
        self.assertNotIn(t, json.loads(self.request("GET", "/topics")[2])["topics"])

    def test_a_durable_named_channel_is_in_memory_too_and_its_deletion_ends_the_topic(self):
        t = fresh("eph") + "#ephemeral"
        self.assertEqual(self.request("POST", f"/pub?topic={q(t)}", b"m1")[0], 200)
        self.assertEqual(self.request("POST", f"/channel/create?topic={q(t)}&channel=work")[0], 200)
        c = self.conn()
        self.assertEqual(c.sub(t, "work"), (FRAME_RESPONSE, b"OK"))
        c.rdy(1)
        self.assertEqual(c.read_message().body, b"m1")
        c.close()
        # A durable-named channel outlives its consumer, so the topic stays.
        time.sleep(0.3)
        self.assertIsNotNone(self.topic_stats(t))
        self.assertFalse([n for n in self.topic_dirs() if "#" in n])
        self.assertEqual(self.request("POST", f"/channel/delete?topic={q(t)}&channel=work")[0], 200)
        self.until("the topic goes with its last channel", lambda: self.topic_stats(t) is None)

    def test_full_is_refused_not_dropped(self):
        t = fresh("full") + "#ephemeral"
        c = self.conn()
        # An ephemeral topic holds 10,000 messages at most (nsqd's mem-queue-size).
        self.assertEqual(c.mpub(t, [b"x"] * 10000), (FRAME_RESPONSE, b"OK"))
        kind, data = c.pub(t, b"one too many")
        self.assertEqual(kind, FRAME_ERROR)
        self.assertTrue(data.startswith(b"E_PUB_FAILED"), data)
        self.assertIn(b"ephemeral", data)
        st, _, body = self.request("POST", f"/pub?topic={q(t)}", b"m")
        self.assertEqual((st, json.loads(body)), (503, {"message": "EPHEMERAL_TOPIC_FULL"}))
        # Consumed, it takes publishes again.
        c = self.conn()
        self.assertEqual(c.sub(t, "drain#ephemeral"), (FRAME_RESPONSE, b"OK"))
        c.rdy(2500)
        for _ in range(10000):
            m = c.read_message()
            c.fin(m.id)
        p = self.conn()
        self.until("room again", lambda: p.pub(t, b"again") == (FRAME_RESPONSE, b"OK"))

    def test_gone_after_a_restart(self):
        t = fresh("gone") + "#ephemeral"
        self.assertEqual(self.request("POST", f"/pub?topic={q(t)}", b"m")[0], 200)
        self.assertIsNotNone(self.topic_stats(t))
        self.assertEqual(self.d.stop(), 0)
        type(self).start()
        self.assertIsNone(self.topic_stats(t))


class BadMagic(Base):
    def test_bad_magic_gets_e_bad_protocol_then_close(self):
        for magic in (b"  V1", b"GET / HTTP/1.1\r\n\r\n"):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            try:
                s.sendall(magic)
                data = b""
                while True:
                    try:
                        chunk = s.recv(4096)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    data += chunk
            finally:
                s.close()
            self.assertEqual(data, struct.pack(">ii", 18, FRAME_ERROR) + b"E_BAD_PROTOCOL", magic)


class Stats(Base):
    CLIENT_KEYS = ["client_id", "hostname", "version", "remote_address", "state", "ready_count",
                   "in_flight_count", "message_count", "finish_count", "requeue_count",
                   "connect_ts", "sample_rate", "deflate", "snappy", "user_agent"]
    TLS_KEYS = ["tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
                "tls_negotiated_protocol_is_mutual"]

    def test_producers_are_listed_with_their_pub_counts(self):
        t, other = fresh("prod"), fresh("prod")
        p = self.conn(client_id="producer", hostname="prodhost", user_agent="probe/1.0")
        self.assertEqual(p.mpub(t, [b"a", b"b", b"c"]), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(p.pub(other, b"d"), (FRAME_RESPONSE, b"OK"))
        st = self.stats(t)
        [prod] = [x for x in st["producers"] if x["client_id"] == "producer"]
        self.assertEqual(list(prod), self.CLIENT_KEYS + ["pub_counts"] + self.TLS_KEYS)
        self.assertEqual((prod["hostname"], prod["user_agent"], prod["state"]),
                         ("prodhost", "probe/1.0", 0))
        # Filtered by the topic asked for, as nsqd does.
        self.assertEqual(prod["pub_counts"], [{"topic": t, "count": 3}])
        [prod] = [x for x in self.stats()["producers"] if x["client_id"] == "producer"]
        self.assertEqual(sorted((c["topic"], c["count"]) for c in prod["pub_counts"]),
                         sorted([(t, 3), (other, 1)]))
        # A connection that has not published is no producer; include_clients=false hides them.
        self.conn(client_id="idle")
        self.assertNotIn("idle", [x["client_id"] for x in self.stats()["producers"]])
        body = json.loads(self.request("GET", "/stats?format=json&include_clients=false")[2])
        self.assertIsNone(body["producers"])
        p.close()
        self.until("a closed producer leaves the list",
                   lambda: "producer" not in [x["client_id"] for x in
                                              (self.stats()["producers"] or [])])


class TLSStats(Base):
    @classmethod
    def setUpClass(cls):
        d = certs()
        cls.ARGS = (f"--tls-cert={d}/server.pem", f"--tls-key={d}/server.key")
        super().setUpClass()

    def test_tls_fields_over_tls_and_without(self):
        t = fresh("tls")
        c = Conn(self.port)
        self.conns.append(c)
        r = c.identify(tls_v1=True, client_id="tls-consumer")
        self.assertTrue(r["tls_v1"])
        c.start_tls(client_context())
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.sub(t, "c"), (FRAME_RESPONSE, b"OK"))
        c.rdy(1)
        plain = self.conn(client_id="plain-consumer")
        self.assertEqual(plain.sub(t, "c2"), (FRAME_RESPONSE, b"OK"))
        plain.rdy(1)
        chans = {ch["channel_name"]: ch for ch in self.topic_stats(t)["channels"]}
        [tc] = chans["c"]["clients"]
        self.assertEqual(list(tc), Stats.CLIENT_KEYS + Stats.TLS_KEYS)
        self.assertTrue(tc["tls"])
        self.assertIn(tc["tls_version"], ("TLS1.2", "TLS1.3"))
        self.assertRegex(tc["tls_cipher_suite"], r"^TLS_[A-Z0-9_]+$")
        self.assertEqual((tc["tls_negotiated_protocol"], tc["tls_negotiated_protocol_is_mutual"]),
                         ("", True))
        [pc] = chans["c2"]["clients"]
        self.assertEqual([pc[k] for k in Stats.TLS_KEYS], [False, "", "", "", False])


class V1Header(Base):
    def test_the_v1_header_on_every_endpoint(self):
        t = fresh("hdr")
        asks = {"Accept": "application/vnd.nsq; version=1.0"}
        for headers in ({}, asks):
            for method, path, body in (("GET", "/info", None), ("GET", "/stats", None),
                                       ("GET", "/stats?format=json", None),
                                       ("POST", f"/pub?topic={t}", b"m"),
                                       ("POST", f"/mpub?topic={t}", b"a\nb"),
                                       ("POST", f"/topic/create?topic={t}", None),
                                       ("POST", f"/channel/create?topic={t}&channel=c", None),
                                       ("POST", "/pub", b"m"),
                                       ("POST", "/topic/delete?topic=nosuchtopic", None),
                                       ("GET", f"/lookup?topic={t}", None),
                                       ("GET", "/topics", None), ("GET", "/nodes", None)):
                st, h, _ = self.request(method, path, body, headers)
                self.assertEqual(h.get("x-nsq-content-type"), V1, (path, headers, st))
        # /ping is plain text in nsqd; tern adds the header only when asked.
        self.assertNotIn("x-nsq-content-type", self.request("GET", "/ping")[1])
        st, h, body = self.request("GET", "/ping", headers=asks)
        self.assertEqual((st, h.get("x-nsq-content-type"), body), (200, V1, b"OK"))
        # Errors are {"message": ...} either way.
        st, h, body = self.request("POST", "/pub", b"m", asks)
        self.assertEqual((st, json.loads(body)), (400, {"message": "MISSING_ARG_TOPIC"}))


class EmptyAndPause(Base):
    def test_topic_empty_drops_what_the_topic_holds_for_good(self):
        t = fresh("empty")
        self.assertEqual(self.request("POST", f"/mpub?topic={t}", b"a\nb\nc")[0], 200)
        self.assertEqual(self.topic_stats(t)["depth"], 3)
        st, h, body = self.request("POST", f"/topic/empty?topic={t}")
        self.assertEqual((st, body, h.get("x-nsq-content-type")), (200, b"", V1))
        self.assertEqual(self.topic_stats(t)["depth"], 0)
        self.assertEqual(self.topic_stats(t)["message_count"], 3)
        # It stays dropped across a restart, and the first channel starts after it.
        self.assertEqual(self.d.stop(), 0)
        type(self).start()
        self.assertEqual(self.topic_stats(t)["depth"], 0)
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"after")[0], 200)
        c = self.conn()
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(10)
        m = c.read_message()
        self.assertEqual(m.body, b"after")
        c.fin(m.id)
        c.sock.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            c.read_frame()

    def test_topic_empty_leaves_channels_alone(self):
        t = fresh("empty")
        self.assertEqual(self.request("POST", f"/channel/create?topic={t}&channel=c")[0], 404)
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        self.assertEqual(self.request("POST", f"/channel/create?topic={t}&channel=c")[0], 200)
        self.assertEqual(self.request("POST", f"/mpub?topic={t}", b"a\nb")[0], 200)
        self.assertEqual(self.request("POST", f"/topic/empty?topic={t}")[0], 200)
        ts = self.topic_stats(t)
        self.assertEqual((ts["depth"], ts["channels"][0]["depth"]), (0, 2))

    def test_topic_pause_holds_new_messages_at_the_topic(self):
        t = fresh("pause")
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"before")[0], 200)
        c = self.conn()
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(self.request("POST", f"/topic/pause?topic={t}")[0], 200)
        for body in (b"p1", b"p2", b"p3"):
            self.assertEqual(self.request("POST", f"/pub?topic={t}", body)[0], 200)
        ts = self.topic_stats(t)
        self.assertTrue(ts["paused"])
        self.assertEqual((ts["depth"], ts["channels"][0]["depth"]), (3, 1))
        # What the channel had before the pause is still delivered; the rest is held.
        c.rdy(10)
        m = c.read_message()
        self.assertEqual(m.body, b"before")
        c.fin(m.id)
        c.sock.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            c.read_frame()
        c.sock.settimeout(10)
        self.assertEqual(self.request("POST", f"/topic/unpause?topic={t}")[0], 200)
        got = [c.read_message() for _ in range(3)]
        self.assertEqual([m.body for m in got], [b"p1", b"p2", b"p3"])
        ts = self.topic_stats(t)
        self.assertEqual((ts["paused"], ts["depth"]), (False, 0))

    def test_empty_while_paused_drops_the_held_messages(self):
        t = fresh("pause")
        c = self.conn()
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(self.request("POST", f"/topic/pause?topic={t}")[0], 200)
        self.assertEqual(self.request("POST", f"/mpub?topic={t}", b"x\ny")[0], 200)
        self.assertEqual(self.topic_stats(t)["depth"], 2)
        self.assertEqual(self.request("POST", f"/topic/empty?topic={t}")[0], 200)
        self.assertEqual(self.topic_stats(t)["depth"], 0)
        self.assertEqual(self.request("POST", f"/topic/unpause?topic={t}")[0], 200)
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"z")[0], 200)
        c.rdy(10)
        self.assertEqual(c.read_message().body, b"z")


class Limits(Base):
    ARGS = ("--max-body-size=4096", "--max-msg-size=1024")

    def test_mpub_over_max_body_size_is_body_too_big(self):
        t = fresh("big")
        st, h, body = self.request("POST", f"/mpub?topic={t}", b"x" * 100 + (b"\n" + b"y" * 900) * 5)
        self.assertEqual((st, json.loads(body)), (413, {"message": "BODY_TOO_BIG"}))
        st, _, body = self.request("POST", f"/pub?topic={t}", b"x" * 1025)
        self.assertEqual((st, json.loads(body)), (413, {"message": "MSG_TOO_BIG"}))
        self.assertEqual(self.request("POST", f"/mpub?topic={t}", b"a\nb")[0], 200)


class NsqdEdges(Base):
    """Less used requests, each answered as nsqd 1.3.0 answers it (checked
    beside a real one)."""

    def test_an_empty_argument_is_there_but_invalid(self):
        # nsqd tells a missing topic= or channel= from an empty one: the
        # empty one fails the name check.
        t = fresh("ea")
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        cases = [
            ("/pub?topic=", 400, "INVALID_TOPIC"),
            ("/mpub?topic=", 400, "INVALID_TOPIC"),
            ("/topic/create?topic=", 400, "INVALID_TOPIC"),
            ("/topic/empty?topic=", 400, "INVALID_TOPIC"),
            ("/topic/delete?topic=", 404, "TOPIC_NOT_FOUND"),
            ("/channel/create?topic=&channel=c", 400, "INVALID_ARG_TOPIC"),
            (f"/channel/create?topic={t}&channel=", 400, "INVALID_ARG_CHANNEL"),
            (f"/channel/delete?topic={t}&channel=", 400, "INVALID_ARG_CHANNEL"),
            ("/pub", 400, "MISSING_ARG_TOPIC"),
            (f"/channel/create?topic={t}", 400, "MISSING_ARG_CHANNEL"),
        ]
        self.refused(cases)


    def test_binary_mpub_faults_past_the_count_are_the_messages(self):
        # nsqd's readMPUB: a fault in the count is BAD_BODY, every fault
        # after it BAD_MESSAGE (413 both).
        t = fresh("bm")
        over = 1024 * 1024 + 1
        cases = [
            (b"\0\0", "BAD_BODY"),
            (struct.pack(">I", 0), "BAD_BODY"),
            (struct.pack(">II", 2, 1) + b"a", "BAD_MESSAGE"),  # no second size
            (struct.pack(">II", 1, 5) + b"ab", "BAD_MESSAGE"),  # cut short
            (struct.pack(">II", 1, 0), "BAD_MESSAGE"),
            (struct.pack(">II", 1, 2**31) + b"ab", "BAD_MESSAGE"),  # negative
            (struct.pack(">II", 1, over) + b"x" * 64, "BAD_MESSAGE"),
        ]
        for body, code in cases:
            self.assertEqual(self.http_error("POST", f"/mpub?topic={t}&binary=true", body),
                             (413, code), body)
        # Text mode calls a long line MSG_TOO_BIG, as nsqd's does.
        self.assertEqual(self.http_error("POST", f"/mpub?topic={t}", b"x" * over + b"\ny"),
                         (413, "MSG_TOO_BIG"))


    def test_an_empty_number_is_zero(self):
        # nsqd parses numbers with ByteToBase10, which reads "" as 0:
        # "RDY " is RDY 0, "REQ <id> " a REQ without delay, "DPUB t " a
        # DPUB without one.
        t = fresh("en")
        c = self.conn()
        c.cmd(f"DPUB {t} ", b"m")
        self.assertEqual(c.read_response(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(1)
        m = c.read_message()
        self.assertEqual((m.body, m.attempts), (b"m", 1))
        c.cmd("RDY ")  # 0: nothing more is sent
        c.cmd(f"REQ {m.id} ")
        c.cmd("NOP")
        self.assertEqual(self.until("requeued", lambda: self.topic_stats(t)["channels"][0]
                                    ["requeue_count"]), 1)
        c.rdy(1)
        m = c.read_message()
        self.assertEqual((m.body, m.attempts), (b"m", 2))


    def subscribed(self, prefix):
        c = self.conn()
        self.assertEqual(c.sub(fresh(prefix), "ch"), (FRAME_RESPONSE, b"OK"))
        return c

    def test_message_ids_are_checked_by_length_only(self):
        # nsqd's getMessageID checks the length: 16 bytes that are no ID
        # of its are not in flight (E_*_FAILED, the connection stays);
        # any other length is fatal, in nsqd's words.
        c = self.subscribed("id")
        for cmd, code in (("FIN", "E_FIN_FAILED"), ("REQ", "E_REQ_FAILED"),
                          ("TOUCH", "E_TOUCH_FAILED")):
            c.cmd(f"{cmd} zzzzzzzzzzzzzzzz" + (" 0" if cmd == "REQ" else ""))
            self.assertEqual(c.read_response(), (
                FRAME_ERROR, f"{code} {cmd} zzzzzzzzzzzzzzzz failed ID not in flight".encode()))
        for line, text in (("FIN abc", "E_INVALID invalid message ID"),
                           ("REQ 00000000000000000 0", "E_INVALID invalid message ID"),
                           ("TOUCH", "E_INVALID TOUCH insufficient number of params"),
                           ("FIN", "E_INVALID FIN insufficient number of params"),
                           ("REQ 0000000000000000", "E_INVALID REQ insufficient number of params")):
            c.cmd(line)
            self.assertEqual(c.read_response(), (FRAME_ERROR, text.encode()), line)
            self.assertTrue(c.expect_closed(), line)
            c = self.subscribed("id")


    def test_auth_after_sub_is_out_of_state_before_disabled(self):
        # nsqd checks the state first: AUTH after SUB is E_INVALID even
        # where AUTH is disabled.
        c = self.subscribed("au")
        c.cmd("AUTH", b"secret")
        self.assertEqual(c.read_response(),
                         (FRAME_ERROR, b"E_INVALID cannot AUTH in current state"))
        self.assertTrue(c.expect_closed())


    def test_unbuffered_output_is_a_one_byte_buffer(self):
        # nsqd answers output_buffer_size -1 with the 1-byte buffer it
        # makes, and no timeout; messages still go out at once.
        t = fresh("ob")
        c = self.conn(output_buffer_size=-1, output_buffer_timeout=1000)
        self.assertEqual((c.identified["output_buffer_size"],
                          c.identified["output_buffer_timeout"]), (1, 0))
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(5)
        p = self.conn()
        self.assertEqual(p.pub(t, b"now"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.read_message().body, b"now")


    def raw_http(self, data, wait=10):
        """Send data on a fresh socket; what came back before the server
        closed it, and whether it did within wait seconds."""
        s = socket.create_connection(("127.0.0.1", self.http), timeout=wait)
        try:
            s.sendall(data)
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    return out, False
                if not chunk:
                    return out, True
                out += chunk
        finally:
            s.close()

    def test_the_servers_own_answers_honour_close_and_head(self):
        # nsqd (Go's net/http) closes after any answer to a request that
        # asked it to, and answers HEAD with the head alone.
        for req in (b"GET /nosuch HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"DELETE /pub?topic=t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /pub?topic=t HTTP/1.0\r\n\r\n"):
            out, closed = self.raw_http(req)
            self.assertTrue(closed, req)
            self.assertRegex(out, rb"^HTTP/1\.[01] 40[45] ", req)
            self.assertNotIn(b"keep-alive", out.lower(), req)
        # A HEAD refused has no body: the next answer on the connection
        # is read whole and right.
        out, closed = self.raw_http(b"HEAD /pub?topic=t HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertTrue(closed)
        first, _, rest = out.partition(b"\r\n\r\n")
        self.assertTrue(first.startswith(b"HTTP/1.1 405 "), out)
        self.assertTrue(rest.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertTrue(rest.endswith(b"\r\n\r\nOK"), out)


    def test_the_v1_header_on_the_servers_own_answers(self):
        # nsqd's 404, 405 and 413 carry X-NSQ-Content-Type like its other
        # answers (only /ping's lacks it).
        t = fresh("vh")
        for method, path, body, status, code in (
                ("GET", "/nosuch", None, 404, "NOT_FOUND"),
                ("GET", f"/pub?topic={t}", None, 405, "METHOD_NOT_ALLOWED"),
                ("POST", f"/pub?topic={t}", b"x" * (1024 * 1024 + 1), 413, "MSG_TOO_BIG")):
            st, h, out = self.request(method, path, body)
            self.assertEqual((st, json.loads(out)["message"]), (status, code), path)
            self.assertEqual(h.get("x-nsq-content-type"), "nsq; version=1.0", path)
            self.assertEqual(h.get("content-type"), "application/json; charset=utf-8", path)


    def test_a_body_on_the_topic_and_channel_endpoints_is_ignored(self):
        # nsqd reads no body on /topic/* and /channel/*: a form or a JSON
        # body there changes nothing.
        t = fresh("ib")
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        for path in (f"/topic/create?topic={t}", f"/channel/create?topic={t}&channel=c",
                     f"/channel/pause?topic={t}&channel=c", f"/topic/empty?topic={t}"):
            st, _, out = self.request("POST", path, b"a=b", form)
            self.assertEqual((st, out), (200, b""), path)
        st, _, out = self.request("POST", f"/topic/pause?topic={t}", b"{}",
                                  {"Content-Type": "application/json"})
        self.assertEqual((st, out), (200, b""))
        ts = self.topic_stats(t)
        self.assertEqual((ts["paused"], ts["channels"][0]["paused"]), (True, True))


    def test_pub_looks_at_the_body_first(self):
        # nsqd's /pub reads the body before the query: an empty one is
        # MSG_EMPTY whatever the topic; /mpub checks the topic first.
        for path in ("/pub", "/pub?topic=bad!", "/pub?topic=" + "x" * 65):
            self.assertEqual(self.http_error("POST", path), (400, "MSG_EMPTY"), path)
        self.assertEqual(self.http_error("POST", "/mpub?topic=bad!"), (400, "INVALID_TOPIC"))


    def test_a_query_go_cannot_parse_is_invalid_request(self):
        # nsqd parses the whole query with Go's url.ParseQuery first: a bad
        # %-escape anywhere, or a ';', is 400 INVALID_REQUEST.
        t = fresh("iq")
        for method, path, body in (
                ("POST", "/pub?topic=x%zz", b"x"), ("POST", f"/pub?a=%2&topic={t}", b"x"),
                ("POST", f"/mpub?topic={t};", b"x"), ("POST", f"/topic/create?topic={t}&x=%", b""),
                ("POST", f"/channel/create?topic={t}&channel=c%g1", b""),
                ("POST", "/topic/delete?topic=nosuch%", b""), ("GET", "/stats?format=json;", b"")):
            self.assertEqual(self.http_error(method, path, body), (400, "INVALID_REQUEST"), path)
        self.assertEqual(self.request("POST", f"/pub?topic={t}%31", b"x")[:3:2], (200, b"OK"))
        self.assertIsNotNone(self.topic_stats(t + "1"))


    def test_options_and_allow_as_nsqds_router(self):
        # nsqd's router answers OPTIONS with an empty 200 and the methods
        # in Allow, OPTIONS included and sorted; a 405's Allow is the same.
        t = fresh("op")
        for path, allow in ((f"/topic/create?topic={t}", "OPTIONS, POST"),
                            (f"/channel/delete?topic={t}&channel=c", "OPTIONS, POST"),
                            ("/ping", "GET, OPTIONS"), ("/stats", "GET, OPTIONS")):
            st, h, out = self.request("OPTIONS", path)
            self.assertEqual((st, h.get("allow"), out, h.get("content-type")),
                             (200, allow, b"", None), path)
            other = "GET" if "POST" in allow else "DELETE"
            st, h, _ = self.request(other, path)
            self.assertEqual((st, h.get("allow")), (405, allow), path)
        self.assertIsNone(self.topic_stats(t))  # OPTIONS made nothing


    def test_bad_names_are_quoted_as_go_quotes_them(self):
        # nsqd writes the name with Go's %q: quotes, backslashes, control
        # bytes and bytes that are not UTF-8 come escaped.
        for line, text in (
                (b'PUB a"b', b'E_BAD_TOPIC PUB topic name "a\\"b" is not valid'),
                (b"PUB a\tb", b'E_BAD_TOPIC PUB topic name "a\\tb" is not valid'),
                (b"PUB \xff", b'E_BAD_TOPIC PUB topic name "\\xff" is not valid'),
                (b"PUB a\\b", b'E_BAD_TOPIC PUB topic name "a\\\\b" is not valid'),
                (b"PUB \xc3\xa9", b'E_BAD_TOPIC PUB topic name "\xc3\xa9" is not valid'),
                (b'SUB ok a"b', b'E_BAD_CHANNEL SUB channel name "a\\"b" is not valid'),
                # nsqd's MPUB repeats the code in its text.
                (b"MPUB a!", b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a!" is not valid')):
            c = Conn(self.port)
            self.conns.append(c)
            c.send(line + b"\n" + (struct.pack(">I", 1) + b"x" if b"PUB" in line else b""))
            self.assertEqual(c.read_response(), (FRAME_ERROR, text), line)


    def test_a_name_too_long_or_holding_nul_is_invalid_not_missing(self):
        # 300 characters are there but no name: nsqd says INVALID_*, or
        # finds nothing. So is a name holding %00, which Go's
        # url.ParseQuery decodes into the value: the name is not what
        # comes before the NUL.
        t, long = fresh("tl"), "a" * 300
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        for bad in (long, f"{t}%00x"):
            self.refused((
                    (f"/topic/create?topic={bad}", 400, "INVALID_TOPIC"),
                    (f"/topic/empty?topic={bad}", 400, "INVALID_TOPIC"),
                    (f"/channel/create?topic={bad}&channel=c", 400, "INVALID_ARG_TOPIC"),
                    (f"/channel/create?topic={t}&channel={bad}", 400, "INVALID_ARG_CHANNEL"),
                    (f"/topic/delete?topic={bad}", 404, "TOPIC_NOT_FOUND"),
                    (f"/pub?topic={bad}", 400, "INVALID_TOPIC"),
                    (f"/mpub?topic={bad}", 400, "INVALID_TOPIC")))
            st, _, out = self.request("GET", f"/stats?format=json&topic={bad}")
            self.assertEqual((st, json.loads(out)["topics"]), (200, None))
            st, _, out = self.request("GET", f"/stats?format=json&topic={t}&channel={bad}")
            self.assertEqual((st, json.loads(out)["topics"]), (200, []))
        self.refused(((f"/pub?topic={t}&defer=5%00", 400, "INVALID_DEFER"),))
        ts = self.topic_stats(t)
        self.assertEqual((ts["message_count"], ts["channels"]), (0, []))


class SourceEdges(Base):
    """Requests answered as nsqd 1.3.0 and nsqlookupd 1.3.0 answer them,
    compared with their source (the file and line in each test) rather
    than beside a running one."""

    def test_text_stats_leave_out_topics_without_the_channel(self):
        # nsqd/stats.go:138-143: with channel= a topic that has no such
        # channel is skipped, in the text format as in JSON.
        t1, t2, c = fresh("sc"), fresh("sc"), fresh("ch")
        self.assertEqual(self.request("POST", f"/channel/create?topic={t1}&channel={c}")[0], 404)
        for t in (t1, t2):
            self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        self.assertEqual(self.request("POST", f"/channel/create?topic={t1}&channel={c}")[0], 200)
        st, _, out = self.request("GET", f"/stats?channel={c}")
        self.assertEqual(st, 200)
        self.assertIn(f"[{t1:<15}]", out.decode())
        self.assertNotIn(t2, out.decode())
        st, _, out = self.request("GET", f"/stats?topic={t2}&channel={c}")
        self.assertIn("\nTopics: None\n", out.decode())

    def test_defer_is_read_as_gos_parseint_reads_it(self):
        # nsqd/http.go:237-246: strconv.ParseInt takes no space around the
        # number (a sign, yes).
        t = fresh("df")
        for d in ("%205", "5%20", "%0A5", "%095"):
            for path in (f"/pub?topic={t}&defer={d}", f"/mpub?topic={t}&defer={d}"):
                st, _, out = self.request("POST", path, b"x")
                self.assertEqual((st, out), (400, b'{"message":"INVALID_DEFER"}'), path)
        self.assertEqual(self.request("POST", f"/pub?topic={t}&defer=%2B5", b"x")[0], 200)
        self.assertEqual(self.topic_stats(t)["message_count"], 1)

    def test_mpub_binary_is_any_value_but_false_and_0(self):
        # nsqd/http.go:275-282: binary= other than true, 1, false or 0 (an
        # empty one too) is binary, as deprecated values were.
        one = struct.pack(">I", 1) + struct.pack(">I", 1) + b"x"
        for v in ("", "yes", "TRUE", "t", "x" * 40, "true", "1"):
            t = fresh("bn")
            st, _, out = self.request("POST", f"/mpub?topic={t}&binary={v}", one)
            self.assertEqual((st, out), (200, b"OK"), v)
            ts = self.topic_stats(t)
            self.assertEqual((ts["message_count"], ts["message_bytes"]), (1, 1), v)
        for v in ("false", "0"):
            t = fresh("bn")
            self.assertEqual(self.request("POST", f"/mpub?topic={t}&binary={v}", one)[0], 200)
            self.assertEqual(self.topic_stats(t)["message_bytes"], len(one), v)

    def test_an_mpub_of_no_message_makes_the_topic(self):
        # nsqd/http.go:270 makes the topic before reading the body; a text
        # body of empty lines (or none) publishes nothing and answers OK.
        for body in (b"", b"\n\n"):
            t = fresh("em")
            st, _, out = self.request("POST", f"/mpub?topic={t}", body)
            self.assertEqual((st, out), (200, b"OK"))
            ts = self.topic_stats(t)
            self.assertIsNotNone(ts, body)
            self.assertEqual((ts["message_count"], ts["channels"]), (0, []))

    def test_an_mpub_holds_at_most_65536_messages_text_too(self):
        # nsqd/http.go:290-326 reads text lines without a count limit;
        # tern's batch bound is 65,536 either way (nsq-compatibility.md).
        t = fresh("mx")
        self.assertEqual(self.http_error("POST", f"/mpub?topic={t}", b"a\n" * 65537),
                         (413, "BAD_BODY"))
        self.assertIsNone(self.topic_stats(t))
        self.assertEqual(self.request("POST", f"/mpub?topic={t}", b"a\n" * 65536)[0], 200)
        self.assertEqual(self.topic_stats(t)["message_count"], 65536)

    def test_topic_tombstone_as_nsqlookupd(self):
        # nsqlookupd/http.go:178-204: topic= and node= are needed, then 200
        # with an empty body whatever they name. tern tombstones nothing:
        # /lookup goes on listing the node.
        t = fresh("tb")
        self.assertEqual(self.request("POST", f"/topic/create?topic={t}")[0], 200)
        self.refused((("/topic/tombstone", 400, "MISSING_ARG_TOPIC"),
                      (f"/topic/tombstone?topic={t}", 400, "MISSING_ARG_NODE"),
                      (f"/topic/tombstone?topic={t}&node=a%zz", 400, "INVALID_REQUEST")))
        node = f"127.0.0.1:{self.http}"
        for path in (f"/topic/tombstone?topic={t}&node={q(node)}", "/topic/tombstone?topic=&node="):
            st, h, out = self.request("POST", path)
            self.assertEqual((st, out, h.get("x-nsq-content-type")), (200, b"", V1), path)
        self.assertEqual(self.request("GET", "/topic/tombstone?topic=a&node=b")[:2][0], 405)
        st, _, out = self.request("GET", f"/lookup?topic={t}")
        self.assertEqual((st, len(json.loads(out)["producers"])), (200, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
