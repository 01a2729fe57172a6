/* The channel log: checkpoint + WAL files of one channel on one partition,
 * recovery, and group-committed WAL records. See chanlog.h.
 *
 * DESIGN: a round on the WAL committer.
 *   1. Group the round's records by channel log, in arrival order.
 *   2. Per log: encode frames (seq continues the checkpoint's, sync_mark is
 *      the WAL length known durable), write them with one pwrite, and
 *      apply each to the committer's replica of the cursor. A write that
 *      finds the disk full, of a round whose records all allow it
 *      (TN_WALOP_SPACE_OK), cuts the WAL back (ftruncate, fdatasync:
 *      no frame of the round survives a crash) and fails that round's
 *      records alone: nothing of them was applied or synced.
 *   3. fdatasync each log written; a failure is sticky for that log.
 *   4. Complete every record of the round.
 *   5. Checkpoint the logs that passed checkpoint_every records since their
 *      last checkpoint. A checkpoint that finds the disk full
 *      (tn_io_nospace) is not sticky: nothing points at its temporary
 *      file, the WAL keeps every record since the last one, and the next
 *      round of the log tries again. The WAL may then outgrow
 *      checkpoint_every records, up to WAL_MAX_BYTES, where it fails.
 *   6. Run control requests (close). */
#include "core/platform.h"

#include "storage/chanlog.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "storage/io.h"
#include "storage/wal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A WAL larger than this cannot come from checkpoint_every records, nor
 * from checkpoints failing for space (a log refuses to grow past it). */
#define WAL_MAX_BYTES  (64u * 1024 * 1024)
#define CKPT_MAX_BYTES (256u * 1024 * 1024)
/* Zeroed space kept ahead of the WAL's frames, as the segment log does
 * (see zero_ahead in plog.c): an fdatasync that changes no file size
 * skips the file system's journal commit. */
#define WAL_ZERO_AHEAD (256u * 1024)

static void set_sticky(tn_chanlog_t *cl, int err, const char *fmt, ...) TN_PRINTF(3, 4);
static void set_sticky(tn_chanlog_t *cl, int err, const char *fmt, ...)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&cl->err, &expected, err))
        return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(cl->errmsg, sizeof(cl->errmsg), "channel %s in %s: %s: %s", cl->name, cl->dir, what,
             tn_strerror(err));
    TN_LOG(TN_LOG_ERROR, "%s; the channel refuses writes until restart", cl->errmsg);
}

static bool all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0)
            return false;
    }
    return true;
}

static int partition_dir(tn_store_t *store, const char *topic, uint32_t partition, char *buf,
                         size_t len)
{
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    if ((size_t)snprintf(buf, len, "%s/%s/%" PRIu32, store->topics_path, topic, partition) >= len)
        return UV_ENAMETOOLONG;
    return 0;
}

static void chanlog_free(tn_chanlog_t *cl)
{
    if (cl->fd >= 0)
        tn_io_close(cl->fd);
    tn_cursor_fini(&cl->durable);
    tn_free(cl->dir);
    tn_free(cl->name);
    tn_free(cl->wal_path);
    tn_free(cl);
}

static int write_checkpoint(tn_chanlog_t *cl, const tn_cursor_t *c)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_cursor_encode(c, &b);
    if (rc == 0) {
        char name[512];
        snprintf(name, sizeof(name), "%s.ckpt", cl->name);
        rc = tn_io_write_file_atomic(cl->dir, name, b.base, b.len);
    }
    tn_buf_fini(&b);
    return rc;
}

/* Create a new channel: empty WAL made durable first, then the checkpoint
 * that makes the channel exist. */
static int create_channel(tn_chanlog_t *cl, const tn_cursor_t *initial)
{
    int rc = tn_io_open(cl->wal_path, O_RDWR | O_CREAT | O_TRUNC, 0644, &cl->fd);
    if (rc != 0)
        return rc;
    if ((rc = tn_io_fdatasync(cl->fd)) != 0)
        return rc;
    if (initial != NULL)
        rc = tn_cursor_copy(&cl->durable, initial);
    else
        tn_cursor_init(&cl->durable, 0);
    if (rc != 0)
        return rc;
    cl->durable.seq = 0;
    return write_checkpoint(cl, &cl->durable);
}

static int recover_channel(tn_chanlog_t *cl, const char *ckpt_path)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_io_read_file(ckpt_path, CKPT_MAX_BYTES, &b);
    if (rc == 0) {
        rc = tn_cursor_decode(b.base, b.len, &cl->durable);
        if (rc == TN_ECORRUPT) {
            tn_cursor_init(&cl->durable, 0);
            set_sticky(cl, rc, "checkpoint %s", ckpt_path);
            rc = 0;
        }
    } else if (rc == TN_ETOOBIG) {
        tn_cursor_init(&cl->durable, 0);
        set_sticky(cl, TN_ECORRUPT, "checkpoint %s larger than %u bytes", ckpt_path,
                   CKPT_MAX_BYTES);
        rc = 0;
    }
    tn_buf_fini(&b);
    if (rc != 0 || atomic_load(&cl->err) != 0)
        return rc;

    if (access(cl->wal_path, F_OK) != 0 && errno == ENOENT)
        TN_LOG(TN_LOG_WARN,
               "channel %s in %s: its WAL is missing (lost, or a backup taken as the channel was "
               "made): its state is the checkpoint's (seq %" PRIu64
               "); what was settled after it is delivered again",
               cl->name, cl->dir, cl->durable.seq);
    rc = tn_io_open(cl->wal_path, O_RDWR | O_CREAT, 0644, &cl->fd);
    if (rc != 0)
        return rc;
    uint64_t size;
    if ((rc = tn_io_fsize(cl->fd, &size)) != 0)
        return rc;
    if (size > WAL_MAX_BYTES) {
        set_sticky(cl, TN_ECORRUPT, "WAL %s is %" PRIu64 " bytes, more than %u", cl->wal_path, size,
                   WAL_MAX_BYTES);
        return 0;
    }
    tn_buf_init(&b);
    rc = tn_buf_reserve(&b, (size_t)size);
    size_t got = 0;
    if (rc == 0)
        rc = tn_io_pread(cl->fd, b.base, (size_t)size, 0, &got);
    tn_cursor_t replayed;
    tn_wal_replay_t r;
    if (rc == 0)
        rc = tn_cursor_copy(&replayed, &cl->durable);
    if (rc != 0) {
        tn_buf_fini(&b);
        return rc;
    }
    rc = tn_wal_replay((const unsigned char *)b.base, got, &replayed, &r);
    bool zero_tail = rc == 0 && r.tail != 0 && all_zero(b.base + r.valid_len, got - r.valid_len);
    tn_buf_fini(&b);
    if (rc == TN_ECORRUPT || (rc == 0 && r.tail != 0 && r.durable_damage)) {
        tn_cursor_fini(&replayed);
        set_sticky(cl, TN_ECORRUPT, "WAL %s: %s after byte %" PRIu64, cl->wal_path,
                   rc == TN_ECORRUPT ? "sequence gap" : "bad frame below durable data",
                   r.valid_len);
        return 0;
    }
    if (rc != 0) {
        tn_cursor_fini(&replayed);
        return rc;
    }
    tn_cursor_fini(&cl->durable);
    cl->durable = replayed;
    if (zero_tail) {
        /* Space written ahead, left by a crash: the cut need not be durable. */
        if ((rc = tn_io_ftruncate(cl->fd, r.valid_len)) != 0)
            return rc;
    } else if (r.tail != 0) {
        TN_LOG(TN_LOG_WARN, "channel %s in %s: truncating torn WAL tail of %" PRIu64 " bytes",
               cl->name, cl->dir, (uint64_t)got - r.valid_len);
        if ((rc = tn_io_ftruncate(cl->fd, r.valid_len)) != 0 || (rc = tn_io_fdatasync(cl->fd)) != 0)
            return rc;
    }
    cl->wal_size = cl->synced = cl->alloc = r.valid_len;
    cl->since_ckpt = (uint32_t)TN_MIN(r.frames, (uint64_t)UINT32_MAX);
    return 0;
}

int tn_chanlog_open(tn_store_t *store, const char *topic, uint32_t partition, const char *channel,
                    const tn_cursor_t *initial, tn_chanlog_t **out, tn_cursor_t *state)
{
    char dir[4096];
    int rc = partition_dir(store, topic, partition, dir, sizeof(dir));
    if (rc != 0)
        return rc;
    if (!tn_store_valid_name(channel))
        return UV_EINVAL;
    tn_chanlog_t *cl = tn_calloc(1, sizeof(*cl));
    if (cl == NULL)
        return UV_ENOMEM;
    cl->store = store;
    cl->fd = -1;
    char wal[4096], ckpt[4096];
    if ((rc = tn_io_path(wal, sizeof(wal), "%s/%s.wal", dir, channel)) != 0 ||
        (rc = tn_io_path(ckpt, sizeof(ckpt), "%s/%s.ckpt", dir, channel)) != 0)
        goto fail;
    cl->dir = tn_strdup(dir);
    cl->name = tn_strdup(channel);
    cl->wal_path = tn_strdup(wal);
    if (cl->dir == NULL || cl->name == NULL || cl->wal_path == NULL) {
        rc = UV_ENOMEM;
        goto fail;
    }
    if ((rc = tn_io_mkdir_p(dir, 0755)) != 0)
        goto fail;
    if (access(ckpt, F_OK) != 0 && errno == ENOENT)
        rc = create_channel(cl, initial);
    else
        rc = recover_channel(cl, ckpt);
    if (rc != 0)
        goto fail;
    rc = tn_cursor_copy(state, &cl->durable);
    if (rc != 0)
        goto fail;
    cl->next_seq = cl->durable.seq + 1;
    uv_mutex_lock(&store->open_lock);
    cl->next_open = store->chanlogs;
    if (store->chanlogs != NULL)
        store->chanlogs->prev_open = cl;
    store->chanlogs = cl;
    uv_mutex_unlock(&store->open_lock);
    *out = cl;
    return 0;
fail:
    chanlog_free(cl);
    return rc;
}

int tn_chanlog_err(tn_chanlog_t *cl)
{
    return atomic_load(&cl->err);
}

static void op_done(tn__sreq_t *s)
{
    tn_walop_t *op = (tn_walop_t *)s;
    op->cl->completed++; /* before cb, which may close the log */
    op->cb(op, s->status);
}

int tn_chanlog_refuses(tn_chanlog_t *cl, const tn_walrec_t *rec)
{
    if (cl->closing)
        return TN_ECLOSED;
    int err = atomic_load(&cl->err);
    if (err != 0)
        return err;
    unsigned char tmp[TN_WAL_MAX_FRAME];
    if (tn_wal_encode(tmp, rec, 0, 0) == 0)
        return UV_EINVAL;
    return 0;
}

int tn_chanlog_submit(tn_chanlog_t *cl, tn_walop_t *op, const tn_walrec_t *rec, tn_walop_cb cb)
{
    return tn_chanlog_submit_ex(cl, op, rec, cb, 0);
}

int tn_chanlog_submit_ex(tn_chanlog_t *cl, tn_walop_t *op, const tn_walrec_t *rec, tn_walop_cb cb,
                         unsigned flags)
{
    if (cb == NULL)
        return UV_EINVAL;
    int err = tn_chanlog_refuses(cl, rec);
    if (err != 0)
        return err;
    memset(&op->s, 0, sizeof(op->s));
    op->s.bytes = TN_WAL_MAX_FRAME;
    op->s.done = op_done;
    op->rec = *rec;
    op->cl = cl;
    op->cb = cb;
    op->pnext = NULL;
    op->space_ok = (flags & TN_WALOP_SPACE_OK) != 0;
    cl->submitted++;
    tn__committer_submit(&cl->store->walc, &op->s);
    return 0;
}

static void checkpoint(tn_chanlog_t *cl)
{
    int rc = write_checkpoint(cl, &cl->durable);
    if (tn_io_nospace(rc)) {
        TN_LOG_RL(TN_LOG_WARN, 60000,
                  "channel %s in %s: writing a checkpoint: %s; the WAL grows until one can be "
                  "written",
                  cl->name, cl->dir, tn_strerror(rc));
        return; /* since_ckpt stays: the next round tries again */
    }
    if (rc != 0) {
        set_sticky(cl, rc, "writing a checkpoint");
        return;
    }
    if ((rc = tn_io_ftruncate(cl->fd, 0)) != 0 || (rc = tn_io_fdatasync(cl->fd)) != 0) {
        set_sticky(cl, rc, "truncating the WAL after a checkpoint");
        return;
    }
    cl->wal_size = cl->synced = cl->alloc = 0;
    cl->since_ckpt = 0;
    atomic_fetch_add_explicit(&cl->checkpoints, 1, memory_order_relaxed);
}

static void fail_round(tn_chanlog_t *cl, int rc)
{
    for (tn_walop_t *op = cl->rhead; op != NULL; op = op->pnext)
        op->s.status = rc;
}

/* The WAL write of this round failed with rc (nothing applied yet). A
 * full disk's short write may have put whole frames of the round in the
 * file: the cut-back is synced before the round's records are answered,
 * else a crash could keep those frames (their truncation lost with the
 * page cache) and replay records that were refused, a FIN answered with
 * the error turning out settled. */
static void write_failed(tn_chanlog_t *cl, int rc)
{
    bool space = tn_io_nospace(rc);
    for (tn_walop_t *op = cl->rhead; space && op != NULL; op = op->pnext)
        space = op->space_ok;
    int cut = space ? tn_io_cut_back(cl->fd, cl->wal_size) : 0;
    if (space && cut == 0) {
        cl->alloc = cl->wal_size;
        TN_LOG_RL(TN_LOG_WARN, 60000, "channel %s in %s: writing the WAL: %s", cl->name, cl->dir,
                  tn_strerror(rc));
    } else {
        set_sticky(cl, cut != 0 ? cut : rc, "%s",
                   cut != 0 ? "cutting the WAL back after a full disk" : "writing the WAL");
    }
    fail_round(cl, rc);
}

static void write_log(tn__committer_t *c, tn_chanlog_t *cl)
{
    size_t n = 0;
    for (tn_walop_t *op = cl->rhead; op != NULL; op = op->pnext)
        n++;
    size_t need = n * TN_WAL_MAX_FRAME;
    if (need > c->scratch_cap) {
        void *p = tn_realloc(c->scratch, need);
        if (p == NULL) {
            fail_round(cl, UV_ENOMEM);
            return;
        }
        c->scratch = p;
        c->scratch_cap = need;
    }
    if (cl->wal_size + need > WAL_MAX_BYTES) {
        /* Checkpoints failed for space all along: recovery would take a
         * longer WAL for damage. */
        set_sticky(cl, UV_ENOSPC, "the WAL reached %u bytes with no checkpoint written",
                   WAL_MAX_BYTES);
        fail_round(cl, UV_ENOSPC);
        return;
    }
    unsigned char *buf = c->scratch;
    size_t len = 0;
    uint32_t mark = (uint32_t)TN_MIN(cl->synced, (uint64_t)UINT32_MAX);
    uint64_t seq = cl->next_seq;
    for (tn_walop_t *op = cl->rhead; op != NULL; op = op->pnext)
        len += tn_wal_encode(buf + len, &op->rec, seq++, mark);
    if (cl->wal_size + len > cl->alloc) {
        uint64_t target = cl->wal_size + len + WAL_ZERO_AHEAD;
        if (tn_io_write_zeros(cl->fd, cl->wal_size + len, target) == 0) {
            cl->alloc = target;
        } else {
            /* A full disk costs only the speed-up. */
            int rc = tn_io_ftruncate(cl->fd, cl->wal_size);
            cl->alloc = cl->wal_size;
            if (rc != 0) {
                set_sticky(cl, rc, "truncating the WAL's zeroed tail");
                fail_round(cl, rc);
                return;
            }
        }
    }
    int rc = tn_io_pwrite(cl->fd, buf, len, cl->wal_size);
    if (rc != 0) {
        write_failed(cl, rc);
        return;
    }
    cl->wal_size += len;
    for (tn_walop_t *op = cl->rhead; op != NULL; op = op->pnext) {
        rc = tn_cursor_apply(&cl->durable, &op->rec);
        if (rc != 0) {
            /* The replica would no longer match the WAL. */
            set_sticky(cl, rc, "applying a WAL record");
            fail_round(cl, rc);
            break;
        }
        cl->durable.seq = cl->next_seq++;
    }
    /* The replica and the WAL advance together: seq is dense. */
    TN_DASSERT(rc != 0 || cl->durable.seq + 1 == cl->next_seq);
    cl->since_ckpt += (uint32_t)n;
}

void tn__chanlog_round(tn__committer_t *c, tn__sreq_t *round)
{
    tn_chanlog_t *logs = NULL, *logs_tail = NULL;
    tn__sreq_t *controls = tn__round_split(&round);
    for (tn__sreq_t *s = round; s != NULL; s = s->next) {
        tn_walop_t *op = (tn_walop_t *)s;
        tn_chanlog_t *cl = op->cl;
        if (!cl->in_round) {
            cl->in_round = true;
            cl->rhead = cl->rtail = NULL;
            cl->rnext = NULL;
            if (logs_tail != NULL)
                logs_tail->rnext = cl;
            else
                logs = cl;
            logs_tail = cl;
        }
        op->pnext = NULL;
        if (cl->rtail != NULL)
            cl->rtail->pnext = op;
        else
            cl->rhead = op;
        cl->rtail = op;
    }

    for (tn_chanlog_t *cl = logs; cl != NULL; cl = cl->rnext) {
        int err = atomic_load(&cl->err);
        if (err != 0) {
            for (tn_walop_t *op = cl->rhead; op != NULL; op = op->pnext)
                op->s.status = err;
            continue;
        }
        write_log(c, cl);
    }

    tn__sreq_t *head = NULL, *tail = NULL;
    for (tn_chanlog_t *cl = logs; cl != NULL; cl = cl->rnext) {
        int rc = atomic_load(&cl->err);
        if (rc == 0 && cl->synced < cl->wal_size) {
            int64_t t0 = tn_now_mono_ns();
            rc = tn_io_fdatasync(cl->fd);
            tn_hist_observe(&cl->store->walsync_hist, tn_now_mono_ns() - t0);
            if (rc != 0)
                set_sticky(cl, rc, "fdatasync of the WAL");
            else
                cl->synced = cl->wal_size;
        }
        for (tn_walop_t *op = cl->rhead; op != NULL; op = op->pnext) {
            if (op->s.status == 0)
                op->s.status = rc;
            op->s.next = NULL;
            if (tail != NULL)
                tail->next = &op->s;
            else
                head = &op->s;
            tail = &op->s;
        }
    }
    if (head != NULL)
        tn__store_complete(c->store, head, tail);

    for (tn_chanlog_t *cl = logs, *next; cl != NULL; cl = next) {
        next = cl->rnext;
        if (atomic_load(&cl->err) == 0 && cl->since_ckpt >= c->store->opts.checkpoint_every)
            checkpoint(cl);
        cl->in_round = false;
        cl->rhead = cl->rtail = NULL;
        cl->rnext = NULL;
    }

    tn__round_exec(c, controls);
}

static void state_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_chanlog_state_t *req = (tn_chanlog_state_t *)s;
    tn_chanlog_t *cl = req->cl;
    int rc = atomic_load(&cl->err);
    if (rc == 0 && cl->alloc < cl->wal_size + WAL_ZERO_AHEAD) {
        /* Space to write in again: the zeros a write puts ahead anyway. */
        uint64_t target = cl->wal_size + WAL_ZERO_AHEAD;
        rc = tn_io_write_zeros(cl->fd, cl->alloc, target);
        if (rc == 0) {
            cl->alloc = target;
        } else {
            int cut = tn_io_ftruncate(cl->fd, cl->wal_size);
            cl->alloc = cl->wal_size;
            if (!tn_io_nospace(rc) || cut != 0)
                set_sticky(cl, cut != 0 ? cut : rc, "writing zeros ahead of the WAL");
        }
    }
    if (rc == 0)
        rc = tn_cursor_copy(&req->cur, &cl->durable);
    s->status = rc;
    tn__store_complete(c->store, s, s);
}

static void state_done(tn__sreq_t *s)
{
    tn_chanlog_state_t *req = (tn_chanlog_state_t *)s;
    req->cb(req, s->status);
}

int tn_chanlog_state(tn_chanlog_t *cl, tn_chanlog_state_t *req, tn_chanlog_state_cb cb)
{
    if (cl->closing)
        return TN_ECLOSED;
    int err = atomic_load(&cl->err);
    if (err != 0)
        return err;
    memset(&req->s, 0, sizeof(req->s));
    req->s.exec = state_exec;
    req->s.done = state_done;
    req->cl = cl;
    req->cb = cb;
    tn__committer_submit(&cl->store->walc, &req->s);
    return 0;
}

static void close_exec(tn__committer_t *c, tn__sreq_t *s)
{
    tn_chanlog_t *cl = TN_CONTAINER_OF(s, tn_chanlog_t, close_req);
    /* The zeroed tail goes; the cut need not be durable. */
    if (cl->fd >= 0 && cl->alloc > cl->wal_size && tn_io_ftruncate(cl->fd, cl->wal_size) == 0)
        cl->alloc = cl->wal_size;
    tn__store_complete(c->store, s, s);
}

static void close_done(tn__sreq_t *s)
{
    tn_chanlog_t *cl = TN_CONTAINER_OF(s, tn_chanlog_t, close_req);
    tn_store_t *store = cl->store;
    uv_mutex_lock(&store->open_lock);
    if (cl->prev_open != NULL)
        cl->prev_open->next_open = cl->next_open;
    else
        store->chanlogs = cl->next_open;
    if (cl->next_open != NULL)
        cl->next_open->prev_open = cl->prev_open;
    uv_mutex_unlock(&store->open_lock);
    if (cl->close_cb != NULL)
        cl->close_cb(cl);
    chanlog_free(cl);
    tn__store_closed_one(store);
}

void tn_chanlog_close(tn_chanlog_t *cl, tn_chanlog_cb cb)
{
    if (cl->closing)
        return;
    cl->closing = true;
    cl->close_cb = cb;
    memset(&cl->close_req, 0, sizeof(cl->close_req));
    cl->close_req.exec = close_exec;
    cl->close_req.done = close_done;
    cl->store->closing++;
    tn__committer_submit(&cl->store->walc, &cl->close_req);
}

int tn_chanlog_delete(tn_store_t *store, const char *topic, uint32_t partition, const char *channel)
{
    char dir[4096], path[4096];
    int rc = partition_dir(store, topic, partition, dir, sizeof(dir));
    if (rc != 0)
        return rc;
    if (!tn_store_valid_name(channel))
        return UV_EINVAL;
    if ((rc = tn_io_path(path, sizeof(path), "%s/%s.ckpt", dir, channel)) != 0)
        return rc;
    rc = tn_io_unlink(path);
    if (rc != 0 && rc != UV_ENOENT)
        return rc;
    if ((rc = tn_io_fsync_dir(dir)) != 0)
        return rc;
    if ((rc = tn_io_path(path, sizeof(path), "%s/%s.wal", dir, channel)) != 0)
        return rc;
    rc = tn_io_unlink(path);
    if (rc != 0 && rc != UV_ENOENT)
        return rc;
    return tn_io_fsync_dir(dir);
}

int tn_chanlog_probe(tn_store_t *store, const char *topic, uint32_t partition, const char *channel,
                     bool *ckpt, bool *wal)
{
    char dir[4096], path[4096];
    int rc = partition_dir(store, topic, partition, dir, sizeof(dir));
    if (rc != 0)
        return rc;
    if (!tn_store_valid_name(channel))
        return UV_EINVAL;
    const char *ext[2] = {"ckpt", "wal"};
    bool *found[2] = {ckpt, wal};
    for (int i = 0; i < 2; i++) {
        if ((rc = tn_io_path(path, sizeof(path), "%s/%s.%s", dir, channel, ext[i])) != 0)
            return rc;
        *found[i] = access(path, F_OK) == 0;
        if (!*found[i] && errno != ENOENT)
            return tn_err_from_errno(errno);
    }
    return 0;
}

int tn_chanlog_list(tn_store_t *store, const char *topic, uint32_t partition, tn_chanlog_list_cb cb,
                    void *arg)
{
    char dir[4096];
    int rc = partition_dir(store, topic, partition, dir, sizeof(dir));
    if (rc != 0)
        return rc;
    DIR *d = opendir(dir);
    if (d == NULL)
        return tn_err_from_errno(errno);
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".ckpt") != 0 || n - 5 > 255)
            continue;
        char name[256];
        memcpy(name, e->d_name, n - 5);
        name[n - 5] = '\0';
        if (tn_store_valid_name(name))
            rc = cb(arg, name);
    }
    closedir(d);
    return rc;
}
