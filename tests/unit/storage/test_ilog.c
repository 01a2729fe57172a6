/* The ingress log: frame codec, round trips, seq density across segment
 * rotation, read bounds, checkpoint and compaction (files really gone),
 * reopen at every state, torn tails, refused corruption and checkpoints,
 * latched write and fdatasync errors, size limits, stats, sharing rounds
 * with partition appends, and reads from another thread. */
#include "core/platform.h"

#include "testutil.h"

#include "core/crc32c.h"
#include "core/err.h"
#include "storage/ilog.h"
#include "storage/io.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tu_fx_t *fx;
    tn_ilog_t *log;
    tn_ilog_opts_t opts;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    f->fx = tu_fx_new(NULL);
    f->opts.segment_bytes = 4096;
    f->opts.rotate_bytes = 2048;
    *state = f;
    return 0;
}

static void close_log(fx_t *f);

static int teardown(void **state)
{
    fx_t *f = *state;
    close_log(f);
    tu_fx_free(f->fx);
    free(f);
    return 0;
}

static int try_open(fx_t *f, char *err, size_t errlen)
{
    return tn_ilog_open_opts(f->fx->store, &f->opts, &f->log, err, errlen);
}

static void open_log(fx_t *f)
{
    char err[512] = "";
    int rc = try_open(f, err, sizeof(err));
    if (rc != 0)
        fail_msg("open: %s: %s", tn_strerror(rc), err);
}

static bool closed;

static void on_closed(tn_ilog_t *l)
{
    (void)l;
    closed = true;
}

static void close_log(fx_t *f)
{
    if (f->log == NULL)
        return;
    closed = false;
    tn_ilog_close(f->log, on_closed);
    f->log = NULL;
    while (!closed)
        uv_run(&f->fx->loop, UV_RUN_ONCE);
}

static void reopen(fx_t *f)
{
    close_log(f);
    tu_fx_reopen(f->fx);
    open_log(f);
}

typedef struct {
    int done;
    int status;
} wait_t;

static void on_append(tn_ilog_append_t *a, int status)
{
    wait_t *w = a->data;
    w->done = 1;
    w->status = status;
}

static int append_recs(fx_t *f, const tn_irec_t *recs, uint32_t n, uint64_t *first)
{
    tn_ilog_append_t a;
    wait_t w = {0, 0};
    a.data = &w;
    int rc = tn_ilog_append(f->log, &a, recs, n, on_append);
    if (rc != 0)
        return rc;
    while (!w.done)
        uv_run(&f->fx->loop, UV_RUN_ONCE);
    if (first != NULL)
        *first = a.first_seq;
    return w.status;
}

/* Record i: topic "t<i%3>", key "k<i>" for odd i, a body of tu_body(i). */
typedef struct {
    char topic[16];
    char key[16];
    char body[512];
    tn_irec_t rec;
} made_t;

static void make(made_t *m, uint64_t i)
{
    snprintf(m->topic, sizeof(m->topic), "t%u", (unsigned)(i % 3));
    int kl = snprintf(m->key, sizeof(m->key), "k%llu", (unsigned long long)i);
    size_t bl = tu_body(i, m->body, sizeof(m->body));
    m->rec.topic = tn_iov(m->topic, strlen(m->topic));
    m->rec.key = i % 2 ? tn_iov(m->key, (size_t)kl) : tn_iov(NULL, 0);
    m->rec.body = tn_iov(m->body, bl);
    m->rec.partition = (uint32_t)(i % 7);
    m->rec.pinned = i % 2 == 1;
    m->rec.deliver_at_ms = i % 5 == 0 ? (int64_t)(1000 + i) : 0;
    m->rec.created_ms = (int64_t)(1700000000000LL + (int64_t)i);
}

static void expect_rec(const tn_ilog_entry_t *e, uint64_t i)
{
    made_t m;
    make(&m, i);
    assert_int_equal(e->seq, i);
    assert_int_equal(e->rec.topic.len, m.rec.topic.len);
    assert_memory_equal(e->rec.topic.base, m.rec.topic.base, m.rec.topic.len);
    assert_int_equal(e->rec.key.len, m.rec.key.len);
    if (m.rec.key.len > 0)
        assert_memory_equal(e->rec.key.base, m.rec.key.base, m.rec.key.len);
    assert_int_equal(e->rec.body.len, m.rec.body.len);
    assert_memory_equal(e->rec.body.base, m.rec.body.base, m.rec.body.len);
    assert_int_equal(e->rec.partition, m.rec.partition);
    assert_int_equal(e->rec.pinned, m.rec.pinned);
    assert_int_equal(e->rec.deliver_at_ms, m.rec.deliver_at_ms);
    assert_int_equal(e->rec.created_ms, m.rec.created_ms);
}

/* Append records [from, from+n) one append each. */
static void append_n(fx_t *f, uint64_t from, uint64_t n)
{
    for (uint64_t i = from; i < from + n; i++) {
        made_t m;
        make(&m, i);
        uint64_t seq = UINT64_MAX;
        int rc = append_recs(f, &m.rec, 1, &seq);
        if (rc != 0)
            fail_msg("append %llu: %s", (unsigned long long)i, tn_strerror(rc));
        assert_int_equal(seq, i);
    }
}

/* Read [from, to) in batches of at most per records; every record is the
 * one made for its seq. */
static void expect_all(fx_t *f, uint64_t from, uint64_t to, uint32_t per)
{
    uint64_t seq = from;
    while (seq < to) {
        tn_ilog_batch_t b;
        int rc = tn_ilog_read(f->log, seq, per, SIZE_MAX, &b);
        if (rc != 0)
            fail_msg("read from %llu: %s", (unsigned long long)seq, tn_strerror(rc));
        assert_true(b.n > 0 && b.n <= per);
        for (uint32_t i = 0; i < b.n; i++)
            expect_rec(&b.recs[i], seq + i);
        seq += b.n;
        assert_int_equal(b.next, seq);
        tn_ilog_batch_fini(&b);
    }
    assert_int_equal(seq, to);
}

static char *ingress_path(fx_t *f, const char *name)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/ingress/%s", f->fx->dir, name);
    return path;
}

static char *seg_path(fx_t *f, uint64_t base)
{
    char name[64];
    snprintf(name, sizeof(name), "%020llu.log", (unsigned long long)base);
    return ingress_path(f, name);
}

/* The segment files' first seqs, sorted; returns how many. */
static size_t list_bases(fx_t *f, uint64_t *bases, size_t cap)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/ingress", f->fx->dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strlen(e->d_name) == 24 && strcmp(e->d_name + 20, ".log") == 0 && n < cap)
            bases[n++] = strtoull(e->d_name, NULL, 10);
    }
    closedir(d);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && bases[j - 1] > bases[j]; j--) {
            uint64_t t = bases[j];
            bases[j] = bases[j - 1];
            bases[j - 1] = t;
        }
    return n;
}

typedef struct {
    int done;
    int status;
    uint32_t deleted;
} ckwait_t;

static void on_ckpt(tn_ilog_ckpt_t *req, int status)
{
    ckwait_t *w = req->data;
    w->done = 1;
    w->status = status;
    w->deleted = req->deleted;
}

static int checkpoint(fx_t *f, uint64_t next, uint32_t *deleted)
{
    tn_ilog_ckpt_t req;
    ckwait_t w = {0, 0, 0};
    req.data = &w;
    int rc = tn_ilog_checkpoint(f->log, &req, next, on_ckpt);
    if (rc != 0)
        return rc;
    while (!w.done)
        uv_run(&f->fx->loop, UV_RUN_ONCE);
    if (deleted != NULL)
        *deleted = w.deleted;
    return w.status;
}

/* --- codec ------------------------------------------------------------------ */

static void test_codec(void **state)
{
    (void)state;
    made_t m;
    make(&m, 5);
    unsigned char buf[1024];
    size_t len = tn_irec_encode(buf, &m.rec, 42, 7);
    assert_int_equal(len, tn_irec_size(&m.rec));
    assert_memory_equal(buf, "TNI1", 4);
    tn_irec_t r;
    uint64_t seq;
    size_t used;
    uint32_t mark;
    assert_int_equal(tn_irec_decode(buf, len, &r, &seq, &used, &mark), 0);
    assert_int_equal(seq, 42);
    assert_int_equal(used, len);
    assert_int_equal(mark, 7);
    tn_ilog_entry_t e = {5, r};
    expect_rec(&e, 5);
    /* Every prefix is "need more", and says how much once the header is in. */
    for (size_t k = 0; k < len; k++) {
        assert_int_equal(tn_irec_decode(buf, k, &r, &seq, &used, NULL), TN_ESHORT);
        assert_int_equal(used, k >= TN_ILOG_HDR ? len : 0);
    }
    /* Any flipped byte is refused (or, in the length, made short). */
    for (size_t k = 0; k < len; k++) {
        if (k >= 8 && k < 16)
            continue; /* the seq is not under the checksum */
        unsigned char c[1024];
        memcpy(c, buf, len);
        c[k] ^= 0x40;
        int rc = tn_irec_decode(c, len, &r, &seq, &used, NULL);
        assert_true(rc == TN_ECORRUPT || (rc == TN_ESHORT && k >= 4 && k < 8));
    }
    /* A trailing byte inside the payload is refused even with a good CRC. */
    unsigned char c[1024];
    memcpy(c, buf, len);
    c[len] = 0;
    tn_put_u32(c + 4, (uint32_t)(len + 1 - TN_ILOG_HDR));
    tn_put_u32(c + 16, tn_crc32c(0, c + TN_ILOG_HDR, len + 1 - TN_ILOG_HDR));
    assert_int_equal(tn_irec_decode(c, len + 1, &r, &seq, &used, NULL), TN_ECORRUPT);
    /* An unknown version or flag is refused. */
    memcpy(c, buf, len);
    c[TN_ILOG_HDR + 1] |= 0x02;
    tn_put_u32(c + 16, tn_crc32c(0, c + TN_ILOG_HDR, len - TN_ILOG_HDR));
    assert_int_equal(tn_irec_decode(c, len, &r, &seq, &used, NULL), TN_ECORRUPT);
    assert_int_equal(tn_irec_decode("XNI1", 4, &r, &seq, &used, NULL), TN_ECORRUPT);
    assert_int_equal(tn_irec_decode("TN", 2, &r, &seq, &used, NULL), TN_ESHORT);
}

/* --- appends and reads ----------------------------------------------------------- */

static void test_empty_open(void **state)
{
    fx_t *f = *state;
    open_log(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 0);
    assert_int_equal(tn_ilog_durable_seq(f->log), 0);
    assert_int_equal(tn_ilog_checkpoint_seq(f->log), 0);
    assert_true(tu_file_size(seg_path(f, 0)) == 0);
    tn_ilog_batch_t b;
    assert_int_equal(tn_ilog_read(f->log, 0, 10, SIZE_MAX, &b), 0);
    assert_int_equal(b.n, 0);
    assert_int_equal(b.next, 0);
    tn_ilog_batch_fini(&b);
    assert_int_equal(tn_ilog_read(f->log, 1, 10, SIZE_MAX, &b), UV_EINVAL);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 0);
}

static void test_round_trip_batch(void **state)
{
    fx_t *f = *state;
    open_log(f);
    made_t m[4];
    tn_irec_t recs[4];
    for (int i = 0; i < 4; i++) {
        make(&m[i], (uint64_t)i);
        recs[i] = m[i].rec;
    }
    uint64_t first = UINT64_MAX;
    assert_int_equal(append_recs(f, recs, 4, &first), 0);
    assert_int_equal(first, 0);
    assert_int_equal(tn_ilog_next_seq(f->log), 4);
    assert_int_equal(tn_ilog_durable_seq(f->log), 4);
    expect_all(f, 0, 4, 100);
    append_n(f, 4, 3);
    expect_all(f, 0, 7, 2);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 7);
    expect_all(f, 0, 7, 3);
    append_n(f, 7, 1);
    expect_all(f, 0, 8, 100);
}

/* Several appends queued in one loop turn share a round (one write and
 * one fdatasync) with a partition append, and keep their order. */
static void test_shared_round(void **state)
{
    fx_t *f = *state;
    open_log(f);
    tn_plog_t *plog;
    assert_int_equal(tn_plog_open(f->fx->store, "p", 0, &plog), 0);
    enum { N = 8 };
    made_t m[N];
    tn_ilog_append_t a[N];
    wait_t w[N];
    for (int i = 0; i < N; i++) {
        make(&m[i], (uint64_t)i);
        w[i].done = 0;
        a[i].data = &w[i];
        assert_int_equal(tn_ilog_append(f->log, &a[i], &m[i].rec, 1, on_append), 0);
    }
    uint64_t off;
    assert_int_equal(tu_append(&f->fx->loop, plog, "x", 1, &off), 0);
    for (int i = 0; i < N; i++) {
        while (!w[i].done)
            uv_run(&f->fx->loop, UV_RUN_ONCE);
        assert_int_equal(w[i].status, 0);
        assert_int_equal(a[i].first_seq, (uint64_t)i);
    }
    expect_all(f, 0, N, 100);
    tu_plog_close(&f->fx->loop, plog);
}

static void test_rotation_keeps_seqs_dense(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 120); /* ~20 KiB: several 4 KiB segments */
    uint64_t bases[64];
    size_t n = list_bases(f, bases, 64);
    assert_true(n >= 4);
    assert_int_equal(bases[0], 0);
    for (size_t i = 0; i < n; i++)
        assert_true(tu_file_size(seg_path(f, bases[i])) <= 4096);
    tn_ilog_stats_t st;
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.segments, n);
    expect_all(f, 0, 120, 7);
    /* A batch lands in one segment; one larger than a segment alone. */
    made_t big[20];
    tn_irec_t recs[20];
    for (int i = 0; i < 20; i++) {
        make(&big[i], 120 + (uint64_t)i);
        recs[i] = big[i].rec;
    }
    uint64_t first;
    assert_int_equal(append_recs(f, recs, 20, &first), 0);
    assert_int_equal(first, 120);
    assert_int_equal(list_bases(f, bases, 64), n + 1);
    assert_int_equal(bases[n], 120);
    append_n(f, 140, 5);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 145);
    expect_all(f, 0, 145, 11);
    append_n(f, 145, 30);
    expect_all(f, 100, 175, 1000);
}

static void test_read_bounds(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 50);
    tn_ilog_batch_t b;
    assert_int_equal(tn_ilog_read(f->log, 10, 5, SIZE_MAX, &b), 0);
    assert_int_equal(b.n, 5);
    assert_int_equal(b.recs[0].seq, 10);
    assert_int_equal(b.next, 15);
    tn_ilog_batch_fini(&b);
    /* max_bytes: whole frames within it, but at least one. */
    assert_int_equal(tn_ilog_read(f->log, 10, 100, 1, &b), 0);
    assert_int_equal(b.n, 1);
    expect_rec(&b.recs[0], 10);
    size_t one = b.bytes;
    tn_ilog_batch_fini(&b);
    made_t m10, m11;
    make(&m10, 10);
    make(&m11, 11);
    assert_int_equal(one, tn_irec_size(&m10.rec));
    size_t two = one + tn_irec_size(&m11.rec);
    assert_int_equal(tn_ilog_read(f->log, 10, 100, two, &b), 0);
    assert_int_equal(b.n, 2);
    assert_int_equal(b.bytes, two);
    tn_ilog_batch_fini(&b);
    assert_int_equal(tn_ilog_read(f->log, 10, 100, two - 1, &b), 0);
    assert_int_equal(b.n, 1);
    tn_ilog_batch_fini(&b);
    /* The end: everything to the last, then nothing. */
    assert_int_equal(tn_ilog_read(f->log, 45, 100, SIZE_MAX, &b), 0);
    assert_int_equal(b.n, 5);
    assert_int_equal(b.next, 50);
    tn_ilog_batch_fini(&b);
    assert_int_equal(tn_ilog_read(f->log, 50, 100, SIZE_MAX, &b), 0);
    assert_int_equal(b.n, 0);
    assert_int_equal(b.next, 50);
    tn_ilog_batch_fini(&b);
    assert_int_equal(tn_ilog_read(f->log, 51, 100, SIZE_MAX, &b), UV_EINVAL);
    assert_int_equal(tn_ilog_read(f->log, 0, 0, SIZE_MAX, &b), UV_EINVAL);
}

static void test_limits(void **state)
{
    fx_t *f = *state;
    f->opts.segment_bytes = 64 * 1024;
    open_log(f);
    uint32_t max = f->fx->opts.max_body;
    char *body = malloc((size_t)max + 1);
    char *key = malloc(65536);
    for (size_t i = 0; i <= max; i++)
        body[i] = (char)('a' + i % 26);
    memset(key, 'k', 65536);
    char topic[257];
    memset(topic, 'x', sizeof(topic));
    tn_irec_t r = {tn_iov(topic, 255), tn_iov(key, 65535), tn_iov(body, max), 3, true, 0, 9};
    uint64_t first;
    assert_int_equal(append_recs(f, &r, 1, &first), 0);
    assert_int_equal(first, 0);
    tn_irec_t small = {tn_iov("t", 1), tn_iov(NULL, 0), tn_iov("b", 1), 0, false, 0, 1};
    assert_int_equal(append_recs(f, &small, 1, &first), 0);
    assert_int_equal(first, 1);
    tn_irec_t bad = r;
    bad.body.len = (size_t)max + 1;
    assert_int_equal(append_recs(f, &bad, 1, NULL), TN_ETOOBIG);
    bad = r;
    bad.key.len = 65536;
    assert_int_equal(append_recs(f, &bad, 1, NULL), TN_ETOOBIG);
    bad = r;
    bad.topic.len = 256;
    assert_int_equal(append_recs(f, &bad, 1, NULL), UV_EINVAL);
    bad.topic.len = 0;
    assert_int_equal(append_recs(f, &bad, 1, NULL), UV_EINVAL);
    bad = r;
    bad.deliver_at_ms = -1;
    assert_int_equal(append_recs(f, &bad, 1, NULL), UV_EINVAL);
    assert_int_equal(append_recs(f, &r, 0, NULL), UV_EINVAL);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 2);
    tn_ilog_batch_t b;
    assert_int_equal(tn_ilog_read(f->log, 0, 10, 1, &b), 0);
    assert_int_equal(b.n, 1);
    assert_int_equal(b.recs[0].rec.body.len, max);
    assert_memory_equal(b.recs[0].rec.body.base, body, max);
    assert_int_equal(b.recs[0].rec.key.len, 65535);
    assert_int_equal(b.recs[0].rec.topic.len, 255);
    assert_true(b.recs[0].rec.pinned);
    assert_int_equal(b.recs[0].rec.partition, 3);
    tn_ilog_batch_fini(&b);
    free(body);
    free(key);
}

/* --- checkpoint and compaction ------------------------------------------------- */

static void test_checkpoint_compacts(void **state)
{
    fx_t *f = *state;
    f->opts.rotate_bytes = 1;
    open_log(f);
    append_n(f, 0, 120);
    uint64_t bases[64];
    size_t n = list_bases(f, bases, 64);
    assert_true(n >= 4);
    /* Above durable is refused. */
    tn_ilog_ckpt_t req;
    req.data = NULL;
    assert_int_equal(tn_ilog_checkpoint(f->log, &req, 121, on_ckpt), UV_EINVAL);
    /* Checkpoint inside the third segment: the first two go. */
    uint64_t at = bases[2] + 1;
    uint32_t deleted = 0;
    assert_int_equal(checkpoint(f, at, &deleted), 0);
    assert_int_equal(deleted, 2);
    assert_int_equal(tn_ilog_checkpoint_seq(f->log), at);
    assert_true(tu_file_size(seg_path(f, bases[0])) < 0);
    assert_true(tu_file_size(seg_path(f, bases[1])) < 0);
    assert_true(tu_file_size(seg_path(f, bases[2])) > 0);
    assert_int_equal(list_bases(f, bases + 10, 54), n - 2);
    /* Reading below the checkpoint works while its segment exists. */
    expect_all(f, bases[2], 120, 9);
    tn_ilog_batch_t b;
    assert_int_equal(tn_ilog_read(f->log, bases[2] - 1, 10, SIZE_MAX, &b), UV_ERANGE);
    assert_int_equal(tn_ilog_read(f->log, 0, 10, SIZE_MAX, &b), UV_ERANGE);
    /* It never moves back. */
    assert_int_equal(checkpoint(f, 1, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(tn_ilog_checkpoint_seq(f->log), at);
    reopen(f);
    assert_int_equal(tn_ilog_checkpoint_seq(f->log), at);
    assert_int_equal(tn_ilog_next_seq(f->log), 120);
    expect_all(f, bases[2], 120, 50);
    /* All of it: the large active segment rotates and goes too. */
    assert_int_equal(checkpoint(f, 120, &deleted), 0);
    assert_int_equal(deleted, n - 2);
    assert_int_equal(list_bases(f, bases, 64), 1);
    assert_int_equal(bases[0], 120);
    assert_int_equal(tu_file_size(seg_path(f, 120)), 0);
    tn_ilog_stats_t st;
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.pending_records, 0);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 120);
    assert_int_equal(tn_ilog_checkpoint_seq(f->log), 120);
    append_n(f, 120, 3);
    expect_all(f, 120, 123, 10);
    reopen(f);
    expect_all(f, 120, 123, 10);
}

/* A small active segment wholly below the checkpoint stays (rotating it
 * would make a file per checkpoint). */
static void test_small_active_segment_stays(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 3);
    uint32_t deleted = 9;
    assert_int_equal(checkpoint(f, 3, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_true(tu_file_size(seg_path(f, 0)) > 0);
    tn_ilog_stats_t st;
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.pending_records, 0);
    assert_int_equal(st.pending_bytes, 0);
    assert_int_equal(st.oldest_pending_ms, 0);
    expect_all(f, 0, 3, 10);
}

static void test_stats(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 30);
    tn_ilog_stats_t st;
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.next_seq, 30);
    assert_int_equal(st.durable_seq, 30);
    assert_int_equal(st.checkpoint_seq, 0);
    assert_int_equal(st.pending_records, 30);
    assert_int_equal(st.pending_bytes, st.bytes);
    assert_int_equal(st.oldest_pending_ms, 1700000000000LL);
    assert_int_equal(st.err, 0);
    size_t below = 0;
    for (uint64_t i = 0; i < 12; i++) {
        made_t m;
        make(&m, i);
        below += tn_irec_size(&m.rec);
    }
    assert_int_equal(checkpoint(f, 12, NULL), 0);
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.pending_records, 18);
    uint64_t pending = st.pending_bytes;
    assert_int_equal(st.oldest_pending_ms, 1700000000000LL + 12);
    reopen(f);
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.pending_records, 18);
    assert_int_equal(st.pending_bytes, pending);
    assert_int_equal(st.oldest_pending_ms, 1700000000000LL + 12);
    /* Caught up, then the next record is the oldest. */
    assert_int_equal(checkpoint(f, 30, NULL), 0);
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.pending_records, 0);
    assert_int_equal(st.pending_bytes, 0);
    assert_int_equal(st.oldest_pending_ms, 0);
    append_n(f, 30, 2);
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.pending_records, 2);
    assert_int_equal(st.oldest_pending_ms, 1700000000000LL + 30);
    made_t m30, m31;
    make(&m30, 30);
    make(&m31, 31);
    assert_int_equal(st.pending_bytes, tn_irec_size(&m30.rec) + tn_irec_size(&m31.rec));
    (void)below;
}

/* --- recovery ---------------------------------------------------------------- */

static void test_torn_tail_truncated(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 5);
    close_log(f);
    long size = tu_file_size(seg_path(f, 0));
    made_t m;
    make(&m, 4);
    long last = size - (long)tn_irec_size(&m.rec);
    /* An incomplete last frame. */
    tu_truncate_file(seg_path(f, 0), size - 3);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 4);
    assert_int_equal(tu_file_size(seg_path(f, 0)), last);
    expect_all(f, 0, 4, 10);
    append_n(f, 4, 2);
    close_log(f);
    /* Garbage after the last frame (a torn write of a round never synced). */
    size = tu_file_size(seg_path(f, 0));
    tu_patch_file(seg_path(f, 0), size, "TNI1\x05\x00\x00\x00garbage", 15);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 6);
    assert_int_equal(tu_file_size(seg_path(f, 0)), size);
    expect_all(f, 0, 6, 10);
}

/* Frames written in one round, torn in the middle: the later ones carry
 * no mark above the damage, so it is a torn tail. */
static void test_torn_round_truncated(void **state)
{
    fx_t *f = *state;
    f->opts.segment_bytes = 64 * 1024;
    open_log(f);
    append_n(f, 0, 2);
    made_t m[3];
    tn_irec_t recs[3];
    for (int i = 0; i < 3; i++) {
        make(&m[i], 2 + (uint64_t)i);
        recs[i] = m[i].rec;
    }
    assert_int_equal(append_recs(f, recs, 3, NULL), 0);
    close_log(f);
    long start = 0;
    for (uint64_t i = 0; i < 2; i++) {
        made_t k;
        make(&k, i);
        start += (long)tn_irec_size(&k.rec);
    }
    tu_patch_file(seg_path(f, 0), start + TN_ILOG_HDR + 3, "\xff", 1);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 2);
    assert_int_equal(tu_file_size(seg_path(f, 0)), start);
    expect_all(f, 0, 2, 10);
}

static void expect_refused(fx_t *f, const char *what)
{
    close_log(f);
    tu_fx_reopen(f->fx);
    char err[512] = "";
    assert_int_equal(try_open(f, err, sizeof(err)), TN_ECORRUPT);
    f->log = NULL;
    if (strstr(err, what) == NULL)
        fail_msg("error '%s' does not say '%s'", err, what);
}

/* Damage below a frame written by a later round (its sync mark is past
 * the damage) had been durable: refused. */
static void test_damage_before_durable_frame_refused(void **state)
{
    fx_t *f = *state;
    f->opts.segment_bytes = 64 * 1024;
    open_log(f);
    append_n(f, 0, 5);
    close_log(f);
    tu_patch_file(seg_path(f, 0), TN_ILOG_HDR + 4, "\xff", 1);
    expect_refused(f, "00000000000000000000.log: bad frame at byte 0 below a later frame");
}

static void test_sealed_damage_refused(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 60);
    uint64_t bases[64];
    assert_true(list_bases(f, bases, 64) >= 3);
    close_log(f);
    long size = tu_file_size(seg_path(f, bases[1]));
    tu_patch_file(seg_path(f, bases[1]), size - 2, "\x00\x01", 2);
    char name[64];
    snprintf(name, sizeof(name), "%020llu.log: bad frame at byte", (unsigned long long)bases[1]);
    expect_refused(f, name);
    /* A sealed segment cut short is no torn tail either. */
    tu_truncate_file(seg_path(f, bases[1]), size - 2);
    expect_refused(f, "incomplete frame");
}

static void test_missing_segment_refused(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 60);
    uint64_t bases[64];
    assert_true(list_bases(f, bases, 64) >= 3);
    close_log(f);
    assert_int_equal(tn_io_unlink(seg_path(f, bases[1])), 0);
    expect_refused(f, "the one before ends at");
}

static void write_ckpt_file(fx_t *f, uint64_t next)
{
    unsigned char p[16];
    tn_put_u32(p, 0x314B4E54u);
    tn_put_u64(p + 8, next);
    tn_put_u32(p + 4, tn_crc32c(0, p + 8, 8));
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/ingress", f->fx->dir);
    assert_int_equal(tn_io_write_file_atomic(dir, "checkpoint", p, sizeof(p)), 0);
}

static void test_checkpoint_ahead_refused(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 5);
    close_log(f);
    write_ckpt_file(f, 6);
    expect_refused(f, "checkpoint 6 is ahead of the recovered next seq 5");
    write_ckpt_file(f, 5);
    open_log(f);
    assert_int_equal(tn_ilog_checkpoint_seq(f->log), 5);
    close_log(f);
    /* A damaged checkpoint file is refused too. */
    tu_patch_file(ingress_path(f, "checkpoint"), 9, "\x07", 1);
    expect_refused(f, "checkpoint");
    /* A checkpoint over an empty directory. */
    write_ckpt_file(f, 3);
    assert_int_equal(tn_io_unlink(seg_path(f, 0)), 0);
    expect_refused(f, "ahead of the recovered next seq 0");
}

/* A crash between the checkpoint's rename and the unlinks leaves the
 * segments; the next open deletes them. */
static void test_interrupted_compaction_finished(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 60);
    uint64_t bases[64];
    size_t n = list_bases(f, bases, 64);
    assert_true(n >= 3);
    close_log(f);
    write_ckpt_file(f, bases[2]);
    open_log(f);
    assert_int_equal(list_bases(f, bases + 10, 54), n - 2);
    expect_all(f, bases[2], 60, 100);
}

/* --- latched errors ------------------------------------------------------------- */

/* A write that finds the disk full fails its appends alone: the segment
 * is cut back, their seqs given back, and the next append writes (as a
 * rotation whose next segment cannot be created: the old one stays). */
static void test_full_disk_not_latched(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 3);
    made_t m;
    make(&m, 3);
    tn_io_fail_write_after(0, UV_ENOSPC);
    assert_int_equal(append_recs(f, &m.rec, 1, NULL), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_ilog_err(f->log), 0);
    assert_int_equal(tn_ilog_next_seq(f->log), 3);
    append_n(f, 3, 10);
    /* A batch that overflows the segment: the rotation's create fails. */
    made_t big[20];
    tn_irec_t recs[20];
    for (int i = 0; i < 20; i++) {
        make(&big[i], 13 + (uint64_t)i);
        recs[i] = big[i].rec;
    }
    uint64_t bases[8];
    tn_io_fail_create_after(0, -EDQUOT);
    int rc = append_recs(f, recs, 20, NULL);
    tn_io_fail_create_after(-1, 0);
    assert_int_equal(rc, -EDQUOT);
    assert_int_equal(tn_ilog_err(f->log), 0);
    assert_int_equal(tn_ilog_next_seq(f->log), 13);
    assert_int_equal(list_bases(f, bases, 8), 1);
    uint64_t first;
    assert_int_equal(append_recs(f, recs, 20, &first), 0);
    assert_int_equal(first, 13);
    assert_int_equal(list_bases(f, bases, 8), 2);
    expect_all(f, 0, 33, 5);
    reopen(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 33);
    expect_all(f, 0, 33, 5);
}

/* An append's write that finds the disk full partway (its first frames
 * written, then ENOSPC) and is cut back: a power cut right after it was
 * answered with the error leaves none of its records in the log, whatever
 * the disk kept of the unsynced write (the cut is synced before the
 * answer). Before, the cut was not synced: under some seeds the first
 * frames came back, records answered with the error delivered. */
static void test_full_disk_cut_back_survives_power_loss(void **state)
{
    fx_t *f = *state;
    int resurrected = 0;
    made_t m[5];
    tn_irec_t recs[5];
    for (int seed = 0; seed < 24; seed++) {
        assert_int_equal(tn_io_sim_start(f->fx->dir), 0);
        open_log(f);
        uint64_t next = tn_ilog_next_seq(f->log);
        append_n(f, next, 2);
        for (int i = 0; i < 5; i++) {
            make(&m[i], next + 2 + (uint64_t)i);
            recs[i] = m[i].rec;
        }
        /* Two of the five frames reach the file, then the disk is full. */
        tn_io_fail_write_partial(0, UV_ENOSPC, tn_irec_size(&recs[0]) + tn_irec_size(&recs[1]));
        assert_int_equal(append_recs(f, recs, 5, NULL), UV_ENOSPC);
        tn_io_fail_write_after(-1, 0);
        assert_int_equal(tn_ilog_err(f->log), 0);
        tn_io_sim_cut();
        close_log(f);
        assert_int_equal(tn_io_sim_powerloss((uint64_t)seed * 7919 + 3), 0);
        open_log(f);
        assert_int_equal(tn_ilog_err(f->log), 0);
        if (tn_ilog_next_seq(f->log) != next + 2) {
            printf("seed %d: next seq %" PRIu64 " after the power cut (%" PRIu64
                   " on were refused)\n",
                   seed, tn_ilog_next_seq(f->log), next + 2);
            resurrected++;
        }
        close_log(f);
    }
    assert_int_equal(resurrected, 0);
    /* That sync is never retried: its failure is latched. */
    open_log(f);
    uint64_t next = tn_ilog_next_seq(f->log);
    append_n(f, next, 1);
    make(&m[0], next + 1);
    tn_io_fail_write_partial(0, UV_ENOSPC, TN_ILOG_HDR);
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(append_recs(f, &m[0].rec, 1, NULL), UV_ENOSPC);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_ilog_err(f->log), UV_EIO);
}

static void test_write_error_latched(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 3);
    tn_io_fail_write_after(0, UV_EIO);
    made_t m;
    make(&m, 3);
    assert_int_equal(append_recs(f, &m.rec, 1, NULL), UV_EIO);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tn_ilog_err(f->log), UV_EIO);
    assert_non_null(strstr(tn_ilog_errmsg(f->log), "writing segment"));
    assert_int_equal(append_recs(f, &m.rec, 1, NULL), UV_EIO);
    tn_ilog_stats_t st;
    tn_ilog_stats(f->log, &st);
    assert_int_equal(st.err, UV_EIO);
    /* What was durable before still reads. */
    expect_all(f, 0, 3, 10);
    reopen(f);
    assert_int_equal(tn_ilog_err(f->log), 0);
    append_n(f, 3, 1);
    expect_all(f, 0, 4, 10);
}

static void test_sync_error_latched(void **state)
{
    fx_t *f = *state;
    open_log(f);
    append_n(f, 0, 3);
    tn_io_fail_sync_after(0, UV_EIO);
    made_t m;
    make(&m, 3);
    assert_int_equal(append_recs(f, &m.rec, 1, NULL), UV_EIO);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(tn_ilog_err(f->log), UV_EIO);
    assert_non_null(strstr(tn_ilog_errmsg(f->log), "fdatasync"));
    assert_int_equal(tn_ilog_durable_seq(f->log), 3);
    /* Never retried, though fsync works again. */
    assert_int_equal(append_recs(f, &m.rec, 1, NULL), UV_EIO);
    tn_ilog_ckpt_t req;
    ckwait_t w = {0, 0, 0};
    req.data = &w;
    assert_int_equal(tn_ilog_checkpoint(f->log, &req, 2, on_ckpt), 0);
    while (!w.done)
        uv_run(&f->fx->loop, UV_RUN_ONCE);
    assert_int_equal(w.status, UV_EIO);
}

typedef struct {
    fx_t *f;
    int done;
    int status;
    uint64_t durable_at_cb;
} dwait_t;

static void on_append_durable(tn_ilog_append_t *a, int status)
{
    dwait_t *w = a->data;
    w->done = 1;
    w->status = status;
    w->durable_at_cb = tn_ilog_durable_seq(w->f->log);
}

/* A batch written before a rotation whose fdatasync fails is not
 * acknowledged: every append that succeeds is below the durable seq when
 * its callback runs (the power-loss test found the first one acked). */
static void test_rotation_sync_error_fails_the_round(void **state)
{
    fx_t *f = *state;
    open_log(f);
    static char body[3][1500];
    tn_irec_t recs[3];
    tn_ilog_append_t a[3];
    dwait_t w[3];
    for (int i = 0; i < 3; i++) {
        memset(body[i], 'a' + i, sizeof(body[i]));
        recs[i] =
            (tn_irec_t){tn_iov("t", 1), tn_iov(NULL, 0), tn_iov(body[i], 1500), 0, false, 0, i};
        w[i] = (dwait_t){f, 0, 0, 0};
        a[i].data = &w[i];
    }
    /* The first append's sync is slow: once it is written, the other two
     * queue up behind it and share the next round, where the third
     * overflows the 4 KiB segment and the rotation's fdatasync fails. */
    tn_io_delay_sync(100 * 1000 * 1000);
    tn_io_fail_sync_after(1, UV_EIO);
    assert_int_equal(tn_ilog_append(f->log, &a[0], &recs[0], 1, on_append_durable), 0);
    while (tn_ilog_next_seq(f->log) == 0)
        uv_sleep(1);
    for (int i = 1; i < 3; i++)
        assert_int_equal(tn_ilog_append(f->log, &a[i], &recs[i], 1, on_append_durable), 0);
    for (int i = 0; i < 3; i++) {
        while (!w[i].done)
            uv_run(&f->fx->loop, UV_RUN_ONCE);
    }
    tn_io_delay_sync(0);
    tn_io_fail_sync_after(-1, 0);
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        if (w[i].status == 0)
            assert_true(a[i].first_seq < w[i].durable_at_cb);
        else
            failed++;
    }
    assert_int_equal(w[0].status, 0);
    assert_int_equal(w[1].status, UV_EIO);
    assert_int_equal(w[2].status, UV_EIO);
    assert_int_equal(failed, 2);
    assert_int_equal(tn_ilog_err(f->log), UV_EIO);
}

typedef struct {
    int acked;
    bool closed_after_all;
} inflight_t;

static inflight_t inflight;

static void on_inflight_append(tn_ilog_append_t *a, int status)
{
    (void)a;
    assert_int_equal(status, 0);
    inflight.acked++;
}

static void on_inflight_closed(tn_ilog_t *l)
{
    (void)l;
    inflight.closed_after_all = inflight.acked == 5;
    closed = true;
}

/* Close waits for the appends in flight; the store closes a log left
 * open; a second open of the same store's log is refused. */
static void test_close(void **state)
{
    fx_t *f = *state;
    open_log(f);
    tn_ilog_t *other;
    char err[256] = "";
    assert_int_equal(tn_ilog_open_opts(f->fx->store, &f->opts, &other, err, sizeof(err)), UV_EBUSY);
    assert_non_null(strstr(err, "open already"));
    made_t m[5];
    tn_ilog_append_t a[5];
    inflight = (inflight_t){0, false};
    for (int i = 0; i < 5; i++) {
        make(&m[i], (uint64_t)i);
        assert_int_equal(tn_ilog_append(f->log, &a[i], &m[i].rec, 1, on_inflight_append), 0);
    }
    closed = false;
    tn_ilog_close(f->log, on_inflight_closed);
    assert_int_equal(tn_ilog_append(f->log, &a[0], &m[0].rec, 1, on_inflight_append), TN_ECLOSED);
    f->log = NULL;
    while (!closed)
        uv_run(&f->fx->loop, UV_RUN_ONCE);
    assert_true(inflight.closed_after_all);
    open_log(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 5);
    append_n(f, 5, 2);
    /* Left open: the store's close closes it. */
    f->log = NULL;
    tu_fx_reopen(f->fx);
    open_log(f);
    assert_int_equal(tn_ilog_next_seq(f->log), 7);
    expect_all(f, 0, 7, 10);
}

/* --- threads ---------------------------------------------------------------- */

typedef struct {
    tn_ilog_t *log;
    uint64_t target;
    int bad;
} reader_t;

static void reader_main(void *arg)
{
    reader_t *r = arg;
    uint64_t seq = 0;
    while (seq < r->target && !r->bad) {
        tn_ilog_batch_t b;
        int rc = tn_ilog_read(r->log, seq, 16, 8192, &b);
        if (rc == UV_ERANGE) {
            /* Compacted away meanwhile: go on from the checkpoint. */
            uint64_t ck = tn_ilog_checkpoint_seq(r->log);
            if (ck <= seq)
                r->bad = 1;
            seq = ck;
            continue;
        }
        if (rc != 0) {
            r->bad = 1;
            break;
        }
        if (b.n == 0)
            uv_sleep(1);
        for (uint32_t i = 0; i < b.n; i++) {
            made_t m;
            make(&m, seq + i);
            if (b.recs[i].seq != seq + i || b.recs[i].rec.body.len != m.rec.body.len ||
                memcmp(b.recs[i].rec.body.base, m.body, m.rec.body.len) != 0)
                r->bad = 1;
        }
        seq += b.n;
        tn_ilog_batch_fini(&b);
    }
}

static void test_reads_from_another_thread(void **state)
{
    fx_t *f = *state;
    open_log(f);
    reader_t r = {f->log, 200, 0};
    uv_thread_t t;
    assert_int_equal(uv_thread_create(&t, reader_main, &r), 0);
    append_n(f, 0, 100);
    assert_int_equal(checkpoint(f, 50, NULL), 0);
    append_n(f, 100, 100);
    uv_thread_join(&t);
    assert_int_equal(r.bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test_setup_teardown(test_empty_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_round, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rotation_keeps_seqs_dense, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_compacts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_active_segment_stays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_round_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_before_durable_frame_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sealed_damage_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_segment_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_ahead_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interrupted_compaction_finished, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_not_latched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_cut_back_survives_power_loss, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_write_error_latched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_error_latched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rotation_sync_error_fails_the_round, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_from_another_thread, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
