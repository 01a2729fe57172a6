#!/usr/bin/env python3
"""Where a factor-3 acknowledgement's time goes, stage by stage.

Reads the files a ternd built with bench/stage-trace.patch writes (one per
process, CLOCK_MONOTONIC timestamps of every stage of one topic's appends,
copies, syncs, fetch answers, flush reports and hw moves, each with the
log offset it covers) and follows every message of the phase from the
leader's append to its completion: per stage the median, p90 and mean
(the means add up to the total), which copy the hw waited for last, and
how long a fetch waited at the leader before its answer.

    git apply bench/stage-trace.patch   # in a scratch copy: never commit it
    make build
    TERN_STAGE_TRACE_DIR=/dev/shm/st TERN_STAGE_TRACE_TOPIC=nsq-r3 \
        CLUSTER_BENCH_PARTS=repl bench/cluster_bench.sh build 5s
    python3 bench/stage_trace.py /dev/shm/st pub     # or mpub

Needs numpy (Debian: python3-numpy). docs/performance.md, "session 16",
has what it found.
"""
import sys, glob, os
import numpy as np
N = ["", "L_SUB", "L_RST", "L_W", "L_S", "L_ACK", "F_SUB", "F_RST", "F_W", "F_S", "ANS_PARKED",
     "ANS_AT_ONCE", "F_RCV", "F_APPDONE", "F_FEED", "F_REP_SENT", "F_FETCH_SENT", "L_REP_RCV",
     "L_FETCH_RCV", "L_HW", "L_FEED_FL", "L_FEED_W", "F_SYNC0", "L_SYNC0"]
S = {n: i for i, n in enumerate(N)}
dt = np.dtype([("t", "<i8"), ("end", "<u8"), ("p", "<u4"), ("stage", "<u2"), ("node", "<u2")])
d = sys.argv[1]
phase = sys.argv[2] if len(sys.argv) > 2 else "pub"
procs = {}
for f in glob.glob(os.path.join(d, "st.*")):
    a = np.fromfile(f, dtype=dt)
    a = a[a["t"] != 0]
    procs[int(f.rsplit(".", 1)[1])] = a
# the phase: L_SUB events of one record (PUB) or of 64 (MPUB)
want = 1 if phase == "pub" else 64
ts = []
for a in procs.values():
    m = a["stage"] == S["L_SUB"]
    for p in np.unique(a["p"][m]):
        e = a[m & (a["p"] == p)]
        e = e[np.argsort(e["end"])]
        cnt = np.diff(e["end"].astype(np.int64), prepend=0)
        ts.append(e["t"][cnt == want])
ts = np.sort(np.concatenate(ts))
lo, hi = np.percentile(ts, 1), np.percentile(ts, 99)
# leader of each partition, followers
leader = {}
for pid, a in procs.items():
    for p in np.unique(a["p"][a["stage"] == S["L_SUB"]]):
        leader[int(p)] = pid
node_of = {}
for pid, a in procs.items():
    m = a["stage"] == S["F_RCV"]
    for p, n in set(zip(a["p"][m].tolist(), a["node"][m].tolist())):
        node_of[leader[p]] = n
pid_of = {v: k for k, v in node_of.items()}

def first_after(a, stage, p, offs, node=None, stages=None):
    """time of the first event (stage, p[, node]) whose end covers offs (end > off)"""
    st = stages or [stage]
    m = np.isin(a["stage"], [S[x] for x in st]) & (a["p"] == p)
    if node is not None:
        m &= a["node"] == node
    e = a[m]
    if len(e) == 0:
        return np.full(len(offs), np.nan)
    e = e[np.argsort(e["t"], kind="stable")]
    cm = np.maximum.accumulate(e["end"].astype(np.int64))
    idx = np.searchsorted(cm, offs + 1, side="left")
    out = np.full(len(offs), np.nan)
    ok = idx < len(e)
    out[ok] = e["t"][idx[ok]]
    return out

rows = {}
def add(name, v):
    rows.setdefault(name, []).append(v)
waited = {"leader sync": 0, "follower": 0}
slower_total = 0
parked_n = worker_n = 0
for p, lp in sorted(leader.items()):
    a = procs[lp]
    sub = a[(a["stage"] == S["L_SUB"]) & (a["p"] == p) & (a["t"] >= lo) & (a["t"] <= hi)]
    offs = (sub["end"] - 1).astype(np.int64)
    t0 = sub["t"].astype(float)
    T = {}
    for st in ["L_RST", "L_W", "L_SYNC0", "L_S", "L_FEED_W", "L_FEED_FL", "L_HW", "L_ACK"]:
        T[st] = first_after(a, st, p, offs)
    folls = [n for n in np.unique(a["node"][(a["stage"] == S["ANS_PARKED"]) | (a["stage"] == S["ANS_AT_ONCE"])]) if n in pid_of]
    F = {}
    for n in folls:
        fa = procs[pid_of[n]]
        F[n] = {
            "ANS": first_after(a, None, p, offs, node=n, stages=["ANS_PARKED", "ANS_AT_ONCE"]),
            "ANSP": first_after(a, "ANS_PARKED", p, offs, node=n),
            "F_RCV": first_after(fa, "F_RCV", p, offs),
            "F_SUB": first_after(fa, "F_SUB", p, offs),
            "F_RST": first_after(fa, "F_RST", p, offs),
            "F_W": first_after(fa, "F_W", p, offs),
            "F_SYNC0": first_after(fa, "F_SYNC0", p, offs),
            "F_S": first_after(fa, "F_S", p, offs),
            "F_FEED": first_after(fa, "F_FEED", p, offs),
            "F_SENT": first_after(fa, None, p, offs, stages=["F_REP_SENT", "F_FETCH_SENT"]),
            "F_REPS": first_after(fa, "F_REP_SENT", p, offs),
            "L_GOT": first_after(a, None, p, offs, node=n, stages=["L_REP_RCV", "L_FETCH_RCV"]),
        }
    ok = ~np.isnan(T["L_ACK"])
    for n in folls:
        ok &= ~np.isnan(F[n]["L_GOT"]) & ~np.isnan(F[n]["F_S"])
    us = lambda x, y: (x[ok] - y[ok]) / 1000.0
    add("leader: submit -> round start (queue)", us(T["L_RST"], t0))
    add("leader: round start -> written", us(T["L_W"], T["L_RST"]))
    add("leader: written -> loop sees write (hand-off)", us(T["L_FEED_W"], T["L_W"]))
    add("leader: written -> sync start", us(T["L_SYNC0"], T["L_W"]))
    add("leader: fdatasync", us(T["L_S"], T["L_SYNC0"]))
    add("leader: synced -> loop sees it", us(T["L_FEED_FL"], T["L_S"]))
    add("leader: submit -> own sync seen on loop", us(T["L_FEED_FL"], t0))
    for k, n in enumerate(folls):
        f = F[n]
        tag = "follower"
        add(f"{tag}: leader loop sees write -> fetch answered", us(f["ANS"], T["L_FEED_W"]))
        add(f"{tag}: answered -> follower receives (RPC)", us(f["F_RCV"], f["ANS"]))
        add(f"{tag}: receives -> append submitted", us(f["F_SUB"], f["F_RCV"]))
        add(f"{tag}: submitted -> round start (queue)", us(f["F_RST"], f["F_SUB"]))
        add(f"{tag}: round start -> written", us(f["F_W"], f["F_RST"]))
        add(f"{tag}: written -> sync start", us(f["F_SYNC0"], f["F_W"]))
        add(f"{tag}: fdatasync", us(f["F_S"], f["F_SYNC0"]))
        add(f"{tag}: synced -> loop sees it (hand-off)", us(f["F_FEED"], f["F_S"]))
        add(f"{tag}: loop sees sync -> report/fetch sent", us(f["F_SENT"], f["F_FEED"]))
        add(f"{tag}: sent -> leader receives (RPC)", us(f["L_GOT"], f["F_SENT"]))
        add(f"{tag}: submit -> leader has its flushed offset", us(f["L_GOT"], t0))
        parked_n += int(np.sum(ok & (f["ANSP"] == f["ANS"])))
        worker_n += int(np.sum(ok & (f["ANSP"] != f["ANS"])))
    # who the hw waited for
    cands = [T["L_FEED_FL"]] + [F[n]["L_GOT"] for n in folls]
    last = np.nanargmax(np.vstack(cands), axis=0)[ok]
    waited["leader sync"] += int(np.sum(last == 0))
    waited["follower"] += int(np.sum(last > 0))
    if len(folls) == 2:
        g1, g2 = F[folls[0]]["L_GOT"][ok], F[folls[1]]["L_GOT"][ok]
        add("second follower's flushed offset after the first's", np.abs(g1 - g2) / 1000.0)
        fst = np.fmin(g1, g2)
        add("last of (own sync, followers) -> hw moves", (T["L_HW"][ok] - np.fmax(np.fmax(g1, g2), T["L_FEED_FL"][ok])) / 1000.0)
        add("(if hw needed only the first follower: its offset -> the last)", (np.fmax(np.fmax(g1, g2), T["L_FEED_FL"][ok]) - np.fmax(fst, T["L_FEED_FL"][ok])) / 1000.0)
    add("hw moves -> producer's append completes", us(T["L_ACK"], T["L_HW"]))
    add("TOTAL submit -> append completes", us(T["L_ACK"], t0))
print(f"phase {phase}: window {(hi-lo)/1e9:.1f} s")
print(f"{'stage':62s} {'n':>7s} {'p50 us':>8s} {'p90 us':>8s} {'mean':>8s}")
for k, v in rows.items():
    v = np.concatenate(v)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        continue
    print(f"{k:62s} {len(v):7d} {np.percentile(v,50):8.0f} {np.percentile(v,90):8.0f} {v.mean():8.0f}")
tot = sum(waited.values())
print("the hw waited last for:", {k: f"{v/tot:.0%}" for k, v in waited.items()}, "of", tot)
print(f"follower copies answered from a parked fetch: {parked_n}, otherwise: {worker_n}")

# How long a fetch waited at the leader: parked (at the log end) or answered at once.
for p, lp in sorted(leader.items()):
    a = procs[lp]
    a = a[(a["t"] >= lo) & (a["t"] <= hi) & (a["p"] == p)]
    for st in ["ANS_AT_ONCE", "ANS_PARKED"]:
        ans = a[a["stage"] == S[st]]
        fr = a[a["stage"] == S["L_FETCH_RCV"]]
        ds = []
        for n in np.unique(ans["node"]):
            an = ans[ans["node"] == n]; fn = fr[fr["node"] == n]
            fn = np.sort(fn["t"])
            i = np.searchsorted(fn, an["t"], side="right") - 1
            ok = i >= 0
            ds.append((an["t"][ok] - fn[i[ok]]) / 1000)
        ds = np.concatenate(ds)
        print(f"partition {p}: {st.lower()} answers", len(ds), "fetch arrival -> answer p50 %.0f p90 %.0f mean %.0f" % (np.percentile(ds, 50), np.percentile(ds, 90), ds.mean()))
