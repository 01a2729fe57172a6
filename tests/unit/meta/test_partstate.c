/* The controller's rules over a replicated partition (meta/partstate.h), as
 * tables: the ISR compare-and-set (every refusal with its code and
 * sentence), the fence and election rule (ISR order, liveness, incarnation,
 * CRC failures, the ELR), then the forced election and the preferred-leader
 * rebalance. Three replicas 1, 2, 3 (incarnations 0x11, 0x22, 0x33),
 * min_insync 2, leader 1 unless a row says otherwise. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "meta/partstate.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    tn_pstate_node_t v[4];
    tn_pstate_nodes_t nodes;
    tn_pstate_t ps;
} fix_t;

static void fix_init(fix_t *f)
{
    memset(f, 0, sizeof(*f));
    for (uint32_t i = 0; i < 4; i++)
        f->v[i] = (tn_pstate_node_t){i + 1, 0x11u * (i + 1), true};
    f->nodes = (tn_pstate_nodes_t){f->v, 3}; /* node 4 exists for no one */
    const uint32_t replicas[3] = {1, 2, 3};
    char err[128];
    assert_int_equal(tn_pstate_create(&f->ps, replicas, 3, 2, &f->nodes, err, sizeof(err)), 0);
    assert_int_equal(f->ps.leader, 1);
    assert_int_equal(f->ps.nisr, 3);
}

/* Set the ISR to the listed nodes (their current incarnations); 0 ends. */
static void set_isr(fix_t *f, const uint32_t *nodes)
{
    f->ps.nisr = 0;
    for (; *nodes; nodes++)
        f->ps.isr[f->ps.nisr++] = (tn_pstate_member_t){*nodes, f->v[*nodes - 1].incarnation};
}

static bool isr_is(const tn_pstate_t *ps, const uint32_t *nodes)
{
    uint32_t n = 0;
    for (; nodes[n]; n++)
        if (n >= ps->nisr || ps->isr[n].node != nodes[n])
            return false;
    return n == ps->nisr;
}

static bool elr_is(const tn_pstate_t *ps, const uint32_t *nodes)
{
    uint32_t n = 0;
    for (; nodes[n]; n++)
        if (n >= ps->nelr || ps->elr[n].node != nodes[n])
            return false;
    return n == ps->nelr;
}

static void test_create_refusals(void **state)
{
    (void)state;
    fix_t f;
    fix_init(&f);
    char err[128];
    const uint32_t dup[2] = {1, 1}, unknown[2] = {1, 9}, ok[2] = {1, 2};
    assert_int_equal(tn_pstate_create(&f.ps, dup, 2, 1, &f.nodes, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "listed twice"));
    assert_int_equal(tn_pstate_create(&f.ps, unknown, 2, 1, &f.nodes, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "not a known member"));
    assert_int_equal(tn_pstate_create(&f.ps, ok, 0, 1, &f.nodes, err, sizeof(err)), UV_EINVAL);
    assert_int_equal(tn_pstate_create(&f.ps, ok, 2, 3, &f.nodes, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "min_insync_replicas"));
}

/* --- the compare-and-set -------------------------------------------------------- */

typedef struct {
    const char *what;
    uint32_t start[4]; /* the ISR before (leader 1) */
    uint64_t inc3;     /* node 3's incarnation now (0: unchanged) */
    bool dead3;        /* node 3's session expired */
    uint32_t proposer; /* 0: the leader */
    int epoch_delta;   /* added to the leader epoch proposed */
    int pe_delta;      /* added to the partition epoch expected */
    uint32_t isr[5];   /* proposed: node ids, their current incarnation */
    uint64_t isr3_inc; /* incarnation proposed for node 3 (0: current) */
    int rc;
    const char *says; /* in err */
} cas_row_t;

static const cas_row_t cas_rows[] = {
    {"shrink", {1, 2, 3}, 0, false, 0, 0, 0, {1, 2}, 0, 0, NULL},
    {"expand", {1, 2}, 0, false, 0, 0, 0, {1, 2, 3}, 0, 0, NULL},
    {"same ISR bumps the epoch", {1, 2, 3}, 0, false, 0, 0, 0, {1, 2, 3}, 0, 0, NULL},
    {"stale partition epoch", {1, 2, 3}, 0, false, 0, 0, -1, {1, 2}, 0, TN_ECHANGED, "stale"},
    {"future partition epoch", {1, 2, 3}, 0, false, 0, 0, 1, {1, 2}, 0, TN_ECHANGED, "stale"},
    {"not the leader", {1, 2, 3}, 0, false, 2, 0, 0, {1, 2}, 0, TN_ECHANGED, "not the leader"},
    {"old leader epoch", {1, 2, 3}, 0, false, 0, -1, 0, {1, 2}, 0, TN_ECHANGED, "not the leader"},
    {"ISR without its leader",
     {1, 2, 3},
     0,
     false,
     0,
     0,
     0,
     {2, 3},
     0,
     UV_EINVAL,
     "hold its leader"},
    {"non-replica", {1, 2}, 0, false, 0, 0, 0, {1, 4}, 0, UV_EINVAL, "not a replica"},
    {"duplicate", {1, 2}, 0, false, 0, 0, 0, {1, 2, 2}, 0, UV_EINVAL, "twice"},
    {"empty", {1, 2}, 0, false, 0, 0, 0, {0}, 0, UV_EINVAL, "0 members"},
    {"expand with a stale incarnation (wiped disk)",
     {1, 2},
     0x99,
     false,
     0,
     0,
     0,
     {1, 2, 3},
     0x33,
     UV_EPERM,
     "not its current"},
    {"expand with the new incarnation", {1, 2}, 0x99, false, 0, 0, 0, {1, 2, 3}, 0x99, 0, NULL},
    {"expand a fenced member", {1, 2}, 0, true, 0, 0, 0, {1, 2, 3}, 0, UV_EPERM, "no live"},
    {"keep a member whose session expired", {1, 2, 3}, 0, true, 0, 0, 0, {1, 2, 3}, 0, 0, NULL},
};

static void test_alter_isr_table(void **state)
{
    (void)state;
    for (size_t r = 0; r < sizeof(cas_rows) / sizeof(cas_rows[0]); r++) {
        const cas_row_t *row = &cas_rows[r];
        fix_t f;
        fix_init(&f);
        set_isr(&f, row->start);
        if (row->inc3)
            f.v[2].incarnation = row->inc3;
        f.v[2].live = !row->dead3;
        tn_pstate_member_t isr[5];
        uint32_t n = 0;
        for (; row->isr[n]; n++) {
            isr[n].node = row->isr[n];
            isr[n].incarnation = row->isr[n] == 3 && row->isr3_inc ? row->isr3_inc
                                 : row->isr[n] <= 4 ? f.v[row->isr[n] - 1].incarnation
                                                    : 0;
        }
        uint32_t pe = f.ps.partition_epoch;
        tn_pstate_t before = f.ps;
        char err[160] = "";
        int rc =
            tn_pstate_alter_isr(&f.ps, row->proposer ? row->proposer : f.ps.leader,
                                f.ps.leader_epoch + (uint32_t)row->epoch_delta,
                                pe + (uint32_t)row->pe_delta, isr, n, &f.nodes, err, sizeof(err));
        if (rc != row->rc)
            fail_msg("%s: rc %s, expected %s (%s)", row->what, tn_err_name(rc),
                     tn_err_name(row->rc), err);
        if (rc == 0) {
            assert_int_equal(f.ps.partition_epoch, pe + 1);
            assert_int_equal(f.ps.nisr, n);
            assert_int_equal(f.ps.leader_epoch, before.leader_epoch);
        } else {
            assert_memory_equal(&f.ps, &before, sizeof(before)); /* nothing changed */
            if (row->says && strstr(err, row->says) == NULL)
                fail_msg("%s: error \"%s\" lacks \"%s\"", row->what, err, row->says);
        }
    }
}

/* --- fences and elections ------------------------------------------------------- */

typedef struct {
    const char *what;
    uint32_t start[4]; /* the ISR before, leader 1 when in it */
    uint32_t dead;     /* a node whose session is gone too (0: none) */
    uint32_t corrupt;  /* a node with a CRC failure (0: none) */
    uint32_t wiped;    /* a node with a new incarnation (0: none) */
    uint32_t fenced;
    bool changed;
    uint32_t leader; /* after */
    bool new_epoch;
    uint32_t isr[4], elr[4];
} fence_row_t;

static const fence_row_t fence_rows[] = {
    {"leader fenced: next in replicas order", {1, 2, 3}, 0, 0, 0, 1, true, 2, true, {2, 3}, {0}},
    {"skip a dead member", {1, 2, 3}, 2, 0, 0, 1, true, 3, true, {2, 3}, {0}},
    {"skip a corrupt member", {1, 2, 3}, 0, 2, 0, 1, true, 3, true, {2, 3}, {0}},
    {"a wiped member leaves with the fence, never leads",
     {1, 2, 3},
     0,
     0,
     2,
     1,
     true,
     3,
     true,
     {3},
     {1}},
    {"follower fenced: leader stays, epoch stays",
     {1, 2, 3},
     0,
     0,
     0,
     3,
     true,
     1,
     false,
     {1, 2},
     {0}},
    {"below min_insync: the fenced one joins the ELR",
     {1, 2},
     0,
     0,
     0,
     2,
     true,
     1,
     false,
     {1},
     {2}},
    {"last member fenced: offline, kept in the ELR", {1}, 0, 0, 0, 1, true, 0, true, {0}, {1}},
    {"no live ISR member: offline", {1, 2}, 2, 0, 0, 1, true, 0, true, {2}, {1}},
    {"not a replica: nothing", {1, 2, 3}, 0, 0, 0, 4, false, 1, false, {1, 2, 3}, {0}},
};

static void test_fence_table(void **state)
{
    (void)state;
    for (size_t r = 0; r < sizeof(fence_rows) / sizeof(fence_rows[0]); r++) {
        const fence_row_t *row = &fence_rows[r];
        fix_t f;
        fix_init(&f);
        f.nodes.n = 4;
        set_isr(&f, row->start);
        if (row->dead)
            f.v[row->dead - 1].live = false;
        if (row->corrupt)
            f.ps.corrupt |= 1u << (row->corrupt - 1);
        if (row->wiped)
            f.v[row->wiped - 1].incarnation = 0xabc;
        uint32_t epoch = f.ps.leader_epoch, pe = f.ps.partition_epoch;
        bool changed =
            tn_pstate_fence(&f.ps, row->fenced, f.v[row->fenced - 1].incarnation, &f.nodes);
        if (changed != row->changed || f.ps.leader != row->leader ||
            (f.ps.leader_epoch != epoch) != row->new_epoch || !isr_is(&f.ps, row->isr) ||
            !elr_is(&f.ps, row->elr))
            fail_msg("%s: changed %d leader %u epoch %u->%u isr %u elr %u", row->what, changed,
                     f.ps.leader, epoch, f.ps.leader_epoch, f.ps.nisr, f.ps.nelr);
        assert_int_equal(f.ps.partition_epoch, pe + (changed ? 1 : 0));
    }
}

/* A partition offline with its last members in the ELR comes back with the
 * first of them to register again, and the ELR empties once the ISR is back
 * to min_insync. */
static void test_elect_from_elr(void **state)
{
    (void)state;
    fix_t f;
    fix_init(&f);
    assert_true(tn_pstate_fence(&f.ps, 3, 0x33, &f.nodes)); /* {1,2} */
    f.v[2].live = false;
    assert_true(tn_pstate_fence(&f.ps, 2, 0x22, &f.nodes)); /* {1}, ELR {2} */
    f.v[1].live = false;
    assert_true(tn_pstate_fence(&f.ps, 1, 0x11, &f.nodes)); /* offline, ELR {2,1} */
    f.v[0].live = false;
    assert_int_equal(f.ps.leader, TN_PSTATE_NONE);
    assert_int_equal(f.ps.nisr, 0);
    assert_int_equal(f.ps.nelr, 2);
    assert_false(tn_pstate_elect(&f.ps, &f.nodes)); /* nobody is back */
    f.v[2].live = true; /* node 3 left before the hw froze: not eligible */
    assert_false(tn_pstate_elect(&f.ps, &f.nodes));
    f.v[1].live = true;
    uint32_t epoch = f.ps.leader_epoch;
    assert_true(tn_pstate_elect(&f.ps, &f.nodes));
    assert_int_equal(f.ps.leader, 2);
    assert_int_equal(f.ps.leader_epoch, epoch + 1);
    const uint32_t isr2[] = {2, 0}, elr1[] = {1, 0};
    assert_true(isr_is(&f.ps, isr2));
    assert_true(elr_is(&f.ps, elr1));
    tn_pstate_member_t isr[2] = {{2, 0x22}, {3, 0x33}};
    char err[128];
    assert_int_equal(tn_pstate_alter_isr(&f.ps, 2, f.ps.leader_epoch, f.ps.partition_epoch, isr, 2,
                                         &f.nodes, err, sizeof(err)),
                     0);
    assert_int_equal(f.ps.nelr, 0);
}

/* A wiped node (new incarnation) in the ELR never leads. */
static void test_wiped_elr_member_never_leads(void **state)
{
    (void)state;
    fix_t f;
    fix_init(&f);
    const uint32_t one[] = {1, 0};
    set_isr(&f, one);
    assert_true(tn_pstate_fence(&f.ps, 1, 0x11, &f.nodes));
    assert_int_equal(f.ps.leader, TN_PSTATE_NONE);
    f.v[0].incarnation = 0x777; /* came back with an empty disk */
    assert_false(tn_pstate_elect(&f.ps, &f.nodes));
    char err[128];
    assert_int_equal(tn_pstate_force_leader(&f.ps, 1, false, &f.nodes, err, sizeof(err)), UV_EPERM);
    assert_non_null(strstr(err, "unclean"));
    uint32_t epoch = f.ps.leader_epoch;
    assert_int_equal(tn_pstate_force_leader(&f.ps, 1, true, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 1);
    assert_true(f.ps.unclean);
    assert_int_equal(f.ps.leader_epoch, epoch + 1);
    assert_int_equal(f.ps.isr[0].incarnation, 0x777);
}

static void test_force_leader(void **state)
{
    (void)state;
    fix_t f;
    fix_init(&f);
    char err[128];
    f.nodes.n = 4;
    assert_int_equal(tn_pstate_force_leader(&f.ps, 4, false, &f.nodes, err, sizeof(err)),
                     UV_EINVAL);
    f.v[2].live = false;
    assert_int_equal(tn_pstate_force_leader(&f.ps, 3, true, &f.nodes, err, sizeof(err)), UV_EPERM);
    assert_non_null(strstr(err, "no live session"));
    uint32_t epoch = f.ps.leader_epoch;
    assert_int_equal(tn_pstate_force_leader(&f.ps, 2, false, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 2);
    assert_int_equal(f.ps.leader_epoch, epoch + 1);
    assert_false(f.ps.unclean);
    assert_int_equal(f.ps.nisr, 3); /* a clean election keeps the ISR */
}

static void test_rebalance_and_corrupt(void **state)
{
    (void)state;
    fix_t f;
    fix_init(&f);
    assert_false(tn_pstate_preferred_ready(&f.ps, &f.nodes)); /* 1 leads already */
    assert_int_equal(tn_pstate_rebalance(&f.ps, &f.nodes), UV_EAGAIN);
    assert_true(tn_pstate_mark_corrupt(&f.ps, 1, &f.nodes));
    assert_int_equal(f.ps.leader, 2);
    assert_int_equal(tn_pstate_isr_find(&f.ps, 1), -1);
    assert_false(tn_pstate_preferred_ready(&f.ps, &f.nodes)); /* not in the ISR */
    /* The leader adds it back once it re-fetched: the CRC mark clears. */
    tn_pstate_member_t isr[3] = {{2, 0x22}, {3, 0x33}, {1, 0x11}};
    char err[128];
    /* Not before its channel state was checked caught up. */
    uint32_t pe = f.ps.partition_epoch;
    assert_int_equal(tn_pstate_alter_isr_ex(&f.ps, 2, f.ps.leader_epoch, pe, isr, 3, false,
                                            &f.nodes, err, sizeof(err)),
                     UV_EPERM);
    assert_non_null(strstr(err, "channel state"));
    assert_int_equal(f.ps.partition_epoch, pe);
    assert_int_equal(tn_pstate_alter_isr_ex(&f.ps, 2, f.ps.leader_epoch, pe, isr, 3, true, &f.nodes,
                                            err, sizeof(err)),
                     0);
    assert_int_equal(f.ps.corrupt, 0);
    assert_true(tn_pstate_preferred_ready(&f.ps, &f.nodes));
    f.v[0].live = false;
    assert_int_equal(tn_pstate_rebalance(&f.ps, &f.nodes), UV_EAGAIN); /* not live */
    f.v[0].live = true;
    uint32_t epoch = f.ps.leader_epoch;
    assert_int_equal(tn_pstate_rebalance(&f.ps, &f.nodes), 0);
    assert_int_equal(f.ps.leader, 1);
    assert_int_equal(f.ps.leader_epoch, epoch + 1);
}

/* --- reassignment (rules 6 to 8) ------------------------------------------------- */

/* Nodes 1..4 known and live (4 holds no replica yet): the fixture's
 * partition over 1, 2, 3. */
static void fix_init4(fix_t *f)
{
    fix_init(f);
    f->nodes.n = 4;
}

static bool list_is(const uint32_t *v, uint32_t n, const uint32_t *want)
{
    uint32_t k = 0;
    for (; want[k]; k++)
        if (k >= n || v[k] != want[k])
            return false;
    return k == n;
}

/* The leader's CAS adding node to the ISR (it caught up). */
static void cas_add(fix_t *f, uint32_t node)
{
    tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
    memcpy(isr, f->ps.isr, f->ps.nisr * sizeof(isr[0]));
    isr[f->ps.nisr] = (tn_pstate_member_t){node, f->v[node - 1].incarnation};
    char err[160];
    assert_int_equal(tn_pstate_alter_isr(&f->ps, f->ps.leader, f->ps.leader_epoch,
                                         f->ps.partition_epoch, isr, f->ps.nisr + 1, &f->nodes, err,
                                         sizeof(err)),
                     0);
}

/* Move 9 of f's partition to 2, 4, 3 begun (at 10): 4 joins, 1 leaves. */
static void begin_move9(fix_t *f)
{
    const uint32_t target[3] = {2, 4, 3};
    char err[160];
    assert_int_equal(tn_pstate_move_begin(&f->ps, target, 3, 9, 10, &f->nodes, err, sizeof(err)),
                     0);
}

/* fix_init4's partition with move 9 begun. */
static void fix_moving(fix_t *f)
{
    fix_init4(f);
    begin_move9(f);
}

static void test_move_begin_table(void **state)
{
    (void)state;
    static const struct {
        uint32_t target[10]; /* 0 ends */
        bool dead4;          /* node 4 has no live session */
        int rc;
        const char *why;
    } rows[] = {
        {{0}, false, UV_EINVAL, "is empty"},
        {{2, 2, 4}, false, UV_EINVAL, "member 2 is listed twice"},
        {{2, 9, 3}, false, UV_EINVAL, "member 9 is not a known member"},
        {{2, 4, 3}, true, UV_EINVAL, "member 4 has no live session"},
        {{4}, false, UV_EINVAL, "fewer than min_insync_replicas 2"},
        {{1, 2, 3}, false, UV_EINVAL, "has these replicas already"},
        {{1, 2, 3, 4, 1, 2, 3, 4, 1}, false, UV_EINVAL, "at most 8 replicas, not 9"},
        {{3, 2, 1}, false, 0, NULL}, /* a new order is a move too */
        {{2, 4, 3}, false, 0, NULL},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(rows); i++) {
        fix_t f;
        fix_init4(&f);
        f.v[3].live = !rows[i].dead4;
        uint32_t n = 0;
        while (rows[i].target[n])
            n++;
        tn_pstate_t was = f.ps;
        char err[160] = "";
        int rc =
            tn_pstate_move_begin(&f.ps, rows[i].target, n, 77, 1000, &f.nodes, err, sizeof(err));
        if (rc != rows[i].rc || (rows[i].why != NULL && strstr(err, rows[i].why) == NULL))
            fail_msg("row %zu: rc %d (%s), want %d (%s)", i, rc, err, rows[i].rc,
                     rows[i].why ? rows[i].why : "");
        if (rc != 0) {
            assert_memory_equal(&was, &f.ps, sizeof(was)); /* a refusal changes nothing */
            continue;
        }
        assert_int_equal(f.ps.partition_epoch, was.partition_epoch + 1);
        assert_int_equal(f.ps.leader, 1);
        assert_int_equal(f.ps.leader_epoch, was.leader_epoch);
        assert_int_equal(f.ps.move_id, 77);
        assert_int_equal(f.ps.move_started_ms, 1000);
        assert_true(list_is(f.ps.old, f.ps.nold, (const uint32_t[]){1, 2, 3, 0}));
        assert_true(list_is(f.ps.target, f.ps.ntarget, rows[i].target));
        assert_true(isr_is(&f.ps, (const uint32_t[]){1, 2, 3, 0})); /* adds join by CAS */
        if (rows[i].target[1] == 4)
            assert_true(list_is(f.ps.replicas, f.ps.nreplicas, (const uint32_t[]){2, 4, 3, 1, 0}));
        /* One move at a time. */
        tn_pstate_t mid = f.ps;
        const uint32_t other[3] = {1, 2, 4};
        assert_int_equal(
            tn_pstate_move_begin(&f.ps, other, 3, 78, 2000, &f.nodes, err, sizeof(err)), UV_EBUSY);
        assert_non_null(strstr(err, "under way"));
        assert_memory_equal(&mid, &f.ps, sizeof(mid));
    }
}

/* The target and the replicas it drops are all replicas during the move:
 * together at most TN_PSTATE_MAX_REPLICAS. */
static void test_move_begin_too_many_together(void **state)
{
    (void)state;
    tn_pstate_node_t v[9];
    for (uint32_t i = 0; i < 9; i++)
        v[i] = (tn_pstate_node_t){i + 1, 0x100u + i, true};
    tn_pstate_nodes_t nodes = {v, 9};
    tn_pstate_t ps;
    char err[160];
    const uint32_t r[3] = {1, 2, 3}, t[6] = {4, 5, 6, 7, 8, 9}, t2[5] = {1, 5, 6, 7, 8};
    assert_int_equal(tn_pstate_create(&ps, r, 3, 2, &nodes, err, sizeof(err)), 0);
    assert_int_equal(tn_pstate_move_begin(&ps, t, 6, 5, 0, &nodes, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "make 9 members during the move, more than 8"));
    assert_int_equal(tn_pstate_move_begin(&ps, t2, 5, 5, 0, &nodes, err, sizeof(err)), 0);
    assert_int_equal(ps.nreplicas, 7);
}

static void test_move_complete(void **state)
{
    (void)state;
    fix_t f;
    fix_moving(&f);
    char err[160];
    assert_false(tn_pstate_move_ready(&f.ps));
    tn_pstate_t was = f.ps;
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), UV_EAGAIN);
    assert_non_null(strstr(err, "not every target replica is in sync"));
    assert_memory_equal(&was, &f.ps, sizeof(was));
    cas_add(&f, 4);
    assert_true(tn_pstate_move_ready(&f.ps));
    assert_int_equal(tn_pstate_move_complete(&f.ps, 8, &f.nodes, err, sizeof(err)), TN_ENOTFOUND);
    /* The leader (1) leaves: the first eligible target ISR member leads,
     * in a new epoch. */
    was = f.ps;
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 2);
    assert_int_equal(f.ps.leader_epoch, was.leader_epoch + 1);
    assert_int_equal(f.ps.partition_epoch, was.partition_epoch + 1);
    assert_true(list_is(f.ps.replicas, f.ps.nreplicas, (const uint32_t[]){2, 4, 3, 0}));
    assert_true(isr_is(&f.ps, (const uint32_t[]){2, 3, 4, 0}));
    assert_int_equal(f.ps.ntarget, 0);
    assert_int_equal(f.ps.nold, 0);
    assert_int_equal(f.ps.move_id, 0);
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), TN_ENOTFOUND);

    /* The first target member not eligible (no live session): the next. */
    fix_moving(&f);
    cas_add(&f, 4);
    f.v[1].live = false;
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 4);
    /* No target member eligible: not yet, nothing changed. */
    fix_moving(&f);
    cas_add(&f, 4);
    f.v[1].live = f.v[2].live = f.v[3].live = false;
    was = f.ps;
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), UV_EAGAIN);
    assert_non_null(strstr(err, "no target replica may lead"));
    assert_memory_equal(&was, &f.ps, sizeof(was));

    /* A leader in the target keeps leading, in the same epoch. */
    fix_init4(&f);
    const uint32_t keep[3] = {1, 4, 3};
    assert_int_equal(tn_pstate_move_begin(&f.ps, keep, 3, 11, 10, &f.nodes, err, sizeof(err)), 0);
    cas_add(&f, 4);
    was = f.ps;
    assert_int_equal(tn_pstate_move_complete(&f.ps, 11, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 1);
    assert_int_equal(f.ps.leader_epoch, was.leader_epoch);
    assert_true(isr_is(&f.ps, (const uint32_t[]){1, 3, 4, 0}));
}

static void test_move_abort(void **state)
{
    (void)state;
    fix_t f;
    fix_moving(&f);
    char err[160];
    cas_add(&f, 4);
    /* A forced (clean) election of the new member during the move. */
    assert_int_equal(tn_pstate_force_leader(&f.ps, 4, false, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 4);
    assert_int_equal(tn_pstate_move_abort(&f.ps, 10, &f.nodes, err, sizeof(err)), TN_ENOTFOUND);
    /* Every old member without a session: none could lead, refused. */
    f.v[0].live = f.v[1].live = f.v[2].live = false;
    tn_pstate_t was = f.ps;
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), UV_EPERM);
    assert_non_null(strstr(err, "none could lead"));
    assert_memory_equal(&was, &f.ps, sizeof(was));
    /* Node 1 back: it leads again, the old list back, 4 out of the ISR. */
    f.v[0].live = true;
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 1);
    assert_int_equal(f.ps.leader_epoch, was.leader_epoch + 1);
    assert_true(list_is(f.ps.replicas, f.ps.nreplicas, (const uint32_t[]){1, 2, 3, 0}));
    assert_true(isr_is(&f.ps, (const uint32_t[]){1, 2, 3, 0}));
    assert_int_equal(f.ps.ntarget, 0);
    assert_int_equal(f.ps.move_id, 0);
    /* A leader among the old replicas stays, in the same epoch. */
    fix_init4(&f);
    const uint32_t target[3] = {2, 4, 3};
    assert_int_equal(tn_pstate_move_begin(&f.ps, target, 3, 12, 10, &f.nodes, err, sizeof(err)), 0);
    was = f.ps;
    assert_int_equal(tn_pstate_move_abort(&f.ps, 12, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 1);
    assert_int_equal(f.ps.leader_epoch, was.leader_epoch);
}

/* The ISR to the listed nodes by the leader's CAS; 0 ends. */
static void cas_set(fix_t *f, const uint32_t *nodes)
{
    tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    for (; nodes[n]; n++)
        isr[n] = (tn_pstate_member_t){nodes[n], f->v[nodes[n] - 1].incarnation};
    char err[160];
    assert_int_equal(tn_pstate_alter_isr(&f->ps, f->ps.leader, f->ps.leader_epoch,
                                         f->ps.partition_epoch, isr, n, &f->nodes, err,
                                         sizeof(err)),
                     0);
}

/* Rule 8's second refusal: an abort never leaves the acknowledged records
 * on fewer ISR and ELR copies than min_insync (or than there are). Found
 * by test_repl_sim.c's moves: an abort dropped the target member that,
 * with the leader, held them (an old member out of the ISR), and a CRC
 * failure of the leader's copy then left the partition offline for good;
 * and an abort of an offline partition dropped its only ELR member. */
static void test_move_abort_keeps_copies(void **state)
{
    (void)state;
    fix_t f;
    char err[160];
    /* 4 caught up, then 2 and 3 fell behind: 1 and 4 hold everything. */
    fix_moving(&f);
    cas_add(&f, 4);
    cas_set(&f, (const uint32_t[]){1, 4, 0});
    tn_pstate_t was = f.ps;
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), UV_EPERM);
    assert_non_null(strstr(err, "hold 1 of the 2 copies"));
    assert_memory_equal(&was, &f.ps, sizeof(was));
    /* 2 caught up again: two old copies, the abort goes. */
    cas_add(&f, 2);
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_true(isr_is(&f.ps, (const uint32_t[]){1, 2, 0}));
    /* Offline, the target member 4 the only ELR copy (1 left with a wiped
     * disk): an abort would leave no member to elect, ever. */
    fix_moving(&f);
    cas_add(&f, 4);
    cas_set(&f, (const uint32_t[]){1, 4, 0});
    f.v[0].live = false;
    assert_true(tn_pstate_fence(&f.ps, 1, 0, &f.nodes));
    assert_int_equal(f.ps.leader, 4);
    f.v[0].incarnation = 0x99;
    f.v[3].live = false;
    assert_true(tn_pstate_fence(&f.ps, 4, 0, &f.nodes));
    assert_int_equal(f.ps.leader, TN_PSTATE_NONE);
    assert_int_equal(f.ps.nisr, 0);
    assert_int_equal(f.ps.nelr, 1);
    was = f.ps;
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), UV_EPERM);
    assert_non_null(strstr(err, "hold 0 of the 1 copies"));
    assert_memory_equal(&was, &f.ps, sizeof(was));
    /* With no copy at all there is nothing to keep: allowed. */
    f.v[3].incarnation = 0x98;
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
}

/* Rule 9: a move blocks on a target member outside the ISR that the
 * controller gave up on; not on one in the ISR, an old member, or with no
 * move. */
static void test_move_blocked(void **state)
{
    (void)state;
    fix_t f;
    fix_init4(&f);
    const uint32_t gone4[1] = {4}, gone1[1] = {1}, gone23[2] = {2, 3};
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone4, 1), TN_PSTATE_NONE); /* no move */
    begin_move9(&f); /* 2, 4, 3: 4 joins, 1 leaves */
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone4, 1), 4);
    assert_int_equal(tn_pstate_move_blocked(&f.ps, NULL, 0), TN_PSTATE_NONE);
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone1, 1), TN_PSTATE_NONE);  /* old only */
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone23, 2), TN_PSTATE_NONE); /* in the ISR */
    cas_add(&f, 4);
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone4, 1), TN_PSTATE_NONE); /* in sync */
    /* Blocked, it aborts as rule 8 says: the old list back. */
    fix_moving(&f);
    char err[160];
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone4, 1), 4);
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_true(list_is(f.ps.replicas, f.ps.nreplicas, (const uint32_t[]){1, 2, 3, 0}));
    assert_int_equal(tn_pstate_move_blocked(&f.ps, gone4, 1), TN_PSTATE_NONE);
}

/* Fences, CRC marks and forced elections during a move work over the
 * whole list; a CRC mark follows its member through the list changes. */
static void test_move_with_fence_and_marks(void **state)
{
    (void)state;
    fix_t f;
    fix_moving(&f);
    char err[160];
    /* The leader (1, leaving) is fenced mid-move: the first eligible ISR
     * member in the list's order (target first) leads. */
    f.v[0].live = false;
    assert_true(tn_pstate_fence(&f.ps, 1, 0, &f.nodes));
    assert_int_equal(f.ps.leader, 2);
    assert_int_equal(f.ps.ntarget, 3); /* the move goes on */
    cas_add(&f, 4);
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 2);
    assert_true(list_is(f.ps.replicas, f.ps.nreplicas, (const uint32_t[]){2, 4, 3, 0}));

    /* A CRC mark on node 3 (index 2 of 1,2,3) made mid-move (index 2 of
     * 2,4,3,1 too) and one on node 1 before it (index 0, then 3): after
     * an abort they sit at 3's and 1's indexes of 1,2,3 again. */
    fix_init4(&f);
    assert_true(tn_pstate_mark_corrupt(&f.ps, 1, &f.nodes));
    assert_int_equal(f.ps.corrupt, 1u << 0);
    assert_int_equal(f.ps.leader, 2);
    begin_move9(&f);
    assert_int_equal(f.ps.corrupt, 1u << 3);
    assert_true(tn_pstate_mark_corrupt(&f.ps, 3, &f.nodes));
    assert_int_equal(f.ps.corrupt, (1u << 3) | (1u << 2));
    assert_int_equal(tn_pstate_move_abort(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.corrupt, (1u << 0) | (1u << 2));
    assert_int_equal(f.ps.leader, 2);
    assert_true(isr_is(&f.ps, (const uint32_t[]){2, 0}));

    /* An unclean forced election of the joining member, then the move
     * waits for the others to be added back. */
    fix_moving(&f);
    assert_int_equal(tn_pstate_force_leader(&f.ps, 4, false, &f.nodes, err, sizeof(err)), UV_EPERM);
    assert_int_equal(tn_pstate_force_leader(&f.ps, 4, true, &f.nodes, err, sizeof(err)), 0);
    assert_true(isr_is(&f.ps, (const uint32_t[]){4, 0}));
    assert_false(tn_pstate_move_ready(&f.ps));
    cas_add(&f, 2);
    cas_add(&f, 3);
    assert_int_equal(tn_pstate_move_complete(&f.ps, 9, &f.nodes, err, sizeof(err)), 0);
    assert_int_equal(f.ps.leader, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_refusals),
        cmocka_unit_test(test_alter_isr_table),
        cmocka_unit_test(test_fence_table),
        cmocka_unit_test(test_elect_from_elr),
        cmocka_unit_test(test_wiped_elr_member_never_leads),
        cmocka_unit_test(test_force_leader),
        cmocka_unit_test(test_rebalance_and_corrupt),
        cmocka_unit_test(test_move_begin_table),
        cmocka_unit_test(test_move_begin_too_many_together),
        cmocka_unit_test(test_move_complete),
        cmocka_unit_test(test_move_abort),
        cmocka_unit_test(test_move_abort_keeps_copies),
        cmocka_unit_test(test_move_blocked),
        cmocka_unit_test(test_move_with_fence_and_marks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
