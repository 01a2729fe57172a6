/* The name rule shared by storage and every door. */
#include "core/platform.h"

#include "testutil.h"

#include "core/name.h"

#include <string.h>

static void test_rule(void **state)
{
    (void)state;
    assert_true(tn_name_valid("orders.v2_eu-west", 17));
    assert_true(tn_name_valid("..a", 3));
    assert_false(tn_name_valid("", 0));
    assert_false(tn_name_valid(".", 1));
    assert_false(tn_name_valid("..", 2));
    assert_false(tn_name_valid("a/b", 3));
    assert_false(tn_name_valid("a b", 3));
    assert_false(tn_name_valid("c#ephemeral", 11));
    assert_false(tn_name_valid("nul\0x", 5));
    char longname[TN_NAME_MAX + 1];
    memset(longname, 'a', sizeof(longname));
    assert_true(tn_name_valid(longname, TN_NAME_MAX));
    assert_false(tn_name_valid(longname, TN_NAME_MAX + 1));
}

static void test_feed_channel(void **state)
{
    (void)state;
    const char *yes[] = {"ws.1.7#ephemeral", "ws.0.123456789#ephemeral"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(yes); i++)
        assert_true(tn_name_feed_channel(yes[i], strlen(yes[i])));
    const char *no[] = {"ws.1.7",
                        "ws..7#ephemeral",
                        "ws.1.#ephemeral",
                        "ws.1#ephemeral",
                        "ws.a.7#ephemeral",
                        "wx.1.7#ephemeral",
                        "ws.1.7.8#ephemeral",
                        "ws.1.7#ephemeralx",
                        "ws.-1.7#ephemeral",
                        "#ephemeral",
                        ""};
    for (size_t i = 0; i < TN_ARRAY_SIZE(no); i++)
        assert_false(tn_name_feed_channel(no[i], strlen(no[i])));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_feed_channel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
