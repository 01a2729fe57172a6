#!/usr/bin/env python3
"""End-to-end tests of the native /v1 API served so far against the real
ternd: authentication before routing (401 for any /v1 path without valid
credentials, the failed-login throttle's 429), the root user, reading
users, listing topics with pagination, a topic's record and partition
stats, and security-off development mode."""
import argparse
import base64
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tempfile
import unittest
import uuid

import daemon as daemon_mod
from daemon import Daemon
from nsqwire import FRAME_ERROR, FRAME_RESPONSE, Conn

PASSWORD = "root-pw-for-tests"


def basic(user, pw):
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


class Base(unittest.TestCase):
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-v1-")
        env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD)
        cls.d = Daemon(os.path.join(cls.dir, "data"), *cls.ARGS, env=env)
        cls.d.wait_for("ready")
        cls.port = cls.d.http_port
        cls.d.wait_for("root user admin created")

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    def request(self, method, path, body=None, auth=(None, None), headers=None, timeout=10):
        h = dict(headers or {})
        if auth[0] is not None:
            h["Authorization"] = basic(*auth)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def raw(self, data):
        """What the server answers to data (bytes) sent as they are, up to
        its closing the connection."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        s.close()
        return out

    def admin(self, method, path, body=None):
        status, _, data = self.request(method, path, body, ("admin", PASSWORD))
        return status, json.loads(data) if data else None

    def publish(self, topic, n):
        c = Conn(self.d.tcp_port)
        c.identify()
        for i in range(n):
            c.pub(topic, b"m%d" % i)
        c.close()


class Secured(Base):
    def test_every_v1_path_needs_credentials_first(self):
        for method, path in (("GET", "/v1/topics"), ("GET", "/v1/no/such/route"),
                             ("DELETE", "/v1/users/admin"), ("GET", "/v1")):
            status, headers, body = self.request(method, path)
            self.assertEqual(status, 401, path)
            self.assertEqual(headers["WWW-Authenticate"], 'Basic realm="tern"')
            self.assertEqual(json.loads(body), {"error": "authentication required"})
        for bad in ("Bearer x", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode()):
            status, _, _ = self.request("GET", "/v1/topics", headers={"Authorization": bad})
            self.assertEqual(status, 401)
        # An unknown user and a wrong password look the same.
        self.assertEqual(self.request("GET", "/v1/topics", auth=("nobody", "x"))[0], 401)
        self.assertEqual(self.request("GET", "/v1/topics", auth=("admin", "nope"))[0], 401)
        # Authenticated: unknown paths are 404, other methods 405.
        self.assertEqual(self.admin("GET", "/v1/no/such/route"), (404, {"error": "not found"}))
        self.assertEqual(self.admin("PUT", "/v1/topics")[0], 405)
        # Non-/v1 doors are not affected.
        self.assertEqual(self.request("GET", "/ping")[0], 200)

    def test_credentials_given_twice_are_refused(self):
        # Two Authorization headers: tern would read one and a proxy in
        # front of it may have judged the other, so neither counts.
        admin, nobody = basic("admin", PASSWORD), basic("nobody", "x")
        for first, second in ((nobody, admin), (admin, nobody), (admin, admin)):
            out = self.raw(f"GET /v1/users/admin HTTP/1.1\r\nHost: t\r\nAuthorization: {first}"
                           f"\r\nAuthorization: {second}\r\nConnection: close\r\n\r\n".encode())
            self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out)
            self.assertNotIn(b'"username"', out)

    def test_refused_before_reading_a_body(self):
        data = self.raw(b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        self.assertTrue(data.startswith(b"HTTP/1.1 401 "), data[:100])

    def test_topics_list_get_and_stats(self):
        t1, t2, t3 = (f"v1{uuid.uuid4().hex[:8]}{k}" for k in "abc")
        self.publish(t1, 3)
        self.publish(t2, 1)
        self.publish(t3, 2)
        import time
        deadline = time.monotonic() + 10
        while True:
            status, body = self.admin("GET", "/v1/topics?limit=1000")
            names = [t["name"] for t in body["topics"]]
            if all(t in names for t in (t1, t2, t3)) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200)
        self.assertEqual(names, sorted(names))
        self.assertEqual(body["next_page_token"], "")
        # Pages of one, in name order, following next_page_token.
        seen, token = [], ""
        while True:
            status, page = self.admin("GET", f"/v1/topics?limit=1&page_token={token}")
            self.assertEqual(status, 200)
            seen += [t["name"] for t in page["topics"]]
            token = page["next_page_token"]
            if not token:
                break
        self.assertEqual(seen, names)
        for bad in ("limit=0", "limit=-1", "limit=abc", "limit="):
            status, body = self.admin("GET", f"/v1/topics?{bad}")
            self.assertEqual(status, 400, bad)
            self.assertEqual(body["error"], "limit must be a positive integer")
        status, t = self.admin("GET", f"/v1/topics/{t1}")
        self.assertEqual(status, 200)
        self.assertEqual((t["name"], t["partitions"], t["delivery_mode"]), (t1, 1, "reliable"))
        self.assertEqual(t["max_in_flight_per_partition"], 1024)
        [p] = t["partition_stats"]
        self.assertEqual((p["index"], p["oldest_offset"], p["next_offset"]), (0, 0, 3))
        self.assertEqual(p["high_watermark"], 3)
        self.assertEqual(self.admin("GET", f"/v1/topics/{t1}?partition=0")[0], 200)
        self.assertEqual(self.admin("GET", f"/v1/topics/{t1}?partition=1")[1]["error"],
                         "invalid partition")
        self.assertEqual(self.admin("GET", "/v1/topics/nosuchtopic")[1]["error"],
                         "topic not found")

    def create(self, body, headers=None, auth=("admin", PASSWORD)):
        h = {"Content-Type": "application/json"} if headers is None else headers
        status, _, data = self.request("POST", "/v1/topics", json.dumps(body).encode()
                                       if not isinstance(body, (bytes, str)) else body,
                                       auth, h)
        return status, json.loads(data) if data else None

    def test_create_with_defaults_then_use_and_delete(self):
        name = f"c{uuid.uuid4().hex[:10]}"
        status, t = self.create({"name": name, "owner": "someone-else"})
        self.assertEqual(status, 201, t)
        self.assertEqual(t["name"], name)
        self.assertEqual(t["partitions"], 3)
        self.assertEqual(t["retention_ms"], 7 * 24 * 3600 * 1000)
        self.assertEqual(t["visibility_timeout_ms"], 30000)
        self.assertEqual(t["max_in_flight_per_partition"], 1024)
        self.assertEqual(t["max_acked_ahead_per_partition"], 1024)
        self.assertEqual((t["delivery_mode"], t["durability"]), ("reliable", "durable"))
        self.assertEqual(t["owner"], "admin")  # the caller, whatever the body says
        self.assertEqual(t["channels"], ["default"])
        self.assertEqual(self.create({"name": name})[0], 409)
        # The NSQ doors see it, but it has an owner: an anonymous PUB is
        # refused, one with the owner's credentials over nsqd's /pub lands
        # in one of its 3 partitions.
        c = Conn(self.d.tcp_port)
        c.identify()
        kind, data = c.pub(name, b"m")
        self.assertTrue(data.startswith(b"E_UNAUTHORIZED"), data)
        c.close()
        for i in range(4):
            self.assertEqual(self.request("POST", f"/pub?topic={name}", b"m%d" % i,
                                          ("admin", PASSWORD))[0], 200)
        status, got = self.admin("GET", f"/v1/topics/{name}")
        self.assertEqual(len(got["partition_stats"]), 3)
        self.assertEqual(sum(p["next_offset"] for p in got["partition_stats"]), 4)
        # The metastore placed every partition on the only member.
        self.assertEqual([p["owner_node"] for p in got["partition_stats"]], ["1", "1", "1"])
        status, _, _ = self.request("DELETE", f"/v1/topics/{name}", auth=("admin", PASSWORD))
        self.assertEqual(status, 204)
        self.assertEqual(self.admin("GET", f"/v1/topics/{name}")[0], 404)
        self.assertEqual(self.request("DELETE", f"/v1/topics/{name}",
                                      auth=("admin", PASSWORD))[0], 404)

    def test_create_expiring_topic(self):
        name = f"e{uuid.uuid4().hex[:10]}"
        status, t = self.create({"name": name, "partitions": 1, "delivery_mode": "ttl_discard",
                                 "ttl_ms": 60000, "durability": "write_ack", "max_attempts": 5,
                                 "retention_ms": 0, "visibility_timeout_ms": 0})
        self.assertEqual(status, 201, t)
        self.assertEqual((t["delivery_mode"], t["ttl_ms"]), ("ttl_discard", 60000))
        self.assertEqual((t["durability"], t["max_attempts"]), ("write_ack", 5))
        self.assertEqual((t["retention_ms"], t["visibility_timeout_ms"]), (0, 30000))

    def test_the_longest_timeouts_hold(self):
        # Narad sets no upper bound on visibility_timeout_ms, nor tern on
        # ttl_ms: the longest int64 is a lease, or a message's life, that
        # never ends while the node runs, never one that ended already.
        big = 2**63 - 1
        lease = f"v{uuid.uuid4().hex[:10]}"
        self.assertEqual(self.create({"name": lease, "partitions": 1,
                                      "visibility_timeout_ms": big})[0], 201)
        ttl = f"e{uuid.uuid4().hex[:10]}"
        self.assertEqual(self.create({"name": ttl, "partitions": 1,
                                      "delivery_mode": "ttl_discard", "ttl_ms": big})[0], 201)
        api = {"Content-Type": "application/octet-stream"}
        for t in (lease, ttl):
            status, _, body = self.request("POST", f"/v1/topics/{t}/produce", b"m",
                                           ("admin", PASSWORD), api)
            self.assertEqual(status, 202, body)
        # The published message is there to take (not discarded at once).
        status, m = self.admin("GET", f"/v1/topics/{ttl}/consume?wait=5s")
        self.assertEqual((status, m and m["payload"]), (200, "m"))
        # Leased, it stays leased: no second delivery, before or after an
        # extend by the same timeout.
        status, m = self.admin("GET", f"/v1/topics/{lease}/consume?wait=5s")
        self.assertEqual((status, m and m["attempts"]), (200, 1))
        self.assertEqual(self.admin("GET", f"/v1/topics/{lease}/consume?wait=1500ms"), (204, None))
        status, _, body = self.request(
            "POST", f"/v1/topics/{lease}/ack?extend=true&receipt_handle={m['receipt_handle']}",
            None, ("admin", PASSWORD), {"X-Tern-Client": "t"})
        self.assertEqual(status, 204, body)
        self.assertEqual(self.admin("GET", f"/v1/topics/{lease}/consume?wait=1500ms"), (204, None))
        status, _, body = self.request(
            "POST", f"/v1/topics/{lease}/ack?receipt_handle={m['receipt_handle']}",
            None, ("admin", PASSWORD), {"X-Tern-Client": "t"})
        self.assertEqual(status, 204, body)

    def test_an_escaped_nul_is_refused_not_cut_off(self):
        # A query value carrying %00 is no name, key or handle: 400, never
        # the part before the NUL.
        t = f"n{uuid.uuid4().hex[:10]}"
        self.assertEqual(self.create({"name": t, "partitions": 1})[0], 201)
        auth, api = ("admin", PASSWORD), {"X-Tern-Client": "t"}
        for method, path, why in (
                ("POST", f"/v1/topics/{t}/produce?key=k%00x", "invalid argument: key is "
                 "malformed or longer than 1024 bytes"),
                ("GET", f"/v1/topics/{t}/consume?channel=default%00x", "invalid argument: "
                 "channel must match [A-Za-z0-9._-]{1,255}"),
                ("GET", f"/v1/topics/{t}/consume?wait=1s%00", "invalid argument: wait must be "
                 "a duration such as 500ms or 5s"),
                ("POST", f"/v1/topics/{t}/ack?receipt_handle=0:0:1%00", "receipt handle is "
                 "malformed"),
                ("GET", f"/v1/topics?page_token=a%00", "invalid page_token")):
            status, _, body = self.request(method, path, b"m" if "produce" in path else None,
                                           auth, api)
            self.assertEqual((status, json.loads(body)), (400, {"error": why}), path)
        status, rec = self.admin("GET", f"/v1/topics/{t}")
        self.assertEqual((rec["channels"], rec["partition_stats"][0]["next_offset"]),
                         (["default"], 0))

    def test_a_body_too_large_is_a_v1_error(self):
        # /v1 errors are {"error": ...}, the 413 of a body over its route's
        # limit (or of a body where the route takes none) too.
        t = f"b{uuid.uuid4().hex[:10]}"
        self.assertEqual(self.create({"name": t, "partitions": 1})[0], 201)
        auth = ("admin", PASSWORD)
        octet = {"Content-Type": "application/octet-stream"}
        for method, path, body, headers, why in (
                ("POST", f"/v1/topics/{t}/produce", b"m" * (1024 * 1024 + 1), octet,
                 "request body too large"),
                ("POST", "/v1/topics", b" " * (1024 * 1024 + 1), {"Content-Type":
                 "application/json"}, "request body too large"),
                ("POST", f"/v1/topics/{t}/ack?receipt_handle=0:0:1", b"x",
                 {"X-Tern-Client": "t"}, "this request takes no body"),
                ("GET", f"/v1/topics/{t}/consume", b"x", {}, "this request takes no body"),
                ("DELETE", f"/v1/topics/{t}", b"x", {}, "this request takes no body")):
            status, _, out = self.request(method, path, body, auth, headers)
            self.assertEqual((status, json.loads(out)), (413, {"error": why}), path)
        self.assertEqual(self.admin("GET", f"/v1/topics/{t}")[0], 200)  # not deleted

    def test_create_refusals(self):
        cases = [
            ({"nme": "x"}, 'unknown field "nme"'),
            ({"name": "a b"}, "name must match"),
            ({}, "name must match"),
            ({"name": "x", "partitions": 0}, "partitions must be 1..108"),
            ({"name": "x", "partitions": 109}, "partitions must be 1..108"),
            ({"name": "x", "partitions": "3"}, 'field "partitions" must be an integer'),
            # JSON sets no limit on numbers: one past int64 is out of range,
            # not a body that is not well-formed.
            ({"name": "x", "partitions": 10**30},
             'invalid json: field "partitions" is out of range (a 64-bit integer)'),
            ({"name": "x", "retention_ms": -10**19},
             'invalid json: field "retention_ms" is out of range (a 64-bit integer)'),
            ({"name": 10**30}, 'invalid json: field "name" must be a string'),
            ({"name": "x", "delivery_mode": "fast"}, "delivery_mode must be"),
            ({"name": "x", "delivery_mode": "ttl_discard"}, "needs ttl_ms > 0"),
            ({"name": "x", "ttl_ms": 5}, "needs delivery_mode ttl_discard"),
            ({"name": "x", "durability": "maybe"}, "durability must be"),
            ({"name": "x", "retention_ms": -1}, "must be >= 0"),
            ({"name": "x", "retention_ms": 1000}, "or at least 3600000 (1 hour); got 1000"),
            ({"name": "x", "fanout_delay_ms": 5}, "fanout_delay_ms requires parent"),
            ('{"name":"x"', "invalid json"),
            ('[1]', "invalid json"),
        ]
        for body, msg in cases:
            status, err = self.create(body)
            self.assertEqual(status, 400, body)
            self.assertIn(msg, err["error"], body)

    def test_cross_site_guard_after_auth(self):
        body = json.dumps({"name": "guarded"}).encode()
        status, err = self.create(body, headers={"Content-Type": "text/plain"})
        self.assertEqual(status, 415)
        self.assertIn("X-Tern-Client", err["error"])
        self.assertEqual(self.create(body, headers={})[0], 415)
        # Anonymous: 401 comes first.
        self.assertEqual(self.create(body, headers={}, auth=(None, None))[0], 401)
        # The client header or an API content type passes.
        name = f"g{uuid.uuid4().hex[:8]}"
        body = json.dumps({"name": name}).encode()
        self.assertEqual(self.create(body, headers={"X-Narad-Client": "t"})[0], 201)
        name = f"g{uuid.uuid4().hex[:8]}"
        body = json.dumps({"name": name}).encode()
        self.assertEqual(self.create(body, headers={
            "Content-Type": "application/json; charset=utf-8"})[0], 201)

    def produce(self, topic, body, query="", ctype="application/octet-stream"):
        h = {"Content-Type": ctype} if ctype else {}
        return self.request("POST", f"/v1/topics/{topic}/produce{query}", body,
                            ("admin", PASSWORD), h)

    def test_produce(self):
        name = f"p{uuid.uuid4().hex[:10]}"
        self.assertEqual(self.create({"name": name})[0], 201)
        status, headers, body = self.produce(name, b"hello")
        self.assertEqual((status, body), (202, b""))
        # The default channel is an NSQ channel too, but an open NSQ door
        # cannot authenticate anyone, so it is closed to anonymous SUBs
        # (NsqAuthByUsers shares it); /v1 consumes it.
        c = Conn(self.d.tcp_port)
        c.identify()
        kind, data = c.sub(name, "default")
        self.assertTrue(data.startswith(b"E_UNAUTHORIZED"), data)
        c.close()
        status, _, body = self.request("GET", f"/v1/topics/{name}/consume?wait=5s",
                                       auth=("admin", PASSWORD))
        self.assertEqual(status, 200, body)
        got = json.loads(body)
        self.assertEqual(got["payload"], "hello")
        self.assertEqual(self.request("POST", f"/v1/topics/{name}/ack?receipt_handle="
                                      f"{got['receipt_handle']}", b"", ("admin", PASSWORD),
                                      {"X-Tern-Client": "t"})[0], 204)
        # A key always lands in the same partition; a partition pins it.
        for i in range(5):
            self.assertEqual(self.produce(name, b"k%d" % i, "?key=customer-42")[0], 202)
        self.assertEqual(self.produce(name, b"pinned", "?partition=2")[0], 202)
        _, t = self.admin("GET", f"/v1/topics/{name}")
        offsets = [p["next_offset"] for p in t["partition_stats"]]
        self.assertEqual(sum(offsets), 7)
        self.assertTrue(any(n >= 5 for n in offsets), offsets)
        self.assertGreaterEqual(offsets[2], 1)
        # Refusals.
        self.assertEqual(self.produce(name, b"x", "?partition=3")[0], 400)
        self.assertEqual(self.produce(name, b"x", "?partition=two")[0], 400)
        status, _, body = self.produce(name, b"")
        self.assertEqual((status, json.loads(body)["error"]), (400, "message required"))
        self.assertEqual(self.produce(name, b"x", ctype=None)[0], 415)
        self.assertEqual(self.produce(name, b"x", ctype="text/plain")[0], 415)
        self.assertEqual(self.produce("nosuch" + name, b"x")[0], 404)
        # The size limit (1 MiB) is inclusive.
        self.assertEqual(self.produce(name, b"m" * (1024 * 1024))[0], 202)
        status, _, body = self.produce(name, b"m" * (1024 * 1024 + 1))
        self.assertEqual(status, 413)

    def patch(self, topic, body, auth=("admin", PASSWORD)):
        status, _, data = self.request("PATCH", f"/v1/topics/{topic}", json.dumps(body).encode(),
                                       auth, {"Content-Type": "application/json"})
        return status, json.loads(data) if data else None

    def test_patch_topic(self):
        name = f"pt{uuid.uuid4().hex[:8]}"
        self.assertEqual(self.create({"name": name, "partitions": 2,
                                      "visibility_timeout_ms": 5000})[0], 201)
        status, t = self.patch(name, {"retention_ms": 3600000, "visibility_timeout_ms": 0,
                                      "max_in_flight_per_partition": 7})
        self.assertEqual(status, 200, t)
        self.assertEqual((t["retention_ms"], t["visibility_timeout_ms"],
                          t["max_in_flight_per_partition"], t["max_acked_ahead_per_partition"],
                          t["partitions"]), (3600000, 30000, 7, 1024, 2))
        self.assertEqual(self.admin("GET", f"/v1/topics/{name}")[1]["retention_ms"], 3600000)
        # Growing: 2 -> 4 partitions; the default channel gets the new ones.
        status, t = self.patch(name, {"partitions": 4})
        self.assertEqual((status, t["partitions"]), (200, 4))
        self.assertEqual(len(self.admin("GET", f"/v1/topics/{name}")[1]["partition_stats"]), 4)
        self.assertEqual(self.produce(name, b"in-p3", "?partition=3")[0], 202)
        status, _, data = self.request("GET", f"/v1/topics/{name}/consume?wait=3s", None,
                                       ("admin", PASSWORD))
        m = json.loads(data)
        self.assertEqual((status, m["partition"], m["payload"]), (200, 3, "in-p3"))
        for body, why in (({}, "at least one"), ({"partitions": 1}, "can only grow"),
                          ({"partitions": 4}, "can only grow: the topic has 4"),
                          ({"retention_ms": 59000}, "at least 3600000 (1 hour)"),
                          ({"partitions": 109}, "max-partitions"), ({"retention_ms": -1}, ">= 0"),
                          ({"ttl_ms": 5}, "unknown field"), ({"name": "x"}, "unknown field")):
            status, answer = self.patch(name, body)
            self.assertEqual(status, 400, body)
            self.assertIn(why, answer["error"])
        self.assertEqual(self.patch("nosuch" + name, {"retention_ms": 1})[0], 404)
        status, _, _ = self.request("PATCH", f"/v1/topics/{name}", b'{"retention_ms":1}',
                                    ("admin", PASSWORD))
        self.assertEqual(status, 415)

    def test_own_max_attempts_dead_letters(self):
        name = f"dl{uuid.uuid4().hex[:8]}"
        self.assertEqual(self.create({"name": name, "partitions": 1, "max_attempts": 2})[0], 201)
        self.assertEqual(self.produce(name, b"poison")[0], 202)
        api = {"X-Tern-Client": "t"}
        for attempt in (1, 2):
            status, _, data = self.request("GET", f"/v1/topics/{name}/consume?wait=3s", None,
                                           ("admin", PASSWORD))
            m = json.loads(data)
            self.assertEqual((status, m["attempts"]), (200, attempt))
            self.assertEqual(self.request(
                "POST", f"/v1/topics/{name}/ack?extend=0&receipt_handle={m['receipt_handle']}",
                None, ("admin", PASSWORD), api)[0], 204)
        # The third delivery would pass max_attempts: it moved to the DLQ.
        self.assertEqual(self.request("GET", f"/v1/topics/{name}/consume?wait=1s", None,
                                      ("admin", PASSWORD))[0], 204)
        dlq = f"{name}.default.DLQ"
        import time
        deadline = time.monotonic() + 10
        while self.admin("GET", f"/v1/topics/{dlq}")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, _, data = self.request("GET", f"/v1/topics/{dlq}/consume?wait=3s", None,
                                       ("admin", PASSWORD))
        self.assertEqual((status, json.loads(data)["payload"]), (200, "poison"))

    def test_cluster_of_one(self):
        import time
        deadline = time.monotonic() + 10
        while True:
            status, body = self.admin("GET", "/v1/cluster/members")
            if body["members"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200)
        [m] = body["members"]
        self.assertEqual((m["id"], m["addr"], m["raft_addr"], m["status"], m["draining"],
                          m["outbound_moves"]),
                         ("1", "127.0.0.1:0", "127.0.0.1:0", "alive", False, 0))
        self.assertIsInstance(m["api_addr"], str)
        # Registered by this node's own wall clock, at most a few seconds ago.
        self.assertLess(abs(m["last_heartbeat_ms"] - time.time() * 1000), 60000)
        # It owns every partition of every topic (the only member).
        _, topics = self.admin("GET", "/v1/topics?limit=1000")
        self.assertEqual(m["owned_partitions"], sum(t["partitions"] for t in topics["topics"]))
        self.assertEqual(self.admin("GET", "/v1/cluster/moves"), (200, {"moves": []}))
        api = {"X-Tern-Client": "t"}
        path = "/v1/cluster/members/1/decommission"
        self.assertEqual(self.request("POST", path, None, ("admin", PASSWORD), api)[0], 204)
        self.assertTrue(self.admin("GET", "/v1/cluster/members")[1]["members"][0]["draining"])
        self.assertEqual(self.request("DELETE", path, None, ("admin", PASSWORD))[0], 204)
        self.assertFalse(self.admin("GET", "/v1/cluster/members")[1]["members"][0]["draining"])
        self.assertEqual(self.request("POST", "/v1/cluster/members/7/decommission", None,
                                      ("admin", PASSWORD), api)[0], 404)
        self.assertEqual(self.request("POST", "/v1/cluster/members/x/decommission", None,
                                      ("admin", PASSWORD), api)[0], 404)
        self.assertEqual(self.request("POST", path, None, ("admin", PASSWORD))[0], 415)
        self.assertEqual(self.request("GET", "/v1/cluster/members")[0], 401)

    def test_users(self):
        status, users = self.admin("GET", "/v1/users")
        self.assertEqual(status, 200)
        [root] = [u for u in users if u["username"] == "admin"]
        self.assertTrue(root["root"])
        self.assertEqual(root["grants"], [{"action": "admin", "patterns": []}])
        self.assertNotIn("hash", json.dumps(users))
        self.assertNotIn("$2b$", json.dumps(users))
        status, u = self.admin("GET", "/v1/users/admin")
        self.assertEqual((status, u["username"]), (200, "admin"))
        self.assertEqual(self.admin("GET", "/v1/users/ghost")[0], 404)


    def test_concurrent_patches_all_land(self):
        """Changes of different fields sent together are all kept: each is
        made from the record it read, and one that loses the race is made
        again on top of the winner instead of overwriting it."""
        import threading
        name = f"cc{uuid.uuid4().hex[:8]}"
        self.assertEqual(self.create({"name": name})[0], 201)
        fields = ("retention_ms", "visibility_timeout_ms", "max_in_flight_per_partition",
                  "max_acked_ahead_per_partition")
        for rnd in range(1, 6):
            # (retention_ms: above its one-hour floor)
            want = {f: 3600000 * (f == "retention_ms") + 1000 * rnd + i + 1
                    for i, f in enumerate(fields)}
            answers = []

            def one(field):
                answers.append(self.patch(name, {field: want[field]})[0])

            threads = [threading.Thread(target=one, args=(f,)) for f in fields]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(answers, [200] * 4)
            rec = self.admin("GET", f"/v1/topics/{name}")[1]
            self.assertEqual({f: rec[f] for f in fields}, want, f"round {rnd}")

class V1Bench(Base):
    """tern-v1-bench (beside ternd in the build) against a real daemon."""

    def bench(self, *args):
        exe = os.path.join(os.path.dirname(daemon_mod.TERND), "tern-v1-bench")
        r = subprocess.run([exe, "--addr", f"127.0.0.1:{self.port}", *args],
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def test_produce_consume_and_batches(self):
        for extra in ((), ("--batch", "10")):
            topic = f"vb{uuid.uuid4().hex[:8]}"
            rc, out, err = self.bench("--user", "admin", "--password", PASSWORD,
                                      "--topic", topic, "--partitions", "2", "--producers", "2",
                                      "--consumers", "2", "--duration", "1s", *extra)
            self.assertEqual(rc, 0, out + err)
            m = re.search(r"produce: (\d+) requests \((\d+) msgs\)", out)
            self.assertIsNotNone(m, out)
            reqs, msgs = int(m.group(1)), int(m.group(2))
            self.assertGreater(reqs, 0)
            self.assertEqual(msgs, reqs * (10 if extra else 1))
            m = re.search(r"consume\+ack: (\d+) round trips", out)
            self.assertGreater(int(m.group(1)), 0, out)
            self.assertIn("produce-to-consume latency (ms): p50", out)
            self.assertIn("errors: 0", out)
            # The topic it made is there, with its partitions.
            self.assertEqual(self.admin("GET", f"/v1/topics/{topic}")[1]["partitions"], 2)

    def test_wrong_credentials_are_reported(self):
        rc, out, err = self.bench("--user", "admin", "--password", "wrong", "--duration", "1s")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("HTTP 401", err)


class Users(Base):
    API = {"X-Tern-Client": "tests"}

    def as_user(self, who, method, path, body=None):
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) \
            else body
        status, _, out = self.request(method, path, data, who, self.API)
        return status, json.loads(out) if out else None

    def root(self, method, path, body=None):
        return self.as_user(("admin", PASSWORD), method, path, body)

    def test_user_lifecycle_grants_and_rights(self):
        bob = f"bob{uuid.uuid4().hex[:6]}"
        grants = [{"action": "produce", "patterns": ["orders-*"]},
                  {"action": "consume", "patterns": ["orders-*", "audit"]}]
        status, u = self.root("POST", "/v1/users",
                              {"username": bob, "password": "pw-1", "grants": grants})
        self.assertEqual(status, 201, u)
        self.assertEqual((u["username"], u["grants"]), (bob, grants))
        self.assertNotIn("root", u)
        self.assertNotIn("hash", u)
        self.assertEqual(self.root("POST", "/v1/users",
                                   {"username": bob, "password": "x"})[0], 409)
        for body, why in (({"username": "bad name", "password": "x"}, "username"),
                          ({"username": "ok"}, "required"),
                          ({"username": "ok", "password": ""}, "password"),
                          ({"username": "ok", "password": "x", "grants": [{"action": "admin",
                            "patterns": ["a"]}]}, "admin grant takes no patterns"),
                          ({"username": "ok", "password": "x", "grants": [{"action": "produce"}]},
                           "needs a pattern"),
                          ({"username": "ok", "password": "x", "grants": [{"action": "steal",
                            "patterns": ["a"]}]}, "action"),
                          ({"username": "ok", "password": "x", "grants": [{"action": "produce",
                            "patterns": ["a*b"]}]}, "pattern"),
                          ({"username": "ok", "password": "x", "root": True}, "unknown field")):
            status, body = self.root("POST", "/v1/users", body)
            self.assertEqual(status, 400, body)
            self.assertIn(why, body["error"])
        me = (bob, "pw-1")
        # What bob may and may not do.
        self.assertEqual(self.as_user(me, "GET", "/v1/users")[0], 403)
        self.assertEqual(self.as_user(me, "GET", "/v1/cluster/members")[0], 403)
        self.assertEqual(self.as_user(me, "POST", "/v1/users",
                                      {"username": "x1", "password": "x"})[0], 403)
        self.assertEqual(self.as_user(me, "POST", "/v1/topics", {"name": "orders-9"})[0], 403)
        topic = f"orders-{uuid.uuid4().hex[:6]}"
        self.assertEqual(self.root("POST", "/v1/topics", {"name": topic, "partitions": 1})[0], 201)
        other = f"other-{uuid.uuid4().hex[:6]}"
        self.assertEqual(self.root("POST", "/v1/topics", {"name": other, "partitions": 1})[0], 201)
        self.assertEqual(self.as_user(me, "POST", f"/v1/topics/{topic}/produce", b"hi")[0], 202)
        self.assertEqual(self.as_user(me, "POST", f"/v1/topics/{other}/produce", b"hi")[0], 403)
        status, m = self.as_user(me, "GET", f"/v1/topics/{topic}/consume?wait=2s")
        self.assertEqual((status, m["payload"]), (200, "hi"))
        self.assertEqual(self.as_user(me, "GET", f"/v1/topics/{other}/consume")[0], 403)
        status, listing = self.as_user(me, "GET", "/v1/topics?limit=1000")
        names = [t["name"] for t in listing["topics"]]
        self.assertIn(topic, names)
        self.assertNotIn(other, names)
        self.assertEqual(self.as_user(me, "GET", f"/v1/topics/{other}")[0], 403)
        # Grants change on the next request, no new login.
        status, u = self.root("PUT", f"/v1/users/{bob}/grants",
                              {"grants": grants + [{"action": "create", "patterns": [bob + "-*"]}]})
        self.assertEqual((status, len(u["grants"])), (200, 3))
        status, t = self.as_user(me, "POST", "/v1/topics", {"name": bob + "-t"})
        self.assertEqual((status, t["owner"]), (201, bob))
        self.assertEqual(self.as_user(me, "DELETE", f"/v1/topics/{bob}-t")[0], 204)
        self.assertEqual(self.as_user(me, "PUT", f"/v1/users/{bob}/grants", {"grants": []})[0],
                         403)
        # Self-service password change needs the current password.
        status, body = self.as_user(me, "PUT", f"/v1/users/{bob}/password", {"new_password": "n"})
        self.assertEqual((status, body["error"]),
                         (400, "invalid argument: current_password required"))
        status, body = self.as_user(me, "PUT", f"/v1/users/{bob}/password",
                                    {"current_password": "nope", "new_password": "pw-2"})
        self.assertEqual((status, body["error"]), (403, "current password is wrong"))
        self.assertEqual(self.as_user(me, "PUT", f"/v1/users/{bob}/password",
                                      {"current_password": "pw-1", "new_password": "pw-2"})[0], 204)
        self.assertEqual(self.as_user(me, "GET", "/v1/topics")[0], 401)
        me = (bob, "pw-2")
        self.assertEqual(self.as_user(me, "GET", "/v1/topics")[0], 200)
        # Another user's password is for admins.
        self.assertEqual(self.as_user(me, "PUT", "/v1/users/admin/password",
                                      {"current_password": PASSWORD, "new_password": "x"})[0], 403)
        self.assertEqual(self.root("PUT", f"/v1/users/{bob}/password",
                                   {"new_password": "pw-3"})[0], 204)
        self.assertEqual(self.as_user((bob, "pw-3"), "GET", "/v1/topics")[0], 200)
        # Deleted: its credentials stop working.
        self.assertEqual(self.root("DELETE", f"/v1/users/{bob}")[0], 204)
        self.assertEqual(self.root("DELETE", f"/v1/users/{bob}")[0], 404)
        self.assertEqual(self.as_user((bob, "pw-3"), "GET", "/v1/topics")[0], 401)
        self.d.wait_for(f"audit: admin deleted user {bob}", timeout=10)
        self.assertIn(f"audit: admin created user {bob}", self.d.log())
        self.assertIn(f"audit: admin deleted user {bob}", self.d.log())

    def test_a_password_is_at_most_what_bcrypt_reads(self):
        # bcrypt reads 72 bytes of a password: a longer one would let any
        # password with the same first 72 bytes in, so none is taken.
        cat = f"cat{uuid.uuid4().hex[:6]}"
        long_pw = "p" * 72
        status, body = self.root("POST", "/v1/users", {"username": cat, "password": long_pw + "X"})
        self.assertEqual((status, body), (400, {"error": "invalid argument: password must be "
                                                "1..72 bytes without NUL (bcrypt reads no more)"}))
        self.assertEqual(self.root("POST", "/v1/users", {"username": cat, "password": long_pw})[0],
                         201)
        self.assertEqual(self.as_user((cat, long_pw), "GET", f"/v1/users/{cat}")[0], 200)
        for wrong in (long_pw + "X", long_pw + "anything else"):
            self.assertEqual(self.as_user((cat, wrong), "GET", f"/v1/users/{cat}")[0], 401, wrong)
        for who, body in ((("admin", PASSWORD), {"new_password": long_pw + "Y"}),
                          ((cat, long_pw), {"current_password": long_pw,
                                            "new_password": long_pw + "Y"})):
            status, out = self.as_user(who, "PUT", f"/v1/users/{cat}/password", body)
            self.assertEqual((status, out), (400, {"error": "invalid argument: new_password must "
                                                   "be 1..72 bytes (bcrypt reads no more)"}))
        self.assertEqual(self.root("DELETE", f"/v1/users/{cat}")[0], 204)

    def test_concurrent_password_and_grants_changes_both_land(self):
        import threading
        eve = f"eve{uuid.uuid4().hex[:6]}"
        self.assertEqual(self.root("POST", "/v1/users", {"username": eve, "password": "p0"})[0],
                         201)
        for rnd in range(1, 4):
            grants = [{"action": "consume", "patterns": [f"round-{rnd}"]}]
            answers = {}

            def pw():
                answers["pw"] = self.root("PUT", f"/v1/users/{eve}/password",
                                          {"new_password": f"p{rnd}"})[0]

            def gr():
                answers["gr"] = self.root("PUT", f"/v1/users/{eve}/grants", {"grants": grants})[0]

            threads = [threading.Thread(target=pw), threading.Thread(target=gr)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(answers, {"pw": 204, "gr": 200})
            self.assertEqual(self.root("GET", f"/v1/users/{eve}")[1]["grants"], grants)
            self.assertEqual(self.as_user((eve, f"p{rnd}"), "GET", "/v1/topics")[0], 200)

    def test_self_service_change_racing_an_admin_reset(self):
        """An admin's reset always stands: a self-service change racing it
        lands first (and is then reset), finds its checked password
        replaced (409), or arrives after the reset with the old password
        (401 or 403)."""
        import threading
        fay = f"fay{uuid.uuid4().hex[:6]}"
        self.assertEqual(self.root("POST", "/v1/users", {"username": fay, "password": "f0"})[0],
                         201)
        current = "f0"
        for rnd in range(1, 4):
            answers = {}

            def mine():
                answers["self"] = self.as_user((fay, current), "PUT",
                                               f"/v1/users/{fay}/password",
                                               {"current_password": current,
                                                "new_password": f"mine{rnd}"})

            def reset():
                answers["admin"] = self.root("PUT", f"/v1/users/{fay}/password",
                                             {"new_password": f"reset{rnd}"})[0]

            threads = [threading.Thread(target=mine), threading.Thread(target=reset)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(answers["admin"], 204)
            status, body = answers["self"]
            self.assertIn(status, (204, 401, 403, 409), body)
            if status == 409:
                self.assertEqual(body["error"], "the password changed while this change was "
                                                "applied; send it again")
            current = f"reset{rnd}"
            self.assertEqual(self.as_user((fay, current), "GET", "/v1/topics")[0], 200)
            self.assertEqual(self.as_user((fay, f"mine{rnd}"), "GET", "/v1/topics")[0], 401)

    def test_delegation_and_self_protection(self):
        carol = f"carol{uuid.uuid4().hex[:6]}"
        admin_grant = [{"action": "admin", "patterns": []}]
        self.assertEqual(self.root("POST", "/v1/users", {"username": carol, "password": "c",
                                                         "grants": admin_grant})[0], 201)
        me = (carol, "c")
        dave = f"dave{uuid.uuid4().hex[:6]}"
        status, body = self.as_user(me, "POST", "/v1/users", {"username": dave, "password": "d",
                                                              "grants": admin_grant})
        self.assertEqual((status, body["error"]), (403, "only the root user may grant admin"))
        scoped = [{"action": "consume", "patterns": ["*"]}]
        self.assertEqual(self.as_user(me, "POST", "/v1/users", {"username": dave, "password": "d",
                                                                "grants": scoped})[0], 201)
        self.assertEqual(self.as_user(me, "PUT", f"/v1/users/{dave}/grants",
                                      {"grants": admin_grant})[0], 403)
        for method, path, body, why in (
                ("PUT", "/v1/users/admin/grants", {"grants": []}, "root user's grants"),
                ("DELETE", "/v1/users/admin", None, "root user cannot be deleted"),
                ("DELETE", f"/v1/users/{carol}", None, "cannot delete yourself"),
                ("PUT", f"/v1/users/{carol}/grants", {"grants": []}, "your own grants"),
                ("PUT", "/v1/users/admin/password", {"new_password": "x"}, "only the root")):
            status, answer = self.as_user(me, method, path, body)
            self.assertEqual(status, 403, path)
            self.assertIn(why, answer["error"])
        self.assertEqual(self.root("DELETE", "/v1/users/admin")[0], 403)
        self.assertEqual(self.as_user(me, "DELETE", f"/v1/users/{dave}")[0], 204)
        self.assertEqual(self.root("DELETE", f"/v1/users/{carol}")[0], 204)
        self.assertEqual(self.root("PUT", "/v1/users/nobody/grants", {"grants": []})[0], 404)


class NsqAuthByUsers(Base):
    ARGS = ("--nsq-auth-users",)

    def test_nsq_auth_with_tern_users(self):
        self.assertIn("NSQ AUTH is served by tern's users", self.d.log())
        name = f"n{uuid.uuid4().hex[:6]}"
        body = json.dumps({"username": name, "password": "pw", "grants": [
            {"action": "produce", "patterns": ["jobs.*"]},
            {"action": "consume", "patterns": ["jobs.a"]}]}).encode()
        self.assertEqual(self.request("POST", "/v1/users", body, ("admin", PASSWORD),
                                      {"Content-Type": "application/json"})[0], 201)
        # PUB before AUTH is refused and closes the connection.
        c = Conn(self.d.tcp_port)
        self.assertTrue(c.identify()["auth_required"])
        c.cmd("PUB jobs.a", b"\0\0\0\1x")
        self.assertEqual(c.read_frame()[1], b"E_AUTH_FIRST AUTH required before PUB")
        c.close()
        for secret, want in ((f"{name}:nope", b"E_AUTH_FAILED"), ("nocolon", b"E_AUTH_FAILED"),
                             (f"{name}:", b"E_AUTH_FAILED")):
            c = Conn(self.d.tcp_port)
            c.identify()
            c.cmd("AUTH", secret.encode())
            self.assertTrue(c.read_frame()[1].startswith(want), secret)
            c.close()
        c = Conn(self.d.tcp_port)
        c.identify()
        c.cmd("AUTH", f"{name}:pw".encode())
        kind, data = c.read_frame()
        self.assertEqual(json.loads(data), {"identity": name, "identity_url": "",
                                            "permission_count": 2})
        self.assertEqual(c.pub("jobs.a", b"x")[1], b"OK")
        self.assertEqual(c.pub("jobs.b", b"x")[1], b"OK")
        self.assertEqual(c.sub("jobs.a", "workers")[1], b"OK")
        c.close()
        c = Conn(self.d.tcp_port)
        c.identify()
        c.cmd("AUTH", f"{name}:pw".encode())
        c.read_frame()
        c.cmd("PUB jobsXb", b"\0\0\0\1x")  # '.' is literal in a pattern
        self.assertTrue(c.read_frame()[1].startswith(b"E_UNAUTHORIZED"))
        c.close()
        c = Conn(self.d.tcp_port)
        c.identify()
        c.cmd("AUTH", f"{name}:pw".encode())
        c.read_frame()
        c.cmd("SUB jobs.b workers")
        self.assertTrue(c.read_frame()[1].startswith(b"E_UNAUTHORIZED"))
        c.close()
        # The root user (admin) may do everything.
        c = Conn(self.d.tcp_port)
        c.identify()
        c.cmd("AUTH", f"admin:{PASSWORD}".encode())
        c.read_frame()
        self.assertEqual(c.pub("anything", b"x")[1], b"OK")
        c.close()


class Restart(Base):
    def test_nsq_creations_and_deletions_go_through_the_metastore(self):
        t = f"g{uuid.uuid4().hex[:8]}"
        c = Conn(self.d.tcp_port)
        c.identify()
        c.pub(t, b"x")
        # Recorded before the engine made it: no waiting.
        status, rec = self.admin("GET", f"/v1/topics/{t}")
        self.assertEqual((status, rec["partitions"]), (200, 1))
        c.sub(t, "workers")
        self.assertEqual(self.admin("GET", f"/v1/topics/{t}")[1]["channels"], ["workers"])
        c.close()
        status, _, _ = self.request("POST", f"/channel/delete?topic={t}&channel=workers")
        self.assertEqual(status, 200)
        self.assertEqual(self.admin("GET", f"/v1/topics/{t}")[1]["channels"], [], self.d.log())
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}")[0], 200)
        status, body = self.admin("GET", f"/v1/topics/{t}")
        self.assertEqual(status, 404, (body, self.d.log()))

    def test_a_creation_the_engine_refuses_keeps_no_record(self):
        # The engine cannot make the topic's directory (a file has its
        # name: ENOTDIR, as EACCES or an I/O error would): the creation
        # answers 500 with the reason, and the record made for it is taken
        # back, so the topic is not listed without its log, and a retry
        # once the cause is gone creates it (was: 500 "create failed", the
        # topic listed, and the retry met "topic already exists").
        name = f"refused{uuid.uuid4().hex[:8]}"
        blocker = os.path.join(self.dir, "data", "topics", name)
        with open(blocker, "w") as f:
            f.write("not a directory\n")
        body = json.dumps({"name": name, "partitions": 2}).encode()
        hdrs = {"Content-Type": "application/json"}
        status, _, data = self.request("POST", "/v1/topics", body, ("admin", PASSWORD), hdrs)
        self.assertEqual(status, 500, data)
        status, rec = self.admin("GET", f"/v1/topics/{name}")
        self.assertEqual(status, 404, rec)
        self.assertEqual(json.loads(data)["error"], "create failed: not a directory")
        # The purge of the record taken back removed what had the topic's
        # name here, as a DELETE does: nothing is left in the retry's way.
        self.assertFalse(os.path.exists(blocker))
        status, _, data = self.request("POST", "/v1/topics", body, ("admin", PASSWORD), hdrs)
        self.assertEqual(status, 201, data)
        status, _, data = self.request("POST", f"/v1/topics/{name}/produce", b'{"n":1}',
                                       ("admin", PASSWORD), hdrs)
        self.assertEqual(status, 202, data)

    def test_an_nsq_auto_create_the_engine_refuses_keeps_no_record(self):
        # A PUB to a new topic whose directory the engine cannot make (a
        # file has its name): E_PUB_FAILED, and the record the gate made
        # for it is taken back, so the topic is not listed without its log
        # (was: listed until a later PUB made the topic); the next PUB once
        # the cause is gone makes it.
        name = f"nsqrefused{uuid.uuid4().hex[:8]}"
        blocker = os.path.join(self.dir, "data", "topics", name)
        with open(blocker, "w") as f:
            f.write("not a directory\n")
        c = Conn(self.d.tcp_port)
        c.identify()
        kind, data = c.pub(name, b"x")
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(b"E_PUB_FAILED"), data)
        c.close()
        deadline = time.monotonic() + 5
        while self.admin("GET", f"/v1/topics/{name}")[0] != 404:
            self.assertLess(time.monotonic(), deadline,
                            self.admin("GET", f"/v1/topics/{name}"))
            time.sleep(0.05)
        if os.path.exists(blocker):
            os.unlink(blocker)
        c = Conn(self.d.tcp_port)
        c.identify()
        self.assertEqual(c.pub(name, b"y"), (FRAME_RESPONSE, b"OK"))
        c.close()
        status, rec = self.admin("GET", f"/v1/topics/{name}")
        self.assertEqual(status, 200, rec)

    def test_recorded_topic_without_files_is_made_at_start(self):
        name = f"rec{uuid.uuid4().hex[:8]}"
        status, _, _ = self.request("POST", "/v1/topics",
                                    json.dumps({"name": name, "partitions": 3}).encode(),
                                    ("admin", PASSWORD), {"Content-Type": "application/json"})
        self.assertEqual(status, 201)
        for ch in ("audit", "billing"):  # through nsqd's HTTP door, with the owner's credentials
            self.assertEqual(self.request("POST", f"/channel/create?topic={name}&channel={ch}",
                                          None, ("admin", PASSWORD))[0], 200)
        self.assertEqual(self.admin("GET", f"/v1/topics/{name}")[1]["channels"],
                         ["audit", "billing", "default"])
        self.assertEqual(self.d.stop(), 0)
        # As if it crashed after the record and before the files.
        shutil.rmtree(os.path.join(self.dir, "data", "topics", name))
        self.__class__.d = Daemon(os.path.join(self.dir, "data"), env=dict(os.environ))
        self.d.wait_for("metastore ready")
        self.d.wait_for(f"topic {name} was recorded but had no files")
        # Its recorded channels follow once the topic is made, so both
        # keep what is published before any consumer comes back.
        self.d.wait_for(f"channel audit of {name} was recorded but had no files")
        self.d.wait_for(f"channel billing of {name} was recorded but had no files")
        # Those lines say the makings began: /stats lists a channel once
        # it is made (on a loaded machine, after the publish below).
        for ch in ("default", "audit", "billing"):
            while f"channel {ch} of {name} created" not in "".join(self.d.lines):
                self.d.wait_for(f" of {name} created")
        self.__class__.port = self.d.http_port
        import time
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, t = self.admin("GET", f"/v1/topics/{name}")
            if len(t.get("partition_stats", [])) == 3:
                break
            time.sleep(0.05)
        self.assertEqual(len(t["partition_stats"]), 3)
        self.assertEqual(self.request("POST", f"/pub?topic={name}", b"early",
                                      ("admin", PASSWORD))[0], 200)
        # A protected topic is listed to those who may see it.
        status, _, data = self.request("GET", "/stats?format=json&topic=" + name,
                                       auth=("admin", PASSWORD))
        self.assertEqual(status, 200)
        topic = [x for x in json.loads(data)["topics"] if x["topic_name"] == name][0]
        depths = {ch["channel_name"]: ch["depth"] for ch in topic["channels"]}
        self.assertEqual(depths, {"audit": 1, "billing": 1, "default": 1}, self.d.log())
        # Produce and consume work.
        status, _, _ = self.request("POST", f"/v1/topics/{name}/produce", b"again",
                                    ("admin", PASSWORD), {"X-Tern-Client": "t"})
        self.assertEqual(status, 202)
        got = set()
        for _ in range(2):  # "early" went by NSQ, "again" by /v1; any order
            status, _, data = self.request("GET", f"/v1/topics/{name}/consume?wait=3s", None,
                                           ("admin", PASSWORD))
            self.assertEqual(status, 200)
            got.add(json.loads(data)["payload"])
        self.assertEqual(got, {"early", "again"})

    def test_created_topic_survives_restart(self):
        name = f"r{uuid.uuid4().hex[:10]}"
        status, _, _ = self.request("POST", "/v1/topics",
                                    json.dumps({"name": name, "partitions": 2,
                                                "delivery_mode": "ttl_discard",
                                                "ttl_ms": 90000}).encode(),
                                    ("admin", PASSWORD), {"Content-Type": "application/json"})
        self.assertEqual(status, 201)
        self.assertEqual(self.d.stop(), 0)
        env = dict(os.environ)
        self.__class__.d = Daemon(os.path.join(self.dir, "data"), env=env)
        self.d.wait_for("metastore ready")
        self.__class__.port = self.d.http_port
        status, t = self.admin("GET", f"/v1/topics/{name}")
        self.assertEqual(status, 200)
        self.assertEqual((t["partitions"], t["ttl_ms"], t["channels"]), (2, 90000, ["default"]))
        self.assertEqual(len(t["partition_stats"]), 2)

    def test_lone_node_serves_every_partition(self):
        """A lone node owns every partition (placement changes nothing for
        it), across a restart, and a partition whose files went missing is
        opened again once the metastore says it is this node's."""
        name = f"lp{uuid.uuid4().hex[:8]}"
        status, _, _ = self.request("POST", "/v1/topics",
                                    json.dumps({"name": name, "partitions": 3}).encode(),
                                    ("admin", PASSWORD), {"Content-Type": "application/json"})
        self.assertEqual(status, 201)
        h = {"Content-Type": "application/octet-stream"}

        def produce(query, body=b"m"):
            return self.request("POST", f"/v1/topics/{name}/produce{query}", body,
                                ("admin", PASSWORD), h)[0]

        for p in range(3):
            self.assertEqual(produce(f"?partition={p}", b"p%d" % p), 202)
        batch = json.dumps([{"payload": "b%d" % p, "partition": p} for p in range(3)]).encode()
        self.assertEqual(self.request("POST", f"/v1/topics/{name}/produce/batch", batch,
                                      ("admin", PASSWORD),
                                      {"Content-Type": "application/json"})[0], 202)
        self.assertEqual(self.request("POST", f"/pub?topic={name}", b"nsq",
                                      ("admin", PASSWORD))[0], 200)
        _, t = self.admin("GET", f"/v1/topics/{name}")
        self.assertEqual([p["owner_node"] for p in t["partition_stats"]], ["1", "1", "1"])
        self.assertEqual(sum(p["next_offset"] for p in t["partition_stats"]), 7)
        self.assertTrue(all(p["next_offset"] >= 2 for p in t["partition_stats"]), t)
        self.assertEqual(self.d.stop(), 0)
        # Partition 1 lost its files (its log and its channel's log).
        shutil.rmtree(os.path.join(self.dir, "data", "topics", name, "1"))
        self.__class__.d = Daemon(os.path.join(self.dir, "data"), env=dict(os.environ))
        self.d.wait_for("metastore ready")
        self.__class__.port = self.d.http_port
        self.d.wait_for(f"partition {name}/1 is placed on this node: opened")
        for p in range(3):
            self.assertEqual(produce(f"?partition={p}", b"again%d" % p), 202)
        _, t = self.admin("GET", f"/v1/topics/{name}")
        self.assertEqual([p["next_offset"] for p in t["partition_stats"]][1], 1)
        self.assertEqual([p["owner_node"] for p in t["partition_stats"]], ["1", "1", "1"])
        got = []
        while True:
            status, _, data = self.request("GET", f"/v1/topics/{name}/consume?wait=1s", None,
                                           ("admin", PASSWORD))
            if status != 200:
                break
            m = json.loads(data)
            got.append((m["partition"], m["payload"]))
            self.assertEqual(self.request("POST", f"/v1/topics/{name}/ack?receipt_handle="
                                          f"{m['receipt_handle']}", b"", ("admin", PASSWORD),
                                          {"X-Tern-Client": "t"})[0], 204)
        self.assertEqual(status, 204)
        # Partitions 0 and 2 kept what they had; 1 has only the new one.
        self.assertEqual([g for g in got if g[0] == 1], [(1, "again1")], got)
        kept = {g for g in got if g[0] != 1}
        for want in ((0, "p0"), (0, "b0"), (0, "again0"), (2, "p2"), (2, "b2"), (2, "again2")):
            self.assertIn(want, kept)

    def test_users_and_grants_survive_restart(self):
        name = f"u{uuid.uuid4().hex[:8]}"
        body = json.dumps({"username": name, "password": "pw",
                           "grants": [{"action": "produce", "patterns": ["r*"]}]}).encode()
        status, _, _ = self.request("POST", "/v1/users", body, ("admin", PASSWORD),
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 201)
        self.assertEqual(self.d.stop(), 0)
        self.__class__.d = Daemon(os.path.join(self.dir, "data"), env=dict(os.environ))
        self.d.wait_for("metastore ready")
        self.__class__.port = self.d.http_port
        status, _, data = self.request("GET", f"/v1/users/{name}", None, ("admin", PASSWORD))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(data)["grants"], [{"action": "produce", "patterns": ["r*"]}])
        self.assertEqual(self.request("GET", "/v1/topics", None, (name, "pw"))[0], 200)


class Throttle(Base):
    """A daemon of its own: the test locks the root user out for a while."""

    def test_failed_logins_are_throttled(self):
        user = "admin"
        statuses = [self.request("GET", "/v1/users", auth=(user, f"wrong{i}"))[0]
                    for i in range(6)]
        self.assertEqual(statuses[:5], [401] * 5)
        self.assertEqual(statuses[5], 429)
        status, headers, body = self.request("GET", "/v1/users", auth=(user, PASSWORD))
        self.assertEqual(status, 429)  # even the right password, until a token is back
        self.assertIn("Retry-After", headers)
        self.assertEqual(json.loads(body), {"error": "too many failed authentication attempts"})


class DevMode(Base):
    ARGS = ("--security-enabled=false",)

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-v1-")
        cls.d = Daemon(os.path.join(cls.dir, "data"), *cls.ARGS)
        cls.d.wait_for("metastore ready")
        cls.port = cls.d.http_port

    def test_no_credentials_needed(self):
        status, _, body = self.request("GET", "/v1/topics")
        self.assertEqual(status, 200)
        self.assertIn(b"topics", body)
        self.assertIn("security is OFF", self.d.log())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
