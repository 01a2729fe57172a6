/* Growable buffers and reference-counted messages. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/buf.h"

#include <stdio.h>
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
    m->block = NULL;
    if (data != NULL && len > 0)
        memcpy(m->data, data, len);
    return m;
}

struct tn_msg_block_s {
    uint32_t live; /* messages still referenced */
};

void tn_msg_unref(tn_msg_t *m)
{
    if (m == NULL || --m->refs > 0)
        return;
    if (m->block == NULL)
        tn_free(m);
    else if (--m->block->live == 0)
        tn_free(m->block);
}

int tn_msg_new_batch(uint32_t n, const tn_iov_t *bodies, tn_msg_t **out)
{
    /* Each message aligned for its header. */
    size_t align = _Alignof(tn_msg_t);
    size_t total = sizeof(tn_msg_block_t);
    total = (total + align - 1) & ~(align - 1);
    for (uint32_t i = 0; i < n; i++) {
        if (bodies[i].len > UINT32_MAX)
            return UV_EINVAL;
        total += (sizeof(tn_msg_t) + bodies[i].len + align - 1) & ~(align - 1);
    }
    char *mem = tn_malloc(total);
    if (mem == NULL)
        return UV_ENOMEM;
    tn_msg_block_t *b = (tn_msg_block_t *)(void *)mem;
    b->live = n;
    size_t pos = (sizeof(*b) + align - 1) & ~(align - 1);
    for (uint32_t i = 0; i < n; i++) {
        tn_msg_t *m = (tn_msg_t *)(void *)(mem + pos);
        m->refs = 1;
        m->len = (uint32_t)bodies[i].len;
        m->block = b;
        if (bodies[i].len > 0)
            memcpy(m->data, bodies[i].base, bodies[i].len);
        out[i] = m;
        pos += (sizeof(tn_msg_t) + bodies[i].len + align - 1) & ~(align - 1);
    }
    if (n == 0)
        tn_free(mem);
    return 0;
}

int tn_buf_json_escape(tn_buf_t *b, const char *s)
{
    return tn_buf_json_escape_n(b, s, strlen(s));
}

int tn_buf_json_escape_n(tn_buf_t *b, const char *s, size_t len)
{
    int rc = 0;
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < len && rc == 0; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch != '"' && ch != '\\' && ch >= 0x20) {
            run++;
            continue;
        }
        rc = tn_buf_append(b, s + i - run, run);
        run = 0;
        if (rc != 0)
            break;
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            rc = tn_buf_append(b, e, 2);
        } else {
            char e[8];
            snprintf(e, sizeof(e), "\\u%04x", ch);
            rc = tn_buf_append(b, e, 6);
        }
    }
    if (rc == 0 && run > 0)
        rc = tn_buf_append(b, s + len - run, run);
    return rc;
}

bool tn_utf8_valid(const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (len - i <= n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        /* Overlong forms, surrogates and code points past U+10FFFF. */
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int tn_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap, size_t *outlen)
{
    if (len == 0 || len % 4 != 0)
        return UV_EINVAL;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char ch = (unsigned char)in[i + (size_t)k];
            if (ch == '=' && i + 4 == len && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad > 0)
                return UV_EINVAL; /* data after padding */
            v[k] = b64_value(ch);
            if (v[k] < 0)
                return UV_EINVAL;
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
        size_t take = (size_t)(3 - pad);
        if (n + take > cap)
            return UV_EINVAL;
        memcpy(out + n, b, take);
        n += take;
    }
    *outlen = n;
    return 0;
}
