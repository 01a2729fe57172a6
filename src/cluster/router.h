/* The router: what every door calls to publish, instead of the engine.
 *
 * DESIGN: produce anywhere.
 *   1. A door prepares a tn_pub_t as for the engine and calls
 *      tn_router_publish. The engine takes it when the partition lives
 *      here: pinned (by key or an explicit partition) to a local
 *      partition, or unpinned while the topic has local partitions (round
 *      robin over those). One fsync, at the owner: the common case never
 *      crosses the network.
 *   2. Otherwise the engine says TN_EREMOTE and the router accepts the
 *      publish into this node's ingress log (storage/ilog.h): for the
 *      pinned partition, or, unpinned, the next partition (round robin)
 *      whose owner is alive (any partition when none is). The publish
 *      completes with 0 once the ingress log's group commit made it
 *      durable; p->partition is the partition it was accepted for and
 *      p->remote is set (no offset is known yet).
 *   3. The dispatcher (cluster/dispatch.h), kicked after each accepted
 *      record, moves it to its owner later.
 * A lone node never takes step 2 (every partition is local). Without an
 * ingress log TN_EREMOTE reaches the door, as it did before routing.
 *
 * Threads: the loop thread. */
#ifndef TN_CLUSTER_ROUTER_H
#define TN_CLUSTER_ROUTER_H

#include "core/platform.h"

#include "meta/meta.h"
#include "queue/queue.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "storage/ilog.h"
#include "cluster/moveprog.h"
#include "cluster/perrs.h"
#include "cluster/pstats.h"
#include "cluster/rpc.h"
#include "cluster/purge.h"
#include "cluster/rcheck.h"
#include "cluster/settle.h"

typedef struct tn_router_s tn_router_t;
typedef struct tn_replica_s tn_replica_t;

typedef struct {
    tn_broker_t *broker;
    tn_meta_t *meta;
    tn_ilog_t *ilog; /* NULL: no ingress log (a lone node) */
    /* Told after each record the ingress log took (the dispatcher's
     * kick); may be NULL. */
    void (*accepted)(void *arg);
    void *accepted_arg;
} tn_router_opts_t;

/* The engine publishes on its own behalf (dead letters) through the
 * router from here on (tn_broker_set_publisher), and asks it before each
 * append (tn_broker_set_append_check: topics being created, replicated
 * partitions); a caller that frees the router before the engine takes
 * both off first. */
int tn_router_new(const tn_router_opts_t *o, tn_router_t **out);
/* After the ingress log closed (its appends in flight have answered),
 * and after the engine closed, or once tn_broker_set_publisher(b, NULL,
 * NULL) took the engine's publishes off r. */
void tn_router_free(tn_router_t *r);
/* The replica manager (cluster/replica.h; borrowed, NULL: none): a publish
 * to a replicated partition led here is checked with tn_replica_accepts
 * first (TN_EFEWREPLICAS, TN_ENOTSERVING reach the door at once), and
 * settles and consumes of a replicated partition whose leader does not
 * serve yet answer a retryable error. */
void tn_router_set_replica(tn_router_t *r, tn_replica_t *rm);
/* The TN_OP_PRODUCE handler (cluster/produce.h; TN_PRODUCE_HANDLERS of
 * them) for the RPC table. The handler checks tn_replica_accepts once a
 * replica manager is set; without one the engine decides (421 when the
 * partition is not open here). */
void tn_router_produce_handlers(tn_router_t *r, tn_rpc_handler_t *out, size_t *n);
/* This node became leader of (topic, p) (the replica manager's
 * promotion): rebuild the partition's PRODUCE window from the PRODUCER
 * records of raw, its log tail as tn_plog_read_raw reads it (borrowed),
 * so a retry of a batch the old leader stored is answered, not stored
 * again. 0 or UV_ENOMEM. */
int tn_router_rebuild_window(tn_router_t *r, const char *topic, uint32_t p, const void *raw,
                             size_t len);
/* This node no longer leads (topic, p): its window is dropped. */
void tn_router_resign_window(tn_router_t *r, const char *topic, uint32_t p);
/* Set the accepted hook (tn_router_opts_t) once its target exists. */
void tn_router_on_accepted(tn_router_t *r, void (*cb)(void *arg), void *arg);

/* Publish p as tn_broker_publish does (same arguments, same statuses),
 * except that a publish to a topic being created through /v1 (its record
 * carries a creation mark) is held until the creation's outcome, at most
 * TN_ROUTER_CREATE_HOLD_MS, then refused with TN_ECREATING
 * (cluster/hold.h); and
 * except that a publish for partitions another node owns is accepted into
 * the ingress log (step 2 above), or, for a replicated topic (factor >
 * 1), forwarded to the partition's leader with TN_OP_PRODUCE
 * (cluster/forward.h): then it completes with 0 and p->first_offset once
 * the leader's hw covers it (p->remote false), TN_EFEWREPLICAS at once,
 * or after TN_FORWARD_TIMEOUT_MS the refusal that lasted (forward.h); an
 * unpinned one goes to the next partition (round robin) whose leader is
 * live. */
int tn_router_publish(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p,
                      int64_t deliver_at_ms, tn_pub_cb cb);

typedef struct {
    uint64_t accepted;         /* publishes taken into the ingress log */
    uint64_t accepted_records; /* their messages */
    uint64_t failed;           /* ingress log appends that failed */
    uint64_t settle_calls;     /* SETTLE calls made to other nodes */
    uint64_t settle_handles;   /* the receipt handles they carried */
    uint64_t settle_queued;    /* handles that waited for a busy owner's call slot */
    uint64_t publishing;       /* publishes taken by tn_router_publish, not answered yet */
    uint64_t forwarded;        /* publishes forwarded to a replicated partition's leader */
    uint64_t forward_failed;   /* of those, answered with an error */
    uint64_t forward_retries;  /* PRODUCE attempts after a forward's first */
} tn_router_stats_t;
void tn_router_stats(const tn_router_t *r, tn_router_stats_t *out);

/* --- settling receipt handles anywhere -------------------------------------------------
 *
 * DESIGN: an ack, extend or nack on any node.
 *   1. A door hands the router a batch of receipt handles of one (topic,
 *      channel). A handle is settled here, through the local-settle hook
 *      (the consume registry, which ternd installs), when its partition is
 *      this node's: always on a lone node; in a cluster when the
 *      metastore replica names this node its owner, or the partition is
 *      beyond the topic's count (no lease anywhere: 410). A handle
 *      settled here has its result once the channel log record covering
 *      it is durable (queue.h DESIGN: settling): 204 only after that
 *      fdatasync, 500 when the write failed.
 *   2. The others queue per owner (tn_meta_state_owner; the owner's
 *      api_addr from its member record). An owner has at most
 *      TN_ROUTER_SETTLE_INFLIGHT SETTLE calls (cluster/settle.h) in
 *      flight; while it has a slot free, what is queued goes at once (an
 *      idle owner's ack waits for nothing). Handles that arrive while
 *      every slot is busy wait, and the next call to free a slot takes
 *      the oldest with up to TN_ROUTER_SETTLE_COALESCE - 1 more of the
 *      same (topic, channel, how, visibility) in one SETTLE: under load
 *      single acks coalesce into batches. A handle's budget,
 *      TN_ROUTER_SETTLE_TIMEOUT_MS, starts when it is queued and covers
 *      its wait for a slot (the call gets what is left of the oldest's);
 *      one whose budget ran out while it waited answers 502 as an
 *      unreachable owner does. At most TN_ROUTER_SETTLE_QUEUE_MAX handles
 *      wait per owner; beyond, 503.
 *   3. Every handle gets a status and a sentence: 204 (durable, here or on
 *      its owner, which replies only after its own fdatasync); 410 stale;
 *      500 the channel log could not record it; 503 the acked-ahead set
 *      is full; 503 "partition owner is down; retry
 *      later" (its member record says dead, or the partition is not
 *      placed); 502 "partition owner unreachable" (no address, the call
 *      failed or timed out, or the budget ran out in the queue); 503 when
 *      the owner did not own it after all or could not settle it now, or
 *      this node is shutting down (queued handles answer at once when
 *      node RPC goes). One callback gives them all, whichever calls
 *      carried them.
 * Why 4 calls per owner: a call's time is the round trip plus the owner's
 * group commit of the channel log (the handles of one call, and of the
 * calls that arrive in the same loop pass, share one fdatasync); 4 keep
 * the path busy across that (4 x 64 = 256 handles per round trip per owner once
 * coalescing starts) while taking at most 4 of the owner's messaging
 * slots (max(64, 4 x cores), shared with every peer), so a burst of acks
 * from one node never crowds out another's. */

#define TN_ROUTER_SETTLE_TIMEOUT_MS 2000
#define TN_ROUTER_SETTLE_INFLIGHT   4    /* SETTLE calls in flight per owner */
#define TN_ROUTER_SETTLE_COALESCE   64   /* handles per SETTLE call at most */
#define TN_ROUTER_SETTLE_QUEUE_MAX  8192 /* handles waiting per owner at most */

/* One handle of a settle: the handle in, the result out. */
typedef struct {
    uint32_t partition;
    uint64_t offset;
    uint32_t nonce;
    uint16_t status;   /* out: 204, 410, 500, 502 or 503 */
    const char *error; /* out: NULL for 204, else a static sentence */
} tn_router_settle_item_t;

typedef void (*tn_router_settle_cb)(void *arg, tn_router_settle_item_t *items, uint32_t n);

/* Set the cluster side once node RPC is open (NULL again before it
 * closes): rpc, this node's member id, and whether this is a cluster.
 * Without it (or on a lone node) every receipt handle is settled here
 * (a handle of another node's partition answers 502) and every consume
 * is local. */
void tn_router_set_rpc(tn_router_t *r, tn_rpc_t *rpc, uint64_t node_id, bool cluster);
/* Install the local-settle hook (NULL: none yet; local handles answer
 * 503). */
void tn_router_on_settle(tn_router_t *r, tn_settle_local_fn fn, void *arg);
/* The ownership rule of step 1, as the SETTLE handler's hook (arg: the
 * router). */
bool tn_router_settle_owns(void *router, const char *topic, uint32_t p);
/* Settle items[0..n) (caller-owned until cb; any past TN_SETTLE_MAX are
 * answered 400) on (topic, channel): how a
 * tn_wire_settle_how_t, visibility_ms the extension. cb runs exactly
 * once: later from the loop, or before this returns when no handle had
 * anything to wait for (stale, extends, memory-only channels, or out of
 * memory). */
void tn_router_settle(tn_router_t *r, const char *topic, const char *channel, uint8_t how,
                      int64_t visibility_ms, tn_router_settle_item_t *items, uint32_t n,
                      tn_router_settle_cb cb, void *arg);
/* Append the Prometheus text of tern_cluster_settle_calls_total,
 * tern_cluster_settle_handles_total and tern_cluster_settle_coalesced_total,
 * and of produce through a non-leader (tern_cluster_produce_forwards_total,
 * tern_cluster_produce_forward_retries_total,
 * tern_cluster_produce_served_total) to out. */
void tn_router_settle_metrics_write(const tn_router_t *r, tn_buf_t *out);

/* --- consume anywhere ------------------------------------------------------------ */

/* DESIGN: a consume for partitions another node owns (docs/cluster.md,
 * "How a consume is routed"). The /v1 door (api/v1/forward.c) asks the
 * router where a pinned or replayed partition lives and which other
 * nodes own partitions of a topic, and has the router forward a consume
 * to an owner (TN_OP_CONSUME over node RPC); the owner's handler runs it
 * on its own lanes. The router never forwards without node RPC (a lone
 * node: every partition is local). */

/* Node RPC for forwarded consumes: tn_router_set_rpc. */

/* Where partition of topic lives, by the metastore's placement: 0 here
 * (or no node RPC, or no record of the topic); TN_EREMOTE on *owner,
 * alive; UV_EHOSTDOWN on *owner, marked dead; UV_EAGAIN not placed yet
 * (the lanes answer that as they always have). */
int tn_router_consume_where(tn_router_t *r, const char *topic, uint32_t partition, uint64_t *owner);
/* The alive members other than this node that own a partition of topic,
 * in ascending id order, at most max of them into out; the count. 0 with
 * no node RPC. */
size_t tn_router_consume_owners(tn_router_t *r, const char *topic, uint64_t *out, size_t max);

typedef struct tn_router_consume_s tn_router_consume_t;
/* A forwarded consume ended: status 0 with c->http_status and c->body
 * (the owner's /v1 answer, relayed as is), or the call's error (rpc.h:
 * UV_ETIMEDOUT, TN_ECLOSED for a cancel, UV_ECONNREFUSED, ...) with
 * c->error. */
typedef void (*tn_router_consume_cb)(tn_router_consume_t *c, int status);
/* Caller-owned, in use from tn_router_consume_call until cb; body is
 * the caller's to tn_buf_fini after cb. */
struct tn_router_consume_s {
    void *data;
    uint64_t owner;
    uint16_t http_status;
    tn_buf_t body;
    char error[256];
    /* Private. */
    tn_rpc_call_t *call;
    tn_router_consume_cb cb;
};
/* Forward req to member owner (its API address is its RPC address)
 * within timeout_ms. 0: cb runs once, later. Else cb never runs:
 * UV_EHOSTUNREACH (no such member or no address), UV_EINVAL (req's
 * names), UV_ECONNREFUSED (the owner is in its dial backoff), TN_ECLOSED,
 * UV_ENOMEM. */
int tn_router_consume_call(tn_router_t *r, uint64_t owner, const tn_wire_consume_t *req,
                           uint64_t timeout_ms, tn_router_consume_t *c, tn_router_consume_cb cb);
/* Abandon c before its cb ran (the owner nacks what it had reserved for
 * it): cb runs with TN_ECLOSED, from the loop. */
void tn_router_consume_cancel(tn_router_consume_t *c);

/* --- partition stats from their owners -------------------------------------------
 *
 * DESIGN: GET /v1/topics/{t} on any node (docs/cluster.md, "How a topic's
 * stats are gathered").
 *   1. The door hands the router the partitions to show. A partition is
 *      read here (cluster/pstats.h, tn_pstats_local) on a lone node, and
 *      in a cluster when the metastore replica names this node its owner
 *      or names none (not placed: nothing to read anywhere but here).
 *   2. The others are grouped per owner: an owner whose member record
 *      says dead is not called ("owner is down"); one with no address, or
 *      no node RPC here, is "owner unreachable"; every other owner gets
 *      one PSTATS call for all its partitions, in parallel, within
 *      TN_ROUTER_PSTATS_TIMEOUT_MS (2 s, the budget of a forwarded
 *      settle, so one slow owner delays the answer by at most that).
 *   3. A partition gets the numbers from wherever they came, or a
 *      sentence saying why none came: "owner unreachable" (the call
 *      failed or timed out), "owner changed; retry" (421: placement moved
 *      under us), and the owner's other per-partition answers. A partition
 *      read here without numbers (its log is not open here yet) has
 *      neither numbers nor an error, as before routing.
 *   4. Replica errors (cluster/perrs.h) come the same way: read here for
 *      the partitions read here, and from an owner called in step 2 by a
 *      PERRS call beside its PSTATS call (same partitions, same timeout)
 *      when at least one of them has more than one replica. A PERRS call
 *      that fails leaves those partitions without errors, never without
 *      numbers. One callback gives them all, once every call answered;
 *      nothing is changed anywhere. */

#define TN_ROUTER_PSTATS_TIMEOUT_MS 2000

/* One partition of a gather: the index in, the rest out. */
typedef struct {
    uint32_t partition;
    uint64_t owner;     /* out: the metastore's owner; 0 not placed (or no metastore) */
    bool have;          /* out: st holds the numbers */
    const char *error;  /* out: NULL, or why the owner gave none (a static sentence) */
    tn_wire_pstat_t st; /* out: when have */
    /* Out: the append errors the partition's leader holds for its members
     * (cluster/perrs.h), errs[0..nerrs) in slot order; the router's,
     * borrowed until cb returns. None when the partition has one replica,
     * its owner holds none, or the owner could not tell (an older node, a
     * failed call): the numbers do not depend on them. */
    uint32_t nerrs;
    const tn_replica_perr_t *errs;
} tn_router_pstat_t;

typedef void (*tn_router_pstats_cb)(void *arg, tn_router_pstat_t *items, uint32_t n);

/* Gather the numbers and replica errors of items[0..n) (caller-owned
 * until cb) of topic (borrowed for the call). cb runs exactly once: before
 * this returns when every partition was read here (always on a lone node:
 * no RPC), else later from the loop, within about
 * TN_ROUTER_PSTATS_TIMEOUT_MS. */
void tn_router_pstats(tn_router_t *r, const char *topic, tn_router_pstat_t *items, uint32_t n,
                      tn_router_pstats_cb cb, void *arg);
/* The TN_OP_PERRS handler for the RPC table (the owner's answer from its
 * replica manager, cluster/perrs.h tn_perrs_answer). */
void tn_router_perrs_handler(tn_router_t *r, tn_rpc_handler_t *out);

/* --- partition moves' progress from their leaders ---------------------------------
 *
 * DESIGN: GET /v1/cluster/moves on any node (cluster/moveprog.h has the
 * why). The door hands the router the moves under way; each move's
 * progress is read here (tn_moveprog_local) when this node leads the
 * partition (or none does), else asked of the partition's leader (one MOVE_PROGRESS call per move,
 * in parallel, within TN_ROUTER_MOVEPROG_TIMEOUT_MS); a leader that is
 * down, unknown or unreachable leaves what this node knew, with a
 * sentence in error. One callback gives them all. */

#define TN_ROUTER_MOVEPROG_TIMEOUT_MS 2000

/* One move of a gather: the partition and its state in, the rest out. */
typedef struct {
    char topic[TN_NAME_MAX + 1];
    uint32_t partition;
    tn_pstate_t ps;               /* the move under way (a copy) */
    tn_wire_moveprog_reply_t out; /* out: what is known */
    const char *error;            /* out: NULL, or why the leader told nothing (static) */
    tn_moveprog_call_t call;      /* private */
    void *op;                     /* private */
} tn_router_moveprog_t;

typedef void (*tn_router_moveprog_cb)(void *arg, tn_router_moveprog_t *items, uint32_t n);

/* Gather the progress of items[0..n) (caller-owned until cb). cb runs
 * exactly once: before this returns when nothing had to be asked, else
 * later from the loop, within about TN_ROUTER_MOVEPROG_TIMEOUT_MS. */
void tn_router_move_progress(tn_router_t *r, tn_router_moveprog_t *items, uint32_t n,
                             tn_router_moveprog_cb cb, void *arg);
/* The TN_OP_MOVE_PROGRESS handler for the RPC table (the leader's
 * answer, from its metastore replica's move and its replica manager). */
void tn_router_moveprog_handler(tn_router_t *r, tn_rpc_handler_t *out);

/* --- purging a deleted topic on every member -------------------------------------
 *
 * DESIGN: a topic delete confirmed by every member (cluster/purge.h).
 *   1. A door whose topic delete the metastore committed (DELETE
 *      /v1/topics/{t}, nsqd's /topic/delete) calls tn_router_purge with
 *      the deleted record's creation time.
 *   2. This node purges through the local-purge hook (the catalog, which
 *      ternd installs; without one, the engine deletes the topic at once),
 *      and every other member whose record says alive gets a PURGE call
 *      (TN_PURGE_CALL_MS each), all at once. Members marked dead are not
 *      asked: they delete the topic when their replica shows the deletion
 *      (the catalog follows the records).
 *   3. cb runs once every answer is in: 0 when every one confirmed, else
 *      the first failure's status and a sentence naming every node that
 *      did not confirm and why. */

/* The end of a fan-out: 0, or an error with error ("not purged on node
 * N: why; node M: why", borrowed for the call). */
typedef void (*tn_router_purge_cb)(void *arg, int status, const char *error);

/* Install the local-purge hook (NULL: none; the engine deletes at once). */
void tn_router_on_purge(tn_router_t *r, tn_purge_local_fn fn, void *arg);
/* Purge topic (copied) made at created_at_ms on every live member. 0: cb
 * runs exactly once, possibly before this returns. UV_ENOMEM: cb never
 * runs. */
int tn_router_purge(tn_router_t *r, const char *topic, int64_t created_at_ms, tn_router_purge_cb cb,
                    void *arg);

/* --- checking a remote from every member ----------------------------------------
 *
 * DESIGN: a remote check (cluster/rcheck.h; docs/remotes.md, "Checks").
 *   1. A door (POST /v1/remotes/{name}/check, an attach of a remote
 *      child) calls tn_router_rcheck with the remote's name and id and a
 *      topic or "".
 *   2. This node checks through the local hook (ternd installs the /v1
 *      remotes module's; without one this node's row says so), and every
 *      other member whose record says alive gets a REMOTE_CHECK call
 *      (TN_RCHECK_CALL_MS each), all at once. Members marked dead are not
 *      asked: they have no row.
 *   3. cb runs once every answer is in, with one row per member asked,
 *      sorted by node id. A member that did not answer, or answered
 *      without a result, has member_error set, its class unreachable and
 *      the reason in error (our words: the transport's or the member's). */

typedef struct {
    uint64_t node;
    tn_rcheck_result_t res; /* cls is 1 (unreachable) when member_error */
    bool member_error;      /* no result came from that member */
    char error[256];        /* why not (member_error only) */
} tn_router_rcheck_row_t;

/* rows (n of them, sorted by node) borrowed for the call. */
typedef void (*tn_router_rcheck_cb)(void *arg, const tn_router_rcheck_row_t *rows, uint32_t n);

/* Install the local hook (NULL: none). */
void tn_router_on_rcheck(tn_router_t *r, tn_rcheck_local_fn fn, void *arg);
/* Check remote (name and id; the strings copied) with topic ("": none) on
 * every live member. 0: cb runs exactly once, possibly before this
 * returns (when no check could start). UV_ENOMEM: cb never runs. */
int tn_router_rcheck(tn_router_t *r, const char *remote, uint64_t remote_id, const char *topic,
                     tn_router_rcheck_cb cb, void *arg);

#endif
