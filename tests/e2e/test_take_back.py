#!/usr/bin/env python3
"""End-to-end tests of a lone node's take-backs (src/api/catalog.c
take_back): when the engine fails to make a topic whose record the NSQ
gate just made, the record is taken back (a TOPIC_DELETE, then the purge
of what the creation left). The delete names the record's creation time,
so a topic deleted and made again under the name meanwhile is left alone.

The window comes from the catalog's TN_TEST hook (ternd-test):
TERN_TEST_CATALOG_TAKE_BACK_DELAY=PREFIX=MS starts the take-back MS ms
after its check that the record is still that creation's."""
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
from nsqwire import FRAME_ERROR, Conn

PASSWORD = "take-back-password"
API = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode(),
       "X-Tern-Client": "tests", "Content-Type": "application/json"}
DELAY_MS = 8000  # far more than the steps in the window take


class TakeBack(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-take-back-")
        env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD,
                   TERN_TEST_CATALOG_TAKE_BACK_DELAY=f"again={DELAY_MS}")
        # A log file, so that a wait for a line it never has ends at its deadline.
        self.d = Daemon(os.path.join(self.dir, "data"), env=env,
                        log_path=os.path.join(self.dir, "ternd.log"))
        self.d.wait_for("ready")
        self.d.wait_for("root user admin created")  # the metastore is up

    def tearDown(self):
        rc = self.d.stop()
        log = self.d.log()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(rc, 0, log)

    def request(self, method, path, body=None, headers=API):
        c = http.client.HTTPConnection("127.0.0.1", self.d.http_port, timeout=10)
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else None
        finally:
            c.close()

    def test_a_topic_made_again_meanwhile_is_left_alone(self):
        # A PUB to a new topic whose directory the engine cannot make (a
        # file has its name): E_PUB_FAILED, and the take-back of the
        # record the gate made for it starts late. Meanwhile the name is
        # deleted and made again through /v1, and published to: the late
        # take-back must not delete that topic (was: its plain
        # TOPIC_DELETE removed the new record, and the purge its messages).
        name = "again1"
        blocker = os.path.join(self.dir, "data", "topics", name)
        open(blocker, "w").close()
        c = Conn(self.d.tcp_port)
        c.identify()
        kind, data = c.pub(name, b"x")
        c.close()
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(b"E_PUB_FAILED"), data)
        self.d.wait_for(f"topic {name}: taking back its record in")
        self.assertEqual(self.request("GET", f"/v1/topics/{name}")[0], 200)
        os.unlink(blocker)
        status, body = self.request("DELETE", f"/v1/topics/{name}")
        self.assertEqual(status, 204, body)
        status, body = self.request("POST", "/v1/topics",
                                    json.dumps({"name": name, "partitions": 1}).encode())
        self.assertEqual(status, 201, body)
        for i in range(3):
            status, body = self.request("POST", f"/v1/topics/{name}/produce", b"m%d" % i,
                                        {**API, "Content-Type": "application/octet-stream"})
            self.assertEqual(status, 202, body)
        self.assertNotIn(f"topic {name}: its record is taken back", self.d.log(),
                         "the take-back came before the steps ended: raise DELAY_MS")
        self.d.wait_for(f"topic {name}: the record of its failed creation was deleted and made "
                        "again meanwhile: nothing to take back, the topic made again stays")
        status, t = self.request("GET", f"/v1/topics/{name}")
        self.assertEqual(status, 200, (t, self.d.log()))
        self.assertEqual(sum(p["next_offset"] for p in t["partition_stats"]), 3)
        status, m = self.request("GET", f"/v1/topics/{name}/consume?wait=5s")
        self.assertEqual(status, 200, m)
        self.assertEqual(m["payload"], "m0")
        self.assertNotIn("taking back the record of its failed creation failed", self.d.log())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])
