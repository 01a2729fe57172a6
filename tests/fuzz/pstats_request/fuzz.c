/* Fuzz target: PSTATS requests and replies, and PERRS replies (PERRS
 * requests are PSTATS'; cluster/wire.h). The input, read as a request's
 * fields, decodes or is refused with TN_EPROTO and a sentence; what
 * decodes has a topic and 1..TN_PSTATS_MAX indexes, encodes back to
 * exactly the input, and passes the RPC server's shape check behind
 * either opcode (which refuses exactly what the decoder refuses). The
 * same bytes as a reply body of each op (what a router takes from a peer)
 * are decoded against the indexes they name: what decodes has a known
 * status (PSTATS) or at most TN_WIRE_PERRS_MAX well-formed errors (PERRS)
 * per partition and encodes back the same, and against any other indexes
 * it is refused. */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const uint8_t *data, size_t size)
{
    tn_wire_pstats_t w;
    char err[256];
    err[0] = '\0';
    int rc = tn_wire_pstats_decode(data, size, &w, err, sizeof(err));
    fuzz_check_request(TN_OP_PSTATS, data, size, rc, err, sizeof(err));
    fuzz_check_shape(TN_OP_PERRS, data, size, rc);
    if (rc == 0) {
        if (w.count == 0 || w.count > TN_PSTATS_MAX || w.topic[0] == '\0')
            abort();
        uint32_t *parts = malloc((size_t)w.count * sizeof(*parts));
        if (parts == NULL)
            abort();
        for (uint32_t i = 0; i < w.count; i++)
            parts[i] = tn_wire_pstats_index(&w, i);
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_pstats_encode(&b, w.topic, parts, w.count) != 0 || tn_buf_size(&b) != size ||
            memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
        free(parts);
    }
}

/* The indexes a reply body names, read without judging it: count, then
 * each entry's index, skipping the numbers of a 200. false when the bytes
 * do not get that far. */
static bool reply_indexes(const uint8_t *data, size_t size, uint32_t **parts, uint32_t *n)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, data, size);
    if (tn_wire_get_u32(&in, n) != 0 || *n > TN_PSTATS_MAX || (size_t)*n * 6 > size)
        return false;
    *parts = malloc(((size_t)*n + 1) * sizeof(**parts));
    if (*parts == NULL)
        abort();
    for (uint32_t i = 0; i < *n; i++) {
        uint16_t status;
        if (tn_wire_get_u32(&in, &(*parts)[i]) != 0 || tn_wire_get_u16(&in, &status) != 0)
            break;
        if (status == 200) {
            uint8_t skip;
            for (int k = 0; k < 36; k++)
                (void)tn_wire_get_u8(&in, &skip);
        }
    }
    return in.err == 0;
}

static void check_reply(const uint8_t *data, size_t size)
{
    uint32_t *parts = NULL, n = 0;
    if (!reply_indexes(data, size, &parts, &n)) {
        free(parts);
        /* What the bytes cannot name cannot decode, whatever is asked. */
        static const uint32_t some[2] = {0, 1};
        tn_wire_pstat_t out[2];
        for (uint32_t k = 0; k <= 2; k++)
            if (tn_wire_pstats_reply_decode(data, size, some, k, out) == 0)
                abort();
        return;
    }
    tn_wire_pstat_t *out = malloc(((size_t)n + 1) * sizeof(*out));
    if (out == NULL)
        abort();
    int rc = tn_wire_pstats_reply_decode(data, size, parts, n, out);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc == 0) {
        for (uint32_t i = 0; i < n; i++) {
            uint16_t s = out[i].status;
            if (out[i].partition != parts[i] ||
                (s != 200 && s != 404 && s != 416 && s != 421 && s != 503))
                abort();
            if (s != 200 &&
                (out[i].segments != 0 || out[i].next_offset != 0 || out[i].oldest_offset != 0 ||
                 out[i].high_watermark != 0 || out[i].size_bytes != 0))
                abort(); /* no numbers without a 200 */
        }
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_pstats_reply_encode(&b, out, n) != 0 || tn_buf_size(&b) != size ||
            memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
        /* Asked for other indexes (or one fewer), the same bytes are refused. */
        if (n > 0) {
            parts[0] ^= 1u;
            if (tn_wire_pstats_reply_decode(data, size, parts, n, out) == 0)
                abort();
            parts[0] ^= 1u;
            if (tn_wire_pstats_reply_decode(data, size, parts, n - 1, out) == 0)
                abort();
        }
    }
    free(out);
    free(parts);
}

/* The indexes a PERRS reply body names, read without judging it: count,
 * then each entry's index, skipping its errors. false when the bytes do
 * not get that far. */
static bool perrs_indexes(const uint8_t *data, size_t size, uint32_t **parts, uint32_t *n)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, data, size);
    if (tn_wire_get_u32(&in, n) != 0 || *n > TN_PSTATS_MAX || (size_t)*n * 5 > size)
        return false;
    *parts = malloc(((size_t)*n + 1) * sizeof(**parts));
    if (*parts == NULL)
        abort();
    for (uint32_t i = 0; i < *n && in.err == 0; i++) {
        uint8_t k;
        if (tn_wire_get_u32(&in, &(*parts)[i]) != 0 || tn_wire_get_u8(&in, &k) != 0)
            break;
        for (uint8_t j = 0; j < k && in.err == 0; j++) {
            uint32_t node;
            const uint8_t *text;
            size_t len;
            (void)tn_wire_get_u32(&in, &node);
            (void)tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &text, &len);
        }
    }
    return in.err == 0;
}

static void check_perrs_reply(const uint8_t *data, size_t size)
{
    uint32_t *parts = NULL, n = 0;
    size_t total = 0;
    if (!perrs_indexes(data, size, &parts, &n)) {
        free(parts);
        static const uint32_t some[2] = {0, 1};
        uint8_t counts[2];
        for (uint32_t k = 0; k <= 2; k++)
            if (tn_wire_perrs_reply_decode(data, size, some, k, counts, NULL, &total) == 0)
                abort();
        return;
    }
    uint8_t *counts = malloc((size_t)n + 1);
    if (counts == NULL)
        abort();
    int rc = tn_wire_perrs_reply_decode(data, size, parts, n, counts, NULL, &total);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc == 0) {
        tn_wire_perr_t *errs = malloc((total + 1) * sizeof(*errs));
        size_t again = 0;
        if (errs == NULL ||
            tn_wire_perrs_reply_decode(data, size, parts, n, counts, errs, &again) != 0 ||
            again != total)
            abort();
        /* Every error is well formed, and the body encodes back exactly. */
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_perrs_reply_start(&b, n) != 0)
            abort();
        size_t at = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (counts[i] > TN_WIRE_PERRS_MAX || at + counts[i] > total)
                abort();
            for (uint8_t j = 0; j < counts[i]; j++) {
                const tn_wire_perr_t *e = &errs[at + j];
                size_t tl = strlen(e->text);
                if (e->node == 0 || tl == 0 || tl > TN_WIRE_REPLERR_MAX)
                    abort();
                for (size_t c = 0; c < tl; c++)
                    if (e->text[c] < 0x20 || e->text[c] > 0x7e)
                        abort();
            }
            if (tn_wire_perrs_reply_part(&b, parts[i], errs + at, counts[i]) != 0)
                abort();
            at += counts[i];
        }
        if (at != total || tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
        free(errs);
        /* Asked for other indexes (or one fewer), the same bytes are refused. */
        if (n > 0) {
            parts[0] ^= 1u;
            if (tn_wire_perrs_reply_decode(data, size, parts, n, counts, NULL, &total) == 0)
                abort();
            parts[0] ^= 1u;
            if (tn_wire_perrs_reply_decode(data, size, parts, n - 1, counts, NULL, &total) == 0)
                abort();
        }
    }
    free(counts);
    free(parts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 512 * 1024)
        return 0;
    check_request(data, size);
    check_reply(data, size);
    check_perrs_reply(data, size);
    return 0;
}
