/* NSQ's HTTP API. See nsq_http.h. */
#include "core/platform.h"

#include "api/nsq_http.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/name.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define V1_HEADER "X-NSQ-Content-Type: nsq; version=1.0\r\n"

void tn_nsq_http_init(tn_nsq_http_t *api, const tn_config_t *cfg, const char *version)
{
    memset(api, 0, sizeof(*api));
    api->version = version;
    api->broadcast_address = cfg->broadcast_address;
    api->max_msg_size = (uint64_t)cfg->max_msg_size;
    api->max_body_size = (uint64_t)cfg->max_body_size;
    api->max_defer_ms = cfg->max_req_timeout_ns / 1000000;
    api->max_heartbeat_interval_ms = cfg->max_heartbeat_interval_ns / 1000000;
    api->max_output_buffer_size = cfg->max_output_buffer_size;
    api->max_output_buffer_timeout_ms = cfg->max_output_buffer_timeout_ns / 1000000;
    api->max_deflate_level = (int)cfg->max_deflate_level;
    api->start_time = tn_now_wall_ns() / 1000000000;
}

/* Whether the client negotiated nsqd's v1 responses. */
static bool wants_v1(const tn_http_request_t *r)
{
    const tn_iov_t *a = tn_http_header(&r->head, "accept");
    if (a == NULL)
        return false;
    char v[256];
    snprintf(v, sizeof(v), "%.*s", (int)TN_MIN(a->len, sizeof(v) - 1), a->base);
    return strstr(v, "application/vnd.nsq") != NULL && strstr(v, "version=1.0") != NULL;
}

static void answer_json(tn_http_request_t *r, int status, const char *json)
{
    const char *extra = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
    char hdrs[128];
    if (wants_v1(r)) {
        snprintf(hdrs, sizeof(hdrs), "%s%s", V1_HEADER, extra != NULL ? extra : "");
        extra = hdrs;
    }
    tn_http_respond(r, status, "application/json; charset=utf-8", extra, json, strlen(json));
}

static void answer_error(tn_http_request_t *r, int status, const char *code)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"message\":\"%s\"}", code);
    answer_json(r, status, body);
}

static void answer_ok(tn_http_request_t *r)
{
    tn_http_respond(r, 200, "text/plain; charset=utf-8", wants_v1(r) ? V1_HEADER : NULL, "OK",
                    2);
}

/* --- /ping, /info, health -------------------------------------------------- */

static void on_ping(tn_http_request_t *r, void *arg)
{
    (void)arg;
    /* nsqd answers a bare OK here, without the v1 header. */
    tn_http_respond(r, 200, "text/plain; charset=utf-8", NULL, "OK", 2);
}

static void on_info(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    const char *bcast = api->broadcast_address[0] != '\0' ? api->broadcast_address : host;
    char body[1024];
    /* Durations in nanoseconds, as nsqd's /info has them. */
    snprintf(body, sizeof(body),
             "{\"version\":\"%s\",\"broadcast_address\":\"%s\",\"hostname\":\"%s\","
             "\"http_port\":%d,\"tcp_port\":%d,\"start_time\":%" PRId64
             ",\"max_heartbeat_interval\":%" PRId64 ",\"max_output_buffer_size\":%" PRId64
             ",\"max_output_buffer_timeout\":%" PRId64 ",\"max_deflate_level\":%d}",
             api->version, bcast, host, api->http_port, api->tcp_port, api->start_time,
             api->max_heartbeat_interval_ms * 1000000, api->max_output_buffer_size,
             api->max_output_buffer_timeout_ms * 1000000, api->max_deflate_level);
    answer_json(r, 200, body);
}

static void on_healthz(tn_http_request_t *r, void *arg)
{
    (void)arg;
    tn_http_respond(r, 200, "text/plain; charset=utf-8", NULL, "OK", 2);
}

static void on_readyz(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (api->ready)
        tn_http_respond(r, 200, "text/plain; charset=utf-8", NULL, "OK", 2);
    else
        tn_http_respond(r, 503, "text/plain; charset=utf-8", "Retry-After: 1\r\n", "NOT_READY",
                        9);
}

/* --- /pub, /mpub ---------------------------------------------------------------- */

typedef struct {
    tn_pub_t pub;
    tn_http_request_t *r; /* NULL once the client went away */
} hpub_t;

static void on_hpub_cancel(tn_http_request_t *r)
{
    hpub_t *h = r->data;
    h->r = NULL; /* the publish goes on; nobody to tell */
}

static void on_hpub_done(tn_pub_t *p, int status)
{
    hpub_t *h = p->data;
    tn_http_request_t *r = h->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        if (status == 0)
            answer_ok(r);
        else if (status == TN_EDISKHIGH)
            answer_error(r, 429, "E_THROTTLED");
        else
            answer_error(r, 503, "E_STORAGE");
    }
    tn_pub_fini(&h->pub);
    tn_free(h);
}

/* topic= and defer= of a publish; false when an error was answered. */
static bool pub_args(tn_http_request_t *r, tn_nsq_http_t *api, char *topic, size_t tlen,
                     int64_t *deliver_at)
{
    int rc = tn_http_query(r->head.query, "topic", topic, tlen);
    if (rc == 0 || (rc == 1 && topic[0] == '\0')) {
        answer_error(r, 400, "MISSING_ARG_TOPIC");
        return false;
    }
    if (rc != 1 || !tn_name_valid(topic, strlen(topic))) {
        answer_error(r, 400, "INVALID_TOPIC");
        return false;
    }
    *deliver_at = 0;
    char d[32];
    rc = tn_http_query(r->head.query, "defer", d, sizeof(d));
    if (rc == 1) {
        char *end;
        long long v = strtoll(d, &end, 10);
        if (d[0] == '\0' || *end != '\0' || v < 0 || v > api->max_defer_ms) {
            answer_error(r, 400, "INVALID_DEFER");
            return false;
        }
        if (v > 0)
            *deliver_at = tn_now_wall_ms() + v;
    } else if (rc != 0) {
        answer_error(r, 400, "INVALID_DEFER");
        return false;
    }
    return true;
}

static void publish(tn_http_request_t *r, tn_nsq_http_t *api, hpub_t *h, const char *topic,
                    int64_t deliver_at)
{
    h->r = r;
    h->pub.data = h;
    r->data = h;
    r->on_cancel = on_hpub_cancel;
    int rc = tn_broker_publish(api->broker, topic, strlen(topic), &h->pub, deliver_at,
                               on_hpub_done);
    if (rc != 0)
        on_hpub_done(&h->pub, rc);
}

static void on_pub(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    char topic[256];
    int64_t deliver_at;
    if (!pub_args(r, api, topic, sizeof(topic), &deliver_at))
        return;
    size_t len = tn_buf_size(&r->body);
    if (len == 0) {
        answer_error(r, 400, "MSG_EMPTY");
        return;
    }
    if (len > api->max_msg_size) {
        answer_error(r, 413, "MSG_TOO_BIG");
        return;
    }
    hpub_t *h = tn_calloc(1, sizeof(*h));
    if (h == NULL || tn_pub_init(&h->pub, 1) != 0 ||
        tn_pub_set(&h->pub, 0, tn_buf_data(&r->body), len) != 0) {
        if (h != NULL)
            tn_pub_fini(&h->pub);
        tn_free(h);
        answer_error(r, 503, "E_OUT_OF_MEMORY");
        return;
    }
    publish(r, api, h, topic, deliver_at);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Split an /mpub body into messages. Returns the count (0 with *code set
 * on a malformed body) and fills bodies (caller frees). */
static uint32_t split_mpub(tn_http_request_t *r, tn_nsq_http_t *api, bool binary,
                           tn_iov_t **out, const char **code, int *status)
{
    const char *data = tn_buf_data(&r->body);
    size_t len = tn_buf_size(&r->body);
    *out = NULL;
    *status = 413;
    if (binary) {
        if (len < 4) {
            *code = "BAD_BODY";
            return 0;
        }
        uint32_t n = be32((const unsigned char *)data);
        if (n == 0 || n > 65536) {
            *code = "BAD_BODY";
            return 0;
        }
        tn_iov_t *v = tn_malloc(n * sizeof(*v));
        if (v == NULL) {
            *code = "E_OUT_OF_MEMORY";
            *status = 503;
            return 0;
        }
        size_t p = 4;
        for (uint32_t i = 0; i < n; i++) {
            if (len - p < 4) {
                tn_free(v);
                *code = "BAD_BODY";
                return 0;
            }
            uint32_t m = be32((const unsigned char *)data + p);
            p += 4;
            if (m == 0 || m > api->max_msg_size) {
                tn_free(v);
                *code = m == 0 ? "BAD_MESSAGE" : "MSG_TOO_BIG";
                return 0;
            }
            if (len - p < m) {
                tn_free(v);
                *code = "BAD_BODY";
                return 0;
            }
            v[i] = tn_iov(data + p, m);
            p += m;
        }
        if (p != len) {
            /* tern refuses surplus bytes rather than ignore them. */
            tn_free(v);
            *code = "BAD_BODY";
            return 0;
        }
        *out = v;
        return n;
    }
    /* Text: one message per line; empty lines are skipped. */
    uint32_t n = 0, cap = 0;
    tn_iov_t *v = NULL;
    size_t p = 0;
    while (p < len) {
        const char *nl = memchr(data + p, '\n', len - p);
        size_t end = nl != NULL ? (size_t)(nl - data) : len;
        size_t m = end - p;
        if (m > 0) {
            if (m > api->max_msg_size) {
                tn_free(v);
                *code = "MSG_TOO_BIG";
                return 0;
            }
            if (n == 65536) {
                tn_free(v);
                *code = "BAD_BODY";
                return 0;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                tn_iov_t *nv = tn_realloc(v, cap * sizeof(*nv));
                if (nv == NULL) {
                    tn_free(v);
                    *code = "E_OUT_OF_MEMORY";
                    *status = 503;
                    return 0;
                }
                v = nv;
            }
            v[n++] = tn_iov(data + p, m);
        }
        p = end + 1;
    }
    *code = NULL;
    *out = v;
    return n;
}

static void on_mpub(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    char topic[256];
    int64_t deliver_at;
    if (!pub_args(r, api, topic, sizeof(topic), &deliver_at))
        return;
    char b[8];
    bool binary = tn_http_query(r->head.query, "binary", b, sizeof(b)) == 1 &&
                  (strcmp(b, "true") == 0 || strcmp(b, "1") == 0);
    tn_iov_t *bodies;
    const char *code;
    int status;
    uint32_t n = split_mpub(r, api, binary, &bodies, &code, &status);
    if (n == 0) {
        tn_free(bodies);
        if (code != NULL)
            answer_error(r, status, code);
        else
            answer_ok(r); /* an empty text body publishes nothing, as in nsqd */
        return;
    }
    hpub_t *h = tn_calloc(1, sizeof(*h));
    if (h == NULL || tn_pub_init(&h->pub, n) != 0 || tn_pub_set_all(&h->pub, bodies) != 0) {
        if (h != NULL)
            tn_pub_fini(&h->pub);
        tn_free(h);
        tn_free(bodies);
        answer_error(r, 503, "E_OUT_OF_MEMORY");
        return;
    }
    tn_free(bodies);
    publish(r, api, h, topic, deliver_at);
}

int tn_nsq_http_register(tn_http_server_t *srv, tn_nsq_http_t *api)
{
    int rc = 0;
    rc = rc ? rc : tn_http_route(srv, "GET", "/ping", 0, NULL, on_ping, api);
    rc = rc ? rc : tn_http_route(srv, "GET", "/info", 0, NULL, on_info, api);
    rc = rc ? rc : tn_http_route(srv, "GET", "/healthz", 0, NULL, on_healthz, api);
    rc = rc ? rc : tn_http_route(srv, "GET", "/readyz", 0, NULL, on_readyz, api);
    rc = rc ? rc : tn_http_route(srv, "POST", "/pub", api->max_msg_size, "MSG_TOO_BIG", on_pub, api);
    rc = rc ? rc : tn_http_route(srv, "PUT", "/pub", api->max_msg_size, "MSG_TOO_BIG", on_pub, api);
    rc = rc ? rc : tn_http_route(srv, "POST", "/mpub", api->max_body_size, "TOO_BIG", on_mpub, api);
    rc = rc ? rc : tn_http_route(srv, "PUT", "/mpub", api->max_body_size, "TOO_BIG", on_mpub, api);
    return rc;
}
