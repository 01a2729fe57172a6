#!/usr/bin/env python3
"""`cmake --install` of a built tree into scratch DESTDIRs (what `make
install` does), three times: under the prefix the build was configured
with (/usr/local by default), under /usr chosen at install time
(`--prefix /usr`), and from a second tree configured with
-DCMAKE_INSTALL_PREFIX=/usr. Each time the programs, man pages, default
config, systemd unit, sysusers and tmpfiles entries land where
packaging/install.cmake says for that prefix (the config in /etc/tern for
/usr) and install_manifest.txt names exactly them; the man pages render;
the unit's ExecStart and the config's header name the installed paths;
the installed ternd accepts the installed config and serves (READY=1,
/readyz 200); the unit passes systemd-analyze verify; systemd-sysusers and
systemd-tmpfiles make the tern user and /var/lib/tern from the installed
entries. The two /usr installs must be identical file for file."""
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


def layout(prefix):
    """Where packaging/install.cmake puts each file under a prefix, with
    GNUInstallDirs' default directories: the config in /etc/tern when the
    prefix is /usr, in PREFIX/etc/tern otherwise."""
    prefix = prefix.rstrip("/")
    sysconf = "/etc" if prefix == "/usr" else prefix + "/etc"
    return {"bindir": prefix + "/bin", "mandir": prefix + "/share/man",
            "conf": sysconf + "/tern/ternd.conf",
            "unit": prefix + "/lib/systemd/system/ternd.service",
            "sysusers": prefix + "/lib/sysusers.d/tern.conf",
            "tmpfiles": prefix + "/lib/tmpfiles.d/tern.conf",
            "doc": prefix + "/share/doc/tern/operations.md"}


def install(build, root, prefix=None):
    """`cmake --install build [--prefix prefix]` into DESTDIR root; the
    files it wrote, as the manifest names them (each is under root, and
    root holds no other)."""
    argv = ["cmake", "--install", build] + (["--prefix", prefix] if prefix else [])
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, DESTDIR=root),
                       timeout=300)
    assert r.returncode == 0, f"{' '.join(argv)}: {r.stdout}{r.stderr}"
    assert "CMake Warning" not in r.stderr, f"{' '.join(argv)} warns:\n{r.stderr}"
    with open(os.path.join(build, "install_manifest.txt")) as f:
        manifest = sorted(f.read().split())
    found = sorted("/" + os.path.relpath(os.path.join(d, n), root)
                   for d, _, names in os.walk(root) for n in names)
    assert manifest == found, \
        f"the manifest and {root} differ: {sorted(set(manifest) ^ set(found))}"
    return manifest


def check_tree(root, where, serve):
    """The installed files of one install, at the paths `where` names."""
    for key in ("conf", "unit", "sysusers", "tmpfiles", "doc"):
        assert os.path.isfile(root + where[key]), f"{where[key]} not installed under DESTDIR"
    programs = checks.check_programs(root, where["bindir"], where["mandir"])
    print(f"  programs and man pages: {', '.join(programs)}")
    ternd = root + where["bindir"] + "/ternd"
    checks.check_config(root, where["conf"], ternd)
    print(f"  config: {where['conf']} names itself and lists every option with its default")
    checks.check_unit(root, where["unit"], where["bindir"], where["conf"], where["mandir"])
    if serve:
        checks.check_serves(ternd, root + where["conf"])
        print("  installed ternd with the installed config: READY=1, /readyz 200, clean stop")
    # The user and directory entries, applied to the scratch root
    # (which has no /etc/passwd yet: sysusers makes one).
    checks.check_user_and_dir(root, where["sysusers"], where["tmpfiles"], apply=True)
    print("  sysusers and tmpfiles: user tern, /var/lib/tern 0750 tern:tern")


def tree(root):
    """Every file under root: its mode and contents."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            with open(path, "rb") as f:
                out["/" + os.path.relpath(path, root)] = (os.stat(path).st_mode, f.read())
    return out


def configured_for_usr(args, scratch):
    """A second tree configured with -DCMAKE_INSTALL_PREFIX=/usr, holding
    the first one's built programs, man pages and config: nothing compiled
    names the prefix, so building them again would make the same files,
    and what this checks is the install rules under a configure-time
    prefix."""
    build = os.path.join(scratch, "build-usr")
    argv = ["cmake", "-S", args.source, "-B", build, "-DCMAKE_INSTALL_PREFIX=/usr",
            "-DCMAKE_BUILD_TYPE=" + cache_value(args.build, "CMAKE_BUILD_TYPE")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(argv)}: {r.stdout}{r.stderr}"
    for name in ("ternd", "tern-bench", "tern-v1-bench", "ternctl", "etc/ternd.conf"):
        if os.path.exists(os.path.join(args.build, name)):
            os.makedirs(os.path.dirname(os.path.join(build, name)), exist_ok=True)
            shutil.copy2(os.path.join(args.build, name), os.path.join(build, name))
    shutil.copytree(os.path.join(args.build, "man"), os.path.join(build, "man"))
    return build


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the configured and built CMake tree")
    ap.add_argument("--source", required=True, help="the source tree")
    args = ap.parse_args()
    check_subcommand_pages(args.source)
    print("man-from-help --subcommands: each command's help, global flags once")
    configured = cache_value(args.build, "CMAKE_INSTALL_PREFIX")
    scratch = tempfile.mkdtemp(prefix="tern-destdir-")
    try:
        # 1. The build as configured (/usr/local unless it was told).
        root = os.path.join(scratch, "configured")
        install(args.build, root)
        print(f"cmake --install (prefix {configured}):")
        check_tree(root, layout(configured), serve=True)
        # 2. The same build under /usr, chosen when installing: the unit
        # and the config follow, and the config goes to /etc/tern.
        root = os.path.join(scratch, "usr")
        install(args.build, root, prefix="/usr")
        at_install = tree(root)
        print("cmake --install --prefix /usr:")
        check_tree(root, layout("/usr"), serve=True)
        # 3. /usr chosen when configuring installs the very same files.
        build = configured_for_usr(args, scratch)
        root = os.path.join(scratch, "usr-configured")
        install(build, root)
        at_configure = tree(root)
        differ = sorted(p for p in set(at_install) | set(at_configure)
                        if at_install.get(p) != at_configure.get(p))
        assert not differ, f"-DCMAKE_INSTALL_PREFIX=/usr and --prefix /usr differ at {differ}"
        print(f"-DCMAKE_INSTALL_PREFIX=/usr installs the same {len(at_configure)} files, "
              f"modes and contents as --prefix /usr")
    finally:
        shutil.rmtree(scratch)
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"FAIL: {e}")
