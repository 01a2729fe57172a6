"""The harness's free-port claims (harness.py _claim, free_port), which the
unit tests' tu_free_port (tests/unit/testutil.c) shares, without ternd:
claimers running at once, Python and C side by side, never get the same
port; a claim's file goes when its process exits or releases it; the
files of a claimer that died without exiting go at the next process's
first claim.

Run: python3 tests/cluster/test_ports.py --claimer build/unit_testutil_test_ports
(the C test binary, which claims `claim N` ports and holds them until its
standard input closes).
"""
import argparse
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

CLAIMER = None  # the C claimer, set by main()
PER = 20

# A Python claimer: as the C one, N ports printed, held until stdin closes;
# argv[2] "kill" makes it die by SIGKILL instead of exiting.
PY_CLAIMER = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import harness
ports = [harness.free_port() for _ in range(int(sys.argv[2]))]
print("\\n".join(map(str, ports)), flush=True)
sys.stdin.read()
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def owner(port):
    """The pid port's claim file names, None without a file."""
    try:
        with open(os.path.join(harness._PORT_DIR, str(port))) as f:
            return int(f.read().strip() or "0")
    except FileNotFoundError:
        return None


def start_python(how="exit"):
    return subprocess.Popen([sys.executable, "-c", PY_CLAIMER, HERE, str(PER), how],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def start_c():
    return subprocess.Popen([CLAIMER, "claim", str(PER)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def ports_of(proc):
    return [int(proc.stdout.readline()) for _ in range(PER)]


class Ports(unittest.TestCase):
    def test_claimers_at_once_never_share_and_leave_no_file(self):
        procs = [start_python() for _ in range(3)] + [start_c() for _ in range(3)]
        try:
            got = {p.pid: ports_of(p) for p in procs}
            seen = {}
            for pid, ports in got.items():
                for port in ports:
                    self.assertNotIn(port, seen, f"port {port} held by {seen.get(port)} and {pid}")
                    seen[port] = pid
                    self.assertEqual(owner(port), pid)
        finally:
            for p in procs:
                p.stdin.close()
            for p in procs:
                self.assertEqual(p.wait(30), 0)
                p.stdout.close()
        for pid, ports in got.items():
            for port in ports:
                self.assertNotEqual(owner(port), pid, f"port {port}: {pid} exited, its file is left")

    def test_release(self):
        port = harness.free_port()
        self.assertEqual(owner(port), os.getpid())
        harness._release([port])
        self.assertIsNone(owner(port))
        harness._release([port])  # twice: nothing

    def test_dead_claimers_files_are_swept(self):
        p = start_python("kill")
        ports = ports_of(p)
        p.stdin.close()
        p.wait(30)
        p.stdout.close()
        self.assertEqual(owner(ports[0]), p.pid)  # left behind
        nxt = start_c()  # its first claim sweeps
        ports_of(nxt)
        nxt.stdin.close()
        self.assertEqual(nxt.wait(30), 0)
        nxt.stdout.close()
        for port in ports:
            self.assertNotEqual(owner(port), p.pid, f"port {port}: the dead claimer's file is left")


def main():
    global CLAIMER
    ap = argparse.ArgumentParser()
    ap.add_argument("--claimer", required=True)
    args, rest = ap.parse_known_args()
    CLAIMER = os.path.abspath(args.claimer)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
