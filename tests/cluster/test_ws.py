"""The live WebSocket feed on 3 real ternd nodes (tests/cluster/harness.py):
each node's feed carries what its own partitions take, so a client that
connects to every owner /lookup lists sees every message; a publish taken
by a node that owns none of the partition (an explicit /v1 partition)
reaches the owner's feed through the ingress log and COMMIT, and appears
on no other feed. A partition moved to another node closes its old
owner's feed with E_OWNER_CHANGED (1012).

Run: python3 tests/cluster/test_ws.py --ternd build/ternd
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn, FRAME_RESPONSE  # noqa: E402  (tests/e2e, via harness)
from wsclient import WS  # noqa: E402

TOPIC = "live-prices"


class LiveFeed(harness.ClusterTest):
    # Factor 1: each owner's feed carries what its own partitions take.
    node_args = ["--default-replication-factor=1"]

    def owners(self, node):
        owners = node.owners(TOPIC)
        return None if owners is None else sorted(owners)

    def drain(self, feed, want):
        """The bodies a feed carries until want of them arrived or it stays
        quiet for 3 s (the last recv times out)."""
        got = []
        feed.sock.settimeout(3)
        try:
            while len(got) < want:
                got.append(feed.recv_message().body)
        except (socket.timeout, TimeoutError):
            pass
        return got

    def test_every_owner_feeds_its_own_partitions(self):
        c = self.make(3, security=False,
                      args=["--websocket-enabled", "--ttl-discard-topics=live-*=1h"]).start()
        wait_until("three NSQ doors in /nodes", lambda: len(
            c.nodes[0].nsq_http("GET", "/nodes")[1]["producers"]) == 3)
        tcp = {n.id: n.nsq_http("GET", "/info")[1]["tcp_port"] for n in c.nodes}
        # A PUB on each node: the topic grows one partition per node.
        for n in c.nodes:
            conn = Conn(tcp[n.id])
            self.assertEqual(conn.pub(TOPIC, b"grow"), (FRAME_RESPONSE, b"OK"))
            conn.close()
        for n in c.nodes:
            wait_until(f"one partition per node in node {n.id}'s replica",
                       lambda n=n: self.owners(n) == ["1", "2", "3"], 30)
        status, body = c.nodes[0].request("GET", f"/v1/topics/{TOPIC}")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["delivery_mode"], "ttl_discard", body)
        part_of = {p["owner_node"]: p["index"] for p in body["partition_stats"]}

        # The feeds a client opens from /lookup: one per owner.
        status, lk = c.nodes[1].nsq_http("GET", f"/lookup?topic={TOPIC}")
        self.assertEqual(status, 200, lk)
        by_port = {n.http_port: n for n in c.nodes}
        feeds = {}
        for p in lk["producers"]:
            n = by_port[p["http_port"]]
            w = WS(n.http_port, f"/v1/ws/topics/{TOPIC}")
            self.addCleanup(w.close)
            ready = w.recv_json()
            self.assertEqual(ready["type"], "ready", ready)
            feeds[n.id] = w
        self.assertEqual(sorted(feeds), [1, 2, 3])

        # NSQ publishes stay where they arrive: each node's feed has its own.
        sent = {}
        for n in c.nodes:
            conn = Conn(tcp[n.id])
            bodies = [f"nsq {i} via {n.id}".encode() for i in range(20)]
            self.assertEqual(conn.mpub(TOPIC, bodies), (FRAME_RESPONSE, b"OK"))
            conn.close()
            sent[n.id] = bodies
        # A /v1 produce through node 1 for node 2's partition: node 1 owns
        # none of it, so it crosses to node 2 and shows on node 2's feed.
        status, body = c.nodes[0].request(
            "POST", f"/v1/topics/{TOPIC}/produce?partition={part_of['2']}", b"crossed to 2",
            headers={"Content-Type": "application/octet-stream"})
        self.assertIn(status, (200, 202), body)
        sent[2] = sent[2] + [b"crossed to 2"]

        for nid, w in feeds.items():
            got = self.drain(w, len(sent[nid]))
            self.assertEqual(sorted(got), sorted(sent[nid]), f"node {nid}'s feed")
        # Nothing more on any feed (each message on exactly one).
        for nid, w in feeds.items():
            self.assertEqual(self.drain(w, 1), [], f"node {nid}'s feed after the last")

        # Node 1's partition moved to node 2 (its lead handed over): node
        # 1's feed no longer carries it and is closed with E_OWNER_CHANGED
        # (1012), so the client looks the topic up again; the others stay.
        status, mv = c.nodes[0].request(
            "PATCH", f"/v1/topics/{TOPIC}/partitions/{part_of['1']}", {"replicas": ["2"]})
        self.assertEqual(status, 202, mv)
        feeds[1].sock.settimeout(60)
        err, code = feeds[1].expect_error("E_OWNER_CHANGED")
        self.assertEqual(code, 1012, err)
        self.assertIn("/lookup", err["detail"])
        feeds[1].wait_closed()
        conn = Conn(tcp[3])
        self.assertEqual(conn.pub(TOPIC, b"after the move"), (FRAME_RESPONSE, b"OK"))
        conn.close()
        self.assertEqual(self.drain(feeds[3], 1), [b"after the move"], "node 3's feed")


if __name__ == "__main__":
    harness.main()
