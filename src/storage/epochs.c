/* The leader-epoch history of a partition replica, its file, and the two
 * divergence rules replication runs on it. See epochs.h for the DESIGN and
 * docs/storage-format.md for the bytes.
 *
 * The file (little-endian):
 *   u32 magic "TNE1", u32 version 1, u32 count N,
 *   N x (u32 epoch, u64 start offset),
 *   u32 CRC32C of every byte before it.
 * Its length is exactly 16 + 12 N. */
#include "core/platform.h"

#include "storage/epochs.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "storage/io.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define EPOCHS_MAGIC   0x31454E54u /* "TNE1" read as a little-endian u32 */
#define EPOCHS_VERSION 1u
#define EPOCHS_HDR     12u
#define EPOCHS_ENTRY   12u
#define EPOCHS_TRAILER 4u

void tn_epochs_init(tn_epochs_t *h)
{
    memset(h, 0, sizeof(*h));
}

void tn_epochs_fini(tn_epochs_t *h)
{
    tn_free(h->entries);
    h->entries = NULL;
    h->n = h->cap = 0;
}

uint32_t tn_epochs_latest(const tn_epochs_t *h)
{
    return h->n == 0 ? TN_EPOCHS_UNDEFINED : h->entries[h->n - 1].epoch;
}

static int reserve(tn_epochs_t *h, uint32_t want)
{
    if (want <= h->cap)
        return 0;
    uint32_t cap = h->cap ? h->cap : 8;
    while (cap < want)
        cap = cap > TN_EPOCHS_MAX / 2 ? TN_EPOCHS_MAX : cap * 2;
    tn_epoch_entry_t *p = tn_realloc(h->entries, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return UV_ENOMEM;
    h->entries = p;
    h->cap = cap;
    return 0;
}

int tn_epochs_assign(tn_epochs_t *h, uint32_t epoch, uint64_t start, bool *changed)
{
    if (changed != NULL)
        *changed = false;
    if (epoch == TN_EPOCHS_UNDEFINED) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "epoch %" PRIu32 " is reserved for \"undefined\"",
                  epoch);
        return TN_ERANGE;
    }
    if (h->n > 0) {
        tn_epoch_entry_t *last = &h->entries[h->n - 1];
        if (epoch < last->epoch) {
            tn_errbuf(h->errmsg, sizeof(h->errmsg),
                      "epoch %" PRIu32 " at offset %" PRIu64 " is below the latest epoch %" PRIu32
                      " (a stale leader)",
                      epoch, start, last->epoch);
            return TN_ERANGE;
        }
        if (start < last->start) {
            tn_errbuf(h->errmsg, sizeof(h->errmsg),
                      "epoch %" PRIu32 " at offset %" PRIu64
                      " starts below the latest epoch %" PRIu32 "'s start %" PRIu64,
                      epoch, start, last->epoch, last->start);
            return TN_ERANGE;
        }
        if (epoch == last->epoch)
            return 0; /* the epoch began earlier: nothing new */
        if (start == last->start) {
            last->epoch = epoch; /* the latest epoch wrote nothing (invariant 3) */
            if (changed != NULL)
                *changed = true;
            return 0;
        }
    }
    if (h->n == TN_EPOCHS_MAX) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "the history already holds %u epochs",
                  TN_EPOCHS_MAX);
        return TN_ETOOBIG;
    }
    int rc = reserve(h, h->n + 1);
    if (rc != 0) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "growing the history: %s", tn_strerror(rc));
        return rc;
    }
    h->entries[h->n].epoch = epoch;
    h->entries[h->n].start = start;
    h->n++;
    if (changed != NULL)
        *changed = true;
    return 0;
}

bool tn_epochs_truncate_from_end(tn_epochs_t *h, uint64_t offset)
{
    uint32_t n = h->n;
    while (n > 0 && h->entries[n - 1].start >= offset)
        n--;
    bool changed = n != h->n;
    h->n = n;
    return changed;
}

bool tn_epochs_truncate_from_start(tn_epochs_t *h, uint64_t offset)
{
    /* keep = the last entry starting at or below offset: it covers offset. */
    if (h->n == 0)
        return false;
    uint32_t keep = 0;
    while (keep + 1 < h->n && h->entries[keep + 1].start <= offset)
        keep++;
    if (keep == 0 && h->entries[0].start >= offset)
        return false; /* nothing starts below offset */
    memmove(h->entries, h->entries + keep, (size_t)(h->n - keep) * sizeof(*h->entries));
    h->n -= keep;
    h->entries[0].start = offset; /* it started at or below offset */
    return true;
}

/* The index of the last entry whose epoch is <= epoch, or -1. Binary
 * search: epochs strictly increase. */
static long floor_index(const tn_epochs_t *h, uint32_t epoch)
{
    long lo = 0, hi = (long)h->n - 1, found = -1;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        if (h->entries[mid].epoch <= epoch) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

int tn_epochs_end_offset_for(const tn_epochs_t *h, uint64_t log_end, uint32_t requested,
                             uint32_t *epoch_out, uint64_t *end_out)
{
    *epoch_out = TN_EPOCHS_UNDEFINED;
    *end_out = TN_EPOCHS_UNDEFINED_OFFSET;
    if (requested == TN_EPOCHS_UNDEFINED || h->n == 0)
        return 0;
    uint32_t latest = h->entries[h->n - 1].epoch;
    if (requested > latest)
        return TN_ERANGE;
    long i = floor_index(h, requested);
    if (i < 0)
        return 0; /* below the first entry: retention dropped it, or never had it */
    *epoch_out = h->entries[i].epoch;
    *end_out = (uint32_t)i + 1 < h->n ? h->entries[i + 1].start : log_end;
    return 0;
}

int tn_epochs_follower_step(const tn_epochs_t *h, uint64_t log_end, uint32_t asked,
                            uint32_t leader_epoch, uint64_t leader_end, tn_epochs_step_t *out)
{
    /* out is written only on success: a caller that missed an error must
     * not find "truncate to 0" in it. */
    tn_epochs_step_t step = {.action = TN_EPOCHS_RESET};
    if (leader_epoch != TN_EPOCHS_UNDEFINED && h->n > 0) {
        if (leader_end == TN_EPOCHS_UNDEFINED_OFFSET || leader_epoch > asked)
            return TN_EPROTO;
        if (asked > tn_epochs_latest(h))
            return TN_ERANGE; /* asked must be one of the follower's own epochs */
        uint32_t mine;
        uint64_t mine_end;
        int rc = tn_epochs_end_offset_for(h, log_end, leader_epoch, &mine, &mine_end);
        if (rc != 0)
            return rc;
        if (mine == leader_epoch) {
            step.action = TN_EPOCHS_TRUNCATE;
            step.offset = TN_MIN(leader_end, mine_end);
        } else if (mine != TN_EPOCHS_UNDEFINED) {
            step.action = TN_EPOCHS_ASK_AGAIN;
            step.epoch = mine;
        }
        /* else: every epoch we have is newer than the answer: RESET */
    }
    *out = step;
    return 0;
}

int tn_epochs_agree_end(const tn_epochs_t *leader, uint64_t leader_end, const tn_epochs_t *h,
                        uint64_t log_end, uint64_t *keep)
{
    uint32_t asked = tn_epochs_latest(h);
    /* Each round asks about a lower epoch of h (follower_step's
     * convergence), so h->n + 1 rounds end it. */
    for (uint32_t round = 0; round <= h->n; round++) {
        uint32_t le = TN_EPOCHS_UNDEFINED;
        uint64_t lend = TN_EPOCHS_UNDEFINED_OFFSET;
        int rc = 0;
        if (asked != TN_EPOCHS_UNDEFINED)
            rc = tn_epochs_end_offset_for(leader, leader_end, asked, &le, &lend);
        tn_epochs_step_t step;
        if (rc == 0)
            rc = tn_epochs_follower_step(h, log_end, asked, le, lend, &step);
        if (rc != 0)
            return rc;
        if (step.action == TN_EPOCHS_TRUNCATE) {
            *keep = TN_MIN(step.offset, log_end);
            return 0;
        }
        if (step.action == TN_EPOCHS_RESET) {
            *keep = 0;
            return 0;
        }
        asked = step.epoch;
    }
    return TN_EPROTO; /* not reached: follower_step converges */
}

int tn_epochs_encode(const tn_epochs_t *h, tn_buf_t *out)
{
    size_t len = EPOCHS_HDR + (size_t)h->n * EPOCHS_ENTRY + EPOCHS_TRAILER;
    int rc = tn_buf_reserve(out, len);
    if (rc != 0)
        return rc;
    unsigned char *base = (unsigned char *)out->base + out->len;
    unsigned char *p = base;
    tn_put_u32(p, EPOCHS_MAGIC);
    tn_put_u32(p + 4, EPOCHS_VERSION);
    tn_put_u32(p + 8, h->n);
    p += EPOCHS_HDR;
    for (uint32_t i = 0; i < h->n; i++, p += EPOCHS_ENTRY) {
        tn_put_u32(p, h->entries[i].epoch);
        tn_put_u64(p + 4, h->entries[i].start);
    }
    tn_put_u32(p, tn_crc32c(0, base, (size_t)(p - base)));
    out->len += len;
    return 0;
}

int tn_epochs_decode(tn_epochs_t *h, const void *data, size_t len)
{
    const unsigned char *p = data;
    if (len < EPOCHS_HDR + EPOCHS_TRAILER) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "%zu bytes, shorter than the %u byte minimum", len,
                  EPOCHS_HDR + EPOCHS_TRAILER);
        return TN_ECORRUPT;
    }
    if (tn_get_u32(p) != EPOCHS_MAGIC) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "bad magic 0x%08" PRIx32 " (want 0x%08x \"TNE1\")",
                  tn_get_u32(p), EPOCHS_MAGIC);
        return TN_ECORRUPT;
    }
    uint32_t stored = tn_get_u32(p + len - EPOCHS_TRAILER);
    uint32_t computed = tn_crc32c(0, p, len - EPOCHS_TRAILER);
    if (stored != computed) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg),
                  "CRC mismatch over %zu bytes (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")",
                  len, stored, computed);
        return TN_ECORRUPT;
    }
    uint32_t version = tn_get_u32(p + 4);
    if (version != EPOCHS_VERSION) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "format version %" PRIu32 " (this build reads %u)",
                  version, EPOCHS_VERSION);
        return TN_EFORMAT;
    }
    uint32_t n = tn_get_u32(p + 8);
    if (n > TN_EPOCHS_MAX || len != EPOCHS_HDR + (size_t)n * EPOCHS_ENTRY + EPOCHS_TRAILER) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg),
                  "%zu bytes do not hold the %" PRIu32 " entries the header counts", len, n);
        return TN_ECORRUPT;
    }
    const unsigned char *e = p + EPOCHS_HDR;
    for (uint32_t i = 0; i < n; i++, e += EPOCHS_ENTRY) {
        uint32_t epoch = tn_get_u32(e);
        uint64_t start = tn_get_u64(e + 4);
        if (epoch == TN_EPOCHS_UNDEFINED) {
            tn_errbuf(h->errmsg, sizeof(h->errmsg),
                      "entry %" PRIu32 " has the reserved epoch %" PRIu32, i, epoch);
            return TN_ECORRUPT;
        }
        if (i > 0 &&
            (epoch <= tn_get_u32(e - EPOCHS_ENTRY) || start <= tn_get_u64(e - EPOCHS_ENTRY + 4))) {
            snprintf(
                h->errmsg, sizeof(h->errmsg),
                "entry %" PRIu32 " (epoch %" PRIu32 " at %" PRIu64
                ") does not follow epoch %" PRIu32 " at %" PRIu64 " in strictly increasing order",
                i, epoch, start, tn_get_u32(e - EPOCHS_ENTRY), tn_get_u64(e - EPOCHS_ENTRY + 4));
            return TN_ECORRUPT;
        }
    }
    int rc = reserve(h, n);
    if (rc != 0) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "holding %" PRIu32 " entries: %s", n,
                  tn_strerror(rc));
        return rc;
    }
    e = p + EPOCHS_HDR;
    for (uint32_t i = 0; i < n; i++, e += EPOCHS_ENTRY) {
        h->entries[i].epoch = tn_get_u32(e);
        h->entries[i].start = tn_get_u64(e + 4);
    }
    h->n = n;
    return 0;
}

int tn_epochs_load(tn_epochs_t *h, const char *dir)
{
    char path[4096];
    int rc = tn_io_path(path, sizeof(path), "%s/%s", dir, TN_EPOCHS_FILE);
    if (rc != 0) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "epochs file in %s: path too long", dir);
        return rc;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    rc = tn_io_read_file(path, EPOCHS_HDR + (size_t)TN_EPOCHS_MAX * EPOCHS_ENTRY + EPOCHS_TRAILER,
                         &b);
    if (rc == UV_ENOENT) {
        tn_buf_fini(&b);
        h->n = 0;
        return 0;
    }
    if (rc == TN_ETOOBIG) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg),
                  "epochs file %s: larger than %u entries can be; damaged", path, TN_EPOCHS_MAX);
        rc = TN_ECORRUPT;
    } else if (rc != 0) {
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "reading epochs file %s: %s", path,
                  tn_strerror(rc));
    } else if ((rc = tn_epochs_decode(h, tn_buf_data(&b), tn_buf_size(&b))) != 0) {
        char why[sizeof(h->errmsg)];
        memcpy(why, h->errmsg, sizeof(why));
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "epochs file %s: %s", path, why);
    }
    tn_buf_fini(&b);
    return rc;
}

int tn_epochs_save(tn_epochs_t *h, const char *dir)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_epochs_encode(h, &b);
    if (rc == 0)
        rc = tn_io_write_file_atomic(dir, TN_EPOCHS_FILE, tn_buf_data(&b), tn_buf_size(&b));
    if (rc != 0)
        tn_errbuf(h->errmsg, sizeof(h->errmsg), "writing epochs file in %s: %s", dir,
                  tn_strerror(rc));
    tn_buf_fini(&b);
    return rc;
}
