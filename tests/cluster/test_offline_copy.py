#!/usr/bin/env python3
"""A replicated partition with no leader (offline) is served by no node,
whatever copy a node finds on disk at its start (docs/replication.md):
consumers see only records below the high watermark of the partition's
leader.

Five nodes (the metastore keeps a quorum with three down), a topic `oc` of
one partition, factor 2, min-insync 1: replicas A and B, A leading; five
messages acknowledged (both copies hold them). A stops: B leads, A out of
the ISR. B takes two more messages, then stops: the partition is offline (no eligible member). A starts
again: its copy, out of the ISR, may not lead, and a consume through A
finds nothing.

Before, the engine opened A's copy from disk at the start and kept it: the
placement left a partition whose owner is 0 (no leader) where it was, so a
consume through A was answered the five messages from A's stale copy
(which B, once back, delivers again). Now a replicated partition not led
here goes remote in the engine, leader or none.

Also: a stale copy is not served at start, before the metastore replica
caught up (test_moved_copy_not_served_before_the_metastore), and a publish
through its node is not acknowledged into it then
(test_publish_to_a_moved_copy_not_acknowledged_before_the_metastore).

Run: python3 tests/cluster/test_offline_copy.py --ternd build/ternd-test --ternctl build/ternctl
"""
import http.client
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import harness
import test_repl_restore as rr
from harness import ClusterTest, wait_until
from nsqwire import (FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Closed,  # noqa: E402  (tests/e2e)
                     Conn)

OCTET = {"Content-Type": "application/octet-stream"}
CLIENT = {"X-Tern-Client": "test-offline-copy"}
CATCHING_UP = "this node is still catching up with the cluster's placement; retry"
E_CATCHING_UP = b"E_PUB_FAILED " + CATCHING_UP.encode()


class OfflineCopyTest(ClusterTest):
    node_args = ["--replica-lag-time-max=2s", "--member-session-timeout=3s"]

    def pstate(self, node, topic="oc"):
        status, body = node.request("GET", f"/v1/topics/{topic}", timeout=5)
        if status != 200 or "partition_stats" not in body:
            return None
        return body["partition_stats"][0]

    def cluster_with(self, n, topic, factor, **kw):
        """n nodes started (make's kw), topic of one partition made (factor,
        min-insync 1)."""
        c = self.make(n, **kw).start()
        c.wait_alive(n)
        st, body = c.nodes[0].request("POST", "/v1/topics", {
            "name": topic, "partitions": 1, "replication_factor": factor,
            "min_insync_replicas": 1})
        self.assertEqual(st, 201, body)
        return c, c.nodes[0]

    def test_offline_partition_not_served_from_a_stale_copy(self):
        c, first = self.cluster_with(5, "oc", 2)
        s = wait_until("oc/0 led with two in-sync replicas", lambda: (
            (s := self.pstate(first)) and s.get("leader") and len(s.get("isr", [])) == 2
            and s))
        node = {str(n.id): n for n in c.nodes}
        a = str(s["leader"])
        b = [str(r) for r in s["replicas"] if str(r) != a][0]
        other = [n for n in c.nodes if str(n.id) not in (a, b)][0]
        for i in range(5):
            st, body = node[a].request("POST", "/v1/topics/oc/produce?partition=0",
                                       f"m-{i}".encode(), headers=OCTET)
            self.assertEqual(st, 202, body)
        wait_until("both copies hold the five", lambda: (
            (s := self.pstate(other)) and len(s.get("isr", [])) == 2))
        node[a].stop()
        wait_until(f"oc/0 led by {b}, {a} out of the ISR", lambda: (
            (s := self.pstate(other)) and str(s.get("leader")) == b
            and [str(r) for r in s.get("isr", [])] == [b]), 60)
        # B takes two more A's copy lacks.
        for i in range(2):
            st, body = node[b].request("POST", "/v1/topics/oc/produce?partition=0",
                                       f"after-{i}".encode(), headers=OCTET)
            self.assertEqual(st, 202, body)
        node[b].stop()
        wait_until("oc/0 offline", lambda: (
            (s := self.pstate(other)) and not s.get("leader")), 60)
        node[a].start()
        self.check_not_served(node[a], a)
        # Again with the old leader's hold off (TERN_TEST_HANDFENCE_OFF bit
        # 1, ternd-test): the gate of a recovered log alone (hw 0 until a
        # leader here sets it, replica.c gate_recovered), as for a copy
        # the metastore no longer lists (no replica here to hold it).
        self.assertEqual(node[a].stop(), 0, node[a].log()[-4000:])
        node[a].start(env=dict(c.env(), TERN_TEST_HANDFENCE_OFF="2"))
        self.check_not_served(node[a], a)
        self.stop_all_running(c)

    def test_offline_partition_not_served_from_a_copy_restored_with_rejoin(self):
        """Three nodes, a factor-1 topic `sr`: its partition on A holds five
        acknowledged messages when a backup is taken (A's copy: a factor-1
        log, no epoch history). The partition moves to B, then B stops: it
        is offline, B its only replica. A is restored from the backup with
        `--rejoin` and started: its copy of the partition, which the
        metastore no longer lists on A, is not served (before: a consume
        through A was answered the five messages, from a copy no replica
        holds, ungated (no epoch history), held by no replica here, and
        kept in the engine as the placement's owner, no leader, is 0)."""
        c, node, a, b, cc, bdir = self.backed_up_then_moved("sr")
        self.assertEqual(node[b].stop(), 0, node[b].log()[-4000:])
        wait_until("sr/0 offline", lambda: (
            (s := self.pstate(node[cc], "sr")) and s.get("offline") and not s.get("leader")), 60)
        self.assertEqual(node[a].stop(), 0, node[a].log()[-4000:])
        self.restore_rejoin(node[a], a, bdir)
        self.check_not_served(node[a], a, "sr")
        # Set aside in the engine, the copy goes to quarantine/ at once.
        qdir = os.path.join(node[a].data, "quarantine")
        wait_until(f"{a}'s copy of sr/0 in quarantine/", lambda: os.path.isdir(qdir) and any(
            e.startswith("sr.0.") for e in os.listdir(qdir)), 30)
        self.stop_all_running(c)

    def test_moved_copy_not_served_before_the_metastore(self):
        """At start, before the catalog followed the placement: three nodes,
        a factor-1 topic `mv` on A with a channel `c` and five messages when
        a backup is taken; the partition moves to B. Every node stops, A is
        restored from the backup with `--rejoin` and started alone (its
        metastore replica cannot catch up: no quorum). An NSQ consumer of
        `c` through A's TCP door, its SUB accepted, gets nothing: A's copy
        is stale (B owns the partition) and A does not know yet whose it is
        (before: the engine served the copy it recovered, the five
        messages, from its start until the catalog first followed the
        placement). Security off, so that A alone takes an anonymous SUB
        (with it on, A cannot judge yet whether mv is protected and refuses
        the SUB, which reads nothing whatever A would serve)."""
        c, node, a, b, cc, bdir = self.backed_up_then_moved("mv", channel="c", security=False)
        self.stop_all_running(c)
        self.restore_rejoin(node[a], a, bdir)
        self.assertEqual(self.nsq_consumed(node[a], "mv", "c", subbed=True), [],
                         f"{a} served its stale copy of mv/0 before the metastore")
        # The others back: A follows the placement (mv/0 is B's), and
        # serves no copy of it.
        node[b].start()
        node[cc].start()
        c.wait_ready()
        wait_until(f"{a} knows mv/0 on {b}", lambda: (
            (s := self.pstate(node[a], "mv")) and str(s.get("leader")) == b), 60)
        # The SUB accepted there too; the same consumer through B, mv/0's
        # owner, reads the five.
        self.assertEqual(self.nsq_consumed(node[a], "mv", "c", subbed=True), [],
                         f"{a} served its stale copy of mv/0 once back with the others")
        self.assertEqual(sorted(self.nsq_consumed(node[b], "mv", "c", subbed=True)),
                         [f"m-{i}".encode() for i in range(5)])
        self.stop_all_running(c)

    def test_publish_to_a_moved_copy_not_acknowledged_before_the_metastore(self):
        """As above (security off, so that the NSQ doors may publish to the
        /v1 topic `mw`): A restored with `--rejoin` from the backup taken
        before mw/0 moved to B, started alone, its metastore replica unable
        to catch up. A publish through A's doors (NSQ TCP PUB and MPUB,
        nsqd HTTP /pub and /mpub, /v1 produce) is never answered OK unless
        its message is then readable from B, mw/0's owner: held, then
        refused as a retryable `E_PUB_FAILED` / 503 with `Retry-After: 1`
        while A still does not know whose mw/0 is. Publishes through A
        while B and C come back either fail that way or reach B; once A is
        ready they reach B. Before: A's NSQ doors answered OK at once,
        their messages appended to A's stale copy, which went to
        quarantine/ once A followed the placement: acknowledged, then
        lost to every consumer."""
        c, node, a, b, cc, bdir = self.backed_up_then_moved("mw", channel="c", security=False)
        self.stop_all_running(c)
        self.restore_rejoin(node[a], a, bdir)
        info = wait_until(f"{a}'s /info", lambda: (
            (x := node[a].request("GET", "/info", timeout=5))[0] == 200 and x[1]), 60)
        acked = []  # the bodies A answered OK
        alone = []  # A alone: (door, its answer), checked once the others are back

        # A alone: every door's publish waits, then is refused to retry.
        conn = Conn(info["tcp_port"], host=node[a].host, timeout=30)
        try:
            conn.identify()
            for door, send, bodies in [
                    ("PUB", lambda: conn.pub("mw", b"tcp-0"), [b"tcp-0"]),
                    ("MPUB", lambda: conn.mpub("mw", [b"tcp-1", b"tcp-2"]), [b"tcp-1", b"tcp-2"])]:
                kind, data = send()
                if kind != FRAME_ERROR:
                    acked += bodies
                alone.append((door, (kind, data), (FRAME_ERROR, E_CATCHING_UP)))
        finally:
            conn.close()
        for path, body, bodies in [("/pub?topic=mw", b"http-0", [b"http-0"]),
                                   ("/mpub?topic=mw", b"http-1\nhttp-2", [b"http-1", b"http-2"])]:
            st, headers, data = self.raw_post(node[a], path, body)
            if st == 200:
                acked += bodies
            alone.append((path, (st, headers.get("Retry-After"), CATCHING_UP.encode() in data,
                                 data), (503, "1", True, data)))
        st, body = node[a].request("POST", "/v1/topics/mw/produce?partition=0", b"v1-0",
                                   headers=OCTET, timeout=30)
        if st == 202:
            acked.append(b"v1-0")
        alone.append(("/v1 produce", (st, body), (503, body)))

        # B and C come back while a publisher keeps publishing through A's
        # TCP door: each answer is OK (then its message reaches B) or the
        # retryable refusal.
        stop = threading.Event()
        refused = []

        def publish():
            pc = Conn(info["tcp_port"], host=node[a].host, timeout=30)
            try:
                pc.identify()
                i = 0
                while not stop.is_set():
                    m = f"during-{i}".encode()
                    kind, data = pc.pub("mw", m)
                    if kind == FRAME_ERROR:
                        refused.append(data)
                    else:
                        acked.append(m)
                    i += 1
                    stop.wait(0.2)  # a few publishes a second, not a flood
            finally:
                pc.close()
        t = threading.Thread(target=publish, daemon=True)
        t.start()
        try:
            node[b].start()
            node[cc].start()
            c.wait_ready()
            wait_until(f"{a} knows mw/0 on {b}", lambda: (
                (s := self.pstate(node[a], "mw")) and str(s.get("leader")) == b), 60)
        finally:
            stop.set()
            t.join(60)
        self.assertEqual([r for r in refused if r != E_CATCHING_UP], [])
        st, body = node[a].request("POST", "/v1/topics/mw/produce?partition=0", b"v1-after",
                                   headers=OCTET, timeout=30)
        self.assertEqual(st, 202, body)
        acked.append(b"v1-after")
        sys.stderr.write(f"[offline_copy] acknowledged through {a}: {acked}; "
                         f"refused while B and C came back: {len(refused)}\n")
        # Everything acknowledged is on B (with the five of the backup).
        want = sorted([f"m-{i}".encode() for i in range(5)] + acked)
        got = []

        def all_on_b():
            got[:] = self.nsq_consumed(node[b], "mw", "c", rdy=200)
            return sorted(got) == want
        try:
            wait_until(f"what {a} acknowledged readable from {b}", all_on_b, 60)
        except AssertionError:
            self.fail(f"acknowledged through {a} and not on {b}: "
                      f"{sorted(set(want) - set(got))}; on {b}: {sorted(got)}")
        # What A answered alone: the retryable refusal, the connection kept.
        for door, answer, refusal in alone:
            self.assertEqual(answer, refusal, f"{door} through {a}, alone")
        self.stop_all_running(c)

    def raw_post(self, n, path, body):
        """POST body to n's path without credentials: (status, headers,
        raw body)."""
        conn = http.client.HTTPConnection(n.host, n.http_port, timeout=30)
        try:
            conn.request("POST", path, body=body)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def nsq_consumed(self, n, topic, channel, rdy=10, subbed=False):
        """What an NSQ consumer (RDY rdy) of channel through n's TCP door
        gets until 5 s of quiet or a close, once n answers /info (before
        /readyz): the messages' bodies. With subbed, its SUB must be
        accepted."""
        info = wait_until(f"{n.id}'s /info", lambda: (
            (x := n.request("GET", "/info", timeout=5))[0] == 200 and x[1]), 60)
        conn = Conn(info["tcp_port"], host=n.host, timeout=5)
        got = []
        try:
            conn.identify()
            # With security on, a node that cannot judge yet whether the
            # topic is protected holds the SUB up to 5 s, then refuses it
            # (E_SUB_FAILED, connection kept): nothing is consumed.
            conn.sock.settimeout(15)
            answer = conn.sub(topic, channel)
            if subbed:
                self.assertEqual(answer, (FRAME_RESPONSE, b"OK"))
            conn.sock.settimeout(5)
            conn.rdy(rdy)
            try:
                while True:
                    kind, data = conn.read_frame()
                    if kind == FRAME_MESSAGE:
                        got.append(data[26:])
            except (socket.timeout, TimeoutError, Closed):
                pass  # quiet, or closed (a topic not served here)
        finally:
            conn.close()
        return got

    def backed_up_then_moved(self, topic, channel=None, **kw):
        """Three nodes (make's kw), a factor-1 topic (with channel, made
        through A's nsqd endpoint, when given) whose partition on A (its
        owner) holds five acknowledged messages when a backup is taken; the
        partition then moved to B. (cluster, nodes by id, a, b, the third,
        backup)."""
        c, first = self.cluster_with(3, topic, 1, **kw)
        wait_until(f"an owner of {topic}/0", lambda: all(
            (o := n.owners(topic)) and o[0] != "0" for n in c.nodes))
        node = {str(n.id): n for n in c.nodes}
        a = str(first.owners(topic)[0])
        b, cc = [str(n.id) for n in c.nodes if str(n.id) != a]
        if channel is not None:
            st, body = node[a].request("POST", f"/channel/create?topic={topic}&channel={channel}",
                                       headers=CLIENT)
            self.assertEqual(st, 200, body)
        for i in range(5):
            st, body = node[a].request("POST", f"/v1/topics/{topic}/produce?partition=0",
                                       f"m-{i}".encode(), headers=OCTET)
            self.assertEqual(st, 202, body)
        bdir = os.path.join(c.dir, "backup")
        r = rr.ternctl("backup", bdir, port=node[cc].http_port)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        st, body = node[cc].request("PATCH", f"/v1/topics/{topic}/partitions/0", {"replicas": [b]})
        self.assertEqual(st, 202, body)
        wait_until(f"{topic}/0 moved to {b}", lambda: all(
            (s := self.pstate(n, topic)) and [str(r) for r in s.get("replicas", [])] == [b]
            and str(s.get("leader")) == b for n in c.nodes), 90)
        return c, node, a, b, cc, bdir

    def restore_rejoin(self, n, a, bdir):
        """Node n (id a), stopped, restored from bdir with --rejoin and started."""
        os.rename(n.data, n.data + ".old")
        r = rr.ternctl("restore", bdir, "--data-path", n.data, "--node", a, "--rejoin")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        n.start()

    def check_not_served(self, n, a, topic="oc"):
        n.wait_ready()
        # Offline, A not eligible (not a replica, or out of the ISR and ELR).
        wait_until(f"{a} knows {topic}/0 offline, itself not eligible", lambda: (
            (s := self.pstate(n, topic)) and s.get("offline") and not s.get("leader")
            and a not in [str(r) for r in s.get("isr", []) + s.get("elr", [])]), 60)
        for _ in range(3):
            st, body = n.request("GET", f"/v1/topics/{topic}/consume?max=100&wait=1s",
                                 headers=CLIENT, timeout=30)
            self.assertNotEqual(st, 200, f"served by {a}, not a leader: {body}")
            self.assertEqual(st, 204, body)

    def stop_all_running(self, c):
        """The nodes still running stopped, each exiting 0; no node's log
        names a sanitizer's runtime error."""
        codes = {n.id: n.stop() for n in c.nodes if n.running()}
        self.assertEqual(set(codes.values()), {0}, codes)
        self.assertEqual([n.id for n in c.nodes if "runtime error" in n.log()], [])


def configure(args):
    rr.TERNCTL = os.path.abspath(args.ternctl)


if __name__ == "__main__":
    harness.main(options=[("--ternctl", {"required": True})], configure=configure)
