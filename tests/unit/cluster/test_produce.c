/* PRODUCE (cluster/produce.h): the duplicate window on its own (hits,
 * retries waiting for a pending first copy, failures forgotten, the cap
 * per accepting node, pending entries never evicted, clear and rebuild
 * from a log tail), the PRODUCER control body, the request codec and the
 * reply decoder; then the leader's handler through real node RPC over a
 * real broker: a batch stored once and answered with its first offset, a
 * retry with the same seq answered from the window without storing, two
 * copies in flight at once stored once, the accepts hook's refusals (421
 * naming the leader, 503 few replicas, 409 stale epoch) storing nothing.
 * Every fixture checks that uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/produce.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/time.h"
#include "queue/queue.h"
#include "storage/plog.h"
#include "storage/record.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the window ------------------------------------------------------------------------ */

typedef struct {
    tn_produce_wait_t w;
    int calls;
    int status;
    uint64_t first;
} waitx_t;

static void on_waited(tn_produce_wait_t *w, int status, uint64_t first_offset)
{
    waitx_t *x = (waitx_t *)w;
    x->calls++;
    x->status = status;
    x->first = first_offset;
}

static void waitx_init(waitx_t *x)
{
    memset(x, 0, sizeof(*x));
    x->w.cb = on_waited;
}

static void test_window_hits_and_waits(void **state)
{
    (void)state;
    tn_produce_window_t *w;
    assert_int_equal(tn_produce_window_new(TN_PRODUCE_WINDOW, &w), 0);
    uint64_t first = 99;
    waitx_t a, b;
    waitx_init(&a);
    waitx_init(&b);
    assert_int_equal(tn_produce_window_begin(w, 2, 10, &a.w, &first), TN_PRODUCE_NEW);
    assert_int_equal(tn_produce_window_size(w), 1);
    /* Two retries while the first copy waits for the hw. */
    assert_int_equal(tn_produce_window_begin(w, 2, 10, &a.w, &first), TN_PRODUCE_PENDING);
    assert_int_equal(tn_produce_window_begin(w, 2, 10, &b.w, &first), TN_PRODUCE_PENDING);
    assert_int_equal(a.calls + b.calls, 0);
    /* The same seq from another accepting node is another batch. */
    assert_int_equal(tn_produce_window_begin(w, 3, 10, NULL, &first), TN_PRODUCE_NEW);
    tn_produce_window_complete(w, 2, 10, 0, 41);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(a.status, 0);
    assert_int_equal(a.first, 41);
    assert_int_equal(b.first, 41);
    assert_int_equal(tn_produce_window_begin(w, 2, 10, NULL, &first), TN_PRODUCE_DONE);
    assert_int_equal(first, 41);
    /* A completion nobody began, or a second one: nothing. */
    tn_produce_window_complete(w, 2, 10, 0, 7);
    tn_produce_window_complete(w, 9, 1, 0, 7);
    assert_int_equal(tn_produce_window_begin(w, 2, 10, NULL, &first), TN_PRODUCE_DONE);
    assert_int_equal(first, 41);

    /* A failed first copy is forgotten (nothing acknowledged): its waits
     * get the error, and the next try stores it anew. */
    waitx_t c;
    waitx_init(&c);
    assert_int_equal(tn_produce_window_begin(w, 3, 10, &c.w, &first), TN_PRODUCE_PENDING);
    tn_produce_window_complete(w, 3, 10, TN_EFEWREPLICAS, 0);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.status, TN_EFEWREPLICAS);
    assert_int_equal(tn_produce_window_begin(w, 3, 10, NULL, &first), TN_PRODUCE_NEW);
    assert_int_equal(tn_produce_window_size(w), 2);

    /* Clear (a resigned leader): pending waits answered, all gone. */
    waitx_t d;
    waitx_init(&d);
    assert_int_equal(tn_produce_window_begin(w, 3, 10, &d.w, &first), TN_PRODUCE_PENDING);
    tn_produce_window_clear(w, TN_EREMOTE);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.status, TN_EREMOTE);
    assert_int_equal(tn_produce_window_size(w), 0);
    assert_int_equal(tn_produce_window_begin(w, 2, 10, NULL, &first), TN_PRODUCE_NEW);

    /* Free answers what still waits with TN_ECLOSED. */
    waitx_t e;
    waitx_init(&e);
    assert_int_equal(tn_produce_window_begin(w, 2, 10, &e.w, &first), TN_PRODUCE_PENDING);
    tn_produce_window_free(w);
    assert_int_equal(e.calls, 1);
    assert_int_equal(e.status, TN_ECLOSED);
}

static void test_window_cap(void **state)
{
    (void)state;
    tn_produce_window_t *w;
    assert_int_equal(tn_produce_window_new(4, &w), 0);
    uint64_t first;
    /* seq 1 stays pending; 2..8 complete. */
    assert_int_equal(tn_produce_window_begin(w, 5, 1, NULL, &first), TN_PRODUCE_NEW);
    for (uint64_t s = 2; s <= 8; s++) {
        assert_int_equal(tn_produce_window_begin(w, 5, s, NULL, &first), TN_PRODUCE_NEW);
        tn_produce_window_complete(w, 5, s, 0, s * 100);
    }
    /* The pending head holds the FIFO: nothing was evicted past it. */
    assert_int_equal(tn_produce_window_size(w), 8);
    tn_produce_window_complete(w, 5, 1, 0, 100);
    /* Now the oldest go down to the cap: 5..8 kept. */
    assert_int_equal(tn_produce_window_size(w), 4);
    for (uint64_t s = 5; s <= 8; s++) {
        assert_int_equal(tn_produce_window_begin(w, 5, s, NULL, &first), TN_PRODUCE_DONE);
        assert_int_equal(first, s * 100);
    }
    /* 1..4 went: a retry of one is new (entering it evicts the oldest,
     * 5; failing it forgets it again). */
    assert_int_equal(tn_produce_window_begin(w, 5, 2, NULL, &first), TN_PRODUCE_NEW);
    tn_produce_window_complete(w, 5, 2, UV_EAGAIN, 0);
    assert_int_equal(tn_produce_window_size(w), 3);
    assert_int_equal(tn_produce_window_begin(w, 5, 5, NULL, &first), TN_PRODUCE_NEW);
    tn_produce_window_complete(w, 5, 5, 0, 500);
    assert_int_equal(tn_produce_window_size(w), 4);
    for (uint64_t s = 5; s <= 8; s++) {
        assert_int_equal(tn_produce_window_begin(w, 5, s, NULL, &first), TN_PRODUCE_DONE);
        assert_int_equal(first, s * 100);
    }
    /* The cap is per accepting node. */
    for (uint64_t s = 1; s <= 4; s++)
        assert_int_equal(tn_produce_window_note(w, 6, s, s), 0);
    assert_int_equal(tn_produce_window_size(w), 8);
    assert_int_equal(tn_produce_window_begin(w, 5, 8, NULL, &first), TN_PRODUCE_DONE);
    /* A note of what is already there changes nothing. */
    assert_int_equal(tn_produce_window_note(w, 5, 8, 1), 0);
    assert_int_equal(tn_produce_window_begin(w, 5, 8, NULL, &first), TN_PRODUCE_DONE);
    assert_int_equal(first, 800);
    tn_produce_window_free(w);
}

static void test_ctl_codec(void **state)
{
    (void)state;
    uint8_t b[TN_PRODUCE_CTL_LEN];
    tn_produce_ctl_encode(b, 0x0102030405060708ull, UINT64_MAX - 1, 70000);
    assert_int_equal(b[0], TN_PRODUCE_CTL_PRODUCER);
    uint64_t node, seq;
    uint32_t count;
    assert_int_equal(tn_produce_ctl_decode(b, sizeof b, &node, &seq, &count), 0);
    assert_true(node == 0x0102030405060708ull);
    assert_true(seq == UINT64_MAX - 1);
    assert_int_equal(count, 70000);
    assert_int_equal(tn_produce_ctl_decode(b, sizeof b - 1, &node, &seq, &count), TN_EPROTO);
    b[0] = 1; /* EPOCH_START */
    assert_int_equal(tn_produce_ctl_decode(b, sizeof b, &node, &seq, &count), TN_EPROTO);
}

/* Records encoded as a segment holds them, for the window's scan. */
static void raw_rec(tn_buf_t *raw, uint64_t offset, uint16_t flags, const void *body, size_t len)
{
    tn_rec_hdr_t h = {.offset = offset, .publish_ns = 1, .body_len = (uint32_t)len, .flags = flags};
    unsigned char hdr[TN_REC_HDR];
    tn_rec_encode(hdr, &h, NULL, body);
    assert_int_equal(tn_buf_append(raw, hdr, sizeof hdr), 0);
    assert_int_equal(tn_buf_append(raw, body, len), 0);
}

static void test_window_scan(void **state)
{
    (void)state;
    tn_produce_window_t *w;
    assert_int_equal(tn_produce_window_new(TN_PRODUCE_WINDOW, &w), 0);
    tn_buf_t raw;
    tn_buf_init(&raw);
    uint8_t ctl[TN_PRODUCE_CTL_LEN];
    /* A plain record whose body looks like a PRODUCER body is not one. */
    tn_produce_ctl_encode(ctl, 4, 1, 1);
    raw_rec(&raw, 10, 0, ctl, sizeof ctl);
    tn_produce_ctl_encode(ctl, 4, 2, 2);
    raw_rec(&raw, 11, TN_REC_F_CONTROL | TN_REC_F_MORE, ctl, sizeof ctl);
    raw_rec(&raw, 12, TN_REC_F_MORE, "a", 1);
    raw_rec(&raw, 13, 0, "b", 1);
    tn_produce_ctl_encode(ctl, 5, 2, 1);
    raw_rec(&raw, 14, TN_REC_F_CONTROL | TN_REC_F_MORE, ctl, sizeof ctl);
    raw_rec(&raw, 15, 0, "c", 1);
    size_t whole = tn_buf_size(&raw);
    raw_rec(&raw, 16, 0, "torn", 4);
    /* A torn last record ends the scan. */
    int want = 2;
    assert_int_equal(tn_produce_window_scan(w, tn_buf_data(&raw), whole + 10), want);
    uint64_t first;
    assert_int_equal(tn_produce_window_begin(w, 4, 1, NULL, &first), TN_PRODUCE_NEW);
    assert_int_equal(tn_produce_window_begin(w, 4, 2, NULL, &first), TN_PRODUCE_DONE);
    assert_int_equal(first, 12);
    assert_int_equal(tn_produce_window_begin(w, 5, 2, NULL, &first), TN_PRODUCE_DONE);
    assert_int_equal(first, 15);
    tn_buf_fini(&raw);
    tn_produce_window_free(w);
}

/* --- the codec ----------------------------------------------------------------------- */

static void test_request_codec(void **state)
{
    (void)state;
    tn_wire_produce_hdr_t h = {.partition = 3, .leader_epoch = 7, .node = 2, .seq = 1ull << 40};
    snprintf(h.topic, sizeof h.topic, "orders");
    tn_commit_rec_t recs[2] = {
        {tn_iov("k", 1), tn_iov("body-1", 6), 0, 5},
        {tn_iov("", 0), tn_iov("body-22", 7), 1234, 6},
    };
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_produce_encode(&b, &h, recs, 2), 0);
    assert_int_equal(tn_buf_size(&b) + 1,
                     tn_produce_head_size(6) + tn_commit_rec_size(1, 6) + tn_commit_rec_size(0, 7));
    tn_wire_produce_t d;
    char err[256];
    assert_int_equal(
        tn_wire_produce_decode(tn_buf_data(&b), tn_buf_size(&b), 1024, &d, err, sizeof err), 0);
    assert_string_equal(d.h.topic, "orders");
    assert_int_equal(d.h.partition, 3);
    assert_int_equal(d.h.leader_epoch, 7);
    assert_int_equal(d.h.node, 2);
    assert_true(d.h.seq == 1ull << 40);
    assert_int_equal(d.count, 2);
    tn_commit_rec_t r;
    for (int i = 0; i < 2; i++) {
        assert_true(tn_wire_produce_next(&d, &r));
        assert_int_equal(r.body.len, recs[i].body.len);
        assert_memory_equal(r.body.base, recs[i].body.base, r.body.len);
        assert_int_equal(r.key.len, recs[i].key.len);
        assert_int_equal(r.deliver_at_ms, recs[i].deliver_at_ms);
        assert_int_equal(r.created_ms, recs[i].created_ms);
    }
    assert_false(tn_wire_produce_next(&d, &r));
    /* A body over the limit; a trailing byte; every truncation. */
    assert_int_equal(
        tn_wire_produce_decode(tn_buf_data(&b), tn_buf_size(&b), 6, &d, err, sizeof err),
        TN_ETOOBIG);
    tn_buf_t req;
    tn_buf_init(&req);
    assert_int_equal(tn_wire_put_u8(&req, TN_OP_PRODUCE), 0);
    assert_int_equal(tn_buf_append(&req, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req)), 0);
    assert_int_equal(tn_wire_op_lane(TN_OP_PRODUCE), TN_LANE_PRODUCE);
    assert_string_equal(tn_wire_op_name(TN_OP_PRODUCE), "produce");
    assert_int_equal(tn_buf_append(&req, "x", 1), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req)), TN_EPROTO);
    for (size_t n = 0; n < tn_buf_size(&b); n++)
        assert_int_equal(tn_wire_produce_decode(tn_buf_data(&b), n, 1024, &d, NULL, 0), TN_EPROTO);
    /* The encoder's refusals leave the buffer as it was. */
    size_t was = tn_buf_size(&b);
    assert_int_equal(tn_wire_produce_encode(&b, &h, recs, 0), UV_EINVAL);
    tn_commit_rec_t neg = {tn_iov("", 0), tn_iov("x", 1), -1, 0};
    assert_int_equal(tn_wire_produce_encode(&b, &h, &neg, 1), UV_EINVAL);
    tn_wire_produce_hdr_t empty = h;
    empty.topic[0] = '\0';
    assert_int_equal(tn_wire_produce_encode(&b, &empty, recs, 1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), was);
    /* count 0 and an empty topic do not decode. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_produce_decode(tn_buf_data(&b), tn_buf_size(&b), 1024, &d, NULL, 0),
                     TN_EPROTO);
    tn_buf_fini(&req);
    tn_buf_fini(&b);
}

static int reply(uint16_t status, const char *body, tn_produce_call_t *c)
{
    memset(c, 0, sizeof(*c));
    return tn_produce_reply_decode(status, (const uint8_t *)body, strlen(body), c);
}

static void test_reply_decode(void **state)
{
    (void)state;
    tn_produce_call_t c;
    assert_int_equal(reply(200, "{\"first_offset\":77}", &c), 0);
    assert_int_equal(c.first_offset, 77);
    assert_int_equal(reply(200, "{}", &c), TN_EPROTO);
    assert_int_equal(reply(421, "{\"error\":\"x\",\"leader_node\":\"3\"}", &c), TN_EREMOTE);
    assert_int_equal(c.leader, 3);
    assert_int_equal(reply(421, "{\"error\":\"x\",\"leader_node\":null}", &c), TN_EREMOTE);
    assert_int_equal(c.leader, 0);
    assert_int_equal(reply(421, "{\"error\":\"x\",\"leader_node\":\"-3\"}", &c), TN_EPROTO);
    assert_int_equal(reply(409, "{\"error\":\"stale\"}", &c), TN_EFENCED);
    assert_string_equal(c.error, "stale");
    assert_int_equal(reply(503, "{\"error\":\"x\",\"reason\":\"few_replicas\"}", &c),
                     TN_EFEWREPLICAS);
    assert_int_equal(reply(503, "{\"error\":\"x\"}", &c), UV_EAGAIN);
    assert_int_equal(reply(503, "{\"error\":\"x\",\"reason\":7}", &c), UV_EAGAIN);
    assert_int_equal(reply(404, "{\"error\":\"x\"}", &c), TN_ENOTFOUND);
    assert_int_equal(reply(416, "{\"error\":\"x\"}", &c), UV_ERANGE);
    assert_int_equal(reply(507, "{\"error\":\"x\"}", &c), TN_EDISKHIGH);
    assert_int_equal(reply(400, "{\"error\":\"x\"}", &c), UV_EINVAL);
    assert_int_equal(reply(500, "{\"error\":\"x\"}", &c), TN_EPROTO);
    assert_int_equal(reply(503, "not json", &c), TN_EPROTO);
    assert_int_equal(reply(503, "{\"no\":1}", &c), TN_EPROTO);
}

/* --- the leader's handler -------------------------------------------------------------- */

#define LEADER 9

typedef struct {
    tu_fx_t *fx;
    uv_loop_t *loop;
    tn_broker_t *b;
    tn_broker_opts_t bo;
    tn_produce_server_t *s;
    tu_rpc_pair_t rpc;
    /* What the accepts hook answers. */
    int accepts;
    uint32_t epoch;
} pfx_t;

static int accepts(void *arg, const char *topic, uint32_t p, uint32_t *epoch)
{
    (void)topic;
    (void)p;
    pfx_t *f = arg;
    *epoch = f->epoch;
    return f->accepts;
}

static uint64_t leader_of(void *arg, const char *topic, uint32_t p)
{
    (void)arg;
    (void)topic;
    (void)p;
    return LEADER;
}

static void tweak_store(tn_store_opts_t *o)
{
    o->max_body = 4096;
}

static pfx_t *pfx_new(void)
{
    pfx_t *f = calloc(1, sizeof(*f));
    f->fx = tu_fx_new(tweak_store);
    f->loop = &f->fx->loop;
    tu_broker_opts(&f->bo);
    assert_int_equal(tn_broker_open(f->loop, f->fx->store, &f->bo, &f->b), 0);
    tn_produce_server_opts_t o = {
        .loop = f->loop, .broker = f->b, .accepts = accepts, .accepts_arg = f, .leader = leader_of};
    f->epoch = 4;
    assert_int_equal(tn_produce_server_new(&o, &f->s), 0);
    tn_rpc_handler_t h[TN_PRODUCE_HANDLERS];
    size_t nh = 0;
    tn_produce_server_handlers(f->s, h, &nh);
    assert_int_equal(nh, 1);
    assert_int_equal(h[0].op, TN_OP_PRODUCE);
    tu_rpc_pair_open(&f->rpc, f->loop, h, nh);
    return f;
}

static void pfx_free(pfx_t *f)
{
    tu_rpc_pair_close(&f->rpc, f->loop);
    tn_produce_stats_t st;
    tn_produce_server_stats(f->s, &st);
    assert_int_equal(st.inflight, 0);
    tn_produce_server_free(f->s);
    tu_broker_close(f->loop, f->b);
    tu_fx_free(f->fx);
    free(f);
}

typedef struct {
    tn_produce_call_t c;
    bool done;
    int status;
} callw_t;

static void on_call(tn_produce_call_t *c, int status)
{
    callw_t *w = c->data;
    assert_false(w->done);
    w->done = true;
    w->status = status;
}

static void call_start(pfx_t *f, callw_t *w, uint32_t epoch, uint64_t seq, const char *tag,
                       uint32_t n)
{
    tn_wire_produce_hdr_t h = {.partition = 1, .leader_epoch = epoch, .node = 2, .seq = seq};
    snprintf(h.topic, sizeof h.topic, "orders");
    tn_commit_rec_t recs[8];
    char bodies[8][32];
    assert_true(n <= 8);
    for (uint32_t i = 0; i < n; i++) {
        int len = snprintf(bodies[i], sizeof bodies[i], "%s-%u", tag, i);
        recs[i] = (tn_commit_rec_t){tn_iov("", 0), tn_iov(bodies[i], (size_t)len), 0, 1};
    }
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_produce_encode(&b, &h, recs, n), 0);
    memset(w, 0, sizeof(*w));
    w->c.data = w;
    assert_int_equal(tn_produce_call(f->rpc.caller, f->rpc.addr, &b, 20000, &w->c, on_call), 0);
    tn_buf_fini(&b);
}

static int call(pfx_t *f, callw_t *w, uint32_t epoch, uint64_t seq, const char *tag, uint32_t n)
{
    call_start(f, w, epoch, seq, tag, n);
    tu_run_until(f->loop, &w->done);
    return w->status;
}

typedef struct {
    tn_waiter_t w;
    bool done;
} waitw_t;

static void on_wait(tn_waiter_t *w, int status)
{
    (void)status;
    ((waitw_t *)w)->done = true;
}

/* The record at offset of partition p (from the cache or the disk). */
static const tn_centry_t *record(pfx_t *f, tn_topic_t *t, uint32_t p, uint64_t offset)
{
    const tn_centry_t *e = NULL;
    waitw_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_wait;
    int rc = tn_part_record(t, p, offset, &w.w, &e);
    if (rc == UV_EAGAIN) {
        tu_run_until(f->loop, &w.done);
        rc = tn_part_record(t, p, offset, NULL, &e);
    }
    assert_int_equal(rc, 0);
    return e;
}

static uint64_t written(tn_topic_t *t, uint32_t p)
{
    tn_plog_stats_t st;
    tn_plog_stats(t->parts[p]->plog, &st);
    return st.written_next;
}

static void test_server_stores_once(void **state)
{
    (void)state;
    pfx_t *f = pfx_new();
    tn_topic_t *t = tu_broker_topic(f->loop, f->b, "orders", 2);
    callw_t w, w2;
    assert_int_equal(call(f, &w, 4, 100, "a", 3), 0);
    uint64_t first = w.c.first_offset;
    uint64_t end = written(t, 1);
    assert_int_equal(end, first + 3);
    /* The PRODUCER record holds the offset before the batch: no message
     * there (a replay read finds a gap), and not counted as one. */
    assert_int_equal(first, 1);
    const tn_centry_t *ce = NULL;
    assert_int_equal(tn_part_record(t, 1, 0, NULL, &ce), TN_EGAP);
    for (uint64_t i = 0; i < 3; i++) {
        char want[16];
        int n = snprintf(want, sizeof want, "a-%u", (unsigned)i);
        const tn_centry_t *e = record(f, t, 1, first + i);
        assert_non_null(e->body);
        assert_int_equal(e->body->len, (size_t)n);
        assert_memory_equal(e->body->data, want, (size_t)n);
    }
    assert_int_equal(t->message_count, 3);
    /* On disk too: the PRODUCER body names (node, seq, count). */
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    assert_int_equal(tn_plog_read(t->parts[1]->plog, 0, &scratch, &rec), 0);
    assert_true((rec.h.flags & TN_REC_F_CONTROL) != 0);
    uint64_t node, seq;
    uint32_t count;
    assert_int_equal(tn_produce_ctl_decode(rec.body, rec.h.body_len, &node, &seq, &count), 0);
    assert_int_equal(node, 2);
    assert_int_equal(seq, 100);
    assert_int_equal(count, 3);
    tn_buf_fini(&scratch);
    /* A retry of the same (node, seq), even with another body: the first
     * copy's answer, nothing stored. */
    assert_int_equal(call(f, &w, 0, 100, "zzz", 1), 0);
    assert_int_equal(w.c.first_offset, first);
    assert_int_equal(written(t, 1), end);
    /* Two copies of a new seq in flight at once: stored once, both
     * answered with its offset. */
    call_start(f, &w, 4, 101, "b", 2);
    call_start(f, &w2, 4, 101, "b", 2);
    tu_run_until(f->loop, &w.done);
    tu_run_until(f->loop, &w2.done);
    assert_int_equal(w.status, 0);
    assert_int_equal(w2.status, 0);
    assert_int_equal(w.c.first_offset, w2.c.first_offset);
    assert_int_equal(written(t, 1), w.c.first_offset + 2);
    assert_int_equal(written(t, 0), 0);
    tn_produce_stats_t st;
    tn_produce_server_stats(f->s, &st);
    assert_int_equal(st.produces, 2);
    assert_int_equal(st.records, 5);
    assert_int_equal(st.duplicates, 2);
    /* A rebuild of the window on promotion keeps what was there. */
    assert_int_equal(tn_produce_server_rebuild(f->s, "orders", 1, "", 0), 0);
    assert_int_equal(call(f, &w, 4, 100, "a", 3), 0);
    assert_int_equal(w.c.first_offset, first);
    /* Resigning forgets the window. */
    tn_produce_server_resign(f->s, "orders", 1, TN_EREMOTE);
    assert_int_equal(call(f, &w, 4, 100, "a", 3), 0);
    assert_int_equal(written(t, 1), w.c.first_offset + 3);
    pfx_free(f);
}

static bool idle(void *arg)
{
    pfx_t *f = arg;
    tn_produce_stats_t st;
    tn_produce_server_stats(f->s, &st);
    return st.inflight == 0;
}

/* A promotion: the window is rebuilt from the PRODUCER records of the
 * log's tail on disk (a worker reads it), so retries of batches stored
 * in an earlier term are answered, not stored again; a batch not in the
 * log is stored. */
static void test_server_rebuild_from_log(void **state)
{
    (void)state;
    pfx_t *f = pfx_new();
    tn_topic_t *t = tu_broker_topic(f->loop, f->b, "orders", 2);
    callw_t w;
    assert_int_equal(call(f, &w, 4, 100, "a", 3), 0);
    uint64_t first100 = w.c.first_offset;
    assert_int_equal(call(f, &w, 4, 101, "b", 2), 0);
    uint64_t first101 = w.c.first_offset;
    uint64_t end = written(t, 1);
    tn_produce_server_resign(f->s, "orders", 1, TN_EREMOTE);
    assert_int_equal(tn_produce_server_rebuild_log(f->s, "orders", 1, t->parts[1]->plog), 0);
    assert_true(tu_run_loop(f->loop, idle, f));
    assert_int_equal(call(f, &w, 4, 101, "b", 2), 0);
    assert_int_equal(w.c.first_offset, first101);
    assert_int_equal(call(f, &w, 4, 100, "a", 3), 0);
    assert_int_equal(w.c.first_offset, first100);
    assert_int_equal(written(t, 1), end);
    assert_int_equal(call(f, &w, 4, 102, "c", 1), 0);
    assert_int_equal(written(t, 1), end + 2);
    tn_produce_stats_t st;
    tn_produce_server_stats(f->s, &st);
    assert_int_equal(st.duplicates, 2);
    pfx_free(f);
}

typedef struct {
    pfx_t *f;
    bool deleted;
    bool idle_first; /* the rebuild had ended when the deletion ended */
} rbdel_t;

static void on_rb_deleted(void *arg, int status)
{
    rbdel_t *d = arg;
    assert_int_equal(status, 0);
    d->idle_first = idle(d->f);
    d->deleted = true;
}

/* The log a rebuild reads on a worker is the engine's, which may close it
 * meanwhile (the topic deleted just after this node took the lead): the
 * rebuild pins it (tn_plog_pin), so the close waits until the read ends
 * instead of freeing the log under the worker. */
static void test_server_rebuild_pins_log(void **state)
{
    (void)state;
    pfx_t *f = pfx_new();
    tn_topic_t *t = tu_broker_topic(f->loop, f->b, "orders", 2);
    callw_t w;
    assert_int_equal(call(f, &w, 4, 100, "a", 3), 0);
    tn_plog_t *pl = t->parts[1]->plog;
    assert_int_equal(tn_produce_server_rebuild_log(f->s, "orders", 1, pl), 0);
    rbdel_t d = {f, false, false};
    assert_int_equal(tn_topic_delete(t, on_rb_deleted, &d), 0);
    assert_true(pl->closing);
    assert_true(pl->close_held); /* not freed while the worker reads it */
    assert_true(tu_run_loop(f->loop, tu_is_true, &d.deleted));
    assert_true(d.idle_first);
    assert_true(tu_run_loop(f->loop, idle, f));
    pfx_free(f);
}

static void test_server_refusals(void **state)
{
    (void)state;
    pfx_t *f = pfx_new();
    tn_topic_t *t = tu_broker_topic(f->loop, f->b, "orders", 2);
    callw_t w;
    f->accepts = TN_EREMOTE;
    assert_int_equal(call(f, &w, 4, 1, "a", 1), TN_EREMOTE);
    assert_int_equal(w.c.http_status, 421);
    assert_int_equal(w.c.leader, LEADER);
    f->accepts = TN_EFEWREPLICAS;
    assert_int_equal(call(f, &w, 4, 1, "a", 1), TN_EFEWREPLICAS);
    assert_int_equal(w.c.http_status, 503);
    f->accepts = TN_ECLOSED;
    assert_int_equal(call(f, &w, 4, 1, "a", 1), UV_EAGAIN);
    f->accepts = 0;
    /* An older epoch is fenced; a newer one than the callee's says the
     * callee was deposed: 421. */
    assert_int_equal(call(f, &w, 3, 1, "a", 1), TN_EFENCED);
    assert_int_equal(w.c.http_status, 409);
    assert_int_equal(call(f, &w, 5, 1, "a", 1), TN_EREMOTE);
    assert_int_equal(written(t, 1), 0);
    /* Nothing refused entered the window: the seq stores now. */
    assert_int_equal(call(f, &w, 4, 1, "a", 1), 0);
    assert_int_equal(written(t, 1), w.c.first_offset + 1);
    /* Malformed: 400. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_put_str(&b, "orders"), 0);
    tu_rpc_raw_t raw;
    assert_int_equal(tu_rpc_raw(&f->rpc, f->loop, TN_OP_PRODUCE, &b, 5000, &raw), 400);
    tn_buf_fini(&b);
    pfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_hits_and_waits),
        cmocka_unit_test(test_window_cap),
        cmocka_unit_test(test_ctl_codec),
        cmocka_unit_test(test_window_scan),
        cmocka_unit_test(test_request_codec),
        cmocka_unit_test(test_reply_decode),
        cmocka_unit_test(test_server_stores_once),
        cmocka_unit_test(test_server_refusals),
        cmocka_unit_test(test_server_rebuild_from_log),
        cmocka_unit_test(test_server_rebuild_pins_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
