/* Channel logs: records survive reopen, checkpoints every N records keep
 * the WAL short, a crash between checkpoint rename and WAL truncation
 * replays correctly, torn WAL tails are cut, damage isolates, a
 * recreated channel never sees an old WAL, the submitted/completed
 * counts say when queued records are on disk, and a full disk fails a
 * round's records alone, its cut-back WAL synced before they are
 * answered (none of them comes back after a power cut). */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "storage/chanlog.h"
#include "storage/io.h"
#include "storage/wal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef tu_fx_t fx_t;

/* Checkpoints often enough for the tests to cross them. */
static void chanlog_opts(tn_store_opts_t *o)
{
    o->checkpoint_every = 50;
}

static int setup(void **state)
{
    *state = tu_fx_new(chanlog_opts);
    return 0;
}

static int teardown(void **state)
{
    tu_fx_free(*state);
    return 0;
}

static tn_chanlog_t *open_cl(fx_t *fx, const char *ch, tn_cursor_t *state)
{
    tn_chanlog_t *cl = NULL;
    assert_int_equal(tn_chanlog_open(fx->store, "t", 0, ch, NULL, &cl, state), 0);
    return cl;
}

typedef struct {
    int done;
    int status;
} wait_t;

static void on_op(tn_walop_t *op, int status)
{
    wait_t *w = op->data;
    w->done++;
    if (status != 0)
        w->status = status;
}

/* Submit FIN for each offset in [from, to) at once (with flags), then
 * wait for all. */
static int fin_range_ex(fx_t *fx, tn_chanlog_t *cl, uint64_t from, uint64_t to, unsigned flags)
{
    size_t n = (size_t)(to - from);
    tn_walop_t *ops = calloc(n, sizeof(*ops));
    wait_t w = {0, 0};
    for (size_t i = 0; i < n; i++) {
        tn_walrec_t r = {TN_WAL_FIN, from + i, 0, 0, 0};
        ops[i].data = &w;
        int rc = tn_chanlog_submit_ex(cl, &ops[i], &r, on_op, flags);
        if (rc != 0) {
            w.done++;
            w.status = rc;
        }
    }
    while (w.done < (int)n)
        uv_run(&fx->loop, UV_RUN_ONCE);
    free(ops);
    return w.status;
}

static int fin_range(fx_t *fx, tn_chanlog_t *cl, uint64_t from, uint64_t to)
{
    return fin_range_ex(fx, cl, from, to, 0);
}

static void test_records_survive_reopen(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "workers", &st);
    assert_int_equal(st.frontier, 0);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 0, 10), 0);
    assert_int_equal(fin_range(fx, cl, 15, 18), 0);
    wait_t w = {0, 0};
    tn_walop_t op;
    op.data = &w;
    tn_walrec_t r = {TN_WAL_REQ, 12, 123456, 3, 0};
    assert_int_equal(tn_chanlog_submit(cl, &op, &r, on_op), 0);
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    r = (tn_walrec_t){99, 0, 0, 0, 0};
    assert_int_equal(tn_chanlog_submit(cl, &op, &r, on_op), UV_EINVAL);

    tu_fx_reopen(fx);
    cl = open_cl(fx, "workers", &st);
    assert_int_equal(tn_chanlog_err(cl), 0);
    assert_int_equal(st.frontier, 10);
    assert_true(tn_cursor_is_settled(&st, 16));
    assert_false(tn_cursor_is_settled(&st, 12));
    const tn_requeue_t *q = tn_cursor_requeued(&st, 12);
    assert_non_null(q);
    assert_int_equal(q->due_ms, 123456);
    assert_int_equal(q->attempts, 3);
    assert_int_equal(st.finish_count, 13);
    assert_int_equal(st.requeue_count, 1);
    assert_int_equal(st.seq, 14);
    tn_cursor_fini(&st);
}

/* A crash leaves the zeros written ahead of the WAL's frames: recovery
 * cuts them off without calling it damage. */
static void test_wal_zero_tail_trimmed(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 0, 5), 0);
    char wal[4096];
    snprintf(wal, sizeof(wal), "%s/topics/t/0/c.wal", fx->dir);
    assert_true(tu_file_size(wal) >= 256 * 1024); /* zeros ahead while open */
    tu_fx_reopen(fx);
    long len = tu_file_size(wal);
    static const unsigned char zeros[5000];
    tu_patch_file(wal, len, zeros, sizeof(zeros));
    cl = open_cl(fx, "c", &st);
    assert_int_equal(atomic_load(&cl->err), 0);
    assert_int_equal(st.frontier, 5);
    assert_int_equal(tu_file_size(wal), len);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 5, 8), 0);
    tu_fx_reopen(fx);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(st.frontier, 8);
    tn_cursor_fini(&st);
}

static void test_checkpoints_bound_the_wal(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    for (uint64_t i = 0; i < 500; i += 25)
        assert_int_equal(fin_range(fx, cl, i, i + 25), 0);
    assert_true(atomic_load(&cl->checkpoints) >= 9);
    char wal[4096];
    snprintf(wal, sizeof(wal), "%s/topics/t/0/c.wal", fx->dir);
    tu_fx_reopen(fx); /* closing cut the zeros ahead off */
    assert_true(tu_file_size(wal) <= 50 * (TN_WAL_HDR + 8));
    cl = open_cl(fx, "c", &st);
    assert_int_equal(st.frontier, 500);
    assert_int_equal(st.finish_count, 500);
    tn_cursor_fini(&st);
}

/* Wait (up to 10 s) until cl has taken n checkpoints. */
static void wait_checkpoints(tn_chanlog_t *cl, uint64_t n)
{
    for (int i = 0; i < 10000 && atomic_load(&cl->checkpoints) < n; i++)
        uv_sleep(1);
    assert_int_equal(atomic_load(&cl->checkpoints), n);
}

/* A checkpoint that finds the disk full is not sticky: the records were
 * durable in the WAL already, which keeps them, and the next round writes
 * the checkpoint. An I/O error there still is. (The committer runs a
 * round's checkpoint before the next round: each second fin_range below
 * comes after the first one's checkpoint.) */
static void test_full_disk_checkpoint_retried(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    const int errs[2] = {UV_ENOSPC, -EDQUOT};
    for (int i = 0; i < 2; i++) {
        tn_io_fail_create_after(0, errs[i]); /* the checkpoint's temporary file */
        assert_int_equal(fin_range(fx, cl, (uint64_t)i * 60, (uint64_t)i * 60 + 50), 0);
        assert_int_equal(fin_range(fx, cl, (uint64_t)i * 60 + 50, (uint64_t)i * 60 + 60), 0);
        wait_checkpoints(cl, (uint64_t)i + 1);
        assert_int_equal(tn_chanlog_err(cl), 0);
    }
    tn_io_fail_create_after(-1, 0);
    tu_fx_reopen(fx);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(st.frontier, 120);
    tn_cursor_fini(&st);
    tn_io_fail_create_after(0, UV_EIO);
    assert_int_equal(fin_range(fx, cl, 120, 170), 0);
    assert_int_equal(fin_range(fx, cl, 170, 171), UV_EIO);
    tn_io_fail_create_after(-1, 0);
    assert_int_equal(tn_chanlog_err(cl), UV_EIO);
}

typedef struct {
    bool done;
    int status;
} state_wait_t;

static void on_state(tn_chanlog_state_t *req, int status)
{
    state_wait_t *w = req->data;
    w->done = true;
    w->status = status;
}

static int get_state(fx_t *fx, tn_chanlog_t *cl, tn_chanlog_state_t *req)
{
    state_wait_t w = {false, 0};
    req->data = &w;
    int rc = tn_chanlog_state(cl, req, on_state);
    if (rc != 0)
        return rc;
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    return w.status;
}

/* A WAL write that finds the disk full fails its round's records alone
 * when they all allow it (TN_WALOP_SPACE_OK): the committer's state and
 * the WAL stay as before the round, tn_chanlog_state tells whether the
 * WAL can grow again and gives that state, and later records go on from
 * it. Without the flag the failure is sticky. */
static void test_full_disk_wal_write(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    const unsigned ok = TN_WALOP_SPACE_OK;
    assert_int_equal(fin_range_ex(fx, cl, 0, 10, ok), 0);
    tn_io_fail_write_after(0, UV_ENOSPC); /* the frames (zeros are ahead) */
    assert_int_equal(fin_range_ex(fx, cl, 10, 15, ok), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_chanlog_err(cl), 0);
    tn_chanlog_state_t req;
    tn_io_fail_write_after(0, -EDQUOT); /* the zeros it writes to see */
    assert_int_equal(get_state(fx, cl, &req), -EDQUOT);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_chanlog_err(cl), 0);
    assert_int_equal(get_state(fx, cl, &req), 0);
    assert_int_equal(req.cur.frontier, 10); /* 10..14 never written */
    assert_int_equal(req.cur.finish_count, 10);
    tn_cursor_fini(&req.cur);
    assert_int_equal(fin_range_ex(fx, cl, 10, 20, ok), 0);
    tu_fx_reopen(fx);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(st.frontier, 20);
    assert_int_equal(st.finish_count, 20);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range_ex(fx, cl, 20, 21, ok), 0); /* zeros ahead again */
    tn_io_fail_write_after(0, UV_ENOSPC);
    assert_int_equal(fin_range(fx, cl, 21, 22), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_chanlog_err(cl), UV_ENOSPC);
    assert_int_equal(get_state(fx, cl, &req), UV_ENOSPC);
}

static bool cl_closed;
static void on_cl_closed(tn_chanlog_t *cl)
{
    (void)cl;
    cl_closed = true;
}

/* A WAL write that finds the disk full partway (its first frames written,
 * then ENOSPC) and is cut back: a power cut right after its records were
 * answered with the error leaves none of them in the log, whatever the
 * disk kept of the unsynced write (the cut-back is synced before they are
 * answered). Before, the cut-back was not synced: under some seeds the
 * first frames came back, their FINs settled after they failed. */
static void test_full_disk_cut_back_survives_power_loss(void **state)
{
    fx_t *fx = *state;
    const unsigned ok = TN_WALOP_SPACE_OK;
    int resurrected = 0;
    for (int seed = 0; seed < 24; seed++) {
        char ch[16];
        snprintf(ch, sizeof(ch), "p%d", seed);
        assert_int_equal(tn_io_sim_start(fx->dir), 0);
        tn_cursor_t st;
        tn_chanlog_t *cl = open_cl(fx, ch, &st);
        tn_cursor_fini(&st);
        assert_int_equal(fin_range_ex(fx, cl, 0, 10, ok), 0);
        /* Two of the five frames reach the file, then the disk is full. */
        tn_io_fail_write_partial(0, UV_ENOSPC, 2 * (TN_WAL_HDR + 8));
        assert_int_equal(fin_range_ex(fx, cl, 10, 15, ok), UV_ENOSPC);
        tn_io_fail_write_after(-1, 0);
        assert_int_equal(tn_chanlog_err(cl), 0);
        tn_io_sim_cut();
        cl_closed = false;
        tn_chanlog_close(cl, on_cl_closed);
        while (!cl_closed)
            uv_run(&fx->loop, UV_RUN_ONCE);
        assert_int_equal(tn_io_sim_powerloss((uint64_t)seed * 7919 + 3), 0);
        cl = open_cl(fx, ch, &st);
        assert_int_equal(tn_chanlog_err(cl), 0);
        if (st.frontier != 10) {
            printf("seed %d: frontier %" PRIu64 " after the power cut (10..14 were refused)\n",
                   seed, st.frontier);
            resurrected++;
        }
        tn_cursor_fini(&st);
        cl_closed = false;
        tn_chanlog_close(cl, on_cl_closed);
        while (!cl_closed)
            uv_run(&fx->loop, UV_RUN_ONCE);
    }
    assert_int_equal(resurrected, 0);
    /* That sync is never retried: its failure is sticky. */
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "sync", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range_ex(fx, cl, 0, 1, ok), 0);
    tn_io_fail_write_partial(0, UV_ENOSPC, TN_WAL_HDR);
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(fin_range_ex(fx, cl, 1, 2, ok), UV_ENOSPC);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_chanlog_err(cl), UV_EIO);
}

static void test_crash_between_rename_and_truncate(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 0, 30), 0);
    char wal[4096], saved[4096];
    snprintf(wal, sizeof(wal), "%s/topics/t/0/c.wal", fx->dir);
    snprintf(saved, sizeof(saved), "%s/saved.wal", fx->dir);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    /* Keep the 30-frame WAL as it was before the next checkpoint. */
    char cmd[9000];
    snprintf(cmd, sizeof(cmd), "cp %s %s", wal, saved);
    assert_int_equal(system(cmd), 0);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 30, 60), 0); /* passes 50: checkpoint + truncate */
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    /* The checkpoint runs after the round completes; once closed it is done. */
    assert_true(tu_file_size(wal) < 30 * (TN_WAL_HDR + 8));
    /* Put back frames 1..30 as if the truncation never reached the disk,
     * plus nothing newer: replay must skip them (seq <= checkpoint). */
    snprintf(cmd, sizeof(cmd), "cp %s %s", saved, wal);
    assert_int_equal(system(cmd), 0);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(tn_chanlog_err(cl), 0);
    assert_true(st.frontier >= 50);
    assert_int_equal(st.finish_count, st.frontier);
    tn_cursor_fini(&st);
}

static void test_torn_wal_tail(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 0, 5), 0);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    char wal[4096];
    snprintf(wal, sizeof(wal), "%s/topics/t/0/c.wal", fx->dir);
    tu_truncate_file(wal, tu_file_size(wal) - 5);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(tn_chanlog_err(cl), 0);
    assert_int_equal(st.frontier, 4);
    tn_cursor_fini(&st);
    assert_int_equal(tu_file_size(wal), 4 * (TN_WAL_HDR + 8));
    assert_int_equal(fin_range(fx, cl, 4, 6), 0);
    tu_fx_reopen(fx);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(st.frontier, 6);
    tn_cursor_fini(&st);
}

static void test_damage_isolates(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 0, 1), 0);
    assert_int_equal(fin_range(fx, cl, 1, 2), 0); /* its sync_mark covers the first */
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    char wal[4096];
    snprintf(wal, sizeof(wal), "%s/topics/t/0/c.wal", fx->dir);
    unsigned char junk = 0x7f;
    tu_patch_file(wal, 21, &junk, 1);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    cl = open_cl(fx, "c", &st);
    assert_int_equal(tn_chanlog_err(cl), TN_ECORRUPT);
    tn_cursor_fini(&st);
    tn_walop_t op;
    tn_walrec_t r = {TN_WAL_FIN, 5, 0, 0, 0};
    assert_int_equal(tn_chanlog_submit(cl, &op, &r, on_op), TN_ECORRUPT);

    /* A damaged checkpoint isolates too. */
    char ckpt[4096];
    snprintf(ckpt, sizeof(ckpt), "%s/topics/t/0/d.ckpt", fx->dir);
    cl = open_cl(fx, "d", &st);
    tn_cursor_fini(&st);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    tu_patch_file(ckpt, 30, &junk, 1);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    cl = open_cl(fx, "d", &st);
    assert_int_equal(tn_chanlog_err(cl), TN_ECORRUPT);
    assert_non_null(strstr(cl->errmsg, "checkpoint"));
    tn_cursor_fini(&st);
}

static int collect(void *arg, const char *name)
{
    char *buf = arg;
    strcat(buf, name);
    strcat(buf, ",");
    return 0;
}

static void test_create_initial_delete_list(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t init, st;
    tn_cursor_init(&init, 900); /* e.g. a bootstrap window start */
    tn_chanlog_t *cl = NULL;
    assert_int_equal(tn_chanlog_open(fx->store, "t", 0, "late", &init, &cl, &st), 0);
    assert_int_equal(st.frontier, 900);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 900, 905), 0);
    char names[512] = "";
    assert_int_equal(tn_chanlog_list(fx->store, "t", 0, collect, names), 0);
    assert_string_equal(names, "late,");

    tn_chanlog_close(cl, NULL);
    tu_fx_reopen(fx);
    assert_int_equal(tn_chanlog_delete(fx->store, "t", 0, "late"), 0);
    names[0] = '\0';
    assert_int_equal(tn_chanlog_list(fx->store, "t", 0, collect, names), 0);
    assert_string_equal(names, "");

    /* A leftover WAL (deletion crashed after removing the checkpoint) is
     * not replayed into a channel created again under the same name. */
    assert_int_equal(tn_chanlog_open(fx->store, "t", 0, "late", &init, &cl, &st), 0);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 900, 950), 0);
    tn_chanlog_close(cl, NULL);
    tu_fx_reopen(fx);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/late.ckpt", fx->dir);
    assert_int_equal(unlink(path), 0);
    tn_cursor_init(&init, 10);
    assert_int_equal(tn_chanlog_open(fx->store, "t", 0, "late", &init, &cl, &st), 0);
    tn_cursor_fini(&st);
    tu_fx_reopen(fx);
    assert_int_equal(tn_chanlog_open(fx->store, "t", 0, "late", NULL, &cl, &st), 0);
    assert_int_equal(st.frontier, 10);
    assert_int_equal(st.finish_count, 0);
    tn_cursor_fini(&st);
    tn_cursor_fini(&init);

    assert_int_equal(tn_chanlog_open(fx->store, "t", 0, "a/b", NULL, &cl, &st), UV_EINVAL);
}

static void test_fsync_failure_sticky(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(fin_range(fx, cl, 0, 3), UV_EIO);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_chanlog_err(cl), UV_EIO);
    assert_int_equal(fin_range(fx, cl, 3, 4), UV_EIO);
}

/* The loop thread's counts, which api/backup.c waits on: a record is
 * counted as submitted when tn_chanlog_submit takes it, and as completed
 * (before its callback runs) once it is written and synced, or failed. */
typedef struct {
    tn_chanlog_t *cl;
    uint64_t seen[8]; /* tn_chanlog_completed as each callback saw it */
    int n;
} count_t;

static void on_count(tn_walop_t *op, int status)
{
    count_t *c = op->data;
    assert_int_equal(status, 0);
    c->seen[c->n++] = tn_chanlog_completed(c->cl);
}

static void test_submitted_completed(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "counted", &st);
    tn_cursor_fini(&st);
    assert_int_equal(tn_chanlog_submitted(cl), 0);
    assert_int_equal(tn_chanlog_completed(cl), 0);
    count_t c = {cl, {0}, 0};
    tn_walop_t ops[5];
    for (int i = 0; i < 5; i++) {
        tn_walrec_t r = {TN_WAL_FIN, (uint64_t)i, 0, 0, 0};
        ops[i].data = &c;
        assert_int_equal(tn_chanlog_submit(cl, &ops[i], &r, on_count), 0);
    }
    tn_walrec_t bad = {99, 0, 0, 0, 0};
    tn_walop_t op;
    op.data = &c;
    assert_int_equal(tn_chanlog_submit(cl, &op, &bad, on_count), UV_EINVAL); /* not counted */
    /* Completions reach the loop thread only when it runs. */
    assert_int_equal(tn_chanlog_submitted(cl), 5);
    assert_int_equal(tn_chanlog_completed(cl), 0);
    while (c.n < 5)
        uv_run(&fx->loop, UV_RUN_ONCE);
    for (int i = 0; i < 5; i++)
        assert_int_equal(c.seen[i], (uint64_t)i + 1); /* in order, counted before the callback */
    assert_int_equal(tn_chanlog_completed(cl), 5);
    /* Completed means on disk: the WAL holds the five frames now. */
    char path[4096];
    snprintf(path, sizeof(path), "%s", cl->wal_path);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char buf[4096];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    size_t pos = 0;
    int frames = 0;
    tn_walrec_t r;
    uint64_t seq;
    uint32_t mark;
    size_t flen;
    while (pos < len && tn_wal_decode(buf + pos, len - pos, &r, &seq, &mark, &flen) == 0) {
        assert_int_equal(r.op, TN_WAL_FIN);
        assert_int_equal(r.offset, (uint64_t)frames);
        frames++;
        pos += flen;
    }
    assert_int_equal(frames, 5);
    /* A failed sync completes its records too, with the log's error set. */
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(fin_range(fx, cl, 5, 8), UV_EIO);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_chanlog_submitted(cl), 8);
    assert_int_equal(tn_chanlog_completed(cl), 8);
    assert_int_equal(tn_chanlog_err(cl), UV_EIO);
    assert_int_equal(fin_range(fx, cl, 8, 9), UV_EIO); /* refused at once: not counted */
    assert_int_equal(tn_chanlog_submitted(cl), 8);
}

static void test_alloc_failures(void **state)
{
    fx_t *fx = *state;
    tn_cursor_t st;
    tn_chanlog_t *cl = open_cl(fx, "c", &st);
    tn_cursor_fini(&st);
    assert_int_equal(fin_range(fx, cl, 0, 40), 0);
    assert_int_equal(fin_range(fx, cl, 45, 60), 0);
    tn_chanlog_close(cl, NULL);
    tu_fx_reopen(fx);
    /* Every allocation of open and replay fails cleanly, leaking nothing. */
    for (long n = 0;; n++) {
        tn_alloc_fail_after(n);
        int rc = tn_chanlog_open(fx->store, "t", 0, "c", NULL, &cl, &st);
        tn_alloc_fail_after(-1);
        if (rc == 0) {
            assert_int_equal(tn_chanlog_err(cl), 0);
            assert_int_equal(st.frontier, 40);
            assert_true(tn_cursor_is_settled(&st, 59));
            tn_cursor_fini(&st);
            break;
        }
        assert_int_equal(rc, UV_ENOMEM);
        assert_true(n < 10000);
    }
    /* Creating a channel with an initial state, under the same failures. */
    tn_cursor_t init;
    tn_cursor_init(&init, 7);
    for (long n = 0;; n++) {
        tn_alloc_fail_after(n);
        int rc = tn_chanlog_open(fx->store, "t", 1, "new", &init, &cl, &st);
        tn_alloc_fail_after(-1);
        if (rc == 0) {
            assert_int_equal(st.frontier, 7);
            tn_cursor_fini(&st);
            break;
        }
        assert_int_equal(rc, UV_ENOMEM);
        assert_true(n < 10000);
    }
    tn_cursor_fini(&init);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_records_survive_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_zero_tail_trimmed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoints_bound_the_wal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_checkpoint_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_wal_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_cut_back_survives_power_loss, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_crash_between_rename_and_truncate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_wal_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_isolates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_initial_delete_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_failure_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_submitted_completed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
