/* The ingress log: frame codec, recovery, group-committed appends on the
 * store's log committer, reads from any thread, checkpoint and compaction.
 * See ilog.h.
 *
 * Durability invariants (every change here must keep them):
 *   1. Appends gathered in one round of the log committer are written with
 *      one pwritev (more only when a segment rotates) and made durable by
 *      one fdatasync in that round, the same round that syncs the
 *      partition logs; a callback runs only after the fdatasync covering
 *      every record of its append returned success.
 *   2. durable_seq moves only after such an fdatasync; reads return only
 *      records below it.
 *   3. A segment is fdatasynced before its successor is created, and the
 *      directory is fsynced after a segment is created or unlinked: every
 *      segment but the last is wholly durable, so damage in one is
 *      corruption, never a torn write.
 *   4. Each frame carries its sync mark, the segment bytes covered by an
 *      fdatasync when it was written. A bad frame in the last segment is a
 *      torn tail unless a later valid frame's mark is above its position
 *      (then it had been durable: corruption).
 *   5. The checkpoint file is written (temp, fsync, rename, directory
 *      fsync) before any segment it allows to go is unlinked, and it never
 *      moves back. Segments go oldest first, so what a crash leaves is a
 *      contiguous suffix.
 *   6. A failed write or fdatasync is latched: every later append fails
 *      with it and the fsync is never retried. Except a write or a
 *      rotation's create that finds the disk full (tn_io_nospace): the
 *      segment is cut back (ftruncate, fdatasync: no frame of them
 *      survives a crash), the seqs given back, and the appends from
 *      there fail alone; nothing of them was synced.
 *
 * DESIGN: a round on the log committer (plog.c calls in).
 *   1. tn__ilog_take moves the round's ingress appends out of the chain.
 *   2. tn__ilog_write, after the partition logs are written: per log,
 *      assign seqs, encode the frame headers (the topics, keys and bodies
 *      are never copied), pwritev, publish sizes, counts and read notes
 *      under the log's lock. A batch that would overflow the active
 *      segment rotates first (fdatasync, create the next, fsync the dir).
 *   3. tn__ilog_sync, with the partition logs' syncs: fdatasync the active
 *      segment, advance durable_seq, complete the appends.
 *   4. Checkpoints and closes are control requests, run after the round.
 */
#include "core/platform.h"

#include "storage/ilog.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "core/log.h"
#include "storage/io.h"
#include "storage/segment.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- frames --------------------------------------------------------------- */

/* Per record, the header bytes an append encodes: the frame header and the
 * payload head (version, flags, sync mark, topic length), the key length,
 * and the payload tail (partition, times, body length). */
#define HEAD_LEN  (TN_ILOG_HDR + 8)
#define KLEN_OFF  HEAD_LEN
#define TAIL_OFF  (HEAD_LEN + 2)
#define TAIL_LEN  24
#define HDRS_SIZE (TAIL_OFF + TAIL_LEN)

size_t tn_irec_size(const tn_irec_t *rec)
{
    return (size_t)TN_ILOG_HDR + TN_ILOG_FIXED + rec->topic.len + rec->key.len + rec->body.len;
}

/* Fill h (HDRS_SIZE bytes) for rec, checksum included. */
static void encode_hdrs(unsigned char *h, const tn_irec_t *rec, uint64_t seq, uint32_t sync_mark)
{
    uint32_t plen = (uint32_t)(tn_irec_size(rec) - TN_ILOG_HDR);
    unsigned char *p = h + TN_ILOG_HDR;
    p[0] = TN_ILOG_VERSION;
    p[1] = rec->pinned ? TN_ILOG_F_PINNED : 0;
    tn_put_u32(p + 2, sync_mark);
    tn_put_u16(p + 6, (uint16_t)rec->topic.len);
    tn_put_u16(h + KLEN_OFF, (uint16_t)rec->key.len);
    unsigned char *t = h + TAIL_OFF;
    tn_put_u32(t, rec->partition);
    tn_put_u64(t + 4, (uint64_t)rec->deliver_at_ms);
    tn_put_u64(t + 12, (uint64_t)rec->created_ms);
    tn_put_u32(t + 20, (uint32_t)rec->body.len);
    uint32_t crc = tn_crc32c(0, p, 8);
    crc = tn_crc32c(crc, rec->topic.base, rec->topic.len);
    crc = tn_crc32c(crc, h + KLEN_OFF, 2);
    crc = tn_crc32c(crc, rec->key.base, rec->key.len);
    crc = tn_crc32c(crc, t, TAIL_LEN);
    crc = tn_crc32c(crc, rec->body.base, rec->body.len);
    tn_put_u32(h, TN_ILOG_MAGIC);
    tn_put_u32(h + 4, plen);
    tn_put_u64(h + 8, seq);
    tn_put_u32(h + 16, crc);
}

size_t tn_irec_encode(unsigned char *out, const tn_irec_t *rec, uint64_t seq, uint32_t sync_mark)
{
    unsigned char h[HDRS_SIZE];
    encode_hdrs(h, rec, seq, sync_mark);
    unsigned char *p = out;
    memcpy(p, h, HEAD_LEN);
    p += HEAD_LEN;
    if (rec->topic.len > 0)
        memcpy(p, rec->topic.base, rec->topic.len);
    p += rec->topic.len;
    memcpy(p, h + KLEN_OFF, 2);
    p += 2;
    if (rec->key.len > 0)
        memcpy(p, rec->key.base, rec->key.len);
    p += rec->key.len;
    memcpy(p, h + TAIL_OFF, TAIL_LEN);
    p += TAIL_LEN;
    if (rec->body.len > 0)
        memcpy(p, rec->body.base, rec->body.len);
    p += rec->body.len;
    return (size_t)(p - out);
}

int tn_irec_decode(const void *buf, size_t len, tn_irec_t *rec, uint64_t *seq, size_t *used,
                   uint32_t *sync_mark)
{
    const unsigned char *b = buf;
    *used = 0;
    if (len < 4) {
        /* Refuse early what can never become the magic. */
        static const unsigned char magic[4] = {'T', 'N', 'I', '1'};
        return memcmp(b, magic, len) == 0 ? TN_ESHORT : TN_ECORRUPT;
    }
    if (tn_get_u32(b) != TN_ILOG_MAGIC)
        return TN_ECORRUPT;
    if (len < TN_ILOG_HDR)
        return TN_ESHORT;
    uint32_t plen = tn_get_u32(b + 4);
    if (plen < TN_ILOG_FIXED + 1 || plen > TN_ILOG_MAX_PAYLOAD)
        return TN_ECORRUPT;
    size_t flen = (size_t)TN_ILOG_HDR + plen;
    if (len < flen) {
        *used = flen;
        return TN_ESHORT;
    }
    const unsigned char *p = b + TN_ILOG_HDR, *end = p + plen;
    if (tn_crc32c(0, p, plen) != tn_get_u32(b + 16))
        return TN_ECORRUPT;
    if (p[0] != TN_ILOG_VERSION || (p[1] & ~TN_ILOG_F_PINNED) != 0)
        return TN_ECORRUPT;
    memset(rec, 0, sizeof(*rec));
    rec->pinned = (p[1] & TN_ILOG_F_PINNED) != 0;
    uint32_t mark = tn_get_u32(p + 2);
    size_t tlen = tn_get_u16(p + 6);
    p += 8;
    /* Each length is checked against what is left before it is used. */
    if (tlen == 0 || (size_t)(end - p) < tlen + 2)
        return TN_ECORRUPT;
    rec->topic = tn_iov(p, tlen);
    p += tlen;
    size_t klen = tn_get_u16(p);
    p += 2;
    if ((size_t)(end - p) < klen + TAIL_LEN)
        return TN_ECORRUPT;
    rec->key = tn_iov(p, klen);
    p += klen;
    rec->partition = tn_get_u32(p);
    rec->deliver_at_ms = (int64_t)tn_get_u64(p + 4);
    rec->created_ms = (int64_t)tn_get_u64(p + 12);
    size_t blen = tn_get_u32(p + 20);
    p += TAIL_LEN;
    if (rec->deliver_at_ms < 0 || (size_t)(end - p) != blen || blen > TN_ILOG_MAX_BODY)
        return TN_ECORRUPT;
    rec->body = tn_iov(p, blen);
    *seq = tn_get_u64(b + 8);
    *used = flen;
    if (sync_mark != NULL)
        *sync_mark = mark;
    return 0;
}

/* --- the log's objects ------------------------------------------------------- */

/* Read notes: the byte position of one frame every NOTE_INTERVAL bytes,
 * so a read from a seq scans at most that much before it. */
#define NOTE_INTERVAL 4096
/* Bytes a read or a scan asks the file for at a time (more for a larger
 * frame). */
#define CHUNK (256 * 1024)

typedef struct {
    uint64_t seq;
    uint64_t pos;
} note_t;

/* A segment. base, path and fd never change; count, size and the notes are
 * guarded by the log's lock; synced is the committer's. Readers hold a
 * reference while they read, so compaction can unlink it meanwhile. */
typedef struct {
    atomic_int refs;
    int fd;
    char *path;
    uint64_t base;
    uint64_t count;
    uint64_t size;
    uint64_t stream; /* frame bytes of the log before this segment (for stats) */
    uint64_t synced;
    note_t *notes;
    uint32_t nnotes;
    uint32_t notes_cap;
} iseg_t;

struct tn_ilog_s {
    tn_store_t *store;
    tn_ilog_opts_t opts;
    char *dir;
    uv_mutex_t lock;
    /* Guarded by lock. */
    iseg_t **segs; /* oldest first; the last is active */
    uint32_t nsegs;
    uint32_t segs_cap;
    uint64_t bytes;       /* every segment's bytes */
    uint64_t stream_end;  /* frame bytes ever written (the virtual end) */
    uint64_t ckpt_stream; /* virtual position of the checkpoint's frame */
    int64_t oldest_ms;    /* its created_ms; 0 when the checkpoint is at next */
    atomic_uint_fast64_t next_seq;
    atomic_uint_fast64_t durable_seq;
    atomic_uint_fast64_t ckpt_seq;
    atomic_int err; /* latched */
    char errmsg[512];
    /* Committer thread only. */
    uint64_t wnext;
    tn_iov_t *iov;
    size_t iov_cap;
    note_t *pending; /* this flush's frames: seq and position */
    size_t pending_cap;
    int64_t *pending_ms;
    bool in_round;
    bool wrote;
    tn_ilog_append_t *rhead;
    tn_ilog_append_t *rtail;
    tn_ilog_t *rnext;
    /* Loop thread. */
    bool closing;
    tn__sreq_t close_req;
    tn_ilog_close_cb close_cb;
};

static void latch(tn_ilog_t *l, int err, const char *fmt, ...) TN_PRINTF(3, 4);
static void latch(tn_ilog_t *l, int err, const char *fmt, ...)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&l->err, &expected, err))
        return;
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(l->errmsg, sizeof(l->errmsg), "ingress log: %s: %s", what, tn_strerror(err));
    TN_LOG(TN_LOG_ERROR, "%s; it refuses appends until restart", l->errmsg);
}

static int seg_new(tn_ilog_t *l, uint64_t base, iseg_t **out)
{
    char name[64], path[4096];
    tn_seg_name(base, "log", name, sizeof(name));
    int rc = tn_io_path(path, sizeof(path), "%s/%s", l->dir, name);
    if (rc != 0)
        return rc;
    iseg_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->path = tn_strdup(path);
    if (s->path == NULL) {
        tn_free(s);
        return UV_ENOMEM;
    }
    atomic_init(&s->refs, 1);
    s->fd = -1;
    s->base = base;
    *out = s;
    return 0;
}

static void seg_unref(iseg_t *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    if (s->fd >= 0)
        tn_io_close(s->fd);
    tn_free(s->notes);
    tn_free(s->path);
    tn_free(s);
}

/* Note frame (seq, pos) of s if it is due (lock held, or no reader yet). */
static void seg_note(iseg_t *s, uint64_t seq, uint64_t pos)
{
    if (s->nnotes > 0 && pos - s->notes[s->nnotes - 1].pos < NOTE_INTERVAL)
        return;
    if (s->nnotes == s->notes_cap) {
        uint32_t cap = s->notes_cap ? s->notes_cap * 2 : 16;
        note_t *p = tn_realloc(s->notes, cap * sizeof(*p));
        if (p == NULL)
            return; /* a missing note only lengthens a later read's scan */
        s->notes = p;
        s->notes_cap = cap;
    }
    s->notes[s->nnotes].seq = seq;
    s->notes[s->nnotes].pos = pos;
    s->nnotes++;
}

/* The note at or before seq (lock held): where a scan for seq starts. */
static note_t seg_find_note(const iseg_t *s, uint64_t seq)
{
    note_t best = {s->base, 0};
    uint32_t lo = 0, hi = s->nnotes;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->notes[mid].seq <= seq) {
            best = s->notes[mid];
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return best;
}

static int push_seg(tn_ilog_t *l, iseg_t *s)
{
    if (l->nsegs == l->segs_cap) {
        uint32_t cap = l->segs_cap ? l->segs_cap * 2 : 8;
        iseg_t **p = tn_realloc(l->segs, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        l->segs = p;
        l->segs_cap = cap;
    }
    l->segs[l->nsegs++] = s;
    return 0;
}

static iseg_t *active_seg(const tn_ilog_t *l)
{
    return l->segs[l->nsegs - 1];
}

/* The segment holding seq (lock held), or NULL. */
static iseg_t *find_seg(const tn_ilog_t *l, uint64_t seq)
{
    uint32_t lo = 0, hi = l->nsegs;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const iseg_t *s = l->segs[mid];
        if (seq < s->base)
            hi = mid;
        else if (seq >= s->base + s->count)
            lo = mid + 1;
        else
            return l->segs[mid];
    }
    return NULL;
}

/* --- scanning frames from a file ---------------------------------------------- */

/* Frames of one segment file from pos to end, read CHUNK bytes at a time. */
typedef struct {
    int fd;
    uint64_t pos; /* file position of the next frame */
    uint64_t end;
    tn_buf_t buf; /* file bytes from buf_pos */
    uint64_t buf_pos;
} scan_t;

static void scan_init(scan_t *sc, int fd, uint64_t pos, uint64_t end)
{
    memset(sc, 0, sizeof(*sc));
    sc->fd = fd;
    sc->pos = pos;
    sc->end = end;
    tn_buf_init(&sc->buf);
}

/* The next frame: 0 (rec, seq, mark, *frame and *flen set; valid until the
 * next call), UV_EOF at a clean end, TN_ESHORT (the file ends inside a
 * frame), TN_ECORRUPT, or an I/O error. sc->pos stays at a bad frame. */
static int scan_next(scan_t *sc, tn_irec_t *rec, uint64_t *seq, uint32_t *mark,
                     const unsigned char **frame, size_t *flen)
{
    if (sc->pos >= sc->end)
        return UV_EOF;
    size_t need = TN_ILOG_HDR;
    for (;;) {
        uint64_t have_from = sc->pos - sc->buf_pos;
        if (sc->buf_pos <= sc->pos && have_from <= sc->buf.len) {
            size_t avail = sc->buf.len - (size_t)have_from;
            /* No buffer yet (base NULL) holds nothing: no pointer into it. */
            const unsigned char *p =
                avail > 0 ? (const unsigned char *)sc->buf.base + have_from : NULL;
            size_t used = 0;
            int rc = avail > 0 ? tn_irec_decode(p, avail, rec, seq, &used, mark) : TN_ESHORT;
            if (rc == 0) {
                *frame = p;
                *flen = used;
                sc->pos += used;
                return 0;
            }
            if (rc != TN_ESHORT)
                return rc;
            if (sc->buf_pos + sc->buf.len >= sc->end)
                return TN_ESHORT; /* nothing more in the file */
            need = TN_MAX(need, used);
            if (avail >= need)
                need = avail + 1;
        }
        /* Refill from pos: at least a chunk, at least the frame. */
        uint64_t left = sc->end - sc->pos;
        size_t want = (size_t)TN_MIN(left, (uint64_t)TN_MAX((size_t)CHUNK, need));
        tn_buf_reset(&sc->buf);
        if (tn_buf_reserve(&sc->buf, want) != 0)
            return UV_ENOMEM;
        size_t nread = 0;
        int rc = tn_io_pread(sc->fd, sc->buf.base, want, sc->pos, &nread);
        if (rc != 0)
            return rc;
        sc->buf.len = nread;
        sc->buf_pos = sc->pos;
        if (nread < want)
            sc->end = sc->pos + nread; /* the file is shorter than thought */
        if (nread == 0)
            return TN_ESHORT;
    }
}

static void scan_fini(scan_t *sc)
{
    tn_buf_fini(&sc->buf);
}

/* --- checkpoint file ---------------------------------------------------------- */

#define CKPT_FILE  "checkpoint"
#define CKPT_MAGIC 0x314B4E54u /* "TNK1" read as a little-endian u32 */

static int read_checkpoint(tn_ilog_t *l, uint64_t *out, char *err, size_t errlen)
{
    unsigned char p[8];
    int rc = tn_io_read_record_file(l->dir, CKPT_FILE, CKPT_MAGIC, p, sizeof(p));
    *out = 0;
    if (rc == UV_ENOENT)
        return 0;
    if (rc == TN_ECORRUPT)
        tn_errbuf(err, errlen, "ingress checkpoint %s/%s is damaged", l->dir, CKPT_FILE);
    else if (rc != 0)
        tn_errbuf(err, errlen, "cannot read ingress checkpoint %s/%s: %s", l->dir, CKPT_FILE,
                  tn_strerror(rc));
    else
        *out = tn_get_u64(p);
    return rc;
}

static int write_checkpoint(tn_ilog_t *l, uint64_t next)
{
    unsigned char p[8];
    tn_put_u64(p, next);
    return tn_io_write_record_file(l->dir, CKPT_FILE, CKPT_MAGIC, p, sizeof(p));
}

/* Point ckpt_stream and oldest_ms at the frame of seq ckpt (committer
 * thread, or open). Reading it is best effort: stats only. */
static void locate_checkpoint(tn_ilog_t *l, uint64_t ckpt)
{
    uv_mutex_lock(&l->lock);
    iseg_t *s = find_seg(l, ckpt);
    if (s == NULL) {
        l->ckpt_stream = l->stream_end;
        l->oldest_ms = 0;
        uv_mutex_unlock(&l->lock);
        return;
    }
    atomic_fetch_add(&s->refs, 1);
    note_t from = seg_find_note(s, ckpt);
    uint64_t end = s->size;
    uv_mutex_unlock(&l->lock);
    scan_t sc;
    scan_init(&sc, s->fd, from.pos, end);
    tn_irec_t rec;
    uint64_t seq;
    uint32_t mark;
    const unsigned char *f;
    size_t flen;
    for (;;) {
        uint64_t pos = sc.pos;
        if (scan_next(&sc, &rec, &seq, &mark, &f, &flen) != 0)
            break;
        if (seq == ckpt) {
            uv_mutex_lock(&l->lock);
            l->ckpt_stream = s->stream + pos;
            l->oldest_ms = rec.created_ms;
            uv_mutex_unlock(&l->lock);
            break;
        }
    }
    scan_fini(&sc);
    seg_unref(s);
}

/* --- recovery ---------------------------------------------------------------- */

/* Whether a valid frame after pos (in [pos+1, end) of fd) carries a sync
 * mark above pos: the bytes at pos had been durable. */
static int later_durable_frame(int fd, uint64_t pos, uint64_t end, bool *found)
{
    *found = false;
    if (end <= pos + 1)
        return 0;
    size_t len = (size_t)(end - pos - 1);
    unsigned char *buf = tn_malloc(len);
    if (buf == NULL)
        return UV_ENOMEM;
    size_t nread = 0;
    int rc = tn_io_pread(fd, buf, len, pos + 1, &nread);
    for (size_t i = 0; rc == 0 && i + TN_ILOG_HDR <= nread; i++) {
        if (tn_get_u32(buf + i) != TN_ILOG_MAGIC)
            continue;
        tn_irec_t rec;
        uint64_t seq;
        size_t used;
        uint32_t mark;
        if (tn_irec_decode(buf + i, nread - i, &rec, &seq, &used, &mark) == 0 && mark > pos) {
            *found = true;
            break;
        }
    }
    tn_free(buf);
    return rc;
}

/* Open and scan one segment (the last one may have a torn tail); its
 * first frame must carry seq base. */
static int recover_segment(tn_ilog_t *l, uint64_t base, bool last, uint64_t stream, iseg_t **out,
                           char *err, size_t errlen)
{
    iseg_t *s;
    int rc = seg_new(l, base, &s);
    if (rc != 0)
        return rc;
    s->stream = stream;
    uint64_t fsize = 0;
    rc = tn_io_open(s->path, last ? O_RDWR : O_RDONLY, 0, &s->fd);
    if (rc == 0)
        rc = tn_io_fsize(s->fd, &fsize);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot open ingress segment %s: %s", s->path, tn_strerror(rc));
        goto fail;
    }
    scan_t sc;
    scan_init(&sc, s->fd, 0, fsize);
    tn_irec_t rec;
    uint64_t seq;
    uint32_t mark;
    const unsigned char *f;
    size_t flen;
    for (;;) {
        uint64_t pos = sc.pos;
        rc = scan_next(&sc, &rec, &seq, &mark, &f, &flen);
        if (rc != 0)
            break;
        if (seq != base + s->count) {
            /* A whole, checked frame out of order is no torn write. */
            tn_errbuf(err, errlen,
                      "ingress segment %s: frame at byte %" PRIu64 " has seq %" PRIu64
                      ", expected %" PRIu64,
                      s->path, pos, seq, base + s->count);
            scan_fini(&sc);
            rc = TN_ECORRUPT;
            goto fail;
        }
        seg_note(s, seq, pos);
        s->count++;
        s->size = sc.pos;
    }
    scan_fini(&sc);
    if (rc != UV_EOF && rc != TN_ESHORT && rc != TN_ECORRUPT) {
        tn_errbuf(err, errlen, "cannot read ingress segment %s: %s", s->path, tn_strerror(rc));
        goto fail;
    }
    if (rc != UV_EOF) {
        const char *what = rc == TN_ESHORT ? "incomplete frame" : "bad frame";
        bool durable = false;
        if (last && (rc = later_durable_frame(s->fd, s->size, fsize, &durable)) != 0) {
            tn_errbuf(err, errlen, "cannot read ingress segment %s: %s", s->path, tn_strerror(rc));
            goto fail;
        }
        if (!last || durable) {
            tn_errbuf(
                err, errlen, "ingress segment %s: %s at byte %" PRIu64 "%s", s->path, what, s->size,
                last ? " below a later frame that had been made durable" : " in a sealed segment");
            rc = TN_ECORRUPT;
            goto fail;
        }
        TN_LOG(TN_LOG_WARN,
               "ingress log: truncating torn tail of segment %s: %" PRIu64
               " bytes after byte %" PRIu64 " (%" PRIu64 " records kept)",
               s->path, fsize - s->size, s->size, s->count);
        rc = tn_io_ftruncate(s->fd, s->size);
        if (rc == 0)
            rc = tn_io_fdatasync(s->fd);
        if (rc != 0) {
            tn_errbuf(err, errlen, "cannot truncate ingress segment %s: %s", s->path,
                      tn_strerror(rc));
            goto fail;
        }
    }
    s->synced = s->size;
    *out = s;
    return 0;
fail:
    seg_unref(s);
    return rc;
}

/* Create an empty segment file at base, durable in the directory. */
static int create_segment(tn_ilog_t *l, uint64_t base, uint64_t stream, iseg_t **out)
{
    iseg_t *s;
    int rc = seg_new(l, base, &s);
    if (rc != 0)
        return rc;
    s->stream = stream;
    rc = tn_io_open(s->path, O_RDWR | O_CREAT | O_EXCL, 0644, &s->fd);
    if (rc == 0 && (rc = tn_io_fsync_dir(l->dir)) != 0)
        latch(l, rc, "fsync of the directory after creating %s", s->path);
    if (rc != 0) {
        seg_unref(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int recover(tn_ilog_t *l, char *err, size_t errlen)
{
    uint64_t ckpt;
    int rc = read_checkpoint(l, &ckpt, err, errlen);
    if (rc != 0)
        return rc;
    uint64_t *bases = NULL;
    size_t n = 0;
    rc = tn__seg_list(l->dir, &bases, &n);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot list %s: %s", l->dir, tn_strerror(rc));
        return rc;
    }
    /* Finish a compaction a crash interrupted: what it may delete goes
     * first (oldest first, as compaction does), then the rest is checked. */
    size_t first = 0;
    while (first + 1 < n && bases[first + 1] <= ckpt) {
        char name[64], path[4096];
        tn_seg_name(bases[first], "log", name, sizeof(name));
        if (tn_io_path(path, sizeof(path), "%s/%s", l->dir, name) == 0 && tn_io_unlink(path) != 0)
            break;
        first++;
    }
    if (first > 0 && (rc = tn_io_fsync_dir(l->dir)) != 0) {
        tn_errbuf(err, errlen, "cannot fsync %s: %s", l->dir, tn_strerror(rc));
        goto out;
    }
    if (first == n) {
        if (ckpt > 0) {
            tn_errbuf(err, errlen,
                      "ingress checkpoint %" PRIu64 " is ahead of the recovered next seq 0 (no "
                      "segments in %s)",
                      ckpt, l->dir);
            rc = TN_ECORRUPT;
            goto out;
        }
        iseg_t *s;
        rc = create_segment(l, 0, 0, &s);
        if (rc == 0 && (rc = push_seg(l, s)) != 0)
            seg_unref(s);
        if (rc != 0)
            tn_errbuf(err, errlen, "cannot create the first ingress segment in %s: %s", l->dir,
                      tn_strerror(rc));
        goto out;
    }
    if (bases[first] > ckpt) {
        tn_errbuf(err, errlen,
                  "ingress segment %020" PRIu64 ".log starts above the checkpoint %" PRIu64
                  ": records between are missing",
                  bases[first], ckpt);
        rc = TN_ECORRUPT;
        goto out;
    }
    uint64_t stream = 0;
    for (size_t i = first; i < n; i++) {
        if (l->nsegs > 0) {
            const iseg_t *prev = active_seg(l);
            if (bases[i] != prev->base + prev->count) {
                tn_errbuf(err, errlen,
                          "ingress segment %020" PRIu64 ".log starts at seq %" PRIu64
                          ", the one before ends at %" PRIu64,
                          bases[i], bases[i], prev->base + prev->count);
                rc = TN_ECORRUPT;
                goto out;
            }
        }
        iseg_t *s;
        rc = recover_segment(l, bases[i], i + 1 == n, stream, &s, err, errlen);
        if (rc != 0)
            goto out;
        if ((rc = push_seg(l, s)) != 0) {
            seg_unref(s);
            goto out;
        }
        stream += s->size;
        l->bytes += s->size;
    }
    const iseg_t *act = active_seg(l);
    uint64_t next = act->base + act->count;
    if (ckpt > next) {
        tn_errbuf(err, errlen,
                  "ingress checkpoint %" PRIu64 " is ahead of the recovered next seq %" PRIu64
                  " in %s",
                  ckpt, next, l->dir);
        rc = TN_ECORRUPT;
        goto out;
    }
    l->stream_end = stream;
    l->wnext = next;
    atomic_store(&l->next_seq, next);
    atomic_store(&l->durable_seq, next);
    atomic_store(&l->ckpt_seq, ckpt);
    locate_checkpoint(l, ckpt);
out:
    tn_free(bases);
    return rc;
}

static void ilog_free(tn_ilog_t *l)
{
    for (uint32_t i = 0; i < l->nsegs; i++)
        seg_unref(l->segs[i]);
    tn_free(l->segs);
    tn_free(l->iov);
    tn_free(l->pending);
    tn_free(l->pending_ms);
    uv_mutex_destroy(&l->lock);
    tn_free(l->dir);
    tn_free(l);
}

int tn_ilog_open_opts(tn_store_t *store, const tn_ilog_opts_t *opts, tn_ilog_t **out, char *err,
                      size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    if (opts->segment_bytes == 0) {
        tn_errbuf(err, errlen, "ingress segment size must be above 0");
        return UV_EINVAL;
    }
    if (store->ilog != NULL) {
        tn_errbuf(err, errlen, "the ingress log of %s is open already", store->path);
        return UV_EBUSY;
    }
    tn_ilog_t *l = tn_calloc(1, sizeof(*l));
    if (l == NULL)
        return UV_ENOMEM;
    l->store = store;
    l->opts = *opts;
    int rc = uv_mutex_init(&l->lock);
    if (rc != 0) {
        tn_free(l);
        return rc;
    }
    char dir[4096];
    rc = tn_io_path(dir, sizeof(dir), "%s/ingress", store->path);
    if (rc == 0 && (l->dir = tn_strdup(dir)) == NULL)
        rc = UV_ENOMEM;
    if (rc != 0) {
        ilog_free(l);
        return rc;
    }
    rc = tn_io_mkdir_p(dir, 0755);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot create %s: %s", dir, tn_strerror(rc));
        ilog_free(l);
        return rc;
    }
    rc = recover(l, err, errlen);
    if (rc != 0) {
        ilog_free(l);
        return rc;
    }
    /* The store closes it with itself if nobody did. */
    uv_mutex_lock(&store->open_lock);
    store->ilog = l;
    uv_mutex_unlock(&store->open_lock);
    *out = l;
    return 0;
}

int tn_ilog_open(tn_store_t *store, tn_ilog_t **out, char *err, size_t errlen)
{
    tn_ilog_opts_t o = {.segment_bytes = TN_ILOG_SEGMENT_BYTES,
                        .rotate_bytes = TN_ILOG_ROTATE_BYTES};
    return tn_ilog_open_opts(store, &o, out, err, errlen);
}

/* --- appends ------------------------------------------------------------------ */

static void append_done(tn__sreq_t *s)
{
    tn_ilog_append_t *a = (tn_ilog_append_t *)s;
    tn_free(a->hdrs);
    a->hdrs = NULL;
    a->cb(a, s->status);
}

int tn_ilog_append(tn_ilog_t *l, tn_ilog_append_t *a, const tn_irec_t *recs, uint32_t n,
                   tn_ilog_cb cb)
{
    if (n == 0 || recs == NULL || cb == NULL)
        return UV_EINVAL;
    if (l->closing)
        return TN_ECLOSED;
    int err = atomic_load(&l->err);
    if (err != 0)
        return err;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        const tn_irec_t *r = &recs[i];
        if (r->topic.len == 0 || r->topic.len > TN_ILOG_MAX_TOPIC || r->deliver_at_ms < 0)
            return UV_EINVAL;
        if (r->key.len > TN_ILOG_MAX_KEY || r->body.len > l->store->opts.max_body ||
            r->body.len > TN_ILOG_MAX_BODY)
            return TN_ETOOBIG;
        bytes += tn_irec_size(r);
    }
    if (tn_store_disk_high(l->store))
        return TN_EDISKHIGH;
    a->hdrs = tn_malloc((size_t)n * HDRS_SIZE);
    if (a->hdrs == NULL)
        return UV_ENOMEM;
    a->s.next = NULL;
    a->s.bytes = bytes;
    a->s.status = 0;
    a->s.exec = NULL;
    a->s.done = append_done;
    a->log = l;
    a->recs = recs;
    a->nrecs = n;
    a->cb = cb;
    a->rnext = NULL;
    a->first_seq = 0;
    tn__committer_submit(&l->store->logc, &a->s);
    return 0;
}

tn__sreq_t *tn__ilog_take(tn__sreq_t **round)
{
    tn__sreq_t *taken = NULL, **tt = &taken, **rp = round;
    while (*rp != NULL) {
        tn__sreq_t *s = *rp;
        if (s->done == append_done) {
            *rp = s->next;
            s->next = NULL;
            *tt = s;
            tt = &s->next;
        } else {
            rp = &s->next;
        }
    }
    return taken;
}

static void fail_from(tn_ilog_append_t *from, int err)
{
    for (tn_ilog_append_t *a = from; a != NULL; a = a->rnext) {
        if (a->s.status == 0)
            a->s.status = err;
    }
}

static int reserve(tn_ilog_t *l, size_t niov, size_t nrecs)
{
    if (niov > l->iov_cap) {
        size_t cap = TN_MAX(niov, l->iov_cap * 2);
        tn_iov_t *p = tn_realloc(l->iov, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        l->iov = p;
        l->iov_cap = cap;
    }
    if (nrecs > l->pending_cap) {
        size_t cap = TN_MAX(nrecs, l->pending_cap * 2);
        note_t *p = tn_realloc(l->pending, cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        l->pending = p;
        int64_t *m = tn_realloc(l->pending_ms, cap * sizeof(*m));
        if (m == NULL)
            return UV_ENOMEM;
        l->pending_ms = m;
        l->pending_cap = cap;
    }
    return 0;
}

/* Write the gathered iovs at the active segment's end, then publish the
 * frames (their seqs and positions in l->pending) to readers. */
static int flush(tn_ilog_t *l, size_t niov, size_t nframes, uint64_t wend)
{
    if (niov == 0)
        return 0;
    iseg_t *s = active_seg(l);
    int rc = tn_io_pwritev(s->fd, l->iov, (int)niov, s->size);
    if (rc != 0) {
        /* A full disk's short write may have put whole frames in the
         * file: the cut is synced before their appends are answered, else
         * a crash could keep them (the cut lost with the page cache) and
         * bring back appends answered with the error. */
        bool space = tn_io_nospace(rc);
        int cut = space ? tn_io_cut_back(s->fd, s->size) : 0;
        if (space && cut == 0) {
            l->wnext = atomic_load(&l->next_seq); /* this flush's seqs go back */
            TN_LOG_RL(TN_LOG_ERROR, 60000, "ingress log: writing segment %s: %s", s->path,
                      tn_strerror(rc));
        } else {
            latch(l, cut != 0 ? cut : rc, "%s segment %s",
                  cut != 0 ? "cutting back after a full disk" : "writing", s->path);
        }
        return rc;
    }
    uv_mutex_lock(&l->lock);
    uint64_t ckpt = atomic_load(&l->ckpt_seq);
    for (size_t i = 0; i < nframes; i++) {
        seg_note(s, l->pending[i].seq, l->pending[i].pos);
        if (l->pending[i].seq == ckpt) {
            /* The first record above a caught-up checkpoint. */
            l->ckpt_stream = s->stream + l->pending[i].pos;
            l->oldest_ms = l->pending_ms[i];
        }
    }
    uint64_t grew = wend - s->size;
    s->count += nframes;
    s->size = wend;
    l->bytes += grew;
    l->stream_end += grew;
    uv_mutex_unlock(&l->lock);
    atomic_store(&l->next_seq, l->pending[nframes - 1].seq + 1);
    return 0;
}

/* fdatasync the active segment and create the next at wnext. */
static int rotate(tn_ilog_t *l)
{
    iseg_t *old = active_seg(l);
    int rc = tn_io_fdatasync(old->fd);
    if (rc != 0) {
        latch(l, rc, "fdatasync of segment %s before rotating", old->path);
        return rc;
    }
    old->synced = old->size;
    atomic_store(&l->durable_seq, old->base + old->count);
    iseg_t *s;
    rc = create_segment(l, l->wnext, old->stream + old->size, &s);
    if (tn_io_nospace(rc)) {
        TN_LOG_RL(TN_LOG_ERROR, 60000, "ingress log: creating segment %020" PRIu64 ".log: %s",
                  l->wnext, tn_strerror(rc));
        return rc; /* the old one stays active; the next round rotates again */
    }
    if (rc != 0) {
        latch(l, rc, "creating segment %020" PRIu64 ".log", l->wnext);
        return rc;
    }
    uv_mutex_lock(&l->lock);
    rc = push_seg(l, s);
    uv_mutex_unlock(&l->lock);
    if (rc != 0) {
        seg_unref(s);
        latch(l, rc, "adding segment %020" PRIu64 ".log", l->wnext);
    }
    return rc;
}

static void write_log(tn_ilog_t *l)
{
    size_t niov_max = 0, nrecs_max = 0;
    for (tn_ilog_append_t *a = l->rhead; a != NULL; a = a->rnext) {
        niov_max += 6 * (size_t)a->nrecs;
        nrecs_max += a->nrecs;
    }
    if (reserve(l, niov_max, nrecs_max) != 0) {
        fail_from(l->rhead, UV_ENOMEM);
        return;
    }
    uint64_t limit = l->opts.segment_bytes;
    iseg_t *s = active_seg(l);
    uint64_t pos = s->size;
    size_t niov = 0, nframes = 0;
    tn_ilog_append_t *group = l->rhead;
    for (tn_ilog_append_t *a = l->rhead; a != NULL; a = a->rnext) {
        int err = atomic_load(&l->err);
        if (err != 0) {
            fail_from(group, err);
            return;
        }
        if (pos > 0 && pos + a->s.bytes > limit) {
            int rc = flush(l, niov, nframes, pos);
            if (rc != 0) {
                fail_from(group, rc);
                return;
            }
            /* What was flushed is synced by the rotation: when that
             * fails, so do they (the power-loss test caught them
             * acknowledged); when only the next segment's create does
             * (a full disk, not latched), they stand. */
            if ((rc = rotate(l)) != 0) {
                fail_from(atomic_load(&l->err) != 0 ? group : a, rc);
                return;
            }
            s = active_seg(l);
            pos = 0;
            niov = nframes = 0;
            group = a;
        }
        a->first_seq = l->wnext;
        uint32_t mark = (uint32_t)TN_MIN(s->synced, (uint64_t)UINT32_MAX);
        for (uint32_t i = 0; i < a->nrecs; i++) {
            const tn_irec_t *r = &a->recs[i];
            unsigned char *h = a->hdrs + (size_t)i * HDRS_SIZE;
            encode_hdrs(h, r, l->wnext, mark);
            l->iov[niov++] = tn_iov(h, HEAD_LEN);
            l->iov[niov++] = r->topic;
            l->iov[niov++] = tn_iov(h + KLEN_OFF, 2);
            if (r->key.len > 0)
                l->iov[niov++] = r->key;
            l->iov[niov++] = tn_iov(h + TAIL_OFF, TAIL_LEN);
            if (r->body.len > 0)
                l->iov[niov++] = r->body;
            l->pending[nframes].seq = l->wnext;
            l->pending[nframes].pos = pos;
            l->pending_ms[nframes] = r->created_ms;
            nframes++;
            l->wnext++;
            pos += tn_irec_size(r);
        }
    }
    int err = atomic_load(&l->err);
    int rc = err != 0 ? err : flush(l, niov, nframes, pos);
    if (rc != 0)
        fail_from(group, rc);
    else
        l->wrote = true;
}

/* Group the appends by log (in practice there is one) into l->rhead. */
static tn_ilog_t *group_by_log(tn__sreq_t *appends)
{
    tn_ilog_t *logs = NULL, *tail = NULL;
    for (tn__sreq_t *s = appends; s != NULL; s = s->next) {
        tn_ilog_append_t *a = (tn_ilog_append_t *)s;
        tn_ilog_t *l = a->log;
        if (!l->in_round) {
            l->in_round = true;
            l->wrote = false;
            l->rhead = l->rtail = NULL;
            l->rnext = NULL;
            if (tail != NULL)
                tail->rnext = l;
            else
                logs = l;
            tail = l;
        }
        a->rnext = NULL;
        if (l->rtail != NULL)
            l->rtail->rnext = a;
        else
            l->rhead = a;
        l->rtail = a;
    }
    return logs;
}

void tn__ilog_write(tn__committer_t *c, tn__sreq_t *appends)
{
    (void)c;
    for (tn_ilog_t *l = group_by_log(appends); l != NULL; l = l->rnext)
        write_log(l);
}

void tn__ilog_sync(tn__committer_t *c, tn__sreq_t *appends)
{
    if (appends == NULL)
        return;
    /* The logs are still linked from the write step, through the first
     * append's log. */
    tn_ilog_t *logs = ((tn_ilog_append_t *)appends)->log;
    for (tn_ilog_t *l = logs, *next; l != NULL; l = next) {
        next = l->rnext;
        if (l->wrote) {
            iseg_t *s = active_seg(l);
            int rc = tn_io_fdatasync(s->fd);
            if (rc != 0) {
                latch(l, rc, "fdatasync of segment %s", s->path);
                fail_from(l->rhead, rc);
            } else {
                s->synced = s->size;
                atomic_store(&l->durable_seq, l->wnext);
            }
        }
        l->in_round = false;
        l->rnext = NULL;
        l->rhead = l->rtail = NULL;
    }
    tn__sreq_t *tail = appends;
    while (tail->next != NULL)
        tail = tail->next;
    tn__store_complete(c->store, appends, tail);
}

/* --- reads -------------------------------------------------------------------- */

typedef struct {
    uint64_t seq;
    size_t off; /* of its frame in the batch's memory */
} found_t;

int tn_ilog_read(tn_ilog_t *l, uint64_t from, uint32_t max_recs, size_t max_bytes,
                 tn_ilog_batch_t *out)
{
    memset(out, 0, sizeof(*out));
    out->next = from;
    if (max_recs == 0 || from > atomic_load(&l->next_seq))
        return UV_EINVAL;
    uint64_t durable = atomic_load(&l->durable_seq);
    tn_buf_t mem;
    tn_buf_init(&mem);
    found_t *found = NULL;
    size_t nfound = 0, found_cap = 0;
    uint64_t seq = from;
    int rc = 0;
    bool full = false;
    while (!full && rc == 0 && nfound < max_recs && seq < durable) {
        uv_mutex_lock(&l->lock);
        if (seq < l->segs[0]->base) {
            uv_mutex_unlock(&l->lock);
            rc = UV_ERANGE; /* compaction removed it (only from the first pass) */
            break;
        }
        iseg_t *s = find_seg(l, seq);
        if (s == NULL) {
            uv_mutex_unlock(&l->lock);
            break;
        }
        atomic_fetch_add(&s->refs, 1);
        note_t start = seg_find_note(s, seq);
        uint64_t end = s->size;
        uv_mutex_unlock(&l->lock);

        scan_t sc;
        scan_init(&sc, s->fd, start.pos, end);
        uint64_t expect = start.seq;
        for (;;) {
            tn_irec_t rec;
            uint64_t fseq;
            uint32_t mark;
            const unsigned char *f;
            size_t flen;
            uint64_t pos = sc.pos;
            int src = scan_next(&sc, &rec, &fseq, &mark, &f, &flen);
            if (src == UV_EOF)
                break;
            if (src == 0 && fseq != expect)
                src = TN_ECORRUPT;
            if (src != 0) {
                rc = src == TN_ESHORT ? TN_ECORRUPT : src;
                if (rc == TN_ECORRUPT)
                    latch(l, rc, "segment %s: bad frame at byte %" PRIu64 " while reading", s->path,
                          pos);
                break;
            }
            expect++;
            if (fseq < seq)
                continue;
            if (fseq >= durable || nfound == max_recs) {
                full = true;
                break;
            }
            if (nfound > 0 && mem.len + flen > max_bytes) {
                full = true;
                break;
            }
            if (nfound == found_cap) {
                size_t cap = found_cap ? found_cap * 2 : 64;
                found_t *p = tn_realloc(found, cap * sizeof(*p));
                if (p == NULL) {
                    rc = UV_ENOMEM;
                    break;
                }
                found = p;
                found_cap = cap;
            }
            found[nfound].seq = fseq;
            found[nfound].off = mem.len;
            if ((rc = tn_buf_append(&mem, f, flen)) != 0)
                break;
            nfound++;
            seq = fseq + 1;
        }
        scan_fini(&sc);
        seg_unref(s);
    }
    if (rc == UV_ERANGE && nfound > 0)
        rc = 0;
    if (rc == 0 && nfound > 0) {
        out->recs = tn_calloc(nfound, sizeof(*out->recs));
        if (out->recs == NULL)
            rc = UV_ENOMEM;
    }
    if (rc != 0) {
        tn_free(found);
        tn_buf_fini(&mem);
        tn_free(out->recs);
        memset(out, 0, sizeof(*out));
        out->next = from;
        return rc;
    }
    for (size_t i = 0; i < nfound; i++) {
        size_t used;
        uint64_t fseq;
        int drc = tn_irec_decode(mem.base + found[i].off, mem.len - found[i].off, &out->recs[i].rec,
                                 &fseq, &used, NULL);
        TN_ASSERT(drc == 0 && fseq == found[i].seq);
        out->recs[i].seq = fseq;
    }
    out->n = (uint32_t)nfound;
    out->next = seq;
    out->bytes = mem.len;
    out->mem = mem.base; /* transferred to the batch */
    tn_free(found);
    return 0;
}

void tn_ilog_batch_fini(tn_ilog_batch_t *b)
{
    tn_free(b->recs);
    tn_free(b->mem);
    memset(b, 0, sizeof(*b));
}

/* --- checkpoint and compaction ------------------------------------------------------ */

/* Delete the segments whose successor starts at or below ckpt, oldest
 * first, rotating a large, wholly checkpointed active segment so it can
 * go too. Committer thread. Returns how many went, or an error. */
static int compact(tn_ilog_t *l, uint64_t ckpt, uint32_t *deleted)
{
    *deleted = 0;
    iseg_t *act = active_seg(l);
    if (act->count > 0 && act->size >= l->opts.rotate_bytes && l->wnext <= ckpt) {
        TN_ASSERT(act->base + act->count == l->wnext);
        int rc = rotate(l);
        if (rc != 0)
            return rc;
    }
    uv_mutex_lock(&l->lock);
    uint32_t k = 0;
    while (k + 1 < l->nsegs && l->segs[k + 1]->base <= ckpt)
        k++;
    uint32_t gone = 0;
    uint64_t freed = 0;
    for (; gone < k; gone++) {
        int rc = tn_io_unlink(l->segs[gone]->path);
        if (rc != 0 && rc != UV_ENOENT) {
            TN_LOG(TN_LOG_WARN, "ingress log: cannot delete %s: %s", l->segs[gone]->path,
                   tn_strerror(rc));
            break; /* oldest first: the next try starts here */
        }
        freed += l->segs[gone]->size;
    }
    iseg_t **victims = NULL;
    if (gone > 0) {
        victims = tn_malloc(gone * sizeof(*victims));
        if (victims != NULL)
            memcpy(victims, l->segs, gone * sizeof(*victims));
        memmove(l->segs, l->segs + gone, (l->nsegs - gone) * sizeof(*l->segs));
        l->nsegs -= gone;
        l->bytes -= freed;
    }
    uv_mutex_unlock(&l->lock);
    if (gone == 0)
        return 0;
    /* Readers holding a reference finish on the unlinked file. Without the
     * array (out of memory) the references leak rather than dangle. */
    for (uint32_t i = 0; victims != NULL && i < gone; i++)
        seg_unref(victims[i]);
    tn_free(victims);
    *deleted = gone;
    int rc = tn_io_fsync_dir(l->dir);
    if (rc != 0)
        latch(l, rc, "fsync of %s after deleting segments", l->dir);
    return rc;
}

static void ckpt_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_ilog_ckpt_t *req = (tn_ilog_ckpt_t *)s;
    tn_ilog_t *l = req->log;
    int rc = atomic_load(&l->err);
    if (rc == 0 && req->next > atomic_load(&l->ckpt_seq)) {
        rc = write_checkpoint(l, req->next);
        if (rc != 0) {
            latch(l, rc, "writing the checkpoint %" PRIu64, req->next);
        } else {
            atomic_store(&l->ckpt_seq, req->next);
            locate_checkpoint(l, req->next);
        }
    }
    if (rc == 0)
        rc = compact(l, atomic_load(&l->ckpt_seq), &req->deleted);
    s->status = rc;
    tn__store_complete(c->store, s, s);
}

static void ckpt_done(tn__sreq_t *s)
{
    tn_ilog_ckpt_t *req = (tn_ilog_ckpt_t *)s;
    req->cb(req, s->status);
}

int tn_ilog_checkpoint(tn_ilog_t *l, tn_ilog_ckpt_t *req, uint64_t next, tn_ilog_ckpt_cb cb)
{
    if (cb == NULL || next > atomic_load(&l->durable_seq))
        return UV_EINVAL;
    if (l->closing)
        return TN_ECLOSED;
    memset(&req->s, 0, sizeof(req->s));
    req->s.exec = ckpt_exec;
    req->s.done = ckpt_done;
    req->log = l;
    req->next = next;
    req->cb = cb;
    req->deleted = 0;
    tn__committer_submit(&l->store->logc, &req->s);
    return 0;
}

/* --- positions, stats, close ----------------------------------------------------- */

uint64_t tn_ilog_next_seq(const tn_ilog_t *l)
{
    return atomic_load(&((tn_ilog_t *)l)->next_seq);
}

uint64_t tn_ilog_durable_seq(const tn_ilog_t *l)
{
    return atomic_load(&((tn_ilog_t *)l)->durable_seq);
}

uint64_t tn_ilog_checkpoint_seq(const tn_ilog_t *l)
{
    return atomic_load(&((tn_ilog_t *)l)->ckpt_seq);
}

int tn_ilog_err(const tn_ilog_t *l)
{
    return atomic_load(&((tn_ilog_t *)l)->err);
}

const char *tn_ilog_errmsg(const tn_ilog_t *l)
{
    return l->errmsg;
}

void tn_ilog_stats(tn_ilog_t *l, tn_ilog_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    uv_mutex_lock(&l->lock);
    out->next_seq = atomic_load(&l->next_seq);
    out->durable_seq = atomic_load(&l->durable_seq);
    out->checkpoint_seq = atomic_load(&l->ckpt_seq);
    out->pending_records = out->next_seq - out->checkpoint_seq;
    out->pending_bytes = l->stream_end - l->ckpt_stream;
    out->oldest_pending_ms = out->pending_records > 0 ? l->oldest_ms : 0;
    out->segments = l->nsegs;
    out->bytes = l->bytes;
    uv_mutex_unlock(&l->lock);
    out->err = atomic_load(&l->err);
}

static void close_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn__store_complete(c->store, s, s);
}

static void close_done(tn__sreq_t *s)
{
    tn_ilog_t *l = TN_CONTAINER_OF(s, tn_ilog_t, close_req);
    tn_store_t *store = l->store;
    uv_mutex_lock(&store->open_lock);
    store->ilog = NULL;
    uv_mutex_unlock(&store->open_lock);
    tn_ilog_close_cb cb = l->close_cb;
    if (cb != NULL)
        cb(l);
    ilog_free(l);
    tn__store_closed_one(store);
}

void tn_ilog_close(tn_ilog_t *l, tn_ilog_close_cb cb)
{
    if (l->closing)
        return;
    l->closing = true;
    l->close_cb = cb;
    memset(&l->close_req, 0, sizeof(l->close_req));
    l->close_req.exec = close_exec;
    l->close_req.done = close_done;
    l->store->closing++;
    tn__committer_submit(&l->store->logc, &l->close_req);
}
