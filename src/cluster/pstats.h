/* PSTATS over node RPC: the numbers of a topic's partitions (segments,
 * offsets, bytes), read on the node whose log holds them; the owner's
 * handler, the caller's call, and the local read both share. The router
 * (cluster/router.h, tn_router_pstats) decides which partitions are read
 * where.
 *
 * DESIGN: partition stats from their owners.
 *   1. GET /v1/topics/{t} on any node hands the router the partitions to
 *      show. Those this node owns (all of them on a lone node) are read
 *      here with tn_pstats_local; the others are grouped per owner and
 *      each group is one tn_pstats_call (control lane, 2 s).
 *   2. The owner's handler decodes the request exactly and answers every
 *      index at once from its engine, as tn_pstats_local reads it: 200
 *      with the log's numbers, or a status saying why not (404 no such
 *      topic, 416 no such partition, 421 not this node's, 503 the topic is
 *      being created or grown).
 *   3. The caller decodes the reply against the indexes it asked for, in
 *      their order.
 * Failure modes: a read is a snapshot of counters that move; two reads of
 * one partition through two nodes agree once produces have stopped. A
 * call that fails leaves its partitions without numbers (the door says
 * why per partition); nothing is changed anywhere.
 *
 * Threads: the loop thread of the broker and the RPC endpoint (the same
 * loop). */
#ifndef TN_CLUSTER_PSTATS_H
#define TN_CLUSTER_PSTATS_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/srv.h"
#include "cluster/wire.h"
#include "queue/queue.h"

/* The numbers of partition p of topic (borrowed) in broker b's engine,
 * into out (out->partition set to p): its status, 200 with the numbers, or
 * 404 (no such topic, or one being deleted), 416 (p beyond the topic's
 * partitions), 421 (the partition's log is on another node), 503 (the
 * topic is being created or grown: nothing to read yet). */
uint16_t tn_pstats_local(tn_broker_t *b, const char *topic, uint32_t p, tn_wire_pstat_t *out);

/* --- the owner side --------------------------------------------------------------- */

/* The PSTATS server (cluster/srv.h; TN_OP_PSTATS, messaging bound, no
 * hooks) over broker b (borrowed: it outlives the server). Its handler
 * answers before it returns. 0 and *out, or UV_ENOMEM. */
int tn_pstats_srv_new(tn_broker_t *b, tn_srv_t **out);

/* --- the caller side ------------------------------------------------------------- */

typedef struct tn_pstats_call_s tn_pstats_call_t;
/* The end of a call: 0 with c->out[0..n) (a status per partition, the
 * numbers where it is 200); UV_EAGAIN the owner answered 503 for the
 * whole request (out of memory there, or queued past its caller); UV_EINVAL it refused it (400);
 * TN_EPROTO a reply that is none of these; or the call's error (rpc.h:
 * UV_ETIMEDOUT, TN_ECLOSED, UV_ECONNREFUSED, UV_ECONNRESET, UV_EACCES,
 * UV_ENOMEM). */
typedef void (*tn_pstats_cb)(tn_pstats_call_t *c, int status);

/* Caller-owned, in use from tn_pstats_call until cb. */
struct tn_pstats_call_s {
    void *data;            /* for the caller */
    const uint32_t *parts; /* the partitions asked for (the caller's, borrowed until cb) */
    uint32_t n;
    tn_wire_pstat_t *out; /* the caller's room for n results, filled in cb */
    /* Private. */
    tn_rpc_call_t *call;
    tn_pstats_cb cb;
};

/* Ask peer_addr ("host:port", borrowed) for the numbers of parts[0..n)
 * (borrowed until cb) of topic within timeout_ms, into out[0..n)
 * (caller's, until cb). 0: cb runs exactly once, later. Else cb never
 * runs: the encoder's UV_EINVAL (wire.h), the call's UV_EINVAL,
 * UV_ECONNREFUSED (dial backoff), TN_ECLOSED, UV_ENOMEM. */
int tn_pstats_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, const uint32_t *parts,
                   uint32_t n, tn_wire_pstat_t *out, uint64_t timeout_ms, tn_pstats_call_t *c,
                   tn_pstats_cb cb);

#endif
