/* Consumes of the native API. See consume.h. */
#include "core/platform.h"

#include "api/consume.h"

#include "api/quota.h"
#include "api/v1/common.h"
#include "cluster/wire.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "proto/http/json.h"
#include "proto/nsq/clientstats.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SWEEP_MS         1000
#define FETCH_GRACE_MS   1000
#define JSON_PAYLOAD_MAX (4u << 20) /* larger payloads are not parsed to tell JSON */

typedef struct lane_s lane_t;
typedef struct poll_s poll_t;

/* A message a batch took and has not answered yet: nacked when its asker
 * goes. */
typedef struct {
    uint32_t partition;
    uint32_t nonce;
    uint64_t offset;
} taken_t;

/* The HTTP implementation of a parked consumer. */
typedef struct {
    tn_consume_parked_t pk;
    tn_http_request_t *r;
} http_parked_t;

/* A consume request from its start to its answer. */
struct poll_s {
    tn_consume_t *cs;
    tn_consume_parked_t *pk; /* NULL once answered or the asker left */
    http_parked_t http;      /* pk for an HTTP request */
    taken_t *taken;          /* a batch's messages so far (want entries) */
    tn_consume_args_t a;
    char ident[72];
    uint32_t charge; /* counted against its identity */
    tn_waiter_t wait;
    bool waiting; /* on an engine waiter: freed when it fires */
    bool held;    /* looked at by expire: freed there */
    bool done;    /* answered (or abandoned) and unlinked */
    lane_t *lane; /* parked: in lane's queue */
    poll_t *prev;
    poll_t *next;
    tn_heap_node_t deadline; /* key: monotonic ms */
    int64_t started_ms;
    uint32_t want; /* messages it may still take */
    uint32_t got;
    tn_buf_t out; /* batch: the messages so far, comma separated */
};

/* One pulling consumer of the engine and the requests parked on it. */
struct lane_s {
    tn_consumer_t c;
    tn_consume_t *cs;
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1];
    poll_t *head;
    poll_t *tail;
    uint32_t want;     /* sum over its polls: the consumer's credit */
    int64_t started_s; /* wall clock, seconds: its connect_ts in /stats */
    lane_t *next;
};

struct tn_consume_s {
    uv_loop_t *loop;
    tn_broker_t *broker;
    tn_consume_opts_t o;
    lane_t *lanes;
    tn_quota_t quota;
    tn_heap_t deadlines;
    uv_timer_t timer;
    int64_t timer_at;
    int64_t next_sweep;
    uint32_t waiting; /* polls on engine waiters */
    bool closing;
    bool draining; /* tn_consume_drain: nothing parks */
    bool timer_closed;
};

static void arm(tn_consume_t *cs);

/* --- rendering ------------------------------------------------------------- */

static bool json_valid(const char *data, size_t len)
{
    return len <= JSON_PAYLOAD_MAX && tn_json_valid(data, len);
}

static void base64(tn_buf_t *b, const void *data, size_t len)
{
    size_t n = 4 * ((len + 2) / 3);
    if (tn_buf_reserve(b, n + 1) != 0)
        return;
    EVP_EncodeBlock((unsigned char *)b->base + b->len, data, (int)len);
    b->len += n;
}

/* "name":<bytes> as JSON if they are JSON (payloads only), else a string
 * if UTF-8, else base64 with "<name>_encoding":"base64". */
static void bytes_field(tn_buf_t *b, const char *name, const char *data, size_t len, bool as_json)
{
    tn__v1_appendf(b, ",\"%s\":", name);
    if (as_json && json_valid(data, len)) {
        tn_buf_append(b, data, len);
    } else if (tn_utf8_valid(data, len)) {
        tn_buf_append(b, "\"", 1);
        tn_buf_json_escape_n(b, data, len);
        tn_buf_append(b, "\"", 1);
    } else {
        tn_buf_append(b, "\"", 1);
        base64(b, data, len);
        tn__v1_appendf(b, "\",\"%s_encoding\":\"base64\"", name);
    }
}

void tn_consume_render(tn_buf_t *b, const char *topic, const tn_consume_item_t *m)
{
    tn_buf_append(b, "{\"topic\":\"", 10);
    tn_buf_json_escape(b, topic);
    tn__v1_appendf(b, "\",\"partition\":%" PRIu32 ",\"offset\":%" PRIu64, m->partition, m->offset);
    if (m->key != NULL && m->key->len > 0)
        bytes_field(b, "key", m->key->data, m->key->len, false);
    bytes_field(b, "payload", m->body->data, m->body->len, true);
    tn__v1_appendf(b, ",\"timestamp\":%" PRId64, m->publish_ns / 1000000000);
    if (m->nonce != 0)
        tn__v1_appendf(b,
                       ",\"attempts\":%" PRIu32 ",\"receipt_handle\":\"%" PRIu32 ":%" PRIu64
                       ":%" PRIu32 "\"",
                       m->attempts, m->partition, m->offset, m->nonce);
    tn_buf_append(b, "}", 1);
}

/* --- lanes ----------------------------------------------------------------- */

static void lane_credit(lane_t *l)
{
    tn_consumer_credit(&l->c, l->want);
}

static void lane_free(lane_t *l)
{
    tn_consume_t *cs = l->cs;
    for (lane_t **pp = &cs->lanes; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    tn_consumer_detach(&l->c);
    tn_free(l);
}

/* Take p out of its lane, the deadlines and its identity's count. */
static void poll_unlink(poll_t *p)
{
    tn_consume_t *cs = p->cs;
    p->done = true;
    tn_quota_give(&cs->quota, p->ident, p->charge);
    p->charge = 0;
    if (tn_heap_contains(&p->deadline))
        tn_heap_remove(&cs->deadlines, &p->deadline);
    lane_t *l = p->lane;
    p->lane = NULL;
    if (l != NULL) {
        if (p->prev != NULL)
            p->prev->next = p->next;
        else
            l->head = p->next;
        if (p->next != NULL)
            p->next->prev = p->prev;
        else
            l->tail = p->prev;
        l->want -= p->want;
        p->want = 0;
        lane_credit(l);
    }
}

static void poll_free(poll_t *p)
{
    poll_unlink(p);
    if (p->waiting || p->held)
        return; /* freed by on_ready or expire */
    tn_buf_fini(&p->out);
    tn_free(p->taken);
    tn_free(p);
}

static void error(tn_http_request_t *r, int status, const char *msg)
{
    tn__v1_error(r, status, msg, status == 503 || status == 429 ? "Retry-After: 1\r\n" : NULL);
}

/* An {"error":msg} body as tn__v1_error writes it. */
static void error_body(tn_buf_t *b, const char *msg)
{
    tn_buf_append(b, "{\"error\":\"", 10);
    tn_buf_json_escape(b, msg);
    tn_buf_append(b, "\"}\n", 3);
}

/* The HTTP parked consumer's answer: the /v1 route's response. */
static void http_answer(tn_consume_parked_t *pk, int status, const char *body, size_t len)
{
    http_parked_t *h = pk->data;
    tn_http_request_t *r = h->r;
    r->on_cancel = NULL;
    h->r = NULL;
    if (status == 204)
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
    else
        tn_http_respond(r, status, TN__V1_JSON,
                        status == 503 || status == 429 ? "Retry-After: 1\r\n" : NULL, body, len);
}

/* Answer p (if its asker is still there) and free it. */
static void finish(poll_t *p, int status, const char *msg)
{
    tn_consume_parked_t *pk = p->pk;
    if (pk != NULL) {
        p->pk = NULL;
        pk->priv = NULL;
        tn_buf_t b;
        tn_buf_init(&b);
        if (status == 200 && p->a.max > 0) {
            tn_buf_append(&b, "{\"messages\":[", 13);
            tn_buf_append(&b, tn_buf_data(&p->out), tn_buf_size(&p->out));
            tn_buf_append(&b, "]}\n", 3);
        } else if (status == 200) {
            tn_buf_append(&b, tn_buf_data(&p->out), tn_buf_size(&p->out));
            tn_buf_append(&b, "\n", 1);
        } else if (status != 204) {
            error_body(&b, msg);
        }
        pk->answer(pk, status, tn_buf_data(&b), tn_buf_size(&b));
        tn_buf_fini(&b);
    }
    poll_free(p);
}

static void on_deliver(tn_consumer_t *c, const tn_delivery_t *d)
{
    lane_t *l = c->data;
    poll_t *p = l->head;
    while (p != NULL && p->want == 0)
        p = p->next;
    if (p == NULL) {
        /* Nobody asked (should not happen): it goes back at once. A REQ
         * refused (out of memory) would keep it leased to nobody's poll
         * for the whole visibility timeout: its lease ends now instead
         * (tn_consumer_put_back). */
        tn_consumer_put_back(c, d->partition, d->offset, true, d->nonce, 0);
        return;
    }
    tn_consume_item_t m = {d->partition,  d->offset, d->nonce, d->attempts,
                           d->publish_ns, d->body,   d->key};
    if (p->got > 0)
        tn_buf_append(&p->out, ",", 1);
    tn_consume_render(&p->out, l->topic, &m);
    if (p->taken != NULL)
        p->taken[p->got] = (taken_t){d->partition, d->nonce, d->offset};
    if (d->nonce != 0 && p->pk != NULL && p->pk->delivered != NULL)
        p->pk->delivered(p->pk, d->partition, d->offset, d->nonce);
    p->got++;
    p->want--;
    l->want--;
    if (p->a.max == 0 || p->want == 0) {
        finish(p, 200, NULL);
        return;
    }
    /* A batch: answered on the next loop turn, once the engine has handed
     * out what is ready. */
    tn_heap_update(&l->cs->deadlines, &p->deadline, 0);
    arm(l->cs);
}

static void on_kick(tn_consumer_t *c)
{
    lane_t *l = c->data;
    while (l->head != NULL) {
        poll_t *p = l->head;
        if (p->got > 0)
            finish(p, 200, NULL);
        else if (c->replaced)
            finish(p, 503,
                   "the channel is being made again here (deleted and recreated "
                   "elsewhere meanwhile); retry");
        else
            finish(p, 404, "the topic or channel was deleted");
    }
    lane_free(l);
}

/* A partition of the lane's topic that this node served is now led by
 * another node (a move's hand-over, a failover; docs/cluster.md "What
 * clients see at the hand-over"): a poll parked here may be waiting for
 * messages this node no longer delivers. Each is answered now, with what
 * it has (200) or nothing (204), rather than at the end of its wait; its
 * client asks again and is routed to the new leader. A lane pinned to a
 * partition still served here keeps its polls. The lane stays attached:
 * its leases on the partitions still served here go on. */
static void on_left(tn_consumer_t *c)
{
    lane_t *l = c->data;
    if (l->c.pinned) {
        tn_topic_t *t = NULL;
        if (tn_broker_topic(l->cs->broker, l->topic, strlen(l->topic), false, 0, NULL, &t) == 0 &&
            tn_topic_part_local(t, l->c.pin))
            return;
    }
    while (l->head != NULL) {
        poll_t *p = l->head;
        finish(p, p->got > 0 ? 200 : 204, NULL);
    }
}

/* The lane in /stats: one client entry for every /v1 long poll on it. */
static void describe(tn_consumer_t *c, const tn_pubs_filter_t *f, tn_buf_t *out)
{
    lane_t *l = c->data;
    tn_nsq_client_stats_t s = {
        .client_id = "http",
        .remote_address = "http",
        .user_agent = "tern-http-consume",
        .state = TN_NSQ_STATE_SUBSCRIBED,
        .ready_count = l->want,
        .in_flight_count = tn_consumer_inflight(c),
        .message_count = c->message_count,
        .finish_count = c->finish_count,
        .requeue_count = c->requeue_count,
        .connect_ts = l->started_s,
    };
    tn_nsq_client_stats_json(out, &s, f);
}

static lane_t *lane_find(tn_consume_t *cs, const char *topic, const char *channel, bool pinned,
                         uint32_t pin)
{
    for (lane_t *l = cs->lanes; l != NULL; l = l->next) {
        if (l->c.pinned == pinned && (!pinned || l->c.pin == pin) && strcmp(l->topic, topic) == 0 &&
            strcmp(l->channel, channel) == 0)
            return l;
    }
    return NULL;
}

static lane_t *lane_get(tn_consume_t *cs, tn_channel_t *ch, const tn_consume_args_t *a)
{
    lane_t *l = lane_find(cs, a->topic, a->channel, a->pinned, a->partition);
    if (l != NULL && l->c.ch == ch)
        return l;
    if (l != NULL)
        lane_free(l); /* of a channel since deleted and made again */
    l = tn_calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->cs = cs;
    snprintf(l->topic, sizeof(l->topic), "%s", a->topic);
    snprintf(l->channel, sizeof(l->channel), "%s", a->channel);
    l->c.deliver = on_deliver;
    l->c.kick = on_kick;
    l->c.left = on_left;
    l->c.describe = describe;
    l->c.data = l;
    l->started_s = tn_now_wall_ms() / 1000;
    l->c.pull = true;
    l->c.pinned = a->pinned;
    l->c.pin = a->partition;
    l->c.timeout_ms = a->visibility_ms;
    tn_consumer_attach(&l->c, ch);
    l->next = cs->lanes;
    cs->lanes = l;
    return l;
}

static void sweep(tn_consume_t *cs)
{
    lane_t *l = cs->lanes;
    while (l != NULL) {
        lane_t *next = l->next;
        if (l->head == NULL && tn_consumer_inflight(&l->c) == 0)
            lane_free(l);
        l = next;
    }
}

/* --- parking ----------------------------------------------------------------- */

static void on_timer(uv_timer_t *h);

static void arm(tn_consume_t *cs)
{
    if (cs->closing)
        return;
    int64_t at = cs->lanes != NULL ? cs->next_sweep : INT64_MAX;
    tn_heap_node_t *n = tn_heap_min(&cs->deadlines);
    if (n != NULL && n->key < at)
        at = n->key;
    if (at == INT64_MAX) {
        uv_timer_stop(&cs->timer);
        cs->timer_at = INT64_MAX;
        return;
    }
    if (at == cs->timer_at && uv_is_active((uv_handle_t *)&cs->timer))
        return;
    int64_t now = tn_now_mono_ms();
    cs->timer_at = at;
    uv_timer_start(&cs->timer, on_timer, at > now ? (uint64_t)(at - now) : 0, 0);
}

static bool fetching(const tn_channel_t *ch, const poll_t *p)
{
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        if ((!p->a.pinned || i == p->a.partition) && ch->parts[i]->waiting_fetch)
            return true;
    }
    return false;
}

/* A poll whose time came: a batch with messages is answered with them;
 * otherwise the channel is looked at once more before 204. */
static void expire(poll_t *p, int64_t now)
{
    if (p->got > 0) {
        finish(p, 200, NULL);
        return;
    }
    tn_channel_t *ch = p->lane != NULL ? p->lane->c.ch : NULL;
    if (ch == NULL) {
        finish(p, 204, NULL);
        return;
    }
    tn_heap_update(&p->cs->deadlines, &p->deadline, INT64_MAX);
    p->held = true;
    tn_channel_pump_now(ch); /* may answer p */
    p->held = false;
    if (p->done) {
        poll_free(p);
        return;
    }
    if (p->got > 0) {
        finish(p, 200, NULL);
    } else if (fetching(ch, p) && now - p->started_ms < p->a.wait_ms + FETCH_GRACE_MS) {
        tn_heap_update(&p->cs->deadlines, &p->deadline, now + 10);
    } else {
        finish(p, 204, NULL);
    }
}

static void on_timer(uv_timer_t *h)
{
    tn_consume_t *cs = h->data;
    int64_t now = tn_now_mono_ms();
    cs->timer_at = INT64_MAX;
    for (;;) {
        tn_heap_node_t *n = tn_heap_min(&cs->deadlines);
        if (n == NULL || n->key > now)
            break;
        expire(TN_CONTAINER_OF(n, poll_t, deadline), now);
    }
    if (now >= cs->next_sweep) {
        cs->next_sweep = now + SWEEP_MS;
        sweep(cs);
    }
    arm(cs);
}

/* p's asker left before its answer: what a batch took goes back at once
 * (not at the end of its leases), and p goes. There is nobody to tell of
 * a nack refused (out of memory, a log that cannot take the record), and
 * p's handles die with it: such a message's lease ends at the engine's
 * next wake instead (tn_consumer_put_back), not after the visibility
 * timeout. */
static void abandon(poll_t *p)
{
    p->pk = NULL;
    if (p->lane != NULL && p->taken != NULL) {
        for (uint32_t i = 0; i < p->got; i++)
            tn_consumer_put_back(&p->lane->c, p->taken[i].partition, p->taken[i].offset, true,
                                 p->taken[i].nonce, 0);
    }
    poll_free(p);
}

static void on_cancel(tn_http_request_t *r)
{
    poll_t *p = r->data;
    p->http.r = NULL;
    abandon(p);
}

void tn_consume_parked_cancel(tn_consume_parked_t *pk)
{
    poll_t *p = pk->priv;
    if (p == NULL)
        return;
    pk->priv = NULL;
    abandon(p);
}

/* The channel is ready: join the lane and wait. */
static void park(poll_t *p, tn_channel_t *ch)
{
    tn_consume_t *cs = p->cs;
    if (cs->draining) {
        finish(p, 204, NULL);
        return;
    }
    lane_t *l = lane_get(cs, ch, &p->a);
    int64_t now = tn_now_mono_ms();
    if (l == NULL || tn_heap_insert(&cs->deadlines, &p->deadline, now + p->a.wait_ms) != 0) {
        finish(p, 503, "out of memory");
        return;
    }
    l->c.timeout_ms = p->a.visibility_ms;
    p->lane = l;
    p->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->want += p->want;
    if (cs->lanes != NULL && cs->next_sweep == 0)
        cs->next_sweep = now + SWEEP_MS;
    lane_credit(l);
    arm(cs);
}

static void acquire(poll_t *p);

static void maybe_free(tn_consume_t *cs);

/* The engine could not find or make p's topic or channel: near the
 * descriptor limit a 503 to retry (a new channel is a file per
 * partition), else a 500. */
static void acquire_failed(poll_t *p, int rc)
{
    TN_LOG_RL(TN_LOG_ERROR, 10000, "topic %s channel %s: %s", p->a.topic, p->a.channel,
              tn_strerror(rc));
    if (rc == UV_EMFILE)
        finish(p, 503, TN__V1_FD_FULL);
    else
        finish(p, 500, "consume failed");
}

static void on_ready(tn_waiter_t *w, int status)
{
    poll_t *p = w->data;
    tn_consume_t *cs = p->cs;
    p->waiting = false;
    cs->waiting--;
    if (p->pk == NULL || cs->closing) {
        finish(p, 503, "shutting down");
        if (cs->closing)
            maybe_free(cs);
        return;
    }
    if (status != 0) {
        acquire_failed(p, status);
        return;
    }
    acquire(p);
}

static void wait_on(poll_t *p)
{
    p->waiting = true;
    p->cs->waiting++;
}

/* --- replay ----------------------------------------------------------------- */

static void replay(poll_t *p, tn_topic_t *t)
{
    const tn_centry_t *e = NULL;
    int rc = tn_part_record(t, p->a.partition, p->a.offset, &p->wait, &e);
    if (rc == UV_EAGAIN) {
        wait_on(p);
        return;
    }
    if (rc == TN_ENOTFOUND) {
        finish(p, 204, NULL);
    } else if (rc == UV_ERANGE || rc == TN_EGAP) {
        char msg[160];
        tn_plog_stats_t st;
        tn_plog_stats(t->parts[p->a.partition]->plog, &st);
        if (rc == UV_ERANGE)
            snprintf(msg, sizeof(msg),
                     "offset aged out of retention (oldest retained: %" PRIu64 ")",
                     st.first_offset);
        else
            snprintf(msg, sizeof(msg), "offset %" PRIu64 " holds no readable record", p->a.offset);
        finish(p, 410, msg);
    } else if (rc != 0) {
        finish(p, 500, "consume failed");
    } else {
        tn_consume_item_t m = {p->a.partition, e->offset, 0, 0, e->publish_ns, e->body, e->key};
        tn_consume_render(&p->out, p->a.topic, &m);
        p->got = 1;
        finish(p, 200, NULL);
    }
}

/* Find (or make) the topic and channel; p waits on the engine when they
 * are being made. */
static void acquire(poll_t *p)
{
    tn_consume_t *cs = p->cs;
    p->wait.cb = on_ready;
    p->wait.data = p;
    tn_topic_t *t = NULL;
    const tn_consume_args_t *a = &p->a;
    int rc =
        tn_broker_topic(cs->broker, a->topic, strlen(a->topic), true, a->partitions, &p->wait, &t);
    if (rc == UV_EAGAIN) {
        wait_on(p);
        return;
    }
    if (rc == 0 && (a->pinned || a->replay) && a->partition >= t->nparts &&
        a->partition < a->partitions) {
        /* A growth the replica has and the engine here not yet (the
         * catalog opens it at the replica's next change, within ~100 ms). */
        finish(p, 503, "partition not open on this node yet; retry");
        return;
    }
    if (rc == 0 && ((a->pinned || a->replay) && a->partition >= t->nparts)) {
        finish(p, 400, "invalid argument: partition out of range");
        return;
    }
    if (rc == 0 && (a->pinned || a->replay) && !tn_topic_part_local(t, a->partition)) {
        /* Not routed yet: the partition's log is on its owner. */
        char msg[160];
        uint64_t owner = t->parts[a->partition]->owner;
        if (owner != 0)
            snprintf(msg, sizeof(msg),
                     "partition %" PRIu32 " lives on node %" PRIu64 ", not on this one",
                     a->partition, owner);
        else
            snprintf(msg, sizeof(msg),
                     "partition %" PRIu32 " is not placed on a node yet; try again shortly",
                     a->partition);
        finish(p, 503, msg);
        return;
    }
    if (rc == 0 && a->replay) {
        replay(p, t);
        return;
    }
    tn_channel_t *ch = NULL;
    if (rc == 0) {
        rc = tn_topic_channel(t, a->channel, strlen(a->channel), true, &p->wait, &ch);
        if (rc == UV_EAGAIN) {
            wait_on(p);
            return;
        }
    }
    if (rc == UV_EBUSY || rc == TN_ENOTFOUND) {
        finish(p, 404, "topic not found");
        return;
    }
    if (rc != 0) {
        acquire_failed(p, rc);
        return;
    }
    park(p, ch);
}

bool tn_consume_charge(tn_consume_t *cs, const char *ident, uint32_t n, uint32_t *taken)
{
    return tn_quota_take(&cs->quota, ident, n, taken);
}

void tn_consume_uncharge(tn_consume_t *cs, const char *ident, uint32_t taken)
{
    tn_quota_give(&cs->quota, ident, taken);
}

/* A new poll for a, charged to its identity; NULL after answering status
 * and msg through answer_now. */
static poll_t *poll_new(tn_consume_t *cs, const tn_consume_args_t *a, int *status, const char **msg)
{
    if (cs->closing) {
        *status = 503;
        *msg = "shutting down";
        return NULL;
    }
    if (cs->draining) {
        *status = 204; /* no new leases leave a draining node */
        *msg = NULL;
        return NULL;
    }
    uint32_t charge = 0;
    if (!tn_quota_take(&cs->quota, a->ident, a->replay ? 1 : TN_MAX(a->max, 1u), &charge)) {
        *status = 429;
        *msg = "too many concurrent consumes for this user";
        return NULL;
    }
    poll_t *p = tn_calloc(1, sizeof(*p));
    if (p != NULL && a->max > 0) {
        p->taken = tn_calloc(a->max, sizeof(*p->taken));
        if (p->taken == NULL) {
            tn_free(p);
            p = NULL;
        }
    }
    if (p == NULL) {
        tn_quota_give(&cs->quota, a->ident, charge);
        *status = 503;
        *msg = "out of memory";
        return NULL;
    }
    p->cs = cs;
    p->a = *a;
    snprintf(p->ident, sizeof(p->ident), "%s", a->ident);
    p->a.ident = p->ident;
    p->charge = charge;
    p->want = TN_MAX(a->max, 1u);
    p->started_ms = tn_now_mono_ms();
    tn_heap_node_init(&p->deadline);
    tn_buf_init(&p->out);
    return p;
}

void tn_consume_start(tn_consume_t *cs, tn_http_request_t *r, const tn_consume_args_t *a)
{
    int status = 0;
    const char *msg = NULL;
    poll_t *p = poll_new(cs, a, &status, &msg);
    if (p == NULL && status == 204) {
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
        return;
    }
    if (p == NULL) {
        error(r, status, msg);
        return;
    }
    p->http.r = r;
    p->http.pk.answer = http_answer;
    p->http.pk.data = &p->http;
    p->http.pk.priv = p;
    p->pk = &p->http.pk;
    r->data = p;
    r->on_cancel = on_cancel;
    acquire(p);
}

void tn_consume_start_parked(tn_consume_t *cs, tn_consume_parked_t *pk, const tn_consume_args_t *a)
{
    int status = 0;
    const char *msg = NULL;
    poll_t *p = poll_new(cs, a, &status, &msg);
    if (p == NULL) {
        tn_buf_t b;
        tn_buf_init(&b);
        if (status != 204)
            error_body(&b, msg);
        pk->answer(pk, status, tn_buf_data(&b), tn_buf_size(&b));
        tn_buf_fini(&b);
        return;
    }
    pk->priv = p;
    p->pk = pk;
    acquire(p);
}

/* --- settling ----------------------------------------------------------------- */

int tn_consume_settle(tn_consume_t *cs, const char *topic, const char *channel, uint32_t partition,
                      uint64_t offset, uint32_t nonce, tn_settle_t how, int64_t visibility_ms,
                      tn_chan_sync_t *sync, tn_chan_sync_cb cb)
{
    for (lane_t *l = cs->lanes; l != NULL; l = l->next) {
        if ((l->c.pinned && l->c.pin != partition) || strcmp(l->topic, topic) != 0 ||
            strcmp(l->channel, channel) != 0)
            continue;
        int rc;
        if (how == TN_SETTLE_ACK)
            rc = tn_consumer_ack(&l->c, partition, offset, nonce);
        else if (how == TN_SETTLE_EXTEND)
            rc = tn_consumer_touch(&l->c, partition, offset, true, nonce, visibility_ms, 0);
        else /* refused (out of memory, ...): the client is told, its lease kept */
            rc = tn_consumer_req(&l->c, partition, offset, true, nonce, 0);
        if (rc == TN_ENOTFOUND || rc == UV_ESRCH || rc == UV_EINVAL)
            continue; /* not this lane's lease */
        if (rc == 0 && sync != NULL) {
            /* An extend has nothing durable to wait for: a lease lives in
             * memory only (docs/http-api.md). */
            if (how == TN_SETTLE_EXTEND)
                cb(sync, 0);
            else
                tn_channel_sync(l->c.ch, partition, sync, cb);
        }
        return rc;
    }
    return TN_ENOTFOUND;
}

_Static_assert((int)TN_SETTLE_ACK == (int)TN_WIRE_SETTLE_ACK &&
                   (int)TN_SETTLE_EXTEND == (int)TN_WIRE_SETTLE_EXTEND &&
                   (int)TN_SETTLE_NACK == (int)TN_WIRE_SETTLE_NACK,
               "a settle's how travels as its tn_settle_t value");

int tn_consume_settle_hook(void *arg, const char *topic, const char *channel, uint32_t partition,
                           uint64_t offset, uint32_t nonce, uint8_t how, int64_t visibility_ms,
                           tn_chan_sync_t *sync, tn_chan_sync_cb cb)
{
    if (how < TN_SETTLE_ACK || how > TN_SETTLE_NACK)
        return TN_ENOTFOUND;
    return tn_consume_settle(arg, topic, channel, partition, offset, nonce, (tn_settle_t)how,
                             visibility_ms, sync, cb);
}

int tn_receipt_parse(const char *s, size_t len, uint32_t *partition, uint64_t *offset,
                     uint32_t *nonce)
{
    uint64_t v[3] = {0, 0, 0};
    size_t field = 0;
    size_t digits = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == ':') {
            if (digits == 0 || ++field > 2)
                return UV_EINVAL;
            digits = 0;
            continue;
        }
        if (c < '0' || c > '9' || ++digits > 20)
            return UV_EINVAL;
        uint64_t d = (uint64_t)(c - '0');
        if (v[field] > (UINT64_MAX - d) / 10)
            return UV_EINVAL;
        v[field] = v[field] * 10 + d;
    }
    if (field != 2 || digits == 0 || v[0] > UINT32_MAX || v[1] > INT64_MAX || v[2] == 0 ||
        v[2] > UINT32_MAX)
        return UV_EINVAL;
    *partition = (uint32_t)v[0];
    *offset = v[1];
    *nonce = (uint32_t)v[2];
    return 0;
}

/* --- lifetime ----------------------------------------------------------------- */

int tn_consume_new(uv_loop_t *loop, tn_broker_t *b, const tn_consume_opts_t *o, tn_consume_t **out)
{
    tn_consume_t *cs = tn_calloc(1, sizeof(*cs));
    if (cs == NULL)
        return UV_ENOMEM;
    cs->loop = loop;
    cs->broker = b;
    cs->o = *o;
    tn_quota_init(&cs->quota, o->max_per_ident);
    cs->timer_at = INT64_MAX;
    tn_heap_init(&cs->deadlines);
    uv_timer_init(loop, &cs->timer);
    cs->timer.data = cs;
    *out = cs;
    return 0;
}

static void maybe_free(tn_consume_t *cs)
{
    if (!cs->timer_closed || cs->waiting > 0)
        return;
    tn_heap_fini(&cs->deadlines);
    tn_free(cs);
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_consume_t *cs = h->data;
    cs->timer_closed = true;
    maybe_free(cs);
}

void tn_consume_drain(tn_consume_t *cs)
{
    if (cs == NULL || cs->closing || cs->draining)
        return;
    cs->draining = true;
    for (lane_t *l = cs->lanes; l != NULL; l = l->next)
        while (l->head != NULL)
            finish(l->head, l->head->got > 0 ? 200 : 204, NULL);
    arm(cs);
}

uint32_t tn_consume_pending(const tn_consume_t *cs)
{
    if (cs == NULL)
        return 0;
    uint32_t n = cs->waiting;
    for (const lane_t *l = cs->lanes; l != NULL; l = l->next)
        for (const poll_t *p = l->head; p != NULL; p = p->next)
            n++;
    return n;
}

void tn_consume_close(tn_consume_t *cs)
{
    if (cs == NULL || cs->closing)
        return;
    cs->closing = true;
    while (cs->lanes != NULL) {
        lane_t *l = cs->lanes;
        while (l->head != NULL)
            finish(l->head, 503, "shutting down");
        lane_free(l);
    }
    tn_quota_fini(&cs->quota);
    uv_close((uv_handle_t *)&cs->timer, on_timer_closed);
}
