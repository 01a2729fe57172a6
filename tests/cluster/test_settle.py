"""Settle from any node (tests/cluster/harness.py): a receipt handle taken
by a /v1 consume on a partition's owner is acked, extended or nacked
through another node, which forwards it to the owner over node RPC
(SETTLE); an ack batch spanning the partitions of all three owners gets a
result per handle; a stale handle answers 410 through any node; a handle
of a partition whose owner is gone answers 502 (unreachable) or 503 (its
member record says dead); hundreds of concurrent single acks through a
non-owner all settle (the owner coalesces nothing; the forwarding node
queues them behind its busy SETTLE calls and sends them in batches) and
none of their messages comes back after the visibility timeout.

Run: python3 tests/cluster/test_settle.py --ternd build/ternd
"""
import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "cluster-test"}
VISIBILITY_MS = 2000
STALE = "receipt handle no longer matches an active reservation"
DOWN = "partition owner is down; retry later"
UNREACHABLE = "partition owner unreachable"


class Settle(harness.ClusterTest):
    # Factor 1: settles forwarded to the one owner, and that owner gone.
    node_args = ["--default-replication-factor=1"]

    def node(self, c, node_id):
        return [n for n in c.nodes if str(n.id) == str(node_id)][0]

    def start(self, **kw):
        """The case's own topic (three partitions, one per node) on a
        cluster of its own when the case starts it with options, else on
        the class's shared one (the cases that share it stop no node)."""
        if kw:
            c = self.make(3, **kw).start()
            c.wait_alive(3)
        else:
            c = self.shared()
        self.t = "t-" + self._testMethodName[len("test_"):]
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": self.t, "partitions": 3, "visibility_timeout_ms": VISIBILITY_MS})
        self.assertEqual(status, 201, body)
        wait_until("the owners everywhere",
                   lambda: all(n.owners(self.t) == ["1", "2", "3"] for n in c.nodes))
        return c

    def owner(self, c, p):
        return self.node(c, c.nodes[0].owners(self.t)[p])

    def others(self, c, node):
        return [n for n in c.nodes if n is not node]

    def produce(self, node, p, body):
        status, answer = node.request("POST", f"/v1/topics/{self.t}/produce?partition={p}",
                                      body.encode(), headers=OCTET)
        self.assertEqual(status, 202, answer)

    def consume(self, node, p, wait="5s"):
        """A lease of a message of partition p, taken on node (its owner)."""
        return node.request("GET", f"/v1/topics/{self.t}/consume?partition={p}&wait={wait}")

    def lease(self, c, p, body):
        owner = self.owner(c, p)
        self.produce(owner, p, body)
        status, m = self.consume(owner, p)
        self.assertEqual(status, 200, m)
        self.assertEqual(m["payload"], body)
        self.assertEqual(m["partition"], p)
        return m

    def ack(self, node, handle, extend=None):
        q = f"receipt_handle={handle}" + (f"&extend={extend}" if extend is not None else "")
        return node.request("POST", f"/v1/topics/{self.t}/ack?{q}", headers=CLIENT)

    def ack_batch(self, node, handles, extend=None):
        q = f"?extend={extend}" if extend is not None else ""
        return node.request("POST", f"/v1/topics/{self.t}/ack/batch{q}", handles,
                            headers=CLIENT)

    def test_owner_gone(self):
        c = self.start(args=["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s"])
        m = self.lease(c, 2, "orphan")
        owner = self.owner(c, 2)
        via = self.owner(c, 0)
        owner.kill()
        # Before the metastore marks it dead: unreachable (the call fails).
        status, body = self.ack(via, m["receipt_handle"])
        self.assertIn(status, (502, 503), body)
        self.assertIn(body["error"], (UNREACHABLE, DOWN))
        # Once its member record says dead: 503, without calling it.
        wait_until("the owner marked dead",
                   lambda: self.ack(via, m["receipt_handle"])[0] == 503, 60)
        status, body = self.ack(via, m["receipt_handle"])
        self.assertEqual((status, body["error"]), (503, DOWN))
        # A batch mixes the dead owner's handle with a live local one.
        local = self.lease(c, 0, "local")
        status, body = self.ack_batch(via, [m["receipt_handle"], local["receipt_handle"]])
        self.assertEqual(status, 200, body)
        self.assertEqual([(r["status"], r.get("error")) for r in body["results"]],
                         [(503, DOWN), (204, None)])



class SharedSettle(Settle):
    """The cases that share one cluster (Settle.start without options):
    each settles on a topic of its own and stops no node."""

    def test_ack_extend_nack_through_another_node(self):
        c = self.start()
        owner = self.owner(c, 0)
        a, b = self.others(c, owner)

        # Ack through another node: 204, and the message never comes back.
        m = self.lease(c, 0, "acked")
        status, body = self.ack(a, m["receipt_handle"])
        self.assertEqual(status, 204, body)
        time.sleep(VISIBILITY_MS / 1000 + 1)
        status, body = self.consume(owner, 0, wait="1s")
        self.assertEqual(status, 204, body)
        # The same handle again, through either node or the owner: stale.
        for n in (a, b, owner):
            status, body = self.ack(n, m["receipt_handle"])
            self.assertEqual(status, 410, body)
            self.assertEqual(body["error"], STALE)

        # Extend through another node keeps the handle valid; the ack
        # through the third node then settles it.
        m = self.lease(c, 0, "extended")
        for extend in ("true", "1"):
            status, body = self.ack(a, m["receipt_handle"], extend)
            self.assertEqual(status, 204, body)
        status, body = self.ack(b, m["receipt_handle"])
        self.assertEqual(status, 204, body)
        status, body = self.consume(owner, 0, wait="0s")
        self.assertEqual(status, 204, body)

        # Nack through another node: deliverable again at once, one attempt
        # more, under a new handle; the old one is stale.
        m = self.lease(c, 0, "nacked")
        self.assertEqual(m["attempts"], 1)
        status, body = self.ack(b, m["receipt_handle"], "0")
        self.assertEqual(status, 204, body)
        status, again = self.consume(owner, 0)
        self.assertEqual(status, 200, again)
        self.assertEqual(again["payload"], "nacked")
        self.assertEqual(again["attempts"], 2)
        self.assertNotEqual(again["receipt_handle"], m["receipt_handle"])
        status, body = self.ack(a, m["receipt_handle"])
        self.assertEqual(status, 410, body)
        status, body = self.ack(a, again["receipt_handle"])
        self.assertEqual(status, 204, body)

        # A handle of a partition the topic does not have: stale anywhere.
        status, body = self.ack(a, "7:0:1")
        self.assertEqual(status, 410, body)
        # Lone-node answers stay: malformed, missing.
        status, body = self.ack(a, "0:x:1")
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"], "receipt handle is malformed")

    def test_ack_batch_spanning_every_owner(self):
        c = self.start()
        leases = [self.lease(c, p, f"batch{p}") for p in range(3)]
        handles = [m["receipt_handle"] for m in leases]
        for via in c.nodes:
            # Every owner's handle through one node, with a stale one, a
            # malformed one and a duplicate.
            stale = f"{(int(via.id)) % 3}:999:7"
            status, body = self.ack_batch(via, handles + [stale, "junk", handles[0]],
                                          extend="true")
            self.assertEqual(status, 200, body)
            got = [(r["receipt_handle"], r["status"], r.get("error")) for r in body["results"]]
            self.assertEqual(got, [(h, 204, None) for h in handles] +
                             [(stale, 410, STALE),
                              ("junk", 400, "receipt handle is malformed"),
                              (handles[0], 204, None)])
        # Acked through the last node, all at once; then all stale.
        status, body = self.ack_batch(c.nodes[2], handles)
        self.assertEqual(status, 200, body)
        self.assertEqual([r["status"] for r in body["results"]], [204, 204, 204])
        status, body = self.ack_batch(c.nodes[0], handles)
        self.assertEqual(status, 200, body)
        self.assertEqual([(r["status"], r["error"]) for r in body["results"]],
                         [(410, STALE)] * 3)
        time.sleep(VISIBILITY_MS / 1000 + 1)
        for p in range(3):
            status, body = self.consume(self.owner(c, p), p, wait="1s")
            self.assertEqual(status, 204, body)

    def test_many_concurrent_acks_through_a_non_owner(self):
        c = self.start()
        owner = self.owner(c, 1)
        via = self.others(c, owner)[0]
        n = 300
        for k in range(0, n, 100):
            status, body = owner.request(
                "POST", f"/v1/topics/{self.t}/produce/batch",
                [{"payload": f"m{i}", "partition": 1} for i in range(k, k + 100)])
            self.assertEqual(status, 202, body)
        handles = []
        while len(handles) < n:
            status, body = owner.request(
                "GET", f"/v1/topics/{self.t}/consume?partition=1&max=100&wait=5s",
                headers=CLIENT)
            self.assertEqual(status, 200, body)
            handles += [m["receipt_handle"] for m in body["messages"]]
        self.assertEqual(len(handles), n)
        before = via.metric("tern_cluster_settle_handles_total") or 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=48) as pool:
            results = list(pool.map(lambda h: self.ack(via, h), handles))
        self.assertEqual([s for s, _ in results], [204] * n,
                         [b for s, b in results if s != 204][:3])
        after = via.metric("tern_cluster_settle_handles_total")
        self.assertEqual(after - before, n)
        calls = via.metric("tern_cluster_settle_calls_total")
        self.assertIsNotNone(calls)
        self.assertIsNotNone(via.metric("tern_cluster_settle_coalesced_total"))
        # Settled for good: nothing comes back once the leases would have
        # run out.
        time.sleep(VISIBILITY_MS / 1000 + 1)
        status, body = self.consume(owner, 1, wait="2s")
        self.assertEqual(status, 204, body)


# Only its own cases here (Settle runs the others).
for _name in dir(Settle):
    if _name.startswith("test") and _name not in vars(SharedSettle):
        setattr(SharedSettle, _name, None)


if __name__ == "__main__":
    harness.main()
