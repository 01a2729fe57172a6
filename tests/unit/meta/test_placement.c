/* The planning decisions of partition moves (meta/placement.h). First
 * hand-made cases whose plans are worked out in the comments: the
 * decommission of one member of four with factors 1 and 3, a fifth member
 * joining an even cluster, a dead member holding factor-1 and factor-3
 * partitions, too few members, mixed factors a reordering cannot balance,
 * and malformed input. Then seeded random clusters (members alive, dead or
 * draining, sparse ids, random lists of mixed or uniform factors) checked
 * for the properties: lists stay valid, a decommission empties the member
 * and follows the load order, rebalance ends within one with the fewest
 * moves there can be, a plan applied and planned again changes nothing,
 * and a plan made in capped steps moves as much as one plan (a
 * decommission's steps end with the very same lists). A failure
 * prints its seed; TERN_PLACE_SEED=s replays it (TERN_PLACE_CASES=n runs
 * n cases from there: a longer search). */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "meta/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXM 16
#define MAXP 64

typedef struct {
    tn_place_member_t m[MAXM];
    size_t nm;
    tn_place_part_t p[MAXP];
    size_t np;
} cl_t;

static tn_place_in_t in_of(const cl_t *c)
{
    return (tn_place_in_t){c->m, c->nm, c->p, c->np};
}

static void add_member(cl_t *c, uint32_t id, bool alive, bool draining)
{
    c->m[c->nm++] = (tn_place_member_t){id, alive, draining};
}

/* A partition with the listed replicas (0 ends the list). */
static void add_part(cl_t *c, uint32_t topic, uint32_t partition, const uint32_t *r)
{
    tn_place_part_t *p = &c->p[c->np++];
    memset(p, 0, sizeof(*p));
    p->topic = topic;
    p->partition = partition;
    for (; *r; r++)
        p->replicas[p->factor++] = *r;
}

/* Partitions of a topic placed as meta/state.c places them: partition p
 * on the members from index p mod n on, wrapping. */
static void add_topic(cl_t *c, uint32_t topic, uint32_t parts, uint32_t factor, uint32_t n)
{
    for (uint32_t p = 0; p < parts; p++) {
        uint32_t r[TN_PLACE_MAX_REPLICAS + 1] = {0};
        for (uint32_t j = 0; j < factor; j++)
            r[j] = c->m[(p + j) % n].id;
        add_part(c, topic, p, r);
    }
}

static bool list_is(const tn_place_part_t *p, const uint32_t *r)
{
    uint32_t n = 0;
    for (; r[n]; n++)
        if (n >= p->factor || p->replicas[n] != r[n])
            return false;
    return n == p->factor;
}

static const tn_place_change_t *change_of(const tn_place_plan_t *plan, uint32_t part)
{
    for (size_t i = 0; i < plan->nchanges; i++)
        if (plan->changes[i].part == part)
            return &plan->changes[i];
    return NULL;
}

static int member_at(const cl_t *c, uint32_t id)
{
    for (size_t i = 0; i < c->nm; i++)
        if (c->m[i].id == id)
            return (int)i;
    return -1;
}

static bool holds(const tn_place_part_t *p, uint32_t id)
{
    for (uint32_t i = 0; i < p->factor; i++)
        if (p->replicas[i] == id)
            return true;
    return false;
}

static bool is_eligible(const cl_t *c, uint32_t id)
{
    int i = member_at(c, id);
    return i >= 0 && c->m[i].alive && !c->m[i].draining;
}

/* Replicas and preferred leaderships of member id, counted here. */
static uint32_t replicas_of(const cl_t *c, uint32_t id)
{
    uint32_t n = 0;
    for (size_t k = 0; k < c->np; k++)
        n += holds(&c->p[k], id);
    return n;
}

static uint32_t leaders_of(const cl_t *c, uint32_t id)
{
    uint32_t n = 0;
    for (size_t k = 0; k < c->np; k++)
        n += c->p[k].replicas[0] == id;
    return n;
}

/* Most minus fewest over the eligible members. */
static uint32_t spread_of(const cl_t *c, bool leaders)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < c->nm; i++) {
        if (!is_eligible(c, c->m[i].id))
            continue;
        uint32_t v = leaders ? leaders_of(c, c->m[i].id) : replicas_of(c, c->m[i].id);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    return hi >= lo ? hi - lo : 0;
}

static void apply(cl_t *c, const tn_place_plan_t *plan)
{
    tn_place_apply(c->p, c->np, plan);
}

/* What every case plans into: one plan (each call of the planner replaces
 * it; the teardown finishes it) and the planner's error buffer. */
typedef struct {
    tn_place_plan_t plan;
    char err[160];
} fx_t;

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    tn_place_plan_init(&f->plan);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    tn_place_plan_fini(&f->plan);
    free(f);
    return 0;
}

/* The planner's calls on cluster c, into f's plan and error buffer. */
static int check(fx_t *f, const cl_t *c)
{
    tn_place_in_t in = in_of(c);
    return tn_place_check(&in, f->err, sizeof(f->err));
}

static int rebalance(fx_t *f, const cl_t *c, uint32_t max_moves)
{
    tn_place_in_t in = in_of(c);
    return tn_place_rebalance(&in, max_moves, &f->plan, f->err, sizeof(f->err));
}

static int decommission(fx_t *f, const cl_t *c, uint32_t id, uint32_t max_moves)
{
    tn_place_in_t in = in_of(c);
    return tn_place_decommission(&in, id, max_moves, &f->plan, f->err, sizeof(f->err));
}

static int heal(fx_t *f, const cl_t *c, uint32_t id, uint32_t max_moves)
{
    tn_place_in_t in = in_of(c);
    return tn_place_heal(&in, id, max_moves, &f->plan, f->err, sizeof(f->err));
}

/* heal or decommission, as by_heal says. */
static int replace(fx_t *f, const cl_t *c, uint32_t id, uint32_t max_moves, bool by_heal)
{
    return by_heal ? heal(f, c, id, max_moves) : decommission(f, c, id, max_moves);
}

/* The plan's size: changed partitions, replicas moved, lists reordered. */
static void counts_are(const tn_place_plan_t *plan, size_t nchanges, uint32_t moves,
                       uint32_t reorders)
{
    assert_int_equal(plan->nchanges, nchanges);
    assert_int_equal(plan->moves, moves);
    assert_int_equal(plan->reorders, reorders);
}

/* The plan's spreads over the eligible members: replicas, leaderships. */
static void spreads_are(const tn_place_plan_t *plan, uint32_t replicas, uint32_t leaders)
{
    assert_int_equal(plan->replica_spread, replicas);
    assert_int_equal(plan->leader_spread, leaders);
}

/* Members 1..n, alive and not draining; no partitions. */
static void cluster_of(cl_t *c, uint32_t n)
{
    memset(c, 0, sizeof(*c));
    for (uint32_t id = 1; id <= n; id++)
        add_member(c, id, true, false);
}

/* --- hand-made cases ------------------------------------------------------------ */

/* Members 1..4, member 2 draining. Topic 0: factor 3, 4 partitions
 * (1,2,3) (2,3,4) (3,4,1) (4,1,2); topic 1: factor 1, (1) (2) (3) (4).
 * Every member holds 4 replicas and leads 2. Decommissioning 2, in input
 * order: t0p0 position 1: only 4 is eligible and not a replica -> 4 (5
 * replicas). t0p1 position 0: only 1 -> (1,3,4) (1: 5 replicas, 3 leads).
 * t0p3 position 2: only 3 -> (4,1,3) (3: 5 replicas, 2 leads). t1p1: 1, 3
 * and 4 all hold 5; 3 and 4 lead 2, 1 leads 3; the lower id -> 3. */
static void four_members(cl_t *c)
{
    cluster_of(c, 4);
    c->m[1].draining = true;
    add_topic(c, 0, 4, 3, 4);
    add_topic(c, 1, 4, 1, 4);
}

static void test_decommission_one_of_four(void **state)
{
    fx_t *f = *state;
    cl_t c;
    four_members(&c);
    assert_int_equal(decommission(f, &c, 2, 0), 0);
    counts_are(&f->plan, 4, 4, 0);
    assert_int_equal(f->plan.nproblems, 0);
    assert_false(f->plan.more);
    const uint32_t p0[] = {1, 4, 3, 0}, p1[] = {1, 3, 4, 0}, p3[] = {4, 1, 3, 0}, q1[] = {3, 0};
    assert_true(list_is(&change_of(&f->plan, 0)->to, p0));
    assert_true(list_is(&change_of(&f->plan, 1)->to, p1));
    assert_true(list_is(&change_of(&f->plan, 3)->to, p3));
    assert_true(list_is(&change_of(&f->plan, 5)->to, q1));
    assert_int_equal(change_of(&f->plan, 5)->moved, 1);
    /* Loads after: 1 holds 5 and leads 3, 2 nothing, 3 holds 6 and leads 3,
     * 4 holds 5 and leads 2. */
    assert_int_equal(f->plan.nloads, 4);
    const uint32_t rep[4] = {5, 0, 6, 5}, lead[4] = {3, 0, 3, 2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(f->plan.loads[i].replicas, rep[i]);
        assert_int_equal(f->plan.loads[i].leaders, lead[i]);
    }
    spreads_are(&f->plan, 1, 1);
    apply(&c, &f->plan);
    assert_int_equal(replicas_of(&c, 2), 0);
    /* Within one already: a rebalance changes nothing, and a second
     * decommission neither. */
    assert_int_equal(rebalance(f, &c, 0), 0);
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(decommission(f, &c, 2, 0), 0);
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(f->plan.nproblems, 0);
}

/* The cluster of test_fifth_member_joins: members 1..4 holding one topic
 * of factor 3 and 8 partitions, member 5 new and holding nothing. */
static void fifth_joins(cl_t *c)
{
    cluster_of(c, 4);
    add_topic(c, 0, 8, 3, 4);
    add_member(c, 5, true, false);
}

/* Four members, one topic of factor 3 and 8 partitions placed as state.c
 * does: each member holds 6 and leads 2. Member 5 joins: 24 replicas over
 * 5 members, so 4 moves (everyone down to 5, the newcomer up to 4). By
 * hand: 1) src 1 (the lower id of the four at 6/2), dst 5; 1 leads 2 >= 0 +
 * 2, so a partition 1 leads: p0 (1,2,3) -> (5,2,3). 2) src 2 (6/2), dst 5
 * (1/1): not a partition 2 leads; p1 (2,3,4) is led by 2, p3 (4,1,2) holds
 * it as a follower -> (4,1,5). 3) src 3, dst 5: p1 (2,3,4) -> (2,5,4). 4)
 * src 4, dst 5: p2 (3,4,1) -> (3,5,1). Leaders then 1,2,2,2,1: within
 * one, no reorder. */
static void test_fifth_member_joins(void **state)
{
    fx_t *f = *state;
    cl_t c;
    fifth_joins(&c);
    assert_int_equal(rebalance(f, &c, 0), 0);
    counts_are(&f->plan, 4, 4, 0);
    const uint32_t p0[] = {5, 2, 3, 0}, p1[] = {2, 5, 4, 0}, p2[] = {3, 5, 1, 0},
                   p3[] = {4, 1, 5, 0};
    assert_true(list_is(&change_of(&f->plan, 0)->to, p0));
    assert_true(list_is(&change_of(&f->plan, 1)->to, p1));
    assert_true(list_is(&change_of(&f->plan, 2)->to, p2));
    assert_true(list_is(&change_of(&f->plan, 3)->to, p3));
    assert_int_equal(f->plan.loads[4].replicas, 4);
    assert_int_equal(f->plan.loads[4].leaders, 1);
    spreads_are(&f->plan, 1, 1);

    /* The same in steps of one move: more until the last, the same total. */
    uint32_t total = 0, calls = 0;
    do {
        assert_int_equal(rebalance(f, &c, 1), 0);
        assert_true(f->plan.moves <= 1);
        total += f->plan.moves;
        apply(&c, &f->plan);
    } while (f->plan.more && ++calls < 10);
    assert_false(f->plan.more);
    assert_int_equal(total, 4);
    assert_int_equal(spread_of(&c, false), 1);
    assert_true(spread_of(&c, true) <= 1);
    assert_int_equal(rebalance(f, &c, 1), 0);
    assert_int_equal(f->plan.nchanges, 0);
}

/* Members 1..4, 4 dead; the topics of four_members (2 not draining). Heal
 * of 4: t0p1 (2,3,4) position 2 -> 1 (the only eligible non-replica);
 * t0p2 (3,4,1) -> 2; t0p3 (4,1,2) position 0 -> 3; t1p3 (4) has no other
 * replica: offline, reported, its list kept. */
static void test_heal_dead_member(void **state)
{
    fx_t *f = *state;
    cl_t c;
    four_members(&c);
    c.m[1].draining = false;
    c.m[3].alive = false;
    assert_int_equal(heal(f, &c, 1, 0), UV_EINVAL);
    assert_non_null(strstr(f->err, "member 1 is alive"));
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(heal(f, &c, 9, 0), TN_ENOTFOUND);
    assert_non_null(strstr(f->err, "member 9 is not a member"));
    assert_int_equal(heal(f, &c, 4, 0), 0);
    assert_int_equal(f->plan.nchanges, 3);
    assert_int_equal(f->plan.moves, 3);
    const uint32_t p1[] = {2, 3, 1, 0}, p2[] = {3, 2, 1, 0}, p3[] = {3, 1, 2, 0};
    assert_true(list_is(&change_of(&f->plan, 1)->to, p1));
    assert_true(list_is(&change_of(&f->plan, 2)->to, p2));
    assert_true(list_is(&change_of(&f->plan, 3)->to, p3));
    assert_null(change_of(&f->plan, 7));
    assert_int_equal(f->plan.nproblems, 1);
    assert_int_equal(f->plan.problems[0].part, 7);
    assert_int_equal(f->plan.problems[0].member, 4);
    assert_int_equal(f->plan.problems[0].why, TN_PLACE_OFFLINE);
    apply(&c, &f->plan);
    assert_int_equal(heal(f, &c, 4, 0), 0);
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(f->plan.nproblems, 1); /* still offline, still said */

    /* Factor 2 with both replicas dead: offline too, never an empty copy. */
    memset(&c, 0, sizeof(c));
    add_member(&c, 1, true, false);
    add_member(&c, 3, false, false);
    add_member(&c, 4, false, false);
    const uint32_t both[] = {3, 4, 0};
    add_part(&c, 0, 0, both);
    assert_int_equal(heal(f, &c, 4, 0), 0);
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(f->plan.nproblems, 1);
    assert_int_equal(f->plan.problems[0].why, TN_PLACE_OFFLINE);
}

/* Three members and factor 3: a decommission or heal has nowhere to go
 * and says so for every partition; with a fourth member, draining too,
 * still nowhere. A factor-1 partition finds room. */
static void test_too_few_members(void **state)
{
    fx_t *f = *state;
    cl_t c;
    cluster_of(&c, 3);
    c.m[0].draining = true;
    add_member(&c, 4, true, true);
    add_topic(&c, 0, 3, 3, 3);
    const uint32_t one[] = {1, 0};
    add_part(&c, 1, 0, one);
    assert_int_equal(decommission(f, &c, 1, 0), 0);
    assert_int_equal(f->plan.nproblems, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(f->plan.problems[i].part, i);
        assert_int_equal(f->plan.problems[i].why, TN_PLACE_NO_ROOM);
        assert_int_equal(f->plan.problems[i].member, 1);
    }
    assert_int_equal(f->plan.nchanges, 1);
    const uint32_t to2[] = {2, 0}; /* 2 and 3 hold 3 and lead 1: the lower id */
    assert_true(list_is(&change_of(&f->plan, 3)->to, to2));
    /* Dead, the same answer for the factor-3 ones. */
    c.m[0].alive = false;
    assert_int_equal(heal(f, &c, 1, 0), 0);
    assert_int_equal(f->plan.nproblems, 4);
    assert_int_equal(f->plan.problems[0].why, TN_PLACE_NO_ROOM);
    assert_int_equal(f->plan.problems[3].why, TN_PLACE_OFFLINE); /* factor 1 on a dead member */
    assert_int_equal(f->plan.nchanges, 0);
}

/* A caps the moves of a decommission: more until the last step, and the
 * steps end where one plan does (the same input order, the same loads). */
static void test_decommission_in_steps(void **state)
{
    fx_t *f = *state;
    cl_t c, one;
    four_members(&c);
    one = c;
    assert_int_equal(decommission(f, &one, 2, 0), 0);
    apply(&one, &f->plan);
    for (int step = 0; step < 4; step++) {
        assert_int_equal(decommission(f, &c, 2, 1), 0);
        assert_int_equal(f->plan.moves, 1);
        assert_int_equal(f->plan.more, step < 3);
        apply(&c, &f->plan);
    }
    assert_memory_equal(c.p, one.p, sizeof(c.p));
}

/* Three factor-1 partitions on A (1), three factor-2 ones on B and C (2,
 * 3): each member holds 3, so nothing moves; A leads 3 whatever the order,
 * B and C share 3. No reordering gets within one, and leader_spread says
 * so (here 3 - 1). */
static void test_mixed_factors_leader_limit(void **state)
{
    fx_t *f = *state;
    cl_t c;
    cluster_of(&c, 3);
    const uint32_t a[] = {1, 0}, bc[] = {2, 3, 0}, cb[] = {3, 2, 0};
    for (uint32_t p = 0; p < 3; p++)
        add_part(&c, 0, p, a);
    add_part(&c, 1, 0, bc);
    add_part(&c, 1, 1, bc);
    add_part(&c, 1, 2, bc);
    assert_int_equal(rebalance(f, &c, 0), 0);
    counts_are(&f->plan, 1, 0, 1); /* B led 3, C none: one of them to C */
    assert_true(list_is(&change_of(&f->plan, 3)->to, cb));
    spreads_are(&f->plan, 0, 2);
}

/* A preferred leader that is draining or dead gives way to an eligible
 * replica (the least led), and a chain A -> B -> C shifts one leadership
 * from A to C when A and C share no partition. */
static void test_leader_chains(void **state)
{
    fx_t *f = *state;
    cl_t c;
    cluster_of(&c, 3);
    add_member(&c, 4, true, true);
    /* A=1 leads (1,2) twice; B=2 leads (2,3); C=3 leads nothing:
     * 1 -> 2 over (1,2), 2 -> 3 over (2,3). Then (4,3) gives 4's
     * leadership to 3. */
    const uint32_t ab[] = {1, 2, 0}, bc[] = {2, 3, 0}, dc[] = {4, 3, 0};
    add_part(&c, 0, 0, ab);
    add_part(&c, 0, 1, ab);
    add_part(&c, 0, 2, bc);
    add_part(&c, 0, 3, dc);
    assert_int_equal(rebalance(f, &c, 0), 0);
    /* After the first step leaders are 1:2 2:1 3:1 (4 gave way to 3):
     * within one; replicas 1:2 2:3 3:2: within one. */
    assert_int_equal(f->plan.moves, 0);
    assert_int_equal(f->plan.nchanges, 1);
    const uint32_t cd[] = {3, 4, 0};
    assert_true(list_is(&change_of(&f->plan, 3)->to, cd));
    assert_int_equal(f->plan.leader_spread, 1);
    /* Without (4,3): 1 leads 2, 2 leads 1, 3 none, and 1 and 3 share no
     * partition. Step a: the chain 1 -> 2 (over p0) -> 3 (over p2):
     * p0 (2,1), p2 (3,2), everyone leads 1. Replicas 2,3,1: step b moves
     * one from 2 to 3; 2 does not lead two more than 3, so a partition 2
     * follows in: p1 (1,2) -> (1,3). */
    c.np = 3;
    assert_int_equal(rebalance(f, &c, 0), 0);
    counts_are(&f->plan, 3, 1, 2);
    const uint32_t ba[] = {2, 1, 0}, ac[] = {1, 3, 0}, cb[] = {3, 2, 0};
    assert_true(list_is(&change_of(&f->plan, 0)->to, ba));
    assert_true(list_is(&change_of(&f->plan, 1)->to, ac));
    assert_true(list_is(&change_of(&f->plan, 2)->to, cb));
    spreads_are(&f->plan, 0, 0);
}

static void test_malformed_input(void **state)
{
    fx_t *f = *state;
    cl_t c;
    const uint32_t ok[] = {1, 2, 0}, dup[] = {1, 1, 0}, stranger[] = {1, 7, 0};
    struct {
        const char *want;
        int id0, id1;
        const uint32_t *r;
        uint32_t factor; /* 0: the list's */
    } rows[] = {
        {"ids start at 1", 0, 2, ok, 0},
        {"member 2 listed twice", 2, 2, ok, 0},
        {"members not sorted by id (1 after 2)", 2, 1, ok, 0},
        {"replica 1 listed twice", 1, 2, dup, 0},
        {"replica 7 is not a member", 1, 2, stranger, 0},
        {"factor 0 outside 1..8", 1, 2, ok, UINT32_MAX},
        {"factor 9 outside 1..8", 1, 2, ok, 9},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        memset(&c, 0, sizeof(c));
        add_member(&c, (uint32_t)rows[i].id0, true, false);
        add_member(&c, (uint32_t)rows[i].id1, true, false);
        add_part(&c, 3, 5, rows[i].r);
        if (rows[i].factor == UINT32_MAX)
            c.p[0].factor = 0;
        else if (rows[i].factor != 0)
            c.p[0].factor = rows[i].factor;
        f->err[0] = '\0';
        assert_int_equal(check(f, &c), UV_EINVAL);
        if (strstr(f->err, rows[i].want) == NULL)
            fail_msg("row %zu: \"%s\" lacks \"%s\"", i, f->err, rows[i].want);
        assert_int_equal(rebalance(f, &c, 0), UV_EINVAL);
        assert_int_equal(decommission(f, &c, 1, 0), UV_EINVAL);
        assert_null(f->plan.changes);
    }
    memset(&c, 0, sizeof(c));
    add_member(&c, 1, true, false);
    assert_int_equal(decommission(f, &c, 2, 0), TN_ENOTFOUND);
    /* No members and no partitions: an empty plan. */
    tn_place_in_t none = {NULL, 0, NULL, 0};
    assert_int_equal(tn_place_rebalance(&none, 0, &f->plan, f->err, sizeof(f->err)), 0);
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(f->plan.replica_spread, 0);
}

/* Out of memory at each allocation of a plan in turn: UV_ENOMEM, an empty
 * plan, and once the allocations succeed, the whole plan (the cluster of
 * test_fifth_member_joins). */
static void test_out_of_memory(void **state)
{
    fx_t *f = *state;
    cl_t c;
    fifth_joins(&c);
    for (int which = 0; which < 2; which++) {
        for (long n = 0;; n++) {
            tn_alloc_fail_after(n);
            int rc = which == 0 ? rebalance(f, &c, 0) : decommission(f, &c, 1, 0);
            tn_alloc_fail_after(-1);
            if (rc == 0)
                break;
            assert_int_equal(rc, UV_ENOMEM);
            assert_non_null(strstr(f->err, "out of memory"));
            assert_null(f->plan.changes);
            assert_null(f->plan.loads);
            assert_int_equal(f->plan.nchanges, 0);
            assert_true(n < 20);
        }
        /* Rebalance: the 4 moves; decommission of 1: its 6 partitions, all
         * to 5, which stays the least loaded until the last. */
        assert_int_equal(f->plan.nchanges, which == 0 ? 4 : 6);
        assert_int_equal(f->plan.loads[4].replicas, which == 0 ? 4 : 6);
    }
}

/* --- seeded random clusters ----------------------------------------------------- */

static uint64_t rng;
static uint64_t seed_now;

/* What the random cases went through, so that a generator that stops
 * reaching a rule fails instead of passing without testing it. */
static struct {
    uint32_t moves, reorders, more, no_room, offline, leaders_stuck, refused;
} seen;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n > 0 ? (uint32_t)(rng % n) : 0;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_msg("seed %llu: %s (line %d); replay with TERN_PLACE_SEED=%llu",                  \
                     (unsigned long long)seed_now, #cond, __LINE__, (unsigned long long)seed_now); \
    } while (0)

/* A random cluster. clean: every replica on an eligible member; uniform:
 * every partition of one factor. */
static void random_cluster(cl_t *c, bool clean, bool uniform)
{
    memset(c, 0, sizeof(*c));
    uint32_t n = 1 + rnd(8), id = 0;
    for (uint32_t i = 0; i < n; i++) {
        id += 1 + rnd(3);
        bool alive = clean || rnd(100) < 85, draining = !clean && rnd(100) < 12;
        add_member(c, id, alive, draining);
    }
    /* A clean cluster may have a newcomer: eligible, holding nothing yet. */
    uint32_t placed = clean && n > 1 && rnd(3) == 0 ? n - 1 : n;
    uint32_t maxf = n < 4 ? n : 4, f = 1 + rnd(maxf), np = rnd(41);
    for (uint32_t k = 0; k < np; k++) {
        uint32_t factor = uniform ? f : 1 + rnd(maxf);
        uint32_t pool[MAXM], npool = 0;
        for (uint32_t i = 0; i < placed; i++)
            if (!clean || (c->m[i].alive && !c->m[i].draining))
                pool[npool++] = c->m[i].id;
        if (factor > npool)
            factor = npool;
        if (factor == 0)
            break;
        uint32_t r[TN_PLACE_MAX_REPLICAS + 1] = {0};
        for (uint32_t j = 0; j < factor; j++) {
            uint32_t pick = j + rnd(npool - j);
            uint32_t t = pool[j];
            pool[j] = pool[pick];
            pool[pick] = t;
            r[j] = pool[j];
        }
        add_part(c, k % 3, k, r);
    }
}

/* Every changed list: its factor, distinct members, and members new to it
 * eligible. */
static void check_lists(const cl_t *before, const tn_place_plan_t *plan)
{
    uint32_t moves = 0;
    for (size_t i = 0; i < plan->nchanges; i++) {
        const tn_place_change_t *ch = &plan->changes[i];
        CHECK(ch->part < before->np);
        CHECK(i == 0 || plan->changes[i - 1].part < ch->part);
        const tn_place_part_t *from = &before->p[ch->part], *to = &ch->to;
        CHECK(to->factor == from->factor);
        CHECK(to->topic == from->topic && to->partition == from->partition);
        CHECK(memcmp(to->replicas, from->replicas, to->factor * sizeof(uint32_t)) != 0);
        uint32_t moved = 0;
        for (uint32_t j = 0; j < to->factor; j++) {
            for (uint32_t k = 0; k < j; k++)
                CHECK(to->replicas[k] != to->replicas[j]);
            if (!holds(from, to->replicas[j])) {
                CHECK(is_eligible(before, to->replicas[j]));
                moved++;
            }
        }
        CHECK(ch->moved == moved);
        moves += moved;
    }
    CHECK(plan->moves == moves);
}

/* Whether some leader choice (each partition with an eligible replica led
 * by one of its eligible replicas) puts every eligible member within one:
 * a circulation with lower bounds over source -> partition [1,1] ->
 * eligible replica [0,1] -> member -> sink [lo,hi] -> source, solved by
 * augmenting paths (Edmonds-Karp on a matrix). Independent of the planner. */
#define FN (MAXP + MAXM + 4)
static int cap[FN][FN];

static int maxflow(int s, int t, int n)
{
    int flow = 0, prev[FN], q[FN];
    for (;;) {
        for (int i = 0; i < n; i++)
            prev[i] = -1;
        prev[s] = s;
        int head = 0, tail = 0;
        q[tail++] = s;
        while (head < tail && prev[t] < 0) {
            int u = q[head++];
            for (int v = 0; v < n; v++)
                if (prev[v] < 0 && cap[u][v] > 0) {
                    prev[v] = u;
                    q[tail++] = v;
                }
        }
        if (prev[t] < 0)
            return flow;
        for (int v = t; v != s; v = prev[v]) {
            cap[prev[v]][v]--;
            cap[v][prev[v]]++;
        }
        flow++;
    }
}

static bool leaders_can_balance(const cl_t *c)
{
    int S = 0, T = 1, P0 = 2, M0 = P0 + (int)c->np, SS = M0 + (int)c->nm, TT = SS + 1, n = TT + 1;
    int excess[FN] = {0};
    memset(cap, 0, sizeof(cap));
    uint32_t np = 0, ne = 0;
    for (size_t i = 0; i < c->nm; i++)
        ne += is_eligible(c, c->m[i].id);
    for (size_t k = 0; k < c->np; k++) {
        bool any = false;
        for (uint32_t j = 0; j < c->p[k].factor; j++)
            if (is_eligible(c, c->p[k].replicas[j])) {
                cap[P0 + k][M0 + member_at(c, c->p[k].replicas[j])] = 1;
                any = true;
            }
        if (any) { /* S -> partition [1,1] */
            excess[P0 + k]++;
            excess[S]--;
            np++;
        }
    }
    if (ne == 0)
        return true;
    int lo = (int)(np / ne), hi = (int)((np + ne - 1) / ne);
    for (size_t i = 0; i < c->nm; i++) {
        if (!is_eligible(c, c->m[i].id))
            continue;
        cap[M0 + i][T] = hi - lo; /* member -> T [lo,hi] */
        excess[T] += lo;
        excess[M0 + i] -= lo;
    }
    cap[T][S] = 1 << 20;
    int need = 0;
    for (int v = 0; v < SS; v++) {
        if (excess[v] > 0) {
            cap[SS][v] = excess[v];
            need += excess[v];
        } else if (excess[v] < 0) {
            cap[v][TT] = -excess[v];
        }
    }
    return maxflow(SS, TT, n) == need;
}

/* The fewest moves that put the eligible members within one: with T
 * replicas on n of them, every one must end at floor(T/n) or ceil(T/n);
 * each move takes one replica off one member and puts it on another, so
 * it can lower sum(max(0, load - ceil)) by one at most and raise the
 * members below floor by one at most: max of the two sums is a lower
 * bound, and the greedy reaches it (placement.h, rule 3b). The brief's
 * sum(max(0, load - ceil)) alone is not: loads 2,2,2,0 need one move. */
static uint32_t fewest_moves(const cl_t *c)
{
    uint32_t t = 0, n = 0, over = 0, under = 0;
    for (size_t i = 0; i < c->nm; i++)
        if (is_eligible(c, c->m[i].id)) {
            t += replicas_of(c, c->m[i].id);
            n++;
        }
    if (n == 0)
        return 0;
    uint32_t fl = t / n, ce = (t + n - 1) / n;
    for (size_t i = 0; i < c->nm; i++) {
        if (!is_eligible(c, c->m[i].id))
            continue;
        uint32_t l = replicas_of(c, c->m[i].id);
        over += l > ce ? l - ce : 0;
        under += l < fl ? fl - l : 0;
    }
    return over > under ? over : under;
}

static void check_rebalance(fx_t *f, const cl_t *start, bool clean, bool uniform)
{
    cl_t c = *start;
    CHECK(rebalance(f, &c, 0) == 0);
    check_lists(start, &f->plan);
    CHECK(!f->plan.more);
    CHECK(f->plan.moves == fewest_moves(start));
    /* Replicas on dead or draining members stay. */
    for (size_t i = 0; i < f->plan.nchanges; i++) {
        const tn_place_part_t *from = &start->p[f->plan.changes[i].part];
        for (uint32_t j = 0; j < from->factor; j++)
            if (!is_eligible(start, from->replicas[j]))
                CHECK(holds(&f->plan.changes[i].to, from->replicas[j]));
    }
    apply(&c, &f->plan);
    for (size_t i = 0; i < c.nm; i++) {
        CHECK(f->plan.loads[i].replicas == replicas_of(&c, c.m[i].id));
        CHECK(f->plan.loads[i].leaders == leaders_of(&c, c.m[i].id));
    }
    CHECK(spread_of(&c, false) <= 1);
    CHECK(f->plan.replica_spread == spread_of(&c, false));
    CHECK(f->plan.leader_spread == spread_of(&c, true));
    /* Leaders within one whenever some order of the final lists gets
     * there (always, when the factors are one and all on eligible
     * members). */
    if (clean && uniform)
        CHECK(spread_of(&c, true) <= 1);
    CHECK(spread_of(&c, true) <= 1 || !leaders_can_balance(&c));
    seen.leaders_stuck += spread_of(&c, true) > 1;
    seen.moves += f->plan.moves;
    seen.reorders += f->plan.reorders;
    /* A partition with an eligible replica is led by one. */
    for (size_t k = 0; k < c.np; k++) {
        bool any = false;
        for (uint32_t j = 0; j < c.p[k].factor; j++)
            any = any || is_eligible(&c, c.p[k].replicas[j]);
        CHECK(!any || is_eligible(&c, c.p[k].replicas[0]));
    }
    /* Planned again: nothing. */
    CHECK(rebalance(f, &c, 0) == 0);
    CHECK(f->plan.nchanges == 0);

    /* In capped steps: the same number of moves, the same end state's
     * properties. */
    cl_t s = *start;
    uint32_t cap_moves = 1 + rnd(3), total = 0, calls = 0;
    do {
        CHECK(rebalance(f, &s, cap_moves) == 0);
        CHECK(f->plan.moves <= cap_moves);
        CHECK(!f->plan.more || f->plan.moves == cap_moves);
        seen.more += f->plan.more;
        total += f->plan.moves;
        apply(&s, &f->plan);
        CHECK(++calls < 200);
    } while (f->plan.more);
    CHECK(total == fewest_moves(start));
    CHECK(spread_of(&s, false) <= 1);
    if (clean && uniform)
        CHECK(spread_of(&s, true) <= 1);
    CHECK(rebalance(f, &s, 0) == 0);
    CHECK(f->plan.nchanges == 0);
}

/* Decommission (or heal, of a dead member) of member index mi. */
static void check_replace(fx_t *f, const cl_t *start, uint32_t mi, bool heal)
{
    cl_t c = *start;
    const tn_place_member_t *m = &start->m[mi];
    int rc = replace(f, &c, m->id, 0, heal);
    if (heal && m->alive) {
        CHECK(rc == UV_EINVAL);
        CHECK(f->plan.nchanges == 0 && f->plan.nproblems == 0);
        seen.refused++;
        return;
    }
    CHECK(rc == 0);
    CHECK(!f->plan.more);
    check_lists(start, &f->plan);
    /* Replay the load order here: loads as in the input, each change in
     * part order took the least loaded eligible member not a replica. */
    uint32_t rep[MAXM], lead[MAXM];
    for (size_t i = 0; i < start->nm; i++) {
        rep[i] = replicas_of(start, start->m[i].id);
        lead[i] = leaders_of(start, start->m[i].id);
    }
    size_t ci = 0, pi = 0;
    for (uint32_t k = 0; k < start->np; k++) {
        const tn_place_part_t *p = &start->p[k];
        const tn_place_change_t *ch =
            ci < f->plan.nchanges && f->plan.changes[ci].part == k ? &f->plan.changes[ci++] : NULL;
        const tn_place_problem_t *pr = pi < f->plan.nproblems && f->plan.problems[pi].part == k
                                           ? &f->plan.problems[pi++]
                                           : NULL;
        if (!holds(p, m->id)) {
            CHECK(ch == NULL && pr == NULL);
            continue;
        }
        bool other_alive = false;
        for (uint32_t j = 0; j < p->factor; j++)
            other_alive = other_alive || (p->replicas[j] != m->id &&
                                          start->m[member_at(start, p->replicas[j])].alive);
        int best = -1;
        for (size_t i = 0; i < start->nm; i++) {
            if (!is_eligible(start, start->m[i].id) || holds(p, start->m[i].id))
                continue;
            if (best < 0 || rep[i] < rep[best] || (rep[i] == rep[best] && lead[i] < lead[best]))
                best = (int)i;
        }
        if (!m->alive && !other_alive) {
            CHECK(ch == NULL && pr != NULL && pr->why == TN_PLACE_OFFLINE);
            CHECK(pr->member == m->id);
            seen.offline++;
            continue;
        }
        if (best < 0) {
            CHECK(ch == NULL && pr != NULL && pr->why == TN_PLACE_NO_ROOM);
            CHECK(pr->member == m->id);
            seen.no_room++;
            continue;
        }
        CHECK(pr == NULL && ch != NULL && ch->moved == 1);
        uint32_t pos = 0;
        while (p->replicas[pos] != m->id)
            pos++;
        for (uint32_t j = 0; j < p->factor; j++)
            CHECK(ch->to.replicas[j] == (j == pos ? start->m[best].id : p->replicas[j]));
        rep[best]++;
        rep[mi]--;
        if (pos == 0) {
            lead[best]++;
            lead[mi]--;
        }
    }
    CHECK(ci == f->plan.nchanges && pi == f->plan.nproblems);
    apply(&c, &f->plan);
    CHECK(replicas_of(&c, m->id) == f->plan.nproblems);
    /* Planned again: no change, the same problems. */
    size_t nproblems = f->plan.nproblems;
    rc = replace(f, &c, m->id, 0, heal);
    CHECK(rc == 0 && f->plan.nchanges == 0 && f->plan.nproblems == nproblems);
    /* In capped steps: the same end, list for list. */
    cl_t s = *start;
    uint32_t cap_moves = 1 + rnd(3), calls = 0;
    do {
        rc = replace(f, &s, m->id, cap_moves, heal);
        CHECK(rc == 0 && f->plan.moves <= cap_moves);
        apply(&s, &f->plan);
        CHECK(++calls < 100);
    } while (f->plan.more);
    CHECK(memcmp(s.p, c.p, sizeof(s.p)) == 0);
}

static void test_random_clusters(void **state)
{
    fx_t *f = *state;
    const char *env = getenv("TERN_PLACE_SEED");
    uint64_t base = env != NULL ? strtoull(env, NULL, 10) : 20261203;
    const char *many = getenv("TERN_PLACE_CASES");
    uint32_t cases = many != NULL ? (uint32_t)strtoul(many, NULL, 10) : env != NULL ? 1 : 4000;
    for (uint32_t i = 0; i < cases; i++) {
        seed_now = base + i;
        rng = seed_now * 0x9E3779B97F4A7C15ull + 1;
        bool clean = rnd(2), uniform = rnd(2);
        cl_t c;
        random_cluster(&c, clean, uniform);
        CHECK(check(f, &c) == 0);
        check_rebalance(f, &c, clean, uniform);
        uint32_t mi = rnd((uint32_t)c.nm);
        check_replace(f, &c, mi, false);
        check_replace(f, &c, mi, true);
        /* And a dead member's heal, always. */
        c.m[mi].alive = false;
        check_replace(f, &c, mi, true);
    }
    printf("%u cases: %u moves, %u reorders, %u capped steps, %u no room, %u offline, "
           "%u with leaders a reorder cannot balance, %u heals refused\n",
           cases, seen.moves, seen.reorders, seen.more, seen.no_room, seen.offline,
           seen.leaders_stuck, seen.refused);
    if (env == NULL && many == NULL) {
        assert_true(seen.moves > 0 && seen.reorders > 0 && seen.more > 0);
        assert_true(seen.no_room > 0 && seen.offline > 0);
        assert_true(seen.leaders_stuck > 0 && seen.refused > 0);
    }
}

/* Rule 4, the factor. Members 1..4 alive, 5 draining, 6 dead; loads
 * before (replicas, leads): 1 (3, 2), 2 (1, 1), 3 (2, 1), 4 (2, 1).
 *   p0 [1] to 3: the least loaded eligible members it lacks, one at a
 *      time: 2 (1 replica), then 3 and 4 tie at (2, 1), the lower id: 3.
 *   p1 [2, 3, 6] to 1: 6 first (dead), then the last, 3: [2].
 *   p2 [3, 5, 4] to 2: 5 (draining): [3, 4].
 *   p3 [4, 1] to 2: as it is.
 *   p4 [1] to 5: only 2, 3 and 4 could be added: no room, left as it is. */
static void test_refactor(void **state)
{
    fx_t *f = *state;
    cl_t c;
    memset(&c, 0, sizeof(c));
    for (uint32_t id = 1; id <= 6; id++)
        add_member(&c, id, id != 6, id == 5);
    const uint32_t p0[] = {1, 0}, p1[] = {2, 3, 6, 0}, p2[] = {3, 5, 4, 0}, p3[] = {4, 1, 0},
                   p4[] = {1, 0};
    add_part(&c, 0, 0, p0);
    add_part(&c, 0, 1, p1);
    add_part(&c, 0, 2, p2);
    add_part(&c, 0, 3, p3);
    add_part(&c, 1, 0, p4);
    tn_place_in_t in = in_of(&c);
    uint32_t want[5] = {3, 1, 2, 2, 0};
    assert_int_equal(tn_place_refactor(&in, want, &f->plan, f->err, sizeof(f->err)), UV_EINVAL);
    assert_non_null(strstr(f->err, "partition 4: a factor of 0"));
    assert_int_equal(f->plan.nchanges, 0);
    want[4] = 5;
    assert_int_equal(tn_place_refactor(&in, want, &f->plan, f->err, sizeof(f->err)), 0);
    counts_are(&f->plan, 3, 2, 2);
    const uint32_t to0[] = {1, 2, 3, 0}, to1[] = {2, 0}, to2[] = {3, 4, 0};
    assert_true(list_is(&change_of(&f->plan, 0)->to, to0));
    assert_int_equal(change_of(&f->plan, 0)->moved, 2);
    assert_true(list_is(&change_of(&f->plan, 1)->to, to1));
    assert_int_equal(change_of(&f->plan, 1)->moved, 0);
    assert_true(list_is(&change_of(&f->plan, 2)->to, to2));
    assert_null(change_of(&f->plan, 3));
    assert_null(change_of(&f->plan, 4));
    assert_int_equal(f->plan.nproblems, 1);
    assert_int_equal(f->plan.problems[0].part, 4);
    assert_int_equal(f->plan.problems[0].why, TN_PLACE_NO_ROOM);
    /* Applied and planned again: nothing left but the partition with no room. */
    apply(&c, &f->plan);
    in = in_of(&c);
    assert_int_equal(tn_place_refactor(&in, want, &f->plan, f->err, sizeof(f->err)), 0);
    assert_int_equal(f->plan.nchanges, 0);
    assert_int_equal(f->plan.nproblems, 1);
}

/* Each case with a plan of its own. */
#define PLACE_TEST(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        PLACE_TEST(test_decommission_one_of_four),
        PLACE_TEST(test_fifth_member_joins),
        PLACE_TEST(test_heal_dead_member),
        PLACE_TEST(test_too_few_members),
        PLACE_TEST(test_decommission_in_steps),
        PLACE_TEST(test_mixed_factors_leader_limit),
        PLACE_TEST(test_leader_chains),
        PLACE_TEST(test_malformed_input),
        PLACE_TEST(test_refactor),
        PLACE_TEST(test_out_of_memory),
        PLACE_TEST(test_random_clusters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
