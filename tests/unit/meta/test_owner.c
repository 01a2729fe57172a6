/* Tests of the owner rules the metastore's apply enforces (meta/owner.h):
 * a user's deletion gives its topics to the root user (and an older
 * build's entry does not), and so does a user's creation marked fresh
 * for topics an older deletion left; a dead-letter name's create is decided on the
 * state the entry is applied to (CHECK refuses one whose parent someone
 * else owns, FOLLOW takes the parent's owner), whatever the proposing
 * door's replica knew; an owner change carries the topic's dead-letter
 * topics; the codec of both marks, and snapshots keeping the outcome. */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/name.h"
#include "meta/owner.h"
#include "meta/state.h"

#include <stdio.h>
#include <string.h>

static tn_meta_cmd_t topic(const char *name, const char *owner, uint8_t rule)
{
    tn_meta_cmd_t c = tu_meta_state_topic_cmd(name, 1);
    c.topic.native = true;
    snprintf(c.topic.owner, sizeof(c.topic.owner), "%s", owner);
    c.owner_rule = rule;
    return c;
}

static tn_meta_cmd_t user(const char *name, bool root)
{
    tn_meta_cmd_t c = {.type = TN_MC_USER_PUT, .if_absent = true, .user.root = root};
    snprintf(c.user.name, sizeof(c.user.name), "%s", name);
    snprintf(c.user.hash, sizeof(c.user.hash), "$2b$10$xxxxxxxxxxxxxxxxxxxxxx");
    return c;
}

static tn_meta_cmd_t user_delete(const char *name, bool disown)
{
    tn_meta_cmd_t c = {.type = TN_MC_USER_DELETE, .disown = disown};
    snprintf(c.user.name, sizeof(c.user.name), "%s", name);
    return c;
}

/* The command through its encoding, as every replica applies it. */
static int apply(tn_meta_state_t *s, tn_meta_cmd_t c)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    tn_meta_cmd_t d;
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), 0);
    assert_int_equal(used, tn_buf_size(&b));
    assert_int_equal(d.owner_rule, c.owner_rule);
    assert_int_equal(d.disown, c.disown);
    assert_int_equal(d.fresh, c.fresh);
    int rc = tn_meta_state_apply(s, &d);
    tn_meta_cmd_fini(&d);
    tn_buf_fini(&b);
    return rc;
}

/* An update of topic t to owner, made from its record as it is now. */
static int change_owner(tn_meta_state_t *s, const char *t, const char *to, uint8_t rule)
{
    tn_meta_cmd_t c = topic(t, to, rule);
    c.if_absent = false;
    c.if_unchanged = true;
    c.expect = tn_meta_topic_fingerprint(&tn_meta_topic_find(s, t)->rec);
    return apply(s, c);
}

static const char *owner(const tn_meta_state_t *s, const char *t)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, t);
    assert_non_null(e);
    return e->rec.owner;
}

static void test_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    /* CHECK and FOLLOW are for a create, not together; CARRY for an update. */
    tn_meta_cmd_t c = topic("t.c.DLQ", "u", TN_META_OWN_CHECK | TN_META_OWN_FOLLOW);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = topic("t.c.DLQ", "u", TN_META_OWN_CARRY);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = topic("t.c.DLQ", "u", 8);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c.if_absent = false;
    c.owner_rule = TN_META_OWN_FOLLOW;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);

    /* The rule byte is the payload's last; damage there is refused. */
    c = topic("t.c.DLQ", "u", TN_META_OWN_CHECK);
    c.topic.replication_factor = 3;
    c.topic.min_insync = 2;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&b);
    size_t last = TN_META_HDR + tn_get_u32(p + 4) - 1, used;
    tn_meta_cmd_t d;
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), 0);
    assert_int_equal(d.owner_rule, TN_META_OWN_CHECK);
    assert_int_equal(d.topic.replication_factor, 3);
    tn_meta_cmd_fini(&d);
    p[last] = 0;
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    p[last] = TN_META_OWN_CARRY; /* on a create */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_reset(&b);

    /* USER_DELETE: the older encoding (no flags byte) reads as keeping
     * the topics' owners; another flags byte is refused. */
    c = user_delete("u", false);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    size_t older = tn_buf_size(&b);
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), older, &d, &used), 0);
    assert_false(d.disown);
    tn_buf_reset(&b);
    c = user_delete("u", true);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    p = (unsigned char *)tn_buf_data(&b);
    assert_int_equal(tn_get_u32(p + 4), 2 + 1 + 1); /* name, then the flags byte */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), 0);
    assert_true(d.disown);
    p[TN_META_HDR + 3] = 2;
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_reset(&b);

    /* USER_PUT fresh: only a create's (if_absent). */
    c = user("u", false);
    c.fresh = true;
    c.if_absent = false;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c.if_unchanged = true;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    c = user("u", false);
    c.fresh = true;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    p = (unsigned char *)tn_buf_data(&b);
    assert_int_equal(p[TN_META_HDR], 1 | TN_META_USER_FRESH);
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), 0);
    assert_true(d.fresh && d.if_absent);
    tn_meta_user_fini(&d.user);
    p[TN_META_HDR] = TN_META_USER_FRESH; /* without if_absent */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);
}

/* A user's deletion: its topics (its dead-letter topics among them) go to
 * the root user in the same apply; a user made again under the name owns
 * nothing. An older build's entry keeps them, as that build did. */
static void test_user_delete_disowns(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, user("admin", true)), 0);
    assert_int_equal(apply(&s, user("u", false)), 0);
    assert_int_equal(apply(&s, user("v", false)), 0);
    assert_int_equal(apply(&s, topic("t", "u", 0)), 0);
    assert_int_equal(apply(&s, topic("t.default.DLQ", "u", TN_META_OWN_CHECK)), 0);
    assert_int_equal(apply(&s, topic("x", "v", 0)), 0);
    assert_int_equal(apply(&s, topic("open", "", 0)), 0);
    assert_int_equal(apply(&s, user_delete("u", true)), 0);
    assert_string_equal(owner(&s, "t"), "admin");
    assert_string_equal(owner(&s, "t.default.DLQ"), "admin");
    assert_string_equal(owner(&s, "x"), "v");
    assert_string_equal(owner(&s, "open"), "");
    assert_int_equal(apply(&s, user("u", false)), 0);
    assert_string_equal(owner(&s, "t"), "admin");

    /* The outcome is in the snapshot. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    assert_string_equal(owner(&r, "t"), "admin");
    assert_string_equal(owner(&r, "t.default.DLQ"), "admin");
    tn_meta_state_fini(&r);

    /* An older build's deletion leaves v's topic v's (and so does a
     * create of v's that lands after v's deletion: the door checked v
     * before). A user made again under the name (fresh) takes over none
     * of them: they pass to the root user as its deletion would have
     * given them. An older build's user create (not fresh) does not. */
    assert_int_equal(apply(&s, user_delete("v", false)), 0);
    assert_string_equal(owner(&s, "x"), "v");
    assert_int_equal(apply(&s, topic("y", "v", 0)), 0);
    tn_meta_cmd_t v = user("v", false);
    v.fresh = true;
    assert_int_equal(apply(&s, v), 0);
    assert_string_equal(owner(&s, "x"), "admin");
    assert_string_equal(owner(&s, "y"), "admin");
    assert_int_equal(apply(&s, user_delete("v", false)), 0);
    assert_int_equal(apply(&s, topic("z", "v", 0)), 0);
    assert_int_equal(apply(&s, user("v", false)), 0);
    assert_string_equal(owner(&s, "z"), "v");
    /* A copy of the fresh create sent again finds the user: nothing more. */
    v.again = true;
    assert_int_equal(apply(&s, v), 0);
    assert_string_equal(owner(&s, "z"), "v");
    /* Refused deletions change nothing: the root user, a missing user. */
    assert_int_equal(apply(&s, user_delete("admin", true)), UV_EPERM);
    assert_int_equal(apply(&s, user_delete("nobody", true)), TN_ENOTFOUND);
    assert_string_equal(owner(&s, "t"), "admin");
    tn_meta_state_fini(&s);

    /* No root user recorded: the topics lose their owner. */
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, user("u", false)), 0);
    assert_int_equal(apply(&s, topic("t", "u", 0)), 0);
    assert_int_equal(apply(&s, user_delete("u", true)), 0);
    assert_string_equal(owner(&s, "t"), "");
    tn_meta_state_fini(&s);
}

/* The race of a door whose replica has not applied the parent yet: it
 * proposes the dead-letter name's create with its caller as the owner;
 * the apply, on the state that has the parent, refuses it (CHECK) or
 * gives it the parent's owner (FOLLOW: an admin, the engine). */
static void test_dead_letter_create_decided_at_apply(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, topic("orders", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.default.DLQ", "mallory", TN_META_OWN_CHECK)),
                     UV_EPERM);
    assert_null(tn_meta_topic_find(&s, "orders.default.DLQ"));
    /* A candidate parent through a channel with dots, and a parent with
     * no owner among the candidates, decide the same way. */
    assert_int_equal(apply(&s, topic("orders.a", "", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.a.b.DLQ", "mallory", TN_META_OWN_CHECK)), UV_EPERM);
    assert_int_equal(apply(&s, topic("orders.default.DLQ", "alice", TN_META_OWN_CHECK)), 0);
    assert_string_equal(owner(&s, "orders.default.DLQ"), "alice");
    assert_int_equal(apply(&s, topic("orders.other.DLQ", "admin", TN_META_OWN_FOLLOW)), 0);
    assert_string_equal(owner(&s, "orders.other.DLQ"), "alice");
    /* A name no owned topic is a parent of: the record's owner stays. */
    assert_int_equal(apply(&s, topic("free.c.DLQ", "mallory", TN_META_OWN_CHECK)), 0);
    assert_int_equal(apply(&s, topic("free2.c.DLQ", "admin", TN_META_OWN_FOLLOW)), 0);
    assert_string_equal(owner(&s, "free.c.DLQ"), "mallory");
    assert_string_equal(owner(&s, "free2.c.DLQ"), "admin");
    /* A copy sent again (meta.h) finds the record FOLLOW made: 0. */
    tn_meta_cmd_t again = topic("orders.other.DLQ", "admin", TN_META_OWN_FOLLOW);
    again.again = true;
    assert_int_equal(apply(&s, again), 0);
    /* An older build's entry (no rule) is applied as that build did. */
    assert_int_equal(apply(&s, topic("orders.old.DLQ", "mallory", 0)), 0);
    assert_string_equal(owner(&s, "orders.old.DLQ"), "mallory");

    /* The hashed form of a long topic's dead-letter name. */
    char longname[TN_NAME_MAX + 1], hashed[TN_NAME_MAX + 1];
    memset(longname, 'l', 248);
    longname[248] = '\0';
    snprintf(hashed, sizeof(hashed), "%.*s.0badcafe.DLQ", TN_NAME_DLQ_PREFIX, longname);
    assert_true(tn_meta_dlq_names(hashed, longname));
    assert_int_equal(apply(&s, topic(longname, "alice", 0)), 0);
    assert_int_equal(apply(&s, topic(hashed, "mallory", TN_META_OWN_CHECK)), UV_EPERM);
    assert_int_equal(apply(&s, topic(hashed, "admin", TN_META_OWN_FOLLOW)), 0);
    assert_string_equal(owner(&s, hashed), "alice");
    tn_meta_state_fini(&s);
}

/* An owner change carries the topic's dead-letter topics that had the
 * old owner, in the same apply; others stay as they are. */
static void test_owner_change_carries_dead_letter_topics(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, topic("orders", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.default.DLQ", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.x.y.DLQ", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.ch.DLQ", "carol", 0)), 0);
    assert_int_equal(apply(&s, topic("ordersx.default.DLQ", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.nodlq", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("orders.none.DLQ", "", 0)), 0);
    assert_int_equal(change_owner(&s, "orders", "bob", TN_META_OWN_CARRY), 0);
    assert_string_equal(owner(&s, "orders"), "bob");
    assert_string_equal(owner(&s, "orders.default.DLQ"), "bob");
    assert_string_equal(owner(&s, "orders.x.y.DLQ"), "bob");
    assert_string_equal(owner(&s, "orders.ch.DLQ"), "carol");
    assert_string_equal(owner(&s, "ordersx.default.DLQ"), "alice");
    assert_string_equal(owner(&s, "orders.nodlq"), "alice");
    assert_string_equal(owner(&s, "orders.none.DLQ"), "");
    /* Given back to no one: so are they. */
    assert_int_equal(change_owner(&s, "orders", "", TN_META_OWN_CARRY), 0);
    assert_string_equal(owner(&s, "orders.default.DLQ"), "");
    /* An older build's change (no rule) leaves them. */
    assert_int_equal(change_owner(&s, "orders", "dave", 0), 0);
    assert_string_equal(owner(&s, "orders.default.DLQ"), "");
    tn_meta_state_fini(&s);
}

/* A dead-letter name has more than one candidate parent (rule 1): an
 * owner change carries only those whose owner a create would take from
 * the topic changed (the longest owned candidate, or the topic itself),
 * not one a longer candidate owned by another, or by the same old owner,
 * decides: that one's dead letters (and access) stay with it. */
static void test_owner_change_carries_only_its_own(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, topic("a", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("a.b", "alice", 0)), 0);
    assert_int_equal(apply(&s, topic("a.b.c.DLQ", "alice", TN_META_OWN_FOLLOW)), 0);
    assert_int_equal(apply(&s, topic("a.z.DLQ", "alice", TN_META_OWN_FOLLOW)), 0);
    assert_int_equal(change_owner(&s, "a", "bob", TN_META_OWN_CARRY), 0);
    assert_string_equal(owner(&s, "a.z.DLQ"), "bob");
    assert_string_equal(owner(&s, "a.b.c.DLQ"), "alice"); /* a.b's, still alice's */
    /* An owner-less dead-letter topic (an older release's) whose access
     * follows an owned longer candidate is not adopted with the shorter. */
    assert_int_equal(apply(&s, topic("p", "", 0)), 0);
    assert_int_equal(apply(&s, topic("p.q", "carol", 0)), 0);
    assert_int_equal(apply(&s, topic("p.q.c.DLQ", "", 0)), 0);
    assert_int_equal(apply(&s, topic("p.c.DLQ", "", 0)), 0);
    assert_int_equal(change_owner(&s, "p", "bob", TN_META_OWN_CARRY), 0);
    assert_string_equal(owner(&s, "p.c.DLQ"), "bob");
    assert_string_equal(owner(&s, "p.q.c.DLQ"), "");
    char parent[TN_NAME_MAX + 1];
    assert_string_equal(tn_meta_dlq_parent_owner(&s, "p.q.c.DLQ", parent), "carol");

    /* The hashed form: the candidate in s's order decides, as at create. */
    char l1[TN_NAME_MAX + 1], l2[TN_NAME_MAX + 1], hashed[TN_NAME_MAX + 1];
    memset(l1, 'l', 248);
    l1[248] = '\0';
    memcpy(l2, l1, sizeof(l1));
    l2[247] = 'm';
    snprintf(hashed, sizeof(hashed), "%.*s.0badcafe.DLQ", TN_NAME_DLQ_PREFIX, l1);
    assert_int_equal(apply(&s, topic(l1, "alice", 0)), 0);
    assert_int_equal(apply(&s, topic(l2, "alice", 0)), 0);
    assert_int_equal(apply(&s, topic(hashed, "alice", TN_META_OWN_FOLLOW)), 0);
    assert_int_equal(change_owner(&s, l2, "bob", TN_META_OWN_CARRY), 0);
    assert_string_equal(owner(&s, hashed), "alice");
    assert_int_equal(change_owner(&s, l1, "bob", TN_META_OWN_CARRY), 0);
    assert_string_equal(owner(&s, hashed), "bob");
    tn_meta_state_fini(&s);
}

/* A snapshot's records restore as written: a user record marked fresh
 * (no snapshot writes one: damage) passes no topic to the root user, as
 * a topic record's owner rule applies none. */
static void test_snapshot_user_fresh_restores_as_written(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, user("admin", true)), 0);
    assert_int_equal(apply(&s, user("v", false)), 0);
    assert_int_equal(apply(&s, topic("x", "v", 0)), 0);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    /* v's record (after the topics): its condition byte made fresh. */
    unsigned char *p = (unsigned char *)tn_buf_data(&b);
    size_t at = 24, len = tn_buf_size(&b), used;
    bool marked = false;
    while (at < len && !marked) {
        tn_meta_cmd_t d;
        assert_int_equal(tn_meta_cmd_decode(p + at, len - at, &d, &used), 0);
        if (d.type == TN_MC_USER_PUT && strcmp(d.user.name, "v") == 0) {
            assert_int_equal(p[at + TN_META_HDR], 0);
            p[at + TN_META_HDR] = 1 | TN_META_USER_FRESH;
            marked = true;
        }
        tn_meta_cmd_fini(&d);
        at += used;
    }
    assert_true(marked);
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    assert_int_equal(tn_meta_state_restore(&r, p, len), 0);
    assert_non_null(tn_meta_user_find(&r, "v"));
    assert_string_equal(owner(&r, "x"), "v");
    tn_meta_state_fini(&r);
    tn_buf_fini(&b);
    tn_meta_state_fini(&s);
}

/* The access generation (state.h access_gen) moves with every topic or
 * user command, applied or refused, and with a restore; channels and
 * members leave it, so an NSQ subscription found open is not asked
 * again for them. */
static void test_access_gen(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    uint64_t g = s.access_gen;
    assert_int_equal(tn_meta_state_apply(&s, &(tn_meta_cmd_t){.type = TN_MC_NOOP}), 0);
    tn_meta_cmd_t m = tu_meta_rec_cmd(1, 0, 0);
    assert_int_equal(tn_meta_state_apply(&s, &m), 0);
    assert_true(s.access_gen == g);
    tn_meta_cmd_t c = topic("t", "", 0);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_true(s.access_gen == ++g);
    tn_meta_cmd_t ch = {.type = TN_MC_CHANNEL_PUT};
    snprintf(ch.topic.name, sizeof(ch.topic.name), "t");
    snprintf(ch.channel, sizeof(ch.channel), "c");
    assert_int_equal(tn_meta_state_apply(&s, &ch), 0);
    assert_true(s.access_gen == g);
    c = topic("t", "alice", 0); /* given an owner */
    c.if_absent = false;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_true(s.access_gen == ++g);
    c = user("alice", false);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_true(s.access_gen == ++g);
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_EEXIST); /* refused: moves anyway */
    assert_true(s.access_gen == ++g);
    c = user_delete("alice", false);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_true(s.access_gen == ++g);
    c = (tn_meta_cmd_t){.type = TN_MC_TOPIC_DELETE};
    snprintf(c.topic.name, sizeof(c.topic.name), "t");
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_true(s.access_gen == ++g);
    /* A restore replaces the state: it moves, and is not restored. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    assert_int_equal(tn_meta_state_restore(&s, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_true(s.access_gen == ++g);
    tn_buf_fini(&b);
    tn_meta_state_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_user_delete_disowns),
        cmocka_unit_test(test_dead_letter_create_decided_at_apply),
        cmocka_unit_test(test_owner_change_carries_dead_letter_topics),
        cmocka_unit_test(test_owner_change_carries_only_its_own),
        cmocka_unit_test(test_snapshot_user_fresh_restores_as_written),
        cmocka_unit_test(test_access_gen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
