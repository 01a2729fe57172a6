"""The first publishes to a replicated topic the NSQ doors make
(tests/cluster/harness.py; docs/replication.md, "Produce to a leader that
is not serving yet"): on 3 real ternd-test nodes started with
--default-replication-factor=3, a publish that makes an NSQ topic, and the
publishes after it, go through the new leader's gated path: none is
written before the leader's epoch-start record, none is answered before
the in-sync replicas hold it, and none is refused because the leader has
not started its epoch yet.

The window between a partition handed to the engine of its new leader and
that leader gating its log and writing its epoch-start record is a few
milliseconds; the test-only hook TERN_TEST_EPOCH_START_DELAY
(cluster/replica.c, TN_TEST builds) holds it open for 3 s on every new
leader of the topics named here.

test_first_publishes_wait_for_the_epoch: through node 1, a PUB makes
topic nd (its partition led by node 1), then PUB, MPUB, nsqd's /pub and a
/v1 produce go to the same partition while its leader is not serving yet.
Every one is answered OK (none E_PUB_FAILED / 503 "not serving yet"). At
once node 1 is SIGKILLed: a new leader is elected among the others, and
every message acknowledged is delivered by it (so each was on the
followers' disks before its OK), at an offset after the epoch-start
record that begins the partition (offset 0).

Then the partition is led by node 2 (a forced election): a PUB through
node 1, which holds a replica and leads nothing, goes to the leader at
once rather than waiting for a partition of its own to grow there. With
node 1 dead, /lookup lists the leader (the record names node 1 the
partition's owner).

test_v1_topic_first_produce: the same for a topic made with POST
/v1/topics (factor 3): its first /v1 produce and nsqd /pub on the leader are
answered OK once the leader serves, and survive the leader's SIGKILL.

test_first_dead_letter_waits_for_the_epoch: a message past max_attempts
moves to its dead-letter topic, which that move makes (factor 3) and whose
new leader is held not serving: the move waits for it, so the dead letter
arrives although the source channel is never consumed again.

Run: python3 tests/cluster/test_nsq_replicated.py --ternd build/ternd-test
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn  # noqa: E402  (tests/e2e)

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-nsq-replicated"}
DELAY_MS = 3000
ARGS = ["--default-replication-factor=3",
        "--min-insync-replicas=2", "--member-session-timeout=2s",
        "--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s"]


class NsqReplicated(harness.ClusterTest):
    def start(self, prefixes):
        c = self.make(3, args=ARGS)
        env = c.env()
        env["TERN_TEST_EPOCH_START_DELAY"] = ",".join(f"{p}={DELAY_MS}" for p in prefixes)
        for node in c.nodes:
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        return c

    def node(self, c, node_id):
        return [n for n in c.nodes if str(n.id) == str(node_id)][0]

    def tcp_port(self, node):
        status, info = node.nsq_http("GET", "/info")
        self.assertEqual(status, 200, info)
        return info["tcp_port"]

    def new_leader(self, c, topic, old):
        """Wait until the others' metastore names a live leader other than
        old for every partition of topic; the owners list."""
        others = [n for n in c.nodes if n is not old]

        def elected():
            owners = others[0].owners(topic)
            if not owners or any(o in ("0", "", None, str(old.id)) for o in owners):
                return None
            return owners
        return wait_until(f"{topic}: leaders other than node {old.id}", elected, 60)

    def drain(self, c, topic, owners, expect, timeout=90):
        """Consume every partition of topic on its leader through the
        default channel, acking each message, until every body of expect
        came; {body: (partition, offset)} of what came."""
        got = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not set(expect) <= set(got):
            for p, owner in enumerate(owners):
                leader = self.node(c, owner)
                status, b = leader.request(
                    "GET", f"/v1/topics/{topic}/consume?partition={p}&max=20&wait=1s",
                    headers=CLIENT, timeout=30)
                self.assertIn(status, (200, 204, 503, None), b)
                if status != 200:
                    continue
                for m in b["messages"]:
                    part, offset, _ = m["receipt_handle"].split(":")
                    got[m["payload"]] = (int(part), int(offset))
                    # Right after the failover an ack may be refused for
                    # now (503: the ISR still names the dead node); the
                    # message then comes again, which changes nothing here.
                    status, ans = leader.request(
                        "POST", f"/v1/topics/{topic}/ack?receipt_handle={m['receipt_handle']}",
                        None, headers=CLIENT)
                    self.assertIn(status, (204, 503), ans)
        missing = sorted(set(expect) - set(got))
        self.assertEqual(missing, [], f"{topic}: acknowledged, never delivered")
        return got

    def check_after_epoch_start(self, got):
        # A new replicated partition begins with its leader's epoch-start
        # record at offset 0: a message there was written before it.
        early = sorted(body for body, (_, offset) in got.items() if offset == 0)
        self.assertEqual(early, [], "messages written before the epoch-start record")

    def test_first_publishes_wait_for_the_epoch(self):
        c = self.start(["nd"])
        n1 = c.nodes[0]
        conn = Conn(self.tcp_port(n1), host=n1.host, timeout=60)
        acked = []
        try:
            conn.identify()
            # The first PUB makes the topic; the rest reach a leader that
            # has not started its epoch (DELAY_MS).
            self.assertEqual(conn.pub("nd", b"pub-0"), (0, b"OK"))
            acked.append("pub-0")
            self.assertEqual(conn.pub("nd", b"pub-1"), (0, b"OK"))
            acked.append("pub-1")
            self.assertEqual(conn.mpub("nd", [b"mpub-0", b"mpub-1"]), (0, b"OK"))
            acked += ["mpub-0", "mpub-1"]
        finally:
            conn.close()
        owners = n1.owners("nd")
        here = [p for p, o in enumerate(owners) if o == str(n1.id)]
        self.assertTrue(here, f"node 1 leads no partition of nd: {owners}")
        status, answer = n1.request("POST", "/pub?topic=nd", b"hpub-0", timeout=60)
        self.assertEqual(status, 200, answer)
        acked.append("hpub-0")
        status, answer = n1.request("POST", f"/v1/topics/nd/produce?partition={here[0]}",
                                    b"v1-0", headers=OCTET, timeout=60)
        self.assertEqual(status, 202, answer)
        acked.append("v1-0")
        # Its partition led by node 2 now (a forced election), node 1 still
        # holds a replica of it and leads none: a PUB there goes to the
        # leader at once. It once waited for a partition of its own to
        # grow here (10 s, logged as "no partition of it here to take
        # it"), since node 1 is still the partition's preferred leader.
        status, body = wait_until("the forced election of node 2", lambda: (
            lambda r: r if r[0] != 503 else None)(c.nodes[1].request(
                "POST", f"/v1/topics/nd/partitions/{here[0]}/leader", {"node": "2"})), 60, 0.5)
        self.assertEqual(status, 200, body)
        wait_until("node 1 seeing node 2 lead nd", lambda: (n1.owners("nd") or [])[here[0]] == "2")
        conn = Conn(self.tcp_port(n1), host=n1.host, timeout=60)
        try:
            conn.identify()
            self.assertEqual(conn.pub("nd", b"pub-2"), (0, b"OK"))
            acked.append("pub-2")
        finally:
            conn.close()
        self.assertNotIn("no partition of it here", n1.log())
        self.assertEqual(len(n1.owners("nd")), len(owners), "nd grew a partition")
        # Every OK above was given once the followers held the message:
        # node 1 dies now, and the others still deliver all of it.
        n1.kill()
        owners = self.new_leader(c, "nd", n1)
        # /lookup lists the leader, though the record still names node 1
        # (dead) the owner of nd's only partition: NSQ consumers find it.
        leader = self.node(c, owners[here[0]])
        c.wait_alive(2)
        for n in c.nodes[1:]:
            status, lk = n.nsq_http("GET", "/lookup?topic=nd")
            self.assertEqual(status, 200, lk)
            self.assertEqual([p["tcp_port"] for p in lk["producers"]], [self.tcp_port(leader)],
                             (n.id, lk))
        got = self.drain(c, "nd", owners, acked)
        self.check_after_epoch_start(got)

    def test_v1_topic_first_produce(self):
        c = self.start(["vt"])
        n1 = c.nodes[0]
        status, body = n1.request("POST", "/v1/topics",
                                  {"name": "vt", "partitions": 1, "replication_factor": 3,
                                   "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        owners = wait_until("vt's leader", lambda: [o for o in (n1.owners("vt") or []) if o], 30)
        leader = self.node(c, owners[0])
        acked = []
        status, answer = leader.request("POST", "/v1/topics/vt/produce", b"v1-0", headers=OCTET,
                                        timeout=60)
        self.assertEqual(status, 202, answer)
        acked.append("v1-0")
        status, answer = leader.request("POST", "/pub?topic=vt", b"pub-0", timeout=60)
        self.assertEqual(status, 200, answer)
        acked.append("pub-0")
        leader.kill()
        owners = self.new_leader(c, "vt", leader)
        got = self.drain(c, "vt", owners, acked)
        self.check_after_epoch_start(got)

    def poison_past_max_attempts(self, node, topic):
        """Produce "poison" to topic (max_attempts 1) through node, take its
        delivery and release it; the next consume, the one that moves it,
        delivers nothing."""
        status, answer = node.request("POST", f"/v1/topics/{topic}/produce", b"poison",
                                      headers=OCTET, timeout=60)
        self.assertEqual(status, 202, answer)
        status, m = wait_until("the message delivered", lambda: (lambda r: r if r[0] == 200
                               else None)(node.request("GET", f"/v1/topics/{topic}/consume?wait=1s",
                                                       headers=CLIENT)), 60)
        self.assertEqual(m["attempts"], 1, m)
        status, answer = node.request(
            "POST", f"/v1/topics/{topic}/ack?extend=0&receipt_handle={m['receipt_handle']}",
            headers=CLIENT)
        self.assertEqual(status, 204, answer)
        status, answer = node.request("GET", f"/v1/topics/{topic}/consume?wait=2s",
                                      headers=CLIENT)
        self.assertEqual(status, 204, answer)

    def test_first_dead_letter_waits_for_the_epoch(self):
        # The dead-letter topic is made (factor 3) by the first message
        # that moves there; its new leader is not serving for DELAY_MS.
        # The move waits for it as a door's publish does: the source
        # channel is consumed once (the delivery that finds the message
        # past max_attempts), never again, and the dead letter still
        # arrives.
        c = self.start(["dl."])
        n1 = c.nodes[0]
        status, body = n1.request("POST", "/v1/topics",
                                  {"name": "dl", "partitions": 1, "max_attempts": 1})
        self.assertEqual(status, 201, body)
        self.poison_past_max_attempts(n1, "dl")

        def dead_letter():
            r = n1.request("GET", "/v1/topics/dl.default.DLQ/consume?wait=1s", headers=CLIENT)
            self.assertIn(r[0], (200, 204, 404, 503), r)
            return r[1] if r[0] == 200 else None
        m = wait_until("the dead letter delivered", dead_letter, 60)
        self.assertEqual(m["payload"], "poison", m)
        owners = n1.owners("dl.default.DLQ")
        self.assertEqual(len(owners), 1, owners)
        status, info = n1.request("GET", "/v1/topics/dl.default.DLQ")
        self.assertEqual(status, 200, info)
        self.assertEqual(info["replication_factor"], 3, info)
        # Made by the move, it is the parent's owner's (operations.md,
        # "Dead letters and owners").
        self.assertEqual(info.get("owner"), "admin", info)

    def test_no_dead_letter_moves_into_a_topic_another_node_made_for_another(self):
        # mallory makes xo.default.DLQ through node 2 before xo exists; xo
        # (admin's, led by node 1) never moves its dead letters there: the
        # node holding the channel checks the metastore's record of a
        # topic another node made. Once xo exists, its dead-letter names
        # are refused to mallory on every node.
        c = self.start([])
        n1, n2 = c.nodes[0], c.nodes[1]
        status, body = n1.request("POST", "/v1/users", {
            "username": "mallory", "password": "mallory-pw",
            "grants": [{"action": "create", "patterns": ["xo*"]}]})
        self.assertEqual(status, 201, body)
        mallory = {"Authorization": harness.basic("mallory", "mallory-pw")}
        wait_until("node 2 has mallory", lambda: n2.request(
            "GET", "/v1/users/mallory", auth=False, headers=mallory)[0] == 200, 30)
        status, body = n2.request("POST", "/v1/topics", {"name": "xo.default.DLQ"}, auth=False,
                                  headers=mallory)
        self.assertEqual((status, body.get("owner")), (201, "mallory"), body)
        status, body = n1.request("POST", "/v1/topics",
                                  {"name": "xo", "partitions": 1, "max_attempts": 1,
                                   "replication_factor": 1})
        self.assertEqual(status, 201, body)
        wait_until("node 2 has xo", lambda: n2.request("GET", "/v1/topics/xo")[0] == 200, 30)
        status, body = n2.request("POST", "/v1/topics", {"name": "xo.other.DLQ"}, auth=False,
                                  headers=mallory)
        self.assertEqual(status, 403, body)
        self.assertIn("is a dead-letter topic of topic xo", body["error"])
        holder = self.node(c, n1.owners("xo")[0])
        self.poison_past_max_attempts(holder, "xo")
        wait_until("the refusal logged", lambda: "dead letters of xo/default stay on their "
                   "channel: their dead-letter topic xo.default.DLQ is owned by mallory"
                   in holder.log(), 30)
        status, info = n1.request("GET", "/v1/topics/xo.default.DLQ")
        self.assertEqual(status, 200, info)
        self.assertEqual(sum(p["message_count"] for p in info["partition_stats"]), 0, info)
        # The operator's fix: the move goes on at the next delivery.
        status, body = n2.request("PATCH", "/v1/topics/xo.default.DLQ", {"owner": "admin"})
        self.assertEqual(status, 200, body)

        def dead_letter():
            r = holder.request("GET", "/v1/topics/xo/consume?wait=1s", headers=CLIENT)
            self.assertEqual(r[0], 204, r)
            r = n1.request("GET", "/v1/topics/xo.default.DLQ/consume?wait=1s", headers=CLIENT)
            self.assertIn(r[0], (200, 204, 503), r)
            return r[1] if r[0] == 200 else None
        m = wait_until("the dead letter delivered", dead_letter, 60)
        self.assertEqual(m["payload"], "poison", m)


if __name__ == "__main__":
    harness.main()
