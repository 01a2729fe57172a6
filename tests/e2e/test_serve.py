#!/usr/bin/env python3
"""End-to-end tests of how ternd serves and logs: the HTTPS listener
(https-address with tls-cert and tls-key: /healthz, /v1 with Basic auth,
/pub, keep-alive, ALPN, no TLS below 1.2, the live feed over wss, nsqd's
TLS_REQUIRED on the plain port), a certificate that does not load, JSON
log lines, log-level filtering (nsqd's names too), journald's priority
prefixes, and SIGHUP reload (log level, the certificate, a bad new pair,
a bad config file)."""
import argparse
import base64
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
import warnings

import daemon as daemon_mod
from daemon import Daemon
from wsclient import WS

ADMIN_PASSWORD = "serve-tests-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()}
ENV = dict(os.environ, TERN_ADMIN_PASSWORD=ADMIN_PASSWORD)
ENV.pop("JOURNAL_STREAM", None)  # ctest under systemd must not turn the prefixes on


def make_cert(directory, name):
    """A self-signed P-256 certificate for 127.0.0.1; (cert, key) paths."""
    cert = os.path.join(directory, f"{name}.crt")
    key = os.path.join(directory, f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", f"/CN={name}", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def der_fingerprint(cert_path):
    with open(cert_path) as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    return hashlib.sha256(der).hexdigest()


def served_fingerprint(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()


def free_port():
    """A port below 32768 that nothing listens on now (on TCP and UDP: node
    RPC takes the HTTP port number over UDP)."""
    while True:
        port = random.randrange(20000, 32000)
        try:
            with socket.socket() as t, socket.socket(type=socket.SOCK_DGRAM) as u:
                t.bind(("127.0.0.1", port))
                u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue


def fresh(prefix="t"):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def request(conn, method, path, body=None, headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    return r.status, r.read()


class Https(unittest.TestCase):
    """One daemon serving HTTP and HTTPS, logging JSON."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-serve-")
        cls.cert, cls.key = make_cert(cls.dir, "a")
        cls.d = Daemon(os.path.join(cls.dir, "data"), "--https-address=127.0.0.1:0",
                       f"--tls-cert={cls.cert}", f"--tls-key={cls.key}", "--log-format=json",
                       "--websocket-enabled", "--ttl-discard-topics=live*=1h",
                       env=dict(ENV, TERN_MAX_RDY_COUNT="2500"))
        cls.d.wait_for("root user admin created")
        cls.ctx = ssl.create_default_context(cafile=cls.cert)
        cls.ctx.set_alpn_protocols(["h2", "http/1.1"])

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    def https(self):
        return http.client.HTTPSConnection("127.0.0.1", self.d.https_port, context=self.ctx,
                                           timeout=10)

    def plain(self):
        return http.client.HTTPConnection("127.0.0.1", self.d.http_port, timeout=10)

    def test_healthz_over_tls_12_or_newer_with_alpn(self):
        c = self.https()
        try:
            status, body = request(c, "GET", "/healthz")
            self.assertEqual(status, 200, body)
            self.assertIn(c.sock.version(), ("TLSv1.2", "TLSv1.3"))
            self.assertEqual(c.sock.selected_alpn_protocol(), "http/1.1")
        finally:
            c.close()

    def test_v1_takes_basic_auth(self):
        c = self.https()
        try:
            self.assertEqual(request(c, "GET", "/v1/topics")[0], 401)
            status, body = request(c, "GET", "/v1/topics", headers=ADMIN)
            self.assertEqual(status, 200, body)
            self.assertIn("topics", json.loads(body))
        finally:
            c.close()

    def test_pub_over_https_then_seen_over_plain_http(self):
        t = fresh()
        c = self.https()
        try:
            self.assertEqual(request(c, "POST", f"/pub?topic={t}", b"over tls"), (200, b"OK"))
            sock = c.sock
            # Keep-alive: the next request rides the same TLS connection.
            self.assertEqual(request(c, "GET", "/ping"), (200, b"OK"))
            self.assertIs(c.sock, sock)
        finally:
            c.close()
        p = self.plain()
        try:
            status, body = request(p, "GET", f"/stats?format=json&topic={t}")
            self.assertEqual(status, 200, body)
            topics = json.loads(body)["topics"]
            self.assertEqual(topics[0]["topic_name"], t)
            self.assertEqual(topics[0]["message_count"], 1)
        finally:
            p.close()

    def test_big_body_in_and_big_frame_out(self):
        # Bodies span many TLS records and socket reads; a 900 KB message
        # leaves over wss in records the socket takes piecemeal.
        t = fresh("live")
        p = self.plain()
        try:
            self.assertEqual(request(p, "POST", f"/topic/create?topic={t}")[0], 200)
        finally:
            p.close()
        w = WS(self.d.https_port, f"/v1/ws/topics/{t}", ssl_context=self.ctx)
        c = self.https()
        try:
            self.assertEqual(w.recv_json()["type"], "ready")
            body = b"\n".join(b"%06d" % i + b"x" * 994 for i in range(3000))  # ~3 MB
            self.assertEqual(request(c, "POST", f"/mpub?topic={t}", body), (200, b"OK"))
            for i in range(3000):
                self.assertEqual(w.recv_message().body[:6], b"%06d" % i)
            big = os.urandom(900 * 1024)
            self.assertEqual(request(c, "POST", f"/pub?topic={t}", big), (200, b"OK"))
            self.assertEqual(w.recv_message().body, big)
        finally:
            c.close()
            w.close()

    def test_pipelined_requests_answered_in_order(self):
        with socket.create_connection(("127.0.0.1", self.d.https_port), timeout=10) as raw:
            with self.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        self.assertEqual(data.count(b"HTTP/1.1 200 OK"), 3, data)
        self.assertLess(data.index(b"\r\n\r\nOK"), data.index(b"status"))
        self.assertTrue(data.endswith(b"\r\n\r\nOK"), data)

    def test_tls_below_12_refused_with_an_alert(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1
                ctx.minimum_version = ssl.TLSVersion.TLSv1
                ctx.maximum_version = ssl.TLSVersion.TLSv1_1
            except (ValueError, ssl.SSLError):
                self.skipTest("this Python's OpenSSL cannot offer TLS 1.1")
        with socket.create_connection(("127.0.0.1", self.d.https_port), timeout=10) as raw:
            with self.assertRaises(ssl.SSLError) as cm:
                ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        # The server's alert, not this client's refusal to offer 1.1.
        self.assertIn("ALERT_PROTOCOL_VERSION", str(cm.exception))

    def test_plain_bytes_on_the_https_port_close_it(self):
        with socket.create_connection(("127.0.0.1", self.d.https_port), timeout=10) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                data = s.recv(4096)
            except ConnectionResetError:
                data = b""
            self.assertNotIn(b"HTTP/1.1", data)
        # and the listener still serves
        c = self.https()
        try:
            self.assertEqual(request(c, "GET", "/ping"), (200, b"OK"))
        finally:
            c.close()

    def test_live_feed_over_wss(self):
        t = fresh("live")
        p = self.plain()
        try:
            self.assertEqual(request(p, "POST", f"/topic/create?topic={t}")[0], 200)
        finally:
            p.close()
        w = WS(self.d.https_port, f"/v1/ws/topics/{t}", ssl_context=self.ctx)
        try:
            ready = w.recv_json()
            self.assertEqual(ready["type"], "ready", ready)
            c = self.https()
            try:
                self.assertEqual(request(c, "POST", f"/pub?topic={t}", b"wss"), (200, b"OK"))
            finally:
                c.close()
            self.assertEqual(w.recv_message().body, b"wss")
        finally:
            w.close()

    def test_metrics_and_info_on_https_too(self):
        c = self.https()
        try:
            status, body = request(c, "GET", "/metrics", headers=ADMIN)
            self.assertEqual(status, 200, body)
            # This HTTPS connection is counted with HTTP's.
            conns = [line for line in body.decode().splitlines()
                     if line.startswith("tern_http_connections ")]
            self.assertGreaterEqual(float(conns[0].split()[1]), 1, conns)
            status, body = request(c, "GET", "/info")
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["http_port"], self.d.http_port)
        finally:
            c.close()

    def test_console_on_https_too(self):
        c = self.https()
        try:
            c.request("GET", "/console/")
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 200, body)
            self.assertTrue(r.getheader("Content-Type").startswith("text/html"))
            self.assertIn("default-src 'self'", r.getheader("Content-Security-Policy"))
            self.assertIn(b"<html", body.lower())
        finally:
            c.close()

    def test_json_log_lines_and_startup_lines(self):
        lines = [json.loads(line) for line in self.d.lines]
        self.assertTrue(lines)
        for obj in lines:
            self.assertEqual(set(obj), {"ts", "level", "src", "msg"}, obj)
            self.assertRegex(obj["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(obj["level"], ("debug", "info", "notice", "warn", "error"))
        msgs = [o["msg"] for o in lines]
        # The variables that are settings, by name (TERN_ADMIN_PASSWORD is not one).
        self.assertIn("configuration: built-in defaults, then the environment "
                      "(TERN_MAX_RDY_COUNT), then flags", msgs)
        https = [m for m in msgs if m.startswith("HTTPS listening on port")]
        self.assertEqual(len(https), 1, msgs)
        self.assertIn("TLS 1.2+", https[0])
        want = ":".join(f"{b:02X}" for b in bytes.fromhex(der_fingerprint(self.cert)))
        self.assertIn(want, https[0])
        self.assertTrue(any(m.startswith("HTTP listening on port") and "plain" in m
                            for m in msgs), msgs)
        self.assertTrue(any(m.startswith("NSQ TCP listening on port") and "tls_v1" in m
                            for m in msgs), msgs)


class TlsRequired(unittest.TestCase):
    """nsqd's tls-required=true: the plain port points at the HTTPS one."""

    def test_plain_http_answers_tls_required_with_the_https_port(self):
        tmp = tempfile.mkdtemp(prefix="tern-serve-")
        try:
            cert, key = make_cert(tmp, "r")
            d = Daemon(os.path.join(tmp, "data"), "--https-address=127.0.0.1:0",
                       f"--tls-cert={cert}", f"--tls-key={key}", "--tls-required=true", env=ENV)
            try:
                d.wait_for(" ready:")
                p = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=10)
                c = http.client.HTTPSConnection("127.0.0.1", d.https_port, timeout=10,
                                                context=ssl.create_default_context(cafile=cert))
                try:
                    p.request("GET", "/ping")
                    r = p.getresponse()
                    body = json.loads(r.read())
                    self.assertEqual(r.status, 403)
                    self.assertEqual(body, {"message": "TLS_REQUIRED",
                                            "https_port": d.https_port})
                    self.assertEqual(r.getheader("X-NSQ-Content-Type"), "nsq; version=1.0")
                    self.assertEqual(request(c, "GET", "/ping"), (200, b"OK"))
                finally:
                    p.close()
                    c.close()
            finally:
                self.assertEqual(d.stop(), 0, d.log())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def run_ternd(data, *args, env=ENV):
    """Run ternd to its exit (for a start that must fail)."""
    return subprocess.run([daemon_mod.TERND, f"--data-path={data}", "--tcp-address=127.0.0.1:0",
                           "--http-address=127.0.0.1:0", "--raft-address=127.0.0.1:0", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          timeout=60)


class BadCertificate(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-serve-")
        self.cert, self.key = make_cert(self.dir, "good")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_a_file_that_is_no_certificate(self):
        bogus = os.path.join(self.dir, "bogus.crt")
        with open(bogus, "w") as f:
            f.write("not a certificate\n")
        r = run_ternd(os.path.join(self.dir, "data"), "--https-address=127.0.0.1:0",
                      f"--tls-cert={bogus}", f"--tls-key={self.key}")
        self.assertEqual(r.returncode, 1, r.stderr)
        # (The NSQ door loads the same pair first, so its line says it.)
        self.assertRegex(r.stderr, rf'error .*tls-cert "{bogus}": .*no start line')
        self.assertNotIn(" ready:", r.stderr)

    def test_a_key_of_another_certificate(self):
        _, other_key = make_cert(self.dir, "other")
        r = run_ternd(os.path.join(self.dir, "data"), "--https-address=127.0.0.1:0",
                      f"--tls-cert={self.cert}", f"--tls-key={other_key}")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f'tls-key "{other_key}"', r.stderr)

    def test_https_without_a_certificate(self):
        r = run_ternd(os.path.join(self.dir, "data"), "--https-address=127.0.0.1:0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("https-address needs tls-cert and tls-key", r.stderr)


class Logging(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-serve-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def levels_of(self, level):
        """Start at --log-level=level with an nsqd option that warns at
        startup, wait until it serves, stop it; the levels of the lines it
        wrote. Nothing at notice tells the port, so it is chosen here."""
        port = free_port()
        d = Daemon(os.path.join(self.dir, f"data-{level}"), f"--log-level={level}",
                   f"--http-address=127.0.0.1:{port}", "--mem-queue-size=5", env=ENV)
        deadline = time.monotonic() + 30
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                if request(c, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            finally:
                c.close()
            self.assertLess(time.monotonic(), deadline, "ternd never became ready")
            time.sleep(0.1)
        self.assertEqual(d.stop(), 0, d.log())
        return [line.split()[1] for line in d.log().splitlines() if line.strip()]

    def test_log_level_warn_and_nsqds_fatal(self):
        levels = self.levels_of("warn")
        self.assertTrue(levels)
        self.assertEqual(set(levels) - {"warn", "error"}, set(), levels)
        # nsqd's "fatal": errors only (the warning is filtered too).
        self.assertEqual(set(self.levels_of("fatal")) - {"error"}, set())

    def test_journal_stream_prefixes(self):
        log = os.path.join(self.dir, "journal.log")
        open(log, "w").close()
        st = os.stat(log)
        env = dict(ENV, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        d = Daemon(os.path.join(self.dir, "data"), env=env, log_path=log)
        try:
            d.wait_for(" ready:")
        finally:
            self.assertEqual(d.stop(), 0, d.log())
        lines = [line for line in d.log().splitlines() if line]
        self.assertTrue(lines)
        want = {"debug": 7, "info": 6, "notice": 5, "warn": 4, "error": 3}
        for line in lines:
            self.assertRegex(line, r"^<[3-7]>(debug|info|notice|warn|error) \S+:\d+: ")
            prio, level = line[1], line.split()[0].split(">")[1]
            self.assertEqual(int(prio), want[level], line)
        self.assertIn("logging to journald", d.log())


class Reload(unittest.TestCase):
    """SIGHUP: a config file's log-level and certificate change live."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-serve-")
        cls.a = make_cert(cls.dir, "a")
        cls.b = make_cert(cls.dir, "b")
        cls.conf = os.path.join(cls.dir, "ternd.conf")
        cls.write_conf("info", *cls.a)
        cls.d = Daemon(os.path.join(cls.dir, "data"), f"--config={cls.conf}",
                       "--https-address=127.0.0.1:0", env=ENV)
        cls.d.wait_for(" ready:")

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    @classmethod
    def write_conf(cls, level, cert, key, extra=""):
        with open(cls.conf + ".new", "w") as f:
            f.write(f"log-level = {level}\ntls-cert = \"{cert}\"\ntls-key = \"{key}\"\n{extra}")
        os.replace(cls.conf + ".new", cls.conf)

    def hup(self, wait_text):
        self.d.proc.send_signal(signal.SIGHUP)
        return self.d.wait_for(wait_text)

    def test_reload(self):
        self.assertIn(f"configuration: config file {self.conf}", self.d.log())
        self.assertEqual(served_fingerprint(self.d.https_port), der_fingerprint(self.a[0]))

        # 1. The new pair and debug, and an option that needs a restart.
        self.write_conf("debug", *self.b, extra="max-msg-size = 2MiB\n")
        line = self.hup("SIGHUP: reloaded")
        self.assertIn(f"config file {self.conf}", line)
        self.assertIn("log-level=debug", line)
        self.assertIn(f"TLS certificate {self.b[0]}", line)
        self.assertIn("needs a restart: max-msg-size", line)
        self.assertEqual(served_fingerprint(self.d.https_port), der_fingerprint(self.b[0]))
        # debug is on: a failed handshake is now logged.
        with socket.create_connection(("127.0.0.1", self.d.https_port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\n\r\n")
            s.recv(100)
        self.d.wait_for("TLS handshake failed")

        # 2. A pair that does not match keeps the one being served.
        self.write_conf("info", self.b[0], self.a[1])
        line = self.hup("HTTPS keeps its certificate")
        self.assertIn(f'tls-key "{self.a[1]}"', line)
        line = self.d.wait_for("SIGHUP: reloaded")
        self.assertIn("log-level=info", line)
        self.assertNotIn("TLS certificate", line)
        self.assertEqual(served_fingerprint(self.d.https_port), der_fingerprint(self.b[0]))

        # 3. A config file that does not load changes nothing.
        self.write_conf("loud", *self.a)
        self.hup("configuration not reloaded")
        self.assertEqual(served_fingerprint(self.d.https_port), der_fingerprint(self.b[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
