/* Tests of the outbound HTTPS client (proto/http/rclient.h) against a TLS
 * server this test runs on a thread (blocking OpenSSL on a loopback
 * socket), with certificates from a CA the test makes (openssl command):
 * requests answered in order on one kept-alive connection, with the head,
 * Authorization and body the server saw; X25519 negotiated; every status
 * class (401, 403, 404, 409, 500) with nothing of the body in the result;
 * a 302 whose Location names a second server the test runs, which no
 * connection reaches; TLS failures (another CA, a name the certificate
 * does not hold, a server that only speaks TLS 1.1); the address guard (a
 * name resolving to loopback refused when loopback is not allowed, before
 * any connection; literals refused at creation in several spellings);
 * unreachable (no listener, a server that never shakes hands, one that
 * never answers); limits (a head or body too large, garbage); proxies in
 * the environment ignored; a server closing a kept-alive connection; a
 * close with requests pending; header injection refused. Every test ends
 * with uv_loop_close() == 0. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "proto/http/rclient.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char *certdir;
static char *ca_pem;       /* the test CA's certificate */
static char *rogue_ca_pem; /* another CA's */

static void sh(const char *fmt, ...) TN_PRINTF(1, 2);
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        fail_msg("command failed: %s", cmd);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

#define NEWKEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

/* ca1 signs srv (SAN IP:127.0.0.1, DNS:n1); ca2 signs rogue (the same SAN). */
static int make_certs(void **state)
{
    (void)state;
    certdir = tu_tempdir();
    const char *d = certdir;
    for (int ca = 1; ca <= 2; ca++)
        sh("cd %s && openssl req -x509 " NEWKEY " -days 2 -subj /CN=rclient-ca%d -keyout ca%d.key"
           " -out ca%d.pem 2>/dev/null",
           d, ca, ca, ca);
    sh("cd %s && printf 'subjectAltName=IP:127.0.0.1,DNS:n1\\nextendedKeyUsage=serverAuth\\n' > "
       "san.ext",
       d);
    const char *names[] = {"srv", "rogue"};
    for (int i = 0; i < 2; i++)
        sh("cd %s && openssl req " NEWKEY " -subj /CN=%s -keyout %s.key -out %s.csr 2>/dev/null &&"
           " openssl x509 -req -in %s.csr -CA ca%d.pem -CAkey ca%d.key -CAcreateserial -days 2"
           " -extfile san.ext -out %s.pem 2>/dev/null",
           d, names[i], names[i], names[i], names[i], i + 1, i + 1, names[i]);
    char path[512];
    snprintf(path, sizeof(path), "%s/ca1.pem", d);
    ca_pem = slurp(path);
    snprintf(path, sizeof(path), "%s/ca2.pem", d);
    rogue_ca_pem = slurp(path);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int drop_certs(void **state)
{
    (void)state;
    tu_rmrf(certdir);
    free(certdir);
    free(ca_pem);
    free(rogue_ca_pem);
    return 0;
}

/* --- the server ------------------------------------------------------------------ */

enum {
    M_ANSWER,      /* answer every request with status (keep-alive) */
    M_CLOSE_AFTER, /* answer, then close the connection (no Connection: close) */
    M_NO_TLS,      /* accept and never shake hands */
    M_SILENT,      /* shake hands, read the request, never answer */
    M_BIG_HEAD,    /* a 70 KiB header */
    M_BIG_BODY,    /* a 2 MiB body */
    M_GARBAGE,     /* not HTTP */
    M_PLAIN,       /* no TLS at all: count connections (the redirect's target) */
};

typedef struct {
    int lfd, port, mode, status;
    const char *cert; /* "srv" or "rogue" */
    bool tls11;       /* only TLS 1.1 */
    SSL_CTX *ctx;
    pthread_t th;
    atomic_int accepts, requests;
    atomic_bool stop;
    atomic_int group; /* the negotiated group's NID */
    pthread_mutex_t mu;
    char last[8192]; /* the last request, head and body */
    char location[128];
} srv_t;

static bool wait_in(srv_t *s, int fd, SSL *ssl)
{
    if (ssl != NULL && SSL_pending(ssl) > 0)
        return true;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0)
            return true;
    }
    return false;
}

static void put(SSL *ssl, const char *data, size_t len)
{
    while (len > 0) {
        int n = SSL_write(ssl, data, (int)(len > 65536 ? 65536 : len));
        if (n <= 0)
            return;
        data += n;
        len -= (size_t)n;
    }
}

static void answer(srv_t *s, SSL *ssl)
{
    char head[512];
    if (s->mode == M_GARBAGE) {
        put(ssl, "SSH-2.0-nope\r\n\r\n", 16);
        return;
    }
    if (s->mode == M_BIG_HEAD) {
        size_t n = 70 * 1024;
        char *big = malloc(n + 128);
        int k = snprintf(big, 128, "HTTP/1.1 200 OK\r\nX-Big: ");
        memset(big + k, 'a', n);
        memcpy(big + k + n, "\r\nContent-Length: 0\r\n\r\n", 23);
        put(ssl, big, (size_t)k + n + 23);
        free(big);
        return;
    }
    if (s->mode == M_BIG_BODY) {
        size_t n = 2 * 1024 * 1024;
        int k = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);
        put(ssl, head, (size_t)k);
        char *body = calloc(1, n);
        put(ssl, body, n);
        free(body);
        return;
    }
    const char *body = "{\"error\":\"SECRET-REMOTE-BODY\"}";
    int k = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d Whatever SECRET-REASON\r\nContent-Type: application/json\r\n"
                     "%s%s%sContent-Length: %zu\r\n\r\n%s",
                     s->status, s->location[0] ? "Location: " : "", s->location,
                     s->location[0] ? "\r\n" : "", strlen(body), body);
    put(ssl, head, (size_t)k);
}

/* Read one request (head and Content-Length body) into s->last. */
static bool read_request(srv_t *s, int fd, SSL *ssl)
{
    char buf[8192];
    size_t len = 0;
    for (;;) {
        if (!wait_in(s, fd, ssl))
            return false;
        int n = SSL_read(ssl, buf + len, (int)(sizeof(buf) - 1 - len));
        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end == NULL)
            continue;
        size_t want = 0;
        char *cl = strcasestr(buf, "\r\nContent-Length: ");
        if (cl != NULL && cl < end)
            want = (size_t)strtoul(cl + 18, NULL, 10);
        if (len >= (size_t)(end + 4 - buf) + want)
            break;
    }
    pthread_mutex_lock(&s->mu);
    memcpy(s->last, buf, len + 1);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->requests, 1);
    return true;
}

static void serve_conn(srv_t *s, int fd)
{
    if (s->mode == M_PLAIN || s->mode == M_NO_TLS) {
        while (wait_in(s, fd, NULL)) {
            char b[256];
            if (read(fd, b, sizeof(b)) <= 0)
                break;
        }
        return;
    }
    SSL *ssl = SSL_new(s->ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) != 1) {
        ERR_clear_error();
        SSL_free(ssl);
        return;
    }
    atomic_store(&s->group, SSL_get_negotiated_group(ssl));
    while (read_request(s, fd, ssl)) {
        if (s->mode == M_SILENT) {
            while (wait_in(s, fd, ssl)) {
                char b[256];
                if (SSL_read(ssl, b, sizeof(b)) <= 0)
                    break;
            }
            break;
        }
        answer(s, ssl);
        if (s->mode == M_CLOSE_AFTER || s->mode == M_GARBAGE)
            break;
    }
    SSL_shutdown(ssl);
    SSL_free(ssl);
    ERR_clear_error();
}

static void *serve(void *arg)
{
    srv_t *s = arg;
    while (wait_in(s, s->lfd, NULL)) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&s->accepts, 1);
        serve_conn(s, fd);
        close(fd);
    }
    return NULL;
}

static void srv_start(srv_t *s, int mode, int status, const char *cert)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
    s->status = status;
    s->cert = cert != NULL ? cert : "srv";
    pthread_mutex_init(&s->mu, NULL);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s->lfd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&sa, &sl), 0);
    s->port = ntohs(sa.sin_port);
    assert_int_equal(listen(s->lfd, 16), 0);
    if (mode != M_PLAIN && mode != M_NO_TLS) {
        s->ctx = SSL_CTX_new(TLS_server_method());
        char path[512];
        snprintf(path, sizeof(path), "%s/%s.pem", certdir, s->cert);
        assert_int_equal(SSL_CTX_use_certificate_chain_file(s->ctx, path), 1);
        snprintf(path, sizeof(path), "%s/%s.key", certdir, s->cert);
        assert_int_equal(SSL_CTX_use_PrivateKey_file(s->ctx, path, SSL_FILETYPE_PEM), 1);
    }
}

static void srv_go(srv_t *s)
{
    if (s->tls11) {
        SSL_CTX_set_security_level(s->ctx, 0);
        SSL_CTX_set_min_proto_version(s->ctx, TLS1_VERSION);
        SSL_CTX_set_max_proto_version(s->ctx, TLS1_1_VERSION);
        SSL_CTX_set_cipher_list(s->ctx, "DEFAULT:@SECLEVEL=0");
    }
    assert_int_equal(pthread_create(&s->th, NULL, serve, s), 0);
}

static void srv_stop(srv_t *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->th, NULL);
    close(s->lfd);
    SSL_CTX_free(s->ctx);
    pthread_mutex_destroy(&s->mu);
}

/* --- the client side ------------------------------------------------------------- */

typedef struct {
    int done;
    tn_rc_result_t r[8];
    int order[8];
} answers_t;

typedef struct {
    answers_t *a;
    int id;
} slot_t;

static void on_answer(void *ud, const tn_rc_result_t *r)
{
    slot_t *s = ud;
    s->a->r[s->a->done] = *r;
    s->a->order[s->a->done] = s->id;
    s->a->done++;
}

static void run_until(uv_loop_t *loop, answers_t *a, int n)
{
    int64_t guard = 0;
    while (a->done < n) {
        uv_run(loop, UV_RUN_ONCE);
        assert_true(++guard < 1000000);
    }
}

static tn_guard_t guard_for(int port, const char *allow)
{
    tn_guard_t g;
    char ports[16], err[256];
    snprintf(ports, sizeof(ports), "%d", port);
    assert_int_equal(tn_guard_init(&g, ports, NULL, allow, err, sizeof(err)), 0);
    return g;
}

static tn_rc_t *client(uv_loop_t *loop, const tn_guard_t *g, const char *host, int port,
                       const char *ca, int timeout_ms)
{
    char url[256], err[256];
    snprintf(url, sizeof(url), "https://%s:%d/", host, port);
    tn_rc_opts_t o = {.url = url, .ca_pem = ca, .guard = g};
    o.connect_timeout_ms = o.tls_timeout_ms = o.response_timeout_ms = timeout_ms;
    o.max_body = 64 * 1024;
    tn_rc_t *c = NULL;
    int rv = tn_rc_new(loop, &o, &c, err, sizeof(err));
    if (rv != 0)
        fail_msg("tn_rc_new %s: %s", url, err);
    return c;
}

static const tn_rc_req_t POST = {"POST",
                                 "/v1/topics/orders/produce/batch",
                                 "Basic bWlycm9yOnB3",
                                 "application/json",
                                 "[{\"body\":\"x\"}]",
                                 14};

/* One request on a fresh client; the result. */
static tn_rc_result_t one(const tn_guard_t *g, const char *host, int port, const char *ca,
                          int timeout_ms, uint64_t *conns)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rc_t *c = client(&loop, g, host, port, ca, timeout_ms);
    answers_t a = {0};
    slot_t s = {&a, 0};
    assert_int_equal(tn_rc_request(c, &POST, on_answer, &s), 0);
    assert_int_equal(a.done, 0); /* never from inside the call */
    run_until(&loop, &a, 1);
    if (conns != NULL)
        *conns = tn_rc_connections(c);
    tn_rc_close(c);
    tu_loop_fini(&loop);
    return a.r[0];
}

static void assert_blind(const tn_rc_result_t *r)
{
    assert_null(strstr(r->detail, "SECRET"));
}

/* --- tests ----------------------------------------------------------------------- */

static void test_classes(void **state)
{
    (void)state;
    assert_int_equal(tn_rc_class_of_status(200), TN_RC_OK);
    assert_int_equal(tn_rc_class_of_status(204), TN_RC_OK);
    assert_int_equal(tn_rc_class_of_status(301), TN_RC_REFUSED);
    assert_int_equal(tn_rc_class_of_status(302), TN_RC_REFUSED);
    assert_int_equal(tn_rc_class_of_status(400), TN_RC_REFUSED);
    assert_int_equal(tn_rc_class_of_status(401), TN_RC_AUTH);
    assert_int_equal(tn_rc_class_of_status(403), TN_RC_FORBIDDEN);
    assert_int_equal(tn_rc_class_of_status(404), TN_RC_NOT_FOUND);
    assert_int_equal(tn_rc_class_of_status(409), TN_RC_REFUSED);
    assert_int_equal(tn_rc_class_of_status(429), TN_RC_REFUSED);
    assert_int_equal(tn_rc_class_of_status(500), TN_RC_SERVER_ERROR);
    assert_int_equal(tn_rc_class_of_status(503), TN_RC_SERVER_ERROR);
    assert_int_equal(tn_rc_class_of_status(600), TN_RC_SERVER_ERROR);
    assert_string_equal(tn_rc_class_name(TN_RC_NOT_FOUND), "not_found");
    assert_string_equal(tn_rc_class_name(TN_RC_SERVER_ERROR), "server_error");
    assert_string_equal(tn_rc_class_name(TN_RC_UNREACHABLE), "unreachable");
    assert_non_null(strstr(tn_rc_groups(), "X25519"));
}

static void test_keep_alive_in_order(void **state)
{
    (void)state;
    srv_t s;
    srv_start(&s, M_ANSWER, 200, NULL);
    srv_go(&s);
    tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rc_t *c = client(&loop, &g, "127.0.0.1", s.port, ca_pem, 10000);
    answers_t a = {0};
    slot_t slots[5];
    for (int i = 0; i < 5; i++) {
        slots[i] = (slot_t){&a, i};
        assert_int_equal(tn_rc_request(c, &POST, on_answer, &slots[i]), 0);
    }
    run_until(&loop, &a, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(a.order[i], i);
        assert_int_equal(a.r[i].status, 200);
        assert_int_equal(a.r[i].cls, TN_RC_OK);
        assert_int_equal(a.r[i].err, 0);
        assert_blind(&a.r[i]);
    }
    assert_int_equal(tn_rc_connections(c), 1);
    assert_int_equal(atomic_load(&s.accepts), 1);
    assert_int_equal(atomic_load(&s.requests), 5);
    pthread_mutex_lock(&s.mu);
    assert_non_null(strstr(s.last, "POST /v1/topics/orders/produce/batch HTTP/1.1\r\n"));
    assert_non_null(strstr(s.last, "\r\nAuthorization: Basic bWlycm9yOnB3\r\n"));
    assert_non_null(strstr(s.last, "\r\nContent-Type: application/json\r\n"));
    assert_non_null(strstr(s.last, "\r\nX-Tern-Client: tern-remote\r\n"));
    assert_non_null(strstr(s.last, "\r\nContent-Length: 14\r\n"));
    assert_non_null(strstr(s.last, "\r\n\r\n[{\"body\":\"x\"}]"));
    char host[64];
    snprintf(host, sizeof(host), "\r\nHost: 127.0.0.1:%d\r\n", s.port);
    assert_non_null(strstr(s.last, host));
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(atomic_load(&s.group), NID_X25519);
    tn_rc_close(c);
    tu_loop_fini(&loop);
    srv_stop(&s);
}

static void test_statuses(void **state)
{
    (void)state;
    static const struct {
        int status;
        tn_rc_class_t cls;
    } cases[] = {{401, TN_RC_AUTH},         {403, TN_RC_FORBIDDEN}, {404, TN_RC_NOT_FOUND},
                 {409, TN_RC_REFUSED},      {413, TN_RC_REFUSED},   {500, TN_RC_SERVER_ERROR},
                 {503, TN_RC_SERVER_ERROR}, {204, TN_RC_OK}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        srv_t s;
        srv_start(&s, M_ANSWER, cases[i].status, NULL);
        srv_go(&s);
        tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
        tn_rc_result_t r = one(&g, "127.0.0.1", s.port, ca_pem, 10000, NULL);
        assert_int_equal(r.status, cases[i].status);
        assert_int_equal(r.cls, cases[i].cls);
        assert_blind(&r);
        srv_stop(&s);
    }
}

static void test_redirect_not_followed(void **state)
{
    (void)state;
    srv_t target, s;
    srv_start(&target, M_PLAIN, 0, NULL);
    srv_go(&target);
    srv_start(&s, M_ANSWER, 302, NULL);
    snprintf(s.location, sizeof(s.location), "https://127.0.0.1:%d/steal", target.port);
    srv_go(&s);
    tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
    tn_rc_result_t r = one(&g, "127.0.0.1", s.port, ca_pem, 10000, NULL);
    assert_int_equal(r.status, 302);
    assert_int_equal(r.cls, TN_RC_REFUSED);
    assert_non_null(strstr(r.detail, "redirects are not followed"));
    assert_null(strstr(r.detail, "steal"));
    assert_blind(&r);
    assert_int_equal(atomic_load(&s.requests), 1);
    srv_stop(&s);
    srv_stop(&target);
    assert_int_equal(atomic_load(&target.accepts), 0);
}

static void test_tls_failures(void **state)
{
    (void)state;
    /* A certificate from a CA the client does not trust. */
    srv_t s;
    srv_start(&s, M_ANSWER, 200, "rogue");
    srv_go(&s);
    tn_guard_t g = guard_for(s.port, "127.0.0.0/8,::1");
    tn_rc_result_t r = one(&g, "127.0.0.1", s.port, ca_pem, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_TLS);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.detail, "certificate verify failed"));
    /* The system roots do not hold the test's CA either. */
    r = one(&g, "127.0.0.1", s.port, NULL, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_TLS);
    /* The CA bundle is used alone: trusting the rogue CA only, the good
     * certificate fails too (checked below with the good server). */
    assert_int_equal(atomic_load(&s.requests), 0);
    srv_stop(&s);

    srv_start(&s, M_ANSWER, 200, NULL);
    srv_go(&s);
    g = guard_for(s.port, "127.0.0.0/8,::1");
    r = one(&g, "127.0.0.1", s.port, rogue_ca_pem, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_TLS);
    /* A name the certificate does not hold (it holds n1 and 127.0.0.1). */
    r = one(&g, "localhost", s.port, ca_pem, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_TLS);
    assert_non_null(strstr(r.detail, "certificate verify failed"));
    assert_int_equal(atomic_load(&s.requests), 0);
    srv_stop(&s);

    /* A server that only speaks TLS 1.1. */
    srv_start(&s, M_ANSWER, 200, NULL);
    s.tls11 = true;
    srv_go(&s);
    g = guard_for(s.port, "127.0.0.0/8");
    r = one(&g, "127.0.0.1", s.port, ca_pem, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_TLS);
    assert_int_equal(atomic_load(&s.requests), 0);
    srv_stop(&s);
}

static void test_guard(void **state)
{
    (void)state;
    srv_t s;
    srv_start(&s, M_ANSWER, 200, NULL);
    srv_go(&s);
    /* "localhost" is a name: made fine, refused at the dial after its
     * resolution to loopback, before any connection. */
    tn_guard_t closed = guard_for(s.port, NULL);
    uint64_t conns = 99;
    tn_rc_result_t r = one(&closed, "localhost", s.port, ca_pem, 10000, &conns);
    assert_int_equal(r.cls, TN_RC_REFUSED);
    assert_int_equal(r.err, UV_EACCES);
    assert_string_equal(r.detail, TN_GUARD_REFUSED);
    assert_int_equal(conns, 0);
    /* Only a part of its addresses allowed (::1 but not 127/8, or the
     * reverse when localhost has no ::1 here): still refused as a whole,
     * unless every one is allowed. */
    tn_guard_t v6only = guard_for(s.port, "::1");
    r = one(&v6only, "localhost", s.port, ca_pem, 10000, &conns);
    assert_int_equal(r.cls, TN_RC_REFUSED);
    assert_int_equal(conns, 0);
    assert_int_equal(atomic_load(&s.accepts), 0);
    /* Allowed: it gets through (the certificate names n1, not localhost:
     * the handshake fails, which proves a connection was made). */
    tn_guard_t open = guard_for(s.port, "127.0.0.0/8,::1");
    r = one(&open, "localhost", s.port, ca_pem, 10000, &conns);
    assert_int_equal(r.cls, TN_RC_TLS);
    assert_int_equal(conns, 1);
    srv_stop(&s);

    /* Literals are refused when the client is made, in every spelling. */
    const char *hosts[] = {"127.0.0.1", "2130706433",         "0x7f.1",         "127.1",
                           "[::1]",     "[::ffff:127.0.0.1]", "169.254.169.254"};
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_guard_t g = guard_for(443, NULL);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        char url[128], err[256];
        snprintf(url, sizeof(url), "https://%s/", hosts[i]);
        tn_rc_opts_t o = {.url = url, .guard = &g};
        tn_rc_t *c = NULL;
        assert_int_equal(tn_rc_new(&loop, &o, &c, err, sizeof(err)), UV_EINVAL);
        assert_string_equal(err, TN_GUARD_REFUSED);
    }
    char err[256];
    tn_rc_t *c = NULL;
    tn_rc_opts_t o = {.url = "http://example.com/", .guard = &g};
    assert_int_equal(tn_rc_new(&loop, &o, &c, err, sizeof(err)), UV_EINVAL);
    o.url = "https://example.com:8443/";
    assert_int_equal(tn_rc_new(&loop, &o, &c, err, sizeof(err)), UV_EINVAL);
    o.url = "https://example.com/";
    o.ca_pem = "not a certificate";
    assert_int_equal(tn_rc_new(&loop, &o, &c, err, sizeof(err)), UV_EINVAL);
    assert_string_equal(err, "ca_pem holds no PEM certificate");
    tu_loop_fini(&loop);
}

static void test_unreachable(void **state)
{
    (void)state;
    /* No listener. */
    srv_t s;
    srv_start(&s, M_PLAIN, 0, NULL);
    int port = s.port;
    close(s.lfd);
    pthread_mutex_destroy(&s.mu);
    tn_guard_t g = guard_for(port, "127.0.0.0/8");
    tn_rc_result_t r = one(&g, "127.0.0.1", port, ca_pem, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_UNREACHABLE);
    assert_int_equal(r.err, UV_ECONNREFUSED);
    /* A server that never shakes hands. */
    srv_start(&s, M_NO_TLS, 0, NULL);
    srv_go(&s);
    g = guard_for(s.port, "127.0.0.0/8");
    r = one(&g, "127.0.0.1", s.port, ca_pem, 300, NULL);
    assert_int_equal(r.cls, TN_RC_UNREACHABLE);
    assert_int_equal(r.err, UV_ETIMEDOUT);
    assert_non_null(strstr(r.detail, "TLS handshake: timed out"));
    srv_stop(&s);
    /* A server that never answers. */
    srv_start(&s, M_SILENT, 0, NULL);
    srv_go(&s);
    g = guard_for(s.port, "127.0.0.0/8");
    r = one(&g, "127.0.0.1", s.port, ca_pem, 300, NULL);
    assert_int_equal(r.cls, TN_RC_UNREACHABLE);
    assert_int_equal(r.err, UV_ETIMEDOUT);
    assert_non_null(strstr(r.detail, "waiting for the answer"));
    assert_int_equal(atomic_load(&s.requests), 1);
    srv_stop(&s);
    /* A name that does not resolve. */
    g = guard_for(443, NULL);
    r = one(&g, "no-such-host.invalid", 443, ca_pem, 10000, NULL);
    assert_int_equal(r.cls, TN_RC_UNREACHABLE);
}

static void test_limits(void **state)
{
    (void)state;
    int modes[] = {M_BIG_HEAD, M_BIG_BODY, M_GARBAGE};
    for (size_t i = 0; i < 3; i++) {
        srv_t s;
        srv_start(&s, modes[i], 200, NULL);
        srv_go(&s);
        tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
        tn_rc_result_t r = one(&g, "127.0.0.1", s.port, ca_pem, 10000, NULL);
        assert_int_equal(r.cls, TN_RC_SERVER_ERROR);
        assert_int_equal(r.status, 0);
        srv_stop(&s);
    }
}

static void test_proxy_ignored(void **state)
{
    (void)state;
    srv_t s;
    srv_start(&s, M_ANSWER, 200, NULL);
    srv_go(&s);
    setenv("HTTPS_PROXY", "http://127.0.0.1:1", 1);
    setenv("https_proxy", "http://127.0.0.1:1", 1);
    setenv("HTTP_PROXY", "http://127.0.0.1:1", 1);
    setenv("ALL_PROXY", "http://127.0.0.1:1", 1);
    tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
    tn_rc_result_t r = one(&g, "127.0.0.1", s.port, ca_pem, 10000, NULL);
    unsetenv("HTTPS_PROXY");
    unsetenv("https_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("ALL_PROXY");
    assert_int_equal(r.cls, TN_RC_OK);
    assert_int_equal(atomic_load(&s.requests), 1);
    srv_stop(&s);
}

static void test_server_closes_kept_connection(void **state)
{
    (void)state;
    srv_t s;
    srv_start(&s, M_CLOSE_AFTER, 200, NULL);
    srv_go(&s);
    tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rc_t *c = client(&loop, &g, "127.0.0.1", s.port, ca_pem, 10000);
    answers_t a = {0};
    slot_t s0 = {&a, 0}, s1 = {&a, 1}, s2 = {&a, 2};
    assert_int_equal(tn_rc_request(c, &POST, on_answer, &s0), 0);
    run_until(&loop, &a, 1);
    /* Let the close arrive (or not: a request sent on a closed connection
     * is sent once more on a new one). */
    assert_int_equal(tn_rc_request(c, &POST, on_answer, &s1), 0);
    assert_int_equal(tn_rc_request(c, &POST, on_answer, &s2), 0);
    run_until(&loop, &a, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(a.r[i].cls, TN_RC_OK);
    assert_int_equal(tn_rc_connections(c), 3);
    assert_int_equal(atomic_load(&s.requests), 3);
    tn_rc_close(c);
    tu_loop_fini(&loop);
    srv_stop(&s);
}

static void close_in_cb(void *ud, const tn_rc_result_t *r)
{
    answers_t *a = ud;
    a->r[a->done++] = *r;
}

static void wake_cb(uv_timer_t *t)
{
    (void)t;
}

static void test_close_pending(void **state)
{
    (void)state;
    srv_t s;
    srv_start(&s, M_SILENT, 0, NULL);
    srv_go(&s);
    tn_guard_t g = guard_for(s.port, "127.0.0.0/8");
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* Bounds far above the test's own time (the machine may be busy). */
    tn_rc_t *c = client(&loop, &g, "127.0.0.1", s.port, ca_pem, 600000);
    answers_t a = {0};
    assert_int_equal(tn_rc_request(c, &POST, close_in_cb, &a), 0);
    assert_int_equal(tn_rc_request(c, &POST, close_in_cb, &a), 0);
    /* The server's thread counts the request: once the client's write is
     * done, its loop has nothing left to wake it, so a ticking timer does. */
    uv_timer_t tick;
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, wake_cb, 5, 5);
    while (atomic_load(&s.requests) < 1 && a.done == 0)
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    if (a.done != 0)
        fail_msg("answered before the close: %s (%s)", tn_rc_class_name(a.r[0].cls), a.r[0].detail);
    tn_rc_close(c);
    assert_int_equal(a.done, 2);
    assert_int_equal(a.r[0].err, UV_ECANCELED);
    assert_int_equal(a.r[1].err, UV_ECANCELED);
    tu_loop_fini(&loop);
    srv_stop(&s);

    /* Closed while resolving. */
    uv_loop_init(&loop);
    g = guard_for(443, NULL);
    c = client(&loop, &g, "localhost", 443, NULL, 10000);
    a.done = 0;
    assert_int_equal(tn_rc_request(c, &POST, close_in_cb, &a), 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    tn_rc_close(c);
    assert_int_equal(a.done, 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    tu_loop_fini(&loop);
}

static void test_injection_refused(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_guard_t g = guard_for(443, NULL);
    tn_rc_t *c = client(&loop, &g, "example.com", 443, NULL, 10000);
    answers_t a = {0};
    tn_rc_req_t q = POST;
    q.path = "/v1/x HTTP/1.1\r\nX-Evil: 1\r\n\r\nGET /";
    assert_int_equal(tn_rc_request(c, &q, close_in_cb, &a), UV_EINVAL);
    q = POST;
    q.authorization = "Basic a\r\nX-Evil: 1";
    assert_int_equal(tn_rc_request(c, &q, close_in_cb, &a), UV_EINVAL);
    q = POST;
    q.path = "v1/x";
    assert_int_equal(tn_rc_request(c, &q, close_in_cb, &a), UV_EINVAL);
    q = POST;
    q.content_type = "a\nb";
    assert_int_equal(tn_rc_request(c, &q, close_in_cb, &a), UV_EINVAL);
    assert_int_equal(a.done, 0);
    tn_rc_close(c);
    tu_loop_fini(&loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes),       cmocka_unit_test(test_keep_alive_in_order),
        cmocka_unit_test(test_statuses),      cmocka_unit_test(test_redirect_not_followed),
        cmocka_unit_test(test_tls_failures),  cmocka_unit_test(test_guard),
        cmocka_unit_test(test_unreachable),   cmocka_unit_test(test_limits),
        cmocka_unit_test(test_proxy_ignored), cmocka_unit_test(test_server_closes_kept_connection),
        cmocka_unit_test(test_close_pending), cmocka_unit_test(test_injection_refused),
    };
    return cmocka_run_group_tests(tests, make_certs, drop_certs);
}
