/* The partition log: appends and reads across segment boundaries, reopen
 * through sidecars, index rebuilds, torn tails, corruption isolation,
 * durability modes, sticky failures, GC, disk watermarks and allocation
 * failures. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/time.h"
#include "storage/io.h"

#include <dirent.h>
#include <inttypes.h>
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
    return plog;
}

static void append_n(fx_t *fx, tn_plog_t *plog, uint64_t from, uint64_t n)
{
    char body[512];
    for (uint64_t i = from; i < from + n; i++) {
        size_t len = tu_body(i, body, sizeof(body));
        uint64_t off;
        assert_int_equal(tu_append(&fx->loop, plog, body, len, &off), 0);
        assert_int_equal(off, i);
    }
}

static void expect_all(tn_plog_t *plog, uint64_t from, uint64_t n)
{
    char body[512];
    for (uint64_t i = from; i < from + n; i++) {
        size_t len = tu_body(i, body, sizeof(body));
        tu_expect_body(plog, i, body, len);
    }
}

static uint32_t count_files(const char *dir, const char *ext)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    uint32_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name), el = strlen(ext);
        n += l > el && strcmp(e->d_name + l - el, ext) == 0;
    }
    closedir(d);
    return n;
}

static void test_append_read_roll(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "orders", 0);
    assert_int_equal(tn_plog_written_next(plog), 0);
    append_n(fx, plog, 0, 1500); /* ~300 KiB: several 64 KiB segments */
    assert_int_equal(tn_plog_written_next(plog), 1500);
    assert_int_equal(tn_plog_durable_next(plog), 1500);
    assert_int_equal(tn_plog_visible_next(plog), 1500);
    tn_plog_stats_t st;
    tn_plog_stats(plog, &st);
    assert_true(st.segments >= 4);
    expect_all(plog, 0, 1500);
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_plog_read(plog, 1500, &scratch, &rec), TN_ENOTFOUND);
    tn_buf_fini(&scratch);

    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/orders/0", fx->dir);
    /* Every sealed segment has its sidecar. */
    assert_int_equal(count_files(dir, ".idx"), st.segments - 1);
    assert_int_equal(count_files(dir, ".log"), st.segments);
}

/* tn_plog_bytes_from (a move's progress): all of the log at or below its
 * start, nothing at its end, never growing with the offset, and close to
 * the bytes a raw read from there returns (within an index interval and a
 * record: the sparse index, or the mean record size where a sealed
 * segment's index is not loaded). */
static void test_bytes_from(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "sizes", 0);
    append_n(fx, plog, 0, 1500); /* several 64 KiB segments */
    tn_plog_stats_t st;
    tn_plog_stats(plog, &st);
    assert_true(st.segments >= 4);
    assert_int_equal(tn_plog_bytes_from(plog, 0), st.bytes);
    assert_int_equal(tn_plog_bytes_from(plog, 1500), 0);
    assert_int_equal(tn_plog_bytes_from(plog, 99999), 0);
    uint64_t prev = st.bytes;
    tn_buf_t raw;
    tn_buf_init(&raw);
    for (uint64_t off = 0; off <= 1500; off += 37) {
        uint64_t b = tn_plog_bytes_from(plog, off);
        assert_true(b <= prev);
        prev = b;
        uint32_t n = 0;
        tn_buf_reset(&raw);
        assert_int_equal(tn_plog_read_raw(plog, off, SIZE_MAX, &raw, &n) == 0 || off == 1500, 1);
        uint64_t exact = off < 1500 ? tn_buf_size(&raw) : 0;
        uint64_t diff = b > exact ? b - exact : exact - b;
        if (diff > 4096 + 600)
            fail_msg("offset %" PRIu64 ": %" PRIu64 " bytes from it, %" PRIu64 " read", off, b,
                     exact);
    }
    tn_buf_fini(&raw);
}

static void test_batch_keys_and_deliver_at(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "batch", 0);
    tn_rec_in_t recs[3] = {
        {tn_iov("k1", 2), tn_iov("first", 5), 0},
        {{NULL, 0}, tn_iov("second", 6), 1700000000000LL},
        {tn_iov("key-three", 9), {NULL, 0}, 0},
    };
    uint64_t first;
    assert_int_equal(tu_append_batch(&fx->loop, plog, recs, 3, &first), 0);
    assert_int_equal(first, 0);
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_plog_read(plog, 0, &scratch, &rec), 0);
    assert_int_equal(rec.h.key_len, 2);
    assert_memory_equal(rec.key, "k1", 2);
    assert_int_equal(rec.h.flags, TN_REC_F_MORE);
    assert_int_equal(tn_plog_read(plog, 1, &scratch, &rec), 0);
    assert_int_equal(rec.h.deliver_at_ms, 1700000000000LL);
    assert_int_equal(tn_plog_read(plog, 2, &scratch, &rec), 0);
    assert_int_equal(rec.h.flags, 0);
    assert_int_equal(rec.h.body_len, 0);
    assert_memory_equal(rec.key, "key-three", 9);
    assert_true(rec.h.publish_ns > 0);
    tn_buf_fini(&scratch);

    /* Refused at once: empty batch, oversize body, oversize key. */
    tn_append_t req;
    assert_int_equal(tn_plog_append(plog, &req, recs, 0, NULL), UV_EINVAL);
    static char big[1024 * 1024 + 1];
    tn_rec_in_t huge = {{NULL, 0}, tn_iov(big, sizeof(big)), 0};
    assert_int_equal(tu_append_batch(&fx->loop, plog, &huge, 1, NULL), TN_ETOOBIG);
    tn_rec_in_t bigkey = {tn_iov(big, 65536), tn_iov("x", 1), 0};
    assert_int_equal(tu_append_batch(&fx->loop, plog, &bigkey, 1, NULL), TN_ETOOBIG);
}

static void test_reopen_uses_sidecars(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 3);
    append_n(fx, plog, 0, 1200);
    tu_fx_reopen(fx);
    plog = open_log(fx, "t", 3);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), 1200);
    /* Sealed segments are not scanned at open: their indexes load lazily. */
    assert_false(plog->segs[0]->idx_loaded);
    expect_all(plog, 0, 1200);
    assert_true(plog->segs[0]->idx_loaded);
    append_n(fx, plog, 1200, 100);
    expect_all(plog, 1150, 150);
}

static void test_missing_and_bad_index_rebuilt(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 1000);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.idx", fx->dir);
    assert_int_equal(unlink(path), 0);
    /* Damage the second segment's sidecar. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/t/0", fx->dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    char second[8192] = "";
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, ".idx") && strcmp(e->d_name, "00000000000000000000.idx") != 0 &&
            (second[0] == '\0' || strcmp(e->d_name, strrchr(second, '/') + 1) < 0))
            snprintf(second, sizeof(second), "%s/%s", dir, e->d_name);
    }
    closedir(d);
    assert_true(second[0] != '\0');
    unsigned char junk[4] = {1, 2, 3, 4};
    tu_patch_file(second, 30, junk, 4);

    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_true(tu_file_size(path) > 0); /* rewritten */
    expect_all(plog, 0, 1000);
}

static void test_torn_tail_truncated_on_reopen(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 10);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.log", fx->dir);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    long full = tu_file_size(path);   /* closing cut the zeros ahead off */
    tu_truncate_file(path, full - 3); /* tear the 10th record */
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), 9);
    assert_true(tu_file_size(path) < full - 3);
    expect_all(plog, 0, 9);
    append_n(fx, plog, 9, 5); /* offset 9 is written again */
    expect_all(plog, 0, 14);
}

static void on_any_append(tn_append_t *req, int status)
{
    (void)req;
    (void)status;
    fail_msg("an append refused at once must not complete later");
}

static void test_corrupt_sealed_segment_isolates(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 600);
    tn_plog_t *other = open_log(fx, "u", 0);
    append_n(fx, other, 0, 5);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.idx", fx->dir);
    unlink(path); /* force a scan of the first segment */
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.log", fx->dir);
    unsigned char junk = 0xEE;
    tu_patch_file(path, 200, &junk, 1);

    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);
    assert_non_null(strstr(plog->errmsg, "sealed segment"));
    tn_append_t req;
    tn_rec_in_t rec = {{NULL, 0}, tn_iov("x", 1), 0};
    assert_int_equal(tn_plog_append(plog, &req, &rec, 1, on_any_append), TN_ECORRUPT);
    /* Other partitions are unaffected. */
    other = open_log(fx, "u", 0);
    assert_int_equal(tn_plog_err(other), 0);
    expect_all(other, 0, 5);
}

static void test_corruption_found_by_read_is_sticky(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 20);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.log", fx->dir);
    unsigned char junk = 0x01;
    /* Flip a byte inside record 5's body behind the log's back. */
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_plog_read(plog, 5, &scratch, &rec), 0);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < 5; i++) {
        char body[512];
        pos += TN_REC_HDR + tu_body(i, body, sizeof(body));
    }
    unsigned char b;
    size_t n;
    int fd;
    assert_int_equal(tn_io_open(path, O_RDWR, 0, &fd), 0);
    assert_int_equal(tn_io_pread(fd, &b, 1, pos + TN_REC_HDR + 1, &n), 0);
    b ^= junk;
    assert_int_equal(tn_io_pwrite(fd, &b, 1, pos + TN_REC_HDR + 1), 0);
    tn_io_close(fd);
    assert_int_equal(tn_plog_read(plog, 5, &scratch, &rec), TN_ECORRUPT);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);
    assert_int_equal(tn_plog_read(plog, 4, &scratch, &rec), TN_ECORRUPT);
    tn_buf_fini(&scratch);
    assert_int_equal(tu_append(&fx->loop, plog, "x", 1, NULL), TN_ECORRUPT);
}

static bool file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Damage a read finds in the active segment's last batch (nothing synced
 * after it: recovery alone would cut it as a torn tail, acknowledged
 * records included): the damage record is on disk by the time the read
 * answers, and a reopen isolates the log with nothing cut. Moving the
 * segment aside, even the only one, drops the record at the next open,
 * and it isolates nothing after. */
static void test_active_damage_found_by_read_recorded(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 5);
    char bodies[5][512];
    tn_rec_in_t recs[5];
    for (uint64_t i = 0; i < 5; i++) {
        size_t len = tu_body(5 + i, bodies[i], sizeof(bodies[i]));
        recs[i] = (tn_rec_in_t){{NULL, 0}, tn_iov(bodies[i], len), 0};
    }
    uint64_t first;
    assert_int_equal(tu_append_batch(&fx->loop, plog, recs, 5, &first), 0);
    assert_int_equal(first, 5);
    char path[4096], dmg[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.log", fx->dir);
    snprintf(dmg, sizeof(dmg), "%s/topics/t/0/damage", fx->dir);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < 7; i++) {
        char body[512];
        pos += TN_REC_HDR + tu_body(i, body, sizeof(body));
    }
    unsigned char junk = 0x5A;
    tu_patch_file(path, (long)(pos + TN_REC_HDR + 1), &junk, 1); /* record 7's body */
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_false(file_exists(dmg));
    assert_int_equal(tn_plog_read(plog, 7, &scratch, &rec), TN_ECORRUPT);
    assert_true(file_exists(dmg)); /* before the read answered */
    tn_buf_fini(&scratch);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);

    tu_fx_reopen(fx);
    long size = tu_file_size(path);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);
    assert_non_null(strstr(plog->errmsg, "found damaged before the restart"));
    uint64_t base = 1, end = 0;
    assert_true(tn_plog_damage(plog, &base, &end));
    assert_int_equal(base, 0);
    assert_true(end == TN_PLOG_DAMAGE_ACTIVE);
    assert_int_equal(tu_file_size(path), size); /* nothing cut */
    assert_int_equal(tn_plog_written_next(plog), 5);
    tu_fx_reopen(fx); /* and again */
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);
    assert_int_equal(tu_file_size(path), size);

    /* The operator moves the only segment aside. */
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    char aside[4096];
    snprintf(aside, sizeof(aside), "%s/aside.log", fx->dir);
    assert_int_equal(rename(path, aside), 0);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_false(file_exists(dmg));
    tu_fx_reopen(fx);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    append_n(fx, plog, 0, 3);
    expect_all(plog, 0, 3);
}

static void test_fsync_failure_is_sticky(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 3);
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(tu_append(&fx->loop, plog, "lost", 4, NULL), UV_EIO);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_plog_err(plog), UV_EIO);
    assert_non_null(strstr(plog->errmsg, "fdatasync"));
    /* Never retried: later appends fail at once though fsync works again. */
    assert_int_equal(tu_append(&fx->loop, plog, "y", 1, NULL), UV_EIO);
    assert_int_equal(tn_plog_durable_next(plog), 3);
}

/* A crash leaves the zeros written ahead of the records: recovery cuts
 * them off without calling it damage, and appends go on after the last
 * record. */
static void test_zero_tail_trimmed_on_reopen(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 10);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.log", fx->dir);
    /* Zeros ahead while open, up to the segment size limit. */
    assert_int_equal(tu_file_size(path), (long)fx->opts.segment_bytes);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    long full = tu_file_size(path);
    assert_true(full < 4096);
    static const unsigned char zeros[70000];
    tu_patch_file(path, full, zeros, sizeof(zeros)); /* what a crash leaves */
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), 10);
    assert_int_equal(tu_file_size(path), full);
    append_n(fx, plog, 10, 5);
    expect_all(plog, 0, 15);
}

static void on_abandoned(tn_plog_t *plog)
{
    *(bool *)plog->data = true;
}

/* Two objects of one partition (a replicated partition's log the engine
 * set aside, and the replica manager's own, cluster/replica.c): the first
 * preallocated its segment and stopped; the second wrote past it. The
 * first, stale, is abandoned: its close must not trim the segment to the
 * size it knows (tn_plog_close would cut the second's records). */
static void test_abandon_keeps_the_files(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *stale = open_log(fx, "ab", 0);
    append_n(fx, stale, 0, 10);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/ab/0/00000000000000000000.log", fx->dir);
    assert_int_equal(tu_file_size(path), (long)fx->opts.segment_bytes); /* zeros ahead */
    tn_plog_t *own = open_log(fx, "ab", 0);
    assert_int_equal(tn_plog_written_next(own), 10);
    append_n(fx, own, 10, 5);
    assert_int_equal(tn_plog_written_next(stale), 10); /* it never looks again */
    bool done = false;
    stale->data = &done;
    tn_plog_abandon(stale, on_abandoned);
    while (!done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    expect_all(own, 0, 15);
    tu_plog_close(&fx->loop, own);
    tn_plog_t *again = open_log(fx, "ab", 0);
    assert_int_equal(tn_plog_err(again), 0);
    assert_int_equal(tn_plog_written_next(again), 15);
    expect_all(again, 0, 15);
}

/* Zeros that cannot be written (a full disk) cost only the speed-up: the
 * append goes on at the end of the records. */
static void test_zero_write_failure_falls_back(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    tn_io_fail_write_after(0, UV_ENOSPC); /* the zeros */
    append_n(fx, plog, 0, 1);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_plog_err(plog), 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/t/0/00000000000000000000.log", fx->dir);
    long one = tu_file_size(path);
    assert_true(one > TN_REC_HDR && one < 100); /* no zeros after the record */
    append_n(fx, plog, 1, 3);
    expect_all(plog, 0, 4);
}

static void test_write_failure_is_sticky(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    tn_io_fail_write_after(1, UV_EIO); /* the records, after the zeros */
    assert_int_equal(tu_append(&fx->loop, plog, "x", 1, NULL), UV_EIO);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_plog_err(plog), UV_EIO);
    assert_int_equal(tu_append(&fx->loop, plog, "x", 1, NULL), UV_EIO);
}

/* A publish's write that finds the disk full fails alone: the log keeps
 * what it had, gives the offsets back, and takes the next append. */
static void test_full_disk_write_is_not_sticky(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, 2);
    tn_io_fail_write_after(0, UV_ENOSPC); /* the records (zeros written ahead) */
    assert_int_equal(tu_append(&fx->loop, plog, "x", 1, NULL), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), 2);
    append_n(fx, plog, 2, 3);
    expect_all(plog, 0, 5);
    tu_plog_close(&fx->loop, plog);
    tn_plog_t *again = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(again), 0);
    assert_int_equal(tn_plog_written_next(again), 5);
    expect_all(again, 0, 5);
}

static int round_left;
static int round_status;
static void on_round_append(tn_append_t *req, int status)
{
    (void)req;
    round_left--;
    if (status != 0)
        round_status = status;
}

/* n publishes of one record each that one round writes (each its own
 * batch): a publish first, whose round's fdatasync is made slow, then the
 * n once its record is written, so that they wait for the next round
 * together. The last error, or 0. */
static int append_round(fx_t *fx, tn_plog_t *plog, int n)
{
    tn_append_t reqs[9];
    tn_rec_in_t rec = {{NULL, 0}, tn_iov("body", 4), 0};
    assert_true(n < 9);
    round_left = n + 1;
    round_status = 0;
    uint64_t next = tn_plog_written_next(plog);
    tn_io_delay_sync(100 * 1000 * 1000);
    assert_int_equal(tn_plog_append(plog, &reqs[n], &rec, 1, on_round_append), 0);
    while (tn_plog_written_next(plog) == next)
        uv_sleep(1);
    for (int i = 0; i < n; i++)
        assert_int_equal(tn_plog_append(plog, &reqs[i], &rec, 1, on_round_append), 0);
    while (round_left > 0)
        uv_run(&fx->loop, UV_RUN_ONCE);
    tn_io_delay_sync(0);
    return round_status;
}

/* A publish's write that finds the disk full partway (its first records
 * written, then ENOSPC) and is cut back: a power cut right after it was
 * answered with the error leaves none of its records in the log, whatever
 * the disk kept of the unsynced write (the cut is synced before the
 * answer). Before, the cut was not synced: under some seeds the first
 * records came back, a publish answered with the error delivered. */
static void test_full_disk_cut_back_survives_power_loss(void **state)
{
    fx_t *fx = *state;
    int resurrected = 0;
    for (int seed = 0; seed < 24; seed++) {
        char topic[16];
        snprintf(topic, sizeof(topic), "p%d", seed);
        assert_int_equal(tn_io_sim_start(fx->dir), 0);
        tn_plog_t *plog = open_log(fx, topic, 0);
        append_n(fx, plog, 0, 2);
        /* Two of the five publishes of the second round reach the file,
         * then the disk is full (a publish's records are one batch, which
         * recovery keeps whole or not at all: only a round of several
         * publishes can). */
        tn_io_fail_write_partial(1, UV_ENOSPC, 2 * (TN_REC_HDR + 4));
        assert_int_equal(append_round(fx, plog, 5), UV_ENOSPC);
        tn_io_fail_write_after(-1, 0);
        assert_int_equal(tn_plog_err(plog), 0);
        tn_io_sim_cut();
        tu_plog_close(&fx->loop, plog);
        assert_int_equal(tn_io_sim_powerloss((uint64_t)seed * 7919 + 3), 0);
        plog = open_log(fx, topic, 0);
        assert_int_equal(tn_plog_err(plog), 0);
        if (tn_plog_written_next(plog) != 3) {
            printf("seed %d: %" PRIu64 " records after the power cut (3..7 were refused)\n", seed,
                   tn_plog_written_next(plog));
            resurrected++;
        }
        tu_plog_close(&fx->loop, plog);
    }
    assert_int_equal(resurrected, 0);
    /* That sync is never retried: its failure is sticky. */
    tn_plog_t *plog = open_log(fx, "sync", 0);
    append_n(fx, plog, 0, 1);
    tn_io_fail_write_partial(1, UV_ENOSPC, TN_REC_HDR);
    tn_io_fail_sync_after(1, UV_EIO);
    assert_int_equal(append_round(fx, plog, 2), UV_ENOSPC);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_plog_err(plog), UV_EIO);
}

/* The append (by its offset) that rolls a log fed by append_n: found on
 * a log of its own, the same for every log of the fixture. */
static uint64_t roll_point(fx_t *fx)
{
    tn_plog_t *probe = open_log(fx, "probe", 0);
    uint64_t k = 0;
    while (probe->nsegs == 1)
        append_n(fx, probe, k++, 1);
    return k - 1;
}

/* A roll that finds the disk full (the sealed segment's sidecar, or the
 * next segment's file, cannot be written), or no descriptor for one of
 * them (EMFILE, ENFILE), fails that append alone: the
 * old segment stays the active one, and the next round rolls. An fsync
 * that fails at the seal stays sticky. */
static void test_full_disk_roll_is_not_sticky(void **state)
{
    fx_t *fx = *state;
    uint64_t k = roll_point(fx);
    tn_plog_t *plog = open_log(fx, "t", 0);
    append_n(fx, plog, 0, k);
    char dir[4096], body[512];
    snprintf(dir, sizeof(dir), "%s/topics/t/0", fx->dir);
    size_t len = tu_body(k, body, sizeof(body));
    /* 1. The sidecar's write; 2. the next segment's create (after the
     * sidecar's); 3. a quota, at the sidecar; 4. no descriptor left for
     * the sidecar's temporary file; 5. nor in the system for the next
     * segment's. */
    const int wants[] = {0, UV_ENOSPC, UV_ENOSPC, -EDQUOT, UV_EMFILE, UV_ENFILE};
    for (int step = 1; step <= 5; step++) {
        int want = wants[step];
        if (step == 2 || step == 5)
            tn_io_fail_create_after(1, want);
        else if (step == 4)
            tn_io_fail_create_after(0, want);
        else
            tn_io_fail_write_after(0, want);
        assert_int_equal(tu_append(&fx->loop, plog, body, len, NULL), want);
        tn_io_fail_write_after(-1, 0);
        tn_io_fail_create_after(-1, 0);
        assert_int_equal(tn_plog_err(plog), 0);
        assert_int_equal(tn_plog_nospace(plog), want);
        assert_int_equal(tn_plog_written_next(plog), k);
        assert_int_equal(plog->nsegs, 1);
        assert_int_equal(count_files(dir, ".log"), 1);
        assert_int_equal(count_files(dir, ".tmp"), 0);
    }
    /* Space is back: the same append rolls. */
    append_n(fx, plog, k, 3);
    assert_int_equal(tn_plog_nospace(plog), 0);
    assert_int_equal(plog->nsegs, 2);
    assert_int_equal(count_files(dir, ".idx"), 1);
    expect_all(plog, 0, k + 3);
    tu_fx_reopen(fx);
    plog = open_log(fx, "t", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), k + 3);
    assert_false(plog->segs[0]->idx_loaded); /* its sidecar is good */
    expect_all(plog, 0, k + 3);

    /* A failed fsync of the segment being sealed is never retried. */
    tn_plog_t *other = open_log(fx, "u", 0);
    append_n(fx, other, 0, k);
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(tu_append(&fx->loop, other, body, len, NULL), UV_EIO);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_plog_err(other), UV_EIO);
    assert_int_equal(tu_append(&fx->loop, other, body, len, NULL), UV_EIO);
}

typedef struct {
    fx_t *fx;
    int done;
    int status;
    uint64_t durable_at_cb;
    uint64_t written_at_cb;
} mode_wait_t;

static void on_mode_append(tn_append_t *req, int status)
{
    mode_wait_t *w = req->data;
    w->done++;
    w->status = status;
    w->durable_at_cb = tn_plog_durable_next(req->plog);
    w->written_at_cb = tn_plog_written_next(req->plog);
}

static void test_durability_modes(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "modes", 0);
    tn_rec_in_t rec = {{NULL, 0}, tn_iov("payload", 7), 0};

    /* durable: complete only once covered by the fdatasync. */
    tn_append_t req;
    mode_wait_t w = {fx, 0, 0, 0, 0};
    req.data = &w;
    assert_int_equal(tn_plog_append(plog, &req, &rec, 1, on_mode_append), 0);
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    assert_int_equal(w.durable_at_cb, 1);

    /* relaxed: complete after the write; visible before durable; the
     * background sync catches up within the interval. */
    tn_plog_set_durability(plog, TN_DURABILITY_RELAXED);
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_plog_append(plog, &req, &rec, 1, on_mode_append), 0);
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    assert_int_equal(w.written_at_cb, 2);
    assert_int_equal(tn_plog_visible_next(plog), 2);
    int64_t deadline = tn_now_mono_ms() + 10000;
    while (tn_plog_durable_next(plog) < 2 && tn_now_mono_ms() < deadline)
        usleep(1000);
    assert_int_equal(tn_plog_durable_next(plog), 2);

    /* write_ack: complete after the write, visible only once durable. */
    tn_plog_set_durability(plog, TN_DURABILITY_WRITE_ACK);
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_plog_append(plog, &req, &rec, 1, on_mode_append), 0);
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    assert_int_equal(w.written_at_cb, 3);
    deadline = tn_now_mono_ms() + 10000;
    while (tn_plog_durable_next(plog) < 3 && tn_now_mono_ms() < deadline)
        usleep(1000);
    assert_int_equal(tn_plog_visible_next(plog), 3);
    expect_all(plog, 0, 0);
}

static void test_relaxed_sync_by_count(void **state)
{
    fx_t *fx = *state;
    fx->opts.relaxed_sync_messages = 10;
    fx->opts.relaxed_sync_interval_ns = 60LL * 1000000000; /* only the count can trigger */
    fx->opts.durability = TN_DURABILITY_RELAXED;
    tu_fx_reopen(fx);
    tn_plog_t *plog = open_log(fx, "r", 0);
    append_n(fx, plog, 0, 9);
    assert_int_equal(tn_plog_durable_next(plog), 0);
    append_n(fx, plog, 9, 1);
    /* The append completes before its sync; the count limit (not the
     * minute-long interval) makes that sync happen promptly. */
    int64_t deadline = tn_now_mono_ms() + 20000;
    while (tn_plog_durable_next(plog) < 10 && tn_now_mono_ms() < deadline)
        usleep(1000);
    assert_int_equal(tn_plog_durable_next(plog), 10);
    /* Closing syncs what is left. */
    append_n(fx, plog, 10, 3);
    assert_int_equal(tn_plog_durable_next(plog), 10);
    tu_plog_close(&fx->loop, plog);
    plog = open_log(fx, "r", 0);
    assert_int_equal(tn_plog_written_next(plog), 13);
}

enum { CONCURRENT = 200 };

/* CONCURRENT single-record appends alternately to a and b, all submitted
 * before any completes; runs the loop until every one has. Returns the
 * requests (static: valid until the next call). */
static tn_append_t *append_concurrently(fx_t *fx, tn_plog_t *a, tn_plog_t *b)
{
    static tn_append_t reqs[CONCURRENT];
    static tn_rec_in_t recs[CONCURRENT];
    static char bodies[CONCURRENT][32];
    mode_wait_t w = {fx, 0, 0, 0, 0};
    for (int i = 0; i < CONCURRENT; i++) {
        snprintf(bodies[i], sizeof(bodies[i]), "body %d", i);
        recs[i] = (tn_rec_in_t){{NULL, 0}, tn_iov(bodies[i], strlen(bodies[i])), 0};
        reqs[i].data = &w;
        assert_int_equal(tn_plog_append(i % 2 ? b : a, &reqs[i], &recs[i], 1, on_mode_append), 0);
    }
    while (w.done < CONCURRENT)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    return reqs;
}

/* What append_concurrently wrote reads back. */
static void expect_concurrent(tn_plog_t *a, tn_plog_t *b)
{
    for (int i = 0; i < CONCURRENT; i++) {
        char body[32];
        snprintf(body, sizeof(body), "body %d", i);
        tu_expect_body(i % 2 ? b : a, (uint64_t)(i / 2), body, strlen(body));
    }
}

static void test_concurrent_appends_group(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *a = open_log(fx, "a", 0), *b = open_log(fx, "b", 1);
    tn_append_t *reqs = append_concurrently(fx, a, b);
    expect_concurrent(a, b);
    assert_int_equal(tn_plog_written_next(a), CONCURRENT / 2);
    assert_int_equal(tn_plog_written_next(b), CONCURRENT / 2);
    /* Submission order is offset order within a partition. */
    for (int i = 0; i < CONCURRENT; i++)
        assert_int_equal(reqs[i].first_offset, (uint64_t)(i / 2));
    /* Fewer rounds than requests: they were grouped. */
    assert_true(atomic_load(&fx->store->logc.rounds) < CONCURRENT);
    /* The tests' stores never busy-poll unless asked to. */
    assert_int_equal(fx->store->poll_ns_total, 0);
}

/* Busy-polling: with enough appends out the loop polls for their
 * completions, and stops (the idle handle inactive, so a loop with
 * nothing else to do can end) once they are back. */
static void test_busy_poll_while_appends_out(void **state)
{
    fx_t *fx = *state;
    /* A budget no commit exceeds, even on a loaded test machine. */
    fx->opts.busy_poll_ns = 30LL * 1000000000;
    fx->opts.busy_poll_min = 4;
    tu_fx_reopen(fx);
    tn_plog_t *a = open_log(fx, "a", 0), *b = open_log(fx, "b", 1);
    append_concurrently(fx, a, b);
    assert_true(fx->store->poll_ns_total > 0);
    assert_int_equal(fx->store->appends_out, 0);
    assert_int_equal(fx->store->poll_started_ns, 0);
    assert_false(uv_is_active((uv_handle_t *)&fx->store->poll));
    expect_concurrent(a, b);

    /* Below the minimum: no polling. */
    uint64_t polled = fx->store->poll_ns_total;
    append_n(fx, open_log(fx, "c", 0), 0, 3);
    assert_int_equal(fx->store->poll_ns_total, polled);
    assert_false(uv_is_active((uv_handle_t *)&fx->store->poll));
}

/* Closing the store while the loop polls: the plogs' close completions
 * follow the appends', so the store may finish closing inside a poll;
 * polling stops once and its handle closes with the store. */
static void test_busy_poll_store_closed_meanwhile(void **state)
{
    fx_t *fx = *state;
    fx->opts.busy_poll_ns = 30LL * 1000000000;
    fx->opts.busy_poll_min = 4;
    tu_fx_reopen(fx);
    tn_plog_t *plog = open_log(fx, "a", 0);
    enum { N = 16 };
    tn_append_t reqs[N];
    tn_rec_in_t rec = {{NULL, 0}, tn_iov("closing", 7), 0};
    mode_wait_t w = {fx, 0, 0, 0, 0};
    for (int i = 0; i < N; i++) {
        reqs[i].data = &w;
        assert_int_equal(tn_plog_append(plog, &reqs[i], &rec, 1, on_mode_append), 0);
    }
    assert_true(uv_is_active((uv_handle_t *)&fx->store->poll));
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    assert_int_equal(w.done, N);
    assert_int_equal(w.status, 0);
    /* Nothing of the store is left on the loop. */
    assert_int_equal(uv_run(&fx->loop, UV_RUN_NOWAIT), 0);
}

/* A stalled disk does not keep the loop polling, however many appends
 * keep arriving: it stops after four budgets without a completion. */
static void test_busy_poll_stops_on_a_stall(void **state)
{
    fx_t *fx = *state;
    fx->opts.busy_poll_ns = 1000000; /* 1 ms */
    fx->opts.busy_poll_min = 1;
    tu_fx_reopen(fx);
    tn_plog_t *plog = open_log(fx, "a", 0);
    enum { N = 200 };
    static tn_append_t reqs[N];
    tn_rec_in_t rec = {{NULL, 0}, tn_iov("stalled", 7), 0};
    mode_wait_t w = {fx, 0, 0, 0, 0};
    /* Each sync takes 2 s: the first is still in flight when the check
     * below runs, even on a loaded machine. */
    tn_io_delay_sync(2LL * 1000000000);
    int n = 0;
    int64_t start = tn_now_mono_ns();
    /* An append every ~100 µs for 50 ms, all waiting on the stalled sync. */
    while (tn_now_mono_ns() - start < 50LL * 1000000 && n < N) {
        reqs[n].data = &w;
        assert_int_equal(tn_plog_append(plog, &reqs[n], &rec, 1, on_mode_append), 0);
        n++;
        uv_run(&fx->loop, UV_RUN_NOWAIT);
        usleep(100);
    }
    tn_io_delay_sync(0);
    bool polling = uv_is_active((uv_handle_t *)&fx->store->poll);
    int done = w.done;
    while (w.done < n)
        uv_run(&fx->loop, UV_RUN_ONCE);
    /* The first sync was still in flight, and polling had given up. */
    assert_int_equal(done, 0);
    assert_false(polling);
    /* Polling through the stall would have taken ~2 s. */
    assert_true(fx->store->poll_ns_total < 1000LL * 1000000);
    assert_int_equal(w.status, 0);
}

/* The committer records a round's time after the round's completions
 * went to the loop: wait until the first is recorded. */
static void wait_round_recorded(fx_t *fx)
{
    for (int i = 0; i < 10000 && atomic_load(&fx->store->logc.round_ns) == 0; i++)
        usleep(1000);
}

/* Commits slower on average than the budget never start it: polling
 * would burn the budget and sleep anyway. */
static void test_busy_poll_skips_slow_commits(void **state)
{
    fx_t *fx = *state;
    fx->opts.busy_poll_ns = 1000; /* 1 µs: below any write + fdatasync */
    fx->opts.busy_poll_min = 1;
    tu_fx_reopen(fx);
    tn_plog_t *a = open_log(fx, "a", 0), *b = open_log(fx, "b", 1);
    append_n(fx, a, 0, 1); /* polls (no average yet), then records one */
    wait_round_recorded(fx);
    assert_true(atomic_load(&fx->store->logc.round_ns) > 1000);
    uint64_t polled = fx->store->poll_ns_total;
    append_concurrently(fx, a, b);
    assert_int_equal(fx->store->poll_ns_total, polled);
    assert_false(uv_is_active((uv_handle_t *)&fx->store->poll));
}

/* Commits long for the appends waiting on them never start it either:
 * polling would cost more CPU per append than busy_poll_cost_ns. */
static void test_busy_poll_skips_costly_commits(void **state)
{
    fx_t *fx = *state;
    fx->opts.busy_poll_ns = 30LL * 1000000000; /* no commit exceeds it */
    fx->opts.busy_poll_min = 1;
    fx->opts.busy_poll_cost_ns = 1; /* 1 ns per append: below any round */
    tu_fx_reopen(fx);
    tn_plog_t *a = open_log(fx, "a", 0), *b = open_log(fx, "b", 1);
    append_n(fx, a, 0, 1); /* polls (no average yet), then records one */
    wait_round_recorded(fx);
    assert_true(atomic_load(&fx->store->logc.round_ns) > CONCURRENT);
    uint64_t polled = fx->store->poll_ns_total;
    append_concurrently(fx, a, b);
    assert_int_equal(fx->store->poll_ns_total, polled);
    assert_false(uv_is_active((uv_handle_t *)&fx->store->poll));

    /* The same commits with the limit lifted: it polls. */
    fx->store->opts.busy_poll_cost_ns = 0;
    append_concurrently(fx, a, b);
    assert_true(fx->store->poll_ns_total > polled);
    assert_false(uv_is_active((uv_handle_t *)&fx->store->poll));
}

typedef struct {
    int done;
    int status;
    uint32_t deleted;
} gc_wait_t;

static void on_gc(tn_plog_gc_t *req, int status)
{
    gc_wait_t *w = req->data;
    w->done = 1;
    w->status = status;
    w->deleted = req->deleted;
}

static uint32_t run_gc(fx_t *fx, tn_plog_t *plog, uint64_t below, int64_t older)
{
    tn_plog_gc_t req;
    gc_wait_t w = {0, 0, 0};
    req.data = &w;
    assert_int_equal(tn_plog_gc(plog, &req, below, older, on_gc), 0);
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    return w.deleted;
}

static void test_gc_by_offset_and_age(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "gc", 0);
    append_n(fx, plog, 0, 1500);
    tn_plog_stats_t st;
    tn_plog_stats(plog, &st);
    uint32_t segs = st.segments;
    assert_true(segs >= 4);
    uint64_t second_base = plog->segs[1]->base;
    uint64_t third_base = plog->segs[2]->base;

    /* Nothing is wholly below offset 1: nothing to do. */
    assert_int_equal(tn_plog_gc_plan(plog, 1, 0), 0);
    /* Exactly the first segment is below the second's base. */
    assert_int_equal(tn_plog_gc_plan(plog, second_base, 0), 1);
    assert_int_equal(tn_plog_gc_plan(plog, third_base - 1, 0), 1);

    /* A reader holds the first segment across its deletion. */
    tn_seg_t *held = plog->segs[0];
    tn_seg_ref(held);
    assert_int_equal(run_gc(fx, plog, second_base, 0), 1);
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_seg_read_at(held, 0, held->size, 0, &scratch, &rec), 0);
    tn_seg_unref(held);
    assert_int_equal(tn_plog_read(plog, 0, &scratch, &rec), TN_ENOTFOUND);
    tn_buf_fini(&scratch);
    expect_all(plog, second_base, 1500 - second_base);

    /* Never the active segment, whatever the bound. */
    uint32_t n = tn_plog_gc_plan(plog, UINT64_MAX, 0);
    assert_int_equal(n, segs - 2);
    /* By age: everything sealed is older than "now + 1s". */
    assert_int_equal(run_gc(fx, plog, 0, tn_now_wall_ns() + 1000000000LL), segs - 2);
    tn_plog_stats(plog, &st);
    assert_int_equal(st.segments, 1);
    assert_int_equal(run_gc(fx, plog, UINT64_MAX, 0), 0);

    /* Reopen: offsets continue, nothing below the kept segment. */
    tu_fx_reopen(fx);
    plog = open_log(fx, "gc", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), 1500);
    append_n(fx, plog, 1500, 10);
    expect_all(plog, 1500, 10);
}

static void test_disk_high_refuses_appends(void **state)
{
    fx_t *fx = *state;
    fx->opts.disk_min_free = UINT64_MAX; /* no disk is that large */
    tu_fx_reopen(fx);
    assert_true(tn_store_disk_high(fx->store));
    tn_plog_t *plog = open_log(fx, "t", 0);
    tn_append_t req;
    tn_rec_in_t rec = {{NULL, 0}, tn_iov("x", 1), 0};
    assert_int_equal(tn_plog_append(plog, &req, &rec, 1, on_mode_append), TN_EDISKHIGH);
    fx->opts.disk_min_free = 0;
    tu_fx_reopen(fx);
    assert_false(tn_store_disk_high(fx->store));
}

static void test_alloc_failures(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *seed = open_log(fx, "alloc", 0);
    append_n(fx, seed, 0, 700);
    tu_plog_close(&fx->loop, seed);
    /* Every allocation point of open and recovery fails cleanly. */
    for (long n = 0;; n++) {
        tn_plog_t *plog = NULL;
        tn_alloc_fail_after(n);
        int rc = tn_plog_open(fx->store, "alloc", 0, &plog);
        tn_alloc_fail_after(-1);
        if (rc == 0) {
            assert_int_equal(tn_plog_err(plog), 0);
            expect_all(plog, 0, 700);
            tu_plog_close(&fx->loop, plog);
            break;
        }
        assert_int_equal(rc, UV_ENOMEM);
        assert_true(n < 10000);
    }
    /* An append whose header array cannot be allocated is refused at once. */
    tn_plog_t *plog = open_log(fx, "alloc", 0);
    tn_rec_in_t recs[2] = {{{NULL, 0}, tn_iov("a", 1), 0}, {{NULL, 0}, tn_iov("b", 1), 0}};
    tn_append_t req;
    tn_alloc_fail_after(0);
    int rc = tn_plog_append(plog, &req, recs, 2, on_mode_append);
    tn_alloc_fail_after(-1);
    assert_int_equal(rc, UV_ENOMEM);
}

static void on_advance(tn_plog_advance_t *req, int status)
{
    int *w = req->data;
    *w = status == 0 ? 1 : status;
}

static void advance(fx_t *fx, tn_plog_t *plog, uint64_t next)
{
    tn_plog_advance_t req;
    int w = 0;
    req.data = &w;
    assert_int_equal(tn_plog_advance(plog, &req, next, on_advance), 0);
    while (w == 0)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w, 1);
}

static void expect_absent(tn_plog_t *plog, uint64_t from, uint64_t to, int err)
{
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    for (uint64_t off = from; off < to; off++)
        assert_int_equal(tn_plog_read(plog, off, &scratch, &rec), err);
    tn_buf_fini(&scratch);
}

static void expect_gap(tn_plog_t *plog, uint64_t from, uint64_t to)
{
    expect_absent(plog, from, to, TN_EGAP);
}

static void test_advance(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "adv", 0);
    append_n(fx, plog, 0, 5);
    advance(fx, plog, 100);
    assert_int_equal(tn_plog_written_next(plog), 100);
    assert_int_equal(tn_plog_durable_next(plog), 100);
    expect_gap(plog, 5, 100);
    /* A gap at the log's end runs to it. */
    assert_int_equal(tn_plog_gap_end(plog, 5), 100);
    assert_int_equal(tn_plog_gap_end(plog, 99), 100);
    append_n(fx, plog, 100, 3);
    advance(fx, plog, 50); /* below the tail: nothing to do */
    assert_int_equal(tn_plog_written_next(plog), 103);
    tu_fx_reopen(fx);
    plog = open_log(fx, "adv", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tn_plog_written_next(plog), 103);
    expect_all(plog, 0, 5);
    expect_gap(plog, 5, 100);
    expect_all(plog, 100, 3);
    /* Where a gap ends (the followers' skip): the next record; an offset
     * that is not in one is its own answer. */
    for (uint64_t off = 5; off < 100; off += 47)
        assert_int_equal(tn_plog_gap_end(plog, off), 100);
    assert_int_equal(tn_plog_gap_end(plog, 4), 4);
    assert_int_equal(tn_plog_gap_end(plog, 101), 101);
    assert_int_equal(tn_plog_gap_end(plog, 103), 103);
    assert_int_equal(tn_plog_gap_end(plog, 500), 500);

    /* From an empty active segment: it is replaced, not kept. */
    tn_plog_t *fresh = open_log(fx, "adv", 1);
    advance(fx, fresh, 40);
    append_n(fx, fresh, 40, 2);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/adv/1", fx->dir);
    assert_int_equal(count_files(dir, ".log"), 1);
    /* Nothing precedes them: like GC'd offsets, not found. */
    expect_absent(fresh, 0, 40, TN_ENOTFOUND);
    assert_int_equal(tn_plog_gap_end(fresh, 0), 0);
    tu_fx_reopen(fx);
    fresh = open_log(fx, "adv", 1);
    assert_int_equal(tn_plog_written_next(fresh), 42);
    expect_all(fresh, 40, 2);
}

static void test_empty_leftover_segment(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "left", 0);
    advance(fx, plog, 10);
    append_n(fx, plog, 10, 3);
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    /* A crash inside advance can leave the old, empty segment behind. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/left/0/00000000000000000000.log", fx->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "left", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    assert_int_equal(tu_file_size(path), -1); /* removed */
    expect_all(plog, 10, 3);

    /* But a sealed segment emptied behind our back (its sidecar remains)
     * is damage, not a leftover. */
    append_n(fx, plog, 13, 400); /* roll at least once */
    tu_store_close(&fx->loop, fx->store);
    fx->store = NULL;
    snprintf(path, sizeof(path), "%s/topics/left/0/00000000000000000010.log", fx->dir);
    tu_truncate_file(path, 0);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    plog = open_log(fx, "left", 0);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);
}

typedef struct {
    int done;
    int status;
} floor_wait_t;

static void on_floor(tn_plog_floor_t *req, int status)
{
    floor_wait_t *w = req->data;
    w->done = 1;
    w->status = status;
}

static int drop_below(fx_t *fx, tn_plog_t *plog, uint64_t below)
{
    tn_plog_floor_t req;
    floor_wait_t w = {0, 0};
    req.data = &w;
    assert_int_equal(tn_plog_drop_below(plog, &req, below, on_floor), 0);
    assert_int_equal(w.done, 0); /* never answered inside the call */
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    return w.status;
}

static void test_floor_drops_the_head_durably(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "fl", 0);
    append_n(fx, plog, 0, 1500);
    assert_true(plog->nsegs >= 4);
    uint64_t second_base = plog->segs[1]->base;
    /* Before: GC with bound 0 has nothing to do. */
    assert_int_equal(tn_plog_gc_plan(plog, 0, 0), 0);
    assert_int_equal(drop_below(fx, plog, second_base + 5), 0);
    tn_plog_stats_t st;
    tn_plog_stats(plog, &st);
    assert_int_equal(st.first_offset, second_base + 5);
    expect_absent(plog, 0, second_base + 5, TN_ENOTFOUND);
    expect_all(plog, second_base + 5, 1500 - second_base - 5);
    /* GC reclaims below the floor whatever bound it is given. */
    assert_int_equal(tn_plog_gc_plan(plog, 0, 0), 1);
    assert_int_equal(run_gc(fx, plog, 0, 0), 1);
    /* A floor never goes down, and never past the next offset. */
    assert_int_equal(drop_below(fx, plog, 3), 0);
    tn_plog_stats(plog, &st);
    assert_int_equal(st.first_offset, second_base + 5);
    assert_int_equal(drop_below(fx, plog, UINT64_MAX), 0);
    tn_plog_stats(plog, &st);
    assert_int_equal(st.first_offset, 1500);

    /* It survives a reopen; appends go on from the same offset. */
    tu_fx_reopen(fx);
    plog = open_log(fx, "fl", 0);
    assert_int_equal(tn_plog_err(plog), 0);
    tn_plog_stats(plog, &st);
    assert_int_equal((st.first_offset), 1500);
    expect_absent(plog, 1400, 1500, TN_ENOTFOUND);
    append_n(fx, plog, 1500, 3);
    expect_all(plog, 1500, 3);
}

static void test_damaged_floor_isolates(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = open_log(fx, "flbad", 0);
    append_n(fx, plog, 0, 10);
    assert_int_equal(drop_below(fx, plog, 4), 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s/floor", plog->dir);
    tu_fx_reopen(fx);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 9, SEEK_SET);
    fputc(0x7f, f);
    fclose(f);
    plog = open_log(fx, "flbad", 0);
    assert_int_equal(tn_plog_err(plog), TN_ECORRUPT);
}

typedef struct {
    int done;
    int status;
    uint64_t first;
} mem_wait_t;

static void on_mem_append(tn_append_t *req, int status)
{
    mem_wait_t *w = req->data;
    w->done++;
    w->status = status;
    w->first = req->first_offset;
}

static void test_memory_log(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog = NULL;
    assert_int_equal(tn_plog_open_memory(fx->store, "m#ephemeral", 0, 4, 100, &plog), 0);
    tn_rec_in_t recs[3] = {{{NULL, 0}, tn_iov("one", 3), 0},
                           {tn_iov("k", 1), tn_iov("two", 3), 77},
                           {{NULL, 0}, tn_iov("three", 5), 0}};
    tn_append_t req;
    mem_wait_t w = {0, 0, 0};
    req.data = &w;
    assert_int_equal(tn_plog_append(plog, &req, recs, 3, on_mem_append), 0);
    assert_int_equal(w.done, 0); /* answered on a later loop turn */
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, 0);
    assert_int_equal(w.first, 0);
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_plog_read(plog, 1, &scratch, &rec), 0);
    assert_int_equal(rec.h.key_len, 1);
    assert_memory_equal(rec.key, "k", 1);
    assert_memory_equal(rec.body, "two", 3);
    assert_int_equal(rec.h.deliver_at_ms, 77);
    assert_int_equal(tn_plog_read(plog, 3, &scratch, &rec), TN_ENOTFOUND);
    /* Over the record bound: refused, nothing taken. */
    tn_append_t req2;
    req2.data = &w;
    assert_int_equal(tn_plog_append(plog, &req2, recs, 2, on_mem_append), TN_EFULL);
    assert_int_equal(tn_plog_written_next(plog), 3);
    /* Trimmed, it takes more; the ring grows past its first size. */
    assert_int_equal(tn_plog_mem_trim(plog, 2), 2);
    assert_int_equal(tn_plog_read(plog, 1, &scratch, &rec), TN_ENOTFOUND);
    assert_int_equal(tn_plog_read(plog, 2, &scratch, &rec), 0);
    assert_memory_equal(rec.body, "three", 5);
    w.done = 0;
    assert_int_equal(tn_plog_append(plog, &req2, recs, 3, on_mem_append), 0);
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.first, 3);
    tn_plog_stats_t st;
    tn_plog_stats(plog, &st);
    assert_int_equal(st.first_offset, 2);
    assert_int_equal(st.visible_next, 6);
    assert_int_equal(st.bytes, 5 + 3 + 4 + 5);
    /* Over the byte bound. */
    tn_rec_in_t big = {{NULL, 0}, tn_iov(scratch.base, 0), 0};
    char blob[90];
    memset(blob, 'b', sizeof(blob));
    big.body = tn_iov(blob, sizeof(blob));
    assert_int_equal(tn_plog_mem_trim(plog, 6), 4);
    assert_int_equal(tn_plog_append(plog, &req2, &big, 1, on_mem_append), 0);
    w.done = 0;
    while (!w.done)
        uv_run(&fx->loop, UV_RUN_ONCE);
    assert_int_equal(tn_plog_append(plog, &req2, &big, 1, on_mem_append), TN_EFULL);
    /* A memory log never advances, and GC never picks anything. */
    tn_plog_advance_t adv;
    assert_int_equal(tn_plog_advance(plog, &adv, 100, NULL), UV_EINVAL);
    assert_int_equal(tn_plog_gc_plan(plog, UINT64_MAX, INT64_MAX), 0);
    /* Its floor frees the records at once. */
    assert_int_equal(drop_below(fx, plog, 7), 0);
    assert_int_equal(tn_plog_read(plog, 6, &scratch, &rec), TN_ENOTFOUND);
    tn_buf_fini(&scratch);
    /* Nothing on disk. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/topics/m#ephemeral", fx->dir);
    assert_int_equal(access(dir, F_OK), -1);
    /* The store closes it with itself (teardown). */
}

static void test_names_refused(void **state)
{
    fx_t *fx = *state;
    tn_plog_t *plog;
    assert_int_equal(tn_plog_open(fx->store, "..", 0, &plog), UV_EINVAL);
    assert_int_equal(tn_plog_open(fx->store, "a/b", 0, &plog), UV_EINVAL);
    assert_int_equal(tn_plog_open(fx->store, "", 0, &plog), UV_EINVAL);
    assert_int_equal(tn_plog_open(fx->store, "x#ephemeral", 0, &plog), UV_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_append_read_roll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_from, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_keys_and_deliver_at, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_uses_sidecars, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_bad_index_rebuilt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_truncated_on_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_sealed_segment_isolates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_found_by_read_is_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_active_damage_found_by_read_recorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_failure_is_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_tail_trimmed_on_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandon_keeps_the_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_write_failure_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure_is_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_write_is_not_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_cut_back_survives_power_loss, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_roll_is_not_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_durability_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relaxed_sync_by_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_appends_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_poll_while_appends_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_poll_skips_slow_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_poll_skips_costly_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_poll_stops_on_a_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_poll_store_closed_meanwhile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_by_offset_and_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_floor_drops_the_head_durably, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_floor_isolates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_high_refuses_appends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_advance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_leftover_segment, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
