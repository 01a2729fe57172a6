#!/usr/bin/env python3
"""End-to-end tests of /v1 consumes against the real ternd: long polls and
their wake-up on produce, payload rendering, receipt handles with ack,
extend and nack (204, 410 stale, 503 at the acked-ahead cap), lease expiry
redelivery, batch consume, replay reads, pinned partitions, named
channels, the per-identity cap, NSQ and /v1 sharing one channel both ways,
a deleted topic answering its parked consumes, and settled state kept
across a restart."""
import base64
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


class Consume(Base):
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
        status, _, data = self.request("GET", f"/v1/topics/{topic}/consume{query}", None,
                                       ("admin", PASSWORD), headers)
        return status, json.loads(data) if data else None

    def ack(self, topic, handle, query=""):
        status, _, data = self.request(
            "POST", f"/v1/topics/{topic}/ack?receipt_handle={handle}{query}", None,
            ("admin", PASSWORD), API)
        return status, json.loads(data) if data else None

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

    def test_lease_expiry_extend_and_nack(self):
        t = self.create(visibility_timeout_ms=1000)
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
        # Extended twice past its first deadline: still ours.
        for _ in range(2):
            time.sleep(0.6)
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


class IdentityCap(Base):
    ARGS = ("--http-max-consumes-per-user=2",)

    def test_concurrent_consumes_per_user(self):
        name = f"cap{uuid.uuid4().hex[:8]}"
        status, _, _ = self.request("POST", "/v1/topics", json.dumps({"name": name}).encode(),
                                    ("admin", PASSWORD), API)
        self.assertEqual(status, 201)
        out = []

        def poll():
            out.append(self.request("GET", f"/v1/topics/{name}/consume?wait=3s", None,
                                    ("admin", PASSWORD))[0])

        threads = [threading.Thread(target=poll) for _ in range(2)]
        for th in threads:
            th.start()
        time.sleep(0.6)
        status, headers, body = self.request("GET", f"/v1/topics/{name}/consume", None,
                                             ("admin", PASSWORD))
        self.assertEqual(status, 429)
        self.assertEqual(json.loads(body)["error"], "too many concurrent consumes for this user")
        # A batch of 5 counts as the cap, so it is refused too.
        self.assertEqual(self.request("GET", f"/v1/topics/{name}/consume?max=5", None,
                                      ("admin", PASSWORD), API)[0], 429)
        for th in threads:
            th.join(10)
        self.assertEqual(out, [204, 204])
        self.assertEqual(self.request("GET", f"/v1/topics/{name}/consume", None,
                                      ("admin", PASSWORD))[0], 204)


class RestartKeepsSettled(Base):
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
