"""A channel's pause is the node's, and a partition that comes to lead on
a node takes that node's pause (docs/cluster.md, "Pause and empty are per
node"): on three nodes, a topic of one partition with replication factor
3 (every node holds a copy) made by an NSQ PUB, the channel `c` made, N
messages published.

test_paused_node_takes_the_partition: node B, a follower, is paused
(nsqd's /channel/pause through B: 200), SIGKILLed right after and
started again: B's /stats still shows `c` paused. Then B is elected the
partition's leader (a clean election): an NSQ consumer of `c` connected
to B's TCP door gets nothing while a /v1 consume of another channel
through B gets the messages (B leads and serves the partition); once B
is unpaused the NSQ consumer gets them.

Before the node kept its pause in a file of its own, B came back
unpaused: it took its pause from its copy of the partition, whose channel
state is its leader's (unpaused), and the partition delivered through B
as soon as B led it.

test_partition_leaves_a_paused_node: the reverse. The leader L is paused,
then B (not paused) is elected: B delivers the partition to an NSQ
consumer of `c` at once (the pause stayed with L, as with a fleet of
nsqd), and L, SIGKILLed and started again, still shows `c` paused.

test_topic_pause_kept_by_a_follower: a topic's pause is the node's too,
and durable (its pause file): B, a follower holding a copy, has the
topic paused through its door (200), is SIGKILLed right after and
started again: B's /stats still shows the topic paused, while the
leader, not paused, delivers the partition to an NSQ consumer.

Run: python3 tests/cluster/test_pause_node.py --ternd build/ternd
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn  # noqa: E402  (tests/e2e)

CHANNEL = "c"
CLIENT = {"X-Tern-Client": "cluster-test"}
ARGS = ["--default-replication-factor=3", "--min-insync-replicas=2",
        "--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--member-session-timeout=3s"]
N = 20
QUIET_S = 2  # how long a paused channel's consumer is watched for nothing


class PauseHelpers(harness.OnePartition):
    """How a node shows and takes its pauses, for this file's cases and
    test_pause_copy.py's and test_pause_nocopy.py's."""
    isr_timeout = 180
    elect_timeout = 240

    def channel_paused(self, node, topic):
        """Whether node's /stats shows channel c of topic paused (None: no
        answer, or no such channel in its engine yet)."""
        status, body = node.request("GET", f"/stats?format=json&topic={topic}")
        if status != 200 or not isinstance(body, dict):
            return None
        for t in body.get("topics") or []:
            if t["topic_name"] == topic:
                for ch in t.get("channels") or []:
                    if ch["channel_name"] == CHANNEL:
                        return ch["paused"]
        return None

    def topic_paused(self, node, topic):
        """Whether node's /stats shows topic paused (None: no answer, or
        not listed yet)."""
        status, body = node.request("GET", f"/stats?format=json&topic={topic}")
        if status != 200 or not isinstance(body, dict):
            return None
        return next((t["paused"] for t in body.get("topics") or []
                     if t["topic_name"] == topic), None)

    def setup_topic(self, c, topic):
        """The topic made by an NSQ PUB (factor 3, no owner: NSQ consumers
        may read it) with c and another channel on every node, its ISR
        whole everywhere, N messages in it; the leader."""
        self.topic = topic
        conn = Conn(self.tcp_port(c.nodes[0]), host=c.nodes[0].host, timeout=60)
        try:
            conn.identify()
            self.assertEqual(conn.pub(topic, b"m0"), (0, b"OK"))
            for ch in (CHANNEL, "other"):
                status, body = c.nodes[0].request(
                    "POST", f"/channel/create?topic={topic}&channel={ch}", headers=CLIENT)
                self.assertEqual(status, 200, body)
            self.assertEqual(conn.mpub(topic, [f"m{i}".encode() for i in range(1, N)]),
                             (0, b"OK"))
        finally:
            conn.close()
        for n in c.nodes:
            wait_until(f"channel {CHANNEL} on node {n.id}",
                       lambda x=n: self.channel_paused(x, topic) is False, timeout=90)
        self.in_sync_everywhere(c)
        return self.node(c, self.part(c.nodes[0])["leader"])

    def tcp_port(self, node):
        status, info = node.request("GET", "/info")
        self.assertEqual(status, 200, info)
        return info["tcp_port"]

    def paused_on(self, node):
        """Whether node shows c paused, once its /stats lists it (a node
        may list no topic for a moment, as around an election)."""
        wait_until(f"channel {CHANNEL} in node {node.id}'s /stats",
                   lambda: self.channel_paused(node, self.topic) is not None, timeout=60)
        return self.channel_paused(node, self.topic)

    def set_pause(self, node, paused):
        verb = "pause" if paused else "unpause"
        status, body = node.request(
            "POST", f"/channel/{verb}?topic={self.topic}&channel={CHANNEL}", headers=CLIENT)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.paused_on(node), paused)

    def kill_and_restart(self, c, node):
        """SIGKILL node, start it again, wait until it is ready, the
        partition's ISR is whole again everywhere and the node's engine
        has the channel ready: loaded from its files at the start (before
        ready), or made by its catalog when its copy had no file of it
        (/stats lists a channel being made, unpaused until it is ready,
        so its log's "created" line is waited for); whether it is paused
        there."""
        before = len(node.log())
        node.kill()
        node.start()
        node.wait_ready()
        c.wait_alive(len(c.nodes))
        self.in_sync_everywhere(c)
        remade = f"channel {CHANNEL} of {self.topic} was recorded but had no files"
        if remade in node.log()[before:]:
            wait_until(f"channel {CHANNEL} made again on node {node.id}",
                       lambda: f"channel {CHANNEL} of {self.topic} created, starting"
                       in node.log()[before:].split(remade, 1)[1], timeout=60)
        return self.paused_on(node)

    def subscribe(self, node):
        conn = Conn(self.tcp_port(node), host=node.host, timeout=60)
        self.addCleanup(conn.close)
        conn.identify()
        self.assertEqual(conn.sub(self.topic, CHANNEL), (0, b"OK"))
        conn.rdy(N)
        return conn

    def read_all(self, conn):
        """The N messages, each FINned."""
        got = set()
        while len(got) < N:
            m = conn.read_message()
            got.add(m.body.decode())
            conn.fin(m.id)
        self.assertEqual(got, {f"m{i}" for i in range(N)})


class PauseNode(PauseHelpers, harness.ClusterTest):
    def test_paused_node_takes_the_partition(self):
        c = self.make(3, args=ARGS)
        c.start()
        c.wait_alive(3)
        lead = self.setup_topic(c, "pzin")
        b = next(n for n in c.nodes if n is not lead)

        self.set_pause(b, True)
        self.assertTrue(self.kill_and_restart(c, b), "the pause was lost by a restart")

        self.elect(c, lead, b)
        conn = self.subscribe(b)
        # B leads and serves the partition: another channel gets the
        # messages through it (a /v1 consume: served by B's engine).
        other = set()

        def served():
            s, body = b.request("GET", f"/v1/topics/{self.topic}/consume?channel=other"
                                f"&partition=0&max={N}&wait=1s", headers=CLIENT)
            if s == 200:
                other.update(m["payload"] for m in body["messages"])
            return len(other) == N
        wait_until("node B delivers the partition to another channel", served, timeout=90)
        # Meanwhile, and for a while after, nothing for the paused one.
        conn.sock.settimeout(QUIET_S)
        with self.assertRaises(socket.timeout, msg="a paused channel delivered"):
            conn.read_message()
        conn.sock.settimeout(60)
        self.assertTrue(self.paused_on(b))

        self.set_pause(b, False)
        self.read_all(conn)

    def test_partition_leaves_a_paused_node(self):
        c = self.make(3, args=ARGS)
        c.start()
        c.wait_alive(3)
        lead = self.setup_topic(c, "pzout")
        b = next(n for n in c.nodes if n is not lead)

        self.set_pause(lead, True)
        self.elect(c, lead, b)
        self.assertFalse(self.paused_on(b))
        self.read_all(self.subscribe(b))

        self.assertTrue(self.kill_and_restart(c, lead), "the pause was lost by a restart")

    def test_topic_pause_kept_by_a_follower(self):
        c = self.make(3, args=ARGS)
        c.start()
        c.wait_alive(3)
        lead = self.setup_topic(c, "pztopic")
        b = next(n for n in c.nodes if n is not lead)

        status, body = b.request("POST", f"/topic/pause?topic={self.topic}", headers=CLIENT)
        self.assertEqual(status, 200, body)
        self.assertTrue(self.topic_paused(b, self.topic))
        self.kill_and_restart(c, b)
        wait_until(f"topic {self.topic} in node {b.id}'s /stats",
                   lambda: self.topic_paused(b, self.topic) is not None, timeout=60)
        self.assertTrue(self.topic_paused(b, self.topic), "the topic's pause was lost by a restart")
        # Per node, as with a fleet of nsqd: the leader was not paused.
        self.assertFalse(self.topic_paused(lead, self.topic))
        self.read_all(self.subscribe(lead))


if __name__ == "__main__":
    harness.main()
