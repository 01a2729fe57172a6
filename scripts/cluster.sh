#!/usr/bin/env bash
# Starts (or stops) a three-node tern cluster on loopback, for trying a
# cluster out: `make cluster` and `make cluster-stop` call it.
#
#   scripts/cluster.sh start [DIR]   a fresh DIR (default ./cluster-data):
#                                    a CA and a certificate per node made
#                                    with openssl, a random cluster secret,
#                                    three ternd processes in the background
#   scripts/cluster.sh stop [DIR]    stop them by their PID files
#
# Node N (1..3) listens on 127.0.0.1 only: NSQ TCP 424N, HTTP and node RPC
# 425N (TCP and UDP, the same port number), Raft 426N with mutual TLS. The
# ternd binary is $TERND (default ./build/ternd). Nothing here is for
# production: every key sits unencrypted in DIR; docs/cluster.md shows the
# same steps for three hosts.
set -euo pipefail

NODES=(1 2 3)
TERND=${TERND:-./build/ternd}
READY_SECONDS=${READY_SECONDS:-60}

usage() {
    echo "usage: $0 start|stop [DIR]   (DIR default ./cluster-data)" >&2
    exit 2
}

tcp_port() { echo $((4240 + $1)); }
http_port() { echo $((4250 + $1)); }
raft_port() { echo $((4260 + $1)); }

# The peers list every node is started with: ID@raft-address, this node
# included, the same on all three.
peers() {
    local out="" n
    for n in "${NODES[@]}"; do
        out+="${out:+,}$n@127.0.0.1:$(raft_port "$n")"
    done
    echo "$out"
}

# The process id in a PID file when that process is alive and is a ternd,
# else nothing (a stale file whose number a new process now holds is not
# ours to signal).
live_pid() {
    local file=$1 pid
    [ -f "$file" ] || return 0
    pid=$(cat "$file" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ternd; then
        echo "$pid"
    fi
}

# Certificates: one CA, and per node a P-256 key and a certificate the CA
# signs, CN nodeN, SAN IP:127.0.0.1, usable as TLS server and client (Raft
# connections go both ways).
make_certs() {
    local dir=$1 n
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 \
        -subj "/CN=tern-cluster-ca" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$dir/node.ext"
    for n in "${NODES[@]}"; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -subj "/CN=node$n" -keyout "$dir/node$n.key" -out "$dir/node$n.csr" 2>/dev/null
        openssl x509 -req -in "$dir/node$n.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 365 -extfile "$dir/node.ext" -out "$dir/node$n.crt" 2>/dev/null
        rm -f "$dir/node$n.csr"
    done
    rm -f "$dir/node.ext" "$dir/ca.srl"
}

# Whether node $1's /readyz answers 200 (python3 is a build dependency
# already; curl is not).
ready() {
    python3 - "http://127.0.0.1:$(http_port "$1")/readyz" <<'PY' 2>/dev/null
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
PY
}

stop_nodes() {
    local dir=$1 n pid stopped=()
    for n in "${NODES[@]}"; do
        pid=$(live_pid "$dir/node$n/ternd.pid")
        [ -n "$pid" ] || pid=$(live_pid "$dir/node$n/launch.pid")
        if [ -n "$pid" ]; then
            kill -TERM "$pid"
            stopped+=("$n:$pid")
        fi
    done
    if [ ${#stopped[@]} -eq 0 ]; then
        rm -f "$dir"/node*/launch.pid
        echo "no running node under $dir"
        return 0
    fi
    local entry left=1 tries
    for tries in $(seq 100 -1 1); do
        left=0
        for entry in "${stopped[@]}"; do
            kill -0 "${entry#*:}" 2>/dev/null && left=1
        done
        if [ $left -eq 0 ] || [ "$tries" -eq 1 ]; then
            break
        fi
        sleep 0.1
    done
    for entry in "${stopped[@]}"; do
        if kill -0 "${entry#*:}" 2>/dev/null; then
            echo "node${entry%%:*} (pid ${entry#*:}) is still stopping after 10 s; see $dir/node${entry%%:*}/ternd.log" >&2
        else
            echo "stopped node${entry%%:*} (pid ${entry#*:})"
        fi
        rm -f "$dir/node${entry%%:*}/launch.pid"
    done
    [ $left -eq 0 ]
}

start() {
    local dir=$1 n
    if [ ! -x "$TERND" ]; then
        echo "$TERND is not built: run make build (or set TERND)" >&2
        exit 1
    fi
    command -v openssl >/dev/null || { echo "the openssl command is needed for the certificates" >&2; exit 1; }
    command -v python3 >/dev/null || { echo "python3 is needed to wait for the nodes" >&2; exit 1; }
    if [ -e "$dir" ]; then
        echo "$dir already exists: stop what runs there (make cluster-stop) and remove it," >&2
        echo "or give another directory (CLUSTER_DATA=dir make cluster)" >&2
        exit 1
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    make_certs "$dir"
    # The secret: 32 random bytes as 64 hex characters, readable by its
    # owner only (ternd refuses a secret file others can read).
    (umask 077 && openssl rand -hex 32 >"$dir/secret")
    chmod 600 "$dir"/*.key

    local peer_list
    peer_list=$(peers)
    for n in "${NODES[@]}"; do
        mkdir -p "$dir/node$n"
        local args=(
            --data-path "$dir/node$n/data" --pid-file "$dir/node$n/ternd.pid"
            --node-id "$n"
            --tcp-address "127.0.0.1:$(tcp_port "$n")"
            --http-address "127.0.0.1:$(http_port "$n")"
            --advertise-address "127.0.0.1:$(http_port "$n")"
            --raft-address "127.0.0.1:$(raft_port "$n")"
            --peers "$peer_list"
            --cluster-secret-file "$dir/secret"
            --raft-tls-cert "$dir/node$n.crt" --raft-tls-key "$dir/node$n.key"
            --raft-tls-ca "$dir/ca.crt"
        )
        printf '%q ' "$TERND" "${args[@]}" >"$dir/node$n/command"
        echo >>"$dir/node$n/command"
        # Its own session, so a Ctrl-C in this terminal does not reach it.
        setsid "$TERND" "${args[@]}" >"$dir/node$n/ternd.log" 2>&1 </dev/null &
        echo $! >"$dir/node$n/launch.pid"
    done

    # Wait for every node's /readyz: it answers 200 once the node's
    # metastore replica has a leader and has caught up.
    local deadline=$((SECONDS + READY_SECONDS)) pending failed=""
    while :; do
        pending=""
        for n in "${NODES[@]}"; do
            if [ -z "$(live_pid "$dir/node$n/launch.pid")" ]; then
                failed+=" $n"
            elif ! ready "$n"; then
                pending+=" $n"
            fi
        done
        if [ -n "$failed" ] || [ -z "$pending" ] || [ $SECONDS -ge $deadline ]; then
            break
        fi
        sleep 0.5
    done
    if [ -n "$failed" ] || [ -n "$pending" ]; then
        for n in $failed; do
            echo "node$n exited; the end of $dir/node$n/ternd.log:" >&2
            tail -n 5 "$dir/node$n/ternd.log" | sed 's/^/    /' >&2
        done
        for n in $pending; do
            echo "node$n is not ready after ${READY_SECONDS}s; the end of $dir/node$n/ternd.log:" >&2
            tail -n 5 "$dir/node$n/ternd.log" | sed 's/^/    /' >&2
        done
        stop_nodes "$dir" >/dev/null || true
        echo "the cluster did not start; its files are in $dir (remove it before trying again)" >&2
        exit 1
    fi

    echo "a three-node tern cluster runs on loopback, files in $dir:"
    printf '  %-6s %-7s %-26s %-16s %s\n' node pid "HTTP + node RPC (tcp/udp)" "NSQ TCP" "Raft (mTLS)"
    for n in "${NODES[@]}"; do
        printf '  %-6s %-7s %-26s %-16s %s\n' "node$n" "$(live_pid "$dir/node$n/launch.pid")" \
            "127.0.0.1:$(http_port "$n")" "127.0.0.1:$(tcp_port "$n")" "127.0.0.1:$(raft_port "$n")"
    done
    echo "  logs: $dir/nodeN/ternd.log; each node's command line: $dir/nodeN/command"
    echo "  certificates: $dir/ca.crt, $dir/nodeN.{crt,key}; cluster secret: $dir/secret"
    # The node whose creation of the admin user commits logs where it wrote
    # the password (soon after a leader is elected); give it a few seconds.
    local pw="" tries
    for tries in $(seq 50 -1 1); do
        pw=$(sed -n 's/.*root user admin created; its password is in //p' \
            "$dir"/node*/ternd.log | head -n 1)
        if [ -n "$pw" ] || [ "$tries" -eq 1 ]; then
            break
        fi
        sleep 0.1
    done
    if [ -n "$pw" ]; then
        echo "  the admin user's password is in $pw"
    fi
    if [ -n "$pw" ]; then
        echo "try:   curl -s -u admin:\$(cat $pw) http://127.0.0.1:$(http_port 2)/v1/cluster/members"
    else
        echo "try:   curl -s http://127.0.0.1:$(http_port 2)/readyz"
    fi
    echo "stop:  make cluster-stop   (or $0 stop $dir)"
}

cmd=${1:-}
dir=${2:-${CLUSTER_DATA:-./cluster-data}}
case "$cmd" in
start) start "$dir" ;;
stop)
    if [ ! -d "$dir" ]; then
        echo "no cluster directory $dir" >&2
        exit 1
    fi
    stop_nodes "$dir"
    ;;
*) usage ;;
esac
