/* Tests of the strict flat-object JSON decoder: fields of each type,
 * null as absent, and every refusal with its message. */
#include "core/platform.h"

#include "testutil.h"

#include "proto/http/json.h"

#include <stddef.h>
#include <string.h>

typedef struct {
    char name[16];
    int64_t partitions;
    bool flag;
} body_t;

static const tn_jfield_t fields[] = {
    {"name", TN_JF_STR, offsetof(body_t, name), 15},
    {"partitions", TN_JF_INT, offsetof(body_t, partitions), 0},
    {"flag", TN_JF_BOOL, offsetof(body_t, flag), 0},
};

static int decode(const char *s, body_t *b, bool *present, char *err)
{
    memset(b, 0, sizeof(*b));
    return tn_json_object(s, strlen(s), fields, 3, b, present, err, 160);
}

static void test_fields(void **state)
{
    (void)state;
    body_t b;
    bool present[3];
    char err[160];
    assert_int_equal(
        decode(" {\"name\":\"orders\",\"partitions\":7,\"flag\":true} ", &b, present, err), 0);
    assert_string_equal(b.name, "orders");
    assert_int_equal(b.partitions, 7);
    assert_true(b.flag);
    assert_true(present[0] && present[1] && present[2]);
    assert_int_equal(decode("{\"name\":null}", &b, present, err), 0);
    assert_false(present[0]);
    assert_int_equal(decode("{}", &b, present, err), 0);
    assert_int_equal(decode("{\"partitions\":-3}", &b, present, err), 0);
    assert_int_equal(b.partitions, -3);
    assert_int_equal(decode("{\"partitions\":9223372036854775807}", &b, present, err), 0);
    assert_true(b.partitions == INT64_MAX);
    assert_int_equal(decode("{\"partitions\":-9223372036854775808}", &b, present, err), 0);
    assert_true(b.partitions == INT64_MIN);
    assert_int_equal(decode("{\"name\":\"\\u00e9t\\u00e9\"}", &b, present, err), 0);
}

static void refused(const char *body, const char *msg)
{
    body_t b;
    bool present[3];
    char err[160] = "";
    assert_int_equal(decode(body, &b, present, err), UV_EINVAL);
    if (strstr(err, msg) == NULL)
        fail_msg("%s: got \"%s\", expected \"%s\"", body, err, msg);
}

static void test_refusals(void **state)
{
    (void)state;
    refused("{\"nme\":\"x\"}", "unknown field \"nme\"");
    refused("{\"name\":\"a\",\"name\":\"b\"}", "duplicate field \"name\"");
    refused("{\"name\":5}", "field \"name\" must be a string");
    refused("{\"partitions\":\"5\"}", "field \"partitions\" must be an integer");
    refused("{\"partitions\":1.5}", "field \"partitions\" must be an integer");
    refused("{\"flag\":1}", "field \"flag\" must be a boolean");
    refused("{\"partitions\":[1]}", "field \"partitions\" must be an integer");
    refused("{\"name\":{\"a\":1}}", "nested objects");
    refused("{\"name\":\"0123456789abcdef\"}", "longer than 15");
    refused("[]", "one JSON object");
    refused("\"x\"", "one JSON object");
    refused("", "not well-formed");
    refused("{\"name\":\"x\"} {}", "not well-formed");
    refused("{\"name\":\"x\"", "not well-formed");
    /* JSON sets numbers no limit: past int64 is out of range, not malformed. */
    refused("{\"partitions\":99999999999999999999}",
            "field \"partitions\" is out of range (a 64-bit integer)");
    refused("{\"partitions\":-9223372036854775809}",
            "field \"partitions\" is out of range (a 64-bit integer)");
    refused("{\"partitions\":1e400}", "field \"partitions\" must be an integer");
    refused("{\"name\":99999999999999999999}", "field \"name\" must be a string");
    refused("{name:1}", "not well-formed");
    /* A second value that starts but never ends, which yajl alone would
     * take for the end of the input. */
    refused("{\"name\":\"x\"} \"", "not well-formed");
    refused("{\"name\":\"x\"}\"abc", "not well-formed");
}

/* yajl's verdict, which tn_json_valid must give too (inputs here have no
 * \v or \f, the whitespace only yajl takes). */
static bool valid_n(const char *s, size_t n)
{
    bool ok = false;
    assert_int_equal(tn_json_events(s, n, NULL, NULL, true, &ok), 0);
    if (tn_json_valid(s, n) != ok)
        fail_msg("tn_json_valid says %d, yajl %d: %.*s", !ok, ok, (int)n, s);
    return ok;
}

static bool valid(const char *s)
{
    return valid_n(s, strlen(s));
}

static void test_validation(void **state)
{
    (void)state;
    assert_true(valid("{\"a\":[1,2,{\"b\":null}]}"));
    assert_true(valid(" 123 "));
    assert_true(valid("\"\""));
    assert_true(valid("123456789012345678901234567890")); /* no integer range for validation */
    assert_false(valid("\"\"\""));
    assert_false(valid("\"\" \"x"));
    assert_false(valid("1 2"));
    assert_false(valid("{} {}"));
    assert_false(valid("[1,"));
    assert_false(valid(""));
    assert_false(valid("   "));
    /* Scalars, numbers, keywords. */
    const char *yes[] = {"0",
                         "-0",
                         "0.5",
                         "-12.25e+3",
                         "1E9",
                         "1e-9",
                         "true",
                         "false",
                         "null",
                         "[]",
                         "{}",
                         " [ ] ",
                         "{\"a\":{}}",
                         "[[],[[]]]",
                         "{\"\":\"\"}",
                         "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD800\"",
                         "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
                         "\"\x7f\"",
                         "\"\xc0\x80\"" /* overlong: yajl only counts bytes */};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        assert_true(valid(yes[i]));
    const char *no[] = {"01",        "-",
                        "1.",        ".5",
                        "1e",        "1e+",
                        "+1",        "--1",
                        "0x10",      "NaN",
                        "tru",       "truex",
                        "nul",       "[1,]",
                        "[,1]",      "{\"a\"}",
                        "{\"a\":}",  "{\"a\":1,}",
                        "{a:1}",     "{\"a\" 1}",
                        "[1 2]",     "[}",
                        "{]",        "\"\\x\"",
                        "\"\\u12\"", "\"\\u12g4\"",
                        "\"\t\"",    "\"abc",
                        "\"\xc3\"",  "\"\xe2\x82\"",
                        "\"\x80\"",  "\"\xf8\x80\x80\x80\x80\"",
                        "// c\n1",   "[1]]",
                        "]"};
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        assert_false(valid(no[i]));
    assert_false(valid_n("\"a\0b\"", 5)); /* a NUL inside a string */
    assert_false(valid_n("1\0", 2));
    /* \v and \f between tokens: yajl takes them, RFC 8259 (and so
     * tn_json_valid) does not. */
    bool ok = false;
    assert_int_equal(tn_json_events("[1,\f2]", 6, NULL, NULL, true, &ok), 0);
    assert_true(ok);
    assert_false(tn_json_valid("[1,\f2]", 6));
    assert_false(tn_json_valid("\v1", 2));
    char deep[2 * TN_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i < TN_JSON_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 0; i < TN_JSON_MAX_DEPTH; i++)
        deep[n++] = ']';
    deep[n] = '\0';
    assert_true(valid(deep));
    memmove(deep + 1, deep, n + 1);
    deep[0] = '[';
    deep[n + 1] = ']';
    deep[n + 2] = '\0';
    assert_false(valid(deep));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
