/* Hand-over fence: a new leader never delivers while the old one still
 * may (docs/replication.md, "Leadership changes and deliveries"). Pure
 * decisions with no I/O and no clock (time is an input), so that
 * tests/unit/cluster/test_handfence.c checks them alone; the replica
 * manager (replica.c) applies them to the engine's partitions
 * (tn_topic_part_hold, tn_topic_part_lease).
 *
 * DESIGN. Whatever changes a partition's leader (a move's completion, a
 * reorder, the preferred-leader hand-back, a forced election, a fence),
 * the old leader learns it only when its own metastore replica applies
 * the change, which may come after the new leader applied it. Two rules
 * close that window for every path at once:
 *
 *   1. The delivery lease (every leader, always). A node delivers from a
 *      partition it leads only until the lease (twice the Raft election
 *      timeout: 2 s by default) after its
 *      metastore replica last confirmed it is current (a follower: the
 *      last append from the Raft leader, when everything it knew to be
 *      committed was applied; the Raft leader: election-timeout ago,
 *      since it steps down by itself within that without a quorum). A
 *      change committed before that confirmation was applied by then, so
 *      a leader that delivers at t has missed only changes committed
 *      after t - lease. The engine checks the lease on
 *      every delivery (loop time, so a process resumed from SIGSTOP
 *      delivers nothing before its lease is renewed).
 *   2. The take-over hold (the new leader). A node that becomes a
 *      partition's leader in place of another node O holds its
 *      deliveries (not its appends or settles) until O is known to have
 *      stopped: O fetched from it with the new leader epoch (O fetches
 *      that epoch only once it applied the change, after it stopped), or
 *      wait_ms passed since it took the lead (O's lease ran
 *      out: the change was committed before this node applied it). No
 *      hold when there was no leader, nor when O's session was fenced
 *      when the change applied and member-session-timeout exceeds the
 *      lease by the margin (a fence comes that long after the metastore
 *      last heard from O, so O's lease ran out before).
 *
 * Bounds: a hold lasts at most wait_ms (3 s by default: a dead or cut-off
 * O never fetches); a live O that stays a replica ends it with its first
 * fetch. Nothing is held in the steady state: the lease is renewed every
 * Raft heartbeat (100 ms) and lasts 2 s.
 *
 * Threads: any; pure functions on caller-owned structs. */
#ifndef TN_CLUSTER_HANDFENCE_H
#define TN_CLUSTER_HANDFENCE_H

#include "core/platform.h"

#include <stdbool.h>
#include <stdint.h>

/* The timing of the rules, from the metastore's timeouts
 * (tn_handfence_config). */
typedef struct {
    /* How long after its metastore replica's last confirmation a leader
     * still delivers: twice the election timeout (a Raft leader's own
     * confirmation is an election timeout old). */
    uint64_t lease_ms;
    /* The longest a new leader holds its deliveries: the lease, plus a
     * margin for the one-way delay of the Raft append that confirmed the
     * old leader's lease last and for the apply here. */
    uint64_t wait_ms;
    /* Whether a fenced old leader is surely past its lease: the session
     * timeout exceeds the lease by that margin. */
    bool fence_covers;
} tn_handfence_cfg_t;

#define TN_HANDFENCE_MARGIN_MS 1000u

/* cfg from the metastore's election and member-session timeouts (ms). */
void tn_handfence_config(tn_handfence_cfg_t *cfg, unsigned election_ms, unsigned session_ms);

/* The take-over hold of one partition on one node. */
typedef struct {
    uint32_t node;  /* the old leader waited for; 0: no hold */
    uint32_t epoch; /* the leader epoch that made this node the leader */
    uint64_t until; /* the hold ends then at the latest (ms) */
} tn_handfence_t;

/* What a leadership change looked like from this node. */
typedef struct {
    uint32_t self;       /* this node */
    uint32_t old_leader; /* the leader before the change (0: none) */
    uint32_t old_epoch;  /* its leader epoch */
    uint32_t leader;     /* the leader after it */
    uint32_t epoch;      /* its leader epoch */
    bool old_fenced;     /* old_leader's session is fenced in that state */
} tn_handfence_change_t;

void tn_handfence_init(tn_handfence_t *f);

/* A metastore state reached this node (c: borrowed). Starts the hold
 * when it makes this node the leader in place of another live node; ends
 * it when this node no longer leads. Returns whether it holds now. */
bool tn_handfence_change(tn_handfence_t *f, const tn_handfence_cfg_t *cfg,
                         const tn_handfence_change_t *c, uint64_t now);

/* node fetched (or reported a flush) with leader_epoch. Returns true
 * when that ends the hold. */
bool tn_handfence_fetched(tn_handfence_t *f, uint32_t node, uint32_t leader_epoch);

/* Whether deliveries are held at now; ends the hold once its bound passed. */
bool tn_handfence_holds(tn_handfence_t *f, uint64_t now);

/* The loop time up to which a leader whose metastore replica last
 * confirmed at confirmed_at (0: never) may deliver; 1 (already past)
 * when it never did. */
uint64_t tn_handfence_lease_until(const tn_handfence_cfg_t *cfg, uint64_t confirmed_at);

#endif
