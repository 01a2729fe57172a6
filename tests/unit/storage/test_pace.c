/* How a committer picks its way of gathering rounds (storage/pace.h),
 * driven with simulated time: a load where flow is faster switches to flow
 * after two probes and stays there; a load where the two tie, or
 * cohort is faster, keeps cohort; a load that changes is followed at a
 * later probe; epochs with an idle gap or cohort epochs of rounds of one
 * are not counted, flow's rounds of one are;
 * probes that change nothing come less and less often. */
#include "core/platform.h"

#include "testutil.h"

#include "storage/pace.h"

#include <string.h>

#define ROUND_NS 100000LL /* every simulated round takes 100 µs */

typedef struct {
    tn__pace_t p;
    int64_t now;
} sim_t;

/* Run for ms of simulated time; a round completes cohort_per_round or
 * flow_per_round requests depending on the way it runs, which sets each
 * way's rate. */
static void run(sim_t *s, int ms, size_t cohort_per_round, size_t flow_per_round)
{
    int64_t end = s->now + (int64_t)ms * 1000000;
    while (s->now < end) {
        s->now += ROUND_NS;
        tn__pace_round(&s->p, s->p.flow ? flow_per_round : cohort_per_round, s->now);
    }
}

static void sim_init(sim_t *s)
{
    memset(s, 0, sizeof(*s));
    s->now = 1000000000LL;
    tn__pace_init(&s->p, s->now);
}

static void test_starts_with_cohort(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    assert_false(s.p.flow);
    assert_false(s.p.pref_flow);
    /* Less than an epoch: nothing decided, nothing counted. */
    run(&s, 150, 8, 16);
    assert_false(s.p.flow);
    assert_int_equal(s.p.epochs[0] + s.p.epochs[1], 0);
}

static void test_flow_faster_switches_and_stays(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    /* Flow completes twice the requests per round: the first counted
     * epoch (cohort) is followed by a probe (flow) and one more cohort
     * epoch. One winning probe does not switch... */
    run(&s, 700, 8, 16);
    assert_false(s.p.pref_flow);
    assert_int_equal(s.p.wins, 1);
    /* ...a second one, at once, does. */
    run(&s, 600, 8, 16);
    assert_true(s.p.pref_flow);
    assert_int_equal(s.p.switches, 1);
    assert_true(s.p.rate[1] > s.p.rate[0]);
    /* From then on flow runs, with a probe of cohort now and then whose
     * loss doubles the wait for the next. */
    uint64_t cohort_before = s.p.epochs[0];
    run(&s, 60000, 8, 16);
    assert_true(s.p.pref_flow);
    assert_int_equal(s.p.switches, 1);
    assert_int_equal(s.p.backoff, TN_PACE_BACKOFF_MAX);
    uint64_t probes = s.p.epochs[0] - cohort_before;
    /* 300 epochs of 200 ms; probes after 10, 20, 40, then every 80. */
    assert_true(probes >= 4 && probes <= 7);
    assert_true(s.p.epochs[1] > 280);
}

static void test_tie_keeps_cohort(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    /* Flow 8% faster: within the margin, so cohort stays preferred. */
    run(&s, 20000, 100, 108);
    assert_false(s.p.pref_flow);
    assert_int_equal(s.p.switches, 0);
    assert_true(s.p.epochs[1] >= 2); /* flow was probed */
    assert_true(s.p.epochs[0] > s.p.epochs[1] * 5);
}

static void test_follows_a_changed_load(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    run(&s, 1300, 8, 16);
    assert_true(s.p.pref_flow);
    /* The load changes: now cohort is faster. The next probe of cohort,
     * 10 epochs of 200 ms after the switch, brings it back. */
    run(&s, 2700, 16, 8);
    assert_false(s.p.pref_flow);
    assert_int_equal(s.p.switches, 2);
    assert_int_equal(s.p.backoff, 0);
}

static void test_epochs_not_counted(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    /* Rounds of one request: no cohort, nothing to choose, nothing counted. */
    run(&s, 5000, 1, 1);
    assert_int_equal(s.p.epochs[0] + s.p.epochs[1], 0);
    assert_false(s.p.flow);
    /* An idle gap longer than TN_PACE_IDLE_NS voids the epoch it is in. */
    sim_init(&s);
    run(&s, 150, 8, 16);
    tn__pace_idle(&s.p, TN_PACE_IDLE_NS + 1);
    run(&s, 100, 8, 16); /* the epoch ends here, not counted */
    assert_int_equal(s.p.epochs[0] + s.p.epochs[1], 0);
    assert_false(s.p.flow);
    /* A short idle wait (a writer that paused for less) does not. */
    tn__pace_idle(&s.p, TN_PACE_IDLE_NS / 2);
    run(&s, 250, 8, 16);
    assert_int_equal(s.p.epochs[0], 1);
    /* A voided probe is run again: an idle gap in the probing epoch. */
    assert_true(s.p.flow); /* the probe epoch runs */
    tn__pace_idle(&s.p, TN_PACE_IDLE_NS + 1);
    run(&s, 200, 8, 16);
    assert_false(s.p.pref_flow);
    assert_int_equal(s.p.epochs[1], 0);
    /* One counted cohort epoch, then the probe again, then the decision;
     * twice. */
    run(&s, 1400, 8, 16);
    assert_true(s.p.pref_flow);
    assert_int_equal(s.p.switches, 1);
}

static void test_flow_rounds_of_one_count(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    run(&s, 1300, 8, 16);
    assert_true(s.p.pref_flow);
    /* A few writers: flow splits them into rounds of one, cohort gathers
     * three a round. Flow's epochs still count, so the next probe of
     * cohort finds it faster and brings it back. */
    run(&s, 3000, 3, 1);
    assert_false(s.p.pref_flow);
    assert_int_equal(s.p.switches, 2);
    /* A lone writer with flow preferred: the probe of cohort finds nothing
     * to gather and leaves cohort preferred; its epochs are not counted
     * from then on, so nothing is probed while the load stays. */
    sim_init(&s);
    run(&s, 1300, 8, 16);
    assert_true(s.p.pref_flow);
    uint64_t counted = s.p.epochs[0] + s.p.epochs[1];
    run(&s, 3000, 1, 1);
    assert_false(s.p.pref_flow);
    assert_int_equal(s.p.switches, 2);
    uint64_t after = s.p.epochs[0] + s.p.epochs[1];
    run(&s, 5000, 1, 1);
    assert_int_equal(s.p.epochs[0] + s.p.epochs[1], after);
    assert_true(after > counted); /* flow's epochs of one counted until the probe */
    assert_false(s.p.flow);
}

static void test_epoch_needs_rounds(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s);
    /* Slow rounds: 300 ms of time but fewer than TN_PACE_EPOCH_ROUNDS
     * rounds do not end an epoch. */
    for (int i = 0; i < TN_PACE_EPOCH_ROUNDS - 1; i++) {
        s.now += 10000000; /* 10 ms a round */
        tn__pace_round(&s.p, 8, s.now);
    }
    assert_int_equal(s.p.epochs[0], 0);
    s.now += 10000000;
    tn__pace_round(&s.p, 8, s.now);
    assert_int_equal(s.p.epochs[0], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_with_cohort),
        cmocka_unit_test(test_flow_faster_switches_and_stays),
        cmocka_unit_test(test_tie_keeps_cohort),
        cmocka_unit_test(test_follows_a_changed_load),
        cmocka_unit_test(test_epochs_not_counted),
        cmocka_unit_test(test_flow_rounds_of_one_count),
        cmocka_unit_test(test_epoch_needs_rounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
