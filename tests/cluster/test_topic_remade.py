"""A topic deleted and made again under the same name while one node was
down: when that node comes back, the partitions it owns of the new topic
start empty. Its files of the old topic (the old messages, the old
channels' positions) are deleted, never served under the new one: each
topic directory carries the creation time of the metastore record it was
made from (storage-format.md, "Topic stamp"), and the node compares it
with the record its replica holds once it has caught up.

Run: python3 tests/cluster/test_topic_remade.py --ternd build/ternd --ternctl build/ternctl
"""
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import PASSWORD, wait_until  # noqa: E402

TERNCTL = None

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-topic-remade"}


def consume_all(node, topic, partition, channel, most=None):
    """Every message node answers for one partition and channel, acked,
    until a consume finds nothing or most were (payloads, in order)."""
    got = []
    while most is None or len(got) < most:
        status, m = node.request("GET", f"/v1/topics/{topic}/consume?partition={partition}"
                                 f"&channel={channel}")
        if status == 204:
            return got
        assert status == 200, (status, m)
        got.append(m["payload"])
        status, body = node.request("POST", f"/v1/topics/{topic}/ack?channel={channel}"
                                    f"&receipt_handle={m['receipt_handle']}", headers=CLIENT)
        assert status == 204, (status, body)
    return got


def old_bytes_on_disk(node, topic):
    """The files under node's directory of topic that hold b"old-"."""
    found = []
    for root, _, files in os.walk(os.path.join(node.data, "topics", topic)):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                if b"old-" in f.read():
                    found.append(os.path.join(root, name))
    return found


def placed(test, c, topic):
    """topic (three partitions, one on each node) made through c's
    metastore leader once every member is alive, and known on every node.
    (the leader, another node, the index of that node's partition)."""
    c.wait_alive(3)
    first = c.find_leader()
    down = next(n for n in c.nodes if n is not first)
    status, body = first.request("POST", "/v1/topics", {"name": topic, "partitions": 3})
    test.assertEqual(status, 201, body)
    wait_until("the topic on every node",
               lambda: all(n.owners(topic) == ["1", "2", "3"] for n in c.nodes), 30)
    return first, down, ["1", "2", "3"].index(str(down.id))


class TopicRemade(harness.ClusterTest):
    # The new topic is made while the down node is still "heard from
    # lately" by the metastore leader (two election timeouts), so one of its
    # partitions is placed on that node again, as in a quick restart: the
    # purge's dial to the down node gives up fast, and the election
    # timeout is long enough for the delete and the creation to fit.
    node_args = ["--default-replication-factor=1", "--raft-election-timeout=3s",
                 "--cluster-rpc-dial-timeout=300ms"]

    def test_a_node_down_through_a_delete_and_a_creation_serves_the_new_topic(self):
        c = self.make(3)
        c.start()
        c.wait_alive(3)
        leader = c.find_leader()
        first = leader
        down = next(n for n in c.nodes if n is not leader)
        other = next(n for n in c.nodes if n is not leader and n is not down)
        status, body = first.request("POST", "/v1/topics", {"name": "re", "partitions": 3})
        self.assertEqual(status, 201, body)
        wait_until("the old topic on every node",
                   lambda: all(n.owners("re") == ["1", "2", "3"] for n in c.nodes), 30)
        p = ["1", "2", "3"].index(str(down.id))
        # The down node owns partition p: messages there, and a channel
        # that took one of them: all of the old topic.
        for i in range(3):
            status, body = first.request("POST", f"/v1/topics/re/produce?partition={p}",
                                         f"old-{i}".encode(), headers=OCTET)
            self.assertEqual(status, 202, body)
        wait_until("the old messages in the down node's log",
                   lambda: down.request("GET", "/v1/topics/re")[1]["partition_stats"][p]
                   .get("next_offset") == 3, 30)
        status, m = down.request("GET", f"/v1/topics/re/consume?partition={p}&channel=c")
        self.assertEqual((status, m["payload"]), (200, "old-0"), m)
        status, body = down.request(
            "POST", f"/v1/topics/re/ack?channel=c&receipt_handle={m['receipt_handle']}",
            headers=CLIENT)
        self.assertEqual(status, 204, body)

        self.assertEqual(down.stop(), 0)
        # Deleted through the leader while the node is down: the record
        # goes (the purge cannot reach the down node: 500 naming it), and the
        # topic is made again at once, placed as before.
        status, body = first.request("DELETE", "/v1/topics/re", timeout=60)
        self.assertIn(status, (204, 500), body)
        if status == 500:
            self.assertIn(f"node {down.id}", body["error"], body)
        status, body = first.request("POST", "/v1/topics", {"name": "re", "partitions": 3})
        self.assertEqual(status, 201, body)
        self.assertEqual(first.owners("re"), ["1", "2", "3"],
                         "the down node was passed over: the creation came too late")

        down.start()
        c.wait_ready([down])
        wait_until("the down node sees the new topic",
                   lambda: down.owners("re") == ["1", "2", "3"], 30)
        wait_until("the down node deleted the old topic's files",
                   lambda: "topic re is no longer recorded as it is here" in down.log(), 30)
        # The new topic's partition p holds what was produced to it after
        # the node came back, and nothing of the old one, through any node.
        for i in range(2):
            status, body = first.request("POST", f"/v1/topics/re/produce?partition={p}",
                                         f"new-{i}".encode(), headers=OCTET)
            self.assertEqual(status, 202, body)
        wait_until("the new messages in the node's log",
                   lambda: down.request("GET", "/v1/topics/re")[1]["partition_stats"][p]
                   .get("next_offset", 0) >= 2, 30)
        self.assertEqual(consume_all(other, "re", p, "c"), ["new-0", "new-1"])
        status, stats = down.request("GET", "/v1/topics/re")
        self.assertEqual(status, 200, stats)
        self.assertEqual(stats["partition_stats"][p]["next_offset"], 2, stats)
        self.assertEqual(old_bytes_on_disk(down, "re"), [])

        # Across a graceful restart of that node the new topic stays (its
        # stamp is the new record's: nothing is deleted again).
        self.assertEqual(down.stop(), 0)
        down.start()
        c.wait_ready([down])
        status, body = first.request("POST", f"/v1/topics/re/produce?partition={p}", b"after",
                                     headers=OCTET)
        self.assertEqual(status, 202, body)
        # Taken by another node, the record reaches the owner's log when
        # that node's ingress log commits it there (a moment later).
        wait_until("the record after the restart in the node's log",
                   lambda: down.request("GET", "/v1/topics/re")[1]["partition_stats"][p]
                   .get("next_offset", 0) >= 3, 30)
        self.assertEqual(consume_all(down, "re", p, "c"), ["after"])
        self.assertEqual(down.log().count("topic re is no longer recorded as it is here"), 1,
                         down.log())

        # A directory from before stamps (the stamp file taken away while
        # the node is stopped) takes the topic recorded under its name, keeps
        # its messages, and gets that record's stamp back.
        q = ["1", "2", "3"].index(str(other.id))
        status, body = other.request("POST", f"/v1/topics/re/produce?partition={q}", b"kept",
                                     headers=OCTET)  # in its own log at once
        self.assertEqual(status, 202, body)
        stamp = os.path.join(other.data, "topics", "re", "stamp")
        self.assertTrue(os.path.exists(stamp))
        self.assertEqual(other.stop(), 0)
        with open(stamp, "rb") as f:
            before = f.read()
        os.unlink(stamp)
        mark = len(other.log())
        other.start()
        c.wait_ready([other])
        wait_until("the stamp written again", lambda: os.path.exists(stamp), 30)
        with open(stamp, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(consume_all(first, "re", q, "c"), ["kept"])
        self.assertNotIn("no longer recorded", other.log()[mark:])

    def test_a_replica_down_through_a_delete_and_a_creation_copies_only_the_new_topic(self):
        c = self.make(3)
        c.start()
        c.wait_alive(3)
        leader = c.find_leader()
        down = next(n for n in c.nodes if n is not leader)
        spec = {"name": "r3", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2}
        status, body = leader.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        for i in range(3):
            status, body = leader.request("POST", "/v1/topics/r3/produce", f"old-{i}".encode(),
                                          headers=OCTET)
            self.assertEqual(status, 202, body)
        # Acknowledged: on min_insync disks; wait for the third copy too.
        wait_until("the old messages on the replica's disk",
                   lambda: old_bytes_on_disk(down, "r3") != [], 30)

        self.assertEqual(down.stop(), 0)
        status, body = leader.request("DELETE", "/v1/topics/r3", timeout=60)
        self.assertIn(status, (204, 500), body)
        status, body = leader.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        status, body = leader.request("GET", "/v1/topics/r3")
        self.assertIn(str(down.id), body["partition_stats"][0]["replicas"], body)

        down.start()
        c.wait_ready([down])
        wait_until("the down node deleted the old topic's files",
                   lambda: "topic r3 is no longer recorded as it is here" in down.log(), 30)

        def produced(payload):
            status, body = leader.request("POST", "/v1/topics/r3/produce", payload,
                                          headers=OCTET)
            return status == 202

        for i in range(2):
            wait_until(f"new-{i} acknowledged", lambda: produced(f"new-{i}".encode()), 60)
        wait_until("the down node back in sync",
                   lambda: str(down.id) in leader.request("GET", "/v1/topics/r3")[1]
                   ["partition_stats"][0].get("isr", []), 60)
        self.assertEqual(old_bytes_on_disk(down, "r3"), [])
        for node in c.nodes:
            self.assertEqual(consume_all(node, "r3", 0, f"c{node.id}"), ["new-0", "new-1"])

    def test_every_replica_of_a_new_topic_is_stamped(self):
        # A node that only follows a partition (its copy opened by the
        # replica manager, the engine's partition on the leader) keeps the
        # stamp too: without it, a restart takes whatever topic is recorded
        # under the name by then for the one its copy is of.
        c = self.make(3)
        c.start()
        c.wait_alive(3)
        leader = c.find_leader()
        spec = {"name": "s3", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2}
        status, body = leader.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        status, body = leader.request("POST", "/v1/topics/s3/produce", b"one", headers=OCTET)
        self.assertEqual(status, 202, body)
        wait_until("a copy on every node",
                   lambda: all(len(leader.request("GET", "/v1/topics/s3")[1]["partition_stats"][0]
                                   .get("isr", [])) == 3 for _ in [0]), 60)
        for node in c.nodes:
            wait_until(f"node {node.id}'s stamp",
                       lambda: os.path.exists(os.path.join(node.data, "topics", "s3", "stamp")), 30)

        # So such a node, down through a deletion and a creation of the
        # name, drops its copy of the old topic when it comes back.
        lead = leader.request("GET", "/v1/topics/s3")[1]["partition_stats"][0]["leader"]
        down = next(n for n in c.nodes if str(n.id) != str(lead) and n is not leader)
        other = next(n for n in c.nodes if n is not down)
        for i in range(3):
            status, body = other.request("POST", "/v1/topics/s3/produce", f"old-{i}".encode(),
                                         headers=OCTET)
            self.assertEqual(status, 202, body)
        wait_until("the old messages on the follower's disk",
                   lambda: old_bytes_on_disk(down, "s3") != [], 30)
        self.assertEqual(down.stop(), 0)
        status, body = other.request("DELETE", "/v1/topics/s3", timeout=60)
        self.assertIn(status, (204, 500), body)
        status, body = other.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        down.start()
        c.wait_ready([down])
        wait_until("the follower deleted the old topic's files",
                   lambda: "topic s3 is no longer recorded as it is here" in down.log(), 30)
        wait_until("new acknowledged",
                   lambda: other.request("POST", "/v1/topics/s3/produce", b"new",
                                         headers=OCTET)[0] == 202, 60)
        wait_until("the follower back in sync",
                   lambda: str(down.id) in other.request("GET", "/v1/topics/s3")[1]
                   ["partition_stats"][0].get("isr", []), 60)
        self.assertEqual(old_bytes_on_disk(down, "s3"), [])
        self.assertEqual(consume_all(down, "s3", 0, "c"), ["new"])

    def backed_up(self, topic, prefix):
        """Three nodes; topic (factor 1, three partitions) with three
        messages prefix-0.. on the partition of a node other than the
        metastore leader, then a backup of the cluster. (leader, that
        node, its partition, the backup's directory, the topic's
        created_at in seconds)."""
        c = self.make(3)
        c.start()
        first, down, p = placed(self, c, topic)
        for i in range(3):
            status, body = first.request("POST", f"/v1/topics/{topic}/produce?partition={p}",
                                         f"{prefix}-{i}".encode(), headers=OCTET)
            self.assertEqual(status, 202, body)
        wait_until("the messages in the node's log",
                   lambda: down.request("GET", f"/v1/topics/{topic}")[1]["partition_stats"][p]
                   .get("next_offset") == 3, 30)
        created = first.request("GET", f"/v1/topics/{topic}")[1]["created_at"]
        bdir = os.path.join(c.dir, "backup")
        r = ternctl("backup", bdir, port=first.http_port)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return first, down, p, bdir, created

    def restore_rejoin(self, node, bdir):
        """node's data directory replaced by its backup, to rejoin."""
        os.rename(node.data, node.data + ".old")
        r = ternctl("restore", bdir, "--data-path", node.data, "--node", str(node.id), "--rejoin")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_node_restored_to_rejoin_drops_a_topic_made_again_since_its_backup(self):
        # `ternctl restore --rejoin` stamps the restored topic directories
        # with the backup's records, so that a topic deleted and made again
        # since the backup is told apart when the node comes back, as for
        # a node that was down (its restored files deleted, not served as
        # the new topic's).
        first, down, p, bdir, created = self.backed_up("rb", "old")
        self.assertEqual(down.stop(), 0)
        status, body = first.request("DELETE", "/v1/topics/rb", timeout=60)
        self.assertIn(status, (204, 500), body)
        status, body = first.request("POST", "/v1/topics", {"name": "rb", "partitions": 3})
        self.assertEqual(status, 201, body)
        self.assertEqual(first.owners("rb"), ["1", "2", "3"],
                         "the down node was passed over: the creation came too late")
        self.restore_rejoin(down, bdir)
        # The stamp is the backup's record's (storage-format.md: TNS1, CRC,
        # Unix ms), not the one made since.
        with open(os.path.join(down.data, "topics", "rb", "stamp"), "rb") as f:
            magic, _, ms = struct.unpack("<IIQ", f.read())
        self.assertEqual(magic, 0x31534E54)
        self.assertEqual(ms // 1000, created)
        self.assertNotEqual(old_bytes_on_disk(down, "rb"), [])

        # Back, it serves only the new topic's messages and keeps none of
        # the old one's bytes.
        down.start()
        down.wait_ready()
        wait_until("the restored node deleted the old topic's files",
                   lambda: "topic rb is no longer recorded as it is here" in down.log(), 30)
        wait_until("new acknowledged",
                   lambda: first.request("POST", f"/v1/topics/rb/produce?partition={p}", b"new",
                                         headers=OCTET)[0] == 202, 60)
        # Taken by another node's ingress log: committed to the owner a
        # moment later.
        wait_until("new in the node's log",
                   lambda: down.request("GET", "/v1/topics/rb")[1]["partition_stats"][p]
                   .get("next_offset", 0) >= 1, 30)
        self.assertEqual(consume_all(down, "rb", p, "c"), ["new"])
        self.assertEqual(old_bytes_on_disk(down, "rb"), [])

    def test_a_node_restored_to_rejoin_keeps_a_topic_recorded_since_its_backup(self):
        # Restored with --rejoin, the node's metastore starts empty and is
        # "ready" at its bootstrap entry, before the leader's log reaches
        # it: deletions are followed only once it was confirmed current,
        # so its factor-1 partition comes back as it was at the backup
        # (operations.md) instead of being deleted as unrecorded.
        first, down, p, bdir, _ = self.backed_up("rk", "kept")
        self.assertEqual(down.stop(), 0)
        self.restore_rejoin(down, bdir)
        down.start()
        down.wait_ready()
        wait_until("the node following the records",
                   lambda: down.owners("rk") == ["1", "2", "3"], 30)
        self.assertEqual(consume_all(down, "rk", p, "c"), ["kept-0", "kept-1", "kept-2"])
        self.assertNotIn("topic rk is no longer recorded as it is here", down.log())

def ternctl(*args, port=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    if port is not None:
        env.update(TERN_URL=f"http://127.0.0.1:{port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
    return subprocess.run([TERNCTL, *args], env=env, capture_output=True, text=True,
                          timeout=300)


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
