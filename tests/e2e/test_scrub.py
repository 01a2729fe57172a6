#!/usr/bin/env python3
"""Scrub against the real ternd: a topic of two partitions filled until
64 KiB segments seal, one byte of a sealed segment's record flipped on
disk, then

- POST /v1/storage/scrub?wait=true reports it (segment, file, byte
  position), GET /v1/storage/scrub answers the same report, /metrics counts
  it, the log has the error line with the file and position, partition 0
  is isolated (produce refused) and partition 1 keeps serving;
- after a restart (recovery trusts the sealed segment's sidecar, so the
  partition opens), the background scrub after its quiet period finds the
  damage again and isolates the partition the same way;
- after another restart, `ternctl scrub --wait` finds it and exits 1
  with the error in its table; `ternctl scrub --last` shows a report,
  --json the server's;
- after a restart with the sidecar removed, recovery scans the segment and
  isolates the partition itself: the produce answer is the one scrub's
  isolation gave.
One daemon at a time, a few seconds in all."""
import argparse
import base64
import glob
import http.client
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import daemon as daemon_mod
from daemon import Daemon

PASSWORD = "root-pw-for-scrub"
TOPIC = "scrubbed"
HDR = 44  # record header bytes (docs/storage-format.md)
TERNCTL = None
ISOLATED = 'tern_isolated_logs{log="partition"}'


def auth():
    return "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()


class ScrubTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-scrub-")
        self.data = os.path.join(self.dir, "data")
        self.d = None

    def tearDown(self):
        if self.d is not None:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *args):
        env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD)
        self.d = Daemon(self.data, "--segment-bytes=64KiB", *args, env=env)
        self.d.wait_for("ready")
        self.port = self.d.http_port
        if not os.path.exists(os.path.join(self.dir, "seeded")):
            self.d.wait_for("root user admin created")
            open(os.path.join(self.dir, "seeded"), "w").close()

    def stop(self):
        rc = self.d.stop()
        log = self.d.log()
        self.d = None
        self.assertEqual(rc, 0, f"ternd exited {rc}:\n{log}")
        return log

    def request(self, method, path, body=None, headers=None, credentials=True):
        h = {"Content-Type": "application/json"}
        if credentials:
            h["Authorization"] = auth()
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, want=200):
        status, data = self.request(method, path, body)
        self.assertEqual(status, want, data)
        return json.loads(data)

    def ternctl(self, *args):
        env = dict(os.environ, TERN_URL=f"http://127.0.0.1:{self.port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
        p = subprocess.run([TERNCTL, *args], env=env, capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout, p.stderr

    def metrics(self):
        status, data = self.request("GET", "/metrics")
        self.assertEqual(status, 200, data)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def produce(self, partition, payload):
        return self.request("POST", f"/v1/topics/{TOPIC}/produce?partition={partition}",
                            payload.encode(), {"Content-Type": "application/octet-stream"})

    def fill(self):
        self.json("POST", "/v1/topics", json.dumps({"name": TOPIC, "partitions": 2}), want=201)
        body = "x" * 400
        for p, batches in ((0, 4), (1, 2)):
            for b in range(batches):
                batch = [{"payload": f"{p}-{b}-{i}-{body}", "partition": p} for i in range(200)]
                self.json("POST", f"/v1/topics/{TOPIC}/produce/batch", json.dumps(batch),
                          want=202)

    def sealed(self, partition):
        """The partition's sealed segments (those with a sidecar), oldest first."""
        d = os.path.join(self.data, "topics", TOPIC, str(partition))
        logs = sorted(glob.glob(os.path.join(d, "*.log")))
        return [p for p in logs if os.path.exists(p[:-4] + ".idx")]

    def flip(self, path, record):
        """Flip a byte in the body of the record-th record of a segment;
        returns the record's byte position."""
        with open(path, "r+b") as f:
            data = f.read()
            pos = 0
            for _ in range(record):
                body_len, = struct.unpack_from("<I", data, pos + 32)
                key_len, = struct.unpack_from("<H", data, pos + 40)
                pos += HDR + key_len + body_len
            key_len, = struct.unpack_from("<H", data, pos + 40)
            at = pos + HDR + key_len + 10
            f.seek(at)
            f.write(bytes([data[at] ^ 0x20]))
        return pos

    def test_flipped_byte(self):
        self.start("--scrub-interval=0")
        self.fill()
        segs = self.sealed(0)
        self.assertGreaterEqual(len(segs), 2, os.listdir(os.path.dirname(segs[0])))
        self.assertGreaterEqual(len(self.sealed(1)), 1)
        victim = segs[1]
        base = int(os.path.basename(victim)[:-4])
        pos = self.flip(victim, 5)

        # Nothing ran yet; admins only.
        rep = self.json("GET", "/v1/storage/scrub")
        self.assertEqual((rep["id"], rep["status"]), (0, "none"))
        self.assertIsNone(rep["next_background_ms"])
        status, _ = self.request("POST", "/v1/storage/scrub", credentials=False)
        self.assertEqual(status, 401)
        status, data = self.request("POST", "/v1/storage/scrub?wait=maybe")
        self.assertEqual(status, 400, data)

        rep = self.json("POST", "/v1/storage/scrub?wait=true")
        self.assertEqual(rep["id"], 1)
        self.assertEqual(rep["status"], "errors")
        self.assertEqual(rep["trigger"], "request")
        self.assertEqual(rep["errors_total"], 1)
        self.assertEqual(rep["partitions"], 2)
        self.assertGreaterEqual(rep["segments"], 3)
        self.assertGreater(rep["records_checked"], 0)
        self.assertGreater(rep["bytes"], 0)
        err = rep["errors"][0]
        self.assertEqual(err["topic"], TOPIC)
        self.assertEqual(err["partition"], 0)
        self.assertEqual(err["segment"], base)
        self.assertEqual(os.path.realpath(err["file"]), os.path.realpath(victim))
        self.assertEqual(err["position"], pos)
        self.assertEqual(err["offset"], base + 5)
        self.assertTrue(err["isolated"])
        self.assertIn("CRC mismatch", err["error"])
        self.assertEqual(self.json("GET", "/v1/storage/scrub"), dict(rep, next_background_ms=None))

        # The log line names the file and the byte position.
        line = self.d.wait_for("scrub: partition %s/0" % TOPIC)
        self.assertIn(os.path.basename(victim), line)
        self.assertIn(f"at byte {pos}", line)
        self.assertIn("error", line)

        m = self.metrics()
        self.assertEqual(m["tern_scrub_runs_total"], 1)
        self.assertEqual(m["tern_scrub_errors_total"], 1)
        self.assertEqual(m["tern_scrub_records_total"], rep["records_checked"])
        self.assertEqual(m["tern_scrub_bytes_total"], rep["bytes"])
        self.assertEqual(m["tern_scrub_last_success_timestamp_seconds"], 0)
        self.assertEqual(m["tern_scrub_running"], 0)
        # The isolated-logs gauge (branch deploy adds it to /metrics) counts
        # scrub's isolation as any other; checked wherever it is served.
        if ISOLATED in m:
            self.assertEqual(m[ISOLATED], 1)

        # Partition 0 is isolated, partition 1 serves.
        refused = self.produce(0, "after")
        self.assertEqual(refused[0], 500, refused)
        self.assertIn(b"partition isolated", refused[1])
        status, data = self.produce(1, "after")
        self.assertEqual(status, 202, data)

        # Without wait: 202 with the new run's id; the second run skips the
        # isolated partition's segments and finds nothing new.
        started = self.json("POST", "/v1/storage/scrub", want=202)
        self.assertEqual(started["id"], 2)
        self.assertEqual(started["status"], "running")
        for _ in range(600):
            rep2 = self.json("GET", "/v1/storage/scrub")
            if rep2["id"] == 2 and rep2["status"] != "running":
                break
            time.sleep(0.05)
        self.assertEqual((rep2["id"], rep2["status"], rep2["errors_total"]), (2, "ok", 0))
        self.assertGreater(rep2["segments_skipped"], 0)
        self.assertGreater(self.metrics()["tern_scrub_last_success_timestamp_seconds"], 0)

        # ternctl: a clean run exits 0; --last of it too; a bad flag is usage.
        rc, out, err = self.ternctl("scrub", "--wait")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("scrub run 3 (request): ok", out)
        self.assertIn("errors:     0", out)
        rc, out, err = self.ternctl("--json", "scrub", "--last")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(json.loads(out)["id"], 3)
        rc, out, err = self.ternctl("scrub", "--bogus")
        self.assertEqual(rc, 2, out + err)
        self.stop()

        # Restarted: recovery trusts the sidecar, the partition opens;
        # ternctl's scrub finds the damage and exits 1.
        self.start("--scrub-interval=0")
        self.assertEqual(self.produce(0, "served")[0], 202)
        rc, out, err = self.ternctl("scrub", "--wait")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("scrub run 1 (request): errors", out)
        row = [l for l in out.splitlines() if l.startswith(TOPIC)]
        self.assertEqual(len(row), 1, out)
        self.assertEqual(row[0].split()[:7],
                         [TOPIC, "0", str(base), victim, str(pos), str(base + 5), "yes"])
        self.assertIn("CRC mismatch", row[0])
        rc, out, err = self.ternctl("--json", "scrub", "--last")
        self.assertEqual(rc, 1, out + err)
        self.assertEqual(json.loads(out)["errors"][0]["position"], pos)
        self.assertEqual(self.produce(0, "again"), refused)
        self.stop()

        # Restarted: recovery trusts the sidecar, the partition opens; the
        # background scrub after its quiet period isolates it again.
        self.start("--scrub-quiet-period=0s")
        self.assertIn("scrub: sealed segments every 3600 s", self.d.log())
        self.d.wait_for("scrub: run 1 finished")
        rep = self.json("GET", "/v1/storage/scrub")
        self.assertEqual((rep["id"], rep["trigger"], rep["status"]), (1, "background", "errors"))
        self.assertEqual(rep["errors"][0]["position"], pos)
        self.assertIsNotNone(rep["next_background_ms"])
        self.assertEqual(self.produce(0, "again"), refused)
        self.assertEqual(self.produce(1, "again")[0], 202)
        self.stop()

        # With the sidecar gone, recovery scans the segment and isolates the
        # partition itself: clients see what they saw after scrub's.
        os.unlink(victim[:-4] + ".idx")
        self.start("--scrub-interval=0")
        self.assertIn("in a sealed segment", self.d.log())
        self.assertEqual(self.produce(0, "again"), refused)
        m = self.metrics()
        if ISOLATED in m:
            self.assertEqual(m[ISOLATED], 1)
        self.assertEqual(self.produce(1, "again")[0], 202)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--ternctl", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = args.ternd
    global TERNCTL
    TERNCTL = args.ternctl
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
