/* The accepting node's side of a produce through a non-leader: a publish
 * the router took for a replicated partition (factor > 1) that this node
 * does not lead, forwarded to the leader with TN_OP_PRODUCE
 * (cluster/produce.h) and retried until the leader answers or the
 * publish's deadline passes.
 *
 * DESIGN: forwarding one publish (docs/replication.md, "Produce through a
 * non-leader").
 *   1. The router hands over the door's tn_pub_t (its records, the pinned
 *      or picked partition) once the engine said TN_EREMOTE and the
 *      metastore replica says the topic is replicated. The forward encodes
 *      the request once, with a seq from this node's counter
 *      (tn_forward_set_node: the counter starts at the wall clock in ms
 *      shifted left 20 bits, plus the low bits of the incarnation, so a
 *      restarted node never reuses a seq a leader's window may still hold
 *      for its id, and a node whose disk was wiped differs from its old
 *      self even when both start in the same millisecond).
 *   2. An attempt goes to the leader the metastore replica shows now, with
 *      the leader epoch it shows (0 when none is known): over node RPC to
 *      another node, through tn_produce_local when the metastore names
 *      this node (a leader whose engine had not taken the partition yet),
 *      within min(what is left, TN_FORWARD_ATTEMPT_MS).
 *   3. 0: the door's publish completes with 0, p->partition and
 *      p->first_offset set (the leader answered after its hw covered the
 *      batch). TN_EFEWREPLICAS: at once, no retry. TN_EREMOTE (421),
 *      TN_EFENCED (409), UV_EAGAIN (503: not serving yet), no leader, or a
 *      lost answer (timeout, reset, refused dial): again with the SAME
 *      encoded request (only its epoch field rewritten), at once when the
 *      metastore (or the 421) names another leader than the one that
 *      refused, else after a backoff (50 ms doubling to 1 s). Anything
 *      else (404, 416, 507, 400, a malformed answer) ends it with that
 *      error.
 *   4. At the deadline (TN_FORWARD_TIMEOUT_MS from the accept, the
 *      dispatcher's COMMIT budget) the publish fails with the refusal that
 *      lasted, as the doors' retryable replication refusal
 *      (cluster/replerr.h: 503 / E_PUB_FAILED): TN_EFENCED, or
 *      TN_ENOTSERVING when the leader was not serving, not the leader, or
 *      none was known; UV_ETIMEDOUT only when answers never came. The last
 *      refusal is logged (rate-limited). The batch may or may not be
 *      stored (at-least-once; a client retry is a new batch).
 * Invariant: one forward sends one seq; every attempt carries the same
 * records; the door's callback runs exactly once.
 *
 * Threads: the loop thread. */
#ifndef TN_CLUSTER_FORWARD_H
#define TN_CLUSTER_FORWARD_H

#include "core/platform.h"

#include "cluster/produce.h"
#include "cluster/rpc.h"
#include "meta/meta.h"
#include "queue/queue.h"

#include <uv.h>

#define TN_FORWARD_TIMEOUT_MS 30000 /* a forwarded publish's whole budget */
#define TN_FORWARD_ATTEMPT_MS 5000  /* one attempt's (cluster-rpc-timeout's default) */

typedef struct tn_forward_s tn_forward_t;

typedef struct {
    uv_loop_t *loop;
    tn_meta_t *meta;              /* borrowed */
    tn_produce_server_t *produce; /* this node's leader side, for local attempts */
    uint64_t timeout_ms;          /* 0: TN_FORWARD_TIMEOUT_MS */
    uint64_t attempt_ms;          /* 0: TN_FORWARD_ATTEMPT_MS */
} tn_forward_opts_t;

typedef struct {
    uint64_t forwarded; /* publishes forwarded */
    uint64_t records;   /* their messages */
    uint64_t ok;        /* answered 0 */
    uint64_t failed;    /* answered an error */
    uint64_t retries;   /* attempts after the first */
    uint64_t inflight;
} tn_forward_stats_t;

int tn_forward_new(const tn_forward_opts_t *o, tn_forward_t **out);
/* Node RPC and this node's id (NULL: none; forwards in flight end with
 * TN_ECLOSED). Seeds the seq counter on the first call with an id. */
void tn_forward_set_rpc(tn_forward_t *f, tn_rpc_t *rpc, uint64_t node_id);
/* Whether topic (borrowed) is replicated (factor > 1) by the metastore
 * replica; false without one. */
bool tn_forward_replicated(const tn_forward_t *f, const char *topic);
/* Whether partition p of topic (borrowed) is replicated: its topic is, or
 * it has a state of its own (a factor-1 partition a move gave one:
 * meta/state.h tn_meta_state_move_from), so its leader takes its produces
 * through this forward, never the ingress log. */
bool tn_forward_part_replicated(const tn_forward_t *f, const char *topic, uint32_t p);
/* The partition for an unpinned publish to topic of nparts partitions:
 * the next (round robin) whose leader is live, else the next at all. */
uint32_t tn_forward_pick(tn_forward_t *f, const char *topic, uint32_t nparts);
/* Forward p (its records borrowed until cb) to the leader of partition
 * of topic (copied). 0: cb(p, status) runs exactly once, later, never
 * inside this call. Else cb never runs: UV_ENOMEM, TN_ECLOSED (no node
 * RPC), UV_EINVAL (a record the request cannot carry), TN_ETOOBIG (over
 * the frame cap). */
int tn_forward_publish(tn_forward_t *f, const char *topic, uint32_t partition, tn_pub_t *p,
                       tn_pub_cb cb);
void tn_forward_stats(const tn_forward_t *f, tn_forward_stats_t *out);
/* Free f: forwards in flight end with TN_ECLOSED first; the memory goes
 * once their timers have closed (the loop must run on). */
void tn_forward_free(tn_forward_t *f);

#endif
