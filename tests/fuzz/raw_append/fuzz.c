/* Fuzz target: a follower's check of the records a leader sends
 * (tn_plog_append_raw decodes them from the network). Input: u64 first
 * offset, u32 sync mark (little-endian), then the record bytes. Whatever
 * the bytes: the check fails cleanly, or every record in the run decodes,
 * the run re-encoded with the follower's sync mark checks again with the
 * same count, and every control record's body decodes or fails cleanly. */
#include "core/platform.h"

#include "core/err.h"
#include "storage/record.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 12)
        return 0;
    uint64_t first = tn_get_u64(data);
    uint32_t mark = tn_get_u32(data + 8);
    const unsigned char *b = data + 12;
    size_t len = size - 12;
    uint32_t n;
    if (tn_rec_check_run(b, len, first, &n) != 0)
        return 0;
    if (n == 0 || len == 0)
        abort();
    unsigned char *copy = malloc(len);
    if (copy == NULL)
        return 0;
    memcpy(copy, b, len);
    size_t pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        tn_rec_t rec;
        if (tn_rec_decode(copy + pos, len - pos, &rec) != 0 || rec.h.offset != first + i)
            abort();
        if (rec.h.flags & TN_REC_F_CONTROL) {
            tn_ctrl_t c;
            int rc = tn_ctrl_decode(rec.body, rec.h.body_len, &c);
            if (rc != 0 && rc != TN_ECORRUPT)
                abort();
        }
        tn_rec_set_sync_mark(copy + pos, mark);
        pos += (size_t)tn_rec_size(&rec.h);
    }
    if (pos != len)
        abort();
    uint32_t n2;
    if (tn_rec_check_run(copy, len, first, &n2) != 0 || n2 != n)
        abort();
    tn_rec_hdr_t h;
    if (tn_rec_decode_hdr(copy, len, &h) != 0 || h.sync_mark != mark)
        abort();
    free(copy);
    return 0;
}
