"""Topic owners decided by the metastore, the same on every node
(meta/owner.h; docs/http-api.md "DELETE /v1/users/{username}", "PATCH
/v1/topics/{topic}"; docs/operations.md "Dead letters and owners").

Owners.test_deleted_user_and_owner_change, three nodes:
  - user u, made through node 1, makes topic t and its dead-letter topic
    t.default.DLQ through node 2; an admin deletes u through node 3: every
    node shows both owned by the root user `admin`; u made again (node 1)
    gets 403 deleting t through node 2;
  - an admin gives t to mallory (node 1): every node shows t and its
    dead-letter topic mallory's, and another dead-letter topic that had
    another owner (oscar) keeps it;
  - node 3 restarts (its replica is rebuilt from its snapshot and log):
    it shows the same owners.

Owners.test_an_owner_given_elsewhere_ends_an_open_consumer, three nodes:
an anonymous NSQ consumer on node 2's open door, found allowed at its
first delivery, is asked again only once node 2's replica applies a
change of owners (docs/performance.md): an admin gives the topic an owner
through node 1, and the consumer ends with E_UNAUTHORIZED before its next
message.

Run: python3 tests/cluster/test_owners.py --ternd build/ternd
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import basic, wait_until  # noqa: E402
from nsqwire import Conn, FRAME_ERROR, FRAME_RESPONSE  # noqa: E402  (tests/e2e, via harness)

GRANTS = [{"action": "create", "patterns": ["own*"]},
          {"action": "produce", "patterns": ["own*"]}]


class Owners(harness.ClusterTest):
    node_args = ["--default-replication-factor=1"]

    def as_user(self, node, user, method, path, body=None):
        return node.request(method, path, body, auth=False,
                            headers={"Authorization": basic(user, user + "-pw")})

    def make_user(self, node, user):
        status, body = node.request("POST", "/v1/users", {
            "username": user, "password": user + "-pw", "grants": GRANTS})
        self.assertEqual(status, 201, body)

    def owners_everywhere(self, c, want):
        """Wait until every running node shows each topic of want with
        its owner (None: none)."""
        def seen():
            for node in c.nodes:
                if not node.running():
                    continue
                for t, owner in want.items():
                    status, body = node.request("GET", f"/v1/topics/{t}")
                    if status != 200 or body.get("owner") != owner:
                        return False
            return True
        wait_until(f"owners {want} on every node", seen, 30)

    def test_deleted_user_and_owner_change(self):
        c = self.make(3).start()
        c.wait_alive(3)
        n1, n2, n3 = c.nodes
        self.make_user(n1, "ursula")
        self.make_user(n1, "mallory")
        self.make_user(n1, "oscar")
        wait_until("ursula on node 2",
                   lambda: self.as_user(n2, "ursula", "GET", "/v1/users/ursula")[0] == 200, 30)
        for t in ("ownt", "ownt.default.DLQ"):
            status, body = self.as_user(n2, "ursula", "POST", "/v1/topics", {"name": t})
            self.assertEqual(status, 201, body)
        status, body = self.as_user(n2, "mallory", "POST", "/v1/topics",
                                    {"name": "ownt.m.DLQ"})
        self.assertEqual(status, 403, body)  # ursula's, decided on the metastore's state
        status, body = n2.request("POST", "/v1/topics", {"name": "ownt.m.DLQ"})
        self.assertEqual((status, body.get("owner")), (201, "ursula"), body)
        status, body = n2.request("PATCH", "/v1/topics/ownt.m.DLQ", {"owner": "oscar"})
        self.assertEqual(status, 200, body)
        self.owners_everywhere(c, {"ownt": "ursula", "ownt.default.DLQ": "ursula",
                                   "ownt.m.DLQ": "oscar"})

        status, body = n3.request("DELETE", "/v1/users/ursula")
        self.assertEqual(status, 204, body)
        self.owners_everywhere(c, {"ownt": "admin", "ownt.default.DLQ": "admin",
                                   "ownt.m.DLQ": "oscar"})
        self.make_user(n1, "ursula")
        wait_until("ursula again on node 2",
                   lambda: self.as_user(n2, "ursula", "GET", "/v1/users/ursula")[0] == 200, 30)
        status, body = self.as_user(n2, "ursula", "DELETE", "/v1/topics/ownt")
        self.assertEqual(status, 403, body)

        status, body = n1.request("PATCH", "/v1/topics/ownt", {"owner": "mallory"})
        self.assertEqual(status, 200, body)
        want = {"ownt": "mallory", "ownt.default.DLQ": "mallory", "ownt.m.DLQ": "oscar"}
        self.owners_everywhere(c, want)
        status, body = n1.request("PATCH", "/v1/topics/ownt", {"owner": "ursula"})
        self.assertEqual(status, 200, body)
        want = {"ownt": "ursula", "ownt.default.DLQ": "ursula", "ownt.m.DLQ": "oscar"}
        self.owners_everywhere(c, want)

        n3.stop()
        n3.start()
        n3.wait_ready()
        self.owners_everywhere(c, want)

    def test_an_owner_given_elsewhere_ends_an_open_consumer(self):
        c = self.make(3).start()
        c.wait_alive(3)
        n1, n2, _ = c.nodes
        status, info = n2.nsq_http("GET", "/info")
        self.assertEqual(status, 200, info)
        t = "opent"
        sub = Conn(info["tcp_port"])
        self.assertEqual(sub.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        sub.rdy(10)
        pub = Conn(info["tcp_port"])
        self.assertEqual(pub.pub(t, b"open"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(sub.read_message().body, b"open")  # left in flight
        self.owners_everywhere(c, {t: None})
        status, body = n1.request("PATCH", f"/v1/topics/{t}", {"owner": "admin"})
        self.assertEqual(status, 200, body)
        self.owners_everywhere(c, {t: "admin"})
        status, body = n2.request("POST", f"/pub?topic={t}", b"owned")  # as admin
        self.assertEqual(status, 200, body)
        kind, data = sub.read_frame()
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(b"E_UNAUTHORIZED"), data)
        self.assertIn(b"protected", data)
        self.assertTrue(sub.expect_closed())
        pub.close()


if __name__ == "__main__":
    harness.main()
