"""Consume from any node (tests/cluster/harness.py): a /v1 consume through a
node takes messages from every owner of the topic's partitions (single and
batch), each exactly once when acked at the owner; a pinned partition and
a replay read are forwarded to the owner; a long poll through a non-owner
is answered by a message produced at the owner later, and a waiting
queue consume by one produced at an owner it does not long-poll (the
wait's probe rounds); an owner that stalls (SIGSTOP) is skipped by a
queue consume; with an owner killed a pinned consume of its partition
answers 502 (unreachable) or 503 (marked dead), and queue consumes go on with the other owners; a
forwarded long poll whose client leaves as a message arrives gives the
message back at once (not after its visibility timeout); a user's
concurrent consumes are capped on the node the client talks to and on the
owner that runs forwarded ones (--http-max-consumes-per-user); the same message
read through its owner and through another node shows the same publish
time.

Run: python3 tests/cluster/test_consume.py --ternd build/ternd
"""
import http.client
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-consume"}


class Consume(harness.ClusterTest):
    # Factor 1: these tests are about owners (and their offsets start at 0).
    node_args = ["--default-replication-factor=1"]

    def node(self, c, node_id):
        return [n for n in c.nodes if str(n.id) == str(node_id)][0]

    def start(self, n=3, **kw):
        """A cluster of the case's own: one it stops a node of, or with
        options of its own (the others take self.shared(): each of those
        makes and consumes only a topic of its own name)."""
        c = self.make(n, **kw).start()
        c.wait_alive(n)
        return c

    def topic(self, c, name, partitions=3):
        status, body = c.nodes[0].request("POST", "/v1/topics",
                                          {"name": name, "partitions": partitions})
        self.assertEqual(status, 201, body)
        want = [str(i + 1) for i in range(partitions)]
        wait_until("the owners everywhere",
                   lambda: all(n.owners(name) == want for n in c.nodes))

    def produce_at_owners(self, c, topic, per_partition, tag):
        """per_partition messages to each partition, each produced at its
        owner; the payloads."""
        out = []
        for p, owner in enumerate(c.nodes[0].owners(topic)):
            node = self.node(c, owner)
            for i in range(per_partition):
                body = f"{tag}-p{p}-{i}"
                status, answer = node.request(
                    "POST", f"/v1/topics/{topic}/produce?partition={p}", body.encode(),
                    headers=OCTET)
                self.assertEqual(status, 202, answer)
                out.append(body)
        return out

    def ack_at_owner(self, c, topic, m, owners, query=""):
        owner = self.node(c, owners[m["partition"]])
        status, body = owner.request(
            "POST", f"/v1/topics/{topic}/ack?receipt_handle={m['receipt_handle']}{query}", None,
            headers=CLIENT)
        self.assertEqual(status, 204, body)

    def test_a_waiting_queue_consume_sees_an_owner_it_does_not_long_poll(self):
        # A wait of 30 s: an answer before its end came from a probe round
        # or the long poll, however slow a busy machine makes them.
        c = self.start(args=["--http-max-consume-wait=30s"])
        self.topic(c, "r")  # partition p on node p+1: node 1's own partition stays empty
        owners = c.nodes[0].owners("r")
        via = c.nodes[0]
        # Node 1's forwarded long poll goes to nodes 2 and 3 in turn, one
        # consume after the other: two consumes per partition, so one of
        # the two has its message arrive at the owner it does not
        # long-poll, which only the wait's probe rounds see.
        for p in (1, 2):
            owner = self.node(c, owners[p])
            for i in range(2):
                body = f"round-p{p}-{i}"
                result = {}

                def poll():
                    t0 = time.monotonic()
                    answer = via.request("GET", "/v1/topics/r/consume?wait=30s", timeout=60)
                    result["answer"] = answer
                    result["elapsed"] = time.monotonic() - t0

                t = threading.Thread(target=poll)
                t.start()
                time.sleep(1.0)  # the consume is waiting (its probes of every owner are done)
                status, answer = owner.request(
                    "POST", f"/v1/topics/r/produce?partition={p}", body.encode(), headers=OCTET)
                self.assertEqual(status, 202, answer)
                t.join(70)
                status, m = result["answer"]
                self.assertEqual(status, 200, m)
                self.assertEqual((m["partition"], m["payload"]), (p, body))
                # Before the wait ended (its last look at every owner would
                # find it too): a probe round (at most ~1.5 s apart by
                # then) or the long poll found it.
                self.assertLess(result["elapsed"], 20.0, (p, i))
                self.ack_at_owner(c, "r", m, owners)
        for node in c.nodes:
            status, m = node.request("GET", "/v1/topics/r/consume")
            self.assertEqual(status, 204, m)

    def open_poll(self, node, topic, query):
        """A /v1 consume sent on a raw connection (closed by the caller)."""
        auth = harness.basic("admin", harness.PASSWORD)
        s = socket.create_connection((node.host, node.http_port), timeout=30)
        s.sendall((f"GET /v1/topics/{topic}/consume?{query} HTTP/1.1\r\n"
                   f"Host: tern\r\nAuthorization: {auth}\r\n\r\n").encode())
        return s

    def test_per_user_consume_cap_counts_forwarded_consumes(self):
        c = self.start(args=["--http-max-consumes-per-user=2"])
        self.topic(c, "cap", partitions=1)  # owned by node 1
        owner, via, third = c.nodes[0], c.nodes[1], c.nodes[2]
        over = "too many concurrent consumes for this user"
        socks = [self.open_poll(via, "cap", "partition=0&wait=30s") for _ in range(2)]
        try:
            # Two pinned long polls through node 2, forwarded to node 1: the
            # user's cap of 2 is full on node 2...
            wait_until("node 2 counts the forwarded polls", lambda: via.request(
                "GET", "/v1/topics/cap/consume?partition=0&wait=0s")[0] == 429, timeout=20)
            status, body = via.request("GET", "/v1/topics/cap/consume?wait=0s")
            self.assertEqual((status, body["error"]), (429, over))
            # ... and on the owner, which runs them: the same user there
            # directly, or through a third node, is over it too.
            wait_until("node 1 counts the forwarded polls", lambda: owner.request(
                "GET", "/v1/topics/cap/consume?partition=0&wait=0s")[0] == 429, timeout=20)
            status, body = owner.request("GET", "/v1/topics/cap/consume?wait=0s")
            self.assertEqual((status, body["error"]), (429, over))
            status, body = third.request("GET", "/v1/topics/cap/consume?partition=0&wait=0s")
            self.assertEqual((status, body["error"]), (429, over))
        finally:
            for s in socks:
                s.close()
        # The clients left: both nodes give the counts back.
        for node in (via, owner, third):
            wait_until(f"node {node.id} under the cap again", lambda: node.request(
                "GET", "/v1/topics/cap/consume?partition=0&wait=0s")[0] == 204, timeout=20)

    def test_a_stalled_owner_is_skipped(self):
        c = self.start()
        self.topic(c, "s")
        owners = c.nodes[0].owners("s")
        stalled, other = c.nodes[1], c.nodes[2]  # owners of partitions 1 and 2
        status, answer = other.request("POST", "/v1/topics/s/produce?partition=2", b"here",
                                       headers=OCTET)
        self.assertEqual(status, 202, answer)
        os.kill(stalled.pid, signal.SIGSTOP)  # alive on record, answering nothing
        try:
            # Node 1 has nothing; node 2's probe runs out of its budget and
            # node 3's message answers.
            status, m = c.nodes[0].request("GET", "/v1/topics/s/consume", timeout=30)
            self.assertEqual(status, 200, m)
            self.assertEqual(m["payload"], "here")
            self.ack_at_owner(c, "s", m, owners)
        finally:
            os.kill(stalled.pid, signal.SIGCONT)

    def test_owner_killed(self):
        c = self.start(args=["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s"])
        self.topic(c, "k")
        owners = c.nodes[0].owners("k")
        expect = self.produce_at_owners(c, "k", 2, "k")
        via = c.nodes[0]
        c.nodes[1].kill()  # owns partition 1
        status, body = via.request("GET", "/v1/topics/k/consume?partition=1", timeout=30)
        self.assertIn(status, (502, 503), body)
        wait_until("node 2 marked dead", lambda: via.alive_members() == 2)
        status, body = via.request("GET", "/v1/topics/k/consume?partition=1")
        self.assertEqual(status, 503, body)
        self.assertEqual(body, {"error": "partition owner is down; retry later"})
        # Queue consumes go on with the other owners.
        got = []
        for _ in range(20):
            status, m = via.request("GET", "/v1/topics/k/consume?wait=1s")
            self.assertIn(status, (200, 204), m)
            if status == 204:
                break
            got.append(m["payload"])
            self.ack_at_owner(c, "k", m, owners)
        self.assertEqual(sorted(got), sorted(p for p in expect if "-p1-" not in p))


class SharedConsume(Consume):
    """The cases that share one cluster (self.shared()): each makes and
    consumes only a topic of its own name, and stops no node."""

    def test_single_and_batch_consumes_through_one_node_take_every_owner_once(self):
        c = self.shared()
        self.topic(c, "t")
        owners = c.nodes[0].owners("t")
        expect = self.produce_at_owners(c, "t", 4, "s")
        via = c.nodes[2]
        got = []
        deadline = time.monotonic() + 60
        # Single consumes until half is taken, then batches for the rest.
        while len(got) < len(expect) // 2 and time.monotonic() < deadline:
            status, m = via.request("GET", "/v1/topics/t/consume?wait=1s")
            self.assertIn(status, (200, 204), m)
            if status == 200:
                got.append(m["payload"])
                self.ack_at_owner(c, "t", m, owners)
        while len(got) < len(expect) and time.monotonic() < deadline:
            status, b = via.request("GET", "/v1/topics/t/consume?max=5&wait=1s", headers=CLIENT)
            self.assertIn(status, (200, 204), b)
            if status == 200:
                self.assertLessEqual(len(b["messages"]), 5)
                for m in b["messages"]:
                    got.append(m["payload"])
                    self.ack_at_owner(c, "t", m, owners)
        self.assertEqual(sorted(got), sorted(expect))
        # Every message was acked: nothing comes back, through any node.
        for node in c.nodes:
            status, m = node.request("GET", "/v1/topics/t/consume")
            self.assertEqual(status, 204, m)

    def test_a_batch_fills_from_several_owners(self):
        c = self.shared()
        self.topic(c, "b")
        owners = c.nodes[0].owners("b")
        expect = self.produce_at_owners(c, "b", 2, "b")
        status, body = c.nodes[0].request("GET", "/v1/topics/b/consume?max=6", headers=CLIENT)
        self.assertEqual(status, 200, body)
        parts = {m["partition"] for m in body["messages"]}
        self.assertEqual(len(body["messages"]), 6, body)
        self.assertEqual(parts, {0, 1, 2})
        self.assertEqual(sorted(m["payload"] for m in body["messages"]), sorted(expect))
        for m in body["messages"]:
            self.ack_at_owner(c, "b", m, owners)

    def test_pinned_and_replay_through_a_non_owner(self):
        c = self.shared()
        self.topic(c, "p")
        owners = c.nodes[0].owners("p")
        self.produce_at_owners(c, "p", 2, "pin")
        via = c.nodes[0]  # owns partition 0 only
        status, m = via.request("GET", "/v1/topics/p/consume?partition=2")
        self.assertEqual(status, 200, m)
        self.assertEqual((m["partition"], m["payload"]), (2, "pin-p2-0"))
        self.ack_at_owner(c, "p", m, owners)
        status, m = via.request("GET", "/v1/topics/p/consume?partition=2")
        self.assertEqual(status, 200, m)
        self.assertEqual(m["payload"], "pin-p2-1")
        self.ack_at_owner(c, "p", m, owners)
        status, m = via.request("GET", "/v1/topics/p/consume?partition=2")
        self.assertEqual(status, 204, m)
        # Replay reads: no lease, no handle, the same answers as the owner's.
        status, m = via.request("GET", "/v1/topics/p/consume?partition=1&offset=1")
        self.assertEqual(status, 200, m)
        self.assertEqual((m["partition"], m["offset"], m["payload"]), (1, 1, "pin-p1-1"))
        self.assertNotIn("receipt_handle", m)
        status, m = via.request("GET", "/v1/topics/p/consume?partition=1&offset=2")
        self.assertEqual(status, 204, m)

    def test_long_poll_through_a_non_owner_gets_a_later_produce(self):
        c = self.shared()
        self.topic(c, "w", partitions=1)  # owned by node 1 alone: it gets the forwarded poll
        via, owner = c.nodes[1], c.nodes[0]
        result = {}

        def poll():
            result["answer"] = via.request("GET", "/v1/topics/w/consume?wait=8s", timeout=30)

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(1.5)  # the poll is waiting (a slow machine only makes the produce later)
        status, answer = owner.request("POST", "/v1/topics/w/produce", b"late", headers=OCTET)
        self.assertEqual(status, 202, answer)
        t.join(40)
        status, m = result["answer"]
        self.assertEqual(status, 200, m)
        self.assertEqual((m["partition"], m["payload"]), (0, "late"))
        status, body = owner.request(
            "POST", f"/v1/topics/w/ack?receipt_handle={m['receipt_handle']}", None,
            headers=CLIENT)
        self.assertEqual(status, 204, body)

    def test_a_forwarded_poll_whose_client_leaves_gives_its_message_back(self):
        c = self.shared()
        status, body = c.nodes[0].request(
            "POST", "/v1/topics", {"name": "g", "partitions": 1, "visibility_timeout_ms": 60000})
        self.assertEqual(status, 201, body)
        wait_until("the owner everywhere", lambda: all(n.owners("g") == ["1"]
                                                       for n in c.nodes))
        owner, via = c.nodes[0], c.nodes[1]
        auth = harness.basic("admin", harness.PASSWORD)
        for i in range(3):
            # A pinned long poll through the non-owner: forwarded to node 1.
            s = socket.create_connection((via.host, via.http_port), timeout=10)
            s.sendall((f"GET /v1/topics/g/consume?partition=0&wait=10s HTTP/1.1\r\n"
                       f"Host: tern\r\nAuthorization: {auth}\r\n\r\n").encode())
            time.sleep(1.0)  # parked on the owner (a slow machine only delays the produce)
            # The message arrives and the client leaves at the same moment.
            p = http.client.HTTPConnection(owner.host, owner.http_port, timeout=10)
            p.request("POST", "/v1/topics/g/produce", body=f"gone{i}".encode(),
                      headers={"Authorization": auth, **OCTET})
            s.close()
            r = p.getresponse()
            r.read()
            p.close()
            self.assertEqual(r.status, 202)
            got = {}

            def back():
                status, m = owner.request("GET", "/v1/topics/g/consume?wait=1s")
                if status == 200:
                    got["m"] = m
                return status == 200

            # Its lease (if the owner took one for the poll) was given back:
            # well before the 60 s visibility timeout.
            wait_until("the message deliverable again", back, timeout=20)
            self.assertEqual(got["m"]["payload"], f"gone{i}")
            status, body = owner.request(
                "POST", f"/v1/topics/g/ack?receipt_handle={got['m']['receipt_handle']}", None,
                headers=CLIENT)
            self.assertEqual(status, 204, body)

    def test_publish_time_is_the_same_through_owner_and_non_owner(self):
        c = self.shared()
        self.topic(c, "ts", partitions=1)
        owner, via = c.nodes[0], c.nodes[2]
        # One produced at the owner, one through a non-owner (its ingress
        # log, then the owner's append).
        status, answer = owner.request("POST", "/v1/topics/ts/produce", b"a", headers=OCTET)
        self.assertEqual(status, 202, answer)
        time.sleep(1.2)  # the two publish times fall in different seconds
        status, answer = via.request("POST", "/v1/topics/ts/produce", b"b", headers=OCTET)
        self.assertEqual(status, 202, answer)
        stamps = {}
        for off in (0, 1):
            def read(node):
                status, m = node.request("GET", f"/v1/topics/ts/consume?partition=0&offset={off}")
                return m if status == 200 else None
            wait_until("the record at the owner", lambda: read(owner) is not None)
            at_owner, through = read(owner), read(via)
            self.assertIsNotNone(through)
            self.assertEqual(at_owner["payload"], through["payload"])
            self.assertEqual(at_owner["timestamp"], through["timestamp"])
            stamps[off] = at_owner["timestamp"]
        self.assertLessEqual(stamps[0], stamps[1])
        # A lease: taken through the non-owner, given back, taken at the
        # owner: the same publish time both ways.
        status, m1 = via.request("GET", "/v1/topics/ts/consume?partition=0")
        self.assertEqual(status, 200, m1)
        status, body = via.request(
            "POST", f"/v1/topics/ts/ack?receipt_handle={m1['receipt_handle']}&extend=0", None,
            headers=CLIENT)
        self.assertEqual(status, 204, body)
        status, m2 = owner.request("GET", "/v1/topics/ts/consume?partition=0&wait=5s")
        self.assertEqual(status, 200, m2)
        self.assertEqual((m2["offset"], m2["timestamp"]), (m1["offset"], m1["timestamp"]))
        self.assertEqual(m1["timestamp"], stamps[m1["offset"]])


# Only its own cases here (Consume runs the others).
for _name in dir(Consume):
    if _name.startswith("test") and _name not in vars(SharedConsume):
        setattr(SharedConsume, _name, None)


if __name__ == "__main__":
    harness.main()
