"""Move traffic (issue 24; docs/cluster.md "How a move is throttled"): a
partition move's copy rides node RPC's bulk connection, under move-rate,
with its progress in GET /v1/cluster/moves and /metrics.

Four nodes, topic mr with one partition of factor 3:
  MoveRate.test_throttled_move  every node at --move-rate=1MiB; an 8 MiB
      backlog; the partition moved to the spare node (the leader stays).
      Sampled on the leader while it runs: the bytes it read for the target
      (tern_move_bytes_total{direction="sent"}) and the bytes_copied it
      reports never pass move-rate x the time since the move began plus
      one bucket and one fetch (an upper bound, no timing assertion); the
      state is `copying` with 0 < bytes_copied < bytes_total at some point,
      `tern_moves_in_flight` is 1; fetches were held for tokens; the
      target fetched over the bulk connection. After it: done, every
      replica's log end equal to the leader's, in_flight 0, one move
      done and timed in /metrics.
  MoveBig.test_one_gib_move  (label heavy: not in the ASan run) a 1 GiB
      backlog (TERN_MOVE_BIG_BYTES to change it) moved at the default
      move-rate while /v1 producers publish on other partitions of the
      same nodes: publish p50/p99 before and during the move are printed
      (not asserted), and every acknowledged message of the load is read
      back from its partition after the move (nothing lost).

Run: python3 tests/cluster/test_move_rate.py --ternd build/ternd --ternctl build/ternctl
         [MoveRate | MoveBig]
"""
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TERNCTL = None


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)

TOPIC = "mr"
MIB = 1 << 20
RATE = 1 * MIB
BURST = max(RATE // 10, 64 << 10)  # cluster/throttle.h: the bucket's burst
FETCH = MIB                         # a fetch answer's max bytes (replica.c)
ARGS = ["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
        "--member-session-timeout=3s", "--segment-bytes=1MiB"]


def log(msg):
    sys.stderr.write(f"[move-rate {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


class Base(harness.ClusterTest):
    def start(self, extra, partitions):
        c = self.make(4, args=ARGS + extra)
        c.start()
        c.wait_alive(4, 90)
        self.c = c
        status, body = c.nodes[0].request(
            "POST", "/v1/topics", {"name": TOPIC, "partitions": partitions,
                                   "replication_factor": 3, "min_insync_replicas": 2})
        self.assertEqual(status, 201, body)
        wait_until("every partition led with its whole ISR", lambda: self.settled(partitions), 90)
        return c

    def pstats(self, node=None):
        for n in ([node] if node else self.c.nodes):
            status, body = n.request("GET", f"/v1/topics/{TOPIC}")
            if status == 200 and isinstance(body, dict):
                return body["partition_stats"]
        return None

    def settled(self, partitions):
        ps = self.pstats()
        return ps is not None and len(ps) == partitions and all(
            p.get("leader") and len(p.get("isr", [])) == len(p.get("replicas", [])) == 3
            for p in ps)

    def node(self, nid):
        return next(n for n in self.c.nodes if str(n.id) == str(nid))

    def fill(self, p, total, msg=4096, per=64):
        """total bytes of backlog in partition p, in /v1 batches."""
        node = self.node(self.pstats()[p]["leader"])
        payload = "x" * msg
        sent = 0
        while sent < total:
            items = [{"payload": payload, "partition": p} for _ in range(per)]
            status, body = node.request("POST", f"/v1/topics/{TOPIC}/produce/batch", items,
                                        timeout=30)
            self.assertEqual(status, 202, body)
            sent += msg * per
        return sent

    def moves(self, node):
        status, body = node.request("GET", "/v1/cluster/moves")
        self.assertEqual(status, 200, body)
        return body["moves"]

    def move(self, p):
        """Move p to the spare node, keeping its leader (first) and one
        follower: (move id, leader node, target node)."""
        ps = self.pstats()[p]
        leader = str(ps["leader"])
        spare = next(str(n.id) for n in self.c.nodes if str(n.id) not in ps["replicas"])
        keep = next(r for r in ps["replicas"] if r != leader)
        status, body = self.node(leader).request(
            "PATCH", f"/v1/topics/{TOPIC}/partitions/{p}", {"replicas": [leader, spare, keep]})
        self.assertEqual(status, 202, body)
        log(f"move {body['id']} of {TOPIC}/{p}: {body['from']} -> {body['to']}")
        return body["id"], self.node(leader), self.node(spare)

    def finished(self, node, mid):
        for m in self.moves(node):
            if m["id"] == mid and m["state"] in ("done", "aborted"):
                return m
        return None


class MoveRate(Base):
    def test_throttled_move(self):
        c = self.start([f"--move-rate={RATE}"], 1)
        backlog = self.fill(0, 8 * MIB)
        log(f"backlog {backlog} bytes")
        leader = self.node(self.pstats()[0]["leader"])
        sent_metric = 'tern_move_bytes_total{direction="sent"}'
        sent0 = leader.metric(sent_metric)
        waits0 = leader.metric("tern_move_throttle_waits_total")
        self.assertEqual(leader.metric("tern_moves_in_flight"), 0)
        # Before the move no node has fetched over a bulk connection (the
        # target holds no replica yet; read before the PATCH, as it begins
        # fetching at once).
        bulk = 'tern_replica_fetches_sent_total{connection="bulk"}'
        bulk0 = {str(n.id): n.metric(bulk) for n in c.nodes}
        t0 = time.monotonic()  # before the move begins: elapsed times are upper bounds
        mid, leader, target = self.move(0)
        self.assertEqual(bulk0[str(target.id)], 0)
        samples, copying, in_flight = [], None, False
        while True:
            ms = [m for m in self.moves(leader) if m["id"] == mid]
            sent = leader.metric(sent_metric) - sent0
            elapsed = time.monotonic() - t0
            bound = RATE * elapsed + BURST + FETCH
            self.assertTrue(ms, f"move {mid} not listed")
            m = ms[0]
            samples.append((round(elapsed, 2), sent, m["bytes_copied"], m["state"]))
            # The rate holds: what the leader read for the target, and what
            # the target holds, never past rate x elapsed + a bucket + a fetch.
            self.assertLessEqual(sent, bound, samples[-3:])
            if m["state"] in ("done", "aborted"):
                break
            # This node leads: it knows the progress once the target fetched
            # (null before its first fetch).
            self.assertEqual(m["bytes_total"] is None, m["bytes_copied"] is None, m)
            if m["bytes_total"] is not None:
                self.assertLessEqual(m["bytes_copied"], bound, samples[-3:])
                self.assertLessEqual(m["bytes_copied"], m["bytes_total"], m)
            if m["state"] == "copying" and 0 < m["bytes_copied"] < m["bytes_total"] and not copying:
                copying = m
                # ternctl shows the progress too, asked of the leader.
                env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
                env.update(HOME=c.dir, TERN_URL=f"http://{leader.api_address}",
                           TERN_PASSWORD=harness.PASSWORD)
                r = subprocess.run([TERNCTL, "cluster", "moves"], capture_output=True, text=True,
                                   env=env, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.splitlines()
                self.assertIn("COPIED", lines[0], r.stdout)
                row = next(line for line in lines if line.startswith(mid))
                self.assertRegex(row, r" (copying|catching_up|handing_over|done) +"
                                 r"(\d+(\.\d)? (B|KiB|MiB)/8\.\d MiB|-) ", r.stdout)
            in_flight = in_flight or leader.metric("tern_moves_in_flight") == 1
            time.sleep(0.25)
        log(f"samples (s, sent, copied, state): {samples}")
        self.assertEqual(m["state"], "done", m)
        self.assertIsNotNone(copying, f"never seen copying with progress: {samples}")
        self.assertGreaterEqual(copying["bytes_total"], backlog, copying)
        self.assertTrue(in_flight, "tern_moves_in_flight never 1 during the move")
        # A copy of 8 MiB at 1 MiB/s waited for tokens.
        self.assertGreater(leader.metric("tern_move_throttle_waits_total"), waits0)
        # The target fetched over the bulk connection, and received the
        # backlog while out of the ISR.
        self.assertGreater(target.metric(bulk), 0)
        self.assertGreaterEqual(target.metric('tern_move_bytes_total{direction="received"}'),
                                backlog)
        self.assertGreaterEqual(leader.metric(sent_metric) - sent0, backlog)
        # Every replica (the target included) ends where the leader does.
        wait_until("the new replicas in sync",
                   lambda: len(self.pstats(leader)[0]["isr"]) == 3 and
                   str(target.id) in self.pstats(leader)[0]["isr"], 60)
        for n in c.nodes:
            wait_until(f"node {n.id}: no move in flight",
                       lambda n=n: n.metric("tern_moves_in_flight") == 0, 30)
            wait_until(f"node {n.id}: the move counted done",
                       lambda n=n: n.metric('tern_moves_finished_total{outcome="done"}') == 1, 30)
            self.assertEqual(n.metric("tern_move_duration_seconds_count"), 1)
            self.assertGreater(n.metric("tern_move_duration_seconds_sum"), 0)
        # Finished moves carry no progress (nobody copies any more).
        done = self.finished(target, mid)
        self.assertIsNone(done["bytes_copied"], done)
        self.assertIsNone(done["bytes_total"], done)


BEFORE = 3000  # publishes timed before the big move begins


class MoveBig(Base):
    """The issue's proof: a move of a partition with a backlog of at least
    1 GiB, publish p99 measured before and during it (printed)."""

    SIZE = int(os.environ.get("TERN_MOVE_BIG_BYTES", str(1 << 30)))

    def test_one_gib_move(self):
        c = self.start([], 4)
        t = time.monotonic()
        backlog = self.fill(0, self.SIZE, msg=16384, per=256) // 16384
        log(f"backlog of {self.SIZE >> 20} MiB in {time.monotonic() - t:.1f}s")
        acked, lat, stop = {}, [], threading.Event()
        phase = ["before"]

        def producer(node, p):
            seq = 0
            while not stop.is_set():
                body = f"{node.id}-{p}-{seq}".encode()
                t1 = time.monotonic()
                status, _ = node.request("POST", f"/v1/topics/{TOPIC}/produce?partition={p}",
                                         body, headers={"Content-Type":
                                                        "application/octet-stream"},
                                         timeout=10)
                if status == 202:
                    lat.append((phase[0], time.monotonic() - t1))
                    acked.setdefault(p, set()).add(body)
                seq += 1
                time.sleep(0.005)

        threads = []
        for p in (1, 2, 3):
            for n in c.nodes:
                th = threading.Thread(target=producer, args=(n, p), daemon=True)
                th.start()
                threads.append(th)
        try:
            # The publishes timed before the move: enough of them for a p99
            # (1% of them above it), which a few seconds of the load give.
            wait_until(f"{BEFORE} publishes timed before the move",
                       lambda: sum(1 for w, _ in list(lat) if w == "before") >= BEFORE, 120)
            phase[0] = "during"
            t = time.monotonic()
            mid, leader, target = self.move(0)
            m = wait_until("the big move done", lambda: self.finished(leader, mid), 600, 0.25)
            took = time.monotonic() - t
            phase[0] = "after"
            self.assertEqual(m["state"], "done", m)
        finally:
            stop.set()
            for th in threads:
                th.join(15)

        def pct(ph, q):
            v = sorted(x for w, x in lat if w == ph)
            return v[min(len(v) - 1, int(len(v) * q))] * 1e3 if v else float("nan")
        b99, d99 = pct("before", 0.99), pct("during", 0.99)
        log(f"moved {self.SIZE >> 20} MiB in {took:.1f}s ({self.SIZE / took / MIB:.1f} MiB/s, "
            f"move-rate 64 MiB/s); publish p50 before {pct('before', 0.5):.1f} ms during "
            f"{pct('during', 0.5):.1f} ms; p99 before {b99:.1f} ms during {d99:.1f} ms "
            f"(ratio {d99 / b99:.2f}, target < 2; "
            f"{sum(w == 'before' for w, _ in lat)} publishes timed before, "
            f"{sum(w == 'during' for w, _ in lat)} during)")
        # The ledger: every acknowledged message of the load is in its
        # partition, read back through the /v1 consume door.
        for p, want in acked.items():
            got = self.read_all(p, want)
            missing = want - got
            self.assertFalse(missing, f"partition {p}: {len(missing)} acknowledged messages "
                             f"lost, e.g. {sorted(missing)[:5]}")
        # The moved partition holds its whole backlog on its new replicas:
        # in the ISR (caught up with the leader), which counts every message.
        ps = self.pstats(leader)[0]
        self.assertIn(str(target.id), ps["isr"], ps)
        self.assertEqual(ps["message_count"], backlog, ps)

    def read_all(self, p, want):
        """The payloads of partition p, read through /v1 consume on the
        topic's first channel (made with the topic: it has everything),
        until every payload of want came or three reads in a row found
        nothing."""
        node = self.node(self.pstats()[p]["leader"])
        got, idle = set(), 0
        while idle < 3 and not want <= got:
            status, body = node.request(
                "GET", f"/v1/topics/{TOPIC}/consume?partition={p}&max=100&wait=1s",
                headers={"X-Tern-Client": "move-big"}, timeout=10)
            msgs = body.get("messages", []) if status == 200 and isinstance(body, dict) else []
            idle = idle + 1 if not msgs else 0
            for msg in msgs:
                got.add(str(msg["payload"]).encode())
            if msgs:  # acked, or the channel's in-flight cap stops the reads
                status, body = node.request(
                    "POST", f"/v1/topics/{TOPIC}/ack/batch", [m["receipt_handle"] for m in msgs],
                    headers={"X-Tern-Client": "move-big"}, timeout=10)
                self.assertEqual(status, 200, body)
        return got

if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=configure)
