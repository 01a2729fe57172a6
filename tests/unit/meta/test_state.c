/* Tests of the state machine's NSQ fleet records: TOPIC_GROW_FOR (one
 * partition per member for an NSQ topic, idempotent, refused for native
 * topics, unknown topics and members) and MEMBER_REC (the NSQ door's
 * addresses in the member record), their codec, the previous build's
 * MEMBER_REG still decoding and applied without losing those addresses,
 * and snapshots keeping both; channels' stamps (CHANNEL_PUT with and
 * without one, kept beside the names and in snapshots). */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),          cmocka_unit_test(test_previous_registration),
        cmocka_unit_test(test_grow_for),       cmocka_unit_test(test_grow_for_bound),
        cmocka_unit_test(test_channel_stamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
