/* The I/O shim's power-loss simulator: what is synced survives exactly;
 * what is not may be dropped, kept or torn; a directory entry needs a
 * directory fsync; after the cut every operation fails. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "storage/io.h"

#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

static void path_in(char *buf, const char *dir, const char *name)
{
    snprintf(buf, 4096, "%s/%s", dir, name);
}

static void test_synced_survives(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, "a");
    for (uint64_t seed = 1; seed <= 50; seed++) {
        assert_int_equal(tn_io_sim_start(dir), 0);
        int fd;
        assert_int_equal(tn_io_open(p, O_RDWR | O_CREAT | O_TRUNC, 0644, &fd), 0);
        assert_int_equal(tn_io_pwrite(fd, "hello world", 11, 0), 0);
        assert_int_equal(tn_io_fdatasync(fd), 0);
        assert_int_equal(tn_io_fsync_dir(dir), 0);
        assert_int_equal(tn_io_pwrite(fd, "XXXXX", 5, 0), 0); /* never synced */
        tn_io_close(fd);
        assert_int_equal(tn_io_sim_powerloss(seed), 0);
        tn_buf_t b;
        tn_buf_init(&b);
        assert_int_equal(tn_io_read_file(p, 1 << 20, &b), 0);
        assert_int_equal(b.len, 11);
        /* Either the old bytes or the new ones, sector by sector. */
        assert_true(memcmp(b.base, "hello world", 11) == 0 ||
                    memcmp(b.base, "XXXXX world", 11) == 0);
        tn_buf_fini(&b);
    }
    tu_rmrf(dir);
    free(dir);
}

static void test_unsynced_create_may_vanish(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, "new");
    int vanished = 0, kept = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        remove(p);
        assert_int_equal(tn_io_sim_start(dir), 0);
        int fd;
        assert_int_equal(tn_io_open(p, O_RDWR | O_CREAT, 0644, &fd), 0);
        assert_int_equal(tn_io_pwrite(fd, "data", 4, 0), 0);
        assert_int_equal(tn_io_fdatasync(fd), 0); /* data synced, entry not */
        tn_io_close(fd);
        assert_int_equal(tn_io_sim_powerloss(seed), 0);
        long size = tu_file_size(p);
        if (size < 0)
            vanished++;
        else {
            assert_int_equal(size, 4);
            kept++;
        }
    }
    assert_true(vanished > 0 && kept > 0);
    tu_rmrf(dir);
    free(dir);
}

static void test_rename_is_atomic(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, "file");
    for (uint64_t seed = 1; seed <= 60; seed++) {
        assert_int_equal(tn_io_sim_start(dir), 0);
        assert_int_equal(tn_io_write_file_atomic(dir, "file", "version-one", 11), 0);
        assert_int_equal(tn_io_sim_powerloss(seed), 0);
        assert_int_equal(tn_io_sim_start(dir), 0);
        int fd;
        char tmp[4096];
        path_in(tmp, dir, "file.tmp");
        /* Second version written but its rename's directory never synced. */
        assert_int_equal(tn_io_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644, &fd), 0);
        assert_int_equal(tn_io_pwrite(fd, "version-two", 11, 0), 0);
        assert_int_equal(tn_io_fdatasync(fd), 0);
        tn_io_close(fd);
        assert_int_equal(tn_io_rename(tmp, p), 0);
        assert_int_equal(tn_io_sim_powerloss(seed * 7), 0);
        tn_buf_t b;
        tn_buf_init(&b);
        assert_int_equal(tn_io_read_file(p, 100, &b), 0);
        assert_int_equal(b.len, 11);
        assert_true(memcmp(b.base, "version-one", 11) == 0 ||
                    memcmp(b.base, "version-two", 11) == 0);
        tn_buf_fini(&b);
        remove(tmp);
    }
    tu_rmrf(dir);
    free(dir);
}

static void test_cut_stops_everything(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, "f");
    assert_int_equal(tn_io_sim_start(dir), 0);
    int fd;
    assert_int_equal(tn_io_open(p, O_RDWR | O_CREAT, 0644, &fd), 0);
    long before = tn_io_sim_ops();
    tn_io_sim_cut_after(1);
    assert_int_equal(tn_io_pwrite(fd, "a", 1, 0), 0);
    assert_int_equal(tn_io_pwrite(fd, "b", 1, 1), UV_EIO);
    assert_true(tn_io_sim_is_cut());
    assert_int_equal(tn_io_fdatasync(fd), UV_EIO);
    assert_int_equal(tn_io_fsync_dir(dir), UV_EIO);
    size_t n;
    char c;
    assert_int_equal(tn_io_pread(fd, &c, 1, 0, &n), UV_EIO);
    assert_true(tn_io_sim_ops() > before);
    tn_io_close(fd);
    assert_int_equal(tn_io_sim_powerloss(3), 0);
    assert_false(tn_io_sim_is_cut());
    tu_rmrf(dir);
    free(dir);
}

/* More vectors than one pwritev takes (IOV_MAX, 1024): written in
 * order, in several calls. */
static void test_pwritev_many_vectors(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, "many");
    enum { N = 3000 };
    static char bytes[N];
    static tn_iov_t iov[N];
    for (int i = 0; i < N; i++) {
        bytes[i] = (char)('a' + i % 26);
        iov[i] = tn_iov(&bytes[i], 1);
    }
    int fd;
    assert_int_equal(tn_io_open(p, O_RDWR | O_CREAT | O_TRUNC, 0644, &fd), 0);
    assert_int_equal(tn_io_pwrite(fd, "head:", 5, 0), 0);
    assert_int_equal(tn_io_pwritev(fd, iov, N, 5), 0);
    tn_io_close(fd);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_io_read_file(p, 1 << 20, &b), 0);
    assert_int_equal(b.len, 5 + N);
    assert_memory_equal(b.base, "head:", 5);
    assert_memory_equal(b.base + 5, bytes, N);
    tn_buf_fini(&b);
    tu_rmrf(dir);
    free(dir);
}

/* A short write (here: the file size limit cuts the first call) goes on
 * from the byte it stopped at, and the error of the next call is
 * returned; what was written before it is in place. */
static void test_pwritev_short_write(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, "short");
    char x[60], y[60], z[60];
    memset(x, 'x', sizeof(x));
    memset(y, 'y', sizeof(y));
    memset(z, 'z', sizeof(z));
    tn_iov_t iov[3] = {tn_iov(x, 60), tn_iov(y, 60), tn_iov(z, 60)};
    int fd;
    assert_int_equal(tn_io_open(p, O_RDWR | O_CREAT | O_TRUNC, 0644, &fd), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = tn_io_pwritev(fd, iov, 3, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, UV_EFBIG);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_io_read_file(p, 1 << 20, &b), 0);
    assert_int_equal(b.len, 100);
    assert_memory_equal(b.base, x, 60);
    assert_memory_equal(b.base + 60, y, 40);
    tn_buf_reset(&b);
    /* The caller's vectors are untouched. */
    assert_ptr_equal(iov[1].base, y);
    assert_int_equal(iov[1].len, 60);
    /* A second try with a limit past the end writes everything. */
    assert_int_equal(tn_io_pwritev(fd, iov, 3, 0), 0);
    tn_io_close(fd);
    assert_int_equal(tn_io_read_file(p, 1 << 20, &b), 0);
    assert_int_equal(b.len, 180);
    assert_memory_equal(b.base, x, 60);
    assert_memory_equal(b.base + 60, y, 60);
    assert_memory_equal(b.base + 120, z, 60);
    tn_buf_fini(&b);
    tu_rmrf(dir);
    free(dir);
}

/* Three files synced together: each result in its slot, a bad descriptor
 * failing alone, and what was synced surviving a simulated power cut (the
 * simulator makes it go one by one through the shim). */
static void test_fdatasync_many(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[3][4096];
    int fds[3], rcs[3];
    tn_io_syncs_t syncs = {0};
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "f%d", i);
        path_in(p[i], dir, name);
        assert_int_equal(tn_io_open(p[i], O_RDWR | O_CREAT | O_TRUNC, 0644, &fds[i]), 0);
        assert_int_equal(tn_io_pwrite(fds[i], "abc", 3, 0), 0);
    }
    assert_int_equal(tn_io_fsync_dir(dir), 0);
    for (int round = 0; round < 3; round++) {
        memset(rcs, 0x7f, sizeof(rcs));
        tn_io_fdatasync_many(&syncs, fds, rcs, 3);
        for (int i = 0; i < 3; i++)
            assert_int_equal(rcs[i], 0);
    }
    /* A closed descriptor in the middle, then first: only its slot fails. */
    int bad[3] = {fds[0], 1 << 20, fds[2]};
    tn_io_fdatasync_many(&syncs, bad, rcs, 3);
    assert_int_equal(rcs[0], 0);
    assert_int_equal(rcs[1], UV_EBADF);
    assert_int_equal(rcs[2], 0);
    int bad_first[2] = {1 << 20, fds[1]};
    tn_io_fdatasync_many(&syncs, bad_first, rcs, 2);
    assert_int_equal(rcs[0], UV_EBADF);
    assert_int_equal(rcs[1], 0);
    /* An injected sync failure hits the first sync, as with tn_io_fdatasync. */
    tn_io_fail_sync_after(0, UV_EIO);
    tn_io_fdatasync_many(&syncs, fds, rcs, 3);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(rcs[0], UV_EIO);
    assert_int_equal(rcs[1], 0);
    assert_int_equal(rcs[2], 0);
    for (int i = 0; i < 3; i++)
        tn_io_close(fds[i]);
    /* Under the simulator: synced together, kept whatever the cut does. */
    for (uint64_t seed = 1; seed <= 20; seed++) {
        assert_int_equal(tn_io_sim_start(dir), 0);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(tn_io_open(p[i], O_RDWR, 0644, &fds[i]), 0);
            assert_int_equal(tn_io_pwrite(fds[i], "xyz", 3, 3), 0);
        }
        tn_io_fdatasync_many(&syncs, fds, rcs, 3);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(rcs[i], 0);
            tn_io_close(fds[i]);
        }
        assert_int_equal(tn_io_sim_powerloss(seed), 0);
        for (int i = 0; i < 3; i++) {
            tn_buf_t b;
            tn_buf_init(&b);
            assert_int_equal(tn_io_read_file(p[i], 1 << 20, &b), 0);
            assert_int_equal(b.len, 6);
            assert_memory_equal(b.base, "abcxyz", 6);
            tn_buf_fini(&b);
        }
    }
    tn_io_syncs_fini(&syncs);
    tu_rmrf(dir);
    free(dir);
}

typedef struct {
    const char *dir;
    int failures;
} racer_t;

static void race_writes(void *arg)
{
    racer_t *r = arg;
    for (int i = 0; i < 200; i++)
        if (tn_io_write_file_atomic(r->dir, "stamp", "0123456789", 10) != 0)
            r->failures++;
}

typedef struct {
    const char *dir;
    atomic_bool stop;
    long renames;
    int failures;
} replacer_t;

/* Replace dir/ckpt by rename as fast as it goes (no syncs: only the
 * directory entries matter here). */
static void replace_loop(void *arg)
{
    replacer_t *r = arg;
    char tmp[4096], dst[4096];
    path_in(tmp, r->dir, "ckpt.tmp");
    path_in(dst, r->dir, "ckpt");
    while (!atomic_load(&r->stop)) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) != 0 || rename(tmp, dst) != 0) {
            r->failures++; /* checked by the test's thread (cmocka asserts there only) */
            return;
        }
        r->renames++;
    }
}

/* A backup links a channel's checkpoint while the channel replaces it by
 * rename: link(2) alone answers ENOENT now and then (the inode its lookup
 * found lost its name before the link), and the backup took the
 * checkpoint for gone (CI's e2e_backup: a partition restored with its WAL
 * and no checkpoint started its channel anew). tn_io_link_current links
 * the file the name has; UV_ENOENT only once the name is gone. */
static void test_link_current_while_replaced(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char src[4096], dst[4096];
    path_in(src, dir, "ckpt");
    path_in(dst, dir, "pinned");
    int fd = open(src, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    replacer_t r = {.dir = dir};
    atomic_init(&r.stop, false);
    uv_thread_t th;
    assert_int_equal(uv_thread_create(&th, replace_loop, &r), 0);
    int failed = 0, first = 0;
    for (int i = 0; i < 50000; i++) {
        int rc = tn_io_link_current(src, dst);
        if (rc != 0) {
            if (failed++ == 0)
                first = rc;
            continue;
        }
        assert_int_equal(unlink(dst), 0);
    }
    atomic_store(&r.stop, true);
    assert_int_equal(uv_thread_join(&th), 0);
    assert_int_equal(r.failures, 0);
    if (failed != 0)
        fail_msg("%d of 50000 links failed (first: %s) during %ld renames", failed,
                 tn_strerror(first), r.renames);
    assert_int_equal(unlink(src), 0);
    assert_int_equal(tn_io_link_current(src, dst), UV_ENOENT);
    tu_rmrf(dir);
    free(dir);
}

/* Two threads replacing one file at once (a topic's stamp, by the engine
 * and by a replica opening its log) both succeed: neither unlinks or
 * renames the other's .tmp. */
static void test_atomic_writers_of_one_file(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    racer_t r[2] = {{dir, 0}, {dir, 0}};
    uv_thread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(uv_thread_create(&th[i], race_writes, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(uv_thread_join(&th[i]), 0);
    assert_int_equal(r[0].failures, 0);
    assert_int_equal(r[1].failures, 0);
    char p[4096];
    path_in(p, dir, "stamp");
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_io_read_file(p, 1 << 20, &b), 0);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.base, "0123456789", 10);
    tn_buf_fini(&b);
    path_in(p, dir, "stamp.tmp");
    struct stat st;
    assert_int_not_equal(stat(p, &st), 0); /* no .tmp left */
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synced_survives),
        cmocka_unit_test(test_unsynced_create_may_vanish),
        cmocka_unit_test(test_rename_is_atomic),
        cmocka_unit_test(test_cut_stops_everything),
        cmocka_unit_test(test_pwritev_many_vectors),
        cmocka_unit_test(test_pwritev_short_write),
        cmocka_unit_test(test_fdatasync_many),
        cmocka_unit_test(test_atomic_writers_of_one_file),
        cmocka_unit_test(test_link_current_while_replaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
