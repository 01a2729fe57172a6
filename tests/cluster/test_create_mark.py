"""A publish through another node while a /v1 creation is taken back.

Node 1 takes POST /v1/topics for "doomed"; its record commits, and then
its making fails (TERN_TEST_V1_CREATE_FAIL: UV_EIO three seconds after
the record, as a full disk or the descriptor limit would), so node 1
takes the record back (a TOPIC_DELETE, then the purge) before its 500.
Within those seconds every node sees the record. Node 2 gets an NSQ
/pub to the topic and node 3 a /v1 produce.

Before the creation mark both were answered OK at once (node 2's /pub
from its own partition of the topic, node 3's produce into the ingress
log) and their messages went with the topic: acknowledged, then lost.
Now the record is marked as being created until its creator makes its
part (TOPIC_READY), and every produce path holds publishes to a marked
topic: the /pub waits for the outcome, then (the topic gone) records
the topic anew as an NSQ publish does, and is answered OK with its
message kept; the /v1 produce answers 404 (or 503 to retry), or goes
into the topic the /pub recorded anew, never an OK for a message that
goes.

And a creation that succeeds clears its mark before its 201: a produce
through another node right after it is taken at once. A take-back that
reaches the metastore after the name was deleted and made again through
another node leaves the topic made again (its TOPIC_DELETE names the
record's creation time).

Run: python3 tests/cluster/test_create_mark.py --ternd build/ternd-test
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
FAIL_AFTER_MS = 3000
# How late a take-back reaches the metastore in
# test_a_take_back_leaves_the_topic_made_again_meanwhile: room for a
# delete, a create and a produce through the other nodes before it.
TAKE_BACK_DELAY_MS = 10000


def in_thread(fn):
    """Run fn in a thread: a dict that gets its result, start and end."""
    out = {"start": time.monotonic()}

    def run():
        try:
            out["result"] = fn()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out["result"] = (None, repr(e))
        out["end"] = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    out["thread"] = t
    return out


class CreateMark(harness.ClusterTest):
    node_args = ["--default-replication-factor=1"]

    def three(self, **hooks):
        """Three nodes up, node 1 with the test hooks given (env); the
        NSQ door may publish to a /v1 topic (security off)."""
        c = self.make(3, security=False)
        n1, n2, n3 = c.nodes
        n1.start(env=dict(c.env(), **hooks))
        n2.start()
        n3.start()
        c.wait_ready()
        c.wait_alive(3)
        return c

    def messages(self, node, topic):
        """The messages node's GET /v1/topics/{topic} counts over its
        partitions (None: no such topic, or a partition not answering)."""
        st, body = node.request("GET", f"/v1/topics/{topic}")
        if st != 200:
            return None
        if any("message_count" not in p for p in body["partition_stats"]):
            return None
        return sum(p["message_count"] for p in body["partition_stats"])

    def produce_accepted(self, node, topic):
        """A /v1 produce to topic through node is accepted within 15 s
        (each held up to 5 s while the topic is marked); the statuses of
        the tries are shown."""
        tries = []

        def produced():
            st, _ = node.request("POST", f"/v1/topics/{topic}/produce", b"after the 503",
                                 headers=OCTET, timeout=10)
            tries.append(st)
            return st == 202
        try:
            wait_until(f"a produce to {topic} accepted", produced, 15)
        finally:
            sys.stderr.write(f"[create_mark] {topic} produces: {tries}\n")

    def test_a_publish_elsewhere_during_a_taken_back_creation_is_not_lost(self):
        c = self.three(TERN_TEST_V1_CREATE_FAIL=f"doomed={FAIL_AFTER_MS}")
        n1, n2, n3 = c.nodes

        # A creation that succeeds: ready before its 201, so a produce
        # through another node at once is taken at once.
        st, body = n1.request("POST", "/v1/topics", {"name": "fine", "partitions": 3})
        self.assertEqual(st, 201, body)
        t0 = time.monotonic()
        st, body = n2.request("POST", "/v1/topics/fine/produce", b"at once", headers=OCTET)
        self.assertEqual(st, 202, body)
        self.assertLess(time.monotonic() - t0, 2.0, "a produce to a ready topic was held")

        create = in_thread(lambda: n1.request(
            "POST", "/v1/topics", {"name": "doomed", "partitions": 3}, timeout=60))
        for node in (n2, n3):
            wait_until(f"node {node.id} sees the record", lambda n=node: n.request(
                "GET", "/v1/topics/doomed")[0] == 200, 10)
        seen = time.monotonic()
        self.assertLess(seen - create["start"], FAIL_AFTER_MS / 1000 - 0.5,
                        "the record reached the other nodes too late for the test")
        pub = in_thread(lambda: n2.nsq_http("POST", "/pub?topic=doomed", b"nsq message",
                                            timeout=60))
        produce = in_thread(lambda: n3.request("POST", "/v1/topics/doomed/produce",
                                               b"v1 message", headers=OCTET, timeout=60))
        for t in (create, pub, produce):
            t["thread"].join(60)
        fail_at = create["start"] + FAIL_AFTER_MS / 1000
        cst, cbody = create["result"]
        self.assertEqual(cst, 500, cbody)
        self.assertIn("create failed", cbody["error"], cbody)
        pst, pbody = pub["result"]
        vst, vbody = produce["result"]
        sys.stderr.write(f"[create_mark] create {cst} after {create['end'] - create['start']:.2f}s; "
                         f"/pub on node 2: {pst} {pbody!r} after {pub['end'] - pub['start']:.2f}s "
                         f"(the failure {fail_at - pub['start']:.2f}s after it was sent); "
                         f"/v1 produce on node 3: {vst} {vbody!r} after "
                         f"{produce['end'] - produce['start']:.2f}s\n")
        acked = (1 if pst == 200 else 0) + (1 if vst == 202 else 0)
        # Whatever was answered OK is kept: the NSQ publish re-created the
        # topic once the record was taken back.
        if acked > 0:
            def kept():
                counts = [self.messages(node, "doomed") for node in c.nodes]
                return counts if all(n is not None and n >= acked for n in counts) else None
            try:
                wait_until("the acknowledged messages kept", kept, 15)
            except AssertionError:
                self.fail(f"{acked} acknowledged message(s) lost: /pub {pst} {pbody!r}, "
                          f"/v1 produce {vst} {vbody!r}; topic now: "
                          f"{[n.request('GET', '/v1/topics/doomed')[:1] for n in c.nodes]}")
        # Neither was answered OK before the creation's outcome.
        if pst == 200:
            self.assertGreater(pub["end"], fail_at - 0.2, "the /pub was answered OK before the "
                               "creation's outcome")
        if vst == 202:
            self.assertGreater(produce["end"], fail_at - 0.2, "the /v1 produce was answered OK "
                               "before the creation's outcome")
        # The /v1 produce finds the topic gone (404), or, when node 2's
        # /pub recorded it anew before node 3 looked again, goes into that
        # one (202, its message kept: checked above), as a produce sent a
        # moment later would.
        self.assertIn(vst, (202, 404, 503), vbody)
        self.assertEqual(pst, 200, pbody)
        # Nothing left held: every node stops cleanly (a sanitized build
        # says so in its exit status).
        self.stop_all(c)

    def test_a_mark_the_metastore_did_not_clear_goes_without_a_restart(self):
        """TOPIC_READY (and a failed creation's take-back) not committed at
        first: the creator answers, then proposes it again by itself.

        TERN_TEST_V1_FINISH_FAIL fails the first of each on node 1 as a
        metastore without a leader past the write's budget would. Before
        the creator retried, the mark stood for as long as node 1 ran:
        every publish to "late-ready" refused (503 after 5 s held), and
        "late-undo" listed for good, its publishes refused alike."""
        c = self.three(TERN_TEST_V1_FINISH_FAIL="late", TERN_TEST_V1_CREATE_FAIL="late-undo=0")
        n1, n2, n3 = c.nodes

        st, body = n1.request("POST", "/v1/topics", {"name": "late-ready", "partitions": 3})
        sys.stderr.write(f"[create_mark] late-ready create: {st} {body!r}\n")
        self.assertEqual(st, 503, body)
        ready_error = body["error"]
        self.produce_accepted(n2, "late-ready")
        wait_until("late-ready's message counted", lambda: self.messages(n2, "late-ready") == 1,
                   10)
        self.assertIn("not recorded ready yet", ready_error)

        st, body = n1.request("POST", "/v1/topics", {"name": "late-undo", "partitions": 3})
        sys.stderr.write(f"[create_mark] late-undo create: {st} {body!r}\n")
        self.assertEqual(st, 500, body)
        undo_error = body["error"]
        for node in c.nodes:
            wait_until(f"late-undo gone on node {node.id}", lambda n=node: n.request(
                "GET", "/v1/topics/late-undo")[0] == 404, 15)
        self.assertIn("taken back once the metastore answers", undo_error)
        # Gone: created again (once node 2's engine let go of the old one:
        # 409 until then), it is an ordinary topic.
        def created():
            st, body = n2.request("POST", "/v1/topics", {"name": "late-undo", "partitions": 3})
            self.assertIn(st, (201, 409), body)
            return st == 201
        wait_until("late-undo created again", created, 10)
        st, body = n3.request("POST", "/v1/topics/late-undo/produce", b"m", headers=OCTET)
        self.assertEqual(st, 202, body)
        self.stop_all(c)

    def test_a_node_stops_while_a_creation_is_still_finishing(self):
        """Its TOPIC_READY never committed (TERN_TEST_V1_FINISH_FAIL fails
        them all): the topic stays marked, proposed again every second,
        and the node still stops cleanly (a sanitized build's exit status
        says nothing leaked)."""
        c = self.three(TERN_TEST_V1_FINISH_FAIL="never=1000000")
        n1, n2, n3 = c.nodes
        st, body = n1.request("POST", "/v1/topics", {"name": "never", "partitions": 3})
        self.assertEqual(st, 503, body)
        st, body = n2.request("GET", "/v1/topics/never")
        self.assertEqual(st, 200, body)
        wait_until("a retry of its TOPIC_READY", lambda: "topic never: its record still could "
                   "not be marked ready" in n1.log(), 10)
        self.stop_all(c)

    def test_a_record_committed_after_its_creator_gave_up_is_finished(self):
        """The record's proposal answered UV_ETIMEDOUT (the creator's
        budget passed) though a leader committed it
        (TERN_TEST_V1_CREATE_LOST): the client got its 503, and the
        record stands marked by a creator that is still up. Before, every
        publish to it was refused until node 1 restarted; now node 1
        finishes the creation (its part, the default channel, the mark
        cleared) once it sees the record."""
        c = self.three(TERN_TEST_V1_CREATE_LOST="lost")
        n1, n2, n3 = c.nodes
        st, body = n1.request("POST", "/v1/topics", {"name": "lost", "partitions": 3})
        sys.stderr.write(f"[create_mark] lost create: {st} {body!r}\n")
        self.assertEqual(st, 503, body)
        self.produce_accepted(n3, "lost")
        wait_until("lost's default channel", lambda: "default" in [
            ch["name"] if isinstance(ch, dict) else ch
            for ch in (n2.request("GET", "/v1/topics/lost")[1] or {}).get("channels", [])], 10)
        self.stop_all(c)

    def test_a_take_back_leaves_the_topic_made_again_meanwhile(self):
        """Node 1's creation of "redo" fails after its record (UV_EIO, at
        once), and node 1 checks that the record is still its creation's
        and proposes the take-back, which reaches the metastore late
        (TERN_TEST_V1_TAKE_BACK_DELAY, as a slow way to the leader would).
        Meanwhile another client deletes "redo" through node 2, makes it
        again there (or finds it made again) and publishes to it through
        node 3 (202). Before the
        take-back named the record's creation time, its TOPIC_DELETE
        deleted that new topic and its acknowledged message; now the
        metastore refuses it (the record was made at another time) and the
        new topic stays, its message with it."""
        c = self.three(TERN_TEST_V1_CREATE_FAIL="redo=0",
                       TERN_TEST_V1_TAKE_BACK_DELAY=f"redo={TAKE_BACK_DELAY_MS}")
        n1, n2, n3 = c.nodes
        create = in_thread(lambda: n1.request(
            "POST", "/v1/topics", {"name": "redo", "partitions": 3}, timeout=60))
        # The failure is logged right before the check and the delayed
        # proposal, in the same turn of node 1's loop.
        wait_until("node 1's creation of redo failed", lambda: "topic redo: creating it in the "
                   "queue engine failed" in n1.log(), 10)
        st, body = n2.request("GET", "/v1/topics/redo")
        self.assertEqual(st, 200, body)
        # created_at is in seconds: the one made again is told apart by
        # its settings instead.
        first = (body["partitions"], body["visibility_timeout_ms"])
        st, body = n2.request("DELETE", "/v1/topics/redo", timeout=30)
        self.assertEqual(st, 204, f"{body!r} (a 404: the take-back came first, so the hook's "
                         f"delay of {TAKE_BACK_DELAY_MS} ms is too short here)")

        # Made again through node 2 (201), or already by node 1's engine,
        # whose own making of the first record went on through the NSQ
        # doors' gate as the record went (a 409 for a record made at
        # another time): either is a topic the take-back must leave.
        def made_again():
            st, body = n2.request("POST", "/v1/topics", {"name": "redo", "partitions": 2})
            self.assertIn(st, (201, 409), body)
            st, body = n2.request("GET", "/v1/topics/redo")
            return st == 200 and (body["partitions"], body["visibility_timeout_ms"]) != first
        wait_until("redo made again", made_again, 10)
        # A partition whose owner is still making the topic answers 503:
        # the produce tries until one is taken.
        self.produce_accepted(n3, "redo")
        self.assertFalse("result" in create, "node 1's creation answered before the produce was "
                         "taken: the hook's delay is too short here")

        create["thread"].join(60)
        cst, cbody = create["result"]
        sys.stderr.write(f"[create_mark] redo: node 1's create {cst} {cbody!r}\n")
        self.assertEqual(cst, 500, cbody)
        self.assertIn("create failed", cbody["error"], cbody)

        def kept():
            counts = [self.messages(node, "redo") for node in c.nodes]
            return counts if all(n is not None and n >= 1 for n in counts) else None
        try:
            wait_until("redo and its message kept on every node", kept, 15)
        except AssertionError:
            self.fail("the take-back deleted the topic made again, and its acknowledged "
                      "message: now "
                      f"{[(n.request('GET', '/v1/topics/redo')[0], self.messages(n, 'redo')) for n in c.nodes]}")
        self.assertIn("topic redo: the record of its refused creation was deleted and made again "
                      "meanwhile", n1.log())
        self.stop_all(c)


if __name__ == "__main__":
    harness.main()
