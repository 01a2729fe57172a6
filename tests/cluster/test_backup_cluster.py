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
import struct
import subprocess
import sys
import unittest

from harness import PASSWORD, ClusterTest, main, wait_until
from nsqwire import crc32c

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

    def paused_without_a_copy(self, c, leader, topic, channel):
        """A factor-1 topic and its channel made through leader, both
        paused on a node holding no copy of the topic: that node."""
        st, body = leader.request("POST", "/v1/topics", {"name": topic, "partitions": 1})
        self.assertEqual(st, 201, body)
        owner = wait_until(f"{topic}'s owner", lambda: (leader.owners(topic) or [None])[0])
        st, body = leader.request("POST", f"/channel/create?topic={topic}&channel={channel}",
                                  headers=CLIENT)
        self.assertEqual(st, 200, body)
        node = next(n for n in c.nodes if str(n.id) != str(owner))
        wait_until(f"{channel} on node {node.id}",
                   lambda: paused(node, topic, channel) is False, timeout=90)
        for what in (f"topic/pause?topic={topic}",
                     f"channel/pause?topic={topic}&channel={channel}"):
            st, body = node.request("POST", f"/{what}", headers=CLIENT)
            self.assertEqual(st, 200, body)
        return node
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
        bare = self.paused_without_a_copy(c, leader, "nt", "nc")
        ntdir = os.path.join(bare.data, "topics", "nt")
        self.assertFalse(os.path.exists(os.path.join(ntdir, "0")))
        self.assertTrue(os.path.exists(os.path.join(ntdir, "pause")))
        # Another such topic, ot, whose copy in the backup is to carry the
        # stamp of another topic of the name than the one the backup's
        # metastore records (as a backup during which ot was deleted and
        # made again would, between the metastore's snapshot and the copy
        # of the node's files). Its pauses are that other topic's: the
        # restored node must not take them for the recorded ot's.
        stale = self.paused_without_a_copy(c, leader, "ot", "oc")
        self.assertTrue(os.path.exists(os.path.join(stale.data, "topics", "ot", "pause")))

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
        # ot's stamp in stale's copy made an earlier record's (1 s older),
        # the manifest's length and CRC32C kept true to the file.
        mpath = os.path.join(bdir, str(stale.id), "manifest.json")
        with open(mpath) as f:
            man = json.load(f)
        spath = os.path.join(bdir, str(stale.id), "data", "topics", "ot", "stamp")
        with open(spath, "rb") as f:
            magic, _, ms = struct.unpack("<IIq", f.read())
        tail = struct.pack("<q", ms - 1000)
        old_stamp = struct.pack("<II", magic, crc32c(tail)) + tail
        with open(spath, "wb") as f:
            f.write(old_stamp)
        for x in man["files"]:
            if x["path"] == "topics/ot/stamp":
                x["length"], x["crc32c"] = len(old_stamp), crc32c(old_stamp)
        with open(mpath, "w") as f:
            json.dump(man, f)
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
        # The earlier ot's directory is not restored.
        self.assertFalse(os.path.exists(os.path.join(stale.data, "topics", "ot")))
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
            # The earlier ot's pauses stay behind: ot and oc unpaused
            # everywhere.
            wait_until(f"ot and oc listed on node {n.id}",
                       lambda n=n: None not in (paused(n, "ot"), paused(n, "ot", "oc")),
                       timeout=90)
            self.assertEqual((paused(n, "ot"), paused(n, "ot", "oc")), (False, False),
                             (n.id, n.log()))
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
