/* The FETCH frame codec (fetch.h). Writers reserve what they append and
 * roll back on failure; readers are exact (nothing trails, every count
 * bounded) since a fetch arrives from the network. */
#include "core/platform.h"

#include "cluster/fetch.h"

#include "core/err.h"

#include <string.h>

#define NAME_MAX_LEN 255
#define EPOCH_LEN    12 /* u32 epoch, u64 start */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* --- request ----------------------------------------------------------------------- */

int tn_fetch_req_put_head(tn_buf_t *b, uint32_t node, uint64_t incarnation, uint32_t wait_ms,
                          uint32_t max_bytes, uint32_t count)
{
    if (count == 0 || count > TN_FETCH_MAX_PARTS)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 24);
    if (rc == 0 &&
        ((rc = tn_wire_put_u32(b, node)) != 0 || (rc = tn_wire_put_u64(b, incarnation)) != 0 ||
         (rc = tn_wire_put_u32(b, wait_ms)) != 0 || (rc = tn_wire_put_u32(b, max_bytes)) != 0 ||
         (rc = tn_wire_put_u32(b, count)) != 0))
        b->len = at;
    return rc;
}

int tn_fetch_req_put_part(tn_buf_t *b, const tn_fetch_part_t *p)
{
    size_t tlen = strlen(p->topic);
    if (tlen == 0 || tlen > NAME_MAX_LEN)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 4 + tlen + 36);
    if (rc == 0 && ((rc = tn_wire_put_bytes(b, p->topic, tlen)) != 0 ||
                    (rc = tn_wire_put_u32(b, p->partition)) != 0 ||
                    (rc = tn_wire_put_u32(b, p->leader_epoch)) != 0 ||
                    (rc = tn_wire_put_u64(b, p->fetch_offset)) != 0 ||
                    (rc = tn_wire_put_u32(b, p->last_fetched_epoch)) != 0 ||
                    (rc = tn_wire_put_u64(b, p->flushed_offset)) != 0 ||
                    (rc = tn_wire_put_u32(b, p->partition_epoch)) != 0))
        b->len = at;
    return rc;
}

static int get_part(tn_wire_in_t *in, tn_fetch_part_t *out)
{
    (void)tn_wire_get_str(in, NAME_MAX_LEN, out->topic);
    (void)tn_wire_get_u32(in, &out->partition);
    (void)tn_wire_get_u32(in, &out->leader_epoch);
    (void)tn_wire_get_u64(in, &out->fetch_offset);
    (void)tn_wire_get_u32(in, &out->last_fetched_epoch);
    (void)tn_wire_get_u64(in, &out->flushed_offset);
    (void)tn_wire_get_u32(in, &out->partition_epoch);
    if (in->err != 0 || out->topic[0] == '\0') {
        in->err = TN_EPROTO;
        return TN_EPROTO;
    }
    return 0;
}

/* The count partition tuples that follow a FETCH request's or a FLUSHED
 * report's own header (in is just past that header, which its op has
 * checked): checks every tuple and that nothing trails, leaving in at the
 * first tuple for parts_next. 0 or TN_EPROTO; *left is count on success. */
static int parts_check(const tn_wire_in_t *in, uint32_t count, uint32_t *left)
{
    tn_wire_in_t check = *in;
    tn_fetch_part_t part;
    for (uint32_t i = 0; i < count; i++)
        if (get_part(&check, &part) != 0)
            return TN_EPROTO;
    if (tn_wire_end(&check) != 0)
        return TN_EPROTO;
    *left = count;
    return 0;
}

static int parts_next(tn_wire_in_t *in, uint32_t *left, tn_fetch_part_t *out)
{
    if (*left == 0)
        return TN_ENOTFOUND;
    (*left)--;
    return get_part(in, out);
}

int tn_fetch_req_decode(const void *p, size_t len, tn_fetch_req_t *out)
{
    memset(out, 0, sizeof(*out));
    tn_wire_in_init(&out->in, p, len);
    (void)tn_wire_get_u32(&out->in, &out->node);
    (void)tn_wire_get_u64(&out->in, &out->incarnation);
    (void)tn_wire_get_u32(&out->in, &out->wait_ms);
    (void)tn_wire_get_u32(&out->in, &out->max_bytes);
    (void)tn_wire_get_u32(&out->in, &out->count);
    if (out->in.err != 0 || out->count == 0 || out->count > TN_FETCH_MAX_PARTS)
        return TN_EPROTO;
    return parts_check(&out->in, out->count, &out->left);
}

int tn_fetch_req_next(tn_fetch_req_t *r, tn_fetch_part_t *out)
{
    return parts_next(&r->in, &r->left, out);
}

/* --- flush report ------------------------------------------------------------------ */

int tn_flushed_req_put_head(tn_buf_t *b, uint32_t node, uint64_t incarnation, uint32_t count)
{
    if (count == 0 || count > TN_FETCH_MAX_PARTS)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 16);
    if (rc == 0 &&
        ((rc = tn_wire_put_u32(b, node)) != 0 || (rc = tn_wire_put_u64(b, incarnation)) != 0 ||
         (rc = tn_wire_put_u32(b, count)) != 0))
        b->len = at;
    return rc;
}

int tn_flushed_req_decode(const void *p, size_t len, tn_flushed_req_t *out)
{
    memset(out, 0, sizeof(*out));
    tn_wire_in_init(&out->in, p, len);
    (void)tn_wire_get_u32(&out->in, &out->node);
    (void)tn_wire_get_u64(&out->in, &out->incarnation);
    (void)tn_wire_get_u32(&out->in, &out->count);
    if (out->in.err != 0 || out->count == 0 || out->count > TN_FETCH_MAX_PARTS)
        return TN_EPROTO;
    return parts_check(&out->in, out->count, &out->left);
}

int tn_flushed_req_next(tn_flushed_req_t *r, tn_fetch_part_t *out)
{
    return parts_next(&r->in, &r->left, out);
}

/* --- reply ------------------------------------------------------------------------- */

int tn_fetch_reply_put_head(tn_buf_t *b, uint32_t count)
{
    if (count == 0 || count > TN_FETCH_MAX_PARTS)
        return UV_EINVAL;
    return tn_wire_put_u32(b, count);
}

int tn_fetch_reply_put_records(tn_buf_t *b, uint64_t hw, uint64_t from, uint32_t count,
                               const tn_epoch_entry_t *epochs, uint32_t nepochs,
                               const void *records, size_t len)
{
    if (nepochs > TN_FETCH_MAX_EPOCHS || len > UINT32_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 30 + (size_t)nepochs * EPOCH_LEN + len);
    if (rc == 0 &&
        ((rc = tn_wire_put_u16(b, TN_FETCH_RECORDS)) != 0 || (rc = tn_wire_put_u64(b, hw)) != 0 ||
         (rc = tn_wire_put_u64(b, from)) != 0 || (rc = tn_wire_put_u32(b, count)) != 0 ||
         (rc = tn_wire_put_u32(b, nepochs)) != 0))
        b->len = at;
    for (uint32_t i = 0; rc == 0 && i < nepochs; i++)
        if ((rc = tn_wire_put_u32(b, epochs[i].epoch)) != 0 ||
            (rc = tn_wire_put_u64(b, epochs[i].start)) != 0)
            b->len = at;
    if (rc == 0 && (rc = tn_wire_put_bytes(b, records, len)) != 0)
        b->len = at;
    return rc;
}

int tn_fetch_reply_put_diverging(tn_buf_t *b, uint64_t hw, uint32_t epoch, uint64_t end_offset)
{
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 22);
    if (rc == 0 &&
        ((rc = tn_wire_put_u16(b, TN_FETCH_DIVERGING)) != 0 || (rc = tn_wire_put_u64(b, hw)) != 0 ||
         (rc = tn_wire_put_u32(b, epoch)) != 0 || (rc = tn_wire_put_u64(b, end_offset)) != 0))
        b->len = at;
    return rc;
}

/* A status whose one more field is an offset (OUT_OF_RANGE, GAP). */
static int put_offset_status(tn_buf_t *b, uint16_t status, uint64_t hw, uint64_t offset)
{
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 18);
    if (rc == 0 && ((rc = tn_wire_put_u16(b, status)) != 0 || (rc = tn_wire_put_u64(b, hw)) != 0 ||
                    (rc = tn_wire_put_u64(b, offset)) != 0))
        b->len = at;
    return rc;
}

int tn_fetch_reply_put_out_of_range(tn_buf_t *b, uint64_t hw, uint64_t start)
{
    return put_offset_status(b, TN_FETCH_OUT_OF_RANGE, hw, start);
}

int tn_fetch_reply_put_gap(tn_buf_t *b, uint64_t hw, uint64_t end)
{
    return put_offset_status(b, TN_FETCH_GAP, hw, end);
}

int tn_fetch_reply_put_status(tn_buf_t *b, uint16_t status, uint64_t hw)
{
    if (status == TN_FETCH_RECORDS || status == TN_FETCH_DIVERGING ||
        status == TN_FETCH_OUT_OF_RANGE || status == TN_FETCH_GAP ||
        status >= TN_FETCH__STATUS_COUNT)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 10);
    if (rc == 0 && ((rc = tn_wire_put_u16(b, status)) != 0 || (rc = tn_wire_put_u64(b, hw)) != 0))
        b->len = at;
    return rc;
}

static int get_rpart(tn_wire_in_t *in, tn_fetch_rpart_t *out)
{
    memset(out, 0, sizeof(*out));
    (void)tn_wire_get_u16(in, &out->status);
    (void)tn_wire_get_u64(in, &out->hw);
    if (in->err != 0)
        return TN_EPROTO;
    switch (out->status) {
    case TN_FETCH_RECORDS: {
        (void)tn_wire_get_u64(in, &out->from);
        (void)tn_wire_get_u32(in, &out->count);
        (void)tn_wire_get_u32(in, &out->nepochs);
        if (in->err != 0 || out->nepochs > TN_FETCH_MAX_EPOCHS ||
            in->len - in->off < (size_t)out->nepochs * EPOCH_LEN) {
            in->err = TN_EPROTO;
            return TN_EPROTO;
        }
        out->epochs = in->p + in->off;
        in->off += (size_t)out->nepochs * EPOCH_LEN;
        if (tn_wire_get_bytes(in, TN_WIRE_MAX_PAYLOAD, &out->records, &out->records_len) != 0)
            return TN_EPROTO;
        if (out->count == 0 && out->records_len != 0) {
            in->err = TN_EPROTO;
            return TN_EPROTO;
        }
        return 0;
    }
    case TN_FETCH_DIVERGING:
        (void)tn_wire_get_u32(in, &out->epoch);
        (void)tn_wire_get_u64(in, &out->end_offset);
        return in->err != 0 ? TN_EPROTO : 0;
    case TN_FETCH_OUT_OF_RANGE:
    case TN_FETCH_GAP:
        (void)tn_wire_get_u64(in, &out->end_offset);
        return in->err != 0 ? TN_EPROTO : 0;
    case TN_FETCH_FENCED:
    case TN_FETCH_UNKNOWN_EPOCH:
    case TN_FETCH_NOT_LEADER:
    case TN_FETCH_ERROR:
        return 0;
    default:
        in->err = TN_EPROTO;
        return TN_EPROTO;
    }
}

int tn_fetch_reply_decode(const void *p, size_t len, tn_fetch_reply_t *out)
{
    memset(out, 0, sizeof(*out));
    tn_wire_in_init(&out->in, p, len);
    if (tn_wire_get_u32(&out->in, &out->count) != 0 || out->count == 0 ||
        out->count > TN_FETCH_MAX_PARTS)
        return TN_EPROTO;
    tn_wire_in_t check = out->in;
    tn_fetch_rpart_t part;
    for (uint32_t i = 0; i < out->count; i++)
        if (get_rpart(&check, &part) != 0)
            return TN_EPROTO;
    if (tn_wire_end(&check) != 0)
        return TN_EPROTO;
    out->left = out->count;
    return 0;
}

int tn_fetch_reply_next(tn_fetch_reply_t *r, tn_fetch_rpart_t *out)
{
    if (r->left == 0)
        return TN_ENOTFOUND;
    r->left--;
    return get_rpart(&r->in, out);
}

void tn_fetch_rpart_epoch(const tn_fetch_rpart_t *part, uint32_t i, tn_epoch_entry_t *out)
{
    const uint8_t *e = part->epochs + (size_t)i * EPOCH_LEN;
    out->epoch = be32(e);
    out->start = be64(e + 4);
}
