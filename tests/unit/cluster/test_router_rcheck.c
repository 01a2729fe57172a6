/* The router's remote check on every member (cluster/router.h,
 * tn_router_rcheck) through real node RPC: member 1 is an endpoint serving
 * REMOTE_CHECK over a scripted local check, recorded in a lone metastore
 * replica (libraft on loopback); the router plays node 2 with its own
 * scripted local check, on one loop. Covers one row per member asked,
 * sorted by node, each with its member's result and the request's fields
 * reaching both; a member marked dead not asked (no row); a member nobody
 * answers for, or one without an address, shown as member_error with the
 * class unreachable and a sentence; a member answering 404 (no such
 * remote there) the same; this node without a local hook the same; and
 * the router without node RPC asking only itself. Every test checks that
 * uv_loop_close returns 0. */
#include "core/platform.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include "cluster/rcheck.h"
#include "cluster/router.h"
#include "cluster/rpc.h"
#include "core/err.h"
#include "meta/meta.h"
#include "queue/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the scripted local checks ------------------------------------------------------ */

/* A node's local side: its class for every check, or TN_ENOTFOUND for
 * remote "gone"; what it was asked. */
typedef struct {
    uint8_t cls;
    uint16_t status;
    unsigned calls;
    char remote[65];
    uint64_t id;
    char topic[256];
} side_t;

static side_t member1, self2;

static int local(void *arg, const char *remote, uint64_t id, const char *topic,
                 tn_rcheck_done_cb done, void *done_arg)
{
    side_t *s = arg;
    s->calls++;
    snprintf(s->remote, sizeof(s->remote), "%s", remote);
    s->id = id;
    snprintf(s->topic, sizeof(s->topic), "%s", topic);
    if (strcmp(remote, "gone") == 0)
        return TN_ENOTFOUND;
    tn_rcheck_result_t res = {.cls = s->cls, .status = s->status, .ms = 7};
    if (s->cls != 0)
        snprintf(res.detail, sizeof(res.detail), "answered %u", s->status);
    done(done_arg, &res);
    return 0;
}

/* --- the fixture --------------------------------------------------------------------- */

typedef struct {
    tu_fx_t *fx;
    uv_loop_t *loop;
    tn_broker_t *b;
    tn_meta_t *m;
    tn_srv_t *srv;
    tu_rpc_pair_t rpc;   /* member 1 serves REMOTE_CHECK */
    tn_router_t *router; /* node 2's, over rpc.caller */
} cfx_t;

static void put_member(cfx_t *f, const char *api_addr)
{
    tn_meta_cmd_t c = tu_meta_member_cmd(1, api_addr);
    tu_meta_commit(f->loop, f->m, &c);
}

static void member_status(cfx_t *f, uint8_t status)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_STATUS;
    c.member.id = 1;
    c.member.status = status;
    c.member.heartbeat_ms = tn_meta_member_find(tn_meta_state(f->m), 1)->heartbeat_ms;
    tu_meta_commit(f->loop, f->m, &c);
}

static cfx_t *cfx_new(void)
{
    cfx_t *f = calloc(1, sizeof(*f));
    memset(&member1, 0, sizeof(member1));
    memset(&self2, 0, sizeof(self2));
    f->fx = tu_fx_new(NULL);
    f->loop = &f->fx->loop;
    tn_broker_opts_t o;
    tu_broker_opts(&o);
    assert_int_equal(tn_broker_open(f->loop, f->fx->store, &o, &f->b), 0);
    assert_int_equal(tn_rcheck_srv_new(&f->srv), 0);
    tn_rcheck_srv_set_hook(f->srv, local, &member1);
    tu_srv_pair_open(&f->rpc, f->loop, f->srv, TN_OP_REMOTE_CHECK, TN_RPC_OP_EXEMPT);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/meta", f->fx->dir);
    f->m = tu_meta_lone(f->loop, dir, f->rpc.addr);
    tn_router_opts_t ro = {f->b, f->m, NULL, NULL, NULL};
    assert_int_equal(tn_router_new(&ro, &f->router), 0);
    tn_router_set_rpc(f->router, f->rpc.caller, 2, true);
    tn_router_on_rcheck(f->router, local, &self2);
    return f;
}

static void cfx_free(cfx_t *f)
{
    tu_srv_pair_close(&f->rpc, f->loop, f->srv);
    tn_broker_set_publisher(f->b, NULL, NULL); /* the engine outlives the router */
    tn_router_free(f->router);
    tu_broker_close(f->loop, f->b);
    tu_meta_close(f->loop, f->m);
    tu_fx_free(f->fx);
    free(f);
}

typedef struct {
    tn_router_rcheck_row_t rows[4];
    uint32_t n;
    unsigned calls;
    bool done;
} table_t;

static void on_table(void *arg, const tn_router_rcheck_row_t *rows, uint32_t n)
{
    table_t *t = arg;
    assert_true(n <= 4);
    memcpy(t->rows, rows, n * sizeof(*rows));
    t->n = n;
    t->calls++;
    t->done = true;
}

static table_t *check(cfx_t *f, const char *remote, const char *topic)
{
    static table_t t;
    memset(&t, 0, sizeof(t));
    assert_int_equal(tn_router_rcheck(f->router, remote, 0x77, topic, on_table, &t), 0);
    assert_true(tu_run_loop(f->loop, tu_is_true, &t.done));
    assert_int_equal(t.calls, 1);
    return &t;
}

/* --- tests ------------------------------------------------------------------------------ */

/* Both members asked, the rows sorted by node, each its own result; the
 * request's fields reach both. */
static void test_every_member(void **state)
{
    (void)state;
    cfx_t *f = cfx_new();
    member1.cls = 4; /* forbidden */
    member1.status = 403;
    table_t *t = check(f, "eu", "orders");
    assert_int_equal(t->n, 2);
    assert_int_equal(t->rows[0].node, 1);
    assert_int_equal(t->rows[1].node, 2);
    assert_false(t->rows[0].member_error);
    assert_int_equal(t->rows[0].res.cls, 4);
    assert_int_equal(t->rows[0].res.status, 403);
    assert_string_equal(t->rows[0].res.detail, "answered 403");
    assert_false(t->rows[1].member_error);
    assert_int_equal(t->rows[1].res.cls, 0);
    assert_int_equal(member1.calls, 1);
    assert_int_equal(self2.calls, 1);
    assert_string_equal(member1.remote, "eu");
    assert_true(member1.id == 0x77);
    assert_string_equal(member1.topic, "orders");
    assert_string_equal(self2.topic, "orders");
    /* No topic. */
    t = check(f, "eu", "");
    assert_int_equal(t->n, 2);
    assert_string_equal(member1.topic, "");
    cfx_free(f);
}

/* A member marked dead is not asked: no row. */
static void test_dead_member_not_asked(void **state)
{
    (void)state;
    cfx_t *f = cfx_new();
    member_status(f, TN_MEMBER_DEAD);
    table_t *t = check(f, "eu", "t");
    assert_int_equal(t->n, 1);
    assert_int_equal(t->rows[0].node, 2);
    assert_int_equal(member1.calls, 0);
    cfx_free(f);
}

/* A member nobody answers for, one without an address, one without the
 * remote, and this node without a hook: each a member_error row, class
 * unreachable, with a sentence. */
static void test_member_errors(void **state)
{
    (void)state;
    cfx_t *f = cfx_new();
    /* 404 from member 1 ("gone" there), and here. */
    table_t *t = check(f, "gone", "t");
    assert_int_equal(t->n, 2);
    for (uint32_t i = 0; i < 2; i++) {
        assert_true(t->rows[i].member_error);
        assert_int_equal(t->rows[i].res.cls, 1);
        assert_int_equal(t->rows[i].res.status, 0);
    }
    assert_non_null(strstr(t->rows[0].error, "remote gone is not in this node's metastore"));
    assert_non_null(strstr(t->rows[1].error, "not in this node's metastore replica"));
    /* No local hook here. */
    tn_router_on_rcheck(f->router, NULL, NULL);
    t = check(f, "eu", "t");
    assert_false(t->rows[0].member_error);
    assert_true(t->rows[1].member_error);
    assert_non_null(strstr(t->rows[1].error, "cannot check remotes"));
    tn_router_on_rcheck(f->router, local, &self2);
    /* A peer nobody answers for. */
    uv_udp_t sock;
    char dead[64];
    tu_dead_peer(f->loop, &sock, dead, sizeof(dead));
    put_member(f, dead);
    t = check(f, "eu", "t");
    assert_int_equal(t->n, 2);
    assert_true(t->rows[0].member_error);
    assert_int_equal(t->rows[0].res.cls, 1);
    assert_true(t->rows[0].error[0] != '\0');
    assert_false(t->rows[1].member_error);
    uv_close((uv_handle_t *)&sock, NULL);
    /* No address recorded: no call. */
    put_member(f, "");
    t = check(f, "eu", "t");
    assert_true(t->rows[0].member_error);
    assert_string_equal(t->rows[0].error, "no address recorded");
    cfx_free(f);
}

/* Without node RPC: only this node. */
static void test_lone(void **state)
{
    (void)state;
    cfx_t *f = cfx_new();
    tn_router_set_rpc(f->router, NULL, 0, false);
    table_t *t = check(f, "eu", "t");
    assert_int_equal(t->n, 1);
    assert_int_equal(member1.calls, 0);
    assert_int_equal(self2.calls, 1);
    cfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_member),
        cmocka_unit_test(test_dead_member_not_asked),
        cmocka_unit_test(test_member_errors),
        cmocka_unit_test(test_lone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
