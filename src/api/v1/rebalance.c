/* Rebalancing the members (admins only; docs/cluster.md "Rebalancing the
 * members"): replicas and preferred leaders of replicated partitions
 * spread so that every alive, non-draining member holds the same number
 * within one, moving as few replicas as there can be (the planner's
 * rebalance rule, meta/placement.h), driven by the metastore leader
 * (meta/rebalance.h).
 *
 * DESIGN: POST /v1/cluster/rebalance (no body: 413 for one)
 *   1. A write (the cross-site guard, 415), admins only (401/403), a
 *      caught-up metastore replica (503).
 *   2. A rebalance already wanted in the replicated state: 409, saying
 *      since when and where to watch it.
 *   3. The plan over this node's replica of the state (the one the leader
 *      will make, unless the state moves meanwhile): nothing to change is
 *      200 {"running": false, "moves": 0, ...}; nothing is proposed.
 *   4. Otherwise CLUSTER_REBALANCE wanted (only if none is) goes to the
 *      metastore with a new random id; applied, 202 with the id and the
 *      plan: "moves" (replicas to copy), "reorders" (lists whose order
 *      alone changes: preferred leaders, no data copied),
 *      "replica_spread" and "leader_spread" (the most minus the fewest
 *      replicas, and preferred leaderships, over the members once done);
 *      UV_EBUSY (another one got there first) 409; no leader within the
 *      proposal's budget 503.
 * GET /v1/cluster/rebalance: whether one is running (its id, reason,
 *   since_ms), the moves under way (any), the plan left as this node's
 *   replica sees it, and each alive member's replicas and preferred
 *   leaderships, counting a moving partition with its target.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/rebalance.h"

#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "meta/rebalance.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define REBAL_RUNNING                                                                              \
    "a rebalance is already running (GET /v1/cluster/rebalance shows it, GET "                     \
    "/v1/cluster/moves its moves)"

typedef struct {
    tn_meta_req_t mreq;
    tn_http_request_t *r; /* NULL once the client left */
    uint64_t id;
    tn_place_plan_t plan; /* owned */
} rebal_t;

static const char *reason_name(uint8_t reason)
{
    return reason == TN_REBAL_JOIN ? "join" : "api";
}

static void plan_json(tn_buf_t *b, const tn_place_plan_t *plan)
{
    tn__v1_appendf(b,
                   "\"moves\":%" PRIu32 ",\"reorders\":%" PRIu32 ",\"replica_spread\":%" PRIu32
                   ",\"leader_spread\":%" PRIu32,
                   plan->moves, plan->reorders, plan->replica_spread, plan->leader_spread);
}

/* The plan over this node's replica of the state into plan: 0, or an
 * answer was sent. */
static int plan_now(tn_v1_t *v, tn_http_request_t *r, tn_meta_rebal_in_t *in, tn_place_plan_t *plan)
{
    if (tn_meta_rebal_in_init(in, tn_meta_state(v->meta)) != 0) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return UV_ENOMEM;
    }
    char err[160];
    int rc = tn_meta_rebal_plan(in, plan, err, sizeof(err));
    if (rc != 0) {
        tn_meta_rebal_in_fini(in);
        TN_LOG(TN_LOG_WARN, "rebalance: planning refused: %s", err);
        tn__v1_error(r, rc == UV_ENOMEM ? 503 : 500,
                     rc == UV_ENOMEM ? "out of memory" : "the placement could not be planned",
                     rc == UV_ENOMEM ? "Retry-After: 1\r\n" : NULL);
    }
    return rc;
}

static void rebal_cancel(tn_http_request_t *r)
{
    rebal_t *q = r->data;
    q->r = NULL;
}

static void on_proposed(tn_meta_req_t *req, int status)
{
    rebal_t *q = req->data;
    tn_http_request_t *r = q->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        if (status == 0) {
            tn_buf_t b;
            tn_buf_init(&b);
            tn__v1_appendf(&b, "{\"id\":\"%016" PRIx64 "\",\"running\":true,", q->id);
            plan_json(&b, &q->plan);
            tn_buf_append(&b, "}", 1);
            tn__v1_respond_buf(r, 202, &b);
        } else if (status == UV_EBUSY) {
            tn__v1_error(r, 409, REBAL_RUNNING, NULL);
        } else {
            tn__v1_meta_error(r, status);
        }
    }
    tn_place_plan_fini(&q->plan);
    tn_free(q);
}

static void on_rebalance(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r) || !tn__v1_caught_up(v, r, on_rebalance))
        return;
    if (tn_meta_state(v->meta)->rebal.wanted) {
        tn__v1_error(r, 409, REBAL_RUNNING, NULL);
        return;
    }
    rebal_t *q = tn_calloc(1, sizeof(*q));
    if (q == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    tn_place_plan_init(&q->plan);
    tn_meta_rebal_in_t in;
    if (plan_now(v, r, &in, &q->plan) != 0) {
        tn_place_plan_fini(&q->plan);
        tn_free(q);
        return;
    }
    tn_meta_rebal_in_fini(&in);
    if (q->plan.nchanges == 0) {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_buf_append(&b, "{\"running\":false,", 17);
        plan_json(&b, &q->plan);
        tn_buf_append(&b, "}", 1);
        tn__v1_respond_buf(r, 200, &b);
        tn_place_plan_fini(&q->plan);
        tn_free(q);
        return;
    }
    if (getrandom(&q->id, sizeof(q->id), 0) != (ssize_t)sizeof(q->id) || q->id == 0) {
        tn_place_plan_fini(&q->plan);
        tn_free(q);
        tn__v1_error(r, 503, "out of randomness for a rebalance id", "Retry-After: 1\r\n");
        return;
    }
    q->r = r;
    q->mreq.data = q;
    r->data = q;
    r->on_cancel = rebal_cancel;
    int rc = tn_meta_propose_rebalance(v->meta, &q->mreq, true, TN_REBAL_API, q->id, on_proposed);
    if (rc != 0) {
        r->on_cancel = NULL;
        tn_place_plan_fini(&q->plan);
        tn_free(q);
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
        return;
    }
    TN_LOG(TN_LOG_NOTICE,
           "audit: %s asks for a rebalance %016" PRIx64 ": %" PRIu32 " move(s), %" PRIu32
           " reorder(s)",
           r->principal[0] ? r->principal : "(open)", q->id, q->plan.moves, q->plan.reorders);
}

static void on_status(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r))
        return;
    const tn_meta_rebal_t *rb = &tn_meta_state(v->meta)->rebal;
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    tn_meta_rebal_in_t in;
    if (plan_now(v, r, &in, &plan) != 0) {
        tn_place_plan_fini(&plan);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    if (rb->wanted)
        tn__v1_appendf(&b,
                       "{\"running\":true,\"id\":\"%016" PRIx64
                       "\",\"reason\":\"%s\",\"since_ms\":%" PRId64,
                       rb->id, reason_name(rb->reason), rb->since_ms);
    else
        tn_buf_append(&b, "{\"running\":false", 16);
    tn__v1_appendf(&b, ",\"moves_under_way\":%zu,\"left\":{", in.nmoving);
    plan_json(&b, &plan);
    tn_buf_append(&b, "},\"members\":[", 13);
    tn_place_in_t pin = tn_meta_rebal_place_in(&in);
    tn_place_load_t *loads = tn_calloc(in.nmembers > 0 ? in.nmembers : 1, sizeof(*loads));
    if (loads != NULL)
        tn_place_loads(&pin, loads);
    for (size_t i = 0; loads != NULL && i < in.nmembers; i++)
        tn__v1_appendf(&b,
                       "%s{\"id\":\"%" PRIu32
                       "\",\"alive\":%s,\"draining\":%s,\"replicas\":%" PRIu32
                       ",\"preferred_leaders\":%" PRIu32 ",\"moves_under_way\":%" PRIu32 "}",
                       i > 0 ? "," : "", in.members[i].id, in.members[i].alive ? "true" : "false",
                       in.members[i].draining ? "true" : "false", loads[i].replicas,
                       loads[i].leaders, in.busy[i]);
    tn_buf_append(&b, "]}", 2);
    tn_free(loads);
    tn_meta_rebal_in_fini(&in);
    tn_place_plan_fini(&plan);
    tn__v1_respond_buf(r, 200, &b);
}

int tn__v1_rebalance_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc =
        tn_http_route(srv, "POST", "/v1/cluster/rebalance", 0,
                      "{\"error\":\"POST /v1/cluster/rebalance takes no body\"}", on_rebalance, v);
    rc = rc ? rc
            : tn_http_route(srv, "GET", "/v1/cluster/rebalance", 0, TN__V1_NO_BODY, on_status, v);
    return rc;
}
