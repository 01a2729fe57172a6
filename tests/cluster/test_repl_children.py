"""Consumes of a replicated child topic through nodes that do not lead its
partitions (docs/replication.md, "Not built yet": forwarded consumes to the
leaders of replicated child topics were seen missing their RPC deadline).

Three nodes with factor 3 by default: a
parent with 3 partitions and a child made with it (parent partition p feeds
child partition p, both replicated, each partition led by another node).
Messages go to every parent partition through every node; the child is then
drained through nodes that do not lead the partition asked for (pinned long
polls, forwarded to the leader), and queue consumes through every node
(the door's probes of the other leaders, no wait, 500 ms each, and its
forwarded long poll) run until every node answers 204 several rounds in a
row. Checked: every message arrives exactly once in the child, every answer
is 200 or 204 (never 502 from a forward that got no reply), and no node
logs a forwarded consume or probe that got no reply within its deadline.

The cause was in the queue engine: a channel's partition that missed the
tail cache once (a replicated partition's records reach its leader's
engine through the disk: a follower copies them, a new leader opens its
log cold) kept its "waiting for a read" flag for ever, so every consume
that found nothing there was held a further second past its wait; a probe
(no wait) then answered after its caller's 500 ms deadline, every time.

The child is asked of node 1 while it opens the parent's partitions (ternd-
test holds each placement there 3 s): the attach waits for them. It once
answered 503 "the parent topic is not ready" after making the child (a
parent being placed was taken for a missing one). The live feed asked for
the parent then answers 503 E_TOPIC_NOT_READY (retry), not 404. Node 1
opens the partition it leads either after the parent's creation (the
engine made the topic before the replica manager handed the partition
over: a placement) or with it (handed over first: the creation's job
opens it, and the parent's 201 waits for that job, as when node 1 is not
the metastore leader and its catalog makes the topic from the record
before the request's own path does); ternd-test holds both, and the
parent's creation is asked in the background so that the test reaches
the hold either way.

Run: python3 tests/cluster/test_repl_children.py --ternd build/ternd-test
"""
import concurrent.futures
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from wsclient import WS, HandshakeError  # noqa: E402  (tests/e2e)

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-repl-children"}
ARGS = ["--default-replication-factor=3",
        "--replica-lag-time-max=2s", "--websocket-enabled"]
MISSED = "no reply within the deadline"
PLACE_DELAY_MS = 3000  # node 1's placements (ternd-test's TERN_TEST_PLACE_DELAY_MS)


class ReplChildren(harness.ClusterTest):
    def pstats(self, node, topic):
        status, body = node.request("GET", f"/v1/topics/{topic}")
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"]

    def leaders(self, node, topic):
        ps = self.pstats(node, topic)
        if not ps or not all(p.get("leader") for p in ps):
            return None
        return [p["leader"] for p in ps]

    def test_child_consumed_through_non_leaders(self):
        c = self.make(3, args=ARGS)
        n1 = c.nodes[0]
        held = dict(c.env(), TERN_TEST_PLACE_DELAY_MS=str(PLACE_DELAY_MS))
        for n in c.nodes:
            n.start(env=held if n is n1 else None)
        c.wait_ready()
        c.wait_alive(3)
        # A create with a parent makes the topic, then attaches it. The
        # attach waits while the parent's partitions are being opened on
        # the node asked (it once answered 503 "the parent topic is not
        # ready" then, after the child was made, so a retry found 409):
        # node 1 holds each opening of partitions a while, and the child
        # is asked of it while par's is held. par's creation answers
        # before that opening or after it (module docstring), so it is
        # asked in the background.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            made = pool.submit(n1.request, "POST", "/v1/topics",
                               {"name": "par", "partitions": 3, "replication_factor": 3},
                               timeout=30)
            wait_until("node 1 opening par's partitions",
                       lambda: "placement of par held" in n1.log())
            # The live feed meanwhile: retry (503), not "no such topic" (404).
            with self.assertRaises(HandshakeError) as cm:
                WS(n1.http_port, "/v1/ws/topics/par").sock.close()
            self.assertEqual((cm.exception.status, cm.exception.json()["message"],
                              cm.exception.headers.get("retry-after")),
                             (503, "E_TOPIC_NOT_READY", "1"), cm.exception.body)
            status, body = n1.request("POST", "/v1/topics", {"name": "kid", "parent": "par"},
                                      timeout=30)
            self.assertEqual(status, 201, body)
            made_status, made_body = made.result()
        self.assertEqual(made_status, 201, made_body)
        # Placed: the feed's next check (par is not a ttl_discard topic).
        with self.assertRaises(HandshakeError) as cm:
            WS(n1.http_port, "/v1/ws/topics/par").sock.close()
        self.assertEqual(cm.exception.status, 409, cm.exception.body)
        self.assertEqual((body["role"], body["replication_factor"], body["partitions"]),
                         ("child", 3, 3), body)
        kid = wait_until("a leader for every partition of par and kid on every node",
                         lambda: all(self.leaders(n, "par") and self.leaders(n, "kid")
                                     for n in c.nodes) and self.leaders(n1, "kid"))
        # Each partition led by another node: every node is a non-leader
        # of two of them.
        self.assertEqual(sorted(kid), ["1", "2", "3"], kid)

        def copiers_running():
            for n in c.nodes:
                status, body = n.request("GET", "/v1/topics/par/children")
                if status != 200:
                    return False
                mine = [x for x in body["children"] if x["name"] == "kid"]
                if not mine or not mine[0]["lag_complete"]:
                    return False
            return True
        wait_until("par -> kid copied on every node", copiers_running)

        sent = {p: set() for p in range(3)}
        for n in c.nodes:
            for p in range(3):
                for i in range(8):
                    b = f"n{n.id}-p{p}-{i}"
                    # A new leader answers 503 (nothing stored) until its
                    # epoch starts.
                    status, answer = wait_until(f"{b} acknowledged", lambda b=b, n=n, p=p: (
                        lambda r: r if r[0] != 503 else None)(n.request(
                            "POST", f"/v1/topics/par/produce?partition={p}", b.encode(),
                            headers=OCTET, timeout=30)))
                    self.assertIn(status, (200, 201, 202), (n.id, p, answer))
                    sent[p].add(b)

        got = {}

        def take(node, query):
            status, b = node.request("GET", f"/v1/topics/kid/consume?{query}", headers=CLIENT,
                                     timeout=30)
            self.assertIn(status, (200, 204), (node.id, query, b))
            if status == 204:
                return 0
            for m in b["messages"]:
                got.setdefault(m["payload"], []).append(m["partition"])
            handles = [m["receipt_handle"] for m in b["messages"]]
            status, r = node.request("POST", "/v1/topics/kid/ack/batch", handles, headers=CLIENT,
                                     timeout=30)
            self.assertEqual(status, 200, r)
            self.assertEqual([x for x in r["results"] if x["status"] != 204], [], r)
            return len(b["messages"])

        # Pinned long polls through a node that does not lead the
        # partition: forwarded to its leader, answered with its copies.
        for p in range(3):
            via = [n for n in c.nodes if str(n.id) != kid[p]][p % 2]
            wait_until(f"kid/{p}'s copies through node {via.id} (leader {kid[p]})",
                       lambda p=p, via=via: (take(via, f"partition={p}&max=10&wait=1s"),
                                             sent[p] <= set(got))[1], timeout=90, interval=0)
        # What is left (nothing, if the copies are all in) and the empty
        # rounds: queue consumes through every node, each probing the other
        # leaders and long-polling one, until every node answered 204
        # three rounds in a row.
        quiet = 0
        rounds = 0
        while quiet < 3:
            rounds += 1
            self.assertLess(rounds, 60, "the child never went quiet")
            quiet = 0 if sum(take(n, "max=10&wait=1s") for n in c.nodes) else quiet + 1
        everything = set().union(*sent.values())
        self.assertEqual(sorted(everything - set(got)), [], "copies never delivered")
        self.assertEqual(sorted(set(got) - everything), [], "deliveries of nothing sent")
        twice = {b: ps for b, ps in got.items() if len(ps) > 1}
        self.assertEqual(twice, {}, "delivered twice without a fault")
        wrong = {b: ps for b, ps in got.items() if f"-p{ps[0]}-" not in b}
        self.assertEqual(wrong, {}, "a copy outside its parent partition's number")
        for n in c.nodes:
            missed = [line for line in n.log().splitlines() if MISSED in line]
            self.assertEqual(missed, [], f"node {n.id}: forwarded consumes missed their deadline")


if __name__ == "__main__":
    harness.main()
