/* The words and the retry class of a replicated partition's refusals,
 * which every door shares, and the TN_TEST hook the doors' end-to-end
 * tests provoke them with. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/replerr.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

static void test_texts(void **state)
{
    (void)state;
    assert_string_equal(tn_replerr_text(TN_EFEWREPLICAS), "not enough in-sync replicas");
    assert_string_equal(tn_replerr_text(TN_ENOTSERVING), "partition leader not serving yet");
    assert_non_null(strstr(tn_replerr_text(TN_EFENCED), "stale leader epoch"));
    assert_true(tn_replerr_retryable(TN_EFEWREPLICAS));
    assert_true(tn_replerr_retryable(TN_EFENCED));
    assert_true(tn_replerr_retryable(TN_ENOTSERVING));
    assert_true(tn_replerr_retryable(TN_EPLACING));
    assert_non_null(
        strstr(tn_replerr_text(TN_EPLACING), "catching up with the cluster's placement"));
    /* Everything else keeps its door's own answer. */
    const int others[] = {0,      TN_EREMOTE, TN_EDISKHIGH, TN_ECORRUPT, TN_EUNKNOWNEPOCH,
                          UV_EIO, UV_ENOMEM,  TN_ENOTFOUND};
    for (size_t i = 0; i < TN_ARRAY_SIZE(others); i++) {
        assert_null(tn_replerr_text(others[i]));
        assert_false(tn_replerr_retryable(others[i]));
    }
    /* The texts are JSON-safe as they are (the nsqd HTTP door prints them
     * into its body unescaped). */
    const int all[] = {TN_EFEWREPLICAS, TN_EFENCED, TN_ENOTSERVING, TN_ECREATING, TN_EPLACING};
    for (size_t i = 0; i < TN_ARRAY_SIZE(all); i++)
        assert_null(strpbrk(tn_replerr_text(all[i]), "\"\\\r\n"));
    assert_string_equal(tn_err_name(TN_ENOTSERVING), "TN_ENOTSERVING");
}

static void test_hook(void **state)
{
    (void)state;
    unsetenv("TERN_TEST_REFUSE");
    assert_int_equal(tn_replerr_test_refusal("few.a", 5, false), 0);
    setenv("TERN_TEST_REFUSE", "few=FEWREPLICAS,fen=FENCED,ns=NOTSERVING,bad=NOSUCH", 1);
    assert_int_equal(tn_replerr_test_refusal("few.a", 5, false), TN_EFEWREPLICAS);
    assert_int_equal(tn_replerr_test_refusal("fenced", 6, false), TN_EFENCED);
    assert_int_equal(tn_replerr_test_refusal("ns1", 3, false), TN_ENOTSERVING);
    assert_int_equal(tn_replerr_test_refusal("bad", 3, false), 0);
    assert_int_equal(tn_replerr_test_refusal("fe", 2, false), 0); /* shorter than the prefix */
    assert_int_equal(tn_replerr_test_refusal("other", 5, false), 0);
    /* len bounds the name: "few" is not a prefix of the first 2 bytes. */
    assert_int_equal(tn_replerr_test_refusal("few.a", 2, false), 0);
    /* Settles read their own variable. */
    assert_int_equal(tn_replerr_test_refusal("few.a", 5, true), 0);
    setenv("TERN_TEST_REFUSE_SETTLE", "s=FENCED", 1);
    assert_int_equal(tn_replerr_test_refusal("s.1", 3, true), TN_EFENCED);
    assert_int_equal(tn_replerr_test_refusal("s.1", 3, false), 0);
    unsetenv("TERN_TEST_REFUSE_SETTLE");
    setenv("TERN_TEST_REFUSE", "malformed", 1);
    assert_int_equal(tn_replerr_test_refusal("malformed", 9, false), 0);
    unsetenv("TERN_TEST_REFUSE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_texts),
        cmocka_unit_test(test_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
