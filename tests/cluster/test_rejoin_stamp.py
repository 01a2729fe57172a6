"""A node restored with `ternctl restore --rejoin` keeps a channel that was
deleted and made again between its backup's metastore snapshot and the
copy of its files: the restored channel stamp (storage-format.md,
"Channel stamp") is the one that was beside the files when they were
copied, so the node, back in its cluster, takes the files for the
channel recorded now: it delivers the one message left on it, and
none of those acked.

A backup session takes the metastore's snapshot at its POST and copies
the files after (up to 15 s later while it waits for durable ends):
here the copy is held (TERN_TEST_BACKUP_TAKE_HOLD, ternd-test) while
the channel is deleted and made again, and every message of its
partition acked on the new channel.

Before the fix the restore stamped the channel with the snapshot's
record (the deleted channel's): back in its cluster, the node found its
record with another stamp, deleted the new channel's files and made it
again at the partition's end ("recorded with another stamp"): the
message it had left to deliver never was.

The same for a topic deleted and made again in that window (its
partition here factor 1): the restored topic stamp ("Topic stamp") is
the one beside the copied files, the new topic's, so the node keeps
them: its messages below the backup's durable end, and its channel's
position. Before the fix the restore stamped the directory with the
snapshot's record (the deleted topic's): back in its cluster, the node
deleted the new topic's files here ("no longer recorded as it is here")
and made it again empty, losing its acknowledged messages.

The new topic's log is another than the one whose durable end the
backup took at its POST: the copy finds it by the topic's stamp and
takes it as it stands, up to what is durable of it. Before, it was cut
at the old topic's durable end (a new log longer than that lost its
records past it), and a new log shorter than that failed the whole
backup as damage ("... ends at offset 2, below the durable end 3").

Run: python3 tests/cluster/test_rejoin_stamp.py --ternd build/ternd-test --ternctl build/ternctl
"""
import json
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_topic_remade as remade  # noqa: E402
from harness import PASSWORD, wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
TOPIC = "rs"
CHANNEL = "c"
REPLACED = f"channel {CHANNEL} of {TOPIC} is recorded with another stamp"
TOPIC2 = "rt"  # the topic deleted and made again
TOPIC_GONE = f"topic {TOPIC2} is no longer recorded as it is here"


def ternctl_cmd(*args, port):
    """ternctl's command line and environment, as remade.ternctl runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env.update(TERN_URL=f"http://127.0.0.1:{port}", TERN_USER="admin", TERN_PASSWORD=PASSWORD)
    return [remade.TERNCTL, *args], env


def stamp_on_disk(node):
    """The channel's stamp in node's data directory (storage-format.md:
    TNSC, CRC, the record's id), or None when it has none."""
    try:
        with open(os.path.join(node.data, "topics", TOPIC, CHANNEL + ".cstamp"), "rb") as f:
            magic, _, stamp = struct.unpack("<IIQ", f.read())
    except (FileNotFoundError, struct.error):
        return None
    assert magic == 0x43534E54, hex(magic)
    return stamp


def topic_stamp_on_disk(node, topic):
    """topic's stamp in node's data directory (storage-format.md: TNS1,
    CRC, the record's creation time in Unix ms), or None."""
    try:
        with open(os.path.join(node.data, "topics", topic, "stamp"), "rb") as f:
            magic, _, ms = struct.unpack("<IIQ", f.read())
    except (FileNotFoundError, struct.error):
        return None
    assert magic == 0x31534E54, hex(magic)
    return ms


def consume(node, partition, most=None, topic=TOPIC):
    return remade.consume_all(node, topic, partition, CHANNEL, most)


class RejoinStamp(harness.ClusterTest):
    # Factor 1: the restored node owns its partition's only copy, so its
    # channel's files are the channel's state.
    node_args = ["--default-replication-factor=1", "--raft-election-timeout=3s",
                 "--cluster-rpc-dial-timeout=300ms"]

    def produce(self, via, p, prefix, topic=TOPIC, count=3):
        for i in range(count):
            status, body = via.request("POST", f"/v1/topics/{topic}/produce?partition={p}",
                                       f"{prefix}-{i}".encode(), headers=OCTET)
            self.assertEqual(status, 202, body)

    def made(self, topic):
        """Three nodes, each able to hold its backup's copy; topic (factor
        1, three partitions) with the channel and three messages prefix
        old-.. on the partition of a node other than the metastore leader
        (the owner). (cluster, leader, owner, its partition)."""
        c = self.make(3).start_with_files(TERN_TEST_BACKUP_TAKE_HOLD="take-hold")
        first, down, p = remade.placed(self, c, topic)
        self.made_again(first, down, p, topic, "old")
        return c, first, down, p

    def made_again(self, first, down, p, topic, prefix, count=3):
        """The channel on topic (known on every node) and count messages
        prefix-0.. in down's log of partition p."""
        status, body = first.request("POST", f"/channel/create?topic={topic}&channel={CHANNEL}")
        self.assertEqual(status, 200, body)
        wait_until("the channel's stamp on the owner's disk",
                   lambda: os.path.exists(os.path.join(down.data, "topics", topic,
                                                       CHANNEL + ".cstamp")), 30)
        self.produce(first, p, prefix, topic, count)
        wait_until("the messages in the owner's log",
                   lambda: down.request("GET", f"/v1/topics/{topic}")[1]["partition_stats"][p]
                   .get("next_offset") == count, 30)

    def held_backup(self, c, first, down, at, change):
        """A backup whose copy at down is held at `at`
        (TERN_TEST_BACKUP_TAKE_HOLD: "" before any file, after the
        metastore snapshot; "stamps" before the pause files and stamps)
        while change() runs (only there: ternctl asks the members in
        turn). The backup's directory."""
        hold = os.path.join(down.dir, "take-hold")
        with open(hold, "w") as f:
            f.write(at)
        bdir = os.path.join(c.dir, "backup")
        cmd, env = ternctl_cmd("--timeout", "120s", "backup", bdir, port=first.http_port)
        backup = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        try:
            wait_until("the owner's copy held",
                       lambda: "TERN_TEST_BACKUP_TAKE_HOLD" in down.log()
                       or backup.poll() is not None, 30)
            if backup.poll() is not None:
                self.fail(f"the backup ended: {backup.stdout.read()}")
            change()
        finally:
            if os.path.exists(hold):
                os.unlink(hold)
        out, _ = backup.communicate(timeout=300)
        self.assertEqual(backup.returncode, 0, out)
        return bdir

    def rejoined(self, first, down, bdir, topic):
        """down's data directory replaced by its backup (restore
        --rejoin), then started again and current with the records: its
        catalog has compared the topic's and channels' stamps with them.
        What down logged since it was restored."""
        self.assertEqual(down.stop(), 0)
        mark = len(down.log())
        os.rename(down.data, down.data + ".old")
        r = remade.ternctl("restore", bdir, "--data-path", down.data, "--node", str(down.id),
                           "--rejoin")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        down.start()
        down.wait_ready()
        wait_until("the node following the records", lambda: down.owners(topic) == ["1", "2", "3"],
                   30)
        # A topic recorded after: once the node's replica has it, its
        # catalog has compared the stamps with the records.
        status, body = first.request("POST", "/v1/topics", {"name": "marker", "partitions": 1})
        self.assertEqual(status, 201, body)
        wait_until("the node's replica current",
                   lambda: down.request("GET", "/v1/topics/marker")[0] == 200, 60)
        time.sleep(3)
        return down.log()[mark:]

    def remade_while_held(self, at):
        """The topic made (made()); a backup whose copy at the owner is
        held at `at` while the channel is deleted and made again and
        old-0, old-1 acked on the new one. (cluster, leader, owner, its
        partition, the backup's directory, the old channel's stamp, the
        new one's)."""
        c, first, down, p = self.made(TOPIC)
        old = stamp_on_disk(down)
        stamps = {}

        def change():
            status, body = first.request(
                "POST", f"/channel/delete?topic={TOPIC}&channel={CHANNEL}", timeout=60)
            self.assertEqual(status, 200, body)
            wait_until("the old channel's stamp gone from the owner's disk",
                       lambda: stamp_on_disk(down) != old, 30)
            wait_until("the channel made again", lambda: first.request(
                "POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200, 30)
            stamps["new"] = wait_until("the new channel's stamp on the owner's disk",
                                       lambda: stamp_on_disk(down), 30)
            self.assertNotEqual(stamps["new"], old)
            # old-0 and old-1 acked on it, old-2 left to deliver.
            self.assertEqual(consume(down, p, 2), ["old-0", "old-1"])

        bdir = self.held_backup(c, first, down, at, change)
        return c, first, down, p, bdir, old, stamps["new"]

    def test_a_channel_made_again_while_the_copy_waited_is_kept(self):
        c, first, down, p, bdir, old, new = self.remade_while_held("")
        log = self.rejoined(first, down, bdir, TOPIC)
        self.assertEqual(consume(down, p), ["old-2"],
                         "the new channel's position not kept (old-2 is its one message left)")
        self.assertNotIn(REPLACED, log)
        self.assertEqual(stamp_on_disk(down), new)

    def test_a_stamp_that_changed_as_the_files_were_copied_is_left_out(self):
        # The channel's files copied, then it is deleted and made again
        # before its stamp is taken: the files may be of either channel,
        # so the backup carries no stamp for it (restore --rejoin then
        # stamps it from the snapshot, as for an earlier release's backup)
        # and says so; its pause file is carried as ever.
        c, first, down, p, bdir, old, new = self.remade_while_held("stamps")
        with open(os.path.join(bdir, str(down.id), "manifest.json")) as f:
            paths = [x["path"] for x in json.load(f)["files"]]
        self.assertIn(f"topics/{TOPIC}/{CHANNEL}.cpause", paths)
        self.assertNotIn(f"topics/{TOPIC}/{CHANNEL}.cstamp", paths)
        self.assertIn("1 channel stamp(s) left out", down.log())
        # The other channel's stamp (the topic's "default") is carried.
        self.assertIn(f"topics/{TOPIC}/default.cstamp", paths)

    def topic_remade_while_held(self, at, count=3):
        """TOPIC2 made (made()); a backup whose copy at the owner is held
        at `at` while the topic is deleted and made again, placed as
        before, with the channel and count messages new-0.. on the owner's
        partition, all but the last acked. The owner's log of the old
        topic ended at offset 3, the backup's durable end for it (the new
        topic's log may end before or after it). (cluster, leader, owner,
        its partition, the backup's directory, the old topic's stamp, the
        new one's)."""
        c, first, down, p = self.made(TOPIC2)
        old = topic_stamp_on_disk(down, TOPIC2)
        self.assertIsNotNone(old)
        stamps = {}

        def change():
            status, body = first.request("DELETE", f"/v1/topics/{TOPIC2}", timeout=60)
            self.assertEqual(status, 204, body)
            status, body = first.request("POST", "/v1/topics", {"name": TOPIC2, "partitions": 3})
            self.assertEqual(status, 201, body)
            wait_until("the topic made again on every node",
                       lambda: all(n.owners(TOPIC2) == ["1", "2", "3"] for n in c.nodes), 30)
            stamps["new"] = wait_until(
                "the new topic's stamp on the owner's disk",
                lambda: (lambda ms: ms if ms not in (None, old) else None)(
                    topic_stamp_on_disk(down, TOPIC2)), 30)
            self.made_again(first, down, p, TOPIC2, "new", count)
            self.assertEqual(consume(down, p, count - 1, TOPIC2),
                             [f"new-{i}" for i in range(count - 1)])

        bdir = self.held_backup(c, first, down, at, change)
        return c, first, down, p, bdir, old, stamps["new"]

    def assert_new_topic_kept(self, first, down, p, bdir, new, left):
        """down restored from bdir with --rejoin keeps the new topic's
        files as the topic the cluster records: it delivers `left`."""
        log = self.rejoined(first, down, bdir, TOPIC2)
        self.assertEqual(consume(down, p, topic=TOPIC2), left,
                         "the new topic's files not kept as they were copied")
        self.assertNotIn(TOPIC_GONE, log)
        self.assertEqual(topic_stamp_on_disk(down, TOPIC2), new)
        # Carried by the backup, as it was beside the copied files.
        with open(os.path.join(bdir, str(down.id), "manifest.json")) as f:
            paths = [x["path"] for x in json.load(f)["files"]]
        self.assertIn(f"topics/{TOPIC2}/stamp", paths)

    def test_a_topic_made_again_while_the_copy_waited_is_kept(self):
        # The new topic's partition is copied up to what is durable of it
        # (new-0..new-3, past the old topic's durable end, 3), new-0..new-2
        # settled. Restored with --rejoin, the node keeps its files as the
        # topic the cluster records: new-3 is the one message left.
        c, first, down, p, bdir, old, new = self.topic_remade_while_held("", 4)
        self.assert_new_topic_kept(first, down, p, bdir, new, ["new-3"])
        self.assertIn(f"partition {TOPIC2}/{p} is copied as the new topic's", down.log())

    def test_a_topic_made_again_shorter_while_the_copy_waited_is_kept(self):
        # The new topic's log (new-0, new-1) ends before the old topic's
        # durable end (3): not damage, the backup does not fail (it did,
        # with 500 "... ends at offset 2, below the durable end 3: data
        # failed its checksum or structure check"); the new topic's
        # partition is copied as it is, and kept with --rejoin.
        c, first, down, p, bdir, old, new = self.topic_remade_while_held("", 2)
        self.assert_new_topic_kept(first, down, p, bdir, new, ["new-1"])
        self.assertIn(f"partition {TOPIC2}/{p} is copied as the new topic's", down.log())

    def test_a_topic_stamp_that_changed_as_the_files_were_copied_is_left_out(self):
        # The partitions copied, then the topic deleted and made again
        # before its stamp is taken: the files may be of either topic, so
        # the backup carries no stamp for it and says so; restore --rejoin
        # stamps the directory from the snapshot, as for a backup of an
        # earlier release (the old record's: its files are deleted once
        # the node is back, not served as the new topic's).
        c, first, down, p, bdir, old, new = self.topic_remade_while_held("stamps")
        with open(os.path.join(bdir, str(down.id), "manifest.json")) as f:
            paths = [x["path"] for x in json.load(f)["files"]]
        self.assertNotIn(f"topics/{TOPIC2}/stamp", paths)
        self.assertIn("1 topic stamp(s) left out", down.log())
        self.assertEqual(down.stop(), 0)
        os.rename(down.data, down.data + ".old")
        r = remade.ternctl("restore", bdir, "--data-path", down.data, "--node", str(down.id),
                           "--rejoin")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(topic_stamp_on_disk(down, TOPIC2), old)


def configure(args):
    remade.configure(args)


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
