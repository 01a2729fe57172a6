/* Scrub on a real store in a temporary directory: clean sealed segments
 * (and the active one's synced records) give no errors and the bytes and
 * records add up; a flipped byte in a
 * sealed segment's record body is found (segment, byte position), the
 * partition is isolated as recovery isolates it and the others keep
 * working; a broken sidecar entry, or a sidecar's control record count
 * that the records deny, is reported without isolating; the rate
 * limit is honoured in its accounting (a fake clock: no timing); closing
 * cuts a run short and answers its waiter. */
#include "core/platform.h"

#include "testutil.h"

#include "core/crc32c.h"
#include "core/err.h"
#include "core/time.h"
#include "storage/scrub.h"
#include "storage/segment.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return plog;
}

/* n records in batches of 50 (fewer fdatasyncs than one by one). */
static void fill(fx_t *fx, tn_plog_t *plog, uint64_t n)
{
    static char bodies[50][512];
    tn_rec_in_t recs[50];
    for (uint64_t done = 0; done < n;) {
        uint32_t k = (uint32_t)TN_MIN(n - done, (uint64_t)50);
        for (uint32_t i = 0; i < k; i++) {
            size_t len = tu_body(done + i, bodies[i], sizeof(bodies[i]));
            recs[i] = (tn_rec_in_t){{NULL, 0}, tn_iov(bodies[i], len), 0};
        }
        uint64_t first;
        assert_int_equal(tu_append_batch(&fx->loop, plog, recs, k, &first), 0);
        assert_int_equal(first, done);
        done += k;
    }
}

/* What the sealed segments of plog hold: files' bytes (.log and .idx),
 * records, segments. */
typedef struct {
    uint64_t bytes;
    uint64_t records;
    uint64_t segments;
} sealed_t;

/* What a run checks of plog: its sealed segments and sidecars, and the
 * active segment's records (every one synced here). */
static void add_sealed(tn_plog_t *plog, sealed_t *t)
{
    for (uint32_t i = 0; i + 1 < plog->nsegs; i++) {
        tn_seg_t *seg = plog->segs[i];
        assert_true(seg->sealed);
        char idx[4200];
        snprintf(idx, sizeof(idx), "%.*s.idx", (int)(strlen(seg->path) - 4), seg->path);
        t->bytes += (uint64_t)tu_file_size(seg->path) + (uint64_t)tu_file_size(idx);
        t->records += seg->count;
        t->segments++;
    }
    tn_seg_t *act = plog->segs[plog->nsegs - 1];
    assert_int_equal(tn_plog_durable_next(plog), act->base + act->count);
    if (act->count > 0) {
        t->bytes += act->size;
        t->records += act->count;
        t->segments++;
    }
}

/* Byte position of the record of offset off in a segment file at base. */
static long rec_pos(const char *path, uint64_t base, uint64_t off)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    long pos = 0;
    for (uint64_t o = base;; o++) {
        unsigned char h[TN_REC_HDR];
        assert_int_equal(fseek(f, pos, SEEK_SET), 0);
        assert_int_equal(fread(h, 1, sizeof(h), f), sizeof(h));
        tn_rec_hdr_t hdr;
        assert_int_equal(tn_rec_decode_hdr(h, sizeof(h), &hdr), 0);
        assert_int_equal(hdr.offset, o);
        if (o == off)
            break;
        pos += (long)tn_rec_size(&hdr);
    }
    fclose(f);
    return pos;
}

/* --- running a scrub -------------------------------------------------------- */

typedef struct {
    bool done;
    tn_scrub_report_t rep;
} waited_t;

static void on_waited(tn_scrub_wait_t *w, const tn_scrub_report_t *rep)
{
    waited_t *x = w->data;
    x->rep = *rep;
    x->done = true;
}

/* Fast: the rate test sets its own. */
static const tn_scrub_opts_t fast = {1024ull * 1024 * 1024, 0, 0, NULL, NULL, NULL};

static void on_any_append(tn_append_t *req, int status)
{
    (void)req;
    (void)status;
    fail_msg("an append refused at once must not complete later");
}

/* One run to its end; the report into *out. */
static void scrub_once(fx_t *fx, const tn_scrub_opts_t *o, tn_scrub_report_t *out,
                       tn_scrub_counters_t *counters)
{
    tn_scrub_t *s = NULL;
    assert_int_equal(tn_scrub_new(&fx->loop, fx->store, o, &s), 0);
    uint64_t id = 0;
    bool started = false;
    tn_scrub_start(s, &id, &started);
    assert_true(started);
    assert_int_equal(id, 1);
    waited_t x = {0};
    tn_scrub_wait_t w = {.data = &x};
    tn_scrub_wait(s, &w, id, on_waited);
    while (!x.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    *out = x.rep;
    /* GET's view: the last run. */
    tn_scrub_report_t again;
    tn_scrub_report(s, &again);
    assert_int_equal(again.id, id);
    assert_int_equal(again.state, out->state);
    if (counters != NULL)
        tn_scrub_counters(s, counters);
    tn_scrub_close(s);
}

static void test_clean_segments(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    tn_plog_t *b = open_log(fx, "t", 1);
    fill(fx, a, 1200);
    fill(fx, b, 700);
    sealed_t want = {0};
    add_sealed(a, &want);
    add_sealed(b, &want);
    assert_true(want.segments >= 3);

    tn_scrub_report_t rep;
    tn_scrub_counters_t c;
    scrub_once(fx, &fast, &rep, &c);
    assert_int_equal(rep.state, TN_SCRUB_DONE);
    assert_false(rep.background);
    assert_int_equal(rep.errors_total, 0);
    assert_int_equal(rep.nerrors, 0);
    assert_int_equal(rep.partitions, 2);
    assert_int_equal(rep.segments, want.segments);
    assert_int_equal(rep.segments_skipped, 0);
    assert_int_equal(rep.records, want.records);
    assert_int_equal(rep.bytes, want.bytes);
    assert_true(rep.started_ms > 0 && rep.finished_ms >= rep.started_ms);
    assert_int_equal(c.runs, 1);
    assert_int_equal(c.bytes, want.bytes);
    assert_int_equal(c.records, want.records);
    assert_int_equal(c.errors, 0);
    assert_int_equal(c.last_success_ms, rep.finished_ms);
    assert_false(c.running);
    assert_int_equal(tn_plog_err(a), 0);
    assert_int_equal(tn_plog_err(b), 0);
}

static void test_flipped_byte_isolates(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    tn_plog_t *other = open_log(fx, "u", 0);
    fill(fx, a, 1200);
    fill(fx, other, 700);
    assert_true(a->nsegs >= 3);
    tn_seg_t *victim = a->segs[1]; /* sealed */
    uint64_t off = victim->base + 7;
    long pos = rec_pos(victim->path, victim->base, off);
    /* A byte of record off's body, behind the log's back. */
    FILE *f = fopen(victim->path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, pos + TN_REC_HDR + 3, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, pos + TN_REC_HDR + 3, SEEK_SET), 0);
    fputc(ch ^ 0x10, f);
    fclose(f);
    char victim_path[4096];
    snprintf(victim_path, sizeof(victim_path), "%s", victim->path);

    tn_scrub_report_t rep;
    scrub_once(fx, &fast, &rep, NULL);
    assert_int_equal(rep.state, TN_SCRUB_DONE);
    assert_int_equal(rep.errors_total, 1);
    assert_int_equal(rep.nerrors, 1);
    const tn_scrub_error_t *e = &rep.errors[0];
    assert_string_equal(e->topic, "t");
    assert_int_equal(e->partition, 0);
    assert_int_equal(e->segment, a->segs[1]->base);
    assert_string_equal(e->file, victim_path);
    assert_int_equal(e->pos, (uint64_t)pos);
    assert_int_equal(e->offset, off);
    assert_true(e->isolated);
    assert_non_null(strstr(e->what, "CRC mismatch"));

    /* Isolated as recovery isolates: the same error, message and refusals. */
    assert_int_equal(tn_plog_err(a), TN_ECORRUPT);
    assert_non_null(strstr(a->errmsg, "in a sealed segment"));
    assert_non_null(strstr(a->errmsg, victim_path));
    char at[64];
    snprintf(at, sizeof(at), "at byte %ld", pos);
    assert_non_null(strstr(a->errmsg, at));
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_plog_read(a, 0, &scratch, &rec), TN_ECORRUPT);
    tn_append_t req;
    tn_rec_in_t in = {{NULL, 0}, tn_iov("x", 1), 0};
    assert_int_equal(tn_plog_append(a, &req, &in, 1, on_any_append), TN_ECORRUPT);
    /* The other partition is fine. */
    assert_int_equal(tn_plog_err(other), 0);
    char body[512];
    size_t len = tu_body(3, body, sizeof(body));
    tu_expect_body(other, 3, body, len);
    tn_buf_fini(&scratch);

    /* A second run skips the isolated partition's segments. */
    scrub_once(fx, &fast, &rep, NULL);
    assert_int_equal(rep.errors_total, 0);
    assert_true(rep.segments_skipped >= 2);
}

/* Rewrite the sidecar of seg with entry i's position moved by delta,
 * CRCs made right again: only the check against the records can tell. */
static void break_entry(const tn_seg_t *seg, uint32_t i, int32_t delta, char *ipath, size_t len)
{
    snprintf(ipath, len, "%.*s.idx", (int)(strlen(seg->path) - 4), seg->path);
    long size = tu_file_size(ipath);
    assert_true(size > TN_SEG_IDX_HDR + 8 * (long)(i + 1));
    unsigned char *buf = malloc((size_t)size);
    assert_non_null(buf);
    FILE *f = fopen(ipath, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    unsigned char *e = buf + TN_SEG_IDX_HDR + i * 8;
    tn_put_u32(e + 4, (uint32_t)((int32_t)tn_get_u32(e + 4) + delta));
    tn_put_u32(buf + 52, tn_crc32c(0, buf + TN_SEG_IDX_HDR, (size_t)size - TN_SEG_IDX_HDR));
    tn_put_u32(buf + 4, tn_crc32c(0, buf + 8, TN_SEG_IDX_HDR - 8));
    tu_patch_file(ipath, 0, buf, (size_t)size);
    free(buf);
}

static void test_broken_index_entry(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    fill(fx, a, 1200);
    assert_true(a->nsegs >= 3);
    char ipath[4200];
    break_entry(a->segs[0], 2, 5, ipath, sizeof(ipath));

    tn_scrub_report_t rep;
    scrub_once(fx, &fast, &rep, NULL);
    assert_int_equal(rep.errors_total, 1);
    const tn_scrub_error_t *e = &rep.errors[0];
    assert_int_equal(e->segment, a->segs[0]->base);
    assert_string_equal(e->file, ipath);
    assert_int_equal(e->pos, TN_SEG_IDX_HDR + 2 * 8);
    assert_non_null(strstr(e->what, "index entry 2"));
    assert_true(e->offset != UINT64_MAX); /* the record it lands inside */
    assert_false(e->isolated);
    /* The sidecar is redundant: the partition keeps serving. */
    assert_int_equal(tn_plog_err(a), 0);

    /* A flipped byte that the entries' CRC catches. */
    unsigned char junk = 0x5A;
    tu_patch_file(ipath, TN_SEG_IDX_HDR + 8 * 3 + 1, &junk, 1);
    scrub_once(fx, &fast, &rep, NULL);
    assert_int_equal(rep.errors_total, 1);
    assert_non_null(strstr(rep.errors[0].what, "entries CRC mismatch"));
    assert_int_equal(rep.errors[0].offset, UINT64_MAX);
    assert_int_equal(tn_plog_err(a), 0);
}

/* A fake clock: sleeping moves it on. */
static _Atomic int64_t fake_ns;
static atomic_uint_fast64_t sleeps;

static int64_t fake_clock(void *arg)
{
    (void)arg;
    return atomic_load(&fake_ns);
}

static void fake_sleep(void *arg, int64_t ns)
{
    (void)arg;
    assert_true(ns > 0);
    atomic_fetch_add(&fake_ns, ns);
    atomic_fetch_add(&sleeps, 1);
}

static void test_rate_limit_accounting(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    fill(fx, a, 2000);
    sealed_t want = {0};
    add_sealed(a, &want);
    const uint64_t rate = 64 * 1024; /* the smallest scrub-rate */
    assert_true(want.bytes > 3 * rate);
    atomic_store(&fake_ns, 1000000000);
    atomic_store(&sleeps, 0);
    tn_scrub_opts_t o = {rate, 0, 0, fake_clock, fake_sleep, NULL};
    tn_scrub_report_t rep;
    scrub_once(fx, &o, &rep, NULL);
    assert_int_equal(rep.errors_total, 0);
    assert_int_equal(rep.bytes, want.bytes);
    int64_t elapsed = atomic_load(&fake_ns) - 1000000000;
    /* Everything past the first second's worth (the burst) was paid for
     * at the rate, and not much more: no timing, only the clock's sums. */
    int64_t least = (int64_t)((want.bytes - rate) * 1000000000ull / rate);
    int64_t most = (int64_t)(want.bytes * 1000000000ull / rate) + 1000000;
    assert_true(elapsed >= least);
    assert_true(elapsed <= most);
    assert_int_equal(rep.throttled_ns, elapsed);
    assert_true(atomic_load(&sleeps) > 0);
}

/* GC deleting segments while a run goes on: the clock hook holds the
 * scrubber right after it pinned the first segment and read its sidecar,
 * while the loop thread deletes every sealed segment. */
static uv_sem_t gc_paused, gc_go;
static atomic_int clock_calls;

static int64_t pausing_clock(void *arg)
{
    (void)arg;
    if (atomic_fetch_add(&clock_calls, 1) == 1) { /* 0: the run's start; 1: the first read */
        uv_sem_post(&gc_paused);
        uv_sem_wait(&gc_go);
    }
    return tn_now_mono_ns();
}

static void on_gc(tn_plog_gc_t *req, int status)
{
    assert_int_equal(status, 0);
    *(bool *)req->data = true;
}

static void test_gc_during_a_run(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    fill(fx, a, 1200);
    uint32_t sealed = a->nsegs - 1;
    assert_true(sealed >= 3);
    tn_seg_t *first = a->segs[0];
    char first_path[4096];
    snprintf(first_path, sizeof(first_path), "%s", first->path);
    uint64_t first_count = first->count;
    uint64_t active_count = a->segs[a->nsegs - 1]->count;
    assert_int_equal(uv_sem_init(&gc_paused, 0), 0);
    assert_int_equal(uv_sem_init(&gc_go, 0), 0);
    atomic_store(&clock_calls, 0);

    tn_scrub_opts_t o = fast;
    o.clock = pausing_clock;
    tn_scrub_t *s = NULL;
    assert_int_equal(tn_scrub_new(&fx->loop, fx->store, &o, &s), 0);
    uint64_t id;
    bool started;
    tn_scrub_start(s, &id, &started);
    uv_sem_wait(&gc_paused);
    /* The run holds the first segment: delete every sealed one. */
    tn_plog_gc_t gc;
    bool gc_done = false;
    gc.data = &gc_done;
    assert_int_equal(tn_plog_gc(a, &gc, tn_plog_written_next(a), 0, on_gc), 0);
    while (!gc_done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(gc.deleted, sealed);
    assert_int_equal(tu_file_size(first_path), -1); /* unlinked */
    uv_sem_post(&gc_go);

    waited_t x = {0};
    tn_scrub_wait_t w = {.data = &x};
    tn_scrub_wait(s, &w, id, on_waited);
    while (!x.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tn_scrub_close(s);
    uv_sem_destroy(&gc_paused);
    uv_sem_destroy(&gc_go);
    /* The pinned segment was read to its end from the open file; the
     * others were gone before their turn; the active one is checked. */
    assert_int_equal(x.rep.state, TN_SCRUB_DONE);
    assert_int_equal(x.rep.errors_total, 0);
    assert_int_equal(x.rep.segments, 2);
    assert_int_equal(x.rep.records, first_count + active_count);
    assert_int_equal(x.rep.segments_skipped, sealed - 1);
    assert_int_equal(tn_plog_err(a), 0);
}

static void test_bucket(void **state)
{
    (void)state;
    tn_scrub_bucket_t b;
    tn_scrub_bucket_init(&b, 1000, 500, 0);
    assert_int_equal(tn_scrub_bucket_take(&b, 500, 0), 0); /* the burst */
    int64_t w = tn_scrub_bucket_take(&b, 1000, 0);         /* a second's worth, owed */
    assert_true(w >= 1000000000 && w <= 1000000001);
    /* After paying, the next byte is due one ms later. */
    w = tn_scrub_bucket_take(&b, 1, 1000000000);
    assert_true(w >= 1000000 && w <= 1000001);
    /* A long idle time saves up no more than the burst. */
    assert_int_equal(tn_scrub_bucket_take(&b, 499, 100000000000), 0);
    assert_true(tn_scrub_bucket_take(&b, 2, 100000000000) > 0);
}

static void test_close_stops_a_run(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    fill(fx, a, 2000);
    /* The smallest rate, the real clock: the run would take seconds. */
    tn_scrub_opts_t o = {64 * 1024, 0, 0, NULL, NULL, NULL};
    tn_scrub_t *s = NULL;
    assert_int_equal(tn_scrub_new(&fx->loop, fx->store, &o, &s), 0);
    uint64_t id = 0;
    bool started = false;
    tn_scrub_start(s, &id, &started);
    assert_true(started);
    /* A second request while it goes on joins it. */
    uint64_t id2 = 0;
    tn_scrub_start(s, &id2, &started);
    assert_false(started);
    assert_int_equal(id2, id);
    waited_t x = {0};
    tn_scrub_wait_t w = {.data = &x};
    tn_scrub_wait(s, &w, id, on_waited);
    tn_scrub_close(s);
    assert_true(x.done);
    assert_int_equal(x.rep.id, id);
    assert_int_equal(x.rep.state, TN_SCRUB_STOPPED);
    assert_int_equal(tn_plog_err(a), 0);
}

static void test_bad_options(void **state)
{
    fx_t *fx = *state;
    tn_scrub_t *s = NULL;
    tn_scrub_opts_t o = {0, 0, 0, NULL, NULL, NULL};
    assert_int_equal(tn_scrub_new(&fx->loop, fx->store, &o, &s), UV_EINVAL);
    o.rate = 1;
    o.interval_ns = -1;
    assert_int_equal(tn_scrub_new(&fx->loop, fx->store, &o, &s), UV_EINVAL);
    assert_null(s);
}

/* Read a whole sidecar into a malloc'd buffer (*size its length). */
static unsigned char *read_idx(const tn_seg_t *seg, char *ipath, size_t len, long *size)
{
    snprintf(ipath, len, "%.*s.idx", (int)(strlen(seg->path) - 4), seg->path);
    *size = tu_file_size(ipath);
    assert_true(*size >= TN_SEG_IDX_HDR);
    unsigned char *buf = malloc((size_t)*size);
    assert_non_null(buf);
    FILE *f = fopen(ipath, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, (size_t)*size, f), (size_t)*size);
    fclose(f);
    return buf;
}

/* A TNI2 sidecar whose control record count disagrees with the segment's
 * records is reported (header CRC right: only the records can tell); a
 * TNI1 sidecar (older, no counts) is checked as before and passes. */
static void test_sidecar_control_count(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "t", 0);
    fill(fx, a, 1200);
    assert_true(a->nsegs >= 3);
    char ipath[4200];
    long size;
    unsigned char *buf = read_idx(a->segs[0], ipath, sizeof(ipath), &size);
    assert_int_equal(tn_get_u32(buf), TN_SEG_IDX_MAGIC);
    assert_int_equal(tn_get_u64(buf + 72), 0); /* no control record here */
    tn_put_u64(buf + 72, 2);
    tn_put_u32(buf + 4, tn_crc32c(0, buf + 8, TN_SEG_IDX_HDR - 8));
    tu_patch_file(ipath, 0, buf, (size_t)size);
    tn_scrub_report_t rep;
    scrub_once(fx, &fast, &rep, NULL);
    assert_int_equal(rep.errors_total, 1);
    assert_int_equal(rep.errors[0].pos, 72);
    assert_non_null(strstr(rep.errors[0].what, "says 2 control records; the segment has 0"));
    assert_false(rep.errors[0].isolated);
    assert_int_equal(tn_plog_err(a), 0);

    /* The same sidecar as TNI1: 64-byte header, entries right after. */
    tn_put_u64(buf + 72, 0);
    memmove(buf + TN_SEG_IDX_HDR_V1, buf + TN_SEG_IDX_HDR, (size_t)size - TN_SEG_IDX_HDR);
    size -= TN_SEG_IDX_HDR - TN_SEG_IDX_HDR_V1;
    tn_put_u32(buf, TN_SEG_IDX_MAGIC1);
    tn_put_u32(buf + 4, tn_crc32c(0, buf + 8, TN_SEG_IDX_HDR_V1 - 8));
    FILE *f = fopen(ipath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    free(buf);
    scrub_once(fx, &fast, &rep, NULL);
    assert_int_equal(rep.errors_total, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clean_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte_isolates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broken_index_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sidecar_control_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit_accounting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_during_a_run, setup, teardown),
        cmocka_unit_test(test_bucket),
        cmocka_unit_test_setup_teardown(test_close_stops_a_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_options, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
