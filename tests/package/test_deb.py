#!/usr/bin/env python3
"""The Debian package, built from a copy of the tree and installed into a
scratch root:

1. Copy the tree's files (git's tracked and untracked-but-not-ignored ones,
   so no build output) to a temporary directory and run
   `dpkg-buildpackage -b -us -uc` there, with DEB_BUILD_OPTIONS=nocheck and
   parallel=2; the time it took is printed.
2. Check the .deb with dpkg-deb: its files, conffiles, dependencies and
   maintainer scripts.
3. Install it into a scratch root with `dpkg --root --force-script-chrootless`
   (the maintainer scripts run on this host with DPKG_ROOT set; every
   debhelper snippet the package has honours it, and a policy-rc.d in the
   root refuses to start services). The libraries it depends on are this
   host's, so --force-depends. Then check: the tern user and group, the
   unit enabled, /var/lib/tern 0750 tern:tern, /etc/tern/ternd.conf a
   conffile; the installed ternd with the installed config serves; the
   unit passes systemd-analyze verify.
4. Remove, then purge: /var/lib/tern and what is in it stay both times, and
   so does the user; the conffile goes at purge, the unit's link at remove.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import checks

HERE = os.path.dirname(os.path.abspath(__file__))


def sh(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)
    assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}{r.stderr}"
    return r.stdout


def tree_files(source):
    """The tree's files, as git knows them; without git, everything but
    build output."""
    r = subprocess.run(["git", "-C", source, "ls-files", "-z", "-co", "--exclude-standard"],
                       capture_output=True)
    if r.returncode == 0:
        return [f for f in r.stdout.decode().split("\0") if f and os.path.isfile(
            os.path.join(source, f))]
    print("not a git checkout: copying the tree without build*/, data/ and node_modules/")
    out = []
    for d, dirs, files in os.walk(source):
        rel = os.path.relpath(d, source)
        dirs[:] = [x for x in dirs if not (rel == "." and (x.startswith("build") or x in (
            "data", "cluster-data", ".git"))) and x != "node_modules"]
        out += [os.path.normpath(os.path.join(rel, f)) for f in files]
    return out


def version_of(source):
    text = open(os.path.join(source, "src/cmd/version.h")).read()
    return re.search(r'#define TN_VERSION "([^"]+)"', text).group(1)


def build(source, work, jobs):
    tree = os.path.join(work, "tern")
    for f in tree_files(source):
        dst = os.path.join(tree, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(source, f), dst)
    version = version_of(source)
    first = open(os.path.join(tree, "debian/changelog")).readline()
    assert first.startswith(f"tern ({version})"), \
        f"debian/changelog's top entry {first.strip()!r} is not version.h's {version}"
    # Run from `make test`, ctest hands down the outer make's MAKEFLAGS
    # (a jobserver whose descriptors are not ours): debian/rules gets -jN
    # from parallel= alone.
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env["DEB_BUILD_OPTIONS"] = f"nocheck parallel={jobs}"
    start = time.monotonic()
    r = subprocess.run(["dpkg-buildpackage", "-b", "-us", "-uc"], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - start
    assert r.returncode == 0, f"dpkg-buildpackage exited {r.returncode}:\n{r.stdout[-6000:]}" \
                              f"{r.stderr[-4000:]}"
    arch = sh(["dpkg", "--print-architecture"]).strip()
    deb = os.path.join(work, f"tern_{version}_{arch}.deb")
    assert os.path.exists(deb), f"no {deb}; {work} has {os.listdir(work)}"
    print(f"dpkg-buildpackage -b (nocheck, parallel={jobs}) took {took:.0f} s")
    return deb


def check_deb(deb, work):
    listing = sh(["dpkg-deb", "-c", deb])
    files = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    for f in ("/usr/bin/ternd", "/usr/bin/tern-bench", "/usr/bin/tern-v1-bench",
              "/usr/share/man/man1/ternd.1.gz", "/usr/share/man/man1/tern-bench.1.gz",
              "/usr/share/man/man1/tern-v1-bench.1.gz", "/etc/tern/ternd.conf",
              "/lib/systemd/system/ternd.service", "/usr/lib/sysusers.d/tern.conf",
              "/usr/lib/tmpfiles.d/tern.conf", "/usr/share/doc/tern/copyright"):
        assert f in files, f"{f} is not in the package:\n{listing}"
    assert not any(f.startswith("/var/lib/tern") for f in files), \
        "the package ships /var/lib/tern: the data directory must be made, not owned"
    assert not any("test" in os.path.basename(f) for f in files if f.startswith("/usr/bin")), \
        files
    ctl = os.path.join(work, "control")
    sh(["dpkg-deb", "-e", deb, ctl])
    assert open(os.path.join(ctl, "conffiles")).read().split() == ["/etc/tern/ternd.conf"]
    depends = sh(["dpkg-deb", "-f", deb, "Depends"])
    for d in ("libuv1", "libraft2", "procps", "systemd | systemd-standalone-sysusers"):
        assert d in depends, f"Depends lacks {d}: {depends}"
    postinst = open(os.path.join(ctl, "postinst")).read()
    users = postinst.index("systemd-sysusers")
    assert users < postinst.index("systemd-tmpfiles"), \
        "postinst must make the user before /var/lib/tern is given to it"
    assert "deb-systemd-helper enable 'ternd.service'" in postinst, postinst
    for script in ("postrm", "prerm", "postinst"):
        text = open(os.path.join(ctl, script)).read()
        assert "/var/lib/tern" not in text and "deluser" not in text and "userdel" not in text, \
            f"{script} touches the data directory or the user:\n{text}"


def scratch_root(work):
    root = os.path.join(work, "root")
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/log", "etc", "usr/sbin"):
        os.makedirs(os.path.join(root, d))
    for f in ("var/lib/dpkg/status", "var/lib/dpkg/available"):
        open(os.path.join(root, f), "w").close()
    # Service starts are refused inside this root (deb-systemd-invoke reads
    # $DPKG_ROOT/usr/sbin/policy-rc.d); none would run here anyway, with no
    # systemd as init.
    policy = os.path.join(root, "usr/sbin/policy-rc.d")
    with open(policy, "w") as f:
        f.write("#!/bin/sh\nexit 101\n")
    os.chmod(policy, 0o755)
    return root


def dpkg(root, *args):
    return sh(["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends",
               f"--log={root}/var/log/dpkg.log", *args])


def status(root):
    r = subprocess.run(["dpkg", f"--root={root}", "-s", "tern"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def install_and_remove(deb, work):
    root = scratch_root(work)
    host_passwd = open("/etc/passwd").read()
    dpkg(root, "-i", deb)
    st = status(root)
    assert "Status: install ok installed" in st, st
    assert re.search(r"^ /etc/tern/ternd.conf [0-9a-f]{32}$", st, re.M), \
        f"/etc/tern/ternd.conf is not a conffile:\n{st}"
    link = os.path.join(root, "etc/systemd/system/multi-user.target.wants/ternd.service")
    assert os.readlink(link) == "/lib/systemd/system/ternd.service", \
        f"the unit is not enabled: {link}"
    checks.check_user_and_dir(root, "/usr/lib/sysusers.d/tern.conf",
                              "/usr/lib/tmpfiles.d/tern.conf", apply=False)
    assert open("/etc/passwd").read() == host_passwd, "the install changed this host's users"
    print("installed: user tern, /var/lib/tern 0750 tern:tern, conffile, ternd.service enabled")
    checks.check_programs(root, "/usr/bin", "/usr/share/man")
    ternd = os.path.join(root, "usr/bin/ternd")
    checks.check_config(root, "/etc/tern/ternd.conf", ternd)
    checks.check_unit(root, "/lib/systemd/system/ternd.service", "/usr/bin",
                      "/etc/tern/ternd.conf", "/usr/share/man")
    checks.check_serves(ternd, os.path.join(root, "etc/tern/ternd.conf"))
    print("the installed ternd serves with the installed config")

    data = os.path.join(root, "var/lib/tern")
    marker = os.path.join(data, "kept")
    with open(marker, "w") as f:
        f.write("messages\n")
    dpkg(root, "-r", "tern")
    assert "Status: deinstall ok config-files" in status(root), status(root)
    assert open(marker).read() == "messages\n", "remove lost the data directory"
    assert os.path.exists(os.path.join(root, "etc/tern/ternd.conf")), "remove took the conffile"
    assert not os.path.exists(os.path.join(root, "usr/bin/ternd"))
    dpkg(root, "-P", "tern")
    assert status(root) == "" or "not-installed" in status(root), status(root)
    assert open(marker).read() == "messages\n", "purge lost the data directory"
    st = os.stat(data)
    assert st.st_mode & 0o777 == 0o750, oct(st.st_mode)
    assert not os.path.exists(os.path.join(root, "etc/tern/ternd.conf")), "purge left the conffile"
    assert not os.path.lexists(link), "purge left the unit's link"
    assert "tern:" in open(os.path.join(root, "etc/passwd")).read(), "purge removed the user"
    print("remove and purge: /var/lib/tern and its data kept, the user kept, "
          "the conffile purged")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.path.normpath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    for tool in ("dpkg-buildpackage", "dh", "dpkg-deb", "systemd-sysusers", "systemd-tmpfiles"):
        assert shutil.which(tool), f"{tool} is missing: run scripts/install-deps.sh"
    work = tempfile.mkdtemp(prefix="tern-deb-")
    try:
        deb = build(args.source, work, args.jobs)
        check_deb(deb, work)
        print("package contents, conffiles, Depends and maintainer scripts checked")
        install_and_remove(deb, work)
    finally:
        shutil.rmtree(work)
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"FAIL: {e}")
