/* Tests of the batch body decoders: message shapes (string, base64 and
 * JSON payloads, keys, partitions), the limits, refusals that name the
 * element, and receipt handle arrays. */
#include "core/platform.h"

#include "testutil.h"

#include "api/batch.h"
#include "api/consume.h"
#include "core/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* Messages of at most 16 bytes (64 for the shapes), keys of 8. */
static int decode(const char *body, uint32_t max, tn_batch_t *b, char *err)
{
    return tn_batch_decode(body, strlen(body), max, max == 10 ? 16 : 64, 8, b, err, 160);
}

static void expect_payload(const tn_batch_t *b, uint32_t i, const char *want)
{
    const tn_batch_msg_t *m = &b->msgs[i];
    assert_int_equal(m->payload_len, strlen(want));
    assert_memory_equal(b->data.base + m->payload_off, want, strlen(want));
}

static void test_shapes(void **state)
{
    (void)state;
    tn_batch_t b;
    char err[160];
    assert_int_equal(decode(" [ {\"payload\":\"plain\",\"key\":\"k\"},"
                            "{\"payload_encoding\":\"base64\",\"payload\":\"aGk=\"},"
                            "{\"payload\":{ \"a\" : [1, -2.5e3,{\"b\":null}], \"c\":\"\\u0001\"}},"
                            "{\"partition\":3,\"payload\":true} ] ",
                            11, &b, err),
                     0);
    assert_int_equal(b.n, 4);
    expect_payload(&b, 0, "plain");
    assert_int_equal(b.msgs[0].key_len, 1);
    assert_int_equal(b.data.base[b.msgs[0].key_off], 'k');
    assert_int_equal(b.msgs[0].partition, -1);
    expect_payload(&b, 1, "hi");
    assert_int_equal(b.msgs[1].key_len, 0);
    expect_payload(&b, 2, "{\"a\":[1,-2.5e3,{\"b\":null}],\"c\":\"\\u0001\"}");
    expect_payload(&b, 3, "true");
    assert_int_equal(b.msgs[3].partition, 3);
    tn_batch_fini(&b);
    /* Keys in base64 (any bytes), the encoding before or after the key;
     * max_key bounds the decoded key (8 bytes: 12 characters). */
    assert_int_equal(
        decode("[{\"payload\":\"a\",\"key_encoding\":\"base64\",\"key\":\"//4=\"},"
               "{\"payload\":\"b\",\"key\":\"MDEyMzQ1Njc=\",\"key_encoding\":\"base64\"}]",
               11, &b, err),
        0);
    assert_int_equal(b.msgs[0].key_len, 2);
    assert_memory_equal(b.data.base + b.msgs[0].key_off, "\xff\xfe", 2);
    assert_int_equal(b.msgs[1].key_len, 8);
    assert_memory_equal(b.data.base + b.msgs[1].key_off, "01234567", 8);
    expect_payload(&b, 1, "b");
    tn_batch_fini(&b);
}

static void refused(const char *body, uint32_t max, const char *why)
{
    tn_batch_t b;
    char err[160] = "";
    assert_int_equal(decode(body, max, &b, err), UV_EINVAL);
    if (strstr(err, why) == NULL)
        fail_msg("%s: got \"%s\", want \"%s\"", body, err, why);
}

static void test_refusals(void **state)
{
    (void)state;
    refused("[{\"payload\":\"a\"},{\"payload\":\"b\"},{\"payload\":\"c\"}]", 2, "at most 2");
    refused("[0,0,0]", 10, "message 0 must be an object");
    refused("{}", 10, "JSON array");
    refused("[]", 10, "at least one");
    refused("[{}]", 10, "message 0: payload required");
    refused("[{\"payload\":\"a\"},{\"payload\":\"\"}]", 10, "message 1: empty payload");
    refused("[{\"payload\":\"0123456789abcdefX\"}]", 10, "larger than 16");
    refused("[{\"payload\":[\"0123456789\",\"abcdef\"]}]", 10, "larger than 16");
    refused("[{\"payload\":\"MDEyMzQ1Njc4OWFiY2RlZlg=\",\"payload_encoding\":\"base64\"}]", 10,
            "larger than 16");
    refused("[{\"payload\":\"a\",\"key\":\"123456789\"}]", 10, "key longer than 8");
    refused("[{\"payload\":\"a\",\"key\":1}]", 10, "key must be a string");
    refused("[{\"payload\":\"a\",\"key\":\"MDEyMzQ1Njc4\",\"key_encoding\":\"base64\"}]", 10,
            "key longer than 8");
    refused("[{\"payload\":\"a\",\"key\":\"MDEyMzQ1Njc4OWFiY2Rl\",\"key_encoding\":\"base64\"}]",
            10, "key longer than 8");
    refused("[{\"payload\":\"a\",\"key\":\"a!==\",\"key_encoding\":\"base64\"}]", 10,
            "message 0: key is not valid base64");
    refused("[{\"payload\":\"a\",\"key_encoding\":\"base64\"}]", 10, "key_encoding needs a key");
    refused("[{\"payload\":\"a\",\"key\":\"k\",\"key_encoding\":\"hex\"}]", 10,
            "key_encoding must be \"base64\"");
    refused("[{\"payload\":\"a\",\"partition\":-1}]", 10, "partition must be");
    refused("[{\"payload\":\"a\",\"partition\":1.5}]", 10, "partition must be");
    refused("[{\"payload\":\"a\",\"partition\":\"1\"}]", 10, "partition must be");
    refused("[{\"payload\":\"a\",\"payload_encoding\":\"hex\"}]", 10, "payload_encoding");
    refused("[{\"payload\":\"a!==\",\"payload_encoding\":\"base64\"}]", 10, "not valid base64");
    refused("[{\"payload\":[1],\"payload_encoding\":\"base64\"}]", 10, "must be a string");
    refused("[{\"payload\":\"a\",\"payload\":\"b\"}]", 10, "duplicate field \"payload\"");
    refused("[{\"payload\":\"a\",\"x\":1}]", 10, "unknown field \"x\"");
    refused("[{\"key\":{\"a\":1},\"payload\":\"a\"}]", 10, "only payload");
    refused("[{\"payload\":\"a\"}] \"", 10, "not well-formed");
    refused("[{\"payload\":\"a\"}", 10, "not well-formed");
}

static void test_handles(void **state)
{
    (void)state;
    char h[4][TN_HANDLE_MAX];
    uint32_t n = 0;
    char err[96];
    const char *body = "[\"1:2:3\", \"junk\"]";
    assert_int_equal(tn_batch_handles(body, strlen(body), 4, h, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_string_equal(h[0], "1:2:3");
    assert_string_equal(h[1], "junk");
    body = "[\"a\",\"b\",\"c\",\"d\",\"e\"]";
    assert_int_equal(tn_batch_handles(body, strlen(body), 4, h, &n, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "at most 4"));
    const char *bad[] = {"[]", "[1]", "[[\"a\"]]", "{\"a\":\"b\"}", "\"a\"", "[\"a\"] x"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++)
        assert_int_equal(tn_batch_handles(bad[i], strlen(bad[i]), 4, h, &n, err, sizeof(err)),
                         UV_EINVAL);
}

/* A handle is kept as text that reads as no other handle and echoes as
 * valid UTF-8: one holding a NUL is not the part before it, one cut at
 * the length kept is cut between characters. */
static void test_handles_kept_safely(void **state)
{
    (void)state;
    char h[4][TN_HANDLE_MAX];
    uint32_t n = 0;
    char err[96];
    const char *body = "[\"0:5:7\\u0000junk\", \"\\u0000\"]";
    assert_int_equal(tn_batch_handles(body, strlen(body), 4, h, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    uint32_t p, nonce;
    uint64_t off;
    for (uint32_t i = 0; i < n; i++)
        assert_int_not_equal(tn_receipt_parse(h[i], strlen(h[i]), &p, &off, &nonce), 0);
    assert_string_equal(h[0], "0:5:7\xEF\xBF\xBDjunk"); /* NUL shown as U+FFFD */
    /* 40 two-byte characters: 80 bytes, cut to whole characters. */
    char big[128] = "[\"";
    for (int i = 0; i < 40; i++)
        strcat(big, "\xC3\xA9");
    strcat(big, "\"]");
    assert_int_equal(tn_batch_handles(big, strlen(big), 4, h, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    assert_true(strlen(h[0]) % 2 == 0 && strlen(h[0]) >= TN_HANDLE_MAX - 2);
    assert_true(tn_utf8_valid(h[0], strlen(h[0])));
}

static void test_receipt_parse(void **state)
{
    (void)state;
    uint32_t p, nonce;
    uint64_t off;
    assert_int_equal(tn_receipt_parse("3:18446744073709551:7", 21, &p, &off, &nonce), 0);
    assert_int_equal(p, 3);
    assert_int_equal(off, 18446744073709551ULL);
    assert_int_equal(nonce, 7);
    const char *bad[] = {"",
                         "1:2",
                         "1:2:0",
                         "1:2:3:4",
                         "-1:2:3",
                         "1::3",
                         "a:b:c",
                         "1:2:3 ",
                         "4294967296:0:1",
                         "0:9223372036854775808:1",
                         "0:0:4294967296"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++)
        assert_int_equal(tn_receipt_parse(bad[i], strlen(bad[i]), &p, &off, &nonce), UV_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_handles),       cmocka_unit_test(test_handles_kept_safely),
        cmocka_unit_test(test_receipt_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
