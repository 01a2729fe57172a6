#!/usr/bin/env bash
# NSQ benchmarks: start a fresh ternd on a temporary data directory (on the
# same file system as the build, not tmpfs), run tern-bench against it in
# the configurations docs/performance.md reports, and print ternd's peak RSS.
#
#   bench/nsq_bench.sh BUILD_DIR [DURATION]
#
# With NSQD=PATH (an nsqd binary built by hand from nsq's sources in a
# scratch directory, never committed) it runs instead issue 26's side by
# side: the shapes below against nsqd (its default, memory-first mode: no
# fsync) and against ternd (durable: each OK after its fdatasync), a fresh
# broker per run, RUNS runs each (default 3), alternating, with the same
# client (tern-bench), on data directories on the same file system; then
# the disk's raw flush (tern-storage-bench --raw: the median of one 4 KiB
# write + fdatasync) and each shape's figures side by side with the ratios
# (medians of the runs) and the brokers' CPU time per acknowledged message
# (user + system from /proc/PID/stat over the run), the client's too, and
# the CPUs twice nsqd's rate would need at those costs:
#
#   mpub200x2   MPUB of 200 x 200 B, 2 connections, 1 consumer
#   pub8        PUB of 200 B, 8 connections, 1 consumer; flush ceiling =
#               8 in flight / the raw flush's median
#   http64      HTTP /pub of 200 B, 64 connections, 1 consumer
#
#   NSQD=/scratch/nsqd bench/nsq_bench.sh build-rel 5s
set -euo pipefail
build=${1:-build-bench}
dur=${2:-5s}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-nsq-bench.XXXXXX)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
pid=

if [ -n "${NSQD:-}" ]; then
    # shellcheck source=bench/lib.sh
    . "$here/lib.sh"
    runs=${RUNS:-3}
    hz=$(getconf CLK_TCK)
    ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
    # Starts broker $1 (nsqd|tern) on a fresh data directory; sets pid,
    # port (NSQ TCP) and hport (HTTP).
    start_broker() {
        rm -rf "$work/data"
        mkdir -p "$work/data"
        : >"$work/log"
        if [ "$1" = nsqd ]; then
            "$NSQD" --data-path="$work/data" --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 \
                >"$work/log" 2>&1 &
        else
            "$build/ternd" --data-path="$work/data" --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 \
                --raft-address=127.0.0.1:0 2>"$work/log" &
        fi
        pid=$!
        port= hport=
        for _ in $(seq 200); do
            if [ "$1" = nsqd ]; then
                port=$(sed -n 's/.*TCP: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/log")
                hport=$(sed -n 's/.*HTTP: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/log")
            else
                port=$(grep -o 'NSQ TCP listening on port [0-9]*' "$work/log" | awk '{print $6}' || true)
                hport=$(grep -o 'HTTP listening on port [0-9]*' "$work/log" | awk '{print $5}' || true)
            fi
            [ -n "$port" ] && [ -n "$hport" ] && return 0
            sleep 0.05
        done
        echo "$1 did not start:"
        cat "$work/log"
        exit 1
    }
    # One run of shape $2 against broker $1: appends "broker shape msgs/s
    # p50 p99 us/msg" to $work/rows.
    run_shape() {
        local b=$1 shape=$2 args extra=() out c0 c1 cl
        case $shape in
        mpub200x2) args=(--producers 2 --batch 200) ;;
        pub8) args=(--producers 8 --batch 1) ;;
        http64) args=(--producers 64 --batch 1) ;;
        esac
        start_broker "$b"
        [ "$shape" = http64 ] && extra=(--http-port "$hport")
        # The topic and channel first, so the run measures publishes, not setup.
        "$build/tern-bench" --addr "127.0.0.1:$port" --producers 1 --consumers 1 --count 10 \
            --topic side >/dev/null
        c0=$(ticks "$pid")
        # The client's own CPU too (bash's time: user and system seconds).
        out=$(
            TIMEFORMAT='%U %S'
            { time "$build/tern-bench" --addr "127.0.0.1:$port" --duration "$dur" --size 200 \
                --consumers 1 --topic side "${args[@]}" "${extra[@]}"; } 2>"$work/ctime"
        )
        c1=$(ticks "$pid")
        cl=$(tail -1 "$work/ctime" | awk '{print $1 + $2}')
        stop_pid "$pid" 10
        pid=
        echo "$out" | awk -v b="$b" -v s="$shape" -v c=$((c1 - c0)) -v hz="$hz" -v cl="$cl" '
            /^publish:/ { m = $2; r = $9 }
            /^publish-ack latency/ { p50 = $7; p99 = $9 }
            END { printf "%s %s %s %s %s %.2f %.2f\n", b, s, r, p50, p99, m ? c / hz * 1e6 / m : 0,
                m ? cl * 1e6 / m : 0 }' |
            tee -a "$work/rows"
    }
    echo "== side by side: nsqd ($("$NSQD" --version 2>&1 | head -1)) against ternd, $runs runs each, $dur per run"
    echo "broker shape msgs/s p50_ms p99_ms cpu_us_per_msg client_cpu_us_per_msg"
    for shape in mpub200x2 pub8 http64; do
        for i in $(seq "$runs"); do
            run_shape nsqd "$shape"
            run_shape tern "$shape"
        done
    done
    raw=$("$build/tern-storage-bench" --dir "$work/raw" --seconds 3 --raw)
    echo "$raw"
    median_us=$(echo "$raw" | awk '{print $8}')
    echo "== medians of $runs runs (msgs/s, p50/p99 ms, broker CPU us per acknowledged message)"
    printf '| %-10s | %10s | %14s | %8s | %10s | %14s | %8s | %6s |\n' shape "nsqd msgs/s" "nsqd p50/p99" \
        "nsqd cpu" "tern msgs/s" "tern p50/p99" "tern cpu" ratio
    : >"$work/ceiling"
    for shape in mpub200x2 pub8 http64; do
        awk -v s="$shape" -v ceil_us="$median_us" '
            function med(a, n,   i, j, t) {
                for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
            $2 == s { k = $1; n[k]++; r[k, n[k]] = $3; p5[k, n[k]] = $4; p9[k, n[k]] = $5; c[k, n[k]] = $6
                      q[k, n[k]] = $7 }
            END {
                for (b = 0; b < 2; b++) {
                    k = b ? "tern" : "nsqd"
                    for (i = 1; i <= n[k]; i++) {
                        x[i] = r[k, i]; y[i] = p5[k, i]; z[i] = p9[k, i]; w[i] = c[k, i]; v[i] = q[k, i]
                    }
                    R[k] = med(x, n[k]); P5[k] = med(y, n[k]); P9[k] = med(z, n[k]); C[k] = med(w, n[k])
                    Q[k] = med(v, n[k])
                }
                printf "| %-10s | %10.0f | %6.2f / %5.2f | %8.2f | %10.0f | %6.2f / %5.2f | %8.2f | %5.2fx |\n",
                    s, R["nsqd"], P5["nsqd"], P9["nsqd"], C["nsqd"], R["tern"], P5["tern"], P9["tern"], C["tern"],
                    R["nsqd"] ? R["tern"] / R["nsqd"] : 0
                # What twice nsqd would cost in CPU at the cost per message measured,
                # broker and client together, against the CPUs of this machine.
                if (s != "pub8" && R["nsqd"] > 0)
                    printf "%s at 2x nsqd (%.0f msgs/s): tern %.2f + client %.2f us/msg = %.2f CPUs (machine: %d)\n",
                        s, 2 * R["nsqd"], C["tern"], Q["tern"], 2 * R["nsqd"] * (C["tern"] + Q["tern"]) / 1e6,
                        ncpu >>ceil
                if (s == "pub8" && ceil_us > 0)
                    printf "pub8 flush ceiling: 8 in flight / %.0f us = %.0f msgs/s; tern at %.2f of it\n",
                        ceil_us, 8e6 / ceil_us, R["tern"] / (8e6 / ceil_us) >>ceil
            }' ceil="$work/ceiling" ncpu="$(nproc)" "$work/rows"
    done
    cat "$work/ceiling"
    exit 0
fi

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
