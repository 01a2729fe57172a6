/* PERRS over node RPC (cluster/perrs.h): a caller endpoint and an owner
 * endpoint on one loop over loopback. The owner either answers as a node
 * with no replica manager does (tn_perrs_answer with none: every
 * partition without errors), or sends a scripted 200 body, or serves
 * nothing (a node of an earlier release: 400 for the unknown opcode).
 * Covers the caller's two-pass decode into its own array of errors, in
 * the order asked; a body it must refuse (TN_EPROTO, nothing kept);
 * malformed requests and a bad topic name (400); an older node
 * (UV_EINVAL); a peer that is not there; and the caller's own refusals.
 * The errors a real leader holds are covered end to end
 * (tests/cluster/test_move_stall.py). Every test checks that
 * uv_loop_close returns 0. */
#include "core/platform.h"

#include "cluster/perrs.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"

#include "fixture_rpc.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAXP 8

/* --- the owner's answers -------------------------------------------------------------- */

/* As a node with no replica manager answers. */
static void on_none(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    (void)arg;
    tn_perrs_answer(NULL, req, payload, len);
}

/* A scripted 200 body (arg: a tn_buf_t). */
static void on_scripted(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    (void)payload;
    (void)len;
    const tn_buf_t *body = arg;
    tn_rpc_reply(req, 200, "application/octet-stream", tn_buf_data(body), tn_buf_size(body));
}

typedef struct {
    uv_loop_t loop;
    tu_rpc_pair_t rpc;
    tn_buf_t body; /* the scripted answer */
} pfx_t;

/* An owner serving PERRS with cb (NULL: nothing, an older node). */
static pfx_t *pfx_new(tn_rpc_handler_cb cb)
{
    pfx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    tn_buf_init(&f->body);
    tn_rpc_handler_t h = {TN_OP_PERRS, 0, cb, &f->body};
    tu_rpc_pair_open(&f->rpc, &f->loop, &h, cb != NULL ? 1 : 0);
    return f;
}

static void pfx_free(pfx_t *f)
{
    tu_rpc_pair_close(&f->rpc, &f->loop);
    tn_buf_fini(&f->body);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
}

/* --- calls ---------------------------------------------------------------------------- */

typedef struct {
    tn_perrs_call_t c;
    uint8_t counts[MAXP];
    bool done;
    int status;
} callw_t;

static void on_call(tn_perrs_call_t *c, int status)
{
    callw_t *w = c->data;
    assert_false(w->done); /* exactly once */
    w->done = true;
    w->status = status;
    if (status != 0)
        assert_null(c->errs); /* nothing kept from a failed call */
}

static int call(pfx_t *f, callw_t *w, const char *addr, const char *name, const uint32_t *parts,
                uint32_t n, uint64_t timeout_ms)
{
    memset(w, 0, sizeof(*w));
    w->c.data = w;
    int rc =
        tn_perrs_call(f->rpc.caller, addr, name, parts, n, w->counts, timeout_ms, &w->c, on_call);
    if (rc != 0)
        return rc;
    tu_run_until(&f->loop, &w->done);
    return w->status;
}

/* --- tests ------------------------------------------------------------------------------ */

/* A node with no replica manager (or not leading, or holding none):
 * every partition asked, in order, with no errors. */
static void test_none(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(on_none);
    static const uint32_t parts[] = {2, 1, 0, 2};
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "orders", parts, 4, 20000), 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(w.counts[i], 0);
    assert_int_equal(w.c.nerrs, 0);
    assert_null(w.c.errs);
    pfx_free(f);
}

/* Errors in the owner's answer reach the caller in one array, partition
 * after partition; a body that does not answer what was asked is
 * TN_EPROTO. */
static void test_errors_and_bad_body(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(on_scripted);
    static const uint32_t parts[] = {4, 0, 9};
    tn_wire_perr_t e4[2] = {{2, "no space left on device"}, {3, "i/o error"}};
    tn_wire_perr_t e9 = {5, "file too large"};
    assert_int_equal(tn_wire_perrs_reply_start(&f->body, 3), 0);
    assert_int_equal(tn_wire_perrs_reply_part(&f->body, 4, e4, 2), 0);
    assert_int_equal(tn_wire_perrs_reply_part(&f->body, 0, NULL, 0), 0);
    assert_int_equal(tn_wire_perrs_reply_part(&f->body, 9, &e9, 1), 0);
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "orders", parts, 3, 20000), 0);
    assert_int_equal(w.counts[0], 2);
    assert_int_equal(w.counts[1], 0);
    assert_int_equal(w.counts[2], 1);
    assert_int_equal(w.c.nerrs, 3);
    assert_non_null(w.c.errs);
    assert_int_equal(w.c.errs[0].node, 2);
    assert_string_equal(w.c.errs[0].text, "no space left on device");
    assert_int_equal(w.c.errs[1].node, 3);
    assert_string_equal(w.c.errs[1].text, "i/o error");
    assert_int_equal(w.c.errs[2].node, 5);
    assert_string_equal(w.c.errs[2].text, "file too large");
    tn_free(w.c.errs);

    /* Asked for other partitions, the same body is refused. */
    static const uint32_t other[] = {4, 0, 8};
    assert_int_equal(call(f, &w, f->rpc.addr, "orders", other, 3, 20000), TN_EPROTO);
    /* A cut body too. */
    f->body.len--;
    assert_int_equal(call(f, &w, f->rpc.addr, "orders", parts, 3, 20000), TN_EPROTO);
    pfx_free(f);
}

/* Malformed requests and a name no topic can have are 400, and the caller
 * sees UV_EINVAL. */
static void test_malformed_400(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(on_none);
    tn_buf_t b;
    tn_buf_init(&b);
    tu_rpc_raw_t r;
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, &f->loop, TN_OP_PERRS, &b, 20000, &r), 400);
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 3), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, &f->loop, TN_OP_PERRS, &b, 20000, &r), 400);
    static const uint32_t one = 0;
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_pstats_encode(&b, "a/b", &one, 1), 0);
    assert_int_equal(tu_rpc_raw(&f->rpc, &f->loop, TN_OP_PERRS, &b, 20000, &r), 400);
    assert_non_null(strstr(r.body, "invalid topic name"));
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "a/b", &one, 1, 20000), UV_EINVAL);
    tn_buf_fini(&b);
    pfx_free(f);
}

/* A node of an earlier release serves no PERRS: 400, UV_EINVAL here. */
static void test_older_node(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(NULL);
    static const uint32_t parts[] = {0, 1};
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "orders", parts, 2, 20000), UV_EINVAL);
    pfx_free(f);
}

/* The caller's own refusals (cb never runs), and a peer nobody answers
 * on: the call's error, within its timeout. */
static void test_call_errors(void **state)
{
    (void)state;
    pfx_t *f = pfx_new(on_none);
    static const uint32_t one = 0;
    callw_t w;
    assert_int_equal(call(f, &w, f->rpc.addr, "", &one, 1, 1000), UV_EINVAL);
    assert_false(w.done);
    assert_int_equal(call(f, &w, f->rpc.addr, "t", &one, 0, 1000), UV_EINVAL);
    assert_false(w.done);
    assert_int_equal(call(f, &w, "not-an-address", "t", &one, 1, 1000), UV_EINVAL);
    assert_false(w.done);
    uv_udp_t sock;
    char addr[64];
    tu_dead_peer(&f->loop, &sock, addr, sizeof(addr));
    int rc = call(f, &w, addr, "t", &one, 1, 1500);
    assert_true(rc == UV_ETIMEDOUT || rc == UV_ECONNREFUSED || rc == UV_ECONNRESET);
    uv_close((uv_handle_t *)&sock, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    pfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none),          cmocka_unit_test(test_errors_and_bad_body),
        cmocka_unit_test(test_malformed_400), cmocka_unit_test(test_older_node),
        cmocka_unit_test(test_call_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
