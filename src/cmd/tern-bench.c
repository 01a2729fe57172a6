/* tern-bench: an NSQ TCP load generator. It speaks only the protocol, so
 * it measures tern and nsqd alike.
 *
 * DESIGN:
 *   1. P producer connections publish for --duration (or until --count
 *      messages were acknowledged): PUB when --batch is 1, else MPUB of
 *      --batch messages, keeping --pipeline requests in flight each. Every
 *      body starts with an 8-byte id (producer << 40 | sequence), so the
 *      consumers can check a ledger.
 *   2. C consumer connections SUB to one channel with RDY --rdy and FIN
 *      every message as it arrives, from the start.
 *   3. When publishing stops, consumers drain until every acknowledged
 *      message has arrived or --drain-timeout passes.
 *   4. Report: publish msgs/s and MiB/s, publish-ack latency percentiles
 *      (one sample per request), consume msgs/s, and the ledger: acked,
 *      received, missing (acked, never received), duplicates
 *      (redeliveries). Exit status 1 when anything acknowledged is missing.
 *
 * One libuv loop drives every connection. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/buf.h"
#include "core/config.h"
#include "core/time.h"
#include "proto/nsq/codec.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct {
    const char *host;
    int port;
    int producers;
    int consumers;
    int batch;
    int pipeline;
    int size;
    int rdy;
    int64_t duration_ms;
    int64_t count;
    int64_t drain_ms;
    const char *topic;
    const char *channel;
    int http_port;        /* > 0: producers publish over HTTP to this port */
    const char *http_get; /* with http_port: GET this path instead (e.g. /ping) */
} opts_t;

typedef struct conn_s conn_t;

typedef struct {
    opts_t o;
    uv_loop_t *loop;
    conn_t **conns;
    int nconns;
    bool publishing;
    int64_t start_ms;
    int64_t pub_end_ms;
    int64_t consume_start_ms;
    int64_t last_recv_ms;
    uint64_t sent;  /* messages sent in publishes */
    uint64_t acked; /* messages acknowledged by the broker */
    uint64_t pub_bytes;
    uint64_t received; /* message frames */
    uint64_t unique;
    uint64_t duplicates;
    uint64_t errors;
    uint32_t *lat_us; /* publish-ack latency samples */
    size_t nlat;
    size_t lat_cap;
    uint8_t **seen; /* per producer: deliveries of each sequence */
    uint64_t *seen_cap;
    uint64_t *acked_upto; /* per producer: sequences acknowledged, in order */
    uv_timer_t tick;
    bool done;
    char *pattern;      /* 'a'..'z' repeated, size + 26 bytes: bodies are cut from it */
    char pub_line[300]; /* "PUB <topic>\n" or "MPUB <topic>\n" */
    int pub_line_len;
} bench_t;

struct conn_s {
    uv_tcp_t tcp;
    uv_connect_t connect;
    bench_t *b;
    int id;
    bool producer;
    bool ready;
    bool http;
    tn_buf_t in;
    /* producer */
    uint64_t next_seq;
    int inflight;
    int64_t sent_ms[1024]; /* ring of send times of requests in flight */
    uint64_t first_seq[1024];
    int head;
    int tail;
    /* consumer */
    tn_buf_t fins;
};

static bench_t B;

static void die(const char *msg)
{
    fprintf(stderr, "tern-bench: %s\n", msg);
    exit(2);
}

static void on_write_done(uv_write_t *w, int status)
{
    tn_buf_t *buf = w->data;
    tn_buf_fini(buf);
    tn_free(buf);
    tn_free(w);
    if (status != 0 && !B.done)
        B.errors++;
}

/* Write src now as far as the socket takes it and queue the rest (its
 * storage moves to the write; src is left empty but still the caller's
 * to reuse or release). A direct write spares the loop the epoll_ctl
 * calls a queued uv_write costs. */
static void send_buf(conn_t *c, tn_buf_t *src)
{
    if (tn_buf_size(src) == 0)
        return;
    uv_buf_t now = uv_buf_init(tn_buf_data(src), (unsigned)tn_buf_size(src));
    int n = uv_try_write((uv_stream_t *)&c->tcp, &now, 1);
    if (n > 0)
        tn_buf_consume(src, (size_t)n);
    if (tn_buf_size(src) == 0)
        return;
    uv_write_t *w = tn_malloc(sizeof(*w));
    tn_buf_t *copy = tn_malloc(sizeof(*copy));
    if (w == NULL || copy == NULL)
        die("out of memory");
    *copy = *src;
    tn_buf_init(src);
    w->data = copy;
    uv_buf_t b = uv_buf_init(tn_buf_data(copy), (unsigned)tn_buf_size(copy));
    if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_write_done) != 0)
        die("write failed");
}

static void put_u32(tn_buf_t *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    tn_buf_append(b, x, 4);
}

/* A body: the producer and sequence (what the ledger reads), then
 * letters that shift with the sequence. */
static void body_of(conn_t *c, uint64_t seq, char *out)
{
    uint64_t id = ((uint64_t)c->id << 40) | seq;
    memcpy(out, &id, 8);
    if (B.o.size > 8)
        memcpy(out + 8, B.pattern + (seq + 8) % 26, (size_t)B.o.size - 8);
}

static void publish_more(conn_t *c)
{
    if (!B.publishing || !c->ready)
        return;
    tn_buf_t req;
    tn_buf_init(&req);
    char *body = tn_malloc((size_t)B.o.size);
    if (body == NULL)
        die("out of memory");
    while (c->inflight < B.o.pipeline) {
        if (B.o.count > 0 && (int64_t)B.sent + B.o.batch > B.o.count)
            break;
        B.sent += (uint64_t)B.o.batch;
        char line[300];
        if (B.o.http_port > 0 && B.o.http_get != NULL) {
            int n = snprintf(line, sizeof(line), "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n",
                             B.o.http_get);
            tn_buf_append(&req, line, (size_t)n);
        } else if (B.o.http_port > 0 && B.o.batch == 1) {
            int n = snprintf(line, sizeof(line),
                             "POST /pub?topic=%s HTTP/1.1\r\nHost: bench\r\n"
                             "Content-Length: %d\r\n\r\n",
                             B.o.topic, B.o.size);
            tn_buf_append(&req, line, (size_t)n);
            body_of(c, c->next_seq, body);
            tn_buf_append(&req, body, (size_t)B.o.size);
        } else if (B.o.http_port > 0) {
            int n = snprintf(line, sizeof(line),
                             "POST /mpub?topic=%s&binary=true HTTP/1.1\r\nHost: bench\r\n"
                             "Content-Length: %d\r\n\r\n",
                             B.o.topic, 4 + B.o.batch * (4 + B.o.size));
            tn_buf_append(&req, line, (size_t)n);
            put_u32(&req, (uint32_t)B.o.batch);
            for (int i = 0; i < B.o.batch; i++) {
                put_u32(&req, (uint32_t)B.o.size);
                body_of(c, c->next_seq + (uint64_t)i, body);
                tn_buf_append(&req, body, (size_t)B.o.size);
            }
        } else if (B.o.batch == 1) {
            tn_buf_append(&req, B.pub_line, (size_t)B.pub_line_len);
            put_u32(&req, (uint32_t)B.o.size);
            body_of(c, c->next_seq, body);
            tn_buf_append(&req, body, (size_t)B.o.size);
        } else {
            tn_buf_append(&req, B.pub_line, (size_t)B.pub_line_len);
            put_u32(&req, (uint32_t)(4 + B.o.batch * (4 + B.o.size)));
            put_u32(&req, (uint32_t)B.o.batch);
            for (int i = 0; i < B.o.batch; i++) {
                put_u32(&req, (uint32_t)B.o.size);
                body_of(c, c->next_seq + (uint64_t)i, body);
                tn_buf_append(&req, body, (size_t)B.o.size);
            }
        }
        c->sent_ms[c->tail] = tn_now_mono_ns() / 1000;
        c->first_seq[c->tail] = c->next_seq;
        c->tail = (c->tail + 1) % 1024;
        c->next_seq += (uint64_t)B.o.batch;
        c->inflight++;
    }
    tn_free(body);
    send_buf(c, &req);
    tn_buf_fini(&req);
}

static void mark_seen(uint64_t id)
{
    uint32_t p = (uint32_t)(id >> 40);
    uint64_t seq = id & ((UINT64_C(1) << 40) - 1);
    if ((int)p >= B.o.producers)
        return;
    if (seq >= B.seen_cap[p]) {
        uint64_t cap = B.seen_cap[p] ? B.seen_cap[p] : 65536;
        while (cap <= seq)
            cap *= 2;
        uint8_t *n = tn_realloc(B.seen[p], cap);
        if (n == NULL)
            die("out of memory");
        memset(n + B.seen_cap[p], 0, cap - B.seen_cap[p]);
        B.seen[p] = n;
        B.seen_cap[p] = cap;
    }
    if (B.seen[p][seq] == 0)
        B.unique++;
    else
        B.duplicates++;
    if (B.seen[p][seq] < 255)
        B.seen[p][seq]++;
}

static void ack_one(conn_t *c);
static void on_message(conn_t *c, const char *data, size_t len);

static void on_frame(conn_t *c, int32_t type, const char *data, size_t len)
{
    if (type == TN_NSQ_FRAME_RESPONSE && len == 11 && memcmp(data, "_heartbeat_", 11) == 0) {
        tn_buf_t nop;
        tn_buf_init(&nop);
        tn_buf_append(&nop, "NOP\n", 4);
        send_buf(c, &nop);
        tn_buf_fini(&nop);
        return;
    }
    if (type == TN_NSQ_FRAME_ERROR) {
        if (!(len >= 12 && memcmp(data, "E_FIN_FAILED", 12) == 0))
            fprintf(stderr, "tern-bench: error from server: %.*s\n", (int)len, data);
        B.errors++;
        if (c->producer && c->inflight > 0) {
            c->inflight--;
            c->head = (c->head + 1) % 1024;
        }
        return;
    }
    if (type == TN_NSQ_FRAME_RESPONSE) {
        if (!c->ready) {
            c->ready = true; /* the IDENTIFY or SUB answer */
            if (c->producer) {
                publish_more(c);
            } else {
                char line[32];
                int n = snprintf(line, sizeof(line), "RDY %d\n", B.o.rdy);
                tn_buf_t r;
                tn_buf_init(&r);
                tn_buf_append(&r, line, (size_t)n);
                send_buf(c, &r);
                tn_buf_fini(&r);
            }
            return;
        }
        if (c->producer && c->inflight > 0) {
            ack_one(c);
            publish_more(c);
        }
        return;
    }
    if (type == TN_NSQ_FRAME_MESSAGE && len >= TN_NSQ_MSG_HDR) {
        on_message(c, data, len);
    }
}

/* The oldest request in flight on c was answered. */
static void ack_one(conn_t *c)
{
    int64_t now = tn_now_mono_ns() / 1000;
    int64_t lat = now - c->sent_ms[c->head];
    uint64_t first = c->first_seq[c->head];
    c->head = (c->head + 1) % 1024;
    c->inflight--;
    B.acked += (uint64_t)B.o.batch;
    B.pub_bytes += (uint64_t)B.o.batch * (uint64_t)B.o.size;
    B.acked_upto[c->id] = first + (uint64_t)B.o.batch;
    if (B.nlat == B.lat_cap) {
        B.lat_cap = B.lat_cap ? B.lat_cap * 2 : 65536;
        B.lat_us = tn_realloc(B.lat_us, B.lat_cap * sizeof(*B.lat_us));
        if (B.lat_us == NULL)
            die("out of memory");
    }
    B.lat_us[B.nlat++] = (uint32_t)(lat > UINT32_MAX ? UINT32_MAX : lat);
}

/* A message frame arrived on consumer c: ledger, then FIN it. */
static void on_message(conn_t *c, const char *data, size_t len)
{
    B.received++;
    B.last_recv_ms = tn_now_mono_ms();
    if (len >= TN_NSQ_MSG_HDR + 8) {
        uint64_t id;
        memcpy(&id, data + TN_NSQ_MSG_HDR, 8);
        mark_seen(id);
    }
    tn_buf_append(&c->fins, "FIN ", 4);
    tn_buf_append(&c->fins, data + 10, TN_NSQ_ID_LEN);
    tn_buf_append(&c->fins, "\n", 1);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    if (tn_buf_reserve(&c->in, 256 * 1024) != 0)
        die("out of memory");
    *buf = uv_buf_init(c->in.base + c->in.len, 256 * 1024);
}

static uint32_t be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    (void)buf;
    if (n < 0) {
        if (!B.done) {
            fprintf(stderr, "tern-bench: connection %d closed: %s\n", c->id, uv_strerror((int)n));
            B.errors++;
        }
        uv_read_stop(s);
        return;
    }
    c->in.len += (size_t)n;
    if (c->http) {
        /* Responses: status line, headers, Content-Length body. */
        for (;;) {
            const char *p = tn_buf_data(&c->in);
            size_t avail = tn_buf_size(&c->in);
            const char *end = avail > 0 ? memmem(p, avail, "\r\n\r\n", 4) : NULL;
            if (end == NULL)
                break;
            size_t head = (size_t)(end - p) + 4;
            const char *cl = memmem(p, head, "Content-Length: ", 16);
            size_t body = cl != NULL ? (size_t)strtoul(cl + 16, NULL, 10) : 0;
            if (avail < head + body)
                break;
            if (avail < 12 || memcmp(p + 9, "200", 3) != 0) {
                fprintf(stderr, "tern-bench: HTTP answer %.*s\n", (int)TN_MIN(avail, 40), p);
                B.errors++;
            }
            if (c->inflight > 0) {
                ack_one(c);
                tn_buf_consume(&c->in, head + body);
                publish_more(c);
            } else {
                tn_buf_consume(&c->in, head + body);
            }
        }
        return;
    }
    while (tn_buf_size(&c->in) >= 8) {
        const char *p = tn_buf_data(&c->in);
        uint32_t size = be32(p);
        if (tn_buf_size(&c->in) < 4 + (size_t)size)
            break;
        on_frame(c, (int32_t)be32(p + 4), p + 8, size - 4);
        tn_buf_consume(&c->in, 4 + (size_t)size);
    }
    if (!c->producer)
        send_buf(c, &c->fins);
}

static void on_connect(uv_connect_t *req, int status)
{
    conn_t *c = req->data;
    if (status != 0) {
        fprintf(stderr, "tern-bench: cannot connect to %s:%d: %s\n", B.o.host, B.o.port,
                uv_strerror(status));
        exit(2);
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (c->http) {
        c->ready = true;
        publish_more(c);
        return;
    }
    tn_buf_t hello;
    tn_buf_init(&hello);
    tn_buf_append(&hello, "  V2", 4);
    if (c->producer) {
        const char *id = "{\"client_id\":\"tern-bench\",\"feature_negotiation\":false}";
        tn_buf_append(&hello, "IDENTIFY\n", 9);
        put_u32(&hello, (uint32_t)strlen(id));
        tn_buf_append(&hello, id, strlen(id));
    } else {
        char line[600];
        int n = snprintf(line, sizeof(line), "SUB %s %s\n", B.o.topic, B.o.channel);
        tn_buf_append(&hello, line, (size_t)n);
    }
    send_buf(c, &hello);
    tn_buf_fini(&hello);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(double p)
{
    if (B.nlat == 0)
        return 0;
    size_t i = (size_t)(p / 100.0 * (double)(B.nlat - 1));
    return B.lat_us[i] / 1000.0;
}

static uint64_t missing_count(void)
{
    uint64_t missing = 0;
    for (int p = 0; p < B.o.producers; p++)
        for (uint64_t s = 0; s < B.acked_upto[p]; s++)
            if (s >= B.seen_cap[p] || B.seen[p][s] == 0)
                missing++;
    return missing;
}

static void finish(void)
{
    B.done = true;
    uv_timer_stop(&B.tick);
    int64_t now = tn_now_mono_ms();
    double pub_s = (double)(B.pub_end_ms - B.start_ms) / 1000.0;
    double con_s = (double)((B.last_recv_ms ? B.last_recv_ms : now) - B.start_ms) / 1000.0;
    qsort(B.lat_us, B.nlat, sizeof(*B.lat_us), cmp_u32);
    uint64_t missing = B.o.consumers > 0 ? missing_count() : 0;
    const char *kind = B.o.http_port > 0 ? (B.o.http_get != NULL ? "HTTP GET"
                                            : B.o.batch == 1     ? "HTTP /pub"
                                                                 : "HTTP /mpub")
                       : B.o.batch == 1  ? "PUB"
                                         : "MPUB";
    printf("tern-bench: %d producers (%s x %d, pipeline %d), %d consumers (RDY %d), %d-byte "
           "messages\n",
           B.o.producers, kind, B.o.batch, B.o.pipeline, B.o.consumers, B.o.rdy, B.o.size);
    printf("publish: %" PRIu64 " msgs acked in %.2f s = %.0f msgs/s, %.1f MiB/s\n", B.acked, pub_s,
           pub_s > 0 ? (double)B.acked / pub_s : 0,
           pub_s > 0 ? (double)B.pub_bytes / pub_s / 1048576.0 : 0);
    printf("publish-ack latency (ms, per request): p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
           pct(50), pct(99), pct(99.9), pct(100));
    if (B.o.consumers > 0) {
        printf("consume: %" PRIu64 " msgs in %.2f s = %.0f msgs/s\n", B.received, con_s,
               con_s > 0 ? (double)B.received / con_s : 0);
        printf("ledger: acked %" PRIu64 ", received %" PRIu64 " unique, missing %" PRIu64
               ", duplicates %" PRIu64 "\n",
               B.acked, B.unique, missing, B.duplicates);
    }
    fflush(stdout);
    exit(missing > 0 ? 1 : 0);
}

static int inflight_total(void)
{
    int n = 0;
    for (int i = 0; i < B.nconns; i++)
        if (B.conns[i]->producer)
            n += B.conns[i]->inflight;
    return n;
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
    int64_t now = tn_now_mono_ms();
    if (B.publishing) {
        bool stop =
            (B.o.duration_ms > 0 && now - B.start_ms >= B.o.duration_ms) ||
            (B.o.count > 0 && (int64_t)B.sent + B.o.batch > B.o.count && inflight_total() == 0);
        if (stop) {
            B.publishing = false;
            B.pub_end_ms = now;
        }
        return;
    }
    /* Wait for in-flight publishes to be answered. */
    for (int i = 0; i < B.nconns; i++)
        if (B.conns[i]->producer && B.conns[i]->inflight > 0 && now - B.pub_end_ms < 10000)
            return;
    if (B.o.consumers == 0 || B.unique >= B.acked || now - B.pub_end_ms >= B.o.drain_ms)
        finish();
}

/* An integer option, or exit naming the flag. */
static long long num(const char *s, const char *flag)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        fprintf(stderr, "tern-bench: --%s: \"%s\" is not an integer\n", flag, s);
        exit(2);
    }
    return v;
}

static void usage(void)
{
    printf("usage: tern-bench [options]\n"
           "  --addr host:port       NSQ TCP address (127.0.0.1:4150)\n"
           "  --producers N          publishing connections (16)\n"
           "  --consumers N          consuming connections (16; 0 = publish only)\n"
           "  --batch N              messages per publish: 1 = PUB, more = MPUB (1)\n"
           "  --pipeline N           publishes in flight per producer (1)\n"
           "  --size BYTES           message size, at least 8 (200)\n"
           "  --rdy N                RDY per consumer (100)\n"
           "  --duration DUR         publish for this long (10s)\n"
           "  --count N              or until N messages are acknowledged\n"
           "  --drain-timeout DUR    how long consumers may take to catch up (60s)\n"
           "  --topic NAME           (bench) --channel NAME (bench)\n"
           "  --http-port PORT       producers publish with HTTP /pub (/mpub?binary=true for\n"
           "                         --batch > 1) on this port; consumers still use --addr\n"
           "  --http-get PATH        with --http-port: GET PATH instead of publishing\n");
}

int main(int argc, char **argv)
{
    opts_t o = {"127.0.0.1", 4150, 16,    16,      1,       1, 200, 100,
                10000,       0,    60000, "bench", "bench", 0, NULL};
    static char host[256];
    static const struct option longopts[] = {{"addr", required_argument, NULL, 'a'},
                                             {"producers", required_argument, NULL, 'p'},
                                             {"consumers", required_argument, NULL, 'c'},
                                             {"batch", required_argument, NULL, 'b'},
                                             {"pipeline", required_argument, NULL, 'P'},
                                             {"size", required_argument, NULL, 's'},
                                             {"rdy", required_argument, NULL, 'r'},
                                             {"duration", required_argument, NULL, 'd'},
                                             {"count", required_argument, NULL, 'n'},
                                             {"drain-timeout", required_argument, NULL, 'D'},
                                             {"topic", required_argument, NULL, 't'},
                                             {"channel", required_argument, NULL, 'C'},
                                             {"http-port", required_argument, NULL, 'H'},
                                             {"http-get", required_argument, NULL, 'G'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    int64_t ns;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'a': {
            const char *colon = strrchr(optarg, ':');
            if (colon == NULL)
                die("--addr needs host:port");
            snprintf(host, sizeof(host), "%.*s", (int)(colon - optarg), optarg);
            o.host = host;
            o.port = (int)num(colon + 1, "addr port");
            break;
        }
        case 'p':
            o.producers = (int)num(optarg, "producers");
            break;
        case 'c':
            o.consumers = (int)num(optarg, "consumers");
            break;
        case 'b':
            o.batch = (int)num(optarg, "batch");
            break;
        case 'P':
            o.pipeline = (int)num(optarg, "pipeline");
            break;
        case 's':
            o.size = (int)num(optarg, "size");
            break;
        case 'r':
            o.rdy = (int)num(optarg, "rdy");
            break;
        case 'n':
            o.count = num(optarg, "count");
            break;
        case 'd':
            if (tn_parse_duration_ns(optarg, &ns) != 0)
                die("--duration: not a duration");
            o.duration_ms = ns / 1000000;
            break;
        case 'D':
            if (tn_parse_duration_ns(optarg, &ns) != 0)
                die("--drain-timeout: not a duration");
            o.drain_ms = ns / 1000000;
            break;
        case 't':
            o.topic = optarg;
            break;
        case 'C':
            o.channel = optarg;
            break;
        case 'H':
            o.http_port = (int)num(optarg, "http-port");
            break;
        case 'G':
            o.http_get = optarg;
            break;
        case 'h':
            usage();
            return 0;
        default:
            usage();
            return 2;
        }
    }
    if (o.size < 8 || o.producers < 1 || o.producers > 65535 || o.consumers < 0 || o.batch < 1 ||
        o.batch > 65536 || o.pipeline < 1 || o.pipeline > 1000 || o.rdy < 1)
        die("bad arguments (--size >= 8, --producers 1..65535, --pipeline 1..1000, ...)");
    if (strlen(o.topic) > 200 || strlen(o.channel) > 64 ||
        (o.http_get != NULL && strlen(o.http_get) > 200))
        die("--topic (200), --channel (64) or --http-get (200) is too long");
    if (o.count > 0)
        o.duration_ms = 0;
    B.o = o;
    B.loop = uv_default_loop();
    B.pattern = tn_malloc((size_t)o.size + 26);
    if (B.pattern == NULL)
        die("out of memory");
    for (int i = 0; i < o.size + 26; i++)
        B.pattern[i] = (char)('a' + i % 26);
    B.pub_line_len =
        snprintf(B.pub_line, sizeof(B.pub_line), "%s %s\n", o.batch == 1 ? "PUB" : "MPUB", o.topic);
    B.seen = tn_calloc((size_t)o.producers, sizeof(*B.seen));
    B.seen_cap = tn_calloc((size_t)o.producers, sizeof(*B.seen_cap));
    B.acked_upto = tn_calloc((size_t)o.producers, sizeof(*B.acked_upto));
    B.nconns = o.producers + o.consumers;
    B.conns = tn_calloc((size_t)B.nconns, sizeof(*B.conns));
    if (B.seen == NULL || B.seen_cap == NULL || B.acked_upto == NULL || B.conns == NULL)
        die("out of memory");
    struct sockaddr_in addr;
    if (uv_ip4_addr(o.host, o.port, &addr) != 0)
        die("--addr: host must be a numeric IPv4 address");
    B.publishing = true;
    B.start_ms = tn_now_mono_ms();
    for (int i = 0; i < B.nconns; i++) {
        conn_t *c = tn_calloc(1, sizeof(*c));
        if (c == NULL)
            die("out of memory");
        c->b = &B;
        c->producer = i < o.producers;
        c->id = c->producer ? i : i - o.producers;
        c->http = c->producer && o.http_port > 0;
        tn_buf_init(&c->in);
        tn_buf_init(&c->fins);
        uv_tcp_init(B.loop, &c->tcp);
        c->tcp.data = c;
        c->connect.data = c;
        struct sockaddr_in haddr = addr;
        if (c->http)
            haddr.sin_port = htons((uint16_t)o.http_port);
        uv_tcp_connect(&c->connect, &c->tcp, (struct sockaddr *)&haddr, on_connect);
        B.conns[i] = c;
    }
    uv_timer_init(B.loop, &B.tick);
    uv_timer_start(&B.tick, on_tick, 10, 10);
    uv_run(B.loop, UV_RUN_DEFAULT);
    return 0;
}
