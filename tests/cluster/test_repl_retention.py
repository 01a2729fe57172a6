"""A follower whose log ends below its leader's log start (retention
removed every record it lacks) restarts its copy at the leader's start and
rejoins the ISR (docs/replication.md, "Storage of a replica": OUT_OF_RANGE
and the reset). Before, its fetches were answered with nothing, for ever,
and it never came back.

Five nodes (nodes 4 and 5 keep the metastore's majority while two
replicas are away), a topic of one partition with factor 3 and min_insync
2 (node 1 leads; replicas 1, 2, 3), 64 KiB segments, a retention of 5 s
checked every second. Checked, in order:

- node 3 stopped (its data kept) while the leader writes several segments
  and retention drops every record node 3 holds: restarted, it empties its
  copy to restart at the leader's start (tern_replica_resets_total) and is
  back in the ISR;
- node 2 stopped and its data directory wiped, the same again: its empty
  log fetching from 0 is restarted at the leader's start and it is back in
  the ISR;
- node 3 stopped (SIGSTOP: it keeps its high watermark) and the leader
  (node 1) killed: node 2, whose copy began at the old leader's start,
  leads epoch 2, and its retention drops every record of epoch 1; node 3
  continued, its log ending in epoch 1, shares no epoch with node 2 (a
  DIVERGING answer with no epoch): it restarts its copy at node 2's start
  (before: "refusing to truncate committed records", out of the ISR for
  good) and is back in the ISR; publishes through node 2 are then
  acknowledged (which needs node 3's flush), and a consumer gets every one
  of them and nothing never produced; node 1, restarted, is back too;
- at the end every pair of replicas holds the same records at every offset
  both still hold, and the replication ledger's gapped check
  (tests/cluster/repl_ledger.py) finds no copy lacking records another
  holds that its own retention or a reset does not explain.

Run: python3 tests/cluster/test_repl_retention.py --ternd build/ternd
"""
import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import repl_ledger  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-repl-retention"}
ARGS = ["--replica-lag-time-max=2s",
        "--member-session-timeout=3s", "--min-insync-replicas=2", "--segment-bytes=64KiB",
        "--retention=5s", "--gc-interval=1s"]
BODY = "x" * 1000  # a 64 KiB segment holds about 60


class ReplRetention(harness.ClusterTest):
    def state(self, node):
        """Partition 0 of rt as node's metastore replica shows it."""
        status, body = node.request("GET", "/v1/topics/rt", timeout=5)
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"][0]

    def produce_acked(self, via, tag, n):
        for i in range(n):
            body = f"{tag}-{i}-{BODY}"
            for k in range(300):
                status, answer = via.request("POST", "/v1/topics/rt/produce?partition=0",
                                             body.encode(), headers=OCTET, timeout=30)
                self.attempted.add(body)
                if status is not None and 200 <= status < 300:
                    self.acked.append(body)
                    break
                time.sleep(0.1)
            else:
                self.fail(f"{tag}-{i} never acknowledged: {status} {answer}")

    def in_isr(self, via, node_id):
        s = self.state(via)
        return s is not None and str(node_id) in s["isr"] and s

    def test_a_copy_behind_the_leaders_start_restarts_there(self):
        self.attempted, self.acked = set(), []
        c = self.make(5, args=ARGS).start()
        c.wait_alive(5)
        n1, n2, n3 = c.nodes[:3]
        status, body = n1.request("POST", "/v1/topics", {"name": "rt", "partitions": 1,
                                                         "replication_factor": 3,
                                                         "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        ps = wait_until("rt/0 led with 3 in-sync replicas on every node", lambda: (
            all((s := self.state(n)) and s.get("leader") and len(s["isr"]) == 3
                for n in c.nodes) and self.state(n1)))
        self.assertEqual((ps["replicas"], ps["leader"]), (["1", "2", "3"], "1"), ps)

        # Node 3 stops holding A; B fills segments; retention passes A.
        self.produce_acked(n1, "A", 100)
        wait_until("A on every replica", lambda: n1.metric("tern_replica_lag_records") == 0)
        n3_end = self.state(n1)["log_end"]
        n3.kill()
        self.produce_acked(n1, "B", 250)
        wait_until("the leader's log to start past node 3's end", lambda: (
            self.state(n1)["oldest_offset"] > n3_end), 120)
        n3.start()
        ps = wait_until("node 3 back in the ISR", lambda: self.in_isr(n1, 3), 120)
        self.assertGreaterEqual(n3.metric("tern_replica_resets_total"), 1, n3.log())
        self.assertIn("emptying it to restart there", n3.log())

        # Node 2 loses its disk; C fills segments past nothing it has.
        n2.kill()
        shutil.rmtree(n2.data)
        os.makedirs(n2.data)
        self.produce_acked(n1, "C", 120)
        start = self.state(n1)["oldest_offset"]
        self.assertGreater(start, 0)
        n2.start()
        wait_until("node 2 back in the ISR", lambda: self.in_isr(n1, 2), 120)
        self.assertGreaterEqual(n2.metric("tern_replica_resets_total"), 1, n2.log())

        # Node 2's copy began at the leader's start: it leads next, with
        # node 3 stopped, and its retention drops every record of epoch 1.
        os.kill(n3.pid, signal.SIGSTOP)
        try:
            n1.kill()
            ps = wait_until("node 2 leads rt/0", lambda: (
                (s := self.state(n2)) and s.get("leader") == "2" and s), 60)
            epoch_start = ps["log_end"] - 1
            wait_until("node 2's log to start at its epoch", lambda: (
                self.state(n2)["oldest_offset"] >= epoch_start), 120)
        finally:
            os.kill(n3.pid, signal.SIGCONT)
        # Node 3 may still be listed in the ISR when it resumes (stopped for
        # less than replica-lag-time-max): wait for its restart at node 2's
        # start as well, not only for its place in the ISR.
        wait_until("node 3 restarted at node 2's start and back in the ISR", lambda: (
            (n3.metric("tern_replica_resets_total") or 0) >= 2 and self.in_isr(n2, 3)), 120)
        self.assertGreaterEqual(n3.metric("tern_replica_resets_total"), 2, n3.log())
        self.assertNotIn("refusing to truncate", n3.log())
        d_from = len(self.acked)
        self.produce_acked(n2, "D", 30)
        d = set(self.acked[d_from:])

        got = set()
        rounds = 0
        while not d <= got:
            rounds += 1
            self.assertLess(rounds, 200, f"missing: {sorted(x[:8] for x in d - got)}")
            via = (n2, n3)[rounds % 2]
            status, b = via.request("GET", "/v1/topics/rt/consume?max=100&wait=1s",
                                    headers=CLIENT, timeout=30)
            self.assertIn(status, (200, 204), b)
            if status == 204:
                continue
            got |= {m["payload"] for m in b["messages"]}
            status, res = via.request("POST", "/v1/topics/rt/ack/batch",
                                      [m["receipt_handle"] for m in b["messages"]],
                                      headers=CLIENT, timeout=30)
            self.assertEqual(status, 200, res)
        self.assertEqual(sorted(x[:8] for x in got - self.attempted), [],
                         "phantom: never produced")

        n1.start()
        wait_until("node 1 back in the ISR", lambda: self.in_isr(n2, 1), 120)
        wait_until("followers caught up", lambda: all(
            n.metric("tern_replica_lag_records") == 0 for n in c.nodes), 60)
        for n in c.nodes:
            self.assertEqual(n.stop(), 0, n.log())
        logs = {n.id: {x.offset: x.digest for x in
                       repl_ledger.read_replica(n.data, ["rt"])[("rt", 0)]}
                for n in (n1, n2, n3)}
        for a in logs:
            for b in logs:
                both = set(logs[a]) & set(logs[b])
                self.assertTrue(both, f"nodes {a} and {b} share no offset")
                diff = sorted(o for o in both if logs[a][o] != logs[b][o])
                self.assertEqual(diff, [], f"nodes {a} and {b} differ at {diff[:10]}")
        sys.stderr.write(json.dumps({i: [min(l), max(l)] for i, l in logs.items()}) + "\n")
        # The replication ledger's gapped check meets here the starts that
        # retention and resets move on purpose, each on a node's own clock:
        # every start a copy has above another's is one its node's log names.
        final = repl_ledger.Final()
        for n in (n1, n2, n3):
            final.add_node(str(n.id), repl_ledger.read_replica(n.data, ["rt"]), n.log())
        report = repl_ledger.Report()
        repl_ledger.check_divergence(report, final)
        sys.stderr.write(report.text() + "\n")
        self.assertEqual(report.counts["gapped"], 0, report.text())


if __name__ == "__main__":
    harness.main()
