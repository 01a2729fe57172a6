/* PURGE over node RPC: a member removes a deleted topic from its engine
 * and disk and confirms it, so the node that took a topic delete answers
 * only once every live member has done so; the member's handler and the
 * caller's call. The router (cluster/router.h, tn_router_purge) sends it
 * to every live member.
 *
 * DESIGN: a confirmed topic delete (docs/cluster.md, "How a topic delete
 * is confirmed").
 *   1. A door's delete is committed by the metastore (forwarded to the
 *      leader from a follower). The door then asks the router to purge the
 *      topic, naming the deleted record's creation time.
 *   2. The router purges here through the local-purge hook and calls
 *      tn_purge_call on every other member whose record says alive, in
 *      parallel, each within TN_PURGE_CALL_MS (the wait below plus an
 *      execution allowance).
 *   3. A member's handler decodes the request exactly and runs the same
 *      local-purge hook: it waits (at most TN_PURGE_WAIT_MS) until its
 *      metastore replica no longer has that record (absent, or made again
 *      with another creation time), then deletes what its engine still has
 *      of the old topic (the catalog's deletion that follows the records,
 *      api/catalog.h, so the two paths never both delete), and answers 204
 *      once the files are gone; 503 when the replica did not show the
 *      deletion in time; 500 with the cause when the deletion failed.
 * Failure modes: a member that does not answer (stopped, partitioned)
 * leaves the door's answer at 500 naming it; the record is deleted
 * regardless, and that member deletes its files when its replica shows
 * the deletion (the catalog follows it), before it serves the topic
 * again. A call that times out does not stop a deletion under way there.
 *
 * Threads: the loop thread of the RPC endpoint. */
#ifndef TN_CLUSTER_PURGE_H
#define TN_CLUSTER_PURGE_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/srv.h"
#include "cluster/wire.h"

#include <stdint.h>

/* How long a member waits for its replica to show the deletion, and the
 * caller's budget for one member's answer (that wait plus 10 s to delete;
 * the seed's timeouts). */
#define TN_PURGE_WAIT_MS 5000
#define TN_PURGE_CALL_MS 15000

/* The end of a local purge: 0 (nothing of the old topic is left here);
 * UV_ETIMEDOUT (the replica still had the record after the wait);
 * TN_ECLOSED (shutting down); else the deletion's error. why is a
 * sentence (borrowed for the call; may be NULL for 0). */
typedef void (*tn_purge_done_cb)(void *arg, int status, const char *why);

/* The local side: purge topic (borrowed) made at created_at_ms here,
 * waiting at most wait_ms for the replica. 0: done runs exactly once, now
 * or later. Else done never runs (UV_ENOMEM, TN_ECLOSED). */
typedef int (*tn_purge_local_fn)(void *arg, const char *topic, int64_t created_at_ms,
                                 uint64_t wait_ms, tn_purge_done_cb done, void *done_arg);

/* --- the member side ------------------------------------------------------------ */

/* A PURGE server (cluster/srv.h; TN_OP_PURGE, exempt from the bounds: it
 * waits) with no hook yet: it answers 503 until one is set. 0 or
 * UV_ENOMEM. */
int tn_purge_srv_new(tn_srv_t **out);
/* Set s's local-purge hook (NULL: none; requests are answered 503). A
 * purge under way keeps the hook it started with. */
void tn_purge_srv_set_hook(tn_srv_t *s, tn_purge_local_fn fn, void *arg);

/* --- the caller side ------------------------------------------------------------- */

typedef struct tn_purge_call_s tn_purge_call_t;
/* The end of a call: 0 the member purged (204); UV_EAGAIN it answered
 * 503 (its replica did not show the deletion in time, not ready,
 * shutting down); UV_EIO 500 (its deletion failed); UV_EINVAL 400;
 * TN_EPROTO another answer; or the call's error (rpc.h: UV_ETIMEDOUT,
 * TN_ECLOSED, UV_ECONNREFUSED, UV_ECONNRESET, UV_EACCES, UV_ENOMEM).
 * c->error says it in a sentence. */
typedef void (*tn_purge_cb)(tn_purge_call_t *c, int status);

/* Caller-owned, in use from tn_purge_call until cb. */
struct tn_purge_call_s {
    void *data;           /* for the caller */
    uint16_t http_status; /* the member's answer; 0 when none came */
    char error[256];      /* the member's or the transport's sentence; "" on success */
    /* Private. */
    tn_rpc_call_t *call;
    tn_purge_cb cb;
};

/* Ask peer_addr ("host:port", borrowed) to purge topic made at
 * created_at_ms within timeout_ms. 0: cb runs exactly once, later. Else
 * cb never runs: the encoder's UV_EINVAL, the call's UV_EINVAL,
 * UV_ECONNREFUSED (dial backoff), TN_ECLOSED, UV_ENOMEM. */
int tn_purge_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, int64_t created_at_ms,
                  uint64_t timeout_ms, tn_purge_call_t *c, tn_purge_cb cb);

/* Decode a member's PURGE answer (status and body, borrowed) into c's
 * results; the status as tn_purge_cb gets it. For the call and the
 * tests. */
int tn_purge_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_purge_call_t *c);

#endif
