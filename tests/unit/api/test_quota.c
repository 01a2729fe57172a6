/* Tests of the per-identity caps: counting per name, clamping a large
 * request to the cap, giving back, and no cap at all. */
#include "core/platform.h"

#include "testutil.h"

#include "api/quota.h"

static void test_counts_per_name(void **state)
{
    (void)state;
    tn_quota_t q;
    tn_quota_init(&q, 3);
    uint32_t a, b, c, d;
    assert_true(tn_quota_take(&q, "ann", 2, &a));
    assert_int_equal(a, 2);
    assert_false(tn_quota_take(&q, "ann", 2, &b)); /* 4 > 3 */
    assert_int_equal(b, 0);
    assert_true(tn_quota_take(&q, "bob", 100, &c)); /* clamped: a batch alone passes */
    assert_int_equal(c, 3);
    assert_false(tn_quota_take(&q, "bob", 1, &d));
    tn_quota_give(&q, "bob", c);
    assert_true(tn_quota_take(&q, "bob", 1, &d));
    assert_true(tn_quota_take(&q, "ann", 1, &b));
    tn_quota_give(&q, "ann", a);
    tn_quota_give(&q, "ann", b);
    tn_quota_give(&q, "ann", 5); /* nothing left: no harm */
    assert_true(tn_quota_take(&q, "ann", 3, &a));
    assert_true(tn_quota_take(&q, "", 100, &b)); /* no identity: not counted */
    assert_int_equal(b, 0);
    tn_quota_fini(&q);
}

static void test_no_cap(void **state)
{
    (void)state;
    tn_quota_t q;
    tn_quota_init(&q, 0);
    uint32_t n;
    for (int i = 0; i < 1000; i++)
        assert_true(tn_quota_take(&q, "ann", 1000, &n));
    assert_int_equal(n, 0);
    assert_null(q.entries);
    tn_quota_fini(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_per_name),
        cmocka_unit_test(test_no_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
