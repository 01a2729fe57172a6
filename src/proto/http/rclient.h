/* The outbound HTTPS client of the daemon (docs/remotes.md, "The client"):
 * what a remote child's cursor and a remote check send through. It runs on
 * the event loop (libuv sockets and timers, OpenSSL on memory BIOs, so
 * nothing blocks), one keep-alive connection per client (one client per
 * remote), requests sent one after another in the order they were given.
 * (proto/http/client.h is the blocking client of the tools; its response
 * parser is reused here.)
 *
 * Security rules (each one tested, tests/unit/http/test_rclient.c):
 *   1. https only, verification always on: TLS 1.2 or later, the remote's
 *      CA bundle alone when it has one, else the system roots; the
 *      certificate must name the URL's host (SSL_set1_host, or the IP
 *      address for a literal). Key exchange groups in order of preference:
 *      X25519MLKEM768 (where this OpenSSL has it: checked at runtime),
 *      X25519, P-256, P-384.
 *   2. Every address a name resolves to (uv_getaddrinfo, at every dial) is
 *      checked by the address guard before any is dialled, and the address
 *      dialled is the one checked (no second resolution: DNS rebinding
 *      cannot get around it). A name with any refused address is refused
 *      as a whole (TN_RC_REFUSED, the guard's one message).
 *   3. No redirects: a 3xx is a failure (TN_RC_REFUSED) and nothing is sent
 *      to its Location. No proxies: HTTP_PROXY/HTTPS_PROXY are never read.
 *   4. Blind: a result is a status, a class and a detail in this client's
 *      own words; nothing the remote sent (body, header values, reason
 *      phrase) is kept or shown. Bodies are read (bounded) and dropped.
 *   5. Bounded: the answer's head is capped by the parser
 *      (TN_HC_MAX_HEAD), its body by max_body; the connect, the TLS
 *      handshake and each answer have a timeout.
 *
 * Classes of a result:
 *   ok            2xx
 *   unreachable   the name does not resolve, the connect fails or times
 *                 out, the handshake or the answer times out, the
 *                 connection breaks before the answer is complete
 *   tls           the handshake fails (verification, name, protocol)
 *   auth          401
 *   forbidden     403
 *   not_found     404
 *   refused       the address guard refused the address; a 3xx; any other
 *                 4xx (the remote refused this request: 400, 409, 413, 429)
 *   server_error  5xx, or an answer that is not valid HTTP or is too large
 *
 * Thread safety: a client belongs to the loop thread it was made on. */
#ifndef TN_PROTO_HTTP_RCLIENT_H
#define TN_PROTO_HTTP_RCLIENT_H

#include "core/platform.h"

#include "proto/http/guard.h"

#include <uv.h>

typedef enum {
    TN_RC_OK = 0,
    TN_RC_UNREACHABLE,
    TN_RC_TLS,
    TN_RC_AUTH,
    TN_RC_FORBIDDEN,
    TN_RC_NOT_FOUND,
    TN_RC_REFUSED,
    TN_RC_SERVER_ERROR,
    TN_RC_NCLASSES
} tn_rc_class_t;

/* "ok", "unreachable", "tls", ... (static). */
const char *tn_rc_class_name(tn_rc_class_t c);
/* The class of an HTTP status (pure; 1xx never reaches it). */
tn_rc_class_t tn_rc_class_of_status(int status);

/* The key exchange groups the client offers, in order ("X25519MLKEM768:
 * X25519:P-256:P-384" or, on an OpenSSL without the hybrid, "X25519:P-256:
 * P-384"). Static; the first call probes OpenSSL. */
const char *tn_rc_groups(void);

typedef struct {
    int status;        /* the HTTP status; 0 when no answer came */
    tn_rc_class_t cls; /* TN_RC_OK only for a 2xx */
    int err;           /* 0 for an answer, else why none came (UV_ECONNREFUSED, UV_ETIMEDOUT,
                        * UV_EACCES for the guard, TN_EPROTO, UV_ECANCELED at close, ...) */
    char detail[192];  /* in this client's words, never the remote's: "connect: connection
                        * refused", "TLS: certificate verify failed: ...", "answered 302
                        * (redirects are not followed)" */
} tn_rc_result_t;

/* The answer to one request. r is borrowed for the call. The client may be
 * closed from inside the callback. */
typedef void (*tn_rc_cb)(void *ud, const tn_rc_result_t *r);

typedef struct {
    const char *url;         /* https://host[:port][/prefix], borrowed (parsed and copied) */
    const char *ca_pem;      /* PEM certificates trusted alone; NULL or "": the system roots */
    const tn_guard_t *guard; /* borrowed: must outlive the client */
    int connect_timeout_ms;  /* <= 0: 10000 (per address tried) */
    int tls_timeout_ms;      /* <= 0: 10000 */
    int response_timeout_ms; /* from the request's first byte to the answer's last; <= 0: 30000 */
    size_t max_body;         /* an answer's body above this fails (server_error); 0: 1 MiB */
} tn_rc_opts_t;

typedef struct tn_rc_s tn_rc_t;

/* A client (nothing connects until the first request). 0 with *out;
 * UV_EINVAL with err saying why (the URL, the guard's port or host rules,
 * a refused literal address, a ca_pem without a certificate); UV_ENOMEM. */
int tn_rc_new(uv_loop_t *loop, const tn_rc_opts_t *o, tn_rc_t **out, char *err, size_t errlen);

/* Fail every request not answered yet (UV_ECANCELED, their callbacks run
 * before this returns), drop the connection, and free the client once its
 * handles have closed (a later loop pass). c must not be used after. */
void tn_rc_close(tn_rc_t *c);

typedef struct {
    const char *method;        /* "POST", "GET" */
    const char *path;          /* origin-form after the URL's prefix: "/v1/topics/orders" */
    const char *authorization; /* the header's value ("Basic ..."), or NULL: none */
    const char *content_type;  /* or NULL: none */
    const char *body;          /* with len; NULL with 0: none (Content-Length: 0 on POST) */
    size_t len;
} tn_rc_req_t;

/* Queue a request; every string and the body are copied. cb runs exactly
 * once, later (never inside this call). 0; UV_EINVAL (a CR, LF or other
 * control byte in the method, path or a header value, or a path not
 * starting with '/'); UV_ENOMEM. A reused connection found closed before
 * any byte of the answer came sends the request once more on a new one. */
int tn_rc_request(tn_rc_t *c, const tn_rc_req_t *req, tn_rc_cb cb, void *ud);

/* Connections opened so far (for tests: keep-alive reuses one). */
uint64_t tn_rc_connections(const tn_rc_t *c);

#endif
