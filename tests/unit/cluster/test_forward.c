/* Forwarding a publish to a replicated partition's leader
 * (cluster/forward.h, and the router's use of it) through real node RPC:
 * a lone metastore replica (libraft on loopback) whose member 1 is the
 * leader endpoint, serving PRODUCE (cluster/produce.h) over its own
 * broker, and an accepting node 2 (its own broker, where every partition
 * is node 1's) on one loop. Covers: a first answer lost (the leader holds
 * the first copy past the attempt's timeout) and the retry with the same
 * seq, stored once and answered with the first copy's offset; retries
 * while the leader is not serving, then stored once; TN_EFEWREPLICAS
 * answered at once with no retry; the deadline (UV_ETIMEDOUT, nothing
 * stored); and the router forwarding an unpinned publish of a factor-3
 * topic while a factor-1 topic keeps its old answer. Every test checks
 * that uv_loop_close returns 0. */
#include "core/platform.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include "cluster/forward.h"
#include "cluster/produce.h"
#include "cluster/router.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/err.h"
#include "core/time.h"
#include "meta/meta.h"
#include "queue/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node 2's engine: every partition is node 1's. */
static bool place_remote(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    (void)arg;
    (void)t;
    (void)p;
    *owner = 1;
    return false;
}

typedef struct {
    tu_fx_t *fx;
    uv_loop_t *loop;
    tn_broker_t *leader_b; /* node 1's engine: every partition local */
    char *dir2;
    tn_store_t *store2;
    tn_broker_t *acc_b; /* node 2's engine */
    tn_meta_t *m;
    tn_produce_server_t *srv; /* node 1's PRODUCE */
    tu_rpc_pair_t rpc;        /* owner: node 1; caller: node 2 */
    tn_forward_t *fwd;        /* node 2's */
    /* The accepts hook's answers, in order; past the last, 0. */
    int answers[8];
    unsigned nanswers, asked;
    uint32_t epoch; /* the leader epoch the hook gives: the metastore's */
    /* Hold the first request this long before serving it (0: none). */
    uint64_t hold_first_ms;
    unsigned requests;
    uv_timer_t hold;
    tn_rpc_req_t *held;
    uint8_t held_payload[4096];
    size_t held_len;
    tn_rpc_handler_t real;
} ffx_t;

static ffx_t *cur;

static int accepts(void *arg, const char *topic, uint32_t p, uint32_t *epoch)
{
    (void)topic;
    (void)p;
    ffx_t *f = arg;
    *epoch = f->epoch;
    unsigned i = f->asked++;
    return i < f->nanswers ? f->answers[i] : 0;
}

static void on_hold(uv_timer_t *t)
{
    ffx_t *f = t->data;
    tn_rpc_req_t *req = f->held;
    f->held = NULL;
    f->real.fn(req, f->held_payload, f->held_len, f->real.arg);
}

static void on_request(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    (void)arg;
    ffx_t *f = cur;
    if (f->requests++ == 0 && f->hold_first_ms > 0) {
        assert_true(len <= sizeof(f->held_payload));
        memcpy(f->held_payload, payload, len);
        f->held_len = len;
        f->held = req;
        uv_timer_start(&f->hold, on_hold, f->hold_first_ms, 0);
        return;
    }
    f->real.fn(req, payload, len, f->real.arg);
}

static void put_topic(ffx_t *f, const char *name, uint32_t partitions, uint8_t factor)
{
    tn_meta_cmd_t c = tu_meta_topic_cmd(name, partitions);
    c.topic.replication_factor = factor;
    c.topic.min_insync = 1;
    tu_meta_commit(f->loop, f->m, &c);
    (void)tu_broker_topic(f->loop, f->leader_b, name, partitions);
    (void)tu_broker_topic(f->loop, f->acc_b, name, partitions);
}

static ffx_t *ffx_new(uint64_t timeout_ms, uint64_t attempt_ms)
{
    ffx_t *f = calloc(1, sizeof(*f));
    cur = f;
    f->fx = tu_fx_new(NULL);
    f->loop = &f->fx->loop;
    tn_broker_opts_t o;
    tu_broker_opts(&o);
    assert_int_equal(tn_broker_open(f->loop, f->fx->store, &o, &f->leader_b), 0);
    f->dir2 = tu_tempdir();
    tn_store_opts_t so;
    tu_store_opts(&so, f->dir2);
    f->store2 = tu_store_open(f->loop, &so);
    assert_int_equal(tn_broker_open(f->loop, f->store2, &o, &f->acc_b), 0);
    tn_broker_set_placement(f->acc_b, place_remote, NULL);

    tn_produce_server_opts_t po = {
        .loop = f->loop, .broker = f->leader_b, .accepts = accepts, .accepts_arg = f};
    assert_int_equal(tn_produce_server_new(&po, &f->srv), 0);
    size_t nh = 0;
    tn_produce_server_handlers(f->srv, &f->real, &nh);
    assert_int_equal(nh, 1);
    tn_rpc_handler_t h = f->real;
    h.fn = on_request;
    uv_timer_init(f->loop, &f->hold);
    f->hold.data = f;
    tu_rpc_pair_open(&f->rpc, f->loop, &h, 1);

    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/meta", f->fx->dir);
    f->m = tu_meta_lone(f->loop, dir, f->rpc.addr);
    put_topic(f, "orders", 2, 3);
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(f->m), "orders", 1);
    assert_non_null(ps);
    assert_int_equal(ps->leader, 1);
    assert_true(ps->leader_epoch > 0);
    f->epoch = ps->leader_epoch;

    tn_forward_opts_t fo = {.loop = f->loop,
                            .meta = f->m,
                            .produce = NULL,
                            .timeout_ms = timeout_ms,
                            .attempt_ms = attempt_ms};
    assert_int_equal(tn_forward_new(&fo, &f->fwd), 0);
    tn_forward_set_rpc(f->fwd, f->rpc.caller, 2);
    return f;
}

static bool srv_idle(void *arg)
{
    ffx_t *f = arg;
    tn_produce_stats_t st;
    tn_produce_server_stats(f->srv, &st);
    return st.inflight == 0 && f->held == NULL;
}

static void ffx_free(ffx_t *f)
{
    assert_true(tu_run_loop(f->loop, srv_idle, f));
    tn_forward_free(f->fwd);
    tu_rpc_pair_close(&f->rpc, f->loop);
    uv_close((uv_handle_t *)&f->hold, NULL);
    tn_produce_server_free(f->srv);
    tu_broker_close(f->loop, f->acc_b);
    tu_broker_close(f->loop, f->leader_b);
    tu_meta_close(f->loop, f->m);
    tu_store_close(f->loop, f->store2);
    tu_rmrf(f->dir2);
    free(f->dir2);
    tu_fx_free(f->fx);
    free(f);
    cur = NULL;
}

typedef struct {
    tn_pub_t p;
    bool done;
    int status;
    unsigned calls;
} pubw_t;

static void on_pub(tn_pub_t *p, int status)
{
    pubw_t *w = p->data;
    w->calls++;
    w->done = true;
    w->status = status;
}

static void pub_prepare(pubw_t *w, const char *tag, uint32_t n, bool pinned, uint32_t pin)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(tn_pub_init(&w->p, n), 0);
    for (uint32_t i = 0; i < n; i++) {
        char body[32];
        int len = snprintf(body, sizeof body, "%s-%u", tag, i);
        assert_int_equal(tn_pub_set(&w->p, i, body, (size_t)len), 0);
    }
    w->p.data = w;
    w->p.pinned = pinned;
    w->p.pin = pin;
}

static int forward(ffx_t *f, pubw_t *w)
{
    assert_int_equal(tn_forward_publish(f->fwd, "orders", w->p.pin, &w->p, on_pub), 0);
    assert_false(w->done); /* never inside the call */
    tu_run_until(f->loop, &w->done);
    assert_int_equal(w->calls, 1);
    return w->status;
}

static uint64_t written(ffx_t *f, uint32_t p)
{
    tn_topic_t *t = tu_broker_topic(f->loop, f->leader_b, "orders", 0);
    tn_plog_stats_t st;
    tn_plog_stats(t->parts[p]->plog, &st);
    return st.written_next;
}

/* The leader stores the first copy but its answer comes after the
 * attempt's 300 ms: the retry carries the same seq and is answered with
 * the same offset, and the batch is in the log once. */
static void test_lost_answer_stored_once(void **state)
{
    (void)state;
    ffx_t *f = ffx_new(10000, 300);
    f->hold_first_ms = 1000;
    pubw_t w;
    pub_prepare(&w, "a", 3, true, 1);
    assert_int_equal(forward(f, &w), 0);
    /* The PRODUCER record at 0, the batch from 1. */
    assert_int_equal(w.p.first_offset, 1);
    assert_int_equal(w.p.partition, 1);
    assert_false(w.p.remote);
    assert_true(tu_run_loop(f->loop, srv_idle, f)); /* the held first copy answered too */
    assert_int_equal(written(f, 1), 4);
    assert_int_equal(written(f, 0), 0);
    tn_produce_stats_t st;
    tn_produce_server_stats(f->srv, &st);
    assert_int_equal(st.produces, 1);
    assert_int_equal(st.duplicates, 1);
    tn_forward_stats_t fs;
    tn_forward_stats(f->fwd, &fs);
    assert_int_equal(fs.forwarded, 1);
    assert_int_equal(fs.ok, 1);
    assert_true(fs.retries >= 1);
    assert_int_equal(fs.inflight, 0);
    /* A second publish is a new batch (another seq): stored after. */
    pubw_t w2;
    pub_prepare(&w2, "b", 2, true, 1);
    assert_int_equal(forward(f, &w2), 0);
    assert_int_equal(w2.p.first_offset, 5);
    assert_int_equal(written(f, 1), 7);
    tn_pub_fini(&w.p);
    tn_pub_fini(&w2.p);
    ffx_free(f);
}

/* 503 not serving twice, then taken: three attempts, stored once. */
static void test_retries_until_serving(void **state)
{
    (void)state;
    ffx_t *f = ffx_new(10000, 2000);
    f->answers[0] = TN_ENOTSERVING;
    f->answers[1] = TN_ENOTSERVING;
    f->nanswers = 2;
    pubw_t w;
    pub_prepare(&w, "a", 2, true, 0);
    assert_int_equal(forward(f, &w), 0);
    assert_int_equal(w.p.first_offset, 1);
    assert_int_equal(f->asked, 3);
    assert_int_equal(written(f, 0), 3);
    tn_forward_stats_t fs;
    tn_forward_stats(f->fwd, &fs);
    assert_int_equal(fs.retries, 2);
    tn_pub_fini(&w.p);
    ffx_free(f);
}

/* A 421 (the callee does not lead it: a metastore replica that lags)
 * and a 409 (a stale epoch) are retried with the same seq: stored once. */
static void test_retries_after_not_leader_and_fenced(void **state)
{
    (void)state;
    ffx_t *f = ffx_new(10000, 2000);
    f->answers[0] = TN_EREMOTE;
    f->answers[1] = TN_EFENCED;
    f->nanswers = 2;
    pubw_t w;
    pub_prepare(&w, "a", 2, true, 1);
    assert_int_equal(forward(f, &w), 0);
    assert_int_equal(f->asked, 3);
    assert_int_equal(w.p.first_offset, 1);
    assert_int_equal(written(f, 1), 3);
    tn_produce_stats_t st;
    tn_produce_server_stats(f->srv, &st);
    assert_int_equal(st.produces, 1);
    assert_int_equal(st.refused, 2);
    tn_pub_fini(&w.p);
    ffx_free(f);
}

/* Not enough in-sync replicas: the door hears it at once, no retry. */
static void test_few_replicas_at_once(void **state)
{
    (void)state;
    ffx_t *f = ffx_new(10000, 2000);
    f->answers[0] = TN_EFEWREPLICAS;
    f->nanswers = 1;
    pubw_t w;
    pub_prepare(&w, "a", 1, true, 1);
    assert_int_equal(forward(f, &w), TN_EFEWREPLICAS);
    assert_int_equal(f->asked, 1);
    assert_int_equal(written(f, 1), 0);
    tn_forward_stats_t fs;
    tn_forward_stats(f->fwd, &fs);
    assert_int_equal(fs.retries, 0);
    assert_int_equal(fs.failed, 1);
    tn_pub_fini(&w.p);
    ffx_free(f);
}

/* A leader that never serves: the publish fails at its deadline with
 * that refusal (a retryable one at the doors), nothing stored. */
static void test_deadline(void **state)
{
    (void)state;
    ffx_t *f = ffx_new(600, 200);
    for (unsigned i = 0; i < 8; i++)
        f->answers[i] = TN_ENOTSERVING;
    f->nanswers = 8;
    pubw_t w;
    pub_prepare(&w, "a", 1, true, 1);
    assert_int_equal(forward(f, &w), TN_ENOTSERVING);
    assert_true(f->asked >= 2);
    assert_int_equal(written(f, 1), 0);
    tn_pub_fini(&w.p);
    ffx_free(f);
}

/* The router: an unpinned publish of the factor-3 topic that node 2's
 * engine cannot take goes to a partition's leader and completes with its
 * offset; a factor-1 topic keeps the engine's TN_EREMOTE (no ingress log
 * here), nothing forwarded. */
static void test_router_forwards(void **state)
{
    (void)state;
    ffx_t *f = ffx_new(10000, 2000);
    put_topic(f, "plain", 1, 1);
    tn_router_opts_t ro = {f->acc_b, f->m, NULL, NULL, NULL};
    tn_router_t *r;
    assert_int_equal(tn_router_new(&ro, &r), 0);
    tn_router_set_rpc(r, f->rpc.caller, 2, true);
    pubw_t w;
    pub_prepare(&w, "u", 2, false, 0);
    assert_int_equal(tn_router_publish(r, "orders", 6, &w.p, 0, on_pub), 0);
    tu_run_until(f->loop, &w.done);
    assert_int_equal(w.status, 0);
    assert_false(w.p.remote);
    assert_int_equal(w.p.first_offset, 1);
    assert_int_equal(written(f, w.p.partition), 3);
    tn_router_stats_t st;
    tn_router_stats(r, &st);
    assert_int_equal(st.forwarded, 1);
    assert_int_equal(st.accepted, 0);
    assert_int_equal(st.publishing, 0);

    pubw_t w1;
    pub_prepare(&w1, "p", 1, true, 0);
    int rc = tn_router_publish(r, "plain", 5, &w1.p, 0, on_pub);
    if (rc == 0) {
        tu_run_until(f->loop, &w1.done);
        rc = w1.status;
    }
    assert_int_equal(rc, TN_EREMOTE);
    tn_router_stats(r, &st);
    assert_int_equal(st.forwarded, 1);
    tn_router_set_rpc(r, NULL, 2, true);
    tn_broker_set_publisher(f->acc_b, NULL, NULL); /* the engine outlives the router */
    tn_broker_set_append_check(f->acc_b, NULL, NULL);
    tn_router_free(r);
    tn_pub_fini(&w.p);
    tn_pub_fini(&w1.p);
    ffx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_answer_stored_once),
        cmocka_unit_test(test_retries_until_serving),
        cmocka_unit_test(test_retries_after_not_leader_and_fenced),
        cmocka_unit_test(test_few_replicas_at_once),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_router_forwards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
