/* Growable buffers and reference-counted messages. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/buf.h"

#include <string.h>
#include <uv.h>

void tn_buf_init(tn_buf_t *b)
{
    memset(b, 0, sizeof(*b));
}

void tn_buf_fini(tn_buf_t *b)
{
    tn_free(b->base);
    memset(b, 0, sizeof(*b));
}

int tn_buf_reserve(tn_buf_t *b, size_t extra)
{
    if (b->off > 0 && b->off == b->len) {
        b->off = b->len = 0;
    }
    /* Always leave base allocated, so base + len is valid arithmetic even
     * for a reservation of zero bytes. */
    if (b->cap - b->len >= extra && b->base != NULL)
        return 0;
    /* Reclaim consumed space before growing. */
    if (b->off > 0 && b->cap - (b->len - b->off) >= extra) {
        memmove(b->base, b->base + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        return 0;
    }
    size_t need = b->len + extra;
    if (need < extra)
        return UV_ENOMEM;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return UV_ENOMEM;
        cap *= 2;
    }
    char *p = tn_realloc(b->base, cap);
    if (p == NULL)
        return UV_ENOMEM;
    b->base = p;
    b->cap = cap;
    return 0;
}

int tn_buf_append(tn_buf_t *b, const void *data, size_t n)
{
    int rc = tn_buf_reserve(b, n);
    if (rc != 0)
        return rc;
    if (n > 0)
        memcpy(b->base + b->len, data, n);
    b->len += n;
    return 0;
}

void tn_buf_consume(tn_buf_t *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

void tn_buf_reset(tn_buf_t *b)
{
    b->off = b->len = 0;
}

tn_msg_t *tn_msg_new(const void *data, uint32_t len)
{
    tn_msg_t *m = tn_malloc(sizeof(*m) + len);
    if (m == NULL)
        return NULL;
    m->refs = 1;
    m->len = len;
    if (data != NULL && len > 0)
        memcpy(m->data, data, len);
    return m;
}

void tn_msg_unref(tn_msg_t *m)
{
    if (m != NULL && --m->refs == 0)
        tn_free(m);
}
