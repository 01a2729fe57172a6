"""What the daemon crash tests share: starting the real ternd on a data
directory and waiting until it serves, and the /v1 calls of the crash
tests that speak the native API as the root user."""
import base64
import http.client
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


# The root user's password the /v1 crash tests start ternd with
# (TERN_ADMIN_PASSWORD), and the headers of every call they make.
PASSWORD = "crash-test-password"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode(),
        "X-Tern-Client": "crash"}


def call(conn, method, path, body=None):
    """One /v1 request as the root user: (status, body)."""
    conn.request(method, path, body=body, headers=AUTH)
    r = conn.getresponse()
    return r.status, r.read()


def wait_ready(port):
    """Wait (30 s at most) until the node on port serves the root user."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            status, _ = call(c, "GET", "/v1/users/admin")
            c.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("the root user never appeared")
