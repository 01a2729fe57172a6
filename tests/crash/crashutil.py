"""What the daemon crash tests share: starting the real ternd on a data
directory and waiting until it serves."""
import os
import subprocess
import threading
import time


def start_ternd(ternd, data, port_line, ready_line, env=None, http_port=False):
    """Start ternd on loopback with ports chosen by the kernel; return the
    process and the port announced by the log line starting with
    port_line ("NSQ TCP listening on port ", "HTTP listening on port "),
    once a line containing ready_line has been logged. With http_port,
    return the HTTP listener's port too: (process, port, http port)."""
    p = subprocess.Popen([ternd, f"--data-path={data}", "--tcp-address=127.0.0.1:0",
                          "--http-address=127.0.0.1:0", "--raft-address=127.0.0.1:0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    port = http = None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        if port_line in line:
            port = int(line.split("listening on port ")[1].split()[0])
        if "HTTP listening on port " in line:
            http = int(line.split("listening on port ")[1].split()[0])
        if ready_line in line:
            break
    if port is None or (http_port and http is None):
        p.kill()
        raise AssertionError("ternd did not start:\n" + "".join(lines))
    # Keep draining stderr so the daemon never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return (p, port, http) if http_port else (p, port)
