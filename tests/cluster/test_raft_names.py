"""Raft addresses as host names, across real ternd nodes
(tests/cluster/harness.py).

- Three nodes whose --raft-address and --peers are localhost:<port> elect a
  leader and replicate; each listens on what its name resolved to
  (127.0.0.1) and Raft records the name.
- A re-created pod: three nodes in network namespaces of their own
  (tests/cluster/netns.py), their Raft names n1..n3.raftnames.test from a
  hosts file per namespace (/etc/netns/<ns>/hosts, which `ip netns exec`
  bind-mounts over /etc/hosts; rewritten in place, so the running nodes
  see each change). One node stops, its namespace gets a new address and
  the hosts files map its name there, a topic is created while it is
  away, and it starts again under the same name: it listens on the new
  IP, logs no address mismatch, catches up, and is a voter the others
  reach at the new IP (with the leader stopped, it and the third node
  elect one and take a write).
- A peer whose name does not resolve yet is retried, not fatal; this
  node's own name not resolving is exit status 2 naming raft-address.

Run: python3 tests/cluster/test_raft_names.py --ternd build/ternd [unittest args]
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import netns  # noqa: E402
from harness import run_ternd, wait_until  # noqa: E402


class Names(harness.ClusterTest):
    def create_topic(self, node, name):
        status, body = node.request("POST", "/v1/topics", {"name": name, "partitions": 1})
        self.assertEqual(status, 201, (name, body))

    def assert_lists(self, node, names, timeout=60):
        wait_until(f"node {node.id} to list {names}", lambda: set(names) <= set(node.topics()),
                   timeout)

    def test_localhost_names(self):
        c = self.make(3)
        for node in c.nodes:
            node.raft_host = "localhost"
        c.start()
        leader = c.find_leader()
        self.create_topic(leader, "by-name")
        for node in c.nodes:
            self.assert_lists(node, ["by-name"])
            self.assertIn(f"metastore Raft listening on 127.0.0.1:{node.raft_port} "
                          f"(raft-address localhost:{node.raft_port}", node.log())
            self.assertNotIn("Raft configuration records node", node.log())

    def test_recreated_node_comes_back_at_a_new_ip(self):
        ok, why = netns.available()
        if not ok:
            self.skipTest(f"network namespaces unavailable here: {why}")
        net = netns.Net(3)
        self.addCleanup(net.close)
        names = [f"n{i + 1}.raftnames.test" for i in range(3)]
        ips = list(net.hosts)
        with open("/etc/hosts") as f:
            base = f.read()
        hosts_files = []
        for ns in net.names:
            d = os.path.join("/etc/netns", ns)
            os.makedirs(d)
            self.addCleanup(shutil.rmtree, d, True)
            hosts_files.append(os.path.join(d, "hosts"))

        def write_hosts():
            # In place: each node's bind mount keeps the file's inode.
            for path in hosts_files:
                with open(path, "w") as f:
                    f.write(base + "".join(f"{ip} {n}\n" for ip, n in zip(ips, names)))

        write_hosts()
        # Raft off loopback, so over mutual TLS (required there).
        c = self.make(3, hosts=net.hosts, prefixes=[net.prefix(i) for i in range(3)], tls=True)
        for node, name in zip(c.nodes, names):
            node.raft_host = name
        c.start()
        leader = c.find_leader()
        self.create_topic(leader, "before")
        moved = next(n for n in c.nodes if n is not leader)
        i = c.nodes.index(moved)
        self.assertEqual(moved.stop(), 0, moved.log())
        # The pod is re-created: a new IP in its namespace, its name there.
        new_ip = f"{net.subnet}.{101 + i}"
        dev = f"tnv{os.getpid() % 10000}n{i}"
        netns._run(*net.prefix(i), "ip", "addr", "add", f"{new_ip}/24", "dev", dev)
        ips[i] = new_ip
        write_hosts()
        leader = c.find_leader([n for n in c.nodes if n is not moved])
        self.create_topic(leader, "while-away")
        log_before = len(moved.log())
        moved.start()
        moved.wait_ready(60)
        restart = moved.log()[log_before:]
        self.assertIn(f"metastore Raft listening on {new_ip}:{moved.raft_port} "
                      f"(raft-address {names[i]}:{moved.raft_port}", restart)
        self.assertNotIn("Raft configuration records node", restart)
        self.assert_lists(moved, ["before", "while-away"])
        # It votes, reached at its new IP: without the leader, it and the
        # third node elect one between them and take a write.
        leader = c.find_leader()
        self.assertEqual(leader.stop(), 0, leader.log())
        rest = [n for n in c.nodes if n is not leader]
        self.assertIn(moved, rest)
        new_leader = c.find_leader(rest, timeout=60)
        self.create_topic(new_leader, "after")
        for node in rest:
            self.assert_lists(node, ["before", "while-away", "after"])


class Resolution(harness.ClusterTest):
    def test_unresolved_peer_is_retried(self):
        c = self.make(2)
        node, unscheduled = c.nodes
        node.raft_host = "localhost"
        # Node 2's pod is not scheduled yet: its name does not resolve.
        unscheduled.raft_host = "n2.unscheduled.invalid"
        node.start()
        wait_until("the look-up failure in the log",
                   lambda: "raft transport: cannot resolve n2.unscheduled.invalid" in node.log(),
                   timeout=30)
        self.assertTrue(node.running(), node.log())
        self.assertEqual(node.readyz(), 503)

    def test_own_name_must_resolve(self):
        tmp = tempfile.mkdtemp(prefix="tern-names-")
        self.addCleanup(shutil.rmtree, tmp, True)
        d = os.path.join(tmp, "data")
        res = run_ternd(f"--data-path={d}", "--node-id=1",
                        "--raft-address=tern-0.nowhere.invalid:21951",
                        "--http-address=127.0.0.1:0", "--tcp-address=127.0.0.1:0",
                        "--peers=1@tern-0.nowhere.invalid:21951,2@127.0.0.1:21952")
        self.assertEqual(res.returncode, 2, res.stderr)
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn("raft-address", lines[0])
        self.assertIn('host "tern-0.nowhere.invalid" does not resolve', lines[0])
        self.assertFalse(os.path.exists(d), "data dir opened")


if __name__ == "__main__":
    harness.main()
