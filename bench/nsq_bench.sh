#!/usr/bin/env bash
# NSQ benchmarks: start a fresh ternd on a temporary data directory (on the
# same file system as the build, not tmpfs), run tern-bench against it in
# the configurations docs/performance.md reports, and print ternd's peak RSS.
#
#   bench/nsq_bench.sh BUILD_DIR [DURATION]
set -euo pipefail
build=${1:-build-bench}
dur=${2:-5s}
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-nsq-bench.XXXXXX)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT

start() {
    rm -rf "$work/data"
    "$build/ternd" --data-path="$work/data" --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --raft-address=127.0.0.1:0 "$@" 2>"$work/log" &
    pid=$!
    for _ in $(seq 100); do
        port=$(grep -o 'NSQ TCP listening on port [0-9]*' "$work/log" | awk '{print $6}' || true)
        [ -n "$port" ] && return
        sleep 0.05
    done
    echo "ternd did not start:"; cat "$work/log"; exit 1
}

stop() {
    echo "ternd peak RSS: $(awk '/VmHWM/ {print $2 " " $3}' /proc/$pid/status)"
    kill $pid; wait $pid || true
}

http_port() {
    grep -o 'HTTP listening on port [0-9]*' "$work/log" | awk '{print $5}'
}

run() {
    echo "== $*"
    "$build/tern-bench" --addr "127.0.0.1:$port" --duration "$dur" "$@" | sed -n '2,5p'
}

if [ -z "${ONLY_BACKLOG:-}" ]; then
start
run --producers 16 --consumers 16 --batch 64 --size 200 --topic mpub200
run --producers 16 --consumers 16 --batch 64 --size 1024 --topic mpub1k
run --producers 16 --consumers 0 --batch 64 --size 200 --topic mpubonly
run --producers 64 --consumers 0 --batch 1 --size 200 --topic pub200
run --producers 16 --consumers 16 --batch 1 --size 200 --topic pubsub200
run --producers 16 --consumers 16 --batch 1 --size 1024 --topic pubsub1k
hp=$(http_port)
run --http-port "$hp" --http-get /ping --producers 64 --consumers 0
run --http-port "$hp" --producers 64 --consumers 0 --batch 1 --size 200 --topic httppub
run --http-port "$hp" --producers 16 --consumers 16 --batch 64 --size 200 --topic httpmpub
stop
fi

if [ -n "${BACKLOG:-}" ]; then
    echo "== backlog of $BACKLOG messages, then RSS"
    start
    "$build/tern-bench" --addr "127.0.0.1:$port" --producers 16 --consumers 0 --batch 64 \
        --size 200 --count "$BACKLOG" --topic backlog | sed -n '2,3p'
    echo "after publishing: RSS $(awk '/VmRSS/ {print $2 " " $3}' /proc/$pid/status)"
    stop
    echo "== restart over the backlog, then a consumer subscribes and reads for 5 s"
    "$build/ternd" --data-path="$work/data" --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --raft-address=127.0.0.1:0 \
        2>"$work/log" &
    pid=$!
    for _ in $(seq 600); do
        port=$(grep -o 'NSQ TCP listening on port [0-9]*' "$work/log" | awk '{print $6}' || true)
        [ -n "$port" ] && break
        sleep 0.1
    done
    "$build/tern-bench" --addr "127.0.0.1:$port" --producers 1 --consumers 8 --batch 1 \
        --size 200 --duration 5s --drain-timeout 5s --topic backlog | sed -n '4,4p' || true
    stop
fi
