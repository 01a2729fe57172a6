"""SIGKILL crash test of the ingress log and its dispatcher, on 2 real ternd
nodes (tests/cluster/harness.py).

Node 1 owns the only partition of the topic; every produce goes to node 2,
which owns none of it, so each one is accepted into node 2's ingress log,
acknowledged at its group commit, and moved to node 1 by the dispatcher
(COMMIT). The producer records an id as acknowledged only when node 2
answered 202. Then:

- with no crash, a few hundred produces reach the owner exactly once;
- node 2 (the ingress side) is SIGKILLed at random moments and restarted,
  again and again, while produces flow; then node 1 (the owner) is too, so
  COMMITs are cut in flight and their replies lost;
- once node 2's ingress log is empty, the owner's partition is read back
  from offset 0: every acknowledged id is there, every body intact
  (missing = 0, corrupt = 0). Duplicates are counted and printed: a crash
  between the owner's commit and the ingress checkpoint sends a record
  again (at-least-once, docs/cluster.md); every duplicate must be of an id
  acknowledged in a run of node 2 that ended in a crash, or sent while the
  owner was killed.

Run: python3 tests/cluster/test_dispatch_crash.py --ternd build/ternd
"""
import base64
import hashlib
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
SANITIZED = os.environ.get("TERN_SANITIZED") == "1"
KILLS_INGRESS = 4 if SANITIZED else 8
KILLS_OWNER = 2 if SANITIZED else 3


def body_of(ident):
    """A self-checking body: the id, then the sha256 of the id and a filler."""
    filler = ("x" * (ident % 97)).encode()
    head = f"{ident}:".encode()
    return head + filler + b":" + hashlib.sha256(head + filler).hexdigest().encode()


def check_body(data):
    """The id a body names, or None when it is not one body_of made."""
    try:
        head, filler, digest = data.split(b":")
        ident = int(head)
    except ValueError:
        return None
    want = hashlib.sha256(head + b":" + filler).hexdigest().encode()
    return ident if digest == want else None


class Producer(threading.Thread):
    """Produces to one node until stopped; acked[id] = the node's run
    number at the 202 (a produce that got no answer is not acked)."""

    def __init__(self, node, topic, runs):
        super().__init__(daemon=True)
        self.node, self.topic, self.runs = node, topic, runs
        self.acked = {}
        self.next_id = 0
        self.stopping = threading.Event()
        self.errors = 0

    def run(self):
        conn = None
        while not self.stopping.is_set():
            ident = self.next_id
            self.next_id += 1
            run = self.runs[0]
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.node.host, self.node.http_port,
                                                      timeout=10)
                conn.request("POST", f"/v1/topics/{self.topic}/produce?partition=0",
                             body_of(ident), headers=OCTET)
                r = conn.getresponse()
                data = r.read()
                if r.status == 202:
                    self.acked[ident] = run
                elif r.status not in (503, 429):
                    raise AssertionError(f"produce {ident}: {r.status} {data!r}")
                else:
                    time.sleep(0.05)
            except (OSError, http.client.HTTPException):
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            # A modest rate: kills land among produces and dispatches.
            time.sleep(0.002)
        if conn is not None:
            conn.close()


class DispatchCrash(harness.ClusterTest):
    # Factor 1: the ingress log and its dispatcher to the one owner.
    node_args = ["--default-replication-factor=1"]

    def read_all(self, owner, topic):
        """Every body of partition 0, read on its owner from offset 0."""
        out, offset = [], 0
        conn = http.client.HTTPConnection(owner.host, owner.http_port, timeout=30)
        auth = {"Authorization": harness.basic("admin", harness.PASSWORD)}
        try:
            while True:
                conn.request("GET", f"/v1/topics/{topic}/consume?partition=0&offset={offset}",
                             headers=auth)
                r = conn.getresponse()
                data = r.read()
                if r.status == 204:
                    return out
                self.assertEqual(r.status, 200, data)
                m = json.loads(data)
                out.append(m)
                offset = m["offset"] + 1
        finally:
            conn.close()

    def drained(self, node):
        v = node.metric("tern_ingress_records", timeout=5)
        return v is not None and v == 0

    def ledger(self, owner, topic, acked, allowed_dups):
        got = {}
        corrupt = 0
        for m in self.read_all(owner, topic):
            data = m["payload"]
            data = (base64.b64decode(data) if m.get("payload_encoding") == "base64"
                    else data.encode())
            ident = check_body(data)
            if ident is None:
                corrupt += 1
                continue
            got[ident] = got.get(ident, 0) + 1
        missing = sorted(i for i in acked if i not in got)
        dups = {i: n - 1 for i, n in got.items() if n > 1}
        print(f"ledger: acked={len(acked)} stored={len(got)} missing={len(missing)} "
              f"corrupt={corrupt} duplicates={sum(dups.values())} "
              f"(ids {len(dups)})", file=sys.stderr)
        self.assertEqual(corrupt, 0)
        self.assertEqual(missing, [], f"{len(missing)} acknowledged ids missing")
        bad = [i for i in dups if not allowed_dups(i)]
        self.assertEqual(bad, [], "duplicated without a crash in between")
        return dups

    def test_sigkill_ingress_node_and_owner(self):
        c = self.make(2, security=False).start()
        owner, ingress = c.nodes
        wait_until("two alive members", lambda: owner.alive_members(timeout=5) == 2)
        status, body = owner.request("POST", "/v1/topics", {"name": "crash", "partitions": 1})
        self.assertIn(status, (200, 201), body)
        wait_until("partition 0 on node 1 in node 2's replica", lambda: (
            ingress.request("GET", "/v1/topics/crash")[1] or {}).get(
                "partition_stats", [{}])[0].get("owner_node") == "1", 30)

        # No crash: every produce once at the owner.
        runs = [0]
        p = Producer(ingress, "crash", runs)
        p.start()
        wait_until("300 acknowledged", lambda: len(p.acked) >= 300, 120)
        p.stopping.set()
        p.join()
        wait_until("node 2's ingress log empty", lambda: self.drained(ingress), 60)
        dups = self.ledger(owner, "crash", dict(p.acked), lambda i: False)
        self.assertEqual(dups, {})
        quiet = set(p.acked)

        # Crashes: the ingress node, again and again, then the owner.
        rng = random.Random(os.environ.get("TERN_TEST_SEED", "dispatch"))
        crashed_runs = set()
        p = Producer(ingress, "crash", runs)
        p.next_id = 1_000_000
        p.start()
        owner_down = []  # (first id, last id) sent while the owner was down or restarting
        for k in range(KILLS_INGRESS):
            time.sleep(rng.uniform(0.3, 1.5))
            ingress.kill()
            crashed_runs.add(runs[0])
            runs[0] += 1
            ingress.start()
            ingress.wait_ready()
            wait_until("some produces after the restart",
                       lambda n=len(p.acked): len(p.acked) > n + 20, 120)
        for k in range(KILLS_OWNER):
            time.sleep(rng.uniform(0.3, 1.5))
            first = p.next_id
            owner.kill()
            owner.start()
            owner.wait_ready()
            wait_until("node 2 sees node 1 alive again",
                       lambda: ingress.alive_members(timeout=5) == 2, 60)
            time.sleep(1)  # the dispatcher's retries reach the owner again
            owner_down.append((first - 5000, p.next_id))
        wait_until("produces after the last crash",
                   lambda n=len(p.acked): len(p.acked) > n + 50, 120)
        p.stopping.set()
        p.join()
        wait_until("node 2's ingress log empty", lambda: self.drained(ingress), 120)

        acked = {i: 0 for i in quiet}
        acked.update(p.acked)

        def allowed(i):
            if i in quiet:
                return False
            return p.acked.get(i) in crashed_runs or any(a <= i < b for a, b in owner_down)

        self.ledger(owner, "crash", acked, allowed)


if __name__ == "__main__":
    harness.main()
