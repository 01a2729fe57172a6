/* PERRS over node RPC: the append errors a replicated partition's leader
 * holds for its replicas and move targets (TN_OP_REPLICA_ERROR's reports,
 * cluster/replica.h tn_replica_part_errors), read there for GET
 * /v1/topics/{t} on any node; the local read, the owner's answer and the
 * caller's call. The router (cluster/router.h, tn_router_pstats) asks
 * them beside a partition's numbers (cluster/pstats.h). A file of its own
 * rather than a second concern in pstats.c: PSTATS reads the engine's
 * logs, this reads the replica manager's memory.
 *
 * DESIGN: a partition's replica errors from its leader.
 *   1. Only a partition's leader hears its members' append errors (they
 *      report to it); the metastore never holds them (no writes per
 *      error). Every other field of a partition in /v1 is the same
 *      whichever node answers, so this one is read where it is held.
 *   2. The router reads the partitions this node owns here
 *      (tn_perrs_local); for each owner it calls for numbers, when at
 *      least one of those partitions is replicated (more than one
 *      replica), it sends one PERRS call with the same partitions as the
 *      PSTATS call, in parallel with it, within the same timeout.
 *   3. The owner answers at once from memory: per partition, in the
 *      request's order, the errors it holds (none where it does not lead
 *      the partition, has no replica manager, or holds none).
 * Failure modes: a call that fails (an older node answers 400 for an
 * unknown opcode, a timeout, a closed connection) leaves those partitions
 * without errors; their numbers are not affected. The leader's view may
 * lag a member's report by a moment; nothing changes anywhere.
 *
 * Threads: the loop thread of the broker and the RPC endpoint (the same
 * loop). */
#ifndef TN_CLUSTER_PERRS_H
#define TN_CLUSTER_PERRS_H

#include "core/platform.h"

#include "cluster/replica.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"

/* The append errors of partition p of topic (borrowed) that rm (NULL: no
 * replica manager, none) holds as the partition's leader, into
 * out[0..TN_WIRE_PERRS_MAX). Returns how many (0: none, or this node does
 * not lead p). */
uint32_t tn_perrs_local(tn_replica_t *rm, const char *topic, uint32_t p, tn_replica_perr_t *out);

/* --- the owner side --------------------------------------------------------------- */

/* Answer the PERRS request req (payload, len: its fields; borrowed) from
 * rm (NULL: no replica manager, every partition without errors), before
 * returning: 200 with the errors of each partition asked, 400 malformed
 * or an invalid topic name, 503 out of memory. The router's handler
 * (tn_router_perrs_handler) calls it with its replica manager. */
void tn_perrs_answer(tn_replica_t *rm, tn_rpc_req_t *req, const uint8_t *payload, size_t len);

/* --- the caller side ------------------------------------------------------------- */

typedef struct tn_perrs_call_s tn_perrs_call_t;
/* The end of a call: 0 with c->counts[0..n) and c->errs[0..c->nerrs);
 * UV_EAGAIN the owner answered 503; UV_EINVAL it refused the request (400:
 * also an older node that does not know the opcode); TN_EPROTO a reply
 * that is none of these; UV_ENOMEM no room for the errors here; or the
 * call's error (rpc.h: UV_ETIMEDOUT, TN_ECLOSED, UV_ECONNREFUSED,
 * UV_ECONNRESET, UV_EACCES, UV_ENOMEM). */
typedef void (*tn_perrs_cb)(tn_perrs_call_t *c, int status);

/* Caller-owned, in use from tn_perrs_call until cb. */
struct tn_perrs_call_s {
    void *data;            /* for the caller */
    const uint32_t *parts; /* the partitions asked for (the caller's, borrowed until cb) */
    uint32_t n;
    uint8_t *counts; /* the caller's room for n counts, filled in cb (status 0) */
    /* Out, in cb with status 0: the errors of parts[0], then parts[1] ...
     * (counts[i] each); tn_malloc'd, the caller's to tn_free from cb on
     * (NULL when there are none, or status is not 0). */
    tn_replica_perr_t *errs;
    size_t nerrs;
    /* Private. */
    tn_rpc_call_t *call;
    tn_perrs_cb cb;
};

/* Ask peer_addr ("host:port", borrowed) for the errors of parts[0..n)
 * (borrowed until cb) of topic within timeout_ms, into counts[0..n)
 * (caller's, until cb) and c->errs. 0: cb runs exactly once, later. Else
 * cb never runs: the encoder's UV_EINVAL (wire.h), the call's UV_EINVAL,
 * UV_ECONNREFUSED (dial backoff), TN_ECLOSED, UV_ENOMEM. */
int tn_perrs_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, const uint32_t *parts,
                  uint32_t n, uint8_t *counts, uint64_t timeout_ms, tn_perrs_call_t *c,
                  tn_perrs_cb cb);

#endif
