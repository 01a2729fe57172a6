#!/usr/bin/env bash
# A three-node loopback cluster against a single node, in the same run and
# with the same tool (tern-v1-bench): durable /v1 produce throughput with
# the producers spread over every node, produce latency through the owner
# and through a node that owns none of the topic's partitions (its ingress
# log), and produce-to-consume latency and consume+ack round trips for a
# local and a remote owner. docs/performance.md reports what it prints.
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

# Sum the msgs/s of several tern-v1-bench outputs.
sum_msgs() {
    awk '/^produce:/ {for (i = 1; i <= NF; i++) if ($i == "msgs/s") s += $(i - 1)} END {printf "%.0f", s}' "$@"
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

# A topic of one partition: partition 0 goes to node 1 (p mod n), so node 2
# owns none of it and takes every produce into its ingress log.
echo "== owner (node 1): 1 producer, 4 consumers"
bench 127.0.0.1:4251 --topic remote --partitions 1 --producers 1 --consumers 4
echo "== through a non-owner (node 2, ingress log; consumes forwarded): 1 producer, 4 consumers"
bench 127.0.0.1:4252 --topic remote --partitions 1 --producers 1 --consumers 4
