#!/usr/bin/env python3
"""Checks of deploy/: the container image definition, the Kubernetes
manifests and the Helm chart, the Prometheus rules and the Grafana
dashboard (ctest label `deploy`).

- Containerfile: read statically (no container runtime here): two stages,
  both FROM debian:12; the runtime stage's packages cover the NEEDED
  libraries of the ternd (and ternctl, when built) this tree built, as
  dpkg says; every package exists in Debian (apt-cache show); the user is
  not root; no ADD of a URL, no curl or wget; a VOLUME for the data; no
  HEALTHCHECK; ENV names are ternd options; the entrypoint script's
  StatefulSet logic, run with a stub ternd, and with three real members
  (their DNS names from a private /etc/hosts: unshare -m, as root; one
  re-created at another IP under its name rejoins), and
  with a read-only root file system; the preStop drain command against a
  live node (once the tree builds ternctl).
- Chart and manifests: deploy/helm/tern rendered by render.py (helm is not
  in Debian 12) equals deploy/kubernetes/*.yaml in substance; names,
  selectors, ports against ternd's defaults from `ternd --help`, probes,
  preStop drain, security context, Secrets referenced and mounted (never
  inline), the PVC template, the PDB, the NetworkPolicy's fences; the
  renderer refuses what it does not understand.
- Monitoring: one real ternd (a one-member cluster, so the dispatcher's
  series exist too) is scraped at its --metrics-address: `promtool check
  metrics` on the scrape; `promtool check rules` on the alerts; every
  metric name (and label value) the rules and the dashboard use is in the
  scrape; the dashboard's expressions as recording rules pass `promtool
  check rules`; `promtool test rules` makes every alert fire.
"""
import argparse
import base64
import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
sys.path.insert(0, HERE)

import daemon as daemon_mod  # noqa: E402
import harness  # noqa: E402
import render  # noqa: E402
from daemon import Daemon  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")
CONTAINERFILE = os.path.join(DEPLOY, "container", "Containerfile")
ENTRYPOINT = os.path.join(DEPLOY, "container", "tern-entrypoint.sh")
CHART = os.path.join(DEPLOY, "helm", "tern")
MANIFESTS = os.path.join(DEPLOY, "kubernetes")
ALERTS = os.path.join(DEPLOY, "prometheus", "tern-alerts.yml")
ALERT_TESTS = os.path.join(DEPLOY, "prometheus", "tern-alerts.test.yml")
PROM_CONFIG = os.path.join(DEPLOY, "prometheus", "prometheus.example.yml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "tern-dashboard.json")

TERNCTL = None  # path of a built ternctl, or None when the tree has none yet

# TERN_ variables that are not ternd options: the entrypoint's, ternctl's
# connection, and the two secrets ternd reads from its environment.
ENTRYPOINT_VARS = {"TERN_REPLICAS", "TERN_PEER_SERVICE", "TERN_HTTP_PORT", "TERN_RAFT_PORT",
                   "TERN_RAFT_TLS_DIR", "TERN_PEER_WAIT", "TERN_READY_WAIT"}
TERNCTL_VARS = {"TERN_URL", "TERN_USER", "TERN_PASSWORD", "TERN_PASSWORD_FILE"}
SECRET_VARS = {"TERN_CLUSTER_SECRET", "TERN_ADMIN_PASSWORD", "TERN_PASSWORD"}


def ternd_help():
    """{option name: default text} from `ternd --help`."""
    out = subprocess.run([daemon_mod.TERND, "--help"], capture_output=True, text=True,
                         timeout=30)
    opts = {}
    for m in re.finditer(r"^  --([a-z0-9-]+)(?: [^(\n]*)? \(default ([^;)]*)", out.stdout, re.M):
        opts[m.group(1)] = m.group(2)
    if len(opts) < 50:
        raise AssertionError(f"ternd --help lists only {len(opts)} options:\n{out.stdout}")
    return opts


def default_port(opts, name):
    return int(opts[name].rsplit(":", 1)[1])


def is_option_var(var, opts):
    return var.startswith("TERN_") and var[5:].lower().replace("_", "-") in opts


# --- the Containerfile -------------------------------------------------------


def instructions(path):
    """[(stage index, INSTRUCTION, argument text)], continuation lines
    joined, comments dropped."""
    out, buf, stage = [], "", -1
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not buf and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if buf and line.lstrip().startswith("#"):
                continue  # a comment inside a continued instruction
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            word, _, rest = buf.strip().partition(" ")
            word = word.upper()
            if word == "FROM":
                stage += 1
            out.append((stage, word, rest.strip()))
            buf = ""
    if buf:
        raise AssertionError(f"{path} ends inside a continued line")
    return out


def apt_packages(run):
    """The packages of every `apt-get install` in a RUN line."""
    pkgs = []
    for part in re.split(r"&&|;", run):
        words = part.split()
        if "apt-get" in words and "install" in words:
            pkgs += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return pkgs


def install_deps_packages():
    with open(os.path.join(ROOT, "scripts", "install-deps.sh")) as f:
        text = f.read()
    m = re.search(r"^packages=\((.*?)^\)", text, re.M | re.S)
    return set(m.group(1).split())


def needed_packages(binary):
    """{soname: Debian package} of a binary's NEEDED entries, through ldd
    and dpkg -S."""
    dyn = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True)
    sonames = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn.stdout)
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True)
    where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd.stdout, re.M))
    cands = {}
    for so in sonames:
        if so not in where:
            raise AssertionError(f"ldd does not resolve {so} of {binary}:\n{ldd.stdout}")
        # dpkg records one spelling: with merged /usr, /lib/... or /usr/lib/...,
        # the symlink ldd names or the file it points to.
        c = []
        for p in (where[so], os.path.realpath(where[so])):
            c += [p, p[4:] if p.startswith("/usr/") else "/usr" + p]
        cands[so] = c
    # One dpkg -S for all: lines "package[:arch]: path"; paths it does not
    # know only go to stderr.
    r = subprocess.run(["dpkg", "-S", *{p for c in cands.values() for p in c}],
                       capture_output=True, text=True, timeout=120)
    owner = {}
    for line in r.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        owner[path.strip()] = pkg.split(":", 1)[0].split(",")[0].strip()
    out = {}
    for so, c in cands.items():
        found = [owner[p] for p in c if p in owner]
        if not found:
            raise AssertionError(f"dpkg -S knows no package holding {so} of {binary} ({c})")
        out[so] = found[0]
    return out


class Containerfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ins = instructions(CONTAINERFILE)
        cls.opts = ternd_help()

    def stage(self, n):
        return [(w, a) for s, w, a in self.ins if s == n]

    def test_stages_from_debian_12(self):
        froms = [a for _, w, a in self.ins if w == "FROM"]
        self.assertEqual(len(froms), 2, froms)
        self.assertEqual(froms[0].split(), ["debian:12", "AS", "build"])
        self.assertEqual(froms[1].split()[0], "debian:12")
        # The runtime stage takes the binaries from the build stage only.
        copies = [a for w, a in self.stage(1) if w == "COPY"]
        self.assertTrue(copies and all(a.startswith("--from=build ") for a in copies), copies)

    def test_nothing_fetched_but_debian_packages(self):
        for _, w, a in self.ins:
            self.assertNotEqual(w, "ADD", f"ADD {a}: use COPY of the build context")
            self.assertNotRegex(a, r"\b(curl|wget)\b", f"{w} {a}")
            self.assertNotRegex(a, r"\|\s*(ba)?sh\b", f"{w} {a}: a pipe into a shell")
            self.assertNotRegex(a, r"https?://", f"{w} {a}: a URL")

    def test_build_context_leaves_out_builds_and_keys(self):
        with open(os.path.join(ROOT, ".dockerignore")) as f:
            ignored = {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}
        for entry in ("build*", "data", "cluster-data", ".git", "**/node_modules"):
            self.assertIn(entry, ignored)
        copies = [a for s, w, a in self.ins if w == "COPY" and s == 0]
        self.assertEqual(copies, [". /src"])

    def test_packages_exist_in_debian(self):
        self.assertIsNotNone(shutil.which("apt-cache"), "apt-cache is needed to check packages")
        pkgs = [p for _, w, a in self.ins if w == "RUN" for p in apt_packages(a)]
        self.assertGreater(len(pkgs), 10)
        # apt-cache policy names each package with a Candidate line (none
        # for a name Debian does not have); one call for all of them.
        r = subprocess.run(["apt-cache", "policy", *pkgs], capture_output=True, text=True,
                           timeout=120)
        known = {m.group(1): m.group(2) for m in
                 re.finditer(r"^(\S+):\n(?:  .*\n)*?  Candidate: (\S+)", r.stdout, re.M)}
        for p in pkgs:
            self.assertNotIn(known.get(p, "(none)"), ("(none)",),
                             f"Debian has no package {p} (apt-cache policy {p})")

    def test_build_stage_has_the_build_packages(self):
        build = {p for w, a in self.stage(0) if w == "RUN" for p in apt_packages(a)}
        libs = {p for p in install_deps_packages() if p.startswith("lib") and p.endswith("-dev")}
        libs -= {"libclang-rt-14-dev"}  # sanitizers and fuzzing only
        self.assertEqual(libs - build, set(), "install-deps.sh libraries the image's build lacks")
        self.assertTrue({"build-essential", "cmake", "pkg-config"} <= build)

    def test_runtime_libraries_cover_needed(self):
        runtime = {p for w, a in self.stage(1) if w == "RUN" for p in apt_packages(a)}
        self.assertFalse([p for p in runtime if p.endswith("-dev")], runtime)
        binaries = [daemon_mod.TERND] + ([TERNCTL] if TERNCTL else [])
        for b in binaries:
            for so, pkg in needed_packages(b).items():
                if pkg.startswith("libc6"):
                    continue  # the base image's C library
                self.assertIn(pkg, runtime, f"{os.path.basename(b)} needs {so} from {pkg}")
        # ... and both binaries are built and installed.
        text = " ".join(a for w, a in self.stage(0) if w == "RUN")
        self.assertIn("--target ternd ternctl", text)
        for name in ("ternd", "ternctl", "tern-entrypoint"):
            self.assertIn(f"/out/usr/bin/{name}", text)

    def test_runtime_user_volume_entrypoint(self):
        final = self.stage(1)
        users = [a for w, a in final if w == "USER"]
        self.assertTrue(users, "no USER in the runtime stage")
        uid = users[-1].split(":")[0]
        self.assertNotIn(uid, ("root", "0"))
        self.assertEqual(uid, "10001")
        self.assertIn(["/var/lib/tern"], [json.loads(a) for w, a in final if w == "VOLUME"])
        self.assertFalse([a for w, a in final if w == "HEALTHCHECK"])
        entry = [json.loads(a) for w, a in final if w == "ENTRYPOINT"]
        self.assertEqual(entry, [["/usr/bin/tern-entrypoint"]])  # exec form: signals reach it
        env = " ".join(a for w, a in final if w == "ENV")
        names = re.findall(r"(TERN_[A-Z_]+)=", env)
        self.assertIn("TERN_DATA_PATH", names)
        for n in names:
            self.assertTrue(is_option_var(n, self.opts), f"ENV {n} is no ternd option")
        self.assertIn("TERN_DATA_PATH=/var/lib/tern", env)
        exposed = " ".join(a for w, a in final if w == "EXPOSE").split()
        for opt in ("tcp-address", "http-address"):
            self.assertIn(f"{default_port(self.opts, opt)}/tcp", exposed)
        self.assertIn(f"{default_port(self.opts, 'http-address')}/udp", exposed)
        self.assertIn(f"{default_port(self.opts, 'raft-address')}/tcp", exposed)


class Entrypoint(unittest.TestCase):
    """tern-entrypoint.sh with a stub ternd that writes its arguments."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-entry-")
        self.out = os.path.join(self.dir, "args")
        self.stub = os.path.join(self.dir, "ternd")
        with open(self.stub, "w") as f:
            f.write(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > {self.out}\n")
        os.chmod(self.stub, 0o755)
        self.data = os.path.join(self.dir, "data")
        os.makedirs(os.path.join(self.data, "meta"))
        self.tls = os.path.join(self.dir, "tls")
        os.makedirs(self.tls)
        # A getent that stands in for the peer Service's DNS: every name
        # but *.invalid resolves, to the pod's own IP.
        self.bindir = os.path.join(self.dir, "bin")
        os.makedirs(self.bindir)
        with open(os.path.join(self.bindir, "getent"), "w") as f:
            f.write("#!/bin/sh\ncase \"$2\" in *.invalid) exit 2 ;; esac\n"
                    "echo \"$POD_IP $2\"\n")
        os.chmod(os.path.join(self.bindir, "getent"), 0o755)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_entry(self, *args, hosts=None, **env):
        """The entrypoint run with args and env; with hosts (the text of
        an /etc/hosts), in a mount namespace of its own (unshare -m, as
        root) where that is /etc/hosts, for the names its /readyz looks
        resolve (bash's /dev/tcp asks the system resolver, not getent)."""
        e = {"PATH": self.bindir + ":" + os.environ["PATH"], "TERND": self.stub,
             "TERN_DATA_PATH": self.data}
        e.update(env)
        if os.path.exists(self.out):
            os.unlink(self.out)
        cmd = ["bash", ENTRYPOINT, *args]
        if hosts is not None:
            if shutil.which("unshare") is None or os.geteuid() != 0:
                raise AssertionError("this test needs root and unshare (util-linux) for a "
                                     "private /etc/hosts")
            path = os.path.join(self.dir, "hosts")
            with open(path, "w") as f:
                f.write(hosts)
            cmd = ["unshare", "-m", "--", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
                   path, *cmd]
        r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=60)
        argv = None
        if os.path.exists(self.out):
            with open(self.out) as f:
                argv = f.read().splitlines()
        return r, argv

    def member(self, **extra):
        env = {"HOSTNAME": "tern-1", "TERN_REPLICAS": "3", "TERN_PEER_SERVICE": "tern-peers",
               "POD_IP": "10.1.2.3"}
        env.update(extra)
        return env

    def test_lone_node_passes_arguments_through(self):
        r, argv = self.run_entry("--log-level", "debug", HOSTNAME="tern-0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(argv, ["--log-level", "debug"])

    def test_restarted_member_joins_with_its_own_settings(self):
        open(os.path.join(self.data, "meta", "metadata1"), "w").close()
        for f in ("ca.crt", "tern-1.crt", "tern-1.key", "tls.crt", "tls.key"):
            open(os.path.join(self.tls, f), "w").close()
        r, argv = self.run_entry("--log-level=info", **self.member(TERN_RAFT_TLS_DIR=self.tls))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(argv, [
            "--node-id", "2", "--advertise-address", "tern-1.tern-peers:4151",
            "--raft-address", "tern-1.tern-peers:4153",
            "--raft-tls-cert", f"{self.tls}/tern-1.crt", "--raft-tls-key",
            f"{self.tls}/tern-1.key", "--raft-tls-ca", f"{self.tls}/ca.crt",
            "--join", "tern-0.tern-peers:4151,tern-2.tern-peers:4151", "--log-level=info"])

    def test_first_start_bootstraps_with_peers(self):
        # The stub getent resolves every name; /readyz of the others is
        # not reachable (the system resolver knows no such names), so
        # this is the cluster's first start, once no member was ready for
        # TERN_READY_WAIT seconds.
        for f in ("ca.crt", "tls.crt", "tls.key"):
            open(os.path.join(self.tls, f), "w").close()
        start = time.monotonic()
        r, argv = self.run_entry(**self.member(
            HOSTNAME="db-0", TERN_PEER_SERVICE="db-peers", TERN_RAFT_PORT="5153",
            TERN_HTTP_PORT="5151", TERN_RAFT_TLS_DIR=self.tls, TERN_READY_WAIT="2"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreaterEqual(time.monotonic() - start, 2)
        self.assertIn("no other member ready within 2s: the cluster's first start", r.stderr)
        self.assertEqual(argv, [
            "--node-id", "1", "--advertise-address", "db-0.db-peers:5151",
            "--raft-address", "db-0.db-peers:5153",
            "--raft-tls-cert", f"{self.tls}/tls.crt", "--raft-tls-key", f"{self.tls}/tls.key",
            "--raft-tls-ca", f"{self.tls}/ca.crt",
            "--peers", "1@db-0.db-peers:5153,2@db-1.db-peers:5153,3@db-2.db-peers:5153"])

    def test_a_member_ready_a_moment_later_is_joined(self):
        # A pod whose volume was lost while the metastore elects a new
        # leader: no other member answers /readyz 200 at the first look
        # (503 here for 3 s, as a member without a leader does), one does
        # a moment later. The entrypoint looks again before it takes the
        # empty volume for the cluster's first start, so it joins.
        # Before: --peers, a second cluster's bootstrap.
        ready_at = time.monotonic() + 3

        class Readyz(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if time.monotonic() >= ready_at else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Readyz)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            r, argv = self.run_entry(
                hosts="127.0.0.1 localhost tern-0.tern-peers tern-1.tern-peers tern-2.tern-peers\n",
                **self.member(POD_IP="127.0.0.1", TERN_HTTP_PORT=str(srv.server_port)))
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertEqual(r.returncode, 0, r.stderr)
        print(f"\n{r.stderr}", end="")
        self.assertIsNotNone(argv, r.stderr)
        self.assertNotIn("--peers", argv)
        self.assertEqual(argv[-2:], ["--join", f"tern-0.tern-peers:{srv.server_port},"
                                               f"tern-2.tern-peers:{srv.server_port}"])

    def test_given_options_are_kept(self):
        open(os.path.join(self.data, "meta", "metadata2"), "w").close()
        r, argv = self.run_entry("--node-id=7", "--join", "x:1", **self.member())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(argv, ["--advertise-address", "tern-1.tern-peers:4151",
                                "--raft-address", "tern-1.tern-peers:4153", "--node-id=7", "--join",
                                "x:1"])

    def test_refusals_name_the_problem(self):
        cases = [
            (self.member(TERN_REPLICAS="three"), "TERN_REPLICAS must be a positive number"),
            (self.member(TERN_READY_WAIT="15s"), "TERN_READY_WAIT must be a number of seconds"),
            (self.member(TERN_PEER_WAIT="5m"), "TERN_PEER_WAIT must be a number of seconds"),
            (self.member(HOSTNAME="tern"), "does not end in -<ordinal>"),
            (self.member(HOSTNAME="tern-3"), "pod ordinal 3 is not below TERN_REPLICAS=3"),
            (self.member(POD_IP=""), "POD_IP"),
            (self.member(TERN_RAFT_TLS_DIR=self.tls), "has no readable tls.crt"),
            (self.member(TERN_PEER_WAIT="0", TERN_PEER_SERVICE="no-such-service.invalid"),
             "tern-1.no-such-service.invalid does not resolve to this pod's IP 10.1.2.3 "
             "after 0s"),
            # The Raft name given: only the peers' names are waited for.
            (self.member(TERN_PEER_WAIT="0", TERN_PEER_SERVICE="no-such-service.invalid",
                         TERN_READY_WAIT="0", argv=["--raft-address", "x.example:4153"]),
             "tern-0.no-such-service.invalid does not resolve after 0s"),
        ]
        for env, needle in cases:
            r, argv = self.run_entry(*env.pop("argv", []), **env)
            self.assertNotEqual(r.returncode, 0, env)
            self.assertIsNone(argv, f"ternd was started for {env}")
            self.assertIn(needle, r.stderr, env)


class ReadOnlyRoot(unittest.TestCase):
    """ternd as the image runs it, through the entrypoint, with the root
    file system read-only (remounted so in a mount namespace of its own:
    /tmp too) and its data on a tmpfs (/dev/shm) as the volume: it starts,
    takes a channel, a publish and a /v1 topic, and stops cleanly."""

    def test_runs_with_a_read_only_root(self):
        if shutil.which("unshare") is None or os.geteuid() != 0:
            raise AssertionError("this test needs root and unshare (util-linux)")
        shm = tempfile.mkdtemp(prefix="tern-ro-", dir="/dev/shm")
        try:
            ro = ["unshare", "-m", "--", "sh", "-c",
                  'mount --make-rprivate / && mount -o remount,bind,ro / && '
                  'if touch /tmp/tern-ro-probe 2>/dev/null; then echo "/tmp writable" >&2; '
                  'exit 9; fi; shift; exec bash "$0" "$@"', ENTRYPOINT]
            # Daemon puts the ternd path first (for a prefix that execs it);
            # the entrypoint finds ternd through TERND instead, so the
            # script shifts the path away.
            env = dict(os.environ, TERND=daemon_mod.TERND, TERN_ADMIN_PASSWORD="ro-admin")
            env.pop("TERN_REPLICAS", None)
            d = Daemon(os.path.join(shm, "data"), "--raft-address=127.0.0.1:0", env=env,
                       prefix=ro)
            try:
                self.exercise(d)
            finally:
                rc = d.stop()
            self.assertEqual(rc, 0, d.log())
            self.assertNotIn("Read-only file system", d.log())
        finally:
            shutil.rmtree(shm, ignore_errors=True)

    def exercise(self, d):
        d.wait_for("root user admin created")
        auth = {"Authorization": harness.basic("admin", "ro-admin"),
                "Content-Type": "application/json"}
        for method, path, body, headers, want in (
                ("POST", "/topic/create?topic=ro", None, {}, 200),
                ("POST", "/channel/create?topic=ro&channel=c", None, {}, 200),
                ("POST", "/pub?topic=ro", b"m", {}, 200),
                ("POST", "/v1/topics", b'{"name":"rov1","partitions":2}', auth, 201)):
            c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=30)
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            out = r.read()
            c.close()
            self.assertEqual(r.status, want, f"{method} {path}: {out!r}\n{d.log()}")


class EntrypointCluster(unittest.TestCase):
    """Three real ternd members started by the entrypoint as a StatefulSet
    would start them: the same ports on three addresses (127.0.0.11-13
    for the pods' IPs), and the pods' DNS names t-N.t-peers from an
    /etc/hosts bind-mounted in a mount namespace of their own (unshare -m,
    as root), so nothing outside sees it. The first start bootstraps with
    --peers: each member's hosts file has only its own name until all
    three said so (a member that finds two others ready first joins them
    instead, right for a late pod but not what this start is about); a
    restarted member and a member whose volume was emptied
    come back with --join; a re-created pod comes back at a new IP under
    its name (the hosts file rewritten in place, which every member's bind
    mount shows) and takes part in the metastore again."""

    N = 3
    SECRET = "entrypoint-cluster-secret-0123456789abcdef"
    PASSWORD = "entrypoint-admin"

    @classmethod
    def setUpClass(cls):
        if shutil.which("unshare") is None or os.geteuid() != 0:
            raise AssertionError("this test needs root and unshare (util-linux) for a private "
                                 "/etc/hosts")
        cls.dir = tempfile.mkdtemp(prefix="tern-entry-cluster-")
        with open("/etc/hosts") as f:
            cls.base_hosts = f.read()
        cls.ips = {i: f"127.0.0.{11 + i}" for i in range(cls.N)}
        cls.write_hosts(only_own=True)
        cls.http, cls.raft = harness.free_port(), harness.free_port()
        cls.procs = {}
        try:
            for i in range(cls.N):
                cls.start(i)
            deadline = time.monotonic() + 60
            for i in range(cls.N):
                while "the cluster's first start, once every member's name" not in cls.log(i):
                    if cls.procs[i].poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(f"t-{i} did not choose the first start (exit "
                                             f"{cls.procs[i].poll()}):\n{cls.log(i)}")
                    time.sleep(0.1)
            cls.write_hosts()
            for i in range(cls.N):
                cls.wait_ready(i)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def write_hosts(cls, only_own=False):
        """Each member's hosts file: the pods' names at cls.ips (only its
        own with only_own), written in place (the same inode: the
        member's bind mount sees the change)."""
        for m in range(cls.N):
            with open(cls.hosts(m), "w") as f:
                f.write(cls.base_hosts + "".join(f"{cls.ips[i]} t-{i}.t-peers\n"
                                                 for i in range(cls.N)
                                                 if not only_own or i == m))

    @classmethod
    def hosts(cls, i):
        return os.path.join(cls.dir, f"hosts{i}")

    @classmethod
    def tearDownClass(cls):
        for i in list(cls.procs):
            cls.stop(i)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def start(cls, i):
        env = {"PATH": os.environ["PATH"], "HOSTNAME": f"t-{i}", "TERND": daemon_mod.TERND,
               "TERN_REPLICAS": str(cls.N), "TERN_PEER_SERVICE": "t-peers",
               "POD_IP": cls.ips[i], "TERN_HTTP_PORT": str(cls.http),
               "TERN_RAFT_PORT": str(cls.raft), "TERN_PEER_WAIT": "60",
               "TERN_DATA_PATH": os.path.join(cls.dir, f"data{i}"),
               "TERN_HTTP_ADDRESS": f"{cls.ips[i]}:{cls.http}",
               "TERN_TCP_ADDRESS": f"{cls.ips[i]}:0",
               "TERN_CLUSTER_SECRET": cls.SECRET, "TERN_ADMIN_PASSWORD": cls.PASSWORD}
        log = open(os.path.join(cls.dir, f"t-{i}.log"), "a")
        # unshare and sh exec in place: the process id ends up ternd's.
        cls.procs[i] = subprocess.Popen(
            ["unshare", "-m", "--", "sh", "-c",
             'mount --bind "$0" /etc/hosts && exec bash "$1"', cls.hosts(i), ENTRYPOINT],
            env=env, stdout=log, stderr=log)
        log.close()

    @classmethod
    def stop(cls, i):
        p = cls.procs.pop(i)
        if p.poll() is None:
            p.terminate()
        try:
            return p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=30)
            return None

    @classmethod
    def log(cls, i):
        with open(os.path.join(cls.dir, f"t-{i}.log")) as f:
            return f.read()

    @classmethod
    def request(cls, i, path, auth=False):
        headers = {"Authorization": harness.basic("admin", cls.PASSWORD)} if auth else {}
        c = http.client.HTTPConnection(cls.ips[i], cls.http, timeout=5)
        try:
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            return r.status, r.read()
        except OSError:
            return None, b""
        finally:
            c.close()

    @classmethod
    def wait_ready(cls, i, timeout=90):
        deadline = time.monotonic() + timeout
        while cls.request(i, "/readyz")[0] != 200:
            if cls.procs[i].poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"t-{i} is not ready (exit {cls.procs[i].poll()}):\n"
                                     f"{cls.log(i)}")
            time.sleep(0.2)

    def alive(self, i):
        """The API addresses of the members t-i sees alive; the answer
        instead while it is not 200 (401 until the root user's creation
        has committed)."""
        status, body = self.request(i, "/v1/cluster/members", auth=True)
        if status != 200:
            return (status, body)
        return sorted(m["api_addr"] for m in json.loads(body)["members"]
                      if m["status"] == "alive")

    def wait_alive(self, i, want, timeout=60):
        deadline = time.monotonic() + timeout
        while self.alive(i) != want:
            self.assertLess(time.monotonic(), deadline, f"members seen by t-{i}: "
                            f"{self.alive(i)}, not {want}")
            time.sleep(0.3)

    def test_bootstrap_restart_and_new_volume(self):
        names = sorted(f"t-{i}.t-peers:{self.http}" for i in range(self.N))
        for i in range(self.N):
            self.assertIn(f"tern-entrypoint: member {i + 1} of 3: --node-id {i + 1} "
                          f"--advertise-address t-{i}.t-peers:{self.http} --raft-address "
                          f"t-{i}.t-peers:{self.raft} --peers 1@t-0.t-peers:{self.raft},"
                          f"2@t-1.t-peers:{self.raft},3@t-2.t-peers:{self.raft}", self.log(i))
        self.wait_alive(0, names)
        # A restart (Raft state on its volume) comes back with --join.
        self.assertEqual(self.stop(1), 0, self.log(1))
        self.start(1)
        self.wait_ready(1)
        self.assertIn(f"--join t-0.t-peers:{self.http},t-2.t-peers:{self.http}", self.log(1))
        # An emptied volume while the others run: --join too (a ready
        # member answered), admitted again as the member it was.
        self.assertEqual(self.stop(2), 0, self.log(2))
        shutil.rmtree(os.path.join(self.dir, "data2"))
        # t-2 may have led the metastore: until the other two have elected
        # again neither answers /readyz. Started at once, t-2 looks again
        # for TERN_READY_WAIT (15 s) before it would take its empty
        # volume for the cluster's first start, and finds them ready.
        self.start(2)
        self.wait_ready(2)
        self.assertEqual(self.log(2).count("--join t-0.t-peers"), 1, self.log(2))
        self.assertNotIn("--peers", self.log(2).split("--node-id 3")[-1])
        self.wait_alive(2, names)
        # A re-created pod: t-1 comes back at another IP under its name.
        # Raft records the name, so the others dial the new IP, and a
        # metadata write made while it was away reaches it.
        self.assertEqual(self.stop(1), 0, self.log(1))
        self.ips[1] = "127.0.0.21"
        self.write_hosts()
        c = http.client.HTTPConnection(self.ips[0], self.http, timeout=10)
        try:
            c.request("POST", "/v1/topics", body=json.dumps({"name": "recreated",
                                                             "partitions": 1}),
                      headers={"Authorization": harness.basic("admin", self.PASSWORD),
                               "Content-Type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 201, r.read())
        finally:
            c.close()
        self.start(1)
        self.wait_ready(1)
        restart = self.log(1).split("--node-id 2")[-1]
        self.assertIn(f"metastore Raft listening on 127.0.0.21:{self.raft} (raft-address "
                      f"t-1.t-peers:{self.raft}", restart)
        self.assertNotIn("Raft configuration records node", restart)
        self.wait_alive(1, names)
        deadline = time.monotonic() + 30
        while True:
            status, body = self.request(1, "/v1/topics/recreated", auth=True)
            if status == 200:
                break
            self.assertLess(time.monotonic(), deadline, f"t-1 never saw the topic: {status} "
                            f"{body}\n{self.log(1)}")
            time.sleep(0.3)


# --- the chart and the manifests ----------------------------------------------


def load_docs(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def duration_s(text):
    m = re.fullmatch(r"([0-9]+)(s|m)", text)
    if not m:
        raise AssertionError(f"duration {text!r}")
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


class Chart(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.opts = ternd_help()
        cls.rendered = render.render_chart(CHART)
        cls.docs = load_docs("\n---\n".join(cls.rendered.values()))
        cls.kinds = by_kind(cls.docs)
        with open(os.path.join(CHART, "values.yaml")) as f:
            cls.values = yaml.safe_load(f)

    def test_plain_manifests_are_the_chart_with_defaults(self):
        files = sorted(n for n in os.listdir(MANIFESTS) if n.endswith(".yaml"))
        self.assertEqual(files, sorted(self.rendered))
        for name in files:
            with open(os.path.join(MANIFESTS, name)) as f:
                plain = load_docs(f.read())
            self.assertEqual(plain, load_docs(self.rendered[name]),
                             f"deploy/kubernetes/{name} differs from the chart's rendering")

    def test_objects_and_names(self):
        self.assertEqual(sorted(self.kinds), ["NetworkPolicy", "PodDisruptionBudget", "Service",
                                              "StatefulSet"])
        for d in self.docs:
            self.assertNotIn("namespace", d["metadata"], "manifests are namespace-agnostic")
            self.assertTrue(d["metadata"]["name"].startswith("tern"), d["metadata"])
        # Another release name renames everything, and nothing else keeps "tern-".
        other = load_docs("\n---\n".join(render.render_chart(
            CHART, "mq", ["storage.storageClassName=fast", "replicas=5"]).values()))
        names = sorted(d["metadata"]["name"] for d in other)
        self.assertEqual(names, ["mq", "mq", "mq", "mq", "mq-peers"])
        sts = by_kind(other)["StatefulSet"][0]
        self.assertEqual(sts["spec"]["serviceName"], "mq-peers")
        self.assertEqual(sts["spec"]["replicas"], 5)
        self.assertEqual(sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
                         "fast")
        env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        self.assertEqual(env["TERN_REPLICAS"]["value"], "5")
        self.assertEqual(env["TERN_PEER_SERVICE"]["value"], "mq-peers")
        self.assertEqual(env["TERN_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]["name"],
                         "mq-cluster-secret")
        self.assertNotIn("storageClassName",
                         self.sts()["spec"]["volumeClaimTemplates"][0]["spec"])

    def sts(self):
        return self.kinds["StatefulSet"][0]

    def pod(self):
        return self.sts()["spec"]["template"]

    def container(self):
        cs = self.pod()["spec"]["containers"]
        self.assertEqual(len(cs), 1)
        return cs[0]

    def services(self):
        return {s["metadata"]["name"]: s for s in self.kinds["Service"]}

    def named_ports(self):
        return {(p["name"]): (p["containerPort"], p["protocol"])
                for p in self.container()["ports"]}

    def test_statefulset(self):
        spec = self.sts()["spec"]
        labels = self.pod()["metadata"]["labels"]
        self.assertTrue(matches(spec["selector"]["matchLabels"], labels))
        self.assertIn(spec["podManagementPolicy"], ("Parallel", "OrderedReady"))
        # The choice is reasoned in a comment next to it.
        text = self.rendered["statefulset.yaml"]
        self.assertRegex(text, r"#.*podManagementPolicy: " + spec["podManagementPolicy"])
        self.assertEqual(spec["replicas"], self.values["replicas"])
        peers = self.services()[spec["serviceName"]]
        self.assertEqual(peers["spec"]["clusterIP"], "None")
        self.assertIs(peers["spec"]["publishNotReadyAddresses"], True)
        self.assertTrue(matches(peers["spec"]["selector"], labels))
        # One PVC per pod, mounted at the data path.
        vct = spec["volumeClaimTemplates"]
        self.assertEqual(len(vct), 1)
        self.assertEqual(vct[0]["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertEqual(vct[0]["spec"]["resources"]["requests"]["storage"],
                         self.values["storage"]["size"])
        mounts = {m["name"]: m for m in self.container()["volumeMounts"]}
        env = {e["name"]: e for e in self.container()["env"]}
        self.assertEqual(mounts[vct[0]["metadata"]["name"]]["mountPath"],
                         env["TERN_DATA_PATH"]["value"])
        self.assertEqual(env["TERN_DATA_PATH"]["value"], "/var/lib/tern")
        self.assertEqual(env["TERN_PEER_SERVICE"]["value"], spec["serviceName"])
        self.assertEqual(env["TERN_REPLICAS"]["value"], str(spec["replicas"]))
        self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")
        # The Raft address is left to the entrypoint, which gives the pod's
        # stable DNS name (<pod>.<serviceName>): no IP is pinned here, and
        # no caveat about re-created pods is left in the comments.
        args = self.container().get("args", []) + self.container().get("command", [])
        self.assertFalse([a for a in args if "raft-address" in a], args)
        self.assertNotIn("TERN_RAFT_ADDRESS", env)
        for name in ("statefulset.yaml",):
            self.assertNotIn("drops out of the", self.rendered[name])
        self.assertRegex(text, r"# .*Raft address is its pod's stable DNS name")
        with open(os.path.join(CHART, "values.yaml")) as f:
            self.assertNotIn("drops out of the metastore", f.read())
        self.assertIs(self.pod()["spec"]["enableServiceLinks"], False)
        self.assertIs(self.pod()["spec"]["automountServiceAccountToken"], False)

    def test_ports_match_ternd(self):
        nsq = default_port(self.opts, "tcp-address")
        http = default_port(self.opts, "http-address")
        raft = default_port(self.opts, "raft-address")
        ports = self.named_ports()
        self.assertEqual(ports["nsq"], (nsq, "TCP"))
        self.assertEqual(ports["http"], (http, "TCP"))
        self.assertEqual(ports["rpc"], (http, "UDP"))  # node RPC: the HTTP port over UDP
        self.assertEqual(ports["raft"], (raft, "TCP"))
        metrics = ports["metrics"][0]
        env = {e["name"]: e.get("value") for e in self.container()["env"]}
        for var, port in (("TERN_TCP_ADDRESS", nsq), ("TERN_HTTP_ADDRESS", http),
                          ("TERN_METRICS_ADDRESS", metrics)):
            self.assertEqual(env[var], f"0.0.0.0:{port}")
        self.assertEqual(env["TERN_HTTP_PORT"], str(http))
        self.assertEqual(env["TERN_RAFT_PORT"], str(raft))
        self.assertEqual(env["TERN_URL"], f"http://127.0.0.1:{http}")
        # Every TERN_ variable is a ternd option or one the entrypoint,
        # ternctl or ternd's secret handling reads.
        with open(ENTRYPOINT) as f:
            entry = f.read()
        for var in env:
            if var.startswith("TERN_") and not is_option_var(var, self.opts):
                self.assertIn(var, ENTRYPOINT_VARS | TERNCTL_VARS | SECRET_VARS, var)
            if var in ENTRYPOINT_VARS:
                self.assertIn(var, entry)
        # Services point at named container ports that exist, with the
        # same numbers and protocols.
        for svc in self.kinds["Service"]:
            for p in svc["spec"]["ports"]:
                self.assertIn(p["targetPort"], ports, svc["metadata"]["name"])
                self.assertEqual((p["port"], p["protocol"]), ports[p["targetPort"]])
        client = self.services()["tern"]
        self.assertEqual({p["targetPort"] for p in client["spec"]["ports"]}, {"nsq", "http"})

    def test_probes_and_drain(self):
        c = self.container()
        http = self.named_ports()["http"][0]
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                            ("startupProbe", "/healthz")):
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path, probe)
            self.assertIn(get["port"], ("http", http), probe)
        cmd = c["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(cmd[:3], ["ternctl", "drain", "--wait"])
        # --drain-timeout bounds the drain (ternctl's --timeout is its
        # bound per request); --wait gives up 10 s past the drain's bound.
        self.assertEqual(cmd[3], "--drain-timeout")
        grace = self.pod()["spec"]["terminationGracePeriodSeconds"]
        self.assertGreater(grace, duration_s(cmd[4]) + 10)
        if TERNCTL:
            r = subprocess.run([TERNCTL, "drain", "--help"], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            for flag in cmd[2:]:
                if flag.startswith("--"):
                    self.assertIn(flag, r.stdout, f"ternctl drain takes no {flag}")
        env = {e["name"]: e for e in c["env"]}
        self.assertIn("TERN_URL", env)
        self.assertIn("secretKeyRef", env["TERN_PASSWORD"]["valueFrom"])

    def test_prestop_drains_a_live_node(self):
        """The hook's command, with the container's ternctl variables,
        against a real ternd: it drains, the node exits 0, ternctl says 0,
        all within the grace period. Needs ternctl (branch ctl) and
        /v1/drain (branch drain) in the tree; CMake passes --ternctl once
        the ternctl target exists."""
        if TERNCTL is None:
            self.skipTest("this tree builds no ternctl yet (branches ctl and drain)")
        c = self.container()
        cmd = c["lifecycle"]["preStop"]["exec"]["command"]
        grace = self.pod()["spec"]["terminationGracePeriodSeconds"]
        env_spec = {e["name"]: e for e in c["env"]}
        self.assertEqual(env_spec["TERN_USER"]["value"], "admin")
        d_dir = tempfile.mkdtemp(prefix="tern-prestop-")
        try:
            d = Daemon(os.path.join(d_dir, "data"),
                       env=dict(os.environ, TERN_ADMIN_PASSWORD="prestop-admin"))
            d.wait_for("root user admin created")
            env = dict(os.environ, TERN_URL=f"http://127.0.0.1:{d.http_port}",
                       TERN_USER="admin", TERN_PASSWORD="prestop-admin")
            env.pop("TERN_PASSWORD_FILE", None)
            started = time.monotonic()
            r = subprocess.run([TERNCTL if cmd[0] == "ternctl" else cmd[0], *cmd[1:]], env=env,
                               capture_output=True, text=True, timeout=grace)
            self.assertEqual(r.returncode, 0, f"{r.stdout}{r.stderr}\n{d.log()}")
            self.assertEqual(d.proc.wait(timeout=max(1, grace - (time.monotonic() - started))),
                             0, d.log())
            d.stop()
        finally:
            shutil.rmtree(d_dir, ignore_errors=True)

    def test_security_context(self):
        c = self.container()["securityContext"]
        self.assertIs(c["runAsNonRoot"], True)
        self.assertIs(c["readOnlyRootFilesystem"], True)
        self.assertIs(c["allowPrivilegeEscalation"], False)
        self.assertEqual(c["capabilities"]["drop"], ["ALL"])
        pod = self.pod()["spec"]["securityContext"]
        self.assertIs(pod["runAsNonRoot"], True)
        users = [a for s, w, a in instructions(CONTAINERFILE) if w == "USER" and s == 1]
        self.assertEqual(str(pod["runAsUser"]), users[-1].split(":")[0])
        self.assertEqual(pod["fsGroup"], pod["runAsGroup"])
        # With a read-only root, only the data volume and /tmp take writes.
        vols = {v["name"]: v for v in self.pod()["spec"]["volumes"]}
        writable = [m["mountPath"] for m in self.container()["volumeMounts"]
                    if not m.get("readOnly")]
        self.assertEqual(sorted(writable), ["/tmp", "/var/lib/tern"])
        self.assertIn("emptyDir", vols["tmp"])

    def test_secrets_referenced_and_mounted(self):
        self.assertNotIn("Secret", self.kinds, "secret values never sit in the manifests")
        c = self.container()
        env = {e["name"]: e for e in c["env"]}
        for var in SECRET_VARS:
            self.assertNotIn("value", env[var], f"{var} must come from a Secret")
            ref = env[var]["valueFrom"]["secretKeyRef"]
            self.assertTrue(ref["name"].startswith("tern-") and ref["key"], ref)
        self.assertEqual(env["TERN_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]["name"],
                         "tern-cluster-secret")
        vols = {v["name"]: v for v in self.pod()["spec"]["volumes"]}
        claims = {t["metadata"]["name"] for t in self.sts()["spec"]["volumeClaimTemplates"]}
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        for name in mounts:
            self.assertTrue(name in vols or name in claims, f"mount {name} has no volume")
        tls = [n for n, v in vols.items() if "secret" in v]
        self.assertEqual(len(tls), 1)
        self.assertEqual(vols[tls[0]]["secret"]["secretName"], "tern-raft-tls")
        self.assertEqual(mounts[tls[0]]["mountPath"], env["TERN_RAFT_TLS_DIR"]["value"])
        self.assertIs(mounts[tls[0]]["readOnly"], True)

    def test_pdb(self):
        pdb = self.kinds["PodDisruptionBudget"][0]["spec"]
        self.assertEqual(pdb["maxUnavailable"], 1)
        self.assertNotIn("minAvailable", pdb)
        self.assertTrue(matches(pdb["selector"]["matchLabels"], self.pod()["metadata"]["labels"]))

    def test_network_policy(self):
        pol = self.kinds["NetworkPolicy"][0]["spec"]
        labels = self.pod()["metadata"]["labels"]
        self.assertTrue(matches(pol["podSelector"]["matchLabels"], labels))
        self.assertEqual(pol["policyTypes"], ["Ingress"])
        ports = self.named_ports()
        fenced = {ports["rpc"], ports["raft"]}
        client = {ports["nsq"], ports["http"]}
        admitted_fenced = set()
        for rule in pol["ingress"]:
            rule_ports = {(p["port"], p["protocol"]) for p in rule["ports"]}
            peers = rule.get("from")
            if rule_ports & fenced:
                # Only from this StatefulSet's pods, nobody else.
                self.assertTrue(peers, f"{rule}: the fenced ports from anyone")
                for src in peers:
                    self.assertEqual(set(src), {"podSelector"}, src)
                    self.assertTrue(matches(src["podSelector"]["matchLabels"], labels) and
                                    matches(labels, src["podSelector"]["matchLabels"]), src)
                admitted_fenced |= rule_ports & fenced
            if not peers:
                self.assertEqual(rule_ports, client, "only client ports are open to anyone")
        self.assertEqual(admitted_fenced, fenced)
        open_rules = [r for r in pol["ingress"] if not r.get("from")]
        self.assertEqual(len(open_rules), 1)
        metrics = [r for r in pol["ingress"]
                   if {(p["port"], p["protocol"]) for p in r["ports"]} == {ports["metrics"]}]
        self.assertEqual(len(metrics), 1)
        self.assertTrue(metrics[0]["from"][0]["podSelector"]["matchLabels"])

    def test_renderer_refuses_what_it_does_not_know(self):
        ctx = {"values": {"a": {"b": 1}, "s": ""}, "release": "r"}
        self.assertEqual(render.render_text("x: {{ .Values.a.b }}\n", ctx, "t"), "x: 1\n")
        self.assertEqual(render.render_text("x: {{ .Values.a.b | quote }}", ctx, "t"), 'x: "1"')
        self.assertEqual(render.render_text(
            "a\n{{- if .Values.s }}\nno\n{{- else }}\nyes\n{{- end }}\n", ctx, "t"), "a\nyes\n")
        for bad, needle in (
                ('{{ include "x" . }}', "unsupported"), ("{{ .Values.a.c }}", "not in the values"),
                ("{{ .Values.a }}", "not a scalar"), ("{{ if .Values.s }}", "without an end"),
                ("{{ end }}", "end without an if"), ("{{ .Values.a.b | upper }}", "upper"),
                ("{{ .Chart.Name }}", "unsupported expression"), ("{{ .Values.a.b", "unterminated"),
                ("{{/* c */}}", "comments"), ("{{ range .Values.a }}{{ end }}", "unsupported")):
            with self.assertRaises(render.RenderError, msg=bad) as cm:
                render.render_text(bad, ctx, "t")
            self.assertIn(needle, str(cm.exception), bad)
        r = subprocess.run([sys.executable, os.path.join(HERE, "render.py"), CHART, "--set",
                            "nope=1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("nope is not in values.yaml", r.stderr)


# --- monitoring -----------------------------------------------------------------


METRIC = re.compile(r"\b(tern_[a-z0-9_]+|up)\b(\{[^}]*\})?")
MATCHER = re.compile(r'([a-z_]+)\s*(=~|!=|!~|=)\s*"([^"]*)"')


def used_series(expr):
    """[(metric name, {label: value} of its = matchers)] in a PromQL
    expression (label names inside by (...) are not metrics: they never
    start with tern_ and are not 'up')."""
    out = []
    for m in METRIC.finditer(expr):
        eq = {k: v for k, op, v in MATCHER.findall(m.group(2) or "") if op == "="}
        out.append((m.group(1), eq))
    return out


def grafana_expr(expr):
    """A dashboard expression with Grafana's variables replaced as a query
    would see them; an unknown variable fails."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    expr = expr.replace('instance=~"$instance"', 'instance=~".*"')
    if "$" in expr:
        raise AssertionError(f"unknown variable in {expr!r}")
    return expr


def promtool(*args, stdin=None):
    r = subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


class Monitoring(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("promtool") is None:
            raise AssertionError("promtool is needed: Debian's prometheus package "
                                 "(scripts/install-deps.sh)")
        cls.dir = tempfile.mkdtemp(prefix="tern-deploy-")
        http, raft = harness.free_port(), harness.free_port()
        env = dict(os.environ, TERN_ADMIN_PASSWORD="deploy-tests",
                   TERN_CLUSTER_SECRET="deploy-test-cluster-secret-0123456789abcdef")
        # A one-member cluster (--peers naming itself): the ingress log,
        # dispatcher and cluster series are there as on every member.
        cls.d = Daemon(os.path.join(cls.dir, "data"), f"--http-address=127.0.0.1:{http}",
                       f"--raft-address=127.0.0.1:{raft}", "--node-id=1",
                       f"--peers=1@127.0.0.1:{raft}", "--metrics-address=127.0.0.1:0", env=env)
        cls.d.wait_for("ready")
        cls.http = cls.d.http_port
        try:
            cls.d.wait_for("root user admin created")
            cls.prepare()
            cls.scrape = cls.get(cls.d.metrics_port, "/metrics")[1].decode()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    @classmethod
    def get(cls, port, path, method="GET", body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    @classmethod
    def prepare(cls):
        """Series for a topic and a channel, and a 401."""
        deadline = time.monotonic() + 30
        while cls.get(cls.http, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "the node never became ready"
            time.sleep(0.2)
        bad = "Basic " + base64.b64encode(b"admin:wrong").decode()
        for method, path, body, headers, want in (
                ("POST", "/topic/create?topic=dep", None, None, 200),
                ("POST", "/channel/create?topic=dep&channel=c", None, None, 200),
                ("POST", "/pub?topic=dep", b"m", None, 200),
                ("GET", "/v1/topics", None, None, 401),
                ("GET", "/v1/topics", None, {"Authorization": bad}, 401)):
            status, out = cls.get(cls.http, path, method, body, headers)
            assert status == want, f"{method} {path}: {status} {out!r}, not {want}"

    def samples(self):
        """{metric name: [{label: value}]} of the scrape."""
        out = {}
        for line in self.scrape.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ", line)
            labels = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', m.group(3) or ""))
            out.setdefault(m.group(1), []).append(labels)
        return out

    def test_probes_need_no_credentials(self):
        status, body = self.get(self.http, "/healthz")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        self.assertEqual(self.get(self.http, "/readyz")[0], 200)

    def test_scrape_passes_promtool(self):
        rc, out = promtool("check", "metrics", stdin=self.scrape)
        self.assertEqual(rc, 0, out)
        s = self.samples()
        self.assertEqual(s["tern_cluster_members"], [{"status": "alive"}, {"status": "dead"}])
        self.assertIn("tern_ingress_oldest_record_age_seconds", s)
        m = re.search(r"^tern_http_unauthorized_total (\d+)$", self.scrape, re.M)
        self.assertGreaterEqual(int(m.group(1)), 2)
        for log in ("partition", "channel"):
            self.assertIn(f'tern_isolated_logs{{log="{log}"}} 0\n', self.scrape)

    def test_rules_pass_promtool(self):
        rc, out = promtool("check", "rules", ALERTS)
        self.assertEqual(rc, 0, out)
        rc, out = promtool("check", "config", PROM_CONFIG)
        self.assertEqual(rc, 0, out)

    def test_alert_unit_tests_fire_every_alert(self):
        rc, out = promtool("test", "rules", ALERT_TESTS)
        self.assertEqual(rc, 0, out)
        with open(ALERTS) as f:
            alerts = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]}
        with open(ALERT_TESTS) as f:
            tests = yaml.safe_load(f)["tests"]
        fired = {t["alertname"] for case in tests for t in case["alert_rule_test"]
                 if t.get("exp_alerts")}
        self.assertEqual(fired, alerts, "every alert has a case where it fires")
        for want in ("TernDiskHighWatermark", "TernStorageLogIsolated", "TernFsyncSlow",
                     "TernNodeDown", "TernMemberDead", "TernDispatchBacklog",
                     "TernAuthFailureBudget"):
            self.assertIn(want, alerts)

    def check_series_exist(self, exprs, what):
        s = self.samples()
        for expr in exprs:
            for name, eq in used_series(expr):
                if name == "up":
                    continue  # Prometheus's own
                if name not in s:
                    self.fail(f"{what}: {name} is not in /metrics ({expr})")
                for k, v in eq.items():
                    if k in ("job", "instance"):
                        continue  # the scrape's target labels
                    self.assertIn(v, {lab.get(k) for lab in s[name]},
                                  f"{what}: no {name}{{{k}=\"{v}\"}} in /metrics ({expr})")

    def test_rule_metrics_are_in_the_scrape(self):
        with open(ALERTS) as f:
            rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
        self.check_series_exist([r["expr"] for r in rules], "tern-alerts.yml")

    def dashboard_exprs(self):
        with open(DASHBOARD) as f:
            dash = json.load(f)
        exprs = []
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        for p in dash["panels"]:
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                exprs.append((p["id"], t["refId"], grafana_expr(t["expr"])))
        titles = " ".join(p["title"].lower() for p in dash["panels"])
        for topic in ("throughput", "depth", "fsync", "disk", "members", "backlog", "auth"):
            self.assertIn(topic, titles)
        return exprs

    def test_dashboard_metrics_are_in_the_scrape(self):
        self.check_series_exist([e for _, _, e in self.dashboard_exprs()], "tern-dashboard.json")

    def test_dashboard_expressions_are_valid_promql(self):
        rules = [{"record": f"dashboard:panel{pid}_{ref}", "expr": e}
                 for pid, ref, e in self.dashboard_exprs()]
        path = os.path.join(self.dir, "dashboard-rules.yml")
        with open(path, "w") as f:
            yaml.safe_dump({"groups": [{"name": "tern-dashboard", "rules": rules}]}, f)
        rc, out = promtool("check", "rules", path)
        self.assertEqual(rc, 0, out)
        self.assertIn(f"SUCCESS: {len(rules)} rules found", out)


def main():
    global TERNCTL
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--ternctl", default="")
    args, rest = ap.parse_known_args()
    harness.set_ternd(args.ternd)
    TERNCTL = os.path.abspath(args.ternctl) if args.ternctl else None
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
