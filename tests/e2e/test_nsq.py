#!/usr/bin/env python3
"""End-to-end tests of the NSQ V2 TCP protocol against the real ternd:
every command, the negotiated features, the error codes and which of them
close the connection, delivery (RDY, timeouts, REQ, DPUB, sampling,
ephemeral channels, CLS, backlog and bootstrap window) and durability
across a SIGKILL. Each test class starts its own daemon on port 0 with a
temporary data directory."""
import argparse
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import time
import unittest
import json
import ssl
import subprocess
import urllib.request
import uuid

import daemon as daemon_mod
import nsqwire
from authserver import AuthServer
from daemon import Daemon
from nsqwire import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Conn


def fresh(prefix="t"):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Base(unittest.TestCase):
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-nsq-")
        cls.data = os.path.join(cls.dir, "data")
        cls.d = Daemon(cls.data, *cls.ARGS)
        cls.d.wait_for("ready")
        cls.port = cls.d.tcp_port

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
        c = Conn(self.port)
        self.conns.append(c)
        if identify is not None:
            c.identify(**identify)
        return c

    def consumer(self, topic, channel, rdy=10, **identify):
        c = self.conn(**identify)
        self.assertEqual(c.sub(topic, channel), (FRAME_RESPONSE, b"OK"))
        if rdy:
            c.rdy(rdy)
        return c

    def assertError(self, frame, code):
        kind, data = frame
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(code.encode()), data)

    def no_message(self, c, wait=0.5):
        c.sock.settimeout(wait)
        try:
            kind, data = c.read_frame()
        except socket.timeout:
            return True
        finally:
            c.sock.settimeout(10)
        self.fail(f"unexpected frame {kind} {data[:60]!r}")


class PublishConsume(Base):
    def test_pub_sub_fin(self):
        t = fresh()
        p = self.conn()
        for i in range(5):
            self.assertEqual(p.pub(t, b"m%d" % i), (FRAME_RESPONSE, b"OK"))
        c = self.consumer(t, "ch")
        got = []
        for _ in range(5):
            m = c.read_message()
            self.assertEqual(m.attempts, 1)
            self.assertEqual(len(m.id), 16)
            got.append(m.body)
            c.fin(m.id)
        self.assertEqual(got, [b"m%d" % i for i in range(5)])
        self.no_message(c)

    def test_mpub_is_one_batch_and_ids_are_dense(self):
        t = fresh()
        p = self.conn()
        self.assertEqual(p.mpub(t, [b"a", b"bb", b"ccc"]), (FRAME_RESPONSE, b"OK"))
        c = self.consumer(t, "ch")
        ms = [c.read_message() for _ in range(3)]
        self.assertEqual([m.body for m in ms], [b"a", b"bb", b"ccc"])
        ids = [int(m.id, 16) for m in ms]
        self.assertEqual(ids, list(range(ids[0], ids[0] + 3)))
        ts = ms[0].timestamp
        self.assertLess(abs(ts / 1e9 - time.time()), 60)

    def test_each_channel_gets_every_message(self):
        t = fresh()
        a = self.consumer(t, "a")
        b = self.consumer(t, "b")
        p = self.conn()
        p.pub(t, b"x")
        self.assertEqual(a.read_message().body, b"x")
        self.assertEqual(b.read_message().body, b"x")

    def test_consumers_of_one_channel_share_it(self):
        t = fresh()
        a = self.consumer(t, "ch", rdy=100)
        b = self.consumer(t, "ch", rdy=100)
        p = self.conn()
        p.mpub(t, [b"%d" % i for i in range(40)])
        seen = []
        for c in (a, b):
            c.sock.settimeout(1)
            try:
                while True:
                    m = c.read_message()
                    seen.append(m.body)
                    c.fin(m.id)
            except socket.timeout:
                pass
        self.assertEqual(sorted(seen), sorted(b"%d" % i for i in range(40)))

    def in_flight(self, topic):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.d.http_port}/stats?format=json"
                                    f"&topic={topic}") as r:
            return json.loads(r.read())["topics"][0]["channels"][0]["in_flight_count"]

    def test_a_consumer_that_does_not_read_takes_few_messages(self):
        # nsqd writes a message to the socket before it takes the next, so
        # a consumer that stops reading holds only what fits in the socket
        # buffers whatever its RDY; the rest stays for the channel's other
        # consumers (it used to take all 320 messages, 32 MB, into memory).
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            wmem_max = int(f.read().split()[2])
        if wmem_max > 8 << 20:
            self.skipTest(f"a socket may buffer {wmem_max} bytes: most of the 32 MB")
        t = fresh()
        p = self.conn()
        for _ in range(8):
            self.assertEqual(p.mpub(t, [b"z" * 100000] * 40), (FRAME_RESPONSE, b"OK"))
        slow = Conn(self.port, rcvbuf=4096)
        self.conns.append(slow)
        slow.identify()
        self.assertEqual(slow.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        slow.rdy(320)
        deadline = time.monotonic() + 10
        while self.in_flight(t) == 0:
            self.assertLess(time.monotonic(), deadline, "the slow consumer got nothing")
            time.sleep(0.05)
        fast = self.consumer(t, "ch", rdy=320)
        ids = set()
        while len(ids) < 160:
            m = fast.read_message()
            ids.add(m.id)
            fast.fin(m.id)
        self.assertLess(self.in_flight(t), 160)
        # What the slow one held comes back when it goes: nothing is lost.
        slow.close()
        while len(ids) < 320:
            m = fast.read_message()
            ids.add(m.id)
            fast.fin(m.id)

    def test_rdy_limits_in_flight(self):
        t = fresh()
        p = self.conn()
        p.mpub(t, [b"%d" % i for i in range(10)])
        c = self.consumer(t, "ch", rdy=3)
        ms = [c.read_message() for _ in range(3)]
        self.no_message(c)
        c.fin(ms[0].id)
        m = c.read_message()
        self.assertEqual(m.body, b"3")
        c.rdy(0)
        c.fin(ms[1].id)
        self.no_message(c)

    def test_first_channel_gets_the_backlog(self):
        t = fresh()
        p = self.conn()
        p.mpub(t, [b"old1", b"old2"])
        c = self.consumer(t, "first")
        self.assertEqual(c.read_message().body, b"old1")
        self.assertEqual(c.read_message().body, b"old2")
        # A later channel starts at the bootstrap window (90 s by default),
        # so it sees the recent messages too.
        c2 = self.consumer(t, "second")
        self.assertEqual(c2.read_message().body, b"old1")

    def test_pipelined_publishes_answer_in_order(self):
        t = fresh()
        p = self.conn()
        data = b""
        for i in range(50):
            data += f"PUB {t}\n".encode() + struct.pack(">I", 2) + b"%02d" % i
        p.send(data)
        for _ in range(50):
            self.assertEqual(p.read_response(), (FRAME_RESPONSE, b"OK"))
        c = self.consumer(t, "ch", rdy=100)
        self.assertEqual([c.read_message().body for _ in range(50)],
                         [b"%02d" % i for i in range(50)])

    def test_large_message(self):
        t = fresh()
        p = self.conn()
        body = os.urandom(1024 * 1024)
        self.assertEqual(p.pub(t, body), (FRAME_RESPONSE, b"OK"))
        c = self.consumer(t, "ch")
        self.assertEqual(c.read_message().body, body)


class Settling(Base):
    def test_req_with_delay_redelivers_later(self):
        t = fresh()
        self.conn().pub(t, b"x")
        c = self.consumer(t, "ch")
        m = c.read_message()
        start = time.monotonic()
        c.req(m.id, 300)
        m2 = c.read_message()
        self.assertGreaterEqual(time.monotonic() - start, 0.29)
        self.assertEqual((m2.id, m2.attempts, m2.body), (m.id, 2, b"x"))
        c.fin(m2.id)
        self.no_message(c)

    def test_timeout_redelivers_and_touch_extends(self):
        t = fresh()
        self.conn().pub(t, b"x")
        c = self.consumer(t, "ch", msg_timeout=2000)
        m = c.read_message()
        start = time.monotonic()
        # TOUCH twice, a second apart (each leaves a second of slack before
        # the lease would end): the lease outlives its first two seconds.
        time.sleep(1.0)
        c.touch(m.id)
        time.sleep(1.0)
        c.touch(m.id)
        self.no_message(c, 0.5)
        m2 = c.read_message()
        self.assertGreaterEqual(time.monotonic() - start, 3.5)
        self.assertEqual((m2.id, m2.attempts), (m.id, 2))

    def test_fin_of_unknown_id_fails_but_keeps_connection(self):
        t = fresh()
        c = self.consumer(t, "ch")
        c.fin("00000000000000ff")
        self.assertError(c.read_frame(), "E_FIN_FAILED")
        c.req("00000000000000ff", 0)
        self.assertError(c.read_frame(), "E_REQ_FAILED")
        c.touch("00000000000000ff")
        self.assertError(c.read_frame(), "E_TOUCH_FAILED")
        self.conn().pub(t, b"still")
        self.assertEqual(c.read_message().body, b"still")

    def test_fin_from_another_connection_fails(self):
        t = fresh()
        self.conn().pub(t, b"x")
        a = self.consumer(t, "ch")
        m = a.read_message()
        b = self.consumer(t, "ch")
        b.fin(m.id)
        # nsqd's words (channel.go popInFlightMessage); not fatal
        self.assertEqual(b.read_frame(), (FRAME_ERROR, f"E_FIN_FAILED FIN {m.id} failed "
                                          "client does not own message".encode()))
        self.assertEqual(b.pub(t, b"y"), (FRAME_RESPONSE, b"OK"))

    def test_disconnect_returns_in_flight_at_once(self):
        t = fresh()
        self.conn().pub(t, b"x")
        a = self.consumer(t, "ch")
        m = a.read_message()
        a.close()
        b = self.consumer(t, "ch")
        m2 = b.read_message()
        self.assertEqual((m2.id, m2.attempts), (m.id, 2))

    def test_dpub_defers(self):
        t = fresh()
        c = self.consumer(t, "ch")
        start = time.monotonic()
        self.assertEqual(self.conn().dpub(t, 500, b"later"), (FRAME_RESPONSE, b"OK"))
        self.conn().pub(t, b"now")
        self.assertEqual(c.read_message().body, b"now")
        m = c.read_message()
        self.assertEqual(m.body, b"later")
        self.assertGreaterEqual(time.monotonic() - start, 0.5)

    def test_cls(self):
        t = fresh()
        self.conn().pub(t, b"x")
        c = self.consumer(t, "ch")
        m = c.read_message()
        c.cmd("CLS")
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"CLOSE_WAIT"))
        c.fin(m.id)  # still accepted
        self.conn().pub(t, b"y")
        self.no_message(c)

    def test_sampling_delivers_a_share(self):
        t = fresh()
        self.conn().mpub(t, [b"%d" % i for i in range(200)])
        c = self.consumer(t, "ch", rdy=200, sample_rate=25)
        got = 0
        c.sock.settimeout(1)
        try:
            while True:
                m = c.read_message()
                c.fin(m.id)
                got += 1
        except socket.timeout:
            pass
        self.assertEqual(got, 50)

    def test_ephemeral_channel_starts_at_tail_and_vanishes(self):
        t = fresh()
        self.conn().pub(t, b"before")
        c = self.consumer(t, "eph#ephemeral")
        self.conn().pub(t, b"after")
        m = c.read_message()
        self.assertEqual(m.body, b"after")
        c.close()
        time.sleep(0.2)
        c2 = self.consumer(t, "eph#ephemeral")
        self.no_message(c2)


class Errors(Base):
    def closes_after(self, c, line, body=None, code="E_INVALID"):
        c.cmd(line, body)
        self.assertError(c.read_frame(), code)
        self.assertTrue(c.expect_closed())

    def test_bad_magic_closes(self):
        c = Conn(self.port, magic=False)
        self.conns.append(c)
        c.sock.sendall(b"  V1")
        self.assertTrue(c.expect_closed())

    def test_invalid_command(self):
        self.closes_after(self.conn(), "BOGUS")

    def test_bad_topic_name(self):
        self.closes_after(self.conn(), "PUB bad/name", b"x", "E_BAD_TOPIC")

    def test_bad_channel_name(self):
        self.closes_after(self.conn(), f"SUB {fresh()} bad*chan", None, "E_BAD_CHANNEL")

    def test_empty_message(self):
        self.closes_after(self.conn(), f"PUB {fresh()}", b"", "E_BAD_MESSAGE")

    def test_message_too_big(self):
        c = self.conn()
        c.sock.sendall(f"PUB {fresh()}\n".encode() + struct.pack(">I", 1024 * 1024 + 1))
        self.assertError(c.read_frame(), "E_BAD_MESSAGE")
        self.assertTrue(c.expect_closed())

    def test_error_reaches_a_client_still_sending(self):
        # Refused at the size prefix while the client goes on sending its
        # body: the server shuts down its side and drains, so the client
        # reads the error frame rather than a connection reset.
        c = self.conn()
        c.sock.sendall(f"PUB {fresh()}\n".encode() + struct.pack(">I", 8 * 1024 * 1024))
        try:
            c.sock.sendall(b"x" * (2 * 1024 * 1024))
        except OSError:
            pass
        self.assertError(c.read_frame(), "E_BAD_MESSAGE")
        self.assertTrue(c.expect_closed())

    def test_mpub_trailing_bytes_publishes_nothing(self):
        t = fresh()
        body = struct.pack(">I", 1) + struct.pack(">I", 1) + b"a" + b"junk"
        self.closes_after(self.conn(), f"MPUB {t}", body, "E_BAD_BODY")
        c = self.consumer(t, "ch")
        self.no_message(c)

    def test_rdy_before_sub(self):
        self.closes_after(self.conn(), "RDY 1")

    def test_rdy_over_max(self):
        c = self.consumer(fresh(), "ch", rdy=0)
        self.closes_after(c, "RDY 2501")

    def test_fin_before_sub(self):
        self.closes_after(self.conn(), "FIN 0000000000000000")

    def test_sub_twice(self):
        c = self.consumer(fresh(), "ch", rdy=0)
        self.closes_after(c, f"SUB {fresh()} ch")

    def test_dpub_over_max_delay(self):
        self.closes_after(self.conn(), f"DPUB {fresh()} 3600001", b"x")

    def test_identify_bad_heartbeat_text(self):
        c = Conn(self.port)
        self.conns.append(c)
        c.cmd("IDENTIFY", b'{"heartbeat_interval": 100}')
        kind, data = c.read_frame()
        self.assertEqual(data, b"E_BAD_BODY IDENTIFY heartbeat interval (100) is invalid")
        self.assertTrue(c.expect_closed())

    def test_identify_wrong_type(self):
        c = Conn(self.port)
        self.conns.append(c)
        c.cmd("IDENTIFY", b'{"heartbeat_interval": "x"}')
        self.assertError(c.read_frame(), "E_BAD_BODY")

    def test_sub_with_heartbeats_disabled(self):
        c = self.conn(heartbeat_interval=-1)
        self.closes_after(c, f"SUB {fresh()} ch")

    def test_auth_disabled(self):
        self.closes_after(self.conn(), "AUTH", b"secret", "E_AUTH_DISABLED")

    def test_line_too_long(self):
        c = self.conn()
        c.sock.sendall(b"PUB " + b"a" * 2000)
        self.assertError(c.read_frame(), "E_INVALID")
        self.assertTrue(c.expect_closed())


class NsqdQuirks(Base):
    """Details of nsqd's behaviour that clients notice, which ternd matches."""
    ARGS = ("--max-req-timeout=1s",)

    def test_rdy_without_count_means_one(self):
        t = fresh()
        self.conn().mpub(t, [b"a", b"b"])
        c = self.consumer(t, "ch", rdy=0)
        c.cmd("RDY")
        self.assertEqual(c.read_message().body, b"a")
        self.no_message(c)

    def test_crlf_and_extra_parameters(self):
        t = fresh()
        c = self.conn()
        c.send(f"PUB {t} extra\r\n".encode() + struct.pack(">I", 1) + b"x")
        self.assertEqual(c.read_response(), (FRAME_RESPONSE, b"OK"))

    def test_double_space_is_an_empty_topic(self):
        c = self.conn()
        c.send(b"PUB  t\n" + struct.pack(">I", 1) + b"x")
        self.assertError(c.read_frame(), "E_BAD_TOPIC")

    def test_identify_twice_before_sub(self):
        c = self.conn(msg_timeout=5000)
        r = c.identify(msg_timeout=7000)
        self.assertEqual(r["msg_timeout"], 7000)
        self.assertEqual(c.sub(fresh(), "ch"), (FRAME_RESPONSE, b"OK"))
        c.cmd("IDENTIFY", b"{}")
        self.assertError(c.read_frame(), "E_INVALID")

    def test_req_delay_over_max_is_clamped(self):
        t = fresh()
        self.conn().pub(t, b"x")
        c = self.consumer(t, "ch")
        m = c.read_message()
        start = time.monotonic()
        c.req(m.id, 3600000)  # far over --max-req-timeout=1s: clamped, not refused
        m2 = c.read_message()
        self.assertLess(time.monotonic() - start, 10)  # an hour unclamped
        self.assertEqual(m2.id, m.id)

    def test_heartbeat_minus_one_then_sub_refused(self):
        c = self.conn(heartbeat_interval=-1)
        c.cmd(f"SUB {fresh()} ch")
        self.assertError(c.read_frame(), "E_INVALID")


class Heartbeats(Base):
    def test_heartbeat_sent_and_silent_client_dropped(self):
        c = self.conn(heartbeat_interval=1000)
        start = time.monotonic()
        kind, data = c.read_frame(skip_heartbeats=False)
        self.assertEqual((kind, data), (FRAME_RESPONSE, b"_heartbeat_"))
        self.assertGreaterEqual(time.monotonic() - start, 0.9)
        # Never answer: closed after two intervals of silence.
        c.sock.settimeout(5)
        while True:
            try:
                c.read_frame(skip_heartbeats=False)
            except nsqwire.Closed:
                break
        # Two silent intervals (2 s) close it; generous for a loaded machine.
        self.assertLess(time.monotonic() - start, 8)

    def test_nop_keeps_alive(self):
        c = self.conn(heartbeat_interval=1000)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            kind, data = c.read_frame(skip_heartbeats=False)
            self.assertEqual(data, b"_heartbeat_")
            c.cmd("NOP")
        self.assertEqual(c.pub(fresh(), b"alive"), (FRAME_RESPONSE, b"OK"))


class Compression(Base):
    def test_deflate(self):
        t = fresh()
        c = Conn(self.port)
        self.conns.append(c)
        r = c.identify(deflate=True, deflate_level=3)
        self.assertTrue(r["deflate"])
        self.assertEqual(r["deflate_level"], 3)
        c.start_deflate()
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.pub(t, b"z" * 5000), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(1)
        self.assertEqual(c.read_message().body, b"z" * 5000)

    def test_snappy(self):
        t = fresh()
        c = Conn(self.port)
        self.conns.append(c)
        r = c.identify(snappy=True)
        self.assertTrue(r["snappy"])
        c.start_snappy()
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.pub(t, b"s" * 5000), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(1)
        self.assertEqual(c.read_message().body, b"s" * 5000)

    def test_both_is_an_error(self):
        c = Conn(self.port)
        self.conns.append(c)
        c.cmd("IDENTIFY", b'{"feature_negotiation": true, "snappy": true, "deflate": true}')
        self.assertError(c.read_frame(), "E_IDENTIFY_FAILED")


class ConnectionCap(Base):
    ARGS = ("--max-connections=3",)

    def test_connection_cap(self):
        cs = [Conn(self.port) for _ in range(3)]
        self.conns.extend(cs)
        for c in cs:
            c.identify()
        extra = Conn(self.port)
        self.conns.append(extra)
        self.assertTrue(extra.expect_closed())


class Throttle(Base):
    ARGS = ("--disk-high-watermark=1", "--disk-low-watermark=0")

    def test_disk_high_throttles_but_keeps_connection(self):
        c = self.conn()
        self.assertError(c.pub(fresh(), b"x"), "E_THROTTLED")
        c.cmd("NOP")
        self.assertError(c.pub(fresh(), b"x"), "E_THROTTLED")


CERTS = None


def certs():
    """A CA, a server certificate for 127.0.0.1 and a client certificate
    (CN client1), made once with the openssl command."""
    global CERTS
    if CERTS is not None:
        return CERTS
    d = tempfile.mkdtemp(prefix="tern-certs-")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=tern-test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    for name, cn in (("server", "127.0.0.1"), ("client", "client1")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n" if name == "server" else "")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    CERTS = d
    return d


def client_context(with_cert=False):
    ctx = ssl.create_default_context(cafile=os.path.join(certs(), "ca.pem"))
    ctx.check_hostname = False
    if with_cert:
        ctx.load_cert_chain(os.path.join(certs(), "client.pem"), os.path.join(certs(), "client.key"))
    return ctx


class TLSBase(Base):
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        d = certs()
        cls.ARGS = (f"--tls-cert={d}/server.pem", f"--tls-key={d}/server.key", *cls.EXTRA)
        super().setUpClass()

    def tls_conn(self, with_cert=False, **identify):
        c = Conn(self.port)
        self.conns.append(c)
        r = c.identify(tls_v1=True, **identify)
        self.assertTrue(r["tls_v1"])
        c.start_tls(client_context(with_cert))
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        return c, r


class TLS(TLSBase):
    def test_tls_round_trip(self):
        t = fresh()
        c, _ = self.tls_conn()
        self.assertEqual(c.pub(t, b"secret"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(1)
        self.assertEqual(c.read_message().body, b"secret")

    def test_tls_with_deflate(self):
        t = fresh()
        c, r = self.tls_conn(deflate=True)
        self.assertTrue(r["deflate"])
        c.start_deflate()
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.pub(t, b"d" * 3000), (FRAME_RESPONSE, b"OK"))

    def test_tls_with_snappy(self):
        t = fresh()
        c, r = self.tls_conn(snappy=True)
        c.start_snappy()
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.pub(t, b"s" * 3000), (FRAME_RESPONSE, b"OK"))

    def test_plain_still_allowed(self):
        self.assertEqual(self.conn().pub(fresh(), b"x"), (FRAME_RESPONSE, b"OK"))


class TLSRequired(TLSBase):
    EXTRA = ("--tls-required=true",)

    def test_plain_command_refused(self):
        c = self.conn()
        c.cmd(f"PUB {fresh()}", b"x")
        self.assertError(c.read_frame(), "E_INVALID cannot PUB in current state (TLS required)")
        self.assertTrue(c.expect_closed())

    def test_tls_accepted(self):
        c, _ = self.tls_conn()
        self.assertEqual(c.pub(fresh(), b"x"), (FRAME_RESPONSE, b"OK"))


class MutualTLS(TLSBase):
    @classmethod
    def setUpClass(cls):
        cls.EXTRA = ("--tls-client-auth-policy=require-verify",
                     f"--tls-root-ca-file={certs()}/ca.pem")
        super().setUpClass()

    def test_client_certificate_required(self):
        c = Conn(self.port)
        self.conns.append(c)
        c.identify(tls_v1=True)
        with self.assertRaises((ssl.SSLError, ConnectionError, nsqwire.Closed)):
            c.start_tls(client_context(with_cert=False))
            c.read_frame()

    def test_verified_client_certificate(self):
        c, _ = self.tls_conn(with_cert=True)
        self.assertEqual(c.pub(fresh(), b"x"), (FRAME_RESPONSE, b"OK"))


class Auth(Base):
    @classmethod
    def setUpClass(cls):
        cls.auth = AuthServer()
        # A dead server first: AUTH falls through to the next.
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
        dead.close()
        cls.ARGS = (f"--auth-http-address=127.0.0.1:{dead_port},127.0.0.1:{cls.auth.port}",)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.auth.close()

    def authed(self, secret):
        c = Conn(self.port)
        self.conns.append(c)
        r = c.identify()
        self.assertTrue(r["auth_required"])
        c.cmd("AUTH", secret.encode())
        return c, c.read_frame()

    def test_pub_before_auth(self):
        c = self.conn()
        c.cmd(f"PUB {fresh()}", b"x")
        self.assertEqual(c.read_frame()[1], b"E_AUTH_FIRST AUTH required before PUB")
        self.assertTrue(c.expect_closed())

    def test_auth_then_pub_and_sub(self):
        c, (kind, data) = self.authed("all")
        self.assertEqual(kind, FRAME_RESPONSE)
        self.assertEqual(json.loads(data), {"identity": "user-all",
                                            "identity_url": "http://example.invalid/u",
                                            "permission_count": 1})
        t = fresh()
        self.assertEqual(c.pub(t, b"x"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        hit = [h for h in self.auth.hits if h["auth_secret"] == "all"][0]
        self.assertEqual(hit["tls"], "false")
        self.assertEqual(hit["remote_ip"], "127.0.0.1")

    def test_permissions_are_regexes(self):
        c, (kind, _) = self.authed("pub-only")
        self.assertEqual(kind, FRAME_RESPONSE)
        self.assertEqual(c.pub("pubthing", b"x"), (FRAME_RESPONSE, b"OK"))
        c.cmd("PUB other", struct.pack(">I", 1) + b"x")
        self.assertEqual(c.read_frame()[1], b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""')
        self.assertTrue(c.expect_closed())
        c2, _ = self.authed("pub-only")
        c2.cmd("SUB pubthing ch")
        self.assertError(c2.read_frame(), "E_UNAUTHORIZED")

    def test_denied_and_empty(self):
        c, frame = self.authed("deny")
        self.assertError(frame, "E_AUTH_FAILED")
        self.assertTrue(c.expect_closed())
        c, frame = self.authed("none")
        self.assertEqual(frame[1], b"E_UNAUTHORIZED AUTH no authorizations found")

    def test_results_are_cached(self):
        for _ in range(3):
            c, (kind, _) = self.authed("all")
            self.assertEqual(kind, FRAME_RESPONSE)
        self.assertLessEqual(self.auth.count("all"), 1 + 1)  # at most one per test that asked

    def test_expired_grants_are_renewed(self):
        c, (kind, _) = self.authed("short")
        self.assertEqual(kind, FRAME_RESPONSE)
        before = self.auth.count("short")
        time.sleep(1.2)
        self.assertEqual(c.pub(fresh(), b"x"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(self.auth.count("short"), before + 1)

    def test_a_consumer_whose_grants_went_is_closed(self):
        # nsqd checks grants only on commands, so a SUB'd client keeps
        # receiving; here expired grants (ttl 1 s) are checked again
        # before the next message goes, and a secret that no longer
        # permits the subscription ends the connection, its messages in
        # flight back on the channel.
        self.auth.revoked.discard("revocable")
        time.sleep(1.2)  # a denial cached for its ttl is gone
        c, (kind, _) = self.authed("revocable")
        self.assertEqual(kind, FRAME_RESPONSE)
        t = fresh()
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(10)
        p, _ = self.authed("all")
        time.sleep(1.2)  # expired, still granted: checked again, delivered
        self.assertEqual(p.pub(t, b"still granted"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.read_message().body, b"still granted")  # left in flight
        self.auth.revoked.add("revocable")
        time.sleep(1.2)
        self.assertEqual(p.pub(t, b"after the revocation"), (FRAME_RESPONSE, b"OK"))
        kind, data = c.read_frame()
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertEqual(data, b'E_UNAUTHORIZED AUTH failed for SUB on "%s" "ch": the grants, '
                               b'checked again once they expired or changed, no longer permit it'
                         % t.encode())
        self.assertTrue(c.expect_closed())
        d, _ = self.authed("all")
        self.assertEqual(d.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        d.rdy(10)
        self.assertEqual(sorted(d.read_message().body for _ in range(2)),
                         [b"after the revocation", b"still granted"])

    def test_second_auth_is_invalid(self):
        c, _ = self.authed("all")
        c.cmd("AUTH", b"all")
        self.assertEqual(c.read_frame()[1], b"E_INVALID AUTH already set")


class DeadLetters(Base):
    ARGS = ("--max-attempts=2",)

    def test_moves_after_max_attempts(self):
        t = fresh()
        self.conn().pub(t, b"poison")
        c = self.consumer(t, "ch")
        for attempt in (1, 2):
            m = c.read_message()
            self.assertEqual(m.attempts, attempt)
            c.req(m.id, 0)
        self.no_message(c, 1.0)
        dlq = self.consumer(f"{t}.ch.DLQ", "inspect")
        m = dlq.read_message()
        self.assertEqual(m.body, b"poison")
        self.assertEqual(m.attempts, 1)

    def test_finished_in_time_stays(self):
        t = fresh()
        self.conn().pub(t, b"fine")
        c = self.consumer(t, "ch")
        m = c.read_message()
        c.req(m.id, 0)
        m = c.read_message()
        c.fin(m.id)
        dlq = self.consumer(f"{t}.ch.DLQ", "inspect")
        self.no_message(dlq)


class TTLTopics(Base):
    ARGS = ("--ttl-discard-topics=ttl*=1s,exact=1h",)

    def test_expired_messages_leave_every_channel(self):
        t = fresh("ttl")
        c = self.consumer(t, "ch", rdy=0)
        self.conn().pub(t, b"stale")
        time.sleep(1.3)
        self.conn().pub(t, b"fresh")
        c.rdy(10)
        self.assertEqual(c.read_message().body, b"fresh")
        self.no_message(c)

    def test_redelivery_after_expiry_is_dropped(self):
        t = fresh("ttl")
        c = self.consumer(t, "ch")
        self.conn().pub(t, b"x")
        m = c.read_message()
        time.sleep(1.2)
        c.req(m.id, 0)
        self.no_message(c)

    def test_bad_rule_is_a_config_error(self):
        res = subprocess.run([daemon_mod.TERND, f"--data-path={self.dir}/other",
                              "--ttl-discard-topics=nodur"], capture_output=True, text=True,
                             timeout=30)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("ttl-discard-topics", res.stderr)


class NsqdFlags(unittest.TestCase):
    """An nsqd command line and config file start ternd unchanged."""

    def test_nsqd_command_line_and_config_file(self):
        d = tempfile.mkdtemp(prefix="tern-nsqd-")
        try:
            conf = os.path.join(d, "nsqd.cfg")
            with open(conf, "w") as f:
                f.write('# an nsqd config file\n'
                        'mem_queue_size = 10000\n'
                        'max_rdy_count = 200\n'
                        'msg_timeout = "30s"\n'
                        'nsqlookupd_tcp_addresses = ["127.0.0.1:4160"]\n'
                        'statsd_prefix = "nsq.%s"\n')
            dm = Daemon(os.path.join(d, "data"), f"--config={conf}", "--sync-every=2500",
                        "--max-msg-size=2097152", "--snappy=true", "--deflate", "--worker-id", "3",
                        "--statsd-mem-stats", "--max-heartbeat-interval=1m")
            dm.wait_for("ready")
            log = dm.log()
            for name in ("mem-queue-size", "sync-every", "worker-id", "statsd-mem-stats",
                         "statsd-prefix"):
                self.assertIn(f"nsqd option {name} has no effect", log)
            c = Conn(dm.tcp_port)
            r = c.identify()
            self.assertEqual(r["max_rdy_count"], 200)
            self.assertEqual(r["msg_timeout"], 30000)
            c.close()
            self.assertEqual(dm.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Durability(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-nsq-")
        self.data = os.path.join(self.dir, "data")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_acked_survive_sigkill_and_fins_stick(self):
        d = Daemon(self.data)
        d.wait_for("ready")
        p = Conn(d.tcp_port)
        p.identify()
        for i in range(100):
            self.assertEqual(p.pub("dur", b"%03d" % i), (FRAME_RESPONSE, b"OK"))
        c = Conn(d.tcp_port)
        c.identify()
        c.sub("dur", "ch")
        c.rdy(40)
        fins = []
        for _ in range(40):
            m = c.read_message()
            c.fin(m.id)
            fins.append(m.body)
        time.sleep(0.5)  # FINs are group-committed within milliseconds
        d.kill()
        p.close()
        c.close()

        d = Daemon(self.data)
        d.wait_for("ready")
        c = Conn(d.tcp_port)
        c.identify()
        c.sub("dur", "ch")
        c.rdy(100)
        rest = []
        c.sock.settimeout(2)
        try:
            while True:
                m = c.read_message()
                rest.append(m.body)
                c.fin(m.id)
        except socket.timeout:
            pass
        self.assertEqual(sorted(fins + rest), [b"%03d" % i for i in range(100)])
        self.assertFalse(set(fins) & set(rest), "a durable FIN was redelivered")
        c.close()
        self.assertEqual(d.stop(), 0)


class Bench(Base):
    """tern-bench (beside ternd in the build) against a real daemon: every
    mode reports its figures, and the ledger finds every acknowledged
    message delivered."""

    def bench(self, *args):
        exe = os.path.join(os.path.dirname(daemon_mod.TERND), "tern-bench")
        r = subprocess.run([exe, "--addr", f"127.0.0.1:{self.port}", *args],
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def figures(self, out, line):
        m = re.search(line, out)
        self.assertIsNotNone(m, out)
        return [int(x) for x in m.groups()]

    def test_pub_and_mpub_with_consumers_ledger_clean(self):
        for batch in ("1", "16"):
            rc, out, err = self.bench("--producers", "4", "--consumers", "2", "--batch", batch,
                                      "--size", "100", "--count", "2000",
                                      "--topic", fresh("bench"))
            self.assertEqual(rc, 0, out + err)
            acked, = self.figures(out, r"publish: (\d+) msgs acked")
            self.assertEqual(acked, 2000)
            self.assertIn("publish-ack latency (ms, per request): p50", out)
            a, r_, missing, dups = self.figures(
                out, r"ledger: acked (\d+), received (\d+) unique, missing (\d+), "
                     r"duplicates (\d+)")
            self.assertEqual((a, r_, missing, dups), (2000, 2000, 0, 0), out)

    def test_http_publish_and_bad_arguments(self):
        rc, out, err = self.bench("--http-port", str(self.d.http_port), "--producers", "2",
                                  "--consumers", "1", "--count", "300", "--size", "64",
                                  "--topic", fresh("hbench"))
        self.assertEqual(rc, 0, out + err)
        a, r_, missing, _ = self.figures(
            out, r"ledger: acked (\d+), received (\d+) unique, missing (\d+), "
                 r"duplicates (\d+)")
        self.assertEqual((a, r_, missing), (300, 300, 0), out)
        rc, out, err = self.bench("--size", "4")
        self.assertEqual(rc, 2)
        self.assertIn("--size >= 8", err)
        rc, out, err = self.bench("--topic", "x" * 300)
        self.assertEqual((rc, err.strip()),
                         (2, "tern-bench: --topic (200), --channel (64) or --http-get (200) "
                             "is too long"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
