/* The error table: names and texts for tern and libuv codes. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"

#include <errno.h>
#include <string.h>

static void test_error_table(void **state)
{
    (void)state;
    assert_string_equal(tn_err_name(TN_ECORRUPT), "TN_ECORRUPT");
    assert_string_equal(tn_err_name(TN_EDISKHIGH), "TN_EDISKHIGH");
    assert_string_equal(tn_err_name(UV_EIO), "EIO");
    assert_string_equal(tn_err_name(0), "OK");
    assert_non_null(strstr(tn_strerror(TN_EDISKHIGH), "watermark"));
    assert_string_equal(tn_strerror(UV_ENOMEM), uv_strerror(UV_ENOMEM));
    /* Every tern code has its own name and text. */
    for (int e = TN__ERR_BASE + 1; e < TN__ERR_END; e++) {
        assert_int_equal(strncmp(tn_err_name(e), "TN_E", 4), 0);
        assert_true(strlen(tn_strerror(e)) > 5);
    }
    assert_int_equal(tn_err_from_errno(5), -5);
    /* A quota's full disk, which libuv has no code for. */
    assert_string_equal(tn_strerror(-EDQUOT), "disk quota exceeded");
    assert_string_equal(tn_err_name(-EDQUOT), "EDQUOT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
