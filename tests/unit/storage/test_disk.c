/* Disk watermarks: the hysteresis rule, and a real check against the
 * data path (a minimum no disk can meet makes the store refuse appends). */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "storage/disk.h"

static void test_disk_rule(void **state)
{
    (void)state;
    /* Enter at the high mark or below the free minimum. */
    assert_false(tn_disk_decide(false, 89, 1000, 90, 80, 100));
    assert_true(tn_disk_decide(false, 90, 1000, 90, 80, 100));
    assert_true(tn_disk_decide(false, 10, 99, 90, 80, 100));
    /* Stay high until under the low mark (hysteresis). */
    assert_true(tn_disk_decide(true, 85, 1000, 90, 80, 100));
    assert_true(tn_disk_decide(true, 80, 1000, 90, 80, 100));
    assert_false(tn_disk_decide(true, 79, 1000, 90, 80, 100));
    assert_true(tn_disk_decide(true, 50, 10, 90, 80, 100));
}

static void test_real_check(void **state)
{
    (void)state;
    tu_fx_t *fx = tu_fx_new(NULL);
    tn_store_t *s = fx->store;
    assert_false(tn_store_disk_high(s));
    assert_true(atomic_load(&s->disk_used_pct) > 0);
    assert_true(atomic_load(&s->disk_free) > 0);
    /* Raise the bar past any disk and check again. */
    s->opts.disk_min_free = UINT64_MAX;
    tn__disk_check(s);
    assert_true(tn_store_disk_high(s));
    /* Back to normal: free space is plentiful and usage under the low mark. */
    s->opts.disk_min_free = 0;
    s->opts.disk_low_pct = 99;
    tn__disk_check(s);
    assert_false(tn_store_disk_high(s));
    tu_fx_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_rule),
        cmocka_unit_test(test_real_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
