#!/bin/bash
# The container's entrypoint: execs ternd with the arguments the container
# was given, after deriving a cluster member's settings from its
# StatefulSet pod when TERN_REPLICAS says it is one of several.
#
# On its own (TERN_REPLICAS unset or 1) it only execs ternd "$@": every
# other setting comes from the arguments or from TERN_<OPTION> variables,
# which ternd reads itself (TERN_DATA_PATH, TERN_HTTP_ADDRESS, ...).
#
# As member N of a StatefulSet of TERN_REPLICAS pods (its host name ends
# in -<ordinal>, N = ordinal + 1), it adds, unless already given:
#   --node-id N
#   --advertise-address <pod>.<TERN_PEER_SERVICE>:<TERN_HTTP_PORT>
#       (a DNS name: node RPC resolves it again before every dial, so it
#       follows the pod to a new IP)
#   --raft-address <pod>.<TERN_PEER_SERVICE>:<TERN_RAFT_PORT>
#       (a DNS name too: Raft records the name and the other members
#       resolve it each time they dial, so a re-created pod at a new IP
#       is reached there; ternd listens on what the name resolves to at
#       start, so first this waits, up to TERN_PEER_WAIT seconds, until the
#       name resolves to POD_IP: the peer Service may still publish a
#       re-created pod's old IP for a moment)
#   --raft-tls-cert/--raft-tls-key/--raft-tls-ca from TERN_RAFT_TLS_DIR
#       when that is set: <pod>.crt and <pod>.key there (a certificate per
#       member), else tls.crt and tls.key (one for all); ca.crt either way
# and one of
#   --peers 1@<set>-0.<svc>:<raft>,...   when its data directory has no
#       Raft state and no other member answers /readyz within
#       TERN_READY_WAIT seconds (default 15; it looks once a second): the
#       first start of the cluster. One look is not enough: a member whose
#       volume was lost while the metastore elects a new leader (it may
#       have led it) finds no member ready until the election is over and
#       the new leader has committed, one or two election timeouts
#       (raft-election-timeout, 1 s by default, randomized up to twice
#       that) and a round trip, a few seconds with a split vote; 15 s
#       covers several such rounds, and costs the cluster's real first
#       start no more than that once. This then waits (up to
#       TERN_PEER_WAIT seconds, default 300) until every pod's name
#       resolves (the peer Service publishes not-ready pods), so that the
#       first election finds its voters.
#   --join <set>-0.<svc>:<http>,...      otherwise: a restart (Raft state
#       on disk: ternd starts from it) or a member whose disk is new while
#       the cluster runs (it asks to be admitted again, the lost-disk path
#       of docs/cluster.md).
#
# Variables: TERN_REPLICAS, TERN_PEER_SERVICE (the headless Service),
# POD_IP (the downward API's status.podIP: what the pod's name must
# resolve to before ternd starts), TERN_HTTP_PORT (4151),
# TERN_RAFT_PORT (4153), TERN_PEER_WAIT (300), TERN_READY_WAIT (15),
# TERN_RAFT_TLS_DIR, TERN_DATA_PATH
# (/var/lib/tern). It writes nothing: the root file system may be
# read-only.
set -euo pipefail

TERND=${TERND:-/usr/bin/ternd}

die() {
    echo "tern-entrypoint: $*" >&2
    exit 2
}

replicas=${TERN_REPLICAS:-1}
if ! [[ "$replicas" =~ ^[0-9]+$ ]] || [ "$replicas" -lt 1 ]; then
    die "TERN_REPLICAS must be a positive number, not '$replicas'"
fi
if [ "$replicas" -eq 1 ]; then
    exec "$TERND" "$@"
fi

host=${HOSTNAME:-$(cat /proc/sys/kernel/hostname)}
ordinal=${host##*-}
set_name=${host%-*}
if ! [[ "$ordinal" =~ ^[0-9]+$ ]] || [ "$set_name" = "$host" ]; then
    die "host name '$host' does not end in -<ordinal>: TERN_REPLICAS=$replicas is for StatefulSet pods"
fi
[ "$ordinal" -lt "$replicas" ] ||
    die "pod ordinal $ordinal is not below TERN_REPLICAS=$replicas (scaling up needs a --join of its own)"
svc=${TERN_PEER_SERVICE:?tern-entrypoint: TERN_PEER_SERVICE (the headless peer Service) is not set}
pod_ip=${POD_IP:?tern-entrypoint: POD_IP (the downward API status.podIP) is not set}
http_port=${TERN_HTTP_PORT:-4151}
raft_port=${TERN_RAFT_PORT:-4153}
wait_s=${TERN_PEER_WAIT:-300}
ready_wait=${TERN_READY_WAIT:-15}
[[ "$ready_wait" =~ ^[0-9]+$ ]] || die "TERN_READY_WAIT must be a number of seconds, not '$ready_wait'"
[[ "$wait_s" =~ ^[0-9]+$ ]] || die "TERN_PEER_WAIT must be a number of seconds, not '$wait_s'"
data=${TERN_DATA_PATH:-/var/lib/tern}

# The wall clock in milliseconds. Bash's SECONDS counts whole seconds
# from a whole second, so a deadline made with it could pass up to a
# second early (a 2 s wait seen ending after 1.15 s).
now_ms() {
    local t=${EPOCHREALTIME/[.,]/}
    echo $((10#$t / 1000))
}

# Whether an option is among the arguments already (--name or --name=...).
given() {
    local a
    for a in "${@:2}"; do
        case "$a" in --"$1" | --"$1"=*) return 0 ;; esac
    done
    return 1
}

# Whether name $1 resolves to address $2 (among its addresses) now.
resolves_to() {
    local a
    for a in $(timeout 5 getent hosts "$1" || true); do
        [ "$a" = "$2" ] && return 0
    done
    return 1
}

# Whether http://$1:$http_port/readyz answers 200, over bash's /dev/tcp
# (no curl in the image), within 2 s.
ready_at() {
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
    timeout 2 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        printf "GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n" "$1" >&3
        IFS= read -r line <&3 && [[ "$line" == "HTTP/1."?" 200"* ]]' _ "$1" "$http_port" 2>/dev/null
}

extra=()
given node-id "$@" || extra+=(--node-id "$((ordinal + 1))")
given advertise-address "$@" || extra+=(--advertise-address "$host.$svc:$http_port")
if ! given raft-address "$@"; then
    # ternd binds what its Raft name resolves to at start: wait until the
    # peer Service has this pod's IP, not a former pod's.
    deadline=$(($(now_ms) + wait_s * 1000))
    until resolves_to "$host.$svc" "$pod_ip"; do
        [ "$(now_ms)" -lt "$deadline" ] ||
            die "$host.$svc does not resolve to this pod's IP $pod_ip after ${wait_s}s (is the peer Service $svc there, with publishNotReadyAddresses?)"
        sleep 1
    done
    extra+=(--raft-address "$host.$svc:$raft_port")
fi
if [ -n "${TERN_RAFT_TLS_DIR:-}" ] && ! given raft-tls-cert "$@"; then
    tls=$TERN_RAFT_TLS_DIR
    base=tls
    [ -e "$tls/$host.crt" ] && base=$host
    for f in "$base.crt" "$base.key" ca.crt; do
        [ -r "$tls/$f" ] || die "TERN_RAFT_TLS_DIR=$tls has no readable $f (expected $host.crt and $host.key, or tls.crt and tls.key, and ca.crt)"
    done
    extra+=(--raft-tls-cert "$tls/$base.crt" --raft-tls-key "$tls/$base.key" --raft-tls-ca "$tls/ca.crt")
fi

if ! given peers "$@" && ! given join "$@"; then
    names=() peers="" join=""
    for ((i = 0; i < replicas; i++)); do
        names+=("$set_name-$i.$svc")
        peers+="${peers:+,}$((i + 1))@$set_name-$i.$svc:$raft_port"
        [ "$i" -eq "$ordinal" ] || join+="${join:+,}$set_name-$i.$svc:$http_port"
    done
    mode="peers"
    if [ -e "$data/meta/metadata1" ] || [ -e "$data/meta/metadata2" ]; then
        mode="join"
    else
        # Looked at again for ready_wait seconds (see the top): a
        # re-election hides every ready member for a few seconds.
        deadline=$(($(now_ms) + ready_wait * 1000))
        while :; do
            for n in "${names[@]}"; do
                [ "$n" = "$host.$svc" ] && continue
                if ready_at "$n"; then
                    mode="join"
                    break 2
                fi
            done
            [ "$(now_ms)" -lt "$deadline" ] || break
            sleep 1
        done
    fi
    if [ "$mode" = peers ]; then
        echo "tern-entrypoint: member $((ordinal + 1)) of $replicas: no Raft state in $data/meta and no other member ready within ${ready_wait}s: the cluster's first start, once every member's name resolves" >&2
        deadline=$(($(now_ms) + wait_s * 1000))
        for n in "${names[@]}"; do
            until timeout 5 getent hosts "$n" >/dev/null; do
                [ "$(now_ms)" -lt "$deadline" ] ||
                    die "$n does not resolve after ${wait_s}s (is the peer Service $svc there, with publishNotReadyAddresses?)"
                sleep 1
            done
        done
        extra+=(--peers "$peers")
    else
        extra+=(--join "$join")
    fi
fi

echo "tern-entrypoint: member $((ordinal + 1)) of $replicas: ${extra[*]}" >&2
exec "$TERND" "${extra[@]}" "$@"
