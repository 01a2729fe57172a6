"""A follower whose disk fills, on three nodes (replication factor 3,
min_insync_replicas 2): node 3's partition data (data/topics) is on a
small ext4 file system (a 16 MiB image, loop-mounted and bound there by
the test, unmounted in a finally; without root or a loop device the test
skips, saying why). Messages are published and acked (/v1) through the
leader, node 1; node 3's disk is filled: its copies of the records (and
of the channel's settles, once its WAL's zeroed space ahead is used up)
fail for space, it leaves the ISR and publishes and
acks go on with the other two. Space is freed: node 3 comes back into the
ISR (through the channels gate: the channel's state caught up) with no
restart. Node 3 is then elected and SIGKILLed after serving: a ledger
checks that every publish answered 202 is delivered once the others lead
and that no message whose ack was answered 204 comes back.

Run: python3 tests/cluster/test_diskfull_repl.py --ternd build/ternd
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from test_diskfull import fill_disk, free_filler, mount_small_fs  # noqa: E402

TOPIC = "dfr"
ARGS = ["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--default-replication-factor=3", "--min-insync-replicas=2",
        "--member-session-timeout=3s", "--replica-lag-time-max=3s",
        "--segment-bytes=1MiB", "--disk-high-watermark=100", "--disk-low-watermark=99",
        "--disk-min-free-bytes=0", "--disk-check-interval=1m"]
BODY = "x" * 2000


class DiskFullRepl(harness.OnePartition, harness.ClusterTest):
    topic = TOPIC

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tern-dfr-")
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)
        why = mount_small_fs(self.mnt, os.path.join(self.tmp, "image"))
        if why is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.skipTest(why)
        self.bound = None
        self.addCleanup(self.unmount)

    def unmount(self):
        if self.bound is not None:
            subprocess.run(["umount", self.bound], check=False)
        subprocess.run(["umount", self.mnt], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def produce(self, lead, first, n, ledger):
        """Publishes messages first..first+n-1 one batch; adds them to the
        ledger when answered 202. Returns the status."""
        s, b = lead.request("POST", f"/v1/topics/{TOPIC}/produce/batch",
                            [{"payload": f"m{i:05d}{BODY}", "partition": 0}
                             for i in range(first, first + n)], headers=self.client)
        if s == 202:
            ledger.update(range(first, first + n))
        return s

    def consume_ack(self, node, want, acked, answers):
        """Consumes up to want messages from node and acks each; the ones
        whose ack is answered 204 go to acked. Returns the numbers
        delivered."""
        s, b = node.request("GET", f"/v1/topics/{TOPIC}/consume?partition=0&max={want}&wait=2s",
                            headers=self.client)
        if s != 200:
            return []
        got = []
        for m in b["messages"]:
            num = int(m["payload"][1:6])
            got.append(num)
            s, _ = node.request("POST",
                                f"/v1/topics/{TOPIC}/ack?receipt_handle={m['receipt_handle']}",
                                headers=self.client)
            answers[s] = answers.get(s, 0) + 1
            if s == 204:
                acked.add(num)
        return got

    def isr(self, node):
        return sorted((self.part(node) or {}).get("isr", []))

    def test_follower_disk_fills_and_frees(self):
        c = self.make(3, args=ARGS)
        full = c.nodes[2]
        c.start()
        c.wait_alive(3)
        # Node 3's partition data on the small file system, bound over
        # data/topics while it is stopped (its metastore stays on the big disk).
        full.stop()
        topics = os.path.join(full.data, "topics")
        os.makedirs(topics, exist_ok=True)
        self.assertEqual(os.listdir(topics), [])
        os.makedirs(os.path.join(self.mnt, "topics"))
        r = subprocess.run(["mount", "--bind", os.path.join(self.mnt, "topics"), topics],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.bound = topics
        full.start()
        c.wait_ready()
        c.wait_alive(3)
        s, b = c.nodes[0].request("POST", "/v1/topics",
                                  {"name": TOPIC, "partitions": 1, "replication_factor": 3,
                                   "visibility_timeout_ms": 60000})
        self.assertEqual(s, 201, b)
        lead = c.nodes[0]
        self.elect(c, lead, lead)
        pid = full.pid

        published, acked, answers = set(), set(), {}
        delivered = []
        wait_until("the leader takes produces",
                   lambda: self.produce(lead, 0, 50, published) == 202, timeout=60)
        while len(delivered) < 25:
            delivered += self.consume_ack(lead, 25 - len(delivered), acked, answers)
        n = 50
        fill_disk(self.mnt)
        self.assertEqual(os.statvfs(self.mnt).f_bavail, 0)
        # Publishes and acks go on once node 3 is out of the ISR.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.isr(lead) != ["1", "2"]:
            self.produce(lead, n, 10, published)
            n += 10
            delivered += self.consume_ack(lead, 5, acked, answers)
        self.assertEqual(self.isr(lead), ["1", "2"], self.part(lead))
        before = len(acked)
        wait_until("a publish taken without node 3",
                   lambda: self.produce(lead, n, 10, published) == 202, timeout=30)
        n += 10
        def ack_some():
            delivered.extend(self.consume_ack(lead, 5, acked, answers))
            return len(acked) > before
        wait_until("acks answered without node 3", ack_some, timeout=30)
        self.assertTrue(full.running())
        log = full.log()
        self.assertIn("no space left on device", log)
        self.assertNotIn("until restart", log)

        # Space back: node 3 rejoins the ISR with no restart.
        free_filler(self.mnt)
        os.sync()
        self.in_sync_everywhere(c)
        self.assertEqual(full.pid, pid, "node 3 was restarted")
        self.assertNotIn("until restart", full.log())
        self.produce(lead, n, 10, published)
        n += 10
        for _ in range(3):
            delivered += self.consume_ack(lead, 10, acked, answers)

        # Node 3 leads on its own channel state: nothing acked comes back.
        self.elect(c, lead, full)
        acked_then = set(acked)
        got = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (published - acked) <= set(got):
            got += self.consume_ack(full, 100, acked, answers)
        self.assertEqual(sorted(set(got) & acked_then), [],
                         "acked messages delivered again by node 3")
        # The leader killed: another leads; nothing acked comes back, and
        # every publish answered 202 was delivered.
        full.kill()
        rest = c.nodes[:2]
        wait_until("another leader",
                   lambda: (self.part(rest[0]) or {}).get("leader") in ("1", "2"), timeout=90)
        new = self.node(c, self.part(rest[0])["leader"])
        after = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            more = self.consume_ack(new, 100, set(), {})
            after += more
            if not more and set(after) | set(got) | set(delivered) >= published:
                break
        self.assertEqual(sorted(set(after) & acked), [], "acked messages came back")
        seen = set(delivered) | set(got) | set(after)
        self.assertEqual(sorted(published - seen), [], "published messages never delivered")
        self.assertGreater(len(acked), 30, answers)


if __name__ == "__main__":
    harness.main()
