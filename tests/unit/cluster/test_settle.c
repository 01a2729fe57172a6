/* SETTLE over node RPC (cluster/settle.h): a caller endpoint and an owner
 * endpoint on one loop over loopback, the owner's handler over scripted
 * hooks (which partitions it owns, what settling each handle answers).
 * Covers per-handle statuses in order (204, 410, 503, 421), a reply that
 * waits for every settled handle's channel log record (500 for a failed
 * one), the hooks
 * getting every field of the request, a request before the hooks are set
 * (503 for the whole request), a malformed request and bad names (400),
 * a peer that is not there (the call's error), and the caller's own
 * refusals. Every test checks that uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/settle.h"
#include "cluster/wire.h"
#include "core/err.h"

#include "fixture_rpc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the scripted local side -------------------------------------------------------- */

/* Partition p answers script[p % 4] when owned: 0, TN_ENOTFOUND, UV_ENOBUFS;
 * partitions >= 100 are not owned. */
static const int script[4] = {0, TN_ENOTFOUND, UV_ENOBUFS, 0};

typedef struct {
    unsigned calls;
    char topic[256], channel[256];
    uint32_t partition[TN_SETTLE_MAX];
    uint64_t offset[TN_SETTLE_MAX];
    uint32_t nonce[TN_SETTLE_MAX];
    uint8_t how;
    int64_t vis;
} seen_t;

static seen_t seen;

static bool owns(void *arg, const char *topic, uint32_t p)
{
    assert_ptr_equal(arg, &seen);
    (void)topic;
    return p < 100;
}

/* With hold set, a settled handle's wait for its channel log record is
 * kept here (the test ends it) rather than ended at once. */
static bool hold;
static tn_chan_sync_t *held[TN_SETTLE_MAX];
static tn_chan_sync_cb held_cb[TN_SETTLE_MAX];
static unsigned nheld;

static int local(void *arg, const char *topic, const char *channel, uint32_t partition,
                 uint64_t offset, uint32_t nonce, uint8_t how, int64_t visibility_ms,
                 tn_chan_sync_t *sync, tn_chan_sync_cb cb)
{
    assert_ptr_equal(arg, &seen);
    unsigned i = seen.calls++;
    snprintf(seen.topic, sizeof(seen.topic), "%s", topic);
    snprintf(seen.channel, sizeof(seen.channel), "%s", channel);
    seen.partition[i] = partition;
    seen.offset[i] = offset;
    seen.nonce[i] = nonce;
    seen.how = how;
    seen.vis = visibility_ms;
    int rc = script[partition % 4];
    if (rc == 0 && hold) {
        held[nheld] = sync;
        held_cb[nheld++] = cb;
    } else if (rc == 0) {
        cb(sync, 0);
    }
    return rc;
}

/* --- the fixture --------------------------------------------------------------------- */

/* The owner serves SETTLE. */
typedef tu_srv_fx_t sfx_t;

static sfx_t *sfx_new(bool hooks)
{
    sfx_t *f = tu_srv_fx_new();
    tn_srv_t *srv = NULL;
    assert_int_equal(tn_settle_srv_new(&srv), 0);
    if (hooks)
        tn_settle_srv_set_hooks(srv, owns, &seen, local, &seen);
    tu_srv_fx_serve(f, srv, TN_OP_SETTLE, 0); /* the messaging bound */
    memset(&seen, 0, sizeof(seen));
    hold = false;
    nheld = 0;
    return f;
}

static void sfx_free(sfx_t *f)
{
    tu_srv_fx_free(f, NULL);
}

typedef struct {
    tn_settle_call_t c;
    bool done;
    int status;
} callw_t;

static void on_call(tn_settle_call_t *c, int status)
{
    callw_t *w = (callw_t *)c;
    w->done = true;
    w->status = status;
}

static int settle(sfx_t *f, const char *peer, const char *topic, const char *channel, uint8_t how,
                  int64_t vis, const tn_wire_handle_t *h, uint32_t n, callw_t *w)
{
    memset(w, 0, sizeof(*w));
    int rc =
        tn_settle_call(f->rpc.caller, peer, topic, channel, how, vis, h, n, 2000, &w->c, on_call);
    if (rc != 0)
        return rc;
    tu_run_until(&f->loop, &w->done);
    return w->status;
}

/* --- tests ----------------------------------------------------------------------------- */

static void test_statuses_in_order(void **state)
{
    (void)state;
    sfx_t *f = sfx_new(true);
    tn_wire_handle_t h[6] = {
        {0, 10, 1}, {1, 11, 2}, {2, 12, 3}, {100, 13, 4}, {3, UINT64_MAX >> 1, UINT32_MAX},
        {4, 0, 7},
    };
    callw_t w;
    assert_int_equal(
        settle(f, f->rpc.addr, "orders", "billing", TN_WIRE_SETTLE_EXTEND, 45000, h, 6, &w), 0);
    const uint16_t want[6] = {204, 410, 503, 421, 204, 204};
    assert_int_equal(w.c.n, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(w.c.status[i], want[i]);
    /* The hooks got every owned handle, in order, with the request's fields. */
    assert_int_equal(seen.calls, 5);
    assert_string_equal(seen.topic, "orders");
    assert_string_equal(seen.channel, "billing");
    assert_int_equal(seen.how, TN_WIRE_SETTLE_EXTEND);
    assert_int_equal(seen.vis, 45000);
    const uint32_t parts[5] = {0, 1, 2, 3, 4};
    for (int i = 0; i < 5; i++)
        assert_int_equal(seen.partition[i], parts[i]);
    assert_true(seen.offset[3] == UINT64_MAX >> 1);
    assert_int_equal(seen.nonce[3], UINT32_MAX);
    assert_int_equal(seen.nonce[0], 1);

    /* A full batch of TN_SETTLE_MAX, every kind of settle. */
    tn_wire_handle_t many[TN_SETTLE_MAX];
    for (uint32_t i = 0; i < TN_SETTLE_MAX; i++)
        many[i] = (tn_wire_handle_t){i % 4 == 1 ? 0 : i, i, i + 1};
    for (uint8_t how = TN_WIRE_SETTLE_ACK; how <= TN_WIRE_SETTLE_NACK; how++) {
        seen.calls = 0;
        assert_int_equal(settle(f, f->rpc.addr, "t", "c", how, 0, many, TN_SETTLE_MAX, &w), 0);
        assert_int_equal(seen.calls, TN_SETTLE_MAX);
        assert_int_equal(seen.how, how);
        for (uint32_t i = 0; i < TN_SETTLE_MAX; i++)
            assert_int_equal(w.c.status[i], script[many[i].partition % 4] == 0            ? 204
                                            : script[many[i].partition % 4] == UV_ENOBUFS ? 503
                                                                                          : 410);
    }
    sfx_free(f);
}

static void test_not_ready_503(void **state)
{
    (void)state;
    sfx_t *f = sfx_new(false);
    tn_wire_handle_t h = {0, 1, 1};
    callw_t w;
    assert_int_equal(settle(f, f->rpc.addr, "t", "c", TN_WIRE_SETTLE_ACK, 0, &h, 1, &w), UV_EAGAIN);
    assert_int_equal(seen.calls, 0);
    /* Once set, the same request settles. */
    tn_settle_srv_set_hooks(f->srv, owns, &seen, local, &seen);
    assert_int_equal(settle(f, f->rpc.addr, "t", "c", TN_WIRE_SETTLE_ACK, 0, &h, 1, &w), 0);
    assert_int_equal(w.c.status[0], 204);
    assert_int_equal(seen.calls, 1);
    sfx_free(f);
}

static void test_refused_400(void **state)
{
    (void)state;
    sfx_t *f = sfx_new(true);
    tn_buf_t b;
    tn_buf_init(&b);
    tu_rpc_raw_t w;
    /* A cut request: the RPC server's shape check answers it. */
    tn_wire_handle_t h = {0, 1, 1};
    assert_int_equal(tn_wire_settle_encode(&b, "t", "c", TN_WIRE_SETTLE_ACK, 0, &h, 1), 0);
    b.len--;
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    /* Names the wire takes but a topic or channel cannot have. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_settle_encode(&b, "no spaces", "c", TN_WIRE_SETTLE_ACK, 0, &h, 1), 0);
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    assert_non_null(strstr(w.body, "invalid topic or channel name"));
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_settle_encode(&b, "t", "c#ephemeral!", TN_WIRE_SETTLE_ACK, 0, &h, 1),
                     0);
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_SETTLE, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    assert_int_equal(seen.calls, 0);
    tn_buf_fini(&b);
    sfx_free(f);
}

static void test_call_errors(void **state)
{
    (void)state;
    sfx_t *f = sfx_new(true);
    tn_wire_handle_t h = {0, 1, 1};
    callw_t w;
    /* The caller's own refusals: cb never runs. */
    assert_int_equal(
        tn_settle_call(f->rpc.caller, f->rpc.addr, "", "c", 1, 0, &h, 1, 2000, &w.c, on_call),
        UV_EINVAL);
    assert_int_equal(
        tn_settle_call(f->rpc.caller, f->rpc.addr, "t", "c", 9, 0, &h, 1, 2000, &w.c, on_call),
        UV_EINVAL);
    assert_int_equal(
        tn_settle_call(f->rpc.caller, f->rpc.addr, "t", "c", 1, 0, &h, 0, 2000, &w.c, on_call),
        UV_EINVAL);
    assert_int_equal(
        tn_settle_call(f->rpc.caller, "not an address", "t", "c", 1, 0, &h, 1, 2000, &w.c, on_call),
        UV_EINVAL);
    /* A peer nobody serves: the call ends with a transport error, never 0. */
    uv_udp_t sock;
    char dead[64];
    tu_dead_peer(&f->loop, &sock, dead, sizeof(dead));
    int rc = settle(f, dead, "t", "c", TN_WIRE_SETTLE_ACK, 0, &h, 1, &w);
    assert_true(rc == UV_ETIMEDOUT || rc == UV_ECONNREFUSED || rc == UV_ECONNRESET);
    assert_int_equal(seen.calls, 0);
    uv_close((uv_handle_t *)&sock, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    sfx_free(f);
}

static void on_grace(uv_timer_t *t)
{
    *(bool *)t->data = true;
}

/* The owner replies only once every settled handle's channel log record
 * ended: not while one still waits, and 500 for one whose write failed. */
static void test_reply_waits_for_the_log(void **state)
{
    (void)state;
    sfx_t *f = sfx_new(true);
    hold = true;
    tn_wire_handle_t h[4] = {{0, 10, 1}, {1, 11, 2}, {3, 12, 3}, {100, 13, 4}};
    callw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_settle_call(f->rpc.caller, f->rpc.addr, "t", "c", TN_WIRE_SETTLE_ACK, 0, h,
                                    4, 5000, &w.c, on_call),
                     0);
    /* Both settled handles wait for their records; then give a reply sent
     * too early every chance to arrive. */
    while (nheld < 2)
        uv_run(&f->loop, UV_RUN_ONCE);
    bool grace = false;
    uv_timer_t t;
    uv_timer_init(&f->loop, &t);
    t.data = &grace;
    uv_timer_start(&t, on_grace, 300, 0);
    tu_run_until(&f->loop, &grace);
    assert_false(w.done);
    held_cb[0](held[0], 0);
    grace = false;
    uv_timer_start(&t, on_grace, 300, 0);
    tu_run_until(&f->loop, &grace);
    assert_false(w.done); /* one still waits */
    held_cb[1](held[1], UV_EIO);
    tu_run_until(&f->loop, &w.done);
    assert_int_equal(w.status, 0);
    const uint16_t want[4] = {204, 410, 500, 421};
    for (int i = 0; i < 4; i++)
        assert_int_equal(w.c.status[i], want[i]);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    sfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_statuses_in_order),
        cmocka_unit_test(test_not_ready_503),
        cmocka_unit_test(test_refused_400),
        cmocka_unit_test(test_call_errors),
        cmocka_unit_test(test_reply_waits_for_the_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
