/* Publishes held while their topic is being created, or their partition
 * recovered at start is not placed yet. See hold.h. */
#include "core/platform.h"

#include "cluster/hold.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/time.h"

#include <string.h>

/* One held publish: its own poll timer, on the hold's list until the
 * timer is closed (freed in on_closed). */
typedef struct held_s {
    struct held_s *prev, *next;
    tn_hold_t *h;
    tn_pub_t *p;
    int64_t deliver_at_ms;
    int64_t created_at_ms; /* the marked record's */
    int64_t until_ms;      /* monotonic: TN_ROUTER_CREATE_HOLD_MS after it came */
    bool placing;          /* held until partition is placed (tn_hold_until_placed) */
    uint32_t partition;
    uv_timer_t timer;
    size_t len;
    char topic[TN_NAME_MAX + 1];
} held_t;

struct tn_hold_s {
    tn_meta_t *meta;
    tn_broker_t *b;
    tn_hold_cb cb;
    void *arg;
    held_t *head;
    uint32_t closing; /* timers of answered ones not closed yet */
    bool freeing;     /* tn_hold_free ran: freed with the last close */
};

int tn_hold_new(tn_meta_t *meta, tn_broker_t *b, tn_hold_cb cb, void *arg, tn_hold_t **out)
{
    tn_hold_t *h = tn_calloc(1, sizeof(*h));
    if (h == NULL)
        return UV_ENOMEM;
    h->meta = meta;
    h->b = b;
    h->cb = cb;
    h->arg = arg;
    *out = h;
    return 0;
}

/* The replica's record of name (NUL-terminated), or NULL. */
static const tn_meta_topic_entry_t *record_of(const tn_hold_t *h, const char *name)
{
    return h->meta != NULL ? tn_meta_topic_find(tn_meta_state(h->meta), name) : NULL;
}

bool tn_hold_marked(const tn_hold_t *h, const char *topic, size_t len, int64_t *created_at_ms)
{
    if (h == NULL || len == 0 || len > TN_NAME_MAX)
        return false;
    char name[TN_NAME_MAX + 1];
    memcpy(name, topic, len);
    name[len] = '\0';
    const tn_meta_topic_entry_t *e = record_of(h, name);
    if (e == NULL || e->rec.creating == 0)
        return false;
    if (created_at_ms != NULL)
        *created_at_ms = e->rec.created_at_ms;
    return true;
}

static void on_closed(uv_handle_t *handle)
{
    held_t *x = handle->data;
    tn_hold_t *h = x->h;
    tn_free(x);
    if (--h->closing == 0 && h->freeing)
        tn_free(h);
}

/* Take x off the list, close its timer and tell the router status. */
static void end(held_t *x, int status)
{
    tn_hold_t *h = x->h;
    if (x->prev != NULL)
        x->prev->next = x->next;
    else
        h->head = x->next;
    if (x->next != NULL)
        x->next->prev = x->prev;
    h->closing++;
    uv_timer_stop(&x->timer);
    uv_close((uv_handle_t *)&x->timer, on_closed);
    h->cb(h->arg, x->p, x->topic, x->len, x->deliver_at_ms, status);
}

/* What a held publish waits for now: UV_EAGAIN (still marked within its
 * bound, or, for an NSQ door's publish, this engine still has the topic
 * made from the old record; or its partition still start_held within
 * its bound), else its end (hold.h step 2, 3 of either DESIGN). */
static int look(const held_t *x)
{
    bool late = tn_now_mono_ms() >= x->until_ms;
    if (x->h->b->closing)
        return TN_ECLOSED;
    if (x->placing) {
        /* Gone meanwhile: routed anew, as a publish to no such topic. */
        const tn_topic_t *t = tn_broker_topic_find(x->h->b, x->topic);
        if (t == NULL || !tn_hold_start_held(t, x->partition))
            return 0;
        return late ? TN_EPLACING : UV_EAGAIN;
    }
    const tn_meta_topic_entry_t *e = record_of(x->h, x->topic);
    bool same = e != NULL && e->rec.created_at_ms == x->created_at_ms;
    if (same && e->rec.creating != 0)
        return late ? TN_ECREATING : UV_EAGAIN;
    if (same)
        return 0; /* ready */
    if (e == NULL && !x->p->grow_here)
        return TN_ENOTFOUND;
    /* Gone (an NSQ publish records the topic anew) or made again (marked:
     * the router holds it again): never onto the engine's topic made from
     * the old record, which goes once the catalog follows the change;
     * nor while it is being deleted (its files on a worker: the engine
     * refuses a publish to it, UV_EBUSY). */
    const tn_topic_t *t = tn_broker_topic_find(x->h->b, x->topic);
    if (t != NULL && t->record_created_ms == x->created_at_ms &&
        (t->state == TN_OBJ_READY || t->state == TN_OBJ_DELETING))
        return late ? TN_ECREATING : UV_EAGAIN;
    return 0;
}

static void on_tick(uv_timer_t *timer)
{
    held_t *x = timer->data;
    int rc = look(x);
    if (rc != UV_EAGAIN)
        end(x, rc);
}

/* Put p on h's list (hold.h); placing: until partition is placed, else
 * until the record made at created_at_ms is no longer marked. */
static int hold(tn_hold_t *h, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms,
                int64_t created_at_ms, bool placing, uint32_t partition)
{
    if (len == 0 || len > TN_NAME_MAX)
        return UV_EINVAL;
    held_t *x = tn_calloc(1, sizeof(*x));
    if (x == NULL)
        return UV_ENOMEM;
    int rc = uv_timer_init(h->b->loop, &x->timer);
    if (rc != 0) {
        tn_free(x);
        return rc;
    }
    x->h = h;
    x->p = p;
    x->deliver_at_ms = deliver_at_ms;
    x->created_at_ms = created_at_ms;
    x->placing = placing;
    x->partition = partition;
    x->until_ms = tn_now_mono_ms() + TN_ROUTER_CREATE_HOLD_MS;
    x->len = len;
    memcpy(x->topic, topic, len);
    x->topic[len] = '\0';
    x->timer.data = x;
    x->next = h->head;
    if (h->head != NULL)
        h->head->prev = x;
    h->head = x;
    uv_timer_start(&x->timer, on_tick, TN_HOLD_POLL_MS, TN_HOLD_POLL_MS);
    return 0;
}

int tn_hold_publish(tn_hold_t *h, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms,
                    int64_t created_at_ms)
{
    return hold(h, topic, len, p, deliver_at_ms, created_at_ms, false, 0);
}

bool tn_hold_start_held(const tn_topic_t *t, uint32_t partition)
{
    return partition < t->nparts && t->parts[partition]->start_held;
}

int tn_hold_until_placed(tn_hold_t *h, const char *topic, size_t len, uint32_t partition,
                         tn_pub_t *p, int64_t deliver_at_ms)
{
    return hold(h, topic, len, p, deliver_at_ms, 0, true, partition);
}

void tn_hold_free(tn_hold_t *h)
{
    if (h == NULL)
        return;
    while (h->head != NULL)
        end(h->head, TN_ECLOSED);
    h->freeing = true;
    if (h->closing == 0)
        tn_free(h);
}
