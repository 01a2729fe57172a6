/* NSQ's compressed streams: Snappy framing and raw deflate. See
 * compress.h. */
#include "core/platform.h"

#include "proto/nsq/compress.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"

#include <snappy-c.h>
#include <string.h>

/* --- Snappy framing ------------------------------------------------------ */

#define CHUNK_COMPRESSED   0x00
#define CHUNK_UNCOMPRESSED 0x01
#define CHUNK_PADDING      0xfe
#define CHUNK_STREAM_ID    0xff
static const char stream_id[] = "\xff\x06\x00\x00sNaPpY";
#define STREAM_ID_LEN 10

static uint32_t masked_crc(const char *data, size_t len)
{
    uint32_t c = tn_crc32c(0, data, len);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void tn_snappy_dec_init(tn_snappy_dec_t *d)
{
    memset(d, 0, sizeof(*d));
    tn_buf_init(&d->in);
}

void tn_snappy_dec_fini(tn_snappy_dec_t *d)
{
    tn_buf_fini(&d->in);
}

/* Decode one whole chunk (type, body). */
static int chunk(tn_snappy_dec_t *d, unsigned type, const char *body, size_t len, tn_buf_t *out)
{
    if (!d->header_seen && type != CHUNK_STREAM_ID)
        return TN_ECORRUPT;
    switch (type) {
    case CHUNK_STREAM_ID:
        if (len != 6 || memcmp(body, "sNaPpY", 6) != 0)
            return TN_ECORRUPT;
        d->header_seen = true;
        return 0;
    case CHUNK_COMPRESSED:
    case CHUNK_UNCOMPRESSED: {
        if (len < 4)
            return TN_ECORRUPT;
        uint32_t crc = tn_get_u32((const unsigned char *)body);
        const char *data = body + 4;
        size_t dlen = len - 4;
        size_t n = dlen;
        if (type == CHUNK_COMPRESSED &&
            (snappy_uncompressed_length(data, dlen, &n) != SNAPPY_OK || n > TN_SNAPPY_MAX_CHUNK))
            return TN_ECORRUPT;
        if (type == CHUNK_UNCOMPRESSED && n > TN_SNAPPY_MAX_CHUNK)
            return TN_ECORRUPT;
        if (n == 0) /* an empty chunk: only its CRC to check */
            return masked_crc("", 0) == crc ? 0 : TN_ECORRUPT;
        int rc = tn_buf_reserve(out, n);
        if (rc != 0)
            return rc;
        char *dst = out->base + out->len;
        if (type == CHUNK_COMPRESSED) {
            size_t got = n;
            if (snappy_uncompress(data, dlen, dst, &got) != SNAPPY_OK || got != n)
                return TN_ECORRUPT;
        } else if (n > 0) {
            memcpy(dst, data, n);
        }
        if (masked_crc(dst, n) != crc)
            return TN_ECORRUPT;
        out->len += n;
        return 0;
    }
    default:
        /* 0x02-0x7f are reserved and must not be skipped; 0x80-0xfe may. */
        return type < 0x80 ? TN_ECORRUPT : 0;
    }
}

int tn_snappy_decode(tn_snappy_dec_t *d, const char *data, size_t len, tn_buf_t *out,
                     size_t max_out, bool *more)
{
    *more = false;
    if (len > 0) {
        int rc = tn_buf_append(&d->in, data, len);
        if (rc != 0)
            return rc;
    }
    size_t start = out->len;
    while (tn_buf_size(&d->in) >= 4) {
        if (out->len - start >= max_out) {
            *more = true;
            break;
        }
        const unsigned char *p = (const unsigned char *)tn_buf_data(&d->in);
        size_t clen = (size_t)p[1] | (size_t)p[2] << 8 | (size_t)p[3] << 16;
        /* A compressed 64 KiB chunk never needs more than this. */
        if (clen > 4 + snappy_max_compressed_length(TN_SNAPPY_MAX_CHUNK))
            return TN_ECORRUPT;
        if (tn_buf_size(&d->in) < 4 + clen)
            break;
        int rc = chunk(d, p[0], (const char *)p + 4, clen, out);
        if (rc != 0)
            return rc;
        tn_buf_consume(&d->in, 4 + clen);
    }
    return 0;
}

void tn_snappy_enc_init(tn_snappy_enc_t *e)
{
    memset(e, 0, sizeof(*e));
    tn_buf_init(&e->scratch);
}

void tn_snappy_enc_fini(tn_snappy_enc_t *e)
{
    tn_buf_fini(&e->scratch);
}

int tn_snappy_encode(tn_snappy_enc_t *e, const char *data, size_t len, tn_buf_t *out)
{
    int rc;
    if (!e->header_sent) {
        if ((rc = tn_buf_append(out, stream_id, STREAM_ID_LEN)) != 0)
            return rc;
        e->header_sent = true;
    }
    size_t maxc = snappy_max_compressed_length(TN_SNAPPY_MAX_CHUNK);
    while (len > 0) {
        size_t n = TN_MIN(len, (size_t)TN_SNAPPY_MAX_CHUNK);
        if ((rc = tn_buf_reserve(out, 8 + TN_MAX(maxc, n))) != 0)
            return rc;
        unsigned char *hdr = (unsigned char *)out->base + out->len;
        char *body = out->base + out->len + 8;
        size_t clen = maxc;
        unsigned type = CHUNK_COMPRESSED;
        if (snappy_compress(data, n, body, &clen) != SNAPPY_OK || clen >= n) {
            type = CHUNK_UNCOMPRESSED; /* not worth it: send as is */
            memcpy(body, data, n);
            clen = n;
        }
        size_t chunk_len = 4 + clen;
        hdr[0] = (unsigned char)type;
        hdr[1] = (unsigned char)chunk_len;
        hdr[2] = (unsigned char)(chunk_len >> 8);
        hdr[3] = (unsigned char)(chunk_len >> 16);
        tn_put_u32(hdr + 4, masked_crc(data, n));
        out->len += 8 + clen;
        data += n;
        len -= n;
    }
    return 0;
}

/* --- deflate --------------------------------------------------------------- */

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return tn_calloc(items, size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    tn_free(p);
}

int tn_inflate_init(tn_inflate_t *d)
{
    memset(d, 0, sizeof(*d));
    tn_buf_init(&d->pending);
    d->z.zalloc = z_alloc;
    d->z.zfree = z_free;
    int rc = inflateInit2(&d->z, -15); /* raw deflate, as NSQ clients send */
    if (rc != Z_OK)
        return rc == Z_MEM_ERROR ? UV_ENOMEM : UV_EINVAL;
    d->ready = true;
    return 0;
}

void tn_inflate_fini(tn_inflate_t *d)
{
    if (d->ready)
        inflateEnd(&d->z);
    d->ready = false;
    tn_buf_fini(&d->pending);
}

int tn_inflate_decode(tn_inflate_t *d, const char *data, size_t len, tn_buf_t *out, size_t max_out,
                      bool *more)
{
    *more = false;
    int rc;
    if (len > 0 && (rc = tn_buf_append(&d->pending, data, len)) != 0)
        return rc;
    size_t produced = 0;
    for (;;) {
        size_t room = max_out - produced;
        if (room == 0) {
            *more = true;
            return 0;
        }
        size_t step = TN_MIN(room, (size_t)64 * 1024);
        if ((rc = tn_buf_reserve(out, step)) != 0)
            return rc;
        size_t in_len = tn_buf_size(&d->pending);
        d->z.next_in = (Bytef *)tn_buf_data(&d->pending);
        d->z.avail_in = (uInt)TN_MIN(in_len, (size_t)UINT32_MAX);
        d->z.next_out = (Bytef *)(out->base + out->len);
        d->z.avail_out = (uInt)step;
        int zr = inflate(&d->z, Z_SYNC_FLUSH);
        size_t used = in_len - d->z.avail_in;
        size_t made = step - d->z.avail_out;
        tn_buf_consume(&d->pending, used);
        out->len += made;
        produced += made;
        if (zr == Z_MEM_ERROR)
            return UV_ENOMEM;
        if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_END)
            return TN_ECORRUPT; /* NSQ streams never end */
        if (made < step && tn_buf_size(&d->pending) == 0)
            return 0; /* all input consumed and all output flushed */
        if (made == 0 && used == 0)
            return 0; /* Z_BUF_ERROR: needs more input */
    }
}

int tn_deflate_init(tn_deflate_t *e, int level)
{
    memset(e, 0, sizeof(*e));
    if (level < 1 || level > 9)
        return UV_EINVAL;
    e->z.zalloc = z_alloc;
    e->z.zfree = z_free;
    int rc = deflateInit2(&e->z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
    if (rc != Z_OK)
        return rc == Z_MEM_ERROR ? UV_ENOMEM : UV_EINVAL;
    e->ready = true;
    return 0;
}

void tn_deflate_fini(tn_deflate_t *e)
{
    if (e->ready)
        deflateEnd(&e->z);
    e->ready = false;
}

int tn_deflate_encode(tn_deflate_t *e, const char *data, size_t len, tn_buf_t *out)
{
    e->z.next_in = (Bytef *)data;
    e->z.avail_in = (uInt)len;
    for (;;) {
        size_t step = deflateBound(&e->z, (uLong)e->z.avail_in) + 64;
        int rc = tn_buf_reserve(out, step);
        if (rc != 0)
            return rc;
        e->z.next_out = (Bytef *)(out->base + out->len);
        e->z.avail_out = (uInt)step;
        int zr = deflate(&e->z, Z_SYNC_FLUSH);
        out->len += step - e->z.avail_out;
        if (zr == Z_MEM_ERROR)
            return UV_ENOMEM;
        if (zr != Z_OK && zr != Z_BUF_ERROR)
            return UV_EINVAL;
        if (e->z.avail_in == 0 && e->z.avail_out > 0)
            return 0;
    }
}
