"""Readiness through a follower's short lag (tests/cluster/harness.py).

A follower learns that an entry is committed as soon as a majority (the
leader and the other follower) stored it, which may be before its own
disk has: under a burst of changes, or on a slow disk, it is behind for
the time of a write, every time. That is not a reason to leave
readiness: a load balancer would take the node out at every topic
created. A lag that lasts is (docs/http-api.md, /readyz).

Each node runs ternd-test with TERN_TEST_META_APPEND_DELAY_FILE: while
its file exists, libraft learns of each metastore log append the file's
milliseconds after it is stored (src/meta/meta.c, slow_append). The
test gives one follower 400 ms and creates topics through the leader
while a thread polls that follower's /readyz: every answer is 200, and
each topic reached its replica at least 350 ms after the create was
sent. Then 3000 ms: the follower leaves readiness (503) while it is
behind by more than 2 s, and comes back once it caught up.

A destructive action sent to a follower that is behind (here: out of
readiness, 3000 ms per append, so it knows it is) does not answer 503 at
once: the follower confirms with the leader that it is current
(api/v1/common.c, tn__v1_caught_up) and then serves it. A topic
DELETE through it is 204, answered only once the topic created before it
reached its replica; every node drops the topic. A user's DELETE
through it, while it is behind again, is 204 too, and nsqd's
/topic/delete 200. When the confirmation
cannot come within the request's 10 s (11000 ms per append), the answer
is 503 with Retry-After, and the topic stays.

Run: python3 tests/cluster/test_ready_lag.py --ternd build/ternd-test
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

SHORT_MS = 400
LONG_MS = 3000
TOPICS = 5


class Poller:
    """Polls a node's /readyz from a thread, keeping every answer (when
    it came, its status)."""

    def statuses(self):
        return [s for _, s in self.answers]

    def __init__(self, node):
        self.node = node
        self.answers = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        while not self.stop.is_set():
            status = self.node.readyz()
            self.answers.append((time.monotonic(), status))
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


class ReadyLag(harness.ClusterTest):
    def set_delay(self, node, ms):
        path = os.path.join(node.dir, "append-delay")
        if ms == 0:
            os.unlink(path)
            return
        with open(path + ".new", "w") as f:
            f.write(str(ms))
        os.rename(path + ".new", path)

    def create(self, via, name):
        status, body = via.request("POST", "/v1/topics", {"name": name, "partitions": 1})
        self.assertEqual(status, 201, body)

    def test_short_lag_keeps_ready_a_long_one_does_not(self):
        c = self.make(3).start_with_files(TERN_TEST_META_APPEND_DELAY_FILE="append-delay")
        lead = c.find_leader()
        late = next(n for n in c.nodes if n is not lead)

        self.set_delay(late, SHORT_MS)
        with Poller(late) as poll:
            for i in range(TOPICS):
                name = f"short{i}"
                sent = time.monotonic()
                self.create(lead, name)
                wait_until(f"{name} in node {late.id}'s replica",
                           lambda x=name: x in late.topics(), timeout=30, interval=0.02)
                # Its disk (the hook) held the entry, which it could not
                # have before the create was sent: it was behind.
                self.assertGreaterEqual(time.monotonic() - sent, (SHORT_MS - 50) / 1000)
        self.assertTrue(poll.answers)
        self.assertEqual(sorted(set(poll.statuses())), [200], poll.answers)

        self.set_delay(late, LONG_MS)
        with Poller(late) as poll:
            sent = time.monotonic()
            self.create(lead, "long")
            wait_until(f"node {late.id} out of readiness", lambda: 503 in poll.statuses(),
                       timeout=30, interval=0.05)
            wait_until(f"long in node {late.id}'s replica", lambda: "long" in late.topics(),
                       timeout=30)
            self.set_delay(late, 0)
            wait_until(f"node {late.id} ready again", lambda: poll.statuses()[-1] == 200,
                       timeout=30, interval=0.05)
        # Behind by 2 s before it left, a lag that began after the create
        # was sent: never at once (less a little for the loop's cached
        # clock).
        left = next(t for t, s in poll.answers if s == 503)
        self.assertGreaterEqual(left - sent, 1.9, poll.answers)

    def test_destructive_action_waits_for_a_lagging_replica(self):
        c = self.make(3).start_with_files(TERN_TEST_META_APPEND_DELAY_FILE="append-delay")
        lead = c.find_leader()
        late = next(n for n in c.nodes if n is not lead)
        for name in ("old", "kept"):
            self.create(lead, name)
            wait_until(f"{name} in node {late.id}'s replica",
                       lambda x=name: x in late.topics(), timeout=30)
        status, body = lead.nsq_http("POST", "/topic/create?topic=nsqold")
        self.assertEqual(status, 200, body)
        wait_until(f"nsqold in node {late.id}'s replica", lambda: "nsqold" in late.topics(),
                   timeout=30)
        status, body = lead.request("POST", "/v1/users", {
            "username": "gone", "password": "gone-pw-1",
            "grants": [{"action": "consume", "patterns": ["*"]}]})
        self.assertEqual(status, 201, body)
        wait_until(f"user gone on node {late.id}",
                   lambda: late.request("GET", "/v1/users/gone")[0] == 200, timeout=30)

        self.set_delay(late, LONG_MS)
        self.create(lead, "new")
        # Out of readiness: it knows it is behind what was committed.
        wait_until(f"node {late.id} out of readiness", lambda: late.readyz() == 503,
                   timeout=30, interval=0.05)
        status, body = late.request("DELETE", "/v1/topics/old", timeout=30)
        self.assertEqual(status, 204, body)
        self.assertIn("new", late.topics())
        for n in c.nodes:
            wait_until(f"old gone from node {n.id}", lambda n=n: "old" not in n.topics(),
                       timeout=30)
        # A user's deletion too (api/v1/users.c).
        self.create(lead, "new2")
        wait_until(f"node {late.id} out of readiness", lambda: late.readyz() == 503,
                   timeout=30, interval=0.05)
        status, body = late.request("DELETE", "/v1/users/gone", timeout=30)
        self.assertEqual(status, 204, body)
        self.assertEqual(lead.request("GET", "/v1/users/gone")[0], 404)
        # nsqd's /topic/delete too (api/nsq/http.c).
        self.create(lead, "new3")
        wait_until(f"node {late.id} out of readiness", lambda: late.readyz() == 503,
                   timeout=30, interval=0.05)
        status, body = late.nsq_http("POST", "/topic/delete?topic=nsqold")
        self.assertEqual(status, 200, body)
        for n in c.nodes:
            wait_until(f"nsqold gone from node {n.id}", lambda n=n: "nsqold" not in n.topics(),
                       timeout=30)

        # Too far behind for the request's budget: 503 to retry, and the
        # topic stays.
        self.set_delay(late, 11000)
        self.create(lead, "newer")
        wait_until(f"node {late.id} out of readiness", lambda: late.readyz() == 503,
                   timeout=30, interval=0.05)
        sent = time.monotonic()
        status, body = late.request("DELETE", "/v1/topics/kept", timeout=30)
        self.assertEqual(status, 503, body)
        self.assertEqual(body["error"], "control plane not caught up")
        self.assertGreaterEqual(time.monotonic() - sent, 9.5)
        self.set_delay(late, 0)
        status, _ = lead.request("GET", "/v1/topics/kept")
        self.assertEqual(status, 200)


if __name__ == "__main__":
    harness.main()
