#!/usr/bin/env bash
# Starts, restarts or stops a three-node tern cluster on loopback, for
# trying a cluster out: `make cluster`, `make cluster-restart N=2`,
# `make cluster-kill N=2` and `make cluster-stop` call it.
#
#   scripts/cluster.sh start [DIR]     in a new DIR (default ./cluster-data):
#                                      a CA and a certificate per node made
#                                      with openssl, a random cluster secret,
#                                      a command file per node, then the
#                                      three ternd processes in the
#                                      background. In a DIR this script made
#                                      before: starts the nodes that are not
#                                      running, with their data.
#   scripts/cluster.sh restart N [DIR] stop node N (SIGTERM, SIGKILL after
#                                      STOP_SECONDS) and start it again
#   scripts/cluster.sh kill N [DIR]    SIGKILL node N (a crash, to try)
#   scripts/cluster.sh stop [DIR]      stop every node by its PID file
#
# Node N (1..3) listens on 127.0.0.1 only: NSQ TCP 424N, HTTP and node RPC
# 425N (TCP and UDP, the same port number), Raft 426N with mutual TLS
# (CLUSTER_PORT_BASE, 4240 by default, moves all nine: TCP base+N, HTTP
# base+10+N, Raft base+20+N; DIR/port-base keeps the base it was made with).
# The ternd binary is $TERND (default ./build/ternd); DIR/nodeN/command
# names it by its absolute path. $TERND_ARGS (split at spaces) go to every
# ternd this run starts, after the command file's own (e.g.
# TERND_ARGS=--default-replication-factor=1 for single-owner topics; topics
# are replicated on all three nodes by default, factor 3, min_insync 2).
# Nothing here is for production: every key
# sits unencrypted in DIR; docs/cluster.md shows the same steps for three
# hosts.
set -euo pipefail

NODES=(1 2 3)
TERND=${TERND:-./build/ternd}
READY_SECONDS=${READY_SECONDS:-60}
STOP_SECONDS=${STOP_SECONDS:-45}
PORT_BASE=4240

usage() {
    cat >&2 <<EOF
usage: $0 start [DIR]
       $0 restart N [DIR]
       $0 kill N [DIR]
       $0 stop [DIR]
(DIR default ./cluster-data, or \$CLUSTER_DATA; N is 1, 2 or 3)
EOF
    exit 2
}

tcp_port() { echo $((PORT_BASE + $1)); }
http_port() { echo $((PORT_BASE + 10 + $1)); }
raft_port() { echo $((PORT_BASE + 20 + $1)); }

# The peers list every node is started with: ID@raft-address, this node
# included, the same on all three.
peers() {
    local out="" n
    for n in "${NODES[@]}"; do
        out+="${out:+,}$n@127.0.0.1:$(raft_port "$n")"
    done
    echo "$out"
}

# The process id in a PID file when that process is alive and is the node
# whose directory is $2: its command line names a file there (ternd's
# --data-path, or the command file on its way to exec ternd). Else
# nothing: a stale file whose number another process now holds is not
# ours to signal.
live_pid() {
    local file=$1 pid cmdline
    [ -f "$file" ] || return 0
    pid=$(cat "$file" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    alive "$pid" || return 0
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    if [[ "$cmdline" == *"$2/"* ]]; then
        echo "$pid"
    fi
}

# Whether process $1 still runs: any of its threads is neither a zombie nor
# dead. The main thread of a killed ternd turns zombie before the storage
# threads finish exiting, and they hold its files (the data directory's
# lock) until the last one is gone; a zombie left to reap does not run.
alive() {
    local status state
    for status in /proc/"$1"/task/*/status; do
        state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "$status" 2>/dev/null || true)
        if [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]; then
            return 0
        fi
    done
    return 1
}

# Waits up to $2 seconds for process $1 to exit; false if it still runs.
wait_exit() {
    local pid=$1 tries
    for tries in $(seq $(($2 * 10)) -1 1); do
        alive "$pid" || return 0
        sleep 0.1
    done
    ! alive "$pid"
}

# Node $2's running ternd under $1: its own PID file, or else the one this
# script wrote when it launched it (ternd writes its own only once it has
# opened its data).
node_pid() {
    local pid
    pid=$(live_pid "$1/node$2/ternd.pid" "$1/node$2")
    [ -n "$pid" ] || pid=$(live_pid "$1/node$2/launch.pid" "$1/node$2")
    echo "$pid"
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

# Node $2's command file under $1: an executable shell script that runs
# ternd in the foreground with that node's options (extra arguments go to
# ternd). Every path in it but ternd's is relative to the file's own
# directory, so it starts the same node from any working directory, and
# the cluster directory may move; ternd is named by its absolute path.
# shellcheck disable=SC2016,SC1003 # the $ and \ are the file's, not ours
write_command() {
    local dir=$1 n=$2 ternd=$3 file="$1/node$2/command"
    {
        echo '#!/bin/sh'
        echo "# Node $n of the three-node tern cluster in the directory above this one,"
        echo "# written by scripts/cluster.sh: runs ternd in the foreground (extra"
        echo "# arguments go to ternd). Paths are relative to this file, so it runs the"
        echo "# same node from any working directory."
        echo 'node=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd -P) || exit 1'
        echo 'top=$(dirname -- "$node")'
        printf 'exec %q \\\n' "$ternd"
        echo '    --data-path "$node/data" --pid-file "$node/ternd.pid" \'
        printf '    --node-id %s --tcp-address 127.0.0.1:%s \\\n' "$n" "$(tcp_port "$n")"
        printf '    --http-address 127.0.0.1:%s --advertise-address 127.0.0.1:%s \\\n' \
            "$(http_port "$n")" "$(http_port "$n")"
        printf '    --raft-address 127.0.0.1:%s --peers %s \\\n' "$(raft_port "$n")" "$(peers)"
        echo '    --cluster-secret-file "$top/secret" \'
        printf '    --raft-tls-cert "$top/node%s.crt" --raft-tls-key "$top/node%s.key" \\\n' "$n" "$n"
        echo '    --raft-tls-ca "$top/ca.crt" "$@"'
    } >"$file"
    chmod 755 "$file"
}

# Whether $1 holds every file `start` makes in a new directory; a
# directory this script did not make (or made by a version of it without
# command scripts) is not one to start nodes in.
is_cluster_dir() {
    local dir=$1 n f
    for f in port-base secret ca.crt; do
        [ -f "$dir/$f" ] || return 1
    done
    for n in "${NODES[@]}"; do
        [ -f "$dir/node$n.crt" ] && [ -f "$dir/node$n.key" ] && [ -x "$dir/node$n/command" ] || return 1
    done
}

# Reads DIR/port-base into PORT_BASE (the ports the command files name).
load_ports() {
    local base
    base=$(cat "$1/port-base")
    if ! [[ "$base" =~ ^[0-9]+$ ]] || [ "$base" -lt 1 ] || [ "$base" -gt 65500 ]; then
        echo "$1/port-base holds '$base', not a port base (1..65500)" >&2
        exit 1
    fi
    PORT_BASE=$base
}

# The cluster directory given for restart, kill and stop, as an absolute
# path; a clear error when it is not one this script made.
existing_dir() {
    local dir=$1
    if [ ! -d "$dir" ]; then
        echo "no cluster directory $dir (make cluster makes one)" >&2
        exit 1
    fi
    dir=$(cd "$dir" && pwd -P)
    if ! is_cluster_dir "$dir"; then
        echo "$dir is not a cluster directory made by scripts/cluster.sh (it lacks port-base, secret, ca.crt, nodeN.crt/key or nodeN/command)" >&2
        exit 1
    fi
    echo "$dir"
}

# Whether node $1's /readyz answers 200 (python3 is a build dependency
# already; curl is not).
ready() {
    python3 - "http://127.0.0.1:$(http_port "$1")/readyz" <<'PY' 2>/dev/null
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
PY
}

# Starts node $2 under $1 in the background through its command file, in
# its own session (a Ctrl-C in this terminal does not reach it), its output
# appended to its log. setsid and the command file both exec, so the PID
# recorded is ternd's.
launch() {
    local dir=$1 n=$2
    echo "--- $(date -u '+%Y-%m-%dT%H:%M:%SZ') scripts/cluster.sh starts node$n" >>"$dir/node$n/ternd.log"
    # shellcheck disable=SC2086 # TERND_ARGS is split at spaces on purpose
    setsid "$dir/node$n/command" ${TERND_ARGS:-} >>"$dir/node$n/ternd.log" 2>&1 </dev/null &
    echo $! >"$dir/node$n/launch.pid"
}

# Waits until every node named after $1 answers /readyz 200 (it does once
# its metastore replica has a leader and has caught up), up to
# READY_SECONDS. On failure says which node exited or is not ready, with the
# end of its log, and returns 1; the nodes still running keep running.
wait_ready() {
    local dir=$1 n pending failed=""
    shift
    local deadline=$((SECONDS + READY_SECONDS))
    while :; do
        pending=""
        for n in "$@"; do
            if [ -z "$(node_pid "$dir" "$n")" ]; then
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
    [ -z "$failed" ] && [ -z "$pending" ] && return 0
    for n in $failed; do
        echo "node$n exited; the end of $dir/node$n/ternd.log:" >&2
        tail -n 5 "$dir/node$n/ternd.log" | sed 's/^/    /' >&2
    done
    for n in $pending; do
        echo "node$n (pid $(node_pid "$dir" "$n")) is not ready after ${READY_SECONDS}s; the end of $dir/node$n/ternd.log:" >&2
        tail -n 5 "$dir/node$n/ternd.log" | sed 's/^/    /' >&2
    done
    if [ -n "$pending" ]; then
        echo "a node becomes ready once its metastore has a leader, which needs two of the three nodes running" >&2
        echo "the nodes still running keep running: make cluster-stop (or $0 stop $dir) stops them" >&2
    fi
    return 1
}

# Stops node $2's ternd under $1 (pid $3): SIGTERM, then up to
# STOP_SECONDS (45) for it to exit (a graceful stop drains first, up to
# ternd's --drain-timeout of 30 s, and hands metastore leadership over),
# then SIGKILL. Prints what it did.
stop_node() {
    local dir=$1 n=$2 pid=$3
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_exit "$pid" "$STOP_SECONDS"; then
        kill -KILL "$pid" 2>/dev/null || true
        wait_exit "$pid" 10 || { echo "node$n (pid $pid) still runs after SIGKILL" >&2; exit 1; }
        echo "node$n (pid $pid) did not exit within ${STOP_SECONDS}s of SIGTERM: killed it (SIGKILL); see $dir/node$n/ternd.log"
    else
        echo "stopped node$n (pid $pid)"
    fi
    rm -f "$dir/node$n/launch.pid"
}

stop_nodes() {
    local dir=$1 n pid stopped=()
    for n in "${NODES[@]}"; do
        pid=$(node_pid "$dir" "$n")
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
            alive "${entry#*:}" && left=1
        done
        if [ $left -eq 0 ] || [ "$tries" -eq 1 ]; then
            break
        fi
        sleep 0.1
    done
    for entry in "${stopped[@]}"; do
        if alive "${entry#*:}"; then
            echo "node${entry%%:*} (pid ${entry#*:}) is still stopping after 10 s; see $dir/node${entry%%:*}/ternd.log" >&2
        else
            echo "stopped node${entry%%:*} (pid ${entry#*:})"
        fi
        rm -f "$dir/node${entry%%:*}/launch.pid"
    done
    [ $left -eq 0 ]
}

# The nodes, their state and ports, and where to look next.
report() {
    local dir=$1 n pid
    printf '  %-6s %-7s %-26s %-16s %s\n' node pid "HTTP + node RPC (tcp/udp)" "NSQ TCP" "Raft (mTLS)"
    for n in "${NODES[@]}"; do
        pid=$(node_pid "$dir" "$n")
        printf '  %-6s %-7s %-26s %-16s %s\n' "node$n" "${pid:-down}" \
            "127.0.0.1:$(http_port "$n")" "127.0.0.1:$(tcp_port "$n")" "127.0.0.1:$(raft_port "$n")"
    done
    echo "  logs: $dir/nodeN/ternd.log; each node's command (runs it in the foreground): $dir/nodeN/command"
    echo "  certificates: $dir/ca.crt, $dir/nodeN.{crt,key}; cluster secret: $dir/secret"
    # The node whose creation of the admin user committed logs where it
    # wrote the password (soon after the first leader is elected; the logs
    # are appended to, so a later start finds the line too); give it a few
    # seconds.
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
        echo "try:   curl -s -u admin:\$(cat $pw) http://127.0.0.1:$(http_port 2)/v1/cluster/members"
    else
        echo "try:   curl -s http://127.0.0.1:$(http_port 2)/readyz"
    fi
    echo "restart node 2: make cluster-restart N=2; crash it: make cluster-kill N=2"
    echo "stop:  make cluster-stop   (or $0 stop $dir)"
}

start() {
    local dir=$1 n pid
    if [ -e "$dir" ] && ! [ -d "$dir" ]; then
        echo "$dir exists and is not a directory: give another one (CLUSTER_DATA=dir make cluster)" >&2
        exit 1
    fi
    if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
        dir=$(cd "$dir" && pwd -P)
        if ! is_cluster_dir "$dir"; then
            if [ -f "$dir/secret" ] && [ -f "$dir/ca.crt" ] && [ ! -f "$dir/port-base" ]; then
                echo "$dir was made by an older scripts/cluster.sh (no port-base, no command scripts):" >&2
                echo "stop it (make cluster-stop), remove it and run make cluster again" >&2
            else
                echo "$dir is not a cluster directory made by scripts/cluster.sh (it lacks port-base, secret, ca.crt, nodeN.crt/key or nodeN/command):" >&2
                echo "give another directory (CLUSTER_DATA=dir make cluster), or remove it if it holds nothing you need" >&2
            fi
            exit 1
        fi
        load_ports "$dir"
        local started=() running=0
        for n in "${NODES[@]}"; do
            pid=$(node_pid "$dir" "$n")
            if [ -n "$pid" ]; then
                echo "node$n already runs (pid $pid)"
                running=$((running + 1))
            else
                launch "$dir" "$n"
                started+=("$n")
                echo "started node$n (pid $(cat "$dir/node$n/launch.pid")) with its data in $dir/node$n/data"
            fi
        done
        if [ ${#started[@]} -gt 0 ] && ! wait_ready "$dir" "${started[@]}"; then
            exit 1
        fi
        echo "the three-node tern cluster in $dir runs on loopback:"
        report "$dir"
        return 0
    fi

    if [ -n "${CLUSTER_PORT_BASE:-}" ]; then
        if ! [[ "$CLUSTER_PORT_BASE" =~ ^[0-9]+$ ]] || [ "$CLUSTER_PORT_BASE" -lt 1 ] ||
            [ "$CLUSTER_PORT_BASE" -gt 65500 ]; then
            echo "CLUSTER_PORT_BASE must be a number from 1 to 65500 (ports base+1 .. base+23); got '$CLUSTER_PORT_BASE'" >&2
            exit 1
        fi
        PORT_BASE=$CLUSTER_PORT_BASE
    fi
    if [ ! -x "$TERND" ]; then
        echo "$TERND is not built: run make build (or set TERND)" >&2
        exit 1
    fi
    command -v openssl >/dev/null || { echo "the openssl command is needed for the certificates" >&2; exit 1; }
    command -v python3 >/dev/null || { echo "python3 is needed to wait for the nodes" >&2; exit 1; }
    local ternd
    ternd=$(cd "$(dirname "$TERND")" && pwd)/$(basename "$TERND")
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd -P)
    make_certs "$dir"
    # The secret: 32 random bytes as 64 hex characters, readable by its
    # owner only (ternd refuses a secret file others can read).
    (umask 077 && openssl rand -hex 32 >"$dir/secret")
    chmod 600 "$dir"/*.key
    for n in "${NODES[@]}"; do
        mkdir -p "$dir/node$n"
        write_command "$dir" "$n" "$ternd"
    done
    # Written last: with it the directory counts as a cluster directory.
    echo "$PORT_BASE" >"$dir/port-base"
    for n in "${NODES[@]}"; do
        launch "$dir" "$n"
    done
    if ! wait_ready "$dir" "${NODES[@]}"; then
        echo "the cluster did not start; make cluster (or $0 start $dir) tries again with the same files" >&2
        exit 1
    fi
    echo "a three-node tern cluster runs on loopback, files in $dir:"
    report "$dir"
}

restart() {
    local dir=$1 n=$2 pid
    pid=$(node_pid "$dir" "$n")
    if [ -n "$pid" ]; then
        stop_node "$dir" "$n" "$pid"
    else
        echo "node$n was not running"
    fi
    launch "$dir" "$n"
    echo "started node$n (pid $(cat "$dir/node$n/launch.pid")) with its data in $dir/node$n/data"
    wait_ready "$dir" "$n" || exit 1
    echo "node$n is ready"
}

kill_node() {
    local dir=$1 n=$2 pid
    pid=$(node_pid "$dir" "$n")
    if [ -z "$pid" ]; then
        echo "node$n is not running" >&2
        exit 1
    fi
    kill -KILL "$pid"
    wait_exit "$pid" 10 || { echo "node$n (pid $pid) still runs after SIGKILL" >&2; exit 1; }
    rm -f "$dir/node$n/launch.pid"
    echo "killed node$n (pid $pid, SIGKILL); make cluster-restart N=$n (or $0 restart $n $dir) starts it again"
}

# The node number argument of restart and kill.
node_arg() {
    case "${1:-}" in
    1 | 2 | 3) echo "$1" ;;
    "")
        echo "which node? give its number: $0 $cmd N [DIR] (make cluster-$cmd N=2)" >&2
        exit 2
        ;;
    *)
        echo "no node '$1': the cluster's nodes are 1, 2 and 3" >&2
        exit 2
        ;;
    esac
}

cmd=${1:-}
case "$cmd" in
start)
    [ $# -le 2 ] || usage
    start "${2:-${CLUSTER_DATA:-./cluster-data}}"
    ;;
stop)
    [ $# -le 2 ] || usage
    dir=${2:-${CLUSTER_DATA:-./cluster-data}}
    if [ ! -d "$dir" ]; then
        echo "no cluster directory $dir" >&2
        exit 1
    fi
    stop_nodes "$(cd "$dir" && pwd -P)"
    ;;
restart | kill)
    [ $# -le 3 ] || usage
    n=$(node_arg "${2:-}")
    dir=$(existing_dir "${3:-${CLUSTER_DATA:-./cluster-data}}")
    load_ports "$dir"
    if [ "$cmd" = restart ]; then
        restart "$dir" "$n"
    else
        kill_node "$dir" "$n"
    fi
    ;;
*) usage ;;
esac
