/* Fuzz target: the epochs file decoder (src/storage/epochs.c), which reads
 * a file from disk at startup. Checks: a rejected input is TN_ECORRUPT or
 * TN_EFORMAT and leaves the history as it was; an accepted one satisfies
 * the history's invariants (strictly increasing epochs and starts) and
 * re-encodes to exactly its bytes (one encoding per history). An accepted
 * history then drives the two decision functions: a follower holding the
 * same history as its leader must truncate nowhere, in one round, for any
 * log end at or past the latest start, and every answer the leader gives
 * must name an epoch it has and an end inside its log. */
#include "core/platform.h"

#include "core/err.h"
#include "storage/epochs.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tn_epochs_t h;
    tn_epochs_init(&h);
    if (tn_epochs_assign(&h, 5, 5, NULL) != 0)
        abort();
    int rc = tn_epochs_decode(&h, data, size);
    if (rc != 0) {
        if ((rc != TN_ECORRUPT && rc != TN_EFORMAT && rc != UV_ENOMEM) || h.n != 1 ||
            h.entries[0].epoch != 5 || h.errmsg[0] == '\0')
            abort();
        tn_epochs_fini(&h);
        return 0;
    }
    for (uint32_t i = 1; i < h.n; i++)
        if (h.entries[i].epoch <= h.entries[i - 1].epoch ||
            h.entries[i].start <= h.entries[i - 1].start)
            abort();
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_epochs_encode(&h, &b) != 0 || tn_buf_size(&b) != size ||
        memcmp(tn_buf_data(&b), data, size) != 0)
        abort();
    tn_buf_fini(&b);

    if (h.n > 0) {
        uint64_t last = h.entries[h.n - 1].start;
        uint64_t log_end = last + (size & 0xff);
        if (log_end < last)
            log_end = last;
        uint32_t asked = tn_epochs_latest(&h);
        uint32_t le;
        uint64_t lend;
        tn_epochs_step_t s;
        if (tn_epochs_end_offset_for(&h, log_end, asked, &le, &lend) != 0 || le != asked ||
            lend != log_end)
            abort();
        if (tn_epochs_follower_step(&h, log_end, asked, le, lend, &s) != 0 ||
            s.action != TN_EPOCHS_TRUNCATE || s.offset != log_end)
            abort();
        /* Every epoch at or below the latest gets an answer from the history. */
        for (uint32_t i = 0; i < h.n && i < 64; i++) {
            uint32_t e = h.entries[i].epoch;
            if (tn_epochs_end_offset_for(&h, log_end, e, &le, &lend) != 0 || le != e ||
                lend < h.entries[i].start || lend > log_end)
                abort();
            if (e > 0 && (tn_epochs_end_offset_for(&h, log_end, e - 1, &le, &lend) != 0 ||
                          (i == 0 ? le != TN_EPOCHS_UNDEFINED : le != h.entries[i - 1].epoch)))
                abort();
        }
    }
    tn_epochs_fini(&h);
    return 0;
}
