#!/usr/bin/env python3
"""Ready means usable: a client that waited for /readyz is never refused
for credentials that are right. A lone node is started many times on a
fresh data directory, under a CPU hog this test starts itself (so the
window between the metastore's readiness and the root user's seed is
wide); /readyz is polled as fast as the test can, and the moment it says
200 authenticated requests go out: /v1 (list topics, create a topic, read
the root user), `ternctl status`, and with tern's users serving NSQ AUTH,
AUTH on the TCP door and Basic credentials on nsqd's endpoints. None may
be refused as wrong. Before readiness, an authenticated request is
answered 200 or 503 with Retry-After, never 401; wrong credentials get
503 too (they cannot be judged either) or, once ready, 401."""
import argparse
import base64
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import daemon as daemon_mod
from daemon import Daemon, cpu_hog
from nsqwire import FRAME_ERROR, FRAME_RESPONSE, Closed, Conn

PASSWORD = "ready-auth-root-pw"
TERNCTL = None
ROUNDS = 20  # fresh starts of a lone node
NSQ_ROUNDS = 8  # the same with nsq-auth=users
BOUND = 90  # seconds a start may take to become ready


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


ADMIN = basic("admin", PASSWORD)
WRONG = basic("admin", "not-the-password")
NOBODY = basic("nobody", "whatever")



def request(port, method, path, auth=None, body=None, headers=None):
    """(status, headers with lower-case names, body bytes), or None when the
    listener does not answer yet."""
    h = dict(headers or {})
    if auth is not None:
        h["Authorization"] = auth
    if body is not None:
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except ConnectionRefusedError:
        return None
    finally:
        c.close()


def nsq_auth(port, secret):
    """AUTH on a fresh NSQ connection: (frame kind, data)."""
    c = Conn(port, timeout=30)
    try:
        c.identify(feature_negotiation=True)
        c.cmd("AUTH", secret)
        return c.read_frame()
    finally:
        c.close()


class ReadyMeansUsable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tern-ready-auth-")
        self.pwfile = os.path.join(self.tmp, "pw")
        with open(self.pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        os.chmod(self.pwfile, 0o600)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        self.env["TERN_ADMIN_PASSWORD"] = PASSWORD

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, i, *args):
        d = Daemon(os.path.join(self.tmp, f"data{i}"), *args, env=self.env,
                   log_path=os.path.join(self.tmp, f"ternd{i}.log"))
        d.wait_for("HTTP listening on port", timeout=BOUND)
        return d

    def stop(self, d):
        if d.proc.poll() is None:
            rc = d.stop()
            self.assertEqual(rc, 0, d.log())

    def before_ready(self, d, n):
        """One authenticated request while /readyz said 503 a moment ago:
        right credentials get 200 or 503 with Retry-After; wrong ones, or
        a user that does not exist (yet), 503 too, or 401 only once the
        node is ready (it stays ready: nothing drains it here)."""
        auth = (ADMIN, WRONG, NOBODY)[n % 3]
        r = request(d.http_port, "GET", "/v1/topics", auth)
        if r is None:
            return
        status, headers, body = r
        if status == 503:
            self.assertEqual(headers.get("retry-after"), "1", body)
            self.assertEqual(json.loads(body), {"error": "control plane not caught up"})
        elif auth is ADMIN:
            self.assertEqual(status, 200, body)
        else:
            self.assertEqual(status, 401, body)
            self.assertEqual(request(d.http_port, "GET", "/readyz")[0], 200,
                             "401 for credentials judged before the node was ready")

    def wait_ready(self, d, probe):
        """Poll /readyz as fast as we can; between polls, probe(n)."""
        deadline = time.monotonic() + BOUND
        n = 0
        while time.monotonic() < deadline:
            self.assertIsNone(d.proc.poll(), d.log())
            r = request(d.http_port, "GET", "/readyz")
            if r is not None and r[0] == 200:
                return n
            if r is not None:
                self.assertEqual(r[0], 503, r)
            probe(n)
            n += 1
        self.fail(f"not ready after {BOUND} s:\n{d.log()}")

    def test_v1_and_ternctl_right_after_ready(self):
        with cpu_hog():
            for i in range(ROUNDS):
                d = self.start(i)
                try:
                    self.wait_ready(d, lambda n: self.before_ready(d, n))
                    port = d.http_port
                    # The moment /readyz said 200: no 401 for the right password.
                    status, _, body = request(port, "GET", "/v1/topics", ADMIN)
                    self.assertEqual(status, 200, (i, body))
                    status, _, body = request(port, "POST", "/v1/topics", ADMIN,
                                              {"name": f"ready{i}", "partitions": 1})
                    self.assertEqual(status, 201, (i, body))
                    status, _, body = request(port, "GET", "/v1/users/admin", ADMIN)
                    self.assertEqual(status, 200, (i, body))
                    self.assertEqual(json.loads(body)["username"], "admin")
                    r = subprocess.run([TERNCTL, "--url", f"http://127.0.0.1:{port}",
                                        "--password-file", self.pwfile, "status"],
                                       capture_output=True, text=True, timeout=60,
                                       env={k: v for k, v in self.env.items()
                                            if not k.startswith("TERN_")})
                    self.assertEqual(r.returncode, 0, (i, r.stdout, r.stderr))
                    # Now judged: wrong credentials are wrong.
                    self.assertEqual(request(port, "GET", "/v1/topics", WRONG)[0], 401)
                    self.assertEqual(request(port, "GET", "/v1/topics", NOBODY)[0], 401)
                finally:
                    self.stop(d)

    def nsq_before_ready(self, d, n):
        """NSQ AUTH (tern's users) before readiness: OK, or nsqd's answer
        for an auth check that could not be made (E_AUTH_FAILED), never a
        denial of the right secret; nsqd's HTTP endpoints answer 200 or 503
        NOT_READY."""
        if n % 2 == 0:
            try:
                kind, data = nsq_auth(d.tcp_port, f"admin:{PASSWORD}".encode())
            except (Closed, OSError):
                return
            if kind == FRAME_ERROR:
                self.assertEqual(data, b"E_AUTH_FAILED AUTH failed: credentials cannot be "
                                       b"checked yet; try again")
            else:
                self.assertEqual(kind, FRAME_RESPONSE, data)
                self.assertEqual(json.loads(data)["identity"], "admin")
            return
        r = request(d.http_port, "GET", "/stats?format=json", ADMIN)
        if r is not None and r[0] != 200:
            self.assertEqual((r[0], json.loads(r[2])), (503, {"message": "NOT_READY"}))
            self.assertEqual(r[1].get("retry-after"), "1")

    def test_nsq_auth_right_after_ready(self):
        with cpu_hog():
            for i in range(NSQ_ROUNDS):
                d = self.start(i, "--nsq-auth=users")
                try:
                    self.wait_ready(d, lambda n: self.nsq_before_ready(d, n))
                    kind, data = nsq_auth(d.tcp_port, f"admin:{PASSWORD}".encode())
                    self.assertEqual(kind, FRAME_RESPONSE, (i, data))
                    self.assertEqual(json.loads(data)["identity"], "admin")
                    status, _, body = request(d.http_port, "GET", "/stats?format=json", ADMIN)
                    self.assertEqual(status, 200, (i, body))
                    # Judged now: a wrong secret is denied.
                    kind, data = nsq_auth(d.tcp_port, b"admin:wrong")
                    self.assertEqual((kind, data.split(b" ")[0]), (FRAME_ERROR, b"E_AUTH_FAILED"))
                    self.assertNotIn(b"try again", data)
                finally:
                    self.stop(d)


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
