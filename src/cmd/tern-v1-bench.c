/* tern-v1-bench: a load generator for the native /v1 API.
 *
 * DESIGN:
 *   1. Create the topic (--partitions) unless it exists.
 *   2. P producer threads, each with one keep-alive connection, produce
 *      for --duration: POST /produce with one message, or with --batch B
 *      POST /produce/batch with B. Every payload is a JSON object carrying
 *      its send time ({"t":<monotonic ns>,"pad":"..."}), so a consumer can
 *      tell how long a message took from produce to consume.
 *   3. C consumer threads loop: GET /consume?wait=1s, then POST /ack with
 *      the receipt handle (one consume+ack round trip per message).
 *   4. Report: produce requests/s and messages/s with the request latency
 *      p50/p99; consume+ack round trips/s; produce-to-consume latency
 *      p50/p99 (both ends on this machine's monotonic clock).
 *
 * Blocking sockets, one per thread: the client is simple and its cost is
 * visible in `top` beside the broker's. */
#include "core/platform.h"

#include "core/time.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    char host[64];
    int port;
    char auth[320]; /* "Authorization: Basic ...\r\n" or "" */
    char topic[256];
    int partitions;
    int producers;
    int consumers;
    int batch; /* 0: single produces */
    int size;
    int64_t duration_ms;
} opts_t;

typedef struct {
    uint32_t *v;
    size_t n;
    size_t cap;
} samples_t;

static opts_t g_o;
static atomic_bool g_stop;
static atomic_uint_fast64_t g_requests, g_messages, g_consumed, g_errors;

static int to_int(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return (int)v;
}

static void sample(samples_t *s, int64_t ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 65536;
        uint32_t *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL)
            return;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (uint32_t)(ns / 1000 > UINT32_MAX ? UINT32_MAX : ns / 1000);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(samples_t *s, double p)
{
    if (s->n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(s->n - 1));
    return s->v[i] / 1000.0;
}

/* --- one keep-alive connection ------------------------------------------------ */

typedef struct {
    int fd;
    char buf[1 << 20];
    size_t len;
} conn_t;

static int conn_open(conn_t *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_o.port)};
    inet_pton(AF_INET, g_o.host, &a.sin_addr);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->len = 0;
    return connect(c->fd, (struct sockaddr *)&a, sizeof(a));
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Send a request, read one response: its status, its body in *body
 * (inside c->buf, valid until the next request). */
static int roundtrip(conn_t *c, const char *method, const char *path, const char *extra,
                     const char *body, size_t blen, const char **rbody, size_t *rlen)
{
    char head[2048];
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: %s\r\n%sX-Tern-Client: bench\r\n%s"
                      "Content-Length: %zu\r\n\r\n",
                      method, path, g_o.host, g_o.auth, extra, blen);
    if (send_all(c->fd, head, (size_t)hn) != 0 || (blen > 0 && send_all(c->fd, body, blen) != 0))
        return -1;
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (end != NULL) {
            size_t hlen = (size_t)(end - c->buf) + 4;
            int status = to_int(c->buf + 9);
            size_t clen = 0;
            char *cl = memmem(c->buf, hlen, "Content-Length: ", 16);
            if (cl != NULL)
                clen = strtoul(cl + 16, NULL, 10);
            if (c->len >= hlen + clen) {
                *rbody = c->buf + hlen;
                *rlen = clen;
                /* Keep what follows (nothing, without pipelining). */
                size_t used = hlen + clen;
                static __thread char body_copy[1 << 16];
                size_t keep = clen < sizeof(body_copy) ? clen : sizeof(body_copy) - 1;
                memcpy(body_copy, *rbody, keep);
                body_copy[keep] = '\0';
                *rbody = body_copy;
                *rlen = keep;
                memmove(c->buf, c->buf + used, c->len - used);
                c->len -= used;
                return status;
            }
        }
        if (c->len == sizeof(c->buf))
            return -1;
        ssize_t r = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
        if (r <= 0)
            return -1;
        c->len += (size_t)r;
    }
}

/* --- workers -------------------------------------------------------------------- */

typedef struct {
    pthread_t th;
    samples_t lat; /* request latency (producers), produce-to-consume (consumers) */
} worker_t;

static size_t payload(char *out, size_t cap)
{
    int n = snprintf(out, cap, "{\"t\":%" PRId64 ",\"pad\":\"", tn_now_mono_ns());
    size_t len = (size_t)n;
    while (len + 2 < cap && len + 2 < (size_t)g_o.size)
        out[len++] = 'x';
    out[len++] = '"';
    out[len++] = '}';
    return len;
}

static void *producer(void *arg)
{
    worker_t *w = arg;
    conn_t *c = malloc(sizeof(*c));
    if (c == NULL || conn_open(c) != 0) {
        atomic_fetch_add(&g_errors, 1);
        free(c);
        return NULL;
    }
    char path[512];
    snprintf(path, sizeof(path), "/v1/topics/%s/produce%s", g_o.topic, g_o.batch ? "/batch" : "");
    size_t cap = (size_t)(g_o.batch ? g_o.batch : 1) * ((size_t)g_o.size + 64) + 16;
    char *body = malloc(cap);
    while (!atomic_load(&g_stop)) {
        size_t n = 0;
        if (g_o.batch == 0) {
            n = payload(body, cap);
        } else {
            body[n++] = '[';
            for (int i = 0; i < g_o.batch; i++) {
                n += (size_t)snprintf(body + n, cap - n, "%s{\"payload\":", i ? "," : "");
                n += payload(body + n, cap - n);
                body[n++] = '}';
            }
            body[n++] = ']';
        }
        int64_t t0 = tn_now_mono_ns();
        const char *rb;
        size_t rl;
        int st =
            roundtrip(c, "POST", path, "Content-Type: application/json\r\n", body, n, &rb, &rl);
        if (st != 202) {
            atomic_fetch_add(&g_errors, 1);
            if (st < 0)
                break;
            continue;
        }
        sample(&w->lat, tn_now_mono_ns() - t0);
        atomic_fetch_add(&g_requests, 1);
        atomic_fetch_add(&g_messages, (uint64_t)(g_o.batch ? g_o.batch : 1));
    }
    close(c->fd);
    free(body);
    free(c);
    return NULL;
}

static void *consumer(void *arg)
{
    worker_t *w = arg;
    conn_t *c = malloc(sizeof(*c));
    if (c == NULL || conn_open(c) != 0) {
        atomic_fetch_add(&g_errors, 1);
        free(c);
        return NULL;
    }
    char path[512], ack[640];
    snprintf(path, sizeof(path), "/v1/topics/%s/consume?wait=1s", g_o.topic);
    while (!atomic_load(&g_stop)) {
        const char *rb;
        size_t rl;
        int st = roundtrip(c, "GET", path, "", NULL, 0, &rb, &rl);
        if (st == 204)
            continue;
        if (st != 200) {
            atomic_fetch_add(&g_errors, 1);
            if (st < 0)
                break;
            continue;
        }
        int64_t now = tn_now_mono_ns();
        const char *t = strstr(rb, "\"payload\":{\"t\":");
        const char *h = strstr(rb, "\"receipt_handle\":\"");
        if (t != NULL)
            sample(&w->lat, now - strtoll(t + 15, NULL, 10));
        if (h == NULL) {
            atomic_fetch_add(&g_errors, 1);
            continue;
        }
        h += 18;
        const char *q = strchr(h, '"');
        snprintf(ack, sizeof(ack), "/v1/topics/%s/ack?receipt_handle=%.*s", g_o.topic, (int)(q - h),
                 h);
        if (roundtrip(c, "POST", ack, "", NULL, 0, &rb, &rl) != 204)
            atomic_fetch_add(&g_errors, 1);
        else
            atomic_fetch_add(&g_consumed, 1);
    }
    close(c->fd);
    free(c);
    return NULL;
}

/* --- main ------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: tern-v1-bench [--addr host:port] [--user u --password p] [--topic t]\n"
                    "         [--partitions n] [--producers n] [--consumers n] [--batch b]\n"
                    "         [--size bytes] [--duration 5s]\n");
    exit(2);
}

/* --help: every option with its default, on stdout (the man page is made
 * from it). */
static void help(void)
{
    printf("usage: tern-v1-bench [options]\n"
           "Load generator for tern's native /v1 API: producers POST /produce (or\n"
           "/produce/batch), consumers long-poll GET /consume and POST /ack; prints\n"
           "requests/s, messages/s and latency percentiles.\n\n"
           "  --addr host:port   the node's HTTP API (127.0.0.1:4151)\n"
           "  --user U           Basic auth user (with --password; none by default)\n"
           "  --password P       its password\n"
           "  --topic T          topic, created if missing (v1bench)\n"
           "  --partitions N     partitions of a topic it creates (3)\n"
           "  --producers N      producer threads, one connection each (16)\n"
           "  --consumers N      consumer threads: consume and ack (0)\n"
           "  --batch B          B messages per POST /produce/batch (none: one per\n"
           "                     POST /produce)\n"
           "  --size BYTES       message size (200)\n"
           "  --duration D       how long producers run: 5s, 500ms (5s)\n"
           "  --help             print this help and exit\n");
    exit(0);
}

int main(int argc, char **argv)
{
    opts_t *o = &g_o;
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = 4151;
    snprintf(o->topic, sizeof(o->topic), "v1bench");
    o->partitions = 3;
    o->producers = 16;
    o->consumers = 0;
    o->size = 200;
    o->duration_ms = 5000;
    const char *user = NULL, *password = NULL;
    static const struct option longs[] = {{"addr", required_argument, NULL, 'a'},
                                          {"user", required_argument, NULL, 'u'},
                                          {"password", required_argument, NULL, 'w'},
                                          {"topic", required_argument, NULL, 't'},
                                          {"partitions", required_argument, NULL, 'P'},
                                          {"producers", required_argument, NULL, 'p'},
                                          {"consumers", required_argument, NULL, 'c'},
                                          {"batch", required_argument, NULL, 'b'},
                                          {"size", required_argument, NULL, 's'},
                                          {"duration", required_argument, NULL, 'd'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'a': {
            const char *colon = strrchr(optarg, ':');
            if (colon == NULL)
                usage();
            snprintf(o->host, sizeof(o->host), "%.*s", (int)(colon - optarg), optarg);
            o->port = to_int(colon + 1);
            break;
        }
        case 'u':
            user = optarg;
            break;
        case 'w':
            password = optarg;
            break;
        case 't':
            snprintf(o->topic, sizeof(o->topic), "%s", optarg);
            break;
        case 'P':
            o->partitions = to_int(optarg);
            break;
        case 'p':
            o->producers = to_int(optarg);
            break;
        case 'c':
            o->consumers = to_int(optarg);
            break;
        case 'b':
            o->batch = to_int(optarg);
            break;
        case 's':
            o->size = to_int(optarg);
            break;
        case 'd': {
            char *end;
            double v = strtod(optarg, &end);
            o->duration_ms = (int64_t)(v * (strcmp(end, "ms") == 0 ? 1 : 1000));
            break;
        }
        case 'h':
            help();
            break;
        default:
            usage();
        }
    }
    if (user != NULL && password != NULL) {
        char cred[200], b64[280];
        int n = snprintf(cred, sizeof(cred), "%s:%s", user, password);
        EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)cred, n);
        snprintf(o->auth, sizeof(o->auth), "Authorization: Basic %s\r\n", b64);
    }
    conn_t *c = malloc(sizeof(*c));
    if (c == NULL || conn_open(c) != 0) {
        fprintf(stderr, "tern-v1-bench: cannot connect to %s:%d\n", o->host, o->port);
        free(c);
        return 1;
    }
    char body[512];
    int bl = snprintf(body, sizeof(body), "{\"name\":\"%s\",\"partitions\":%d}", o->topic,
                      o->partitions);
    const char *rb = "";
    size_t rl = 0;
    int st = roundtrip(c, "POST", "/v1/topics", "Content-Type: application/json\r\n", body,
                       (size_t)bl, &rb, &rl);
    close(c->fd);
    free(c);
    if (st != 201 && st != 409) {
        fprintf(stderr, "tern-v1-bench: creating topic %s: HTTP %d %.*s\n", o->topic, st, (int)rl,
                rb);
        return 1;
    }
    int n = o->producers + o->consumers;
    worker_t *w = calloc((size_t)n, sizeof(*w));
    int64_t t0 = tn_now_mono_ns();
    for (int i = 0; i < n; i++)
        pthread_create(&w[i].th, NULL, i < o->producers ? producer : consumer, &w[i]);
    usleep((useconds_t)(o->duration_ms * 1000));
    atomic_store(&g_stop, true);
    for (int i = 0; i < n; i++)
        pthread_join(w[i].th, NULL);
    double secs = (double)(tn_now_mono_ns() - t0) / 1e9;
    samples_t plat = {0}, clat = {0};
    for (int i = 0; i < n; i++) {
        samples_t *dst = i < o->producers ? &plat : &clat;
        for (size_t k = 0; k < w[i].lat.n; k++)
            sample(dst, (int64_t)w[i].lat.v[k] * 1000);
        free(w[i].lat.v);
    }
    qsort(plat.v, plat.n, sizeof(uint32_t), cmp_u32);
    qsort(clat.v, clat.n, sizeof(uint32_t), cmp_u32);
    uint64_t req = atomic_load(&g_requests), msgs = atomic_load(&g_messages);
    printf("produce: %" PRIu64 " requests (%" PRIu64 " msgs) in %.2f s = %.0f req/s, %.0f msgs/s\n",
           req, msgs, secs, (double)req / secs, (double)msgs / secs);
    printf("produce latency (ms, per request): p50 %.3f  p99 %.3f\n", pct_ms(&plat, 0.50),
           pct_ms(&plat, 0.99));
    if (o->consumers > 0) {
        uint64_t cons = atomic_load(&g_consumed);
        printf("consume+ack: %" PRIu64 " round trips in %.2f s = %.0f/s\n", cons, secs,
               (double)cons / secs);
        printf("produce-to-consume latency (ms): p50 %.3f  p99 %.3f\n", pct_ms(&clat, 0.50),
               pct_ms(&clat, 0.99));
    }
    printf("errors: %" PRIu64 "\n", atomic_load(&g_errors));
    free(plat.v);
    free(clat.v);
    free(w);
    return 0;
}
