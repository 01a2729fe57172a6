"""Counts of replicated partitions count messages only (issue 23, "Counts"
in docs/replication.md): a replicated partition's log holds control
records (each leader's EPOCH_START, the PRODUCER mark ahead of every
forwarded batch) that take offsets but are not messages. Three real nodes
with --default-replication-factor=3 (the default, said again); the same
publishes go to replicated topics and to a factor-1 topic through
NSQ TCP (PUB, MPUB), NSQ HTTP (/pub, /mpub) and /v1 (produce, batch), on
the leaders and (/v1) on the other nodes (forwarded: a PRODUCER mark
each), and
the node leading most replicated partitions is SIGKILLed (a new epoch
start in each) and restarted between rounds. An NSQ-made topic has a
partition per node (a fleet of nsqd); /stats and /metrics are per node
and count the partitions that node leads, so they are summed over the
nodes. After every round:

- NSQ /stats: the topic's message_count, its depth (a topic without a
  channel holds every message; one with a channel none), the channel's
  depth and message_count equal the messages acknowledged, as for the
  factor-1 topic;
- /v1 GET topic: the partitions' message_count and stored_messages add up
  to them; each next_offset (the next offset to be written) is above its
  message_count by the control records, at least one per leader epoch
  seen (factor 1: equal);
- /metrics: tern_topic_messages_total and tern_channel_depth add up to
  them.

Then a consumer acks some messages: the channel's depth drops by exactly
those.

Publishes are sent only while every partition has its whole ISR and a
serving leader, and retried only on an explicit refusal (nothing stored),
so the acknowledged count is exact.

Run: python3 tests/cluster/test_repl_counts.py --ternd build/ternd
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import nsqwire  # noqa: E402  (tests/e2e)
from harness import wait_until  # noqa: E402

ARGS = ["--default-replication-factor=3",
        "--min-insync-replicas=2", "--member-session-timeout=3s",
        "--replica-lag-time-max=2s", "--leader-rebalance-delay=3600s"]
OCTET = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json", "X-Tern-Client": "tests"}
NSQ = "cn"      # NSQ-made, factor 3 (the default here), channel "ch"
NSQ_BARE = "cz"  # NSQ-made, factor 3, no channel: the topic holds what it gets
V1 = "cv"       # /v1-made, factor 3, channel "ch"
F1 = "cf"       # /v1-made, factor 1, channel "ch": the reference
CH = "ch"
ROUNDS = 3


class ReplCounts(harness.ClusterTest):
    def setUp(self):
        self.c = self.make(3, args=ARGS).start()
        self.c.wait_alive(3)
        for n in self.c.nodes:
            wait_until(f"node {n.id} sees 3 members alive", lambda n=n: n.alive_members() == 3)
        self.sent = {NSQ: 0, NSQ_BARE: 0, V1: 0, F1: 0}
        self.epochs_seen = {}

    # --- reading ---------------------------------------------------------------

    def node(self, node_id):
        return [n for n in self.c.nodes if str(n.id) == str(node_id)][0]

    def pstats(self, topic, node=None):
        """Every partition of topic as a running node's GET /v1/topics shows
        them (an NSQ-made topic has one per node, as a fleet of nsqd)."""
        for n in [node] if node else self.c.running():
            status, body = n.request("GET", f"/v1/topics/{topic}")
            if status == 200 and body.get("partition_stats"):
                return body["partition_stats"]
        return None

    def settled(self, topic, factor):
        """Every partition led, with its whole ISR, as every running node
        sees it."""
        for n in self.c.running():
            pss = self.pstats(topic, n)
            if not pss:
                return False
            for ps in pss:
                if "next_offset" not in ps:
                    return False
                if factor > 1 and (not ps.get("leader") or len(ps.get("isr", [])) != factor):
                    return False
        return True

    def leaders(self, topic):
        return [self.node(ps["leader"] if "leader" in ps else ps["owner_node"])
                for ps in self.pstats(topic)]

    def stats(self, node, topic):
        """node's NSQ /stats entry of topic (with credentials: /v1 topics
        are protected); it counts the partitions that node leads."""
        status, body = node.request("GET", f"/stats?format=json&topic={topic}")
        self.assertEqual(status, 200, body)
        topics = body["topics"]
        self.assertEqual(len(topics), 1, body)
        return topics[0]

    def channel(self, entry, name=CH):
        """The channel's entry; zeros on a node that holds none of the
        topic's partitions (it may not know the channel yet)."""
        for c in entry["channels"]:
            if c["channel_name"] == name:
                return c
        return {"depth": 0, "backend_depth": 0, "message_count": 0, "in_flight_count": 0}

    def nsq_sums(self, topic, has_channel):
        """The sums over the running nodes of their /stats and /metrics
        figures of topic (each counts what it leads)."""
        out = {"message_count": 0, "depth": 0, "backend_depth": 0, "ch_depth": 0,
               "ch_backend_depth": 0, "ch_message_count": 0, "ch_in_flight": 0,
               "m_messages": 0, "m_ch_depth": 0}
        for n in self.c.running():
            e = self.stats(n, topic)
            out["message_count"] += e["message_count"]
            out["depth"] += e["depth"]
            out["backend_depth"] += e["backend_depth"]
            if has_channel:
                ch = self.channel(e)
                out["ch_depth"] += ch["depth"]
                out["ch_backend_depth"] += ch["backend_depth"]
                out["ch_message_count"] += ch["message_count"]
                out["ch_in_flight"] += ch["in_flight_count"]
                out["m_ch_depth"] += n.metric(
                    f'tern_channel_depth{{topic="{topic}",channel="{CH}"}}') or 0
            out["m_messages"] += n.metric(f'tern_topic_messages_total{{topic="{topic}"}}') or 0
        return out

    # --- writing ---------------------------------------------------------------

    def tcp_port(self, node):
        status, info = node.nsq_http("GET", "/info")
        self.assertEqual(status, 200, info)
        return info["tcp_port"]

    def retry(self, what, fn, deadline=60):
        """fn() until it says done (True); it returns False on an explicit
        refusal (nothing stored) and raises on anything else."""
        end = time.monotonic() + deadline
        while not fn():
            self.assertLess(time.monotonic(), end, f"{what}: refused for {deadline} s")
            time.sleep(0.2)

    def nsq_tcp(self, node, topic, bodies):
        # A forwarded publish gets its answer within 30 s (the router's
        # budget): no timeout here may leave its outcome unknown.
        conn = nsqwire.Conn(self.tcp_port(node), host=node.host, timeout=90)
        try:
            conn.identify()
            def once():
                kind, data = conn.pub(topic, bodies[0]) if len(bodies) == 1 else \
                    conn.mpub(topic, bodies)
                if kind == nsqwire.FRAME_RESPONSE and data == b"OK":
                    return True
                self.assertTrue(data.startswith(b"E_PUB_FAILED"), (kind, data))
                return False
            self.retry(f"TCP publish to {topic} on node {node.id}", once)
        finally:
            conn.close()
        self.sent[topic] += len(bodies)

    def nsq_http(self, node, topic, bodies):
        path = f"/pub?topic={topic}" if len(bodies) == 1 else f"/mpub?topic={topic}"
        data = bodies[0] if len(bodies) == 1 else b"\n".join(bodies) + b"\n"
        def once():
            status, answer = node.request("POST", path, data, timeout=90)  # credentials: /v1 too
            if status == 200:
                return True
            self.assertEqual(status, 503, answer)
            return False
        self.retry(f"HTTP publish to {topic} on node {node.id}", once)
        self.sent[topic] += len(bodies)

    def v1(self, node, topic, bodies):
        def once():
            if len(bodies) == 1:
                status, answer = node.request("POST", f"/v1/topics/{topic}/produce?partition=0",
                                              bodies[0], headers=OCTET, timeout=90)
            else:
                # One partition's share is one atomic append: all or none.
                batch = [{"payload": b.decode(), "partition": 0} for b in bodies]
                status, answer = node.request("POST", f"/v1/topics/{topic}/produce/batch",
                                              batch, headers=JSON, timeout=90)
                if status == 202:
                    self.assertEqual(answer, {"accepted": len(bodies)})
            if status is not None and 200 <= status < 300:
                return True
            self.assertEqual(status, 503, answer)
            return False
        self.retry(f"/v1 publish to {topic} on node {node.id}", once)
        self.sent[topic] += len(bodies)

    def publish_round(self, r):
        """Every door to each topic: /v1 on every node (one that does not
        lead the partition forwards the batch: a PRODUCER mark each), the
        NSQ doors on the nodes that lead a partition of it (an NSQ publish
        through a restarted node that leads none of an NSQ-made topic's
        partitions is refused for a while: the known fault "NSQ-made
        replicated topics" of docs/replication.md, not a count)."""
        for topic in (NSQ, NSQ_BARE, V1, F1):
            leads = {n.id for n in self.leaders(topic)}
            for k, n in enumerate(self.c.nodes):
                tag = f"{topic}-r{r}-n{n.id}"
                if n.id in leads:
                    if topic in (NSQ, NSQ_BARE):
                        self.nsq_tcp(n, topic, [f"{tag}-pub".encode()])
                        self.nsq_tcp(n, topic, [f"{tag}-mpub{i}".encode() for i in range(3 + k)])
                    self.nsq_http(n, topic, [f"{tag}-hpub".encode()])
                    self.nsq_http(n, topic, [f"{tag}-hmpub{i}".encode() for i in range(2 + k)])
                if topic == F1 and n.id not in leads:
                    # A factor-1 produce through another node goes through
                    # its ingress log, whose dispatch may store it twice
                    # when that node is killed (at least once): the
                    # reference takes its publishes on its owner only.
                    continue
                self.v1(n, topic, [f"{tag}-v1".encode()])
                self.v1(n, topic, [f"{tag}-v1b{i}".encode() for i in range(4)])

    # --- checking --------------------------------------------------------------

    def expect_counts(self, topic, has_channel):
        n = self.sent[topic]
        try:
            pss = wait_until(f"{topic}'s partitions with every message written", lambda: (
                lambda p: p if p and all("message_count" in x for x in p)
                and sum(x["message_count"] for x in p) == n else None)(self.pstats(topic)),
                timeout=30)
        except AssertionError:
            pss = self.pstats(topic)
            self.assertEqual(sum(x.get("message_count", 0) for x in pss or []), n, pss)
            raise
        self.assertEqual(sum(x["stored_messages"] for x in pss), n, pss)
        for ps in pss:
            if topic == F1:
                # Factor 1: no control record, offsets are the count.
                self.assertEqual(ps["next_offset"], ps["message_count"], ps)
                continue
            # Offsets hold the control records too: at least one epoch
            # start per leader the partition had (and a PRODUCER mark per
            # forwarded batch).
            seen = self.epochs_seen.setdefault((topic, ps["index"]), set())
            seen.add(ps["leader_epoch"])
            self.assertGreaterEqual(ps["next_offset"], ps["message_count"] + len(seen), ps)
        # The leaders' own views: each node counts what it leads, once its
        # log shows every message (the hw moved) to its engine.
        if has_channel:
            want = {"message_count": n, "depth": 0, "backend_depth": 0, "ch_depth": n,
                    "ch_backend_depth": n, "ch_message_count": n, "ch_in_flight": 0,
                    "m_messages": n, "m_ch_depth": n}
        else:
            want = {"message_count": n, "depth": n, "backend_depth": n, "ch_depth": 0,
                    "ch_backend_depth": 0, "ch_message_count": 0, "ch_in_flight": 0,
                    "m_messages": n, "m_ch_depth": 0}
        try:
            wait_until(f"/stats and /metrics of {topic} at {n} messages",
                       lambda: self.nsq_sums(topic, has_channel) == want, timeout=30)
        except AssertionError:
            self.assertEqual(self.nsq_sums(topic, has_channel), want, topic)
            raise

    def wait_whole(self):
        for topic in (NSQ, NSQ_BARE, V1):
            wait_until(f"{topic} led with 3 in-sync replicas everywhere",
                       lambda t=topic: self.settled(t, 3), timeout=90)
        wait_until(f"{F1} placed", lambda: self.settled(F1, 1), timeout=60)
        # Each node's engine lists a topic in /stats once its creation
        # there ended (null while it is still being made, as nsqd answers
        # for a topic it does not have), which may come after the ISR is
        # whole: the copies are the replica manager's.
        for n in self.c.running():
            for topic in (NSQ, NSQ_BARE, V1, F1):
                wait_until(f"{topic} made on node {n.id}",
                           lambda n=n, t=topic: n.request(
                               "GET", f"/stats?format=json&topic={t}")[1].get("topics"),
                           timeout=60)

    # --- the test --------------------------------------------------------------

    def test_counts_through_failovers(self):
        lead0 = self.c.nodes[0]
        for topic in (NSQ, NSQ_BARE):
            status, answer = lead0.nsq_http("POST", f"/topic/create?topic={topic}")
            self.assertEqual(status, 200, answer)
        for topic, factor in ((V1, 3), (F1, 1)):
            status, body = lead0.request("POST", "/v1/topics", {
                "name": topic, "partitions": 1, "replication_factor": factor,
                "min_insync_replicas": min(2, factor), "durability": "durable"})
            self.assertEqual(status, 201, body)
        for topic in (NSQ, V1, F1):
            status, answer = lead0.request("POST", f"/channel/create?topic={topic}&channel={CH}")
            self.assertEqual(status, 200, answer)
        status, body = lead0.request("GET", f"/v1/topics/{NSQ}")
        self.assertEqual(body.get("replication_factor"), 3, body)
        self.wait_whole()
        self.epochs_seen = {}

        for r in range(ROUNDS):
            self.publish_round(r)
            for topic, has_channel in ((NSQ, True), (NSQ_BARE, False), (V1, True), (F1, True)):
                self.expect_counts(topic, has_channel)
            if r + 1 == ROUNDS:
                break
            # Fail over: SIGKILL the node leading most replicated
            # partitions; each of them gets a new leader (a new epoch
            # start); the node comes back and catches up.
            led = {}
            for t in (NSQ, NSQ_BARE, V1):
                for i, l in enumerate(self.leaders(t)):
                    led.setdefault(l.id, []).append((t, i))
            victim = self.node(max(led, key=lambda k: len(led[k])))
            epochs = {(t, i): self.pstats(t)[i]["leader_epoch"] for t, i in led[victim.id]}
            victim.kill()
            for (t, i), e in epochs.items():
                wait_until(f"a new leader of {t}/{i}", lambda t=t, i=i, e=e: (
                    lambda p: p and p[i].get("leader") not in (None, str(victim.id))
                    and p[i]["leader_epoch"] > e)(self.pstats(t)), timeout=60)
            victim.start()
            victim.wait_ready()
            self.wait_whole()

        # A consumer acks k messages of each channel: the depth drops by k.
        k = 7
        for topic in (NSQ, V1, F1):
            n = self.sent[topic]
            for i in range(k):
                node = self.c.nodes[i % 3]
                status, m = node.request(
                    "GET", f"/v1/topics/{topic}/consume?channel={CH}&wait=5s", timeout=30)
                self.assertEqual(status, 200, m)
                status, answer = node.request(
                    "POST",
                    f"/v1/topics/{topic}/ack?channel={CH}&receipt_handle={m['receipt_handle']}",
                    headers={"X-Tern-Client": "tests"}, timeout=30)
                self.assertEqual(status, 204, answer)
            want = (n - k, n, 0, n)
            try:
                wait_until(f"{topic}'s channel at {n - k}", lambda t=topic: (
                    lambda s: (s["ch_depth"], s["ch_message_count"], s["ch_in_flight"],
                               s["message_count"]))(self.nsq_sums(t, True)) == want)
            except AssertionError:
                self.assertEqual(self.nsq_sums(topic, True), want, topic)
                raise


if __name__ == "__main__":
    harness.main()
