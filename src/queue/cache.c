/* The tail cache: message bodies kept in memory so that delivering fresh
 * messages never reads the disk.
 *
 * Hot: each partition keeps its newest records in a ring indexed by
 * offset (appends arrive in offset order), so a lookup is one array access
 * and an append one store, without per-record allocation. The rings share
 * one byte budget (tail-cache-size); over it, entries are dropped oldest
 * first from the partition appended to least recently, so a topic nobody
 * publishes to any more gives its memory up to the busy ones, its ring
 * array too: the budget counts entries, so a ring that eviction leaves
 * at a quarter full or less is halved, and an empty one freed (else every
 * partition that was once busy would keep a ring sized for the whole
 * budget).
 *
 * Cold: records a lagging channel reads back from disk go into the
 * partition's map, on one broker-wide FIFO with a quarter of the budget. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/err.h"
#include "queue/internal.h"

#include <string.h>

#define RING_MIN 1024

static uint64_t entry_cost(const tn_centry_t *e)
{
    return sizeof(*e) + 16 + (e->body != NULL ? e->body->len : 0) +
           (e->key != NULL ? e->key->len : 0);
}

/* --- hot ring ----------------------------------------------------------------- */

/* The hot list is ordered by last append, most recent first. */
static void hot_link(tn_broker_t *b, tn_part_t *p)
{
    p->hot_prev = NULL;
    p->hot_next = b->hot;
    if (b->hot != NULL)
        b->hot->hot_prev = p;
    else
        b->hot_tail = p;
    b->hot = p;
}

static void hot_unlink(tn_broker_t *b, tn_part_t *p)
{
    if (p->hot_prev != NULL)
        p->hot_prev->hot_next = p->hot_next;
    else if (b->hot == p)
        b->hot = p->hot_next;
    if (p->hot_next != NULL)
        p->hot_next->hot_prev = p->hot_prev;
    else if (b->hot_tail == p)
        b->hot_tail = p->hot_prev;
    p->hot_prev = p->hot_next = NULL;
}

static void ring_pop(tn_broker_t *b, tn_part_t *p)
{
    tn_centry_t *e = &p->ring[p->ring_lo & (p->ring_cap - 1)];
    uint64_t cost = entry_cost(e);
    p->ring_bytes -= cost;
    b->hot_bytes -= cost;
    if (e->body != NULL)
        tn_msg_unref(e->body);
    if (e->key != NULL)
        tn_msg_unref(e->key);
    e->body = NULL;
    e->key = NULL;
    p->ring_lo++;
    if (p->ring_lo == p->ring_hi)
        hot_unlink(b, p);
}

static void ring_clear(tn_broker_t *b, tn_part_t *p)
{
    while (p->ring_lo < p->ring_hi)
        ring_pop(b, p);
}

/* Give back most of a ring that eviction has emptied (see above). Moves
 * the entries: no pointer into a ring outlives an append. */
static void ring_shrink(tn_part_t *p)
{
    uint64_t n = p->ring_hi - p->ring_lo;
    if (n == 0) {
        tn_free(p->ring);
        p->ring = NULL;
        p->ring_cap = 0;
        return;
    }
    if (p->ring_cap <= RING_MIN || n > p->ring_cap / 4)
        return;
    uint32_t cap = p->ring_cap / 2;
    tn_centry_t *r = tn_calloc(cap, sizeof(*r));
    if (r == NULL)
        return; /* keeps the larger one */
    for (uint64_t off = p->ring_lo; off < p->ring_hi; off++)
        r[off & (cap - 1)] = p->ring[off & (p->ring_cap - 1)];
    tn_free(p->ring);
    p->ring = r;
    p->ring_cap = cap;
}

/* Drop entries until the rings fit the budget: from the partition
 * appended to least recently, oldest first; `keep` (the partition being
 * appended to) keeps at least its newest entry. */
static void ring_evict(tn_broker_t *b, tn_part_t *keep)
{
    while (b->hot_bytes > b->opts.cache_bytes) {
        tn_part_t *p = b->hot_tail;
        if (p == NULL)
            return;
        if (p == keep && p->ring_hi - p->ring_lo <= 1)
            return; /* the only entry left is the one just added */
        ring_pop(b, p);
        if (p != keep)
            ring_shrink(p);
    }
}

static int ring_grow(tn_part_t *p)
{
    uint32_t cap = p->ring_cap ? p->ring_cap * 2 : RING_MIN;
    tn_centry_t *r = tn_calloc(cap, sizeof(*r));
    if (r == NULL)
        return UV_ENOMEM;
    for (uint64_t off = p->ring_lo; off < p->ring_hi; off++)
        r[off & (cap - 1)] = p->ring[off & (p->ring_cap - 1)];
    tn_free(p->ring);
    p->ring = r;
    p->ring_cap = cap;
    return 0;
}

void tn__cache_append(tn_part_t *p, uint64_t offset, int64_t publish_ns, int64_t deliver_at_ms,
                      tn_msg_t *body, tn_msg_t *key)
{
    tn_broker_t *b = p->topic->broker;
    if (p->ring_lo == p->ring_hi || offset != p->ring_hi) {
        /* Empty, or not contiguous (after an advance past lost offsets):
         * start again at this offset. */
        ring_clear(b, p);
        p->ring_lo = p->ring_hi = offset;
    }
    if (p->ring_hi - p->ring_lo == p->ring_cap && ring_grow(p) != 0) {
        /* Out of memory: make room by dropping the oldest. */
        if (p->ring_cap == 0) {
            tn_msg_unref(body);
            if (key != NULL)
                tn_msg_unref(key);
            return;
        }
        ring_pop(b, p);
        if (p->ring_lo == p->ring_hi)
            p->ring_lo = p->ring_hi = offset;
    }
    /* Most recently appended to: the front of the hot list. */
    if (p->ring_lo != p->ring_hi)
        hot_unlink(b, p);
    hot_link(b, p);
    tn_centry_t *e = &p->ring[offset & (p->ring_cap - 1)];
    e->offset = offset;
    e->publish_ns = publish_ns;
    e->deliver_at_ms = deliver_at_ms;
    e->body = body;
    e->key = key;
    e->part = p;
    e->control = false;
    p->ring_hi = offset + 1;
    uint64_t cost = entry_cost(e);
    p->ring_bytes += cost;
    b->hot_bytes += cost;
    ring_evict(b, p);
}

/* --- cold map ----------------------------------------------------------------- */

static void cold_unlink(tn_broker_t *b, tn_centry_t *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        b->cache_head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        b->cache_tail = e->prev;
    b->cache_bytes -= entry_cost(e);
}

static void centry_unref(tn_centry_t *e)
{
    if (e->body != NULL)
        tn_msg_unref(e->body);
    if (e->key != NULL)
        tn_msg_unref(e->key);
}

static void cold_free(tn_broker_t *b, tn_centry_t *e)
{
    cold_unlink(b, e);
    tn_u64map_del(&e->part->cache, e->offset);
    centry_unref(e);
    tn_free(e);
}

tn_centry_t *tn__cache_get(tn_part_t *p, uint64_t offset)
{
    if (offset >= p->ring_lo && offset < p->ring_hi)
        return &p->ring[offset & (p->ring_cap - 1)];
    return tn_u64map_get(&p->cache, offset);
}

int tn__cache_put(tn_part_t *p, uint64_t offset, int64_t publish_ns, int64_t deliver_at_ms,
                  tn_msg_t *body, tn_msg_t *key, bool control)
{
    tn_broker_t *b = p->topic->broker;
    tn_centry_t *old = tn_u64map_get(&p->cache, offset);
    if (old != NULL)
        cold_free(b, old);
    tn_centry_t *e = tn_malloc(sizeof(*e));
    if (e == NULL) {
        if (body != NULL)
            tn_msg_unref(body);
        if (key != NULL)
            tn_msg_unref(key);
        return UV_ENOMEM;
    }
    e->offset = offset;
    e->publish_ns = publish_ns;
    e->deliver_at_ms = deliver_at_ms;
    e->body = body;
    e->key = key;
    e->part = p;
    e->control = control;
    if (tn_u64map_put(&p->cache, offset, e) != 0) {
        centry_unref(e);
        tn_free(e);
        return UV_ENOMEM;
    }
    e->next = NULL;
    e->prev = b->cache_tail;
    if (b->cache_tail != NULL)
        b->cache_tail->next = e;
    else
        b->cache_head = e;
    b->cache_tail = e;
    b->cache_bytes += entry_cost(e);
    /* Oldest first, but never the entry just added. */
    uint64_t budget = b->opts.cache_bytes / 4;
    while (b->cache_bytes > budget && b->cache_head != e)
        cold_free(b, b->cache_head);
    return 0;
}

void tn__cache_drop_part(tn_part_t *p)
{
    tn_broker_t *b = p->topic->broker;
    ring_clear(b, p);
    hot_unlink(b, p);
    tn_free(p->ring);
    p->ring = NULL;
    p->ring_cap = 0;
    size_t pos = 0;
    uint64_t key;
    void *val;
    while (tn_u64map_next(&p->cache, &pos, &key, &val)) {
        tn_centry_t *e = val;
        cold_unlink(b, e);
        centry_unref(e);
        tn_free(e);
    }
    tn_u64map_fini(&p->cache);
    tn_u64map_init(&p->cache);
}
