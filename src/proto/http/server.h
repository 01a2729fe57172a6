/* The HTTP/1.1 server core: listener, connections, routing, bodies,
 * responses and the listener's bounds. Handlers (src/api) see parsed
 * requests with their whole body and answer with tn_http_respond, at once
 * or later (long polls park the request and answer when they can).
 *
 * DESIGN: a connection.
 *   1. Read until a request head parses (tn_http_parse_head), trying
 *      again only once a line ended since the last try. The head must
 *      arrive within head_timeout (408) and fit max_head (431).
 *   2. Route it: unknown path 404, known path with another method 405
 *      (with Allow). A declared body over the route's limit is 413 before
 *      a byte of it is read; `Expect: 100-continue` gets its interim
 *      answer only when the request will be read.
 *   3. Read the body (Content-Length or chunked) into a buffer that starts
 *      at 64 KiB and grows fourfold as bytes arrive, never to the declared
 *      length up front. A body over 1 MiB first takes its share of a
 *      node-wide budget (503 and `Retry-After: 1` when it is spent). Bodies
 *      must keep arriving (body_timeout, 408).
 *   4. Call the handler. Pipelined requests wait in the input buffer until
 *      this one is answered, so answers leave in order.
 *   5. After the answer: keep-alive reads the next request (idle_timeout
 *      closes a quiet connection: no request, and no byte of an answer
 *      taken, so a slow reader of a long answer keeps it while one that
 *      reads nothing does not); otherwise, and after any error answered
 *      before the body was read, the server shuts down its write side and
 *      drains the input briefly, so the client reads the status instead of
 *      a reset.
 *
 * Connections over max_connections are not accepted: they wait in the
 * kernel's accept backlog until one closes. A client that goes away while
 * its request is parked is noticed (its socket is still read) and the
 * handler's cancel callback runs.
 *
 * HTTPS: with a TLS context the listener speaks TLS (OpenSSL on memory
 * BIOs, proto/nsq/tls.h): bytes read go through the session before the
 * steps above see them, and everything written (answers, upgraded
 * connections' bytes) is sealed on its way out, so nothing here blocks on
 * a handshake. A handshake that fails closes the connection (logged at
 * debug); a graceful close sends close_notify first.
 *
 * Threads: the loop thread. */
#ifndef TN_PROTO_HTTP_SERVER_H
#define TN_PROTO_HTTP_SERVER_H

#include "core/platform.h"

#include "core/buf.h"
#include "core/netaddr.h"
#include "proto/http/parser.h"
#include "proto/nsq/tls.h"

#include <uv.h>

typedef struct tn_http_server_s tn_http_server_t;
typedef struct tn_http_request_s tn_http_request_t;
typedef void (*tn_http_handler_cb)(tn_http_request_t *r, void *arg);

/* Path parameters a route pattern may hold. */
#define TN_HTTP_MAX_PARAMS 4

/* One request: valid from the handler's call until tn_http_respond (or,
 * when the client went away, until the cancel callback returns). */
struct tn_http_request_s {
    tn_http_req_t head; /* spans point into the request's own copy */
    tn_buf_t body;
    char remote[64];
    bool secure; /* it came over this server's TLS (an HTTPS listener) */
    /* For a handler that answers later: cancel runs (instead of any
     * answer) if the client disconnects first. */
    void (*on_cancel)(tn_http_request_t *r);
    void *data;
    /* For its routes: a handler that parked the request until the state
     * it reads was confirmed current runs again with this set (api/v1,
     * tn__v1_caught_up); false at first. */
    bool confirmed;
    /* Private. */
    void *conn;
    tn_buf_t headbuf;
    bool head_only;      /* HEAD: answer without the body */
    const char *pattern; /* the route's path, with its {name} segments */
    char principal[72];  /* who a guard let through ("" if none) */
    tn_iov_t params[TN_HTTP_MAX_PARAMS];
};

typedef struct {
    uint32_t max_connections;
    size_t max_head;            /* 64 KiB */
    int64_t head_timeout_ms;    /* 5 s */
    int64_t body_timeout_ms;    /* 30 s without progress */
    int64_t idle_timeout_ms;    /* no request, no answer taken: 60 s */
    uint64_t large_body_budget; /* node-wide bytes of bodies over 1 MiB in flight */
    const char *server_name;    /* "Server:" header, borrowed */
    /* Header lines ("Name: value\r\n"...) for the answers the server makes
     * itself (404, 405, 413, 503, ...), borrowed; NULL: none. */
    const char *own_headers;
    tn_tls_ctx_t *tls; /* HTTPS with it (borrowed, see tn_http_server_set_tls); NULL: plain */
} tn_http_opts_t;

void tn_http_opts_default(tn_http_opts_t *o);

/* Listen on addr, resolved by the configuration (port 0 picks one). On
 * failure writes a line naming the address, its option and the system
 * error into err ("cannot listen on 127.0.0.1:4151 (http-address): address
 * already in use") and sets *out to NULL; the handle closes on the loop.
 * opts and addr are copied/borrowed for the call. */
int tn_http_server_start(uv_loop_t *loop, const tn_http_opts_t *opts, const tn_netaddr_t *addr,
                         tn_http_server_t **out, char *err, size_t errlen);
int tn_http_server_port(const tn_http_server_t *s);
/* Serve new TLS handshakes with ctx from now on (a certificate reload);
 * connections already open keep the session they have. ctx is borrowed
 * until the next call or the server's close; the previous one may be
 * freed on return. Only for a server started with a context. */
void tn_http_server_set_tls(tn_http_server_t *s, tn_tls_ctx_t *ctx);

typedef struct {
    uint32_t connections; /* upgraded ones included */
    uint32_t upgraded;
    uint64_t requests;
    uint64_t by_status[6];     /* answers by class: [1] 1xx .. [5] 5xx */
    uint64_t unauthorized;     /* 401 answers: credentials missing or wrong */
    uint64_t large_body_bytes; /* budget in use */
} tn_http_server_stats_t;

void tn_http_server_stats(const tn_http_server_t *s, tn_http_server_stats_t *out);
/* Close the listener and every connection (parked requests are
 * cancelled); cb runs when all is closed. */
void tn_http_server_close(tn_http_server_t *s, void (*cb)(void *arg), void *arg);
/* From now on every answer says `Connection: close` and its connection
 * closes after it (a draining node: a client's next request opens a new
 * connection, which a load balancer sends to a ready node). For good. */
void tn_http_server_end_keepalive(tn_http_server_t *s);

/* Route method + path to handler. The path is exact, except that a
 * segment written {name} matches any one non-empty segment (read it with
 * tn_http_param); exact routes and patterns are tried in the order they
 * were added. max_body bounds the request body
 * (0: no body allowed), and a larger one is answered 413 with
 * {"message": too_big} (NULL: "BODY_TOO_BIG"), or with too_big itself
 * when it starts with `{` (a whole JSON document, under 256 bytes: the
 * /v1 routes' {"error": ...}); borrowed for the server's lifetime.
 * Several methods may share a path. 0 or UV_ENOMEM. */
int tn_http_route(tn_http_server_t *s, const char *method, const char *path, uint64_t max_body,
                  const char *too_big, tn_http_handler_cb handler, void *arg);

/* Run fn on every request whose path starts with prefix, before routing
 * and before its body is read (authentication): fn either answers r
 * (tn_http_respond; the body is then not read and the connection closes
 * gracefully if one was coming) or lets it through with tn_http_resume,
 * at once or later (it may park r like a handler). An unknown path under
 * the prefix meets the guard first. 0 or UV_ENOMEM. */
int tn_http_guard(tn_http_server_t *s, const char *prefix, tn_http_handler_cb fn, void *arg);
void tn_http_resume(tn_http_request_t *r);
/* Answer 404 for unknown paths under a guard's prefix with body (a JSON
 * document, borrowed for the server's lifetime) instead of the server's
 * own. 0, or TN_ENOTFOUND when no guard has that prefix. */
int tn_http_guard_not_found(tn_http_server_t *s, const char *prefix, const char *body);

/* The path segment matched by {name} in r's route, or NULL. */
const tn_iov_t *tn_http_param(const tn_http_request_t *r, const char *name);

/* Answer r and end it. content_type may be NULL (no header); headers (may
 * be NULL) are extra lines, each ending in "\r\n"; body is copied. */
void tn_http_respond(tn_http_request_t *r, int status, const char *content_type,
                     const char *headers, const void *body, size_t len);

/* Upgrading a request's connection to another protocol (WebSocket): the
 * server answers 101 and from then on hands the connection's bytes to
 * the handler's callbacks and writes what it is given. */
typedef struct tn_http_conn_s tn_http_conn_t;
typedef struct {
    /* Bytes from the client (the first call may carry bytes that came
     * right after the request). */
    void (*on_data)(void *arg, const char *data, size_t len);
    /* Everything written so far has left (optional). */
    void (*on_drain)(void *arg);
    /* The connection is gone (closed by either side or by the server's
     * shutdown); no call follows. May run inside tn_http_conn_close. */
    void (*on_close)(void *arg);
} tn_http_upgrade_ops_t;

/* Answer r with 101 Switching Protocols plus headers (each line ending in
 * "\r\n", borrowed) and hand the connection over. ops is borrowed for the
 * connection's lifetime. NULL when r is no longer answerable. */
tn_http_conn_t *tn_http_upgrade(tn_http_request_t *r, const char *headers,
                                const tn_http_upgrade_ops_t *ops, void *arg);
/* Queue bytes; 0, or UV_ENOMEM (the connection is then closing). */
int tn_http_conn_write(tn_http_conn_t *c, const void *data, size_t len);
/* Bytes queued and not yet handed to the kernel. */
size_t tn_http_conn_pending(const tn_http_conn_t *c);
/* Close after what is queued is written (write side first, so the client
 * reads it all). on_close follows. */
void tn_http_conn_close(tn_http_conn_t *c);
/* Close at once, dropping what is queued. on_close follows. */
void tn_http_conn_abort(tn_http_conn_t *c);
const char *tn_http_conn_remote(const tn_http_conn_t *c);

/* The standard reason phrase of a status. */
const char *tn_http_reason(int status);

#endif
