/* The stalled-move rule (cluster/movestall.h): when a partition's leader
 * fails a move whose target makes no progress. Time is an input: no clock
 * here. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/movestall.h"

#define TIMEOUT 3000
#define END     5000

static tn_movestall_target_t target(uint32_t node, bool seen, uint64_t end)
{
    tn_movestall_target_t t = {
        .node = node, .in_isr = false, .alive = true, .seen = seen, .end = end};
    return t;
}

/* A target whose copy does not advance for the timeout is stalled; one
 * whose copy advances never is, however long the move takes. */
static void test_advanced_and_not(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    tn_movestall_target_t t[2] = {target(4, true, 100), target(2, true, END)};
    uint64_t now = 1000;
    /* Advancing every second for a long while: never stalled. */
    for (int i = 0; i < 20; i++, now += 1000) {
        t[0].end += 10;
        assert_false(tn_movestall_check(&st, 7, false, t, 2, END, now, TIMEOUT, &v));
    }
    /* Stuck from now on: not before the timeout, then stalled. */
    uint64_t stuck = now - 1000; /* its last advance */
    assert_false(tn_movestall_check(&st, 7, false, t, 2, END, stuck + TIMEOUT - 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 7, false, t, 2, END, stuck + TIMEOUT, TIMEOUT, &v));
    assert_int_equal(v.node, 4);
    assert_true(v.seen);
    assert_int_equal(v.end, t[0].end);
    assert_int_equal(v.idle_ms, TIMEOUT);
    /* One more record copied: the clock starts again. */
    t[0].end++;
    assert_false(tn_movestall_check(&st, 7, false, t, 2, END, stuck + TIMEOUT + 1, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 7, false, t, 2, END, stuck + 2 * TIMEOUT, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 7, false, t, 2, END, stuck + 2 * TIMEOUT + 1, TIMEOUT, &v));
}

/* A target that never fetched here stalls too (it cannot open the
 * partition, or never reaches this leader); a truncation is no progress
 * (copying again what it cut off is). */
static void test_never_fetched_and_truncated(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    tn_movestall_target_t t = target(3, false, 0);
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 100, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 9, false, &t, 1, END, 100 + TIMEOUT, TIMEOUT, &v));
    assert_int_equal(v.node, 3);
    assert_false(v.seen);
    /* Its first fetch is progress. */
    t = target(3, true, 0);
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 200 + TIMEOUT, TIMEOUT, &v));
    t.end = 400;
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 300 + TIMEOUT, TIMEOUT, &v));
    /* Truncated to 300 (a divergence): no progress, its clock runs on
     * from the copy of 400. */
    t.end = 300;
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 400 + TIMEOUT, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 300 + 2 * TIMEOUT - 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 9, false, &t, 1, END, 300 + 2 * TIMEOUT, TIMEOUT, &v));
    assert_int_equal(v.end, 300);
}

/* A dead target is rule 9's (replace-dead-after), never stalled here; its
 * clock starts again when it is back. A target at the leader's log end has
 * nothing to copy; one in the ISR is done. */
static void test_dead_caught_up_in_isr(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    tn_movestall_target_t t[3] = {target(4, true, 10), target(5, true, END), target(6, true, 20)};
    t[0].alive = false;
    t[2].in_isr = true;
    for (uint64_t now = 0; now <= 4 * TIMEOUT; now += 500)
        assert_false(tn_movestall_check(&st, 11, false, t, 3, END, now, TIMEOUT, &v));
    /* Back alive, stuck: stalled one timeout after it came back. */
    t[0].alive = true;
    assert_false(tn_movestall_check(&st, 11, false, t, 3, END, 5 * TIMEOUT - 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 11, false, t, 3, END, 6 * TIMEOUT, TIMEOUT, &v));
    assert_int_equal(v.node, 4);
    /* The log grows past member 5, which copies no more: it stalls next
     * (after member 4 in target order). */
    t[0].end = END + 100;
    assert_false(tn_movestall_check(&st, 11, false, t, 3, END + 100, 6 * TIMEOUT + 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 11, false, t, 3, END + 100, 7 * TIMEOUT + 1, TIMEOUT, &v));
    assert_int_equal(v.node, 5);
}

/* A ready move (every target in the ISR), no move, or timeout 0 (never)
 * resets the clocks; a new move id starts them again. */
static void test_ready_off_new_move(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    tn_movestall_target_t t = target(4, true, 10);
    assert_false(tn_movestall_check(&st, 1, false, &t, 1, END, 0, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 1, true, &t, 1, END, TIMEOUT, TIMEOUT, &v));
    assert_int_equal(st.move_id, 0);
    assert_false(tn_movestall_check(&st, 1, false, &t, 1, END, 10 * TIMEOUT, 0, &v));
    assert_false(tn_movestall_check(&st, 0, false, &t, 1, END, 11 * TIMEOUT, TIMEOUT, &v));
    /* Watched again from 12 x TIMEOUT. */
    assert_false(tn_movestall_check(&st, 1, false, &t, 1, END, 12 * TIMEOUT, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 1, false, &t, 1, END, 13 * TIMEOUT - 1, TIMEOUT, &v));
    /* Another move of the partition: its own clocks. */
    assert_false(tn_movestall_check(&st, 2, false, &t, 1, END, 13 * TIMEOUT, TIMEOUT, &v));
    assert_int_equal(st.move_id, 2);
    assert_true(tn_movestall_check(&st, 2, false, &t, 1, END, 14 * TIMEOUT, TIMEOUT, &v));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advanced_and_not),
        cmocka_unit_test(test_never_fetched_and_truncated),
        cmocka_unit_test(test_dead_caught_up_in_isr),
        cmocka_unit_test(test_ready_off_new_move),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
