/* Node RPC over QUIC: a server and a client tn_rpc_t on one loop, over
 * loopback on kernel-chosen ports. Covers the round trip on every lane,
 * reply matching, the secret proof both ways, garbage and unauthenticated
 * floods, cancel, deadlines and the liveness ping, restart detection by
 * stateless reset, the payload cap, unknown ops, and dial backoff. Every
 * test checks that uv_loop_close returns 0. Time bounds are generous: the
 * machine may be loaded. */
#include "core/platform.h"

#include "cluster/quic.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include "fixture_rpc.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- helpers ------------------------------------------------------------------------ */

static void on_sleep(uv_timer_t *t)
{
    *(bool *)t->data = true;
}

static void run_for(uv_loop_t *loop, uint64_t ms)
{
    bool done = false;
    uv_timer_t t;
    uv_timer_init(loop, &t);
    t.data = &done;
    uv_timer_start(&t, on_sleep, ms, 0);
    while (!done)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

typedef struct {
    bool done;
    int status;
    uint16_t http;
    uint8_t *body;
    size_t blen;
    char err[256];
    int64_t at_ms;
} res_t;

static void on_res(void *arg, int status, const tn_wire_reply_t *rep, const char *err)
{
    res_t *r = arg;
    assert_false(r->done); /* exactly once */
    r->done = true;
    r->status = status;
    r->at_ms = tn_now_mono_ms();
    if (status == 0) {
        assert_non_null(rep);
        r->http = rep->status;
        r->blen = rep->body_len;
        r->body = malloc(rep->body_len + 1);
        memcpy(r->body, rep->body, rep->body_len);
        r->body[rep->body_len] = 0;
    } else {
        assert_null(rep);
        assert_non_null(err);
        snprintf(r->err, sizeof r->err, "%s", err);
    }
}

static void res_fini(res_t *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* Echo fields: one byte field. */
static void echo_payload(tn_buf_t *b, const void *p, size_t n)
{
    tn_buf_init(b);
    assert_int_equal(tn_wire_put_bytes(b, p, n), 0);
}

static int echo_call(tn_rpc_t *c, const char *peer, int lane, const char *text, res_t *res,
                     uint64_t timeout_ms)
{
    tn_buf_t b;
    echo_payload(&b, text, strlen(text));
    int rc = tn_rpc_call_on(c, peer, lane, false, TN_OP_ECHO, tn_buf_data(&b), tn_buf_size(&b),
                            timeout_ms, on_res, res, NULL);
    tn_buf_fini(&b);
    return rc;
}

static void expect_echo(uv_loop_t *loop, tn_rpc_t *c, const char *peer, int lane, const char *text)
{
    res_t res = {0};
    assert_int_equal(echo_call(c, peer, lane, text, &res, 10000), 0);
    tu_run_until(loop, &res.done);
    if (res.status != 0)
        fprintf(stderr, "echo failed: %s\n", res.err);
    assert_int_equal(res.status, 0);
    assert_int_equal(res.http, 200);
    assert_int_equal(res.blen, strlen(text));
    assert_memory_equal(res.body, text, res.blen);
    res_fini(&res);
}

/* A log capture: the log goes to a temporary file while it is set. */
static char logpath[64];
static void log_capture(void)
{
    snprintf(logpath, sizeof logpath, "/tmp/tern-test-rpc-log-XXXXXX");
    int fd = mkstemp(logpath);
    assert_true(fd >= 0);
    tn_log_set_fd(fd);
}
static char *log_release(void)
{
    tn_log_set_fd(2);
    FILE *f = fopen(logpath, "r");
    assert_non_null(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(logpath);
    return text;
}

/* --- tests --------------------------------------------------------------------------- */

static void test_echo_every_lane(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    for (int lane = -1; lane < TN_LANE_COUNT; lane++)
        for (int i = 0; i < 20; i++) {
            char text[64];
            snprintf(text, sizeof text, "hello lane %d #%d", lane, i);
            expect_echo(&loop, cli, tn_rpc_addr(srv), lane, text);
        }
    /* Once more over the bulk connection (its own socket). */
    tn_buf_t b;
    echo_payload(&b, "bulk", 4);
    res_t res = {0};
    assert_int_equal(tn_rpc_call_bulk(cli, tn_rpc_addr(srv), TN_OP_ECHO, tn_buf_data(&b),
                                      tn_buf_size(&b), 0, on_res, &res, NULL),
                     0);
    tn_buf_fini(&b);
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, 0);
    assert_int_equal(res.http, 200);
    assert_memory_equal(res.body, "bulk", 4);
    res_fini(&res);
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(cli, &st);
    assert_int_equal(st.dials, 2); /* one connection per peer and socket */

    tn_buf_t m;
    tn_buf_init(&m);
    assert_int_equal(tn_rpc_metrics_write(cli, &m), 0);
    assert_int_equal(tn_buf_append(&m, "", 1), 0);
    /* 20 per lane (and the op's own, -1), plus the bulk call. */
    char want[160];
    snprintf(want, sizeof want, "tern_cluster_rpc_requests_total{op=\"echo\",outcome=\"ok\"} %d",
             20 * (TN_LANE_COUNT + 1) + 1);
    assert_non_null(strstr(tn_buf_data(&m), want));
    snprintf(want, sizeof want, "tern_cluster_rpc_request_seconds_count{op=\"echo\"} %d",
             20 * (TN_LANE_COUNT + 1) + 1);
    assert_non_null(strstr(tn_buf_data(&m), want));
    tn_buf_fini(&m);

    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

#define NCONC 600
static void test_many_concurrent(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    res_t *res = calloc(NCONC, sizeof *res);
    char text[64];
    for (int i = 0; i < NCONC; i++) {
        snprintf(text, sizeof text, "call %d of many", i);
        assert_int_equal(echo_call(cli, tn_rpc_addr(srv), i % TN_LANE_COUNT, text, &res[i], 20000),
                         0);
    }
    for (int i = 0; i < NCONC; i++) {
        tu_run_until(&loop, &res[i].done);
        snprintf(text, sizeof text, "call %d of many", i);
        assert_int_equal(res[i].status, 0);
        assert_int_equal(res[i].blen, strlen(text));
        assert_memory_equal(res[i].body, text, res[i].blen);
        res_fini(&res[i]);
    }
    free(res);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_wrong_secret_client(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open_with(&loop, "127.0.0.1:0", "not the secret", NULL, 0, NULL);
    log_capture();
    res_t res = {0};
    assert_int_equal(echo_call(cli, tn_rpc_addr(srv), -1, "let me in", &res, 5000), 0);
    tu_run_until(&loop, &res.done);
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(srv, &st);
    while (st.streams_refused == 0) {
        run_for(&loop, 10);
        tn_rpc_test_stats(srv, &st);
    }
    char *log = log_release();
    assert_int_not_equal(res.status, 0);
    assert_int_equal(st.requests_in, 0);
    assert_non_null(strstr(log, "did not prove the cluster secret"));
    assert_non_null(strstr(log, "127.0.0.1:")); /* with the peer's address */
    res_fini(&res);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void impostor(tn_rpc_opts_t *o)
{
    o->test_accept_any_proof = true;
}

static void test_impostor_server(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* Takes any client proof, but cannot make the server's. */
    tn_rpc_t *srv =
        tu_rpc_open_with(&loop, "127.0.0.1:0", "an impostor's guess", NULL, 0, impostor);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    log_capture();
    res_t res = {0};
    assert_int_equal(echo_call(cli, tn_rpc_addr(srv), -1, "secret stuff", &res, 5000), 0);
    tu_run_until(&loop, &res.done);
    char *log = log_release();
    assert_int_equal(res.status, UV_EACCES);
    assert_non_null(strstr(log, "could not prove the cluster secret"));
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(srv, &st);
    assert_int_equal(st.requests_in, 0);
    tn_rpc_test_stats(cli, &st);
    assert_true(st.auth_failures >= 1);
    res_fini(&res);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A raw QUIC client: streams that never prove anything. */
typedef struct {
    bool ready, closed;
    int err;
} raw_conn_t;

static void raw_ready(void *arg, tn_quic_conn_t *c)
{
    ((raw_conn_t *)arg)->ready = true;
}
static void raw_closed(void *arg, tn_quic_conn_t *c, int err)
{
    ((raw_conn_t *)arg)->closed = true;
    ((raw_conn_t *)arg)->err = err;
}
static const tn_quic_conn_cbs_t raw_cbs = {raw_ready, NULL, raw_closed};

typedef struct {
    int ended;
    int err;
    size_t got;
} raw_stream_t;
static void raw_data(void *arg, tn_quic_stream_t *s, const uint8_t *p, size_t n)
{
    ((raw_stream_t *)arg)->got += n;
}
static void raw_sclosed(void *arg, tn_quic_stream_t *s, int err)
{
    ((raw_stream_t *)arg)->ended++;
    ((raw_stream_t *)arg)->err = err;
}
static const tn_quic_stream_cbs_t raw_scbs = {raw_data, raw_sclosed};

static void ep_closed(void *arg)
{
    *(bool *)arg = true;
}

static tn_quic_ep_t *raw_ep(uv_loop_t *loop)
{
    struct sockaddr_in any;
    uv_ip4_addr("127.0.0.1", 0, &any);
    tn_quic_ep_opts_t qo;
    memset(&qo, 0, sizeof qo);
    qo.bind = (const struct sockaddr *)&any;
    tn_quic_ep_t *ep = NULL;
    char err[128];
    assert_int_equal(tn_quic_ep_open(loop, &qo, &ep, err, sizeof err), 0);
    return ep;
}

static void raw_ep_close(uv_loop_t *loop, tn_quic_ep_t *ep)
{
    bool done = false;
    tn_quic_ep_close(ep, ep_closed, &done);
    tu_run_until(loop, &done);
}

static void addr_of(const char *text, struct sockaddr_in *sa)
{
    char host[64];
    snprintf(host, sizeof host, "%s", text);
    char *colon = strrchr(host, ':');
    *colon = 0;
    assert_int_equal(uv_ip4_addr(host, atoi(colon + 1), sa), 0);
}

#define NFLOOD 100
static void test_garbage_and_flood(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "before");
    struct sockaddr_in sa;
    addr_of(tn_rpc_addr(srv), &sa);

    /* Garbage datagrams: random bytes, a truncated long header, a short
     * header for no connection, a lone byte. */
    uv_udp_t junk;
    uv_udp_init(&loop, &junk);
    srand(7);
    for (int i = 0; i < 300; i++) {
        uint8_t buf[1300];
        size_t n = 1 + (size_t)(rand() % (int)sizeof buf);
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rand();
        if (i % 3 == 0)
            buf[0] |= 0xc0; /* looks like a long header */
        if (i % 3 == 1)
            buf[0] = (buf[0] & 0x3f) | 0x40; /* a short header */
        uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
        uv_udp_try_send(&junk, &b, 1, (const struct sockaddr *)&sa);
    }
    run_for(&loop, 50);
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "after garbage");

    /* A flood of streams with no proof: some say nothing, some send
     * junk, some a wrong AUTH, some a frame past the pre-auth cap. */
    tn_quic_ep_t *ep = raw_ep(&loop);
    raw_conn_t rc = {0};
    tn_quic_conn_t *qc = NULL;
    assert_int_equal(tn_quic_connect(ep, (const struct sockaddr *)&sa, &raw_cbs, &rc, &qc), 0);
    tu_run_until(&loop, &rc.ready);
    static raw_stream_t rs[NFLOOD];
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < NFLOOD; i++) {
        tn_quic_stream_t *s = NULL;
        int orc = tn_quic_stream_open(qc, &raw_scbs, &rs[i], &s);
        if (orc == UV_EAGAIN)
            break;
        assert_int_equal(orc, 0);
        uint8_t frame[TN_WIRE_HDR + TN_WIRE_PROOF_LEN];
        memset(frame, 0xab, sizeof frame);
        switch (i % 4) {
        case 0:
            assert_int_equal(tn_quic_stream_write(s, "junk junk junk junk junk", 24), 0);
            break;
        case 1:
            tn_wire_hdr_encode(frame, TN_WF_AUTH, 0, TN_WIRE_PROOF_LEN);
            assert_int_equal(tn_quic_stream_write(s, frame, sizeof frame), 0);
            break;
        case 2:
            tn_wire_hdr_encode(frame, TN_WF_REQUEST, 1, 1000);
            assert_int_equal(tn_quic_stream_write(s, frame, TN_WIRE_HDR), 0);
            break;
        default:
            assert_int_equal(tn_quic_stream_write(s, "x", 1), 0);
            break;
        }
    }
    run_for(&loop, 200);
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "during the flood");
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(srv, &st);
    for (int tries = 0; st.streams_refused < 3 * NFLOOD / 4 && tries < 1000; tries++) {
        run_for(&loop, 10);
        tn_rpc_test_stats(srv, &st);
    }
    assert_true(st.streams_refused >= 3 * NFLOOD / 4);
    int resets = 0;
    for (int i = 0; i < NFLOOD; i++)
        if (rs[i].ended && i % 4 != 3)
            resets++;
    assert_true(resets > 0);        /* the refused ones were reset */
    assert_int_equal(rs[1].got, 0); /* no proof of the server for a wrong proof */
    raw_ep_close(&loop, ep);
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "after the flood");
    uv_close((uv_handle_t *)&junk, NULL);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A handler that holds its request until cancelled. */
typedef struct {
    int calls;
    int cancels;
    tn_rpc_req_t *held[8];
    int nheld;
} holder_t;

static void on_hold_cancel(void *arg, tn_rpc_req_t *req)
{
    holder_t *h = arg;
    h->cancels++;
    for (int i = 0; i < h->nheld; i++)
        if (h->held[i] == req) {
            h->held[i] = h->held[--h->nheld];
            break;
        }
    assert_true(tn_rpc_req_cancelled(req));
    tn_rpc_reply(req, 503, "application/json", "{}", 2);
}

static void on_hold(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    holder_t *h = arg;
    h->calls++;
    assert_true(h->nheld < 8);
    h->held[h->nheld++] = req;
    tn_rpc_req_on_cancel(req, on_hold_cancel, h);
}

static void propose_payload(tn_buf_t *b)
{
    tn_buf_init(b);
    assert_int_equal(tn_wire_put_bytes(b, "cmd", 3), 0);
}

static void test_cancel_reaches_handler(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    holder_t h = {0};
    tn_rpc_handler_t hs[] = {{TN_OP_META_PROPOSE, TN_RPC_OP_EXEMPT, on_hold, &h}};
    tn_rpc_t *srv = tu_rpc_open(&loop, hs, 1);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    tn_buf_t b;
    propose_payload(&b);
    res_t res = {0};
    tn_rpc_call_t *call = NULL;
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &res, &call),
                     0);
    while (h.calls == 0)
        run_for(&loop, 5);
    assert_false(res.done);
    tn_rpc_call_cancel(call);
    assert_false(res.done); /* not inside the cancel */
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, TN_ECLOSED);
    while (h.cancels == 0)
        run_for(&loop, 5);
    assert_int_equal(h.nheld, 0);
    res_fini(&res);

    /* A running request whose stream ends is cancelled too. */
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &res, &call),
                     0);
    while (h.calls == 1)
        run_for(&loop, 5);
    tu_rpc_close(&loop, cli); /* the call ends with TN_ECLOSED */
    assert_true(res.done);
    assert_int_equal(res.status, TN_ECLOSED);
    while (h.cancels == 1)
        run_for(&loop, 5);
    res_fini(&res);
    tn_buf_fini(&b);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void one_slot(tn_rpc_opts_t *o)
{
    o->max_messaging = 1;
}

static void test_cancel_while_queued(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    holder_t h = {0};
    tn_rpc_handler_t hs[] = {{TN_OP_META_PROPOSE, 0, on_hold, &h}};
    tn_rpc_t *srv = tu_rpc_open_with(&loop, "127.0.0.1:0", TU_RPC_SECRET, hs, 1, one_slot);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    tn_buf_t b;
    propose_payload(&b);
    res_t r1 = {0}, r2 = {0};
    tn_rpc_call_t *c2 = NULL;
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &r1, NULL),
                     0);
    while (h.calls == 0)
        run_for(&loop, 5);
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &r2, &c2),
                     0);
    tn_rpc_test_stats_t st;
    do {
        run_for(&loop, 5);
        tn_rpc_test_stats(srv, &st);
    } while (st.requests_in < 2);
    assert_int_equal(h.calls, 1); /* the second waits for the slot */
    tn_rpc_call_cancel(c2);
    tu_run_until(&loop, &r2.done);
    assert_int_equal(r2.status, TN_ECLOSED);
    do {
        run_for(&loop, 5);
        tn_rpc_test_stats(srv, &st);
    } while (st.queued_cancels < 1);
    /* The slot frees: the cancelled one never runs. */
    tn_rpc_req_t *first = h.held[0];
    h.nheld = 0;
    tn_rpc_reply(first, 200, "application/octet-stream", "ok", 2);
    tu_run_until(&loop, &r1.done);
    assert_int_equal(r1.status, 0);
    assert_int_equal(r1.http, 200);
    run_for(&loop, 50);
    assert_int_equal(h.calls, 1);
    res_fini(&r1);
    res_fini(&r2);
    tn_buf_fini(&b);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_timeout_and_ping(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    holder_t h = {0};
    tn_rpc_handler_t hs[] = {{TN_OP_META_PROPOSE, TN_RPC_OP_EXEMPT, on_hold, &h}};
    tn_rpc_t *srv = tu_rpc_open(&loop, hs, 1);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "warm up");
    tn_buf_t b;
    propose_payload(&b);
    res_t res = {0};
    int64_t t0 = tn_now_mono_ms();
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 200, on_res, &res, NULL),
                     0);
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, UV_ETIMEDOUT);
    assert_true(res.at_ms - t0 >= 190);
    /* The CANCEL reached the handler; the ping ran and was answered. */
    while (h.cancels == 0)
        run_for(&loop, 5);
    tn_rpc_test_stats_t st;
    do {
        run_for(&loop, 5);
        tn_rpc_test_stats(cli, &st);
    } while (st.pongs == 0);
    assert_int_equal(st.pings, 1);
    assert_int_equal(st.ping_closes, 0);
    /* The connection stays: the next call uses it. */
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "still here");
    tn_rpc_test_stats(cli, &st);
    assert_int_equal(st.dials, 1);

    tn_buf_t m;
    tn_buf_init(&m);
    assert_int_equal(tn_rpc_metrics_write(cli, &m), 0);
    assert_int_equal(tn_buf_append(&m, "", 1), 0);
    assert_non_null(
        strstr(tn_buf_data(&m),
               "tern_cluster_rpc_requests_total{op=\"meta_propose\",outcome=\"timeout\"} 1"));
    tn_buf_fini(&m);
    res_fini(&res);
    tn_buf_fini(&b);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void silent(tn_rpc_opts_t *o)
{
    o->test_silent_close = true;
}

static void test_restart_reset(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open_with(&loop, "127.0.0.1:0", TU_RPC_SECRET, NULL, 0, silent);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    char addr[80];
    snprintf(addr, sizeof addr, "%s", tn_rpc_addr(srv));
    expect_echo(&loop, cli, addr, -1, "first life");
    /* The server goes away without a word, as a crash would, and comes
     * back on the same port with the same secret. */
    tu_rpc_close(&loop, srv);
    srv = tu_rpc_open_with(&loop, addr, TU_RPC_SECRET, NULL, 0, silent);
    res_t res = {0};
    int64_t t0 = tn_now_mono_ms();
    assert_int_equal(echo_call(cli, addr, -1, "are you there", &res, 20000), 0);
    tu_run_until(&loop, &res.done);
    /* The old connection is dropped on the reset, long before the
     * deadline or the idle timeout. */
    assert_int_equal(res.status, UV_ECONNRESET);
    assert_true(res.at_ms - t0 < 10000);
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(cli, &st);
    assert_int_equal(st.conn_resets, 1);
    res_fini(&res);
    expect_echo(&loop, cli, addr, -1, "second life");
    tn_rpc_test_stats(cli, &st);
    assert_int_equal(st.dials, 2);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void short_reply_write(tn_rpc_opts_t *o)
{
    o->reply_write_timeout_ms = 300;
}

/* A caller that stops acknowledging (its path delivers nothing back):
 * the server resets the stream holding its reply once the reply write
 * deadline passes, and keeps serving. */
static void test_reply_write_deadline(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv =
        tu_rpc_open_with(&loop, "127.0.0.1:0", TU_RPC_SECRET, NULL, 0, short_reply_write);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    char addr[80];
    snprintf(addr, sizeof addr, "%s", tn_rpc_addr(srv));
    /* Every stream of the control lane open and proved, so the call below
     * is sent at once and only its reply waits for the caller. */
    for (int i = 0; i < 2 * TN_LANE_CONTROL_STREAMS; i++)
        expect_echo(&loop, cli, addr, -1, "before");
    tn_rpc_test_deaf(cli, true);
    uint8_t body[1000];
    memset(body, 'x', sizeof body);
    res_t res = {0};
    assert_int_equal(
        tn_rpc_call(cli, addr, TN_OP_ECHO, body, sizeof body, 60000, on_res, &res, NULL), 0);
    tn_rpc_test_stats_t st;
    do {
        run_for(&loop, 20);
        tn_rpc_test_stats(srv, &st);
    } while (st.reply_write_timeouts == 0);
    assert_int_equal(st.reply_write_timeouts, 1);
    /* The caller hears again: its call ends, and the server answers the
     * next one. */
    tn_rpc_test_deaf(cli, false);
    tu_run_until(&loop, &res.done);
    expect_echo(&loop, cli, addr, -1, "after");
    res_fini(&res);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_ping_closes_dead_connection(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    holder_t h = {0};
    tn_rpc_handler_t hs[] = {{TN_OP_META_PROPOSE, TN_RPC_OP_EXEMPT, on_hold, &h}};
    tn_rpc_t *srv = tu_rpc_open_with(&loop, "127.0.0.1:0", TU_RPC_SECRET, hs, 1, silent);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    char addr[80];
    snprintf(addr, sizeof addr, "%s", tn_rpc_addr(srv));
    expect_echo(&loop, cli, addr, -1, "alive");
    tn_buf_t b;
    propose_payload(&b);
    res_t res = {0};
    assert_int_equal(tn_rpc_call(cli, addr, TN_OP_META_PROPOSE, tn_buf_data(&b), tn_buf_size(&b),
                                 500, on_res, &res, NULL),
                     0);
    while (h.calls == 0)
        run_for(&loop, 5);
    /* The server vanishes without a word and nothing comes back. */
    tu_rpc_close(&loop, srv);
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, UV_ETIMEDOUT);
    /* The ping after the deadline goes unanswered: the connection is
     * closed (1 s later), so the next call would dial again. */
    tn_rpc_test_stats_t st;
    do {
        run_for(&loop, 20);
        tn_rpc_test_stats(cli, &st);
    } while (st.ping_closes == 0);
    assert_int_equal(st.pings, 1);
    assert_int_equal(st.pongs, 0);
    res_fini(&res);
    tn_buf_fini(&b);
    tu_rpc_close(&loop, cli);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_payload_cap(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    res_t res = {0};
    size_t max = TN_WIRE_MAX_PAYLOAD - 1; /* the opcode takes a byte */
    uint8_t *big = malloc(max);
    memset(big, 'z', max);
    assert_int_equal(
        tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_ECHO, big, max + 1, 0, on_res, &res, NULL),
        UV_EINVAL);
    /* The largest request: exactly TN_WIRE_MAX_PAYLOAD with its opcode
     * (an op nobody serves, so the answer is a small 400). */
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), 200, big, max, 60000, on_res, &res, NULL),
                     0);
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, 0);
    assert_int_equal(res.http, 400);
    res_fini(&res);
    /* A near-largest echo, whose reply (status, content type, body) fits
     * the cap too. */
    tn_buf_t b;
    size_t blen = max - 64;
    echo_payload(&b, big, blen);
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_ECHO, tn_buf_data(&b),
                                 tn_buf_size(&b), 60000, on_res, &res, NULL),
                     0);
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, 0);
    assert_int_equal(res.http, 200);
    assert_int_equal(res.blen, blen);
    assert_memory_equal(res.body, big, res.blen);
    res_fini(&res);
    tn_buf_fini(&b);
    free(big);

    /* A frame header past the cap on an authenticated stream: the server
     * resets the stream before the payload arrives. */
    struct sockaddr_in sa;
    addr_of(tn_rpc_addr(srv), &sa);
    tn_quic_ep_t *ep = raw_ep(&loop);
    raw_conn_t rc = {0};
    tn_quic_conn_t *qc = NULL;
    assert_int_equal(tn_quic_connect(ep, (const struct sockaddr *)&sa, &raw_cbs, &rc, &qc), 0);
    tu_run_until(&loop, &rc.ready);
    uint8_t ekm[TN_QUIC_EKM_LEN], frame[TN_WIRE_HDR + TN_WIRE_PROOF_LEN];
    assert_int_equal(tn_quic_conn_ekm(qc, ekm), 0);
    tn_wire_hdr_encode(frame, TN_WF_AUTH, 0, TN_WIRE_PROOF_LEN);
    assert_int_equal(tn_wire_proof((const uint8_t *)TU_RPC_SECRET, strlen(TU_RPC_SECRET), true, ekm,
                                   frame + TN_WIRE_HDR),
                     0);
    raw_stream_t rs = {0};
    tn_quic_stream_t *s = NULL;
    assert_int_equal(tn_quic_stream_open(qc, &raw_scbs, &rs, &s), 0);
    assert_int_equal(tn_quic_stream_write(s, frame, sizeof frame), 0);
    while (rs.got < sizeof frame)
        run_for(&loop, 5); /* the server's proof came back */
    /* A header saying MAX + 1: tn_wire_hdr_encode writes any length. */
    tn_wire_hdr_encode(frame, TN_WF_REQUEST, 1, TN_WIRE_MAX_PAYLOAD + 1);
    assert_int_equal(tn_quic_stream_write(s, frame, TN_WIRE_HDR), 0);
    while (!rs.ended)
        run_for(&loop, 5);
    assert_int_equal(rs.err, UV_ECONNRESET);
    raw_ep_close(&loop, ep);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_unknown_op(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    /* An opcode nobody knows, one known but not served here, and an echo
     * with a trailing byte. */
    uint8_t ops[] = {200, TN_OP_JOIN, TN_OP_ECHO};
    for (int i = 0; i < 3; i++) {
        res_t res = {0};
        uint8_t payload[] = {0, 0, 0, 1, 'a', 'X'};
        assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), ops[i], payload, sizeof payload, 0,
                                     on_res, &res, NULL),
                         0);
        tu_run_until(&loop, &res.done);
        assert_int_equal(res.status, 0);
        assert_int_equal(res.http, 400);
        assert_non_null(strstr((char *)res.body, "unsupported rpc operation"));
        res_fini(&res);
    }
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "still fine");
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Addresses: a peer named by host name is resolved before its dial;
 * binding every interface; bad bind addresses and an empty secret. */
static void test_addresses(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    const char *colon = strrchr(tn_rpc_addr(srv), ':');
    char named[80];
    snprintf(named, sizeof named, "localhost%s", colon);
    expect_echo(&loop, cli, named, -1, "by name");
    res_t res = {0};
    assert_int_equal(echo_call(cli, "no-such-host.invalid:4150", -1, "nobody", &res, 10000), 0);
    tu_run_until(&loop, &res.done);
    assert_int_equal(res.status, UV_ECONNREFUSED);
    res_fini(&res);
    assert_int_equal(echo_call(cli, "localhost", -1, "x", &res, 0), UV_EINVAL);
    assert_int_equal(echo_call(cli, "127.0.0.1:0", -1, "x", &res, 0), UV_EINVAL);
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);

    /* Every interface (one dual-stack socket where the host has IPv6)
     * serves and dials IPv4 peers. */
    srv = tu_rpc_open_with(&loop, ":0", TU_RPC_SECRET, NULL, 0, NULL);
    cli = tu_rpc_open_with(&loop, ":0", TU_RPC_SECRET, NULL, 0, NULL);
    colon = strrchr(tn_rpc_addr(srv), ':');
    snprintf(named, sizeof named, "127.0.0.1%s", colon);
    expect_echo(&loop, cli, named, -1, "any interface");
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);

    tn_rpc_opts_t o;
    memset(&o, 0, sizeof o);
    o.secret = (const uint8_t *)TU_RPC_SECRET;
    o.secret_len = strlen(TU_RPC_SECRET);
    tn_rpc_t *r = NULL;
    char err[256];
    const char *bad[] = {"nonsense", "127.0.0.1:99999", NULL};
    for (int i = 0; i < 3; i++) {
        o.bind = bad[i];
        assert_int_equal(tn_rpc_open(&loop, &o, &r, err, sizeof err), TN_ECONFIG);
        assert_non_null(strstr(err, "rpc: bind address"));
    }
    o.bind = "127.0.0.1:0";
    o.secret_len = 0;
    assert_int_equal(tn_rpc_open(&loop, &o, &r, err, sizeof err), TN_ECONFIG);
    assert_non_null(strstr(err, "secret"));
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void fast_dial(tn_rpc_opts_t *o)
{
    o->dial_timeout_ms = 300;
}

static void test_backoff(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* A port that was free a moment ago: nothing answers there. */
    uv_udp_t u;
    char addr[64];
    tu_dead_peer(&loop, &u, addr, sizeof addr);
    uv_close((uv_handle_t *)&u, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);

    tn_rpc_t *cli = tu_rpc_open_with(&loop, "127.0.0.1:0", TU_RPC_SECRET, NULL, 0, fast_dial);
    res_t r1 = {0}, r2 = {0};
    assert_int_equal(echo_call(cli, addr, -1, "anyone", &r1, 10000), 0);
    assert_int_equal(echo_call(cli, addr, -1, "anyone else", &r2, 10000), 0);
    tu_run_until(&loop, &r1.done);
    tu_run_until(&loop, &r2.done);
    /* Both waited on the one dial, and both failed with it. */
    assert_int_equal(r1.status, UV_ECONNREFUSED);
    assert_int_equal(r2.status, UV_ECONNREFUSED);
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(cli, &st);
    assert_int_equal(st.dials, 1);
    /* Within the backoff: fail fast, without a dial. */
    res_t r3 = {0};
    assert_int_equal(echo_call(cli, addr, -1, "again", &r3, 10000), UV_ECONNREFUSED);
    assert_false(r3.done);
    tn_buf_t m;
    tn_buf_init(&m);
    assert_int_equal(tn_rpc_metrics_write(cli, &m), 0);
    assert_int_equal(tn_buf_append(&m, "", 1), 0);
    /* Two failed with the dial, one failed fast: all counted; only the two
     * that waited have a duration. */
    assert_non_null(strstr(
        tn_buf_data(&m), "tern_cluster_rpc_requests_total{op=\"echo\",outcome=\"unavailable\"} 3"));
    assert_non_null(
        strstr(tn_buf_data(&m), "tern_cluster_rpc_request_seconds_count{op=\"echo\"} 2"));
    tn_buf_fini(&m);
    /* After it (250 ms for the first failure): a new dial. */
    run_for(&loop, 400);
    assert_int_equal(echo_call(cli, addr, -1, "later", &r3, 10000), 0);
    tu_run_until(&loop, &r3.done);
    assert_int_equal(r3.status, UV_ECONNREFUSED);
    tn_rpc_test_stats(cli, &st);
    assert_int_equal(st.dials, 2);
    res_fini(&r1);
    res_fini(&r2);
    res_fini(&r3);
    tu_rpc_close(&loop, cli);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Close with calls in every state: waiting for a dial, waiting for a
 * stream's proof, sent and held by the handler, cancelled and not yet
 * told. Each callback runs once, with TN_ECLOSED. */
static void test_close_with_pending(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    holder_t h = {0};
    tn_rpc_handler_t hs[] = {{TN_OP_META_PROPOSE, TN_RPC_OP_EXEMPT, on_hold, &h}};
    tn_rpc_t *srv = tu_rpc_open(&loop, hs, 1);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    expect_echo(&loop, cli, tn_rpc_addr(srv), TN_LANE_CONTROL, "warm");
    tn_buf_t b;
    propose_payload(&b);
    res_t held = {0}, cancelled = {0}, dialing = {0}, fresh = {0};
    tn_rpc_call_t *c = NULL;
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &held, NULL),
                     0);
    while (h.calls == 0)
        run_for(&loop, 5);
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &cancelled, &c),
                     0);
    /* A lane with no stream yet: its call waits for the proof. */
    assert_int_equal(echo_call(cli, tn_rpc_addr(srv), TN_LANE_ACK, "fresh", &fresh, 20000), 0);
    /* A peer nobody serves: the call waits for the dial. */
    assert_int_equal(echo_call(cli, "127.0.0.1:9", -1, "nobody", &dialing, 20000), 0);
    tn_rpc_call_cancel(c);
    tu_rpc_close(&loop, cli);
    res_t *all[] = {&held, &cancelled, &dialing, &fresh};
    for (int i = 0; i < 4; i++) {
        assert_true(all[i]->done);
        assert_int_equal(all[i]->status, TN_ECLOSED);
        res_fini(all[i]);
    }
    while (h.cancels == 0)
        run_for(&loop, 5);
    tn_buf_fini(&b);
    tu_rpc_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A handler that answers a cancelled request later, as one waiting on
 * the engine does: the cancel only notes it. */
static void on_keep_cancel(void *arg, tn_rpc_req_t *req)
{
    ((holder_t *)arg)->cancels++;
}

static void on_keep(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    holder_t *h = arg;
    h->calls++;
    assert_true(h->nheld < 8);
    h->held[h->nheld++] = req;
    tn_rpc_req_on_cancel(req, on_keep_cancel, h);
}

static void on_flag(void *arg)
{
    *(bool *)arg = true;
}

/* The reply that ends a closing server's last request does not run the
 * close callback inside tn_rpc_reply: the handler that answered still
 * holds its own state, which that callback may free (the daemon's close
 * freed the replica-set server under its own engine callback so). */
static void test_close_callback_after_last_reply(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    holder_t h = {0};
    tn_rpc_handler_t hs[] = {{TN_OP_META_PROPOSE, TN_RPC_OP_EXEMPT, on_keep, &h}};
    tn_rpc_t *srv = tu_rpc_open(&loop, hs, 1);
    tn_rpc_t *cli = tu_rpc_open(&loop, NULL, 0);
    tn_buf_t b;
    propose_payload(&b);
    res_t res = {0};
    assert_int_equal(tn_rpc_call(cli, tn_rpc_addr(srv), TN_OP_META_PROPOSE, tn_buf_data(&b),
                                 tn_buf_size(&b), 20000, on_res, &res, NULL),
                     0);
    while (h.calls == 0)
        run_for(&loop, 5);
    bool closed = false;
    tn_rpc_close(srv, on_flag, &closed);
    while (h.cancels == 0)
        run_for(&loop, 5);
    run_for(&loop, 200); /* the endpoint's close ends: only the request holds it */
    assert_false(closed);
    assert_int_equal(h.nheld, 1);
    tn_rpc_reply(h.held[0], 200, "application/json", "{}", 2);
    assert_false(closed); /* not inside the reply */
    tu_run_until(&loop, &closed);
    tu_run_until(&loop, &res.done);
    assert_int_not_equal(res.status, 0); /* the stream went with the endpoint */
    res_fini(&res);
    tn_buf_fini(&b);
    tu_rpc_close(&loop, cli);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void oom_tweak(tn_rpc_opts_t *o)
{
    o->dial_timeout_ms = 300;
}

/* Out of memory at every point of a first call (open, dial, streams,
 * proof, request, reply): the call fails with an error or succeeds, the
 * server keeps serving, and everything closes. */
static void test_out_of_memory(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_buf_t b;
    echo_payload(&b, "oom", 3);
    /* How many allocations one first call makes. */
    unsigned long before = tn_alloc_count();
    tn_rpc_t *srv = tu_rpc_open(&loop, NULL, 0);
    tn_rpc_t *cli = tu_rpc_open_with(&loop, "127.0.0.1:0", TU_RPC_SECRET, NULL, 0, oom_tweak);
    expect_echo(&loop, cli, tn_rpc_addr(srv), -1, "count");
    unsigned long total = tn_alloc_count() - before;
    tu_rpc_close(&loop, cli);
    tu_rpc_close(&loop, srv);
    unsigned long step = total / 80 ? total / 80 : 1;
    int ok = 0, failed = 0;
    for (unsigned long n = 0; n <= total + step; n += step) {
        srv = tu_rpc_open(&loop, NULL, 0);
        tn_alloc_fail_after((long)n);
        tn_rpc_opts_t o;
        memset(&o, 0, sizeof o);
        o.bind = "127.0.0.1:0";
        o.secret = (const uint8_t *)TU_RPC_SECRET;
        o.secret_len = strlen(TU_RPC_SECRET);
        o.dial_timeout_ms = 300;
        tn_rpc_t *c = NULL;
        char err[256];
        int rc = tn_rpc_open(&loop, &o, &c, err, sizeof err);
        if (rc != 0) {
            assert_int_equal(rc, UV_ENOMEM);
            tn_alloc_fail_after(-1);
            failed++;
            tu_rpc_close(&loop, srv);
            continue;
        }
        res_t res = {0};
        rc = tn_rpc_call(c, tn_rpc_addr(srv), TN_OP_ECHO, tn_buf_data(&b), tn_buf_size(&b), 500,
                         on_res, &res, NULL);
        if (rc == 0) {
            tu_run_until(&loop, &res.done);
            tn_alloc_fail_after(-1);
            if (res.status == 0)
                ok++;
            else
                failed++;
        } else {
            tn_alloc_fail_after(-1);
            assert_int_equal(rc, UV_ENOMEM);
            failed++;
        }
        res_fini(&res);
        tu_rpc_close(&loop, c);
        /* The server still serves. */
        tn_rpc_t *probe = tu_rpc_open(&loop, NULL, 0);
        expect_echo(&loop, probe, tn_rpc_addr(srv), -1, "after");
        tu_rpc_close(&loop, probe);
        tu_rpc_close(&loop, srv);
    }
    assert_true(ok >= 1);     /* with room for every allocation */
    assert_true(failed >= 1); /* and without */
    tn_buf_fini(&b);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_every_lane),
        cmocka_unit_test(test_many_concurrent),
        cmocka_unit_test(test_wrong_secret_client),
        cmocka_unit_test(test_impostor_server),
        cmocka_unit_test(test_garbage_and_flood),
        cmocka_unit_test(test_cancel_reaches_handler),
        cmocka_unit_test(test_cancel_while_queued),
        cmocka_unit_test(test_timeout_and_ping),
        cmocka_unit_test(test_restart_reset),
        cmocka_unit_test(test_ping_closes_dead_connection),
        cmocka_unit_test(test_payload_cap),
        cmocka_unit_test(test_unknown_op),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_close_with_pending),
        cmocka_unit_test(test_close_callback_after_last_reply),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_reply_write_deadline),
    };
    if (getenv("TN_TEST_FILTER"))
        cmocka_set_test_filter(getenv("TN_TEST_FILTER"));
    if (getenv("TN_TEST_DEBUG"))
        tn_log_level = TN_LOG_DEBUG;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
