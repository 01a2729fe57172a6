"""A cluster of real ternd processes on loopback, for the tests in this
directory.

Cluster(n) gives n nodes, each with its own data directory, HTTP and Raft
ports (free ports below 32768, checked free over TCP and UDP, since node
RPC shares the HTTP port number over UDP; NSQ TCP on port 0), the same
--peers list and a cluster secret file (mode 0600); with tls=True also a CA
and a certificate per node made with the openssl command (Cluster.certs).
Nodes start through tests/e2e/daemon.py's Daemon, logging to a file in the
cluster's directory (a node's log survives its restarts, and is printed
when a test fails). Node.kill() is SIGKILL, Node.stop() a graceful
SIGTERM, both by process id; Node.start() again reuses the data
directory and the ports. Cluster.stop() stops every running node at once
(their exit statuses); Cluster.close() SIGKILLs the nodes still running
and removes the directory (a test's cleanup: nothing reads the data).
ClusterTest.make gives a case a cluster of its own; ClusterTest.shared
gives the cases of a class that only add topics of their own one cluster,
closed after the class's last case.

The metastore leader is the node whose /v1/cluster/members marks itself
leader when the API says so; until node status over RPC exists it is the
node that answers a metadata write (a follower holds the write until it is
leader itself; see find_leader).

What several test files read from a node is a Node method: nsq_http (nsqd's
HTTP endpoints, no credentials), alive_members, owners (a topic's partition
owners) and metric (one /metrics sample). main() is every test file's
command line: --ternd, the file's own options, then unittest's. soak()
says whether the run is a soak (TERN_SOAK set, by make soak): a test that
repeats a case runs it at full repetition then, and a few times otherwise.
"""
import argparse
import atexit
import base64
import contextlib
import fcntl
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import daemon as daemon_mod  # noqa: E402
from daemon import Daemon  # noqa: E402

PASSWORD = "cluster-harness-admin"
# How long the replication suite's stop at the end (finish, after the
# load stopped) lets a node drain before the second SIGTERM: with nothing
# in flight a drain ends at once, unless the router still counts a publish
# under way (seen after failovers), which held it for drain-timeout (30 s).
DRAIN_GRACE = 3

_used_ports = set()

# How often the waits for a node's own state poll it (readiness, the
# members it sees alive, the metastore leader): one small request each,
# and a case waits for them at every start and restart, so at 0.2 s a
# cluster's start waited 0.1 s per poll more than it had to.
POLL = 0.05


def set_ternd(path):
    daemon_mod.TERND = os.path.abspath(path)


def soak():
    """True under make soak (TERN_SOAK set and not "0")."""
    return os.environ.get("TERN_SOAK", "") not in ("", "0")


# Ports handed out by every test process on this machine: a file per port
# holding the owner's pid. A node's ports stay free while it is stopped
# between restarts, so probing with bind alone let a test running beside
# this one take a port a stopped node comes back to (cluster_meta once
# found its Raft port taken). A file whose pid is gone is stale: removed by
# the first claim of each process, or taken over.
# Every change to the directory (a claim, a stale file removed, a claim's
# file removed at release) is made under the directory's lock (.lock,
# which nobody removes), as the unit tests' are (tests/unit/testutil.c
# tu_free_port, the same protocol): a file read before its creator wrote
# its pid, or a stale one two claimers take over at once, would otherwise
# give one port to both; and since the lock is never on a file being
# removed, no claimer can hold a lock on a name another just unlinked.
# A claim lasts until its process exits; at exit (atexit) its files go, in
# that process only (their pid is its own: a forked child's exit leaves
# its parent's claims alone).
_PORT_DIR = os.path.join(tempfile.gettempdir(), "tern-test-ports")
_claimed = set()  # ports whose files this process made
_swept_by = None  # the process that swept _PORT_DIR


@contextlib.contextmanager
def _ports_locked():
    os.makedirs(_PORT_DIR, exist_ok=True)
    with open(os.path.join(_PORT_DIR, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _owner(path):
    """The pid in a claim file (0: none written); None when there is none."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else 0


def _alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _sweep():
    """Remove the stale claims (the lock held)."""
    for name in os.listdir(_PORT_DIR):
        if name.isdigit():
            path = os.path.join(_PORT_DIR, name)
            pid = _owner(path)
            if pid is not None and not _alive(pid):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


def _claim(port):
    """Claim port for this process across test processes; False if a live
    process holds it."""
    global _swept_by
    with _ports_locked():
        if _swept_by != os.getpid():
            _sweep()
            if _swept_by is None:
                atexit.register(_release_all)  # inherited by a forked child
            _swept_by = os.getpid()
        return _claim_locked(port)


def _claim_locked(port):
    path = os.path.join(_PORT_DIR, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid = _owner(path)
            if _alive(pid):
                return pid == os.getpid()
            try:
                os.unlink(path)  # its owner is gone
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        _claimed.add(port)
        return True
    return False


def _release(ports):
    """Give up this process's claims on ports: their files go."""
    with _ports_locked():
        for port in ports:
            path = os.path.join(_PORT_DIR, str(port))
            if _owner(path) == os.getpid():
                os.unlink(path)
            _claimed.discard(port)


def _release_all():
    _release(list(_claimed))


def free_port():
    """A port below 32768 that is free on 127.0.0.1 over TCP and UDP now,
    never handed out twice by this process, nor by another test process
    while it lives (_claim)."""
    for _ in range(2000):
        port = random.randrange(20000, 32768)
        if port in _used_ports:
            continue
        ok = True
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            s = socket.socket(socket.AF_INET, kind)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok and _claim(port):
            _used_ports.add(port)
            return port
    raise RuntimeError("no free port below 32768")


def basic(user, pw):
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_certs(directory, names, ca_name="tern-test-ca"):
    """A CA and, per name, a key and certificate it signs (CN = the name,
    subjectAltName IP:127.0.0.1 and DNS:name), with the openssl command.
    Returns {"ca": path, name: (cert, key), ...}."""
    os.makedirs(directory, exist_ok=True)
    ca_key = os.path.join(directory, "ca.key")
    ca = os.path.join(directory, "ca.pem")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", f"/CN={ca_name}")
    out = {"ca": ca}
    for name in names:
        out[name] = issue_cert(directory, name)
    return out


def issue_cert(directory, name):
    """A key and certificate for name, signed by the CA make_certs made in
    directory: (cert, key)."""
    ca_key = os.path.join(directory, "ca.key")
    ca = os.path.join(directory, "ca.pem")
    key = os.path.join(directory, f"{name}.key")
    csr = os.path.join(directory, f"{name}.csr")
    cert = os.path.join(directory, f"{name}.pem")
    ext = os.path.join(directory, f"{name}.ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName=IP:127.0.0.1,DNS:{name}\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", ext)
    os.chmod(key, 0o600)
    return cert, key


def http_call(host, port, method, path, body=None, headers=None, auth=True, timeout=10):
    """One HTTP request to host:port, as admin unless auth is false (a body
    that is not bytes or str goes as JSON): (status, parsed JSON or raw
    bytes), or (None, error) when the node does not answer. Node.request
    without a Node."""
    h = dict(headers or {})
    if auth:
        h["Authorization"] = basic("admin", PASSWORD)
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data
    except (OSError, http.client.HTTPException) as e:
        return None, e
    finally:
        c.close()


class Node:
    def __init__(self, cluster, node_id, host="127.0.0.1", prefix=()):
        self.cluster = cluster
        self.id = node_id
        self.host = host
        self.prefix = prefix  # e.g. ["ip", "netns", "exec", ns]
        self.raft_host = host  # the host of --raft-address (and --peers): may be a name
        self.http_port = free_port()
        self.raft_port = free_port()
        self.dir = os.path.join(cluster.dir, f"node{node_id}")
        self.data = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "ternd.log")
        os.makedirs(self.dir)
        self.daemon = None
        self.extra = []  # arguments of every start, after the cluster's
        self.join = None  # API addresses for --join: a node added later, not in --peers

    @property
    def raft_address(self):
        return f"{self.raft_host}:{self.raft_port}"

    @property
    def api_address(self):
        return f"{self.host}:{self.http_port}"

    @property
    def pid(self):
        return self.daemon.proc.pid

    def args(self):
        return [f"--node-id={self.id}",
                f"--raft-address={self.raft_address}",
                f"--http-address={self.api_address}",
                f"--tcp-address={self.host}:0",
                f"--pid-file={os.path.join(self.dir, 'ternd.pid')}",
                *self.cluster.args_for(self), *self.extra]

    def start(self, *extra, env=None, preexec_fn=None):
        """Start (again) on the same data directory and ports; returns at
        once (wait_ready waits). preexec_fn runs in the child before
        ternd (e.g. a lower RLIMIT_NOFILE)."""
        assert not self.running(), f"node {self.id} is running"
        self.daemon = Daemon(self.data, *self.args(), *extra,
                             env=env if env is not None else self.cluster.env(),
                             log_path=self.log_path, prefix=self.prefix, preexec_fn=preexec_fn)
        return self

    def running(self):
        return self.daemon is not None and self.daemon.proc.poll() is None

    def kill(self):
        """SIGKILL, by process id."""
        self.daemon.kill()

    def stop(self, timeout=60, drain=None):
        """A graceful stop (SIGTERM, by process id); its exit status. With
        drain (seconds), a node still draining after that long gets the
        second SIGTERM, which shuts it down now the same way as a drain
        that timed out (docs/operations.md): for stops after the load
        ended, where nothing is left to drain but a drain-timeout (30 s)
        could pass waiting on one publish the router still counts."""
        proc = self.daemon.proc
        if drain is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(drain)
            except subprocess.TimeoutExpired:
                sys.stderr.write(f"[harness] node {self.id} still draining after {drain}s: "
                                 "a second SIGTERM stops it now\n")
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass  # daemon.stop raises it below
        return self.daemon.stop(timeout=timeout)

    def log(self):
        if not os.path.exists(self.log_path):
            return ""
        with open(self.log_path) as f:
            return f.read()

    def request(self, method, path, body=None, auth=True, timeout=10, headers=None):
        """(status, parsed JSON or raw bytes); (None, error) when the node
        does not answer."""
        return http_call(self.host, self.http_port, method, path, body=body, headers=headers,
                         auth=auth, timeout=timeout)

    def nsq_http(self, method, path, body=None, timeout=30):
        """(status, parsed JSON or raw bytes) from nsqd's HTTP endpoints on
        this node: no credentials, body (bytes, str or None) sent as it is.
        A node that does not answer raises (OSError or HTTPException)."""
        c = http.client.HTTPConnection(self.host, self.http_port, timeout=timeout)
        try:
            c.request(method, path, body=body)
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data)
            except ValueError:
                return r.status, data
        finally:
            c.close()

    def alive_members(self, timeout=10):
        """How many members this node's /v1/cluster/members marks alive; 0
        when it does not answer 200."""
        status, body = self.request("GET", "/v1/cluster/members", timeout=timeout)
        if status != 200:
            return 0
        return sum(1 for m in body["members"] if m["status"] == "alive")

    def owners(self, topic, timeout=10):
        """The owner_node of each partition of topic, in partition order,
        as this node's GET /v1/topics/{topic} has them; None when it does
        not answer 200."""
        status, body = self.request("GET", f"/v1/topics/{topic}", timeout=timeout)
        if status != 200:
            return None
        return [p["owner_node"] for p in body["partition_stats"]]

    def metric(self, name, timeout=10):
        """The value (a float) of the sample written exactly name (labels
        and all, e.g. 'x_total{outcome="a"}') in this node's /metrics; None
        when the node does not answer 200 or has no such sample."""
        status, body = self.request("GET", "/metrics", timeout=timeout)
        if status != 200 or not isinstance(body, bytes):
            return None
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def readyz(self):
        status, _ = self.request("GET", "/readyz", auth=False, timeout=5)
        return status

    def wait_ready(self, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise AssertionError(f"node {self.id} exited "
                                     f"{self.daemon.proc.returncode}:\n{self.log()}")
            if self.readyz() == 200:
                return
            time.sleep(POLL)
        raise AssertionError(f"node {self.id} not ready after {timeout}s:\n{self.log()}")

    def topics(self):
        """The topic names this node's local replica lists."""
        names, token = [], ""
        while True:
            path = "/v1/topics?limit=1000" + (f"&page_token={token}" if token else "")
            status, body = self.request("GET", path)
            assert status == 200, (status, body)
            names += [t["name"] for t in body["topics"]]
            token = body.get("next_page_token") or ""
            if not token:
                return names


class Cluster:
    def __init__(self, n, tls=False, security=True, secret=True, args=(), hosts=None,
                 prefixes=None):
        self.dir = tempfile.mkdtemp(prefix="tern-cluster-")
        self.security = security
        self.common = list(args)
        self.nodes = []
        for i in range(n):
            self.nodes.append(Node(self, i + 1, host=hosts[i] if hosts else "127.0.0.1",
                                   prefix=prefixes[i] if prefixes else ()))
        self.secret_file = None
        if secret:
            self.secret_file = os.path.join(self.dir, "cluster-secret")
            fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex() + "\n")
        self.certs = None
        if tls:
            self.certs = make_certs(os.path.join(self.dir, "certs"),
                                    [f"node{node.id}" for node in self.nodes])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def peers(self):
        """--peers: the initial voters (the nodes not added with --join)."""
        return ",".join(f"{n.id}@{n.raft_address}" for n in self.nodes if n.join is None)

    def add_joiner(self):
        """A node added later: --join with every current node's API
        address, not in --peers. Not started."""
        node = Node(self, len(self.nodes) + 1)
        node.join = ",".join(n.api_address for n in self.nodes)
        self.nodes.append(node)
        if self.certs is not None:
            self.certs[f"node{node.id}"] = issue_cert(os.path.join(self.dir, "certs"),
                                                      f"node{node.id}")
        return node

    def args_for(self, node):
        a = [f"--join={node.join}" if node.join is not None else f"--peers={self.peers()}"]
        if self.secret_file is not None:
            a.append(f"--cluster-secret-file={self.secret_file}")
        if not self.security:
            a += ["--security-enabled=false", "--allow-insecure-cluster"]
        if self.certs is not None:
            cert, key = self.certs[f"node{node.id}"]
            a += [f"--raft-tls-cert={cert}", f"--raft-tls-key={key}",
                  f"--raft-tls-ca={self.certs['ca']}"]
        return a + self.common

    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["TERN_ADMIN_PASSWORD"] = PASSWORD
        return env

    def start(self, wait=True):
        for node in self.nodes:
            node.start()
        if wait:
            self.wait_ready()
        return self

    def start_with_files(self, **files):
        """Start every node with each variable named in files set to that
        file in the node's own directory (a ternd-test hook's file:
        TERN_TEST_..._FILE="name"), then wait until all are ready."""
        for node in self.nodes:
            env = self.env()
            for name, file in files.items():
                env[name] = os.path.join(node.dir, file)
            node.start(env=env)
        self.wait_ready()
        return self

    def wait_ready(self, nodes=None, timeout=90):
        for node in nodes or self.nodes:
            node.wait_ready(timeout)

    def running(self):
        return [n for n in self.nodes if n.running()]

    def wait_alive(self, n, timeout=60):
        """Wait until every running node's own /v1/cluster/members marks n
        members alive: each node answers from its own copy of the
        metastore. The metastore clamps a new topic's replication factor
        (default 3) to the members alive when it applies the create, so a
        topic made before the members registered gets a smaller factor."""
        for node in self.running():
            wait_until(f"node {node.id} seeing {n} alive members",
                       lambda x=node: x.alive_members() == n, timeout, POLL)

    def find_leader(self, nodes=None, timeout=60):
        """The metastore leader among nodes (default: the running ones):
        the node that /v1/cluster/members, asked of itself, marks leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in [n for n in (nodes or self.running()) if n.running()]:
                status, body = n.request("GET", "/v1/cluster/members", timeout=5)
                if status == 200 and isinstance(body, dict):
                    for m in body.get("members", []):
                        if m.get("leader") is True and str(m.get("id")) == str(n.id):
                            return n
            time.sleep(POLL)
        raise AssertionError("no metastore leader found:\n" + self.logs())

    def logs(self):
        return "".join(f"--- node {n.id} ---\n{n.log()}" for n in self.nodes)

    def stop(self, timeout=60, drain=None):
        """Stop every running node gracefully, all at once (SIGTERM, by
        PID: one at a time, a last node still leading would wait up to an
        election timeout for voters that are gone; drain as Node.stop);
        {node id: exit status, None for one still running after timeout
        seconds}."""
        codes = {}

        def stop(node):
            try:
                codes[node.id] = node.stop(timeout=timeout, drain=drain)
            except subprocess.TimeoutExpired:
                codes[node.id] = None

        threads = [threading.Thread(target=stop, args=(n,)) for n in self.running()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return codes

    def close(self):
        """SIGKILL every node still running (by PID) and remove the
        directory: nothing reads the data after, and a graceful stop here
        (seconds per node: the drain, the leadership handover) checked
        nothing, its exit status unread; a test whose point is a clean
        stop calls stop and checks the statuses itself."""
        try:
            for node in self.running():
                node.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def run_ternd(*args, env=None, timeout=60):
    """ternd run to its exit (for the refusals): CompletedProcess."""
    return subprocess.run([daemon_mod.TERND, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def wait_until(what, fn, timeout=60, interval=0.2):
    """fn's first true value, polled every interval for at most timeout
    seconds; AssertionError naming what (and fn's last value) after."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(interval)


class ClusterTest(unittest.TestCase):
    """A test case that makes clusters, closes them at the end, and shows
    every node's log when it fails. A class whose tests are about one
    setting on purpose (e.g. replication factor 1) lists its flags in
    node_args: every node of its clusters gets them first."""

    node_args = ()

    def make(self, n, **kw):
        if self.node_args:
            kw["args"] = [*self.node_args, *kw.get("args", ())]
        c = Cluster(n, **kw)
        self.addCleanup(c.close)
        self.addCleanup(self._dump_on_failure, c)
        return c

    def stop_all(self, c):
        """Every node of c stopped gracefully, all at once (Cluster.stop),
        each asserted running and exiting 0 (its log shown if not)."""
        codes = c.stop()
        self.assertEqual(sorted(codes), sorted(n.id for n in c.nodes), "nodes not running")
        for node in c.nodes:
            self.assertEqual(codes[node.id], 0, f"node {node.id}:\n{node.log()[-4000:]}")

    def shared(self, n=3):
        """The class's one cluster of n nodes (node_args first, as make
        gives), started with every member alive by the first case that asks
        and closed after the class's last case: for cases that only make
        topics of their own names and leave every node running, so that
        each does not start a cluster of its own (seconds a case). Its
        nodes' logs are shown when a case that used it fails."""
        cls = type(self)
        c = cls.__dict__.get("_shared_cluster")
        if c is None:
            c = Cluster(n, args=list(self.node_args))
            try:
                c.start()
                c.wait_alive(n)
            except BaseException:
                sys.stderr.write(c.logs())
                c.close()
                raise
            cls._shared_cluster = c
            cls.addClassCleanup(cls._close_shared)
        if len(c.nodes) != n or len(c.running()) != n:
            raise AssertionError(f"the shared cluster has {len(c.running())} of "
                                 f"{len(c.nodes)} nodes running, {n} asked:\n{c.logs()}")
        self.addCleanup(self._dump_on_failure, c)
        return c

    @classmethod
    def _close_shared(cls):
        c = cls.__dict__.get("_shared_cluster")
        if c is not None:
            cls._shared_cluster = None
            c.close()

    def _dump_on_failure(self, c):
        outcome = getattr(self, "_outcome", None)
        result = getattr(outcome, "result", None)
        errors = list(getattr(result, "errors", [])) + list(getattr(result, "failures", []))
        if any(test is self for test, _ in errors):
            sys.stderr.write(c.logs())


class OnePartition:
    """Helpers of a ClusterTest about partition 0 of one replicated topic
    (a class attribute topic; factor replicas) on nodes that all hold a
    replica: how a node shows it, waiting for its whole ISR, a clean
    election. isr_timeout and elect_timeout: how long those may take."""

    topic = None
    replicas = 3
    client = {"X-Tern-Client": "cluster-test"}
    isr_timeout = 120
    elect_timeout = 120

    def part(self, node):
        """Partition 0 of the topic as node's GET /v1/topics/{t} shows it
        (None: no answer)."""
        status, body = node.request("GET", f"/v1/topics/{self.topic}")
        if status != 200 or not isinstance(body, dict) or not body.get("partition_stats"):
            return None
        return body["partition_stats"][0]

    def node(self, c, node_id):
        return next(n for n in c.nodes if str(n.id) == str(node_id))

    def in_sync_everywhere(self, c):
        """Wait until every running node shows the partition's whole
        replica set in its ISR, under one leader."""
        def whole():
            parts = [self.part(n) for n in c.nodes if n.running()]
            if not parts or any(p is None or not p.get("leader") for p in parts):
                return False
            want = sorted(parts[0].get("replicas", []))
            return len(want) == self.replicas and all(
                sorted(p.get("isr", [])) == want and p["leader"] == parts[0]["leader"]
                for p in parts)
        wait_until(f"{self.topic}/0 with its whole ISR under one leader on every node", whole,
                   timeout=self.isr_timeout, interval=0.5)

    def elect(self, c, via, node):
        """A clean election of node, once the whole ISR is there on every
        running node (again while refused for a member that fell out
        meanwhile); returns once every running node sees it lead."""
        def attempt():
            self.in_sync_everywhere(c)
            s, b = via.request("POST", f"/v1/topics/{self.topic}/partitions/0/leader",
                               {"node": str(node.id)}, headers=self.client)
            return (s, b) if s == 200 else None
        s, b = wait_until(f"node {node.id} elected", attempt, timeout=self.elect_timeout)
        if b.get("leader") != str(node.id):
            raise AssertionError(f"node {node.id} elected, but the answer says {b}")
        wait_until(f"every node sees node {node.id} lead",
                   lambda: all((self.part(n) or {}).get("leader") == str(node.id)
                               for n in c.nodes if n.running()), timeout=60)


def main(options=(), configure=None):
    """The command line of every test file here: --ternd PATH (the ternd
    the nodes run), the file's own options ((flag, argparse keywords)
    pairs), then unittest's arguments; the tests of __main__ run verbosely.
    configure(args), when given, sees the parsed options first."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    for flag, kwargs in options:
        ap.add_argument(flag, **kwargs)
    args, rest = ap.parse_known_args()
    set_ternd(args.ternd)
    if configure is not None:
        configure(args)
    unittest.main(module="__main__", argv=[sys.argv[0], "-v", *rest])
