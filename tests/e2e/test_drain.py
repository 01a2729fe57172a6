#!/usr/bin/env python3
"""End-to-end tests of the graceful drain against the real ternd
(docs/operations.md, "Draining and rolling restarts"): POST /v1/drain and
the first SIGTERM take the node out of readiness; every door refuses new
work with a retryable answer (NSQ PUB E_PUB_FAILED on an open connection,
/pub and /v1 produce 503 with Retry-After, new /v1 consumes 503, new live
feeds 503 E_DRAINING); what is held keeps working (an NSQ consumer's FIN
and TOUCH) while it gets no new message; parked /v1 long polls end; live
feeds are closed with E_DRAINING; GET /v1/drain shows the progress; the
process exits 0 once the last in-flight message is FINed, or when
drain-timeout passes, and at once on a second signal; after the restart
every acknowledged message is still there. `ternctl drain --wait` starts
a drain and follows it until the node has gone.

Each case runs its own daemon: a drain ends with the process."""
import argparse
import base64
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import daemon as daemon_mod
import nsqwire
from daemon import Daemon
from wsclient import WS, HandshakeError

PASSWORD = "drain-tests-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
API = {**ADMIN, "X-Tern-Client": "tests"}
TERNCTL = None  # path of the ternctl binary (--ternctl)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-drain-")
        self.data = os.path.join(self.dir, "data")
        self.d = None

    def tearDown(self):
        if self.d is not None and self.d.proc.poll() is None:
            self.d.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *args, first=True):
        self.d = Daemon(self.data, "--websocket-enabled", "--ttl-discard-topics=live*=1h", *args,
                        env=dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD))
        self.d.wait_for("ready")
        self.port = self.d.http_port
        self.tcp = self.d.tcp_port
        if first:
            self.d.wait_for("root user admin created")
        for _ in range(200):
            if self.call("GET", "/readyz")[0] == 200:
                break
            time.sleep(0.05)

    def call(self, method, path, body=None, headers=None, timeout=10):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()

    def progress(self):
        status, body, _ = self.call("GET", "/v1/drain", headers=ADMIN)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def nsq_topic(self, t):
        self.assertEqual(self.call("POST", f"/topic/create?topic={t}")[0], 200)

    def v1_topic(self, t):
        status, body, _ = self.call("POST", "/v1/topics",
                                    json.dumps({"name": t, "partitions": 1}).encode(), API)
        self.assertEqual(status, 201, body)

    def pub(self, t, body):
        status, answer, _ = self.call("POST", f"/pub?topic={t}", body)
        self.assertEqual((status, answer), (200, b"OK"))

    def consumer(self, t, ch="work"):
        c = nsqwire.Conn(self.tcp)
        c.identify(heartbeat_interval=30000, msg_timeout=60000)
        self.assertEqual(c.sub(t, ch), (nsqwire.FRAME_RESPONSE, b"OK"))
        return c

    def assert_retryable_503(self, status, body, headers):
        self.assertEqual(status, 503, body)
        self.assertTrue(headers.get("retry-after"), headers)
        return json.loads(body)

    def wait_exit(self, timeout=60):
        rc = self.d.proc.wait(timeout=timeout)
        self.d.stop()  # collects the log
        return rc


class Drain(Base):
    def test_every_door_while_draining_then_exit_after_the_last_fin(self):
        self.start()
        nsq_t, v1_t, idle_t, live_t = "drainnsq", "drainv1", "drainidle", "livefeed"
        self.nsq_topic(nsq_t)
        self.nsq_topic(live_t)
        self.v1_topic(v1_t)
        self.v1_topic(idle_t)
        acked = []
        for body in (b"held", b"queued"):
            self.pub(nsq_t, body)
            acked.append(body)
        status, body, _ = self.call("POST", f"/v1/topics/{v1_t}/produce", b"v1-one", API)
        self.assertEqual(status, 202, body)
        # An NSQ consumer holds the first message; the second waits behind RDY 1.
        c = self.consumer(nsq_t)
        c.rdy(1)
        held = c.read_message()
        self.assertEqual(held.body, b"held")
        # A WebSocket feed, and a /v1 long poll on an empty topic.
        w = WS(self.port, f"/v1/ws/topics/{live_t}")
        self.assertEqual(w.recv_json()["type"], "ready")
        poll = {}

        def long_poll():
            poll["answer"] = self.call("GET", f"/v1/topics/{idle_t}/consume?wait=10s",
                                       headers=ADMIN, timeout=30)
            poll["at"] = time.monotonic()

        poller = threading.Thread(target=long_poll)
        poller.start()
        for _ in range(100):
            if self.progress()["long_polls"] == 1:
                break
            time.sleep(0.05)
        before = self.progress()
        self.assertEqual(before["state"], "serving")
        self.assertEqual(before["long_polls"], 1)
        self.assertEqual(before["nsq_in_flight"], 1)
        self.assertEqual(before["ws_feeds"], 1)
        self.assertEqual(before["started_ms"], 0)
        self.assertEqual(self.call("GET", "/readyz")[0], 200)

        # Only an admin starts a drain; any authenticated user watches it.
        self.assertEqual(self.call("POST", "/v1/drain", b"", {"X-Tern-Client": "t"})[0], 401)
        self.assertEqual(self.call("GET", "/v1/drain")[0], 401)
        status, body, _ = self.call("POST", "/v1/drain", b'{"timeout_ms":0}', API)
        self.assertEqual(status, 400, body)
        status, body, _ = self.call("POST", "/v1/drain", b'{"timeout_ms":"soon"}', API)
        self.assertEqual(status, 400, body)
        status, body, _ = self.call("POST", "/v1/drain", b'{"timeout_ms":120000}', API)
        self.assertEqual(status, 202, body)
        started = json.loads(body)
        self.assertEqual(started["state"], "draining")
        self.assertEqual(started["deadline_ms"] - started["started_ms"], 120000)
        status, body, _ = self.call("POST", "/v1/drain", b"", API)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["deadline_ms"], started["deadline_ms"])

        # The feed is closed with E_DRAINING; a new one is refused.
        _, close = w.expect_error("E_DRAINING")
        self.assertEqual(close, 1001)
        w.wait_closed()
        w.close()
        with self.assertRaises(HandshakeError) as cm:
            WS(self.port, f"/v1/ws/topics/{live_t}")
        self.assertEqual(cm.exception.status, 503)
        self.assertEqual(cm.exception.json()["message"], "E_DRAINING")
        # The long poll ended early, empty, well before its 10 s wait.
        poller.join(timeout=30)
        self.assertEqual(poll["answer"][0], 204, poll["answer"])
        # Out of readiness, still alive.
        status, body, headers = self.call("GET", "/readyz")
        self.assertEqual(status, 503)
        self.assertEqual(json.loads(body), {"status": "draining"})
        self.assertTrue(headers.get("retry-after"))
        # Every answer now closes its connection: a retry goes through the
        # load balancer again.
        self.assertEqual(headers.get("connection"), "close")
        self.assertEqual(self.call("GET", "/healthz")[0], 200)
        # Publishes: a retryable refusal at every door.
        p = nsqwire.Conn(self.tcp)
        p.identify()
        for _ in range(2):  # the connection stays open for the next one
            kind, data = p.pub(nsq_t, b"refused")
            self.assertEqual(kind, nsqwire.FRAME_ERROR)
            self.assertTrue(data.startswith(b"E_PUB_FAILED"), data)
            self.assertIn(b"draining", data)
        kind, data = p.mpub(nsq_t, [b"a", b"b"])
        self.assertTrue(data.startswith(b"E_MPUB_FAILED"), data)
        kind, data = p.dpub(nsq_t, 1000, b"later")
        self.assertTrue(data.startswith(b"E_DPUB_FAILED"), data)
        p.close()
        err = self.assert_retryable_503(*self.call("POST", f"/pub?topic={nsq_t}", b"refused"))
        self.assertEqual(err["message"], "E_DRAINING")
        err = self.assert_retryable_503(*self.call("POST", f"/mpub?topic={nsq_t}", b"a\nb\n"))
        self.assertEqual(err["message"], "E_DRAINING")
        err = self.assert_retryable_503(
            *self.call("POST", f"/v1/topics/{v1_t}/produce", b"refused", API))
        self.assertIn("draining", err["error"])
        batch = json.dumps([{"payload": "x"}]).encode()
        self.assert_retryable_503(
            *self.call("POST", f"/v1/topics/{v1_t}/produce/batch", batch, API))
        # New /v1 consumes: 503 with Retry-After.
        err = self.assert_retryable_503(
            *self.call("GET", f"/v1/topics/{v1_t}/consume?wait=1s", headers=ADMIN))
        self.assertIn("draining", err["error"])

        # The NSQ consumer gets nothing new, even asking for more.
        c.rdy(10)
        c.touch(held.id)
        c.sock.settimeout(1.5)
        with self.assertRaises(OSError):  # socket.timeout: no frame came
            c.read_frame()
        c.sock.settimeout(10)
        now = self.progress()
        self.assertEqual(now["state"], "draining")
        self.assertEqual(now["nsq_in_flight"], 1)
        self.assertEqual(now["nsq_consumers"], 1)
        self.assertEqual(now["long_polls"], 0)
        self.assertEqual(now["ws_feeds"], 0)
        self.assertEqual(now["publishes_in_progress"], 0)
        self.assertEqual(self.d.proc.poll(), None)
        # The last FIN lets it go.
        c.fin(held.id)
        self.assertEqual(self.wait_exit(), 0, self.d.log())
        self.assertIn("drained after", self.d.log())
        c.close()

        # Everything acknowledged is there after the restart, and the FIN held.
        self.start(first=False)
        c = self.consumer(nsq_t)
        c.rdy(10)
        m = c.read_message()
        self.assertEqual(m.body, b"queued")
        c.fin(m.id)
        c.sock.settimeout(1.5)
        with self.assertRaises(OSError):
            c.read_frame()  # "held" was FINed during the drain: not again
        c.close()
        status, body, _ = self.call("GET", f"/v1/topics/{v1_t}/consume?wait=5s", headers=ADMIN)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["payload"], "v1-one")
        self.assertEqual(self.progress()["state"], "serving")
        self.assertNotIn("connection", self.call("GET", "/readyz")[2])  # kept alive again
        self.assertEqual(self.d.stop(), 0)


class Signals(Base):
    def test_sigterm_drains_and_the_bound_ends_a_consumer_that_never_fins(self):
        self.start("--drain-timeout=2s")
        t = "stuck"
        self.nsq_topic(t)
        self.pub(t, b"never finished")
        c = self.consumer(t)
        c.rdy(1)
        c.read_message()
        self.d.proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            if self.call("GET", "/readyz")[0] == 503:
                break
            time.sleep(0.02)
        status, body, _ = self.call("GET", "/readyz")
        # Seen before the 2 s bound on a loaded machine too, or the
        # process is already gone (then the call above raised).
        self.assertEqual((status, json.loads(body)), (503, {"status": "draining"}))
        self.assertEqual(self.progress()["nsq_in_flight"], 1)
        err = self.assert_retryable_503(*self.call("POST", f"/pub?topic={t}", b"refused"))
        self.assertEqual(err["message"], "E_DRAINING")
        self.assertEqual(self.wait_exit(), 0, self.d.log())
        self.assertIn("drain timed out: 1 NSQ message(s) in flight", self.d.log())
        c.close()
        # Not FINed: delivered again after the restart.
        self.start(first=False)
        c = self.consumer(t)
        c.rdy(1)
        m = c.read_message()
        self.assertEqual(m.body, b"never finished")
        c.fin(m.id)
        c.close()
        self.assertEqual(self.d.stop(), 0)

    def test_a_second_signal_stops_at_once(self):
        self.start("--drain-timeout=10m")
        t = "second"
        self.nsq_topic(t)
        self.pub(t, b"held")
        c = self.consumer(t)
        c.rdy(1)
        c.read_message()
        self.d.proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            if self.progress()["state"] == "draining":
                break
            time.sleep(0.02)
        self.assertEqual(self.progress()["state"], "draining")
        self.d.proc.send_signal(signal.SIGINT)
        # Far inside the 10 minute bound.
        self.assertEqual(self.wait_exit(timeout=120), 0, self.d.log())
        self.assertIn("SIGINT received: shutting down", self.d.log())
        c.close()

    def test_signals_while_shutting_down_change_nothing(self):
        # SIGTERMs sent all through the shutdown: each is said and
        # ignored, and the node still exits 0 (the handlers closed as the
        # shutdown began, and a late SIGTERM ended the process by its
        # default action: a stop counted as unclean).
        self.start()
        self.d.proc.send_signal(signal.SIGINT)
        sent = 0
        while self.d.proc.poll() is None and sent < 20000:
            try:
                self.d.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                break
            sent += 1
            time.sleep(0.001)
        self.assertEqual(self.wait_exit(), 0, self.d.log())
        # Usually the SIGINT begins the shutdown and every SIGTERM after it
        # is said and ignored. But the kernel hands a process-directed
        # signal to any thread that does not block it, and while the loop
        # thread has the SIGINT pending another thread may take the first
        # SIGTERM and reach the loop first (seen in CI): then the SIGTERM
        # begins a drain and the SIGINT, a second signal, stops it at once
        # (or finds it done). Either way each kind began at most once.
        log = self.d.log()
        drains = log.count("SIGTERM received: draining")
        stops = log.count("SIGINT received: shutting down")
        self.assertLessEqual(drains, 1, log)
        self.assertLessEqual(stops, 1, log)
        self.assertGreaterEqual(drains + stops, 1, log)
        if drains == 0:
            self.assertEqual(stops, 1, log)

    def test_idle_node_drains_at_once_on_sigterm(self):
        self.start()
        self.d.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.wait_exit(), 0, self.d.log())
        self.assertIn("SIGTERM received: draining", self.d.log())
        self.assertIn("drained after", self.d.log())


class Ternctl(Base):
    def ternctl(self, *args):
        pw = os.path.join(self.dir, "password")
        with open(pw, "w") as f:
            f.write(PASSWORD + "\n")
        os.chmod(pw, 0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["HOME"] = env["XDG_CONFIG_HOME"] = self.dir  # no ternctl.conf of the machine's
        return [TERNCTL, f"--url=http://127.0.0.1:{self.port}", f"--password-file={pw}", *args], env

    def test_drain_wait_follows_until_the_node_has_gone(self):
        self.start()
        t = "ctlheld"
        self.nsq_topic(t)
        self.pub(t, b"held")
        c = self.consumer(t)
        c.rdy(1)
        m = c.read_message()
        argv, env = self.ternctl("drain", "--bogus")
        bad = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("--bogus", bad.stderr)
        self.assertIsNone(self.d.proc.poll())  # a usage error drains nothing
        self.assertEqual(self.progress()["state"], "serving")
        argv, env = self.ternctl("drain", "--wait", "--drain-timeout=2m")
        ctl = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        try:
            first = ctl.stdout.readline()
            self.assertTrue(first.startswith("draining: 1 NSQ message(s) in flight"), first)
            self.assertIsNone(ctl.poll())  # still waiting for the FIN
            self.assertGreater(self.progress()["deadline_ms"] - self.progress()["started_ms"],
                               60000)
            c.fin(m.id)
            out, err = ctl.communicate(timeout=60)
        finally:
            if ctl.poll() is None:
                ctl.kill()
                ctl.communicate()
        self.assertEqual(ctl.returncode, 0, first + out + err)
        self.assertIn("the node has gone", out)
        self.assertEqual(self.wait_exit(), 0, self.d.log())
        c.close()


def main():
    global TERNCTL
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--ternctl", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    TERNCTL = os.path.abspath(args.ternctl)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
