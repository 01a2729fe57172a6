#!/usr/bin/env python3
"""Repeated graceful stops under load: one ternd on one data directory is
started and stopped with SIGTERM CYCLES times (50 by default, or
$TERN_RESTART_CYCLES), each stop while writers are creating, publishing to
and deleting topics, so metastore proposals and libraft disk writes are in
flight when it comes. Every stop must exit 0 having closed the metastore
(libraft included) and the loop cleanly, and after every restart each
topic whose creation and publish were acknowledged is there with its
message, and each acknowledged deletion stays deleted.

This is the test for the crash ternd used to have when it closed libraft
0.15 at shutdown (see meta.c: settled and tn_meta_close), and for the
engine freeing a topic whose deletion was still closing its logs."""
import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import unittest

from daemon import Daemon
import daemon as daemon_mod

CYCLES = int(os.environ.get("TERN_RESTART_CYCLES", "50"))
WRITERS = 4


class Writer(threading.Thread):
    """Creates topics r<cycle>_<k>_<i>, publishes one message to each and
    deletes every third one again, recording what was acknowledged."""

    def __init__(self, port, cycle, k, stop):
        super().__init__(daemon=True)
        self.port, self.cycle, self.k, self.stop = port, cycle, k, stop
        self.created = set()  # creation and publish acknowledged
        self.deleted = set()  # deletion acknowledged

    def call(self, conn, path, body=None):
        conn.request("POST", path, body=body)
        r = conn.getresponse()
        r.read()
        return r.status

    def run(self):
        i = 0
        conn = None
        while not self.stop.is_set():
            name = f"r{self.cycle}_{self.k}_{i}"
            i += 1
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if self.call(conn, f"/topic/create?topic={name}") != 200:
                    continue
                if self.call(conn, f"/pub?topic={name}", body=name.encode()) != 200:
                    continue
                if i % 3 == 0:
                    if self.call(conn, f"/topic/delete?topic={name}") == 200:
                        self.deleted.add(name)
                    continue
                self.created.add(name)
            except (OSError, http.client.HTTPException):
                conn = None  # the daemon is going away
                time.sleep(0.01)


def topics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/stats?format=json")
    r = c.getresponse()
    body = r.read()
    assert r.status == 200, body
    return {t["topic_name"]: t for t in json.loads(body)["topics"]}


class RestartTest(unittest.TestCase):
    def setUp(self):
        self.data = tempfile.mkdtemp(prefix="tern-restart-")

    def tearDown(self):
        shutil.rmtree(self.data, ignore_errors=True)

    def test_stop_under_load_repeatedly(self):
        created, deleted = set(), set()
        rnd = random.Random(14)
        for cycle in range(CYCLES + 1):
            d = Daemon(self.data)
            try:
                d.wait_for("metastore ready")
                # Everything acknowledged so far is there.
                have = topics(d.http_port)
                for name in created:
                    self.assertIn(name, have, f"cycle {cycle}: acknowledged topic lost")
                    self.assertEqual(have[name]["depth"], 1,
                                     f"cycle {cycle}: acknowledged message of {name} lost")
                for name in deleted:
                    self.assertNotIn(name, have, f"cycle {cycle}: deleted topic back")
                stop = threading.Event()
                writers = []
                if cycle < CYCLES:  # the last start only checks
                    writers = [Writer(d.http_port, cycle, k, stop) for k in range(WRITERS)]
                for w in writers:
                    w.start()
                time.sleep(rnd.uniform(0.05, 0.5))
            except BaseException:
                d.kill()
                d.stop()
                raise
            rc = d.stop(timeout=60)
            stop.set()
            for w in writers:
                w.join()
                created |= w.created
                deleted |= w.deleted
            log = d.log()
            self.assertEqual(rc, 0, f"cycle {cycle}: exit status {rc}\n{log[-4000:]}")
            self.assertIn("storage closed; exiting", log)
            self.assertNotIn("loop not closed cleanly", log)
            self.assertNotIn("closing while libraft still writes", log)
        self.assertGreater(len(created), CYCLES, "the writers got almost nothing acknowledged")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
