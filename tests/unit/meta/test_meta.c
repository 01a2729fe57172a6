/* Tests of the metastore: the command codec (round trips, refusals of
 * unknown versions and types, damaged input), the state machine's answers,
 * snapshots, and the libraft replica in a temporary directory: proposals,
 * restart from the log, restart from a snapshot plus the log. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "meta/meta.h"
#include "meta/room.h"

#include <raft.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tn_meta_cmd_t topic_cmd(const char *name, bool if_absent)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_PUT;
    c.if_absent = if_absent;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.topic.partitions = 3;
    c.topic.retention_ms = 7 * 24 * 3600 * 1000LL;
    c.topic.visibility_timeout_ms = 30000;
    c.topic.max_inflight = 1024;
    c.topic.max_acked_ahead = 1024;
    c.topic.created_at_ms = 1700000000000LL;
    snprintf(c.topic.owner, sizeof(c.topic.owner), "alice");
    c.topic.replication_factor = 1; /* what a decode gives a factor-1 topic */
    c.topic.min_insync = 1;
    return c;
}

static tn_meta_cmd_t delete_cmd(uint8_t type, const char *name)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    if (type == TN_MC_USER_DELETE)
        snprintf(c.user.name, sizeof(c.user.name), "%s", name);
    else
        snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    return c;
}

static char *pat(const char *s)
{
    return tn_strdup(s);
}

/* A user with two grants; owns its grants (tn_meta_cmd_fini). */
static tn_meta_cmd_t user_cmd(const char *name)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_USER_PUT;
    snprintf(c.user.name, sizeof(c.user.name), "%s", name);
    snprintf(c.user.hash, sizeof(c.user.hash),
             "$2b$10$abcdefghijklmnopqrstuuFh2pMwO6Q6Qy0b1S8y9cX3Y6oEo1Y2");
    c.user.created_at_ms = c.user.updated_at_ms = 1700000000000LL;
    c.user.ngrants = 2;
    c.user.grants = tn_calloc(2, sizeof(*c.user.grants));
    c.user.grants[0].action = TN_GRANT_PRODUCE;
    c.user.grants[0].npatterns = 2;
    c.user.grants[0].patterns = tn_calloc(2, sizeof(char *));
    c.user.grants[0].patterns[0] = pat("orders*");
    c.user.grants[0].patterns[1] = pat("*");
    c.user.grants[1].action = TN_GRANT_ADMIN;
    return c;
}

static void roundtrip(const tn_meta_cmd_t *c, tn_meta_cmd_t *out)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(c, &b), 0);
    assert_int_equal(tn_buf_size(&b) % 8, 0);
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), out, &used), 0);
    assert_int_equal(used, tn_buf_size(&b));
    /* Every shorter prefix is incomplete, never misread. */
    for (size_t n = 0; n < tn_buf_size(&b); n += 3) {
        tn_meta_cmd_t x;
        int rc = tn_meta_cmd_decode(tn_buf_data(&b), n, &x, &used);
        assert_int_equal(rc, TN_ESHORT);
    }
    tn_buf_fini(&b);
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    tn_meta_cmd_t c = topic_cmd("orders.eu", true), d;
    c.topic.delivery_mode = TN_DELIVERY_TTL_DISCARD;
    c.topic.ttl_ms = 60000;
    c.topic.durability = 1;
    c.topic.max_attempts = 5;
    snprintf(c.topic.parent, sizeof(c.topic.parent), "orders");
    c.topic.fanout_delay_ms = 1000;
    c.topic.attach_epoch = 0x0123456789abcdefULL;
    c.topic.native = true;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_TOPIC_PUT);
    assert_true(d.if_absent);
    assert_memory_equal(&d.topic, &c.topic, sizeof(c.topic));
    tn_meta_cmd_fini(&d);
    c.if_absent = false; /* each flag on its own */
    roundtrip(&c, &d);
    assert_false(d.if_absent);
    assert_true(d.topic.native);
    tn_meta_cmd_fini(&d);

    tn_meta_cmd_t u = user_cmd("bob");
    u.user.root = true;
    roundtrip(&u, &d);
    assert_string_equal(d.user.name, "bob");
    assert_string_equal(d.user.hash, u.user.hash);
    assert_true(d.user.root);
    assert_int_equal(d.user.ngrants, 2);
    assert_int_equal(d.user.grants[0].action, TN_GRANT_PRODUCE);
    assert_int_equal(d.user.grants[0].npatterns, 2);
    assert_string_equal(d.user.grants[0].patterns[1], "*");
    assert_int_equal(d.user.grants[1].action, TN_GRANT_ADMIN);
    assert_int_equal(d.user.grants[1].npatterns, 0);
    tn_meta_cmd_fini(&d);
    tn_meta_cmd_fini(&u);

    tn_meta_cmd_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.type = TN_MC_CHANNEL_PUT;
    snprintf(ch.topic.name, sizeof(ch.topic.name), "t");
    snprintf(ch.channel, sizeof(ch.channel), "default");
    roundtrip(&ch, &d);
    assert_string_equal(d.channel, "default");
    tn_meta_cmd_fini(&d);

    tn_meta_cmd_t m;
    memset(&m, 0, sizeof(m));
    m.type = TN_MC_MEMBER_PUT;
    m.member.id = 7;
    snprintf(m.member.addr, sizeof(m.member.addr), "10.0.0.7:4153");
    roundtrip(&m, &d);
    assert_int_equal(d.member.id, 7);
    assert_string_equal(d.member.addr, "10.0.0.7:4153");
}

static void test_codec_refusals(void **state)
{
    (void)state;
    tn_meta_cmd_t c = topic_cmd("t", false), d;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&b);
    size_t len = tn_buf_size(&b), used;

    p[2] = 2; /* a later version */
    assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), UV_ENOTSUP);
    p[2] = 1;
    p[3] = 99; /* an unknown command */
    assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), UV_ENOTSUP);
    p[3] = TN_MC_TOPIC_PUT;
    p[0] = 'X';
    assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), TN_ECORRUPT);
    p[0] = 'T';
    /* The name's length says more than the payload holds. */
    p[TN_META_HDR + 1] = 200;
    assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), TN_ECORRUPT);
    p[TN_META_HDR + 1] = 1;
    /* A bad topic name. */
    p[TN_META_HDR + 3] = '/';
    assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), TN_ECORRUPT);
    p[TN_META_HDR + 3] = 't';
    assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), 0);
    /* Non-zero padding. */
    uint32_t payload = tn_get_u32(p + 4);
    if ((TN_META_HDR + payload) % 8 != 0) {
        p[len - 1] = 1;
        assert_int_equal(tn_meta_cmd_decode(p, len, &d, &used), TN_ECORRUPT);
        p[len - 1] = 0;
    }
    /* Zero partitions. */
    tn_meta_cmd_t z = topic_cmd("t", false);
    z.topic.partitions = 0;
    tn_buf_reset(&b);
    assert_int_equal(tn_meta_cmd_encode(&z, &b), 0);
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    /* A name too long to encode. */
    tn_meta_cmd_t big;
    memset(&big, 0, sizeof(big));
    big.type = TN_MC_MEMBER_PUT;
    big.member.id = 1;
    memset(big.member.addr, 'a', TN_META_ADDR_MAX);
    tn_buf_reset(&b);
    assert_int_equal(tn_meta_cmd_encode(&big, &b), 0);
    tn_meta_cmd_t bad_user = user_cmd("no spaces allowed");
    tn_buf_reset(&b);
    assert_int_equal(tn_meta_cmd_encode(&bad_user, &b), 0);
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_meta_cmd_fini(&bad_user);
    tn_buf_fini(&b);
}

static void test_state_answers(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    const char *names[] = {"m", "a", "z", "b"};
    for (size_t i = 0; i < 4; i++) {
        tn_meta_cmd_t c = topic_cmd(names[i], true);
        assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    }
    tn_meta_cmd_t again = topic_cmd("m", true);
    assert_int_equal(tn_meta_state_apply(&s, &again), UV_EEXIST);
    again.if_absent = false;
    again.topic.partitions = 9; /* a replace keeps channels */
    tn_meta_cmd_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.type = TN_MC_CHANNEL_PUT;
    snprintf(ch.topic.name, sizeof(ch.topic.name), "m");
    snprintf(ch.channel, sizeof(ch.channel), "default");
    assert_int_equal(tn_meta_state_apply(&s, &ch), 0);
    assert_int_equal(tn_meta_state_apply(&s, &ch), 0);
    ch.if_absent = true;
    assert_int_equal(tn_meta_state_apply(&s, &ch), UV_EEXIST);
    assert_int_equal(tn_meta_state_apply(&s, &again), 0);
    assert_int_equal(tn_meta_topic_find(&s, "m")->rec.partitions, 9);
    assert_true(tn_meta_channel_exists(&s, "m", "default"));
    snprintf(ch.topic.name, sizeof(ch.topic.name), "nope");
    assert_int_equal(tn_meta_state_apply(&s, &ch), TN_ENOTFOUND);
    /* Sorted, with pages after a name. */
    assert_int_equal(s.ntopics, 4);
    assert_string_equal(s.topics[0]->rec.name, "a");
    assert_string_equal(s.topics[3]->rec.name, "z");
    assert_int_equal(tn_meta_topic_after(&s, ""), 0);
    assert_int_equal(tn_meta_topic_after(&s, "b"), 2);
    assert_int_equal(tn_meta_topic_after(&s, "c"), 2);
    tn_meta_cmd_t del = delete_cmd(TN_MC_TOPIC_DELETE, "m");
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_int_equal(tn_meta_state_apply(&s, &del), TN_ENOTFOUND);
    assert_null(tn_meta_topic_find(&s, "m"));
    /* Users move users_version. */
    tn_meta_cmd_t u = user_cmd("bob");
    uint64_t v = s.users_version;
    assert_int_equal(tn_meta_state_apply(&s, &u), 0);
    assert_true(s.users_version > v);
    u.if_absent = true;
    assert_int_equal(tn_meta_state_apply(&s, &u), UV_EEXIST);
    assert_int_equal(tn_meta_user_find(&s, "bob")->ngrants, 2);
    tn_meta_cmd_fini(&u);
    tn_meta_state_fini(&s);
}

/* The root user's invariants hold whatever a command says. */
static void test_root_invariants(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    tn_meta_cmd_t root = user_cmd("admin");
    root.user.root = true;
    assert_int_equal(tn_meta_state_apply(&s, &root), 0);
    tn_meta_cmd_t other = user_cmd("eve");
    other.user.root = true; /* a second root is refused */
    assert_int_equal(tn_meta_state_apply(&s, &other), UV_EPERM);
    other.user.root = false;
    assert_int_equal(tn_meta_state_apply(&s, &other), 0);
    /* An update of root keeps the flag and the grants, takes the hash. */
    uint16_t ngrants = tn_meta_user_find(&s, "admin")->ngrants;
    tn_meta_cmd_t upd = user_cmd("admin");
    upd.user.root = false;
    tn_meta_user_fini(&upd.user);
    snprintf(upd.user.name, sizeof(upd.user.name), "admin");
    snprintf(upd.user.hash, sizeof(upd.user.hash), "$2b$10$new");
    assert_int_equal(tn_meta_state_apply(&s, &upd), 0);
    const tn_meta_user_t *u = tn_meta_user_find(&s, "admin");
    assert_true(u->root);
    assert_int_equal(u->ngrants, ngrants);
    assert_string_equal(u->hash, "$2b$10$new");
    /* An update of another user never makes it root. */
    other.user.root = true;
    other.if_absent = false;
    assert_int_equal(tn_meta_state_apply(&s, &other), 0);
    assert_false(tn_meta_user_find(&s, "eve")->root);
    tn_meta_cmd_t del = delete_cmd(TN_MC_USER_DELETE, "admin");
    assert_int_equal(tn_meta_state_apply(&s, &del), UV_EPERM);
    snprintf(del.user.name, sizeof(del.user.name), "eve");
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    tn_meta_cmd_fini(&root);
    tn_meta_cmd_fini(&other);
    tn_meta_cmd_fini(&upd);
    tn_meta_state_fini(&s);
}

static void fill(tn_meta_state_t *s, int ntopics)
{
    for (int i = 0; i < ntopics; i++) {
        char name[32];
        snprintf(name, sizeof(name), "topic-%04d", i);
        tn_meta_cmd_t c = topic_cmd(name, false);
        assert_int_equal(tn_meta_state_apply(s, &c), 0);
        tn_meta_cmd_t ch;
        memset(&ch, 0, sizeof(ch));
        ch.type = TN_MC_CHANNEL_PUT;
        snprintf(ch.topic.name, sizeof(ch.topic.name), "%s", name);
        snprintf(ch.channel, sizeof(ch.channel), "default");
        assert_int_equal(tn_meta_state_apply(s, &ch), 0);
    }
    tn_meta_cmd_t u = user_cmd("root");
    u.user.root = true;
    assert_int_equal(tn_meta_state_apply(s, &u), 0);
    tn_meta_cmd_fini(&u);
    tn_meta_cmd_t m;
    memset(&m, 0, sizeof(m));
    m.type = TN_MC_MEMBER_PUT;
    m.member.id = 1;
    snprintf(m.member.addr, sizeof(m.member.addr), "127.0.0.1:4153");
    assert_int_equal(tn_meta_state_apply(s, &m), 0);
    m.type = TN_MC_MEMBER_DRAIN;
    m.member.draining = true;
    assert_int_equal(tn_meta_state_apply(s, &m), 0);
    m.type = TN_MC_MEMBER_PUT; /* a put keeps the draining flag */
    m.member.draining = false;
    assert_int_equal(tn_meta_state_apply(s, &m), 0);
    assert_true(s->members[0].draining);
    m.type = TN_MC_MEMBER_DRAIN;
    m.member.id = 99;
    assert_int_equal(tn_meta_state_apply(s, &m), TN_ENOTFOUND);
}

static void test_snapshot_roundtrip(void **state)
{
    (void)state;
    tn_meta_state_t s, r;
    tn_meta_state_init(&s);
    tn_meta_state_init(&r);
    fill(&s, 50);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(r.ntopics, 50);
    assert_int_equal(r.nusers, 1);
    assert_int_equal(r.nmembers, 1);
    assert_true(r.members[0].draining);
    assert_int_equal(r.users_version, s.users_version);
    assert_true(tn_meta_channel_exists(&r, "topic-0049", "default"));
    assert_true(tn_meta_user_find(&r, "root")->root);
    /* Damage anywhere is refused and leaves the state as it was. */
    char *p = tn_buf_data(&b);
    p[tn_buf_size(&b) / 2] ^= 0x40;
    int rc = tn_meta_state_restore(&r, p, tn_buf_size(&b));
    p[tn_buf_size(&b) / 2] ^= 0x40;
    if (rc != 0)
        assert_int_equal(r.ntopics, 50);
    assert_int_equal(tn_meta_state_restore(&r, p, tn_buf_size(&b) - 8), TN_ECORRUPT);
    p[3] = '2';
    assert_int_equal(tn_meta_state_restore(&r, p, tn_buf_size(&b)), UV_ENOTSUP);
    assert_int_equal(r.ntopics, 50);
    tn_buf_fini(&b);
    tn_meta_state_fini(&s);
    tn_meta_state_fini(&r);
}

/* if_unchanged: an update made from a read copy lands only while the
 * record is still that copy; the fingerprint sees every field. */
static void test_update_if_unchanged(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    tn_meta_cmd_t c = topic_cmd("t", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    const tn_meta_topic_t read = tn_meta_topic_find(&s, "t")->rec;
    uint64_t fp = tn_meta_topic_fingerprint(&read);
    /* Every field moves the fingerprint. */
    tn_meta_topic_t x = read;
    x.native = !x.native;
    assert_true(tn_meta_topic_fingerprint(&x) != fp);
    x = read;
    snprintf(x.parent, sizeof(x.parent), "p");
    assert_true(tn_meta_topic_fingerprint(&x) != fp);
    x = read;
    x.attach_epoch++;
    assert_true(tn_meta_topic_fingerprint(&x) != fp);
    x = read;
    x.retention_ms++;
    assert_true(tn_meta_topic_fingerprint(&x) != fp);

    /* Two updates from the same read: the first lands, the second is
     * refused and changes nothing. */
    tn_meta_cmd_t a = topic_cmd("t", false), b = topic_cmd("t", false), d;
    a.topic = b.topic = read;
    a.if_unchanged = b.if_unchanged = true;
    a.expect = b.expect = fp;
    a.topic.retention_ms = 1000;
    b.topic.partitions = 7;
    a.topic.native = true;
    roundtrip(&a, &d);
    assert_true(d.if_unchanged);
    assert_false(d.if_absent);
    assert_true(d.topic.native);
    assert_true(d.expect == fp);
    tn_meta_cmd_fini(&d);
    assert_int_equal(tn_meta_state_apply(&s, &a), 0);
    assert_int_equal(tn_meta_state_apply(&s, &b), TN_ECHANGED);
    assert_int_equal(tn_meta_topic_find(&s, "t")->rec.retention_ms, 1000);
    assert_int_equal(tn_meta_topic_find(&s, "t")->rec.partitions, 3);
    /* Made again from the new record, it lands. */
    b.topic = tn_meta_topic_find(&s, "t")->rec;
    b.topic.partitions = 7;
    b.expect = tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "t")->rec);
    assert_int_equal(tn_meta_state_apply(&s, &b), 0);
    assert_int_equal(tn_meta_topic_find(&s, "t")->rec.partitions, 7);
    /* Gone: not found, and not made again. */
    tn_meta_cmd_t del = delete_cmd(TN_MC_TOPIC_DELETE, "t");
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_int_equal(tn_meta_state_apply(&s, &b), TN_ENOTFOUND);
    assert_null(tn_meta_topic_find(&s, "t"));

    /* Users: a password change and a grants change from the same read. */
    tn_meta_cmd_t u = user_cmd("bob");
    assert_int_equal(tn_meta_state_apply(&s, &u), 0);
    uint64_t ufp = tn_meta_user_fingerprint(tn_meta_user_find(&s, "bob"));
    tn_meta_cmd_t pw = user_cmd("bob");
    pw.if_unchanged = true;
    pw.expect = ufp;
    snprintf(pw.user.hash, sizeof(pw.user.hash), "$2b$10$other");
    roundtrip(&pw, &d);
    assert_true(d.if_unchanged);
    assert_false(d.if_absent);
    assert_true(d.expect == ufp);
    tn_meta_cmd_fini(&d);
    tn_meta_cmd_t gr = user_cmd("bob");
    gr.if_unchanged = true;
    gr.expect = ufp;
    gr.user.grants[0].action = TN_GRANT_CONSUME;
    assert_int_equal(tn_meta_state_apply(&s, &pw), 0);
    assert_int_equal(tn_meta_state_apply(&s, &gr), TN_ECHANGED);
    assert_string_equal(tn_meta_user_find(&s, "bob")->hash, "$2b$10$other");
    assert_int_equal(tn_meta_user_find(&s, "bob")->grants[0].action, TN_GRANT_PRODUCE);

    /* if_absent with if_unchanged: refused both ways. */
    tn_buf_t buf;
    tn_buf_init(&buf);
    a.if_absent = true;
    assert_int_equal(tn_meta_cmd_encode(&a, &buf), UV_EINVAL);
    tn_buf_reset(&buf);
    a.if_absent = false;
    assert_int_equal(tn_meta_cmd_encode(&a, &buf), 0);
    tn_buf_data(&buf)[TN_META_HDR] |= 1;
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&buf), tn_buf_size(&buf), &d, &used),
                     TN_ECORRUPT);
    tn_buf_reset(&buf);
    pw.if_absent = true; /* a user's condition byte cannot say both */
    assert_int_equal(tn_meta_cmd_encode(&pw, &buf), UV_EINVAL);
    tn_buf_reset(&buf);
    pw.if_absent = false;
    assert_int_equal(tn_meta_cmd_encode(&pw, &buf), 0);
    tn_buf_data(&buf)[TN_META_HDR] = 3; /* no such condition */
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&buf), tn_buf_size(&buf), &d, &used),
                     TN_ECORRUPT);
    tn_buf_fini(&buf);
    /* A user deleted meanwhile is not brought back. */
    tn_meta_cmd_t udel = delete_cmd(TN_MC_USER_DELETE, "bob");
    assert_int_equal(tn_meta_state_apply(&s, &udel), 0);
    pw.expect = tn_meta_user_fingerprint(&pw.user);
    assert_int_equal(tn_meta_state_apply(&s, &pw), TN_ENOTFOUND);
    assert_null(tn_meta_user_find(&s, "bob"));
    tn_meta_cmd_fini(&u);
    tn_meta_cmd_fini(&pw);
    tn_meta_cmd_fini(&gr);
    tn_meta_state_fini(&s);
}

static tn_meta_cmd_t child_cmd(const char *name, const char *parent)
{
    tn_meta_cmd_t c = topic_cmd(name, false);
    snprintf(c.topic.parent, sizeof(c.topic.parent), "%s", parent);
    return c;
}

static uint32_t children(const tn_meta_state_t *s, const char *name)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, name);
    assert_non_null(e);
    return e->nchildren;
}

/* The bytes of a state's snapshot, to compare two states whole. */
static void snapshot_of(const tn_meta_state_t *s, tn_buf_t *out)
{
    tn_buf_init(out);
    assert_int_equal(tn_meta_state_snapshot(s, out), 0);
}

static void assert_same_state(const tn_meta_state_t *a, const tn_meta_state_t *b)
{
    tn_buf_t x, y;
    snapshot_of(a, &x);
    snapshot_of(b, &y);
    assert_int_equal(tn_buf_size(&x), tn_buf_size(&y));
    assert_memory_equal(tn_buf_data(&x), tn_buf_data(&y), tn_buf_size(&x));
    for (size_t i = 0; i < a->ntopics; i++)
        assert_int_equal(a->topics[i]->nchildren, b->topics[i]->nchildren);
    tn_buf_fini(&x);
    tn_buf_fini(&y);
}

/* Every topic knows how many children name it, through attach, detach,
 * moves, a child's delete, and a snapshot that restores children before
 * their parent; a link to a topic that is not there (or to itself) is
 * refused and changes nothing. */
static void test_child_counts(void **state)
{
    (void)state;
    tn_meta_state_t s, r;
    tn_meta_state_init(&s);
    tn_meta_state_init(&r);
    tn_meta_cmd_t c = topic_cmd("zparent", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = topic_cmd("other", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    const char *kids[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        c = child_cmd(kids[i], "zparent");
        assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    }
    assert_int_equal(children(&s, "zparent"), 3);
    c = child_cmd("a", ""); /* detach */
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("b", "other"); /* move */
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("b", "other"); /* a put that keeps the parent */
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_int_equal(children(&s, "zparent"), 1);
    assert_int_equal(children(&s, "other"), 1);
    assert_int_equal(children(&s, "a"), 0);

    /* No link to a missing topic, nor to itself, new or existing. */
    c = child_cmd("d", "nosuch");
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_ENOENT);
    assert_null(tn_meta_topic_find(&s, "d"));
    c = child_cmd("a", "nosuch");
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_ENOENT);
    c = child_cmd("a", "a");
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_EINVAL);
    assert_string_equal(tn_meta_topic_find(&s, "a")->rec.parent, "");

    /* Snapshot: "c" is restored before "zparent". */
    tn_buf_t b;
    snapshot_of(&s, &b);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(children(&r, "zparent"), 1);
    assert_int_equal(children(&r, "other"), 1);
    assert_string_equal(tn_meta_topic_find(&r, "c")->rec.parent, "zparent");
    assert_same_state(&s, &r);
    tn_buf_fini(&b);

    tn_meta_cmd_t del = delete_cmd(TN_MC_TOPIC_DELETE, "b"); /* a child goes */
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_int_equal(children(&s, "other"), 0);
    assert_int_equal(children(&s, "zparent"), 1);
    tn_meta_state_fini(&s);
    tn_meta_state_fini(&r);
}

/* Deleting a parent detaches its children in the same change: each stands
 * alone (no parent, delay or epoch) with its channels, other links stay,
 * a topic made again with the parent's name has no children, and a
 * replica that restored a snapshot from before the delete and then
 * applies it holds the same state as the one that applied it all. */
static void test_parent_delete_detaches_children(void **state)
{
    (void)state;
    tn_meta_state_t s, r;
    tn_meta_state_init(&s);
    tn_meta_state_init(&r);
    tn_meta_cmd_t c = topic_cmd("p", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = topic_cmd("q", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("a", "p");
    c.topic.fanout_delay_ms = 5000;
    c.topic.attach_epoch = 0x1234abcdULL;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("z", "p");
    c.topic.attach_epoch = 7;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("qq", "q");
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    tn_meta_cmd_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.type = TN_MC_CHANNEL_PUT;
    snprintf(ch.topic.name, sizeof(ch.topic.name), "a");
    snprintf(ch.channel, sizeof(ch.channel), "default");
    assert_int_equal(tn_meta_state_apply(&s, &ch), 0);
    assert_int_equal(children(&s, "p"), 2);

    tn_buf_t before;
    snapshot_of(&s, &before);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&before), tn_buf_size(&before)), 0);
    tn_buf_fini(&before);

    tn_meta_cmd_t del = delete_cmd(TN_MC_TOPIC_DELETE, "p");
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_null(tn_meta_topic_find(&s, "p"));
    const char *kids[] = {"a", "z"};
    for (int i = 0; i < 2; i++) {
        const tn_meta_topic_t *k = &tn_meta_topic_find(&s, kids[i])->rec;
        assert_string_equal(k->parent, "");
        assert_int_equal(k->fanout_delay_ms, 0);
        assert_int_equal(k->attach_epoch, 0);
        assert_int_equal(k->partitions, 3);
    }
    assert_true(tn_meta_channel_exists(&s, "a", "default"));
    assert_string_equal(tn_meta_topic_find(&s, "qq")->rec.parent, "q");
    assert_int_equal(children(&s, "q"), 1);

    /* The other replica, from the snapshot, applies the same delete. */
    assert_int_equal(tn_meta_state_apply(&r, &del), 0);
    assert_same_state(&s, &r);

    /* An attach that was on its way when the parent went is refused. */
    c = child_cmd("a", "p");
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_ENOENT);
    /* Made again, the name has no children; the next snapshot agrees. */
    c = topic_cmd("p", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_int_equal(children(&s, "p"), 0);
    tn_buf_t after;
    snapshot_of(&s, &after);
    tn_meta_state_t t;
    tn_meta_state_init(&t);
    assert_int_equal(tn_meta_state_restore(&t, tn_buf_data(&after), tn_buf_size(&after)), 0);
    assert_same_state(&s, &t);
    tn_buf_fini(&after);
    tn_meta_state_fini(&t);
    tn_meta_state_fini(&s);
    tn_meta_state_fini(&r);
}

/* A snapshot written before deleting a parent detached its children can
 * name a parent that is not there: restoring it makes that child
 * standalone, as the delete does now, and counts the others. */
static void test_restore_settles_old_links(void **state)
{
    (void)state;
    tn_meta_state_t s, r;
    tn_meta_state_init(&s);
    tn_meta_state_init(&r);
    tn_meta_cmd_t c = topic_cmd("p", true);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("a", "p");
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    c = child_cmd("b", "p");
    c.topic.attach_epoch = 9;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    /* What an older build left: b names a parent that was deleted. */
    tn_meta_topic_entry_t *e = (tn_meta_topic_entry_t *)tn_meta_topic_find(&s, "b");
    snprintf(e->rec.parent, sizeof(e->rec.parent), "gone");
    tn_buf_t b;
    snapshot_of(&s, &b);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    tn_buf_fini(&b);
    const tn_meta_topic_t *rb = &tn_meta_topic_find(&r, "b")->rec;
    assert_string_equal(rb->parent, "");
    assert_int_equal(rb->attach_epoch, 0);
    assert_string_equal(tn_meta_topic_find(&r, "a")->rec.parent, "p");
    assert_int_equal(children(&r, "p"), 1);
    tn_meta_state_fini(&s);
    tn_meta_state_fini(&r);
}

/* --- the replica on libraft ------------------------------------------------------------ */

typedef struct {
    int done;
    int last;
} counter_t;

static void on_done(tn_meta_req_t *req, int status)
{
    counter_t *c = req->data;
    c->done++;
    c->last = status;
}

/* Run loop until cond holds or ms have passed: whether it held. */
static bool run_within(uv_loop_t *loop, bool (*cond)(void *), void *arg, int64_t ms)
{
    int64_t deadline = tn_now_mono_ms() + ms;
    while (!cond(arg)) {
        if (tn_now_mono_ms() > deadline)
            return false;
        uv_run(loop, UV_RUN_ONCE);
    }
    return true;
}

static bool run_until(uv_loop_t *loop, bool (*cond)(void *), void *arg)
{
    return run_within(loop, cond, arg, 30000);
}

static bool is_ready(void *arg)
{
    return tn_meta_ready(arg);
}

typedef struct {
    counter_t *c;
    int n;
} want_t;

static bool has_done(void *arg)
{
    want_t *w = arg;
    return w->c->done >= w->n;
}

static bool closed_flag;
static void on_closed(void *arg)
{
    (void)arg;
    closed_flag = true;
}

static bool is_closed(void *arg)
{
    (void)arg;
    return closed_flag;
}

static tn_meta_t *open_meta(uv_loop_t *loop, const char *dir, unsigned threshold)
{
    tn_meta_opts_t o;
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    o.node_id = 1;
    o.address = "127.0.0.1:0";
    o.election_ms = 150;
    o.heartbeat_ms = 50;
    o.snapshot_threshold = threshold;
    tn_meta_t *m = NULL;
    char err[256] = "";
    int rc = tn_meta_open(loop, &o, &m, err, sizeof(err));
    if (rc != 0)
        fail_msg("tn_meta_open: %s", err);
    assert_true(run_until(loop, is_ready, m));
    return m;
}

static void close_meta(uv_loop_t *loop, tn_meta_t *m)
{
    closed_flag = false;
    tn_meta_close(m, on_closed, NULL);
    assert_true(run_until(loop, is_closed, NULL));
}

static void propose_topics(uv_loop_t *loop, tn_meta_t *m, int from, int to)
{
    int n = to - from;
    tn_meta_req_t *reqs = tn_calloc((size_t)n, sizeof(*reqs));
    counter_t c = {0, 0};
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "t%05d", from + i);
        tn_meta_cmd_t cmd = topic_cmd(name, true);
        reqs[i].data = &c;
        assert_int_equal(tn_meta_propose(m, &reqs[i], &cmd, on_done), 0);
    }
    want_t w = {&c, n};
    assert_true(run_until(loop, has_done, &w));
    assert_int_equal(c.last, 0);
    tn_free(reqs);
}

/* The judge of a reading counts what was proposed since it as taken: a
 * burst cannot take the room of libraft's next segment unseen. */
static void test_room_judge_counts_the_spent(void **state)
{
    (void)state;
    uint64_t need = (uint64_t)TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE;
    tn_meta_room_t r = {true, need + (100u << 10), 0};
    char err[512] = "";
    assert_int_equal(tn_meta_room_judge(&r, 0, false, "d", err, sizeof(err)), 0);
    assert_int_equal(tn_meta_room_judge(&r, 200u << 10, false, "d", err, sizeof(err)), UV_ENOSPC);
    assert_non_null(strstr(err, "d: 8124 KiB free on its file system"));
    r.nopen = 1; /* the segment being written */
    assert_int_equal(tn_meta_room_judge(&r, 200u << 10, false, "d", err, sizeof(err)), 0);
    assert_int_equal(tn_meta_room_judge(&r, 200u << 10, true, "d", err, sizeof(err)), UV_ENOSPC);
    r.nopen = 2;
    assert_int_equal(tn_meta_room_judge(&r, 200u << 10, true, "d", err, sizeof(err)), 0);
    r.known = false; /* unreadable: libraft's own write says why */
    r.nopen = 0;
    assert_int_equal(tn_meta_room_judge(&r, 200u << 10, true, "d", err, sizeof(err)), 0);
}

/* n proposals to m one after another, each in a loop millisecond of its
 * own, with a snapshot due every threshold entries (for the last
 * SNAPSHOT_MARGIN entries before each, and until libraft has taken it):
 * the disk's room is read once per snapshot due, plus once per reading
 * interval (a second), not once per millisecond with a proposal while a
 * snapshot is due. Before: a statvfs on the loop thread for each
 * proposal of that window (74 to 100 reads for 160 proposals at threshold 16). */
static void propose_one_by_one_reading_rarely(uv_loop_t *loop, tn_meta_t *m, int n,
                                              unsigned threshold)
{
    tn_meta_req_t req;
    counter_t c = {0, 0};
    req.data = &c;
    int64_t start = tn_now_mono_ms();
    uint64_t before = tn_meta_room_reads;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%05d", i);
        tn_meta_cmd_t cmd = topic_cmd(name, true);
        usleep(1100); /* a loop millisecond of its own */
        uv_update_time(loop);
        assert_int_equal(tn_meta_propose(m, &req, &cmd, on_done), 0);
        want_t w = {&c, i + 1};
        assert_true(run_until(loop, has_done, &w));
        assert_int_equal(c.last, 0);
    }
    uint64_t reads = tn_meta_room_reads - before;
    int64_t seconds = (tn_now_mono_ms() - start) / 1000;
    printf("%d proposals over %lld s, a snapshot due every %u: %llu reads of the disk's room\n", n,
           (long long)seconds, threshold, (unsigned long long)reads);
    assert_true(reads <= (uint64_t)n / threshold + 1 + (uint64_t)seconds + 1);
}

static void test_replica_restart(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char mdir[4096];
    snprintf(mdir, sizeof(mdir), "%s/meta", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);

    tn_meta_t *m = open_meta(&loop, mdir, 64);
    /* Answers of the state machine come back to the proposer. */
    tn_meta_req_t req;
    counter_t c = {0, 0};
    req.data = &c;
    tn_meta_cmd_t t = topic_cmd("orders", true);
    assert_int_equal(tn_meta_propose(m, &req, &t, on_done), 0);
    want_t w = {&c, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(c.last, 0);
    assert_int_equal(tn_meta_propose(m, &req, &t, on_done), 0);
    w.n = 2;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(c.last, UV_EEXIST);
    /* Enough entries for snapshots (threshold 64) to be taken. The burst
     * does not read the file system (statvfs) for the room of the log's
     * next segment per proposal, only when a snapshot is due (room.h);
     * was: a statvfs on the loop thread for every proposal. */
    uint64_t before = tn_meta_room_reads;
    propose_topics(&loop, m, 0, 300);
    uint64_t reads = tn_meta_room_reads - before;
    printf("300 proposals: %llu reads of the disk's room\n", (unsigned long long)reads);
    assert_true(reads <= 30);
    tn_meta_cmd_t u = user_cmd("bob");
    assert_int_equal(tn_meta_propose(m, &req, &u, on_done), 0);
    tn_meta_cmd_fini(&u);
    w.n = 3;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(c.last, 0);
    assert_int_equal(tn_meta_state(m)->ntopics, 301);
    close_meta(&loop, m);
    /* A snapshot was taken, so the restart below restores from it. */
    DIR *d = opendir(mdir);
    assert_non_null(d);
    bool snap = false;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        snap = snap || strncmp(e->d_name, "snapshot-", 9) == 0;
    closedir(d);
    assert_true(snap);

    /* Restart: snapshot plus the log's tail give the same state. */
    m = open_meta(&loop, mdir, 64);
    const tn_meta_state_t *s = tn_meta_state(m);
    assert_int_equal(s->ntopics, 301);
    assert_non_null(tn_meta_topic_find(s, "orders"));
    assert_non_null(tn_meta_topic_find(s, "t00299"));
    assert_int_equal(tn_meta_user_find(s, "bob")->ngrants, 2);
    propose_topics(&loop, m, 300, 310);
    close_meta(&loop, m);
    m = open_meta(&loop, mdir, 16);
    propose_one_by_one_reading_rarely(&loop, m, 160, 16);
    close_meta(&loop, m);

    m = open_meta(&loop, mdir, 64);
    assert_int_equal(tn_meta_state(m)->ntopics, 471);
    /* Proposals still waiting when it closes are told so. */
    c.done = 0;
    tn_meta_cmd_t late = topic_cmd("late", true);
    int rc = tn_meta_propose(m, &req, &late, on_done);
    assert_int_equal(rc, 0);
    close_meta(&loop, m);
    assert_int_equal(c.done, 1);
    assert_true(c.last == 0 || c.last == TN_ECLOSED);
    assert_int_equal(tn_meta_propose(m = open_meta(&loop, mdir, 64), &req, &late, on_done), 0);
    close_meta(&loop, m);

    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmrf(dir);
    free(dir);
}

/* libraft's allocator for test_propose_answers_later: after `pass` more
 * allocations, every one fails until disarmed (pass < 0). */
static long heap_pass = -1;
static int heap_failed;

static bool heap_fails(void)
{
    if (heap_pass < 0)
        return false;
    if (heap_pass > 0) {
        heap_pass--;
        return false;
    }
    heap_failed++;
    return true;
}

static void *heap_malloc(void *data, size_t size)
{
    (void)data;
    return heap_fails() ? NULL : malloc(size);
}

static void heap_free(void *data, void *ptr)
{
    (void)data;
    free(ptr);
}

static void *heap_calloc(void *data, size_t nmemb, size_t size)
{
    (void)data;
    return heap_fails() ? NULL : calloc(nmemb, size);
}

static void *heap_realloc(void *data, void *ptr, size_t size)
{
    (void)data;
    return heap_fails() ? NULL : realloc(ptr, size);
}

static void *heap_aligned_alloc(void *data, size_t alignment, size_t size)
{
    (void)data;
    return heap_fails() ? NULL : aligned_alloc(alignment, size);
}

static void heap_aligned_free(void *data, size_t alignment, void *ptr)
{
    (void)data;
    (void)alignment;
    free(ptr);
}

/* tn_meta_propose's 0 means "cb follows": never inside the call, even
 * when libraft refuses the entry at once (out of memory here; a
 * leadership transfer under way refuses it the same way). The drivers
 * (decommission, factor, rebalance, fencing, registration ...) mark
 * themselves busy once the call returns 0 and the callback clears it: a
 * callback run inside the call left the mark set for ever, and since
 * change_in_flight every move driver stopped planning with it. */
static void test_propose_answers_later(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char mdir[4096];
    snprintf(mdir, sizeof(mdir), "%s/meta", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_meta_t *m = open_meta(&loop, mdir, 64);
    struct raft_heap heap = {NULL,         heap_malloc,        heap_free,        heap_calloc,
                             heap_realloc, heap_aligned_alloc, heap_aligned_free};
    raft_heap_set(&heap);
    tn_meta_req_t req;
    counter_t c = {0, 0};
    req.data = &c;
    tn_meta_cmd_t t = topic_cmd("later", true);
    heap_failed = 0;
    heap_pass = 1; /* the command's copy (take_buffer); libraft's own fail */
    int rc = tn_meta_propose(m, &req, &t, on_done);
    int answered_inside = c.done;
    heap_pass = -1;
    raft_heap_set_default();
    assert_true(heap_failed > 0);
    if (rc == 0) {
        assert_int_equal(answered_inside, 0); /* cb follows, it did not run inside */
        want_t w = {&c, 1};
        assert_true(run_until(&loop, has_done, &w));
        assert_int_equal(c.done, 1);
    }
    close_meta(&loop, m);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmrf(dir);
    free(dir);
}

static bool nsq_registered(void *arg)
{
    const tn_meta_member_t *me = tn_meta_member_find(tn_meta_state(arg), 1);
    return me != NULL && me->nsq.tcp_port == 24150;
}

/* A log written by the previous build replays: its MEMBER_REG entries
 * (the bytes that build wrote, proposed as they are) and a topic grown
 * since are all there after a restart from the log alone, and this
 * node's own registration now carries its NSQ door. */
static void test_previous_log_replays(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char mdir[4096];
    snprintf(mdir, sizeof(mdir), "%s/meta", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_meta_t *m = open_meta(&loop, mdir, 1024);
    /* The previous build's MEMBER_REG of member 5 (see test_state.c). */
    static const unsigned char old[40] = {
        'T', 'M', 1,   9,   32, 0, 0,   0,   5,   0,   0,   0,   0,    0,    0, 0, 6, 0, 'h', ':',
        '4', '1', '5', '3', 6,  0, 'h', ':', '4', '1', '5', '1', 0xe8, 0x03, 0, 0, 0, 0, 0,   0,
    };
    tn_meta_req_t req;
    counter_t c = {0, 0};
    req.data = &c;
    assert_int_equal(tn_meta_propose_encoded(m, &req, old, sizeof(old), on_done), 0);
    want_t w = {&c, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(c.last, 0);
    tn_meta_cmd_t t = topic_cmd("fleet", true);
    t.topic.owner[0] = '\0';
    t.topic.partitions = 1;
    assert_int_equal(tn_meta_propose(m, &req, &t, on_done), 0);
    w.n = 2;
    assert_true(run_until(&loop, has_done, &w));
    tn_meta_cmd_t g;
    memset(&g, 0, sizeof(g));
    g.type = TN_MC_TOPIC_GROW_FOR;
    snprintf(g.topic.name, sizeof(g.topic.name), "fleet");
    g.member.id = 5;
    assert_int_equal(tn_meta_propose(m, &req, &g, on_done), 0);
    w.n = 3;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(c.last, 0);
    tn_meta_nsq_t nsq;
    memset(&nsq, 0, sizeof(nsq));
    snprintf(nsq.broadcast, sizeof(nsq.broadcast), "127.0.0.1");
    snprintf(nsq.hostname, sizeof(nsq.hostname), "here");
    nsq.tcp_port = 24150;
    nsq.http_port = 24151;
    snprintf(nsq.version, sizeof(nsq.version), "9.9.9");
    assert_int_equal(tn_meta_set_nsq(m, &nsq), 0);
    close_meta(&loop, m);

    /* From the log (no snapshot at threshold 1024). */
    m = open_meta(&loop, mdir, 1024);
    const tn_meta_state_t *s = tn_meta_state(m);
    const tn_meta_member_t *five = tn_meta_member_find(s, 5);
    assert_non_null(five);
    assert_string_equal(five->api_addr, "h:4151");
    assert_int_equal(five->heartbeat_ms, 1000);
    assert_int_equal(five->nsq.tcp_port, 0);
    assert_int_equal(tn_meta_topic_find(s, "fleet")->rec.partitions, 2);
    assert_int_equal(tn_meta_state_owner(s, "fleet", 1), 5);
    /* This node registers itself with its NSQ door once told it. */
    assert_int_equal(tn_meta_set_nsq(m, &nsq), 0);
    assert_true(run_until(&loop, nsq_registered, m));
    const tn_meta_member_t *me = tn_meta_member_find(tn_meta_state(m), 1);
    assert_string_equal(me->nsq.broadcast, "127.0.0.1");
    assert_string_equal(me->nsq.hostname, "here");
    assert_int_equal(me->nsq.http_port, 24151);
    assert_string_equal(me->nsq.version, "9.9.9");
    /* A string with no end is refused. */
    memset(nsq.hostname, 'x', sizeof(nsq.hostname));
    assert_int_equal(tn_meta_set_nsq(m, &nsq), UV_EINVAL);
    close_meta(&loop, m);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmrf(dir);
    free(dir);
}

static tn_meta_cmd_t reg_cmd(uint64_t id, int64_t heartbeat)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REG;
    c.member.id = id;
    snprintf(c.member.addr, sizeof(c.member.addr), "10.0.0.%llu:4153", (unsigned long long)id);
    snprintf(c.member.api_addr, sizeof(c.member.api_addr), "10.0.0.%llu:4151",
             (unsigned long long)id);
    c.member.heartbeat_ms = heartbeat;
    return c;
}

static tn_meta_cmd_t status_cmd(uint64_t id, uint8_t status, int64_t heartbeat)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_STATUS;
    c.member.id = id;
    c.member.status = status;
    c.member.heartbeat_ms = heartbeat;
    return c;
}

static void test_codec_members(void **state)
{
    (void)state;
    tn_meta_cmd_t c = reg_cmd(12, 1700000000123LL), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_MEMBER_REG);
    assert_int_equal(d.member.id, 12);
    assert_string_equal(d.member.addr, "10.0.0.12:4153");
    assert_string_equal(d.member.api_addr, "10.0.0.12:4151");
    assert_int_equal(d.member.heartbeat_ms, 1700000000123LL);
    c = status_cmd(12, TN_MEMBER_DEAD, 1700000000123LL);
    roundtrip(&c, &d);
    assert_int_equal(d.member.status, TN_MEMBER_DEAD);
    assert_int_equal(d.member.heartbeat_ms, 1700000000123LL);
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_NOOP;
    c.member.id = 3;
    c.nonce = 0xfedcba9876543210ULL;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_NOOP);
    assert_int_equal(d.member.id, 3);
    assert_true(d.nonce == 0xfedcba9876543210ULL);
    uint64_t owners[3] = {3, 0, 1};
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_PART_OWNERS;
    snprintf(c.topic.name, sizeof(c.topic.name), "orders");
    c.owners = owners;
    c.nowners = 3;
    roundtrip(&c, &d);
    assert_string_equal(d.topic.name, "orders");
    assert_int_equal(d.nowners, 3);
    assert_memory_equal(d.owners, owners, sizeof(owners));
    tn_meta_cmd_fini(&d);

    /* The first build's MEMBER_PUT, byte for byte, still decodes. */
    static const unsigned char old[24] = {'T', 'M', 1, 7, 15, 0, 0,   0,   7,   0,   0,   0,
                                          0,   0,   0, 0, 5,  0, '1', '.', '2', ':', '3', 0};
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(old, sizeof(old), &d, &used), 0);
    assert_int_equal(used, 24);
    assert_int_equal(d.type, TN_MC_MEMBER_PUT);
    assert_int_equal(d.member.id, 7);
    assert_string_equal(d.member.addr, "1.2:3");

    /* Refusals: what cannot be a record does not encode, and damage does
     * not decode. */
    tn_buf_t b;
    tn_buf_init(&b);
    c = reg_cmd(0, 1);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = reg_cmd(1, -1);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = reg_cmd(1, 1);
    c.member.addr[0] = '\0';
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = status_cmd(1, 2, 1);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_PART_OWNERS;
    snprintf(c.topic.name, sizeof(c.topic.name), "orders");
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL); /* no partitions */
    assert_int_equal(tn_buf_size(&b), 0);
    c = status_cmd(1, TN_MEMBER_DEAD, 1);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&b);
    p[TN_META_HDR + 8] = 2; /* a status that does not exist */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_reset(&b);
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_PART_OWNERS;
    snprintf(c.topic.name, sizeof(c.topic.name), "orders");
    c.owners = owners;
    c.nowners = 3;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    p = (unsigned char *)tn_buf_data(&b);
    p[TN_META_HDR + 2 + 6] = 4; /* the count says more owners than follow */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    p[TN_META_HDR + 2 + 6] = 2; /* or fewer */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);
}

static void apply_ok(tn_meta_state_t *s, tn_meta_cmd_t c)
{
    assert_int_equal(tn_meta_state_apply(s, &c), 0);
}

static void expect_owners(const tn_meta_state_t *s, const char *topic, const uint64_t *want,
                          uint32_t n)
{
    assert_int_equal(tn_meta_topic_find(s, topic)->rec.partitions, n);
    for (uint32_t p = 0; p < n; p++) {
        if (tn_meta_state_owner(s, topic, p) != want[p])
            fail_msg("%s partition %u: owner %llu, want %llu", topic, p,
                     (unsigned long long)tn_meta_state_owner(s, topic, p),
                     (unsigned long long)want[p]);
    }
    assert_int_equal(tn_meta_state_owner(s, topic, n), 0);
}

static tn_meta_cmd_t sized_topic(const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c = topic_cmd(name, false);
    c.topic.partitions = partitions;
    return c;
}

static void test_placement(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    /* A topic made before any member registered: unassigned. */
    apply_ok(&s, sized_topic("early", 4));
    assert_int_equal(s.unassigned, 4);
    assert_int_equal(tn_meta_state_owner(&s, "early", 0), 0);
    /* The first registration picks it up (one member: it owns all). */
    apply_ok(&s, reg_cmd(3, 1000));
    assert_int_equal(s.unassigned, 0);
    expect_owners(&s, "early", (const uint64_t[]){3, 3, 3, 3}, 4);
    apply_ok(&s, reg_cmd(1, 1000));
    apply_ok(&s, reg_cmd(2, 1000));
    /* Members are sorted by id whatever order they registered in. */
    assert_int_equal(s.members[0].id, 1);
    assert_int_equal(s.members[2].id, 3);
    /* p mod n over the alive members sorted by id. */
    apply_ok(&s, sized_topic("orders", 5));
    expect_owners(&s, "orders", (const uint64_t[]){1, 2, 3, 1, 2}, 5);
    /* Growth places only the new partitions. */
    apply_ok(&s, sized_topic("orders", 7));
    expect_owners(&s, "orders", (const uint64_t[]){1, 2, 3, 1, 2, 3, 1}, 7);
    /* A status made from an old heartbeat is refused; a dead owner keeps
     * its partitions; new ones go to the alive members only. */
    tn_meta_cmd_t dead = status_cmd(2, TN_MEMBER_DEAD, 999);
    assert_int_equal(tn_meta_state_apply(&s, &dead), TN_ECHANGED);
    assert_int_equal(tn_meta_member_find(&s, 2)->status, TN_MEMBER_ALIVE);
    apply_ok(&s, status_cmd(2, TN_MEMBER_DEAD, 1000));
    assert_int_equal(tn_meta_member_find(&s, 2)->status, TN_MEMBER_DEAD);
    expect_owners(&s, "orders", (const uint64_t[]){1, 2, 3, 1, 2, 3, 1}, 7);
    apply_ok(&s, sized_topic("late", 4));
    expect_owners(&s, "late", (const uint64_t[]){1, 3, 1, 3}, 4);
    assert_int_equal(tn_meta_state_owned(&s, 1), 3 + 2);
    assert_int_equal(tn_meta_state_owned(&s, 2), 2);
    assert_int_equal(tn_meta_state_owned(&s, 3), 4 + 2 + 2);
    /* A registration brings a dead member back, and keeps draining. */
    tn_meta_cmd_t drain;
    memset(&drain, 0, sizeof(drain));
    drain.type = TN_MC_MEMBER_DRAIN;
    drain.member.id = 2;
    drain.member.draining = true;
    apply_ok(&s, drain);
    apply_ok(&s, reg_cmd(2, 2000));
    const tn_meta_member_t *m2 = tn_meta_member_find(&s, 2);
    assert_int_equal(m2->status, TN_MEMBER_ALIVE);
    assert_int_equal(m2->heartbeat_ms, 2000);
    assert_true(m2->draining);
    /* A shrink forgets the owners of partitions gone; regrowing places
     * them again by the rule. */
    apply_ok(&s, sized_topic("orders", 2));
    expect_owners(&s, "orders", (const uint64_t[]){1, 2}, 2);
    apply_ok(&s, sized_topic("orders", 4));
    expect_owners(&s, "orders", (const uint64_t[]){1, 2, 3, 1}, 4);
    /* The old registration keeps the full record's API address and
     * heartbeat. */
    tn_meta_cmd_t put;
    memset(&put, 0, sizeof(put));
    put.type = TN_MC_MEMBER_PUT;
    put.member.id = 3;
    snprintf(put.member.addr, sizeof(put.member.addr), "10.0.0.3:4153");
    apply_ok(&s, put);
    assert_string_equal(tn_meta_member_find(&s, 3)->api_addr, "10.0.0.3:4151");
    assert_int_equal(tn_meta_member_find(&s, 3)->heartbeat_ms, 1000);
    /* Owners are a snapshot record, not a log entry. */
    uint64_t owners[4] = {9, 9, 9, 9};
    tn_meta_cmd_t po;
    memset(&po, 0, sizeof(po));
    po.type = TN_MC_PART_OWNERS;
    snprintf(po.topic.name, sizeof(po.topic.name), "late");
    po.owners = owners;
    po.nowners = 4;
    assert_int_equal(tn_meta_state_apply(&s, &po), UV_EINVAL);
    expect_owners(&s, "late", (const uint64_t[]){1, 3, 1, 3}, 4);
    tn_meta_cmd_t st = status_cmd(77, TN_MEMBER_DEAD, 0);
    assert_int_equal(tn_meta_state_apply(&s, &st), TN_ENOTFOUND);

    /* A snapshot keeps assignments and the member records. */
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    tn_buf_t b;
    tn_buf_init(&b);
    apply_ok(&s, status_cmd(2, TN_MEMBER_DEAD, 2000));
    apply_ok(&s, sized_topic("empty", 3)); /* placed on 1 and 3 */
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    expect_owners(&r, "orders", (const uint64_t[]){1, 2, 3, 1}, 4);
    expect_owners(&r, "late", (const uint64_t[]){1, 3, 1, 3}, 4);
    expect_owners(&r, "early", (const uint64_t[]){3, 3, 3, 3}, 4);
    expect_owners(&r, "empty", (const uint64_t[]){1, 3, 1}, 3);
    assert_int_equal(r.unassigned, 0);
    assert_int_equal(r.nmembers, 3);
    const tn_meta_member_t *r2 = tn_meta_member_find(&r, 2);
    assert_int_equal(r2->status, TN_MEMBER_DEAD);
    assert_true(r2->draining);
    assert_int_equal(r2->heartbeat_ms, 2000);
    assert_string_equal(r2->api_addr, "10.0.0.2:4151");
    assert_int_equal(tn_meta_member_find(&r, 1)->status, TN_MEMBER_ALIVE);
    /* Restored and applied states take the next command the same way. */
    apply_ok(&s, sized_topic("after", 3));
    apply_ok(&r, sized_topic("after", 3));
    expect_owners(&r, "after", (const uint64_t[]){1, 3, 1}, 3);
    expect_owners(&s, "after", (const uint64_t[]){1, 3, 1}, 3);
    tn_buf_fini(&b);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* A snapshot of the first build (MEMBER_PUT members, no owners) restores
 * with every partition unassigned; the next registration places them. */
static void test_old_snapshot_placement(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    unsigned char hdr[24] = {'T', 'M', 'S', '1'};
    tn_put_u64(hdr + 16, 2);
    tn_buf_append(&b, hdr, sizeof(hdr));
    tn_meta_cmd_t t = sized_topic("legacy", 3);
    assert_int_equal(tn_meta_cmd_encode(&t, &b), 0);
    tn_meta_cmd_t put;
    memset(&put, 0, sizeof(put));
    put.type = TN_MC_MEMBER_PUT;
    put.member.id = 1;
    snprintf(put.member.addr, sizeof(put.member.addr), "127.0.0.1:4153");
    assert_int_equal(tn_meta_cmd_encode(&put, &b), 0);
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(tn_meta_state_restore(&s, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(s.unassigned, 3);
    assert_int_equal(tn_meta_member_find(&s, 1)->status, TN_MEMBER_ALIVE);
    expect_owners(&s, "legacy", (const uint64_t[]){0, 0, 0}, 3);
    apply_ok(&s, reg_cmd(1, 5000));
    expect_owners(&s, "legacy", (const uint64_t[]){1, 1, 1}, 3);
    assert_int_equal(s.unassigned, 0);
    /* A snapshot whose owner record does not fit its topic is refused. */
    tn_meta_cmd_t po;
    memset(&po, 0, sizeof(po));
    po.type = TN_MC_PART_OWNERS;
    snprintf(po.topic.name, sizeof(po.topic.name), "legacy");
    uint64_t owners[2] = {1, 1};
    po.owners = owners;
    po.nowners = 2;
    tn_put_u64((unsigned char *)tn_buf_data(&b) + 16, 3);
    assert_int_equal(tn_meta_cmd_encode(&po, &b), 0);
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), TN_ECORRUPT);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
    tn_buf_fini(&b);
}

/* The leader's skip list (members it has not heard from lately) travels
 * in TOPIC_PUT and steers placement the same way on every replica; a
 * list leaving nobody falls back to every alive member. */
static void test_placement_skips(void **state)
{
    (void)state;
    /* The codec: a list round-trips; a bad one is refused both ways. */
    uint64_t two[2] = {2, 5};
    tn_meta_cmd_t t = sized_topic("skipping", 6);
    t.skip = two;
    t.nskip = 2;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&t, &b), 0);
    tn_meta_cmd_t d;
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), 0);
    assert_int_equal(used, tn_buf_size(&b));
    assert_int_equal(d.nskip, 2);
    assert_int_equal(d.skip[0], 2);
    assert_int_equal(d.skip[1], 5);
    assert_false(d.again);
    tn_meta_cmd_fini(&d);
    /* Not ascending, or a zero id: not encodable, and not decodable. */
    uint64_t bad[2] = {5, 2};
    t.skip = bad;
    tn_buf_t e;
    tn_buf_init(&e);
    assert_int_equal(tn_meta_cmd_encode(&t, &e), UV_EINVAL);
    tn_buf_fini(&e);
    unsigned char *raw = (unsigned char *)tn_buf_data(&b);
    /* The list is the last 18 bytes before the padding: [2] 2, [8] 2, [8] 5. */
    size_t at = TN_META_HDR + tn_get_u32(raw + 4) - 16;
    unsigned char keep[8];
    memcpy(keep, raw + at, 8);
    tn_put_u64(raw + at, 7); /* 7 then 5 */
    assert_int_equal(tn_meta_cmd_decode(raw, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_put_u64(raw + at, 0);
    assert_int_equal(tn_meta_cmd_decode(raw, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    memcpy(raw + at, keep, 8);
    assert_int_equal(tn_meta_cmd_decode(raw, tn_buf_size(&b), &d, &used), 0);
    tn_meta_cmd_fini(&d);
    tn_buf_fini(&b);

    tn_meta_state_t s;
    tn_meta_state_init(&s);
    apply_ok(&s, reg_cmd(1, 1000));
    apply_ok(&s, reg_cmd(2, 1000));
    apply_ok(&s, reg_cmd(3, 1000));
    /* Member 2 not heard from: p mod 2 over members 1 and 3. */
    uint64_t skip2[1] = {2};
    tn_meta_cmd_t c = sized_topic("fresh", 4);
    c.skip = skip2;
    c.nskip = 1;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    expect_owners(&s, "fresh", (const uint64_t[]){1, 3, 1, 3}, 4);
    /* Growth skips the same way, for the new partitions only. */
    c.topic.partitions = 6;
    uint64_t skip3[1] = {3};
    c.skip = skip3;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    expect_owners(&s, "fresh", (const uint64_t[]){1, 3, 1, 3, 1, 2}, 6);
    /* Nobody left: every alive member, as without a list. */
    uint64_t all[3] = {1, 2, 3};
    tn_meta_cmd_t none = sized_topic("nobody", 3);
    none.skip = all;
    none.nskip = 3;
    assert_int_equal(tn_meta_state_apply(&s, &none), 0);
    expect_owners(&s, "nobody", (const uint64_t[]){1, 2, 3}, 3);
    /* Ids not among the members change nothing; dead members stay out. */
    apply_ok(&s, status_cmd(1, TN_MEMBER_DEAD, 1000));
    uint64_t odd[2] = {3, 9};
    tn_meta_cmd_t some = sized_topic("some", 2);
    some.skip = odd;
    some.nskip = 2;
    assert_int_equal(tn_meta_state_apply(&s, &some), 0);
    expect_owners(&s, "some", (const uint64_t[]){2, 2}, 2);
    /* Every replica (a snapshot restored elsewhere) holds the same owners. */
    tn_buf_t snap;
    tn_buf_init(&snap);
    assert_int_equal(tn_meta_state_snapshot(&s, &snap), 0);
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&snap), tn_buf_size(&snap)), 0);
    expect_owners(&r, "fresh", (const uint64_t[]){1, 3, 1, 3, 1, 2}, 6);
    expect_owners(&r, "some", (const uint64_t[]){2, 2}, 2);
    tn_meta_state_fini(&r);
    tn_buf_fini(&snap);
    tn_meta_state_fini(&s);
}

/* A copy sent again after a failover (marked again) that finds exactly
 * the record it writes answers 0; unmarked, or finding another record,
 * it answers as before. */
static void test_again_answers(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    tn_meta_cmd_t t = topic_cmd("twice", true);
    assert_int_equal(tn_meta_state_apply(&s, &t), 0);
    assert_int_equal(tn_meta_state_apply(&s, &t), UV_EEXIST);
    t.again = true;
    assert_int_equal(tn_meta_state_apply(&s, &t), 0);
    tn_meta_cmd_t other = t;
    other.topic.partitions = 4; /* another create of the same name */
    assert_int_equal(tn_meta_state_apply(&s, &other), UV_EEXIST);
    assert_int_equal(tn_meta_topic_find(&s, "twice")->rec.partitions, 3);
    /* An update from a read copy, applied twice. */
    tn_meta_cmd_t up = topic_cmd("twice", false);
    up.if_unchanged = true;
    up.expect = tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "twice")->rec);
    up.topic.partitions = 5;
    assert_int_equal(tn_meta_state_apply(&s, &up), 0);
    assert_int_equal(tn_meta_state_apply(&s, &up), TN_ECHANGED);
    up.again = true;
    assert_int_equal(tn_meta_state_apply(&s, &up), 0);
    expect_owners(&s, "twice", (const uint64_t[]){0, 0, 0, 0, 0}, 5);
    up.topic.partitions = 6; /* another update from the same read copy */
    assert_int_equal(tn_meta_state_apply(&s, &up), TN_ECHANGED);
    /* Users alike. */
    tn_meta_cmd_t u = user_cmd("bob");
    u.if_absent = true;
    assert_int_equal(tn_meta_state_apply(&s, &u), 0);
    uint64_t version = s.users_version;
    assert_int_equal(tn_meta_state_apply(&s, &u), UV_EEXIST);
    u.again = true;
    assert_int_equal(tn_meta_state_apply(&s, &u), 0);
    assert_int_equal(s.users_version, version); /* nothing changed */
    /* The mark travels in the encoding. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&u, &b), 0);
    assert_int_equal(tn_meta_cmd_encode(&t, &b), 0);
    tn_meta_cmd_t d;
    size_t used = 0, used2 = 0;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), 0);
    assert_true(d.again);
    assert_true(d.if_absent);
    tn_meta_cmd_fini(&d);
    assert_int_equal(tn_meta_cmd_decode((const char *)tn_buf_data(&b) + used,
                                        tn_buf_size(&b) - used, &d, &used2),
                     0);
    assert_true(d.again);
    assert_true(d.if_absent);
    tn_meta_cmd_fini(&d);
    tn_buf_fini(&b);
    tn_meta_cmd_fini(&u);
    tn_meta_state_fini(&s);
}

/* --- several voters on one loop (libraft's TCP transport on loopback) ------------ */

#define NNODES 4

typedef struct {
    uv_loop_t *loop;
    tn_meta_t *m[NNODES + 1]; /* by id */
    char dir[NNODES + 1][4096];
    char raft[NNODES + 1][32];
    char api[NNODES + 1][32];
    int forwarded;
    int refuse;        /* the hook's answer when not 0 (a peer out of reach) */
    bool hold;         /* the leader's answers wait in held (a leader that dies after appending) */
    uint8_t hold_type; /* the command held (0: TOPIC_PUT) */
    struct hop_s *held[8];
    int nheld;
    unsigned election_ms, heartbeat_ms; /* 0: 300 and 50 */
    unsigned register_ms;               /* members' registrations; 0: 200 */
    bool old_leader;                    /* the leader's answers carry no index (an older build) */
    uint64_t index_add;                 /* added to the index the leader's answers carry */
    int noops;                          /* NOOPs forwarded (an older build's confirmations) */
    void (*on_ready)(void *arg);        /* optional, each node's (arg: c) */
} cluster_t;

static cluster_t *the_cluster;

typedef struct hop_s {
    tn_meta_req_t req;
    tn_meta_forward_done done;
    void *done_arg;
    cluster_t *c;
    bool held;
    int status;
} hop_t;

static void on_hop(tn_meta_req_t *req, int status)
{
    hop_t *h = req->data;
    if (h->held && h->c->nheld < 8) {
        h->status = status;
        h->c->held[h->c->nheld++] = h;
        return;
    }
    cluster_t *c = h->c;
    h->done(h->done_arg, status, c->old_leader ? 0 : h->req.index + c->index_add);
    tn_free(h);
}

/* The node RPC stand-in: the leader's tn_meta_propose_encoded, called
 * directly; its refusal (TN_ENOTLEADER) goes back through done. */
static int forward_hook(void *arg, uint64_t leader, const char *api, const void *cmd, size_t len,
                        tn_meta_forward_done done, void *done_arg)
{
    cluster_t *c = arg;
    assert_true(leader >= 1 && leader <= NNODES);
    assert_string_equal(api, c->api[leader]);
    if (c->refuse != 0)
        return c->refuse;
    c->forwarded++;
    c->noops += len > TN_META_HDR && ((const uint8_t *)cmd)[3] == TN_MC_NOOP;
    hop_t *h = tn_calloc(1, sizeof(*h));
    h->done = done;
    h->done_arg = done_arg;
    h->c = c;
    /* Only the test's own proposal (a topic create): a member's
     * registration forwarded meanwhile is answered as usual. */
    h->held = c->hold && len > TN_META_HDR &&
              ((const uint8_t *)cmd)[3] == (c->hold_type != 0 ? c->hold_type : TN_MC_TOPIC_PUT);
    h->req.data = h;
    int rc = tn_meta_propose_encoded(c->m[leader], &h->req, cmd, len, on_hop);
    if (rc != 0) {
        tn_free(h);
        done(done_arg, rc, 0);
    }
    return 0;
}

/* Let the only held answer go, with status (its own: -1). */
static void release_held(cluster_t *c, int status)
{
    assert_int_equal(c->nheld, 1);
    hop_t *h = c->held[0];
    c->held[0] = NULL;
    c->nheld = 0;
    h->done(h->done_arg, status == -1 ? h->status : status,
            c->old_leader || status != -1 ? 0 : h->req.index + c->index_add);
    tn_free(h);
}

static void cluster_open(cluster_t *c, uint64_t id, bool join_only)
{
    tn_meta_peer_t peers[3];
    for (uint64_t i = 1; i <= 3; i++) {
        peers[i - 1].id = i;
        snprintf(peers[i - 1].raft_addr, sizeof(peers[i - 1].raft_addr), "%s", c->raft[i]);
    }
    tn_meta_opts_t o;
    memset(&o, 0, sizeof(o));
    o.dir = c->dir[id];
    o.node_id = id;
    o.address = c->raft[id];
    o.api_addr = c->api[id];
    o.election_ms = c->election_ms != 0 ? c->election_ms : 300;
    o.heartbeat_ms = c->heartbeat_ms != 0 ? c->heartbeat_ms : 50;
    o.heartbeat_interval_ms = c->register_ms != 0 ? c->register_ms : 200;
    o.dead_after_ms = 3000; /* far above the 200 ms registrations, even on a loaded machine */
    o.peers = join_only ? NULL : peers;
    o.npeers = join_only ? 0 : 3;
    o.join_only = join_only;
    o.forward = forward_hook;
    o.forward_arg = c;
    o.on_ready = c->on_ready;
    o.ready_arg = c;
    char err[256] = "";
    if (tn_meta_open(c->loop, &o, &c->m[id], err, sizeof(err)) != 0)
        fail_msg("tn_meta_open %llu: %s", (unsigned long long)id, err);
}

/* The leader every given node agrees on, or 0. */
static uint64_t agreed_leader(cluster_t *c, uint64_t n)
{
    uint64_t agreed = 0;
    for (uint64_t i = 1; i <= n; i++) {
        uint64_t id = 0;
        const char *api = NULL;
        if (c->m[i] == NULL || tn_meta_leader(c->m[i], &id, &api) != 0)
            return 0;
        if (agreed != 0 && id != agreed)
            return 0;
        agreed = id;
    }
    return agreed;
}

static bool three_caught_up(void *arg)
{
    cluster_t *c = arg;
    for (uint64_t i = 1; i <= 3; i++)
        if (!tn_meta_ready(c->m[i]) || !tn_meta_caught_up(c->m[i]))
            return false;
    return agreed_leader(c, 3) != 0;
}

static bool members_registered(void *arg)
{
    cluster_t *c = arg;
    for (uint64_t i = 1; i <= 3; i++) {
        const tn_meta_state_t *s = tn_meta_state(c->m[i]);
        if (s->nmembers < 3)
            return false;
        for (uint64_t k = 1; k <= 3; k++) {
            const tn_meta_member_t *mem = tn_meta_member_find(s, k);
            if (mem == NULL || strcmp(mem->api_addr, c->api[k]) != 0)
                return false;
        }
    }
    return true;
}

typedef struct {
    cluster_t *c;
    uint64_t n;
    const char *topic;
} topic_wait_t;

static bool topic_everywhere(void *arg)
{
    topic_wait_t *w = arg;
    for (uint64_t i = 1; i <= w->n; i++)
        if (tn_meta_topic_find(tn_meta_state(w->c->m[i]), w->topic) == NULL)
            return false;
    return true;
}

typedef struct {
    int done;
    int status;
} async_t;

static void on_async(void *arg, int status)
{
    async_t *a = arg;
    a->done++;
    a->status = status;
}

static bool async_done(void *arg)
{
    return ((async_t *)arg)->done > 0;
}

typedef struct {
    tn_meta_t *m;
    uint64_t id;
    uint8_t status;
} member_wait_t;

static bool member_has_status(void *arg)
{
    member_wait_t *w = arg;
    const tn_meta_member_t *mem = tn_meta_member_find(tn_meta_state(w->m), w->id);
    return mem != NULL && mem->status == w->status;
}

static bool node4_caught_up(void *arg)
{
    cluster_t *c = arg;
    return tn_meta_ready(c->m[4]) && tn_meta_caught_up(c->m[4]);
}

static bool leader_moved(void *arg)
{
    uint64_t *old = arg;
    uint64_t now = agreed_leader(the_cluster, 4);
    return now != 0 && now != *old;
}

static int closed_count;
static void on_node_closed(void *arg)
{
    (void)arg;
    closed_count++;
}

static bool all_closed(void *arg)
{
    return closed_count >= *(int *)arg;
}

/* c for nodes 1..slots on loop (initialised here), data under dir:
 * nothing open yet. */
static void cluster_init(cluster_t *c, uv_loop_t *loop, const char *dir, uint64_t slots)
{
    /* libraft writes to peers that closed (ternd ignores SIGPIPE too). */
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(loop);
    memset(c, 0, sizeof(*c));
    c->loop = loop;
    the_cluster = c;
    for (uint64_t i = 1; i <= slots; i++) {
        snprintf(c->dir[i], sizeof(c->dir[i]), "%s/meta%llu", dir, (unsigned long long)i);
        snprintf(c->raft[i], sizeof(c->raft[i]), "127.0.0.1:%d", tu_free_port(false));
        snprintf(c->api[i], sizeof(c->api[i]), "127.0.0.%llu:4151", (unsigned long long)i);
    }
}

/* Close every node of c still open, then its loop (which must close). */
static void cluster_close_all(cluster_t *c)
{
    closed_count = 0;
    int n = 0;
    for (uint64_t i = 1; i <= NNODES; i++) {
        if (c->m[i] != NULL) {
            tn_meta_close(c->m[i], on_node_closed, NULL);
            n++;
        }
    }
    assert_true(run_until(c->loop, all_closed, &n));
    uv_run(c->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(c->loop), 0);
}

/* Close node id of c and wait until it has. */
static void cluster_close_one(cluster_t *c, uint64_t id)
{
    closed_count = 0;
    tn_meta_close(c->m[id], on_node_closed, NULL);
    int one = 1;
    assert_true(run_until(c->loop, all_closed, &one));
    c->m[id] = NULL;
}

/* Nodes 1..3 of c bootstrapped as the same three voters on loop
 * (initialised here; data under dir, addresses for nodes 1..slots),
 * every one caught up and registered: the leader they agree on. */
static uint64_t cluster_start3(cluster_t *c, uv_loop_t *loop, const char *dir, uint64_t slots)
{
    cluster_init(c, loop, dir, slots);
    for (uint64_t i = 1; i <= 3; i++)
        cluster_open(c, i, false);
    assert_true(run_until(loop, three_caught_up, c));
    assert_true(run_until(loop, members_registered, c));
    return agreed_leader(c, 3);
}

static void test_cluster(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, NNODES);
    uint64_t follower = leader == 1 ? 2 : 1;
    uint64_t id = 0;
    const char *api = NULL;
    assert_int_equal(tn_meta_leader(c.m[follower], &id, &api), 0);
    assert_int_equal(id, leader);
    assert_string_equal(api, c.api[leader]);

    /* A proposal on a follower goes to the leader and answers with the
     * leader's result; every replica applies it. */
    tn_meta_req_t req;
    counter_t cnt = {0, 0};
    req.data = &cnt;
    tn_meta_cmd_t t = topic_cmd("orders", true);
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &t, on_done), 0);
    want_t w = {&cnt, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);
    assert_true(c.forwarded > 0);
    topic_wait_t tw = {&c, 3, "orders"};
    assert_true(run_until(&loop, topic_everywhere, &tw));
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &t, on_done), 0);
    w.n = 2;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, UV_EEXIST); /* the leader's answer */

    /* A hook that cannot reach the leader: the proposal is answered with
     * its error, and nothing is applied. */
    c.refuse = UV_ECONNREFUSED;
    tn_meta_cmd_t lost = topic_cmd("lost", true);
    cnt.done = 0;
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &lost, on_done), 0);
    w.n = 1;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, UV_ECONNREFUSED);
    c.refuse = 0;
    assert_null(tn_meta_topic_find(tn_meta_state(c.m[leader]), "lost"));

    /* The RPC handler's entry point refuses on a follower, and refuses
     * what is not exactly one command. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&t, &b), 0);
    assert_int_equal(
        tn_meta_propose_encoded(c.m[follower], &req, tn_buf_data(&b), tn_buf_size(&b), on_done),
        TN_ENOTLEADER);
    assert_int_equal(
        tn_meta_propose_encoded(c.m[leader], &req, tn_buf_data(&b), tn_buf_size(&b) - 8, on_done),
        TN_ECORRUPT);
    tn_buf_append(&b, "\0\0\0\0\0\0\0\0", 8);
    assert_int_equal(
        tn_meta_propose_encoded(c.m[leader], &req, tn_buf_data(&b), tn_buf_size(&b), on_done),
        TN_ECORRUPT);
    /* A snapshot-only record is not proposed. */
    tn_buf_reset(&b);
    uint64_t owners[1] = {1};
    tn_meta_cmd_t po;
    memset(&po, 0, sizeof(po));
    po.type = TN_MC_PART_OWNERS;
    snprintf(po.topic.name, sizeof(po.topic.name), "orders");
    po.owners = owners;
    po.nowners = 1;
    assert_int_equal(tn_meta_cmd_encode(&po, &b), 0);
    assert_int_equal(
        tn_meta_propose_encoded(c.m[leader], &req, tn_buf_data(&b), tn_buf_size(&b), on_done),
        UV_EINVAL);
    tn_buf_fini(&b);

    /* Confirmation, on the leader (a barrier) and on a follower (a NOOP
     * through the leader). */
    async_t a = {0, -1};
    assert_int_equal(tn_meta_confirm(c.m[leader], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);
    a.done = 0;
    a.status = -1;
    assert_int_equal(tn_meta_confirm(c.m[follower], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);

    /* A member that stops registering is marked dead by the leader; its
     * registration brings it back. */
    tn_meta_cmd_t reg;
    memset(&reg, 0, sizeof(reg));
    reg.type = TN_MC_MEMBER_REG;
    reg.member.id = 9;
    snprintf(reg.member.addr, sizeof(reg.member.addr), "127.0.0.9:4153");
    snprintf(reg.member.api_addr, sizeof(reg.member.api_addr), "127.0.0.9:4151");
    reg.member.heartbeat_ms = tn_now_wall_ms();
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &reg, on_done), 0);
    member_wait_t mw = {c.m[follower], 9, TN_MEMBER_DEAD};
    assert_true(run_until(&loop, member_has_status, &mw));
    reg.member.heartbeat_ms = tn_now_wall_ms();
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &reg, on_done), 0);
    mw.status = TN_MEMBER_ALIVE;
    assert_true(run_until(&loop, member_has_status, &mw));
    /* The three real members stayed alive throughout. */
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(tn_meta_member_find(tn_meta_state(c.m[leader]), i)->status,
                         TN_MEMBER_ALIVE);

    /* A fourth node joins: it waits as join_only until the leader adds
     * it, then catches up to the same state. */
    cluster_open(&c, 4, true);
    assert_false(tn_meta_caught_up(c.m[4]));
    assert_int_equal(tn_meta_join(c.m[follower], 4, c.raft[4], on_async, &a), TN_ENOTLEADER);
    a.done = 0;
    a.status = -1;
    assert_int_equal(tn_meta_join(c.m[leader], 4, c.raft[4], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);
    assert_true(run_until(&loop, node4_caught_up, &c));
    tw.n = 4;
    assert_true(run_until(&loop, topic_everywhere, &tw));
    /* Placement is in the state machine: every replica has the same
     * owners, placed over the three members alive when it was made. */
    for (uint32_t p = 0; p < 3; p++) {
        uint64_t owner = tn_meta_state_owner(tn_meta_state(c.m[leader]), "orders", p);
        assert_int_equal(owner, p + 1);
        for (uint64_t i = 1; i <= NNODES; i++)
            assert_int_equal(tn_meta_state_owner(tn_meta_state(c.m[i]), "orders", p), owner);
    }
    /* Joining again at the same address is success; another address for
     * the same id, or another id at a member's address, is refused. */
    a.done = 0;
    a.status = -1;
    assert_int_equal(tn_meta_join(c.m[leader], 4, c.raft[4], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);
    a.done = 0;
    assert_int_equal(tn_meta_join(c.m[leader], 4, "127.0.0.1:1", on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, TN_EIDTAKEN);
    a.done = 0;
    assert_int_equal(tn_meta_join(c.m[leader], 5, c.raft[4], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, UV_EADDRINUSE);

    /* A proposal on the new node goes through the leader too. */
    tn_meta_cmd_t t2 = topic_cmd("payments", true);
    cnt.done = 0;
    assert_int_equal(tn_meta_propose(c.m[4], &req, &t2, on_done), 0);
    w.n = 1;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);
    topic_wait_t tw2 = {&c, 4, "payments"};
    assert_true(run_until(&loop, topic_everywhere, &tw2));

    /* Leadership transfer before a stop: another node leads after. */
    a.done = 0;
    a.status = -1;
    assert_int_equal(tn_meta_transfer(c.m[leader], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);
    assert_true(run_until(&loop, leader_moved, &leader));
    /* On a node that does not lead, there is nothing to hand over. */
    a.done = 0;
    a.status = -1;
    assert_int_equal(tn_meta_transfer(c.m[leader], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

static bool topic_on_leader(void *arg)
{
    topic_wait_t *w = arg;
    return tn_meta_topic_find(tn_meta_state(w->c->m[w->n]), w->topic) != NULL;
}

static bool leader_of_three_moved(void *arg)
{
    uint64_t *old = arg;
    uint64_t now = agreed_leader(the_cluster, 3);
    return now != 0 && now != *old;
}

/* A proposal forwarded to a leader that appended it and then stopped
 * leading without answering (its answer held back here, as if it died):
 * once the follower knows of the new leader, the proposal goes there at
 * once, marked again, and answers 0 although the first copy was
 * committed too; the record is there once, and the old call's late
 * answer is dropped. (Before, it waited for that answer: the whole
 * forward deadline in ternd.) */
static void test_resend_after_failover(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;

    c.hold = true;
    tn_meta_req_t req;
    counter_t cnt = {0, 0};
    req.data = &cnt;
    tn_meta_cmd_t t = topic_cmd("failover", true);
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &t, on_done), 0);
    topic_wait_t tw = {&c, leader, "failover"};
    assert_true(run_until(&loop, topic_on_leader, &tw)); /* the first copy is committed */
    assert_int_equal(cnt.done, 0);                       /* and its answer held back */
    c.hold = false;
    async_t a = {0, 0};
    assert_int_equal(tn_meta_transfer(c.m[leader], on_async, &a), 0);
    assert_true(run_until(&loop, leader_of_three_moved, &leader));
    want_t w = {&cnt, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);
    topic_wait_t all = {&c, 3, "failover"};
    assert_true(run_until(&loop, topic_everywhere, &all));
    for (uint64_t i = 1; i <= 3; i++) {
        const tn_meta_state_t *s = tn_meta_state(c.m[i]);
        size_t n = 0;
        for (size_t k = 0; k < s->ntopics; k++)
            n += strcmp(s->topics[k]->rec.name, "failover") == 0;
        assert_int_equal(n, 1);
    }
    assert_true(run_until(&loop, async_done, &a));
    /* The old leader's late answer: dropped, the request answered once. */
    assert_int_equal(c.nheld, 1);
    hop_t *h = c.held[0];
    h->done(h->done_arg, h->status, h->req.index);
    tn_free(h);
    assert_int_equal(cnt.done, 1);
    /* A new create of the same name (not a copy sent again) conflicts. */
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &t, on_done), 0);
    w.n = 2;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, UV_EEXIST);

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

/* A change a client reads back, forwarded by a follower and answered by
 * the leader late in its 10 s (its answer held back 6 s here), then the
 * follower's confirmation cut off (the leader's answer to its no-op held,
 * as if the leader went out of reach right after the commit): the change
 * is answered with the leader's answer once its own 10 s are up, not 10 s
 * after the leader's answer (a write has 10 s in all, docs/cluster.md).
 * (Before, the confirmation had 10 s of its own: answered after 16 s.) */
static void test_read_back_within_the_write_budget(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;
    c.old_leader = true; /* the no-op confirmation of a leader that names no index */

    c.hold = true;
    tn_meta_req_t req;
    counter_t cnt = {0, 0};
    req.data = &cnt;
    tn_meta_cmd_t t = topic_cmd("readback", true);
    int64_t t0 = tn_now_mono_ms();
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &t, on_done), 0);
    topic_wait_t tw = {&c, leader, "readback"};
    assert_true(run_until(&loop, topic_on_leader, &tw));
    run_within(&loop, never, NULL, 6000 - (tn_now_mono_ms() - t0));
    assert_int_equal(cnt.done, 0);
    assert_int_equal(c.nheld, 1);
    c.hold_type = TN_MC_NOOP; /* the confirmation's no-op: never answered */
    release_held(&c, -1);
    want_t w = {&cnt, 1};
    assert_true(run_until(&loop, has_done, &w));
    int64_t took = tn_now_mono_ms() - t0;
    assert_int_equal(cnt.last, 0); /* the leader's answer */
    if (took > 11000)
        fail_msg("answered after %lld ms: past the write's 10 s", (long long)took);
    /* The held no-op's late answer: dropped. */
    c.hold = false;
    release_held(&c, -1);
    assert_int_equal(cnt.done, 1);

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

typedef struct {
    tn_meta_t *m;
    const char *user;
    bool present;
} user_wait_t;

static bool user_is(void *arg)
{
    user_wait_t *w = arg;
    return (tn_meta_user_find(tn_meta_state(w->m), w->user) != NULL) == w->present;
}

/* A user deletion forwarded by a follower, committed by the leader, whose
 * answer is lost (the connection reset): the follower sends it again, the
 * leader finds nothing to delete, and that copy's answer is success
 * (meta.h). It is a change the client reads back like the first copy's
 * would have been: answered only once this replica confirmed (its no-op
 * held here, so not answered until it is let go). (Before, a copy sent
 * again answered at the leader's answer, with no confirmation: a GET on
 * this node right after its 204 could still find the user.) */
static void test_resent_read_back_confirms(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;
    c.old_leader = true; /* the no-op confirmation of a leader that names no index */

    tn_meta_req_t req;
    counter_t cnt = {0, 0};
    req.data = &cnt;
    tn_meta_cmd_t u = user_cmd("bob");
    assert_int_equal(tn_meta_propose(c.m[leader], &req, &u, on_done), 0);
    tn_meta_cmd_fini(&u);
    want_t w = {&cnt, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);
    user_wait_t uw = {c.m[follower], "bob", true};
    assert_true(run_until(&loop, user_is, &uw));

    c.hold = true;
    c.hold_type = TN_MC_USER_DELETE;
    tn_meta_cmd_t del = delete_cmd(TN_MC_USER_DELETE, "bob");
    assert_int_equal(tn_meta_propose(c.m[follower], &req, &del, on_done), 0);
    user_wait_t gone = {c.m[leader], "bob", false};
    assert_true(run_until(&loop, user_is, &gone)); /* committed */
    assert_int_equal(c.nheld, 1);
    c.hold_type = TN_MC_NOOP;        /* the confirmation's no-op: held */
    release_held(&c, UV_ECONNRESET); /* the leader's answer lost */
    w.n = 2;
    run_within(&loop, has_done, &w, 2000);
    if (cnt.done != 1)
        fail_msg("the copy sent again was answered (%d) with no confirmation here (%d no-op "
                 "held)",
                 cnt.last, c.nheld);
    assert_int_equal(c.nheld, 1);
    c.hold = false;
    release_held(&c, -1);
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);
    gone.m = c.m[follower];
    assert_true(user_is(&gone));

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

/* A change read back through a follower: whether its replica had the
 * topic when the answer came, and when that was. */
typedef struct {
    tn_meta_t *follower;
    const char *topic;
    int done;
    int status;
    bool had_it;
    int64_t at; /* mono ms */
} readback_t;

static void on_read_back(tn_meta_req_t *req, int status)
{
    readback_t *r = req->data;
    r->done++;
    r->status = status;
    r->had_it = tn_meta_topic_find(tn_meta_state(r->follower), r->topic) != NULL;
    r->at = tn_now_mono_ms();
}

static bool read_back_done(void *arg)
{
    return ((readback_t *)arg)->done > 0;
}

/* Propose cmd of topic through node `on` of c; r (reset) gets the answer.
 * Waits at most within_ms for it (r->done 0 if it did not come). Its start
 * (mono ms). */
static int64_t read_back_within(cluster_t *c, uint64_t on, const tn_meta_cmd_t *cmd,
                                const char *topic, readback_t *r, tn_meta_req_t *req,
                                int64_t within_ms)
{
    readback_t fresh = {c->m[on], topic, 0, -1, false, 0};
    *r = fresh;
    req->data = r;
    int64_t t0 = tn_now_mono_ms();
    assert_int_equal(tn_meta_propose(c->m[on], req, cmd, on_read_back), 0);
    run_within(c->loop, read_back_done, r, within_ms);
    return t0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Three nodes whose leader's heartbeats go 1 s apart, with no other
 * entry going out (registrations every 10 s): what a follower learns
 * before its next heartbeat, it learns from a push (meta.c push_commit).
 * The leader's id; *follower one of the others. */
static uint64_t cluster_start_slow_heartbeats(cluster_t *c, uv_loop_t *loop, const char *dir,
                                              uint64_t *follower)
{
    cluster_init(c, loop, dir, 3);
    c->election_ms = 5000;
    c->heartbeat_ms = 1000;
    c->register_ms = 10000;
    for (uint64_t i = 1; i <= 3; i++)
        cluster_open(c, i, false);
    assert_true(run_until(loop, three_caught_up, c));
    assert_true(run_until(loop, members_registered, c));
    uint64_t leader = agreed_leader(c, 3);
    *follower = leader == 1 ? 2 : 1;
    return leader;
}

/* Five waits (ms, sorted here) whose median stays far below the half
 * second a heartbeat alone would cost. */
static void median_not_a_heartbeat(int64_t took[5], const char *what)
{
    qsort(took, 5, sizeof(took[0]), cmp_i64);
    if (took[2] > 250)
        fail_msg("median %s %lld ms (%lld..%lld): the follower waited for a heartbeat", what,
                 (long long)took[2], (long long)took[0], (long long)took[4]);
}

/* A change read back through a follower, with a leader that names the
 * entry's index in its answer: answered once the follower's replica has
 * applied that index (the topic is there at the answer), with no no-op
 * of its own through the leader, the request's index the leader's. The
 * leader sends its commit index at once after applying it (its
 * heartbeats, early), not with its next heartbeat: with heartbeats 1 s apart and no other
 * entry going out (registrations every 10 s), the median of five creates
 * stays far below the half second the heartbeat alone would cost. (Before:
 * a no-op forwarded per change, and each waited for a heartbeat.) */
static void test_read_back_by_index(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t follower;
    (void)cluster_start_slow_heartbeats(&c, &loop, dir, &follower);

    int64_t took[5];
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof(name), "byindex%d", i);
        readback_t r;
        tn_meta_req_t req;
        tn_meta_cmd_t t = topic_cmd(name, true);
        int noops = c.noops;
        int64_t t0 = read_back_within(&c, follower, &t, name, &r, &req, 30000);
        assert_true(read_back_done(&r));
        took[i] = r.at - t0;
        assert_int_equal(r.status, 0);
        if (!r.had_it)
            fail_msg("create %d answered before the follower's replica had it", i);
        assert_int_equal(c.noops, noops); /* no confirmation through the leader */
        assert_true(req.index > 0);
        assert_true(tn_meta_applied_index(c.m[follower]) >= req.index);
    }
    median_not_a_heartbeat(took, "read-back");

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

/* A replica that has applied at least index. */
typedef struct {
    tn_meta_t *m;
    uint64_t index;
} applied_at_t;

static bool applied_reaches(void *arg)
{
    applied_at_t *w = arg;
    return tn_meta_applied_index(w->m) >= w->index;
}

static void count_change(void *arg)
{
    (*(int *)arg)++;
}

/* A follower's listener (tn_meta_on_change: the catalog, which gives the
 * engine a topic's settings) is told of an applied change at the loop's
 * next turns, not at the metastore's next idle tick (100 ms on a quiet
 * node): a cap PATCHed through another node and read back here (the
 * replica) held in this engine only up to 100 ms later, and a consume
 * served meanwhile delivered past it (cluster_meta_partitions). Five
 * changes, each told within three turns of the loop after its entry is
 * applied here. */
static void test_change_told_at_once(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;
    int told = 0;
    tn_meta_on_change(c.m[follower], count_change, &told);
    enum { TURNS = 20000 };
    uint64_t *applied = calloc(TURNS, sizeof(*applied));
    int *seen = calloc(TURNS, sizeof(*seen));
    assert_non_null(applied);
    assert_non_null(seen);
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof(name), "told%d", i);
        counter_t cnt = {0, -1};
        tn_meta_req_t req;
        memset(&req, 0, sizeof(req));
        req.data = &cnt;
        tn_meta_cmd_t t = topic_cmd(name, true);
        assert_int_equal(tn_meta_propose(c.m[leader], &req, &t, on_done), 0);
        /* Turn by turn, what the follower had applied and how often its
         * listener was told, until the leader answered and the
         * follower's listener was told three turns after it applied the
         * entry (or the turns ran out). */
        int n = 0, at = -1;
        while (n < TURNS) {
            uv_run(&loop, UV_RUN_ONCE);
            applied[n] = tn_meta_applied_index(c.m[follower]);
            seen[n] = told;
            n++;
            if (cnt.done > 0 && at < 0)
                for (int k = 0; k < n && at < 0; k++)
                    if (applied[k] >= req.index)
                        at = k;
            if (at >= 0 && n > at + 3)
                break;
        }
        assert_int_equal(cnt.last, 0);
        assert_true(at >= 0);
        /* Told in the turn that applied it or one of the three after. */
        int before = at > 0 ? seen[at - 1] : 0;
        if (seen[at + 3] <= before)
            fail_msg("change %d (index %llu) applied on the follower at turn %d, its listener "
                     "not told within three turns (told %d, then %d)",
                     i, (unsigned long long)req.index, at, seen[at], seen[at + 3]);
    }
    free(applied);
    free(seen);
    tn_meta_on_change(c.m[follower], NULL, NULL);
    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

/* A partition leader's ISR change proposed through a follower: answered
 * once the metastore leader applied it; the replica then waits for its own
 * copy to apply it before it counts on the new ISR (cluster/replica.c
 * on_isr_done: "the STATE follows"). The leader sends its commit index at
 * once after applying it, as for a change read back: with heartbeats 1 s
 * apart and no other entry going out, the median of five stays far below
 * the half second a heartbeat alone would cost (before: 500 ms on average,
 * each publish to that partition waiting meanwhile). The topic is unknown,
 * so the change is refused: the entry is applied all the same. */
static void test_isr_change_pushed(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t follower;
    uint64_t leader = cluster_start_slow_heartbeats(&c, &loop, dir, &follower);

    int64_t took[5];
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof(name), "isr%d", i);
        readback_t r = {c.m[follower], name, 0, -1, false, 0};
        tn_meta_req_t req;
        memset(&req, 0, sizeof(req));
        req.data = &r;
        tn_pstate_member_t isr[2] = {{(uint32_t)follower, 1}, {(uint32_t)leader, 1}};
        int64_t t0 = tn_now_mono_ms();
        assert_int_equal(
            tn_meta_propose_isr(c.m[follower], &req, name, 0, 1, 1, isr, 2, false, on_read_back),
            0);
        assert_true(run_until(&loop, read_back_done, &r));
        assert_int_not_equal(r.status, 0); /* no such partition */
        applied_at_t w = {c.m[follower], tn_meta_applied_index(c.m[leader])};
        assert_true(run_until(&loop, applied_reaches, &w));
        took[i] = tn_now_mono_ms() - t0;
    }
    median_not_a_heartbeat(took, "ISR change applied on the proposing follower after");

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

/* The leader names an index this follower's replica does not reach (as
 * if it were cut off from the leader's appends right after the answer):
 * the change is answered with the leader's answer once the write's own
 * 10 s are up, not later; a deletion gets the wait's UV_ETIMEDOUT (its
 * engine's part waits for the record). Then the fallback, a leader that
 * names no index: a no-op of the follower's. */
static void test_read_back_by_index_bounded(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;
    c.index_add = 1000000;

    readback_t r;
    tn_meta_req_t req;
    tn_meta_cmd_t t = topic_cmd("unreached", true);
    int64_t t0 = read_back_within(&c, follower, &t, "unreached", &r, &req, 8000);
    assert_int_equal(r.done, 0); /* still waiting for the index */
    assert_true(run_until(&loop, read_back_done, &r));
    int64_t took = r.at - t0;
    assert_int_equal(r.status, 0); /* the leader's answer */
    if (took < 9500 || took > 11000)
        fail_msg("answered after %lld ms: not at the write's 10 s", (long long)took);
    assert_int_equal(c.noops, 0);

    readback_t d;
    tn_meta_cmd_t del = delete_cmd(TN_MC_TOPIC_DELETE, "unreached");
    t0 = read_back_within(&c, follower, &del, "unreached", &d, &req, 30000);
    assert_true(read_back_done(&d));
    took = d.at - t0;
    assert_int_equal(d.status, UV_ETIMEDOUT);
    if (took < 9500 || took > 11500)
        fail_msg("the deletion answered after %lld ms", (long long)took);

    /* The fallback: a leader whose answer names no index (an older
     * build) gets a no-op of the follower's, which it waits to apply. */
    c.index_add = 0;
    c.old_leader = true;
    t = topic_cmd("oldleader", true);
    (void)read_back_within(&c, follower, &t, "oldleader", &r, &req, 30000);
    assert_true(read_back_done(&r));
    assert_int_equal(r.status, 0);
    assert_true(r.had_it);
    assert_true(c.noops >= 1);
    assert_int_equal(req.index, 0);

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

typedef struct {
    cluster_t *c;
    uint64_t n; /* nodes 1..n, or the one node n (chan_on) */
    const char *topic, *channel;
    bool present;
} chan_wait_t;

/* Whether node w->n's replica has (w->present) or lacks the channel. */
static bool chan_on(void *arg)
{
    chan_wait_t *w = arg;
    uint64_t stamp;
    return tn_meta_channel_find(tn_meta_state(w->c->m[w->n]), w->topic, w->channel, &stamp) ==
           w->present;
}

static bool chan_everywhere(void *arg)
{
    chan_wait_t *w = arg;
    for (uint64_t i = 1; i <= w->n; i++) {
        chan_wait_t one = {w->c, i, w->topic, w->channel, w->present};
        if (!chan_on(&one))
            return false;
    }
    return true;
}

/* A channel create forwarded to a leader that committed it and then
 * stopped leading without answering; meanwhile the channel is deleted
 * (through the leader, as a user who saw it would); the follower sends
 * the create again to the new leader, which makes the channel anew: the
 * create was never answered, so it took effect after the deletion, and
 * answers 0. The channel it makes is a new one: its stamp is not the
 * deleted channel's, so a node whose engine still has the deleted one
 * (its replica applied the deletion and the create again at once)
 * replaces it rather than keep the old channel's state under the new
 * record. (Before, the copy sent again carried the first copy's stamp.) */
static void test_channel_create_resent_after_its_deletion(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;
    tn_meta_req_t req;
    counter_t cnt = {0, 0};
    req.data = &cnt;
    tn_meta_cmd_t t = topic_cmd("chr", true);
    assert_int_equal(tn_meta_propose(c.m[leader], &req, &t, on_done), 0);
    want_t w = {&cnt, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);

    /* The create through the follower: committed, its answer held back. */
    c.hold = true;
    c.hold_type = TN_MC_CHANNEL_PUT;
    tn_meta_req_t creq;
    counter_t ccnt = {0, 0};
    creq.data = &ccnt;
    tn_meta_cmd_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.type = TN_MC_CHANNEL_PUT;
    ch.if_absent = true;
    snprintf(ch.topic.name, sizeof(ch.topic.name), "chr");
    snprintf(ch.channel, sizeof(ch.channel), "c");
    assert_int_equal(tn_meta_propose(c.m[follower], &creq, &ch, on_done), 0);
    chan_wait_t on_leader = {&c, leader, "chr", "c", true};
    assert_true(run_until(&loop, chan_on, &on_leader));
    uint64_t first = 0;
    assert_true(tn_meta_channel_find(tn_meta_state(c.m[leader]), "chr", "c", &first));
    assert_int_not_equal(first, 0);
    assert_int_equal(ccnt.done, 0);
    c.hold = false;

    /* Deleted through the leader. */
    tn_meta_cmd_t del = ch;
    del.type = TN_MC_CHANNEL_DELETE;
    del.if_absent = false;
    assert_int_equal(tn_meta_propose(c.m[leader], &req, &del, on_done), 0);
    w.n = 2;
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, 0);

    /* The leader hands over: the create goes to the new one, answers 0,
     * and the channel is back everywhere as a new channel. */
    async_t a = {0, 0};
    assert_int_equal(tn_meta_transfer(c.m[leader], on_async, &a), 0);
    assert_true(run_until(&loop, leader_of_three_moved, &leader));
    want_t cw = {&ccnt, 1};
    assert_true(run_until(&loop, has_done, &cw));
    assert_int_equal(ccnt.last, 0);
    chan_wait_t all = {&c, 3, "chr", "c", true};
    assert_true(run_until(&loop, chan_everywhere, &all));
    for (uint64_t i = 1; i <= 3; i++) {
        uint64_t stamp = 0;
        assert_true(tn_meta_channel_find(tn_meta_state(c.m[i]), "chr", "c", &stamp));
        assert_int_not_equal(stamp, 0);
        assert_int_not_equal(stamp, first);
    }
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(c.nheld, 1);
    hop_t *h = c.held[0];
    h->done(h->done_arg, h->status, h->req.index);
    tn_free(h);
    assert_int_equal(ccnt.done, 1);

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

typedef struct {
    cluster_t *c;
    uint64_t id;
} leads_t;

static bool node_leads(void *arg)
{
    leads_t *w = arg;
    uint64_t id = 0;
    const char *api = NULL;
    return tn_meta_leader(w->c->m[w->id], &id, &api) == 0 && id == w->id;
}

/* A leader's graceful-stop handover right after a follower stopped: it
 * goes to the voter still up, never to the one gone (libraft 0.15's own
 * pick, the first voter in configuration order whose next index it
 * counts as current, can be that one: the transfer then timed out). Then
 * with no majority left: no handover, and no wait for one. */
static void test_transfer_to_a_live_voter(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t gone = leader == 1 ? 2 : 1; /* first in configuration order */
    uint64_t live = 6 - leader - gone;

    cluster_close_one(&c, gone);
    async_t a = {0, -1};
    assert_int_equal(tn_meta_transfer(c.m[leader], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);
    leads_t w = {&c, live};
    assert_true(run_until(&loop, node_leads, &w));

    /* The old leader goes too: the one left cannot be elected with
     * nobody else, so it hands nothing over. */
    cluster_close_one(&c, leader);
    a.done = 0;
    a.status = -1;
    assert_int_equal(tn_meta_transfer(c.m[live], on_async, &a), 0);
    assert_true(run_until(&loop, async_done, &a));
    /* Still leading, or stepped down meanwhile (libraft's check-quorum). */
    assert_true(a.status == TN_ENOTFOUND || a.status == 0);

    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

static bool three_agree(void *arg)
{
    return agreed_leader(arg, 3) != 0;
}

/* Three voters that start together (in one loop here, so their libraft
 * ticks come at the same moments) with first election timers 45 ms
 * apart, all three between the same two heartbeat timeouts (100 ms, of a
 * 1 s election timeout): the first to expire stands alone and is elected
 * in the first round. libraft looks at its election timer only when its
 * io ticks, which it asks for once a heartbeat timeout: before, all three
 * stood at the same tick, each passed pre-vote (granting the others'
 * too) and voted for itself, a split vote, and the next round came an
 * election later. The loop first runs 300 ms after the voters start, so
 * the ticks come at 400 and 500 ms whatever the time their opens took. */
static void test_first_timers_apart_elect_at_once(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    cluster_init(&c, &loop, dir, 3);
    c.election_ms = 1000;
    c.heartbeat_ms = 100;
    /* [E/4, E/2] is [250, 500]. All three fall between the same two
     * ticks of a heartbeat apart (400 and 500 ms), where they stood
     * together; with finer ticks node 1 asks first and has some 90 ms,
     * dozens of round trips on loopback even on a busy machine, to win
     * before the others' timers expire. */
    setenv("TERN_TEST_FIRST_TIMERS_MS", "401,495,499", 1);
    uv_update_time(&loop);
    uint64_t t0 = uv_now(&loop); /* every voter's timers start here: the loop's time is cached */
    for (uint64_t i = 1; i <= 3; i++)
        cluster_open(&c, i, false);
    unsetenv("TERN_TEST_FIRST_TIMERS_MS");
    uint64_t opened = uv_hrtime() / 1000000 - t0;
    while (uv_hrtime() / 1000000 < t0 + 300)
        usleep(1000);
    bool led = run_within(&loop, three_agree, &c, 3 * 1000);
    uv_update_time(&loop);
    uint64_t leader = agreed_leader(&c, 3);
    print_message(
        "opened in %llu ms; leader %llu at %llu ms, terms %llu %llu %llu\n",
        (unsigned long long)opened, (unsigned long long)leader,
        (unsigned long long)(uv_now(&loop) - t0), (unsigned long long)tn_meta_term(c.m[1]),
        (unsigned long long)tn_meta_term(c.m[2]), (unsigned long long)tn_meta_term(c.m[3]));
    assert_true(led);
    assert_int_equal(leader, 1);
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(tn_meta_term(c.m[i]), 2);
    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

static bool knows_leader(void *arg)
{
    leads_t *w = arg;
    uint64_t id = 0;
    const char *api = NULL;
    return w->c->m[w->id] != NULL && tn_meta_leader(w->c->m[w->id], &id, &api) == 0 && id != 0;
}

/* A follower that stops and starts again hears from the leader within an
 * election timeout of its start, before its own election timer can
 * expire, as a follower that never left does. The leader's connection to
 * it failed while it was away and its dials were refused; libraft dials
 * again after its connect retry delay, which was a whole second (three
 * election timeouts here, one in a default ternd) whatever the timeouts. */
static void test_restarted_follower_hears_the_leader(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    uint64_t follower = leader == 1 ? 2 : 1;

    cluster_close_one(&c, follower);
    /* An election timeout away: the leader's writes to it failed and its
     * dials were refused. */
    run_within(&loop, never, NULL, 300);
    int64_t t0 = tn_now_mono_ms();
    cluster_open(&c, follower, false);
    leads_t w = {&c, follower};
    bool heard = run_within(&loop, knows_leader, &w, 2000);
    int64_t took = tn_now_mono_ms() - t0;
    print_message("the restarted follower knew the leader after %lld ms\n", (long long)took);
    assert_true(heard);
    assert_true(took < 300);
    assert_int_equal(agreed_leader(&c, 3), leader);
    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

/* The topics the restarted node's state held when it said it was ready
 * (test_restarted_behind_is_not_ready_early); -1: not yet. */
static uint64_t behind_id;
static long ready_topics = -1;

static void on_behind_ready(void *arg)
{
    cluster_t *c = arg;
    if (c->m[behind_id] != NULL && ready_topics < 0)
        ready_topics = (long)tn_meta_state(c->m[behind_id])->ntopics;
}

static bool behind_ready(void *arg)
{
    (void)arg;
    return ready_topics >= 0;
}

/* A follower restarted behind (the leader committed entries while it was
 * away) is not ready before its state has them: the leader's first
 * append is refused (its log lacks the entry before), so its own commit
 * index stays at its start's, and it was counted caught up at that older
 * state (a deleted topic made again from it by the catalog). */
static void test_restarted_behind_is_not_ready_early(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uv_loop_t loop;
    cluster_t c;
    uint64_t leader = cluster_start3(&c, &loop, dir, 3);
    behind_id = leader == 1 ? 2 : 1;
    size_t before = tn_meta_state(c.m[leader])->ntopics;

    cluster_close_one(&c, behind_id);
    propose_topics(&loop, c.m[leader], 0, 200);
    c.on_ready = on_behind_ready;
    ready_topics = -1;
    cluster_open(&c, behind_id, false);
    assert_true(run_until(&loop, behind_ready, NULL));
    print_message("the restarted follower was ready with %ld of %zu topics\n", ready_topics,
                  before + 200);
    assert_int_equal(ready_topics, (long)(before + 200));
    c.on_ready = NULL;
    cluster_close_all(&c);
    tu_rmrf(dir);
    free(dir);
}

/* A node whose peers never come: no leader, so proposals are answered
 * TN_ENOLEADER after their bound, and the leader-only calls refuse. */
static void test_no_leader(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    char *dir = tu_tempdir();
    char mdir[4096];
    snprintf(mdir, sizeof(mdir), "%s/meta", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    char addr[3][32];
    tn_meta_peer_t peers[3];
    for (int i = 0; i < 3; i++) {
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", tu_free_port(false));
        peers[i].id = (uint64_t)i + 1;
        snprintf(peers[i].raft_addr, sizeof(peers[i].raft_addr), "%s", addr[i]);
    }
    tn_meta_opts_t o;
    memset(&o, 0, sizeof(o));
    o.dir = mdir;
    o.node_id = 1;
    o.address = addr[0];
    o.election_ms = 150;
    o.heartbeat_ms = 50;
    char err[256] = "";
    tn_meta_t *m = NULL;
    /* Peer lists that cannot be a configuration are refused up front. */
    o.peers = peers + 1;
    o.npeers = 2;
    assert_int_equal(tn_meta_open(&loop, &o, &m, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "does not name this node"));
    tn_meta_peer_t dup[2] = {peers[0], peers[0]};
    o.peers = dup;
    assert_int_equal(tn_meta_open(&loop, &o, &m, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "listed twice"));
    tn_meta_peer_t moved[1] = {peers[0]};
    snprintf(moved[0].raft_addr, sizeof(moved[0].raft_addr), "127.0.0.1:1");
    o.peers = moved;
    o.npeers = 1;
    assert_int_equal(tn_meta_open(&loop, &o, &m, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "in the peer list"));
    o.peers = peers;
    o.npeers = 3;
    o.join_only = true;
    assert_int_equal(tn_meta_open(&loop, &o, &m, err, sizeof(err)), UV_EINVAL);
    o.join_only = false;
    if (tn_meta_open(&loop, &o, &m, err, sizeof(err)) != 0)
        fail_msg("tn_meta_open: %s", err);

    tn_meta_req_t req;
    counter_t cnt = {0, 0};
    req.data = &cnt;
    tn_meta_cmd_t t = topic_cmd("orders", true);
    /* The proposal's deadline counts from the loop's time, which the
     * opens above (their fsyncs) left behind by up to 100 ms and more on a
     * busy machine; a proposal made from a loop callback sees it fresh. */
    uv_update_time(&loop);
    int64_t start = tn_now_mono_ms();
    assert_int_equal(tn_meta_propose(m, &req, &t, on_done), 0);
    want_t w = {&cnt, 1};
    assert_true(run_until(&loop, has_done, &w));
    assert_int_equal(cnt.last, TN_ENOLEADER);
    assert_true(tn_now_mono_ms() - start >= 4900);
    assert_null(tn_meta_topic_find(tn_meta_state(m), "orders"));
    /* Given a request's budget (until), a confirmation and a proposal end
     * there, not at their own bounds (5 s waiting for a leader, here past
     * the confirmation's until too). The loop's clock, as until's. */
    uv_update_time(&loop);
    uint64_t until = uv_now(&loop) + 300;
    async_t ca = {0, -1};
    assert_int_equal(tn_meta_confirm_until(m, until, on_async, &ca), 0);
    cnt.done = 0;
    w.n = 1;
    assert_int_equal(tn_meta_propose_until(m, &req, &t, until, on_done), 0);
    assert_true(run_until(&loop, async_done, &ca));
    uint64_t confirm_at = uv_now(&loop);
    assert_true(run_until(&loop, has_done, &w));
    uint64_t propose_at = uv_now(&loop);
    printf("within a budget of 300 ms: confirmation %d after %llu ms, proposal %d after %llu ms\n",
           ca.status, (unsigned long long)(confirm_at - (until - 300)), cnt.last,
           (unsigned long long)(propose_at - (until - 300)));
    assert_int_equal(ca.status, TN_ENOLEADER);
    assert_int_equal(cnt.last, TN_ENOLEADER);
    assert_true(confirm_at >= until && confirm_at < until + 4000);
    assert_true(propose_at >= until && propose_at < until + 4000);
    /* A budget spent already: refused at once, nothing proposed. */
    assert_int_equal(tn_meta_confirm_until(m, uv_now(&loop), on_async, &ca), UV_ETIMEDOUT);
    assert_int_equal(tn_meta_propose_until(m, &req, &t, uv_now(&loop), on_done), UV_ETIMEDOUT);
    assert_int_equal(ca.done, 1);
    assert_int_equal(cnt.done, 1);
    uint64_t id = 0;
    const char *api = NULL;
    assert_int_equal(tn_meta_leader(m, &id, &api), TN_ENOLEADER);
    assert_false(tn_meta_caught_up(m));
    assert_false(tn_meta_ready(m));
    async_t a = {0, -1};
    assert_int_equal(tn_meta_join(m, 4, "127.0.0.1:2", on_async, &a), TN_ENOTLEADER);
    assert_int_equal(tn_meta_transfer(m, on_async, &a), 0); /* not the leader: nothing to do */
    assert_true(run_until(&loop, async_done, &a));
    assert_int_equal(a.status, 0);
    close_meta(&loop, m);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmrf(dir);
    free(dir);
}

/* The Raft configuration keeps the address a node first started on; a
 * restart on another one says so at error level. */
static void test_moved_address(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char mdir[4096], logpath[4200];
    snprintf(mdir, sizeof(mdir), "%s/meta", dir);
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_meta_t *m = open_meta(&loop, mdir, 64);
    close_meta(&loop, m);
    char moved[32];
    snprintf(moved, sizeof(moved), "127.0.0.1:%d", tu_free_port(false));
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    tn_log_set_fd(fd);
    tn_meta_opts_t o;
    memset(&o, 0, sizeof(o));
    o.dir = mdir;
    o.node_id = 1;
    o.address = moved;
    o.election_ms = 150;
    o.heartbeat_ms = 50;
    char err[256] = "";
    int rc = tn_meta_open(&loop, &o, &m, err, sizeof(err));
    if (rc != 0)
        fail_msg("tn_meta_open: %s", err);
    assert_true(run_until(&loop, is_ready, m));
    close_meta(&loop, m);
    tn_log_set_fd(2);
    close(fd);
    FILE *f = fopen(logpath, "r");
    char text[8192] = "";
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    char want[200];
    snprintf(want, sizeof(want), "records node 1 at 127.0.0.1:0, but it now advertises %s", moved);
    if (strstr(text, want) == NULL || strstr(text, "error") == NULL)
        fail_msg("no error line about the address in: %s", text);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_codec_refusals),
        cmocka_unit_test(test_codec_members),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_old_snapshot_placement),
        cmocka_unit_test(test_placement_skips),
        cmocka_unit_test(test_again_answers),
        cmocka_unit_test(test_child_counts),
        cmocka_unit_test(test_parent_delete_detaches_children),
        cmocka_unit_test(test_restore_settles_old_links),
        cmocka_unit_test(test_update_if_unchanged),
        cmocka_unit_test(test_state_answers),
        cmocka_unit_test(test_root_invariants),
        cmocka_unit_test(test_snapshot_roundtrip),
        cmocka_unit_test(test_replica_restart),
        cmocka_unit_test(test_room_judge_counts_the_spent),
        cmocka_unit_test(test_propose_answers_later),
        cmocka_unit_test(test_previous_log_replays),
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_resend_after_failover),
        cmocka_unit_test(test_read_back_within_the_write_budget),
        cmocka_unit_test(test_resent_read_back_confirms),
        cmocka_unit_test(test_read_back_by_index),
        cmocka_unit_test(test_read_back_by_index_bounded),
        cmocka_unit_test(test_isr_change_pushed),
        cmocka_unit_test(test_change_told_at_once),
        cmocka_unit_test(test_transfer_to_a_live_voter),
        cmocka_unit_test(test_first_timers_apart_elect_at_once),
        cmocka_unit_test(test_restarted_follower_hears_the_leader),
        cmocka_unit_test(test_restarted_behind_is_not_ready_early),
        cmocka_unit_test(test_channel_create_resent_after_its_deletion),
        cmocka_unit_test(test_no_leader),
        cmocka_unit_test(test_moved_address),
    };
    if (getenv("XXFILTER"))
        cmocka_set_test_filter(getenv("XXFILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
