/* The data plane of node RPC: COMMIT, a batch of produces another node
 * accepted (its ingress log) committed to a partition this node owns, as
 * one append; the owner's handler and the caller's call.
 *
 * DESIGN: a commit.
 *   1. The dispatcher of the node that accepted the records cuts a batch
 *      for one (topic, partition) under the frame cap
 *      (tn_commit_encoded_size) and calls tn_commit_call on the owner
 *      (produce lane; the dispatcher gives 30 s).
 *   2. The owner's handler decodes the request exactly (bodies up to the
 *      store's max body), looks the topic up without creating it (a topic
 *      being created or grown is waited for), checks that the partition is
 *      in range and local, copies the records into one publish pinned to
 *      that partition, each with its own delivery time, and publishes it
 *      (tn_broker_publish: one group-committed append).
 *   3. It answers 200 {"first_offset":N} from the publish's completion,
 *      at the partition's durability boundary, and never before.
 *   4. The caller decodes the answer into a status (0 with first_offset,
 *      TN_EREMOTE with the owner named, ...) for the dispatcher, which
 *      advances its checkpoint only past records answered 0.
 * Failure modes: a caller that cancels (or times out, or loses its
 * connection) while the append is under way does not undo it: the append
 * completes, its answer is dropped, and the dispatcher sends the batch
 * again, so the records are in the log twice (at-least-once). A request
 * cancelled before its append started (while it queued, or while the topic
 * was being created) is answered 503 and appends nothing.
 * Invariant: a 200 leaves the owner only after every record of the batch
 * is durable in its partition log, and the batch is one append (dense
 * offsets from first_offset, nothing of another publish in between).
 *
 * Threads: the loop thread of the broker and the RPC endpoint (the same
 * loop). */
#ifndef TN_CLUSTER_DATAPLANE_H
#define TN_CLUSTER_DATAPLANE_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/hist.h"
#include "queue/queue.h"

#include <uv.h>

typedef struct tn_dataplane_s tn_dataplane_t;

/* --- the owner side --------------------------------------------------------------- */

/* The data plane over broker b (borrowed: it outlives the data plane). 0
 * and *out, or UV_ENOMEM. */
int tn_dataplane_new(uv_loop_t *loop, tn_broker_t *b, tn_dataplane_t **out);
/* The handlers for the RPC table: COMMIT under the commit bound
 * (TN_RPC_OP_COMMIT). Written to out (room for TN_DATAPLANE_HANDLERS);
 * *n set. Their arg is dp: close the RPC endpoint (which waits for every
 * handler to answer) before tn_dataplane_free. */
#define TN_DATAPLANE_HANDLERS 1
void tn_dataplane_handlers(tn_dataplane_t *dp, tn_rpc_handler_t *out, size_t *n);

typedef struct {
    uint64_t commits;      /* answered 200 */
    uint64_t records;      /* in those */
    uint64_t refused;      /* answered 4xx */
    uint64_t failed;       /* answered 5xx */
    uint64_t late_replies; /* committed after the caller had gone (a retry will duplicate) */
    uint64_t inflight;     /* handlers not yet answered */
} tn_dataplane_stats_t;
void tn_dataplane_stats(const tn_dataplane_t *dp, tn_dataplane_stats_t *out);
/* Append the Prometheus text of tern_cluster_commits_total{outcome} and
 * tern_cluster_commit_age_seconds (from the accept of a batch's oldest
 * record on the node that took it to durable here; wall clocks of two
 * nodes) to out. 0 or UV_ENOMEM. */
int tn_dataplane_metrics_write(const tn_dataplane_t *dp, tn_buf_t *out);
/* Free dp once the RPC endpoint serving its handlers has closed
 * (tn_rpc_close waits for every handler to answer, so none runs then).
 * Freed before that, dp stays until its running handlers have answered,
 * answering 503 to requests that arrive meanwhile; a request arriving
 * after that would find it gone. */
void tn_dataplane_free(tn_dataplane_t *dp);

/* --- the caller side ------------------------------------------------------------- */

typedef struct tn_commit_call_s tn_commit_call_t;
/* The end of a call: 0, every record is durable in the owner's log from
 * c->first_offset on; TN_EREMOTE, the peer does not own the partition
 * (c->owner: the member it names, 0 unknown); TN_ENOTFOUND, no such topic
 * there; UV_ERANGE, no such partition; TN_EDISKHIGH, the owner's disk is
 * above its high watermark; UV_EAGAIN, the owner could not take it now
 * (503: storage error, shutting down, cancelled before it ran);
 * UV_EINVAL, the owner refused the request (400); TN_EPROTO, a reply
 * that is not one of these; or the call's error (rpc.h: UV_ETIMEDOUT,
 * TN_ECLOSED for a cancel, UV_ECONNREFUSED, UV_EACCES, UV_ECONNRESET,
 * UV_ENOMEM). c->error says it in a sentence. */
typedef void (*tn_commit_cb)(tn_commit_call_t *c, int status);

/* Caller-owned, in use from tn_commit_call until cb. */
struct tn_commit_call_s {
    void *data; /* for the caller */
    /* Results, in cb. */
    uint64_t first_offset;
    uint64_t owner;
    uint16_t http_status; /* the owner's answer; 0 when none came */
    char error[256];      /* the owner's or the transport's sentence; "" on success */
    /* Private. */
    tn_rpc_call_t *call;
    tn_commit_cb cb;
};

/* Commit recs[0..n) (borrowed for the call: the request is encoded, then
 * copied by the RPC) to partition of topic on peer_addr ("host:port",
 * borrowed) within timeout_ms (0: the RPC's reply timeout). 0: cb runs
 * exactly once, later, never inside this call. Else cb never runs:
 * UV_EINVAL (topic empty or over 255 bytes, n 0, a key over 65535 bytes,
 * a negative time, a bad address), TN_ETOOBIG (the request is over
 * TN_WIRE_MAX_PAYLOAD: cut the batch with tn_commit_encoded_size),
 * UV_ECONNREFUSED (the peer is in its dial backoff), TN_ECLOSED,
 * UV_ENOMEM. */
int tn_commit_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, uint32_t partition,
                   const tn_commit_rec_t *recs, uint32_t n, uint64_t timeout_ms,
                   tn_commit_call_t *c, tn_commit_cb cb);
/* Abandon c before its cb ran: cb runs with TN_ECLOSED (from the loop).
 * A commit the owner had started still completes there. */
void tn_commit_call_cancel(tn_commit_call_t *c);

/* Decode an owner's COMMIT reply (status and body, borrowed) into c's
 * results; the status as tn_commit_cb gets it. For the call and the
 * fuzz target. */
int tn_commit_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_commit_call_t *c);

#endif
