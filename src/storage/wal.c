/* Channel WAL frames: codec and replay. See wal.h. */
#include "core/platform.h"

#include "storage/wal.h"

#include "core/crc32c.h"
#include "core/err.h"

#include <string.h>

static uint8_t payload_len(uint8_t op)
{
    switch (op) {
    case TN_WAL_FIN:
    case TN_WAL_SKIP:
    case TN_WAL_EMPTY:
    case TN_WAL_TIMEOUTS:
        return 8;
    case TN_WAL_REQ:
        return 20;
    case TN_WAL_PAUSE:
        return 1;
    default:
        return 0;
    }
}

size_t tn_wal_encode(unsigned char *out, const tn_walrec_t *r, uint64_t seq, uint32_t sync_mark)
{
    uint8_t len = payload_len(r->op);
    if (len == 0)
        return 0;
    unsigned char *p = out + TN_WAL_HDR;
    switch (r->op) {
    case TN_WAL_FIN:
    case TN_WAL_SKIP:
    case TN_WAL_EMPTY:
        tn_put_u64(p, r->offset);
        break;
    case TN_WAL_TIMEOUTS:
        tn_put_u64(p, r->value);
        break;
    case TN_WAL_REQ:
        tn_put_u64(p, r->offset);
        tn_put_u64(p + 8, (uint64_t)r->due_ms);
        tn_put_u32(p + 16, r->attempts);
        break;
    case TN_WAL_PAUSE:
        p[0] = r->value ? 1 : 0;
        break;
    }
    out[4] = r->op;
    out[5] = len;
    tn_put_u16(out + 6, TN_WAL_MAGIC);
    tn_put_u32(out + 8, sync_mark);
    tn_put_u64(out + 12, seq);
    tn_put_u32(out, tn_crc32c(0, out + 4, (size_t)TN_WAL_HDR - 4 + len));
    return (size_t)TN_WAL_HDR + len;
}

int tn_wal_decode(const unsigned char *buf, size_t len, tn_walrec_t *r, uint64_t *seq,
                  uint32_t *sync_mark, size_t *frame_len)
{
    if (len < TN_WAL_HDR)
        return TN_ESHORT;
    uint8_t op = buf[4], plen = buf[5];
    if (tn_get_u16(buf + 6) != TN_WAL_MAGIC || payload_len(op) == 0 || plen != payload_len(op))
        return TN_ECORRUPT;
    if (len < (size_t)TN_WAL_HDR + plen)
        return TN_ESHORT;
    if (tn_crc32c(0, buf + 4, (size_t)TN_WAL_HDR - 4 + plen) != tn_get_u32(buf))
        return TN_ECORRUPT;
    const unsigned char *p = buf + TN_WAL_HDR;
    memset(r, 0, sizeof(*r));
    r->op = op;
    switch (op) {
    case TN_WAL_FIN:
    case TN_WAL_SKIP:
    case TN_WAL_EMPTY:
        r->offset = tn_get_u64(p);
        break;
    case TN_WAL_TIMEOUTS:
        r->value = tn_get_u64(p);
        break;
    case TN_WAL_REQ:
        r->offset = tn_get_u64(p);
        r->due_ms = (int64_t)tn_get_u64(p + 8);
        r->attempts = tn_get_u32(p + 16);
        break;
    case TN_WAL_PAUSE:
        if (p[0] > 1)
            return TN_ECORRUPT;
        r->value = p[0];
        break;
    }
    *sync_mark = tn_get_u32(buf + 8);
    *seq = tn_get_u64(buf + 12);
    *frame_len = (size_t)TN_WAL_HDR + plen;
    return 0;
}

int tn_wal_replay(const unsigned char *buf, size_t len, tn_cursor_t *c, tn_wal_replay_t *out)
{
    memset(out, 0, sizeof(*out));
    size_t pos = 0;
    uint64_t prev_seq = 0;
    while (pos < len) {
        tn_walrec_t r;
        uint64_t seq;
        uint32_t mark;
        size_t flen;
        int rc = tn_wal_decode(buf + pos, len - pos, &r, &seq, &mark, &flen);
        if (rc != 0) {
            out->tail = rc;
            break;
        }
        if (out->frames > 0 && seq != prev_seq + 1)
            return TN_ECORRUPT;
        if (out->frames == 0 && seq > c->seq + 1)
            return TN_ECORRUPT; /* records between checkpoint and WAL are missing */
        if (seq > c->seq) {
            rc = tn_cursor_apply(c, &r);
            if (rc != 0)
                return rc;
            c->seq = seq;
            out->applied++;
        }
        prev_seq = seq;
        out->frames++;
        pos += flen;
    }
    out->valid_len = pos;
    if (out->tail != 0) {
        /* Look for a later valid frame proving the bad bytes were durable. */
        for (size_t p = pos + 1; p + TN_WAL_HDR <= len; p++) {
            if (tn_get_u16(buf + p + 6) != TN_WAL_MAGIC)
                continue;
            tn_walrec_t r;
            uint64_t seq;
            uint32_t mark;
            size_t flen;
            if (tn_wal_decode(buf + p, len - p, &r, &seq, &mark, &flen) == 0 && mark > pos) {
                out->durable_damage = true;
                break;
            }
        }
    }
    return 0;
}
