/* The record codec. See record.h for the layout. */
#include "core/platform.h"

#include "storage/record.h"

#include "core/crc32c.h"
#include "core/err.h"

#include <string.h>

static uint32_t record_crc(const unsigned char *hdr, const void *key, uint32_t key_len,
                           const void *body, uint32_t body_len)
{
    uint32_t crc = tn_crc32c(0, hdr + 8, TN_REC_HDR - 8);
    if (key_len > 0)
        crc = tn_crc32c(crc, key, key_len);
    if (body_len > 0)
        crc = tn_crc32c(crc, body, body_len);
    return crc;
}

void tn_rec_encode(unsigned char *out, const tn_rec_hdr_t *h, const void *key, const void *body)
{
    tn_put_u32(out, TN_REC_MAGIC);
    tn_put_u64(out + 8, h->offset);
    tn_put_u64(out + 16, (uint64_t)h->publish_ns);
    tn_put_u64(out + 24, (uint64_t)h->deliver_at_ms);
    tn_put_u32(out + 32, h->body_len);
    tn_put_u32(out + 36, h->sync_mark);
    tn_put_u16(out + 40, h->key_len);
    tn_put_u16(out + 42, h->flags);
    tn_put_u32(out + 4, record_crc(out, key, h->key_len, body, h->body_len));
}

int tn_rec_decode_hdr(const unsigned char *buf, size_t len, tn_rec_hdr_t *h)
{
    if (len < TN_REC_HDR)
        return TN_ESHORT;
    if (tn_get_u32(buf) != TN_REC_MAGIC)
        return TN_ECORRUPT;
    h->offset = tn_get_u64(buf + 8);
    h->publish_ns = (int64_t)tn_get_u64(buf + 16);
    h->deliver_at_ms = (int64_t)tn_get_u64(buf + 24);
    h->body_len = tn_get_u32(buf + 32);
    h->sync_mark = tn_get_u32(buf + 36);
    h->key_len = tn_get_u16(buf + 40);
    h->flags = tn_get_u16(buf + 42);
    if (h->body_len > TN_REC_MAX_BODY || (h->flags & ~TN_REC_F_KNOWN) != 0 || h->offset > INT64_MAX)
        return TN_ECORRUPT;
    return 0;
}

int tn_rec_decode(const unsigned char *buf, size_t len, tn_rec_t *rec)
{
    int rc = tn_rec_decode_hdr(buf, len, &rec->h);
    if (rc != 0)
        return rc;
    if (len < tn_rec_size(&rec->h))
        return TN_ESHORT;
    rec->key = (const char *)buf + TN_REC_HDR;
    rec->body = rec->key + rec->h.key_len;
    return tn_rec_verify(buf, rec->key, rec->body);
}

int tn_rec_verify(const unsigned char *hdr, const void *key, const void *body)
{
    uint32_t key_len = tn_get_u16(hdr + 40);
    uint32_t body_len = tn_get_u32(hdr + 32);
    if (record_crc(hdr, key, key_len, body, body_len) != tn_get_u32(hdr + 4))
        return TN_ECORRUPT;
    return 0;
}

void tn_ctrl_encode_epoch(unsigned char *out, uint32_t epoch)
{
    out[0] = TN_CTRL_EPOCH_START;
    tn_put_u32(out + 1, epoch);
}

void tn_ctrl_encode_producer(unsigned char *out, uint64_t node, uint64_t seq, uint32_t count)
{
    out[0] = TN_CTRL_PRODUCER;
    tn_put_u64(out + 1, node);
    tn_put_u64(out + 9, seq);
    tn_put_u32(out + 17, count);
}

int tn_ctrl_decode(const void *body, size_t len, tn_ctrl_t *out)
{
    const unsigned char *p = body;
    memset(out, 0, sizeof(*out));
    if (len < 1)
        return TN_ECORRUPT;
    out->kind = p[0];
    switch (out->kind) {
    case TN_CTRL_EPOCH_START:
        if (len < TN_CTRL_EPOCH_START_SIZE)
            return TN_ECORRUPT;
        out->epoch = tn_get_u32(p + 1);
        return 0;
    case TN_CTRL_PRODUCER:
        if (len < TN_CTRL_PRODUCER_SIZE)
            return TN_ECORRUPT;
        out->node = tn_get_u64(p + 1);
        out->seq = tn_get_u64(p + 9);
        out->count = tn_get_u32(p + 17);
        return 0;
    default:
        return 0; /* reserved: a reader skips it */
    }
}

int tn_rec_check_run(const void *bytes, size_t len, uint64_t first_offset, uint32_t *count)
{
    const unsigned char *b = bytes;
    size_t pos = 0;
    uint64_t next = first_offset;
    uint16_t last_flags = 0;
    uint32_t n = 0;
    while (pos < len) {
        tn_rec_t rec;
        if (tn_rec_decode(b + pos, len - pos, &rec) != 0)
            return TN_ECORRUPT; /* TN_ESHORT too: a record cut off */
        if (rec.h.offset != next || n == UINT32_MAX)
            return TN_ECORRUPT;
        next++;
        n++;
        last_flags = rec.h.flags;
        pos += (size_t)tn_rec_size(&rec.h);
    }
    if (n == 0 || (last_flags & TN_REC_F_MORE) != 0)
        return TN_ECORRUPT;
    *count = n;
    return 0;
}

void tn_rec_set_sync_mark(unsigned char *rec, uint32_t sync_mark)
{
    /* The CRC patched for the four bytes, not computed again over the
     * record (a follower's copy has just been checked whole): a record
     * damaged since that check stays detectably damaged. */
    unsigned char mark[4];
    tn_put_u32(mark, sync_mark);
    uint32_t after = TN_REC_HDR - 40 + (uint32_t)tn_get_u16(rec + 40) + tn_get_u32(rec + 32);
    uint32_t crc = tn_crc32c_patch(tn_get_u32(rec + 4), rec + 36, mark, 4, after);
    memcpy(rec + 36, mark, 4);
    tn_put_u32(rec + 4, crc);
}
