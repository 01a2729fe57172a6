#!/usr/bin/env bash
# CPU per acknowledged durable message: start a fresh ternd for each run,
# drive one shape with tern-bench, and print ternd's user + system CPU
# time over the run (from /proc/PID/stat, clock ticks) divided by the
# messages acknowledged, per thread too, with the group-commit rounds
# (partition fdatasyncs) of the run. On a shared machine throughput is
# noise; CPU per message moves far less with the load.
#
#   bench/cpu_bench.sh BUILD_DIR SHAPE [DURATION] [RUNS] [-- TERND_FLAGS...]
#
# SHAPE: pub8 (PUB, 8 connections, 200 B), mpub2 (MPUB of 200, 2
# connections, 200 B), http64 (HTTP /pub, 64 connections, 200 B), pub8c
# (pub8 with one consumer), mpub2c (mpub2 with one consumer, nsq_bench.sh's shape), pub64 (PUB, 64 connections). With STRACE=1 each run is also counted by
# `strace -c -f` (slower: its figures are syscalls per round, not CPU),
# with PERF=1 by `perf stat -e context-switches,cpu-migrations`, and with
# PROFILE=FILE recorded by `perf record -g` into FILE.<run>, with
# SCHED=FILE its wake-ups and context switches (sched tracepoints) into
# FILE.<run> (bench/sched_summary.sh reads them). With CALLGRIND=FILE
# ternd runs under valgrind's callgrind, which counts the user-space
# instructions of the measured window only (threads apart, into
# FILE.<run>-<thread>) and prints them per message: a figure the machine's
# load does not move, for changes too small for the CPU time to show
# (ternd runs ~20x slower, so the rounds are not the same; compare
# instruction counts only with instruction counts).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
build=${1:?build dir}
shape=${2:?shape}
dur=${3:-5s}
runs=${4:-3}
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = "--" ] && shift
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-cpu-bench.XXXXXX)
pid=
trap '[ -n "$pid" ] && stop_pid $pid 5; rm -rf "$work"' EXIT
hz=$(getconf CLK_TCK)
pw=bench-password

case $shape in
pub8) args=(--producers 8 --consumers 0 --batch 1) ;;
pub8c) args=(--producers 8 --consumers 1 --batch 1) ;;
pub64) args=(--producers 64 --consumers 0 --batch 1) ;;
mpub2) args=(--producers 2 --consumers 0 --batch 200) ;;
mpub2c) args=(--producers 2 --consumers 1 --batch 200) ;;
http64) args=(--producers 64 --consumers 0 --batch 1) ;;
*) echo "unknown shape $shape" >&2; exit 2 ;;
esac

ticks() { awk '{print $14 + $15}' "$1/stat"; }
rounds() {
    curl -s -u "admin:$pw" "http://127.0.0.1:$hport/metrics" |
        awk '/^tern_fsync_duration_seconds_count\{log="partition"/ {print $2}'
}
polled() {
    curl -s -u "admin:$pw" "http://127.0.0.1:$hport/metrics" |
        awk '/^tern_busy_poll_seconds_total/ {print $2}'
}

for i in $(seq "$runs"); do
    rm -rf "$work/data"
    : >"$work/log" # before the background start opens it, for the greps below
    wrap=()
    [ -n "${CALLGRIND:-}" ] && wrap=(valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes
        "--callgrind-out-file=$CALLGRIND.$i")
    TERN_ADMIN_PASSWORD=$pw "${wrap[@]}" "$build/ternd" --data-path="$work/data" --tcp-address=127.0.0.1:0 \
        --http-address=127.0.0.1:0 --raft-address=127.0.0.1:0 "$@" 2>"$work/log" &
    pid=$!
    port=
    for _ in $(seq 600); do
        port=$(grep -o 'NSQ TCP listening on port [0-9]*' "$work/log" | awk '{print $6}' || true)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { echo "ternd did not start:"; cat "$work/log"; exit 1; }
    hport=$(grep -o 'HTTP listening on port [0-9]*' "$work/log" | awk '{print $5}')
    # The admin user's password hash (bcrypt, on a worker thread) must not
    # land in the measured window.
    for _ in $(seq 600); do
        grep -q 'root user admin created' "$work/log" && break
        sleep 0.05
    done
    extra=()
    [ "$shape" = http64 ] && extra=(--http-port "$hport")
    # Create the topic first, so the run measures publishes, not setup.
    "$build/tern-bench" --addr "127.0.0.1:$port" --producers 1 --consumers 0 --count 10 \
        --topic cpu >/dev/null
    r0=$(rounds)
    p0=$(polled)
    declare -A t0=()
    for t in "/proc/$pid/task/"*; do t0[${t##*/}]=$(ticks "$t"); done
    c0=$(ticks /proc/$pid)
    tracer=
    if [ -n "${CALLGRIND:-}" ]; then
        callgrind_control -i on "$pid" >/dev/null 2>&1
    elif [ -n "${STRACE:-}" ]; then
        strace -c -f -p "$pid" -o "$work/strace" 2>/dev/null &
        tracer=$!
        sleep 0.5
    elif [ -n "${PROFILE:-}" ]; then
        perf record -q -g -F 2000 -p "$pid" -o "$PROFILE.$i" 2>/dev/null &
        tracer=$!
        sleep 0.2
    elif [ -n "${SCHED:-}" ]; then
        perf record -q -e sched:sched_switch -e sched:sched_wakeup -p "$pid" -o "$SCHED.$i" \
            2>/dev/null &
        tracer=$!
        sleep 0.2
    elif [ -n "${PERF:-}" ]; then
        perf stat -e context-switches,cpu-migrations,task-clock -p "$pid" -o "$work/perf" &
        tracer=$!
        sleep 0.2
    fi
    out=$("$build/tern-bench" --addr "127.0.0.1:$port" --duration "$dur" --size 200 --topic cpu \
        "${args[@]}" "${extra[@]}")
    c1=$(ticks /proc/$pid)
    r1=$(rounds)
    p1=$(polled)
    if [ -n "$tracer" ]; then
        kill -INT "$tracer"
        wait "$tracer" || true
    fi
    if [ -n "${CALLGRIND:-}" ]; then
        callgrind_control -i off "$pid" >/dev/null 2>&1
        callgrind_control -d "$pid" >/dev/null 2>&1
    fi
    msgs=$(echo "$out" | awk '/^publish:/ {print $2}')
    rate=$(echo "$out" | awk '/^publish:/ {print $9}')
    [ -n "${VERBOSE:-}" ] && echo "$out"
    rr=$((r1 - r0))
    awk -v c=$((c1 - c0)) -v hz="$hz" -v m="$msgs" -v r="$rr" -v rate="$rate" -v i="$i" \
        -v p="$(awk -v a="$p0" -v b="$p1" 'BEGIN { print b - a }')" 'BEGIN {
        printf "run %d: %d msgs (%s/s), ternd CPU %.2f s = %.2f us/msg, %d rounds (%.1f msgs/round), busy-polled %.2f s\n",
            i, m, rate, c / hz, c / hz * 1e6 / m, r, r ? m / r : 0, p }'
    threads=""
    for t in "/proc/$pid/task/"*; do
        id=${t##*/}
        d=$(($(ticks "$t") - ${t0[$id]:-0}))
        name=$(tr -d ' ' <"$t/comm")
        [ "$id" = "$pid" ] && name=loop
        [ "$d" -gt 0 ] && threads+=" $name=$(awk -v d="$d" -v hz="$hz" -v m="$msgs" \
            'BEGIN { printf "%.2f", d / hz * 1e6 / m }')"
    done
    echo "  per thread (us/msg):$threads"
    if [ -n "${STRACE:-}" ]; then
        awk -v r="$rr" 'NR > 2 && $1 !~ /^-/ && NF >= 5 {
            name = $NF
            if (name != "total" && r > 0) printf "  %-16s %8d calls  %.2f per round\n", name, $4, $4 / r
            if (name == "total") printf "  total            %8d calls  %.2f per round\n", $4, $4 / r }' \
            "$work/strace"
    fi
    if [ -n "${CALLGRIND:-}" ]; then
        # The window's dump, one file per thread: FILE.<run>.1-<thread>.
        # Thread 01 is the loop; 02 the first committer (tern-log).
        for f in "$CALLGRIND.$i".1-*; do
            [ -e "$f" ] || continue
            awk -v m="$msgs" -v t="${f##*-}" '/^totals:/ { if ($2 > 0) printf \
                "  callgrind thread %s: %d instructions, %.0f per message\n", t, $2, $2 / m }' "$f"
        done
    fi
    [ -n "${PERF:-}" ] && awk -v r="$rr" '/context-switches|cpu-migrations|task-clock/ {
            gsub(",", "", $1); printf "  %-18s %12s  %.2f per round\n", $2, $1, r ? $1 / r : 0 }' "$work/perf"
    unset t0
    stop_pid $pid 10
    pid=
done
