#!/usr/bin/env python3
"""End-to-end tests of the ternd daemon: configuration errors, the data
directory lock, FORMAT checks, recovery at startup of a directory written
by the storage engine, and clean shutdown on SIGTERM/SIGINT. Each test
starts the real binary on a temporary data directory."""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from daemon import Daemon
import daemon as daemon_mod
from nsqwire import Conn, FRAME_RESPONSE

TERND = None

DRIVER = None


def http_get(port, path, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def http_post(port, path):
    return http_get(port, path, "POST")


def run_driver_until(data, ledger, done, timeout=60, first_id=0):
    """Run the crash driver on data, logging to ledger, until done() is
    true (polled), then SIGKILL it. Fails if it never gets there."""
    with open(ledger, "wb") as out:
        p = subprocess.Popen([DRIVER, "run", data, "durable", str(first_id)], stdout=out)
        deadline = time.monotonic() + timeout
        try:
            while not done():
                if p.poll() is not None:
                    raise AssertionError(f"driver exited early ({p.returncode})")
                if time.monotonic() > deadline:
                    raise AssertionError("driver made too little progress")
                time.sleep(0.05)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()


def max_sync_mark(seg):
    """The highest sync mark among the whole records of segment seg (0 if
    it is absent): how far an fdatasync had covered the segment when its
    latest synced-after record was written (docs/storage-format.md,
    "Record": 44-byte header, little-endian, sync mark at byte 36)."""
    try:
        with open(seg, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    pos, best = 0, 0
    while pos + 44 <= len(data) and data[pos:pos + 4] == b"TNR1":
        body_len, mark, key_len = struct.unpack_from("<IIH", data, pos + 32)
        end = pos + 44 + key_len + body_len
        if end > len(data):
            break
        best = max(best, mark)
        pos = end
    return best


def ipv6_loopback():
    """Whether this host can listen on ::1 (some containers have no IPv6)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def ledger_lines(ledger):
    try:
        with open(ledger) as f:
            return sum(1 for line in f if line.startswith("A "))
    except FileNotFoundError:
        return 0


class TerndTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-e2e-")
        self.data = os.path.join(self.dir, "data")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_ternd(self, *args, env=None):
        return subprocess.run([TERND, *args], capture_output=True, text=True, timeout=60, env=env)

    def test_help_lists_options_with_defaults(self):
        res = self.run_ternd("--help")
        self.assertEqual(res.returncode, 0)
        for opt in ("--data-path", "--segment-bytes", "--durability", "--commit-max-delay",
                    "--disk-high-watermark", "--checkpoint-every"):
            self.assertIn(opt, res.stdout)
        self.assertIn("default 64MiB", res.stdout)
        # Shape: areas in order, every option once, defaults as
        # --print-config writes them, human ranges, nsqd's no-op flags and
        # the environment.
        out = res.stdout
        titles = re.findall(r"\n\n(\S[^\n]*):\n", out)
        self.assertEqual(titles[:12], [
            "General", "Listeners and addresses", "Storage", "Delivery", "NSQ protocol",
            "HTTP", "WebSocket live feed", "Security", "Metastore", "Cluster", "Replication",
            "Limits"])
        self.assertIn("Environment", titles)
        self.assertNotIn("Other options", titles)
        printed = self.run_ternd("--print-config").stdout
        for line in printed.splitlines():
            name, value = line.split(" = ", 1)
            value = value.strip('"') or "(none)"
            heads = [h for h in out.splitlines() if h.startswith(f"  --{name} ")]
            self.assertEqual(len(heads), 1, name)
            self.assertIn(f"(default {value}", heads[0])
        self.assertNotIn("9223372036854775807", out)
        self.assertIn("--retention (default 168h; range 0..unlimited)", out)
        self.assertIn("  --mem-queue-size\n", out)
        self.assertIn("  TERN_ADMIN_PASSWORD\n", out)
        self.assertIn("  TERN_CONFIG\n", out)

    def test_bad_values_name_option_and_range(self):
        res = self.run_ternd(f"--data-path={self.data}", "--segment-bytes=1k")
        self.assertEqual(res.returncode, 2)
        self.assertIn("segment-bytes", res.stderr)
        self.assertIn("64KiB..1GiB", res.stderr)
        env = dict(os.environ, TERN_DURABILITY="sometimes")
        res = self.run_ternd(f"--data-path={self.data}", env=env)
        self.assertEqual(res.returncode, 2)
        self.assertIn("TERN_DURABILITY", res.stderr)
        self.assertIn("durable, write_ack, relaxed", res.stderr)
        self.assertFalse(os.path.exists(self.data), "nothing is created on a config error")

    def test_bad_listener_addresses_exit_2(self):
        # Each mistake has its own message naming the option, where the
        # value came from and what is wrong; nothing is created.
        cases = [
            (["--tcp-address=127.0.0.1:99999"], None,
             'tcp-address (flag --tcp-address): "127.0.0.1:99999": '
             "port 99999 is out of range 0-65535"),
            (["--http-address=localhost"], None,
             'http-address (flag --http-address): "localhost": missing port'),
            (["--tcp-address=4150"], None, "write :4150"),
            (["--tcp-address="], None, 'tcp-address (flag --tcp-address): "": empty'),
            ([], {"TERN_METRICS_ADDRESS": "no-such-host.invalid:9100"},
             'metrics-address (environment TERN_METRICS_ADDRESS): "no-such-host.invalid:9100": '
             'host "no-such-host.invalid" does not resolve'),
            (["--raft-address=[::1]:4153"], None, "raft-address (flag --raft-address)"),
            (["--lookupd-tcp-address=a:4160,b"], None,
             'lookupd-tcp-address (flag --lookupd-tcp-address): "b": missing port'),
        ]
        for args, env, want in cases:
            with self.subTest(args=args, env=env):
                res = self.run_ternd(f"--data-path={self.data}", *args,
                                     env=dict(os.environ, **(env or {})))
                self.assertEqual(res.returncode, 2, res.stderr)
                self.assertIn(want, res.stderr)
        conf = os.path.join(self.dir, "tern.conf")
        with open(conf, "w") as f:
            f.write('http_address = "[::1"\n')
        res = self.run_ternd(f"--data-path={self.data}", f"--config={conf}")
        self.assertEqual(res.returncode, 2, res.stderr)
        self.assertIn(f"http-address (config {conf}:1): \"[::1\": missing ']'", res.stderr)
        self.assertFalse(os.path.exists(self.data), "nothing is created on a config error")

    def test_listener_addresses_as_nsqd_takes_them(self):
        # ":port" and 0.0.0.0:port are every interface, IPv4 and IPv6, as
        # nsqd's net.Listen; a host name is resolved at startup.
        d = Daemon(self.data, "--tcp-address=0.0.0.0:0", "--http-address=:0",
                   "--metrics-address=localhost:0")
        d.wait_for("ready")
        try:
            self.assertIn("metrics listening on port", d.log())
            self.assertIn("(localhost:0 = 127.0.0.1:0, plain)", d.log())
            self.assertEqual(http_get(d.http_port, "/ping"), (200, b"OK"))
            self.assertEqual(http_get(d.metrics_port, "/metrics")[0], 200)
            c = Conn(d.tcp_port)
            self.assertEqual(c.pub("addr_v4", b"x"), (FRAME_RESPONSE, b"OK"))
            c.close()
            if ipv6_loopback():
                h = http.client.HTTPConnection("::1", d.http_port, timeout=10)
                h.request("GET", "/ping")
                self.assertEqual(h.getresponse().read(), b"OK")
                h.close()
                c = Conn(d.tcp_port, host="::1")
                self.assertEqual(c.pub("addr_v6", b"x"), (FRAME_RESPONSE, b"OK"))
                c.close()
        finally:
            self.assertEqual(d.stop(), 0, d.log())

    def assert_failed_start(self, res, want):
        self.assertEqual(res.returncode, 1, res.stderr)
        self.assertIn(want, res.stderr)
        self.assertNotRegex(res.stderr, r"\bready\b")  # "already in use" may be there
        self.assertNotIn("SIGTERM", res.stderr)
        self.assertNotIn("SIGINT", res.stderr)

    def test_listener_that_cannot_bind_exits_1(self):
        # A port in use, for each listener: the error names the address,
        # the option and the system error; ternd never says "ready" and
        # does not pretend a signal came.
        for opt in ("tcp-address", "http-address", "metrics-address", "raft-address"):
            with self.subTest(opt=opt):
                taken = socket.socket()
                taken.bind(("127.0.0.1", 0))
                taken.listen(1)
                port = taken.getsockname()[1]
                try:
                    res = self.run_ternd(f"--data-path={self.data}", "--tcp-address=127.0.0.1:0",
                                         "--http-address=127.0.0.1:0",
                                         "--raft-address=127.0.0.1:0",
                                         f"--{opt}=127.0.0.1:{port}")
                finally:
                    taken.close()
                prefix = "metastore: " if opt == "raft-address" else ""
                self.assert_failed_start(
                    res, f"{prefix}cannot listen on 127.0.0.1:{port} ({opt}): "
                         "address already in use")
        # An address this host does not have (TEST-NET-1, RFC 5737).
        res = self.run_ternd(f"--data-path={self.data}", "--tcp-address=127.0.0.1:0",
                             "--http-address=192.0.2.1:4151", "--raft-address=127.0.0.1:0")
        self.assert_failed_start(
            res, "cannot listen on 192.0.2.1:4151 (http-address): address not available")
        # The data directory was released: a normal start works.
        d = Daemon(self.data)
        d.wait_for("ready")
        self.assertEqual(d.stop(), 0, d.log())

    def test_nsq_auth_chooses_how_the_nsq_doors_authenticate(self):
        # nsq-auth=users alone (without nsq-auth-users) puts tern's users
        # behind AUTH.
        env = dict(os.environ, TERN_ADMIN_PASSWORD="s3cret-pw")
        d = Daemon(self.data, "--nsq-auth=users", env=env)
        d.wait_for("root user admin created")
        try:
            self.assertIn("NSQ AUTH is served by tern's users", d.log())
            c = Conn(d.tcp_port)
            self.assertTrue(c.identify()["auth_required"])
            c.cmd("AUTH", b"admin:s3cret-pw")
            kind, data = c.read_frame()
            self.assertEqual(kind, FRAME_RESPONSE, data)
            self.assertEqual(json.loads(data)["identity"], "admin")
            c.close()
        finally:
            self.assertEqual(d.stop(), 0, d.log())
        # open: no AUTH, as nsqd.
        d = Daemon(self.data, "--nsq-auth=open")
        d.wait_for("ready")
        try:
            c = Conn(d.tcp_port)
            self.assertFalse(c.identify().get("auth_required", False))
            self.assertEqual(c.pub("open_topic", b"x"), (FRAME_RESPONSE, b"OK"))
            c.close()
        finally:
            self.assertEqual(d.stop(), 0, d.log())
        # A contradiction exits 2 naming both options.
        res = self.run_ternd(f"--data-path={self.data}", "--nsq-auth=open",
                             "--auth-http-address=127.0.0.1:4181")
        self.assertEqual(res.returncode, 2, res.stderr)
        self.assertIn("nsq-auth=open contradicts auth-http-address", res.stderr)
        res = self.run_ternd(f"--data-path={self.data}", "--nsq-auth=external")
        self.assertEqual(res.returncode, 2, res.stderr)
        self.assertIn("nsq-auth=external needs auth-http-address", res.stderr)

    def test_config_file_and_precedence(self):
        conf = os.path.join(self.dir, "tern.conf")
        with open(conf, "w") as f:
            f.write(f'data_path = "{self.data}"\ncommit_max_requests = 10\ndurability = relaxed\n')
        env = dict(os.environ, TERN_COMMIT_MAX_REQUESTS="20")
        res = self.run_ternd(f"--config={conf}", "--durability=write_ack", "--print-config",
                             env=env)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn(f'data-path = "{self.data}"', res.stdout)
        self.assertIn("commit-max-requests = 20", res.stdout)
        self.assertIn("durability = write_ack", res.stdout)

    def test_lock_format_and_shutdown(self):
        d = Daemon(self.data)
        d.wait_for("ready")
        with open(os.path.join(self.data, "FORMAT")) as f:
            self.assertEqual(f.read(), "tern-storage 1\n")
        second = self.run_ternd(f"--data-path={self.data}")
        self.assertEqual(second.returncode, 1)
        self.assertIn("locked by another process", second.stderr)
        self.assertEqual(d.stop(), 0, d.log())
        self.assertIn("storage closed", "".join(d.lines))
        # The lock is released: a new daemon starts, and SIGINT works too.
        d = Daemon(self.data)
        d.wait_for("ready")
        self.assertEqual(d.stop(signal.SIGINT), 0, d.log())

    def test_pid_file(self):
        # --pid-file is written once the lock is held, left alone by a daemon
        # refused the lock, and removed at a clean exit; a pid file that
        # cannot be written stops the start.
        pid_file = os.path.join(self.dir, "ternd.pid")
        d = Daemon(self.data, f"--pid-file={pid_file}")
        d.wait_for("ready")
        with open(pid_file) as f:
            self.assertEqual(f.read(), f"{d.proc.pid}\n")
        second = self.run_ternd(f"--data-path={self.data}", f"--pid-file={pid_file}")
        self.assertEqual(second.returncode, 1)
        with open(pid_file) as f:
            self.assertEqual(f.read(), f"{d.proc.pid}\n")
        self.assertEqual(d.stop(), 0, d.log())
        self.assertFalse(os.path.exists(pid_file), "a clean exit removes the pid file")
        res = self.run_ternd(f"--data-path={self.data}", f"--pid-file={self.dir}/no/ternd.pid",
                             "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                             "--raft-address=127.0.0.1:0")
        self.assertEqual(res.returncode, 1)
        self.assertIn(f"cannot write the pid file {self.dir}/no/ternd.pid: no such file",
                      res.stderr)

    def test_metastore_keeps_the_catalog(self):
        # Topics and channels the NSQ doors create are recorded in the
        # Raft metastore (ephemeral channels are not), and a restart replays
        # them; /readyz waits for the replica (and the root user in it).
        d = Daemon(self.data)
        d.wait_for("metastore ready: leader, 0 topics")
        d.wait_for("root user admin created")
        c = Conn(d.tcp_port)
        c.identify()
        for t in ("cat-a", "cat-b", "cat-c"):
            c.pub(t, b"x")
        c.close()
        s = Conn(d.tcp_port)
        s.identify()
        s.sub("cat-a", "durable")
        s2 = Conn(d.tcp_port)
        s2.identify()
        s2.sub("cat-a", "tmp#ephemeral")
        st, _ = http_get(d.http_port, "/readyz")
        self.assertEqual(st, 200)
        st, _ = http_post(d.http_port, "/topic/delete?topic=cat-c")
        self.assertEqual(st, 200)
        time.sleep(0.3)
        s.close()
        s2.close()
        self.assertEqual(d.stop(), 0, d.log())
        self.assertTrue(os.path.isdir(os.path.join(self.data, "meta")))
        d = Daemon(self.data)
        d.wait_for("metastore ready: leader, 2 topics")
        self.assertEqual(d.stop(), 0, d.log())

    def test_root_user_seeded_once(self):
        d = Daemon(self.data)
        line = d.wait_for("root user admin created")
        self.assertIn("its password is in", line)
        path = os.path.join(self.data, "admin-password")
        st = os.stat(path)
        self.assertEqual(st.st_mode & 0o777, 0o600)
        with open(path) as f:
            pw = f.read()
        self.assertRegex(pw, r"^[A-Za-z0-9_-]{32}\n$")
        self.assertNotIn(pw.strip(), d.log())  # never logged
        self.assertEqual(d.stop(), 0, d.log())
        # Once: a restart (even with the variable set) keeps the user.
        env = dict(os.environ, TERN_ADMIN_PASSWORD="from-env")
        d = Daemon(self.data, env=env)
        d.wait_for("metastore ready: leader, 0 topics, 1 users")
        self.assertEqual(d.stop(), 0, d.log())
        self.assertNotIn("root user", d.log())
        with open(path) as f:
            self.assertEqual(f.read(), pw)

    def test_root_password_from_environment(self):
        env = dict(os.environ, TERN_ADMIN_PASSWORD="correct horse")
        d = Daemon(self.data, env=env)
        d.wait_for("root user admin created with the password from TERN_ADMIN_PASSWORD")
        self.assertEqual(d.stop(), 0, d.log())
        self.assertFalse(os.path.exists(os.path.join(self.data, "admin-password")))
        self.assertNotIn("correct horse", d.log())

    def test_newer_format_refused(self):
        os.makedirs(self.data)
        with open(os.path.join(self.data, "FORMAT"), "w") as f:
            f.write("tern-storage 99\n")
        res = self.run_ternd(f"--data-path={self.data}")
        self.assertEqual(res.returncode, 1)
        self.assertIn("format 99", res.stderr)

    def test_recovers_existing_data(self):
        # Let the crash driver write partitions and channels, kill it hard,
        # then check ternd recovers all of it at startup.
        ledger = os.path.join(self.dir, "ledger")
        run_driver_until(self.data, ledger, lambda: ledger_lines(ledger) >= 200)
        acked = ledger_lines(ledger)
        self.assertGreaterEqual(acked, 200)
        d = Daemon(self.data)
        line = d.wait_for("ready")
        self.assertIn("3 partitions (0 isolated), 3 channels", line)
        records = int(line.split(" records recovered")[0].rsplit(" ", 1)[1])
        self.assertGreaterEqual(records, acked)
        self.assertEqual(d.stop(), 0, d.log())

    def test_damaged_partition_is_isolated_not_fatal(self):
        ledger = os.path.join(self.dir, "ledger")
        part = os.path.join(self.data, "topics", "crash", "1")

        def active():
            """The partition's last segment: the one recovery scans (a
            sealed segment with a good sidecar is taken as it is, so damage
            there is found by reads and scrub, not at start)."""
            logs = sorted(n for n in os.listdir(part) if n.endswith(".log")) \
                if os.path.isdir(part) else []
            return os.path.join(part, logs[-1]) if logs else os.path.join(part, "none")

        # Stop the driver once a record's sync mark says byte 60 of the
        # active segment was made durable (a group commit's fdatasync had
        # covered it when that record was written); before that, recovery
        # rightly reads damage there as a torn tail (one commit round can
        # cover the first 4000 bytes). On a busy machine the driver can
        # seal that segment (1 MiB) between the last look and the kill:
        # then it runs again until the new active segment is there too.
        for attempt in range(5):
            run_driver_until(self.data, ledger, lambda: max_sync_mark(active()) > 200,
                             first_id=attempt * 10_000_000)
            seg = active()
            if max_sync_mark(seg) > 200:
                break
        else:
            self.fail("the driver never stopped with byte 200 of the active segment synced")
        # Damage a record near the start; later records claim it was durable.
        with open(seg, "r+b") as f:
            f.seek(60)
            b = f.read(1)
            f.seek(60)
            f.write(bytes([b[0] ^ 0xFF]))
        d = Daemon(self.data, "--metrics-address=127.0.0.1:0")
        line = d.wait_for("ready")
        self.assertIn("3 partitions (1 isolated)", line)
        self.assertIn("partition crash/1 isolated", "".join(d.lines))
        # /metrics counts it (deploy/prometheus's TernStorageLogIsolated).
        c = http.client.HTTPConnection("127.0.0.1", d.metrics_port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        self.assertIn('tern_isolated_logs{log="partition"} 1\n', text)
        # Serving the other partitions, but not ready for a load balancer
        # until an operator restarts it with the segment dealt with.
        st, body = http_get(d.http_port, "/readyz")
        self.assertEqual(st, 503, body)
        self.assertIn(b'{"error":"partition crash/1: ', body)
        self.assertEqual(d.stop(), 0, d.log())


def main():
    global TERND, DRIVER
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--driver", required=True)
    args, rest = ap.parse_known_args()
    TERND = os.path.abspath(args.ternd)
    daemon_mod.TERND = TERND
    DRIVER = os.path.abspath(args.driver)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
