"""Starting and stopping the real ternd for end-to-end tests.

Every daemon listens on port 0 on 127.0.0.1 (the kernel picks a free
port); the ports are read from its log lines "NSQ TCP listening on port N"
and "HTTP listening on port N".
"""
import os
import signal
import subprocess
import time

TERND = None  # path of the ternd binary, set by the test's main()


class Daemon:
    def __init__(self, data, *args, env=None, listen=True):
        argv = [TERND, f"--data-path={data}"]
        if listen and not any(a.startswith("--tcp-address") for a in args):
            argv.append("--tcp-address=127.0.0.1:0")
        if listen and not any(a.startswith("--http-address") for a in args):
            argv.append("--http-address=127.0.0.1:0")
        if listen and not any(a.startswith("--raft-address") for a in args):
            argv.append("--raft-address=127.0.0.1:0")
        self.proc = subprocess.Popen([*argv, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, text=True)
        self.lines = []
        self.tcp_port = None
        self.http_port = None
        self.metrics_port = None

    def wait_for(self, text, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if "NSQ TCP listening on port " in line:
                self.tcp_port = int(line.split("listening on port ")[1].split()[0])
            if "metrics listening on port " in line:
                self.metrics_port = int(line.split("listening on port ")[1].split()[0])
            if "HTTP listening on port " in line:
                self.http_port = int(line.split("listening on port ")[1].split()[0])
            if text in line:
                return line
        raise AssertionError(f"ternd never said {text!r}; it said:\n{''.join(self.lines)}")

    def log(self):
        return "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        self.lines.append(err)
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)
