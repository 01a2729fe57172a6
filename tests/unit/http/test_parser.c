/* Tests of the HTTP/1.1 request parser: heads split at every byte, the
 * strictness rules (smuggling vectors, folding, bare CR, versions, Host),
 * limits, chunked bodies fed a byte at a time, and query parameters. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "proto/http/parser.h"

#include <stdio.h>
#include <string.h>

static int parse(const char *s, tn_http_req_t *req, size_t *used)
{
    return tn_http_parse_head(s, strlen(s), 65536, req, used);
}

static void expect_status(const char *s, int status)
{
    tn_http_req_t req;
    size_t used;
    int rc = parse(s, &req, &used);
    if (rc != TN_EPROTO || req.status != status)
        fail_msg("rc %d status %d (%s) for: %s", rc, req.status, req.errmsg, s);
}

static bool iov_is(tn_iov_t v, const char *s)
{
    return v.len == strlen(s) && memcmp(v.base, s, v.len) == 0;
}

static void test_simple_get(void **state)
{
    (void)state;
    const char *s =
        "GET /pub?topic=a%20b&x HTTP/1.1\r\nHost: h\r\nUser-Agent:  curl/8 \r\n\r\nBODY";
    tn_http_req_t req;
    size_t used;
    assert_int_equal(parse(s, &req, &used), 0);
    assert_int_equal(used, strlen(s) - 4);
    assert_true(iov_is(req.method, "GET"));
    assert_true(iov_is(req.path, "/pub"));
    assert_true(iov_is(req.query, "topic=a%20b&x"));
    assert_int_equal(req.minor, 1);
    assert_true(req.keep_alive);
    assert_int_equal(req.content_length, -1);
    const tn_iov_t *ua = tn_http_header(&req, "user-agent");
    assert_non_null(ua);
    assert_true(iov_is(*ua, "curl/8"));
    char v[64];
    assert_int_equal(tn_http_query(req.query, "topic", v, sizeof(v)), 1);
    assert_string_equal(v, "a b");
    assert_int_equal(tn_http_query(req.query, "x", v, sizeof(v)), 1);
    assert_string_equal(v, "");
    assert_int_equal(tn_http_query(req.query, "nope", v, sizeof(v)), 0);
    assert_int_equal(tn_http_query(req.query, "topic", v, 3), TN_ETOOBIG);
}

static void test_every_split_is_short_until_complete(void **state)
{
    (void)state;
    const char *s = "POST /mpub?topic=t&binary=true HTTP/1.1\r\nHost: x\r\n"
                    "Content-Length: 12\r\nConnection: close\r\n\r\n";
    size_t n = strlen(s);
    tn_http_req_t req;
    size_t used;
    for (size_t k = 0; k < n; k++)
        assert_int_equal(tn_http_parse_head(s, k, 65536, &req, &used), TN_ESHORT);
    assert_int_equal(tn_http_parse_head(s, n, 65536, &req, &used), 0);
    assert_int_equal(used, n);
    assert_int_equal(req.content_length, 12);
    assert_false(req.keep_alive);
}

static void test_versions_and_keepalive(void **state)
{
    (void)state;
    tn_http_req_t req;
    size_t used;
    assert_int_equal(parse("GET / HTTP/1.0\r\n\r\n", &req, &used), 0);
    assert_false(req.keep_alive);
    assert_int_equal(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &req, &used), 0);
    assert_true(req.keep_alive);
    /* A bare LF ends no line: a proxy may read it as part of a value. */
    expect_status("GET / HTTP/1.1\nHost: a\n\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a\r\n\n", 400);
    expect_status("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    assert_int_equal(parse("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", &req, &used), 0);
    char lines[256] = "";
    for (int i = 0; i < TN_HTTP_MAX_EMPTY_LINES; i++)
        strcat(lines, "\r\n");
    strcat(lines, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(parse(lines, &req, &used), 0);
    memmove(lines + 2, lines, strlen(lines) + 1);
    memcpy(lines, "\r\n", 2);
    expect_status(lines, 400);
    expect_status("GET / HTTP/2.0\r\n\r\n", 505);
    expect_status("GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505);
    expect_status("GET / HTTP/0.9\r\n\r\n", 505);
    expect_status("GET / HTTP/3.1\r\n\r\n", 505);
    /* Not a version, or something after it: a malformed line, not 505. */
    expect_status("GET /ping HTTP/1.1 x\r\nHost: a\r\n\r\n", 400);
    expect_status("GET /ping HTTP/1.1 \r\nHost: a\r\n\r\n", 400);
    expect_status("GET /ping HTTP/2.0 x\r\n\r\n", 400);
    expect_status("GET / HTTP/1.10\r\nHost: a\r\n\r\n", 400);
    expect_status("GET / HTTP/2\r\n\r\n", 400);
    expect_status("GET / HTTP/1.x\r\n\r\n", 400);
    expect_status("GET / HTTP/x.1\r\n\r\n", 400);
    expect_status("GET / HTTP/1,1\r\n\r\n", 400);
    expect_status("GET / http/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET / HTTP/\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\n\r\n", 400); /* no Host */
}

static void test_strictness(void **state)
{
    (void)state;
    expect_status("GET /\r\n\r\n", 400);
    expect_status("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET ftp://x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET http://u@x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET x:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400);
    expect_status("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400);
    expect_status("GET http://a\"b/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    /* Whose credentials? A proxy may read the other one. */
    expect_status("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic eDp5\r\n"
                  "authorization: Basic eDp5\r\n\r\n",
                  400);
    /* Request smuggling vectors. */
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                  400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n",
                  400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n",
                  501);
    /* Chunked not last, or twice: no length can be known (400). */
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", 400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n",
                  400);
    /* HTTP/1.0 with Transfer-Encoding: faulty framing (RFC 9112 6.1). */
    expect_status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    expect_status("POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417);
    /* Equal duplicates are fine; so is 100-continue. */
    tn_http_req_t req;
    size_t used;
    assert_int_equal(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                           "content-length: 5\r\nExpect: 100-continue\r\n\r\n",
                           &req, &used),
                     0);
    assert_true(req.expect_continue);
    assert_int_equal(req.content_length, 5);
    /* The absolute form is read for its path and query; `*` for OPTIONS. */
    assert_int_equal(parse("GET HTTPS://h:1/pub?topic=t HTTP/1.1\r\nHost: a\r\n\r\n", &req, &used),
                     0);
    assert_true(iov_is(req.path, "/pub"));
    assert_true(iov_is(req.query, "topic=t"));
    assert_int_equal(parse("GET http://h?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", &req, &used), 0);
    assert_true(iov_is(req.path, "/"));
    assert_true(iov_is(req.query, "x=1"));
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: [::1]:4151\r\n\r\n", &req, &used), 0);
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost:\r\n\r\n", &req, &used), 0);
    assert_int_equal(parse("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", &req, &used), 0);
    assert_true(iov_is(req.path, "*"));
}

static void test_limits(void **state)
{
    (void)state;
    char big[70000];
    int n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: a\r\n");
    while (n < 66000)
        n += snprintf(big + n, sizeof(big) - (size_t)n, "X-Pad: %0500d\r\n", 0);
    tn_http_req_t req;
    size_t used;
    /* Incomplete and already over the limit: 431 without waiting for more. */
    assert_int_equal(tn_http_parse_head(big, (size_t)n, 65536, &req, &used), TN_EPROTO);
    assert_int_equal(req.status, 431);
    char many[8192];
    n = snprintf(many, sizeof(many), "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i < TN_HTTP_MAX_HEADERS; i++)
        n += snprintf(many + n, sizeof(many) - (size_t)n, "X%d: y\r\n", i);
    snprintf(many + n, sizeof(many) - (size_t)n, "\r\n");
    expect_status(many, 431);
}

static void decode_all(const char *in, size_t step, uint64_t max, int want_rc, const char *want)
{
    tn_http_chunked_t d;
    tn_http_chunked_init(&d);
    tn_buf_t out;
    tn_buf_init(&out);
    size_t len = strlen(in), pos = 0;
    bool done = false;
    int rc = 0;
    while (pos < len && !done && rc == 0) {
        size_t n = TN_MIN(step, len - pos), used = 0;
        rc = tn_http_chunked_decode(&d, in + pos, n, &used, &out, max, &done);
        pos += used;
        if (rc == 0 && used < n && !done)
            fail_msg("decoder stopped early at %zu", pos);
    }
    assert_int_equal(rc, want_rc);
    if (want != NULL) {
        assert_true(done);
        assert_int_equal(tn_buf_size(&out), strlen(want));
        assert_memory_equal(tn_buf_data(&out), want, strlen(want));
    }
    tn_buf_fini(&out);
}

static void test_chunked(void **state)
{
    (void)state;
    const char *body = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n";
    for (size_t step = 1; step <= strlen(body); step++)
        decode_all(body, step, 1 << 20, 0, "hello, world");
    decode_all("5 ;a = \"b \\\" c\" ;d;e=f\r\nhello\r\n0\r\nX: y\r\nZ:\r\n\r\n", 1, 100, 0,
               "hello");
    /* Strict framing: whatever a front proxy could read otherwise. */
    static const char *const bad[] = {
        "A\nabcdefghij\n0\n\n",
        "5\nhello\r\n0\r\n\r\n",
        "5 6\r\nhello\r\n0\r\n\r\n",
        "5\r5\r\nhello\r\n0\r\n\r\n",
        "5 \r\nhello\r\n0\r\n\r\n",
        "5;\r\nhello\r\n0\r\n\r\n",
        "5;a\nhello\r\n0\r\n\r\n",
        "5;a\rb\r\nhello\r\n0\r\n\r\n",
        "5;a b\r\nhello\r\n0\r\n\r\n",
        "5;a=\r\nhello\r\n0\r\n\r\n",
        "5;a=\"b\r\nhello\r\n0\r\n\r\n",
        "5;a=\"\x01\"\r\nhello\r\n",
        "5\r\nhello\n0\r\n\r\n",
        "5\r\nhello\r0\r\n\r\n",
        "5\r\nhello\r\n0\n\r\n",
        "5\r\nhello\r\n0\r\n\n",
        "5\r\nhello\r\n0\r\nX: y\n\r\n",
        "5\r\nhello\r\n0\r\nno colon\r\n\r\n",
        "5\r\nhello\r\n0\r\n X: y\r\n\r\n",
        "5\r\nhello\r\n0\r\nX: \x01\r\n\r\n",
        "-5\r\n",
    };
    for (size_t k = 0; k < TN_ARRAY_SIZE(bad); k++)
        for (size_t step = 1; step <= 3; step++)
            decode_all(bad[k], step, 100, TN_EPROTO, NULL);
    decode_all("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 4, 8, TN_ETOOBIG, NULL);
    decode_all("zz\r\n", 1, 100, TN_EPROTO, NULL);
    decode_all("\r\n", 1, 100, TN_EPROTO, NULL);
    decode_all("5\r\nhelloXX", 2, 100, TN_EPROTO, NULL);
    decode_all("1111111111111111\r\n", 1, UINT64_MAX, TN_EPROTO, NULL);
    /* Trailer lines are read and dropped, 64 KiB of them at the most (a
     * head's worth): no end of them would keep one request going. */
    static char trailers[80 * 1024];
    size_t n = (size_t)snprintf(trailers, sizeof(trailers), "1\r\nx\r\n0\r\n");
    while (n < 64 * 1024 - 16)
        n += (size_t)snprintf(trailers + n, sizeof(trailers) - n, "X: %s\r\n", "yyyyyyyy");
    snprintf(trailers + n, sizeof(trailers) - n, "\r\n");
    decode_all(trailers, 4096, 100, 0, "x");
    while (n < 66 * 1024)
        n += (size_t)snprintf(trailers + n, sizeof(trailers) - n, "X: %s\r\n", "yyyyyyyy");
    snprintf(trailers + n, sizeof(trailers) - n, "\r\n");
    decode_all(trailers, 4096, 100, TN_EPROTO, NULL);
}

static void test_query_escapes(void **state)
{
    (void)state;
    char v[32];
    tn_iov_t q = tn_iov("a=%41%2b+b&b=%4&c=%zz&d=x%", 26);
    assert_int_equal(tn_http_query(q, "a", v, sizeof(v)), 1);
    assert_string_equal(v, "A+ b");
    assert_int_equal(tn_http_query(q, "b", v, sizeof(v)), UV_EINVAL);
    assert_int_equal(tn_http_query(q, "c", v, sizeof(v)), UV_EINVAL);
    assert_int_equal(tn_http_query(q, "d", v, sizeof(v)), UV_EINVAL);
    assert_int_equal(tn_http_query(tn_iov(NULL, 0), "a", v, sizeof(v)), 0);
    /* A NUL would cut the value short: refused, not "x". */
    q = tn_iov("e=x%00y&f=%10", 13);
    assert_int_equal(tn_http_query(q, "e", v, sizeof(v)), UV_EINVAL);
    assert_int_equal(tn_http_query(q, "f", v, sizeof(v)), 1);
    assert_string_equal(v, "\x10");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_get),
        cmocka_unit_test(test_every_split_is_short_until_complete),
        cmocka_unit_test(test_versions_and_keepalive),
        cmocka_unit_test(test_strictness),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_query_escapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
