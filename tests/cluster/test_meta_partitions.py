"""Replicated partitions in the metastore across real ternd nodes
(tests/cluster/harness.py): a topic made with replication_factor 3 shows,
on every node, each partition's leader, replicas, ISR and leader_epoch
from that node's metastore replica; when the leader of partition 0 is
SIGKILLed, the metastore leader ends its session (member-session-timeout)
and every node's view moves the leadership to another ISR member, one
epoch later, without the killed node in the ISR; restarted, the node is
live again. The /v1 fields: out-of-range values refused, a PATCH of the
factor refused, min_insync_replicas changed in place, a cap PATCHed
through one node holding on every partition's leader; the options'
defaults (factor 3, min_insync 2) for /v1, NSQ-made (HTTP and TCP), child
and dead-letter topics; the clamp to the members alive is the metastore's
(two of three alive: factor 2 through either node); a lone node clamps the
factor to 1 and needs no option (experimental-replication is deprecated:
one notice). (Catching up and rejoining the ISR is the replica
manager's, tested with it.)

Run: python3 tests/cluster/test_meta_partitions.py --ternd build/ternd
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from nsqwire import Conn  # noqa: E402  (tests/e2e)

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-meta-partitions"}

# A session timeout shorter than the default keeps the test quick; the
# deadlines below are generous, not timing assertions.
SESSION = "3s"


def partitions(node, topic):
    """The partition entries of node's GET /v1/topics/{topic}, or None."""
    status, body = node.request("GET", f"/v1/topics/{topic}")
    if status != 200 or not isinstance(body, dict):
        return None
    return body


def members(node):
    status, body = node.request("GET", "/v1/cluster/members")
    if status != 200:
        return None
    return {m["id"]: m for m in body["members"]}


class MetaPartitions(harness.ClusterTest):
    def test_replicated_topic_failover_and_restart(self):
        c = self.make(3, args=[f"--member-session-timeout={SESSION}"]).start()
        c.wait_alive(3)
        for node in c.nodes:
            wait_until(f"node {node.id} seeing three incarnations",
                       lambda n=node: (lambda m: m and len(m) == 3 and all(
                           x["incarnation"] and x["session"] == "live" for x in m.values()))(
                           members(n)), 30)
        status, body = c.nodes[1].request(
            "POST", "/v1/topics",
            {"name": "repl", "partitions": 3, "replication_factor": 3,
             "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        ids = sorted(str(n.id) for n in c.nodes)

        def shown(node):
            body = partitions(node, "repl")
            if body is None or body.get("replication_factor") != 3:
                return None
            ps = body["partition_stats"]
            if len(ps) != 3 or any("leader" not in p for p in ps):
                return None
            return body

        views = {}
        for node in c.nodes:
            body = wait_until(f"node {node.id} showing the partition states",
                              lambda n=node: shown(n), 30)
            self.assertEqual(body["min_insync_replicas"], 2)
            for p, entry in enumerate(body["partition_stats"]):
                # p starts at index p mod n of the members by id.
                self.assertEqual(entry["replicas"], [ids[(p + k) % 3] for k in range(3)], entry)
                self.assertEqual(entry["leader"], entry["replicas"][0], entry)
                self.assertEqual(sorted(entry["isr"]), ids, entry)
                self.assertEqual(entry["leader_epoch"], 1, entry)
                # The routing's owner is the leader.
                self.assertEqual(entry["owner_node"], entry["leader"], entry)
            views[node.id] = body["partition_stats"]
        first = views[c.nodes[0].id][0]
        victim = next(n for n in c.nodes if str(n.id) == first["leader"])
        rest = [n for n in c.nodes if n is not victim]
        victim.kill()

        def moved(node):
            body = partitions(node, "repl")
            if body is None:
                return None
            e = body["partition_stats"][0]
            if e.get("leader") in (None, str(victim.id)) or str(victim.id) in e["isr"]:
                return None
            return e

        for node in rest:
            e = wait_until(f"node {node.id} showing partition 0 led by another ISR member",
                           lambda n=node: moved(n), 60)
            self.assertIn(e["leader"], first["isr"], e)
            self.assertEqual(e["leader"], first["replicas"][1], e)
            self.assertEqual(e["leader_epoch"], first["leader_epoch"] + 1, e)
            self.assertEqual(sorted(e["isr"]), sorted(x for x in first["isr"]
                                                      if x != str(victim.id)), e)
            m = members(node)
            self.assertEqual(m[str(victim.id)]["session"], "fenced", m)
        # One MEMBER_FENCE proposed (by the metastore leader) for the one
        # failure.
        said = [line for n in rest for line in n.log().splitlines()
                if f"metastore: member {victim.id} (" in line and "not heard from" in line]
        self.assertEqual(len(said), 1, said)
        # Restarted on the same data directory: the same incarnation, live
        # again (the ISR takes it back once its replica caught up: not the
        # metastore's doing).
        incarnation = members(rest[0])[str(victim.id)]["incarnation"]
        victim.start()
        victim.wait_ready()
        for node in c.nodes:
            wait_until(f"node {node.id} showing the restarted member live",
                       lambda n=node: (lambda m: m and m[str(victim.id)]["session"] == "live")(
                           members(n)), 60)
            self.assertEqual(members(node)[str(victim.id)]["incarnation"], incarnation)
        e = partitions(victim, "repl")["partition_stats"][0]
        self.assertNotEqual(e["leader"], str(victim.id), e)

    def test_v1_fields(self):
        c = self.make(3).start()
        c.wait_alive(3)
        node = c.nodes[0]
        for body, msg in (
                ({"name": "bad1", "replication_factor": 0}, "replication_factor must be 1..5"),
                ({"name": "bad2", "replication_factor": 6}, "replication_factor must be 1..5"),
                ({"name": "bad3", "replication_factor": 2, "min_insync_replicas": 3},
                 "min_insync_replicas must be 1..replication_factor"),
                ({"name": "bad4", "min_insync_replicas": 0},
                 "min_insync_replicas must be 1..replication_factor")):
            status, answer = node.request("POST", "/v1/topics", body)
            self.assertEqual(status, 400, answer)
            self.assertIn(msg, answer["error"])
        # Factor 1, asked explicitly (the default is 3), keeps a topic as it
        # was: no partition states.
        status, answer = node.request("POST", "/v1/topics",
                                      {"name": "plain", "partitions": 2, "replication_factor": 1})
        self.assertEqual(status, 201, answer)
        body = wait_until("the plain topic", lambda: partitions(node, "plain"), 30)
        self.assertEqual(body["replication_factor"], 1)
        self.assertEqual(body["min_insync_replicas"], 1)
        for entry in body["partition_stats"]:
            self.assertNotIn("leader", entry)
        status, answer = node.request("POST", "/v1/topics",
                                      {"name": "r2", "partitions": 2, "replication_factor": 2})
        self.assertEqual(status, 201, answer)
        # A factor change comes on its own (min_insync_replicas may come
        # with it) and within 1..5 (docs/http-api.md; the change itself is
        # cluster_factor_change's).
        status, answer = node.request("PATCH", "/v1/topics/r2",
                                      {"replication_factor": 3, "retention_ms": 3600000})
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer, {"error": "invalid argument: replication_factor is changed on "
                                           "its own (min_insync_replicas may come with it)"})
        status, answer = node.request("PATCH", "/v1/topics/r2", {"replication_factor": 6})
        self.assertEqual(status, 400, answer)
        self.assertIn("replication_factor must be 1..5", answer["error"])
        status, answer = node.request("PATCH", "/v1/topics/r2", {"min_insync_replicas": 3})
        self.assertEqual(status, 400, answer)
        # min_insync_replicas changes, in every partition state too.
        status, answer = node.request("PATCH", "/v1/topics/r2", {"min_insync_replicas": 1})
        self.assertEqual(status, 200, answer)
        for n in c.nodes:
            body = wait_until(f"node {n.id} showing min_insync_replicas 1",
                              lambda x=n: (lambda b: b if b and b["min_insync_replicas"] == 1
                                           else None)(partitions(x, "r2")), 30)
            self.assertEqual(body["replication_factor"], 2)
            self.assertTrue(all(len(e["replicas"]) == 2 for e in body["partition_stats"]))
        # A setting PATCHed through one node holds on every partition's
        # leader: node 1 took the PATCH, the other nodes' engines got it
        # from the record (they once kept the old cap until a restart).
        status, answer = node.request("POST", "/v1/topics", {"name": "capped", "partitions": 3})
        self.assertEqual(status, 201, answer)
        leaders = wait_until("a leader for every partition of capped", lambda: (
            lambda b: [e["leader"] for e in b["partition_stats"]]
            if b and all(e.get("leader") for e in b["partition_stats"]) else None)(
                partitions(node, "capped")), 30)
        self.assertEqual(sorted(leaders), ["1", "2", "3"], leaders)
        status, answer = node.request("PATCH", "/v1/topics/capped",
                                      {"max_in_flight_per_partition": 1})
        self.assertEqual(status, 200, answer)
        for p in range(3):
            for i in range(3):
                status, answer = wait_until(f"capped/{p} taking m{i}", lambda p=p, i=i: (
                    lambda r: r if r[0] != 503 else None)(node.request(
                        "POST", f"/v1/topics/capped/produce?partition={p}", f"m{i}".encode(),
                        headers=OCTET)))
                self.assertIn(status, (200, 201, 202), answer)
        for p in range(3):
            # Through the partition's leader: one message of three while
            # it is in flight, then nothing. That leader's engine takes the
            # cap when its copy of the metastore has the PATCH (pushed at
            # once, but a loaded node may be behind): the test waits for
            # that copy (the engine follows it in the same step), and for
            # the first message (a lease or a high watermark late on a
            # loaded machine is a 204, not a broken cap).
            via = c.nodes[int(leaders[p]) - 1]
            wait_until(f"node {via.id} showing capped's cap of 1", lambda x=via: (
                lambda b: b and b["max_in_flight_per_partition"] == 1)(partitions(x, "capped")), 30)
            status, answer = wait_until(f"a message of capped/{p} through node {via.id}",
                                        lambda p=p, x=via: (lambda r: r if r[0] != 204 else None)(
                                            x.request("GET", f"/v1/topics/capped/consume?"
                                                      f"partition={p}&max=10&wait=1s",
                                                      headers=CLIENT)), 30)
            self.assertEqual(status, 200, answer)
            got = [len(answer["messages"])]
            status, answer = via.request(
                "GET", f"/v1/topics/capped/consume?partition={p}&max=10&wait=0", headers=CLIENT)
            self.assertIn(status, (200, 204), answer)
            got.append(len(answer["messages"]) if status == 200 else 0)
            self.assertEqual(got, [1, 0], (p, leaders[p], got))


    def test_defaults_reach_every_topic(self):
        # No replication option: default-replication-factor is 3 and
        # min-insync-replicas 2, and they reach /v1 creates that do not
        # say, the topics the NSQ doors make (nsqd HTTP /topic/create and
        # /pub, NSQ TCP PUB), a child made with its parent and a dead-letter
        # topic. The metastore clamps the factor when it applies the create,
        # so the node the request lands on does not matter.
        c = self.make(3).start()
        c.wait_alive(3)
        node = c.nodes[2]
        status, answer = node.request("POST", "/v1/topics",
                                      {"name": "dflt", "partitions": 2, "max_attempts": 1})
        self.assertEqual(status, 201, answer)
        self.assertEqual(answer["replication_factor"], 3, answer)
        self.assertEqual(answer["min_insync_replicas"], 2, answer)
        # The child goes through another node: its own copy of the
        # metastore must have the parent first (the door checks the parent
        # there; a create answered on node 3 may not have reached node 2's
        # copy yet).
        wait_until("node 2 knowing topic dflt",
                   lambda: c.nodes[1].request("GET", "/v1/topics/dflt")[0] == 200, 30)
        status, answer = c.nodes[1].request("POST", "/v1/topics",
                                            {"name": "kid", "parent": "dflt"})
        self.assertEqual(status, 201, answer)
        self.assertEqual(answer["replication_factor"], 3, answer)
        self.assertEqual(answer["min_insync_replicas"], 2, answer)
        status, answer = node.nsq_http("POST", "/topic/create?topic=nsqmade")
        self.assertEqual(status, 200, answer)
        status, answer = c.nodes[0].nsq_http("POST", "/pub?topic=nsqpub", b"m")
        self.assertEqual(status, 200, answer)
        status, info = c.nodes[1].nsq_http("GET", "/info")
        self.assertEqual(status, 200, info)
        conn = Conn(info["tcp_port"], host=c.nodes[1].host, timeout=60)
        try:
            conn.identify()
            self.assertEqual(conn.pub("tcppub", b"m"), (0, b"OK"))
        finally:
            conn.close()
        # A message delivered once and released: its next delivery would
        # pass max_attempts 1, so it moves to dflt.default.DLQ.
        status, answer = node.request("POST", "/v1/topics/dflt/produce", b"poison",
                                      headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(status, 202, answer)
        status, m = wait_until("the message delivered", lambda: (lambda r: r if r[0] == 200
                               else None)(node.request("GET", "/v1/topics/dflt/consume?wait=1s")),
                               60)
        self.assertEqual(m["attempts"], 1, m)
        status, answer = node.request(
            "POST", f"/v1/topics/dflt/ack?extend=0&receipt_handle={m['receipt_handle']}",
            headers={"X-Tern-Client": "test-meta-partitions"})
        self.assertEqual(status, 204, answer)
        # The next consume finds it past max_attempts: moved, never
        # delivered again. (The move makes the replicated DLQ topic and
        # waits for its new leader to serve, as a door's publish does.)
        status, answer = node.request("GET", "/v1/topics/dflt/consume?wait=2s")
        self.assertEqual(status, 204, answer)

        def dead_lettered():
            r = node.request("GET", "/v1/topics/dflt.default.DLQ/consume?wait=1s")
            return r[1] if r[0] == 200 else None
        m = wait_until("the dead letter delivered", dead_lettered, 90)
        self.assertEqual(m["payload"], "poison", m)
        status, answer = node.request("GET", "/v1/topics/dflt/consume?wait=1s")
        self.assertEqual(status, 204, answer)
        for name in ("nsqmade", "nsqpub", "tcppub", "dflt.default.DLQ"):
            for n in c.nodes:
                body = wait_until(f"node {n.id} recording {name}",
                                  lambda x=n, t=name: partitions(x, t), 30)
                self.assertEqual(body["replication_factor"], 3, body)
                self.assertEqual(body["min_insync_replicas"], 2, body)
            entry = wait_until(f"{name}'s partition state",
                               lambda t=name: (lambda b: b and "leader" in b["partition_stats"][0]
                                               and b["partition_stats"][0])(
                                                   partitions(c.nodes[0], t)), 30)
            self.assertEqual(len(entry["replicas"]), 3, entry)

    def test_clamp_is_the_metastores(self):
        # Two of three members alive: the metastore clamps a factor-3 create
        # to 2 when it applies it, whichever node took the request (each one
        # in turn), min_insync 2 asked stays 2, 3 asked clamps to 2.
        c = self.make(3, args=[f"--member-session-timeout={SESSION}",
                               "--cluster-heartbeat-interval=1s",
                               "--cluster-dead-after=3s"]).start()
        c.wait_alive(3)
        victim = c.nodes[2]
        victim.kill()
        live = [n for n in c.nodes if n is not victim]
        c.wait_alive(2)
        for i, n in enumerate(live):
            status, answer = n.request("POST", "/v1/topics",
                                       {"name": f"two{i}", "partitions": 1,
                                        "min_insync_replicas": 2 + i})
            self.assertEqual(status, 201, answer)
            self.assertEqual((answer["replication_factor"], answer["min_insync_replicas"]),
                             (2, 2), answer)
            for m in live:
                body = wait_until(f"node {m.id} recording two{i}",
                                  lambda x=m, t=f"two{i}": partitions(x, t), 30)
                self.assertEqual(body["replication_factor"], 2, body)
                self.assertEqual(len(body["partition_stats"][0]["replicas"]), 2, body)


class LoneNode(harness.ClusterTest):
    def lone(self, *args):
        """A lone node started with args: (tmp dir, Daemon, Node)."""
        from daemon import Daemon
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["TERN_ADMIN_PASSWORD"] = harness.PASSWORD
        tmp = tempfile.mkdtemp(prefix="tern-lone-")
        self.addCleanup(harness.shutil.rmtree, tmp, True)
        d = Daemon(os.path.join(tmp, "data"), *args, env=env)
        self.addCleanup(lambda: d.proc.poll() is not None or d.kill())
        d.wait_for(" ready: data ")
        node = harness.Node.__new__(harness.Node)
        node.host = "127.0.0.1"
        node.http_port = d.http_port
        wait_until("the lone node registered", lambda: node.alive_members() == 1, 30)
        return tmp, d, node

    def test_no_switch_needed(self):
        # Replicated topics need no option: a factor above 1 is taken and,
        # on a lone node, clamped to 1 by the metastore; a default factor
        # above 1 starts. The deprecated experimental-replication still
        # starts too (older command lines), with one notice that it has no
        # effect.
        tmp, d, node = self.lone()
        for factor in (2, 3):
            status, body = node.request("POST", "/v1/topics",
                                        {"name": f"r{factor}", "replication_factor": factor})
            self.assertEqual(status, 201, body)
            self.assertEqual(body["replication_factor"], 1, body)
        status, body = node.request("POST", "/v1/topics", {"name": "plain"})
        self.assertEqual(status, 201, body)
        self.assertEqual((body["replication_factor"], body["min_insync_replicas"]), (1, 1), body)
        self.assertNotIn("experimental-replication", d.log())
        self.assertEqual(d.stop(), 0)
        tmp2, d2, node2 = self.lone("--experimental-replication", "--default-replication-factor=3")
        notice = "experimental-replication is deprecated and has no effect"
        self.assertEqual(d2.log().count(notice), 1, d2.log())
        status, body = node2.request("POST", "/v1/topics", {"name": "again"})
        self.assertEqual(status, 201, body)
        self.assertEqual(body["replication_factor"], 1, body)
        self.assertEqual(d2.stop(), 0)

    def test_factor_clamped_to_one(self):
        tmp, d, node = self.lone()
        status, body = node.request("POST", "/v1/topics",
                                    {"name": "solo", "partitions": 2, "replication_factor": 3})
        self.assertEqual(status, 201, body)
        body = wait_until("the topic", lambda: partitions(node, "solo"), 30)
        self.assertEqual(body["replication_factor"], 1, body)
        self.assertEqual(body["min_insync_replicas"], 1, body)
        # The data directory has its incarnation, kept across a restart.
        with open(os.path.join(tmp, "data", "incarnation")) as f:
            text = f.read()
        self.assertRegex(text, r"^[0-9a-f]{16}\n$")
        status, m = node.request("GET", "/v1/cluster/members")
        self.assertEqual(m["members"][0]["incarnation"], text.strip())
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    harness.main()
