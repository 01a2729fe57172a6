"""What clients see when a partition move hands leadership over (issue 24,
"Throughout a move ..."; docs/cluster.md "Partition moves", "What clients
see at the hand-over"), tested from outside with real clients.

Three ternd nodes, an NSQ-made topic ho of one partition with replication
factor 2 (leader L, follower F; S holds no replica), 10 messages m0..m9
published on L, two channels:

  default  (/v1): all ten consumed on L; m0..m3 acked (204); m6 nacked
           and consumed again twice (3 deliveries, nacked: a REQ record
           with attempts 3); m4, m5, m7, m8, m9 left in flight (their
           receipt handles issued by L);
  nsqc     (an NSQ consumer C connected to L's NSQ TCP port, SUB, RDY 10):
           m0..m3 FIN'ed, m4 REQ'ed for 10 minutes (deferred), m6 REQ'ed
           and redelivered twice (attempts 3) then REQ'ed with RDY 0, the
           rest in flight.

Then the move: PATCH replicas [S, F], which takes L out of the list, so
leadership moves to S. Once it is done:

  (a) L's receipt handle of m5, acked on L, answers 410 with the error
      saying the lease is gone; m7's, acked on S, too; every message in
      flight at the hand-over (m4, m5, m7, m8, m9) and m6 are delivered
      again by S on /v1, m6 with attempts 4, the in-flight ones with
      attempts 2 (L requeued its leases with their attempts, and had those
      records on S, before the ISR change that let the move complete);
      m0..m3 never;
  (b) C's connection to L is closed by L after the hand-over (as nsqd
      closes a topic's consumers when the topic goes away there), and
      /lookup?topic=ho, asked of every node, lists S and only S as the
      producer (before the engine released a partition's consumers at
      the hand-over, C stayed connected to L, which served it nothing,
      holding leases L could no longer settle; queue/topic.c); a
      consumer connected to S then gets
  (c) the channel's state as it was: m5..m9 again (m6 with attempts 4,
      the others 2),
      never m0..m3 (FIN'ed before the move), not m4 (still deferred:
      /stats on S counts it deferred);
  (d) a /v1 long poll (wait 60 s) parked on L's lane of a third channel,
      lp, drained before, is answered 204 at the hand-over, not at the
      end of its wait (the lane's consumer is told the partition left).

Run: python3 tests/cluster/test_move_handover.py --ternd build/ternd
"""
import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn, Message  # noqa: E402

TOPIC = "ho"
CLIENT = {"X-Tern-Client": "test-move-handover"}
ARGS = ["--default-replication-factor=2", "--min-insync-replicas=2",
        "--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--member-session-timeout=3s", "--http-max-consume-wait=60s"]
BODIES = [f"m{i}" for i in range(10)]
STALE = "receipt handle no longer matches an active reservation"
FRAME_MESSAGE = 2


def log(text):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


class MoveHandover(harness.ClusterTest):
    def node(self, c, node_id):
        return next(n for n in c.nodes if str(n.id) == str(node_id))

    def part(self, node):
        status, body = node.request("GET", f"/v1/topics/{TOPIC}")
        self.assertEqual(status, 200, body)
        return body["partition_stats"][0]

    def tcp_port(self, node):
        status, info = node.nsq_http("GET", "/info")
        self.assertEqual(status, 200, info)
        return info["tcp_port"]

    def channel_stats(self, node, channel):
        status, st = node.nsq_http("GET", f"/stats?format=json&topic={TOPIC}&channel={channel}")
        self.assertEqual(status, 200, st)
        for t in st["topics"]:
            for ch in t["channels"]:
                if ch["channel_name"] == channel:
                    return ch
        return None

    def consume(self, node, n, wait="5s"):
        status, b = node.request(
            "GET", f"/v1/topics/{TOPIC}/consume?channel=default&max={n}&wait={wait}",
            headers=CLIENT, timeout=30)
        if status == 204:
            return []
        self.assertEqual(status, 200, b)
        return b["messages"]

    def settle(self, node, handle, extend=None):
        q = f"receipt_handle={handle}&channel=default"
        if extend is not None:
            q += f"&extend={extend}"
        return node.request("POST", f"/v1/topics/{TOPIC}/ack?{q}", headers=CLIENT)

    def settle_final(self, node, handle):
        """An ack's answer once it is not 503 (retryable while a node's
        view of the partition catches up with the hand-over)."""
        return wait_until(f"an answer other than 503 to the ack of {handle}",
                          lambda: (lambda sa: sa if sa[0] != 503 else None)(
                              self.settle(node, handle)), 30)

    def messages(self, conn, n, timeout=30):
        """The next n messages on conn (heartbeats answered), within
        timeout seconds."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            self.assertLess(time.monotonic(), deadline, f"{len(out)} of {n} messages came")
            conn.sock.settimeout(1)
            try:
                kind, data = conn.read_frame()
            except socket.timeout:
                continue
            self.assertEqual(kind, FRAME_MESSAGE, data)
            msg = Message(data)
            out.append(msg)
        return out

    def read_messages(self, conn, want, quiet=3.0, timeout=60):
        """Messages from conn (each FIN'ed) until every body of want came and
        nothing more for quiet seconds: {body: [attempts, ...]}."""
        got = {}
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            if set(want) <= set(got) and time.monotonic() - last >= quiet:
                break
            conn.sock.settimeout(0.5)
            try:
                kind, data = conn.read_frame()
            except socket.timeout:
                continue
            self.assertEqual(kind, FRAME_MESSAGE, data)
            attempts = int.from_bytes(data[8:10], "big")
            msg_id, body = data[10:26].decode(), data[26:].decode()
            got.setdefault(body, []).append(attempts)
            conn.fin(msg_id)
            last = time.monotonic()
        return got

    def test_handover_promises(self):
        c = self.make(3, args=ARGS).start()
        c.wait_alive(3)
        n1 = c.nodes[0]
        status, body = n1.nsq_http("POST", f"/topic/create?topic={TOPIC}")
        self.assertEqual(status, 200, body)
        for channel in ("default", "nsqc", "lp"):
            status, body = n1.nsq_http("POST", f"/channel/create?topic={TOPIC}&channel={channel}")
            self.assertEqual(status, 200, body)
        p0 = wait_until("ho/0 led with its whole ISR",
                        lambda: (lambda p: p if p.get("leader") and len(p.get("isr") or []) == 2
                                 else None)(self.part(n1)), 60)
        L = self.node(c, p0["leader"])
        F = self.node(c, next(r for r in p0["replicas"] if r != p0["leader"]))
        S = next(n for n in c.nodes if str(n.id) not in p0["replicas"])
        log(f"ho/0: leader {L.id}, follower {F.id}, spare {S.id}")
        for body in BODIES:
            status, answer = L.nsq_http("POST", f"/pub?topic={TOPIC}", body.encode())
            self.assertEqual(status, 200, answer)

        # --- channel default, through /v1 on L.
        held = {}

        def consumed():
            for m in self.consume(L, 10 - len(held), "1s"):
                self.assertEqual(m["attempts"], 1, m)
                held[m["payload"]] = m["receipt_handle"]
            return len(held) == 10
        wait_until("the ten messages consumed on L (default)", consumed, 60)
        self.assertEqual(sorted(held), sorted(BODIES))
        log("default on L: ten consumed")
        for body in BODIES[:4]:
            status, answer = self.settle(L, held.pop(body))
            self.assertEqual(status, 204, answer)
        for attempt in (2, 3):
            status, answer = self.settle(L, held.pop("m6"), extend=0)
            self.assertEqual(status, 204, answer)
            (m,) = self.consume(L, 1)
            self.assertEqual((m["payload"], m["attempts"]), ("m6", attempt), m)
            held["m6"] = m["receipt_handle"]
        status, answer = self.settle(L, held.pop("m6"), extend=0)
        self.assertEqual(status, 204, answer)
        # The rest stay leased on L: still valid there now (an extend).
        for body in ("m5", "m7"):
            status, answer = self.settle(L, held[body], extend="true")
            self.assertEqual(status, 204, answer)

        # --- channel nsqc, through an NSQ consumer on L.
        conn = Conn(self.tcp_port(L), host=L.host, timeout=30)
        self.addCleanup(conn.close)
        conn.identify(msg_timeout=300000)
        self.assertEqual(conn.sub(TOPIC, "nsqc")[1], b"OK")
        conn.rdy(10)
        ids = {}
        for msg in self.messages(conn, 10):
            self.assertEqual(msg.attempts, 1, msg)
            ids[msg.body.decode()] = msg.id
        self.assertEqual(sorted(ids), sorted(BODIES))
        log("nsqc on L: ten delivered")
        for body in BODIES[:4]:
            conn.fin(ids[body])
        conn.req(ids["m4"], 600000)
        for attempt in (2, 3):
            conn.req(ids["m6"], 0)
            (msg,) = self.messages(conn, 1)
            self.assertEqual((msg.body, msg.attempts), (b"m6", attempt), msg)
        conn.rdy(0)
        conn.req(ids["m6"], 0)
        # NSQ FIN and REQ have no answer: wait until L's /stats counts them
        # (a FIN leaves the depth once its record is durable): m6 ready,
        # m4 deferred, m5 and m7..m9 in flight.
        wait_until("nsqc on L: 1 ready, 1 deferred, 4 in flight",
                   lambda: (lambda ch: ch is not None and (ch["depth"], ch["deferred_count"],
                                                           ch["in_flight_count"])
                            == (1, 1, 4))(self.channel_stats(L, "nsqc")), 30)
        log("nsqc on L: settled as planned")
        status, lookup = S.nsq_http("GET", f"/lookup?topic={TOPIC}")
        self.assertEqual(status, 200, lookup)
        self.assertEqual([p["tcp_port"] for p in lookup["producers"]], [self.tcp_port(L)])

        # --- channel lp: drained on L, then a /v1 long poll (wait 60 s)
        # parked on L's lane, with nothing to deliver.
        def lp_drained():
            status, b = L.request("GET", f"/v1/topics/{TOPIC}/consume?channel=lp&max=10&wait=1s",
                                  headers=CLIENT, timeout=30)
            for m in (b["messages"] if status == 200 else []):
                status, answer = L.request(
                    "POST", f"/v1/topics/{TOPIC}/ack?receipt_handle={m['receipt_handle']}"
                    "&channel=lp", headers=CLIENT)
                self.assertEqual(status, 204, answer)
            ch = self.channel_stats(L, "lp")
            return ch is not None and ch["depth"] == 0 and ch["in_flight_count"] == 0
        wait_until("lp drained on L", lp_drained, 60)
        lp = {}

        def long_poll():
            t0 = time.monotonic()
            lp["answer"] = L.request("GET", f"/v1/topics/{TOPIC}/consume?channel=lp&wait=60s",
                                     headers=CLIENT, timeout=90)
            lp["took"] = time.monotonic() - t0
        poller = threading.Thread(target=long_poll, daemon=True)
        poller.start()
        wait_until("the long poll parked on L's lane of lp",
                   lambda: any(cl.get("ready_count", 0) >= 1
                               for cl in (self.channel_stats(L, "lp") or {}).get("clients", [])),
                   30)

        # --- the move: L leaves the list, S leads.
        status, mv = S.request("PATCH", f"/v1/topics/{TOPIC}/partitions/0",
                               {"replicas": [str(S.id), str(F.id)]})
        self.assertEqual(status, 202, mv)

        def done():
            status, body = S.request("GET", "/v1/cluster/moves")
            self.assertEqual(status, 200, body)
            m = next(x for x in body["moves"] if x["id"] == mv["id"])
            self.assertIn(m["state"], ("catching_up", "handing_over", "done"), m)
            return m["state"] == "done"
        wait_until(f"move {mv['id']} done", done, 120)
        log(f"move {mv['id']} done")
        for n in c.nodes:
            wait_until(f"node {n.id}: ho/0 led by {S.id}",
                       lambda n=n: self.part(n).get("leader") == str(S.id), 30)

        # (b) L closes C's connection; /lookup names S alone, everywhere.
        self.assertTrue(conn.expect_closed(timeout=30),
                        "the NSQ consumer of the old leader is still connected after the move")
        for n in c.nodes:
            status, lookup = n.nsq_http("GET", f"/lookup?topic={TOPIC}")
            self.assertEqual(status, 200, lookup)
            self.assertEqual([p["tcp_port"] for p in lookup["producers"]], [self.tcp_port(S)],
                             f"node {n.id}: {lookup}")

        # (d) The long poll parked on L is answered at the hand-over (204:
        # nothing for it), not at the end of its 60 s wait; its client asks
        # again and is routed to S.
        poller.join(45)
        self.assertFalse(poller.is_alive(), "the long poll on L still waits after the hand-over")
        log(f"long poll on L: {lp['answer'][0]} after {lp['took']:.1f}s")
        self.assertEqual(lp["answer"][0], 204, lp)
        self.assertLess(lp["took"], 55, lp)

        # (a) Receipt handles issued by L: 410, on L as on S.
        status, answer = self.settle_final(L, held["m5"])
        self.assertEqual((status, answer), (410, {"error": STALE}))
        status, answer = self.settle_final(S, held["m7"])
        self.assertEqual((status, answer), (410, {"error": STALE}))
        # ... and their messages come again, from S.
        got = {}
        want = {"m4", "m5", "m6", "m7", "m8", "m9"}
        deadline = time.monotonic() + 60
        while not want <= set(got) and time.monotonic() < deadline:
            for m in self.consume(S, 10, "2s"):
                got.setdefault(m["payload"], []).append(m["attempts"])
                status, answer = self.settle(S, m["receipt_handle"])
                self.assertEqual(status, 204, answer)
        got_more = self.consume(S, 10, "2s")
        for m in got_more:
            got.setdefault(m["payload"], []).append(m["attempts"])
        log(f"/v1 on S after the move: {got}")
        self.assertEqual(sorted(got), sorted(want), "default: delivered after the move")
        self.assertEqual(got["m6"], [4], "m6's attempts (3 deliveries before the move)")
        for body in ("m4", "m5", "m7", "m8", "m9"):
            self.assertEqual(got[body], [2], f"{body}'s attempts (in flight at the hand-over)")

        # (c) nsqc as it was, through a consumer of S.
        conn2 = Conn(self.tcp_port(S), host=S.host, timeout=30)
        self.addCleanup(conn2.close)
        conn2.identify()
        self.assertEqual(conn2.sub(TOPIC, "nsqc")[1], b"OK")
        conn2.rdy(10)
        got = self.read_messages(conn2, {"m5", "m6", "m7", "m8", "m9"})
        log(f"nsqc on S after the move: {got}")
        self.assertEqual(sorted(got), ["m5", "m6", "m7", "m8", "m9"],
                         "nsqc: FIN'ed before the move delivered again, or deferred m4 delivered")
        self.assertEqual(got["m6"], [4], "m6's attempts (3 deliveries before the move)")
        for body in ("m5", "m7", "m8", "m9"):
            self.assertEqual(got[body], [2], f"{body}'s attempts (in flight at the hand-over)")
        ch = self.channel_stats(S, "nsqc")
        self.assertEqual(ch["deferred_count"], 1, ch)
        conn2.close()
        # Every node stops cleanly (a sanitizer's report fails the exit).
        self.assertEqual(c.stop(), {n.id: 0 for n in c.nodes})


if __name__ == "__main__":
    harness.main()
