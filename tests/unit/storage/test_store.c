/* The store: lock file, FORMAT handling, listing topics and partitions,
 * and the name rules. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "storage/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int try_open(uv_loop_t *loop, const char *dir, tn_store_t **store, char *err, size_t len)
{
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    return tn_store_open(loop, &o, store, err, len);
}

static void test_lock_refuses_second_daemon(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_t *a, *b;
    char err[512];
    assert_int_equal(try_open(&loop, dir, &a, err, sizeof(err)), 0);
    assert_int_equal(try_open(&loop, dir, &b, err, sizeof(err)), TN_ELOCKED);
    assert_non_null(strstr(err, "locked by another process (pid "));
    tu_store_close(&loop, a);
    assert_int_equal(try_open(&loop, dir, &b, err, sizeof(err)), 0);
    tu_store_close(&loop, b);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

static void test_format_rules(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_t *s;
    char err[512];

    assert_int_equal(try_open(&loop, dir, &s, err, sizeof(err)), 0);
    tu_store_close(&loop, s);
    char path[4096];
    snprintf(path, sizeof(path), "%s/FORMAT", dir);
    FILE *f = fopen(path, "r");
    char line[64] = "";
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_string_equal(line, "tern-storage 1\n");

    write_text(dir, "FORMAT", "tern-storage 2\n");
    assert_int_equal(try_open(&loop, dir, &s, err, sizeof(err)), TN_EFORMAT);
    assert_non_null(strstr(err, "format 2"));

    write_text(dir, "FORMAT", ""); /* empty: not a FORMAT file either */
    assert_int_equal(try_open(&loop, dir, &s, err, sizeof(err)), TN_ECORRUPT);

    write_text(dir, "FORMAT", "something else\n");
    assert_int_equal(try_open(&loop, dir, &s, err, sizeof(err)), TN_ECORRUPT);
    assert_non_null(strstr(err, "not a tern FORMAT"));

    /* Data present but FORMAT gone: refuse rather than guess. */
    assert_int_equal(remove(path), 0);
    assert_int_equal(try_open(&loop, dir, &s, err, sizeof(err)), TN_ECORRUPT);
    assert_non_null(strstr(err, "no FORMAT"));

    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

static int add_name(void *arg, const char *name)
{
    strcat(arg, name);
    strcat(arg, ";");
    return 0;
}

static int add_partition(void *arg, const char *topic, uint32_t p)
{
    char buf[300];
    snprintf(buf, sizeof(buf), "%s/%u;", topic, p);
    strcat(arg, buf);
    return 0;
}

static void test_listing(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    tn_plog_t *p;
    assert_int_equal(tn_plog_open(s, "alpha", 0, &p), 0);
    assert_int_equal(tn_plog_open(s, "alpha", 2, &p), 0);
    char junk[4096];
    snprintf(junk, sizeof(junk), "%s/topics/alpha/07", dir); /* not a partition name */
    mkdir(junk, 0755);
    snprintf(junk, sizeof(junk), "%s/topics/alpha/x", dir);
    mkdir(junk, 0755);
    char names[1024] = "";
    assert_int_equal(tn_store_list_topics(s, add_name, names), 0);
    assert_string_equal(names, "alpha;");
    char parts[1024] = "";
    assert_int_equal(tn_store_list_partitions(s, "alpha", add_partition, parts), 0);
    assert_true(strstr(parts, "alpha/0;") != NULL && strstr(parts, "alpha/2;") != NULL);
    assert_int_equal(strlen(parts), strlen("alpha/0;alpha/2;"));
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

/* A topic's stamp (store.h): written atomically, read back; absent (no
 * directory, or a directory from before stamps) reads 0; anything else
 * in its place is refused as damaged, and a write without make_dir leaves
 * a topic with no directory here alone; the read without a store reads the
 * same. */
static void test_topic_stamp(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    int64_t ms = -1;
    assert_int_equal(tn_store_topic_stamp_read(s, "alpha", &ms), 0); /* no directory */
    assert_int_equal(ms, 0);
    assert_int_equal(tn_store_topic_stamp_write(s, "alpha", 1796007846123, false), 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/alpha", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), -1); /* left alone: no directory made */

    tn_plog_t *p;
    assert_int_equal(tn_plog_open(s, "alpha", 0, &p), 0); /* a directory from before stamps */
    ms = -1;
    assert_int_equal(tn_store_topic_stamp_read(s, "alpha", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(tn_store_topic_stamp_write(s, "alpha", 1796007846123, false), 0);
    assert_int_equal(tn_store_topic_stamp_read(s, "alpha", &ms), 0);
    assert_int_equal(ms, 1796007846123);
    assert_int_equal(tn_store_topic_stamp_write(s, "alpha", 1796007846999, false), 0);
    assert_int_equal(tn_store_topic_stamp_read(s, "alpha", &ms), 0);
    assert_int_equal(ms, 1796007846999); /* replaced */
    /* make_dir: the stamp of a topic whose first partition comes next. */
    assert_int_equal(tn_store_topic_stamp_write(s, "beta", 42, true), 0);
    assert_int_equal(tn_store_topic_stamp_read(s, "beta", &ms), 0);
    assert_int_equal(ms, 42);
    /* And read from the directory named whole (a backup reads the stamp
     * beside what it copies); none there reads 0. */
    snprintf(path, sizeof(path), "%s/topics/beta", dir);
    ms = -1;
    assert_int_equal(tn_store_stamp_read_dir(path, &ms), 0);
    assert_int_equal(ms, 42);
    snprintf(path, sizeof(path), "%s/topics/gamma", dir);
    ms = -1;
    assert_int_equal(tn_store_stamp_read_dir(path, &ms), 0);
    assert_int_equal(ms, 0);
    /* Not one a topic can have, nor a name that is not a topic's. */
    assert_int_equal(tn_store_topic_stamp_write(s, "beta", 0, true), UV_EINVAL);
    assert_int_equal(tn_store_topic_stamp_write(s, "beta", -5, true), UV_EINVAL);
    assert_int_equal(tn_store_topic_stamp_write(s, "..", 42, true), UV_EINVAL);
    assert_int_equal(tn_store_topic_stamp_read(s, "a/b", &ms), UV_EINVAL);
    /* The stamp is not a partition: listing does not see it. */
    char parts[1024] = "";
    assert_int_equal(tn_store_list_partitions(s, "alpha", add_partition, parts), 0);
    assert_string_equal(parts, "alpha/0;");
    /* Damaged: another size, or a flipped byte (CRC), or a stamp of 0. */
    snprintf(path, sizeof(path), "%s/topics/beta", dir);
    write_text(path, TN_STORE_STAMP_FILE, "1796007846123\n");
    assert_int_equal(tn_store_topic_stamp_read(s, "beta", &ms), TN_ECORRUPT);
    assert_int_equal(tn_store_topic_stamp_write(s, "beta", 42, false), 0);
    char file[4200];
    snprintf(file, sizeof(file), "%s/%s", path, TN_STORE_STAMP_FILE);
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    fseek(f, 9, SEEK_SET);
    fputc(0x7f, f);
    fclose(f);
    assert_int_equal(tn_store_topic_stamp_read(s, "beta", &ms), TN_ECORRUPT);
    unsigned char zero[8] = {0};
    assert_int_equal(
        tn_io_write_record_file(path, TN_STORE_STAMP_FILE, 0x31534E54u, zero, sizeof(zero)), 0);
    assert_int_equal(tn_store_topic_stamp_read(s, "beta", &ms), TN_ECORRUPT);
    assert_int_equal(ms, 0);
    assert_int_equal(tn_store_stamp_read_dir(path, &ms), TN_ECORRUPT);
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

/* A topic's pause (store.h): written atomically with its hold points and
 * read back; absent reads -1; a topic with no directory here is left
 * alone (not written); anything else in its place is refused as damaged,
 * and the pause file is not a partition. */
static void test_topic_pause(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    int paused = 5;
    uint64_t *holds = NULL;
    uint32_t n = 9;
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), 0);
    assert_int_equal(paused, -1);
    assert_null(holds);
    assert_int_equal(n, 0);
    const uint64_t want[3] = {0, 17, UINT64_C(0x123456789abc)};
    bool written = true;
    assert_int_equal(tn_store_topic_pause_write(s, "alpha", true, want, 3, &written), 0);
    assert_false(written); /* no directory here: left alone */
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/alpha", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), -1);

    assert_int_equal(tn_store_topic_stamp_write(s, "alpha", 42, true), 0); /* its directory */
    assert_int_equal(tn_store_topic_pause_write(s, "alpha", true, want, 3, &written), 0);
    assert_true(written);
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), 0);
    assert_int_equal(paused, 1);
    assert_int_equal(n, 3);
    assert_memory_equal(holds, want, sizeof(want));
    tn_free(holds);
    assert_int_equal(tn_store_topic_pause_write(s, "alpha", false, NULL, 0, NULL), 0);
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), 0);
    assert_int_equal(paused, 0); /* replaced */
    assert_null(holds);
    assert_int_equal(n, 0);
    /* Not a name a topic can have. */
    assert_int_equal(tn_store_topic_pause_write(s, "..", true, want, 3, NULL), UV_EINVAL);
    assert_int_equal(tn_store_topic_pause_read(s, "a/b", &paused, &holds, &n), UV_EINVAL);
    /* Not a partition: listing does not see it. */
    char parts[1024] = "";
    assert_int_equal(tn_store_list_partitions(s, "alpha", add_partition, parts), 0);
    assert_string_equal(parts, "");
    /* Damaged: text, a flipped byte (CRC), a length that is not its count's. */
    write_text(path, TN_STORE_TOPIC_PAUSE_FILE, "paused\n");
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), TN_ECORRUPT);
    assert_int_equal(paused, -1);
    assert_int_equal(tn_store_topic_pause_write(s, "alpha", true, want, 3, NULL), 0);
    char file[4200];
    snprintf(file, sizeof(file), "%s/%s", path, TN_STORE_TOPIC_PAUSE_FILE);
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    fseek(f, 20, SEEK_SET);
    fputc(0x7f, f);
    fclose(f);
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), TN_ECORRUPT);
    assert_int_equal(tn_store_topic_pause_write(s, "alpha", true, want, 3, NULL), 0);
    assert_int_equal(truncate(file, 16 + 8), 0);
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), TN_ECORRUPT);
    assert_null(holds);
    /* Removed (a topic made anew here), and again: nothing there. */
    assert_int_equal(tn_store_topic_pause_remove(s, "alpha"), 0);
    assert_int_equal(tn_store_topic_pause_read(s, "alpha", &paused, &holds, &n), 0);
    assert_int_equal(paused, -1);
    assert_int_equal(tn_store_topic_pause_remove(s, "alpha"), 0);
    assert_int_equal(tn_store_topic_pause_remove(s, "gamma"), 0); /* no directory */
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

/* A channel's stamp (store.h): kept in its topic's directory, written
 * atomically and read back, removed with stamp 0; absent reads 0; a topic
 * with no directory here is left alone (nothing written); anything else
 * in its place is refused as damaged. */
static void test_channel_stamp(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    uint64_t stamp = 1;
    bool written = true;
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "c", &stamp), 0);
    assert_int_equal(stamp, 0);
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "c", 7, &written), 0);
    assert_false(written); /* no directory: none made */
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/alpha", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), -1);

    tn_plog_t *p;
    assert_int_equal(tn_plog_open(s, "alpha", 0, &p), 0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "c", &stamp), 0);
    assert_int_equal(stamp, 0); /* files from before stamps */
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "c", 0xfeedface12345678u, &written),
                     0);
    assert_true(written);
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "d", 9, NULL), 0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "c", &stamp), 0);
    assert_true(stamp == 0xfeedface12345678u);
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "c", 11, NULL), 0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "c", &stamp), 0);
    assert_int_equal(stamp, 11); /* replaced */
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "d", &stamp), 0);
    assert_int_equal(stamp, 9); /* one per channel */
    /* Removed (twice: the second finds nothing); the other one stays. */
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "c", 0, &written), 0);
    assert_false(written);
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "c", 0, NULL), 0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "c", &stamp), 0);
    assert_int_equal(stamp, 0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "d", &stamp), 0);
    assert_int_equal(stamp, 9);
    /* Written into the directory named whole (ternctl restore): the same
     * file; never 0, never a name that is not a channel's. */
    assert_int_equal(tn_store_channel_stamp_write_dir(path, "c", 0x0123456789abcdefu), 0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "c", &stamp), 0);
    assert_true(stamp == 0x0123456789abcdefu);
    assert_int_equal(tn_store_channel_stamp_write_dir(path, "c", 0), UV_EINVAL);
    assert_int_equal(tn_store_channel_stamp_write_dir(path, "a/b", 5), UV_EINVAL);
    /* And read from it (a backup reads the stamps beside what it copies). */
    stamp = 1;
    assert_int_equal(tn_store_channel_stamp_read_dir(path, "c", &stamp), 0);
    assert_true(stamp == 0x0123456789abcdefu);
    assert_int_equal(tn_store_channel_stamp_read_dir(path, "none", &stamp), 0);
    assert_int_equal(stamp, 0);
    assert_int_equal(tn_store_channel_stamp_read_dir(path, "a/b", &stamp), UV_EINVAL);
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "c", 0, NULL), 0);
    /* Neither the topic's stamp nor a partition. */
    int64_t ms = -1;
    assert_int_equal(tn_store_topic_stamp_read(s, "alpha", &ms), 0);
    assert_int_equal(ms, 0);
    char parts[1024] = "";
    assert_int_equal(tn_store_list_partitions(s, "alpha", add_partition, parts), 0);
    assert_string_equal(parts, "alpha/0;");
    /* Names that are not a channel's. */
    assert_int_equal(tn_store_channel_stamp_write(s, "alpha", "..", 1, NULL), UV_EINVAL);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "a/b", &stamp), UV_EINVAL);
    /* Damaged: another size, or a stamp of 0. */
    write_text(path, "d" TN_STORE_CHAN_STAMP_SUFFIX, "9\n");
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "d", &stamp), TN_ECORRUPT);
    unsigned char zero[8] = {0};
    assert_int_equal(tn_io_write_record_file(path, "d" TN_STORE_CHAN_STAMP_SUFFIX, 0x43534E54u,
                                             zero, sizeof(zero)),
                     0);
    assert_int_equal(tn_store_channel_stamp_read(s, "alpha", "d", &stamp), TN_ECORRUPT);
    assert_int_equal(stamp, 0);
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

static bool exists(const char *dir, const char *name)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return false;
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Deleting a topic whose directory is a symbolic link (to a directory
 * outside the data directory) removes only the link: what it points to
 * survives, files and subdirectories alike (was: removed as the topic's
 * data, since the walk opened the renamed link as a directory). A link
 * inside a real topic directory is removed as a link too, and so is one
 * a crash left in trash/ at the next open. */
static void test_remove_topic_symlink(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    char *outside = tu_tempdir();
    char sub[4096], link[4096];
    write_text(outside, "precious", "keep me\n");
    snprintf(sub, sizeof(sub), "%s/inner", outside);
    assert_int_equal(mkdir(sub, 0755), 0);
    write_text(sub, "deeper", "keep me too\n");

    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    snprintf(link, sizeof(link), "%s/topics/linked", dir);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(tn_store_remove_topic(s, "linked"), 0);
    char topics[4096], trash[4096];
    snprintf(topics, sizeof(topics), "%s/topics", dir);
    snprintf(trash, sizeof(trash), "%s/trash", dir);
    assert_false(exists(topics, "linked"));
    assert_true(exists(outside, "precious"));
    assert_true(exists(sub, "deeper"));
    char names[1024] = "";
    assert_int_equal(tn_store_list_topics(s, add_name, names), 0);
    assert_string_equal(names, "");

    /* A real topic directory holding a link: the link goes, not its target. */
    char real[4096];
    snprintf(real, sizeof(real), "%s/topics/real", dir);
    assert_int_equal(mkdir(real, 0755), 0);
    snprintf(real, sizeof(real), "%s/topics/real/0", dir);
    assert_int_equal(mkdir(real, 0755), 0);
    write_text(real, "00000000000000000000.log", "");
    snprintf(link, sizeof(link), "%s/topics/real/0/away", dir);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(tn_store_remove_topic(s, "real"), 0);
    assert_false(exists(topics, "real"));
    assert_true(exists(outside, "precious"));
    assert_true(exists(sub, "deeper"));
    tu_store_close(&loop, s);

    /* A link left in trash/ (a crash between the rename and the removal). */
    snprintf(link, sizeof(link), "%s/trash/linked.1", dir);
    assert_int_equal(symlink(outside, link), 0);
    s = tu_store_open(&loop, &o);
    assert_false(exists(trash, "linked.1"));
    assert_true(exists(outside, "precious"));
    assert_true(exists(sub, "deeper"));
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    tu_rmrf(outside);
    free(dir);
    free(outside);
}

static void test_names(void **state)
{
    (void)state;
    assert_true(tn_store_valid_name("orders.v2_eu-west"));
    assert_false(tn_store_valid_name(""));
    assert_false(tn_store_valid_name("."));
    assert_false(tn_store_valid_name(".."));
    assert_false(tn_store_valid_name("a/b"));
    assert_false(tn_store_valid_name("ch#ephemeral"));
    char longname[300];
    memset(longname, 'a', sizeof(longname));
    longname[255] = '\0';
    assert_true(tn_store_valid_name(longname));
    longname[255] = 'a';
    longname[256] = '\0';
    assert_false(tn_store_valid_name(longname));
}

static void test_open_alloc_failures(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    for (long n = 0;; n++) {
        tn_store_t *s = NULL;
        char err[512];
        tn_alloc_fail_after(n);
        int rc = try_open(&loop, dir, &s, err, sizeof(err));
        tn_alloc_fail_after(-1);
        if (rc == 0) {
            tu_store_close(&loop, s);
            break;
        }
        assert_int_equal(rc, UV_ENOMEM);
        assert_true(n < 1000);
    }
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_refuses_second_daemon),
        cmocka_unit_test(test_format_rules),
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_topic_stamp),
        cmocka_unit_test(test_channel_stamp),
        cmocka_unit_test(test_topic_pause),
        cmocka_unit_test(test_remove_topic_symlink),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_open_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
