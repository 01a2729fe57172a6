/* The dispatcher. See dispatch.h. */
#include "core/platform.h"

#include "cluster/dispatch.h"

#include "cluster/dataplane.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/hist.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define PASS_IDLE_MS 50
/* The least time between two checkpoints (each costs the committer two
 * fsyncs, in the rounds of the produces), unless this many records wait
 * for one: a crash then commits at most that much again. */
#define CKPT_GAP_NS    (200LL * 1000000)
#define CKPT_RECORDS   4096
#define RETRY_NS       (1000LL * 1000000)
#define STUCK_FAILURES 3
/* The most records the window tracks (loaded or parked, below): a ring of
 * this many small entries bounds the memory a long-dead owner costs; past
 * it, reading waits for the head to move. */
#define MAX_ENTRIES (256u * 1024)

/* E_PARKED: waiting for a dead owner while the window was full: its
 * record was let go (it stays in the log, above the checkpoint) and is
 * read again once its owner is back, so it holds up no other record. */
enum { E_WAITING = 0, E_SENDING, E_DONE, E_PARKED };

typedef struct chunk_s chunk_t;
typedef struct dest_s dest_t;

/* A record of the window. rec points into chunk c while loaded (waiting
 * or sending); a parked one has neither, and pd names where it waits. */
typedef struct {
    const tn_irec_t *rec;
    union {
        chunk_t *c;
        dest_t *pd;
    } u;
    uint32_t partition; /* where it goes now: a reroute changes it */
    uint8_t state;
} entry_t;

/* One read of the log, kept while an entry still points into it. */
struct chunk_s {
    tn_ilog_batch_t b;
    uint32_t refs; /* loaded entries pointing into it */
    struct chunk_s *next;
    struct chunk_s *prev;
};

/* A destination: a (topic, partition), made when a record is first sent
 * to it. It is kept while a batch to it is in flight or its failures
 * count (the backoff, the stuck rule) and its topic exists; the end of a
 * pass frees the others (prune_dests), so the list holds what is busy or
 * failing, not every (topic, partition) written to since the start, as
 * topics come and go and their owners with them. */
struct dest_s {
    char topic[TN_NAME_MAX + 1];
    uint32_t partition;
    bool busy; /* a batch in flight */
    uint32_t failures;
    int64_t retry_ns;     /* monotonic: not before */
    uint32_t parked;      /* parked entries waiting for it (kept while any) */
    uint64_t parked_from; /* every one of them is at this seq or above */
    bool refill;          /* its owner is back (or its topic gone): read them again */
    struct dest_s *next;
};

/* A batch in flight: owned by the dispatcher from its start until its end. */
typedef struct send_s {
    tn_dispatch_t *d;
    dest_t *dst;
    bool local;
    bool abandoned; /* cancelled by the pass: its owner was marked dead */
    uint64_t owner; /* the member it went to */
    uint32_t n;
    uint64_t *seqs;
    tn_commit_call_t call;
    tn_pub_t pub;
    struct send_s *next;
    struct send_s *prev;
    tn_commit_rec_t recs[];
} send_t;

typedef struct {
    uv_work_t work;
    tn_dispatch_t *d;
    uint64_t from;
    uint32_t max;
    size_t max_bytes;
    bool refill; /* parked records read again, not the log's next */
    int rc;
    chunk_t *c;
} read_t;

struct tn_dispatch_s {
    tn_dispatch_opts_t o;
    uv_timer_t timer;
    bool scheduled; /* the timer is armed for a pass */
    /* The window: entries for seqs base .. base + n - 1, a ring. */
    entry_t *win;
    size_t cap, head, n;
    uint64_t base;      /* seq of win[head]: every record below is committed */
    uint64_t read_next; /* the next seq to read */
    size_t bytes;       /* bytes of the loaded records */
    size_t loaded;      /* entries holding their record (waiting or sending) */
    uint64_t parked;    /* parked entries */
    chunk_t *chunks;    /* every chunk a loaded entry points into */
    dest_t *dests;
    send_t *sends; /* batches in flight */
    unsigned inflight;
    bool reading;
    /* Checkpoint: one at a time. */
    tn_ilog_ckpt_t ckpt;
    bool checkpointing;
    uint64_t ckpt_done; /* what the log has */
    int64_t ckpt_ns;    /* monotonic: when the last one started */
    bool ckpt_final;    /* the stop's own was asked for */
    /* A deleted-looking topic being confirmed with the leader. */
    bool confirming;
    char confirm_topic[TN_NAME_MAX + 1];
    bool stopping;
    void (*stop_cb)(void *arg);
    void *stop_arg;
    tn_hist_t latency; /* accepted -> durable at the owner */
    tn_dispatch_stats_t st;
};

static void schedule(tn_dispatch_t *d, uint64_t ms);
static void maybe_stopped(tn_dispatch_t *d);

static entry_t *entry_at(tn_dispatch_t *d, uint64_t seq)
{
    return &d->win[(d->head + (size_t)(seq - d->base)) % d->cap];
}

static size_t rec_bytes(const tn_irec_t *r)
{
    return r->topic.len + r->key.len + r->body.len + 40;
}

static void chunk_unlink_free(tn_dispatch_t *d, chunk_t *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        d->chunks = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    tn_ilog_batch_fini(&c->b);
    tn_free(c);
}

/* Let go of e's record (done or parked): its chunk goes with its last. */
static void release(tn_dispatch_t *d, entry_t *e)
{
    if (e->rec == NULL)
        return;
    d->bytes -= rec_bytes(e->rec);
    d->loaded--;
    chunk_t *c = e->u.c;
    e->rec = NULL;
    e->u.c = NULL;
    if (--c->refs == 0)
        chunk_unlink_free(d, c);
}

static void entry_done(tn_dispatch_t *d, entry_t *e)
{
    release(d, e);
    e->state = E_DONE;
}

static bool window_full(const tn_dispatch_t *d)
{
    return d->loaded >= d->o.window_records || d->bytes >= d->o.window_bytes;
}

/* Park e (seq), waiting for dst's owner: the window's room goes to the
 * records behind it. */
static void park(tn_dispatch_t *d, entry_t *e, uint64_t seq, dest_t *dst)
{
    release(d, e);
    e->state = E_PARKED;
    e->u.pd = dst;
    if (dst->parked == 0 || seq < dst->parked_from)
        dst->parked_from = seq;
    dst->parked++;
    d->parked++;
}

/* Room in the ring for want more entries: grown (doubling, up to
 * MAX_ENTRIES); false when it cannot. */
static bool ring_room(tn_dispatch_t *d, size_t want)
{
    if (d->n + want <= d->cap)
        return true;
    size_t cap = d->cap;
    while (cap < d->n + want && cap < MAX_ENTRIES)
        cap *= 2;
    cap = TN_MIN(cap, (size_t)MAX_ENTRIES);
    if (cap < d->n + want)
        return false;
    entry_t *w = tn_calloc(cap, sizeof(*w));
    if (w == NULL)
        return false;
    for (size_t i = 0; i < d->n; i++)
        w[i] = d->win[(d->head + i) % d->cap];
    tn_free(d->win);
    d->win = w;
    d->cap = cap;
    d->head = 0;
    return true;
}

/* --- the window -------------------------------------------------------------------- */

/* Drop the committed head of the window, then free the chunks below it and
 * ask for a checkpoint at the new base when one is due (CKPT_GAP_NS). */
static void advance(tn_dispatch_t *d);

static void on_checkpointed(tn_ilog_ckpt_t *req, int status)
{
    tn_dispatch_t *d = req->data;
    d->checkpointing = false;
    if (status != 0)
        TN_LOG_RL(TN_LOG_ERROR, 10000, "ingress log: checkpoint failed: %s", tn_strerror(status));
    else
        d->ckpt_done = tn_ilog_checkpoint_seq(d->o.ilog);
    if (d->stopping) {
        maybe_stopped(d);
        return;
    }
    advance(d);
}

/* Drop the committed head of the window (their records were let go
 * when they were done). */
static void pop_done(tn_dispatch_t *d)
{
    while (d->n > 0 && d->win[d->head].state == E_DONE) {
        d->head = (d->head + 1) % d->cap;
        d->n--;
        d->base++;
    }
    if (d->n == 0)
        d->base = d->read_next;
}

/* Ask the log for a checkpoint at the window's base. false when none
 * started. */
static bool checkpoint(tn_dispatch_t *d)
{
    if (d->checkpointing || d->base <= d->ckpt_done)
        return false;
    d->ckpt.data = d;
    d->checkpointing = true;
    d->ckpt_ns = tn_now_mono_ns();
    int rc = tn_ilog_checkpoint(d->o.ilog, &d->ckpt, d->base, on_checkpointed);
    if (rc != 0) {
        d->checkpointing = false;
        TN_LOG_RL(TN_LOG_ERROR, 10000, "ingress log: cannot checkpoint: %s", tn_strerror(rc));
    }
    return rc == 0;
}

static void advance(tn_dispatch_t *d)
{
    pop_done(d);
    if (d->stopping || d->checkpointing || d->base <= d->ckpt_done)
        return;
    int64_t due = d->ckpt_ns + CKPT_GAP_NS;
    int64_t now = tn_now_mono_ns();
    if (now < due && d->base - d->ckpt_done < CKPT_RECORDS) {
        schedule(d, (uint64_t)((due - now) / 1000000) + 1); /* a pass then takes it */
        return;
    }
    checkpoint(d);
}

static void read_work(uv_work_t *w)
{
    read_t *r = TN_CONTAINER_OF(w, read_t, work);
    r->c = tn_calloc(1, sizeof(*r->c));
    if (r->c == NULL) {
        r->rc = UV_ENOMEM;
        return;
    }
    r->rc = tn_ilog_read(r->d->o.ilog, r->from, r->max, r->max_bytes, &r->c->b);
}

/* A read of parked records (from the lowest parked_from of the
 * destinations to refill): the parked entries of those destinations in
 * it are loaded again; the rest of what was read is let go. */
static void refill_done(tn_dispatch_t *d, chunk_t *c)
{
    uint64_t last = 0;
    for (size_t i = 0; i < c->b.n; i++) {
        uint64_t seq = c->b.recs[i].seq;
        last = seq;
        if (seq < d->base || seq >= d->base + d->n)
            continue;
        entry_t *e = entry_at(d, seq);
        if (e->state != E_PARKED || !e->u.pd->refill)
            continue;
        dest_t *dst = e->u.pd;
        dst->parked--;
        d->parked--;
        e->rec = &c->b.recs[i].rec;
        e->u.c = c;
        e->state = E_WAITING;
        c->refs++;
        d->loaded++;
        d->bytes += rec_bytes(e->rec);
    }
    /* What is left of a refilled destination is past what was read. */
    for (dest_t *x = d->dests; x != NULL; x = x->next) {
        if (!x->refill)
            continue;
        if (x->parked == 0)
            x->refill = false;
        else if (x->parked_from <= last)
            x->parked_from = last + 1;
    }
    if (c->refs == 0) {
        tn_ilog_batch_fini(&c->b);
        tn_free(c);
        return;
    }
    c->prev = NULL;
    c->next = d->chunks;
    if (d->chunks != NULL)
        d->chunks->prev = c;
    d->chunks = c;
}

static void read_done(uv_work_t *w, int status)
{
    read_t *r = TN_CONTAINER_OF(w, read_t, work);
    tn_dispatch_t *d = r->d;
    int rc = r->rc != 0 ? r->rc : status;
    chunk_t *c = r->c;
    bool refill = r->refill;
    tn_free(r);
    d->reading = false;
    if (rc == 0 && c->b.n > 0 && !d->stopping && refill) {
        refill_done(d, c);
    } else if (rc == 0 && c->b.n > 0 && !d->stopping) {
        uint64_t first = c->b.recs[0].seq;
        uint32_t n = (uint32_t)c->b.n;
        bool dense = c->b.recs[n - 1].seq == first + n - 1;
        if (first != d->read_next || !dense || d->n + n > d->cap) {
            /* Not what was asked for: the log is not what it says it is. */
            TN_LOG_RL(TN_LOG_ERROR, 10000,
                      "ingress log: a read from seq %" PRIu64 " gave seq %" PRIu64
                      " (%u records); dispatch waits",
                      d->read_next, first, n);
            tn_ilog_batch_fini(&c->b);
            tn_free(c);
            schedule(d, RETRY_NS / 1000000);
            return;
        }
        for (uint32_t i = 0; i < n; i++) {
            entry_t *e = &d->win[(d->head + d->n) % d->cap];
            e->rec = &c->b.recs[i].rec;
            e->u.c = c;
            e->partition = e->rec->partition;
            e->state = E_WAITING;
            d->n++;
            d->loaded++;
            d->bytes += rec_bytes(e->rec);
        }
        c->refs = n;
        d->read_next += n;
        c->prev = NULL;
        c->next = d->chunks;
        if (d->chunks != NULL)
            d->chunks->prev = c;
        d->chunks = c;
    } else {
        if (c != NULL) {
            if (rc == 0)
                tn_ilog_batch_fini(&c->b);
            tn_free(c);
        }
        if (rc != 0 && rc != TN_ECLOSED)
            TN_LOG_RL(TN_LOG_ERROR, 10000, "ingress log: reading from seq %" PRIu64 " failed: %s",
                      d->read_next, tn_strerror(rc));
    }
    if (d->stopping) {
        maybe_stopped(d);
        return;
    }
    schedule(d, rc == 0 ? 0 : RETRY_NS / 1000000);
}

static void maybe_read(tn_dispatch_t *d)
{
    if (d->reading || d->stopping || window_full(d))
        return;
    /* Parked records whose owner is back come first: they are older. */
    uint64_t from = UINT64_MAX;
    for (const dest_t *x = d->dests; x != NULL; x = x->next)
        if (x->refill && x->parked > 0 && x->parked_from < from)
            from = x->parked_from;
    bool refill = from != UINT64_MAX;
    uint32_t room = (uint32_t)(d->o.window_records - d->loaded);
    if (!refill) {
        if (tn_ilog_durable_seq(d->o.ilog) <= d->read_next)
            return;
        uint64_t durable = tn_ilog_durable_seq(d->o.ilog) - d->read_next;
        size_t want = (size_t)TN_MIN((uint64_t)room, durable);
        if (!ring_room(d, want)) {
            want = d->cap - d->n; /* as much as the ring still holds */
            if (want == 0)
                return; /* MAX_ENTRIES behind a parked head: it waits */
        }
        room = (uint32_t)TN_MIN((size_t)room, want);
        from = d->read_next;
    }
    read_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return;
    r->d = d;
    r->from = from;
    r->refill = refill;
    r->max = room;
    r->max_bytes = d->o.window_bytes - d->bytes;
    if (uv_queue_work(d->o.loop, &r->work, read_work, read_done) != 0) {
        tn_free(r);
        return;
    }
    d->reading = true;
}

/* --- routing --------------------------------------------------------------------- */

static dest_t *dest_find(tn_dispatch_t *d, const char *topic, uint32_t partition)
{
    for (dest_t *x = d->dests; x != NULL; x = x->next)
        if (x->partition == partition && strcmp(x->topic, topic) == 0)
            return x;
    return NULL;
}

static dest_t *dest_get(tn_dispatch_t *d, const tn_iov_t *topic, uint32_t partition)
{
    for (dest_t *x = d->dests; x != NULL; x = x->next)
        if (x->partition == partition && strlen(x->topic) == topic->len &&
            memcmp(x->topic, topic->base, topic->len) == 0)
            return x;
    dest_t *x = tn_calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    memcpy(x->topic, topic->base, TN_MIN(topic->len, (size_t)TN_NAME_MAX));
    x->partition = partition;
    x->next = d->dests;
    d->dests = x;
    return x;
}

/* Free the destinations that hold nothing a new one would not: idle and
 * without failures, or of a topic (or a partition) the metastore no
 * longer has, whose records are dropped. */
static void prune_dests(tn_dispatch_t *d, const tn_meta_state_t *s)
{
    for (dest_t **pp = &d->dests; *pp != NULL;) {
        dest_t *x = *pp;
        const tn_meta_topic_entry_t *t = x->failures > 0 ? tn_meta_topic_find(s, x->topic) : NULL;
        if (!x->busy && x->parked == 0 &&
            (x->failures == 0 || t == NULL || x->partition >= t->rec.partitions)) {
            *pp = x->next;
            tn_free(x);
        } else {
            pp = &x->next;
        }
    }
}

static const tn_meta_member_t *alive_member(const tn_meta_state_t *s, uint64_t id)
{
    const tn_meta_member_t *m = id != 0 ? tn_meta_member_find(s, id) : NULL;
    return m != NULL && m->status == TN_MEMBER_ALIVE ? m : NULL;
}

/* Whether (topic, p) failed STUCK_FAILURES commits in a row and is in its
 * backoff: once that ends it gets records again (a probe). */
static bool stuck(tn_dispatch_t *d, const char *topic, uint32_t p, int64_t now)
{
    for (dest_t *x = d->dests; x != NULL; x = x->next)
        if (x->partition == p && strcmp(x->topic, topic) == 0)
            return x->failures >= STUCK_FAILURES && x->retry_ns > now;
    return false;
}

/* The next partition after p, circularly, whose owner is alive and not
 * stuck; false when none is. */
static bool reroute(tn_dispatch_t *d, const tn_meta_state_t *s, const tn_meta_topic_entry_t *t,
                    uint32_t p, int64_t now, uint32_t *out)
{
    uint32_t n = t->rec.partitions;
    for (uint32_t k = 1; k < n; k++) {
        uint32_t q = (p + k) % n;
        if (alive_member(s, tn_meta_state_owner(s, t->rec.name, q)) != NULL &&
            !stuck(d, t->rec.name, q, now)) {
            *out = q;
            return true;
        }
    }
    return false;
}

static void on_confirmed(void *arg, int status)
{
    tn_dispatch_t *d = arg;
    d->confirming = false;
    if (d->stopping) {
        maybe_stopped(d);
        return;
    }
    if (status == 0 && tn_meta_topic_find(tn_meta_state(d->o.meta), d->confirm_topic) == NULL) {
        uint64_t dropped = 0;
        size_t len = strlen(d->confirm_topic);
        for (size_t i = 0; i < d->n; i++) {
            entry_t *e = &d->win[(d->head + i) % d->cap];
            if (e->state == E_WAITING && e->rec->topic.len == len &&
                memcmp(e->rec->topic.base, d->confirm_topic, len) == 0) {
                entry_done(d, e);
                dropped++;
            }
        }
        d->st.dropped += dropped;
        if (dropped > 0)
            TN_LOG(TN_LOG_WARN,
                   "ingress log: topic %s was deleted; %" PRIu64
                   " record(s) accepted for it are dropped",
                   d->confirm_topic, dropped);
        advance(d);
    }
    schedule(d, 0);
}

/* Ask the leader whether the topic of e, absent from the replica, is
 * gone (one topic at a time). */
static void confirm_gone(tn_dispatch_t *d, const tn_irec_t *rec)
{
    if (d->confirming || !tn_meta_caught_up(d->o.meta))
        return;
    memset(d->confirm_topic, 0, sizeof(d->confirm_topic));
    memcpy(d->confirm_topic, rec->topic.base, TN_MIN(rec->topic.len, (size_t)TN_NAME_MAX));
    d->confirming = true;
    if (tn_meta_confirm(d->o.meta, on_confirmed, d) != 0)
        d->confirming = false;
}

/* --- committing ------------------------------------------------------------------------ */

/* A batch ended. sync: inside send_batch, from the pass, which advances
 * the window itself afterwards (its indexes must not move meanwhile). */
static void send_end(send_t *x, int status, uint64_t owner, bool sync)
{
    tn_dispatch_t *d = x->d;
    dest_t *dst = x->dst;
    dst->busy = false;
    d->inflight--;
    if (x->prev != NULL)
        x->prev->next = x->next;
    else
        d->sends = x->next;
    if (x->next != NULL)
        x->next->prev = x->prev;
    int64_t now_ms = tn_now_wall_ms();
    if (status == 0) {
        dst->failures = 0;
        d->st.batches++;
        d->st.committed += x->n;
        if (x->local)
            d->st.committed_here += x->n;
        for (uint32_t i = 0; i < x->n; i++) {
            entry_t *e = entry_at(d, x->seqs[i]);
            int64_t age = now_ms - e->rec->created_ms;
            tn_hist_observe(&d->latency, (age > 0 ? age : 0) * 1000000);
            entry_done(d, e);
        }
    } else {
        d->st.failures++;
        if (status != TN_ECLOSED) {
            dst->failures++;
            dst->retry_ns = tn_now_mono_ns() + RETRY_NS;
            if (owner != 0)
                TN_LOG_RL(TN_LOG_WARN, 10000,
                          "ingress log: committing %u record(s) to %s/%u failed: %s (node %" PRIu64
                          " owns it, says the peer); retrying",
                          x->n, dst->topic, dst->partition, tn_strerror(status), owner);
            else
                TN_LOG_RL(TN_LOG_WARN, 10000,
                          "ingress log: committing %u record(s) to %s/%u failed: %s; retrying",
                          x->n, dst->topic, dst->partition, tn_strerror(status));
        }
        for (uint32_t i = 0; i < x->n; i++)
            entry_at(d, x->seqs[i])->state = E_WAITING;
    }
    if (x->local)
        tn_pub_fini(&x->pub);
    tn_free(x->seqs);
    tn_free(x);
    if (sync)
        return;
    if (d->stopping) {
        maybe_stopped(d);
        return;
    }
    advance(d);
    schedule(d, 0);
}

static void on_committed(tn_commit_call_t *c, int status)
{
    send_t *x = c->data;
    send_end(x, status, status == TN_EREMOTE ? c->owner : 0, false);
}

static void on_published(tn_pub_t *p, int status)
{
    send_end(p->data, status, status == TN_EREMOTE ? p->owner : 0, false);
}

/* Publish x's records to this node's engine, pinned to the partition. */
static int send_local(tn_dispatch_t *d, send_t *x)
{
    tn_pub_t *p = &x->pub;
    int rc = tn_pub_init(p, x->n);
    if (rc != 0)
        return rc;
    x->local = true;
    tn_rec_in_t *recs = tn_malloc(x->n * sizeof(*recs));
    if (recs == NULL) {
        tn_pub_fini(p);
        return UV_ENOMEM;
    }
    for (uint32_t i = 0; i < x->n; i++)
        recs[i] = (tn_rec_in_t){x->recs[i].key, x->recs[i].body, x->recs[i].deliver_at_ms};
    rc = tn_pub_fill(p, recs);
    tn_free(recs);
    if (rc == 0) {
        p->data = x;
        p->pinned = true;
        p->pin = x->dst->partition;
        rc = tn_broker_publish(d->o.broker, x->dst->topic, strlen(x->dst->topic), p, 0,
                               on_published);
    }
    if (rc != 0)
        tn_pub_fini(p);
    return rc;
}

/* Start a batch to dst from the waiting entries routed to it, beginning at
 * window index first. */
static void send_batch(tn_dispatch_t *d, const tn_meta_state_t *s, dest_t *dst, size_t first,
                       uint64_t owner)
{
    uint32_t max = d->o.batch_records;
    size_t bytes = 0;
    uint32_t n = 0;
    size_t len = strlen(dst->topic);
    /* Count first, then fill (the batch is one allocation). */
    for (size_t i = first; i < d->n && n < max; i++) {
        const entry_t *e = &d->win[(d->head + i) % d->cap];
        if (e->state != E_WAITING || e->partition != dst->partition || e->rec->topic.len != len ||
            memcmp(e->rec->topic.base, dst->topic, len) != 0)
            continue;
        size_t b = e->rec->key.len + e->rec->body.len + 32;
        if (n > 0 && bytes + b > d->o.batch_bytes)
            break;
        bytes += b;
        n++;
    }
    if (n == 0)
        return;
    send_t *x = tn_calloc(1, sizeof(*x) + n * sizeof(x->recs[0]));
    uint64_t *seqs = x != NULL ? tn_malloc(n * sizeof(*seqs)) : NULL;
    if (seqs == NULL) {
        tn_free(x);
        return;
    }
    x->d = d;
    x->dst = dst;
    x->owner = owner;
    x->n = n;
    x->seqs = seqs;
    uint32_t k = 0;
    for (size_t i = first; i < d->n && k < n; i++) {
        entry_t *e = &d->win[(d->head + i) % d->cap];
        if (e->state != E_WAITING || e->partition != dst->partition || e->rec->topic.len != len ||
            memcmp(e->rec->topic.base, dst->topic, len) != 0)
            continue;
        e->state = E_SENDING;
        x->seqs[k] = d->base + i;
        x->recs[k].key = e->rec->key;
        x->recs[k].body = e->rec->body;
        x->recs[k].deliver_at_ms = e->rec->deliver_at_ms;
        x->recs[k].created_ms = e->rec->created_ms;
        k++;
    }
    dst->busy = true;
    d->inflight++;
    x->next = d->sends;
    if (d->sends != NULL)
        d->sends->prev = x;
    d->sends = x;
    int rc;
    if (owner == d->o.node_id) {
        rc = send_local(d, x);
    } else {
        const tn_meta_member_t *m = tn_meta_member_find(s, owner);
        x->call.data = x;
        rc = m == NULL || m->api_addr[0] == '\0'
                 ? UV_EHOSTUNREACH
                 : tn_commit_call(d->o.rpc, m->api_addr, dst->topic, dst->partition, x->recs, n,
                                  d->o.commit_timeout_ms, &x->call, on_committed);
    }
    if (rc != 0)
        send_end(x, rc, 0, true); /* back to waiting, retried after the backoff */
}

/* --- the pass ------------------------------------------------------------------------ */

/* Mark for reading again the destinations with parked records whose owner
 * is alive again, or whose topic or partition is gone (read, they are
 * dropped as any such record). true when one is marked. */
static bool mark_refills(tn_dispatch_t *d, const tn_meta_state_t *s, int64_t now)
{
    bool any = false;
    for (dest_t *x = d->dests; x != NULL; x = x->next) {
        if (x->parked == 0 || x->refill)
            continue;
        const tn_meta_topic_entry_t *t = tn_meta_topic_find(s, x->topic);
        bool gone = t == NULL || x->partition >= t->rec.partitions;
        if (gone || (alive_member(s, tn_meta_state_owner(s, x->topic, x->partition)) != NULL &&
                     x->retry_ns <= now)) {
            x->refill = true;
            any = true;
        }
    }
    return any;
}

/* Cancel each batch in flight to another member that the replica now
 * marks dead (or no longer has): a dead owner may never answer, and its
 * records would wait out the commit's budget (30 s) before the next pass
 * could reroute them. Cancelled, they are back to waiting from the
 * loop: unpinned ones go to a partition whose owner is alive, pinned
 * ones wait for theirs. An owner that stored the batch all the same holds
 * those records twice (at-least-once, as after any failed commit). */
static void abandon_dead(tn_dispatch_t *d, const tn_meta_state_t *s)
{
    for (send_t *x = d->sends; x != NULL; x = x->next) {
        if (x->local || x->abandoned || alive_member(s, x->owner) != NULL)
            continue;
        x->abandoned = true;
        tn_commit_call_cancel(&x->call);
    }
}

static void pass(tn_dispatch_t *d)
{
    maybe_read(d);
    if (!tn_meta_ready(d->o.meta)) {
        schedule(d, PASS_IDLE_MS);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(d->o.meta);
    int64_t now = tn_now_mono_ns();
    bool waiting = d->parked > 0;
    if (!d->stopping)
        abandon_dead(d, s);
    if (d->parked > 0 && mark_refills(d, s, now))
        maybe_read(d);
    for (size_t i = 0; i < d->n && d->inflight < d->o.max_inflight && !d->stopping; i++) {
        entry_t *e = &d->win[(d->head + i) % d->cap];
        if (e->state != E_WAITING)
            continue;
        waiting = true;
        const tn_irec_t *rec = e->rec;
        char name[TN_NAME_MAX + 1];
        size_t len = TN_MIN(rec->topic.len, (size_t)TN_NAME_MAX);
        memcpy(name, rec->topic.base, len);
        name[len] = '\0';
        const tn_meta_topic_entry_t *t = tn_meta_topic_find(s, name);
        if (t == NULL) {
            confirm_gone(d, rec);
            continue;
        }
        if (e->partition >= t->rec.partitions) {
            if (rec->pinned) {
                /* Its partition is gone (the topic was made again with
                 * fewer): nowhere it was meant to go. */
                TN_LOG_RL(TN_LOG_WARN, 10000,
                          "ingress log: a record for %s/%u, which no longer exists, is dropped",
                          name, e->partition);
                entry_done(d, e);
                d->st.dropped++;
                continue;
            }
            e->partition %= t->rec.partitions;
        }
        uint64_t owner = tn_meta_state_owner(s, name, e->partition);
        bool alive = alive_member(s, owner) != NULL;
        uint32_t q;
        if ((!alive || stuck(d, name, e->partition, now)) && !rec->pinned &&
            reroute(d, s, t, e->partition, now, &q)) {
            e->partition = q;
            d->st.reroutes++;
            owner = tn_meta_state_owner(s, name, q);
            alive = true;
        }
        tn_iov_t topic = tn_iov(name, len);
        /* Behind a parked record of its destination: parked too, so the
         * partition gets its records in order when they are read again. */
        dest_t *pd = d->parked > 0 ? dest_find(d, name, e->partition) : NULL;
        if (pd != NULL && pd->parked > 0 && d->base + i >= pd->parked_from) {
            park(d, e, d->base + i, pd);
            continue;
        }
        if (!alive) {
            /* It waits for its owner (a stuck one is still tried); when
             * the window is full, without holding up what is behind it. */
            pd = window_full(d) ? dest_get(d, &topic, e->partition) : NULL;
            if (pd != NULL)
                park(d, e, d->base + i, pd);
            continue;
        }
        dest_t *dst = dest_get(d, &topic, e->partition);
        if (dst == NULL || dst->busy || dst->retry_ns > now)
            continue;
        send_batch(d, s, dst, i, owner);
    }
    prune_dests(d, s);
    advance(d);
    /* Batches in flight: passes go on, so one to an owner marked dead
     * meanwhile is abandoned (abandon_dead). */
    if (!d->stopping && (waiting || d->reading || d->sends != NULL))
        schedule(d, PASS_IDLE_MS);
}

static void on_timer(uv_timer_t *t)
{
    tn_dispatch_t *d = t->data;
    d->scheduled = false;
    if (!d->stopping)
        pass(d);
}

static void schedule(tn_dispatch_t *d, uint64_t ms)
{
    if (d->stopping)
        return;
    if (d->scheduled && ms > 0)
        return; /* one is coming */
    d->scheduled = true;
    uv_timer_start(&d->timer, on_timer, ms, 0);
}

void tn_dispatch_kick(void *arg)
{
    schedule(arg, 0);
}

/* --- life ------------------------------------------------------------------------ */

int tn_dispatch_new(const tn_dispatch_opts_t *o, tn_dispatch_t **out)
{
    tn_dispatch_t *d = tn_calloc(1, sizeof(*d));
    if (d == NULL)
        return UV_ENOMEM;
    d->o = *o;
    if (d->o.commit_timeout_ms == 0)
        d->o.commit_timeout_ms = 30000;
    if (d->o.window_records == 0)
        d->o.window_records = 4096;
    if (d->o.window_bytes == 0)
        d->o.window_bytes = 16u << 20;
    if (d->o.batch_bytes == 0 || d->o.batch_bytes > (1u << 20))
        d->o.batch_bytes = 1u << 20;
    if (d->o.batch_records == 0)
        d->o.batch_records = 1024;
    if (d->o.max_inflight == 0)
        d->o.max_inflight = 16;
    d->cap = d->o.window_records;
    d->win = tn_calloc(d->cap, sizeof(*d->win));
    if (d->win == NULL) {
        tn_free(d);
        return UV_ENOMEM;
    }
    d->base = d->read_next = d->ckpt_done = tn_ilog_checkpoint_seq(o->ilog);
    tn_hist_init(&d->latency);
    uv_timer_init(o->loop, &d->timer);
    d->timer.data = d;
    *out = d;
    schedule(d, 0); /* what a previous run left */
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_dispatch_t *d = h->data;
    d->stop_cb(d->stop_arg);
}

static void maybe_stopped(tn_dispatch_t *d)
{
    if (d->inflight > 0 || d->reading || d->checkpointing || d->confirming || d->stop_cb == NULL ||
        uv_is_closing((uv_handle_t *)&d->timer))
        return;
    /* Once nothing is in flight: a last checkpoint past what was
     * committed, so the next start does not commit it again. */
    pop_done(d);
    if (!d->ckpt_final) {
        d->ckpt_final = true;
        if (checkpoint(d))
            return; /* on_checkpointed comes back here */
    }
    uv_close((uv_handle_t *)&d->timer, on_timer_closed);
}

void tn_dispatch_stop(tn_dispatch_t *d, void (*cb)(void *arg), void *arg)
{
    d->stopping = true;
    d->stop_cb = cb;
    d->stop_arg = arg;
    uv_timer_stop(&d->timer);
    d->scheduled = false;
    for (send_t *x = d->sends; x != NULL; x = x->next)
        if (!x->local && !x->abandoned)
            tn_commit_call_cancel(&x->call);
    maybe_stopped(d);
}

void tn_dispatch_free(tn_dispatch_t *d)
{
    if (d == NULL)
        return;
    while (d->chunks != NULL)
        chunk_unlink_free(d, d->chunks);
    while (d->dests != NULL) {
        dest_t *x = d->dests;
        d->dests = x->next;
        tn_free(x);
    }
    tn_free(d->win);
    tn_free(d);
}

void tn_dispatch_stats(const tn_dispatch_t *d, tn_dispatch_stats_t *out)
{
    *out = d->st;
    out->window = d->n;
}

/* --- metrics ------------------------------------------------------------------------ */

int tn_dispatch_metrics_write(const tn_dispatch_t *d, tn_buf_t *out)
{
    tn_ilog_stats_t ls;
    tn_ilog_stats(d->o.ilog, &ls);
    const tn_meta_state_t *s = tn_meta_state(d->o.meta);
    char line[512];
    int rc = 0;
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        int n_ = snprintf(line, sizeof(line), __VA_ARGS__);                                        \
        if (rc == 0)                                                                               \
            rc = tn_buf_append(out, line, (size_t)n_);                                             \
    } while (0)
    EMIT("# HELP tern_ingress_records Records in this node's ingress log not yet committed to "
         "their owner.\n# TYPE tern_ingress_records gauge\ntern_ingress_records %" PRIu64 "\n",
         ls.pending_records);
    EMIT("# HELP tern_ingress_bytes Bytes of those records.\n# TYPE tern_ingress_bytes "
         "gauge\ntern_ingress_bytes %" PRIu64 "\n",
         ls.pending_bytes);
    EMIT("# HELP tern_ingress_disk_bytes Bytes of the ingress log's segment files.\n# TYPE "
         "tern_ingress_disk_bytes gauge\ntern_ingress_disk_bytes %" PRIu64 "\n",
         ls.bytes);
    EMIT("# HELP tern_ingress_segments Segment files of the ingress log.\n# TYPE "
         "tern_ingress_segments gauge\ntern_ingress_segments %" PRIu64 "\n",
         (uint64_t)ls.segments);
    int64_t age = ls.pending_records > 0 && ls.oldest_pending_ms > 0
                      ? tn_now_wall_ms() - ls.oldest_pending_ms
                      : 0;
    EMIT("# HELP tern_ingress_oldest_record_age_seconds Age of the oldest record not yet "
         "committed to its owner.\n# TYPE tern_ingress_oldest_record_age_seconds "
         "gauge\ntern_ingress_oldest_record_age_seconds %.3f\n",
         age > 0 ? (double)age / 1000.0 : 0.0);
    /* Per destination node: what the window holds for each owner. */
    EMIT("# HELP tern_ingress_waiting_records Records read from the ingress log and waiting for "
         "their owner, by owner node.\n# TYPE tern_ingress_waiting_records gauge\n");
    EMIT("# HELP tern_ingress_waiting_bytes Their bytes, by owner node.\n# TYPE "
         "tern_ingress_waiting_bytes gauge\n");
    /* One walk of the window, each record added to its owner's line. */
    struct {
        uint64_t recs, bytes;
    } *by = s->nmembers > 0 ? tn_calloc(s->nmembers, sizeof(*by)) : NULL;
    if (s->nmembers > 0 && by == NULL && rc == 0)
        rc = UV_ENOMEM;
    for (size_t i = 0; by != NULL && i < d->n; i++) {
        const entry_t *e = &d->win[(d->head + i) % d->cap];
        if (e->state == E_DONE)
            continue;
        char name[TN_NAME_MAX + 1];
        if (e->state == E_PARKED) {
            snprintf(name, sizeof(name), "%s", e->u.pd->topic);
        } else {
            size_t len = TN_MIN(e->rec->topic.len, (size_t)TN_NAME_MAX);
            memcpy(name, e->rec->topic.base, len);
            name[len] = '\0';
        }
        uint64_t owner = tn_meta_state_owner(s, name, e->partition);
        const tn_meta_member_t *m = owner != 0 ? tn_meta_member_find(s, owner) : NULL;
        if (m != NULL) {
            by[m - s->members].recs++;
            /* A parked record's bytes are in the log, not in memory: the
             * line counts what the window holds. */
            if (e->rec != NULL)
                by[m - s->members].bytes += e->rec->key.len + e->rec->body.len;
        }
    }
    for (size_t m = 0; by != NULL && m < s->nmembers && rc == 0; m++) {
        uint64_t id = s->members[m].id;
        EMIT("tern_ingress_waiting_records{node=\"%" PRIu64 "\"} %" PRIu64 "\n", id, by[m].recs);
        EMIT("tern_ingress_waiting_bytes{node=\"%" PRIu64 "\"} %" PRIu64 "\n", id, by[m].bytes);
    }
    tn_free(by);
    EMIT("# HELP tern_dispatch_records_total Records the dispatcher moved, by outcome.\n# TYPE "
         "tern_dispatch_records_total counter\n");
    EMIT("tern_dispatch_records_total{outcome=\"committed\"} %" PRIu64 "\n", d->st.committed);
    EMIT("tern_dispatch_records_total{outcome=\"rerouted\"} %" PRIu64 "\n", d->st.reroutes);
    EMIT("tern_dispatch_records_total{outcome=\"dropped\"} %" PRIu64 "\n", d->st.dropped);
    EMIT("# HELP tern_dispatch_batch_failures_total Commit batches that failed and were "
         "retried.\n# TYPE tern_dispatch_batch_failures_total counter\n"
         "tern_dispatch_batch_failures_total %" PRIu64 "\n",
         d->st.failures);
#undef EMIT
    if (rc == 0)
        rc = tn_hist_write(&d->latency, "tern_dispatch_latency_seconds", "",
                           "From a record's acceptance here to its owner's durability.", out);
    return rc;
}
