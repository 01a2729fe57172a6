"""Partition placement across real ternd nodes (tests/cluster/harness.py):
partition p of a new topic goes to the alive members sorted by id, p mod
n, the same answer on every node; a partition's log exists only on its
owner; growth places only the new partitions; assignments are sticky when
their owner dies, and a topic made meanwhile goes to the alive members; a
topic made right after a member died, before it is marked dead, passes
over it (the leader no longer hears from it); a
topic or channel deleted through one node leaves every node's engine and
disk, also one that was down meanwhile, and is not recorded again; a topic
delete answers only once every live member has removed its files (PURGE),
500 naming a member that did not confirm, which then follows the records.

Run: python3 tests/cluster/test_placement.py --ternd build/ternd
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}


class Placement(harness.ClusterTest):
    # Factor 1: these tests are about owners (a log only on its owner).
    node_args = ["--default-replication-factor=1"]

    def wait_owners(self, nodes, topic, expect):
        for node in nodes:
            wait_until(f"the owners of {topic} on node {node.id}",
                       lambda n=node: n.owners(topic) == expect, 30)

    def produce(self, node, topic, partition, body):
        return node.request("POST", f"/v1/topics/{topic}/produce?partition={partition}",
                            body.encode(), headers=OCTET)

    def test_p_mod_n_owner_only_logs_and_growth(self):
        c = self.make(3).start()
        c.wait_alive(3)
        status, body = c.nodes[1].request("POST", "/v1/topics",
                                          {"name": "orders", "partitions": 6})
        self.assertEqual(status, 201, body)
        expect = [str(p % 3 + 1) for p in range(6)]
        self.wait_owners(c.nodes, "orders", expect)
        for node in c.nodes:
            # Open and on disk only where owned, once the owner has opened
            # them (on a worker thread, after the record reached its
            # replica). Every node shows every partition's numbers, read
            # on its owner (tests/cluster/test_stats.py).
            def opened(n=node):
                base = os.path.join(n.data, "topics", "orders")
                return [os.path.isdir(os.path.join(base, str(p))) for p in range(6)]
            wait_until(f"node {node.id}'s partitions open", lambda n=node: opened(n) ==
                       [owner == str(n.id) for owner in expect], 30)
            # Its own partitions take produces there; the others' through
            # its ingress log (tests/cluster/test_produce.py), later.
            for p in range(6):
                if expect[p] == str(node.id):
                    status, answer = self.produce(node, "orders", p, f"m{p} via {node.id}")
                    self.assertEqual(status, 202, answer)
        # Growth places only the new partitions; the old keep their owners.
        status, body = c.nodes[2].request("PATCH", "/v1/topics/orders", {"partitions": 9})
        self.assertEqual(status, 200, body)
        grown = expect + [str(p % 3 + 1) for p in range(6, 9)]
        self.wait_owners(c.nodes, "orders", grown)
        for p in range(6, 9):
            owner = [n for n in c.nodes if str(n.id) == grown[p]][0]
            status, answer = wait_until(
                f"partition {p} open on its owner",
                lambda o=owner, q=p: (lambda r: r if r[0] == 202 else None)(
                    self.produce(o, "orders", q, "after growth")), 30)
            self.assertEqual(status, 202, answer)
        # Each owner's partitions hold what was produced there: one message
        # per partition before the growth, shown through every node.
        # An owner still growing the topic answers "retry" for a moment
        # instead of numbers, and a busy one may miss the 2 s of a read
        # (an entry with an error either way); wait for numbers.
        for node in c.nodes:
            def read(n=node):
                status, body = n.request("GET", "/v1/topics/orders")
                if status != 200:
                    return None
                entries = body["partition_stats"][:6]
                if any("next_offset" not in entry for entry in entries):
                    return None
                return entries
            entries = wait_until(f"node {node.id} reads every partition's numbers", read, 30)
            for p, entry in enumerate(entries):
                self.assertEqual(entry["next_offset"], 1, (node.id, p, entry))

    def test_sticky_on_death_and_new_topics_on_the_alive(self):
        c = self.make(3, args=["--cluster-heartbeat-interval=500ms",
                               "--cluster-dead-after=3s"]).start()
        c.wait_alive(3)
        leader = c.find_leader()
        status, body = leader.request("POST", "/v1/topics", {"name": "before", "partitions": 3})
        self.assertEqual(status, 201, body)
        self.wait_owners(c.nodes, "before", ["1", "2", "3"])
        victim = [x for x in c.nodes if x is not leader][0]
        status, _ = self.produce(victim, "before", victim.id - 1, "kept")
        self.assertEqual(status, 202)
        victim.kill()
        rest = [x for x in c.nodes if x is not victim]
        wait_until("the killed member dead", lambda: leader.alive_members() == 2, 60)
        # Its partition keeps it as owner (the data is only there) ...
        self.wait_owners(rest, "before", ["1", "2", "3"])
        # ... and a topic made while it is dead goes to the two alive.
        status, body = leader.request("POST", "/v1/topics", {"name": "during", "partitions": 4})
        self.assertEqual(status, 201, body)
        alive_ids = sorted(str(x.id) for x in rest)
        self.wait_owners(rest, "during", [alive_ids[p % 2] for p in range(4)])
        victim.start()
        victim.wait_ready()
        wait_until("the member alive again", lambda: leader.alive_members() == 3, 60)
        self.wait_owners([victim], "before", ["1", "2", "3"])
        status, body = victim.request("GET", "/v1/topics/before")
        mine = body["partition_stats"][victim.id - 1]
        self.assertEqual(mine["next_offset"], 1, mine)

    def member(self, node, member_id):
        status, body = node.request("GET", "/v1/cluster/members")
        self.assertEqual(status, 200, body)
        return next(m for m in body["members"] if m["id"] == str(member_id))

    def test_new_topics_pass_over_a_member_not_heard_from(self):
        # Killed moments ago, a member is still alive in the records (for
        # cluster-dead-after, 30 s) but the leader no longer hears from it
        # over Raft: new topics place nothing on it, /lookup does not list
        # it for them, and /v1/cluster/members shows its last-heard age
        # growing. (Today's build placed every third partition on it.)
        # A long cluster-dead-after keeps it recorded alive throughout, on
        # however busy a machine.
        c = self.make(3, args=["--cluster-dead-after=300s"]).start()
        c.wait_alive(3)
        leader = c.find_leader()
        victim, other = [x for x in c.nodes if x is not leader]
        for x in c.nodes:
            wait_until(f"the leader hearing from member {x.id}",
                       lambda i=x.id: self.member(leader, i)["heard_recently"] is True, 30)
        # Only the leader hears from every member: elsewhere null.
        self.assertIsNone(self.member(other, victim.id)["last_heard_ms_ago"])
        self.assertIsNone(self.member(other, victim.id)["heard_recently"])
        self.assertEqual(self.member(leader, leader.id)["last_heard_ms_ago"], 0)
        victim.kill()
        gone = wait_until("the leader no longer hearing from the killed member",
                          lambda: self.member(leader, victim.id)["heard_recently"] is False
                          and self.member(leader, victim.id), 30)
        first = gone["last_heard_ms_ago"]
        wait_until("its last-heard age growing",
                   lambda: self.member(leader, victim.id)["last_heard_ms_ago"] > first + 500, 30)
        rest = sorted(str(x.id) for x in (leader, other))
        for name, via in (("fresh-a", leader), ("fresh-b", other)):
            status, body = via.request("POST", "/v1/topics", {"name": name, "partitions": 12})
            self.assertEqual(status, 201, body)
            self.wait_owners([leader, other], name, [rest[p % 2] for p in range(12)])
            for node in (leader, other):
                status, body = node.request("GET", f"/lookup?topic={name}")
                self.assertEqual(status, 200, body)
                ports = sorted(p["tcp_port"] for p in body["producers"])
                self.assertEqual(len(ports), 2, body)
        # The case this covers: the member is still recorded alive.
        status = self.member(leader, victim.id)["status"]
        self.assertEqual(status, "alive", "cluster-dead-after passed before the creates")
        self.assertGreaterEqual(self.member(other, victim.id)["heartbeat_age_ms"], 0)
        # Back, it is heard again and takes new partitions again.
        victim.start()
        victim.wait_ready()
        wait_until("the leader hearing from it again",
                   lambda: self.member(leader, victim.id)["heard_recently"] is True, 60)
        status, body = other.request("POST", "/v1/topics", {"name": "fresh-c", "partitions": 3})
        self.assertEqual(status, 201, body)
        self.wait_owners(c.nodes, "fresh-c", ["1", "2", "3"])

    # --- deletions made through one node, followed by the others ---------------

    def engine(self, node, auth=False):
        """{topic: (channels, depth)} as node's engine has them (nsqd's
        /stats: what is there, not what is recorded); with auth, also the
        topics made through /v1 (they have an owner)."""
        status, body = node.request("GET", "/stats?format=json", auth=auth)
        self.assertEqual(status, 200, body)
        return {t["topic_name"]: (sorted(c["channel_name"] for c in t["channels"]), t["depth"])
                for t in body["topics"]}

    def on_disk(self, node, topic, channel=None):
        base = os.path.join(node.data, "topics", topic)
        if channel is None:
            return os.path.exists(base)
        return any(os.path.exists(os.path.join(base, p, channel + ".ckpt"))
                   for p in (os.listdir(base) if os.path.isdir(base) else []))

    def nsq(self, node, path, body=b""):
        status, answer = node.request("POST", path, body, auth=False)
        self.assertEqual(status, 200, (path, answer))

    def fill(self, c, topic):
        """topic (made through the NSQ door: one partition, grown to one per
        node) with channels keep and drop, one message per partition (each
        on its owner), on every node's engine and disk."""
        self.nsq(c.nodes[0], f"/topic/create?topic={topic}")
        for node in c.nodes:
            wait_until(f"{topic} on node {node.id}", lambda n=node: topic in self.engine(n))
        status, body = c.nodes[1].request("PATCH", f"/v1/topics/{topic}", {"partitions": 3})
        self.assertEqual(status, 200, body)
        self.wait_owners(c.nodes, topic, ["1", "2", "3"])
        self.nsq(c.nodes[1], f"/channel/create?topic={topic}&channel=keep")
        self.nsq(c.nodes[2], f"/channel/create?topic={topic}&channel=drop")
        for node in c.nodes:
            wait_until(f"{topic} with its channels on node {node.id}",
                       lambda n=node: self.engine(n).get(topic, ([],))[0] == ["drop", "keep"])
        owners = c.nodes[0].owners(topic)
        for p, owner in enumerate(owners):
            node = [n for n in c.nodes if str(n.id) == owner][0]
            status, answer = self.produce(node, topic, p, f"old {p}")
            self.assertEqual(status, 202, answer)
        for node in c.nodes:
            self.assertTrue(self.on_disk(node, topic, "drop"), node.id)

    def test_deletions_reach_every_node(self):
        c = self.make(3).start()
        c.wait_alive(3)
        self.fill(c, "gone")
        # A channel deleted through node 3 leaves every engine and disk.
        self.nsq(c.nodes[2], "/channel/delete?topic=gone&channel=drop")
        for node in c.nodes:
            wait_until(f"channel drop gone from node {node.id}",
                       lambda n=node: self.engine(n)["gone"][0] == ["keep"]
                       and not self.on_disk(n, "gone", "drop"), 30)
            self.assertTrue(self.on_disk(node, "gone", "keep"), node.id)
        # The topic deleted through node 1 leaves them all too, before
        # the answer (every member confirmed its purge).
        self.nsq(c.nodes[0], "/topic/delete?topic=gone")
        for node in c.nodes:
            self.assertFalse(self.on_disk(node, "gone"), node.id)
            self.assertNotIn("gone", self.engine(node), node.id)
        # Made again through node 2 afterwards, it is a new topic: none of
        # the old messages, no old channel.
        self.nsq(c.nodes[1], "/topic/create?topic=gone")
        for node in c.nodes:
            wait_until(f"the new topic on node {node.id}",
                       lambda n=node: "gone" in self.engine(n))
        owner = [n for n in c.nodes if [str(n.id)] == c.nodes[1].owners("gone")][0]
        self.nsq(owner, "/pub?topic=gone", b"new")
        total = 0
        for node in c.nodes:
            channels, depth = self.engine(node)["gone"]
            self.assertEqual(channels, [], node.id)
            total += depth
        self.assertEqual(total, 1)
        # Nothing recorded it again: the deletion held on every replica.
        for node in c.nodes:
            wait_until(f"node {node.id}'s record without channels",
                       lambda n=node: n.request("GET", "/v1/topics/gone")[1].get("channels") == [])

    def test_deleted_while_away(self):
        c = self.make(3).start()
        c.wait_alive(3)
        self.fill(c, "away")
        away = c.nodes[2]
        self.assertEqual(away.stop(), 0)
        # Still alive in the records (not yet marked dead): it is asked to
        # purge, does not answer, and the delete says so; the record is
        # deleted all the same.
        # A stopped leader hands leadership over; until the new leader's
        # first entry commits, a replica cannot vouch for its state and a
        # destructive call answers 503 E_METASTORE (retry, as a client would).
        def delete():
            st, ans = c.nodes[0].request("POST", "/topic/delete?topic=away", b"",
                                         auth=False, timeout=60)
            return None if st == 503 and ans.get("message") == "E_METASTORE" else (st, ans)
        status, answer = wait_until("an answer but 503 E_METASTORE", delete, timeout=60)
        if status != 200:
            self.assertEqual(status, 500, answer)
            self.assertIn(f"not purged on node {away.id}", answer["message"])
        wait_until("the record deleted", lambda: "away" not in c.nodes[0].topics())
        wait_until("the deletion on node 2", lambda: "away" not in self.engine(c.nodes[1]))
        away.start()
        away.wait_ready()
        wait_until("the topic gone from the node that was away",
                   lambda: "away" not in self.engine(away) and not self.on_disk(away, "away"), 30)
        self.assertIn("no longer recorded", away.log())
        # Its files did not bring the record back.
        for node in c.nodes:
            self.assertNotIn("away", node.topics(), node.id)

    def delete(self, node, topic):
        """DELETE /v1/topics/topic through node: (status, body)."""
        return node.request("DELETE", f"/v1/topics/{topic}", timeout=60)

    def test_delete_confirmed_by_every_member(self):
        c = self.make(3).start()
        c.wait_alive(3)
        leader = c.find_leader()
        followers = [n for n in c.nodes if n is not leader]
        self.fill(c, "purged")
        # Through a follower: when the 204 arrives, no member has the
        # topic's files or lists it in its engine (looked at at once).
        status, body = self.delete(followers[0], "purged")
        self.assertEqual(status, 204, body)
        for node in c.nodes:
            self.assertFalse(self.on_disk(node, "purged"), node.id)
            self.assertNotIn("purged", self.engine(node, auth=True), node.id)
        # Made again at once under the same name: empty on every node (its
        # channel default, made after the topic, has nothing; no partition
        # has a record at offset 0).
        status, body = followers[1].request("POST", "/v1/topics",
                                            {"name": "purged", "partitions": 3})
        self.assertEqual(status, 201, body)
        for node in c.nodes:
            wait_until(f"the new topic with its channel on node {node.id}",
                       lambda n=node: self.engine(n, auth=True).get("purged") == (["default"], 0))
            status, body = node.request("GET", "/stats?format=json&topic=purged")
            self.assertEqual(status, 200, body)
            for t in body["topics"]:
                for ch in t["channels"]:
                    self.assertEqual(ch["depth"], 0, (node.id, ch))
        self.wait_owners(c.nodes, "purged", ["1", "2", "3"])
        for p in range(3):
            status, body = c.nodes[0].request(
                "GET", f"/v1/topics/purged/consume?partition={p}&offset=0&wait=0",
                headers={"X-Tern-Client": "test"})
            self.assertEqual(status, 204, (p, body))

        # A member stopped (SIGSTOP) during the delete does not confirm:
        # 500 naming it, the record deleted regardless; once it runs
        # again it purges by following the records.
        self.fill(c, "stalled")
        # Through the follower that took the first delete: it has a
        # connection to the victim, so its call normally waits out its 15 s
        # (a fresh dial would fail within 1 s instead: also a 500).
        through, victim = followers
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            status, body = self.delete(through, "stalled")
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        self.assertEqual(status, 500, body)
        self.assertIn("topic deleted; not purged on node %d" % victim.id, body["error"])
        for node in c.nodes:
            if node is not victim:
                self.assertFalse(self.on_disk(node, "stalled"), node.id)
        self.assertNotIn("stalled", through.topics())
        wait_until("the stopped member purged after SIGCONT",
                   lambda: "stalled" not in self.engine(victim)
                   and not self.on_disk(victim, "stalled"), 60)


if __name__ == "__main__":
    harness.main()
