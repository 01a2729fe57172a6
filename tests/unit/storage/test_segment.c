/* Segment files: scans of clean, torn and damaged segments (including a
 * torn tail at every byte offset of the last record), the durable-damage
 * rule, sidecar index write/open/load, reads through the index, and the
 * listing of a log's directory. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "storage/io.h"
#include "storage/segment.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *dir;
    char path[4096];
    int fd;
    uint64_t len;
    uint64_t pos[256]; /* start of each record */
    uint32_t n;
} segfile_t;

/* Append a record to the file, as the log would. */
static void add(segfile_t *s, uint64_t offset, const char *body, uint16_t flags, uint32_t mark)
{
    unsigned char hdr[TN_REC_HDR];
    tn_rec_hdr_t h = {offset, 1000 + (int64_t)offset, 0, (uint32_t)strlen(body), mark, 0, flags};
    tn_rec_encode(hdr, &h, NULL, body);
    tn_iov_t iov[2] = {tn_iov(hdr, TN_REC_HDR), tn_iov(body, strlen(body))};
    assert_int_equal(tn_io_pwritev(s->fd, iov, 2, s->len), 0);
    s->pos[s->n++] = s->len;
    s->len += tn_rec_size(&h);
}

static void seg_setup(segfile_t *s, uint64_t base, int count)
{
    memset(s, 0, sizeof(*s));
    s->dir = tu_tempdir();
    char name[64];
    tn_seg_name(base, "log", name, sizeof(name));
    snprintf(s->path, sizeof(s->path), "%s/%s", s->dir, name);
    assert_int_equal(tn_io_open(s->path, O_RDWR | O_CREAT, 0644, &s->fd), 0);
    for (int i = 0; i < count; i++) {
        char body[64];
        snprintf(body, sizeof(body), "record number %d with some padding", i);
        add(s, base + (uint64_t)i, body, 0, 0);
    }
}

static void seg_teardown(segfile_t *s)
{
    tn_io_close(s->fd);
    tu_rmrf(s->dir);
    free(s->dir);
}

static void test_names(void **state)
{
    (void)state;
    char name[64];
    tn_seg_name(12345, "log", name, sizeof(name));
    assert_string_equal(name, "00000000000000012345.log");
    uint64_t base;
    assert_true(tn_seg_parse_name(name, &base));
    assert_int_equal(base, 12345);
    assert_false(tn_seg_parse_name("00000000000000012345.idx", &base));
    assert_false(tn_seg_parse_name("0000000000000001234x.log", &base));
    assert_false(tn_seg_parse_name("99999999999999999999.log", &base)); /* > 2^64 */
    assert_false(tn_seg_parse_name("123.log", &base));
}

/* Create an empty file dir/name. */
static void touch(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd;
    assert_int_equal(tn_io_open(path, O_RDWR | O_CREAT, 0644, &fd), 0);
    tn_io_close(fd);
}

static bool exists(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* list (tn__seg_list or tn__seg_bases) finds in dir the bases want[0..n),
 * in that order. */
static void expect_bases(int (*list)(const char *, uint64_t **, size_t *), const char *dir,
                         const uint64_t *want, size_t nwant)
{
    uint64_t *bases = NULL;
    size_t n = 0;
    assert_int_equal(list(dir, &bases, &n), 0);
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bases[i], want[i]);
    tn_free(bases);
}

/* tn__seg_list: the segments' bases in order, whatever the directory's
 * order; other files left alone; "*.tmp" (an atomic write cut short)
 * removed; an empty directory; a missing one. tn__seg_bases: the same
 * bases, every "*.tmp" left where it is. */
static void test_list(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uint64_t *bases = NULL;
    size_t n = 99;
    assert_int_equal(tn__seg_list(dir, &bases, &n), 0);
    assert_int_equal(n, 0);
    assert_null(bases);
    const uint64_t want[] = {0, 7, 4096, 70000, 123456789};
    const int order[] = {3, 0, 4, 2, 1};
    for (int i = 0; i < 5; i++) {
        char name[64];
        tn_seg_name(want[order[i]], "log", name, sizeof(name));
        touch(dir, name);
    }
    touch(dir, "00000000000000004096.idx");
    touch(dir, "00000000000000004096.idx.tmp");
    touch(dir, "checkpoint.tmp");
    touch(dir, "checkpoint");
    touch(dir, "notes.log");
    expect_bases(tn__seg_bases, dir, want, 5);
    assert_true(exists(dir, "00000000000000004096.idx.tmp"));
    assert_true(exists(dir, "checkpoint.tmp"));
    expect_bases(tn__seg_list, dir, want, 5);
    assert_false(exists(dir, "00000000000000004096.idx.tmp"));
    assert_false(exists(dir, "checkpoint.tmp"));
    assert_true(exists(dir, "00000000000000004096.idx"));
    assert_true(exists(dir, "checkpoint"));
    assert_true(exists(dir, "notes.log"));
    char missing[4096];
    snprintf(missing, sizeof(missing), "%s/none", dir);
    bases = NULL;
    assert_int_equal(tn__seg_list(missing, &bases, &n), UV_ENOENT);
    assert_null(bases);
    assert_int_equal(tn__seg_bases(missing, &bases, &n), UV_ENOENT);
    assert_null(bases);
    tu_rmrf(dir);
    free(dir);
}

static void test_clean_scan(void **state)
{
    (void)state;
    segfile_t s;
    seg_setup(&s, 100, 50);
    tn_seg_scan_t scan;
    assert_int_equal(tn_seg_scan(s.fd, s.len, 100, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, 0);
    assert_int_equal(scan.count, 50);
    assert_int_equal(scan.valid_len, s.len);
    assert_int_equal(scan.first_ns, 1100);
    assert_int_equal(scan.last_ns, 1149);
    /* The wrong base is corruption at byte 0. */
    assert_int_equal(tn_seg_scan(s.fd, s.len, 0, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, TN_ECORRUPT);
    assert_int_equal(scan.valid_len, 0);
    seg_teardown(&s);
}

static void test_torn_tail_at_every_byte(void **state)
{
    (void)state;
    segfile_t s;
    seg_setup(&s, 0, 5);
    uint64_t last = s.pos[4];
    for (uint64_t cut = last; cut < s.len; cut++) {
        tn_seg_scan_t scan;
        assert_int_equal(tn_seg_scan(s.fd, cut, 0, 256, NULL, &scan), 0);
        assert_int_equal(scan.tail, cut == last ? 0 : TN_ESHORT);
        assert_int_equal(scan.count, 4);
        assert_int_equal(scan.valid_len, last);
        assert_false(scan.durable_damage);
    }
    /* Garbage (zeros) after the last record is a torn tail too. */
    unsigned char zeros[100] = {0};
    assert_int_equal(tn_io_pwrite(s.fd, zeros, sizeof(zeros), s.len), 0);
    tn_seg_scan_t scan;
    assert_int_equal(tn_seg_scan(s.fd, s.len + sizeof(zeros), 0, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, TN_ECORRUPT);
    assert_int_equal(scan.count, 5);
    assert_false(scan.durable_damage);
    seg_teardown(&s);
}

static void test_damage_below_sync_mark(void **state)
{
    (void)state;
    segfile_t s;
    seg_setup(&s, 0, 3);
    uint64_t durable = s.len;
    add(&s, 3, "written after a sync", 0, (uint32_t)durable);
    /* Flip a body byte of record 1 (durable when record 3 was written). */
    unsigned char b;
    size_t n;
    assert_int_equal(tn_io_pread(s.fd, &b, 1, s.pos[1] + TN_REC_HDR + 2, &n), 0);
    b ^= 0x40;
    assert_int_equal(tn_io_pwrite(s.fd, &b, 1, s.pos[1] + TN_REC_HDR + 2), 0);
    tn_seg_scan_t scan;
    assert_int_equal(tn_seg_scan(s.fd, s.len, 0, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, TN_ECORRUPT);
    assert_int_equal(scan.count, 1);
    assert_true(scan.durable_damage);
    seg_teardown(&s);

    /* The same damage where no later record claims durability: torn. */
    seg_setup(&s, 0, 4);
    assert_int_equal(tn_io_pread(s.fd, &b, 1, s.pos[1] + TN_REC_HDR + 2, &n), 0);
    b ^= 0x40;
    assert_int_equal(tn_io_pwrite(s.fd, &b, 1, s.pos[1] + TN_REC_HDR + 2), 0);
    assert_int_equal(tn_seg_scan(s.fd, s.len, 0, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, TN_ECORRUPT);
    assert_false(scan.durable_damage);
    seg_teardown(&s);
}

static void test_open_batch_is_torn(void **state)
{
    (void)state;
    segfile_t s;
    seg_setup(&s, 0, 2);
    uint64_t batch_start = s.len;
    add(&s, 2, "batch part one", TN_REC_F_MORE, 0);
    add(&s, 3, "batch part two", TN_REC_F_MORE, 0);
    /* The batch's last record never arrived. */
    tn_seg_scan_t scan;
    assert_int_equal(tn_seg_scan(s.fd, s.len, 0, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, TN_ESHORT);
    assert_int_equal(scan.count, 2);
    assert_int_equal(scan.valid_len, batch_start);
    add(&s, 4, "batch end", 0, 0);
    assert_int_equal(tn_seg_scan(s.fd, s.len, 0, 256, NULL, &scan), 0);
    assert_int_equal(scan.tail, 0);
    assert_int_equal(scan.count, 5);
    seg_teardown(&s);
}

static void test_index_and_reads(void **state)
{
    (void)state;
    segfile_t s;
    seg_setup(&s, 1000, 200);
    tn_seg_t *seg;
    assert_int_equal(tn_seg_new(s.path, 1000, &seg), 0);
    tn_seg_scan_t scan;
    assert_int_equal(tn_seg_scan(s.fd, s.len, 1000, 512, seg, &scan), 0);
    assert_true(seg->nidx > 10);
    assert_int_equal(seg->idx[0].rel, 0);
    seg->count = scan.count;
    seg->size = scan.valid_len;
    seg->first_ns = scan.first_ns;
    seg->last_ns = scan.last_ns;
    assert_int_equal(tn_seg_index_write(seg, s.dir), 0);

    /* A fresh segment object trusts the sidecar without scanning. */
    tn_seg_t *again;
    assert_int_equal(tn_seg_new(s.path, 1000, &again), 0);
    assert_int_equal(tn_io_open(s.path, O_RDONLY, 0, &again->fd), 0);
    assert_int_equal(tn_seg_index_open(again, s.len), 0);
    assert_int_equal(again->count, 200);
    assert_int_equal(again->last_ns, 1000 + 1199);
    assert_int_equal(tn_seg_index_open(again, s.len + 1), TN_ECORRUPT); /* length mismatch */
    assert_int_equal(tn_seg_index_load(again), 0);
    assert_int_equal(again->nidx, seg->nidx);

    tn_buf_t scratch;
    tn_buf_init(&scratch);
    for (uint64_t off = 1000; off < 1200; off++) {
        tn_rec_t rec;
        uint64_t start = tn_seg_index_find(again, off);
        assert_true(start <= s.pos[off - 1000]);
        assert_int_equal(tn_seg_read_at(again, start, again->size, off, &scratch, &rec), 0);
        char body[64];
        snprintf(body, sizeof(body), "record number %d with some padding", (int)(off - 1000));
        assert_int_equal(rec.h.body_len, strlen(body));
        assert_memory_equal(rec.body, body, rec.h.body_len);
    }
    tn_buf_fini(&scratch);

    /* A damaged sidecar is refused. */
    char idx[4096];
    snprintf(idx, sizeof(idx), "%.*s.idx", (int)(strlen(s.path) - 4), s.path);
    unsigned char junk = 0x5a;
    tu_patch_file(idx, 20, &junk, 1);
    assert_int_equal(tn_seg_index_open(again, s.len), TN_ECORRUPT);
    tu_patch_file(idx, TN_SEG_IDX_HDR + 3, &junk, 1);
    assert_int_equal(tn_seg_index_load(again), TN_ECORRUPT);
    tn_seg_unref(again);
    tn_seg_unref(seg);
    seg_teardown(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_clean_scan),
        cmocka_unit_test(test_torn_tail_at_every_byte),
        cmocka_unit_test(test_damage_below_sync_mark),
        cmocka_unit_test(test_open_batch_is_torn),
        cmocka_unit_test(test_index_and_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
