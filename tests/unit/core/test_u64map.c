/* The u64 map, against a plain array model under random puts and deletes
 * over clustered keys (long probe runs, wrap-around), iteration, growth
 * and shrinking, and allocation failure. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/u64map.h"

#include <stdlib.h>

#define KEYS 5000

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_against_model(void **state)
{
    (void)state;
    static void *model[KEYS];
    static int vals[KEYS];
    tn_u64map_t m;
    tn_u64map_init(&m);
    size_t n = 0;
    for (int step = 0; step < 200000; step++) {
        uint64_t k = rnd() % KEYS;
        /* Keys as the queue will use them: offsets, some with a partition. */
        uint64_t key = (k % 3 == 0) ? (uint64_t)7 << 48 | k : k;
        bool big_phase = (step / 20000) % 2 == 0; /* grow, then shrink */
        if (rnd() % 100 < (big_phase ? 70u : 30u)) {
            if (model[k] == NULL)
                n++;
            model[k] = &vals[k];
            assert_int_equal(tn_u64map_put(&m, key, &vals[k]), 0);
        } else {
            void *got = tn_u64map_del(&m, key);
            assert_ptr_equal(got, model[k]);
            if (model[k] != NULL)
                n--;
            model[k] = NULL;
        }
        assert_int_equal(tn_u64map_size(&m), n);
        if (step % 5000 == 0) {
            for (uint64_t j = 0; j < KEYS; j++) {
                uint64_t kk = (j % 3 == 0) ? (uint64_t)7 << 48 | j : j;
                assert_ptr_equal(tn_u64map_get(&m, kk), model[j]);
            }
            /* Load stays between the shrink and grow thresholds. */
            assert_true(m.cap == 0 || n * 10 <= m.cap * 7);
        }
    }
    /* Iteration sees every entry once. */
    size_t pos = 0, seen = 0;
    uint64_t key;
    void *val;
    while (tn_u64map_next(&m, &pos, &key, &val)) {
        uint64_t j = key & (((uint64_t)1 << 48) - 1);
        assert_ptr_equal(val, model[j]);
        seen++;
    }
    assert_int_equal(seen, n);
    /* Deleting everything shrinks the table back down. */
    for (uint64_t j = 0; j < KEYS; j++)
        tn_u64map_del(&m, (j % 3 == 0) ? (uint64_t)7 << 48 | j : j);
    assert_int_equal(tn_u64map_size(&m), 0);
    assert_true(m.cap <= 32);
    tn_u64map_fini(&m);
}

static void test_edges(void **state)
{
    (void)state;
    tn_u64map_t m;
    tn_u64map_init(&m);
    int a, b;
    assert_null(tn_u64map_get(&m, 1));
    assert_null(tn_u64map_del(&m, 1));
    assert_int_equal(tn_u64map_put(&m, 0, &a), 0); /* key 0 is an ordinary key */
    assert_int_equal(tn_u64map_put(&m, UINT64_MAX, &b), 0);
    assert_ptr_equal(tn_u64map_get(&m, 0), &a);
    assert_ptr_equal(tn_u64map_get(&m, UINT64_MAX), &b);
    assert_int_equal(tn_u64map_put(&m, 0, &b), 0); /* replace */
    assert_int_equal(tn_u64map_size(&m), 2);
    assert_ptr_equal(tn_u64map_get(&m, 0), &b);
    assert_int_equal(tn_u64map_put(&m, 5, NULL), UV_EINVAL);
    tn_u64map_fini(&m);
}

static void test_put_fails_cleanly(void **state)
{
    (void)state;
    tn_u64map_t m;
    tn_u64map_init(&m);
    int v[100];
    for (int i = 0; i < 11; i++) /* fills a 16-slot table to its limit */
        assert_int_equal(tn_u64map_put(&m, (uint64_t)i, &v[i]), 0);
    size_t cap = m.cap;
    tn_alloc_fail_after(0);
    int rc = tn_u64map_put(&m, 99, &v[99]);
    tn_alloc_fail_after(-1);
    assert_int_equal(rc, UV_ENOMEM);
    assert_int_equal(m.cap, cap);
    assert_int_equal(tn_u64map_size(&m), 11);
    assert_null(tn_u64map_get(&m, 99));
    for (int i = 0; i < 11; i++)
        assert_ptr_equal(tn_u64map_get(&m, (uint64_t)i), &v[i]);
    tn_u64map_fini(&m);
}

/* tn_u64map_strkey is FNV-1a 64: the published values of "" and "a",
 * and chaining is the hash of the concatenation. */
static void test_strkey(void **state)
{
    (void)state;
    assert_true(tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, "") == 0xcbf29ce484222325ull);
    assert_true(tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, "a") == 0xaf63dc4c8601ec8cull);
    assert_true(tn_u64map_strkey(tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, "ab"), "c") ==
                tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, "abc"));
    assert_true(tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, "ab") !=
                tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, "ba"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_put_fails_cleanly),
        cmocka_unit_test(test_strkey),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
