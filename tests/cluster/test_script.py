"""scripts/cluster.sh (`make cluster`, `make cluster-stop`): it starts three
nodes on loopback with its own certificates and secret, prints where the
admin password is, and the cluster it made takes writes on any node and
lists every member; `stop` stops every node by its PID file.

Run: python3 tests/cluster/test_script.py --ternd build/ternd
"""
import base64
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERND = None


def request(port, method, path, pw, body=None):
    h = {"Authorization": "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode()}
    if body is not None:
        body = json.dumps(body)
        h["Content-Type"] = "application/json"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None
    finally:
        c.close()


class Script(unittest.TestCase):
    def run_script(self, *args):
        env = dict(os.environ, TERND=TERND)
        return subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=180)

    def test_start_use_stop(self):
        top = tempfile.mkdtemp(prefix="tern-script-")
        self.addCleanup(shutil.rmtree, top, True)
        d = os.path.join(top, "cluster")
        self.addCleanup(self.run_script, "stop", d)
        r = self.run_script("start", d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("a three-node tern cluster runs on loopback", r.stdout)
        m = re.search(r"the admin user's password is in (\S+)", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        with open(m.group(1)) as f:
            pw = f.read().strip()
        # Any node takes a write (forwarded to the leader), every node
        # lists the three members, one marked leader.
        status, body = request(4252, "POST", "/v1/topics", pw, {"name": "tried", "partitions": 3})
        self.assertEqual(status, 201, body)
        for port in (4251, 4252, 4253):
            wait_until(f"the topic on :{port}",
                       lambda p=port: request(p, "GET", "/v1/topics/tried", pw)[0] == 200, 30)
            status, body = request(port, "GET", "/v1/cluster/members", pw)
            self.assertEqual(status, 200, body)
            self.assertEqual([m["id"] for m in body["members"]], ["1", "2", "3"])
            self.assertEqual(sum(1 for m in body["members"] if m["leader"]), 1)
        for n in (1, 2, 3):
            with open(os.path.join(d, f"node{n}", "command")) as f:
                command = f.read()
            self.assertIn("--raft-tls-ca ", command)
            self.assertIn("--cluster-secret-file ", command)
        pids = []
        for n in (1, 2, 3):
            with open(os.path.join(d, f"node{n}", "ternd.pid")) as f:
                pids.append(int(f.read()))
        r = self.run_script("stop", d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for pid in pids:
            self.assertFalse(os.path.exists(f"/proc/{pid}") and
                             "ternd" in open(f"/proc/{pid}/cmdline").read(), pid)
        # A second start into the same directory is refused, naming it.
        r = self.run_script("start", d)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(d, r.stderr)


def configure(args):
    global TERND
    TERND = os.path.abspath(args.ternd)


if __name__ == "__main__":
    harness.main(configure=configure)
