/* Online backup sessions: the /v1/backup routes (see backup.h for the
 * design). The loop thread owns the sessions; a worker job (libuv's
 * thread pool) does each session's file work (links, copies, scans and
 * CRCs), each download's read and each removal, and hands its result back
 * in its after-work callback.
 *
 * Threads: the loop thread, and the thread pool for the jobs' work
 * functions, which touch only their job. */
#include "core/platform.h"

#include "api/backup.h"

#include "api/v1/common.h"
#include "cluster/replica.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "meta/meta.h"
#include "storage/chanlog.h"
#include "storage/epochs.h"
#include "storage/io.h"
#include "storage/record.h"
#include "storage/store.h"
#include "storage/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SESSION_DIR   "backup"
#define META_FILE     "metastore.snapshot"
#define SCAN_BUF      (1024 * 1024)
#define PATH_MAX_LEN  4096
#define WAL_MAX_BYTES (80ull * 1024 * 1024) /* a WAL is refused above 64 MiB, plus its zeros */

typedef struct {
    char *path; /* relative to the data directory (and to the session's directory) */
    uint64_t len;
    uint32_t crc;
} bfile_t;

typedef struct session_s session_t;
struct session_s {
    tn_backup_t *bk;
    char id[33];
    int64_t created_ms;
    uint64_t used_at; /* loop ms of the last use */
    bfile_t *files;
    size_t nfiles;
    tn_buf_t manifest;
    uint32_t busy; /* downloads in flight */
    bool ready;    /* its files are in place (the POST was answered) */
    bool removing; /* deleted or expired: its directory goes once nothing reads it */
    session_t *next;
};

struct tn_backup_s {
    uv_loop_t *loop;
    tn_v1_t *v;
    tn_ilog_t *ilog;
    char *data_path;
    uint64_t node_id;
    int64_t ttl_ms;
    uv_timer_t timer;
    session_t *sessions;
    uint32_t jobs; /* worker jobs in flight */
    bool closing;
    bool timer_closed;
};

/* Once closing and no job runs: the sessions' memory and the module go
 * (their directories stay for the next start to remove). */
static void maybe_free(tn_backup_t *bk)
{
    if (!bk->closing || !bk->timer_closed || bk->jobs > 0)
        return;
    while (bk->sessions != NULL) {
        session_t *s = bk->sessions;
        bk->sessions = s->next;
        for (size_t i = 0; i < s->nfiles; i++)
            tn_free(s->files[i].path);
        tn_free(s->files);
        tn_buf_fini(&s->manifest);
        tn_free(s);
    }
    tn_free(bk->data_path);
    tn_free(bk);
}

/* --- files ---------------------------------------------------------------------- */

typedef struct {
    bfile_t *v;
    size_t n, cap;
    int err;          /* the first error, or 0 */
    char errmsg[512]; /* what failed, for the answer and the log */
} flist_t;

/* A path into out (PATH_MAX_LEN bytes); paths are short by construction
 * (names of at most 255 bytes), and one cut short would name no file. */
static void pathf(char *out, size_t n, const char *fmt, ...) TN_PRINTF(3, 4);
static void pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

/* Record the first failure: what was being done (fmt...) and rc. */
static void flist_fail(flist_t *l, int rc, const char *fmt, ...) TN_PRINTF(3, 4);
static void flist_fail(flist_t *l, int rc, const char *fmt, ...)
{
    if (l->err != 0)
        return;
    l->err = rc;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    pathf(l->errmsg, sizeof(l->errmsg), "%s: %s", what, tn_strerror(rc));
}

static void flist_add(flist_t *l, const char *rel, uint64_t len, uint32_t crc)
{
    if (l->err != 0)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        bfile_t *v = tn_realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            flist_fail(l, UV_ENOMEM, "%s", rel);
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    char *p = tn_strdup(rel);
    if (p == NULL) {
        flist_fail(l, UV_ENOMEM, "%s", rel);
        return;
    }
    l->v[l->n++] = (bfile_t){p, len, crc};
}

static void files_free(bfile_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tn_free(v[i].path);
    tn_free(v);
}

/* CRC32C of the first len bytes of path into *crc; 0, TN_ESHORT (the file
 * is shorter) or an error. */
static int crc_file(const char *path, uint64_t len, unsigned char *buf, uint32_t *crc)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint32_t c = 0;
    uint64_t done = 0;
    int rc = 0;
    while (done < len) {
        size_t want = (size_t)TN_MIN(len - done, (uint64_t)SCAN_BUF);
        ssize_t n = pread(fd, buf, want, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0) {
            rc = TN_ESHORT;
            break;
        }
        c = tn_crc32c(c, buf, (size_t)n);
        done += (uint64_t)n;
    }
    close(fd);
    *crc = c;
    return rc;
}

/* The bytes of a segment that hold whole, valid batches below offset
 * `below`, counted from the file's start (records are back to back from
 * byte 0), into *end, and the offset after them into *next_off. The CRC
 * of each record is checked: a record below the durable end that does not
 * verify is damage, and the backup says so instead of copying it. */
static int scan_segment(const char *path, uint64_t base, uint64_t below, unsigned char *buf,
                        uint64_t *end, uint64_t *next_off)
{
    *end = 0;
    *next_off = base;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint64_t pos = 0, cur = base;
    int rc = 0;
    unsigned char *big = NULL;
    while (cur < below) {
        unsigned char hdr[TN_REC_HDR];
        ssize_t n = pread(fd, hdr, sizeof(hdr), (off_t)pos);
        if (n < 0) {
            rc = -errno;
            break;
        }
        tn_rec_hdr_t h;
        if ((size_t)n < sizeof(hdr) || tn_rec_decode_hdr(hdr, sizeof(hdr), &h) != 0 ||
            h.offset != cur) {
            /* The end of what was written (zeros ahead, or a gap the next
             * segment starts after): records stop here. */
            break;
        }
        uint64_t size = tn_rec_size(&h);
        unsigned char *rec = size <= SCAN_BUF ? buf : NULL;
        if (rec == NULL) {
            tn_free(big);
            big = tn_malloc((size_t)size);
            if (big == NULL) {
                rc = UV_ENOMEM;
                break;
            }
            rec = big;
        }
        n = pread(fd, rec, (size_t)size, (off_t)pos);
        if (n < 0) {
            rc = -errno;
            break;
        }
        if ((uint64_t)n < size)
            break;
        tn_rec_t r;
        if (tn_rec_decode(rec, (size_t)size, &r) != 0) {
            rc = TN_ECORRUPT;
            break;
        }
        pos += size;
        cur = h.offset + 1;
        /* A batch is kept whole: the durable end never falls inside one. */
        if (!(h.flags & TN_REC_F_MORE)) {
            *end = pos;
            *next_off = cur;
        }
    }
    tn_free(big);
    close(fd);
    return rc;
}

static bool digits20_ext(const char *name, const char *ext, uint64_t *base)
{
    size_t n = strlen(name), e = strlen(ext);
    if (n != 20 + e || strcmp(name + 20, ext) != 0)
        return false;
    uint64_t b = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        b = b * 10 + (uint64_t)(name[i] - '0');
    }
    *base = b;
    return true;
}

static bool has_suffix(const char *name, const char *suf, size_t *stem)
{
    size_t n = strlen(name), s = strlen(suf);
    if (n <= s || strcmp(name + n - s, suf) != 0)
        return false;
    *stem = n - s;
    return true;
}

static int mkdirs(const char *path)
{
    char p[PATH_MAX_LEN];
    pathf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* --- taking a session ------------------------------------------------------------ */

typedef struct {
    char *topic;
    uint32_t partition;
    uint64_t durable_next; /* the end of the copy */
    uint64_t want;         /* written, not yet durable, at the POST: wait for it; 0 when not */
    char *isolated; /* isolated for damage at the POST: why (its errmsg, owned); NULL when not */
    /* The creation time of the topic's record at the POST, which its
     * directory's stamp holds (queue.h record_created_ms); 0: not known. */
    int64_t stamp;
    /* Set by the copy: the topic was deleted and made again since the
     * POST (its stamp names another record), so the partition's files
     * are the new topic's, copied up to what is durable of them
     * (take_segments), not to the old topic's durable end. */
    bool remade;
} part_t;

/* A channel log with records queued but not yet completed at the POST:
 * settles done before it (an NSQ FIN applies to the live cursor before
 * its WAL record is written; a /v1 ack is answered only after). */
typedef struct {
    char *topic;
    char *channel;
    uint32_t partition;
    uint64_t want; /* its submitted count at the POST: wait until that many completed */
} chan_t;

typedef struct {
    uv_work_t work;
    tn_backup_t *bk;
    session_t *s;
    tn_http_request_t *r; /* NULL once the client went away */
    uv_timer_t wait;      /* polls until what was written at the POST is durable */
    uint64_t wait_until;  /* loop ms */
    int wait_status;
    char wait_err[300];
    /* In: */
    part_t *parts;
    size_t nparts;
    chan_t *chans; /* only those to wait for */
    size_t nchans, chans_cap;
    bool ingress;
    uint64_t ingress_durable;
    tn_buf_t snap;
    uint64_t applied;
    tn_meta_peer_t *voters;
    size_t nvoters;
    /* Out: */
    flist_t files;
    uint32_t snap_crc;
    size_t stamps_left_out;       /* channel stamps that changed as the files were copied */
    size_t topic_stamps_left_out; /* topic stamps that did */
} take_t;

/* A channel's stamp as read before its files were copied (read_stamps). */
typedef struct {
    char *rel; /* topics/<topic>/<channel>.cstamp, owned */
    uint64_t stamp;
} cstamp_t;

typedef struct {
    const char *data; /* the data directory */
    const char *sess; /* the session's directory */
    unsigned char *buf;
    flist_t *l;
    /* the topics of the partitions taken and the directories holding no
     * partition with a pause file (list_bare), sorted, each once */
    const char **topics;
    size_t ntopics;
    char **bare; /* list_bare's names, owned */
    size_t nbare;
    int64_t *tstamps; /* each topic's stamp as read before its files were copied, or 0 */
    cstamp_t *stamps; /* sorted by rel */
    size_t nstamps;
    size_t *left_out;       /* take_t stamps_left_out */
    size_t *topic_left_out; /* take_t topic_stamps_left_out */
} ctx_t;

/* Link rel into the session and record it with its first len bytes
 * (UINT64_MAX: the whole file). 0, 1 when the file is gone (unlinked
 * since it was listed), or <0 (recorded in the list). A file replaced by
 * rename as it is linked (a channel's checkpoint, every 16 records at
 * --checkpoint-every=16) is linked in its new version, never taken for
 * gone (tn_io_link_current): a channel's WAL without its checkpoint is a
 * channel whose creation never finished, restored as a new one. */
static int pin_link(ctx_t *c, const char *rel, uint64_t len)
{
    char src[PATH_MAX_LEN], dst[PATH_MAX_LEN];
    pathf(src, sizeof(src), "%s/%s", c->data, rel);
    pathf(dst, sizeof(dst), "%s/%s", c->sess, rel);
    int rc = tn_io_link_current(src, dst);
    if (rc == UV_ENOENT)
        return 1;
    if (rc != 0) {
        flist_fail(c->l, rc, "link %s", rel);
        return c->l->err;
    }
    if (len == UINT64_MAX) {
        struct stat st;
        if (stat(dst, &st) != 0) {
            flist_fail(c->l, -errno, "stat %s", rel);
            return c->l->err;
        }
        len = (uint64_t)st.st_size;
    }
    uint32_t crc = 0;
    rc = crc_file(dst, len, c->buf, &crc);
    if (rc != 0) {
        flist_fail(c->l, rc, "read %s", rel);
        return rc;
    }
    flist_add(c->l, rel, len, crc);
    return c->l->err;
}

/* Copy a channel WAL's frames into the session: its bytes as they are
 * now, cut after the last frame of the dense, verified prefix (each frame
 * whole, its CRC right, its seq the previous one + 1). The WAL is
 * truncated and written again from byte 0 at each checkpoint, so a copy
 * read while that happens may hold the old file's frames up to some byte
 * and the new file's after it; the new file's frames continue the seq of
 * the checkpoint, not of the old frames, so the cut falls at the seam, and
 * every frame the cut drops was written after the backup started (or was
 * folded into the newer checkpoint, which is linked after this copy).
 * Cutting also drops the zeroed space ahead and a torn last frame, which
 * recovery would drop too. */
static int pin_wal(ctx_t *c, const char *rel)
{
    char src[PATH_MAX_LEN], dst[PATH_MAX_LEN];
    pathf(src, sizeof(src), "%s/%s", c->data, rel);
    pathf(dst, sizeof(dst), "%s/%s", c->sess, rel);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        if (errno == ENOENT)
            return 1;
        flist_fail(c->l, -errno, "open %s", rel);
        return c->l->err;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = 0;
    for (;;) {
        if (tn_buf_size(&b) > WAL_MAX_BYTES) {
            rc = TN_ETOOBIG;
            break;
        }
        ssize_t n = read(in, c->buf, SCAN_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        if ((rc = tn_buf_append(&b, c->buf, (size_t)n)) != 0)
            break;
    }
    close(in);
    if (rc != 0) {
        tn_buf_fini(&b);
        flist_fail(c->l, rc, "copy %s", rel);
        return rc;
    }
    const unsigned char *w = (const unsigned char *)tn_buf_data(&b);
    size_t len = tn_buf_size(&b), end = 0;
    uint64_t prev = 0;
    while (end < len) {
        tn_walrec_t r;
        uint64_t seq;
        uint32_t mark;
        size_t flen;
        if (tn_wal_decode(w + end, len - end, &r, &seq, &mark, &flen) != 0 ||
            (end > 0 && seq != prev + 1))
            break;
        prev = seq;
        end += flen;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0 || (end > 0 && write(out, w, end) != (ssize_t)end)) {
        flist_fail(c->l, out < 0 ? -errno : UV_EIO, "write the copy of %s", rel);
        if (out >= 0)
            close(out);
        tn_buf_fini(&b);
        return c->l->err;
    }
    close(out);
    flist_add(c->l, rel, end, tn_crc32c(0, w, end));
    tn_buf_fini(&b);
    return c->l->err;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The names in dir ending in ext with a 20-digit stem, as sorted bases. */
static int list_bases(const char *dir, const char *ext, uint64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -errno;
    size_t cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        uint64_t b;
        if (!digits20_ext(e->d_name, ext, &b))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            uint64_t *v = tn_realloc(*out, cap * sizeof(*v));
            if (v == NULL) {
                rc = UV_ENOMEM;
                break;
            }
            *out = v;
        }
        (*out)[(*n)++] = b;
    }
    closedir(d);
    if (*n > 1)
        qsort(*out, *n, sizeof(**out), cmp_u64);
    return rc;
}

/* A partition isolated for damage (tn_plog_err TN_ECORRUPT or
 * TN_EFORMAT at the POST): every segment and sidecar in its directory,
 * whole, as they stand. Its log's durable end says nothing of what was
 * acknowledged: an open that finds a bad record in a sealed segment stops
 * there (the log ends at the damaged batch, the segments after it are
 * not opened) and writes no damage record (the next open scans that
 * segment again and finds the damage again), so a copy cut at that end
 * would be a clean, shorter log, which the restored node would serve and
 * whose next offsets it would give again to new messages. Copied whole,
 * the restored directory is this one, the damaged bytes included: it
 * opens isolated for the same damage, and every acknowledged record is in
 * it for the repair (operations.md, "A damaged partition"). Nothing
 * appends to an isolated log; a link keeps each file's bytes. */
static void take_whole(ctx_t *c, const char *rel, const char *dir)
{
    static const char *const exts[] = {".log", ".idx"};
    for (size_t k = 0; k < 2 && c->l->err == 0; k++) {
        uint64_t *bases = NULL;
        size_t n = 0;
        int rc = list_bases(dir, exts[k], &bases, &n);
        if (rc != 0) {
            flist_fail(c->l, rc, "list %s", rel);
            return;
        }
        for (size_t i = 0; i < n && c->l->err == 0; i++) {
            char f[PATH_MAX_LEN];
            pathf(f, sizeof(f), "%s/%020" PRIu64 "%s", rel, bases[i], exts[k]);
            pin_link(c, f, UINT64_MAX);
        }
        tn_free(bases);
    }
}

/* Whether p's topic is no longer the one the POST saw: its directory's
 * stamp, read now, names another record (a topic deleted and made again
 * under the name is stamped before its first partition directory is made:
 * store.h tn_store_topic_stamp_write). False when the POST's was not
 * known, or when the directory (or its stamp) is gone or cannot be read:
 * a topic deleted since the POST leaves no files to copy, and a log found
 * short beside the POST's stamp is damage. */
static bool remade_since_post(const ctx_t *c, const part_t *p)
{
    char dir[PATH_MAX_LEN];
    pathf(dir, sizeof(dir), "%s/topics/%s", c->data, p->topic);
    int64_t now = 0;
    return p->stamp != 0 && tn_store_stamp_read_dir(dir, &now) == 0 && now != 0 && now != p->stamp;
}

/* fdatasync path's data: a segment of a topic made again since the POST,
 * whose records the copy takes up to their end as it finds it rather
 * than to a durable end the engine vouched for. */
static int sync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = tn_io_fdatasync(fd);
    close(fd);
    return rc;
}

/* A partition's segments that hold records below its durable end, each
 * cut at its last whole batch below it and its records' CRCs checked,
 * and the sidecars of all but the last. A log that ends below the
 * durable end, or a record below it that does not verify, is damage and
 * fails the backup, unless the topic was deleted and made again since
 * the POST (remade_since_post): then the files are another log under the
 * name, and p->remade set. A remade partition (found so before its
 * first segment) has its segments taken up to the end of their whole
 * records, the last one maybe still being appended, each synced once its
 * records are found (sync_path), so that what is copied is durable: the
 * new topic's log as it stands, its records past the old one's durable
 * end too. Found so here (made again as its segments were copied), the
 * segments before were taken up to the old end, and this one as far as
 * its records go; the topic's stamp then changed since the copy began,
 * so it is left out (take_topic_stamp). */
static void take_segments(ctx_t *c, part_t *p, const char *rel, const char *dir)
{
    flist_t *l = c->l;
    int rc;
    uint64_t *bases = NULL;
    size_t n = 0;
    if ((rc = list_bases(dir, ".log", &bases, &n)) != 0) {
        flist_fail(l, rc, "list %s", rel);
        return;
    }
    /* The segments that hold offsets below the durable end: those with a
     * base at or below it (one starting exactly there is kept, empty, so
     * the restored log goes on from that offset). */
    uint64_t below = p->remade ? UINT64_MAX : p->durable_next;
    size_t last = 0;
    bool any = false;
    for (size_t i = 0; i < n; i++)
        if (bases[i] <= below) {
            last = i;
            any = true;
        }
    for (size_t i = 0; any && i <= last && l->err == 0; i++) {
        char seg[PATH_MAX_LEN], src[PATH_MAX_LEN];
        pathf(seg, sizeof(seg), "%s/%020" PRIu64 ".log", rel, bases[i]);
        pathf(src, sizeof(src), "%s/%s", c->sess, seg);
        char from[PATH_MAX_LEN];
        pathf(from, sizeof(from), "%s/%s", c->data, seg);
        if ((rc = tn_io_link_current(from, src)) != 0) {
            if (rc == UV_ENOENT)
                continue; /* reclaimed by GC since the listing: every channel had settled it */
            flist_fail(l, rc, "link %s", seg);
            break;
        }
        uint64_t end = 0, next = 0;
        rc = scan_segment(src, bases[i], below, c->buf, &end, &next);
        bool short_end = rc == 0 && i == last && next < below;
        if ((rc == TN_ECORRUPT || short_end) && !p->remade && remade_since_post(c, p))
            p->remade = true;
        /* A remade log's bad record is where its records end for the copy
         * (one being written as it was read, or the new log's own damage,
         * which its node finds when it reads it). */
        bool stop = p->remade && rc == TN_ECORRUPT;
        if (rc != 0 && !stop) {
            flist_fail(l, rc, "scan %s", seg);
            break;
        }
        if (p->remade && (rc = sync_path(src)) != 0) {
            flist_fail(l, rc, "sync %s", seg);
            break;
        }
        uint32_t crc = 0;
        if ((rc = crc_file(src, end, c->buf, &crc)) != 0) {
            flist_fail(l, rc, "read %s", seg);
            break;
        }
        flist_add(l, seg, end, crc);
        if (short_end && !p->remade) {
            /* Durable records the log should hold are not there: damage,
             * said rather than copied short. */
            flist_fail(l, TN_ECORRUPT,
                       "%s ends at offset %" PRIu64 ", below the durable end %" PRIu64, seg, next,
                       p->durable_next);
            break;
        }
        /* A remade log whose records stop before the next segment's base
         * is copied up to there, without a gap. */
        if (stop || (p->remade && i < last && bases[i + 1] != next))
            break;
        if (i < last) {
            char idx[PATH_MAX_LEN];
            pathf(idx, sizeof(idx), "%s/%020" PRIu64 ".idx", rel, bases[i]);
            pin_link(c, idx, UINT64_MAX); /* a sealed segment's; rebuilt when missing */
        }
    }
    tn_free(bases);
}

/* One partition: its segments below the durable end (every one whole when
 * it is isolated for damage: take_whole), their sidecars, its
 * floor, epochs and damage files, its channels' WALs (copied) and then
 * their checkpoints (linked): a checkpoint taken between the two is newer
 * than the WAL copy, and recovery skips the WAL frames it already holds. */
static void take_partition(ctx_t *c, part_t *p)
{
    flist_t *l = c->l;
    char rel[PATH_MAX_LEN], dir[PATH_MAX_LEN], sdir[PATH_MAX_LEN];
    pathf(rel, sizeof(rel), "topics/%s/%" PRIu32, p->topic, p->partition);
    pathf(dir, sizeof(dir), "%s/%s", c->data, rel);
    pathf(sdir, sizeof(sdir), "%s/%s", c->sess, rel);
    int rc = mkdirs(sdir);
    if (rc != 0) {
        flist_fail(l, rc, "mkdir %s", sdir);
        return;
    }
    /* A topic made again since the POST: its partition is the new log,
     * neither the old one's durable end nor its isolation applies. */
    p->remade = remade_since_post(c, p);
    if (p->isolated != NULL && !p->remade)
        take_whole(c, rel, dir);
    else
        take_segments(c, p, rel, dir);
    if (l->err != 0)
        return;
    char fl[PATH_MAX_LEN];
    pathf(fl, sizeof(fl), "%s/floor", rel);
    if (pin_link(c, fl, UINT64_MAX) < 0)
        return;
    /* A replicated partition's epoch history (storage/epochs.h), after
     * its segments: a history at least as new as the records copied (a
     * new epoch is saved before its first record is written; entries past
     * the copied end are cut by recovery), so a restored replica finds
     * where its log parts from its leader's (KIP-279) instead of copying
     * it all again, and a restore of the whole cluster can choose the copy
     * to lead by it (cmd/ternctl/backup.c). Renamed into place at each
     * change, so the link keeps the version of now. */
    pathf(fl, sizeof(fl), "%s/" TN_EPOCHS_FILE, rel);
    if (pin_link(c, fl, UINT64_MAX) < 0)
        return;
    /* The damage record (storage-format.md, "Damage record"), after the
     * segments too (a partition that has one is isolated: copied whole):
     * without it, the restored copy's open would take a bad record in the
     * active segment's last synced batch for a torn tail and cut it, with
     * the acknowledged records after it, and give their offsets to new
     * ones. With it, the copy opens isolated as the original does, and a
     * whole cluster's restore does not choose it to lead (tn_plog_probe). */
    pathf(fl, sizeof(fl), "%s/damage", rel);
    if (pin_link(c, fl, UINT64_MAX) < 0)
        return;
    /* Channels: WALs first, then checkpoints. */
    for (int pass = 0; pass < 2 && l->err == 0; pass++) {
        DIR *d = opendir(dir);
        if (d == NULL) {
            if (errno != ENOENT) /* gone: the topic was deleted since the POST */
                flist_fail(l, -errno, "list %s", rel);
            return;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL && l->err == 0) {
            size_t stem;
            if (!has_suffix(e->d_name, pass == 0 ? ".wal" : ".ckpt", &stem))
                continue;
            char f[PATH_MAX_LEN];
            pathf(f, sizeof(f), "%s/%s", rel, e->d_name);
            if (pass == 0)
                pin_wal(c, f);
            else
                pin_link(c, f, UINT64_MAX);
        }
        closedir(d);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_stamp(const void *a, const void *b)
{
    return strcmp(((const cstamp_t *)a)->rel, ((const cstamp_t *)b)->rel);
}

/* c->topics: the topics of parts, sorted, each once (a follower's copy
 * may list one again). The names are borrowed from parts. */
static void list_topics(ctx_t *c, const part_t *parts, size_t nparts)
{
    if (nparts == 0)
        return;
    const char **names = tn_malloc(nparts * sizeof(*names));
    if (names == NULL) {
        flist_fail(c->l, UV_ENOMEM, "%s", "topic list");
        return;
    }
    for (size_t i = 0; i < nparts; i++)
        names[i] = parts[i].topic;
    qsort(names, nparts, sizeof(*names), cmp_str);
    size_t n = 0;
    for (size_t i = 0; i < nparts; i++)
        if (n == 0 || strcmp(names[i], names[n - 1]) != 0)
            names[n++] = names[i];
    c->topics = names;
    c->ntopics = n;
}

/* The topic directories that hold no partition but a pause file, added to
 * c->topics: a cluster node's pause of a topic or channel of which it
 * holds no copy (docs/cluster.md) makes one, for the topic's stamp, its
 * pause files and the channels' stamps. take_pauses takes them as it does
 * a topic's with partitions, so a node restored from the backup keeps
 * those pauses too. */
static void list_bare(ctx_t *c)
{
    char top[PATH_MAX_LEN];
    pathf(top, sizeof(top), "%s/topics", c->data);
    DIR *d = opendir(top);
    if (d == NULL)
        return; /* no topic here at all */
    struct dirent *e;
    size_t cap = 0;
    while ((e = readdir(d)) != NULL && c->l->err == 0) {
        const char *name = e->d_name;
        char dir[PATH_MAX_LEN];
        if (name[0] == '.' || strlen(name) > TN_NAME_MAX)
            continue;
        bool listed = c->ntopics > 0 &&
                      bsearch(&name, c->topics, c->ntopics, sizeof(*c->topics), cmp_str) != NULL;
        pathf(dir, sizeof(dir), "%s/%s", top, name);
        if (listed || !tn_store_dir_pause_only(dir))
            continue;
        if (c->nbare == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            char **v = tn_realloc(c->bare, ncap * sizeof(*v));
            if (v == NULL) {
                flist_fail(c->l, UV_ENOMEM, "%s", "topic list");
                break;
            }
            c->bare = v;
            cap = ncap;
        }
        if ((c->bare[c->nbare] = tn_strdup(name)) == NULL) {
            flist_fail(c->l, UV_ENOMEM, "%s", "topic list");
            break;
        }
        c->nbare++;
    }
    closedir(d);
    if (c->nbare == 0 || c->l->err != 0)
        return;
    const char **v = tn_realloc(c->topics, (c->ntopics + c->nbare) * sizeof(*v));
    if (v == NULL) {
        flist_fail(c->l, UV_ENOMEM, "%s", "topic list");
        return;
    }
    for (size_t i = 0; i < c->nbare; i++)
        v[c->ntopics + i] = c->bare[i];
    c->topics = v;
    c->ntopics += c->nbare;
    qsort(c->topics, c->ntopics, sizeof(*c->topics), cmp_str);
}

/* Each topic's stamp (`stamp`) and each channel stamp (`<channel>.cstamp`)
 * in the directories of c->topics, read before any partition's files are
 * copied, into c->tstamps and c->stamps: take_topic_stamp and take_stamp
 * keep a stamp only if it still reads the same after them. A stamp that
 * cannot be read is not listed (a topic's reads 0), so not kept. */
static void read_stamps(ctx_t *c)
{
    size_t cap = 0;
    if (c->ntopics > 0 && (c->tstamps = tn_calloc(c->ntopics, sizeof(*c->tstamps))) == NULL) {
        flist_fail(c->l, UV_ENOMEM, "%s", "topic stamps");
        return;
    }
    for (size_t i = 0; i < c->ntopics && c->l->err == 0; i++) {
        char dir[PATH_MAX_LEN];
        pathf(dir, sizeof(dir), "%s/topics/%s", c->data, c->topics[i]);
        if (tn_store_stamp_read_dir(dir, &c->tstamps[i]) != 0)
            c->tstamps[i] = 0;
        DIR *d = opendir(dir);
        if (d == NULL)
            continue; /* gone, or failing: take_partition says so */
        struct dirent *e;
        while ((e = readdir(d)) != NULL && c->l->err == 0) {
            size_t stem;
            if (!has_suffix(e->d_name, TN_STORE_CHAN_STAMP_SUFFIX, &stem) || stem >= 256)
                continue;
            char ch[256];
            pathf(ch, sizeof(ch), "%.*s", (int)stem, e->d_name);
            uint64_t stamp = 0;
            if (tn_store_channel_stamp_read_dir(dir, ch, &stamp) != 0 || stamp == 0)
                continue;
            if (c->nstamps == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                cstamp_t *v = tn_realloc(c->stamps, ncap * sizeof(*v));
                if (v == NULL) {
                    flist_fail(c->l, UV_ENOMEM, "%s", "channel stamps");
                    break;
                }
                c->stamps = v;
                cap = ncap;
            }
            char rel[PATH_MAX_LEN];
            pathf(rel, sizeof(rel), "topics/%s/%s", c->topics[i], e->d_name);
            if ((c->stamps[c->nstamps].rel = tn_strdup(rel)) == NULL) {
                flist_fail(c->l, UV_ENOMEM, "%s", "channel stamps");
                break;
            }
            c->stamps[c->nstamps++].stamp = stamp;
        }
        closedir(d);
    }
    if (c->nstamps > 1)
        qsort(c->stamps, c->nstamps, sizeof(*c->stamps), cmp_stamp);
}

/* A stamp's link dst (of rel) in the session: recorded in the list when
 * same (it holds what was read before the files were copied), else
 * removed and counted in *left_out. */
static void keep_stamp(ctx_t *c, const char *rel, const char *dst, bool same, size_t *left_out)
{
    int rc;
    if (!same) {
        (*left_out)++;
        if ((rc = tn_io_unlink(dst)) != 0)
            flist_fail(c->l, rc, "unlink the copy of %s", rel);
        return;
    }
    struct stat st;
    uint32_t crc = 0;
    if (stat(dst, &st) != 0) {
        flist_fail(c->l, -errno, "stat %s", rel);
        return;
    }
    if ((rc = crc_file(dst, (uint64_t)st.st_size, c->buf, &crc)) != 0) {
        flist_fail(c->l, rc, "read %s", rel);
        return;
    }
    flist_add(c->l, rel, (uint64_t)st.st_size, crc);
}

/* A channel's stamp into the session (rel: topics/<topic>/<channel>.cstamp,
 * name: its file name, stem bytes of it the channel), beside its pause
 * file already there (no stamp without a pause file: channel.c
 * load_paused). Kept only when it holds what read_stamps read before the
 * channel's files were copied: its id never comes back once the channel
 * is deleted, and files of a channel are never on disk beside another
 * channel's stamp (channel.c chan_create_work, chdel_work), so the copied
 * files are this record's. One that changed between (the channel deleted
 * or made again as the files were copied) is left out and counted: the
 * files may be either channel's. */
static void take_stamp(ctx_t *c, const char *rel, const char *name, size_t stem)
{
    char src[PATH_MAX_LEN], dst[PATH_MAX_LEN], sdir[PATH_MAX_LEN], ch[256];
    pathf(src, sizeof(src), "%s/%s", c->data, rel);
    pathf(dst, sizeof(dst), "%s/%s", c->sess, rel);
    pathf(sdir, sizeof(sdir), "%.*s", (int)(strlen(dst) - strlen(name) - 1), dst);
    pathf(ch, sizeof(ch), "%.*s", (int)stem, name);
    char pause[PATH_MAX_LEN];
    pathf(pause, sizeof(pause), "%s/%s" TN_STORE_CHAN_PAUSE_SUFFIX, sdir, ch);
    struct stat st;
    if (stat(pause, &st) != 0)
        return; /* no pause file taken: deleted since the listing */
    int rc = tn_io_link_current(src, dst);
    if (rc == UV_ENOENT)
        return; /* its channel was deleted since the listing */
    if (rc != 0) {
        flist_fail(c->l, rc, "link %s", rel);
        return;
    }
    uint64_t now = 0;
    cstamp_t key = {(char *)rel, 0};
    const cstamp_t *before =
        c->nstamps > 0 ? bsearch(&key, c->stamps, c->nstamps, sizeof(key), cmp_stamp) : NULL;
    keep_stamp(c, rel, dst,
               tn_store_channel_stamp_read_dir(sdir, ch, &now) == 0 && before != NULL &&
                   before->stamp == now,
               c->left_out);
}

/* Topic i's stamp (`topics/<topic>/stamp`) into the session, after every
 * other file of the topic (its partitions, pause files and channel
 * stamps). Kept only when it holds what read_stamps read before the first
 * file was copied: a topic's directory goes whole with its stamp at its
 * deletion (store.c tn_store_remove_topic), and one made again under the
 * name is stamped with its own record's creation time before its first
 * partition directory is made (another time: the comparison the catalog
 * makes, catalog.c stale), so the copied files are that record's. One
 * that changed, appeared or went meanwhile (the topic deleted or made
 * again as its files were copied) is left out and counted: the files
 * may be either topic's. */
static void take_topic_stamp(ctx_t *c, size_t i)
{
    char rel[PATH_MAX_LEN], src[PATH_MAX_LEN], dst[PATH_MAX_LEN], sdir[PATH_MAX_LEN];
    pathf(rel, sizeof(rel), "topics/%s/" TN_STORE_STAMP_FILE, c->topics[i]);
    pathf(src, sizeof(src), "%s/%s", c->data, rel);
    pathf(dst, sizeof(dst), "%s/%s", c->sess, rel);
    pathf(sdir, sizeof(sdir), "%s/topics/%s", c->sess, c->topics[i]);
    int64_t before = c->tstamps[i], now = 0;
    int rc = tn_io_link_current(src, dst);
    if (rc == UV_ENOENT) {
        if (before != 0)
            (*c->topic_left_out)++; /* deleted since: its copied files may be of either */
        return;
    }
    if (rc != 0) {
        flist_fail(c->l, rc, "link %s", rel);
        return;
    }
    keep_stamp(c, rel, dst,
               tn_store_stamp_read_dir(sdir, &now) == 0 && before != 0 && now == before,
               c->topic_left_out);
}

/* This node's pauses of the topics it holds a partition of, and of those
 * it holds none of whose directory a pause made (list_bare): each
 * channel's `<channel>.cpause` file and the topic's own `pause` file (its
 * hold points with it) in each topic's directory (renamed into place at
 * each pause and unpause, so a link keeps one whole version; a pause is
 * answered once its file is written, so one answered before the POST is
 * in the copy). Without them a restored node would start with every
 * channel unpaused (a channel without pause file nor stamp file:
 * channel.c load_paused) and every topic unpaused, resuming deliveries
 * that an operator stopped. Then each channel's stamp (`.cstamp`,
 * take_stamp), after its files and its pause file, and last the topic's
 * (`stamp`, take_topic_stamp): which records the copied files are of,
 * which `ternctl restore --rejoin` writes back (a plain restore writes
 * none of them back: docs/operations.md). Each topic once, after its
 * partitions. */
static void take_pauses(ctx_t *c)
{
    for (size_t i = 0; i < c->ntopics && c->l->err == 0; i++) {
        char rel[PATH_MAX_LEN], dir[PATH_MAX_LEN];
        pathf(rel, sizeof(rel), "topics/%s", c->topics[i]);
        pathf(dir, sizeof(dir), "%s/%s", c->data, rel);
        for (int pass = 0; pass < 2 && c->l->err == 0; pass++) {
            DIR *d = opendir(dir);
            if (d == NULL) {
                if (errno != ENOENT) /* gone: the topic was deleted since the POST */
                    flist_fail(c->l, -errno, "list %s", rel);
                break;
            }
            char sdir[PATH_MAX_LEN];
            pathf(sdir, sizeof(sdir), "%s/%s", c->sess, rel);
            int rc = pass == 0 ? mkdirs(sdir) : 0; /* a directory with no partition taken */
            if (rc != 0) {
                closedir(d);
                flist_fail(c->l, rc, "mkdir %s", sdir);
                break;
            }
            struct dirent *e;
            while ((e = readdir(d)) != NULL && c->l->err == 0) {
                size_t stem;
                char f[PATH_MAX_LEN];
                pathf(f, sizeof(f), "%s/%s", rel, e->d_name);
                if (pass == 1) {
                    if (has_suffix(e->d_name, TN_STORE_CHAN_STAMP_SUFFIX, &stem) && stem < 256)
                        take_stamp(c, f, e->d_name, stem);
                } else if (has_suffix(e->d_name, TN_STORE_CHAN_PAUSE_SUFFIX, &stem) ||
                           strcmp(e->d_name, TN_STORE_TOPIC_PAUSE_FILE) == 0) {
                    pin_link(c, f, UINT64_MAX); /* gone since the listing: channel deleted */
                }
            }
            closedir(d);
        }
        if (c->l->err == 0)
            take_topic_stamp(c, i);
    }
}

/* The bytes of an ingress segment holding whole frames with seq below
 * `below`, from the start. */
static int scan_ingress(const char *path, uint64_t below, unsigned char *buf, uint64_t *end)
{
    *end = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -errno;
    }
    uint64_t pos = 0, size = (uint64_t)st.st_size;
    int rc = 0;
    unsigned char *big = NULL;
    while (pos < size) {
        unsigned char hdr[20];
        ssize_t n = pread(fd, hdr, sizeof(hdr), (off_t)pos);
        if (n < (ssize_t)sizeof(hdr))
            break;
        uint32_t plen;
        memcpy(&plen, hdr + 4, 4);
        uint64_t flen = 20 + (uint64_t)plen;
        unsigned char *fr = flen <= SCAN_BUF ? buf : NULL;
        if (fr == NULL) {
            tn_free(big);
            if (flen > 256ull * 1024 * 1024 || (big = tn_malloc((size_t)flen)) == NULL)
                break;
            fr = big;
        }
        n = pread(fd, fr, (size_t)flen, (off_t)pos);
        if (n < 0 || (uint64_t)n < flen)
            break;
        tn_irec_t rec;
        uint64_t seq;
        size_t used;
        if (tn_irec_decode(fr, (size_t)flen, &rec, &seq, &used, NULL) != 0 || seq >= below)
            break;
        pos += used;
    }
    tn_free(big);
    close(fd);
    *end = pos;
    return rc;
}

/* The ingress log: segments first (compaction unlinks only segments whose
 * records are all below the checkpoint, which only moves up, so the
 * checkpoint read after the links still covers a segment that vanished),
 * then the checkpoint, written into the session lowered to the durable
 * seq (recovery refuses a checkpoint past its last record; a lower one
 * only dispatches some records again, which the owners take as
 * redeliveries). */
static void take_ingress(ctx_t *c, uint64_t durable)
{
    flist_t *l = c->l;
    char dir[PATH_MAX_LEN], sdir[PATH_MAX_LEN];
    pathf(dir, sizeof(dir), "%s/ingress", c->data);
    pathf(sdir, sizeof(sdir), "%s/ingress", c->sess);
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc = list_bases(dir, ".log", &bases, &n);
    if (rc != 0 || n == 0) {
        if (rc != 0)
            flist_fail(l, rc, "list %s", "ingress");
        tn_free(bases);
        return;
    }
    if ((rc = mkdirs(sdir)) != 0) {
        flist_fail(l, rc, "mkdir %s", sdir);
        tn_free(bases);
        return;
    }
    uint64_t first = UINT64_MAX;
    for (size_t i = 0; i < n && l->err == 0; i++) {
        if (bases[i] > durable)
            break;
        char rel[PATH_MAX_LEN], from[PATH_MAX_LEN], to[PATH_MAX_LEN];
        pathf(rel, sizeof(rel), "ingress/%020" PRIu64 ".log", bases[i]);
        pathf(from, sizeof(from), "%s/%s", c->data, rel);
        pathf(to, sizeof(to), "%s/%s", c->sess, rel);
        if ((rc = tn_io_link_current(from, to)) != 0) {
            if (rc == UV_ENOENT)
                continue;
            flist_fail(l, rc, "link %s", rel);
            break;
        }
        uint64_t end = 0;
        uint32_t crc = 0;
        if ((rc = scan_ingress(to, durable, c->buf, &end)) != 0 ||
            (rc = crc_file(to, end, c->buf, &crc)) != 0) {
            flist_fail(l, rc, "scan %s", rel);
            break;
        }
        if (first == UINT64_MAX)
            first = bases[i];
        flist_add(l, rel, end, crc);
    }
    tn_free(bases);
    if (l->err != 0 || first == UINT64_MAX)
        return;
    char ck[PATH_MAX_LEN];
    pathf(ck, sizeof(ck), "%s/checkpoint", dir);
    uint64_t ckpt = 0;
    int fd = open(ck, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        unsigned char b[16];
        ssize_t got = pread(fd, b, sizeof(b), 0);
        close(fd);
        uint32_t magic, crc;
        memcpy(&magic, b, 4);
        memcpy(&crc, b + 4, 4);
        if (got != 16 || magic != 0x314B4E54u || tn_crc32c(0, b + 8, 8) != crc) {
            flist_fail(l, TN_ECORRUPT, "read %s", "ingress/checkpoint");
            return;
        }
        memcpy(&ckpt, b + 8, 8);
    } else if (errno != ENOENT) {
        flist_fail(l, -errno, "open %s", "ingress/checkpoint");
        return;
    }
    if (ckpt > durable)
        ckpt = durable;
    if (ckpt < first)
        ckpt = first; /* the segments before the first kept one are all below it */
    unsigned char b[16];
    uint32_t magic = 0x314B4E54u;
    memcpy(b, &magic, 4);
    memcpy(b + 8, &ckpt, 8);
    uint32_t crc = tn_crc32c(0, b + 8, 8);
    memcpy(b + 4, &crc, 4);
    char to[PATH_MAX_LEN];
    pathf(to, sizeof(to), "%s/checkpoint", sdir);
    fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, b, sizeof(b)) != (ssize_t)sizeof(b)) {
        flist_fail(l, fd < 0 ? -errno : UV_EIO, "write %s", "ingress/checkpoint");
        if (fd >= 0)
            close(fd);
        return;
    }
    close(fd);
    flist_add(l, "ingress/checkpoint", sizeof(b), tn_crc32c(0, b, sizeof(b)));
}

#ifdef TN_TEST
/* TERN_TEST_BACKUP_TAKE_HOLD (ternd-test): the path of a file; while it
 * exists (at most 120 s), a session waits, so that a test can change the
 * cluster or the node between two of its steps: before the POST takes its
 * metastore snapshot and the durable ends (the file holding "post": the
 * loop goes on meanwhile, so the node's metastore follows the cluster and
 * its snapshot is the latest of the backup), at the start of the file
 * work, before anything is copied (the file empty: after the POST's
 * metastore snapshot, the wait for durable ends widened), or before the
 * pause files and the channels' and topics' stamps are taken (the file
 * holding "stamps": after the partitions' files were copied). A notice
 * says when the hold begins. */
static bool test_hold_at(const char *at)
{
    const char *path = getenv("TERN_TEST_BACKUP_TAKE_HOLD");
    if (path == NULL || path[0] == '\0')
        return false;
    char what[16] = "";
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(what, 1, sizeof(what) - 1, f);
    fclose(f);
    while (n > 0 && (what[n - 1] == '\n' || what[n - 1] == ' '))
        n--;
    what[n] = '\0';
    return strcmp(what, at) == 0;
}

static void take_test_hold(const session_t *s, const char *at)
{
    if (!test_hold_at(at))
        return;
    TN_LOG(TN_LOG_NOTICE, "backup %s: copying its files held%s%s (TERN_TEST_BACKUP_TAKE_HOLD)",
           s->id, at[0] != '\0' ? " before " : "", at);
    struct stat st;
    for (int i = 0; i < 120 * 20 && stat(getenv("TERN_TEST_BACKUP_TAKE_HOLD"), &st) == 0; i++)
        uv_sleep(50);
}
#else
#define take_test_hold(s, at) ((void)(s))
#endif

static void take_work(uv_work_t *w)
{
    take_t *t = w->data;
    flist_t *l = &t->files;
    take_test_hold(t->s, "");
    char sess[PATH_MAX_LEN];
    pathf(sess, sizeof(sess), "%s/" SESSION_DIR "/%s", t->bk->data_path, t->s->id);
    int rc = mkdirs(sess);
    if (rc != 0) {
        flist_fail(l, rc, "mkdir %s", sess);
        return;
    }
    unsigned char *buf = tn_malloc(SCAN_BUF);
    if (buf == NULL) {
        flist_fail(l, UV_ENOMEM, "%s", "scan buffer");
        return;
    }
    ctx_t c = {.data = t->bk->data_path,
               .sess = sess,
               .buf = buf,
               .l = l,
               .left_out = &t->stamps_left_out,
               .topic_left_out = &t->topic_stamps_left_out};
    list_topics(&c, t->parts, t->nparts);
    if (l->err == 0)
        list_bare(&c);
    if (l->err == 0)
        read_stamps(&c);
    /* The metastore's snapshot, as a file of the session. */
    char mp[PATH_MAX_LEN];
    pathf(mp, sizeof(mp), "%s/" META_FILE, sess);
    int fd = open(mp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t sl = tn_buf_size(&t->snap);
    if (fd < 0 || write(fd, tn_buf_data(&t->snap), sl) != (ssize_t)sl) {
        flist_fail(l, fd < 0 ? -errno : UV_EIO, "write %s", META_FILE);
    }
    if (fd >= 0)
        close(fd);
    t->snap_crc = tn_crc32c(0, tn_buf_data(&t->snap), sl);
    if (l->err == 0)
        pin_link(&c, "FORMAT", UINT64_MAX);
    /* The data directory's incarnation (written once, at its first start;
     * absent only in a directory no cluster-era ternd has run on): which
     * copy this is. `ternctl restore` does not write it back (a restored
     * node starts as a new disk: docs/operations.md). */
    if (l->err == 0)
        pin_link(&c, TN_META_INCARNATION_FILE, UINT64_MAX);
    for (size_t i = 0; i < t->nparts && l->err == 0; i++)
        take_partition(&c, &t->parts[i]);
    if (l->err == 0) {
        take_test_hold(t->s, "stamps");
        take_pauses(&c);
    }
    if (l->err == 0 && t->ingress)
        take_ingress(&c, t->ingress_durable);
    for (size_t i = 0; i < c.nstamps; i++)
        tn_free(c.stamps[i].rel);
    tn_free(c.stamps);
    tn_free(c.tstamps);
    tn_free(c.topics);
    for (size_t i = 0; i < c.nbare; i++)
        tn_free(c.bare[i]);
    tn_free(c.bare);
    tn_free(buf);
}

static void manifest_json(tn_backup_t *bk, session_t *s, take_t *t)
{
    tn_buf_t *b = &s->manifest;
    tn__v1_appendf(b,
                   "{\"format\":\"" TN_BACKUP_FORMAT "\",\"storage_format\":1,\"session\":\"%s\","
                   "\"node_id\":%" PRIu64 ",\"created_ms\":%" PRId64 ",\"ttl_ms\":%" PRId64
                   ",\"metastore\":{\"path\":\"" META_FILE "\",\"length\":%zu,\"crc32c\":%" PRIu32
                   ",\"applied_index\":%" PRIu64 ",\"voters\":[",
                   s->id, bk->node_id, s->created_ms, bk->ttl_ms, tn_buf_size(&t->snap),
                   t->snap_crc, t->applied);
    for (size_t i = 0; i < t->nvoters; i++) {
        tn__v1_appendf(b, "%s{\"id\":%" PRIu64 ",\"raft_address\":", i ? "," : "", t->voters[i].id);
        tn__v1_json_str(b, t->voters[i].raft_addr);
        tn_buf_append(b, "}", 1);
    }
    tn_buf_append(b, "]},\"files\":[", 12);
    for (size_t i = 0; i < s->nfiles; i++) {
        tn_buf_append(b, i ? ",{\"path\":" : "{\"path\":", i ? 9 : 8);
        tn__v1_json_str(b, s->files[i].path);
        tn__v1_appendf(b, ",\"length\":%" PRIu64 ",\"crc32c\":%" PRIu32 "}", s->files[i].len,
                       s->files[i].crc);
    }
    tn_buf_append(b, "],\"isolated\":[", 14);
    size_t k = 0;
    for (size_t i = 0; i < t->nparts; i++) {
        const part_t *p = &t->parts[i];
        if (p->isolated == NULL || p->remade)
            continue; /* remade: the new topic's log, copied as it is */
        tn_buf_append(b, k > 0 ? ",{\"topic\":" : "{\"topic\":", k > 0 ? 10 : 9);
        k++;
        tn__v1_json_str(b, p->topic);
        tn__v1_appendf(b, ",\"partition\":%" PRIu32 ",\"error\":", p->partition);
        tn__v1_json_str(b, p->isolated);
        tn_buf_append(b, "}", 1);
    }
    tn_buf_append(b, "]}", 2);
}

static void session_remove(session_t *s);

static void take_free(take_t *t)
{
    for (size_t i = 0; i < t->nparts; i++) {
        tn_free(t->parts[i].topic);
        tn_free(t->parts[i].isolated);
    }
    tn_free(t->parts);
    for (size_t i = 0; i < t->nchans; i++) {
        tn_free(t->chans[i].topic);
        tn_free(t->chans[i].channel);
    }
    tn_free(t->chans);
    tn_buf_fini(&t->snap);
    tn_free(t->voters);
    files_free(t->files.v, t->files.n);
    tn_free(t);
}

static void take_after(uv_work_t *w, int status)
{
    take_t *t = w->data;
    tn_backup_t *bk = t->bk;
    session_t *s = t->s;
    bk->jobs--;
    tn_http_request_t *r = t->r;
    if (r != NULL)
        r->on_cancel = NULL;
    if (status != 0 && t->files.err == 0)
        flist_fail(&t->files, status, "%s", "backup job");
    if (t->files.err == 0) {
        s->files = t->files.v;
        s->nfiles = t->files.n;
        t->files.v = NULL;
        t->files.n = 0;
        manifest_json(bk, s, t);
        for (size_t i = 0; i < t->nparts; i++) {
            const part_t *p = &t->parts[i];
            if (p->remade)
                TN_LOG(TN_LOG_WARN,
                       "backup %s: topic %s was deleted and made again since the backup started: "
                       "partition %s/%" PRIu32 " is copied as the new topic's, up to what is "
                       "durable of it, not cut at the old topic's durable end (%" PRIu64
                       "); the old topic's files went with it",
                       s->id, p->topic, p->topic, p->partition, p->durable_next);
            else if (p->isolated != NULL)
                TN_LOG(TN_LOG_WARN,
                       "backup %s: partition %s/%" PRIu32 " is isolated (%s): its files are "
                       "copied whole, the damage included, so it is restored isolated as here",
                       s->id, p->topic, p->partition, p->isolated);
        }
        if (t->stamps_left_out > 0)
            TN_LOG(TN_LOG_WARN,
                   "backup %s: %zu channel stamp(s) left out: each changed as its channel's "
                   "files were copied (the channel deleted or made again), so the files may be "
                   "of either, or could not be read; `ternctl restore --rejoin` stamps those "
                   "channels from the backup's metastore, as for a backup without stamps",
                   s->id, t->stamps_left_out);
        if (t->topic_stamps_left_out > 0)
            TN_LOG(TN_LOG_WARN,
                   "backup %s: %zu topic stamp(s) left out: each changed as its topic's files "
                   "were copied (the topic deleted or made again), so the files may be of "
                   "either, or could not be read; `ternctl restore --rejoin` stamps those topics "
                   "from the backup's metastore, as for a backup without stamps",
                   s->id, t->topic_stamps_left_out);
        s->ready = true;
        s->used_at = uv_now(bk->loop);
        TN_LOG(TN_LOG_NOTICE, "backup %s: %zu files pinned", s->id, s->nfiles);
        if (r != NULL)
            tn_http_respond(r, 201, TN__V1_JSON, NULL, tn_buf_data(&s->manifest),
                            tn_buf_size(&s->manifest));
        if (r == NULL || bk->closing)
            session_remove(s); /* nobody will fetch it */
    } else {
        TN_LOG(TN_LOG_ERROR, "backup %s failed: %s", s->id, t->files.errmsg);
        if (r != NULL) {
            char msg[600];
            snprintf(msg, sizeof(msg), "backup failed: %s", t->files.errmsg);
            tn__v1_error(r, 500, msg, NULL);
        }
        session_remove(s);
    }
    take_free(t);
    maybe_free(bk);
}

static void take_cancel(tn_http_request_t *r)
{
    take_t *t = r->data;
    t->r = NULL;
}

/* --- removing a session ------------------------------------------------------------ */

typedef struct {
    uv_work_t work;
    tn_backup_t *bk;
    char path[PATH_MAX_LEN];
} rm_t;

static void rm_work(uv_work_t *w)
{
    rm_t *j = w->data;
    (void)tn_io_remove_tree(j->path); /* links and copies only: the originals keep their names */
}

static void rm_after(uv_work_t *w, int status)
{
    rm_t *j = w->data;
    j->bk->jobs--;
    tn_backup_t *bk = j->bk;
    tn_free(j);
    maybe_free(bk);
}

/* Unlist s and free it; its directory goes on a worker once no download
 * reads it (the last download's end calls this again). */
static void session_remove(session_t *s)
{
    tn_backup_t *bk = s->bk;
    s->removing = true;
    if (s->busy > 0 || bk->closing)
        return; /* at the last download's end; closing: the next start removes it */
    for (session_t **p = &bk->sessions; *p != NULL; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    rm_t *j = tn_calloc(1, sizeof(*j));
    if (j != NULL) {
        j->bk = bk;
        j->work.data = j;
        pathf(j->path, sizeof(j->path), "%s/" SESSION_DIR "/%s", bk->data_path, s->id);
        if (uv_queue_work(bk->loop, &j->work, rm_work, rm_after) == 0)
            bk->jobs++;
        else
            tn_free(j); /* left for the next start to remove */
    }
    files_free(s->files, s->nfiles);
    tn_buf_fini(&s->manifest);
    tn_free(s);
}

static session_t *session_find(tn_backup_t *bk, const tn_iov_t *id)
{
    for (session_t *s = bk->sessions; s != NULL; s = s->next)
        if (s->ready && !s->removing && id != NULL && id->len == strlen(s->id) &&
            memcmp(id->base, s->id, id->len) == 0)
            return s;
    return NULL;
}

static void on_tick(uv_timer_t *h)
{
    tn_backup_t *bk = h->data;
    uint64_t now = uv_now(bk->loop);
    session_t *s = bk->sessions;
    while (s != NULL) {
        session_t *next = s->next;
        if (s->ready && !s->removing && s->busy == 0 && now - s->used_at >= (uint64_t)bk->ttl_ms) {
            TN_LOG(TN_LOG_NOTICE, "backup %s: unused for %" PRId64 " ms, removed", s->id,
                   bk->ttl_ms);
            session_remove(s);
        }
        s = next;
    }
}

/* --- routes ------------------------------------------------------------------------ */

/* The channel logs of tp with records queued and not completed: every
 * settle answered so far is in one of them, or already on disk. */
static int collect_channels(take_t *t, tn_topic_t *tp)
{
    for (tn_channel_t *ch = tp->channels; ch != NULL; ch = ch->next) {
        if (ch->memory || ch->deleted || ch->parts == NULL)
            continue;
        for (uint32_t p = 0; p < tp->nparts; p++) {
            tn_chpart_t *cp = ch->parts[p];
            if (cp == NULL || cp->cl == NULL ||
                tn_chanlog_completed(cp->cl) >= tn_chanlog_submitted(cp->cl))
                continue;
            if (t->nchans == t->chans_cap) {
                size_t ncap = t->chans_cap ? t->chans_cap * 2 : 16;
                chan_t *v = tn_realloc(t->chans, ncap * sizeof(*v));
                if (v == NULL)
                    return UV_ENOMEM;
                t->chans = v;
                t->chans_cap = ncap;
            }
            char *topic = tn_strdup(tp->name);
            char *channel = tn_strdup(ch->name);
            if (topic == NULL || channel == NULL) {
                tn_free(topic);
                tn_free(channel);
                return UV_ENOMEM;
            }
            t->chans[t->nchans++] = (chan_t){topic, channel, p, tn_chanlog_submitted(cp->cl)};
        }
    }
    return 0;
}

/* Why pl is isolated for damage (its errmsg, copied into *out), or
 * *out NULL when it is not: serving, or failed for another reason (a
 * write or an fdatasync: its records below the durable end are whole,
 * and nothing past it was acknowledged in durable mode). UV_ENOMEM. The
 * message is written before the error turns sticky at an open; at run
 * time a reader may see it a moment late, so an empty one is named. */
static int isolated_why(tn_plog_t *pl, char **out)
{
    *out = NULL;
    int err = tn_plog_err(pl);
    if (err != TN_ECORRUPT && err != TN_EFORMAT)
        return 0;
    char msg[sizeof(pl->errmsg)];
    memcpy(msg, pl->errmsg, sizeof(msg));
    msg[sizeof(msg) - 1] = '\0';
    *out = tn_strdup(msg[0] != '\0' ? msg : tn_strerror(err));
    return *out != NULL ? 0 : UV_ENOMEM;
}

/* One log in t->parts: its durable end (want: what was written beyond it,
 * waited for; 0: none), whether it is isolated for damage (then copied
 * whole, nothing waited for), and its topic's record (stamp, 0: not
 * known). The name is copied. */
static int collect_add(take_t *t, size_t *cap, const char *topic, uint32_t p, tn_plog_t *pl,
                       uint64_t durable, uint64_t want, int64_t stamp)
{
    if (t->nparts == *cap) {
        *cap = *cap ? *cap * 2 : 32;
        part_t *v = tn_realloc(t->parts, *cap * sizeof(*v));
        if (v == NULL)
            return UV_ENOMEM;
        t->parts = v;
    }
    char *why;
    if (isolated_why(pl, &why) != 0)
        return UV_ENOMEM;
    char *name = tn_strdup(topic);
    if (name == NULL) {
        tn_free(why);
        return UV_ENOMEM;
    }
    t->parts[t->nparts++] = (part_t){name, p, durable, why != NULL ? 0 : want, why, stamp, false};
    return 0;
}

typedef struct {
    take_t *t;
    size_t *cap;
    size_t engine_parts; /* t->parts[0..engine_parts) came from the engine */
    int rc;
} own_ctx_t;

/* The topic of that name the engine has now (not deleted), or NULL:
 * looked up by name at every use, since a deleted topic's memory goes. */
static tn_topic_t *find_topic(tn_broker_t *b, const char *topic)
{
    for (size_t i = 0; i < b->nbuckets; i++)
        for (tn_topic_t *tp = b->buckets[i]; tp != NULL; tp = tp->hnext)
            if (!tp->deleted && strcmp(tp->name, topic) == 0)
                return tp;
    return NULL;
}

/* A follower's own log (cluster/replica.h): its copy up to what it
 * flushed, which is all a follower ever vouches for (its leader's hw
 * counts only flushed offsets), so nothing is waited for. A log the
 * engine listed too is not listed twice. */
static void on_own_log(void *arg, const char *topic, uint32_t p, tn_plog_t *pl)
{
    own_ctx_t *x = arg;
    if (x->rc != 0)
        return;
    for (size_t i = 0; i < x->engine_parts; i++)
        if (x->t->parts[i].partition == p && strcmp(x->t->parts[i].topic, topic) == 0)
            return;
    const tn_topic_t *tp = find_topic(x->t->bk->v->broker, topic);
    x->rc = collect_add(x->t, x->cap, topic, p, pl, tn_plog_durable_next(pl), 0,
                        tp != NULL ? tp->record_created_ms : 0);
}

static int collect(tn_backup_t *bk, take_t *t)
{
    tn_broker_t *b = bk->v->broker;
    size_t cap = 0;
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *tp = b->buckets[i]; tp != NULL; tp = tp->hnext) {
            if (tp->memory || tp->deleted)
                continue;
            for (uint32_t p = 0; p < tp->nparts; p++) {
                tn_part_t *part = tp->parts[p];
                if (part == NULL || part->plog == NULL)
                    continue;
                /* Written first, then durable: a record written and not
                 * yet synced at this moment is waited for (write_ack and
                 * relaxed acknowledge it before its fdatasync). */
                uint64_t w = tn_plog_written_next(part->plog);
                uint64_t d = tn_plog_durable_next(part->plog);
                int rc = collect_add(t, &cap, tp->name, part->index, part->plog, d, w > d ? w : 0,
                                     tp->record_created_ms);
                if (rc != 0)
                    return rc;
            }
            int rc = collect_channels(t, tp);
            if (rc != 0)
                return rc;
        }
    }
    /* The logs of replicated partitions this node follows are held by
     * its replica manager, not the engine: without them a backup held
     * only each partition's leader's copy, and a cluster restored whole
     * (its members keeping their incarnations) could elect a follower
     * restored with nothing. */
    if (bk->v->replica != NULL) {
        own_ctx_t x = {t, &cap, t->nparts, 0};
        tn_replica_each_own_log(bk->v->replica, on_own_log, &x);
        if (x.rc != 0)
            return x.rc;
    }
    if (bk->ilog != NULL) {
        t->ingress = true;
        t->ingress_durable = tn_ilog_durable_seq(bk->ilog);
    }
    return 0;
}

/* The partition log of p as the engine has it now, or NULL: its topic
 * deleted since (or deleted and made again: another record than the
 * POST's, whose log is not the one waited for), or the partition no
 * longer local. */
static tn_plog_t *find_plog(tn_broker_t *b, const part_t *p)
{
    const tn_topic_t *tp = find_topic(b, p->topic);
    if (tp == NULL ||
        (p->stamp != 0 && tp->record_created_ms != 0 && tp->record_created_ms != p->stamp))
        return NULL;
    return p->partition < tp->nparts && tp->parts[p->partition] != NULL
               ? tp->parts[p->partition]->plog
               : NULL;
}

/* The channel log of topic/partition/channel as the engine has it now,
 * or NULL (the topic or channel was deleted since, or the partition is no
 * longer local). */
static tn_chanlog_t *find_chanlog(tn_broker_t *b, const chan_t *c)
{
    const tn_topic_t *tp = find_topic(b, c->topic);
    if (tp == NULL)
        return NULL;
    for (tn_channel_t *ch = tp->channels; ch != NULL; ch = ch->next)
        if (!ch->deleted && ch->parts != NULL && c->partition < tp->nparts &&
            strcmp(ch->name, c->channel) == 0)
            return ch->parts[c->partition] != NULL ? ch->parts[c->partition]->cl : NULL;
    return NULL;
}

#define SYNC_WAIT_MS 15000 /* relaxed-sync-interval is at most 10 s */

static void on_wait_closed(uv_handle_t *h)
{
    take_t *t = h->data;
    tn_backup_t *bk = t->bk;
    int rc = t->wait_status;
    if (rc == 0 && (rc = uv_queue_work(bk->loop, &t->work, take_work, take_after)) == 0)
        return; /* jobs stays counted for the work */
    if (t->wait_err[0] == '\0')
        pathf(t->wait_err, sizeof(t->wait_err), "%s", tn_strerror(rc));
    flist_fail(&t->files, rc, "%s", t->wait_err);
    uv_work_t *w = &t->work;
    w->data = t;
    take_after(w, 0); /* answers the error and removes the session */
}

/* Every partition that had records written but not durable at the POST:
 * durable now (its end is then what was written), gone (skipped: its
 * topic was deleted, or deleted and made again), failed (the backup fails: its acknowledged tail
 * cannot be made durable) or still waiting. Every channel log that had
 * records queued at the POST: all of those completed (written and
 * synced), gone (its topic or channel was deleted), failed (the backup
 * fails: an answered settle is not in its WAL) or still waiting. */
static void on_wait(uv_timer_t *h)
{
    take_t *t = h->data;
    tn_backup_t *bk = t->bk;
    bool all = true;
    /* Closing: the engine goes soon after, so it is not looked at again. */
    if (bk->closing)
        t->wait_status = TN_ECLOSED;
    for (size_t i = 0; i < t->nparts && t->wait_status == 0; i++) {
        part_t *p = &t->parts[i];
        if (p->want == 0)
            continue;
        tn_plog_t *pl = find_plog(bk->v->broker, p);
        if (pl == NULL) {
            p->want = 0;
        } else if (tn_plog_err(pl) != 0) {
            t->wait_status = tn_plog_err(pl);
            pathf(t->wait_err, sizeof(t->wait_err),
                  "partition %s/%" PRIu32 " failed (%s): restart the node to recover it first",
                  p->topic, p->partition, tn_strerror(tn_plog_err(pl)));
        } else if (tn_plog_durable_next(pl) >= p->want) {
            p->durable_next = p->want;
            p->want = 0;
        } else {
            all = false;
        }
    }
    for (size_t i = 0; i < t->nchans && t->wait_status == 0; i++) {
        chan_t *c = &t->chans[i];
        if (c->want == 0)
            continue;
        tn_chanlog_t *cl = find_chanlog(bk->v->broker, c);
        /* Fewer records ever queued than the POST saw: another log of the
         * same name (the channel was deleted and made again), so the one
         * waited for is gone with its files, as when cl is NULL. */
        if (cl != NULL && tn_chanlog_submitted(cl) >= c->want) {
            if (tn_chanlog_completed(cl) < c->want) {
                all = false;
                continue;
            }
            if (tn_chanlog_err(cl) != 0) {
                t->wait_status = tn_chanlog_err(cl);
                pathf(t->wait_err, sizeof(t->wait_err),
                      "the log of channel %s of %s/%" PRIu32
                      " failed (%s): restart the node to recover it first",
                      c->channel, c->topic, c->partition, tn_strerror(tn_chanlog_err(cl)));
                break;
            }
        }
        c->want = 0; /* on disk, or gone */
    }
    if (t->wait_status == 0 && !all && uv_now(bk->loop) >= t->wait_until) {
        t->wait_status = UV_ETIMEDOUT;
        pathf(t->wait_err, sizeof(t->wait_err),
              "records written or settles answered before the backup were not durable within "
              "%d ms",
              SYNC_WAIT_MS);
    }
    if (!all && t->wait_status == 0)
        return;
    uv_timer_stop(h);
    uv_close((uv_handle_t *)h, on_wait_closed);
}

/* The POST's snapshot and durable ends, then the wait for those ends (or
 * the file work at once). 0, or an error with nothing started. */
static int take_begin(take_t *t)
{
    tn_backup_t *bk = t->bk;
    /* The order matters: the metastore first (a topic that has acked
     * messages is in it), then the durable ends (every acknowledged
     * record is below them). */
    int rc = tn_meta_backup(bk->v->meta, &t->snap, &t->voters, &t->nvoters, &t->applied);
    rc = rc ? rc : collect(bk, t);
    bool wait = false;
    for (size_t i = 0; rc == 0 && i < t->nparts; i++)
        wait = wait || t->parts[i].want != 0;
    wait = wait || t->nchans > 0;
    if (rc == 0 && wait) {
        uv_timer_init(bk->loop, &t->wait);
        t->wait.data = t;
        t->wait_until = uv_now(bk->loop) + SYNC_WAIT_MS;
        uv_timer_start(&t->wait, on_wait, 0, 2);
    } else if (rc == 0) {
        rc = uv_queue_work(bk->loop, &t->work, take_work, take_after);
    }
    return rc;
}

#ifdef TN_TEST
static void on_post_hold_closed(uv_handle_t *h)
{
    take_t *t = h->data;
    int rc = t->bk->closing ? TN_ECLOSED : take_begin(t);
    if (rc == 0)
        return;
    flist_fail(&t->files, rc, "%s", tn_strerror(rc));
    take_after(&t->work, 0); /* answers the error and removes the session */
}

/* TERN_TEST_BACKUP_TAKE_HOLD holding "post" (take_test_hold): polled
 * until the file is gone, the loop serving meanwhile. */
static void on_post_hold(uv_timer_t *h)
{
    take_t *t = h->data;
    struct stat st;
    if (!t->bk->closing && stat(getenv("TERN_TEST_BACKUP_TAKE_HOLD"), &st) == 0)
        return;
    uv_timer_stop(h);
    uv_close((uv_handle_t *)h, on_post_hold_closed);
}
#endif

static void on_post(tn_http_request_t *r, void *arg)
{
    tn_backup_t *bk = arg;
    tn_v1_t *v = bk->v;
    if (!tn__v1_admin_only(v, r) || !tn__v1_guard_write(r))
        return;
    if (bk->closing) {
        tn__v1_error(r, 503, "shutting down", "Retry-After: 1\r\n");
        return;
    }
    if (!tn_meta_ready(v->meta)) {
        tn__v1_error(r, 503, "control plane not caught up", "Retry-After: 1\r\n");
        return;
    }
    unsigned n = 0;
    for (session_t *s = bk->sessions; s != NULL; s = s->next)
        n += !s->removing;
    if (n >= TN_BACKUP_SESSIONS) {
        tn__v1_error(r, 429,
                     "too many backup sessions at once (4): delete one (DELETE /v1/backup/{id})",
                     "Retry-After: 10\r\n");
        return;
    }
    session_t *s = tn_calloc(1, sizeof(*s));
    take_t *t = tn_calloc(1, sizeof(*t));
    if (s == NULL || t == NULL) {
        tn_free(s);
        tn_free(t);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    s->bk = bk;
    tn_buf_init(&s->manifest);
    s->created_ms = tn_now_wall_ms();
    unsigned char rnd[16];
    if (uv_random(NULL, NULL, rnd, sizeof(rnd), 0, NULL) != 0) {
        for (size_t i = 0; i < sizeof(rnd); i++)
            rnd[i] = (unsigned char)((uint64_t)tn_now_mono_ns() >> (i % 8));
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
    t->bk = bk;
    t->s = s;
    t->r = r;
    t->work.data = t;
    tn_buf_init(&t->snap);
    int rc;
#ifdef TN_TEST
    if (test_hold_at("post")) {
        TN_LOG(TN_LOG_NOTICE, "backup %s: its metastore snapshot held (TERN_TEST_BACKUP_TAKE_HOLD)",
               s->id);
        uv_timer_init(bk->loop, &t->wait);
        t->wait.data = t;
        rc = uv_timer_start(&t->wait, on_post_hold, 50, 50);
    } else
#endif
        rc = take_begin(t);
    if (rc != 0) {
        tn_buf_fini(&s->manifest);
        tn_free(s);
        take_free(t);
        tn__v1_error(r, 503, rc == UV_ENOMEM ? "out of memory" : tn_strerror(rc),
                     "Retry-After: 1\r\n");
        return;
    }
    bk->jobs++;
    s->next = bk->sessions;
    bk->sessions = s;
    r->data = t;
    r->on_cancel = take_cancel;
}

static void on_manifest(tn_http_request_t *r, void *arg)
{
    tn_backup_t *bk = arg;
    if (!tn__v1_admin_only(bk->v, r))
        return;
    session_t *s = session_find(bk, tn_http_param(r, "id"));
    if (s == NULL) {
        tn__v1_error(r, 404, "no such backup session (it ended, expired or never was)", NULL);
        return;
    }
    s->used_at = uv_now(bk->loop);
    tn_http_respond(r, 200, TN__V1_JSON, NULL, tn_buf_data(&s->manifest),
                    tn_buf_size(&s->manifest));
}

static void on_delete(tn_http_request_t *r, void *arg)
{
    tn_backup_t *bk = arg;
    if (!tn__v1_admin_only(bk->v, r) || !tn__v1_guard_write(r))
        return;
    session_t *s = session_find(bk, tn_http_param(r, "id"));
    if (s == NULL) {
        tn__v1_error(r, 404, "no such backup session (it ended, expired or never was)", NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn__v1_appendf(&b, "{\"deleted\":\"%s\"}", s->id);
    TN_LOG(TN_LOG_NOTICE, "backup %s: ended by DELETE", s->id);
    session_remove(s);
    tn__v1_respond_buf(r, 200, &b);
}

typedef struct {
    uv_work_t work;
    session_t *s;
    tn_http_request_t *r;
    char path[PATH_MAX_LEN];
    uint64_t off, len;
    char *data;
    size_t got;
    int err;
} read_t;

static void read_work(uv_work_t *w)
{
    read_t *j = w->data;
    int fd = open(j->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        j->err = -errno;
        return;
    }
    while (j->got < j->len) {
        ssize_t n =
            pread(fd, j->data + j->got, (size_t)(j->len - j->got), (off_t)(j->off + j->got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            j->err = n < 0 ? -errno : TN_ESHORT;
            break;
        }
        j->got += (size_t)n;
    }
    close(fd);
}

static void read_after(uv_work_t *w, int status)
{
    read_t *j = w->data;
    session_t *s = j->s;
    tn_backup_t *bk = s->bk;
    bk->jobs--;
    s->busy--;
    s->used_at = uv_now(bk->loop);
    if (j->r != NULL) {
        j->r->on_cancel = NULL;
        if (status != 0 || j->err != 0) {
            char msg[256];
            snprintf(msg, sizeof(msg), "reading the pinned file: %s",
                     tn_strerror(status ? status : j->err));
            tn__v1_error(j->r, 500, msg, NULL);
        } else {
            tn_http_respond(j->r, 200, "application/octet-stream", NULL, j->data, j->got);
        }
    }
    if (s->removing && s->busy == 0)
        session_remove(s);
    tn_free(j->data);
    tn_free(j);
    maybe_free(bk);
}

static void read_cancel(tn_http_request_t *r)
{
    read_t *j = r->data;
    j->r = NULL;
}

static void on_file(tn_http_request_t *r, void *arg)
{
    tn_backup_t *bk = arg;
    if (!tn__v1_admin_only(bk->v, r))
        return;
    session_t *s = session_find(bk, tn_http_param(r, "id"));
    if (s == NULL) {
        tn__v1_error(r, 404, "no such backup session (it ended, expired or never was)", NULL);
        return;
    }
    char path[1025];
    int rc = tn_http_query(r->head.query, "path", path, sizeof(path));
    if (rc != 1 || path[0] == '\0') {
        tn__v1_error(r, 400,
                     rc == 0 ? "invalid argument: path is required"
                             : "invalid argument: path is not a file of this backup",
                     NULL);
        return;
    }
    int64_t off = 0;
    if (tn__v1_query_int(r, "offset", &off) < 0) {
        tn__v1_error(r, 400, "invalid argument: offset must be a non-negative integer", NULL);
        return;
    }
    /* Only a path of the manifest, compared exactly: nothing else under
     * the session (or outside it) can be named. */
    uint64_t len = 0;
    bool found = strcmp(path, META_FILE) == 0;
    if (found)
        len = UINT64_MAX;
    for (size_t i = 0; !found && i < s->nfiles; i++) {
        if (strcmp(s->files[i].path, path) == 0) {
            found = true;
            len = s->files[i].len;
        }
    }
    if (!found) {
        tn__v1_error(r, 404, "no such file in this backup (paths are the manifest's)", NULL);
        return;
    }
    read_t *j = tn_calloc(1, sizeof(*j));
    if (j == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    pathf(j->path, sizeof(j->path), "%s/" SESSION_DIR "/%s/%s", bk->data_path, s->id, path);
    if (len == UINT64_MAX) {
        struct stat st;
        len = stat(j->path, &st) == 0 ? (uint64_t)st.st_size : 0;
    }
    if ((uint64_t)off > len) {
        tn_free(j);
        tn__v1_error(r, 416, "offset is past the file's length in the manifest", NULL);
        return;
    }
    j->off = (uint64_t)off;
    j->len = TN_MIN(len - j->off, (uint64_t)TN_BACKUP_CHUNK_MAX);
    j->data = tn_malloc(j->len ? (size_t)j->len : 1);
    if (j->data == NULL) {
        tn_free(j);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    j->s = s;
    j->r = r;
    j->work.data = j;
    if ((rc = uv_queue_work(bk->loop, &j->work, read_work, read_after)) != 0) {
        tn_free(j->data);
        tn_free(j);
        tn__v1_error(r, 503, tn_strerror(rc), "Retry-After: 1\r\n");
        return;
    }
    bk->jobs++;
    s->busy++;
    s->used_at = uv_now(bk->loop);
    r->data = j;
    r->on_cancel = read_cancel;
}

/* --- lifetime ---------------------------------------------------------------------- */

int tn_backup_new(uv_loop_t *loop, tn_v1_t *v, tn_ilog_t *ilog, const tn_backup_opts_t *o,
                  tn_backup_t **out, char *err, size_t errlen)
{
    *out = NULL;
    tn_backup_t *bk = tn_calloc(1, sizeof(*bk));
    char *dp = tn_strdup(o->data_path);
    if (bk == NULL || dp == NULL) {
        tn_free(bk);
        tn_free(dp);
        tn_errbuf(err, errlen, "backup: %s", tn_strerror(UV_ENOMEM));
        return UV_ENOMEM;
    }
    bk->loop = loop;
    bk->v = v;
    bk->ilog = ilog;
    bk->data_path = dp;
    bk->node_id = o->node_id;
    bk->ttl_ms = o->ttl_ms > 0 ? o->ttl_ms : TN_BACKUP_TTL_MS;
    /* Sessions do not outlive the process: what one left is removed. */
    char dir[PATH_MAX_LEN];
    pathf(dir, sizeof(dir), "%s/" SESSION_DIR, dp);
    (void)tn_io_remove_tree(dir);
    uv_timer_init(loop, &bk->timer);
    bk->timer.data = bk;
    uv_timer_start(&bk->timer, on_tick, 1000, 1000);
    uv_unref((uv_handle_t *)&bk->timer);
    *out = bk;
    return 0;
}

int tn_backup_register(tn_http_server_t *srv, tn_backup_t *bk)
{
    int rc = tn_http_route(srv, "POST", "/v1/backup", 0, TN__V1_NO_BODY, on_post, bk);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/backup/{id}", 0, TN__V1_NO_BODY, on_manifest, bk);
    rc =
        rc ? rc : tn_http_route(srv, "DELETE", "/v1/backup/{id}", 0, TN__V1_NO_BODY, on_delete, bk);
    rc =
        rc ? rc : tn_http_route(srv, "GET", "/v1/backup/{id}/file", 0, TN__V1_NO_BODY, on_file, bk);
    return rc;
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_backup_t *bk = h->data;
    bk->timer_closed = true;
    maybe_free(bk);
}

void tn_backup_close(tn_backup_t *bk)
{
    if (bk == NULL)
        return;
    bk->closing = true;
    uv_close((uv_handle_t *)&bk->timer, on_timer_closed);
}
