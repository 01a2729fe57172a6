/* Quarantine of dropped copies (storage/store.h tn_store_mark_dropped):
 * the mark and its removal, and the open that moves every marked
 * partition directory to quarantine/ before anything lists partitions,
 * keeping its files, and counts what quarantine/ holds; the move while the
 * store runs (tn_store_quarantine_dropped) of a marked copy whose logs
 * were closed, and what a crash before or after it leaves. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "storage/chanlog.h"
#include "storage/cursor.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool exists(const char *dir, const char *rel)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    return access(path, F_OK) == 0;
}

static int add_partition(void *arg, const char *topic, uint32_t p)
{
    char buf[300];
    snprintf(buf, sizeof(buf), "%s/%u;", topic, p);
    strcat(arg, buf);
    return 0;
}

/* The one entry of dir/quarantine starting with prefix, into out. */
static int quarantined(const char *dir, const char *prefix, char *out, size_t cap)
{
    char q[4096];
    snprintf(q, sizeof(q), "%s/quarantine", dir);
    DIR *d = opendir(q);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(out, cap, "quarantine/%s", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static void test_mark_and_open(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    assert_true(tn_store_quarantined(s) == 0);
    assert_true(exists(dir, "quarantine"));
    tn_plog_t *p;
    assert_int_equal(tn_plog_open(s, "alpha", 0, &p), 0);
    assert_int_equal(tn_plog_open(s, "alpha", 1, &p), 0);
    assert_int_equal(tn_plog_open(s, "beta", 0, &p), 0);
    tu_store_close(&loop, s);

    /* Marks: written once, taken away, none for a partition not here. */
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 1, true, "pe7"), 0);
    assert_true(exists(dir, "topics/alpha/1/" TN_STORE_DROPPED_FILE));
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 1, true, "pe8"), 0); /* kept as it was */
    assert_int_equal(tn_store_mark_dropped(dir, "beta", 0, true, "pe2"), 0);
    assert_int_equal(tn_store_mark_dropped(dir, "beta", 0, false, NULL), 0);
    assert_false(exists(dir, "topics/beta/0/" TN_STORE_DROPPED_FILE));
    assert_int_equal(tn_store_mark_dropped(dir, "beta", 0, false, NULL), 0); /* none: fine */
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 5, true, "pe1"), 0);
    assert_false(exists(dir, "topics/alpha/5"));
    assert_int_equal(tn_store_mark_dropped(dir, "../x", 0, true, "pe1"), UV_EINVAL);

    /* The open moves alpha/1, files and mark, and lists the rest. */
    s = tu_store_open(&loop, &o);
    assert_true(tn_store_quarantined(s) == 1);
    assert_false(exists(dir, "topics/alpha/1"));
    char q[512];
    assert_int_equal(quarantined(dir, "alpha.1.pe7.", q, sizeof(q)), 1);
    char rel[600];
    snprintf(rel, sizeof(rel), "%s/00000000000000000000.log", q);
    assert_true(exists(dir, rel));
    snprintf(rel, sizeof(rel), "%s/" TN_STORE_DROPPED_FILE, q);
    assert_true(exists(dir, rel));
    char parts[1024] = "";
    assert_int_equal(tn_store_list_partitions(s, "alpha", add_partition, parts), 0);
    assert_string_equal(parts, "alpha/0;");
    parts[0] = '\0';
    assert_int_equal(tn_store_list_partitions(s, "beta", add_partition, parts), 0);
    assert_string_equal(parts, "beta/0;");
    tu_store_close(&loop, s);

    /* Opened again: nothing more moves; the count stays. A tag is kept to
     * letters and digits. */
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 0, true, "../p e9"), 0);
    s = tu_store_open(&loop, &o);
    assert_true(tn_store_quarantined(s) == 2);
    assert_int_equal(quarantined(dir, "alpha.0.pe9.", q, sizeof(q)), 1);
    assert_int_equal(quarantined(dir, "alpha.1.pe7.", q, sizeof(q)), 1);
    assert_true(exists(dir, "topics/beta/0"));
    tu_store_close(&loop, s);
    s = tu_store_open(&loop, &o);
    assert_true(tn_store_quarantined(s) == 2);
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

static void on_closed_plog(tn_plog_t *plog)
{
    (void)plog;
    (*(int *)plog->data)--;
}

static void on_closed_cl(tn_chanlog_t *cl)
{
    (*(int *)cl->data)--;
}

/* A marked copy, its partition log and channel log closed as a dropped
 * replica's are (tn_plog_abandon: no file touched), moved while the store
 * runs: files and mark in quarantine/, nothing left in topics/; given back
 * afterwards, the partition starts from an empty log. Only a marked copy
 * moves. */
static void test_move_while_running(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    tn_store_t *s = tu_store_open(&loop, &o);
    tn_plog_t *p0, *p1;
    assert_int_equal(tn_plog_open(s, "alpha", 0, &p0), 0);
    assert_int_equal(tn_plog_open(s, "alpha", 1, &p1), 0);
    uint64_t off;
    for (int i = 0; i < 3; i++)
        assert_int_equal(tu_append(&loop, p0, "hello", 5, &off), 0);
    tn_chanlog_t *cl;
    tn_cursor_t cur;
    assert_int_equal(tn_chanlog_open(s, "alpha", 0, "ch", NULL, &cl, &cur), 0);
    tn_cursor_fini(&cur);

    /* Not marked (or the mark taken away: given back): nothing moves. */
    bool moved = true;
    assert_int_equal(tn_store_quarantine_dropped(dir, "alpha", 0, &moved), 0);
    assert_false(moved);
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 0, true, "pe3"), 0);
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 0, false, NULL), 0);
    assert_int_equal(tn_store_quarantine_dropped(dir, "alpha", 0, &moved), 0);
    assert_false(moved);
    assert_true(exists(dir, "topics/alpha/0/00000000000000000000.log"));
    assert_int_equal(tn_store_quarantine_dropped(dir, "alpha", 7, &moved), 0); /* no copy */
    assert_false(moved);
    assert_int_equal(tn_store_quarantine_dropped(dir, "../x", 0, &moved), UV_EINVAL);

    /* Marked, its logs closed: moved at once. */
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 0, true, "pe3"), 0);
    int left = 2;
    p0->data = &left;
    cl->data = &left;
    tn_plog_abandon(p0, on_closed_plog);
    tn_chanlog_close(cl, on_closed_cl);
    while (left > 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(tn_store_quarantine_dropped(dir, "alpha", 0, &moved), 0);
    assert_true(moved);
    tn_store_note_quarantined(s);
    assert_true(tn_store_quarantined(s) == 1);
    assert_false(exists(dir, "topics/alpha/0"));
    assert_true(exists(dir, "topics/alpha/1"));
    char q[512], rel[600];
    assert_int_equal(quarantined(dir, "alpha.0.pe3.", q, sizeof(q)), 1);
    snprintf(rel, sizeof(rel), "%s/00000000000000000000.log", q);
    assert_true(exists(dir, rel));
    snprintf(rel, sizeof(rel), "%s/" TN_STORE_DROPPED_FILE, q);
    assert_true(exists(dir, rel));
    DIR *qd;
    char qpath[1100];
    snprintf(qpath, sizeof(qpath), "%s/%s", dir, q);
    assert_non_null(qd = opendir(qpath));
    int wal = 0;
    for (struct dirent *e; (e = readdir(qd)) != NULL;)
        wal += strncmp(e->d_name, "ch.", 3) == 0;
    closedir(qd);
    assert_true(wal > 0); /* the channel's files went with it */
    /* Moved once: asked again, nothing more. */
    assert_int_equal(tn_store_quarantine_dropped(dir, "alpha", 0, &moved), 0);
    assert_false(moved);

    /* Given back afterwards: no mark to take away, and an empty log. */
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 0, false, NULL), 0);
    assert_int_equal(tn_plog_open(s, "alpha", 0, &p0), 0);
    assert_true(tn_plog_written_next(p0) == 0);
    tu_store_close(&loop, s);

    /* A crash after the move: the next open finds the copy in
     * quarantine/ (counted) and the partition's new log, nothing marked;
     * a crash before it: the marked copy, which the open moves. */
    assert_int_equal(tn_store_mark_dropped(dir, "alpha", 1, true, "pe4"), 0);
    s = tu_store_open(&loop, &o);
    assert_true(tn_store_quarantined(s) == 2);
    assert_int_equal(quarantined(dir, "alpha.0.pe3.", q, sizeof(q)), 1);
    assert_int_equal(quarantined(dir, "alpha.1.pe4.", q, sizeof(q)), 1);
    char parts[1024] = "";
    assert_int_equal(tn_store_list_partitions(s, "alpha", add_partition, parts), 0);
    assert_string_equal(parts, "alpha/0;");
    tu_store_close(&loop, s);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mark_and_open),
        cmocka_unit_test(test_move_while_running),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
