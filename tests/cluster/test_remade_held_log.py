"""A follower down through a deletion and a creation of its topic's name,
whose engine comes back with the old topic (its set-aside log led
elsewhere) until the catalog deletes it here:

- the replica manager waits for that deletion: it neither truncates the
  old topic's log to the epochs it shares with the new one nor appends
  the new topic's records to it (they would be reported flushed, then
  removed with the old files), and then copies the new topic from its
  leader and rejoins the ISR;
- in the order before that wait (TERN_TEST_FOLLOW_STALE_TOPIC), and for
  any log the engine closes under a replica that holds it, the deletion
  closes the log the replica manager follows on, which lets it go (it was
  freed under it: the node crashed or stopped following, its deletion
  never logged as finished, and it never rejoined the ISR);
- all of it needs the old topic's copy stamped: the replica manager opens
  no copy of its own before the node's catalog made the topic
  (TERN_TEST_CATALOG_LAG_MS widens that moment), so the copy's directory
  has the stamp before it holds a record (a copy opened earlier had none,
  and a node stopped then took the old records for the new topic).

ternd-test's TERN_TEST_DELETIONS_AFTER_MS makes the order certain: the
restarted node's catalog follows no deletion until HOLD_MS after its
metastore replica is ready, so its replica manager acts first.

Run: python3 tests/cluster/test_remade_held_log.py --ternd build/ternd-test
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from test_topic_remade import old_bytes_on_disk  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
HOLD_MS = 4000
# The late node's catalog follows its metastore replica this long after it
# is ready: the topic is made a second or two after that, so a copy opened
# before the catalog made it (the old order) holds records within the
# window for certain (it had them a second after the produces).
LAG_MS = 10000


def isr(node, topic):
    status, body = node.request("GET", f"/v1/topics/{topic}")
    return body["partition_stats"][0].get("isr", []) if status == 200 else []


class RemadeHeldLog(harness.ClusterTest):
    # replica-lag-time-max 2 s (10 s by default): the new topic's first
    # produces, and the stamped case's, are acknowledged once the leader
    # dropped the node that copies nothing (stopped, or its catalog held)
    # from the ISR, which is all they wait for.
    node_args = ["--raft-election-timeout=3s", "--cluster-rpc-dial-timeout=300ms",
                 "--replica-lag-time-max=2s"]

    def remade_while_down(self, extra_env):
        """A factor-3 topic deleted and made again while its follower
        `down` was stopped; down started again with extra_env (and its
        deletions held). (cluster, down, another node)."""
        c = self.make(3)
        c.start()
        c.wait_alive(3)
        leader = c.find_leader()
        spec = {"name": "h3", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2}
        status, body = leader.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        wait_until("a copy on every node", lambda: len(isr(leader, "h3")) == 3, 60)
        lead = leader.request("GET", "/v1/topics/h3")[1]["partition_stats"][0]["leader"]
        down = next(n for n in c.nodes if str(n.id) != str(lead) and n is not leader)
        other = next(n for n in c.nodes if n is not down)
        for i in range(3):
            status, body = other.request("POST", "/v1/topics/h3/produce", f"old-{i}".encode(),
                                         headers=OCTET)
            self.assertEqual(status, 202, body)
        wait_until("the old messages on the follower's disk",
                   lambda: old_bytes_on_disk(down, "h3") != [], 30)

        self.assertEqual(down.stop(), 0)
        status, body = other.request("DELETE", "/v1/topics/h3", timeout=60)
        self.assertIn(status, (204, 500), body)
        status, body = other.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        self.assertIn(str(down.id), other.request("GET", "/v1/topics/h3")[1]
                      ["partition_stats"][0]["replicas"])
        # The new topic's leader leads (its epoch-start record written):
        # the restarted node's copy diverges from its log at once.
        wait_until("the new topic acknowledging",
                   lambda: other.request("POST", "/v1/topics/h3/produce", b"new",
                                         headers=OCTET)[0] == 202, 60)

        env = c.env()
        env["TERN_TEST_DELETIONS_AFTER_MS"] = str(HOLD_MS)
        env.update(extra_env)
        down.start(env=env)
        c.wait_ready([down])
        return c, down, other

    def back_in_sync(self, down, other):
        wait_until("the old topic deleted here", lambda: "topic h3 deleted" in down.log(), 30)
        wait_until("the follower back in sync", lambda: str(down.id) in isr(other, "h3"), 60)
        self.assertEqual(old_bytes_on_disk(down, "h3"), [])
        # The new topic's only message, served through the node that
        # lost nothing acknowledged.
        status, m = down.request("GET", "/v1/topics/h3/consume?partition=0&channel=c")
        self.assertEqual(status, 200, m)
        self.assertEqual(m["payload"], "new")

    def test_a_follower_copy_is_stamped_before_it_holds_records(self):
        # The window between a node's metastore replica applying a topic's
        # record and its catalog making the topic in the engine
        # (TERN_TEST_CATALOG_LAG_MS widens it on one node): its replica
        # manager waits for the engine's topic before it opens a copy of
        # its own, so the copy's directory gets the topic's stamp first.
        # A copy opened in that window had none: stopped before its
        # catalog caught up, the node took those records at its next start
        # for whatever topic of the name was recorded by then (this
        # file's other cases failed so on a loaded machine).
        c = self.make(3)
        late = c.nodes[2]
        for node in c.nodes:
            env = c.env()
            if node is late:
                env["TERN_TEST_CATALOG_LAG_MS"] = str(LAG_MS)
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        other = c.nodes[0]
        spec = {"name": "h3", "partitions": 3, "replication_factor": 3, "min_insync_replicas": 2}
        status, body = other.request("POST", "/v1/topics", spec)
        self.assertEqual(status, 201, body)
        # A partition the late node follows (one it leads waits for its
        # catalog too, before it takes produces).
        stats = wait_until("every partition led", lambda: (lambda b: b if all(
            e.get("leader") for e in b["partition_stats"]) else None)(
                other.request("GET", "/v1/topics/h3")[1]), 30)
        p = next(e["index"] for e in stats["partition_stats"] if str(e["leader"]) != str(late.id))
        # (Acknowledged once the leader drops the late node from the ISR,
        # replica-lag-time after: it copies nothing before its catalog
        # made the topic.)
        for i in range(3):
            status, body = other.request("POST", f"/v1/topics/h3/produce?partition={p}",
                                         f"old-{i}".encode(), headers=OCTET, timeout=60)
            self.assertEqual(status, 202, body)
        stamp = os.path.join(late.data, "topics", "h3", "stamp")
        wait_until("the messages on the late node's disk",
                   lambda: old_bytes_on_disk(late, "h3") != [], 60, interval=0.05)
        self.assertTrue(os.path.exists(stamp), "records on disk before the topic's stamp")
        wait_until("the late node in sync",
                   lambda: str(late.id) in other.request("GET", "/v1/topics/h3")[1]
                   ["partition_stats"][p].get("isr", []), 60)

    def test_a_follower_waits_for_the_deletion_of_a_stale_topic(self):
        # The engine's topic is the old one (its stamp is not the record's):
        # the replica manager neither truncates nor appends to its log; it
        # waits for the catalog's deletion and then copies the new topic.
        _, down, other = self.remade_while_down({})
        wait_until("the deletion of the old topic here",
                   lambda: "topic h3 is no longer recorded as it is here" in down.log(), 30)
        self.assertNotIn("replica h3/0: truncating its log", down.log())
        self.back_in_sync(down, other)

    def test_a_deletion_closes_the_log_a_follower_holds(self):
        # TERN_TEST_FOLLOW_STALE_TOPIC: the order before that wait (still
        # reachable with a log the engine closes under a replica that
        # holds it): the replica manager takes the old topic's log and
        # truncates it; the catalog's deletion, held until HOLD_MS, closes
        # the log it holds, which it lets go.
        _, down, other = self.remade_while_down({"TERN_TEST_FOLLOW_STALE_TOPIC": "1"})
        wait_until("the replica manager on the old copy",
                   lambda: "replica h3/0: truncating its log" in down.log(), 30)
        self.back_in_sync(down, other)
        self.assertIn("replica h3/0: the engine closes the log this replica follows on",
                      down.log())


    def test_a_deletion_during_a_truncation_of_the_log_a_follower_holds(self):
        # As above, with the truncation held on the committer
        # (TERN_TEST_TRUNC_DELAY_MS) until after the deletion closed the
        # log: the close waits behind it, the truncation ends with no log
        # held, and the deletion completes.
        _, down, other = self.remade_while_down({"TERN_TEST_FOLLOW_STALE_TOPIC": "1",
                                                 "TERN_TEST_TRUNC_DELAY_MS": str(HOLD_MS + 2000)})
        wait_until("the truncation held", lambda: "truncation held" in down.log(), 30)
        self.back_in_sync(down, other)
        log = down.log()
        closing = log.index("replica h3/0: the engine closes the log this replica follows on")
        self.assertLess(closing, log.index("partition h3/0: truncating to offset"))

if __name__ == "__main__":
    harness.main()
