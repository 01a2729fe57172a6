#!/usr/bin/env python3
"""Remotes (docs/remotes.md, issue 25 part 1) on real ternd nodes
(tests/cluster/harness.py): the /v1/remotes routes over a node's HTTPS
listener with a CA the test makes, every refusal they answer, a cluster of
three where writes made on a follower reach the metastore leader (its
audit line names the request), and the password's absence from every
file under the data directories, a backup and the logs.

The tampered-record test uses the test hook of ternd-test (TN_TEST
builds): POST /v1/remotes/{name}/test-tamper proposes the record with one
bit of its sealed bytes flipped, through the metastore, so that every node
holds the tampered record; each node then reports the credential as not
opening, with the clear error, and logs it.

Run: python3 tests/cluster/test_remotes.py --ternd build/ternd-test --ternctl build/ternctl
"""
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import PASSWORD, basic, wait_until  # noqa: E402

TERNCTL = None
SECRET_PW = "Remote-Pa55word-never-in-clear-7f3a"
SECRET_PW2 = "Rotated-Pa55word-never-in-clear-91c"


def https_request(node, port, ca, method, path, body=None, user="admin", pw=PASSWORD,
                  headers=None):
    """(status, parsed JSON or raw bytes) over the node's HTTPS listener,
    verified with the test CA."""
    ctx = ssl.create_default_context(cafile=ca)
    h = dict(headers or {})
    if user is not None:
        h["Authorization"] = basic(user, pw)
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if body is not None:
        h.setdefault("Content-Type", "application/json")
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data
    finally:
        c.close()


def files_holding(root, needle):
    """Every file under root whose bytes hold needle."""
    found = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            try:
                with open(p, "rb") as f:
                    if needle in f.read():
                        found.append(p)
            except OSError:
                pass
    return found


# Logged at debug level (the nodes here run with --log-level=debug): a
# fresh cluster makes its salt once, which is no news to an operator.
SALT_LINE = "metastore: made the cluster's seal salt for remotes' credentials"


def create_first(request, body):
    """The first POST /v1/remotes through request(method, path, body):
    the metastore leader makes the cluster's seal salt once it is ready,
    and a node answers 503 (saying so) until its replica has it; wait for
    that state, then return the answer."""
    def attempt():
        st, doc = request("POST", "/v1/remotes", body)
        if st == 503 and "seal salt is not made yet" in str(doc):
            return None
        return st, doc
    return wait_until("the cluster's seal salt", attempt, 30)


class RemotesTest(harness.ClusterTest):
    def https_node(self, c, node):
        """Give node an HTTPS listener with a certificate of the cluster's
        test CA (made here)."""
        certs = harness.make_certs(os.path.join(c.dir, "https-certs"), [f"node{node.id}"])
        cert, key = certs[f"node{node.id}"]
        node.https_port = harness.free_port()
        node.extra += [f"--https-address=127.0.0.1:{node.https_port}", f"--tls-cert={cert}",
                       f"--tls-key={key}"]
        return certs["ca"]

    def assert_clean_stop(self, c):
        """Every node stops with status 0 and no sanitizer report (the
        ASan build's test run)."""
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)
        for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            self.assertNotIn(bad, c.logs())

    def assert_secret_nowhere(self, c, secrets, extra_dirs=()):
        for s in secrets:
            needle = s.encode()
            for root in [n.dir for n in c.nodes] + list(extra_dirs):
                self.assertEqual(files_holding(root, needle), [], f"{s} found under {root}")
            self.assertNotIn(s, c.logs())


class SingleNode(RemotesTest):
    def test_crud_refusals_and_no_password_anywhere(self):
        c = self.make(1, args=["--remotes-allow-addresses=127.0.0.0/8", "--log-level=debug"])
        node = c.nodes[0]
        ca = self.https_node(c, node)
        c.start()
        port = node.https_port
        req = lambda *a, **kw: https_request(node, port, ca, *a, **kw)  # noqa: E731
        with open(ca) as f:
            ca_pem = f.read()
        body = {"name": "eu", "url": "https://127.0.0.1:4443", "username": "mirror",
                "password": SECRET_PW, "ca_pem": ca_pem}

        # Create over HTTPS: 201, the record without the password.
        st, rec = create_first(req, body)
        self.assertEqual(node.log().count(SALT_LINE), 1)
        self.assertEqual(st, 201, rec)
        self.assertEqual(rec["name"], "eu")
        self.assertEqual(rec["url"], "https://127.0.0.1:4443")
        self.assertEqual(rec["username"], "mirror")
        self.assertEqual(rec["credential_version"], 1)
        self.assertIsNone(rec["last_check"])
        self.assertEqual(rec["created_by"], "admin")
        self.assertNotIn("password", json.dumps(rec))
        rid = rec["id"]
        self.assertRegex(rid, r"^[0-9a-f]{16}$")

        # GET (list and one): never the password; this node opens it.
        st, one = req("GET", "/v1/remotes/eu")
        self.assertEqual(st, 200, one)
        self.assertEqual(one["credential"], "ready")
        self.assertEqual(one["ca_pem"], ca_pem)
        self.assertEqual(one["id"], rid)
        st, lst = req("GET", "/v1/remotes")
        self.assertEqual(st, 200, lst)
        self.assertEqual([r["name"] for r in lst["remotes"]], ["eu"])
        for doc in (one, lst):
            self.assertNotIn(SECRET_PW, json.dumps(doc))
        # Plain HTTP reads work too (no password travels).
        st, _ = node.request("GET", "/v1/remotes/eu")
        self.assertEqual(st, 200)

        # 409: the name taken.
        st, err = req("POST", "/v1/remotes", body)
        self.assertEqual((st, err["error"]), (409, "remote already exists"))
        # 404: unknown.
        for m in ("GET", "DELETE"):
            st, err = req(m, "/v1/remotes/nope")
            self.assertEqual((st, err["error"]), (404, "remote not found"), m)
        st, err = req("PATCH", "/v1/remotes/nope", {"password": "x"})
        self.assertEqual(st, 404, err)

        # 400: bad JSON, missing fields, non-https, the guard.
        bad = [
            ("{", "invalid json"),
            ({"name": "x"}, "name, url, username and password are required"),
            ({**body, "name": "e u"}, "name must match"),
            ({**body, "name": "x", "url": "http://127.0.0.1:4443"}, "the scheme must be https"),
            ({**body, "name": "x", "url": "https://u:p@127.0.0.1:4443"},
             "credentials in the url"),
            ({**body, "name": "x", "url": "https://eu.example.com:8443"},
             "port 8443 is not in remotes-allowed-ports (443,4443)"),
            ({**body, "name": "x", "url": "https://169.254.169.254"},
             "refused by the remotes address guard"),
            ({**body, "name": "x", "url": "https://[::ffff:169.254.169.254]"},
             "refused by the remotes address guard"),
            ({**body, "name": "x", "url": "https://0xa9fea9fe:4443"},
             "refused by the remotes address guard"),
            ({**body, "name": "x", "url": "https://[::1]"},
             "refused by the remotes address guard"),
            ({**body, "name": "x", "ca_pem": "not a certificate"}, "ca_pem must hold PEM"),
            ({**body, "name": "x", "username": "a b"}, "username must match"),
            ({**body, "name": "x", "password": ""}, "password must be 1..1024 bytes"),
            ({**body, "name": "x", "extra": 1}, "unknown field"),
        ]
        for b, msg in bad:
            st, err = req("POST", "/v1/remotes", b)
            self.assertEqual(st, 400, (b, err))
            self.assertIn(msg, err["error"], b)
            self.assertNotIn(SECRET_PW, json.dumps(err))
        # The guard's answer is the same whatever the reason (not an oracle).
        answers = set()
        for url in ("https://169.254.169.254", "https://0.0.0.0", "https://[fe80::1]",
                    "https://224.0.0.1", "https://100.100.100.200", "https://[fd00:ec2::254]"):
            st, err = req("POST", "/v1/remotes", {**body, "name": "x", "url": url})
            self.assertEqual(st, 400, url)
            answers.add(err["error"])
        self.assertEqual(len(answers), 1, answers)

        # 415: the cross-site guard; 403: not an admin; 401: no credentials.
        st, _ = req("POST", "/v1/remotes", json.dumps({**body, "name": "x"}),
                    headers={"Content-Type": "text/plain"})
        self.assertEqual(st, 415)
        st, err = node.request("POST", "/v1/users", {"username": "bob", "password": "bobpw-123"})
        self.assertEqual(st, 201, err)
        for m, p, b in (("GET", "/v1/remotes", None), ("GET", "/v1/remotes/eu", None),
                        ("POST", "/v1/remotes", {**body, "name": "x"}),
                        ("PATCH", "/v1/remotes/eu", {"password": "x"}),
                        ("DELETE", "/v1/remotes/eu", None)):
            st, err = req(m, p, b, user="bob", pw="bobpw-123")
            self.assertEqual((st, err["error"]), (403, "admin rights required"), (m, p))
            st, err = req(m, p, b, user=None)
            self.assertEqual(st, 401, (m, p))

        # 412: a password over plain HTTP (create and rotate).
        st, err = node.request("POST", "/v1/remotes", {**body, "name": "plain"})
        self.assertEqual(st, 412, err)
        self.assertIn("HTTPS listener", err["error"])
        st, err = node.request("PATCH", "/v1/remotes/eu", {"password": SECRET_PW2})
        self.assertEqual(st, 412, err)

        # PATCH: the URL or CA alone is refused (bound to the seal).
        for b in ({"url": "https://127.0.0.2:4443"}, {"ca_pem": ""},
                  {"username": "other"}):
            st, err = req("PATCH", "/v1/remotes/eu", b)
            self.assertEqual(st, 400, (b, err))
            self.assertIn("needs the password again", err["error"])
        st, err = req("PATCH", "/v1/remotes/eu", {})
        self.assertEqual(st, 400, err)
        # Rotate: a new credential version, still opens.
        st, rec = req("PATCH", "/v1/remotes/eu", {"password": SECRET_PW2})
        self.assertEqual(st, 200, rec)
        self.assertEqual(rec["credential_version"], 2)
        # The URL and CA with the password again.
        st, rec = req("PATCH", "/v1/remotes/eu",
                      {"password": SECRET_PW2, "url": "https://127.0.0.2:4443", "ca_pem": ""})
        self.assertEqual(st, 200, rec)
        self.assertEqual((rec["url"], rec["ca_pem"], rec["credential_version"]),
                         ("https://127.0.0.2:4443", None, 3))
        st, one = req("GET", "/v1/remotes/eu")
        self.assertEqual((one["credential"], one["credential_version"], one["id"]),
                         ("ready", 3, rid))
        # A second remote, for the backup and the restart.
        st, rec = req("POST", "/v1/remotes", {**body, "name": "us", "url": "https://127.0.0.3"})
        self.assertEqual(st, 201, rec)

        # Neither /metrics nor any answer carries it.
        st, metrics = node.request("GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertNotIn(SECRET_PW2.encode(), metrics)
        self.assertNotIn(SECRET_PW.encode(), metrics)

        # Audit lines (who, what, which remote, the request id).
        log = node.log()
        for what in ("created remote eu", "changed remote eu", "created remote us"):
            self.assertIn(f"audit: admin {what}", log)
        self.assertIn("audit (metastore leader): admin created remote eu", log)

        # A backup, then the password is in no file, backup or log.
        bdir = os.path.join(c.dir, "backup")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(TERN_URL=f"http://127.0.0.1:{node.http_port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
        r = subprocess.run([TERNCTL, "backup", bdir], env=env, capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(files_holding(bdir, b"https://127.0.0.3"),
                        "the backup holds the remotes")
        # A restart: the records come back and still open (the salt and the
        # secret are the cluster's, not the process's).
        self.assertEqual(node.stop(), 0)
        node.start()
        node.wait_ready()
        st, one = req("GET", "/v1/remotes/eu")
        self.assertEqual((st, one["credential"], one["credential_version"]), (200, "ready", 3))
        self.assertEqual(node.log().count(SALT_LINE), 1)  # made once, kept
        self.assert_secret_nowhere(c, [SECRET_PW, SECRET_PW2], [bdir])

        # DELETE: 204, then 404; the other stays.
        st, _ = req("DELETE", "/v1/remotes/eu")
        self.assertEqual(st, 204)
        st, _ = req("GET", "/v1/remotes/eu")
        self.assertEqual(st, 404)
        self.assertIn("audit: admin deleted remote eu", node.log())
        st, lst = req("GET", "/v1/remotes")
        self.assertEqual([r["name"] for r in lst["remotes"]], ["us"])
        self.assert_clean_stop(c)
        self.assert_secret_nowhere(c, [SECRET_PW, SECRET_PW2], [bdir])

    def test_tampered_record_does_not_open(self):
        c = self.make(1, args=["--remotes-api-hop-encrypted=true", "--log-level=debug"])
        node = c.nodes[0]
        c.start()
        # With remotes-api-hop-encrypted the plain listener takes a password.
        st, rec = create_first(node.request,
                               {"name": "eu", "url": "https://eu.example.com",
                                "username": "mirror", "password": SECRET_PW})
        self.assertEqual(st, 201, rec)
        st, one = node.request("GET", "/v1/remotes/eu")
        self.assertEqual(one["credential"], "ready")
        st, rec = node.request("POST", "/v1/remotes/eu/test-tamper")
        self.assertEqual(st, 200, rec)
        st, one = node.request("GET", "/v1/remotes/eu")
        self.assertEqual(st, 200, one)
        self.assertEqual(one["credential"], "does_not_open")
        msg = ("sealed credential of remote eu does not open: tampered or sealed under another "
               "cluster secret")
        self.assertEqual(one["credential_error"], msg)
        wait_until("the error logged", lambda: msg in node.log(), 10)
        # Rotating the password seals it again: it opens.
        st, rec = node.request("PATCH", "/v1/remotes/eu", {"password": SECRET_PW2})
        self.assertEqual(st, 200, rec)
        st, one = node.request("GET", "/v1/remotes/eu")
        self.assertEqual(one["credential"], "ready")
        self.assert_clean_stop(c)
        self.assert_secret_nowhere(c, [SECRET_PW, SECRET_PW2])


class LoneNode(RemotesTest):
    def test_generated_secret_refuses_create(self):
        # No cluster secret and no peers: a secured lone node generates one
        # per process (not a harness cluster: that always names --peers).
        tmp = tempfile.mkdtemp(prefix="tern-remotes-lone-")
        self.addCleanup(shutil.rmtree, tmp, True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["TERN_ADMIN_PASSWORD"] = PASSWORD
        d = harness.daemon_mod.Daemon(os.path.join(tmp, "data"),
                                      "--remotes-api-hop-encrypted=true", env=env,
                                      log_path=os.path.join(tmp, "ternd.log"))
        try:
            d.wait_for("metastore ready")
            self.assertIn("generated a per-process secret", d.log())

            def post(body):
                c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
                try:
                    c.request("POST", "/v1/remotes", body=json.dumps(body),
                              headers={"Authorization": basic("admin", PASSWORD),
                                       "Content-Type": "application/json"})
                    r = c.getresponse()
                    return r.status, json.loads(r.read())
                finally:
                    c.close()

            def create():
                return post({"name": "eu", "url": "https://eu.example.com",
                             "username": "mirror", "password": SECRET_PW})

            # The root user's seed is applied shortly after ready (until
            # then /v1 answers 503 "not caught up").
            wait_until("the root user", lambda: create()[0] != 503, 30)
            st, err = create()
            self.assertEqual(st, 409, err)
            self.assertIn("generated for this process", err["error"])
            self.assertIn("configure a cluster secret", err["error"])
            self.assertNotIn(SECRET_PW, d.log())
        finally:
            d.stop()

    def test_security_off_refuses(self):
        c = self.make(1, security=False)
        node = c.nodes[0]
        c.start()
        st, err = node.request("GET", "/v1/remotes", auth=False)
        self.assertEqual(st, 403, err)
        self.assertIn("security-enabled=true", err["error"])

    def test_bad_options_refused_at_start(self):
        for opt, msg in (("--remotes-allowed-ports=0", "remotes-allowed-ports"),
                         ("--remotes-allow-addresses=10.0.0.0/40", "remotes-allow-addresses"),
                         ("--remotes-allowed-hosts=a_b", "remotes-allowed-hosts")):
            r = harness.run_ternd(opt, "--data-path=/nonexistent-remotes-test")
            self.assertEqual(r.returncode, 2, (opt, r.stderr))
            self.assertIn(msg, r.stderr)


class ThreeNodes(RemotesTest):
    def test_writes_on_a_follower_reach_the_leader(self):
        c = self.make(3, args=["--remotes-api-hop-encrypted=true", "--log-level=debug"])
        c.start()
        leader = c.find_leader()
        follower = [n for n in c.nodes if n is not leader][0]
        st, rec = create_first(follower.request,
                               {"name": "eu", "url": "https://eu.example.com:4443",
                                "username": "mirror", "password": SECRET_PW})
        # The salt was made once, by the leader.
        self.assertEqual(c.logs().count(SALT_LINE), 1, c.logs())
        self.assertIn(SALT_LINE, leader.log())
        self.assertEqual(st, 201, rec)
        # Every member holds it and opens it (the secret is the cluster's).
        for n in c.nodes:
            wait_until(f"eu on node {n.id}",
                       lambda n=n: n.request("GET", "/v1/remotes/eu")[0] == 200, 30)
            st, one = n.request("GET", "/v1/remotes/eu")
            self.assertEqual((one["credential"], one["id"]), ("ready", rec["id"]), n.id)
        # The follower's audit line and the leader's name the same request.
        line = [x for x in follower.log().splitlines() if "audit: admin created remote eu" in x]
        self.assertEqual(len(line), 1, follower.log())
        request = line[0].split("(request ")[1].split(",")[0]
        wait_until("the leader's audit line",
                   lambda: f"audit (metastore leader): admin created remote eu (request "
                           f"{request}" in leader.log(), 10)
        # Rotate and delete through the other follower.
        other = [n for n in c.nodes if n is not leader and n is not follower][0]
        st, rec = other.request("PATCH", "/v1/remotes/eu", {"password": SECRET_PW2})
        self.assertEqual((st, rec.get("credential_version")), (200, 2), rec)
        wait_until("version 2 on the leader",
                   lambda: leader.request("GET", "/v1/remotes/eu")[1]["credential_version"] == 2,
                   30)
        self.assertIn("audit (metastore leader): admin changed remote eu", leader.log())
        st, err = other.request("POST", "/v1/remotes",
                                {"name": "eu", "url": "https://eu.example.com",
                                 "username": "mirror", "password": SECRET_PW})
        self.assertEqual(st, 409, err)
        st, _ = other.request("DELETE", "/v1/remotes/eu")
        self.assertEqual(st, 204)
        for n in c.nodes:
            wait_until(f"eu gone on node {n.id}",
                       lambda n=n: n.request("GET", "/v1/remotes/eu")[0] == 404, 30)
        wait_until("the leader's delete audit line",
                   lambda: "audit (metastore leader): admin deleted remote eu" in leader.log(), 10)
        self.assert_clean_stop(c)
        self.assert_secret_nowhere(c, [SECRET_PW, SECRET_PW2])


if __name__ == "__main__":
    def configure(args):
        global TERNCTL
        TERNCTL = os.path.abspath(args.ternctl)

    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
