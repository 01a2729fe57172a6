"""Reading the `strace -f -yy` trace of the tests that prove an answer
leaves only after the fdatasync it promises (test_v1_ack_strace,
test_nsq_pause_strace): one line a syscall with the thread id first,
turned into the completed syscalls in order, each with the path of the
file descriptor it names."""
import re

LINE = re.compile(r"^(\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((\d+)<([^>]*)>")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>")


def parse(path):
    """The completed syscalls of the trace, in order: (name, fd path, text)."""
    out = []
    pending = {}  # pid -> (name, fd path, text so far)
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if m is None:
                continue
            pid, rest = m.group(1), m.group(2)
            r = RESUMED.match(rest)
            if r is not None:
                if pid in pending:
                    name, fdp, text = pending.pop(pid)
                    out.append((name, fdp, text + rest, rest))
                continue
            c = CALL.match(rest)
            if c is None:
                continue
            name, fdp = c.group(1), c.group(3)
            if rest.endswith("<unfinished ...>"):
                pending[pid] = (name, fdp, rest)
                continue
            out.append((name, fdp, rest, rest))
    return out


def result(text):
    m = re.search(r"\)\s+=\s+(-?\d+)", text)
    return int(m.group(1)) if m else None


READS = ("read", "readv", "recvfrom", "recvmsg")
WRITES = ("write", "writev", "sendto", "sendmsg")
FILE_WRITES = ("write", "writev", "pwrite64", "pwritev", "pwritev2")
