/* The cluster's control plane on node RPC: the metastore operations a
 * node serves its peers (a proposal on the leader, a join, the leader's
 * confirmed index, this node's status), the metastore's forward hook that
 * carries a follower's proposals to the leader, and the join loop of a
 * node added to a running cluster.
 *
 * DESIGN: a metadata write made on a follower.
 *   1. A door proposes (tn_meta_propose); the metastore sees it is not the
 *      leader and calls the forward hook (tn_control_forward) with the
 *      encoded command and the leader's API address from its member
 *      record.
 *   2. The hook sends META_PROPOSE_AT to that address over node RPC (the
 *      control lane). The leader's handler proposes the bytes as they are
 *      (tn_meta_propose_encoded) and answers 200 with the state machine's
 *      answer and the entry's log index once the entry is applied there.
 *      A leader of an older build answers 400 "unsupported rpc operation"
 *      (it does not know the opcode): the hook sends the same bytes as
 *      META_PROPOSE, whose answer has no index, and keeps sending
 *      META_PROPOSE to that leader for PLAIN_PROPOSE_MS (60 s).
 *   3. The follower's metastore hands that answer (and the index: its
 *      replica waits to apply it, meta.h) to the door. A leader
 *      that is no longer one answers 421; the metastore sends the command
 *      again to the leader it learns of, within the proposal's deadline.
 *      A call that failed in transport is not sent again (it may have been
 *      applied): the door gets the error.
 *
 * DESIGN: a join (--join, no Raft state yet).
 *   1. Every join_retry_ms (while no JOIN is in flight) the node sends
 *      JOIN (id, Raft address, API address) to every join address at
 *      once, until one answers 200 (the leader takes a repeated JOIN of
 *      the same node as success).
 *   2. A follower passes the JOIN on to the leader and answers with the
 *      leader's reply; when it cannot (no leader known, or the JOIN came
 *      from a member, i.e. was passed on already) it answers 421 with the
 *      leader's API address, and the loop asks that address next, at once.
 *   3. The leader adds the node (a spare, then a voter once it caught up:
 *      tn_meta_join) and answers 200. The node is ready once its replica
 *      is caught up (tn_meta_caught_up), as any other.
 *
 * Threads: the loop thread. */
#ifndef TN_CLUSTER_CONTROL_H
#define TN_CLUSTER_CONTROL_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "meta/meta.h"

#include <uv.h>

typedef struct tn_control_s tn_control_t;

typedef struct {
    uint64_t node_id;
    const char *raft_addr;   /* this node's Raft address; copied */
    const char *api_addr;    /* its advertised API address; copied */
    const char *const *join; /* API addresses to ask for admission; copied; NULL when njoin = 0 */
    size_t njoin;
    uint64_t join_retry_ms;      /* one sweep of the join list; 0 = 2000 */
    uint64_t forward_timeout_ms; /* a forwarded proposal's reply budget; 0 = 10000 */
} tn_control_opts_t;

/* Make the control plane (no metastore or RPC yet: they are opened with
 * its hook and handlers, then attached). 0 or UV_ENOMEM/UV_EINVAL. */
int tn_control_new(uv_loop_t *loop, const tn_control_opts_t *o, tn_control_t **out);
/* The handlers tern's RPC server registers for the control ops; *n set.
 * Borrowed: valid while c lives. */
const tn_rpc_handler_t *tn_control_handlers(tn_control_t *c, size_t *n);
/* The metastore's forward hook (tn_meta_opts_t.forward; arg = c). */
int tn_control_forward(void *arg, uint64_t leader_id, const char *leader_api_addr, const void *cmd,
                       size_t len, tn_meta_forward_done done, void *done_arg);
/* Attach the opened metastore and RPC endpoint (borrowed; they outlive c's
 * use of them: detach by tn_control_close first) and start the join loop
 * when there are join addresses. */
void tn_control_start(tn_control_t *c, tn_meta_t *meta, tn_rpc_t *rpc);
/* Whether the join loop has been admitted (true when there is none). */
bool tn_control_admitted(const tn_control_t *c);
/* Stop: the join loop ends (its calls in flight are cancelled),
 * forwarded proposals in flight are cancelled (their done gets
 * TN_ECLOSED, from the loop), handlers still waiting for the metastore
 * answer 503 at once (the metastore's answers are dropped when they come;
 * c does not wait for them). A handler whose caller cancelled, or whose
 * stream ended (the RPC endpoint closing), is answered 503 the same way.
 * cb(arg) once everything is released; c is freed before cb. A
 * metastore still taking proposals calls the forward hook with c (a
 * follower's member registration): stop it (tn_meta_stop) or close it
 * before c is freed. */
void tn_control_close(tn_control_t *c, void (*cb)(void *arg), void *arg);

#endif
