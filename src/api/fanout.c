/* Fan-out to child topics. See fanout.h. */
#include "core/platform.h"

#include "api/fanout.h"

#include "api/v1/common.h"
#include "cluster/replerr.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <inttypes.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CREDIT        256
#define LEASE_MS      60000
#define RETRY_MS      1000
#define SYNC_EVERY_MS 2000
/* The attach times an epoch can carry: from 2020-01-01 to a day ahead of
 * this node's clock. An epoch from before epochs carried one is random,
 * and names a time in that span about once in 1,300: then its channel,
 * made on a node that did not have it, starts at that time (copying
 * what the parent still holds from then on) instead of at the tail. */
#define EPOCH_MIN_MS   1577836800000LL
#define EPOCH_AHEAD_MS (24LL * 3600 * 1000)
#define SWEEP_MAX      64

typedef struct runner_s runner_t;

struct runner_s {
    tn_consumer_t c;
    tn_fanout_t *f;
    char parent[TN_NAME_MAX + 1];
    char child[TN_NAME_MAX + 1];
    uint64_t epoch;
    int64_t delay_ms;
    uint32_t copies; /* publishes in flight */
    bool attached;
    bool dead;  /* stopped: freed when its copies end */
    bool stale; /* not seen in this sync */
    tn_waiter_t wait;
    bool waiting;
    runner_t *next;
};

struct tn_fanout_s {
    tn_broker_t *broker;
    tn_router_t *router;
    tn_meta_t *meta;
    runner_t *runners;
    tn_fanout_hold_t *holds; /* attaches under way here */
    uv_timer_t timer;
    bool closing;
};

typedef struct {
    tn_pub_t pub;
    runner_t *r;
    uint32_t partition;
    uint64_t offset;
    uint32_t nonce;
} copy_t;

void tn_fanout_channel(uint64_t epoch, char out[32])
{
    snprintf(out, 32, TN_FANOUT_CHANNEL_PREFIX "%016" PRIx64, epoch);
}

bool tn_fanout_is_channel(const char *name)
{
    return tn_name_link_channel(name, strlen(name));
}

bool tn_fanout_epoch(uint64_t *epoch)
{
    uint16_t low = 0;
    while (low == 0) {
        if (RAND_bytes((unsigned char *)&low, sizeof(low)) != 1)
            return false;
    }
    *epoch = ((uint64_t)tn_now_wall_ms() << 16) | low;
    return true;
}

/* The attach time epoch carries, in wall-clock ms; 0 when it carries none
 * (EPOCH_MIN_MS). */
static int64_t epoch_ms(uint64_t epoch)
{
    int64_t ms = (int64_t)(epoch >> 16);
    if (ms < EPOCH_MIN_MS || ms > tn_now_wall_ms() + EPOCH_AHEAD_MS)
        return 0;
    return ms;
}

void tn_fanout_hold(tn_fanout_t *f, tn_fanout_hold_t *h)
{
    h->next = f->holds;
    f->holds = h;
}

void tn_fanout_release(tn_fanout_t *f, tn_fanout_hold_t *h)
{
    for (tn_fanout_hold_t **pp = &f->holds; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            return;
        }
    }
}

int tn_fanout_open_channel(tn_broker_t *b, const char *parent, uint64_t epoch, bool at_tail,
                           tn_waiter_t *w, tn_channel_t **out)
{
    tn_topic_t *t = NULL;
    /* A parent being placed or grown here is waited for, not missing. */
    int rc = tn_broker_topic(b, parent, strlen(parent), false, 0, w, &t);
    if (rc == UV_EAGAIN)
        return rc;
    if (rc != 0)
        return TN_ENOTFOUND;
    char name[32];
    tn_fanout_channel(epoch, name);
    int64_t since_ms = at_tail ? 0 : epoch_ms(epoch);
    return since_ms != 0 ? tn_topic_channel_since(t, name, strlen(name), since_ms * 1000000, w, out)
                         : tn_topic_channel_at_tail(t, name, strlen(name), w, out);
}

void tn_fanout_drop_channel(tn_broker_t *b, const char *parent, uint64_t epoch)
{
    char name[32];
    tn_fanout_channel(epoch, name);
    tn_topic_t *t = NULL;
    tn_channel_t *ch = NULL;
    if (tn_broker_topic(b, parent, strlen(parent), false, 0, NULL, &t) == 0 &&
        tn_topic_channel(t, name, strlen(name), false, NULL, &ch) == 0)
        tn_channel_delete(ch, NULL, NULL);
}

static void runner_maybe_free(runner_t *r)
{
    if (r->dead && r->copies == 0 && !r->waiting)
        tn_free(r);
}

static void on_copied(tn_pub_t *p, int status)
{
    copy_t *cp = p->data;
    runner_t *r = cp->r;
    r->copies--;
    if (!r->dead && r->attached) {
        if (status == 0) {
            /* Refused (out of memory, the channel log failing, the lease
             * lapsed meanwhile): the message is delivered, and copied,
             * again. Said, so a duplicate in the child is explained. */
            int rc = tn_consumer_fin(&r->c, cp->partition, cp->offset, true, cp->nonce);
            if (rc != 0)
                TN_LOG_RL(TN_LOG_WARN, 10000,
                          "fan-out %s -> %s: finishing the copied message %s/%" PRIu32 "@%" PRIu64
                          " failed: %s; it will be copied again",
                          r->parent, r->child, r->parent, cp->partition, cp->offset,
                          tn_strerror(rc));
        } else {
            /* A replicated child refusing for now (cluster/replerr.h) is
             * reported in the words every door uses. */
            const char *why = tn_replerr_text(status);
            TN_LOG_RL(TN_LOG_WARN, 10000, "fan-out %s -> %s: copying failed: %s; retrying",
                      r->parent, r->child, why != NULL ? why : tn_strerror(status));
            /* A REQ refused (out of memory, a log that cannot take the
             * record) would keep it leased for LEASE_MS: the lease ends
             * after RETRY_MS instead (tn_consumer_put_back), so the copy
             * is tried again as soon either way. */
            tn_consumer_put_back(&r->c, cp->partition, cp->offset, true, cp->nonce, RETRY_MS);
        }
    }
    tn_pub_fini(&cp->pub);
    tn_free(cp);
    runner_maybe_free(r);
}

static void on_deliver(tn_consumer_t *c, const tn_delivery_t *d)
{
    runner_t *r = c->data;
    tn_topic_t *child = NULL;
    int rc = tn_broker_topic(r->f->broker, r->child, strlen(r->child), false, 0, NULL, &child);
    copy_t *cp = rc == 0 ? tn_calloc(1, sizeof(*cp)) : NULL;
    if (cp == NULL || tn_pub_init(&cp->pub, 1) != 0 ||
        tn_pub_set(&cp->pub, 0, d->body->data, d->body->len) != 0 ||
        (d->key != NULL && tn_pub_set_key(&cp->pub, 0, d->key->data, d->key->len) != 0)) {
        if (cp != NULL)
            tn_pub_fini(&cp->pub);
        tn_free(cp);
        /* Tried again later (its REQ refused too: as on_copied's). */
        tn_consumer_put_back(c, d->partition, d->offset, true, d->nonce, RETRY_MS);
        return;
    }
    /* Equal counts (a child created with its parent has the parent's):
     * parent partition p feeds child partition p. Otherwise a key picks
     * the child's partition as a produce's does, and a keyless copy goes
     * where the engine spreads it. */
    if (child->nparts == c->ch->topic->nparts) {
        cp->pub.pinned = true;
        cp->pub.pin = d->partition;
    } else if (d->key != NULL && d->key->len > 0) {
        cp->pub.pinned = true;
        cp->pub.pin = tn__v1_key_hash(d->key->data, d->key->len) % child->nparts;
    }
    cp->r = r;
    cp->partition = d->partition;
    cp->offset = d->offset;
    cp->nonce = d->nonce;
    cp->pub.data = cp;
    int64_t at = r->delay_ms > 0 ? d->publish_ns / 1000000 + r->delay_ms : 0;
    if (at <= tn_now_wall_ms())
        at = 0;
    r->copies++;
    rc = tn_router_publish(r->f->router, r->child, strlen(r->child), &cp->pub, at, on_copied);
    if (rc != 0)
        on_copied(&cp->pub, rc);
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

static void on_kick(tn_consumer_t *c)
{
    runner_t *r = c->data;
    /* Its channel or the parent is being deleted: the next sync decides. */
    r->attached = false;
    tn_consumer_detach(c);
    for (runner_t **pp = &r->f->runners; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    runner_stop(r);
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

/* Attach r to its channel on the parent. A missing one (on every node but
 * the one that attached, or after an attach that crashed before its
 * channel was made) starts at the attach time its epoch carries, or at
 * the tail when it carries none. */
static void runner_start(runner_t *r)
{
    tn_channel_t *ch = NULL;
    r->wait.cb = on_channel_ready;
    r->wait.data = r;
    int rc = tn_fanout_open_channel(r->f->broker, r->parent, r->epoch, false, &r->wait, &ch);
    if (rc == UV_EAGAIN) {
        r->waiting = true;
        return;
    }
    if (rc != 0)
        return; /* no parent here yet: the next sync tries again */
    r->c.deliver = on_deliver;
    r->c.kick = on_kick;
    r->c.data = r;
    r->c.timeout_ms = LEASE_MS;
    tn_consumer_attach(&r->c, ch);
    tn_consumer_credit(&r->c, CREDIT);
    r->attached = true;
    TN_LOG(TN_LOG_INFO, "fan-out %s -> %s running (channel %s)", r->parent, r->child, ch->name);
}

static void on_channel_deleted(void *arg, int status)
{
    (void)arg;
    (void)status;
}

/* Whether a runner or an attach under way here names the channel of
 * epoch on parent. */
static bool linked_here(const tn_fanout_t *f, const char *parent, uint64_t epoch)
{
    for (const runner_t *r = f->runners; r != NULL; r = r->next)
        if (r->epoch == epoch && strcmp(r->parent, parent) == 0)
            return true;
    for (const tn_fanout_hold_t *h = f->holds; h != NULL; h = h->next)
        if (h->epoch == epoch)
            return true;
    return false;
}

/* Whether a remote child (api/rchild.h) names the channel of epoch on
 * parent: those channels are its cursors, named as links' are. */
static bool remote_child_names(const tn_fanout_t *f, const char *parent, uint64_t epoch)
{
    const tn_meta_remotes_t *rs = &tn_meta_state(f->meta)->remotes;
    size_t first;
    size_t n = tn_meta_rchild_count(rs, parent, NULL, &first);
    for (size_t i = first; n > 0 && i < rs->nchildren; i++) {
        if (strcmp(rs->children[i]->parent, parent) != 0)
            continue;
        n--;
        if (rs->children[i]->epoch == epoch)
            return true;
    }
    return false;
}

typedef struct {
    char topic[TN_NAME_MAX + 1];
    char channel[32];
} swept_t;

/* Delete the link channels no link names (their link went while this
 * node was down, or its runner was stopped before its channel could be
 * deleted); at most SWEEP_MAX a sync. Only on a caught-up replica: one
 * behind may not have a link yet whose channel is here. */
static void sweep(tn_fanout_t *f)
{
    if (!tn_meta_caught_up(f->meta))
        return;
    swept_t found[SWEEP_MAX];
    memset(found, 0, sizeof(found));
    size_t n = 0;
    tn_broker_t *b = f->broker;
    for (size_t i = 0; i < b->nbuckets && n < SWEEP_MAX; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL && n < SWEEP_MAX; t = t->hnext) {
            if (t->memory || t->state != TN_OBJ_READY)
                continue;
            for (tn_channel_t *ch = t->channels; ch != NULL && n < SWEEP_MAX; ch = ch->next) {
                if (ch->state != TN_OBJ_READY || !tn_fanout_is_channel(ch->name))
                    continue;
                uint64_t epoch = strtoull(ch->name + strlen(TN_FANOUT_CHANNEL_PREFIX), NULL, 16);
                if (linked_here(f, t->name, epoch) || remote_child_names(f, t->name, epoch))
                    continue;
                snprintf(found[n].topic, sizeof(found[n].topic), "%s", t->name);
                snprintf(found[n].channel, sizeof(found[n].channel), "%s", ch->name);
                n++;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        TN_LOG(TN_LOG_NOTICE, "fan-out: channel %s of %s belongs to no link; deleting it",
               found[i].channel, found[i].topic);
        (void)tn_broker_delete(b, found[i].topic, found[i].channel, on_channel_deleted, NULL);
    }
}

void tn_fanout_sync(tn_fanout_t *f)
{
    if (f->closing || !tn_meta_ready(f->meta))
        return;
    const tn_meta_state_t *s = tn_meta_state(f->meta);
    for (runner_t *r = f->runners; r != NULL; r = r->next)
        r->stale = true;
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_t *rec = &s->topics[i]->rec;
        if (rec->parent[0] == '\0')
            continue;
        runner_t *r = f->runners;
        while (r != NULL && !(r->epoch == rec->attach_epoch && strcmp(r->child, rec->name) == 0))
            r = r->next;
        if (r != NULL) {
            r->stale = false;
            r->delay_ms = rec->fanout_delay_ms;
            if (!r->attached && !r->waiting)
                runner_start(r);
            continue;
        }
        r = tn_calloc(1, sizeof(*r));
        if (r == NULL)
            continue;
        r->f = f;
        snprintf(r->parent, sizeof(r->parent), "%s", rec->parent);
        snprintf(r->child, sizeof(r->child), "%s", rec->name);
        r->epoch = rec->attach_epoch;
        r->delay_ms = rec->fanout_delay_ms;
        r->next = f->runners;
        f->runners = r;
        runner_start(r);
    }
    /* Links that are gone: stop, and delete their channel. */
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
        /* A deleted parent takes its channels with it. */
        bool had = r->attached && tn_meta_topic_find(s, parent) != NULL;
        runner_stop(r); /* r may be gone */
        if (had)
            tn_fanout_drop_channel(f->broker, parent, epoch);
    }
    sweep(f);
}

bool tn_fanout_lag(tn_fanout_t *f, const char *child, uint64_t *lag)
{
    for (runner_t *r = f->runners; r != NULL; r = r->next) {
        if (strcmp(r->child, child) != 0 || !r->attached)
            continue;
        tn_channel_stats_t st;
        tn_channel_stats(r->c.ch, &st);
        *lag = st.depth;
        return true;
    }
    return false;
}

static void on_timer(uv_timer_t *h)
{
    tn_fanout_sync(h->data);
}

int tn_fanout_new(uv_loop_t *loop, tn_broker_t *b, tn_router_t *router, tn_meta_t *m,
                  tn_fanout_t **out)
{
    tn_fanout_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL)
        return UV_ENOMEM;
    f->broker = b;
    f->router = router;
    f->meta = m;
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    uv_timer_start(&f->timer, on_timer, SYNC_EVERY_MS, SYNC_EVERY_MS);
    *out = f;
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_free(h->data);
}

void tn_fanout_close(tn_fanout_t *f)
{
    if (f == NULL)
        return;
    f->closing = true;
    while (f->runners != NULL) {
        runner_t *r = f->runners;
        f->runners = r->next;
        runner_stop(r);
    }
    uv_close((uv_handle_t *)&f->timer, on_timer_closed);
}
