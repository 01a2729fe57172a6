"""A channel of a replicated topic deleted and made again while a
follower's catalog lags its metastore replica (docs/replication.md
"Channel state", step 3; the channel's stamp, meta/cmd.h CHANNEL_PUT): on
three ternd-test nodes, a topic with replication factor 3 and
min_insync_replicas 2, 100 messages delivered and acked on a channel (each
follower then holds its log). One follower, F, stops following its
replica (TERN_TEST_CATALOG_HOLD: its engine keeps the old channel); the
channel is deleted and made again through the leader, all 100 delivered
again on it and every other one acked (/v1) while F is held, and then F
follows again, the deletion and the new record reaching its catalog at
once. F is elected (a clean election, the whole ISR back on every node)
and the old leader SIGKILLed: F delivers every message never acked on the
new channel and none of those whose ack was answered 204.

Before the fix F took the new channel's settles into the old channel's
log (204, counted by the leader toward min_insync) and its catalog, seeing
the name recorded, kept the old channel with its state under the new one:
elected, F delivered none of the messages never acked on the new channel
(the old one had finished them all); had the deletion reached it first, it
would have deleted the settles with the old log and delivered the acked
messages again. Now the leader's settle_repl carries the channel's stamp,
F refuses it (503, retried) while its channel has another, and its
catalog replaces a channel whose stamp is not its record's.

Run: python3 tests/cluster/test_chan_remade_lagging.py --ternd build/ternd-test
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_chan_remade as base  # noqa: E402
from harness import wait_until  # noqa: E402

REFUSED = "made again, or not matched to its record yet"


class ChanRemadeLagging(base.ChanBase):
    def test_channel_made_again_while_a_follower_lags(self):
        c = self.make(3, args=base.ARGS)
        holds = {}
        for n in c.nodes:
            env = c.env()
            holds[n.id] = os.path.join(n.dir, "catalog-hold")
            env["TERN_TEST_CATALOG_HOLD"] = holds[n.id]
            n.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        lead, everything = self.make_topic(c)
        lag = next(n for n in c.nodes if n is not lead)
        other = next(n for n in c.nodes if n is not lead and n is not lag)

        # The first channel: every message acked (the followers' replicators
        # write its log).
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        for p in sorted(got):
            self.assertEqual(self.ack(lead, got[p]), 204)

        # F's catalog held: its engine keeps the old channel while the
        # channel is deleted and made again through the leader.
        open(holds[lag.id], "w").close()
        s, b = lead.request("POST", f"/channel/delete?topic={base.TOPIC}&channel={base.CHANNEL}")
        self.assertEqual(s, 200, b)
        for n in (lead, other):
            wait_until(f"channel {base.CHANNEL} gone from node {n.id}",
                       lambda x=n: self.channels(x) is not None
                       and base.CHANNEL not in self.channels(x), timeout=60)
        self.assertIn(base.CHANNEL, self.channels(lag) or [])
        self.make_channel(c, lead)

        # The new channel: every message again, every other one acked. With
        # F held its acks either complete (F takes them into the old
        # channel's log) or wait for F, which refuses them: F follows its
        # replica again once one of the two is seen.
        got = self.consume(lead, everything)
        self.assertEqual(set(got), everything)
        acked, tried = set(), set()

        def ack_evens():
            for i in range(0, base.N, 2):
                p = f"m{i}"
                tried.add(p)
                if self.ack(lead, got[p]) == 204:
                    acked.add(p)
        acks = threading.Thread(target=ack_evens, daemon=True)
        acks.start()
        wait_until("the acks answered, or refused by the held follower",
                   lambda: not acks.is_alive() or REFUSED in lag.log(), timeout=120)
        os.unlink(holds[lag.id])
        acks.join(300)
        self.assertFalse(acks.is_alive(), "acks still waiting after the follower caught up")
        self.assertGreater(len(acked), base.N // 4)
        never_acked = everything - tried

        # F elected, the old leader (which holds the leases) killed.
        self.elect_and_check(c, lead, lag, acked, never_acked)


if __name__ == "__main__":
    harness.main()
