/* Partition moves (admins only; docs/cluster.md "Partition moves"): a
 * replicated partition's replicas reassigned online, the way Kafka's
 * KIP-455 does it (meta/partstate.h rules 6 to 8).
 *
 * DESIGN: PATCH /v1/topics/{topic}/partitions/{p} {"replicas":["2","4","3"]}
 *   1. Admins only (403), a write (the cross-site guard, 415), a caught-up
 *      metastore replica (503); the body (400), the topic and partition
 *      (404).
 *   2. This node's replica is confirmed current (tn_meta_confirm), then
 *      the rules run on a copy of the partition's state
 *      (tn_pstate_move_begin, the function the state machine applies),
 *      from the state tn_meta_state_move_from gives (a factor-1 partition
 *      that never moved: the one its begin makes over its owner): a
 *      factor-1 topic's target of other than one member 400, an owner
 *      that is not alive or a partition not placed 409, a move under way
 *      409, a bad target 400 with the rules' reason; nothing is proposed.
 *   3. Otherwise PART_MOVE begin goes to the metastore with a new random
 *      id; applied, the answer is 202 {"id": ...}. The adding members
 *      follow the leader from then on (cluster/replica.c), the leader's
 *      CAS adds them to the ISR once caught up, and the metastore leader
 *      completes the move (meta.c check_moves): nobody waits on it here.
 *      A refusal at apply (the state moved between 2 and 3) is answered
 *      with the same codes; no leader within the proposal's budget 503.
 * GET /v1/cluster/moves: the moves under way (from every replicated
 * partition's state) and the last finished ones (the state keeps 64),
 * the same on every node. A move's progress (lag_records, bytes_copied,
 * bytes_total: the leader's view of its followers' fetch positions and
 * its log) is gathered first (tn_router_move_progress: read here where
 * this node leads the partition, asked of the leader otherwise; null,
 * with progress_error, when it could not be), then the listing is
 * rendered from the state as it is then; the state is copying rather
 * than catching_up while a target lacks more than a fetch's worth
 * (cluster/throttle.h).
 * DELETE /v1/cluster/moves/{id}: PART_MOVE abort after the same confirm
 * and dry run (404 unknown, 409 finished, no old replica could lead, or
 * the old replicas hold too few in-sync copies: partstate.h rule 8).
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/moves.h"

#include "api/v1/common.h"

#include "cluster/moveprog.h"
#include "cluster/replica.h"
#include "cluster/router.h"
#include "cluster/throttle.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define UNAVAILABLE "control plane temporarily unavailable (no metastore leader answered)"
#define FACTOR_ONE                                                                                 \
    "a partition of a topic of replication factor 1 is moved to exactly one member (the "          \
    "replicas list names one)"

/* A string literal appended without its NUL. */
#define APPEND_LIT(b, lit) tn_buf_append((b), (lit), sizeof(lit) - 1)

/* --- the body ---------------------------------------------------------------------- */

typedef struct {
    int depth; /* 0 before, 1 in the object, 2 in the list, 3 after */
    bool in_replicas, seen;
    uint32_t *target;
    uint32_t n;
    char *err;
    size_t errlen;
} body_t;

static int bfail(body_t *x, const char *msg)
{
    if (x->err[0] == '\0')
        snprintf(x->err, x->errlen, "%s", msg);
    return 0;
}

static int b_other(void *c);

static int b_id(body_t *x, const char *s, size_t len)
{
    if (x->depth != 2)
        return b_other(x);
    if (x->n == TN_PSTATE_MAX_REPLICAS) {
        snprintf(x->err, x->errlen, "invalid argument: a partition has at most %d replicas",
                 TN_PSTATE_MAX_REPLICAS);
        return 0;
    }
    uint64_t v = 0;
    bool ok = len > 0 && len <= 10;
    for (size_t i = 0; ok && i < len; i++) {
        ok = s[i] >= '0' && s[i] <= '9';
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (!ok || v == 0 || v > UINT32_MAX)
        return bfail(x, "invalid argument: a replica must be a member id (a positive integer)");
    x->target[x->n++] = (uint32_t)v;
    return 1;
}

static int b_string(void *c, const unsigned char *s, size_t len)
{
    return b_id(c, (const char *)s, len);
}

static int b_number(void *c, const char *s, size_t len)
{
    return b_id(c, s, len);
}

static int b_other(void *c)
{
    body_t *x = c;
    if (x->depth == 1 && x->in_replicas)
        return bfail(x, "invalid json: field \"replicas\" must be a list of member ids");
    return bfail(x, "invalid json: unexpected value (the body is {\"replicas\": [...]})");
}

static int b_bool(void *c, int b)
{
    (void)b;
    return b_other(c);
}

static int b_start_map(void *c)
{
    body_t *x = c;
    if (x->depth != 0)
        return b_other(c);
    x->depth = 1;
    return 1;
}

static int b_key(void *c, const unsigned char *k, size_t n)
{
    body_t *x = c;
    if (n != 8 || memcmp(k, "replicas", 8) != 0) {
        snprintf(x->err, x->errlen, "invalid json: unknown field \"%.*s\"",
                 (int)TN_MIN(n, (size_t)64), k);
        return 0;
    }
    if (x->seen)
        return bfail(x, "invalid json: duplicate field \"replicas\"");
    x->seen = true;
    x->in_replicas = true;
    return 1;
}

static int b_end_map(void *c)
{
    body_t *x = c;
    x->depth = 3;
    return 1;
}

static int b_start_array(void *c)
{
    body_t *x = c;
    if (x->depth != 1 || !x->in_replicas)
        return b_other(c);
    x->depth = 2;
    return 1;
}

static int b_end_array(void *c)
{
    body_t *x = c;
    x->depth = 1;
    x->in_replicas = false;
    return 1;
}

static const yajl_callbacks body_callbacks = {
    b_other,     b_bool, NULL,      NULL,          b_number,    b_string,
    b_start_map, b_key,  b_end_map, b_start_array, b_end_array,
};

int tn__v1_move_body(const char *body, size_t len, uint32_t *target, uint32_t *n, char *err,
                     size_t errlen)
{
    body_t x = {.target = target, .err = err, .errlen = errlen};
    err[0] = '\0';
    bool ok = false;
    int rc = tn_json_events(body, len, &body_callbacks, &x, true, &ok);
    if (rc != 0)
        return rc;
    if (err[0] == '\0' && (!ok || x.depth != 3))
        snprintf(err, errlen, "invalid json: the body must be one JSON object");
    if (err[0] == '\0' && !x.seen)
        snprintf(err, errlen,
                 "replicas required: the member ids of the partition's new replicas, preferred "
                 "leader first");
    if (err[0] == '\0' && x.n == 0)
        snprintf(err, errlen, "invalid argument: replicas must name at least one member");
    if (err[0] != '\0')
        return UV_EINVAL;
    *n = x.n;
    return 0;
}

/* --- a move as JSON ------------------------------------------------------------------ */

static void json_nodes(tn_buf_t *b, const char *name, const uint32_t *v, uint32_t n)
{
    tn__v1_appendf(b, ",\"%s\":[", name);
    for (uint32_t i = 0; i < n; i++)
        tn__v1_appendf(b, "%s\"%" PRIu32 "\"", i > 0 ? "," : "", v[i]);
    APPEND_LIT(b, "]");
}

static void json_head(tn_buf_t *b, uint64_t id, const char *topic, uint32_t p)
{
    tn__v1_appendf(b, "{\"id\":\"%016" PRIx64 "\",\"topic\":", id);
    tn__v1_json_str(b, topic);
    tn__v1_appendf(b, ",\"partition\":%" PRIu32, p);
}

typedef struct {
    tn_v1_t *v;
    tn_buf_t *b;
    bool first;
} list_t;

/* One move under way, with what is known of its progress (p: NULL when
 * the gather did not cover it, begun since: this node's own view). */
static void list_one(list_t *l, const char *topic, uint32_t p, const tn_pstate_t *ps,
                     const tn_router_moveprog_t *known)
{
    if (!l->first)
        APPEND_LIT(l->b, ",");
    l->first = false;
    json_head(l->b, ps->move_id, topic, p);
    json_nodes(l->b, "from", ps->old, ps->nold);
    json_nodes(l->b, "to", ps->target, ps->ntarget);
    tn_wire_moveprog_reply_t pr;
    if (known != NULL)
        pr = known->out;
    else
        tn_moveprog_local(l->v->replica, topic, p, ps, &pr);
    bool bytes = (pr.known & TN_WIRE_MOVEPROG_BYTES) != 0;
    tn__v1_appendf(
        l->b, ",\"state\":\"%s\",\"started_ms\":%" PRId64 ",\"finished_ms\":null",
        tn_throttle_move_state(tn_pstate_move_ready(ps), bytes, pr.bytes_total - pr.bytes_copied),
        ps->move_started_ms);
    if (bytes)
        tn__v1_appendf(l->b, ",\"bytes_copied\":%" PRIu64 ",\"bytes_total\":%" PRIu64,
                       pr.bytes_copied, pr.bytes_total);
    else
        APPEND_LIT(l->b, ",\"bytes_copied\":null,\"bytes_total\":null");
    if ((pr.known & TN_WIRE_MOVEPROG_LAG) != 0)
        tn__v1_appendf(l->b, ",\"lag_records\":%" PRIu64, pr.lag_records);
    else
        APPEND_LIT(l->b, ",\"lag_records\":null");
    tn__v1_appendf(l->b, ",\"leader\":\"%" PRIu32 "\",\"isr\":[", ps->leader);
    for (uint32_t i = 0; i < ps->nisr; i++)
        tn__v1_appendf(l->b, "%s\"%" PRIu32 "\"", i > 0 ? "," : "", ps->isr[i].node);
    /* The stall marks the partition's leader recorded (partstate.h rule
     * 10): where each target member's copy stood, since when. */
    APPEND_LIT(l->b, "],\"progress_marks\":[");
    for (uint32_t i = 0; i < ps->nmark && i < TN_PSTATE_MAX_REPLICAS; i++)
        tn__v1_appendf(
            l->b, "%s{\"member\":\"%" PRIu32 "\",\"offset\":%" PRIu64 ",\"since_ms\":%" PRId64 "}",
            i > 0 ? "," : "", ps->mark[i].node, ps->mark[i].end, ps->mark[i].ms);
    APPEND_LIT(l->b, "],\"error\":null");
    if (known != NULL && known->error != NULL) {
        APPEND_LIT(l->b, ",\"progress_error\":");
        tn__v1_json_str(l->b, known->error);
    }
    APPEND_LIT(l->b, "}");
}

/* A finished move's state as the API names it. */
static const char *end_name(uint8_t end)
{
    return end == TN_MOVE_DONE ? "done" : end == TN_MOVE_FAILED ? "failed" : "aborted";
}

static void json_done(tn_buf_t *b, const tn_meta_move_t *mv)
{
    json_head(b, mv->id, mv->topic, mv->part);
    json_nodes(b, "from", mv->from, mv->nfrom);
    json_nodes(b, "to", mv->to, mv->nto);
    tn__v1_appendf(b,
                   ",\"state\":\"%s\",\"started_ms\":%" PRId64 ",\"finished_ms\":%" PRId64
                   ",\"bytes_copied\":null,\"bytes_total\":null,\"lag_records\":null,"
                   "\"error\":",
                   end_name(mv->end), mv->started_ms, mv->finished_ms);
    if (mv->end == TN_MOVE_DONE)
        APPEND_LIT(b, "null}");
    else {
        tn__v1_json_str(b, mv->reason);
        APPEND_LIT(b, "}");
    }
}

/* A listing gathering the progress of the moves under way from their
 * leaders (tn_router_move_progress, up to TN_ROUTER_MOVEPROG_TIMEOUT_MS).
 * r is NULL once the client left. */
typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r;
    uint32_t n, cap;
    tn_router_moveprog_t *items;
} list_op_t;

static void list_cancel(tn_http_request_t *r)
{
    list_op_t *op = r->data;
    op->r = NULL;
}

typedef struct {
    list_t *l;
    const list_op_t *op;
} render_t;

/* A move under way in the state now, with the progress gathered for it
 * (matched by id: a move may have ended, or begun, meanwhile). */
static void render_one(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    render_t *x = arg;
    if (ps->ntarget == 0)
        return;
    const tn_router_moveprog_t *known = NULL;
    for (uint32_t i = 0; i < x->op->n && known == NULL; i++)
        if (x->op->items[i].ps.move_id == ps->move_id)
            known = &x->op->items[i];
    list_one(x->l, topic, p, ps, known);
}

static void on_progress(void *arg, tn_router_moveprog_t *items, uint32_t n)
{
    (void)items;
    (void)n;
    list_op_t *op = arg;
    tn_http_request_t *r = op->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        const tn_meta_state_t *s = tn_meta_state(op->v->meta);
        tn_buf_t b;
        tn_buf_init(&b);
        APPEND_LIT(&b, "{\"moves\":[");
        list_t l = {op->v, &b, true};
        render_t x = {&l, op};
        tn_meta_state_each_pstate(s, render_one, &x);
        for (size_t k = 0; tn_meta_state_move_done(s, k) != NULL; k++) {
            if (!l.first)
                APPEND_LIT(&b, ",");
            l.first = false;
            json_done(&b, tn_meta_state_move_done(s, k));
        }
        APPEND_LIT(&b, "]}");
        tn__v1_respond_buf(r, 200, &b);
    }
    tn_free(op->items);
    tn_free(op);
}

static void count_one(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    (void)topic;
    (void)p;
    list_op_t *op = arg;
    op->cap += ps->ntarget > 0;
}

static void take_one(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    list_op_t *op = arg;
    if (ps->ntarget == 0 || op->n == op->cap)
        return;
    tn_router_moveprog_t *it = &op->items[op->n++];
    snprintf(it->topic, sizeof(it->topic), "%s", topic);
    it->partition = p;
    it->ps = *ps;
}

static void on_list(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r))
        return;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    list_op_t *op = tn_calloc(1, sizeof(*op));
    if (op != NULL) {
        tn_meta_state_each_pstate(s, count_one, op);
        op->items = op->cap > 0 ? tn_calloc(op->cap, sizeof(*op->items)) : NULL;
    }
    if (op == NULL || (op->cap > 0 && op->items == NULL)) {
        tn_free(op);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    tn_meta_state_each_pstate(s, take_one, op);
    op->v = v;
    op->r = r;
    r->data = op;
    r->on_cancel = list_cancel;
    /* op is the gather's until on_progress, which frees it. */
    tn_router_move_progress(v->router, op->items, op->n, on_progress, op);
}

/* --- begin and abort ------------------------------------------------------------------ */

typedef struct {
    tn_meta_req_t mreq;
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    bool abort;
    char topic[TN_NAME_MAX + 1];
    uint32_t partition;
    uint32_t target[TN_PSTATE_MAX_REPLICAS];
    uint32_t n;
    uint64_t id;
    tn_pstate_t was; /* the state judged */
} move_t;

static void move_cancel(tn_http_request_t *r)
{
    move_t *m = r->data;
    m->r = NULL;
}

/* Answer and free m (m->r may be gone). */
static void finish(move_t *m, int status, const char *msg)
{
    tn__v1_end(m->r, status, msg, NULL);
    tn_free(m);
}

static void answer_move(move_t *m, int status)
{
    tn_http_request_t *r = m->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        tn_buf_t b;
        tn_buf_init(&b);
        json_head(&b, m->id, m->topic, m->partition);
        if (m->abort) {
            json_nodes(&b, "from", m->was.old, m->was.nold);
            json_nodes(&b, "to", m->was.target, m->was.ntarget);
            APPEND_LIT(&b, ",\"state\":\"aborted\"}");
        } else {
            json_nodes(&b, "from", m->was.replicas, m->was.nreplicas);
            json_nodes(&b, "to", m->target, m->n);
            APPEND_LIT(&b, ",\"state\":\"catching_up\"}");
        }
        tn__v1_respond_buf(r, status, &b);
    }
    tn_free(m);
}

/* The finished move id, or NULL. */
static const tn_meta_move_t *finished(const tn_meta_state_t *s, uint64_t id)
{
    for (size_t k = 0; tn_meta_state_move_done(s, k) != NULL; k++)
        if (tn_meta_state_move_done(s, k)->id == id)
            return tn_meta_state_move_done(s, k);
    return NULL;
}

/* Whatever the confirm says (not applied here in time: the answer is
 * still what the metastore did). */
static void on_applied_here(void *arg, int status)
{
    (void)status;
    move_t *m = arg;
    answer_move(m, m->abort ? 200 : 202);
}

/* Whether the move's own command was applied already: a proposal sent
 * again after a metastore failover finds its first copy applied (meta.h)
 * and is refused as a second begin (UV_EBUSY) or abort (TN_ENOTFOUND). */
static bool applied_before(const move_t *m, int status)
{
    const tn_meta_state_t *s = tn_meta_state(m->v->meta);
    if (!m->abort && status == UV_EBUSY) {
        const tn_pstate_t *ps = tn_meta_state_pstate(s, m->topic, m->partition);
        if (ps != NULL && ps->move_id == m->id)
            return true;
        const tn_meta_move_t *mv = finished(s, m->id); /* and ended since */
        return mv != NULL;
    }
    if (m->abort && status == TN_ENOTFOUND) {
        const tn_meta_move_t *mv = finished(s, m->id);
        return mv != NULL && mv->end == TN_MOVE_ABORTED &&
               strncmp(mv->reason, "aborted by ", 11) == 0;
    }
    return false;
}

static void on_proposed(tn_meta_req_t *req, int status)
{
    move_t *m = req->data;
    char msg[200];
    if (status != 0 && applied_before(m, status))
        status = 0;
    if (status == 0) {
        TN_LOG(TN_LOG_NOTICE, "move %016" PRIx64 " of %s/%" PRIu32 " %s", m->id, m->topic,
               m->partition, m->abort ? "aborted" : "begun");
        /* Answered once this node's replica applied it too, so that its
         * GET /v1/cluster/moves lists what the answer says. */
        if (m->r != NULL && tn_meta_confirm(m->v->meta, on_applied_here, m) == 0)
            return;
        answer_move(m, m->abort ? 200 : 202);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(m->v->meta);
    if (status == TN_ENOTFOUND && m->abort) {
        const tn_meta_move_t *mv = finished(s, m->id);
        snprintf(msg, sizeof(msg), "move %016" PRIx64 " %s before the abort applied", m->id,
                 mv != NULL && mv->end == TN_MOVE_DONE ? "completed" : "ended");
        finish(m, 409, msg);
    } else if (status == TN_ENOTFOUND) {
        finish(m, 404, "no such topic or partition");
    } else if (status == UV_EBUSY) {
        finish(m, 409, "a move of this partition is under way");
    } else if (status == UV_EPERM) {
        finish(m, 409,
               "the old replicas cannot take the partition back now (none could lead, or they "
               "hold fewer in-sync copies than min_insync_replicas): the move was not aborted");
    } else if (status == UV_EINVAL) {
        /* Judged valid on a state that moved before the command applied
         * (a member's session ended, say). */
        finish(m, 400,
               "the metastore refused the target replica list: the members or the partition "
               "changed meanwhile (GET /v1/cluster/members, then try again)");
    } else {
        finish(m, 503, UNAVAILABLE);
    }
}

static void propose(move_t *m)
{
    tn_http_request_t *r = m->r;
    memset(&m->mreq, 0, sizeof(m->mreq));
    m->mreq.data = m;
    char reason[TN_META_MOVE_REASON_MAX + 1];
    snprintf(reason, sizeof(reason), "aborted by %.64s",
             r->principal[0] != '\0' ? r->principal : "an admin (security off)");
    int rc = tn_meta_propose_move(m->v->meta, &m->mreq, m->topic, m->partition,
                                  m->abort ? TN_MOVE_ABORT : TN_MOVE_BEGIN, m->id, m->target, m->n,
                                  m->abort ? reason : NULL, on_proposed);
    if (rc != 0) {
        finish(m, 503, rc == UV_ENOMEM ? "out of memory" : UNAVAILABLE);
        return;
    }
    TN_LOG(TN_LOG_NOTICE, "audit: %s %s move %016" PRIx64 " of %s/%" PRIu32,
           r->principal[0] ? r->principal : "(open)", m->abort ? "aborts" : "begins", m->id,
           m->topic, m->partition);
}

static void nodes_now(tn_v1_t *v, tn_pstate_node_t *buf, size_t cap, tn_pstate_nodes_t *nodes)
{
    tn_meta_state_nodes(tn_meta_state(v->meta), buf, cap, nodes);
}

/* The confirm's answer (tn_meta_confirm) for m: true when the request is
 * still there and the replica is current; false after freeing m (the client
 * left) or answering 503 and freeing it. */
static bool still_current(move_t *m, int status)
{
    if (m->r == NULL) {
        tn_free(m);
        return false;
    }
    if (status != 0) {
        finish(m, 503, UNAVAILABLE);
        return false;
    }
    return true;
}

/* Step 1 of a PATCH or DELETE: m (transferred: owned by r and the confirm
 * until finish or still_current frees it, or freed here) waits for the
 * metastore replica to confirm it is current, then on_current runs; 503
 * at once when the confirm cannot start. */
static void confirm_then(move_t *m, tn_v1_t *v, tn_http_request_t *r,
                         void (*on_current)(void *arg, int status))
{
    m->v = v;
    m->r = r;
    r->data = m;
    r->on_cancel = move_cancel;
    if (tn_meta_confirm(v->meta, on_current, m) != 0) {
        r->on_cancel = NULL;
        tn_free(m);
        tn__v1_error(r, 503, UNAVAILABLE, "Retry-After: 1\r\n");
    }
}

/* Step 2 of a PATCH on a replica confirmed current. */
static void on_begin_current(void *arg, int status)
{
    move_t *m = arg;
    if (!still_current(m, status))
        return;
    const tn_meta_state_t *s = tn_meta_state(m->v->meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, m->topic);
    if (e == NULL || m->partition >= e->rec.partitions) {
        finish(m, 404, e == NULL ? "topic not found" : "no such partition");
        return;
    }
    uint8_t factor = tn_meta_topic_factor(&e->rec);
    if (factor == 1 && m->n != 1) {
        finish(m, 400, FACTOR_ONE);
        return;
    }
    if (m->n != factor) {
        /* The metastore leader keeps every partition at its topic's
         * factor (meta.c check_factor): another count would be moved back. */
        char why[192];
        snprintf(why, sizeof(why),
                 "invalid argument: a partition of a topic of replication factor %u is moved to "
                 "exactly %u members (PATCH the topic's replication_factor to change how many)",
                 factor, factor);
        finish(m, 400, why);
        return;
    }
    char err[192] = "";
    tn_pstate_t from;
    int frc = tn_meta_state_move_from(s, m->topic, m->partition, &from, err, sizeof(err));
    if (frc != 0) {
        finish(m, frc == TN_ENOTFOUND ? 404 : 409, err);
        return;
    }
    tn_pstate_node_t buf[64];
    tn_pstate_nodes_t nodes;
    nodes_now(m->v, buf, TN_ARRAY_SIZE(buf), &nodes);
    m->was = from;
    tn_pstate_t copy = from;
    do {
        if (getrandom(&m->id, sizeof(m->id), 0) != (ssize_t)sizeof(m->id)) {
            finish(m, 503, "out of randomness for a move id");
            return;
        }
    } while (m->id == 0);
    int rc = tn_pstate_move_begin(&copy, m->target, m->n, m->id, 0, &nodes, err, sizeof(err));
    if (rc != 0) {
        finish(m, rc == UV_EBUSY ? 409 : 400, err);
        return;
    }
    propose(m);
}

static void on_move(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r) || !tn__v1_caught_up(v, r, on_move))
        return;
    move_t *m = tn_calloc(1, sizeof(*m));
    if (m == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    char err[192];
    int rc = tn__v1_move_body(tn_buf_data(&r->body), tn_buf_size(&r->body), m->target, &m->n, err,
                              sizeof(err));
    if (rc != 0) {
        tn_free(m);
        tn__v1_error(r, rc == UV_ENOMEM ? 503 : 400, rc == UV_ENOMEM ? "out of memory" : err,
                     rc == UV_ENOMEM ? "Retry-After: 1\r\n" : NULL);
        return;
    }
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, m->topic);
    if (e == NULL || !tn__v1_path_partition(r, e, &m->partition)) {
        tn_free(m);
        return;
    }
    confirm_then(m, v, r, on_begin_current);
}

/* The path's {id} (16 hex digits, as the moves list shows it), or 0. */
static uint64_t path_id(tn_http_request_t *r)
{
    const tn_iov_t *id = tn_http_param(r, "id");
    if (id == NULL || id->len == 0 || id->len > 16)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < id->len; i++) {
        char c = id->base[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    return v;
}

static void on_abort_current(void *arg, int status)
{
    move_t *m = arg;
    if (!still_current(m, status))
        return;
    const tn_meta_state_t *s = tn_meta_state(m->v->meta);
    const char *topic = NULL;
    const tn_pstate_t *ps = tn_meta_state_move_find(s, m->id, &topic, &m->partition);
    char err[192] = "";
    if (ps == NULL) {
        const tn_meta_move_t *mv = finished(s, m->id);
        if (mv == NULL) {
            finish(m, 404, "move not found");
            return;
        }
        snprintf(err, sizeof(err), "move %016" PRIx64 " has finished (%s)", m->id,
                 end_name(mv->end));
        finish(m, 409, err);
        return;
    }
    snprintf(m->topic, sizeof(m->topic), "%s", topic);
    m->was = *ps;
    tn_pstate_node_t buf[64];
    tn_pstate_nodes_t nodes;
    nodes_now(m->v, buf, TN_ARRAY_SIZE(buf), &nodes);
    tn_pstate_t copy = *ps;
    int rc = tn_pstate_move_abort(&copy, m->id, &nodes, err, sizeof(err));
    if (rc != 0) {
        finish(m, 409, err);
        return;
    }
    propose(m);
}

static void on_abort(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r) || !tn__v1_caught_up(v, r, on_abort))
        return;
    uint64_t id = path_id(r);
    if (id == 0) {
        tn__v1_error(r, 404, "move not found", NULL);
        return;
    }
    move_t *m = tn_calloc(1, sizeof(*m));
    if (m == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    m->abort = true;
    m->id = id;
    confirm_then(m, v, r, on_abort_current);
}

int tn__v1_moves_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "GET", "/v1/cluster/moves", 0, TN__V1_NO_BODY, on_list, v);
    rc =
        rc ? rc
           : tn_http_route(srv, "DELETE", "/v1/cluster/moves/{id}", 0, TN__V1_NO_BODY, on_abort, v);
    rc = rc ? rc
            : tn_http_route(srv, "PATCH", "/v1/topics/{topic}/partitions/{p}", TN_JSON_MAX_BODY,
                            TN__V1_TOO_BIG, on_move, v);
    return rc;
}
