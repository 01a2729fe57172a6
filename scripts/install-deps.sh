#!/usr/bin/env bash
# Installs the Debian packages that building and testing tern need. Idempotent
# and quick when everything is present: it asks dpkg first and runs apt-get
# only for what is missing. Silent when nothing is missing; otherwise one
# line naming what it installs, and apt's output only if apt fails. It waits
# (up to 10 minutes) for another apt or dpkg to let go of their locks.
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    clang clang-format clang-tidy cppcheck
    libclang-rt-14-dev
    libuv1-dev libcmocka-dev libyajl-dev libsnappy-dev zlib1g-dev libssl-dev libzstd-dev libwslay-dev libraft-dev libcrypt-dev
    libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev
    # The package tests (tests/package): the Debian package build, the
    # unit's checks (systemd-analyze, systemd-sysusers, systemd-tmpfiles),
    # man page rendering. Build and test time only.
    debhelper dpkg-dev systemd man-db groff-base
    # The Go /v1 quick start of docs/clients.md, built and run by
    # tests/e2e/test_clients.py (standard library only, nothing fetched).
    golang-go
    # tests/e2e/test_v1_ack_strace.py: the order of an ack's 204 and the
    # channel WAL's fdatasync, seen from outside.
    strace
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if ! command -v python3 >/dev/null 2>&1; then
    missing+=(python3)
fi
# Node.js and npm run the nsqjs compatibility suite; a machine may have
# them from elsewhere (nodesource, nvm), which is fine.
# The openssl command makes the certificates of the TLS tests.
if ! command -v openssl >/dev/null 2>&1; then
    missing+=(openssl)
fi
# ip and nft make the network namespaces and the partition rules of the
# cluster tests (tests/cluster/netns.py).
if ! command -v ip >/dev/null 2>&1; then
    missing+=(iproute2)
fi
if ! command -v nft >/dev/null 2>&1; then
    missing+=(nftables)
fi
# promtool (Debian's prometheus package) and python3-yaml check deploy/:
# the alert rules and dashboard against a live /metrics, the rendered
# Kubernetes manifests and chart (tests/deploy).
if ! command -v promtool >/dev/null 2>&1; then
    missing+=(prometheus)
fi
if ! python3 -c 'import yaml' >/dev/null 2>&1; then
    missing+=(python3-yaml)
fi
if ! command -v node >/dev/null 2>&1; then
    missing+=(nodejs)
fi
if ! command -v npm >/dev/null 2>&1; then
    missing+=(npm)
fi
# Debian's chromium runs headless in the web console's browser test
# (tests/console, driven by playwright-core; no browser is downloaded).
if ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

# One line says what is installed; apt's own output goes to a file that is
# shown only if apt fails (with the debconf and dpkg chatter in it).
echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
log=$(mktemp "${TMPDIR:-/tmp}/install-deps.XXXXXX")
trap 'rm -f "$log"' EXIT

# Another apt or dpkg running (unattended-upgrades, a second terminal)
# holds the dpkg lock: wait up to this long for it instead of failing.
lock_timeout=600

# apt-get as root, non-interactive (env: sudo resets the environment),
# in the C locale so that its lock message reads the same everywhere.
apt_get() {
    $sudo env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
        apt-get -qq -o DPkg::Lock::Timeout=$lock_timeout "$@" >>"$log" 2>&1
}

failed() {
    echo "install-deps: apt-get $1 failed; its output:" >&2
    cat "$log" >&2
    exit 1
}

# apt-get update locks /var/lib/apt/lists, which DPkg::Lock::Timeout does
# not cover (apt 2.6 fails at once): try again while another apt holds it.
waited=0
until apt_get update; do
    if ! grep -q "Could not get lock" "$log" || [ $waited -ge $lock_timeout ]; then
        failed update
    fi
    sleep 5
    waited=$((waited + 5))
    : >"$log"
done
apt_get install -y --no-install-recommends "${missing[@]}" || failed install
