/* IDENTIFY: defaults, every field's range with nsqd's texts, -1 and 0,
 * type errors, unknown and nested fields, repeated IDENTIFY, compression
 * rules, allocation failures, and the negotiation response. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "proto/nsq/codec.h"
#include "proto/nsq/identify.h"

#include <string.h>

static const tn_nsq_server_opts_t srv = {
    .max_heartbeat_interval_ms = 60000,
    .max_output_buffer_size = 65536,
    .min_output_buffer_timeout_ms = 25,
    .max_output_buffer_timeout_ms = 30000,
    .max_msg_timeout_ms = 900000,
    .max_rdy_count = 2500,
    .max_deflate_level = 6,
    .tls_available = false,
    .deflate_enabled = true,
    .snappy_enabled = true,
    .auth_required = false,
};

static int run(const char *json, tn_nsq_client_opts_t *c, int *err, char *msg)
{
    return tn_nsq_identify(json, strlen(json), &srv, c, err, msg, 256);
}

static void ok(const char *json, tn_nsq_client_opts_t *c)
{
    int err = 0;
    char msg[256] = "";
    int rc = run(json, c, &err, msg);
    if (rc != 0)
        fail_msg("%s: %s %s", json, tn_nsq_err_code((tn_nsq_err_t)err), msg);
}

static void bad(const char *json, int code, const char *text)
{
    tn_nsq_client_opts_t c, before;
    tn_nsq_client_defaults(&c, 60000);
    before = c;
    int err = 0;
    char msg[256] = "";
    assert_int_equal(run(json, &c, &err, msg), TN_EPROTO);
    assert_int_equal(err, code);
    if (strcmp(msg, text) != 0)
        fail_msg("%s: got \"%s\", expected \"%s\"", json, msg, text);
    assert_memory_equal(&c, &before, sizeof(c)); /* nothing applied */
}

static void test_defaults_and_fields(void **state)
{
    (void)state;
    tn_nsq_client_opts_t c;
    tn_nsq_client_defaults(&c, 60000);
    ok("{}", &c);
    assert_int_equal(c.heartbeat_ms, 30000);
    assert_int_equal(c.output_buffer_size, 16384);
    assert_int_equal(c.output_buffer_timeout_ms, 250);
    assert_int_equal(c.msg_timeout_ms, 60000);

    ok("{\"client_id\":\"c1\",\"hostname\":\"h.example\",\"user_agent\":\"go-nsq/1.1\","
       "\"heartbeat_interval\":5000,\"output_buffer_size\":4096,\"output_buffer_timeout\":100,"
       "\"msg_timeout\":120000,\"sample_rate\":25,\"feature_negotiation\":true,"
       "\"long_id\":\"ignored\",\"unknown\":{\"nested\":[1,2,{\"x\":null}]},\"n\":1.5}",
       &c);
    assert_string_equal(c.client_id, "c1");
    assert_string_equal(c.hostname, "h.example");
    assert_string_equal(c.user_agent, "go-nsq/1.1");
    assert_int_equal(c.heartbeat_ms, 5000);
    assert_int_equal(c.output_buffer_size, 4096);
    assert_int_equal(c.output_buffer_timeout_ms, 100);
    assert_int_equal(c.msg_timeout_ms, 120000);
    assert_int_equal(c.sample_rate, 25);
    assert_true(c.feature_negotiation);

    /* A second IDENTIFY applies on top; 0 and null change nothing. */
    ok("{\"heartbeat_interval\":0,\"output_buffer_size\":0,\"msg_timeout\":null}", &c);
    assert_int_equal(c.heartbeat_ms, 5000);
    assert_int_equal(c.output_buffer_size, 4096);
    assert_int_equal(c.msg_timeout_ms, 120000);
    /* -1 disables heartbeats; buffer size -1 disables buffering and its timeout. */
    ok("{\"heartbeat_interval\":-1,\"output_buffer_size\":-1}", &c);
    assert_int_equal(c.heartbeat_ms, 0);
    assert_int_equal(c.output_buffer_size, 1); /* nsqd's: a 1-byte buffer */
    assert_int_equal(c.output_buffer_timeout_ms, 0);
    ok("null", &c); /* Go decodes null into a struct as no change */

    /* Long strings are kept truncated, not refused. */
    char big[1200] = "{\"user_agent\":\"";
    memset(big + strlen(big), 'u', 1000);
    strcpy(big + strlen(big), "\"}");
    ok(big, &c);
    assert_int_equal(strlen(c.user_agent), TN_NSQ_CLIENT_STR - 1);
}

static void test_ranges_use_nsqd_texts(void **state)
{
    (void)state;
    bad("{\"heartbeat_interval\":100}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY heartbeat interval (100) is invalid");
    bad("{\"heartbeat_interval\":60001}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY heartbeat interval (60001) is invalid");
    bad("{\"heartbeat_interval\":-2}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY heartbeat interval (-2) is invalid");
    bad("{\"output_buffer_size\":63}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY output buffer size (63) is invalid");
    bad("{\"output_buffer_size\":65537}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY output buffer size (65537) is invalid");
    bad("{\"output_buffer_timeout\":24}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY output buffer timeout (24) is invalid");
    bad("{\"output_buffer_timeout\":30001}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY output buffer timeout (30001) is invalid");
    bad("{\"sample_rate\":100}", TN_NSQ_E_BAD_BODY, "IDENTIFY sample rate (100) is invalid");
    bad("{\"sample_rate\":-1}", TN_NSQ_E_BAD_BODY, "IDENTIFY sample rate (-1) is invalid");
    bad("{\"msg_timeout\":999}", TN_NSQ_E_BAD_BODY, "IDENTIFY msg timeout (999) is invalid");
    bad("{\"msg_timeout\":900001}", TN_NSQ_E_BAD_BODY, "IDENTIFY msg timeout (900001) is invalid");
}

static void test_decode_failures(void **state)
{
    (void)state;
    const char *cases[] = {
        "",                                  /* empty */
        "{",                                 /* truncated */
        "{\"heartbeat_interval\":\"1000\"}", /* string for an int */
        "{\"heartbeat_interval\":1000.5}",   /* float for an int */
        "{\"heartbeat_interval\":1e400}",    /* out of range */
        "{\"tls_v1\":1}",                    /* number for a bool */
        "{\"client_id\":5}",                 /* number for a string */
        "{\"snappy\":{}}",                   /* object for a bool */
        "{\"deflate\":[true]}",              /* array for a bool */
        "[]",                                /* not an object */
        "42",
        "{} {}", /* trailing data */
        "{\"a\":1,}",
        "{/* comment */}",
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(cases); i++)
        bad(cases[i], TN_NSQ_E_BAD_BODY, "IDENTIFY failed to decode JSON body");
}

static void test_bounds(void **state)
{
    (void)state;
    char deep[200] = "{\"a\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    bad(deep, TN_NSQ_E_BAD_BODY, "IDENTIFY body nested deeper than 32");
    static char big[TN_NSQ_IDENTIFY_MAX + 2];
    memset(big, ' ', sizeof(big) - 1);
    big[0] = '{';
    big[sizeof(big) - 2] = '}';
    bad(big, TN_NSQ_E_BAD_BODY, "IDENTIFY body too big 65537 > 65536");
    /* Escaped strings use yajl's decode buffer: the largest body allowed,
     * all one escaped string, must fit the arena. */
    static char esc[TN_NSQ_IDENTIFY_MAX + 1];
    strcpy(esc, "{\"user_agent\":\"");
    size_t n = strlen(esc);
    while (n + 8 < TN_NSQ_IDENTIFY_MAX) {
        memcpy(esc + n, "\\u00e9", 6);
        n += 6;
    }
    strcpy(esc + n, "\"}");
    tn_nsq_client_opts_t c;
    tn_nsq_client_defaults(&c, 60000);
    ok(esc, &c);
    assert_int_equal(strlen(c.user_agent), TN_NSQ_CLIENT_STR - 1);
}

static void test_compression_and_tls(void **state)
{
    (void)state;
    tn_nsq_client_opts_t c;
    tn_nsq_client_defaults(&c, 60000);
    ok("{\"feature_negotiation\":true,\"deflate\":true,\"deflate_level\":9}", &c);
    assert_true(c.deflate);
    assert_int_equal(c.deflate_level, 6); /* capped at max_deflate_level */
    tn_nsq_client_defaults(&c, 60000);
    ok("{\"feature_negotiation\":true,\"deflate\":true,\"deflate_level\":3}", &c);
    assert_int_equal(c.deflate_level, 3);
    /* Each IDENTIFY's own: the next one without deflate has none. */
    ok("{\"feature_negotiation\":true}", &c);
    assert_false(c.deflate);
    assert_int_equal(c.deflate_level, 6);
    tn_nsq_client_defaults(&c, 60000);
    ok("{\"feature_negotiation\":true,\"snappy\":true,\"tls_v1\":true}", &c);
    assert_true(c.snappy);
    assert_false(c.tls_v1); /* no certificate configured */
    bad("{\"feature_negotiation\":true,\"deflate\":true,\"snappy\":true}", TN_NSQ_E_IDENTIFY_FAILED,
        "cannot enable both deflate and snappy compression");
    /* Without feature_negotiation nsqd answers "OK" before it looks at
     * them: nothing granted, both compressions no error. */
    tn_nsq_client_defaults(&c, 60000);
    ok("{\"deflate\":true,\"snappy\":true}", &c);
    assert_false(c.deflate || c.snappy || c.feature_negotiation);
}

/* Go's encoding/json, which nsqd decodes with: keys match fields ignoring
 * case, and sample_rate is an int32. */
static void test_go_decoding(void **state)
{
    (void)state;
    bad("{\"Heartbeat_Interval\":100}", TN_NSQ_E_BAD_BODY,
        "IDENTIFY heartbeat interval (100) is invalid");
    bad("{\"sample_rate\":4294967296}", TN_NSQ_E_BAD_BODY, "IDENTIFY failed to decode JSON body");
    tn_nsq_client_opts_t c;
    tn_nsq_client_defaults(&c, 60000);
    ok("{\"SAMPLE_RATE\":7}", &c);
    assert_int_equal(c.sample_rate, 7);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    const char *json = "{\"client_id\":\"c1\",\"unknown\":{\"a\":[1,2,3]},\"sample_rate\":5}";
    for (long n = 0;; n++) {
        tn_nsq_client_opts_t c;
        tn_nsq_client_defaults(&c, 60000);
        int err = 0;
        char msg[256];
        tn_alloc_fail_after(n);
        int rc = run(json, &c, &err, msg);
        tn_alloc_fail_after(-1);
        if (rc == 0) {
            assert_int_equal(c.sample_rate, 5);
            break;
        }
        assert_int_equal(rc, UV_ENOMEM);
        assert_true(n < 1000);
    }
}

static void test_response(void **state)
{
    (void)state;
    tn_nsq_client_opts_t c;
    tn_nsq_client_defaults(&c, 60000);
    ok("{\"feature_negotiation\":true,\"deflate\":true,\"deflate_level\":2,\"sample_rate\":10}",
       &c);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_nsq_identify_response(&c, &srv, "0.1.0", &b), 0);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    const char *want[] = {"\"max_rdy_count\":2500",
                          "\"version\":\"0.1.0\"",
                          "\"max_msg_timeout\":900000",
                          "\"msg_timeout\":60000",
                          "\"tls_v1\":false",
                          "\"deflate\":true",
                          "\"deflate_level\":2",
                          "\"max_deflate_level\":6",
                          "\"snappy\":false",
                          "\"sample_rate\":10",
                          "\"auth_required\":false",
                          "\"output_buffer_size\":16384",
                          "\"output_buffer_timeout\":250",
                          "\"topology_region\":\"\"",
                          "\"topology_zone\":\"\""};
    for (size_t i = 0; i < TN_ARRAY_SIZE(want); i++) {
        if (strstr(b.base, want[i]) == NULL)
            fail_msg("response %s lacks %s", b.base, want[i]);
    }
    tn_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_fields), cmocka_unit_test(test_ranges_use_nsqd_texts),
        cmocka_unit_test(test_decode_failures),     cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_compression_and_tls), cmocka_unit_test(test_go_decoding),
        cmocka_unit_test(test_alloc_failures),      cmocka_unit_test(test_response),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
