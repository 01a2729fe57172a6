/* PSTATS over node RPC (cluster/pstats.h): a caller endpoint and an owner
 * endpoint on one loop over loopback, the owner serving a real broker over
 * a store in a temporary directory, with a placement that puts some
 * partitions on other nodes. Covers the numbers of local partitions after
 * publishes (what tn_pstats_local reads here is what the caller gets),
 * the per-partition statuses in the order asked (421 another node's, 416
 * past the topic's count, 404 no such topic, nothing created), malformed
 * requests and a bad topic name (400), a peer that is not
 * there (the call's error, within its timeout) and the caller's own
 * refusals. Every test checks that uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/pstats.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/err.h"
#include "queue/queue.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SELF 1
#define MAXP 8

/* The placement the tests play the metastore with: owner per partition
 * index, every topic; SELF is this node. */
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
    tn_srv_t *srv;
    tu_rpc_pair_t rpc; /* the owner serves PSTATS */
} pfx_t;

static pfx_t *pfx_new(void)
{
    pfx_t *f = calloc(1, sizeof(*f));
    f->fx = tu_fx_new(NULL);
    f->loop = &f->fx->loop;
    tn_broker_opts_t o;
    tu_broker_opts(&o);
    o.mem_max_records = 100;
    o.mem_max_bytes = 1 << 20;
    assert_int_equal(tn_broker_open(f->loop, f->fx->store, &o, &f->b), 0);
    tn_broker_set_placement(f->b, place, NULL);
    assert_int_equal(tn_pstats_srv_new(f->b, &f->srv), 0);
    tu_srv_pair_open(&f->rpc, f->loop, f->srv, TN_OP_PSTATS, 0); /* the messaging bound */
    return f;
}

static void pfx_free(pfx_t *f)
{
    tu_srv_pair_close(&f->rpc, f->loop, f->srv);
    tu_broker_close(f->loop, f->b);
    tu_fx_free(f->fx); /* checks that the loop closes */
    free(f);
}

/* --- engine helpers ------------------------------------------------------------------- */

static tn_topic_t *topic(pfx_t *f, const char *name, uint32_t nparts)
{
    return tu_broker_topic(f->loop, f->b, name, nparts);
}

/* Publish n messages of 100 bytes to partition p, durably. */
static void publish(pfx_t *f, const char *name, uint32_t p, uint32_t n)
{
    char body[100];
    memset(body, 'x', sizeof(body));
    tu_broker_publish(f->loop, f->b, name, p, body, sizeof(body), n);
}

/* --- calls ---------------------------------------------------------------------------- */

typedef struct {
    tn_pstats_call_t c;
    tn_wire_pstat_t out[MAXP];
    bool done;
    int status;
} callw_t;

static void on_call(tn_pstats_call_t *c, int status)
{
    callw_t *w = c->data;
    assert_false(w->done); /* exactly once */
    w->done = true;
    w->status = status;
}

static int call(pfx_t *f, callw_t *w, const char *addr, const char *name, const uint32_t *parts,
                uint32_t n, uint64_t timeout_ms)
{
    memset(w, 0, sizeof(*w));
    w->c.data = w;
    int rc =
        tn_pstats_call(f->rpc.caller, addr, name, parts, n, w->out, timeout_ms, &w->c, on_call);
    if (rc != 0)
        return rc;
    tu_run_until(f->loop, &w->done);
    return w->status;
}

/* --- tests ------------------------------------------------------------------------------ */

/* Partitions 0 and 2 are here, 1 on node 7: after publishes, the caller
 * gets each local partition's numbers exactly as the engine reads them,
 * 421 for the other node's, 416 past the topic's count, in the order
 * asked (duplicates answered as often as asked). */
static void test_numbers_and_statuses(void **state)
{
    (void)state;
    for (int i = 0; i < MAXP; i++)
        owners[i] = SELF;
    owners[1] = 7;
    pfx_t *f = pfx_new();
    tn_topic_t *t = topic(f, "orders", 3);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(tn_topic_part_local(t, 1));
    publish(f, "orders", 0, 5);
    publish(f, "orders", 2, 2);
    publish(f, "orders", 2, 1);

    static const uint32_t parts[] = {2, 1, 0, 3, 2};
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "orders", parts, 5, 20000), 0);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(w.out[i].partition, parts[i]);
    assert_int_equal(w.out[0].status, 200);
    assert_int_equal(w.out[0].next_offset, 3);
    assert_int_equal(w.out[0].high_watermark, 3);
    assert_int_equal(w.out[0].oldest_offset, 0);
    assert_true(w.out[0].segments >= 1);
    assert_true(w.out[0].size_bytes >= 300);
    assert_int_equal(w.out[1].status, 421);
    assert_int_equal(w.out[1].next_offset, 0); /* no numbers with an error */
    assert_int_equal(w.out[2].status, 200);
    assert_int_equal(w.out[2].next_offset, 5);
    assert_int_equal(w.out[3].status, 416);
    assert_int_equal(w.out[4].status, 200);
    assert_int_equal(w.out[4].next_offset, 3);

    /* What the local read says is what the owner sent. */
    tn_wire_pstat_t here;
    assert_int_equal(tn_pstats_local(f->b, "orders", 0, &here), 200);
    assert_int_equal(here.next_offset, w.out[2].next_offset);
    assert_int_equal(here.size_bytes, w.out[2].size_bytes);
    assert_int_equal(here.segments, w.out[2].segments);
    assert_int_equal(tn_pstats_local(f->b, "orders", 1, &here), 421);
    assert_int_equal(tn_pstats_local(f->b, "orders", 9, &here), 416);
    pfx_free(f);
}

/* A topic the owner does not have is 404 for every partition asked, and
 * asking does not create it. */
static void test_unknown_topic(void **state)
{
    (void)state;
    for (int i = 0; i < MAXP; i++)
        owners[i] = SELF;
    pfx_t *f = pfx_new();
    static const uint32_t parts[] = {0, 1};
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "nosuch", parts, 2, 20000), 0);
    assert_int_equal(w.out[0].status, 404);
    assert_int_equal(w.out[1].status, 404);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "nosuch", 6, false, 0, NULL, &t), TN_ENOTFOUND);
    pfx_free(f);
}

/* Malformed requests and a name no topic can have are 400 with a
 * sentence, and the caller sees UV_EINVAL. */
static void test_malformed_400(void **state)
{
    (void)state;
    for (int i = 0; i < MAXP; i++)
        owners[i] = SELF;
    pfx_t *f = pfx_new();
    tn_buf_t b;
    tn_buf_init(&b);
    tu_rpc_raw_t r;

    /* No partitions at all. */
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, f->loop, TN_OP_PSTATS, &b, 20000, &r), 400);
    /* The server's shape check (tn_wire_request_check, the decoder itself)
     * answers before the handler runs. */
    assert_non_null(strstr(r.body, "unsupported rpc operation"));

    /* More indexes claimed than sent. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 3), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, f->loop, TN_OP_PSTATS, &b, 20000, &r), 400);

    /* A name that is no topic's (a slash). */
    static const uint32_t one = 0;
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_pstats_encode(&b, "a/b", &one, 1), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, f->loop, TN_OP_PSTATS, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "invalid topic name"));

    /* Through the call: the same refusal reaches the caller as UV_EINVAL. */
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "a/b", &one, 1, 20000), UV_EINVAL);
    tn_buf_fini(&b);
    pfx_free(f);
}

/* The caller's own refusals (cb never runs), and a peer nobody answers
 * on: the call's error, within its timeout. */
static void test_call_errors(void **state)
{
    (void)state;
    for (int i = 0; i < MAXP; i++)
        owners[i] = SELF;
    pfx_t *f = pfx_new();
    static const uint32_t one = 0;
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "", &one, 1, 1000), UV_EINVAL);
    assert_false(w.done);
    assert_int_equal(call(f, &w, f->rpc.addr, "t", &one, 0, 1000), UV_EINVAL);
    assert_false(w.done);
    assert_int_equal(call(f, &w, "not-an-address", "t", &one, 1, 1000), UV_EINVAL);
    assert_false(w.done);

    /* A UDP port with nobody behind it: the dial fails or times out. */
    uv_udp_t sock;
    char addr[64];
    tu_dead_peer(f->loop, &sock, addr, sizeof(addr));
    int rc = call(f, &w, addr, "t", &one, 1, 1500);
    assert_true(rc == UV_ETIMEDOUT || rc == UV_ECONNREFUSED || rc == UV_ECONNRESET);
    uv_close((uv_handle_t *)&sock, NULL);
    uv_run(f->loop, UV_RUN_NOWAIT);
    pfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_and_statuses),
        cmocka_unit_test(test_unknown_topic),
        cmocka_unit_test(test_malformed_400),
        cmocka_unit_test(test_call_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
