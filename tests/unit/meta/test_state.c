/* Tests of the state machine's NSQ fleet records: TOPIC_GROW_FOR (one
 * partition per member for an NSQ topic, idempotent, refused for native
 * topics, unknown topics and members) and MEMBER_REC (the NSQ door's
 * addresses in the member record), their codec, the previous build's
 * MEMBER_REG still decoding and applied without losing those addresses,
 * and snapshots keeping both; channels' stamps (CHANNEL_PUT with and
 * without one, kept beside the names and in snapshots); /v1 creation
 * marks (TOPIC_PUT's mark, TOPIC_READY's compare-and-set, the mark
 * cleared when its member is fenced, kept in snapshots), and the
 * take-back's conditional TOPIC_DELETE (only the record made at its
 * stamp). */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/alloc.h"
#include "core/err.h"
#include "meta/state.h"

#include <stdio.h>
#include <string.h>

/* An NSQ door's topic (not native), with a 60 s visibility timeout. */
static tn_meta_cmd_t nsq_topic(const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c = tu_meta_state_topic_cmd(name, partitions);
    c.topic.visibility_timeout_ms = 60000;
    return c;
}

static tn_meta_cmd_t rec_cmd(uint64_t id, int64_t heartbeat, uint16_t tcp_port)
{
    tn_meta_cmd_t c = tu_meta_rec_cmd(id, 0, 0);
    c.member.heartbeat_ms = heartbeat;
    snprintf(c.member.nsq.broadcast, sizeof(c.member.nsq.broadcast), "10.0.0.%llu",
             (unsigned long long)id);
    snprintf(c.member.nsq.hostname, sizeof(c.member.nsq.hostname), "node%llu",
             (unsigned long long)id);
    c.member.nsq.tcp_port = tcp_port;
    c.member.nsq.http_port = 4151;
    snprintf(c.member.nsq.version, sizeof(c.member.nsq.version), "0.1.0");
    return c;
}

static tn_meta_cmd_t grow_for(const char *topic, uint64_t member)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_GROW_FOR;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    c.member.id = member;
    return c;
}

static int apply(tn_meta_state_t *s, tn_meta_cmd_t c)
{
    return tn_meta_state_apply(s, &c);
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
    for (size_t n = 0; n < tn_buf_size(&b); n++) {
        tn_meta_cmd_t x;
        assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), n, &x, &used), TN_ESHORT);
    }
    /* One byte more in the payload (the length says so) is refused. */
    tn_buf_t longer;
    tn_buf_init(&longer);
    tn_buf_append(&longer, tn_buf_data(&b), tn_buf_size(&b));
    unsigned char *p = (unsigned char *)tn_buf_data(&longer);
    uint32_t payload = tn_get_u32(p + 4);
    if ((TN_META_HDR + payload) % 8 != 0) {
        tn_put_u32(p + 4, payload + 1);
        tn_meta_cmd_t x;
        assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&longer), &x, &used), TN_ECORRUPT);
    }
    tn_buf_fini(&longer);
    tn_buf_fini(&b);
}

static uint64_t owner(const tn_meta_state_t *s, const char *topic, uint32_t p)
{
    return tn_meta_state_owner(s, topic, p);
}

static uint32_t partitions(const tn_meta_state_t *s, const char *topic)
{
    return tn_meta_topic_find(s, topic)->rec.partitions;
}

static void test_codec(void **state)
{
    (void)state;
    tn_meta_cmd_t c = grow_for("fleet", 3), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_TOPIC_GROW_FOR);
    assert_string_equal(d.topic.name, "fleet");
    assert_int_equal(d.member.id, 3);

    c = rec_cmd(12, 1700000000123LL, 4150);
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_MEMBER_REC);
    assert_int_equal(d.member.id, 12);
    assert_string_equal(d.member.addr, "10.0.0.12:4153");
    assert_string_equal(d.member.api_addr, "10.0.0.12:4151");
    assert_int_equal(d.member.heartbeat_ms, 1700000000123LL);
    assert_string_equal(d.member.nsq.broadcast, "10.0.0.12");
    assert_string_equal(d.member.nsq.hostname, "node12");
    assert_int_equal(d.member.nsq.tcp_port, 4150);
    assert_int_equal(d.member.nsq.http_port, 4151);
    assert_string_equal(d.member.nsq.version, "0.1.0");

    /* What cannot be a record does not encode. */
    tn_buf_t b;
    tn_buf_init(&b);
    c = grow_for("fleet", 0);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = rec_cmd(0, 1, 4150);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    /* Damage does not decode: member id 0, an invalid topic name. */
    c = grow_for("fleet", 1);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&b);
    size_t used;
    p[TN_META_HDR + 2 + 5] = 0; /* the id's low byte: 0 */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    p[TN_META_HDR + 2 + 5] = 1;
    p[TN_META_HDR + 2] = '/'; /* "/leet" */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);
}

/* The previous build's MEMBER_REG, written out byte by byte, still
 * decodes; applied over a MEMBER_REC it keeps the NSQ addresses it does
 * not carry. */
static void test_previous_registration(void **state)
{
    (void)state;
    /* "TM" v1 type 9, payload 8 + (2+6) + (2+6) + 8 = 32, no padding. */
    static const unsigned char old[40] = {
        'T',  'M',  1,   9,   32,  0,   0,   0,   /* header */
        5,    0,    0,   0,   0,   0,   0,   0,   /* id 5 */
        6,    0,    'h', ':', '4', '1', '5', '3', /* Raft address */
        6,    0,    'h', ':', '4', '1', '5', '1', /* API address */
        0xe8, 0x03, 0,   0,   0,   0,   0,   0,   /* heartbeat 1000 */
    };
    tn_meta_cmd_t d;
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(old, sizeof(old), &d, &used), 0);
    assert_int_equal(used, sizeof(old));
    assert_int_equal(d.type, TN_MC_MEMBER_REG);
    assert_int_equal(d.member.id, 5);
    assert_string_equal(d.member.addr, "h:4153");
    assert_string_equal(d.member.api_addr, "h:4151");
    assert_int_equal(d.member.heartbeat_ms, 1000);
    assert_int_equal(d.member.nsq.tcp_port, 0);

    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(tn_meta_state_apply(&s, &d), 0);
    const tn_meta_member_t *m = tn_meta_member_find(&s, 5);
    assert_string_equal(m->api_addr, "h:4151");
    assert_int_equal(m->nsq.tcp_port, 0);
    assert_string_equal(m->nsq.broadcast, "");
    assert_int_equal(apply(&s, rec_cmd(5, 2000, 24150)), 0);
    assert_int_equal(m->nsq.tcp_port, 24150);
    assert_string_equal(m->api_addr, "10.0.0.5:4151");
    /* The previous build's registration again: the NSQ door stays. */
    d.member.heartbeat_ms = 3000;
    assert_int_equal(tn_meta_state_apply(&s, &d), 0);
    assert_int_equal(m->heartbeat_ms, 3000);
    assert_string_equal(m->api_addr, "h:4151");
    assert_int_equal(m->nsq.tcp_port, 24150);
    assert_string_equal(m->nsq.hostname, "node5");
    tn_meta_state_fini(&s);
}

static void test_grow_for(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal(apply(&s, rec_cmd(id, 1000, (uint16_t)(4150 + id))), 0);
    /* An NSQ topic made through node 2: p mod n puts partition 0 on 1. */
    assert_int_equal(apply(&s, nsq_topic("fleet", 1)), 0);
    assert_int_equal(owner(&s, "fleet", 0), 1);
    uint64_t fp = tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "fleet")->rec);
    /* Member 1 owns one already: nothing changes. */
    assert_int_equal(apply(&s, grow_for("fleet", 1)), 0);
    assert_int_equal(partitions(&s, "fleet"), 1);
    assert_true(tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "fleet")->rec) == fp);
    /* Member 2 owns none: one partition more, its own. */
    assert_int_equal(apply(&s, grow_for("fleet", 2)), 0);
    assert_int_equal(partitions(&s, "fleet"), 2);
    assert_int_equal(owner(&s, "fleet", 1), 2);
    /* Asked again (a second publish, or an ask that crossed the first):
     * still one. */
    assert_int_equal(apply(&s, grow_for("fleet", 2)), 0);
    assert_int_equal(apply(&s, grow_for("fleet", 2)), 0);
    assert_int_equal(partitions(&s, "fleet"), 2);
    assert_int_equal(apply(&s, grow_for("fleet", 3)), 0);
    assert_int_equal(apply(&s, grow_for("fleet", 3)), 0);
    assert_int_equal(partitions(&s, "fleet"), 3);
    assert_int_equal(owner(&s, "fleet", 2), 3);
    assert_int_equal(s.unassigned, 0);
    assert_int_equal(tn_meta_state_owned(&s, 3), 1);
    /* A dead member's ask still counts (it is the one publishing), and a
     * dead owner keeps its partition: no second one when it comes back. */
    tn_meta_cmd_t dead;
    memset(&dead, 0, sizeof(dead));
    dead.type = TN_MC_MEMBER_STATUS;
    dead.member.id = 3;
    dead.member.status = TN_MEMBER_DEAD;
    dead.member.heartbeat_ms = 1000;
    assert_int_equal(tn_meta_state_apply(&s, &dead), 0);
    assert_int_equal(apply(&s, rec_cmd(3, 2000, 4153)), 0);
    assert_int_equal(apply(&s, grow_for("fleet", 3)), 0);
    assert_int_equal(partitions(&s, "fleet"), 3);

    /* Refusals change nothing. */
    assert_int_equal(apply(&s, grow_for("nosuch", 1)), TN_ENOTFOUND);
    assert_int_equal(apply(&s, grow_for("fleet", 9)), UV_ENOENT);
    tn_meta_cmd_t native = nsq_topic("orders", 2);
    native.topic.native = true;
    snprintf(native.topic.owner, sizeof(native.topic.owner), "alice");
    assert_int_equal(tn_meta_state_apply(&s, &native), 0);
    assert_int_equal(owner(&s, "orders", 0), 1);
    assert_int_equal(owner(&s, "orders", 1), 2);
    assert_int_equal(apply(&s, grow_for("orders", 3)), UV_EPERM);
    assert_int_equal(partitions(&s, "orders"), 2);
    assert_int_equal(partitions(&s, "fleet"), 3);

    /* A growth through TOPIC_PUT afterwards places only its new
     * partitions, p mod n; the asked-for ones keep their owners. */
    tn_meta_cmd_t grown = nsq_topic("fleet", 5);
    grown.if_absent = false;
    assert_int_equal(tn_meta_state_apply(&s, &grown), 0);
    const uint64_t want[5] = {1, 2, 3, 1, 2};
    for (uint32_t p = 0; p < 5; p++)
        assert_int_equal(owner(&s, "fleet", p), want[p]);

    /* A snapshot keeps the owners and the members' NSQ doors. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    for (uint32_t p = 0; p < 5; p++)
        assert_int_equal(owner(&r, "fleet", p), want[p]);
    for (uint64_t id = 1; id <= 3; id++) {
        const tn_meta_member_t *m = tn_meta_member_find(&r, id);
        assert_non_null(m);
        assert_int_equal(m->nsq.tcp_port, id == 3 ? 4153 : 4150 + id);
        assert_int_equal(m->nsq.http_port, 4151);
        assert_string_equal(m->nsq.version, "0.1.0");
    }
    assert_string_equal(tn_meta_member_find(&r, 2)->nsq.hostname, "node2");
    /* Restored and applied states take the next ask the same way. */
    assert_int_equal(apply(&s, nsq_topic("later", 1)), 0);
    assert_int_equal(apply(&r, nsq_topic("later", 1)), 0);
    assert_int_equal(apply(&s, grow_for("later", 3)), 0);
    assert_int_equal(apply(&r, grow_for("later", 3)), 0);
    assert_int_equal(partitions(&s, "later"), 2);
    assert_int_equal(partitions(&r, "later"), 2);
    assert_int_equal(owner(&r, "later", 1), 3);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* The most partitions a topic can have: no more by asking. */
static void test_grow_for_bound(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, rec_cmd(1, 1000, 4150)), 0);
    assert_int_equal(apply(&s, rec_cmd(2, 1000, 4150)), 0);
    assert_int_equal(apply(&s, nsq_topic("full", TN_META_MAX_PARTITIONS)), 0);
    /* Member 3 came later and owns none of it. */
    assert_int_equal(apply(&s, rec_cmd(3, 1000, 4150)), 0);
    assert_int_equal(apply(&s, grow_for("full", 3)), UV_ERANGE);
    assert_int_equal(partitions(&s, "full"), TN_META_MAX_PARTITIONS);
    tn_meta_state_fini(&s);
}

static tn_meta_cmd_t channel_cmd(uint8_t type, const char *topic, const char *channel,
                                 uint64_t stamp)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    snprintf(c.channel, sizeof(c.channel), "%s", channel);
    c.chan_stamp = stamp;
    return c;
}

static uint64_t stamp_of(const tn_meta_state_t *s, const char *topic, const char *channel)
{
    uint64_t stamp = 1;
    assert_true(tn_meta_channel_find(s, topic, channel, &stamp));
    return stamp;
}

/* A channel's stamp (cmd.h CHANNEL_PUT): carried by the command, kept by
 * the state beside the name (a PUT of a recorded channel keeps it; a
 * delete and a new PUT replace it), written into snapshots; an older
 * build's CHANNEL_PUT, without one, decodes and applies as stamp 0, and
 * a stamp of 0 written out is refused. */
static void test_channel_stamps(void **state)
{
    (void)state;
    tn_meta_cmd_t c = channel_cmd(TN_MC_CHANNEL_PUT, "t", "c", 0x1122334455667788ULL), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_CHANNEL_PUT);
    assert_string_equal(d.channel, "c");
    assert_true(d.chan_stamp == 0x1122334455667788ULL);

    /* The older encoding: no stamp (what an entry of the previous build
     * holds, byte for byte what encoding stamp 0 gives). */
    c = channel_cmd(TN_MC_CHANNEL_PUT, "t", "c", 0);
    roundtrip(&c, &d);
    assert_true(d.chan_stamp == 0);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    const unsigned char *old = (const unsigned char *)tn_buf_data(&b);
    assert_int_equal(tn_get_u32(old + 4), 1 + 2 + 1 + 2 + 1); /* flag, "t", "c" */
    /* A stamp of 0 written out is not a stamp. */
    tn_buf_t zero;
    tn_buf_init(&zero);
    assert_int_equal(tn_buf_append(&zero, old, TN_META_HDR + 7), 0);
    uint8_t z[8 + 7] = {0}; /* eight zero bytes, then the padding to 8 */
    assert_int_equal(tn_buf_append(&zero, z, sizeof(z) - 6), 0);
    unsigned char *zp = (unsigned char *)tn_buf_data(&zero);
    tn_put_u32(zp + 4, 7 + 8);
    size_t used;
    assert_int_equal(tn_buf_size(&zero) % 8, 0);
    assert_int_equal(tn_meta_cmd_decode(zp, tn_buf_size(&zero), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&zero);
    tn_buf_fini(&b);
    /* DELETE has no stamp. */
    c = channel_cmd(TN_MC_CHANNEL_DELETE, "t", "c", 0);
    roundtrip(&c, &d);

    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, nsq_topic("t", 1)), 0);
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", "b", 0)), 0); /* older */
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", "d", 40)), 0);
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", "c", 30)), 0);
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", "a", 10)), 0);
    assert_true(stamp_of(&s, "t", "a") == 10);
    assert_true(stamp_of(&s, "t", "b") == 0);
    assert_true(stamp_of(&s, "t", "c") == 30);
    assert_true(stamp_of(&s, "t", "d") == 40);
    /* A PUT of a recorded channel changes nothing. */
    c = channel_cmd(TN_MC_CHANNEL_PUT, "t", "c", 31);
    c.if_absent = true;
    assert_int_equal(apply(&s, c), UV_EEXIST);
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", "c", 32)), 0);
    assert_true(stamp_of(&s, "t", "c") == 30);
    /* Deleted and made again: another stamp; the others stay beside their
     * names. */
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_DELETE, "t", "b", 0)), 0);
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_DELETE, "t", "c", 0)), 0);
    assert_false(tn_meta_channel_exists(&s, "t", "c"));
    assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", "c", 33)), 0);
    assert_true(stamp_of(&s, "t", "a") == 10);
    assert_true(stamp_of(&s, "t", "c") == 33);
    assert_true(stamp_of(&s, "t", "d") == 40);
    /* Many channels (the arrays grow together). */
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%03d", 99 - i);
        assert_int_equal(apply(&s, channel_cmd(TN_MC_CHANNEL_PUT, "t", name, 1000 + i)), 0);
    }
    assert_true(stamp_of(&s, "t", "m000") == 1099);
    assert_true(stamp_of(&s, "t", "m099") == 1000);
    assert_true(stamp_of(&s, "t", "d") == 40);

    /* A snapshot keeps every stamp. */
    tn_buf_t snap;
    tn_buf_init(&snap);
    assert_int_equal(tn_meta_state_snapshot(&s, &snap), 0);
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&snap), tn_buf_size(&snap)), 0);
    assert_true(stamp_of(&r, "t", "a") == 10);
    assert_true(stamp_of(&r, "t", "c") == 33);
    assert_true(stamp_of(&r, "t", "m050") == 1049);
    tn_buf_fini(&snap);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* --- creation marks (cmd.h tn_meta_topic_t.creating, state.h) --------------------- */

/* A /v1 creation's TOPIC_PUT of name by member, made at at. */
static tn_meta_cmd_t marked_topic(const char *name, uint64_t member, int64_t at)
{
    tn_meta_cmd_t c = tu_meta_native_topic_cmd(name, 2, 1, 1);
    c.if_absent = true;
    c.topic.created_at_ms = at;
    c.topic.creating = member;
    return c;
}

static uint64_t mark_of(const tn_meta_state_t *s, const char *name)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, name);
    assert_non_null(e);
    return e->rec.creating;
}

static void test_creation_mark_codec(void **state)
{
    (void)state;
    tn_meta_cmd_t c = marked_topic("t", 7, 1000), d;
    roundtrip(&c, &d);
    assert_true(d.topic.creating == 7);
    assert_true(d.if_absent && d.topic.native);
    /* With an owner rule before it. */
    c.owner_rule = TN_META_OWN_CHECK;
    snprintf(c.topic.name, sizeof(c.topic.name), "t.c.DLQ");
    roundtrip(&c, &d);
    assert_true(d.topic.creating == 7);
    assert_int_equal(d.owner_rule, TN_META_OWN_CHECK);
    /* Without a mark: the older encoding, 8 bytes shorter, ready. */
    tn_buf_t with, without;
    tn_buf_init(&with);
    tn_buf_init(&without);
    c = marked_topic("t", 7, 1000);
    assert_int_equal(tn_meta_cmd_encode(&c, &with), 0);
    c.topic.creating = 0;
    assert_int_equal(tn_meta_cmd_encode(&c, &without), 0);
    uint32_t pw = tn_get_u32((const unsigned char *)tn_buf_data(&with) + 4);
    uint32_t po = tn_get_u32((const unsigned char *)tn_buf_data(&without) + 4);
    assert_int_equal(pw, po + 8);
    roundtrip(&c, &d);
    assert_true(d.topic.creating == 0);
    /* A mark of 0 written out is damage. */
    unsigned char *wp = (unsigned char *)tn_buf_data(&with);
    memset(wp + TN_META_HDR + po, 0, 8);
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(wp, tn_buf_size(&with), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&with);
    tn_buf_fini(&without);
    /* TOPIC_READY. */
    c = tu_meta_ready_cmd("t", 1000);
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_TOPIC_READY);
    assert_string_equal(d.topic.name, "t");
    assert_true(d.topic.created_at_ms == 1000);
}

static void test_creation_mark_ready(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(7, 0, 0)), 0);
    assert_int_equal(apply(&s, marked_topic("t", 7, 1000)), 0);
    assert_true(mark_of(&s, "t") == 7);
    /* An update (a PATCH made from the marked copy, or from a copy without
     * it) keeps the stored mark. */
    tn_meta_cmd_t u = marked_topic("t", 0, 1000);
    u.if_absent = false;
    u.if_unchanged = true;
    u.expect = tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "t")->rec);
    u.topic.retention_ms = 7200000;
    assert_int_equal(apply(&s, u), 0);
    assert_true(mark_of(&s, "t") == 7);
    /* Not in the fingerprint: an update made before the mark cleared
     * still lands after. */
    u.expect = tn_meta_topic_fingerprint(&tn_meta_topic_find(&s, "t")->rec);
    u.topic.retention_ms = 3600000;
    /* A READY of another creation of the name is refused: the mark stays. */
    assert_int_equal(apply(&s, tu_meta_ready_cmd("t", 999)), TN_ECHANGED);
    assert_true(mark_of(&s, "t") == 7);
    assert_int_equal(apply(&s, tu_meta_ready_cmd("t", 1000)), 0);
    assert_true(mark_of(&s, "t") == 0);
    assert_int_equal(apply(&s, u), 0);
    /* Again (a copy sent twice): still 0, still ready. */
    assert_int_equal(apply(&s, tu_meta_ready_cmd("t", 1000)), 0);
    assert_true(mark_of(&s, "t") == 0);
    assert_int_equal(apply(&s, tu_meta_ready_cmd("gone", 1000)), TN_ENOTFOUND);
    /* Taken back, then made again by another creation: a stale READY
     * does not ready the new one. */
    tn_meta_cmd_t del;
    memset(&del, 0, sizeof(del));
    del.type = TN_MC_TOPIC_DELETE;
    snprintf(del.topic.name, sizeof(del.topic.name), "t");
    assert_int_equal(apply(&s, del), 0);
    assert_int_equal(apply(&s, tu_meta_ready_cmd("t", 1000)), TN_ENOTFOUND);
    assert_int_equal(apply(&s, marked_topic("t", 7, 2000)), 0);
    assert_int_equal(apply(&s, tu_meta_ready_cmd("t", 1000)), TN_ECHANGED);
    assert_true(mark_of(&s, "t") == 7);
    /* A snapshot keeps the mark. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    assert_true(mark_of(&r, "t") == 7);
    assert_true(tn_meta_topic_find(&r, "t")->rec.created_at_ms == 2000);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

static void test_creation_mark_fenced(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(7, 70, 700)), 0);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(8, 80, 800)), 0);
    assert_int_equal(apply(&s, marked_topic("a", 7, 1000)), 0);
    assert_int_equal(apply(&s, marked_topic("b", 8, 1000)), 0);
    assert_int_equal(apply(&s, marked_topic("c", 7, 1000)), 0);
    /* Member 7's session ends: its creations are ready, 8's not. */
    tn_meta_cmd_t f;
    memset(&f, 0, sizeof(f));
    f.type = TN_MC_MEMBER_FENCE;
    f.member.id = 7;
    f.member.incarnation = 70;
    assert_int_equal(apply(&s, f), 0);
    assert_true(mark_of(&s, "a") == 0);
    assert_true(mark_of(&s, "b") == 8);
    assert_true(mark_of(&s, "c") == 0);
    /* A restart of 8 (another boot id) fences its old session too. */
    assert_int_equal(apply(&s, marked_topic("d", 7, 1000)), 0);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(8, 80, 801)), 0);
    assert_true(mark_of(&s, "b") == 0);
    assert_true(mark_of(&s, "d") == 7);
    /* The same registration again (a heartbeat) fences nothing. */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(7, 70, 700)), 0);
    assert_true(mark_of(&s, "d") == 7);
    tn_meta_state_fini(&s);
}

/* --- a /v1 creation's take-back (cmd.h tn_meta_cmd_t.if_created) ------------------ */

static tn_meta_cmd_t delete_of(const char *name, bool if_created, int64_t at)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.if_created = if_created;
    c.topic.created_at_ms = at;
    return c;
}

static void test_take_back_codec(void **state)
{
    (void)state;
    tn_meta_cmd_t c = delete_of("t", true, 1000), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_TOPIC_DELETE);
    assert_true(d.if_created);
    assert_true(d.topic.created_at_ms == 1000);
    /* A plain delete: the older encoding, 8 bytes shorter, unconditional
     * (its created_at_ms, the purge's, is not written). */
    tn_buf_t with, without;
    tn_buf_init(&with);
    tn_buf_init(&without);
    assert_int_equal(tn_meta_cmd_encode(&c, &with), 0);
    c = delete_of("t", false, 1000);
    assert_int_equal(tn_meta_cmd_encode(&c, &without), 0);
    uint32_t pw = tn_get_u32((const unsigned char *)tn_buf_data(&with) + 4);
    uint32_t po = tn_get_u32((const unsigned char *)tn_buf_data(&without) + 4);
    assert_int_equal(pw, po + 8);
    roundtrip(&c, &d);
    assert_false(d.if_created);
    assert_true(d.topic.created_at_ms == 0);
    /* A stamp cut short is damage. */
    unsigned char cut[TN_META_HDR + 8];
    memset(cut, 0, sizeof(cut));
    memcpy(cut, tn_buf_data(&without), TN_META_HDR + po);
    tn_put_u32(cut + 4, po + 3);
    cut[TN_META_HDR + po] = 0xe8;
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(cut, sizeof(cut), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&with);
    tn_buf_fini(&without);
}

static void test_take_back_conditional(void **state)
{
    (void)state;
    /* Member 7's creation, deleted by a user and made again by 8's
     * before 7's take-back lands: the take-back is refused, and the
     * record made again stays as it was. */
    const tn_meta_cmd_t before[] = {
        tu_meta_rec_cmd(7, 0, 0), tu_meta_rec_cmd(8, 0, 0),   marked_topic("t", 7, 1000),
        delete_of("t", false, 0), marked_topic("t", 8, 2000), tu_meta_ready_cmd("t", 2000),
    };
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++)
        assert_int_equal(tn_meta_state_apply(&s, &before[i]), 0);
    assert_int_equal(apply(&s, delete_of("t", true, 1000)), TN_ECHANGED);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "t");
    assert_non_null(e);
    assert_true(e->rec.created_at_ms == 2000);
    assert_true(e->rec.creating == 0);
    assert_int_equal(e->rec.partitions, 2);
    /* The record it was made for goes. */
    assert_int_equal(apply(&s, marked_topic("u", 7, 3000)), 0);
    assert_int_equal(apply(&s, delete_of("u", true, 3000)), 0);
    assert_null(tn_meta_topic_find(&s, "u"));
    assert_int_equal(apply(&s, delete_of("u", true, 3000)), TN_ENOTFOUND);
    /* A plain delete stays unconditional. */
    assert_int_equal(apply(&s, delete_of("t", false, 1000)), 0);
    assert_null(tn_meta_topic_find(&s, "t"));
    tn_meta_state_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_previous_registration),
        cmocka_unit_test(test_grow_for),
        cmocka_unit_test(test_grow_for_bound),
        cmocka_unit_test(test_channel_stamps),
        cmocka_unit_test(test_creation_mark_codec),
        cmocka_unit_test(test_creation_mark_ready),
        cmocka_unit_test(test_creation_mark_fenced),
        cmocka_unit_test(test_take_back_codec),
        cmocka_unit_test(test_take_back_conditional),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
