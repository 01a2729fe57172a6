"""Checks shared by the package tests (test_install.py: `cmake --install`
into a scratch DESTDIR; test_deb.py: the Debian package in a scratch root):
given where a tree of installed files is and the paths inside it, check
the programs, man pages, default config, systemd unit, sysusers and
tmpfiles entries, and start the installed ternd with the installed config.
Every check raises AssertionError with what it found; nothing is skipped.
Standard library only."""
import http.client
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

PROGRAMS = ("ternd", "tern-bench", "tern-v1-bench")  # ternctl too once it is built


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    return r


def check_programs(root, bindir, mandir):
    """Every program is there and executable, and each has a man page that
    renders without warnings and lists the options its --help does."""
    programs = sorted(os.listdir(root + bindir))
    for p in PROGRAMS:
        assert p in programs, f"{bindir}/{p} not installed; {bindir} has {programs}"
    for p in programs:
        exe = root + bindir + "/" + p
        assert os.access(exe, os.X_OK), f"{exe} is not executable"
        page = f"{root}{mandir}/man1/{p}.1"
        if not os.path.exists(page) and os.path.exists(page + ".gz"):
            page += ".gz"
        assert os.path.exists(page), f"no man page for {p} at {mandir}/man1/{p}.1[.gz]"
        r = run(["man", "-l", "-P", "cat", page], env=dict(os.environ, MANWIDTH="100",
                                                           MAN_KEEP_FORMATTING="0"))
        assert r.returncode == 0, f"man -l {page}: {r.stderr}"
        text = re.sub(r".\x08", "", r.stdout)
        for section in ("NAME", "SYNOPSIS", "OPTIONS"):
            assert section in text, f"{p}.1 has no {section} section:\n{text[:2000]}"
        assert f"{p} - " in text, f"{p}.1's NAME line does not name {p}"
        help_text = run([exe, "--help"]).stdout
        for opt in sorted(set(re.findall(r"^\s+(--[a-z][a-z0-9-]+)", help_text, re.M))):
            assert opt in text, f"{p}.1 does not show {opt} (from {p} --help)"
        src = page
        if page.endswith(".gz"):
            import gzip
            tmp = tempfile.NamedTemporaryFile("wb", suffix=".1", delete=False)
            tmp.write(gzip.open(page).read())
            tmp.close()
            src = tmp.name
        r = run(["groff", "-man", "-Tutf8", "-ww", "-z", src])
        if src != page:
            os.unlink(src)
        assert r.returncode == 0 and not r.stderr.strip(), f"groff warns on {p}.1: {r.stderr}"
    return programs


def config_values(ternd, *args):
    r = run([ternd, *args, "--print-config"], env={})
    assert r.returncode == 0, f"{ternd} {' '.join(args)} --print-config: {r.stderr}"
    out = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" =")
        out[k] = v.strip()
    return out


def check_config(root, conf, ternd):
    """The default config names where it is installed in its first line,
    lists every option as `# name = default` (the value as --print-config
    writes it), sets data-path to /var/lib/tern and nothing else, and ternd
    reads it to exactly its defaults; uncommenting every line changes
    nothing either."""
    path = root + conf
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o644, f"{conf} has mode {oct(st.st_mode & 0o777)}"
    text = open(path).read()
    first = text.split("\n", 1)[0]
    assert first.startswith(f"# {conf}: "), f"{conf} begins {first!r}, not with its path"
    defaults = config_values(ternd)
    for name, value in defaults.items():
        if name == "data-path":
            continue
        want = f"# {name} = {value}" if value else f"# {name} ="
        assert re.search("^" + re.escape(want) + "$", text, re.M), \
            f"{conf} lacks the line {want!r}"
    active = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert active == ['data-path = "/var/lib/tern"'], f"{conf} sets {active}"
    got = config_values(ternd, f"--config={path}")
    want = dict(defaults, **{"data-path": '"/var/lib/tern"'})
    assert got == want, f"--config {conf} reads as {sorted(set(got.items()) ^ set(want.items()))}"
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(re.sub(r"^# ([a-z0-9-]+ =.*)$", r"\1", text, flags=re.M))
        every = f.name
    try:
        got = config_values(ternd, f"--config={every}")
    finally:
        os.unlink(every)
    assert got == want, f"{conf} uncommented reads as {sorted(set(got.items()) ^ set(want.items()))}"


class Manager:
    """A service manager's notify socket (abstract name, SO_PASSCRED)."""

    def __init__(self):
        self.name = f"@tern-package-test-{os.getpid()}-{time.monotonic_ns()}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind("\0" + self.name[1:])

    def wait_for(self, key, timeout=60):
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                data = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            seen.append(data)
            fields = dict(ln.partition("=")[::2] for ln in data.split("\n") if ln)
            if key in fields:
                return fields
        raise AssertionError(f"no {key} from ternd; it sent {seen}")

    def close(self):
        self.sock.close()


def check_serves(ternd, conf):
    """The installed ternd with the installed config (ExecStart's command
    line) starts and serves; only the data directory and the listeners
    are moved to a scratch directory and free ports."""
    data = tempfile.mkdtemp(prefix="tern-package-data-")
    m = Manager()
    log = open(os.path.join(data, "..", os.path.basename(data) + ".log"), "w+")
    proc = subprocess.Popen([ternd, "--config", conf, f"--data-path={data}/d",
                             "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                             "--raft-address=127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=log, text=True,
                            env={"NOTIFY_SOCKET": m.name, "PATH": "/usr/bin:/bin"})
    try:
        ready = m.wait_for("READY")
        assert ready["MAINPID"] == str(proc.pid), ready
        port = int(re.search(r"HTTP port (\d+)", ready["STATUS"]).group(1))
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/readyz")
        r = c.getresponse()
        body = r.read()
        c.close()
        assert r.status == 200, f"/readyz answered {r.status} {body!r}"
        proc.send_signal(signal.SIGTERM)
        m.wait_for("STOPPING")
        rc = proc.wait(timeout=60)
        assert rc == 0, f"ternd exited {rc}"
    except BaseException:
        log.seek(0)
        sys.stderr.write("ternd's log:\n" + log.read())
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        m.close()
        log.close()
        os.unlink(log.name)
        shutil.rmtree(data)


def check_unit(root, unit, bindir, conf, mandir):
    """ExecStart runs the installed ternd with the installed config; the
    unit passes systemd-analyze verify (paths moved into root, man pages
    looked up there) and its offline security exposure is at most 2.0."""
    text = open(root + unit).read()
    want = f"ExecStart={bindir}/ternd --config {conf}"
    assert re.search("^" + re.escape(want) + "$", text, re.M), f"{unit} lacks {want!r}"
    for line in ("Type=notify", "User=tern", "ExecReload=/bin/kill -HUP $MAINPID",
                 "ProtectSystem=strict", "ReadWritePaths=/var/lib/tern", "NoNewPrivileges=yes",
                 "PrivateTmp=yes", "ProtectHome=yes", "MemoryDenyWriteExecute=yes",
                 "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
                 "SystemCallFilter=@system-service", "CapabilityBoundingSet=",
                 "LimitNOFILE=1048576", "Restart=on-failure"):
        assert re.search("^" + re.escape(line) + "$", text, re.M), f"{unit} lacks {line!r}"
    stop = int(re.search(r"^TimeoutStopSec=(\d+)s$", text, re.M).group(1))
    assert stop > 30, f"TimeoutStopSec={stop}s is not past the 30 s drain bound"
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing (scripts/install-deps.sh installs systemd)"
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "ternd.service")
        with open(copy, "w") as f:
            f.write(text.replace(f"={bindir}/", f"={root}{bindir}/"))
        env = dict(os.environ, MANPATH=root + mandir)
        r = run([analyze, "verify", copy], env=env)
        assert r.returncode == 0 and not r.stderr.strip(), \
            f"systemd-analyze verify {unit}: {r.stdout}{r.stderr}"
        r = run([analyze, "security", "--offline=yes", "--threshold=20", copy], env=env)
        assert r.returncode == 0, f"systemd-analyze security {unit}:\n{r.stdout}{r.stderr}"
        m = re.search(r"Overall exposure level for ternd.service: ([0-9.]+)", r.stdout)
        assert m and float(m.group(1)) <= 2.0, r.stdout[-400:]
        print(f"unit: systemd-analyze verify passes; security exposure {m.group(1)}")


def check_user_and_dir(root, sysusers, tmpfiles, apply):
    """The sysusers entry makes the tern user and group, the tmpfiles entry
    /var/lib/tern 0750 owned by them. With apply, run systemd-sysusers and
    systemd-tmpfiles against root first (the package's postinst has)."""
    assert "u tern - " in open(root + sysusers).read()
    assert re.search(r"^d /var/lib/tern 0750 tern tern -$", open(root + tmpfiles).read(), re.M)
    if apply:
        # The files on stdin: under a prefix other than /usr they are not
        # where the tools look (systemd-sysusers reads /usr/lib/sysusers.d).
        os.makedirs(root + "/etc", exist_ok=True)
        for argv, path in ((["systemd-sysusers", f"--root={root}", "-"], sysusers),
                           (["systemd-tmpfiles", f"--root={root}", "--create", "-"], tmpfiles)):
            with open(root + path) as f:
                r = run(argv, stdin=f)
            assert r.returncode == 0, f"{' '.join(argv)} < {path}: {r.stderr}"
    users = {ln.split(":")[0]: ln.split(":") for ln in open(root + "/etc/passwd")}
    assert "tern" in users, f"no tern user in {root}/etc/passwd"
    uid, gid, home, shell = int(users["tern"][2]), int(users["tern"][3]), users["tern"][5], \
        users["tern"][6].strip()
    assert uid < 1000 and home == "/var/lib/tern" and shell.endswith("nologin"), users["tern"]
    groups = {ln.split(":")[0]: int(ln.split(":")[2]) for ln in open(root + "/etc/group")}
    assert groups.get("tern") == gid, f"tern's group is not tern: {groups.get('tern')} {gid}"
    st = os.stat(root + "/var/lib/tern")
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o750, uid, gid), \
        f"/var/lib/tern is {oct(st.st_mode & 0o7777)} {st.st_uid}:{st.st_gid}"
