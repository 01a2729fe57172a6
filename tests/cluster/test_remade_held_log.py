"""A follower down through a deletion and a creation of its topic's name
whose replica manager takes the engine's copy of the old topic (the log
the engine set aside, its partition led elsewhere) before the catalog
deletes that topic here: the deletion closes the log the replica manager
holds, which lets it go (it was freed under it before: the node crashed
or stopped following, and never rejoined the ISR), and the follower then
copies the new topic from its leader and rejoins the ISR.

ternd-test's TERN_TEST_DELETIONS_AFTER_MS makes the order certain: the
restarted node's catalog follows no deletion until HOLD_MS after it
started, so its replica manager fetches from the new topic's leader (and
truncates the old copy, whose epochs the new leader's log does not hold)
first.

Run: python3 tests/cluster/test_remade_held_log.py --ternd build/ternd-test
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
HOLD_MS = 4000


def old_bytes_on_disk(node, topic):
    """The files under node's directory of topic that hold b"old-"."""
    found = []
    for root, _, files in os.walk(os.path.join(node.data, "topics", topic)):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                if b"old-" in f.read():
                    found.append(os.path.join(root, name))
    return found


def isr(node, topic):
    status, body = node.request("GET", f"/v1/topics/{topic}")
    return body["partition_stats"][0].get("isr", []) if status == 200 else []


class RemadeHeldLog(harness.ClusterTest):
    node_args = ["--raft-election-timeout=3s", "--cluster-rpc-dial-timeout=300ms"]

    def test_a_deletion_closes_the_log_a_follower_holds(self):
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
        down.start(env=env)
        c.wait_ready([down])
        # The replica manager acts on the old copy first; the catalog's
        # deletion, held until HOLD_MS, closes the log it holds.
        wait_until("the replica manager on the old copy",
                   lambda: "replica h3/0: truncating its log" in down.log(), 30)
        wait_until("the deletion of the old topic here",
                   lambda: "topic h3 is no longer recorded as it is here" in down.log(), 30)
        wait_until("the old topic deleted here", lambda: "topic h3 deleted" in down.log(), 30)

        wait_until("the follower back in sync", lambda: str(down.id) in isr(other, "h3"), 60)
        self.assertEqual(old_bytes_on_disk(down, "h3"), [])
        self.assertIn("replica h3/0: the engine closes the log this replica follows on",
                      down.log())
        # The new topic's only message, served through the node that
        # lost nothing acknowledged.
        status, m = down.request("GET", "/v1/topics/h3/consume?partition=0&channel=c")
        self.assertEqual(status, 200, m)
        self.assertEqual(m["payload"], "new")

if __name__ == "__main__":
    harness.main()
