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
 * One blocking keep-alive client (proto/http/client.h) per thread: the
 * client is simple and its cost is visible in `top` beside the broker's. */
#include "core/platform.h"

#include "core/time.h"
#include "proto/http/client.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char url[96];   /* http://host:port */
    char user[128]; /* "" for no credentials */
    char password[1025];
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

/* A client for the node (nothing connects until the first request); NULL
 * with the reason printed. */
static tn_hc_t *client_new(void)
{
    tn_hc_opts_t o = {.user = g_o.user[0] ? g_o.user : NULL,
                      .password = g_o.password,
                      .headers = "X-Tern-Client: bench\r\n"};
    tn_hc_t *h = NULL;
    char err[256];
    if (tn_hc_new(g_o.url, &o, &h, err, sizeof(err)) != 0) {
        fprintf(stderr, "tern-v1-bench: %s\n", err);
        return NULL;
    }
    return h;
}

/* Send a request, read one response into *resp (released by the caller
 * with tn_hc_resp_fini): its status, or -1 when no answer came (the
 * connection failed; the next request opens a new one). */
static int roundtrip(tn_hc_t *h, const char *method, const char *path, const char *extra,
                     const char *body, size_t blen, tn_hc_resp_t *resp)
{
    tn_hc_req_t req = {.method = method,
                       .path = path,
                       .headers = extra[0] ? extra : NULL,
                       .body = body,
                       .len = blen,
                       .body_fd = -1};
    char err[256];
    if (tn_hc_request(h, &req, resp, err, sizeof(err)) != 0)
        return -1;
    return resp->status;
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
    tn_hc_t *c = client_new();
    if (c == NULL) {
        atomic_fetch_add(&g_errors, 1);
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
        tn_hc_resp_t resp;
        int st = roundtrip(c, "POST", path, "Content-Type: application/json\r\n", body, n, &resp);
        tn_hc_resp_fini(&resp);
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
    tn_hc_free(c);
    free(body);
    return NULL;
}

static void *consumer(void *arg)
{
    worker_t *w = arg;
    tn_hc_t *c = client_new();
    if (c == NULL) {
        atomic_fetch_add(&g_errors, 1);
        return NULL;
    }
    char path[512], ack[640];
    snprintf(path, sizeof(path), "/v1/topics/%s/consume?wait=1s", g_o.topic);
    while (!atomic_load(&g_stop)) {
        tn_hc_resp_t resp;
        int st = roundtrip(c, "GET", path, "", NULL, 0, &resp);
        if (st != 200) {
            tn_hc_resp_fini(&resp);
            if (st == 204)
                continue;
            atomic_fetch_add(&g_errors, 1);
            if (st < 0)
                break;
            continue;
        }
        int64_t now = tn_now_mono_ns();
        const char *rb = resp.body ? resp.body : "";
        const char *t = strstr(rb, "\"payload\":{\"t\":");
        const char *h = strstr(rb, "\"receipt_handle\":\"");
        if (t != NULL)
            sample(&w->lat, now - strtoll(t + 15, NULL, 10));
        const char *q = h != NULL ? strchr(h + 18, '"') : NULL;
        if (q == NULL) {
            tn_hc_resp_fini(&resp);
            atomic_fetch_add(&g_errors, 1);
            continue;
        }
        h += 18;
        snprintf(ack, sizeof(ack), "/v1/topics/%s/ack?receipt_handle=%.*s", g_o.topic, (int)(q - h),
                 h);
        tn_hc_resp_fini(&resp);
        if (roundtrip(c, "POST", ack, "", NULL, 0, &resp) != 204)
            atomic_fetch_add(&g_errors, 1);
        else
            atomic_fetch_add(&g_consumed, 1);
        tn_hc_resp_fini(&resp);
    }
    tn_hc_free(c);
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

int main(int argc, char **argv)
{
    opts_t *o = &g_o;
    snprintf(o->url, sizeof(o->url), "http://127.0.0.1:4151");
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
                                          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'a': {
            if (strrchr(optarg, ':') == NULL)
                usage();
            snprintf(o->url, sizeof(o->url), "http://%s", optarg);
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
        default:
            usage();
        }
    }
    if (user != NULL && password != NULL) {
        snprintf(o->user, sizeof(o->user), "%s", user);
        snprintf(o->password, sizeof(o->password), "%s", password);
    }
    tn_hc_t *c = client_new();
    if (c == NULL)
        return 1;
    char body[512];
    int bl = snprintf(body, sizeof(body), "{\"name\":\"%s\",\"partitions\":%d}", o->topic,
                      o->partitions);
    tn_hc_resp_t resp;
    tn_hc_req_t creq = {.method = "POST",
                        .path = "/v1/topics",
                        .headers = "Content-Type: application/json\r\n",
                        .body = body,
                        .len = (size_t)bl,
                        .body_fd = -1};
    char err[256];
    if (tn_hc_request(c, &creq, &resp, err, sizeof(err)) != 0) {
        fprintf(stderr, "tern-v1-bench: cannot connect to %s: %s\n", o->url, err);
        tn_hc_resp_fini(&resp);
        tn_hc_free(c);
        return 1;
    }
    tn_hc_free(c);
    if (resp.status != 201 && resp.status != 409) {
        fprintf(stderr, "tern-v1-bench: creating topic %s: HTTP %d %s\n", o->topic, resp.status,
                resp.body ? resp.body : "");
        tn_hc_resp_fini(&resp);
        return 1;
    }
    tn_hc_resp_fini(&resp);
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
