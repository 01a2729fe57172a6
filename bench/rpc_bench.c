/* tern-rpc-bench: the node RPC echo round trip over QUIC on loopback,
 * against a plain TCP echo round trip measured in the same run on the
 * same loop (the reference the ratios are taken to).
 *
 *   1. TCP, one connection, one message in flight: the floor of a round
 *      trip through the kernel and the loop.
 *   2. TCP, 64 connections, one message in flight on each.
 *   3. RPC, one stream (a client whose lanes are one stream each), one
 *      call in flight: a round trip through QUIC, TLS, the framer and the
 *      server's op table.
 *   4. RPC, one connection, one lane (16 streams), 64 calls in flight.
 *   5. RPC, all four lanes (52 streams), 64 calls in flight on each.
 * Each run reports calls/s, p50 and p99, and the ratio of its rate to the
 * TCP run with as many messages in flight (1 or 64 x lanes for the
 * reference of runs 4 and 5: 64 connections).
 *
 * Client and server share one loop and one core, as two nodes' RPC does
 * not: the figures are the cost of the transport per call, not a
 * cluster's throughput.
 *
 * Usage: tern-rpc-bench [--seconds N] [--size BYTES] */
#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAMPLES 4000000
#define SECRET      "tern-rpc-bench secret"

static double seconds = 3.0;
static size_t size = 64;
static uv_loop_t loop;

typedef struct {
    double rate, p50_us, p99_us;
    uint64_t errors;
} result_t;

static int64_t *samples;
static size_t nsamples;

static void record(int64_t ns)
{
    if (nsamples < MAX_SAMPLES)
        samples[nsamples++] = ns;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static result_t summarise(int64_t start, int64_t end, uint64_t done, uint64_t errors)
{
    result_t r = {0};
    r.rate = (double)done / ((double)(end - start) / 1e9);
    r.errors = errors;
    if (nsamples) {
        qsort(samples, nsamples, sizeof *samples, cmp_i64);
        size_t mid = nsamples / 2, high = nsamples * 99 / 100;
        r.p50_us = (double)samples[mid] / 1e3;
        r.p99_us = (double)samples[high] / 1e3;
    }
    return r;
}

/* --- TCP reference ------------------------------------------------------------------ */

typedef struct {
    uv_tcp_t h;
    char *buf; /* client: the message; server: unused */
    size_t got;
    int64_t sent_ns;
    bool server;
    uv_write_t wr;
} tconn_t;

static int64_t run_end;
static uint64_t run_done, run_errors;
static int run_open; /* clients still running */
static uv_tcp_t tlisten;

static void on_talloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    b->base = malloc(65536);
    b->len = 65536;
}

static void on_tfree(uv_handle_t *h)
{
    tconn_t *c = h->data;
    free(c->buf);
    free(c);
}

typedef struct {
    uv_write_t wr;
    char data[];
} echo_wr_t;

static void on_echo_written(uv_write_t *w, int status)
{
    free(w);
}

static void tclient_send(tconn_t *c);

static void on_tread(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    tconn_t *c = s->data;
    if (n < 0) {
        free(b->base);
        if (!uv_is_closing((uv_handle_t *)s))
            uv_close((uv_handle_t *)s, on_tfree);
        return;
    }
    if (c->server && n > 0) {
        echo_wr_t *w = malloc(sizeof *w + (size_t)n);
        memcpy(w->data, b->base, (size_t)n);
        uv_buf_t out = uv_buf_init(w->data, (unsigned)n);
        uv_write(&w->wr, s, &out, 1, on_echo_written);
    } else if (n > 0) {
        c->got += (size_t)n;
        if (c->got >= size) {
            c->got -= size;
            int64_t now = tn_now_mono_ns();
            record(now - c->sent_ns);
            run_done++;
            if (now < run_end) {
                tclient_send(c);
            } else {
                run_open--;
                uv_close((uv_handle_t *)s, on_tfree);
            }
        }
    }
    free(b->base);
}

static void on_twritten(uv_write_t *w, int status)
{
    if (status != 0)
        run_errors++;
}

static void tclient_send(tconn_t *c)
{
    c->sent_ns = tn_now_mono_ns();
    uv_buf_t b = uv_buf_init(c->buf, (unsigned)size);
    uv_write(&c->wr, (uv_stream_t *)&c->h, &b, 1, on_twritten);
}

static void on_tconnection(uv_stream_t *srv, int status)
{
    tconn_t *c = calloc(1, sizeof *c);
    c->server = true;
    uv_tcp_init(&loop, &c->h);
    c->h.data = c;
    uv_accept(srv, (uv_stream_t *)&c->h);
    uv_tcp_nodelay(&c->h, 1);
    uv_read_start((uv_stream_t *)&c->h, on_talloc, on_tread);
}

static void on_tconnected(uv_connect_t *req, int status)
{
    tconn_t *c = req->data;
    free(req);
    if (status != 0) {
        fprintf(stderr, "tcp connect: %s\n", uv_strerror(status));
        exit(1);
    }
    uv_tcp_nodelay(&c->h, 1);
    uv_read_start((uv_stream_t *)&c->h, on_talloc, on_tread);
    tclient_send(c);
}

static result_t run_tcp(int conns, const struct sockaddr *addr)
{
    nsamples = 0;
    run_done = run_errors = 0;
    int64_t start = tn_now_mono_ns();
    run_end = start + (int64_t)(seconds * 1e9);
    run_open = conns;
    for (int i = 0; i < conns; i++) {
        tconn_t *c = calloc(1, sizeof *c);
        c->buf = malloc(size);
        memset(c->buf, 'e', size);
        uv_tcp_init(&loop, &c->h);
        c->h.data = c;
        uv_connect_t *req = malloc(sizeof *req);
        req->data = c;
        uv_tcp_connect(req, &c->h, addr, on_tconnected);
    }
    while (run_open > 0)
        uv_run(&loop, UV_RUN_ONCE);
    int64_t end = tn_now_mono_ns();
    /* Let the server side see the closes. */
    for (int i = 0; i < 10; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    return summarise(start, end, run_done, run_errors);
}

/* --- RPC ------------------------------------------------------------------------------ */

typedef struct {
    tn_rpc_t *cli;
    const char *addr;
    int lane;
    int64_t start_ns;
} slot_t;

static tn_buf_t payload;

static void rpc_issue(slot_t *s);

static void on_reply(void *arg, int status, const tn_wire_reply_t *rep, const char *err)
{
    slot_t *s = arg;
    int64_t now = tn_now_mono_ns();
    if (status != 0 || rep->status != 200) {
        if (run_errors++ == 0)
            fprintf(stderr, "echo failed: %s\n", status ? err : "status not 200");
    } else {
        record(now - s->start_ns);
        run_done++;
    }
    if (now < run_end)
        rpc_issue(s);
    else
        run_open--;
}

static void rpc_issue(slot_t *s)
{
    s->start_ns = tn_now_mono_ns();
    int rc = tn_rpc_call_on(s->cli, s->addr, s->lane, false, TN_OP_ECHO, tn_buf_data(&payload),
                            tn_buf_size(&payload), 10000, on_reply, s, NULL);
    if (rc != 0) {
        fprintf(stderr, "tn_rpc_call: %s\n", tn_strerror(rc));
        exit(1);
    }
}

static tn_rpc_t *rpc_open(const char *secret, unsigned lane_streams)
{
    tn_rpc_opts_t o;
    memset(&o, 0, sizeof o);
    o.bind = "127.0.0.1:0";
    o.secret = (const uint8_t *)secret;
    o.secret_len = strlen(secret);
    o.lane_streams = lane_streams;
    tn_rpc_t *r;
    char err[256];
    if (tn_rpc_open(&loop, &o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return r;
}

static void on_closed(void *arg)
{
    *(bool *)arg = true;
}

static void rpc_close(tn_rpc_t *r)
{
    bool done = false;
    tn_rpc_close(r, on_closed, &done);
    while (!done)
        uv_run(&loop, UV_RUN_ONCE);
}

/* lanes: how many lanes (1 = the produce lane only, 4 = all). */
static result_t run_rpc(tn_rpc_t *cli, const char *addr, int per_lane, int lanes)
{
    /* Warm up: the dial and every stream's proof exchange happen before
     * the clock starts. */
    nsamples = 0;
    run_done = run_errors = 0;
    int n = per_lane * lanes;
    slot_t *slots = calloc((size_t)n, sizeof *slots);
    for (int i = 0; i < n; i++) {
        slots[i].cli = cli;
        slots[i].addr = addr;
        slots[i].lane = lanes == 1 ? TN_LANE_PRODUCE : i % lanes;
    }
    run_end = tn_now_mono_ns() + 300000000;
    run_open = n;
    for (int i = 0; i < n; i++)
        rpc_issue(&slots[i]);
    while (run_open > 0)
        uv_run(&loop, UV_RUN_ONCE);

    nsamples = 0;
    run_done = run_errors = 0;
    int64_t start = tn_now_mono_ns();
    run_end = start + (int64_t)(seconds * 1e9);
    run_open = n;
    for (int i = 0; i < n; i++)
        rpc_issue(&slots[i]);
    while (run_open > 0)
        uv_run(&loop, UV_RUN_ONCE);
    int64_t end = tn_now_mono_ns();
    free(slots);
    return summarise(start, end, run_done, run_errors);
}

static void row(const char *name, int inflight, result_t r, double ref)
{
    printf("| %s | %d | %.0f | %.0f us | %.0f us | %.2f |%s\n", name, inflight, r.rate, r.p50_us,
           r.p99_us, ref > 0 ? r.rate / ref : 0, r.errors ? " errors!" : "");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            size = (size_t)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s [--seconds N] [--size BYTES]\n", argv[0]);
            return 2;
        }
    }
    if (seconds <= 0 || size == 0 || size > 1024 * 1024) {
        fprintf(stderr, "--seconds must be > 0 and --size 1..1048576\n");
        return 2;
    }
    tn_log_level = TN_LOG_WARN;
    samples = malloc(MAX_SAMPLES * sizeof *samples);
    uv_loop_init(&loop);

    struct sockaddr_in taddr;
    uv_ip4_addr("127.0.0.1", 0, &taddr);
    uv_tcp_init(&loop, &tlisten);
    uv_tcp_bind(&tlisten, (const struct sockaddr *)&taddr, 0);
    int len = sizeof taddr;
    uv_tcp_getsockname(&tlisten, (struct sockaddr *)&taddr, &len);
    if (uv_listen((uv_stream_t *)&tlisten, 256, on_tconnection) != 0) {
        fprintf(stderr, "tcp listen failed\n");
        return 1;
    }
    result_t tcp1 = run_tcp(1, (const struct sockaddr *)&taddr);
    result_t tcp64 = run_tcp(64, (const struct sockaddr *)&taddr);
    result_t tcp256 = run_tcp(256, (const struct sockaddr *)&taddr);

    char *body = malloc(size);
    memset(body, 'q', size);
    tn_buf_init(&payload);
    tn_wire_put_bytes(&payload, body, size);
    free(body);

    tn_rpc_t *srv = rpc_open(SECRET, 0);
    tn_rpc_t *one = rpc_open(SECRET, 1);
    result_t r1 = run_rpc(one, tn_rpc_addr(srv), 1, 1);
    rpc_close(one);
    tn_rpc_t *cli = rpc_open(SECRET, 0);
    result_t r64 = run_rpc(cli, tn_rpc_addr(srv), 64, 1);
    result_t rall = run_rpc(cli, tn_rpc_addr(srv), 64, 4);
    rpc_close(cli);
    rpc_close(srv);
    tn_buf_fini(&payload);

    printf("node RPC echo, %zu-byte payload, loopback, client and server on one loop, %.1f s "
           "per run\n\n",
           size, seconds);
    printf("| run | in flight | calls/s | p50 | p99 | x TCP same in flight |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    row("TCP echo, 1 connection", 1, tcp1, tcp1.rate);
    row("TCP echo, 64 connections", 64, tcp64, tcp64.rate);
    row("TCP echo, 256 connections", 256, tcp256, tcp256.rate);
    row("RPC, one stream", 1, r1, tcp1.rate);
    row("RPC, one connection, one lane (16 streams)", 64, r64, tcp64.rate);
    row("RPC, all lanes (52 streams)", 256, rall, tcp256.rate);

    uv_close((uv_handle_t *)&tlisten, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&loop);
    free(samples);
    if (rc != 0) {
        fprintf(stderr, "uv_loop_close: %s\n", uv_strerror(rc));
        return 1;
    }
    return r1.errors || r64.errors || rall.errors ? 1 : 0;
}
