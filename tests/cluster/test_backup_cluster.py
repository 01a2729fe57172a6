#!/usr/bin/env python3
"""Backup and restore of a whole 3-node cluster (docs/operations.md,
"Backup and restore"): `ternctl backup` through one node copies every
member; every node is stopped, its data directory replaced by
`ternctl restore --node N` from the same backup, and started again with
its old node id, ports and peers. The restored cluster elects a leader
from the restored metastore (every node's snapshot is the same one), has
the topic with its partitions and owners, and every message whose
produce was acknowledged before the backup (through each of the three
nodes, so some went through an ingress log) is delivered. A channel of a
replicated topic paused on one follower only (a pause is the node's)
comes back paused on that node alone: each member's copy carries its
pause file, and restore writes the channel's stamp beside it, without
which the catalog, making the channel where the copy holds no file of it,
would make it unpaused. A topic and its channel paused on a node holding
no copy of the topic (its directory there holds only the pause's files)
come back paused on that node too: the backup carries that directory's
pause files and stamps, and restore stamps it from the restored
metastore (before, the backup left it out and the node came back with
both unpaused)."""
import json
import os
import subprocess
import sys
import unittest

from harness import PASSWORD, ClusterTest, main, wait_until

TERNCTL = None


def ternctl(*args, port=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    if port is not None:
        env.update(TERN_URL=f"http://127.0.0.1:{port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
    return subprocess.run([TERNCTL, *args], env=env, capture_output=True, text=True,
                          timeout=300)


CLIENT = {"X-Tern-Client": "cluster-test"}


def paused(node, topic, channel=None):
    """Whether node's /stats shows the topic (or its channel) paused
    (None: no answer, or not listed)."""
    st, body = node.request("GET", f"/stats?format=json&topic={topic}")
    if st != 200 or not isinstance(body, dict):
        return None
    for t in body.get("topics") or []:
        if t["topic_name"] != topic:
            continue
        if channel is None:
            return t["paused"]
        for ch in t.get("channels") or []:
            if ch["channel_name"] == channel:
                return ch["paused"]
    return None


def held_paused(node):
    """Whether node's /stats shows channel held of rt paused."""
    return paused(node, "rt", "held")


def rt_lead(node):
    """rt/0's leader as node's GET /v1/topics/rt shows it, or None."""
    st, body = node.request("GET", "/v1/topics/rt")
    if st != 200 or not isinstance(body, dict) or not body.get("partition_stats"):
        return None
    return body["partition_stats"][0].get("leader")


class BackupClusterTest(ClusterTest):
    # Factor 1: this test checks owners and the ingress logs in the backup
    # (a replicated cluster's restore is test_repl_restore's); its one
    # factor-3 topic is for a follower's pause of a channel.
    node_args = ["--default-replication-factor=1"]

    def test_backup_every_member_and_restore_the_cluster(self):
        c = self.make(3)
        c.start()
        leader = c.find_leader()
        st, body = leader.request("POST", "/v1/topics", {"name": "ct", "partitions": 3})
        self.assertEqual(st, 201, body)
        owners = wait_until("owners of ct on every node",
                            lambda: all(n.owners("ct") and "0" not in n.owners("ct")
                                        for n in c.nodes) and c.nodes[0].owners("ct"))
        self.assertEqual(sorted(set(owners)), ["1", "2", "3"])
        sent = set()
        for i in range(90):
            node = c.nodes[i % 3]
            body = f"m-{i}"
            st, _ = node.request("POST", f"/v1/topics/ct/produce?key=k{i}", body,
                                 headers={"Content-Type": "application/octet-stream"})
            self.assertEqual(st, 202, (i, node.id))
            sent.add(body)

        # A replicated topic's channel paused on one follower only (a
        # pause is the node's: docs/cluster.md): each member's copy
        # carries its own pause file, and only that node comes back
        # paused. Its copy has no file of the channel (no settle reached
        # it), so the channel is made by its catalog at the restored start.
        st, body = leader.request("POST", "/v1/topics", {"name": "rt", "partitions": 1,
                                                         "replication_factor": 3,
                                                         "min_insync_replicas": 1})
        self.assertEqual(st, 201, body)
        st, body = leader.request("POST", "/channel/create?topic=rt&channel=held",
                                  headers=CLIENT)
        self.assertEqual(st, 200, body)
        for n in c.nodes:
            wait_until(f"held's pause file on node {n.id}", lambda n=n: os.path.exists(
                os.path.join(n.data, "topics", "rt", "held.cpause")), timeout=90)
        rt_leader = wait_until("rt/0's leader", lambda: rt_lead(leader))
        follower = next(n for n in c.nodes if str(n.id) != str(rt_leader))
        st, body = follower.request("POST", "/channel/pause?topic=rt&channel=held",
                                    headers=CLIENT)
        self.assertEqual(st, 200, body)
        self.assertIs(held_paused(follower), True)

        # A factor-1 topic and its channel paused on a node holding no
        # copy of it: its directory there holds only the pause's files.
        st, body = leader.request("POST", "/v1/topics", {"name": "nt", "partitions": 1})
        self.assertEqual(st, 201, body)
        nt_owner = wait_until("nt's owner", lambda: (leader.owners("nt") or [None])[0])
        st, body = leader.request("POST", "/channel/create?topic=nt&channel=nc", headers=CLIENT)
        self.assertEqual(st, 200, body)
        bare = next(n for n in c.nodes if str(n.id) != str(nt_owner))
        wait_until(f"nc on node {bare.id}", lambda: paused(bare, "nt", "nc") is False, timeout=90)
        for what in ("topic/pause?topic=nt", "channel/pause?topic=nt&channel=nc"):
            st, body = bare.request("POST", f"/{what}", headers=CLIENT)
            self.assertEqual(st, 200, body)
        ntdir = os.path.join(bare.data, "topics", "nt")
        self.assertFalse(os.path.exists(os.path.join(ntdir, "0")))
        self.assertTrue(os.path.exists(os.path.join(ntdir, "pause")))

        bdir = os.path.join(c.dir, "backup")
        r = ternctl("backup", bdir, port=c.nodes[1].http_port)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + c.logs())
        with open(os.path.join(bdir, "backup.json")) as f:
            top = json.load(f)
        self.assertEqual(sorted(top["nodes"]), [1, 2, 3])
        ingress = []
        for n in c.nodes:
            with open(os.path.join(bdir, str(n.id), "manifest.json")) as f:
                man = json.load(f)
            self.assertEqual(man["node_id"], n.id)
            self.assertEqual(sorted(v["id"] for v in man["metastore"]["voters"]), [1, 2, 3])
            ingress += [x["path"] for x in man["files"] if x["path"].startswith("ingress/")]
            self.assertIn("topics/rt/held.cpause", [x["path"] for x in man["files"]], n.id)
            if n is bare:
                for f in ("pause", "nc.cpause", "nc.cstamp", "stamp"):
                    self.assertIn(f"topics/nt/{f}", [x["path"] for x in man["files"]], n.id)
        # Produces to partitions of other nodes went through ingress logs,
        # which are copied with their checkpoints.
        self.assertTrue(any(p.endswith(".log") for p in ingress), ingress)
        self.assertTrue(any(p == "ingress/checkpoint" for p in ingress), ingress)

        # More after the backup: not in the restored cluster's promise.
        for n in c.nodes:
            self.assertEqual(n.stop(), 0, n.log())
        # A restore of a cluster asks which node.
        r = ternctl("restore", bdir, "--data-path", os.path.join(c.dir, "x"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("--node", r.stderr)
        for n in c.nodes:
            os.rename(n.data, n.data + ".old")
            r = ternctl("restore", bdir, "--data-path", n.data, "--node", str(n.id))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        marks = {n.id: len(n.log()) for n in c.nodes}  # the restored run's log from here
        for n in c.nodes:
            n.start()
        c.wait_ready()
        leader = c.find_leader()
        for n in c.nodes:
            # The restored Raft state is used, not bootstrapped over: the
            # only bootstrap in each node's log is the first start's.
            self.assertEqual(n.log().count("new cluster bootstrapped"), 1, n.log())
        for n in c.nodes:
            self.assertEqual(wait_until(f"ct's owners on node {n.id}",
                                        lambda n=n: n.owners("ct")), owners)
        for n in c.nodes:
            # Listed once ready (made by the catalog where no file of it
            # was restored: unpaused in /stats until then).
            wait_until(f"held ready on node {n.id}",
                       lambda n=n: held_paused(n) is not None and any(
                           x in n.log()[marks[n.id]:] for x in (
                               "channel held of rt created", "channel held of rt/0: settled")),
                       timeout=90)
            self.assertEqual(held_paused(n), n.id == follower.id, (n.id, n.log()))
            want = (n is bare, n is bare)  # the topic's pause and nc's
            wait_until(f"nt and nc {'paused' if n is bare else 'unpaused'} on node {n.id}",
                       lambda n=n, want=want: (paused(n, "nt"), paused(n, "nt", "nc")) == want,
                       timeout=90)
        got = set()

        def drained():
            st, body = leader.request("GET", "/v1/topics/ct/consume?wait=1s&max=100",
                                      headers={"X-Tern-Client": "test"}, timeout=30)
            if st == 200:
                for m in body["messages"]:
                    got.add(m["payload"])
                    s2, b2 = leader.request(
                        "POST", f"/v1/topics/ct/ack?receipt_handle={m['receipt_handle']}",
                        headers={"X-Tern-Client": "test"})
                    self.assertIn(s2, (200, 204), b2)
            return sent <= got

        wait_until("every message acknowledged before the backup", drained, timeout=90,
                   interval=0)
        self.assertEqual(sent - got, set())
        for n in c.nodes:
            self.assertEqual(n.stop(), 0, n.log())


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


if __name__ == "__main__":
    main(options=[("--ternctl", {"required": True})], configure=configure)
