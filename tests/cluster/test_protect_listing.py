"""The open NSQ doors' listings leave out every topic a node cannot judge
yet, as they leave out protected ones (api/access.h tn_access_unknown;
docs/nsq-compatibility.md "Protected topics").

ProtectedListing.test_listings_hide_topics_before_the_replica_catches_up,
three nodes, security on, NSQ doors open (no NSQ auth), factor 1: the
admin makes topic `pt` through /v1 (owned) with channel `audit`; an
anonymous caller makes topic `ot` through nsqd's /topic/create (no
owner) with channel `tap`; node A holds pt/0 and ot/0. Ready, A's listings show `ot` to anonymous
callers and leave `pt` out. Every node stops; A starts alone: its replica
holds only its last snapshot (none: the cluster is young), so it cannot
tell `pt` has an owner, and no leader tells it more. The metastore took a
snapshot after the users were made (a thousand grant changes), before
`pt` and `ot`: A restores the users from it. Anonymous callers of A's
/stats (JSON, text, ?topic=), /topics, /lookup?topic=, /channels?topic=
and /nodes see neither `pt` nor `ot` (each listing waits 3 s for A to
catch up first, answering within nsqadmin's 5 s request timeout; then
/lookup 404 TOPIC_NOT_FOUND, /channels [], /stats?topic=pt topics
null), nor does a user whose grant matches neither; the admin sees both, a user with a grant on `pt` sees `pt`.
Before: anonymous callers were listed `pt`, its channel and its
producer, as if it were open. The others start; once A is ready,
anonymous callers see `ot` again and still not `pt`; the admin sees
both, and so does the user with the grant, not the one without.

Run: python3 tests/cluster/test_protect_listing.py --ternd build/ternd
"""
import base64
import concurrent.futures
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

# Metastore entries after which libraft has taken a snapshot (its
# threshold, meta.c, 1024; the users' own entries count too).
SNAPSHOT_EVERY = 1100


class ProtectedListing(harness.ClusterTest):
    node_args = ["--default-replication-factor=1"]

    def test_listings_hide_topics_before_the_replica_catches_up(self):
        c = self.make(3).start()
        c.wait_alive(3)
        n1 = c.nodes[0]
        for user, pattern in (("reader", "pt"), ("stranger", "other-*")):
            st, body = n1.request("POST", "/v1/users", {
                "username": user, "password": "pw-" + user,
                "grants": [{"action": "consume", "patterns": [pattern]}]})
            self.assertEqual(st, 201, body)
        # A metastore snapshot holding the users (not pt, not ot): A's
        # replica restores it at the start, so credentials are judged there
        # before it catches up. libraft takes one every 1024 entries.
        for i in range(SNAPSHOT_EVERY):
            st, body = n1.request("PUT", "/v1/users/stranger/grants", {"grants": [
                {"action": "consume", "patterns": ["other-*" if i % 2 else "else-*"]}]})
            self.assertEqual(st, 200, body)
            if all(self.snapshots(n) for n in c.nodes):
                break
        wait_until("a metastore snapshot on every node",
                   lambda: all(self.snapshots(n) for n in c.nodes), 60)
        st, body = n1.request("POST", "/v1/topics", {"name": "pt", "partitions": 1})
        self.assertEqual(st, 201, body)
        self.assertEqual(body.get("owner"), "admin", body)
        wait_until("pt/0 placed everywhere", lambda: all(
            (o := n.owners("pt")) and o[0] != "0" for n in c.nodes), 60)
        a = next(n for n in c.nodes if str(n.id) == str(n1.owners("pt")[0]))
        st, body = a.request("GET", "/v1/topics/pt/consume?channel=audit&wait=0s")
        self.assertEqual(st, 204, body)
        for path in ("/topic/create?topic=ot", "/channel/create?topic=ot&channel=tap"):
            st, body = a.nsq_http("POST", path)
            self.assertEqual(st, 200, body)
        wait_until("ot placed", lambda: (o := a.owners("ot")) and o[0] != "0", 60)
        # A new topic's partition p goes to the p-th eligible member
        # (meta/placement.h), as pt's did: A's disk holds both.
        self.assertEqual(str(a.owners("ot")[0]), str(a.id), "ot/0 not on pt/0's node")

        # Ready: pt is protected, ot open.
        ready = self.listings(a, None)
        self.assertEqual(self.shown(ready, "pt"), {}, ready)
        self.assertEqual(self.shown(ready, "ot"), self.everywhere(), ready)

        self.stop_all(c)
        a.start()
        wait_until(f"node {a.id}'s /info", lambda: self.answers(a), 60)
        # Each listing waits 3 s for A's replica, then answers: within
        # nsqadmin's 5 s request timeout (before: 5 s, nsqadmin showed
        # the node as an error).
        t0 = time.monotonic()
        alone = self.listings(a, None)
        took = time.monotonic() - t0
        self.assertTrue(2.9 <= took < 4.9, f"A alone's listings answered after {took:.2f} s")
        alone_admin = self.listings(a, ("admin", harness.PASSWORD))
        alone_reader = self.listings(a, ("reader", "pw-reader"))
        alone_stranger = self.listings(a, ("stranger", "pw-stranger"))
        others = [n for n in c.nodes if n is not a]
        for n in others:
            n.start()
        c.wait_ready()
        after = self.listings(a, None)
        after_admin = self.listings(a, ("admin", harness.PASSWORD))
        after_reader = self.listings(a, ("reader", "pw-reader"))
        after_stranger = self.listings(a, ("stranger", "pw-stranger"))
        sys.stderr.write(f"[protect_listing] A alone, anonymous: {alone}\n"
                         f"[protect_listing] A alone, admin: {alone_admin}\n")

        # Alone: neither topic shown to anonymous callers (pt may have an
        # owner, ot may have got one since the snapshot), nor to a user
        # whose grants do not cover them; the admin sees both, a grant on
        # pt sees pt.
        self.assertEqual(self.shown(alone, "pt"), {}, alone)
        self.assertEqual(self.shown(alone, "ot"), {}, alone)
        self.assertEqual(self.shown(alone_admin, "pt"), self.everywhere(), alone_admin)
        self.assertEqual(self.shown(alone_admin, "ot"), self.everywhere(), alone_admin)
        self.assertEqual(self.shown(alone_reader, "pt"), self.everywhere(), alone_reader)
        self.assertEqual(self.shown(alone_reader, "ot"), {}, alone_reader)
        self.assertEqual(self.shown(alone_stranger, "pt"), {}, alone_stranger)
        self.assertEqual(self.shown(alone_stranger, "ot"), {}, alone_stranger)
        # Caught up: anonymous callers see ot again, not pt.
        self.assertEqual(self.shown(after, "pt"), {}, after)
        self.assertEqual(self.shown(after, "ot"), self.everywhere(), after)
        # Credentials that cover pt see it; others do not.
        self.assertEqual(self.shown(after_admin, "pt"), self.everywhere(), after_admin)
        self.assertEqual(self.shown(after_admin, "ot"), self.everywhere(), after_admin)
        self.assertEqual(self.shown(after_reader, "pt"), self.everywhere(), after_reader)
        self.assertEqual(self.shown(after_stranger, "pt"), {}, after_stranger)
        self.assertEqual(self.shown(after_stranger, "ot"), self.everywhere(), after_stranger)
        self.stop_all(c)
        self.assertEqual([n.id for n in c.nodes if "runtime error" in n.log()], [])

    # Every listing endpoint, and what shows a topic there.
    ENDPOINTS = ("stats", "stats_text", "stats_topic", "topics", "lookup", "channels", "nodes")

    def everywhere(self):
        return {e: True for e in self.ENDPOINTS}

    def shown(self, listings, topic):
        """{endpoint: True} for each listing in listings (from listings())
        that shows topic; {} when none does."""
        out = {}
        for e in self.ENDPOINTS:
            if listings[topic][e]:
                out[e] = True
        return out

    def listings(self, n, cred):
        """For pt and ot, whether each of n's listing endpoints shows it to
        cred ((user, password), or None: anonymous): {topic: {endpoint:
        bool}}. The requests go at once (each waits up to 3 s while n
        cannot judge the topics). Raises on an answer no listing gives."""
        paths = ["/stats?format=json", "/stats", "/topics", "/nodes"]
        for topic in ("pt", "ot"):
            paths += [f"/stats?format=json&topic={topic}", f"/lookup?topic={topic}",
                      f"/channels?topic={topic}"]
        with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
            got = dict(zip(paths, pool.map(lambda p: self.get(n, p, cred), paths)))
        for path, (st, body) in got.items():
            if path.startswith("/lookup") and st == 404:
                self.assertEqual(json.loads(body), {"message": "TOPIC_NOT_FOUND"})
            else:
                self.assertEqual(st, 200, (path, body))
        mine = [p for p in json.loads(got["/nodes"][1])["producers"]
                if p["http_port"] == n.http_port]
        self.assertEqual(len(mine), 1, got["/nodes"])
        out = {}
        for topic in ("pt", "ot"):
            one = json.loads(got[f"/stats?format=json&topic={topic}"][1])["topics"]
            out[topic] = {
                "stats": topic in [t["topic_name"]
                                   for t in json.loads(got["/stats?format=json"][1])["topics"]],
                "stats_text": f"[{topic:<15}]".encode() in got["/stats"][1],
                "stats_topic": one is not None and topic in [t["topic_name"] for t in one],
                "topics": topic in json.loads(got["/topics"][1])["topics"],
                "lookup": got[f"/lookup?topic={topic}"][0] == 200,
                "channels": ("audit" if topic == "pt" else "tap") in json.loads(
                    got[f"/channels?topic={topic}"][1])["channels"],
                "nodes": topic in mine[0]["topics"],
            }
        return out

    def snapshots(self, n):
        """The metastore snapshots in n's data directory (libraft's files)."""
        d = os.path.join(n.data, "meta")
        return [f for f in os.listdir(d) if f.startswith("snapshot-")] if os.path.isdir(d) else []

    def answers(self, n):
        try:
            st, _ = n.nsq_http("GET", "/info", timeout=5)
        except (OSError, http.client.HTTPException):
            return False
        return st == 200

    def get(self, n, path, cred):
        """GET path on n's nsqd endpoints, with Basic cred or none:
        (status, raw body)."""
        headers = {}
        if cred is not None:
            token = base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode()
            headers["Authorization"] = "Basic " + token
        conn = http.client.HTTPConnection(n.host, n.http_port, timeout=30)
        try:
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()


if __name__ == "__main__":
    harness.main()
