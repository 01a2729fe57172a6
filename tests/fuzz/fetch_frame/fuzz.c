/* Fuzz target: FETCH requests and replies (cluster/fetch.h). The input,
 * read as a request's fields, decodes or is refused with TN_EPROTO; what
 * decodes yields exactly count partitions with non-empty topics, encodes
 * back to the same bytes, and passes the RPC server's shape check (which
 * refuses exactly what the decoder refuses): the checks in fetch_parts.h,
 * shared with flushed_frame. The same bytes as a reply body decode or are
 * refused; a decoded reply's partitions have known statuses, bounded
 * epochs inside the input, and encode back the same. */
#include "core/platform.h"

#include "cluster/fetch.h"
#include "cluster/wire.h"
#include "core/err.h"
#include "fetch_parts.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int next_part(void *r, tn_fetch_part_t *p)
{
    return tn_fetch_req_next(r, p);
}

static void check_request(const uint8_t *data, size_t size)
{
    tn_fetch_req_t r;
    int rc = tn_fetch_req_decode(data, size, &r);
    fuzz_check_shape(TN_OP_FETCH, data, size, rc);
    if (rc != 0)
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_fetch_req_put_head(&b, r.node, r.incarnation, r.wait_ms, r.max_bytes, r.count) != 0)
        abort();
    fuzz_parts_check_encode(&b, r.count, next_part, &r, data, size);
}

static void check_reply(const uint8_t *data, size_t size)
{
    tn_fetch_reply_t r;
    int rc = tn_fetch_reply_decode(data, size, &r);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc != 0)
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_fetch_reply_put_head(&b, r.count) != 0)
        abort();
    static tn_epoch_entry_t ep[TN_FETCH_MAX_EPOCHS];
    tn_fetch_rpart_t p;
    uint32_t n = 0;
    while (tn_fetch_reply_next(&r, &p) == 0) {
        n++;
        switch (p.status) {
        case TN_FETCH_RECORDS:
            if (p.nepochs > TN_FETCH_MAX_EPOCHS || (p.count == 0 && p.records_len != 0) ||
                p.epochs < data || p.epochs + (size_t)p.nepochs * 12 > data + size)
                abort();
            for (uint32_t i = 0; i < p.nepochs; i++)
                tn_fetch_rpart_epoch(&p, i, &ep[i]);
            if (tn_fetch_reply_put_records(&b, p.hw, p.from, p.count, ep, p.nepochs, p.records,
                                           p.records_len) != 0)
                abort();
            break;
        case TN_FETCH_DIVERGING:
            if (tn_fetch_reply_put_diverging(&b, p.hw, p.epoch, p.end_offset) != 0)
                abort();
            break;
        case TN_FETCH_OUT_OF_RANGE:
            if (tn_fetch_reply_put_out_of_range(&b, p.hw, p.end_offset) != 0)
                abort();
            break;
        case TN_FETCH_GAP:
            if (tn_fetch_reply_put_gap(&b, p.hw, p.end_offset) != 0)
                abort();
            break;
        default:
            if (p.status >= TN_FETCH__STATUS_COUNT ||
                tn_fetch_reply_put_status(&b, p.status, p.hw) != 0)
                abort();
            break;
        }
    }
    if (n != r.count || tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
        abort();
    tn_buf_fini(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    check_request(data, size);
    check_reply(data, size);
    return 0;
}
