/* libraft's connections over TCP, with mutual TLS or in plaintext. See
 * transport.h for the handshake and the life of a connection.
 *
 * Plaintext mode is this same transport without the TLS steps rather than
 * libraft's raft_uv_tcp: libraft 0.15's TCP handshake allocates whatever
 * address length the peer announces (a 64-bit field, unchecked), so any
 * process that reaches the Raft port could make a node allocate without
 * bound, and its listener keeps a backlog of 1. Here both modes share the
 * bounded, versioned handshake, its timeout and its tests.
 *
 * Memory: the transport and its connections come from tn_malloc; the TCP
 * handle and the socketpair end that libraft may end up owning come from
 * raft_malloc, since libraft frees them with raft_free. */
#include "core/platform.h"

#include "meta/transport.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/fdroom.h"
#include "core/log.h"
#include "core/netaddr.h"
#include "meta/cmd.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_VERSION 1
static const unsigned char hello_magic[4] = {'T', 'N', 'R', 'H'};
static const unsigned char answer_magic[4] = {'T', 'N', 'R', 'A'};
#define HELLO_HEAD 16
#define ANSWER_LEN 8
/* How often handshakes are checked against their deadline. */
#define SWEEP_MS 1000
/* Refusals are logged at most this often per call site. */
#define LOG_EVERY_MS 10000

typedef struct conn_s conn_t;

typedef enum {
    C_RESOLVING,  /* dialer: the peer's host name is being looked up (uv_getaddrinfo) */
    C_CONNECTING, /* dialer: TCP connect in flight */
    C_TLS,        /* TLS handshake */
    C_HELLO,      /* tern's handshake: the hello (acceptor) or its answer (dialer) */
    C_PUMP,       /* TLS only: libraft has its end of the socketpair */
    C_CLOSING     /* handles closing; freed when the last one has */
} conn_state_t;

typedef struct {
    struct raft_uv_transport *raft;
    uv_loop_t *loop;
    SSL_CTX *ssl; /* NULL: plaintext */
    raft_id id;
    char address[TN_META_ADDR_MAX + 1]; /* as Raft records it: IPv4 or a host name */
    char listen[TN_META_ADDR_MAX + 1];  /* numeric IPv4 host:port the listener binds */
    uv_tcp_t listener;
    bool listener_open;
    uv_timer_t sweep;
    bool sweep_open;
    raft_uv_accept_cb accept_cb;
    conn_t *conns; /* every connection until freed, newest first */
    bool closing;
    raft_uv_transport_close_cb close_cb;
    char rbuf[65536]; /* what one read brings, consumed in its callback */
    char pbuf[16384]; /* plaintext out of OpenSSL, likewise */
} transport_t;

struct conn_s {
    transport_t *t;
    conn_t *prev, *next;
    conn_state_t state;
    bool dialer;
    int status;      /* dialer: the connect callback's status if it ends before libraft has it */
    uv_tcp_t *tcp;   /* raft_malloc'd; NULL once closing or handed to libraft */
    uv_pipe_t local; /* the transport's end of the socketpair (C_PUMP) */
    bool local_open; /* local is initialised and not yet closing */
    unsigned closing_handles; /* uv_close callbacks still to come */
    bool tcp_paused;          /* tcp not read: local has too much queued */
    bool local_paused;        /* local not read: tcp has too much queued */
    uv_connect_t connect;
    uv_getaddrinfo_t gai;        /* dialer: the look-up of a named peer (C_RESOLVING) */
    bool resolving;              /* gai's callback is still to come */
    unsigned port;               /* dialer: the peer's port, for the address gai finds */
    struct raft_uv_connect *req; /* dialer: until its callback */
    SSL *ssl;                    /* NULL in plaintext */
    uint64_t deadline_ms;        /* loop time by which the handshake must be done */
    size_t hello_len;
    unsigned char hello[HELLO_HEAD + TN_META_ADDR_MAX];
    char peer[TN_META_ADDR_MAX + 32]; /* "a.b.c.d:port" or "name:port (a.b.c.d:port)", for logs */
#ifdef TN_TEST
    tn_buf_t held; /* TERN_TEST_RAFT_HOLD: plaintext from the peer not given to libraft yet */
#endif
};

/* A write of bytes copied into it. conn is NULL for a write whose
 * connection may be gone when it completes (a plaintext answer on a
 * stream libraft now owns). */
typedef struct {
    uv_write_t req;
    conn_t *conn;
    char data[];
} wreq_t;

static void conn_close(conn_t *c);
static void tls_progress(conn_t *c);

/* --- addresses and the handshake ----------------------------------------------- */

int tn_meta_transport_split(const char *address, char *host, size_t hostlen, unsigned *port,
                            bool *numeric)
{
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) > 5)
        return UV_EINVAL;
    size_t hlen = (size_t)(colon - address);
    if (hlen > 253 || hlen >= hostlen)
        return UV_EINVAL;
    unsigned v = 0;
    for (const char *p = colon + 1; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return UV_EINVAL;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > 65535)
        return UV_EINVAL;
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    struct in_addr in;
    if (hlen == 0 || uv_inet_pton(AF_INET, host, &in) == 0) {
        *port = v;
        *numeric = true;
        return 0;
    }
    if (!tn_netaddr_dns_name(host))
        return UV_EINVAL;
    *port = v;
    *numeric = false;
    return 0;
}

/* A numeric "a.b.c.d:port" (host may be empty: every interface) into sa.
 * 0 or UV_EINVAL (a host name among them). */
static int parse_ipv4(const char *address, struct sockaddr_in *sa)
{
    char host[TN_META_ADDR_MAX + 1];
    unsigned port;
    bool numeric;
    if (tn_meta_transport_split(address, host, sizeof(host), &port, &numeric) != 0 || !numeric)
        return UV_EINVAL;
    return uv_ip4_addr(host[0] != '\0' ? host : "0.0.0.0", (int)port, sa);
}

/* Whether address is one tern's Raft takes: IPv4 or a name, and a port. */
static bool valid_address(const char *address)
{
    char host[TN_META_ADDR_MAX + 1];
    unsigned port;
    bool numeric;
    return strlen(address) <= TN_META_ADDR_MAX &&
           tn_meta_transport_split(address, host, sizeof(host), &port, &numeric) == 0;
}

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

static unsigned get16(const unsigned char *p)
{
    return (unsigned)p[0] | ((unsigned)p[1] << 8);
}

/* The dialer's hello into out (HELLO_HEAD + TN_META_ADDR_MAX bytes). */
static size_t hello_encode(const transport_t *t, unsigned char *out)
{
    size_t n = strlen(t->address);
    memcpy(out, hello_magic, sizeof(hello_magic));
    put16(out + 4, HELLO_VERSION);
    put16(out + 6, (unsigned)n);
    for (int i = 0; i < 8; i++)
        out[8 + i] = (unsigned char)(t->id >> (8 * i));
    memcpy(out + HELLO_HEAD, t->address, n);
    return HELLO_HEAD + n;
}

/* Bytes of the handshake c still waits for. */
static size_t hello_need(const conn_t *c)
{
    if (c->dialer)
        return ANSWER_LEN - c->hello_len;
    if (c->hello_len < HELLO_HEAD)
        return HELLO_HEAD - c->hello_len;
    return HELLO_HEAD + get16(c->hello + 6) - c->hello_len;
}

/* Check what has arrived of the handshake: 1 complete, 0 more to come, or
 * UV_EPROTO with the reason in *why. */
static int hello_check(const conn_t *c, const char **why)
{
    const unsigned char *h = c->hello;
    if (c->dialer) {
        if (c->hello_len < ANSWER_LEN)
            return 0;
        if (memcmp(h, answer_magic, sizeof(answer_magic)) != 0 || get16(h + 4) != HELLO_VERSION ||
            get16(h + 6) != 0) {
            *why = "the peer's handshake answer is not tern's version 1";
            return UV_EPROTO;
        }
        return 1;
    }
    if (c->hello_len < HELLO_HEAD)
        return 0;
    if (memcmp(h, hello_magic, sizeof(hello_magic)) != 0) {
        *why = "not a tern Raft handshake";
        return UV_EPROTO;
    }
    if (get16(h + 4) != HELLO_VERSION) {
        *why = "unknown handshake version";
        return UV_EPROTO;
    }
    unsigned alen = get16(h + 6);
    if (alen == 0 || alen > TN_META_ADDR_MAX) {
        *why = "handshake address length out of range";
        return UV_EPROTO;
    }
    uint64_t id = 0;
    for (int i = 0; i < 8; i++)
        id |= (uint64_t)h[8 + i] << (8 * i);
    if (id == 0) {
        *why = "handshake with Raft id 0";
        return UV_EPROTO;
    }
    if (c->hello_len < HELLO_HEAD + alen)
        return 0;
    char addr[TN_META_ADDR_MAX + 1];
    for (unsigned i = 0; i < alen; i++) {
        if (h[HELLO_HEAD + i] < 0x21 || h[HELLO_HEAD + i] > 0x7e) {
            *why = "handshake address is not printable";
            return UV_EPROTO;
        }
        addr[i] = (char)h[HELLO_HEAD + i];
    }
    addr[alen] = '\0';
    if (!valid_address(addr)) {
        *why = "handshake address is not host:port (an IPv4 address or a DNS name)";
        return UV_EPROTO;
    }
    return 1;
}

/* Take up to what the handshake still needs from data; returns how much
 * was taken. */
static size_t hello_take(conn_t *c, const char *data, size_t len)
{
    size_t n = hello_need(c);
    if (n > len)
        n = len;
    memcpy(c->hello + c->hello_len, data, n);
    c->hello_len += n;
    return n;
}

/* --- connections --------------------------------------------------------------- */

static conn_t *conn_new(transport_t *t, bool dialer)
{
    conn_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->tcp = raft_malloc(sizeof(*c->tcp));
    if (c->tcp == NULL) {
        tn_free(c);
        return NULL;
    }
    uv_tcp_init(t->loop, c->tcp);
    c->tcp->data = c;
    c->t = t;
    c->dialer = dialer;
    c->status = RAFT_NOCONNECTION;
    c->deadline_ms = uv_now(t->loop) + TN_META_TRANSPORT_HANDSHAKE_MS;
    snprintf(c->peer, sizeof(c->peer), "?");
#ifdef TN_TEST
    tn_buf_init(&c->held);
#endif
    c->next = t->conns;
    if (t->conns != NULL)
        t->conns->prev = c;
    t->conns = c;
    return c;
}

/* Everything is closed: the transport's close callback may run. Nothing
 * may touch t after this returns (the callback may free it). */
static void maybe_closed(transport_t *t)
{
    if (!t->closing || t->conns != NULL || t->listener_open || t->sweep_open || t->close_cb == NULL)
        return;
    raft_uv_transport_close_cb cb = t->close_cb;
    t->close_cb = NULL;
    cb(t->raft);
}

/* Unlink and free c (its handles are closed or given away), then answer
 * a connect still waiting, and possibly the transport's close. */
static void conn_free(conn_t *c)
{
    transport_t *t = c->t;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    struct raft_uv_connect *req = c->req;
    int status = t->closing ? RAFT_CANCELED : c->status;
    if (c->ssl != NULL)
        SSL_free(c->ssl);
#ifdef TN_TEST
    tn_buf_fini(&c->held);
#endif
    tn_free(c);
    if (req != NULL)
        req->cb(req, NULL, status);
    maybe_closed(t);
}

static void on_handle_closed(conn_t *c)
{
    if (--c->closing_handles == 0)
        conn_free(c);
}

static void on_tcp_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    raft_free(h);
    on_handle_closed(c);
}

static void on_local_closed(uv_handle_t *h)
{
    on_handle_closed(h->data);
}

/* Close c's handles; c is freed (and a waiting connect answered) once
 * they have closed. */
static void conn_close(conn_t *c)
{
    if (c->state == C_CLOSING)
        return;
    c->state = C_CLOSING;
    if (c->tcp != NULL) {
        c->closing_handles++;
        uv_close((uv_handle_t *)c->tcp, on_tcp_closed);
        c->tcp = NULL;
    }
    if (c->local_open) {
        c->closing_handles++;
        uv_close((uv_handle_t *)&c->local, on_local_closed);
        c->local_open = false;
    }
    if (c->resolving) {
        /* Counted like a handle: on_resolved comes once, cancelled or not
         * (a look-up already running in the thread pool finishes). */
        c->closing_handles++;
        uv_cancel((uv_req_t *)&c->gai);
    }
    if (c->closing_handles == 0)
        conn_free(c);
}

/* Why the last OpenSSL call on c failed, into out. */
static void tls_reason(conn_t *c, char *out, size_t len)
{
    char e[160] = "";
    unsigned long code = ERR_get_error();
    if (code != 0)
        ERR_error_string_n(code, e, sizeof(e));
    ERR_clear_error();
    long vr = SSL_get_verify_result(c->ssl);
    if (vr != X509_V_OK)
        snprintf(out, len, "%s (%s)", e[0] != '\0' ? e : "certificate refused",
                 X509_verify_cert_error_string(vr));
    else
        snprintf(out, len, "%s", e[0] != '\0' ? e : "unexpected end of the TLS session");
}

/* A connection that failed its handshake: log who and why (rate-limited:
 * anyone who reaches the port can cause these), then close it. */
static void refuse(conn_t *c, const char *why)
{
    if (c->dialer)
        TN_LOG_RL(TN_LOG_WARN, LOG_EVERY_MS, "raft transport: connection to %s failed: %s", c->peer,
                  why);
    else
        TN_LOG_RL(TN_LOG_WARN, LOG_EVERY_MS, "raft transport: connection from %s refused: %s",
                  c->peer, why);
    conn_close(c);
}

static void on_write(uv_write_t *req, int status);

/* Write a copy of data to s. 0 or a libuv error. */
static int write_copy(uv_stream_t *s, conn_t *c, const void *data, size_t len)
{
    wreq_t *w = tn_malloc(sizeof(*w) + len);
    if (w == NULL)
        return UV_ENOMEM;
    memcpy(w->data, data, len);
    w->conn = c;
    w->req.data = w;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    int rc = uv_write(&w->req, s, &b, 1, on_write);
    if (rc != 0)
        tn_free(w);
    return rc;
}

static void on_tcp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_tcp_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_local_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_local_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* A write finished: resume the side that back-pressure paused once the
 * other has drained to half the bound. */
static void on_write(uv_write_t *req, int status)
{
    wreq_t *w = req->data;
    conn_t *c = w->conn;
    tn_free(w);
    if (c == NULL || c->state == C_CLOSING)
        return;
    if (status != 0) {
        if (c->state == C_PUMP)
            conn_close(c);
        else
            refuse(c, uv_strerror(status));
        return;
    }
    if (c->state != C_PUMP)
        return;
    if (c->tcp_paused && c->local.write_queue_size <= TN_META_TRANSPORT_QUEUE_MAX / 2) {
        c->tcp_paused = false;
        uv_read_start((uv_stream_t *)c->tcp, on_tcp_alloc, on_tcp_read);
    }
    if (c->local_paused && c->tcp->write_queue_size <= TN_META_TRANSPORT_QUEUE_MAX / 2) {
        c->local_paused = false;
        uv_read_start((uv_stream_t *)&c->local, on_local_alloc, on_local_read);
    }
}

/* Send what OpenSSL has produced (records, alerts) to the network. */
static int tls_flush(conn_t *c)
{
    BIO *wbio = SSL_get_wbio(c->ssl);
    size_t pending;
    while ((pending = BIO_ctrl_pending(wbio)) > 0 && c->tcp != NULL) {
        wreq_t *w = tn_malloc(sizeof(*w) + pending);
        if (w == NULL)
            return UV_ENOMEM;
        int n = BIO_read(wbio, w->data, (int)pending);
        if (n <= 0) {
            tn_free(w);
            return 0;
        }
        w->conn = c;
        w->req.data = w;
        uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
        int rc = uv_write(&w->req, (uv_stream_t *)c->tcp, &b, 1, on_write);
        if (rc != 0) {
            tn_free(w);
            return rc;
        }
    }
    return 0;
}

/* Encrypt data for the peer and send it. 0 or an error (c not closed). */
static int tls_send(conn_t *c, const void *data, size_t len)
{
    while (len > 0) {
        int chunk = len > (1u << 20) ? (1 << 20) : (int)len;
        int n = SSL_write(c->ssl, data, chunk);
        if (n <= 0)
            return UV_EPROTO;
        data = (const char *)data + n;
        len -= (size_t)n;
    }
    return tls_flush(c);
}

/* --- the socketpair and the pump (TLS) ---------------------------------------- */

static void on_theirs_failed(uv_handle_t *h)
{
    raft_free(h);
}

/* Make the socketpair: c->local pumps, *theirs (raft_malloc'd) is for
 * libraft. 0 or an error (nothing left open). */
static int make_pipe(conn_t *c, uv_pipe_t **theirs)
{
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return tn_err_from_errno(errno);
    uv_pipe_t *p = raft_malloc(sizeof(*p));
    if (p == NULL) {
        close(fds[0]);
        close(fds[1]);
        return UV_ENOMEM;
    }
    uv_pipe_init(c->t->loop, p, 0);
    int rc = uv_pipe_open(p, fds[1]);
    if (rc != 0) {
        close(fds[0]);
        close(fds[1]);
        uv_close((uv_handle_t *)p, on_theirs_failed);
        return rc;
    }
    uv_pipe_init(c->t->loop, &c->local, 0);
    c->local.data = c;
    c->local_open = true; /* closes with c from now on */
    rc = uv_pipe_open(&c->local, fds[0]);
    if (rc != 0)
        close(fds[0]); /* not taken by libuv */
    else
        rc = uv_read_start((uv_stream_t *)&c->local, on_local_alloc, on_local_read);
    if (rc != 0) {
        uv_close((uv_handle_t *)p, on_theirs_failed); /* closes fds[1] */
        return rc;
    }
    *theirs = p;
    return 0;
}

/* data to libraft's end of c's pipe, pausing the peer's reads while
 * libraft is behind. */
static void write_local(conn_t *c, const char *data, size_t len)
{
    if (write_copy((uv_stream_t *)&c->local, c, data, len) != 0) {
        conn_close(c);
        return;
    }
    if (!c->tcp_paused && c->local.write_queue_size > TN_META_TRANSPORT_QUEUE_MAX) {
        c->tcp_paused = true;
        uv_read_stop((uv_stream_t *)c->tcp);
    }
}

#ifdef TN_TEST
/* TERN_TEST_RAFT_HOLD=path (ternd-test, Raft over TLS): while the file
 * path exists, what the peers send reaches libraft only once it is gone
 * (in order; the sweep looks every HOLD_CHECK_MS), so a test can have
 * this node's metastore replica lag the leader's answers (those come
 * over node RPC) as long as it likes. */
#define HOLD_CHECK_MS 100

static bool raft_held(void)
{
    const char *path = getenv("TERN_TEST_RAFT_HOLD");
    return path != NULL && path[0] != '\0' && access(path, F_OK) == 0;
}

/* What was held for c, to libraft once the file is gone. */
static void hold_flush(conn_t *c)
{
    if (tn_buf_size(&c->held) == 0 || c->state != C_PUMP || raft_held())
        return;
    tn_buf_t b = c->held;
    tn_buf_init(&c->held);
    write_local(c, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}
#endif

/* Plaintext from the peer for libraft's end. */
static void pump_to_local(conn_t *c, const char *data, size_t len)
{
#ifdef TN_TEST
    hold_flush(c);
    if (c->state != C_PUMP)
        return;
    if (tn_buf_size(&c->held) > 0 || raft_held()) {
        if (tn_buf_append(&c->held, data, len) != 0)
            conn_close(c);
        return;
    }
#endif
    write_local(c, data, len);
}

static void on_local_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    buf->base = c->t->rbuf;
    buf->len = sizeof(c->t->rbuf);
}

/* libraft wrote to its end (or closed it: the connection is over). */
static void on_local_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    if (nread == 0 || c->state == C_CLOSING)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (tls_send(c, buf->base, (size_t)nread) != 0) {
        conn_close(c);
        return;
    }
    if (!c->local_paused && c->tcp->write_queue_size > TN_META_TRANSPORT_QUEUE_MAX) {
        c->local_paused = true;
        uv_read_stop((uv_stream_t *)&c->local);
    }
}

/* --- the end of the handshake: libraft gets its stream ------------------------ */

static const unsigned char answer[ANSWER_LEN] = {'T', 'N', 'R', 'A', HELLO_VERSION, 0, 0, 0};

/* The acceptor's copy of the dialer's id and address from its hello. */
static raft_id hello_id(const conn_t *c, char *addr)
{
    unsigned alen = get16(c->hello + 6);
    memcpy(addr, c->hello + HELLO_HEAD, alen);
    addr[alen] = '\0';
    raft_id id = 0;
    for (int i = 0; i < 8; i++)
        id |= (raft_id)c->hello[8 + i] << (8 * i);
    return id;
}

/* The handshake is complete (and, with TLS, the answer sent): hand libraft
 * its stream. rest: plaintext that came after the handshake (TLS only; in
 * plaintext nothing past it was read). */
static void handoff(conn_t *c, const char *rest, size_t restlen)
{
    transport_t *t = c->t;
    uv_stream_t *stream;
    if (c->ssl != NULL) {
        uv_pipe_t *theirs;
        int rc = make_pipe(c, &theirs);
        if (rc != 0) {
            refuse(c, tn_strerror(rc));
            return;
        }
        c->state = C_PUMP;
        if (restlen > 0)
            pump_to_local(c, rest, restlen);
        stream = (uv_stream_t *)theirs;
    } else {
        uv_read_stop((uv_stream_t *)c->tcp);
        stream = (uv_stream_t *)c->tcp;
        stream->data = NULL;
        c->tcp = NULL;
    }
    if (c->dialer) {
        struct raft_uv_connect *req = c->req;
        c->req = NULL;
        if (c->ssl == NULL)
            conn_close(c); /* no handles left: freed now */
        req->cb(req, stream, 0);
        return;
    }
    char addr[TN_META_ADDR_MAX + 1];
    raft_id id = hello_id(c, addr);
    if (c->ssl == NULL)
        conn_close(c);
    t->accept_cb(t->raft, id, addr, stream);
}

/* The acceptor has the whole hello: answer and hand over. */
static void hello_done(conn_t *c, const char *rest, size_t restlen)
{
    if (c->dialer) {
        handoff(c, rest, restlen);
        return;
    }
    if (c->t->closing || c->t->accept_cb == NULL) {
        conn_close(c);
        return;
    }
    int rc;
    if (c->ssl != NULL) {
        rc = tls_send(c, answer, sizeof(answer));
    } else {
        /* The write outlives c once libraft owns the stream. */
        rc = write_copy((uv_stream_t *)c->tcp, NULL, answer, sizeof(answer));
    }
    if (rc != 0) {
        refuse(c, "cannot send the handshake answer");
        return;
    }
    handoff(c, rest, restlen);
}

/* --- reading the network -------------------------------------------------------- */

static void on_tcp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    if (c->ssl == NULL) {
        /* Exactly what the handshake still needs: the rest is libraft's. */
        buf->base = (char *)c->hello + c->hello_len;
        buf->len = hello_need(c);
    } else {
        buf->base = c->t->rbuf;
        buf->len = sizeof(c->t->rbuf);
    }
}

static void on_tcp_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    if (nread == 0 || c->state == C_CLOSING)
        return;
    if (nread < 0) {
        if (c->state == C_PUMP)
            conn_close(c);
        else
            refuse(c, nread == UV_EOF ? "closed during the handshake" : uv_strerror((int)nread));
        return;
    }
    if (c->ssl != NULL) {
        if (BIO_write(SSL_get_rbio(c->ssl), buf->base, (int)nread) != (int)nread) {
            refuse(c, "out of memory");
            return;
        }
        tls_progress(c);
        return;
    }
    c->hello_len += (size_t)nread;
    const char *why = NULL;
    int rc = hello_check(c, &why);
    if (rc < 0)
        refuse(c, why);
    else if (rc == 1)
        hello_done(c, NULL, 0);
}

/* Move the TLS session on with what the network brought: the handshake,
 * then tern's hello, then plaintext for libraft. */
static void tls_progress(conn_t *c)
{
    char why[320];
    if (c->state == C_TLS) {
        int rc = SSL_do_handshake(c->ssl);
        if (rc != 1) {
            int e = SSL_get_error(c->ssl, rc);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                if (tls_flush(c) != 0)
                    refuse(c, "cannot write to the network");
                return;
            }
            tls_reason(c, why, sizeof(why));
            (void)tls_flush(c); /* the alert, so the peer learns why */
            refuse(c, why);
            return;
        }
        c->state = C_HELLO;
        if (c->dialer) {
            unsigned char hello[HELLO_HEAD + TN_META_ADDR_MAX];
            size_t n = hello_encode(c->t, hello);
            if (tls_send(c, hello, n) != 0) {
                refuse(c, "cannot send the handshake");
                return;
            }
        }
    }
    for (;;) {
        int n = SSL_read(c->ssl, c->t->pbuf, (int)sizeof(c->t->pbuf));
        if (n <= 0) {
            int e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                break;
            if (e == SSL_ERROR_ZERO_RETURN) {
                if (c->state == C_PUMP)
                    conn_close(c);
                else
                    refuse(c, "closed during the handshake");
                return;
            }
            tls_reason(c, why, sizeof(why));
            (void)tls_flush(c);
            if (c->state == C_PUMP) {
                TN_LOG_RL(TN_LOG_WARN, LOG_EVERY_MS, "raft transport: connection with %s: %s",
                          c->peer, why);
                conn_close(c);
            } else {
                refuse(c, why);
            }
            return;
        }
        const char *data = c->t->pbuf;
        size_t len = (size_t)n;
        /* The header first, then the address it announces: a record may
         * hold both, and what follows them. */
        while (c->state == C_HELLO && len > 0) {
            size_t used = hello_take(c, data, len);
            data += used;
            len -= used;
            const char *bad = NULL;
            int rc = hello_check(c, &bad);
            if (rc < 0) {
                refuse(c, bad);
                return;
            }
            if (rc == 1) {
                hello_done(c, data, len);
                if (c->state != C_PUMP)
                    return;
                len = 0; /* handed over with the handshake's end */
            }
        }
        if (len == 0)
            continue;
        if (c->state != C_PUMP)
            return;
        pump_to_local(c, data, len);
        if (c->state != C_PUMP)
            return;
    }
    if (tls_flush(c) != 0)
        conn_close(c);
}

/* Start c's TLS session or plaintext handshake on its connected socket. */
static int conn_begin(conn_t *c)
{
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    if (uv_tcp_getpeername(c->tcp, (struct sockaddr *)&ss, &sslen) == 0 &&
        ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        char ip[INET_ADDRSTRLEN];
        uv_ip4_name(sin, ip, sizeof(ip));
        char at[INET_ADDRSTRLEN + 8];
        snprintf(at, sizeof(at), "%s:%u", ip, (unsigned)ntohs(sin->sin_port));
        /* A dialer keeps the name it dialled, and adds where it led. */
        size_t n = strlen(c->peer);
        if (c->dialer && strcmp(c->peer, at) != 0 && n + strlen(at) + 4 < sizeof(c->peer))
            snprintf(c->peer + n, sizeof(c->peer) - n, " (%s)", at);
        else if (!c->dialer)
            snprintf(c->peer, sizeof(c->peer), "%s", at);
    }
    uv_tcp_nodelay(c->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)c->tcp, on_tcp_alloc, on_tcp_read);
    if (rc != 0)
        return rc;
    if (c->t->ssl == NULL) {
        c->state = C_HELLO;
        if (!c->dialer)
            return 0;
        unsigned char hello[HELLO_HEAD + TN_META_ADDR_MAX];
        size_t n = hello_encode(c->t, hello);
        /* Not tied to c: the stream may be libraft's by the time this
         * completes. A failed write shows as a failed read of the answer. */
        return write_copy((uv_stream_t *)c->tcp, NULL, hello, n);
    }
    c->ssl = SSL_new(c->t->ssl);
    BIO *rbio = BIO_new(BIO_s_mem());
    BIO *wbio = BIO_new(BIO_s_mem());
    if (c->ssl == NULL || rbio == NULL || wbio == NULL) {
        BIO_free(rbio);
        BIO_free(wbio);
        return UV_ENOMEM;
    }
    SSL_set_bio(c->ssl, rbio, wbio); /* the session owns them now */
    if (c->dialer)
        SSL_set_connect_state(c->ssl);
    else
        SSL_set_accept_state(c->ssl);
    c->state = C_TLS;
    if (c->dialer)
        tls_progress(c); /* the ClientHello */
    return 0;
}

/* --- the raft_uv_transport interface ------------------------------------------- */

static void on_sweep(uv_timer_t *timer)
{
    transport_t *t = timer->data;
    uint64_t now = uv_now(t->loop);
    conn_t *next;
    for (conn_t *c = t->conns; c != NULL; c = next) {
        next = c->next;
        /* refuse never frees synchronously: c has its tcp handle. */
        if (c->state != C_PUMP && c->state != C_CLOSING && now >= c->deadline_ms)
            refuse(c, "handshake not completed in time");
#ifdef TN_TEST
        else if (c->state == C_PUMP)
            hold_flush(c);
#endif
    }
}

static int tr_init(struct raft_uv_transport *rt, raft_id id, const char *address)
{
    transport_t *t = rt->impl;
    struct sockaddr_in sa;
    if (!valid_address(address)) {
        snprintf(rt->errmsg, RAFT_ERRMSG_BUF_SIZE,
                 "address \"%.120s\" is not host:port (an IPv4 address or a DNS name)", address);
        return RAFT_INVALID;
    }
    const char *listen = t->listen[0] != '\0' ? t->listen : address;
    if (parse_ipv4(listen, &sa) != 0) {
        snprintf(rt->errmsg, RAFT_ERRMSG_BUF_SIZE,
                 "address \"%.120s\" is a host name: the transport needs the numeric address "
                 "it resolves to for its listener",
                 address);
        return RAFT_INVALID;
    }
    t->id = id;
    snprintf(t->address, sizeof(t->address), "%s", address);
    if (listen != t->listen)
        snprintf(t->listen, sizeof(t->listen), "%s", listen);
    uv_timer_init(t->loop, &t->sweep);
    t->sweep.data = t;
    t->sweep_open = true;
    uint64_t sweep_ms = SWEEP_MS;
#ifdef TN_TEST
    if (getenv("TERN_TEST_RAFT_HOLD") != NULL)
        sweep_ms = HOLD_CHECK_MS;
#endif
    uv_timer_start(&t->sweep, on_sweep, sweep_ms, sweep_ms);
    return 0;
}

static void on_accept(uv_stream_t *server, int status)
{
    transport_t *t = server->data;
    if (status != 0) {
        TN_LOG_RL(TN_LOG_WARN, LOG_EVERY_MS, "raft transport: accept on %s: %s", t->address,
                  uv_strerror(status));
        return;
    }
    conn_t *c = conn_new(t, false);
    if (c == NULL) {
        TN_LOG_RL(TN_LOG_WARN, LOG_EVERY_MS, "raft transport: accept on %s: out of memory",
                  t->address);
        return;
    }
    int rc = uv_accept(server, (uv_stream_t *)c->tcp);
    uv_os_fd_t fd;
    if (rc == 0 && uv_fileno((uv_handle_t *)c->tcp, &fd) == 0 && !tn_fd_room_at(fd, TN_FD_PEERS)) {
        /* Unauthenticated until its handshake, it may not take the
         * descriptors storage needs; but its mark is above the doors', so
         * clients filling the doors leave room for the peers
         * (core/fdroom.h). */
        refuse(c, "near the descriptor limit");
        return;
    }
    if (rc == 0)
        rc = conn_begin(c);
    if (rc != 0)
        refuse(c, uv_strerror(rc));
}

static int tr_listen(struct raft_uv_transport *rt, raft_uv_accept_cb cb)
{
    transport_t *t = rt->impl;
    struct sockaddr_in sa;
    parse_ipv4(t->listen, &sa); /* checked in tr_init */
    t->accept_cb = cb;
    uv_tcp_init(t->loop, &t->listener);
    t->listener.data = t;
    t->listener_open = true;
    int rc = uv_tcp_bind(&t->listener, (const struct sockaddr *)&sa, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&t->listener, 128, on_accept);
    if (rc != 0) {
        /* errmsg stays empty: tn_meta_open reports a listener that failed
         * by repeating the bind (explain_listen in meta.c), in the words
         * that name the option, as it did for libraft's own transport. */
        TN_LOG(TN_LOG_DEBUG, "raft transport: cannot listen on %s: %s", t->listen, uv_strerror(rc));
        return RAFT_IOERR;
    }
    return 0;
}

static void on_connected(uv_connect_t *req, int status)
{
    conn_t *c = req->data;
    if (c->state == C_CLOSING)
        return;
    if (status != 0) {
        /* Peers down or still starting are normal: libraft retries. */
        TN_LOG(TN_LOG_DEBUG, "raft transport: connect to %s: %s", c->peer, uv_strerror(status));
        conn_close(c);
        return;
    }
    int rc = conn_begin(c);
    if (rc != 0 && c->state != C_CLOSING)
        refuse(c, uv_strerror(rc));
}

/* The look-up of a named peer ended: connect to its first IPv4 address,
 * or fail the connect like an unreachable peer (libraft retries it, and
 * looks the name up again). */
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    conn_t *c = req->data;
    c->resolving = false;
    if (c->state == C_CLOSING) {
        uv_freeaddrinfo(res);
        on_handle_closed(c);
        return;
    }
    struct sockaddr_in sa;
    bool found = false;
    for (const struct addrinfo *ai = res; status == 0 && ai != NULL && !found; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(sa)) {
            memcpy(&sa, ai->ai_addr, sizeof(sa));
            found = true;
        }
    }
    uv_freeaddrinfo(res);
    if (!found) {
        /* A peer not scheduled yet has no name: normal for a while, but a
         * mistyped name looks the same, so it is said (now and then). */
        TN_LOG_RL(TN_LOG_WARN, LOG_EVERY_MS, "raft transport: cannot resolve %s: %s", c->peer,
                  status != 0 ? uv_strerror(status) : "no IPv4 address");
        conn_close(c);
        return;
    }
    sa.sin_port = htons((uint16_t)c->port);
    c->state = C_CONNECTING;
    int rc = uv_tcp_connect(&c->connect, c->tcp, (const struct sockaddr *)&sa, on_connected);
    if (rc != 0) {
        TN_LOG(TN_LOG_DEBUG, "raft transport: connect to %s: %s", c->peer, uv_strerror(rc));
        conn_close(c);
    }
}

static int tr_connect(struct raft_uv_transport *rt, struct raft_uv_connect *req, raft_id id,
                      const char *address, raft_uv_connect_cb cb)
{
    transport_t *t = rt->impl;
    (void)id;
    char host[TN_META_ADDR_MAX + 1];
    unsigned port = 0;
    bool numeric = false;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    if (strlen(address) > TN_META_ADDR_MAX ||
        tn_meta_transport_split(address, host, sizeof(host), &port, &numeric) != 0 || port == 0 ||
        (numeric && (parse_ipv4(address, &sa) != 0 || sa.sin_addr.s_addr == htonl(INADDR_ANY)))) {
        snprintf(rt->errmsg, RAFT_ERRMSG_BUF_SIZE,
                 "peer address \"%.120s\" is not host:port (an IPv4 address or a DNS name)",
                 address);
        return RAFT_NOCONNECTION;
    }
    conn_t *c = conn_new(t, true);
    if (c == NULL) {
        snprintf(rt->errmsg, RAFT_ERRMSG_BUF_SIZE, "out of memory");
        return RAFT_NOMEM;
    }
    snprintf(c->peer, sizeof(c->peer), "%s", address);
    c->connect.data = c;
    int rc;
    if (numeric) {
        c->state = C_CONNECTING;
        rc = uv_tcp_connect(&c->connect, c->tcp, (const struct sockaddr *)&sa, on_connected);
    } else {
        /* Every dial looks the name up again: a peer re-created at another
         * IP is reached there. Asynchronous: the loop never waits on DNS. */
        struct addrinfo hints;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        c->state = C_RESOLVING;
        c->port = port;
        c->gai.data = c;
        rc = uv_getaddrinfo(t->loop, &c->gai, on_resolved, host, NULL, &hints);
        c->resolving = rc == 0;
    }
    if (rc != 0) {
        snprintf(rt->errmsg, RAFT_ERRMSG_BUF_SIZE, "connect to %.200s: %s", address,
                 uv_strerror(rc));
        conn_close(c); /* no request attached: nothing answers */
        return RAFT_NOCONNECTION;
    }
    req->cb = cb;
    c->req = req;
    return 0;
}

static void on_listener_closed(uv_handle_t *h)
{
    transport_t *t = h->data;
    t->listener_open = false;
    maybe_closed(t);
}

static void on_sweep_closed(uv_handle_t *h)
{
    transport_t *t = h->data;
    t->sweep_open = false;
    maybe_closed(t);
}

static void tr_close(struct raft_uv_transport *rt, raft_uv_transport_close_cb cb)
{
    transport_t *t = rt->impl;
    t->closing = true;
    t->close_cb = cb;
    /* Keep maybe_closed from firing while the handles below are still
     * being closed: each of them has at least one callback to come. */
    if (t->listener_open)
        uv_close((uv_handle_t *)&t->listener, on_listener_closed);
    if (t->sweep_open)
        uv_close((uv_handle_t *)&t->sweep, on_sweep_closed);
    for (conn_t *c = t->conns; c != NULL; c = c->next)
        conn_close(c); /* never frees here: every open conn has a handle */
    maybe_closed(t);
}

/* --- setup ---------------------------------------------------------------------- */

static bool given(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* OpenSSL's reason for the last failure into out. */
static void ossl_reason(char *out, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(out, len, "unknown error");
    else
        ERR_error_string_n(e, out, len);
    ERR_clear_error();
}

static int make_ctx(const tn_meta_transport_opts_t *o, SSL_CTX **out, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL)
        return UV_ENOMEM;
    char why[200];
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Connections are long-lived and never resumed: no session tickets. */
    SSL_CTX_set_num_tickets(ctx, 0);
    if (SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert) != 1) {
        ossl_reason(why, sizeof(why));
        tn_errbuf(err, errlen, "raft TLS certificate \"%s\": %s", o->tls_cert, why);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o->tls_key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        ossl_reason(why, sizeof(why));
        tn_errbuf(err, errlen, "raft TLS key \"%s\": %s", o->tls_key, why);
        goto fail;
    }
    if (SSL_CTX_load_verify_locations(ctx, o->tls_ca, NULL) != 1) {
        ossl_reason(why, sizeof(why));
        tn_errbuf(err, errlen, "raft TLS CA \"%s\": %s", o->tls_ca, why);
        goto fail;
    }
    /* Both roles verify the peer's chain; as the server, a peer that
     * sends no certificate fails the handshake too. */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    *out = ctx;
    return 0;
fail:
    SSL_CTX_free(ctx);
    return TN_ECONFIG;
}

int tn_meta_transport_init(struct raft_uv_transport *rt, uv_loop_t *loop,
                           const tn_meta_transport_opts_t *o, char *err, size_t errlen)
{
    int ngiven = given(o->tls_cert) + given(o->tls_key) + given(o->tls_ca);
    if (ngiven != 0 && ngiven != 3) {
        tn_errbuf(err, errlen,
                  "raft TLS needs a certificate, its key and a CA file, all three (%s is missing)",
                  !given(o->tls_cert)  ? "the certificate"
                  : !given(o->tls_key) ? "the key"
                                       : "the CA");
        return TN_ECONFIG;
    }
    SSL_CTX *ctx = NULL;
    if (ngiven == 3) {
        int rc = make_ctx(o, &ctx, err, errlen);
        if (rc != 0)
            return rc;
    }
    transport_t *t = tn_calloc(1, sizeof(*t));
    if (t == NULL) {
        SSL_CTX_free(ctx);
        return UV_ENOMEM;
    }
    t->raft = rt;
    t->loop = loop;
    t->ssl = ctx;
    if (o->listen != NULL)
        snprintf(t->listen, sizeof(t->listen), "%s", o->listen);
    void *data = rt->data;
    memset(rt, 0, sizeof(*rt));
    rt->data = data;
    rt->impl = t;
    rt->init = tr_init;
    rt->listen = tr_listen;
    rt->connect = tr_connect;
    rt->close = tr_close;
    return 0;
}

void tn_meta_transport_fini(struct raft_uv_transport *rt)
{
    transport_t *t = rt->impl;
    if (t == NULL)
        return;
    TN_ASSERT(t->conns == NULL && !t->listener_open && !t->sweep_open);
    SSL_CTX_free(t->ssl);
    tn_free(t);
    rt->impl = NULL;
}
