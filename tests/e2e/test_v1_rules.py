#!/usr/bin/env python3
"""End-to-end tests of /v1 rules against the real ternd: the health
endpoints' JSON bodies, the one-hour retention floor on create and PATCH,
partitions that only grow, a query parameter given twice refused on every
/v1 route (nsqd's endpoints keep taking the first), a child created with
its parent taking the parent's partition count with parent partition p
feeding child partition p, and deleting a parent leaving its children
standalone, with their messages, consumable."""
import json
import os
import time
import unittest
import uuid

import test_v1
from daemon import Daemon
from test_v1 import PASSWORD, Base

API = {"X-Tern-Client": "tests"}
HOUR = 3600 * 1000


class Rules(Base):
    def create(self, **fields):
        name = fields.pop("name", None) or f"r{uuid.uuid4().hex[:10]}"
        body = dict({"name": name}, **fields)
        status, rec = self.send("POST", "/v1/topics", body)
        self.assertEqual(status, 201, rec)
        return name

    def send(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        status, _, out = self.request(method, path, data, ("admin", PASSWORD), API)
        return status, json.loads(out) if out else None

    def produce(self, topic, body, query=""):
        status, _, data = self.request("POST", f"/v1/topics/{topic}/produce{query}", body,
                                       ("admin", PASSWORD), API)
        self.assertEqual(status, 202, data)

    def consume(self, topic, query=""):
        status, _, data = self.request("GET", f"/v1/topics/{topic}/consume{query}", None,
                                       ("admin", PASSWORD), timeout=30)
        return status, json.loads(data) if data else None

    def next_offsets(self, topic):
        status, rec = self.admin("GET", f"/v1/topics/{topic}")
        self.assertEqual(status, 200, rec)
        return [p["next_offset"] for p in rec["partition_stats"]]

    def wait_offsets(self, topic, want):
        deadline = time.monotonic() + 20
        got = self.next_offsets(topic)
        while got != want and time.monotonic() < deadline:
            time.sleep(0.1)
            got = self.next_offsets(topic)
        self.assertEqual(got, want, topic)

    def test_health_bodies(self):
        for path, body in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
            status, headers, data = self.request("GET", path)
            self.assertEqual(status, 200, path)
            self.assertEqual(headers["Content-Type"], "application/json; charset=utf-8", path)
            self.assertEqual(json.loads(data), body, path)

    def test_retention_floor(self):
        for ms in (1, 60000, HOUR - 1):
            status, body = self.send("POST", "/v1/topics", {"name": f"r{ms}x{uuid.uuid4().hex[:6]}",
                                                            "retention_ms": ms})
            self.assertEqual(status, 400, ms)
            self.assertEqual(body["error"],
                             "invalid argument: retention_ms must be 0 (no age limit) or at least "
                             f"3600000 (1 hour); got {ms}")
        status, body = self.send("POST", "/v1/topics", {"name": "neg" + uuid.uuid4().hex[:6],
                                                        "retention_ms": -5})
        self.assertEqual(status, 400)
        self.assertIn("retention_ms must be >= 0", body["error"])
        t = self.create(retention_ms=HOUR)
        forever = self.create(retention_ms=0)
        self.assertEqual(self.admin("GET", f"/v1/topics/{forever}")[1]["retention_ms"], 0)
        # PATCH: the same rule; a refused change changes nothing.
        for ms in (1, HOUR - 1):
            status, body = self.send("PATCH", f"/v1/topics/{t}", {"retention_ms": ms})
            self.assertEqual(status, 400, ms)
            self.assertIn("at least 3600000 (1 hour)", body["error"])
        self.assertEqual(self.admin("GET", f"/v1/topics/{t}")[1]["retention_ms"], HOUR)
        for ms in (0, 2 * HOUR):
            status, rec = self.send("PATCH", f"/v1/topics/{t}", {"retention_ms": ms})
            self.assertEqual((status, rec["retention_ms"]), (200, ms))

    def test_partitions_only_grow(self):
        t = self.create(partitions=4)
        for n in (4, 3, 0):
            status, body = self.send("PATCH", f"/v1/topics/{t}", {"partitions": n})
            self.assertEqual((status, body["error"]),
                             (400, "invalid argument: partitions can only grow: the topic has 4"), n)
        status, rec = self.send("PATCH", f"/v1/topics/{t}", {"partitions": 5})
        self.assertEqual((status, rec["partitions"]), (200, 5))
        status, body = self.send("PATCH", f"/v1/topics/{t}", {"partitions": 5})
        self.assertEqual((status, body["error"]),
                         (400, "invalid argument: partitions can only grow: the topic has 5"))

    def test_repeated_query_parameter_on_every_route(self):
        t = self.create(partitions=2)
        self.produce(t, b"x")
        routes = [
            ("GET", "/v1/topics?limit=1&limit=2", "limit"),
            ("GET", "/v1/topics?page_token=a&page_token=a", "page_token"),
            ("GET", f"/v1/topics/{t}?partition=0&partition=1", "partition"),
            ("POST", "/v1/topics?x=1&x=2", "x"),
            ("PATCH", f"/v1/topics/{t}?x=1&x=2", "x"),
            ("DELETE", f"/v1/topics/{t}?x=1&x=2", "x"),
            ("POST", f"/v1/topics/{t}/produce?partition=0&partition=1", "partition"),
            ("POST", f"/v1/topics/{t}/produce?key=a&partition=0&key=b", "key"),
            ("GET", f"/v1/topics/{t}/consume?wait=1s&wait=2s", "wait"),
            ("GET", f"/v1/topics/{t}/consume?channel=a&channel=b", "channel"),
            ("GET", f"/v1/topics/{t}/consume?partition=0&offset=0&offset=1", "offset"),
            ("GET", f"/v1/topics/{t}/consume?max=1&max=2", "max"),
            ("GET", f"/v1/topics/{t}/consume?partition=1&partition=1", "partition"),
            ("POST", f"/v1/topics/{t}/ack?receipt_handle=0:0:1&receipt_handle=0:0:2",
             "receipt_handle"),
            ("POST", f"/v1/topics/{t}/ack?receipt_handle=0:0:1&extend=1&extend", "extend"),
            ("POST", f"/v1/topics/{t}/produce/batch?y=1&y", "y"),
            ("POST", f"/v1/topics/{t}/ack/batch?channel=a&channel=a", "channel"),
            ("GET", f"/v1/topics/{t}/children?z=&z=", "z"),
            ("POST", f"/v1/topics/{t}/children?z=1&z=1", "z"),
            ("DELETE", f"/v1/topics/{t}/children/c?z=1&z=1", "z"),
            ("GET", "/v1/cluster/members?a=1&a=1", "a"),
            ("GET", "/v1/cluster/moves?a=1&a=1", "a"),
            ("POST", "/v1/cluster/members/1/decommission?a=1&a=1", "a"),
            ("DELETE", "/v1/cluster/members/1/decommission?a=1&a=1", "a"),
            ("GET", "/v1/users?a=1&a=2", "a"),
            ("GET", "/v1/users/admin?a=1&a=2", "a"),
            ("POST", "/v1/users?a=1&a=2", "a"),
            ("DELETE", "/v1/users/nobody?a=1&a=2", "a"),
            ("PUT", "/v1/users/nobody/grants?a=1&a=2", "a"),
            ("PUT", "/v1/users/admin/password?a=1&a=2", "a"),
        ]
        for method, path, name in routes:
            status, _, data = self.request(method, path, b"{}", ("admin", PASSWORD), API)
            self.assertEqual(status, 400, (method, path, data))
            self.assertEqual(json.loads(data)["error"],
                             f"invalid argument: query parameter {name} given more than once",
                             (method, path))
        # Nothing was changed or taken by the refused requests.
        self.assertEqual(self.admin("GET", f"/v1/topics/{t}")[1]["name"], t)
        status, m = self.consume(t, "?wait=2s")
        self.assertEqual((status, m["payload"]), (200, "x"))
        # Credentials still come first; one value each is fine.
        self.assertEqual(self.request("GET", "/v1/topics?limit=1&limit=2")[0], 401)
        self.assertEqual(self.admin("GET", "/v1/topics?limit=1&page_token=")[0], 200)
        # nsqd's endpoints take the first value, as nsqd does.
        status, _, data = self.request("POST", f"/pub?topic={t}n&topic=other{t}", b"y")
        self.assertEqual((status, data), (200, b"OK"))
        status, _, data = self.request("GET", f"/stats?format=json&topic={t}n")
        self.assertEqual(status, 200)
        self.assertEqual([x["topic_name"] for x in json.loads(data)["topics"]], [f"{t}n"])

    def test_child_takes_the_parents_partitions(self):
        p = self.create(partitions=3)
        status, body = self.send("POST", "/v1/topics", {"name": "c" + p, "parent": p,
                                                        "partitions": 4})
        self.assertEqual((status, body["error"]),
                         (400, "invalid argument: a topic created with a parent has the parent's "
                               "partition count: the parent has 3, the request asks for 4"))
        self.assertEqual(self.admin("GET", f"/v1/topics/c{p}")[0], 404)
        status, rec = self.send("POST", "/v1/topics", {"name": "c" + p, "parent": p})
        self.assertEqual((status, rec["partitions"], rec["role"]), (201, 3, "child"), rec)
        status, rec = self.send("POST", "/v1/topics", {"name": "d" + p, "parent": p,
                                                       "partitions": 3})
        self.assertEqual((status, rec["partitions"]), (201, 3), rec)
        # Parent partition p feeds child partition p, whatever the key and
        # with no key (a pinned produce whose key hashes elsewhere too).
        sent = [(0, ""), (0, "&key=a"), (1, ""), (2, "&key=b"), (2, ""), (2, "&key=zz")]
        for part, key in sent:
            self.produce(p, b"p%d" % part, f"?partition={part}{key}")
        self.wait_offsets(p, [2, 1, 3])
        for child in ("c" + p, "d" + p):
            self.wait_offsets(child, [2, 1, 3])
            for part in range(3):
                status, m = self.consume(child, f"?partition={part}&offset=0")
                self.assertEqual((status, m["partition"], m["payload"]), (200, part, f"p{part}"))

    def test_deleting_a_parent_leaves_standalone_children(self):
        p = self.create(partitions=2)
        kid = "k" + p
        status, rec = self.send("POST", "/v1/topics", {"name": kid, "parent": p})
        self.assertEqual(status, 201, rec)
        late = self.create(partitions=2)  # attached after creation, with a delay
        status, rec = self.send("POST", f"/v1/topics/{p}/children", {"child": late,
                                                                     "delay_ms": 1000})
        self.assertEqual((status, rec["children"]), (200, [kid, late]), rec)
        for i in range(4):
            self.produce(p, b"m%d" % i, f"?partition={i % 2}")
        self.wait_offsets(kid, [2, 2])
        self.wait_offsets(late, [2, 2])
        self.assertEqual(self.send("DELETE", f"/v1/topics/{p}")[0], 204)
        # In the same change: no waiting for a later sweep.
        for child in (kid, late):
            status, rec = self.admin("GET", f"/v1/topics/{child}")
            self.assertEqual((status, rec["role"]), (200, "standalone"), rec)
            for field in ("parent", "attach_epoch", "fanout_delay_ms"):
                self.assertNotIn(field, rec)
        self.assertEqual(self.admin("GET", f"/v1/topics/{p}")[0], 404)
        # The children keep their messages and are consumed as any topic.
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 4 and time.monotonic() < deadline:
            status, m = self.consume(kid, "?wait=2s")
            if status == 200:
                got.append(m["payload"])
                st, _, _ = self.request(
                    "POST", f"/v1/topics/{kid}/ack?receipt_handle={m['receipt_handle']}", None,
                    ("admin", PASSWORD), API)
                self.assertEqual(st, 204)
        self.assertEqual(sorted(got), ["m0", "m1", "m2", "m3"])
        self.assertEqual(self.consume(kid, "?wait=200ms")[0], 204)
        # A former delay child takes produces directly now.
        self.produce(late, b"direct")
        status, m = self.consume(late, "?wait=2s")
        self.assertEqual(status, 200)
        # The parent's name made again starts with no children, and its
        # messages go nowhere else.
        self.create(name=p, partitions=2)
        status, rec = self.admin("GET", f"/v1/topics/{p}")
        self.assertEqual((rec["role"], rec.get("children")), ("standalone", None))
        self.produce(p, b"new", "?partition=0")
        time.sleep(2.5)  # past a fan-out sync: nothing may copy it
        self.assertEqual(self.next_offsets(kid), [2, 2])
        self.assertEqual(self.next_offsets(late)[0] + self.next_offsets(late)[1], 5)


class RulesRestart(Base):
    def test_detached_children_stay_standalone_after_restart(self):
        p = f"rp{uuid.uuid4().hex[:8]}"
        body = json.dumps({"name": p, "partitions": 1}).encode()
        self.assertEqual(self.request("POST", "/v1/topics", body, ("admin", PASSWORD), API)[0],
                         201)
        body = json.dumps({"name": "c" + p, "parent": p}).encode()
        self.assertEqual(self.request("POST", "/v1/topics", body, ("admin", PASSWORD), API)[0],
                         201)
        self.assertEqual(self.admin("DELETE", f"/v1/topics/{p}")[0], 204)
        self.assertEqual(self.d.stop(), 0, self.d.log())
        env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD)
        type(self).d = Daemon(os.path.join(self.dir, "data"), env=env)
        self.d.wait_for("metastore ready")
        type(self).port = self.d.http_port
        status, rec = self.admin("GET", f"/v1/topics/c{p}")
        self.assertEqual((status, rec["role"]), (200, "standalone"), rec)
        self.assertNotIn("parent", rec)


if __name__ == "__main__":
    test_v1.main()
