#!/usr/bin/env python3
"""End-to-end tests of how ternd serves the web console (the browser test
is tests/console/): every embedded file under /console/ with its content
type, the ETag and a 304 for it, HEAD, the security headers, /console
redirected to /console/, unknown names 404, no credentials needed for the
static files while /v1 still asks for them, a user reading their own
record (the console's rights) but no one else's, and `--console=false`
answering 404."""
import argparse
import base64
import http.client
import json
import os
import shutil
import sys
import tempfile
import unittest

import daemon as daemon_mod
from daemon import Daemon

ADMIN_PASSWORD = "console-tests-password"
CONSOLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "console")


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ADMIN = basic("admin", ADMIN_PASSWORD)


def request(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


class Console(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-console-")
        cls.d = Daemon(os.path.join(cls.dir, "data"),
                       env=dict(os.environ, TERN_ADMIN_PASSWORD=ADMIN_PASSWORD))
        cls.d.wait_for("ready")
        cls.d.wait_for("root user admin created")
        cls.port = cls.d.http_port

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    def test_every_file_is_served_as_built(self):
        types = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
        names = sorted(os.listdir(CONSOLE_DIR))
        self.assertIn("index.html", names)
        for name in names:
            with open(os.path.join(CONSOLE_DIR, name), "rb") as f:
                want = f.read()
            status, h, body = request(self.port, "GET", "/console/" + name)
            self.assertEqual(status, 200, name)
            self.assertEqual(body, want, name)
            self.assertEqual(h["content-type"], types[os.path.splitext(name)[1]], name)
            self.assertEqual(h["content-length"], str(len(want)))
        status, _, body = request(self.port, "GET", "/console/")
        self.assertEqual(status, 200)
        with open(os.path.join(CONSOLE_DIR, "index.html"), "rb") as f:
            self.assertEqual(body, f.read())

    def test_security_and_cache_headers(self):
        status, h, _ = request(self.port, "GET", "/console/")
        self.assertEqual(status, 200)
        csp = h["content-security-policy"]
        for part in ("default-src 'self'", "script-src 'self'", "frame-ancestors 'none'",
                     "object-src 'none'"):
            self.assertIn(part, csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertEqual(h["x-content-type-options"], "nosniff")
        self.assertEqual(h["x-frame-options"], "DENY")
        self.assertEqual(h["referrer-policy"], "no-referrer")
        self.assertEqual(h["cache-control"], "no-cache")
        self.assertRegex(h["etag"], r'^"[0-9a-f]{8}"$')
        # The page itself carries no inline script or style.
        _, _, page = request(self.port, "GET", "/console/index.html")
        self.assertNotIn(b"<script>", page)
        self.assertNotIn(b"style=", page)
        self.assertNotIn(b"<style", page)

    def test_etag_and_304(self):
        _, h, body = request(self.port, "GET", "/console/app.js")
        etag = h["etag"]
        for inm in (etag, "W/" + etag, f'"00000000", {etag}', "*"):
            status, h2, body2 = request(self.port, "GET", "/console/app.js",
                                        headers={"If-None-Match": inm})
            self.assertEqual(status, 304, inm)
            self.assertEqual(body2, b"")
            self.assertEqual(h2["etag"], etag)
            self.assertNotIn("content-length", h2)
            self.assertIn("content-security-policy", h2)
        status, _, body3 = request(self.port, "GET", "/console/app.js",
                                   headers={"If-None-Match": '"00000000"'})
        self.assertEqual(status, 200)
        self.assertEqual(body3, body)
        # Each file has its own tag.
        _, hc, _ = request(self.port, "GET", "/console/app.css")
        self.assertNotEqual(hc["etag"], etag)

    def test_head_redirect_and_unknown(self):
        status, h, body = request(self.port, "HEAD", "/console/app.css")
        self.assertEqual(status, 200)
        self.assertEqual(body, b"")
        self.assertGreater(int(h["content-length"]), 0)
        status, h, _ = request(self.port, "GET", "/console")
        self.assertEqual(status, 301)
        self.assertEqual(h["location"], "/console/")
        for path in ("/console/nope.js", "/console/../v1/topics", "/console/app.js/x"):
            status, _, _ = request(self.port, "GET", path)
            self.assertEqual(status, 404, path)
        status, h, _ = request(self.port, "POST", "/console/app.js", body=b"x")
        self.assertEqual(status, 405)

    def test_assets_are_public_and_the_data_is_not(self):
        status, _, _ = request(self.port, "GET", "/console/")
        self.assertEqual(status, 200)
        status, h, _ = request(self.port, "GET", "/v1/topics")
        self.assertEqual(status, 401)
        self.assertIn("www-authenticate", h)

    def test_a_user_reads_their_own_record_only(self):
        body = json.dumps({"username": "reader", "password": "reader-pw",
                           "grants": [{"action": "consume", "patterns": ["r-*"]}]})
        status, _, out = request(self.port, "POST", "/v1/users", body=body,
                                 headers={**ADMIN, "Content-Type": "application/json"})
        self.assertEqual(status, 201, out)
        reader = basic("reader", "reader-pw")
        status, _, out = request(self.port, "GET", "/v1/users/reader", headers=reader)
        self.assertEqual(status, 200, out)
        rec = json.loads(out)
        self.assertEqual(rec["username"], "reader")
        self.assertEqual(rec["grants"], [{"action": "consume", "patterns": ["r-*"]}])
        self.assertNotIn("hash", rec)
        status, _, out = request(self.port, "GET", "/v1/users/admin", headers=reader)
        self.assertEqual(status, 403)
        self.assertEqual(json.loads(out), {"error": "admin rights required"})
        status, _, _ = request(self.port, "GET", "/v1/users", headers=reader)
        self.assertEqual(status, 403)
        status, _, out = request(self.port, "GET", "/v1/users/reader", headers=ADMIN)
        self.assertEqual(status, 200)

    def test_console_off(self):
        d = tempfile.mkdtemp(prefix="tern-console-off-")
        try:
            dm = Daemon(os.path.join(d, "data"), "--console=false",
                        env=dict(os.environ, TERN_ADMIN_PASSWORD=ADMIN_PASSWORD))
            dm.wait_for("ready")
            try:
                self.assertNotIn("web console", dm.log())
                for path in ("/console/", "/console/app.js", "/console"):
                    status, _, _ = request(dm.http_port, "GET", path)
                    self.assertEqual(status, 404, path)
            finally:
                self.assertEqual(dm.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
