/* Tests of the blocking client's response parser and URL parser: bodies
 * framed by Content-Length, chunked coding (extensions, trailers) and the
 * close; every response fed split at every byte and a byte at a time;
 * interim 1xx answers; keep-alive rules; the refusals (bad status lines,
 * conflicting lengths, oversized heads, truncation). */
#include "core/platform.h"

#include "testutil.h"

#include "core/buf.h"
#include "core/err.h"
#include "proto/http/client.h"

#include <stdio.h>
#include <string.h>

static int collect(void *ud, const char *data, size_t len)
{
    return tn_buf_append(ud, data, len);
}

typedef struct {
    int rc;      /* of the last feed (or of eof when asked) */
    size_t used; /* bytes taken in total */
    tn_buf_t body;
    int status;
    bool keep_alive;
    char retry_after[32];
    char errmsg[128];
} result_t;

/* Feed s in pieces of at most step bytes (0: all at once); with eof, call
 * tn_hc_parser_eof when the input runs out before completion. */
static void run(const char *s, size_t len, size_t step, bool head, bool eof, result_t *out)
{
    tn_hc_parser_t p;
    memset(out, 0, sizeof(*out));
    tn_buf_init(&out->body);
    tn_hc_parser_init(&p, head, collect, &out->body);
    size_t off = 0;
    int rc = TN_ESHORT;
    while (off < len) {
        size_t n = step == 0 ? len - off : TN_MIN(step, len - off);
        size_t used = 0;
        rc = tn_hc_parser_feed(&p, s + off, n, &used);
        assert_true(used <= n);
        if (rc == TN_ESHORT)
            assert_int_equal(used, n);
        off += used;
        if (rc != TN_ESHORT)
            break;
    }
    if (rc == TN_ESHORT && eof)
        rc = tn_hc_parser_eof(&p);
    out->rc = rc;
    out->used = off;
    out->status = p.status;
    out->keep_alive = p.keep_alive;
    memcpy(out->retry_after, p.retry_after, sizeof(out->retry_after));
    memcpy(out->errmsg, p.errmsg, sizeof(out->errmsg));
    tn_hc_parser_fini(&p);
}

/* The same response must parse identically however it is split. */
static void expect_body(const char *s, bool eof, int status, const char *body, size_t used)
{
    size_t len = strlen(s);
    for (size_t step = 0; step <= len; step++) {
        result_t r;
        run(s, len, step, false, eof, &r);
        if (r.rc != 0 || r.status != status || r.used != used ||
            tn_buf_size(&r.body) != strlen(body) ||
            memcmp(tn_buf_data(&r.body) ? tn_buf_data(&r.body) : "", body, strlen(body)) != 0)
            fail_msg("step %zu: rc %d (%s) status %d used %zu body %.*s", step, r.rc, r.errmsg,
                     r.status, r.used, (int)tn_buf_size(&r.body),
                     tn_buf_data(&r.body) ? tn_buf_data(&r.body) : "");
        tn_buf_fini(&r.body);
    }
}

static void expect_refused(const char *s, bool eof, const char *why)
{
    size_t len = strlen(s);
    for (size_t step = 0; step <= len; step += len / 4 + 1) {
        result_t r;
        run(s, len, step, false, eof, &r);
        if (r.rc != TN_EPROTO || strstr(r.errmsg, why) == NULL)
            fail_msg("step %zu: rc %d errmsg \"%s\", wanted \"%s\" for %s", step, r.rc, r.errmsg,
                     why, s);
        tn_buf_fini(&r.body);
    }
}

static void test_content_length(void **state)
{
    (void)state;
    const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nRetry-After: 1\r\n\r\nhelloNEXT";
    expect_body(s, false, 200, "hello", strlen(s) - 4);
    result_t r;
    run(s, strlen(s), 0, false, false, &r);
    assert_true(r.keep_alive);
    assert_string_equal(r.retry_after, "1");
    tn_buf_fini(&r.body);
    /* Several equal Content-Length values are one. */
    expect_body("HTTP/1.1 201 Created\r\ncontent-length: 2\r\nContent-Length: 2\r\n\r\nok", false,
                201, "ok", 64);
}

static void test_chunked(void **state)
{
    (void)state;
    const char *s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\nhello\r\n"
                    "1;ext=1\r\n \r\n"
                    "A  ;x\r\n0123456789\r\n"
                    "0\r\nX-Trailer: t\r\n\r\nNEXT";
    expect_body(s, false, 200, "hello 0123456789", strlen(s) - 4);
    /* Bare LF line ends, an empty chunked body. */
    expect_body("HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\n\n3\nabc\n0\n\n", false, 200,
                "abc", 59);
    expect_body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false, 200, "",
                52);
}

static void test_until_close(void **state)
{
    (void)state;
    const char *s = "HTTP/1.0 200 OK\r\n\r\nall of it";
    expect_body(s, true, 200, "all of it", strlen(s));
    result_t r;
    run(s, strlen(s), 0, false, true, &r);
    assert_false(r.keep_alive);
    tn_buf_fini(&r.body);
    /* A Transfer-Encoding that does not end in chunked runs to the close. */
    const char *g = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabcdef";
    expect_body(g, true, 200, "abcdef", strlen(g));
}

static void test_no_body(void **state)
{
    (void)state;
    expect_body("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\nNEXT", false, 204, "", 47);
    expect_body("HTTP/1.1 304 Not Modified\r\n\r\n", false, 304, "", 29);
    /* An interim 100 is skipped; the real answer follows. */
    const char *s =
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
    expect_body(s, false, 202, "", strlen(s));
    /* A HEAD answer has no body whatever its headers say. */
    const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
    result_t r;
    run(h, strlen(h), 1, true, false, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.used, strlen(h));
    assert_int_equal(tn_buf_size(&r.body), 0);
    tn_buf_fini(&r.body);
}

static void test_keep_alive_rules(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        bool keep;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
        {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false},
        {"HTTP/1.1 200 OK\r\nConnection: x, Close\r\nContent-Length: 0\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
         false},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(cases); i++) {
        result_t r;
        run(cases[i].s, strlen(cases[i].s), 0, false, false, &r);
        if (r.rc != 0 || r.keep_alive != cases[i].keep)
            fail_msg("case %zu: rc %d keep_alive %d", i, r.rc, r.keep_alive);
        tn_buf_fini(&r.body);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    expect_refused("HTTP/2 200 OK\r\n\r\n", false, "bad status line");
    expect_refused("HTTP/1.1 20 OK\r\n\r\n", false, "bad status line");
    expect_refused("HTTP/1.1 200OK\r\n\r\n", false, "bad status line");
    expect_refused("\r\nHTTP/1.1 200 OK\r\n\r\n", false, "empty line");
    expect_refused("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", false, "bad header line");
    expect_refused("HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", false, "bad header line");
    expect_refused("HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", false, "bad Content-Length");
    expect_refused("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", false,
                   "two different Content-Length");
    expect_refused("HTTP/1.1 101 Switching Protocols\r\n\r\n", false, "101");
    expect_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false,
                   "bad chunk-size line");
    expect_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", false,
                   "chunk data longer than its size");
    expect_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n12345678901234567\r\n",
                   false, "chunk size too large");
    /* Truncations, told apart. */
    expect_refused("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true,
                   "connection closed after 3 of 10 body bytes");
    expect_refused("HTTP/1.1 200 OK\r\nContent-Len", true, "closed inside the head");
    expect_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", true,
                   "inside the chunked body");
    result_t r;
    run("", 0, 0, false, true, &r);
    assert_int_equal(r.rc, TN_EPROTO);
    assert_non_null(strstr(r.errmsg, "before any answer"));
    tn_buf_fini(&r.body);
}

static void test_limits(void **state)
{
    (void)state;
    /* A head over TN_HC_MAX_HEAD is refused however it arrives. */
    tn_buf_t big;
    tn_buf_init(&big);
    tn_buf_append(&big, "HTTP/1.1 200 OK\r\n", 17);
    while (tn_buf_size(&big) <= TN_HC_MAX_HEAD)
        tn_buf_append(&big, "X-Filler: 0123456789012345678901234567890123456789\r\n", 52);
    tn_buf_append(&big, "\r\n", 2);
    result_t r;
    run(tn_buf_data(&big), tn_buf_size(&big), 4096, false, false, &r);
    assert_int_equal(r.rc, TN_EPROTO);
    assert_non_null(strstr(r.errmsg, "head longer than"));
    tn_buf_fini(&r.body);
    tn_buf_fini(&big);
    /* A chunk-size line past its limit. */
    tn_buf_t ext;
    tn_buf_init(&ext);
    const char *h = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;";
    tn_buf_append(&ext, h, strlen(h));
    for (int i = 0; i < TN_HC_MAX_CHUNK_LINE; i++)
        tn_buf_append(&ext, "e", 1);
    run(tn_buf_data(&ext), tn_buf_size(&ext), 7, false, false, &r);
    assert_int_equal(r.rc, TN_EPROTO);
    assert_non_null(strstr(r.errmsg, "chunk-size line longer than"));
    tn_buf_fini(&r.body);
    tn_buf_fini(&ext);
}

static int refuse_body(void *ud, const char *data, size_t len)
{
    (void)ud;
    (void)data;
    (void)len;
    return TN_ETOOBIG;
}

static void test_callback_error(void **state)
{
    (void)state;
    const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
    tn_hc_parser_t p;
    tn_hc_parser_init(&p, false, refuse_body, NULL);
    size_t used = 0;
    assert_int_equal(tn_hc_parser_feed(&p, s, strlen(s), &used), TN_ETOOBIG);
    tn_hc_parser_fini(&p);
}

static void test_urls(void **state)
{
    (void)state;
    tn_hc_url_t u;
    char err[256];
    assert_int_equal(tn_hc_url_parse("http://127.0.0.1:4151", &u, err, sizeof(err)), 0);
    assert_false(u.tls);
    assert_string_equal(u.host, "127.0.0.1");
    assert_string_equal(u.port, "4151");
    assert_string_equal(u.hostport, "127.0.0.1:4151");
    assert_string_equal(u.prefix, "");
    assert_int_equal(tn_hc_url_parse("HTTPS://tern.example/api/", &u, err, sizeof(err)), 0);
    assert_true(u.tls);
    assert_string_equal(u.port, "443");
    assert_string_equal(u.prefix, "/api");
    assert_int_equal(tn_hc_url_parse("https://[::1]:8443", &u, err, sizeof(err)), 0);
    assert_string_equal(u.host, "::1");
    assert_string_equal(u.hostport, "[::1]:8443");
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"127.0.0.1:4151", "must start with http:// or https://"},
        {"ftp://x", "must start with"},
        {"http://admin:pw@x", "credentials in the URL"},
        {"http://x:0", "bad port"},
        {"http://x:65536", "bad port"},
        {"http://x:12ab", "bad port"},
        {"http://x/?a=1", "no query or fragment"},
        {"http://", "no host"},
        {"http://[::1", "unclosed"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (tn_hc_url_parse(bad[i].url, &u, err, sizeof(err)) != UV_EINVAL ||
            strstr(err, bad[i].why) == NULL)
            fail_msg("%s: \"%s\", wanted \"%s\"", bad[i].url, err, bad[i].why);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_until_close),
        cmocka_unit_test(test_no_body),
        cmocka_unit_test(test_keep_alive_rules),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_callback_error),
        cmocka_unit_test(test_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
