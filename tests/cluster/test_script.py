"""scripts/cluster.sh (`make cluster`, `make cluster-restart N=`,
`make cluster-stop`): it starts three nodes on loopback with its own
certificates and secret, prints where the admin password is, and the
cluster it made takes writes on any node and lists every member; `restart
N` brings node N back with its data; `kill N` SIGKILLs it; `start` on a
directory it made starts only the nodes that are down, with their data;
each node's command file runs that node from any working directory; `stop`
stops every node by its PID file.

The nodes listen on CLUSTER_PORT_BASE's ports (base+1.., base+11..,
base+21..), a base whose nine ports this test claims as the harness claims
its free ports, so it runs beside other tests and beside a `make cluster`
on the default ports.

Run: python3 tests/cluster/test_script.py --ternd build/ternd
"""
import base64
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERND = None


def request(port, method, path, pw, body=None, headers=None):
    """(status, decoded JSON or None, raw bytes)."""
    h = {"Authorization": "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode()}
    h.update(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body)
        h["Content-Type"] = "application/json"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = None
        return r.status, decoded, data
    finally:
        c.close()


def ready(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            c.request("GET", "/readyz")
            return c.getresponse().status == 200
        finally:
            c.close()
    except OSError:
        return False


def port_free(port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_base():
    """A CLUSTER_PORT_BASE whose nine ports are free now and claimed for
    this process in the harness's per-machine registry."""
    for _ in range(500):
        base = random.randrange(20000, 32700)
        ports = [base + off + n for off in (0, 10, 20) for n in (1, 2, 3)]
        if any(p in harness._used_ports for p in ports) or not all(map(port_free, ports)):
            continue
        if all(harness._claim(p) for p in ports):
            harness._used_ports.update(ports)
            return base
    raise RuntimeError("no free port base below 32700")


def pid_running(pid):
    """Whether pid runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split()[1] != "Z"
    except OSError:
        return False
    return False


def read_pid(d, n):
    with open(os.path.join(d, f"node{n}", "ternd.pid")) as f:
        return int(f.read())


class Script(unittest.TestCase):
    def setUp(self):
        self.base = free_base()
        self.http = {n: self.base + 10 + n for n in (1, 2, 3)}
        top = tempfile.mkdtemp(prefix="tern-script-")
        self.addCleanup(shutil.rmtree, top, True)
        self.top = top
        self.d = os.path.join(top, "cluster")
        # Registered first, so it runs last: every node this test started,
        # by its PID file, whatever failed before.
        self.addCleanup(self.run_script, "stop", self.d)

    def env(self):
        env = dict(os.environ, TERND=TERND, CLUSTER_PORT_BASE=str(self.base))
        for k in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "CLUSTER_DATA"):
            env.pop(k, None)
        return env

    def run_script(self, *args):
        return subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), *args], cwd=ROOT,
                              env=self.env(), capture_output=True, text=True, timeout=180)

    def wait_ready(self, n):
        wait_until(f"node{n}'s /readyz", lambda: ready(self.http[n]), 60)

    def replay(self, port, pw, topic, partition, offset):
        """The payload at (partition, offset), read through port (on the
        owner when it is another node), or the answer's status."""
        status, body, _ = request(port, "GET", f"/v1/topics/{topic}/consume?partition={partition}"
                                  f"&offset={offset}", pw)
        return body["payload"] if status == 200 else status

    def test_start_use_restart_stop(self):
        d, http = self.d, self.http
        r = self.run_script("start", d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("a three-node tern cluster runs on loopback", r.stdout)
        self.assertIn(f"127.0.0.1:{http[2]}", r.stdout)
        m = re.search(r"the admin user's password is in (\S+)", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        with open(m.group(1)) as f:
            pw = f.read().strip()
        # Any node takes a write (forwarded to the leader), every node
        # lists the three members, one marked leader.
        # Factor 1: the message below goes through node 1's ingress log to
        # node 2, the owner, and is replayed from offset 0.
        status, body, _ = request(http[2], "POST", "/v1/topics", pw,
                                  {"name": "tried", "partitions": 3, "replication_factor": 1})
        self.assertEqual(status, 201, body)
        for n in (1, 2, 3):
            wait_until(f"the topic on node{n}",
                       lambda p=http[n]: request(p, "GET", "/v1/topics/tried", pw)[0] == 200, 30)
            status, body, _ = request(http[n], "GET", "/v1/cluster/members", pw)
            self.assertEqual(status, 200, body)
            self.assertEqual([m["id"] for m in body["members"]], ["1", "2", "3"])
            self.assertEqual(sum(1 for m in body["members"] if m["leader"]), 1)
        with open(os.path.join(d, "node2", "command")) as f:
            command = f.read()
        self.assertTrue(command.startswith("#!/bin/sh\n"), command)
        self.assertIn(f"exec {TERND} ", command)
        self.assertIn("--raft-tls-ca ", command)
        self.assertIn("--cluster-secret-file ", command)
        self.assertIn(f"--http-address 127.0.0.1:{http[2]} ", command)
        self.assertNotIn(d, command)  # paths relative to the file, so the directory may move

        # A message in node 2's partition, produced through node 1 (its
        # ingress log hands it on), on node 2's disk before the restart.
        _, body, _ = request(http[1], "GET", "/v1/topics/tried", pw)
        p2 = next(p["index"] for p in body["partition_stats"] if p["owner_node"] == "2")
        status, _, raw = request(http[1], "POST", f"/v1/topics/tried/produce?partition={p2}", pw,
                                 b"before the restart",
                                 {"Content-Type": "application/octet-stream"})
        self.assertEqual(status, 202, raw)
        wait_until("the message on node 2",
                   lambda: self.replay(http[3], pw, "tried", p2, 0) == "before the restart", 30)

        # make cluster-restart N=2 passes N and CLUSTER_DATA through to
        # restart 2: node 2 stops (SIGTERM) and comes back with its data.
        r = subprocess.run(["make", "-n", "-s", "-C", ROOT, "cluster-restart", "N=2",
                            f"CLUSTER_DATA={d}"], env=self.env(), capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), f'./scripts/cluster.sh restart "2" {d}')
        old = read_pid(d, 2)
        r = subprocess.run(["make", "-s", "-C", ROOT, "cluster-restart", "N=2",
                            f"CLUSTER_DATA={d}"], env=self.env(), capture_output=True, text=True,
                           timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"stopped node2 (pid {old})", r.stdout)
        self.assertIn("node2 is ready", r.stdout)
        self.assertFalse(pid_running(old), old)
        new = read_pid(d, 2)
        self.assertNotEqual(new, old)
        self.assertTrue(pid_running(new), new)
        self.assertTrue(ready(http[2]))
        # It rejoined: a consume through node 1 reaches it, and the message
        # from before the restart is still there to take and ack.
        # (A 502 or 503 while node 1's link to node 2 comes back is
        # retried.)
        def consume():
            status, body, raw = request(http[1], "GET",
                                        f"/v1/topics/tried/consume?partition={p2}&wait=5s", pw)
            self.assertIn(status, (200, 502, 503), raw)
            return body if status == 200 else None
        body = wait_until("a consume of node 2's partition through node 1", consume, 60)
        self.assertEqual(body["payload"], "before the restart")
        handle = urllib.parse.quote(body["receipt_handle"])
        status, _, raw = request(http[3], "POST", f"/v1/topics/tried/ack?receipt_handle={handle}",
                                 pw, headers={"X-Tern-Client": "test"})
        self.assertEqual(status, 204, raw)

        # kill 3, then node 3's command file, run from another directory
        # by a relative path, starts the same node on its own data.
        killed = read_pid(d, 3)
        r = self.run_script("kill", "3", d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"killed node3 (pid {killed}, SIGKILL)", r.stdout)
        self.assertFalse(pid_running(killed), killed)
        self.assertFalse(ready(http[3]))
        with open(os.path.join(self.top, "node3-foreground.log"), "wb") as log:
            fg = subprocess.Popen([os.path.join("cluster", "node3", "command")], cwd=self.top,
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            self.wait_ready(3)
            self.assertEqual(read_pid(d, 3), fg.pid)  # the command file execs ternd
            with open(f"/proc/{fg.pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            self.assertEqual(argv[argv.index(b"--data-path") + 1].decode(),
                             os.path.join(os.path.realpath(d), "node3", "data"))

            # start on the directory: node 1 (killed) starts again, the two
            # running nodes are reported and left alone.
            r = self.run_script("kill", "1", d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            running = {n: read_pid(d, n) for n in (2, 3)}
            r = self.run_script("start", d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("started node1", r.stdout)
            for n, pid in running.items():
                self.assertIn(f"node{n} already runs (pid {pid})", r.stdout)
                self.assertEqual(read_pid(d, n), pid)
            self.assertTrue(ready(http[1]))

            pids = [read_pid(d, n) for n in (1, 2, 3)]
            r = self.run_script("stop", d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(fg.wait(timeout=30), 0)
        finally:
            if fg.poll() is None:
                fg.kill()
                fg.wait()
        for n, pid in zip((1, 2, 3), pids):
            self.assertIn(f"stopped node{n} (pid {pid})", r.stdout)
            self.assertFalse(pid_running(pid), pid)

        # start with every node down: all three again, on their data.
        r = self.run_script("start", d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for n in (1, 2, 3):
            self.assertIn(f"started node{n}", r.stdout)
            self.assertNotIn(read_pid(d, n), pids)
        self.assertIn(f"the admin user's password is in {m.group(1)}", r.stdout)
        wait_until("the message after the restart of all three",
                   lambda: self.replay(http[1], pw, "tried", p2, 0) == "before the restart", 30)
        r = self.run_script("stop", d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_refusals(self):
        # A directory the script did not make is refused, named; so are a
        # bad node number and a directory that is not there.
        os.makedirs(self.d)
        with open(os.path.join(self.d, "notes.txt"), "w") as f:
            f.write("mine\n")
        r = self.run_script("start", self.d)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"{self.d} is not a cluster directory made by scripts/cluster.sh", r.stderr)
        self.assertEqual(os.listdir(self.d), ["notes.txt"])
        r = self.run_script("restart", "2", self.d)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("is not a cluster directory", r.stderr)
        r = self.run_script("restart", "4", self.d)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("no node '4': the cluster's nodes are 1, 2 and 3", r.stderr)
        r = self.run_script("kill", "1", os.path.join(self.top, "absent"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no cluster directory", r.stderr)
        r = subprocess.run(["make", "-s", "-C", ROOT, "cluster-restart", f"CLUSTER_DATA={self.d}"],
                           env=self.env(), capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("which node? give its number", r.stderr)


def configure(args):
    global TERND
    TERND = os.path.abspath(args.ternd)


if __name__ == "__main__":
    harness.main(configure=configure)
