/* The replicated partition's decision core (cluster/repl.h), event by
 * event: a new leader's epoch-start gate, fencing by epoch, the hw over
 * flushed offsets only, DIVERGING from the epoch history, the follower's
 * truncation and its refusal below the hw, ISR shrink after the lag and
 * expansion with the follower's incarnation, refusals of produces. The
 * randomized whole is tests/unit/cluster/test_repl_sim.c. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/repl.h"
#include "core/err.h"

#include <string.h>

/* An epoch history: epochs[i] starts at starts[i]; the log ends at end. */
typedef struct {
    uint32_t n, epochs[8];
    uint64_t starts[8], end;
} hist_t;

static int hist_end(void *arg, uint32_t epoch, uint32_t *found, uint64_t *end)
{
    const hist_t *h = arg;
    *found = 0;
    *end = 0;
    for (uint32_t i = 0; i < h->n && h->epochs[i] <= epoch; i++) {
        *found = h->epochs[i];
        *end = i + 1 < h->n ? h->starts[i + 1] : h->end;
    }
    return 0;
}

static bool gate_channels; /* core_init: cfg.channels_gate */

static void core_init(tn_repl_t *r, hist_t *h, uint32_t node)
{
    tn_repl_config_t cfg = {
        .channels_gate = gate_channels,
        .node = node,
        .incarnation = 0x100u + node,
        .replica_lag_ms = 300,
        .fetch_idle_ms = 20,
        .fetch_timeout_ms = 100,
        .epoch_end = hist_end,
        .epoch_end_arg = h,
    };
    tn_repl_init(r, &cfg);
}

static tn_pstate_t pstate(uint32_t leader, uint32_t epoch, uint32_t pe, uint32_t nisr)
{
    tn_pstate_t ps;
    memset(&ps, 0, sizeof(ps));
    ps.nreplicas = 3;
    for (uint32_t i = 0; i < 3; i++)
        ps.replicas[i] = i + 1;
    for (uint32_t i = 0; i < nisr; i++)
        ps.isr[i] = (tn_pstate_member_t){i + 1, 0x101u + i};
    ps.nisr = nisr;
    ps.leader = leader;
    ps.leader_epoch = epoch;
    ps.partition_epoch = pe;
    ps.min_insync = 2;
    return ps;
}

static void step_state(tn_repl_t *r, const tn_pstate_t *ps, uint64_t now, tn_repl_actions_t *out)
{
    tn_repl_event_t ev = {.type = TN_REPL_EV_STATE, .now = now};
    ev.u.state = ps;
    tn_repl_step(r, &ev, out);
}

static void step_log(tn_repl_t *r, uint64_t end, uint64_t flushed, uint32_t last_epoch,
                     uint64_t now, tn_repl_actions_t *out)
{
    tn_repl_event_t ev = {.type = TN_REPL_EV_LOG, .now = now};
    ev.u.log.end = end;
    ev.u.log.flushed = flushed;
    ev.u.log.last_epoch = last_epoch;
    tn_repl_step(r, &ev, out);
}

static void step_fetch(tn_repl_t *r, uint32_t node, uint32_t epoch, uint64_t off,
                       uint32_t last_epoch, uint64_t flushed, uint64_t now, tn_repl_actions_t *out)
{
    tn_repl_event_t ev = {.type = TN_REPL_EV_FETCH, .now = now};
    ev.u.fetch = (tn_repl_fetch_t){node, 0x100u + node, epoch, off, last_epoch, flushed, 99};
    tn_repl_step(r, &ev, out);
}

static const tn_repl_action_t *find(const tn_repl_actions_t *out, tn_repl_act_type_t type)
{
    for (uint32_t i = 0; i < out->n; i++)
        if (out->a[i].type == type)
            return &out->a[i];
    return NULL;
}

/* Leader 1 of epoch 3 over a log of 10 records of epoch 2, all flushed. */
static void leader_setup(tn_repl_t *r, hist_t *h, tn_repl_actions_t *out)
{
    memset(h, 0, sizeof(*h));
    h->n = 1;
    h->epochs[0] = 2;
    h->end = 10;
    core_init(r, h, 1);
    step_log(r, 10, 10, 2, 0, out);
    tn_pstate_t ps = pstate(1, 3, 5, 3);
    step_state(r, &ps, 0, out);
    const tn_repl_action_t *a = find(out, TN_REPL_ACT_APPEND_EPOCH_START);
    assert_non_null(a);
    assert_int_equal(a->epoch, 3);
    assert_int_equal(a->offset, 10);
    /* the shell writes it */
    h->n = 2;
    h->epochs[1] = 3;
    h->starts[1] = 10;
    h->end = 11;
    step_log(r, 11, 11, 3, 0, out);
}

/* leader_setup's leader with both followers (2 and 3) fetched up to its
 * log end, 11, at 100. */
static void leader_caught_up(tn_repl_t *r, hist_t *h, tn_repl_actions_t *out)
{
    leader_setup(r, h, out);
    step_fetch(r, 2, 3, 11, 3, 11, 100, out);
    step_fetch(r, 3, 3, 11, 3, 11, 100, out);
}

static void test_epoch_start_gate_and_flushed_hw(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    assert_int_equal(tn_repl_accepts(&r), 0);
    assert_false(tn_repl_serving(&r));
    /* Follower 2 has written all 11 but flushed only 10: no hw move past
     * the epoch-start record (offset 10). */
    step_fetch(&r, 2, 3, 11, 3, 10, 1, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
    assert_non_null(find(&out, TN_REPL_ACT_ANSWER_RECORDS));
    step_fetch(&r, 3, 3, 11, 3, 11, 1, &out);
    assert_null(find(&out, TN_REPL_ACT_HW)); /* 2 still lags on disk */
    step_fetch(&r, 2, 3, 11, 3, 11, 2, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_HW);
    assert_non_null(a);
    assert_int_equal(a->offset, 11);
    assert_true(tn_repl_serving(&r));
}

static void test_fencing_by_epoch(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    step_fetch(&r, 2, 2, 11, 3, 11, 1, &out);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.a[0].type, TN_REPL_ACT_ANSWER_ERROR);
    assert_int_equal(out.a[0].err, TN_EFENCED);
    step_fetch(&r, 2, 4, 11, 3, 11, 1, &out);
    assert_int_equal(out.a[0].err, TN_EUNKNOWNEPOCH);
    assert_non_null(find(&out, TN_REPL_ACT_REFRESH));
    /* A state naming another leader: the old one resigns and takes nothing. */
    tn_pstate_t ps = pstate(2, 4, 6, 3);
    step_state(&r, &ps, 2, &out);
    assert_non_null(find(&out, TN_REPL_ACT_RESIGN));
    assert_int_equal(tn_repl_accepts(&r), TN_EREMOTE);
    /* An older state arriving late changes nothing. */
    tn_pstate_t old = pstate(1, 3, 5, 3);
    step_state(&r, &old, 3, &out);
    assert_int_equal(out.n, 0);
    assert_int_equal(r.role, TN_REPL_FOLLOWER);
}

static void test_diverging_answer(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    /* The follower wrote 14 records in epoch 2 that the leader's history
     * ends at 10. */
    step_fetch(&r, 2, 3, 14, 2, 14, 1, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_ANSWER_DIVERGING);
    assert_non_null(a);
    assert_int_equal(a->epoch, 2);
    assert_int_equal(a->offset, 10);
    assert_int_equal(a->count, 14);
    /* An epoch the leader never had (1 < its first, 2): answered with
     * nothing below it. */
    step_fetch(&r, 3, 3, 5, 1, 5, 1, &out);
    a = find(&out, TN_REPL_ACT_ANSWER_DIVERGING);
    assert_non_null(a);
    assert_int_equal(a->epoch, 0);
    assert_int_equal(a->offset, 0);
}

/* Follower 2 of leader 1 in epoch 3; its own log: epoch 2 from 0 to 14. */
static void follower_setup(tn_repl_t *r, hist_t *h, tn_repl_actions_t *out)
{
    memset(h, 0, sizeof(*h));
    h->n = 1;
    h->epochs[0] = 2;
    h->end = 14;
    core_init(r, h, 2);
    step_log(r, 14, 14, 2, 0, out);
    tn_pstate_t ps = pstate(1, 3, 5, 3);
    step_state(r, &ps, 0, out);
    const tn_repl_action_t *a = find(out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->node, 1);
    assert_int_equal(a->fetch.fetch_offset, 14);
    assert_int_equal(a->fetch.last_fetched_epoch, 2);
    assert_int_equal(a->fetch.leader_epoch, 3);
}

/* follower_setup's follower (log end 14) told by the leader a hw (not
 * above 14) with no records: its hw is that. */
static void follower_with_hw(tn_repl_t *r, hist_t *h, tn_repl_actions_t *out, uint64_t hw)
{
    follower_setup(r, h, out);
    tn_repl_event_t ev = {.type = TN_REPL_EV_RECORDS, .now = 1};
    ev.u.records.leader_epoch = 3;
    ev.u.records.from = 14;
    ev.u.records.count = 0;
    ev.u.records.hw = hw;
    tn_repl_step(r, &ev, out);
    assert_int_equal(r->hw, hw);
}

static void test_follower_truncates_at_divergence(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_setup(&r, &h, &out);
    tn_repl_event_t ev = {.type = TN_REPL_EV_DIVERGING, .now = 1};
    ev.u.diverging.leader_epoch = 3;
    ev.u.diverging.epoch = 2;
    ev.u.diverging.end_offset = 10;
    ev.u.diverging.fetch_offset = 13; /* a late copy for another log end */
    ev.u.diverging.last_fetched_epoch = 2;
    tn_repl_step(&r, &ev, &out);
    assert_int_equal(out.n, 0);
    ev.u.diverging.fetch_offset = 14;
    tn_repl_step(&r, &ev, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_TRUNCATE);
    assert_non_null(a);
    assert_int_equal(a->offset, 10);
}

/* Issue 23: a truncation the shell cannot do (the point was inside an
 * atomic batch) left the log unchanged, and the next tick fetched, was
 * told DIVERGING and truncated again, tens of thousands of times. Now the
 * fetch after a DIVERGING waits fetch_timeout_ms unless the log changed. */
static void test_follower_diverging_backs_off(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_setup(&r, &h, &out);
    tn_repl_event_t ev = {.type = TN_REPL_EV_DIVERGING, .now = 100};
    ev.u.diverging.leader_epoch = 3;
    ev.u.diverging.epoch = 2;
    ev.u.diverging.end_offset = 10;
    ev.u.diverging.fetch_offset = 14;
    ev.u.diverging.last_fetched_epoch = 2;
    tn_repl_step(&r, &ev, &out);
    assert_non_null(find(&out, TN_REPL_ACT_TRUNCATE));
    /* The truncation failed: the log is as it was, nothing fed. */
    tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = 101};
    tn_repl_step(&r, &tick, &out);
    assert_null(find(&out, TN_REPL_ACT_FETCH));
    tick.now = 100 + 99;
    tn_repl_step(&r, &tick, &out);
    assert_null(find(&out, TN_REPL_ACT_FETCH));
    tick.now = 100 + 100; /* fetch_timeout_ms later: asks again */
    tn_repl_step(&r, &tick, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.fetch_offset, 14);
    /* A truncation that did cut (to the batch start 8 below the point)
     * fetches at once from the new end. */
    ev.now = 200;
    tn_repl_step(&r, &ev, &out);
    assert_non_null(find(&out, TN_REPL_ACT_TRUNCATE));
    h.end = 8;
    step_log(&r, 8, 8, 2, 201, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.fetch_offset, 8);
}

static void test_follower_refuses_truncation_below_hw(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_with_hw(&r, &h, &out, 12);
    tn_repl_event_t ev = {.type = TN_REPL_EV_DIVERGING, .now = 2};
    ev.u.diverging.leader_epoch = 3;
    ev.u.diverging.epoch = 2;
    ev.u.diverging.end_offset = 10;
    ev.u.diverging.fetch_offset = 14;
    ev.u.diverging.last_fetched_epoch = 2;
    tn_repl_step(&r, &ev, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_TRUNCATE_REFUSED);
    assert_non_null(a);
    assert_int_equal(a->offset, 10);
    assert_int_equal(a->hw, 12);
    assert_null(find(&out, TN_REPL_ACT_TRUNCATE));
    /* It stops: no more fetches. */
    ev = (tn_repl_event_t){.type = TN_REPL_EV_TICK, .now = 1000};
    tn_repl_step(&r, &ev, &out);
    assert_null(find(&out, TN_REPL_ACT_FETCH));
}

/* A deposed leader following the new one (cluster_moves, 2026-12-06): it
 * fetched at its log end 14, the answer brought the leader's records 14..16
 * of epoch 3 and hw 17, and its own publishes of epoch 2, still queued as it
 * lost the lead, landed at 14..16 first (the append of the fetched records
 * failed: out of range). The hw it learned from that answer must not cover
 * records it has not appended: the leader's DIVERGING at 14 is then cut, not
 * refused as below its hw (which left it out of the ISR for good). */
static void test_follower_hw_waits_for_its_append(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_setup(&r, &h, &out);
    tn_repl_event_t ev = {.type = TN_REPL_EV_RECORDS, .now = 1};
    ev.u.records.leader_epoch = 3;
    ev.u.records.from = 14;
    ev.u.records.count = 3;
    ev.u.records.hw = 17;
    tn_repl_step(&r, &ev, &out);
    assert_non_null(find(&out, TN_REPL_ACT_APPEND));
    assert_true(r.hw <= 14);
    /* The append failed; the log holds its own three records of epoch 2. */
    step_log(&r, 17, 17, 2, 2, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.fetch_offset, 17);
    ev = (tn_repl_event_t){.type = TN_REPL_EV_DIVERGING, .now = 3};
    ev.u.diverging.leader_epoch = 3;
    ev.u.diverging.epoch = 2;
    ev.u.diverging.end_offset = 14;
    ev.u.diverging.fetch_offset = 17;
    ev.u.diverging.last_fetched_epoch = 2;
    tn_repl_step(&r, &ev, &out);
    assert_null(find(&out, TN_REPL_ACT_TRUNCATE_REFUSED));
    a = find(&out, TN_REPL_ACT_TRUNCATE);
    assert_non_null(a);
    assert_int_equal(a->offset, 14);
}

/* An answer naming an offset (OUT_OF_RANGE, GAP) to the follower of
 * follower_setup (log end 14, leader epoch 3): a late copy, an older
 * leader's, or an offset not above its end take no action act; one for
 * offset does, returned. */
static const tn_repl_action_t *offset_answer(tn_repl_t *r, tn_repl_actions_t *out,
                                             tn_repl_ev_type_t type, tn_repl_act_type_t act,
                                             uint64_t offset)
{
    tn_repl_event_t ev = {.type = type, .now = 2};
    ev.u.out_of_range.leader_epoch = 3;
    ev.u.out_of_range.start = offset;
    ev.u.out_of_range.fetch_offset = 13; /* a late copy */
    tn_repl_step(r, &ev, out);
    assert_int_equal(out->n, 0);
    ev.u.out_of_range.leader_epoch = 2; /* an older leader's */
    ev.u.out_of_range.fetch_offset = 14;
    tn_repl_step(r, &ev, out);
    assert_int_equal(out->n, 0);
    ev.u.out_of_range.leader_epoch = 3;
    ev.u.out_of_range.start = 14; /* not above its end */
    tn_repl_step(r, &ev, out);
    assert_null(find(out, act));
    ev.now = 200;
    ev.u.out_of_range.start = offset;
    tn_repl_step(r, &ev, out);
    const tn_repl_action_t *a = find(out, act);
    assert_non_null(a);
    assert_int_equal(a->offset, offset);
    return a;
}

/* A follower behind the leader's log start (retention dropped what it
 * lacks; a wiped disk fetching from 0): OUT_OF_RANGE restarts its log at
 * the leader's start, whatever its hw, and it fetches from there. A late
 * answer for another log end, or a start not above its end, changes
 * nothing. */
static void test_follower_resets_below_the_leaders_start(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_with_hw(&r, &h, &out, 12);
    const tn_repl_action_t *a =
        offset_answer(&r, &out, TN_REPL_EV_OUT_OF_RANGE, TN_REPL_ACT_RESET, 500);
    assert_null(find(&out, TN_REPL_ACT_TRUNCATE_REFUSED));
    /* Done by the shell: the log is empty from 500, its history too. */
    h.n = 0;
    h.end = 500;
    step_log(&r, 500, 500, 0, 201, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.fetch_offset, 500);
    assert_int_equal(a->fetch.last_fetched_epoch, 0);
}

/* A follower whose log ends inside a gap of the leader's (offsets the
 * leader's log never assigned): GAP skips its log to the gap's end,
 * keeping every record and its history, and it fetches from there with
 * the epoch of its last record. A late answer, an older leader's, or an
 * end not above its own change nothing. */
static void test_follower_skips_the_leaders_gap(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_setup(&r, &h, &out);
    const tn_repl_action_t *a = offset_answer(&r, &out, TN_REPL_EV_GAP, TN_REPL_ACT_SKIP, 40);
    assert_null(find(&out, TN_REPL_ACT_RESET));
    assert_null(find(&out, TN_REPL_ACT_TRUNCATE));
    /* Done by the shell: the log's next offset is 40, its history kept. */
    h.end = 40;
    step_log(&r, 40, 40, 2, 201, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.fetch_offset, 40);
    assert_int_equal(a->fetch.last_fetched_epoch, 2);
}

/* A DIVERGING answer with no epoch (the leader's history, trimmed by its
 * retention, starts above every epoch this log holds, at end_offset):
 * the copy restarts at end_offset, even above its end and with a hw
 * (before: truncation to 0, refused below the hw, out of the ISR for
 * good); end_offset below the hw is refused as any point below it is. */
static void test_follower_resets_when_no_epoch_is_shared(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_with_hw(&r, &h, &out, 14);
    tn_repl_event_t ev = {.type = TN_REPL_EV_DIVERGING, .now = 2};
    ev.u.diverging.leader_epoch = 3;
    ev.u.diverging.epoch = 0;
    ev.u.diverging.end_offset = 14;
    ev.u.diverging.fetch_offset = 14;
    ev.u.diverging.last_fetched_epoch = 2;
    tn_repl_step(&r, &ev, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_RESET);
    assert_non_null(a);
    assert_int_equal(a->offset, 14);
    assert_null(find(&out, TN_REPL_ACT_TRUNCATE_REFUSED));
    ev.now = 200;
    ev.u.diverging.end_offset = 40;
    tn_repl_step(&r, &ev, &out);
    a = find(&out, TN_REPL_ACT_RESET);
    assert_non_null(a);
    assert_int_equal(a->offset, 40);
    ev.now = 400;
    ev.u.diverging.end_offset = 12; /* below the hw: never */
    tn_repl_step(&r, &ev, &out);
    assert_null(find(&out, TN_REPL_ACT_RESET));
    a = find(&out, TN_REPL_ACT_TRUNCATE_REFUSED);
    assert_non_null(a);
    assert_int_equal(a->offset, 12);
}

/* The leader's side of a reset: a fetch past 0 with no epoch (a copy
 * restarted at the leader's start) is answered with records, not
 * DIVERGING to 0 (which would empty it again, for ever). */
static void test_leader_answers_a_restarted_copy(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    step_fetch(&r, 2, 3, 11, 0, 11, 10, &out);
    assert_null(find(&out, TN_REPL_ACT_ANSWER_DIVERGING));
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_ANSWER_RECORDS);
    assert_non_null(a);
    assert_int_equal(a->offset, 11);
    /* With an epoch the leader's history does not hold there: DIVERGING. */
    step_fetch(&r, 2, 3, 11, 1, 11, 11, &out);
    assert_non_null(find(&out, TN_REPL_ACT_ANSWER_DIVERGING));
}

static void test_shrink_after_lag_then_expand(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    step_fetch(&r, 2, 3, 11, 3, 11, 100, &out);
    tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = 250};
    tn_repl_step(&r, &tick, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR)); /* 3 is within the lag */
    step_fetch(&r, 2, 3, 11, 3, 11, 290, &out);
    tick.now = 301; /* 3 has not fetched since the epoch began, 301 ms ago */
    tn_repl_step(&r, &tick, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->expected_pe, 5);
    assert_int_equal(a->leader_epoch, 3);
    assert_int_equal(a->nisr, 2);
    assert_int_equal(a->isr[0].node, 1);
    assert_int_equal(a->isr[1].node, 2);
    /* Applied: ISR {1,2}. Then 3 catches up in this epoch: expand, with
     * the incarnation it fetches with. */
    tn_pstate_t ps = pstate(1, 3, 6, 2);
    step_state(&r, &ps, 302, &out);
    step_fetch(&r, 3, 3, 11, 3, 11, 310, &out);
    a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->expected_pe, 6);
    assert_int_equal(a->nisr, 3);
    assert_int_equal(a->isr[2].node, 3);
    assert_int_equal(a->isr[2].incarnation, 0x103);
    /* Refused by a rule: a same-ISR CAS outdates the copy in flight. */
    tn_repl_event_t ref = {.type = TN_REPL_EV_ISR_REFUSED, .now = 311};
    ref.u.refused.partition_epoch = 6;
    tn_repl_step(&r, &ref, &out);
    a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->nisr, 2);
}

/* A follower that went silent (stopped) while caught up is not behind
 * when nothing was appended since: it leaves the ISR after the lag and
 * stays out on the leader's own events (its state, its log), coming back
 * only when it fetches again. */
static void test_silent_follower_stays_out_until_it_fetches(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_caught_up(&r, &h, &out);
    step_fetch(&r, 2, 3, 11, 3, 11, 390, &out); /* 3 falls silent after 100 */
    tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = 401};
    tn_repl_step(&r, &tick, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->nisr, 2);
    assert_int_equal(a->isr[1].node, 2);
    /* Applied: ISR {1,2}. 3 reached the hw before it fell silent, yet the
     * state and the leader's log events do not propose it back in. */
    tn_pstate_t ps = pstate(1, 3, 6, 2);
    step_state(&r, &ps, 402, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    step_log(&r, 11, 11, 3, 403, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    tick.now = 680; /* past 3's lag, within 2's */
    tn_repl_step(&r, &tick, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    /* It fetches again, caught up: proposed in. */
    step_fetch(&r, 3, 3, 11, 3, 11, 681, &out);
    a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->nisr, 3);
    assert_int_equal(a->isr[2].node, 3);
}

static void step_channels(tn_repl_t *r, uint32_t node, uint64_t inc, bool ok, uint64_t now,
                          tn_repl_actions_t *out)
{
    tn_repl_event_t ev = {.type = TN_REPL_EV_CHANNELS, .now = now};
    ev.u.channels.node = node;
    ev.u.channels.incarnation = inc;
    ev.u.channels.caught_up = ok;
    tn_repl_step(r, &ev, out);
}

/* With the channel gate on, a follower whose record log caught up is not
 * proposed into the ISR until the shell reports its channels caught up
 * for the incarnation it fetches with; a report for another incarnation
 * (a wiped disk since) or one withdrawn does not count; with the report
 * the expand comes at once. */
static void test_channels_gate_the_expand(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    gate_channels = true;
    leader_setup(&r, &h, &out);
    gate_channels = false;
    tn_pstate_t ps = pstate(1, 3, 6, 2); /* ISR {1, 2}: 3 is out */
    step_state(&r, &ps, 1, &out);
    step_fetch(&r, 2, 3, 11, 3, 11, 5, &out);
    step_fetch(&r, 3, 3, 11, 3, 11, 10, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR)); /* its log is complete, its channels not */
    /* A report for another data directory of node 3: still out. */
    step_channels(&r, 3, 0x999, true, 20, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    step_fetch(&r, 3, 3, 11, 3, 11, 30, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    /* Not caught up (it lost a snapshot): still out. */
    step_channels(&r, 3, 0x103, false, 40, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = 50};
    tn_repl_step(&r, &tick, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    /* Caught up for the incarnation it fetches with: proposed at once. */
    step_channels(&r, 3, 0x103, true, 60, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->nisr, 3);
    assert_int_equal(a->isr[2].node, 3);
    assert_int_equal(a->isr[2].incarnation, 0x103);
    /* A follower never counts for a report made to another leader: a new
     * term forgets them. */
    tn_repl_t r2;
    hist_t h2;
    gate_channels = true;
    leader_setup(&r2, &h2, &out);
    gate_channels = false;
    step_state(&r2, &ps, 1, &out);
    step_channels(&r2, 3, 0x103, true, 2, &out);
    tn_pstate_t ps2 = pstate(1, 4, 7, 2); /* elected again: epoch 4 */
    step_state(&r2, &ps2, 3, &out);
    h2.n = 3;
    h2.epochs[2] = 4;
    h2.starts[2] = 11;
    h2.end = 12;
    step_log(&r2, 12, 12, 4, 4, &out);
    step_fetch(&r2, 2, 4, 12, 4, 12, 5, &out);
    step_fetch(&r2, 3, 4, 12, 4, 12, 6, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
}

/* A report that a follower's channels caught up holds only for the
 * stretch outside the ISR it was made in: once the follower joined and
 * left again (shrunk out, or its replica marked corrupt), the settles
 * the ISR confirmed meanwhile may not be on it, and a fetch that finds
 * it caught up proposes it back only after a new report (the stale one
 * let a repaired replica back in without them, case 08). */
static void test_channels_report_lapses(void **state)
{
    (void)state;
    for (int corrupt = 0; corrupt < 2; corrupt++) {
        tn_repl_t r;
        hist_t h;
        tn_repl_actions_t out;
        gate_channels = true;
        leader_setup(&r, &h, &out);
        gate_channels = false;
        tn_pstate_t ps = pstate(1, 3, 6, 2); /* ISR {1, 2}: 3 is out */
        step_state(&r, &ps, 1, &out);
        step_fetch(&r, 2, 3, 11, 3, 11, 5, &out);
        step_channels(&r, 3, 0x103, true, 6, &out);
        step_fetch(&r, 3, 3, 11, 3, 11, 10, &out);
        const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
        assert_non_null(a);
        assert_int_equal(a->nisr, 3);
        ps = pstate(1, 3, 7, 3); /* applied: 3 is in */
        step_state(&r, &ps, 11, &out);
        /* 3 leaves: shrunk out, or marked corrupt (its log cut). */
        ps = pstate(1, 3, 8, 2);
        if (corrupt)
            ps.corrupt = 1u << 2;
        step_state(&r, &ps, 20, &out);
        assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
        ps.corrupt = 0; /* repaired (the expand would clear the mark) */
        ps.partition_epoch = 9;
        step_state(&r, &ps, 21, &out);
        step_fetch(&r, 2, 3, 11, 3, 11, 30, &out);
        /* Back, its log complete: the old report does not let it in. */
        step_fetch(&r, 3, 3, 11, 3, 11, 31, &out);
        assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
        step_fetch(&r, 3, 3, 11, 3, 11, 40, &out);
        assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
        /* A new report: proposed at once. */
        step_channels(&r, 3, 0x103, true, 41, &out);
        a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
        assert_non_null(a);
        assert_int_equal(a->nisr, 3);
        assert_int_equal(a->isr[2].node, 3);
    }
}

/* A flush report from node (incarnation inc) whose log ends at end with a
 * record of epoch last. */
static void step_flushed(tn_repl_t *r, uint32_t node, uint64_t inc, uint32_t epoch, uint64_t end,
                         uint32_t last, uint64_t flushed, uint64_t now, tn_repl_actions_t *out)
{
    tn_repl_event_t ev = {.type = TN_REPL_EV_FLUSHED, .now = now};
    ev.u.fetch = (tn_repl_fetch_t){node, inc, epoch, end, last, flushed, 99};
    tn_repl_step(r, &ev, out);
}

static void step_records(tn_repl_t *r, uint32_t epoch, uint64_t from, uint64_t count, uint64_t hw,
                         uint64_t now, tn_repl_actions_t *out)
{
    tn_repl_event_t ev = {.type = TN_REPL_EV_RECORDS, .now = now};
    ev.u.records.leader_epoch = epoch;
    ev.u.records.from = from;
    ev.u.records.count = count;
    ev.u.records.hw = hw;
    tn_repl_step(r, &ev, out);
}

/* Lever (1) of docs/performance.md: a follower fetches again once its copy
 * is written, and reports the flush while that fetch is out (parked at
 * the leader) instead of with the next fetch. */
static void test_follower_reports_flush_while_fetching(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    follower_setup(&r, &h, &out); /* a fetch at 14 is out, flushed 14 */
    step_records(&r, 3, 14, 3, 12, 1, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_APPEND);
    assert_non_null(a);
    /* Written, not synced: the next fetch goes at once with the old
     * flushed offset, and nothing is reported. */
    step_log(&r, 17, 14, 3, 2, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.fetch_offset, 17);
    assert_int_equal(a->fetch.flushed_offset, 14);
    assert_null(find(&out, TN_REPL_ACT_REPORT));
    /* Synced while that fetch is out: reported to the leader at once,
     * with the epoch and incarnation its fetches carry; no new fetch. */
    step_log(&r, 17, 17, 3, 3, &out);
    assert_int_equal(out.n, 1);
    a = find(&out, TN_REPL_ACT_REPORT);
    assert_non_null(a);
    assert_int_equal(a->node, 1);
    assert_int_equal(a->fetch.node, 2);
    assert_int_equal(a->fetch.incarnation, 0x102);
    assert_int_equal(a->fetch.leader_epoch, 3);
    assert_int_equal(a->fetch.flushed_offset, 17);
    assert_int_equal(a->fetch.fetch_offset, 17); /* checked by the leader as a fetch's */
    assert_int_equal(a->fetch.last_fetched_epoch, 3);
    assert_int_equal(a->fetch.partition_epoch, 5);
    /* Told once. */
    step_log(&r, 17, 17, 3, 4, &out);
    assert_int_equal(out.n, 0);
    /* The answer comes before the next sync: written at once, fetched at
     * once; the sync after the answer to that fetch goes with the fetch
     * after it (no fetch out: the flushed offset rides a new fetch). */
    step_records(&r, 3, 17, 2, 17, 5, &out);
    assert_non_null(find(&out, TN_REPL_ACT_APPEND));
    step_log(&r, 19, 17, 3, 6, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.flushed_offset, 17);
    step_records(&r, 3, 19, 0, 17, 7, &out); /* empty: nothing to append */
    assert_false(r.fetching);
    step_log(&r, 19, 19, 3, 8, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->fetch.flushed_offset, 19);
    assert_null(find(&out, TN_REPL_ACT_REPORT));
    /* A leader change: the reports go to the new leader with its epoch. */
    tn_pstate_t ps = pstate(3, 4, 6, 3);
    step_state(&r, &ps, 9, &out);
    a = find(&out, TN_REPL_ACT_FETCH);
    assert_non_null(a);
    assert_int_equal(a->node, 3);
    step_records(&r, 4, 19, 1, 19, 10, &out);
    step_log(&r, 20, 19, 4, 11, &out);
    assert_non_null(find(&out, TN_REPL_ACT_FETCH));
    step_log(&r, 20, 20, 4, 12, &out);
    a = find(&out, TN_REPL_ACT_REPORT);
    assert_non_null(a);
    assert_int_equal(a->node, 3);
    assert_int_equal(a->fetch.leader_epoch, 4);
    assert_int_equal(a->fetch.flushed_offset, 20);
}

/* The leader counts a flush report only for a follower that fetched in
 * this epoch with that incarnation, only when the log end and last epoch
 * it carries agree with the leader's history (as a fetch's: a report may
 * overtake the fetch sent before it), only up to that log end (never
 * records the follower has not fetched, nor a flushed offset past its own
 * log end), only raising what it knows; a report of an older epoch is
 * fenced, a newer one refreshes the state. */
static void test_leader_counts_flush_reports(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out); /* log 11 (epoch start at 10), flushed */
    /* Before any fetch of 2 in this epoch: ignored. */
    step_flushed(&r, 2, 0x102, 3, 11, 3, 11, 1, &out);
    assert_int_equal(out.n, 0);
    assert_int_equal(r.peers[1].flushed, 0);
    step_fetch(&r, 2, 3, 11, 3, 10, 2, &out); /* written 11, flushed 10 */
    step_fetch(&r, 3, 3, 11, 3, 11, 2, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
    /* Stale epoch: fenced, nothing moves. Newer: refresh. Another
     * incarnation (a wiped disk since its fetch): nothing. */
    step_flushed(&r, 2, 0x102, 2, 11, 3, 11, 3, &out);
    assert_int_equal(out.n, 0);
    step_flushed(&r, 2, 0x102, 4, 11, 3, 11, 3, &out);
    assert_int_equal(out.n, 1);
    assert_non_null(find(&out, TN_REPL_ACT_REFRESH));
    step_flushed(&r, 2, 0x999, 3, 11, 3, 11, 3, &out);
    assert_int_equal(out.n, 0);
    /* A log the leader's history does not have: 14 records ending in
     * epoch 2 (the leader's epoch 2 ends at 10), or past its log end. */
    step_flushed(&r, 2, 0x102, 3, 14, 2, 14, 3, &out);
    assert_int_equal(out.n, 0);
    step_flushed(&r, 2, 0x102, 3, 12, 3, 12, 3, &out);
    assert_int_equal(out.n, 0);
    assert_int_equal(r.peers[1].flushed, 10);
    /* A flushed offset past the report's own log end counts to that end. */
    step_flushed(&r, 2, 0x102, 3, 11, 3, 15, 4, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_HW);
    assert_non_null(a);
    assert_int_equal(a->offset, 11);
    assert_int_equal(r.peers[1].flushed, 11);
    /* The leader writes and flushes to 15, 3 has all of it: the hw waits
     * for 2. */
    h.end = 15;
    step_log(&r, 15, 15, 3, 5, &out);
    step_fetch(&r, 3, 3, 15, 3, 15, 5, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
    /* 2 wrote to 15 and synced; its report overtakes the fetch it sent
     * before the sync: it counts on its own. */
    step_flushed(&r, 2, 0x102, 3, 15, 3, 15, 6, &out);
    a = find(&out, TN_REPL_ACT_HW);
    assert_non_null(a);
    assert_int_equal(a->offset, 15);
    assert_int_equal(r.peers[1].end, 15);
    /* The late fetch (written 15, flushed 11) then an older report
     * arriving late (or a duplicate): what the leader knows of 2 stays
     * (lowered, the hw would wait for 2's next fetch: the one out parks
     * until new records come, and the producers wait for the hw). */
    step_fetch(&r, 2, 3, 15, 3, 11, 7, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
    assert_int_equal(r.peers[1].flushed, 15);
    step_flushed(&r, 2, 0x102, 3, 12, 3, 12, 8, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
    assert_int_equal(r.hw, 15);
    assert_int_equal(r.peers[1].flushed, 15);
    /* The next records need no word from 2 beyond its report. */
    h.end = 17;
    step_log(&r, 17, 17, 3, 8, &out);
    step_flushed(&r, 2, 0x102, 3, 17, 3, 17, 8, &out);
    assert_null(find(&out, TN_REPL_ACT_HW)); /* 3 has 15 */
    step_fetch(&r, 3, 3, 17, 3, 17, 8, &out);
    a = find(&out, TN_REPL_ACT_HW);
    assert_non_null(a);
    assert_int_equal(a->offset, 17);
    /* A leader no more: reports are ignored. */
    tn_pstate_t ps = pstate(2, 4, 6, 3);
    step_state(&r, &ps, 9, &out);
    step_flushed(&r, 3, 0x103, 4, 15, 3, 15, 10, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
}

/* Under steady load a follower's fetch, sent once its copy is written,
 * carries the flushed offset of the copy before (its sync comes after), so
 * its flushed offset never reaches the leader's log end as of its previous
 * fetch, which was the only catch-up rule: the leader shrank it out after
 * replica_lag_ms. A flushed offset (from a report, or a fetch) that
 * reaches the leader's end as of an earlier fetch counts as caught up at
 * that fetch's time. A follower whose disk never syncs is shrunk out
 * however often it fetches at the log end. Every step, the hw never
 * passes what every ISR member flushed (never written-not-synced
 * records). mode 0: reports; 1: fetches only; 2: a disk that never syncs. */
static void run_steady_load(int mode, bool *shrunk)
{
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    uint64_t end[64];
    end[0] = 11;
    uint64_t flushed2 = 11, flushed3 = 11;
    *shrunk = false;
    for (uint32_t k = 1; k < 64; k++) {
        uint64_t now = 10 * k;
        end[k] = end[k - 1] + 5; /* producers append, the leader flushes */
        h.end = end[k];
        step_log(&r, end[k], end[k], 3, now, &out);
        /* Each follower fetches at what the last answer gave it (end of
         * the previous step), flushed to the step before that. */
        uint64_t at = end[k - 1], fl = k >= 2 && mode != 2 ? end[k - 2] : 11;
        step_fetch(&r, 2, 3, at, 3, fl, now + 1, &out);
        step_fetch(&r, 3, 3, at, 3, fl, now + 1, &out);
        if (fl > flushed2)
            flushed2 = flushed3 = fl;
        if (mode == 0) {
            step_flushed(&r, 2, 0x102, 3, at, 3, at, now + 5, &out);
            step_flushed(&r, 3, 0x103, 3, at, 3, at, now + 5, &out);
            flushed2 = flushed3 = at;
        }
        assert_true(r.hw <= flushed2 && r.hw <= flushed3);
        tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = now + 6};
        tn_repl_step(&r, &tick, &out);
        const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
        if (a != NULL && a->nisr < 3)
            *shrunk = true;
    }
    if (mode != 2)
        assert_true(r.hw > 11); /* acknowledgements went on */
    else
        assert_int_equal(r.hw, 11);
}

static void test_flush_reports_keep_a_loaded_follower_in_sync(void **state)
{
    (void)state;
    bool shrunk;
    run_steady_load(0, &shrunk);
    assert_false(shrunk); /* 630 ms of load, lag 300 ms */
    run_steady_load(1, &shrunk);
    assert_false(shrunk);
    run_steady_load(2, &shrunk);
    assert_true(shrunk);
}

static void test_few_replicas_refuse_and_freeze(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_setup(&r, &h, &out);
    tn_pstate_t ps = pstate(1, 3, 6, 1); /* ISR {1} < min_insync 2 */
    step_state(&r, &ps, 1, &out);
    assert_int_equal(tn_repl_accepts(&r), TN_EFEWREPLICAS);
    step_log(&r, 11, 11, 3, 2, &out);
    assert_null(find(&out, TN_REPL_ACT_HW)); /* alone, the leader moves nothing */
    assert_false(tn_repl_serving(&r));
}

/* A partition move begins within the leader's epoch: the list becomes
 * 2, 4, 3, 1 (4 joins). The leader counts 4's fetches (its peer follows
 * the new list) and proposes adding it once caught up; the peers it knew
 * keep what it knew of them. */
static void test_move_reorders_peers_within_the_epoch(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_caught_up(&r, &h, &out);
    tn_pstate_t ps = pstate(1, 3, 6, 3);
    const uint32_t list[4] = {2, 4, 3, 1};
    memcpy(ps.replicas, list, sizeof(list));
    ps.nreplicas = 4;
    step_state(&r, &ps, 110, &out);
    assert_int_equal(r.peers[0].node, 2);
    assert_int_equal(r.peers[1].node, 4);
    assert_int_equal(r.peers[2].node, 3);
    assert_int_equal(r.peers[3].node, 1);
    assert_true(r.peers[0].seen); /* kept */
    assert_false(r.peers[1].seen);
    /* 4 fetched from nothing, then caught up: the expand adds it. */
    step_fetch(&r, 4, 3, 0, 0, 0, 120, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    step_fetch(&r, 4, 3, 11, 3, 11, 130, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->expected_pe, 6);
    assert_int_equal(a->nisr, 4);
    assert_int_equal(a->isr[3].node, 4);
    assert_int_equal(a->isr[3].incarnation, 0x104);
}

/* A member that a move the leader had not seen adds starts anew: 3 was
 * caught up (flushed 11), a move dropped it and another gave it back
 * within this epoch, and the leader saw neither the drop nor the list
 * change (2,3,1 before and after: the metastore tells the newest state
 * only). Its copy went to quarantine/ meanwhile, so it fetches from 0
 * with the same incarnation: what it reported before must not put it in
 * the ISR (found by test_repl_sim.c's moves: a member joined the ISR with
 * an empty log). It joins once caught up again. */
static void test_move_adds_a_member_anew(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_caught_up(&r, &h, &out);
    tn_pstate_t ps = pstate(1, 3, 9, 2); /* ISR {1,2}: 3 left with the first move */
    ps.ntarget = 3;
    ps.nold = 2;
    const uint32_t target[3] = {1, 2, 3}, old[2] = {1, 2};
    memcpy(ps.target, target, sizeof(target));
    memcpy(ps.old, old, sizeof(old));
    ps.move_id = 7;
    step_state(&r, &ps, 110, &out);
    assert_false(r.peers[2].seen);
    step_fetch(&r, 3, 3, 0, 0, 0, 120, &out);
    assert_null(find(&out, TN_REPL_ACT_PROPOSE_ISR));
    /* A later state of the same move keeps what the leader learnt. */
    ps.partition_epoch = 10;
    step_state(&r, &ps, 125, &out);
    assert_true(r.peers[2].seen);
    step_fetch(&r, 3, 3, 11, 3, 11, 130, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->nisr, 3);
    assert_int_equal(a->isr[2].node, 3);
}

/* min_insync lowered (a topic's update) while the ISR is at the new
 * value and an ELR is left: the hw stays until the leader's same-ISR CAS
 * emptied the ELR, else the ELR member, electable, would lack what the hw
 * covers (found by test_repl_sim.c: 2 left for the ELR at min_insync 2,
 * min_insync fell to 1, 1 acked alone and was fenced, and 2 was elected
 * without those records). */
static void test_lowered_min_insync_clears_the_elr(void **state)
{
    (void)state;
    tn_repl_t r;
    hist_t h;
    tn_repl_actions_t out;
    leader_caught_up(&r, &h, &out); /* hw 11 */
    assert_int_equal(r.hw, 11);
    tn_pstate_t ps = pstate(1, 3, 6, 1); /* 2 and 3 left: 2 in the ELR */
    ps.elr[0] = (tn_pstate_member_t){2, 0x102};
    ps.nelr = 1;
    step_state(&r, &ps, 410, &out); /* past 2's and 3's lag */
    ps.partition_epoch = 7;
    ps.min_insync = 1;
    step_state(&r, &ps, 420, &out);
    h.end = 12;
    step_log(&r, 12, 12, 3, 430, &out);
    assert_null(find(&out, TN_REPL_ACT_HW));
    tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = 440};
    tn_repl_step(&r, &tick, &out);
    const tn_repl_action_t *a = find(&out, TN_REPL_ACT_PROPOSE_ISR);
    assert_non_null(a);
    assert_int_equal(a->expected_pe, 7);
    assert_int_equal(a->nisr, 1);
    assert_int_equal(a->isr[0].node, 1);
    ps.partition_epoch = 8;
    ps.nelr = 0;
    step_state(&r, &ps, 450, &out);
    a = find(&out, TN_REPL_ACT_HW);
    assert_non_null(a);
    assert_int_equal(a->offset, 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epoch_start_gate_and_flushed_hw),
        cmocka_unit_test(test_channels_report_lapses),
        cmocka_unit_test(test_fencing_by_epoch),
        cmocka_unit_test(test_diverging_answer),
        cmocka_unit_test(test_follower_truncates_at_divergence),
        cmocka_unit_test(test_follower_diverging_backs_off),
        cmocka_unit_test(test_follower_refuses_truncation_below_hw),
        cmocka_unit_test(test_follower_hw_waits_for_its_append),
        cmocka_unit_test(test_follower_resets_below_the_leaders_start),
        cmocka_unit_test(test_follower_skips_the_leaders_gap),
        cmocka_unit_test(test_leader_answers_a_restarted_copy),
        cmocka_unit_test(test_follower_resets_when_no_epoch_is_shared),
        cmocka_unit_test(test_shrink_after_lag_then_expand),
        cmocka_unit_test(test_move_reorders_peers_within_the_epoch),
        cmocka_unit_test(test_move_adds_a_member_anew),
        cmocka_unit_test(test_lowered_min_insync_clears_the_elr),
        cmocka_unit_test(test_silent_follower_stays_out_until_it_fetches),
        cmocka_unit_test(test_few_replicas_refuse_and_freeze),
        cmocka_unit_test(test_channels_gate_the_expand),
        cmocka_unit_test(test_follower_reports_flush_while_fetching),
        cmocka_unit_test(test_leader_counts_flush_reports),
        cmocka_unit_test(test_flush_reports_keep_a_loaded_follower_in_sync),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
