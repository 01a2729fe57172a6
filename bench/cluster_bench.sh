#!/usr/bin/env bash
# Cluster benchmarks, in parts (CLUSTER_BENCH_PARTS, default all four):
#
#   scale     a three-node loopback cluster against a single node, with the
#             same tools: durable /v1 produce throughput (tern-v1-bench)
#             and NSQ MPUB x 64 throughput (tern-bench) with the producers
#             spread over every node, produce latency through the owner and
#             through a node that owns none of the topic's partitions (its
#             ingress log), produce-to-consume latency and consume+ack
#             round trips for a local and a remote owner.
#   repl      replication: on one three-node cluster, the same workload on a
#             topic of replication factor 1 and one of factor 3 (three
#             partitions each, one led by each node), 64 producers spread
#             over the nodes: durable /v1 produce, NSQ PUB and NSQ MPUB x 64;
#             msgs/s and publish-ack p50/p99, and the ratio factor 3 /
#             factor 1. A build without replication (POST /v1/topics refuses
#             replication_factor) runs factor 1 only and says so.
#   nats      the same publish workload on NATS JetStream: three
#             nats-server nodes, a stream of 3 replicas with file storage
#             (bench/peer_bench.py is the client). Skipped when the
#             nats-server package is not installed.
#   rabbitmq  the same on RabbitMQ: three nodes, a quorum queue, publisher
#             confirms (bench/peer_bench.py). Skipped when the
#             rabbitmq-server package is not installed.
#
# Then a summary table of every workload that ran. docs/performance.md
# reports what it prints.
#
#   bench/cluster_bench.sh BUILD_DIR [DURATION]
#   CLUSTER_BENCH_PARTS="repl nats rabbitmq" bench/cluster_bench.sh build 10s
#
# DURATION is per workload (5s by default; tern's tools also take 500ms).
# Every port is on 127.0.0.1, from BENCH_PORT_BASE (14000: below the test
# harness's 20000-32767 and the kernel's ephemeral 32768 and up, so a
# benchmark run beside a test run does not take their ports) up:
#   base+1..3          the single node (NSQ TCP, HTTP, Raft)
#   base+41..63        the tern cluster (scripts/cluster.sh with
#                      CLUSTER_PORT_BASE=base+40: NSQ TCP base+40+N, HTTP
#                      and node RPC base+50+N, Raft base+60+N)
#   base+101..113      NATS (client base+100+N, routes base+110+N)
#   base+201..240      RabbitMQ (AMQP base+200+N, Erlang distribution
#                      base+210+N, epmd base+220, CLI base+230..240)
# Every daemon started here is stopped by its PID when the script exits,
# however it exits.
set -euo pipefail
build=${1:-build-bench}
dur=${2:-5s}
parts=${CLUSTER_BENCH_PARTS:-scale repl nats rabbitmq}
base=${BENCH_PORT_BASE:-14000}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-cluster-bench.XXXXXX)
pw=bench-password
cbase=$((base + 40))
producers=64
pid=""
nats_pids=()
rabbit_pids=()
epmd_pid=""

# stop_pid comes from bench/lib.sh.
. "$here/lib.sh"

# The rows so far, as a table.
summary() {
    [ -s "$work/summary" ] || return 0
    echo "== summary ($producers producers over 3 nodes, 200-byte messages, $dur per workload; p50 is the mean over the three client processes, p99 the worst)"
    printf '| %-18s | %-31s | %9s | %8s | %8s | %6s |\n' system workload msgs/s "p50 ms" "p99 ms" errors
    awk -F'|' '{printf "| %-18s | %-31s | %9s | %8s | %8s | %6s |\n", $1, $2, $3, $4, $5, $6}' "$work/summary"
}

cleanup() {
    local p
    summary || true
    [ -n "$pid" ] && stop_pid "$pid"
    if [ -d "$work/cluster" ]; then
        scripts/cluster.sh stop "$work/cluster" >/dev/null 2>&1 || true
    fi
    for p in "${nats_pids[@]}"; do
        stop_pid "$p"
    done
    for p in "${rabbit_pids[@]}"; do
        stop_pid "$p" 40
    done
    [ -n "$epmd_pid" ] && stop_pid "$epmd_pid"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

has_part() { [[ " $parts " == *" $1 "* ]]; }

# DURATION in seconds, for peer_bench.py.
dur_s=$(python3 -c 'import sys; d = sys.argv[1]
print(float(d[:-2]) / 1000 if d.endswith("ms") else float(d.rstrip("s")))' "$dur")

bench() { # addr, then tern-v1-bench's options
    local addr=$1
    shift
    "$build/tern-v1-bench" --addr "$addr" --user admin --password "$pw" --duration "$dur" "$@"
}

# Sum the msgs/s of several tern-v1-bench (produce:), tern-bench or
# peer_bench.py (publish:) outputs.
sum_msgs() {
    awk '/^(produce|publish):/ {for (i = 1; i <= NF; i++) if ($i ~ /^msgs\/s,?$/) s += $(i - 1)} END {printf "%.0f", s}' "$@"
}

# The request latency of several outputs: the mean of their p50s and the
# largest of their p99s (each process sees its own third of the producers).
lat_of() {
    awk '/latency \(ms, per request\)/ {
            for (i = 1; i < NF; i++) {
                if ($i == "p50") { s += $(i + 1); n++ }
                if ($i == "p99" && $(i + 1) > m) m = $(i + 1)
            }
        }
        END { if (n) printf "%.2f %.2f", s / n, m; else printf "- -" }' "$@"
}

# Errors reported by several outputs: the errors: lines, and tern-bench's
# (it has none: it reports each and stops that connection).
errors_of() {
    awk '/^errors:/ {s += $2} /^tern-bench: (error from server|connection .* closed|cannot)/ {s++}
        END {printf "%d", s}' "$@"
}

# Records one summary row: system, workload, then the output files.
row() {
    local sys=$1 what=$2
    shift 2
    local lat
    lat=$(lat_of "$@")
    echo "$sys|$what|$(sum_msgs "$@")|${lat% *}|${lat#* }|$(errors_of "$@")" >>"$work/summary"
}

# Runs "$@" three times at once with the producers split over three
# nodes (22, 21, 21): in each argument, {P} becomes the node's producer
# count and {HTTP}, {NSQ}, {NATS}, {AMQP} its address for that protocol;
# outputs in $work/$tag.N.out.
spread() {
    local tag=$1
    shift
    local n share pids=() a args
    for n in 1 2 3; do
        share=$((producers / 3 + (n <= producers % 3 ? 1 : 0)))
        args=()
        for a in "$@"; do
            a=${a//\{P\}/$share}
            a=${a//\{HTTP\}/127.0.0.1:$((cbase + 10 + n))}
            a=${a//\{NSQ\}/127.0.0.1:$((cbase + n))}
            a=${a//\{NATS\}/127.0.0.1:$((base + 100 + n))}
            args+=("${a//\{AMQP\}/127.0.0.1:$((base + 200 + n))}")
        done
        "${args[@]}" >"$work/$tag.$n.out" 2>&1 &
        pids+=($!)
    done
    for n in "${pids[@]}"; do
        wait "$n" || true
    done
}

# Prints the three outputs of a spread run and its totals.
show() {
    local tag=$1 n lat
    for n in 1 2 3; do
        {
            grep -m3 -E 'error from server|cannot|closed:|refused|Error' "$work/$tag.$n.out" || true
            grep -E '^(produce|publish|errors|peer-bench|tern-bench: [0-9]+ producers)' "$work/$tag.$n.out" || true
        } | sed "s/^/  node $n: /"
    done
    lat=$(lat_of "$work/$tag".?.out)
    echo "  total $(sum_msgs "$work/$tag".?.out) msgs/s, p50 ${lat% *} ms (mean over nodes), p99 ${lat#* } ms (worst node)"
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

# POST /v1/topics on HTTP port $1: topic $2 of 3 partitions with
# replication factor $3 (named for 1 too: the default is 3). Prints the
# factor the topic got, or "refused: <answer>".
create_topic() {
    python3 - "$1" "$2" "$3" "$pw" <<'PY'
import base64, json, sys, urllib.error, urllib.request
port, name, factor, pw = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
body = {"name": name, "partitions": 3, "replication_factor": factor}
if factor > 1:
    body.update(min_insync_replicas=2)
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/topics", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode())
try:
    with urllib.request.urlopen(req, timeout=15) as r:
        print(json.load(r).get("replication_factor", 1))
except urllib.error.HTTPError as e:
    print("refused:", e.code, e.read().decode(errors="replace")[:200])
PY
}

# PATCH /v1/topics/$2 (HTTP port $1) {"owner": ""}: open to anonymous NSQ
# clients.
disown_topic() {
    python3 - "$1" "$2" "$pw" <<'PY'
import base64, sys, urllib.error, urllib.request
port, name, pw = sys.argv[1:4]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/topics/{name}", data=b'{"owner":""}',
                             method="PATCH", headers={"Content-Type": "application/json"})
req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode())
try:
    urllib.request.urlopen(req, timeout=15).read()
except urllib.error.HTTPError as e:
    print(f"  PATCH {name} owner \"\": {e.code} {e.read().decode(errors='replace')[:200]}")
    sys.exit(1)
PY
}

# Waits (60 s at most) until every partition of topic $2 (HTTP port $1) has
# a leader and, for a replicated topic, all its replicas in sync.
wait_in_sync() {
    python3 - "$1" "$2" "$pw" <<'PY'
import base64, json, sys, time, urllib.request
port, name, pw = sys.argv[1:4]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/topics/{name}")
req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode())
last = None
for _ in range(600):
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            t = json.load(r)
        parts = t.get("partition_stats", [])
        last = [(p.get("leader", p.get("owner_node")), p.get("isr")) for p in parts]
        if parts and all(p.get("leader", p.get("owner_node")) and
                         len(p.get("isr", p.get("replicas", [0]))) == len(p.get("replicas", [0]))
                         for p in parts):
            print("  " + ", ".join(f"partition {p['index']}: leader {p.get('leader', p.get('owner_node'))}"
                                   + (f", isr {p['isr']}" if "isr" in p else "") for p in parts))
            sys.exit(0)
    except Exception as e:
        last = repr(e)
    time.sleep(0.1)
print(f"  {name}: partitions not all led and in sync after 60 s: {last}")
sys.exit(1)
PY
}

wait_cluster_users() {
    local n
    for n in 1 2 3; do
        for _ in $(seq 200); do
            python3 - "$((cbase + 10 + n))" "$pw" <<'PY' && break
import base64, sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/topics")
req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{sys.argv[2]}".encode()).decode())
try:
    urllib.request.urlopen(req, timeout=2)
except Exception:
    sys.exit(1)
PY
            sleep 0.1
        done
    done
}

cluster_started=""
start_cluster() {
    [ -n "$cluster_started" ] && return 0
    # The root user is seeded through the metastore: wait for it on every node.
    # Factor 1 by default: the cluster part compares one owner per
    # partition with a single node, and the topics its NSQ publishes make
    # get the default; the repl part names each topic's factor.
    local extra=--default-replication-factor=1
    TERN_ADMIN_PASSWORD=$pw TERND=$build/ternd CLUSTER_PORT_BASE=$cbase TERND_ARGS=$extra \
        scripts/cluster.sh start "$work/cluster" >/dev/null
    wait_cluster_users
    cluster_started=1
}
nsq() { echo "127.0.0.1:$((cbase + $1))"; }
http() { echo "127.0.0.1:$((cbase + 10 + $1))"; }

# ------------------------------------------------------------------ scale

part_scale() {
    echo "== single node: 63 producers, topic of 3 partitions"
    TERN_ADMIN_PASSWORD=$pw "$build/ternd" --data-path="$work/single" --tcp-address=127.0.0.1:$((base + 1)) \
        --http-address=127.0.0.1:$((base + 2)) --raft-address=127.0.0.1:$((base + 3)) 2>"$work/single.log" &
    pid=$!
    for _ in $(seq 200); do
        grep -q 'root user admin created' "$work/single.log" && break
        sleep 0.05
    done
    grep -q 'HTTP listening on port' "$work/single.log" || { echo "ternd did not start:"; cat "$work/single.log"; exit 1; }
    bench "127.0.0.1:$((base + 2))" --topic spread --partitions 3 --producers 63 | tee "$work/single.out"
    echo "== single node: 1 producer, 4 consumers (produce-to-consume, consume+ack)"
    bench "127.0.0.1:$((base + 2))" --topic local --partitions 1 --producers 1 --consumers 4
    echo "== single node: NSQ MPUB x 64, 48 producers, one NSQ topic"
    "$build/tern-bench" --addr "127.0.0.1:$((base + 1))" --consumers 0 --batch 64 --size 200 --duration "$dur" \
        --producers 48 --topic nsqspread | tee "$work/nsqsingle.out" | sed -n '2,3p'
    stop_pid "$pid"
    pid=""

    start_cluster
    echo "== three nodes: 21 producers on each node, topic of 3 partitions (one per node)"
    bench "$(http 1)" --topic spread --partitions 3 --producers 1 --duration 1s >/dev/null
    local n
    for n in 1 2 3; do
        bench "$(http "$n")" --topic spread --partitions 3 --producers 21 >"$work/node$n.out" &
    done
    wait
    cat "$work"/node?.out
    echo "cluster total: $(sum_msgs "$work"/node?.out) msgs/s against single node $(sum_msgs "$work/single.out") msgs/s"

    # An NSQ topic grows one partition per member that publishes to it
    # (docs/cluster.md, "NSQ clients in a cluster"): one publish on each
    # node in turn, then /lookup lists all three as producers and every
    # node's publishes go to its own partition.
    echo "== three nodes: NSQ MPUB x 64, 16 producers on each node, one NSQ topic (a partition per node)"
    for n in 1 2 3; do
        "$build/tern-bench" --addr "$(nsq "$n")" --producers 1 --consumers 0 --count 1 --topic nsqspread >/dev/null
    done
    for _ in $(seq 100); do
        [ "$(lookup_producers $((cbase + 11)) nsqspread)" = 3 ] && break
        sleep 0.1
    done
    [ "$(lookup_producers $((cbase + 11)) nsqspread)" = 3 ] ||
        { echo "nsqspread is not on all three nodes: /lookup lists $(lookup_producers $((cbase + 11)) nsqspread)"; exit 1; }
    local nsq_pids=() p
    for n in 1 2 3; do
        "$build/tern-bench" --addr "$(nsq "$n")" --consumers 0 --batch 64 --size 200 --duration "$dur" \
            --producers 16 --topic nsqspread >"$work/nsq$n.out" &
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

    # A topic of one partition: partition 0 goes to node 1 (p mod n), so
    # node 2 owns none of it and takes every produce into its ingress log.
    echo "== owner (node 1): 1 producer, 4 consumers"
    bench "$(http 1)" --topic remote --partitions 1 --producers 1 --consumers 4
    echo "== through a non-owner (node 2, ingress log; consumes forwarded): 1 producer, 4 consumers"
    bench "$(http 2)" --topic remote --partitions 1 --producers 1 --consumers 4
}

# ------------------------------------------------------------------- repl

# The three workloads on topics v1-$1 (/v1) and nsq-$1 (NSQ), summary
# rows labelled "tern $2".
repl_workloads() {
    local t=$1 label=$2
    echo "== $label: durable /v1 produce, $producers producers over 3 nodes, 200 bytes"
    bench "$(http 1)" --topic "v1-$t" --producers 3 --duration 1s >/dev/null # warm-up
    spread "v1-$t" "$build/tern-v1-bench" --addr "{HTTP}" --user admin --password "$pw" \
        --topic "v1-$t" --producers "{P}" --size 200 --duration "$dur"
    show "v1-$t"
    row "tern $label" "/v1 produce, 1 msg/request" "$work/v1-$t".?.out
    local b
    for b in 1 64; do
        local door="NSQ PUB, 1 msg/request"
        [ "$b" = 1 ] || door="NSQ MPUB x 64"
        echo "== $label: $door, $producers producers over 3 nodes, 200 bytes"
        spread "nsq$b-$t" "$build/tern-bench" --addr "{NSQ}" --consumers 0 --producers "{P}" \
            --batch "$b" --size 200 --duration "$dur" --topic "nsq-$t"
        show "nsq$b-$t"
        row "tern $label" "$door" "$work/nsq$b-$t".?.out
    done
}

part_repl() {
    start_cluster
    echo "== replication: topics of 3 partitions, factor 1 and factor 3 (min_insync_replicas 2), on one cluster"
    local f got ok3=1
    for f in 1 3; do
        for t in "v1-r$f" "nsq-r$f"; do
            got=$(create_topic $((cbase + 11)) "$t" "$f")
            if [ "$got" != "$f" ]; then
                echo "  topic $t asked factor $f, got: $got"
                [ "$f" = 3 ] && ok3=""
                [ "$f" = 1 ] && exit 1
                continue
            fi
            echo "  topic $t: factor $got"
            # A topic made through /v1 has an owner, and an owner's topic is
            # closed to the open NSQ doors: give the NSQ one back to them.
            [ "${t%%-*}" = nsq ] && { disown_topic $((cbase + 11)) "$t" || exit 1; }
            wait_in_sync $((cbase + 11)) "$t" || { [ "$f" = 3 ] && ok3=""; }
        done
    done
    repl_workloads r1 "factor 1"
    if [ -z "$ok3" ]; then
        echo "== factor 3 SKIPPED: this build's POST /v1/topics has no replication (see above)"
        return 0
    fi
    repl_workloads r3 "factor 3"
    echo "== factor 3 / factor 1 (issue 23's bar: throughput at least 0.60, p50 under 2)"
    awk -F'|' '$1 == "tern factor 1" {t1[$2] = $3; p1[$2] = $4}
        $1 == "tern factor 3" && t1[$2] > 0 && p1[$2] > 0 {
            t = $3 / t1[$2]; l = $4 / p1[$2]
            verdict = "below the bar"
            if (t >= 0.6 && l < 2) verdict = "meets the bar"
            printf "  %-28s throughput %.2f   p50 %.2f   %s\n", $2, t, l, verdict }' "$work/summary"
}

# ------------------------------------------------------------------- NATS

part_nats() {
    if ! command -v nats-server >/dev/null; then
        echo "== NATS JetStream SKIPPED: nats-server is not installed (apt-get install nats-server)"
        return 0
    fi
    echo "== NATS JetStream $(nats-server --version | awk '{print $2}'): 3 nodes, stream of 3 replicas, file storage"
    local n r routes=""
    for r in 1 2 3; do
        routes+="${routes:+, }nats-route://127.0.0.1:$((base + 110 + r))"
    done
    for n in 1 2 3; do
        mkdir -p "$work/nats$n"
        cat >"$work/nats$n/nats.conf" <<EOF
server_name: n$n
listen: 127.0.0.1:$((base + 100 + n))
jetstream {
    store_dir: "$work/nats$n/store"
    max_memory_store: 256MB
    max_file_store: 8GB
}
cluster {
    name: bench
    listen: 127.0.0.1:$((base + 110 + n))
    routes: [$routes]
}
EOF
        nats-server -c "$work/nats$n/nats.conf" >"$work/nats$n/log" 2>&1 &
        nats_pids+=($!)
    done
    python3 "$here/peer_bench.py" nats-setup --addr "127.0.0.1:$((base + 101))" --stream bench \
        --subjects 'bench.>' --replicas 3 | sed 's/^/  /' ||
        { echo "  NATS did not come up; node 1's log:"; tail -20 "$work/nats1/log"; return 1; }
    python3 "$here/peer_bench.py" nats --addr "127.0.0.1:$((base + 101))" --subject bench.warm \
        --producers 3 --duration 1 >/dev/null
    local b what
    for b in 1 64; do
        what="publish, 1 msg/request"
        [ "$b" = 1 ] || what="64 msgs/request (as MPUB x 64)"
        echo "== NATS JetStream R3: $what, $producers producers over 3 nodes, 200 bytes"
        spread "nats$b" python3 "$here/peer_bench.py" nats --addr "{NATS}" \
            --subject bench.load --producers "{P}" --inflight "$b" --size 200 --duration "$dur_s"
        show "nats$b"
        row "NATS JetStream R3" "$what" "$work/nats$b".?.out
    done
    for n in "${nats_pids[@]}"; do
        stop_pid "$n"
    done
    nats_pids=()
}

# --------------------------------------------------------------- RabbitMQ

# rabbitmqctl (or another CLI, $1) against node $2, with the nodes' Erlang
# environment.
rabbit_cli() {
    local cli=$1 n=$2
    shift 2
    HOME=$work/rabbit/home ERL_EPMD_PORT=$((base + 220)) RABBITMQ_CTL_DIST_PORT_MIN=$((base + 230)) \
        RABBITMQ_CTL_DIST_PORT_MAX=$((base + 240)) "/usr/lib/rabbitmq/bin/$cli" -n "rabbit$n@localhost" "$@"
}

part_rabbitmq() {
    if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || ! command -v epmd >/dev/null; then
        echo "== RabbitMQ SKIPPED: rabbitmq-server is not installed (apt-get install rabbitmq-server)"
        return 0
    fi
    local rb=$work/rabbit n
    mkdir -p "$rb/home"
    # The nodes' shared Erlang cookie, in a HOME of their own.
    (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(16), end="")' >"$rb/home/.erlang.cookie")
    chmod 400 "$rb/home/.erlang.cookie"
    echo "[]." >"$rb/enabled_plugins"
    # A private epmd, in the foreground so its PID is ours to stop.
    ERL_EPMD_ADDRESS=127.0.0.1 epmd -port $((base + 220)) >"$rb/epmd.log" 2>&1 &
    epmd_pid=$!
    for n in 1 2 3; do
        mkdir -p "$rb/n$n"
        HOME=$rb/home ERL_EPMD_PORT=$((base + 220)) RABBITMQ_NODENAME=rabbit$n@localhost \
            RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$((base + 200 + n)) \
            RABBITMQ_DIST_PORT=$((base + 210 + n)) RABBITMQ_MNESIA_BASE=$rb/n$n/mnesia \
            RABBITMQ_LOG_BASE=$rb/n$n/log RABBITMQ_PID_FILE=$rb/n$n/pid \
            RABBITMQ_ENABLED_PLUGINS_FILE=$rb/enabled_plugins \
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
            /usr/lib/rabbitmq/bin/rabbitmq-server >"$rb/n$n/out" 2>&1 &
        rabbit_pids+=($!)
    done
    for n in 1 2 3; do
        # await_startup fails at once while the node is not registered
        # with epmd yet: ask again until it answers (180 s at most).
        local deadline=$((SECONDS + 180))
        until rabbit_cli rabbitmqctl "$n" await_startup --timeout 180 >"$rb/n$n/await" 2>&1; do
            if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "${rabbit_pids[$((n - 1))]}" 2>/dev/null; then
                echo "  rabbit$n did not start:"
                tail -20 "$rb/n$n/await" "$rb/n$n/out"
                return 1
            fi
            sleep 1
        done
        # The Erlang VM under the script: stop it by PID too if the script
        # cannot.
        [ -s "$rb/n$n/pid" ] && rabbit_pids+=("$(cat "$rb/n$n/pid")")
    done
    for n in 2 3; do
        rabbit_cli rabbitmqctl "$n" stop_app >/dev/null
        rabbit_cli rabbitmqctl "$n" join_cluster rabbit1@localhost >/dev/null
        rabbit_cli rabbitmqctl "$n" start_app >/dev/null
    done
    echo "== RabbitMQ $(rabbit_cli rabbitmqctl 1 version 2>/dev/null || echo '?'): 3 nodes, quorum queue, publisher confirms"
    python3 "$here/peer_bench.py" amqp-setup --addr "127.0.0.1:$((base + 201))" --queue bench | sed 's/^/  /'
    rabbit_cli rabbitmqctl 1 list_queues --quiet name type leader members 2>/dev/null | sed 's/^/  /' || true
    python3 "$here/peer_bench.py" amqp --addr "127.0.0.1:$((base + 201))" --queue bench \
        --producers 3 --duration 1 >/dev/null
    local b what
    for b in 1 64; do
        what="publish, 1 msg/request"
        [ "$b" = 1 ] || what="64 msgs/request (as MPUB x 64)"
        echo "== RabbitMQ quorum queue: $what, $producers producers over 3 nodes, 200 bytes"
        spread "amqp$b" python3 "$here/peer_bench.py" amqp --addr "{AMQP}" \
            --queue bench --producers "{P}" --inflight "$b" --size 200 --duration "$dur_s"
        show "amqp$b"
        row "RabbitMQ quorum" "$what" "$work/amqp$b".?.out
    done
    for n in "${rabbit_pids[@]}"; do
        stop_pid "$n" 40
    done
    rabbit_pids=()
    stop_pid "$epmd_pid"
    epmd_pid=""
}

: >"$work/summary"
if has_part scale; then part_scale; fi
if has_part repl; then part_repl; fi
if has_part nats; then part_nats; fi
if has_part rabbitmq; then part_rabbitmq; fi
# The summary is printed by cleanup, so a part that fails still leaves
# the rows of the ones before it.
