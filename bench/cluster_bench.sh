#!/usr/bin/env bash
# A three-node loopback cluster against a single node, in the same run and
# with the same tools: durable /v1 produce throughput (tern-v1-bench) and
# NSQ MPUB x 64 throughput (tern-bench) with the producers spread over
# every node, produce latency through the owner and through a node that
# owns none of the topic's partitions (its ingress log), and
# produce-to-consume latency and consume+ack round trips for a local and a
# remote owner. docs/performance.md reports what it prints.
#
#   bench/cluster_bench.sh BUILD_DIR [DURATION]
#
# The cluster is scripts/cluster.sh's (fixed ports 4241-4263: nothing else
# may use them while this runs); the single node listens on port 0.
set -euo pipefail
build=${1:-build-bench}
dur=${2:-5s}
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-cluster-bench.XXXXXX)
pw=bench-password
pid=""
cleanup() {
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    [ -d "$work/cluster" ] && scripts/cluster.sh stop "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

bench() { # addr, then tern-v1-bench's options
    local addr=$1
    shift
    "$build/tern-v1-bench" --addr "$addr" --user admin --password "$pw" --duration "$dur" "$@"
}

# Sum the msgs/s of several tern-v1-bench (produce:) or tern-bench
# (publish:) outputs.
sum_msgs() {
    awk '/^(produce|publish):/ {for (i = 1; i <= NF; i++) if ($i ~ /^msgs\/s,?$/) s += $(i - 1)} END {printf "%.0f", s}' "$@"
}

# tern-bench publishing only, MPUB x 64 of 200 bytes: NSQ TCP address,
# then its further options.
nsq_mpub() {
    local addr=$1
    shift
    "$build/tern-bench" --addr "$addr" --consumers 0 --batch 64 --size 200 --duration "$dur" "$@"
}

# How many producers /lookup?topic=$2 on HTTP port $1 lists (0 while the
# topic is unknown).
lookup_producers() {
    python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/lookup?topic={sys.argv[2]}", timeout=2) as r:
        print(len(json.load(r).get("producers", [])))
except Exception:
    print(0)
PY
}

echo "== single node: 63 producers, topic of 3 partitions"
TERN_ADMIN_PASSWORD=$pw "$build/ternd" --data-path="$work/single" --tcp-address=127.0.0.1:0 \
    --http-address=127.0.0.1:0 --raft-address=127.0.0.1:0 2>"$work/single.log" &
pid=$!
for _ in $(seq 200); do
    grep -q 'root user admin created' "$work/single.log" && break
    sleep 0.05
done
port=$(grep -o 'HTTP listening on port [0-9]*' "$work/single.log" | awk '{print $5}')
[ -n "$port" ] || { echo "ternd did not start:"; cat "$work/single.log"; exit 1; }
bench "127.0.0.1:$port" --topic spread --partitions 3 --producers 63 | tee "$work/single.out"
echo "== single node: 1 producer, 4 consumers (produce-to-consume, consume+ack)"
bench "127.0.0.1:$port" --topic local --partitions 1 --producers 1 --consumers 4
echo "== single node: NSQ MPUB x 64, 48 producers, one NSQ topic"
nsq_port=$(grep -o 'NSQ TCP listening on port [0-9]*' "$work/single.log" | awk '{print $6}')
nsq_mpub "127.0.0.1:$nsq_port" --producers 48 --topic nsqspread | tee "$work/nsqsingle.out" | sed -n '2,3p'
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""

echo "== three nodes: 21 producers on each node, topic of 3 partitions (one per node)"
TERN_ADMIN_PASSWORD=$pw TERND=$build/ternd scripts/cluster.sh start "$work/cluster" >/dev/null
# The root user is seeded through the metastore: wait for it on every node.
for n in 1 2 3; do
    for _ in $(seq 200); do
        python3 - "$n" "$pw" <<'PY' && break
import base64, sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{4250 + int(sys.argv[1])}/v1/topics")
req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{sys.argv[2]}".encode()).decode())
try:
    urllib.request.urlopen(req, timeout=2)
except Exception:
    sys.exit(1)
PY
        sleep 0.1
    done
done
bench 127.0.0.1:4251 --topic spread --partitions 3 --producers 1 --duration 1s >/dev/null
for n in 1 2 3; do
    bench "127.0.0.1:425$n" --topic spread --partitions 3 --producers 21 >"$work/node$n.out" &
done
wait
cat "$work"/node?.out
echo "cluster total: $(sum_msgs "$work"/node?.out) msgs/s against single node $(sum_msgs "$work/single.out") msgs/s"

# An NSQ topic grows one partition per member that publishes to it
# (docs/cluster.md, "NSQ clients in a cluster"): one publish on each node in
# turn, then /lookup lists all three as producers and every node's
# publishes go to its own partition.
echo "== three nodes: NSQ MPUB x 64, 16 producers on each node, one NSQ topic (a partition per node)"
for n in 1 2 3; do
    "$build/tern-bench" --addr "127.0.0.1:424$n" --producers 1 --consumers 0 --count 1 \
        --topic nsqspread >/dev/null
done
for _ in $(seq 100); do
    [ "$(lookup_producers 4251 nsqspread)" = 3 ] && break
    sleep 0.1
done
[ "$(lookup_producers 4251 nsqspread)" = 3 ] ||
    { echo "nsqspread is not on all three nodes: /lookup lists $(lookup_producers 4251 nsqspread)"; exit 1; }
nsq_pids=()
for n in 1 2 3; do
    nsq_mpub "127.0.0.1:424$n" --producers 16 --topic nsqspread >"$work/nsq$n.out" &
    nsq_pids+=($!)
done
for p in "${nsq_pids[@]}"; do
    wait "$p"
done
for n in 1 2 3; do
    echo "node $n: $(sed -n '2p' "$work/nsq$n.out")"
    echo "node $n: $(sed -n '3p' "$work/nsq$n.out")"
done
echo "cluster total: $(sum_msgs "$work"/nsq?.out) msgs/s against single node $(sum_msgs "$work/nsqsingle.out") msgs/s"

# A topic of one partition: partition 0 goes to node 1 (p mod n), so node 2
# owns none of it and takes every produce into its ingress log.
echo "== owner (node 1): 1 producer, 4 consumers"
bench 127.0.0.1:4251 --topic remote --partitions 1 --producers 1 --consumers 4
echo "== through a non-owner (node 2, ingress log; consumes forwarded): 1 producer, 4 consumers"
bench 127.0.0.1:4252 --topic remote --partitions 1 --producers 1 --consumers 4
