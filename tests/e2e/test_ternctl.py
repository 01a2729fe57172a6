#!/usr/bin/env python3
"""End-to-end tests of ternctl (beside ternd in the build) against a real
ternd: every command in its table and --json forms (parsed), exit codes
(0 ok, 1 the request failed with the server's error printed, 2 usage),
where the connection comes from (flags > environment > config file >
default), the local node's password file found when no credentials are
given (and its search order, the unreadable file skipped with a note, never
when credentials were given), the refusal of a password on the command
line and the warning for readable password files, the bash completion script, and the TLS path
against a Python ssl HTTPS server with generated certificates (the right
CA verifies, a wrong CA, the system store and a wrong host name fail with
a clear reason), which also answers chunked; and the client's connection
handling against a raw-socket server (one kept-alive connection for a
command's requests; a request that met an idle close sent once more on a
new connection; no retry when a fresh connection closes unanswered)."""
import argparse
import http.server
import json
import os
import pty
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import termios
import threading
import time
import unittest
import uuid

import daemon as daemon_mod
from daemon import Daemon

PASSWORD = "root-pw-for-ternctl"
TERNCTL = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPLETION = os.path.join(ROOT, "contrib", "bash-completion", "ternctl")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-ctl-")
        env = dict(os.environ, TERN_ADMIN_PASSWORD=PASSWORD)
        cls.d = Daemon(os.path.join(cls.dir, "data"), env=env)
        cls.d.wait_for("ready")
        cls.d.wait_for("root user admin created")
        cls.url = f"http://127.0.0.1:{cls.d.http_port}"
        cls.home = os.path.join(cls.dir, "home")
        os.makedirs(cls.home)
        cls.pwfile = os.path.join(cls.dir, "pw")
        with open(cls.pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        os.chmod(cls.pwfile, 0o600)

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, f"ternd exited {rc}:\n{cls.d.log()}"

    def env(self, **extra):
        """An environment without the caller's TERN_* settings or config file."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith("TERN_") and k != "XDG_CONFIG_HOME"}
        e["HOME"] = self.home
        e.update(extra)
        return e

    def ctl(self, *args, env=None, input=None, auth=True, timeout=60, cwd=None, **kw):
        """Run ternctl; by default against the daemon as admin (flags), in an
        empty directory (so no ./data/admin-password is found)."""
        pre = ["--url", self.url, "--password-file", self.pwfile] if auth else []
        r = subprocess.run([TERNCTL, *pre, *args], capture_output=True, timeout=timeout,
                           env=env if env is not None else self.env(), input=input,
                           cwd=cwd if cwd is not None else self.home, **kw)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def ok(self, *args, **kw):
        rc, out, err = self.ctl(*args, **kw)
        self.assertEqual(rc, 0, f"ternctl {' '.join(args)}: rc {rc}\n{out}\n{err}")
        return out

    def js(self, *args, **kw):
        return json.loads(self.ok("--json", *args, **kw))

    def jlines(self, *args, **kw):
        return [json.loads(line) for line in self.ok("--json", *args, **kw).splitlines()]

    def fails(self, code, *args, **kw):
        rc, out, err = self.ctl(*args, **kw)
        self.assertEqual(rc, code, f"ternctl {' '.join(args)}: rc {rc}\n{out}\n{err}")
        return err

    def topic(self, partitions=1):
        name = f"ctl{uuid.uuid4().hex[:10]}"
        self.ok("topics", "create", name, "--partitions", str(partitions))
        return name


class Basics(Base):
    def test_version_and_help(self):
        self.assertEqual(self.ok("--version", auth=False).strip(), "ternctl 0.1.0")
        out = self.ok("--help", auth=False)
        commands = ["status", "topics", "channels", "produce", "consume", "tail", "users",
                    "cluster", "stats"]
        for c in commands:
            self.assertIn(f"\n  {c} ", out)
            h = self.ok(c, "--help", auth=False)
            self.assertTrue(h.startswith(f"usage: ternctl {c}"), h)
            self.assertIn("Global flags", h)
            self.assertEqual(self.ok("help", c, auth=False), h)
        err = self.fails(2, "frobnicate", auth=False)
        self.assertIn('unknown command "frobnicate"', err)
        self.fails(2, auth=False)  # no command: usage on stderr

    def test_usage_errors_exit_2(self):
        for args, why in [(("topics",), "which one"),
                          (("topics", "frob"), "unknown subcommand"),
                          (("topics", "create"), "one topic name"),
                          (("topics", "create", "x", "--partitions", "many"), "expected an integer"),
                          (("topics", "alter", "x"), "at least one setting"),
                          (("produce",), "give a topic"),
                          (("produce", "t", "m", "--key", "k", "--partition", "0"), "--key"),
                          (("produce", "t", "m", "--delay", "1s", "--key", "k"), "--delay"),
                          (("consume", "t", "--offset", "3"), "--offset needs --partition"),
                          (("consume", "t", "--wait", "soon"), "expected a duration"),
                          (("tail", "t", "--from-start"), "goes with --peek"),
                          (("stats", "--interval", "1ms"), "expected a duration"),
                          (("status", "extra"), "takes no arguments"),
                          (("--timeout", "never", "status"), "positive duration"),
                          (("--url", "ftp://x", "status"), "must start with http://"),
                          (("--url",), "needs a value")]:
            err = self.fails(2, *args)
            self.assertIn(why, err, args)

    def test_password_on_the_command_line_is_refused(self):
        for flag in (["--password", "x"], ["--password=x"]):
            err = self.fails(2, *flag, "status")
            self.assertIn("--password is not accepted", err)
            self.assertIn("--password-file", err)

    def test_status(self):
        out = self.ok("status")
        self.assertIn("health:     ok (200)", out)
        self.assertIn("readiness:  ready (200)", out)
        self.assertIn("cluster:    1 member, 1 alive, leader 1", out)
        self.assertIn("version:    tern 0.1.0", out)
        j = self.js("status")
        self.assertEqual(j["url"], self.url)
        self.assertEqual(j["info"]["http_port"], self.d.http_port)
        self.assertEqual(j["health"], {"http_status": 200, "body": {"status": "ok"}})
        self.assertEqual(j["ready"]["body"], {"status": "ready"})
        self.assertEqual([m["id"] for m in j["cluster"]["members"]], ["1"])
        # Without credentials the node answers but the members need them: 1, and why.
        rc, out, err = self.ctl("--url", self.url, "status", auth=False)
        self.assertEqual(rc, 1)
        self.assertIn("health:     ok", out)
        self.assertIn("GET /v1/cluster/members: 401 authentication required", err)
        self.assertIn("no credentials were given", err)

    def test_unreachable_node(self):
        port = free_port()
        err = self.fails(1, "--url", f"http://127.0.0.1:{port}", "status", auth=False)
        self.assertIn(f"cannot reach http://127.0.0.1:{port}: connection refused", err)

    def test_cluster_members_and_moves(self):
        j = self.js("cluster", "members")
        self.assertEqual(len(j["members"]), 1)
        self.assertTrue(j["members"][0]["leader"])
        out = self.ok("cluster", "members")
        self.assertTrue(out.startswith("ID "), out)
        self.assertIn("alive", out)
        self.assertEqual(self.js("cluster", "moves"), {"moves": []})
        self.assertIn("no partition moves, under way or recently finished", self.ok("cluster", "moves"))

    def test_partitions_move_refusals(self):
        # A lone node's topics have factor 1: a move to more than one
        # member, or to the owner itself, is refused (400, exit 1, the
        # server's reason); operands and --replicas checked before any
        # call (exit 2).
        name = self.topic()
        err = self.fails(1, "partitions", "move", name, "0", "--replicas", "1,2")
        self.assertIn("400", err)
        self.assertIn("replication factor 1 is moved to exactly one member", err)
        self.assertIn("404", self.fails(1, "partitions", "move", name, "5", "--replicas", "1"))
        self.assertIn("404", self.fails(1, "partitions", "move", "nosuch", "0", "--replicas", "1"))
        self.fails(2, "partitions", "move", name, "0")
        self.fails(2, "partitions", "move", name, "x", "--replicas", "1")
        for bad in ("", "1,", ",1", "1,,2", "a", "1,2,3,4,5,6,7,8,9", "12345678901"):
            self.fails(2, "partitions", "move", name, "0", "--replicas", bad)
        self.fails(2, "partitions", "move", name, "0", "--replicas", "1", "--bogus")
        self.assertIn("partitions move", self.ok("partitions", "--help", auth=False))

    def test_cluster_decommission_refusals(self):
        # Operands checked before any call (exit 2); a member the cluster
        # does not know is the server's 404 (exit 1).
        self.fails(2, "cluster", "decommission")
        self.fails(2, "cluster", "decommission", "x")
        self.fails(2, "cluster", "decommission", "1", "2")
        self.fails(2, "cluster", "decommission", "1", "--bogus")
        self.fails(2, "cluster", "decommission", "1", "--wait-timeout", "soon")
        self.assertIn("404", self.fails(1, "cluster", "decommission", "9"))
        self.assertIn("cluster decommission ID", self.ok("cluster", "--help", auth=False))

    def test_cluster_rebalance(self):
        # Operands checked before any call (exit 2); a lone node holds no
        # replicated partition: balanced already, with or without --wait.
        self.fails(2, "cluster", "rebalance", "x")
        self.fails(2, "cluster", "rebalance", "--bogus")
        self.fails(2, "cluster", "rebalance", "--wait-timeout", "soon")
        self.assertIn("balanced already", self.ok("cluster", "rebalance", "--wait"))
        j = self.js("cluster", "rebalance")
        self.assertEqual((j["running"], j["moves"], j["reorders"]), (False, 0, 0), j)
        self.assertIn("cluster rebalance [--wait]", self.ok("cluster", "--help", auth=False))

    def test_partitions_force_leader_refusals(self):
        # A lone node's topics have factor 1: no election to force (409,
        # exit 1, the server's reason); operands checked before any call.
        name = self.topic()
        err = self.fails(1, "partitions", "force-leader", name, "0", "1")
        self.assertIn("409", err)
        self.assertIn("not replicated", err)
        self.assertIn("404", self.fails(1, "partitions", "force-leader", name, "5", "1"))
        self.assertIn("404", self.fails(1, "partitions", "force-leader", "nosuch", "0", "1"))
        self.fails(2, "partitions", "force-leader", name, "0")
        self.fails(2, "partitions", "force-leader", name, "x", "1")
        self.fails(2, "partitions", "force-leader", name, "0", "0")
        self.fails(2, "partitions", "force-leader", name, "0", "1", "--bogus")
        self.fails(2, "partitions", "elect")
        self.assertIn("force-leader", self.ok("partitions", "--help", auth=False))

    def test_completion(self):
        def complete(*words):
            script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
                      '_ternctl; printf "%s\\n" "${COMPREPLY[@]}"')
            env = self.env(PATH=os.path.dirname(TERNCTL) + ":" + os.environ["PATH"],
                           TERN_URL=self.url, TERN_PASSWORD_FILE=self.pwfile)
            r = subprocess.run(["bash", "-c", script, "_", COMPLETION, *words],
                               capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return sorted(w for w in r.stdout.split("\n") if w)
        help_cmds = [line.split()[0] for line in
                     self.ok("--help", auth=False).split("Commands:\n")[1].split("\n\n")[0]
                     .splitlines()]
        self.assertEqual([w for w in complete("ternctl", "") if not w.startswith("-")],
                         sorted(help_cmds + ["help"]))
        self.assertEqual(complete("ternctl", "to"), ["topics"])
        self.assertEqual(complete("ternctl", "topics", ""),
                         ["alter", "create", "delete", "get", "list"])
        self.assertEqual(complete("ternctl", "channels", ""),
                         ["delete", "empty", "list", "pause", "unpause"])
        self.assertEqual(complete("ternctl", "--url", "x", "cluster", ""), ["decommission", "drain", "members", "moves", "rebalance", "remove"])
        self.assertEqual(complete("ternctl", "partitions", ""), ["force-leader", "move"])
        self.assertIn("--partitions", complete("ternctl", "topics", "create", "x", "--pa"))
        self.assertEqual(complete("ternctl", "topics", "create", "x", "--durability", "w"),
                         ["write_ack"])
        name = self.topic()
        self.assertIn(name, complete("ternctl", "consume", ""))
        self.assertIn(name, complete("ternctl", "channels", "pause", "ctl"))
        self.assertEqual(complete("ternctl", "produce", name, ""), [])


class Connection(Base):
    """Where the URL and credentials come from, and the mode warnings."""

    def write(self, name, text, mode=0o600):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def test_default_url(self):
        # Nothing anywhere: http://127.0.0.1:4151 (whatever answers there, or nothing).
        rc, out, err = self.ctl("--timeout", "3s", "--json", "status", auth=False)
        self.assertIn("127.0.0.1:4151", out + err)

    def test_precedence(self):
        dead = f"http://127.0.0.1:{free_port()}"
        wrong = self.write("wrong-pw", "not-the-password\n")
        conf = self.write("ternctl.conf", f"# ternctl\nurl = {self.url}\nuser = admin\n"
                                          f"password-file = \"{self.pwfile}\"  \n")
        # The config file alone.
        self.ok("--config", conf, "cluster", "members", auth=False)
        # The default config file path: $XDG_CONFIG_HOME, else ~/.config.
        xdg = os.path.join(self.dir, "xdg")
        os.makedirs(os.path.join(xdg, "tern"), exist_ok=True)
        shutil.copy(conf, os.path.join(xdg, "tern", "ternctl.conf"))
        self.ok("cluster", "members", auth=False, env=self.env(XDG_CONFIG_HOME=xdg))
        os.makedirs(os.path.join(self.home, ".config", "tern"), exist_ok=True)
        home_conf = os.path.join(self.home, ".config", "tern", "ternctl.conf")
        shutil.copy(conf, home_conf)
        try:
            self.ok("cluster", "members", auth=False)
            # The environment beats the file.
            err = self.fails(1, "status", auth=False, env=self.env(TERN_URL=dead))
            self.assertIn(f"cannot reach {dead}", err)
            err = self.fails(1, "cluster", "members", auth=False,
                             env=self.env(TERN_PASSWORD_FILE=wrong))
            self.assertIn("401 authentication required", err)
            self.ok("cluster", "members", auth=False,
                    env=self.env(TERN_URL=self.url, TERN_PASSWORD=PASSWORD))
            # Flags beat the environment.
            self.ok("--url", self.url, "cluster", "members", auth=False,
                    env=self.env(TERN_URL=dead))
            err = self.fails(1, "--password-file", wrong, "cluster", "members", auth=False,
                             env=self.env(TERN_PASSWORD=PASSWORD))
            self.assertIn("401", err)
            err = self.fails(1, "--user", "nobody", "cluster", "members", auth=False,
                             env=self.env(TERN_USER="admin"))
            self.assertIn("401", err)
            # Both password variables: which one is meant is unclear.
            err = self.fails(2, "status", auth=False,
                             env=self.env(TERN_PASSWORD="a", TERN_PASSWORD_FILE=wrong))
            self.assertIn("both set", err)
        finally:
            os.unlink(home_conf)

    def test_config_errors(self):
        missing = os.path.join(self.dir, "nope.conf")
        self.assertIn("cannot open config file", self.fails(2, "--config", missing, "status",
                                                            auth=False))
        bad = self.write("bad.conf", "url http://x\n")
        self.assertIn("bad.conf:1: expected `key = value`",
                      self.fails(2, "--config", bad, "status", auth=False))
        unknown = self.write("unknown.conf", "\n\nport = 1\n")
        self.assertIn('unknown.conf:3: unknown key "port"',
                      self.fails(2, "--config", unknown, "status", auth=False))
        both = self.write("both.conf", "password = a\npassword-file = /x\n")
        self.assertIn("not both", self.fails(2, "--config", both, "status", auth=False))
        empty = self.write("empty-pw", "\n")
        self.assertIn("is empty", self.fails(2, "--password-file", empty, "status", auth=False))

    def test_readable_password_files_warn(self):
        loose = self.write("loose-pw", PASSWORD + "\n", 0o644)
        rc, out, err = self.ctl("--url", self.url, "--password-file", loose, "cluster",
                                "members", auth=False)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"warning: password file {loose} holds a password and group or others "
                      f"may read it (mode 644", err)
        rc, out, err = self.ctl("cluster", "members")  # self.pwfile is 0600
        self.assertEqual(rc, 0, err)
        self.assertNotIn("warning", err)
        conf = self.write("loose.conf", f"url = {self.url}\npassword = {PASSWORD}\n", 0o640)
        rc, out, err = self.ctl("--config", conf, "cluster", "members", auth=False)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"warning: config file {conf} holds a password", err)
        # A config file without a password may be readable.
        conf = self.write("open.conf", f"url = {self.url}\n", 0o644)
        rc, out, err = self.ctl("--config", conf, "status", "--password-file", self.pwfile,
                                auth=False)
        self.assertEqual(rc, 0, err)
        self.assertNotIn("warning", err)


class LocalPassword(Base):
    """No credentials and a node on this machine: ternctl looks for the
    password file the node wrote ($TERN_DATA_PATH/admin-password,
    ./data/admin-password, /var/lib/tern/admin-password) and says which."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # A node that generated its password: <node>/data/admin-password.
        cls.node = os.path.join(cls.dir, "node")
        os.makedirs(cls.node)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        cls.d2 = Daemon(os.path.join(cls.node, "data"), env=env)
        try:
            cls.d2.wait_for("ready")
            cls.d2.wait_for("root user admin created")
        except BaseException:
            cls.d2.stop()
            raise
        cls.url2 = f"http://127.0.0.1:{cls.d2.http_port}"

    @classmethod
    def tearDownClass(cls):
        rc = cls.d2.stop()
        super().tearDownClass()
        assert rc == 0, f"ternd exited {rc}:\n{cls.d2.log()}"

    def members(self, url=None, **kw):
        return self.ctl("--url", url or self.url2, "cluster", "members", auth=False, **kw)

    def test_found_in_the_working_directory(self):
        for url in (self.url2, f"http://localhost:{self.d2.http_port}/"):
            rc, out, err = self.members(url, cwd=self.node)
            self.assertEqual(rc, 0, err)
            self.assertEqual(err, "ternctl: using the password in ./data/admin-password\n")
            self.assertIn("alive", out)

    def test_found_by_tern_data_path_first(self):
        data = os.path.join(self.node, "data")
        other = os.path.join(self.dir, "other")
        os.makedirs(os.path.join(other, "data"), exist_ok=True)
        with open(os.path.join(other, "data", "admin-password"), "w") as f:
            f.write("not-the-password\n")
        os.chmod(os.path.join(other, "data", "admin-password"), 0o600)
        # TERN_DATA_PATH (ternd's own variable) comes before ./data.
        rc, out, err = self.members(cwd=other, env=self.env(TERN_DATA_PATH=data))
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, f"ternctl: using the password in {data}/admin-password\n")
        # ./data alone, holding a wrong password: 401, and where it came from.
        rc, out, err = self.members(cwd=other)
        self.assertEqual(rc, 1, err)
        self.assertIn("using the password in ./data/admin-password", err)
        self.assertIn("401 authentication required", err)
        self.assertIn("the password came from ./data/admin-password", err)

    def test_not_found(self):
        # The same error as with no search at all.
        rc, out, err = self.members()
        self.assertEqual(rc, 1, err)
        self.assertNotIn("using the password", err)
        self.assertIn("401 authentication required", err)
        self.assertIn("no credentials were given", err)

    def test_never_when_credentials_are_given(self):
        for args, env in [(["--password-file", self.pwfile], self.env()),
                          ([], self.env(TERN_PASSWORD="wrong")),
                          ([], self.env(TERN_USER="admin"))]:
            rc, out, err = self.ctl("--url", self.url2, *args, "cluster", "members",
                                    auth=False, cwd=self.node, env=env)
            self.assertEqual(rc, 1, err)  # none of them is this node's password
            self.assertNotIn("using the password", err)
            self.assertIn("401", err)

    def test_never_for_another_machine(self):
        # 192.0.2.1 (TEST-NET-1) is no one's; the search would run before
        # the connection is tried.
        rc, out, err = self.ctl("--url", "http://192.0.2.1:9", "--timeout", "1s", "topics",
                                "list", auth=False, cwd=self.node)
        self.assertEqual(rc, 1, err)
        self.assertNotIn("using the password", err)

    def test_unreadable_file_is_skipped_with_a_note(self):
        # A file this user cannot read: root reads anything, so as root the
        # file stays root's (0600) and ternctl runs as nobody.
        d = tempfile.mkdtemp(prefix="tern-ctl-unreadable-")
        try:
            os.chmod(d, 0o755)
            os.makedirs(os.path.join(d, "data"))
            os.chmod(os.path.join(d, "data"), 0o755)
            pw = os.path.join(d, "data", "admin-password")
            shutil.copy(os.path.join(self.node, "data", "admin-password"), pw)
            kw = {}
            if os.geteuid() == 0:
                os.chmod(pw, 0o600)
                kw = {"user": 65534, "group": 65534, "extra_groups": []}
                env = self.env(HOME=d)
            else:
                os.chmod(pw, 0)
                env = self.env()
            rc, out, err = self.members(cwd=d, env=env, **kw)
            self.assertEqual(rc, 1, err)
            self.assertIn("ternctl: note: cannot read ./data/admin-password (Permission denied); "
                          "skipped it", err)
            self.assertNotIn("using the password", err)
            self.assertIn("no credentials were given", err)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_offline_command_does_not_search(self):
        rc, out, err = self.ctl("restore", os.path.join(self.dir, "no-backup"), "--data-path",
                                os.path.join(self.dir, "no-data"), auth=False, cwd=self.node)
        self.assertNotEqual(rc, 0, err)
        self.assertIn("no-backup", err)  # the restore ran, and said what is wrong
        self.assertNotIn("using the password", err)


class Topics(Base):
    def test_lifecycle(self):
        name = f"ctl{uuid.uuid4().hex[:10]}"
        j = self.js("topics", "create", name, "--partitions", "2", "--retention", "24h",
                    "--visibility-timeout", "45s", "--max-attempts", "5",
                    "--durability", "write_ack")
        self.assertEqual((j["name"], j["partitions"], j["retention_ms"],
                          j["visibility_timeout_ms"], j["max_attempts"], j["durability"]),
                         (name, 2, 86400000, 45000, 5, "write_ack"))
        self.assertIn(name, [t["name"] for t in self.js("topics", "list")["topics"]])
        out = self.ok("topics", "list")
        self.assertTrue(out.startswith("NAME "), out)
        self.assertIn(name, out)
        got = self.js("topics", "get", name)
        self.assertEqual([p["index"] for p in got["partition_stats"]], [0, 1])
        self.assertEqual(len(self.js("topics", "get", name, "--partition", "1")
                             ["partition_stats"]), 1)
        out = self.ok("topics", "get", name)
        self.assertIn("retention                        24h", out)
        self.assertIn("PARTITION  OWNER", out)
        self.assertEqual(self.ok("topics", "alter", name, "--partitions", "3"),
                         f"altered topic {name} (3 partitions)\n")
        self.assertEqual(self.js("topics", "alter", name, "--retention", "0")["retention_ms"], 0)
        # The server's refusals come back as its error, exit 1.
        err = self.fails(1, "topics", "alter", name, "--partitions", "2")
        self.assertIn(f"ternctl: alter topic {name}: 400 invalid argument: partitions can only "
                      f"grow", err)
        err = self.fails(1, "topics", "create", name)
        self.assertIn(f"create topic {name}: 409 topic already exists", err)
        err = self.fails(1, "topics", "create", "x" + name, "--retention", "1m")
        self.assertIn("400 invalid argument: retention_ms must be 0", err)
        # A lone node: the metastore clamps the factor to the one member.
        j = self.js("topics", "create", "r" + name, "--replication-factor", "3",
                    "--min-insync", "2")
        self.assertEqual((j["replication_factor"], j["min_insync_replicas"]), (1, 1), j)
        self.assertEqual(self.js("topics", "delete", "r" + name), {"deleted": True})
        err = self.fails(2, "topics", "create", "r" + name, "--replication-factor", "6")
        self.assertIn("--replication-factor 6: expected an integer from 1 to 5", err)
        # alter --replication-factor changes the factor (docs/replication.md
        # "Changing a topic's replication factor"): the server's refusal on a
        # lone node, which has too few members to raise it.
        err = self.fails(1, "topics", "alter", name, "--replication-factor", "3")
        self.assertIn(f"alter topic {name}: 409 replication_factor 3 needs 3 alive members that "
                      f"are not draining; the cluster has 1", err)
        self.assertEqual(self.ok("topics", "delete", name), f"deleted topic {name}\n")
        err = self.fails(1, "topics", "get", name)
        self.assertIn(f"get topic {name}: 404 topic not found", err)
        other = self.topic()
        self.assertEqual(self.js("topics", "delete", other), {"deleted": True})
        err = self.fails(1, "topics", "delete", name)
        self.assertIn("404 topic not found", err)

    def test_many_pages(self):
        prefix = f"pg{uuid.uuid4().hex[:6]}"
        names = [f"{prefix}{i:04d}" for i in range(3)]
        for n in names:
            self.ok("topics", "create", n, "--partitions", "1")
        everything = self.js("topics", "list")["topics"]
        listed = [t["name"] for t in everything]
        self.assertEqual([n for n in listed if n.startswith(prefix)], names)
        # Small pages: every page is followed, nothing twice, in order.
        self.assertEqual(self.js("topics", "list", "--page-size", "2")["topics"], everything)
        self.assertEqual(self.js("topics", "list", "--page-size", "1")["topics"], everything)
        self.assertIn("expected an integer from 1 to 1000",
                      self.fails(2, "topics", "list", "--page-size", "0"))


class Messages(Base):
    def consume_all(self, topic, *extra):
        return self.jlines("consume", topic, "-n", "1000", "--wait", "0", *extra)

    def test_produce_forms_and_consume_acks(self):
        t = self.topic(2)
        self.assertEqual(self.ok("produce", t, "from the argument", "--key", "k1"),
                         f"produced 1 message to {t}\n")
        path = os.path.join(self.dir, "msg.json")
        with open(path, "w") as f:
            f.write('{"order": 1}')
        self.ok("produce", t, "--file", path, "--partition", "1")
        self.ok("produce", t, input=b"from stdin\nstill the same message\n")
        self.assertEqual(self.js("produce", t, "--lines", input=b"l1\n\nl2\r\nl3"),
                         {"topic": t, "produced": 3})
        msgs = self.consume_all(t)
        payloads = sorted(json.dumps(m["payload"]) for m in msgs)
        self.assertEqual(payloads, sorted(json.dumps(p) for p in [
            "from the argument", {"order": 1}, "from stdin\nstill the same message\n",
            "l1", "l2\r", "l3"]))
        keyed = [m for m in msgs if m.get("key") == "k1"]
        self.assertEqual(len(keyed), 1)
        pinned = [m for m in msgs if m["payload"] == {"order": 1}]
        self.assertEqual(pinned[0]["partition"], 1)
        # They were acked: nothing is left.
        rc, out, err = self.ctl("consume", t, "--wait", "0")
        self.assertEqual((rc, out), (0, ""))
        self.assertIn(f"no message in {t}", err)
        self.assertEqual(self.consume_all(t), [])

    def test_human_output_and_binary(self):
        t = self.topic()
        raw = bytes(range(256))
        path = os.path.join(self.dir, "bin")
        with open(path, "wb") as f:
            f.write(raw)
        self.ok("produce", t, "--file", path)
        self.ok("produce", t, '{"a": [1, 2.5, true, null]}')
        r = subprocess.run([TERNCTL, "--url", self.url, "--password-file", self.pwfile,
                            "consume", t, "-n", "2"], capture_output=True, env=self.env(),
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, raw + b'\n{"a":[1,2.5,true,null]}\n')

    def test_peek_and_replay(self):
        t = self.topic()
        self.ok("produce", t, "--lines", input=b"a\nb\nc\n")
        first = self.consume_all(t, "--peek")
        self.assertEqual([m["payload"] for m in first], ["a", "b", "c"])
        # Still there, each delivered once more.
        again = self.consume_all(t, "--peek")
        self.assertEqual([m["payload"] for m in again], ["a", "b", "c"])
        self.assertEqual([m["attempts"] for m in again], [2, 2, 2])
        # Replay reads lease nothing and keep no attempts.
        rep = self.jlines("consume", t, "--partition", "0", "--offset", "1", "-n", "5")
        self.assertEqual([(m["offset"], m["payload"]) for m in rep], [(1, "b"), (2, "c")])
        self.assertTrue(all("receipt_handle" not in m for m in rep))
        self.assertEqual(self.ok("consume", t, "--partition", "0", "--offset", "0"), "a\n")
        self.assertEqual(len(self.consume_all(t)), 3)

    def test_channels_and_delay(self):
        t = self.topic()
        self.ok("produce", t, "m1")
        self.assertEqual(self.ok("consume", t, "--channel", "audit", "--peek"), "m1\n")
        chans = self.js("channels", "list", t)
        self.assertEqual(chans["topic"], t)
        self.assertEqual(sorted(c["channel_name"] for c in chans["channels"]),
                         ["audit", "default"])
        out = self.ok("channels", "list", t)
        self.assertTrue(out.startswith("CHANNEL "), out)
        self.assertEqual(self.ok("channels", "pause", t, "audit"),
                         f"paused channel audit of topic {t}\n")
        paused = {c["channel_name"]: c["paused"] for c in self.js("channels", "list", t)["channels"]}
        self.assertEqual(paused, {"audit": True, "default": False})
        self.assertEqual(self.js("channels", "unpause", t, "audit"),
                         {"topic": t, "channel": "audit", "done": "unpause"})
        self.ok("channels", "empty", t, "audit")
        self.assertEqual(self.consume_all(t, "--channel", "audit"), [])
        self.ok("channels", "delete", t, "audit")
        self.assertEqual([c["channel_name"] for c in self.js("channels", "list", t)["channels"]],
                         ["default"])
        err = self.fails(1, "channels", "pause", t, "nosuch")
        self.assertIn(f"pause channel nosuch of {t}: 404 CHANNEL_NOT_FOUND", err)
        err = self.fails(1, "channels", "list", "no" + t)
        self.assertIn("topic not found", err)
        # A deferred message is stored but not delivered before its time.
        self.assertEqual([m["payload"] for m in self.consume_all(t)], ["m1"])
        before = self.js("topics", "get", t)["partition_stats"][0]["next_offset"]
        self.ok("produce", t, "later", "--delay", "1h")
        self.ok("produce", t, "--lines", "--delay", "1h", input=b"x\ny\n")
        self.assertEqual(self.js("topics", "get", t)["partition_stats"][0]["next_offset"],
                         before + 3)
        self.assertEqual(self.consume_all(t), [])

    def test_tail(self):
        t = self.topic(2)
        self.ok("produce", t, "--lines", input=b"t1\nt2\nt3\n")
        # --peek --from-start reads every partition's log and takes nothing.
        out = self.ok("tail", t, "--peek", "--from-start")
        self.assertEqual(sorted(out.split()), ["t1", "t2", "t3"])
        # As a consumer of a channel it acks what it printed.
        self.assertEqual(sorted(self.ok("tail", t).split()), ["t1", "t2", "t3"])
        self.assertEqual(self.consume_all(t), [])
        # -f follows until interrupted; --peek from the high watermark on.
        for mode in (["--peek"], ["--channel", "live"]):
            t = self.topic(2)
            self.ok("produce", t, "before")
            p = subprocess.Popen([TERNCTL, "--url", self.url, "--password-file", self.pwfile,
                                  "--json", "tail", "-f", t, *mode], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=self.env())
            try:
                if mode[0] == "--channel":
                    # Its channel exists once its first poll is in: wait for the consumer.
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline:
                        chans = self.js("channels", "list", t)["channels"]
                        if any(c["channel_name"] == "live" and c["client_count"] > 0
                               for c in chans):
                            break
                        time.sleep(0.1)
                else:
                    time.sleep(1)  # let it read the high watermarks first
                self.ok("produce", t, "f1")
                self.ok("produce", t, "f2", "--partition", "1")
                got, buf = [], b""
                deadline = time.monotonic() + 30
                while not {"f1", "f2"} <= set(got) and time.monotonic() < deadline:
                    ready, _, _ = select.select([p.stdout], [], [], 1)
                    if not ready:
                        continue
                    chunk = os.read(p.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        got.append(json.loads(line)["payload"])
                if mode[0] == "--peek":
                    self.assertEqual(sorted(got), ["f1", "f2"])  # from the watermark: not "before"
                else:
                    # A new channel starts 90 s back, so "before" may come too.
                    self.assertTrue({"f1", "f2"} <= set(got) <= {"before", "f1", "f2"}, got)
            finally:
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=30)
            if mode[0] == "--peek":
                # It took nothing from the default channel.
                self.assertEqual(sorted(m["payload"] for m in self.consume_all(t)),
                                 ["before", "f1", "f2"])
            else:
                # The live channel's tail acked what it printed.
                self.assertEqual(self.consume_all(t, "--channel", "live"), [])

    def test_stats(self):
        t = self.topic()
        self.ok("produce", t, "--lines", input=b"s1\ns2\n")
        samples = self.jlines("stats", "--topic", t, "--count", "2", "--interval", "200ms")
        self.assertEqual(len(samples), 2)
        self.assertEqual((samples[0]["nodes"], samples[0]["answered"]), (1, 1))
        rows = {r["channel"]: r for r in samples[0]["rows"]}
        self.assertEqual(set(rows), {None, "default"})
        self.assertEqual(rows[None]["messages"], 2)
        self.assertEqual(rows["default"]["depth"], 2)
        self.assertIsNone(rows["default"]["rate"])
        self.assertIsNotNone(samples[1]["rows"][1]["rate"])
        out = self.ok("stats", "--topic", t, "--count", "1")
        self.assertIn("TOPIC ", out)
        self.assertIn(f"{t}  (topic)", out)
        self.assertIn("MSGS/S", out)


class Users(Base):
    def test_lifecycle(self):
        name = f"u{uuid.uuid4().hex[:8]}"
        self.assertEqual(self.ok("users", "create", name, "--grant", "consume:orders-*,audit",
                                 "--grant", "create:" + name + "-*", input=b"first-pw\n"),
                         f"created user {name}\n")
        users = {u["username"]: u for u in self.js("users", "list")}
        self.assertEqual(users[name]["grants"],
                         [{"action": "consume", "patterns": ["orders-*", "audit"]},
                          {"action": "create", "patterns": [name + "-*"]}])
        self.assertIn("admin", users)
        out = self.ok("users", "list")
        self.assertIn(f"{name}  no    consume:orders-*,audit create:{name}-*", out)
        self.ok("users", "grant", name, "consume:billing")
        self.ok("users", "grant", name, "produce:" + name + "-*")
        self.assertIn("already has", self.ok("users", "grant", name, "consume:audit"))
        self.ok("users", "revoke", name, "consume:orders-*")
        self.ok("users", "revoke", name, "create")
        g = self.js("users", "list", name)["grants"]
        self.assertEqual(g, [{"action": "consume", "patterns": ["audit", "billing"]},
                             {"action": "produce", "patterns": [name + "-*"]}])
        err = self.fails(1, "users", "revoke", name, "create")
        self.assertIn("has no such grant", err)
        # The user works with its password; a new one replaces it.
        pw1 = os.path.join(self.dir, name + "-pw1")
        with open(pw1, "w") as f:
            f.write("first-pw\n")
        os.chmod(pw1, 0o600)
        as_user = ["--url", self.url, "--user", name, "--password-file", pw1]
        self.assertEqual(self.js(*as_user, "topics", "list", auth=False), {"topics": []})
        err = self.fails(1, *as_user, "cluster", "members", auth=False)
        self.assertIn("403 admin rights required", err)
        pw2 = os.path.join(self.dir, name + "-pw2")
        with open(pw2, "w") as f:
            f.write("second-pw\n")
        # Its own change sends the current password.
        self.assertEqual(self.ok(*as_user, "users", "password", "--new-password-file", pw2,
                                 auth=False), f"changed the password of {name}\n")
        self.fails(1, *as_user, "topics", "list", auth=False)
        as_user[-1] = pw2
        self.ok(*as_user, "topics", "list", auth=False)
        # An admin resets it from stdin.
        self.ok("users", "password", name, input=b"third-pw\n")
        self.fails(1, *as_user, "topics", "list", auth=False)
        err = self.fails(1, "users", "create", name + "x", input=b"")
        self.assertIn("no password on stdin", err)
        err = self.fails(1, "users", "create", name, input=b"pw\n")
        self.assertIn(f"create user {name}: 409 user already exists", err)
        self.assertEqual(self.js("users", "delete", name), {"deleted": True})
        err = self.fails(1, "users", "delete", name)
        self.assertIn("404 user not found", err)


class Terminal(Base):
    """Passwords typed at a terminal: prompted for, with echo off."""

    def on_pty(self, args, answers):
        """Run ternctl on a pseudo-terminal; each answer is typed after its
        prompt shows. Returns (exit code, everything the terminal showed)."""
        master, slave = pty.openpty()
        p = subprocess.Popen([TERNCTL, "--url", self.url, *args], stdin=slave, stdout=slave,
                             stderr=slave, env=self.env(), close_fds=True)
        os.close(slave)
        shown = b""

        def read_until(text, timeout=30):
            nonlocal shown
            deadline = time.monotonic() + timeout
            while text not in shown and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:  # the child exited and closed the terminal
                        return
                    if not chunk:
                        return
                    shown += chunk
        try:
            for prompt, answer in answers:
                read_until(prompt.encode())
                self.assertIn(prompt.encode(), shown)
                os.write(master, answer.encode() + b"\n")
            rc = p.wait(timeout=60)
            read_until(b"\0", timeout=1)  # what is left
        finally:
            if p.poll() is None:
                p.kill()
            os.close(master)
        return rc, shown.decode(errors="replace")

    def test_connection_password_prompt(self):
        rc, shown = self.on_pty(["--user", "admin", "cluster", "members"],
                                [("Password for admin: ", PASSWORD)])
        self.assertEqual(rc, 0, shown)
        self.assertIn("alive", shown)
        self.assertNotIn(PASSWORD, shown)  # not echoed

    def test_interrupt_at_a_prompt_restores_echo(self):
        pid, master = pty.fork()  # ternctl's controlling terminal, so Ctrl-C is SIGINT
        if pid == 0:
            try:
                os.execve(TERNCTL, [TERNCTL, "--url", self.url, "--user", "admin", "status"],
                          self.env())
            finally:
                os._exit(127)
        try:
            shown = b""
            deadline = time.monotonic() + 30
            while b"Password for admin: " not in shown and time.monotonic() < deadline:
                if select.select([master], [], [], 0.2)[0]:
                    shown += os.read(master, 4096)
            self.assertFalse(termios.tcgetattr(master)[3] & termios.ECHO)
            os.write(master, b"\x03")
            _, status = os.waitpid(pid, 0)
            self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT)
            self.assertTrue(termios.tcgetattr(master)[3] & termios.ECHO)
        finally:
            os.close(master)

    def test_new_password_asked_twice(self):
        name = f"tty{uuid.uuid4().hex[:8]}"
        auth = ["--password-file", self.pwfile]
        rc, shown = self.on_pty([*auth, "users", "create", name],
                                [(f"New password for {name}: ", "typed-pw-1"),
                                 ("Again: ", "typed-pw-1")])
        self.assertEqual(rc, 0, shown)
        self.assertIn(f"created user {name}", shown)
        self.assertNotIn("typed-pw-1", shown)
        pw = os.path.join(self.dir, name)
        with open(pw, "w") as f:
            f.write("typed-pw-1\n")
        os.chmod(pw, 0o600)
        self.ok("--url", self.url, "--user", name, "--password-file", pw, "topics", "list",
                auth=False)
        rc, shown = self.on_pty([*auth, "users", "password", name],
                                [(f"New password for {name}: ", "one"), ("Again: ", "other")])
        self.assertEqual(rc, 1, shown)
        self.assertIn("the two passwords differ", shown)
        self.ok("--url", self.url, "--user", name, "--password-file", pw, "topics", "list",
                auth=False)


# --- TLS ----------------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=120)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def make_cert(d, ca, name, san):
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={san}\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}.key", "-out", f"{name}.csr", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
            cwd=d)


class FakeNode(http.server.BaseHTTPRequestHandler):
    """Canned answers to what `ternctl status` asks, /info sent chunked."""
    protocol_version = "HTTP/1.1"
    bodies = {"/healthz": b'{"status":"ok"}', "/readyz": b'{"status":"ready"}',
              "/v1/cluster/members": b'{"members":[{"id":"7","status":"alive","leader":true,'
                                     b'"raft_addr":"10.0.0.7:4153","api_addr":"10.0.0.7:4151",'
                                     b'"draining":false,"last_heartbeat_ms":0,'
                                     b'"owned_partitions":3}]}'}

    def do_GET(self):
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/info":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            body = b'{"version":"9.9.9","hostname":"fake","http_port":1,"tcp_port":2,' \
                   b'"start_time":1}'
            for i in range(0, len(body), 7):
                part = body[i:i + 7]
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: 1\r\n\r\n")
            return
        body = self.bodies.get(self.path)
        send_json(self, 200 if body else 404, body or b'{"error":"not found"}')

    def log_message(self, *args):
        pass


def send_json(handler, status, body):
    """A fake node's answer: status and a JSON body of bytes."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Tls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tern-ctl-tls-")
        make_ca(cls.dir, "ca")
        make_ca(cls.dir, "otherca")
        make_cert(cls.dir, "ca", "server", "IP:127.0.0.1,DNS:localhost")
        make_cert(cls.dir, "ca", "elsewhere", "DNS:elsewhere.example")
        cls.servers = {}
        for name in ("server", "elsewhere"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(os.path.join(cls.dir, f"{name}.pem"),
                                os.path.join(cls.dir, f"{name}.key"))
            srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeNode)
            srv.seen = []
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            cls.servers[name] = srv
        cls.pw = os.path.join(cls.dir, "pw")
        with open(cls.pw, "w") as f:
            f.write("tls-secret\n")
        os.chmod(cls.pw, 0o600)

    @classmethod
    def tearDownClass(cls):
        for srv in cls.servers.values():
            srv.shutdown()
            srv.server_close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def ctl(self, url, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["HOME"] = self.dir
        env.pop("XDG_CONFIG_HOME", None)
        env.pop("SSL_CERT_FILE", None)
        env.pop("SSL_CERT_DIR", None)
        r = subprocess.run([TERNCTL, "--url", url, "--password-file", self.pw, "--timeout", "20s",
                            *args], capture_output=True, text=True, env=env, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def url(self, name, host="127.0.0.1"):
        return f"https://{host}:{self.servers[name].server_address[1]}"

    def test_right_ca(self):
        ca = os.path.join(self.dir, "ca.pem")
        for host in ("127.0.0.1", "localhost"):
            rc, out, err = self.ctl(self.url("server", host), "--ca-file", ca, "status")
            self.assertEqual(rc, 0, out + err)
            self.assertIn("version:    tern 9.9.9", out)  # /info came chunked
            self.assertIn("cluster:    1 member, 1 alive, leader 7", out)
        rc, out, err = self.ctl(self.url("server"), "--ca-file", ca, "--json", "status")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["info"]["hostname"], "fake")
        # Credentials went over TLS, on one kept-alive connection's requests.
        self.assertIn(("/v1/cluster/members", "Basic YWRtaW46dGxzLXNlY3JldA=="),
                      self.servers["server"].seen)

    def test_wrong_ca_and_system_store(self):
        other = os.path.join(self.dir, "otherca.pem")
        for extra in (["--ca-file", other], []):
            rc, out, err = self.ctl(self.url("server"), *extra, "status")
            self.assertEqual(rc, 1, out + err)
            self.assertIn(f"ternctl: cannot reach {self.url('server')}: TLS: certificate verify "
                          f"failed: unable to get local issuer certificate", err)

    def test_wrong_host(self):
        ca = os.path.join(self.dir, "ca.pem")
        rc, out, err = self.ctl(self.url("elsewhere"), "--ca-file", ca, "status")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("TLS: certificate verify failed: IP address mismatch", err)
        rc, out, err = self.ctl(self.url("elsewhere", "localhost"), "--ca-file", ca, "status")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("TLS: certificate verify failed: hostname mismatch", err)

    def test_bad_ca_file(self):
        rc, out, err = self.ctl(self.url("server"), "--ca-file",
                                os.path.join(self.dir, "nope.pem"), "status")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("cannot load CA file", err)

    def test_plain_http_to_a_tls_port(self):
        rc, out, err = self.ctl(self.url("server").replace("https", "http"), "status")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("cannot reach", err)


class HostileNode(http.server.BaseHTTPRequestHandler):
    """Answers whose text would drive a terminal: an error with escape
    sequences (clear the screen, retitle the window, a bell), a body that
    is no JSON with them raw, a member's address with a C1 control."""
    protocol_version = "HTTP/1.1"
    answers = {
        "/v1/topics": (500, b'{"error":"boom \\u001b]0;owned\\u0007 \\u001b[2J gone"}'),
        "/v1/users": (502, b"bad \x1b[31mgateway\x7f\r\nsecond line"),
        "/v1/cluster/members": (200, b'{"members":[{"id":"7","status":"alive","leader":true,'
                                     b'"raft_addr":"10.0.0.7\\u009b1m:4153",'
                                     b'"api_addr":"10.0.0.7:4151","draining":false,'
                                     b'"last_heartbeat_ms":0,"owned_partitions":3}]}'),
    }

    def do_GET(self):
        send_json(self, *self.answers.get(self.path.split("?")[0], (404, b'{"error":"no"}')))

    def log_message(self, *args):
        pass


class HostileText(unittest.TestCase):
    """What a server says reaches the terminal with its control characters
    shown as \\xNN (\\uNNNN for C1), never raw."""

    def setUp(self):
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostileNode)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)

    def ctl(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["HOME"] = tempfile.gettempdir()
        env.pop("XDG_CONFIG_HOME", None)
        env["TERN_PASSWORD"] = "x"
        url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        r = subprocess.run([TERNCTL, "--url", url, *args],
                           capture_output=True, env=env, timeout=60)
        for raw in (b"\x1b", b"\x07", b"\x7f", b"\xc2\x9b"):
            self.assertNotIn(raw, r.stdout + r.stderr)
        return r

    def test_error_message(self):
        r = self.ctl("topics", "list")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"500 boom \\x1b]0;owned\\x07 \\x1b[2J gone", r.stderr)

    def test_body_that_is_no_json(self):
        r = self.ctl("users", "list")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"502 bad \\x1b[31mgateway\\x7f\n", r.stderr)

    def test_table_cell(self):
        r = self.ctl("cluster", "members")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"10.0.0.7\\u009b1m:4153", r.stdout)


class RawNode:
    """A loopback HTTP server for the client's connection handling, on raw
    sockets. Each connection answers `answers` requests (every path the
    same small JSON body, kept alive), then reads the next request and
    closes without a word: what a server closing an idle kept-alive
    connection looks like to a client whose request crossed the close."""

    def __init__(self, answers):
        self.answers = answers
        self.connections = 0
        self.requests = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                buf = b""
                for i in range(self.answers + 1):
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        buf += chunk
                    if b"\r\n\r\n" not in buf:
                        break
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    self.requests += 1
                    if i == self.answers:
                        break  # close without answering
                    body = b'{"status":"ok","members":[]}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self):
        self.sock.close()


class ClientConnections(unittest.TestCase):
    """The client's keep-alive: one connection for a command's requests,
    and a request that met a server's idle close sent once more."""

    def run_status(self, node):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["HOME"] = tempfile.gettempdir()
        env.pop("XDG_CONFIG_HOME", None)
        return subprocess.run([TERNCTL, "--url", f"http://127.0.0.1:{node.port}", "--json",
                               "status"], capture_output=True, text=True, env=env, timeout=60)

    def test_kept_alive(self):
        node = RawNode(answers=100)
        self.addCleanup(node.close)
        r = self.run_status(node)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual((node.connections, node.requests), (1, 4))

    def test_idle_close_is_retried_once(self):
        # Every connection answers one request and drops the next: each of
        # status's later three requests is sent twice, on a new connection
        # the second time.
        node = RawNode(answers=1)
        self.addCleanup(node.close)
        r = self.run_status(node)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(node.connections, 4)
        self.assertEqual(node.requests, 7)

    def test_timeout(self):
        # A listener that never accepts: the kernel completes the
        # connection, nobody answers.
        mute = socket.socket()
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)
        self.addCleanup(mute.close)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["HOME"] = tempfile.gettempdir()
        r = subprocess.run([TERNCTL, "--url", f"http://127.0.0.1:{mute.getsockname()[1]}",
                            "--timeout", "500ms", "status"], capture_output=True, text=True,
                           env=env, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("timed out after 500 ms waiting for the answer", r.stderr)

    def test_https_to_a_plain_http_port(self):
        # An HTTP server answers the ClientHello with a 400 and closes.
        plain = socket.socket()
        plain.bind(("127.0.0.1", 0))
        plain.listen(4)
        self.addCleanup(plain.close)

        def answer():
            conn, _ = plain.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        threading.Thread(target=answer, daemon=True).start()
        port = plain.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["HOME"] = tempfile.gettempdir()
        r = subprocess.run([TERNCTL, "--url", f"https://127.0.0.1:{port}", "status"],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"cannot reach https://127.0.0.1:{port}: TLS handshake failed: ", r.stderr)
        self.assertIn("wrong version number", r.stderr)

    def test_no_answer_on_a_new_connection_is_an_error(self):
        node = RawNode(answers=0)
        self.addCleanup(node.close)
        r = self.run_status(node)
        self.assertEqual(r.returncode, 1)
        self.assertIn("bad response: connection closed before any answer", r.stderr)
        self.assertEqual(node.connections, 1)  # not retried: the server saw it and said nothing


def main():
    global TERNCTL
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--ternctl", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    TERNCTL = os.path.abspath(args.ternctl)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
