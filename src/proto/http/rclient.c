/* The outbound HTTPS client (see rclient.h).
 *
 * DESIGN (one request, from the head of the queue):
 *   1. No connection: resolve the URL's host (a literal needs none), check
 *      every address with the guard (any refused: the name is refused),
 *      then connect to each checked address in turn until one answers.
 *   2. Run the TLS handshake on memory BIOs (SNI and the host check for a
 *      name, the IP check for a literal).
 *   3. Encrypt the request (head and body, built when it was queued) and
 *      write it; feed what comes back to tn_hc_parser_t, dropping the body.
 *   4. On the parser's "complete": classify the status, keep the
 *      connection when the answer allows it, answer the caller, go on with
 *      the next request.
 * Phases are bounded by one timer: connect (per address), handshake,
 * answer.
 *
 * Failures: before a connection is up (resolution, guard, connect, TLS),
 * every queued request gets the same result (they would all meet it); a
 * connection that breaks while a request is out fails that request alone,
 * except that a reused connection closed before any byte of the answer
 * (the server dropped it idle: it never saw the request) sends it once
 * more on a new connection.
 *
 * Ownership: the connection and the look-up are separate allocations that
 * point back at the client; detaching them (setting the pointer to NULL)
 * lets the client close or move on while their callbacks are still due,
 * and they free themselves when those come. */
#include "core/platform.h"

#include "proto/http/rclient.h"

#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "proto/http/client.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#define RC_MAX_ADDRS 16
#define RC_READ_BUF  16384

static const char *const class_names[TN_RC_NCLASSES] = {
    "ok", "unreachable", "tls", "auth", "forbidden", "not_found", "refused", "server_error",
};

const char *tn_rc_class_name(tn_rc_class_t c)
{
    return (unsigned)c < TN_RC_NCLASSES ? class_names[c] : "unknown";
}

tn_rc_class_t tn_rc_class_of_status(int status)
{
    if (status >= 200 && status <= 299)
        return TN_RC_OK;
    if (status == 401)
        return TN_RC_AUTH;
    if (status == 403)
        return TN_RC_FORBIDDEN;
    if (status == 404)
        return TN_RC_NOT_FOUND;
    if (status >= 500 && status <= 599)
        return TN_RC_SERVER_ERROR;
    if (status >= 300 && status <= 499)
        return TN_RC_REFUSED;
    return TN_RC_SERVER_ERROR; /* not a status a server may answer with */
}

#define GROUPS_HYBRID "X25519MLKEM768:X25519:P-256:P-384"
#define GROUPS_PLAIN  "X25519:P-256:P-384"

const char *tn_rc_groups(void)
{
    static const char *groups;
    if (groups == NULL) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        groups = ctx != NULL && SSL_CTX_set1_groups_list(ctx, GROUPS_HYBRID) == 1 ? GROUPS_HYBRID
                                                                                  : GROUPS_PLAIN;
        ERR_clear_error();
        SSL_CTX_free(ctx);
    }
    return groups;
}

typedef struct rc_req_s rc_req_t;
struct rc_req_s {
    rc_req_t *next;
    tn_buf_t wire; /* the whole request in clear: head and body */
    bool head;     /* a HEAD request: the answer has no body */
    bool resent;   /* sent once more after a reused connection closed */
    tn_rc_cb cb;
    void *ud;
};

typedef struct rc_conn_s rc_conn_t;
typedef struct rc_gai_s rc_gai_t;

enum { PH_IDLE, PH_RESOLVE, PH_CONNECT, PH_TLS, PH_READY, PH_ANSWER };

struct tn_rc_s {
    uv_loop_t *loop;
    tn_guard_url_t url;
    const tn_guard_t *guard;
    char authority[TN_GUARD_HOST_MAX + 16]; /* the Host header */
    char prefix[TN_GUARD_PATH_MAX + 1];     /* the URL's path without a trailing '/' */
    SSL_CTX *ctx;
    int connect_ms, tls_ms, answer_ms;
    size_t max_body;
    uv_timer_t timer; /* the phase's bound */
    uv_timer_t kick;  /* runs the queue on a later loop pass */
    int open_handles;
    int phase;
    bool closing;
    rc_conn_t *conn;
    rc_gai_t *gai;
    struct sockaddr_storage addrs[RC_MAX_ADDRS];
    size_t naddrs, next_addr;
    rc_req_t *head, *tail; /* queued; head is the one out when phase is PH_ANSWER */
    uint64_t connections;
};

struct rc_gai_s {
    uv_getaddrinfo_t req;
    tn_rc_t *rc; /* NULL once the client moved on */
};

struct rc_conn_s {
    uv_tcp_t tcp;
    uv_connect_t creq;
    tn_rc_t *rc; /* NULL once detached */
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    bool reused;      /* an answer came on it before */
    bool answer_bytes;
    bool reading;
    tn_hc_parser_t parser;
    bool parser_live;
    uint64_t body;
    char rbuf[RC_READ_BUF];
};

typedef struct {
    uv_write_t req;
    size_t len;
    char data[];
} rc_write_t;

static void kick(tn_rc_t *rc);
static void arm(tn_rc_t *rc);
static void dial_next(tn_rc_t *rc);

/* --- results ---------------------------------------------------------------- */

static void result_set(tn_rc_result_t *r, int status, tn_rc_class_t cls, int err, const char *fmt,
                       ...) TN_PRINTF(5, 6);
static void result_set(tn_rc_result_t *r, int status, tn_rc_class_t cls, int err, const char *fmt,
                       ...)
{
    r->status = status;
    r->cls = cls;
    r->err = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
    va_end(ap);
}

static void req_free(rc_req_t *q)
{
    tn_buf_fini(&q->wire);
    tn_free(q);
}

static rc_req_t *pop(tn_rc_t *rc)
{
    rc_req_t *q = rc->head;
    if (q != NULL) {
        rc->head = q->next;
        if (rc->head == NULL)
            rc->tail = NULL;
    }
    return q;
}

/* Answer the head request. The callback may close the client. */
static void answer_head(tn_rc_t *rc, const tn_rc_result_t *r)
{
    rc_req_t *q = pop(rc);
    if (q == NULL)
        return;
    q->cb(q->ud, r);
    req_free(q);
}

/* Answer every queued request with r (a failure before any was sent). */
static void answer_all(tn_rc_t *rc, const tn_rc_result_t *r)
{
    /* Take the queue first: a callback may queue more (those wait for the
     * next attempt) or close the client. */
    rc_req_t *q = rc->head;
    rc->head = rc->tail = NULL;
    while (q != NULL) {
        rc_req_t *next = q->next;
        q->cb(q->ud, r);
        req_free(q);
        q = next;
    }
    if (!rc->closing && rc->head != NULL)
        kick(rc);
}

/* --- connections -------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h)
{
    rc_conn_t *cn = h->data;
    if (cn->parser_live)
        tn_hc_parser_fini(&cn->parser);
    SSL_free(cn->ssl);
    tn_free(cn);
}

/* Detach the client's connection and close it. */
static void conn_drop(tn_rc_t *rc)
{
    rc_conn_t *cn = rc->conn;
    if (cn == NULL)
        return;
    rc->conn = NULL;
    cn->rc = NULL;
    uv_close((uv_handle_t *)&cn->tcp, on_conn_closed);
}

static void on_write(uv_write_t *w, int status)
{
    (void)status; /* a failed write shows as a failed read or the answer's timeout */
    tn_free(w->data);
}

/* Write what OpenSSL has for the network. 0 or a libuv error. */
static int flush(rc_conn_t *cn)
{
    size_t pending = BIO_ctrl_pending(cn->wbio);
    if (pending == 0)
        return 0;
    rc_write_t *w = tn_malloc(sizeof(*w) + pending);
    if (w == NULL)
        return UV_ENOMEM;
    int n = BIO_read(cn->wbio, w->data, (int)pending);
    if (n <= 0) {
        tn_free(w);
        return UV_EIO;
    }
    w->len = (size_t)n;
    w->req.data = w;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
    int rv = uv_write(&w->req, (uv_stream_t *)&cn->tcp, &b, 1, on_write);
    if (rv < 0)
        tn_free(w);
    return rv;
}

static void ossl_reason(char *out, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(out, len, "the connection closed during the handshake");
    else
        ERR_error_string_n(e, out, len);
    ERR_clear_error();
}

/* A failure of the connection (phase says which step). */
static void conn_fail(tn_rc_t *rc, tn_rc_class_t cls, int err, const char *what)
{
    bool reused = rc->conn != NULL && rc->conn->reused;
    bool answer_bytes = rc->conn != NULL && rc->conn->answer_bytes;
    int phase = rc->phase;
    conn_drop(rc);
    uv_timer_stop(&rc->timer);
    rc->phase = PH_IDLE;
    tn_rc_result_t r;
    result_set(&r, 0, cls, err, "%s", what);
    if (phase == PH_ANSWER) {
        if (reused && !answer_bytes && rc->head != NULL && !rc->head->resent &&
            (err == UV_EOF || err == UV_ECONNRESET || err == UV_EPIPE)) {
            rc->head->resent = true;
            kick(rc);
            return;
        }
        answer_head(rc, &r);
    } else {
        answer_all(rc, &r);
    }
    if (!rc->closing)
        kick(rc);
}

static void send_head(tn_rc_t *rc)
{
    rc_conn_t *cn = rc->conn;
    rc_req_t *q = rc->head;
    if (cn->parser_live)
        tn_hc_parser_fini(&cn->parser);
    cn->parser_live = false;
    cn->answer_bytes = false;
    cn->body = 0;
    rc->phase = PH_ANSWER; /* a failure from here fails this request alone */
    arm(rc);
    int rv = SSL_write(cn->ssl, tn_buf_data(&q->wire), (int)tn_buf_size(&q->wire));
    if (rv <= 0) {
        char why[160];
        ossl_reason(why, sizeof(why));
        char msg[200];
        snprintf(msg, sizeof(msg), "TLS: %s", why);
        conn_fail(rc, TN_RC_TLS, TN_EPROTO, msg);
        return;
    }
    rv = flush(cn);
    if (rv < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "write: %s", uv_strerror(rv));
        conn_fail(rc, TN_RC_UNREACHABLE, rv, msg);
        return;
    }
}

static int on_body(void *ud, const char *data, size_t len)
{
    (void)data;
    rc_conn_t *cn = ud;
    cn->body += len;
    return cn->rc != NULL && cn->body > cn->rc->max_body ? TN_ETOOBIG : 0;
}

/* The answer is complete (p's status and keep_alive are known). */
static void answered(tn_rc_t *rc, bool extra)
{
    rc_conn_t *cn = rc->conn;
    int status = cn->parser.status;
    bool keep = cn->parser.keep_alive && !extra;
    uv_timer_stop(&rc->timer);
    cn->reused = true;
    if (keep) {
        rc->phase = PH_READY;
    } else {
        conn_drop(rc);
        rc->phase = PH_IDLE;
    }
    tn_rc_result_t r;
    tn_rc_class_t cls = tn_rc_class_of_status(status);
    if (status >= 300 && status <= 399)
        result_set(&r, status, cls, 0, "answered %d (redirects are not followed)", status);
    else
        result_set(&r, status, cls, 0, "answered %d", status);
    answer_head(rc, &r);
    if (!rc->closing)
        kick(rc);
}

/* Plaintext from the remote. */
static void on_plain(tn_rc_t *rc, const char *data, size_t len)
{
    rc_conn_t *cn = rc->conn;
    if (rc->phase != PH_ANSWER) {
        /* Bytes nobody asked for: the connection is not usable. */
        conn_drop(rc);
        rc->phase = PH_IDLE;
        kick(rc);
        return;
    }
    if (!cn->parser_live) {
        tn_hc_parser_init(&cn->parser, rc->head->head, on_body, cn);
        cn->parser_live = true;
    }
    cn->answer_bytes = true;
    size_t used = 0;
    int rv = tn_hc_parser_feed(&cn->parser, data, len, &used);
    if (rv == TN_ESHORT)
        return;
    if (rv == 0) {
        answered(rc, used < len);
        return;
    }
    if (rv == TN_ETOOBIG)
        conn_fail(rc, TN_RC_SERVER_ERROR, rv, "the answer's body is over the client's limit");
    else if (rv == UV_ENOMEM)
        conn_fail(rc, TN_RC_SERVER_ERROR, rv, "out of memory reading the answer");
    else
        conn_fail(rc, TN_RC_SERVER_ERROR, TN_EPROTO, "the answer is not valid HTTP/1.1");
}

static void handshake(tn_rc_t *rc)
{
    rc_conn_t *cn = rc->conn;
    int rv = SSL_do_handshake(cn->ssl);
    int frv = flush(cn);
    if (rv == 1) {
        uv_timer_stop(&rc->timer);
        rc->phase = PH_READY;
        kick(rc);
        return;
    }
    int e = SSL_get_error(cn->ssl, rv);
    if (e == SSL_ERROR_WANT_READ && frv == 0)
        return;
    char why[160], msg[200];
    long vr = SSL_get_verify_result(cn->ssl);
    if (vr != X509_V_OK)
        snprintf(why, sizeof(why), "certificate verify failed: %s",
                 X509_verify_cert_error_string(vr));
    else if (frv < 0)
        snprintf(why, sizeof(why), "write: %s", uv_strerror(frv));
    else
        ossl_reason(why, sizeof(why));
    ERR_clear_error();
    snprintf(msg, sizeof(msg), "TLS handshake failed: %s", why);
    conn_fail(rc, TN_RC_TLS, TN_EPROTO, msg);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    rc_conn_t *cn = h->data;
    *buf = uv_buf_init(cn->rbuf, sizeof(cn->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    rc_conn_t *cn = s->data;
    tn_rc_t *rc = cn->rc;
    if (rc == NULL || nread == 0)
        return;
    if (nread < 0) {
        int err = (int)nread;
        if (rc->phase == PH_TLS) {
            conn_fail(rc, TN_RC_TLS, TN_EPROTO,
                      "TLS handshake failed: the connection closed during the handshake");
        } else if (rc->phase == PH_ANSWER) {
            if (err == UV_EOF && cn->parser_live && tn_hc_parser_eof(&cn->parser) == 0) {
                answered(rc, false);
                return;
            }
            char msg[160];
            snprintf(msg, sizeof(msg), "the connection closed before the answer was complete (%s)",
                     uv_err_name(err));
            conn_fail(rc, TN_RC_UNREACHABLE, err, msg);
        } else {
            /* An idle connection closed by the server: open another next time. */
            conn_drop(rc);
            rc->phase = PH_IDLE;
            kick(rc);
        }
        return;
    }
    if (BIO_write(cn->rbio, buf->base, (int)nread) != (int)nread) {
        conn_fail(rc, TN_RC_UNREACHABLE, UV_ENOMEM, "out of memory reading the answer");
        return;
    }
    if (rc->phase == PH_TLS) {
        handshake(rc);
        if (rc->conn != cn || rc->phase == PH_TLS)
            return;
    }
    char plain[RC_READ_BUF];
    for (;;) {
        int n = SSL_read(cn->ssl, plain, sizeof(plain));
        if (n > 0) {
            on_plain(rc, plain, (size_t)n);
            if (rc->conn != cn || rc->closing)
                return;
            continue;
        }
        int e = SSL_get_error(cn->ssl, n);
        if (e == SSL_ERROR_WANT_READ) {
            if (flush(cn) < 0)
                conn_fail(rc, TN_RC_UNREACHABLE, UV_EIO, "write failed");
            return;
        }
        ERR_clear_error();
        if (e == SSL_ERROR_ZERO_RETURN) {
            /* close_notify: the same as the end of the stream. */
            uv_buf_t none = uv_buf_init(NULL, 0);
            on_read(s, UV_EOF, &none);
            return;
        }
        conn_fail(rc, TN_RC_TLS, TN_EPROTO, "TLS: the record layer failed");
        return;
    }
}

static void on_connect(uv_connect_t *creq, int status)
{
    rc_conn_t *cn = creq->data;
    tn_rc_t *rc = cn->rc;
    if (rc == NULL)
        return;
    uv_timer_stop(&rc->timer);
    if (status < 0) {
        conn_drop(rc);
        if (rc->next_addr < rc->naddrs) {
            dial_next(rc);
            return;
        }
        char msg[160];
        snprintf(msg, sizeof(msg), "connect: %s", uv_strerror(status));
        rc->phase = PH_CONNECT;
        conn_fail(rc, TN_RC_UNREACHABLE, status, msg);
        return;
    }
    rc->connections++;
    uv_tcp_nodelay(&cn->tcp, 1);
    int rv = uv_read_start((uv_stream_t *)&cn->tcp, on_alloc, on_read);
    if (rv < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "read: %s", uv_strerror(rv));
        conn_fail(rc, TN_RC_UNREACHABLE, rv, msg);
        return;
    }
    rc->phase = PH_TLS;
    arm(rc);
    handshake(rc);
}

static void dial_next(tn_rc_t *rc)
{
    const struct sockaddr *sa = (const struct sockaddr *)&rc->addrs[rc->next_addr++];
    rc_conn_t *cn = tn_calloc(1, sizeof(*cn));
    tn_rc_result_t r;
    if (cn == NULL) {
        result_set(&r, 0, TN_RC_UNREACHABLE, UV_ENOMEM, "out of memory");
        rc->phase = PH_IDLE;
        answer_all(rc, &r);
        return;
    }
    int rv = uv_tcp_init(rc->loop, &cn->tcp);
    if (rv < 0) {
        tn_free(cn);
        result_set(&r, 0, TN_RC_UNREACHABLE, rv, "socket: %s", uv_strerror(rv));
        rc->phase = PH_IDLE;
        answer_all(rc, &r);
        return;
    }
    cn->tcp.data = cn;
    cn->creq.data = cn;
    cn->rc = rc;
    rc->conn = cn;
    cn->ssl = SSL_new(rc->ctx);
    cn->rbio = BIO_new(BIO_s_mem());
    cn->wbio = BIO_new(BIO_s_mem());
    if (cn->ssl == NULL || cn->rbio == NULL || cn->wbio == NULL) {
        BIO_free(cn->rbio);
        BIO_free(cn->wbio);
        cn->rbio = cn->wbio = NULL;
        ERR_clear_error();
        rc->phase = PH_CONNECT;
        conn_fail(rc, TN_RC_UNREACHABLE, UV_ENOMEM, "out of memory");
        return;
    }
    SSL_set_bio(cn->ssl, cn->rbio, cn->wbio);
    SSL_set_connect_state(cn->ssl);
    int ok;
    if (rc->url.literal) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(cn->ssl), rc->url.host);
    } else {
        ok = SSL_set_tlsext_host_name(cn->ssl, rc->url.host) == 1 &&
             SSL_set1_host(cn->ssl, rc->url.host) == 1;
    }
    if (ok != 1) {
        ERR_clear_error();
        rc->phase = PH_CONNECT;
        conn_fail(rc, TN_RC_TLS, UV_EINVAL, "TLS: cannot set the host to verify");
        return;
    }
    rc->phase = PH_CONNECT;
    rv = uv_tcp_connect(&cn->creq, &cn->tcp, sa, on_connect);
    if (rv < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "connect: %s", uv_strerror(rv));
        conn_fail(rc, TN_RC_UNREACHABLE, rv, msg);
        return;
    }
    arm(rc);
}

/* The addresses are known: check each, then dial. */
static void addresses_ready(tn_rc_t *rc)
{
    tn_rc_result_t r;
    if (rc->naddrs == 0) {
        result_set(&r, 0, TN_RC_UNREACHABLE, UV_EAI_NONAME, "the host resolves to no address");
        rc->phase = PH_IDLE;
        answer_all(rc, &r);
        return;
    }
    for (size_t i = 0; i < rc->naddrs; i++) {
        if (tn_guard_check_addr(rc->guard, (const struct sockaddr *)&rc->addrs[i]) != 0) {
            result_set(&r, 0, TN_RC_REFUSED, UV_EACCES, "%s", TN_GUARD_REFUSED);
            rc->phase = PH_IDLE;
            answer_all(rc, &r);
            return;
        }
    }
    rc->next_addr = 0;
    dial_next(rc);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rc_gai_t *g = req->data;
    tn_rc_t *rc = g->rc;
    tn_free(g);
    if (rc == NULL) {
        uv_freeaddrinfo(res);
        return;
    }
    rc->gai = NULL;
    uv_timer_stop(&rc->timer);
    if (status < 0) {
        uv_freeaddrinfo(res);
        tn_rc_result_t r;
        result_set(&r, 0, TN_RC_UNREACHABLE, status, "resolve: %s", uv_strerror(status));
        rc->phase = PH_IDLE;
        answer_all(rc, &r);
        if (!rc->closing)
            kick(rc);
        return;
    }
    rc->naddrs = 0;
    for (struct addrinfo *a = res; a != NULL && rc->naddrs < RC_MAX_ADDRS; a = a->ai_next) {
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
            a->ai_addrlen > sizeof(rc->addrs[0]))
            continue;
        memset(&rc->addrs[rc->naddrs], 0, sizeof(rc->addrs[0]));
        memcpy(&rc->addrs[rc->naddrs], a->ai_addr, a->ai_addrlen);
        rc->naddrs++;
    }
    uv_freeaddrinfo(res);
    addresses_ready(rc);
    if (!rc->closing && rc->phase == PH_IDLE)
        kick(rc);
}

static void resolve(tn_rc_t *rc)
{
    tn_rc_result_t r;
    if (rc->url.literal) {
        rc->addrs[0] = rc->url.addr;
        rc->naddrs = 1;
        addresses_ready(rc);
        return;
    }
    rc_gai_t *g = tn_calloc(1, sizeof(*g));
    if (g == NULL) {
        result_set(&r, 0, TN_RC_UNREACHABLE, UV_ENOMEM, "out of memory");
        answer_all(rc, &r);
        return;
    }
    g->rc = rc;
    g->req.data = g;
    char port[8];
    snprintf(port, sizeof(port), "%u", (unsigned)rc->url.port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rv = uv_getaddrinfo(rc->loop, &g->req, on_resolved, rc->url.host, port, &hints);
    if (rv < 0) {
        tn_free(g);
        result_set(&r, 0, TN_RC_UNREACHABLE, rv, "resolve: %s", uv_strerror(rv));
        answer_all(rc, &r);
        return;
    }
    rc->gai = g;
    rc->phase = PH_RESOLVE;
    arm(rc); /* the look-up has the connect's bound */
}

/* --- the queue ------------------------------------------------------------------ */

static void on_timeout(uv_timer_t *t)
{
    tn_rc_t *rc = t->data;
    char msg[160];
    switch (rc->phase) {
    case PH_RESOLVE:
        if (rc->gai != NULL) {
            rc->gai->rc = NULL;
            uv_cancel((uv_req_t *)&rc->gai->req);
            rc->gai = NULL;
        }
        snprintf(msg, sizeof(msg), "resolve: timed out after %d ms", rc->connect_ms);
        rc->phase = PH_IDLE;
        {
            tn_rc_result_t r;
            result_set(&r, 0, TN_RC_UNREACHABLE, UV_ETIMEDOUT, "%s", msg);
            answer_all(rc, &r);
        }
        if (!rc->closing)
            kick(rc);
        return;
    case PH_CONNECT:
        if (rc->next_addr < rc->naddrs) {
            conn_drop(rc);
            dial_next(rc);
            return;
        }
        snprintf(msg, sizeof(msg), "connect: timed out after %d ms", rc->connect_ms);
        conn_fail(rc, TN_RC_UNREACHABLE, UV_ETIMEDOUT, msg);
        return;
    case PH_TLS:
        snprintf(msg, sizeof(msg), "TLS handshake: timed out after %d ms", rc->tls_ms);
        conn_fail(rc, TN_RC_UNREACHABLE, UV_ETIMEDOUT, msg);
        return;
    case PH_ANSWER:
        snprintf(msg, sizeof(msg), "timed out after %d ms waiting for the answer", rc->answer_ms);
        conn_fail(rc, TN_RC_UNREACHABLE, UV_ETIMEDOUT, msg);
        return;
    default:
        return;
    }
}

/* Arm the timer for the phase just entered. */
static void arm(tn_rc_t *rc)
{
    int ms = 0;
    switch (rc->phase) {
    case PH_RESOLVE:
    case PH_CONNECT:
        ms = rc->connect_ms;
        break;
    case PH_TLS:
        ms = rc->tls_ms;
        break;
    case PH_ANSWER:
        ms = rc->answer_ms;
        break;
    default:
        uv_timer_stop(&rc->timer);
        return;
    }
    uv_timer_start(&rc->timer, on_timeout, (uint64_t)ms, 0);
}

/* Start the head request when nothing is under way: from the kick timer,
 * so never from inside a caller's call. */
static void run(tn_rc_t *rc)
{
    if (rc->closing || rc->head == NULL)
        return;
    if (rc->phase == PH_IDLE)
        resolve(rc);
    else if (rc->phase == PH_READY)
        send_head(rc);
}

static void on_kick(uv_timer_t *t)
{
    run(t->data);
}

static void kick(tn_rc_t *rc)
{
    if (!rc->closing)
        uv_timer_start(&rc->kick, on_kick, 0, 0);
}

/* --- the client ------------------------------------------------------------------ */

static int load_ca(SSL_CTX *ctx, const char *pem, char *err, size_t errlen)
{
    X509_STORE *st = X509_STORE_new();
    BIO *bio = BIO_new_mem_buf(pem, -1);
    int n = 0;
    if (st == NULL || bio == NULL) {
        X509_STORE_free(st);
        BIO_free(bio);
        return UV_ENOMEM;
    }
    X509 *x;
    while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
        if (X509_STORE_add_cert(st, x) == 1)
            n++;
        X509_free(x);
    }
    ERR_clear_error();
    BIO_free(bio);
    if (n == 0) {
        X509_STORE_free(st);
        tn_errbuf(err, errlen, "ca_pem holds no PEM certificate");
        return UV_EINVAL;
    }
    SSL_CTX_set_cert_store(ctx, st); /* ctx owns st */
    return 0;
}

int tn_rc_new(uv_loop_t *loop, const tn_rc_opts_t *o, tn_rc_t **out, char *err, size_t errlen)
{
    tn_rc_t *rc = tn_calloc(1, sizeof(*rc));
    if (rc == NULL)
        return UV_ENOMEM;
    int rv = tn_guard_parse_url(o->url, strlen(o->url), &rc->url, err, errlen);
    if (rv == 0)
        rv = tn_guard_check_url(o->guard, &rc->url, err, errlen);
    if (rv != 0) {
        tn_free(rc);
        return UV_EINVAL;
    }
    rc->loop = loop;
    rc->guard = o->guard;
    rc->connect_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
    rc->tls_ms = o->tls_timeout_ms > 0 ? o->tls_timeout_ms : 10000;
    rc->answer_ms = o->response_timeout_ms > 0 ? o->response_timeout_ms : 30000;
    rc->max_body = o->max_body > 0 ? o->max_body : 1024 * 1024;
    bool v6 = rc->url.literal && rc->url.addr.ss_family == AF_INET6;
    if (rc->url.port == 443)
        snprintf(rc->authority, sizeof(rc->authority), v6 ? "[%s]" : "%s", rc->url.host);
    else
        snprintf(rc->authority, sizeof(rc->authority), v6 ? "[%s]:%u" : "%s:%u", rc->url.host,
                 (unsigned)rc->url.port);
    snprintf(rc->prefix, sizeof(rc->prefix), "%s", rc->url.path);
    size_t pl = strlen(rc->prefix);
    while (pl > 0 && rc->prefix[pl - 1] == '/')
        rc->prefix[--pl] = '\0';

    rc->ctx = SSL_CTX_new(TLS_client_method());
    if (rc->ctx == NULL) {
        ERR_clear_error();
        tn_free(rc);
        return UV_ENOMEM;
    }
    SSL_CTX_set_min_proto_version(rc->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(rc->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(rc->ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set1_groups_list(rc->ctx, tn_rc_groups());
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(rc->ctx, alpn, sizeof(alpn) - 1);
    if (o->ca_pem != NULL && o->ca_pem[0] != '\0')
        rv = load_ca(rc->ctx, o->ca_pem, err, errlen);
    else if (SSL_CTX_set_default_verify_paths(rc->ctx) != 1)
        rv = UV_ENOMEM;
    ERR_clear_error();
    if (rv != 0) {
        SSL_CTX_free(rc->ctx);
        tn_free(rc);
        return rv;
    }
    uv_timer_init(loop, &rc->timer);
    uv_timer_init(loop, &rc->kick);
    rc->timer.data = rc;
    rc->kick.data = rc;
    rc->open_handles = 2;
    rc->phase = PH_IDLE;
    *out = rc;
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    tn_rc_t *rc = h->data;
    if (--rc->open_handles > 0)
        return;
    SSL_CTX_free(rc->ctx);
    tn_free(rc);
}

void tn_rc_close(tn_rc_t *rc)
{
    if (rc->closing)
        return;
    rc->closing = true;
    if (rc->gai != NULL) {
        rc->gai->rc = NULL;
        uv_cancel((uv_req_t *)&rc->gai->req);
        rc->gai = NULL;
    }
    conn_drop(rc);
    rc->phase = PH_IDLE;
    tn_rc_result_t r;
    result_set(&r, 0, TN_RC_UNREACHABLE, UV_ECANCELED, "the client closed");
    answer_all(rc, &r);
    uv_close((uv_handle_t *)&rc->timer, on_handle_closed);
    uv_close((uv_handle_t *)&rc->kick, on_handle_closed);
}

uint64_t tn_rc_connections(const tn_rc_t *rc)
{
    return rc->connections;
}

static bool clean(const char *s, bool allow_space)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f || (!allow_space && c == ' '))
            return false;
    }
    return true;
}

int tn_rc_request(tn_rc_t *rc, const tn_rc_req_t *req, tn_rc_cb cb, void *ud)
{
    if (rc->closing)
        return TN_ECLOSED;
    if (req->method == NULL || req->method[0] == '\0' || !clean(req->method, false) ||
        req->path == NULL || req->path[0] != '/' || !clean(req->path, false) ||
        (req->authorization != NULL && !clean(req->authorization, true)) ||
        (req->content_type != NULL && !clean(req->content_type, true)))
        return UV_EINVAL;
    rc_req_t *q = tn_calloc(1, sizeof(*q));
    if (q == NULL)
        return UV_ENOMEM;
    tn_buf_init(&q->wire);
    char line[TN_GUARD_HOST_MAX + 128];
    int rv = 0;
#define ADD(s, n)                                                                                  \
    do {                                                                                           \
        if (rv == 0)                                                                               \
            rv = tn_buf_append(&q->wire, (s), (n));                                                \
    } while (0)
#define ADDS(s) ADD((s), strlen(s))
    ADDS(req->method);
    ADDS(" ");
    ADDS(rc->prefix);
    ADDS(req->path);
    ADDS(" HTTP/1.1\r\nHost: ");
    ADDS(rc->authority);
    ADDS("\r\nUser-Agent: tern-remote\r\nX-Tern-Client: tern-remote\r\nAccept: "
         "application/json\r\n");
    if (req->authorization != NULL) {
        ADDS("Authorization: ");
        ADDS(req->authorization);
        ADDS("\r\n");
    }
    if (req->content_type != NULL) {
        ADDS("Content-Type: ");
        ADDS(req->content_type);
        ADDS("\r\n");
    }
    bool has_body = req->len > 0 || strcmp(req->method, "POST") == 0 ||
                    strcmp(req->method, "PUT") == 0 || strcmp(req->method, "PATCH") == 0;
    if (has_body) {
        snprintf(line, sizeof(line), "Content-Length: %zu\r\n", req->len);
        ADDS(line);
    }
    ADDS("\r\n");
    if (req->len > 0)
        ADD(req->body, req->len);
#undef ADDS
#undef ADD
    if (rv != 0) {
        req_free(q);
        return UV_ENOMEM;
    }
    q->head = strcmp(req->method, "HEAD") == 0;
    q->cb = cb;
    q->ud = ud;
    if (rc->tail != NULL)
        rc->tail->next = q;
    else
        rc->head = q;
    rc->tail = q;
    kick(rc);
    return 0;
}
