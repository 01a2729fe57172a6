# Shell helpers the bench scripts share; sourced (`. "$here/lib.sh"`), not
# run.

# Stops process $1 (SIGTERM, SIGKILL after $2 seconds, default 30) and
# reaps it when it is our child.
stop_pid() {
    local p=$1 secs=${2:-30}
    kill -0 "$p" 2>/dev/null || return 0
    kill "$p" 2>/dev/null || true
    for _ in $(seq $((secs * 10))); do
        kill -0 "$p" 2>/dev/null || break
        # A child that exited stays a zombie until waited for.
        [ "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status" 2>/dev/null)" = Z ] && break
        sleep 0.1
    done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}
