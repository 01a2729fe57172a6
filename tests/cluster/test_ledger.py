"""The ledger: nothing acknowledged is lost on 3 real ternd nodes
(tests/cluster/harness.py) while nodes are SIGKILLed or cut off.

Two topics: a /v1 topic `lv` of 3 partitions (partition p on node p + 1)
and an NSQ topic `ln` (made by the NSQ doors: one partition per member
that publishes to it). Producers run on every node through every door:
NSQ TCP PUB, MPUB and DPUB (deferred 0.1 to 2 s) and HTTP /pub and /mpub
to `ln`; /v1 produce (no key, a key, or an explicit partition another
node owns) and /v1 batch produce (the three mixed) to `lv`. Each message
body carries a unique id and a digest of the rest
(`L|id|padding|sha256[:16]`), so a corrupt body is caught; an id goes
into the ledger as acknowledged only when its door answered OK / 200 /
202. Consumers run on every node too: NSQ readers on
every owner `/lookup` (asked of any node) lists, SUB, RDY, FIN; /v1
single and batch consumers whose acks go to a different node than the
one that delivered (`/ack` and `/ack/batch`).

test_sigkill_each_node: while all of that runs, SIGKILL and restart the
metastore leader, then another owner of a partition, then a node whose
ingress log holds records (the owner of a partition is killed first,
records pinned to that partition are produced through the third node
until its tern_ingress_records is above 0, then that node is killed too,
restarted, and the owner last). test_partition: the same traffic while
the metastore leader is cut off in its network namespace
(tests/cluster/netns.py); a producer inside that namespace sends it
produces, which it takes (those for partitions it does not own into its
ingress log), while the other two elect a leader and go on; it is
SIGKILLed and started again while still cut off; heal.
test_a_waiting_record_holds_up_no_other_partition: one record pinned to a
dead owner's partition must not stop the taker from dispatching the 6000
it accepted after it for a live owner (it does today: 4095 arrive, the
dispatcher's window; see docs/cluster.md, "A dead owner").

Then production stops and every channel is drained to empty. Asserted:
every acknowledged id was received (missing = 0) and no body fails its
digest (corrupt = 0), no request was answered 401 (every one carries
the admin's credentials, or none to an open NSQ door, so a node that
cannot check them yet must say 503), and every node then stops cleanly
(exit status 0). Duplicates are counted and printed
(stored twice: read at two offsets; delivered again: the same offset),
not failed on: at-least-once allows them after a crash (docs/cluster.md,
"How a produce is routed"), and a consume whose ack could not reach the
partition's owner is delivered again after its visibility timeout.

TERN_SANITIZED=1 (make asan) makes the producers slower, for fewer
messages.

Run: python3 tests/cluster/test_ledger.py --ternd build/ternd
"""
import argparse
import hashlib
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import netns  # noqa: E402
from harness import http_call, wait_until  # noqa: E402
from nsqwire import Closed, Conn, FRAME_ERROR, FRAME_MESSAGE  # noqa: E402  (tests/e2e)

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "ledger"}
SANITIZED = os.environ.get("TERN_SANITIZED") == "1"
PACE = 0.4 if SANITIZED else 0.12  # seconds between one producer's requests
V1, NSQ = "lv", "ln"
NSQ_CHANNEL = "ch"
V1_CHANNEL = "default"
VISIBILITY_MS = 4000
# Factor 1: the ledger is about owners, the ingress log and its dispatcher.
FAST_DEATH = ["--cluster-heartbeat-interval=500ms", "--cluster-dead-after=3s",
              "--default-replication-factor=1"]


def log(msg):
    sys.stderr.write(f"[ledger {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# -- message bodies ------------------------------------------------------------

def make_body(mid):
    """The body of message mid: its id, random padding, and a digest of both."""
    pad = os.urandom(random.randrange(4, 120)).hex()
    digest = hashlib.sha256(f"{mid}|{pad}".encode()).hexdigest()[:16]
    return f"L|{mid}|{pad}|{digest}".encode()


def check_body(data):
    """The id in a body that passes its digest; None for a corrupt one."""
    if isinstance(data, str):
        data = data.encode()
    parts = data.split(b"|")
    if len(parts) != 4 or parts[0] != b"L":
        return None
    mid, pad, digest = (p.decode("ascii", "replace") for p in parts[1:])
    if hashlib.sha256(f"{mid}|{pad}".encode()).hexdigest()[:16] != digest:
        return None
    return mid


class Ledger:
    """What was acknowledged and what was received, by id (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.acked = {}     # id -> the door that acknowledged it
        self.received = {}  # id -> deliveries
        self.corrupt = []   # (where, body) of bodies that fail their digest
        self.doors = {}     # door -> ids acknowledged
        self.positions = {}  # id -> the (partition, offset)s it was delivered from

    def new_id(self, topic, door, node_id):
        return f"{topic}.{door}.n{node_id}.{next(self.ids)}"

    def ack(self, mids, door):
        with self.lock:
            for mid in mids:
                self.acked[mid] = door
            self.doors[door] = self.doors.get(door, 0) + len(mids)

    def got(self, topic, body, where, position):
        """A delivery of body, read at position (the partition and offset it
        was stored at): the same position again is a redelivery, another
        one a second stored copy."""
        mid = check_body(body)
        with self.lock:
            if mid is None or not mid.startswith(topic + "."):
                self.corrupt.append((where, body[:80]))
                return
            self.received[mid] = self.received.get(mid, 0) + 1
            self.positions.setdefault(mid, set()).add(position)

    def acked_count(self):
        with self.lock:
            return len(self.acked)

    def missing(self):
        with self.lock:
            return sorted(m for m in self.acked if m not in self.received)

    def summary(self):
        with self.lock:
            dups = {m: n - 1 for m, n in self.received.items() if n > 1}
            copies = sum(len(self.positions[m]) - 1 for m in dups)
            unacked = sum(1 for m in self.received if m not in self.acked)
            missing = sum(1 for m in self.acked if m not in self.received)
            return {"acked": len(self.acked), "received": len(self.received),
                    "deliveries": sum(self.received.values()),
                    "duplicates": sum(dups.values()), "duplicate_ids": len(dups),
                    "stored_twice": copies, "redelivered": sum(dups.values()) - copies,
                    "received_unacked": unacked, "missing": missing,
                    "corrupt": len(self.corrupt), "by_door": dict(self.doors)}, dups


# -- the traffic: producers and consumers on every node -----------------------

class Traffic:
    """Producer and consumer threads against every node of a cluster.
    Threads never fail: an error (a node down, cut off, restarting) is a
    request that acknowledged nothing, retried after a pause."""

    def __init__(self, cluster, ledger, owners):
        self.c = cluster
        self.ledger = ledger
        self.owners = owners  # partition of lv -> owner id
        self.producing = threading.Event()
        self.consuming = threading.Event()
        self.threads = []
        self.producers = []  # joined by stop_producing
        self.readers = {}  # (host, tcp port) -> reader thread
        self.readers_lock = threading.Lock()
        self.counts = {"consume_errors": 0, "ack_failures": 0, "nsq_reconnects": 0}
        self.ack_why = {}  # why acks failed -> handles
        self.refused = []  # the 401 answers
        self.crashes = []  # tracebacks of threads that ended on an exception
        self.consume_why = {}  # consumes answered neither 200 nor 204 -> count

    def call(self, node, method, path, *args, **kw):
        """node.request, keeping every 401: each request carries the admin's
        credentials (or none, to an open NSQ door), so a 401 is a wrong
        answer, whatever state the node is in."""
        status, body = node.request(method, path, *args, **kw)
        if status == 401:
            with self.readers_lock:
                self.refused.append(f"{time.strftime('%H:%M:%S')} node {node.id} {method} "
                                    f"{path[:50]}: {body}")
        return status, body

    def bump(self, what, n=1):
        with self.readers_lock:
            self.counts[what] += n

    def spawn(self, fn, *args):
        def run():
            try:
                fn(*args)
            except Exception:  # a bug of the test's own, or an answer it cannot read
                with self.readers_lock:
                    self.crashes.append(traceback.format_exc())
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def start(self):
        self.producing.set()
        self.consuming.set()
        for node in self.c.nodes:
            for fn in (self.nsq_tcp_producer, self.nsq_http_producer, self.v1_producer,
                       self.v1_batch_producer):
                self.producers.append(self.spawn(fn, node))
                self.threads.append(self.producers[-1])
            self.threads += [self.spawn(self.v1_consumer, node, batch)
                             for batch in (False, True)]
        self.threads.append(self.spawn(self.nsq_lookup))

    def stop_producing(self):
        """Stops the producers and waits for each one's last write to be
        answered or to time out: one acknowledged after the drain judged
        nothing missing would be reported lost."""
        self.producing.clear()
        for t in self.producers:
            t.join(30)

    def stop(self):
        self.producing.clear()
        self.consuming.clear()
        for t in self.threads:
            t.join(30)
        with self.readers_lock:
            readers = list(self.readers.values())
        for t in readers:
            t.join(30)

    def pause(self, seconds=PACE):
        time.sleep(seconds * random.uniform(0.5, 1.5))

    def other_partitions(self, node):
        return [p for p, o in self.owners.items() if o != str(node.id)]

    # producers

    def nsq_tcp_producer(self, node):
        conn = None
        while self.producing.is_set():
            try:
                if conn is None:
                    status, info = self.call(node, "GET", "/info", auth=False, timeout=5)
                    if status != 200:
                        self.pause(0.5)
                        continue
                    conn = Conn(info["tcp_port"], host=node.host, timeout=10)
                    conn.identify()
                roll = random.random()
                if roll < 0.4:
                    mid = self.ledger.new_id(NSQ, "PUB", node.id)
                    if conn.pub(NSQ, make_body(mid)) == (0, b"OK"):
                        self.ledger.ack([mid], "nsq PUB")
                elif roll < 0.6:  # deferred: kept through the kills, then delivered
                    mid = self.ledger.new_id(NSQ, "DPUB", node.id)
                    if conn.dpub(NSQ, random.randrange(100, 2000), make_body(mid)) == (0, b"OK"):
                        self.ledger.ack([mid], "nsq DPUB")
                else:
                    mids = [self.ledger.new_id(NSQ, "MPUB", node.id) for _ in range(5)]
                    if conn.mpub(NSQ, [make_body(m) for m in mids]) == (0, b"OK"):
                        self.ledger.ack(mids, "nsq MPUB")
            except (OSError, Closed, AssertionError, ValueError, KeyError, TypeError):
                if conn is not None:
                    conn.close()
                conn = None
                self.pause(0.5)
                continue
            self.pause()
        if conn is not None:
            conn.close()

    def nsq_http_producer(self, node):
        while self.producing.is_set():
            if random.random() < 0.5:
                mid = self.ledger.new_id(NSQ, "pub", node.id)
                status, answer = self.call(node, "POST", f"/pub?topic={NSQ}", make_body(mid),
                                              auth=False)
                if status == 200 and answer == b"OK":
                    self.ledger.ack([mid], "http /pub")
            else:
                mids = [self.ledger.new_id(NSQ, "mpub", node.id) for _ in range(4)]
                status, answer = self.call(node, "POST", f"/mpub?topic={NSQ}",
                                              b"\n".join(make_body(m) for m in mids),
                                              auth=False)
                if status == 200 and answer == b"OK":
                    self.ledger.ack(mids, "http /mpub")
            self.pause(PACE if status is not None else 0.5)

    def v1_producer(self, node):
        modes = itertools.cycle(["plain", "key", "pinned"])
        while self.producing.is_set():
            mode = next(modes)
            mid = self.ledger.new_id(V1, mode, node.id)
            query = ""
            if mode == "key":
                query = f"?key=k{random.randrange(1000)}"
            elif mode == "pinned":
                query = f"?partition={random.choice(self.other_partitions(node))}"
            status, answer = self.call(node, "POST", f"/v1/topics/{V1}/produce{query}",
                                          make_body(mid), headers=OCTET)
            if status == 202:
                self.ledger.ack([mid], f"/v1 produce {mode}")
            self.pause(PACE if status is not None else 0.5)

    def v1_batch_producer(self, node):
        while self.producing.is_set():
            items, mids = [], []
            for i in range(6):
                mid = self.ledger.new_id(V1, "batch", node.id)
                item = {"payload": make_body(mid).decode()}
                if i % 3 == 1:
                    item["key"] = f"k{random.randrange(1000)}"
                elif i % 3 == 2:
                    item["partition"] = random.choice(self.other_partitions(node))
                items.append(item)
                mids.append(mid)
            status, answer = self.call(node, "POST", f"/v1/topics/{V1}/produce/batch", items)
            if status == 202 and answer == {"accepted": len(items)}:
                self.ledger.ack(mids, "/v1 batch")
            self.pause(PACE * 2 if status is not None else 0.5)

    # consumers

    def ack_via(self, deliverer):
        """The running nodes other than deliverer, in a random order."""
        others = [n for n in self.c.nodes if n is not deliverer and n.running()]
        random.shuffle(others)
        return others

    def v1_consumer(self, node, batch):
        while self.consuming.is_set():
            query = f"?wait=1s&max=10" if batch else "?wait=1s"
            status, answer = self.call(node, "GET", f"/v1/topics/{V1}/consume{query}",
                                          headers=CLIENT, timeout=15)
            if status == 204:
                continue
            if status != 200:
                self.bump("consume_errors")
                with self.readers_lock:
                    key = f"{status} {str(answer)[:70]}"
                    self.consume_why[key] = self.consume_why.get(key, 0) + 1
                self.pause(0.3)
                continue
            messages = answer["messages"] if batch else [answer]
            for m in messages:
                self.ledger.got(V1, m["payload"], f"/v1 node {node.id}",
                                (m["partition"], m["offset"]))
            handles = [m["receipt_handle"] for m in messages]
            failed = len(handles)  # handles not settled: delivered again later
            why = "no node to ack through"
            for via in self.ack_via(node):
                if batch:
                    status, body = self.call(via, "POST", f"/v1/topics/{V1}/ack/batch", handles,
                                               headers=CLIENT)
                    if status == 200:
                        bad = [r for r in body["results"] if r["status"] != 204]
                        failed = len(bad)
                        why = bad[0] if bad else None
                    else:
                        why = (status, str(body)[:80])
                else:
                    status, body = self.call(via, 
                        "POST", f"/v1/topics/{V1}/ack?receipt_handle={handles[0]}",
                        headers=CLIENT)
                    failed = 0 if status == 204 else 1
                    why = (status, str(body)[:80])
                if status is not None:
                    break
            if failed:
                self.bump("ack_failures", failed)
                with self.readers_lock:
                    key = f"{why.get('status')} {why.get('error')}" if isinstance(why, dict) \
                        else str(why)
                    self.ack_why[key] = self.ack_why.get(key, 0) + failed

    def nsq_lookup(self):
        """Every 0.5 s, ask a node (in turn) for the owners of ln, and start a
        reader for each one not read yet (a restarted node has a new port)."""
        for node in itertools.cycle(self.c.nodes):
            if not self.consuming.is_set():
                return
            status, lk = self.call(node, "GET", f"/lookup?topic={NSQ}", auth=False, timeout=5)
            if status == 200:
                for p in lk["producers"]:
                    key = (p["broadcast_address"], p["tcp_port"])
                    with self.readers_lock:
                        if key not in self.readers or not self.readers[key].is_alive():
                            if key in self.readers:
                                self.counts["nsq_reconnects"] += 1
                            self.readers[key] = self.spawn(self.nsq_reader, *key)
            time.sleep(0.5)

    def nsq_reader(self, host, port):
        try:
            conn = Conn(port, host=host, timeout=5)
        except OSError:
            time.sleep(0.5)
            return
        try:
            conn.identify(msg_timeout=10000)
            if conn.sub(NSQ, NSQ_CHANNEL) != (0, b"OK"):
                return
            conn.rdy(32)
            conn.sock.settimeout(1)
            while self.consuming.is_set():
                try:
                    kind, data = conn.read_frame()
                except socket.timeout:
                    continue
                if kind == FRAME_MESSAGE:
                    msg_id = data[10:26].decode()
                    self.ledger.got(NSQ, data[26:], f"nsq {host}:{port}", msg_id)
                    conn.fin(msg_id)
                elif kind == FRAME_ERROR and not data.startswith(b"E_FIN_FAILED"):
                    return
        except (OSError, Closed, AssertionError, ValueError):
            return
        finally:
            conn.close()


# -- the tests -------------------------------------------------------------------

class LedgerTest(harness.ClusterTest):
    def alive(self, node):
        status, body = node.request("GET", "/v1/cluster/members")
        if status != 200:
            return 0
        return sum(1 for m in body["members"] if m["status"] == "alive")

    def owners(self, node, topic):
        status, body = node.request("GET", f"/v1/topics/{topic}")
        if status != 200:
            return None
        return [p["owner_node"] for p in body["partition_stats"]]

    def node(self, c, node_id):
        return [n for n in c.nodes if str(n.id) == str(node_id)][0]

    def metric(self, node, name):
        status, text = node.request("GET", "/metrics")
        if status != 200:
            return None
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def setup_topics(self, c, ledger):
        """lv (3 partitions, one per node) and ln (grown to one partition per
        node by a PUB on each), each with its channel made before anything
        is published."""
        status, body = c.nodes[0].request(
            "POST", "/v1/topics",
            {"name": V1, "partitions": 3, "visibility_timeout_ms": VISIBILITY_MS})
        self.assertEqual(status, 201, body)
        wait_until("lv's owners everywhere",
                   lambda: all(self.owners(n, V1) == ["1", "2", "3"] for n in c.nodes), 60)
        for topic, channel in ((V1, V1_CHANNEL), (NSQ, NSQ_CHANNEL)):
            if topic == NSQ:
                status, answer = c.nodes[0].request("POST", f"/topic/create?topic={NSQ}",
                                                    auth=False)
                self.assertEqual(status, 200, answer)
            status, answer = c.nodes[0].request(
                "POST", f"/channel/create?topic={topic}&channel={channel}", auth=topic == V1)
            self.assertEqual(status, 200, answer)
        for node in c.nodes:
            mid = ledger.new_id(NSQ, "pub", node.id)
            status, answer = node.request("POST", f"/pub?topic={NSQ}", make_body(mid),
                                          auth=False)
            self.assertEqual((status, answer), (200, b"OK"))
            ledger.ack([mid], "http /pub")
        wait_until("ln grown to one partition per node everywhere",
                   lambda: all(sorted(self.owners(n, NSQ) or []) == ["1", "2", "3"]
                               for n in c.nodes), 60)
        for node in c.nodes:
            wait_until(f"both channels on node {node.id}",
                       lambda n=node: self.channels_known(n), 60)
        return {p: o for p, o in enumerate(self.owners(c.nodes[0], V1))}

    def channels_known(self, node):
        for topic, channel in ((V1, V1_CHANNEL), (NSQ, NSQ_CHANNEL)):
            status, body = node.request("GET", f"/v1/topics/{topic}")
            if status != 200 or channel not in body.get("channels", []):
                return False
        return True

    def flowing(self, ledger, more=300, timeout=60):
        """Wait until more ids were acknowledged: the traffic goes on."""
        start = ledger.acked_count()
        wait_until(f"{more} more acknowledged produces",
                   lambda: ledger.acked_count() >= start + more, timeout)

    def bounce(self, c, node, why):
        log(f"SIGKILL node {node.id} ({why}); acked so far {self.ledger.acked_count()}")
        node.kill()
        # Down until every other node's replica marks it dead (3 s), so
        # its unpinned records are rerouted meanwhile.
        wait_until(f"node {node.id} marked dead by the others",
                   lambda: all(self.alive(n) == len(c.nodes) - 1 for n in c.running()), 60)
        node.start()
        node.wait_ready(120)
        log(f"node {node.id} ready again")

    def empty(self, node):
        """True when node's channels of both topics hold nothing: nothing
        ready, in flight or deferred, and its ingress log is empty."""
        status, stats = node.request("GET", "/stats?format=json", auth=False, timeout=5)
        if status != 200:
            return False
        for t in stats["topics"]:
            if t["topic_name"] not in (V1, NSQ):
                continue
            for ch in t["channels"]:
                if ch["depth"] or ch["in_flight_count"] or ch["deferred_count"]:
                    return False
        return self.metric(node, "tern_ingress_records") == 0

    def drain_and_check(self, c, ledger, traffic, timeout=150):
        traffic.stop_producing()
        log(f"producing stopped: {ledger.acked_count()} acknowledged; draining")
        try:
            wait_until("every acknowledged id received",
                       lambda: not ledger.missing(), timeout, interval=0.5)
        except AssertionError:
            pass  # the missing ids are reported below
        if not ledger.missing():
            # Nothing left anywhere: no message ready, leased, deferred or
            # waiting in an ingress log (what was delivered again after a
            # failed ack is taken and acked meanwhile).
            wait_until("every channel drained to empty on every node",
                       lambda: all(self.empty(n) for n in c.nodes), timeout, interval=0.5)
        traffic.stop()
        summary, dups = ledger.summary()
        log("summary " + json.dumps(summary, sort_keys=True))
        log("traffic " + json.dumps(traffic.counts, sort_keys=True))
        log("acks that failed, by answer: " + json.dumps(traffic.ack_why, sort_keys=True))
        log("consumes that failed, by answer: " +
            json.dumps(traffic.consume_why, sort_keys=True))
        if dups:
            by_kind = {}
            for mid in dups:
                kind = ".".join(mid.split(".")[:2])
                by_kind[kind] = by_kind.get(kind, 0) + dups[mid]
            log("duplicates by topic and door: " + json.dumps(by_kind, sort_keys=True))
            twice_by_kind = {}
            for mid in dups:
                if len(ledger.positions[mid]) > 1:
                    kind = ".".join(mid.split(".")[:2])
                    twice_by_kind[kind] = (twice_by_kind.get(kind, 0) +
                                           len(ledger.positions[mid]) - 1)
            log("stored twice by topic and door: " + json.dumps(twice_by_kind, sort_keys=True))
            twice = sorted(m for m in dups if len(ledger.positions[m]) > 1)
            log("some duplicated ids, with where they were read: " + ", ".join(
                f"{m} {sorted(ledger.positions[m])}" for m in (twice[:12] + sorted(dups)[:4])))
        print(f"ledger: acked={summary['acked']} received={summary['received']} "
              f"duplicates={summary['duplicates']} (stored twice {summary['stored_twice']}, "
              f"redelivered {summary['redelivered']}) missing={summary['missing']} "
              f"corrupt={summary['corrupt']}", flush=True)
        if traffic.refused:
            log(f"{len(traffic.refused)} answers 401 to the admin's credentials, the first: " +
                "; ".join(traffic.refused[:5]))
        self.assertEqual(traffic.crashes, [])
        self.assertEqual(ledger.corrupt, [])
        self.assertEqual(ledger.missing()[:50], [])
        self.assertEqual(traffic.refused[:5], [])
        # After all that, each node still stops cleanly (under make asan:
        # with nothing leaked).
        self.stop_all(c)
        self.assertGreater(summary["acked"], 0)

    def test_sigkill_each_node(self):
        c = self.make(3, args=FAST_DEATH).start()
        wait_until("every member alive", lambda: self.alive(c.nodes[0]) == 3, 60)
        self.ledger = ledger = Ledger()
        owners = self.setup_topics(c, ledger)
        traffic = Traffic(c, ledger, owners)
        traffic.start()
        self.addCleanup(traffic.stop)
        self.flowing(ledger, 400)

        # 1. The metastore leader.
        leader = c.find_leader()
        self.bounce(c, leader, "the metastore leader")
        self.flowing(ledger)

        # 2. Another owner of a partition (every node owns one of each topic).
        owner = [n for n in c.nodes if n is not leader][0]
        self.bounce(c, owner, f"the owner of {V1}/{int(owner.id) - 1}")
        self.flowing(ledger)

        # 3. A node whose ingress log holds records: the owner of a partition
        # is killed first, records pinned to it wait in the taker's log.
        taker = [n for n in c.nodes if n is not leader and n is not owner][0]
        gone = leader
        p = [q for q, o in owners.items() if o == str(gone.id)][0]
        log(f"SIGKILL node {gone.id}, the owner of {V1}/{p}")
        gone.kill()
        wait_until(f"node {taker.id}'s ingress log holding records for {V1}/{p}",
                   lambda: self.pin(taker, p, ledger) and
                   (self.metric(taker, "tern_ingress_records") or 0) > 0, 60)
        held = self.metric(taker, "tern_ingress_records")
        log(f"SIGKILL node {taker.id} with {held:.0f} records in its ingress log")
        taker.kill()
        time.sleep(2)
        taker.start()
        taker.wait_ready(120)
        after = self.metric(taker, "tern_ingress_records")
        log(f"node {taker.id} ready again, {after} records in its ingress log")
        self.assertIsNotNone(after)
        self.assertGreater(after, 0)  # its owner is still down: they wait on its disk
        gone.start()
        gone.wait_ready(120)
        log(f"node {gone.id} ready again")
        self.flowing(ledger)
        self.drain_and_check(c, ledger, traffic)

    def pin(self, node, p, ledger):
        """One produce pinned to partition p through node: True when it was
        acknowledged (202)."""
        mid = ledger.new_id(V1, "pinned", node.id)
        status, _ = node.request("POST", f"/v1/topics/{V1}/produce?partition={p}",
                                 make_body(mid), headers=OCTET)
        if status == 202:
            ledger.ack([mid], "/v1 produce pinned")
        return status == 202

    def test_partition(self):
        ok, why = netns.available()
        if not ok:
            self.skipTest(f"network namespaces unavailable here: {why}")
        net = netns.Net(3)
        self.addCleanup(net.close)
        c = self.make(3, hosts=net.hosts, prefixes=[net.prefix(i) for i in range(3)],
                      tls=True, args=FAST_DEATH).start()
        wait_until("every member alive", lambda: self.alive(c.nodes[0]) == 3, 60)
        self.ledger = ledger = Ledger()
        owners = self.setup_topics(c, ledger)
        traffic = Traffic(c, ledger, owners)
        traffic.start()
        self.addCleanup(traffic.stop)
        self.flowing(ledger, 60)

        # The metastore leader is cut off: the other two elect a new one and
        # go on, while it still takes produces (it cannot tell it is cut off).
        cut = c.find_leader()
        i = c.nodes.index(cut)
        rest = [n for n in c.nodes if n is not cut]
        log(f"isolating node {cut.id}, the metastore leader")
        net.isolate(i)
        healed = False
        try:
            wait_until(f"node {cut.id} marked dead by the others",
                       lambda: self.alive(rest[0]) == 2, 60)
            # Produces sent to the cut-off node from inside its namespace:
            # its own partition's, and others' into its ingress log.
            inside = self.produce_inside(net, i, cut, owners, 40 if SANITIZED else 120)
            ledger.ack(inside["acked"], "/v1 produce inside the cut-off namespace")
            ledger.ack(inside["nsq"], "http /pub inside the cut-off namespace")
            log(f"inside node {cut.id}'s namespace: {len(inside['acked'])} /v1 and "
                f"{len(inside['nsq'])} /pub acknowledged, ingress log "
                f"{inside['ingress']} records")
            self.assertGreater(len(inside["acked"]), 0, inside)
            self.assertGreater(inside["ingress"], 0, inside)
            self.flowing(ledger, 150)
            # SIGKILLed while still cut off, and started again there (it
            # cannot be ready: no leader in reach): what its ingress log
            # holds waits on its disk.
            log(f"SIGKILL node {cut.id} while cut off; started again, still cut off")
            cut.kill()
            time.sleep(1)
            cut.start()
            self.flowing(ledger, 150)
            net.heal(i)
            healed = True
            log(f"node {cut.id} healed")
        finally:
            if not healed:
                net.heal(i)
        wait_until(f"node {cut.id} alive again", lambda: self.alive(rest[0]) == 3, 90)
        cut.wait_ready(120)
        self.flowing(ledger, 60)
        self.drain_and_check(c, ledger, traffic)

    def test_a_waiting_record_holds_up_no_other_partition(self):
        """One record pinned to a dead owner's partition waits in the taker's
        ingress log (docs/cluster.md: "however long it takes"); what the
        taker accepted for a live owner after it must still reach that
        owner meanwhile, also more than the dispatcher's window (4096
        records) of it."""
        c = self.make(3, args=FAST_DEATH).start()
        wait_until("every member alive", lambda: self.alive(c.nodes[0]) == 3, 60)
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "lh", "partitions": 3})
        self.assertEqual(status, 201, body)
        wait_until("lh's owners everywhere",
                   lambda: all(self.owners(n, "lh") == ["1", "2", "3"] for n in c.nodes), 60)
        taker, dead, live = c.nodes
        dead.kill()
        status, body = taker.request("POST", "/v1/topics/lh/produce?partition=1",
                                     make_body("lh.waiting.0"), headers=OCTET)
        self.assertEqual(status, 202, body)
        sent = 0
        # Live and waiting ones interleaved: more waiting records than the
        # window holds too (they are parked and read again later).
        for k in range(6):
            for part, kind in ((2, "live"), (1, "waiting")):
                items = [{"payload": make_body(f"lh.{kind}.{k}.{i}").decode(), "partition": part}
                         for i in range(1000)]
                status, body = taker.request("POST", "/v1/topics/lh/produce/batch", items,
                                             timeout=60)
                self.assertEqual((status, body), (202, {"accepted": 1000}))
            sent += 1000

        def at_live():
            status, body = live.request("GET", "/v1/topics/lh?partition=2")
            return body["partition_stats"][0].get("next_offset") if status == 200 else None
        try:
            wait_until(f"the {sent} records for partition 2 at its owner, node {live.id}, "
                       f"while node {dead.id} is down",
                       lambda: at_live() == sent, 60, interval=0.5)
        finally:
            log(f"partition 2 at node {live.id}: {at_live()} of {sent}; node {taker.id}'s "
                f"ingress log {self.metric(taker, 'tern_ingress_records')} records")
        dead.start()
        dead.wait_ready(120)
        wait_until(f"node {taker.id}'s ingress log empty",
                   lambda: self.metric(taker, "tern_ingress_records") == 0, 60)
        # Every waiting record reached its owner once it was back, each
        # once (no crash of the taker: no duplicate).
        stored, offset = [], 0
        while True:
            status, m = dead.request("GET", f"/v1/topics/lh/consume?partition=1&offset={offset}")
            if status == 204:
                break
            self.assertEqual(status, 200, m)
            stored.append(m["payload"])
            offset = m["offset"] + 1
        ids = [check_body(p) for p in stored]
        want = {"lh.waiting.0"} | {f"lh.waiting.{k}.{i}" for k in range(6) for i in range(1000)}
        self.assertNotIn(None, ids, "a corrupt body")
        missing = want - set(ids)
        self.assertEqual((len(missing), len(ids) - len(set(ids)), len(ids)), (0, 0, len(want)),
                         f"missing e.g. {sorted(missing)[:3]}")
        # In the order they were accepted: the first waiting one first, then
        # each batch's in its order.
        order = ["lh.waiting.0"] + [f"lh.waiting.{k}.{i}" for k in range(6) for i in range(1000)]
        wrong = next((o for o, (a, b) in enumerate(zip(ids, order)) if a != b), None)
        self.assertIsNone(wrong, f"offset {wrong} holds {ids[wrong] if wrong is not None else ''}"
                                 f", not {order[wrong] if wrong is not None else ''}")

    def produce_inside(self, net, i, node, owners, count):
        """count produces to node from a client inside its namespace
        (this file's --inside mode); what it acknowledged."""
        mine = [p for p, o in owners.items() if o == str(node.id)][0]
        others = [p for p in owners if p != mine]
        cmd = [*net.prefix(i), sys.executable, os.path.abspath(__file__), "--inside",
               f"{node.host}:{node.http_port}", "--node-id", str(node.id), "--count", str(count),
               "--own", str(mine), "--others", ",".join(map(str, others))]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout.strip().splitlines()[-1])


def inside(address, node_id, count, own, others):
    """The client run inside a cut-off node's namespace: count /v1 produces
    (pinned to each other partition, pinned to its own, keyed, unpinned)
    and an NSQ /pub every fourth; prints one JSON line: the acknowledged
    ids and the node's tern_ingress_records afterwards."""
    host, port = address.rsplit(":", 1)
    port = int(port)
    tag = os.urandom(4).hex()  # ids unique across several runs of this client
    acked, nsq = [], []
    modes = itertools.cycle([f"partition={p}" for p in others] +
                            [f"partition={own}", "key=inside", ""])
    for k in range(count):
        mode = next(modes)
        mid = f"{V1}.inside.n{node_id}.{tag}.{k}"
        status, _ = http_call(host, port, "POST",
                              f"/v1/topics/{V1}/produce" + (f"?{mode}" if mode else ""),
                              make_body(mid), headers=OCTET)
        if status == 202:
            acked.append(mid)
        if k % 4 == 0:
            mid = f"{NSQ}.inside.n{node_id}.{tag}.{k}"
            status, answer = http_call(host, port, "POST", f"/pub?topic={NSQ}", make_body(mid),
                                       auth=False)
            if status == 200 and answer == b"OK":
                nsq.append(mid)
    ingress = None
    status, text = http_call(host, port, "GET", "/metrics")
    if status == 200:
        for line in text.decode().splitlines():
            if line.startswith("tern_ingress_records "):
                ingress = float(line.split()[-1])
    print(json.dumps({"acked": acked, "nsq": nsq, "ingress": ingress}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd")
    ap.add_argument("--inside")
    ap.add_argument("--node-id")
    ap.add_argument("--count", type=int)
    ap.add_argument("--own", type=int)
    ap.add_argument("--others")
    args, rest = ap.parse_known_args()
    if args.inside:
        inside(args.inside, args.node_id, args.count, args.own,
               [int(p) for p in args.others.split(",")])
        return
    harness.set_ternd(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
