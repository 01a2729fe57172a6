"""A follower's channel state and a copy given back while it is still
marked dropped (docs/replication.md "Channel state", step 3;
cluster/replica.c "quarantine marks"): on three ternd-test nodes, a topic
with replication factor 3 and min_insync_replicas 2, 100 messages
delivered and every other one acked (/v1, 204). The factor lowered to 2
drops the last replica, X, whose copy is marked dropped (held there,
TERN_TEST_QUARANTINE_HOLD); raised to 3 again, X gets the partition back
while taking the mark away is held (TERN_TEST_UNMARK_DELAY_MS), and the
leader sends it the channel's state meanwhile. X is SIGKILLed before the
mark is gone and started again without the hooks: its start moves the
marked copy to quarantine/. Once X is back in the ISR everywhere it is
elected and the old leader SIGKILLed: X delivers every message never
acked and none of those acked with 204.

Before the fix X installed the state into the marked copy and answered
204, the leader counted it as holding the state, the start moved it away
with the copy, X rejoined the ISR with no channel log, and, elected,
delivered every acked message again.

Run: python3 tests/cluster/test_chan_given_back.py --ternd build/ternd-test
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_chan_remade as base  # noqa: E402
from harness import wait_until  # noqa: E402

INSTALLED = "installed the leader's state"
REFUSED = "this copy is on its way to or from quarantine/"
HELD = "taking its dropped mark away held"
UNMARKED = "taking its dropped mark away now"


class ChanGivenBack(base.ChanBase):
    def factor(self, via, n):
        s, b = via.request("PATCH", f"/v1/topics/{base.TOPIC}", {"replication_factor": n},
                           headers=base.CLIENT)
        self.assertEqual(s, 200, b)

    def replicas_everywhere(self, c, want):
        """Wait until every running node shows the partition on want's
        members (a set of ids), no move under way."""
        def there():
            parts = [self.part(n) for n in c.nodes if n.running()]
            return all(p is not None and set(p.get("replicas", [])) == want for p in parts)
        wait_until(f"{base.TOPIC}/0 on {sorted(want)} on every node", there, timeout=120,
                   interval=0.5)

    def test_copy_given_back_while_marked(self):
        c = self.make(3, args=base.ARGS)
        env = c.env()
        env["TERN_TEST_QUARANTINE_HOLD"] = f"{base.TOPIC}=1"
        env["TERN_TEST_UNMARK_DELAY_MS"] = f"{base.TOPIC}=60000"
        for n in c.nodes:
            n.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        lead, everything = self.make_topic(c)
        replicas = self.part(lead)["replicas"]
        x = self.node(c, replicas[-1])  # the one a lower factor drops
        self.assertIsNot(x, lead)

        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        acked, tried = set(), set()
        for i in range(0, base.N, 2):
            p = f"m{i}"
            tried.add(p)
            if self.ack(lead, got[p]) == 204:
                acked.add(p)
        self.assertGreater(len(acked), base.N // 4)
        never_acked = everything - tried

        # Dropped: X's copy marked, and held there.
        self.factor(lead, 2)
        self.replicas_everywhere(c, set(replicas[:-1]))
        mark = os.path.join(x.data, "topics", base.TOPIC, "0", "dropped")
        wait_until(f"the copy marked dropped on node {x.id}", lambda: os.path.exists(mark), 30)

        # Given back: taking the mark away is held, and the leader sends X
        # the channel's state meanwhile.
        self.factor(lead, 3)
        wait_until(f"node {x.id} taking its mark away, held", lambda: HELD in x.log(), 60)
        wait_until(f"the leader's state sent to node {x.id}",
                   lambda: INSTALLED in x.log() or REFUSED in x.log(), 60)
        self.assertNotIn(UNMARKED, x.log(), "the mark went before the kill: nothing tested")
        x.kill()
        self.assertTrue(os.path.exists(mark))

        # Started again without the hooks: the marked copy goes to
        # quarantine/ at the start, and X copies the partition anew.
        x.start()
        x.wait_ready(120)
        self.assertFalse(os.path.exists(mark))
        self.elect_and_check(c, lead, x, acked, never_acked)


if __name__ == "__main__":
    harness.main()
