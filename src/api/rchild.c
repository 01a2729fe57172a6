/* Remote children's cursors. See rchild.h. */
#include "core/platform.h"

#include "api/rchild.h"

#include "api/fanout.h"
#include "api/v1.h"
#include "api/v1/remotes.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define BATCH_MAX     500
#define BATCH_BYTES   (4u * 1024 * 1024)
#define CREDIT        2000
#define HOLD_BYTES    (16u * 1024 * 1024) /* shared by the partitions led here (on_hold) */
#define LEASE_MS      300000
#define BACKOFF_MIN   1000
#define BACKOFF_MAX   60000
#define TICK_MS       250
#define SYNC_EVERY_MS 2000

#ifdef TN_TEST
#include <stdlib.h>
/* TERN_TEST_RCHILD_LEASE_MS=n (ternd-test): the cursors' leases last n ms
 * instead of LEASE_MS, so that a test sees one run out while a delayed
 * message waits. */
static int64_t lease_ms(void)
{
    const char *v = getenv("TERN_TEST_RCHILD_LEASE_MS");
    return v != NULL && atoi(v) > 0 ? atoi(v) : LEASE_MS;
}
#else
#define lease_ms() ((int64_t)LEASE_MS)
#endif

typedef struct runner_s runner_t;
typedef struct client_s client_t;

/* A message held for sending, leased from the channel. */
typedef struct {
    uint64_t offset;
    uint32_t nonce;
    int64_t publish_ns;
    tn_msg_t *body; /* a reference */
    tn_msg_t *key;  /* a reference, or NULL */
} held_t;

typedef struct {
    runner_t *r;
    uint32_t partition;
    held_t *v; /* in delivery (offset) order */
    size_t n, cap;
    size_t out;          /* the first `out` messages are the batch being sent (0: none) */
    size_t out_bytes;    /* their payloads' bytes */
    size_t max_bytes;    /* a batch's payloads at most (halved by a 413); 0: BATCH_BYTES */
    size_t max_count;    /* a batch's messages at most (halved by a 400); 0: BATCH_MAX */
    uint64_t held_bytes; /* of the messages held, payloads and keys */
    int64_t next_try_ms; /* monotonic: not before */
    int64_t backoff_ms;
} part_t;

struct client_s {
    char name[TN_REMOTE_NAME_MAX + 1];
    uint64_t id;
    uint64_t fp; /* of the URL and CA it was made for */
    tn_rc_t *rc;
    bool used; /* named by a runner in this sync */
    client_t *next;
};

struct runner_s {
    tn_consumer_t c;
    tn_rchild_t *f;
    char parent[TN_NAME_MAX + 1];
    char remote[TN_REMOTE_NAME_MAX + 1];
    char child[TN_NAME_MAX + 1];
    char path[3 * TN_NAME_MAX + 64]; /* /v1/topics/{child}/produce/batch, escaped */
    uint64_t epoch;
    int64_t delay_ms;
    part_t **parts; /* by partition; each its own allocation (requests point at it) */
    uint32_t nparts;
    uint32_t outs;   /* requests under way */
    uint32_t moves;  /* dead-letter moves under way (dlmove_t) */
    uint32_t nlocal; /* parent partitions led here (on_tick): they share the hold */
    bool attached, dead, stale, waiting;
    tn_waiter_t wait;
    /* State shown by GET children. */
    bool retrying;
    tn_rc_class_t cls;
    int status;
    uint64_t sent;
    uint64_t dead_letters;
    char dlq[TN_NAME_MAX + 1]; /* the channel's dead-letter topic ("" before the first attach) */
    runner_t *next;
};

struct tn_rchild_s {
    uv_loop_t *loop;
    tn_v1_t *v;
    runner_t *runners;
    client_t *clients;
    uv_timer_t timer;
    int64_t last_sync_ms;
    bool closing;
    uint64_t sent;                     /* messages the remotes accepted, since start */
    uint64_t dead_letters;             /* messages moved to dead-letter topics, since start */
    uint64_t failures[TN_RC_NCLASSES]; /* failed sends by class */
    /* Dead-letter moves under way (dlmove_t): they count here when they
     * end, so a closed one is freed only after the last (timer_closed). */
    uint32_t moves;
    bool timer_closed;
};

/* --- held messages --------------------------------------------------------------- */

static uint64_t held_size(const held_t *h)
{
    return h->body->len + (h->key != NULL ? h->key->len : 0);
}

static void held_drop(held_t *h)
{
    tn_msg_unref(h->body);
    if (h->key != NULL)
        tn_msg_unref(h->key);
}

static void part_clear(part_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        held_drop(&p->v[i]);
    tn_free(p->v);
    p->v = NULL;
    p->n = p->cap = p->out = 0;
}

static void runner_maybe_free(runner_t *r)
{
    if (!r->dead || r->outs > 0 || r->moves > 0 || r->waiting)
        return;
    for (uint32_t i = 0; i < r->nparts; i++) {
        if (r->parts[i] != NULL)
            part_clear(r->parts[i]);
        tn_free(r->parts[i]);
    }
    tn_free(r->parts);
    tn_free(r);
}

static part_t *part_of(runner_t *r, uint32_t partition)
{
    if (partition >= r->nparts) {
        uint32_t n = partition + 1;
        part_t **v = tn_realloc(r->parts, n * sizeof(*v));
        if (v == NULL)
            return NULL;
        memset(v + r->nparts, 0, (n - r->nparts) * sizeof(*v));
        r->parts = v;
        r->nparts = n;
    }
    if (r->parts[partition] == NULL) {
        part_t *p = tn_calloc(1, sizeof(*p));
        if (p == NULL)
            return NULL;
        p->r = r;
        p->partition = partition;
        r->parts[partition] = p;
    }
    return r->parts[partition];
}

/* --- clients ------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; s != NULL && *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h * 0x100000001b3ull;
}

/* The client for remote rec (made when missing or when the record's URL
 * or CA changed), or NULL (logged). */
static client_t *client_for(tn_rchild_t *f, const tn_meta_remote_t *rec)
{
    uint64_t fp = fnv(fnv(0xcbf29ce484222325ull, rec->url), rec->ca_pem);
    client_t **pp = &f->clients;
    for (; *pp != NULL; pp = &(*pp)->next) {
        client_t *c = *pp;
        if (strcmp(c->name, rec->name) != 0)
            continue;
        if (c->id == rec->id && c->fp == fp)
            return c;
        /* The record changed: the old client goes (its requests fail with
         * UV_ECANCELED and are sent again on the new one). */
        *pp = c->next;
        tn_rc_close(c->rc);
        tn_free(c);
        break;
    }
    client_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    snprintf(c->name, sizeof(c->name), "%s", rec->name);
    c->id = rec->id;
    c->fp = fp;
    tn_rc_opts_t o = {.url = rec->url, .ca_pem = rec->ca_pem, .guard = tn__v1_remote_guard(f->v)};
    char err[256];
    if (o.guard == NULL || tn_rc_new(f->loop, &o, &c->rc, err, sizeof(err)) != 0) {
        TN_LOG_RL(TN_LOG_WARN, 10000, "remote %s: no client: %s", rec->name,
                  o.guard == NULL ? "remotes are not set up on this node" : err);
        tn_free(c);
        return NULL;
    }
    c->next = f->clients;
    f->clients = c;
    return c;
}

/* --- sending ------------------------------------------------------------------- */

static void try_send(part_t *p);

/* Renew the lease of held message i for extra_ms beyond a lease, and for a
 * delayed child's message not due yet until a lease past its due time (a
 * lease that ran out meanwhile would deliver it to the cursor again, and
 * it would be sent once per lease of the wait). */
static void keep_leased(part_t *p, size_t i, int64_t extra_ms)
{
    runner_t *r = p->r;
    const held_t *h = &p->v[i];
    int64_t ms = lease_ms() + extra_ms;
    if (r->delay_ms > 0) {
        int64_t wait = h->publish_ns / 1000000 + r->delay_ms - tn_now_wall_ms();
        if (wait > 0 && wait + lease_ms() > ms)
            ms = wait + lease_ms();
    }
    if (r->attached)
        (void)tn_consumer_touch(&r->c, p->partition, h->offset, true, h->nonce, ms, 0);
}

static void fail_part(part_t *p, tn_rc_class_t cls, int status, const char *why)
{
    runner_t *r = p->r;
    r->f->failures[cls]++;
    r->retrying = true;
    r->cls = cls;
    r->status = status;
    p->backoff_ms = p->backoff_ms == 0 ? BACKOFF_MIN : p->backoff_ms * 2;
    if (p->backoff_ms > BACKOFF_MAX)
        p->backoff_ms = BACKOFF_MAX;
    p->next_try_ms = tn_now_mono_ms() + p->backoff_ms;
    /* Keep them leased, in order, until they are sent. */
    for (size_t i = 0; i < p->n && r->attached; i++)
        keep_leased(p, i, p->backoff_ms);
    TN_LOG_RL(TN_LOG_WARN, 10000,
              "remote child %s -> %s:%s (partition %u): sending failed: class %s, status %d "
              "(%s); retrying in %" PRId64 " ms",
              r->parent, r->remote, r->child, p->partition, tn_rc_class_name(cls), status, why,
              p->backoff_ms);
}

/* The first n held messages leave p (sent, or dead-lettered); the next
 * batch goes at once. */
static void part_shift(part_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p->held_bytes -= held_size(&p->v[i]);
        held_drop(&p->v[i]);
    }
    memmove(p->v, p->v + n, (p->n - n) * sizeof(*p->v));
    p->n -= n;
    p->backoff_ms = 0;
    p->next_try_ms = 0;
    /* Their settles deliver again, but not those whose leases lapsed
     * meanwhile (settling nothing): on_hold may take more now. */
    if (p->r->attached)
        tn_consumer_unhold(&p->r->c);
}

/* Held message h's key for the log: as it is when short printable ASCII,
 * else its length. */
static const char *key_text(const held_t *h, char *buf, size_t len)
{
    if (h->key == NULL || h->key->len == 0)
        return "(none)";
    bool plain = h->key->len <= 128;
    for (size_t i = 0; plain && i < h->key->len; i++)
        plain = h->key->data[i] >= 0x20 && h->key->data[i] < 0x7f;
    if (plain)
        snprintf(buf, len, "%.*s", (int)h->key->len, h->key->data);
    else
        snprintf(buf, len, "(%u bytes, not shown)", (unsigned)h->key->len);
    return buf;
}

/* A dead-letter move of a message the remote refused for good: counted
 * and logged once, when it is done (on_dead_lettered); one refused (the
 * dead-letter topic's owner, a full disk) brings the message back, sent
 * and refused again, and counts only when a later move is done. */
typedef struct {
    runner_t *r; /* r and r->f stay until this ends (moves) */
    uint32_t partition;
    uint64_t offset;
    int status; /* the remote's answer */
    unsigned bytes;
    char key[160];
} dlmove_t;

static void on_dead_lettered(void *arg, int status)
{
    dlmove_t *m = arg;
    runner_t *r = m->r;
    tn_rchild_t *f = r->f;
    if (status == 0) {
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "remote child %s -> %s:%s (partition %u): the remote answered %d to the message "
                  "at offset %" PRIu64 " (key %s, %u bytes) sent alone: %s; dead-lettered to %s",
                  r->parent, r->remote, r->child, m->partition, m->status, m->offset, m->key,
                  m->bytes,
                  m->status == 413 ? "over a body limit of the remote's (or of a proxy before it)"
                                   : "a message the remote refuses (over its max-msg-size, say)",
                  r->dlq);
        r->dead_letters++;
        f->dead_letters++;
    }
    tn_free(m);
    r->moves--;
    if (--f->moves == 0 && f->timer_closed)
        tn_free(f);
    runner_maybe_free(r);
}

/* The remote refused p's first message, sent alone, for good (status 400
 * or 413): it moves to the channel's dead-letter topic and the partition
 * goes on. A message whose lease is gone (TN_ENOTFOUND, UV_ESRCH: the
 * channel delivers it again, and that copy takes this way) leaves p; when
 * the move cannot start otherwise (the runner is detaching, the channel's
 * log failed), the partition waits as for any failure and sends it again. */
static void dead_letter_first(part_t *p, const tn_rc_result_t *res)
{
    runner_t *r = p->r;
    const held_t *h = &p->v[0];
    dlmove_t *m = r->attached ? tn_calloc(1, sizeof(*m)) : NULL;
    int rc = r->attached ? UV_ENOMEM : UV_ENOTCONN;
    if (m != NULL) {
        m->r = r;
        m->partition = p->partition;
        m->offset = h->offset;
        m->status = res->status;
        m->bytes = (unsigned)h->body->len;
        const char *k = key_text(h, m->key, sizeof(m->key));
        if (k != m->key)
            snprintf(m->key, sizeof(m->key), "%s", k); /* "(none)" */
        r->moves++;
        r->f->moves++; /* the callback may run before the call returns */
        rc = tn_consumer_dead_letter(&r->c, p->partition, h->offset, true, h->nonce, h->body,
                                     h->key, on_dead_lettered, m);
        if (rc != 0) {
            r->moves--;
            r->f->moves--;
            tn_free(m);
        }
    }
    if (rc == TN_ENOTFOUND || rc == UV_ESRCH) {
        part_shift(p, 1);
        try_send(p);
        return;
    }
    if (rc != 0) {
        fail_part(p, res->cls, res->status, "refused for good, and no dead-letter move started");
        return;
    }
    r->f->failures[res->cls]++;
    part_shift(p, 1);
    p->max_count = 0;
    try_send(p);
}

static void on_sent(void *ud, const tn_rc_result_t *res)
{
    part_t *p = ud;
    runner_t *r = p->r;
    size_t out = p->out;
    p->out = 0;
    r->outs--;
    if (r->dead) {
        runner_maybe_free(r);
        return;
    }
    if (res->err == UV_ECANCELED) {
        /* Its client was closed (the remote's record changed, or it went
         * unused): the next tick sends the batch again, on the client made
         * then (not from inside the old one's close). */
        p->next_try_ms = 0;
        return;
    }
    if ((res->status == 413 || res->status == 400) && out > 1) {
        /* 413: the body is over a limit of the remote's (or of a proxy
         * before it): batches of this partition carry half as many bytes
         * from now on. 400: the remote refuses a message of the batch for
         * good (over its max-msg-size, say): they carry half as many
         * messages until that one is found alone (dead_letter_first). This
         * one goes again at once, split. */
        bool bytes = res->status == 413;
        r->f->failures[res->cls]++;
        if (bytes)
            p->max_bytes = p->out_bytes / 2 > 0 ? p->out_bytes / 2 : 1;
        else
            p->max_count = out / 2;
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "remote child %s -> %s:%s (partition %u): the remote answered %d to a batch of "
                  "%zu messages: batches of at most %zu %s",
                  r->parent, r->remote, r->child, p->partition, res->status, out,
                  bytes ? p->max_bytes : p->max_count,
                  bytes ? "bytes from now on" : "messages until the refused one is found alone");
        try_send(p);
        return;
    }
    if (res->status == 400 || res->status == 413) {
        dead_letter_first(p, res);
        return;
    }
    if (res->cls != TN_RC_OK) {
        /* The detail is the client's own words, never the remote's. */
        fail_part(p, res->cls, res->status, res->detail);
        return;
    }
    for (size_t i = 0; i < out && r->attached; i++) {
        /* Each sent message finished (once detached, they are delivered
         * again at the loop's next turn: on_hold). A finish refused (out
         * of memory, the channel log failing, the lease lapsed meanwhile)
         * sends that message again: said, so a duplicate on the remote
         * is explained. */
        int rc = tn_consumer_fin(&r->c, p->partition, p->v[i].offset, true, p->v[i].nonce);
        if (rc != 0)
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "remote child %s -> %s:%s: finishing the sent message %s/%" PRIu32 "@%" PRIu64
                      " failed: %s; it will be sent again",
                      r->parent, r->remote, r->child, r->parent, p->partition, p->v[i].offset,
                      tn_strerror(rc));
    }
    part_shift(p, out);
    r->sent += out;
    r->f->sent += out;
    if (p->n == 0)
        p->max_count = 0;
    r->retrying = false;
    r->status = res->status;
    try_send(p);
}

static void json_bytes_b64(tn_buf_t *b, const tn_msg_t *m)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = (const unsigned char *)m->data;
    size_t n = m->len;
    if (tn_buf_reserve(b, (n + 2) / 3 * 4 + 2) != 0)
        return;
    char *o = tn_buf_data(b) + tn_buf_size(b);
    size_t k = 0;
    o[k++] = '"';
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        o[k++] = tbl[(v >> 18) & 63];
        o[k++] = tbl[(v >> 12) & 63];
        o[k++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        o[k++] = i + 2 < n ? tbl[v & 63] : '=';
    }
    o[k++] = '"';
    b->len += k;
}

static void try_send(part_t *p)
{
    runner_t *r = p->r;
    tn_rchild_t *f = r->f;
    if (r->dead || f->closing || p->out > 0 || p->n == 0)
        return;
    int64_t now = tn_now_mono_ms();
    if (now < p->next_try_ms)
        return;
    if (r->delay_ms > 0) {
        int64_t due = p->v[0].publish_ns / 1000000 + r->delay_ms;
        int64_t wall = tn_now_wall_ms();
        if (due > wall) {
            p->next_try_ms = now + (due - wall);
            return;
        }
    }
    const tn_meta_remote_t *rec =
        tn_meta_remote_find(&tn_meta_state(f->v->meta)->remotes, r->remote);
    client_t *c = rec != NULL ? client_for(f, rec) : NULL;
    if (c == NULL) {
        fail_part(p, TN_RC_UNREACHABLE, 0, "no client for the remote");
        return;
    }
    c->used = true;
    const char *auth = NULL, *why = NULL;
    if (tn__v1_remote_credential(f->v, r->remote, &auth, &why) != 0 || auth == NULL) {
        fail_part(p, TN_RC_AUTH, 0, "the remote's credential does not open on this node");
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    size_t count = 0, bytes = 0;
    tn_buf_append(&b, "[", 1);
    int64_t wall = tn_now_wall_ms();
    size_t max_count = p->max_count > 0 ? p->max_count : BATCH_MAX;
    while (count < p->n && count < max_count) {
        const held_t *h = &p->v[count];
        if (count > 0 && bytes + h->body->len > (p->max_bytes > 0 ? p->max_bytes : BATCH_BYTES))
            break;
        /* A delayed child's batch ends at the first message not due yet
         * (v[0] is: checked above); the tick sends that one when it is. */
        if (count > 0 && r->delay_ms > 0 && h->publish_ns / 1000000 + r->delay_ms > wall)
            break;
        if (count > 0)
            tn_buf_append(&b, ",", 1);
        tn_buf_append(&b, "{\"payload_encoding\":\"base64\",\"payload\":", 39);
        json_bytes_b64(&b, h->body);
        if (h->key != NULL && h->key->len > 0 && tn_utf8_valid(h->key->data, h->key->len)) {
            tn_buf_append(&b, ",\"key\":\"", 8);
            tn_buf_json_escape_n(&b, h->key->data, h->key->len);
            tn_buf_append(&b, "\"", 1);
        } else if (h->key != NULL && h->key->len > 0) {
            /* Any bytes are a key on the parent; a JSON string holds only
             * UTF-8 (the remote would refuse the batch, for good). */
            tn_buf_append(&b, ",\"key_encoding\":\"base64\",\"key\":", 31);
            json_bytes_b64(&b, h->key);
        }
        tn_buf_append(&b, "}", 1);
        bytes += h->body->len;
        count++;
    }
    tn_buf_append(&b, "]", 1);
    tn_rc_req_t q = {"POST", r->path, auth, "application/json", tn_buf_data(&b), tn_buf_size(&b)};
    int rc = tn_rc_request(c->rc, &q, on_sent, p);
    tn_buf_fini(&b);
    if (rc != 0) {
        fail_part(p, TN_RC_UNREACHABLE, 0, tn_strerror(rc));
        return;
    }
    p->out = count;
    p->out_bytes = bytes;
    r->outs++;
}

/* --- the runner ------------------------------------------------------------------ */

static void on_deliver(tn_consumer_t *c, const tn_delivery_t *d)
{
    runner_t *r = c->data;
    part_t *p = part_of(r, d->partition);
    if (p != NULL && p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        held_t *v = tn_realloc(p->v, cap * sizeof(*v));
        if (v == NULL) {
            p = NULL;
        } else {
            p->v = v;
            p->cap = cap;
        }
    }
    if (p == NULL) {
        /* Out of memory to hold it: tried again a back-off later. A REQ
         * refused (no memory for that either) would keep it leased for
         * the whole lease (lease_ms: minutes); it ends after the back-off
         * instead (tn_consumer_put_back), so the message comes back then. */
        tn_consumer_put_back(c, d->partition, d->offset, true, d->nonce, BACKOFF_MIN);
        return;
    }
    held_t *h = &p->v[p->n++];
    h->offset = d->offset;
    h->nonce = d->nonce;
    h->publish_ns = d->publish_ns;
    h->body = tn_msg_ref(d->body);
    h->key = d->key != NULL ? tn_msg_ref((tn_msg_t *)d->key) : NULL;
    p->held_bytes += held_size(h);
    if (r->delay_ms > 0)
        keep_leased(p, p->n - 1, 0);
    try_send(p);
}

/* A partition takes no more deliveries once it holds its share of the
 * partitions led here, in bytes (HOLD_BYTES: 2000 large messages would pin
 * gigabytes, and those far behind a slow remote would outwait their leases,
 * and be delivered, and sent, again) and in messages (CREDIT), and always
 * one when it holds none: so a partition the remote refuses (in back-off)
 * holds its share alone, and the others keep going. At most HOLD_BYTES
 * plus one message per partition is held. */
static bool on_hold(tn_consumer_t *c, uint32_t partition)
{
    runner_t *r = c->data;
    const part_t *p = partition < r->nparts ? r->parts[partition] : NULL;
    if (p == NULL || p->n == 0)
        return false;
    uint32_t k = r->nlocal > 0 ? r->nlocal : 1;
    return p->held_bytes >= HOLD_BYTES / k || p->n >= CREDIT / k;
}

/* How many partitions of its parent r's channel are led here (at least 1). */
static void count_local(runner_t *r)
{
    const tn_topic_t *t = r->c.ch->topic;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->nparts; i++)
        n += tn_topic_part_local(t, i);
    n = n > 0 ? n : 1;
    if (n < r->nlocal && r->attached)
        tn_consumer_unhold(&r->c); /* a larger share each (on_hold) */
    r->nlocal = n;
}

static void runner_stop(runner_t *r)
{
    r->dead = true;
    if (r->attached) {
        r->attached = false;
        tn_consumer_detach(&r->c);
    }
    runner_maybe_free(r);
}

static void unlink_runner(tn_rchild_t *f, runner_t *r)
{
    for (runner_t **pp = &f->runners; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            return;
        }
    }
}

static void on_kick(tn_consumer_t *c)
{
    runner_t *r = c->data;
    r->attached = false;
    tn_consumer_detach(c);
    unlink_runner(r->f, r);
    runner_stop(r); /* the next sync starts it again if its record stays */
}

static void runner_start(runner_t *r);

static void on_channel_ready(tn_waiter_t *w, int status)
{
    runner_t *r = w->data;
    r->waiting = false;
    if (r->dead) {
        runner_maybe_free(r);
        return;
    }
    if (status == 0)
        runner_start(r);
}

static void runner_start(runner_t *r)
{
    tn_channel_t *ch = NULL;
    r->wait.cb = on_channel_ready;
    r->wait.data = r;
    int rc = tn_fanout_open_channel(r->f->v->broker, r->parent, r->epoch, false, &r->wait, &ch);
    if (rc == UV_EAGAIN) {
        r->waiting = true;
        return;
    }
    if (rc != 0)
        return; /* no parent here yet: the next sync tries again */
    r->c.deliver = on_deliver;
    r->c.kick = on_kick;
    r->c.hold = on_hold;
    r->c.data = r;
    r->c.timeout_ms = lease_ms();
    tn_consumer_attach(&r->c, ch);
    tn_channel_dlq_name(ch, r->dlq, sizeof(r->dlq));
    count_local(r);
    tn_consumer_credit(&r->c, CREDIT);
    r->attached = true;
    TN_LOG(TN_LOG_INFO, "remote child %s -> %s:%s running (channel %s, leases of %" PRId64 " ms)",
           r->parent, r->remote, r->child, ch->name, lease_ms());
}

/* The path of the remote's produce/batch for child, with the characters a
 * topic name may hold that a path may not ('#') escaped. */
static void make_path(runner_t *r)
{
    size_t k = (size_t)snprintf(r->path, sizeof(r->path), "/v1/topics/");
    for (const char *s = r->child; *s != '\0' && k + 4 < sizeof(r->path); s++) {
        if (*s == '#') {
            memcpy(r->path + k, "%23", 3);
            k += 3;
        } else {
            r->path[k++] = *s;
        }
    }
    snprintf(r->path + k, sizeof(r->path) - k, "/produce/batch");
}

void tn_rchild_sync(tn_rchild_t *f)
{
    if (f->closing || !tn_meta_ready(f->v->meta))
        return;
    f->last_sync_ms = tn_now_mono_ms();
    const tn_meta_state_t *s = tn_meta_state(f->v->meta);
    const tn_meta_remotes_t *rs = &s->remotes;
    for (runner_t *r = f->runners; r != NULL; r = r->next)
        r->stale = true;
    for (size_t i = 0; i < rs->nchildren; i++) {
        const tn_meta_rchild_t *rec = rs->children[i];
        runner_t *r = f->runners;
        while (r != NULL && !(r->epoch == rec->epoch && strcmp(r->parent, rec->parent) == 0))
            r = r->next;
        if (r != NULL) {
            r->stale = false;
            r->delay_ms = rec->delay_ms;
            if (!r->attached && !r->waiting)
                runner_start(r);
            continue;
        }
        r = tn_calloc(1, sizeof(*r));
        if (r == NULL)
            continue;
        r->f = f;
        snprintf(r->parent, sizeof(r->parent), "%s", rec->parent);
        snprintf(r->remote, sizeof(r->remote), "%s", rec->remote);
        snprintf(r->child, sizeof(r->child), "%s", rec->child);
        make_path(r);
        r->epoch = rec->epoch;
        r->delay_ms = rec->delay_ms;
        r->next = f->runners;
        f->runners = r;
        runner_start(r);
    }
    for (runner_t **pp = &f->runners; *pp != NULL;) {
        runner_t *r = *pp;
        if (!r->stale) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        char parent[TN_NAME_MAX + 1];
        uint64_t epoch = r->epoch;
        snprintf(parent, sizeof(parent), "%s", r->parent);
        bool had = r->attached && tn_meta_topic_find(s, parent) != NULL;
        runner_stop(r); /* r may be gone */
        if (had)
            tn_fanout_drop_channel(f->v->broker, parent, epoch);
    }
    /* Clients no runner names any more go. */
    for (client_t *c = f->clients; c != NULL; c = c->next)
        c->used = false;
    for (runner_t *r = f->runners; r != NULL; r = r->next) {
        for (client_t *c = f->clients; c != NULL; c = c->next)
            if (strcmp(c->name, r->remote) == 0)
                c->used = true;
    }
    for (client_t **pp = &f->clients; *pp != NULL;) {
        client_t *c = *pp;
        if (c->used) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        tn_rc_close(c->rc);
        tn_free(c);
    }
}

static void on_tick(uv_timer_t *h)
{
    tn_rchild_t *f = h->data;
    if (tn_now_mono_ms() - f->last_sync_ms >= SYNC_EVERY_MS)
        tn_rchild_sync(f);
    for (runner_t *r = f->runners; r != NULL; r = r->next) {
        if (r->attached)
            count_local(r); /* leaders change */
        for (uint32_t i = 0; i < r->nparts && !r->dead; i++)
            if (r->parts[i] != NULL)
                try_send(r->parts[i]);
    }
}

void tn_rchild_status(tn_rchild_t *f, const char *parent, const char *remote, const char *child,
                      tn_rchild_status_t *out)
{
    memset(out, 0, sizeof(*out));
    for (runner_t *r = f != NULL ? f->runners : NULL; r != NULL; r = r->next) {
        if (strcmp(r->parent, parent) != 0 || strcmp(r->remote, remote) != 0 ||
            strcmp(r->child, child) != 0 || r->dead)
            continue;
        out->running = r->attached;
        if (r->attached) {
            tn_channel_stats_t st;
            tn_channel_stats(r->c.ch, &st);
            out->lag = st.depth;
        }
        int64_t oldest = 0;
        for (uint32_t i = 0; i < r->nparts; i++) {
            const part_t *p = r->parts[i];
            if (p != NULL && p->n > 0 && (oldest == 0 || p->v[0].publish_ns < oldest))
                oldest = p->v[0].publish_ns;
        }
        if (oldest > 0) {
            out->lag_ms = tn_now_wall_ms() - oldest / 1000000;
            if (out->lag_ms < 0)
                out->lag_ms = 0;
        }
        out->retrying = r->retrying;
        out->cls = r->cls;
        out->status = r->status;
        out->sent = r->sent;
        out->dead_letters = r->dead_letters;
        snprintf(out->dlq, sizeof(out->dlq), "%s", r->dlq);
        return;
    }
}

int tn_rchild_metrics_write(tn_rchild_t *f, tn_buf_t *b)
{
    char line[3 * TN_NAME_MAX + 256];
    int rc = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(line, sizeof(line), __VA_ARGS__);                                        \
        if (rc == 0 && n_ > 0)                                                                     \
            rc = tn_buf_append(b, line, TN_MIN((size_t)n_, sizeof(line) - 1));                     \
    } while (0)
    PUT("# HELP tern_remote_child_sent_total messages remote children sent that their remote "
        "accepted (this node)\n# TYPE tern_remote_child_sent_total counter\n"
        "tern_remote_child_sent_total %" PRIu64 "\n",
        f->sent);
    PUT("# HELP tern_remote_child_dead_letters_total messages of remote children their remote "
        "refused for good, moved to dead-letter topics (this node)\n"
        "# TYPE tern_remote_child_dead_letters_total counter\n"
        "tern_remote_child_dead_letters_total %" PRIu64 "\n",
        f->dead_letters);
    PUT("# HELP tern_remote_child_failures_total remote children's failed sends, by class\n"
        "# TYPE tern_remote_child_failures_total counter\n");
    for (int c = 1; c < TN_RC_NCLASSES; c++)
        PUT("tern_remote_child_failures_total{class=\"%s\"} %" PRIu64 "\n",
            tn_rc_class_name((tn_rc_class_t)c), f->failures[c]);
    PUT("# HELP tern_remote_child_lag_messages parent messages a remote child has not sent yet "
        "(partitions served here)\n# TYPE tern_remote_child_lag_messages gauge\n");
    for (runner_t *r = f->runners; r != NULL; r = r->next) {
        tn_rchild_status_t st;
        tn_rchild_status(f, r->parent, r->remote, r->child, &st);
        PUT("tern_remote_child_lag_messages{parent=\"%s\",remote=\"%s\",child=\"%s\"} %" PRIu64
            "\n",
            r->parent, r->remote, r->child, st.lag);
    }
    PUT("# HELP tern_remote_child_retrying 1 while a remote child waits to send again after a "
        "failure\n# TYPE tern_remote_child_retrying gauge\n");
    for (runner_t *r = f->runners; r != NULL; r = r->next)
        PUT("tern_remote_child_retrying{parent=\"%s\",remote=\"%s\",child=\"%s\"} %d\n", r->parent,
            r->remote, r->child, r->retrying ? 1 : 0);
#undef PUT
    return rc;
}

int tn_rchild_new(uv_loop_t *loop, tn_v1_t *v, tn_rchild_t **out)
{
    tn_rchild_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL)
        return UV_ENOMEM;
    f->loop = loop;
    f->v = v;
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    uv_timer_start(&f->timer, on_tick, TICK_MS, TICK_MS);
    *out = f;
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_rchild_t *f = h->data;
    f->timer_closed = true;
    if (f->moves == 0)
        tn_free(f); /* else the last move's end frees it (on_dead_lettered) */
}

void tn_rchild_close(tn_rchild_t *f)
{
    if (f == NULL)
        return;
    f->closing = true;
    while (f->runners != NULL) {
        runner_t *r = f->runners;
        f->runners = r->next;
        runner_stop(r);
    }
    while (f->clients != NULL) {
        client_t *c = f->clients;
        f->clients = c->next;
        tn_rc_close(c->rc); /* answers the runners' requests: they free */
        tn_free(c);
    }
    uv_close((uv_handle_t *)&f->timer, on_timer_closed);
}
