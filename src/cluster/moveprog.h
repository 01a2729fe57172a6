/* MOVE_PROGRESS over node RPC: a partition move's progress (bytes_copied,
 * bytes_total, lag_records) as the partition's leader sees it, read there
 * for GET /v1/cluster/moves on any node; the local read, the leader's
 * answer and the caller's call. The router (cluster/router.h,
 * tn_router_move_progress) decides what is read where.
 *
 * DESIGN: progress from the leader, on demand.
 *   1. Only the leader knows how far each follower's copy reaches (the
 *      offsets of its fetches) and its own log's size; the metastore holds
 *      the move, never its progress (no per-second writes there).
 *   2. A node listing moves reads the progress of a move here when it
 *      leads the partition (tn_moveprog_local); for the others it asks each
 *      partition's leader, as the metastore replica names it, one call per
 *      move (control lane; moves under way are few: max-moves-per-node),
 *      all in parallel, within TN_ROUTER_MOVEPROG_TIMEOUT_MS.
 *   3. The leader answers from memory at once: what it can tell (a bit per
 *      field), nothing when it does not lead the partition or no move is
 *      under way there (its replica may lag the caller's by a moment).
 * Failure modes: a leader that is down, unreachable, slow, or that no
 * longer leads leaves the move's progress unknown (null) in that answer;
 * nothing changes anywhere.
 *
 * Threads: the loop thread of the broker and the RPC endpoint. */
#ifndef TN_CLUSTER_MOVEPROG_H
#define TN_CLUSTER_MOVEPROG_H

#include "core/platform.h"

#include "cluster/replica.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "meta/partstate.h"

/* What this node can tell of the progress of the move under way in ps
 * (partition p of topic; borrowed), into out: lag_records 0 once every
 * target member is in the ISR (any node knows that), else the records the
 * farthest-behind target member lacks; bytes_total the leader's log size
 * and bytes_copied what the farthest-behind target holds of it (all of it
 * once every target is in sync): both from rm's view, so only where this
 * node leads the partition (rm NULL: the lag of a ready move only). */
void tn_moveprog_local(tn_replica_t *rm, const char *topic, uint32_t p, const tn_pstate_t *ps,
                       tn_wire_moveprog_reply_t *out);

typedef struct tn_moveprog_call_s tn_moveprog_call_t;
/* The end of a call: 0 with c->out; UV_EAGAIN the leader answered 503;
 * UV_EINVAL it refused the request (400); TN_EPROTO a reply that is none of
 * these; or the call's error (rpc.h: UV_ETIMEDOUT, TN_ECLOSED,
 * UV_ECONNREFUSED, UV_ECONNRESET, UV_EACCES, UV_ENOMEM). */
typedef void (*tn_moveprog_cb)(tn_moveprog_call_t *c, int status);

/* Caller-owned, in use from tn_moveprog_call until cb. */
struct tn_moveprog_call_s {
    void *data; /* for the caller */
    tn_wire_moveprog_reply_t out;
    /* Private. */
    tn_rpc_call_t *call;
    tn_moveprog_cb cb;
};

/* Ask peer_addr ("host:port", borrowed) for the progress of the move of
 * partition p of topic (borrowed for the call) within timeout_ms, into
 * c->out. 0: cb runs exactly once, later. Else cb never runs: the
 * encoder's UV_EINVAL, the call's UV_EINVAL, UV_ECONNREFUSED, TN_ECLOSED,
 * UV_ENOMEM. */
int tn_moveprog_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, uint32_t p,
                     uint64_t timeout_ms, tn_moveprog_call_t *c, tn_moveprog_cb cb);

#endif
