/* PURGE over node RPC (cluster/purge.h, the codec in cluster/wire.h): a
 * caller endpoint and a member endpoint on one loop over loopback, the
 * member's handler over a scripted local-purge hook. Covers the codec
 * (round trip, every refusal with its sentence), the reply decoder, the
 * handler's statuses (204 purged, now or later; 503 the replica did not
 * show the deletion, not ready, shutting down; 500 with the cause; 400
 * malformed or a bad name), the hook getting the request's fields and the
 * member's wait, and the caller's own refusals. Every test checks that
 * uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/purge.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/err.h"

#include "fixture_rpc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the scripted local side -------------------------------------------------------- */

/* By topic: "late" purges on the next loop pass; "lagging" times out
 * waiting for the replica; "broken" fails with a cause; "closing" is
 * refused at once (shutting down); anything else purges at once. */
typedef struct {
    unsigned calls;
    char topic[256];
    int64_t created_at_ms;
    uint64_t wait_ms;
    uv_timer_t timer; /* "late" */
    tn_purge_done_cb done;
    void *done_arg;
} seen_t;

static seen_t seen;

static void on_late(uv_timer_t *t)
{
    (void)t;
    seen.done(seen.done_arg, 0, NULL);
}

static int local(void *arg, const char *topic, int64_t created_at_ms, uint64_t wait_ms,
                 tn_purge_done_cb done, void *done_arg)
{
    assert_ptr_equal(arg, &seen);
    seen.calls++;
    snprintf(seen.topic, sizeof(seen.topic), "%s", topic);
    seen.created_at_ms = created_at_ms;
    seen.wait_ms = wait_ms;
    if (strcmp(topic, "closing") == 0)
        return TN_ECLOSED;
    if (strcmp(topic, "late") == 0) {
        seen.done = done;
        seen.done_arg = done_arg;
        uv_timer_start(&seen.timer, on_late, 20, 0);
    } else if (strcmp(topic, "lagging") == 0) {
        done(done_arg, UV_ETIMEDOUT, NULL);
    } else if (strcmp(topic, "broken") == 0) {
        done(done_arg, UV_EIO, "removing its partitions failed: i/o error");
    } else {
        done(done_arg, 0, NULL);
    }
    return 0;
}

/* --- the fixture --------------------------------------------------------------------- */

/* The owner (the member) serves PURGE. */
typedef tu_srv_fx_t pfx_t;

static pfx_t *pfx_new(bool hook)
{
    pfx_t *f = tu_srv_fx_new();
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(uv_timer_init(&f->loop, &seen.timer), 0);
    tn_srv_t *srv = NULL;
    assert_int_equal(tn_purge_srv_new(&srv), 0);
    if (hook)
        tn_purge_srv_set_hook(srv, local, &seen);
    tu_srv_fx_serve(f, srv, TN_OP_PURGE, TN_RPC_OP_EXEMPT); /* it waits: outside the bounds */
    return f;
}

static void pfx_free(pfx_t *f)
{
    tu_srv_fx_free(f, (uv_handle_t *)&seen.timer);
}

typedef struct {
    tn_purge_call_t c;
    bool done;
    int status;
} callw_t;

static void on_call(tn_purge_call_t *c, int status)
{
    callw_t *w = (callw_t *)c;
    w->done = true;
    w->status = status;
}

static int purge(pfx_t *f, const char *peer, const char *topic, int64_t created, callw_t *w)
{
    memset(w, 0, sizeof(*w));
    int rc = tn_purge_call(f->rpc.caller, peer, topic, created, 2000, &w->c, on_call);
    if (rc != 0)
        return rc;
    tu_run_until(&f->loop, &w->done);
    return w->status;
}

/* --- the codec ---------------------------------------------------------------------- */

static int decode(const tn_buf_t *b, tn_wire_purge_t *out, char *err, size_t errlen)
{
    err[0] = '\0';
    return tn_wire_purge_decode(tn_buf_data(b), tn_buf_size(b), out, err, errlen);
}

static void test_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_wire_purge_t w;
    char err[256];
    /* Round trips: the shortest and longest names, creation times 0 and
     * the largest. */
    char longest[256];
    memset(longest, 'n', 255);
    longest[255] = '\0';
    const char *names[] = {"t", "orders.v2-eu_1", longest};
    const int64_t times[] = {0, 1764590000000, INT64_MAX};
    for (size_t i = 0; i < TN_ARRAY_SIZE(names); i++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_purge_encode(&b, names[i], times[i]), 0);
        assert_int_equal(tn_buf_size(&b), 4 + strlen(names[i]) + 8);
        assert_int_equal(decode(&b, &w, err, sizeof(err)), 0);
        assert_string_equal(w.topic, names[i]);
        assert_true(w.created_at_ms == times[i]);
        /* The RPC server's shape check takes it, with its opcode. */
        tn_buf_t req;
        tn_buf_init(&req);
        assert_int_equal(tn_wire_put_u8(&req, TN_OP_PURGE), 0);
        assert_int_equal(tn_buf_append(&req, tn_buf_data(&b), tn_buf_size(&b)), 0);
        assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req)), 0);
        tn_buf_fini(&req);
    }

    /* The encoder's refusals leave b as it was. */
    tn_buf_reset(&b);
    char over[258];
    memset(over, 'o', 256);
    over[256] = '\0';
    assert_int_equal(tn_wire_purge_encode(&b, "", 1), UV_EINVAL);
    assert_int_equal(tn_wire_purge_encode(&b, over, 1), UV_EINVAL);
    assert_int_equal(tn_wire_purge_encode(&b, "t", -1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);

    /* The decoder's refusals, each with its sentence. */
    struct {
        const char *what;
        const char *topic;
        size_t topic_len;
        int64_t created;
        int cut;   /* bytes cut off the end */
        int extra; /* bytes added */
        const char *says;
    } bad[] = {
        {"empty name", "", 0, 1, 0, 0, "the topic"},
        {"a name over 255 bytes", over, 256, 1, 0, 0, "the topic"},
        {"a NUL in the name", "t\0u", 3, 1, 0, 0, "the topic"},
        {"a negative creation time", "t", 1, -1, 0, 0, "is negative"},
        {"a short creation time", "t", 1, 1, 3, 0, "created_at_ms"},
        {"a trailing byte", "t", 1, 1, 0, 1, "1 bytes after created_at_ms"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_put_bytes(&b, bad[i].topic, bad[i].topic_len), 0);
        assert_int_equal(tn_wire_put_i64(&b, bad[i].created), 0);
        b.len -= (size_t)bad[i].cut;
        if (bad[i].extra)
            assert_int_equal(tn_buf_append(&b, "", 1), 0);
        int rc = decode(&b, &w, err, sizeof(err));
        if (rc != TN_EPROTO || strstr(err, bad[i].says) == NULL)
            fail_msg("%s: %d %s", bad[i].what, rc, err);
    }
    /* Nothing at all. */
    tn_buf_reset(&b);
    assert_int_equal(decode(&b, &w, err, sizeof(err)), TN_EPROTO);
    assert_non_null(strstr(err, "malformed purge request"));
    tn_buf_fini(&b);
}

static void test_reply_decode(void **state)
{
    (void)state;
    tn_purge_call_t c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(tn_purge_reply_decode(204, NULL, 0, &c), 0);
    assert_int_equal(c.http_status, 204);
    assert_string_equal(c.error, "");
    const char busy[] = "{\"error\":\"the replica lags\"}";
    assert_int_equal(tn_purge_reply_decode(503, (const uint8_t *)busy, sizeof(busy) - 1, &c),
                     UV_EAGAIN);
    assert_string_equal(c.error, "the replica lags");
    const char failed[] = "{\"error\":\"deleting topic t here failed: \\\"disk\\\"\"}";
    assert_int_equal(tn_purge_reply_decode(500, (const uint8_t *)failed, sizeof(failed) - 1, &c),
                     UV_EIO);
    assert_string_equal(c.error, "deleting topic t here failed: \"disk\"");
    assert_int_equal(tn_purge_reply_decode(400, (const uint8_t *)busy, sizeof(busy) - 1, &c),
                     UV_EINVAL);
    /* An empty sentence still gets one. */
    assert_int_equal(tn_purge_reply_decode(500, (const uint8_t *)"{\"error\":\"\"}", 12, &c),
                     UV_EIO);
    assert_string_equal(c.error, "a 500 purge reply with an empty error");
    /* Answers a member never gives, and bodies that are not an error. */
    assert_int_equal(tn_purge_reply_decode(200, (const uint8_t *)busy, sizeof(busy) - 1, &c),
                     TN_EPROTO);
    assert_non_null(strstr(c.error, "unexpected 200"));
    assert_int_equal(tn_purge_reply_decode(500, (const uint8_t *)"[1]", 3, &c), TN_EPROTO);
    assert_non_null(strstr(c.error, "without an error"));
    assert_int_equal(tn_purge_reply_decode(503, (const uint8_t *)"{\"error\":1}", 11, &c),
                     TN_EPROTO);
    assert_int_equal(tn_purge_reply_decode(503, (const uint8_t *)"{\"e\0", 4, &c), TN_EPROTO);
}

/* --- the handler ------------------------------------------------------------------------ */

static void test_statuses(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(true);
    callw_t w;
    /* Purged at once, with the request's fields and the member's wait. */
    assert_int_equal(purge(f, f->rpc.addr, "orders", 1764590000123, &w), 0);
    assert_int_equal(w.c.http_status, 204);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.topic, "orders");
    assert_true(seen.created_at_ms == 1764590000123);
    assert_int_equal(seen.wait_ms, TN_PURGE_WAIT_MS);
    /* Purged later: the answer waits for it. */
    assert_int_equal(purge(f, f->rpc.addr, "late", 7, &w), 0);
    assert_int_equal(w.c.http_status, 204);
    /* The replica did not show the deletion: 503, saying so. */
    assert_int_equal(purge(f, f->rpc.addr, "lagging", 7, &w), UV_EAGAIN);
    assert_int_equal(w.c.http_status, 503);
    assert_non_null(strstr(w.c.error, "still recorded topic lagging"));
    /* The deletion failed: 500 with its cause. */
    assert_int_equal(purge(f, f->rpc.addr, "broken", 7, &w), UV_EIO);
    assert_int_equal(w.c.http_status, 500);
    assert_non_null(strstr(w.c.error, "deleting topic broken here failed"));
    assert_non_null(strstr(w.c.error, "i/o error"));
    /* Shutting down: 503. */
    assert_int_equal(purge(f, f->rpc.addr, "closing", 7, &w), UV_EAGAIN);
    assert_non_null(strstr(w.c.error, "shutting down"));
    assert_int_equal(seen.calls, 5);
    pfx_free(f);
}

static void test_not_ready_503(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(false);
    callw_t w;
    assert_int_equal(purge(f, f->rpc.addr, "t", 1, &w), UV_EAGAIN);
    assert_non_null(strstr(w.c.error, "not ready"));
    assert_int_equal(seen.calls, 0);
    /* Once set, the same request purges. */
    tn_purge_srv_set_hook(f->srv, local, &seen);
    assert_int_equal(purge(f, f->rpc.addr, "t", 1, &w), 0);
    assert_int_equal(seen.calls, 1);
    pfx_free(f);
}

static void test_refused_400(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(true);
    tn_buf_t b;
    tn_buf_init(&b);
    tu_rpc_raw_t w;
    /* A cut request: the RPC server's shape check answers it. */
    assert_int_equal(tn_wire_purge_encode(&b, "t", 1), 0);
    b.len--;
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_PURGE, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    /* A negative creation time, written by hand. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_i64(&b, -1), 0);
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_PURGE, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    /* A name the wire takes but a topic cannot have. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_purge_encode(&b, "no spaces", 1), 0);
    tu_rpc_raw(&f->rpc, &f->loop, TN_OP_PURGE, &b, 2000, &w);
    assert_int_equal(w.http, 400);
    assert_non_null(strstr(w.body, "invalid topic name"));
    assert_int_equal(seen.calls, 0);
    tn_buf_fini(&b);
    pfx_free(f);
}

static void test_call_errors(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(true);
    callw_t w;
    /* The caller's own refusals: cb never runs. */
    assert_int_equal(tn_purge_call(f->rpc.caller, f->rpc.addr, "", 1, 2000, &w.c, on_call),
                     UV_EINVAL);
    assert_int_equal(tn_purge_call(f->rpc.caller, f->rpc.addr, "t", -1, 2000, &w.c, on_call),
                     UV_EINVAL);
    assert_int_equal(tn_purge_call(f->rpc.caller, "not an address", "t", 1, 2000, &w.c, on_call),
                     UV_EINVAL);
    /* A peer nobody serves: the call ends with a transport error and a
     * sentence, never 0. */
    uv_udp_t sock;
    char dead[64];
    tu_dead_peer(&f->loop, &sock, dead, sizeof(dead));
    int rc = purge(f, dead, "t", 1, &w);
    assert_true(rc == UV_ETIMEDOUT || rc == UV_ECONNREFUSED || rc == UV_ECONNRESET);
    assert_int_equal(w.c.http_status, 0);
    assert_true(w.c.error[0] != '\0');
    assert_int_equal(seen.calls, 0);
    uv_close((uv_handle_t *)&sock, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    pfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),       cmocka_unit_test(test_reply_decode),
        cmocka_unit_test(test_statuses),    cmocka_unit_test(test_not_ready_503),
        cmocka_unit_test(test_refused_400), cmocka_unit_test(test_call_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
