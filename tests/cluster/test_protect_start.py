"""A protected topic stays closed to the open NSQ doors while a node's
metastore replica cannot judge it (api/access.h tn_access_unknown;
docs/nsq-compatibility.md "Protected topics").

ProtectedAtStart.test_owned_topic_not_open_before_the_replica_catches_up,
three nodes, security on, NSQ doors open (no NSQ auth), factor 1: the
admin makes topic `pt` through /v1 (owned), a channel `audit` on it and
one message; node A holds pt/0. Every node stops; A starts alone: its
replica holds only its last snapshot (none: the cluster is young), so it
does not know `pt` has an owner, and no leader tells it more. Anonymous
NSQ PUB, MPUB, DPUB and SUB (to a channel made before) on `pt` through
A's TCP door wait 5 s for A to catch up, then are refused as retryable (`E_PUB_FAILED this node cannot tell yet whether topic "pt" is
protected: ...; retry`, E_MPUB_FAILED, E_DPUB_FAILED, E_SUB_FAILED, the
connection kept), nsqd's /pub and /mpub answer 503 `NOT_READY` with
`Retry-After: 1`, the WebSocket feed 503 `E_NOT_READY`. The others start
while an anonymous publisher keeps publishing through A's TCP door and
/pub: every answer is that refusal, or, once A caught up, the refusal
for good (E_UNAUTHORIZED, 401). The admin then reads `audit` through
/v1: only the admin's message. Before: A's doors found `pt` open; its
publishes were held by the router's start hold and went through once
the others were back: acknowledged into a protected topic without
credentials.

Run: python3 tests/cluster/test_protect_start.py --ternd build/ternd
"""
import http.client
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Closed, Conn  # noqa: E402
from wsclient import WS, HandshakeError  # noqa: E402  (tests/e2e, via harness)

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-protect-start"}


def unknown(topic):
    return (f'this node cannot tell yet whether topic "{topic}" is protected: its metastore '
            f'replica has not caught up since the start; retry')


class ProtectedAtStart(harness.ClusterTest):
    node_args = ["--default-replication-factor=1", "--websocket-enabled",
                 "--ttl-discard-topics=live-*=1h"]

    def test_owned_topic_not_open_before_the_replica_catches_up(self):
        c = self.make(3).start()
        c.wait_alive(3)
        n1 = c.nodes[0]
        for t, parts in (("pt", 1), ("live-pt", 3)):
            st, body = n1.request("POST", "/v1/topics", {"name": t, "partitions": parts})
            self.assertEqual(st, 201, body)
            self.assertEqual(body.get("owner"), "admin", body)
        wait_until("owners of pt/0 and live-pt everywhere", lambda: all(
            (o := n.owners("pt")) and o[0] != "0" and (w := n.owners("live-pt"))
            and "0" not in w for n in c.nodes), 60)
        a = next(n for n in c.nodes if str(n.id) == str(n1.owners("pt")[0]))
        others = [n for n in c.nodes if n is not a]
        live_here = str(a.id) in [str(o) for o in a.owners("live-pt")]
        # The channel the admin reads at the end, the topic's first: it
        # gets everything the topic takes; and one an anonymous SUB asks
        # for (made now: a new channel needs the metastore's leader).
        for ch in ("audit", "watch"):
            st, body = a.request("GET", f"/v1/topics/pt/consume?channel={ch}&wait=0s")
            self.assertEqual(st, 204, body)
        st, body = a.request("POST", "/v1/topics/pt/produce?partition=0", b"admin-0",
                             headers=OCTET)
        self.assertEqual(st, 202, body)
        # Ready: the door refuses it for good.
        conn = Conn(a.nsq_http("GET", "/info")[1]["tcp_port"], host=a.host)
        kind, data = conn.pub("pt", b"anon-ready")
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(b"E_UNAUTHORIZED"), data)
        self.assertTrue(conn.expect_closed())
        conn.close()

        self.stop_all(c)
        a.start()
        info = wait_until(f"node {a.id}'s /info", lambda: self.info(a), 60)
        alone = []  # (door, answer, the answer wanted)
        acked = []  # anonymous publishes answered OK

        # A alone.
        conn = Conn(info["tcp_port"], host=a.host, timeout=30)
        sub = None
        try:
            conn.identify()
            for door, send, bodies in [
                    ("PUB", lambda: conn.pub("pt", b"anon-pub"), [b"anon-pub"]),
                    ("MPUB", lambda: conn.mpub("pt", [b"anon-m1", b"anon-m2"]),
                     [b"anon-m1", b"anon-m2"]),
                    ("DPUB", lambda: conn.dpub("pt", 1000, b"anon-dpub"), [b"anon-dpub"]),
                    ("SUB", lambda: conn.sub("pt", "watch"), [])]:
                answer = send()
                if answer == (FRAME_RESPONSE, b"OK"):
                    acked += bodies
                    if door == "SUB":
                        sub, conn = conn, None
                        sub.rdy(10)
                code = {"PUB": "E_PUB_FAILED", "MPUB": "E_MPUB_FAILED", "DPUB": "E_DPUB_FAILED",
                        "SUB": "E_SUB_FAILED"}[door]
                alone.append((door, answer, (FRAME_ERROR, f"{code} {unknown('pt')}".encode())))
        finally:
            if conn is not None:
                conn.close()
        for path, body, bodies in [("/pub?topic=pt", b"anon-http", [b"anon-http"]),
                                   ("/mpub?topic=pt", b"anon-h1\nanon-h2", [b"anon-h1", b"anon-h2"])]:
            st, headers, data = self.raw(a, "POST", path, body)
            if st == 200:
                acked += bodies
            alone.append((path, (st, headers.get("Retry-After"), data),
                          (503, "1", b'{"message":"NOT_READY","error":"' +
                           unknown("pt").replace('"', '\\"').encode() + b'"}')))
        if live_here:
            try:
                w = WS(a.http_port, "/v1/ws/topics/live-pt", host=a.host)
                w.close()
                answer = (101, None, None)
            except HandshakeError as e:
                answer = (e.status, e.headers.get("retry-after"), e.json())
            alone.append(("WebSocket", answer, (503, "1", {
                "message": "E_NOT_READY", "detail": unknown("live-pt")})))

        # The others come back while an anonymous publisher keeps trying
        # through A's TCP door and /pub: refused to retry, then for good.
        stop = threading.Event()
        during = []

        def publish():
            pc, i = None, 0
            while not stop.is_set():
                try:
                    if pc is None:
                        pc = Conn(info["tcp_port"], host=a.host, timeout=30)
                    m = f"anon-during-{i}".encode()
                    kind, data = pc.pub("pt", m)
                    if (kind, data) == (FRAME_RESPONSE, b"OK"):
                        acked.append(m)
                    elif not data.startswith(b"E_PUB_FAILED"):
                        pc.close()  # E_UNAUTHORIZED closes it
                        pc = None
                    during.append(("PUB", data))
                except (OSError, Closed) as e:
                    during.append(("PUB", repr(e).encode()))
                    pc = None
                m = f"anon-during-http-{i}".encode()
                st, headers, data = self.raw(a, "POST", "/pub?topic=pt", m)
                if st == 200:
                    acked.append(m)
                during.append(("/pub", (st, headers.get("Retry-After"), data)))
                i += 1
                stop.wait(0.2)  # a few a second, not a flood
            if pc is not None:
                pc.close()
        t = threading.Thread(target=publish, daemon=True)
        t.start()
        try:
            for n in others:
                n.start()
            c.wait_ready()
            wait_until("the publisher refused for good", lambda: any(
                d == "PUB" and x.startswith(b"E_UNAUTHORIZED") for d, x in during), 60)
        finally:
            stop.set()
            t.join(60)

        # A SUB answered OK alone (before: it was) gets no message: its
        # first frame is the refusal once A knows the owner.
        sub_after = None
        if sub is not None:
            try:
                sub_after = sub.read_frame()
            except (socket.timeout, TimeoutError, Closed) as e:
                sub_after = repr(e)
            sub.close()
        sys.stderr.write(f"[protect_start] alone: {alone}\n[protect_start] while the others "
                         f"came back: {len(during)} answers, acknowledged {acked}; the anonymous "
                         f"SUB's next frame: {sub_after}\n")

        # What the admin reads: its own message only.
        got = []
        while True:
            st, body = a.request("GET", "/v1/topics/pt/consume?channel=audit&max=100&wait=1s",
                                 headers=CLIENT)
            if st == 204:
                break
            self.assertEqual(st, 200, body)
            got += [m["payload"] for m in body["messages"]]
        self.assertEqual(got, ["admin-0"])
        self.assertEqual(acked, [])
        self.assertFalse(isinstance(sub_after, tuple) and sub_after[0] == FRAME_MESSAGE, sub_after)
        for door, answer, want in alone:
            self.assertEqual(answer, want, f"{door} through node {a.id} alone")
        for door, answer in during:
            if door == "PUB":
                self.assertTrue(answer == f"E_PUB_FAILED {unknown('pt')}".encode() or
                                answer.startswith(b"E_UNAUTHORIZED"), answer)
            else:
                self.assertIn(answer[:2], [(503, "1"), (401, None)], answer)
                self.assertIn(b"NOT_READY" if answer[0] == 503 else b"AUTH_REQUIRED", answer[2])
        self.stop_all(c)
        self.assertEqual([n.id for n in c.nodes if "runtime error" in n.log()], [])

    def info(self, n):
        """n's nsqd /info, None while it does not answer 200."""
        try:
            st, body = n.nsq_http("GET", "/info", timeout=5)
        except (OSError, http.client.HTTPException):
            return None
        return body if st == 200 else None

    def raw(self, n, method, path, body=None):
        """method path on n without credentials: (status, headers, raw
        body)."""
        conn = http.client.HTTPConnection(n.host, n.http_port, timeout=30)
        try:
            conn.request(method, path, body=body)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()


if __name__ == "__main__":
    harness.main()
