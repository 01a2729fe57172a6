/* Tests of a rebalance's metastore parts (meta/rebalance.h): the
 * CLUSTER_REBALANCE command's codec, its apply (wanted only once, over
 * only with its id) and snapshot; the planner's input read from a state
 * (lists as they will be, moves under way per member); which changes may
 * begin under max-moves-per-node; and that capped steps, applied and
 * planned again, end balanced with as many moves as one uncapped plan. */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/err.h"
#include "meta/rebalance.h"
#include "meta/state.h"

#include <stdio.h>
#include <string.h>

static tn_meta_cmd_t rebal(bool wanted, bool only_if_none, uint8_t reason, uint64_t id)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_CLUSTER_REBALANCE;
    c.if_absent = only_if_none;
    c.rebal.wanted = wanted;
    c.rebal.reason = reason;
    c.rebal.id = id;
    c.rebal.since_ms = 1700000000000;
    return c;
}

static int apply(tn_meta_state_t *s, tn_meta_cmd_t c)
{
    return tn_meta_state_apply(s, &c);
}

static int encode(const tn_meta_cmd_t *c, tn_buf_t *b)
{
    tn_buf_reset(b);
    return tn_meta_cmd_encode(c, b);
}

static void test_codec(void **state)
{
    (void)state;
    tn_buf_t b, again;
    tn_buf_init(&b);
    tn_buf_init(&again);
    tn_meta_cmd_t cases[] = {rebal(true, true, TN_REBAL_API, 7),
                             rebal(true, false, TN_REBAL_JOIN, 9),
                             rebal(false, false, TN_REBAL_API, UINT64_MAX)};
    for (size_t i = 0; i < TN_ARRAY_SIZE(cases); i++) {
        assert_int_equal(encode(&cases[i], &b), 0);
        assert_int_equal(tn_buf_size(&b) % 8, 0);
        tn_meta_cmd_t d;
        size_t used = 0;
        assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), 0);
        assert_int_equal(used, tn_buf_size(&b));
        assert_int_equal(d.type, TN_MC_CLUSTER_REBALANCE);
        assert_int_equal(d.rebal.wanted, cases[i].rebal.wanted);
        assert_int_equal(d.if_absent, cases[i].if_absent);
        assert_int_equal(d.rebal.reason, cases[i].rebal.reason);
        assert_true(d.rebal.id == cases[i].rebal.id);
        assert_true(d.rebal.since_ms == cases[i].rebal.since_ms);
        for (size_t n = 0; n < tn_buf_size(&b); n++) {
            tn_meta_cmd_t x;
            assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), n, &x, &used), TN_ESHORT);
        }
        assert_int_equal(encode(&d, &again), 0);
        assert_int_equal(tn_buf_size(&again), tn_buf_size(&b));
        assert_memory_equal(tn_buf_data(&again), tn_buf_data(&b), tn_buf_size(&b));
        tn_meta_cmd_fini(&d);
    }
    /* Not encodable: id 0, an unknown reason, "only if none" on an end. */
    tn_meta_cmd_t bad = rebal(true, true, TN_REBAL_API, 0);
    assert_int_equal(encode(&bad, &b), UV_EINVAL);
    bad = rebal(true, true, 3, 1);
    assert_int_equal(encode(&bad, &b), UV_EINVAL);
    bad = rebal(true, true, 0, 1);
    assert_int_equal(encode(&bad, &b), UV_EINVAL);
    bad = rebal(false, true, TN_REBAL_API, 1);
    assert_int_equal(encode(&bad, &b), UV_EINVAL);
    /* Refused by the decoder: unknown flag bits, "only if none" on an
     * end, a bad reason, id 0 (payload: [1] flags [1] reason [8] id). */
    tn_meta_cmd_t good = rebal(true, true, TN_REBAL_API, 1);
    const struct {
        size_t at;
        uint8_t v;
    } patches[] = {{0, 4 | 3}, {0, 2}, {1, 0}, {1, 3}, {2, 0}};
    for (size_t i = 0; i < TN_ARRAY_SIZE(patches); i++) {
        assert_int_equal(encode(&good, &b), 0);
        ((unsigned char *)tn_buf_data(&b))[TN_META_HDR + patches[i].at] = patches[i].v;
        tn_meta_cmd_t d;
        size_t used;
        assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used),
                         TN_ECORRUPT);
    }
    tn_buf_fini(&b);
    tn_buf_fini(&again);
}

static void test_apply_and_snapshot(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_false(s.rebal.wanted);
    /* Over when none is wanted, or with another id: refused. */
    assert_int_equal(apply(&s, rebal(false, false, TN_REBAL_API, 5)), TN_ECHANGED);
    assert_int_equal(apply(&s, rebal(true, true, TN_REBAL_API, 5)), 0);
    assert_true(s.rebal.wanted);
    assert_true(s.rebal.id == 5);
    assert_int_equal(s.rebal.reason, TN_REBAL_API);
    /* A second one while it runs: UV_EBUSY, and the first stays. */
    assert_int_equal(apply(&s, rebal(true, true, TN_REBAL_JOIN, 6)), UV_EBUSY);
    assert_true(s.rebal.id == 5);
    assert_int_equal(apply(&s, rebal(false, false, TN_REBAL_API, 6)), TN_ECHANGED);
    assert_true(s.rebal.wanted);
    /* The snapshot carries it. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    assert_true(r.rebal.wanted);
    assert_true(r.rebal.id == 5);
    assert_int_equal(r.rebal.reason, TN_REBAL_API);
    assert_true(r.rebal.since_ms == 1700000000000);
    tn_meta_state_fini(&r);
    /* Over with its id: none wanted, and a snapshot holds none. */
    assert_int_equal(apply(&s, rebal(false, false, TN_REBAL_API, 5)), 0);
    assert_false(s.rebal.wanted);
    tu_meta_state_reload(&s, &r);
    assert_false(r.rebal.wanted);
    tn_meta_state_fini(&r);
    /* Without "only if none", wanted replaces the one wanted. */
    assert_int_equal(apply(&s, rebal(true, true, TN_REBAL_JOIN, 8)), 0);
    assert_int_equal(apply(&s, rebal(true, false, TN_REBAL_API, 9)), 0);
    assert_true(s.rebal.id == 9);
    /* A snapshot with two of them is corrupt. */
    tn_buf_t snap;
    tn_buf_init(&snap);
    assert_int_equal(tn_meta_state_snapshot(&s, &snap), 0);
    tn_meta_cmd_t extra = rebal(true, false, TN_REBAL_API, 10);
    assert_int_equal(tn_meta_cmd_encode(&extra, &snap), 0);
    unsigned char *h = (unsigned char *)tn_buf_data(&snap);
    tn_put_u64(h + 16, tn_get_u64(h + 16) + 1);
    tn_meta_state_t t;
    tn_meta_state_init(&t);
    assert_int_equal(tn_meta_state_restore(&t, tn_buf_data(&snap), tn_buf_size(&snap)),
                     TN_ECORRUPT);
    tn_meta_state_fini(&t);
    tn_buf_fini(&snap);
    tn_meta_state_fini(&s);
}

/* Members 1..n and topic "r" of partitions at factor 3. Placement puts
 * partition p on the members from index p mod n. */
static void members_with_r(tn_meta_state_t *s, uint64_t n, uint32_t partitions)
{
    tn_meta_state_init(s);
    for (uint64_t id = 1; id <= n; id++)
        assert_int_equal(apply(s, tu_meta_rec_cmd(id, 100 + id, 0)), 0);
    assert_int_equal(apply(s, tu_meta_native_topic_cmd("r", partitions, 3, 2)), 0);
}

static tn_meta_cmd_t move_begin(uint32_t p, uint64_t id, uint32_t a, uint32_t b, uint32_t c)
{
    tn_meta_cmd_t m;
    memset(&m, 0, sizeof(m));
    m.type = TN_MC_PART_MOVE;
    snprintf(m.topic.name, sizeof(m.topic.name), "r");
    m.part = p;
    m.move_kind = TN_MOVE_BEGIN;
    m.move_id = id;
    m.move_ms = 1;
    m.ntarget = 3;
    m.target[0] = a;
    m.target[1] = b;
    m.target[2] = c;
    return m;
}

static void test_input_from_state(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members_with_r(&s, 4, 4);
    /* r/0 on 1,2,3 moves to 4,2,3 (1 gives up a replica, 4 receives one);
     * r/1 on 2,3,4 is reordered to 3,2,4 (nothing copied). */
    assert_int_equal(apply(&s, move_begin(0, 11, 4, 2, 3)), 0);
    assert_int_equal(apply(&s, move_begin(1, 12, 3, 2, 4)), 0);
    tn_meta_rebal_in_t in;
    assert_int_equal(tn_meta_rebal_in_init(&in, &s), 0);
    assert_int_equal(in.nmembers, 4);
    assert_int_equal(in.nparts, 4);
    assert_int_equal(in.nmoving, 2);
    assert_int_equal(in.busy[0], 1); /* member 1 */
    assert_int_equal(in.busy[1], 0);
    assert_int_equal(in.busy[2], 0);
    assert_int_equal(in.busy[3], 1); /* member 4 */
    assert_true(in.moving[0] && in.moving[1] && !in.moving[2] && !in.moving[3]);
    /* A moving partition counts with its target. */
    assert_int_equal(in.parts[0].replicas[0], 4);
    assert_int_equal(in.parts[1].replicas[0], 3);
    assert_string_equal(in.topics[0]->rec.name, "r");
    assert_int_equal(tn_meta_rebal_member(&in, 3), 2);
    assert_int_equal(tn_meta_rebal_member(&in, 9), -1);
    /* Members are alive and not draining until the state says otherwise. */
    for (size_t i = 0; i < in.nmembers; i++)
        assert_true(in.members[i].alive && !in.members[i].draining);
    tn_meta_rebal_in_fini(&in);
    tn_meta_cmd_t drain;
    memset(&drain, 0, sizeof(drain));
    drain.type = TN_MC_MEMBER_DRAIN;
    drain.member.id = 2;
    drain.member.draining = true;
    assert_int_equal(apply(&s, drain), 0);
    assert_int_equal(tn_meta_rebal_in_init(&in, &s), 0);
    assert_true(in.members[1].draining);
    tn_meta_rebal_in_fini(&in);
    tn_meta_state_fini(&s);
}

static tn_place_change_t change(uint32_t part, uint32_t moved, uint32_t a, uint32_t b, uint32_t c)
{
    tn_place_change_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.part = part;
    ch.moved = moved;
    ch.to.factor = 3;
    ch.to.replicas[0] = a;
    ch.to.replicas[1] = b;
    ch.to.replicas[2] = c;
    return ch;
}

static void test_take_caps(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members_with_r(&s, 5, 5); /* r/p on members from index p: 1,2,3 2,3,4 3,4,5 4,5,1 5,1,2 */
    assert_int_equal(apply(&s, move_begin(0, 11, 4, 2, 3)), 0); /* 1 -> 4 under way */
    tn_meta_rebal_in_t in;
    assert_int_equal(tn_meta_rebal_in_init(&in, &s), 0);
    bool blocked;
    /* A moving partition: not now. */
    tn_place_change_t ch = change(0, 1, 5, 2, 3);
    assert_false(tn_meta_rebal_take(&in, &ch, 1, &blocked));
    assert_false(blocked);
    /* Cap 1: r/1 2,3,4 -> 1,3,4 puts one on member 1, which has one under
     * way: not now; with cap 2 it may, and member 1 then has two. */
    ch = change(1, 1, 1, 3, 4);
    assert_false(tn_meta_rebal_take(&in, &ch, 1, &blocked));
    assert_false(blocked);
    assert_true(tn_meta_rebal_take(&in, &ch, 2, &blocked));
    assert_int_equal(in.busy[0], 2); /* member 1 receives */
    assert_int_equal(in.busy[1], 1); /* member 2 gives up */
    assert_true(in.moving[1]);
    /* Taken once: the same partition is moving now. */
    assert_false(tn_meta_rebal_take(&in, &ch, 0, &blocked));
    /* Cap 2: r/2 3,4,5 -> 3,4,1 would make member 1's third; member 4's
     * source side is free but the target is not. */
    ch = change(2, 1, 3, 4, 1);
    assert_false(tn_meta_rebal_take(&in, &ch, 2, &blocked));
    /* No cap (0): it may. */
    assert_true(tn_meta_rebal_take(&in, &ch, 0, &blocked));
    assert_int_equal(in.busy[0], 3);
    /* A reorder copies nothing: never held by the cap, counts for no one. */
    uint32_t before[5];
    memcpy(before, in.busy, sizeof(before));
    ch = change(3, 0, 1, 4, 5);
    assert_true(tn_meta_rebal_take(&in, &ch, 1, &blocked));
    assert_memory_equal(before, in.busy, sizeof(before));
    /* A list naming a member that is not alive cannot begin: blocked. */
    in.members[4].alive = false;
    ch = change(4, 0, 1, 2, 5);
    assert_false(tn_meta_rebal_take(&in, &ch, 0, &blocked));
    assert_true(blocked);
    tn_meta_rebal_in_fini(&in);
    tn_meta_state_fini(&s);
}

/* Apply to in->parts what the moves taken (moving) will have done: the
 * plan's lists, then nothing is moving or busy any more. */
static void complete(tn_meta_rebal_in_t *in, const tn_place_plan_t *plan, const bool *taken)
{
    for (size_t k = 0; k < plan->nchanges; k++)
        if (taken[k])
            in->parts[plan->changes[k].part] = plan->changes[k].to;
    memset(in->moving, 0, in->nparts * sizeof(*in->moving));
    memset(in->busy, 0, in->nmembers * sizeof(*in->busy));
}

static void test_capped_steps_converge(void **state)
{
    (void)state;
    /* Three members with 12 partitions at factor 3 (12 replicas each, 4
     * preferred leaderships each); a fourth joins holding nothing. */
    tn_meta_state_t s;
    members_with_r(&s, 3, 12);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(4, 104, 0)), 0);
    tn_meta_rebal_in_t in;
    assert_int_equal(tn_meta_rebal_in_init(&in, &s), 0);
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    char err[160];
    assert_int_equal(tn_meta_rebal_plan(&in, &plan, err, sizeof(err)), 0);
    uint32_t fewest = plan.moves;
    assert_int_equal(fewest, 9); /* 36 replicas over 4: 9 each, all 9 onto member 4 */
    /* Steps of at most two moves touching a member: each takes what the
     * cap lets, the moves complete, plan again; no step has more than two
     * moves onto member 4. */
    uint32_t moved = 0;
    int steps = 0;
    for (;;) {
        assert_int_equal(tn_meta_rebal_plan(&in, &plan, err, sizeof(err)), 0);
        if (plan.nchanges == 0)
            break;
        bool taken[64] = {false};
        assert_true(plan.nchanges <= TN_ARRAY_SIZE(taken));
        uint32_t step_moves = 0;
        for (size_t k = 0; k < plan.nchanges; k++) {
            bool blocked;
            taken[k] = tn_meta_rebal_take(&in, &plan.changes[k], 2, &blocked);
            assert_false(blocked);
            if (taken[k])
                step_moves += plan.changes[k].moved;
        }
        assert_true(step_moves <= 2);
        assert_int_equal(in.busy[3] <= 2, true);
        moved += step_moves;
        complete(&in, &plan, taken);
        assert_true(++steps < 40);
    }
    assert_int_equal(moved, fewest);
    assert_true(plan.replica_spread <= 1);
    assert_true(plan.leader_spread <= 1);
    tn_place_load_t loads[4];
    tn_place_in_t pin = tn_meta_rebal_place_in(&in);
    tn_place_loads(&pin, loads);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(loads[i].replicas, 9);
        assert_int_equal(loads[i].leaders, 3);
    }
    tn_place_plan_fini(&plan);
    tn_meta_rebal_in_fini(&in);
    tn_meta_state_fini(&s);
}

/* Factor-1 partitions that never moved (no partition state, their owner
 * their list) are counted and spread like any replica: a cluster grown from
 * one node has only such partitions, and a member that joins gets its
 * share. A change of one names exactly one member, so it is a factor-1
 * move (state.h tn_meta_state_move_from). */
static void test_singles_spread(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal(apply(&s, tu_meta_rec_cmd(id, 100 + id, 0)), 0);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 9, 1, 1)), 0);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(4, 104, 0)), 0);
    for (uint32_t p = 0; p < 9; p++)
        assert_null(tn_meta_state_pstate(&s, "one", p));
    tn_meta_rebal_in_t in;
    assert_int_equal(tn_meta_rebal_in_init(&in, &s), 0);
    assert_int_equal(in.nparts, 9);
    tn_place_load_t loads[4];
    tn_place_in_t pin = tn_meta_rebal_place_in(&in);
    tn_place_loads(&pin, loads);
    assert_int_equal(loads[0].replicas + loads[1].replicas + loads[2].replicas, 9);
    assert_int_equal(loads[3].replicas, 0);
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    char err[160];
    assert_int_equal(tn_meta_rebal_plan(&in, &plan, err, sizeof(err)), 0);
    /* 9 over 4: 2 or 3 each, so two come onto member 4 (3,3,3,0 -> 3,2,2,2
     * or the like), each a one-member list. */
    assert_int_equal(plan.moves, 2);
    uint32_t onto4 = 0;
    for (size_t k = 0; k < plan.nchanges; k++) {
        const tn_place_change_t *ch = &plan.changes[k];
        if (ch->moved == 0)
            continue;
        assert_int_equal(ch->to.factor, 1);
        assert_int_equal(ch->to.replicas[0], 4);
        onto4++;
    }
    assert_int_equal(onto4, 2);
    assert_true(plan.replica_spread <= 1);
    tn_place_plan_fini(&plan);
    tn_meta_rebal_in_fini(&in);
    tn_meta_state_fini(&s);
}

/* A topic lowered to factor 1 keeps its partitions' replicas until the
 * factor's moves shrink them (meta.c check_factor), and those wait for
 * decommissions and self-healing (decom_pending). So a decommission's
 * change of such a partition (its draining member replaced, the count
 * kept) must begin; refused at the apply, the decommission proposes it
 * again every scan, stays pending, and the factor's moves never come. */
static void test_lowered_decommission_begins(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members_with_r(&s, 4, 1); /* r/0 on 1,2,3 */
    tn_meta_cmd_t low;
    memset(&low, 0, sizeof(low));
    low.type = TN_MC_TOPIC_FACTOR;
    low.if_unchanged = true;
    low.expect = tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "r")->rec);
    snprintf(low.topic.name, sizeof(low.topic.name), "r");
    low.topic.replication_factor = 1;
    low.topic.min_insync = 1;
    assert_int_equal(apply(&s, low), 0);
    tn_meta_cmd_t drain;
    memset(&drain, 0, sizeof(drain));
    drain.type = TN_MC_MEMBER_DRAIN;
    drain.member.id = 2;
    drain.member.draining = true;
    assert_int_equal(apply(&s, drain), 0);
    tn_meta_rebal_in_t in;
    assert_int_equal(tn_meta_rebal_in_init(&in, &s), 0);
    tn_place_in_t pin = tn_meta_rebal_place_in(&in);
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    char err[160];
    assert_int_equal(tn_place_decommission(&pin, 2, 0, &plan, err, sizeof(err)), 0);
    assert_int_equal(plan.nchanges, 1);
    const tn_place_change_t *ch = &plan.changes[0];
    assert_int_equal(ch->to.factor, 3);
    tn_meta_cmd_t begin =
        move_begin(0, 21, ch->to.replicas[0], ch->to.replicas[1], ch->to.replicas[2]);
    assert_int_equal(apply(&s, begin), 0);
    tn_place_plan_fini(&plan);
    tn_meta_rebal_in_fini(&in);
    tn_meta_state_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_apply_and_snapshot),
        cmocka_unit_test(test_input_from_state),
        cmocka_unit_test(test_take_caps),
        cmocka_unit_test(test_capped_steps_converge),
        cmocka_unit_test(test_singles_spread),
        cmocka_unit_test(test_lowered_decommission_begins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
