/* The CONSUME handler (api/v1/forward.c, tn_v1_consume_handler) and the
 * router's call (cluster/router.h, tn_router_consume_call) through real
 * node RPC: an owner endpoint serving a real broker's consume lanes and a
 * lone metastore replica (libraft on loopback) whose member record names
 * the owner endpoint, and a caller endpoint with a router, on one loop.
 * Covers an empty topic (204), a single consume whose lease lives in the
 * owner's lanes (settled there), a batch, a replay read, a long poll
 * answered by a later publish, an unknown topic (404), a partition out of
 * range and a malformed request (400), a call cancelled while its consume
 * waits (the message published afterwards goes to the next consume, not
 * to the cancelled one), a batch cancelled after it took messages (they
 * are back at once, a second attempt), the router's placement answers,
 * and the router's refusals (an unknown member, one with no address, bad
 * names). Every test checks that uv_loop_close returns 0. */
#include "core/platform.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include "api/consume.h"
#include "api/v1.h"
#include "api/v1/forward.h"
#include "cluster/router.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/time.h"
#include "meta/meta.h"
#include "proto/http/server.h"
#include "queue/queue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tu_fx_t *fx;
    uv_loop_t *loop;
    tn_broker_t *b;
    tn_meta_t *m;
    tn_v1_t v;           /* meta, consume and the wait cap: what the handler uses */
    tu_rpc_pair_t rpc;   /* the owner serves CONSUME and SETTLE */
    tn_router_t *router; /* rpc.caller's: node 2 */
} ffx_t;

/* --- a slow owner's SETTLE handler ------------------------------------------------ */

/* It answers every request it holds each time the test says so (or at
 * once, when not holding): offset even 204, odd 410. It counts calls and
 * the handles they carried. */
typedef struct {
    tn_rpc_req_t *held[64];
    tn_wire_settle_t w[64];
    unsigned nheld;
    unsigned calls;
    unsigned handles;
    unsigned max_handles;
    char topic[256];
    uint8_t how;
} slow_t;

static slow_t slow;

static void slow_answer(unsigned i)
{
    uint16_t st[TN_SETTLE_MAX];
    for (uint32_t k = 0; k < slow.w[i].count; k++)
        st[k] = slow.w[i].h[k].offset % 2 == 0 ? 204 : 410;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_settle_reply_encode(&b, st, slow.w[i].count), 0);
    tn_rpc_reply(slow.held[i], 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

static void slow_release(void)
{
    for (unsigned i = 0; i < slow.nheld; i++)
        slow_answer(i);
    slow.nheld = 0;
}

static void on_slow_settle(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    assert_ptr_equal(arg, &slow);
    assert_true(slow.nheld < 64);
    unsigned i = slow.nheld++;
    char err[200];
    assert_int_equal(tn_wire_settle_decode(payload, len, &slow.w[i], err, sizeof(err)), 0);
    slow.held[i] = req;
    slow.calls++;
    slow.handles += slow.w[i].count;
    slow.max_handles = TN_MAX(slow.max_handles, slow.w[i].count);
    snprintf(slow.topic, sizeof(slow.topic), "%s", slow.w[i].topic);
    slow.how = slow.w[i].how;
}

static void put_topic(ffx_t *f, const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c = tu_meta_topic_cmd(name, partitions);
    tu_meta_commit(f->loop, f->m, &c);
}

/* A member record for id with this API address (its RPC address). */
static void put_member(ffx_t *f, uint64_t id, const char *api_addr)
{
    tn_meta_cmd_t c = tu_meta_member_cmd(id, api_addr);
    tu_meta_commit(f->loop, f->m, &c);
}

static ffx_t *ffx_new(void)
{
    ffx_t *f = calloc(1, sizeof(*f));
    f->fx = tu_fx_new(NULL);
    f->loop = &f->fx->loop;
    tn_broker_opts_t o;
    tu_broker_opts(&o);
    assert_int_equal(tn_broker_open(f->loop, f->fx->store, &o, &f->b), 0);
    tn_rpc_handler_t h[2];
    tn_v1_consume_handler(&f->v, &h[0]);
    assert_int_equal(h[0].op, TN_OP_CONSUME);
    assert_int_equal(h[0].flags, TN_RPC_OP_EXEMPT);
    h[1] = (tn_rpc_handler_t){TN_OP_SETTLE, 0, on_slow_settle, &slow};
    tu_rpc_pair_open(&f->rpc, f->loop, h, 2);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/meta", f->fx->dir);
    f->m = tu_meta_lone(f->loop, dir, f->rpc.addr);
    f->v.meta = f->m;
    f->v.broker = f->b;
    f->v.o.max_consume_wait_ms = 10000;
    tn_consume_opts_t co = {0};
    assert_int_equal(tn_consume_new(f->loop, f->b, &co, &f->v.consume), 0);
    tn_router_opts_t ro = {f->b, f->m, NULL, NULL, NULL};
    assert_int_equal(tn_router_new(&ro, &f->router), 0);
    tn_router_set_rpc(f->router, f->rpc.caller, 2, true);
    return f;
}

static void ffx_free(ffx_t *f)
{
    tu_rpc_close(f->loop, f->rpc.caller);
    f->v.closing = true;
    tn_consume_close(f->v.consume);
    tu_rpc_close(f->loop, f->rpc.owner);
    tn_broker_set_publisher(f->b, NULL, NULL); /* the engine outlives the router */
    tn_broker_set_append_check(f->b, NULL, NULL);
    tn_router_free(f->router);
    tn__v1_grace_free(&f->v);
    tu_broker_close(f->loop, f->b);
    tu_meta_close(f->loop, f->m);
    tu_fx_free(f->fx);
    free(f);
}

/* --- helpers ------------------------------------------------------------------------ */

typedef struct {
    tn_pub_t pub;
    bool done;
    int status;
} pubreq_t;

static void on_published(tn_pub_t *p, int status)
{
    pubreq_t *r = p->data;
    r->done = true;
    r->status = status;
}

/* Publish body to partition of topic on the owner's broker. */
static void publish(ffx_t *f, const char *topic, uint32_t partition, const char *body)
{
    pubreq_t r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(tn_pub_init(&r.pub, 1), 0);
    tn_iov_t b = tn_iov(body, strlen(body));
    assert_int_equal(tn_pub_set_all(&r.pub, &b), 0);
    r.pub.data = &r;
    r.pub.pinned = true;
    r.pub.pin = partition;
    int rc = tn_broker_publish(f->b, topic, strlen(topic), &r.pub, 0, on_published);
    if (rc == 0)
        assert_true(tu_run_loop(f->loop, tu_is_true, &r.done));
    else
        r.status = rc;
    assert_int_equal(r.status, 0);
    tn_pub_fini(&r.pub);
}

typedef struct {
    tn_router_consume_t c;
    bool done;
    int status;
    uint16_t http;
    char body[8192];
} call_t;

static void on_call(tn_router_consume_t *c, int status)
{
    call_t *k = c->data;
    k->done = true;
    k->status = status;
    k->http = c->http_status;
    size_t n = TN_MIN(tn_buf_size(&c->body), sizeof(k->body) - 1);
    if (n > 0)
        memcpy(k->body, tn_buf_data(&c->body), n);
    k->body[n] = '\0';
    tn_buf_fini(&c->body);
}

static tn_wire_consume_t req_of(const char *topic, int64_t wait_ms, uint32_t max)
{
    tn_wire_consume_t w;
    memset(&w, 0, sizeof(w));
    snprintf(w.topic, sizeof(w.topic), "%s", topic);
    snprintf(w.channel, sizeof(w.channel), "default");
    w.wait_ms = wait_ms;
    w.max = max;
    w.local_only = true;
    return w;
}

static void start(ffx_t *f, call_t *k, const tn_wire_consume_t *w, uint64_t timeout_ms)
{
    memset(k, 0, sizeof(*k));
    k->c.data = k;
    assert_int_equal(tn_router_consume_call(f->router, 1, w, timeout_ms, &k->c, on_call), 0);
}

static void call(ffx_t *f, call_t *k, const tn_wire_consume_t *w)
{
    start(f, k, w, 5000);
    assert_true(tu_run_loop(f->loop, tu_is_true, &k->done));
    assert_int_equal(k->status, 0);
}

/* The receipt handle in a single message's JSON. */
static void handle_of(const char *body, uint32_t *p, uint64_t *off, uint32_t *nonce)
{
    const char *h = strstr(body, "\"receipt_handle\":\"");
    assert_non_null(h);
    h += strlen("\"receipt_handle\":\"");
    const char *end = strchr(h, '"');
    assert_non_null(end);
    assert_int_equal(tn_receipt_parse(h, (size_t)(end - h), p, off, nonce), 0);
}

/* --- tests ------------------------------------------------------------------------------ */

static void test_single_batch_replay(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    put_topic(f, "t", 2);
    call_t k;
    tn_wire_consume_t w = req_of("t", 0, 0);
    call(f, &k, &w);
    assert_int_equal(k.http, 204);
    assert_string_equal(k.body, "");

    publish(f, "t", 1, "hello");
    call(f, &k, &w);
    assert_int_equal(k.http, 200);
    assert_non_null(strstr(k.body, "\"payload\":\"hello\""));
    assert_non_null(strstr(k.body, "\"partition\":1"));
    /* The lease is in the owner's lanes: settled there, once. */
    uint32_t p, nonce;
    uint64_t off;
    handle_of(k.body, &p, &off, &nonce);
    assert_int_equal(tn_consume_settle(f->v.consume, "t", "default", p, off, nonce, TN_SETTLE_ACK,
                                       0, NULL, NULL),
                     0);
    assert_int_equal(tn_consume_settle(f->v.consume, "t", "default", p, off, nonce, TN_SETTLE_ACK,
                                       0, NULL, NULL),
                     TN_ENOTFOUND);

    /* A batch of what is there. */
    publish(f, "t", 0, "a");
    publish(f, "t", 1, "b");
    publish(f, "t", 0, "c");
    w = req_of("t", 0, 5);
    call(f, &k, &w);
    assert_int_equal(k.http, 200);
    assert_memory_equal(k.body, "{\"messages\":[", 13);
    assert_non_null(strstr(k.body, "\"payload\":\"a\""));
    assert_non_null(strstr(k.body, "\"payload\":\"b\""));
    assert_non_null(strstr(k.body, "\"payload\":\"c\""));
    assert_string_equal(k.body + strlen(k.body) - 3, "]}\n");

    /* A replay read of partition 1, offset 0: no handle. */
    w = req_of("t", 0, 0);
    w.pinned = true;
    w.replay = true;
    w.partition = 1;
    w.offset = 0;
    call(f, &k, &w);
    assert_int_equal(k.http, 200);
    assert_non_null(strstr(k.body, "\"payload\":\"hello\""));
    assert_null(strstr(k.body, "receipt_handle"));
    w.offset = 9;
    call(f, &k, &w);
    assert_int_equal(k.http, 204);
    ffx_free(f);
}

static void test_refusals(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    put_topic(f, "t", 2);
    call_t k;
    tn_wire_consume_t w = req_of("nope", 0, 0);
    call(f, &k, &w);
    assert_int_equal(k.http, 404);
    assert_string_equal(k.body, "{\"error\":\"topic not found\"}\n");
    w = req_of("t", 0, 0);
    w.pinned = true;
    w.partition = 2;
    call(f, &k, &w);
    assert_int_equal(k.http, 400);
    assert_non_null(strstr(k.body, "partition out of range"));
    w = req_of("t", 0, 101);
    call(f, &k, &w);
    assert_int_equal(k.http, 400);
    w = req_of("bad name!", 0, 0);
    call(f, &k, &w);
    assert_int_equal(k.http, 400);
    /* A malformed request, straight over node RPC: 400. */
    tn_buf_t junk;
    tn_buf_init(&junk);
    assert_int_equal(tn_buf_append(&junk, "junk", 4), 0);
    tu_rpc_raw_t raw;
    assert_int_equal(tu_rpc_raw(&f->rpc, f->loop, TN_OP_CONSUME, &junk, 5000, &raw), 400);
    tn_buf_fini(&junk);
    /* The router's own refusals: an unknown member, bad names. */
    memset(&k, 0, sizeof(k));
    w = req_of("t", 0, 0);
    assert_int_equal(tn_router_consume_call(f->router, 9, &w, 1000, &k.c, on_call),
                     UV_EHOSTUNREACH);
    put_member(f, 3, "");
    assert_int_equal(tn_router_consume_call(f->router, 3, &w, 1000, &k.c, on_call),
                     UV_EHOSTUNREACH);
    w.channel[0] = '\0';
    assert_int_equal(tn_router_consume_call(f->router, 1, &w, 1000, &k.c, on_call), UV_EINVAL);
    ffx_free(f);
}

static bool passed(void *arg)
{
    return tn_now_mono_ms() >= *(const int64_t *)arg;
}

/* Run the loop for ms. */
static void run_for(ffx_t *f, int64_t ms)
{
    int64_t at = tn_now_mono_ms() + ms;
    (void)tu_run_loop(f->loop, passed, &at);
}

static void test_long_poll_and_cancel(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    put_topic(f, "t", 1);
    /* A long poll answered by a publish while it waits. */
    call_t k;
    tn_wire_consume_t w = req_of("t", 8000, 0);
    start(f, &k, &w, 10000);
    run_for(f, 300);
    assert_false(k.done);
    publish(f, "t", 0, "late");
    assert_true(tu_run_loop(f->loop, tu_is_true, &k.done));
    assert_int_equal(k.status, 0);
    assert_int_equal(k.http, 200);
    assert_non_null(strstr(k.body, "\"payload\":\"late\""));

    /* A long poll cancelled while it waits: the owner drops its request,
     * so what is published next goes to the next consume. */
    start(f, &k, &w, 10000);
    run_for(f, 300);
    assert_false(k.done);
    tn_router_consume_cancel(&k.c);
    assert_true(tu_run_loop(f->loop, tu_is_true, &k.done));
    assert_int_equal(k.status, TN_ECLOSED);
    run_for(f, 300); /* the CANCEL frame reaches the owner */
    publish(f, "t", 0, "after");
    w = req_of("t", 0, 0);
    call(f, &k, &w);
    assert_int_equal(k.http, 200);
    assert_non_null(strstr(k.body, "\"payload\":\"after\""));
    ffx_free(f);
}

typedef struct {
    tn_consume_parked_t pk;
    bool answered;
    int status;
    char body[8192];
} parked_t;

static void on_parked(tn_consume_parked_t *pk, int status, const char *body, size_t len)
{
    parked_t *q = pk->data;
    q->answered = true;
    q->status = status;
    size_t n = TN_MIN(len, sizeof(q->body) - 1);
    if (n > 0)
        memcpy(q->body, body, n);
    q->body[n] = '\0';
}

/* The cancelled-batch tests' set-up: topic t with two messages, and a's
 * batch of up to 5 from it, waiting up to 8 s. */
static ffx_t *two_ready(tn_consume_args_t *a)
{
    ffx_t *f = ffx_new();
    put_topic(f, "t", 1);
    publish(f, "t", 0, "one");
    publish(f, "t", 0, "two");
    memset(a, 0, sizeof(*a));
    snprintf(a->topic, sizeof(a->topic), "t");
    snprintf(a->channel, sizeof(a->channel), "default");
    a->partitions = 1;
    a->visibility_ms = 30000;
    a->wait_ms = 8000;
    a->max = 5;
    a->ident = "";
    return f;
}

/* Run the loop until both messages are leased (or *answered, when not
 * NULL, holds): the engine's pump (an idle handle) hands the ready
 * messages to the batch in one loop turn; its answer waits for the next
 * turn's timers. */
static void until_both_leased(ffx_t *f, const bool *answered)
{
    int64_t deadline = tn_now_mono_ms() + 20000;
    while (f->b->inflight_msgs < 2 && (answered == NULL || !*answered) &&
           tn_now_mono_ms() < deadline)
        uv_run(f->loop, UV_RUN_NOWAIT);       /* the channel being made, then the pump */
    assert_int_equal(f->b->inflight_msgs, 2); /* both leased to the batch */
}

/* The next consume (a's, without a wait) has both messages again, each on
 * its second attempt. */
static void expect_both_again(ffx_t *f, tn_consume_args_t *a)
{
    parked_t q;
    memset(&q, 0, sizeof(q));
    q.pk.answer = on_parked;
    q.pk.data = &q;
    a->wait_ms = 0;
    tn_consume_start_parked(f->v.consume, &q.pk, a);
    assert_true(tu_run_loop(f->loop, tu_is_true, &q.answered));
    assert_int_equal(q.status, 200);
    assert_non_null(strstr(q.body, "\"payload\":\"one\""));
    assert_non_null(strstr(q.body, "\"payload\":\"two\""));
    assert_null(strstr(q.body, "\"attempts\":1"));
    assert_non_null(strstr(q.body, "\"attempts\":2"));
}

/* A batch cancelled after it took messages and before its answer gives
 * them back: the next consume has them (a second attempt), not after the
 * visibility timeout. Out of memory (every allocation failing while it is
 * cancelled), its nacks are refused (no pending entry can be made) and
 * their leases end at the engine's next wake instead, as timeouts. */
static void cancelled_batch_gives_back(bool out_of_memory)
{
    tn_consume_args_t a;
    ffx_t *f = two_ready(&a);
    parked_t q;
    memset(&q, 0, sizeof(q));
    q.pk.answer = on_parked;
    q.pk.data = &q;
    tn_consume_start_parked(f->v.consume, &q.pk, &a);
    until_both_leased(f, &q.answered);
    assert_false(q.answered);
    if (out_of_memory)
        tn_alloc_fail_after(0);
    tn_consume_parked_cancel(&q.pk);
    tn_alloc_fail_after(-1);
    uint64_t at_once = f->b->inflight_msgs;
    run_for(f, 100);
    printf("cancelled%s: in flight at once %" PRIu64 ", after 100 ms %" PRIu64 "\n",
           out_of_memory ? " out of memory" : "", at_once, f->b->inflight_msgs);
    assert_int_equal(at_once, out_of_memory ? 2 : 0); /* nacked at once, or at the next wake */
    assert_int_equal(f->b->inflight_msgs, 0);
    assert_false(q.answered);
    expect_both_again(f, &a);
    ffx_free(f);
}

/* Before, out of memory: both stayed leased for the visibility timeout
 * (30 s). */
static void test_cancelled_batch_gives_back(void **state)
{
    (void)state;
    cancelled_batch_gives_back(false);
    cancelled_batch_gives_back(true);
}

/* The same for a batch of an HTTP client that left in that moment (its
 * request's cancel, which answers nothing). */
static void test_cancelled_http_batch_gives_back(void **state)
{
    (void)state;
    tn_consume_args_t a;
    ffx_t *f = two_ready(&a);
    tn_http_request_t *r = calloc(1, sizeof(*r)); /* never answered: cancelled first */
    tn_consume_start(f->v.consume, r, &a);
    until_both_leased(f, NULL);
    assert_non_null(r->on_cancel);
    r->on_cancel(r);
    assert_int_equal(f->b->inflight_msgs, 0); /* both back at once */
    free(r);
    run_for(f, 100);
    expect_both_again(f, &a);
    ffx_free(f);
}

/* The router's placement answers, as the door asks them. */
static void test_where(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    put_topic(f, "t", 2);
    uint64_t owner = 0;
    /* The lone replica places both partitions on member 1, which is not
     * the router's node (2): remote, and alive. */
    assert_int_equal(tn_router_consume_where(f->router, "t", 0, &owner), TN_EREMOTE);
    assert_int_equal(owner, 1);
    assert_int_equal(tn_router_consume_where(f->router, "t", 1, &owner), TN_EREMOTE);
    uint64_t ids[4];
    assert_int_equal(tn_router_consume_owners(f->router, "t", ids, 4), 1);
    assert_int_equal(ids[0], 1);
    /* As node 1 itself: here. */
    tn_router_set_rpc(f->router, f->rpc.caller, 1, true);
    assert_int_equal(tn_router_consume_where(f->router, "t", 0, &owner), 0);
    assert_int_equal(tn_router_consume_owners(f->router, "t", ids, 4), 0);
    /* No record: the lanes answer, as ever. */
    assert_int_equal(tn_router_consume_where(f->router, "none", 0, &owner), 0);
    assert_int_equal(tn_router_consume_owners(f->router, "none", ids, 4), 0);
    /* Without node RPC every partition is local. */
    tn_router_set_rpc(f->router, NULL, 0, true);
    assert_int_equal(tn_router_consume_where(f->router, "t", 0, &owner), 0);
    assert_int_equal(tn_router_consume_owners(f->router, "t", ids, 4), 0);
    ffx_free(f);
}

static bool no_grace(void *arg)
{
    return ((ffx_t *)arg)->v.ngrace == 0;
}

static bool has_grace(void *arg)
{
    return ((ffx_t *)arg)->v.ngrace > 0;
}

/* The owner's answer with a lease and the caller's CANCEL cross: the
 * caller never sees the answer (node RPC drops it), and the owner, told
 * of the CANCEL for a request it had answered, nacks the lease at once:
 * the next consume gets the message now (a second attempt), not after
 * its 30 s visibility timeout. */
static void test_reply_crossing_cancel_is_nacked(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tn_rpc_on_late_cancel(f->rpc.owner, tn_v1_consume_late_cancel, &f->v);
    put_topic(f, "t", 1);
    call_t k;
    tn_wire_consume_t w = req_of("t", 8000, 0);
    start(f, &k, &w, 10000);
    run_for(f, 300);
    assert_false(k.done);
    /* The caller stops hearing: the owner's answer will not reach it. */
    tn_rpc_test_deaf(f->rpc.caller, true);
    publish(f, "t", 0, "crossed");
    assert_true(tu_run_loop(f->loop, has_grace, f)); /* answered, lease kept */
    assert_int_equal(f->v.ngrace, 1);
    assert_false(k.done);
    tn_router_consume_cancel(&k.c);
    assert_true(tu_run_loop(f->loop, tu_is_true, &k.done));
    assert_int_equal(k.status, TN_ECLOSED);
    assert_true(tu_run_loop(f->loop, no_grace, f)); /* the CANCEL reached the owner */
    tn_rpc_test_deaf(f->rpc.caller, false);
    w = req_of("t", 5000, 0);
    call(f, &k, &w);
    assert_int_equal(k.http, 200);
    assert_non_null(strstr(k.body, "\"payload\":\"crossed\""));
    assert_non_null(strstr(k.body, "\"attempts\":2"));
    /* A caller that read its answer never cancels; an unknown late
     * CANCEL changes nothing. */
    tn_v1_consume_late_cancel(&f->v, "127.0.0.1:1", 12345);
    ffx_free(f);
}

typedef struct {
    ffx_t *f;
    uint32_t want;
} grace_n_t;

static bool grace_is(void *arg)
{
    grace_n_t *g = arg;
    return g->f->v.ngrace == g->want;
}

/* Three answers crossing three CANCELs, cancelled in the order middle,
 * youngest, oldest of their records: each late CANCEL finds its own record
 * (by caller and request) and leaves the others; in the end all three
 * messages are back at once, each a second attempt. */
static void test_crossing_cancels_in_any_order(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    tn_rpc_on_late_cancel(f->rpc.owner, tn_v1_consume_late_cancel, &f->v);
    put_topic(f, "t", 1);
    call_t k[3];
    for (uint32_t i = 0; i < 3; i++) {
        tn_wire_consume_t w = req_of("t", 8000, 1);
        start(f, &k[i], &w, 10000);
    }
    run_for(f, 300);
    /* The caller stops hearing: no answer reaches it (node RPC would
     * deliver a retransmitted one once it hears again, so it stays deaf
     * until every request is cancelled). */
    tn_rpc_test_deaf(f->rpc.caller, true);
    for (uint32_t i = 0; i < 3; i++) {
        char body[16];
        snprintf(body, sizeof(body), "m%u", i);
        publish(f, "t", 0, body);
        grace_n_t g = {f, i + 1};
        assert_true(tu_run_loop(f->loop, grace_is, &g)); /* answered, lease kept */
    }
    /* Which request got which message is the lanes' choice: the records
     * are oldest first in the order they were answered, found by key. */
    static const uint32_t order[3] = {1, 2, 0};
    for (uint32_t j = 0; j < 3; j++) {
        call_t *c = &k[order[j]];
        assert_false(c->done);
        tn_router_consume_cancel(&c->c);
        assert_true(tu_run_loop(f->loop, tu_is_true, &c->done));
        assert_int_equal(c->status, TN_ECLOSED);
        grace_n_t g = {f, 2 - j};
        assert_true(tu_run_loop(f->loop, grace_is, &g)); /* that record only */
        assert_int_equal(tn_u64map_size(&f->v.grace_ix), 2 - j);
    }
    tn_rpc_test_deaf(f->rpc.caller, false);
    call_t again;
    tn_wire_consume_t w = req_of("t", 0, 3);
    call(f, &again, &w);
    assert_int_equal(again.http, 200);
    for (uint32_t i = 0; i < 3; i++) {
        char want[32];
        snprintf(want, sizeof(want), "\"payload\":\"m%u\"", i);
        assert_non_null(strstr(again.body, want));
    }
    assert_null(strstr(again.body, "\"attempts\":1"));
    ffx_free(f);
}

/* --- settling through the router: coalescing per owner -------------------------- */

typedef struct {
    tn_router_settle_item_t it;
    bool done;
} ack_t;

static unsigned acks_done;

static void on_acked(void *arg, tn_router_settle_item_t *items, uint32_t n)
{
    ack_t *a = arg;
    assert_ptr_equal(items, &a->it);
    assert_int_equal(n, 1);
    a->done = true;
    acks_done++;
}

typedef struct {
    unsigned want;
} count_t;

static bool acks_reached(void *arg)
{
    const count_t *c = arg;
    if (slow.nheld > 0)
        slow_release(); /* the owner answers what it holds each turn */
    return acks_done >= c->want;
}

static bool held_reached(void *arg)
{
    return slow.nheld >= *(const unsigned *)arg;
}

/* A handle settled on this node (a lone node's router: every partition
 * here) has its answer only from its channel log record's completion:
 * never before tn_router_settle returns, and 204 once durable. A stale
 * handle has nothing to wait for and answers at once. */
static void test_local_settle_waits_for_the_log(void **state)
{
    (void)state;
    ffx_t *f = ffx_new();
    put_topic(f, "t", 2);
    tn_router_t *lone;
    tn_router_opts_t ro = {f->b, NULL, NULL, NULL, NULL};
    assert_int_equal(tn_router_new(&ro, &lone), 0);
    tn_router_on_settle(lone, tn_consume_settle_hook, f->v.consume);
    call_t k;
    tn_wire_consume_t w = req_of("t", 0, 0);
    call(f, &k, &w); /* opens the topic here: nothing yet */
    assert_int_equal(k.http, 204);
    publish(f, "t", 1, "hello");
    call(f, &k, &w);
    assert_int_equal(k.http, 200);
    ack_t a = {0};
    handle_of(k.body, &a.it.partition, &a.it.offset, &a.it.nonce);
    acks_done = 0;
    tn_router_settle(lone, "t", "default", TN_WIRE_SETTLE_ACK, 30000, &a.it, 1, on_acked, &a);
    assert_false(a.done);
    assert_true(tu_run_loop(f->loop, tu_is_true, &a.done));
    assert_int_equal(a.it.status, 204);
    ack_t again = {.it = a.it};
    tn_router_settle(lone, "t", "default", TN_WIRE_SETTLE_ACK, 30000, &again.it, 1, on_acked,
                     &again);
    assert_true(again.done);
    assert_int_equal(again.it.status, 410);
    tn_broker_set_publisher(f->b, NULL, NULL); /* the engine outlives the router */
    tn_broker_set_append_check(f->b, NULL, NULL);
    tn_router_free(lone);
    ffx_free(f);
}

#define NACKS 300

/* Hundreds of single acks to one slow owner, all at once: the first
 * TN_ROUTER_SETTLE_INFLIGHT go alone at once, the rest wait and go in
 * batches of at most TN_ROUTER_SETTLE_COALESCE; each gets its own
 * handle's result. Then an idle owner's ack goes at once, alone. */
static void test_settle_coalesces(void **state)
{
    (void)state;
    memset(&slow, 0, sizeof(slow));
    ffx_t *f = ffx_new();
    put_topic(f, "t", 2);
    ack_t *a = calloc(NACKS, sizeof(*a));
    assert_non_null(a);
    acks_done = 0;
    for (unsigned i = 0; i < NACKS; i++) {
        a[i].it = (tn_router_settle_item_t){i % 2, i, 7, 0, NULL};
        tn_router_settle(f->router, "t", "default", TN_WIRE_SETTLE_ACK, 30000, &a[i].it, 1,
                         on_acked, &a[i]);
        assert_false(a[i].done);
    }
    /* Nothing answered yet: the first calls are out, one handle each. */
    unsigned want = TN_ROUTER_SETTLE_INFLIGHT;
    assert_true(tu_run_loop(f->loop, held_reached, &want));
    assert_int_equal(slow.calls, TN_ROUTER_SETTLE_INFLIGHT);
    assert_int_equal(slow.handles, TN_ROUTER_SETTLE_INFLIGHT);
    count_t c = {NACKS};
    assert_true(tu_run_loop(f->loop, acks_reached, &c));
    assert_int_equal(slow.handles, NACKS);
    assert_true(slow.max_handles <= TN_ROUTER_SETTLE_COALESCE);
    assert_true(slow.max_handles > 1);
    /* 4 alone, then 296 in batches of at most 64 (at least 5 calls):
     * far fewer calls than acks. */
    assert_true(slow.calls >= TN_ROUTER_SETTLE_INFLIGHT + 5);
    assert_true(slow.calls <= 4 * TN_ROUTER_SETTLE_INFLIGHT);
    assert_string_equal(slow.topic, "t");
    assert_int_equal(slow.how, TN_WIRE_SETTLE_ACK);
    for (unsigned i = 0; i < NACKS; i++) {
        assert_true(a[i].done);
        assert_int_equal(a[i].it.status, i % 2 == 0 ? 204 : 410);
        if (i % 2 == 0)
            assert_null(a[i].it.error);
        else
            assert_string_equal(a[i].it.error,
                                "receipt handle no longer matches an active reservation");
    }
    tn_router_stats_t st;
    tn_router_stats(f->router, &st);
    assert_int_equal(st.settle_calls, slow.calls);
    assert_int_equal(st.settle_handles, NACKS);
    assert_int_equal(st.settle_queued, NACKS - TN_ROUTER_SETTLE_INFLIGHT);
    tn_buf_t m;
    tn_buf_init(&m);
    tn_router_settle_metrics_write(f->router, &m);
    char line[96];
    snprintf(line, sizeof(line), "tern_cluster_settle_handles_total %u\n", NACKS);
    assert_non_null(strstr(tn_buf_data(&m), line));
    tn_buf_fini(&m);
    /* Idle again: an ack goes at once, alone. */
    unsigned calls = slow.calls;
    a[0].done = false;
    a[0].it = (tn_router_settle_item_t){0, 1000, 7, 0, NULL};
    tn_router_settle(f->router, "t", "default", TN_WIRE_SETTLE_NACK, 0, &a[0].it, 1, on_acked,
                     &a[0]);
    want = 1;
    assert_true(tu_run_loop(f->loop, held_reached, &want));
    assert_int_equal(slow.calls, calls + 1);
    assert_int_equal(slow.w[0].count, 1);
    assert_int_equal(slow.how, TN_WIRE_SETTLE_NACK);
    c.want = acks_done + 1;
    assert_true(tu_run_loop(f->loop, acks_reached, &c));
    assert_int_equal(a[0].it.status, 204);
    free(a);
    ffx_free(f);
}

/* An owner that never answers: the calls in flight time out, and the
 * acks queued behind them answer 502 within their own 2 s, waiting
 * included. */
static void test_settle_budget_covers_queue(void **state)
{
    (void)state;
    memset(&slow, 0, sizeof(slow));
    ffx_t *f = ffx_new();
    put_topic(f, "t", 1);
    enum { N = 20 };
    ack_t a[N];
    memset(a, 0, sizeof(a));
    acks_done = 0;
    int64_t t0 = tn_now_mono_ms();
    for (unsigned i = 0; i < N; i++) {
        a[i].it = (tn_router_settle_item_t){0, i, 7, 0, NULL};
        tn_router_settle(f->router, "t", "default", TN_WIRE_SETTLE_ACK, 30000, &a[i].it, 1,
                         on_acked, &a[i]);
    }
    /* acks_reached would release the held calls: wait without it. */
    while (acks_done < N && tn_now_mono_ms() - t0 < 20000)
        uv_run(f->loop, UV_RUN_ONCE);
    assert_int_equal(acks_done, N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(a[i].it.status, 502);
        assert_string_equal(a[i].it.error, "partition owner unreachable");
    }
    /* The first calls went; the rest waited behind them (and ran out of
     * budget there, or went in a call with what was left of it). */
    assert_true(slow.calls >= TN_ROUTER_SETTLE_INFLIGHT && slow.calls < N);
    slow_release();
    ffx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_batch_replay),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_long_poll_and_cancel),
        cmocka_unit_test(test_cancelled_batch_gives_back),
        cmocka_unit_test(test_cancelled_http_batch_gives_back),
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_reply_crossing_cancel_is_nacked),
        cmocka_unit_test(test_crossing_cancels_in_any_order),
        cmocka_unit_test(test_settle_coalesces),
        cmocka_unit_test(test_local_settle_waits_for_the_log),
        cmocka_unit_test(test_settle_budget_covers_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
