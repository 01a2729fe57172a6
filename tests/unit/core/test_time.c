/* Clocks: monotonic time never goes back; wall time is the epoch clock. */
#include "core/platform.h"

#include "testutil.h"

#include "core/time.h"

#include <time.h>

static void test_clocks(void **state)
{
    (void)state;
    int64_t prev = tn_now_mono_ns();
    for (int i = 0; i < 100000; i++) {
        int64_t now = tn_now_mono_ns();
        assert_true(now >= prev);
        prev = now;
    }
    int64_t ms = tn_now_mono_ms();
    assert_true(ms >= prev / 1000000 - 1);
    int64_t wall = tn_now_wall_ms();
    int64_t t = (int64_t)time(NULL) * 1000;
    assert_true(wall >= t - 2000 && wall <= t + 2000);
    assert_true(tn_now_wall_ns() / 1000000 >= wall - 2000);
}

/* Whole seconds in seconds, anything else in milliseconds, cut to fit. */
static void test_fmt_ms(void **state)
{
    (void)state;
    char buf[32];
    tn_time_fmt_ms(buf, sizeof(buf), 600000);
    assert_string_equal(buf, "600s");
    tn_time_fmt_ms(buf, sizeof(buf), 1500);
    assert_string_equal(buf, "1500ms");
    tn_time_fmt_ms(buf, sizeof(buf), 0);
    assert_string_equal(buf, "0s");
    tn_time_fmt_ms(buf, sizeof(buf), 999);
    assert_string_equal(buf, "999ms");
    tn_time_fmt_ms(buf, sizeof(buf), UINT64_MAX);
    assert_string_equal(buf, "18446744073709551615ms");
    tn_time_fmt_ms(buf, 4, 600000);
    assert_string_equal(buf, "600");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_fmt_ms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
