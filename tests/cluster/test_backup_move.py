#!/usr/bin/env python3
"""A cluster restored whole from a backup taken while a partition moved
(docs/operations.md, "Backup and restore"): the restored metastore is the
member's snapshot with the highest applied index, which can be taken after
a move finished that the other members' copies predate.

Three nodes, a factor-1 topic `bm` of three partitions (one per node);
partition p, on node A, holds five acknowledged messages. `ternctl
backup` asks every member for its session at once; node C's is held
before it takes its metastore snapshot (TERN_TEST_BACKUP_TAKE_HOLD
"post", ternd-test), while A and B answer: A's copy holds p's five
messages, B holds nothing of p. Then p moves from A to B and the move
completes; C's snapshot, taken once the hold ends, is the latest (the
backup restores from it) and names B alone as p's replica and leader,
though B's copy in the backup is empty and A's, whole, is on a member the
snapshot no longer lists.

Before, the restore chose p's leader among the replicas the snapshot
lists only: p came back offline ("no copy of it in the backup") and A's
copy was set aside in quarantine at A's start: the five acknowledged
messages were not served. Now every copy in the backup is a candidate, as
in an election: A's (the longest in the latest epoch) leads, A becoming
p's first replica; p is served, and the topic's factor (1) later drops B
from its replicas, keeping A's copy.

Run: python3 tests/cluster/test_backup_move.py --ternd build/ternd-test --ternctl build/ternctl
"""
import json
import os
import subprocess
import sys

import harness
import test_repl_restore as rr
from harness import PASSWORD, ClusterTest, wait_until

OCTET, ternctl = rr.OCTET, rr.ternctl


class BackupMoveTest(ClusterTest):
    node_args = ["--default-replication-factor=1", "--min-insync-replicas=1"]

    def pstate(self, node, p):
        status, body = node.request("GET", "/v1/topics/bm", timeout=5)
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"][p]

    def test_restore_after_a_move_during_the_backup(self):
        c = self.make(3)
        hold = os.path.join(c.dir, "take-hold")
        c.nodes[0].start()
        c.nodes[1].start()
        c.nodes[2].start(env=dict(c.env(), TERN_TEST_BACKUP_TAKE_HOLD=hold))
        c.wait_ready()
        c.wait_alive(3)
        first = c.nodes[0]
        st, body = first.request("POST", "/v1/topics", {"name": "bm", "partitions": 3})
        self.assertEqual(st, 201, body)
        wait_until("owners of bm", lambda: all(
            (o := n.owners("bm")) and "0" not in o and len(set(o)) == 3 for n in c.nodes))
        owners = [str(x) for x in first.owners("bm")]
        a, b, cc = (str(n.id) for n in c.nodes)  # only C holds
        p = owners.index(a)
        node = {str(n.id): n for n in c.nodes}
        acked = []
        for i in range(5):
            msg = f"before-{i}"
            st, body = first.request("POST", f"/v1/topics/bm/produce?partition={p}",
                                     msg.encode(), headers=OCTET)
            self.assertEqual(st, 202, body)
            acked.append(msg)

        with open(hold, "w") as f:
            f.write("post")
        bdir = os.path.join(c.dir, "backup")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(TERN_URL=f"http://127.0.0.1:{node[a].http_port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
        backup = None
        try:
            backup = subprocess.Popen([rr.TERNCTL, "backup", bdir], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
            wait_until("C's snapshot held, A's and B's files pinned", lambda: (
                "its metastore snapshot held" in node[cc].log()
                and all("files pinned" in node[x].log() for x in (a, b)))
                or backup.poll() is not None, 60)
            self.assertIsNone(backup.poll(), "the backup ended before C's hold")
            st, body = node[a].request("PATCH", f"/v1/topics/bm/partitions/{p}",
                                       {"replicas": [b]})
            self.assertEqual(st, 202, body)
            wait_until(f"bm/{p} moved to {b}, as C's metastore has it", lambda: (
                (s := self.pstate(node[cc], p)) is not None
                and [str(r) for r in s.get("replicas", [])] == [b]
                and str(s.get("leader")) == b), 90)
        finally:
            if os.path.exists(hold):
                os.unlink(hold)
        out, _ = backup.communicate(timeout=300)
        self.assertEqual(backup.returncode, 0, out)
        with open(os.path.join(bdir, "backup.json")) as f:
            bj = json.load(f)
        sys.stderr.write(f"\nbackup.json: {json.dumps(bj)}\n")
        self.stop_all(c)

        decided = {}
        for n in c.nodes:
            os.rename(n.data, n.data + ".old")
            r = ternctl("restore", bdir, "--data-path", n.data, "--node", str(n.id))
            sys.stderr.write(f"node {n.id}'s restore (exit {r.returncode}):\n{r.stdout}"
                             f"{r.stderr}")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("OFFLINE", r.stdout)
            r = ternctl("--json", "restore", bdir, "--data-path",
                        os.path.join(c.dir, f"j{n.id}"), "--node", str(n.id))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            decided[n.id] = json.loads(r.stdout)["partitions"]
        self.assertEqual(decided[1], decided[2])
        self.assertEqual(decided[1], decided[3])
        d = [x for x in decided[1] if (x["topic"], x["partition"]) == ("bm", p)][0]
        self.assertEqual(d["leader"], a, d)

        for n in c.nodes:
            n.start()
        c.wait_ready()
        wait_until(f"bm/{p} led by {a}", lambda: all(
            (s := self.pstate(n, p)) is not None and str(s.get("leader")) == a
            for n in c.nodes), 90)
        # The topic's factor (1) drops the extra replica, keeping A's copy.
        wait_until(f"bm/{p} back to one replica", lambda: all(
            (s := self.pstate(n, p)) is not None and len(s.get("replicas", [])) == 1
            and s.get("leader") for n in c.nodes), 120)
        # p takes publishes again (its leader is a member with its copy).
        st, body = first.request("POST", f"/v1/topics/bm/produce?partition={p}",
                                 b"after-restore", headers=OCTET, timeout=30)
        self.assertEqual(st, 202, body)
        acked.append("after-restore")
        got = {}
        rr.ReplRestore.consume_until(self, c, "bm", set(acked), got)
        self.assertEqual(sorted(set(acked) - set(got)), [],
                         "acknowledged before the backup, not served after the restore")
        self.stop_all(c)
        for n in c.nodes:
            self.assertNotIn("runtime error", n.log())


def configure(args):
    rr.TERNCTL = os.path.abspath(args.ternctl)


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
