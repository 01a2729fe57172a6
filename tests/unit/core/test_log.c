/* Logging: level checks before argument evaluation, rate limiting, and
 * the line formats (text, journald's priority prefixes, JSON). */
#include "core/platform.h"

#include "testutil.h"

#include "core/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_log_levels_and_rate_limit(void **state)
{
    (void)state;
    assert_int_equal(tn_log_level_parse("warn"), TN_LOG_WARN);
    assert_int_equal(tn_log_level_parse("loud"), -1);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    tn_log_set_fd(fds[1]);
    int saved = tn_log_level;
    tn_log_level = TN_LOG_WARN;
    int evaluated = 0;
    TN_LOG(TN_LOG_INFO, "not written %d", ++evaluated);
    assert_int_equal(evaluated, 0); /* arguments not evaluated below the level */
    for (int i = 0; i < 100; i++)
        TN_LOG_RL(TN_LOG_ERROR, 60000, "repeated error %d", i);
    TN_LOG(TN_LOG_WARN, "last line");
    tn_log_set_fd(2);
    tn_log_level = saved;
    close(fds[1]);
    char buf[8192];
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_null(strstr(buf, "not written"));
    assert_non_null(strstr(buf, "repeated error 0"));
    assert_null(strstr(buf, "repeated error 1\n"));
    assert_non_null(strstr(buf, "last line"));
    assert_non_null(strstr(buf, "error "));
}

/* 2026-12-01T21:15:00.123Z */
#define WHEN ((int64_t)1796159700123)

static void test_text_line(void **state)
{
    (void)state;
    char buf[256];
    size_t n = tn_log_format_line(buf, sizeof(buf), TN_LOG_TEXT, false, TN_LOG_WARN, WHEN,
                                  "src/core/x.c", 42, "disk is full");
    assert_string_equal(buf, "2026-12-01T21:15:00.123Z warn   x.c:42: disk is full\n");
    assert_int_equal(n, strlen(buf));
}

static void test_journal_line(void **state)
{
    (void)state;
    char buf[256];
    static const struct {
        int level;
        const char *want;
    } cases[] = {
        {TN_LOG_DEBUG, "<7>debug a.c:1: m\n"},   {TN_LOG_INFO, "<6>info a.c:1: m\n"},
        {TN_LOG_NOTICE, "<5>notice a.c:1: m\n"}, {TN_LOG_WARN, "<4>warn a.c:1: m\n"},
        {TN_LOG_ERROR, "<3>error a.c:1: m\n"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(cases); i++) {
        tn_log_format_line(buf, sizeof(buf), TN_LOG_TEXT, true, cases[i].level, WHEN, "a.c", 1,
                           "m");
        assert_string_equal(buf, cases[i].want);
    }
}

static void test_json_line(void **state)
{
    (void)state;
    char buf[256];
    tn_log_format_line(buf, sizeof(buf), TN_LOG_JSON, true, TN_LOG_ERROR, WHEN, "/p/q/server.c", 7,
                       "bad \"name\"\\ \x01\ttab\nline");
    assert_string_equal(buf, "{\"ts\":\"2026-12-01T21:15:00.123Z\",\"level\":\"error\","
                             "\"src\":\"server.c:7\",\"msg\":\"bad \\\"name\\\"\\\\ "
                             "\\u0001\\ttab\\nline\"}\n");
}

/* A line too long for the buffer is cut, and a JSON one still closes. */
static void test_cut_lines(void **state)
{
    (void)state;
    char msg[600];
    memset(msg, '"', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    char buf[128];
    size_t n =
        tn_log_format_line(buf, sizeof(buf), TN_LOG_JSON, false, TN_LOG_INFO, WHEN, "a.c", 1, msg);
    assert_true(n < sizeof(buf));
    assert_int_equal(n, strlen(buf));
    assert_string_equal(buf + n - 3, "\"}\n");
    assert_int_equal(buf[n - 4], '"'); /* an escape is never split: ...\" then "} */
    assert_int_equal(buf[n - 5], '\\');
    n = tn_log_format_line(buf, sizeof(buf), TN_LOG_TEXT, false, TN_LOG_INFO, WHEN, "a.c", 1, msg);
    assert_int_equal(n, sizeof(buf) - 1);
    assert_int_equal(buf[n - 1], '\n');
}

static void test_journal_stream(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    struct stat st;
    assert_int_equal(fstat(fds[1], &st), 0);
    char env[64];
    snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    assert_true(tn_log_journal_stream(env, fds[1]));
    int other = open("/dev/null", O_WRONLY);
    assert_true(other >= 0);
    assert_false(tn_log_journal_stream(env, other));
    close(other);
    assert_false(tn_log_journal_stream(NULL, fds[1]));
    assert_false(tn_log_journal_stream("", fds[1]));
    assert_false(tn_log_journal_stream("12", fds[1]));
    assert_false(tn_log_journal_stream("1:x", fds[1]));
    close(fds[0]);
    close(fds[1]);
}

/* tn_log_write uses the configured format. */
static void test_write_json(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    tn_log_set_fd(fds[1]);
    tn_log_set_format(TN_LOG_JSON, false);
    TN_LOG(TN_LOG_ERROR, "value %d", 5);
    tn_log_set_format(TN_LOG_TEXT, false);
    tn_log_set_fd(2);
    close(fds[1]);
    char buf[512];
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\"level\":\"error\""));
    assert_non_null(strstr(buf, "\"msg\":\"value 5\"}\n"));
    assert_int_equal(buf[0], '{');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_levels_and_rate_limit),
        cmocka_unit_test(test_text_line),
        cmocka_unit_test(test_journal_line),
        cmocka_unit_test(test_json_line),
        cmocka_unit_test(test_cut_lines),
        cmocka_unit_test(test_journal_stream),
        cmocka_unit_test(test_write_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
