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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
