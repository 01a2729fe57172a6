#!/usr/bin/env bash
# The partition move benchmark (issue 24, docs/performance.md "Partition
# moves"): how fast a move copies against move-rate, and what it does to
# publish latency on the nodes it runs between.
#
#   bench/move_bench.sh BUILD_DIR [SIZE]
#   MOVE_RATE=0 bench/move_bench.sh build 256M      # unthrottled
#
# 1. Four ternd nodes on loopback (security on, a cluster secret, Raft in
#    plain text on 127.0.0.1), every one with --move-rate=$MOVE_RATE
#    (default 64MiB, the option's default).
# 2. Topic `big`: one partition of factor 3 (min_insync 2), filled with
#    SIZE bytes of backlog (default 1G; suffixes K, M, G) in /v1 batches of
#    64 messages of 16 KiB from 4 client threads. Topic `load`: 3 partitions
#    of factor 3 on the same nodes.
# 3. Before: tern-v1-bench publishes to `load` for $LOAD_SECONDS (default
#    10) with $PRODUCERS producers (default 16), durable, one message per
#    request: its publish p50/p99.
# 4. During: big/0 is moved to the node that holds no replica of it
#    (PATCH /v1/topics/big/partitions/0, its leader kept first, one follower
#    replaced), and tern-v1-bench publishes the same load again for the
#    move's expected length (SIZE / MOVE_RATE, at least 3 s, at most
#    $LOAD_SECONDS); the move is followed to `done` on its leader.
# 5. Prints the copy rate (bytes_total / the move's wall time) against
#    move-rate, publish p50/p99 before and during, and the p99 ratio
#    during / before (the issue's target: under 2).
#
# With SPARE_DIR=DIR, node 4's data directory is made under DIR instead
# (a tmpfs such as /dev/shm on a machine with one disk): the move's target
# then writes its copy on a disk of its own, as in a cluster of separate
# machines, where the target's writes never reach the disk the publishes
# on the other nodes sync to; the script then requires the target to be
# node 4. Without it every node shares the one disk, and the target's
# copy (SIZE written and fdatasync'ed at MOVE_RATE) competes with every
# publish's fdatasync (docs/performance.md measures both).
#
# Ports on 127.0.0.1 from BENCH_PORT_BASE (14000) + 300: NSQ TCP base+300+N,
# HTTP and node RPC base+310+N, Raft base+320+N for node N = 1..4 (away
# from cluster_bench.sh's ranges). Data in a temporary directory under
# $BENCH_DIR (default .), removed at the end. Every daemon started here is
# stopped by its PID when the script exits, however it exits.
set -euo pipefail
build=${1:-build-bench}
size_arg=${2:-1G}
rate_arg=${MOVE_RATE:-64MiB}
load_s=${LOAD_SECONDS:-10}
producers=${PRODUCERS:-16}
base=$((${BENCH_PORT_BASE:-14000} + 300))
pw=bench-password
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" tern-move-bench.XXXXXX)
pids=()
spare_work=""
if [ -n "${SPARE_DIR:-}" ]; then
    spare_work=$(mktemp -d -p "$SPARE_DIR" tern-move-bench-node4.XXXXXX)
fi

for f in ternd tern-v1-bench; do
    [ -x "$build/$f" ] || { echo "move_bench: $build/$f not built (make build)" >&2; exit 2; }
done

# Bytes of a size with an optional K/M/G (KiB/MiB/GiB) suffix.
bytes_of() {
    python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"(\d+)\s*([KMG]?)(i?B)?", sys.argv[1].strip(), re.I)
if not m:
    sys.exit(f"move_bench: {sys.argv[1]!r} is not a size (e.g. 64M, 1G)")
print(int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()])
PY
}
size=$(bytes_of "$size_arg")
rate=$(bytes_of "$rate_arg")

# stop_pid comes from bench/lib.sh.
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cleanup() {
    local p
    for p in "${pids[@]}"; do
        stop_pid "$p"
    done
    rm -rf "$work"
    [ -z "$spare_work" ] || rm -rf "$spare_work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

http() { echo "127.0.0.1:$((base + 10 + $1))"; }

# ------------------------------------------------------------------ nodes

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"
peers=""
for n in 1 2 3 4; do
    peers+="${peers:+,}$n@127.0.0.1:$((base + 20 + n))"
done
for n in 1 2 3 4; do
    dir=$work/node$n
    [ "$n" = 4 ] && [ -n "$spare_work" ] && dir=$spare_work/node4
    TERN_ADMIN_PASSWORD=$pw "$build/ternd" --data-path="$dir" --node-id="$n" \
        --tcp-address=127.0.0.1:$((base + n)) --http-address="$(http "$n")" \
        --raft-address=127.0.0.1:$((base + 20 + n)) --peers="$peers" \
        --cluster-secret-file="$work/secret" --move-rate="$rate" \
        --cluster-heartbeat-interval=500ms --member-session-timeout=3s 2>"$work/node$n.log" &
    pids+=($!)
done

# The helper every step below calls: python3 -c "$api" STEP ARGS...
# shellcheck disable=SC2016
api='
import base64, json, sys, threading, time, urllib.error, urllib.request
pw, base = sys.argv[1], int(sys.argv[2])
step, args = sys.argv[3], sys.argv[4:]
AUTH = "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode()
def url(n, path): return f"http://127.0.0.1:{base + 10 + int(n)}{path}"
def call(n, method, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url(n, path), data=data, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": AUTH})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)
def topic(name):
    for n in range(1, 5):
        s, b = call(n, "GET", f"/v1/topics/{name}", timeout=5)
        if s == 200:
            return b["partition_stats"]
    return None
if step == "ready":  # every node serves /v1 with the seeded admin, 4 members alive
    for _ in range(900):
        ok = 0
        for n in range(1, 5):
            s, b = call(n, "GET", "/v1/cluster/members", timeout=2)
            ok += s == 200 and sum(m.get("status") == "alive" for m in b.get("members", [])) == 4
        if ok == 4:
            sys.exit(0)
        time.sleep(0.1)
    sys.exit("move_bench: the four nodes did not come up in 90 s (see their logs)")
if step == "topic":  # name partitions
    s, b = call(1, "POST", "/v1/topics", {"name": args[0], "partitions": int(args[1]),
                                           "replication_factor": 3, "min_insync_replicas": 2})
    if s != 201:
        sys.exit(f"move_bench: POST /v1/topics {args[0]}: {s} {b}")
    for _ in range(600):
        ps = topic(args[0])
        if ps and all(p.get("leader") and len(p.get("isr", [])) == 3 for p in ps):
            sys.exit(0)
        time.sleep(0.1)
    sys.exit(f"move_bench: {args[0]} not led and in sync after 60 s")
if step == "fill":  # bytes: backlog of big/0, through its leader
    total, msg, per = int(args[0]), 16384, 64
    leader = topic("big")[0]["leader"]
    items = json.dumps([{"payload": "x" * msg, "partition": 0}] * per).encode()
    lock, left, errs = threading.Lock(), [total], []
    def worker():
        while True:
            with lock:
                if left[0] <= 0 or errs:
                    return
                left[0] -= msg * per
            req = urllib.request.Request(url(leader, "/v1/topics/big/produce/batch"), data=items,
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": AUTH})
            try:
                urllib.request.urlopen(req, timeout=60).read()
            except Exception as e:
                errs.append(repr(e))
    t0 = time.monotonic()
    ths = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    if errs:
        sys.exit(f"move_bench: filling big: {errs[0]}")
    print(f"  {total >> 20} MiB of backlog in big/0 in {time.monotonic() - t0:.1f} s")
    sys.exit(0)
if step == "move":  # prints the move id and its leader
    p = topic("big")[0]
    leader = p["leader"]
    spare = next(str(n) for n in range(1, 5) if str(n) not in p["replicas"])
    if args and args[0] and spare != "4":
        sys.exit(f"move_bench: SPARE_DIR holds node 4, but the target is node {spare}")
    keep = next(r for r in p["replicas"] if r != leader)
    s, b = call(leader, "PATCH", "/v1/topics/big/partitions/0", {"replicas": [leader, spare, keep]})
    if s != 202:
        sys.exit(f"move_bench: PATCH big/0: {s} {b}")
    print(b["id"], leader, spare, " ".join(p["replicas"]))
    sys.exit(0)
if step == "follow":  # id leader t0: waits for done, prints seconds and bytes
    mid, leader, t0 = args[0], args[1], float(args[2])
    total = None
    while True:
        s, b = call(leader, "GET", "/v1/cluster/moves", timeout=10)
        m = next((m for m in (b or {}).get("moves", []) if m["id"] == mid), None) if s == 200 else None
        if m is not None and m.get("bytes_total") is not None:
            total = m["bytes_total"]
        if m is not None and m["state"] in ("done", "aborted"):
            if m["state"] != "done":
                sys.exit(f"move_bench: move {mid} ended {m}")
            print(f"{time.time() - t0:.3f} {total or 0}")
            sys.exit(0)
        time.sleep(0.1)
sys.exit(f"move_bench: unknown step {step}")
'
step() { python3 -c "$api" "$pw" "$base" "$@"; }

echo "== move benchmark: 4 nodes, big/0 of $((size >> 20)) MiB moved at move-rate $rate_arg ($rate B/s)"
[ -z "$spare_work" ] || echo "  node 4 (the target) on $SPARE_DIR ($(df --output=fstype "$SPARE_DIR" | tail -1)), the others on $(df --output=fstype "$work" | tail -1)"
step ready
step topic big 1
step topic load 3
step fill "$size"

# tern-v1-bench's request latency line: "p50 p99" in ms.
lat_of() {
    awk '/latency \(ms, per request\)/ {for (i = 1; i < NF; i++) {if ($i == "p50") a = $(i + 1); if ($i == "p99") b = $(i + 1)}}
         END {printf "%s %s", a, b}' "$1"
}
v1bench() { # seconds output
    "$build/tern-v1-bench" --addr "$(http 1)" --user admin --password "$pw" --topic load \
        --partitions 3 --producers "$producers" --duration "${1}s" >"$2" 2>&1 || true
}

echo "== before: $producers producers on load for ${load_s}s"
v1bench "$load_s" "$work/before.out"
grep -E '^(produce|errors)' "$work/before.out" | sed 's/^/  /' || true

expect=$(python3 -c "import sys; s, r, m = map(int, sys.argv[1:]); print(max(3, min(m, s // r if r else m)))" \
    "$size" "$rate" "$load_s")
t0=$(date +%s.%N)
read -r mid leader spare replicas < <(step move "$spare_work") || true
[ -n "${mid:-}" ] || { echo "move_bench: the move did not begin (above)" >&2; exit 1; }
echo "== during: move $mid of big/0 (leader $leader, replicas $replicas, to node $spare); $producers producers on load for ${expect}s"
v1bench "$expect" "$work/during.out" &
bpid=$!
pids+=("$bpid")
read -r took total < <(step follow "$mid" "$leader" "$t0")
wait "$bpid" || true
grep -E '^(produce|errors)' "$work/during.out" | sed 's/^/  /' || true

read -r b50 b99 <<<"$(lat_of "$work/before.out")"
read -r d50 d99 <<<"$(lat_of "$work/during.out")"
python3 - "$size" "$rate" "$took" "$total" "$b50" "$b99" "$d50" "$d99" <<'PY'
import sys
size, rate = int(sys.argv[1]), int(sys.argv[2])
took, total = float(sys.argv[3]), int(sys.argv[4])
b50, b99, d50, d99 = (float(x) if x else float("nan") for x in sys.argv[5:9])
copied = total or size
print(f"== result")
print(f"  copy: {copied / 2**20:.0f} MiB in {took:.1f} s = {copied / took / 2**20:.1f} MiB/s "
      f"against move-rate {'unlimited' if rate == 0 else f'{rate / 2**20:.1f} MiB/s'}"
      + ("" if rate == 0 else f" ({copied / took / rate:.2f}x)"))
print(f"  publish p50: before {b50:.2f} ms, during {d50:.2f} ms")
print(f"  publish p99: before {b99:.2f} ms, during {d99:.2f} ms, ratio {d99 / b99:.2f} (target < 2)")
PY
