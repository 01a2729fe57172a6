/* The byte writer and reader that the metastore's codecs (cmd.c, remote.c)
 * share. Both are sticky: the first error stays in rc, later calls do
 * nothing, and the caller checks rc once at the end. Integers are big-endian;
 * a string is a u16 length and its bytes, no NUL. */
#ifndef TN_META_CODEC_H
#define TN_META_CODEC_H

#include "core/platform.h"

#include "core/buf.h"
#include "core/err.h"

#include <string.h>

/* Appends to out (borrowed for the writer's life). */
typedef struct {
    tn_buf_t *out;
    int rc;
} tn__meta_wr_t;

static inline void tn__meta_w_bytes(tn__meta_wr_t *w, const void *p, size_t n)
{
    if (w->rc == 0 && n > 0)
        w->rc = tn_buf_append(w->out, p, n);
}

static inline void tn__meta_w_u8(tn__meta_wr_t *w, uint8_t v)
{
    tn__meta_w_bytes(w, &v, 1);
}

static inline void tn__meta_w_u16(tn__meta_wr_t *w, uint16_t v)
{
    unsigned char b[2];
    tn_put_u16(b, v);
    tn__meta_w_bytes(w, b, 2);
}

static inline void tn__meta_w_u32(tn__meta_wr_t *w, uint32_t v)
{
    unsigned char b[4];
    tn_put_u32(b, v);
    tn__meta_w_bytes(w, b, 4);
}

static inline void tn__meta_w_u64(tn__meta_wr_t *w, uint64_t v)
{
    unsigned char b[8];
    tn_put_u64(b, v);
    tn__meta_w_bytes(w, b, 8);
}

/* A string of at most max bytes (NULL writes as empty); longer is UV_EINVAL. */
static inline void tn__meta_w_str(tn__meta_wr_t *w, const char *s, size_t max)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n > max) {
        if (w->rc == 0)
            w->rc = UV_EINVAL;
        return;
    }
    tn__meta_w_u16(w, (uint16_t)n);
    tn__meta_w_bytes(w, s, n);
}

/* Reads from p (borrowed for the reader's life); running short is
 * TN_ECORRUPT. */
typedef struct {
    const unsigned char *p;
    size_t left;
    int rc;
} tn__meta_rd_t;

/* The next n bytes, or NULL once rc is set. */
static inline const unsigned char *tn__meta_r_take(tn__meta_rd_t *r, size_t n)
{
    if (r->rc != 0 || r->left < n) {
        if (r->rc == 0)
            r->rc = TN_ECORRUPT;
        return NULL;
    }
    const unsigned char *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline uint8_t tn__meta_r_u8(tn__meta_rd_t *r)
{
    const unsigned char *p = tn__meta_r_take(r, 1);
    return p != NULL ? p[0] : 0;
}

static inline uint16_t tn__meta_r_u16(tn__meta_rd_t *r)
{
    const unsigned char *p = tn__meta_r_take(r, 2);
    return p != NULL ? tn_get_u16(p) : 0;
}

static inline uint32_t tn__meta_r_u32(tn__meta_rd_t *r)
{
    const unsigned char *p = tn__meta_r_take(r, 4);
    return p != NULL ? tn_get_u32(p) : 0;
}

static inline uint64_t tn__meta_r_u64(tn__meta_rd_t *r)
{
    const unsigned char *p = tn__meta_r_take(r, 8);
    return p != NULL ? tn_get_u64(p) : 0;
}

/* A string of at most max bytes, without NUL, into out (max + 1 bytes);
 * out is "" on any error. */
static inline void tn__meta_r_str(tn__meta_rd_t *r, char *out, size_t max)
{
    out[0] = '\0';
    uint16_t n = tn__meta_r_u16(r);
    if (r->rc == 0 && n > max) {
        r->rc = TN_ECORRUPT;
        return;
    }
    const unsigned char *p = tn__meta_r_take(r, n);
    if (p == NULL)
        return;
    if (memchr(p, '\0', n) != NULL) {
        r->rc = TN_ECORRUPT;
        return;
    }
    memcpy(out, p, n);
    out[n] = '\0';
}

#endif
