"""A partition move whose target refuses the copy for good fails (issue 24,
option move-stall-timeout; docs/cluster.md "When a move fails"), between
real ternd-test processes (tests/cluster/harness.py).

Four nodes with move-stall-timeout 3s, topic st of one partition, factor
2 (min_insync 2): replicas {L, F}, spares S and H. The test-only hook
TERN_TEST_APPEND_ENOSPC (each node's own file; only ternd-test has it)
makes S's appends of the records it fetches for st/0 fail with ENOSPC, as
on a full disk, while S stays alive and everything else on it works. A move
of st/0 to [L, S] then copies nothing: after 3 s the partition's leader
asks the metastore to fail it, and GET /v1/cluster/moves on every node and
`ternctl cluster moves` show it failed, with a reason naming S and where
its copy stands; the partition stays on {L, F}, keeps taking produces
throughout, the failed move is counted in /metrics, S logs its failed
appends, and every acknowledged message is read back. The reason names
S's append error too ("its last append error: no space left on device"):
S reports it to the leader (node RPC REPLICA_ERROR). A second move of st/0
to the healthy spare H then completes, and every acknowledged message is
still there.

A follower of another topic (factor 2, min_insync 1) whose appends fail
with the hook on is shown by its partition's leader in GET
/v1/topics/{t} (replica_errors: {"<id>": "no space left on device"}),
and by every other node too (the follower itself, the nodes holding no
copy): they ask the leader (node RPC PERRS) beside the partition's
numbers, so `ternctl topics get` shows it whichever node it talks to.
With the hook lifted (its line removed from the file) its appends succeed
again, it reports the end of the error, and every node shows none once the
follower is back in the ISR.

A third move, to [L, H, S] with S still refusing, has its partition's
leadership forced back and forth between L and H about every second, so
that no leader holds it for the 3 s timeout: the move still fails, because
each new leader starts S's clock from the stall mark its predecessor
recorded in the metastore (progress_marks in GET /v1/cluster/moves, the
same mark across the leader changes), not from its own start.

Run: python3 tests/cluster/test_move_stall.py --ternd build/ternd-test
         --ternctl build/ternctl
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from test_replica import LAG, ReplicaBase  # noqa: E402

TOPIC = "st"
TERNCTL = None


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


class MoveStall(ReplicaBase):
    def find_move(self, node, mid):
        status, body = node.request("GET", "/v1/cluster/moves")
        self.assertEqual(status, 200, body)
        return next((m for m in body["moves"] if m["id"] == mid), None)

    def wait_move(self, c, mid, state, timeout=60):
        for node in c.nodes:
            m = wait_until(f"node {node.id} lists move {mid} {state}",
                           lambda n=node: (lambda m: m if m and m["state"] == state else None)(
                               self.find_move(n, mid)), timeout)
        return m

    def create(self, c, first, topic, min_insync):
        """Topic of one partition, factor 2, led with both replicas in
        sync; its partition's entry."""
        status, body = first.request("POST", "/v1/topics", {
            "name": topic, "partitions": 1, "replication_factor": 2,
            "min_insync_replicas": min_insync})
        self.assertEqual(status, 201, body)
        wait_until(f"{topic}/0 led, with 2 in-sync replicas",
                   lambda: self.leader(first, topic, 0) and self.in_sync(c, topic, 0, 2))
        return self.pstats(first, topic, 0)

    def begin(self, node, target):
        status, body = node.request("PATCH", f"/v1/topics/{TOPIC}/partitions/0",
                                    {"replicas": [str(x) for x in target]})
        self.assertEqual(status, 202, body)
        return body["id"]

    def test_target_refusing_the_copy_fails_the_move(self):
        c = self.make(4, args=[LAG, "--move-stall-timeout=3s", "--auto-rebalance=false"])
        for node in c.nodes:
            env = c.env()
            env["TERN_TEST_APPEND_ENOSPC"] = os.path.join(node.dir, "enospc")
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(4)
        first = c.nodes[0]
        ps = self.create(c, first, TOPIC, 2)
        lid, replicas = ps["leader"], ps["replicas"]
        leader = self.node(c, lid)
        spares = [str(n.id) for n in c.nodes if str(n.id) not in replicas]
        self.assertEqual(len(spares), 2, ps)
        sid, hid = spares
        acked = []

        def produce(n):
            for _ in range(n):
                body = f"m{len(acked)}"
                self.produce_acked(leader, TOPIC, 0, body)
                acked.append(body)

        produce(30)
        # S refuses every record it fetches for st/0 from now on.
        stalled = self.node(c, sid)
        with open(os.path.join(stalled.dir, "enospc"), "w") as f:
            f.write(f"{TOPIC}/0\n")
        mid = self.begin(first, [lid, sid])
        produce(20)  # served throughout: the ISR is still {L, F}
        failed = self.wait_move(c, mid, "failed")
        sys.stderr.write(f"move {mid} failed: {failed['error']}\n")
        self.assertRegex(failed["error"],
                         rf"^target member {sid} (copied no record|fetched nothing) for 3s "
                         r"\(.*\): the partition stays on its old replicas$")
        self.assertIn("; its last append error: no space left on device)", failed["error"])
        self.assertEqual((failed["from"], failed["to"]), (replicas, [lid, sid]), failed)
        self.assertIsNotNone(failed["finished_ms"])
        for node in c.nodes:
            ps = wait_until(f"node {node.id} shows {TOPIC}/0 on its old replicas",
                            lambda n=node: (lambda x: x if x and x["replicas"] == replicas
                                            else None)(self.pstats(n, TOPIC, 0)))
            self.assertNotIn(sid, ps["isr"], ps)
        self.assertRegex(leader.log(), rf"move {mid} stalled \(no progress for \d+ ms\), failing it")
        self.assertRegex(stalled.log(), rf"replica {TOPIC}/0: appending fetched records at \d+: ")
        wait_until("the failed move counted in /metrics",
                   lambda: any((n.metric('tern_moves_finished_total{outcome="failed"}') or 0) >= 1
                               for n in c.nodes))
        r = self.ternctl(c, first, "cluster", "moves")
        self.assertTrue(any(" failed " in line and re.search(rf"\b{TOPIC}\b", line)
                            and "its last append error: no space left on device" in line
                            for line in r.stdout.splitlines()), r.stdout)
        # Still writable and readable on its old replicas; nothing lost.
        produce(20)
        self.wait_all(leader, TOPIC, 0, acked)
        # A second move, to the healthy spare H, completes.
        mid2 = self.begin(first, [lid, hid])
        produce(10)
        done = self.wait_move(c, mid2, "done")
        self.assertIsNone(done["error"], done)
        wait_until(f"{TOPIC}/0 on [{lid}, {hid}] with 2 in-sync replicas",
                   lambda: self.pstats(first, TOPIC, 0)["replicas"] == [lid, hid]
                   and self.in_sync(c, TOPIC, 0, 2))
        lead = self.node(c, wait_until(f"{TOPIC}/0's leader",
                                       lambda: self.leader(first, TOPIC, 0)))
        for i in range(5):
            body = f"after{i}"
            self.produce_acked(lead, TOPIC, 0, body)
            acked.append(body)
        got = self.wait_all(lead, TOPIC, 0, acked)
        self.assertEqual(sorted(got), sorted(acked))  # nothing else
        self.leaders_change_mid_stall(c, first, [lid, hid], sid)
        self.error_shown_then_cleared(c, first)

    def ternctl(self, c, node, *args):
        """ternctl args against node's API; its run, which exited 0."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(HOME=c.dir, TERN_URL=f"http://{node.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        r = subprocess.run([TERNCTL, *args], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def hook(self, node, part, on):
        """Turn the ENOSPC hook on or off for part ("topic/p") on node,
        keeping its other lines (the file is read at each append)."""
        path = os.path.join(node.dir, "enospc")
        lines = []
        if os.path.exists(path):
            with open(path) as f:
                lines = [x for x in f.read().splitlines() if x and x != part]
        if on:
            lines.append(part)
        with open(path + ".new", "w") as f:
            f.write("".join(x + "\n" for x in lines))
        os.replace(path + ".new", path)

    def replica_errors(self, node, topic):
        ps = self.pstats(node, topic, 0)
        return None if ps is None else ps.get("replica_errors", {})

    def error_shown_then_cleared(self, c, first):
        """A follower whose appends fail: its partition's leader shows its
        error in GET /v1/topics/{t} (replica_errors), and every other node
        shows what the leader holds; once its appends succeed again, the
        leader forgets it, every node shows none, and the follower rejoins
        the ISR."""
        topic = "ce"
        ps = self.create(c, first, topic, 1)
        leader = self.node(c, ps["leader"])
        fid = next(r for r in ps["replicas"] if r != ps["leader"])
        follower = self.node(c, fid)
        acked = []
        for i in range(3):
            self.produce_acked(leader, topic, 0, f"c{i}")
            acked.append(f"c{i}")
        self.assertEqual(self.replica_errors(leader, topic), {})
        self.hook(follower, f"{topic}/0", True)
        # Acknowledged once the follower left the ISR (min_insync 1).
        for i in range(3, 6):
            self.produce_acked(leader, topic, 0, f"c{i}")
            acked.append(f"c{i}")
        shown = wait_until(f"{topic}/0's leader shows member {fid}'s append error",
                           lambda: self.replica_errors(leader, topic))
        self.assertEqual(shown, {fid: "no space left on device"})
        self.assertNotIn(fid, self.pstats(leader, topic, 0)["isr"])
        # Only the leader knows it; every other node (the follower, the
        # nodes without a copy) asks it and shows the same, and `ternctl
        # topics get` shows it whichever node it asks.
        others = [n for n in c.nodes if n.id != leader.id]
        self.assertGreaterEqual(len(others), 2)  # the follower and a third node
        for node in others:
            self.assertEqual(
                wait_until(f"node {node.id} shows {topic}/0's error of member {fid}",
                           lambda n=node: self.replica_errors(n, topic)),
                {fid: "no space left on device"})
        for node in [leader] + others:
            r = self.ternctl(c, node, "topics", "get", topic)
            self.assertIn(f" {fid}: no space left on device", r.stdout)
        self.hook(follower, f"{topic}/0", False)
        wait_until(f"{topic}/0's leader forgets member {fid}'s append error, "
                   "the member back in the ISR",
                   lambda: self.replica_errors(leader, topic) == {}
                   and self.in_sync(c, topic, 0, 2))
        for node in others:
            wait_until(f"node {node.id} shows no error for {topic}/0",
                       lambda n=node: self.replica_errors(n, topic) == {})
        # Still clear after more records, which the follower copies.
        for i in range(6, 9):
            self.produce_acked(leader, topic, 0, f"c{i}")
            acked.append(f"c{i}")
        for node in [leader] + others:
            self.assertEqual(self.replica_errors(node, topic), {})
            self.assertNotIn("no space left",
                             self.ternctl(c, node, "topics", "get", topic).stdout)
        self.wait_all(leader, topic, 0, acked)

    def leaders_change_mid_stall(self, c, first, pair, sid):
        """Move to pair[0] and S (S still refuses the copy; a move keeps the
        topic's factor, 2), forcing the partition's leadership to the other
        of pair about every second until the move fails: pair[1], leaving
        with the move, is in the ISR throughout and may lead meanwhile."""
        mid = self.begin(first, [pair[0], sid])
        marks, flips, failed = set(), 0, None
        while failed is None:
            m = self.find_move(first, mid)
            self.assertIsNotNone(m, mid)
            if m["state"] == "failed":
                failed = m
                break
            self.assertNotIn(m["state"], ("done", "aborted"), m)
            for mk in m.get("progress_marks") or []:
                if mk["member"] == sid:
                    marks.add((mk["offset"], mk["since_ms"]))
            cur = self.leader(first, TOPIC, 0)
            other = pair[1] if cur == pair[0] else pair[0]
            status, body = first.request("POST", f"/v1/topics/{TOPIC}/partitions/0/leader",
                                         {"node": other},
                                         headers={"X-Tern-Client": "tests"})
            # 409/503 while an election or the move's own change is under way.
            if status == 200:
                flips += 1
            self.assertLess(flips, 60, "the move never failed while its leaders changed")
            time.sleep(1)
        sys.stderr.write(f"move {mid} failed after {flips} leader changes: {failed['error']}\n")
        self.assertGreaterEqual(flips, 1)
        self.assertRegex(failed["error"], rf"^target member {sid} ")
        self.assertIn("its last append error: no space left on device", failed["error"])
        # One mark for S all along: it stood still, and no leader wrote
        # another (the clocks carried over, not restarted).
        self.assertEqual(len(marks), 1, marks)
        for node in c.nodes:
            wait_until(f"node {node.id} shows {TOPIC}/0 back on {pair}",
                       lambda n=node: (lambda x: x if x and x["replicas"] == pair else None)(
                           self.pstats(n, TOPIC, 0)))


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=configure)
