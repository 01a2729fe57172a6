/* Tests of NSQ AUTH: parsing an auth server's answer (grants, TTL cap,
 * refusals), regex permissions, and the HTTP exchange against a small
 * in-process server (answer, denial, fall-through, cache). */
#include "core/platform.h"

#include "testutil.h"

#include "auth/nsqauth.h"
#include "core/log.h"
#include "core/time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_parse_and_match(void **state)
{
    (void)state;
    tn_authz_t *a = tn_nsqauth_parse(
        "{\"ttl\": 60, \"identity\": \"bob\", \"identity_url\": \"u\", \"authorizations\": ["
        "{\"topic\": \"^orders\", \"channels\": [\"^billing$\", \"audit.*\"],"
        " \"permissions\": [\"subscribe\"]},"
        "{\"topic\": \"events|clicks\", \"channels\": [], \"permissions\": [\"publish\"]}]}");
    assert_non_null(a);
    assert_string_equal(a->identity, "bob");
    assert_int_equal(a->nrules, 2);
    int64_t left = a->expires_ms - tn_now_mono_ms();
    assert_true(left > 55000 && left <= 60000);
    assert_true(tn_authz_can_subscribe(a, "orders.eu", "billing"));
    assert_true(tn_authz_can_subscribe(a, "orders", "audit-2"));
    assert_false(tn_authz_can_subscribe(a, "orders", "billing2"));
    assert_false(tn_authz_can_subscribe(a, "xorders", "billing"));
    assert_false(tn_authz_can_publish(a, "orders"));
    assert_true(tn_authz_can_publish(a, "myevents")); /* unanchored, as in NSQ */
    assert_true(tn_authz_can_publish(a, "clicks"));
    assert_false(tn_authz_can_subscribe(a, "clicks", "x"));
    tn_authz_unref(a);
}

static void test_parse_refusals(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "[]",
        "{\"authorizations\": []}",                  /* no ttl */
        "{\"ttl\": 0, \"authorizations\": []}",      /* ttl must be positive */
        "{\"ttl\": \"60\", \"authorizations\": []}", /* wrong type */
        "{\"ttl\": 60}",                             /* no authorizations */
        "{\"ttl\": 60, \"authorizations\": [{\"topic\": \"(\", \"permissions\": []}]}",
        "{\"ttl\": 60, \"authorizations\": [{\"permissions\": []}]}", /* no topic */
        "{\"ttl\": 60, \"authorizations\": [{\"topic\": \"a\"}]}",    /* no permissions */
        ("{\"ttl\": 60, \"authorizations\": [{\"topic\": \"a\", \"channels\": [1],"
         " \"permissions\": []}]}"),
        "{\"ttl\": 60, \"authorizations\": [",
        /* patterns that would blow up glibc's regcomp */
        "{\"ttl\": 60, \"authorizations\": [{\"topic\": \"a++++++++\", \"permissions\": []}]}",
        "{\"ttl\": 60, \"authorizations\": [{\"topic\": \"(a{30}){99}\", \"permissions\": []}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tn_authz_t *a = tn_nsqauth_parse(bad[i]);
        if (a != NULL)
            fail_msg("accepted: %s", bad[i]);
    }
    /* The TTL is capped at an hour; an empty list parses (and grants nothing). */
    tn_authz_t *a = tn_nsqauth_parse("{\"ttl\": 999999, \"authorizations\": null}");
    assert_non_null(a);
    assert_true(a->expires_ms - tn_now_mono_ms() <= 3600 * 1000);
    assert_int_equal(a->nrules, 0);
    tn_authz_unref(a);
}

static void *parse_deep(void *arg)
{
    return tn_nsqauth_parse(arg);
}

/* An answer as large as one is read (TN_NSQAUTH_MAX_RESPONSE), nested
 * all the way down: refused whole, in a stack of 1 MiB. Its tree, built,
 * would be freed by a recursion per level (131,000 of them). */
static void test_parse_refuses_deep_nesting(void **state)
{
    (void)state;
    static const char head[] = "{\"ttl\": 60, \"identity\": \"x\", \"authorizations\": ";
    size_t depth = (TN_NSQAUTH_MAX_RESPONSE - sizeof(head)) / 2 - 1;
    char *body = malloc(sizeof(head) + 2 * depth + 2);
    assert_non_null(body);
    memcpy(body, head, sizeof(head) - 1);
    char *p = body + sizeof(head) - 1;
    memset(p, '[', depth);
    memset(p + depth, ']', depth);
    p[2 * depth] = '}';
    p[2 * depth + 1] = '\0';
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    assert_int_equal(pthread_attr_setstacksize(&attr, 1 << 20), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, &attr, parse_deep, body), 0);
    void *a = body;
    assert_int_equal(pthread_join(th, &a), 0);
    assert_null(a);
    pthread_attr_destroy(&attr);
    free(body);
}

/* --- the HTTP exchange ------------------------------------------------------- */

typedef struct {
    uv_tcp_t listener;
    int port;
    int hits;
    const char *reply;
} server_t;

typedef struct {
    uv_tcp_t tcp;
    server_t *srv;
    char buf[4096];
    size_t len;
    uv_write_t w;
} sconn_t;

static void on_sconn_closed(uv_handle_t *h)
{
    free(h->data);
}

static void on_swritten(uv_write_t *w, int status)
{
    (void)status;
    sconn_t *c = w->data;
    uv_close((uv_handle_t *)&c->tcp, on_sconn_closed);
}

static void on_salloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    (void)sz;
    sconn_t *c = h->data;
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len - 1));
}

static void on_sread(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    sconn_t *c = s->data;
    if (n < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_sconn_closed);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    if (strstr(c->buf, "\r\n\r\n") == NULL)
        return;
    uv_read_stop(s);
    assert_non_null(strstr(c->buf, "GET /auth?remote_ip=10.0.0.1&tls=false&common_name="
                                   "&auth_secret=s%20e"));
    c->srv->hits++;
    uv_buf_t r = uv_buf_init((char *)c->srv->reply, (unsigned)strlen(c->srv->reply));
    c->w.data = c;
    uv_write(&c->w, s, &r, 1, on_swritten);
}

static void on_sconn(uv_stream_t *l, int status)
{
    assert_int_equal(status, 0);
    sconn_t *c = calloc(1, sizeof(*c));
    c->srv = l->data;
    uv_tcp_init(l->loop, &c->tcp);
    c->tcp.data = c;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    uv_read_start((uv_stream_t *)&c->tcp, on_salloc, on_sread);
}

static void server_start(uv_loop_t *loop, server_t *s, const char *reply)
{
    memset(s, 0, sizeof(*s));
    s->reply = reply;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&s->listener, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 16, on_sconn), 0);
    struct sockaddr_in b;
    int len = sizeof(b);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&b, &len);
    s->port = ntohs(b.sin_port);
}

typedef struct {
    tn_auth_req_t req;
    bool done;
    tn_auth_result_t result;
    tn_authz_t *authz;
} waitr_t;

static void on_result(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    waitr_t *w = req->data;
    w->done = true;
    w->result = result;
    w->authz = authz;
}

static tn_auth_result_t check(uv_loop_t *loop, tn_nsqauth_t *a, tn_authz_t **out)
{
    waitr_t w;
    memset(&w, 0, sizeof(w));
    w.req.data = &w;
    assert_int_equal(tn_nsqauth_check(a, &w.req, "10.0.0.1", false, "", "s e", 3, on_result), 0);
    while (!w.done)
        uv_run(loop, UV_RUN_ONCE);
    if (out != NULL)
        *out = w.authz;
    else
        tn_authz_unref(w.authz);
    return w.result;
}

static const char *ok_reply =
    "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
    "{\"ttl\": 60, \"identity\": \"i\", \"authorizations\": [{\"topic\": \".*\","
    " \"channels\": [\".*\"], \"permissions\": [\"publish\"]}]}";

static void test_http_answer_cache_and_fallthrough(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t good;
    server_start(&loop, &good, ok_reply);
    /* A port nothing listens on comes first: AUTH falls through. */
    uv_tcp_t probe;
    uv_tcp_init(&loop, &probe);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_bind(&probe, (struct sockaddr *)&a, 0);
    struct sockaddr_in b;
    int len = sizeof(b);
    uv_tcp_getsockname(&probe, (struct sockaddr *)&b, &len);
    int dead = ntohs(b.sin_port);
    uv_close((uv_handle_t *)&probe, NULL);
    char servers[64];
    snprintf(servers, sizeof(servers), "127.0.0.1:%d, http://127.0.0.1:%d", dead, good.port);
    tn_nsqauth_t *auth;
    assert_int_equal(tn_nsqauth_new(&loop, servers, 2000, &auth), 0);
    tn_authz_t *z;
    assert_int_equal(check(&loop, auth, &z), TN_AUTH_OK);
    assert_non_null(z);
    assert_true(tn_authz_can_publish(z, "anything"));
    tn_authz_unref(z);
    assert_int_equal(good.hits, 1);
    assert_int_equal(check(&loop, auth, NULL), TN_AUTH_OK); /* cached */
    assert_int_equal(good.hits, 1);
    tn_nsqauth_close(auth);
    uv_close((uv_handle_t *)&good.listener, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_http_denied_and_unusable(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t deny, junk;
    server_start(&loop, &deny, "HTTP/1.0 403 Forbidden\r\n\r\n");
    server_start(&loop, &junk, "HTTP/1.0 200 OK\r\n\r\nnot json");
    char servers[64];
    tn_nsqauth_t *auth;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", deny.port);
    assert_int_equal(tn_nsqauth_new(&loop, servers, 2000, &auth), 0);
    assert_int_equal(check(&loop, auth, NULL), TN_AUTH_DENIED);
    tn_nsqauth_close(auth);
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", junk.port);
    assert_int_equal(tn_nsqauth_new(&loop, servers, 2000, &auth), 0);
    assert_int_equal(check(&loop, auth, NULL), TN_AUTH_UNAVAILABLE);
    tn_nsqauth_close(auth);
    assert_int_equal(tn_nsqauth_new(&loop, "", 2000, &auth), UV_EINVAL);
    uv_close((uv_handle_t *)&deny.listener, NULL);
    uv_close((uv_handle_t *)&junk.listener, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    tn_log_level = TN_LOG_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_match),
        cmocka_unit_test(test_parse_refusals),
        cmocka_unit_test(test_parse_refuses_deep_nesting),
        cmocka_unit_test(test_http_answer_cache_and_fallthrough),
        cmocka_unit_test(test_http_denied_and_unusable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
