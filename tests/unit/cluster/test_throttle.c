/* Move traffic rules (cluster/throttle.h): move-rate's token bucket, which
 * fetches it throttles, which connection a fetch rides, a move's state,
 * and the tally of finished moves. Time is an input: no clock here. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/throttle.h"
#include "meta/cmd.h"

#include <string.h>

#define MIB (1024ull * 1024)

static void test_bucket_starts_full_and_refills(void **state)
{
    (void)state;
    tn_throttle_t t;
    tn_throttle_init(&t, 10 * MIB, 1000);
    assert_int_equal(t.burst, MIB); /* rate / 10 */
    /* Full at the start: a grant up to the burst, then nothing. */
    assert_true(tn_throttle_ready(&t, 1000));
    assert_int_equal(tn_throttle_grant(&t, 1000, 4 * MIB), MIB);
    assert_false(tn_throttle_ready(&t, 1000));
    assert_int_equal(tn_throttle_grant(&t, 1000, MIB), 0);
    assert_int_equal(t.waits, 1);
    /* 10 ms at 10 MiB/s: 104857 bytes. */
    assert_int_equal(tn_throttle_grant(&t, 1010, 4 * MIB), 10 * MIB / 100);
    /* A clock that goes back adds nothing. */
    assert_int_equal(tn_throttle_grant(&t, 900, MIB), 0);
    /* A long idle fills it to the burst, not past it. */
    assert_int_equal(tn_throttle_grant(&t, 1000000, 8 * MIB), MIB);
}

static void test_bucket_min_burst_and_unlimited(void **state)
{
    (void)state;
    tn_throttle_t t;
    tn_throttle_init(&t, 100 * 1024, 0); /* 100 KiB/s: rate / 10 is below the floor */
    assert_int_equal(t.burst, TN_THROTTLE_MIN_BURST);
    assert_int_equal(tn_throttle_grant(&t, 0, MIB), TN_THROTTLE_MIN_BURST);
    /* 0 is unlimited: every grant is what was asked, never a wait. */
    tn_throttle_init(&t, 0, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(tn_throttle_grant(&t, 0, 3 * MIB), 3 * MIB);
    assert_true(tn_throttle_ready(&t, 0));
    tn_throttle_settle(&t, 3 * MIB, 2 * MIB);
    assert_int_equal(t.copied, 2 * MIB); /* still counted */
    assert_int_equal(t.waits, 0);
}

static void test_settle_refunds_and_owes(void **state)
{
    (void)state;
    tn_throttle_t t;
    tn_throttle_init(&t, MIB, 0); /* burst 104857 */
    uint64_t g = tn_throttle_grant(&t, 0, 1000000);
    assert_int_equal(g, MIB / 10);
    /* The read found less: the rest goes back. */
    tn_throttle_settle(&t, g, 1000);
    assert_int_equal(tn_throttle_grant(&t, 0, 1000000), MIB / 10 - 1000);
    /* A read past its grant (one record over) is owed: no grant until
     * the debt is paid. */
    g = tn_throttle_grant(&t, 100, 1000000); /* 100 ms: 104857 */
    assert_int_equal(g, MIB / 10);
    tn_throttle_settle(&t, g, g + 200000);
    assert_false(tn_throttle_ready(&t, 200)); /* +104857, still -95143 */
    assert_false(tn_throttle_ready(&t, 290)); /* +94371 more: -772 */
    assert_true(tn_throttle_ready(&t, 300));  /* +10485: in credit */
    assert_int_equal(t.copied, 1000 + g + 200000);
}

/* The rate holds over time: whatever the read sizes and the ticks, the
 * bytes granted and read in T ms stay under burst + rate x T + one record
 * (the bound the cluster test asserts from the outside). */
static void test_rate_holds(void **state)
{
    (void)state;
    const uint64_t rate = MIB, rec = 30000;
    tn_throttle_t t;
    tn_throttle_init(&t, rate, 0);
    uint64_t read = 0;
    for (uint64_t now = 0; now <= 20000; now += 7) {
        uint64_t g = tn_throttle_grant(&t, now, MIB);
        if (g == 0)
            continue;
        /* whole records: at least one, never past the grant by more */
        uint64_t got = g < rec ? rec : g / rec * rec;
        tn_throttle_settle(&t, g, got);
        read += got;
        assert_true(read <= t.burst + rate * now / 1000 + rec);
    }
    /* and it does not starve either: close to the rate */
    assert_true(read >= rate * 20000 / 1000 - rec);
}

static tn_pstate_t state3(uint32_t nisr, uint32_t min_insync)
{
    tn_pstate_t ps;
    memset(&ps, 0, sizeof(ps));
    ps.nreplicas = 4;
    ps.replicas[0] = 4;
    ps.replicas[1] = 2;
    ps.replicas[2] = 3;
    ps.replicas[3] = 1;
    ps.leader = 1;
    ps.min_insync = min_insync;
    uint32_t isr[] = {1, 2, 3};
    for (uint32_t i = 0; i < nisr; i++)
        ps.isr[ps.nisr++].node = isr[i];
    return ps;
}

static void test_applies(void **state)
{
    (void)state;
    tn_pstate_t ps = state3(3, 2);
    assert_true(tn_throttle_applies(&ps, 4));  /* a move's target, out of the ISR */
    assert_false(tn_throttle_applies(&ps, 2)); /* in sync: never */
    assert_false(tn_throttle_applies(&ps, 3));
    ps = state3(2, 2); /* 3 left the ISR; the ISR still takes writes */
    assert_true(tn_throttle_applies(&ps, 3));
    ps = state3(1, 2); /* below min_insync: its catching up is urgent */
    assert_false(tn_throttle_applies(&ps, 2));
    assert_false(tn_throttle_applies(&ps, 4));
}

static void test_lane(void **state)
{
    (void)state;
    assert_false(tn_throttle_bulk(true, false)); /* in sync, keeping up: normal */
    assert_true(tn_throttle_bulk(false, false)); /* out of the ISR: bulk */
    assert_true(tn_throttle_bulk(true, true));   /* in the ISR, far behind: bulk */
    assert_true(tn_throttle_bulk(false, true));
    assert_false(tn_throttle_far(0, MIB));
    assert_false(tn_throttle_far(MIB / 2 - 1, MIB));
    assert_true(tn_throttle_far(MIB / 2, MIB));
    assert_true(tn_throttle_far(MIB + 100, MIB)); /* one record past max */
    assert_false(tn_throttle_far(100, 0));
}

static void test_move_state(void **state)
{
    (void)state;
    assert_string_equal(tn_throttle_move_state(true, true, 5 * MIB), "handing_over");
    assert_string_equal(tn_throttle_move_state(true, false, 0), "handing_over");
    assert_string_equal(tn_throttle_move_state(false, true, TN_THROTTLE_CLOSE_BYTES + 1),
                        "copying");
    assert_string_equal(tn_throttle_move_state(false, true, TN_THROTTLE_CLOSE_BYTES),
                        "catching_up");
    assert_string_equal(tn_throttle_move_state(false, true, 0), "catching_up");
    /* Not known here (not the leader): never claims copying. */
    assert_string_equal(tn_throttle_move_state(false, false, 0), "catching_up");
}

static void test_tally(void **state)
{
    (void)state;
    tn_move_tally_t t;
    tn_move_tally_init(&t, 10000);
    assert_false(tn_move_tally_note(&t, 1, TN_MOVE_DONE, 1000, 9999)); /* before the start */
    assert_true(tn_move_tally_note(&t, 2, TN_MOVE_DONE, 10000, 13500));
    assert_false(tn_move_tally_note(&t, 2, TN_MOVE_DONE, 10000, 13500)); /* seen */
    assert_true(tn_move_tally_note(&t, 3, TN_MOVE_ABORTED, 12000, 12500));
    assert_true(tn_move_tally_note(&t, 4, TN_MOVE_FAILED, 13000, 13500));
    assert_int_equal(t.done, 1);
    assert_int_equal(t.aborted, 1);
    assert_int_equal(t.failed, 1);
    assert_int_equal(t.seconds_count, 3);
    assert_true(t.seconds_sum > 4.499 && t.seconds_sum < 4.501);
    /* The ring of ids holds more than the metastore keeps (64): a scan of
     * the whole ring after 100 more moves counts none twice. */
    for (uint64_t id = 100; id < 200; id++)
        assert_true(tn_move_tally_note(&t, id, TN_MOVE_DONE, 20000, 20001));
    for (uint64_t id = 136; id < 200; id++)
        assert_false(tn_move_tally_note(&t, id, TN_MOVE_DONE, 20000, 20001));
    assert_int_equal(t.done, 101);
}

/* max-repairs-per-node: at most cap slots taken at once, the rest refused
 * (counted) until one is given back; the peak never passes the cap. */
static void test_repair_slots(void **state)
{
    (void)state;
    tn_repair_slots_t s;
    tn_repair_slots_init(&s, 0);
    assert_int_equal(s.cap, TN_REPAIR_SLOTS_DEFAULT);
    tn_repair_slots_init(&s, 3);
    for (int i = 0; i < 3; i++)
        assert_true(tn_repair_slots_take(&s));
    assert_false(tn_repair_slots_take(&s));
    assert_false(tn_repair_slots_take(&s));
    assert_int_equal(s.waits, 2);
    assert_int_equal(s.running, 3);
    tn_repair_slots_give(&s);
    assert_true(tn_repair_slots_take(&s)); /* a waiter's turn */
    assert_false(tn_repair_slots_take(&s));
    for (int i = 0; i < 3; i++)
        tn_repair_slots_give(&s);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.peak, 3);
    assert_int_equal(s.waits, 3);
    /* Cap 1: one at a time, over many rounds. */
    tn_repair_slots_init(&s, 1);
    for (int i = 0; i < 10; i++) {
        assert_true(tn_repair_slots_take(&s));
        assert_false(tn_repair_slots_take(&s));
        tn_repair_slots_give(&s);
    }
    assert_int_equal(s.peak, 1);
    assert_int_equal(s.waits, 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_starts_full_and_refills),
        cmocka_unit_test(test_bucket_min_burst_and_unlimited),
        cmocka_unit_test(test_settle_refunds_and_owes),
        cmocka_unit_test(test_rate_holds),
        cmocka_unit_test(test_applies),
        cmocka_unit_test(test_lane),
        cmocka_unit_test(test_move_state),
        cmocka_unit_test(test_tally),
        cmocka_unit_test(test_repair_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
