/* The stalled-move rule (cluster/movestall.h): when a partition's leader
 * fails a move whose target makes no progress. Time is an input: no clock
 * here. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/movestall.h"

#include <string.h>

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

#define WALL_A 1760000000000ll /* leader A's wall clock at its monotonic 0 */
#define WALL_B 1760000000000ll /* leader B's at its monotonic 0: B started later */

/* Leader A: target 3 stuck at offset 0 from A's ms 1000 on. A proposes a
 * mark at once (none committed), then none while the copy stands still. */
static void test_mark_proposed_rarely(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    tn_pstate_mark_t mk[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 99;
    tn_movestall_target_t t = target(3, true, 0);
    tn_movestall_marks(&st, 7, NULL, 0, 1000, WALL_A + 1000);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 1000, TIMEOUT, &v));
    assert_true(tn_movestall_mark(&st, 1000, TIMEOUT, mk, &n));
    assert_int_equal(n, 1);
    assert_int_equal(mk[0].node, 3);
    assert_int_equal(mk[0].end, 0);
    assert_int_equal(mk[0].ms, WALL_A + 1000);
    /* Not again within timeout/4, committed or not. */
    assert_false(tn_movestall_mark(&st, 1000 + TIMEOUT / 4 - 1, TIMEOUT, mk, &n));
    assert_int_equal(n, 0);
    /* Committed: the copy stands where the mark says, nothing to write,
     * however long. */
    tn_pstate_mark_t committed = {3, 0, WALL_A + 1000};
    for (uint64_t now = 1500; now < 1000 + TIMEOUT; now += 250) {
        tn_movestall_marks(&st, 7, &committed, 1, now, WALL_A + (int64_t)now);
        assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, now, TIMEOUT, &v));
        assert_false(tn_movestall_mark(&st, now, TIMEOUT, mk, &n));
    }
    /* It copies: a new mark, but only once the committed one is older
     * than timeout/4 and A's last proposal too. */
    t.end = 40;
    tn_movestall_reset(&st);
    tn_movestall_marks(&st, 7, &committed, 1, 1100, WALL_A + 1100);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 1100, TIMEOUT, &v));
    assert_false(tn_movestall_mark(&st, 1100, TIMEOUT, mk, &n)); /* the mark is 100 ms old */
    tn_movestall_marks(&st, 7, &committed, 1, 1000 + TIMEOUT / 4, WALL_A + 1000 + TIMEOUT / 4);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 1000 + TIMEOUT / 4, TIMEOUT, &v));
    assert_true(tn_movestall_mark(&st, 1000 + TIMEOUT / 4, TIMEOUT, mk, &n));
    assert_int_equal(n, 1);
    assert_int_equal(mk[0].end, 40);
    assert_int_equal(mk[0].ms, WALL_A + 1100); /* when it advanced (its clock's start) */
    /* A move under way with a timeout 0, or no move: nothing. */
    assert_false(tn_movestall_mark(&st, 100000, 0, mk, &n));
}

/* The promise: a leader change does not restart the clock. A's mark
 * says target 3 stood at 52 since wall W; leader B, started later, sees
 * the copy still at 52 and fails the move one timeout after W, not one
 * timeout after its own start. */
static void test_new_leader_seeded_from_mark(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    int64_t w = WALL_A + 1000; /* the copy's last advance, by A */
    tn_pstate_mark_t committed = {3, 52, w};
    /* B's monotonic 500 is wall W + 2000 (B took over 2 s into the stall). */
    int64_t off = w + 2000 - 500;
    tn_movestall_target_t t = target(3, true, 52);
    tn_movestall_marks(&st, 7, &committed, 1, 500, off + 500);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 500, TIMEOUT, &v));
    tn_movestall_marks(&st, 7, &committed, 1, 1499, off + 1499);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 1499, TIMEOUT, &v));
    tn_movestall_marks(&st, 7, &committed, 1, 1500, off + 1500);
    assert_true(tn_movestall_check(&st, 7, false, &t, 1, END, 1500, TIMEOUT, &v));
    assert_int_equal(v.node, 3);
    assert_true(v.seen);
    assert_int_equal(v.end, 52);
    assert_int_equal(v.idle_ms, TIMEOUT);

    /* A copy that stands elsewhere than the mark (it advanced after it)
     * starts from B's now. */
    tn_movestall_reset(&st);
    t.end = 60;
    tn_movestall_marks(&st, 7, &committed, 1, 500, off + 500);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 500, TIMEOUT, &v));
    tn_movestall_marks(&st, 7, &committed, 1, 500 + TIMEOUT - 1, off + 500 + TIMEOUT - 1);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 500 + TIMEOUT - 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 7, false, &t, 1, END, 500 + TIMEOUT, TIMEOUT, &v));

    /* A mark of another move id is not used: the marks follow the id. */
    tn_movestall_reset(&st);
    t.end = 52;
    tn_movestall_marks(&st, 8, NULL, 0, 500, off + 500);
    assert_false(tn_movestall_check(&st, 8, false, &t, 1, END, 1500, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 8, false, &t, 1, END, 1500 + TIMEOUT - 1, TIMEOUT, &v));
}

/* A target that has not fetched from the new leader yet is seeded from
 * its mark too; its first fetch at the mark's end is no progress, one
 * past it is. Leaders changing every second: the move still fails one
 * timeout after the copy stopped. */
static void test_mark_unseen_and_churn(void **state)
{
    (void)state;
    tn_movestall_verdict_t v;
    int64_t w = WALL_B + 10000;
    tn_pstate_mark_t committed = {4, 0, w};
    /* Leaders one after the other, each for 1 s of wall time, each from
     * its own monotonic 0 (their first check sees it unseen, then seen). */
    bool failed = false;
    int64_t failed_at = 0;
    for (int k = 0; k < 10 && !failed; k++) {
        tn_movestall_t st;
        tn_movestall_reset(&st);
        int64_t start = w + 1000 * k; /* wall at this leader's monotonic 0 */
        tn_movestall_target_t t = target(4, false, 0);
        for (uint64_t now = 0; now < 1000 && !failed; now += 100) {
            if (now >= 300)
                t = target(4, true, 0); /* it found the new leader */
            tn_movestall_marks(&st, 9, &committed, 1, now, start + (int64_t)now);
            if (tn_movestall_check(&st, 9, false, &t, 1, END, now, TIMEOUT, &v)) {
                failed = true;
                failed_at = start + (int64_t)now;
            }
        }
    }
    assert_true(failed);
    assert_int_equal(failed_at, w + TIMEOUT);
    /* The verdict of a leader the target has not fetched from yet says
     * where its copy stood by the mark (it fetched from an earlier one). */
    {
        tn_movestall_t fresh;
        tn_movestall_reset(&fresh);
        tn_movestall_target_t unseen = target(4, false, 0);
        tn_movestall_marks(&fresh, 9, &committed, 1, 0, w + TIMEOUT);
        assert_true(tn_movestall_check(&fresh, 9, false, &unseen, 1, END, 0, TIMEOUT, &v));
        assert_false(v.seen);
        assert_true(v.based);
        assert_int_equal(v.end, 0);
    }
    /* Its first fetch past the mark is progress. */
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_target_t t = target(4, false, 0);
    int64_t start = w + 2500;
    tn_movestall_marks(&st, 9, &committed, 1, 0, start);
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 0, TIMEOUT, &v));
    t = target(4, true, 10);
    tn_movestall_marks(&st, 9, &committed, 1, 400, start + 400);
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 400, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 9, false, &t, 1, END, 400 + TIMEOUT - 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 9, false, &t, 1, END, 400 + TIMEOUT, TIMEOUT, &v));
}

/* A mark from the future (a wall clock behind the old leader's) reads as
 * idle 0, never as a stall at once; a mark from long ago fails the move
 * on the new leader's first look. */
static void test_mark_skew(void **state)
{
    (void)state;
    tn_movestall_t st;
    tn_movestall_reset(&st);
    tn_movestall_verdict_t v;
    tn_movestall_target_t t = target(3, true, 5);
    tn_pstate_mark_t ahead = {3, 5, WALL_A + 100000};
    tn_movestall_marks(&st, 7, &ahead, 1, 1000, WALL_A + 1000);
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 1000, TIMEOUT, &v));
    assert_false(tn_movestall_check(&st, 7, false, &t, 1, END, 1000 + TIMEOUT - 1, TIMEOUT, &v));
    assert_true(tn_movestall_check(&st, 7, false, &t, 1, END, 1000 + TIMEOUT, TIMEOUT, &v));
    tn_movestall_reset(&st);
    tn_pstate_mark_t old = {3, 5, 0};
    tn_movestall_marks(&st, 7, &old, 1, 200, WALL_A + 200);
    assert_true(tn_movestall_check(&st, 7, false, &t, 1, END, 200, TIMEOUT, &v));
    assert_int_equal(v.idle_ms, WALL_A + 200);
}

/* A lead just taken waits up to two report periods for the target's
 * append error while none is known and the target fetched here, or from
 * an earlier leader (its clock from a committed mark: it has not found
 * this lead yet, and reports its error to it within a period); no wait
 * once the error is known, the lead is old enough, or the target never
 * fetched anywhere (it appended nothing, so has no error to tell). */
static void test_wait_for_err(void **state)
{
    (void)state;
    tn_movestall_verdict_t v = {.node = 3, .seen = true, .end = 0, .idle_ms = TIMEOUT};
    const uint64_t became = 5000, period = 1000;
    assert_true(tn_movestall_wait_err(&v, NULL, became, became, period));
    assert_true(tn_movestall_wait_err(&v, NULL, became, became + 2 * period - 1, period));
    assert_false(tn_movestall_wait_err(&v, NULL, became, became + 2 * period, period));
    assert_false(tn_movestall_wait_err(&v, NULL, became, became + 60000, period));
    assert_false(tn_movestall_wait_err(&v, "no space left on device", became, became, period));
    v.seen = false;
    assert_false(tn_movestall_wait_err(&v, NULL, became, became, period));
    v.based = true;
    assert_true(tn_movestall_wait_err(&v, NULL, became, became, period));
    assert_true(tn_movestall_wait_err(&v, NULL, became, became + 2 * period - 1, period));
    assert_false(tn_movestall_wait_err(&v, NULL, became, became + 2 * period, period));
    assert_false(tn_movestall_wait_err(&v, "no space left on device", became, became, period));
}

#define TAIL "): the partition stays on its old replicas"

/* Reason into a buffer of len bytes inside a larger one, whose bytes past
 * len must stay untouched. */
static void reason_in(const tn_movestall_verdict_t *v, uint64_t timeout, uint64_t log_end,
                      const char *err, size_t len, const char *want)
{
    char buf[256];
    memset(buf, 'Z', sizeof(buf));
    tn_movestall_reason(v, timeout, log_end, err, buf, len);
    assert_string_equal(buf, want);
    assert_true(strlen(buf) < len);
    for (size_t i = len; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 'Z');
}

/* The reason's two forms, with and without the target's error. */
static void test_reason_forms(void **state)
{
    (void)state;
    tn_movestall_verdict_t v = {.node = 3, .seen = true, .end = 0, .idle_ms = 3200};
    reason_in(&v, 3000, 52, NULL, 161,
              "target member 3 copied no record for 3s (at offset 0 of 52" TAIL);
    reason_in(&v, 3000, 52, "no space left on device", 161,
              "target member 3 copied no record for 3s (at offset 0 of 52; its last append "
              "error: no space left on device" TAIL);
    tn_movestall_verdict_t u = {.node = 4, .seen = false, .idle_ms = 1600};
    reason_in(&u, 1500, 7, NULL, 161,
              "target member 4 fetched nothing for 1500ms (the log ends at 7" TAIL);
    reason_in(&u, 1500, 7, "i/o error", 161,
              "target member 4 fetched nothing for 1500ms (the log ends at 7; its last append "
              "error: i/o error" TAIL);
    /* Not here yet, but from an earlier leader: where its copy stood. */
    tn_movestall_verdict_t b = {.node = 4, .seen = false, .based = true, .end = 2, .idle_ms = 1600};
    reason_in(&b, 1500, 7, "i/o error", 161,
              "target member 4 copied no record for 1500ms (at offset 2 of 7; its last append "
              "error: i/o error" TAIL);
}

/* An error longer than the room left is cut; the tail is always whole. */
static void test_reason_cut(void **state)
{
    (void)state;
    tn_movestall_verdict_t v = {.node = 3, .seen = true, .end = 1200, .idle_ms = 600000};
    static const char err[] = "input/output error while writing segment 00000000000000001200.log "
                              "of partition st/0 on /data";
    static const char head[] = "target member 3 copied no record for 600s (at offset 1200 of 5000";
    /* 160 bytes: 65 of head, 25 of "; its last append error: ", 28 of
     * the error, 42 of tail. */
    reason_in(&v, 600000, 5000, err, 161,
              "target member 3 copied no record for 600s (at offset 1200 of 5000; its last "
              "append error: input/output error while wri" TAIL);
    char buf[256];
    tn_movestall_reason(&v, 600000, 5000, err, buf, 161);
    assert_int_equal(strlen(buf), 160);
    /* Room for 8 bytes of the error: they are named; for 7: left out. */
    size_t fixed = strlen(head) + strlen("; its last append error: ") + strlen(TAIL);
    reason_in(&v, 600000, 5000, err, fixed + 8 + 1,
              "target member 3 copied no record for 600s (at offset 1200 of 5000; its last "
              "append error: input/ou" TAIL);
    reason_in(&v, 600000, 5000, err, fixed + 7 + 1,
              "target member 3 copied no record for 600s (at offset 1200 of 5000" TAIL);
    /* A buffer too small for the head: cut, NUL ended. */
    reason_in(&v, 600000, 5000, err, 21, "target member 3 copi");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advanced_and_not),
        cmocka_unit_test(test_never_fetched_and_truncated),
        cmocka_unit_test(test_dead_caught_up_in_isr),
        cmocka_unit_test(test_ready_off_new_move),
        cmocka_unit_test(test_mark_proposed_rarely),
        cmocka_unit_test(test_new_leader_seeded_from_mark),
        cmocka_unit_test(test_mark_unseen_and_churn),
        cmocka_unit_test(test_mark_skew),
        cmocka_unit_test(test_wait_for_err),
        cmocka_unit_test(test_reason_forms),
        cmocka_unit_test(test_reason_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
