/* REMOTE_CHECK over node RPC (cluster/rcheck.h): a caller endpoint and a
 * member endpoint on one loop over loopback, the member's handler over a
 * scripted local hook. Covers the request codec (round trip, every
 * refusal with its sentence, the RPC server's shape check), the result
 * codec (round trip, out-of-range classes and statuses, trailing bytes),
 * the reply decoder, the handler's statuses (200 with the result, now or
 * later; 404 no such remote there; 503 not ready or shutting down; 400
 * malformed), the hook getting the request's fields, and the caller's own
 * refusals and a dead peer. Every test checks that uv_loop_close returns
 * 0. */
#include "core/platform.h"

#include "cluster/rcheck.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/err.h"

#include "fixture_rpc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the scripted local side -------------------------------------------------------- */

/* By remote: "late" answers on the next loop pass; "gone" is not here
 * (TN_ENOTFOUND); "closing" is refused (shutting down); "auth" fails with
 * class 3 and status 401; anything else is ok at once. */
typedef struct {
    unsigned calls;
    char remote[65];
    uint64_t id;
    char topic[256];
    uv_timer_t timer; /* "late" */
    tn_rcheck_done_cb done;
    void *done_arg;
} seen_t;

static seen_t seen;

static void on_late(uv_timer_t *t)
{
    (void)t;
    tn_rcheck_result_t res = {.cls = 1, .status = 0, .ms = 5000};
    snprintf(res.detail, sizeof(res.detail), "connect: connection refused");
    seen.done(seen.done_arg, &res);
}

static int local(void *arg, const char *remote, uint64_t id, const char *topic,
                 tn_rcheck_done_cb done, void *done_arg)
{
    assert_ptr_equal(arg, &seen);
    seen.calls++;
    snprintf(seen.remote, sizeof(seen.remote), "%s", remote);
    seen.id = id;
    snprintf(seen.topic, sizeof(seen.topic), "%s", topic);
    if (strcmp(remote, "gone") == 0)
        return TN_ENOTFOUND;
    if (strcmp(remote, "closing") == 0)
        return TN_ECLOSED;
    if (strcmp(remote, "late") == 0) {
        seen.done = done;
        seen.done_arg = done_arg;
        uv_timer_start(&seen.timer, on_late, 20, 0);
        return 0;
    }
    tn_rcheck_result_t res = {.cls = 0, .status = 400, .ms = 12};
    if (strcmp(remote, "auth") == 0) {
        res.cls = 3;
        res.status = 401;
        snprintf(res.detail, sizeof(res.detail), "answered 401");
    }
    done(done_arg, &res);
    return 0;
}

/* --- the fixture --------------------------------------------------------------------- */

/* The owner (the member) serves REMOTE_CHECK. */
typedef tu_srv_fx_t cfx_t;

static cfx_t *cfx_new(bool hook)
{
    cfx_t *f = tu_srv_fx_new();
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(uv_timer_init(&f->loop, &seen.timer), 0);
    tn_srv_t *srv = NULL;
    assert_int_equal(tn_rcheck_srv_new(&srv), 0);
    if (hook)
        tn_rcheck_srv_set_hook(srv, local, &seen);
    /* It waits on the remote: outside the bounds. */
    tu_srv_fx_serve(f, srv, TN_OP_REMOTE_CHECK, TN_RPC_OP_EXEMPT);
    return f;
}

static void cfx_free(cfx_t *f)
{
    tu_srv_fx_free(f, (uv_handle_t *)&seen.timer);
}

typedef struct {
    tn_rcheck_call_t c;
    bool done;
    int status;
} callw_t;

static void on_call(tn_rcheck_call_t *c, int status)
{
    callw_t *w = (callw_t *)c;
    w->done = true;
    w->status = status;
}

static int check(cfx_t *f, const char *peer, const char *remote, uint64_t id, const char *topic,
                 callw_t *w)
{
    memset(w, 0, sizeof(*w));
    int rc = tn_rcheck_call(f->rpc.caller, peer, remote, id, topic, 2000, &w->c, on_call);
    if (rc != 0)
        return rc;
    tu_run_until(&f->loop, &w->done);
    return w->status;
}

/* --- the codecs ---------------------------------------------------------------------- */

static void test_request_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_wire_rcheck_t w;
    char err[256];
    char longest_remote[65], longest_topic[256];
    memset(longest_remote, 'r', 64);
    longest_remote[64] = '\0';
    memset(longest_topic, 't', 255);
    longest_topic[255] = '\0';
    const char *remotes[] = {"e", "eu-west.1", longest_remote};
    const char *topics[] = {"", "orders#ephemeral", longest_topic};
    const uint64_t ids[] = {0, 0x9f1c2e0a4b7d3e11ull, UINT64_MAX};
    for (size_t i = 0; i < TN_ARRAY_SIZE(remotes); i++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_rcheck_encode(&b, remotes[i], ids[i], topics[i]), 0);
        assert_int_equal(tn_buf_size(&b), 4 + strlen(remotes[i]) + 8 + 4 + strlen(topics[i]));
        assert_int_equal(
            tn_wire_rcheck_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)), 0);
        assert_string_equal(w.remote, remotes[i]);
        assert_true(w.remote_id == ids[i]);
        assert_string_equal(w.topic, topics[i]);
        /* The RPC server's shape check takes it, with its opcode. */
        tn_buf_t req;
        tn_buf_init(&req);
        assert_int_equal(tn_wire_put_u8(&req, TN_OP_REMOTE_CHECK), 0);
        assert_int_equal(tn_buf_append(&req, tn_buf_data(&b), tn_buf_size(&b)), 0);
        assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req)), 0);
        tn_buf_fini(&req);
    }
    assert_string_equal(tn_wire_op_name(TN_OP_REMOTE_CHECK), "remote_check");
    assert_int_equal(tn_wire_op_lane(TN_OP_REMOTE_CHECK), TN_LANE_CONTROL);

    /* The encoder's refusals leave b as it was. */
    tn_buf_reset(&b);
    char over_remote[66], over_topic[257];
    memset(over_remote, 'o', 65);
    over_remote[65] = '\0';
    memset(over_topic, 'o', 256);
    over_topic[256] = '\0';
    assert_int_equal(tn_wire_rcheck_encode(&b, "", 1, "t"), UV_EINVAL);
    assert_int_equal(tn_wire_rcheck_encode(&b, over_remote, 1, "t"), UV_EINVAL);
    assert_int_equal(tn_wire_rcheck_encode(&b, "eu", 1, over_topic), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);

    /* The decoder's refusals, each with its sentence. */
    struct {
        const char *what;
        const char *remote;
        size_t rlen;
        const char *topic;
        size_t tlen;
        int cut;
        int extra;
        const char *says;
    } bad[] = {
        {"an empty remote", "", 0, "t", 1, 0, 0, "the remote"},
        {"a remote over 64 bytes", over_remote, 65, "t", 1, 0, 0, "the remote"},
        {"a NUL in the remote", "e\0u", 3, "t", 1, 0, 0, "the remote"},
        {"a topic over 255 bytes", "eu", 2, over_topic, 256, 0, 0, "the topic"},
        {"a NUL in the topic", "eu", 2, "t\0u", 3, 0, 0, "the topic"},
        {"a cut topic", "eu", 2, "topic", 5, 2, 0, "the topic"},
        {"a trailing byte", "eu", 2, "t", 1, 0, 1, "1 bytes after the topic"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_put_bytes(&b, bad[i].remote, bad[i].rlen), 0);
        assert_int_equal(tn_wire_put_u64(&b, 7), 0);
        assert_int_equal(tn_wire_put_bytes(&b, bad[i].topic, bad[i].tlen), 0);
        b.len -= (size_t)bad[i].cut;
        if (bad[i].extra)
            assert_int_equal(tn_buf_append(&b, "", 1), 0);
        err[0] = '\0';
        int rc = tn_wire_rcheck_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err));
        if (rc != TN_EPROTO || strstr(err, bad[i].says) == NULL)
            fail_msg("%s: %d %s", bad[i].what, rc, err);
    }
    /* A cut id. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, "eu"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 7), 0);
    assert_int_equal(tn_wire_rcheck_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "the remote id"));
    tn_buf_fini(&b);
}

static void test_result_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_rcheck_result_t in = {.cls = 2, .status = 0, .ms = 10001}, out;
    snprintf(in.detail, sizeof(in.detail), "TLS: certificate verify failed");
    assert_int_equal(tn_rcheck_result_encode(&b, &in), 0);
    assert_int_equal(tn_rcheck_result_decode(tn_buf_data(&b), tn_buf_size(&b), &out), 0);
    assert_int_equal(out.cls, 2);
    assert_int_equal(out.status, 0);
    assert_int_equal(out.ms, 10001);
    assert_string_equal(out.detail, "TLS: certificate verify failed");
    /* ok with a status and no detail; the longest detail. */
    tn_rcheck_result_t ok = {.cls = 0, .status = 400, .ms = 3};
    tn_buf_reset(&b);
    assert_int_equal(tn_rcheck_result_encode(&b, &ok), 0);
    assert_int_equal(tn_rcheck_result_decode(tn_buf_data(&b), tn_buf_size(&b), &out), 0);
    assert_int_equal(out.status, 400);
    assert_string_equal(out.detail, "");
    memset(in.detail, 'd', TN_RCHECK_DETAIL_MAX);
    in.detail[TN_RCHECK_DETAIL_MAX] = '\0';
    tn_buf_reset(&b);
    assert_int_equal(tn_rcheck_result_encode(&b, &in), 0);
    assert_int_equal(tn_rcheck_result_decode(tn_buf_data(&b), tn_buf_size(&b), &out), 0);
    assert_int_equal(strlen(out.detail), TN_RCHECK_DETAIL_MAX);
    /* The encoder refuses what the decoder would. */
    tn_buf_reset(&b);
    tn_rcheck_result_t bad = {.cls = TN_RCHECK_NCLASSES};
    assert_int_equal(tn_rcheck_result_encode(&b, &bad), UV_EINVAL);
    bad.cls = 0;
    bad.status = 99;
    assert_int_equal(tn_rcheck_result_encode(&b, &bad), UV_EINVAL);
    bad.status = 600;
    assert_int_equal(tn_rcheck_result_encode(&b, &bad), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    /* Hand-written bodies: a class out of range, a status out of range, a
     * trailing byte, a cut detail. */
    struct {
        uint8_t cls;
        uint16_t status;
        int cut, extra;
    } raw[] = {{8, 0, 0, 0},   {255, 0, 0, 0}, {0, 42, 0, 0},
               {0, 600, 0, 0}, {0, 0, 0, 1},   {0, 0, 1, 0}};
    for (size_t i = 0; i < TN_ARRAY_SIZE(raw); i++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_put_u8(&b, raw[i].cls), 0);
        assert_int_equal(tn_wire_put_u16(&b, raw[i].status), 0);
        assert_int_equal(tn_wire_put_u32(&b, 1), 0);
        assert_int_equal(tn_wire_put_str(&b, "x"), 0);
        b.len -= (size_t)raw[i].cut;
        if (raw[i].extra)
            assert_int_equal(tn_buf_append(&b, "", 1), 0);
        if (tn_rcheck_result_decode(tn_buf_data(&b), tn_buf_size(&b), &out) != TN_EPROTO)
            fail_msg("raw body %zu decoded", i);
        assert_int_equal(out.cls, 0); /* nothing half-decoded */
    }
    tn_buf_fini(&b);
}

static void test_reply_decode(void **state)
{
    (void)state;
    tn_rcheck_call_t c;
    memset(&c, 0, sizeof(c));
    tn_buf_t b;
    tn_buf_init(&b);
    tn_rcheck_result_t res = {.cls = 6, .status = 302, .ms = 40};
    snprintf(res.detail, sizeof(res.detail), "answered 302 (redirects are not followed)");
    assert_int_equal(tn_rcheck_result_encode(&b, &res), 0);
    assert_int_equal(
        tn_rcheck_reply_decode(200, (const uint8_t *)tn_buf_data(&b), tn_buf_size(&b), &c), 0);
    assert_int_equal(c.http_status, 200);
    assert_int_equal(c.result.cls, 6);
    assert_int_equal(c.result.status, 302);
    assert_string_equal(c.error, "");
    /* A 200 that is not a result. */
    assert_int_equal(tn_rcheck_reply_decode(200, (const uint8_t *)"{}", 2, &c), TN_EPROTO);
    assert_non_null(strstr(c.error, "malformed remote_check answer"));
    const char gone[] = "{\"error\":\"remote eu is not in this node's metastore replica\"}";
    assert_int_equal(tn_rcheck_reply_decode(404, (const uint8_t *)gone, sizeof(gone) - 1, &c),
                     TN_ENOTFOUND);
    assert_non_null(strstr(c.error, "remote eu is not"));
    assert_int_equal(tn_rcheck_reply_decode(503, (const uint8_t *)gone, sizeof(gone) - 1, &c),
                     UV_EAGAIN);
    assert_int_equal(tn_rcheck_reply_decode(400, (const uint8_t *)gone, sizeof(gone) - 1, &c),
                     UV_EINVAL);
    assert_int_equal(tn_rcheck_reply_decode(503, (const uint8_t *)"{\"error\":\"\"}", 12, &c),
                     UV_EAGAIN);
    assert_string_equal(c.error, "a 503 remote_check answer with an empty error");
    assert_int_equal(tn_rcheck_reply_decode(500, (const uint8_t *)gone, sizeof(gone) - 1, &c),
                     TN_EPROTO);
    assert_non_null(strstr(c.error, "unexpected 500"));
    assert_int_equal(tn_rcheck_reply_decode(503, (const uint8_t *)"[1]", 3, &c), TN_EPROTO);
    assert_non_null(strstr(c.error, "without an error"));
    assert_int_equal(tn_rcheck_reply_decode(503, (const uint8_t *)"{\"e\0", 4, &c), TN_EPROTO);
    assert_int_equal(tn_rcheck_reply_decode(404, NULL, 0, &c), TN_EPROTO);
    tn_buf_fini(&b);
}

/* --- the handler ------------------------------------------------------------------------ */

static void test_statuses(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(true);
    callw_t w;
    /* ok at once, with the request's fields. */
    assert_int_equal(check(f, f->rpc.addr, "eu", 0x1234, "orders", &w), 0);
    assert_int_equal(w.c.http_status, 200);
    assert_int_equal(w.c.result.cls, 0);
    assert_int_equal(w.c.result.status, 400);
    assert_int_equal(w.c.result.ms, 12);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.remote, "eu");
    assert_true(seen.id == 0x1234);
    assert_string_equal(seen.topic, "orders");
    /* No topic. */
    assert_int_equal(check(f, f->rpc.addr, "eu", 1, "", &w), 0);
    assert_string_equal(seen.topic, "");
    /* A failure is a result, not an error of the call. */
    assert_int_equal(check(f, f->rpc.addr, "auth", 1, "t", &w), 0);
    assert_int_equal(w.c.result.cls, 3);
    assert_int_equal(w.c.result.status, 401);
    assert_string_equal(w.c.result.detail, "answered 401");
    /* Later: the answer waits for it. */
    assert_int_equal(check(f, f->rpc.addr, "late", 1, "t", &w), 0);
    assert_int_equal(w.c.result.cls, 1);
    assert_int_equal(w.c.result.ms, 5000);
    assert_string_equal(w.c.result.detail, "connect: connection refused");
    /* Not here: 404 naming the remote. */
    assert_int_equal(check(f, f->rpc.addr, "gone", 1, "t", &w), TN_ENOTFOUND);
    assert_int_equal(w.c.http_status, 404);
    assert_non_null(strstr(w.c.error, "remote gone is not in this node's metastore replica"));
    /* Shutting down: 503. */
    assert_int_equal(check(f, f->rpc.addr, "closing", 1, "t", &w), UV_EAGAIN);
    assert_non_null(strstr(w.c.error, "shutting down"));
    assert_int_equal(seen.calls, 6);
    cfx_free(f);
}

static void test_not_ready_503(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(false);
    callw_t w;
    assert_int_equal(check(f, f->rpc.addr, "eu", 1, "", &w), UV_EAGAIN);
    assert_non_null(strstr(w.c.error, "not ready"));
    assert_int_equal(seen.calls, 0);
    tn_rcheck_srv_set_hook(f->srv, local, &seen);
    assert_int_equal(check(f, f->rpc.addr, "eu", 1, "", &w), 0);
    assert_int_equal(seen.calls, 1);
    cfx_free(f);
}

static void test_refused_400(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(true);
    tn_buf_t b;
    tn_buf_init(&b);
    tu_rpc_raw_t w;
    /* A cut request: the RPC server's shape check answers it. */
    assert_int_equal(tn_wire_rcheck_encode(&b, "eu", 1, "t"), 0);
    b.len--;
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_REMOTE_CHECK, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    /* An empty remote, written by hand. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, ""), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_REMOTE_CHECK, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    assert_int_equal(seen.calls, 0);
    tn_buf_fini(&b);
    cfx_free(f);
}

static void test_call_errors(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(true);
    callw_t w;
    assert_int_equal(tn_rcheck_call(f->rpc.caller, f->rpc.addr, "", 1, "", 2000, &w.c, on_call),
                     UV_EINVAL);
    assert_int_equal(
        tn_rcheck_call(f->rpc.caller, "not an address", "eu", 1, "", 2000, &w.c, on_call),
        UV_EINVAL);
    uv_udp_t sock;
    char dead[64];
    tu_dead_peer(&f->loop, &sock, dead, sizeof(dead));
    int rc = check(f, dead, "eu", 1, "", &w);
    assert_true(rc == UV_ETIMEDOUT || rc == UV_ECONNREFUSED || rc == UV_ECONNRESET);
    assert_int_equal(w.c.http_status, 0);
    assert_true(w.c.error[0] != '\0');
    assert_int_equal(seen.calls, 0);
    uv_close((uv_handle_t *)&sock, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    cfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_codec), cmocka_unit_test(test_result_codec),
        cmocka_unit_test(test_reply_decode),  cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_not_ready_503), cmocka_unit_test(test_refused_400),
        cmocka_unit_test(test_call_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
