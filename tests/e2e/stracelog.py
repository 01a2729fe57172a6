"""Reading the `strace -f -yy` trace of the tests that prove an answer
leaves only after the fdatasync it promises (test_v1_ack_strace,
test_nsq_pause_strace): one line a syscall with the thread id first,
turned into the completed syscalls in order, each with the path of the
file descriptor it names; then, for each request, whether a write and an
fdatasync of each file it names came between its read and its answer."""
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


def answered_after_sync(events, reqs):
    """reqs: (marker in the request, file path suffixes, status line of the
    answer[, extra]), in the order they were sent. Each request's read is
    the first read holding its marker after the previous answer; its answer
    the first write holding the status line on the same socket. extra, when
    given and not None, is called (events, read index, answer index) and
    returns a further failure or None. Returns a list of failures (empty:
    each answer left after a write and an fdatasync of every file named,
    both between the read and the answer)."""
    failures = []
    pos = 0
    for req in reqs:
        marker, files, answer = req[:3]
        extra = req[3] if len(req) > 3 else None
        i_read = next((i for i in range(pos, len(events))
                       if events[i][0] in READS and marker in events[i][2]), None)
        if i_read is None:
            failures.append(f"{marker}: its request is not in the trace")
            continue
        sock = events[i_read][1]
        i_resp = next((i for i in range(i_read, len(events))
                       if events[i][0] in WRITES and events[i][1] == sock
                       and answer in events[i][2]), None)
        if i_resp is None:
            failures.append(f"{marker}: its answer is not in the trace")
            continue
        for path in files:
            i_write = next((i for i in range(i_read + 1, i_resp)
                            if events[i][0] in FILE_WRITES and events[i][1].endswith(path)
                            and (result(events[i][2]) or 0) > 0), None)
            i_sync = None
            if i_write is not None:
                i_sync = next((i for i in range(i_write + 1, i_resp)
                               if events[i][0] == "fdatasync" and events[i][1].endswith(path)
                               and result(events[i][2]) == 0), None)
            if i_write is None or i_sync is None:
                failures.append(f"{marker}: answered ({answer!r}, trace event {i_resp}) after "
                                f"its request (event {i_read}) with no write and fdatasync of "
                                f"{path} in between (write at {i_write})")
        if extra is not None:
            f = extra(events, i_read, i_resp)
            if f is not None:
                failures.append(f)
        pos = i_resp + 1
    return failures
