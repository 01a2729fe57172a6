#!/usr/bin/env python3
"""The client quick starts of docs/clients.md, run: each program is taken
from its fenced block, run against a fresh ternd, and what it prints
compared with what the page shows, so the page cannot drift from the
daemon or from the programs.

Reading the page. A line `<!-- client: NAME KIND -->` marks the fenced
block right after it: `NAME program` is a program's source, `NAME output`
what it prints on a fresh node, and the other kinds are transcripts (a
"$ " command line, then what it prints) or, for `v1 retry`, one line a
/v1 program prints on stderr when it retries. Every marker the test
knows must be there, and no other.

Running them. A temporary directory is laid out as the reader's
repository root: the program saved under its file name, data/ is the
daemon's data directory (so the programs' default password file,
data/admin-password, is the daemon's), tests/ links to the source tree's
tests (for nsqjs's NODE_PATH). ternd listens on port 0; TERN_URL and
TERN_NSQD name its ports, the only settings the test gives the programs
(the page's commands run as written otherwise). Python runs with
python3, Go with `go run` (standard library only: GOPATH mode,
GOPROXY=off, GOCACHE in the build directory so a rerun does not compile
again), nsqjs with node and NODE_PATH=tests/compat/node_modules.

What is checked, for each of Python, Go and nsqjs:
  - the happy path: stdout equals the page's output (NSQ message IDs match
    by shape), status 0, and the broker's state afterwards (/stats: every
    message counted, depth, in flight and deferred 0 on the channels the
    program used);
  - its failures, through real causes: a wrong password (/v1: the page's
    401 transcript, status 1), a topic protected by an owner (nsqjs: the
    page's transcript, status 1, nothing published), a consume over
    --http-max-consumes-per-user=1 while the test holds the user's one
    long poll (/v1: 429 with Retry-After, retried as the page's line
    shows, then the normal output once the test lets the hold go), and a
    draining node (/v1: 503 with Retry-After, retried five times in all,
    then status 1 with the node's answer; the node still holds an NSQ
    message in flight, so it drains until the test FINs it).
go-nsq is not packaged for Debian and nothing is downloaded, so its
program is only checked to be formatted Go (gofmt -l), and the page must
say it was verified by hand.

Run: python3 test_clients.py --ternd build/ternd --gocache build/go-cache
(needs tests/compat/node_modules: `make compat-deps`, and golang-go)."""
import argparse
import base64
import http.client
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

import daemon as daemon_mod
from daemon import Daemon
from nsqwire import Conn

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(SRC, "docs", "clients.md")
GOCACHE = None  # set by main()

RUN_TIMEOUT = 600  # seconds for one program run; Go's first build is slow on a loaded machine
DAEMON_TIMEOUT = 120
WAIT = 120  # seconds for a state the test waits for

# Each client: the file its program is saved as, and the command the page
# says runs it (checked against the page).
CLIENTS = {
    "python": ("quickstart.py", "python3 quickstart.py"),
    "go": ("quickstart.go", "go run quickstart.go"),
    "nsqjs": ("quickstart.js", "NODE_PATH=tests/compat/node_modules node quickstart.js"),
}
MARKERS = {("python", "program"), ("python", "output"), ("python", "401"), ("v1", "retry"),
           ("go", "program"), ("go", "output"), ("go", "401"),
           ("nsqjs", "program"), ("nsqjs", "output"), ("nsqjs", "protected"),
           ("go-nsq", "program"), ("go-nsq", "output")}
MARKER = re.compile(r"^<!-- client: (\S+) (\S+) -->$")
NSQ_ID = re.compile(r"\b[0-9a-f]{16}\b")  # an NSQ message ID: it depends on the topic's past
HAND_VERIFIED = "verified by hand against go-nsq v1.1.0"
DRAINING = "503 the node is draining (it stops soon); retry on another node"


class DocError(Exception):
    pass


def parse_doc(text):
    """{(name, kind): (line number of the block's first line, [lines])}."""
    lines = text.split("\n")
    blocks = {}
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        key = (m.group(1), m.group(2))
        if key not in MARKERS:
            raise DocError(f"clients.md:{i + 1}: unknown marker {line} (the test knows {sorted(MARKERS)})")
        if key in blocks:
            raise DocError(f"clients.md:{i + 1}: marker {line} twice")
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise DocError(f"clients.md:{i + 1}: marker {line} is not followed by a fenced block")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise DocError(f"clients.md:{i + 2}: fenced block never closed")
        blocks[key] = (i + 3, lines[i + 2:end])
    missing = MARKERS - set(blocks)
    if missing:
        raise DocError(f"clients.md has no block marked {sorted(missing)}")
    return blocks


def line_regex(text):
    """An expected line as a regex: exact, but for NSQ message IDs."""
    out, pos = [], 0
    for m in NSQ_ID.finditer(text):
        out.append(re.escape(text[pos:m.start()]))
        out.append("[0-9a-f]{16}")
        pos = m.end()
    out.append(re.escape(text[pos:]))
    return re.compile("".join(out))


def compare(where, expected, printed):
    """None when the printed lines are the expected ones, else a report."""
    got = [l.rstrip() for l in printed.splitlines()]
    for k, (lineno, text) in enumerate(expected):
        if k >= len(got):
            return (f"clients.md:{lineno} shows: {text}\n  printed: (nothing more)\n"
                    f"  everything printed ({where}):\n" + indent(printed))
        if not line_regex(text.rstrip()).fullmatch(got[k]):
            return (f"clients.md:{lineno} shows: {text}\n  printed instead: {got[k]}\n"
                    f"  everything printed ({where}):\n" + indent(printed))
    if len(got) > len(expected):
        return (f"the page shows {len(expected)} lines; the program printed more: {got[len(expected)]}\n"
                f"  everything printed ({where}):\n" + indent(printed))
    return None


def indent(text):
    return "\n".join("    | " + l for l in text.splitlines())


def numbered(block):
    first, lines = block
    return [(first + k, l) for k, l in enumerate(lines)]


def transcript(block):
    """(command, [(line number, expected line)]) of a one-command transcript."""
    first, lines = block
    if not lines or not lines[0].startswith("$ "):
        raise DocError(f"clients.md:{first}: a transcript starts with a '$ ' line")
    return lines[0][2:], [(first + k, l) for k, l in enumerate(lines) if k > 0]


def split_env(command):
    """({VAR: value} of the leading assignments, [the command's words])."""
    env, words = {}, command.split()
    while words and re.match(r"^[A-Z_]+=", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words


class Base(unittest.TestCase):
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        with open(DOC) as f:
            cls.doc_text = f.read()
        cls.blocks = parse_doc(cls.doc_text)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-clients-")
        os.symlink(os.path.join(SRC, "tests"), os.path.join(self.dir, "tests"))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TERN_", "GO")) and k.lower() not in
                    ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "node_path")}
        self.d = Daemon(os.path.join(self.dir, "data"), *self.ARGS, env=self.env)
        self.d.wait_for(" ready: data ", timeout=DAEMON_TIMEOUT)
        self.d.wait_for("root user admin created", timeout=DAEMON_TIMEOUT)
        with open(os.path.join(self.dir, "data", "admin-password")) as f:
            self.password = f.read().strip()
        self.env.update(TERN_URL=f"http://127.0.0.1:{self.d.http_port}",
                        TERN_NSQD=f"127.0.0.1:{self.d.tcp_port}",
                        GOCACHE=GOCACHE, GOPATH=os.path.join(self.dir, "gopath"),
                        GO111MODULE="off", GOPROXY="off", GOFLAGS="", GOTOOLCHAIN="local")
        self.saved = set()

    def tearDown(self):
        try:
            if self.d.proc.poll() is None:
                self.d.stop(timeout=DAEMON_TIMEOUT)
            else:
                self.d.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ----------------------------------------------------------

    def save(self, client):
        name = CLIENTS[client][0]
        if client not in self.saved:
            with open(os.path.join(self.dir, name), "w") as f:
                f.write("\n".join(self.blocks[(client, "program")][1]) + "\n")
            self.saved.add(client)
        self.assertIn(f"Run it with `{CLIENTS[client][1]}`", self.doc_text,
                      f"clients.md no longer says `Run it with `{CLIENTS[client][1]}``: update "
                      "CLIENTS in this test to the command the page gives")

    def start(self, client, command=None):
        """Start a client as the page's command line says (VAR=value words,
        then the command); stdout and stderr apart."""
        self.save(client)
        env, words = split_env(command or CLIENTS[client][1])
        if words != split_env(CLIENTS[client][1])[1]:
            self.fail(f"the page runs {client} as `{command}`; the test knows `{CLIENTS[client][1]}`")
        env = {**self.env, **env}
        return subprocess.Popen(words, cwd=self.dir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def prepare(self, client):
        """Compile the Go program ahead (into Go's cache), so that its `go
        run` starts at once where the test holds a state for it."""
        self.save(client)
        if client == "go":
            r = subprocess.run(["go", "build", "-o", os.devnull, CLIENTS[client][0]], cwd=self.dir,
                               env=self.env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
            self.assertEqual(r.returncode, 0, f"go build: {r.stderr}")

    def run_client(self, client, command=None):
        p = self.start(client, command)
        try:
            out, err = p.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail(f"{client} did not finish in {RUN_TIMEOUT} s:\n{out}\n{err}")
        return p.returncode, out, err

    def check_output(self, client):
        rc, out, err = self.run_client(client)
        bad = compare("stdout", numbered(self.blocks[(client, "output")]), out)
        self.assertIsNone(bad, f"{client}: {bad}\n  stderr:\n{indent(err)}")
        self.assertEqual(rc, 0, f"{client} exited {rc}:\n{err}")
        return err

    def check_transcript(self, client, kind, status):
        command, expected = transcript(self.blocks[(client, kind)])
        rc, out, err = self.run_client(client, command)
        bad = compare("stdout, then stderr", expected, out + err)
        self.assertIsNone(bad, f"{client} {kind}: {bad}")
        self.assertEqual(rc, status, f"{client} {kind}: exit status {rc}")

    def request(self, method, path, body=None, headers=None, timeout=30):
        h = {"Authorization": "Basic " + base64.b64encode(f"admin:{self.password}".encode()).decode(),
             "X-Tern-Client": "test-clients", **(headers or {})}
        c = http.client.HTTPConnection("127.0.0.1", self.d.http_port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def channel_state(self, topic, channel):
        status, body = self.request("GET", f"/stats?format=json&topic={topic}")
        self.assertEqual(status, 200, body)
        topics = json.loads(body)["topics"] or []
        self.assertEqual([t["topic_name"] for t in topics], [topic], body)
        chans = {c["channel_name"]: c for c in topics[0]["channels"]}
        self.assertIn(channel, chans, f"{topic} has no channel {channel}: {body}")
        return topics[0], chans[channel]

    def check_settled(self, topic, channel, messages):
        """Every message of the topic counted, none left on the channel.
        Settled leases are final at their answer, so no waiting is needed."""
        t, c = self.channel_state(topic, channel)
        self.assertEqual(t["message_count"], messages, f"{topic}: {t}")
        self.assertEqual((c["depth"], c["in_flight_count"], c["deferred_count"], c["message_count"]),
                         (0, 0, 0, messages), f"{topic}/{channel} after the program: {c}")



class Clients(Base):
    # --- the /v1 programs ----------------------------------------------------

    def v1_happy_and_401(self, client):
        err = self.check_output(client)
        self.assertEqual(err, "", f"{client} wrote to stderr on the happy path:\n{err}")
        self.check_settled("quickstart", "default", 3)
        self.check_settled("quickstart-lease", "default", 1)
        self.check_transcript(client, "401", 1)
        # The 401 stopped it before anything: nothing more was produced.
        self.check_settled("quickstart", "default", 3)

    def test_python(self):
        self.v1_happy_and_401("python")

    def test_go(self):
        self.v1_happy_and_401("go")

    # --- nsqjs ----------------------------------------------------------------

    def test_nsqjs(self):
        if not os.path.isdir(os.path.join(SRC, "tests", "compat", "node_modules", "nsqjs")):
            self.fail("tests/compat/node_modules has no nsqjs: run `make compat-deps` "
                      "(`make test` does)")
        self.check_output("nsqjs")
        self.check_settled("quickstart-js", "ch", 3)
        self.check_settled("quickstart-js-lease", "ch", 1)
        t, c = self.channel_state("quickstart-js-lease", "ch")
        self.assertEqual(c["timeout_count"], 1, f"the slow reader's message did not time out: {c}")
        # Give the topic an owner: the open NSQ door refuses it from now on.
        status, body = self.request("PATCH", "/v1/topics/quickstart-js", json.dumps({"owner": "admin"}),
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 200, body)
        self.check_transcript("nsqjs", "protected", 1)
        self.check_settled("quickstart-js", "ch", 3)  # nothing published

    # --- go-nsq: what can be checked without go-nsq ------------------------

    def test_go_nsq(self):
        self.assertIn(HAND_VERIFIED, " ".join(self.doc_text.split()),
                      "clients.md must say plainly that the go-nsq example was verified by hand")
        first, lines = self.blocks[("go-nsq", "program")]
        path = os.path.join(self.dir, "main.go")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run(["gofmt", "-l", "-e", path], capture_output=True, text=True, timeout=120)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""),
                         f"clients.md:{first}: the go-nsq program is not formatted (or not) Go")
        # Its output must be the nsqjs program's, topic names aside: both
        # speak to the same door, and nsqjs's ran here.
        js = [l.replace("quickstart-js", "quickstart-go") for l in self.blocks[("nsqjs", "output")][1]]
        self.assertEqual(self.blocks[("go-nsq", "output")][1], js,
                         "the go-nsq output differs from the nsqjs one beyond topic names")


class Retry429(Base):
    """One long poll per user: the test holds admin's, so the program's
    consume gets 429 with Retry-After until the test lets it go."""
    ARGS = ("--http-max-consumes-per-user=1", "--http-max-consume-wait=60s")

    def retried_then_done(self, client):
        self.prepare(client)  # the hold below lasts 60 s at most
        status, body = self.request("POST", "/v1/topics", json.dumps({"name": "hold"}).encode(),
                                    {"Content-Type": "application/json"})
        self.assertEqual(status, 201, body)
        held = {}

        def hold():
            held["answer"] = self.request("GET", "/v1/topics/hold/consume?wait=60s", timeout=90)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        deadline = time.monotonic() + WAIT
        while json.loads(self.request("GET", "/v1/drain")[1])["long_polls"] != 1:
            self.assertLess(time.monotonic(), deadline, "the held consume never showed up")
            time.sleep(0.05)
        p = self.start(client)
        errs = []
        retrying = threading.Event()

        def read_err():
            for line in p.stderr:
                errs.append(line)
                if "retrying" in line:
                    retrying.set()
            retrying.set()  # it ended: the assertion below says whether it retried

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        try:
            retrying.wait(RUN_TIMEOUT)
            self.assertTrue(any("retrying" in e for e in errs), f"{client} never retried: {errs}")
            # Let the hold go: a produce wakes the waiting consume at once.
            status, body = self.request("POST", "/v1/topics/hold/produce", b"go",
                                        {"Content-Type": "application/octet-stream"})
            self.assertEqual(status, 202, body)
            out = p.stdout.read()
            rc = p.wait(timeout=RUN_TIMEOUT)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            reader.join(timeout=30)
            p.stdout.close()
            p.stderr.close()
            holder.join(timeout=90)
        self.assertEqual(held.get("answer", (None,))[0], 200, f"the held consume: {held}")
        bad = compare("stdout", numbered(self.blocks[(client, "output")]), out)
        self.assertIsNone(bad, f"{client} after a retry: {bad}\n  stderr:\n{indent(''.join(errs))}")
        self.assertEqual(rc, 0, "".join(errs))
        retry_first, retry_lines = self.blocks[("v1", "retry")]
        self.assertTrue(errs, "no stderr")
        self.assertEqual([errs[0].rstrip("\n")], retry_lines,
                         f"clients.md:{retry_first}: the retry line differs")
        self.assertTrue(all(e == errs[0] for e in errs), f"other stderr lines: {errs}")
        self.check_settled("quickstart", "default", 3)

    def test_python(self):
        self.retried_then_done("python")

    def test_go(self):
        self.retried_then_done("go")


class Retry503(Base):
    """A draining node answers produces 503 with Retry-After until it
    exits; an NSQ consumer's in-flight message keeps it draining."""

    def retried_then_refused(self, client):
        self.prepare(client)
        nsq = Conn(self.d.tcp_port, timeout=60)
        try:
            # The held message must outlast the program's run (a first Go
            # build on a loaded machine included): a long message timeout,
            # and heartbeats this connection may leave unanswered for 120 s.
            nsq.identify(msg_timeout=600000, heartbeat_interval=60000)
            nsq.pub("pin", b"held")
            nsq.sub("pin", "ch")
            nsq.rdy(1)
            msg = nsq.read_message()
            status, body = self.request("POST", "/v1/drain", json.dumps({"timeout_ms": 600000}),
                                        {"Content-Type": "application/json"})
            self.assertEqual(status, 202, body)
            rc, out, err = self.run_client(client)
            self.assertEqual(out, "", f"{client} printed while the node drained:\n{out}")
            path = "POST /v1/topics/quickstart/produce"
            expected = [f"{path}: {DRAINING}; retrying in 1 s"] * 4 + [f"quickstart: {DRAINING}"]
            if client == "go":
                expected.append("exit status 1")  # `go run` reporting the status
            self.assertEqual(err.splitlines(), expected)
            self.assertEqual(rc, 1)
            state = json.loads(self.request("GET", "/v1/drain")[1])["state"]
            self.assertEqual(state, "draining")
            nsq.fin(msg.id)  # the last thing in flight: the node exits
            self.assertEqual(self.d.proc.wait(timeout=DAEMON_TIMEOUT), 0, self.d.log())
        finally:
            nsq.close()

    def test_python(self):
        self.retried_then_refused("python")

    def test_go(self):
        self.retried_then_refused("go")


def main():
    global GOCACHE
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--gocache", required=True, help="Go's build cache (kept between runs)")
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    GOCACHE = os.path.abspath(args.gocache)
    os.makedirs(GOCACHE, exist_ok=True)
    for tool in ("go", "gofmt", "node", "python3"):
        if shutil.which(tool) is None:
            sys.exit(f"test_clients: {tool} is not installed (scripts/install-deps.sh installs it)")
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
