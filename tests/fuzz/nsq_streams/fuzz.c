/* Fuzz target: the Snappy-framed and deflate stream decoders over
 * arbitrary bytes. The first byte picks the decoder and the size of the
 * pieces the rest arrives in. Checks: output never grows more than the cap
 * (plus one Snappy chunk) per call, draining always finishes, and a Snappy
 * stream that decodes re-encodes to one that decodes to the same bytes. */
#include "core/platform.h"

#include "core/err.h"
#include "proto/nsq/compress.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool snappy = (data[0] & 1) != 0;
    size_t piece = 1 + (data[0] >> 1);
    const char *in = (const char *)data + 1;
    size_t len = size - 1;
    tn_buf_t out;
    tn_buf_init(&out);
    tn_snappy_dec_t sd;
    tn_inflate_t zd;
    tn_snappy_dec_init(&sd);
    if (tn_inflate_init(&zd) != 0)
        abort();
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += piece) {
        size_t n = TN_MIN(piece, len - off);
        bool more = false;
        const char *p = in + off;
        for (int round = 0; rc == 0; round++) {
            size_t before = out.len;
            rc = snappy ? tn_snappy_decode(&sd, p, n, &out, CAP, &more)
                        : tn_inflate_decode(&zd, p, n, &out, CAP, &more);
            if (out.len - before > CAP + (snappy ? TN_SNAPPY_MAX_CHUNK : 0))
                abort();
            if (!more)
                break;
            if (round > 100000)
                abort(); /* draining never ends */
            p = NULL;
            n = 0;
        }
    }
    if (rc == 0 && snappy && out.len > 0) {
        tn_snappy_enc_t e;
        tn_snappy_enc_init(&e);
        tn_buf_t enc, back;
        tn_buf_init(&enc);
        tn_buf_init(&back);
        tn_snappy_dec_t d2;
        tn_snappy_dec_init(&d2);
        bool more;
        if (tn_snappy_encode(&e, out.base, out.len, &enc) != 0 ||
            tn_snappy_decode(&d2, enc.base, enc.len, &back, SIZE_MAX, &more) != 0 ||
            back.len != out.len || memcmp(back.base, out.base, out.len) != 0)
            abort();
        tn_snappy_dec_fini(&d2);
        tn_buf_fini(&enc);
        tn_buf_fini(&back);
        tn_snappy_enc_fini(&e);
    }
    tn_snappy_dec_fini(&sd);
    tn_inflate_fini(&zd);
    tn_buf_fini(&out);
    return 0;
}
