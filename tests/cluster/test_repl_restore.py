"""A replicated cluster restored from a backup (docs/operations.md,
"Backup and restore"; docs/replication.md, "Incarnations"): one node of
a running cluster with `ternctl restore --rejoin`, and (the second case,
test_whole_cluster_restored_serves_its_replicated_partitions, described
in its own docstring) every node from one backup.

Three nodes, a topic of one partition with
factor 3 and min_insync 2: node 1 leads (replicas 1, 2, 3), node 3 is the
one restored. Messages A are acknowledged, `ternctl backup` copies every
member (each copy carries its data directory's incarnation), messages B
are acknowledged, node 3 stops, messages C are acknowledged by nodes 1 and
2. Node 3's data directory is replaced by its backup with --rejoin (no
metastore, no incarnation: it comes back with a new one and an OLD log,
lacking B and C); the leader (node 1) is SIGSTOPped and node 3 started,
so node 1's session ends and a leader is chosen while node 3 is live and
out of the ISR: node 2 leads alone (ISR {2}, below min_insync: publishes
refused) until node 3 caught up. Checked:

- the backup holds node 3's own copy of the partition (a follower's log,
  held by the replica manager, with its `epochs` file) and its
  incarnation; the restore wrote no `incarnation` and no `meta/` (without
  --rejoin: the incarnation derived from the backup, not the old one),
  and the node registers a new incarnation;
- node 3 is never the partition's leader while it is not in the ISR
  (every partition state sampled from node 2's metastore replica, and
  node 3's log has no "leading" line after its restart);
- it rejoins the ISR, after which publishes are acknowledged again, which
  needs it to have flushed everything below the high watermark;
- every acknowledged message (A, B, C and those after) is delivered, and
  nothing is delivered that was not produced (no phantom); a publish
  refused for too few in-sync replicas is never delivered;
- at the end (node 1 continued, all in sync, every node stopped) the three
  replicas' logs hold the same records, each acknowledged body among them.

Run: python3 tests/cluster/test_repl_restore.py --ternd build/ternd --ternctl build/ternctl
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import repl_ledger  # noqa: E402
from harness import PASSWORD, wait_until  # noqa: E402

TERNCTL = None
OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-repl-restore"}
ARGS = ["--replica-lag-time-max=2s",
        "--member-session-timeout=3s", "--min-insync-replicas=2"]
FEW = "not enough in-sync replicas"


def ternctl(*args, port=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    if port is not None:
        env.update(TERN_URL=f"http://127.0.0.1:{port}", TERN_USER="admin",
                   TERN_PASSWORD=PASSWORD)
    return subprocess.run([TERNCTL, *args], env=env, capture_output=True, text=True,
                          timeout=300)


class ReplRestore(harness.ClusterTest):
    def state(self, node):
        """Partition 0 of rr as node's metastore replica shows it."""
        status, body = node.request("GET", "/v1/topics/rr", timeout=5)
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"][0]

    def incarnation(self, via, node_id):
        status, body = via.request("GET", "/v1/cluster/members")
        self.assertEqual(status, 200, body)
        return [m for m in body["members"] if str(m["id"]) == str(node_id)][0]["incarnation"]

    def consume_until(self, c, topic, want, got):
        """Consume topic from c's nodes in turn, acknowledging each batch,
        counting every delivery in got (payload -> times), until got holds
        every payload in want and three rounds at least have run."""
        rounds = 0
        while not want <= set(got) or rounds < 3:
            via = c.nodes[rounds % 3]
            rounds += 1
            self.assertLess(rounds, 200, f"missing: {sorted(want - set(got))}")
            status, b = via.request("GET", f"/v1/topics/{topic}/consume?max=100&wait=1s",
                                    headers=CLIENT, timeout=30)
            self.assertIn(status, (200, 204), b)
            if status == 204:
                continue
            for m in b["messages"]:
                got[m["payload"]] = got.get(m["payload"], 0) + 1
            status, res = via.request("POST", f"/v1/topics/{topic}/ack/batch",
                                      [m["receipt_handle"] for m in b["messages"]],
                                      headers=CLIENT, timeout=30)
            self.assertEqual(status, 200, res)

    def test_one_node_restored_rejoins_after_catching_up(self):
        c = self.make(3, args=ARGS).start()
        c.wait_alive(3)
        n1, n2, n3 = c.nodes
        status, body = n1.request("POST", "/v1/topics", {"name": "rr", "partitions": 1,
                                                         "replication_factor": 3,
                                                         "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        ps = wait_until("rr/0 led with 3 in-sync replicas on every node", lambda: (
            all((s := self.state(n)) and s.get("leader") and len(s["isr"]) == 3
                for n in c.nodes) and self.state(n1)))
        # Placement starts partition 0 at the first member: node 1 leads
        # and is the preferred leader; node 3 never has a reason to lead.
        self.assertEqual((ps["replicas"], ps["leader"]), (["1", "2", "3"], "1"), ps)

        attempted, acked, refused_few = set(), [], set()

        def produce(via, body):
            attempted.add(body)
            status, answer = via.request("POST", "/v1/topics/rr/produce?partition=0",
                                         body.encode(), headers=OCTET, timeout=30)
            if status is not None and 200 <= status < 300:
                acked.append(body)
                return True
            if status == 503 and FEW in json.dumps(answer):
                refused_few.add(body)
            return False

        def produce_acked(via, tag, n):
            for i in range(n):
                k = 0
                while not produce(via, f"{tag}-{i}-{k}"):
                    k += 1
                    self.assertLess(k, 300, f"{tag}-{i} never acknowledged")
                    time.sleep(0.1)

        produce_acked(n1, "A", 20)
        wait_until("A on every replica", lambda: n1.metric("tern_replica_lag_records") == 0)
        bdir = os.path.join(c.dir, "backup")
        r = ternctl("backup", bdir, port=n2.http_port)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(bdir, "3", "manifest.json")) as f:
            man = json.load(f)
        paths = [x["path"] for x in man["files"]]
        self.assertIn("incarnation", paths, paths)
        # Node 3 follows rr/0: its own copy is in its backup (the replica
        # manager's log, not the engine's).
        self.assertTrue(any(x.startswith("topics/rr/0/") and x.endswith(".log") for x in paths),
                        paths)
        self.assertIn("topics/rr/0/epochs", paths)
        with open(os.path.join(n3.data, "incarnation")) as f:
            old_inc = f.read().strip()
        self.assertEqual(self.incarnation(n1, 3), old_inc)

        produce_acked(n1, "B", 20)
        self.assertEqual(n3.stop(), 0, n3.log())
        wait_until("node 3 out of rr/0's ISR", lambda: (
            (s := self.state(n1)) is not None and "3" not in s["isr"]))
        produce_acked(n1, "C", 10)

        # Node 3's copy from the backup, to rejoin the running cluster.
        self.assertEqual(ternctl("restore", bdir, "--data-path", os.path.join(c.dir, "whole"),
                                 "--node", "3").returncode, 0)
        # Without --rejoin (the whole cluster from this backup) the node
        # gets the incarnation derived from the backup, never its old one
        # (docs/replication.md, "Incarnations").
        with open(os.path.join(c.dir, "whole", "incarnation")) as f:
            derived = f.read().strip()
        self.assertRegex(derived, r"^[0-9a-f]{16}$")
        self.assertNotEqual(derived, old_inc)
        self.assertTrue(os.path.exists(os.path.join(c.dir, "whole", "meta")))
        os.rename(n3.data, n3.data + ".old")
        r = ternctl("restore", bdir, "--data-path", n3.data, "--node", "3", "--rejoin")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(n3.data, "incarnation")))
        self.assertFalse(os.path.exists(os.path.join(n3.data, "meta")))

        # The leader stops (SIGSTOP: the metastore keeps its quorum with
        # nodes 2 and 3 once node 3 is back), and node 3 starts on its old
        # log: node 1's session ends and the partition is led again, while
        # node 3 is live and out of the ISR. Only node 2 may be chosen.
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                s = self.state(n2)
                if s is not None:
                    samples.append((s.get("leader"), list(s["isr"])))
                time.sleep(0.05)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        os.kill(n1.pid, signal.SIGSTOP)
        stopped = True
        try:
            restart_at = len(n3.log())
            n3.start()
            n3.wait_ready()
            wait_until("node 2 leads rr/0", lambda: (self.state(n2) or {}).get("leader") == "2",
                       timeout=60)
            new_inc = wait_until("node 3's new incarnation registered", lambda: (
                lambda i: i if i not in (None, old_inc) else None)(self.incarnation(n2, 3)))
            self.assertNotEqual(new_inc, old_inc)
            # Publishes through node 2 are refused (too few in-sync
            # replicas) until node 3 caught up and was added back; then
            # they are acknowledged, which needs node 3's flush.
            k = 0
            while not produce(n2, f"D-{k}"):
                k += 1
                self.assertLess(k, 600, "never acknowledged again:\n" + c.logs())
                time.sleep(0.1)
            s = self.state(n2)
            self.assertIn("3", s["isr"], s)
            produce_acked(n2, "E", 10)
            os.kill(n1.pid, signal.SIGCONT)
            stopped = False
            wait_until("rr/0 with 3 in-sync replicas again", lambda: all(
                (s := self.state(n)) is not None and len(s["isr"]) == 3 for n in c.nodes),
                timeout=90)
        finally:
            if stopped:
                os.kill(n1.pid, signal.SIGCONT)
            stop.set()
            sampler.join()
        seen = [x for i, x in enumerate(samples) if i == 0 or samples[i - 1] != x]
        sys.stderr.write(f"rr/0 as node 2 saw it (leader, ISR), in order: {seen}; publishes "
                         f"refused for too few in-sync replicas meanwhile: {len(refused_few)}\n")
        bad = [x for x in samples if x[0] == "3" and "3" not in x[1]]
        self.assertEqual(bad, [], "node 3 led while out of the ISR")
        self.assertTrue(any("3" not in isr for _, isr in samples), "node 3 never seen out")
        self.assertTrue(any(l == "3" for _, isr in samples for l in isr), "never seen back in")
        after = n3.log()[restart_at:].splitlines()
        sys.stderr.write("node 3 after its restore:\n" + "\n".join(
            x for x in after if "rr/0" in x or "incarnation" in x) + "\n")
        leading = [x for x in after if "replica rr/0: leading" in x]
        self.assertEqual(leading, [], "node 3 led rr/0 after its restore")

        # Every acknowledged message, nothing else.
        got = {}
        self.consume_until(c, "rr", set(acked), got)
        self.assertEqual(sorted(set(acked) - set(got)), [], "acknowledged, never delivered")
        self.assertEqual(sorted(set(got) - attempted), [], "phantom: never produced")
        self.assertEqual(sorted(set(got) & refused_few), [], "refused, then delivered")

        wait_until("followers caught up", lambda: all(
            n.metric("tern_replica_lag_records") == 0 for n in c.nodes))
        self.stop_all(c)
        logs = {n.id: repl_ledger.read_replica(n.data, ["rr"])[("rr", 0)] for n in c.nodes}
        view = {i: [(x.offset, x.digest) for x in recs] for i, recs in logs.items()}
        self.assertEqual(view[3], view[2], "node 3's log differs from node 2's")
        self.assertEqual(view[1], view[2], "node 1's log differs from node 2's")
        bodies = {x.body.decode() for x in logs[3] if not x.control}
        self.assertEqual(sorted(set(acked) - bodies), [], "acknowledged, not in node 3's log")
        self.assertEqual(sorted(bodies - attempted), [], "node 3's log holds what nobody sent")

    def test_whole_cluster_restored_serves_its_replicated_partitions(self):
        """Every member restored from one backup (no --rejoin): each node's
        restore rewrites the same partition states (leader = the best copy,
        ISR = it, epochs above every restored one) and incarnations, so the
        cluster starts with every replicated partition led, and nothing
        acknowledged before the backup is lost, nothing FINed comes back.
        A copy with a damage record naming its active segment is not
        chosen (it is probed as ternd's open finds it: isolated)."""
        c = self.make(3, args=ARGS).start()
        c.wait_alive(3)
        topics = {"wr": 3, "ws": 1}
        for name, parts in topics.items():
            status, body = c.nodes[0].request("POST", "/v1/topics", {
                "name": name, "partitions": parts, "replication_factor": 3,
                "min_insync_replicas": 2})
            self.assertEqual(status, 201, body)
        parts = [(t, p) for t, n in topics.items() for p in range(n)]

        def pstate(node, t, p):
            status, body = node.request("GET", f"/v1/topics/{t}", timeout=5)
            if status != 200 or "partition_stats" not in body:
                return None
            return body["partition_stats"][p]

        wait_until("every partition led with 3 in-sync replicas on every node", lambda: all(
            (s := pstate(n, t, p)) and s.get("leader") and len(s["isr"]) == 3
            for n in c.nodes for t, p in parts))
        before = {(t, p): pstate(c.nodes[0], t, p) for t, p in parts}

        acked, attempted = [], set()

        answers = {}

        def produce(via, t, p, body):
            attempted.add(body)
            status, answer = via.request("POST", f"/v1/topics/{t}/produce?partition={p}",
                                         body.encode(), headers=OCTET, timeout=30)
            answers[body] = (status, answer)
            return status is not None and 200 <= status < 300

        for i in range(60):
            t, p = parts[i % len(parts)]
            body = f"A-{t}-{p}-{i}"
            self.assertTrue(produce(c.nodes[i % 3], t, p, body), body)
            acked.append(body)
        # Some are FINed (acked by a consumer) before the backup.
        finned = set()
        for t in topics:
            via = c.nodes[1]
            while len([x for x in finned if x.startswith(f"A-{t}-")]) < 6:
                status, b = via.request("GET", f"/v1/topics/{t}/consume?max=4&wait=1s",
                                        headers=CLIENT, timeout=30)
                self.assertIn(status, (200, 204), b)
                if status == 204:
                    continue
                status, res = via.request("POST", f"/v1/topics/{t}/ack/batch",
                                          [m["receipt_handle"] for m in b["messages"]],
                                          headers=CLIENT, timeout=30)
                self.assertEqual(status, 200, res)
                for m, x in zip(b["messages"], res["results"]):
                    self.assertEqual(x["status"], 204, res)  # FINed: on min_insync disks
                    finned.add(m["payload"])
        wait_until("every follower caught up", lambda: all(
            n.metric("tern_replica_lag_records") == 0 for n in c.nodes))

        bdir = os.path.join(c.dir, "backup")
        r = ternctl("backup", bdir, port=c.nodes[0].http_port)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(bdir, "backup.json")) as f:
            self.assertRegex(json.load(f)["id"], r"^[0-9a-f]{32}$")
        # Acknowledged after the backup: not in it, so not restored.
        after = []
        for i in range(12):
            t, p = parts[i % len(parts)]
            body = f"B-{t}-{p}-{i}"
            self.assertTrue(produce(c.nodes[0], t, p, body), body)
            after.append(body)
        self.stop_all(c)

        # A restore missing a member's copy, or with a damaged one, fails
        # before it writes anything, naming it.
        broken = os.path.join(c.dir, "broken")
        shutil.copytree(bdir, broken)
        shutil.rmtree(os.path.join(broken, "2"))
        r = ternctl("restore", broken, "--data-path", os.path.join(c.dir, "x1"), "--node", "1")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("node 2", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(c.dir, "x1")))
        shutil.rmtree(broken)
        shutil.copytree(bdir, broken)
        with open(os.path.join(broken, "3", "manifest.json")) as f:
            man3 = json.load(f)
        seg = [x["path"] for x in man3["files"]
               if x["path"].startswith("topics/wr/0/") and x["path"].endswith(".log")][0]
        with open(os.path.join(broken, "3", "data", seg), "r+b") as f:
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 0xff]))
        r = ternctl("restore", broken, "--data-path", os.path.join(c.dir, "x1"), "--node", "1")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("node 3", r.stderr)
        self.assertIn("damaged", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(c.dir, "x1")))

        # Every node restored from the backup into an empty directory.
        decided, incs = {}, {}
        for n in c.nodes:
            os.rename(n.data, n.data + ".old")
            r = ternctl("--json", "restore", bdir, "--data-path", n.data, "--node", str(n.id))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stderr, "")  # nothing from a sanitizer either
            out = json.loads(r.stdout)
            decided[n.id] = out["partitions"]
            incs[n.id] = out["incarnation"]
            with open(os.path.join(n.data, "incarnation")) as f:
                self.assertEqual(f.read().strip(), out["incarnation"])
            text = ternctl("restore", bdir, "--data-path", os.path.join(c.dir, f"t{n.id}"),
                           "--node", str(n.id))
            self.assertEqual(text.returncode, 0, text.stderr)
            sys.stderr.write(f"node {n.id}'s restore:\n{text.stdout}")
            self.assertIn("leader node", text.stdout)
        self.assertEqual(decided[1], decided[2], "two nodes' restores decided differently")
        self.assertEqual(decided[1], decided[3], "two nodes' restores decided differently")
        self.assertEqual(len(set(incs.values())), 3, incs)
        chosen = {}
        for d in decided[1]:
            key = (d["topic"], d["partition"])
            old = before[key]
            self.assertIsNotNone(d["leader"], d)
            self.assertGreater(d["leader_epoch"], old["leader_epoch"], (d, old))
            self.assertGreater(d["partition_epoch"], old["partition_epoch"], (d, old))
            for cp in d["copies"]:
                self.assertTrue(cp["present"] and not cp["damaged"], d)
                self.assertGreater(d["leader_epoch"], cp["last_epoch"], d)
                self.assertEqual(cp["beyond_leader"], 0, d)  # all caught up before the backup
            chosen[key] = d
        self.assertEqual(sorted(chosen), sorted(parts))

        # A copy whose damage record names its active segment (a backup of
        # a node where that copy was isolated for damage since a restart)
        # is not chosen: the restore probes it as ternd's open will find
        # it, isolated, though its records look whole.
        lead = chosen[("wr", 0)]["leader"]
        dmg = os.path.join(c.dir, "dmg")
        shutil.copytree(bdir, dmg)
        man_path = os.path.join(dmg, lead, "manifest.json")
        with open(man_path) as f:
            man = json.load(f)
        pdir = "topics/wr/0/"
        base = max(int(x["path"][len(pdir):-4]) for x in man["files"]
                   if x["path"].startswith(pdir) and x["path"].endswith(".log"))
        tail = struct.pack("<QQ", base, 2**64 - 1)  # the active segment
        rec = struct.pack("<II", 0x31444E54, repl_ledger.crc32c(tail)) + tail  # "TND1"
        with open(os.path.join(dmg, lead, "data", pdir + "damage"), "wb") as f:
            f.write(rec)
        man["files"].append({"path": pdir + "damage", "length": len(rec),
                             "crc32c": repl_ledger.crc32c(rec)})
        man["files"].sort(key=lambda x: x["path"])
        with open(man_path, "w") as f:
            json.dump(man, f)
        xd = os.path.join(c.dir, "xd")
        r = ternctl("--json", "restore", dmg, "--data-path", xd, "--node", lead)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        d = [x for x in json.loads(r.stdout)["partitions"]
             if (x["topic"], x["partition"]) == ("wr", 0)][0]
        self.assertNotEqual(d["leader"], lead, d)
        cp = [x for x in d["copies"] if x["node"] == lead][0]
        self.assertTrue(cp["present"] and cp["damaged"], d)
        self.assertTrue(os.path.exists(os.path.join(xd, pdir, "damage")))
        shutil.rmtree(dmg)
        shutil.rmtree(xd)

        # Started: every partition led, without an operator, at the
        # rewritten epochs or later, and the restored incarnations registered.
        for n in c.nodes:
            n.start()
        c.wait_ready()
        wait_until("every partition led on every node", lambda: all(
            (s := pstate(n, t, p)) is not None and s.get("leader")
            for n in c.nodes for t, p in parts), timeout=90)
        for t, p in parts:
            s = pstate(c.nodes[0], t, p)
            self.assertGreaterEqual(s["leader_epoch"], chosen[(t, p)]["leader_epoch"], s)
            self.assertGreaterEqual(s["partition_epoch"], chosen[(t, p)]["partition_epoch"], s)
        for n in c.nodes:
            self.assertEqual(self.incarnation(c.nodes[0], n.id), incs[n.id])
        # Publishes are taken again once the ISR is back to min_insync: the
        # followers caught up from the leader the restore chose and its CAS
        # added them. Each leader acts on its own metastore replica's view,
        # which its replica manager takes at the next metastore tick; that
        # view shows only as tern_partitions_under_replicated, so the test
        # waits for every node's metastore view to reach min_insync, then for
        # the leaders' own view of the whole set.
        wait_until("every partition's ISR back to min_insync on every node", lambda: all(
            (s := pstate(n, t, p)) is not None and len(s["isr"]) >= 2
            for n in c.nodes for t, p in parts), timeout=120)
        wait_until("no partition under-replicated as its leader sees it", lambda: all(
            n.metric("tern_partitions_under_replicated") == 0 for n in c.nodes), timeout=120)
        later = []
        for i, (t, p) in enumerate(parts):
            body = f"C-{t}-{p}-{i}"
            self.assertTrue(produce(c.nodes[i % 3], t, p, body),
                            (body, answers[body], pstate(c.nodes[0], t, p), c.logs()))
            later.append(body)

        got = {}
        for t in topics:
            want = {x for x in acked + later if x.startswith(f"A-{t}-") or x.startswith(f"C-{t}-")}
            want -= finned
            self.consume_until(c, t, want, got)
        self.assertEqual(sorted(set(acked) - finned - set(got)), [],
                         "acknowledged before the backup, never delivered")
        self.assertEqual(sorted(set(got) & finned), [], "FINed before the backup, delivered")
        self.assertEqual(sorted(set(got) - attempted), [], "phantom: never produced")
        self.assertEqual(sorted(set(got) & set(after)), [],
                         "acknowledged after the backup, yet restored")
        self.assertEqual(sorted(set(later) - set(got)), [], "acknowledged after the restore, lost")
        self.stop_all(c)
        for n in c.nodes:
            self.assertNotIn("runtime error", n.log())


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
