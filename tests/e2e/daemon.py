"""Starting and stopping the real ternd for end-to-end tests.

Every daemon listens on port 0 on 127.0.0.1 (the kernel picks a free
port); the ports are read from its log lines "NSQ TCP listening on port N",
"HTTP listening on port N" and (with https-address) "HTTPS listening on
port N".

With log_path, the daemon's log goes to that file (appended to, so a
restart on the same file keeps the earlier lines) instead of a pipe: a
daemon that runs long beside others (tests/cluster) never blocks on a full
pipe nobody reads, and wait_for follows the file.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time

TERND = None  # path of the ternd binary, set by the test's main()


class Daemon:
    def __init__(self, data, *args, env=None, listen=True, log_path=None, prefix=(),
                 preexec_fn=None):
        # prefix: a command that execs ternd in place (`ip netns exec NS`),
        # so the process id is still ternd's. preexec_fn runs in the child
        # before the exec (a lower resource limit, say).
        argv = [*prefix, TERND, f"--data-path={data}"]
        if listen and not any(a.startswith("--tcp-address") for a in args):
            argv.append("--tcp-address=127.0.0.1:0")
        if listen and not any(a.startswith("--http-address") for a in args):
            argv.append("--http-address=127.0.0.1:0")
        if listen and not any(a.startswith("--raft-address") for a in args):
            argv.append("--raft-address=127.0.0.1:0")
        self.log_path = log_path
        self._reader = None
        if log_path is None:
            self.proc = subprocess.Popen([*argv, *args], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, text=True,
                                         preexec_fn=preexec_fn)
        else:
            with open(log_path, "a") as out:
                start = out.tell()
                self.proc = subprocess.Popen([*argv, *args], stdout=subprocess.DEVNULL,
                                             stderr=out, env=env, text=True,
                                             preexec_fn=preexec_fn)
            self._reader = open(log_path)
            self._reader.seek(start)
            self._partial = ""
        self.lines = []
        self.tcp_port = None
        self.http_port = None
        self.https_port = None
        self.metrics_port = None

    def _readline(self, deadline):
        """The next whole log line, or "" once the daemon exited and its log
        is read, or None at the deadline."""
        if self._reader is None:
            return self.proc.stderr.readline()
        while True:
            chunk = self._reader.readline()
            if chunk:
                self._partial += chunk
                if self._partial.endswith("\n"):
                    line, self._partial = self._partial, ""
                    return line
                continue
            if self.proc.poll() is not None:
                rest = self._reader.read()
                if not rest:
                    line, self._partial = self._partial, ""
                    return line
                self._partial += rest
                continue
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def wait_for(self, text, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self._readline(deadline)
            if not line:
                break
            self.lines.append(line)
            if "NSQ TCP listening on port " in line:
                self.tcp_port = int(line.split("listening on port ")[1].split()[0])
            if "metrics listening on port " in line:
                self.metrics_port = int(line.split("listening on port ")[1].split()[0])
            if "HTTP listening on port " in line:
                self.http_port = int(line.split("listening on port ")[1].split()[0])
            if "HTTPS listening on port " in line:
                self.https_port = int(line.split("listening on port ")[1].split()[0])
            if text in line:
                return line
        raise AssertionError(f"ternd never said {text!r}; it said:\n{''.join(self.lines)}")

    def log(self):
        if self.log_path is not None:
            with open(self.log_path) as f:
                return f.read()
        return "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        if err is not None:
            self.lines.append(err)
        self._close_reader()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)
        self._close_reader()

    def _close_reader(self):
        if self._reader is not None:
            self._reader.close()
            self._reader = None


@contextlib.contextmanager
def cpu_hog(loops=3):
    """Busy loops beside the test (3 on a 2-core machine: the machine is
    slower than CI's busiest, so a window the test looks for is wide), each
    killed by its process id at the end."""
    procs = []
    try:
        for _ in range(loops):
            procs.append(subprocess.Popen([sys.executable, "-c", "while 1: pass"]))
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()
