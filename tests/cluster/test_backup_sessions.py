#!/usr/bin/env python3
"""`ternctl backup` of a cluster keeps every member's session alive while
it waits for the others (docs/operations.md, "Backup and restore").

ternctl asks every member for its session (POST /v1/backup) before it
copies any: a member's POST returns once its files are pinned and
CRC'd, which takes as long as reading its data. Before, ternctl sent the
POSTs one after another, each blocking, and used a waiting session only
between two downloads: a session made first sat unused while a later
member's POST ran, and when that took longer than backup-session-ttl the
node removed it ("unused for ... ms, removed"): the backup then failed
on its first file with 404, and failed again each time it was run (a
member with much data takes as long every time). And each POST was
bound by --timeout (30 s by default), so a member that needed longer to
read its data failed the backup ("timed out after 30000 ms"). Here the
TTL is 2 s, ternctl's --timeout 3 s, and node 2's POST is held 6 s
(TERN_TEST_BACKUP_TAKE_HOLD, ternd-test).

Run: python3 tests/cluster/test_backup_sessions.py --ternd build/ternd-test --ternctl build/ternctl
"""
import os
import subprocess
import time

import harness
from harness import PASSWORD, ClusterTest, wait_until

TERNCTL = None


class BackupSessionsTest(ClusterTest):
    node_args = ["--default-replication-factor=1", "--backup-session-ttl=2s"]

    def test_waiting_sessions_outlive_a_slow_member(self):
        c = self.make(3)
        slow = c.nodes[1]  # the second member ternctl asks
        hold = os.path.join(slow.dir, "take-hold")
        c.nodes[0].start()
        slow.start(env=dict(c.env(), TERN_TEST_BACKUP_TAKE_HOLD=hold))
        c.nodes[2].start()
        c.wait_ready()
        c.wait_alive(3)
        first = c.nodes[0]
        st, body = first.request("POST", "/v1/topics", {"name": "bs", "partitions": 3})
        self.assertEqual(st, 201, body)
        wait_until("owners of bs", lambda: all(n.owners("bs") and "0" not in n.owners("bs")
                                               for n in c.nodes))
        for p in range(3):
            st, body = first.request("POST", f"/v1/topics/bs/produce?partition={p}",
                                     f"m-{p}".encode(),
                                     headers={"Content-Type": "application/octet-stream"})
            self.assertEqual(st, 202, body)
        with open(hold, "w") as f:
            f.write("")
        bdir = os.path.join(c.dir, "backup")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(TERN_URL=f"http://127.0.0.1:{first.http_port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
        backup = subprocess.Popen([TERNCTL, "--timeout", "3s", "backup", bdir], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_until("node 2's session held",
                       lambda: "TERN_TEST_BACKUP_TAKE_HOLD" in slow.log()
                       or backup.poll() is not None, 30)
            self.assertIsNone(backup.poll(), "the backup ended before node 2's hold")
            time.sleep(6)  # three TTLs
        finally:
            if os.path.exists(hold):
                os.unlink(hold)
        out, _ = backup.communicate(timeout=300)
        print(f"\n  ternctl backup with node 2's POST held 6 s, TTL 2 s, --timeout 3s: exit "
              f"{backup.returncode}\n  {out.strip()[-400:]}")
        removed = [n.id for n in c.nodes if "unused for 2000 ms, removed" in n.log()]
        self.assertEqual(backup.returncode, 0, out)
        self.assertEqual(removed, [], "sessions expired while the backup ran")
        for n in c.nodes:
            self.assertTrue(os.path.exists(os.path.join(bdir, str(n.id), "manifest.json")))


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
