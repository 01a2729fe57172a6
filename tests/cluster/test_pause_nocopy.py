"""A pause answered by a node that holds no copy of the topic is durable
(docs/cluster.md, "Pause and empty are per node"; docs/storage-format.md,
"Topic pause", "Channel pause"): the node makes the topic's directory
with the topic's stamp and its pause files only, before the 200.

test_pause_without_a_copy_f1: on three nodes a topic of one partition at
factor 1 made by an NSQ PUB, channels `c` and `other` made, N messages
published. Node X holds no copy and no directory of the topic.

  1. The topic and `c` paused through X (200 each), X SIGKILLed and
     started again: X's /stats shows both paused.
  2. Both unpaused through X, X SIGKILLed and started again: both
     unpaused (the unpause is durable too; the files say 0).
  3. Both paused again, X SIGKILLed and started again: paused. Then the
     partition moves to X (a factor-1 move): X leads it, and an NSQ
     consumer of `c` on X gets nothing, nor does a /v1 consume of
     `other` through X (the topic holds everything from offset 0: the
     partition was not here at the pause). The topic unpaused through
     X: `other` gets the messages through X, `c` still nothing; `c`
     unpaused: its consumer gets the N messages.

test_pause_without_a_copy_f3: steps 1 and 2 on four nodes with a topic
at factor 3, X the member holding no copy; then `c` alone paused through
X and kept by a restart, the partition's replicas changed to take X in
(a move), X elected leader: `other` gets the messages through X, `c`
nothing until it is unpaused.

test_pause_without_a_copy_goes_with_its_topic: the directory the pause
made on X goes with the topic's deletion; and a pause kept there while X
was down through a deletion and a creation of the name is not taken by
the new topic or its channel: the directory, stamped with the old
record, goes when X makes the new topic.

test_pause_without_a_copy_goes_with_a_deletion_while_down: the
directory kept while X was down through the topic's deletion (never made
again) goes when X is back and its replica shows the deletion; a restart
while the topic lives keeps it.

Before the fix X came back unpaused at step 1: the pause was kept in
memory only, for want of a directory of the topic here.

Run: python3 tests/cluster/test_pause_nocopy.py --ternd build/ternd
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_pause_node as pn  # noqa: E402
from harness import wait_until  # noqa: E402

CLIENT = pn.CLIENT
N = pn.N
ARGS = ["--min-insync-replicas=1", "--cluster-heartbeat-interval=500ms",
        "--cluster-dead-after=3s", "--member-session-timeout=3s"]


class PauseNoCopy(pn.PauseHelpers, harness.ClusterTest):

    def part(self, node):
        """As OnePartition's; a factor-1 partition (no replica state) shows
        its owner as its leader and only replica."""
        p = harness.OnePartition.part(self, node)
        if p is not None and "replicas" not in p and p.get("owner_node"):
            own = p["owner_node"]
            p = dict(p, leader=own, replicas=[own], isr=[own])
        return p

    def set_both(self, node, paused):
        """The topic's pause and c's through node (200 each)."""
        verb = "pause" if paused else "unpause"
        status, body = node.request("POST", f"/topic/{verb}?topic={self.topic}", headers=CLIENT)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.topic_paused(node, self.topic), paused)
        self.set_pause(node, paused)

    def restart_shows(self, c, x, paused, what):
        """SIGKILL x, start it again: both the topic and c as paused says."""
        self.assertEqual(self.kill_and_restart(c, x), paused,
                         f"{what}: channel c's pause on node {x.id} after a restart")
        wait_until(f"topic {self.topic} in node {x.id}'s /stats",
                   lambda: self.topic_paused(x, self.topic) is not None, timeout=60)
        self.assertEqual(self.topic_paused(x, self.topic), paused,
                         f"{what}: the topic's pause on node {x.id} after a restart")

    def no_copy(self, c, lead):
        """The member holding no replica of the partition, checked to have
        no directory of the topic."""
        held = set(self.part(lead)["replicas"])
        x = next(n for n in c.nodes if str(n.id) not in held)
        tdir = os.path.join(x.data, "topics", self.topic)
        self.assertFalse(os.path.exists(tdir), "X holds the topic's directory already")
        return x, tdir

    def move_to(self, via, replicas):
        status, body = via.request("PATCH", f"/v1/topics/{self.topic}/partitions/0",
                                   {"replicas": [str(r) for r in replicas]}, headers=CLIENT)
        self.assertEqual(status, 202, body)
        mid = body["id"]

        def done():
            s, b = via.request("GET", "/v1/cluster/moves")
            if s != 200:
                return None
            m = next((m for m in b["moves"] if m["id"] == mid), None)
            if m is not None and m["state"] in ("failed", "aborted"):
                raise AssertionError(f"move {mid}: {m}")
            return m if m is not None and m["state"] == "done" else None
        wait_until(f"move {mid} done", done, timeout=180, interval=0.5)

    def consume_other(self, node, got):
        s, body = node.request("GET", f"/v1/topics/{self.topic}/consume?channel=other"
                               f"&partition=0&max={N}&wait=1s", headers=CLIENT)
        if s == 200:
            got.update(m["payload"] for m in body["messages"])
        return len(got)

    def quiet(self, conn):
        conn.sock.settimeout(pn.QUIET_S)
        with self.assertRaises(socket.timeout, msg="a paused channel delivered"):
            conn.read_message()
        conn.sock.settimeout(60)

    def paused_and_unpaused(self, nodes, factor, topic):
        """nodes started with the topic at factor made (setup_topic); the
        member X holding no copy has the topic and c paused, then
        unpaused, each kept by a restart; the cluster, the leader, X."""
        self.replicas = factor
        c = self.make(nodes, args=ARGS + [f"--default-replication-factor={factor}"])
        c.start()
        c.wait_alive(nodes)
        lead = self.setup_topic(c, topic)
        x, tdir = self.no_copy(c, lead)
        self.set_both(x, True)
        self.restart_shows(c, x, True, "paused without a copy")
        self.assertFalse(os.path.exists(os.path.join(tdir, "0")))
        # Per node: the leader was not paused.
        self.assertFalse(self.topic_paused(lead, self.topic))
        self.set_both(x, False)
        self.restart_shows(c, x, False, "unpaused without a copy")
        return c, lead, x

    def test_pause_without_a_copy_f1(self):
        c, lead, x = self.paused_and_unpaused(3, 1, "pznc1")
        self.set_both(x, True)
        self.restart_shows(c, x, True, "paused again without a copy")

        self.move_to(lead, [x.id])
        wait_until(f"node {x.id} leads the partition",
                   lambda: all((self.part(n) or {}).get("leader") == str(x.id)
                               for n in c.nodes), timeout=120)
        conn = self.subscribe(x)
        other = set()
        self.consume_other(x, other)
        self.assertEqual(other, set(), "a paused topic delivered to another channel")
        self.quiet(conn)
        self.assertTrue(self.topic_paused(x, self.topic))

        status, body = x.request("POST", f"/topic/unpause?topic={self.topic}", headers=CLIENT)
        self.assertEqual(status, 200, body)
        wait_until("node X delivers the partition to another channel",
                   lambda: self.consume_other(x, other) == N, timeout=90)
        self.quiet(conn)
        self.set_pause(x, False)
        self.read_all(conn)

    def test_pause_without_a_copy_f3(self):
        c, lead, x = self.paused_and_unpaused(4, 3, "pznc3")
        # c alone paused again, the topic not: the partition is delivered
        # through X to another channel once X leads it, never to c.
        self.set_pause(x, True)
        self.assertTrue(self.kill_and_restart(c, x), "c's pause lost by a restart")

        # X takes the place of a follower, then leads.
        replicas = [r for r in self.part(lead)["replicas"] if r != str(lead.id)][:1]
        self.move_to(lead, [lead.id, x.id] + replicas)
        self.in_sync_everywhere(c)
        self.elect(c, lead, x)
        conn = self.subscribe(x)
        other = set()
        wait_until("node X delivers the partition to another channel",
                   lambda: self.consume_other(x, other) == N, timeout=90)
        self.quiet(conn)
        self.set_pause(x, False)
        self.read_all(conn)

    def remake(self, via):
        """Delete the topic through via (the purge cannot reach a node
        that is down: 500 naming it), then make it again there with
        channels c and other and a message."""
        status, body = via.request("DELETE", f"/v1/topics/{self.topic}", timeout=60)
        self.assertIn(status, (204, 500), body)
        conn = pn.Conn(self.tcp_port(via), host=via.host, timeout=60)
        try:
            conn.identify()
            self.assertEqual(conn.pub(self.topic, b"new"), (0, b"OK"))
        finally:
            conn.close()
        for ch in ("c", "other"):
            status, body = via.request(
                "POST", f"/channel/create?topic={self.topic}&channel={ch}", headers=CLIENT)
            self.assertEqual(status, 200, body)

    def three_f1(self, topic):
        """Three nodes, the topic at factor 1 made (setup_topic); the
        cluster, the member X holding no copy, its topic directory's path
        and another member."""
        self.replicas = 1
        c = self.make(3, args=ARGS + ["--default-replication-factor=1"])
        c.start()
        c.wait_alive(3)
        lead = self.setup_topic(c, topic)
        x, tdir = self.no_copy(c, lead)
        return c, x, tdir, next(n for n in c.nodes if n is not x)

    def test_pause_without_a_copy_goes_with_its_topic(self):
        """The directory a pause made on X goes with the topic's deletion
        while X runs; and a pause kept there while X was down through a
        deletion and a creation of the name is never the new topic's: the
        directory goes then."""
        c, x, tdir, y = self.three_f1("pznc2")

        self.set_both(x, True)
        # The pauses made the directory: the topic's stamp and pause file,
        # c's pause file and stamp. Channel other's stamp job may then
        # write its own two there too (a directory of the topic is here
        # now), through a temporary file: wait until no write is under way.
        made = {"c.cpause", "c.cstamp", "pause", "stamp"}

        def settled():
            names = set(os.listdir(tdir))
            done = made <= names and not any(f.endswith(".tmp") for f in names)
            return names if done else None
        names = wait_until("the pauses' files on X, no write under way", settled, 30)
        self.assertLessEqual(names - made, {"other.cpause", "other.cstamp"})
        self.remake(y)
        wait_until("X deleted the old topic's directory", lambda: not os.path.exists(tdir), 60)
        wait_until("c of the new topic on X", lambda: self.channel_paused(x, self.topic) is False,
                   timeout=90)
        self.assertFalse(self.topic_paused(x, self.topic))

        self.set_both(x, True)
        x.kill()
        self.remake(y)
        before = len(x.log())
        x.start()
        x.wait_ready()
        c.wait_alive(3)
        wait_until("c made on X", lambda: f"channel c of {self.topic} created, starting"
                   in x.log()[before:], timeout=90)
        self.assertFalse(self.paused_on(x), "c took the pause of the old topic's channel")
        self.assertFalse(self.topic_paused(x, self.topic), "the new topic took the old's pause")
        self.assertFalse(os.path.exists(tdir), "the old topic's directory was left")

    def test_pause_without_a_copy_goes_with_a_deletion_while_down(self):
        """The directory a pause made on X, kept by a restart while the
        topic lives, goes once X is back and its metastore replica shows
        the topic deleted while X was down (never made again): nothing
        else would take it. Trashed as a deletion here would have."""
        c, x, tdir, y = self.three_f1("pznc4")
        self.set_both(x, True)
        # The live topic: a restart keeps the directory and the pauses.
        self.restart_shows(c, x, True, "paused without a copy")
        self.assertTrue(os.path.exists(os.path.join(tdir, "pause")))

        x.kill()
        status, body = y.request("DELETE", f"/v1/topics/{self.topic}", timeout=60)
        self.assertIn(status, (204, 500), body)  # 500: the purge cannot reach X
        wait_until(f"the topic gone from node {y.id}'s metastore",
                   lambda: y.request("GET", f"/v1/topics/{self.topic}")[0] == 404, timeout=60)
        before = len(x.log())
        x.start()
        x.wait_ready()
        c.wait_alive(3)
        wait_until("X trashed the deleted topic's directory", lambda: not os.path.exists(tdir),
                   timeout=60)
        self.assertIn(f"topic {self.topic}: its directory here", x.log()[before:])
        self.assertIsNone(self.topic_paused(x, self.topic))


if __name__ == "__main__":
    harness.main()
