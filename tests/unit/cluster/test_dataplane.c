/* The COMMIT data plane (cluster/dataplane.h) through real node RPC: a
 * caller endpoint and an owner endpoint on one loop over loopback, the
 * owner serving a real broker over a store in a temporary directory.
 * Covers a batch landing as one append (offsets, keys, bodies, per-record
 * delivery times), concurrent batches staying whole, the answers for a
 * partition on another node (421 with its owner), an unknown topic (404,
 * and nothing created), a partition out of range (416), malformed and
 * refused requests (400), a full disk (507), a topic being created (waited for), a call
 * cancelled while its append is under way (committed once) and one
 * cancelled before its append started (nothing appended), the caller's
 * own refusals and the reply decoder. Every test checks that
 * uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/dataplane.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/time.h"
#include "queue/queue.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SELF     1
#define MAXP     8
#define MAX_BODY 4096

/* The placement the tests play the metastore with (owner per partition
 * index, every topic); SELF is this node. */
static uint64_t owners[MAXP];

static bool place(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    (void)arg;
    (void)t;
    *owner = p < MAXP ? owners[p] : 0;
    return *owner == SELF;
}

/* --- the fixture --------------------------------------------------------------------- */

typedef struct {
    tu_fx_t *fx;
    uv_loop_t *loop;
    tn_broker_t *b;
    tn_broker_opts_t bo;
    tn_dataplane_t *dp;
    tu_rpc_pair_t rpc; /* the owner serves COMMIT */
    /* A test's wrapper of the COMMIT handler (NULL: the handler itself). */
    tn_rpc_handler_cb wrap;
    tn_rpc_handler_t real;
} dfx_t;

static dfx_t *cur; /* for handler wrappers */

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until pred(arg) (a 5 ms tick keeps turns short). */
static void run_while_not(dfx_t *d, bool (*pred)(dfx_t *d))
{
    uv_timer_t t;
    uv_timer_init(d->loop, &t);
    uv_timer_start(&t, on_tick, 5, 5);
    int64_t deadline = tn_now_mono_ms() + tu_guard_ms();
    while (!pred(d) && tn_now_mono_ms() < deadline)
        uv_run(d->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(d->loop, UV_RUN_NOWAIT);
    assert_true(pred(d));
}

static void on_wrapped(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    (void)arg;
    cur->wrap(req, payload, len, cur->real.arg);
}

/* The next fixture's store sees a full disk (above its high watermark). */
static bool full_disk;

static void tweak_store(tn_store_opts_t *o)
{
    o->max_body = MAX_BODY;
    if (full_disk)
        o->disk_min_free = UINT64_MAX; /* no disk is that large */
}

/* placed: the broker asks place() (else every partition is local); wrap:
 * the COMMIT handler the owner registers instead of the real one (which
 * it may call through cur->real). */
static dfx_t *dfx_new(bool placed, tn_rpc_handler_cb wrap)
{
    dfx_t *d = calloc(1, sizeof(*d));
    cur = d;
    d->fx = tu_fx_new(tweak_store);
    d->loop = &d->fx->loop;
    tn_broker_opts_t *o = &d->bo;
    tu_broker_opts(o);
    o->mem_max_records = 100;
    o->mem_max_bytes = 1 << 20;
    assert_int_equal(tn_broker_open(d->loop, d->fx->store, o, &d->b), 0);
    if (placed)
        tn_broker_set_placement(d->b, place, NULL);
    assert_int_equal(tn_dataplane_new(d->loop, d->b, &d->dp), 0);
    tn_rpc_handler_t h[TN_DATAPLANE_HANDLERS];
    size_t nh = 0;
    tn_dataplane_handlers(d->dp, h, &nh);
    assert_int_equal(nh, 1);
    assert_int_equal(h[0].op, TN_OP_COMMIT);
    assert_int_equal(h[0].flags, TN_RPC_OP_COMMIT);
    d->real = h[0];
    d->wrap = wrap;
    if (wrap != NULL)
        h[0].fn = on_wrapped;
    tu_rpc_pair_open(&d->rpc, d->loop, h, nh);
    return d;
}

static void dfx_free(dfx_t *d)
{
    tu_rpc_pair_close(&d->rpc, d->loop);
    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    assert_int_equal(st.inflight, 0);
    tn_dataplane_free(d->dp);
    tu_broker_close(d->loop, d->b);
    tu_fx_free(d->fx);
    free(d);
    cur = NULL;
}

/* --- engine helpers ------------------------------------------------------------------- */

typedef struct {
    tn_waiter_t w;
    bool done;
    int status;
} waitw_t;

static void on_wait(tn_waiter_t *w, int status)
{
    waitw_t *x = (waitw_t *)w;
    x->done = true;
    x->status = status;
}

static tn_topic_t *topic(dfx_t *d, const char *name, uint32_t nparts)
{
    return tu_broker_topic(d->loop, d->b, name, nparts);
}

/* The record at offset of partition p (from the cache or the disk). */
static const tn_centry_t *record(dfx_t *d, tn_topic_t *t, uint32_t p, uint64_t offset)
{
    const tn_centry_t *e = NULL;
    waitw_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_wait;
    int rc = tn_part_record(t, p, offset, &w.w, &e);
    if (rc == UV_EAGAIN) {
        tu_run_until(d->loop, &w.done);
        rc = tn_part_record(t, p, offset, NULL, &e);
    }
    assert_int_equal(rc, 0);
    return e;
}

/* Records of partition p that consumers may see. */
static uint64_t visible(tn_topic_t *t, uint32_t p)
{
    tn_plog_stats_t st;
    tn_plog_stats(t->parts[p]->plog, &st);
    return st.visible_next;
}

/* --- calls ---------------------------------------------------------------------------- */

typedef struct {
    tn_commit_call_t c;
    bool done;
    int status;
} callw_t;

static void on_call(tn_commit_call_t *c, int status)
{
    callw_t *w = c->data;
    assert_false(w->done); /* exactly once */
    w->done = true;
    w->status = status;
}

static void call_start(dfx_t *d, callw_t *w, const char *topic, uint32_t partition,
                       const tn_commit_rec_t *recs, uint32_t n)
{
    memset(w, 0, sizeof(*w));
    w->c.data = w;
    assert_int_equal(tn_commit_call(d->rpc.caller, d->rpc.addr, topic, partition, recs, n, 20000,
                                    &w->c, on_call),
                     0);
}

static int call(dfx_t *d, callw_t *w, const char *topic, uint32_t partition,
                const tn_commit_rec_t *recs, uint32_t n)
{
    call_start(d, w, topic, partition, recs, n);
    tu_run_until(d->loop, &w->done);
    return w->status;
}

/* --- tests ------------------------------------------------------------------------------ */

/* A batch of three records for partition 1 lands as one append after what
 * the partition held: first_offset is the offset of the first, each
 * record has its key, body and delivery time, and two batches sent at once
 * each stay whole. */
static void test_batch_one_append(void **state)
{
    (void)state;
    dfx_t *d = dfx_new(false, NULL);
    tn_topic_t *t = topic(d, "orders", 2);
    int64_t now = tn_now_wall_ms();
    tn_commit_rec_t one = {tn_iov("", 0), tn_iov("first", 5), 0, now};
    callw_t w;
    assert_int_equal(call(d, &w, "orders", 1, &one, 1), 0);
    assert_int_equal(w.c.first_offset, 0);
    assert_int_equal(w.c.http_status, 200);
    assert_string_equal(w.c.error, "");

    tn_commit_rec_t recs[3] = {
        {tn_iov("k-a", 3), tn_iov("body a", 6), 0, now - 10},
        {tn_iov("", 0), tn_iov("body b", 6), now + 3600 * 1000, now - 5},
        {tn_iov("k-c", 3), tn_iov("body c", 6), now - 1000, now},
    };
    assert_int_equal(call(d, &w, "orders", 1, recs, 3), 0);
    assert_int_equal(w.c.first_offset, 1);
    for (uint64_t i = 0; i < 3; i++) {
        const tn_centry_t *e = record(d, t, 1, 1 + i);
        assert_int_equal(e->body->len, recs[i].body.len);
        assert_memory_equal(e->body->data, recs[i].body.base, recs[i].body.len);
        if (recs[i].key.len == 0) {
            assert_null(e->key);
        } else {
            assert_non_null(e->key);
            assert_int_equal(e->key->len, recs[i].key.len);
            assert_memory_equal(e->key->data, recs[i].key.base, recs[i].key.len);
        }
        assert_int_equal(e->deliver_at_ms, recs[i].deliver_at_ms);
    }
    assert_int_equal(visible(t, 1), 4);
    assert_int_equal(visible(t, 0), 0); /* pinned: nothing went round robin */

    /* Two batches at once: each is a dense run of its own records. */
    tn_commit_rec_t xs[4], ys[4];
    char xb[4][8], yb[4][8];
    for (int i = 0; i < 4; i++) {
        snprintf(xb[i], sizeof xb[i], "x%d", i);
        snprintf(yb[i], sizeof yb[i], "y%d", i);
        xs[i] = (tn_commit_rec_t){tn_iov("", 0), tn_iov(xb[i], 2), 0, now};
        ys[i] = (tn_commit_rec_t){tn_iov("", 0), tn_iov(yb[i], 2), 0, now};
    }
    callw_t wx, wy;
    call_start(d, &wx, "orders", 1, xs, 4);
    call_start(d, &wy, "orders", 1, ys, 4);
    tu_run_until(d->loop, &wx.done);
    tu_run_until(d->loop, &wy.done);
    assert_int_equal(wx.status, 0);
    assert_int_equal(wy.status, 0);
    assert_true(wx.c.first_offset == 4 || wx.c.first_offset == 8);
    assert_int_equal(wy.c.first_offset, wx.c.first_offset == 4 ? 8 : 4);
    for (uint64_t i = 0; i < 4; i++) {
        const tn_centry_t *e = record(d, t, 1, wx.c.first_offset + i);
        assert_memory_equal(e->body->data, xb[i], 2);
        e = record(d, t, 1, wy.c.first_offset + i);
        assert_memory_equal(e->body->data, yb[i], 2);
    }

    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    assert_int_equal(st.commits, 4);
    assert_int_equal(st.records, 12);
    assert_int_equal(st.refused + st.failed, 0);
    tn_buf_t m;
    tn_buf_init(&m);
    assert_int_equal(tn_dataplane_metrics_write(d->dp, &m), 0);
    assert_int_equal(tn_buf_append(&m, "", 1), 0);
    assert_non_null(strstr(tn_buf_data(&m), "tern_cluster_commits_total{outcome=\"ok\"} 4\n"));
    assert_non_null(strstr(tn_buf_data(&m), "tern_cluster_commit_age_seconds_count 4\n"));
    tn_buf_fini(&m);
    dfx_free(d);
}

/* A partition placed on node 7 is answered 421 naming node 7 (the caller
 * sees TN_EREMOTE with owner 7); one placed nowhere yet names no one;
 * nothing is appended. */
static void test_not_owner(void **state)
{
    (void)state;
    for (int i = 0; i < MAXP; i++)
        owners[i] = SELF;
    owners[1] = 7;
    owners[2] = 0;
    dfx_t *d = dfx_new(true, NULL);
    tn_topic_t *t = topic(d, "placed", 3);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(tn_topic_part_local(t, 1));
    tn_commit_rec_t r = {tn_iov("", 0), tn_iov("m", 1), 0, 1};
    callw_t w;
    assert_int_equal(call(d, &w, "placed", 1, &r, 1), TN_EREMOTE);
    assert_int_equal(w.c.http_status, 421);
    assert_int_equal(w.c.owner, 7);
    assert_non_null(strstr(w.c.error, "partition 1 of placed"));
    assert_int_equal(call(d, &w, "placed", 2, &r, 1), TN_EREMOTE);
    assert_int_equal(w.c.owner, 0);
    assert_int_equal(call(d, &w, "placed", 0, &r, 1), 0);
    assert_int_equal(visible(t, 0), 1);
    dfx_free(d);
}

/* An unknown topic is 404 and is not created; a partition past the
 * topic's count is 416. */
static void test_unknown_topic_and_range(void **state)
{
    (void)state;
    dfx_t *d = dfx_new(false, NULL);
    tn_commit_rec_t r = {tn_iov("", 0), tn_iov("m", 1), 0, 1};
    callw_t w;
    assert_int_equal(call(d, &w, "nosuch", 0, &r, 1), TN_ENOTFOUND);
    assert_int_equal(w.c.http_status, 404);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(d->b, "nosuch", 6, false, 0, NULL, &t), TN_ENOTFOUND);

    t = topic(d, "two", 2);
    assert_int_equal(call(d, &w, "two", 2, &r, 1), UV_ERANGE);
    assert_int_equal(w.c.http_status, 416);
    assert_non_null(strstr(w.c.error, "it has 2"));
    assert_int_equal(call(d, &w, "two", UINT32_MAX, &r, 1), UV_ERANGE);
    assert_int_equal(visible(t, 0) + visible(t, 1), 0);
    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    assert_int_equal(st.refused, 3);
    assert_int_equal(st.commits, 0);
    dfx_free(d);
}

/* Request head: topic, partition, count. */
static void head(tn_buf_t *b, const char *topic, uint32_t partition, uint32_t count)
{
    tn_buf_reset(b);
    assert_int_equal(tn_wire_put_str(b, topic), 0);
    assert_int_equal(tn_wire_put_u32(b, partition), 0);
    assert_int_equal(tn_wire_put_u32(b, count), 0);
}

static void rec(tn_buf_t *b, const char *key, const void *body, size_t blen, int64_t at,
                int64_t created)
{
    assert_int_equal(tn_wire_put_str(b, key), 0);
    assert_int_equal(tn_wire_put_bytes(b, body, blen), 0);
    assert_int_equal(tn_wire_put_i64(b, at), 0);
    assert_int_equal(tn_wire_put_i64(b, created), 0);
}

/* Malformed requests and refused values are 400, each with its own
 * sentence, and append nothing: a cut or trailing request, a body over
 * the store's limit, a bad topic name, no record, negative times. */
static void test_malformed_400(void **state)
{
    (void)state;
    dfx_t *d = dfx_new(false, NULL);
    tn_topic_t *t = topic(d, "t", 1);
    tn_buf_t b;
    tn_buf_init(&b);
    tu_rpc_raw_t r;

    head(&b, "t", 0, 1);
    rec(&b, "", "m", 1, 0, 1);
    assert_int_equal(tn_buf_append(&b, "!", 1), 0);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);
    head(&b, "t", 0, 2); /* one record short */
    rec(&b, "", "m", 1, 0, 1);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);

    static char big[MAX_BODY + 1];
    memset(big, 'b', sizeof(big));
    head(&b, "t", 0, 2);
    rec(&b, "", "ok", 2, 0, 1);
    rec(&b, "", big, sizeof(big), 0, 1);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "record 1 has a body over the 4096 byte limit"));
    head(&b, "t", 0, 1);
    rec(&b, "", big, MAX_BODY, 0, 1); /* at the limit: taken */
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 200);

    head(&b, "bad name!", 0, 1);
    rec(&b, "", "m", 1, 0, 1);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "invalid topic name"));
    head(&b, "t", 0, 0);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "at least one record"));
    head(&b, "t", 0, 2);
    rec(&b, "", "m", 1, 0, 1);
    rec(&b, "", "m", 1, -5, 1);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "record 1 has a negative deliver_at_ms"));
    head(&b, "t", 0, 1);
    rec(&b, "", "m", 1, 0, -1);
    assert_int_equal(tu_rpc_raw(&d->rpc, d->loop, TN_OP_COMMIT, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "negative created_ms"));
    tn_buf_fini(&b);

    assert_int_equal(visible(t, 0), 1); /* only the body at the limit */
    dfx_free(d);
}

/* A commit for a topic being created waits for it: the creation gate
 * holds the topic, two commits arrive, one is cancelled by its caller;
 * once the gate lets the topic through the other commits and the
 * cancelled one appends nothing. */
static tn_gate_t *held;

static void hold_gate(void *arg, tn_gate_t *g, tn_topic_t *t, tn_channel_t *ch)
{
    (void)arg;
    (void)t;
    (void)ch;
    held = g;
}

/* The requests the owner took, as the wrapper saw them. */
static tn_rpc_req_t *seen[2];
static int nseen;

static void note_then_commit(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    if (nseen < 2)
        seen[nseen++] = req;
    cur->real.fn(req, payload, len, arg);
}

static bool both_in(dfx_t *d)
{
    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    return st.inflight == 2;
}

/* The owner has seen the cancel of one of the two requests (they are
 * valid until answered, which the held gate keeps from happening). */
static bool one_cancelled(dfx_t *d)
{
    (void)d;
    return nseen == 2 && (tn_rpc_req_cancelled(seen[0]) || tn_rpc_req_cancelled(seen[1]));
}

static bool none_in(dfx_t *d)
{
    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    return st.inflight == 0;
}

static void test_waits_for_creation_cancel_before_start(void **state)
{
    (void)state;
    nseen = 0;
    dfx_t *d = dfx_new(false, note_then_commit);
    held = NULL;
    tn_broker_set_gate(d->b, hold_gate, NULL);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(d->b, "late", 4, true, 1, NULL, &t), UV_EAGAIN);
    assert_non_null(held);

    tn_commit_rec_t ra = {tn_iov("", 0), tn_iov("kept", 4), 0, 1};
    tn_commit_rec_t rb = {tn_iov("", 0), tn_iov("gone", 4), 0, 1};
    callw_t wa, wb;
    call_start(d, &wa, "late", 0, &ra, 1);
    call_start(d, &wb, "late", 0, &rb, 1);
    run_while_not(d, both_in);
    tn_commit_call_cancel(&wb.c);
    tu_run_until(d->loop, &wb.done);
    assert_int_equal(wb.status, TN_ECLOSED);
    run_while_not(d, one_cancelled);
    assert_false(wa.done);

    tn_gate_done(held, 0);
    tu_run_until(d->loop, &wa.done);
    assert_int_equal(wa.status, 0);
    assert_int_equal(wa.c.first_offset, 0);
    run_while_not(d, none_in);
    t = NULL;
    assert_int_equal(tn_broker_topic(d->b, "late", 4, false, 0, NULL, &t), 0);
    assert_int_equal(visible(t, 0), 1);
    assert_memory_equal(record(d, t, 0, 0)->body->data, "kept", 4);
    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    assert_int_equal(st.commits, 1);
    assert_int_equal(st.failed, 1); /* the cancelled one: 503, dropped */
    tn_broker_set_gate(d->b, NULL, NULL);
    dfx_free(d);
}

/* A call cancelled while its append is under way: the append goes on,
 * the record is in the log once, and the caller's callback says
 * TN_ECLOSED. The wrapper runs the real handler (the topic is ready, so
 * the append starts inside it) and then cancels the call. */
static callw_t *to_cancel;

static void commit_then_cancel(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    cur->real.fn(req, payload, len, arg);
    tn_dataplane_stats_t st;
    tn_dataplane_stats(cur->dp, &st);
    assert_int_equal(st.inflight, 1); /* under way: the append is out */
    if (to_cancel != NULL) {
        tn_commit_call_cancel(&to_cancel->c);
        to_cancel = NULL;
    }
}

static void test_cancel_under_way_commits_once(void **state)
{
    (void)state;
    dfx_t *d = dfx_new(false, commit_then_cancel);
    tn_topic_t *t = topic(d, "t", 1);
    tn_commit_rec_t r = {tn_iov("k", 1), tn_iov("once", 4), 0, 1};
    callw_t w;
    call_start(d, &w, "t", 0, &r, 1);
    to_cancel = &w;
    tu_run_until(d->loop, &w.done);
    assert_int_equal(w.status, TN_ECLOSED);
    run_while_not(d, none_in);
    assert_int_equal(visible(t, 0), 1);
    const tn_centry_t *e = record(d, t, 0, 0);
    assert_memory_equal(e->body->data, "once", 4);
    tn_dataplane_stats_t st;
    tn_dataplane_stats(d->dp, &st);
    assert_int_equal(st.commits, 1);
    assert_int_equal(st.records, 1);

    /* The dispatcher's retry commits it again (at-least-once). */
    assert_int_equal(call(d, &w, "t", 0, &r, 1), 0);
    assert_int_equal(w.c.first_offset, 1);
    assert_int_equal(visible(t, 0), 2);
    dfx_free(d);
}

/* A disk above the high watermark is 507 (TN_EDISKHIGH for the caller),
 * and nothing is appended. */
static void test_disk_high_507(void **state)
{
    (void)state;
    full_disk = true;
    dfx_t *d = dfx_new(false, NULL);
    full_disk = false;
    assert_true(tn_store_disk_high(d->fx->store));
    tn_topic_t *t = topic(d, "t", 1);
    tn_commit_rec_t r = {tn_iov("", 0), tn_iov("m", 1), 0, 1};
    callw_t w;
    assert_int_equal(call(d, &w, "t", 0, &r, 1), TN_EDISKHIGH);
    assert_int_equal(w.c.http_status, 507);
    assert_non_null(strstr(w.c.error, "high watermark"));
    assert_int_equal(visible(t, 0), 0);
    dfx_free(d);
}

/* What the caller refuses before sending: no record, no topic, a key too
 * long, a negative time, a batch over the frame cap, a bad address. */
static void test_call_refusals(void **state)
{
    (void)state;
    dfx_t *d = dfx_new(false, NULL);
    tn_commit_rec_t r = {tn_iov("", 0), tn_iov("m", 1), 0, 1};
    tn_commit_call_t c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(tn_commit_call(d->rpc.caller, d->rpc.addr, "t", 0, &r, 0, 0, &c, on_call),
                     UV_EINVAL);
    assert_int_equal(tn_commit_call(d->rpc.caller, d->rpc.addr, "", 0, &r, 1, 0, &c, on_call),
                     UV_EINVAL);
    static char key[TN_COMMIT_KEY_MAX + 1];
    tn_commit_rec_t kr = {tn_iov(key, sizeof(key)), tn_iov("m", 1), 0, 1};
    assert_int_equal(tn_commit_call(d->rpc.caller, d->rpc.addr, "t", 0, &kr, 1, 0, &c, on_call),
                     UV_EINVAL);
    tn_commit_rec_t neg = {tn_iov("", 0), tn_iov("m", 1), -1, 1};
    assert_int_equal(tn_commit_call(d->rpc.caller, d->rpc.addr, "t", 0, &neg, 1, 0, &c, on_call),
                     UV_EINVAL);
    /* Over the cap by one byte: the size function says so first. */
    size_t fixed = tn_commit_head_size(1) + tn_commit_rec_size(0, 0);
    char *huge = malloc(TN_WIRE_MAX_PAYLOAD);
    tn_commit_rec_t hr = {tn_iov("", 0), tn_iov(huge, TN_WIRE_MAX_PAYLOAD - fixed + 1), 0, 1};
    assert_int_equal(tn_commit_encoded_size("t", &hr, 1), TN_WIRE_MAX_PAYLOAD + 1);
    assert_int_equal(tn_commit_call(d->rpc.caller, d->rpc.addr, "t", 0, &hr, 1, 0, &c, on_call),
                     TN_ETOOBIG);
    free(huge);
    assert_int_equal(tn_commit_call(d->rpc.caller, "nowhere", "t", 0, &r, 1, 0, &c, on_call),
                     UV_EINVAL);
    dfx_free(d);
}

/* The reply decoder: each status the owner gives, and replies that are
 * not one (not JSON, no first_offset, a bad owner_node, an unknown
 * status). */
static void test_reply_decode(void **state)
{
    (void)state;
    tn_commit_call_t c;
    memset(&c, 0, sizeof(c));
#define DEC(st, body) tn_commit_reply_decode(st, (const uint8_t *)(body), strlen(body), &c)
    assert_int_equal(DEC(200, "{\"first_offset\":42}"), 0);
    assert_int_equal(c.first_offset, 42);
    assert_int_equal(DEC(200, "{\"first_offset\":9007199254740993}"), 0);
    assert_int_equal(c.first_offset, 9007199254740993ull);
    assert_int_equal(DEC(421, "{\"error\":\"no\",\"owner_node\":\"3\"}"), TN_EREMOTE);
    assert_int_equal(c.owner, 3);
    assert_string_equal(c.error, "no");
    assert_int_equal(DEC(421, "{\"error\":\"no\",\"owner_node\":null}"), TN_EREMOTE);
    assert_int_equal(c.owner, 0);
    assert_int_equal(DEC(404, "{\"error\":\"x\"}"), TN_ENOTFOUND);
    assert_int_equal(DEC(416, "{\"error\":\"x\"}"), UV_ERANGE);
    assert_int_equal(DEC(507, "{\"error\":\"x\"}"), TN_EDISKHIGH);
    assert_int_equal(DEC(503, "{\"error\":\"x\"}"), UV_EAGAIN);
    assert_int_equal(DEC(400, "{\"error\":\"unsupported rpc operation\"}"), UV_EINVAL);

    assert_int_equal(DEC(200, "{}"), TN_EPROTO);
    assert_int_equal(DEC(200, "{\"first_offset\":-1}"), TN_EPROTO);
    assert_int_equal(DEC(200, "{\"first_offset\":1.5}"), TN_EPROTO);
    assert_int_equal(DEC(200, "{\"first_offset\":\"1\"}"), TN_EPROTO);
    assert_int_equal(DEC(200, "[1]"), TN_EPROTO);
    assert_int_equal(DEC(200, "first_offset=1"), TN_EPROTO);
    assert_int_equal(DEC(200, ""), TN_EPROTO);
    assert_int_equal(DEC(421, "{\"error\":\"no\",\"owner_node\":3}"), TN_EPROTO);
    assert_int_equal(DEC(421, "{\"error\":\"no\",\"owner_node\":\"-3\"}"), TN_EPROTO);
    assert_int_equal(DEC(421, "{\"error\":\"no\",\"owner_node\":\"99999999999999999999\"}"),
                     TN_EPROTO);
    assert_int_equal(DEC(404, "{}"), TN_EPROTO);
    assert_int_equal(DEC(500, "{\"error\":\"x\"}"), TN_EPROTO);
    assert_int_equal(tn_commit_reply_decode(200, (const uint8_t *)"{\"first_offset\":1}\0", 19, &c),
                     TN_EPROTO);
#undef DEC
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_one_append),
        cmocka_unit_test(test_not_owner),
        cmocka_unit_test(test_unknown_topic_and_range),
        cmocka_unit_test(test_malformed_400),
        cmocka_unit_test(test_waits_for_creation_cancel_before_start),
        cmocka_unit_test(test_cancel_under_way_commits_once),
        cmocka_unit_test(test_disk_high_507),
        cmocka_unit_test(test_call_refusals),
        cmocka_unit_test(test_reply_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
