/* Scrub: the scrubber's thread, the checks of one sealed segment (and of
 * the synced records of the active one), the token bucket, and the
 * loop-thread side (timer, waiters). See scrub.h.
 *
 * DESIGN: pinning without blocking.
 *   1. A run copies the names (topic, partition) of the open disk logs
 *      under the store's open_lock, then takes them one at a time.
 *   2. For a partition it copies the bases of its sealed segments under
 *      the log's lock; for each base it takes the lock again, finds the
 *      segment still there and takes a reference (tn_seg_ref), then lets
 *      go of every lock before reading. The reference keeps the file open
 *      when GC unlinks it meanwhile (segment.h), so the check reads what
 *      was sealed; a segment gone before its turn is skipped.
 *   3. The log itself is found again by name each time (it may have
 *      closed, or closed and reopened): a pointer kept across unlocked
 *      reads could dangle. Isolating it for a finding does the same and
 *      checks that the segment found is still one of its segments.
 * Lock order: the store's open_lock, then a log's lock, then the
 * scrubber's lock; the scrubber's lock is never held while taking the
 * others. */
#include "core/platform.h"

#include "storage/scrub.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "storage/io.h"
#include "storage/plog.h"
#include "storage/segment.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define READ_CHUNK (1024 * 1024) /* one read */

struct tn_scrub_s {
    uv_loop_t *loop;
    tn_store_t *store;
    tn_scrub_opts_t o;
    uv_thread_t thread;
    bool thread_started;

    uv_mutex_t lock;
    uv_cond_t cond;
    /* Guarded by lock. */
    bool stop;
    bool want;              /* a run asked for, not begun */
    bool want_background;   /* ... by the timer */
    uint64_t last_id;       /* the id given to the latest run asked for */
    tn_scrub_report_t cur;  /* the run going on (state RUNNING) */
    tn_scrub_report_t last; /* the last run that ended */
    tn_scrub_counters_t tot;

    /* Loop thread. */
    uv_async_t async;
    uv_timer_t timer;
    bool timer_on;
    int handles; /* open handles; freed when the last closes */
    tn_scrub_wait_t *waiters;
};

/* --- token bucket -------------------------------------------------------- */

void tn_scrub_bucket_init(tn_scrub_bucket_t *b, uint64_t rate, uint64_t burst, int64_t now_ns)
{
    b->rate = rate > 0 ? rate : 1;
    b->burst = burst;
    b->tokens = (double)burst;
    b->last_ns = now_ns;
}

int64_t tn_scrub_bucket_take(tn_scrub_bucket_t *b, uint64_t n, int64_t now_ns)
{
    if (now_ns > b->last_ns) {
        b->tokens += (double)(now_ns - b->last_ns) * (double)b->rate / 1e9;
        if (b->tokens > (double)b->burst)
            b->tokens = (double)b->burst;
        b->last_ns = now_ns;
    }
    b->tokens -= (double)n;
    if (b->tokens >= 0)
        return 0;
    double wait = -b->tokens * 1e9 / (double)b->rate;
    return (int64_t)wait + 1;
}

/* --- the run's context ----------------------------------------------------- */

typedef struct {
    char *topic;
    uint32_t partition;
} part_t;

typedef struct {
    tn_scrub_t *s;
    tn_scrub_bucket_t bucket;
    bool stopped;
    const char *topic;
    uint32_t partition;
    /* The read window of the segment being checked. */
    int fd;
    uint64_t wpos;
    tn_buf_t win;
} run_t;

static int64_t now_ns(tn_scrub_t *s)
{
    return s->o.clock != NULL ? s->o.clock(s->o.hook_arg) : tn_now_mono_ns();
}

/* Charge n bytes read to the rate limit and wait as long as it says;
 * false when the scrubber is stopping. */
static bool pace(run_t *r, uint64_t n)
{
    tn_scrub_t *s = r->s;
    int64_t wait = tn_scrub_bucket_take(&r->bucket, n, now_ns(s));
    uv_mutex_lock(&s->lock);
    s->cur.throttled_ns += wait;
    s->cur.bytes += n;
    s->tot.bytes += n;
    bool stop = s->stop;
    uv_mutex_unlock(&s->lock);
    if (stop || wait == 0)
        return !stop;
    if (s->o.sleep != NULL) {
        s->o.sleep(s->o.hook_arg, wait);
    } else {
        int64_t until = tn_now_mono_ns() + wait;
        uv_mutex_lock(&s->lock);
        for (int64_t left = wait; !s->stop && left > 0; left = until - tn_now_mono_ns())
            uv_cond_timedwait(&s->cond, &s->lock, (uint64_t)left);
        uv_mutex_unlock(&s->lock);
    }
    uv_mutex_lock(&s->lock);
    stop = s->stop;
    uv_mutex_unlock(&s->lock);
    return !stop;
}

/* The n bytes of the segment at pos, through the window (reading, paced,
 * when they are not in it). 0, TN_ESHORT (the file ends first),
 * TN_ECLOSED (stopping) or an I/O error. */
static int win_get(run_t *r, uint64_t pos, size_t n, uint64_t size, const unsigned char **out)
{
    if (pos >= r->wpos && pos + n <= r->wpos + r->win.len) {
        *out = (const unsigned char *)r->win.base + (pos - r->wpos);
        return 0;
    }
    if (pos + n > size)
        return TN_ESHORT;
    size_t want = TN_MAX(n, (size_t)READ_CHUNK);
    if (want > size - pos)
        want = (size_t)(size - pos);
    if (!pace(r, want)) {
        r->stopped = true;
        return TN_ECLOSED;
    }
    tn_buf_reset(&r->win);
    int rc = tn_buf_reserve(&r->win, want);
    if (rc != 0)
        return rc;
    size_t got;
    rc = tn_io_pread(r->fd, r->win.base, want, pos, &got);
    if (rc != 0)
        return rc;
    r->win.len = got;
    r->wpos = pos;
    if (got < n)
        return TN_ESHORT;
    *out = (const unsigned char *)r->win.base;
    return 0;
}

/* --- findings ------------------------------------------------------------ */

/* offset: the record the finding is about, or NO_OFFSET. */
#define NO_OFFSET UINT64_MAX
static void note_error(run_t *r, uint64_t base, const char *file, uint64_t pos, uint64_t offset,
                       bool isolated, const char *fmt, ...) TN_PRINTF(7, 8);
static void note_error(run_t *r, uint64_t base, const char *file, uint64_t pos, uint64_t offset,
                       bool isolated, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    TN_LOG(TN_LOG_ERROR, "scrub: partition %s/%" PRIu32 ": %s: %s at byte %" PRIu64 "%s", r->topic,
           r->partition, file, what, pos, isolated ? "; partition isolated" : "");
    tn_scrub_t *s = r->s;
    uv_mutex_lock(&s->lock);
    s->cur.errors_total++;
    s->tot.errors++;
    if (s->cur.nerrors < TN_SCRUB_MAX_ERRORS) {
        tn_scrub_error_t *e = &s->cur.errors[s->cur.nerrors++];
        memset(e, 0, sizeof(*e));
        snprintf(e->topic, sizeof(e->topic), "%s", r->topic);
        e->partition = r->partition;
        e->segment = base;
        snprintf(e->file, sizeof(e->file), "%s", file);
        e->pos = pos;
        e->offset = offset;
        e->isolated = isolated;
        snprintf(e->what, sizeof(e->what), "%s", what);
    }
    uv_mutex_unlock(&s->lock);
}

/* The open disk log of topic/partition (open_lock held), or NULL. */
static tn_plog_t *find_plog(tn_store_t *store, const char *topic, uint32_t partition)
{
    for (tn_plog_t *p = store->plogs; p != NULL; p = p->next_open)
        if (!p->mem && p->partition == partition && strcmp(p->topic, topic) == 0)
            return p;
    return NULL;
}

/* Whether plog still holds seg (plog's lock held). */
static bool holds(const tn_plog_t *plog, const tn_seg_t *seg)
{
    for (uint32_t i = 0; i < plog->nsegs; i++)
        if (plog->segs[i] == seg)
            return true;
    return false;
}

/* Whether seg is still part of its partition's log (not deleted). */
static bool still_there(run_t *r, const tn_seg_t *seg)
{
    tn_store_t *store = r->s->store;
    uv_mutex_lock(&store->open_lock);
    tn_plog_t *plog = find_plog(store, r->topic, r->partition);
    bool there = false;
    if (plog != NULL) {
        uv_mutex_lock(&plog->lock);
        there = holds(plog, seg);
        uv_mutex_unlock(&plog->lock);
    }
    uv_mutex_unlock(&store->open_lock);
    return there;
}

/* Isolate the partition for damage in seg at pos, as recovery does.
 * False when the segment is no longer the log's (deleted meanwhile), or,
 * for the active segment, when the record at offset (NO_OFFSET: not
 * known) is no longer below the log's end (a truncation cut the file
 * while it was read: it moves the end back first). */
static bool isolate(run_t *r, const tn_seg_t *seg, const char *what, uint64_t pos, bool active,
                    uint64_t offset)
{
    tn_store_t *store = r->s->store;
    uv_mutex_lock(&store->open_lock);
    tn_plog_t *plog = find_plog(store, r->topic, r->partition);
    bool there = false;
    if (plog != NULL) {
        /* Both under the lock: a truncation lowers written_next before it
         * cuts the file and replaces the segment object under this lock, so
         * a segment still the log's with the record below the end was read
         * before any truncation touched it; read after the unlock, a
         * truncation completed meanwhile and new appends past the record
         * could make a cut file look damaged. */
        uv_mutex_lock(&plog->lock);
        there = holds(plog, seg);
        if (there && active)
            there = offset != NO_OFFSET && offset < tn_plog_written_next(plog);
        uv_mutex_unlock(&plog->lock);
    }
    /* Still under the store's lock (the log stays open): for the active
     * segment this writes and syncs the damage record first. Only a close
     * meeting a finding waits on it. */
    if (there)
        tn__plog_found_damage(plog, seg->base,
                              "segment %s: %s at byte %" PRIu64 " in %s segment (found by scrub)",
                              seg->path, what, pos, active ? "the active" : "a sealed");
    uv_mutex_unlock(&store->open_lock);
    return there;
}

/* --- one segment ------------------------------------------------------------ */

/* What a sidecar says, once its header checked out. */
typedef struct {
    bool ok; /* header and entries usable */
    uint64_t count;
    uint64_t size;
    int64_t first_ns;
    int64_t last_ns;
    uint32_t n;
    const unsigned char *entries; /* n pairs of u32 (rel, pos), into the file's buffer */
    size_t hsize;                 /* header size: TNI2 80, TNI1 64 */
    bool has_ctl;                 /* TNI2: nctl is the segment's control record count */
    uint64_t nctl;
} idx_t;

/* Read and check the sidecar of seg; its problems are reported (the first
 * one) and leave ix->ok false. Returns false when the segment turned out
 * to be deleted (skip it). */
static bool read_sidecar(run_t *r, const tn_seg_t *seg, uint64_t count, tn_buf_t *buf, idx_t *ix,
                         char *ipath, size_t ilen)
{
    memset(ix, 0, sizeof(*ix));
    size_t plen = strlen(seg->path);
    snprintf(ipath, ilen, "%.*s.idx", (int)(plen - 4), seg->path);
    /* A sidecar has at most one entry per record. */
    size_t max = TN_SEG_IDX_HDR + (size_t)TN_MIN(count, (uint64_t)UINT32_MAX) * 8;
    int rc = tn_io_read_file(ipath, max, buf);
    if (rc == UV_ENOENT && !still_there(r, seg))
        return false;
    if (rc == 0 && !pace(r, tn_buf_size(buf))) {
        r->stopped = true;
        return true;
    }
    const unsigned char *p = (const unsigned char *)tn_buf_data(buf);
    size_t len = tn_buf_size(buf);
    if (rc == UV_ENOENT) {
        note_error(r, seg->base, ipath, 0, NO_OFFSET, false, "sidecar index missing");
        return true;
    }
    if (rc == TN_ETOOBIG) {
        note_error(r, seg->base, ipath, max, NO_OFFSET, false,
                   "sidecar index larger than %zu bytes (one entry per record)", max);
        return true;
    }
    if (rc != 0) {
        note_error(r, seg->base, ipath, 0, NO_OFFSET, false, "cannot read the sidecar index: %s",
                   tn_strerror(rc));
        return true;
    }
    size_t hsize = len >= 4 ? tn_seg_idx_hdr_size(tn_get_u32(p)) : 0;
    if (hsize == 0 || len < hsize) {
        note_error(r, seg->base, ipath, 0, NO_OFFSET, false,
                   "sidecar index header missing or without magic");
        return true;
    }
    if (tn_get_u32(p + 4) != tn_crc32c(0, p + 8, hsize - 8)) {
        note_error(r, seg->base, ipath, 4, NO_OFFSET, false, "sidecar index header CRC mismatch");
        return true;
    }
    if (tn_get_u64(p + 8) != seg->base) {
        note_error(r, seg->base, ipath, 8, NO_OFFSET, false,
                   "sidecar index names base offset %" PRIu64, tn_get_u64(p + 8));
        return true;
    }
    uint32_t n = tn_get_u32(p + 48);
    if (len != hsize + (size_t)n * 8) {
        note_error(r, seg->base, ipath, 48, NO_OFFSET, false,
                   "sidecar index is %zu bytes for %" PRIu32 " entries", len, n);
        return true;
    }
    if (tn_get_u32(p + 52) != tn_crc32c(0, p + hsize, (size_t)n * 8)) {
        note_error(r, seg->base, ipath, hsize, NO_OFFSET, false,
                   "sidecar index entries CRC mismatch");
        return true;
    }
    ix->ok = true;
    ix->count = tn_get_u64(p + 16);
    ix->size = tn_get_u64(p + 24);
    ix->first_ns = (int64_t)tn_get_u64(p + 32);
    ix->last_ns = (int64_t)tn_get_u64(p + 40);
    ix->n = n;
    ix->entries = p + hsize;
    ix->hsize = hsize;
    ix->has_ctl = hsize == TN_SEG_IDX_HDR;
    ix->nctl = ix->has_ctl ? tn_get_u64(p + 72) : 0;
    return true;
}

/* A checked segment's counts: the records whose CRC verified (per
 * segment, not per record: a lock each), and the segment as checked, or
 * as skipped when it was gone before a finding could isolate it. */
static void count_segment(run_t *r, uint64_t nrec, bool gone)
{
    tn_scrub_t *s = r->s;
    uv_mutex_lock(&s->lock);
    s->cur.records += nrec;
    s->tot.records += nrec;
    if (gone)
        s->cur.segments_skipped++;
    else if (!r->stopped)
        s->cur.segments++;
    uv_mutex_unlock(&s->lock);
}

/* Check one pinned sealed segment of size bytes and count records. */
static void check_segment(run_t *r, tn_seg_t *seg, uint64_t size, uint64_t count)
{
    tn_scrub_t *s = r->s;
    char ipath[4200];
    tn_buf_t ibuf;
    tn_buf_init(&ibuf);
    idx_t ix;
    if (!read_sidecar(r, seg, count, &ibuf, &ix, ipath, sizeof(ipath))) {
        uv_mutex_lock(&s->lock);
        s->cur.segments_skipped++;
        uv_mutex_unlock(&s->lock);
        tn_buf_fini(&ibuf);
        return;
    }
    if (r->stopped) {
        tn_buf_fini(&ibuf);
        return;
    }

    r->fd = seg->fd;
    r->wpos = 0;
    tn_buf_reset(&r->win);
    uint64_t fsize = 0;
    int rc = tn_io_fsize(seg->fd, &fsize);
    uint64_t pos = 0, expected = seg->base, nrec = 0, nctl = 0;
    int64_t first_ns = 0, last_ns = 0;
    bool more = false;
    uint32_t j = 0;                  /* the next sidecar entry to meet */
    bool idx_reported = !ix.ok;      /* one sidecar problem per segment */
    const char *bad = NULL;          /* a record problem: isolates */
    uint64_t bad_offset = NO_OFFSET; /* the record's offset, when it is one record's */
    char detail[160] = "";
    bool gone = false; /* deleted while it was read: not counted as checked */
    if (rc != 0) {
        note_error(r, seg->base, seg->path, 0, NO_OFFSET, false, "cannot stat the segment: %s",
                   tn_strerror(rc));
        goto out;
    }
    if (fsize != size) {
        bad = "wrong length";
        snprintf(detail, sizeof(detail),
                 "segment file is %" PRIu64 " bytes, the log holds %" PRIu64, fsize, size);
        pos = TN_MIN(fsize, size);
        goto found;
    }
    while (pos < size) {
        const unsigned char *p;
        rc = win_get(r, pos, TN_REC_HDR, size, &p);
        if (rc == TN_ESHORT) {
            bad = "truncated record";
            bad_offset = expected;
            snprintf(detail, sizeof(detail), "%" PRIu64 " bytes left, a header needs %d",
                     size - pos, TN_REC_HDR);
            goto found;
        }
        if (rc != 0)
            goto io_error;
        tn_rec_hdr_t h;
        if (tn_rec_decode_hdr(p, TN_REC_HDR, &h) != 0) {
            bad = "bad record";
            bad_offset = expected;
            snprintf(detail, sizeof(detail), "bad record header (magic, flags or lengths)");
            goto found;
        }
        if (h.offset != expected) {
            bad = "bad record";
            bad_offset = expected;
            snprintf(detail, sizeof(detail),
                     "record of offset %" PRIu64 " where %" PRIu64 " belongs", h.offset, expected);
            goto found;
        }
        uint64_t rsize = tn_rec_size(&h);
        if (pos + rsize > size) {
            bad = "truncated record";
            bad_offset = expected;
            snprintf(detail, sizeof(detail), "record of %" PRIu64 " bytes runs past the end",
                     rsize);
            goto found;
        }
        rc = win_get(r, pos, (size_t)rsize, size, &p);
        if (rc != 0)
            goto io_error;
        if (tn_rec_verify(p, p + TN_REC_HDR, p + TN_REC_HDR + h.key_len) != 0) {
            bad = "bad record";
            bad_offset = expected;
            snprintf(detail, sizeof(detail), "CRC mismatch in the record of offset %" PRIu64,
                     h.offset);
            goto found;
        }
        /* The sidecar's entries must each land on a record's start. */
        while (!idx_reported && j < ix.n && tn_get_u32(ix.entries + j * 8 + 4) < pos) {
            note_error(r, seg->base, ipath, ix.hsize + (uint64_t)j * 8, h.offset, false,
                       "index entry %" PRIu32 " points at byte %" PRIu32
                       ", inside the record at byte %" PRIu64,
                       j, tn_get_u32(ix.entries + j * 8 + 4), pos);
            idx_reported = true;
        }
        if (!idx_reported && j < ix.n && tn_get_u32(ix.entries + j * 8 + 4) == pos) {
            uint32_t rel = tn_get_u32(ix.entries + j * 8);
            if (rel != h.offset - seg->base) {
                note_error(r, seg->base, ipath, ix.hsize + (uint64_t)j * 8, h.offset, false,
                           "index entry %" PRIu32 " names offset %" PRIu64
                           " for the record of offset %" PRIu64,
                           j, seg->base + rel, h.offset);
                idx_reported = true;
            }
            j++;
        }
        if (nrec == 0) {
            first_ns = h.publish_ns;
            if (!idx_reported && (ix.n == 0 || tn_get_u32(ix.entries + 4) != 0)) {
                note_error(r, seg->base, ipath, ix.hsize, NO_OFFSET, false,
                           "no index entry for the first record");
                idx_reported = true;
            }
        }
        last_ns = TN_MAX(last_ns, h.publish_ns);
        if ((h.flags & TN_REC_F_CONTROL) != 0)
            nctl++;
        more = (h.flags & TN_REC_F_MORE) != 0;
        pos += rsize;
        expected++;
        nrec++;
    }
    if (nrec != count) {
        bad = "wrong record count";
        snprintf(detail, sizeof(detail), "%" PRIu64 " records, the log holds %" PRIu64, nrec,
                 count);
        goto found;
    }
    if (more) {
        bad = "truncated record";
        bad_offset = expected - 1;
        snprintf(detail, sizeof(detail), "the last record leaves its batch open");
        goto found;
    }
    if (!idx_reported && j < ix.n) {
        note_error(r, seg->base, ipath, ix.hsize + (uint64_t)j * 8, NO_OFFSET, false,
                   "index entry %" PRIu32 " points at byte %" PRIu32 ", past the last record", j,
                   tn_get_u32(ix.entries + j * 8 + 4));
        idx_reported = true;
    }
    if (!idx_reported &&
        (ix.count != nrec || ix.size != size || ix.first_ns != first_ns || ix.last_ns != last_ns)) {
        note_error(r, seg->base, ipath, 16, NO_OFFSET, false,
                   "sidecar index header says %" PRIu64 " records, %" PRIu64
                   " bytes; the segment has %" PRIu64 ", %" PRIu64 " (or other publish times)",
                   ix.count, ix.size, nrec, size);
        idx_reported = true;
    }
    if (!idx_reported && ix.has_ctl && ix.nctl != nctl)
        note_error(r, seg->base, ipath, 72, NO_OFFSET, false,
                   "sidecar index header says %" PRIu64
                   " control records; the segment has %" PRIu64,
                   ix.nctl, nctl);
    goto out;

found : {
    bool iso = isolate(r, seg, bad, pos, false, NO_OFFSET);
    if (iso) {
        note_error(r, seg->base, seg->path, pos, bad_offset, true, "%s: %s", bad, detail);
    } else {
        gone = true;
    }
    goto out;
}
io_error:
    if (!r->stopped)
        note_error(r, seg->base, seg->path, pos, NO_OFFSET, false, "cannot read the segment: %s",
                   tn_strerror(rc));
out:
    count_segment(r, nrec, gone);
    tn_buf_fini(&ibuf);
}

/* Check the first count records of the pinned active segment seg (those
 * below the log's durable_next when it was pinned: synced, so no write
 * changes their bytes; size bounds them). No sidecar, no count or length
 * to compare: the records only (magic, flags, lengths, dense offsets,
 * CRC). A truncation may cut the file meanwhile: a finding then isolates
 * nothing (isolate). */
static void check_active(run_t *r, tn_seg_t *seg, uint64_t size, uint64_t count)
{
    r->fd = seg->fd;
    r->wpos = 0;
    tn_buf_reset(&r->win);
    uint64_t pos = 0, expected = seg->base, nrec = 0;
    const char *bad = NULL;
    char detail[160] = "";
    int rc = 0;
    bool gone = false;
    while (nrec < count) {
        const unsigned char *p;
        rc = win_get(r, pos, TN_REC_HDR, size, &p);
        if (rc == TN_ESHORT) {
            bad = "truncated record";
            snprintf(detail, sizeof(detail), "the segment ends at byte %" PRIu64, size);
            break;
        }
        if (rc != 0)
            break;
        tn_rec_hdr_t h;
        if (tn_rec_decode_hdr(p, TN_REC_HDR, &h) != 0 || h.offset != expected) {
            bad = "bad record";
            snprintf(detail, sizeof(detail), "bad record header where offset %" PRIu64 " belongs",
                     expected);
            break;
        }
        uint64_t rsize = tn_rec_size(&h);
        rc = pos + rsize > size ? TN_ESHORT : win_get(r, pos, (size_t)rsize, size, &p);
        if (rc == TN_ESHORT) {
            bad = "truncated record";
            snprintf(detail, sizeof(detail), "record of %" PRIu64 " bytes runs past the end",
                     rsize);
            break;
        }
        if (rc != 0)
            break;
        if (tn_rec_verify(p, p + TN_REC_HDR, p + TN_REC_HDR + h.key_len) != 0) {
            bad = "bad record";
            snprintf(detail, sizeof(detail), "CRC mismatch in the record of offset %" PRIu64,
                     h.offset);
            break;
        }
        pos += rsize;
        expected++;
        nrec++;
    }
    if (bad != NULL) {
        if (isolate(r, seg, bad, pos, true, expected))
            note_error(r, seg->base, seg->path, pos, expected, true, "%s: %s", bad, detail);
        else
            gone = true;
    } else if (rc != 0 && !r->stopped) {
        note_error(r, seg->base, seg->path, pos, NO_OFFSET, false, "cannot read the segment: %s",
                   tn_strerror(rc));
    }
    count_segment(r, nrec, gone);
}

/* --- one partition, one run ---------------------------------------------------- */

static void check_partition(run_t *r, const part_t *part)
{
    tn_scrub_t *s = r->s;
    tn_store_t *store = s->store;
    r->topic = part->topic;
    r->partition = part->partition;
    uint64_t *bases = NULL;
    uint32_t n = 0;
    bool isolated = false, oom = false;
    uv_mutex_lock(&store->open_lock);
    tn_plog_t *plog = find_plog(store, part->topic, part->partition);
    if (plog != NULL) {
        uv_mutex_lock(&plog->lock);
        isolated = tn_plog_err(plog) != 0;
        bases = plog->nsegs > 0 ? tn_malloc(plog->nsegs * sizeof(*bases)) : NULL;
        oom = plog->nsegs > 0 && bases == NULL;
        for (uint32_t i = 0; bases != NULL && i < plog->nsegs; i++)
            if (plog->segs[i]->sealed)
                bases[n++] = plog->segs[i]->base;
        uv_mutex_unlock(&plog->lock);
    }
    uv_mutex_unlock(&store->open_lock);
    if (plog == NULL)
        return; /* closed meanwhile */
    if (oom) {
        TN_LOG(TN_LOG_WARN, "scrub: partition %s/%" PRIu32 " skipped: out of memory", part->topic,
               part->partition);
        return;
    }
    uv_mutex_lock(&s->lock);
    s->cur.partitions++;
    if (isolated)
        s->cur.segments_skipped += n;
    uv_mutex_unlock(&s->lock);
    for (uint32_t i = 0; !isolated && i < n && !r->stopped; i++) {
        tn_seg_t *seg = NULL;
        uint64_t size = 0, count = 0;
        uv_mutex_lock(&store->open_lock);
        plog = find_plog(store, part->topic, part->partition);
        if (plog != NULL) {
            uv_mutex_lock(&plog->lock);
            isolated = tn_plog_err(plog) != 0;
            for (uint32_t k = 0; !isolated && k < plog->nsegs; k++) {
                tn_seg_t *c = plog->segs[k];
                if (c->base == bases[i] && c->sealed) {
                    seg = c;
                    size = c->size;
                    count = c->count;
                    tn_seg_ref(seg);
                    break;
                }
            }
            uv_mutex_unlock(&plog->lock);
        }
        uv_mutex_unlock(&store->open_lock);
        if (seg == NULL) {
            uv_mutex_lock(&s->lock);
            s->cur.segments_skipped += isolated ? n - i : 1;
            uv_mutex_unlock(&s->lock);
            continue;
        }
        check_segment(r, seg, size, count);
        tn_seg_unref(seg);
    }
    tn_free(bases);

    /* The active segment: its records below durable_next. */
    tn_seg_t *act = NULL;
    uint64_t asize = 0, acount = 0;
    uv_mutex_lock(&store->open_lock);
    plog = isolated || r->stopped ? NULL : find_plog(store, part->topic, part->partition);
    if (plog != NULL) {
        uv_mutex_lock(&plog->lock);
        uint64_t durable = tn_plog_durable_next(plog);
        tn_seg_t *c = plog->nsegs > 0 ? plog->segs[plog->nsegs - 1] : NULL;
        if (tn_plog_err(plog) == 0 && c != NULL && !c->sealed && durable > c->base) {
            act = c;
            asize = c->size;
            acount = TN_MIN(durable, c->base + c->count) - c->base;
            tn_seg_ref(act);
        }
        uv_mutex_unlock(&plog->lock);
    }
    uv_mutex_unlock(&store->open_lock);
    if (act != NULL) {
        check_active(r, act, asize, acount);
        tn_seg_unref(act);
    }
}

static void run(tn_scrub_t *s)
{
    tn_store_t *store = s->store;
    run_t r;
    memset(&r, 0, sizeof(r));
    r.s = s;
    r.fd = -1;
    tn_buf_init(&r.win);
    /* A burst of one read, or of a second's worth when that is less. */
    tn_scrub_bucket_init(&r.bucket, s->o.rate, TN_MIN((uint64_t)READ_CHUNK, s->o.rate), now_ns(s));
    int64_t t0 = tn_now_mono_ns();

    part_t *parts = NULL;
    size_t nparts = 0, cap = 0;
    bool oom = false;
    uv_mutex_lock(&store->open_lock);
    for (tn_plog_t *p = store->plogs; p != NULL && !oom; p = p->next_open) {
        if (p->mem)
            continue;
        if (nparts == cap) {
            size_t nc = cap ? cap * 2 : 64;
            part_t *np = tn_realloc(parts, nc * sizeof(*np));
            if (np == NULL) {
                oom = true;
                break;
            }
            parts = np;
            cap = nc;
        }
        parts[nparts].topic = tn_strdup(p->topic);
        parts[nparts].partition = p->partition;
        if (parts[nparts].topic == NULL)
            oom = true;
        else
            nparts++;
    }
    uv_mutex_unlock(&store->open_lock);
    if (oom)
        TN_LOG(TN_LOG_WARN, "scrub: out of memory listing the partitions; checking %zu of them",
               nparts);
    for (size_t i = 0; i < nparts && !r.stopped; i++)
        check_partition(&r, &parts[i]);
    for (size_t i = 0; i < nparts; i++)
        tn_free(parts[i].topic);
    tn_free(parts);
    tn_buf_fini(&r.win);

    int64_t took = tn_now_mono_ns() - t0;
    uv_mutex_lock(&s->lock);
    bool stopped = r.stopped || s->stop;
    s->cur.state = stopped ? TN_SCRUB_STOPPED : TN_SCRUB_DONE;
    s->cur.finished_ms = tn_now_wall_ms();
    if (!stopped) {
        s->tot.runs++;
        s->tot.last_duration_ns = took;
        if (s->cur.errors_total == 0)
            s->tot.last_success_ms = s->cur.finished_ms;
    }
    s->tot.running = false;
    s->last = s->cur;
    tn_scrub_report_t *c = &s->last;
    uv_mutex_unlock(&s->lock);
    TN_LOG(c->errors_total > 0 ? TN_LOG_ERROR : TN_LOG_NOTICE,
           "scrub: run %" PRIu64 " %s: %" PRIu64 " partitions, %" PRIu64 " segments (%" PRIu64
           " skipped), %" PRIu64 " bytes, %" PRIu64 " records, %" PRIu64 " errors, %.1f s",
           c->id, stopped ? "stopped" : "finished", c->partitions, c->segments, c->segments_skipped,
           c->bytes, c->records, c->errors_total, (double)took / 1e9);
}

static void thread_main(void *arg)
{
    tn_scrub_t *s = arg;
    uv_mutex_lock(&s->lock);
    while (!s->stop) {
        if (!s->want) {
            uv_cond_wait(&s->cond, &s->lock);
            continue;
        }
        s->want = false;
        memset(&s->cur, 0, sizeof(s->cur));
        s->cur.id = s->last_id;
        s->cur.state = TN_SCRUB_RUNNING;
        s->cur.background = s->want_background;
        s->cur.started_ms = tn_now_wall_ms();
        s->tot.running = true;
        uv_mutex_unlock(&s->lock);
        run(s);
        uv_async_send(&s->async);
        uv_mutex_lock(&s->lock);
    }
    uv_mutex_unlock(&s->lock);
}

/* --- the loop thread ------------------------------------------------------------ */

/* Call the waiters whose run has ended. */
static void notify(tn_scrub_t *s, bool all)
{
    tn_scrub_report_t *rep = tn_malloc(sizeof(*rep));
    if (rep == NULL)
        return; /* tried again at the next wake-up */
    uv_mutex_lock(&s->lock);
    *rep = s->last;
    uv_mutex_unlock(&s->lock);
    tn_scrub_wait_t **pp = &s->waiters;
    while (*pp != NULL) {
        tn_scrub_wait_t *w = *pp;
        if (w->id > rep->id && !all) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (w->id > rep->id) {
            /* Closing before its run began: say so. */
            tn_scrub_report_t never;
            memset(&never, 0, sizeof(never));
            never.id = w->id;
            never.state = TN_SCRUB_STOPPED;
            w->cb(w, &never);
        } else {
            w->cb(w, rep);
        }
    }
    tn_free(rep);
}

static void on_async(uv_async_t *h)
{
    notify(h->data, false);
}

static void start_run(tn_scrub_t *s, bool background, uint64_t *id, bool *started)
{
    uv_mutex_lock(&s->lock);
    bool busy = s->cur.state == TN_SCRUB_RUNNING || s->want;
    if (!busy) {
        s->want = true;
        s->want_background = background;
        s->last_id++;
        uv_cond_signal(&s->cond);
    }
    if (id != NULL)
        *id = s->last_id;
    if (started != NULL)
        *started = !busy;
    uv_mutex_unlock(&s->lock);
}

static void on_timer(uv_timer_t *t)
{
    tn_scrub_t *s = t->data;
    bool started;
    uint64_t id;
    start_run(s, true, &id, &started);
    if (!started)
        TN_LOG(TN_LOG_INFO, "scrub: background run skipped: run %" PRIu64 " is still going", id);
}

int tn_scrub_new(uv_loop_t *loop, tn_store_t *store, const tn_scrub_opts_t *o, tn_scrub_t **out)
{
    if (o->rate == 0 || o->interval_ns < 0 || o->quiet_ns < 0)
        return UV_EINVAL;
    tn_scrub_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->loop = loop;
    s->store = store;
    s->o = *o;
    int rc = uv_mutex_init(&s->lock);
    if (rc != 0)
        goto err_after_alloc;
    if ((rc = uv_cond_init(&s->cond)) != 0)
        goto err_after_mutex;
    if ((rc = uv_async_init(loop, &s->async, on_async)) != 0)
        goto err_after_cond;
    s->async.data = s;
    s->handles = 1;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    s->handles++;
    uv_unref((uv_handle_t *)&s->timer);
    if ((rc = uv_thread_create(&s->thread, thread_main, s)) != 0) {
        tn_scrub_close(s);
        return rc;
    }
    s->thread_started = true;
    if (o->interval_ns > 0) {
        uint64_t first = (uint64_t)(o->quiet_ns / 1000000);
        uint64_t every = TN_MAX((uint64_t)(o->interval_ns / 1000000), (uint64_t)1);
        uv_timer_start(&s->timer, on_timer, first, every);
        s->timer_on = true;
    }
    *out = s;
    return 0;
err_after_cond:
    uv_cond_destroy(&s->cond);
err_after_mutex:
    uv_mutex_destroy(&s->lock);
err_after_alloc:
    tn_free(s);
    return rc;
}

void tn_scrub_start(tn_scrub_t *s, uint64_t *id, bool *started)
{
    start_run(s, false, id, started);
}

void tn_scrub_wait(tn_scrub_t *s, tn_scrub_wait_t *w, uint64_t id, tn_scrub_wait_cb cb)
{
    w->id = id;
    w->cb = cb;
    w->next = s->waiters;
    s->waiters = w;
    uv_async_send(&s->async); /* a run already over calls back on the next turn */
}

void tn_scrub_wait_cancel(tn_scrub_t *s, tn_scrub_wait_t *w)
{
    for (tn_scrub_wait_t **pp = &s->waiters; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            return;
        }
    }
}

void tn_scrub_report(tn_scrub_t *s, tn_scrub_report_t *out)
{
    uv_mutex_lock(&s->lock);
    *out = s->cur.state == TN_SCRUB_RUNNING ? s->cur : s->last;
    uv_mutex_unlock(&s->lock);
}

void tn_scrub_counters(tn_scrub_t *s, tn_scrub_counters_t *out)
{
    uv_mutex_lock(&s->lock);
    *out = s->tot;
    uv_mutex_unlock(&s->lock);
}

int64_t tn_scrub_next_ms(tn_scrub_t *s)
{
    if (!s->timer_on)
        return 0;
    return tn_now_wall_ms() + (int64_t)uv_timer_get_due_in(&s->timer);
}

static void on_closed(uv_handle_t *h)
{
    tn_scrub_t *s = h->data;
    if (--s->handles > 0)
        return;
    uv_cond_destroy(&s->cond);
    uv_mutex_destroy(&s->lock);
    tn_free(s);
}

void tn_scrub_close(tn_scrub_t *s)
{
    if (s == NULL)
        return;
    uv_mutex_lock(&s->lock);
    s->stop = true;
    uv_cond_broadcast(&s->cond);
    uv_mutex_unlock(&s->lock);
    if (s->thread_started)
        uv_thread_join(&s->thread);
    s->thread_started = false;
    notify(s, true);
    uv_close((uv_handle_t *)&s->timer, on_closed);
    uv_close((uv_handle_t *)&s->async, on_closed);
}
