/* PRODUCE: the leader's handler with its duplicate window, and the call
 * an accepting node sends. See produce.h for the design. */
#include "core/platform.h"

#include "cluster/produce.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/u64map.h"
#include "storage/plog.h"
#include "storage/record.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define JSON "application/json"

/* Records a stored batch has before its first: the PRODUCER record. */
#define CTL_RECS 1

/* --- the control record -------------------------------------------------------------- */

void tn_produce_ctl_encode(uint8_t out[TN_PRODUCE_CTL_LEN], uint64_t node, uint64_t seq,
                           uint32_t count)
{
    tn_ctrl_encode_producer(out, node, seq, count);
}

int tn_produce_ctl_decode(const void *body, size_t len, uint64_t *node, uint64_t *seq,
                          uint32_t *count)
{
    tn_ctrl_t c;
    if (len != TN_PRODUCE_CTL_LEN || tn_ctrl_decode(body, len, &c) != 0 ||
        c.kind != TN_CTRL_PRODUCER)
        return TN_EPROTO;
    *node = c.node;
    *seq = c.seq;
    *count = c.count;
    return 0;
}

/* --- the window ------------------------------------------------------------------------ */

/* One (node, seq): on its node's FIFO, oldest first. */
typedef struct ent_s {
    struct ent_s *prev, *next;
    uint64_t seq;
    uint64_t first_offset;
    bool pending;
    tn_produce_wait_t *waits;
} ent_t;

/* One accepting node's seqs. */
typedef struct {
    tn_u64map_t by_seq; /* seq -> ent_t */
    ent_t *head, *tail;
    uint32_t n;
} node_t;

struct tn_produce_window_s {
    tn_u64map_t nodes; /* node id -> node_t */
    uint32_t cap;
    size_t n;
};

int tn_produce_window_new(uint32_t cap, tn_produce_window_t **out)
{
    tn_produce_window_t *w = tn_calloc(1, sizeof(*w));
    if (w == NULL)
        return UV_ENOMEM;
    tn_u64map_init(&w->nodes);
    w->cap = cap > 0 ? cap : 1;
    *out = w;
    return 0;
}

static void answer(tn_produce_wait_t *list, int status, uint64_t first_offset)
{
    while (list != NULL) {
        tn_produce_wait_t *x = list;
        list = x->next;
        x->next = NULL;
        x->cb(x, status, first_offset);
    }
}

static void unlink_ent(tn_produce_window_t *w, node_t *nd, ent_t *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        nd->head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        nd->tail = e->prev;
    (void)tn_u64map_del(&nd->by_seq, e->seq);
    nd->n--;
    w->n--;
}

void tn_produce_window_clear(tn_produce_window_t *w, int status)
{
    size_t pos = 0;
    uint64_t id;
    void *v;
    /* Take every pending wait off first: an answer may call back into w. */
    tn_produce_wait_t *waits = NULL;
    while (tn_u64map_next(&w->nodes, &pos, &id, &v)) {
        node_t *nd = v;
        for (ent_t *e = nd->head, *next; e != NULL; e = next) {
            next = e->next;
            while (e->waits != NULL) {
                tn_produce_wait_t *x = e->waits;
                e->waits = x->next;
                x->next = waits;
                waits = x;
            }
            tn_free(e);
        }
        tn_u64map_fini(&nd->by_seq);
        tn_free(nd);
    }
    tn_u64map_fini(&w->nodes);
    tn_u64map_init(&w->nodes);
    w->n = 0;
    answer(waits, status, 0);
}

void tn_produce_window_free(tn_produce_window_t *w)
{
    if (w == NULL)
        return;
    tn_produce_window_clear(w, TN_ECLOSED);
    tn_u64map_fini(&w->nodes);
    tn_free(w);
}

size_t tn_produce_window_size(const tn_produce_window_t *w)
{
    return w->n;
}

static node_t *node_get(tn_produce_window_t *w, uint64_t node, bool create)
{
    node_t *nd = tn_u64map_get(&w->nodes, node);
    if (nd != NULL || !create)
        return nd;
    nd = tn_calloc(1, sizeof(*nd));
    if (nd == NULL)
        return NULL;
    tn_u64map_init(&nd->by_seq);
    if (tn_u64map_put(&w->nodes, node, nd) != 0) {
        tn_free(nd);
        return NULL;
    }
    return nd;
}

/* Drop the oldest stored entries of nd beyond the cap. A pending one is
 * never dropped (its first copy must still find it to answer its waits):
 * the FIFO waits behind it, over the cap, until it completes. */
static void trim(tn_produce_window_t *w, node_t *nd)
{
    while (nd->n > w->cap && nd->head != NULL && !nd->head->pending) {
        ent_t *e = nd->head;
        unlink_ent(w, nd, e);
        tn_free(e);
    }
}

static ent_t *ent_add(tn_produce_window_t *w, node_t *nd, uint64_t seq, bool pending,
                      uint64_t first_offset)
{
    ent_t *e = tn_calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->seq = seq;
    e->pending = pending;
    e->first_offset = first_offset;
    if (tn_u64map_put(&nd->by_seq, seq, e) != 0) {
        tn_free(e);
        return NULL;
    }
    e->prev = nd->tail;
    if (nd->tail != NULL)
        nd->tail->next = e;
    else
        nd->head = e;
    nd->tail = e;
    nd->n++;
    w->n++;
    trim(w, nd);
    return e;
}

int tn_produce_window_begin(tn_produce_window_t *w, uint64_t node, uint64_t seq,
                            tn_produce_wait_t *wait, uint64_t *first_offset)
{
    node_t *nd = node_get(w, node, true);
    if (nd == NULL)
        return UV_ENOMEM;
    ent_t *e = tn_u64map_get(&nd->by_seq, seq);
    if (e == NULL)
        return ent_add(w, nd, seq, true, 0) != NULL ? TN_PRODUCE_NEW : UV_ENOMEM;
    if (!e->pending) {
        *first_offset = e->first_offset;
        return TN_PRODUCE_DONE;
    }
    /* Answered in arrival order. */
    wait->next = NULL;
    tn_produce_wait_t **at = &e->waits;
    while (*at != NULL)
        at = &(*at)->next;
    *at = wait;
    return TN_PRODUCE_PENDING;
}

void tn_produce_window_complete(tn_produce_window_t *w, uint64_t node, uint64_t seq, int status,
                                uint64_t first_offset)
{
    node_t *nd = node_get(w, node, false);
    ent_t *e = nd != NULL ? tn_u64map_get(&nd->by_seq, seq) : NULL;
    if (e == NULL || !e->pending)
        return;
    tn_produce_wait_t *waits = e->waits;
    e->waits = NULL;
    if (status == 0) {
        e->pending = false;
        e->first_offset = first_offset;
        trim(w, nd);
    } else {
        unlink_ent(w, nd, e);
        tn_free(e);
    }
    answer(waits, status, first_offset);
}

int tn_produce_window_note(tn_produce_window_t *w, uint64_t node, uint64_t seq,
                           uint64_t first_offset)
{
    node_t *nd = node_get(w, node, true);
    if (nd == NULL)
        return UV_ENOMEM;
    if (tn_u64map_get(&nd->by_seq, seq) != NULL)
        return 0;
    return ent_add(w, nd, seq, false, first_offset) != NULL ? 0 : UV_ENOMEM;
}

int tn_produce_window_scan(tn_produce_window_t *w, const void *raw, size_t len)
{
    const unsigned char *p = raw;
    size_t off = 0;
    int noted = 0;
    while (off < len) {
        tn_rec_t rec;
        if (tn_rec_decode(p + off, len - off, &rec) != 0)
            break;
        uint64_t node, seq;
        uint32_t count;
        bool ctl = (rec.h.flags & TN_REC_F_CONTROL) != 0 && rec.h.key_len == 0;
        if (ctl && tn_produce_ctl_decode(rec.body, rec.h.body_len, &node, &seq, &count) == 0) {
            int rc = tn_produce_window_note(w, node, seq, rec.h.offset + 1);
            if (rc != 0)
                return rc;
            noted++;
        }
        off += (size_t)tn_rec_size(&rec.h);
    }
    return noted;
}

/* --- the leader side ------------------------------------------------------------------ */

/* A partition's window, keyed by (topic, partition). */
typedef struct pw_s {
    struct pw_s *next; /* same hash */
    uint32_t partition;
    char topic[256];
    tn_produce_window_t *w;
    uint32_t rebuilding; /* log-tail reads under way: answer 503 meanwhile */
    uint64_t gen;        /* bumped by every promotion and resignation */
} pw_t;

struct tn_produce_server_s {
    tn_produce_server_opts_t o;
    tn_u64map_t windows; /* hash(topic, partition) -> pw_t chain */
    bool closing;
    tn_produce_stats_t st;
};

/* One PRODUCE being served. */
typedef struct {
    tn_produce_server_t *s;
    tn_rpc_req_t *req;        /* NULL: a local call (tn_produce_local) */
    tn_produce_call_t *local; /* its caller's call */
    tn_pub_t pub;
    tn_produce_wait_t wait; /* a retry of a pending (node, seq) */
    bool entered;           /* (node, seq) entered pending: complete it */
    uint32_t count;
    uint64_t node, seq;
    uint32_t partition;
    size_t topic_len;
    char topic[256];
} prod_t;

static uint64_t pw_hash(const char *topic, uint32_t p)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *c = topic; *c != '\0'; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    h = (h ^ p) * 1099511628211ull;
    return h;
}

static pw_t *pw_find(tn_produce_server_t *s, const char *topic, uint32_t p, bool create)
{
    uint64_t h = pw_hash(topic, p);
    pw_t *head = tn_u64map_get(&s->windows, h);
    for (pw_t *x = head; x != NULL; x = x->next)
        if (x->partition == p && strcmp(x->topic, topic) == 0)
            return x;
    if (!create)
        return NULL;
    pw_t *x = tn_calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    if (tn_produce_window_new(TN_PRODUCE_WINDOW, &x->w) != 0) {
        tn_free(x);
        return NULL;
    }
    x->partition = p;
    snprintf(x->topic, sizeof(x->topic), "%s", topic);
    x->next = head;
    if (tn_u64map_put(&s->windows, h, x) != 0) {
        tn_produce_window_free(x->w);
        tn_free(x);
        return NULL;
    }
    return x;
}

int tn_produce_server_new(const tn_produce_server_opts_t *o, tn_produce_server_t **out)
{
    tn_produce_server_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->o = *o;
    tn_u64map_init(&s->windows);
    *out = s;
    return 0;
}

void tn_produce_server_set_accepts(tn_produce_server_t *s, tn_produce_accepts_fn fn, void *arg)
{
    s->o.accepts = fn;
    s->o.accepts_arg = arg;
}

static void server_release(tn_produce_server_t *s)
{
    size_t pos = 0;
    uint64_t h;
    void *v;
    while (tn_u64map_next(&s->windows, &pos, &h, &v)) {
        for (pw_t *x = v, *next; x != NULL; x = next) {
            next = x->next;
            tn_produce_window_free(x->w);
            tn_free(x);
        }
    }
    tn_u64map_fini(&s->windows);
    tn_free(s);
}

void tn_produce_server_free(tn_produce_server_t *s)
{
    if (s == NULL)
        return;
    s->closing = true;
    if (s->st.inflight == 0)
        server_release(s);
}

void tn_produce_server_stats(const tn_produce_server_t *s, tn_produce_stats_t *out)
{
    *out = s->st;
}

int tn_produce_server_rebuild(tn_produce_server_t *s, const char *topic, uint32_t p,
                              const void *raw, size_t len)
{
    pw_t *x = pw_find(s, topic, p, true);
    if (x == NULL)
        return UV_ENOMEM;
    int rc = tn_produce_window_scan(x->w, raw, len);
    return rc < 0 ? rc : 0;
}

/* A log-tail read for a new leader's window: the PRODUCER records found
 * (worker thread), entered on the loop. */
typedef struct {
    uv_work_t work;
    tn_produce_server_t *s;
    tn_plog_t *pl;
    char topic[256];
    uint32_t partition;
    uint64_t gen; /* the window's when the read began */
    int err;
    size_t n, cap;
    struct {
        uint64_t node, seq, first;
    } * found;
} rebuild_t;

static void rebuild_work(uv_work_t *w)
{
    rebuild_t *rb = TN_CONTAINER_OF(w, rebuild_t, work);
    tn_plog_stats_t st;
    tn_plog_stats(rb->pl, &st);
    uint64_t end = st.written_next;
    uint64_t from = end > TN_PRODUCE_REBUILD_RECORDS ? end - TN_PRODUCE_REBUILD_RECORDS : 0;
    if (from < st.first_offset)
        from = st.first_offset;
    tn_buf_t buf;
    tn_buf_init(&buf);
    size_t total = 0;
    while (from < end && total < TN_PRODUCE_REBUILD_BYTES) {
        uint32_t count = 0;
        tn_buf_reset(&buf);
        int rc = tn_plog_read_raw(rb->pl, from, 1u << 20, &buf, &count);
        if (rc == TN_EGAP) {
            from++; /* a hole recovery skipped: nothing there */
            continue;
        }
        if (rc != 0 || count == 0) {
            rb->err = rc;
            break;
        }
        const unsigned char *p = (const unsigned char *)tn_buf_data(&buf);
        size_t len = tn_buf_size(&buf), off = 0;
        while (off < len) {
            tn_rec_t rec;
            if (tn_rec_decode(p + off, len - off, &rec) != 0)
                break;
            uint64_t node, seq;
            uint32_t n;
            if ((rec.h.flags & TN_REC_F_CONTROL) != 0 &&
                tn_produce_ctl_decode(rec.body, rec.h.body_len, &node, &seq, &n) == 0) {
                if (rb->n == rb->cap) {
                    size_t cap = rb->cap > 0 ? rb->cap * 2 : 64;
                    void *grown = tn_realloc(rb->found, cap * sizeof(*rb->found));
                    if (grown == NULL) {
                        rb->err = UV_ENOMEM;
                        tn_buf_fini(&buf);
                        return;
                    }
                    rb->found = grown;
                    rb->cap = cap;
                }
                rb->found[rb->n].node = node;
                rb->found[rb->n].seq = seq;
                rb->found[rb->n].first = rec.h.offset + 1;
                rb->n++;
            }
            off += (size_t)tn_rec_size(&rec.h);
        }
        total += len;
        from += count;
    }
    tn_buf_fini(&buf);
}

static void rebuild_done(uv_work_t *w, int status)
{
    rebuild_t *rb = TN_CONTAINER_OF(w, rebuild_t, work);
    tn_produce_server_t *s = rb->s;
    pw_t *x = pw_find(s, rb->topic, rb->partition, false);
    /* Entered only into the term that asked: after a resignation (or
     * another promotion) what this read found may have been truncated. */
    if (x != NULL && x->gen == rb->gen) {
        for (size_t i = 0; i < rb->n; i++)
            if (tn_produce_window_note(x->w, rb->found[i].node, rb->found[i].seq,
                                       rb->found[i].first) != 0)
                break;
    }
    if (x != NULL)
        x->rebuilding--;
    tn_plog_unpin(rb->pl); /* tn_produce_server_rebuild_log pinned it */
    if (status != 0 || rb->err != 0)
        TN_LOG(TN_LOG_WARN,
               "produce window of %s/%" PRIu32 ": reading the log tail stopped early (%s); "
               "a retry of a batch stored before it could be stored again",
               rb->topic, rb->partition, tn_strerror(status != 0 ? status : rb->err));
    tn_free(rb->found);
    tn_free(rb);
    s->st.inflight--;
    if (s->closing && s->st.inflight == 0)
        server_release(s);
}

int tn_produce_server_rebuild_log(tn_produce_server_t *s, const char *topic, uint32_t p,
                                  tn_plog_t *pl)
{
    pw_t *x = pw_find(s, topic, p, true);
    rebuild_t *rb = tn_calloc(1, sizeof(*rb));
    if (x == NULL || rb == NULL) {
        tn_free(rb);
        return UV_ENOMEM;
    }
    rb->s = s;
    rb->pl = pl;
    snprintf(rb->topic, sizeof(rb->topic), "%s", topic);
    rb->partition = p;
    /* A new term: what the window held from an earlier one may name
     * records a truncation removed since; the log is the truth. */
    tn_produce_window_clear(x->w, TN_EREMOTE);
    rb->gen = ++x->gen;
    /* The engine's log: it may close it while the worker reads (its topic
     * deleted just after this node took the lead); pinned, it stays until
     * rebuild_done. */
    tn_plog_pin(pl);
    int rc = uv_queue_work(s->o.loop, &rb->work, rebuild_work, rebuild_done);
    if (rc != 0) {
        tn_plog_unpin(pl);
        tn_free(rb);
        return rc;
    }
    x->rebuilding++;
    s->st.inflight++;
    return 0;
}

void tn_produce_server_resign(tn_produce_server_t *s, const char *topic, uint32_t p, int status)
{
    pw_t *x = pw_find(s, topic, p, false);
    if (x != NULL) {
        x->gen++;
        tn_produce_window_clear(x->w, status);
    }
}

static void finish(prod_t *c, uint16_t status, const char *body, size_t len)
{
    tn_produce_server_t *s = c->s;
    if (status >= 500)
        s->st.failed++;
    else if (status >= 400)
        s->st.refused++;
    tn_rpc_req_t *req = c->req;
    tn_produce_call_t *local = c->local;
    tn_pub_fini(&c->pub);
    tn_free(c);
    s->st.inflight--;
    if (req != NULL)
        tn_rpc_reply(req, status, JSON, body, len);
    else
        local->cb(local, tn_produce_reply_decode(status, (const uint8_t *)body, len, local));
    if (s->closing && s->st.inflight == 0)
        server_release(s);
}

static void finish_error(prod_t *c, uint16_t status, const char *msg, const char *reason)
{
    char body[512];
    int n;
    if (reason != NULL)
        n = snprintf(body, sizeof(body), "{\"error\":\"%s\",\"reason\":\"%s\"}", msg, reason);
    else
        n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", msg);
    finish(c, status, body, (size_t)TN_MIN((size_t)n, sizeof(body) - 1));
}

static void finish_ok(prod_t *c, uint64_t first_offset)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "{\"first_offset\":%" PRIu64 "}", first_offset);
    finish(c, 200, body, (size_t)n);
}

static void finish_not_leader(prod_t *c)
{
    tn_produce_server_t *s = c->s;
    uint64_t leader =
        s->o.leader != NULL ? s->o.leader(s->o.leader_arg, c->topic, c->partition) : 0;
    char body[512], node[24];
    if (leader != 0)
        snprintf(node, sizeof(node), "\"%" PRIu64 "\"", leader);
    else
        snprintf(node, sizeof(node), "null");
    int n = snprintf(body, sizeof(body),
                     "{\"error\":\"this node does not lead partition %" PRIu32 " of %s\","
                     "\"leader_node\":%s}",
                     c->partition, c->topic, node);
    finish(c, 421, body, (size_t)TN_MIN((size_t)n, sizeof(body) - 1));
}

static void finish_status(prod_t *c, int status)
{
    char msg[320];
    switch (status) {
    case TN_EREMOTE:
        finish_not_leader(c);
        return;
    case TN_EFENCED:
        finish_error(c, 409, "stale leader epoch (fenced)", NULL);
        return;
    case TN_EFEWREPLICAS:
        finish_error(c, 503, "not enough in-sync replicas", "few_replicas");
        return;
    case TN_ENOTFOUND:
    case UV_EBUSY:
        snprintf(msg, sizeof(msg), "no topic %s on this node", c->topic);
        finish_error(c, 404, msg, NULL);
        return;
    case UV_EINVAL:
        snprintf(msg, sizeof(msg), "no partition %" PRIu32 " in topic %s", c->partition, c->topic);
        finish_error(c, 416, msg, NULL);
        return;
    case TN_EDISKHIGH:
        finish_error(c, 507, "disk usage is above the high watermark; writes refused", NULL);
        return;
    case TN_ECLOSED:
        finish_error(c, 503, "this node is shutting down", NULL);
        return;
    default:
        snprintf(msg, sizeof(msg), "the produce failed: %s", tn_strerror(status));
        finish_error(c, 503, msg, NULL);
        return;
    }
}

/* The window of c's partition, or NULL when it went (resigned). */
static tn_produce_window_t *window_of(prod_t *c)
{
    pw_t *x = pw_find(c->s, c->topic, c->partition, false);
    return x != NULL ? x->w : NULL;
}

static void on_stored(tn_pub_t *p, int status)
{
    prod_t *c = p->data;
    /* first_offset is the control record's; the batch follows it. */
    uint64_t first = p->first_offset + CTL_RECS;
    tn_produce_window_t *w = window_of(c);
    if (w != NULL && c->entered)
        tn_produce_window_complete(w, c->node, c->seq, status, first);
    if (status != 0) {
        finish_status(c, status);
        return;
    }
    c->s->st.produces++;
    c->s->st.records += c->count;
    finish_ok(c, first);
}

static void on_first_copy(tn_produce_wait_t *wait, int status, uint64_t first_offset)
{
    prod_t *c = wait->data;
    if (status != 0) {
        finish_status(c, status);
        return;
    }
    c->s->st.duplicates++;
    finish_ok(c, first_offset);
}

/* Copy the request's records into c->pub behind the PRODUCER control
 * record. 0, UV_EINVAL with msg, or UV_ENOMEM. */
static int prod_fill(prod_t *c, const tn_wire_produce_t *wp, uint8_t ctl[TN_PRODUCE_CTL_LEN],
                     char *msg, size_t msglen)
{
    tn_rec_in_t *recs = tn_calloc((size_t)c->count + CTL_RECS, sizeof(*recs));
    if (recs == NULL)
        return UV_ENOMEM;
    tn_produce_ctl_encode(ctl, c->node, c->seq, c->count);
    recs[0] = (tn_rec_in_t){.key = tn_iov(NULL, 0), .body = tn_iov(ctl, TN_PRODUCE_CTL_LEN)};
    tn_wire_produce_t it = *wp;
    tn_commit_rec_t rec;
    for (uint32_t i = 0; tn_wire_produce_next(&it, &rec); i++) {
        if (rec.deliver_at_ms < 0 || rec.created_ms < 0) {
            snprintf(msg, msglen, "record %" PRIu32 " has a negative time", i);
            tn_free(recs);
            return UV_EINVAL;
        }
        recs[i + CTL_RECS] =
            (tn_rec_in_t){.key = rec.key, .body = rec.body, .deliver_at_ms = rec.deliver_at_ms};
    }
    int rc = tn_pub_fill(&c->pub, recs);
    tn_free(recs);
    /* The first is the control record, in the same atomic batch
     * (TN_REC_F_MORE chain) as the rest. */
    c->pub.ncontrol = CTL_RECS;
    return rc;
}

/* Serve one request (payload: the fields after the opcode), answering
 * through c->req or c->local. */
static void serve(prod_t *c, const uint8_t *payload, size_t len)
{
    tn_produce_server_t *s = c->s;
    if (s->closing) {
        finish_error(c, 503, "this node is shutting down", NULL);
        return;
    }
    tn_wire_produce_t wp;
    char msg[320];
    int rc = tn_wire_produce_decode(payload, len, s->o.broker->store->opts.max_body, &wp, msg,
                                    sizeof(msg));
    if (rc != 0) {
        finish_error(c, 400, msg, NULL);
        return;
    }
    c->topic_len = strlen(wp.h.topic);
    if (!tn_name_valid_any(wp.h.topic, c->topic_len)) {
        finish_error(c, 400, "invalid topic name", NULL);
        return;
    }
    memcpy(c->topic, wp.h.topic, c->topic_len + 1);
    c->partition = wp.h.partition;
    c->count = wp.count;
    c->node = wp.h.node;
    c->seq = wp.h.seq;

    /* Leader and epoch first: a node that does not lead answers nothing
     * from a window it may keep from an earlier term. */
    uint32_t epoch = 0;
    if (s->o.accepts != NULL) {
        rc = s->o.accepts(s->o.accepts_arg, c->topic, c->partition, &epoch);
        if (rc != 0) {
            finish_status(c, rc);
            return;
        }
        if (wp.h.leader_epoch != 0 && wp.h.leader_epoch < epoch) {
            finish_status(c, TN_EFENCED);
            return;
        }
        if (wp.h.leader_epoch > epoch) {
            /* The caller knows a newer epoch than this leader: this node
             * was deposed and does not know it yet. */
            finish_not_leader(c);
            return;
        }
    }
    pw_t *x = pw_find(s, c->topic, c->partition, true);
    if (x == NULL) {
        finish_error(c, 503, "out of memory", NULL);
        return;
    }
    if (x->rebuilding > 0) {
        finish_error(c, 503, "the new leader is reading its log for earlier batches; retry", NULL);
        return;
    }
    uint64_t first = 0;
    c->wait.cb = on_first_copy;
    c->wait.data = c;
    rc = tn_produce_window_begin(x->w, c->node, c->seq, &c->wait, &first);
    if (rc < 0) {
        finish_error(c, 503, "out of memory", NULL);
        return;
    }
    if (rc == TN_PRODUCE_DONE) {
        s->st.duplicates++;
        finish_ok(c, first);
        return;
    }
    if (rc == TN_PRODUCE_PENDING)
        return; /* on_first_copy */
    c->entered = true;
    uint8_t ctl[TN_PRODUCE_CTL_LEN];
    rc = tn_pub_init(&c->pub, c->count + CTL_RECS);
    if (rc == 0)
        rc = prod_fill(c, &wp, ctl, msg, sizeof(msg));
    if (rc != 0) {
        tn_produce_window_complete(x->w, c->node, c->seq, rc, 0);
        if (rc == UV_EINVAL)
            finish_error(c, 400, msg, NULL);
        else
            finish_error(c, 503, "out of memory", NULL);
        return;
    }
    c->pub.data = c;
    c->pub.pinned = true;
    c->pub.pin = c->partition;
    rc = tn_broker_publish(s->o.broker, c->topic, c->topic_len, &c->pub, 0, on_stored);
    if (rc != 0) {
        tn_produce_window_complete(x->w, c->node, c->seq, rc, 0);
        finish_status(c, rc);
    }
}

static void on_produce(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_produce_server_t *s = arg;
    prod_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        s->st.failed++;
        tn_rpc_reply(req, 503, JSON, oom, strlen(oom));
        return;
    }
    c->s = s;
    c->req = req;
    s->st.inflight++;
    serve(c, payload, len);
}

int tn_produce_local(tn_produce_server_t *s, const tn_buf_t *req, tn_produce_call_t *call,
                     tn_produce_cb cb)
{
    prod_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    call->first_offset = 0;
    call->leader = 0;
    call->http_status = 0;
    call->error[0] = '\0';
    call->call = NULL;
    call->cb = cb;
    c->s = s;
    c->local = call;
    s->st.inflight++;
    serve(c, (const uint8_t *)tn_buf_data(req), tn_buf_size(req));
    return 0;
}

void tn_produce_server_handlers(tn_produce_server_t *s, tn_rpc_handler_t *out, size_t *n)
{
    out[0] = (tn_rpc_handler_t){TN_OP_PRODUCE, TN_RPC_OP_COMMIT, on_produce, s};
    *n = TN_PRODUCE_HANDLERS;
}

/* --- the caller side ------------------------------------------------------------------ */

static void set_error(tn_produce_call_t *c, const char *msg)
{
    snprintf(c->error, sizeof(c->error), "%s", msg);
}

int tn_produce_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_produce_call_t *c)
{
    tn_store_reply_t r;
    int rc = tn_store_reply_decode(status, body, len, "produce", "leader_node", &r);
    c->http_status = status;
    c->first_offset = r.first_offset;
    c->leader = r.node;
    set_error(c, r.error);
    if (rc != TN_STORE_REPLY_ERROR)
        return rc;
    switch (status) {
    case 409:
        return TN_EFENCED;
    case 503:
        return strcmp(r.reason, "few_replicas") == 0 ? TN_EFEWREPLICAS : UV_EAGAIN;
    case 400:
        return UV_EINVAL;
    case 404:
        return TN_ENOTFOUND;
    case 416:
        return UV_ERANGE;
    case 507:
        return TN_EDISKHIGH;
    default:
        return TN_EPROTO;
    }
}

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    tn_produce_call_t *c = arg;
    c->call = NULL;
    if (status != 0) {
        c->http_status = 0;
        set_error(c, err != NULL ? err : tn_strerror(status));
        c->cb(c, status);
        return;
    }
    c->cb(c, tn_produce_reply_decode(reply->status, reply->body, reply->body_len, c));
}

int tn_produce_call(tn_rpc_t *rpc, const char *peer_addr, const tn_buf_t *req, uint64_t timeout_ms,
                    tn_produce_call_t *c, tn_produce_cb cb)
{
    if (tn_buf_size(req) + 1 > TN_WIRE_MAX_PAYLOAD)
        return TN_ETOOBIG;
    c->first_offset = 0;
    c->leader = 0;
    c->http_status = 0;
    c->error[0] = '\0';
    c->cb = cb;
    return tn_rpc_call(rpc, peer_addr, TN_OP_PRODUCE, tn_buf_data(req), tn_buf_size(req),
                       timeout_ms, on_reply, c, &c->call);
}

void tn_produce_call_cancel(tn_produce_call_t *c)
{
    if (c->call != NULL)
        tn_rpc_call_cancel(c->call);
}
