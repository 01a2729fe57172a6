/* The three buffer types of tern, and no others:
 *
 * - tn_iov_t: a borrowed span (base, len). Same layout as uv_buf_t and
 *   struct iovec, so arrays of it pass to writev(2) and uv_write unchanged.
 * - tn_buf_t: a growable byte buffer with an explicit consume position, for
 *   parsing input and building output.
 * - tn_msg_t: a reference-counted message body that the tail cache, the
 *   in-flight table and pending socket writes share without copying.
 *
 * Thread safety: tn_buf_t and tn_msg_t belong to one thread at a time. A
 * tn_msg_t's count is not atomic: only its owning loop thread refs and
 * unrefs it; a storage thread may read its bytes while the loop holds a
 * reference for it (the append request says so). */
#ifndef TN_CORE_BUF_H
#define TN_CORE_BUF_H

#include "core/platform.h"

#include <sys/uio.h>

typedef struct {
    char *base;
    size_t len;
} tn_iov_t;

_Static_assert(sizeof(tn_iov_t) == sizeof(struct iovec), "tn_iov_t must match struct iovec");
_Static_assert(offsetof(tn_iov_t, len) == offsetof(struct iovec, iov_len),
               "tn_iov_t must match struct iovec");

static inline tn_iov_t tn_iov(const void *base, size_t len)
{
    tn_iov_t v = {(char *)base, len};
    return v;
}

typedef struct {
    char *base; /* owned; NULL until the first growth */
    size_t len; /* bytes written */
    size_t off; /* bytes consumed from the front */
    size_t cap; /* allocated bytes */
} tn_buf_t;

void tn_buf_init(tn_buf_t *b);
void tn_buf_fini(tn_buf_t *b);
/* Make room for `extra` more bytes past len (base is non-NULL afterwards,
 * even for extra 0). 0 or UV_ENOMEM. */
int tn_buf_reserve(tn_buf_t *b, size_t extra);
/* Append a copy of [data, data+n). 0 or UV_ENOMEM. */
int tn_buf_append(tn_buf_t *b, const void *data, size_t n);
/* Unconsumed bytes; NULL for a buffer that never grew (its size is 0:
 * NULL + 0 would be undefined). */
static inline char *tn_buf_data(const tn_buf_t *b)
{
    return b->base != NULL ? b->base + b->off : NULL;
}
static inline size_t tn_buf_size(const tn_buf_t *b)
{
    return b->len - b->off;
}
/* Append s (NUL-terminated) escaped for the inside of a JSON string. */
int tn_buf_json_escape(tn_buf_t *b, const char *s);
/* The same for len bytes that may hold NUL (as \u0000). */
int tn_buf_json_escape_n(tn_buf_t *b, const char *s, size_t len);
/* Whether len bytes are well-formed UTF-8 (no overlong forms, surrogates
 * or code points past U+10FFFF). */
bool tn_utf8_valid(const void *data, size_t len);
/* Strict standard base64 with padding (no whitespace, nothing after the
 * padding, len a multiple of 4 and not 0) into out[cap]. 0 with *outlen,
 * or UV_EINVAL (malformed, or out too small). */
int tn_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap, size_t *outlen);
/* Drop n bytes from the front (n <= size); compacts lazily. */
void tn_buf_consume(tn_buf_t *b, size_t n);
void tn_buf_reset(tn_buf_t *b);

typedef struct tn_msg_s tn_msg_t;
typedef struct tn_msg_block_s tn_msg_block_t;
struct tn_msg_s {
    uint32_t refs;
    uint32_t len;
    tn_msg_block_t *block; /* the allocation it shares, or NULL */
    char data[];
};

/* A message of len bytes with one reference, or NULL. Copies `data` when
 * it is not NULL. */
tn_msg_t *tn_msg_new(const void *data, uint32_t len);
static inline tn_msg_t *tn_msg_ref(tn_msg_t *m)
{
    m->refs++;
    return m;
}
void tn_msg_unref(tn_msg_t *m);

/* n messages in one allocation (a batch: MPUB), each with one reference,
 * copied from bodies[i]; the allocation goes when the last of them does.
 * Fills out[0..n). 0 or UV_ENOMEM. */
int tn_msg_new_batch(uint32_t n, const tn_iov_t *bodies, tn_msg_t **out);

#endif
