#!/usr/bin/env bash
# Native API benchmarks: start a fresh ternd on a temporary data directory
# (on the same file system as the build, not tmpfs), run tern-v1-bench
# against it in the configurations docs/performance.md reports, and print
# ternd's peak RSS.
#
#   bench/v1_bench.sh BUILD_DIR [DURATION]
set -euo pipefail
build=${1:-build-bench}
dur=${2:-5s}
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-v1-bench.XXXXXX)
pw=bench-password
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT

TERN_ADMIN_PASSWORD=$pw "$build/ternd" --data-path="$work/data" --tcp-address=127.0.0.1:0 \
    --http-address=127.0.0.1:0 --raft-address=127.0.0.1:0 2>"$work/log" &
pid=$!
for _ in $(seq 200); do
    grep -q 'root user admin created' "$work/log" && break
    sleep 0.05
done
port=$(grep -o 'HTTP listening on port [0-9]*' "$work/log" | awk '{print $5}')
[ -n "$port" ] || { echo "ternd did not start:"; cat "$work/log"; exit 1; }

run() {
    echo "== $*"
    "$build/tern-v1-bench" --addr "127.0.0.1:$port" --user admin --password "$pw" \
        --duration "$dur" "$@"
}

run --topic single --producers 16 --consumers 0
run --topic single64 --producers 64 --consumers 0
run --topic batch100 --producers 16 --consumers 0 --batch 100
run --topic roundtrip --producers 16 --consumers 64
# Consume+ack alone, from a backlog: fill it first, then drain with 64.
"$build/tern-v1-bench" --addr "127.0.0.1:$port" --user admin --password "$pw" --duration 2s \
    --topic backlog --producers 16 --batch 100 >/dev/null
run --topic backlog --producers 0 --consumers 64
echo "ternd peak RSS: $(awk '/VmHWM/ {print $2 " " $3}' /proc/$pid/status)"
