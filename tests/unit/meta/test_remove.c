/* Tests of removing a member from the metastore's state machine
 * (MEMBER_REMOVE, meta/state.h "Removed members"): its codec; the
 * refusals (partitions still held, replicated or factor-1; the floor of
 * three members; an unknown member; a member that registered with another
 * data directory since the door looked), each changing nothing; the
 * tombstone that keeps the removed data directory out while an empty one
 * reusing the id registers as a new member; and snapshots that keep the
 * tombstones. Commands drive the state machine as the Raft log would. */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/err.h"
#include "meta/state.h"

#include <string.h>

static tn_meta_cmd_t remove_cmd(uint64_t id, uint64_t incarnation, int64_t ms)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REMOVE;
    c.member.id = id;
    c.member.incarnation = incarnation;
    c.removed_ms = ms;
    return c;
}

static int apply(tn_meta_state_t *s, tn_meta_cmd_t c)
{
    return tn_meta_state_apply(s, &c);
}

/* n members 1..n, incarnations 100 + id. */
static void members(tn_meta_state_t *s, uint64_t n)
{
    tn_meta_state_init(s);
    for (uint64_t id = 1; id <= n; id++)
        assert_int_equal(apply(s, tu_meta_rec_cmd(id, 100 + id, 0)), 0);
}

static void expect_snapshot(const tn_meta_state_t *s, tn_buf_t *out)
{
    tn_buf_init(out);
    assert_int_equal(tn_meta_state_snapshot(s, out), 0);
}

static void test_codec(void **state)
{
    (void)state;
    tn_meta_cmd_t c = remove_cmd(4, 0x1234, 1700000000123), d;
    tn_buf_t b, again;
    tn_buf_init(&b);
    tn_buf_init(&again);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    assert_int_equal(tn_buf_size(&b) % 8, 0);
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), 0);
    assert_int_equal(used, tn_buf_size(&b));
    assert_int_equal(d.type, TN_MC_MEMBER_REMOVE);
    assert_true(d.member.id == 4);
    assert_true(d.member.incarnation == 0x1234);
    assert_true(d.removed_ms == 1700000000123);
    for (size_t n = 0; n < tn_buf_size(&b); n++) {
        tn_meta_cmd_t x;
        assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), n, &x, &used), TN_ESHORT);
    }
    assert_int_equal(tn_meta_cmd_encode(&d, &again), 0);
    assert_memory_equal(tn_buf_data(&again), tn_buf_data(&b), tn_buf_size(&b));
    /* Id 0 is never encoded, and refused when read. */
    tn_buf_reset(&again);
    c.member.id = 0;
    assert_int_equal(tn_meta_cmd_encode(&c, &again), UV_EINVAL);
    unsigned char bytes[64];
    assert_true(tn_buf_size(&b) <= sizeof(bytes));
    memcpy(bytes, tn_buf_data(&b), tn_buf_size(&b));
    memset(bytes + TN_META_HDR, 0, 8);
    assert_int_equal(tn_meta_cmd_decode(bytes, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);
    tn_buf_fini(&again);
}

/* A member that holds a replica of a replicated partition, or a factor-1
 * partition, stays; the refusal changes nothing. */
static void test_refused_while_holding(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members(&s, 4);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("r", 4, 3, 2)), 0);
    uint64_t held = 0;
    assert_int_equal(tn_meta_state_remove_check(&s, 4, &held), UV_EBUSY);
    assert_true(held == 3); /* r/1, r/2, r/3: members 2..4, 3..1, 4..2 */
    assert_true(tn_meta_state_held(&s, 4) == 3);
    tn_buf_t before, after;
    expect_snapshot(&s, &before);
    assert_int_equal(apply(&s, remove_cmd(4, 104, 1)), UV_EBUSY);
    expect_snapshot(&s, &after);
    assert_int_equal(tn_buf_size(&after), tn_buf_size(&before));
    assert_memory_equal(tn_buf_data(&after), tn_buf_data(&before), tn_buf_size(&before));
    assert_null(tn_meta_state_removed(&s, 4));
    tn_buf_fini(&before);
    tn_buf_fini(&after);
    tn_meta_state_fini(&s);
    /* Factor 1: partition 3 of "one" is member 4's alone. */
    members(&s, 4);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 4, 1, 1)), 0);
    assert_int_equal(tn_meta_state_remove_check(&s, 4, &held), UV_EBUSY);
    assert_true(held == 1);
    assert_int_equal(apply(&s, remove_cmd(4, 0, 1)), UV_EBUSY);
    assert_non_null(tn_meta_member_find(&s, 4));
    tn_meta_state_fini(&s);
}

/* An empty member goes; its tombstone stays; the floor of three holds;
 * unknown members and an incarnation that changed are refused. */
static void test_remove_and_floor(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members(&s, 4);
    assert_int_equal(apply(&s, remove_cmd(9, 0, 1)), TN_ENOTFOUND);
    assert_int_equal(apply(&s, remove_cmd(4, 999, 1)), TN_ECHANGED);
    assert_non_null(tn_meta_member_find(&s, 4));
    assert_int_equal(apply(&s, remove_cmd(4, 104, 77)), 0);
    assert_null(tn_meta_member_find(&s, 4));
    assert_int_equal(s.nmembers, 3);
    const tn_meta_removed_t *t = tn_meta_state_removed(&s, 4);
    assert_non_null(t);
    assert_true(t->incarnation == 104);
    assert_true(t->removed_ms == 77);
    /* The partition states see three members now: a new replicated topic
     * is placed on them only. */
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("r", 3, 3, 2)), 0);
    assert_true(tn_meta_state_held(&s, 4) == 0);
    for (uint64_t id = 1; id <= 3; id++)
        assert_true(tn_meta_state_held(&s, id) == 3);
    assert_int_equal(apply(&s, remove_cmd(4, 0, 1)), TN_ENOTFOUND); /* gone already */
    /* Three left: the metastore keeps three voters. */
    assert_int_equal(apply(&s, tu_meta_topic_cmd("gone", 1)), 0);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(5, 105, 0)), 0);
    assert_int_equal(s.nmembers, 4);
    assert_int_equal(apply(&s, remove_cmd(5, 105, 2)), 0); /* holds nothing yet */
    uint64_t held = 0;
    assert_int_equal(tn_meta_state_remove_check(&s, 1, &held), UV_EPERM); /* the floor first */
    assert_true(held == 4);                                               /* r/0..2, gone/0 */
    tn_meta_state_fini(&s);
    members(&s, 3);
    assert_int_equal(tn_meta_state_remove_check(&s, 3, NULL), UV_EPERM);
    assert_int_equal(apply(&s, remove_cmd(3, 103, 1)), UV_EPERM);
    assert_int_equal(s.nmembers, 3);
    tn_meta_state_fini(&s);
    /* Two may become one; the last one never goes. */
    members(&s, 2);
    assert_int_equal(apply(&s, remove_cmd(2, 102, 1)), 0);
    assert_int_equal(apply(&s, remove_cmd(1, 101, 1)), UV_EPERM);
    assert_int_equal(s.nmembers, 1);
    tn_meta_state_fini(&s);
}

/* The removed data directory never registers again (nor a registration
 * that names none); an empty one reusing the id is a new member. */
static void test_tombstone_and_reuse(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members(&s, 4);
    assert_int_equal(apply(&s, remove_cmd(4, 104, 5)), 0);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(4, 104, 0)), UV_EPERM);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(4, 0, 0)), UV_EPERM);
    assert_null(tn_meta_member_find(&s, 4));
    assert_int_equal(s.nmembers, 3);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(4, 4444, 0)), 0);
    const tn_meta_member_t *m = tn_meta_member_find(&s, 4);
    assert_non_null(m);
    assert_true(m->incarnation == 4444);
    assert_int_equal(m->status, TN_MEMBER_ALIVE);
    assert_null(tn_meta_state_removed(&s, 4));
    /* Removed again, the newer directory's incarnation is the tombstone's. */
    assert_int_equal(apply(&s, remove_cmd(4, 4444, 6)), 0);
    assert_true(tn_meta_state_removed(&s, 4)->incarnation == 4444);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(4, 104, 0)), 0); /* an older one is not it */
    tn_meta_state_fini(&s);
}

/* Tombstones go into the snapshot (after the members) and come back. */
static void test_snapshot(void **state)
{
    (void)state;
    tn_meta_state_t s, r;
    members(&s, 5);
    assert_int_equal(apply(&s, remove_cmd(5, 105, 11)), 0);
    assert_int_equal(apply(&s, remove_cmd(2, 102, 12)), 0);
    tu_meta_state_reload(&s, &r);
    assert_int_equal(r.nmembers, 3);
    assert_int_equal(r.nremoved, 2);
    assert_true(tn_meta_state_removed(&r, 2)->incarnation == 102);
    assert_true(tn_meta_state_removed(&r, 5)->removed_ms == 11);
    tn_buf_t a, b;
    expect_snapshot(&s, &a);
    expect_snapshot(&r, &b);
    assert_int_equal(tn_buf_size(&a), tn_buf_size(&b));
    assert_memory_equal(tn_buf_data(&a), tn_buf_data(&b), tn_buf_size(&a));
    tn_buf_fini(&a);
    tn_buf_fini(&b);
    /* The restored state refuses what the original does. */
    assert_int_equal(apply(&r, tu_meta_rec_cmd(2, 102, 0)), UV_EPERM);
    assert_int_equal(apply(&r, tu_meta_rec_cmd(5, 555, 0)), 0);
    assert_null(tn_meta_state_removed(&r, 5));
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_refused_while_holding),
        cmocka_unit_test(test_remove_and_floor),
        cmocka_unit_test(test_tombstone_and_reuse),
        cmocka_unit_test(test_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
