/* Configuration: defaults, the precedence rule (default < file < env <
 * flag), value syntax, and errors that name the option and its range. */
#include "core/platform.h"

#include "testutil.h"

#include "core/config.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_defaults(void **state)
{
    (void)state;
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    assert_string_equal(cfg.data_path, "data");
    assert_int_equal(cfg.segment_bytes, 64 * 1024 * 1024);
    assert_int_equal(cfg.commit_max_requests, 64);
    assert_int_equal(cfg.commit_max_bytes, 8 * 1024 * 1024);
    assert_int_equal(cfg.commit_max_delay_ns, 1000000);
    assert_int_equal(cfg.commit_busy_poll_ns, 500000);
    assert_int_equal(cfg.commit_busy_poll_min, 8);
    assert_int_equal(cfg.wal_commit_max_records, 1024);
    assert_int_equal(cfg.durability, TN_DURABILITY_DURABLE);
    assert_int_equal(tn_config_validate(&cfg, NULL, 0), 0);
    tn_config_fini(&cfg);
}

static void test_parsers(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(tn_parse_size("64MiB", &v), 0);
    assert_int_equal(v, 64 * 1024 * 1024);
    assert_int_equal(tn_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(tn_parse_size("2G", &v), 0);
    assert_int_equal(v, 2LL * 1024 * 1024 * 1024);
    assert_int_equal(tn_parse_size("12XB", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_size("-1", &v), TN_ERANGE);
    assert_int_equal(tn_parse_size("99999999999999999999", &v), TN_ERANGE);
    assert_int_equal(tn_parse_duration_ns("1ms", &v), 0);
    assert_int_equal(v, 1000000);
    assert_int_equal(tn_parse_duration_ns("1m30s", &v), 0);
    assert_int_equal(v, 90LL * 1000000000);
    assert_int_equal(tn_parse_duration_ns("500us", &v), 0);
    assert_int_equal(v, 500000);
    assert_int_equal(tn_parse_duration_ns("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tn_parse_duration_ns("1.5s", &v), 0);
    assert_int_equal(v, 1500000000LL);
    assert_int_equal(tn_parse_duration_ns("0.25ms", &v), 0);
    assert_int_equal(v, 250000);
    assert_int_equal(tn_parse_duration_ns("1m0.5s", &v), 0);
    assert_int_equal(v, 60500000000LL);
    assert_int_equal(tn_parse_duration_ns("1.0000000001s", &v), 0); /* past 9 digits: cut */
    assert_int_equal(v, 1000000000LL);
    assert_int_equal(tn_parse_duration_ns("1.s", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("10", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("5parsecs", &v), TN_ECONFIG);
    bool b;
    assert_int_equal(tn_parse_bool("yes", &b), 0);
    assert_true(b);
    assert_int_equal(tn_parse_bool("off", &b), 0);
    assert_false(b);
    assert_int_equal(tn_parse_bool("maybe", &b), TN_ECONFIG);
}

static char *write_tmp(const char *text)
{
    char *path = strdup("/tmp/tern-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_precedence(void **state)
{
    (void)state;
    char *file = write_tmp("# a comment\n"
                           "data_path = \"/from/file\"\n"
                           "segment-bytes = 1MiB\n"
                           "commit_max_requests = 10   # trailing comment\n"
                           "durability = relaxed\n");
    char cfgflag[256];
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", file);
    char *argv[] = {"ternd", cfgflag, "--commit-max-requests", "30", NULL};
    char *envp[] = {"TERN_SEGMENT_BYTES=2MiB", "TERN_COMMIT_MAX_REQUESTS=20", "HOME=/x",
                    "TERN_UNRELATED_THING=1", NULL};
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    int rc = tn_config_load(&cfg, 4, argv, envp, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    assert_string_equal(cfg.data_path, "/from/file");     /* file over default */
    assert_int_equal(cfg.segment_bytes, 2 * 1024 * 1024); /* env over file */
    assert_int_equal(cfg.commit_max_requests, 30);        /* flag over env */
    assert_int_equal(cfg.durability, TN_DURABILITY_RELAXED);
    tn_config_fini(&cfg);
    unlink(file);
    free(file);
}

static void expect_error(int argc, char **argv, char **envp, const char *must_contain1,
                         const char *must_contain2)
{
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    assert_int_equal(tn_config_load(&cfg, argc, argv, envp, err, sizeof(err)), TN_ECONFIG);
    if (strstr(err, must_contain1) == NULL || strstr(err, must_contain2) == NULL)
        fail_msg("error \"%s\" lacks \"%s\" or \"%s\"", err, must_contain1, must_contain2);
    tn_config_fini(&cfg);
}

static void test_errors_name_key_and_range(void **state)
{
    (void)state;
    char *a1[] = {"ternd", "--segment-bytes=12", NULL};
    expect_error(2, a1, NULL, "segment-bytes", "64KiB..1GiB");
    char *a2[] = {"ternd", "--commit-max-requests=lots", NULL};
    expect_error(2, a2, NULL, "commit-max-requests", "1..65536");
    char *a2b[] = {"ternd", "--commit-busy-poll=20ms", NULL};
    expect_error(2, a2b, NULL, "commit-busy-poll", "0..10ms");
    char *a3[] = {"ternd", "--durability=eventually", NULL};
    expect_error(2, a3, NULL, "durability", "durable, write_ack, relaxed");
    char *a3b[] = {"ternd", "--nsq-auth-users", "--auth-http-address=127.0.0.1:4181", NULL};
    expect_error(3, a3b, NULL, "nsq-auth-users", "auth-http-address");
    char *a3c[] = {"ternd", "--nsq-auth-users", "--security-enabled=false", NULL};
    expect_error(3, a3c, NULL, "nsq-auth-users", "security-enabled");
    char *a4[] = {"ternd", "--no-such-option=1", NULL};
    expect_error(2, a4, NULL, "unknown option", "--no-such-option");
    char *a5[] = {"ternd", NULL};
    char *e5[] = {"TERN_COMMIT_MAX_DELAY=1h", NULL};
    expect_error(1, a5, e5, "environment TERN_COMMIT_MAX_DELAY", "0..100ms");
    char *a6[] = {"ternd", "--disk-low-watermark=95", "--disk-high-watermark=90", NULL};
    expect_error(3, a6, NULL, "disk-low-watermark", "below disk-high-watermark");
    char *a7[] = {"ternd", "--data-path", NULL};
    expect_error(2, a7, NULL, "--data-path", "needs a value");
    char *a8[] = {"ternd", "stray", NULL};
    expect_error(2, a8, NULL, "unexpected argument", "stray");

    char *file = write_tmp("segment_bytes = 64MiB\nbogus line\n");
    char flag[256];
    snprintf(flag, sizeof(flag), "--config=%s", file);
    char *a9[] = {"ternd", flag, NULL};
    expect_error(2, a9, NULL, ":2", "name = value");
    unlink(file);
    free(file);

    char *a10[] = {"ternd", "--config=/nonexistent/tern.conf", NULL};
    expect_error(2, a10, NULL, "/nonexistent/tern.conf", "cannot open");
}

static void test_help_lists_every_option(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tn_config_print_help(f, "ternd");
    fclose(f);
    const char *names[] = {"--data-path",
                           "--segment-bytes",
                           "--commit-max-requests",
                           "--commit-max-bytes",
                           "--commit-max-delay",
                           "--commit-busy-poll",
                           "--commit-busy-poll-min",
                           "--durability",
                           "--relaxed-sync-messages",
                           "--wal-commit-max-records",
                           "--checkpoint-every",
                           "--disk-high-watermark",
                           "--log-level",
                           "--max-msg-size",
                           "--help",
                           "default 64MiB"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(names); i++) {
        if (strstr(buf, names[i]) == NULL)
            fail_msg("--help lacks %s", names[i]);
    }
    free(buf);

    /* The printed configuration loads back to the same values. */
    tn_config_t cfg, back;
    assert_int_equal(tn_config_init(&cfg), 0);
    assert_int_equal(tn_config_init(&back), 0);
    char *argv[] = {"ternd", "--commit-max-delay=750us", "--segment-bytes=3MiB",
                    "--commit-busy-poll=0", NULL};
    assert_int_equal(tn_config_load(&cfg, 4, argv, NULL, NULL, 0), 0);
    char path[] = "/tmp/tern-print-XXXXXX";
    int fd = mkstemp(path);
    f = fdopen(fd, "w");
    tn_config_print(f, &cfg);
    fclose(f);
    char flag[256];
    snprintf(flag, sizeof(flag), "--config=%s", path);
    char *argv2[] = {"ternd", flag, NULL};
    char err[512] = "";
    int rc = tn_config_load(&back, 2, argv2, NULL, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    assert_int_equal(back.commit_max_delay_ns, 750000);
    assert_int_equal(back.commit_busy_poll_ns, 0);
    assert_int_equal(back.segment_bytes, 3 * 1024 * 1024);
    unlink(path);
    tn_config_fini(&cfg);
    tn_config_fini(&back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_errors_name_key_and_range),
        cmocka_unit_test(test_help_lists_every_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
