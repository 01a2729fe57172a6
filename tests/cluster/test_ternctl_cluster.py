"""ternctl against a cluster of 3 real ternd nodes (tests/cluster/harness.py):
`ternctl status` through each node names all three members, alive, with
one leader, the same one through every node; `ternctl cluster members`
(table and --json) lists each node's id and API address; a topic created
through one node shows its partitions' owners through another, and a
message produced through one node is consumed through a third; `ternctl
stats --all-nodes` sums every member's numbers (messages pinned to each
owner's partition all count, through any node); `ternctl cluster drain 3
--wait` through node 1 drains node 3, which exits 0, and the others serve
on.

Run: python3 tests/cluster/test_ternctl_cluster.py --ternd build/ternd --ternctl build/ternctl
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

TERNCTL = None


def configure(args):
    global TERNCTL
    TERNCTL = os.path.abspath(args.ternctl)


class Ternctl(harness.ClusterTest):
    # Factor 1: stats --all-nodes sums one owner per partition here.
    node_args = ["--default-replication-factor=1"]

    def ctl(self, node, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.pop("XDG_CONFIG_HOME", None)
        env.update(HOME=self.c.dir, TERN_URL=f"http://{node.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        r = subprocess.run([TERNCTL, *args], capture_output=True, text=True, env=env,
                           timeout=120)
        return r.returncode, r.stdout, r.stderr

    def ok(self, node, *args):
        rc, out, err = self.ctl(node, *args)
        self.assertEqual(rc, 0, f"ternctl {' '.join(args)} via node {node.id}:\n{out}\n{err}")
        return out

    def all_alive(self, node):
        """--json status through node once it shows 3 alive members and a
        leader with their API addresses, else None."""
        rc, out, _ = self.ctl(node, "--json", "status")
        if rc != 0:
            return None
        members = json.loads(out)["cluster"]["members"]
        if len(members) != 3 or any(m["status"] != "alive" or not m["api_addr"]
                                    for m in members):
            return None
        if sum(1 for m in members if m["leader"]) != 1:
            return None
        return members

    def test_status_and_members_name_all_three(self):
        self.c = self.make(3).start()
        self.c.find_leader()
        leaders = set()
        for node in self.c.nodes:
            members = wait_until(f"3 alive members through node {node.id}",
                                 lambda n=node: self.all_alive(n), timeout=90)
            self.assertEqual(sorted(m["id"] for m in members), ["1", "2", "3"])
            self.assertEqual({m["id"]: m["api_addr"] for m in members},
                             {str(n.id): n.api_address for n in self.c.nodes})
            leaders.add(next(m["id"] for m in members if m["leader"]))
            out = self.ok(node, "status")
            self.assertIn("cluster:    3 members, 3 alive, leader ", out)
            for n in self.c.nodes:
                self.assertIn(n.api_address, out)
            table = self.ok(node, "cluster", "members").splitlines()
            self.assertTrue(table[0].startswith("ID "), table)
            self.assertEqual([line.split()[0] for line in table[1:]], ["1", "2", "3"])
            self.assertEqual([line.split()[1] for line in table[1:]], ["alive"] * 3)
        self.assertEqual(len(leaders), 1, leaders)

        # A topic made through node 1 shows every owner through node 2; a
        # message produced through node 2 is consumed through node 3.
        n1, n2, n3 = self.c.nodes
        self.ok(n1, "topics", "create", "spread", "--partitions", "3")
        stats = wait_until("the topic's record on node 2", lambda: (
            self.ctl(n2, "--json", "topics", "get", "spread")[0] == 0 and
            json.loads(self.ctl(n2, "--json", "topics", "get", "spread")[1])), timeout=60)
        self.assertEqual(sorted(p["owner_node"] for p in stats["partition_stats"]),
                         ["1", "2", "3"])
        self.ok(n2, "produce", "spread", "across the cluster", "--key", "k")
        got = wait_until("the message through node 3", lambda: self.ok(
            n3, "--json", "consume", "spread", "--wait", "2s").strip(), timeout=60)
        self.assertEqual(json.loads(got)["payload"], "across the cluster")

        # stats --all-nodes sums every member's /stats: messages pinned to
        # each partition (so to each owner) all count, through any node.
        for p in range(3):
            self.ok(n1, "produce", "spread", f"to partition {p}", "--partition", str(p))

        def summed(node):
            rc, out, _ = self.ctl(node, "--json", "stats", "--all-nodes", "--topic", "spread",
                                  "--count", "1")
            if rc != 0:
                return None
            sample = json.loads(out)
            topic_row = next(r for r in sample["rows"] if r["channel"] is None)
            return sample if topic_row["messages"] == 4 else None
        for node in self.c.nodes:
            sample = wait_until(f"4 messages summed through node {node.id}",
                                lambda n=node: summed(n), timeout=60)
            self.assertEqual((sample["nodes"], sample["answered"]), (3, 3))
        out = self.ok(n2, "stats", "--all-nodes", "--topic", "spread", "--count", "1")
        self.assertIn("all nodes (members as http://", out)
        self.assertIn(": 3 of 3 answered", out)

        # cluster drain: an unknown id is refused; member 3, drained through
        # node 1 (at the API address the members list gives), exits 0 while
        # nodes 1 and 2 go on serving.
        rc, out, err = self.ctl(n1, "cluster", "drain", "9")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("no member 9", err)
        rc, out, err = self.ctl(n1, "cluster", "drain")
        self.assertEqual(rc, 2, out + err)
        out = self.ok(n1, "cluster", "drain", "3", "--wait", "--drain-timeout", "20s")
        self.assertIn(f"member 3 at http://{n3.api_address}:", out)
        wait_until("node 3 to exit", lambda: not n3.running(), timeout=60)
        self.assertEqual(n3.daemon.proc.returncode, 0, n3.log())
        self.assertIn("drained after", n3.log())
        self.ok(n2, "produce", "spread", "after the drain", "--partition", "1")


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=configure)
