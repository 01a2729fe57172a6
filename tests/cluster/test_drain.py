"""Draining one node of a cluster (tests/cluster/harness.py;
docs/operations.md, "Draining and rolling restarts"): while node 1 drains,
a /v1 long poll a client holds on it (waiting on every owner) ends at
once; an ack sent through another node for a lease of node 1's partition
still settles there; a consume forwarded to node 1 gets no new lease
(204); a produce for its partition through another node is still
acknowledged (the other node's ingress log takes it); node 1 exits 0 after
the last NSQ message it has out is FINed, comes back, and holds every
acknowledged message.

Run: python3 tests/cluster/test_drain.py --ternd build/ternd
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import harness  # noqa: E402
import nsqwire  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-drain"}


class Drain(harness.ClusterTest):
    # Factor 1: owners, and the ingress log taking a drained owner's produces.
    node_args = ["--default-replication-factor=1"]

    def test_one_node_drains_while_the_others_serve(self):
        c = self.make(3).start()
        c.wait_alive(3)
        a, b = c.nodes[0], c.nodes[1]
        a.daemon.wait_for("NSQ TCP listening")
        status, body = a.request("POST", "/v1/topics", {"name": "t", "partitions": 3})
        self.assertEqual(status, 201, body)
        status, body = a.request("POST", "/v1/topics", {"name": "quiet", "partitions": 3})
        self.assertEqual(status, 201, body)
        want = ["1", "2", "3"]
        wait_until("the owners everywhere",
                   lambda: all(n.owners(t) == want for n in c.nodes for t in ("t", "quiet")))
        # Node 1 owns partition 0: a lease of it, taken through node 2.
        status, body = a.request("POST", "/v1/topics/t/produce?partition=0", b"leased",
                                 headers=OCTET)
        self.assertEqual(status, 202, body)
        status, leased = b.request("GET", "/v1/topics/t/consume?partition=0&wait=5s")
        self.assertEqual(status, 200, leased)
        self.assertEqual(leased["payload"], "leased")
        # An NSQ consumer on node 1 holds a message, which keeps it draining.
        status, _ = a.nsq_http("POST", "/pub?topic=held", b"held")
        self.assertEqual(status, 200)
        nsq = nsqwire.Conn(a.daemon.tcp_port)
        nsq.identify(heartbeat_interval=30000, msg_timeout=120000)
        self.assertEqual(nsq.sub("held", "work"), (nsqwire.FRAME_RESPONSE, b"OK"))
        nsq.rdy(1)
        held = nsq.read_message()
        # A queue long poll held on node 1, on a topic with nothing in it.
        poll = {}

        def long_poll():
            poll["answer"] = a.request("GET", "/v1/topics/quiet/consume?wait=10s", timeout=30)

        poller = threading.Thread(target=long_poll)
        poller.start()
        wait_until("the long poll waiting",
                   lambda: a.request("GET", "/v1/drain")[1]["long_polls"] > 0)

        status, body = a.request("POST", "/v1/drain", b"", headers=CLIENT)
        self.assertEqual(status, 202, body)
        poller.join(timeout=30)
        self.assertEqual(poll["answer"][0], 204, poll["answer"])
        self.assertEqual(a.readyz(), 503)
        self.assertEqual(b.readyz(), 200)
        # Acks for node 1's leases still settle there, through node 2.
        status, body = b.request("POST", "/v1/topics/t/ack?receipt_handle="
                                 + leased["receipt_handle"], None, headers=CLIENT)
        self.assertEqual(status, 204, body)
        # No new lease leaves node 1: a consume of its partition through node 2.
        status, body = a.request("POST", "/v1/topics/t/produce?partition=0", b"x", headers=OCTET)
        self.assertEqual(status, 503, body)
        status, body = b.request("POST", "/v1/topics/t/produce?partition=0", b"after",
                                 headers=OCTET)
        self.assertEqual(status, 202, body)
        status, body = b.request("GET", "/v1/topics/t/consume?partition=0&wait=1s")
        self.assertEqual(status, 204, body)
        progress = a.request("GET", "/v1/drain")[1]
        self.assertEqual(progress["state"], "draining")
        self.assertEqual(progress["nsq_in_flight"], 1)
        self.assertEqual(progress["long_polls"], 0)
        nsq.fin(held.id)
        self.assertEqual(a.daemon.proc.wait(timeout=60), 0, a.log())
        a.daemon.stop()
        nsq.close()

        # Back: it holds what was acknowledged, and the ack stuck.
        a.start()
        a.wait_ready()
        got = []
        for _ in range(50):
            status, body = b.request("GET", "/v1/topics/t/consume?partition=0&wait=2s")
            if status == 200:
                got.append(body["payload"])
                self.assertEqual(b.request("POST", "/v1/topics/t/ack?receipt_handle="
                                           + body["receipt_handle"], None,
                                           headers=CLIENT)[0], 204)
                if "after" in got:
                    break
            else:
                time.sleep(0.2)
        self.assertEqual(got, ["after"])
        self.assertIn("drained after", a.log())


if __name__ == "__main__":
    harness.main()
