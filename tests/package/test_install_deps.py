#!/usr/bin/env python3
"""scripts/install-deps.sh against stand-ins: a directory first on PATH
holds a dpkg-query that answers for the packages this test names missing
(every other one is installed), the commands the script looks for
(python3, openssl, ip, nft, promtool, node, npm, chromium), an apt-get that
records each call (its arguments and DEBIAN_FRONTEND) and does what the
case asks, and a sudo that runs its arguments. Nothing is installed and no
lock is taken: that apt-get install waits with DPkg::Lock::Timeout while
another holds /var/lib/dpkg/lock-frontend is apt's own behaviour, tried by
hand (the commit that added this test says how).

1. Nothing missing: no output at all, exit 0, apt-get never runs.
2. Two packages missing, apt succeeds: exactly one line naming them, exit
   0; apt-get update then install, each with -qq and
   -o DPkg::Lock::Timeout=600, DEBIAN_FRONTEND=noninteractive, and
   install -y --no-install-recommends with both names.
3. apt-get update finds the lists locked once: the script tries again and
   goes on, still with one line of output.
4. apt-get install fails: the script exits non-zero and shows what apt
   printed (the line the stand-in wrote), after the one line.
5. apt-get update fails for another reason: no second try, its output
   shown, non-zero exit."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

DPKG_QUERY = """#!/bin/sh
# dpkg-query -W -f='${Status}' PACKAGE
for p in $STUB_MISSING; do
    [ "$p" = "$3" ] && exit 1
done
printf 'install ok installed'
"""

APT_GET = """#!/bin/sh
# Records the call; STUB_APT names what fails: update-lock (the first
# update only), update, install.
echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >>"$STUB_DIR/calls"
cmd=""
for a in "$@"; do
    case "$a" in update|install) cmd=$a;; esac
done
case "$cmd:$STUB_APT" in
update:update-lock)
    if [ ! -e "$STUB_DIR/locked-once" ]; then
        : >"$STUB_DIR/locked-once"
        echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)"
        exit 100
    fi;;
update:update)
    echo "E: The repository 'http://example.invalid bookworm Release' does not have a Release file."
    exit 100;;
install:install)
    echo "debconf: delaying package configuration, since apt-utils is not installed"
    echo "E: Unable to locate package no-such-package" >&2
    exit 100;;
esac
echo "debconf: delaying package configuration, since apt-utils is not installed" >&2
"""


def stub_dir(tmp):
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    files = {"dpkg-query": DPKG_QUERY, "apt-get": APT_GET, "sudo": '#!/bin/sh\nexec "$@"\n'}
    for cmd in ("openssl", "ip", "nft", "promtool", "node", "npm", "chromium", "python3"):
        files[cmd] = "#!/bin/sh\nexit 0\n"
    for name, text in files.items():
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    return bin_dir


def run(script, tmp, missing=(), apt=""):
    calls = os.path.join(tmp, "calls")
    for f in (calls, os.path.join(tmp, "locked-once")):
        if os.path.exists(f):
            os.unlink(f)
    env = {"PATH": os.path.join(tmp, "bin") + ":/usr/bin:/bin", "STUB_DIR": tmp,
           "STUB_MISSING": " ".join(missing), "STUB_APT": apt, "TMPDIR": tmp}
    r = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=120)
    made = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("install-deps.")]
    assert not made, f"the script left {made}"
    lines = open(calls).read().splitlines() if os.path.exists(calls) else []
    return r, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="the source tree")
    args = ap.parse_args()
    script = os.path.join(args.source, "scripts", "install-deps.sh")
    tmp = tempfile.mkdtemp(prefix="tern-install-deps-")
    try:
        stub_dir(tmp)
        r, calls = run(script, tmp)
        assert (r.returncode, r.stdout, r.stderr, calls) == (0, "", "", []), \
            f"nothing missing: exit {r.returncode}, {r.stdout!r} {r.stderr!r}, apt-get {calls}"
        print("nothing missing: silent, exit 0, no apt-get")

        want_line = "install-deps: installing cmake groff-base\n"
        r, calls = run(script, tmp, missing=("cmake", "groff-base"))
        assert (r.returncode, r.stdout, r.stderr) == (0, "", want_line), \
            f"exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}"
        lock = "-o DPkg::Lock::Timeout=600"
        want = [f"DEBIAN_FRONTEND=noninteractive -qq {lock} update",
                f"DEBIAN_FRONTEND=noninteractive -qq {lock} install -y --no-install-recommends "
                "cmake groff-base"]
        assert calls == want, f"apt-get ran as {calls}, not {want}"
        print(f"two missing: one line, then {calls}")

        r, calls = run(script, tmp, missing=("cmake",), apt="update-lock")
        assert (r.returncode, r.stderr) == (0, "install-deps: installing cmake\n"), \
            f"exit {r.returncode}, stderr {r.stderr!r}"
        assert [c.split()[-1] for c in calls[:2]] == ["update", "update"] and \
            " install " in calls[2] and len(calls) == 3, calls
        print("lists locked once: update tried again, then install; one line")

        r, calls = run(script, tmp, missing=("cmake",), apt="install")
        assert r.returncode != 0, f"a failed install exited {r.returncode}"
        err = r.stderr.splitlines()
        assert err[0] == "install-deps: installing cmake", err
        assert err[1] == "install-deps: apt-get install failed; its output:", err
        assert "E: Unable to locate package no-such-package" in err[2:], err
        print(f"install fails: exit {r.returncode}, apt's output shown")

        r, calls = run(script, tmp, missing=("cmake",), apt="update")
        assert r.returncode != 0 and len(calls) == 1, (r.returncode, calls)
        assert "install-deps: apt-get update failed; its output:" in r.stderr, r.stderr
        assert "does not have a Release file" in r.stderr, r.stderr
        print(f"update fails: exit {r.returncode}, no second try, apt's output shown")
    finally:
        shutil.rmtree(tmp)
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"FAIL: {e}")
