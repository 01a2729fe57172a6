#!/usr/bin/env python3
"""End-to-end tests of how every door answers a replicated partition's
refusals (cluster/replerr.h, docs/replication.md "What an operator sees and
does"): too few in-sync replicas, a fenced (stale) leader epoch, a new
leader not serving yet. NSQ PUB/MPUB/DPUB get `E_PUB_FAILED <words>` and
the connection stays open; /pub, /mpub, /v1 produce and batch produce get
503 with `Retry-After: 1` and {"error": "<words>"}; a /v1 ack (single and
batch) gets 503 with the same words.

The refusals come from the router's TN_TEST hook (ternd-test, the daemon
built on the test libraries): TERN_TEST_REFUSE / TERN_TEST_REFUSE_SETTLE
name topic prefixes and the error the router answers for them, in the
place where a replicated partition's refusal comes from. Topics outside
those prefixes work as ever on the same connections."""
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
import nsqwire
from daemon import Daemon

PASSWORD = "repl-doors-password"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
API = {**ADMIN, "X-Tern-Client": "tests", "Content-Type": "application/json"}
FEW = "not enough in-sync replicas"
NOTSERVING = "partition leader not serving yet"


class ReplDoors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-repl-doors-")
        env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD,
                   TERN_TEST_REFUSE="few=FEWREPLICAS,fen=FENCED,ns=NOTSERVING",
                   TERN_TEST_REFUSE_SETTLE="sfew=FEWREPLICAS")
        cls.d = Daemon(os.path.join(cls.dir, "data"), env=env)
        cls.d.wait_for("ready")
        cls.d.wait_for("root user admin created")
        cls.port = cls.d.http_port

    @classmethod
    def tearDownClass(cls):
        if cls.d.proc.poll() is None:
            cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def call(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()

    def refused(self, status, body, headers, words=FEW):
        """A retryable 503 with the refusal's words; its JSON body."""
        self.assertEqual(status, 503, body)
        self.assertEqual(headers.get("retry-after"), "1")
        err = json.loads(body)
        self.assertEqual(err["error"], words)
        return err

    def create(self, name):
        status, body, _ = self.call("POST", "/v1/topics", json.dumps({"name": name}).encode(), API)
        self.assertEqual(status, 201, body)

    def test_nsq_tcp_keeps_the_connection(self):
        c = nsqwire.Conn(self.d.tcp_port)
        try:
            c.identify()
            for _ in range(2):  # still open for the next command
                kind, data = c.pub("few.tcp", b"refused")
                self.assertEqual(kind, nsqwire.FRAME_ERROR)
                self.assertEqual(data, b"E_PUB_FAILED " + FEW.encode())
            kind, data = c.mpub("few.tcp", [b"a", b"b"])
            self.assertEqual((kind, data), (nsqwire.FRAME_ERROR, b"E_PUB_FAILED " + FEW.encode()))
            kind, data = c.dpub("few.tcp", 1000, b"later")
            self.assertEqual((kind, data), (nsqwire.FRAME_ERROR, b"E_PUB_FAILED " + FEW.encode()))
            kind, data = c.pub("ns.tcp", b"refused")
            self.assertEqual(data, b"E_PUB_FAILED " + NOTSERVING.encode())
            kind, data = c.pub("fen.tcp", b"refused")
            self.assertTrue(data.startswith(b"E_PUB_FAILED "), data)
            self.assertIn(b"stale leader epoch", data)
            # The same connection publishes to a topic that takes writes.
            self.assertEqual(c.pub("plain.tcp", b"taken"), (nsqwire.FRAME_RESPONSE, b"OK"))
        finally:
            c.close()

    def test_nsqd_http_pub_and_mpub(self):
        err = self.refused(*self.call("POST", "/pub?topic=few.http", b"refused"))
        self.assertEqual(err["message"], "E_PUB_FAILED " + FEW)
        err = self.refused(*self.call("POST", "/mpub?topic=few.http", b"a\nb\n"))
        self.assertEqual(err["message"], "E_PUB_FAILED " + FEW)
        self.refused(*self.call("POST", "/pub?topic=ns.http", b"refused"), words=NOTSERVING)
        self.assertEqual(self.call("POST", "/pub?topic=plain.http", b"taken")[0], 200)
        # /stats counts a topic's under-replicated and offline partitions:
        # none for a factor-1 topic.
        status, body, _ = self.call("GET", "/stats?format=json&topic=plain.http")
        topic = json.loads(body)["topics"][0]
        self.assertEqual((topic["under_replicated_partitions"], topic["offline_partitions"]),
                         (0, 0))

    def test_v1_produce_and_batch(self):
        self.create("few-v1")
        self.refused(*self.call("POST", "/v1/topics/few-v1/produce", b'{"a":1}', API))
        batch = json.dumps([{"payload": {"n": 1}}, {"payload": {"n": 2}}])
        self.refused(*self.call("POST", "/v1/topics/few-v1/produce/batch", batch.encode(), API))
        self.create("ns-v1")
        self.refused(*self.call("POST", "/v1/topics/ns-v1/produce", b'{"a":1}', API),
                     words=NOTSERVING)
        self.create("fen-v1")
        status, body, headers = self.call("POST", "/v1/topics/fen-v1/produce", b'{"a":1}', API)
        self.assertEqual((status, headers.get("retry-after")), (503, "1"), body)
        self.assertIn("stale leader epoch", json.loads(body)["error"])

    def test_v1_ack_refused(self):
        self.create("sfew-ack")
        for n in range(2):
            status, body, _ = self.call("POST", "/v1/topics/sfew-ack/produce",
                                        json.dumps({"n": n}).encode(), API)
            self.assertEqual(status, 202, body)
        handles = []
        for _ in range(2):
            status, body, _ = self.call("GET", "/v1/topics/sfew-ack/consume?wait=5s", None, ADMIN)
            self.assertEqual(status, 200, body)
            handles.append(json.loads(body)["receipt_handle"])
        self.refused(*self.call("POST", f"/v1/topics/sfew-ack/ack?receipt_handle={handles[0]}",
                                None, API))
        status, body, _ = self.call("POST", "/v1/topics/sfew-ack/ack/batch",
                                    json.dumps(handles).encode(), API)
        self.assertEqual(status, 200, body)
        results = json.loads(body)["results"]
        self.assertEqual([(r["status"], r["error"]) for r in results], [(503, FEW)] * 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True, help="ternd-test: ternd on the TN_TEST libraries")
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
