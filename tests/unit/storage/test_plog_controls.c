/* The partition log's count of control records (plog.c, "control
 * records"): what tn_plog_controls_below and the stats' controls and
 * stored_controls say after appends (plain, forwarded batches with a
 * PRODUCER mark, epoch starts, a follower's raw copy), across segment
 * rolls, after a clean reopen and after crashes (a torn active tail, a
 * lost sidecar, a sidecar of the older TNI1 format), after retention (GC
 * and a drop floor) and after truncation. Every figure is checked against
 * a model: which offsets hold a control record. */
#include "core/platform.h"

#include "testutil.h"

#include "core/crc32c.h"
#include "core/err.h"
#include "storage/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef tu_fx_t fx_t;

#define MAXOFF 8192

/* Which offsets of the log under test hold a control record. */
typedef struct {
    bool ctl[MAXOFF];
    uint64_t end;
} model_t;

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

static tn_plog_t *open_log(fx_t *fx, const char *topic)
{
    tn_plog_t *plog = NULL;
    assert_int_equal(tn_plog_open(fx->store, topic, 0, &plog), 0);
    assert_int_equal(tn_plog_err(plog), 0);
    return plog;
}

typedef struct {
    tn_append_t req;
    bool done;
    int status;
} areq_t;

static void on_areq(tn_append_t *req, int status)
{
    areq_t *a = req->data;
    a->done = true;
    a->status = status;
}

static void run_until(uv_loop_t *loop, const bool *flag)
{
    while (!*flag)
        uv_run(loop, UV_RUN_ONCE);
}

static void begin_epoch(fx_t *fx, tn_plog_t *pl, model_t *m, uint32_t epoch)
{
    areq_t a = {0};
    a.req.data = &a;
    assert_int_equal(tn_plog_begin_epoch(pl, &a.req, epoch, on_areq), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);
    assert_int_equal(a.req.first_offset, m->end);
    m->ctl[m->end++] = true;
}

/* n plain records. */
static void append_n(fx_t *fx, tn_plog_t *pl, model_t *m, uint32_t n)
{
    char body[512];
    for (uint32_t i = 0; i < n; i++) {
        size_t len = tu_body(m->end, body, sizeof(body));
        uint64_t got;
        assert_int_equal(tu_append(&fx->loop, pl, body, len, &got), 0);
        assert_int_equal(got, m->end);
        m->ctl[m->end++] = false;
    }
}

/* A forwarded batch: a PRODUCER record, then n messages, one atomic batch. */
static void append_fwd(fx_t *fx, tn_plog_t *pl, model_t *m, uint32_t n)
{
    unsigned char prod[TN_CTRL_PRODUCER_SIZE];
    tn_ctrl_encode_producer(prod, 2, m->end, n);
    char bodies[8][512];
    tn_rec_in_t recs[9];
    assert_true(n <= 8);
    recs[0] = (tn_rec_in_t){.key = tn_iov(NULL, 0), .body = tn_iov(prod, sizeof(prod))};
    for (uint32_t i = 0; i < n; i++) {
        size_t len = tu_body(m->end + 1 + i, bodies[i], sizeof(bodies[i]));
        recs[1 + i] = (tn_rec_in_t){.key = tn_iov(NULL, 0), .body = tn_iov(bodies[i], len)};
    }
    areq_t a = {0};
    a.req.data = &a;
    assert_int_equal(tn_plog_append_ex(pl, &a.req, recs, n + 1, 1, on_areq), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);
    assert_int_equal(a.req.first_offset, m->end);
    m->ctl[m->end++] = true;
    for (uint32_t i = 0; i < n; i++)
        m->ctl[m->end++] = false;
}

/* A leader-shaped log across several 64 KiB segments: epoch starts,
 * plain records and forwarded batches. */
static void build_from(fx_t *fx, tn_plog_t *pl, model_t *m, uint32_t epoch)
{
    begin_epoch(fx, pl, m, epoch);
    append_n(fx, pl, m, 150);
    for (uint32_t i = 0; i < 60; i++)
        append_fwd(fx, pl, m, 1 + i % 5);
    begin_epoch(fx, pl, m, epoch + 1);
    append_n(fx, pl, m, 200);
    begin_epoch(fx, pl, m, epoch + 2);
    for (uint32_t i = 0; i < 120; i++)
        append_fwd(fx, pl, m, 1 + i % 7);
    append_n(fx, pl, m, 50);
    assert_true(m->end < MAXOFF / 2);
}

static void build(fx_t *fx, tn_plog_t *pl, model_t *m)
{
    build_from(fx, pl, m, 1);
}

static uint64_t model_below(const model_t *m, uint64_t off)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < off && i < m->end; i++)
        n += m->ctl[i];
    return n;
}

/* Whether the log's count below off is promised exact (plog.h): in the
 * active segment (and the one sealed before it while the log stays open:
 * those whose control offsets are listed), at a segment's bounds, at the
 * floor, past the end. */
static bool exact_at(tn_plog_t *pl, uint64_t off)
{
    const tn_seg_t *act = pl->segs[pl->nsegs - 1];
    assert_true(act->ctl_listed);
    if (off >= act->base || off == pl->floor || off <= pl->segs[0]->base)
        return true;
    for (uint32_t i = 0; i < pl->nsegs; i++) {
        const tn_seg_t *s = pl->segs[i];
        if (off == s->base || off == s->base + s->count ||
            (s->ctl_listed && off > s->base && off < s->base + s->count))
            return true;
    }
    return false;
}

/* Compare the log with the model; below is the count of control records
 * below the log's first segment that the log cannot know (0 unless a
 * test made it forget them). */
static void expect_counts(tn_plog_t *pl, const model_t *m, uint64_t unknown_below)
{
    tn_plog_stats_t st;
    tn_plog_stats(pl, &st);
    assert_int_equal(st.written_next, m->end);
    uint64_t total = model_below(m, m->end) - unknown_below;
    assert_int_equal(st.controls, total);
    assert_int_equal(st.stored_controls, total - (model_below(m, st.first_offset) - unknown_below));
    uint32_t checked = 0;
    for (uint64_t off = st.first_offset; off <= m->end + 2; off++) {
        if (!exact_at(pl, off))
            continue;
        uint64_t want = model_below(m, off) - unknown_below;
        uint64_t got = tn_plog_controls_below(pl, off);
        if (got != want) {
            for (uint32_t i = 0; i < pl->nsegs; i++)
                print_message(
                    "seg %u base %llu count %llu ctl_base %llu nctl %llu listed %d n %u first "
                    "%llu\n",
                    i, (unsigned long long)pl->segs[i]->base,
                    (unsigned long long)pl->segs[i]->count,
                    (unsigned long long)pl->segs[i]->ctl_base,
                    (unsigned long long)pl->segs[i]->nctl, pl->segs[i]->ctl_listed,
                    pl->segs[i]->nctl_offs,
                    (unsigned long long)(pl->segs[i]->nctl_offs ? pl->segs[i]->ctl_offs[0] : 0));
            fail_msg("controls below %llu: %llu, the model says %llu", (unsigned long long)off,
                     (unsigned long long)got, (unsigned long long)want);
        }
        checked++;
    }
    assert_true(checked > 0);
}

static void seg_file(fx_t *fx, const char *topic, uint64_t base, const char *ext, char *buf,
                     size_t len)
{
    snprintf(buf, len, "%s/topics/%s/0/%020llu.%s", fx->dir, topic, (unsigned long long)base, ext);
}

/* --- tests ------------------------------------------------------------------------ */

static void test_counts_and_reopen(void **state)
{
    fx_t *fx = *state;
    model_t *m = calloc(1, sizeof(*m));
    tn_plog_t *pl = open_log(fx, "c");
    build(fx, pl, m);
    assert_true(pl->nsegs >= 4);
    expect_counts(pl, m, 0);
    /* Messages among [a, b), as the doors compute them. */
    uint64_t msgs = m->end - tn_plog_controls_below(pl, m->end);
    assert_int_equal(msgs, m->end - 3 - 180);
    tu_fx_reopen(fx);
    pl = open_log(fx, "c");
    expect_counts(pl, m, 0);
    /* Appends after the reopen go on counting, across a roll. */
    append_n(fx, pl, m, 10);
    begin_epoch(fx, pl, m, 4);
    for (uint32_t i = 0; i < 80; i++)
        append_fwd(fx, pl, m, 3);
    expect_counts(pl, m, 0);
    tu_fx_reopen(fx);
    pl = open_log(fx, "c");
    expect_counts(pl, m, 0);
    /* A factor-1 log counts none. */
    tn_plog_t *plain = open_log(fx, "plain");
    model_t *pm = calloc(1, sizeof(*pm));
    append_n(fx, plain, pm, 400);
    expect_counts(plain, pm, 0);
    assert_int_equal(tn_plog_controls_below(plain, 400), 0);
    free(pm);
    free(m);
}

/* Crashes: a torn active tail, a sealed segment whose sidecar was lost,
 * and one whose sidecar has the older TNI1 format (no counts). */
static void test_counts_after_crash(void **state)
{
    fx_t *fx = *state;
    model_t *m = calloc(1, sizeof(*m));
    tn_plog_t *pl = open_log(fx, "k");
    build(fx, pl, m);
    assert_true(pl->nsegs >= 4);
    uint64_t s1 = pl->segs[1]->base, s2 = pl->segs[2]->base;
    /* A forwarded batch last, torn by the crash: its PRODUCER record
     * goes with it. */
    append_fwd(fx, pl, m, 4);
    uint64_t batch_first = m->end - 5;
    uint64_t act_base = pl->segs[pl->nsegs - 1]->base;
    assert_true(batch_first > act_base);
    tu_fx_reopen(fx); /* closes the store: the log with it */

    char path[4096];
    seg_file(fx, "k", act_base, "log", path, sizeof(path));
    long size = tu_file_size(path);
    tu_truncate_file(path, size - 40); /* inside the batch's last record */
    m->end = batch_first;              /* the whole batch goes */
    seg_file(fx, "k", s1, "idx", path, sizeof(path));
    assert_int_equal(unlink(path), 0);

    /* Segment s2's sidecar rewritten as TNI1: 64-byte header, no counts. */
    seg_file(fx, "k", s2, "idx", path, sizeof(path));
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(n >= TN_SEG_IDX_HDR && n < sizeof(buf));
    assert_int_equal(tn_get_u32(buf), TN_SEG_IDX_MAGIC);
    assert_true(tn_get_u64(buf + 72) > 0); /* it holds control records */
    memmove(buf + TN_SEG_IDX_HDR_V1, buf + TN_SEG_IDX_HDR, n - TN_SEG_IDX_HDR);
    n -= TN_SEG_IDX_HDR - TN_SEG_IDX_HDR_V1;
    tn_put_u32(buf, TN_SEG_IDX_MAGIC1);
    memset(buf + 56, 0, 8);
    tn_put_u32(buf + 4, tn_crc32c(0, buf + 8, TN_SEG_IDX_HDR_V1 - 8));
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);

    pl = open_log(fx, "k");
    assert_int_equal(tn_plog_written_next(pl), m->end);
    expect_counts(pl, m, 0);
    /* Both sidecars are TNI2 again, with the right figures. */
    tu_fx_reopen(fx);
    for (int i = 0; i < 2; i++) {
        seg_file(fx, "k", i == 0 ? s1 : s2, "idx", path, sizeof(path));
        f = fopen(path, "rb");
        assert_non_null(f);
        assert_true(fread(buf, 1, TN_SEG_IDX_HDR, f) == TN_SEG_IDX_HDR);
        fclose(f);
        assert_int_equal(tn_get_u32(buf), TN_SEG_IDX_MAGIC);
        uint64_t base = tn_get_u64(buf + 8), count = tn_get_u64(buf + 16);
        assert_int_equal(tn_get_u64(buf + 64), model_below(m, base));
        assert_int_equal(tn_get_u64(buf + 72), model_below(m, base + count) - model_below(m, base));
    }
    pl = open_log(fx, "k");
    expect_counts(pl, m, 0);
    append_fwd(fx, pl, m, 2);
    expect_counts(pl, m, 0);
    free(m);
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

/* Retention: GC drops segments with their control records (stored counts
 * go down, the count below the log end does not), and a drop floor inside
 * an older segment is counted exactly, before and after a reopen. */
static void test_counts_after_retention(void **state)
{
    fx_t *fx = *state;
    model_t *m = calloc(1, sizeof(*m));
    tn_plog_t *pl = open_log(fx, "r");
    build(fx, pl, m);
    build_from(fx, pl, m, 4);
    assert_true(pl->nsegs >= 7);
    tn_plog_stats_t before;
    tn_plog_stats(pl, &before);

    tn_plog_gc_t gc;
    bool done = false;
    gc.data = &done;
    uint64_t gc_below = pl->segs[2]->base + pl->segs[2]->count;
    assert_int_equal(tn_plog_gc(pl, &gc, gc_below, 0, on_gc), 0);
    run_until(&fx->loop, &done);
    assert_int_equal(gc.deleted, 3);
    tn_plog_stats_t st;
    tn_plog_stats(pl, &st);
    assert_int_equal(st.first_offset, gc_below);
    assert_int_equal(st.controls, before.controls);
    assert_true(st.stored_controls < before.stored_controls);
    expect_counts(pl, m, 0);

    /* A floor inside the (now) first segment, which is neither of the
     * last two: its control records below the floor are counted. */
    assert_true(pl->nsegs >= 4);
    const tn_seg_t *first = pl->segs[0];
    uint64_t floor = first->base + first->count / 2;
    while (floor < first->base + first->count && !m->ctl[floor - 1])
        floor++; /* just past a control record: the interesting case */
    assert_true(floor < first->base + first->count);
    tn_plog_floor_t fr;
    bool fdone = false;
    fr.data = &fdone;
    assert_int_equal(tn_plog_drop_below(pl, &fr, floor, on_floor), 0);
    run_until(&fx->loop, &fdone);
    tn_plog_stats(pl, &st);
    assert_int_equal(st.first_offset, floor);
    assert_int_equal(st.stored_controls, model_below(m, m->end) - model_below(m, floor));
    expect_counts(pl, m, 0);
    tu_fx_reopen(fx);
    pl = open_log(fx, "r");
    tn_plog_stats(pl, &st);
    assert_int_equal(st.first_offset, floor);
    assert_int_equal(st.controls, before.controls);
    assert_int_equal(st.stored_controls, model_below(m, m->end) - model_below(m, floor));
    expect_counts(pl, m, 0);
    free(m);
}

static void on_trunc(tn_plog_trunc_t *req, int status)
{
    areq_t *a = req->data;
    a->done = true;
    a->status = status;
}

/* Truncation into an older segment: the counts follow the cut, before and
 * after a reopen, and appends after it count on. */
static void test_counts_after_truncate(void **state)
{
    fx_t *fx = *state;
    model_t *m = calloc(1, sizeof(*m));
    tn_plog_t *pl = open_log(fx, "t");
    build(fx, pl, m);
    assert_true(pl->nsegs >= 4);
    const tn_seg_t *s = pl->segs[1];
    /* A batch boundary inside segment 1: a record that ends its batch. */
    uint64_t cut = s->base + s->count / 2;
    while (m->ctl[cut] == false && cut < s->base + s->count)
        cut++; /* a PRODUCER record starts a batch */
    assert_true(m->ctl[cut]);
    tn_plog_trunc_t req;
    areq_t a = {0};
    req.data = &a;
    assert_int_equal(tn_plog_truncate(pl, &req, cut, 0, on_trunc), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);
    m->end = cut;
    expect_counts(pl, m, 0);
    begin_epoch(fx, pl, m, 7);
    append_fwd(fx, pl, m, 3);
    expect_counts(pl, m, 0);
    tu_fx_reopen(fx);
    pl = open_log(fx, "t");
    expect_counts(pl, m, 0);
    free(m);
}

/* A follower's raw copy counts the leader's control records as they are
 * written, across its own segment rolls; its reset (a truncation below its
 * first offset) counts from the new start. */
static void test_counts_of_a_copy(void **state)
{
    fx_t *fx = *state;
    model_t *m = calloc(1, sizeof(*m));
    tn_plog_t *leader = open_log(fx, "lead");
    build(fx, leader, m);
    tn_plog_t *f = open_log(fx, "follow");
    tn_buf_t b;
    tn_buf_init(&b);
    for (;;) {
        uint64_t from = tn_plog_written_next(f);
        uint32_t n;
        tn_buf_reset(&b);
        assert_int_equal(tn_plog_read_raw(leader, from, 3000, &b, &n), 0);
        if (n == 0)
            break;
        tn_epoch_entry_t e[8];
        uint32_t ne = tn_plog_epochs_range(leader, from, from + n, e, 8);
        areq_t a = {0};
        a.req.data = &a;
        assert_int_equal(
            tn_plog_append_raw(f, &a.req, tn_buf_data(&b), tn_buf_size(&b), from, e, ne, on_areq),
            0);
        run_until(&fx->loop, &a.done);
        assert_int_equal(a.status, 0);
    }
    tn_buf_fini(&b);
    while (tn_plog_durable_next(f) < tn_plog_written_next(f))
        uv_sleep(1);
    expect_counts(f, m, 0);
    tu_fx_reopen(fx);
    f = open_log(fx, "follow");
    expect_counts(f, m, 0);

    /* A reset to an offset below its first: counted from there on. */
    tn_plog_gc_t gc;
    bool done = false;
    gc.data = &done;
    assert_int_equal(tn_plog_gc(f, &gc, f->segs[1]->base, 0, on_gc), 0);
    run_until(&fx->loop, &done);
    uint64_t first = f->segs[0]->base;
    assert_true(first > 10);
    tn_plog_trunc_t req;
    areq_t a = {0};
    req.data = &a;
    assert_int_equal(tn_plog_truncate(f, &req, first - 10, 0, on_trunc), 0);
    run_until(&fx->loop, &a.done);
    assert_int_equal(a.status, 0);
    tn_plog_stats_t st;
    tn_plog_stats(f, &st);
    assert_int_equal(st.written_next, first - 10);
    assert_int_equal(st.controls, 0);
    assert_int_equal(st.stored_controls, 0);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counts_after_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counts_after_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counts_after_truncate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counts_of_a_copy, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
