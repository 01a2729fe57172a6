/* The HTTP/1.1 server core. See server.h for the design. */
#include "core/platform.h"

#include "proto/http/server.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "proto/addr.h"
#include "proto/stream.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "proto/http/encoding.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BODY_START (64 * 1024)
#define LARGE_BODY (1024 * 1024)
#define READ_CHUNK (64 * 1024)
#define DRAIN_MS   1000
/* Answers waiting for the client before pipelined requests wait too. */
#define MAX_UNSENT (1024 * 1024)

typedef struct route_s {
    char *method;
    char *path;
    uint64_t max_body;
    const char *too_big;
    tn_http_handler_cb handler;
    void *arg;
    struct route_s *next;
} route_t;

typedef struct guard_s {
    char *prefix;
    tn_http_handler_cb fn;
    void *arg;
    const char *not_found; /* body of a 404 under the prefix (borrowed), or NULL */
    struct guard_s *next;
} guard_t;

typedef enum { C_HEAD = 0, C_BODY, C_HANDLING, C_UPGRADED, C_DRAINING, C_CLOSED } cstate_t;

typedef struct conn_s conn_t;

struct conn_s {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    tn_http_server_t *srv;
    conn_t *prev;
    conn_t *next;
    cstate_t state;
    uint32_t refs;
    char remote[64];
    tn_buf_t in;
    tn_buf_t out;  /* answers not written yet */
    tn_buf_t wbuf; /* being written */
    bool writing;
    bool reading;
    bool close_after; /* close (gracefully) once the output is written */
    bool head_started;
    size_t head_seen;    /* bytes of c->in a parse found no whole head in */
    bool advancing;      /* in advance(): answers given meanwhile do not recurse */
    size_t idle_unacked; /* output not taken yet when the idle timer was armed mid-write */
    /* the request being read or handled */
    tn_http_request_t *req;
    const route_t *route;
    uint64_t body_left; /* Content-Length bytes still to read */
    tn_http_chunked_t chunk;
    uint64_t large; /* budget bytes taken for this body */
    bool guarded;   /* the request waits for its guard */
    /* after an upgrade */
    const tn_http_upgrade_ops_t *up;
    void *up_arg;
    /* HTTPS: the session, the bytes read and not yet fed to it, and the
     * records sealed and not yet handed to the socket */
    tn_tls_t *tls;
    tn_buf_t raw;
    tn_buf_t sealed;
};

struct tn_http_server_s {
    uv_loop_t *loop;
    tn_http_opts_t opts;
    uv_tcp_t listener;
    int port;
    route_t *routes;
    guard_t *guards;
    conn_t *conns;
    uint32_t nconns;
    uint32_t nupgraded;
    bool waiting_accept; /* a connection waits for a free slot */
    bool closing;
    bool no_keepalive; /* tn_http_server_end_keepalive */
    uint32_t refs;
    uint64_t large_in_use;
    uint64_t requests;
    uint64_t by_status[6];
    uint64_t unauthorized; /* 401 answers */
    void (*close_cb)(void *arg);
    void *close_arg;
    tn_tls_ctx_t *tls; /* borrowed; NULL: plain HTTP */
};

void tn_http_opts_default(tn_http_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->max_connections = 10000;
    o->max_head = 64 * 1024;
    o->head_timeout_ms = 5000;
    o->body_timeout_ms = 30000;
    o->idle_timeout_ms = 60000;
    o->large_body_budget = 256 * 1024 * 1024;
    o->server_name = "ternd";
}

const char *tn_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 417:
        return "Expectation Failed";
    case 426:
        return "Upgrade Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

/* --- lifetime ----------------------------------------------------------------- */

static void server_unref(tn_http_server_t *s)
{
    if (--s->refs > 0)
        return;
    while (s->guards != NULL) {
        guard_t *g = s->guards;
        s->guards = g->next;
        tn_free(g->prefix);
        tn_free(g);
    }
    while (s->routes != NULL) {
        route_t *r = s->routes;
        s->routes = r->next;
        tn_free(r->method);
        tn_free(r->path);
        tn_free(r);
    }
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    tn_free(s);
    if (cb != NULL)
        cb(arg);
}

static void request_free(conn_t *c)
{
    tn_http_request_t *r = c->req;
    if (r == NULL)
        return;
    tn_buf_fini(&r->body);
    tn_buf_fini(&r->headbuf);
    tn_free(r);
    c->req = NULL;
    if (c->large > 0) {
        c->srv->large_in_use -= c->large;
        c->large = 0;
    }
}

static void conn_unref(conn_t *c)
{
    if (--c->refs > 0)
        return;
    tn_http_server_t *s = c->srv;
    request_free(c);
    tn_buf_fini(&c->in);
    tn_buf_fini(&c->out);
    tn_buf_fini(&c->wbuf);
    tn_buf_fini(&c->raw);
    tn_buf_fini(&c->sealed);
    tn_tls_free(c->tls);
    tn_free(c);
    server_unref(s);
}

static void on_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void accept_waiting(tn_http_server_t *s);

/* The upgraded connection ends: tell its owner, once. */
static void up_gone(conn_t *c)
{
    if (c->state != C_UPGRADED)
        return;
    c->srv->nupgraded--;
    const tn_http_upgrade_ops_t *up = c->up;
    c->up = NULL;
    if (up != NULL && up->on_close != NULL)
        up->on_close(c->up_arg);
}

static void conn_close(conn_t *c)
{
    if (c->state == C_CLOSED)
        return;
    up_gone(c);
    bool handling = c->state == C_HANDLING;
    c->state = C_CLOSED;
    tn_http_server_t *s = c->srv;
    if (handling && c->req != NULL) {
        /* The client went away with its request parked. */
        tn_http_request_t *r = c->req;
        if (r->on_cancel != NULL)
            r->on_cancel(r);
    }
    request_free(c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->nconns--;
    uv_close((uv_handle_t *)&c->timer, on_closed);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    accept_waiting(s);
}

/* --- output ------------------------------------------------------------------- */

static void flush(conn_t *c);
static void advance(conn_t *c);
static void start_reading(conn_t *c);

static void on_written(uv_write_t *w, int status);
static void arm_idle(conn_t *c);

static void on_drain_timer(uv_timer_t *t)
{
    conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    conn_unref(req->data);
}

/* Shut down the write side, read and drop what still comes, then close. */
static void close_gracefully(conn_t *c)
{
    if (c->state == C_CLOSED || c->state == C_DRAINING)
        return;
    up_gone(c);
    if (c->state == C_CLOSED)
        return;
    c->state = C_DRAINING;
    request_free(c);
    if (c->tls != NULL && !c->writing) {
        /* The alert goes out before the write side shuts (the shutdown
         * request waits for queued writes). */
        tn_buf_t *wire = &c->sealed;
        if (tn_tls_close_notify(c->tls, wire) == 0 && tn_buf_size(wire) > 0) {
            c->wreq.data = c;
            int rc = tn_stream_send((uv_stream_t *)&c->tcp, wire, &c->wbuf, &c->wreq, on_written);
            if (rc == 1) {
                c->writing = true;
                c->refs++;
            }
        }
    }
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    c->refs++;
    start_reading(c);
    uv_timer_start(&c->timer, on_drain_timer, DRAIN_MS, 0);
}

static void on_written(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    c->writing = false;
    tn_buf_reset(&c->wbuf);
    if (c->state != C_CLOSED) {
        if (status != 0)
            conn_close(c);
        else
            flush(c);
        if (c->state == C_HEAD && !c->close_after)
            advance(c); /* pipelined requests held back by backed_up */
        if (c->state == C_UPGRADED && !c->writing && tn_buf_size(&c->out) == 0 && c->up != NULL &&
            c->up->on_drain != NULL)
            c->up->on_drain(c->up_arg);
    }
    conn_unref(c);
}

static void flush(conn_t *c)
{
    if (c->state == C_CLOSED || c->writing)
        return;
    tn_buf_t *src = &c->out;
    if (c->tls != NULL) {
        /* Seal the plaintext; handshake records may be waiting already. */
        if (tn_buf_size(&c->out) > 0) {
            int rc = tn_tls_write(c->tls, tn_buf_data(&c->out), tn_buf_size(&c->out), &c->sealed);
            tn_buf_reset(&c->out);
            if (rc != 0) {
                TN_LOG_RL(TN_LOG_DEBUG, 10000, "HTTPS %s: %s", c->remote,
                          rc == TN_EPROTO ? tn_tls_errmsg(c->tls) : tn_strerror(rc));
                conn_close(c);
                return;
            }
        }
        src = &c->sealed;
    }
    c->wreq.data = c;
    int rc = tn_stream_send((uv_stream_t *)&c->tcp, src, &c->wbuf, &c->wreq, on_written);
    if (rc < 0) {
        conn_close(c);
    } else if (rc == 0) {
        if (c->close_after)
            close_gracefully(c);
    } else {
        c->writing = true;
        c->refs++;
        /* An answer the client takes slowly keeps its connection; one it
         * takes nothing of for the idle timeout closes it (with
         * Connection: close too, which arms no other timer). */
        if (c->state == C_HEAD && !c->head_started)
            arm_idle(c);
    }
}

static int append_fmt(tn_buf_t *b, const char *fmt, ...) TN_PRINTF(2, 3);
static int append_fmt(tn_buf_t *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        return UV_EINVAL;
    return tn_buf_append(b, line, (size_t)n);
}

/* One head line built without printf, bounded as append_fmt's are (the
 * line and its NUL in 512 bytes, else UV_EINVAL). The buffer is not
 * zeroed: only its first n bytes are ever read. */
typedef struct {
    char b[512];
    size_t n;
    bool over;
} hline_t;

static void hl_put(hline_t *l, const char *s, size_t n)
{
    if (n >= sizeof(l->b) - l->n) {
        l->over = true;
        return;
    }
    memcpy(l->b + l->n, s, n);
    l->n += n;
}

static void hl_str(hline_t *l, const char *s)
{
    hl_put(l, s, strlen(s));
}

static void hl_int(hline_t *l, int64_t v)
{
    char d[24];
    size_t i = sizeof(d);
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        d[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        d[--i] = '-';
    hl_put(l, d + i, sizeof(d) - i);
}

/* Append the line to b and start the next one. */
static int hl_flush(hline_t *l, tn_buf_t *b)
{
    int rc = l->over ? UV_EINVAL : tn_buf_append(b, l->b, l->n);
    l->n = 0;
    l->over = false;
    return rc;
}

/* Write a whole answer into the output. The head's lines are put
 * together by hand: the three vsnprintf calls they took were a sixth of
 * the loop's instructions for an HTTP /pub. */
static void write_answer(conn_t *c, int minor, int status, const char *ctype, const char *headers,
                         const void *body, size_t len, bool head_only)
{
    /* The answers the server makes itself (404, 405, 413, ...) honour the
     * request too: its Connection: close (or HTTP/1.0 without keep-alive)
     * closes, and a HEAD gets the head alone (RFC 9110 9.3.2), else a
     * keep-alive client would read the body as the next answer. */
    const tn_http_req_t *h = c->req != NULL ? &c->req->head : NULL;
    if (h != NULL && (!h->keep_alive || c->srv->no_keepalive))
        c->close_after = true;
    if (h != NULL && h->method.len == 4 && memcmp(h->method.base, "HEAD", 4) == 0)
        head_only = true;
    bool keep = !c->close_after;
    c->srv->requests++;
    if (status >= 100 && status < 600)
        c->srv->by_status[status / 100]++;
    if (status == 401)
        c->srv->unauthorized++;
    hline_t l;
    l.n = 0;
    l.over = false;
    hl_put(&l, "HTTP/1.", 7);
    hl_int(&l, minor);
    hl_put(&l, " ", 1);
    hl_int(&l, status);
    hl_put(&l, " ", 1);
    hl_str(&l, tn_http_reason(status));
    hl_put(&l, "\r\nServer: ", 10);
    hl_str(&l, c->srv->opts.server_name);
    hl_put(&l, "\r\n", 2);
    int rc = hl_flush(&l, &c->out);
    /* A 304 has no content, and a Content-Length there would have to be
     * the 200's; a 1xx or 204 must not carry one (RFC 9110 8.6): none of
     * them gets one, nor a body. */
    bool bodiless = status == 304 || status == 204 || status < 200;
    if (rc == 0 && !bodiless) {
        hl_put(&l, "Content-Length: ", 16);
        hl_int(&l, (int64_t)len);
        hl_put(&l, "\r\n", 2);
        rc = hl_flush(&l, &c->out);
    }
    if (rc == 0 && ctype != NULL) {
        hl_put(&l, "Content-Type: ", 14);
        hl_str(&l, ctype);
        hl_put(&l, "\r\n", 2);
        rc = hl_flush(&l, &c->out);
    }
    if (rc == 0 && !keep)
        rc = tn_buf_append(&c->out, "Connection: close\r\n", 19);
    else if (rc == 0 && minor == 0)
        rc = tn_buf_append(&c->out, "Connection: keep-alive\r\n", 24);
    if (rc == 0 && headers != NULL)
        rc = tn_buf_append(&c->out, headers, strlen(headers));
    if (rc == 0)
        rc = tn_buf_append(&c->out, "\r\n", 2);
    if (rc == 0 && !head_only && !bodiless && len > 0)
        rc = tn_buf_append(&c->out, body, len);
    if (rc != 0)
        conn_close(c);
}

/* An error the server answers itself; the connection closes afterwards
 * when the request's body was not (or not wholly) read. */
static void answer_error(conn_t *c, int minor, int status, const char *message, bool close)
{
    char body[256];
    /* A route's too_big may be a whole JSON document (tn_http_route). */
    int n = message[0] == '{' ? snprintf(body, sizeof(body), "%s", message)
                              : snprintf(body, sizeof(body), "{\"message\":\"%s\"}", message);
    n = TN_MIN(n, (int)sizeof(body) - 1);
    if (close)
        c->close_after = true;
    char extra[256];
    snprintf(extra, sizeof(extra), "%s%s",
             c->srv->opts.own_headers != NULL ? c->srv->opts.own_headers : "",
             status == 503 ? "Retry-After: 1\r\n" : "");
    write_answer(c, minor, status, "application/json; charset=utf-8", extra, body, (size_t)n,
                 false);
    request_free(c);
    c->state = C_HEAD;
    flush(c);
}

void tn_http_server_end_keepalive(tn_http_server_t *s)
{
    s->no_keepalive = true;
}

void tn_http_respond(tn_http_request_t *r, int status, const char *content_type,
                     const char *headers, const void *body, size_t len)
{
    conn_t *c = r->conn;
    if (c->state != C_HANDLING || c->req != r)
        return;
    if (!r->head.keep_alive || c->srv->no_keepalive)
        c->close_after = true;
    if (c->guarded) {
        /* Answered by its guard: a body it declared was never read. */
        c->guarded = false;
        if (r->head.chunked || r->head.content_length > 0)
            c->close_after = true;
    }
    write_answer(c, r->head.minor, status, content_type, headers, body, len, r->head_only);
    if (c->state == C_CLOSED)
        return;
    request_free(c);
    c->state = C_HEAD;
    c->refs++;
    flush(c);
    if (!c->close_after) {
        start_reading(c);
        advance(c); /* the next pipelined request, if any */
    }
    conn_unref(c);
}

/* --- input --------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->state == C_BODY) {
        answer_error(c, c->req != NULL ? c->req->head.minor : 1, 408, "BODY_TIMEOUT", true);
        return;
    }
    if (c->state == C_HEAD) {
        if (c->head_started) {
            answer_error(c, 1, 408, "HEADER_TIMEOUT", true);
            return;
        }
        /* Idle: no request, and no answer taken meanwhile. A client that
         * reads a long answer at any pace is not idle while part of it
         * waits here for the socket (nsqd sets no write timeout at all);
         * one that took none of it for the whole timeout is, and its
         * descriptor is wanted back. What the kernel holds of an answer
         * is not lost by the close: it is sent on, then the FIN. */
        if (c->writing && tn_stream_unacked((uv_stream_t *)&c->tcp) < c->idle_unacked) {
            arm_idle(c);
            return;
        }
        conn_close(c);
    }
}

static void arm(conn_t *c, int64_t ms)
{
    uv_timer_start(&c->timer, on_timer, (uint64_t)ms, 0);
}

/* The idle timer. Mid-write it notes how much output the client has still
 * to take, so that on_timer sees whether it took any meanwhile (a system
 * call, only when the socket was full: not on every keep-alive request). */
static void arm_idle(conn_t *c)
{
    c->idle_unacked = c->writing ? tn_stream_unacked((uv_stream_t *)&c->tcp) : 0;
    arm(c, c->srv->opts.idle_timeout_ms);
}

/* Whether path matches pattern (exact, {name} = one non-empty segment);
 * params (may be NULL) receives the {name} segments in order. */
static bool path_matches(const char *pattern, tn_iov_t path, tn_iov_t *params)
{
    const char *p = pattern;
    size_t i = 0, np = 0;
    while (*p != '\0') {
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (end == NULL)
                return false;
            size_t start = i;
            while (i < path.len && path.base[i] != '/')
                i++;
            if (i == start)
                return false;
            if (params != NULL && np < TN_HTTP_MAX_PARAMS)
                params[np] = tn_iov(path.base + start, i - start);
            np++;
            p = end + 1;
            continue;
        }
        if (i >= path.len || path.base[i] != *p)
            return false;
        i++;
        p++;
    }
    return i == path.len;
}

const tn_iov_t *tn_http_param(const tn_http_request_t *r, const char *name)
{
    if (r->pattern == NULL)
        return NULL;
    size_t n = strlen(name), k = 0;
    for (const char *p = r->pattern; (p = strchr(p, '{')) != NULL; k++) {
        const char *end = strchr(p, '}');
        if (end == NULL || k >= TN_HTTP_MAX_PARAMS)
            return NULL;
        if ((size_t)(end - p - 1) == n && memcmp(p + 1, name, n) == 0)
            return &r->params[k];
        p = end;
    }
    return NULL;
}

/* The route for h's method and path, or NULL; *path_known says whether
 * any route has the path (else 404, not 405). */
static const route_t *find_route(tn_http_server_t *s, const tn_http_req_t *h, bool *path_known)
{
    *path_known = false;
    bool head = h->method.len == 4 && memcmp(h->method.base, "HEAD", 4) == 0;
    for (const route_t *r = s->routes; r != NULL; r = r->next) {
        if (!path_matches(r->path, h->path, NULL))
            continue;
        *path_known = true;
        size_t ml = strlen(r->method);
        if ((ml == h->method.len && memcmp(r->method, h->method.base, ml) == 0) ||
            (head && strcmp(r->method, "GET") == 0))
            return r;
    }
    return NULL;
}

/* Add name to the n names of m (room for cap) unless it is there. */
static void add_method(const char **m, size_t *n, size_t cap, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(m[i], name) == 0)
            return;
    if (*n < cap)
        m[(*n)++] = name;
}

/* The methods of the routes with h's path, for a 405's Allow header. Only
 * then: formatting it on every request was two snprintf calls a /pub, an
 * eighth of the loop's user time. */
/* The methods h's path takes, and OPTIONS, sorted and joined by ", " as
 * nsqd's router (httprouter) writes its Allow header. For the asterisk
 * form (OPTIONS *, the server in general: RFC 9110 9.3.7), every route's
 * method, and HEAD when a route takes GET (find_route answers it). */
static void allowed_methods(tn_http_server_t *s, const tn_http_req_t *h, char *allow,
                            size_t allowlen)
{
    const char *m[16];
    size_t n = 0;
    bool any = h->target.len == 1 && h->target.base[0] == '*';
    m[n++] = "OPTIONS";
    for (const route_t *r = s->routes; r != NULL; r = r->next) {
        if (!any && !path_matches(r->path, h->path, NULL))
            continue;
        add_method(m, &n, TN_ARRAY_SIZE(m), r->method);
        if (any && strcmp(r->method, "GET") == 0)
            add_method(m, &n, TN_ARRAY_SIZE(m), "HEAD");
    }
    for (size_t i = 1; i < n; i++) /* insertion sort: a handful of names */
        for (size_t j = i; j > 0 && strcmp(m[j - 1], m[j]) > 0; j--) {
            const char *t = m[j];
            m[j] = m[j - 1];
            m[j - 1] = t;
        }
    allow[0] = '\0';
    size_t an = 0;
    for (size_t i = 0; i < n; i++)
        an += (size_t)snprintf(allow + an, an < allowlen ? allowlen - an : 0, "%s%s",
                               an ? ", " : "", m[i]);
}

/* Grow a body buffer to hold n more bytes: 64 KiB first, then fourfold. */
static int body_reserve(tn_buf_t *b, size_t n)
{
    size_t need = tn_buf_size(b) + n;
    if (b->cap - b->len >= n && b->base != NULL)
        return 0;
    size_t cap = b->cap ? b->cap * 4 : BODY_START;
    while (cap < need)
        cap *= 4;
    return tn_buf_reserve(b, cap - b->len);
}

/* Take budget for bytes of a large body; false when the node has none. */
static bool take_large(conn_t *c, uint64_t bytes)
{
    tn_http_server_t *s = c->srv;
    if (s->large_in_use + bytes > s->opts.large_body_budget)
        return false;
    s->large_in_use += bytes;
    c->large += bytes;
    return true;
}

/* Decode a gzip or zstd body in place; false when an error was answered. */
static bool decode_body(conn_t *c)
{
    tn_http_request_t *r = c->req;
    const tn_iov_t *enc = tn_http_header(&r->head, "content-encoding");
    if (enc == NULL || tn_buf_size(&r->body) == 0)
        return true;
    tn_buf_t plain;
    tn_buf_init(&plain);
    int rc = tn_http_decode_body(*enc, tn_iov(tn_buf_data(&r->body), tn_buf_size(&r->body)),
                                 c->route->max_body, &plain);
    if (rc != 0) {
        tn_buf_fini(&plain);
        int minor = r->head.minor;
        if (rc == UV_ENOTSUP)
            answer_error(c, minor, 415, "UNSUPPORTED_CONTENT_ENCODING", false);
        else if (rc == TN_ETOOBIG)
            answer_error(c, minor, 413, c->route->too_big, false);
        else if (rc == UV_ENOMEM)
            answer_error(c, minor, 503, "BUSY", false);
        else
            answer_error(c, minor, 400, "BAD_CONTENT_ENCODING", false);
        return false;
    }
    tn_buf_fini(&r->body);
    r->body = plain;
    return true;
}

static void dispatch(conn_t *c)
{
    if (!decode_body(c))
        return;
    c->state = C_HANDLING;
    uv_timer_stop(&c->timer);
    tn_http_request_t *r = c->req;
    c->refs++;
    c->route->handler(r, c->route->arg);
    conn_unref(c);
}

static void route_request(conn_t *c);

static const guard_t *find_guard(const tn_http_server_t *s, const tn_http_req_t *h)
{
    for (const guard_t *g = s->guards; g != NULL; g = g->next) {
        size_t n = strlen(g->prefix);
        if (h->path.len >= n && memcmp(h->path.base, g->prefix, n) == 0)
            return g;
    }
    return NULL;
}

int tn_http_guard_not_found(tn_http_server_t *s, const char *prefix, const char *body)
{
    for (guard_t *g = s->guards; g != NULL; g = g->next) {
        if (strcmp(g->prefix, prefix) == 0) {
            g->not_found = body;
            return 0;
        }
    }
    return TN_ENOTFOUND;
}

void tn_http_resume(tn_http_request_t *r)
{
    conn_t *c = r->conn;
    if (c->state != C_HANDLING || c->req != r || !c->guarded)
        return;
    c->guarded = false;
    c->state = C_HEAD;
    c->refs++;
    route_request(c);
    if (c->state == C_BODY) {
        /* Reading may have paused while the guard ran (more than a head's
         * worth arrived); the body that came meanwhile is read first. */
        start_reading(c);
        advance(c);
    }
    conn_unref(c);
}

/* Start a request whose head parsed from the front of c->in. */
static void begin(conn_t *c, size_t headlen)
{
    tn_http_server_t *s = c->srv;
    /* Zeroed but for the head's header array (TN_HTTP_MAX_HEADERS spans,
     * 3.2 of its 3.6 KB): the parser fills it, and it is read only below
     * nheaders, which the parser sets. Zeroing it all was ~3,600 counted
     * instructions of a /pub (libc's memset stores it with `rep stosb`). */
    tn_http_request_t *r = tn_malloc(sizeof(*r));
    if (r == NULL) {
        conn_close(c);
        return;
    }
    memset(r, 0, offsetof(tn_http_request_t, head.headers));
    memset(&r->head.nheaders, 0, sizeof(*r) - offsetof(tn_http_request_t, head.nheaders));
    tn_buf_init(&r->body);
    tn_buf_init(&r->headbuf);
    size_t used;
    if (tn_buf_append(&r->headbuf, tn_buf_data(&c->in), headlen) != 0 ||
        tn_http_parse_head(tn_buf_data(&r->headbuf), headlen, headlen + 1, &r->head, &used) != 0) {
        tn_buf_fini(&r->headbuf);
        tn_free(r);
        conn_close(c);
        return;
    }
    tn_buf_consume(&c->in, headlen);
    r->conn = c;
    snprintf(r->remote, sizeof(r->remote), "%s", c->remote);
    r->secure = c->tls != NULL;
    c->req = r;
    c->head_started = false;
    const guard_t *g = find_guard(s, &r->head);
    if (g != NULL) {
        /* Parked until the guard lets it through (tn_http_resume) or
         * answers it; its body waits unread. */
        c->state = C_HANDLING;
        c->guarded = true;
        uv_timer_stop(&c->timer);
        c->refs++;
        g->fn(r, g->arg);
        conn_unref(c);
        return;
    }
    route_request(c);
}

/* Route the request whose head is in c->req, then read its body or
 * dispatch it. */
static void route_request(conn_t *c)
{
    tn_http_server_t *s = c->srv;
    tn_http_request_t *r = c->req;
    tn_http_req_t *h = &r->head;
    bool has_body = h->chunked || h->content_length > 0;
    bool known;
    const route_t *route = find_route(s, h, &known);
    /* OPTIONS * (the parser takes the asterisk form for OPTIONS alone):
     * answered below like OPTIONS of a path, with the server's methods. */
    known = known || (h->target.len == 1 && h->target.base[0] == '*');
    if (route == NULL) {
        const guard_t *g = known ? NULL : find_guard(s, h);
        if (g != NULL && g->not_found != NULL) {
            c->close_after = c->close_after || has_body;
            write_answer(c, h->minor, 404, "application/json; charset=utf-8", s->opts.own_headers,
                         g->not_found, strlen(g->not_found), false);
            request_free(c);
            c->state = C_HEAD;
            flush(c);
            return;
        }
        if (!known) {
            answer_error(c, h->minor, 404, "NOT_FOUND", has_body);
            return;
        }
        char allow[256], hdr[600];
        allowed_methods(s, h, allow, sizeof(allow));
        c->close_after = c->close_after || has_body;
        if (h->method.len == 7 && memcmp(h->method.base, "OPTIONS", 7) == 0) {
            /* As nsqd's router: the methods, in an empty 200. */
            snprintf(hdr, sizeof(hdr), "Allow: %s\r\n", allow);
            write_answer(c, h->minor, 200, NULL, hdr, "", 0, false);
            request_free(c);
            c->state = C_HEAD;
            flush(c);
            return;
        }
        snprintf(hdr, sizeof(hdr), "Allow: %s\r\n%s", allow,
                 s->opts.own_headers != NULL ? s->opts.own_headers : "");
        static const char body[] = "{\"message\":\"METHOD_NOT_ALLOWED\"}";
        write_answer(c, h->minor, 405, "application/json; charset=utf-8", hdr, body,
                     sizeof(body) - 1, false);
        request_free(c);
        c->state = C_HEAD;
        flush(c);
        return;
    }
    r->head_only = h->method.len == 4 && memcmp(h->method.base, "HEAD", 4) == 0;
    r->pattern = route->path;
    path_matches(route->path, h->path, r->params);
    c->route = route;
    if (has_body) {
        if ((uint64_t)TN_MAX(h->content_length, 0) > route->max_body ||
            (h->chunked && route->max_body == 0)) {
            answer_error(c, h->minor, 413, route->too_big, true);
            return;
        }
        if (h->content_length > LARGE_BODY && !take_large(c, (uint64_t)h->content_length)) {
            answer_error(c, h->minor, 503, "BUSY", true);
            return;
        }
        if (h->expect_continue)
            tn_buf_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        c->body_left = h->chunked ? 0 : (uint64_t)h->content_length;
        tn_http_chunked_init(&c->chunk);
        c->state = C_BODY;
        arm(c, s->opts.body_timeout_ms);
        flush(c);
        return;
    }
    dispatch(c);
}

/* Move body bytes from c->in into the request. */
static void read_body(conn_t *c)
{
    tn_http_request_t *r = c->req;
    size_t avail = tn_buf_size(&c->in);
    if (avail == 0)
        return;
    arm(c, c->srv->opts.body_timeout_ms); /* progress */
    if (!r->head.chunked) {
        size_t n = (size_t)TN_MIN((uint64_t)avail, c->body_left);
        if (body_reserve(&r->body, n) != 0 ||
            tn_buf_append(&r->body, tn_buf_data(&c->in), n) != 0) {
            conn_close(c);
            return;
        }
        tn_buf_consume(&c->in, n);
        c->body_left -= n;
        if (c->body_left == 0)
            dispatch(c);
        return;
    }
    if (body_reserve(&r->body, TN_MIN(avail, (size_t)READ_CHUNK)) != 0) {
        conn_close(c);
        return;
    }
    size_t used = 0;
    bool done = false;
    int rc = tn_http_chunked_decode(&c->chunk, tn_buf_data(&c->in), avail, &used, &r->body,
                                    c->route->max_body, &done);
    tn_buf_consume(&c->in, used);
    if (rc == TN_ETOOBIG) {
        answer_error(c, r->head.minor, 413, c->route->too_big, true);
        return;
    }
    if (rc != 0) {
        answer_error(c, r->head.minor, 400, "BAD_CHUNKED_BODY", true);
        return;
    }
    /* A chunked body over 1 MiB takes budget a megabyte at a time. */
    while (tn_buf_size(&r->body) > LARGE_BODY + c->large) {
        if (!take_large(c, LARGE_BODY)) {
            answer_error(c, r->head.minor, 503, "BUSY", true);
            return;
        }
    }
    if (done)
        dispatch(c);
}

/* Whether so many answers wait for the client that its pipelined
 * requests wait too (and reading stops), bounding what one client that
 * does not read can make the server hold. */
static bool backed_up(const conn_t *c)
{
    return tn_buf_size(&c->out) + tn_buf_size(&c->wbuf) + tn_buf_size(&c->sealed) >= MAX_UNSENT;
}

static void advance_loop(conn_t *c)
{
    for (;;) {
        if (c->state == C_BODY) {
            read_body(c);
            if (c->state == C_BODY)
                return;
            continue;
        }
        if (c->state != C_HEAD || c->close_after)
            return;
        if (backed_up(c)) {
            /* on_written comes back here; silence from a client that
             * reads nothing ends as an idle connection's does. */
            if (c->reading) {
                uv_read_stop((uv_stream_t *)&c->tcp);
                c->reading = false;
            }
            arm_idle(c);
            return;
        }
        start_reading(c);
        size_t len = tn_buf_size(&c->in);
        if (len == 0) {
            arm_idle(c);
            return;
        }
        /* A head parsed again only once a line ended since the last try
         * (or at the bound): parsing it from its start on every read of a
         * trickled head would cost its length per segment. */
        const char *in = tn_buf_data(&c->in);
        if (c->head_seen > 0 && len > c->head_seen && len < c->srv->opts.max_head &&
            memchr(in + c->head_seen, '\n', len - c->head_seen) == NULL) {
            c->head_seen = len;
            return;
        }
        tn_http_req_t probe;
        size_t used = 0;
        int rc = tn_http_parse_head(in, len, c->srv->opts.max_head, &probe, &used);
        c->head_seen = rc == TN_ESHORT ? len : 0;
        if (rc == TN_ESHORT) {
            if (!c->head_started) {
                c->head_started = true;
                arm(c, c->srv->opts.head_timeout_ms);
            }
            return;
        }
        if (rc != 0) {
            char code[64];
            snprintf(code, sizeof(code), "%s",
                     probe.status == 431   ? "HEADERS_TOO_LARGE"
                     : probe.status == 505 ? "VERSION_NOT_SUPPORTED"
                     : probe.status == 501 ? "NOT_IMPLEMENTED"
                     : probe.status == 417 ? "EXPECTATION_FAILED"
                                           : "BAD_REQUEST");
            answer_error(c, 1, probe.status, code, true);
            return;
        }
        begin(c, used);
        if (c->state == C_HANDLING || c->state == C_CLOSED || c->state == C_DRAINING)
            return;
    }
}

/* Start what c->in holds: a body being read, then the pipelined requests
 * one after another. A handler that answers at once calls back in here
 * (tn_http_respond); the loop already goes on to the next request, so the
 * nested call returns and the stack stays flat however many requests one
 * read brought. The caller holds a reference on c. */
static void advance(conn_t *c)
{
    if (c->advancing)
        return;
    c->advancing = true;
    advance_loop(c);
    c->advancing = false;
}

/* Hand the input to the upgraded connection's owner. */
static void up_feed(conn_t *c)
{
    if (tn_buf_size(&c->in) == 0 || c->up == NULL)
        return;
    c->refs++;
    /* The owner may close (and so free nothing of ours but c->in's use). */
    tn_buf_t in = c->in;
    tn_buf_init(&c->in);
    c->up->on_data(c->up_arg, tn_buf_data(&in), tn_buf_size(&in));
    tn_buf_reset(&in);
    if (c->in.base == NULL)
        c->in = in; /* keep the buffer for the next read */
    else
        tn_buf_fini(&in);
    conn_unref(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    static char scratch[READ_CHUNK]; /* loop thread only: dropped bytes land here */
    if (c->state == C_DRAINING) {
        *buf = uv_buf_init(scratch, sizeof(scratch));
        return;
    }
    tn_buf_t *b = c->tls != NULL ? &c->raw : &c->in;
    if (tn_buf_reserve(b, READ_CHUNK) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(b->base + b->len, READ_CHUNK);
}

/* HTTPS: pass what was read through the session into c->in, and send
 * the handshake records it produced. false when the connection closed. */
static bool tls_unseal(conn_t *c)
{
    bool done = false;
    int rc = tn_tls_feed(c->tls, tn_buf_data(&c->raw), tn_buf_size(&c->raw), &c->in, &done);
    tn_buf_reset(&c->raw);
    if (rc == 0)
        rc = tn_tls_drain(c->tls, &c->sealed);
    if (rc != 0) {
        /* A failed handshake or a close_notify; neither is the server's
         * business beyond debugging. The alert OpenSSL made (a protocol
         * version refused, say) goes out before the close, so the client
         * learns why. */
        if (rc == TN_EPROTO && strstr(tn_tls_errmsg(c->tls), "handshake") != NULL)
            TN_LOG_RL(TN_LOG_DEBUG, 10000, "HTTPS %s: %s", c->remote, tn_tls_errmsg(c->tls));
        if (!done && rc == TN_EPROTO && tn_tls_drain(c->tls, &c->sealed) == 0 &&
            tn_buf_size(&c->sealed) > 0) {
            /* No request exists before the handshake: nothing to cancel. */
            c->close_after = true;
            flush(c);
        } else {
            conn_close(c);
        }
        return false;
    }
    if (tn_buf_size(&c->sealed) > 0)
        flush(c);
    return c->state != C_CLOSED;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = stream->data;
    (void)buf;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->state == C_DRAINING)
        return;
    if (c->tls != NULL) {
        c->raw.len += (size_t)nread;
        if (!tls_unseal(c) || tn_buf_size(&c->in) == 0)
            return;
    } else {
        c->in.len += (size_t)nread;
    }
    if (c->state == C_UPGRADED) {
        up_feed(c);
        return;
    }
    if (c->state == C_HANDLING) {
        /* Pipelined bytes wait; a client that piles up more than a head's
         * worth is paused until this request is answered. */
        if (tn_buf_size(&c->in) > c->srv->opts.max_head) {
            uv_read_stop(stream);
            c->reading = false;
        }
        return;
    }
    c->refs++;
    advance(c);
    conn_unref(c);
}

static void start_reading(conn_t *c)
{
    if (c->reading || c->state == C_CLOSED)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = true;
}

/* --- listener -------------------------------------------------------------------- */

static void accept_one(tn_http_server_t *s)
{
    conn_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    c->refs = 2;
    s->refs++;
    tn_buf_init(&c->in);
    tn_buf_init(&c->out);
    tn_buf_init(&c->wbuf);
    tn_buf_init(&c->raw);
    tn_buf_init(&c->sealed);
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    if (!tn_addr_fd_room(&c->tcp)) {
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "HTTP connection refused: near the descriptor limit (%" PRIu32 " open)",
                  s->nconns);
        conn_close(c);
        return;
    }
    if (s->tls != NULL && (c->tls = tn_tls_new(s->tls)) == NULL) {
        conn_close(c); /* out of memory: dropped as a failed handshake is */
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    tn_addr_peer(&c->tcp, c->remote, sizeof(c->remote));
    arm_idle(c);
    start_reading(c);
}

static void accept_waiting(tn_http_server_t *s)
{
    if (s->waiting_accept && !s->closing && s->nconns < s->opts.max_connections) {
        s->waiting_accept = false;
        accept_one(s);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    tn_http_server_t *s = server->data;
    if (status != 0 || s->closing)
        return;
    if (s->nconns >= s->opts.max_connections) {
        /* Not accepted: libuv holds this one and the kernel's backlog the
         * rest, until a connection closes. */
        s->waiting_accept = true;
        return;
    }
    accept_one(s);
}

static void on_listener_closed(uv_handle_t *h)
{
    server_unref(h->data);
}

int tn_http_server_start(uv_loop_t *loop, const tn_http_opts_t *opts, const tn_netaddr_t *addr,
                         tn_http_server_t **out, char *err, size_t errlen)
{
    *out = NULL;
    tn_http_server_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->loop = loop;
    s->opts = *opts;
    s->refs = 1;
    s->tls = opts->tls;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    int rc = tn_addr_listen(&s->listener, addr, on_connection, err, errlen);
    if (rc != 0) {
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
        *out = NULL;
        return rc;
    }
    s->port = tn_addr_local_port(&s->listener);
    *out = s;
    return 0;
}

void tn_http_server_stats(const tn_http_server_t *s, tn_http_server_stats_t *out)
{
    out->connections = s->nconns;
    out->upgraded = s->nupgraded;
    out->requests = s->requests;
    memcpy(out->by_status, s->by_status, sizeof(out->by_status));
    out->unauthorized = s->unauthorized;
    out->large_body_bytes = s->large_in_use;
}

int tn_http_server_port(const tn_http_server_t *s)
{
    return s->port;
}

void tn_http_server_set_tls(tn_http_server_t *s, tn_tls_ctx_t *ctx)
{
    TN_ASSERT(s->tls != NULL && ctx != NULL);
    s->tls = ctx;
}

void tn_http_server_close(tn_http_server_t *s, void (*cb)(void *arg), void *arg)
{
    s->closing = true;
    s->close_cb = cb;
    s->close_arg = arg;
    while (s->conns != NULL)
        conn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

int tn_http_route(tn_http_server_t *s, const char *method, const char *path, uint64_t max_body,
                  const char *too_big, tn_http_handler_cb handler, void *arg)
{
    route_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return UV_ENOMEM;
    r->method = tn_strdup(method);
    r->path = tn_strdup(path);
    if (r->method == NULL || r->path == NULL) {
        tn_free(r->method);
        tn_free(r->path);
        tn_free(r);
        return UV_ENOMEM;
    }
    r->max_body = max_body;
    r->too_big = too_big != NULL ? too_big : "BODY_TOO_BIG";
    r->handler = handler;
    r->arg = arg;
    /* Appended: the first route registered for a method wins. */
    route_t **pp = &s->routes;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = r;
    return 0;
}

/* --- upgraded connections ------------------------------------------------------ */

static void on_leftover(uv_timer_t *t)
{
    up_feed(t->data);
}

tn_http_conn_t *tn_http_upgrade(tn_http_request_t *r, const char *headers,
                                const tn_http_upgrade_ops_t *ops, void *arg)
{
    conn_t *c = r->conn;
    if (c->state != C_HANDLING || c->req != r)
        return NULL;
    c->srv->requests++;
    c->srv->by_status[1]++;
    int rc = append_fmt(&c->out, "HTTP/1.1 101 %s\r\nServer: %s\r\n", tn_http_reason(101),
                        c->srv->opts.server_name);
    if (rc == 0 && headers != NULL)
        rc = tn_buf_append(&c->out, headers, strlen(headers));
    if (rc == 0)
        rc = tn_buf_append(&c->out, "\r\n", 2);
    request_free(c);
    if (rc != 0) {
        conn_close(c);
        return NULL;
    }
    c->state = C_UPGRADED;
    c->up = ops;
    c->up_arg = arg;
    c->srv->nupgraded++;
    uv_timer_stop(&c->timer);
    flush(c);
    if (c->state != C_UPGRADED)
        return NULL;
    start_reading(c);
    /* Bytes that came with the request go to the owner once it has its
     * handle. */
    if (tn_buf_size(&c->in) > 0)
        uv_timer_start(&c->timer, on_leftover, 0, 0);
    return (tn_http_conn_t *)c;
}

int tn_http_conn_write(tn_http_conn_t *hc, const void *data, size_t len)
{
    conn_t *c = (conn_t *)hc;
    if (c->state != C_UPGRADED)
        return UV_EPIPE;
    if (tn_buf_append(&c->out, data, len) != 0) {
        conn_close(c);
        return UV_ENOMEM;
    }
    flush(c);
    return 0;
}

size_t tn_http_conn_pending(const tn_http_conn_t *hc)
{
    const conn_t *c = (const conn_t *)hc;
    return tn_buf_size(&c->out) + (c->writing ? tn_buf_size(&c->wbuf) : 0);
}

void tn_http_conn_close(tn_http_conn_t *hc)
{
    conn_t *c = (conn_t *)hc;
    if (c->state != C_UPGRADED)
        return;
    c->close_after = true;
    flush(c);
}

void tn_http_conn_abort(tn_http_conn_t *hc)
{
    conn_t *c = (conn_t *)hc;
    if (c->state == C_UPGRADED)
        conn_close(c);
}

const char *tn_http_conn_remote(const tn_http_conn_t *hc)
{
    return ((const conn_t *)hc)->remote;
}

int tn_http_guard(tn_http_server_t *s, const char *prefix, tn_http_handler_cb fn, void *arg)
{
    guard_t *g = tn_calloc(1, sizeof(*g));
    if (g == NULL || (g->prefix = tn_strdup(prefix)) == NULL) {
        tn_free(g);
        return UV_ENOMEM;
    }
    g->fn = fn;
    g->arg = arg;
    guard_t **pp = &s->guards;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = g;
    return 0;
}
