#!/usr/bin/env python3
"""The README's tour, run: every command in the code blocks of its section
"A 30-second tour" against a fresh ternd, and what each prints compared with
what the README shows, so the README cannot drift from the daemon.

Reading the README. Every fenced block of the tour section (up to the next
"## " heading) is a transcript. A line starting with "$ " starts a command;
the command goes on over the following lines until `bash -n` accepts it as
complete (so a quoted script may span lines); the lines after it, up to the
next "$ " line or the end of the block, are what it prints.

Running it. The commands run in order, in a temporary directory laid out
like a fresh clone's root: build/ternd, build/tern-bench and build/ternctl
link to the binaries under test; tests/ holds links to the source tree's
tests but for tests/compat/node_modules, which only `make compat-deps`
brings; data/ is the daemon's data directory. Each fenced block runs in a
bash of its own, started as a new terminal would be: an environment of
only what a login gives (PATH, an empty HOME, the locale, USER, ...; no
TERN_* variable, no proxy), nothing from an earlier block. So a block
works only if it says itself what it needs (an `export`, a flag, `make
compat-deps`), as it must for a reader who opens a new terminal. Within a
block the commands share that bash, so shell variables carry from one to
the next. Each command's stdin is /dev/null and its stderr goes with its
stdout, as both show in a terminal. The test runs something other than
what the README says only where MAPPINGS (below) says so:

  - `make run [TERND_FLAGS='...']` starts ternd as the Makefile's run target
    does (--data-path ./data --pid-file ./data/ternd.pid, then the flags),
    through daemon.py, so on 127.0.0.1 port 0 (the test checks that the
    Makefile still says that, and that its run target builds every
    program the tour runs from build/). Its expected output is the daemon's log
    from its first line: the README's lines must match the log's first
    lines (the daemon goes on logging after them).
  - tern-bench's `--duration 5s` becomes `--duration 1s`.
  - `make compat-deps` runs the source tree's target (make -C, which
    installs the npm packages there when they are missing or stale), then
    links its tests/compat/node_modules into the temporary tree.
  - after `kill $(cat data/ternd.pid)` (SIGTERM) and `kill -9 ...`, which
    run as written, the test waits for the daemon to exit, as the reader
    watches the first terminal, and checks how it went: status 0 and
    data/ternd.pid removed after SIGTERM, death by SIGKILL after -9.

Ports. In commands and expected output, 4150 and 4151 stand for the running
daemon's NSQ and HTTP ports. In expected output, the configured addresses
that ternd echoes, "(127.0.0.1:4150)", "(127.0.0.1:4151)" and the Raft
address 127.0.0.1:4153, become the 127.0.0.1:0 the test configures.

Comparing. Lines are compared without their trailing whitespace, and
exactly, except that:
  - "..." in a line matches any text, and a line that is only "..." matches
    any number of lines (none too);
  - the tokens VOLATILE lists (times, log source lines, the partition a
    produce picked, receipt handles and their nonces, pids, ids, benchmark
    figures) match by shape: each is replaced by its regex, the rest of the
    line is compared exactly. A number that means something (an offset, a
    depth, a count of records, `missing 0`) is not in that list.
A mismatch names the README line, what it shows, and what was printed
instead; the test reports every mismatch of the tour, then fails.

Run: python3 test_readme.py --ternd build/ternd --bench build/tern-bench --ternctl build/ternctl
(needs tests/compat/node_modules: `make compat-deps`)."""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import daemon as daemon_mod
from daemon import Daemon

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(SRC, "README.md")
BENCH = None  # path of tern-bench, set by main()
TERNCTL = None  # path of ternctl, set by main()

COMMAND_TIMEOUT = 300  # seconds for one command; generous for a loaded 2-core machine
DAEMON_TIMEOUT = 120  # seconds for ternd to start, log what the README shows, or exit

# Tokens compared by shape: (what, regex finding the token in a README line,
# regex the token becomes). Applied to each expected line; the first that
# matches at a position wins.
VOLATILE = [
    ("log time", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z"),
    ("log source line", r"(?<=\.c:)\d+(?=:)", r"\d+"),
    ("JSON time", r'(?<="created_at":)\d+|(?<="timestamp":)\d+', r"\d+"),
    ("partition a produce picked", r'(?<="partition":)\d+', r"\d+"),
    ("receipt handle", r"\b\d+:\d+:\d+\b", r"\d+:\d+:\d+"),
    ("pid", r"(?<=\(pid )\d+(?=\))", r"\d+"),
    ("subscription id", r"(?<='subscription_id': ')\d+(?=')", r"\d+"),
    ("/stats start", r"(?<=^start_time )\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$",
     r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"),
    ("/stats uptime", r"(?<=^uptime )\d+(?=s$)", r"\d+"),
]
# tern-bench's result lines: every number is a figure, except the ledger's
# verdict (missing 0, duplicates 0).
BENCH_LINE = re.compile(r"^(publish:|publish-ack latency|consume:|ledger:)")
BENCH_FIGURE = (r"(?<!missing )(?<!duplicates )\b\d+(?:\.\d+)?\b", r"\d+(?:\.\d+)?")

# The only commands not run as written (see the module's paragraph).
MAKE_RUN = re.compile(r"^make run(?: TERND_FLAGS=.*)?$")
KILL = re.compile(r"^kill( -9)? \$\(cat data/ternd\.pid\)$")
MAPPINGS = [(re.compile(r"(tern-bench .*)--duration 5s\b"), r"\1--duration 1s"),
            (re.compile(r"^make compat-deps\b(.*)$"),
             lambda m: f"make --no-print-directory -C {shlex.quote(SRC)} compat-deps{m.group(1)} "
                       f"&& ln -sfn {shlex.quote(os.path.join(SRC, 'tests', 'compat', 'node_modules'))}"
                       " tests/compat/node_modules")]
# What `make run` runs, as the Makefile says it; the test checks the Makefile.
MAKEFILE_RUN = "./$(BUILD)/ternd --data-path $(DATA) --pid-file $(DATA)/ternd.pid $(TERND_FLAGS)"
MAKEFILE_DATA = "DATA ?= ./data"
# What `make run` builds first: every ./build/ program the tour runs must be
# among these targets (a reader has only what `make run` built).
MAKEFILE_RUN_BUILD = re.compile(r"^run: deps \$\(BUILD\)/Makefile\n"
                                r"\t@cmake --build \$\(BUILD\) -j \$\(JOBS\) --target ([\w -]+?) "
                                r"\$\(QUIET_MAKE\)\n", re.M)
# The environment of a new terminal: these variables of the test's own
# environment, and an empty HOME (a new user's).
TERMINAL_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "USER", "LOGNAME",
                "SHELL", "TMPDIR", "TZ")

ANY_LINES = object()  # a line that is only "..."


class ReadmeError(Exception):
    """The README's tour cannot be read as transcripts."""


class Step:
    def __init__(self, line, command, block):
        self.line = line  # README line number of the "$ " line
        self.command = command
        self.block = block  # index of its fenced block: each runs in a new bash
        self.expected = []  # (README line number, text)


def is_complete(command):
    r = subprocess.run(["bash", "-n"], input=command, text=True, capture_output=True)
    return r.returncode == 0


def parse_tour(text):
    """The tour's steps, in order."""
    lines = text.split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "## A 30-second tour")
    except StopIteration:
        raise ReadmeError("README.md has no section '## A 30-second tour'")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    steps = []
    nblocks = 0
    i = start + 1
    while i < end:
        if not lines[i].startswith("```"):
            i += 1
            continue
        i += 1
        block = []
        while i < end and not lines[i].startswith("```"):
            block.append((i + 1, lines[i]))
            i += 1
        if i >= end:
            raise ReadmeError(f"README.md:{block[0][0] if block else i}: code block never closed")
        i += 1
        if not block or not block[0][1].startswith("$ "):
            raise ReadmeError(f"README.md:{block[0][0] if block else i}: a tour block must "
                              "start with a '$ ' command line")
        nblocks += 1
        k = 0
        while k < len(block):
            lineno, l = block[k]
            if not l.startswith("$ "):
                steps[-1].expected.append((lineno, l))
                k += 1
                continue
            command = l[2:]
            k += 1
            while not is_complete(command):
                if k >= len(block):
                    raise ReadmeError(f"README.md:{lineno}: the command never completes "
                                      f"(bash -n refuses it):\n{command}")
                command += "\n" + block[k][1]
                k += 1
            steps.append(Step(lineno, command, nblocks))
    if not steps or not MAKE_RUN.match(steps[0].command):
        raise ReadmeError("the tour must start with `$ make run`")
    return steps


def substitute_ports(text, tcp, http):
    text = re.sub(r"\b4150\b", str(tcp), text)
    return re.sub(r"\b4151\b", str(http), text)


def expected_regex(text, tcp, http):
    """An expected line as a compiled regex, or ANY_LINES."""
    text = text.rstrip()
    if text == "...":
        return ANY_LINES
    finders = [v[1] for v in VOLATILE]
    shapes = [v[2] for v in VOLATILE]
    if BENCH_LINE.match(text):
        finders.append(BENCH_FIGURE[0])
        shapes.append(BENCH_FIGURE[1])
    finders.append(r"\.\.\.")
    shapes.append(".*")
    token = re.compile("|".join(f"(?P<t{n}>{f})" for n, f in enumerate(finders)))
    out, pos = [], 0

    def literal(s):
        for port in ("4150", "4151"):
            s = s.replace(f"(127.0.0.1:{port})", "(127.0.0.1:0)")
            s = s.replace(f"(127.0.0.1:{port},", "(127.0.0.1:0,")  # "(addr, plain)"
        s = s.replace("127.0.0.1:4153", "127.0.0.1:0")
        return re.escape(substitute_ports(s, tcp, http))

    for m in token.finditer(text):
        out.append(literal(text[pos:m.start()]))
        out.append(shapes[int(m.lastgroup[1:])])
        pos = m.end()
    out.append(literal(text[pos:]))
    return re.compile("".join(out))


MATCHED, MISMATCH, INCOMPLETE = "matched", "mismatch", "incomplete"


def match(expected, actual, tcp, http, prefix=False):
    """Greedy in-order match of the expected lines against the printed ones.
    Returns (MATCHED, None) or (MISMATCH | INCOMPLETE, (README line, README
    text, what was printed there or None))."""
    actual = [a.rstrip() for a in actual]
    i = 0
    skipping = False
    for lineno, text in expected:
        rx = expected_regex(text, tcp, http)
        if rx is ANY_LINES:
            skipping = True
            continue
        if skipping:
            j = next((j for j in range(i, len(actual)) if rx.fullmatch(actual[j])), None)
            if j is None:
                return INCOMPLETE, (lineno, text, "(no line after the ... matches)")
            i, skipping = j + 1, False
            continue
        if i >= len(actual):
            return INCOMPLETE, (lineno, text, None)
        if not rx.fullmatch(actual[i]):
            return MISMATCH, (lineno, text, actual[i])
        i += 1
    if not skipping and not prefix and i < len(actual):
        return MISMATCH, (expected[-1][0] if expected else None, "(nothing more)", actual[i])
    return MATCHED, None


class Shell:
    """One bash for the whole tour; run() returns what a command printed."""

    def __init__(self, cwd, env):
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.buf = bytearray()
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            chunk = self.proc.stdout.read1(65536)
            with self.cond:
                if not chunk:
                    self.buf.extend(b"\0EOF")
                    self.cond.notify_all()
                    return
                self.buf.extend(chunk)
                self.cond.notify_all()

    def run(self, command, timeout=COMMAND_TIMEOUT):
        """(output, exit status); raises AssertionError on a timeout."""
        mark = f"__tern_readme_{uuid.uuid4().hex}__"
        script = f"{{ {command}\n}} </dev/null 2>&1; printf '\\n%s %d\\n' {mark} \"$?\"\n"
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        end_rx = re.compile(rb"\n" + mark.encode() + rb" (\d+)\n")
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                m = end_rx.search(self.buf)
                if m:
                    out, status = bytes(self.buf[:m.start()]), int(m.group(1))
                    del self.buf[:m.end()]  # after reading m: it reads the buffer as it is now
                    return out.decode("utf-8", "replace"), status
                left = deadline - time.monotonic()
                if left <= 0 or self.buf.endswith(b"\0EOF"):
                    so_far = bytes(self.buf).decode("utf-8", "replace")
                    self.kill()
                    raise AssertionError(f"command did not finish in {timeout} s:\n{command}\n"
                                         f"it printed:\n{so_far}")
                self.cond.wait(min(left, 1))

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.reader.join(timeout=30)
        self.proc.stdout.close()


class Tour(unittest.TestCase):
    def setUp(self):
        node_modules = os.path.join(SRC, "tests", "compat", "node_modules", "nsqjs")
        if not os.path.isdir(node_modules):
            self.fail("tests/compat/node_modules has no nsqjs: the tour's nsqjs example needs "
                      "it; run `make compat-deps` (`make test` does)")
        with open(os.path.join(SRC, "Makefile")) as f:
            mk = f.read()
        for needed in (MAKEFILE_RUN, MAKEFILE_DATA):
            self.assertIn(needed, mk, "the Makefile's run target changed: update MAKE_RUN's "
                          "mapping in this test to what `make run` now runs")
        m = MAKEFILE_RUN_BUILD.search(mk)
        self.assertIsNotNone(m, "the Makefile's run target no longer builds a list of CMake "
                             "targets as this test reads it (MAKEFILE_RUN_BUILD)")
        run_builds = set(m.group(1).split())
        with open(README) as f:
            self.steps = parse_tour(f.read())
        for step in self.steps:
            for prog in re.findall(r"\./build/([\w-]+)", step.command):
                self.assertIn(prog, run_builds, f"README.md:{step.line}: the tour runs "
                              f"./build/{prog}, which `make run` does not build")
        self.dir = tempfile.mkdtemp(prefix="tern-readme-")
        os.makedirs(os.path.join(self.dir, "build"))
        os.symlink(daemon_mod.TERND, os.path.join(self.dir, "build", "ternd"))
        os.symlink(BENCH, os.path.join(self.dir, "build", "tern-bench"))
        os.symlink(TERNCTL, os.path.join(self.dir, "build", "ternctl"))
        # tests/ as in a fresh clone: no node_modules until make compat-deps.
        tests = os.path.join(SRC, "tests")
        for sub in os.listdir(tests):
            if sub != "compat":
                os.makedirs(os.path.join(self.dir, "tests"), exist_ok=True)
                os.symlink(os.path.join(tests, sub), os.path.join(self.dir, "tests", sub))
        os.makedirs(os.path.join(self.dir, "tests", "compat"))
        for sub in os.listdir(os.path.join(tests, "compat")):
            if sub != "node_modules":
                os.symlink(os.path.join(tests, "compat", sub),
                           os.path.join(self.dir, "tests", "compat", sub))
        home = os.path.join(self.dir, ".home")
        os.makedirs(home)
        self.env = {k: v for k, v in os.environ.items() if k in TERMINAL_ENV}
        self.env["HOME"] = home
        self.old_cwd = os.getcwd()
        os.chdir(self.dir)  # the daemon's ./data is the shell's data/
        self.shell = None  # the bash of the current block
        self.daemon = None
        self.drain = None
        self.tcp = self.http = None

    def tearDown(self):
        if self.shell is not None:
            self.shell.close()
        if self.daemon is not None and self.daemon.proc.poll() is None:
            self.daemon.proc.send_signal(signal.SIGTERM)
            try:
                self.daemon.proc.wait(timeout=DAEMON_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.daemon.proc.kill()
                self.daemon.proc.wait()
            self.drain.join(timeout=30)
            self.daemon.proc.stdout.close()
            self.daemon.proc.stderr.close()
        os.chdir(self.old_cwd)
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- the daemon of `make run` -------------------------------------------

    def start_daemon(self, step):
        if self.daemon is not None and self.daemon.proc.poll() is None:
            self.fail(f"README.md:{step.line}: `make run` while the previous ternd still runs")
        # make hands $(TERND_FLAGS) to the shell unquoted: split at blanks.
        words = shlex.split(step.command)[2:]
        flags = [f for w in words for f in w[len("TERND_FLAGS="):].split()]
        args = ["--pid-file=./data/ternd.pid", *flags]
        self.daemon = Daemon("./data", *args, env=self.env)
        self.daemon.wait_for(" ready: data ", timeout=DAEMON_TIMEOUT)
        self.tcp, self.http = self.daemon.tcp_port, self.daemon.http_port
        self.drain = threading.Thread(target=self._drain, args=(self.daemon,), daemon=True)
        self.drain.start()
        with open("data/ternd.pid") as f:
            self.assertEqual(f.read(), f"{self.daemon.proc.pid}\n",
                             "data/ternd.pid does not hold the daemon's pid")

    @staticmethod
    def _drain(d):
        for line in d.proc.stderr:
            d.lines.append(line)

    def daemon_log_matches(self, step):
        """The README's lines against the log's first lines, waiting for the
        daemon to log them."""
        deadline = time.monotonic() + DAEMON_TIMEOUT
        while True:
            log = "".join(self.daemon.lines).splitlines()
            state, where = match(step.expected, log, self.tcp, self.http, prefix=True)
            if state == MATCHED:
                return None
            # After a mismatch, wait for as many lines as the README shows, so
            # the next commands meet the daemon as far along as the README
            # has it (the root user created, say).
            settled = state == MISMATCH and len(log) >= len(step.expected)
            if settled or time.monotonic() > deadline or \
                    (self.daemon.proc.poll() is not None and not self.drain.is_alive()):
                return where, "\n".join(log)
            time.sleep(0.2)

    def wait_daemon_exit(self, step, sigkill):
        d = self.daemon
        try:
            rc = d.proc.wait(timeout=DAEMON_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"README.md:{step.line}: ternd did not exit after `{step.command}`:\n"
                      f"{d.log()}")
        self.drain.join(timeout=30)
        d.proc.stdout.close()
        d.proc.stderr.close()
        if sigkill:
            self.assertEqual(rc, -signal.SIGKILL, f"README.md:{step.line}: ternd was not "
                             f"killed by SIGKILL (status {rc})")
        else:
            self.assertEqual(rc, 0, f"README.md:{step.line}: ternd exited {rc} after SIGTERM:\n"
                             f"{d.log()}")
            self.assertFalse(os.path.exists("data/ternd.pid"),
                             f"README.md:{step.line}: data/ternd.pid is still there after a "
                             "clean exit")

    # --- the tour -------------------------------------------------------------

    def test_tour(self):
        failures = []
        block = None
        for step in self.steps:
            if step.block != block:  # a new block: a new terminal
                if self.shell is not None:
                    self.shell.close()
                self.shell = Shell(self.dir, self.env)
                block = step.block
            m = MAKE_RUN.match(step.command)
            if m:
                self.start_daemon(step)
                bad = self.daemon_log_matches(step)
                if bad:
                    failures.append(describe(step, step.command, bad[0], bad[1]))
                continue
            if self.tcp is None:
                self.fail(f"README.md:{step.line}: a command before any `make run`")
            command = step.command
            for rx, repl in MAPPINGS:
                command = rx.sub(repl, command)
            command = substitute_ports(command, self.tcp, self.http)
            out, status = self.shell.run(command)
            state, where = match(step.expected, out.splitlines(), self.tcp, self.http)
            if state != MATCHED:
                failures.append(describe(step, command, where, out, status))
            k = KILL.match(step.command)
            if k:
                self.wait_daemon_exit(step, sigkill=k.group(1) is not None)
        compared = sum(len(s.expected) for s in self.steps)
        print(f"\ntour: {len(self.steps)} commands run in {block} blocks, each in a new bash, "
              f"{compared} README lines compared, {len(failures)} differ", file=sys.stderr)
        if failures:
            self.fail(f"{len(failures)} README line(s) differ from what the tour printed:\n\n" +
                      "\n\n".join(failures))


def describe(step, ran, where, printed, status=None):
    lineno, text, got = where
    if lineno is None:  # the README shows no output for this command
        lineno = step.line
    first, *more = step.command.split("\n")
    head = f"README.md:{step.line}: $ {first}{' ...' if more else ''}"
    if ran != step.command:
        head += f"\n  (run as: {ran.splitlines()[0]})"
    if status is not None:
        head += f"\n  exit status {status}"
    got_s = "(nothing)" if got is None else got
    return (f"{head}\n  README.md:{lineno} shows: {text}\n  printed instead: {got_s}\n"
            f"  everything printed:\n" +
            "\n".join("    | " + l for l in printed.splitlines()))


def main():
    global BENCH, TERNCTL
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--bench", required=True, help="the tern-bench binary")
    ap.add_argument("--ternctl", required=True, help="the ternctl binary")
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    BENCH = os.path.abspath(args.bench)
    TERNCTL = os.path.abspath(args.ternctl)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
