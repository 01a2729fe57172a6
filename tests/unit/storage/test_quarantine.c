/* Quarantine of dropped copies (storage/store.h tn_store_mark_dropped):
 * the mark and its removal, and the open that moves every marked
 * partition directory to quarantine/ before anything lists partitions,
 * keeping its files, and counts what quarantine/ holds. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mark_and_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
