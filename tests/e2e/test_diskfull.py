#!/usr/bin/env python3
"""End-to-end tests of a full data disk: ternd's data directory is on a
small ext4 file system (a 16 MiB image, loop-mounted), mounted by the
test and unmounted in a finally. Mounting needs root and a loop device:
without them the tests skip, saying why (CI runs as root). The
image has no blocks reserved for root (mkfs.ext4 -m 0), so ternd, running
as root here, meets a full disk where a ternd running as its own user would.

The disk watermark is set out of the way (disk-high-watermark 100,
disk-min-free-bytes 0, checked once a minute), so publishes meet the real
ENOSPC, as they do when another program fills the disk between two of
ternd's disk checks.
A ledger keeps every message answered OK; each must be there to the end."""
import argparse
import base64
import http.client
import json
import threading
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import daemon as daemon_mod
from daemon import Daemon
from nsqwire import FRAME_ERROR, FRAME_RESPONSE, Closed, Conn, Message

PASSWORD = "diskfull-admin-pw"
IMAGE_BYTES = 16 << 20
SPARE_BYTES = 2 << 20  # the file the test deletes to give space back
BODY = 4000
FLAGS = ("--segment-bytes=1MiB", "--disk-high-watermark=100", "--disk-low-watermark=99",
         "--disk-min-free-bytes=0", "--disk-check-interval=1m", "--metrics-address=127.0.0.1:0")


def mount_small_fs(mnt, image, size=IMAGE_BYTES):
    """Mounts a small ext4 file system on mnt (a loop-mounted image);
    returns None, or why it cannot. Not tmpfs: the tests are written for
    a disk's allocation (tmpfs frees and counts pages otherwise)."""
    if os.geteuid() != 0:
        return "mounting a small file system needs root"
    if not shutil.which("mkfs.ext4"):
        return "mkfs.ext4 (e2fsprogs) is not installed"
    with open(image, "wb") as f:
        f.truncate(size)
    for cmd in (["mkfs.ext4", "-q", "-F", "-m", "0", image],
                ["mount", "-o", "loop", image, mnt]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return f"{' '.join(cmd)} failed: {r.stderr.strip()}"
    return None


def fill_disk(mnt):
    """Takes every block still free on mnt with files of its own (filler*).
    ext4 frees the blocks of a cut file only once its journal commits:
    after each pass a sync, and another pass takes what that freed.
    The last blocks go to small files: growing the big one can need a
    block for its extent tree as well, which a small new file (a
    sidecar index) does not."""
    with open(os.path.join(mnt, "filler"), "wb", buffering=0) as f:
        for _ in range(3):
            try:
                while True:
                    f.write(b"\xee" * 4096)
            except OSError:
                pass
            os.sync()
    failed = 0
    for i in range(64):
        try:
            with open(os.path.join(mnt, f"filler.{i}"), "wb") as f:
                f.write(b"\xee" * 1024)
                f.flush()
                os.fsync(f.fileno())
            failed = 0
        except OSError:
            failed += 1
            if failed == 3:
                break
            os.sync()


def free_filler(mnt):
    for name in os.listdir(mnt):
        if name.startswith("filler"):
            os.unlink(os.path.join(mnt, name))


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


class DiskFull(unittest.TestCase):
    IMAGE = IMAGE_BYTES
    SPARE = SPARE_BYTES

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-diskfull-")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        why = mount_small_fs(self.mnt, os.path.join(self.dir, "image"), self.IMAGE)
        if why is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.skipTest(why)
        self.data = os.path.join(self.mnt, "data")
        self.spare = os.path.join(self.mnt, "spare")
        with open(self.spare, "wb") as f:
            f.write(b"\xff" * self.SPARE)
            os.fsync(f.fileno())
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.kill()
        subprocess.run(["umount", self.mnt], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self):
        d = Daemon(self.data, *FLAGS, log_path=os.path.join(self.dir, "ternd.log"))
        self.daemons.append(d)
        d.wait_for("ready")
        return d

    def http(self, d, path, body=None):
        req = urllib.request.Request(f"http://127.0.0.1:{d.http_port}{path}", data=body,
                                     method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def gauge(self, d, name):
        """The value /metrics (its own listener) gives the unlabelled name."""
        with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics",
                                    timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        self.fail(f"/metrics has no {name}")

    def paused(self, d, channel=None):
        """Whether /stats says channel of topic t (None: t) is paused."""
        status, body = self.http(d, "/stats?format=json&topic=t")
        self.assertEqual(status, 200, body)
        for t in json.loads(body)["topics"]:
            if channel is None:
                return t["paused"]
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return c["paused"]
        self.fail(f"/stats has no channel {channel}")

    def health(self, d):
        """/ping's answer, and the health /stats gives in JSON and text
        (nsqd's: 200 OK, or 500 with the same "NOK - <error>" as /stats).
        Four reads, one state: the JSON health is read before and after
        /ping and the text, and the reads are taken again while it
        changed in between (a channel resuming as the test waits for it)."""
        deadline = time.monotonic() + 30
        while True:
            before = self.json_health(d)
            ping = self.http(d, "/ping")
            status, text = self.http(d, "/stats")
            self.assertEqual(status, 200, text)
            health = self.json_health(d)
            if health == before:
                break
            self.assertLess(time.monotonic(), deadline, f"health never still: {before} {health}")
        self.assertIn(b"\nHealth: %s\n" % health.encode(), text)
        return ping, health

    def json_health(self, d):
        status, body = self.http(d, "/stats?format=json")
        self.assertEqual(status, 200, body)
        return json.loads(body)["health"]

    def assert_healthy(self, d):
        self.assertEqual(self.health(d), ((200, b"OK"), "OK"))

    def assert_unhealthy(self, d, error):
        """error: what must follow "NOK - " (its start when it ends with ...)."""
        (status, body), health = self.health(d)
        self.assertEqual((status, body.decode()), (500, health))
        if error.endswith("..."):
            self.assertTrue(health.startswith("NOK - " + error[:-3]), health)
        else:
            self.assertEqual(health, "NOK - " + error)

    def publish_until_refused(self, d, ledger, first):
        """PUBs 4 KB messages numbered from first until five in a row are
        refused; every answer must be OK or an error frame. Returns the
        next number and the refusals."""
        refusals = []
        c = Conn(d.tcp_port)
        n = first
        try:
            while len(refusals) < 5 and n < first + 10000:
                try:
                    kind, data = c.pub("t", b"%06d" % n + b"x" * BODY)
                except Closed:
                    self.fail(f"message {n}: connection closed with no answer")
                if (kind, data) == (FRAME_RESPONSE, b"OK"):
                    ledger.add(n)
                    refusals = []
                else:
                    self.assertEqual(kind, FRAME_ERROR, data)
                    refusals.append(data)
                    c.close()  # E_PUB_FAILED closes it (nsqd's rule)
                    c = Conn(d.tcp_port)
                n += 1
        finally:
            c.close()
        self.assertEqual(len(refusals), 5, "the disk never filled")
        return n, refusals

    def consume_all(self, d, channel, fin=True):
        c = Conn(d.tcp_port)
        got = set()
        try:
            c.identify()
            self.assertEqual(c.sub("t", channel), (FRAME_RESPONSE, b"OK"))
            c.rdy(200 if fin else 2500)
            c.sock.settimeout(3)
            while True:
                try:
                    m = c.read_message()
                except (TimeoutError, OSError):
                    break
                got.add(int(m.body[:6]))
                if fin:
                    c.fin(m.id)
        finally:
            c.close()
        return got

    def test_publishes_resume_when_space_returns(self):
        d = self.start()
        # Channel k is read only after the restart.
        self.assertEqual(self.http(d, "/topic/create?topic=t", b"")[0], 200)
        self.assertEqual(self.http(d, "/channel/create?topic=t&channel=k", b"")[0], 200)
        ledger = set()
        n, refusals = self.publish_until_refused(d, ledger, 0)
        self.assertGreater(len(ledger), 100)
        self.assertTrue(refusals[0].startswith(b"E_PUB_FAILED"), refusals)
        self.assertIn(b"no space left on device", refusals[0])
        # /ping says so as nsqd's does after a failed write, until one succeeds.
        self.assert_unhealthy(d, "partition t/...")
        self.assertIn("no space left on device", self.health(d)[1])
        # No spin: the refused publishes leave ternd idle.
        t0 = cpu_ticks(d.proc.pid)
        time.sleep(2)
        self.assertLess(cpu_ticks(d.proc.pid) - t0, 50, "ternd busy on a full disk")
        status, body = self.http(d, "/pub?topic=t", b"h" * 65536)
        self.assertEqual((status, body), (503, b'{"message":"E_STORAGE"}'))
        os.unlink(self.spare)
        # Space is back: publishes are taken again, without a restart.
        deadline = time.monotonic() + 10
        answers = []
        c = Conn(d.tcp_port)
        try:
            while time.monotonic() < deadline:
                answer = c.pub("t", b"%06d" % n + b"y" * 100)
                answers.append(answer)
                if answer == (FRAME_RESPONSE, b"OK"):
                    ledger.add(n)
                    break
                c.close()
                c = Conn(d.tcp_port)
                time.sleep(0.2)
        finally:
            c.close()
        self.assertEqual(answers[-1], (FRAME_RESPONSE, b"OK"),
                         f"refusals {refusals[:2]}, then {answers[-3:]}; log:\n{d.log()[-2000:]}")
        self.assert_healthy(d)
        log = d.log()
        self.assertLess(log.count("no space left on device"), 10, log)
        self.assert_kept(d, ledger)

    def assert_kept(self, d, ledger):
        """Every acknowledged message is there (channel c), and again after
        a SIGKILL (channel k, made before the publishes)."""
        missing = ledger - self.consume_all(d, "c")
        self.assertFalse(missing, f"acknowledged, not delivered: {sorted(missing)[:10]}")
        d.kill()
        d = self.start()
        missing = ledger - self.consume_all(d, "k")
        self.assertFalse(missing, f"lost by the restart: {sorted(missing)[:10]}")

    def fill_disk(self):
        fill_disk(self.mnt)
        self.assertEqual(os.statvfs(self.mnt).f_bavail, 0)

    def free_filler(self):
        free_filler(self.mnt)

    def test_a_roll_on_a_full_disk(self):
        """A publish that needs a new segment on a full disk (the sidecar
        index of the segment it seals cannot be written) is refused alone:
        the old segment stays the active one, and the same publish rolls
        once space is freed, without a restart."""
        d = self.start()
        self.assertEqual(self.http(d, "/topic/create?topic=t", b"")[0], 200)
        self.assertEqual(self.http(d, "/channel/create?topic=t&channel=k", b"")[0], 200)
        ledger = set()
        n, _ = self.publish_until_refused(d, ledger, 0)
        self.fill_disk()
        part = os.path.join(self.data, "topics", "t", "0")

        def files(ext):
            return sorted(f for f in os.listdir(part) if f.endswith(ext))

        logs = files(".log")
        active = os.path.getsize(os.path.join(part, logs[-1]))
        self.assertGreater(active, 0)
        # With its record header, past the 1 MiB segment: a roll first.
        big = b"%06d" % n + b"r" * ((1 << 20) - active - 6)
        c = Conn(d.tcp_port)
        try:
            kind, data = c.pub("t", big)
        finally:
            c.close()
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(b"E_PUB_FAILED"), data)
        self.assertIn(b"no space left on device", data)
        self.assertEqual(files(".log"), logs)
        self.assert_unhealthy(d, "partition t/...")
        self.assertNotIn("until restart", d.log())
        self.free_filler()
        os.unlink(self.spare)
        c = Conn(d.tcp_port)
        try:
            self.assertEqual(c.pub("t", big), (FRAME_RESPONSE, b"OK"), d.log()[-2000:])
            ledger.add(n)
            self.assertEqual(c.pub("t", b"%06d" % (n + 1)), (FRAME_RESPONSE, b"OK"))
            ledger.add(n + 1)
        finally:
            c.close()
        self.assertEqual(len(files(".log")), len(logs) + 1)
        self.assertIn(logs[-1][:-4] + ".idx", files(".idx"))
        self.assert_healthy(d)
        self.assert_kept(d, ledger)

    def test_restart_on_the_still_full_disk(self):
        """A start on a disk with no block free is refused (libraft cannot
        write its probe file): ternd exits 1 saying so, and the next start
        once space is freed serves every acknowledged message (the steps
        in operations.md "Disk space")."""
        d = self.start()
        self.assertEqual(self.http(d, "/topic/create?topic=t", b"")[0], 200)
        self.assertEqual(self.http(d, "/channel/create?topic=t&channel=k", b"")[0], 200)
        ledger = set()
        self.publish_until_refused(d, ledger, 0)
        d.kill()
        d = Daemon(self.data, *FLAGS, log_path=os.path.join(self.dir, "ternd.log"))
        self.daemons.append(d)
        self.assertEqual(d.proc.wait(timeout=60), 1, d.log())
        d.kill()  # closes its log
        self.assertIn("metastore: io: create I/O capabilities probe file: not enough space",
                      d.log())
        os.unlink(self.spare)
        d = self.start()
        missing = ledger - self.consume_all(d, "k")
        self.assertFalse(missing, f"acknowledged, not delivered: {sorted(missing)[:10]}")

    def leave_free(self, nbytes):
        """Fills the disk but for about nbytes (a file that size is kept
        out of the filling, then deleted); returns the bytes free."""
        reserve = os.path.join(self.mnt, "reserve")
        with open(reserve, "wb") as f:
            f.write(b"\0" * nbytes)
            os.fsync(f.fileno())
        fill_disk(self.mnt)
        os.unlink(reserve)
        os.sync()
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize

    def test_first_start_with_less_than_a_segment_free(self):
        """A new data directory on a disk with less room than libraft's
        first 8 MiB log segment: libraft crashed (SIGSEGV) once its
        allocation failed; ternd now refuses to start, saying how much to
        free, and starts once that is free."""
        for nbytes in (64 << 10, 1 << 20):
            shutil.rmtree(self.data, ignore_errors=True)
            free = self.leave_free(nbytes)
            self.assertLess(free, 8 << 20)
            d = Daemon(self.data, *FLAGS, log_path=os.path.join(self.dir, "ternd.log"))
            self.daemons.append(d)
            try:
                rc = d.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rc = None
            d.kill()  # closes its log
            self.assertEqual(rc, 1, f"{free} bytes free; log:\n{d.log()[-2000:]}")
            self.assertIn("and the metastore's log needs 8224 KiB to start (libraft allocates a "
                          "8 MiB segment whole and crashes without it): free at least", d.log())
            self.free_filler()
        os.unlink(self.spare)
        d = self.start()
        self.assertEqual(self.http(d, "/topic/create?topic=t", b"")[0], 200)

    def test_restart_with_little_free(self):
        """A restart of a data directory whose metastore log has its
        segments: libraft gives back their unused room while loading, so
        a start with 256 KiB free succeeds, and so do metastore writes."""
        d = self.start()
        self.assertEqual(self.http(d, "/topic/create?topic=t", b"")[0], 200)
        d.kill()
        self.leave_free(64 << 10)
        d = self.start()
        status, body = self.http(d, "/topic/create?topic=u", b"")
        self.assertIn(status, (200, 503), body)
        self.assertIsNone(d.proc.poll())

    def test_fin_on_a_disk_filled_by_another_file(self):
        d = self.start()
        self.assert_healthy(d)
        c = Conn(d.tcp_port)
        for n in range(300):
            self.assertEqual(c.pub("t", b"%06d" % n + b"x" * 1000), (FRAME_RESPONSE, b"OK"))
        c.close()
        c = Conn(d.tcp_port)
        c.identify()
        self.assertEqual(c.sub("t", "k"), (FRAME_RESPONSE, b"OK"))
        self.fill_disk()
        # FINs that cannot be made durable are refused by name; the
        # channel stops delivering until space is freed, and says so once.
        c.rdy(50)
        c.sock.settimeout(3)
        ids, refused = {}, set()
        try:
            while True:
                kind, data = c.read_frame()
                if kind == FRAME_ERROR:
                    self.assertTrue(data.startswith(b"E_FIN_FAILED FIN "), data)
                    self.assertIn(b"no space left on device", data)
                    refused.add(ids[data.split()[2].decode()])
                    continue
                m = Message(data)
                ids[m.id] = int(m.body[:6])
                c.fin(m.id)
        except (TimeoutError, OSError):
            pass
        c.close()
        self.assertTrue(refused, "every FIN written on a full disk")
        # Not sticky: the node stays ready; /ping and /stats say why the
        # channel does not deliver, in nsqd's words.
        self.assertEqual(self.http(d, "/readyz")[0], 200)
        self.assert_unhealthy(d, "1 channel log(s) found the disk full; their delivery resumes "
                              "once space is freed")
        self.assertEqual(self.gauge(d, "tern_channel_logs_full"), 1)
        # A pause meanwhile is refused and changes nothing (its record
        # cannot go to the full log): the answer and the channel agree.
        status, body = self.http(d, "/channel/pause?topic=t&channel=k", b"")
        self.assertEqual((status, self.paused(d, "k")), (503, False), body)
        # So is a topic pause, whose pause file cannot be written: taken
        # back, as its answer says (was: (503, True), paused in memory
        # until the next write, and not after a restart).
        status, body = self.http(d, "/topic/pause?topic=t", b"")
        self.assertEqual((status, self.paused(d)), (503, False), body)
        t0 = cpu_ticks(d.proc.pid)
        time.sleep(2)
        self.assertLess(cpu_ticks(d.proc.pid) - t0, 50, "ternd busy on a full disk")
        self.assertEqual(d.log().count("log write failed (no space left on device); delivery "
                                       "stops until space is freed"), 1, d.log())
        # The operator frees space: with no restart, each refused FIN's
        # message is delivered again, and the rest of the backlog.
        self.free_filler()
        deadline = time.monotonic() + 10
        while self.health(d)[1] != "OK" and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assert_healthy(d)
        self.assertEqual(self.gauge(d, "tern_channel_logs_full"), 0)
        again = self.consume_all(d, "k")
        self.assertFalse(refused - again, "refused FINs' messages not delivered again")
        self.assertEqual(set(ids.values()) | again, set(range(300)))
        # Those FINs are durable: a SIGKILL and a start deliver nothing again.
        d.kill()
        d = self.start()
        self.assertEqual(self.consume_all(d, "k"), set())

    def v1(self, d, method, path, body=None):
        req = urllib.request.Request(
            f"http://127.0.0.1:{d.http_port}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Basic " + base64.b64encode(
                f"admin:{PASSWORD}".encode()).decode(), "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def test_a_topic_creation_on_a_full_disk(self):
        # A /v1 creation whose topic directory cannot be made on the full
        # disk answers 507 and keeps no record (was: 500 "create failed",
        # the topic listed without its log); once space is freed the same
        # creation makes the topic.
        d = Daemon(self.data, *FLAGS, log_path=os.path.join(self.dir, "ternd.log"),
                   env=dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD))
        self.daemons.append(d)
        d.wait_for("root user admin created")
        self.fill_disk()
        body = {"name": "late", "partitions": 2}
        status, rep = self.v1(d, "POST", "/v1/topics", body)
        self.assertEqual(status, 507, rep)
        self.assertEqual(self.v1(d, "GET", "/v1/topics/late")[0], 404)
        self.assertEqual(rep["error"], "cannot create it now: no space left on device; "
                         "retry once space is freed")
        self.free_filler()
        status, rep = self.v1(d, "POST", "/v1/topics", body)
        self.assertEqual(status, 201, rep)
        status, rep = self.v1(d, "POST", "/v1/topics/late/produce", {"payload": "x"})
        self.assertEqual(status, 202, rep)


class MetastoreDiskFull(unittest.TestCase):
    """The metastore's log (libraft) on a full disk. 20 MiB with a 6 MiB
    spare file: libraft's first 8 MiB segment fits, a second does not,
    and deleting the spare leaves room for one again."""
    IMAGE = 20 << 20
    SPARE = 6 << 20

    setUp = DiskFull.setUp
    tearDown = DiskFull.tearDown
    start = DiskFull.start
    fill_disk = DiskFull.fill_disk
    free_filler = DiskFull.free_filler

    def put_grants(self, d, auth, pattern):
        c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
        try:
            c.request("PUT", "/v1/users/u/grants", json.dumps(
                {"grants": [{"action": "consume", "patterns": [pattern]}]}), auth)
            r = c.getresponse()
            return r.status, r.read()
        except OSError as e:
            return None, repr(e).encode()
        finally:
            c.close()

    def test_metastore_writes_on_a_full_disk(self):
        """A user's grants changed over and over on a full disk: the
        metastore's entries go into its allocated segment until a snapshot
        (every 1024 entries) closes it and it needs another, which libraft
        cannot allocate. Before, concurrent writes then crashed ternd
        (SIGSEGV in libraft); now every write answers 200 or 507 "metastore:
        no space left on device", and writes resume once space is freed,
        with no restart and no acknowledged change lost."""
        d = self.start()
        # "ready" can be the metastore's line, before the root user's
        # seeding writes the password file.
        d.wait_for("root user admin created")
        with open(os.path.join(self.data, "admin-password")) as f:
            pw = f.read().strip()
        auth = {"Authorization": "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode(),
                "Content-Type": "application/json"}
        deadline = time.monotonic() + 10
        while True:  # 503 until the metastore has caught up after the start
            c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
            c.request("POST", "/v1/users", json.dumps({"username": "u", "password": "p"}), auth)
            r = c.getresponse()
            status, body = r.status, r.read()
            c.close()
            if status != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(status, 201, body)
        self.fill_disk()
        answers, lock = [], threading.Lock()
        refused = threading.Event()

        def writer(k):
            for i in range(400):
                if refused.is_set() or d.proc.poll() is not None:
                    return
                a = self.put_grants(d, auth, f"w{k}-{i}")
                with lock:
                    answers.append(a)
                if a[0] not in (200, 409):
                    refused.set()

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertIsNone(d.proc.poll(), f"ternd exited; log:\n{d.log()[-3000:]}")
        # 409: another writer's change of the same user came first.
        others = [a for a in answers if a[0] not in (200, 409, 507)]
        self.assertFalse(others, others[:3])
        self.assertTrue(refused.is_set(), "no write refused in %d" % len(answers))
        self.assertIn(b"metastore: no space left on device; its writes are refused until space "
                      b"is freed", [a[1] for a in answers if a[0] == 507][0])
        self.assertIn("metastore writes are refused until space is freed", d.log())
        # Still refused while the disk is full, with no spin (the tick's
        # own proposals wait a second between looks at the disk); taken
        # again once space is freed.
        self.assertEqual(self.put_grants(d, auth, "x")[0], 507)
        t0 = cpu_ticks(d.proc.pid)
        time.sleep(2)
        self.assertLess(cpu_ticks(d.proc.pid) - t0, 50, "ternd busy on a full disk")
        self.free_filler()
        os.unlink(self.spare)
        deadline = time.monotonic() + 10
        while True:
            status, body = self.put_grants(d, auth, "final")
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(status, 200, body)
        self.assertIsNone(d.proc.poll())
        d.kill()
        d = self.start()
        c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
        c.request("GET", "/v1/users/u", headers=auth)
        r = c.getresponse()
        user = json.loads(r.read())
        c.close()
        self.assertEqual(user["grants"], [{"action": "consume", "patterns": ["final"]}])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
