"""Requests that reach a node between its metastore replica applying a
topic's record and its catalog making the topic in the engine (ternd-test,
TERN_TEST_CATALOG_LAG_MS widens that moment to seconds on one node):
a produce pinned to a partition the node owns lands in that partition's
log at once, with the topic's recorded partition count, not in the
ingress log behind a one-partition topic the publish made; a consume of
that partition through the same node answers it.

Run: python3 tests/cluster/test_catalog_lag.py --ternd build/ternd-test
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

OCTET = {"Content-Type": "application/octet-stream"}
LAG_MS = 4000


class CatalogLag(harness.ClusterTest):
    node_args = ["--default-replication-factor=1"]

    def test_produce_and_consume_before_the_catalog_made_the_topic(self):
        c = self.make(3)
        late = c.nodes[1]  # node 2: owns partition 1 of a 3-partition topic
        for node in c.nodes:
            env = c.env()
            if node is late:
                env["TERN_TEST_CATALOG_LAG_MS"] = str(LAG_MS)
            node.start(env=env)
        c.wait_ready()
        c.wait_alive(3)
        status, body = c.nodes[0].request("POST", "/v1/topics", {"name": "lag", "partitions": 3})
        self.assertEqual(status, 201, body)
        # The late node's replica has the record (its /v1 GET reads it)
        # while its catalog waits LAG_MS before making the topic.
        wait_until("the record on the late node", lambda: late.owners("lag") == ["1", "2", "3"],
                   30, interval=0.05)
        status, body = late.request("POST", "/v1/topics/lag/produce?partition=1", b"early",
                                    headers=OCTET)
        self.assertEqual(status, 202, body)
        # In partition 1's own log on this node, not waiting in the
        # ingress log for the catalog.
        status, body = late.request("GET", "/v1/topics/lag")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["partitions"], 3, body)
        self.assertEqual(body["partition_stats"][1]["next_offset"], 1, body)
        status, m = late.request("GET", "/v1/topics/lag/consume?partition=1")
        self.assertEqual(status, 200, m)
        self.assertEqual((m["partition"], m["payload"]), (1, "early"))
        self.assertNotIn("ingress log: committing", late.log())


if __name__ == "__main__":
    harness.main()
