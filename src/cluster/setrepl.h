/* Channel-state replication: the channel log records (FIN, REQ, PAUSE,
 * EMPTY, TIMEOUTS) of a replicated partition, pushed by its leader to the
 * followers of its committed ISR (TN_OP_SETTLE_REPL), which write them to
 * their own channel logs; a settle is answered only once enough replicas
 * have its record. setrepl.c holds the DESIGN comment.
 *
 * Three parts: the waiting rule (tn_setrepl_commit, pure: which records
 * may count as settled given the followers' acks and the ISR), the leader
 * side (the engine's tn_chan_repl_t hooks: durable records in, confirmed
 * sequence numbers out through tn_broker_chan_repl_done) and the follower
 * side (the TN_OP_SETTLE_REPL handler and its table of open channel logs).
 *
 * Threads: the loop thread of the RPC endpoint and the engine, except
 * tn_setrepl_commit (pure, any thread). */
#ifndef TN_CLUSTER_SETREPL_H
#define TN_CLUSTER_SETREPL_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "meta/meta.h"
#include "meta/partstate.h"
#include "queue/queue.h"
#include "storage/store.h"

#include <stdbool.h>
#include <stdint.h>

/* --- the waiting rule (pure) ------------------------------------------------------ */

/* What one follower has confirmed of a record stream: every record up to
 * acked is in its channel log and synced. */
typedef struct {
    uint32_t node;
    uint64_t acked;
} tn_setrepl_ack_t;

/* The highest record number at or below local (what the leader's own log
 * has synced) that every member of isr[0..nisr) other than self has acked
 * (acks[0..nacks): a member without an entry has acked nothing), so every
 * record up to it is on every disk of the committed ISR, at least
 * min_insync of them: whichever ISR member is elected next has it (the
 * record log's hw follows the same rule, cluster/repl.c). *starved (may be NULL) is set when the
 * ISR cannot confirm anything whatever the acks: self is not in it, or it has fewer than min_insync
 * members (the waits then fail with TN_EFEWREPLICAS rather than hang). min_insync 0 counts as 1.
 * Members of acks outside the ISR never count. */
uint64_t tn_setrepl_commit(uint64_t local, const tn_setrepl_ack_t *acks, uint32_t nacks,
                           const tn_pstate_member_t *isr, uint32_t nisr, uint32_t self,
                           uint32_t min_insync, bool *starved);
/* tn_setrepl_commit, where extra[0..nextra) (borrowed) are replicas outside
 * the ISR that count like its members: followers whose channel state
 * caught up, which the leader may be adding to the ISR right now (once in,
 * they may be elected, so what the ISR confirms must be on them too). They
 * never make up for a short ISR (starved looks at isr alone). */
uint64_t tn_setrepl_commit_with(uint64_t local, const tn_setrepl_ack_t *acks, uint32_t nacks,
                                const tn_pstate_member_t *isr, uint32_t nisr, const uint32_t *extra,
                                uint32_t nextra, uint32_t self, uint32_t min_insync, bool *starved);

/* The members outside the committed ISR whose acks the waits count
 * (tn_setrepl_commit_with's extra), written to out (room for
 * TN_PSTATE_MAX_REPLICAS): every one that may be elected before the
 * settle is on it otherwise. The ELR (elr[0..nelr): beside an ISR at
 * min_insync only when min_insync was lowered under it, until the
 * leader's same-ISR CAS empties it; cluster/repl.c holds the hw the same
 * way), the followers counted as caught up (counted, the ISR may be
 * taking them in) and the members an ISR change in flight may add
 * (pending: the core's proposal), each once, none of isr. A proposed
 * member counts whether or not it is caught up or answering: until the
 * CAS is decided it may join the ISR and be elected. Returns their
 * number. */
uint32_t tn_setrepl_extra(const tn_pstate_member_t *isr, uint32_t nisr,
                          const tn_pstate_member_t *elr, uint32_t nelr, const uint32_t *counted,
                          uint32_t ncounted, const uint32_t *pending, uint32_t npending,
                          uint32_t *out);

/* Records a leader keeps for followers that lack them, at most (beyond
 * those still waiting for the ISR, which are always kept). */
#define TN_SETREPL_KEEP_MAX 65536

/* The first record a leader keeps of a stream holding [low, high]: it
 * drops what every ISR follower has (min_acked: the lowest ack among
 * them, high when there is none) and what is decided (done: confirmed or
 * failed), never a record above done, and drops decided records some
 * follower still lacks once more than keep_max are kept (that follower
 * then misses them: a follower stuck on one stream must not grow the
 * leader's memory without bound). Returns the new low (low..high + 1). */
uint64_t tn_setrepl_trim(uint64_t low, uint64_t high, uint64_t done, uint64_t min_acked,
                         uint64_t keep_max);

/* --- the shell ------------------------------------------------------------------- */

typedef struct tn_setrepl_s tn_setrepl_t;

/* The metastore replica's state of partition p of topic copied into *out:
 * 0, or TN_ENOTFOUND when it is not replicated (factor 1) or unknown. */
typedef int (*tn_setrepl_pstate_fn)(void *arg, const char *topic, uint32_t p, tn_pstate_t *out);

typedef struct {
    uv_loop_t *loop;
    uint32_t node_id;    /* this node's member id */
    tn_rpc_t *rpc;       /* borrowed: the calls to followers (NULL: set later) */
    tn_meta_t *meta;     /* borrowed: the members' API addresses */
    tn_store_t *store;   /* borrowed: where a follower writes its channel logs */
    tn_broker_t *broker; /* borrowed: the leader's engine */
    tn_setrepl_pstate_fn pstate;
    void *pstate_arg;
    /* This node's data directory incarnation: a CHAN_SNAP or SETTLE_REPL
     * meant for another one is refused (409). 0: not checked. */
    uint64_t incarnation;
    uint64_t call_timeout_ms; /* one SETTLE_REPL call; 0: 5000 */
    /* A member's node RPC address ("host:port", borrowed until the next
     * call; NULL: unknown). NULL: the metastore's member records. */
    const char *(*addr)(void *arg, uint32_t node);
    void *addr_arg;
    /* The members an ISR change this node's core proposed for partition
     * p of topic may still add (its maximal ISR less the committed one:
     * cluster/repl.h, maybe), written to out (room for
     * TN_PSTATE_MAX_REPLICAS), their number returned. The waits count
     * them like ISR members: once the CAS applies they may be elected.
     * NULL: none known (only the followers counted here hold waits). */
    uint32_t (*pending)(void *arg, const char *topic, uint32_t p, uint32_t *out);
    void *pending_arg;
    /* Whether this node's copy of partition p of topic is on its way to
     * or from quarantine/ (cluster/replica.h, tn_replica_copy_moving): a
     * follower writes no channel state into it meanwhile (503: what it
     * wrote could go with the copy, answered 204). NULL: never. */
    bool (*copy_moving)(void *arg, const char *topic, uint32_t p);
    void *copy_moving_arg;
    /* Whether this node's replica manager holds its copy of partition p
     * of topic open and marked a replicated partition's (its `epochs`
     * file: cluster/replica.h, tn_replica_copy_ready): a follower writes
     * no channel state before (503, retried), since a copy unmarked at
     * the next start whose channels refer past its log's end is skipped
     * forward to that end (queue/channel.c, check_lost_tail), a hole in
     * it for good. NULL: never asked (taken as open). */
    bool (*copy_ready)(void *arg, const char *topic, uint32_t p);
    void *copy_ready_arg;
    /* Decided records kept for followers that lack them, at most
     * (tn_setrepl_trim's keep_max); 0: TN_SETREPL_KEEP_MAX. */
    uint64_t keep_max;
    /* A counted follower whose call failed stops counting at the first
     * check this long after, when the ISR gate has not asked about it
     * meanwhile (setrepl.c, peer_t.uncount_at); 0: 1000 ms. */
    uint64_t uncount_ms;
} tn_setrepl_opts_t;

/* A replicator (opts copied). It installs itself as the broker's
 * tn_chan_repl_t hooks. 0 or UV_ENOMEM. */
int tn_setrepl_new(const tn_setrepl_opts_t *opts, tn_setrepl_t **out);
/* Set the RPC endpoint once it exists (borrowed; outlives s's calls:
 * close s after it). Until then nothing is pushed (waits hold). */
void tn_setrepl_set_rpc(tn_setrepl_t *s, tn_rpc_t *rpc);
/* The handler for the RPC table (TN_OP_SETTLE_REPL, messaging bound),
 * arg s: close s only after the RPC endpoint closed. */
#define TN_SETREPL_HANDLERS 2
void tn_setrepl_handlers(tn_setrepl_t *s, tn_rpc_handler_t *out, size_t *n);

/* The metastore changed partition p of topic (ps borrowed, NULL: gone).
 * Waiting settles are checked again against the new ISR; when this node
 * no longer leads p they fail with TN_EFENCED (retryable); channel logs
 * followed here for p close when this node is no longer a follower of
 * it. Also run by a periodic check, so a missed call only delays. */
void tn_setrepl_pstate_changed(tn_setrepl_t *s, const char *topic, uint32_t p,
                               const tn_pstate_t *ps);

/* Promotion: close the channel logs this node holds as a follower of
 * partition p of topic, then cb(arg) (on the loop thread, possibly before
 * this returns), after which the engine may open them. Until this node
 * follows p again, SETTLE_REPL for p is answered 421. */
typedef void (*tn_setrepl_release_cb)(void *arg);
void tn_setrepl_release(tn_setrepl_t *s, const char *topic, uint32_t p, tn_setrepl_release_cb cb,
                        void *arg);

/* Leader: whether follower node, with data directory incarnation, holds
 * the state of every durable channel of partition p of topic as this
 * node has it, up to what the committed ISR confirmed: each channel's
 * stream has a snapshot installed there for that incarnation (CHAN_SNAP)
 * and its records since. A channel the follower lacks anything of is
 * started on the way (its stream made, a snapshot sent): asking again
 * later tells when it is done. false too when this node does not lead p
 * in the engine, or a channel of the topic is still being made. The
 * replica manager proposes node into the ISR only once this is true, on
 * the last answer: from a yes to the next no, node counts for the waits
 * of every stream of p made meanwhile too (a channel made since). */
bool tn_setrepl_catch_up(tn_setrepl_t *s, const char *topic, uint32_t p, uint32_t node,
                         uint64_t incarnation);

/* Counters for /stats and metrics. */
typedef struct {
    uint64_t pushed_records;      /* records sent to followers (first sends) */
    uint64_t calls;               /* SETTLE_REPL calls made */
    uint64_t call_failures;       /* of those, failed or refused */
    uint64_t served_records;      /* records written here as a follower */
    uint64_t fenced;              /* requests refused here for a stale epoch */
    uint64_t snapshots_sent;      /* CHAN_SNAP calls made (leader) */
    uint64_t snapshots_installed; /* CHAN_SNAP states installed here (follower) */
    /* SETTLE_REPL and CHAN_SNAP refused here (503): the engine's channel
     * is not the one of the leader's stamp (follower) */
    uint64_t other_channel;
    /* SETTLE_REPL refused here (409): meant for another data directory
     * incarnation than this node's (follower) */
    uint64_t other_incarnation;
    /* SETTLE_REPL calls carrying the follower's incarnation that it
     * refused with 400, after which the stream sends it the older
     * encoding, unchecked (leader): an older build, or a malformed call
     * a newer one refused (a bug, which then goes unchecked: the notice
     * line quotes the follower's answer) */
    uint64_t inc_refused;
    uint32_t streams;  /* leader streams open */
    uint32_t followed; /* follower channel logs open */
} tn_setrepl_stats_t;
void tn_setrepl_stats(const tn_setrepl_t *s, tn_setrepl_stats_t *out);

/* Unhook from the broker, fail waiting settles with TN_ECLOSED, close the
 * follower channel logs, and free s; cb(arg) then (loop thread). */
void tn_setrepl_close(tn_setrepl_t *s, void (*cb)(void *arg), void *arg);

#endif
