#!/usr/bin/env python3
"""Remote children (docs/remotes.md, issue 25 part 2) between two tern
clusters on loopback (tests/cluster/harness.py): the remote ("dst") serves
HTTPS with a certificate of a CA this test makes, and has the user the
source sends as; the source ("src") has the remote (with that CA) and a
parent topic with a remote child, and `remotes-allow-addresses=127.0.0.0/8`
lets it dial loopback.

Every message produced on the source reaches the remote child, none lost,
in order per key (each key lands on one partition of the remote), through:
a restart of the remote (state `retrying` with class `unreachable` meanwhile,
lag shown), a password rotation on both sides (the remote answers 401 for a
while: state `retrying`, class `auth`), and, on a three-node source
(replication factor 3, the child attached through another node than the
one that made the parent, messages produced through every node), a SIGKILL
of the leader of parent partition 0 (its cursor moves to the new leader;
a batch sent again may repeat messages, never skips or reorders first
arrivals). DELETE of the remote is refused
(409) while the child uses it; after the detach it goes. The password is
absent from every file under every data directory and from the logs.

Blind (against an HTTPS server of this test standing in for the remote):
a remote answering 302 gets `retrying`/`refused` and no connection ever
reaches its Location (a listener of the test counts them); a 500 gets
`server_error`; the remote's body, reason phrase and headers show nowhere
(GET children, GET /v1/remotes, /metrics, the log); the only Authorization
the remote saw is the one it should. A remote named `localhost` on a
source without remotes-allow-addresses: made fine (a name), then refused
at every dial after resolution (`refused`, the guard's one message in the
log), no request reaching the server.

Run: python3 tests/cluster/test_remote_children.py --ternd build/ternd
"""
import base64
import collections
import http.server
import json
import os
import socket
import ssl
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

PW1 = "Mirror-Pa55word-one-never-in-clear-4c1d"
PW2 = "Mirror-Pa55word-two-never-in-clear-88e2"
HDR = {"X-Tern-Client": "test"}


def files_holding(root, needle):
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


class RemoteChildren(harness.ClusterTest):
    def make_dst(self):
        """The remote cluster: one node, an HTTPS listener, topic orders
        (3 partitions) and the user mirror with produce on it."""
        dst = self.make(1)
        node = dst.nodes[0]
        certs = harness.make_certs(os.path.join(dst.dir, "https-certs"), ["dst"])
        cert, key = certs["dst"]
        node.https_port = harness.free_port()
        node.extra += [f"--https-address=127.0.0.1:{node.https_port}", f"--tls-cert={cert}",
                       f"--tls-key={key}"]
        dst.start()
        st, body = node.request("POST", "/v1/topics", {"name": "orders", "partitions": 3,
                                                       "replication_factor": 1})
        self.assertEqual(st, 201, body)
        st, body = node.request("POST", "/v1/users", {
            "username": "mirror", "password": PW1,
            "grants": [{"action": "produce", "patterns": ["orders"]}]})
        self.assertEqual(st, 201, body)
        with open(certs["ca"]) as f:
            ca_pem = f.read()
        return dst, ca_pem

    def make_src(self, n, dst):
        port = dst.nodes[0].https_port
        src = self.make(n, args=["--remotes-allow-addresses=127.0.0.0/8",
                                 f"--remotes-allowed-ports={port}",
                                 "--remotes-api-hop-encrypted=true"])
        src.start()
        if n > 1:
            src.wait_alive(n)
        return src

    def add_remote(self, node, dst, ca_pem):
        url = f"https://127.0.0.1:{dst.nodes[0].https_port}"

        def attempt():
            st, doc = node.request("POST", "/v1/remotes", {
                "name": "eu", "url": url, "username": "mirror", "password": PW1,
                "ca_pem": ca_pem})
            if st == 503:
                return None
            return st, doc
        st, doc = wait_until("the remote's create", attempt, 30)
        self.assertEqual(st, 201, doc)

    def produce(self, node, first, count):
        """Messages m-first .. m-(first+count-1), key k(i % 7), in order."""
        for start in range(first, first + count, 50):
            batch = [{"payload": f"m-{i}", "key": f"k{i % 7}"}
                     for i in range(start, min(first + count, start + 50))]
            st, body = wait_until(
                "a produce", lambda b=batch: (lambda r: r if r[0] == 202 else None)(
                    node.request("POST", "/v1/topics/orders/produce/batch", b, headers=HDR)),
                60)
            self.assertEqual(st, 202, body)

    def remote_child(self, node):
        st, body = node.request("GET", "/v1/topics/orders/children")
        if st != 200:
            return None
        for ch in body["children"]:
            if ch.get("remote") == "eu":
                return ch
        return None

    def received(self, dst):
        """Every message the remote's topic holds, read through a channel
        of the test: {partition: [(offset, key, payload)]}."""
        node = dst.nodes[0]
        got = collections.defaultdict(list)
        while True:
            st, body = node.request(
                "GET", "/v1/topics/orders/consume?channel=check&max=100&wait=500ms",
                headers=HDR)
            if st == 204:
                break
            self.assertEqual(st, 200, body)
            for m in body["messages"]:
                got[m["partition"]].append((m["offset"], m["key"], m["payload"]))
        return got

    def count_at_dst(self, dst):
        st, body = dst.nodes[0].request("GET", "/v1/topics/orders")
        if st != 200:
            return -1
        return sum(p["message_count"] for p in body["partition_stats"])

    def check_all_in_order(self, dst, total):
        got = self.received(dst)
        seen = set()
        for part, msgs in got.items():
            msgs.sort()
            last = {}
            for _, key, payload in msgs:
                i = int(payload.split("-")[1])
                self.assertEqual(key, f"k{i % 7}")
                # In order per key (a key lands on one partition). At least
                # once: a batch sent again (its leader died before the
                # finish was replicated) repeats messages seen already;
                # every first arrival comes after the ones before it.
                if i in seen:
                    continue
                self.assertGreater(i, last.get(key, -1), (part, key, i))
                last[key] = i
                seen.add(i)
        self.assertEqual(seen, set(range(total)), "messages lost")

    def assert_clean_stop(self, *clusters):
        """Every node stops with status 0 and no sanitizer report (the
        ASan build's run)."""
        for c in clusters:
            codes = c.stop()
            self.assertEqual(set(codes.values()), {0}, codes)
            for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                self.assertNotIn(bad, c.logs())

    def assert_password_nowhere(self, *clusters):
        for c in clusters:
            for pw in (PW1, PW2):
                for n in c.nodes:
                    self.assertEqual(files_holding(n.dir, pw.encode()), [], n.dir)
                self.assertNotIn(pw, c.logs())

    def test_single_node_restart_rotation_and_401(self):
        dst, ca_pem = self.make_dst()
        src = self.make_src(1, dst)
        s = src.nodes[0]
        self.add_remote(s, dst, ca_pem)
        st, body = s.request("POST", "/v1/topics", {"name": "orders", "partitions": 4,
                                                    "replication_factor": 1})
        self.assertEqual(st, 201, body)
        # Refusals first.
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders", "remote": "nope"}, headers=HDR)
        self.assertEqual(st, 404, body)
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders", "remote": "eu", "fanout_delay_ms": -1},
                             headers=HDR)
        self.assertEqual(st, 400, body)
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders", "remote": "eu", "fanout_delay_ms": 0},
                             headers=HDR)
        self.assertEqual(st, 201, body)
        self.assertEqual(body["remote"], "eu")
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders", "remote": "eu"}, headers=HDR)
        self.assertEqual(st, 409, body)
        st, body = s.request("DELETE", "/v1/remotes/eu")
        self.assertEqual(st, 409, body)
        self.assertIn("remote child orders", body["error"])

        self.produce(s, 0, 300)
        wait_until("300 messages at the remote", lambda: self.count_at_dst(dst) >= 300, 60)
        ch = wait_until("lag 0, ok", lambda: (lambda c: c if c and c["lag_messages"] == 0 and
                                              c["state"] == "ok" else None)(
            self.remote_child(s)), 30)
        self.assertTrue(ch["lag_complete"])

        # The remote goes down: retrying, unreachable, the lag shown.
        dst.nodes[0].stop()
        self.produce(s, 300, 100)
        ch = wait_until("retrying unreachable", lambda: (lambda c: c if c and
                                                         c["state"] == "retrying" else None)(
            self.remote_child(s)), 60)
        self.assertEqual(ch["class"], "unreachable")
        self.assertGreater(ch["lag_messages"], 0)
        dst.nodes[0].start()
        dst.nodes[0].wait_ready()
        wait_until("400 at the remote", lambda: self.count_at_dst(dst) >= 400, 120)
        wait_until("ok again", lambda: (self.remote_child(s) or {}).get("state") == "ok", 60)

        # Rotation on the remote first: 401 until the source has it too.
        st, body = dst.nodes[0].request("PUT", "/v1/users/mirror/password",
                                        {"new_password": PW2}, headers=HDR)
        self.assertEqual(st, 204, body)
        self.produce(s, 400, 100)
        ch = wait_until("retrying auth", lambda: (lambda c: c if c and
                                                  c.get("class") == "auth" else None)(
            self.remote_child(s)), 60)
        self.assertEqual(ch["state"], "retrying")
        self.assertEqual(ch["status"], 401)
        self.assertGreater(ch["lag_messages"], 0)
        st, body = s.request("PATCH", "/v1/remotes/eu", {"password": PW2}, headers=HDR)
        self.assertEqual(st, 200, body)
        wait_until("500 at the remote", lambda: self.count_at_dst(dst) >= 500, 120)
        wait_until("ok after the rotation",
                   lambda: (self.remote_child(s) or {}).get("state") == "ok", 60)
        # /metrics: the failures by class, what was sent, the child's gauges.
        self.assertGreater(s.metric('tern_remote_child_failures_total{class="auth"}'), 0)
        self.assertGreater(s.metric('tern_remote_child_failures_total{class="unreachable"}'), 0)
        self.assertEqual(s.metric('tern_remote_child_failures_total{class="tls"}'), 0)
        self.assertGreaterEqual(s.metric("tern_remote_child_sent_total"), 500)
        labels = '{parent="orders",remote="eu",child="orders"}'
        self.assertEqual(s.metric("tern_remote_child_retrying" + labels), 0)
        self.assertEqual(s.metric("tern_remote_child_lag_messages" + labels), 0)
        self.check_all_in_order(dst, 500)

        # Detach; then the remote can go.
        st, body = s.request("DELETE", "/v1/topics/orders/children/orders?remote=eu")
        self.assertEqual(st, 204, body)
        self.assertIsNone(self.remote_child(s))
        st, body = s.request("DELETE", "/v1/remotes/eu")
        self.assertEqual(st, 204, body)
        # Nothing of the remote's answers in the source's log but status and
        # class; no password anywhere.
        self.assertNotIn("authentication required", s.log())
        self.assert_clean_stop(src, dst)
        self.assert_password_nowhere(src, dst)

    def leaders(self, node, topic):
        st, body = node.request("GET", f"/v1/topics/{topic}")
        if st != 200:
            return None
        ps = body.get("partition_stats") or []
        if not ps or not all(p.get("leader") for p in ps):
            return None
        return [str(p["leader"]) for p in ps]

    def test_three_node_source_every_door_and_leader_killed(self):
        dst, ca_pem = self.make_dst()
        src = self.make_src(3, dst)
        n1, n2, n3 = src.nodes
        self.add_remote(n1, dst, ca_pem)
        st, body = n1.request("POST", "/v1/topics", {"name": "orders", "partitions": 3,
                                                     "replication_factor": 3})
        self.assertEqual(st, 201, body)
        wait_until("a leader for every partition on every node",
                   lambda: all(self.leaders(n, "orders") for n in src.nodes), 60)
        # Attached through another node than the one that made the topic.
        st, body = n2.request("POST", "/v1/topics/orders/children",
                              {"child": "orders", "remote": "eu"}, headers=HDR)
        self.assertEqual(st, 201, body)
        wait_until("the remote child's cursor running on every node",
                   lambda: all((self.remote_child(n) or {}).get("lag_complete")
                               for n in src.nodes), 60)
        # Every node's door.
        self.produce(n1, 0, 150)
        self.produce(n2, 150, 150)
        self.produce(n3, 300, 150)
        wait_until("450 at the remote", lambda: self.count_at_dst(dst) >= 450, 120)
        # SIGKILL the leader of partition 0; produce through the others.
        leader = self.leaders(n1, "orders")[0]
        victim = next(n for n in src.nodes if str(n.id) == leader)
        victim.kill()
        alive = [n for n in src.nodes if n is not victim]
        wait_until("a new leader for partition 0",
                   lambda: (self.leaders(alive[0], "orders") or [leader])[0] != leader, 120)
        self.produce(alive[0], 450, 75)
        self.produce(alive[1], 525, 75)
        wait_until("600 at the remote", lambda: self.count_at_dst(dst) >= 600, 180)
        self.check_all_in_order(dst, 600)
        victim.start()
        victim.wait_ready()
        self.assert_clean_stop(src, dst)
        self.assert_password_nowhere(src, dst)


class FakeRemote:
    """An HTTPS server of this test standing in for a remote cluster: it
    answers produce/batch with `status` (202 accepts and keeps the
    payloads; 302 points at `location`; others carry a body the source
    must never show), and counts connections."""

    def __init__(self, cert, key):
        self.status = 202
        self.location = ""
        self.payloads = []
        self.requests = 0
        self.auth = set()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                outer.requests += 1
                outer.auth.add(self.headers.get("Authorization", ""))
                st = outer.status
                if st == 202:
                    for m in json.loads(body):
                        outer.payloads.append(base64.b64decode(m["payload"]).decode())
                    out = json.dumps({"accepted": len(json.loads(body))}).encode()
                else:
                    out = b'{"error":"SECRET-REMOTE-BODY must never show"}'
                self.send_response(st, "SECRET-REMOTE-REASON")
                if st == 302:
                    self.send_header("Location", outer.location)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Secret", "SECRET-REMOTE-HEADER")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", harness.free_port()), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class CountingListener:
    """A TCP listener that only counts the connections it accepts: where a
    redirect points."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


class Blind(harness.ClusterTest):
    """The security of the outbound plane end to end, against a fake remote
    this test runs: no redirects followed (nothing reaches the Location),
    nothing of the remote's answers in the API, the log or /metrics, and a
    DNS name that resolves to a refused address refused before any
    connection."""

    def setUp(self):
        d = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tern-fake-remote-{os.getpid()}")
        certs = harness.make_certs(d, ["fake"])
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        with open(certs["ca"]) as f:
            self.ca_pem = f.read()
        self.fake = FakeRemote(*certs["fake"])
        self.addCleanup(self.fake.close)
        self.target = CountingListener()
        self.addCleanup(self.target.close)
        self.fake.location = f"https://127.0.0.1:{self.target.port}/v1/topics/x/produce/batch"

    def child_state(self, node):
        st, body = node.request("GET", "/v1/topics/orders/children")
        if st != 200:
            return None
        return next((c for c in body["children"] if c.get("remote")), None)

    def source(self, allow):
        args = [f"--remotes-allowed-ports={self.fake.port}", "--remotes-api-hop-encrypted=true"]
        if allow:
            args.append("--remotes-allow-addresses=127.0.0.0/8")
        c = self.make(1, args=args)
        c.start()
        return c

    def attach(self, node, host):
        def attempt():
            st, doc = node.request("POST", "/v1/remotes", {
                "name": "fake", "url": f"https://{host}:{self.fake.port}", "username": "mirror",
                "password": PW1, "ca_pem": self.ca_pem})
            return None if st == 503 else (st, doc)
        st, doc = wait_until("the remote's create", attempt, 30)
        self.assertEqual(st, 201, doc)
        st, body = node.request("POST", "/v1/topics", {"name": "orders", "partitions": 2,
                                                       "replication_factor": 1})
        self.assertEqual(st, 201, body)
        st, body = node.request("POST", "/v1/topics/orders/children",
                                {"child": "orders", "remote": "fake"}, headers=HDR)
        self.assertEqual(st, 201, body)
        batch = [{"payload": f"m-{i}", "key": f"k{i}"} for i in range(5)]
        st, body = node.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)

    def test_redirect_and_bodies_never_shown(self):
        self.fake.status = 302
        c = self.source(allow=True)
        s = c.nodes[0]
        self.attach(s, "127.0.0.1")
        ch = wait_until("retrying on the 302", lambda: (lambda x: x if x and
                                                        x.get("status") == 302 else None)(
            self.child_state(s)), 30)
        self.assertEqual(ch["class"], "refused")
        self.assertEqual(self.target.accepted, 0)  # nothing went to the Location
        self.fake.status = 500
        ch = wait_until("retrying on the 500", lambda: (lambda x: x if x and
                                                        x.get("status") == 500 else None)(
            self.child_state(s)), 90)
        self.assertEqual(ch["class"], "server_error")
        self.assertGreater(s.metric('tern_remote_child_failures_total{class="refused"}'), 0)
        self.assertGreater(
            s.metric('tern_remote_child_failures_total{class="server_error"}'), 0)
        self.fake.status = 202
        wait_until("every message at the fake remote",
                   lambda: set(self.fake.payloads) >= {f"m-{i}" for i in range(5)}, 90)
        wait_until("ok", lambda: (self.child_state(s) or {}).get("state") == "ok", 30)
        self.assertEqual(self.target.accepted, 0)
        self.assertEqual(self.fake.auth, {harness.basic("mirror", PW1)})
        # Nothing the remote sent shows anywhere.
        st, children = s.request("GET", "/v1/topics/orders/children")
        st2, metrics = s.request("GET", "/metrics")
        st3, remotes = s.request("GET", "/v1/remotes")
        for text in (json.dumps(children), str(metrics), json.dumps(remotes), s.log()):
            self.assertNotIn("SECRET-REMOTE", text)
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)
        self.assertNotIn("SECRET-REMOTE", c.logs())
        self.assertNotIn(PW1, c.logs())

    def test_name_resolving_to_a_refused_address(self):
        # Without remotes-allow-addresses, loopback is refused: "localhost"
        # is a name (made fine), refused at every dial after resolution.
        c = self.source(allow=False)
        s = c.nodes[0]
        self.attach(s, "localhost")
        ch = wait_until("retrying, refused", lambda: (lambda x: x if x and
                                                      x.get("state") == "retrying" else None)(
            self.child_state(s)), 30)
        self.assertEqual(ch["class"], "refused")
        self.assertEqual(ch["status"], 0)
        self.assertGreater(ch["lag_messages"], 0)
        self.assertEqual(self.fake.requests, 0)
        self.assertIn("refused by the remotes address guard", s.log())
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)


if __name__ == "__main__":
    harness.main()
