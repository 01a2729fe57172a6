"""What an operator sees and does with replicated partitions, against a
cluster of 3 real ternd nodes (docs/replication.md, "What an operator sees
and does"): GET /v1/topics/{t} shows each partition's leader, replicas,
ISR, leader epoch and state; `ternctl topics get` prints them as columns; every door of a partition
with too few in-sync replicas refuses in the same words (/v1 produce,
nsqd's /pub, NSQ PUB with the connection kept);
/metrics has the replication series; POST
/v1/topics/{t}/partitions/{p}/leader (and `ternctl partitions
force-leader`) moves leadership to another in-sync replica, refuses with
409 and the reason what the rules forbid (a node that is no replica, a
dead one, one outside the ISR without "unclean"), answers 400/404 for a
bad body or a missing topic or partition, and performs an unclean election
of a replica outside the ISR, saying so and logging it at warn.

Topics are replicated with factor 2 so that one of the three nodes is not
a replica. A replica leaves the ISR by being fenced (killed, its session
of 2 s expires: it is no longer live), or by being stopped (SIGSTOP) past
replica-lag-time-max while its session (60 s) keeps it live: the state an
unclean election is for. A stopped follower stays out of the ISR until it
fetches again, so the unclean case never depends on timing.

Every step waits for the state it needs first: a clean election waits for
both replicas in the ISR on every node, and one refused because a follower
fell out of the ISR in between (a busy machine) waits and asks again; the
route itself judges again an election the metastore refused on a state
that changed under it (docs/http-api.md).

Run: python3 tests/cluster/test_repl_ops.py --ternd build/ternd --ternctl build/ternctl
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import nsqwire  # noqa: E402
from harness import wait_until  # noqa: E402

TERNCTL = None


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


class ReplOps(harness.ClusterTest):
    def start(self, *args):
        """Three nodes, every one alive in node 1's metastore replica: a
        topic's factor is clamped to the members alive when it is made.
        Without auto-rebalance: the metastore judges the members' joins a
        moment after they register, and one judged after these tests made
        their topics (node 3 holding none, as placed) moved a partition
        under a test's faults."""
        self.c = self.make(3, args=[*args, "--auto-rebalance=false"])
        self.c.start()
        self.c.wait_alive(3)
        return self.c.nodes[0]

    def ctl(self, node, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.pop("XDG_CONFIG_HOME", None)
        env.update(HOME=self.c.dir, TERN_URL=f"http://{node.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        r = subprocess.run([TERNCTL, *args], capture_output=True, text=True, env=env,
                           timeout=120)
        return r.returncode, r.stdout, r.stderr

    def part(self, node, topic, p=0):
        status, body = node.request("GET", f"/v1/topics/{topic}")
        if status != 200:
            return None
        for e in body["partition_stats"]:
            if e["index"] == p:
                return e
        return None

    def in_sync_everywhere(self, topic, replicas):
        """Wait until every node shows all of replicas in the ISR."""
        want = sorted(replicas)
        wait_until(f"{topic}/0 with ISR {want} on every node", lambda: all(
            sorted((self.part(n, topic) or {}).get("isr", [])) == want for n in self.c.nodes))

    def clean_election(self, topic, replicas, run, refused):
        """run() a clean election once every replica is in sync on every
        node; again while refused(answer) says the target fell out of the
        ISR in between (the rules' 409, a correct answer on a busy
        machine). Returns run()'s answer."""
        def attempt():
            self.in_sync_everywhere(topic, replicas)
            answer = run()
            return None if refused(answer) else answer
        return wait_until(f"a clean election of {topic}/0 taken", attempt)

    def force(self, node, topic, p, body, headers=None):
        h = {"X-Tern-Client": "tests"}
        h.update(headers or {})
        return node.request("POST", f"/v1/topics/{topic}/partitions/{p}/leader", body,
                            headers=h)

    def test_force_leader_and_what_operators_see(self):
        # Leadership moves only when forced here: no preferred-leader
        # rebalance in the middle.
        n1 = self.start("--member-session-timeout=2s", "--leader-rebalance-delay=3600s")
        status, body = n1.request("POST", "/v1/topics", {"name": "ops", "partitions": 1,
                                                          "replication_factor": 2})
        self.assertEqual((status, body["replication_factor"]), (201, 2), body)
        e = wait_until("partition 0 of ops placed on 2 replicas",
                       lambda: (lambda x: x if x and len(x.get("isr", [])) == 2 else None)(
                           self.part(n1, "ops")))
        replicas = e["replicas"]
        self.assertEqual(sorted(e["isr"]), sorted(replicas))
        self.assertEqual(e["leader"], replicas[0])  # the preferred leader
        self.assertGreaterEqual(e["leader_epoch"], 1)
        self.assertEqual((e["under_replicated"], e["offline"], e["unclean"]),
                         (False, False, False))
        outsider = next(n for n in self.c.nodes if str(n.id) not in replicas)
        via = outsider  # any node takes the admin call
        epoch = e["leader_epoch"]

        # The table through ternctl, with the replication columns.
        rc, out, err = self.ctl(n1, "topics", "get", "ops")
        self.assertEqual(rc, 0, err)
        header = next(line for line in out.splitlines() if line.startswith("PARTITION"))
        for col in ("LEADER", "REPLICAS", "ISR", "EPOCH", "STATE", "HWM"):
            self.assertIn(col, header)
        row = next(line for line in out.splitlines() if line.startswith("0 "))
        self.assertIn(",".join(replicas), row)
        self.assertIn(" ok", row)

        # /metrics: every replication series, at a value.
        for name in ("tern_partitions_under_replicated", "tern_partitions_offline",
                     "tern_isr_shrinks_total", "tern_isr_expands_total",
                     "tern_replica_lag_records", "tern_replica_lag_seconds",
                     "tern_leader_elections_total", "tern_fenced_requests_total"):
            self.assertIsNotNone(n1.metric(name), name)

        # Refusals: 400, 404, 409 with the rules' reason.
        self.assertEqual(self.force(via, "ops", 0, {"unclean": True})[0], 400)
        self.assertEqual(self.force(via, "ops", 0, {"node": "x"})[0], 400)
        self.assertEqual(self.force(via, "ops", 0, b"not json")[0], 400)
        self.assertEqual(self.force(via, "nope", 0, {"node": "1"})[0], 404)
        self.assertEqual(self.force(via, "ops", 7, {"node": "1"})[0], 404)
        status, body = self.force(via, "ops", 0, {"node": str(outsider.id)})
        self.assertEqual(status, 409, body)
        self.assertIn("replica", body["error"])
        # Admins only.
        status, _ = via.request("POST", "/v1/topics/ops/partitions/0/leader",
                                {"node": replicas[1]}, auth=False,
                                headers={"X-Tern-Client": "tests"})
        self.assertEqual(status, 401)

        # A clean election of the other in-sync replica (the id as a number
        # works too).
        not_in_sync = lambda a: a[0] == 409 and "eligible" in a[1].get("error", "")
        status, body = self.clean_election(
            "ops", replicas, lambda: self.force(via, "ops", 0, {"node": int(replicas[1])}),
            not_in_sync)
        self.assertEqual(status, 200, body)
        self.assertEqual((body["leader"], body["unclean"]), (replicas[1], False))
        self.assertGreater(body["leader_epoch"], epoch)
        self.assertNotIn("records_at_risk", body)
        epoch = body["leader_epoch"]
        wait_until("every node sees the new leader",
                   lambda: all((self.part(n, "ops") or {}).get("leader") == replicas[1]
                               for n in self.c.nodes))
        # And back through ternctl.
        rc, out, err = self.clean_election(
            "ops", replicas,
            lambda: self.ctl(n1, "partitions", "force-leader", "ops", "0", replicas[0]),
            lambda a: a[0] != 0 and "eligible" in a[2])
        self.assertEqual(rc, 0, err)
        self.assertIn(f"leader {replicas[0]}", out)
        wait_until("the preferred leader leads again",
                   lambda: (self.part(n1, "ops") or {}).get("leader") == replicas[0])

        # Fence the second replica: killed, its session expires, it leaves
        # the ISR; the partition is under-replicated.
        second = next(n for n in self.c.nodes if str(n.id) == replicas[1])
        keep = [n for n in self.c.nodes if n is not second]
        second.kill()
        e = wait_until("the killed replica fenced out of the ISR",
                       lambda: (lambda x: x if x and x.get("isr") == [replicas[0]] else None)(
                           self.part(keep[0], "ops")))
        self.assertTrue(e["under_replicated"])
        status, stats = keep[0].request("GET", "/stats?format=json&topic=ops")
        self.assertEqual(status, 200)
        self.assertEqual((stats["topics"][0]["under_replicated_partitions"],
                          stats["topics"][0]["offline_partitions"]), (1, 0))
        status, text = keep[0].request("GET", "/stats?topic=ops")
        self.assertIn(b"under-replicated: 1 offline: 0", text)
        status, body = self.force(keep[0], "ops", 0, {"node": replicas[1], "unclean": True})
        self.assertEqual(status, 409, body)  # not live

    def test_refusals_at_the_doors_and_an_unclean_election(self):
        # A follower stopped (SIGSTOP) past replica-lag-time-max leaves the
        # ISR while its metastore session (60 s) keeps it live: the
        # partition (factor 2, min_insync 2) refuses writes at every door
        # with "not enough in-sync replicas", and the stopped replica is
        # the one an unclean election can choose.
        # NSQ topics (made by the NSQ doors, no owner: open to NSQ clients
        # without AUTH) take the defaults.
        n1 = self.start("--member-session-timeout=60s", "--replica-lag-time-max=1s",
                        "--default-replication-factor=2", "--min-insync-replicas=2")
        status, body = n1.request("POST", "/v1/topics", {"name": "few", "partitions": 1,
                                                          "replication_factor": 2,
                                                          "min_insync_replicas": 2})
        self.assertEqual((status, body["replication_factor"]), (201, 2), body)
        self.assertEqual(n1.nsq_http("POST", "/topic/create?topic=fewnsq")[0], 200)
        in_sync = lambda t: (lambda x: x if x and len(x.get("isr", [])) == 2 else None)(
            self.part(n1, t))
        e = wait_until("few/0 with 2 in-sync replicas", lambda: in_sync("few"))
        nsq_e = wait_until("fewnsq/0 with 2 in-sync replicas", lambda: in_sync("fewnsq"))
        # Placement is deterministic: partition 0 of both on the same
        # members in the same order, so one stopped follower affects both.
        self.assertEqual(nsq_e["replicas"], e["replicas"])
        leader = next(n for n in self.c.nodes if str(n.id) == e["leader"])
        follower = next(n for n in self.c.nodes if str(n.id) in e["replicas"] and n is not leader)
        octet = {"Content-Type": "application/octet-stream"}
        wait_until("a produce acknowledged", lambda: leader.request(
            "POST", "/v1/topics/few/produce", b"before", headers=octet)[0] == 202)
        self.in_sync_everywhere("few", e["replicas"])
        auth = {"Authorization": harness.basic("admin", harness.PASSWORD)}

        def poke(path, body, headers, timeout=3):
            c = http.client.HTTPConnection("127.0.0.1", leader.http_port, timeout=timeout)
            try:
                c.request("POST", path, body, headers)
                r = c.getresponse()
                return r.status, r.getheader("Retry-After"), json.loads(r.read() or b"{}")
            except OSError:
                return None, None, None
            finally:
                c.close()
        os.kill(follower.pid, signal.SIGSTOP)
        try:
            # A produce taken while the stopped follower is still in the ISR
            # waits for the hw; once the ISR falls below min_insync it is
            # answered 503 at once (its record stays in the leader's log),
            # not left waiting until the client gives up.
            waiting = {}
            def produce_waiting():
                started = time.monotonic()
                waiting["answer"] = poke("/v1/topics/few/produce", b"waiting", {**octet, **auth},
                                         timeout=60)
                waiting["seconds"] = time.monotonic() - started
            t_wait = threading.Thread(target=produce_waiting, daemon=True)
            t_wait.start()
            # The leader takes the stopped follower out of its ISR after
            # replica-lag-time-max, and it stays out: it does not fetch, so
            # it is not proposed in again (even caught up, as it is here).
            for t in ("few", "fewnsq"):
                wait_until(f"{t}/0 with ISR [{leader.id}] on the leader and node 1", lambda: all(
                    (self.part(n, t) or {}).get("isr") == [str(leader.id)] for n in (leader, n1)))
            t_wait.join(60)
            self.assertFalse(t_wait.is_alive(), "the waiting produce was never answered")
            self.assertEqual(waiting["answer"], (503, "1", {"error": "not enough in-sync replicas"}),
                             waiting)
            self.assertLess(waiting["seconds"], 30, waiting)
            # Every door of the leader refuses, retryably, in the same words.
            def refused(path, h):
                # The leader's door may still hold the ISR of a moment ago
                # (it learns the metastore's state soon after the apply).
                return wait_until(f"{path} refused", lambda: (
                    lambda a: a if a[0] == 503 else None)(poke(path, b"during", h)))
            _, retry, body = refused("/v1/topics/few/produce", {**octet, **auth})
            self.assertEqual((retry, body), ("1", {"error": "not enough in-sync replicas"}))
            _, retry, body = refused("/pub?topic=fewnsq", {})
            self.assertEqual((retry, body), ("1", {"message": "E_PUB_FAILED not enough in-sync replicas",
                                                   "error": "not enough in-sync replicas"}))
            c = nsqwire.Conn(leader.nsq_http("GET", "/info")[1]["tcp_port"])
            try:
                c.identify()
                for _ in range(2):  # the connection stays open
                    self.assertEqual(c.pub("fewnsq", b"during"),
                                     (nsqwire.FRAME_ERROR,
                                      b"E_PUB_FAILED not enough in-sync replicas"))
            finally:
                c.close()

            # A clean election of the out-of-sync replica is refused...
            status, body = self.force(n1, "few", 0, {"node": str(follower.id)})
            self.assertEqual(status, 409, body)
            self.assertIn("unclean", body["error"])
            # ... an unclean one goes through, through ternctl.
            rc, out, err = self.ctl(n1, "--json", "partitions", "force-leader", "few", "0",
                                    str(follower.id), "--unclean")
            self.assertEqual(rc, 0, err)
            body = json.loads(out)
            self.assertEqual((body["leader"], body["unclean"], body["isr"]),
                             (str(follower.id), True, [str(follower.id)]))
            self.assertIn("records_at_risk", body)
            self.assertGreater(body["leader_epoch"], e["leader_epoch"])
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        # Every node's metastore replica shows the forced epoch (marked
        # unclean) once it applied it; a later election may have moved on.
        forced = body["leader_epoch"]
        for n in self.c.nodes:
            x = wait_until(f"node {n.id} sees the forced epoch", lambda: (
                lambda x: x if x and x.get("leader_epoch", 0) >= forced else None)(
                    self.part(n, "few")))
            if x["leader_epoch"] == forced:
                self.assertEqual((x["leader"], x["unclean"]), (str(follower.id), True), x)
        self.assertIn("UNCLEAN election of few/0", n1.log())


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
