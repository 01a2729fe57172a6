/* Hand-over fence (cluster/handfence.h): the new leader's take-over hold
 * and the delivery lease. Time is an input: no clock here. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/handfence.h"

static tn_handfence_change_t change(uint32_t old_leader, uint32_t old_epoch, uint32_t leader,
                                    uint32_t epoch, bool fenced)
{
    tn_handfence_change_t c = {.self = 2,
                               .old_leader = old_leader,
                               .old_epoch = old_epoch,
                               .leader = leader,
                               .epoch = epoch,
                               .old_fenced = fenced};
    return c;
}

/* A live hand-over (reorder, hand-back, forced election: the old leader
 * is alive and not fenced) holds until the old leader fetches with the
 * new epoch; an older epoch, or another node, does not end it. */
static void test_hold_ends_on_old_leaders_fetch(void **state)
{
    (void)state;
    tn_handfence_cfg_t cfg;
    tn_handfence_config(&cfg, 1000, 6000);
    tn_handfence_t f;
    tn_handfence_init(&f);
    tn_handfence_change_t c = change(1, 4, 2, 5, false);
    assert_true(tn_handfence_change(&f, &cfg, &c, 1000));
    assert_true(tn_handfence_holds(&f, 1001));
    assert_false(tn_handfence_fetched(&f, 1, 4)); /* not applied yet */
    assert_false(tn_handfence_fetched(&f, 3, 5)); /* another follower */
    assert_true(tn_handfence_holds(&f, 1500));
    assert_true(tn_handfence_fetched(&f, 1, 5));
    assert_false(tn_handfence_holds(&f, 1501));
    /* Once ended, later fetches change nothing. */
    assert_false(tn_handfence_fetched(&f, 1, 5));
    /* A later epoch (the old leader applied more since) ends it too. */
    assert_true(tn_handfence_change(&f, &cfg, &c, 2000));
    assert_true(tn_handfence_fetched(&f, 1, 7));
}

/* A dead old leader never fetches: the hold ends by itself, after the
 * lease it respects plus the margin, and not before. */
static void test_hold_is_bounded(void **state)
{
    (void)state;
    tn_handfence_cfg_t cfg;
    tn_handfence_config(&cfg, 1000, 6000);
    tn_handfence_t f;
    tn_handfence_init(&f);
    tn_handfence_change_t c = change(1, 4, 2, 5, false);
    assert_true(tn_handfence_change(&f, &cfg, &c, 1000));
    assert_true(tn_handfence_holds(&f, 1000 + cfg.wait_ms - 1));
    assert_false(tn_handfence_holds(&f, 1000 + cfg.wait_ms));
    assert_int_equal(f.node, 0);
    /* The bound exceeds the lease: whatever the old leader delivered on
     * its last confirmation ended before the hold does. */
    assert_int_equal(cfg.lease_ms, 2000);
    assert_int_equal(cfg.wait_ms, 3000);
    assert_true(cfg.wait_ms > cfg.lease_ms);
}

/* A fenced old leader is past its lease only when the session timeout
 * exceeds the lease and the margin: then no hold; else the hold too. */
static void test_fenced_old_leader(void **state)
{
    (void)state;
    tn_handfence_cfg_t cfg;
    tn_handfence_config(&cfg, 1000, 6000);
    assert_true(cfg.fence_covers);
    tn_handfence_t f;
    tn_handfence_init(&f);
    tn_handfence_change_t c = change(1, 4, 2, 5, true);
    assert_false(tn_handfence_change(&f, &cfg, &c, 1000));
    tn_handfence_config(&cfg, 1000, 3000); /* the suite's: exactly covered */
    assert_true(cfg.fence_covers);
    tn_handfence_config(&cfg, 1000, 2500); /* shorter than the lease + margin */
    assert_false(cfg.fence_covers);
    assert_true(tn_handfence_change(&f, &cfg, &c, 1000));
    tn_handfence_config(&cfg, 5000, 6000); /* a long election timeout: a long lease */
    assert_int_equal(cfg.lease_ms, 10000);
    assert_false(cfg.fence_covers);
}

/* No hold: no leader before (offline), this node already led, or a
 * state that does not make this node the leader (which also ends a
 * hold). */
static void test_no_hold(void **state)
{
    (void)state;
    tn_handfence_cfg_t cfg;
    tn_handfence_config(&cfg, 1000, 6000);
    tn_handfence_t f;
    tn_handfence_init(&f);
    tn_handfence_change_t c = change(0, 4, 2, 5, false);
    assert_false(tn_handfence_change(&f, &cfg, &c, 1000));
    c = change(2, 5, 2, 5, false);
    assert_false(tn_handfence_change(&f, &cfg, &c, 1000));
    /* A stale state (the epoch did not move) starts nothing. */
    c = change(1, 5, 2, 5, false);
    assert_false(tn_handfence_change(&f, &cfg, &c, 1000));
    /* Held, then another node leads: nothing held here any more. */
    c = change(1, 4, 2, 5, false);
    assert_true(tn_handfence_change(&f, &cfg, &c, 1000));
    c = change(2, 5, 3, 6, false);
    assert_false(tn_handfence_change(&f, &cfg, &c, 1100));
    assert_false(tn_handfence_holds(&f, 1101));
}

/* A later state of the same tenure (an ISR change) keeps the hold and
 * its bound. */
static void test_hold_survives_same_tenure(void **state)
{
    (void)state;
    tn_handfence_cfg_t cfg;
    tn_handfence_config(&cfg, 1000, 6000);
    tn_handfence_t f;
    tn_handfence_init(&f);
    tn_handfence_change_t c = change(1, 4, 2, 5, false);
    assert_true(tn_handfence_change(&f, &cfg, &c, 1000));
    c = change(2, 5, 2, 5, false);
    assert_true(tn_handfence_change(&f, &cfg, &c, 1200));
    assert_int_equal(f.until, 1000 + cfg.wait_ms);
    assert_false(tn_handfence_change(&f, &cfg, &c, 1000 + cfg.wait_ms));
}

static void test_lease(void **state)
{
    (void)state;
    tn_handfence_cfg_t cfg;
    tn_handfence_config(&cfg, 1000, 6000);
    assert_int_equal(tn_handfence_lease_until(&cfg, 0), 1); /* never confirmed: lapsed */
    assert_int_equal(tn_handfence_lease_until(&cfg, 5000), 7000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hold_ends_on_old_leaders_fetch),
        cmocka_unit_test(test_hold_is_bounded),
        cmocka_unit_test(test_fenced_old_leader),
        cmocka_unit_test(test_no_hold),
        cmocka_unit_test(test_hold_survives_same_tenure),
        cmocka_unit_test(test_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
