/* The partition log: recovery, group-committed appends, segment rolls,
 * reads by offset, background syncs for relaxed mode, and GC.
 *
 * Durability invariants (every change here must keep them):
 *   1. Appends gathered in one round are written with one pwritev per
 *      partition file (more only when a segment rolls), and the
 *      fdatasync runs on the committer thread, never on the loop thread.
 *   2. A durable-mode append completes only from the fdatasync that covers
 *      all of its records; write_ack and relaxed complete after the write.
 *   3. durable_next only moves after an fdatasync returned success for
 *      every record below it; visible_next never passes durable_next
 *      outside relaxed mode.
 *   4. Data is synced before anything that points at it: a segment is
 *      fdatasync'ed before its sidecar index is written, and the sidecar
 *      is written (temp file, fsync, rename, directory fsync) before the
 *      next segment is created; the directory is fsynced after a segment
 *      file is created or unlinked.
 *   5. A failed write or fdatasync is sticky: the log refuses every later
 *      append and read and never retries the fsync, whose failure may have
 *      dropped dirty pages the kernel will not write again. The exceptions
 *      are writes that find the disk full (tn_io_nospace) before anything
 *      synced them: a plain publish's records (cut off again and the
 *      cut fdatasync'ed before they are answered, flush_failed), a new leader's epoch-start record
 * (when it is the first of its write: its epoch stays at the log end with no record, and
 * begin_epoch may ask for that epoch again), the epochs file saved for it (its epoch taken back),
 * and a roll's sidecar or next segment file, also refused for want of a descriptor (EMFILE, ENFILE;
 * the old segment stays the active one, roll_failed). Those fail the round's requests alone, and a
 * later round writes again.
 *   6. A record's sync_mark is the segment length covered by an fdatasync
 *      when the record was written; recovery trusts it to tell a torn tail
 *      from damage (segment.c).
 *   7. Damage found at runtime (a read, the scrub) in the active segment's
 *      records is recorded in the partition's damage file, synced, before
 *      the log turns isolated; recovery reads that record before it scans
 *      the segments and cuts no tail of the active segment it names (a bad
 *      record in the last synced batch would otherwise pass for a torn
 *      write and take the acknowledged records after it along).
 *
 * DESIGN: a round on the log committer.
 *   1. Group the round's appends by partition, in arrival order.
 *   2. Per partition: assign offsets, encode headers (CRC over header, key
 *      and body; bodies are never copied), pwritev, then publish the new
 *      length, count, index entries and written_next under the log's lock.
 *      Roll to a new segment first when a batch would overflow the active
 *      one.
 *   3. Complete write_ack and relaxed appends.
 *   4. fdatasync each durable and write_ack partition written this round,
 *      advance durable_next, complete durable appends.
 *   5. Relaxed partitions sync when their unsynced messages, bytes or age
 *      pass the configured limits (the tick handles age).
 *   6. Run control requests (GC, close) in order.
 * The ingress log's appends ride in the same rounds: written after step 2,
 * synced and completed after step 4 (ilog.c).
 *
 * DESIGN: replication (plog.h "replication"; docs/replication.md).
 *   - Epoch changes ride the append path, in order: a begin_epoch request
 *     (kind 2) assigns its epoch and saves the epochs file in step 2, just
 *     before its EPOCH_START record is encoded; a raw copy (kind 1) assigns
 *     and saves the epochs it carries before its records. The file is thus
 *     durable before any record of the epoch is written. The history is
 *     changed only on the committer thread, under the lock (readers on any
 *     thread take the lock); the save reads it without the lock.
 *   - A raw copy's bytes are the leader's records, re-encoded in place
 *     with this segment's sync_mark (CRC recomputed) and written with one
 *     iovec; it completes in step 3 whatever the mode (a follower tracks
 *     durability through durable_next), never through the hw gate.
 *   - The hw gate lives on the loop thread: append_done parks a gated
 *     append until tn_plog_set_hw covers it, so completions stay in offset
 *     order; visible_next reads the hw atomically.
 *   - Truncation is a control request, after the round's appends; its
 *     steps (and their crash outcomes) are at trunc_run. Retention (GC,
 *     the floor) trims the history's start after the segments go. */
#include "core/platform.h"

#include "storage/plog.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "core/crc32c.h"
#include "storage/disk.h"
#include "storage/ilog.h"
#include "storage/io.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t offset;
    uint64_t pos;
    int64_t publish_ns; /* the record's: this round's, or the leader's for a copy */
    bool control;       /* a TN_REC_F_CONTROL record */
} note_t;

/* The log committer's scratch arrays. */
typedef struct {
    tn_iov_t *iov;
    size_t iov_cap;
    note_t *notes;
    size_t notes_cap;
    tn_plog_t *relaxed; /* logs holding unsynced relaxed-mode data */
    int64_t next_disk_check_ns;
    tn_io_syncs_t syncs; /* a round's fdatasyncs, together (sync_round) */
} log_scratch_t;

static void set_sticky(tn_plog_t *plog, int err, const char *fmt, ...) TN_PRINTF(3, 4);
static void set_sticky(tn_plog_t *plog, int err, const char *fmt, ...)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&plog->err, &expected, err))
        return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(plog->errmsg, sizeof(plog->errmsg), "partition %s/%u: %s: %s", plog->topic,
             plog->partition, what, tn_strerror(err));
    TN_LOG(TN_LOG_ERROR, "%s; the partition refuses writes until restart", plog->errmsg);
}

/* Record the damaged segment [base, end) ahead of the sticky error that
 * isolates the log for it (tn_plog_damage); end 0: unknown. */
static void note_damage(tn_plog_t *plog, uint64_t base, uint64_t end)
{
    if (atomic_load(&plog->err) != 0)
        return;
    atomic_store(&plog->bad_end, end);
    atomic_store(&plog->bad_base, base);
}

/* The end of the damaged segment at base as the segments stand now (lock
 * held): the next one's base, TN_PLOG_DAMAGE_ACTIVE when it is the last,
 * 0 when there is no such segment. */
static uint64_t damage_end_locked(const tn_plog_t *plog, uint64_t base)
{
    for (uint32_t i = 0; i < plog->nsegs; i++)
        if (plog->segs[i]->base == base)
            return i + 1 < plog->nsegs ? plog->segs[i + 1]->base : TN_PLOG_DAMAGE_ACTIVE;
    return 0;
}

static int write_damage(tn_plog_t *plog, uint64_t base, uint64_t end);

void tn__plog_found_damage(tn_plog_t *plog, uint64_t base, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    uv_mutex_lock(&plog->dmg_lock);
    if (atomic_load(&plog->err) != 0) {
        uv_mutex_unlock(&plog->dmg_lock);
        return; /* isolated already: its damage (or failure) stands */
    }
    uv_mutex_lock(&plog->lock);
    uint64_t end = damage_end_locked(plog, base);
    uv_mutex_unlock(&plog->lock);
    /* The active segment's damage is recorded before anyone hears of it:
     * recovery would take a bad record in the last synced batch for a torn
     * write and cut it with every acknowledged record after it. A sealed
     * segment's is not (its records stay, and a read or the scrub finds it
     * again); a replicated copy's replica manager records that one
     * (tn_plog_record_damage). */
    if (end == TN_PLOG_DAMAGE_ACTIVE && !plog->mem) {
        int rc = write_damage(plog, base, TN_PLOG_DAMAGE_ACTIVE);
        if (rc != 0)
            TN_LOG(TN_LOG_ERROR,
                   "partition %s/%u: cannot record the damage in the active segment %" PRIu64
                   " (%s): a restart would cut the records from the bad one on as a torn "
                   "tail; copy the partition directory before any restart",
                   plog->topic, plog->partition, base, tn_strerror(rc));
    }
    note_damage(plog, base, end);
    set_sticky(plog, TN_ECORRUPT, "%s", what);
    uv_mutex_unlock(&plog->dmg_lock);
}

bool tn_plog_damage(tn_plog_t *pl, uint64_t *base, uint64_t *end)
{
    if (atomic_load(&pl->err) != TN_ECORRUPT)
        return false;
    uint64_t e = atomic_load(&pl->bad_end);
    uint64_t b = atomic_load(&pl->bad_base);
    if (e <= b)
        return false;
    if (e == TN_PLOG_DAMAGE_ACTIVE) {
        /* Found in the active segment: a roll may have sealed it since
         * (a round that was under way when the log turned sticky). */
        uv_mutex_lock(&pl->lock);
        e = damage_end_locked(pl, b);
        uv_mutex_unlock(&pl->lock);
        if (e <= b)
            return false;
    }
    *base = b;
    *end = e;
    return true;
}

/* The epoch of the record at offset - 1 by the history (0: offset 0, or
 * no entry starts at or below it). Any thread. */
static uint32_t epoch_before(tn_plog_t *pl, uint64_t offset)
{
    if (offset == 0)
        return 0;
    uint32_t epoch = 0;
    uv_mutex_lock(&pl->lock);
    const tn_epochs_t *h = &pl->epochs;
    for (uint32_t i = h->n; i > 0; i--) {
        if (h->entries[i - 1].start <= offset - 1) {
            epoch = h->entries[i - 1].epoch;
            break;
        }
    }
    uv_mutex_unlock(&pl->lock);
    return epoch;
}

uint32_t tn_plog_damage_prefix_epoch(tn_plog_t *pl, uint64_t base)
{
    return epoch_before(pl, base);
}

static tn_seg_t *active_seg(tn_plog_t *plog)
{
    return plog->segs[plog->nsegs - 1];
}

static int push_seg(tn_plog_t *plog, tn_seg_t *seg)
{
    if (plog->nsegs == plog->segs_cap) {
        uint32_t cap = plog->segs_cap ? plog->segs_cap * 2 : 8;
        tn_seg_t **p = tn_realloc(plog->segs, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        plog->segs = p;
        plog->segs_cap = cap;
    }
    plog->segs[plog->nsegs++] = seg;
    return 0;
}

static int seg_path(const tn_plog_t *plog, uint64_t base, const char *ext, char *buf, size_t len)
{
    char name[64];
    tn_seg_name(base, ext, name, sizeof(name));
    if ((size_t)snprintf(buf, len, "%s/%s", plog->dir, name) >= len)
        return UV_ENAMETOOLONG;
    return 0;
}

/* Create an empty segment file at base, durable in the directory. A
 * failed directory fsync is sticky here (whatever its error); a create
 * refused for space (tn_io_nospace) left no file. */
static int create_segment(tn_plog_t *plog, uint64_t base, tn_seg_t **out)
{
    char path[4096];
    int rc = seg_path(plog, base, "log", path, sizeof(path));
    if (rc != 0)
        return rc;
    tn_seg_t *seg;
    rc = tn_seg_new(path, base, &seg);
    if (rc != 0)
        return rc;
    rc = tn_io_open(path, O_RDWR | O_CREAT | O_EXCL, 0644, &seg->fd);
    if (rc == 0 && (rc = tn_io_fsync_dir(plog->dir)) != 0)
        set_sticky(plog, rc, "fsync of the directory after creating segment %" PRIu64, base);
    if (rc != 0) {
        tn_seg_unref(seg);
        return rc;
    }
    seg->idx_loaded = true;
    *out = seg;
    return 0;
}

/* --- control records --------------------------------------------------------
 *
 * Control records (TN_REC_F_CONTROL: a new leader's EPOCH_START, the
 * PRODUCER mark ahead of a forwarded batch) hold offsets but are not
 * messages. The log counts them so that every count a user sees can count
 * messages only (tn_plog_controls_below):
 *
 * 1. Each segment knows how many it holds (nctl) and how many the log held
 *    below its base (ctl_base). A sealed segment's pair is in its sidecar
 *    (TNI2), written after the segment's data is durable, so it is as
 *    crash-safe as the sidecar; the active segment's nctl comes from the
 *    scan recovery does anyway, its ctl_base from the segments before.
 * 2. An append counts its control records as they are written (flush,
 *    under the lock, with the segment's count), and lists their offsets in
 *    the active segment; the list of the segment sealed last is kept too
 *    while the log stays open, so that a count up to any offset there is
 *    exact (the queue engine's visible end can trail a roll). At open only
 *    the active segment is listed (the scan recovery does anyway).
 * 3. Retention (GC) deletes whole segments and their counts with them;
 *    the ctl_base of the segments kept still counts what went, so a count
 *    of the control records ever written below an offset stays right.
 *    A drop floor inside a segment: the control records below it there
 *    are counted when the floor moves and at open (floor_ctl).
 * 4. Truncation rescans the segment it cuts (its list and count follow);
 *    the segments after it go with their counts.
 *
 * Limits: a count below an offset inside an older sealed segment (neither
 * at its bounds, nor the floor) is not exact: the segment's ctl_base is
 * given (plog.h). A follower that copies a log from the leader's first
 * offset (its reset) counts from there: the control records the leader
 * had dropped before are not known to it. */

/* How many segments have a base at or below offset: segs[that - 1] is
 * the one that would hold it, none when 0 (lock held). */
static uint32_t segs_at_or_below(const tn_plog_t *plog, uint64_t offset)
{
    uint32_t lo = 0, hi = plog->nsegs;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (plog->segs[mid]->base <= offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Control records below offset (lock held). */
static uint64_t ctl_below_locked(const tn_plog_t *plog, uint64_t offset)
{
    if (plog->mem || plog->nsegs == 0)
        return 0;
    /* The last segment whose base is at or below offset. */
    uint32_t lo = segs_at_or_below(plog, offset);
    if (lo == 0)
        return plog->segs[0]->ctl_base;
    const tn_seg_t *seg = plog->segs[lo - 1];
    if (offset == seg->base)
        return seg->ctl_base;
    if (offset >= seg->base + seg->count)
        return seg->ctl_base + seg->nctl;
    if (seg->ctl_listed)
        return seg->ctl_base + tn_seg_ctl_below(seg, offset);
    if (offset == plog->floor && plog->floor_ctl_known)
        return plog->floor_ctl;
    return seg->ctl_base;
}

/* Count the control records below the drop floor when it lies inside a
 * segment that is not listed (committer thread or open: reads the file).
 * 0 or an I/O error (the log's error then sticky). */
static int count_floor_ctl(tn_plog_t *plog)
{
    uv_mutex_lock(&plog->lock);
    uint64_t floor = plog->floor;
    tn_seg_t *in = NULL;
    for (uint32_t i = 0; i < plog->nsegs; i++) {
        tn_seg_t *seg = plog->segs[i];
        if (floor > seg->base && floor < seg->base + seg->count && !seg->ctl_listed &&
            seg->nctl > 0) {
            in = seg;
            tn_seg_ref(in);
        }
    }
    plog->floor_ctl_known = false;
    uv_mutex_unlock(&plog->lock);
    if (in == NULL)
        return 0; /* at a bound, listed, or no control record there */
    tn_seg_t *tmp;
    int rc = tn_seg_new(in->path, in->base, &tmp);
    if (rc == 0) {
        tn_seg_scan_t scan;
        int fd;
        rc = tn_io_open(in->path, O_RDONLY, 0, &fd);
        if (rc == 0) {
            rc = tn_seg_scan(fd, in->size, in->base, plog->store->opts.index_interval, tmp, &scan);
            tn_io_close(fd);
        }
        if (rc == 0 && tmp->ctl_listed) {
            uv_mutex_lock(&plog->lock);
            if (plog->floor == floor) {
                plog->floor_ctl = in->ctl_base + tn_seg_ctl_below(tmp, floor);
                plog->floor_ctl_known = true;
            }
            uv_mutex_unlock(&plog->lock);
        }
        tn_seg_unref(tmp);
    }
    tn_seg_unref(in);
    if (rc != 0)
        set_sticky(plog, rc, "counting the control records below the floor %" PRIu64, floor);
    return rc;
}

uint64_t tn_plog_controls_below(tn_plog_t *plog, uint64_t offset)
{
    uv_mutex_lock(&plog->lock);
    uint64_t n = ctl_below_locked(plog, offset);
    uv_mutex_unlock(&plog->lock);
    return n;
}

uint64_t tn_plog_controls_in(tn_plog_t *plog, uint64_t from, uint64_t to,
                             bool (*settled)(const void *arg, uint64_t offset), const void *arg)
{
    uint64_t n = 0;
    if (plog->mem || from >= to)
        return 0;
    uv_mutex_lock(&plog->lock);
    for (uint32_t i = 0; i < plog->nsegs; i++) {
        const tn_seg_t *seg = plog->segs[i];
        uint64_t lo = TN_MAX(from, seg->base), hi = TN_MIN(to, seg->base + seg->count);
        if (lo >= hi || seg->nctl == 0)
            continue;
        if (!seg->ctl_listed) {
            n += ctl_below_locked(plog, hi) - ctl_below_locked(plog, lo);
            continue;
        }
        for (uint64_t k = tn_seg_ctl_below(seg, lo); k < seg->nctl_offs; k++) {
            uint64_t off = seg->ctl_offs[k];
            if (off >= hi)
                break;
            if (settled == NULL || !settled(arg, off))
                n++;
        }
    }
    uv_mutex_unlock(&plog->lock);
    return n;
}

/* --- recovery ------------------------------------------------------------- */

/* Open and check one segment (next: the following segment's base, when
 * not last; recorded: the last segment is the active one a damage record
 * names, so no tail of it is cut). Sets the log's sticky error (and
 * returns 0) on corruption; returns an error only when the open itself
 * failed. */
static int recover_segment(tn_plog_t *plog, uint64_t base, uint64_t next, bool last, bool recorded,
                           uint64_t ctl_base, bool may_ctl, tn_seg_t **out)
{
    uint32_t interval = plog->store->opts.index_interval;
    char path[4096];
    int rc = seg_path(plog, base, "log", path, sizeof(path));
    if (rc != 0)
        return rc;
    tn_seg_t *seg;
    rc = tn_seg_new(path, base, &seg);
    if (rc != 0)
        return rc;
    rc = tn_io_open(path, last ? O_RDWR : O_RDONLY, 0, &seg->fd);
    uint64_t fsize = 0;
    if (rc == 0)
        rc = tn_io_fsize(seg->fd, &fsize);
    if (rc != 0)
        goto fail;

    if (!last) {
        rc = tn_seg_index_open(seg, fsize);
        if (rc == 0 && !seg->ctl_known && !may_ctl) {
            /* A TNI1 sidecar of a partition that never held a control
             * record (no epochs file: factor 1). */
            seg->ctl_known = true;
            seg->nctl = 0;
        }
        if (rc == 0 && seg->ctl_known) {
            seg->sealed = true;
            *out = seg;
            return 0;
        }
        if (rc == 0) {
            /* A TNI1 sidecar of a replicated partition: its control
             * records are counted by the scan below, which writes a TNI2
             * sidecar in its place. */
            TN_LOG(TN_LOG_NOTICE,
                   "partition %s/%u: counting the control records of segment %" PRIu64
                   " (older index format)",
                   plog->topic, plog->partition, base);
            seg->ctl_base = ctl_base;
            rc = TN_ECORRUPT; /* rebuilt as an invalid one is, without the warning */
        } else if (rc != UV_ENOENT && rc != TN_ECORRUPT) {
            goto fail;
        } else {
            seg->ctl_known = true;
        }
        bool counting = !seg->ctl_known;
        if (rc == UV_ENOENT && fsize == 0) {
            /* An empty segment that never had data or a sidecar: left by
             * tn_plog_advance between creating the next segment and
             * removing this one. Nothing to lose. */
            TN_LOG(TN_LOG_NOTICE, "partition %s/%u: removing empty segment %" PRIu64, plog->topic,
                   plog->partition, base);
            tn_seg_unref(seg);
            if ((rc = tn_io_unlink(path)) != 0 || (rc = tn_io_fsync_dir(plog->dir)) != 0)
                return rc;
            *out = NULL;
            return 0;
        }
        if (!counting)
            TN_LOG(TN_LOG_WARN, "partition %s/%u: index of segment %" PRIu64 " %s; rebuilding",
                   plog->topic, plog->partition, base, rc == UV_ENOENT ? "missing" : "invalid");
    }

    /* Whatever a sidecar said, a scanned segment's control records are
     * counted after those below it in the log. */
    seg->ctl_base = ctl_base;
    tn_seg_scan_t scan;
    rc = tn_seg_scan(seg->fd, fsize, base, interval, seg, &scan);
    if (rc != 0)
        goto fail;
    seg->count = scan.count;
    seg->size = scan.valid_len;
    seg->synced = scan.valid_len;
    seg->alloc = scan.valid_len;
    seg->first_ns = scan.first_ns;
    seg->last_ns = scan.last_ns;
    seg->idx_loaded = true;

    if (scan.tail != 0 && recorded) {
        /* The damage found before the restart (or more): whatever the tail
         * looks like, it holds acknowledged records. Nothing is cut. */
        note_damage(plog, base, TN_PLOG_DAMAGE_ACTIVE);
        set_sticky(plog, TN_ECORRUPT,
                   "the active segment %" PRIu64 " (offsets from %" PRIu64
                   ") was found damaged before the restart and is not repaired yet (%s at byte "
                   "%" PRIu64 ", not cut: the partition's damage record names the segment)",
                   base, base, scan.tail == TN_ESHORT ? "truncated record" : "bad record",
                   scan.tail_pos);
    } else if (scan.tail != 0 && last && scan.zero_tail) {
        /* Space written ahead of the records (see zero_ahead), left by a
         * crash: nothing was lost. The cut need not be durable. */
        rc = tn_io_ftruncate(seg->fd, scan.valid_len);
        if (rc != 0)
            goto fail;
    } else if (scan.tail != 0 && (!last || scan.durable_damage)) {
        note_damage(plog, base, last ? TN_PLOG_DAMAGE_ACTIVE : next);
        set_sticky(plog, TN_ECORRUPT, "segment %s: %s at byte %" PRIu64 "%s", path,
                   scan.tail == TN_ESHORT ? "truncated record" : "bad record", scan.tail_pos,
                   last ? " below data that had been made durable" : " in a sealed segment");
    } else if (scan.tail != 0) {
        TN_LOG(TN_LOG_WARN,
               "partition %s/%u: truncating torn tail of segment %" PRIu64 ": %" PRIu64
               " bytes after byte %" PRIu64 " (%" PRIu64 " records kept)",
               plog->topic, plog->partition, base, fsize - scan.valid_len, scan.valid_len,
               scan.count);
        rc = tn_io_ftruncate(seg->fd, scan.valid_len);
        if (rc == 0)
            rc = tn_io_fdatasync(seg->fd);
        if (rc != 0)
            goto fail;
    } else if (!last) {
        if (scan.count == 0) {
            set_sticky(plog, TN_ECORRUPT, "segment %s is empty but not the last", path);
        } else {
            seg->sealed = true;
            rc = tn_seg_index_write(seg, plog->dir);
            if (rc != 0)
                goto fail;
        }
    }
    *out = seg;
    return 0;
fail:
    tn_seg_unref(seg);
    return rc;
}

/* The floor file: u32 magic "TNF1", u32 crc32c of the next 8 bytes, u64
 * the floor; all little-endian (docs/storage-format.md). */
#define FLOOR_FILE  "floor"
#define FLOOR_MAGIC 0x31464E54u /* "TNF1" read as a little-endian u32 */

int tn__plog_floor_load(const char *dir, uint64_t *floor)
{
    unsigned char p[8];
    int rc = tn_io_read_record_file(dir, FLOOR_FILE, FLOOR_MAGIC, p, sizeof(p));
    if (rc == UV_ENOENT)
        return 0;
    if (rc == 0)
        *floor = tn_get_u64(p);
    return rc;
}

static int recover_floor(tn_plog_t *plog)
{
    int rc = tn__plog_floor_load(plog->dir, &plog->floor);
    if (rc == TN_ECORRUPT) {
        set_sticky(plog, TN_ECORRUPT, "floor file %s/%s is damaged", plog->dir, FLOOR_FILE);
        return 0;
    }
    return rc;
}

/* The damage file (tn_plog_record_damage): u32 magic "TND1", u32 crc32c
 * of the next 16 bytes, u64 base, u64 end; little-endian
 * (docs/storage-format.md). */
#define DAMAGE_FILE  "damage"
#define DAMAGE_MAGIC 0x31444E54u /* "TND1" read as a little-endian u32 */

int tn__plog_damage_load(const char *dir, tn__plog_dmgfile_t *d)
{
    memset(d, 0, sizeof(*d));
    unsigned char p[16];
    int rc = tn_io_read_record_file(dir, DAMAGE_FILE, DAMAGE_MAGIC, p, sizeof(p));
    if (rc == UV_ENOENT)
        return 0;
    if (rc != 0 && rc != TN_ECORRUPT)
        return rc;
    d->found = true;
    d->damaged = rc == TN_ECORRUPT;
    if (!d->damaged) {
        d->base = tn_get_u64(p);
        d->end = tn_get_u64(p + 8);
    }
    return 0;
}

bool tn__plog_damage_names(const tn__plog_dmgfile_t *d, uint64_t now_end)
{
    return now_end != 0 && (now_end == d->end || d->end == TN_PLOG_DAMAGE_ACTIVE);
}

/* A damage record no segment matches (truncated, collected, or moved
 * aside by the operator since) goes, and says so. */
static int drop_damage(tn_plog_t *plog, const tn__plog_dmgfile_t *d)
{
    if (d->damaged)
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: damage file %s/%s is damaged, and no segment is left for it to "
               "name: removed",
               plog->topic, plog->partition, plog->dir, DAMAGE_FILE);
    else if (d->end == TN_PLOG_DAMAGE_ACTIVE)
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: the damage recorded for the active segment %" PRIu64
               " matches no segment any more (truncated or moved aside since): record dropped",
               plog->topic, plog->partition, d->base);
    else
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: the damage recorded for offsets %" PRIu64 "..%" PRIu64
               " matches no segment any more (truncated, collected or moved aside since): "
               "record dropped",
               plog->topic, plog->partition, d->base, d->end - 1);
    char path[4096];
    int rc = tn_io_path(path, sizeof(path), "%s/%s", plog->dir, DAMAGE_FILE);
    if (rc == 0)
        rc = tn_io_unlink(path);
    if (rc == 0)
        rc = tn_io_fsync_dir(plog->dir);
    return rc == UV_ENOENT ? 0 : rc;
}

/* At open, after the segments: a damage recorded before the restart
 * isolates the log again while its segment is still there. */
static int apply_damage(tn_plog_t *plog, const tn__plog_dmgfile_t *d)
{
    if (!d->found)
        return 0;
    if (d->damaged) {
        set_sticky(plog, TN_ECORRUPT, "damage file %s/%s is damaged", plog->dir, DAMAGE_FILE);
        return 0;
    }
    if (atomic_load(&plog->err) != 0)
        return 0; /* isolated already: the damage was found again, or other damage */
    /* The segment there now, as the damage's end names it: the one
     * followed by the segment at end, or for the active segment's damage
     * (TN_PLOG_DAMAGE_ACTIVE) the last one, or one a roll sealed after
     * the damage was found. */
    uint64_t base = d->base;
    uint64_t now_end = damage_end_locked(plog, base);
    if (tn__plog_damage_names(d, now_end)) {
        note_damage(plog, base, now_end);
        if (now_end == TN_PLOG_DAMAGE_ACTIVE)
            set_sticky(plog, TN_ECORRUPT,
                       "the active segment %" PRIu64 " (offsets from %" PRIu64
                       ") was found damaged before the restart and is not repaired yet",
                       base, base);
        else
            set_sticky(plog, TN_ECORRUPT,
                       "segment %" PRIu64 " (offsets %" PRIu64 "..%" PRIu64
                       ") was found damaged before the restart and is not repaired yet",
                       base, base, now_end - 1);
        return 0;
    }
    return drop_damage(plog, d);
}

static int recover(tn_plog_t *plog)
{
    uint64_t *bases = NULL;
    size_t n = 0;
    tn__plog_dmgfile_t dmg;
    int rc = tn__seg_list(plog->dir, &bases, &n);
    if (rc == 0)
        rc = tn__plog_damage_load(plog->dir, &dmg);
    if (rc != 0) {
        tn_free(bases);
        return rc;
    }
    if (n == 0) {
        /* No segment for a damage record to name: the operator moved the
         * only one aside. */
        if (dmg.found)
            rc = drop_damage(plog, &dmg);
        tn_seg_t *seg;
        if (rc == 0)
            rc = create_segment(plog, 0, &seg);
        if (rc == 0 && (rc = push_seg(plog, seg)) != 0)
            tn_seg_unref(seg);
        tn_free(bases);
        return rc;
    }
    /* Only a replicated partition (one with an epochs file) ever holds a
     * control record. */
    char epath[4096];
    rc = tn_io_path(epath, sizeof(epath), "%s/%s", plog->dir, TN_EPOCHS_FILE);
    if (rc != 0) {
        tn_free(bases);
        return rc;
    }
    bool may_ctl = access(epath, F_OK) == 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        tn_seg_t *seg;
        /* Control records below each segment: the sum over the segments
         * before it; below the first, what its sidecar says (0 when it
         * has none to say: counted from there). */
        uint64_t ctl_base = 0;
        if (plog->nsegs > 0)
            ctl_base = active_seg(plog)->ctl_base + active_seg(plog)->nctl;
        bool last = i + 1 == n;
        bool recorded = last && dmg.found && !dmg.damaged && dmg.base == bases[i] &&
                        dmg.end == TN_PLOG_DAMAGE_ACTIVE;
        rc = recover_segment(plog, bases[i], last ? 0 : bases[i + 1], last, recorded, ctl_base,
                             may_ctl, &seg);
        if (rc != 0)
            break;
        if (seg == NULL)
            continue; /* an empty leftover, removed */
        if (plog->nsegs > 0)
            seg->ctl_base = ctl_base; /* a sidecar's own figure agrees, or the sum wins */
        if (i + 2 < n)
            tn_seg_ctl_unlist(seg); /* a rebuilt sidecar's scan listed it */
        if (plog->nsegs > 0) {
            tn_seg_t *prev = active_seg(plog);
            uint64_t end = prev->base + prev->count;
            if (seg->base < end) {
                set_sticky(plog, TN_ECORRUPT,
                           "segment %" PRIu64 " overlaps the previous segment ending at %" PRIu64,
                           seg->base, end);
            } else if (seg->base > end) {
                TN_LOG(TN_LOG_NOTICE, "partition %s/%u: offsets %" PRIu64 "..%" PRIu64 " absent",
                       plog->topic, plog->partition, end, seg->base - 1);
            }
        }
        rc = push_seg(plog, seg);
        if (rc != 0)
            tn_seg_unref(seg);
        if (atomic_load(&plog->err) != 0)
            break; /* isolated: what follows is not looked at */
    }
    tn_free(bases);
    if (rc != 0)
        return rc;
    rc = recover_floor(plog);
    if (rc == 0)
        rc = apply_damage(plog, &dmg);
    if (rc != 0)
        return rc;
    if (atomic_load(&plog->err) == 0 && (rc = count_floor_ctl(plog)) != 0)
        return rc;
    tn_seg_t *act = active_seg(plog);
    plog->next_offset = act->base + act->count;
    plog->last_publish_ns = act->last_ns;
    atomic_store(&plog->written_next, plog->next_offset);
    atomic_store(&plog->durable_next, plog->next_offset);
    return 0;
}

/* The lowest offset the log still holds (lock held). */
static uint64_t first_offset_locked(const tn_plog_t *plog)
{
    uint64_t first = plog->nsegs ? plog->segs[0]->base : 0;
    return TN_MAX(first, plog->floor);
}

/* Load the epochs file, when there is one, and repair what a crash
 * between a log change and the file's save left (epochs.h): entries at or
 * past the log end, or wholly below its start, go. A damaged file isolates
 * the log (returns 0); an I/O error fails the open. */
static int recover_epochs(tn_plog_t *plog)
{
    int rc = tn_epochs_load(&plog->epochs, plog->dir); /* none: empty */
    if (rc == TN_ECORRUPT || rc == TN_EFORMAT) {
        plog->epochs_bad = rc == TN_ECORRUPT;
        set_sticky(plog, rc, "%s", plog->epochs.errmsg);
        tn_epochs_fini(&plog->epochs);
        tn_epochs_init(&plog->epochs);
        return 0;
    }
    if (rc != 0)
        return rc;
    if (plog->epochs.n == 0) {
        /* Factor 1, nothing replicated yet, or a copy whose records all
         * precede its leader's first epoch (an empty file: raw_prepare). */
        char path[4096];
        plog->epochs_used =
            tn_io_path(path, sizeof(path), "%s/%s", plog->dir, TN_EPOCHS_FILE) == 0 &&
            access(path, F_OK) == 0;
        return 0;
    }
    plog->epochs_used = true;
    uint64_t end = atomic_load(&plog->written_next);
    bool changed = tn_epochs_truncate_from_end(&plog->epochs, end);
    changed |= tn_epochs_truncate_from_start(&plog->epochs, first_offset_locked(plog));
    if (changed) {
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: epochs repaired to the log [%" PRIu64 ", %" PRIu64 ")",
               plog->topic, plog->partition, first_offset_locked(plog), end);
        rc = tn_epochs_save(&plog->epochs, plog->dir);
    }
    return rc;
}

/* An isolated log's epochs file, loaded as it is (nothing repaired or
 * written: the log's end is not known past the damage), for the repair
 * of a damaged active segment (tn_plog_damage_prefix_epoch). A file that
 * cannot be read leaves the history empty; a damaged one beside damage in
 * the active segment (every segment recovered: the isolation came from
 * the last one, or from the damage record after them) is rebuilt first
 * (tn_plog_epochs_damaged), from the records below that segment. */
static void load_epochs_isolated(tn_plog_t *plog)
{
    int rc = tn_epochs_load(&plog->epochs, plog->dir);
    if (rc != 0) {
        uint64_t base, end;
        plog->epochs_bad =
            rc == TN_ECORRUPT && tn_plog_damage(plog, &base, &end) && end == TN_PLOG_DAMAGE_ACTIVE;
        tn_epochs_fini(&plog->epochs);
        tn_epochs_init(&plog->epochs);
    }
    plog->epochs_used = plog->epochs.n > 0;
}

/* The epochs at open: repaired to the recovered log, or, isolated, as
 * the file holds them. */
static int open_epochs(tn_plog_t *plog)
{
    if (atomic_load(&plog->err) == 0)
        return recover_epochs(plog);
    load_epochs_isolated(plog);
    return 0;
}

static void progress_done(tn__sreq_t *s);

static void plog_free(tn_plog_t *plog)
{
    if (plog->mem)
        tn__memlog_free(plog);
    tn_epochs_fini(&plog->epochs);
    for (uint32_t i = 0; i < plog->nsegs; i++)
        tn_seg_unref(plog->segs[i]);
    tn_free(plog->segs);
    uv_mutex_destroy(&plog->dmg_lock);
    uv_mutex_destroy(&plog->lock);
    tn_free(plog->dir);
    tn_free(plog->topic);
    tn_free(plog);
}

/* A log object with nothing open yet: 0 or an error (nothing to free). */
static int plog_new(tn_store_t *store, const char *topic, uint32_t partition, tn_plog_t **out)
{
    tn_plog_t *plog = tn_calloc(1, sizeof(*plog));
    if (plog == NULL)
        return UV_ENOMEM;
    plog->store = store;
    plog->partition = partition;
    plog->progress_req.done = progress_done;
    atomic_init(&plog->durability, store->opts.durability);
    atomic_init(&plog->gated, false);
    atomic_init(&plog->hw, 0);
    tn_epochs_init(&plog->epochs);
    int rc = uv_mutex_init(&plog->lock);
    if (rc != 0) {
        tn_free(plog);
        return rc;
    }
    if ((rc = uv_mutex_init(&plog->dmg_lock)) != 0) {
        uv_mutex_destroy(&plog->lock);
        tn_free(plog);
        return rc;
    }
    plog->topic = tn_strdup(topic);
    if (plog->topic == NULL) {
        plog_free(plog);
        return UV_ENOMEM;
    }
    *out = plog;
    return 0;
}

/* On the store's list of open logs, which it closes with itself. */
static void track_open(tn_plog_t *plog)
{
    tn_store_t *store = plog->store;
    uv_mutex_lock(&store->open_lock);
    plog->next_open = store->plogs;
    if (store->plogs != NULL)
        store->plogs->prev_open = plog;
    store->plogs = plog;
    uv_mutex_unlock(&store->open_lock);
}

int tn_plog_open(tn_store_t *store, const char *topic, uint32_t partition, tn_plog_t **out)
{
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    tn_plog_t *plog;
    int rc = plog_new(store, topic, partition, &plog);
    if (rc != 0)
        return rc;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/%s/%" PRIu32, store->topics_path, topic, partition);
    plog->dir = tn_strdup(dir);
    if (plog->dir == NULL) {
        rc = UV_ENOMEM;
        goto fail;
    }
    rc = tn_io_mkdir_p(dir, 0755);
    if (rc != 0)
        goto fail;
    rc = recover(plog);
    if (rc == 0)
        rc = open_epochs(plog);
    if (rc != 0)
        goto fail;
    track_open(plog);
    *out = plog;
    return 0;
fail:
    plog_free(plog);
    return rc;
}

int tn_plog_open_memory(tn_store_t *store, const char *topic, uint32_t partition,
                        uint32_t max_records, uint64_t max_bytes, tn_plog_t **out)
{
    tn_plog_t *plog;
    int rc = plog_new(store, topic, partition, &plog);
    if (rc != 0)
        return rc;
    plog->mem = true;
    plog->mem_max_records = max_records;
    plog->mem_max_bytes = max_bytes;
    track_open(plog);
    *out = plog;
    return 0;
}

/* --- appends ------------------------------------------------------------- */

/* Whether a completed append must wait for the hw (loop thread). */
static bool gate_holds(tn_plog_t *plog, const tn_append_t *req)
{
    if (!atomic_load(&plog->gated) || req->kind == 1 || req->s.status != 0)
        return false;
    uint64_t last = req->first_offset + req->nrecs - 1;
    return last >= atomic_load(&plog->hw);
}

static void append_done(tn__sreq_t *s)
{
    tn_append_t *req = (tn_append_t *)s;
    tn_plog_t *plog = req->plog;
    tn__store_append_back(plog->store);
    if (req->hdrs != req->hdr_inline)
        tn_free(req->hdrs);
    req->hdrs = NULL;
    tn_free(req->raw);
    req->raw = NULL;
    tn_free(req->repochs);
    req->repochs = NULL;
    bool hold = gate_holds(plog, req) || (req->kind != 1 && s->status == 0 && plog->ghead != NULL);
    if (hold && (plog->closing || plog->gshut != 0)) {
        /* never committed: the hw will not move */
        req->cb(req, plog->closing ? TN_ECLOSED : plog->gshut);
        return;
    }
    if (hold) {
        /* Wait for the hw, behind the appends already waiting. */
        req->gnext = NULL;
        if (plog->gtail != NULL)
            plog->gtail->gnext = req;
        else
            plog->ghead = req;
        plog->gtail = req;
        return;
    }
    req->cb(req, s->status);
}

/* Fill an append request's common fields and submit it. */
static void submit_append(tn_plog_t *plog, tn_append_t *req, uint64_t bytes, tn_append_cb cb)
{
    req->s.next = NULL;
    req->s.bytes = bytes;
    req->s.status = 0;
    req->s.exec = NULL;
    req->s.done = append_done;
    req->plog = plog;
    req->cb = cb;
    req->pnext = NULL;
    req->gnext = NULL;
    req->first_offset = 0;
    req->publish_ns = 0;
    tn__store_append_out(plog->store);
    if (req->kind == 1) /* a follower's copy: the leader's hw waits for its fsync */
        tn__committer_submit_urgent(&plog->store->logc, &req->s);
    else
        tn__committer_submit(&plog->store->logc, &req->s);
}

/* What refuses any write at once. */
static int write_refused(tn_plog_t *plog)
{
    if (plog->closing)
        return TN_ECLOSED;
    int err = atomic_load(&plog->err);
    if (err != 0)
        return err;
    if (!plog->mem && tn_store_disk_high(plog->store))
        return TN_EDISKHIGH;
    return 0;
}

int tn_plog_append(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                   tn_append_cb cb)
{
    return tn_plog_append_ex(plog, req, recs, n, 0, cb);
}

int tn_plog_append_ex(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                      uint32_t ncontrol, tn_append_cb cb)
{
    if (n == 0 || recs == NULL || cb == NULL || ncontrol > n)
        return UV_EINVAL;
    if (plog->closing)
        return TN_ECLOSED;
    int err = atomic_load(&plog->err);
    if (err != 0)
        return err;
    if (plog->mem) {
        if (ncontrol > 0)
            return UV_EINVAL;
        return tn__memlog_append(plog, req, recs, n, cb);
    }
    if (tn_store_disk_high(plog->store))
        return TN_EDISKHIGH;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (recs[i].body.len > plog->store->opts.max_body || recs[i].key.len > UINT16_MAX)
            return TN_ETOOBIG;
        if (i < ncontrol && recs[i].body.len == 0)
            return UV_EINVAL;
        bytes += TN_REC_HDR + recs[i].key.len + recs[i].body.len;
    }
    if (n == 1) {
        req->hdrs = req->hdr_inline;
    } else {
        req->hdrs = tn_malloc((size_t)n * TN_REC_HDR);
        if (req->hdrs == NULL)
            return UV_ENOMEM;
    }
    req->kind = 0;
    req->ncontrol = ncontrol;
    req->raw = NULL;
    req->repochs = NULL;
    req->recs = recs;
    req->nrecs = n;
    submit_append(plog, req, bytes, cb);
    return 0;
}

int tn_plog_begin_epoch(tn_plog_t *pl, tn_append_t *req, uint32_t epoch, tn_append_cb cb)
{
    if (epoch == 0 || epoch == TN_EPOCHS_UNDEFINED || pl->mem || cb == NULL)
        return UV_EINVAL;
    int rc = write_refused(pl);
    if (rc != 0)
        return rc;
    tn_ctrl_encode_epoch(req->ctrl_body, epoch);
    req->ctrl_rec = (tn_rec_in_t){
        .key = tn_iov(NULL, 0),
        .body = tn_iov(req->ctrl_body, TN_CTRL_EPOCH_START_SIZE),
        .deliver_at_ms = 0,
    };
    req->hdrs = req->hdr_inline;
    req->kind = 2;
    req->ncontrol = 1;
    req->epoch = epoch;
    req->raw = NULL;
    req->repochs = NULL;
    req->recs = &req->ctrl_rec;
    req->nrecs = 1;
    submit_append(pl, req, TN_REC_HDR + TN_CTRL_EPOCH_START_SIZE, cb);
    return 0;
}

/* Whether epochs[0..n) can describe the records [base, base + count)
 * that arrived with them: increasing epochs and starts, each a real epoch,
 * each starting at one of those records. */
static bool epochs_fit(const tn_epoch_entry_t *epochs, uint32_t n, uint64_t base, uint32_t count)
{
    for (uint32_t i = 0; i < n; i++) {
        bool ordered = i == 0 || (epochs[i].epoch > epochs[i - 1].epoch &&
                                  epochs[i].start > epochs[i - 1].start);
        if (!ordered || epochs[i].epoch == 0 || epochs[i].epoch == TN_EPOCHS_UNDEFINED ||
            epochs[i].start < base || epochs[i].start >= base + count)
            return false;
    }
    return true;
}

int tn_plog_append_raw(tn_plog_t *pl, tn_append_t *req, const void *bytes, size_t len,
                       uint64_t first_offset, const tn_epoch_entry_t *epochs, uint32_t nepochs,
                       tn_append_cb cb)
{
    if (len == 0 || bytes == NULL || pl->mem || cb == NULL || (nepochs > 0 && epochs == NULL) ||
        first_offset > INT64_MAX)
        return UV_EINVAL;
    int rc = write_refused(pl);
    if (rc != 0)
        return rc;
    uint32_t n;
    rc = tn_rec_check_run(bytes, len, first_offset, &n);
    if (rc != 0)
        return rc;
    if (!epochs_fit(epochs, nepochs, first_offset, n))
        return TN_ECORRUPT;
    req->raw = tn_malloc(len);
    req->repochs = nepochs ? tn_malloc(nepochs * sizeof(*epochs)) : NULL;
    if (req->raw == NULL || (nepochs > 0 && req->repochs == NULL)) {
        tn_free(req->raw);
        tn_free(req->repochs);
        req->raw = NULL;
        req->repochs = NULL;
        return UV_ENOMEM;
    }
    memcpy(req->raw, bytes, len);
    if (nepochs > 0)
        memcpy(req->repochs, epochs, nepochs * sizeof(*epochs));
    req->nrepochs = nepochs;
    req->raw_len = len;
    req->raw_first = first_offset;
    req->kind = 1;
    req->ncontrol = 0;
    req->recs = NULL;
    req->nrecs = n;
    req->hdrs = NULL;
    submit_append(pl, req, len, cb);
    return 0;
}

static int scratch_reserve(tn__committer_t *c, size_t niov, size_t nnotes)
{
    log_scratch_t *ls = c->scratch;
    if (niov > ls->iov_cap) {
        size_t cap = TN_MAX(niov, ls->iov_cap * 2);
        tn_iov_t *p = tn_realloc(ls->iov, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        ls->iov = p;
        ls->iov_cap = cap;
    }
    if (nnotes > ls->notes_cap) {
        size_t cap = TN_MAX(nnotes, ls->notes_cap * 2);
        note_t *p = tn_realloc(ls->notes, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        ls->notes = p;
        ls->notes_cap = cap;
    }
    return 0;
}

/* Zeroed space kept written ahead of the active segment's records. An
 * fdatasync of records written into it changes no file size, so the file
 * system skips the journal commit an append needs (ext4 on this project's
 * test machine: ~100 us per small write + fdatasync instead of ~175 us).
 * The price is one extra write of each byte, once per ZERO_AHEAD. Recovery
 * trims a zero tail; sealing and closing truncate it. */
#define ZERO_AHEAD (1024 * 1024)

/* Make sure the file extends with zeros past wend (the end of the records
 * about to be written), up to the segment size limit. A failure (a full
 * disk) only costs the speed-up: the file is cut back and appends go on. */
static int zero_ahead(tn_plog_t *plog, tn_seg_t *seg, uint64_t wend)
{
    if (wend <= seg->alloc || plog->no_zeros)
        return 0;
    uint64_t limit = plog->store->opts.segment_bytes;
    uint64_t target = TN_MIN(wend + ZERO_AHEAD, TN_MAX(limit, wend));
    int rc = tn_io_write_zeros(seg->fd, wend, target);
    if (rc == 0) {
        seg->alloc = target;
        return 0;
    }
    TN_LOG(TN_LOG_WARN, "partition %s/%u: cannot zero space ahead of segment %" PRIu64 ": %s",
           plog->topic, plog->partition, seg->base, tn_strerror(rc));
    plog->no_zeros = true;
    rc = tn_io_ftruncate(seg->fd, seg->size);
    seg->alloc = seg->size;
    return rc;
}

/* Cut the zeroed space off the end of a segment that takes no more
 * records. The cut need not be durable: recovery trims a zero tail. */
static int trim_zeros(tn_seg_t *seg)
{
    if (seg->alloc <= seg->size)
        return 0;
    int rc = tn_io_ftruncate(seg->fd, seg->size);
    if (rc == 0)
        seg->alloc = seg->size;
    return rc;
}

/* Write the gathered iovs at wstart and publish the new records. */
static int flush(tn_plog_t *plog, tn_seg_t *seg, uint64_t wstart, uint64_t wend,
                 const tn_iov_t *iov, size_t niov, const note_t *notes, size_t nnotes)
{
    if (niov == 0)
        return 0;
    /* Records land where the segment ends, with the next offsets in order. */
    TN_ASSERT(wstart == seg->size && nnotes > 0);
    TN_ASSERT(notes[0].offset == seg->base + seg->count);
    int rc = zero_ahead(plog, seg, wend);
    if (rc == 0)
        rc = tn_io_pwritev(seg->fd, iov, (int)niov, wstart);
    if (rc != 0)
        return rc;
    uint32_t interval = plog->store->opts.index_interval;
    uv_mutex_lock(&plog->lock);
    for (size_t i = 0; i < nnotes; i++) {
        /* A missing index entry only lengthens a later read's scan. */
        (void)tn_seg_index_note(seg, notes[i].offset, notes[i].pos, interval);
        /* Out of memory for the list: unlisted, still counted. */
        if (notes[i].control)
            (void)tn_seg_ctl_note(seg, notes[i].offset);
    }
    /* The segment's first and newest publish times are its records' (the
     * sidecar index and a recovery's scan say the same): a copy's are the
     * leader's, not the time of the round that wrote it. */
    if (seg->count == 0)
        seg->first_ns = notes[0].publish_ns;
    for (size_t i = 0; i < nnotes; i++)
        seg->last_ns = TN_MAX(seg->last_ns, notes[i].publish_ns);
    seg->count += nnotes;
    seg->size = wend;
    uv_mutex_unlock(&plog->lock);
    atomic_store(&plog->written_next, notes[nnotes - 1].offset + 1);
    return 0;
}

static void advance_durable(tn_plog_t *plog, uint64_t next)
{
    /* Nothing is durable that was not written. */
    TN_ASSERT(next <= atomic_load(&plog->written_next));
    if (next > atomic_load(&plog->durable_next))
        atomic_store(&plog->durable_next, next);
}

/* fdatasync the active segment and write its sidecar: it is sealed once
 * the next segment exists. A sidecar that cannot be written for space is
 * not sticky (roll_failed): the segment stays the active one, whose
 * sidecar nothing reads (recovery scans the last segment; a stale one
 * left by a roll that failed later is replaced by the next seal). */
/* A roll's file that could not be made for space, or for want of a
 * descriptor (EMFILE, ENFILE: the descriptor gate's reserve spent by
 * something else): nothing was made, so the roll fails alone
 * (roll_failed) and the next round tries again. */
static bool roll_refusable(int rc)
{
    return tn_io_nospace(rc) || rc == UV_EMFILE || rc == UV_ENFILE;
}

static int seal_active(tn_plog_t *plog)
{
    tn_seg_t *old = active_seg(plog);
    int rc = trim_zeros(old);
    if (rc == 0)
        rc = tn_io_fdatasync(old->fd);
    if (rc != 0) {
        set_sticky(plog, rc, "fdatasync of segment %" PRIu64 " before sealing", old->base);
        return rc;
    }
    old->synced = old->size;
    advance_durable(plog, old->base + old->count);
    rc = tn_seg_index_write(old, plog->dir);
    if (rc != 0 && !roll_refusable(rc))
        set_sticky(plog, rc, "writing the index of segment %" PRIu64, old->base);
    return rc;
}

/* Create the segment at base and make it the active one. A create
 * refused for space or a descriptor is not sticky (roll_failed). */
static int start_segment(tn_plog_t *plog, uint64_t base)
{
    tn_seg_t *seg;
    int rc = create_segment(plog, base, &seg);
    if (rc != 0) {
        if (!roll_refusable(rc))
            set_sticky(plog, rc, "creating segment %" PRIu64, base);
        return rc;
    }
    plog->no_zeros = false;
    uv_mutex_lock(&plog->lock);
    tn_seg_t *prev = active_seg(plog);
    prev->sealed = true;
    seg->ctl_base = prev->ctl_base + prev->nctl;
    rc = push_seg(plog, seg);
    if (rc == 0 && plog->nsegs >= 3)
        tn_seg_ctl_unlist(plog->segs[plog->nsegs - 3]);
    uv_mutex_unlock(&plog->lock);
    if (rc != 0) {
        tn_seg_unref(seg);
        set_sticky(plog, rc, "adding segment %" PRIu64, base);
    }
    return rc;
}

/* Seal the active segment and start a new one at next_offset. */
static int roll(tn_plog_t *plog)
{
    int rc = seal_active(plog);
    return rc != 0 ? rc : start_segment(plog, plog->next_offset);
}

/* Note that a roll found the disk full (rc; the log is not failed): the
 * round's requests from the one that needed the new segment on fail with
 * rc, and the next round that needs it rolls again. The crash outcomes
 * are a normal roll's: the old segment, synced, is the last one (a
 * sidecar of it is ignored), or the empty new one follows it with its
 * sidecar in place. */
static void roll_failed(tn_plog_t *plog, int rc)
{
    atomic_store(&plog->nospace, rc);
    TN_LOG_RL(TN_LOG_ERROR, 60000,
              "partition %s/%u: starting a segment after %" PRIu64 ": %s; publishes to it fail "
              "until %s",
              plog->topic, plog->partition, active_seg(plog)->base, tn_strerror(rc),
              tn_io_nospace(rc) ? "space is freed" : "a descriptor is free");
}

/* Fail every request from `from` to the end of the log's round chain
 * that has not failed already. */
static void fail_from(tn_append_t *from, int err)
{
    for (tn_append_t *r = from; r != NULL; r = r->pnext) {
        if (r->s.status == 0)
            r->s.status = err;
    }
}

/* A flush of the requests from group to end (exclusive; NULL: the chain's
 * end) into seg failed with rc: they all fail with it, and so do the
 * requests after them. A full disk (ENOSPC, EDQUOT) leaves the log as it
 * was when those requests are publishes, a follower's copies of its
 * leader's records, or a new leader's epoch start that is the flush's
 * first record: the bytes past the segment's end are cut off, the offsets
 * given back, and the next round tries again, so writes resume once space
 * is freed (a follower fetches the same records again). The epochs a copy
 * assigned stay, at the log end with no record (as between a save and the
 * records it covers); the copy fetched again assigns them again. So does
 * the epoch of such a start, and begin_epoch may ask for that epoch again
 * (epoch_unwritten). An epoch start after other records of the flush
 * (its epoch would begin past the log end the cut leaves), anything
 * else, or a cut that fails, is sticky. The cut is fdatasync'ed before
 * the requests are answered: a full disk's short write may have put
 * whole records in the file, and a crash that kept them (their cut lost
 * with the page cache) would bring back publishes answered with the
 * error, past records later written over their first bytes. */
static void flush_failed(tn_plog_t *plog, tn_seg_t *seg, tn_append_t *group, tn_append_t *end,
                         int rc)
{
    bool plain = tn_io_nospace(rc);
    uint32_t unwritten = 0;
    for (tn_append_t *r = group; plain && r != end; r = r->pnext) {
        if (r->kind != 2 || r->s.status != 0)
            continue;
        /* Its epoch then begins where the cut leaves the log end. */
        plain = r->first_offset == seg->base + seg->count;
        unwritten = r->epoch;
    }
    int cut = plain ? tn_io_cut_back(seg->fd, seg->size) : 0;
    if (plain && cut == 0) {
        if (unwritten != 0)
            plog->epoch_unwritten = unwritten;
        seg->alloc = seg->size;
        plog->next_offset = seg->base + seg->count;
        atomic_store(&plog->nospace, rc);
        TN_LOG_RL(TN_LOG_ERROR, 60000,
                  "partition %s/%u: writing segment %" PRIu64
                  ": %s; publishes to it fail until space is freed",
                  plog->topic, plog->partition, seg->base, tn_strerror(rc));
    } else {
        set_sticky(plog, cut != 0 ? cut : rc, "%s segment %" PRIu64,
                   cut != 0 ? "cutting back after a full disk" : "writing", seg->base);
    }
    fail_from(group, rc);
}

/* Save the epochs file after a change (committer thread). The history is
 * only changed on this thread, so reading it without the lock is safe.
 * The log is a replica's (epochs_used) once the file is on disk, not
 * before: tn_plog_is_replica lets a follower take channel state into the
 * copy (cluster/replica.h, tn_replica_copy_ready), which a crash would
 * otherwise leave beside a log that opens as a factor-1 one and is skipped
 * forward (queue/channel.c, check_lost_tail); a save that fails leaves it
 * unmarked (and the log failed). */
static int save_failed(tn_plog_t *plog, int rc)
{
    set_sticky(plog, rc, "saving the epochs file: %s", plog->epochs.errmsg);
    return rc;
}

static int save_done(tn_plog_t *plog)
{
    uv_mutex_lock(&plog->lock); /* tn_plog_is_replica reads it on any thread */
    plog->epochs_used = true;
    uv_mutex_unlock(&plog->lock);
    return 0;
}

static int save_epochs(tn_plog_t *plog)
{
    int rc = tn_epochs_save(&plog->epochs, plog->dir);
    return rc != 0 ? save_failed(plog, rc) : save_done(plog);
}

/* Save the epochs file after assignments that changed the history from
 * n0 entries, the last of them last0 before. A full disk fails the
 * request alone, the assignments taken back (the file on disk is the
 * one before them; the request asked again assigns them again). */
static int save_assigned(tn_plog_t *plog, uint32_t n0, tn_epoch_entry_t last0)
{
    int rc = tn_epochs_save(&plog->epochs, plog->dir);
    if (tn_io_nospace(rc)) {
        uv_mutex_lock(&plog->lock);
        plog->epochs.n = n0;
        if (n0 > 0)
            plog->epochs.entries[n0 - 1] = last0;
        uv_mutex_unlock(&plog->lock);
        return rc;
    }
    return rc != 0 ? save_failed(plog, rc) : save_done(plog);
}

/* tn_plog_begin_epoch: record the epoch at the log end, durably, before
 * its EPOCH_START record is written. An epoch that began here before is
 * refused (TN_ERANGE), but for the one whose start record this process
 * could not write for space (epoch_unwritten): no record of its start
 * exists, and what this log took since (the engine's publishes, gated)
 * it took as that epoch's leader, so its start record goes at the log
 * end now. */
static int epoch_prepare(tn_plog_t *plog, tn_append_t *r)
{
    bool changed = false;
    uv_mutex_lock(&plog->lock);
    uint32_t latest = tn_epochs_latest(&plog->epochs);
    uint32_t n0 = plog->epochs.n;
    tn_epoch_entry_t last0 = n0 > 0 ? plog->epochs.entries[n0 - 1] : (tn_epoch_entry_t){0, 0};
    int rc = 0;
    if (latest != TN_EPOCHS_UNDEFINED && r->epoch == latest && r->epoch == plog->epoch_unwritten &&
        last0.start <= plog->next_offset)
        rc = 0; /* assigned already; what was written since is this leader's */
    else if (latest != TN_EPOCHS_UNDEFINED && r->epoch <= latest)
        rc = TN_ERANGE;
    else
        rc = tn_epochs_assign(&plog->epochs, r->epoch, plog->next_offset, &changed);
    uv_mutex_unlock(&plog->lock);
    if (rc != 0)
        return rc;
    plog->epoch_unwritten = 0;
    return changed || !plog->epochs_used ? save_assigned(plog, n0, last0) : 0;
}

/* tn_plog_append_raw: the offsets must continue the log; the batch's
 * epochs are recorded, durably, before its records are written. A copy's
 * first records write the epochs file even when they carry no epoch (a
 * factor-1 partition's records below its first epoch, copied by its
 * move), so the log is known for a replica's at its next open
 * (tn_plog_is_replica). */
static int raw_prepare(tn_plog_t *plog, tn_append_t *r)
{
    if (r->raw_first != plog->next_offset)
        return TN_ERANGE;
    bool changed = false;
    int rc = 0;
    uv_mutex_lock(&plog->lock);
    /* What the assignments below can change: the last entry, and entries
     * appended after it. */
    uint32_t n0 = plog->epochs.n;
    tn_epoch_entry_t last0 = n0 > 0 ? plog->epochs.entries[n0 - 1] : (tn_epoch_entry_t){0, 0};
    if (r->nrepochs > 0 && plog->epochs.n > 0) {
        /* Checked first so that a refusal changes nothing. */
        const tn_epoch_entry_t *last = &plog->epochs.entries[plog->epochs.n - 1];
        const tn_epoch_entry_t *e = &r->repochs[0];
        if (e->epoch < last->epoch || e->start < last->start)
            rc = TN_ERANGE;
    }
    for (uint32_t i = 0; i < r->nrepochs && rc == 0; i++) {
        bool ch = false;
        rc = tn_epochs_assign(&plog->epochs, r->repochs[i].epoch, r->repochs[i].start, &ch);
        changed |= ch;
    }
    uv_mutex_unlock(&plog->lock);
    if (rc != 0 && changed) {
        set_sticky(plog, rc, "recording the epochs of copied records");
        return rc;
    }
    if (rc != 0 || (!changed && plog->epochs_used))
        return rc;
    /* A full disk fails this copy alone: nothing of it is written. */
    return save_assigned(plog, n0, last0);
}

/* Write this round's appends of one log. */
static void write_log(tn__committer_t *c, tn_plog_t *plog, int64_t now_ns)
{
    log_scratch_t *ls = c->scratch;
    size_t niov_max = 0, nnotes_max = 0;
    for (tn_append_t *r = plog->rhead; r != NULL; r = r->pnext) {
        niov_max += 3 * (size_t)r->nrecs;
        nnotes_max += r->nrecs;
    }
    if (scratch_reserve(c, niov_max, nnotes_max) != 0) {
        fail_from(plog->rhead, UV_ENOMEM);
        return;
    }
    uint64_t seg_limit = plog->store->opts.segment_bytes;
    int64_t pub = TN_MAX(now_ns, plog->last_publish_ns);
    plog->last_publish_ns = pub;

    tn_seg_t *seg = active_seg(plog);
    uint64_t wstart = seg->size; /* where this flush's writes start */
    uint64_t pos = wstart;       /* where the next record goes */
    size_t niov = 0, nnotes = 0;
    tn_append_t *group = plog->rhead; /* first request not yet flushed */

    for (tn_append_t *r = plog->rhead; r != NULL; r = r->pnext) {
        /* Sticky errors can come from a reader thread too. Whatever is
         * not on disk yet fails with it: the unflushed group and the rest. */
        int err = atomic_load(&plog->err);
        if (err != 0) {
            fail_from(group, err);
            return;
        }
        if (pos > 0 && pos + r->s.bytes > seg_limit) {
            int rc = flush(plog, seg, wstart, pos, ls->iov, niov, ls->notes, nnotes);
            if (rc != 0) {
                flush_failed(plog, seg, group, r, rc);
                return;
            }
            if ((rc = roll(plog)) != 0) {
                if (atomic_load(&plog->err) == 0)
                    roll_failed(plog, rc);
                fail_from(r, atomic_load(&plog->err) != 0 ? atomic_load(&plog->err) : rc);
                return;
            }
            seg = active_seg(plog);
            wstart = pos = 0;
            niov = nnotes = 0;
            group = r;
        }
        if (r->kind != 0) {
            int rc = r->kind == 2 ? epoch_prepare(plog, r) : raw_prepare(plog, r);
            if (rc != 0) {
                if (atomic_load(&plog->err) != 0) {
                    fail_from(group, atomic_load(&plog->err));
                    return;
                }
                r->s.status = rc; /* this request only; nothing of it written */
                continue;
            }
        }
        r->first_offset = plog->next_offset;
        r->publish_ns = pub;
        if (r->kind == 1) {
            /* The leader's records, their segment-local sync_mark made ours. */
            uint32_t mark = (uint32_t)TN_MIN(seg->synced, (uint64_t)UINT32_MAX);
            size_t at = 0;
            for (uint32_t i = 0; i < r->nrecs; i++) {
                unsigned char *b = r->raw + at;
                tn_rec_set_sync_mark(b, mark); /* checked whole at submit */
                tn_rec_hdr_t h;
                (void)tn_rec_decode_hdr(b, r->raw_len - at, &h);
                if (h.publish_ns > plog->last_publish_ns)
                    plog->last_publish_ns = h.publish_ns;
                ls->notes[nnotes].offset = plog->next_offset++;
                ls->notes[nnotes].pos = pos + at;
                ls->notes[nnotes].publish_ns = h.publish_ns;
                ls->notes[nnotes].control = (h.flags & TN_REC_F_CONTROL) != 0;
                nnotes++;
                at += (size_t)tn_rec_size(&h);
            }
            ls->iov[niov++] = tn_iov(r->raw, r->raw_len);
            pos += r->raw_len;
            continue;
        }
        for (uint32_t i = 0; i < r->nrecs; i++) {
            const tn_rec_in_t *in = &r->recs[i];
            tn_rec_hdr_t h = {
                .offset = plog->next_offset++,
                .publish_ns = pub,
                .deliver_at_ms = in->deliver_at_ms,
                .body_len = (uint32_t)in->body.len,
                .sync_mark = (uint32_t)TN_MIN(seg->synced, (uint64_t)UINT32_MAX),
                .key_len = (uint16_t)in->key.len,
                .flags = (uint16_t)((i + 1 < r->nrecs ? TN_REC_F_MORE : 0) |
                                    (i < r->ncontrol ? TN_REC_F_CONTROL : 0)),
            };
            unsigned char *hdr = r->hdrs + (size_t)i * TN_REC_HDR;
            tn_rec_encode(hdr, &h, in->key.base, in->body.base);
            ls->iov[niov++] = tn_iov(hdr, TN_REC_HDR);
            if (in->key.len > 0)
                ls->iov[niov++] = in->key;
            if (in->body.len > 0)
                ls->iov[niov++] = in->body;
            ls->notes[nnotes].offset = h.offset;
            ls->notes[nnotes].pos = pos;
            ls->notes[nnotes].publish_ns = pub;
            ls->notes[nnotes].control = i < r->ncontrol;
            nnotes++;
            pos += tn_rec_size(&h);
        }
    }
    int err = atomic_load(&plog->err);
    int rc = err != 0 ? err : flush(plog, seg, wstart, pos, ls->iov, niov, ls->notes, nnotes);
    if (rc != 0) {
        if (err == 0)
            flush_failed(plog, seg, group, NULL, rc);
        else
            fail_from(group, rc);
    } else {
        atomic_store(&plog->nospace, 0);
    }
}

/* After the fdatasync of seg (rc its result, written the log end before
 * it): advance durable_next, or make the error sticky. */
static int synced(tn_plog_t *plog, tn_seg_t *seg, uint64_t written, int rc)
{
    if (rc != 0) {
        set_sticky(plog, rc, "fdatasync of segment %" PRIu64, seg->base);
        return rc;
    }
    seg->synced = seg->size;
    advance_durable(plog, written);
    plog->unsynced_msgs = 0;
    plog->unsynced_bytes = 0;
    plog->unsynced_since_ns = 0;
    return 0;
}

/* fdatasync the active segment and advance durable_next. */
static int sync_log(tn_plog_t *plog)
{
    if (atomic_load(&plog->err) != 0)
        return atomic_load(&plog->err);
    tn_seg_t *seg = active_seg(plog);
    uint64_t written = atomic_load(&plog->written_next);
    int64_t t0 = tn_now_mono_ns();
    int rc = tn_io_fdatasync(seg->fd);
    tn_hist_observe(&plog->store->fsync_hist, tn_now_mono_ns() - t0);
    return synced(plog, seg, written, rc);
}

/* sync_log for logs[0..n) (n <= TN_IO_SYNCS_MAX) at once; each result in
 * its round_rc. */
static void sync_batch(log_scratch_t *ls, tn_plog_t **logs, size_t n)
{
    tn_plog_t *go[TN_IO_SYNCS_MAX];
    tn_seg_t *segs[TN_IO_SYNCS_MAX];
    uint64_t written[TN_IO_SYNCS_MAX];
    int fds[TN_IO_SYNCS_MAX], rcs[TN_IO_SYNCS_MAX];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tn_plog_t *p = logs[i];
        p->round_synced = true;
        p->round_rc = atomic_load(&p->err);
        if (p->round_rc != 0)
            continue;
        go[k] = p;
        segs[k] = active_seg(p);
        written[k] = atomic_load(&p->written_next);
        fds[k] = segs[k]->fd;
        k++;
    }
    if (k == 0)
        return;
    int64_t t0 = tn_now_mono_ns();
    tn_io_fdatasync_many(&ls->syncs, fds, rcs, k);
    int64_t took = tn_now_mono_ns() - t0;
    for (size_t i = 0; i < k; i++) {
        tn_hist_observe(&go[i]->store->fsync_hist, took);
        go[i]->round_rc = synced(go[i], segs[i], written[i], rcs[i]);
    }
}

/* Step 4's fdatasyncs, before its completions: every durable-mode log
 * that wrote this round is synced at once (the kernel runs them in
 * parallel: a round holding a leader's partition and the copies it
 * follows for others pays one sync's wait, not one per log). */
static void sync_round(log_scratch_t *ls, tn_plog_t *logs)
{
    tn_plog_t *batch[TN_IO_SYNCS_MAX];
    size_t n = 0;
    for (tn_plog_t *p = logs; p != NULL; p = p->rnext) {
        p->round_synced = false;
        if (p->round_mode == TN_DURABILITY_RELAXED || p->round_msgs == 0)
            continue;
        batch[n++] = p;
        if (n == TN_IO_SYNCS_MAX) {
            sync_batch(ls, batch, n);
            n = 0;
        }
    }
    if (n > 1) {
        sync_batch(ls, batch, n);
    } else if (n == 1) {
        batch[0]->round_rc = sync_log(batch[0]);
        batch[0]->round_synced = true;
    }
}

static void queue_progress(tn_plog_t *plog, tn__sreq_t **head, tn__sreq_t **tail)
{
    if (plog->on_progress == NULL && !atomic_load(&plog->repl_watch))
        return;
    tn_store_t *store = plog->store;
    uv_mutex_lock(&store->done_lock);
    bool queued = plog->progress_queued;
    plog->progress_queued = true;
    uv_mutex_unlock(&store->done_lock);
    if (queued)
        return;
    plog->progress_req.next = NULL;
    if (*tail != NULL)
        (*tail)->next = &plog->progress_req;
    else
        *head = &plog->progress_req;
    *tail = &plog->progress_req;
}

static void chain_req(tn__sreq_t *s, tn__sreq_t **head, tn__sreq_t **tail)
{
    s->next = NULL;
    if (*tail != NULL)
        (*tail)->next = s;
    else
        *head = s;
    *tail = s;
}

static void relaxed_add(log_scratch_t *ls, tn_plog_t *plog, int64_t now_mono)
{
    if (plog->unsynced_since_ns == 0)
        plog->unsynced_since_ns = now_mono;
    if (!plog->in_relaxed) {
        plog->in_relaxed = true;
        plog->relaxed_next = ls->relaxed;
        ls->relaxed = plog;
    }
}

static void relaxed_remove(log_scratch_t *ls, tn_plog_t *plog)
{
    if (!plog->in_relaxed)
        return;
    for (tn_plog_t **p = &ls->relaxed; *p != NULL; p = &(*p)->relaxed_next) {
        if (*p == plog) {
            *p = plog->relaxed_next;
            break;
        }
    }
    plog->in_relaxed = false;
    plog->relaxed_next = NULL;
}

void tn__plog_round(tn__committer_t *c, tn__sreq_t *round)
{
    tn_store_t *store = c->store;
    /* The ingress log's appends share the round (ilog.c). */
    tn__sreq_t *ingress = tn__ilog_take(&round);
    if (c->scratch == NULL) {
        c->scratch = tn_calloc(1, sizeof(log_scratch_t));
        if (c->scratch == NULL) {
            for (tn__sreq_t *s = round; s != NULL; s = s->next)
                s->status = UV_ENOMEM;
            /* Control requests still run: they complete themselves. */
        }
    }
    log_scratch_t *ls = c->scratch;
    tn_plog_t *logs = NULL, *logs_tail = NULL;
    tn__sreq_t *controls = tn__round_split(&round);

    /* 1. Group appends by log. */
    for (tn__sreq_t *s = round; s != NULL; s = s->next) {
        tn_append_t *r = (tn_append_t *)s;
        tn_plog_t *plog = r->plog;
        if (!plog->in_round) {
            plog->in_round = true;
            plog->rhead = plog->rtail = NULL;
            plog->rnext = NULL;
            if (logs_tail != NULL)
                logs_tail->rnext = plog;
            else
                logs = plog;
            logs_tail = plog;
        }
        r->pnext = NULL;
        if (plog->rtail != NULL)
            plog->rtail->pnext = r;
        else
            plog->rhead = r;
        plog->rtail = r;
    }

    /* 2. Write. */
    int64_t now_ns = tn_now_wall_ns();
    if (ls != NULL) {
        for (tn_plog_t *p = logs; p != NULL; p = p->rnext)
            write_log(c, p, now_ns);
    }
    tn__ilog_write(c, ingress);

    /* Tally each log's round and fix its mode before any request goes
     * back: a request completed early belongs to the loop thread again
     * (and may be resubmitted at once), so nothing below may touch it. */
    for (tn_plog_t *p = logs; p != NULL; p = p->rnext) {
        p->round_mode = atomic_load(&p->durability);
        p->round_msgs = p->round_bytes = 0;
        for (tn_append_t *r = p->rhead; r != NULL; r = r->pnext) {
            if (r->s.status == 0) {
                p->round_msgs += r->nrecs;
                p->round_bytes += r->s.bytes;
            }
        }
    }

    /* 3. Complete what is acknowledged at write. */
    tn__sreq_t *head = NULL, *tail = NULL;
    for (tn_plog_t *p = logs; p != NULL; p = p->rnext) {
        if (p->round_mode == TN_DURABILITY_DURABLE) {
            /* The rest completes once synced (step 4), except a follower's
             * copies, which complete once written: the follower fetches
             * again at once, and its replica watch hears of the sync
             * (step 4), which it reports to the leader while that fetch
             * waits there, so the round trip and the sync overlap. A
             * leader's log (the hw gates it) tells its replica watch now as
             * well: followers may copy what is written before it is synced
             * (and the watch hears again once synced). */
            tn_append_t *keep = NULL, *keep_tail = NULL;
            for (tn_append_t *r = p->rhead, *rn; r != NULL; r = rn) {
                rn = r->pnext;
                if (r->kind == 1) {
                    chain_req(&r->s, &head, &tail);
                    continue;
                }
                r->pnext = NULL;
                if (keep_tail != NULL)
                    keep_tail->pnext = r;
                else
                    keep = r;
                keep_tail = r;
            }
            p->rhead = keep;
            p->rtail = keep_tail;
            if (p->round_msgs > 0 && atomic_load(&p->repl_watch) && atomic_load(&p->gated))
                queue_progress(p, &head, &tail);
            continue;
        }
        for (tn_append_t *r = p->rhead, *rn; r != NULL; r = rn) {
            rn = r->pnext;
            chain_req(&r->s, &head, &tail);
        }
        p->rhead = p->rtail = NULL;
        if (p->round_mode == TN_DURABILITY_RELAXED ||
            (p->round_msgs > 0 && atomic_load(&p->repl_watch)))
            queue_progress(p, &head, &tail);
    }
    if (head != NULL)
        tn__store_complete(store, head, tail);

    /* 4. Sync, then complete the rest. */
    head = tail = NULL;
    if (ls != NULL)
        sync_round(ls, logs);
    int64_t now_mono = tn_now_mono_ns();
    const tn_store_opts_t *o = &store->opts;
    for (tn_plog_t *p = logs, *next; p != NULL; p = next) {
        next = p->rnext;
        bool wrote = p->round_msgs > 0;
        if (p->round_mode == TN_DURABILITY_RELAXED) {
            if (wrote) {
                p->unsynced_msgs += p->round_msgs;
                p->unsynced_bytes += p->round_bytes;
                if (p->unsynced_msgs >= o->relaxed_sync_messages ||
                    p->unsynced_bytes >= o->relaxed_sync_bytes) {
                    sync_log(p);
                    if (ls != NULL)
                        relaxed_remove(ls, p);
                } else if (ls != NULL) {
                    relaxed_add(ls, p, now_mono);
                    tn__committer_wake_at(c, p->unsynced_since_ns + o->relaxed_sync_interval_ns);
                }
            }
        } else {
            int rc = p->round_synced ? p->round_rc : wrote ? sync_log(p) : 0;
            p->round_synced = false;
            /* Only durable-mode requests are still here. */
            for (tn_append_t *r = p->rhead; r != NULL; r = r->pnext) {
                if (r->s.status == 0)
                    r->s.status = rc;
            }
            for (tn_append_t *r = p->rhead, *rn; r != NULL; r = rn) {
                rn = r->pnext;
                chain_req(&r->s, &head, &tail);
            }
            if (wrote && ls != NULL)
                relaxed_remove(ls, p);
            queue_progress(p, &head, &tail);
        }
        p->in_round = false;
        p->rhead = p->rtail = NULL;
        p->rnext = NULL;
    }
    if (head != NULL)
        tn__store_complete(store, head, tail);
    tn__ilog_sync(c, ingress);

    /* 6. Control requests, in order. */
    tn__round_exec(c, controls);
}

void tn__plog_committer_fini(tn__committer_t *c)
{
    log_scratch_t *ls = c->scratch;
    if (ls == NULL)
        return;
    tn_free(ls->iov);
    tn_free(ls->notes);
    tn_io_syncs_fini(&ls->syncs);
    tn_free(ls);
    c->scratch = NULL;
}

int64_t tn__plog_tick(tn__committer_t *c, int64_t now_ns)
{
    tn_store_t *store = c->store;
    if (c->scratch == NULL) {
        c->scratch = tn_calloc(1, sizeof(log_scratch_t));
        if (c->scratch == NULL)
            return now_ns + store->opts.disk_check_interval_ns;
    }
    log_scratch_t *ls = c->scratch;
    int64_t next = 0;
    tn__sreq_t *head = NULL, *tail = NULL;
    for (tn_plog_t *p = ls->relaxed, *pn; p != NULL; p = pn) {
        pn = p->relaxed_next;
        int64_t due = p->unsynced_since_ns + store->opts.relaxed_sync_interval_ns;
        if (now_ns >= due) {
            sync_log(p);
            relaxed_remove(ls, p);
            queue_progress(p, &head, &tail);
        } else if (next == 0 || due < next) {
            next = due;
        }
    }
    if (head != NULL)
        tn__store_complete(store, head, tail);
    if (now_ns >= ls->next_disk_check_ns) {
        tn__disk_check(store);
        ls->next_disk_check_ns = now_ns + store->opts.disk_check_interval_ns;
    }
    if (next == 0 || ls->next_disk_check_ns < next)
        next = ls->next_disk_check_ns;
    return next;
}

/* --- reads ---------------------------------------------------------------- */

int tn_plog_read(tn_plog_t *plog, uint64_t offset, tn_buf_t *scratch, tn_rec_t *rec)
{
    int err = atomic_load(&plog->err);
    if (err != 0)
        return err;
    if (plog->mem)
        return tn__memlog_read(plog, offset, scratch, rec);
    if (offset >= atomic_load(&plog->written_next))
        return TN_ENOTFOUND;
    uv_mutex_lock(&plog->lock);
    if (offset < plog->floor) {
        uv_mutex_unlock(&plog->lock);
        return TN_ENOTFOUND;
    }
    uint32_t lo = segs_at_or_below(plog, offset);
    if (lo == 0) {
        uv_mutex_unlock(&plog->lock);
        return TN_ENOTFOUND;
    }
    tn_seg_t *seg = plog->segs[lo - 1];
    if (offset >= seg->base + seg->count) {
        uv_mutex_unlock(&plog->lock);
        return TN_EGAP;
    }
    if (!seg->idx_loaded) {
        int rc = tn_seg_index_load(seg);
        if (rc != 0) {
            TN_LOG_RL(TN_LOG_WARN, 10000, "partition %s/%u: index of segment %" PRIu64 ": %s",
                      plog->topic, plog->partition, seg->base, tn_strerror(rc));
        }
    }
    uint64_t start = seg->idx_loaded ? tn_seg_index_find(seg, offset) : 0;
    uint64_t limit = seg->size;
    tn_seg_ref(seg);
    uv_mutex_unlock(&plog->lock);
    int rc = tn_seg_read_at(seg, start, limit, offset, scratch, rec);
    tn_seg_unref(seg);
    if (rc != 0 && offset >= atomic_load(&plog->written_next))
        return TN_ENOTFOUND; /* truncated (tn_plog_truncate) while it was read */
    if (rc == TN_ECORRUPT)
        tn__plog_found_damage(plog, seg->base, "reading offset %" PRIu64 " of segment %" PRIu64,
                              offset, seg->base);
    return rc;
}

uint64_t tn_plog_bytes_from(tn_plog_t *plog, uint64_t offset)
{
    uv_mutex_lock(&plog->lock);
    uint64_t bytes = 0;
    if (plog->mem) {
        uint64_t next = atomic_load(&plog->written_next);
        uint64_t n = next > plog->mem_first ? next - plog->mem_first : 0;
        uint64_t past = offset <= plog->mem_first ? n : offset < next ? next - offset : 0;
        bytes = n > 0 ? (uint64_t)((double)plog->mem_bytes * (double)past / (double)n) : 0;
    }
    for (uint32_t i = plog->mem ? plog->nsegs : 0; i < plog->nsegs; i++) {
        const tn_seg_t *seg = plog->segs[i];
        if (offset <= seg->base) {
            bytes += seg->size;
        } else if (offset < seg->base + seg->count) {
            /* Inside seg: its sparse index (the position of an entry at
             * or below offset: a little over) or, not loaded, its
             * records' mean size. */
            uint64_t pos = seg->idx_loaded
                               ? tn_seg_index_find(seg, offset)
                               : (uint64_t)((double)seg->size * (double)(offset - seg->base) /
                                            (double)seg->count);
            bytes += pos < seg->size ? seg->size - pos : 0;
        }
    }
    uv_mutex_unlock(&plog->lock);
    return bytes;
}

uint64_t tn_plog_gap_end(tn_plog_t *plog, uint64_t offset)
{
    uint64_t next = atomic_load(&plog->written_next);
    if (plog->mem || offset >= next)
        return offset;
    uv_mutex_lock(&plog->lock);
    uint32_t lo = segs_at_or_below(plog, offset);
    uint64_t end = offset;
    if (offset >= plog->floor && lo > 0) {
        const tn_seg_t *seg = plog->segs[lo - 1];
        /* Past the segment's records: the gap runs to the next segment's
         * base (an advance starts one there), or to the log end. */
        if (offset >= seg->base + seg->count)
            end = lo < plog->nsegs ? plog->segs[lo]->base : next;
    }
    uv_mutex_unlock(&plog->lock);
    return end > offset ? end : offset;
}

uint64_t tn_plog_written_next(tn_plog_t *plog)
{
    return atomic_load(&plog->written_next);
}

uint64_t tn_plog_durable_next(tn_plog_t *plog)
{
    return atomic_load(&plog->durable_next);
}

uint64_t tn_plog_visible_next(tn_plog_t *plog)
{
    uint64_t v = atomic_load(&plog->durability) == TN_DURABILITY_RELAXED
                     ? atomic_load(&plog->written_next)
                     : atomic_load(&plog->durable_next);
    if (atomic_load(&plog->gated)) {
        uint64_t hw = atomic_load(&plog->hw);
        if (hw < v)
            v = hw;
    }
    return v;
}

int tn_plog_err(tn_plog_t *plog)
{
    return atomic_load(&plog->err);
}

int tn_plog_nospace(tn_plog_t *plog)
{
    return atomic_load(&plog->nospace);
}

void tn_plog_set_durability(tn_plog_t *plog, int mode)
{
    atomic_store(&plog->durability, mode);
}

void tn_plog_stats(tn_plog_t *plog, tn_plog_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    uv_mutex_lock(&plog->lock);
    out->segments = plog->nsegs;
    out->first_offset = plog->mem ? plog->mem_first : plog->nsegs ? plog->segs[0]->base : 0;
    if (out->first_offset < plog->floor)
        out->first_offset = plog->floor;
    out->bytes = plog->mem_bytes;
    for (uint32_t i = 0; i < plog->nsegs; i++)
        out->bytes += plog->segs[i]->size;
    /* written_next moves after the segment's count (flush): the counts
     * are taken below the written_next read here, under the same lock. */
    uint64_t wn = tn_plog_written_next(plog);
    out->controls = ctl_below_locked(plog, wn);
    uint64_t below_first = ctl_below_locked(plog, TN_MIN(out->first_offset, wn));
    out->stored_controls = out->controls - TN_MIN(out->controls, below_first);
    uv_mutex_unlock(&plog->lock);
    /* One moment's positions: those read after wn are capped by it. */
    out->written_next = wn; /* the end the control counts are taken at */
    out->durable_next = TN_MIN(tn_plog_durable_next(plog), wn);
    out->visible_next = TN_MIN(tn_plog_visible_next(plog), wn);
    out->unsynced_messages = out->written_next - out->durable_next;
    out->err = tn_plog_err(plog);
}

/* --- GC -------------------------------------------------------------------- */

static int save_epochs(tn_plog_t *plog);

/* Retention moved the log's start: the epochs history drops what lies
 * wholly below it and is saved (committer thread; a log without an
 * epochs file has nothing to do). */
static int epochs_follow_start(tn_plog_t *plog)
{
    if (!plog->epochs_used)
        return 0;
    uv_mutex_lock(&plog->lock);
    bool changed = tn_epochs_truncate_from_start(&plog->epochs, first_offset_locked(plog));
    uv_mutex_unlock(&plog->lock);
    return changed ? save_epochs(plog) : 0;
}

static uint32_t gc_plan_locked(tn_plog_t *plog, uint64_t below, int64_t older_than_ns)
{
    uint32_t n = 0;
    if (below < plog->floor)
        below = plog->floor;
    while (n + 1 < plog->nsegs) {
        tn_seg_t *s = plog->segs[n];
        bool settled = s->base + s->count <= below;
        bool old = older_than_ns != 0 && s->last_ns < older_than_ns;
        if (!s->sealed || !(settled || old))
            break;
        n++;
    }
    return n;
}

uint32_t tn_plog_gc_plan(tn_plog_t *plog, uint64_t below_offset, int64_t older_than_ns)
{
    uv_mutex_lock(&plog->lock);
    uint32_t n = gc_plan_locked(plog, below_offset, older_than_ns);
    uv_mutex_unlock(&plog->lock);
    return n;
}

uint64_t tn_plog_offset_after_ns(tn_plog_t *plog, int64_t ns)
{
    uv_mutex_lock(&plog->lock);
    uint64_t off = atomic_load(&plog->written_next);
    for (uint32_t i = 0; i < plog->nsegs; i++) {
        tn_seg_t *s = plog->segs[i];
        if (!s->sealed || s->last_ns >= ns) {
            off = s->base;
            break;
        }
    }
    uv_mutex_unlock(&plog->lock);
    return off;
}

static void gc_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_gc_t *req = (tn_plog_gc_t *)s;
    tn_plog_t *plog = req->plog;
    int rc = atomic_load(&plog->err);
    if (rc == 0) {
        uv_mutex_lock(&plog->lock);
        uint32_t n = gc_plan_locked(plog, req->below_offset, req->older_than_ns);
        tn_seg_t **victims = n ? tn_malloc(n * sizeof(*victims)) : NULL;
        if (n > 0 && victims == NULL) {
            rc = UV_ENOMEM;
            n = 0;
        }
        if (n > 0) {
            memcpy(victims, plog->segs, n * sizeof(*victims));
            memmove(plog->segs, plog->segs + n, (plog->nsegs - n) * sizeof(*plog->segs));
            plog->nsegs -= n;
        }
        uv_mutex_unlock(&plog->lock);
        for (uint32_t i = 0; i < n; i++) {
            tn_seg_t *seg = victims[i];
            char path[4096];
            seg_path(plog, seg->base, "idx", path, sizeof(path));
            int r1 = tn_io_unlink(path);
            int r2 = tn_io_unlink(seg->path);
            if (r1 != 0 && r1 != UV_ENOENT && rc == 0)
                rc = r1;
            if (r2 != 0 && rc == 0)
                rc = r2;
            req->deleted++;
            req->deleted_bytes += seg->size;
            tn_seg_unref(seg); /* readers still holding it keep the fd open */
        }
        tn_free(victims);
        if (n > 0) {
            int r = tn_io_fsync_dir(plog->dir);
            if (r != 0) {
                set_sticky(plog, r, "fsync of the directory after deleting segments");
                rc = r;
            }
        }
        if (n > 0 && rc == 0)
            rc = epochs_follow_start(plog);
    }
    s->status = rc;
    tn__store_complete(c->store, s, s);
}

static void gc_done(tn__sreq_t *s)
{
    tn_plog_gc_t *req = (tn_plog_gc_t *)s;
    req->cb(req, s->status);
}

int tn_plog_gc(tn_plog_t *plog, tn_plog_gc_t *req, uint64_t below_offset, int64_t older_than_ns,
               tn_plog_gc_cb cb)
{
    if (plog->closing)
        return TN_ECLOSED;
    memset(&req->s, 0, sizeof(req->s));
    req->s.exec = gc_exec;
    req->s.done = gc_done;
    req->plog = plog;
    req->below_offset = below_offset;
    req->older_than_ns = older_than_ns;
    req->cb = cb;
    req->deleted = 0;
    req->deleted_bytes = 0;
    tn__committer_submit(&plog->store->logc, &req->s);
    return 0;
}

/* --- advance ---------------------------------------------------------------- */

static void advance_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_advance_t *req = (tn_plog_advance_t *)s;
    tn_plog_t *plog = req->plog;
    int rc = atomic_load(&plog->err);
    if (rc == 0 && req->next > plog->next_offset) {
        tn_seg_t *old = active_seg(plog);
        bool empty = old->count == 0;
        if (!empty)
            rc = seal_active(plog);
        if (rc == 0)
            rc = start_segment(plog, req->next);
        if (rc != 0 && atomic_load(&plog->err) == 0) {
            /* Even for space (a roll's is not sticky): the log must not
             * take appends at the offsets it was asked to skip. */
            set_sticky(plog, rc, "starting segment %" PRIu64 " to advance", req->next);
        }
        if (rc == 0 && empty) {
            /* The empty segment goes; until its unlink is durable,
             * recovery removes it (empty, no sidecar, not last). */
            uv_mutex_lock(&plog->lock);
            memmove(&plog->segs[plog->nsegs - 2], &plog->segs[plog->nsegs - 1],
                    sizeof(*plog->segs));
            plog->nsegs--;
            uv_mutex_unlock(&plog->lock);
            int r = tn_io_unlink(old->path);
            if (r == 0)
                r = tn_io_fsync_dir(plog->dir);
            if (r != 0) {
                set_sticky(plog, r, "removing empty segment %" PRIu64, old->base);
                rc = r;
            }
            tn_seg_unref(old);
        }
        if (rc == 0) {
            plog->next_offset = req->next;
            atomic_store(&plog->written_next, req->next);
            advance_durable(plog, req->next);
            TN_LOG(TN_LOG_NOTICE, "partition %s/%u: advanced to offset %" PRIu64, plog->topic,
                   plog->partition, req->next);
        }
    }
    s->status = rc;
    tn__store_complete(c->store, s, s);
}

static void advance_done(tn__sreq_t *s)
{
    tn_plog_advance_t *req = (tn_plog_advance_t *)s;
    req->cb(req, s->status);
}

int tn_plog_advance(tn_plog_t *plog, tn_plog_advance_t *req, uint64_t next, tn_plog_advance_cb cb)
{
    if (plog->closing)
        return TN_ECLOSED;
    if (next > INT64_MAX || plog->mem)
        return UV_EINVAL;
    memset(&req->s, 0, sizeof(req->s));
    req->s.exec = advance_exec;
    req->s.done = advance_done;
    req->plog = plog;
    req->next = next;
    req->cb = cb;
    tn__committer_submit(&plog->store->logc, &req->s);
    return 0;
}

/* --- floor ------------------------------------------------------------------ */

/* Write the floor file and move the floor (committer thread). */
static int write_floor(tn_plog_t *plog, uint64_t floor)
{
    unsigned char b[8];
    tn_put_u64(b, floor);
    int rc = tn_io_write_record_file(plog->dir, FLOOR_FILE, FLOOR_MAGIC, b, sizeof(b));
    if (rc != 0) {
        set_sticky(plog, rc, "writing the floor file");
        return rc;
    }
    uv_mutex_lock(&plog->lock);
    plog->floor = floor;
    plog->floor_ctl_known = false; /* count_floor_ctl counts again */
    uv_mutex_unlock(&plog->lock);
    return 0;
}

static void floor_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_floor_t *req = (tn_plog_floor_t *)s;
    tn_plog_t *plog = req->plog;
    int rc = atomic_load(&plog->err);
    uint64_t below = TN_MIN(req->below, plog->next_offset);
    if (rc == 0 && below > plog->floor) {
        rc = write_floor(plog, below);
        if (rc == 0)
            rc = count_floor_ctl(plog);
        if (rc == 0)
            rc = epochs_follow_start(plog);
    }
    s->status = rc;
    tn__store_complete(c->store, s, s);
}

static void floor_done(tn__sreq_t *s)
{
    tn_plog_floor_t *req = (tn_plog_floor_t *)s;
    req->cb(req, s->status);
}

int tn_plog_drop_below(tn_plog_t *plog, tn_plog_floor_t *req, uint64_t below, tn_plog_floor_cb cb)
{
    if (plog->closing)
        return TN_ECLOSED;
    memset(&req->s, 0, sizeof(req->s));
    req->s.done = floor_done;
    req->plog = plog;
    req->below = below;
    req->cb = cb;
    if (plog->mem) {
        /* Nothing to make durable: drop them now, answer on a later turn. */
        tn_plog_mem_trim(plog, below);
        tn__store_complete(plog->store, &req->s, &req->s);
        return 0;
    }
    req->s.exec = floor_exec;
    tn__committer_submit(&plog->store->logc, &req->s);
    return 0;
}

/* --- close ------------------------------------------------------------------ */

static void close_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_t *plog = TN_CONTAINER_OF(s, tn_plog_t, close_req);
    if (c->scratch != NULL && plog->in_relaxed) {
        if (!plog->abandoned)
            sync_log(plog);
        relaxed_remove(c->scratch, plog);
    }
    if (!plog->abandoned && plog->nsegs > 0 && trim_zeros(active_seg(plog)) != 0)
        TN_LOG(TN_LOG_WARN, "partition %s/%u: cannot trim the zeroed tail of its last segment",
               plog->topic, plog->partition);
    tn__store_complete(c->store, s, s);
}

static void close_done(tn__sreq_t *s)
{
    tn_plog_t *plog = TN_CONTAINER_OF(s, tn_plog_t, close_req);
    tn_store_t *store = plog->store;
    uv_mutex_lock(&store->open_lock);
    if (plog->prev_open != NULL)
        plog->prev_open->next_open = plog->next_open;
    else
        store->plogs = plog->next_open;
    if (plog->next_open != NULL)
        plog->next_open->prev_open = plog->prev_open;
    uv_mutex_unlock(&store->open_lock);
    tn_plog_cb cb = plog->close_cb;
    if (cb != NULL)
        cb(plog);
    plog_free(plog);
    tn__store_closed_one(store);
}

static void progress_done(tn__sreq_t *s)
{
    tn_plog_t *plog = TN_CONTAINER_OF(s, tn_plog_t, progress_req);
    uv_mutex_lock(&plog->store->done_lock);
    plog->progress_queued = false;
    uv_mutex_unlock(&plog->store->done_lock);
    if (plog->on_progress != NULL && !plog->closing)
        plog->on_progress(plog);
    tn_store_t *store = plog->store;
    if (atomic_load(&plog->repl_watch) && store->repl_cb != NULL && !plog->closing)
        store->repl_cb(store->repl_arg, plog);
}

void tn_plog_set_repl_watch(tn_plog_t *pl, bool on)
{
    atomic_store(&pl->repl_watch, on);
}

static void close_submit(tn_plog_t *plog)
{
    memset(&plog->close_req, 0, sizeof(plog->close_req));
    plog->close_req.exec = close_exec;
    plog->close_req.done = close_done;
    tn__committer_submit(&plog->store->logc, &plog->close_req);
}

void tn_plog_close(tn_plog_t *plog, tn_plog_cb cb)
{
    if (plog->closing)
        return;
    plog->closing = true;
    plog->close_cb = cb;
    tn_plog_fail_gated(plog, TN_ECLOSED);
    plog->store->closing++;
    /* The replica manager may hold this log (one the engine owns): it lets
     * go now, before close_done frees it. What it asked of the log before
     * completes first (the committer runs requests in order, and their
     * completions come back in that order). */
    tn_store_t *store = plog->store;
    if (atomic_load(&plog->repl_watch) && store->repl_cb != NULL)
        store->repl_cb(store->repl_arg, plog);
    if (plog->pins > 0) {
        plog->close_held = true; /* tn_plog_unpin submits it */
        return;
    }
    close_submit(plog);
}

void tn_plog_pin(tn_plog_t *pl)
{
    pl->pins++;
}

void tn_plog_unpin(tn_plog_t *pl)
{
    TN_ASSERT(pl->pins > 0);
    if (--pl->pins == 0 && pl->close_held) {
        pl->close_held = false;
        close_submit(pl);
    }
}

void tn_plog_abandon(tn_plog_t *plog, tn_plog_cb cb)
{
    plog->abandoned = true;
    tn_plog_close(plog, cb);
}

/* --- replication: epochs ------------------------------------------------------ */

int tn_plog_epoch_end(tn_plog_t *pl, uint32_t epoch, uint32_t *found, uint64_t *end)
{
    int err = atomic_load(&pl->err);
    if (err != 0)
        return err;
    uint64_t log_end = atomic_load(&pl->written_next);
    uv_mutex_lock(&pl->lock);
    const tn_epochs_t *h = &pl->epochs;
    *found = 0;
    *end = 0;
    if (h->n > 0) {
        const tn_epoch_entry_t *last = &h->entries[h->n - 1];
        /* begin_epoch records its epoch before its record is written. */
        log_end = TN_MAX(log_end, last->start);
        if (epoch >= last->epoch) {
            *found = last->epoch;
            *end = log_end;
        } else {
            uint32_t f;
            uint64_t e;
            if (tn_epochs_end_offset_for(h, log_end, epoch, &f, &e) == 0 &&
                f != TN_EPOCHS_UNDEFINED) {
                *found = f;
                *end = e;
            } else {
                *end = h->entries[0].start; /* below every entry: where the history starts */
            }
        }
    }
    uv_mutex_unlock(&pl->lock);
    return 0;
}

int tn_plog_epoch_end_cb(void *plog, uint32_t epoch, uint32_t *found, uint64_t *end)
{
    return tn_plog_epoch_end(plog, epoch, found, end);
}

int tn_plog_mark_replica(tn_plog_t *pl)
{
    if (pl->mem || tn_plog_err(pl) != 0 || tn_plog_is_replica(pl))
        return 0;
    return save_epochs(pl); /* nothing queued yet: no committer round runs on it */
}

bool tn_plog_is_replica(tn_plog_t *pl)
{
    uv_mutex_lock(&pl->lock);
    bool used = pl->epochs_used;
    uv_mutex_unlock(&pl->lock);
    return used;
}

uint32_t tn_plog_last_epoch(tn_plog_t *pl)
{
    return epoch_before(pl, atomic_load(&pl->written_next));
}

uint32_t tn_plog_epochs_range(tn_plog_t *pl, uint64_t from, uint64_t to, tn_epoch_entry_t *out,
                              uint32_t max)
{
    uint32_t n = 0;
    if (from >= to || max == 0)
        return 0;
    uv_mutex_lock(&pl->lock);
    const tn_epochs_t *h = &pl->epochs;
    for (uint32_t i = 0; i < h->n && n < max; i++) {
        uint64_t start = h->entries[i].start;
        uint64_t next = i + 1 < h->n ? h->entries[i + 1].start : UINT64_MAX;
        if (next <= from)
            continue; /* ends before the range */
        if (start >= to)
            break;
        out[n].epoch = h->entries[i].epoch;
        out[n].start = TN_MAX(start, from);
        n++;
    }
    uv_mutex_unlock(&pl->lock);
    return n;
}

/* --- replication: the hw gate ------------------------------------------------- */

/* Complete the waiting appends the hw covers (all with status when force). */
static void gate_release(tn_plog_t *pl, bool force, int status)
{
    for (;;) {
        tn_append_t *r = pl->ghead;
        if (r == NULL)
            break;
        if (!force && r->first_offset + r->nrecs > atomic_load(&pl->hw))
            break;
        pl->ghead = r->gnext;
        if (pl->ghead == NULL)
            pl->gtail = NULL;
        r->gnext = NULL;
        r->cb(r, force ? status : 0);
    }
}

static void fire_progress(tn_plog_t *pl)
{
    tn__sreq_t *head = NULL, *tail = NULL;
    queue_progress(pl, &head, &tail);
    if (head != NULL)
        tn__store_complete(pl->store, head, tail);
}

void tn_plog_set_gated(tn_plog_t *pl, bool on)
{
    if (on)
        pl->gshut = 0;
    bool was = atomic_exchange(&pl->gated, on);
    if (was && !on) {
        gate_release(pl, true, 0);
        fire_progress(pl);
    }
}

void tn_plog_set_hw(tn_plog_t *pl, uint64_t hw)
{
    uint64_t w = atomic_load(&pl->written_next);
    if (hw > w)
        hw = w;
    if (hw <= atomic_load(&pl->hw))
        return;
    atomic_store(&pl->hw, hw);
    gate_release(pl, false, 0);
    fire_progress(pl);
}

void tn_plog_fail_gated(tn_plog_t *pl, int status)
{
    gate_release(pl, true, status);
}

void tn_plog_fail_gated_records(tn_plog_t *pl, int status)
{
    tn_append_t *failed = NULL, **ftail = &failed, *kept = NULL;
    for (tn_append_t **pp = &pl->ghead; *pp != NULL;) {
        tn_append_t *r = *pp;
        if (r->kind == 2) {
            kept = r;
            pp = &r->gnext;
            continue;
        }
        *pp = r->gnext;
        r->gnext = NULL;
        *ftail = r;
        ftail = &r->gnext;
    }
    pl->gtail = kept;
    /* The list is whole again before any callback runs. */
    for (tn_append_t *r = failed, *next; r != NULL; r = next) {
        next = r->gnext;
        r->gnext = NULL;
        r->cb(r, status);
    }
}

void tn_plog_gate_shut(tn_plog_t *pl, int status)
{
    pl->gshut = status;
    gate_release(pl, true, status);
}

uint64_t tn_plog_hw(tn_plog_t *pl)
{
    return atomic_load(&pl->hw);
}

/* --- replication: raw reads ---------------------------------------------------- */

/* Cut b back to size unconsumed bytes. */
static void buf_cut(tn_buf_t *b, size_t size)
{
    if (tn_buf_size(b) > size)
        b->len = b->off + size;
}

/* A window of one segment's bytes [at, at + len) in buf. */
typedef struct {
    tn_buf_t buf;
    uint64_t at;
    size_t len;
} window_t;

#define RAW_WINDOW (256 * 1024)

/* Make [pos, pos + need) of seg (at most limit bytes long) present in w. */
static int window_get(window_t *w, tn_seg_t *seg, uint64_t pos, size_t need, uint64_t limit,
                      const unsigned char **out)
{
    if (pos < w->at || pos + need > w->at + w->len) {
        if (pos + need > limit)
            return TN_ECORRUPT;
        size_t want = (size_t)TN_MIN(limit - pos, (uint64_t)TN_MAX(need, (size_t)RAW_WINDOW));
        tn_buf_reset(&w->buf);
        int rc = tn_buf_reserve(&w->buf, want);
        if (rc != 0)
            return rc;
        size_t got;
        rc = tn_io_pread(seg->fd, w->buf.base, want, pos, &got);
        if (rc != 0)
            return rc;
        w->at = pos;
        w->len = got;
        if (got < need)
            return TN_ECORRUPT;
    }
    *out = (const unsigned char *)w->buf.base + (pos - w->at);
    return 0;
}

int tn_plog_read_raw(tn_plog_t *pl, uint64_t from, size_t max_bytes, tn_buf_t *out, uint32_t *count)
{
    *count = 0;
    int err = atomic_load(&pl->err);
    if (err != 0)
        return err;
    if (pl->mem)
        return UV_EINVAL;
    uint64_t end = atomic_load(&pl->written_next);
    if (from > end)
        return TN_ENOTFOUND;
    if (from == end)
        return 0;
    size_t base_len = tn_buf_size(out);
    size_t batch_len = base_len; /* out's length at the last batch end */
    uint32_t batch_n = 0, n = 0;
    uint64_t off = from; /* the next record wanted */
    window_t w = {.at = 0, .len = 0};
    tn_buf_init(&w.buf);
    int rc = 0;
    bool stop = false;
    while (off < end && !stop && rc == 0) {
        /* The segment holding off, and where to start looking in it. */
        uv_mutex_lock(&pl->lock);
        uint32_t lo = segs_at_or_below(pl, off);
        if (off < pl->floor || lo == 0) {
            uv_mutex_unlock(&pl->lock);
            rc = TN_ENOTFOUND;
            break;
        }
        tn_seg_t *seg = pl->segs[lo - 1];
        if (off >= seg->base + seg->count) {
            uv_mutex_unlock(&pl->lock);
            rc = TN_EGAP;
            break;
        }
        if (!seg->idx_loaded)
            (void)tn_seg_index_load(seg); /* without it, scan from the start */
        uint64_t pos = seg->idx_loaded ? tn_seg_index_find(seg, off) : 0;
        uint64_t limit = seg->size;
        uint64_t seg_end = seg->base + seg->count;
        tn_seg_ref(seg);
        uv_mutex_unlock(&pl->lock);
        w.len = 0; /* another file */
        while (off < end && off < seg_end) {
            const unsigned char *b;
            rc = window_get(&w, seg, pos, TN_REC_HDR, limit, &b);
            tn_rec_hdr_t h;
            if (rc == 0 && tn_rec_decode_hdr(b, TN_REC_HDR, &h) != 0)
                rc = TN_ECORRUPT;
            if (rc != 0)
                break;
            size_t size = (size_t)tn_rec_size(&h);
            if (h.offset < off) {
                pos += size; /* on the way from the index entry */
                continue;
            }
            if (h.offset != off) {
                rc = TN_ECORRUPT;
                break;
            }
            if (batch_n > 0 && tn_buf_size(out) - base_len + size > max_bytes) {
                stop = true; /* a whole batch is in hand; this one would not fit */
                break;
            }
            tn_rec_t rec;
            rc = window_get(&w, seg, pos, size, limit, &b);
            if (rc == 0)
                rc = tn_rec_decode(b, size, &rec) != 0 ? TN_ECORRUPT : 0;
            if (rc == 0)
                rc = tn_buf_append(out, b, size);
            if (rc != 0)
                break;
            n++;
            off++;
            pos += size;
            if ((h.flags & TN_REC_F_MORE) == 0) {
                batch_len = tn_buf_size(out);
                batch_n = n;
                if (batch_len - base_len >= max_bytes) {
                    stop = true;
                    break;
                }
            }
        }
        uint64_t seg_base = seg->base;
        tn_seg_unref(seg);
        if (rc != 0 && off >= atomic_load(&pl->written_next))
            rc = TN_ENOTFOUND; /* truncated while it was read */
        else if (rc == TN_ECORRUPT)
            tn__plog_found_damage(pl, seg_base, "reading offset %" PRIu64 " of segment %" PRIu64,
                                  off, seg_base);
    }
    tn_buf_fini(&w.buf);
    if ((rc == TN_EGAP && batch_n > 0 && batch_n == n) || (rc == TN_ENOTFOUND && batch_n > 0))
        rc = 0; /* stop before a gap, or at a truncation: what was read stands */
    if (rc != 0) {
        buf_cut(out, base_len);
        return rc;
    }
    buf_cut(out, batch_len); /* whole batches only */
    *count = batch_n;
    return 0;
}

/* --- replication: suffix truncation -------------------------------------------- */

#ifdef TN_TEST
static atomic_int trunc_stop = -1;

void tn__plog_trunc_stop_after(int k)
{
    atomic_store(&trunc_stop, k);
}

/* Whether the test hook stops the truncation after step k, as a crash
 * would (the log turns sticky; the test reopens it). */
static bool trunc_stops(tn_plog_t *plog, int k)
{
    int want = k;
    if (!atomic_compare_exchange_strong(&trunc_stop, &want, -1))
        return false;
    set_sticky(plog, UV_EIO, "truncation stopped after step %d (test hook)", k);
    return true;
}
#else
#define trunc_stops(plog, k) false
#endif

/* The start of the atomic batch holding offset in seg, which must hold
 * offset, as its byte position and offset (committer thread). Scanned from
 * the segment's start: a batch never spans two segments (an append request
 * is written whole into one), so that start is a batch boundary. */
static int seg_batch_start(tn_seg_t *seg, uint64_t offset, uint64_t *pos_out, uint64_t *off_out)
{
    uint64_t pos = 0, limit = seg->size;
    uint64_t bpos = 0, boff = seg->base; /* where the current batch started */
    bool prev_more = false;
    while (pos < limit) {
        unsigned char hdr[TN_REC_HDR];
        size_t got;
        int rc = tn_io_pread(seg->fd, hdr, sizeof(hdr), pos, &got);
        if (rc != 0)
            return rc;
        tn_rec_hdr_t h;
        if (got < TN_REC_HDR || tn_rec_decode_hdr(hdr, TN_REC_HDR, &h) != 0 || h.offset > offset)
            return TN_ECORRUPT;
        if (!prev_more) {
            bpos = pos;
            boff = h.offset;
        }
        if (h.offset == offset) {
            *pos_out = bpos;
            *off_out = boff;
            return 0;
        }
        prev_more = (h.flags & TN_REC_F_MORE) != 0;
        pos += tn_rec_size(&h);
    }
    return TN_ECORRUPT;
}

/* The byte position in seg of the record at offset (committer thread).
 * UV_EINVAL when offset is inside an atomic batch. */
static int seg_cut_pos(tn_plog_t *plog, tn_seg_t *seg, uint64_t offset, uint64_t *out)
{
    if (offset >= seg->base + seg->count) {
        *out = seg->size;
        return 0;
    }
    uv_mutex_lock(&plog->lock);
    if (!seg->idx_loaded)
        (void)tn_seg_index_load(seg); /* without it, scan from the start */
    uint64_t pos =
        seg->idx_loaded ? tn_seg_index_find(seg, offset > seg->base ? offset - 1 : offset) : 0;
    uint64_t limit = seg->size;
    uv_mutex_unlock(&plog->lock);
    bool prev_more = false;
    while (pos < limit) {
        unsigned char hdr[TN_REC_HDR];
        size_t got;
        int rc = tn_io_pread(seg->fd, hdr, sizeof(hdr), pos, &got);
        if (rc != 0)
            return rc;
        tn_rec_hdr_t h;
        if (got < TN_REC_HDR || tn_rec_decode_hdr(hdr, TN_REC_HDR, &h) != 0 || h.offset > offset)
            return TN_ECORRUPT;
        if (h.offset == offset) {
            if (prev_more)
                return UV_EINVAL;
            *out = pos;
            return 0;
        }
        prev_more = (h.flags & TN_REC_F_MORE) != 0;
        pos += tn_rec_size(&h);
    }
    return TN_ECORRUPT;
}

/* Cut segment k (the last one now) to cut bytes holding the records below
 * offset, and make it the active segment, in a new object with a
 * read-write descriptor and an index rebuilt from the cut file. rebase
 * (k is 0, cut 0, offset below its base): the emptied file is renamed to
 * start at offset. */
static int cut_segment(tn_plog_t *plog, uint32_t k, uint64_t offset, uint64_t cut, bool rebase)
{
    tn_seg_t *old = plog->segs[k];
    tn_seg_t *ns = NULL;
    char newpath[4096];
    int fd = -1;
    int rc = rebase ? seg_path(plog, offset, "log", newpath, sizeof(newpath)) : 0;
    if (rc == 0)
        rc = tn_seg_new(rebase ? newpath : old->path, rebase ? offset : old->base, &ns);
    if (rc != 0)
        return rc;
    rc = tn_io_open(old->path, O_RDWR, 0, &fd);
    ns->fd = fd;
    if (rc == 0)
        rc = tn_io_ftruncate(ns->fd, cut);
    if (rc == 0)
        rc = tn_io_fdatasync(ns->fd);
    if (rc == 0 && trunc_stops(plog, 3))
        rc = UV_EIO;
    if (rc != 0)
        goto fail;
    /* Its sidecar, if it had one, goes: an active segment has none. */
    char path[4096];
    rc = seg_path(plog, old->base, "idx", path, sizeof(path));
    if (rc == 0) {
        rc = tn_io_unlink(path);
        if (rc == UV_ENOENT)
            rc = 0;
    }
    if (rc == 0 && rebase)
        rc = tn_io_rename(old->path, newpath);
    if (rc == 0)
        rc = tn_io_fsync_dir(plog->dir);
    if (rc == 0 && trunc_stops(plog, 4))
        rc = UV_EIO;
    if (rc != 0)
        goto fail;
    tn_seg_scan_t scan;
    rc = tn_seg_scan(ns->fd, cut, ns->base, plog->store->opts.index_interval, ns, &scan);
    if (rc != 0)
        goto fail;
    if (scan.tail != 0 || scan.valid_len != cut || ns->base + scan.count != offset) {
        rc = TN_ECORRUPT;
        goto fail;
    }
    ns->count = scan.count;
    /* A reset (rebase) counts from its new start: what was below is not
     * known here. */
    ns->ctl_base = rebase ? 0 : old->ctl_base;
    ns->size = ns->synced = ns->alloc = cut;
    ns->first_ns = scan.first_ns;
    ns->last_ns = scan.last_ns;
    ns->idx_loaded = true;
    ns->sealed = false;
    uv_mutex_lock(&plog->lock);
    plog->segs[k] = ns;
    uv_mutex_unlock(&plog->lock);
    tn_seg_unref(old); /* readers still holding it keep its descriptor */
    plog->no_zeros = false;
    return 0;
fail:
    tn_seg_unref(ns);
    return rc;
}

static int trunc_run(tn_plog_t *plog, tn_plog_trunc_t *req)
{
    int rc = atomic_load(&plog->err);
    if (rc != 0)
        return rc;
    uint64_t offset = req->offset;
    uint64_t old_next = plog->next_offset;
    req->cut_to = TN_MIN(offset, old_next);
    if (offset >= old_next)
        return 0;
    uv_mutex_lock(&plog->lock);
    uint32_t k = plog->nsegs;
    while (k > 0 && plog->segs[k - 1]->base > offset)
        k--;
    uv_mutex_unlock(&plog->lock);
    /* Below the first segment: everything goes (a follower's reset). */
    bool rebase = k == 0;
    k = rebase ? 0 : k - 1;
    tn_seg_t *seg = plog->segs[k];
    bool gap = !rebase && offset > seg->base + seg->count;
    uint64_t cut = rebase ? 0 : seg->size;
    if (!gap && !rebase) {
        rc = seg_cut_pos(plog, seg, offset, &cut);
        if (rc == UV_EINVAL && req->batch_down) {
            /* Down to the start of the batch holding offset, never below
             * the floor (tn_plog_truncate_batch). */
            uint64_t bstart = offset;
            rc = seg_batch_start(seg, offset, &cut, &bstart);
            if (rc == 0 && bstart < req->floor)
                return TN_ERANGE;
            if (rc == 0)
                offset = bstart;
        }
        if (rc == UV_EINVAL)
            return rc;
        if (rc != 0) {
            set_sticky(plog, rc, "finding offset %" PRIu64 " to truncate to", offset);
            return rc;
        }
    }

    req->cut_to = offset;

    /* 0. A drop floor above offset comes down to it first, so that the
     * records written again from offset on are not hidden. */
    if (plog->floor > offset && (rc = write_floor(plog, offset)) != 0)
        return rc;

    /* 1. Positions back: readers see nothing at or above offset. */
    uv_mutex_lock(&plog->lock);
    plog->next_offset = offset;
    atomic_store(&plog->written_next, offset);
    if (atomic_load(&plog->durable_next) > offset)
        atomic_store(&plog->durable_next, offset);
    uv_mutex_unlock(&plog->lock);
    req->dropped = old_next - offset;
    TN_LOG(TN_LOG_NOTICE, "partition %s/%u: truncating to offset %" PRIu64 " (%" PRIu64 " records)",
           plog->topic, plog->partition, offset, old_next - offset);
    if (trunc_stops(plog, 1))
        return UV_EIO;

    /* 2. The later segments go, newest first: a crash leaves a prefix. */
    bool removed = false;
    while (plog->nsegs > k + 1) {
        uv_mutex_lock(&plog->lock);
        tn_seg_t *v = plog->segs[--plog->nsegs];
        uv_mutex_unlock(&plog->lock);
        char path[4096];
        int r1 = seg_path(plog, v->base, "idx", path, sizeof(path));
        if (r1 == 0)
            r1 = tn_io_unlink(path);
        int r2 = tn_io_unlink(v->path);
        uint64_t base = v->base;
        tn_seg_unref(v);
        removed = true;
        if (r1 == UV_ENOENT)
            r1 = 0;
        if (r1 != 0 || r2 != 0) {
            rc = r2 != 0 ? r2 : r1;
            set_sticky(plog, rc, "removing segment %" PRIu64 " to truncate", base);
            return rc;
        }
    }
    if (removed && (rc = tn_io_fsync_dir(plog->dir)) != 0) {
        set_sticky(plog, rc, "fsync of the directory after truncating");
        return rc;
    }
    if (trunc_stops(plog, 2))
        return UV_EIO;

    /* 3-4. The segment holding offset is cut and becomes the active one;
     * offset in a gap after it: a new segment starts at offset. */
    if (gap) {
        rc = start_segment(plog, offset);
        if (rc != 0) {
            /* Even for space: the positions are back at offset already. */
            set_sticky(plog, rc, "creating segment %" PRIu64 " to truncate", offset);
            return rc;
        }
        if (trunc_stops(plog, 3) || trunc_stops(plog, 4))
            return UV_EIO;
    } else {
        rc = cut_segment(plog, k, offset, cut, rebase);
        if (rc != 0) {
            set_sticky(plog, rc, "cutting segment %" PRIu64 " to truncate", seg->base);
            return rc;
        }
    }
    atomic_store(&plog->durable_next, offset); /* everything below is synced now */

    /* 5. The epochs history follows the log. */
    uv_mutex_lock(&plog->lock);
    bool changed = tn_epochs_truncate_from_end(&plog->epochs, offset);
    uv_mutex_unlock(&plog->lock);
    if (trunc_stops(plog, 5))
        return UV_EIO;
    if (changed && (rc = save_epochs(plog)) != 0)
        return rc;
    return 0;
}

#ifdef TN_TEST
/* TERN_TEST_TRUNC_DELAY_MS=n (ternd-test): the process's first
 * truncation waits n ms on the committer before it runs, so that a test
 * can have a log closed (its topic deleted) while a truncation of it is
 * under way. Every request of the committer waits behind it. */
static void trunc_test_delay(void)
{
    static atomic_bool done;
    const char *v = getenv("TERN_TEST_TRUNC_DELAY_MS");
    if (v == NULL || atoi(v) <= 0 || atomic_exchange(&done, true))
        return;
    TN_LOG(TN_LOG_NOTICE, "truncation held %d ms (TERN_TEST_TRUNC_DELAY_MS)", atoi(v));
    uv_sleep((unsigned int)atoi(v));
}
#else
#define trunc_test_delay() ((void)0)
#endif

static void trunc_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_trunc_t *req = (tn_plog_trunc_t *)s;
    trunc_test_delay();
    s->status = trunc_run(req->plog, req);
    tn__store_complete(c->store, s, s);
}

/* Tell the store's cut watch (tn_store_set_cut_watch) that pl's records
 * from cut on went, or are about to be replaced; done ends what the watch
 * holds (tn_store_cut_done, which may run within the watch). True: the
 * watch holds wait, and pl stays pinned until done unpins it, so that
 * its close waits. Loop thread. */
static bool cut_watch_tell(tn_plog_t *pl, uint64_t cut, tn_store_cut_t *wait,
                           void (*done)(tn_store_cut_t *wait, int status))
{
    tn_store_t *st = pl->store;
    if (st->cut_cb == NULL)
        return false;
    wait->done = done;
    tn_plog_pin(pl);
    if (st->cut_cb(st->cut_arg, pl->topic, pl->partition, cut, wait))
        return true;
    tn_plog_unpin(pl);
    return false;
}

static void trunc_cut_end(tn_store_cut_t *wait, int status);

static void trunc_done(tn__sreq_t *s)
{
    tn_plog_trunc_t *req = (tn_plog_trunc_t *)s;
    tn_plog_t *pl = req->plog;
    uint64_t w = atomic_load(&pl->written_next);
    if (atomic_load(&pl->hw) > w)
        atomic_store(&pl->hw, w);
    /* Records went (step 1 ran, even if a later step failed): the
     * engine hears of it first, and may hold the cb back until its side
     * of the cut is durable (trunc_cut_end). The log is pinned since
     * trunc_submit (a close asked while the truncation ran is held too,
     * not freeing the log under a held cut); a held cut keeps the pin
     * cut_watch_tell took, until trunc_cut_end. */
    if (req->dropped > 0 && cut_watch_tell(pl, req->cut_to, &req->cut_wait, trunc_cut_end)) {
        tn_plog_unpin(pl); /* trunc_submit's: the watch's pin holds it now */
        return;
    }
    req->cb(req, s->status); /* may ask the close tn_plog_unpin then submits */
    tn_plog_unpin(pl);
}

void tn_store_cut_done(tn_store_cut_t *wait, int status)
{
    wait->done(wait, status);
}

/* tn_store_cut_done for a truncation the cut watch held. */
static void trunc_cut_end(tn_store_cut_t *wait, int status)
{
    tn_plog_trunc_t *req = TN_CONTAINER_OF(wait, tn_plog_trunc_t, cut_wait);
    tn_plog_t *pl = req->plog;
    if (status != 0) {
        /* The engine could not make the cut durable on its side (a paused
         * topic's pause file keeps the old hold point): no record may land
         * at the cut offsets, which a restart would deliver. */
        set_sticky(pl, status, "making the truncation to %" PRIu64 " durable for the engine",
                   req->cut_to);
        if (req->s.status == 0)
            req->s.status = status;
    }
    int rc = req->s.status;
    req->cb(req, rc); /* may submit the close tn_plog_unpin lets go */
    tn_plog_unpin(pl);
}

static int trunc_submit(tn_plog_t *pl, tn_plog_trunc_t *req, uint64_t offset, uint64_t floor,
                        bool batch_down, tn_plog_trunc_cb cb)
{
    if (pl->mem || cb == NULL)
        return UV_EINVAL;
    if (pl->closing)
        return TN_ECLOSED;
    if (offset < floor)
        return TN_ERANGE;
    memset(&req->s, 0, sizeof(req->s));
    req->s.exec = trunc_exec;
    req->s.done = trunc_done;
    req->plog = pl;
    req->offset = offset;
    req->floor = floor;
    req->batch_down = batch_down;
    req->cb = cb;
    req->dropped = 0;
    req->cut_to = offset;
    /* Pinned until the request's cb has run (trunc_done, or
     * tn_store_cut_done for a cut the engine holds): a close asked
     * meanwhile waits for it. */
    tn_plog_pin(pl);
    tn__committer_submit(&pl->store->logc, &req->s);
    return 0;
}

int tn_plog_truncate(tn_plog_t *pl, tn_plog_trunc_t *req, uint64_t offset, uint64_t floor,
                     tn_plog_trunc_cb cb)
{
    return trunc_submit(pl, req, offset, floor, false, cb);
}

int tn_plog_truncate_batch(tn_plog_t *pl, tn_plog_trunc_t *req, uint64_t offset, uint64_t floor,
                           tn_plog_trunc_cb cb)
{
    return trunc_submit(pl, req, offset, floor, true, cb);
}

/* --- replication: repairing a damaged segment -------------------------------------- */

#ifdef TN_TEST
static atomic_int repair_stop = -1;

void tn__plog_repair_stop_after(int k)
{
    atomic_store(&repair_stop, k);
}

static bool repair_stops(int k)
{
    int want = k;
    return atomic_compare_exchange_strong(&repair_stop, &want, -1);
}
#else
#define repair_stops(k) false
#endif

/* Copy the file at from to a new file to (created, fdatasync'ed). */
static int copy_file(const char *from, const char *to)
{
    int in = -1, out = -1;
    int rc = tn_io_open(from, O_RDONLY, 0, &in);
    if (rc != 0)
        return rc;
    rc = tn_io_open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644, &out);
    if (rc != 0)
        goto done;
    size_t cap = 1024 * 1024;
    unsigned char *buf = tn_malloc(cap);
    if (buf == NULL) {
        rc = UV_ENOMEM;
        goto done;
    }
    for (uint64_t pos = 0;;) {
        size_t got = 0;
        rc = tn_io_pread(in, buf, cap, pos, &got);
        if (rc != 0 || got == 0)
            break;
        rc = tn_io_pwrite(out, buf, got, pos);
        if (rc != 0)
            break;
        pos += got;
    }
    tn_free(buf);
    if (rc == 0)
        rc = tn_io_fdatasync(out);
done:
    if (out >= 0)
        (void)tn_io_close(out);
    (void)tn_io_close(in);
    return rc;
}

/* Recover the partition's directory into a fresh log object, as
 * tn_plog_open does, and swap what it found into plog (committer thread;
 * nothing else writes plog while it is isolated). */
static int reload(tn_plog_t *plog)
{
    tn_plog_t *fresh;
    int rc = plog_new(plog->store, plog->topic, plog->partition, &fresh);
    if (rc != 0)
        return rc;
    fresh->dir = tn_strdup(plog->dir);
    if (fresh->dir == NULL)
        rc = UV_ENOMEM;
    if (rc == 0)
        rc = recover(fresh);
    if (rc == 0)
        rc = open_epochs(fresh);
    if (rc != 0) {
        plog_free(fresh);
        return rc;
    }
    uv_mutex_lock(&plog->lock);
    tn_seg_t **segs = plog->segs;
    uint32_t nsegs = plog->nsegs, cap = plog->segs_cap;
    plog->segs = fresh->segs;
    plog->nsegs = fresh->nsegs;
    plog->segs_cap = fresh->segs_cap;
    fresh->segs = segs; /* freed with fresh: readers holding one keep it */
    fresh->nsegs = nsegs;
    fresh->segs_cap = cap;
    tn_epochs_t ep = plog->epochs;
    plog->epochs = fresh->epochs;
    fresh->epochs = ep;
    plog->epochs_used = fresh->epochs_used;
    plog->epochs_bad = fresh->epochs_bad;
    plog->floor = fresh->floor;
    plog->floor_ctl = fresh->floor_ctl;
    plog->floor_ctl_known = fresh->floor_ctl_known;
    plog->next_offset = fresh->next_offset;
    plog->last_publish_ns = fresh->last_publish_ns;
    plog->unsynced_msgs = plog->unsynced_bytes = 0;
    plog->no_zeros = false;
    atomic_store(&plog->written_next, fresh->next_offset);
    atomic_store(&plog->durable_next, fresh->next_offset);
    memcpy(plog->errmsg, fresh->errmsg, sizeof(plog->errmsg));
    atomic_store(&plog->bad_end, atomic_load(&fresh->bad_end));
    atomic_store(&plog->bad_base, atomic_load(&fresh->bad_base));
    atomic_store(&plog->err, atomic_load(&fresh->err));
    uv_mutex_unlock(&plog->lock);
    plog_free(fresh);
    return 0;
}

/* Write the damage record (base, end): the damage file (dmg_lock held;
 * atomic, the directory synced), unless the file there already names
 * that damage (the same range, or the segment at base as the active one,
 * which an open takes for it sealed since), as tn__plog_found_damage
 * leaves it for the active segment before tn_plog_record_damage or a
 * repair asks. */
static int write_damage(tn_plog_t *plog, uint64_t base, uint64_t end)
{
    unsigned char b[16];
    if (tn_io_read_record_file(plog->dir, DAMAGE_FILE, DAMAGE_MAGIC, b, sizeof(b)) == 0 &&
        tn_get_u64(b) == base &&
        (tn_get_u64(b + 8) == end || tn_get_u64(b + 8) == TN_PLOG_DAMAGE_ACTIVE))
        return 0;
    tn_put_u64(b, base);
    tn_put_u64(b + 8, end);
    return tn_io_write_record_file(plog->dir, DAMAGE_FILE, DAMAGE_MAGIC, b, sizeof(b));
}

/* tn_plog_repair_active: the history the epochs file gets at step 6, the
 * entries of the file starting below base, then the copy's, made in h
 * (initialized) before any file changes (committer thread): a file that
 * cannot be read refuses the repair with nothing changed. Read from the
 * file, not from memory: a log isolated at open has not repaired its
 * history against the log, and a crash may have left the copy's entries
 * in the file already (they are dropped and given again). */
static int repair_epochs(tn_plog_t *plog, tn_plog_repair_t *req, tn_epochs_t *h)
{
    int rc = tn_epochs_load(h, plog->dir);
    if (rc == 0) {
        (void)tn_epochs_truncate_from_end(h, req->base);
        for (uint32_t i = 0; i < req->nrepochs && rc == 0; i++)
            rc = tn_epochs_assign(h, req->repochs[i].epoch, req->repochs[i].start, NULL);
    }
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR,
               "partition %s/%u: cannot give the repaired active segment its epochs: %s (%s)",
               plog->topic, plog->partition, h->errmsg, tn_strerror(rc));
    return rc == TN_EFORMAT ? TN_ECORRUPT : rc;
}

static int repair_steps(tn_plog_t *plog, tn_plog_repair_t *req, tn_epochs_t *hist);

static int repair_run(tn_plog_t *plog, tn_plog_repair_t *req)
{
    uint64_t base, end;
    if (!tn_plog_damage(plog, &base, &end) || base != req->base ||
        end != (req->active ? TN_PLOG_DAMAGE_ACTIVE : req->end))
        return UV_EINVAL;
    tn_epochs_t h;
    tn_epochs_init(&h);
    int rc = req->active ? repair_epochs(plog, req, &h) : 0;
    if (rc == 0)
        rc = repair_steps(plog, req, &h);
    tn_epochs_fini(&h);
    return rc;
}

/* repair_run's steps; hist: the active segment's new history
 * (repair_epochs). */
static int repair_steps(tn_plog_t *plog, tn_plog_repair_t *req, tn_epochs_t *hist)
{
    uint64_t base = req->base, end = req->end;
    /* 0. (The active segment's repair) the damage recorded first: until
     * step 7 removes it, an open finds the log isolated, whichever of the
     * files below are in place, and the repair starts over. */
    if (req->active) {
        uv_mutex_lock(&plog->dmg_lock);
        int r0 = write_damage(plog, base, TN_PLOG_DAMAGE_ACTIVE);
        uv_mutex_unlock(&plog->dmg_lock);
        if (r0 != 0)
            return r0;
    }
    char segp[4096], tmpp[4096], idxp[4096];
    int rc = seg_path(plog, base, "log", segp, sizeof(segp));
    if (rc == 0)
        rc = seg_path(plog, base, "repair", tmpp, sizeof(tmpp));
    if (rc == 0)
        rc = seg_path(plog, base, "idx", idxp, sizeof(idxp));
    if (rc == 0 &&
        (size_t)snprintf(req->quarantined, sizeof(req->quarantined), "%s.damaged.%" PRId64, segp,
                         tn_now_wall_ms()) >= sizeof(req->quarantined))
        rc = UV_ENAMETOOLONG;
    if (rc != 0)
        return rc;

    /* 1. The good copy, its sync marks this file's: every byte before a
     * record is durable by the time the file is in place. */
    for (size_t pos = 0; pos < req->raw_len;) {
        tn_rec_hdr_t h;
        if (tn_rec_decode_hdr(req->raw + pos, req->raw_len - pos, &h) != 0)
            return TN_ECORRUPT; /* checked at submit */
        tn_rec_set_sync_mark(req->raw + pos, (uint32_t)TN_MIN(pos, (size_t)UINT32_MAX));
        pos += (size_t)tn_rec_size(&h);
    }
    int fd = -1;
    rc = tn_io_open(tmpp, O_WRONLY | O_CREAT | O_TRUNC, 0644, &fd);
    if (rc == 0)
        rc = req->raw_len > 0 ? tn_io_pwrite(fd, req->raw, req->raw_len, 0) : 0;
    if (rc == 0)
        rc = tn_io_fdatasync(fd);
    if (fd >= 0) {
        int rc2 = tn_io_close(fd);
        rc = rc != 0 ? rc : rc2;
    }
    if (rc != 0 || repair_stops(1))
        goto out;

    /* 2. The damaged file kept for the operator. */
    rc = copy_file(segp, req->quarantined);
    if (rc == 0)
        rc = tn_io_fsync_dir(plog->dir);
    if (rc != 0 || repair_stops(2))
        goto out;

    /* 3. Its sidecar goes: recovery rebuilds one from the new file. */
    rc = tn_io_unlink(idxp);
    if (rc == UV_ENOENT)
        rc = 0;
    if (rc == 0)
        rc = tn_io_fsync_dir(plog->dir);
    if (rc != 0 || repair_stops(3))
        goto out;

    /* 4-5. The good copy takes its place, durably. */
    rc = tn_io_rename(tmpp, segp);
    if (rc != 0 || repair_stops(4))
        goto out;
    rc = tn_io_fsync_dir(plog->dir);
    if (rc != 0 || repair_stops(5))
        goto out;

    /* 6. (The active segment's repair) the epochs: the records from base
     * on are the leader's now. */
    if (req->active && (hist->n > 0 || plog->epochs_used)) {
        rc = tn_epochs_save(hist, plog->dir);
        if (rc != 0)
            TN_LOG(TN_LOG_ERROR,
                   "partition %s/%u: cannot give the repaired active segment its epochs: %s (%s)",
                   plog->topic, plog->partition, hist->errmsg, tn_strerror(rc));
    }
    if (req->active && (rc != 0 || repair_stops(6)))
        goto out;

    /* The damage record goes (a crash before leaves it: the next open
     * isolates the good copy and it is copied again). */
    char dmgp[4096];
    rc = tn_io_path(dmgp, sizeof(dmgp), "%s/%s", plog->dir, DAMAGE_FILE);
    if (rc == 0 && (rc = tn_io_unlink(dmgp)) == 0)
        rc = tn_io_fsync_dir(plog->dir);
    if (rc == UV_ENOENT)
        rc = 0;
    if (rc != 0)
        goto out;

    /* 6. Re-open in place. */
    rc = reload(plog);
    if (rc == 0 && req->active)
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: the active segment %" PRIu64 " replaced by a good copy of %" PRIu64
               " records from offset %" PRIu64 "; the damaged file is kept as %s%s%s",
               plog->topic, plog->partition, base, req->end - base, base, req->quarantined,
               atomic_load(&plog->err) != 0 ? "; still isolated: " : "",
               atomic_load(&plog->err) != 0 ? plog->errmsg : "");
    else if (rc == 0)
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: segment %" PRIu64 " (offsets %" PRIu64 "..%" PRIu64
               "%s) replaced by a good copy; the damaged file is kept as %s%s%s",
               plog->topic, plog->partition, base, base, req->recs_end - 1,
               req->recs_end < end ? ", then a gap" : "", req->quarantined,
               atomic_load(&plog->err) != 0 ? "; still isolated: " : "",
               atomic_load(&plog->err) != 0 ? plog->errmsg : "");
    return rc;
out:
    if (rc == 0)
        rc = UV_EIO; /* the test hook: stopped as a crash would */
    return rc;
}

static void repair_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_repair_t *req = (tn_plog_repair_t *)s;
    s->status = req->pre_status != 0 ? req->pre_status : repair_run(req->plog, req);
    tn__store_complete(c->store, s, s);
}

static void repair_done(tn__sreq_t *s)
{
    tn_plog_repair_t *req = (tn_plog_repair_t *)s;
    tn_plog_t *pl = req->plog;
    tn_free(req->raw);
    req->raw = NULL;
    tn_free(req->repochs);
    req->repochs = NULL;
    uint64_t w = atomic_load(&pl->written_next);
    if (atomic_load(&pl->hw) > w)
        atomic_store(&pl->hw, w);
    bool pinned = req->pinned;
    req->cb(req, s->status); /* may submit the close tn_plog_unpin lets go */
    if (pinned)
        tn_plog_unpin(pl);
}

/* tn_store_cut_done for a repair the cut watch held (repair_queue): it
 * runs now, or fails with status without changing anything (the engine
 * could not make the lowered hold point durable: the new records must not
 * be in place with the old point in the pause file). Through the
 * committer either way, so that cb never runs within the submit. */
static void repair_cut_end(tn_store_cut_t *wait, int status)
{
    tn_plog_repair_t *req = TN_CONTAINER_OF(wait, tn_plog_repair_t, cut_wait);
    req->pre_status = status;
    tn__committer_submit(&req->plog->store->logc, &req->s);
}

/* Queue the repair req of pl (loop thread). When pl holds records from
 * req->base on, which the repair replaces with the leader's or drops, the
 * store's cut watch hears of it first with base, before any file changes
 * (after an unclean election the leader's records there may be others
 * than a pause saw), and the repair runs once the watch is done
 * (repair_cut_end), pl pinned until its cb. */
static void repair_queue(tn_plog_t *pl, tn_plog_repair_t *req)
{
    req->pre_status = 0;
    req->pinned = atomic_load(&pl->written_next) > req->base;
    if (req->pinned && cut_watch_tell(pl, req->base, &req->cut_wait, repair_cut_end))
        return;
    req->pinned = false;
    tn__committer_submit(&pl->store->logc, &req->s);
}

static void dmgrec_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_dmgrec_t *req = (tn_plog_dmgrec_t *)s;
    tn_plog_t *plog = req->plog;
    uint64_t base, end;
    int rc = 0;
    uv_mutex_lock(&plog->dmg_lock);
    if (tn_plog_damage(plog, &base, &end))
        rc = write_damage(plog, base, end);
    uv_mutex_unlock(&plog->dmg_lock);
    s->status = rc;
    tn__store_complete(c->store, s, s);
}

static void dmgrec_done(tn__sreq_t *s)
{
    tn_plog_dmgrec_t *req = (tn_plog_dmgrec_t *)s;
    req->cb(req, s->status);
}

int tn_plog_record_damage(tn_plog_t *pl, tn_plog_dmgrec_t *req, tn_plog_dmgrec_cb cb)
{
    uint64_t base, end;
    if (pl->mem || cb == NULL || !tn_plog_damage(pl, &base, &end))
        return UV_EINVAL;
    if (pl->closing)
        return TN_ECLOSED;
    memset(&req->s, 0, sizeof(req->s));
    req->s.exec = dmgrec_exec;
    req->s.done = dmgrec_done;
    req->plog = pl;
    req->cb = cb;
    tn__committer_submit(&pl->store->logc, &req->s);
    return 0;
}

/* tn_plog_repair and tn_plog_repair_gap: gap, whether the copy may end
 * short of end (the rest a gap). */
static int repair_submit(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, uint64_t end,
                         const void *bytes, size_t len, bool gap, tn_plog_repair_cb cb)
{
    if (pl->mem || cb == NULL || bytes == NULL || len == 0 || end <= base)
        return UV_EINVAL;
    if (pl->closing)
        return TN_ECLOSED;
    uint32_t n = 0;
    int rc = tn_rec_check_run(bytes, len, base, &n);
    if (rc != 0)
        return rc;
    if (gap ? (uint64_t)n > end - base : (uint64_t)n != end - base)
        return TN_ECORRUPT;
    memset(&req->s, 0, sizeof(req->s));
    req->raw = tn_malloc(len);
    if (req->raw == NULL)
        return UV_ENOMEM;
    memcpy(req->raw, bytes, len);
    req->raw_len = len;
    req->active = false;
    req->repochs = NULL;
    req->nrepochs = 0;
    req->s.exec = repair_exec;
    req->s.done = repair_done;
    req->plog = pl;
    req->base = base;
    req->end = end;
    req->cb = cb;
    req->recs_end = base + n;
    req->quarantined[0] = '\0';
    repair_queue(pl, req);
    return 0;
}

int tn_plog_repair(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, uint64_t end,
                   const void *bytes, size_t len, tn_plog_repair_cb cb)
{
    return repair_submit(pl, req, base, end, bytes, len, false, cb);
}

int tn_plog_repair_gap(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, uint64_t end,
                       const void *bytes, size_t len, tn_plog_repair_cb cb)
{
    return repair_submit(pl, req, base, end, bytes, len, true, cb);
}

bool tn_plog_epochs_damaged(tn_plog_t *pl)
{
    if (atomic_load(&pl->err) != TN_ECORRUPT)
        return false;
    uv_mutex_lock(&pl->lock);
    bool bad = pl->epochs_bad;
    uv_mutex_unlock(&pl->lock);
    return bad;
}

/* tn_plog_rebuild_epochs: the history of the log's records from their
 * EPOCH_START records (committer thread; the log is isolated, so nothing
 * else changes its segments). */
static int rebuild_scan(tn_plog_t *plog, uint32_t first_epoch, uint64_t limit, tn_epochs_t *h)
{
    uint64_t first = first_offset_locked(plog);
    bool started = false; /* the first record at or past first seen */
    window_t w = {.at = 0, .len = 0};
    tn_buf_init(&w.buf);
    int rc = 0;
    for (uint32_t i = 0; i < plog->nsegs && plog->segs[i]->base < limit && rc == 0; i++) {
        tn_seg_t *seg = plog->segs[i];
        uint64_t pos = 0, off = seg->base;
        w.len = 0; /* another file */
        while (pos < seg->size && rc == 0) {
            const unsigned char *b;
            tn_rec_hdr_t hd;
            rc = window_get(&w, seg, pos, TN_REC_HDR, seg->size, &b);
            if (rc == 0 && (tn_rec_decode_hdr(b, TN_REC_HDR, &hd) != 0 || hd.offset != off))
                rc = TN_ECORRUPT;
            if (rc != 0)
                break;
            size_t size = (size_t)tn_rec_size(&hd);
            tn_ctrl_t ctl = {0};
            bool epoch_start = false;
            if ((hd.flags & TN_REC_F_CONTROL) != 0 && off >= first) {
                tn_rec_t rec;
                rc = window_get(&w, seg, pos, size, seg->size, &b);
                if (rc == 0 && (tn_rec_decode(b, size, &rec) != 0 ||
                                tn_ctrl_decode(rec.body, rec.h.body_len, &ctl) != 0))
                    rc = TN_ECORRUPT;
                epoch_start = rc == 0 && ctl.kind == TN_CTRL_EPOCH_START;
            }
            if (rc == 0 && off >= first && !started) {
                started = true;
                if (!epoch_start && first_epoch == 0)
                    rc = TN_ERANGE; /* the first records' epoch is the leader's to say */
                else if (!epoch_start)
                    rc = tn_epochs_assign(h, first_epoch, off, NULL);
            }
            if (rc == 0 && epoch_start) {
                uint32_t latest = tn_epochs_latest(h);
                rc = ctl.epoch == 0 || ctl.epoch == TN_EPOCHS_UNDEFINED ||
                             (latest != TN_EPOCHS_UNDEFINED && ctl.epoch <= latest)
                         ? TN_ECORRUPT
                         : tn_epochs_assign(h, ctl.epoch, off, NULL);
            }
            pos += size;
            off++;
        }
    }
    tn_buf_fini(&w.buf);
    return rc;
}

static int rebuild_run(tn_plog_t *plog, tn_plog_repair_t *req)
{
    if (!tn_plog_epochs_damaged(plog))
        return UV_EINVAL;
    /* Damage in the active segment too (load_epochs_isolated): the
     * history of the records below it; its repair replaces the rest. */
    uint64_t limit = UINT64_MAX, end;
    if (tn_plog_damage(plog, &limit, &end) && end != TN_PLOG_DAMAGE_ACTIVE)
        return UV_EINVAL;
    tn_epochs_t h;
    tn_epochs_init(&h);
    int rc = rebuild_scan(plog, req->first_epoch, limit, &h);
    if (rc == 0 && repair_stops(1))
        rc = UV_EIO;
    if (rc == 0) {
        rc = tn_epochs_save(&h, plog->dir);
        if (rc != 0)
            TN_LOG(TN_LOG_ERROR, "partition %s/%u: rebuilding the epochs file: %s", plog->topic,
                   plog->partition, h.errmsg);
    }
    req->end = h.n;
    tn_epochs_fini(&h);
    if (rc == 0)
        rc = reload(plog);
    if (rc == 0)
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%u: epochs file rebuilt from the records (%" PRIu64 " epochs)%s%s",
               plog->topic, plog->partition, req->end,
               atomic_load(&plog->err) != 0 ? "; still isolated: " : "",
               atomic_load(&plog->err) != 0 ? plog->errmsg : "");
    return rc;
}

static void rebuild_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_plog_repair_t *req = (tn_plog_repair_t *)s;
    s->status = rebuild_run(req->plog, req);
    tn__store_complete(c->store, s, s);
}

int tn_plog_rebuild_epochs(tn_plog_t *pl, tn_plog_repair_t *req, uint32_t first_epoch,
                           tn_plog_repair_cb cb)
{
    if (pl->mem || cb == NULL || first_epoch == TN_EPOCHS_UNDEFINED)
        return UV_EINVAL;
    if (pl->closing)
        return TN_ECLOSED;
    memset(&req->s, 0, sizeof(req->s));
    req->raw = NULL;
    req->raw_len = 0;
    req->active = false;
    req->repochs = NULL;
    req->nrepochs = 0;
    req->first_epoch = first_epoch;
    req->pre_status = 0;
    req->pinned = false;
    req->s.exec = rebuild_exec;
    req->s.done = repair_done;
    req->plog = pl;
    req->base = req->end = 0;
    req->cb = cb;
    req->quarantined[0] = '\0';
    tn__committer_submit(&pl->store->logc, &req->s);
    return 0;
}

int tn_plog_repair_active(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, const void *bytes,
                          size_t len, const tn_epoch_entry_t *epochs, uint32_t nepochs,
                          tn_plog_repair_cb cb)
{
    if (pl->mem || cb == NULL || (len > 0 && bytes == NULL) || (nepochs > 0 && epochs == NULL) ||
        base > INT64_MAX)
        return UV_EINVAL;
    if (pl->closing)
        return TN_ECLOSED;
    uint32_t n = 0;
    if (len > 0) {
        int rc = tn_rec_check_run(bytes, len, base, &n);
        if (rc != 0)
            return rc;
    }
    if (n == 0 && nepochs > 0)
        return UV_EINVAL;
    if (!epochs_fit(epochs, nepochs, base, n))
        return TN_ECORRUPT;
    memset(&req->s, 0, sizeof(req->s));
    /* An empty copy still gets a buffer: steps 1-5 write it as a file. */
    req->raw = tn_malloc(len > 0 ? len : 1);
    req->repochs = nepochs > 0 ? tn_malloc(nepochs * sizeof(*epochs)) : NULL;
    if (req->raw == NULL || (nepochs > 0 && req->repochs == NULL)) {
        tn_free(req->raw);
        tn_free(req->repochs);
        req->raw = NULL;
        req->repochs = NULL;
        return UV_ENOMEM;
    }
    if (len > 0)
        memcpy(req->raw, bytes, len);
    if (nepochs > 0)
        memcpy(req->repochs, epochs, nepochs * sizeof(*epochs));
    req->raw_len = len;
    req->active = true;
    req->nrepochs = nepochs;
    req->s.exec = repair_exec;
    req->s.done = repair_done;
    req->plog = pl;
    req->base = base;
    req->end = base + n;
    req->recs_end = base + n;
    req->cb = cb;
    req->quarantined[0] = '\0';
    repair_queue(pl, req);
    return 0;
}
