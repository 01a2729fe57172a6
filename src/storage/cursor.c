/* Channel cursors: applying WAL records, and the checkpoint codec. */
#include "core/platform.h"

#include "storage/cursor.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"

#include <string.h>

#define REQ_ENTRY 20

void tn_cursor_init(tn_cursor_t *c, uint64_t frontier)
{
    memset(c, 0, sizeof(*c));
    c->frontier = frontier;
}

void tn_cursor_fini(tn_cursor_t *c)
{
    tn_free(c->settled);
    tn_free(c->requeued);
    memset(c, 0, sizeof(*c));
}

int tn_cursor_copy(tn_cursor_t *dst, const tn_cursor_t *src)
{
    *dst = *src;
    dst->settled = NULL;
    dst->requeued = NULL;
    dst->settled_cap = src->nsettled;
    dst->requeued_cap = src->nrequeued;
    if (src->nsettled > 0) {
        dst->settled = tn_malloc(src->nsettled * sizeof(uint64_t));
        if (dst->settled == NULL)
            goto nomem;
        memcpy(dst->settled, src->settled, src->nsettled * sizeof(uint64_t));
    }
    if (src->nrequeued > 0) {
        dst->requeued = tn_malloc(src->nrequeued * sizeof(tn_requeue_t));
        if (dst->requeued == NULL)
            goto nomem;
        memcpy(dst->requeued, src->requeued, src->nrequeued * sizeof(tn_requeue_t));
    }
    return 0;
nomem:
    tn_cursor_fini(dst);
    return UV_ENOMEM;
}

/* Index of the first settled entry >= offset. */
static uint32_t settled_lower(const tn_cursor_t *c, uint64_t offset)
{
    uint32_t lo = 0, hi = c->nsettled;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->settled[mid] < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint32_t requeued_lower(const tn_cursor_t *c, uint64_t offset)
{
    uint32_t lo = 0, hi = c->nrequeued;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->requeued[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool tn_cursor_is_settled(const tn_cursor_t *c, uint64_t offset)
{
    if (offset < c->frontier)
        return true;
    uint32_t i = settled_lower(c, offset);
    return i < c->nsettled && c->settled[i] == offset;
}

const tn_requeue_t *tn_cursor_requeued(const tn_cursor_t *c, uint64_t offset)
{
    uint32_t i = requeued_lower(c, offset);
    return i < c->nrequeued && c->requeued[i].offset == offset ? &c->requeued[i] : NULL;
}

static void drop_requeued(tn_cursor_t *c, uint64_t offset)
{
    uint32_t i = requeued_lower(c, offset);
    if (i < c->nrequeued && c->requeued[i].offset == offset) {
        memmove(&c->requeued[i], &c->requeued[i + 1],
                (c->nrequeued - i - 1) * sizeof(*c->requeued));
        c->nrequeued--;
    }
}

/* Drop everything below the frontier from both sets. */
static void trim_below_frontier(tn_cursor_t *c)
{
    uint32_t k = settled_lower(c, c->frontier);
    if (k > 0) {
        memmove(c->settled, c->settled + k, (c->nsettled - k) * sizeof(*c->settled));
        c->nsettled -= k;
    }
    k = requeued_lower(c, c->frontier);
    if (k > 0) {
        memmove(c->requeued, c->requeued + k, (c->nrequeued - k) * sizeof(*c->requeued));
        c->nrequeued -= k;
    }
}

/* Settle offset; count: a message finished (FIN), not a control record
 * skipped (SKIP). */
static int fin(tn_cursor_t *c, uint64_t offset, bool count)
{
    if (tn_cursor_is_settled(c, offset))
        return 0;
    drop_requeued(c, offset);
    if (count)
        c->finish_count++;
    if (offset == c->frontier) {
        c->frontier++;
        uint32_t k = 0;
        while (k < c->nsettled && c->settled[k] == c->frontier) {
            c->frontier++;
            k++;
        }
        if (k > 0) {
            memmove(c->settled, c->settled + k, (c->nsettled - k) * sizeof(*c->settled));
            c->nsettled -= k;
        }
        return 0;
    }
    if (c->nsettled == c->settled_cap) {
        uint32_t cap = c->settled_cap ? c->settled_cap * 2 : 16;
        uint64_t *p = tn_realloc(c->settled, cap * sizeof(*p));
        if (p == NULL) {
            if (count)
                c->finish_count--;
            return UV_ENOMEM;
        }
        c->settled = p;
        c->settled_cap = cap;
    }
    uint32_t i = settled_lower(c, offset);
    memmove(&c->settled[i + 1], &c->settled[i], (c->nsettled - i) * sizeof(*c->settled));
    c->settled[i] = offset;
    c->nsettled++;
    return 0;
}

static int req(tn_cursor_t *c, uint64_t offset, int64_t due_ms, uint32_t attempts)
{
    if (tn_cursor_is_settled(c, offset))
        return 0;
    uint32_t i = requeued_lower(c, offset);
    if (i < c->nrequeued && c->requeued[i].offset == offset) {
        /* The same record again, not another requeue (each delivery
         * raises attempts): a follower's channel log that the leader's
         * retry writes again (cluster/setrepl.c), a snapshot's state. */
        if (c->requeued[i].due_ms == due_ms && c->requeued[i].attempts == attempts)
            return 0;
        c->requeued[i].due_ms = due_ms;
        c->requeued[i].attempts = attempts;
        c->requeue_count++;
        return 0;
    }
    if (c->nrequeued == c->requeued_cap) {
        uint32_t cap = c->requeued_cap ? c->requeued_cap * 2 : 16;
        tn_requeue_t *p = tn_realloc(c->requeued, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        c->requeued = p;
        c->requeued_cap = cap;
    }
    memmove(&c->requeued[i + 1], &c->requeued[i], (c->nrequeued - i) * sizeof(*c->requeued));
    c->requeued[i] = (tn_requeue_t){offset, due_ms, attempts};
    c->nrequeued++;
    c->requeue_count++;
    return 0;
}

int tn_cursor_apply(tn_cursor_t *c, const tn_walrec_t *r)
{
    switch (r->op) {
    case TN_WAL_FIN:
        return fin(c, r->offset, true);
    case TN_WAL_SKIP:
        return fin(c, r->offset, false);
    case TN_WAL_REQ:
        return req(c, r->offset, r->due_ms, r->attempts);
    case TN_WAL_PAUSE:
        c->paused = r->value != 0;
        return 0;
    case TN_WAL_EMPTY:
        if (r->offset > c->frontier) {
            c->frontier = r->offset;
            trim_below_frontier(c);
            /* Settled entries at the new frontier let it advance further. */
            uint32_t k = 0;
            while (k < c->nsettled && c->settled[k] == c->frontier) {
                c->frontier++;
                k++;
            }
            if (k > 0) {
                memmove(c->settled, c->settled + k, (c->nsettled - k) * sizeof(*c->settled));
                c->nsettled -= k;
            }
        }
        return 0;
    case TN_WAL_TIMEOUTS:
        if (r->value > c->timeout_count)
            c->timeout_count = r->value;
        return 0;
    default:
        return UV_EINVAL;
    }
}

int tn_cursor_encode(const tn_cursor_t *c, tn_buf_t *out)
{
    size_t len = TN_CKPT_HDR + (size_t)c->nsettled * 8 + (size_t)c->nrequeued * REQ_ENTRY;
    int rc = tn_buf_reserve(out, len);
    if (rc != 0)
        return rc;
    unsigned char *p = (unsigned char *)out->base + out->len;
    memset(p, 0, TN_CKPT_HDR);
    tn_put_u32(p, TN_CKPT_MAGIC);
    tn_put_u32(p + 8, 1);
    tn_put_u32(p + 12, c->paused ? 1 : 0);
    tn_put_u64(p + 16, c->seq);
    tn_put_u64(p + 24, c->frontier);
    tn_put_u64(p + 32, c->finish_count);
    tn_put_u64(p + 40, c->requeue_count);
    tn_put_u64(p + 48, c->timeout_count);
    tn_put_u32(p + 56, c->nsettled);
    tn_put_u32(p + 60, c->nrequeued);
    unsigned char *q = p + TN_CKPT_HDR;
    for (uint32_t i = 0; i < c->nsettled; i++, q += 8)
        tn_put_u64(q, c->settled[i]);
    for (uint32_t i = 0; i < c->nrequeued; i++, q += REQ_ENTRY) {
        tn_put_u64(q, c->requeued[i].offset);
        tn_put_u64(q + 8, (uint64_t)c->requeued[i].due_ms);
        tn_put_u32(q + 16, c->requeued[i].attempts);
    }
    tn_put_u32(p + 4, tn_crc32c(0, p + 8, len - 8));
    out->len += len;
    return 0;
}

int tn_cursor_decode(const void *data, size_t len, tn_cursor_t *c)
{
    const unsigned char *p = data;
    tn_cursor_init(c, 0);
    if (len < TN_CKPT_HDR || tn_get_u32(p) != TN_CKPT_MAGIC || tn_get_u32(p + 8) != 1 ||
        (tn_get_u32(p + 12) & ~1u) != 0)
        return TN_ECORRUPT;
    uint32_t ns = tn_get_u32(p + 56), nr = tn_get_u32(p + 60);
    if ((uint64_t)ns * 8 + (uint64_t)nr * REQ_ENTRY != len - TN_CKPT_HDR)
        return TN_ECORRUPT;
    if (tn_crc32c(0, p + 8, len - 8) != tn_get_u32(p + 4))
        return TN_ECORRUPT;
    c->paused = tn_get_u32(p + 12) & 1;
    c->seq = tn_get_u64(p + 16);
    c->frontier = tn_get_u64(p + 24);
    c->finish_count = tn_get_u64(p + 32);
    c->requeue_count = tn_get_u64(p + 40);
    c->timeout_count = tn_get_u64(p + 48);
    if (ns > 0 && (c->settled = tn_malloc((size_t)ns * 8)) == NULL)
        goto nomem;
    if (nr > 0 && (c->requeued = tn_malloc((size_t)nr * sizeof(tn_requeue_t))) == NULL)
        goto nomem;
    c->settled_cap = ns;
    c->requeued_cap = nr;
    const unsigned char *q = p + TN_CKPT_HDR;
    for (uint32_t i = 0; i < ns; i++, q += 8) {
        uint64_t v = tn_get_u64(q);
        if (v <= c->frontier || (i > 0 && v <= c->settled[i - 1]))
            goto corrupt;
        c->settled[c->nsettled++] = v;
    }
    for (uint32_t i = 0; i < nr; i++, q += REQ_ENTRY) {
        tn_requeue_t e = {tn_get_u64(q), (int64_t)tn_get_u64(q + 8), tn_get_u32(q + 16)};
        if (e.offset < c->frontier || (i > 0 && e.offset <= c->requeued[i - 1].offset))
            goto corrupt;
        c->requeued[c->nrequeued++] = e;
    }
    return 0;
corrupt:
    tn_cursor_fini(c);
    return TN_ECORRUPT;
nomem:
    tn_cursor_fini(c);
    return UV_ENOMEM;
}
