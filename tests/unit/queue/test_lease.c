/* Leases: nonce and owner checks (stale deliveries and other consumers
 * refused), deadlines in order with TOUCH, owner lists for releasing a
 * closed connection's leases, byte accounting, a random model test, and
 * allocation failures leaving the table unchanged. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "queue/lease.h"

#include <stdlib.h>
#include <string.h>

static void test_checks(void **state)
{
    (void)state;
    tn_leases_t ls;
    tn_leases_init(&ls, 1000);
    tn_lease_owner_t a = {0}, b = {0};
    tn_lease_t *l1, *l2, *got;
    assert_int_equal(tn_leases_add(&ls, 10, 1, 100, &a, 5000, &l1), 0);
    assert_int_equal(tn_leases_add(&ls, 11, 2, 50, &b, 4000, &l2), 0);
    assert_int_equal(tn_leases_add(&ls, 10, 1, 100, &b, 6000, &got), UV_EEXIST);
    assert_int_not_equal(l1->nonce, l2->nonce);
    assert_int_equal(tn_leases_count(&ls), 2);
    assert_int_equal(ls.bytes, 150);
    assert_int_equal(a.count, 1);
    assert_int_equal(l2->attempts, 2);

    /* NSQ FIN: by offset and owner. */
    assert_int_equal(tn_leases_find(&ls, 10, false, 0, &a, &got), 0);
    assert_ptr_equal(got, l1);
    assert_int_equal(tn_leases_find(&ls, 10, false, 0, &b, &got), UV_ESRCH);
    assert_int_equal(tn_leases_find(&ls, 12, false, 0, &a, &got), TN_ENOTFOUND);
    /* Native ack: by offset and nonce. */
    assert_int_equal(tn_leases_find(&ls, 11, true, l2->nonce, NULL, &got), 0);
    assert_int_equal(tn_leases_find(&ls, 11, true, l2->nonce + 1, NULL, &got), UV_ESRCH);

    /* A redelivery after expiry gets a new nonce; the old handle is stale. */
    uint32_t old = l1->nonce;
    tn_leases_remove(&ls, l1);
    assert_int_equal(tn_leases_add(&ls, 10, 2, 100, &b, 9000, &l1), 0);
    assert_int_not_equal(l1->nonce, old);
    assert_int_equal(tn_leases_find(&ls, 10, true, old, NULL, &got), UV_ESRCH);
    assert_int_equal(a.count, 0);
    assert_null(a.head);
    assert_int_equal(b.count, 2);
    tn_leases_fini(&ls);
    assert_int_equal(b.count, 0);
    assert_null(b.head);
}

static void test_deadlines(void **state)
{
    (void)state;
    tn_leases_t ls;
    tn_leases_init(&ls, 0);
    tn_lease_t *l[5];
    int64_t dl[5] = {500, 100, 300, 100, 900};
    for (int i = 0; i < 5; i++)
        assert_int_equal(tn_leases_add(&ls, (uint64_t)i, 1, 1, NULL, dl[i], &l[i]), 0);
    assert_int_equal(tn_leases_next_deadline(&ls), 100);
    assert_null(tn_leases_expired(&ls, 99));
    /* TOUCH pushes offset 1 out; offset 3 (same old deadline) now first. */
    tn_leases_touch(&ls, l[1], 1000);
    uint64_t order[5];
    int n = 0;
    tn_lease_t *e;
    while ((e = tn_leases_expired(&ls, 950)) != NULL) {
        order[n++] = e->offset;
        tn_leases_remove(&ls, e);
    }
    assert_int_equal(n, 4);
    uint64_t want[4] = {3, 2, 0, 4};
    assert_memory_equal(order, want, sizeof(want));
    assert_int_equal(tn_leases_next_deadline(&ls), 1000);
    tn_leases_fini(&ls);
    assert_int_equal(tn_leases_next_deadline(&ls), INT64_MAX);
}

static void test_release_owner(void **state)
{
    (void)state;
    tn_leases_t ls;
    tn_leases_init(&ls, 7);
    tn_lease_owner_t conn = {0}, other = {0};
    tn_lease_t *l;
    for (uint64_t off = 0; off < 100; off++)
        assert_int_equal(tn_leases_add(&ls, off, 1, 10, off % 3 ? &conn : &other, 1000, &l), 0);
    assert_int_equal(conn.count, 66);
    /* The connection closes: everything it held goes back. */
    while (conn.head != NULL)
        tn_leases_remove(&ls, conn.head);
    assert_int_equal(conn.count, 0);
    assert_int_equal(tn_leases_count(&ls), 34);
    assert_int_equal(ls.bytes, 340);
    for (uint64_t off = 0; off < 100; off++)
        assert_true((tn_leases_get(&ls, off) != NULL) == (off % 3 == 0));
    tn_leases_fini(&ls);
}

static void test_random_model(void **state)
{
    (void)state;
    enum { K = 300 };
    static int64_t model[K]; /* deadline, or -1 when not leased */
    for (int i = 0; i < K; i++)
        model[i] = -1;
    tn_leases_t ls;
    tn_leases_init(&ls, 3);
    uint64_t x = 12345;
    int64_t now = 0;
    for (int step = 0; step < 100000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t off = (x >> 33) % K;
        tn_lease_t *l = tn_leases_get(&ls, off);
        assert_true((l != NULL) == (model[off] >= 0));
        switch ((x >> 20) % 4) {
        case 0:
            if (l == NULL) {
                int64_t d = now + (int64_t)((x >> 40) % 1000);
                assert_int_equal(tn_leases_add(&ls, off, 1, 1, NULL, d, &l), 0);
                model[off] = d;
            }
            break;
        case 1:
            if (l != NULL) {
                int64_t d = now + (int64_t)((x >> 40) % 1000);
                tn_leases_touch(&ls, l, d);
                model[off] = d;
            }
            break;
        case 2:
            if (l != NULL) {
                tn_leases_remove(&ls, l);
                model[off] = -1;
            }
            break;
        default: {
            now += 10;
            tn_lease_t *e;
            while ((e = tn_leases_expired(&ls, now)) != NULL) {
                assert_true(model[e->offset] >= 0 && model[e->offset] <= now);
                /* Nothing in the model is due earlier. */
                for (int i = 0; i < K; i++)
                    assert_true(model[i] < 0 || model[i] >= model[e->offset]);
                model[e->offset] = -1;
                tn_leases_remove(&ls, e);
            }
            break;
        }
        }
    }
    size_t count = 0;
    for (int i = 0; i < K; i++)
        count += model[i] >= 0;
    assert_int_equal(tn_leases_count(&ls), count);
    assert_int_equal(ls.bytes, count);
    tn_leases_fini(&ls);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    tn_leases_t ls;
    tn_leases_init(&ls, 0);
    tn_lease_owner_t o = {0};
    tn_lease_t *l;
    /* Fill so the next add must grow both the heap and the map. */
    for (uint64_t off = 0; off < 11; off++)
        assert_int_equal(tn_leases_add(&ls, off, 1, 1, &o, 100, &l), 0);
    for (long n = 0;; n++) {
        tn_alloc_fail_after(n);
        int rc = tn_leases_add(&ls, 99, 1, 5, &o, 50, &l);
        tn_alloc_fail_after(-1);
        if (rc == 0)
            break;
        assert_int_equal(rc, UV_ENOMEM);
        assert_null(tn_leases_get(&ls, 99));
        assert_int_equal(tn_leases_count(&ls), 11);
        assert_int_equal(ls.bytes, 11);
        assert_int_equal(o.count, 11);
        assert_int_equal(tn_leases_next_deadline(&ls), 100);
        assert_true(n < 100);
    }
    assert_int_equal(tn_leases_next_deadline(&ls), 50);
    tn_leases_fini(&ls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks),         cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_release_owner),  cmocka_unit_test(test_random_model),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
