/* SETTLE over node RPC: receipt handles a client sent to one node,
 * settled on the node that owns their partitions (where the leases are);
 * the owner's handler and the caller's call. The router
 * (cluster/router.h, tn_router_settle) decides which handles go where.
 *
 * DESIGN: a forwarded settle.
 *   1. The router groups the handles of one ack or ack batch by the owner
 *      of their partition and calls tn_settle_call on each owner (ack
 *      lane, 2 s) with up to TN_SETTLE_MAX handles.
 *   2. The owner's handler decodes the request exactly, and for each
 *      handle asks the ownership hook whether its partition is here (421
 *      for that handle when not), then the local-settle hook (the consume
 *      registry, api/consume.h): 410 no live lease, 503 the acked-ahead
 *      set is full, 500 the channel log failed; else settled in memory,
 *      and the handle waits for the channel log record that covers it.
 *   3. It answers 200 with a status per handle (wire.h, TN_OP_SETTLE) once
 *      every handle's wait ended: 204 only after the fdatasync of the
 *      channel WAL record covering it (the group commit makes the handles
 *      of one call, and of every call in the same loop pass, share one
 *      fdatasync), 500 when that write failed.
 * Failure modes: a call that times out may still have settled its
 * handles (durably or not); a retried ack of a settled lease answers 410,
 * as it does on a lone node. Before ternd installed the local-settle hook
 * (startup) every request is answered 503.
 *
 * Threads: the loop thread of the RPC endpoint. */
#ifndef TN_CLUSTER_SETTLE_H
#define TN_CLUSTER_SETTLE_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/srv.h"
#include "cluster/wire.h"
#include "queue/queue.h"

#include <stdbool.h>
#include <stdint.h>

/* The local side of settling: settle one handle's lease on (topic,
 * channel) here. how is a tn_wire_settle_how_t. 0: settled in memory, and
 * cb(sync, status) runs exactly once (possibly before this returns) when
 * what it wrote is durable (status 0: after the channel log's fdatasync;
 * an extend writes nothing and ends at once) or could not be (the log's
 * error); sync is borrowed until then. Else cb never runs: TN_ENOTFOUND
 * (no such live lease), UV_ENOBUFS (the acked-ahead cap is reached), or
 * the channel log's sticky error or UV_ENOMEM (the lease stays as it
 * was). */
typedef int (*tn_settle_local_fn)(void *arg, const char *topic, const char *channel,
                                  uint32_t partition, uint64_t offset, uint32_t nonce, uint8_t how,
                                  int64_t visibility_ms, tn_chan_sync_t *sync, tn_chan_sync_cb cb);
/* Whether partition p of topic is this node's to settle. */
typedef bool (*tn_settle_owns_fn)(void *arg, const char *topic, uint32_t p);

/* --- the owner side --------------------------------------------------------------- */

/* A SETTLE server (cluster/srv.h; TN_OP_SETTLE, messaging bound) with no
 * hooks yet: it answers 503 until both are set. 0 or UV_ENOMEM. */
int tn_settle_srv_new(tn_srv_t **out);
/* Set s's hooks (NULL: none; requests answer 503). */
void tn_settle_srv_set_hooks(tn_srv_t *s, tn_settle_owns_fn owns, void *owns_arg,
                             tn_settle_local_fn local, void *local_arg);

/* --- the caller side ------------------------------------------------------------- */

typedef struct tn_settle_call_s tn_settle_call_t;
/* The end of a call: 0 with c->status[0..n) (204, 410, 421, 500, 503 per
 * handle); UV_EAGAIN the owner answered 503 for the whole request (not
 * ready, shutting down); UV_EINVAL it refused it (400); TN_EPROTO a reply
 * that is none of these; or the call's error (rpc.h: UV_ETIMEDOUT,
 * TN_ECLOSED, UV_ECONNREFUSED, UV_ECONNRESET, UV_EACCES, UV_ENOMEM). */
typedef void (*tn_settle_cb)(tn_settle_call_t *c, int status);

/* Caller-owned, in use from tn_settle_call until cb. */
struct tn_settle_call_s {
    void *data; /* for the caller */
    uint32_t n;
    uint16_t status[TN_SETTLE_MAX]; /* results, in cb */
    /* Private. */
    tn_rpc_call_t *call;
    tn_settle_cb cb;
};

/* Settle h[0..n) (copied) on peer_addr ("host:port", borrowed) within
 * timeout_ms. 0: cb runs exactly once, later. Else cb never runs: the
 * encoder's UV_EINVAL (wire.h), the call's UV_EINVAL, UV_ECONNREFUSED
 * (dial backoff), TN_ECLOSED, UV_ENOMEM. */
int tn_settle_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, const char *channel,
                   uint8_t how, int64_t visibility_ms, const tn_wire_handle_t *h, uint32_t n,
                   uint64_t timeout_ms, tn_settle_call_t *c, tn_settle_cb cb);

#endif
