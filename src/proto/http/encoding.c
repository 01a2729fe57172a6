/* Request body content codings. See encoding.h. */
#include "core/platform.h"

#include "proto/http/encoding.h"

#include "core/err.h"

#include <string.h>
#include <strings.h>
#include <zlib.h>
#include <zstd.h>

#define OUT_STEP (64 * 1024)

static bool coding_is(tn_iov_t v, const char *s)
{
    size_t n = strlen(s);
    return v.len == n && strncasecmp(v.base, s, n) == 0;
}

/* Make room for one more step of output, within the cap. */
static int room(tn_buf_t *out, size_t start, uint64_t max_out, size_t *avail)
{
    size_t used = out->len - start;
    if (used >= max_out)
        return TN_ETOOBIG;
    size_t step = (size_t)TN_MIN((uint64_t)OUT_STEP, max_out - used + 1);
    int rc = tn_buf_reserve(out, step);
    if (rc != 0)
        return rc;
    *avail = step;
    return 0;
}

static int gunzip(tn_iov_t in, uint64_t max_out, tn_buf_t *out)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) /* gzip wrapper only */
        return UV_ENOMEM;
    size_t start = out->len;
    z.next_in = (Bytef *)in.base;
    z.avail_in = (uInt)in.len;
    int rc = 0;
    for (;;) {
        size_t avail;
        rc = room(out, start, max_out, &avail);
        if (rc != 0)
            break;
        z.next_out = (Bytef *)(out->base + out->len);
        z.avail_out = (uInt)avail;
        int zr = inflate(&z, Z_NO_FLUSH);
        out->len += avail - z.avail_out;
        if (out->len - start > max_out) {
            rc = TN_ETOOBIG;
            break;
        }
        if (zr == Z_STREAM_END) {
            /* Concatenated members are allowed; anything else after is not. */
            if (z.avail_in == 0)
                break;
            if (inflateReset(&z) != Z_OK) {
                rc = TN_ECORRUPT;
                break;
            }
            continue;
        }
        if (zr == Z_OK)
            continue;
        if (zr == Z_BUF_ERROR && z.avail_in == 0) {
            rc = TN_ECORRUPT; /* truncated */
            break;
        }
        rc = zr == Z_MEM_ERROR ? UV_ENOMEM : TN_ECORRUPT;
        break;
    }
    inflateEnd(&z);
    if (rc != 0)
        out->len = start;
    return rc;
}

static int unzstd(tn_iov_t in, uint64_t max_out, tn_buf_t *out)
{
    ZSTD_DStream *d = ZSTD_createDStream();
    if (d == NULL)
        return UV_ENOMEM;
    /* Refuse frames that need a window over 128 MiB of memory. */
    ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 27);
    size_t start = out->len;
    ZSTD_inBuffer ib = {in.base, in.len, 0};
    int rc = 0;
    size_t last = 1;
    while (ib.pos < ib.size || last != 0) {
        size_t avail;
        rc = room(out, start, max_out, &avail);
        if (rc != 0)
            break;
        ZSTD_outBuffer ob = {out->base + out->len, avail, 0};
        size_t before = ib.pos;
        last = ZSTD_decompressStream(d, &ob, &ib);
        if (ZSTD_isError(last)) {
            rc = TN_ECORRUPT;
            break;
        }
        out->len += ob.pos;
        if (out->len - start > max_out) {
            rc = TN_ETOOBIG;
            break;
        }
        if (ib.pos == ib.size && last != 0 && ob.pos == 0 && ib.pos == before) {
            rc = TN_ECORRUPT; /* truncated: input gone, frame not done */
            break;
        }
    }
    ZSTD_freeDStream(d);
    if (rc != 0)
        out->len = start;
    return rc;
}

int tn_http_decode_body(tn_iov_t coding, tn_iov_t in, uint64_t max_out, tn_buf_t *out)
{
    if (coding.len == 0 || coding_is(coding, "identity")) {
        if (in.len > max_out)
            return TN_ETOOBIG;
        return tn_buf_append(out, in.base, in.len);
    }
    if (coding_is(coding, "gzip") || coding_is(coding, "x-gzip"))
        return gunzip(in, max_out, out);
    if (coding_is(coding, "zstd"))
        return unzstd(in, max_out, out);
    return UV_ENOTSUP;
}
