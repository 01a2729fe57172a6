/* The router. See router.h. */
#include "core/platform.h"

#include "cluster/router.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct tn_router_s {
    tn_router_opts_t o;
    uint32_t next; /* round robin for unpinned publishes with no local partition */
    tn_router_stats_t st;
    /* Settling (tn_router_settle). */
    tn_rpc_t *rpc;
    uint64_t node_id;
    bool cluster;
    tn_settle_local_fn settle;
    void *settle_arg;
    /* Purging (tn_router_purge). */
    tn_purge_local_fn purge;
    void *purge_arg;
};

/* A publish being accepted into the ingress log: owned by the router from
 * tn_ilog_append until its callback. recs borrow p's keys and bodies (p
 * lives until its door's callback, which runs last). */
typedef struct {
    tn_ilog_append_t a;
    tn_router_t *r;
    tn_pub_t *p;
    uint32_t partition;
    tn_irec_t recs[];
} spill_t;

int tn_router_new(const tn_router_opts_t *o, tn_router_t **out)
{
    tn_router_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return UV_ENOMEM;
    r->o = *o;
    *out = r;
    return 0;
}

void tn_router_free(tn_router_t *r)
{
    tn_free(r);
}

void tn_router_on_accepted(tn_router_t *r, void (*cb)(void *arg), void *arg)
{
    r->o.accepted = cb;
    r->o.accepted_arg = arg;
}

void tn_router_stats(const tn_router_t *r, tn_router_stats_t *out)
{
    *out = r->st;
}

static bool member_alive(const tn_router_t *r, uint64_t id)
{
    if (id == 0)
        return false;
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(r->o.meta), id);
    return m != NULL && m->status == TN_MEMBER_ALIVE;
}

/* The partition an unpinned publish for t is accepted for: the next one,
 * round robin, whose owner is alive; the next one at all when none is
 * (its owner gets it when it is back, or the dispatcher reroutes it). */
static uint32_t pick(tn_router_t *r, const tn_topic_t *t)
{
    uint32_t start = r->next++;
    for (uint32_t k = 0; k < t->nparts; k++) {
        uint32_t idx = (start + k) % t->nparts;
        if (member_alive(r, t->parts[idx]->owner))
            return idx;
    }
    return start % t->nparts;
}

static void on_spilled(tn_ilog_append_t *a, int status)
{
    spill_t *s = a->data;
    tn_router_t *r = s->r;
    tn_pub_t *p = s->p;
    if (status == 0) {
        r->st.accepted++;
        r->st.accepted_records += p->n;
        p->partition = s->partition;
        p->first_offset = 0;
        p->remote = true;
    } else {
        r->st.failed++;
        TN_LOG_RL(TN_LOG_ERROR, 10000, "ingress log: accepting %u message(s) for %s/%u failed: %s",
                  p->n, p->topic != NULL ? p->topic->name : "?", s->partition, tn_strerror(status));
    }
    tn_free(s);
    p->route_cb(p, status);
    if (status == 0 && r->o.accepted != NULL)
        r->o.accepted(r->o.accepted_arg);
}

/* Accept p (the engine said TN_EREMOTE; p->topic is the engine's topic)
 * into the ingress log. 0 when under way, else the error (nothing taken). */
static int spill(tn_router_t *r, tn_pub_t *p)
{
    const tn_topic_t *t = p->topic;
    if (r->o.ilog == NULL || t == NULL || t->nparts == 0)
        return TN_EREMOTE;
    spill_t *s = tn_malloc(sizeof(*s) + (size_t)p->n * sizeof(s->recs[0]));
    if (s == NULL)
        return UV_ENOMEM;
    memset(&s->a, 0, sizeof(s->a));
    s->a.data = s;
    s->r = r;
    s->p = p;
    s->partition = p->pinned ? p->pin : pick(r, t);
    int64_t now = tn_now_wall_ms();
    size_t name_len = strlen(t->name);
    for (uint32_t i = 0; i < p->n; i++) {
        tn_irec_t *rec = &s->recs[i];
        rec->topic = tn_iov(t->name, name_len);
        rec->key = p->recs[i].key;
        rec->body = p->recs[i].body;
        rec->partition = s->partition;
        rec->pinned = p->pinned;
        rec->deliver_at_ms = p->deliver_at_ms;
        rec->created_ms = now;
    }
    int rc = tn_ilog_append(r->o.ilog, &s->a, s->recs, p->n, on_spilled);
    if (rc != 0)
        tn_free(s);
    return rc;
}

static void on_engine_done(tn_pub_t *p, int status)
{
    if (status == TN_EREMOTE) {
        status = spill(p->route, p);
        if (status == 0)
            return; /* on_spilled answers */
    }
    p->route_cb(p, status);
}

int tn_router_publish(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p,
                      int64_t deliver_at_ms, tn_pub_cb cb)
{
    p->route = r;
    p->route_cb = cb;
    p->remote = false;
    int rc = tn_broker_publish(r->o.broker, topic, len, p, deliver_at_ms, on_engine_done);
    if (rc == TN_EREMOTE)
        rc = spill(r, p);
    return rc;
}

/* --- settling receipt handles anywhere ----------------------------------------------- */

#define MSG_STALE    "receipt handle no longer matches an active reservation"
#define MSG_FULL     "acked-ahead set is full; head of queue may be stuck"
#define MSG_DOWN     "partition owner is down; retry later"
#define MSG_UNREACH  "partition owner unreachable"
#define MSG_MOVED    "partition owner changed; retry later"
#define MSG_NOTREADY "partition owner could not settle it now; retry later"
#define MSG_OOM      "out of memory"

void tn_router_set_rpc(tn_router_t *r, tn_rpc_t *rpc, uint64_t node_id, bool cluster)
{
    r->rpc = rpc;
    r->node_id = node_id;
    r->cluster = cluster;
}

void tn_router_on_settle(tn_router_t *r, tn_settle_local_fn fn, void *arg)
{
    r->settle = fn;
    r->settle_arg = arg;
}

/* Where partition p of topic is settled: 0 here, else its owner (0 when
 * the metastore has not placed it). */
static bool settle_here(const tn_router_t *r, const char *topic, uint32_t p, uint64_t *owner)
{
    *owner = 0;
    if (!r->cluster || r->o.meta == NULL)
        return true;
    const tn_meta_state_t *s = tn_meta_state(r->o.meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    if (e == NULL || p >= e->rec.partitions)
        return true; /* no such partition: nowhere holds a lease of it */
    *owner = tn_meta_state_owner(s, topic, p);
    return *owner == r->node_id;
}

bool tn_router_settle_owns(void *router, const char *topic, uint32_t p)
{
    uint64_t owner;
    return settle_here(router, topic, p, &owner);
}

/* One owner's share of a settle: a SETTLE call. */
typedef struct settle_op_s settle_op_t;
typedef struct {
    tn_settle_call_t call;
    settle_op_t *op;
    uint64_t owner;
    uint32_t n;
    uint32_t idx[TN_SETTLE_MAX]; /* its handles' places in op->items */
    tn_wire_handle_t h[TN_SETTLE_MAX];
} settle_group_t;

struct settle_op_s {
    tn_router_settle_item_t *items;
    uint32_t n;
    uint32_t pending; /* calls not yet answered */
    tn_router_settle_cb cb;
    void *arg;
    uint32_t ngroups;
    settle_group_t groups[];
};

static void set_result(tn_router_settle_item_t *it, uint16_t status, const char *msg)
{
    it->status = status;
    it->error = msg;
}

static void settle_local(tn_router_t *r, const char *topic, const char *channel, uint8_t how,
                         int64_t visibility_ms, tn_router_settle_item_t *it)
{
    if (r->settle == NULL) {
        set_result(it, 503, "this node is not ready to settle receipt handles");
        return;
    }
    int rc = r->settle(r->settle_arg, topic, channel, it->partition, it->offset, it->nonce, how,
                       visibility_ms);
    if (rc == 0)
        set_result(it, 204, NULL);
    else if (rc == UV_ENOBUFS)
        set_result(it, 503, MSG_FULL);
    else
        set_result(it, 410, MSG_STALE);
}

static void settle_op_done(settle_op_t *op)
{
    op->cb(op->arg, op->items, op->n);
    tn_free(op);
}

static void on_settled(tn_settle_call_t *c, int status)
{
    settle_group_t *g = c->data;
    settle_op_t *op = g->op;
    for (uint32_t i = 0; i < g->n; i++) {
        tn_router_settle_item_t *it = &op->items[g->idx[i]];
        if (status != 0) {
            if (status == UV_EAGAIN)
                set_result(it, 503, MSG_NOTREADY);
            else if (status == UV_ENOMEM)
                set_result(it, 503, MSG_OOM);
            else if (status == TN_ECLOSED)
                set_result(it, 503, "this node is shutting down");
            else
                set_result(it, 502, MSG_UNREACH);
            continue;
        }
        switch (c->status[i]) {
        case 204:
            set_result(it, 204, NULL);
            break;
        case 410:
            set_result(it, 410, MSG_STALE);
            break;
        case 421:
            set_result(it, 503, MSG_MOVED);
            break;
        default:
            set_result(it, 503, MSG_FULL);
            break;
        }
    }
    if (status != 0 && status != UV_EAGAIN && status != TN_ECLOSED)
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "settle: %u receipt handle(s) for node %" PRIu64 " not settled: %s", g->n,
                  g->owner, tn_strerror(status));
    if (--op->pending == 0)
        settle_op_done(op);
}

/* The group of op for owner, made when missing. */
static settle_group_t *group_for(settle_op_t *op, uint64_t owner)
{
    for (uint32_t g = 0; g < op->ngroups; g++)
        if (op->groups[g].owner == owner)
            return &op->groups[g];
    settle_group_t *g = &op->groups[op->ngroups++];
    g->op = op;
    g->owner = owner;
    g->n = 0;
    return g;
}

void tn_router_settle(tn_router_t *r, const char *topic, const char *channel, uint8_t how,
                      int64_t visibility_ms, tn_router_settle_item_t *items, uint32_t n,
                      tn_router_settle_cb cb, void *arg)
{
    /* Count the owners the handles go to first: most settles are all
     * local and need no allocation, and a group is per owner. */
    uint64_t seen[TN_SETTLE_MAX];
    uint32_t remote = 0;
    for (uint32_t i = 0; i < n && i < TN_SETTLE_MAX; i++) {
        uint64_t owner;
        if (settle_here(r, topic, items[i].partition, &owner) || owner == 0)
            continue;
        uint32_t k = 0;
        while (k < remote && seen[k] != owner)
            k++;
        if (k == remote)
            seen[remote++] = owner;
    }
    settle_op_t *op = NULL;
    if (remote > 0) {
        op = tn_calloc(1, sizeof(*op) + (size_t)remote * sizeof(op->groups[0]));
        if (op != NULL) {
            op->items = items;
            op->n = n;
            op->cb = cb;
            op->arg = arg;
        }
    }
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        tn_router_settle_item_t *it = &items[i];
        uint64_t owner;
        if (i >= TN_SETTLE_MAX) {
            set_result(it, 400, "a batch holds at most 100 receipt handles");
            continue;
        }
        if (settle_here(r, topic, it->partition, &owner)) {
            settle_local(r, topic, channel, how, visibility_ms, it);
            continue;
        }
        const tn_meta_member_t *m = owner != 0 ? tn_meta_member_find(s, owner) : NULL;
        if (owner == 0 || (m != NULL && m->status == TN_MEMBER_DEAD))
            set_result(it, 503, MSG_DOWN);
        else if (m == NULL || m->api_addr[0] == '\0' || r->rpc == NULL)
            set_result(it, 502, MSG_UNREACH);
        else if (op == NULL)
            set_result(it, 503, MSG_OOM);
        else {
            settle_group_t *g = group_for(op, owner);
            g->idx[g->n] = i;
            g->h[g->n] = (tn_wire_handle_t){it->partition, it->offset, it->nonce};
            g->n++;
        }
    }
    if (op == NULL) {
        cb(arg, items, n);
        return;
    }
    op->pending = 1; /* held while the calls start */
    for (uint32_t gi = 0; gi < op->ngroups; gi++) {
        settle_group_t *g = &op->groups[gi];
        const tn_meta_member_t *m = tn_meta_member_find(s, g->owner);
        g->call.data = g;
        int rc = tn_settle_call(r->rpc, m->api_addr, topic, channel, how, visibility_ms, g->h, g->n,
                                TN_ROUTER_SETTLE_TIMEOUT_MS, &g->call, on_settled);
        op->pending++;
        if (rc != 0)
            on_settled(&g->call, rc);
    }
    if (--op->pending == 0)
        settle_op_done(op);
}

/* --- consume anywhere ------------------------------------------------------------ */

int tn_router_consume_where(tn_router_t *r, const char *topic, uint32_t partition, uint64_t *owner)
{
    *owner = 0;
    if (r->rpc == NULL || !r->cluster || r->o.meta == NULL)
        return 0;
    const tn_meta_state_t *s = tn_meta_state(r->o.meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    if (e == NULL || partition >= e->rec.partitions)
        return 0; /* the lanes answer what they always have */
    uint64_t id = tn_meta_state_owner(s, topic, partition);
    if (id == 0)
        return UV_EAGAIN;
    if (id == r->node_id)
        return 0;
    *owner = id;
    return member_alive(r, id) ? TN_EREMOTE : UV_EHOSTDOWN;
}

size_t tn_router_consume_owners(tn_router_t *r, const char *topic, uint64_t *out, size_t max)
{
    if (r->rpc == NULL || !r->cluster || r->o.meta == NULL)
        return 0;
    const tn_meta_state_t *s = tn_meta_state(r->o.meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    size_t n = 0;
    for (uint32_t p = 0; e != NULL && p < e->rec.partitions; p++) {
        uint64_t id = tn_meta_state_owner(s, topic, p);
        if (id == 0 || id == r->node_id || !member_alive(r, id))
            continue;
        size_t at = 0;
        while (at < n && out[at] < id)
            at++;
        if (at < n && out[at] == id)
            continue;
        if (n == max)
            continue;
        memmove(out + at + 1, out + at, (n - at) * sizeof(*out));
        out[at] = id;
        n++;
    }
    return n;
}

static void on_consume_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    tn_router_consume_t *c = arg;
    c->call = NULL;
    if (status == 0) {
        c->http_status = reply->status;
        if (tn_buf_append(&c->body, reply->body, reply->body_len) != 0) {
            status = UV_ENOMEM;
            snprintf(c->error, sizeof(c->error), "out of memory");
        }
    } else {
        snprintf(c->error, sizeof(c->error), "%s", err != NULL ? err : tn_strerror(status));
    }
    c->cb(c, status);
}

int tn_router_consume_call(tn_router_t *r, uint64_t owner, const tn_wire_consume_t *req,
                           uint64_t timeout_ms, tn_router_consume_t *c, tn_router_consume_cb cb)
{
    if (r->rpc == NULL || !r->cluster)
        return TN_ECLOSED;
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(r->o.meta), owner);
    if (m == NULL || m->api_addr[0] == '\0')
        return UV_EHOSTUNREACH;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_consume_encode(&b, req);
    if (rc != 0) {
        tn_buf_fini(&b);
        return rc;
    }
    c->owner = owner;
    c->http_status = 0;
    c->error[0] = '\0';
    c->cb = cb;
    tn_buf_init(&c->body);
    rc = tn_rpc_call(r->rpc, m->api_addr, TN_OP_CONSUME, tn_buf_data(&b), tn_buf_size(&b),
                     timeout_ms, on_consume_reply, c, &c->call);
    tn_buf_fini(&b);
    return rc;
}

void tn_router_consume_cancel(tn_router_consume_t *c)
{
    if (c->call != NULL)
        tn_rpc_call_cancel(c->call);
}

/* --- purging a deleted topic on every member ------------------------------------- */

void tn_router_on_purge(tn_router_t *r, tn_purge_local_fn fn, void *arg)
{
    r->purge = fn;
    r->purge_arg = arg;
}

typedef struct purge_op_s purge_op_t;

/* One member's share of a fan-out: this node's local purge (node_id is
 * this node's) or a PURGE call. */
typedef struct {
    tn_purge_call_t call;
    purge_op_t *op;
    uint64_t node;
} purge_target_t;

struct purge_op_s {
    tn_router_t *r;
    tn_router_purge_cb cb;
    void *arg;
    uint32_t pending; /* answers not yet in, plus one while the calls start */
    int status;       /* the first failure's */
    tn_buf_t error;   /* "not purged on node N: why; node M: why" */
    char topic[TN_NAME_MAX + 1];
    uint32_t ntargets;
    purge_target_t targets[];
};

static void purge_failed(purge_op_t *op, uint64_t node, int status, const char *why)
{
    if (op->status == 0)
        op->status = status;
    char line[400];
    int n = snprintf(line, sizeof(line), "%snode %" PRIu64 ": %s",
                     tn_buf_size(&op->error) == 0 ? "not purged on " : "; ", node,
                     why != NULL && why[0] != '\0' ? why : tn_strerror(status));
    (void)tn_buf_append(&op->error, line, (size_t)TN_MIN((size_t)n, sizeof(line) - 1));
    TN_LOG(TN_LOG_WARN, "deleting topic %s: node %" PRIu64 " did not confirm its purge: %s",
           op->topic, node, why != NULL && why[0] != '\0' ? why : tn_strerror(status));
}

static void purge_unref(purge_op_t *op)
{
    if (--op->pending > 0)
        return;
    if (op->status == 0) {
        op->cb(op->arg, 0, NULL);
    } else {
        /* Out of memory for the sentence: the status alone. */
        if (tn_buf_append(&op->error, "", 1) != 0) {
            tn_buf_fini(&op->error);
            op->cb(op->arg, op->status, tn_strerror(op->status));
        } else {
            op->cb(op->arg, op->status, tn_buf_data(&op->error));
        }
    }
    tn_buf_fini(&op->error);
    tn_free(op);
}

static void on_member_purged(tn_purge_call_t *c, int status)
{
    purge_target_t *t = c->data;
    if (status != 0)
        purge_failed(t->op, t->node, status, c->error);
    purge_unref(t->op);
}

static void on_local_purged(void *arg, int status, const char *why)
{
    purge_target_t *t = arg;
    if (status == TN_ENOTFOUND)
        status = 0; /* nothing of it here */
    if (status != 0)
        purge_failed(t->op, t->node, status, why);
    purge_unref(t->op);
}

static void on_local_deleted(void *arg, int status)
{
    on_local_purged(arg, status, NULL);
}

int tn_router_purge(tn_router_t *r, const char *topic, int64_t created_at_ms, tn_router_purge_cb cb,
                    void *arg)
{
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    bool fan = r->cluster && r->rpc != NULL && s != NULL;
    uint32_t n = 1; /* this node */
    for (size_t i = 0; fan && i < s->nmembers; i++)
        if (s->members[i].id != r->node_id && s->members[i].status == TN_MEMBER_ALIVE)
            n++;
    purge_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)n * sizeof(op->targets[0]));
    if (op == NULL)
        return UV_ENOMEM;
    op->r = r;
    op->cb = cb;
    op->arg = arg;
    tn_buf_init(&op->error);
    snprintf(op->topic, sizeof(op->topic), "%s", topic);
    op->pending = 1;
    /* The others first: their calls are under way while this node's
     * purge waits for its own replica. */
    for (size_t i = 0; fan && i < s->nmembers; i++) {
        const tn_meta_member_t *m = &s->members[i];
        if (m->id == r->node_id || m->status != TN_MEMBER_ALIVE)
            continue;
        purge_target_t *t = &op->targets[op->ntargets++];
        t->op = op;
        t->node = m->id;
        t->call.data = t;
        op->pending++;
        int rc = m->api_addr[0] == '\0'
                     ? UV_EHOSTUNREACH
                     : tn_purge_call(r->rpc, m->api_addr, topic, created_at_ms, TN_PURGE_CALL_MS,
                                     &t->call, on_member_purged);
        if (rc != 0) {
            purge_failed(op, m->id, rc, m->api_addr[0] == '\0' ? "no address recorded" : NULL);
            op->pending--;
        }
    }
    purge_target_t *self = &op->targets[op->ntargets++];
    self->op = op;
    self->node = r->node_id;
    op->pending++;
    int rc = r->purge != NULL ? r->purge(r->purge_arg, topic, created_at_ms, TN_PURGE_WAIT_MS,
                                         on_local_purged, self)
                              : tn_broker_delete(r->o.broker, topic, NULL, on_local_deleted, self);
    if (rc != 0) {
        purge_failed(op, r->node_id, rc, NULL);
        op->pending--;
    }
    purge_unref(op);
    return 0;
}
