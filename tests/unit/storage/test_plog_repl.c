/* The partition log's replication support: control records, the epoch
 * history (begin_epoch, queries, repair at open, retention), the
 * follower's raw copy of the leader's records, suffix truncation and each
 * of its crash points, the repair of a damaged segment (sealed or the
 * active one) and the record of its damage across a restart, the scrub of
 * the active segment, the rebuild of a damaged epochs file, and the hw
 * gate. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "storage/epochs.h"
#include "storage/io.h"
#include "storage/record.h"
#include "storage/scrub.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef tu_fx_t fx_t;

static int setup(void **state)
{
    *state = tu_fx_new(NULL);
    return 0;
}

static int teardown(void **state)
{
    tu_fx_free(*state);
    return 0;
}

static tn_plog_t *open_log(fx_t *fx, const char *topic, uint32_t part)
{
    tn_plog_t *plog = NULL;
    assert_int_equal(tn_plog_open(fx->store, topic, part, &plog), 0);
    assert_int_equal(tn_plog_err(plog), 0);
    return plog;
}

typedef struct {
    int done;
    int status;
    int order[16]; /* which requests completed, in order */
    int norder;
} waits_t;

typedef struct {
    tn_append_t req;
    waits_t *w;
    int id;
    bool done;
    int status;
} areq_t;

static void on_areq(tn_append_t *req, int status)
{
    areq_t *a = req->data;
    a->done = true;
    a->status = status;
    if (a->w != NULL) {
        a->w->done++;
        if (a->w->norder < 16)
            a->w->order[a->w->norder++] = a->id;
    }
}

static void run_until(uv_loop_t *loop, const bool *flag)
{
    while (!*flag)
        uv_run(loop, UV_RUN_ONCE);
}

static int begin_epoch(fx_t *fx, tn_plog_t *pl, uint32_t epoch, uint64_t *off)
{
    areq_t a = {.w = NULL};
    a.req.data = &a;
    int rc = tn_plog_begin_epoch(pl, &a.req, epoch, on_areq);
    if (rc != 0)
        return rc;
    run_until(&fx->loop, &a.done);
    if (off != NULL)
        *off = a.req.first_offset;
    return a.status;
}

static void append_n(fx_t *fx, tn_plog_t *pl, uint64_t n)
{
    char body[512];
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = tn_plog_written_next(pl);
        size_t len = tu_body(off, body, sizeof(body));
        uint64_t got;
        assert_int_equal(tu_append(&fx->loop, pl, body, len, &got), 0);
        assert_int_equal(got, off);
    }
}

/* A batch of n records (bodies numbered by their offsets). */
static void append_batch(fx_t *fx, tn_plog_t *pl, uint32_t n)
{
    char bodies[8][512];
    tn_rec_in_t recs[8];
    assert_true(n <= 8);
    uint64_t first = tn_plog_written_next(pl);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = tu_body(first + i, bodies[i], sizeof(bodies[i]));
        recs[i] = (tn_rec_in_t){.key = tn_iov(NULL, 0), .body = tn_iov(bodies[i], len)};
    }
    uint64_t got;
    assert_int_equal(tu_append_batch(&fx->loop, pl, recs, n, &got), 0);
    assert_int_equal(got, first);
}

static void read_rec(tn_plog_t *pl, uint64_t off, tn_buf_t *scratch, tn_rec_t *rec)
{
    int rc = tn_plog_read(pl, off, scratch, rec);
    if (rc != 0)
        fail_msg("read %llu: %s", (unsigned long long)off, tn_strerror(rc));
}

static bool exists(fx_t *fx, const char *topic, uint32_t p, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/%s/%u/%s", fx->dir, topic, p, name);
    return access(path, F_OK) == 0;
}

/* --- control records ------------------------------------------------------------ */

static void test_control_records(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "ctl", 0);
    unsigned char prod[TN_CTRL_PRODUCER_SIZE];
    tn_ctrl_encode_producer(prod, 3, 77, 2);
    tn_rec_in_t recs[3] = {
        {.key = tn_iov(NULL, 0), .body = tn_iov(prod, sizeof(prod))},
        {.key = tn_iov(NULL, 0), .body = tn_iov("one", 3)},
        {.key = tn_iov("k", 1), .body = tn_iov("two", 3)},
    };
    areq_t a = {.w = NULL};
    a.req.data = &a;
    assert_int_equal(tn_plog_append_ex(pl, &a.req, recs, 3, 4, on_areq), UV_EINVAL);
    tn_rec_in_t empty = {.key = tn_iov(NULL, 0), .body = tn_iov(NULL, 0)};
    assert_int_equal(tn_plog_append_ex(pl, &a.req, &empty, 1, 1, on_areq), UV_EINVAL);
    assert_int_equal(tn_plog_append_ex(pl, &a.req, recs, 3, 1, on_areq), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);
    assert_int_equal(a.req.first_offset, 0);

    for (int pass = 0; pass < 2; pass++) {
        tn_buf_t s;
        tn_buf_init(&s);
        tn_rec_t rec;
        read_rec(pl, 0, &s, &rec);
        assert_int_equal(rec.h.flags, TN_REC_F_CONTROL | TN_REC_F_MORE);
        tn_ctrl_t c;
        assert_int_equal(tn_ctrl_decode(rec.body, rec.h.body_len, &c), 0);
        assert_int_equal(c.kind, TN_CTRL_PRODUCER);
        assert_int_equal(c.node, 3);
        assert_int_equal(c.seq, 77);
        assert_int_equal(c.count, 2);
        read_rec(pl, 1, &s, &rec);
        assert_int_equal(rec.h.flags, TN_REC_F_MORE);
        read_rec(pl, 2, &s, &rec);
        assert_int_equal(rec.h.flags, 0);
        assert_memory_equal(rec.body, "two", 3);
        tn_buf_fini(&s);
        /* Control records survive recovery (the scan accepts the flag). */
        tu_fx_reopen(fx);
        pl = open_log(fx, "ctl", 0);
        assert_int_equal(tn_plog_written_next(pl), 3);
    }
    /* A plain log never gets an epochs file. */
    assert_false(exists(fx, "ctl", 0, TN_EPOCHS_FILE));

    tn_ctrl_t c;
    unsigned char ep[TN_CTRL_EPOCH_START_SIZE];
    tn_ctrl_encode_epoch(ep, 9);
    assert_int_equal(tn_ctrl_decode(ep, sizeof(ep), &c), 0);
    assert_int_equal(c.kind, TN_CTRL_EPOCH_START);
    assert_int_equal(c.epoch, 9);
    assert_int_equal(tn_ctrl_decode(ep, 4, &c), TN_ECORRUPT);
    assert_int_equal(tn_ctrl_decode(prod, 20, &c), TN_ECORRUPT);
    assert_int_equal(tn_ctrl_decode(ep, 0, &c), TN_ECORRUPT);
    unsigned char reserved[1] = {200};
    assert_int_equal(tn_ctrl_decode(reserved, 1, &c), 0);
    assert_int_equal(c.kind, 200);
}

/* --- epochs ----------------------------------------------------------------------- */

static void expect_end(tn_plog_t *pl, uint32_t asked, uint32_t found, uint64_t end)
{
    uint32_t f;
    uint64_t e;
    assert_int_equal(tn_plog_epoch_end(pl, asked, &f, &e), 0);
    assert_int_equal(f, found);
    assert_int_equal(e, end);
}

static void test_begin_epoch_and_queries(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "ep", 0);
    assert_int_equal(tn_plog_last_epoch(pl), 0);
    assert_false(tn_plog_is_replica(pl)); /* a factor-1 partition's log, so far */
    expect_end(pl, 5, 0, 0);
    uint64_t off;
    assert_int_equal(begin_epoch(fx, pl, 2, &off), 0);
    assert_int_equal(off, 0);
    assert_true(tn_plog_is_replica(pl));
    assert_true(exists(fx, "ep", 0, TN_EPOCHS_FILE));
    append_n(fx, pl, 3);
    assert_int_equal(begin_epoch(fx, pl, 5, &off), 0);
    assert_int_equal(off, 4);
    append_batch(fx, pl, 3);
    assert_int_equal(tn_plog_written_next(pl), 8);
    /* A stale epoch is refused at run time and writes nothing. */
    assert_int_equal(begin_epoch(fx, pl, 5, NULL), TN_ERANGE);
    assert_int_equal(begin_epoch(fx, pl, 4, NULL), TN_ERANGE);
    assert_int_equal(tn_plog_written_next(pl), 8);
    assert_int_equal(begin_epoch(fx, pl, 0, NULL), UV_EINVAL);

    tn_buf_t s;
    tn_buf_init(&s);
    tn_rec_t rec;
    read_rec(pl, 4, &s, &rec);
    assert_true(rec.h.flags & TN_REC_F_CONTROL);
    tn_ctrl_t c;
    assert_int_equal(tn_ctrl_decode(rec.body, rec.h.body_len, &c), 0);
    assert_int_equal(c.kind, TN_CTRL_EPOCH_START);
    assert_int_equal(c.epoch, 5);
    tn_buf_fini(&s);

    for (int pass = 0; pass < 2; pass++) {
        assert_true(tn_plog_is_replica(pl)); /* reopened too */
        assert_int_equal(tn_plog_last_epoch(pl), 5);
        expect_end(pl, 1, 0, 0);
        expect_end(pl, 2, 2, 4);
        expect_end(pl, 3, 2, 4);
        expect_end(pl, 5, 5, 8);
        expect_end(pl, 9, 5, 8);
        uint32_t f;
        uint64_t e8;
        assert_int_equal(tn_plog_epoch_end_cb(pl, 4, &f, &e8), 0);
        assert_int_equal(f, 2);
        assert_int_equal(e8, 4);
        tn_epoch_entry_t e[4];
        assert_int_equal(tn_plog_epochs_range(pl, 0, 8, e, 4), 2);
        assert_int_equal(e[0].epoch, 2);
        assert_int_equal(e[0].start, 0);
        assert_int_equal(e[1].epoch, 5);
        assert_int_equal(e[1].start, 4);
        assert_int_equal(tn_plog_epochs_range(pl, 2, 4, e, 4), 1);
        assert_int_equal(e[0].epoch, 2);
        assert_int_equal(e[0].start, 2);
        assert_int_equal(tn_plog_epochs_range(pl, 6, 8, e, 4), 1);
        assert_int_equal(e[0].epoch, 5);
        assert_int_equal(e[0].start, 6);
        assert_int_equal(tn_plog_epochs_range(pl, 3, 8, e, 1), 1);
        assert_int_equal(tn_plog_epochs_range(pl, 8, 8, e, 4), 0);
        tu_fx_reopen(fx);
        pl = open_log(fx, "ep", 0);
    }
}

/* A crash between a log change and the epochs file's save: the open
 * repairs the history to the log. */
static void test_epochs_repaired_at_open(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "rep", 0);
    assert_int_equal(begin_epoch(fx, pl, 1, NULL), 0);
    append_n(fx, pl, 9);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;

    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/rep/0", fx->dir);
    tn_epochs_t h;
    tn_epochs_init(&h);
    assert_int_equal(tn_epochs_assign(&h, 1, 0, NULL), 0);
    assert_int_equal(tn_epochs_assign(&h, 2, 5, NULL), 0);
    assert_int_equal(tn_epochs_assign(&h, 3, 10, NULL), 0); /* at the log end */
    assert_int_equal(tn_epochs_assign(&h, 4, 40, NULL), 0); /* past it */
    assert_int_equal(tn_epochs_save(&h, dir), 0);

    fx->store = tu_store_open(&fx->loop, &fx->opts);
    pl = open_log(fx, "rep", 0);
    assert_int_equal(tn_plog_last_epoch(pl), 2);
    expect_end(pl, 9, 2, 10);
    assert_int_equal(tn_epochs_load(&h, dir), 0); /* saved repaired */
    assert_int_equal(h.n, 2);
    tn_epochs_fini(&h);

    /* A damaged file isolates the partition. */
    tu_store_close(&fx->loop, fx->store);
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, TN_EPOCHS_FILE);
    tu_patch_file(path, 0, "XXXX", 4);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    assert_int_equal(tn_plog_open(fx->store, "rep", 0, &pl), 0);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
}

/* A listing of dir: every name with its size and modification time, to
 * show that a probe wrote nothing. */
static void listing(const char *dir, char *out, size_t len)
{
    char cmd[4300];
    snprintf(cmd, sizeof(cmd), "cd '%s' && stat -c '%%n %%s %%Y.%%y' * | sort", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    pclose(f);
}

/* tn_plog_probe finds what tn_plog_open recovers, without writing: the
 * log end (a torn tail not counted), the history cut to the log (and the
 * highest epoch it named before the cut), damage as TN_ECORRUPT. */
static void test_probe(void **state)
{
    fx_t *fx = *state;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/pr/0", fx->dir);
    tn_plog_probe_t pr;
    assert_int_equal(tn_plog_probe(dir, &pr), UV_ENOENT);
    tn_plog_probe_fini(&pr);

    tn_plog_t *pl = open_log(fx, "pr", 0);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    assert_int_equal(tn_plog_probe(dir, &pr), 0); /* an empty log */
    assert_int_equal(pr.log_end, 0);
    assert_int_equal(pr.epochs.n, 0);
    assert_int_equal(pr.max_epoch, 0);
    tn_plog_probe_fini(&pr);

    fx->store = tu_store_open(&fx->loop, &fx->opts);
    pl = open_log(fx, "pr", 0);
    assert_int_equal(begin_epoch(fx, pl, 1, NULL), 0);
    append_n(fx, pl, 5);
    assert_int_equal(begin_epoch(fx, pl, 2, NULL), 0);
    append_n(fx, pl, 4);
    uint64_t end = tn_plog_written_next(pl);
    assert_int_equal(end, 11); /* two epoch-start records */
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    /* A leader's entry at the log end (it wrote nothing in epoch 3). */
    tn_epochs_t h;
    tn_epochs_init(&h);
    assert_int_equal(tn_epochs_load(&h, dir), 0);
    assert_int_equal(tn_epochs_assign(&h, 3, end, NULL), 0);
    assert_int_equal(tn_epochs_save(&h, dir), 0);
    tn_epochs_fini(&h);
    /* And a torn record after the last whole one. */
    char seg[4200];
    snprintf(seg, sizeof(seg), "%s/%020d.log", dir, 0);
    FILE *f = fopen(seg, "ab");
    assert_non_null(f);
    fwrite("\x40\x00\x00\x00torn", 1, 8, f);
    fclose(f);

    char before[8192], after[8192];
    listing(dir, before, sizeof(before));
    assert_int_equal(tn_plog_probe(dir, &pr), 0);
    listing(dir, after, sizeof(after));
    assert_non_null(strstr(before, "epochs "));
    assert_string_equal(before, after); /* nothing written, nothing cut */
    assert_int_equal(pr.log_start, 0);
    assert_int_equal(pr.log_end, end);
    assert_int_equal(tn_epochs_latest(&pr.epochs), 2);
    assert_int_equal(pr.max_epoch, 3);
    tn_plog_probe_fini(&pr);

    /* The log opened there agrees. */
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    pl = open_log(fx, "pr", 0);
    assert_int_equal(tn_plog_written_next(pl), end);
    assert_int_equal(tn_plog_last_epoch(pl), 2);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;

    /* Damage: a bad record below a whole one, and a damaged epochs file. */
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, TN_EPOCHS_FILE);
    tu_patch_file(path, 0, "XXXX", 4);
    assert_int_equal(tn_plog_probe(dir, &pr), TN_ECORRUPT);
    assert_non_null(strstr(pr.errmsg, "magic"));
    tn_plog_probe_fini(&pr);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    assert_int_equal(tn_plog_open(fx->store, "pr", 0, &pl), 0);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT); /* as the open isolates it */
}

static void on_gc(tn_plog_gc_t *req, int status)
{
    bool *done = req->data;
    assert_int_equal(status, 0);
    *done = true;
}

static void on_floor(tn_plog_floor_t *req, int status)
{
    bool *done = req->data;
    assert_int_equal(status, 0);
    *done = true;
}

static void test_retention_trims_epochs(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "ret", 0);
    assert_int_equal(begin_epoch(fx, pl, 1, NULL), 0);
    append_n(fx, pl, 400);
    assert_int_equal(begin_epoch(fx, pl, 2, NULL), 0);
    append_n(fx, pl, 1200);
    tn_plog_gc_t gc;
    bool done = false;
    gc.data = &done;
    assert_int_equal(tn_plog_gc(pl, &gc, tn_plog_written_next(pl), 0, on_gc), 0);
    run_until(&fx->loop, &done);
    assert_true(gc.deleted > 0);
    tn_plog_stats_t st;
    tn_plog_stats(pl, &st);
    assert_true(st.first_offset > 401);
    tn_epoch_entry_t e[4];
    assert_int_equal(tn_plog_epochs_range(pl, 0, st.written_next, e, 4), 1);
    assert_int_equal(e[0].epoch, 2);
    /* Epoch 1 is below every entry now: undefined (0), and where the
     * history starts (the log's first offset: a follower holding only
     * epoch 1 restarts its copy there, cluster/repl.c). */
    expect_end(pl, 1, 0, st.first_offset);
    tu_fx_reopen(fx);
    pl = open_log(fx, "ret", 0);
    expect_end(pl, 1, 0, st.first_offset);
    expect_end(pl, 2, 2, st.written_next);
}

/* --- raw copy ------------------------------------------------------------------- */

/* Copy everything from leader to follower through read_raw/append_raw in
 * pieces of at most max_bytes; returns the number of pieces. */
/* Copy what follower lacks of leader, in pieces of at most max_bytes;
 * with full_every > 0, the first try of every full_every-th piece finds
 * the disk full (its first write fails with ENOSPC), which must fail
 * that append alone (counted in *refused) and leave the log as it was
 * for the next try. Returns the pieces copied. */
static int copy_pieces(fx_t *fx, tn_plog_t *leader, tn_plog_t *follower, size_t max_bytes,
                       int full_every, int *refused)
{
    int pieces = 0;
    tn_buf_t b;
    tn_buf_init(&b);
    for (;;) {
        uint64_t from = tn_plog_written_next(follower);
        uint32_t n;
        tn_buf_reset(&b);
        assert_int_equal(tn_plog_read_raw(leader, from, max_bytes, &b, &n), 0);
        if (n == 0)
            break;
        tn_epoch_entry_t e[8];
        uint32_t ne = tn_plog_epochs_range(leader, from, from + n, e, 8);
        for (int attempt = 0;; attempt++) {
            areq_t a = {.w = NULL};
            a.req.data = &a;
            bool full = attempt == 0 && full_every > 0 && pieces % full_every == 0;
            if (full)
                tn_io_fail_write_after(0, UV_ENOSPC);
            assert_int_equal(tn_plog_append_raw(follower, &a.req, tn_buf_data(&b), tn_buf_size(&b),
                                                from, e, ne, on_areq),
                             0);
            run_until(&fx->loop, &a.done);
            tn_io_fail_write_after(-1, 0);
            assert_int_equal(tn_plog_err(follower), 0);
            if (a.status == 0) {
                assert_int_equal(a.req.first_offset, from);
                assert_int_equal(tn_plog_written_next(follower), from + n);
                break;
            }
            assert_true(full);
            assert_int_equal(a.status, UV_ENOSPC);
            assert_int_equal(tn_plog_written_next(follower), from);
            (*refused)++;
        }
        pieces++;
    }
    tn_buf_fini(&b);
    /* Copies complete once written; the sync follows in the same round. */
    while (tn_plog_durable_next(follower) < tn_plog_written_next(follower))
        uv_sleep(1);
    return pieces;
}

static int copy_all(fx_t *fx, tn_plog_t *leader, tn_plog_t *follower, size_t max_bytes)
{
    return copy_pieces(fx, leader, follower, max_bytes, 0, NULL);
}

/* Every offset of a and b reads the same: the same record (with the
 * same publish time when times: b a copy of a, not a log built alike),
 * or TN_EGAP from both (offsets a gap of a log never assigned). */
static void expect_reads_same(tn_plog_t *a, tn_plog_t *b, bool times)
{
    uint64_t n = tn_plog_written_next(a);
    assert_int_equal(tn_plog_written_next(b), n);
    tn_buf_t sa, sb;
    tn_buf_init(&sa);
    tn_buf_init(&sb);
    for (uint64_t off = 0; off < n; off++) {
        tn_rec_t ra, rb;
        int rca = tn_plog_read(a, off, &sa, &ra);
        int rcb = tn_plog_read(b, off, &sb, &rb);
        if (rca != rcb || (rca != 0 && rca != TN_EGAP))
            fail_msg("offset %llu: %s and %s", (unsigned long long)off, tn_strerror(rca),
                     tn_strerror(rcb));
        if (rca != 0)
            continue;
        assert_int_equal(ra.h.flags, rb.h.flags);
        if (times)
            assert_int_equal(ra.h.publish_ns, rb.h.publish_ns);
        assert_int_equal(ra.h.body_len, rb.h.body_len);
        assert_int_equal(ra.h.key_len, rb.h.key_len);
        assert_memory_equal(ra.body, rb.body, ra.h.body_len);
    }
    tn_buf_fini(&sa);
    tn_buf_fini(&sb);
}

static void expect_same(tn_plog_t *a, tn_plog_t *b)
{
    expect_reads_same(a, b, true);
}

/* A copy of records that precede every epoch (a factor-1 partition's,
 * copied by its move) is known for a replica's at its next open: its first
 * records write an empty epochs file (tn_plog_is_replica), as does its
 * replica manager's open before any (tn_plog_mark_replica), which the
 * engine asks before it would skip the log to the end its channels refer
 * to (queue/channel.c, check_lost_tail). */
static void test_copy_without_epochs_is_a_replica(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *src = open_log(fx, "f1", 0);
    append_n(fx, src, 6);
    tn_plog_t *cp = open_log(fx, "f1cp", 0);
    assert_false(tn_plog_is_replica(cp));
    copy_all(fx, src, cp, 1 << 16);
    assert_false(tn_plog_is_replica(src));
    assert_false(exists(fx, "f1", 0, TN_EPOCHS_FILE));
    for (int pass = 0; pass < 2; pass++) {
        assert_true(tn_plog_is_replica(cp));
        assert_true(exists(fx, "f1cp", 0, TN_EPOCHS_FILE));
        assert_int_equal(tn_plog_last_epoch(cp), 0);
        assert_int_equal(tn_plog_written_next(cp), 6);
        tu_fx_reopen(fx);
        src = open_log(fx, "f1", 0);
        cp = open_log(fx, "f1cp", 0);
        assert_false(tn_plog_is_replica(src));
    }
    expect_same(src, cp);

    /* A copy marked by its replica manager's open, before any record. */
    tn_plog_t *mk = open_log(fx, "f1mk", 0);
    assert_false(tn_plog_is_replica(mk));
    assert_int_equal(tn_plog_mark_replica(mk), 0);
    assert_true(tn_plog_is_replica(mk));
    assert_int_equal(tn_plog_mark_replica(mk), 0); /* once is enough */
    tu_fx_reopen(fx);
    mk = open_log(fx, "f1mk", 0);
    assert_true(tn_plog_is_replica(mk));
    assert_int_equal(tn_plog_written_next(mk), 0);
}

/* A mark that cannot be written (a full disk) leaves the log unmarked and
 * failed: the replica manager's copy_ready (tn_replica_copy_ready) then
 * keeps the leader's channel state out of a copy whose epochs file is not
 * on disk, which the engine would skip forward at the next start
 * (queue/channel.c, check_lost_tail). */
static void test_failed_mark_is_not_a_replica(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *mk = open_log(fx, "f1mkfail", 0);
    tn_io_fail_write_after(0, UV_ENOSPC);
    int rc = tn_plog_mark_replica(mk);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(rc, UV_ENOSPC);
    assert_int_equal(tn_plog_err(mk), UV_ENOSPC);
    assert_false(exists(fx, "f1mkfail", 0, TN_EPOCHS_FILE));
    assert_false(tn_plog_is_replica(mk));
}

static void build_leader(fx_t *fx, tn_plog_t *pl)
{
    assert_int_equal(begin_epoch(fx, pl, 1, NULL), 0);
    append_n(fx, pl, 300);
    for (int i = 0; i < 40; i++)
        append_batch(fx, pl, 1 + (uint32_t)(i % 7));
    assert_int_equal(begin_epoch(fx, pl, 3, NULL), 0);
    append_n(fx, pl, 700);
    assert_int_equal(begin_epoch(fx, pl, 4, NULL), 0);
    for (int i = 0; i < 30; i++)
        append_batch(fx, pl, 8);
}

typedef struct {
    bool done;
    tn_scrub_report_t rep;
} scrubbed_t;

static void on_scrubbed(tn_scrub_wait_t *w, const tn_scrub_report_t *rep)
{
    scrubbed_t *x = w->data;
    x->rep = *rep;
    x->done = true;
}

/* One scrub run over every open log's sealed segments: its report. */
static tn_scrub_report_t scrub_all(fx_t *fx)
{
    static const tn_scrub_opts_t fast = {1024ull * 1024 * 1024, 0, 0, NULL, NULL, NULL};
    tn_scrub_t *s = NULL;
    assert_int_equal(tn_scrub_new(&fx->loop, fx->store, &fast, &s), 0);
    uint64_t id = 0;
    bool started = false;
    tn_scrub_start(s, &id, &started);
    assert_true(started);
    scrubbed_t x = {0};
    tn_scrub_wait_t w = {.data = &x};
    tn_scrub_wait(s, &w, id, on_scrubbed);
    while (!x.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tn_scrub_close(s);
    return x.rep;
}

static void test_raw_copy(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *leader = open_log(fx, "lead", 0);
    tn_plog_t *follower = open_log(fx, "follow", 0);
    build_leader(fx, leader);
    /* The copies are written later than the leader's records were: their
     * segments must still carry the records' publish times (the sidecar
     * index's first and newest), not the time of the copy. */
    uv_sleep(20);
    /* Small pieces: many batches cut at their ends, segments roll on both. */
    int pieces = copy_all(fx, leader, follower, 3000);
    assert_true(pieces > 50);
    expect_same(leader, follower);
    tn_plog_stats_t st;
    tn_plog_stats(follower, &st);
    assert_true(st.segments > 3);
    tn_scrub_report_t rep = scrub_all(fx);
    assert_true(rep.segments > 6);
    for (uint32_t i = 0; i < rep.nerrors; i++)
        print_message("scrub: %s: %s\n", rep.errors[i].file, rep.errors[i].what);
    assert_int_equal(rep.errors_total, 0);
    tu_fx_reopen(fx);
    leader = open_log(fx, "lead", 0);
    follower = open_log(fx, "follow", 0);
    expect_same(leader, follower);
    /* Still appendable after recovery: the next piece continues. */
    append_n(fx, leader, 5);
    assert_int_equal(copy_all(fx, leader, follower, 1 << 20), 1);
    expect_same(leader, follower);
}

/* A follower's copy that finds the disk full (its records, the roll it
 * needs, or the epochs file it saves first) fails that append alone: the
 * offsets go back (and the epochs it carried when their file could not be
 * saved), and the next try writes it. */
static void test_raw_copy_full_disk(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *leader = open_log(fx, "lead", 0);
    tn_plog_t *follower = open_log(fx, "follow", 0);
    build_leader(fx, leader);
    int refused = 0;
    copy_pieces(fx, leader, follower, 3000, 3, &refused);
    assert_true(refused > 5);
    expect_same(leader, follower);
    tu_fx_reopen(fx);
    leader = open_log(fx, "lead", 0);
    follower = open_log(fx, "follow", 0);
    assert_int_equal(tn_plog_err(follower), 0);
    expect_same(leader, follower);
}

/* A new leader's epoch start on a full disk: the epochs file's save, or
 * the start record's write, fails that begin_epoch alone (the log not
 * failed), and the same epoch asked again begins where the log ends, also
 * after publishes the log took meanwhile. */
static void test_begin_epoch_full_disk(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "lead", 0);
    assert_int_equal(begin_epoch(fx, pl, 2, NULL), 0);
    append_n(fx, pl, 3);
    tn_io_fail_write_after(0, UV_ENOSPC); /* the epochs file's temp file */
    assert_int_equal(begin_epoch(fx, pl, 3, NULL), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_plog_err(pl), 0);
    uint32_t found;
    uint64_t end;
    assert_int_equal(tn_plog_epoch_end(pl, 3, &found, &end), 0);
    assert_int_equal(found, 2);         /* 3 taken back */
    tn_io_fail_write_after(1, -EDQUOT); /* the epochs file saved; the record's write */
    assert_int_equal(begin_epoch(fx, pl, 3, NULL), -EDQUOT);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_int_equal(tn_plog_written_next(pl), 4);
    uint64_t off;
    assert_int_equal(begin_epoch(fx, pl, 3, &off), 0);
    assert_int_equal(off, 4);
    append_n(fx, pl, 2);
    /* Again, with a publish taken between the failed start and the next. */
    tn_io_fail_write_after(1, UV_ENOSPC);
    assert_int_equal(begin_epoch(fx, pl, 4, NULL), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    append_n(fx, pl, 1);
    assert_int_equal(begin_epoch(fx, pl, 4, &off), 0);
    assert_int_equal(off, 8);
    assert_int_equal(tn_plog_epoch_end(pl, 3, &found, &end), 0);
    assert_int_equal(found, 3);
    assert_int_equal(end, 7); /* epoch 4 from the publish on */
    assert_int_equal(tn_plog_err(pl), 0);
    tu_fx_reopen(fx);
    pl = open_log(fx, "lead", 0);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_int_equal(tn_plog_written_next(pl), 9);
    assert_int_equal(tn_plog_epoch_end(pl, 3, &found, &end), 0);
    assert_int_equal(end, 7);
    /* Killed with an epoch unwritten: the open drops it (no record of
     * it), as after a kill between the save and the record. */
    tn_io_fail_write_after(2, UV_ENOSPC); /* after the epochs file and the zeros ahead */
    assert_int_equal(begin_epoch(fx, pl, 5, NULL), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    tu_fx_reopen(fx);
    pl = open_log(fx, "lead", 0);
    assert_int_equal(tn_plog_epoch_end(pl, 5, &found, &end), 0);
    assert_int_equal(found, 4);
    assert_int_equal(begin_epoch(fx, pl, 4, NULL), TN_ERANGE); /* began here before */
    assert_int_equal(begin_epoch(fx, pl, 5, &off), 0);
    assert_int_equal(off, 9);
}

typedef struct {
    bool done;
    int status;
} tw_t;

static void on_advance(tn_plog_advance_t *req, int status)
{
    tw_t *w = req->data;
    w->done = true;
    w->status = status;
}

static void test_raw_refusals(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *leader = open_log(fx, "lead", 0);
    tn_plog_t *follower = open_log(fx, "follow", 0);
    assert_int_equal(begin_epoch(fx, leader, 2, NULL), 0);
    append_batch(fx, leader, 3);
    append_n(fx, leader, 2);
    tn_buf_t b;
    tn_buf_init(&b);
    uint32_t n;
    assert_int_equal(tn_plog_read_raw(leader, 0, 1, &b, &n), 0);
    assert_int_equal(n, 1); /* the first batch even when bigger than asked */
    tn_buf_reset(&b);
    assert_int_equal(tn_plog_read_raw(leader, 1, 10, &b, &n), 0);
    assert_int_equal(n, 3); /* one whole batch of 3 */
    tn_buf_reset(&b);
    assert_int_equal(tn_plog_read_raw(leader, 7, 10, &b, &n), TN_ENOTFOUND);
    assert_int_equal(tn_plog_read_raw(leader, 6, 10, &b, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(tn_plog_read_raw(leader, 0, 1 << 20, &b, &n), 0);
    assert_int_equal(n, 6);
    size_t len = tn_buf_size(&b);
    unsigned char *bytes = malloc(len);
    memcpy(bytes, tn_buf_data(&b), len);
    tn_epoch_entry_t e = {2, 0};

    areq_t a = {.w = NULL};
    a.req.data = &a;
    /* Not at the follower's end: refused when it runs. */
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, len, 0, &e, 1, on_areq), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);
    a.done = false;
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, len, 0, &e, 1, on_areq), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, TN_ERANGE);
    assert_int_equal(tn_plog_written_next(follower), 6);
    /* Offsets not what first_offset says, a bad CRC, a cut record, a
     * batch cut in the middle, unordered epochs: refused at once. */
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, len, 6, NULL, 0, on_areq),
                     TN_ECORRUPT);
    bytes[len - 1] ^= 1;
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, len, 0, NULL, 0, on_areq),
                     TN_ECORRUPT);
    bytes[len - 1] ^= 1;
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, len - 1, 0, NULL, 0, on_areq),
                     TN_ECORRUPT);
    size_t two = 0; /* the first record and the first of the batch of 3 */
    for (int i = 0; i < 2; i++) {
        tn_rec_hdr_t h;
        assert_int_equal(tn_rec_decode_hdr(bytes + two, len - two, &h), 0);
        two += (size_t)tn_rec_size(&h);
    }
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, two, 0, NULL, 0, on_areq),
                     TN_ECORRUPT);
    tn_epoch_entry_t bad[2] = {{3, 0}, {2, 1}};
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, len, 0, bad, 2, on_areq),
                     TN_ECORRUPT);
    assert_int_equal(tn_plog_append_raw(follower, &a.req, bytes, 0, 0, NULL, 0, on_areq),
                     UV_EINVAL);
    free(bytes);
    expect_same(leader, follower);

    /* A gap (tn_plog_advance): a read stops before it, one from inside
     * it is TN_EGAP, one from after it goes on. */
    tn_plog_advance_t adv;
    tw_t aw = {false, 0};
    adv.data = &aw;
    assert_int_equal(tn_plog_advance(leader, &adv, 20, on_advance), 0);
    run_until(&fx->loop, &aw.done);
    assert_int_equal(aw.status, 0);
    append_n(fx, leader, 3);
    tn_buf_reset(&b);
    assert_int_equal(tn_plog_read_raw(leader, 4, 1 << 20, &b, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(tn_plog_read_raw(leader, 10, 1 << 20, &b, &n), TN_EGAP);
    tn_buf_reset(&b);
    assert_int_equal(tn_plog_read_raw(leader, 20, 1 << 20, &b, &n), 0);
    assert_int_equal(n, 3);
    uint32_t count;
    assert_int_equal(tn_rec_check_run(tn_buf_data(&b), tn_buf_size(&b), 20, &count), 0);
    assert_int_equal(count, 3);
    tn_buf_fini(&b);
}

/* --- repair of a damaged segment ----------------------------------------------------- */

typedef struct {
    bool done;
    int status;
    uint64_t end; /* req->end */
    char quarantined[512];
} rw_t;

static void on_repair(tn_plog_repair_t *req, int status)
{
    rw_t *w = req->data;
    w->done = true;
    w->status = status;
    w->end = req->end;
    snprintf(w->quarantined, sizeof(w->quarantined), "%s", req->quarantined);
}

static int repair(fx_t *fx, tn_plog_t *pl, uint64_t base, uint64_t end, const tn_buf_t *good,
                  rw_t *w)
{
    tn_plog_repair_t req;
    memset(w, 0, sizeof(*w));
    req.data = w;
    int rc = tn_plog_repair(pl, &req, base, end, tn_buf_data(good), tn_buf_size(good), on_repair);
    if (rc != 0)
        return rc;
    run_until(&fx->loop, &w->done);
    return w->status;
}

/* The records [from, end) of ref as tn_plog_read_raw gives them (end at a
 * batch end). */
static void read_range(tn_plog_t *ref, uint64_t from, uint64_t end, tn_buf_t *out)
{
    tn_buf_reset(out);
    while (from < end) {
        uint32_t n;
        assert_int_equal(tn_plog_read_raw(ref, from, 1, out, &n), 0);
        assert_true(n > 0);
        from += n;
    }
    assert_int_equal(from, end);
}

/* The segment bases of topic/0 on disk (at least three). */
static size_t seg_bases(fx_t *fx, const char *topic, uint64_t **bases)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/%s/0", fx->dir, topic);
    size_t n = 0;
    assert_int_equal(tn__seg_list(dir, bases, &n), 0);
    assert_true(n >= 3);
    return n;
}

static void seg_file(fx_t *fx, const char *topic, uint64_t base, const char *ext, char *path,
                     size_t len)
{
    char name[64];
    tn_seg_name(base, ext, name, sizeof(name));
    snprintf(path, len, "%s/topics/%s/0/%s", fx->dir, topic, name);
}

/* Flip a byte in the middle of the second segment of topic/0 (sealed, a
 * third one follows); its base and the next one's. */
static void flip_second(fx_t *fx, const char *topic, uint64_t *base, uint64_t *end)
{
    uint64_t *bases;
    (void)seg_bases(fx, topic, &bases);
    *base = bases[1];
    *end = bases[2];
    tn_free(bases);
    char path[4096];
    seg_file(fx, topic, *base, "log", path, sizeof(path));
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size > 1000);
    assert_int_equal(fseek(f, size / 2, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, size / 2, SEEK_SET), 0);
    assert_int_not_equal(fputc(c ^ 0x20, f), EOF);
    assert_int_equal(fclose(f), 0);
}

/* Read every record until the damage is found: TN_ECORRUPT, the log
 * isolated with the damage where it was made. */
static void find_damage(tn_plog_t *pl, uint64_t base, uint64_t end)
{
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    int rc = 0;
    uint64_t n = tn_plog_written_next(pl);
    for (uint64_t off = 0; off < n && (rc == 0 || rc == TN_EGAP); off++) {
        tn_rec_t rec;
        rc = tn_plog_read(pl, off, &scratch, &rec); /* (past a gap's offsets) */
    }
    tn_buf_fini(&scratch);
    assert_int_equal(rc, TN_ECORRUPT);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    uint64_t b = 0, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, end);
}

static tn_plog_t *open_any(fx_t *fx, const char *topic)
{
    tn_plog_t *pl = NULL;
    assert_int_equal(tn_plog_open(fx->store, topic, 0, &pl), 0);
    return pl;
}

/* A damaged sealed segment found by a read is replaced by the good copy:
 * the log serves again, byte for byte the reference's, the damaged file
 * is kept beside it, and bad copies are refused without a change. */
static void test_repair(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "rp", 0);
    copy_all(fx, ref, pl, 3000);
    uint64_t b0, b1;
    assert_false(tn_plog_damage(pl, &b0, &b1)); /* nothing to repair */
    uint64_t base, end;
    flip_second(fx, "rp", &base, &end);
    find_damage(pl, base, end);

    tn_buf_t good;
    tn_buf_init(&good);
    rw_t w;
    /* Refused at once: not end - base records, a damaged copy. */
    read_range(ref, base, end, &good);
    assert_int_equal(repair(fx, pl, base, end + 1, &good, &w), TN_ECORRUPT);
    assert_int_equal(repair(fx, pl, base + 1, end, &good, &w), TN_ECORRUPT);
    read_range(ref, base, end, &good);
    ((unsigned char *)tn_buf_data(&good))[tn_buf_size(&good) / 2] ^= 1;
    assert_int_equal(repair(fx, pl, base, end, &good, &w), TN_ECORRUPT);
    /* Another range than the damaged one: refused at run time. */
    read_range(ref, 0, base, &good);
    assert_int_equal(repair(fx, pl, 0, base, &good, &w), UV_EINVAL);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);

    read_range(ref, base, end, &good);
    assert_int_equal(repair(fx, pl, base, end, &good, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_false(tn_plog_damage(pl, &b0, &b1));
    expect_same(ref, pl);
    /* The damaged file is kept, the temporary one gone. */
    assert_int_equal(access(w.quarantined, F_OK), 0);
    assert_non_null(strstr(w.quarantined, ".log.damaged."));
    char path[4096];
    seg_file(fx, "rp", base, "repair", path, sizeof(path));
    assert_int_not_equal(access(path, F_OK), 0);
    /* It goes on: copies continue, and a restart finds it whole. */
    append_n(fx, ref, 20);
    copy_all(fx, ref, pl, 1 << 20);
    expect_same(ref, pl);
    tn_buf_fini(&good);
    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_log(fx, "rp", 0);
    expect_same(ref, pl);
}

static void advance_to(fx_t *fx, tn_plog_t *pl, uint64_t next)
{
    tn_plog_advance_t adv;
    tw_t aw = {false, 0};
    adv.data = &aw;
    assert_int_equal(tn_plog_advance(pl, &adv, next, on_advance), 0);
    run_until(&fx->loop, &aw.done);
    assert_int_equal(aw.status, 0);
}

/* Records, a gap (tn_plog_advance), records, a gap, records: the log a
 * replica of a leader that advanced twice holds. */
static void build_gapped(fx_t *fx, tn_plog_t *pl)
{
    assert_int_equal(begin_epoch(fx, pl, 1, NULL), 0);
    append_n(fx, pl, 40);
    advance_to(fx, pl, 100);
    append_n(fx, pl, 20);
    for (int i = 0; i < 5; i++)
        append_batch(fx, pl, 6);
    advance_to(fx, pl, 300);
    append_n(fx, pl, 10);
}

/* A damaged sealed segment that a gap follows ([base, end) holds records
 * up to some offset, then offsets never assigned up to the next
 * segment's base): its good copy is shorter than end - base, which
 * tn_plog_repair refuses and tn_plog_repair_gap takes; the log then reads
 * as the reference, the same records and the same gap, also after a
 * restart. */
static void test_repair_before_gap(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_gapped(fx, ref);
    tn_plog_t *pl = open_log(fx, "rp", 0);
    build_gapped(fx, pl);
    expect_reads_same(ref, pl, false);
    uint64_t base, end;
    flip_second(fx, "rp", &base, &end);
    assert_int_equal(base, 100);
    assert_int_equal(end, 300);
    find_damage(pl, base, end);

    tn_buf_t good;
    tn_buf_init(&good);
    read_range(ref, base, 150, &good);
    tn_buf_t b;
    tn_buf_init(&b);
    uint32_t n;
    assert_int_equal(tn_plog_read_raw(ref, 150, 1 << 20, &b, &n), TN_EGAP);
    assert_int_equal(tn_plog_gap_end(ref, 150), end);
    tn_buf_fini(&b);
    rw_t w;
    assert_int_equal(repair(fx, pl, base, end, &good, &w), TN_ECORRUPT);
    tn_plog_repair_t req;
    memset(&w, 0, sizeof(w));
    req.data = &w;
    /* More records than the range holds: refused. */
    assert_int_equal(
        tn_plog_repair_gap(pl, &req, base, 120, tn_buf_data(&good), tn_buf_size(&good), on_repair),
        TN_ECORRUPT);
    assert_int_equal(
        tn_plog_repair_gap(pl, &req, base, end, tn_buf_data(&good), tn_buf_size(&good), on_repair),
        0);
    run_until(&fx->loop, &w.done);
    assert_int_equal(w.status, 0);
    assert_int_equal(req.recs_end, 150);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_reads_same(ref, pl, false);
    assert_int_equal(tn_plog_gap_end(pl, 150), end);
    append_n(fx, ref, 5);
    append_n(fx, pl, 5);
    expect_reads_same(ref, pl, false);
    tn_buf_fini(&good);
    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_log(fx, "rp", 0);
    expect_reads_same(ref, pl, false);
}

/* Damage that recovery finds (the sidecar gone too: the segment is
 * scanned) isolates the log at open with only the segments before it
 * loaded; the repair re-opens it whole. */
static void test_repair_at_open(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "ro", 0);
    copy_all(fx, ref, pl, 3000);
    tu_plog_close(&fx->loop, pl);
    uint64_t base, end;
    flip_second(fx, "ro", &base, &end);
    char idx[4096];
    seg_file(fx, "ro", base, "idx", idx, sizeof(idx));
    assert_int_equal(unlink(idx), 0);
    pl = open_any(fx, "ro");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    uint64_t b = 0, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, end);
    assert_true(tn_plog_written_next(pl) < tn_plog_written_next(ref));
    tn_buf_t good;
    tn_buf_init(&good);
    read_range(ref, base, end, &good);
    rw_t w;
    assert_int_equal(repair(fx, pl, base, end, &good, &w), 0);
    tn_buf_fini(&good);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_same(ref, pl);
    assert_true(exists(fx, "ro", 0, "epochs"));
}

static void on_recorded(tn_plog_dmgrec_t *req, int status)
{
    rw_t *w = req->data;
    w->done = true;
    w->status = status;
}

static void write_damage_file(const char *path, const unsigned char *rec, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(rec, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Damage found by a read, then a restart before the repair: recovery
 * trusts the segment's valid sidecar and would not see the damage, so
 * the record of it (tn_plog_record_damage) isolates the log again at open
 * with the same range; the repair removes the record, and a restart then
 * opens the log whole. A record no segment matches any more is dropped
 * at open; a damaged record isolates the log. */
static void test_damage_recorded_across_restart(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "dr", 0);
    copy_all(fx, ref, pl, 3000);
    tn_plog_dmgrec_t req;
    rw_t w = {0};
    req.data = &w;
    assert_int_equal(tn_plog_record_damage(pl, &req, on_recorded), UV_EINVAL); /* none known */
    uint64_t base, end;
    flip_second(fx, "dr", &base, &end);
    find_damage(pl, base, end);
    assert_int_equal(tn_plog_record_damage(pl, &req, on_recorded), 0);
    run_until(&fx->loop, &w.done);
    assert_int_equal(w.status, 0);
    assert_true(exists(fx, "dr", 0, "damage"));

    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_any(fx, "dr");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    uint64_t b = 0, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, end);
    tn_buf_t good;
    tn_buf_init(&good);
    read_range(ref, base, end, &good);
    assert_int_equal(repair(fx, pl, base, end, &good, &w), 0);
    tn_buf_fini(&good);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_false(exists(fx, "dr", 0, "damage"));
    expect_same(ref, pl);
    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_log(fx, "dr", 0);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_same(ref, pl);

    /* A record naming a range no segment has: dropped at open. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/dr/0/damage", fx->dir);
    unsigned char rec[24];
    tn_put_u32(rec, 0x31444E54u); /* "TND1" */
    tn_put_u64(rec + 8, base + 1);
    tn_put_u64(rec + 16, end);
    tn_put_u32(rec + 4, tn_crc32c(0, rec + 8, 16));
    write_damage_file(path, rec, sizeof(rec));
    tu_fx_reopen(fx);
    pl = open_log(fx, "dr", 0);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_false(exists(fx, "dr", 0, "damage"));
    /* A damaged record: the log is isolated (it cannot say where). */
    rec[12] ^= 1;
    write_damage_file(path, rec, sizeof(rec));
    tu_fx_reopen(fx);
    pl = open_any(fx, "dr");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    assert_false(tn_plog_damage(pl, &b, &e));
}

/* The damage record of dir as tn_plog_record_damage writes it. */
static void put_damage(const char *dir, uint64_t base, uint64_t end)
{
    unsigned char p[16];
    tn_put_u64(p, base);
    tn_put_u64(p + 8, end);
    assert_int_equal(tn_io_write_record_file(dir, "damage", 0x31444E54u /* "TND1" */, p, 16), 0);
}

/* The byte position of the record at offset in the segment file path. */
static long rec_pos(const char *path, uint64_t offset)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    long pos = 0;
    for (;;) {
        unsigned char hdr[TN_REC_HDR];
        tn_rec_hdr_t h;
        assert_int_equal(fseek(f, pos, SEEK_SET), 0);
        assert_int_equal(fread(hdr, 1, sizeof(hdr), f), sizeof(hdr));
        assert_int_equal(tn_rec_decode_hdr(hdr, sizeof(hdr), &h), 0);
        if (h.offset == offset)
            break;
        pos += (long)tn_rec_size(&h);
    }
    fclose(f);
    return pos;
}

/* Probe topic/0 (store closed): want (0 at log end `end`, or TN_ECORRUPT
 * with what in errmsg and the highest epoch of the file as max_epoch),
 * nothing written; then the open there agrees (isolated, or at `end`). */
static void probe_agrees(fx_t *fx, const char *topic, int want, const char *what, uint64_t end,
                         uint32_t max_epoch)
{
    char dir[4096], before[8192], after[8192];
    snprintf(dir, sizeof(dir), "%s/topics/%s/0", fx->dir, topic);
    tn_plog_probe_t pr;
    listing(dir, before, sizeof(before));
    int rc = tn_plog_probe(dir, &pr);
    listing(dir, after, sizeof(after));
    assert_string_equal(before, after);
    if (rc != want)
        fail_msg("probe: %s (%s), not %s", tn_err_name(rc), pr.errmsg, tn_err_name(want));
    if (what != NULL && strstr(pr.errmsg, what) == NULL)
        fail_msg("probe: \"%s\" does not say \"%s\"", pr.errmsg, what);
    if (rc == 0)
        assert_int_equal(pr.log_end, end);
    assert_int_equal(pr.max_epoch, max_epoch);
    tn_plog_probe_fini(&pr);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    tn_plog_t *pl = open_any(fx, topic);
    assert_int_equal(tn_plog_err(pl), want);
    if (want == 0)
        assert_int_equal(tn_plog_written_next(pl), end);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
}

/* The probe reads the partition's damage record as the open does
 * (recover, apply_damage): a record naming the active segment keeps a bad
 * record in its last batch from passing for a torn tail, and isolates
 * the segment with good records too; a sealed segment's range, or the
 * active segment's damage in a segment sealed since, isolates; a record
 * naming no segment does not (the open drops it); a damaged record
 * isolates. The open agrees each time; the probe writes nothing. */
static void test_probe_damage_record(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "pd", 0);
    build_leader(fx, pl);
    append_batch(fx, pl, 4); /* the last batch: nothing synced after it */
    uint64_t end = tn_plog_written_next(pl);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    uint64_t *bases;
    size_t n = seg_bases(fx, "pd", &bases);
    uint64_t sealed = bases[n - 2], active = bases[n - 1];
    tn_free(bases);
    char dir[4096], seg[4096], dmg[4200];
    snprintf(dir, sizeof(dir), "%s/topics/pd/0", fx->dir);
    snprintf(dmg, sizeof(dmg), "%s/damage", dir);
    seg_file(fx, "pd", active, "log", seg, sizeof(seg));
    long at = rec_pos(seg, end - 3) + TN_REC_HDR + 1; /* a body byte of the batch's second */
    long size = tu_file_size(seg);
    unsigned char byte;
    FILE *f = fopen(seg, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    assert_int_equal(fread(&byte, 1, 1, f), 1);
    fclose(f);
    unsigned char flipped = byte ^ 0x20;
    tu_patch_file(seg, at, &flipped, 1);

    /* Without a record, the bad record passes for a torn write (the probe
     * alone: the open would cut it). */
    tn_plog_probe_t pr;
    assert_int_equal(tn_plog_probe(dir, &pr), 0);
    assert_int_equal(pr.log_end, end - 4);
    tn_plog_probe_fini(&pr);

    /* Recorded for the active segment: isolated, nothing cut. */
    put_damage(dir, active, TN_PLOG_DAMAGE_ACTIVE);
    probe_agrees(fx, "pd", TN_ECORRUPT, "not cut: the partition's damage record names", 0, 4);
    assert_int_equal(tu_file_size(seg), size);
    /* ... with every record good again, still isolated. */
    tu_patch_file(seg, at, &byte, 1);
    probe_agrees(fx, "pd", TN_ECORRUPT, "found damaged before the restart", 0, 4);
    /* A sealed segment's range; the active segment's damage in a
     * segment sealed since. */
    put_damage(dir, sealed, active);
    probe_agrees(fx, "pd", TN_ECORRUPT, "found damaged before the restart", 0, 4);
    put_damage(dir, sealed, TN_PLOG_DAMAGE_ACTIVE);
    probe_agrees(fx, "pd", TN_ECORRUPT, "found damaged before the restart", 0, 4);
    /* A range no segment has: served (the open drops the record). */
    put_damage(dir, sealed + 1, active);
    probe_agrees(fx, "pd", 0, NULL, end, 4);
    assert_int_equal(access(dmg, F_OK), -1);
    /* A damaged record. */
    put_damage(dir, sealed, active);
    unsigned char junk = 0xEE;
    tu_patch_file(dmg, 12, &junk, 1);
    probe_agrees(fx, "pd", TN_ECORRUPT, "damage file", 0, 4);
}

/* Each crash point of a repair: the reopened log holds either the
 * damaged file (found again, and the repair done again) or the good
 * copy; every record is there at every point. */
static void test_repair_crash_points(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_buf_t good;
    tn_buf_init(&good);
    for (int k = 1; k <= 5; k++) {
        char name[32];
        snprintf(name, sizeof(name), "rcrash%d", k);
        tn_plog_t *pl = open_log(fx, name, 0);
        copy_all(fx, ref, pl, 3000);
        uint64_t base, end;
        flip_second(fx, name, &base, &end);
        find_damage(pl, base, end);
        read_range(ref, base, end, &good);
        rw_t w;
        tn__plog_repair_stop_after(k);
        assert_int_equal(repair(fx, pl, base, end, &good, &w), UV_EIO);
        assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
        tu_plog_close(&fx->loop, pl);
        pl = open_any(fx, name);
        if (k >= 4) {
            /* The good copy is in place. */
            assert_int_equal(tn_plog_err(pl), 0);
            expect_same(ref, pl);
            assert_int_equal(access(w.quarantined, F_OK), 0);
        } else {
            /* The damaged file: found at open without its sidecar (k 3),
             * else by a read; the repair starts over and finishes. */
            if (k < 3)
                find_damage(pl, base, end);
            uint64_t b = 0, e = 0;
            assert_true(tn_plog_damage(pl, &b, &e));
            assert_int_equal(b, base);
            assert_int_equal(e, end);
            if (k == 1) {
                char tmp[4096];
                seg_file(fx, name, base, "repair", tmp, sizeof(tmp));
                assert_int_equal(access(tmp, F_OK), 0); /* left over, rewritten */
            }
            assert_int_equal(repair(fx, pl, base, end, &good, &w), 0);
            assert_int_equal(tn_plog_err(pl), 0);
            expect_same(ref, pl);
        }
        tu_plog_close(&fx->loop, pl);
        pl = open_log(fx, name, 0);
        expect_same(ref, pl);
        tu_plog_close(&fx->loop, pl);
    }
    tn_buf_fini(&good);
}

/* tn_plog_repair_gap stopped after each step as a crash would: at the
 * next open the log is either the good copy (records, then the gap, as
 * the reference) or isolated again with the damage where it was, and a
 * second repair finishes; either way it then reads as the reference,
 * also after a restart. */
static void test_repair_gap_crash_points(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_gapped(fx, ref);
    tn_buf_t good;
    tn_buf_init(&good);
    read_range(ref, 100, 150, &good);
    for (int k = 1; k <= 5; k++) {
        char name[32];
        snprintf(name, sizeof(name), "gcrash%d", k);
        tn_plog_t *pl = open_log(fx, name, 0);
        build_gapped(fx, pl);
        uint64_t base, end;
        flip_second(fx, name, &base, &end);
        assert_int_equal(base, 100);
        assert_int_equal(end, 300);
        find_damage(pl, base, end);
        tn_plog_repair_t req;
        rw_t w;
        for (int round = 0; round < 2; round++) {
            memset(&w, 0, sizeof(w));
            req.data = &w;
            if (round == 0)
                tn__plog_repair_stop_after(k);
            assert_int_equal(tn_plog_repair_gap(pl, &req, base, end, tn_buf_data(&good),
                                                tn_buf_size(&good), on_repair),
                             0);
            run_until(&fx->loop, &w.done);
            if (round == 1)
                break;
            assert_int_equal(w.status, UV_EIO);
            tu_plog_close(&fx->loop, pl);
            pl = open_any(fx, name);
            if (k >= 4) {
                assert_int_equal(tn_plog_err(pl), 0); /* the good copy is in place */
                break;
            }
            if (k < 3)
                find_damage(pl, base, end);
            uint64_t b = 0, e = 0;
            assert_true(tn_plog_damage(pl, &b, &e));
            assert_int_equal(b, base);
            assert_int_equal(e, end);
        }
        if (k < 4)
            assert_int_equal(w.status, 0);
        assert_int_equal(tn_plog_err(pl), 0);
        expect_reads_same(ref, pl, false);
        assert_int_equal(tn_plog_gap_end(pl, 150), end);
        tu_plog_close(&fx->loop, pl);
        pl = open_log(fx, name, 0);
        expect_reads_same(ref, pl, false);
        tu_plog_close(&fx->loop, pl);
    }
    tn_buf_fini(&good);
}

/* The same under the power-loss simulator: a cut at every mutating
 * operation of a repair, then a random post-crash state; the log then
 * holds every record, good or (found again) damaged, and a second repair
 * finishes. */
static void test_repair_powerloss(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_buf_t good;
    tn_buf_init(&good);
    char root[4096];
    for (long cut = 0;; cut++) {
        char name[32];
        snprintf(name, sizeof(name), "rpw%ld", cut);
        snprintf(root, sizeof(root), "%s/topics/%s", fx->dir, name);
        tn_plog_t *pl = open_log(fx, name, 0);
        copy_all(fx, ref, pl, 3000);
        uint64_t base, end;
        flip_second(fx, name, &base, &end);
        find_damage(pl, base, end);
        read_range(ref, base, end, &good);
        assert_int_equal(tn_io_sim_start(root), 0);
        tn_io_sim_cut_after(cut);
        rw_t w;
        int rc = repair(fx, pl, base, end, &good, &w);
        bool was_cut = tn_io_sim_is_cut();
        tu_plog_close(&fx->loop, pl);
        assert_int_equal(tn_io_sim_powerloss((uint64_t)cut * 7919 + 1), 0);
        pl = open_any(fx, name);
        int err = tn_plog_err(pl);
        if (err == 0) {
            tn_buf_t scratch;
            tn_buf_init(&scratch);
            uint64_t n = tn_plog_written_next(pl);
            assert_int_equal(n, tn_plog_written_next(ref));
            for (uint64_t off = 0; off < n && err == 0; off++) {
                tn_rec_t rec;
                err = tn_plog_read(pl, off, &scratch, &rec);
            }
            tn_buf_fini(&scratch);
        }
        if (err != 0) {
            assert_int_equal(err, TN_ECORRUPT);
            assert_false(!was_cut && rc == 0);
            uint64_t b = 0, e = 0;
            assert_true(tn_plog_damage(pl, &b, &e));
            assert_int_equal(b, base);
            assert_int_equal(e, end);
            assert_int_equal(repair(fx, pl, base, end, &good, &w), 0);
        }
        expect_same(ref, pl);
        tu_plog_close(&fx->loop, pl);
        if (!was_cut) {
            assert_int_equal(rc, 0);
            break;
        }
        assert_true(cut < 200);
    }
    tn_buf_fini(&good);
}

/* --- repair of a damaged active segment ------------------------------------------ */

/* Flip a byte in the middle of the records of topic/0's active segment
 * (the last file; its zeroed space ahead is not counted); its base. */
static uint64_t flip_active(fx_t *fx, tn_plog_t *pl, const char *topic)
{
    uv_mutex_lock(&pl->lock);
    tn_seg_t *seg = pl->segs[pl->nsegs - 1];
    uint64_t base = seg->base, size = seg->size;
    assert_true(seg->count >= 8);
    uv_mutex_unlock(&pl->lock);
    char path[4096];
    seg_file(fx, topic, base, "log", path, sizeof(path));
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)(size / 2), SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, (long)(size / 2), SEEK_SET), 0);
    assert_int_not_equal(fputc(c ^ 0x20, f), EOF);
    assert_int_equal(fclose(f), 0);
    return base;
}

static int repair_active(fx_t *fx, tn_plog_t *pl, uint64_t base, const tn_buf_t *good,
                         const tn_epoch_entry_t *ep, uint32_t nep, rw_t *w)
{
    tn_plog_repair_t req;
    memset(w, 0, sizeof(*w));
    req.data = w;
    size_t len = good != NULL ? tn_buf_size(good) : 0;
    int rc = tn_plog_repair_active(pl, &req, base, len > 0 ? tn_buf_data(good) : NULL, len, ep, nep,
                                   on_repair);
    if (rc != 0)
        return rc;
    run_until(&fx->loop, &w->done);
    return w->status;
}

/* The copy a leader (ref) serves of [base, end): records and epochs. */
static uint32_t copy_of(tn_plog_t *ref, uint64_t base, uint64_t end, tn_buf_t *good,
                        tn_epoch_entry_t *ep)
{
    read_range(ref, base, end, good);
    return end > base ? tn_plog_epochs_range(ref, base, end, ep, 8) : 0;
}

/* The end of the k-th whole batch of ref from offset from on. */
static uint64_t batches_end(tn_plog_t *ref, uint64_t from, int k)
{
    tn_buf_t b;
    tn_buf_init(&b);
    for (int i = 0; i < k; i++) {
        uint32_t n;
        tn_buf_reset(&b);
        assert_int_equal(tn_plog_read_raw(ref, from, 1, &b, &n), 0);
        assert_true(n > 0);
        from += n;
    }
    tn_buf_fini(&b);
    return from;
}

/* A follower's copy of ref in pl (topic), its active segment damaged and
 * found by a read: isolated, the damage named (base, ACTIVE), appends
 * refused at once, the prefix epoch the history's at base - 1. */
static uint64_t damaged_active_copy(fx_t *fx, tn_plog_t *ref, tn_plog_t *pl, const char *topic)
{
    copy_all(fx, ref, pl, 3000);
    uint64_t base = flip_active(fx, pl, topic);
    find_damage(pl, base, TN_PLOG_DAMAGE_ACTIVE);
    char body[64];
    size_t len = tu_body(1, body, sizeof(body));
    uint64_t off;
    assert_int_equal(tu_append(&fx->loop, pl, body, len, &off), TN_ECORRUPT);
    tn_epoch_entry_t e[8];
    uint32_t n = tn_plog_epochs_range(ref, base - 1, base, e, 8);
    assert_int_equal(n, 1);
    assert_int_equal(tn_plog_damage_prefix_epoch(pl, base), e[0].epoch);
    return base;
}

static void expect_kept_and_clean(fx_t *fx, const char *topic, uint64_t base, const rw_t *w)
{
    assert_int_equal(access(w->quarantined, F_OK), 0);
    assert_non_null(strstr(w->quarantined, ".log.damaged."));
    char path[4096];
    seg_file(fx, topic, base, "repair", path, sizeof(path));
    assert_int_not_equal(access(path, F_OK), 0);
    assert_false(exists(fx, topic, 0, "damage"));
}

/* Damage in the active segment, found by a read: the segment is replaced
 * by the leader's records from its base on, the log serves again byte for
 * byte the leader's (epochs too), copies go on, and a restart finds it
 * whole; bad copies are refused without a change. */
static void test_repair_active(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "ra", 0);
    uint64_t base = damaged_active_copy(fx, ref, pl, "ra");
    uint64_t end = tn_plog_written_next(ref);
    uint64_t *bases;
    (void)seg_bases(fx, "ra", &bases);

    tn_buf_t good;
    tn_buf_init(&good);
    tn_epoch_entry_t ep[8];
    rw_t w;
    /* The sealed form names a range: refused at run time. */
    (void)copy_of(ref, base, end, &good, ep);
    assert_int_equal(repair(fx, pl, base, end, &good, &w), UV_EINVAL);
    /* A damaged copy, epochs outside the run, epochs for no records. */
    uint32_t nep = copy_of(ref, base, end, &good, ep);
    ((unsigned char *)tn_buf_data(&good))[tn_buf_size(&good) / 2] ^= 1;
    assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), TN_ECORRUPT);
    nep = copy_of(ref, base, end, &good, ep);
    tn_epoch_entry_t far = {.epoch = 9, .start = end};
    assert_int_equal(repair_active(fx, pl, base, &good, &far, 1, &w), TN_ECORRUPT);
    assert_int_equal(repair_active(fx, pl, base, NULL, ep, nep, &w), UV_EINVAL);
    /* Another segment than the damaged one: refused at run time. */
    tn_buf_t other;
    tn_buf_init(&other);
    tn_epoch_entry_t oep[8];
    uint32_t onep = copy_of(ref, bases[1], bases[2], &other, oep);
    assert_int_equal(repair_active(fx, pl, bases[1], &other, oep, onep, &w), UV_EINVAL);
    tn_buf_fini(&other);
    tn_free(bases);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);

    assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    uint64_t b0, b1;
    assert_false(tn_plog_damage(pl, &b0, &b1));
    expect_same(ref, pl);
    expect_kept_and_clean(fx, "ra", base, &w);
    append_n(fx, ref, 20);
    begin_epoch(fx, ref, 5, NULL);
    append_batch(fx, ref, 3);
    copy_all(fx, ref, pl, 1 << 20);
    expect_same(ref, pl);
    tn_buf_fini(&good);
    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_log(fx, "ra", 0);
    expect_same(ref, pl);
}

/* What the copy holds from the segment's base on is the leader's only:
 * a tail of this copy's own (an epoch it led, never committed) goes with
 * the damaged segment; a copy up to a hw below this copy's end, or an
 * empty one (the hw at or below the base), leaves the log ending there,
 * and the usual copies go on from it. */
static void test_repair_active_drops_tail(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    uint64_t end = tn_plog_written_next(ref);
    tn_buf_t good;
    tn_buf_init(&good);
    tn_epoch_entry_t ep[8];
    rw_t w;

    /* Its own tail in epoch 9, past the leader's end. */
    tn_plog_t *pl = open_log(fx, "rt", 0);
    copy_all(fx, ref, pl, 3000);
    assert_int_equal(begin_epoch(fx, pl, 9, NULL), 0);
    append_n(fx, pl, 12);
    uint64_t base = flip_active(fx, pl, "rt");
    assert_true(base < end);
    find_damage(pl, base, TN_PLOG_DAMAGE_ACTIVE);
    uint32_t nep = copy_of(ref, base, end, &good, ep);
    assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_same(ref, pl); /* epoch 9 gone with its records */
    tu_plog_close(&fx->loop, pl);
    pl = open_log(fx, "rt", 0);
    expect_same(ref, pl);
    tu_plog_close(&fx->loop, pl);

    /* Up to a hw a few batches past the base. */
    pl = open_log(fx, "rh", 0);
    base = damaged_active_copy(fx, ref, pl, "rh");
    uint64_t hw = batches_end(ref, base, 3);
    assert_true(hw < tn_plog_written_next(ref));
    nep = copy_of(ref, base, hw, &good, ep);
    assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_int_equal(tn_plog_written_next(pl), hw);
    copy_all(fx, ref, pl, 3000);
    expect_same(ref, pl);
    tu_plog_close(&fx->loop, pl);

    /* Nothing to copy: the segment is emptied at its base. */
    pl = open_log(fx, "re", 0);
    base = damaged_active_copy(fx, ref, pl, "re");
    assert_int_equal(repair_active(fx, pl, base, NULL, NULL, 0, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_int_equal(tn_plog_written_next(pl), base);
    tn_epoch_entry_t e[8];
    assert_int_equal(tn_plog_epochs_range(ref, base - 1, base, e, 8), 1);
    assert_int_equal(tn_plog_last_epoch(pl), e[0].epoch);
    expect_kept_and_clean(fx, "re", base, &w);
    tu_plog_close(&fx->loop, pl);
    pl = open_log(fx, "re", 0);
    assert_int_equal(tn_plog_written_next(pl), base);
    copy_all(fx, ref, pl, 3000);
    expect_same(ref, pl);
    tn_buf_fini(&good);
}

/* Damage that recovery finds in the active segment (a bad record below
 * records synced after it) isolates the log at open with the damage named
 * (base, ACTIVE) and the epochs loaded as the file holds them; the repair
 * re-opens it whole. A damage record naming the active segment isolates
 * an open that would not see it, as the segment it was: still the last,
 * or sealed since (then its range is the sealed one); none matching is
 * dropped. */
static void test_repair_active_at_open(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "ro", 0);
    copy_all(fx, ref, pl, 3000);
    uint64_t base = flip_active(fx, pl, "ro");
    tu_plog_close(&fx->loop, pl);
    pl = open_any(fx, "ro");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    uint64_t b = 0, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
    tn_epoch_entry_t pe[8];
    assert_int_equal(tn_plog_epochs_range(ref, base - 1, base, pe, 8), 1);
    assert_int_equal(tn_plog_damage_prefix_epoch(pl, base), pe[0].epoch);
    tn_buf_t good;
    tn_buf_init(&good);
    tn_epoch_entry_t ep[8];
    uint32_t nep = copy_of(ref, base, tn_plog_written_next(ref), &good, ep);
    rw_t w;
    assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_same(ref, pl);

    /* Damage records written by hand on the clean copy. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/ro/0/damage", fx->dir);
    uint64_t *bases;
    size_t nb = seg_bases(fx, "ro", &bases);
    const uint64_t cases[3][3] = {
        /* recorded base, what the open names: base, end */
        {bases[nb - 1], bases[nb - 1], TN_PLOG_DAMAGE_ACTIVE},
        {bases[1], bases[1], bases[2]},
        {bases[1] + 1, 0, 0},
    };
    tn_free(bases);
    for (int i = 0; i < 3; i++) {
        unsigned char rec[24];
        tn_put_u32(rec, 0x31444E54u); /* "TND1" */
        tn_put_u64(rec + 8, cases[i][0]);
        tn_put_u64(rec + 16, TN_PLOG_DAMAGE_ACTIVE);
        tn_put_u32(rec + 4, tn_crc32c(0, rec + 8, 16));
        write_damage_file(path, rec, sizeof(rec));
        tu_fx_reopen(fx);
        ref = open_log(fx, "ref", 0);
        pl = open_any(fx, "ro");
        if (cases[i][1] == 0) {
            assert_int_equal(tn_plog_err(pl), 0); /* matches nothing: dropped */
            assert_false(exists(fx, "ro", 0, "damage"));
            continue;
        }
        assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
        assert_true(tn_plog_damage(pl, &b, &e));
        assert_int_equal(b, cases[i][1]);
        assert_int_equal(e, cases[i][2]);
        if (e == TN_PLOG_DAMAGE_ACTIVE) {
            nep = copy_of(ref, b, tn_plog_written_next(ref), &good, ep);
            assert_int_equal(repair_active(fx, pl, b, &good, ep, nep, &w), 0);
        } else {
            read_range(ref, b, e, &good);
            assert_int_equal(repair(fx, pl, b, e, &good, &w), 0);
        }
        assert_int_equal(tn_plog_err(pl), 0);
        expect_same(ref, pl);
    }
    tn_buf_fini(&good);
}

/* Each crash point of an active segment's repair: the reopened log is
 * isolated by the damage record whatever files were in place (the damaged
 * segment before step 4, the good copy after), with the same epoch below
 * the base; the repair starts over and finishes. */
static void test_repair_active_crash_points(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    uint64_t end = tn_plog_written_next(ref);
    tn_buf_t good;
    tn_buf_init(&good);
    tn_epoch_entry_t ep[8];
    for (int k = 1; k <= 6; k++) {
        char name[32];
        snprintf(name, sizeof(name), "acrash%d", k);
        tn_plog_t *pl = open_log(fx, name, 0);
        uint64_t base = damaged_active_copy(fx, ref, pl, name);
        uint32_t prefix = tn_plog_damage_prefix_epoch(pl, base);
        uint32_t nep = copy_of(ref, base, end, &good, ep);
        rw_t w;
        tn__plog_repair_stop_after(k);
        assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), UV_EIO);
        assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
        tu_plog_close(&fx->loop, pl);
        assert_true(exists(fx, name, 0, "damage"));
        pl = open_any(fx, name);
        assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
        uint64_t b = 0, e = 0;
        assert_true(tn_plog_damage(pl, &b, &e));
        assert_int_equal(b, base);
        assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
        /* On disk: the damaged segment before step 4, the good copy from
         * it on; the epoch below base (what the leader checks before it
         * serves the copy again) the same, step 6's rewrite or not. */
        char path[4096];
        seg_file(fx, name, base, "log", path, sizeof(path));
        tn_buf_t file;
        tn_buf_init(&file);
        assert_int_equal(tn_io_read_file(path, 1 << 24, &file), 0);
        uint32_t n = 0;
        int run = tn_rec_check_run(tn_buf_data(&file), tn_buf_size(&file), base, &n);
        tn_buf_fini(&file);
        if (k < 4) {
            assert_int_not_equal(run, 0);
        } else {
            assert_int_equal(run, 0);
            assert_int_equal(n, end - base);
        }
        assert_int_equal(tn_plog_damage_prefix_epoch(pl, base), prefix);
        assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
        assert_int_equal(tn_plog_err(pl), 0);
        expect_same(ref, pl);
        expect_kept_and_clean(fx, name, base, &w);
        tu_plog_close(&fx->loop, pl);
        pl = open_log(fx, name, 0);
        expect_same(ref, pl);
        tu_plog_close(&fx->loop, pl);
    }
    tn_buf_fini(&good);
}

/* The same under the power-loss simulator: a cut at every mutating
 * operation of an active segment's repair, then a random post-crash
 * state; the log opens isolated (a second repair finishes) or, once the
 * record went, repaired, and holds the leader's records either way. */
static void test_repair_active_powerloss(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    uint64_t end = tn_plog_written_next(ref);
    tn_buf_t good;
    tn_buf_init(&good);
    tn_epoch_entry_t ep[8];
    char root[4096];
    for (long cut = 0;; cut++) {
        char name[32];
        snprintf(name, sizeof(name), "apw%ld", cut);
        snprintf(root, sizeof(root), "%s/topics/%s", fx->dir, name);
        tn_plog_t *pl = open_log(fx, name, 0);
        uint64_t base = damaged_active_copy(fx, ref, pl, name);
        uint32_t nep = copy_of(ref, base, end, &good, ep);
        assert_int_equal(tn_io_sim_start(root), 0);
        tn_io_sim_cut_after(cut);
        rw_t w;
        int rc = repair_active(fx, pl, base, &good, ep, nep, &w);
        bool was_cut = tn_io_sim_is_cut();
        tu_plog_close(&fx->loop, pl);
        assert_int_equal(tn_io_sim_powerloss((uint64_t)cut * 7919 + 1), 0);
        pl = open_any(fx, name);
        int err = tn_plog_err(pl);
        if (err != 0) {
            assert_int_equal(err, TN_ECORRUPT);
            assert_false(!was_cut && rc == 0);
            uint64_t b = 0, e = 0;
            assert_true(tn_plog_damage(pl, &b, &e));
            assert_int_equal(b, base);
            assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
            assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
        }
        assert_int_equal(tn_plog_err(pl), 0);
        expect_same(ref, pl);
        tu_plog_close(&fx->loop, pl);
        if (!was_cut) {
            assert_int_equal(rc, 0);
            break;
        }
        assert_true(cut < 200);
    }
    tn_buf_fini(&good);
}

/* The scrub checks the active segment's synced records too: a byte
 * flipped there isolates the log with the damage named (base, ACTIVE); a
 * clean log reports nothing. */
static void test_scrub_active(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "sa", 0);
    copy_all(fx, ref, pl, 3000);
    tn_scrub_report_t rep = scrub_all(fx);
    assert_int_equal(rep.errors_total, 0);
    uint64_t base = flip_active(fx, pl, "sa");
    rep = scrub_all(fx);
    assert_int_equal(rep.errors_total, 1);
    assert_true(rep.errors[0].isolated);
    assert_int_equal(rep.errors[0].segment, base);
    assert_string_equal(rep.errors[0].topic, "sa");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    assert_int_equal(tn_plog_err(ref), 0);
    uint64_t b = 0, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
}

/* --- rebuilding a damaged epochs file ---------------------------------------------- */

static void flip_epochs(fx_t *fx, const char *topic)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/%s/0/epochs", fx->dir, topic);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 14, SEEK_SET), 0); /* inside the first entry */
    int c = fgetc(f);
    assert_int_equal(fseek(f, 14, SEEK_SET), 0);
    assert_int_not_equal(fputc(c ^ 0x01, f), EOF);
    assert_int_equal(fclose(f), 0);
}

static int rebuild(fx_t *fx, tn_plog_t *pl, uint32_t first_epoch, rw_t *w)
{
    tn_plog_repair_t req;
    memset(w, 0, sizeof(*w));
    req.data = w;
    int rc = tn_plog_rebuild_epochs(pl, &req, first_epoch, on_repair);
    if (rc != 0)
        return rc;
    run_until(&fx->loop, &w->done);
    return w->status;
}

/* The epochs of pl and ref agree over [from, end of ref). */
static void expect_epochs_from(tn_plog_t *ref, tn_plog_t *pl, uint64_t from)
{
    uint64_t n = tn_plog_written_next(ref);
    assert_int_equal(tn_plog_written_next(pl), n);
    tn_epoch_entry_t ea[8], eb[8];
    uint32_t na = tn_plog_epochs_range(ref, from, n, ea, 8);
    uint32_t nb = tn_plog_epochs_range(pl, from, n, eb, 8);
    assert_int_equal(na, nb);
    for (uint32_t i = 0; i < na; i++) {
        assert_int_equal(ea[i].epoch, eb[i].epoch);
        assert_int_equal(ea[i].start, eb[i].start);
    }
    assert_int_equal(tn_plog_last_epoch(ref), tn_plog_last_epoch(pl));
}

/* A damaged epochs file isolates the log at open (tn_plog_epochs_damaged,
 * no range for tn_plog_damage); the history is rebuilt from the records'
 * EPOCH_START records, the log serves again with the leader's history, and
 * a restart finds it whole. A log whose first records' EPOCH_START is gone
 * (a drop floor) needs the leader's epoch of its first offset: refused
 * without it, or with one that does not fit, without a change. A log not
 * isolated for it is refused; a file of another version is not damage. */
static void test_rebuild_epochs(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "eb", 0);
    copy_all(fx, ref, pl, 3000);
    rw_t w;
    assert_int_equal(rebuild(fx, pl, 0, &w), UV_EINVAL); /* nothing to rebuild */
    assert_false(tn_plog_epochs_damaged(pl));
    tu_plog_close(&fx->loop, pl);
    flip_epochs(fx, "eb");
    pl = open_any(fx, "eb");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    assert_true(tn_plog_epochs_damaged(pl));
    uint64_t b, e;
    assert_false(tn_plog_damage(pl, &b, &e));
    assert_int_equal(rebuild(fx, pl, 0, &w), 0);
    assert_int_equal(w.end, 3); /* epochs 1, 3 and 4 */
    assert_int_equal(tn_plog_err(pl), 0);
    assert_false(tn_plog_epochs_damaged(pl));
    expect_same(ref, pl);
    append_n(fx, ref, 10);
    copy_all(fx, ref, pl, 3000);
    expect_same(ref, pl);
    tu_plog_close(&fx->loop, pl);
    pl = open_log(fx, "eb", 0);
    expect_same(ref, pl);

    /* The first records' EPOCH_START dropped below a floor. */
    tn_plog_floor_t fr;
    bool fdone = false;
    fr.data = &fdone;
    assert_int_equal(tn_plog_drop_below(pl, &fr, 500, on_floor), 0);
    run_until(&fx->loop, &fdone);
    tu_plog_close(&fx->loop, pl);
    flip_epochs(fx, "eb");
    pl = open_any(fx, "eb");
    assert_true(tn_plog_epochs_damaged(pl));
    assert_int_equal(rebuild(fx, pl, 0, &w), TN_ERANGE);
    assert_int_equal(rebuild(fx, pl, 9, &w), TN_ECORRUPT); /* above the EPOCH_STARTs after */
    assert_true(tn_plog_epochs_damaged(pl));
    tn_epoch_entry_t at[8];
    assert_int_equal(tn_plog_epochs_range(ref, 500, 501, at, 8), 1);
    assert_int_equal(rebuild(fx, pl, at[0].epoch, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_epochs_from(ref, pl, 500);
    tu_plog_close(&fx->loop, pl);
    pl = open_log(fx, "eb", 0);
    expect_epochs_from(ref, pl, 500);
    tu_plog_close(&fx->loop, pl);

    /* Another version: not damage, nothing to rebuild. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/eb/0/epochs", fx->dir);
    tn_buf_t fb;
    tn_buf_init(&fb);
    assert_int_equal(tn_io_read_file(path, 1 << 20, &fb), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&fb);
    size_t len = tn_buf_size(&fb);
    tn_put_u32(p + 4, 2);
    tn_put_u32(p + len - 4, tn_crc32c(0, p, len - 4));
    write_damage_file(path, p, len);
    tn_buf_fini(&fb);
    pl = open_any(fx, "eb");
    assert_int_equal(tn_plog_err(pl), TN_EFORMAT);
    assert_false(tn_plog_epochs_damaged(pl));
}

/* The rebuild stopped after its scan (a crash) leaves the damaged file: the
 * log opens isolated and the rebuild starts over; under the power-loss
 * simulator, at every I/O operation, the log opens isolated (rebuilt
 * then) or with the rebuilt file, the leader's history either way. */
static void test_rebuild_epochs_crash(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    char root[4096];
    for (long cut = -1;; cut++) {
        char name[32];
        snprintf(name, sizeof(name), "ebc%ld", cut + 1);
        snprintf(root, sizeof(root), "%s/topics/%s", fx->dir, name);
        tn_plog_t *pl = open_log(fx, name, 0);
        copy_all(fx, ref, pl, 3000);
        tu_plog_close(&fx->loop, pl);
        flip_epochs(fx, name);
        pl = open_any(fx, name);
        assert_true(tn_plog_epochs_damaged(pl));
        rw_t w;
        int rc;
        bool was_cut;
        if (cut < 0) {
            tn__plog_repair_stop_after(1);
            rc = rebuild(fx, pl, 0, &w);
            assert_int_equal(rc, UV_EIO);
            was_cut = true;
            tu_plog_close(&fx->loop, pl);
        } else {
            assert_int_equal(tn_io_sim_start(root), 0);
            tn_io_sim_cut_after(cut);
            rc = rebuild(fx, pl, 0, &w);
            was_cut = tn_io_sim_is_cut();
            tu_plog_close(&fx->loop, pl);
            assert_int_equal(tn_io_sim_powerloss((uint64_t)cut * 7919 + 1), 0);
        }
        pl = open_any(fx, name);
        if (tn_plog_err(pl) != 0) {
            assert_true(was_cut);
            assert_true(tn_plog_epochs_damaged(pl));
            assert_int_equal(rebuild(fx, pl, 0, &w), 0);
        }
        assert_int_equal(tn_plog_err(pl), 0);
        expect_same(ref, pl);
        tu_plog_close(&fx->loop, pl);
        if (!was_cut) {
            assert_int_equal(rc, 0);
            break;
        }
        assert_true(cut < 200);
    }
}

/* The files of topic/0 whose name holds a damaged segment's suffix. */
static int count_damaged(fx_t *fx, const char *topic)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/%s/0", fx->dir, topic);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strstr(e->d_name, ".log.damaged.") != NULL;
    closedir(d);
    return n;
}

/* A copy damaged in its active segment and in its epochs file at once
 * (both found at open): the active segment's repair, which needs the
 * history below the segment, is refused with nothing changed (before, it
 * replaced the segment and kept another copy of it on every attempt, then
 * failed on the epochs file: a retry every 2 s filled the disk); the
 * history is rebuilt first from the records below the damaged segment
 * (its own cannot be trusted), the log stays isolated by the segment, and
 * its repair then finishes. A sealed segment damaged beside the file is
 * repaired first, then the file rebuilt. */
static void test_repair_active_and_epochs(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    tn_plog_t *pl = open_log(fx, "ae", 0);
    copy_all(fx, ref, pl, 3000);
    uint64_t base = flip_active(fx, pl, "ae");
    tu_plog_close(&fx->loop, pl);
    flip_epochs(fx, "ae");
    pl = open_any(fx, "ae");
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    uint64_t b = 0, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
    assert_true(tn_plog_epochs_damaged(pl));

    tn_buf_t good;
    tn_buf_init(&good);
    tn_epoch_entry_t ep[8];
    uint32_t nep = copy_of(ref, base, tn_plog_written_next(ref), &good, ep);
    char path[4096];
    seg_file(fx, "ae", base, "log", path, sizeof(path));
    tn_buf_t before, after;
    tn_buf_init(&before);
    tn_buf_init(&after);
    assert_int_equal(tn_io_read_file(path, 1 << 24, &before), 0);
    rw_t w;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), TN_ECORRUPT);
        assert_int_equal(count_damaged(fx, "ae"), 0);
        tn_buf_reset(&after);
        assert_int_equal(tn_io_read_file(path, 1 << 24, &after), 0);
        assert_int_equal(tn_buf_size(&after), tn_buf_size(&before));
        assert_memory_equal(tn_buf_data(&after), tn_buf_data(&before), tn_buf_size(&before));
        assert_true(tn_plog_epochs_damaged(pl));
    }
    tn_buf_fini(&before);
    tn_buf_fini(&after);

    assert_int_equal(rebuild(fx, pl, 0, &w), 0);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT); /* the segment still */
    assert_false(tn_plog_epochs_damaged(pl));
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
    tn_epoch_entry_t pe[8];
    assert_int_equal(tn_plog_epochs_range(ref, base - 1, base, pe, 8), 1);
    assert_int_equal(tn_plog_damage_prefix_epoch(pl, base), pe[0].epoch);
    assert_int_equal(repair_active(fx, pl, base, &good, ep, nep, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_same(ref, pl);
    assert_int_equal(count_damaged(fx, "ae"), 1);
    tu_plog_close(&fx->loop, pl);
    pl = open_log(fx, "ae", 0);
    expect_same(ref, pl);
    tu_plog_close(&fx->loop, pl);

    /* A sealed segment (its sidecar gone: recovery scans it) and the
     * file: the segment is repaired first (the open did not read the
     * segments after it, so no rebuild from them); the log re-opened in
     * place finds the file damaged and rebuilds it. */
    pl = open_log(fx, "se", 0);
    copy_all(fx, ref, pl, 3000);
    tu_plog_close(&fx->loop, pl);
    uint64_t end;
    flip_second(fx, "se", &base, &end);
    seg_file(fx, "se", base, "idx", path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    flip_epochs(fx, "se");
    pl = open_any(fx, "se");
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, base);
    assert_int_equal(e, end);
    assert_false(tn_plog_epochs_damaged(pl));
    assert_int_equal(rebuild(fx, pl, 0, &w), UV_EINVAL);
    read_range(ref, base, end, &good);
    assert_int_equal(repair(fx, pl, base, end, &good, &w), 0);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    assert_false(tn_plog_damage(pl, &b, &e));
    assert_true(tn_plog_epochs_damaged(pl));
    assert_int_equal(rebuild(fx, pl, 0, &w), 0);
    assert_int_equal(tn_plog_err(pl), 0);
    expect_same(ref, pl);
    tn_buf_fini(&good);
}

/* --- truncation -------------------------------------------------------------------- */

static void on_trunc(tn_plog_trunc_t *req, int status)
{
    tw_t *w = req->data;
    w->done = true;
    w->status = status;
}

/* tn_plog_truncate_batch; *cut_to: where the log ends after it. */
static int truncate_batch(fx_t *fx, tn_plog_t *pl, uint64_t offset, uint64_t floor,
                          uint64_t *cut_to)
{
    tn_plog_trunc_t req;
    tw_t w = {false, 0};
    req.data = &w;
    int rc = tn_plog_truncate_batch(pl, &req, offset, floor, on_trunc);
    if (rc != 0)
        return rc;
    run_until(&fx->loop, &w.done);
    *cut_to = req.cut_to;
    return w.status;
}

static int truncate_to(fx_t *fx, tn_plog_t *pl, uint64_t offset, uint64_t floor)
{
    tn_plog_trunc_t req;
    tw_t w = {false, 0};
    req.data = &w;
    int rc = tn_plog_truncate(pl, &req, offset, floor, on_trunc);
    if (rc != 0)
        return rc;
    run_until(&fx->loop, &w.done);
    return w.status;
}

/* Leader-shaped log (build_leader): epoch 1 from 0, 3 from 456 (after
 * 300 records and 40 batches of 1..7 records: 155), 4 from 1157 (after 700
 * more), then 30 batches of 8. */
#define E4_START 1157u

/* Expect log `pl` to agree with the untouched copy `ref` over what it
 * holds, its epochs history to be ref's over the same range, and nothing
 * readable at its end. */
static void expect_consistent(tn_plog_t *ref, tn_plog_t *pl)
{
    tn_plog_stats_t st;
    tn_plog_stats(pl, &st);
    uint64_t first = st.first_offset, end = st.written_next;
    assert_true(first <= end);
    assert_true(end <= tn_plog_written_next(ref));
    assert_int_equal(tn_plog_durable_next(pl), end);
    tn_buf_t sa, sb;
    tn_buf_init(&sa);
    tn_buf_init(&sb);
    for (uint64_t off = first; off < end; off++) {
        tn_rec_t ra, rb;
        read_rec(ref, off, &sa, &ra);
        read_rec(pl, off, &sb, &rb);
        assert_int_equal(ra.h.body_len, rb.h.body_len);
        assert_memory_equal(ra.body, rb.body, ra.h.body_len);
        assert_int_equal(ra.h.flags, rb.h.flags);
    }
    tn_rec_t r;
    assert_int_equal(tn_plog_read(pl, end, &sb, &r), TN_ENOTFOUND);
    tn_buf_fini(&sa);
    tn_buf_fini(&sb);
    tn_epoch_entry_t a[8], b[8];
    uint32_t na = tn_plog_epochs_range(ref, first, end, a, 8);
    uint32_t nb = tn_plog_epochs_range(pl, 0, UINT64_MAX, b, 8);
    assert_int_equal(na, nb);
    for (uint32_t i = 0; i < na; i++) {
        assert_int_equal(a[i].epoch, b[i].epoch);
        assert_int_equal(a[i].start, b[i].start);
    }
    uint32_t want = 0;
    if (end > first) {
        assert_int_equal(tn_plog_epochs_range(ref, end - 1, end, a, 1), 1);
        want = a[0].epoch;
    }
    assert_int_equal(tn_plog_last_epoch(pl), want);
}

static void test_truncate(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    tn_plog_t *pl = open_log(fx, "tr", 0);
    build_leader(fx, ref);
    copy_all(fx, ref, pl, 1 << 20);
    uint64_t end = tn_plog_written_next(pl);

    assert_int_equal(truncate_to(fx, pl, 900, 901), TN_ERANGE);
    assert_int_equal(truncate_to(fx, pl, end, 0), 0); /* no change */
    assert_int_equal(truncate_to(fx, pl, end + 5, 0), 0);
    assert_int_equal(tn_plog_written_next(pl), end);
    /* Inside a batch of 8 (the last ones): refused, nothing changed. */
    assert_int_equal(truncate_to(fx, pl, end - 3, 0), UV_EINVAL);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_int_equal(tn_plog_written_next(pl), end);
    /* The follower's form (issue 23: a divergence point inside a batch
     * made every truncation fail, forever): down to the batch's start,
     * refused when that start is below the floor (the hw). */
    uint64_t cut = 0;
    assert_int_equal(truncate_batch(fx, pl, end - 3, end - 2, &cut), TN_ERANGE);
    assert_int_equal(truncate_batch(fx, pl, end - 3, end - 8 + 1, &cut), TN_ERANGE);
    assert_int_equal(tn_plog_err(pl), 0);
    assert_int_equal(tn_plog_written_next(pl), end);
    assert_int_equal(truncate_batch(fx, pl, end - 3, end - 8, &cut), 0);
    assert_int_equal(cut, end - 8);
    assert_int_equal(tn_plog_written_next(pl), end - 8);
    expect_consistent(ref, pl);
    /* At a batch boundary it is tn_plog_truncate. */
    assert_int_equal(truncate_batch(fx, pl, end - 16, 0, &cut), 0);
    assert_int_equal(cut, end - 16);
    expect_consistent(ref, pl);
    assert_int_equal(truncate_batch(fx, pl, end, 0, &cut), 0); /* past the end: no change */
    assert_int_equal(cut, end - 16);

    /* Into epoch 4's range, then to its start (epoch 4 goes), then into
     * epoch 1. */
    assert_int_equal(truncate_to(fx, pl, E4_START + 9, 0), 0);
    expect_consistent(ref, pl);
    assert_int_equal(tn_plog_written_next(pl), E4_START + 9);
    assert_int_equal(truncate_to(fx, pl, E4_START, 0), 0);
    expect_consistent(ref, pl);
    assert_int_equal(tn_plog_last_epoch(pl), 3);
    assert_int_equal(truncate_to(fx, pl, 200, 0), 0);
    expect_consistent(ref, pl);
    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_log(fx, "tr", 0);
    expect_consistent(ref, pl);
    assert_int_equal(tn_plog_written_next(pl), 200);
    /* It goes on from there: copy the rest again. */
    copy_all(fx, ref, pl, 5000);
    expect_same(ref, pl);
    /* Truncating to a segment's base exactly. */
    tn_plog_stats_t st;
    tn_plog_stats(pl, &st);
    uint64_t base = tn_plog_offset_after_ns(pl, INT64_MAX); /* the active segment's base */
    assert_true(base > 0);
    assert_int_equal(truncate_to(fx, pl, base, 0), 0);
    expect_consistent(ref, pl);
    assert_int_equal(truncate_to(fx, pl, 0, 0), 0);
    expect_consistent(ref, pl);
    tu_fx_reopen(fx);
    ref = open_log(fx, "ref", 0);
    pl = open_log(fx, "tr", 0);
    expect_consistent(ref, pl);
    copy_all(fx, ref, pl, 1 << 16);
    expect_same(ref, pl);
}

/* One way a divergence point lands inside a follower's batch (issue 23):
 * the new leader's log skipped offsets (tn_plog_advance, as the queue
 * engine does when a channel refers to a tail its log lost) past part of
 * a batch the follower holds whole, so its epoch 1 ends there. The plain
 * truncation is refused (UV_EINVAL: the follower looped on it); the
 * batch form cuts at the batch start, and refuses when that start is
 * below the follower's hw. */
static void test_divergence_inside_batch(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *old = open_log(fx, "dv-old", 0);
    tn_plog_t *nl = open_log(fx, "dv-new", 0);
    tn_plog_t *fl = open_log(fx, "dv-f", 0);
    assert_int_equal(begin_epoch(fx, old, 1, NULL), 0); /* offset 0 */
    append_batch(fx, old, 3);                           /* 1..3 */
    append_batch(fx, old, 4);                           /* 4..7 */
    copy_all(fx, old, fl, 1 << 20);
    copy_all(fx, old, nl, 1 << 20);
    assert_int_equal(truncate_to(fx, nl, 4, 0), 0); /* its tail lost */
    tw_t w = {false, 0};
    tn_plog_advance_t adv;
    adv.data = &w;
    assert_int_equal(tn_plog_advance(nl, &adv, 6, on_advance), 0);
    run_until(&fx->loop, &w.done);
    assert_int_equal(w.status, 0);
    uint64_t at = 0;
    assert_int_equal(begin_epoch(fx, nl, 2, &at), 0);
    assert_int_equal(at, 6);
    /* The leader's answer for epoch 1, and the follower's own end of it. */
    uint32_t found = 0;
    uint64_t end = 0, own = 0;
    assert_int_equal(tn_plog_epoch_end(nl, 1, &found, &end), 0);
    assert_int_equal(found, 1);
    assert_int_equal(end, 6);
    assert_int_equal(tn_plog_epoch_end(fl, 1, &found, &own), 0);
    assert_int_equal(own, 8);
    uint64_t point = TN_MIN(end, own); /* repl.c on_diverging */
    assert_int_equal(truncate_to(fx, fl, point, 4), UV_EINVAL);
    assert_int_equal(tn_plog_written_next(fl), 8);
    uint64_t cut = 0;
    assert_int_equal(truncate_batch(fx, fl, point, 5, &cut), TN_ERANGE); /* hw 5 */
    assert_int_equal(tn_plog_written_next(fl), 8);
    assert_int_equal(tn_plog_err(fl), 0);
    assert_int_equal(truncate_batch(fx, fl, point, 4, &cut), 0); /* hw 4 */
    assert_int_equal(cut, 4);
    assert_int_equal(tn_plog_written_next(fl), 4);
    assert_int_equal(tn_plog_last_epoch(fl), 1);
    tu_fx_reopen(fx);
    fl = open_log(fx, "dv-f", 0);
    assert_int_equal(tn_plog_written_next(fl), 4);
    assert_int_equal(tn_plog_err(fl), 0);
}

/* Each crash point of a truncation: the reopened log holds either the old
 * suffix or the truncated one (or, after dropping later segments, a
 * prefix in between), its epochs agreeing; truncating again finishes. */
static void test_truncate_crash_points(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    for (int k = 1; k <= 5; k++) {
        char name[32];
        snprintf(name, sizeof(name), "crash%d", k);
        tn_plog_t *pl = open_log(fx, name, 0);
        copy_all(fx, ref, pl, 3000); /* several segments */
        tn__plog_trunc_stop_after(k);
        assert_int_equal(truncate_to(fx, pl, 200, 0), UV_EIO);
        assert_int_equal(tn_plog_err(pl), UV_EIO);
        tu_plog_close(&fx->loop, pl);
        pl = open_log(fx, name, 0);
        uint64_t end = tn_plog_written_next(pl);
        if (k == 1)
            assert_int_equal(end, tn_plog_written_next(ref));
        if (k == 2)
            assert_true(end > 200 && end < tn_plog_written_next(ref));
        if (k >= 3)
            assert_int_equal(end, 200);
        expect_consistent(ref, pl);
        assert_int_equal(truncate_to(fx, pl, 200, 0), 0);
        expect_consistent(ref, pl);
        assert_int_equal(tn_plog_written_next(pl), 200);
        copy_all(fx, ref, pl, 1 << 20);
        expect_same(ref, pl);
        tu_plog_close(&fx->loop, pl);
    }
}

/* The same under the power-loss simulator: a cut at every mutating
 * operation of a truncation, then a random post-crash state. */
static void test_truncate_powerloss(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    char root[4096];
    snprintf(root, sizeof(root), "%s/topics/pw", fx->dir);
    for (long cut = 0;; cut++) {
        char name[32];
        snprintf(name, sizeof(name), "pw");
        tn_plog_t *pl = open_log(fx, name, 0);
        if (tn_plog_written_next(pl) > 0)
            assert_int_equal(truncate_to(fx, pl, 0, 0), 0);
        copy_all(fx, ref, pl, 3000);
        tn_plog_stats_t st;
        tn_plog_stats(pl, &st);
        assert_true(st.segments > 2);
        tu_plog_close(&fx->loop, pl);
        pl = open_log(fx, name, 0);
        assert_int_equal(tn_io_sim_start(root), 0);
        tn_io_sim_cut_after(cut);
        int rc = truncate_to(fx, pl, 200, 0);
        bool was_cut = tn_io_sim_is_cut();
        tu_plog_close(&fx->loop, pl);
        assert_int_equal(tn_io_sim_powerloss((uint64_t)cut * 7919 + 1), 0);
        pl = open_log(fx, name, 0);
        expect_consistent(ref, pl);
        if (!was_cut) {
            assert_int_equal(rc, 0);
            assert_int_equal(tn_plog_written_next(pl), 200);
            tu_plog_close(&fx->loop, pl);
            break;
        }
        tu_plog_close(&fx->loop, pl);
        assert_true(cut < 200);
    }
}

/* A follower's reset: truncating below the first stored offset (here
 * after retention) empties the log and restarts it there, crash-safely;
 * a drop floor above the offset comes down. */
static void test_truncate_reset(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *ref = open_log(fx, "ref", 0);
    build_leader(fx, ref);
    for (int k = 0; k <= 5; k++) {
        char name[32];
        snprintf(name, sizeof(name), "reset%d", k);
        tn_plog_t *pl = open_log(fx, name, 0);
        copy_all(fx, ref, pl, 3000);
        tn_plog_gc_t gc;
        bool done = false;
        gc.data = &done;
        assert_int_equal(tn_plog_gc(pl, &gc, 900, 0, on_gc), 0);
        run_until(&fx->loop, &done);
        tn_plog_stats_t st;
        tn_plog_stats(pl, &st);
        assert_true(st.first_offset > 100);
        expect_consistent(ref, pl);
        if (k > 0)
            tn__plog_trunc_stop_after(k);
        assert_int_equal(truncate_to(fx, pl, 100, 0), k > 0 ? UV_EIO : 0);
        if (k > 0) {
            tu_plog_close(&fx->loop, pl);
            pl = open_log(fx, name, 0);
            expect_consistent(ref, pl);
            assert_int_equal(truncate_to(fx, pl, 100, 0), 0);
        }
        expect_consistent(ref, pl);
        tn_plog_stats(pl, &st);
        assert_int_equal(st.first_offset, 100);
        assert_int_equal(st.written_next, 100);
        assert_int_equal(st.segments, 1);
        copy_all(fx, ref, pl, 3000);
        expect_consistent(ref, pl);
        tu_plog_close(&fx->loop, pl);
        pl = open_log(fx, name, 0);
        expect_consistent(ref, pl);
        assert_int_equal(tn_plog_written_next(pl), tn_plog_written_next(ref));
        tu_plog_close(&fx->loop, pl);
    }

    /* A drop floor above the offset. */
    tn_plog_t *pl = open_log(fx, "floor", 0);
    copy_all(fx, ref, pl, 3000);
    tn_plog_floor_t fr;
    bool fdone = false;
    fr.data = &fdone;
    assert_int_equal(tn_plog_drop_below(pl, &fr, 500, on_floor), 0);
    run_until(&fx->loop, &fdone);
    assert_int_equal(truncate_to(fx, pl, 300, 0), 0);
    tn_plog_stats_t st;
    tn_plog_stats(pl, &st);
    assert_int_equal(st.first_offset, 300);
    copy_all(fx, ref, pl, 3000);
    tu_plog_close(&fx->loop, pl);
    pl = open_log(fx, "floor", 0);
    expect_consistent(ref, pl);
    tn_plog_stats(pl, &st);
    assert_int_equal(st.first_offset, 300); /* the floor, lowered, stays */
    assert_int_equal(st.written_next, tn_plog_written_next(ref));
}

/* --- hw gate ------------------------------------------------------------------------ */

static int progress_calls;

static int parked(const tn_plog_t *pl)
{
    int n = 0;
    for (const tn_append_t *r = pl->ghead; r != NULL; r = r->gnext)
        n++;
    return n;
}

static void on_progress(tn_plog_t *pl)
{
    (void)pl;
    progress_calls++;
}

static void test_hw_gate(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "gate", 0);
    pl->on_progress = on_progress;
    progress_calls = 0;
    tn_plog_set_gated(pl, true);
    waits_t w = {0};
    areq_t a[4];
    tn_rec_in_t rec = {.key = tn_iov(NULL, 0), .body = tn_iov("m", 1)};
    for (int i = 0; i < 3; i++) {
        a[i] = (areq_t){.w = &w, .id = i};
        a[i].req.data = &a[i];
        assert_int_equal(tn_plog_append(pl, &a[i].req, &rec, 1, on_areq), 0);
    }
    a[3] = (areq_t){.w = &w, .id = 3};
    a[3].req.data = &a[3];
    assert_int_equal(tn_plog_begin_epoch(pl, &a[3].req, 7, on_areq), 0);
    /* Written and synced, each completion held back for the hw. */
    while (parked(pl) < 4)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.done, 0);
    assert_int_equal(tn_plog_visible_next(pl), 0);
    assert_int_equal(tn_plog_hw(pl), 0);

    int before = progress_calls;
    tn_plog_set_hw(pl, 2);
    assert_int_equal(w.done, 2);
    assert_int_equal(w.order[0], 0);
    assert_int_equal(w.order[1], 1);
    assert_int_equal(tn_plog_visible_next(pl), 2);
    tn_plog_set_hw(pl, 1); /* never back */
    assert_int_equal(tn_plog_hw(pl), 2);
    while (progress_calls == before)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tn_plog_set_hw(pl, 100); /* capped at written_next */
    assert_int_equal(tn_plog_hw(pl), 4);
    assert_int_equal(w.done, 4);
    assert_int_equal(w.order[2], 2);
    assert_int_equal(w.order[3], 3);
    for (int i = 0; i < 4; i++)
        assert_int_equal(a[i].status, 0);
    assert_int_equal(a[3].req.first_offset, 3);

    /* A resigned leader fails what still waits. */
    waits_t w2 = {0};
    for (int i = 0; i < 2; i++) {
        a[i] = (areq_t){.w = &w2, .id = i};
        a[i].req.data = &a[i];
        assert_int_equal(tn_plog_append(pl, &a[i].req, &rec, 1, on_areq), 0);
    }
    while (parked(pl) < 2)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w2.done, 0);
    assert_int_equal(tn_plog_visible_next(pl), 4);
    tn_plog_fail_gated(pl, TN_EFENCED);
    assert_int_equal(w2.done, 2);
    assert_int_equal(a[0].status, TN_EFENCED);
    assert_int_equal(a[1].status, TN_EFENCED);

    /* Ungated: completions at the mode's boundary again, the cap lifted. */
    a[0] = (areq_t){.w = &w2, .id = 0};
    a[0].req.data = &a[0];
    assert_int_equal(tn_plog_append(pl, &a[0].req, &rec, 1, on_areq), 0);
    while (parked(pl) < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w2.done, 2);
    tn_plog_set_gated(pl, false);
    assert_int_equal(w2.done, 3);
    assert_int_equal(a[0].status, 0);
    assert_int_equal(tn_plog_visible_next(pl), 7);
    pl->on_progress = NULL;

    /* A shut gate (the replica manager closing) fails what waits now and
     * an append still being written when it shut, at its completion; the
     * gate turned on again waits for the hw as before. */
    tn_plog_set_gated(pl, true);
    waits_t w3 = {0};
    for (int i = 0; i < 2; i++) {
        a[i] = (areq_t){.w = &w3, .id = i};
        a[i].req.data = &a[i];
    }
    assert_int_equal(tn_plog_append(pl, &a[0].req, &rec, 1, on_areq), 0);
    while (parked(pl) < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);
    /* Completions reach this thread only through the loop: a[1] is still
     * being written when the gate shuts. */
    assert_int_equal(tn_plog_append(pl, &a[1].req, &rec, 1, on_areq), 0);
    tn_plog_gate_shut(pl, TN_ECLOSED);
    assert_int_equal(w3.done, 1);
    while (w3.done < 2)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(a[0].status, TN_ECLOSED);
    assert_int_equal(a[1].status, TN_ECLOSED);
    assert_int_equal(parked(pl), 0);

    /* Below min_insync (tn_plog_fail_gated_records): the records' appends
     * fail, in order, and an epoch-start record between them waits on for
     * the hw, which completes it alone. */
    tn_plog_set_gated(pl, true);
    waits_t w4 = {0};
    for (int i = 0; i < 4; i++) {
        a[i] = (areq_t){.w = &w4, .id = i};
        a[i].req.data = &a[i];
    }
    uint64_t next = tn_plog_written_next(pl);
    assert_int_equal(tn_plog_append(pl, &a[0].req, &rec, 1, on_areq), 0);
    assert_int_equal(tn_plog_begin_epoch(pl, &a[1].req, 9, on_areq), 0);
    assert_int_equal(tn_plog_append(pl, &a[2].req, &rec, 1, on_areq), 0);
    assert_int_equal(tn_plog_append(pl, &a[3].req, &rec, 1, on_areq), 0);
    while (parked(pl) < 4)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tn_plog_fail_gated_records(pl, TN_EFEWREPLICAS);
    assert_int_equal(w4.done, 3);
    assert_int_equal(w4.order[0], 0);
    assert_int_equal(w4.order[1], 2);
    assert_int_equal(w4.order[2], 3);
    assert_int_equal(a[0].status, TN_EFEWREPLICAS);
    assert_int_equal(a[3].status, TN_EFEWREPLICAS);
    assert_false(a[1].done);
    assert_int_equal(parked(pl), 1);
    tn_plog_set_hw(pl, next + 2); /* past the epoch start */
    assert_int_equal(w4.done, 4);
    assert_int_equal(a[1].status, 0);
    assert_int_equal(parked(pl), 0);
    /* The gate still works after the cut: a new append waits again. */
    a[0] = (areq_t){.w = &w4, .id = 0};
    a[0].req.data = &a[0];
    assert_int_equal(tn_plog_append(pl, &a[0].req, &rec, 1, on_areq), 0);
    while (parked(pl) < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tn_plog_set_hw(pl, next + 5);
    assert_int_equal(w4.done, 5);
    assert_int_equal(a[0].status, 0);
    pl->on_progress = NULL;

    /* Closing the log completes what waits for the hw. */
    tn_plog_set_gated(pl, true);
    a[0] = (areq_t){.w = &w2, .id = 0};
    a[0].req.data = &a[0];
    assert_int_equal(tn_plog_append(pl, &a[0].req, &rec, 1, on_areq), 0);
    while (parked(pl) < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tu_plog_close(&fx->loop, pl);
    assert_true(a[0].done);
    assert_int_equal(a[0].status, TN_ECLOSED);
}

/* --- the replica watch ------------------------------------------------------------ */

typedef struct {
    tn_plog_t *pl;
    int calls;
    uint64_t max_written_gated; /* written_next seen while the append waited for the hw */
    uint64_t max_durable;
    uint64_t max_hw;
    const areq_t *a;
} watch_t;

static void on_watch(void *arg, tn_plog_t *pl)
{
    watch_t *w = arg;
    assert_ptr_equal(pl, w->pl);
    w->calls++;
    if (w->a != NULL && !w->a->done && tn_plog_written_next(pl) > w->max_written_gated)
        w->max_written_gated = tn_plog_written_next(pl);
    if (tn_plog_durable_next(pl) > w->max_durable)
        w->max_durable = tn_plog_durable_next(pl);
    if (tn_plog_hw(pl) > w->max_hw)
        w->max_hw = tn_plog_hw(pl);
}

/* A watched log tells the store's replica watch of its writes (before the
 * hw lets the append complete), of its flushes and of hw moves, with no
 * on_progress of its own; the watch off again, it tells nothing more. */
static void test_repl_watch(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "watch", 0);
    tn_plog_set_durability(pl, TN_DURABILITY_DURABLE);
    tn_plog_set_gated(pl, true);
    areq_t a = {0};
    a.req.data = &a;
    watch_t w = {.pl = pl, .a = &a};
    tn_store_set_repl_watch(fx->store, on_watch, &w);
    tn_plog_set_repl_watch(pl, true);
    assert_null(pl->on_progress);

    tn_rec_in_t rec = {.key = tn_iov(NULL, 0), .body = tn_iov("m", 1)};
    assert_int_equal(tn_plog_append(pl, &a.req, &rec, 1, on_areq), 0);
    while (w.max_durable < 1 || w.max_written_gated < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_false(a.done); /* waits for the hw */
    tn_plog_set_hw(pl, 1);
    assert_true(a.done);
    assert_int_equal(a.status, 0);
    while (w.max_hw < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);

    /* A follower's copy (completes once written) is told once flushed. */
    tn_plog_set_repl_watch(pl, false);
    tn_plog_t *f = open_log(fx, "watch", 1);
    tn_plog_set_durability(f, TN_DURABILITY_DURABLE);
    watch_t wf = {.pl = f};
    tn_store_set_repl_watch(fx->store, on_watch, &wf);
    tn_plog_set_repl_watch(f, true);
    tn_buf_t raw;
    tn_buf_init(&raw);
    uint32_t count = 0;
    assert_int_equal(tn_plog_read_raw(pl, 0, 1 << 20, &raw, &count), 0);
    assert_int_equal(count, 1);
    areq_t b = {0};
    b.req.data = &b;
    assert_int_equal(
        tn_plog_append_raw(f, &b.req, tn_buf_data(&raw), tn_buf_size(&raw), 0, NULL, 0, on_areq),
        0);
    while (wf.max_durable < 1)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(tn_plog_durable_next(f), 1);
    tn_buf_fini(&raw);

    /* Off: the watch hears nothing of later rounds. */
    tn_plog_set_repl_watch(f, false);
    tn_store_set_repl_watch(fx->store, NULL, NULL);
    int calls = wf.calls;
    areq_t c = {0};
    c.req.data = &c;
    assert_int_equal(tn_plog_append(f, &c.req, &rec, 1, on_areq), 0);
    run_until(&fx->loop, &c.done);
    assert_int_equal(c.status, 0);
    assert_int_equal(wf.calls, calls);
    assert_int_equal(tn_plog_durable_next(f), 2);
}

/* A close tells the replica watch at once (the manager lets go of a log
 * the engine closes under it), runs after a truncation asked before it,
 * and waits for the last pin (a worker's read) before the log is freed. */
typedef struct {
    tn_plog_t *pl;
    int closing_calls;
    bool trunc_done, closed;
    int trunc_status;
    bool closed_before_trunc;
} closewatch_t;

static closewatch_t *cw_cur;

static void on_cw_watch(void *arg, tn_plog_t *pl)
{
    closewatch_t *cw = arg;
    if (pl == cw->pl && pl->closing)
        cw->closing_calls++;
}

static void on_cw_trunc(tn_plog_trunc_t *req, int status)
{
    closewatch_t *cw = req->data;
    cw->trunc_done = true;
    cw->trunc_status = status;
}

static void on_cw_closed(tn_plog_t *pl)
{
    (void)pl;
    cw_cur->closed = true;
    cw_cur->closed_before_trunc = !cw_cur->trunc_done;
}

static void test_close_tells_watch_and_waits_for_pins(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *pl = open_log(fx, "closing", 0);
    tn_plog_set_durability(pl, TN_DURABILITY_DURABLE);
    areq_t a = {0};
    a.req.data = &a;
    tn_rec_in_t rec = {.key = tn_iov(NULL, 0), .body = tn_iov("m", 1)};
    assert_int_equal(tn_plog_append(pl, &a.req, &rec, 1, on_areq), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);

    closewatch_t cw = {.pl = pl};
    cw_cur = &cw;
    tn_store_set_repl_watch(fx->store, on_cw_watch, &cw);
    tn_plog_set_repl_watch(pl, true);
    tn_plog_trunc_t tr;
    memset(&tr, 0, sizeof(tr));
    tr.data = &cw;
    assert_int_equal(tn_plog_truncate(pl, &tr, 0, 0, on_cw_trunc), 0);
    tn_plog_pin(pl);
    tn_plog_close(pl, on_cw_closed);
    assert_int_equal(cw.closing_calls, 1); /* told at once, before any completion */
    assert_false(cw.trunc_done);
    /* Asked after the close: refused. */
    tn_plog_trunc_t late;
    memset(&late, 0, sizeof(late));
    assert_int_equal(tn_plog_truncate(pl, &late, 0, 0, on_cw_trunc), TN_ECLOSED);

    run_until(&fx->loop, &cw.trunc_done);
    assert_int_equal(cw.trunc_status, 0);
    for (int i = 0; i < 50; i++) /* pinned: the close is not even queued */
        uv_run(&fx->loop, UV_RUN_NOWAIT);
    assert_false(cw.closed);
    assert_int_equal(tn_plog_written_next(pl), 0); /* still readable */
    tn_plog_unpin(pl);
    run_until(&fx->loop, &cw.closed);
    assert_false(cw.closed_before_trunc);
    assert_int_equal(cw.closing_calls, 1);
    tn_store_set_repl_watch(fx->store, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_control_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_tells_watch_and_waits_for_pins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_begin_epoch_and_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_without_epochs_is_a_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_mark_is_not_a_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epochs_repaired_at_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_trims_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_copy_full_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_begin_epoch_full_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_divergence_inside_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_crash_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_powerloss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_before_gap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_at_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_recorded_across_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_damage_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_crash_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_gap_crash_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_powerloss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_active, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_active_drops_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_active_at_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_active_crash_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_active_powerloss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scrub_active, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_epochs_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_active_and_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hw_gate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repl_watch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
