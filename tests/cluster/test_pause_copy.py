"""A node that gets a replica's copy of a partition gets its channels'
state from the leader, the leader's pause flag with it, before its own
pause file (docs/cluster.md, "Pause and empty are per node";
docs/storage-format.md, "Channel pause"): a node killed in between comes
back unpaused, as nobody paused it.

test_copy_killed_before_the_pause_file: on three nodes a topic of one
partition at factor 2 made by an NSQ PUB, the channel `c` made (on every
node), the leader L paused (its partition's flag, and so its follower's
copy's, says paused). The third node X holds no copy and no directory of
the topic; it is started again with its channel stamp writes held
(ternd-test's TERN_TEST_CHANNEL_STAMP_DELAY_MS): its pause file is
written by the stamp job, before the stamp. The topic is raised to
factor 3: X gets a copy, in the ISR with the leader's channel state (a
pause through L again is answered once X has its record too), and
neither a pause file nor a stamp yet. X
is SIGKILLed there and started again (no hold): its /stats shows `c`
unpaused, and so does its pause file once written. Then X is elected:
an NSQ consumer of `c` on X gets the messages.

Before the fix X came back paused: without a pause file its start took
the pause of any partition here saying so, its copy's flag, the
leader's. Now a channel without a pause file takes a partition's flag
only when it has a stamp here (a directory of the release before pause
files); one with neither was never recorded by this node.

Run: python3 tests/cluster/test_pause_copy.py --ternd build/ternd-test
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_pause_node as pn  # noqa: E402
from harness import wait_until  # noqa: E402

TOPIC = "pzcopy"
ARGS = ["--default-replication-factor=2", "--min-insync-replicas=1",
        "--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--member-session-timeout=3s"]
HOLD_MS = 600000  # X's stamp writes: until it is killed


class PauseCopy(pn.PauseHelpers, harness.ClusterTest):
    replicas = 2

    def test_copy_killed_before_the_pause_file(self):
        c = self.make(3, args=ARGS)
        c.start()
        c.wait_alive(3)
        lead = self.setup_topic(c, TOPIC)
        held = set(self.part(lead)["replicas"])
        x = next(n for n in c.nodes if str(n.id) not in held)
        tdir = os.path.join(x.data, "topics", TOPIC)
        self.assertFalse(os.path.exists(tdir), "X holds the topic's directory already")
        # X again with its channel stamp writes held (its catalog makes c
        # again: no file of it here).
        x.stop()
        x.start(env=dict(c.env(), TERN_TEST_CHANNEL_STAMP_DELAY_MS=str(HOLD_MS)))
        x.wait_ready()
        c.wait_alive(3)
        wait_until("channel c on X", lambda: self.channel_paused(x, TOPIC) is False, timeout=90)

        self.set_pause(lead, True)
        self.assertFalse(self.paused_on(x))

        status, body = lead.request("PATCH", f"/v1/topics/{TOPIC}", {"replication_factor": 3},
                                    timeout=30)
        self.assertEqual(status, 200, body)
        self.replicas = 3
        self.in_sync_everywhere(c)
        # The leader's channel state is in X's copy: a pause through L
        # again is answered once every ISR member, X too, has its record.
        # X's stamp job is held, its pause file and its stamp with it.
        self.set_pause(lead, True)
        self.assertTrue(os.path.exists(os.path.join(tdir, "0", "c.ckpt")))
        wait_until("X's stamp write of c held",
                   lambda: f"stamp write of channel c of {TOPIC} held" in x.log(), timeout=60)
        self.assertFalse(os.path.exists(os.path.join(tdir, "c.cpause")))
        self.assertFalse(os.path.exists(os.path.join(tdir, "c.cstamp")))

        x.kill()
        x.start()
        x.wait_ready()
        c.wait_alive(3)
        self.in_sync_everywhere(c)
        self.assertFalse(self.paused_on(x), "X took the leader's pause from its copy")
        self.assertTrue(self.paused_on(lead))

        self.elect(c, lead, x)
        self.read_all(self.subscribe(x))


if __name__ == "__main__":
    harness.main()
