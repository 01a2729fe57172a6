/* Fuzz target: HTTP/1.1 requests as a connection reads them: heads parsed
 * one after another, each followed by its body (Content-Length, or chunked
 * through the decoder), with query lookups on every target. Checks: spans
 * lie inside the input, a head never claims more than it was given, a
 * refusal carries a status and a text, and decoded bodies (chunked, gzip,
 * zstd) stay within their limit. */
#include "core/platform.h"

#include "core/err.h"
#include "proto/http/encoding.h"
#include "proto/http/parser.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(tn_iov_t v, const char *base, size_t len)
{
    if (v.len > 0 && (v.base < base || v.base + v.len > base + len))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        tn_http_req_t req;
        size_t used = 0;
        int rc = tn_http_parse_head(buf + off, size - off, 4096, &req, &used);
        if (rc == TN_ESHORT)
            return 0;
        if (rc != 0) {
            if (rc != TN_EPROTO || req.status < 400 || req.status > 599 || req.errmsg[0] == '\0')
                abort();
            return 0;
        }
        if (used == 0 || used > size - off)
            abort();
        inside(req.method, buf + off, used);
        inside(req.target, buf + off, used);
        for (uint32_t i = 0; i < req.nheaders; i++) {
            inside(req.headers[i].name, buf + off, used);
            inside(req.headers[i].value, buf + off, used);
        }
        char v[64];
        (void)tn_http_query(req.query, "topic", v, sizeof(v));
        off += used;
        if (req.chunked) {
            tn_http_chunked_t d;
            tn_http_chunked_init(&d);
            tn_buf_t out;
            tn_buf_init(&out);
            bool done = false;
            size_t c = 0;
            rc = tn_http_chunked_decode(&d, buf + off, size - off, &c, &out, 1024, &done);
            if (c > size - off || tn_buf_size(&out) > 1024)
                abort();
            tn_buf_fini(&out);
            if (rc != 0 || !done)
                return 0;
            off += c;
        } else if (req.content_length > 0) {
            if ((uint64_t)req.content_length > size - off)
                return 0;
            /* A coded body decodes within its cap, or is refused. */
            const tn_iov_t *enc = tn_http_header(&req, "content-encoding");
            if (enc != NULL) {
                tn_buf_t plain;
                tn_buf_init(&plain);
                int d = tn_http_decode_body(*enc, tn_iov(buf + off, (size_t)req.content_length),
                                            4096, &plain);
                if (tn_buf_size(&plain) > 4096 || (d != 0 && tn_buf_size(&plain) != 0))
                    abort();
                tn_buf_fini(&plain);
            }
            off += (size_t)req.content_length;
        }
    }
    return 0;
}
