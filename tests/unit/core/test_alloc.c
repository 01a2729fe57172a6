/* The allocator's failure injection, as seen by its callers. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/buf.h"

static void test_alloc_failure_injection(void **state)
{
    (void)state;
    tn_alloc_fail_after(2);
    void *a = tn_malloc(8), *b = tn_malloc(8);
    void *c = tn_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_true(tn_alloc_failed());
    tn_buf_t buf;
    tn_buf_init(&buf);
    assert_int_equal(tn_buf_append(&buf, "x", 1), UV_ENOMEM);
    assert_null(tn_msg_new("x", 1));
    tn_alloc_fail_after(-1);
    assert_int_equal(tn_buf_append(&buf, "x", 1), 0);
    tn_buf_fini(&buf);
    tn_free(a);
    tn_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_failure_injection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
