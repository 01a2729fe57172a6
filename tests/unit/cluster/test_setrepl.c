/* Channel-state replication (cluster/setrepl.h): the SETTLE_REPL codec
 * (round trip, every refusal), the waiting rule (tn_setrepl_commit: which
 * records may count as settled given the followers' acks, the committed
 * ISR and min_insync, including ISR changes) and the leader's trimming
 * (tn_setrepl_trim); the follower's handler over real node RPC with a
 * real store: records land in the follower's channel log (read back after
 * a release), a retried request is not applied twice, a new log starts at
 * the leader's base frontier, a stale epoch is fenced (409), a newer one
 * is 503, a partition led here or not replicated is 421, a released
 * partition stays 421, records meant for another data directory
 * incarnation are 409, and state and records for a partition whose copy
 * is not open here yet are 503; and the leader path with a real engine:
 * a FIN's tn_channel_sync ends only once the follower wrote its record, fails
 * with TN_EFEWREPLICAS when the ISR is below min_insync and TN_EFENCED
 * once another node leads, and ends only after a snapshot when the
 * follower's data directory was made anew (an older build's follower
 * gets the encoding without the incarnation). Every test checks that
 * uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/setrepl.h"
#include "cluster/wire.h"
#include "core/err.h"
#include "core/time.h"
#include "storage/chanlog.h"
#include "storage/io.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- the codec --------------------------------------------------------------------- */

static void test_codec_round_trip(void **state)
{
    (void)state;
    tn_walrec_t recs[4] = {
        {.op = TN_WAL_FIN, .offset = 17},
        {.op = TN_WAL_REQ, .offset = 18, .due_ms = 1764590000123, .attempts = 3},
        {.op = TN_WAL_PAUSE, .value = 1},
        {.op = TN_WAL_SKIP, .offset = 19},
    };
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_put_u8(&b, 0xAA), 0); /* a prefix stays as it was */
    assert_int_equal(tn_wire_setrepl_encode(&b, "orders", 7, 42, "billing", 0x1122334455667788u,
                                            1000, 555, recs, 4, 0, 0),
                     0);
    tn_wire_setrepl_t w;
    char err[256];
    const uint8_t *p = (const uint8_t *)tn_buf_data(&b) + 1;
    size_t len = tn_buf_size(&b) - 1;
    assert_int_equal(len, 4 + 6 + 4 + 4 + 4 + 7 + 8 + 8 + 8 + 4 + 4 * TN_SETREPL_REC_SIZE);
    assert_int_equal(tn_wire_setrepl_decode(p, len, &w, err, sizeof(err)), 0);
    assert_string_equal(w.topic, "orders");
    assert_string_equal(w.channel, "billing");
    assert_int_equal(w.partition, 7);
    assert_int_equal(w.leader_epoch, 42);
    assert_true(w.stream == 0x1122334455667788u);
    assert_int_equal(w.first_seq, 1000);
    assert_int_equal(w.base_frontier, 555);
    assert_int_equal(w.count, 4);
    for (uint32_t i = 0; i < 4; i++) {
        tn_walrec_t r;
        tn_wire_setrepl_rec(&w, i, &r);
        assert_int_equal(r.op, recs[i].op);
        assert_true(r.offset == recs[i].offset);
        assert_true(r.due_ms == recs[i].due_ms);
        assert_int_equal(r.attempts, recs[i].attempts);
        assert_true(r.value == recs[i].value);
    }
    /* The RPC server's shape check takes it, with its opcode. */
    ((uint8_t *)tn_buf_data(&b))[0] = TN_OP_SETTLE_REPL;
    assert_int_equal(tn_wire_request_check(tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(tn_wire_op_lane(TN_OP_SETTLE_REPL), TN_LANE_REPLICA);
    assert_string_equal(tn_wire_op_name(TN_OP_SETTLE_REPL), "settle_repl");
    tn_buf_fini(&b);
}

/* The channel's stamp after the records (and after a CHAN_SNAP's state):
 * absent when 0, as an older build sends; a present 0 is refused. */
static void test_codec_stamp(void **state)
{
    (void)state;
    tn_walrec_t fin = {.op = TN_WAL_FIN, .offset = 1};
    tn_buf_t b, old;
    tn_buf_init(&b);
    tn_buf_init(&old);
    assert_int_equal(tn_wire_setrepl_encode(&old, "t", 0, 1, "c", 1, 1, 0, &fin, 1, 0, 0), 0);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 1, 0, &fin, 1, 0xABCDull, 0), 0);
    assert_int_equal(tn_buf_size(&b), tn_buf_size(&old) + 8);
    assert_memory_equal(tn_buf_data(&b), tn_buf_data(&old), tn_buf_size(&old));
    tn_wire_setrepl_t w;
    char err[256];
    assert_int_equal(tn_wire_setrepl_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
                     0);
    assert_true(w.chan_stamp == 0xABCDull);
    assert_int_equal(w.count, 1);
    assert_int_equal(
        tn_wire_setrepl_decode(tn_buf_data(&old), tn_buf_size(&old), &w, err, sizeof(err)), 0);
    assert_true(w.chan_stamp == 0);
    uint8_t *g = (uint8_t *)tn_buf_data(&b);
    size_t n = tn_buf_size(&b);
    memset(g + n - 8, 0, 8); /* a stamp of 0 */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    assert_int_equal(tn_wire_setrepl_decode(g, n - 1, &w, err, sizeof(err)), TN_EPROTO);

    tn_cursor_t c;
    tn_cursor_init(&c, 5);
    tn_buf_reset(&b);
    tn_buf_reset(&old);
    assert_int_equal(tn_wire_chansnap_encode(&old, "t", 0, 1, "c", 9, 1, 0, &c, 0), 0);
    assert_int_equal(tn_wire_chansnap_encode(&b, "t", 0, 1, "c", 9, 1, 0, &c, 77), 0);
    assert_int_equal(tn_buf_size(&b), tn_buf_size(&old) + 8);
    tn_wire_chansnap_t cs;
    assert_int_equal(
        tn_wire_chansnap_decode(tn_buf_data(&b), tn_buf_size(&b), &cs, err, sizeof(err)), 0);
    assert_true(cs.chan_stamp == 77);
    assert_int_equal(cs.state.frontier, 5);
    tn_cursor_fini(&cs.state);
    assert_int_equal(
        tn_wire_chansnap_decode(tn_buf_data(&old), tn_buf_size(&old), &cs, err, sizeof(err)), 0);
    assert_true(cs.chan_stamp == 0);
    tn_cursor_fini(&cs.state);
    g = (uint8_t *)tn_buf_data(&b);
    n = tn_buf_size(&b);
    memset(g + n - 8, 0, 8);
    assert_int_equal(tn_wire_chansnap_decode(g, n, &cs, err, sizeof(err)), TN_EPROTO);
    tn_cursor_fini(&cs.state);
    for (size_t cut = 1; cut < 8; cut++) { /* part of a stamp: trailing bytes */
        assert_int_equal(tn_wire_chansnap_decode(g, n - cut, &cs, err, sizeof(err)), TN_EPROTO);
        tn_cursor_fini(&cs.state);
    }
    tn_cursor_fini(&c);
    tn_buf_fini(&old);
    tn_buf_fini(&b);
}

/* The follower's incarnation after the stamp: with it the stamp is
 * written even when 0; an incarnation of 0 written is refused, and so is
 * part of one. */
static void test_codec_incarnation(void **state)
{
    (void)state;
    tn_walrec_t fin = {.op = TN_WAL_FIN, .offset = 1};
    tn_buf_t b, old;
    tn_buf_init(&b);
    tn_buf_init(&old);
    assert_int_equal(tn_wire_setrepl_encode(&old, "t", 0, 1, "c", 1, 1, 0, &fin, 1, 0, 0), 0);
    tn_wire_setrepl_t w;
    char err[256];
    struct {
        uint64_t stamp, inc;
        size_t extra;
    } cases[] = {{0, 0, 0}, {0xAB, 0, 8}, {0, 0x77, 16}, {0xAB, 0x77, 16}};
    for (size_t i = 0; i < TN_ARRAY_SIZE(cases); i++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 1, 0, &fin, 1,
                                                cases[i].stamp, cases[i].inc),
                         0);
        assert_int_equal(tn_buf_size(&b), tn_buf_size(&old) + cases[i].extra);
        assert_memory_equal(tn_buf_data(&b), tn_buf_data(&old), tn_buf_size(&old));
        assert_int_equal(
            tn_wire_setrepl_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)), 0);
        assert_true(w.chan_stamp == cases[i].stamp);
        assert_true(w.incarnation == cases[i].inc);
        assert_int_equal(w.count, 1);
    }
    /* The last case: an incarnation of 0 written, and cut ones. */
    uint8_t *g = (uint8_t *)tn_buf_data(&b);
    size_t n = tn_buf_size(&b);
    memset(g + n - 8, 0, 8);
    err[0] = '\0';
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    assert_non_null(strstr(err, "incarnation"));
    for (size_t cut = 1; cut < 8; cut++)
        assert_int_equal(tn_wire_setrepl_decode(g, n - cut, &w, err, sizeof(err)), TN_EPROTO);
    tn_buf_fini(&old);
    tn_buf_fini(&b);
}

static void test_codec_refusals(void **state)
{
    (void)state;
    tn_walrec_t fin = {.op = TN_WAL_FIN, .offset = 1};
    tn_walrec_t bad = {.op = TN_SETREPL_OP_MAX + 1};
    char long_name[300];
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    tn_buf_t b;
    tn_buf_init(&b);
    /* The encoder refuses what the decoder would, and leaves b as it was. */
    assert_int_equal(tn_wire_setrepl_encode(&b, "", 0, 1, "c", 1, 1, 0, &fin, 1, 0, 0), UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "", 1, 1, 0, &fin, 1, 0, 0), UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, long_name, 0, 1, "c", 1, 1, 0, &fin, 1, 0, 0),
                     UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 0, "c", 1, 1, 0, &fin, 1, 0, 0), UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 0, 0, &fin, 1, 0, 0), UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 1, 0, &fin, 0, 0, 0), UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, UINT64_MAX, 0, &fin, 1, 0, 0),
                     UV_EINVAL);
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 1, 0, &bad, 1, 0, 0), UV_EINVAL);
    tn_walrec_t many[TN_SETREPL_MAX + 1];
    for (size_t i = 0; i < TN_ARRAY_SIZE(many); i++)
        many[i] = fin;
    assert_int_equal(
        tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 1, 0, many, TN_SETREPL_MAX + 1, 0, 0),
        UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    assert_int_equal(
        tn_wire_setrepl_encode(&b, "t", 0, 1, "c", 1, 1, 0, many, TN_SETREPL_MAX, 0, 0), 0);
    tn_wire_setrepl_t w;
    char err[256];
    assert_int_equal(tn_wire_setrepl_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
                     0);
    assert_int_equal(w.count, TN_SETREPL_MAX);

    /* A good request, then each way of spoiling it. */
    tn_buf_reset(&b);
    tn_walrec_t two[2] = {fin, {.op = TN_WAL_EMPTY, .offset = 5}};
    assert_int_equal(tn_wire_setrepl_encode(&b, "t", 3, 2, "c", 5, 10, 0, two, 2, 0, 0), 0);
    uint8_t *g = (uint8_t *)tn_buf_data(&b);
    size_t n = tn_buf_size(&b);
    for (size_t cut = 0; cut < n; cut++) {
        err[0] = '\0';
        assert_int_equal(tn_wire_setrepl_decode(g, cut, &w, err, sizeof(err)), TN_EPROTO);
        assert_true(err[0] != '\0'); /* every refusal says why */
    }
    uint8_t *longer = malloc(n + 1);
    assert_non_null(longer);
    memcpy(longer, g, n);
    longer[n] = 0;
    assert_int_equal(tn_wire_setrepl_decode(longer, n + 1, &w, NULL, 0), TN_EPROTO);
    free(longer);
    /* Offsets: topic "t" at 0..4, partition 5, epoch 9, channel 13..17,
     * stream 18, first_seq 26, base_frontier 34, count 42, records from
     * 46. */
    size_t rec0 = 46;
    g[rec0] = TN_SETREPL_OP_MAX + 1; /* an unknown record op */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[rec0] = 0;
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[rec0] = TN_WAL_FIN;
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), 0);
    g[45] = 3; /* count says 3, two are there */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[45] = 0; /* count 0 */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[45] = 2;
    g[12] = 0; /* epoch 0 */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[12] = 2;
    g[33] = 0; /* first_seq 0 */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[33] = 10;
    g[4] = 0; /* a NUL in the topic */
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), TN_EPROTO);
    g[4] = 't';
    assert_int_equal(tn_wire_setrepl_decode(g, n, &w, err, sizeof(err)), 0);
    tn_buf_fini(&b);
}

/* --- the waiting rule ---------------------------------------------------------------- */

static tn_pstate_member_t mem(uint32_t node)
{
    return (tn_pstate_member_t){node, 100 + node};
}

static void test_rule_min_insync(void **state)
{
    (void)state;
    tn_pstate_member_t isr3[3] = {mem(1), mem(2), mem(3)};
    tn_setrepl_ack_t acks[2] = {{2, 5}, {3, 3}};
    bool starved = true;
    /* Every ISR follower must have it (any may lead next): the lowest
     * ack, capped by the leader's own sync, whatever min_insync is. */
    assert_int_equal(tn_setrepl_commit(7, acks, 2, isr3, 3, 1, 2, &starved), 3);
    assert_false(starved);
    assert_int_equal(tn_setrepl_commit(2, acks, 2, isr3, 3, 1, 2, &starved), 2);
    assert_int_equal(tn_setrepl_commit(7, acks, 2, isr3, 3, 1, 3, &starved), 3);
    assert_int_equal(tn_setrepl_commit(7, acks, 2, isr3, 3, 1, 1, &starved), 3);
    tn_setrepl_ack_t more[2] = {{2, 9}, {3, 8}};
    assert_int_equal(tn_setrepl_commit(7, more, 2, isr3, 3, 1, 2, &starved), 7);
    /* min_insync 1 (or 0) with the leader alone in the ISR: its own sync. */
    tn_pstate_member_t isr1[1] = {mem(1)};
    assert_int_equal(tn_setrepl_commit(7, NULL, 0, isr1, 1, 1, 1, &starved), 7);
    assert_int_equal(tn_setrepl_commit(7, NULL, 0, isr1, 1, 1, 0, &starved), 7);
    assert_false(starved);
    /* A follower that acked nothing yet holds everything. */
    assert_int_equal(tn_setrepl_commit(7, NULL, 0, isr3, 3, 1, 2, &starved), 0);
    assert_false(starved);
    tn_setrepl_ack_t one[1] = {{2, 6}};
    assert_int_equal(tn_setrepl_commit(7, one, 1, isr3, 3, 1, 2, &starved), 0);
    /* The leader's own entry in acks never counts as a follower's. */
    tn_setrepl_ack_t selfack[3] = {{1, 9}, {2, 4}, {3, 4}};
    assert_int_equal(tn_setrepl_commit(7, selfack, 3, isr3, 3, 1, 2, &starved), 4);
    /* Duplicated entries for one node count once, at their best. */
    tn_setrepl_ack_t dup[3] = {{2, 2}, {2, 6}, {3, 7}};
    assert_int_equal(tn_setrepl_commit(7, dup, 3, isr3, 3, 1, 2, &starved), 6);
    /* NULL starved is allowed. */
    assert_int_equal(tn_setrepl_commit(7, acks, 2, isr3, 3, 1, 2, NULL), 3);
}

static void test_rule_isr_changes(void **state)
{
    (void)state;
    tn_setrepl_ack_t acks[2] = {{2, 9}, {3, 4}};
    bool starved;
    /* ISR {1,2,3}: the slow follower 3 holds the settles at 4. */
    tn_pstate_member_t isr3[3] = {mem(1), mem(2), mem(3)};
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr3, 3, 1, 2, &starved), 4);
    /* 3 shrunk out (min 2): follower 2 alone decides. */
    tn_pstate_member_t isr12[2] = {mem(1), mem(2)};
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr12, 2, 1, 2, &starved), 9);
    assert_false(starved);
    /* 2 shrunk out instead: an ack from outside the ISR never counts. */
    tn_pstate_member_t isr13[2] = {mem(1), mem(3)};
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr13, 2, 1, 2, &starved), 4);
    /* min 3 with an ISR of two: starved, whatever the acks. */
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr12, 2, 1, 3, &starved), 0);
    assert_true(starved);
    /* ISR down to the leader alone with min 2: starved. */
    tn_pstate_member_t isr1[1] = {mem(1)};
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr1, 1, 1, 2, &starved), 0);
    assert_true(starved);
    /* ... but min 1 confirms on the leader's sync. */
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr1, 1, 1, 1, &starved), 10);
    assert_false(starved);
    /* The node is not in the ISR (it no longer leads): starved. */
    tn_pstate_member_t isr23[2] = {mem(2), mem(3)};
    assert_int_equal(tn_setrepl_commit(10, acks, 2, isr23, 2, 1, 1, &starved), 0);
    assert_true(starved);
    /* Five replicas: the lowest of the four followers. */
    tn_pstate_member_t isr5[5] = {mem(1), mem(2), mem(3), mem(4), mem(5)};
    tn_setrepl_ack_t acks5[4] = {{2, 3}, {3, 8}, {4, 6}, {5, 1}};
    assert_int_equal(tn_setrepl_commit(10, acks5, 4, isr5, 5, 1, 3, &starved), 1);
    /* 5 shrunk out: 3. */
    tn_pstate_member_t isr4[4] = {mem(1), mem(2), mem(3), mem(4)};
    assert_int_equal(tn_setrepl_commit(10, acks5, 4, isr4, 4, 1, 3, &starved), 3);
    assert_int_equal(tn_setrepl_commit(2, acks5, 4, isr4, 4, 1, 3, &starved), 2);
}

/* The members outside the committed ISR that count (tn_setrepl_extra):
 * an ELR left beside the ISR, the counted followers, the proposed ones,
 * each once, none of the ISR. */
static void test_rule_extra(void **state)
{
    (void)state;
    tn_pstate_member_t isr1[1] = {mem(1)};
    tn_pstate_member_t elr[2] = {mem(2), mem(3)};
    uint32_t counted[2] = {3, 4};
    uint32_t pending[2] = {4, 1};
    uint32_t out[TN_PSTATE_MAX_REPLICAS];
    assert_int_equal(tn_setrepl_extra(isr1, 1, elr, 2, counted, 2, pending, 2, out), 3);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 4);
    assert_int_equal(tn_setrepl_extra(isr1, 1, NULL, 0, NULL, 0, NULL, 0, out), 0);
    /* min_insync lowered to 1 under the ELR {2}: node 2 may still be
     * elected, so the leader's own sync does not confirm alone. */
    bool starved = true;
    uint32_t n = tn_setrepl_extra(isr1, 1, elr, 1, NULL, 0, NULL, 0, out);
    assert_int_equal(tn_setrepl_commit_with(7, NULL, 0, isr1, 1, out, n, 1, 1, &starved), 0);
    assert_false(starved);
    tn_setrepl_ack_t acks[1] = {{2, 5}};
    assert_int_equal(tn_setrepl_commit_with(7, acks, 1, isr1, 1, out, n, 1, 1, &starved), 5);
}

static void test_trim(void **state)
{
    (void)state;
    /* Records 10..20 kept; followers have up to 14; 17 decided. */
    assert_int_equal(tn_setrepl_trim(10, 20, 17, 14, 100), 15);
    /* Every follower has more than is decided: only decided ones go. */
    assert_int_equal(tn_setrepl_trim(10, 20, 17, 19, 100), 18);
    /* Nothing new to drop. */
    assert_int_equal(tn_setrepl_trim(10, 20, 17, 5, 100), 10);
    assert_int_equal(tn_setrepl_trim(10, 20, 9, 20, 100), 10);
    /* All decided and had: empty. */
    assert_int_equal(tn_setrepl_trim(10, 20, 20, 20, 100), 21);
    /* A follower stuck at 5 with 11 kept and a bound of 4: decided
     * records go down to the bound, undecided ones stay. */
    assert_int_equal(tn_setrepl_trim(10, 20, 20, 5, 4), 17);
    assert_int_equal(tn_setrepl_trim(10, 20, 13, 5, 4), 14);
    assert_int_equal(tn_setrepl_trim(10, 20, 9, 5, 4), 10);
    /* An empty stream stays empty. */
    assert_int_equal(tn_setrepl_trim(10, 9, 9, 9, 4), 10);
}

/* --- the follower's handler -------------------------------------------------------------- */

/* The partition state the follower's metastore replica shows. */
static tn_pstate_t script_ps;
static bool script_found;
static uint32_t script_part = 1; /* the partition of "orders" it describes */

static int script_pstate(void *arg, const char *topic, uint32_t p, tn_pstate_t *out)
{
    (void)arg;
    if (!script_found || strcmp(topic, "orders") != 0 || p != script_part)
        return TN_ENOTFOUND;
    *out = script_ps;
    return 0;
}

static uint64_t push_base;       /* base_frontier of the next pushes */
static uint64_t ffx_incarnation; /* the follower's data directory incarnation */
static bool ffx_copy_gate;       /* ffx_new gives the follower a copy_ready */
static bool copy_open;           /* what that copy_ready answers */

static bool copy_ready(void *arg, const char *topic, uint32_t p)
{
    (void)arg;
    (void)topic;
    (void)p;
    return copy_open;
}

typedef struct {
    uv_loop_t loop;
    char *dir;
    tn_store_t *store;
    tn_setrepl_t *s;
    tu_rpc_pair_t rpc;
} ffx_t;

static ffx_t *ffx_new(void)
{
    ffx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->dir = tu_tempdir();
    tn_store_opts_t so;
    tu_store_opts(&so, f->dir);
    f->store = tu_store_open(&f->loop, &so);
    tn_setrepl_opts_t o = {.loop = &f->loop,
                           .node_id = 1,
                           .store = f->store,
                           .pstate = script_pstate,
                           .incarnation = ffx_incarnation,
                           .copy_ready = ffx_copy_gate ? copy_ready : NULL};
    assert_int_equal(tn_setrepl_new(&o, &f->s), 0);
    tn_rpc_handler_t h[TN_SETREPL_HANDLERS];
    size_t nh = 0;
    tn_setrepl_handlers(f->s, h, &nh);
    assert_int_equal(nh, 2);
    assert_int_equal(h[0].op, TN_OP_SETTLE_REPL);
    assert_int_equal(h[1].op, TN_OP_CHAN_SNAP);
    tu_rpc_pair_open(&f->rpc, &f->loop, h, nh);
    script_ps = tu_pstate3(2, 1, 3, 2, 3);
    script_ps.nisr = 3;
    script_ps.isr[0] = mem(2);
    script_ps.isr[1] = mem(1);
    script_ps.isr[2] = mem(3);
    script_found = true;
    script_part = 1;
    push_base = 0;
    return f;
}

static bool closed_flag;
static void on_closed(void *arg)
{
    (void)arg;
    closed_flag = true;
}

static void ffx_free(ffx_t *f)
{
    tu_rpc_pair_close(&f->rpc, &f->loop);
    closed_flag = false;
    tn_setrepl_close(f->s, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    tu_store_close(&f->loop, f->store);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    tu_rmrf(f->dir);
    free(f->dir);
    free(f);
}

static uint16_t push(ffx_t *f, uint32_t epoch, uint64_t stream, uint64_t first,
                     const tn_walrec_t *recs, uint32_t n, tu_rpc_raw_t *r)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_setrepl_encode(&b, "orders", 1, epoch, "billing", stream, first,
                                            push_base, recs, n, 0, 0),
                     0);
    uint16_t st = tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE_REPL, &b, 10000, r);
    tn_buf_fini(&b);
    return st;
}

/* push, meant for the follower's data directory inc (0: any). */
static uint16_t push_inc(ffx_t *f, uint64_t inc, uint64_t stream, uint64_t first,
                         const tn_walrec_t *recs, uint32_t n, tu_rpc_raw_t *r)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_setrepl_encode(&b, "orders", 1, 3, "billing", stream, first, push_base,
                                            recs, n, 0, inc),
                     0);
    uint16_t st = tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE_REPL, &b, 10000, r);
    tn_buf_fini(&b);
    return st;
}

static uint16_t snap(ffx_t *f, uint32_t epoch, uint64_t stream, uint64_t seq, uint64_t inc,
                     const tn_cursor_t *state, tu_rpc_raw_t *r)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(
        tn_wire_chansnap_encode(&b, "orders", 1, epoch, "billing", stream, seq, inc, state, 0), 0);
    uint16_t st = tu_rpc_raw(&f->rpc, &f->loop, TN_OP_CHAN_SNAP, &b, 10000, r);
    tn_buf_fini(&b);
    return st;
}

static bool released_flag;
static void on_released(void *arg)
{
    *(bool *)arg = true;
}

static void on_cl_closed(tn_chanlog_t *cl)
{
    *(bool *)cl->data = true;
}

/* Promote the follower's copy of orders/1: its channel logs close. */
static void release_orders(ffx_t *f)
{
    released_flag = false;
    tn_setrepl_release(f->s, "orders", 1, on_released, &released_flag);
    tu_run_until(&f->loop, &released_flag);
}

/* Read the follower's channel log back (after a release closed it). */
static void read_back(ffx_t *f, tn_cursor_t *cur)
{
    tn_chanlog_t *cl = NULL;
    assert_int_equal(tn_chanlog_open(f->store, "orders", 1, "billing", NULL, &cl, cur), 0);
    assert_int_equal(tn_chanlog_err(cl), 0);
    bool done = false;
    cl->data = &done;
    tn_chanlog_close(cl, on_cl_closed);
    tu_run_until(&f->loop, &done);
}

static void test_follower_writes(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tu_rpc_raw_t r;
    tn_walrec_t a[3] = {
        {.op = TN_WAL_FIN, .offset = 0},
        {.op = TN_WAL_FIN, .offset = 1},
        {.op = TN_WAL_REQ, .offset = 2, .due_ms = 5, .attempts = 2},
    };
    assert_int_equal(push(f, 3, 77, 1, a, 3, &r), 204);
    /* The same request again (its answer was lost): nothing applied twice. */
    assert_int_equal(push(f, 3, 77, 1, a, 3, &r), 204);
    /* Overlapping: only record 4 is new. */
    tn_walrec_t b[2] = {a[2], {.op = TN_WAL_FIN, .offset = 3}};
    assert_int_equal(push(f, 3, 77, 3, b, 2, &r), 204);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.served_records, 4);
    assert_int_equal(st.followed, 1);

    /* A stale epoch is fenced; a newer one waits for the replica. */
    assert_int_equal(push(f, 2, 77, 5, a, 1, &r), 409);
    assert_non_null(strstr(r.body, "fenced"));
    assert_int_equal(push(f, 4, 77, 5, a, 1, &r), 503);
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.fenced, 1);
    assert_int_equal(st.served_records, 4);

    /* Promotion: the log closes, then the callback; 421 from then on. */
    release_orders(f);
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.followed, 0);
    assert_int_equal(push(f, 3, 77, 5, a, 1, &r), 421);

    tn_cursor_t cur;
    read_back(f, &cur);
    assert_int_equal(cur.frontier, 2); /* 0 and 1 finished; 2 requeued */
    assert_int_equal(cur.finish_count, 3);
    assert_true(tn_cursor_is_settled(&cur, 3));
    const tn_requeue_t *rq = tn_cursor_requeued(&cur, 2);
    assert_non_null(rq);
    assert_int_equal(rq->attempts, 2);
    tn_cursor_fini(&cur);

    /* Demoted again (another node leads): following resumes, and a new
     * stream of the leader is taken from its first record. */
    script_ps.leader = 3;
    script_ps.leader_epoch = 4;
    tn_setrepl_pstate_changed(f->s, "orders", 1, &script_ps);
    tn_walrec_t c[1] = {{.op = TN_WAL_FIN, .offset = 2}};
    assert_int_equal(push(f, 4, 91, 1, c, 1, &r), 204);
    release_orders(f);
    read_back(f, &cur);
    assert_int_equal(cur.frontier, 4);
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* The records the full-disk tests write: the first alone, then the next
 * two on a full disk, then the last three once there is room. */
static const tn_walrec_t full_disk_recs[4] = {
    {.op = TN_WAL_FIN, .offset = 0},
    {.op = TN_WAL_FIN, .offset = 1},
    {.op = TN_WAL_REQ, .offset = 2, .due_ms = 5, .attempts = 2},
    {.op = TN_WAL_FIN, .offset = 3},
};

/* cur holds every one of full_disk_recs, its REQ counted once: the
 * leader's retry writes again the records of the failed call that a
 * round after the failed one wrote (tn_cursor_apply takes a REQ the
 * cursor has, the same, as written once). */
static void assert_full_disk_recs(const tn_cursor_t *cur)
{
    assert_int_equal(cur->frontier, 2);
    assert_true(tn_cursor_is_settled(cur, 3));
    const tn_requeue_t *rq = tn_cursor_requeued(cur, 2);
    assert_non_null(rq);
    assert_int_equal(rq->attempts, 2);
    printf("requeue_count %" PRIu64 "\n", cur->requeue_count);
    assert_int_equal(cur->requeue_count, 1);
}

/* A follower's channel log that finds the disk full fails those records
 * alone (507): the leader's retry once there is room writes them, with
 * no restart, and the records after them follow. */
static void test_follower_full_disk(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tu_rpc_raw_t r;
    const tn_walrec_t *a = full_disk_recs;
    assert_int_equal(push(f, 3, 77, 1, a, 1, &r), 204); /* zeros ahead of the WAL */
    tn_io_fail_write_after(0, UV_ENOSPC);
    assert_int_equal(push(f, 3, 77, 2, a + 1, 2, &r), 507);
    assert_non_null(strstr(r.body, "disk full"));
    tn_io_fail_write_after(-1, 0);
    /* Room again: the same records are written, not skipped. */
    assert_int_equal(push(f, 3, 77, 2, a + 1, 3, &r), 204);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.followed, 1);
    release_orders(f);
    tn_cursor_t cur;
    read_back(f, &cur);
    assert_full_disk_recs(&cur);
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* A channel made after messages were published: the follower creates its
 * log at the leader's frontier, not at 0; a log it has keeps its own. */
static void test_follower_base_frontier(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tu_rpc_raw_t r;
    push_base = 500;
    tn_walrec_t a[2] = {{.op = TN_WAL_FIN, .offset = 500}, {.op = TN_WAL_FIN, .offset = 502}};
    assert_int_equal(push(f, 3, 5, 1, a, 2, &r), 204);
    push_base = 9000; /* another stream: the log exists, its frontier stays */
    tn_walrec_t b[1] = {{.op = TN_WAL_FIN, .offset = 501}};
    assert_int_equal(push(f, 3, 6, 1, b, 1, &r), 204);
    push_base = 0;
    release_orders(f);
    tn_cursor_t cur;
    read_back(f, &cur);
    assert_int_equal(cur.frontier, 503);
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* A channel's state installed from the leader (CHAN_SNAP): the log holds
 * at least that state once it answered 204, keeps what it had beyond it,
 * and takes the stream's records after the snapshot's seq (not those it
 * covers); a state meant for another data directory, a stale epoch, a
 * partition not followed here and a malformed state are refused. */
static void test_follower_snapshot(void **state)
{
    (void)state;
    ffx_incarnation = 77;
    ffx_t *f = ffx_new();
    ffx_incarnation = 0;
    tu_rpc_raw_t r;
    /* What the log had from an earlier stream: offset 30 finished. */
    tn_walrec_t old[1] = {{.op = TN_WAL_FIN, .offset = 30}};
    assert_int_equal(push(f, 3, 39, 1, old, 1, &r), 204);

    tn_cursor_t c;
    tn_cursor_init(&c, 10);
    tn_walrec_t setup[4] = {
        {.op = TN_WAL_FIN, .offset = 12},
        {.op = TN_WAL_FIN, .offset = 15},
        {.op = TN_WAL_REQ, .offset = 11, .due_ms = 5, .attempts = 2},
        {.op = TN_WAL_TIMEOUTS, .value = 3},
    };
    for (int i = 0; i < 4; i++)
        assert_int_equal(tn_cursor_apply(&c, &setup[i]), 0);
    assert_int_equal(snap(f, 3, 40, 5, 78, &c, &r), 409); /* another data directory */
    assert_non_null(strstr(r.body, "incarnation"));
    assert_int_equal(snap(f, 2, 40, 5, 77, &c, &r), 409); /* stale epoch */
    assert_non_null(strstr(r.body, "fenced"));
    assert_int_equal(snap(f, 3, 40, 5, 77, &c, &r), 204);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.snapshots_installed, 1);
    /* Records of that stream: seq 5 is in the state already, 6 is new. */
    tn_walrec_t dup[1] = {{.op = TN_WAL_FIN, .offset = 20}};
    assert_int_equal(push(f, 3, 40, 5, dup, 1, &r), 204);
    tn_walrec_t next[1] = {{.op = TN_WAL_FIN, .offset = 11}};
    assert_int_equal(push(f, 3, 40, 6, next, 1, &r), 204);
    /* A malformed state: its checkpoint image's CRC spoiled. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_chansnap_encode(&b, "orders", 1, 3, "billing", 40, 5, 77, &c, 0), 0);
    ((uint8_t *)tn_buf_data(&b))[tn_buf_size(&b) - 1] ^= 0x5a;
    assert_int_equal(tu_rpc_raw(&f->rpc, &f->loop, TN_OP_CHAN_SNAP, &b, 10000, &r), 400);
    tn_buf_fini(&b);
    /* This node leads the partition: not its to install. */
    script_ps.leader = 1;
    assert_int_equal(snap(f, 3, 40, 5, 77, &c, &r), 421);
    script_ps.leader = 2;

    release_orders(f);
    tn_cursor_t cur;
    read_back(f, &cur);
    assert_int_equal(cur.frontier, 10);
    assert_true(tn_cursor_is_settled(&cur, 11)); /* finished after the state */
    assert_true(tn_cursor_is_settled(&cur, 12));
    assert_true(tn_cursor_is_settled(&cur, 15));
    assert_true(tn_cursor_is_settled(&cur, 30));  /* kept */
    assert_false(tn_cursor_is_settled(&cur, 20)); /* seq 5 was the state's */
    assert_false(tn_cursor_is_settled(&cur, 14));
    assert_int_equal(cur.timeout_count, 3);
    tn_cursor_fini(&cur);
    tn_cursor_fini(&c);
    ffx_free(f);
}

/* A follower whose replica manager has not opened its copy of the
 * partition yet (not marked a replica's: at the next start the engine
 * would skip a copy whose channels refer past its end) refuses the
 * leader's channel state and records (503, retried) and makes no channel
 * log; once the copy is open it takes them. */
static void test_follower_waits_for_its_copy(void **state)
{
    (void)state;
    ffx_copy_gate = true;
    copy_open = false;
    ffx_t *f = ffx_new();
    ffx_copy_gate = false;
    tu_rpc_raw_t r;
    tn_cursor_t c;
    tn_cursor_init(&c, 10);
    tn_walrec_t next[1] = {{.op = TN_WAL_FIN, .offset = 12}};
    assert_int_equal(snap(f, 3, 40, 5, 0, &c, &r), 503);
    assert_non_null(strstr(r.body, "not open yet"));
    assert_int_equal(push(f, 3, 40, 6, next, 1, &r), 503);
    assert_non_null(strstr(r.body, "not open yet"));
    bool ckpt = true, wal = true;
    assert_int_equal(tn_chanlog_probe(f->store, "orders", 1, "billing", &ckpt, &wal), 0);
    assert_false(ckpt);
    assert_false(wal);

    copy_open = true;
    assert_int_equal(snap(f, 3, 40, 5, 0, &c, &r), 204);
    assert_int_equal(push(f, 3, 40, 6, next, 1, &r), 204);
    release_orders(f);
    tn_cursor_t cur;
    read_back(f, &cur);
    assert_int_equal(cur.frontier, 10);
    assert_true(tn_cursor_is_settled(&cur, 12));
    tn_cursor_fini(&cur);
    tn_cursor_fini(&c);
    ffx_free(f);
}

/* Records meant for another data directory of this node than its own
 * (the leader holds an older one synced: this one was wiped and made
 * anew) are refused with 409 and not written; those meant for its own,
 * or for any (an older leader, an incarnation not known), are written. */
static void test_follower_refuses_another_incarnation(void **state)
{
    (void)state;
    ffx_incarnation = 77;
    ffx_t *f = ffx_new();
    ffx_incarnation = 0;
    tu_rpc_raw_t r;
    tn_walrec_t a[1] = {{.op = TN_WAL_FIN, .offset = 3}};
    tn_walrec_t b[1] = {{.op = TN_WAL_FIN, .offset = 4}};
    tn_walrec_t c[1] = {{.op = TN_WAL_FIN, .offset = 5}};
    assert_int_equal(push_inc(f, 78, 9, 1, a, 1, &r), 409);
    assert_non_null(strstr(r.body, "incarnation"));
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.other_incarnation, 1);
    assert_int_equal(st.served_records, 0);
    assert_int_equal(push_inc(f, 77, 9, 1, b, 1, &r), 204);
    assert_int_equal(push_inc(f, 0, 9, 2, c, 1, &r), 204);
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.served_records, 2);

    release_orders(f);
    tn_cursor_t cur;
    read_back(f, &cur);
    assert_false(tn_cursor_is_settled(&cur, 3));
    assert_true(tn_cursor_is_settled(&cur, 4));
    assert_true(tn_cursor_is_settled(&cur, 5));
    tn_cursor_fini(&cur);
    ffx_free(f);
}

static void test_follower_refuses(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tu_rpc_raw_t r;
    tn_walrec_t a[1] = {{.op = TN_WAL_FIN, .offset = 0}};
    /* This node leads the partition: its engine owns the channel logs. */
    script_ps.leader = 1;
    assert_int_equal(push(f, 3, 1, 1, a, 1, &r), 421);
    /* Not a replica here. */
    script_ps.leader = 2;
    script_ps.replicas[1] = 4;
    assert_int_equal(push(f, 3, 1, 1, a, 1, &r), 421);
    /* Not replicated (factor 1, or unknown). */
    script_found = false;
    assert_int_equal(push(f, 3, 1, 1, a, 1, &r), 421);
    /* Malformed, and a bad channel name. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_put_str(&b, "orders"), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE_REPL, &b, 10000, &r), 400);
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_setrepl_encode(&b, "orders", 1, 3, "bad name", 1, 1, 0, a, 1, 0, 0),
                     0);
    assert_int_equal(tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE_REPL, &b, 10000, &r), 400);
    tn_buf_fini(&b);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.served_records, 0);
    assert_int_equal(st.followed, 0);
    ffx_free(f);
}

/* --- the leader: the engine's waits held until the ISR has the records ------------- */

typedef struct {
    tn_consumer_t c;
    tn_delivery_t d[8];
    int n;
} lsink_t;

static void on_ldeliver(tn_consumer_t *c, const tn_delivery_t *d)
{
    lsink_t *k = c->data;
    assert_true(k->n < 8);
    k->d[k->n] = *d;
    k->d[k->n].body = NULL;
    k->d[k->n].key = NULL;
    k->n++;
}

static const char *follower_addr;
static const char *addr_of(void *arg, uint32_t node)
{
    (void)arg;
    return node == 2 ? follower_addr : NULL;
}

typedef struct {
    tn_chan_sync_t s;
    bool done;
    int status;
    uint64_t served_then; /* the follower's records written when it ended */
    uint64_t snaps_then;  /* the follower's snapshots installed when it ended */
} lsync_t;

static tn_setrepl_t *the_follower;

/* The member the leader's core proposed into the ISR (0: none). */
static uint32_t script_pending;
static uint32_t pending_of(void *arg, const char *topic, uint32_t p, uint32_t *out)
{
    (void)arg;
    (void)topic;
    (void)p;
    if (script_pending == 0)
        return 0;
    out[0] = script_pending;
    return 1;
}

static void on_lsync(tn_chan_sync_t *s, int status)
{
    lsync_t *w = s->data;
    tn_setrepl_stats_t st;
    tn_setrepl_stats(the_follower, &st);
    w->served_then = st.served_records;
    w->snaps_then = st.snapshots_installed;
    w->status = status;
    w->done = true;
}

typedef struct {
    tn_waiter_t w;
    bool done;
    int status;
} lwait_t;

static void on_lwait(tn_waiter_t *w, int status)
{
    lwait_t *x = (lwait_t *)w;
    x->status = status;
    x->done = true;
}

typedef struct {
    tn_pub_t p;
    bool done;
    int status;
} lpub_t;

static void on_lpub(tn_pub_t *p, int status)
{
    lpub_t *w = p->data;
    w->status = status;
    w->done = true;
}

static bool broker_gone;
static void on_broker_gone(tn_broker_t *b)
{
    (void)b;
    broker_gone = true;
}

/* FIN the k-th delivery of sink and wait for what its sync says. */
static int fin_and_sync(ffx_t *f, tn_channel_t *ch, lsink_t *k, int i, lsync_t *w)
{
    memset(w, 0, sizeof(*w));
    w->s.data = w;
    assert_int_equal(tn_consumer_fin(&k->c, 0, k->d[i].offset, false, 0), 0);
    tn_channel_sync(ch, 0, &w->s, on_lsync);
    tu_run_until(&f->loop, &w->done);
    return w->status;
}

/* The leader path's fixture: node 1 leads partition 0 of "orders" (its
 * own store, engine and replicator, calling from the pair's caller
 * endpoint) with the channel "billing" and n messages, all delivered to
 * sink k (leases of 60 s); node 2 follows it (the pair's served endpoint,
 * a replicator without an engine). ISR {1, 2}, min_insync 2. */
typedef struct {
    ffx_t *f;
    char *ldir;
    tn_store_t *lstore;
    tn_broker_t *b;
    tn_setrepl_t *leader;
    tn_topic_t *t;
    tn_channel_t *ch;
    lsink_t k;
} lfx_t;

/* The channel name of the leader's topic, made (a durable one). */
static tn_channel_t *lfx_channel(lfx_t *x, const char *name)
{
    tn_channel_t *ch = NULL;
    lwait_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_lwait;
    int rc = tn_topic_channel(x->t, name, strlen(name), true, &w.w, &ch);
    if (rc == UV_EAGAIN) {
        tu_run_until(&x->f->loop, &w.done);
        rc = tn_topic_channel(x->t, name, strlen(name), false, NULL, &ch);
    }
    assert_int_equal(rc, 0);
    return ch;
}

/* Sink k attached to ch, until it got n deliveries. */
static void lfx_attach(lfx_t *x, tn_channel_t *ch, lsink_t *k, int n)
{
    memset(k, 0, sizeof(*k));
    k->c.deliver = on_ldeliver;
    k->c.data = k;
    k->c.timeout_ms = 60000;
    tn_consumer_attach(&k->c, ch);
    tn_consumer_credit(&k->c, (uint32_t)n);
    while (k->n < n)
        uv_run(&x->f->loop, UV_RUN_ONCE);
}

/* The leader's keep_max for the next lfx_open (0: the default). */
static uint64_t lfx_keep_max;
static uint64_t lfx_uncount_ms;
/* Node 2's data directory incarnation for the next lfx_open (0: not
 * checked; its ISR entry says 102). */
static uint64_t lfx_follower_inc;

static void lfx_open(lfx_t *x, int n)
{
    memset(x, 0, sizeof(*x));
    ffx_t *f = x->f = ffx_new();
    script_part = 0;
    script_pending = 0;
    script_ps.replicas[0] = 1;
    script_ps.replicas[1] = 2;
    script_ps.leader = 1;
    script_ps.isr[0] = mem(1);
    script_ps.isr[1] = mem(2);
    script_ps.nisr = 2;
    /* The follower endpoint's setrepl is node 1 in ffx_new: make it node 2. */
    tu_rpc_pair_close(&f->rpc, &f->loop);
    closed_flag = false;
    tn_setrepl_close(f->s, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    tn_setrepl_opts_t fo = {.loop = &f->loop,
                            .node_id = 2,
                            .store = f->store,
                            .pstate = script_pstate,
                            .incarnation = lfx_follower_inc};
    assert_int_equal(tn_setrepl_new(&fo, &f->s), 0);
    the_follower = f->s;
    tn_rpc_handler_t h[TN_SETREPL_HANDLERS];
    size_t nh = 0;
    tn_setrepl_handlers(f->s, h, &nh);
    tu_rpc_pair_open(&f->rpc, &f->loop, h, nh);
    follower_addr = f->rpc.addr;

    x->ldir = tu_tempdir();
    tn_store_opts_t so;
    tu_store_opts(&so, x->ldir);
    x->lstore = tu_store_open(&f->loop, &so);
    tn_broker_opts_t bo;
    memset(&bo, 0, sizeof(bo));
    bo.default_partitions = 1;
    bo.bootstrap_window_ms = 90000;
    bo.cache_bytes = 1 << 20;
    bo.max_inflight_bytes = 1 << 30;
    bo.max_inflight_msgs = 100000;
    bo.max_ahead = 1 << 16;
    bo.gc_interval_ms = 3600000;
    assert_int_equal(tn_broker_open(&f->loop, x->lstore, &bo, &x->b), 0);
    tn_setrepl_opts_t lo = {.loop = &f->loop,
                            .node_id = 1,
                            .rpc = f->rpc.caller,
                            .store = x->lstore,
                            .broker = x->b,
                            .pstate = script_pstate,
                            .addr = addr_of,
                            .pending = pending_of,
                            .keep_max = lfx_keep_max,
                            .uncount_ms = lfx_uncount_ms};
    assert_int_equal(tn_setrepl_new(&lo, &x->leader), 0);

    lwait_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_lwait;
    int rc = tn_broker_topic(x->b, "orders", 6, true, 1, &w.w, &x->t);
    if (rc == UV_EAGAIN) {
        tu_run_until(&f->loop, &w.done);
        rc = tn_broker_topic(x->b, "orders", 6, false, 0, NULL, &x->t);
    }
    assert_int_equal(rc, 0);
    x->ch = lfx_channel(x, "billing");
    for (int i = 0; i < n; i++) {
        lpub_t pw;
        memset(&pw, 0, sizeof(pw));
        assert_int_equal(tn_pub_init(&pw.p, 1), 0);
        assert_int_equal(tn_pub_set(&pw.p, 0, "m", 1), 0);
        pw.p.data = &pw;
        assert_int_equal(tn_broker_publish(x->b, "orders", 6, &pw.p, 0, on_lpub), 0);
        tu_run_until(&f->loop, &pw.done);
        assert_int_equal(pw.status, 0);
        tn_pub_fini(&pw.p);
    }
    lfx_attach(x, x->ch, &x->k, n);
}

/* The leader side closed (the sinks detached first); x->f stays. */
static void lfx_close(lfx_t *x)
{
    ffx_t *f = x->f;
    closed_flag = false;
    tn_setrepl_close(x->leader, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    broker_gone = false;
    tn_broker_close(x->b, on_broker_gone);
    tu_run_until(&f->loop, &broker_gone);
    tu_store_close(&f->loop, x->lstore);
    tu_rmrf(x->ldir);
    free(x->ldir);
    follower_addr = f->rpc.addr;
    script_pending = 0;
    lfx_keep_max = 0;
    lfx_uncount_ms = 0;
    lfx_follower_inc = 0;
}

/* Run the loop until catch_up says node 2 caught up (asked every ms). */
static bool lfx_catch_up(lfx_t *x, uint32_t node)
{
    bool caught = tn_setrepl_catch_up(x->leader, "orders", 0, node, 0);
    int64_t until = tn_now_mono_ms() + 20000;
    while (!caught && tn_now_mono_ms() < until) {
        uv_run(&x->f->loop, UV_RUN_NOWAIT);
        usleep(1000);
        caught = tn_setrepl_catch_up(x->leader, "orders", 0, node, 0);
    }
    return caught;
}

/* The follower's log of channel after a release (the partition led by
 * node 1 again, so the release closes it), read into *cur. */
static void follower_log(ffx_t *f, const char *channel, tn_cursor_t *cur)
{
    script_ps.leader = 1;
    released_flag = false;
    tn_setrepl_release(f->s, "orders", 0, on_released, &released_flag);
    tu_run_until(&f->loop, &released_flag);
    tn_chanlog_t *cl = NULL;
    assert_int_equal(tn_chanlog_open(f->store, "orders", 0, channel, NULL, &cl, cur), 0);
    bool done = false;
    cl->data = &done;
    tn_chanlog_close(cl, on_cl_closed);
    tu_run_until(&f->loop, &done);
}

/* The follower engine's placement: node 1 holds every partition. */
static bool placed_on_1(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    (void)arg;
    (void)t;
    (void)p;
    *owner = 1;
    return false;
}

/* The leader's channel and the follower's engine's channel of the same
 * name but different stamps (queue.h tn_channel_t.stamp: another metastore
 * record, the channel deleted and made again while the follower's catalog
 * lagged): the follower refuses the leader's records (503, retried) and
 * the FIN's wait holds; once the follower's channel is the leader's (its
 * catalog made the new one, here: took its stamp), the records land and
 * the wait ends. Before, the follower wrote them into the old channel's
 * log and answered 204. */
/* Node 2 (x's follower) gets an engine on its store with the topic and
 * the channel "billing" (placed on node 1 when elsewhere, else served
 * here), and a replicator with that engine; the leader calls the pair
 * made anew. Returns node 2's channel; *fb its engine. */
static tn_channel_t *follower_engine(lfx_t *x, bool elsewhere, tn_broker_t **fb)
{
    ffx_t *f = x->f;
    tu_rpc_pair_close(&f->rpc, &f->loop);
    closed_flag = false;
    tn_setrepl_close(f->s, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    tn_broker_opts_t bo;
    memset(&bo, 0, sizeof(bo));
    bo.default_partitions = 1;
    bo.bootstrap_window_ms = 90000;
    bo.cache_bytes = 1 << 20;
    bo.max_inflight_bytes = 1 << 30;
    bo.max_inflight_msgs = 100000;
    bo.max_ahead = 1 << 16;
    bo.gc_interval_ms = 3600000;
    assert_int_equal(tn_broker_open(&f->loop, f->store, &bo, fb), 0);
    if (elsewhere)
        tn_broker_set_placement(*fb, placed_on_1, NULL);
    lwait_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_lwait;
    tn_topic_t *ft = NULL;
    int rc = tn_broker_topic(*fb, "orders", 6, true, 1, &w.w, &ft);
    if (rc == UV_EAGAIN) {
        tu_run_until(&f->loop, &w.done);
        rc = tn_broker_topic(*fb, "orders", 6, false, 0, NULL, &ft);
    }
    assert_int_equal(rc, 0);
    tn_channel_t *fch = NULL;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_lwait;
    rc = tn_topic_channel(ft, "billing", 7, true, &w.w, &fch);
    if (rc == UV_EAGAIN) {
        tu_run_until(&f->loop, &w.done);
        rc = tn_topic_channel(ft, "billing", 7, false, NULL, &fch);
    }
    assert_int_equal(rc, 0);
    tn_setrepl_opts_t fo = {
        .loop = &f->loop, .node_id = 2, .store = f->store, .broker = *fb, .pstate = script_pstate};
    assert_int_equal(tn_setrepl_new(&fo, &f->s), 0);
    the_follower = f->s;
    tn_rpc_handler_t h[TN_SETREPL_HANDLERS];
    size_t nh = 0;
    tn_setrepl_handlers(f->s, h, &nh);
    tu_rpc_pair_open(&f->rpc, &f->loop, h, nh);
    follower_addr = f->rpc.addr;
    tn_setrepl_set_rpc(x->leader, f->rpc.caller); /* the pair is a new one */
    return fch;
}

/* The leader side closed (lfx_close), then node 2's engine, and node 2
 * back to a replicator without one, for ffx_free. */
static void follower_engine_close(lfx_t *x, tn_broker_t *fb)
{
    ffx_t *f = x->f;
    tn_consumer_detach(&x->k.c);
    lfx_close(x);
    tu_rpc_pair_close(&f->rpc, &f->loop);
    closed_flag = false;
    tn_setrepl_close(f->s, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    broker_gone = false;
    tn_broker_close(fb, on_broker_gone);
    tu_run_until(&f->loop, &broker_gone);
    tn_setrepl_opts_t plain = {
        .loop = &f->loop, .node_id = 2, .store = f->store, .pstate = script_pstate};
    assert_int_equal(tn_setrepl_new(&plain, &f->s), 0);
    tn_rpc_handler_t h[TN_SETREPL_HANDLERS];
    size_t nh = 0;
    tn_setrepl_handlers(f->s, h, &nh);
    tu_rpc_pair_open(&f->rpc, &f->loop, h, nh);
    ffx_free(f);
}

/* Run the loop until *counter (re-read by stats) reaches want, or 20 s. */
static uint64_t run_until_count(ffx_t *f, tn_setrepl_t *s, size_t off, uint64_t want)
{
    tn_setrepl_stats_t st;
    tn_setrepl_stats(s, &st);
    int64_t until = tn_now_mono_ms() + 20000;
    uint64_t v = *(uint64_t *)((char *)&st + off);
    while (v < want && tn_now_mono_ms() < until) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        usleep(1000);
        tn_setrepl_stats(s, &st);
        v = *(uint64_t *)((char *)&st + off);
    }
    return v;
}

static void test_follower_refuses_another_channel(void **state)
{
    (void)state;
    lfx_t x;
    lfx_open(&x, 3);
    ffx_t *f = x.f;
    /* Node 2's engine has a channel of the name stamped by another
     * record than the leader's. */
    tn_broker_t *fb = NULL;
    tn_channel_t *fch = follower_engine(&x, true, &fb);
    x.ch->stamp = 0x5151;
    fch->stamp = 0x4242;

    /* A FIN on the leader: the follower refuses its record, again and
     * again, and the wait holds. */
    lsync_t sw;
    memset(&sw, 0, sizeof(sw));
    sw.s.data = &sw;
    assert_int_equal(tn_consumer_fin(&x.k.c, 0, x.k.d[0].offset, false, 0), 0);
    tn_channel_sync(x.ch, 0, &sw.s, on_lsync);
    assert_true(run_until_count(f, f->s, offsetof(tn_setrepl_stats_t, other_channel), 2) >= 2);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.served_records, 0);
    assert_false(sw.done);

    /* The follower's channel is the leader's now: the retried call lands. */
    fch->stamp = 0x5151;
    tu_run_until(&f->loop, &sw.done);
    assert_int_equal(sw.status, 0);
    assert_true(sw.served_then >= 1);
    follower_engine_close(&x, fb);
}

/* A follower whose engine cannot take a record (here: it serves the
 * partition itself, UV_EBUSY from tn_broker_chan_apply) answers 500, and
 * the leader's retry of that call is refused again: the records are not
 * counted as written. Before, the follower noted the call's records as
 * written after the first failure, skipped them all on the retry and
 * answered 204, and the leader's wait ended OK with nothing on the
 * follower. */
static void test_follower_failed_apply_is_not_skipped(void **state)
{
    (void)state;
    lfx_t x;
    lfx_open(&x, 3);
    ffx_t *f = x.f;
    tn_broker_t *fb = NULL;
    (void)follower_engine(&x, false, &fb);
    lsync_t sw;
    memset(&sw, 0, sizeof(sw));
    sw.s.data = &sw;
    assert_int_equal(tn_consumer_fin(&x.k.c, 0, x.k.d[0].offset, false, 0), 0);
    tn_channel_sync(x.ch, 0, &sw.s, on_lsync);
    uint64_t calls = run_until_count(f, x.leader, offsetof(tn_setrepl_stats_t, calls), 4);
    assert_false(sw.done); /* before: ended OK at the second call */
    assert_true(calls >= 4);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.served_records, 0);
    tn_setrepl_stats(x.leader, &st);
    assert_true(st.call_failures + 1 >= st.calls); /* every call refused (one may be out) */
    follower_engine_close(&x, fb);
    assert_true(sw.done); /* the leader's close ended the wait */
    assert_int_not_equal(sw.status, 0);
}

/* Node 2 is in the ISR with incarnation 102 (the leader's metastore
 * replica has not seen it register again), but its data directory was
 * wiped and made anew: incarnation 202, its channel log empty. A FIN's
 * record is refused there (409), so the wait holds, and ends only once
 * node 2 installed the channel's state (CHAN_SNAP; here meant for any
 * incarnation: the leader's replica knows none). Before, node 2 wrote the
 * record into its fresh log and answered 204, and the FIN was answered
 * OK, counted on a disk without the channel's earlier state. */
static void test_wiped_follower_confirms_nothing(void **state)
{
    (void)state;
    lfx_t x;
    lfx_follower_inc = 202;
    lfx_open(&x, 3);
    ffx_t *f = x.f;
    lsync_t sw;
    memset(&sw, 0, sizeof(sw));
    sw.s.data = &sw;
    assert_int_equal(tn_consumer_fin(&x.k.c, 0, x.k.d[1].offset, false, 0), 0);
    tn_channel_sync(x.ch, 0, &sw.s, on_lsync);
    tu_run_until(&f->loop, &sw.done);
    assert_int_equal(sw.status, 0);
    assert_true(sw.snaps_then >= 1); /* before: 0, the record taken at once */
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_true(st.other_incarnation >= 1);
    tn_setrepl_stats(x.leader, &st);
    assert_true(st.snapshots_sent >= 1);
    uint64_t acked = x.k.d[1].offset;
    tn_consumer_detach(&x.k.c);
    lfx_close(&x);

    tn_cursor_t cur;
    follower_log(f, "billing", &cur);
    assert_true(tn_cursor_is_settled(&cur, acked));
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* A follower of an older build refuses (400) records that carry its
 * incarnation, as a trailing field; the leader sends it the older
 * encoding then, and the FIN is answered once it took that. */
static uint32_t old_refused, old_taken;
static void on_old_settle_repl(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    (void)arg;
    tn_wire_setrepl_t w;
    if (tn_wire_setrepl_decode(payload, len, &w, NULL, 0) != 0 || w.incarnation != 0) {
        old_refused++;
        tn_rpc_reply_error(req, 400, "malformed settle_repl request");
        return;
    }
    old_taken += w.count;
    tn_rpc_reply(req, 204, NULL, NULL, 0);
}

static void test_older_follower_gets_no_incarnation(void **state)
{
    (void)state;
    lfx_t x;
    lfx_open(&x, 3);
    ffx_t *f = x.f;
    /* Node 2 answers as an older build would. */
    tu_rpc_pair_close(&f->rpc, &f->loop);
    tn_rpc_handler_t h[1] = {{TN_OP_SETTLE_REPL, 0, on_old_settle_repl, NULL}};
    tu_rpc_pair_open(&f->rpc, &f->loop, h, 1);
    follower_addr = f->rpc.addr;
    tn_setrepl_set_rpc(x.leader, f->rpc.caller);
    old_refused = old_taken = 0;
    lsync_t sw;
    memset(&sw, 0, sizeof(sw));
    sw.s.data = &sw;
    assert_int_equal(tn_consumer_fin(&x.k.c, 0, x.k.d[0].offset, false, 0), 0);
    tn_channel_sync(x.ch, 0, &sw.s, on_lsync);
    tu_run_until(&f->loop, &sw.done);
    assert_int_equal(sw.status, 0);
    assert_int_equal(old_refused, 1); /* its ISR entry's incarnation, once */
    assert_true(old_taken >= 1);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(x.leader, &st);
    assert_int_equal(st.inc_refused, 1); /* counted (and said) once */
    tn_consumer_detach(&x.k.c);
    lfx_close(&x);
    tu_rpc_pair_close(&f->rpc, &f->loop);
    tn_rpc_handler_t fh[TN_SETREPL_HANDLERS];
    size_t nh = 0;
    tn_setrepl_handlers(f->s, fh, &nh);
    tu_rpc_pair_open(&f->rpc, &f->loop, fh, nh);
    ffx_free(f);
}

static void test_leader_waits_for_isr(void **state)
{
    (void)state;
    lfx_t x;
    /* Node 2 below stops counting when the ISR gate asks about it, which
     * the case checks; not because a second passed since its failed call
     * (the timer's rule), which a loaded machine can take between the
     * failure and the check. */
    lfx_uncount_ms = 600000;
    lfx_open(&x, 5);
    ffx_t *f = x.f;
    tn_channel_t *ch = x.ch;
    lsink_t *k = &x.k;
    tn_setrepl_t *leader = x.leader;

    /* ISR {1, 2}, min 2: the FIN's wait ends once the follower wrote it. */
    lsync_t sw;
    assert_int_equal(fin_and_sync(f, ch, k, 0, &sw), 0);
    assert_true(sw.served_then >= 1);
    tn_setrepl_stats_t st;
    tn_setrepl_stats(leader, &st);
    assert_true(st.calls >= 1);
    assert_int_equal(st.streams, 1);
    assert_int_equal(st.snapshots_sent, 0); /* an ISR member has the state */

    /* The ISR shrinks to the leader alone: too few in-sync replicas. */
    script_ps.nisr = 1;
    assert_int_equal(fin_and_sync(f, ch, k, 1, &sw), TN_EFEWREPLICAS);

    /* Node 2, out of the ISR now, counts as caught up again only once it
     * installed a snapshot of the channel's state (tn_setrepl_catch_up
     * sends it): both FINs, the refused one too, are in its log then. */
    assert_false(tn_setrepl_catch_up(leader, "orders", 0, 2, 0));
    assert_true(lfx_catch_up(&x, 2));
    tn_setrepl_stats(leader, &st);
    assert_true(st.snapshots_sent >= 1);
    tn_setrepl_stats_t fst;
    tn_setrepl_stats(f->s, &fst);
    assert_true(fst.snapshots_installed >= 1);
    /* Not a replica, or another data directory than the one synced: no. */
    assert_false(tn_setrepl_catch_up(leader, "orders", 0, 9, 0));

    /* An ISR expand in flight: the core proposed node 2 (pending), and
     * node 2 stops answering (a call to it fails, which un-counts it).
     * With the committed ISR {1} enough (min_insync 1), a FIN still
     * waits for node 2: the CAS may apply and node 2 be elected. */
    script_ps.min_insync = 1;
    script_pending = 2;
    follower_addr = "127.0.0.1:1"; /* refused */
    tn_setrepl_stats(leader, &st);
    uint64_t failed = st.call_failures;
    lsync_t pw;
    memset(&pw, 0, sizeof(pw));
    pw.s.data = &pw;
    assert_int_equal(tn_consumer_fin(&k->c, 0, k->d[3].offset, false, 0), 0);
    tn_channel_sync(ch, 0, &pw.s, on_lsync);
    int64_t until = tn_now_mono_ms() + 20000;
    while (st.call_failures < failed + 2 && tn_now_mono_ms() < until) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        usleep(1000);
        tn_setrepl_stats(leader, &st);
    }
    assert_true(st.call_failures >= failed + 2); /* it was tried, and retried */
    for (int i = 0; i < 10; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_false(pw.done); /* held for the proposed member */
    /* The CAS is decided without node 2 (refused, or a state without it):
     * no member is pending. Node 2 still counts until the ISR gate is
     * told it does not (else the core could propose it again on its
     * older yes, after settles went on without it). */
    script_pending = 0;
    tn_setrepl_pstate_changed(leader, "orders", 0, &script_ps);
    for (int i = 0; i < 10; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_false(pw.done);
    assert_false(tn_setrepl_catch_up(leader, "orders", 0, 2, 0));
    /* Now the committed ISR {1} confirms the FIN. */
    tu_run_until(&f->loop, &pw.done);
    assert_int_equal(pw.status, 0);
    script_ps.min_insync = 2;
    follower_addr = f->rpc.addr;

    /* Another node leads now: the wait fails as fenced. */
    script_ps.nisr = 2;
    script_ps.leader = 2;
    script_ps.leader_epoch = 4;
    assert_int_equal(fin_and_sync(f, ch, k, 2, &sw), TN_EFENCED);
    tn_setrepl_stats(leader, &st);
    assert_int_equal(st.streams, 0);

    uint64_t first = k->d[0].offset;
    tn_consumer_detach(&k->c);
    lfx_close(&x);

    /* The follower's log has the first FIN. */
    tn_cursor_t cur;
    follower_log(f, "billing", &cur);
    assert_true(tn_cursor_is_settled(&cur, first));
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* Start FIN of sink k's i-th delivery and its sync (w answered later). */
static void fin_start(tn_channel_t *ch, lsink_t *k, int i, lsync_t *w)
{
    memset(w, 0, sizeof(*w));
    w->s.data = w;
    assert_int_equal(tn_consumer_fin(&k->c, 0, k->d[i].offset, false, 0), 0);
    tn_channel_sync(ch, 0, &w->s, on_lsync);
}

/* Run the leader's loop until its calls failed once more than before
 * (a follower that does not answer), then a little longer. */
static void run_past_a_failure(lfx_t *x, uint64_t failed)
{
    tn_setrepl_stats_t st;
    tn_setrepl_stats(x->leader, &st);
    int64_t until = tn_now_mono_ms() + 20000;
    while (st.call_failures <= failed && tn_now_mono_ms() < until) {
        uv_run(&x->f->loop, UV_RUN_NOWAIT);
        usleep(1000);
        tn_setrepl_stats(x->leader, &st);
    }
    assert_true(st.call_failures > failed);
    for (int i = 0; i < 10; i++)
        uv_run(&x->f->loop, UV_RUN_NOWAIT);
}

static uint64_t call_failures(lfx_t *x)
{
    tn_setrepl_stats_t st;
    tn_setrepl_stats(x->leader, &st);
    return st.call_failures;
}

/* min_insync lowered under an ELR (a topic's update): the ISR {1} at the
 * new min_insync 1, node 2 left beside it in the ELR, which the
 * controller may elect until the leader's same-ISR CAS (repl.c,
 * maybe_clear_elr) empties it. A settle is answered only once every
 * member that may be elected has it: node 2, not answering here, holds
 * it until the ELR is empty (before, the leader alone confirmed it, and
 * node 2, elected, would deliver the message again). */
static void test_leader_waits_for_the_elr(void **state)
{
    (void)state;
    lfx_t x;
    lfx_open(&x, 3);
    script_ps.nisr = 1;
    script_ps.nelr = 1;
    script_ps.elr[0] = mem(2);
    script_ps.min_insync = 1;
    follower_addr = "127.0.0.1:1"; /* refused */
    uint64_t failed = call_failures(&x);
    lsync_t w;
    fin_start(x.ch, &x.k, 0, &w);
    run_past_a_failure(&x, failed);
    assert_false(w.done); /* held for the ELR member */
    /* The same-ISR CAS applied: the ELR is empty. */
    script_ps.nelr = 0;
    tn_setrepl_pstate_changed(x.leader, "orders", 0, &script_ps);
    tu_run_until(&x.f->loop, &w.done);
    assert_int_equal(w.status, 0);
    tn_consumer_detach(&x.k.c);
    lfx_close(&x);
    ffx_free(x.f);
}

/* The ISR gate's yes for a follower (tn_setrepl_catch_up: its channels
 * caught up) is what the leader's core proposes it into the ISR on, up
 * to the gate's next question (repl.c; asked every 50 ms): a settle of a
 * channel made in between, whose state it does not have yet, is answered
 * only once it has it, or once the gate said no for it (the core then
 * proposes it on no yes). Before, the new channel's stream did not count
 * it: the settle was answered without it, and the core could add it to
 * the ISR on the older yes. */
static void test_gate_yes_counts_on_new_channels(void **state)
{
    (void)state;
    lfx_t x;
    lfx_open(&x, 3);
    script_ps.nisr = 1;
    script_ps.min_insync = 1;
    assert_true(lfx_catch_up(&x, 2));
    follower_addr = "127.0.0.1:1"; /* node 2 stops answering */
    tn_channel_t *audit = lfx_channel(&x, "audit");
    lsink_t ka;
    lfx_attach(&x, audit, &ka, 3);
    uint64_t failed = call_failures(&x);
    lsync_t w;
    fin_start(audit, &ka, 0, &w);
    run_past_a_failure(&x, failed);
    assert_false(w.done); /* held for node 2, which the core may propose */
    /* The gate asks again: no (it lacks audit's state), so the settle
     * goes on without it. */
    assert_false(tn_setrepl_catch_up(x.leader, "orders", 0, 2, 0));
    tu_run_until(&x.f->loop, &w.done);
    assert_int_equal(w.status, 0);
    tn_consumer_detach(&ka.c);
    tn_consumer_detach(&x.k.c);
    lfx_close(&x);
    ffx_free(x.f);
}

/* A follower outside the ISR that installed the channel's state, dropped
 * by a move and added back by another, in states the leader's replicator
 * never looked at (it looks every 250 ms and at the newest state the
 * replica manager is told): its copy may have gone to quarantine/
 * meanwhile, its channel logs with it (the same incarnation). Like a
 * member a move adds anew to the record log (repl.c, adds_anew), it gets
 * the channel's state again before the gate says yes. Before, the
 * leader kept it synced: the gate said yes at once, its log empty. */
static void test_move_adds_a_follower_anew(void **state)
{
    (void)state;
    lfx_t x;
    lfx_open(&x, 3);
    ffx_t *f = x.f;
    script_ps.nisr = 1;
    script_ps.min_insync = 1;
    lsync_t sw;
    assert_int_equal(fin_and_sync(f, x.ch, &x.k, 0, &sw), 0);
    assert_true(lfx_catch_up(&x, 2));
    tn_setrepl_stats_t st;
    tn_setrepl_stats(x.leader, &st);
    uint64_t snaps = st.snapshots_sent;

    /* Dropped: node 2 closes its channel logs, and its copy goes to
     * quarantine/ (the files leave topics/). */
    released_flag = false;
    tn_setrepl_release(f->s, "orders", 0, on_released, &released_flag);
    tu_run_until(&f->loop, &released_flag);
    assert_int_equal(tn_chanlog_delete(f->store, "orders", 0, "billing"), 0);
    /* Added back by a move with another id: target {1, 2}, old {1, 3}. */
    script_ps.move_id = 9;
    script_ps.ntarget = 2;
    script_ps.target[0] = 1;
    script_ps.target[1] = 2;
    script_ps.nold = 2;
    script_ps.old[0] = 1;
    script_ps.old[1] = 3;
    script_ps.partition_epoch++;
    tn_setrepl_pstate_changed(f->s, "orders", 0, &script_ps); /* node 2 follows again */

    assert_false(tn_setrepl_catch_up(x.leader, "orders", 0, 2, 0));
    assert_true(lfx_catch_up(&x, 2));
    tn_setrepl_stats(x.leader, &st);
    assert_true(st.snapshots_sent > snaps);
    uint64_t first = x.k.d[0].offset;
    tn_consumer_detach(&x.k.c);
    lfx_close(&x);
    tn_cursor_t cur;
    follower_log(f, "billing", &cur);
    assert_true(tn_cursor_is_settled(&cur, first));
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* uv_walk callbacks: stop and start again arg's 250 ms check (its timer
 * is the replicator's only handle, its data the replicator). */
static void tick_stop(uv_handle_t *h, void *arg)
{
    if (h->type == UV_TIMER && h->data == arg)
        uv_timer_stop((uv_timer_t *)h);
}

static void tick_again(uv_handle_t *h, void *arg)
{
    if (h->type == UV_TIMER && h->data == arg)
        uv_timer_again((uv_timer_t *)h);
}

/* A follower outside the ISR that installed the channel's state, then
 * missed records while its calls failed (not counted: the gate said no),
 * lacking more of them than the leader keeps once they are decided: it
 * must get the channel's state again, never the records the leader still
 * keeps after a gap. Here node 3, in the ISR and unreachable, holds the
 * settles until it is shrunk out; that change decides them all at once,
 * the leader keeps one (keep_max 1), and node 2's retry is due in the
 * same pass. Before, the pass sent node 2 the kept record after the gap,
 * node 2 answered 204, counted as caught up, and the gate said yes with
 * three of the four FINs missing from its log: in the ISR, then elected,
 * it would deliver those messages again. */
static void test_lagging_follower_gets_no_gap(void **state)
{
    (void)state;
    lfx_t x;
    lfx_keep_max = 1;
    lfx_open(&x, 4);
    ffx_t *f = x.f;
    script_ps.replicas[2] = 3; /* no address: its calls fail at once */
    script_ps.nreplicas = 3;
    script_ps.isr[1] = mem(3);
    script_ps.min_insync = 1;
    tn_setrepl_pstate_changed(x.leader, "orders", 0, &script_ps);
    assert_true(lfx_catch_up(&x, 2));

    /* Node 2 stops answering: FIN 0's call to it fails, the gate says no. */
    follower_addr = "127.0.0.1:1"; /* refused */
    uint64_t failed = call_failures(&x);
    lsync_t w[4];
    fin_start(x.ch, &x.k, 0, &w[0]);
    run_past_a_failure(&x, failed);
    assert_false(tn_setrepl_catch_up(x.leader, "orders", 0, 2, 0));
    /* Three more FINs, durable here, held for node 3; node 2 still has no
     * address, so its tries fail at once and it has no call out. */
    follower_addr = NULL;
    for (int i = 1; i < 4; i++)
        fin_start(x.ch, &x.k, i, &w[i]);
    tn_chanlog_t *cl = x.ch->parts[0]->cl;
    while (tn_chanlog_completed(cl) < tn_chanlog_submitted(cl))
        uv_run(&f->loop, UV_RUN_ONCE);
    for (int i = 0; i < 4; i++)
        assert_false(w[i].done);
    /* Nothing but node 2's answer looks at the stream from here: the
     * leader's 250 ms check waits (a check in between would see node 2
     * lacking dropped records and send it the state, which hid the gap). */
    uv_walk(&f->loop, tick_stop, x.leader);
    usleep(1100 * 1000); /* node 2's next try is due (the backoff is at most 1 s) */
    /* Node 3 shrunk out: the four FINs are decided, all but one dropped. */
    follower_addr = f->rpc.addr;
    script_ps.nisr = 1;
    script_ps.partition_epoch++;
    tn_setrepl_pstate_changed(x.leader, "orders", 0, &script_ps);
    for (int i = 0; i < 4; i++) {
        assert_true(w[i].done);
        assert_int_equal(w[i].status, 0);
    }
    /* The leader's call to node 2 answered. */
    tn_setrepl_stats_t fst;
    tn_setrepl_stats(f->s, &fst);
    uint64_t served = fst.served_records;
    while (fst.served_records == served) {
        uv_run(&f->loop, UV_RUN_ONCE);
        tn_setrepl_stats(f->s, &fst);
    }
    for (int i = 0; i < 30; i++) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    uv_walk(&f->loop, tick_again, x.leader);
    /* Once the gate says yes for node 2, its log holds every FIN. */
    assert_true(lfx_catch_up(&x, 2));
    uint64_t off[4];
    for (int i = 0; i < 4; i++)
        off[i] = x.k.d[i].offset;
    tn_consumer_detach(&x.k.c);
    lfx_close(&x);
    tn_cursor_t cur;
    follower_log(f, "billing", &cur);
    for (int i = 0; i < 4; i++)
        assert_true(tn_cursor_is_settled(&cur, off[i]));
    tn_cursor_fini(&cur);
    ffx_free(f);
}

/* --- the follower through its engine -------------------------------------------------- */

/* The follower engine's placement: partition 1 of "orders" is served
 * here while eng_serves, else led by node 2 with its log set aside. */
static bool eng_serves;

static bool eng_place(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    (void)arg;
    (void)t;
    bool here = p != 1 || eng_serves;
    *owner = here ? 1 : 2;
    return here;
}

static bool eng_readopt(void *arg, const tn_topic_t *t, uint32_t p)
{
    (void)arg;
    (void)t;
    (void)p;
    return true;
}

static void on_eng_followed(void *arg, int status)
{
    assert_int_equal(status, 0);
    *(bool *)arg = true;
}

/* f's replicator made anew with an engine on its store (*bp) that has
 * topic "orders" (2 partitions, partition 1 served here: eng_serves) and
 * its channel "billing" (*chp); node 1 of the RPC pair. */
static tn_topic_t *engine_follower_open(ffx_t *f, tn_broker_t **bp, tn_channel_t **chp)
{
    tu_rpc_pair_close(&f->rpc, &f->loop);
    closed_flag = false;
    tn_setrepl_close(f->s, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    tn_broker_opts_t bo;
    memset(&bo, 0, sizeof(bo));
    bo.default_partitions = 1;
    bo.bootstrap_window_ms = 90000;
    bo.cache_bytes = 1 << 20;
    bo.max_inflight_bytes = 1 << 30;
    bo.max_inflight_msgs = 100000;
    bo.max_ahead = 1 << 16;
    bo.gc_interval_ms = 3600000;
    tn_broker_t *b = NULL;
    assert_int_equal(tn_broker_open(&f->loop, f->store, &bo, &b), 0);
    eng_serves = true;
    tn_broker_set_placement(b, eng_place, NULL);
    b->place_readopt = eng_readopt;
    lwait_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_lwait;
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(b, "orders", 6, true, 2, &w.w, &t);
    if (rc == UV_EAGAIN) {
        tu_run_until(&f->loop, &w.done);
        rc = tn_broker_topic(b, "orders", 6, false, 0, NULL, &t);
    }
    assert_int_equal(rc, 0);
    tn_channel_t *ch = NULL;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_lwait;
    rc = tn_topic_channel(t, "billing", 7, true, &w.w, &ch);
    if (rc == UV_EAGAIN) {
        tu_run_until(&f->loop, &w.done);
        rc = tn_topic_channel(t, "billing", 7, false, NULL, &ch);
    }
    assert_int_equal(rc, 0);
    tn_setrepl_opts_t o = {
        .loop = &f->loop, .node_id = 1, .store = f->store, .broker = b, .pstate = script_pstate};
    assert_int_equal(tn_setrepl_new(&o, &f->s), 0);
    tn_rpc_handler_t h[TN_SETREPL_HANDLERS];
    size_t nh = 0;
    tn_setrepl_handlers(f->s, h, &nh);
    tu_rpc_pair_open(&f->rpc, &f->loop, h, nh);
    *bp = b;
    *chp = ch;
    return t;
}

/* The placement caught up with the metastore (node 2 leads partition 1):
 * the engine sets its log aside and holds it as a follower's. */
static void engine_follower_set_aside(ffx_t *f, tn_topic_t *t)
{
    eng_serves = false;
    bool followed = false;
    assert_int_equal(tn_topic_follow_placement(t, on_eng_followed, &followed), 0);
    tu_run_until(&f->loop, &followed);
    assert_false(tn_topic_part_local(t, 1));
}

/* engine_follower_open's replicator, engine, store and f closed. */
static void engine_follower_close(ffx_t *f, tn_broker_t *b)
{
    tu_rpc_pair_close(&f->rpc, &f->loop);
    closed_flag = false;
    tn_setrepl_close(f->s, on_closed, NULL);
    tu_run_until(&f->loop, &closed_flag);
    broker_gone = false;
    tn_broker_close(b, on_broker_gone);
    tu_run_until(&f->loop, &broker_gone);
    tu_store_close(&f->loop, f->store);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    tu_rmrf(f->dir);
    free(f->dir);
    free(f);
}

/* engine_follower_open, then the log set aside: the engine holds the
 * channel's log of a partition another node leads. */
static void engine_follower_aside(ffx_t *f, tn_broker_t **bp, tn_channel_t **chp)
{
    engine_follower_set_aside(f, engine_follower_open(f, bp, chp));
}

/* A record the follower's engine refused (tn_broker_chan_apply: here the
 * partition was still served here, UV_EBUSY, as in a placement that lags
 * the metastore) is not taken as written: the request fails (500), and
 * the leader's retry writes it. Before, the refused first call of a
 * stream marked the stream's records up to its last as written: the
 * retry skipped them all and was answered 204, the FIN in no log here,
 * and the leader counted this node as having it. */
static void test_follower_engine_refusal_retried(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tn_broker_t *b = NULL;
    tn_channel_t *ch = NULL;
    tn_topic_t *t = engine_follower_open(f, &b, &ch);

    /* Node 2 leads partition 1 (script_ps), the engine serves it still. */
    tu_rpc_raw_t r;
    tn_walrec_t a[1] = {{.op = TN_WAL_FIN, .offset = 0}};
    assert_int_equal(push(f, 3, 77, 1, a, 1, &r), 500);
    /* The placement caught up: the log is set aside, the engine holds
     * the channel's log. The retry's record is written. */
    engine_follower_set_aside(f, t);
    assert_int_equal(push(f, 3, 77, 1, a, 1, &r), 204);
    assert_true(tn_cursor_is_settled(&ch->parts[1]->cur, 0));
    tn_setrepl_stats_t st;
    tn_setrepl_stats(f->s, &st);
    assert_int_equal(st.served_records, 1);
    engine_follower_close(f, b);
}

/* The leader's records reach the channel partition the engine holds:
 * what its own dead-letter moves left when it led (offsets whose copy is
 * in the dead-letter topic, the FIN refused: dlq_copied) is forgotten,
 * as those offsets may hold other messages by the time it leads again (a
 * log cut at a divergence), which a FIN alone would drop uncopied. */
static void test_follower_engine_forgets_dead_letter_copies(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tn_broker_t *b = NULL;
    tn_channel_t *ch = NULL;
    engine_follower_aside(f, &b, &ch);
    tn_chpart_t *cp = ch->parts[1];
    assert_int_equal(tn_u64map_put(&cp->dlq_copied, 1, cp), 0);
    tu_rpc_raw_t r;
    tn_walrec_t a[1] = {{.op = TN_WAL_FIN, .offset = 0}};
    assert_int_equal(push(f, 3, 77, 1, a, 1, &r), 204);
    assert_int_equal(tn_u64map_size(&cp->dlq_copied), 0);
    engine_follower_close(f, b);
}

static void on_log_state(tn_chanlog_state_t *req, int status)
{
    *(int *)req->data = status == 0 ? 1 : -1;
}

/* A follower whose engine holds the channel's log (tn_broker_chan_apply)
 * and finds the disk full fails those records alone, as its own log does
 * (test_follower_full_disk): answered 507, the log not failed (nothing
 * sticky, /readyz stays ready), and once there is room the leader's retry
 * writes the same records, none skipped, the engine's cursor its log's
 * state. */
static void test_follower_engine_full_disk(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tn_broker_t *b = NULL;
    tn_channel_t *ch = NULL;
    engine_follower_aside(f, &b, &ch);
    tu_rpc_raw_t r;
    const tn_walrec_t *a = full_disk_recs;
    assert_int_equal(push(f, 3, 77, 1, a, 1, &r), 204); /* zeros ahead of the WAL */
    tn_io_fail_write_after(0, UV_ENOSPC);
    uint16_t st1 = push(f, 3, 77, 2, a + 1, 2, &r);
    tn_io_fail_write_after(-1, 0);
    printf("full disk: %u %s; logs failed %u\n", st1, r.body, tn_broker_logs_failed(b));
    assert_int_equal(st1, 507);
    assert_non_null(strstr(r.body, "disk full"));
    assert_int_equal(tn_broker_logs_failed(b), 0);
    /* Room again: the leader retries until the log takes the records
     * (refused with 507 until the engine saw that the log can grow). */
    uint16_t st2 = 0;
    for (int i = 0; i < 100 && st2 != 204; i++) {
        st2 = push(f, 3, 77, 2, a + 1, 3, &r);
        if (st2 != 204 && st2 != 507)
            break;
        if (st2 != 204)
            usleep(50000);
    }
    printf("after space returned: %u %s\n", st2, st2 == 204 ? "" : r.body);
    assert_int_equal(st2, 204);
    assert_int_equal(tn_broker_logs_failed(b), 0);
    assert_int_equal(tn_broker_logs_full(b), 0);
    tn_chpart_t *cp = ch->parts[1];
    assert_full_disk_recs(&cp->cur);
    /* The engine's cursor is its log's state: what the failed write
     * applied was taken back (the REQ counted once, also when the
     * committer wrote it in a round after the failed one, which the
     * retry writes again, as in a log of its own). */
    tn_chanlog_state_t req;
    int got = 0;
    req.data = &got;
    assert_int_equal(tn_chanlog_state(cp->cl, &req, on_log_state), 0);
    while (got == 0)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(got, 1);
    printf("requeue_count: engine %" PRIu64 ", log %" PRIu64 "\n", cp->cur.requeue_count,
           req.cur.requeue_count);
    assert_int_equal(cp->cur.requeue_count, req.cur.requeue_count);
    assert_int_equal(cp->cur.finish_count, req.cur.finish_count);
    assert_int_equal(cp->cur.frontier, req.cur.frontier);
    tn_cursor_fini(&req.cur);
    engine_follower_close(f, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_codec_refusals),
        cmocka_unit_test(test_codec_stamp),
        cmocka_unit_test(test_codec_incarnation),
        cmocka_unit_test(test_rule_min_insync),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_rule_isr_changes),
        cmocka_unit_test(test_follower_writes),
        cmocka_unit_test(test_follower_full_disk),
        cmocka_unit_test(test_follower_base_frontier),
        cmocka_unit_test(test_follower_refuses),
        cmocka_unit_test(test_follower_refuses_another_incarnation),
        cmocka_unit_test(test_wiped_follower_confirms_nothing),
        cmocka_unit_test(test_older_follower_gets_no_incarnation),
        cmocka_unit_test(test_leader_waits_for_isr),
        cmocka_unit_test(test_follower_refuses_another_channel),
        cmocka_unit_test(test_follower_failed_apply_is_not_skipped),
        cmocka_unit_test(test_follower_snapshot),
        cmocka_unit_test(test_follower_waits_for_its_copy),
        cmocka_unit_test(test_rule_extra),
        cmocka_unit_test(test_leader_waits_for_the_elr),
        cmocka_unit_test(test_gate_yes_counts_on_new_channels),
        cmocka_unit_test(test_move_adds_a_follower_anew),
        cmocka_unit_test(test_lagging_follower_gets_no_gap),
        cmocka_unit_test(test_follower_engine_refusal_retried),
        cmocka_unit_test(test_follower_engine_full_disk),
        cmocka_unit_test(test_follower_engine_forgets_dead_letter_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
