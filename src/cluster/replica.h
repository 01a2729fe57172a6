/* The replica manager: the shell around the pure replication core
 * (cluster/repl.h) on one node. For every replicated partition (topic
 * replication_factor > 1) where this node is a replica it keeps one
 * tn_repl_t, feeds it the metastore's partition states
 * (tn_meta_on_pstate), the local log's progress, the FETCH requests and
 * answers and a timer, and carries out its actions: the follower's plog
 * (opened here), the long-poll FETCH to each leader node (TN_OP_FETCH on
 * TN_LANE_REPLICA, cluster/fetch.h), and on the leader the hand-over of
 * the partition to the engine, the epoch-start record, the hw gate and the
 * ISR proposals. The DESIGN comment is in replica.c; docs/replication.md
 * describes the model.
 *
 * Threads: everything on the loop thread of tn_replica_new, except where a
 * function says otherwise. */
#ifndef TN_CLUSTER_REPLICA_H
#define TN_CLUSTER_REPLICA_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "meta/meta.h"
#include "queue/queue.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct tn_replica_s tn_replica_t;

typedef struct {
    uv_loop_t *loop;
    tn_meta_t *meta;           /* borrowed; outlives the manager */
    tn_broker_t *broker;       /* borrowed; outlives the manager */
    tn_rpc_t *rpc;             /* borrowed; may be set later (tn_replica_set_rpc) */
    uint32_t node;             /* this node's id */
    const char *data_dir;      /* copied; the broker's data directory */
    uint64_t replica_lag_ms;   /* option replica-lag-time-max; 0 = 10000 */
    uint64_t fetch_wait_ms;    /* a parked fetch's longest wait; 0 = 500 */
    uint64_t fetch_timeout_ms; /* 0 = fetch_wait_ms + 2000 */
    size_t fetch_max_bytes;    /* per fetch answer; 0 = 1 MiB */
    /* Option move-rate: bytes/s this node reads for the fetches of
     * followers out of the ISR, over all of them (cluster/throttle.h);
     * 0 = unlimited. */
    uint64_t move_rate;
    /* Option move-stall-timeout: a move whose target member outside the
     * ISR, alive, copied nothing from this leader for this long is failed
     * (cluster/movestall.h); 0 = never. */
    uint64_t move_stall_ms;
    /* Option max-repairs-per-node: repairs of damaged replicas this node
     * runs at once, and repair reads it serves at once (throttle.h
     * tn_repair_slots_t); 0 = TN_REPAIR_SLOTS_DEFAULT. */
    uint32_t max_repairs;
    /* Before a partition is handed to the engine (promotion): close what
     * this node holds of it as a follower besides the log (the channel
     * logs of cluster/setrepl.h, tn_setrepl_release), then cb(cb_arg) on
     * the loop thread, possibly at once. NULL: nothing to close. */
    void (*release)(void *arg, const char *topic, uint32_t p, void (*cb)(void *cb_arg),
                    void *cb_arg);
    void *release_arg;
    /* Leader: whether follower node (with data directory incarnation) has
     * every channel of partition p of topic caught up with this node's
     * (tn_setrepl_catch_up, which starts what it lacks). Asked every tick
     * for the followers outside the ISR; one is proposed into the ISR
     * only once this answered true. NULL: the record log alone decides. */
    bool (*channels)(void *arg, const char *topic, uint32_t p, uint32_t node, uint64_t incarnation);
    void *channels_arg;
} tn_replica_opts_t;

/* Statistics for /stats, /metrics and ternctl (rapi). Counters since
 * start; gauges over the partitions this node leads (under_replicated,
 * max lag) or knows (offline). */
typedef struct {
    uint64_t partitions;               /* replicated partitions this node is a replica of */
    uint64_t leading;                  /* ... that it leads */
    uint64_t serving;                  /* ... that it leads and serves */
    uint64_t following;                /* ... that it follows */
    uint64_t under_replicated;         /* led here, ISR smaller than the replica set */
    uint64_t offline;                  /* replicated partitions without a leader (known here) */
    uint64_t isr_shrinks, isr_expands; /* proposals from here the metastore took */
    uint64_t fetches;                  /* FETCH requests answered (leader side) */
    uint64_t fetches_sent;             /* FETCH requests sent (follower side) */
    uint64_t fenced;    /* fetches answered or received as fenced, flush reports of a stale epoch */
    uint64_t elections; /* leader epochs seen change */
    uint64_t truncations, truncations_refused;
    uint64_t resets; /* copies emptied to restart at the leader's log start (OUT_OF_RANGE) */
    uint64_t skips;  /* copies that skipped a gap of their leader's log (GAP) */
    uint64_t repairs, repairs_failed; /* damaged segments replaced from the leader; attempts
                                         that failed (tried again) */
    uint64_t damaged;                 /* replicas here whose log is isolated by a CRC failure */
    /* max-repairs-per-node: repairs running here now, the most at once
     * since start, damaged replicas waiting their turn; repair reads this
     * node answered busy (leader side) and busy answers it got (follower
     * side: the read asked again, the copy kept). */
    uint64_t repairs_running, repairs_running_peak, repairs_waiting;
    uint64_t repair_busy_served, repair_busy_asked;
    uint64_t max_lag_records, max_lag_bytes, max_lag_ms; /* over followers of led partitions */
    /* Moves (cluster/throttle.h). Fetches sent on node RPC's bulk
     * connection (of fetches_sent); bytes read for followers out of the ISR
     * (served under move-rate) and bytes received here while out of the
     * ISR; catch-up fetches held or answered short for want of move-rate's
     * tokens. */
    uint64_t fetches_sent_bulk;
    uint64_t move_bytes_sent, move_bytes_received;
    uint64_t throttle_waits;
    uint64_t moves_in_flight; /* partitions with a move under way (the metastore replica) */
    /* Moves this node's metastore replica saw finish since it started, and
     * their durations (start to end). */
    uint64_t moves_done, moves_aborted, moves_failed;
    uint64_t move_seconds_count;
    double move_seconds_sum;
} tn_replica_stats_t;

/* Make the manager (it does nothing until tn_replica_start). 0 and *out,
 * UV_ENOMEM, UV_EINVAL (no loop, meta or broker). */
int tn_replica_new(const tn_replica_opts_t *o, tn_replica_t **out);
/* Set the RPC endpoint once it exists (borrowed; outlives the manager). */
void tn_replica_set_rpc(tn_replica_t *rm, tn_rpc_t *rpc);
/* Register with the metastore (tn_meta_on_pstate) and start the timer.
 * 0 or an error. */
int tn_replica_start(tn_replica_t *rm);
/* Stop: answers parked fetches, cancels fetches in flight, closes the
 * follower plogs; cb(arg) once the memory is gone. */
void tn_replica_close(tn_replica_t *rm, void (*cb)(void *arg), void *arg);

/* The TN_OP_FETCH handler (a tn_rpc_handler_cb; arg is the manager).
 * Register it with TN_RPC_OP_EXEMPT: a fetch may park up to its wait. */
void tn_replica_on_fetch(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg);
/* The TN_OP_FLUSHED handler (a follower's flush reports: fetch.h has the
 * layout); arg is the manager. Loop thread. */
void tn_replica_on_flushed(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg);
/* The TN_OP_REPLICA_ERROR handler (a follower's append error, or its end,
 * for the reason of a stalled move: wire.h has the layout); arg is the
 * manager. Loop thread. */
void tn_replica_on_replica_error(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg);
/* The TN_OP_REPAIR handler (a damaged follower reads a range of this
 * leader's log; wire.h has the layout); arg is the manager. Loop thread. */
void tn_replica_on_repair(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg);

/* The placement answer for a replicated partition: true when this node
 * leads (topic, p) and the manager handed it to the engine (and closed
 * the log of its own it followed on, if any). For a
 * partition that is not replicated the manager has no say: *decided is
 * set false. */
bool tn_replica_local(tn_replica_t *rm, const char *topic, uint32_t p, bool *decided);

/* Whether this node takes a produce for (topic, p) now: 0 (then
 * *leader_epoch, may be NULL, is its epoch); TN_EREMOTE not the leader (or
 * not a replicated partition known here); TN_EFEWREPLICAS the committed
 * ISR is smaller than min_insync; TN_ENOTSERVING the leader's epoch-start
 * record is not under the hw yet. topic borrowed. */
int tn_replica_accepts(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t *leader_epoch);
/* Whether the engine may append a publish to (topic, p) now (the
 * broker's append check, queue.h: tn_append_check_fn): 0 for a partition
 * that is not replicated (no state in the metastore replica, no core
 * here, and its log pl, borrowed, has no epoch history) or that this node
 * leads, handed to the engine, gated and serving (tn_replica_accepts 0);
 * else the refusal: TN_ENOTSERVING (led here, its epoch not started yet;
 * or a log with an epoch history the metastore replica knows nothing of
 * yet: a restart before it caught up), TN_EFEWREPLICAS, or TN_EREMOTE
 * (replicated, not led here: never appended here, whatever the engine
 * holds). topic borrowed. */
int tn_replica_may_append(tn_replica_t *rm, const char *topic, uint32_t p, tn_plog_t *pl);
/* Whether damage found in this node's copy of (topic, p) (its log
 * isolated with TN_ECORRUPT) is repaired from the partition's leader while
 * the node runs ("Repair of a damaged replica" in docs/replication.md):
 * the partition is replicated and its damage is in the records of a
 * segment or in its epochs file, with a leader to copy from or one to come.
 * Such a copy is no failure of the node's storage for /ping and /readyz.
 * topic borrowed. Loop thread. */
bool tn_replica_mends(tn_replica_t *rm, const char *topic, uint32_t p);
/* Whether this node leads (topic, p) and serves it (deliveries, settles). */
bool tn_replica_serving(tn_replica_t *rm, const char *topic, uint32_t p);
/* Whether this node's core leads (topic, p) (serving or not yet). */
bool tn_replica_leads(tn_replica_t *rm, const char *topic, uint32_t p);
/* The members an ISR change this node's core proposed for (topic, p)
 * may still add (its maximal ISR less the committed one; none when it
 * does not lead p), written to out (room for TN_PSTATE_MAX_REPLICAS):
 * their number. For the settle waits (cluster/setrepl.h, pending). */
uint32_t tn_replica_pending(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t *out);
/* Whether (topic, p) is a replicated partition this node knows of. */
bool tn_replica_replicated(tn_replica_t *rm, const char *topic, uint32_t p);
/* Whether the manager holds its own copy (a follower's log, which the
 * engine does not hold) of a partition below nparts of topic: its files
 * are in the topic's directory here (the catalog stamps it, queue.h
 * tn_topic_keep_stamp). */
bool tn_replica_holds_own(tn_replica_t *rm, const char *topic, uint32_t nparts);

/* Told on the manager's loop when this node takes the lead of a
 * replicated partition (pl: the engine's log, gated, before the epoch's
 * start record is written) and when it stops leading it (pl NULL). The
 * router rebuilds and drops its PRODUCE window here (cluster/produce.h).
 * topic and pl are borrowed for the call. One hook; NULL: none. */
typedef void (*tn_replica_lead_cb)(void *arg, const char *topic, uint32_t p, tn_plog_t *pl);
void tn_replica_on_lead(tn_replica_t *rm, tn_replica_lead_cb cb, void *arg);

/* Each partition log the manager holds itself (a follower's own, which
 * the engine does not hold): cb(arg, topic, p, pl) on the manager's loop,
 * topic and pl borrowed for the call. The online backup copies these as
 * well as the engine's (api/backup.h), so a follower's copy is in it and
 * not only its leader's. */
typedef void (*tn_replica_log_cb)(void *arg, const char *topic, uint32_t p, tn_plog_t *pl);
void tn_replica_each_own_log(tn_replica_t *rm, tn_replica_log_cb cb, void *arg);
/* Each partition log the manager copies into that the engine does not
 * serve: a follower's own, and the engine's log it set aside when the
 * partition's lead went to another node. Called as above (/ping and
 * /readyz count their failures). */
void tn_replica_each_follower_log(tn_replica_t *rm, tn_replica_log_cb cb, void *arg);

void tn_replica_stats(tn_replica_t *rm, tn_replica_stats_t *out);
/* This node's replica of (topic, p): its hw and log end. 0, TN_ENOTFOUND
 * (not a local replica). */
int tn_replica_part_info(tn_replica_t *rm, const char *topic, uint32_t p, uint64_t *hw,
                         uint64_t *log_end);
/* On the leader of (topic, p): how many records node's copy lacks (this
 * log's end minus the end node last fetched at in this epoch), for a
 * move's progress. 0, or TN_ENOTFOUND (this node does not lead the
 * partition, or node is not a replica that fetched in this epoch). */
int tn_replica_peer_lag(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t node,
                        uint64_t *lag);
/* One member's append error as the leader of its partition holds it
 * (node, and tn_strerror's words in text): the type a PERRS reply carries
 * (cluster/wire.h), so the leader's answer goes on the wire as it is. */
typedef tn_wire_perr_t tn_replica_perr_t;
/* On the leader of (topic, p): the append errors its replicas and move
 * targets reported (TN_OP_REPLICA_ERROR) and still hold, into
 * out[0..TN_PSTATE_MAX_REPLICAS) in slot order; an error is over once the
 * member reports its appends succeed again, or its copy advanced past
 * where it stood when the error came. Returns how many (0: none, or this
 * node does not lead the partition). */
uint32_t tn_replica_part_errors(tn_replica_t *rm, const char *topic, uint32_t p,
                                tn_replica_perr_t *out);
/* On the leader of (topic, p): a move's progress for target node, in
 * bytes of this leader's log: *total, what it stores; *copied, what it
 * stores below the end node last fetched at in this epoch
 * (tn_plog_bytes_from: within an index interval). 0, or TN_ENOTFOUND (not
 * the leader, or node did not fetch in this epoch yet). */
int tn_replica_move_progress(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t node,
                             uint64_t *copied, uint64_t *total);

/* Replicated partitions whose copy here was marked dropped in this run
 * (the next start moves them to quarantine/: storage/store.h). */
uint64_t tn_replica_marked(const tn_replica_t *rm);

/* Whether this node's copy of partition p of topic is on its way to or
 * from quarantine/ ("quarantine marks" in replica.c): marked dropped
 * (the next start moves it, or a move while the node runs), given back
 * while its mark is being taken away, or its move under way. What is
 * written into it meanwhile may go with it, so a follower's channel logs
 * of the partition wait (cluster/setrepl.h, copy_moving). Loop thread. */
bool tn_replica_copy_moving(tn_replica_t *rm, const char *topic, uint32_t p);

/* Whether this node's copy of partition p of topic is open here (its own
 * log, or the engine's it follows on) and marked a replicated partition's
 * (storage/plog.h, tn_plog_is_replica: its `epochs` file is on disk). A
 * follower's channel logs of the partition take nothing before
 * (cluster/setrepl.h, copy_ready): channel state that reached a copy not
 * so marked made the engine skip the log forward at the next start, to
 * the end its channels refer to (queue/channel.c, check_lost_tail).
 * Loop thread. */
bool tn_replica_copy_ready(tn_replica_t *rm, const char *topic, uint32_t p);

#endif
