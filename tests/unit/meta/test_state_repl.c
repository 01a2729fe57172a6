/* Tests of replicated partitions in the metastore's state machine: the
 * codec of the topic's replication fields, the member incarnation and the
 * partition commands (and that older encodings still read, as factor 1 and
 * incarnation 0); placement of replicas; fencing on a session's end and on
 * a new incarnation; the ISR compare-and-set, forced elections, rebalance
 * and CRC failures through the state machine; snapshots of partition
 * states and fenced members, and the restore of a snapshot from before
 * them. Commands drive the state machine as the Raft log would. */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/alloc.h"
#include "core/err.h"
#include "meta/state.h"

#include <stdio.h>
#include <string.h>

static tn_meta_cmd_t fence(uint64_t id, uint64_t incarnation)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_FENCE;
    c.member.id = id;
    c.member.incarnation = incarnation;
    return c;
}

static tn_meta_cmd_t part(uint8_t type, const char *name, uint32_t p, uint32_t node)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.part = p;
    c.node = node;
    return c;
}

static int apply(tn_meta_state_t *s, tn_meta_cmd_t c)
{
    return tn_meta_state_apply(s, &c);
}

/* Encode, decode (every prefix short), encode again to the same bytes. */
static void roundtrip(const tn_meta_cmd_t *c, tn_meta_cmd_t *out)
{
    tn_buf_t b, again;
    tn_buf_init(&b);
    tn_buf_init(&again);
    assert_int_equal(tn_meta_cmd_encode(c, &b), 0);
    assert_int_equal(tn_buf_size(&b) % 8, 0);
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), out, &used), 0);
    assert_int_equal(used, tn_buf_size(&b));
    for (size_t n = 0; n < tn_buf_size(&b); n++) {
        tn_meta_cmd_t x;
        assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), n, &x, &used), TN_ESHORT);
    }
    assert_int_equal(tn_meta_cmd_encode(out, &again), 0);
    assert_int_equal(tn_buf_size(&again), tn_buf_size(&b));
    assert_memory_equal(tn_buf_data(&again), tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
    tn_buf_fini(&again);
}

/* The encoding of c with its payload byte at `at` (from the payload's
 * start) set to v, decoded: the decoder's answer. */
static int decode_patched(const tn_meta_cmd_t *c, size_t at, uint8_t v)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(c, &b), 0);
    ((unsigned char *)tn_buf_data(&b))[TN_META_HDR + at] = v;
    tn_meta_cmd_t d;
    size_t used;
    int rc = tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used);
    if (rc == 0)
        tn_meta_cmd_fini(&d);
    tn_buf_fini(&b);
    return rc;
}

static uint32_t payload_len(const tn_meta_cmd_t *c)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(c, &b), 0);
    uint32_t n = tn_get_u32((const unsigned char *)tn_buf_data(&b) + 4);
    tn_buf_fini(&b);
    return n;
}

static void test_codec_topic_fields(void **state)
{
    (void)state;
    tn_meta_cmd_t c = tu_meta_native_topic_cmd("orders", 3, 3, 2), d;
    roundtrip(&c, &d);
    assert_int_equal(d.topic.replication_factor, 3);
    assert_int_equal(d.topic.min_insync, 2);
    tn_meta_cmd_fini(&d);
    /* Factor 1 is written as before (no flag, no bytes) and reads as 1/1,
     * whether the record said 1/1 or left the fields 0 (older code). */
    tn_meta_cmd_t one = tu_meta_native_topic_cmd("orders", 3, 1, 1),
                  zero = tu_meta_native_topic_cmd("orders", 3, 0, 0);
    assert_int_equal(payload_len(&one), payload_len(&zero));
    assert_int_equal(payload_len(&one) + 2, payload_len(&c));
    roundtrip(&zero, &d);
    assert_int_equal(d.topic.replication_factor, 1);
    assert_int_equal(d.topic.min_insync, 1);
    tn_meta_cmd_fini(&d);
    /* A fact-1 record keeps the fingerprint it had (0 and 1 alike); a
     * replicated one's covers its fields. */
    assert_true(tn_meta_topic_fingerprint(&one.topic) == tn_meta_topic_fingerprint(&zero.topic));
    tn_meta_cmd_t c2 = tu_meta_native_topic_cmd("orders", 3, 3, 1);
    assert_true(tn_meta_topic_fingerprint(&c.topic) != tn_meta_topic_fingerprint(&c2.topic));
    /* Out of range: refused by the encoder, and by the decoder. */
    tn_buf_t b;
    tn_buf_init(&b);
    tn_meta_cmd_t bad = tu_meta_native_topic_cmd("orders", 3, 6, 1);
    assert_int_equal(tn_meta_cmd_encode(&bad, &b), UV_EINVAL);
    bad = tu_meta_native_topic_cmd("orders", 3, 2, 3);
    assert_int_equal(tn_meta_cmd_encode(&bad, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
    size_t last = payload_len(&c) - 2; /* factor, then min_insync */
    assert_int_equal(decode_patched(&c, last, 6), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, last, 0), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, last + 1, 4), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, last + 1, 0), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, last, 1), TN_ECORRUPT); /* 1/2 */
    assert_int_equal(decode_patched(&c, last, 2), 0);           /* 2/2 */
}

static void test_codec_member_incarnation(void **state)
{
    (void)state;
    tn_meta_cmd_t c = tu_meta_rec_cmd(3, 0x1122334455667788ULL, 0), d;
    roundtrip(&c, &d);
    assert_true(d.member.incarnation == 0x1122334455667788ULL);
    tn_meta_cmd_fini(&d);
    /* Without one (the previous build's MEMBER_REC): 0, unknown. */
    tn_meta_cmd_t old = tu_meta_rec_cmd(3, 0, 0);
    assert_int_equal(payload_len(&old) + 8, payload_len(&c));
    roundtrip(&old, &d);
    assert_true(d.member.incarnation == 0);
    tn_meta_cmd_fini(&d);
    /* An explicit 0 is not an encoding this codec writes. */
    tn_meta_cmd_t small = tu_meta_rec_cmd(3, 1, 0); /* little-endian: its first byte is the 1 */
    assert_int_equal(decode_patched(&small, payload_len(&small) - 8, 0), TN_ECORRUPT);
}

static void test_codec_part_commands(void **state)
{
    (void)state;
    tn_meta_cmd_t d;
    tn_meta_cmd_t isr = part(TN_MC_PART_ISR, "orders", 7, 2);
    isr.leader_epoch = 4;
    isr.expected_pe = 9;
    isr.nisr = 2;
    isr.isr[0] = (tn_pstate_member_t){2, 22};
    isr.isr[1] = (tn_pstate_member_t){3, 33};
    roundtrip(&isr, &d);
    assert_int_equal(d.type, TN_MC_PART_ISR);
    assert_string_equal(d.topic.name, "orders");
    assert_int_equal(d.part, 7);
    assert_int_equal(d.node, 2);
    assert_int_equal(d.leader_epoch, 4);
    assert_int_equal(d.expected_pe, 9);
    assert_int_equal(d.nisr, 2);
    assert_int_equal(d.isr[1].node, 3);
    assert_false(d.channels_checked); /* the flags byte, both ways */
    assert_false(d.isr_unflagged);
    isr.channels_checked = true;
    roundtrip(&isr, &d);
    assert_true(d.channels_checked);
    /* An older build's entry, without the flags byte: read as checked (its
     * leaders had no channel check), and encoded again without it. */
    isr.channels_checked = false;
    isr.isr_unflagged = true;
    roundtrip(&isr, &d);
    assert_true(d.channels_checked);
    assert_true(d.isr_unflagged);
    isr.isr_unflagged = false;
    assert_true(d.isr[1].incarnation == 33);
    tn_meta_cmd_fini(&d);
    /* An empty ISR or a repeated member is refused both ways (decoder: the
     * second member's node patched to the first's). */
    tn_buf_t b;
    tn_buf_init(&b);
    tn_meta_cmd_t empty = isr;
    empty.nisr = 0;
    assert_int_equal(tn_meta_cmd_encode(&empty, &b), UV_EINVAL);
    tn_buf_fini(&b);
    size_t second = 2 + 6 + 4 * 4 + 1 + 12; /* name, part..expected_pe, n, member 0 */
    assert_int_equal(decode_patched(&isr, second, 2), TN_ECORRUPT);

    tn_meta_cmd_t f = fence(5, 0xabcdef);
    roundtrip(&f, &d);
    assert_int_equal(d.type, TN_MC_MEMBER_FENCE);
    assert_int_equal(d.member.id, 5);
    assert_true(d.member.incarnation == 0xabcdef);
    tn_meta_cmd_fini(&d);

    tn_meta_cmd_t lead = part(TN_MC_PART_LEADER, "orders", 1, 3);
    lead.unclean = true;
    roundtrip(&lead, &d);
    assert_int_equal(d.node, 3);
    assert_true(d.unclean);
    tn_meta_cmd_fini(&d);
    assert_int_equal(decode_patched(&lead, payload_len(&lead) - 1, 2), TN_ECORRUPT);

    tn_meta_cmd_t rb = part(TN_MC_PART_REBALANCE, "orders", 2, 0);
    roundtrip(&rb, &d);
    assert_int_equal(d.part, 2);
    tn_meta_cmd_fini(&d);

    tn_meta_cmd_t cor = part(TN_MC_PART_CORRUPT, "orders", 2, 1);
    roundtrip(&cor, &d);
    assert_int_equal(d.node, 1);
    tn_meta_cmd_fini(&d);
    assert_int_equal(decode_patched(&cor, payload_len(&cor) - 4, 0), TN_ECORRUPT); /* node 0 */

    tn_meta_cmd_t st = part(TN_MC_PART_STATE, "orders", 0, 0);
    tn_pstate_t *ps = &st.pstate;
    ps->nreplicas = 3;
    ps->replicas[0] = 1;
    ps->replicas[1] = 2;
    ps->replicas[2] = 3;
    ps->leader = 2;
    ps->leader_epoch = 5;
    ps->partition_epoch = 11;
    ps->nisr = 1;
    ps->isr[0] = (tn_pstate_member_t){2, 20};
    ps->nelr = 1;
    ps->elr[0] = (tn_pstate_member_t){3, 30};
    ps->min_insync = 2;
    ps->corrupt = 1;
    ps->unclean = true;
    roundtrip(&st, &d);
    assert_int_equal(d.pstate.leader, 2);
    assert_int_equal(d.pstate.partition_epoch, 11);
    assert_int_equal(d.pstate.nelr, 1);
    assert_true(d.pstate.elr[0].incarnation == 30);
    assert_int_equal(d.pstate.corrupt, 1);
    assert_true(d.pstate.unclean);
    tn_meta_cmd_fini(&d);
    /* A leader outside the ISR is not a state the controller makes. */
    tn_meta_cmd_t wrong = st;
    wrong.pstate.leader = 1;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&wrong, &b), 0);
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);
}

/* Partition states the state machine told of, in order. */
typedef struct {
    char topic[TN_NAME_MAX + 1];
    uint32_t p;
    bool gone;
    uint32_t leader;
} told_t;

typedef struct {
    told_t v[64];
    size_t n;
} tells_t;

static void on_told(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    tells_t *t = arg;
    assert_true(t->n < 64);
    told_t *x = &t->v[t->n++];
    snprintf(x->topic, sizeof(x->topic), "%s", topic);
    x->p = p;
    x->gone = ps == NULL;
    x->leader = ps != NULL ? ps->leader : 0;
}

/* s tells told of every partition state change from now on. */
static void tell_to(tn_meta_state_t *s, tells_t *told)
{
    told->n = 0;
    s->pstate_cb = on_told;
    s->pstate_arg = told;
}

static bool was_told(const tells_t *t, const char *topic, uint32_t p)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].p == p && strcmp(t->v[i].topic, topic) == 0)
            return true;
    return false;
}

/* Four members, incarnations 100 + id. */
static void four(tn_meta_state_t *s)
{
    tn_meta_state_init(s);
    for (uint64_t id = 1; id <= 4; id++)
        assert_int_equal(apply(s, tu_meta_rec_cmd(id, 100 + id, 0)), 0);
}

/* four's members and topic "r" (native) with partitions, factor and
 * min_insync, placed. */
static void four_with_r(tn_meta_state_t *s, uint32_t partitions, uint8_t factor, uint8_t min_insync)
{
    four(s);
    assert_int_equal(apply(s, tu_meta_native_topic_cmd("r", partitions, factor, min_insync)), 0);
}

static void expect_replicas(const tn_pstate_t *ps, uint32_t a, uint32_t b, uint32_t c)
{
    assert_non_null(ps);
    assert_int_equal(ps->nreplicas, 3);
    assert_int_equal(ps->replicas[0], a);
    assert_int_equal(ps->replicas[1], b);
    assert_int_equal(ps->replicas[2], c);
}

static void test_placement(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four(&s);
    tells_t told;
    tell_to(&s, &told);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("r", 5, 3, 2)), 0);
    /* p starts at index p mod n of the eligible members and wraps. */
    expect_replicas(tn_meta_state_pstate(&s, "r", 0), 1, 2, 3);
    expect_replicas(tn_meta_state_pstate(&s, "r", 1), 2, 3, 4);
    expect_replicas(tn_meta_state_pstate(&s, "r", 2), 3, 4, 1);
    expect_replicas(tn_meta_state_pstate(&s, "r", 3), 4, 1, 2);
    expect_replicas(tn_meta_state_pstate(&s, "r", 4), 1, 2, 3);
    for (uint32_t p = 0; p < 5; p++) {
        const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", p);
        assert_int_equal(ps->leader, ps->replicas[0]);
        assert_int_equal(ps->leader_epoch, 1);
        assert_int_equal(ps->nisr, 3);
        assert_int_equal(ps->min_insync, 2);
        assert_true(ps->isr[0].incarnation == 100 + ps->isr[0].node);
        assert_int_equal(tn_meta_state_owner(&s, "r", p), ps->leader);
        assert_true(was_told(&told, "r", p));
    }
    assert_int_equal(told.n, 5);
    assert_null(tn_meta_state_pstate(&s, "r", 5));
    /* Factor 1 keeps today's owners exactly, and has no state. */
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 5, 1, 1)), 0);
    for (uint32_t p = 0; p < 5; p++) {
        assert_null(tn_meta_state_pstate(&s, "one", p));
        assert_int_equal(tn_meta_state_owner(&s, "one", p), 1 + p % 4);
    }
    assert_int_equal(told.n, 5);
    /* The skip list steers replicas as it does owners. */
    tn_meta_cmd_t sk = tu_meta_native_topic_cmd("skip", 2, 3, 2);
    uint64_t skip[1] = {2};
    sk.skip = skip;
    sk.nskip = 1;
    assert_int_equal(tn_meta_state_apply(&s, &sk), 0);
    expect_replicas(tn_meta_state_pstate(&s, "skip", 0), 1, 3, 4);
    expect_replicas(tn_meta_state_pstate(&s, "skip", 1), 3, 4, 1);
    /* Fewer members than the factor: as many replicas as there are. */
    tn_meta_state_t two;
    tn_meta_state_init(&two);
    assert_int_equal(apply(&two, tu_meta_rec_cmd(1, 11, 0)), 0);
    assert_int_equal(apply(&two, tu_meta_rec_cmd(2, 12, 0)), 0);
    assert_int_equal(tn_meta_state_clamp_factor(&two, 3), 2);
    assert_int_equal(tn_meta_state_clamp_factor(&two, 9), 2);
    assert_int_equal(apply(&two, tu_meta_native_topic_cmd("t", 1, 3, 3)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&two, "t", 0);
    assert_int_equal(ps->nreplicas, 2);
    assert_int_equal(ps->min_insync, 2);
    tn_meta_state_fini(&two);
    /* No member at all: the factor clamps to 1; a replicated topic made
     * before any member waits unplaced and is placed at the first
     * registration. */
    tn_meta_state_t none;
    tn_meta_state_init(&none);
    assert_int_equal(tn_meta_state_clamp_factor(&none, 3), 1);
    assert_int_equal(apply(&none, tu_meta_native_topic_cmd("early", 2, 3, 2)), 0);
    assert_null(tn_meta_state_pstate(&none, "early", 0));
    assert_int_equal(none.unassigned, 2);
    assert_int_equal(apply(&none, tu_meta_rec_cmd(7, 77, 0)), 0);
    ps = tn_meta_state_pstate(&none, "early", 1);
    assert_non_null(ps);
    assert_int_equal(ps->nreplicas, 1);
    assert_int_equal(ps->leader, 7);
    assert_int_equal(none.unassigned, 0);
    tn_meta_state_fini(&none);
    /* Growth places the new partitions the same way; a delete tells each
     * partition gone. */
    tn_meta_cmd_t grow = tu_meta_native_topic_cmd("r", 6, 3, 2);
    grow.if_absent = false;
    told.n = 0;
    assert_int_equal(tn_meta_state_apply(&s, &grow), 0);
    expect_replicas(tn_meta_state_pstate(&s, "r", 5), 2, 3, 4);
    assert_int_equal(told.n, 1);
    tn_meta_cmd_t del;
    memset(&del, 0, sizeof(del));
    del.type = TN_MC_TOPIC_DELETE;
    snprintf(del.topic.name, sizeof(del.topic.name), "r");
    told.n = 0;
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_int_equal(told.n, 6);
    for (size_t i = 0; i < told.n; i++)
        assert_true(told.v[i].gone);
    tn_meta_state_fini(&s);
}

static void test_update_keeps_factor(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 2, 3, 2);
    uint32_t pe = tn_meta_state_pstate(&s, "r", 0)->partition_epoch;
    /* A PUT never changes the factor; a new min_insync reaches every
     * partition state (a change: its partition_epoch moves). */
    tn_meta_cmd_t up = tu_meta_native_topic_cmd("r", 2, 1, 3);
    up.if_absent = false;
    up.topic.min_insync = 3;
    up.topic.replication_factor = 3;
    assert_int_equal(tn_meta_state_apply(&s, &up), 0);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "r");
    assert_int_equal(e->rec.replication_factor, 3);
    assert_int_equal(e->rec.min_insync, 3);
    assert_int_equal(tn_meta_state_pstate(&s, "r", 0)->min_insync, 3);
    assert_int_equal(tn_meta_state_pstate(&s, "r", 1)->partition_epoch, pe + 1);
    up.topic.replication_factor = 1;
    up.topic.min_insync = 1;
    assert_int_equal(tn_meta_state_apply(&s, &up), 0);
    e = tn_meta_topic_find(&s, "r");
    assert_int_equal(e->rec.replication_factor, 3);
    assert_int_equal(e->rec.min_insync, 1);
    assert_non_null(tn_meta_state_pstate(&s, "r", 0));
    tn_meta_state_fini(&s);
}

/* A TOPIC_PUT with clamp carries the factor asked; its apply clamps it to
 * the members alive and live in the replicated state (so every replica,
 * whichever node took the request, records the same), min_insync to the
 * factor. Without clamp (an older build's entry, a snapshot record) the
 * factor is taken as written. A copy sent again after the members changed
 * still answers as the first did. */
static void test_clamp_at_apply(void **state)
{
    (void)state;
    /* The flag round-trips in bit 6; an unknown bit 7 is refused. */
    tn_meta_cmd_t c = tu_meta_native_topic_cmd("orders", 2, 3, 2), d;
    c.clamp = true;
    roundtrip(&c, &d);
    assert_true(d.clamp);
    assert_int_equal(d.topic.replication_factor, 3);
    tn_meta_cmd_fini(&d);
    tn_meta_cmd_t plain = tu_meta_native_topic_cmd("orders", 2, 3, 2);
    roundtrip(&plain, &d);
    assert_false(d.clamp);
    tn_meta_cmd_fini(&d);
    assert_int_equal(decode_patched(&c, 0, 1 | TN_META_TOPIC_REPL | TN_META_TOPIC_CLAMP), 0);
    assert_int_equal(decode_patched(&c, 0, 1 | TN_META_TOPIC_REPL | 128), TN_ECORRUPT);

    /* No member yet (a lone node before its registration): factor 1. */
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "orders");
    assert_int_equal(e->rec.replication_factor, 1);
    assert_int_equal(e->rec.min_insync, 1);
    assert_null(tn_meta_state_pstate(&s, "orders", 0));
    /* One member: factor 1, a single owner as before. */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(1, 11, 0)), 0);
    tn_meta_cmd_t lone = tu_meta_native_topic_cmd("lone", 1, 3, 2);
    lone.clamp = true;
    assert_int_equal(tn_meta_state_apply(&s, &lone), 0);
    e = tn_meta_topic_find(&s, "lone");
    assert_int_equal(e->rec.replication_factor, 1);
    assert_int_equal(e->rec.min_insync, 1);
    assert_null(tn_meta_state_pstate(&s, "lone", 0));
    assert_int_equal(tn_meta_state_owner(&s, "lone", 0), 1);
    /* Two: factor 2, min_insync 3 asked clamps to 2. */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(2, 12, 0)), 0);
    tn_meta_cmd_t two = tu_meta_native_topic_cmd("two", 1, 3, 3);
    two.clamp = true;
    assert_int_equal(tn_meta_state_apply(&s, &two), 0);
    e = tn_meta_topic_find(&s, "two");
    assert_int_equal(e->rec.replication_factor, 2);
    assert_int_equal(e->rec.min_insync, 2);
    assert_int_equal(tn_meta_state_pstate(&s, "two", 0)->nreplicas, 2);
    /* Three: factor 3 as asked. */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(3, 13, 0)), 0);
    tn_meta_cmd_t three = tu_meta_native_topic_cmd("three", 2, 3, 2);
    three.clamp = true;
    assert_int_equal(tn_meta_state_apply(&s, &three), 0);
    e = tn_meta_topic_find(&s, "three");
    assert_int_equal(e->rec.replication_factor, 3);
    assert_int_equal(e->rec.min_insync, 2);
    expect_replicas(tn_meta_state_pstate(&s, "three", 0), 1, 2, 3);
    /* The same entry without clamp (an older build's) keeps the factor. */
    tn_meta_cmd_t old = tu_meta_native_topic_cmd("old", 1, 3, 2);
    tn_meta_state_t s1;
    tn_meta_state_init(&s1);
    assert_int_equal(apply(&s1, tu_meta_rec_cmd(1, 11, 0)), 0);
    assert_int_equal(tn_meta_state_apply(&s1, &old), 0);
    assert_int_equal(tn_meta_topic_find(&s1, "old")->rec.replication_factor, 3);
    tn_meta_state_fini(&s1);
    /* Member 3's session ends: the next creation counts two members. */
    assert_int_equal(apply(&s, fence(3, 13)), 0);
    tn_meta_cmd_t after = tu_meta_native_topic_cmd("after", 1, 3, 2);
    after.clamp = true;
    assert_int_equal(tn_meta_state_apply(&s, &after), 0);
    assert_int_equal(tn_meta_topic_find(&s, "after")->rec.replication_factor, 2);
    /* "three" sent again now answers as its first copy did (made with 3
     * alive, now 2); a different create of that name still conflicts. */
    three.again = true;
    assert_int_equal(tn_meta_state_apply(&s, &three), 0);
    tn_meta_cmd_t other = three;
    other.topic.partitions = 5;
    assert_int_equal(tn_meta_state_apply(&s, &other), UV_EEXIST);
    three.again = false;
    assert_int_equal(tn_meta_state_apply(&s, &three), UV_EEXIST);
    /* A dead member (MEMBER_STATUS) does not count either. */
    tn_meta_cmd_t dead;
    memset(&dead, 0, sizeof(dead));
    dead.type = TN_MC_MEMBER_STATUS;
    dead.member.id = 2;
    dead.member.status = TN_MEMBER_DEAD;
    dead.member.heartbeat_ms = 1000;
    assert_int_equal(tn_meta_state_apply(&s, &dead), 0);
    tn_meta_cmd_t last = tu_meta_native_topic_cmd("last", 1, 3, 2);
    last.clamp = true;
    assert_int_equal(tn_meta_state_apply(&s, &last), 0);
    assert_int_equal(tn_meta_topic_find(&s, "last")->rec.replication_factor, 1);
    /* Snapshots keep every record as it was made, without the flag. */
    tn_buf_t snap;
    tn_buf_init(&snap);
    assert_int_equal(tn_meta_state_snapshot(&s, &snap), 0);
    tn_meta_state_t back;
    tn_meta_state_init(&back);
    assert_int_equal(tn_meta_state_restore(&back, tn_buf_data(&snap), tn_buf_size(&snap)), 0);
    assert_int_equal(tn_meta_topic_find(&back, "three")->rec.replication_factor, 3);
    assert_int_equal(tn_meta_topic_find(&back, "two")->rec.replication_factor, 2);
    assert_int_equal(tn_meta_topic_find(&back, "lone")->rec.replication_factor, 1);
    tn_meta_state_fini(&back);
    tn_buf_fini(&snap);
    tn_meta_state_fini(&s);
}

static void test_fence_on_session_end(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 4, 3, 2);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 4, 1, 1)), 0);
    tells_t told;
    tell_to(&s, &told);
    /* Member 1's session ends: the partitions it led move to the next
     * ISR member in replicas order, epochs + 1; it leaves every ISR. */
    assert_int_equal(apply(&s, fence(1, 101)), 0);
    assert_true(tn_meta_member_find(&s, 1)->fenced);
    const tn_pstate_t *p0 = tn_meta_state_pstate(&s, "r", 0);
    assert_int_equal(p0->leader, 2);
    assert_int_equal(p0->leader_epoch, 2);
    assert_int_equal(tn_pstate_isr_find(p0, 1), -1);
    assert_int_equal(tn_meta_state_owner(&s, "r", 0), 2);
    const tn_pstate_t *p2 = tn_meta_state_pstate(&s, "r", 2); /* 3, 4, 1: led by 3 */
    assert_int_equal(p2->leader, 3);
    assert_int_equal(p2->leader_epoch, 1);
    assert_int_equal(tn_pstate_isr_find(p2, 1), -1);
    const tn_pstate_t *p1 = tn_meta_state_pstate(&s, "r", 1); /* 2, 3, 4: not a replica */
    assert_int_equal(p1->partition_epoch, 1);
    assert_true(was_told(&told, "r", 0) && was_told(&told, "r", 2) && was_told(&told, "r", 3));
    assert_false(was_told(&told, "r", 1));
    /* Factor-1 owners do not move (dead_after's business). */
    assert_int_equal(tn_meta_state_owner(&s, "one", 0), 1);
    /* The nodes view shows it not live. */
    tn_pstate_node_t buf[8];
    tn_pstate_nodes_t nodes;
    tn_meta_state_nodes(&s, buf, 8, &nodes);
    assert_int_equal(nodes.n, 4);
    assert_false(nodes.v[0].live);
    assert_true(nodes.v[1].live);
    assert_true(nodes.v[0].incarnation == 101);
    /* A fence of an incarnation the member no longer has is stale. */
    assert_int_equal(apply(&s, fence(2, 999)), TN_ECHANGED);
    assert_int_equal(apply(&s, fence(9, 0)), TN_ENOTFOUND);
    /* It registers again (same disk): live, not back in the ISR (the
     * leader's CAS adds it once caught up). */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(1, 101, 0)), 0);
    assert_false(tn_meta_member_find(&s, 1)->fenced);
    assert_int_equal(tn_pstate_isr_find(tn_meta_state_pstate(&s, "r", 0), 1), -1);
    /* Every replica of a partition fenced: offline; the first ISR or ELR
     * member to register again leads it. */
    assert_int_equal(apply(&s, fence(2, 102)), 0);
    assert_int_equal(apply(&s, fence(3, 103)), 0);
    const tn_pstate_t *p0b = tn_meta_state_pstate(&s, "r", 0); /* 1, 2, 3 */
    assert_int_equal(p0b->leader, TN_PSTATE_NONE);
    assert_int_equal(tn_meta_state_owner(&s, "r", 0), 0);
    uint32_t epoch = p0b->leader_epoch;
    told.n = 0;
    assert_int_equal(apply(&s, tu_meta_rec_cmd(3, 103, 0)), 0);
    p0b = tn_meta_state_pstate(&s, "r", 0);
    assert_int_equal(p0b->leader, 3);
    assert_int_equal(p0b->leader_epoch, epoch + 1);
    assert_true(was_told(&told, "r", 0));
    tn_meta_state_fini(&s);
}

static void test_new_incarnation_fences(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 4, 3, 2);
    /* Node 2 comes back with a wiped disk, its session never ended: the
     * registration fences the old incarnation in the same apply. */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(2, 555, 0)), 0);
    const tn_meta_member_t *m = tn_meta_member_find(&s, 2);
    assert_true(m->incarnation == 555);
    assert_false(m->fenced);
    const tn_pstate_t *p1 = tn_meta_state_pstate(&s, "r", 1); /* 2, 3, 4 */
    assert_int_equal(p1->leader, 3);
    assert_int_equal(p1->leader_epoch, 2);
    assert_int_equal(tn_pstate_isr_find(p1, 2), -1);
    assert_int_equal(tn_pstate_isr_find(tn_meta_state_pstate(&s, "r", 0), 2), -1);
    /* The same incarnation again changes nothing; an older registration
     * (no incarnation) keeps the recorded one. */
    uint32_t pe = p1->partition_epoch;
    assert_int_equal(apply(&s, tu_meta_rec_cmd(2, 555, 0)), 0);
    tn_meta_cmd_t old = tu_meta_rec_cmd(2, 0, 0);
    assert_int_equal(tn_meta_state_apply(&s, &old), 0);
    assert_true(tn_meta_member_find(&s, 2)->incarnation == 555);
    assert_int_equal(tn_meta_state_pstate(&s, "r", 1)->partition_epoch, pe);
    tn_meta_state_fini(&s);
}

/* Node 3 restarts on the same disk before its session ended: its first
 * registration (another boot id) fences its old session in that apply;
 * the same registration again (re-sent after a failover) does nothing. */
static void test_restart_fences(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four(&s);
    tn_meta_cmd_t r = tu_meta_rec_cmd(3, 103, 0);
    r.member.boot = 7;
    assert_int_equal(tn_meta_state_apply(&s, &r), 0);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("r", 4, 3, 2)), 0);
    tn_meta_cmd_t d;
    roundtrip(&r, &d);
    assert_true(d.member.boot == 7 && d.member.incarnation == 103);
    tn_meta_cmd_fini(&d);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_meta_cmd_t noinc = tu_meta_rec_cmd(3, 0, 0);
    noinc.member.boot = 7;
    assert_int_equal(tn_meta_cmd_encode(&noinc, &b), UV_EINVAL);
    tn_buf_fini(&b);
    const tn_pstate_t *p2 = tn_meta_state_pstate(&s, "r", 2); /* 3, 4, 1 */
    assert_int_equal(p2->leader, 3);
    assert_int_equal(apply(&s, r), 0); /* the same process: nothing */
    assert_int_equal(p2->leader_epoch, 1);
    r.member.boot = 8;
    assert_int_equal(tn_meta_state_apply(&s, &r), 0);
    assert_int_equal(p2->leader, 4);
    assert_int_equal(p2->leader_epoch, 2);
    assert_int_equal(tn_pstate_isr_find(p2, 3), -1);
    assert_false(tn_meta_member_find(&s, 3)->fenced);
    assert_true(tn_meta_member_find(&s, 3)->boot == 8);
    uint32_t pe = p2->partition_epoch;
    assert_int_equal(tn_meta_state_apply(&s, &r), 0);
    assert_int_equal(p2->partition_epoch, pe);
    /* A registration without a boot id (an older build) is no restart. */
    tn_meta_cmd_t old = tu_meta_rec_cmd(3, 103, 0);
    assert_int_equal(tn_meta_state_apply(&s, &old), 0);
    assert_int_equal(p2->partition_epoch, pe);
    /* A snapshot keeps the boot id: the restored state agrees. */
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    tn_meta_state_t x;
    tn_meta_state_init(&x);
    assert_int_equal(tn_meta_state_restore(&x, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_true(tn_meta_member_find(&x, 3)->boot == 8);
    tn_meta_state_fini(&x);
    tn_buf_fini(&b);
    tn_meta_state_fini(&s);
}

static tn_meta_cmd_t isr_cmd(const tn_pstate_t *ps, uint32_t proposer, uint32_t expected_pe,
                             const uint32_t *nodes, uint32_t n, const tn_meta_state_t *s)
{
    tn_meta_cmd_t c = part(TN_MC_PART_ISR, "r", 0, proposer);
    c.channels_checked = true;
    c.leader_epoch = ps->leader_epoch;
    c.expected_pe = expected_pe;
    c.nisr = n;
    for (uint32_t i = 0; i < n; i++) {
        c.isr[i].node = nodes[i];
        c.isr[i].incarnation = tn_meta_member_find(s, nodes[i])->incarnation;
    }
    return c;
}

static void test_isr_cas(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 1, 3, 2);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 1, 1, 1)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", 0);
    uint32_t pe = ps->partition_epoch;
    /* The leader shrinks the ISR: accepted, partition_epoch + 1. */
    uint32_t shrunk[2] = {1, 2};
    assert_int_equal(apply(&s, isr_cmd(ps, 1, pe, shrunk, 2, &s)), 0);
    assert_int_equal(ps->partition_epoch, pe + 1);
    assert_int_equal(ps->nisr, 2);
    /* The same proposal again: stale partition_epoch. */
    assert_int_equal(apply(&s, isr_cmd(ps, 1, pe, shrunk, 2, &s)), TN_ECHANGED);
    /* Not the leader. */
    assert_int_equal(apply(&s, isr_cmd(ps, 2, pe + 1, shrunk, 2, &s)), TN_ECHANGED);
    /* Without the leader; a non-replica. */
    uint32_t noleader[1] = {2};
    assert_int_equal(apply(&s, isr_cmd(ps, 1, pe + 1, noleader, 1, &s)), UV_EINVAL);
    uint32_t stranger[3] = {1, 2, 4};
    assert_int_equal(apply(&s, isr_cmd(ps, 1, pe + 1, stranger, 3, &s)), UV_EINVAL);
    /* An added member with a stale incarnation, or fenced: refused. */
    uint32_t back[3] = {1, 2, 3};
    tn_meta_cmd_t stale = isr_cmd(ps, 1, pe + 1, back, 3, &s);
    stale.isr[2].incarnation = 1;
    assert_int_equal(apply(&s, stale), UV_EPERM);
    assert_int_equal(apply(&s, fence(3, 103)), 0);
    assert_int_equal(apply(&s, isr_cmd(ps, 1, ps->partition_epoch, back, 3, &s)), UV_EPERM);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(3, 103, 0)), 0);
    /* Added without its channel state checked caught up: refused; a
     * shrink needs no such check. */
    tn_meta_cmd_t unchecked = isr_cmd(ps, 1, ps->partition_epoch, back, 3, &s);
    unchecked.channels_checked = false;
    assert_int_equal(apply(&s, unchecked), UV_EPERM);
    assert_int_equal(apply(&s, isr_cmd(ps, 1, ps->partition_epoch, back, 3, &s)), 0);
    assert_int_equal(ps->nisr, 3);
    /* A refused command changed nothing. */
    uint32_t pe2 = ps->partition_epoch;
    assert_int_equal(apply(&s, isr_cmd(ps, 1, 1, back, 3, &s)), TN_ECHANGED);
    assert_int_equal(ps->partition_epoch, pe2);
    /* Not a replicated partition; no such topic or partition. */
    tn_meta_cmd_t c = isr_cmd(ps, 1, pe2, back, 3, &s);
    snprintf(c.topic.name, sizeof(c.topic.name), "one");
    assert_int_equal(apply(&s, c), UV_EINVAL);
    snprintf(c.topic.name, sizeof(c.topic.name), "nope");
    assert_int_equal(apply(&s, c), TN_ENOTFOUND);
    c = isr_cmd(ps, 1, pe2, back, 3, &s);
    c.part = 1;
    assert_int_equal(apply(&s, c), TN_ENOTFOUND);
    tn_meta_state_fini(&s);
}

static void test_force_rebalance_corrupt(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 1, 3, 2);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", 0); /* 1, 2, 3 */
    /* Preferred leader leads: nothing to rebalance. */
    assert_int_equal(apply(&s, part(TN_MC_PART_REBALANCE, "r", 0, 0)), UV_EAGAIN);
    /* A clean forced election of an ISR member. */
    assert_int_equal(apply(&s, part(TN_MC_PART_LEADER, "r", 0, 2)), 0);
    assert_int_equal(ps->leader, 2);
    assert_int_equal(ps->leader_epoch, 2);
    assert_false(ps->unclean);
    /* Back to the preferred leader. */
    assert_int_equal(apply(&s, part(TN_MC_PART_REBALANCE, "r", 0, 0)), 0);
    assert_int_equal(ps->leader, 1);
    assert_int_equal(ps->leader_epoch, 3);
    /* Not a replica: refused. */
    assert_int_equal(apply(&s, part(TN_MC_PART_LEADER, "r", 0, 4)), UV_EINVAL);
    /* A CRC failure on the leader: it hands over and leaves the ISR. */
    assert_int_equal(apply(&s, part(TN_MC_PART_CORRUPT, "r", 0, 1)), 0);
    assert_int_equal(ps->leader, 2);
    assert_int_equal(tn_pstate_isr_find(ps, 1), -1);
    assert_int_equal(ps->corrupt & 1u, 1u);
    /* A fenced ISR member leaves; forcing a non-ISR member needs unclean. */
    assert_int_equal(apply(&s, fence(3, 103)), 0);
    assert_int_equal(apply(&s, part(TN_MC_PART_LEADER, "r", 0, 1)), UV_EPERM);
    tn_meta_cmd_t unclean = part(TN_MC_PART_LEADER, "r", 0, 1);
    unclean.unclean = true;
    assert_int_equal(tn_meta_state_apply(&s, &unclean), 0);
    assert_int_equal(ps->leader, 1);
    assert_true(ps->unclean);
    assert_int_equal(ps->nisr, 1);
    tn_meta_state_fini(&s);
}

static void expect_same_pstate(const tn_pstate_t *a, const tn_pstate_t *b)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->nreplicas, b->nreplicas);
    assert_memory_equal(a->replicas, b->replicas, a->nreplicas * sizeof(a->replicas[0]));
    assert_int_equal(a->leader, b->leader);
    assert_int_equal(a->leader_epoch, b->leader_epoch);
    assert_int_equal(a->partition_epoch, b->partition_epoch);
    assert_int_equal(a->nisr, b->nisr);
    assert_memory_equal(a->isr, b->isr, a->nisr * sizeof(a->isr[0]));
    assert_int_equal(a->nelr, b->nelr);
    assert_memory_equal(a->elr, b->elr, a->nelr * sizeof(a->elr[0]));
    assert_int_equal(a->min_insync, b->min_insync);
    assert_int_equal(a->corrupt, b->corrupt);
    assert_int_equal(a->unclean, b->unclean);
    assert_int_equal(a->ntarget, b->ntarget);
    assert_memory_equal(a->target, b->target, sizeof(a->target));
    assert_int_equal(a->nold, b->nold);
    assert_memory_equal(a->old, b->old, sizeof(a->old));
    assert_true(a->move_id == b->move_id);
    assert_true(a->move_started_ms == b->move_started_ms);
    assert_int_equal(a->nmark, b->nmark);
    for (uint32_t i = 0; i < a->nmark; i++) {
        assert_int_equal(a->mark[i].node, b->mark[i].node);
        assert_true(a->mark[i].end == b->mark[i].end);
        assert_true(a->mark[i].ms == b->mark[i].ms);
    }
}

/* s and r take snapshots byte for byte the same. */
static void expect_same_snapshot(const tn_meta_state_t *s, const tn_meta_state_t *r)
{
    tn_buf_t bs, br;
    tn_buf_init(&bs);
    tn_buf_init(&br);
    assert_int_equal(tn_meta_state_snapshot(s, &bs), 0);
    assert_int_equal(tn_meta_state_snapshot(r, &br), 0);
    assert_int_equal(tn_buf_size(&bs), tn_buf_size(&br));
    assert_memory_equal(tn_buf_data(&bs), tn_buf_data(&br), tn_buf_size(&bs));
    tn_buf_fini(&bs);
    tn_buf_fini(&br);
}

static void test_snapshot_roundtrip(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 4, 3, 2);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 2, 1, 1)), 0);
    assert_int_equal(apply(&s, fence(1, 101)), 0);
    assert_int_equal(apply(&s, fence(2, 102)), 0); /* r/0: ISR 3 alone, ELR 2 */
    assert_int_equal(apply(&s, part(TN_MC_PART_CORRUPT, "r", 1, 4)), 0);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    tells_t told;
    tell_to(&r, &told);
    assert_int_equal(apply(&r, tu_meta_native_topic_cmd("stale", 1, 3, 1)), 0);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_null(tn_meta_topic_find(&r, "stale"));
    assert_true(r.pstate_cb == on_told); /* the listener stays */
    for (uint32_t p = 0; p < 4; p++)
        expect_same_pstate(tn_meta_state_pstate(&s, "r", p), tn_meta_state_pstate(&r, "r", p));
    assert_null(tn_meta_state_pstate(&r, "one", 0));
    assert_int_equal(tn_meta_topic_find(&r, "r")->rec.replication_factor, 3);
    assert_int_equal(tn_meta_topic_find(&r, "r")->rec.min_insync, 2);
    assert_int_equal(tn_meta_topic_find(&r, "one")->rec.replication_factor, 1);
    for (uint64_t id = 1; id <= 4; id++) {
        const tn_meta_member_t *a = tn_meta_member_find(&s, id), *c = tn_meta_member_find(&r, id);
        assert_true(a->incarnation == c->incarnation);
        assert_int_equal(a->fenced, c->fenced);
    }
    assert_int_equal(tn_meta_state_owner(&r, "r", 0), tn_meta_state_owner(&s, "r", 0));
    assert_int_equal(r.unassigned, s.unassigned);
    /* The restored state goes on as the original does. */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(1, 101, 0)), 0);
    assert_int_equal(apply(&r, tu_meta_rec_cmd(1, 101, 0)), 0);
    for (uint32_t p = 0; p < 4; p++)
        expect_same_pstate(tn_meta_state_pstate(&s, "r", p), tn_meta_state_pstate(&r, "r", p));
    /* A snapshot taken again is byte for byte the same. */
    expect_same_snapshot(&s, &r);
    /* A partition state is a snapshot record, never a log entry. */
    tn_meta_cmd_t st = part(TN_MC_PART_STATE, "r", 0, 0);
    st.pstate = *tn_meta_state_pstate(&s, "r", 0);
    assert_int_equal(tn_meta_state_apply(&s, &st), UV_EINVAL);
    tn_buf_fini(&b);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* A snapshot as the previous build wrote it: topics without replication
 * fields, MEMBER_REC without an incarnation. */
static void test_restore_old_snapshot(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    unsigned char hdr[24] = {'T', 'M', 'S', '1'};
    tn_put_u64(hdr + 16, 3);
    tn_buf_append(&b, hdr, sizeof(hdr));
    tn_meta_cmd_t t = tu_meta_native_topic_cmd("legacy", 2, 0, 0);
    t.if_absent = false;
    assert_int_equal(tn_meta_cmd_encode(&t, &b), 0);
    tn_meta_cmd_t po;
    memset(&po, 0, sizeof(po));
    po.type = TN_MC_PART_OWNERS;
    snprintf(po.topic.name, sizeof(po.topic.name), "legacy");
    uint64_t owners[2] = {1, 2};
    po.owners = owners;
    po.nowners = 2;
    assert_int_equal(tn_meta_cmd_encode(&po, &b), 0);
    tn_meta_cmd_t m = tu_meta_rec_cmd(1, 0, 0);
    assert_int_equal(tn_meta_cmd_encode(&m, &b), 0);
    /* The bytes an older build wrote: no flag bit 5, no trailing field. */
    const unsigned char *d = (const unsigned char *)tn_buf_data(&b);
    assert_int_equal(d[24 + TN_META_HDR] & TN_META_TOPIC_REPL, 0);
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(tn_meta_state_restore(&s, tn_buf_data(&b), tn_buf_size(&b)), 0);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "legacy");
    assert_int_equal(e->rec.replication_factor, 1);
    assert_int_equal(e->rec.min_insync, 1);
    assert_null(e->pstates);
    assert_int_equal(tn_meta_state_owner(&s, "legacy", 1), 2);
    assert_true(tn_meta_member_find(&s, 1)->incarnation == 0);
    assert_false(tn_meta_member_find(&s, 1)->fenced);
    /* Its first registration with an incarnation records it; nothing to
     * fence (no replicated partition). */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(1, 42, 0)), 0);
    assert_true(tn_meta_member_find(&s, 1)->incarnation == 42);
    /* A partition state naming a factor-1 topic is one a move gave it
     * (tn_meta_state_move_from): restored with the topic's factor kept. */
    tn_meta_cmd_t st = part(TN_MC_PART_STATE, "legacy", 0, 0);
    st.pstate.nreplicas = 1;
    st.pstate.replicas[0] = 1;
    st.pstate.leader = 1;
    st.pstate.leader_epoch = 1;
    st.pstate.nisr = 1;
    st.pstate.isr[0] = (tn_pstate_member_t){1, 42};
    st.pstate.min_insync = 1;
    assert_int_equal(tn_meta_cmd_encode(&st, &b), 0);
    tn_put_u64((unsigned char *)tn_buf_data(&b) + 16, 4);
    tn_meta_state_t r;
    tn_meta_state_init(&r);
    assert_int_equal(tn_meta_state_restore(&r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(tn_meta_state_pstate(&r, "legacy", 0)->leader, 1);
    assert_null(tn_meta_state_pstate(&r, "legacy", 1));
    assert_int_equal(tn_meta_topic_find(&r, "legacy")->rec.replication_factor, 1);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
    tn_buf_fini(&b);
}

/* NSQ topics grow by one partition for the member that asks: a
 * replicated one's new partition is led by it. */
static void test_grow_for_replicated(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four(&s);
    tn_meta_cmd_t t = tu_meta_native_topic_cmd("nsq", 1, 3, 2);
    t.topic.native = false;
    assert_int_equal(tn_meta_state_apply(&s, &t), 0);
    tn_meta_cmd_t g;
    memset(&g, 0, sizeof(g));
    g.type = TN_MC_TOPIC_GROW_FOR;
    snprintf(g.topic.name, sizeof(g.topic.name), "nsq");
    g.member.id = 3;
    assert_int_equal(tn_meta_state_apply(&s, &g), 0);
    expect_replicas(tn_meta_state_pstate(&s, "nsq", 1), 3, 4, 1);
    assert_int_equal(tn_meta_state_owner(&s, "nsq", 1), 3);
    tn_meta_state_fini(&s);
}

/* --- partition moves ------------------------------------------------------------ */

static tn_meta_cmd_t move_cmd(const char *name, uint32_t p, uint8_t kind, uint64_t id, int64_t ms,
                              const uint32_t *target, uint32_t n)
{
    tn_meta_cmd_t c = part(TN_MC_PART_MOVE, name, p, 0);
    c.move_kind = kind;
    c.move_id = id;
    c.move_ms = ms;
    c.ntarget = n;
    if (n > 0)
        memcpy(c.target, target, n * sizeof(*target));
    return c;
}

static void test_codec_part_move(void **state)
{
    (void)state;
    const uint32_t target[3] = {2, 4, 3};
    tn_meta_cmd_t c = move_cmd("r", 7, TN_MOVE_BEGIN, 0x1234, 1700000000000LL, target, 3), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_PART_MOVE);
    assert_string_equal(d.topic.name, "r");
    assert_int_equal(d.part, 7);
    assert_int_equal(d.move_kind, TN_MOVE_BEGIN);
    assert_true(d.move_id == 0x1234);
    assert_true(d.move_ms == 1700000000000LL);
    assert_int_equal(d.ntarget, 3);
    assert_memory_equal(d.target, target, sizeof(target));
    tn_meta_cmd_fini(&d);
    c = move_cmd("r", 0, TN_MOVE_ABORT, 9, 5, NULL, 0);
    snprintf(c.move_reason, sizeof(c.move_reason), "aborted by admin");
    roundtrip(&c, &d);
    assert_string_equal(d.move_reason, "aborted by admin");
    tn_meta_cmd_fini(&d);
    c = move_cmd("r", 0, TN_MOVE_FAIL, 9, 5, NULL, 0);
    snprintf(c.move_reason, sizeof(c.move_reason), "target member 4 was dead");
    roundtrip(&c, &d);
    assert_int_equal(d.move_kind, TN_MOVE_FAIL);
    assert_string_equal(d.move_reason, "target member 4 was dead");
    tn_meta_cmd_fini(&d);
    c = move_cmd("r", 0, TN_MOVE_COMPLETE, 9, 5, NULL, 0);
    roundtrip(&c, &d);
    assert_int_equal(d.move_kind, TN_MOVE_COMPLETE);
    tn_meta_cmd_fini(&d);
    /* The encoder refuses id 0, an unknown kind, an empty or oversized
     * target. */
    tn_buf_t b;
    tn_buf_init(&b);
    c = move_cmd("r", 0, TN_MOVE_BEGIN, 0, 5, target, 3);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = move_cmd("r", 0, 4, 1, 5, target, 3);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c = move_cmd("r", 0, TN_MOVE_BEGIN, 1, 5, target, 0);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c.ntarget = TN_PSTATE_MAX_REPLICAS + 1;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
    /* The decoder refuses a bad kind, id 0, a duplicate or NONE target.
     * Payload: [2+1] "r" [4] p [1] kind [8] id [8] ms [1] n [4] nodes. */
    c = move_cmd("r", 0, TN_MOVE_BEGIN, 1, 5, target, 3);
    assert_int_equal(decode_patched(&c, 7, 4), TN_ECORRUPT);  /* kind */
    c.move_id = 0x100;                                        /* low byte 0 */
    assert_int_equal(decode_patched(&c, 9, 0), TN_ECORRUPT);  /* id's byte 1: id 0 */
    assert_int_equal(decode_patched(&c, 24, 0), TN_ECORRUPT); /* n 0 */
    assert_int_equal(decode_patched(&c, 24, 9), TN_ECORRUPT); /* n 9 */
    assert_int_equal(decode_patched(&c, 29, 2), TN_ECORRUPT); /* 2, 2, 3 */
    assert_int_equal(decode_patched(&c, 25, 0), TN_ECORRUPT); /* 0, 4, 3 */
    /* A finished move's snapshot record. */
    tn_meta_cmd_t m;
    memset(&m, 0, sizeof(m));
    m.type = TN_MC_MOVE_DONE;
    m.move = (tn_meta_move_t){.id = 5,
                              .part = 1,
                              .end = TN_MOVE_ABORTED,
                              .started_ms = 10,
                              .finished_ms = 20,
                              .nfrom = 2,
                              .from = {1, 2},
                              .nto = 2,
                              .to = {2, 3}};
    snprintf(m.move.topic, sizeof(m.move.topic), "r");
    snprintf(m.move.reason, sizeof(m.move.reason), "aborted by root");
    roundtrip(&m, &d);
    assert_memory_equal(&d.move, &m.move, sizeof(m.move));
    tn_meta_cmd_fini(&d);
}

static void test_moves_through_state(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four(&s);
    tells_t told;
    tell_to(&s, &told);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("r", 1, 3, 2)), 0);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 1, 1, 1)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", 0);
    expect_replicas(ps, 1, 2, 3);
    const uint32_t target[3] = {2, 4, 3}, bad[2] = {2, 9};
    /* Refusals: a factor-1 topic, no such topic or partition, a bad target. */
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 1, 5, target, 3)), UV_EINVAL);
    assert_int_equal(apply(&s, move_cmd("nope", 0, TN_MOVE_BEGIN, 1, 5, target, 3)), TN_ENOTFOUND);
    assert_int_equal(apply(&s, move_cmd("r", 1, TN_MOVE_BEGIN, 1, 5, target, 3)), TN_ENOTFOUND);
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 1, 5, bad, 2)), UV_EINVAL);
    told.n = 0;
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 1, 5, target, 3)), 0);
    assert_true(told.n >= 1); /* the listener hears of it: node 4 follows */
    assert_int_equal(ps->nreplicas, 4);
    assert_int_equal(ps->replicas[1], 4);
    const char *t = NULL;
    uint32_t p = 9;
    assert_ptr_equal(tn_meta_state_move_find(&s, 1, &t, &p), ps);
    assert_string_equal(t, "r");
    assert_int_equal(p, 0);
    assert_null(tn_meta_state_move_find(&s, 2, &t, &p));
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 2, 5, target, 3)), UV_EBUSY);
    /* Not ready: node 4 not in the ISR. */
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_COMPLETE, 1, 6, NULL, 0)), UV_EAGAIN);
    const uint32_t all[4] = {1, 2, 3, 4};
    assert_int_equal(apply(&s, isr_cmd(ps, 1, ps->partition_epoch, all, 4, &s)), 0);
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_COMPLETE, 2, 6, NULL, 0)), TN_ENOTFOUND);
    uint32_t le = ps->leader_epoch;
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_COMPLETE, 1, 6, NULL, 0)), 0);
    expect_replicas(ps, 2, 4, 3);
    assert_int_equal(ps->leader, 2);
    assert_int_equal(ps->leader_epoch, le + 1);
    assert_int_equal(tn_meta_state_owner(&s, "r", 0), 2);
    assert_int_equal(tn_meta_topic_find(&s, "r")->owners[0], 2);
    const tn_meta_move_t *mv = tn_meta_state_move_done(&s, 0);
    assert_non_null(mv);
    assert_true(mv->id == 1);
    assert_int_equal(mv->end, TN_MOVE_DONE);
    assert_true(mv->started_ms == 5 && mv->finished_ms == 6);
    assert_int_equal(mv->nfrom, 3);
    assert_int_equal(mv->from[0], 1);
    assert_int_equal(mv->nto, 3);
    assert_int_equal(mv->to[1], 4);
    assert_null(tn_meta_state_move_done(&s, 1));
    /* An abort: back to 2, 4, 3, the reason kept. */
    const uint32_t back[3] = {1, 2, 3};
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 3, 7, back, 3)), 0);
    tn_meta_cmd_t ab = move_cmd("r", 0, TN_MOVE_ABORT, 3, 8, NULL, 0);
    snprintf(ab.move_reason, sizeof(ab.move_reason), "aborted by root");
    assert_int_equal(apply(&s, ab), 0);
    expect_replicas(ps, 2, 4, 3);
    assert_int_equal(tn_meta_state_move_done(&s, 0)->end, TN_MOVE_ABORTED);
    assert_string_equal(tn_meta_state_move_done(&s, 0)->reason, "aborted by root");
    assert_true(tn_meta_state_move_done(&s, 1)->id == 1);
    assert_int_equal(apply(&s, ab), TN_ENOTFOUND); /* finished */
    /* A failure (the metastore leader's, a target dead too long): the old
     * replicas back, kept as failed with its reason. */
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 4, 9, back, 3)), 0);
    tn_meta_cmd_t fl = move_cmd("r", 0, TN_MOVE_FAIL, 4, 10, NULL, 0);
    snprintf(fl.move_reason, sizeof(fl.move_reason), "target member 1 was dead");
    assert_int_equal(apply(&s, fl), 0);
    expect_replicas(ps, 2, 4, 3);
    assert_int_equal(ps->ntarget, 0);
    assert_int_equal(tn_meta_state_move_done(&s, 0)->end, TN_MOVE_FAILED);
    assert_string_equal(tn_meta_state_move_done(&s, 0)->reason, "target member 1 was dead");
    assert_int_equal(apply(&s, fl), TN_ENOTFOUND); /* finished */
    /* The last TN_META_MOVES_KEPT are kept, newest first. */
    s.pstate_cb = NULL; /* more changes than the listener's table holds */
    for (uint64_t id = 10; id < 10 + TN_META_MOVES_KEPT + 5; id++) {
        assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, id, 9, back, 3)), 0);
        assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_ABORT, id, 9, NULL, 0)), 0);
    }
    assert_int_equal(s.nmoves, TN_META_MOVES_KEPT);
    assert_true(tn_meta_state_move_done(&s, 0)->id == 10 + TN_META_MOVES_KEPT + 4);
    assert_true(tn_meta_state_move_done(&s, TN_META_MOVES_KEPT - 1)->id == 15);
    assert_null(tn_meta_state_move_done(&s, TN_META_MOVES_KEPT));
    /* A finished move is a snapshot record, never a log entry. */
    tn_meta_cmd_t done;
    memset(&done, 0, sizeof(done));
    done.type = TN_MC_MOVE_DONE;
    done.move = *tn_meta_state_move_done(&s, 0);
    assert_int_equal(tn_meta_state_apply(&s, &done), UV_EINVAL);
    tn_meta_state_fini(&s);
}

/* A new min_insync during a move is capped by the smaller of the lists
 * the move may end with. */
static void test_move_min_insync_cap(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 1, 3, 2);
    const uint32_t target[2] = {2, 4};
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 1, 5, target, 2)), 0);
    tn_meta_cmd_t up = tu_meta_native_topic_cmd("r", 1, 3, 3);
    up.if_absent = false;
    assert_int_equal(apply(&s, up), 0);
    assert_int_equal(tn_meta_state_pstate(&s, "r", 0)->min_insync, 2);
    tn_meta_state_fini(&s);
}

static void test_snapshot_with_move(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 2, 3, 2);
    const uint32_t t0[3] = {2, 4, 3}, t1[3] = {4, 1, 2};
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 1, 5, t0, 3)), 0);
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_ABORT, 1, 6, NULL, 0)), 0);
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 2, 7, t0, 3)), 0);
    assert_int_equal(apply(&s, move_cmd("r", 1, TN_MOVE_BEGIN, 3, 8, t1, 3)), 0);
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    for (uint32_t p = 0; p < 2; p++)
        expect_same_pstate(tn_meta_state_pstate(&s, "r", p), tn_meta_state_pstate(&r, "r", p));
    assert_int_equal(r.nmoves, 1);
    assert_memory_equal(tn_meta_state_move_done(&r, 0), tn_meta_state_move_done(&s, 0),
                        sizeof(tn_meta_move_t));
    /* The restored state goes on as the original does. */
    const tn_pstate_t *ps = tn_meta_state_pstate(&r, "r", 0);
    const uint32_t all[4] = {2, 4, 3, 1};
    tn_meta_cmd_t cas = isr_cmd(ps, 1, ps->partition_epoch, all, 4, &r);
    assert_int_equal(apply(&r, cas), 0);
    assert_int_equal(apply(&s, cas), 0);
    assert_int_equal(apply(&r, move_cmd("r", 0, TN_MOVE_COMPLETE, 2, 9, NULL, 0)), 0);
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_COMPLETE, 2, 9, NULL, 0)), 0);
    expect_same_pstate(tn_meta_state_pstate(&s, "r", 0), tn_meta_state_pstate(&r, "r", 0));
    expect_same_snapshot(&s, &r);
    /* A PART_STATE with no move is the older build's record, byte for
     * byte: partition 0's state now has none. */
    tn_meta_cmd_t st = part(TN_MC_PART_STATE, "r", 0, 0), d;
    st.pstate = *tn_meta_state_pstate(&s, "r", 0);
    assert_int_equal(st.pstate.ntarget, 0);
    tn_buf_t one;
    tn_buf_init(&one);
    assert_int_equal(tn_meta_cmd_encode(&st, &one), 0);
    /* [2+1] "r" [4] p [1] n [4]x3 [12] epochs+leader [1]+3x12 isr [1] elr [1] [4] [1] */
    assert_int_equal(payload_len(&st), 3 + 4 + 1 + 12 + 12 + 1 + 36 + 1 + 1 + 4 + 1);
    roundtrip(&st, &d);
    assert_int_equal(d.pstate.ntarget, 0);
    tn_meta_cmd_fini(&d);
    /* A damaged move in a PART_STATE refuses it: the replicas not the
     * target followed by the old ones. */
    st.pstate = *tn_meta_state_pstate(&s, "r", 1);
    assert_int_equal(st.pstate.ntarget, 3);
    roundtrip(&st, &d);
    tn_meta_cmd_fini(&d);
    st.pstate.target[0] = 3;
    tn_buf_reset(&one);
    assert_int_equal(tn_meta_cmd_encode(&st, &one), 0);
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&one), tn_buf_size(&one), &d, &used),
                     TN_ECORRUPT);
    tn_buf_fini(&one);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

static tn_meta_cmd_t mark_cmd(const char *name, uint32_t p, uint64_t id, const tn_pstate_mark_t *mk,
                              uint32_t n)
{
    tn_meta_cmd_t c = part(TN_MC_MOVE_MARK, name, p, 0);
    c.move_id = id;
    c.nmark = n;
    if (n > 0)
        memcpy(c.mark, mk, n * sizeof(*mk));
    return c;
}

/* MOVE_MARK (partstate.h rule 10): its codec; applied only to the move id
 * under way and over target members, with no epoch bumped and nobody
 * told; the PART_STATE record carries the marks as an optional trailing
 * field, and the record without them (every older build's) still decodes. */
static void test_move_marks(void **state)
{
    (void)state;
    const tn_pstate_mark_t mk[2] = {{4, 52, 1760000001000LL}, {2, 0, 1760000000500LL}};
    tn_meta_cmd_t c = mark_cmd("r", 0, 0x77, mk, 2), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_MOVE_MARK);
    assert_string_equal(d.topic.name, "r");
    assert_true(d.move_id == 0x77);
    assert_int_equal(d.nmark, 2);
    assert_int_equal(d.mark[0].node, 4);
    assert_true(d.mark[0].end == 52);
    assert_true(d.mark[1].ms == 1760000000500LL);
    tn_meta_cmd_fini(&d);
    /* [2+1] "r" [4] p [8] id [1] n, n x [20] */
    assert_int_equal(payload_len(&c), 3 + 4 + 8 + 1 + 2 * 20);
    c = mark_cmd("r", 0, 0x77, NULL, 0); /* no marks: allowed (clears them) */
    roundtrip(&c, &d);
    assert_int_equal(d.nmark, 0);
    tn_meta_cmd_fini(&d);
    /* The encoder refuses id 0, a NONE or duplicate node, a negative ms. */
    tn_buf_t b;
    tn_buf_init(&b);
    c = mark_cmd("r", 0, 0, mk, 2);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    tn_pstate_mark_t dup[2] = {mk[0], mk[0]};
    c = mark_cmd("r", 0, 1, dup, 2);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    tn_pstate_mark_t neg = {4, 1, -1};
    c = mark_cmd("r", 0, 1, &neg, 1);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
    /* The decoder refuses id 0, n 9, a NONE or duplicate node. Payload:
     * [3] "r" [4] p [8] id [1] n, then [4] node [8] end [8] ms. */
    c = mark_cmd("r", 0, 0x100, mk, 2);
    assert_int_equal(decode_patched(&c, 8, 0), TN_ECORRUPT);  /* id's byte 1: id 0 */
    assert_int_equal(decode_patched(&c, 15, 9), TN_ECORRUPT); /* n 9 */
    assert_int_equal(decode_patched(&c, 16, 0), TN_ECORRUPT); /* node 0 */
    assert_int_equal(decode_patched(&c, 36, 4), TN_ECORRUPT); /* 4, 4 */

    /* Applied. */
    tn_meta_state_t s;
    four_with_r(&s, 1, 3, 2);
    tells_t told;
    tell_to(&s, &told);
    const uint32_t target[3] = {2, 4, 3};
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 5, 100, target, 3)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", 0);
    uint32_t pe = ps->partition_epoch;
    told.n = 0;
    /* Another move id, or no such partition: refused, nothing changed. */
    assert_int_equal(apply(&s, mark_cmd("r", 0, 6, mk, 2)), TN_ENOTFOUND);
    assert_int_equal(apply(&s, mark_cmd("r", 3, 5, mk, 2)), TN_ENOTFOUND);
    /* A mark of an old replica that is not a target member (1). */
    tn_pstate_mark_t old1 = {1, 5, 10};
    assert_int_equal(apply(&s, mark_cmd("r", 0, 5, &old1, 1)), UV_EINVAL);
    assert_int_equal(ps->nmark, 0);
    assert_int_equal(apply(&s, mark_cmd("r", 0, 5, mk, 2)), 0);
    assert_int_equal(ps->nmark, 2);
    assert_int_equal(ps->partition_epoch, pe); /* no epoch bumped */
    assert_int_equal(told.n, 0);               /* nobody told */
    assert_true(tn_pstate_mark_find(ps, 4)->end == 52);
    assert_true(tn_pstate_mark_find(ps, 2)->ms == 1760000000500LL);
    assert_null(tn_pstate_mark_find(ps, 3));
    /* Newer marks replace them whole. */
    assert_int_equal(apply(&s, mark_cmd("r", 0, 5, &mk[0], 1)), 0);
    assert_int_equal(ps->nmark, 1);
    assert_null(tn_pstate_mark_find(ps, 2));

    /* The snapshot keeps them: PART_STATE's trailing field. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    expect_same_pstate(ps, tn_meta_state_pstate(&r, "r", 0));
    tn_meta_cmd_t st = part(TN_MC_PART_STATE, "r", 0, 0);
    st.pstate = *ps;
    uint32_t with = payload_len(&st);
    roundtrip(&st, &d);
    assert_int_equal(d.pstate.nmark, 1);
    tn_meta_cmd_fini(&d);
    /* The record without marks (what this release wrote before them)
     * decodes, with none; its bytes are the marks' 21 fewer. */
    st.pstate.nmark = 0;
    assert_int_equal(payload_len(&st), with - 21);
    roundtrip(&st, &d);
    assert_int_equal(d.pstate.nmark, 0);
    assert_true(d.pstate.move_id == 5);
    tn_meta_cmd_fini(&d);
    /* A mark of a member outside the target in a PART_STATE: damaged. */
    st.pstate = *ps;
    st.pstate.mark[0].node = 1;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&st, &b), 0);
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);

    /* The move's end clears them; a fail of another move id is refused
     * (the fail's re-check stays). */
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_FAIL, 6, 200, NULL, 0)), TN_ENOTFOUND);
    assert_int_equal(ps->nmark, 1);
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_FAIL, 5, 200, NULL, 0)), 0);
    assert_int_equal(ps->nmark, 0);
    assert_int_equal(apply(&s, mark_cmd("r", 0, 5, mk, 1)), TN_ENOTFOUND);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* A factor-1 partition's move (docs/replication.md, "Moving a factor-1
 * partition"): its begin makes it a state over its owner alone, then the
 * rules of any move; refused ones leave it without a state. */
static void test_factor1_move_through_state(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four(&s);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 3, 1, 1)), 0);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "one");
    assert_int_equal(e->owners[0], 1);
    assert_int_equal(e->owners[2], 3);
    assert_null(tn_meta_state_pstate(&s, "one", 0));
    assert_int_equal(tn_meta_state_single_held(&s, 1), 1);
    tells_t told;
    tell_to(&s, &told);
    /* Refusals change nothing: the owner itself, an unknown member, two
     * members, an owner that is not live. */
    const uint32_t to4[1] = {4}, to1[1] = {1}, to9[1] = {9}, two[2] = {4, 2};
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 1, 5, to1, 1)), UV_EINVAL);
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 1, 5, to9, 1)), UV_EINVAL);
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 1, 5, two, 2)), UV_EINVAL);
    assert_int_equal(apply(&s, fence(3, 103)), 0);
    tn_pstate_t from;
    char err[160];
    assert_int_equal(tn_meta_state_move_from(&s, "one", 2, &from, err, sizeof(err)), UV_EPERM);
    assert_non_null(strstr(err, "member 3, is not alive"));
    assert_int_equal(apply(&s, move_cmd("one", 2, TN_MOVE_BEGIN, 1, 5, to4, 1)), UV_EPERM);
    assert_int_equal(tn_meta_state_move_from(&s, "one", 7, &from, err, sizeof(err)), TN_ENOTFOUND);
    assert_null(tn_meta_state_pstate(&s, "one", 0));
    assert_null(tn_meta_state_pstate(&s, "one", 2));
    assert_int_equal(told.n, 0);
    /* Begun: replicas 4 then 1, the owner alone in the ISR leading epoch 1. */
    assert_int_equal(tn_meta_state_move_from(&s, "one", 0, &from, err, sizeof(err)), 0);
    assert_int_equal(from.nreplicas, 1);
    assert_int_equal(from.leader, 1);
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 1, 5, to4, 1)), 0);
    assert_true(was_told(&told, "one", 0));
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "one", 0);
    assert_non_null(ps);
    assert_int_equal(ps->nreplicas, 2);
    assert_int_equal(ps->replicas[0], 4);
    assert_int_equal(ps->replicas[1], 1);
    assert_int_equal(ps->leader, 1);
    assert_int_equal(ps->leader_epoch, 1);
    assert_int_equal(ps->min_insync, 1);
    assert_int_equal(ps->nisr, 1);
    assert_true(ps->isr[0].node == 1 && ps->isr[0].incarnation == 101);
    assert_null(tn_meta_state_pstate(&s, "one", 1)); /* only the moved one */
    assert_int_equal(tn_meta_state_owner(&s, "one", 0), 1);
    assert_int_equal(tn_meta_state_single_held(&s, 1), 0);
    assert_int_equal(tn_meta_state_replicas_held(&s, 4), 1);
    assert_int_equal(tn_meta_state_outbound_moves(&s, 1), 1);
    /* The snapshot holds it; the topic stays factor 1. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    expect_same_pstate(ps, tn_meta_state_pstate(&r, "one", 0));
    assert_null(tn_meta_state_pstate(&r, "one", 1));
    assert_int_equal(tn_meta_topic_factor(&tn_meta_topic_find(&r, "one")->rec), 1);
    expect_same_snapshot(&s, &r);
    /* Completes once the target is in the ISR: 4 leads in a new epoch,
     * alone, and owns it. */
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_COMPLETE, 1, 6, NULL, 0)), UV_EAGAIN);
    const uint32_t both[2] = {1, 4};
    tn_meta_cmd_t cas = isr_cmd(ps, 1, ps->partition_epoch, both, 2, &s);
    snprintf(cas.topic.name, sizeof(cas.topic.name), "one");
    assert_int_equal(apply(&s, cas), 0);
    assert_int_equal(apply(&r, cas), 0);
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_COMPLETE, 1, 6, NULL, 0)), 0);
    assert_int_equal(apply(&r, move_cmd("one", 0, TN_MOVE_COMPLETE, 1, 6, NULL, 0)), 0);
    assert_int_equal(ps->nreplicas, 1);
    assert_int_equal(ps->replicas[0], 4);
    assert_int_equal(ps->leader, 4);
    assert_int_equal(ps->leader_epoch, 2);
    assert_int_equal(e->owners[0], 4);
    assert_int_equal(tn_meta_state_owner(&s, "one", 0), 4);
    assert_int_equal(tn_meta_state_replicas_held(&s, 1), 0);
    assert_int_equal(tn_meta_state_owned(&s, 1), 0);
    const tn_meta_move_t *mv = tn_meta_state_move_done(&s, 0);
    assert_true(mv->nfrom == 1 && mv->from[0] == 1 && mv->nto == 1 && mv->to[0] == 4);
    expect_same_snapshot(&s, &r);
    /* Growth gives the new partition an owner and no state. */
    tn_meta_cmd_t grow = tu_meta_native_topic_cmd("one", 4, 1, 1);
    grow.if_absent = false;
    assert_int_equal(apply(&s, grow), 0);
    assert_null(tn_meta_state_pstate(&s, "one", 3));
    assert_true(tn_meta_topic_find(&s, "one")->owners[3] != 0);
    assert_non_null(tn_meta_state_pstate(&s, "one", 0));
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

static tn_meta_cmd_t factor_cmd(const tn_meta_state_t *s, const char *name, uint8_t factor,
                                uint8_t min_insync)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_FACTOR;
    c.if_unchanged = true;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, name);
    c.expect = e != NULL ? tn_meta_topic_fingerprint(&e->rec) : 1;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.topic.replication_factor = factor;
    c.topic.min_insync = min_insync;
    return c;
}

/* TOPIC_FACTOR: the codec; a factor-1 topic raised gives every partition a
 * state over its owner (refused whole while an owner is not alive); the
 * record changes only from the record it was made from; min_insync is
 * capped by the replicas each partition has and follows a move's
 * completion; lowered, the states stay; a snapshot keeps it all. */
static void test_topic_factor(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four(&s);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("one", 3, 1, 1)), 0);
    tn_meta_cmd_t c = factor_cmd(&s, "one", 3, 2), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_TOPIC_FACTOR);
    assert_string_equal(d.topic.name, "one");
    assert_int_equal(d.topic.replication_factor, 3);
    assert_int_equal(d.topic.min_insync, 2);
    assert_true(d.if_unchanged && d.expect == c.expect);
    tn_meta_cmd_fini(&d);
    /* Out of range: not encoded, and refused at decode. */
    tn_meta_cmd_t bad = c;
    bad.topic.min_insync = 4;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&bad, &b), UV_EINVAL);
    tn_buf_fini(&b);
    size_t at = 2 + strlen("one"); /* the name's length (u16) and bytes, then the factor */
    assert_int_equal(decode_patched(&c, at, 0), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, at, TN_META_MAX_FACTOR + 1), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, at + 1, 0), TN_ECORRUPT);
    assert_int_equal(decode_patched(&c, at + 1, 4), TN_ECORRUPT);
    /* Refusals change nothing: an unknown topic, a stale fingerprint, an
     * owner not alive. */
    tells_t told;
    tell_to(&s, &told);
    assert_int_equal(apply(&s, factor_cmd(&s, "nope", 3, 2)), TN_ENOTFOUND);
    tn_meta_cmd_t stale = factor_cmd(&s, "one", 3, 2);
    stale.expect ^= 1;
    assert_int_equal(apply(&s, stale), TN_ECHANGED);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "one");
    uint64_t owner2 = e->owners[2];
    assert_int_equal(apply(&s, fence(owner2, 100 + owner2)), 0);
    assert_int_equal(apply(&s, factor_cmd(&s, "one", 3, 2)), UV_EPERM);
    assert_int_equal(tn_meta_topic_factor(&e->rec), 1);
    for (uint32_t p = 0; p < 3; p++)
        assert_null(tn_meta_state_pstate(&s, "one", p));
    assert_int_equal(told.n, 0);
    /* The owner back: raised, every partition a one-replica state over its
     * owner, leading in epoch 1 with min_insync 1 (capped). */
    assert_int_equal(apply(&s, tu_meta_rec_cmd(owner2, 100 + owner2, 0)), 0);
    assert_int_equal(apply(&s, factor_cmd(&s, "one", 3, 2)), 0);
    e = tn_meta_topic_find(&s, "one");
    assert_int_equal(tn_meta_topic_factor(&e->rec), 3);
    assert_int_equal(tn_meta_topic_min_insync(&e->rec), 2);
    for (uint32_t p = 0; p < 3; p++) {
        const tn_pstate_t *ps = tn_meta_state_pstate(&s, "one", p);
        assert_non_null(ps);
        assert_int_equal(ps->nreplicas, 1);
        assert_int_equal(ps->replicas[0], e->owners[p]);
        assert_int_equal(ps->leader, e->owners[p]);
        assert_int_equal(ps->leader_epoch, 1);
        assert_int_equal(ps->min_insync, 1);
        assert_true(was_told(&told, "one", p));
    }
    assert_int_equal(apply(&s, c), TN_ECHANGED); /* made from the record before */
    /* A snapshot keeps the factor and the states. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    expect_same_snapshot(&s, &r);
    /* A move to three replicas: min_insync 2 at its completion. */
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "one", 0);
    uint32_t o = ps->replicas[0];
    uint32_t to[3] = {o, o % 4 + 1, (o + 1) % 4 + 1};
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 7, 5, to, 3)), 0);
    assert_int_equal(ps->min_insync, 1);
    tn_meta_cmd_t cas = isr_cmd(ps, o, ps->partition_epoch, to, 3, &s);
    snprintf(cas.topic.name, sizeof(cas.topic.name), "one");
    assert_int_equal(apply(&s, cas), 0);
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_COMPLETE, 7, 6, NULL, 0)), 0);
    assert_int_equal(ps->nreplicas, 3);
    assert_int_equal(ps->min_insync, 2);
    /* Lowered to 1: the record's min_insync and every state's go to 1;
     * the states stay (a factor-1 topic's moved partitions). */
    assert_int_equal(apply(&s, factor_cmd(&s, "one", 1, 1)), 0);
    assert_int_equal(tn_meta_topic_factor(&e->rec), 1);
    assert_int_equal(tn_meta_topic_min_insync(&e->rec), 1);
    assert_int_equal(ps->min_insync, 1);
    assert_int_equal(ps->nreplicas, 3); /* the metastore leader's moves shrink it */
    const uint32_t keep[1] = {o};
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_BEGIN, 8, 7, keep, 1)), 0);
    assert_int_equal(apply(&s, move_cmd("one", 0, TN_MOVE_COMPLETE, 8, 8, NULL, 0)), 0);
    assert_int_equal(ps->nreplicas, 1);
    assert_int_equal(ps->replicas[0], o);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* A factor-1 topic made while no member was alive (every partition
 * unassigned) raised: nothing to convert, and the partitions placed once a
 * member registers are replicated ones, each with a state (the apply must
 * have room for them). */
static void test_topic_factor_unplaced(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("u", 2, 1, 1)), 0);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(&s, "u");
    assert_true(e->owners[0] == 0 && e->owners[1] == 0);
    assert_int_equal(apply(&s, factor_cmd(&s, "u", 3, 2)), 0);
    assert_int_equal(tn_meta_topic_factor(&e->rec), 3);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal(apply(&s, tu_meta_rec_cmd(id, 100 + id, 0)), 0);
    for (uint32_t p = 0; p < 2; p++) {
        const tn_pstate_t *ps = tn_meta_state_pstate(&s, "u", p);
        assert_non_null(ps);
        assert_int_equal(ps->replicas[0], e->owners[p]);
    }
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    expect_same_snapshot(&s, &r);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* A PART_MOVE COMPLETE in the bytes an older build wrote (no flags byte
 * after the time), applied: as that build applied it, min_insync as it
 * was. A replica that applied it under that build and snapshotted has it
 * so; one replaying the same entry from an older snapshot must too. Here
 * a factor-3 topic (min_insync 2) made while one member was registered, its
 * partition moved to three members the way an older build allowed. */
static void test_move_complete_older_entry(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply(&s, tu_meta_rec_cmd(1, 101, 0)), 0);
    assert_int_equal(apply(&s, tu_meta_native_topic_cmd("r", 1, 3, 2)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", 0);
    assert_non_null(ps);
    assert_int_equal(ps->nreplicas, 1);
    assert_int_equal(ps->min_insync, 1);
    for (uint64_t id = 2; id <= 4; id++)
        assert_int_equal(apply(&s, tu_meta_rec_cmd(id, 100 + id, 0)), 0);
    const uint32_t to[3] = {1, 2, 3};
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 7, 5, to, 3)), 0);
    assert_int_equal(apply(&s, isr_cmd(ps, 1, ps->partition_epoch, to, 3, &s)), 0);
    /* The older build's bytes: name [2+1], part [4], kind [1], id [8],
     * ms [8], and nothing after. */
    tn_meta_cmd_t c = move_cmd("r", 0, TN_MOVE_COMPLETE, 7, 6, NULL, 0);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    uint32_t old_len = 2 + 1 + 4 + 1 + 8 + 8;
    unsigned char *bytes = (unsigned char *)tn_buf_data(&b);
    assert_true(tn_buf_size(&b) >= TN_META_HDR + old_len);
    tn_put_u32(bytes + 4, old_len);
    memset(bytes + TN_META_HDR + old_len, 0, tn_buf_size(&b) - TN_META_HDR - old_len);
    tn_meta_cmd_t d;
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(bytes, tn_buf_size(&b), &d, &used), 0);
    assert_int_equal(d.move_kind, TN_MOVE_COMPLETE);
    assert_true(d.move_unflagged);
    tn_buf_t again; /* encoded again as it came */
    tn_buf_init(&again);
    assert_int_equal(tn_meta_cmd_encode(&d, &again), 0);
    assert_int_equal(tn_buf_size(&again), used);
    assert_memory_equal(tn_buf_data(&again), bytes, used);
    tn_buf_fini(&again);
    assert_false(c.move_unflagged); /* this build's: the flags byte */
    assert_int_equal(payload_len(&c), old_len + 1);
    assert_int_equal(tn_meta_state_apply(&s, &d), 0);
    tn_meta_cmd_fini(&d);
    tn_buf_fini(&b);
    assert_int_equal(ps->nreplicas, 3);
    assert_int_equal(ps->min_insync, 1);
    tn_meta_state_fini(&s);
}

/* Rule 8's refusal for too few copies holds for this build's aborts
 * (their flags byte); an older build's entry (none) applies as that build
 * applied it, so that a log replays to the state it made then. */
static void test_move_abort_older_entry(void **state)
{
    (void)state;
    tn_meta_state_t s;
    four_with_r(&s, 1, 3, 2);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "r", 0);
    expect_replicas(ps, 1, 2, 3);
    /* 4 joins and catches up, then 2 and 3 fall behind: 1 and 4 hold the
     * acknowledged records. */
    const uint32_t to[3] = {1, 2, 4}, all[4] = {1, 2, 3, 4}, two[2] = {1, 4};
    assert_int_equal(apply(&s, move_cmd("r", 0, TN_MOVE_BEGIN, 7, 5, to, 3)), 0);
    assert_int_equal(apply(&s, isr_cmd(ps, 1, ps->partition_epoch, all, 4, &s)), 0);
    assert_int_equal(apply(&s, isr_cmd(ps, 1, ps->partition_epoch, two, 2, &s)), 0);
    tn_meta_cmd_t c = move_cmd("r", 0, TN_MOVE_ABORT, 7, 6, NULL, 0);
    snprintf(c.move_reason, sizeof(c.move_reason), "x");
    tn_pstate_t was = *ps;
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_EPERM);
    assert_memory_equal(&was, ps, sizeof(was));
    /* The older build's bytes: name [2+1], part [4], kind [1], id [8],
     * ms [8], reason [2+1], and nothing after. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    uint32_t old_len = 2 + 1 + 4 + 1 + 8 + 8 + 2 + 1;
    assert_int_equal(payload_len(&c), old_len + 1);
    unsigned char *bytes = (unsigned char *)tn_buf_data(&b);
    tn_put_u32(bytes + 4, old_len);
    memset(bytes + TN_META_HDR + old_len, 0, tn_buf_size(&b) - TN_META_HDR - old_len);
    tn_meta_cmd_t d;
    size_t used = 0;
    assert_int_equal(tn_meta_cmd_decode(bytes, tn_buf_size(&b), &d, &used), 0);
    assert_true(d.abort_unflagged);
    assert_string_equal(d.move_reason, "x");
    tn_buf_t again; /* encoded again as it came */
    tn_buf_init(&again);
    assert_int_equal(tn_meta_cmd_encode(&d, &again), 0);
    assert_int_equal(tn_buf_size(&again), used);
    assert_memory_equal(tn_buf_data(&again), bytes, used);
    tn_buf_fini(&again);
    assert_int_equal(tn_meta_state_apply(&s, &d), 0);
    tn_meta_cmd_fini(&d);
    tn_buf_fini(&b);
    expect_replicas(ps, 1, 2, 3);
    assert_int_equal(ps->nisr, 1);
    assert_int_equal(ps->isr[0].node, 1);
    tn_meta_state_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_topic_fields),
        cmocka_unit_test(test_codec_member_incarnation),
        cmocka_unit_test(test_codec_part_commands),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_update_keeps_factor),
        cmocka_unit_test(test_clamp_at_apply),
        cmocka_unit_test(test_fence_on_session_end),
        cmocka_unit_test(test_new_incarnation_fences),
        cmocka_unit_test(test_restart_fences),
        cmocka_unit_test(test_isr_cas),
        cmocka_unit_test(test_force_rebalance_corrupt),
        cmocka_unit_test(test_snapshot_roundtrip),
        cmocka_unit_test(test_restore_old_snapshot),
        cmocka_unit_test(test_grow_for_replicated),
        cmocka_unit_test(test_codec_part_move),
        cmocka_unit_test(test_moves_through_state),
        cmocka_unit_test(test_move_min_insync_cap),
        cmocka_unit_test(test_snapshot_with_move),
        cmocka_unit_test(test_factor1_move_through_state),
        cmocka_unit_test(test_move_marks),
        cmocka_unit_test(test_topic_factor),
        cmocka_unit_test(test_topic_factor_unplaced),
        cmocka_unit_test(test_move_complete_older_entry),
        cmocka_unit_test(test_move_abort_older_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
