"""NSQ fleet behaviour on 3 real ternd nodes (tests/cluster/harness.py):
an NSQ topic grows by one partition on each node that takes NSQ
publishes for it and owns none (so every PUB, MPUB, DPUB, /pub and /mpub
is taken where it arrives, nothing refused), also when every node is
asked at once; /lookup on every node lists every owner with the NSQ TCP
port its listener bound, /nodes every member; consumers on each owner
drain what was published there; a topic made through /v1 keeps the
partition count its owner chose.

Run: python3 tests/cluster/test_fleet.py --ternd build/ternd
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn, FRAME_RESPONSE  # noqa: E402  (tests/e2e, via harness)

OCTET = {"Content-Type": "application/octet-stream"}


class Fleet(harness.ClusterTest):
    # Factor 1: these tests are about NSQ growth, one owner per partition.
    node_args = ["--default-replication-factor=1"]

    def tcp_port(self, node):
        status, info = node.nsq_http("GET", "/info")
        self.assertEqual(status, 200, info)
        return info["tcp_port"]

    def owners(self, node, topic):
        owners = node.owners(topic)
        return None if owners is None else sorted(owners)

    def start(self):
        c = self.make(3, security=False).start()
        c.wait_alive(3)
        self.ports = {n.id: self.tcp_port(n) for n in c.nodes}
        # Every member's record carries its NSQ door before anything asks.
        for n in c.nodes:
            wait_until(f"three NSQ doors in node {n.id}'s /nodes",
                       lambda n=n: len(n.nsq_http("GET", "/nodes")[1]["producers"]) == 3)
        return c

    def test_grows_where_published_and_lookup_lists_every_owner(self):
        c = self.start()
        topic = "fleet"
        sent = {n.id: [] for n in c.nodes}
        # A PUB on each node in turn: the first makes the topic (one
        # partition, placed by p mod n), each node that owns none grows it
        # by one of its own, and nothing is refused.
        for n in c.nodes:
            conn = Conn(self.ports[n.id])
            body = f"first via {n.id}".encode()
            self.assertEqual(conn.pub(topic, body), (FRAME_RESPONSE, b"OK"), n.id)
            sent[n.id].append(body)
            conn.close()
        for n in c.nodes:
            wait_until(f"one partition per node in node {n.id}'s replica",
                       lambda n=n: self.owners(n, topic) == ["1", "2", "3"], 30)
        # Every door now takes the topic on every node, at its own partition.
        for n in c.nodes:
            conn = Conn(self.ports[n.id])
            bodies = [f"mpub {i} via {n.id}".encode() for i in range(5)]
            self.assertEqual(conn.mpub(topic, bodies), (FRAME_RESPONSE, b"OK"))
            sent[n.id] += bodies
            body = f"dpub via {n.id}".encode()
            self.assertEqual(conn.dpub(topic, 10, body), (FRAME_RESPONSE, b"OK"))
            sent[n.id].append(body)
            conn.close()
            body = f"http pub via {n.id}".encode()
            self.assertEqual(n.nsq_http("POST", f"/pub?topic={topic}", body), (200, b"OK"))
            sent[n.id].append(body)
            bodies = [f"http mpub {i} via {n.id}".encode() for i in range(3)]
            self.assertEqual(n.nsq_http("POST", f"/mpub?topic={topic}", b"\n".join(bodies)),
                             (200, b"OK"))
            sent[n.id] += bodies
        # Still one partition each: asking again changes nothing.
        for n in c.nodes:
            self.assertEqual(self.owners(n, topic), ["1", "2", "3"])

        # /lookup on every node: the three owners, with the ports their
        # listeners bound, as nsqlookupd's producer entries.
        want = sorted((self.ports[n.id], n.http_port) for n in c.nodes)
        for n in c.nodes:
            status, lk = n.nsq_http("GET", f"/lookup?topic={topic}")
            self.assertEqual(status, 200, lk)
            got = sorted((p["tcp_port"], p["http_port"]) for p in lk["producers"])
            self.assertEqual(got, want, n.id)
            for p in lk["producers"]:
                self.assertEqual(sorted(p), ["broadcast_address", "hostname", "http_port",
                                             "remote_address", "tcp_port", "version"])
                self.assertEqual(p["broadcast_address"], "127.0.0.1")
                self.assertEqual(p["remote_address"], f"127.0.0.1:{p['tcp_port']}")
                self.assertTrue(p["hostname"])
                self.assertTrue(p["version"])
            status, nodes = n.nsq_http("GET", "/nodes")
            self.assertEqual(status, 200, nodes)
            self.assertEqual(sorted(p["tcp_port"] for p in nodes["producers"]),
                             sorted(self.ports.values()))
            for p in nodes["producers"]:
                self.assertIn(topic, p["topics"])
                self.assertEqual(len(p["tombstones"]), len(p["topics"]))
                self.assertNotIn(True, p["tombstones"])
            self.assertEqual(n.nsq_http("GET", "/lookup?topic=nosuch"),
                             (404, {"message": "TOPIC_NOT_FOUND"}))

        # Each node holds what it took (its own partition), and a consumer
        # on each owner, as /lookup lists them, drains the lot.
        for n in c.nodes:
            status, stats = n.nsq_http("GET", f"/stats?format=json&topic={topic}")
            self.assertEqual(status, 200, stats)
            [t] = stats["topics"]
            self.assertEqual(t["message_count"], len(sent[n.id]), n.id)
        got = []
        for n in c.nodes:
            conn = Conn(self.ports[n.id])
            conn.identify()
            self.assertEqual(conn.sub(topic, "drain"), (FRAME_RESPONSE, b"OK"))
            conn.rdy(100)
            for _ in sent[n.id]:
                m = conn.read_message()
                got.append(m.body)
                conn.fin(m.id)
            conn.close()
        self.assertEqual(sorted(got), sorted(b for v in sent.values() for b in v))
        # The channel is in the record: every node lists it.
        for n in c.nodes:
            wait_until(f"the channel in node {n.id}'s /lookup",
                       lambda n=n: n.nsq_http("GET", f"/lookup?topic={topic}")[1]
                       ["channels"] == ["drain"], 30)

    def test_concurrent_publishes_add_one_partition_per_node(self):
        c = self.start()
        topic = "burst"
        results = []
        lock = threading.Lock()

        def publish(node, k):
            conn = Conn(self.ports[node.id])
            try:
                answer = conn.pub(topic, f"{k} via {node.id}".encode())
            finally:
                conn.close()
            with lock:
                results.append(answer)

        threads = [threading.Thread(target=publish, args=(n, k))
                   for k in range(4) for n in c.nodes]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        self.assertEqual(results, [(FRAME_RESPONSE, b"OK")] * len(threads))
        for n in c.nodes:
            wait_until(f"one partition per node in node {n.id}'s replica",
                       lambda n=n: self.owners(n, topic) == ["1", "2", "3"], 30)

    def test_v1_topic_keeps_its_partitions(self):
        c = self.start()
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "owned", "partitions": 1})
        self.assertEqual(status, 201, body)
        for n in c.nodes:
            wait_until(f"the /v1 topic on node {n.id}",
                       lambda n=n: self.owners(n, "owned") == ["1"], 30)
        # Node 2 owns none of it: the topic does not grow, and node 2
        # takes the NSQ publishes into its ingress log for node 1.
        conn = Conn(self.ports[2])
        self.assertEqual(conn.pub("owned", b"x"), (FRAME_RESPONSE, b"OK"))
        conn.close()
        self.assertEqual(c.nodes[1].nsq_http("POST", "/pub?topic=owned", b"y")[0], 200)
        for n in c.nodes:
            self.assertEqual(self.owners(n, "owned"), ["1"])
        # Its owner takes it itself.
        conn = Conn(self.ports[1])
        self.assertEqual(conn.pub("owned", b"z"), (FRAME_RESPONSE, b"OK"))
        conn.close()

        def held():
            out, offset = [], 0
            while True:
                status, m = c.nodes[0].request(
                    "GET", f"/v1/topics/owned/consume?partition=0&offset={offset}")
                if status != 200:
                    return sorted(out)
                out.append(m["payload"])
                offset += 1
        wait_until("the three on the owner", lambda: held() == ["x", "y", "z"], 30)


if __name__ == "__main__":
    harness.main()
