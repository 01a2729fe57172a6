/* Logging: level checks before argument evaluation, rate limiting. */
#include "core/platform.h"

#include "testutil.h"

#include "core/log.h"

#include <string.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_levels_and_rate_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
