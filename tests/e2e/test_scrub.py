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
And a factor-1 partition whose active segment the scrub finds damaged in
its last synced batch: the damage record is written before the scrub
answers, a restart after SIGKILL isolates the partition with nothing cut,
and the operator's two documented ways back (move the segment aside, or
remove the `damage` file) serve the records before the damage.
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
        # nsqd's health signal says so too (/ping 500, /stats "health").
        nok = (f"NOK - partition {TOPIC}/0: data failed its checksum or structure check; "
               "it refuses writes until restart")
        self.assertEqual(self.request("GET", "/ping"), (500, nok.encode()))
        self.assertEqual(self.json("GET", "/stats?format=json")["health"], nok)
        # ... and so does readiness: a load balancer stops routing here
        # until an operator restarts the node (was: 200 {"status":"ready"}).
        why = nok[len("NOK - "):]
        self.assertEqual(self.request("GET", "/readyz", credentials=False),
                         (503, ('{"error":"%s"}\n' % why).encode()))
        self.assertEqual(self.metrics()["tern_ready"], 0)

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

    def replay(self, offset):
        """A replay read of partition 0 at offset: (status, payload or None)."""
        status, data = self.request("GET", f"/v1/topics/{TOPIC}/consume?partition=0&offset={offset}")
        return status, json.loads(data)["payload"] if status == 200 else None

    def next_offset(self):
        return self.json("GET", f"/v1/topics/{TOPIC}")["partition_stats"][0]["next_offset"]

    def test_active_segment_factor1(self):
        """Damage the scrub finds in the active segment of a factor-1
        partition, in its last synced batch (nothing synced after it, so
        recovery alone would take it for a torn write): a restart after a
        SIGKILL isolates the partition (the damage record) instead of
        cutting the acknowledged records from the bad one on; the operator's
        documented steps bring it back: moving the segment aside (the record
        then names no segment and is dropped), or removing the `damage` file
        to cut at the bad record's batch and keep the records before it."""
        self.start("--scrub-interval=0")
        self.json("POST", "/v1/topics", json.dumps({"name": TOPIC, "partitions": 1}), want=201)
        body = "x" * 400
        payloads = []
        for b, n in ((0, 100), (1, 100), (2, 20)):
            batch = [{"payload": f"{b}-{i}-{body}", "partition": 0} for i in range(n)]
            payloads += [m["payload"] for m in batch]
            self.json("POST", f"/v1/topics/{TOPIC}/produce/batch", json.dumps(batch), want=202)
        self.assertEqual(self.next_offset(), 220)
        pdir = os.path.join(self.data, "topics", TOPIC, "0")
        logs = sorted(glob.glob(os.path.join(pdir, "*.log")))
        self.assertGreaterEqual(len(logs), 2, logs)  # a sealed segment before the active one
        active = logs[-1]
        base = int(os.path.basename(active)[:-4])
        self.assertTrue(0 < base < 200, logs)
        bad = 205  # in the last batch (200..219): nothing was synced after it
        pos = self.flip(active, bad - base)
        size = os.path.getsize(active)

        rep = self.json("POST", "/v1/storage/scrub?wait=true")
        self.assertEqual((rep["status"], rep["errors_total"]), ("errors", 1), rep)
        err = rep["errors"][0]
        self.assertEqual((err["segment"], err["position"], err["offset"]), (base, pos, bad))
        self.assertTrue(err["isolated"])
        self.d.wait_for("in the active segment (found by scrub)")
        refused = self.produce(0, "refused")
        self.assertEqual(refused[0], 500, refused)
        self.assertIn(b"partition isolated", refused[1])
        # Recorded before the scrub answered.
        self.assertTrue(os.path.exists(os.path.join(pdir, "damage")))
        self.d.kill()
        self.d = None

        # Restarted: isolated, and nothing cut.
        self.start("--scrub-interval=0")
        status, data = self.produce(0, "after restart")
        self.assertEqual(status, 500, (data, self.next_offset()))
        self.assertEqual((status, data), refused)
        # (Recovery's lines come before "ready".)
        line = [l for l in self.d.log().splitlines() if "found damaged before the restart" in l]
        self.assertTrue(line, self.d.log())
        self.assertIn(f"partition {TOPIC}/0: the active segment {base} ", line[0])
        self.assertIn("not cut: the partition's damage record names the segment", line[0])
        self.assertNotIn("truncating torn tail", self.d.log())
        self.assertEqual(os.path.getsize(active), size)
        self.stop()

        # The operator moves the damaged segment aside (in a copy of the
        # data directory): the record names no segment any more and goes;
        # the sealed segment's records are served.
        data1 = self.data
        self.data = os.path.join(self.dir, "moved")
        shutil.copytree(data1, self.data)
        moved_pdir = os.path.join(self.data, "topics", TOPIC, "0")
        name = os.path.basename(active)
        os.rename(os.path.join(moved_pdir, name), os.path.join(self.dir, name))
        self.start("--scrub-interval=0")
        self.assertIn("matches no segment any more", self.d.log())
        self.assertFalse(os.path.exists(os.path.join(moved_pdir, "damage")))
        for off in (0, base - 1):
            self.assertEqual(self.replay(off), (200, payloads[off]))
        self.assertEqual(self.next_offset(), base)
        self.stop()
        # ... and a later start does not isolate it again.
        self.start("--scrub-interval=0")
        self.assertEqual(self.replay(base - 1), (200, payloads[base - 1]))
        self.stop()

        # Or the operator removes the damage record: recovery cuts the
        # active segment at the start of the bad record's batch (200), every
        # record before it is served.
        self.data = data1
        os.unlink(os.path.join(pdir, "damage"))
        self.start("--scrub-interval=0")
        self.assertIn("truncating torn tail", self.d.log())
        for off in (0, base - 1, base, 199):
            self.assertEqual(self.replay(off), (200, payloads[off]))
        self.assertEqual(self.next_offset(), 200)
        status, data = self.produce(0, "served")
        self.assertEqual(status, 202, data)


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
