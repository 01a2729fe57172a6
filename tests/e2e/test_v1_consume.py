#!/usr/bin/env python3
"""End-to-end tests of /v1 consumes against the real ternd: long polls and
their wake-up on produce, payload rendering, receipt handles with ack,
extend and nack (204, 410 stale, 503 at the acked-ahead cap), lease expiry
redelivery, batch consume, replay reads, pinned partitions, named
channels, the per-identity cap, NSQ and /v1 sharing one channel both ways,
a deleted topic answering its parked consumes, settled state kept across
a restart, and batch produce and batch ack (limits, all-or-nothing,
compressed bodies, per-handle results)."""
import base64
import gzip
import json
import os
import threading
import time
import unittest
import uuid

import test_v1
from daemon import Daemon
from nsqwire import Conn
from test_v1 import PASSWORD, Base

API = {"X-Tern-Client": "tests"}


class Helpers(Base):
    def create(self, **fields):
        name = f"c{uuid.uuid4().hex[:10]}"
        body = dict({"name": name, "partitions": 1}, **fields)
        status, _, data = self.request("POST", "/v1/topics", json.dumps(body).encode(),
                                       ("admin", PASSWORD), {"Content-Type": "application/json"})
        self.assertEqual(status, 201, data)
        return name

    def produce(self, topic, body, query=""):
        status, _, data = self.request("POST", f"/v1/topics/{topic}/produce{query}", body,
                                       ("admin", PASSWORD), API)
        self.assertEqual(status, 202, data)

    def consume(self, topic, query="", headers=None):
        # The client waits well past any long poll (wait <= 10s here).
        status, _, data = self.request("GET", f"/v1/topics/{topic}/consume{query}", None,
                                       ("admin", PASSWORD), headers, timeout=30)
        return status, json.loads(data) if data else None

    def ack(self, topic, handle, query=""):
        status, _, data = self.request(
            "POST", f"/v1/topics/{topic}/ack?receipt_handle={handle}{query}", None,
            ("admin", PASSWORD), API)
        return status, json.loads(data) if data else None



class Consume(Helpers):
    def test_consume_renders_and_acks(self):
        t = self.create()
        self.produce(t, b'{"order": 7, "items": [1, 2]}', "?key=cust-1")
        self.produce(t, 'plain text, "quoted" \u00e9'.encode())
        self.produce(t, b"\xff\x00\xfe")
        status, m = self.consume(t, "?wait=2s")
        self.assertEqual(status, 200)
        self.assertEqual(m["payload"], {"order": 7, "items": [1, 2]})
        self.assertEqual((m["topic"], m["partition"], m["offset"], m["key"]), (t, 0, 0, "cust-1"))
        self.assertNotIn("payload_encoding", m)
        self.assertLessEqual(abs(m["timestamp"] - time.time()), 60)
        self.assertEqual(m["attempts"], 1)
        p, o, n = m["receipt_handle"].split(":")
        self.assertEqual((p, o), ("0", "0"))
        self.assertGreaterEqual(int(n), 1)
        self.assertEqual(self.ack(t, m["receipt_handle"]), (204, None))
        status, body = self.ack(t, m["receipt_handle"])
        self.assertEqual((status, body["error"]),
                         (410, "receipt handle no longer matches an active reservation"))
        status, m = self.consume(t)
        self.assertEqual(m["payload"], 'plain text, "quoted" \u00e9')
        self.assertNotIn("key", m)
        self.assertEqual(self.ack(t, m["receipt_handle"])[0], 204)
        status, m = self.consume(t)
        self.assertEqual(m["payload_encoding"], "base64")
        self.assertEqual(base64.b64decode(m["payload"]), b"\xff\x00\xfe")
        self.assertEqual(self.ack(t, m["receipt_handle"])[0], 204)
        # Nothing left: without a wait the answer is at once.
        start = time.monotonic()
        self.assertEqual(self.consume(t), (204, None))
        self.assertLess(time.monotonic() - start, 2)

    def test_long_poll_wakes_on_produce(self):
        t = self.create()
        out = {}

        def poll():
            start = time.monotonic()
            out["r"] = self.consume(t, "?wait=8s")
            out["took"] = time.monotonic() - start

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.4)
        self.produce(t, b"wake up")
        th.join(15)
        self.assertEqual(out["r"][0], 200)
        self.assertEqual(out["r"][1]["payload"], "wake up")
        self.assertLess(out["took"], 6)
        # A wait that expires answers 204 after about the wait.
        start = time.monotonic()
        self.assertEqual(self.consume(t, "?wait=300ms")[0], 204)
        self.assertGreaterEqual(time.monotonic() - start, 0.25)
        start = time.monotonic()
        self.assertEqual(self.consume(t, "?wait=0.3s")[0], 204)  # fractions, as Go writes them
        self.assertGreaterEqual(time.monotonic() - start, 0.25)

    def test_lease_expiry_extend_and_nack(self):
        t = self.create(visibility_timeout_ms=2000)
        self.produce(t, b"job")
        _, m1 = self.consume(t)
        # Leased: nobody else gets it.
        self.assertEqual(self.consume(t)[0], 204)
        # Not extended: it comes back after the visibility timeout, under a
        # new handle; the old one is stale.
        status, m2 = self.consume(t, "?wait=5s")
        self.assertEqual(status, 200)
        self.assertEqual((m2["offset"], m2["attempts"]), (m1["offset"], 2))
        self.assertNotEqual(m2["receipt_handle"], m1["receipt_handle"])
        self.assertEqual(self.ack(t, m1["receipt_handle"])[0], 410)
        # Extended twice past its first deadline: still ours. (Each extend
        # comes a second into a two-second lease: margin for a slow machine.)
        for _ in range(2):
            time.sleep(1.0)
            self.assertEqual(self.ack(t, m2["receipt_handle"], "&extend=true")[0], 204)
        self.assertEqual(self.consume(t)[0], 204)
        # Nack: at once deliverable again.
        self.assertEqual(self.ack(t, m2["receipt_handle"], "&extend=0")[0], 204)
        status, m3 = self.consume(t, "?wait=2s")
        self.assertEqual((status, m3["attempts"]), (200, 3))
        self.assertEqual(self.ack(t, m2["receipt_handle"])[0], 410)
        self.assertEqual(self.ack(t, m3["receipt_handle"], "&extend=1")[0], 204)
        self.assertEqual(self.ack(t, m3["receipt_handle"], "&extend=false")[0], 204)

    def test_acked_ahead_cap(self):
        t = self.create(max_acked_ahead_per_partition=2)
        for i in range(4):
            self.produce(t, b"m%d" % i)
        status, b = self.consume(t, "?max=4&wait=2s", API)
        self.assertEqual(status, 200)
        while len(b["messages"]) < 4:
            _, more = self.consume(t, "?max=4&wait=2s", API)
            b["messages"] += more["messages"]
        h = {m["offset"]: m["receipt_handle"] for m in b["messages"]}
        self.assertEqual(sorted(h), [0, 1, 2, 3])
        self.assertEqual(self.ack(t, h[1])[0], 204)
        self.assertEqual(self.ack(t, h[2])[0], 204)
        status, body = self.ack(t, h[3])
        self.assertEqual((status, body["error"]),
                         (503, "acked-ahead set is full; head of queue may be stuck"))
        self.assertEqual(self.ack(t, h[0])[0], 204)
        self.assertEqual(self.ack(t, h[3])[0], 204)

    def test_batch_consume(self):
        t = self.create(partitions=2)
        for i in range(5):
            self.produce(t, b"b%d" % i)
        status, body = self.consume(t, "?max=3&wait=2s", API)
        self.assertEqual(status, 200)
        got = body["messages"]
        self.assertTrue(1 <= len(got) <= 3)
        while len(got) < 5:
            status, body = self.consume(t, "?max=100&wait=2s", API)
            self.assertEqual(status, 200)
            got += body["messages"]
        self.assertEqual(sorted(m["payload"] for m in got), ["b0", "b1", "b2", "b3", "b4"])
        self.assertEqual(self.consume(t, "?max=100", API)[0], 204)
        status, body = self.consume(t, "?max=101", API)
        self.assertEqual((status, body["error"]), (400, "invalid argument: max must be 1..100"))
        self.assertEqual(self.consume(t, "?max=0", API)[0], 400)
        status, body = self.consume(t, "?max=5")
        self.assertEqual(status, 400)
        self.assertIn("X-Tern-Client", body["error"])
        self.assertEqual(self.consume(t, "?max=5", {"X-Narad-Client": "x"})[0], 204)

    def test_replay_reads_without_leasing(self):
        t = self.create(partitions=2)
        self.produce(t, b"first", "?partition=1")
        self.produce(t, b"second", "?partition=1")
        status, m = self.consume(t, "?partition=1&offset=1")
        self.assertEqual((status, m["payload"], m["offset"]), (200, "second", 1))
        self.assertNotIn("receipt_handle", m)
        self.assertEqual(self.consume(t, "?partition=1&offset=2")[0], 204)
        self.assertEqual(self.consume(t, "?partition=0&offset=0")[0], 204)
        # A number that is not one as sent is refused, not read as another:
        # past int64 (not the largest offset), with a space or a sign before it.
        for q in ("?partition=1&offset=99999999999999999999",
                  "?partition=1&offset=18446744073709551617", "?partition=1&offset=%201",
                  "?partition=%201&offset=1", "?partition=1&offset=1%20",
                  "?partition=1&offset=%2B1", "?partition=99999999999999999999&offset=1"):
            status, body = self.consume(t, q)
            self.assertEqual(status, 400, (q, body))
        status, body = self.consume(t, "?offset=0")
        self.assertEqual((status, body["error"]), (400, "partition required for replay-mode consume"))
        # The queue did not move.
        status, m = self.consume(t, "?partition=1")
        self.assertEqual((status, m["payload"]), (200, "first"))

    def test_pinned_partition_and_refusals(self):
        t = self.create(partitions=3)
        self.produce(t, b"p2", "?partition=2")
        self.assertEqual(self.consume(t, "?partition=0")[0], 204)
        status, m = self.consume(t, "?partition=2&wait=2s")
        self.assertEqual((status, m["partition"]), (200, 2))
        self.assertEqual(self.ack(t, m["receipt_handle"])[0], 204)
        for q in ("?wait=abc", "?wait=5", "?partition=3", "?partition=-1", "?partition=0&offset=x",
                  "?channel=bad%20name", "?channel=e%23ephemeral"):
            self.assertEqual(self.consume(t, q)[0], 400, q)
        self.assertEqual(self.consume("nosuch" + t)[0], 404)
        for h, want in (("", 400), ("1:2", 400), ("a:b:c", 400), ("0:0:0", 400), ("-1:0:1", 400),
                        ("0:0:1:2", 400), ("0:99:1", 410), ("7:0:1", 410)):
            status, body = self.ack(t, h)
            self.assertEqual(status, want, h)
        status, body = self.ack(t, "0:0:1", "&extend=maybe")
        self.assertEqual(status, 400)
        # State-changing: the cross-site guard applies to ack.
        status, _, _ = self.request("POST", f"/v1/topics/{t}/ack?receipt_handle=0:0:1", None,
                                    ("admin", PASSWORD))
        self.assertEqual(status, 415)

    def test_named_channel(self):
        t = self.create()
        self.produce(t, b"x")
        status, m = self.consume(t, "?channel=audit&wait=2s")
        self.assertEqual((status, m["payload"]), (200, "x"))
        # Each channel gets its own copy.
        status, d = self.consume(t, "?wait=2s")
        self.assertEqual((status, d["payload"]), (200, "x"))
        self.assertEqual(self.ack(t, m["receipt_handle"])[0], 410)  # channel default
        self.assertEqual(self.ack(t, m["receipt_handle"], "&channel=audit")[0], 204)
        self.assertEqual(self.ack(t, d["receipt_handle"])[0], 204)
        deadline = time.monotonic() + 10
        while True:
            _, rec = self.admin("GET", f"/v1/topics/{t}")
            if "audit" in rec["channels"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(rec["channels"], ["audit", "default"])

    def test_nsq_and_v1_share_a_channel(self):
        # Published over NSQ TCP, consumed and acked over /v1.
        t = f"mix{uuid.uuid4().hex[:8]}"
        c = Conn(self.d.tcp_port)
        c.identify()
        for i in range(3):
            c.pub(t, b"n%d" % i)
        deadline = time.monotonic() + 10
        while self.admin("GET", f"/v1/topics/{t}")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        got = []
        for _ in range(3):
            status, m = self.consume(t, "?channel=work&wait=2s")
            self.assertEqual(status, 200)
            got.append(m["payload"])
            self.assertEqual(self.ack(t, m["receipt_handle"], "&channel=work")[0], 204)
        self.assertEqual(sorted(got), ["n0", "n1", "n2"])
        # Produced over /v1, consumed over NSQ on the same channel; /v1
        # then finds nothing there.
        self.produce(t, b"from-http")
        c.sub(t, "work")
        c.rdy(5)
        msg = c.read_message()
        self.assertEqual(msg.body, b"from-http")
        c.fin(msg.id)
        self.assertEqual(self.consume(t, "?channel=work")[0], 204)
        c.close()

    def test_topic_delete_answers_parked_consumes(self):
        t = self.create()
        out = {}

        def poll():
            out["r"] = self.consume(t, "?wait=8s")

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.5)
        self.assertEqual(self.admin("DELETE", f"/v1/topics/{t}")[0], 204)
        th.join(15)
        self.assertEqual(out["r"][0], 404)


class Batches(Helpers):
    def batch(self, topic, items, headers=None, raw=None):
        body = raw if raw is not None else json.dumps(items).encode()
        status, _, data = self.request("POST", f"/v1/topics/{topic}/produce/batch", body,
                                       ("admin", PASSWORD), dict(API, **(headers or {})))
        return status, json.loads(data) if data else None

    def drain(self, topic, n):
        got = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            status, body = self.consume(topic, "?max=100&wait=2s", API)
            if status == 200:
                got += body["messages"]
        return got

    def test_batch_produce_shapes(self):
        t = self.create(partitions=3)
        items = [{"payload": {"order": 1, "lines": [{"sku": "a"}, 2, None, True]}, "key": "c1"},
                 {"payload": "text"},
                 {"payload": base64.b64encode(b"\x00\xffbin").decode(),
                  "payload_encoding": "base64"},
                 {"payload_encoding": "base64", "payload": "aGk="},
                 {"payload": 42, "partition": 2}]
        self.assertEqual(self.batch(t, items), (202, {"accepted": 5}))
        got = {json.dumps(m["payload"]): m for m in self.drain(t, 5)}
        self.assertEqual(len(got), 5)
        self.assertEqual(got[json.dumps({"order": 1, "lines": [{"sku": "a"}, 2, None, True]})]
                         ["key"], "c1")
        self.assertIn('"text"', got)
        self.assertIn('"hi"', got)
        self.assertEqual(got["42"]["partition"], 2)
        [binary] = [m for m in got.values() if m.get("payload_encoding") == "base64"]
        self.assertEqual(base64.b64decode(binary["payload"]), b"\x00\xffbin")
        # Keyed messages of a batch land with the single produce's key hash.
        self.produce(t, b"single", "?key=c1")
        _, one = self.consume(t, "?wait=2s")
        self.assertEqual(one["partition"], got[json.dumps(
            {"order": 1, "lines": [{"sku": "a"}, 2, None, True]})]["partition"])

    def test_batch_limits_and_refusals(self):
        t = self.create()
        status, body = self.batch(t, [{"payload": "m%d" % i} for i in range(1000)])
        self.assertEqual((status, body), (202, {"accepted": 1000}))
        status, body = self.batch(t, [{"payload": "m%d" % i} for i in range(1001)])
        self.assertEqual((status, body["error"]), (400, "a batch holds at most 1000 messages"))
        # A megabyte of [0,0,...] stops at its first element.
        zeros = b"[" + b"0," * (512 * 1024) + b"0]"
        status, body = self.batch(t, None, raw=zeros)
        self.assertEqual((status, body["error"]), (400, "message 0 must be an object"))
        for items, why in (([], "at least one"), ([{"key": "x"}], "payload required"),
                           ([{"payload": ""}], "empty payload"),
                           ([{"payload": "x", "partition": 1}], "partition out of range"),
                           ([{"payload": "x", "partition": -1}], "partition must be"),
                           ([{"payload": "x", "extra": 1}], 'unknown field "extra"'),
                           ([{"payload": {"a": 1}, "payload_encoding": "base64"}], "base64"),
                           ([{"payload": "x", "payload_encoding": "hex"}], "payload_encoding"),
                           ([{"payload": "x"}, {"payload": "y", "key": 5}], "message 1: key"),
                           ({"payload": "x"}, "JSON array")):
            status, body = self.batch(t, items)
            self.assertEqual(status, 400, items)
            self.assertIn(why, body["error"], items)
        status, body = self.batch(t, None, raw=b'[{"payload":"x","payload":"y"}]')
        self.assertEqual((status, body["error"]), (400, 'message 0: duplicate field "payload"'))
        status, body = self.batch(t, None, raw=b'[{"payload":"x"}] [')
        self.assertEqual(status, 400)
        # Each message at most the message size limit, inclusive.
        big = "m" * (1024 * 1024)
        self.assertEqual(self.batch(t, [{"payload": big}])[0], 202)
        self.assertEqual(self.batch(t, [{"payload": big + "m"}])[0], 400)
        # Refused batches published nothing: 1000 + 1 big one are there.
        _, rec = self.admin("GET", f"/v1/topics/{t}")
        self.assertEqual(rec["partition_stats"][0]["next_offset"], 1001)
        # gzip bodies, up to 16 MiB decoded.
        packed = gzip.compress(json.dumps([{"payload": "z%d" % i} for i in range(10)]).encode())
        self.assertEqual(self.batch(t, None, {"Content-Encoding": "gzip"}, raw=packed),
                         (202, {"accepted": 10}))
        bomb = gzip.compress(b"[" + b" " * (17 * 1024 * 1024) + b"]")
        status, _ = self.batch(t, None, {"Content-Encoding": "gzip"}, raw=bomb)
        self.assertEqual(status, 413)
        # The guard and the grant checks apply.
        status, _, _ = self.request("POST", f"/v1/topics/{t}/produce/batch", b"[]",
                                    ("admin", PASSWORD))
        self.assertEqual(status, 415)
        self.assertEqual(self.batch("nosuch" + t, [{"payload": "x"}])[0], 404)

    def test_batch_ack(self):
        t = self.create()
        self.batch(t, [{"payload": "a%d" % i} for i in range(3)])
        msgs = self.drain(t, 3)
        handles = [m["receipt_handle"] for m in msgs]
        body = json.dumps([handles[0], "junk", handles[1], handles[0]]).encode()
        status, _, data = self.request("POST", f"/v1/topics/{t}/ack/batch", body,
                                       ("admin", PASSWORD), API)
        self.assertEqual(status, 200)
        results = json.loads(data)["results"]
        self.assertEqual([r["status"] for r in results], [204, 400, 204, 410])
        self.assertEqual([r["receipt_handle"] for r in results],
                         [handles[0], "junk", handles[1], handles[0]])
        self.assertEqual(results[1]["error"], "receipt handle is malformed")
        # Extend and nack apply to the whole batch.
        status, _, data = self.request("POST", f"/v1/topics/{t}/ack/batch?extend=0",
                                       json.dumps([handles[2]]).encode(), ("admin", PASSWORD), API)
        self.assertEqual(json.loads(data)["results"][0]["status"], 204)
        status, m = self.consume(t, "?wait=2s")
        self.assertEqual((status, m["attempts"]), (200, 2))
        for body, why in ((b"[]", "at least one"), (b"[1]", "receipt handle strings"),
                          (json.dumps(["0:0:1"] * 101).encode(), "at most 100")):
            status, _, data = self.request("POST", f"/v1/topics/{t}/ack/batch", body,
                                           ("admin", PASSWORD), API)
            self.assertEqual(status, 400)
            self.assertIn(why, json.loads(data)["error"])


class Children(Helpers):
    def link(self, parent, child, delay=None):
        body = {"child": child}
        if delay is not None:
            body["delay_ms"] = delay
        status, _, data = self.request("POST", f"/v1/topics/{parent}/children",
                                       json.dumps(body).encode(), ("admin", PASSWORD), API)
        return status, json.loads(data) if data else None

    def test_fan_out_to_children(self):
        p = self.create(partitions=2)
        c1 = self.create(partitions=3)
        self.produce(p, b"before")  # children get no backfill
        status, rec = self.link(p, c1)
        self.assertEqual((status, rec["role"], rec["children"]), (200, "parent", [c1]), rec)
        _, crec = self.admin("GET", f"/v1/topics/{c1}")
        self.assertEqual((crec["role"], crec["parent"], crec["fanout_delay_ms"]), ("child", p, 0))
        self.assertRegex(crec["attach_epoch"], "^[0-9a-f]{16}$")
        for i in range(3):
            self.produce(p, b"m%d" % i, "?key=k%d" % i)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            status, m = self.consume(c1, "?wait=2s")
            if status == 200:
                got.append(m)
                self.assertEqual(self.ack(c1, m["receipt_handle"])[0], 204)
        self.assertEqual(sorted(m["payload"] for m in got), ["m0", "m1", "m2"])
        self.assertEqual({m["key"] for m in got}, {"k0", "k1", "k2"})
        self.assertEqual(self.consume(c1, "?wait=500ms")[0], 204)  # not "before"
        status, kids = self.admin("GET", f"/v1/topics/{p}/children")
        self.assertEqual(status, 200)
        self.assertEqual(kids["parent"], p)
        [k] = kids["children"]
        self.assertEqual((k["name"], k["delay_ms"], k["lag_complete"]), (c1, 0, True))
        # Detached: no more copies; it stands alone.
        status, _, _ = self.request("DELETE", f"/v1/topics/{p}/children/{c1}", None,
                                    ("admin", PASSWORD))
        self.assertEqual(status, 204)
        self.assertEqual(self.request("DELETE", f"/v1/topics/{p}/children/{c1}", None,
                                      ("admin", PASSWORD))[0], 404)
        self.assertEqual(self.admin("GET", f"/v1/topics/{c1}")[1]["role"], "standalone")
        self.assertEqual(self.admin("GET", f"/v1/topics/{p}")[1]["role"], "standalone")
        self.produce(p, b"after")
        self.assertEqual(self.consume(c1, "?wait=1s")[0], 204)

    def test_delayed_child(self):
        p = self.create()
        d = self.create()
        self.assertEqual(self.link(p, d, delay=3000)[0], 200)
        start = time.monotonic()
        self.produce(p, b"later")
        self.assertEqual(self.consume(d)[0], 204)
        status, m = self.consume(d, "?wait=10s")
        self.assertEqual((status, m["payload"]), (200, "later"))
        self.assertGreaterEqual(time.monotonic() - start, 2.5)
        status, _, data = self.request("POST", f"/v1/topics/{d}/produce", b"x",
                                       ("admin", PASSWORD), API)
        self.assertEqual((status, json.loads(data)["error"]),
                         (409, "direct produce to a delay child is not allowed"))
        # Deleting the parent leaves the child standalone.
        self.assertEqual(self.admin("DELETE", f"/v1/topics/{p}")[0], 204)
        deadline = time.monotonic() + 10
        while self.admin("GET", f"/v1/topics/{d}")[1]["role"] != "standalone" and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.admin("GET", f"/v1/topics/{d}")[1]["role"], "standalone")

    def test_create_as_child(self):
        p = self.create()
        name = f"cc{uuid.uuid4().hex[:8]}"
        body = json.dumps({"name": name, "parent": p, "fanout_delay_ms": 0}).encode()
        status, _, data = self.request("POST", "/v1/topics", body, ("admin", PASSWORD), API)
        rec = json.loads(data)
        self.assertEqual((status, rec["name"], rec["role"], rec["parent"]), (201, name, "child", p))
        self.produce(p, b"copied")
        status, m = self.consume(name, "?wait=8s")
        self.assertEqual((status, m["payload"]), (200, "copied"))
        for body, want in (({"name": "x" + name, "fanout_delay_ms": 5}, 400),
                           ({"name": "y" + name, "parent": "nosuch"}, 404),
                           ({"name": "z" + name, "parent": name}, 409)):
            status, _, _ = self.request("POST", "/v1/topics", json.dumps(body).encode(),
                                        ("admin", PASSWORD), API)
            self.assertEqual(status, want, body)

    def test_link_refusals(self):
        p = self.create()
        c = self.create()
        short = self.create(retention_ms=3600 * 1000)  # the least there is: no room for a delay
        self.assertEqual(self.link(p, c)[0], 200)
        for parent, child, delay, want in ((p, p, None, 400), (p, c, None, 409), (c, p, None, 409),
                                           (p, "nosuch", None, 404), (short, p, 1000, 400),
                                           (p, self.create(), 366 * 86400 * 1000, 400)):
            status, body = self.link(parent, child, delay)
            self.assertEqual(status, want, (parent, child, body))
        other = self.create()
        status, body = self.link(other, c)
        self.assertEqual(status, 409)
        self.assertIn("another parent", body["error"])
        status, _, data = self.request("POST", f"/v1/topics/{p}/children", b'{"delay_ms":1}',
                                       ("admin", PASSWORD), API)
        self.assertEqual(status, 400)


class IdentityCap(Base):
    ARGS = ("--http-max-consumes-per-user=2",)

    def test_concurrent_consumes_per_user(self):
        name = f"cap{uuid.uuid4().hex[:8]}"
        status, _, _ = self.request("POST", "/v1/topics", json.dumps({"name": name}).encode(),
                                    ("admin", PASSWORD), API)
        self.assertEqual(status, 201)
        out = []

        def poll():
            # The probe below may hold a slot for a moment: a poller refused
            # then asks again.
            for _ in range(100):
                # A client timeout well past the long poll's (ASan builds
                # answer it late).
                status = self.request("GET", f"/v1/topics/{name}/consume?wait=6s", None,
                                      ("admin", PASSWORD), timeout=30)[0]
                if status != 429:
                    break
                time.sleep(0.05)
            out.append(status)

        threads = [threading.Thread(target=poll) for _ in range(2)]
        for th in threads:
            th.start()
        # Once both are parked, a third is refused (asked again until then:
        # a refused or empty consume holds nothing). They park within
        # milliseconds, and stay 6 s: the test waits for their end.
        deadline = time.monotonic() + 5
        while True:
            status, headers, body = self.request("GET", f"/v1/topics/{name}/consume", None,
                                                 ("admin", PASSWORD))
            if status == 429 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 429)
        self.assertEqual(headers["Retry-After"], "1")
        self.assertEqual(json.loads(body)["error"], "too many concurrent consumes for this user")
        # A batch of 5 counts as the cap, so it is refused too.
        self.assertEqual(self.request("GET", f"/v1/topics/{name}/consume?max=5", None,
                                      ("admin", PASSWORD), API)[0], 429)
        for th in threads:
            th.join(20)
        self.assertEqual(out, [204, 204])
        self.assertEqual(self.request("GET", f"/v1/topics/{name}/consume", None,
                                      ("admin", PASSWORD))[0], 204)


class RestartKeepsSettled(Base):
    def test_links_survive_restart(self):
        names = [f"l{uuid.uuid4().hex[:8]}" for _ in range(2)]
        for n in names:
            self.assertEqual(self.request("POST", "/v1/topics", json.dumps({"name": n}).encode(),
                                          ("admin", PASSWORD), API)[0], 201)
        body = json.dumps({"child": names[1]}).encode()
        self.assertEqual(self.request("POST", f"/v1/topics/{names[0]}/children", body,
                                      ("admin", PASSWORD), API)[0], 200)
        self.assertEqual(self.d.stop(), 0)
        self.__class__.d = Daemon(os.path.join(self.dir, "data"), env=dict(os.environ))
        self.d.wait_for("metastore ready")
        self.__class__.port = self.d.http_port
        self.assertEqual(self.request("POST", f"/v1/topics/{names[0]}/produce", b"kept",
                                      ("admin", PASSWORD), API)[0], 202)
        status, _, data = self.request("GET", f"/v1/topics/{names[1]}/consume?wait=8s", None,
                                       ("admin", PASSWORD))
        self.assertEqual((status, json.loads(data)["payload"]), (200, "kept"))

    def test_acked_stay_acked(self):
        name = f"rs{uuid.uuid4().hex[:8]}"
        status, _, _ = self.request("POST", "/v1/topics",
                                    json.dumps({"name": name, "partitions": 1}).encode(),
                                    ("admin", PASSWORD), API)
        self.assertEqual(status, 201)
        for i in range(3):
            self.assertEqual(self.request("POST", f"/v1/topics/{name}/produce", b"r%d" % i,
                                          ("admin", PASSWORD), API)[0], 202)
        handles = []
        for _ in range(2):
            status, _, data = self.request("GET", f"/v1/topics/{name}/consume?wait=2s", None,
                                           ("admin", PASSWORD))
            m = json.loads(data)
            handles.append(m["receipt_handle"])
            self.assertEqual(self.request(
                "POST", f"/v1/topics/{name}/ack?receipt_handle={m['receipt_handle']}", None,
                ("admin", PASSWORD), API)[0], 204)
        self.assertEqual(self.d.stop(), 0)
        self.__class__.d = Daemon(os.path.join(self.dir, "data"), env=dict(os.environ))
        self.d.wait_for("metastore ready")
        self.__class__.port = self.d.http_port
        status, _, data = self.request("GET", f"/v1/topics/{name}/consume?wait=5s", None,
                                       ("admin", PASSWORD))
        self.assertEqual((status, json.loads(data)["payload"]), (200, "r2"))
        self.assertEqual(self.request("GET", f"/v1/topics/{name}/consume", None,
                                      ("admin", PASSWORD))[0], 204)


if __name__ == "__main__":
    test_v1.main()
