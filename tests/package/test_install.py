#!/usr/bin/env python3
"""`cmake --install` of a built tree into a scratch DESTDIR (what `make
install` does): the programs, man pages, default config, systemd unit,
sysusers and tmpfiles entries land where packaging/install.cmake says for
the build's prefix; the man pages render; the installed ternd accepts the
installed config and serves (READY=1, /readyz 200); the unit passes
systemd-analyze verify; systemd-sysusers and systemd-tmpfiles make the tern
user and /var/lib/tern from the installed entries."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import checks


def cache_value(build, name):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(re.escape(name) + r":[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                return m.group(1)
    raise AssertionError(f"{name} not in {build}/CMakeCache.txt")


FAKE = r"""#!/bin/sh
# A program with commands, as ternctl prints its help.
GLOBAL='Global flags (anywhere before `--`; flags > environment > default):
  --url URL      the node (default http://127.0.0.1:4151)
  --json         print JSON

Exit codes: 0 success, 1 failed, 2 usage.'
case "$1 $2" in
"--help ") printf 'usage: fake [global flags] <command>\n\nCommands:\n  alpha   the first\n  beta    the second\n\n%s\n' "$GLOBAL";;
"alpha --help") printf 'usage: fake alpha [--deep N]\n\nDoes the first thing.\n  --deep N   how deep\n\n%s\n' "$GLOBAL";;
"beta --help") printf 'usage: fake beta\n\nThe second.\n\n%s\n' "$GLOBAL";;
*) exit 2;;
esac
"""


def check_subcommand_pages(source):
    """man-from-help.py --subcommands (ternctl's page): each command's own
    --help lands in COMMAND HELP without the global flags repeated, and a
    command whose --help fails stops the build."""
    script = os.path.join(source, "packaging", "man-from-help.py")
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "fake")
        with open(prog, "w") as f:
            f.write(FAKE)
        os.chmod(prog, 0o755)
        page = os.path.join(tmp, "fake.1")
        argv = [sys.executable, script, "--program", prog, "--name", "fake", "--summary", "x",
                "--version", "1", "--subcommands", "-o", page]
        r = subprocess.run(argv, capture_output=True, text=True)
        assert r.returncode == 0, f"man-from-help --subcommands: {r.stderr}"
        text = subprocess.run(["man", "-l", "-P", "cat", page], capture_output=True, text=True,
                              env=dict(os.environ, MANWIDTH="100")).stdout
        text = re.sub(r".\x08", "", text)
        for want in ("COMMAND HELP", "fake alpha", "Does the first thing.", "--deep N",
                     "fake beta", "The second."):
            assert want in text, f"the page lacks {want!r}:\n{text}"
        assert text.count("--url URL") == 1, f"global flags repeated:\n{text}"
        broken = FAKE.replace('"beta --help") printf', '"beta --help") exit 3; printf')
        with open(prog, "w") as f:
            f.write(broken)
        r = subprocess.run(argv, capture_output=True, text=True)
        assert r.returncode != 0 and "fake beta --help exited 3" in r.stderr, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the configured and built CMake tree")
    ap.add_argument("--source", required=True, help="the source tree")
    args = ap.parse_args()
    check_subcommand_pages(args.source)
    print("man-from-help --subcommands: each command's help, global flags once")
    prefix = cache_value(args.build, "CMAKE_INSTALL_PREFIX").rstrip("/")
    sysconf = "/etc" if prefix == "/usr" else prefix + "/etc"
    bindir, mandir = prefix + "/bin", prefix + "/share/man"
    conf = sysconf + "/tern/ternd.conf"
    unit = prefix + "/lib/systemd/system/ternd.service"
    sysusers = prefix + "/lib/sysusers.d/tern.conf"
    tmpfiles = prefix + "/lib/tmpfiles.d/tern.conf"
    root = tempfile.mkdtemp(prefix="tern-destdir-")
    try:
        r = subprocess.run(["cmake", "--install", args.build], capture_output=True, text=True,
                           env=dict(os.environ, DESTDIR=root), timeout=300)
        assert r.returncode == 0, f"cmake --install: {r.stdout}{r.stderr}"
        for path in (conf, unit, sysusers, tmpfiles, prefix + "/share/doc/tern/operations.md"):
            assert os.path.isfile(root + path), f"{path} not installed under DESTDIR"
        programs = checks.check_programs(root, bindir, mandir)
        print(f"programs and man pages: {', '.join(programs)}")
        ternd = root + bindir + "/ternd"
        checks.check_config(root, conf, ternd)
        print(f"config: {conf} lists every option with its default")
        checks.check_unit(root, unit, bindir, conf, mandir)
        checks.check_serves(ternd, root + conf)
        print("installed ternd with the installed config: READY=1, /readyz 200, clean stop")
        # The user and directory entries, applied to the scratch root
        # (which has no /etc/passwd yet: sysusers makes one).
        checks.check_user_and_dir(root, sysusers, tmpfiles, apply=True)
        print("sysusers and tmpfiles: user tern, /var/lib/tern 0750 tern:tern")
    finally:
        shutil.rmtree(root)
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"FAIL: {e}")
