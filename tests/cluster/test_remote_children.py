#!/usr/bin/env python3
"""Remote children and remote checks (docs/remotes.md, issue 25 part 2)
between two tern clusters on loopback (tests/cluster/harness.py): the
remote ("dst") serves HTTPS with a certificate of a CA this test makes, and
has the user the source sends as; the source ("src") has the remote (with
that CA) and a parent topic with a remote child, and
`remotes-allow-addresses=127.0.0.0/8` lets it dial loopback.

Checks (POST /v1/remotes/{name}/check, and the check at every attach): ok
without and with a topic (nothing produced), not_found (404) for a missing
topic, forbidden (403) for one without the grant, both refusing the attach
with 502 naming the member and class; unreachable while the remote is
down, auth (401) during a rotation; on the three-node source every member
answers, a member that did not ask keeps only its own row as last_check,
and a member killed with SIGKILL shows as unreachable with
member_unreachable.

Every message produced on the source reaches the remote child, none lost,
in order per key (each key lands on one partition of the remote), through:
a restart of the remote (state `retrying` with class `unreachable` meanwhile,
lag shown), a password rotation on both sides (the remote answers 401 for a
while, 429 once its throttle of failed logins is spent: state `retrying`,
class `auth` or `refused`, with sends counted under `auth`), the NSQ doors (PUB, MPUB, nsqd's
/pub and /mpub, on a parent of one partition the NSQ doors made: in order,
none lost), and, on a three-node source
(replication factor 3, the child attached through another node than the
one that made the parent, messages produced through every node), a SIGKILL
of the leader of parent partition 0 (its cursor moves to the new leader;
a batch sent again may repeat messages, never skips or reorders first
arrivals); a key that is not UTF-8 arrives as the same bytes (base64
with key_encoding), not holding back what follows. DELETE of the remote is refused
(409) while the child uses it; after the detach it goes. The password is
absent from every file under every data directory and from the logs.

Blind (against an HTTPS server of this test standing in for the remote):
a remote answering 302 gets `retrying`/`refused` and no connection ever
reaches its Location (a listener of the test counts them); a check sees
the 302 as refused too; a 500 gets `server_error`; the remote's body,
reason phrase and headers show nowhere (GET children, GET /v1/remotes, a
check's answer, /metrics, the log); the only Authorization the remote saw
is the one it should. A delayed child sends each message at its own due
time, not carried along early in an older message's batch. A delayed
message waiting longer than its cursor's lease (ternd-test's
TERN_TEST_RCHILD_LEASE_MS) keeps its lease and is sent once, not once
per lease; large messages behind a slow remote (16 MiB held at most)
are each sent once; a batch a proxy answers 413 is split until it
fits. Refused for good: a message the remote answers 400 in any batch
(split until it is alone) and one over a proxy's body limit alone (413)
land, with their keys, in the parent's dead-letter topic
orders.fanout.<epoch>.DLQ, counted and logged, every other message
arriving in order; one whose move the owner rule refuses (the dead-letter
topic owned by another user) is sent and refused again at each try,
counted at none, and counted once when a move is done after an admin
gives the topic the parent's owner; a partition whose batches the remote answers 503
holds its share of the cursor's 16 MiB, not all of it, so the other
partition's messages arrive meanwhile (and its own once the remote takes
them, none dead-lettered). Names resolving to refused addresses: the source
runs in a mount namespace of its own with a hosts file of this test
bind-mounted over /etc/hosts there (`unshare --mount`; the machine's file
is untouched); a name only that file knows, resolving to an allowed
address, works; names resolving to another loopback address, the cloud
metadata addresses and an IPv4-mapped loopback are refused after
resolution with the guard's one class and sentence, by the check, the
check at attach and a cursor's dial, no request reaching the server.

Run: python3 tests/cluster/test_remote_children.py --ternd build/ternd-test
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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn  # noqa: E402  (tests/e2e)

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

    def check(self, node, topic=None, remote="eu"):
        """POST /v1/remotes/{remote}/check: (status, body)."""
        return node.request("POST", f"/v1/remotes/{remote}/check",
                            {"topic": topic} if topic is not None else None, headers=HDR,
                            timeout=60)

    def assert_check(self, node, topic, cls, http_status=None, remote="eu"):
        """A check whose every member answers class cls; its table."""
        st, body = self.check(node, topic, remote)
        self.assertEqual(st, 200, body)
        chk = body["check"]
        self.assertEqual(chk["status"], cls, chk)
        self.assertEqual(chk["topic"], topic)
        self.assertTrue(chk["asked_here"])
        self.assertEqual(set(chk["members"]), {str(n.id) for n in node.cluster.nodes}, chk)
        for row in chk["members"].values():
            self.assertEqual(row["status"], cls, chk)
            self.assertIsInstance(row["ms"], int)
            self.assertNotIn("member_unreachable", row)
            if cls != "ok":
                self.assertEqual(row.get("http_status"), http_status, chk)
        return chk

    def produce_nsq(self, node, first, count):
        """Messages n-first .. n-(first+count-1) to topic nsqin through
        nsqd's four producing doors in turn, in order: PUB and MPUB on the
        TCP door, /pub and /mpub on its HTTP door."""
        st, info = node.nsq_http("GET", "/info")
        self.assertEqual(st, 200, info)
        conn = Conn(info["tcp_port"], host=node.host, timeout=60)
        try:
            conn.identify()
            i = first
            while i < first + count:
                door = (i // 10) % 4
                n = min(10, first + count - i)
                bodies = [f"n-{j}".encode() for j in range(i, i + n)]
                if door == 0:
                    for b in bodies:
                        self.assertEqual(conn.pub("nsqin", b), (0, b"OK"))
                elif door == 1:
                    self.assertEqual(conn.mpub("nsqin", bodies), (0, b"OK"))
                elif door == 2:
                    for b in bodies:
                        st, ans = node.nsq_http("POST", "/pub?topic=nsqin", b)
                        self.assertEqual(st, 200, ans)
                else:
                    st, ans = node.nsq_http("POST", "/mpub?topic=nsqin", b"\n".join(bodies))
                    self.assertEqual(st, 200, ans)
                i += n
        finally:
            conn.close()

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
                got[m["partition"]].append((m["offset"], m.get("key"), m["payload"]))
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
                if not payload.startswith("m-"):
                    continue  # the NSQ doors' (check_nsq_in_order)
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

    def check_nsq_in_order(self, dst, total):
        """Every n- message (the NSQ doors', keyless, from the parent nsqin
        of one partition) arrived; on each partition of the remote their
        first arrivals are in the order produced (a batch lands on one
        partition, and the cursor sends the next only after it)."""
        got = self.received(dst)
        seen = set()
        for part, msgs in got.items():
            msgs.sort()
            last = -1
            for _, _, payload in msgs:
                if not payload.startswith("n-"):
                    continue
                i = int(payload.split("-")[1])
                if i in seen:
                    continue
                self.assertGreater(i, last, (part, i))
                last = i
                seen.add(i)
        self.assertEqual(seen, set(range(total)), "NSQ door messages lost")

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

    def lone_source(self, partitions):
        """The remote cluster and a one-node source with the remote eu and
        topic orders of that many partitions: (dst, ca_pem, src, node)."""
        dst, ca_pem = self.make_dst()
        src = self.make_src(1, dst)
        s = src.nodes[0]
        self.add_remote(s, dst, ca_pem)
        st, body = s.request("POST", "/v1/topics", {"name": "orders", "partitions": partitions,
                                                    "replication_factor": 1})
        self.assertEqual(st, 201, body)
        return dst, ca_pem, src, s

    def test_single_node_restart_rotation_and_401(self):
        dst, ca_pem, src, s = self.lone_source(4)
        # Checks: no check yet; the remote answers, the credential works;
        # with a topic, it is there and the user may produce on it (an
        # empty batch: nothing produced); a missing topic, a topic without
        # the grant; the route's refusals.
        st, rec = s.request("GET", "/v1/remotes/eu")
        self.assertEqual(st, 200, rec)
        self.assertIsNone(rec["last_check"])
        chk = self.assert_check(s, None, "ok")
        self.assertIsNone(chk["topic"])
        self.assert_check(s, "orders", "ok")
        self.assertEqual(self.count_at_dst(dst), 0)  # the check produced nothing
        self.assert_check(s, "missing", "not_found", 404)
        st, body = dst.nodes[0].request("POST", "/v1/topics", {"name": "private", "partitions": 1,
                                                              "replication_factor": 1})
        self.assertEqual(st, 201, body)
        self.assert_check(s, "private", "forbidden", 403)
        st, rec = s.request("GET", "/v1/remotes/eu")
        self.assertEqual(rec["last_check"]["topic"], "private")
        self.assertEqual(rec["last_check"]["status"], "forbidden")
        self.assertEqual(rec["last_check"]["members"]["1"]["http_status"], 403)
        st, body = self.check(s, None, remote="nope")
        self.assertEqual(st, 404, body)
        st, body = s.request("POST", "/v1/remotes/eu/check", {"topic": "no spaces"},
                             headers=HDR)
        self.assertEqual(st, 400, body)
        st, body = s.request("POST", "/v1/remotes/eu/check", {"topic": 5}, headers=HDR)
        self.assertEqual(st, 400, body)
        st, body = s.request("POST", "/v1/users", {
            "username": "reader", "password": "Reader-pw-1234",
            "grants": [{"action": "consume", "patterns": ["orders"]}]})
        self.assertEqual(st, 201, body)
        st, body = harness.http_call(s.host, s.http_port, "POST", "/v1/remotes/eu/check",
                                     body={"topic": "orders"}, headers={
                                         **HDR, "Authorization": harness.basic(
                                             "reader", "Reader-pw-1234")}, auth=False)
        self.assertEqual(st, 403, body)
        # The check at attach refuses a child the remote would refuse,
        # naming the member and the class; nothing is attached.
        for child, cls in (("missing", "not_found"), ("private", "forbidden")):
            st, body = s.request("POST", "/v1/topics/orders/children",
                                 {"child": child, "remote": "eu"}, headers=HDR, timeout=60)
            self.assertEqual(st, 502, body)
            self.assertIn(f"node 1: {cls}", body["error"])
            self.assertEqual(body["check"]["status"], cls)
        st, body = s.request("GET", "/v1/topics/orders/children")
        self.assertEqual([c for c in body["children"] if c.get("remote")], [], body)
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
        chk = self.assert_check(s, "orders", "unreachable")
        self.assertNotIn("http_status", chk["members"]["1"])
        dst.nodes[0].start()
        dst.nodes[0].wait_ready()
        wait_until("400 at the remote", lambda: self.count_at_dst(dst) >= 400, 120)
        wait_until("ok again", lambda: (self.remote_child(s) or {}).get("state") == "ok", 60)

        # Rotation on the remote first: 401 until the source has it too.
        st, body = dst.nodes[0].request("PUT", "/v1/users/mirror/password",
                                        {"new_password": PW2}, headers=HDR)
        self.assertEqual(st, 204, body)
        # Before any message waits (so that the remote's throttle of failed
        # logins, 5 per user, is not spent by the cursor's retries first):
        # a check says auth (401), and an attach is refused for it.
        self.assert_check(s, None, "auth", 401)
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders2", "remote": "eu"}, headers=HDR, timeout=60)
        self.assertEqual(st, 502, body)
        self.assertIn("node 1: auth (HTTP 401)", body["error"])
        self.produce(s, 400, 100)
        # The cursors of the four parent partitions get 401 (auth), and once
        # the remote's throttle of failed logins (a bucket of 5 per user)
        # is spent, 429 (refused) until a token comes back: the child shows
        # whichever its last failure was. Each class with its own status.
        wait_until("a send refused for its credential",
                   lambda: (s.metric('tern_remote_child_failures_total{class="auth"}') or 0) > 0,
                   60)
        ch = wait_until("retrying auth or refused", lambda: (lambda c: c if c and
                                                             c.get("state") == "retrying" and
                                                             c.get("class") in ("auth", "refused")
                                                             else None)(
            self.remote_child(s)), 60)
        self.assertEqual(ch["status"], 401 if ch["class"] == "auth" else 429, ch)
        self.assertGreater(ch["lag_messages"], 0)
        st, body = s.request("PATCH", "/v1/remotes/eu", {"password": PW2}, headers=HDR)
        self.assertEqual(st, 200, body)
        wait_until("500 at the remote", lambda: self.count_at_dst(dst) >= 500, 120)
        wait_until("ok after the rotation",
                   lambda: (self.remote_child(s) or {}).get("state") == "ok", 60)
        self.assert_check(s, "orders", "ok")
        # /metrics: the failures by class, what was sent, the child's gauges.
        self.assertGreater(s.metric('tern_remote_child_failures_total{class="auth"}'), 0)
        self.assertGreater(s.metric('tern_remote_child_failures_total{class="unreachable"}'), 0)
        self.assertEqual(s.metric('tern_remote_child_failures_total{class="tls"}'), 0)
        self.assertGreaterEqual(s.metric("tern_remote_child_sent_total"), 500)
        labels = '{parent="orders",remote="eu",child="orders"}'
        self.assertEqual(s.metric("tern_remote_child_retrying" + labels), 0)
        self.assertEqual(s.metric("tern_remote_child_lag_messages" + labels), 0)
        self.check_all_in_order(dst, 500)

        # The NSQ doors: a parent the NSQ doors made (no owner: open to
        # them; one partition) with the same remote child; PUB, MPUB, /pub
        # and /mpub all reach it, none lost, in order.
        st, body = s.nsq_http("POST", "/topic/create?topic=nsqin")
        self.assertEqual(st, 200, body)
        st, body = wait_until("nsqin in the metastore", lambda: (lambda r: r if r[0] == 200
                                                                  else None)(
            s.request("GET", "/v1/topics/nsqin")), 30)
        self.assertEqual(len(body["partition_stats"]), 1, body)
        st, body = s.request("POST", "/v1/topics/nsqin/children",
                             {"child": "orders", "remote": "eu"}, headers=HDR, timeout=60)
        self.assertEqual(st, 201, body)
        base = self.count_at_dst(dst)
        self.produce_nsq(s, 0, 200)
        wait_until("200 more at the remote", lambda: self.count_at_dst(dst) >= base + 200, 120)
        self.check_nsq_in_order(dst, 200)
        st, body = s.request("DELETE", "/v1/topics/nsqin/children/orders?remote=eu")
        self.assertEqual(st, 204, body)

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

    def test_binary_key_reaches_the_remote(self):
        """A key that is not UTF-8 (a produce's `?key=%ff`: any bytes are a
        key on the parent) reaches the remote as the same bytes, and does
        not hold back the messages after it."""
        dst, _, src, s = self.lone_source(1)
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders", "remote": "eu"}, headers=HDR, timeout=60)
        self.assertEqual(st, 201, body)
        for key, payload in (("%ff%fe", "binary-key"), ("k%C3%A9", "utf8-key")):
            st, body = s.request("POST", f"/v1/topics/orders/produce?key={key}", payload,
                                 headers=HDR)
            self.assertEqual(st, 202, body)
        self.produce(s, 0, 3)
        wait_until("every message at the remote", lambda: self.count_at_dst(dst) >= 5, 30)
        keys = {}
        for msgs in self.received(dst).values():
            for _, key, payload in msgs:
                keys[payload] = key
        st, body = dst.nodes[0].request("GET", "/v1/topics/orders/consume?channel=keys&max=10",
                                        headers=HDR)
        self.assertEqual(st, 200, body)
        raw = {m["payload"]: (m.get("key"), m.get("key_encoding")) for m in body["messages"]}
        self.assertEqual(raw["binary-key"], ("//4=", "base64"))  # 0xff 0xfe
        self.assertEqual(raw["utf8-key"], ("k\u00e9", None))
        self.assertEqual(keys["m-2"], "k2")
        self.assert_clean_stop(src, dst)

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
        # A check on every member, asked through node 1; node 3 (which
        # asked none) keeps only its own row of it.
        self.assert_check(n1, "orders", "ok")
        st, rec = n3.request("GET", "/v1/remotes/eu")
        self.assertEqual(st, 200, rec)
        self.assertFalse(rec["last_check"]["asked_here"], rec)
        self.assertEqual(set(rec["last_check"]["members"]), {str(n3.id)}, rec)
        self.assertEqual(rec["last_check"]["status"], "ok", rec)
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
        # A check now: the killed member is still alive in the metastore
        # (cluster-dead-after), so it is asked, does not answer, and shows
        # as unreachable with member_unreachable; the others are ok.
        st, body = alive[0].request("POST", "/v1/remotes/eu/check", {"topic": "orders"},
                                    headers=HDR, timeout=90)
        self.assertEqual(st, 200, body)
        rows = body["check"]["members"]
        self.assertEqual(set(rows), {str(n.id) for n in src.nodes}, body)
        self.assertEqual(rows[str(victim.id)]["status"], "unreachable", body)
        self.assertTrue(rows[str(victim.id)]["member_unreachable"], body)
        self.assertTrue(rows[str(victim.id)]["error"], body)
        for n in alive:
            self.assertEqual(rows[str(n.id)]["status"], "ok", body)
        self.assertEqual(body["check"]["status"], "unreachable", body)
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
        self.answer_delay = 0.0  # seconds each answer waits
        self.max_body = None  # a longer body is answered 413, as a proxy's limit
        # A batch holding a payload that starts with one of these is
        # answered poison_status (a 400 naming that message, as tern's
        # over --max-msg-size); one holding a stall one 503 (the remote's
        # state: never dead-lettered).
        self.poison = set()
        self.poison_status = 400
        self.stall = set()
        self.refused = collections.Counter()  # answers other than 202, by status
        self.location = ""
        self.payloads = []
        self.arrived = {}  # payload: time.monotonic() of its first arrival
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
                time.sleep(outer.answer_delay)
                st = outer.status
                if outer.max_body is not None and n > outer.max_body:
                    st = 413
                elif st == 202 and (outer.poison or outer.stall):
                    heads = {base64.b64decode(m["payload"])[:8].decode() for m in json.loads(body)}
                    if heads & outer.poison:
                        st = outer.poison_status
                    elif heads & outer.stall:
                        st = 503
                if st != 202:
                    outer.refused[st] += 1
                if st == 202:
                    for m in json.loads(body):
                        payload = base64.b64decode(m["payload"]).decode()
                        outer.payloads.append(payload)
                        outer.arrived.setdefault(payload, time.monotonic())
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

    def source(self, allow, env_extra=None):
        args = [f"--remotes-allowed-ports={self.fake.port}", "--remotes-api-hop-encrypted=true"]
        if allow:
            args.append("--remotes-allow-addresses=127.0.0.0/8")
        c = self.make(1, args=args)
        if env_extra:
            env = {**c.env(), **env_extra}
            c.env = lambda: env
        c.start()
        return c

    def attached_source(self, delay_ms=0, lease_ms=None):
        """A source of one node (ternd-test's TERN_TEST_RCHILD_LEASE_MS set
        when lease_ms is: skipped without ternd-test), the fake as remote
        fake, topic orders (1 partition) with the fake's orders as a remote
        child of that delay: (cluster, node)."""
        c = self.source(True, None if lease_ms is None else
                        {"TERN_TEST_RCHILD_LEASE_MS": str(lease_ms)})
        s = c.nodes[0]
        self.add_remote(s, "fake", "127.0.0.1")
        self.topic_with_child(s, 1, "fake", delay_ms)
        if lease_ms is not None and f"leases of {lease_ms} ms" not in s.log():
            self.skipTest("needs ternd-test (TERN_TEST_RCHILD_LEASE_MS)")
        return c, s

    def produce_large(self, s, n):
        """n messages of 512 KiB to orders on s, in batches of 8 (4 MiB),
        each payload starting with its number in 8 digits."""
        filler = "x" * (512 * 1024 - 8)
        for first in range(0, n, 8):
            batch = [{"payload": f"{i:08d}{filler}", "key": "k"} for i in range(first, first + 8)]
            st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR,
                                 timeout=30)
            self.assertEqual(st, 202, body)

    def topic_with_child(self, s, partitions, remote, delay_ms=0):
        """Topic orders on s with the orders of remote as a remote child."""
        st, body = s.request("POST", "/v1/topics", {"name": "orders", "partitions": partitions,
                                                    "replication_factor": 1})
        self.assertEqual(st, 201, body)
        st, body = s.request("POST", "/v1/topics/orders/children",
                             {"child": "orders", "remote": remote, "fanout_delay_ms": delay_ms},
                             headers=HDR, timeout=60)
        self.assertEqual(st, 201, body)

    def add_remote(self, node, name, host):
        def attempt():
            st, doc = node.request("POST", "/v1/remotes", {
                "name": name, "url": f"https://{host}:{self.fake.port}", "username": "mirror",
                "password": PW1, "ca_pem": self.ca_pem})
            return None if st == 503 else (st, doc)
        st, doc = wait_until("the remote's create", attempt, 30)
        self.assertEqual(st, 201, doc)

    def attach(self, node, host, then_status=202):
        """The remote fake at host, topic orders with it as a remote child
        (the check at attach passes: the fake accepts), then the fake
        answers then_status and 5 messages are produced."""
        self.add_remote(node, "fake", host)
        self.topic_with_child(node, 2, "fake")
        self.fake.status = then_status
        batch = [{"payload": f"m-{i}", "key": f"k{i}"} for i in range(5)]
        st, body = node.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)

    def test_redirect_and_bodies_never_shown(self):
        c = self.source(allow=True)
        s = c.nodes[0]
        self.attach(s, "127.0.0.1", then_status=302)
        # A check sees the 302 as refused, and goes nowhere near the
        # Location either.
        st, body = s.request("POST", "/v1/remotes/fake/check", {"topic": "orders"}, headers=HDR,
                             timeout=60)
        self.assertEqual(st, 200, body)
        self.assertEqual(body["check"]["members"]["1"]["status"], "refused", body)
        self.assertEqual(body["check"]["members"]["1"]["http_status"], 302, body)
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
        self.fake.status = 500
        st4, checked = s.request("POST", "/v1/remotes/fake/check", {"topic": "orders"},
                                 headers=HDR, timeout=60)
        self.assertEqual(checked["check"]["status"], "server_error", checked)
        self.assertIsNotNone(json.loads(json.dumps(remotes))["remotes"][0]["last_check"])
        for text in (json.dumps(children), str(metrics), json.dumps(remotes), json.dumps(checked),
                     s.log()):
            self.assertNotIn("SECRET-REMOTE", text)
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)
        self.assertNotIn("SECRET-REMOTE", c.logs())
        self.assertNotIn(PW1, c.logs())

    def test_delayed_child_sends_each_message_when_due(self):
        """A delayed remote child sends each message once its own publish
        time plus the delay has passed: a message published 2.5 s after
        another is not carried along in the first one's batch."""
        c, s = self.attached_source(delay_ms=4000)
        published = {}
        for i in range(2):
            if i > 0:
                time.sleep(2.5)
            st, body = s.request("POST", "/v1/topics/orders/produce/batch",
                                 [{"payload": f"d-{i}", "key": "k"}], headers=HDR)
            self.assertEqual(st, 202, body)
            published[f"d-{i}"] = time.monotonic()
        wait_until("both delayed messages at the fake",
                   lambda: {"d-0", "d-1"} <= set(self.fake.arrived), 60)
        for name, at in published.items():
            early = at + 4.0 - self.fake.arrived[name]
            self.assertLess(early, 0.3, f"{name} arrived {early:.2f} s before it was due")
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_delayed_message_waits_on_its_lease(self):
        """A delayed child holds a message for longer than its cursor's
        lease (ternd-test's TERN_TEST_RCHILD_LEASE_MS=1500 against a
        delay of 6 s): the lease is kept for the wait, so the message is
        not delivered again to the cursor and sent more than once."""
        c, s = self.attached_source(delay_ms=6000, lease_ms=1500)
        batch = [{"payload": f"w-{i}", "key": "k"} for i in range(3)]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        wait_until("the delayed messages at the fake",
                   lambda: {"w-0", "w-1", "w-2"} <= set(self.fake.payloads), 60)
        time.sleep(3)  # any copy still coming
        counts = collections.Counter(self.fake.payloads)
        self.assertEqual(counts, {"w-0": 1, "w-1": 1, "w-2": 1})
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_large_messages_held_within_bounds(self):
        """Large messages to a slow remote (each answer takes 1 s; 80
        messages of 512 KiB, 10 batches of 4 MiB) with the cursor's lease
        made 8 s (ternd-test's TERN_TEST_RCHILD_LEASE_MS): the cursor holds
        a bounded number of bytes (16 MiB), not 2000 messages whatever
        their size, so none waits past its lease and each is sent once."""
        c, s = self.attached_source(lease_ms=8000)
        self.fake.answer_delay = 1.0
        self.produce_large(s, 80)
        want = {f"{i:08d}" for i in range(80)}
        wait_until("every large message at the fake",
                   lambda: {p[:8] for p in self.fake.payloads} >= want, 120)
        time.sleep(3)  # any copy still coming
        counts = collections.Counter(p[:8] for p in self.fake.payloads)
        self.assertEqual([k for k, n in counts.items() if n > 1], [])
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_cursor_let_go_of_lapsed_messages_takes_more(self):
        """The cursor at its hold (16 MiB of 512 KiB messages) while its
        first request outwaits the leases (answered in 2 s, ternd-test's
        TERN_TEST_RCHILD_LEASE_MS=1500; the later ones at once): the
        leases lapse while it takes nothing more, so its settles after the
        answers settle nothing; once it holds less it takes more (the
        lapsed ones again, and those never delivered) with no publish to
        wake the channel (was: the last 8 stayed on the channel)."""
        c, s = self.attached_source(lease_ms=1500)
        self.fake.answer_delay = 2.0
        self.produce_large(s, 40)
        wait_until("the first request at the fake", lambda: self.fake.requests >= 1, 30)
        self.fake.answer_delay = 0.0
        want = {f"{i:08d}" for i in range(40)}
        got = lambda: {p[:8] for p in self.fake.payloads}
        try:
            wait_until("every message at the fake", lambda: got() >= want, 30)
        except AssertionError:
            print(f"at the fake: {len(got())} of 40 messages", flush=True)
            raise
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_batch_over_a_proxy_body_limit_is_split(self):
        """The remote behind a proxy that answers 413 to a body over 256 KiB
        (nginx's client_max_body_size, say): 12 messages of 100 KiB make a
        batch of 1.6 MiB; the cursor halves the batch on a 413 until it
        fits, so every message arrives (in order), none stuck."""
        c, s = self.attached_source()
        self.fake.max_body = 256 * 1024
        filler = "y" * (100 * 1024 - 8)
        batch = [{"payload": f"{i:08d}{filler}", "key": "k"} for i in range(12)]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR,
                             timeout=30)
        self.assertEqual(st, 202, body)
        want = [f"{i:08d}" for i in range(12)]
        wait_until("every message at the fake",
                   lambda: {p[:8] for p in self.fake.payloads} >= set(want), 30)
        self.assertEqual([p[:8] for p in self.fake.payloads], want)
        wait_until("ok", lambda: (self.child_state(s) or {}).get("state") == "ok", 30)
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def dead_letters(self, s):
        """(the DLQ topic's name, [(key, payload)] it holds) for the remote
        child of orders on s, read through a channel of the test."""
        ch = self.child_state(s) or {}
        name = ch.get("dead_letter_topic")
        self.assertTrue(name and name.startswith("orders.fanout.") and name.endswith(".DLQ"), ch)
        got = []
        while True:
            st, body = s.request("GET", f"/v1/topics/{name}/consume?channel=check&max=100"
                                 "&wait=500ms", headers=HDR)
            if st == 204:
                return name, got
            self.assertEqual(st, 200, body)
            got += [(m.get("key"), m["payload"]) for m in body["messages"]]

    def poison_ledger(self, s, payloads, bad):
        """Every payload of the list but bad reaches the fake, in order and
        once; bad lands once in the child's dead-letter topic, with its key
        k-<its first 8 characters>; GET children counts it."""
        want = [p[:8] for p in payloads if p[:8] != bad]
        wait_until("every other message at the fake",
                   lambda: {p[:8] for p in self.fake.payloads} >= set(want), 60)
        self.assertEqual([p[:8] for p in self.fake.payloads], want)
        ch = wait_until("the dead letter counted", lambda: (lambda x: x if x and
                                                            x.get("dead_letters") == 1 else None)(
            self.child_state(s)), 30)
        self.assertEqual(ch["state"], "ok", ch)
        name, got = self.dead_letters(s)
        self.assertEqual([(k, p[:8]) for k, p in got], [(f"k-{bad}", bad)], name)
        self.assertIn(f"dead-lettered to {name}", s.log())
        self.assertIn(f"key k-{bad}", s.log())
        self.assertEqual(s.metric("tern_remote_child_dead_letters_total"), 1)

    def test_message_refused_400_goes_to_dead_letters(self):
        """The remote refuses one message of 20 for good (a 400 to any batch
        holding it, as tern's over --max-msg-size): the batch is split until
        that message is alone, which then moves to the parent's dead-letter
        topic orders.fanout.<epoch>.DLQ; the 19 others arrive in order."""
        c, s = self.attached_source()
        self.fake.poison = {"00000007"}
        payloads = [f"{i:08d}-payload" for i in range(20)]
        batch = [{"payload": p, "key": f"k-{p[:8]}", "partition": 0} for p in payloads]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        self.poison_ledger(s, payloads, "00000007")
        self.assertGreater(self.fake.refused[400], 1)  # split: more than one 400
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_lone_message_over_the_body_limit_goes_to_dead_letters(self):
        """A proxy before the remote answers 413 to a body over 64 KiB: a
        message of 100 KiB among small ones cannot go even alone, so it
        moves to the dead-letter topic; the small ones all arrive."""
        c, s = self.attached_source()
        self.fake.max_body = 64 * 1024
        payloads = [f"{i:08d}-small" for i in range(10)]
        payloads.insert(5, "BIGGER00" + "z" * (100 * 1024))
        batch = [{"payload": p, "key": f"k-{p[:8]}", "partition": 0} for p in payloads]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        self.poison_ledger(s, payloads, "BIGGER00")
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_refused_dead_letter_move_counts_once(self):
        """The child's dead-letter topic is owned by another user than its
        parent's owner: the move of the message the remote refuses for good
        is refused (the owner rule), so the message stays on the channel
        and is sent, refused by the remote and refused a move again at each
        try; none of that counts. Once an admin gives the dead-letter topic
        the parent's owner, the move goes and counts once (before: every
        refused try counted in dead_letters and the metric)."""
        c, s = self.attached_source()
        name = wait_until("the child's dead-letter topic",
                          lambda: (self.child_state(s) or {}).get("dead_letter_topic"), 30)
        st, body = s.request("POST", "/v1/users", {"username": "other",
                                                   "password": "Other-pw-1234", "grants": []})
        self.assertEqual(st, 201, body)
        st, body = s.request("POST", "/v1/topics", {"name": name, "partitions": 1,
                                                    "replication_factor": 1})
        self.assertEqual(st, 201, body)
        st, body = s.request("PATCH", f"/v1/topics/{name}", {"owner": "other"})
        self.assertEqual(st, 200, body)
        st, parent = s.request("GET", "/v1/topics/orders")
        self.assertEqual(st, 200, parent)
        self.fake.poison = {"00000001"}
        payloads = [f"{i:08d}-payload" for i in range(3)]
        batch = [{"payload": p, "key": f"k-{p[:8]}", "partition": 0} for p in payloads]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        log = lambda: s.log().count(f"dead letters of orders/")
        # Each refused move sends the message back for 5 s; three of them.
        wait_until("three refused moves",
                   lambda: self.fake.refused[400] >= 3 + 2 and log() >= 1, 40)
        time.sleep(11)
        ch = self.child_state(s) or {}
        print(f"after refused moves: dead_letters {ch.get('dead_letters')}, metric "
              f"{s.metric('tern_remote_child_dead_letters_total')}, remote's 400s "
              f"{self.fake.refused[400]}", flush=True)
        self.assertEqual(ch.get("dead_letters"), 0, ch)
        self.assertEqual(s.metric("tern_remote_child_dead_letters_total"), 0)
        st, body = s.request("PATCH", f"/v1/topics/{name}", {"owner": parent["owner"]})
        self.assertEqual(st, 200, body)
        wait_until("the dead letter counted",
                   lambda: (self.child_state(s) or {}).get("dead_letters") == 1, 30)
        time.sleep(6)  # another try's count would show by now
        self.assertEqual((self.child_state(s) or {}).get("dead_letters"), 1)
        self.assertEqual(s.metric("tern_remote_child_dead_letters_total"), 1)
        _, got = self.dead_letters(s)
        self.assertEqual([(k, p[:8]) for k, p in got], [("k-00000001", "00000001")])
        self.assertEqual(s.log().count(f"dead-lettered to {name}"), 1, s.log())
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_partition_in_backoff_does_not_stop_the_others(self):
        """Partition 0 of a parent of two holds 40 messages of 512 KiB (20
        MiB, over the cursor's 16 MiB) that the remote answers 503 (its
        state: retried, never dead-lettered); partition 1's messages still
        arrive meanwhile, and partition 0's all do once the remote takes
        them."""
        c = self.source(True)
        s = c.nodes[0]
        self.add_remote(s, "fake", "127.0.0.1")
        self.topic_with_child(s, 2, "fake")
        self.fake.stall = {f"S{i:07d}" for i in range(40)}
        filler = "s" * (512 * 1024 - 8)
        for first in range(0, 40, 8):
            batch = [{"payload": f"S{i:07d}{filler}", "partition": 0}
                     for i in range(first, first + 8)]
            st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR,
                                 timeout=30)
            self.assertEqual(st, 202, body)
        wait_until("partition 0 retrying on the 503", lambda: self.fake.refused[503] >= 2, 30)
        time.sleep(2)  # the cursor takes what it may of partition 0
        batch = [{"payload": f"F{i:07d}", "partition": 1} for i in range(50)]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        wait_until("partition 1's messages at the fake while partition 0 is refused",
                   lambda: {p[:8] for p in self.fake.payloads} >= {f"F{i:07d}" for i in range(50)},
                   20)
        self.assertEqual([p[:8] for p in self.fake.payloads], [f"F{i:07d}" for i in range(50)])
        self.fake.stall = set()
        want = [f"S{i:07d}" for i in range(40)]
        wait_until("partition 0's messages once the remote takes them",
                   lambda: {p[:8] for p in self.fake.payloads} >= set(want), 120)
        self.assertEqual([p[:8] for p in self.fake.payloads if p[0] == "S"], want)
        self.assertEqual((self.child_state(s) or {}).get("dead_letters"), 0)
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_names_resolving_to_refused_addresses(self):
        """The source runs in a mount namespace of its own whose /etc/hosts
        (bind-mounted over it there: the machine's is untouched) maps
        names this test chooses; remotes-allow-addresses lets 127.0.0.1
        alone through. A name resolving to an allowed address works (the
        control: that name exists only in this hosts file); names resolving
        to another loopback address, to the cloud metadata addresses or to
        an IPv4-mapped loopback are refused after resolution with the same
        class and words as any refused address: by the check, by the check
        at attach, and at a cursor's dial after the URL changed to one."""
        usable, why = hosts_namespace_available()
        if not usable:
            self.skipTest(why)
        d = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tern-hosts-{os.getpid()}")
        os.makedirs(d, exist_ok=True)
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        hosts = os.path.join(d, "hosts")
        refused = {"loop": "127.0.0.5", "meta": "169.254.169.254", "meta2": "100.100.100.200",
                   "mapped": "::ffff:127.0.0.5"}
        with open(hosts, "w") as f:
            f.write("127.0.0.1 fake\n")  # the control: in the fake's certificate
            for name, addr in refused.items():
                f.write(f"{addr} eu-{name}.test\n")
        prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  'mount --bind "$0" /etc/hosts && exec "$@"', hosts]
        c = self.make(1, prefixes=[prefix],
                      args=[f"--remotes-allowed-ports={self.fake.port}",
                            "--remotes-api-hop-encrypted=true",
                            "--remotes-allow-addresses=127.0.0.1/32"])
        c.start()
        s = c.nodes[0]
        # The control: a name only this hosts file knows, allowed.
        self.add_remote(s, "ok", "fake")
        self.topic_with_child(s, 2, "ok")
        batch = [{"payload": f"m-{i}", "key": f"k{i}"} for i in range(5)]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        wait_until("the control's messages at the fake",
                   lambda: set(self.fake.payloads) >= {f"m-{i}" for i in range(5)}, 60)
        seen = self.fake.requests
        # Each refused name: made fine (a name), refused by the check and
        # by the check at attach, with the guard's one answer.
        details = set()
        for name in refused:
            self.add_remote(s, name, f"eu-{name}.test")
            st, body = s.request("POST", f"/v1/remotes/{name}/check", None, headers=HDR,
                                 timeout=60)
            self.assertEqual(st, 200, body)
            row = body["check"]["members"]["1"]
            self.assertEqual(row["status"], "refused", (name, body))
            self.assertNotIn("http_status", row)
            details.add(row["detail"])
            st, body = s.request("POST", "/v1/topics/orders/children",
                                 {"child": "orders", "remote": name}, headers=HDR, timeout=60)
            self.assertEqual(st, 502, body)
            self.assertIn("node 1: refused", body["error"])
        self.assertEqual(details, {"refused by the remotes address guard"})
        # A cursor's dial after the URL changed to a refused name.
        st, body = s.request("PATCH", "/v1/remotes/ok", {
            "url": f"https://eu-meta.test:{self.fake.port}", "password": PW1}, headers=HDR)
        self.assertEqual(st, 200, body)
        batch = [{"payload": f"m-{i}", "key": f"k{i}"} for i in range(5, 10)]
        st, body = s.request("POST", "/v1/topics/orders/produce/batch", batch, headers=HDR)
        self.assertEqual(st, 202, body)
        ch = wait_until("retrying, refused", lambda: (lambda x: x if x and
                                                      x.get("state") == "retrying" else None)(
            self.child_state(s)), 30)
        self.assertEqual(ch["class"], "refused")
        self.assertEqual(ch["status"], 0)
        self.assertGreater(ch["lag_messages"], 0)
        self.assertEqual(self.fake.requests, seen)  # nothing reached the fake
        self.assertIn("refused by the remotes address guard", s.log())
        for name in refused.values():
            self.assertNotIn(name, s.log())  # the guard says no more than that
        codes = c.stop()
        self.assertEqual(set(codes.values()), {0}, codes)


def hosts_namespace_available():
    """(True, "") when this process may run a command in a mount namespace
    of its own with a file bind-mounted over /etc/hosts (root, unshare),
    else (False, why)."""
    import shutil
    import subprocess
    if shutil.which("unshare") is None:
        return False, "the unshare command is missing (util-linux)"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        "mount --bind /dev/null /etc/hosts"], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        return False, f"cannot bind-mount over /etc/hosts in a mount namespace: {r.stderr.strip()}"
    return True, ""


if __name__ == "__main__":
    harness.main()
