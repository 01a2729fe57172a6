#!/usr/bin/env python3
"""A channel whose files are missing on one partition, against the real
ternd (docs/storage-format.md, "A channel" under "Recovery").

A topic of 3 partitions with the durable channels `work` and `other`;
4 messages on each partition; `work` acks offsets 0 and 1 of every
partition and leaves 2 and 3 unacked. ternd stops; one partition's
`work.ckpt` and `work.wal` are removed (the lowest partition, or another
one); ternd starts again (with --bootstrap-window=0, so a channel made
anew "from the bootstrap window" would start at the tail and skip the
backlog) and `work` is drained. Expected, whichever partition lost its
files:
- the channel is there (loaded from the partitions that kept their
  files), its acks on those partitions kept: offsets 2 and 3 only;
- the partition that lost its files delivers every retained message
  again (0 to 3): nothing is skipped;
- ternd says so at warn, naming the topic, the channel and the
  partition.
A paused channel stays paused, also when SIGKILLed right after the 200,
and when its files are lost on every partition (the pause is the node's,
kept in its pause file beside the channel's stamp; made again unpaused
when that is lost too). A paused topic stays paused across a SIGKILL
right after the 200 of /topic/pause, holding exactly what was published
since the pause, and delivers it in order at /topic/unpause; an unpause
SIGKILLed right after its 200 stays unpaused (the topic's pause file,
docs/storage-format.md "Topic pause", as nsqd keeps it in nsqd.dat). And `ternctl restore` of a backup whose
channel files do not go together (a WAL without its checkpoint, the
reverse, a partition without the channel) says so for each.
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from daemon import Daemon
import daemon as daemon_mod

PASSWORD = "root-pw-for-chanload"
API = {"X-Tern-Client": "tests"}
PARTS = 3
PER_PART = 4
ACKED = 2  # offsets below this are acked on every partition before the stop


TERNCTL = None  # set by main()


def ternctl(*args, port=None):
    env = dict(os.environ, TERN_USER="admin", TERN_PASSWORD=PASSWORD)
    env.pop("TERN_PASSWORD_FILE", None)
    if port is not None:
        env["TERN_URL"] = f"http://127.0.0.1:{port}"
    return subprocess.run([TERNCTL, *args], env=env, capture_output=True, text=True, timeout=300)


def call(port, method, path, body=None, headers=None, timeout=30):
    h = dict(headers or {})
    h["Authorization"] = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def drain(port, topic, channel, ack_below=None):
    """Consumes channel until it has nothing left (a 204 after a 1 s wait):
    the (partition, offset) pairs delivered, each once; acks those whose
    offset is below ack_below (leaves the others leased)."""
    got = []
    while True:
        st, body = call(port, "GET", f"/v1/topics/{topic}/consume?channel={channel}&wait=1s")
        if st == 204:
            return got
        assert st == 200, (st, body)
        m = json.loads(body)
        got.append((m["partition"], m["offset"]))
        if ack_below is not None and m["offset"] < ack_below:
            st, body = call(port, "POST", f"/v1/topics/{topic}/ack?channel={channel}"
                            f"&receipt_handle={m['receipt_handle']}", headers=API)
            assert st == 204, (st, body)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-chanload-")
        self.data = os.path.join(self.dir, "data")
        self.env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD)
        self.d = None

    def tearDown(self):
        if self.d is not None:
            self.d.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self):
        self.d = Daemon(self.data, "--bootstrap-window=0", env=self.env,
                        log_path=os.path.join(self.dir, "ternd.log"))
        self.d.wait_for("ready")
        return self.d.http_port

    def stop(self):
        rc = self.d.stop()
        self.assertEqual(rc, 0, self.d.log())
        self.d = None

    def prepare(self, topic):
        port = self.start()
        self.d.wait_for("root user admin created")
        st, body = call(port, "POST", "/v1/topics",
                        json.dumps({"name": topic, "partitions": PARTS}).encode(),
                        {"Content-Type": "application/json"})
        self.assertEqual(st, 201, body)
        for ch in ("work", "other"):
            st, body = call(port, "POST", f"/channel/create?topic={topic}&channel={ch}")
            self.assertEqual(st, 200, body)
        for p in range(PARTS):
            for i in range(PER_PART):
                st, body = call(port, "POST", f"/v1/topics/{topic}/produce?partition={p}",
                                f"m{p}.{i}".encode(), API)
                self.assertEqual(st, 202, body)
        got = drain(port, topic, "work", ack_below=ACKED)
        self.assertEqual(sorted(got), [(p, o) for p in range(PARTS) for o in range(PER_PART)])
        self.stop()

    def lose(self, topic, p, what=("ckpt", "wal")):
        for ext in what:
            os.unlink(os.path.join(self.data, "topics", topic, str(p), f"work.{ext}"))

    def check(self, topic, lost):
        port = self.start()
        got = drain(port, topic, "work", ack_below=PER_PART)
        want = [(p, o) for p in range(PARTS)
                for o in range(0 if p == lost else ACKED, PER_PART)]
        self.assertEqual(sorted(got), want, self.d.log())
        warn = [ln for ln in self.d.log().splitlines()
                if " warn " in ln and f"{topic}/{lost}" in ln and "work" in ln]
        self.assertTrue(warn, "no warning names the partition:\n" + self.d.log())
        self.assertIn("again", warn[0])
        self.stop()
        # The partition has its files again: after a second restart nothing
        # is delivered again (all acked) and no more warnings come.
        port = self.start()
        self.assertEqual(drain(port, topic, "work"), [])
        self.assertEqual(self.d.log().count(f"{topic}/{lost}: channel work"), len(warn),
                         self.d.log())


class ChannelFilesLost(Base):
    def test_lowest_partition_lost(self):
        self.prepare("tlow")
        self.lose("tlow", 0)
        self.check("tlow", 0)

    def test_middle_partition_lost(self):
        self.prepare("tmid")
        self.lose("tmid", 1)
        self.check("tmid", 1)

    def test_pause_kept(self):
        # A paused channel whose lowest partition lost its files stays
        # paused, and says so again at the next start (that partition
        # is the first one read then).
        self.prepare("tpause")
        port = self.start()
        st, body = call(port, "POST", "/channel/pause?topic=tpause&channel=work")
        self.assertEqual(st, 200, body)
        self.stop()
        self.lose("tpause", 0)
        for _ in range(2):
            port = self.start()
            self.assertTrue(self.paused(port, "tpause", "work"), self.d.log())
            self.stop()

    def test_pause_kept_with_every_file_lost(self):
        # The pause is the node's, kept in its pause file (work.cpause,
        # beside work.cstamp): a paused channel whose files are lost on
        # every partition is made again by the catalog, paused (the stamp
        # file says this node had this very channel). Without the pause
        # file too it is made unpaused, as any channel made anew
        # (docs/storage-format.md, "A channel"; docs/http-api.md,
        # "/channel/pause").
        self.prepare("tpall")
        port = self.start()
        st, body = call(port, "POST", "/channel/pause?topic=tpall&channel=work")
        self.assertEqual(st, 200, body)
        self.stop()
        for lose_pause_file in (False, True):
            for p in range(PARTS):
                self.lose("tpall", p)
            if lose_pause_file:
                os.unlink(os.path.join(self.data, "topics", "tpall", "work.cpause"))
            port = self.start()
            deadline = time.monotonic() + 30
            while (paused := self.paused(port, "tpall", "work")) is None:  # the catalog makes it
                self.assertLess(time.monotonic(), deadline, self.d.log())
                time.sleep(0.1)
            self.assertIn("channel work of tpall was recorded but had no files", self.d.log())
            self.assertEqual(paused, not lose_pause_file, self.d.log())
            self.stop()

    def test_pause_kept_by_sigkill_on_every_partition(self):
        # Paused (200), SIGKILLed at once, started again: paused, and no
        # partition delivers; unpaused (200), SIGKILLed, started again:
        # every partition delivers its unacked messages.
        self.prepare("tkill")
        port = self.start()
        st, body = call(port, "POST", "/channel/pause?topic=tkill&channel=work")
        self.assertEqual(st, 200, body)
        self.d.kill()
        port = self.start()
        self.assertTrue(self.paused(port, "tkill", "work"), self.d.log())
        for p in range(PARTS):
            st, body = call(port, "GET",
                            f"/v1/topics/tkill/consume?channel=work&partition={p}&wait=1s")
            self.assertEqual(st, 204, (p, body))
        st, body = call(port, "POST", "/channel/unpause?topic=tkill&channel=work")
        self.assertEqual(st, 200, body)
        self.d.kill()
        port = self.start()
        self.assertFalse(self.paused(port, "tkill", "work"), self.d.log())
        got = drain(port, "tkill", "work")
        self.assertEqual(sorted(got),
                         [(p, o) for p in range(PARTS) for o in range(ACKED, PER_PART)])
        self.stop()

    def paused(self, port, topic, channel):
        st, body = call(port, "GET", f"/stats?format=json&topic={topic}&channel={channel}")
        self.assertEqual(st, 200, body)
        t = next(x for x in json.loads(body)["topics"] if x["topic_name"] == topic)
        return next((c["paused"] for c in t["channels"] if c["channel_name"] == channel), None)

    def test_checkpoint_lost_wal_kept(self):
        self.prepare("tckpt")
        self.lose("tckpt", 2, what=("ckpt",))
        self.check("tckpt", 2)

    def test_every_partition_lost(self):
        # Every partition lost work's files, but the topic's directory
        # kept work.cstamp, which holds the stamp of the channel's record:
        # this node had the channel, so the catalog making it again from
        # that record starts every partition at its first retained offset
        # (with a warn each) rather than at the bootstrap window, which
        # (0 here) skips the unacked offsets 2 and 3 of every partition.
        self.prepare("tall")
        for p in range(PARTS):
            self.lose("tall", p)
        self.assertTrue(os.path.exists(os.path.join(self.data, "topics", "tall", "work.cstamp")))
        port = self.start()
        got = drain(port, "tall", "work", ack_below=PER_PART)
        want = [(p, o) for p in range(PARTS) for o in range(PER_PART)]
        self.assertEqual(sorted(got), want, self.d.log())
        log = self.d.log()
        for p in range(PARTS):
            warn = [ln for ln in log.splitlines()
                    if " warn " in ln and f"partition tall/{p}: channel work" in ln]
            self.assertEqual(len(warn), 1, log)
            self.assertIn(f"its {PER_PART} retained messages here are delivered again", warn[0])
        self.stop()
        port = self.start()
        self.assertEqual(drain(port, "tall", "work"), [])
        # (The log goes on from the first start's: no warn was added.)
        self.assertEqual(self.d.log().count("channel work has no checkpoint"), PARTS,
                         self.d.log())
        self.stop()

    def test_every_partition_lost_without_its_stamp(self):
        # The same without work.cstamp: nothing on disk says this node had
        # the channel (as for a node that just heard of it), so it is made
        # from the bootstrap window, without a warn.
        self.prepare("tnew")
        for p in range(PARTS):
            self.lose("tnew", p)
        os.unlink(os.path.join(self.data, "topics", "tnew", "work.cstamp"))
        port = self.start()
        self.assertEqual(drain(port, "tnew", "work"), [], self.d.log())
        self.assertNotIn("channel work has no checkpoint", self.d.log())
        self.stop()


class TopicPauseKept(Base):
    """/topic/pause is durable, as nsqd's (kept in nsqd.dat): each 200
    comes once the node's pause file holds it."""

    HELD = 3  # published per partition while paused

    def consume(self, port, topic, p, ack=True):
        """The next message of partition p of channel work (acked), or None
        after a 1 s wait."""
        st, body = call(port, "GET", f"/v1/topics/{topic}/consume?channel=work&partition={p}"
                        "&wait=1s")
        if st == 204:
            return None
        self.assertEqual(st, 200, body)
        m = json.loads(body)
        if ack:
            st, b = call(port, "POST", f"/v1/topics/{topic}/ack?channel=work"
                         f"&receipt_handle={m['receipt_handle']}", headers=API)
            self.assertEqual(st, 204, b)
        return m["offset"], m["payload"]

    def topic_stats(self, port, topic):
        st, body = call(port, "GET", f"/stats?format=json&topic={topic}")
        self.assertEqual(st, 200, body)
        t = next(x for x in json.loads(body)["topics"] if x["topic_name"] == topic)
        return t["paused"], t["depth"]

    def test_pause_and_unpause_kept_by_sigkill(self):
        # Offsets 0 and 1 acked, 2 and 3 unacked before the pause (prepare):
        # those go on being delivered while paused, across the restart.
        self.prepare("tt")
        port = self.start()
        st, body = call(port, "POST", "/topic/pause?topic=tt")
        self.assertEqual(st, 200, body)
        for p in range(PARTS):
            for i in range(self.HELD):
                st, body = call(port, "POST", f"/v1/topics/tt/produce?partition={p}",
                                f"held{p}.{i}".encode(), API)
                self.assertEqual(st, 202, body)
        self.assertEqual(self.topic_stats(port, "tt"), (True, PARTS * self.HELD))
        st, body = call(port, "POST", "/topic/pause?topic=tt")  # paused again: the same
        self.assertEqual(st, 200, body)
        self.d.kill()
        port = self.start()
        self.assertEqual(self.topic_stats(port, "tt"), (True, PARTS * self.HELD), self.d.log())
        self.assertIn("topic tt is paused, as its pause file says", self.d.log())
        for p in range(PARTS):
            # What the channel held before the pause, then nothing.
            for o in range(ACKED, PER_PART):
                self.assertEqual(self.consume(port, "tt", p), (o, f"m{p}.{o}"))
            self.assertIsNone(self.consume(port, "tt", p), self.d.log())
        st, body = call(port, "POST", "/topic/unpause?topic=tt")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.topic_stats(port, "tt"), (False, 0))
        for p in range(PARTS):
            for i in range(self.HELD):
                self.assertEqual(self.consume(port, "tt", p), (PER_PART + i, f"held{p}.{i}"))
            self.assertIsNone(self.consume(port, "tt", p))
        # Paused, a message, unpaused (200), SIGKILLed at once: unpaused
        # after the restart, the message delivered.
        st, body = call(port, "POST", "/topic/pause?topic=tt")
        self.assertEqual(st, 200, body)
        st, body = call(port, "POST", "/v1/topics/tt/produce?partition=1", b"late", API)
        self.assertEqual(st, 202, body)
        self.assertIsNone(self.consume(port, "tt", 1))
        st, body = call(port, "POST", "/topic/unpause?topic=tt")
        self.assertEqual(st, 200, body)
        self.d.kill()
        port = self.start()
        self.assertEqual(self.topic_stats(port, "tt"), (False, 0), self.d.log())
        self.assertEqual(self.consume(port, "tt", 1), (PER_PART + self.HELD, "late"))
        self.stop()

    def test_ephemeral_topic_pause_not_kept(self):
        # As nsqd, which leaves #ephemeral topics out of nsqd.dat: nothing
        # is written for one, and a restart does not bring it back.
        port = self.start()
        self.d.wait_for("root user admin created")
        st, body = call(port, "POST", "/topic/create?topic=te%23ephemeral")
        self.assertEqual(st, 200, body)
        st, body = call(port, "POST", "/topic/pause?topic=te%23ephemeral")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.topic_stats(port, "te#ephemeral"), (True, 0))
        self.assertFalse(os.path.exists(os.path.join(self.data, "topics", "te#ephemeral")))
        self.stop()


class RestoreReports(Base):
    """`ternctl restore` of a backup whose channel files do not go
    together: it says so, per partition and channel, restores, and the
    restored ternd delivers again rather than skip."""

    def test_restore_reports_channel_files_missing(self):
        self.prepare("tb")
        port = self.start()
        bdir = os.path.join(self.dir, "backup")
        r = ternctl("backup", bdir, port=port)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.stop()
        # Partition 0 loses work's checkpoint, partition 1 its WAL and
        # partition 2 both: from the copy and from its manifest.
        man_path = os.path.join(bdir, "1", "manifest.json")
        with open(man_path) as f:
            man = json.load(f)
        gone = {"topics/tb/0/work.ckpt", "topics/tb/1/work.wal", "topics/tb/2/work.ckpt",
                "topics/tb/2/work.wal"}
        self.assertTrue(gone <= {x["path"] for x in man["files"]}, man["files"])
        man["files"] = [x for x in man["files"] if x["path"] not in gone]
        for g in gone:
            os.unlink(os.path.join(bdir, "1", "data", g))
        with open(man_path, "w") as f:
            json.dump(man, f)
        self.data = os.path.join(self.dir, "restored")
        r = ternctl("restore", bdir, "--data-path", self.data)
        self.assertEqual(r.returncode, 0, r.stderr)
        warn = [ln for ln in r.stderr.splitlines() if "warning" in ln and "channel work" in ln]
        self.assertEqual(len(warn), 3, r.stderr)
        self.assertIn("partition tb/0: channel work has a WAL but no checkpoint", warn[0])
        self.assertIn("partition tb/1: channel work has a checkpoint but no WAL", warn[1])
        self.assertIn("partition tb/2: no file of channel work", warn[2])
        self.assertNotIn("channel other", r.stderr)
        # The restored node: partition 1 is back at its checkpoint (seq 0:
        # every ack was in the WAL), 0 and 2 are made anew; all from 0.
        port = self.start()
        got = drain(port, "tb", "work", ack_below=PER_PART)
        want = [(p, o) for p in range(PARTS) for o in range(PER_PART)]
        self.assertEqual(sorted(got), want, self.d.log())
        log = self.d.log()
        for p in (0, 2):
            self.assertIn(f"partition tb/{p}: channel work has no checkpoint here", log)
        self.assertIn("tb/1: its WAL is missing", log)
        self.stop()


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
