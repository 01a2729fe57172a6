#!/usr/bin/env bash
# Thread hand-offs per group-commit round, from a `perf record` of the
# sched_switch and sched_wakeup tracepoints of one ternd (bench/cpu_bench.sh
# with SCHED=FILE): per ternd thread, how often it went to sleep (S),
# waited for I/O (D) or was preempted (R), and whom it woke, per round.
#
#   bench/sched_summary.sh PERF_DATA ROUNDS [SECONDS_RECORDED_OF_THE_RUN]
#
# ROUNDS: the rounds of the run cpu_bench.sh printed; perf records from
# 0.2 s after the run starts, so the figures are per round only roughly
# (give the run's length and the recorded span is scaled: pass both, or
# read them as ratios).
set -euo pipefail
data=${1:?perf data}
rounds=${2:?rounds}
perf script -i "$data" -F comm,tid,event,trace 2>/dev/null | awk -v r="$rounds" '
    / sched:sched_switch: / {
        for (i = 1; i <= NF; i++) if ($i ~ /^prev_state=/) { st = substr($i, 12); break }
        who = $1; if (who == "ternd") who = "loop+others"
        sw[who " " substr(st, 1, 1)]++
        next
    }
    / sched:sched_wakeup: / {
        for (i = 1; i <= NF; i++) if ($i ~ /^comm=/) { to = substr($i, 6); break }
        sub(/\/[0-9]+:.*/, "/*", to)
        who = $1; if (who == "ternd") who = "loop+others"
        wk[who " -> " to]++
    }
    END {
        print "0 switches per round (S sleep, D I/O wait, R preempted):"
        for (k in sw) printf "1   %-36s %7d  %.2f\n", k, sw[k], sw[k] / r
        print "2 wake-ups per round (waker -> woken; 0.05 or more):"
        for (k in wk) if (wk[k] / r >= 0.05) printf "3   %-36s %7d  %.2f\n", k, wk[k], wk[k] / r
    }' | sort -k1,1n -k2 | cut -c3-
