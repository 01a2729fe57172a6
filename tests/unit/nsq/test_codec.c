/* The NSQ V2 codec: every command, partial input at every length,
 * pipelining, every syntax and size error with nsqd's texts, names,
 * message IDs and frames. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "proto/nsq/codec.h"

#include <stdio.h>
#include <string.h>

static const tn_nsq_limits_t lim = {
    .max_line = 1024,
    .max_msg_size = 1024,
    .max_body_size = 4096,
    .max_mpub_count = 100,
    .max_rdy_count = 2500,
    .max_defer_ms = 3600000,
};

/* A command line plus an optional length-prefixed body. */
static size_t build(char *out, const char *line, const void *body, int32_t blen)
{
    size_t n = strlen(line);
    memcpy(out, line, n);
    if (body != NULL || blen != 0) {
        unsigned char l[4] = {(unsigned char)((uint32_t)blen >> 24),
                              (unsigned char)((uint32_t)blen >> 16),
                              (unsigned char)((uint32_t)blen >> 8), (unsigned char)blen};
        memcpy(out + n, l, 4);
        n += 4;
        if (body != NULL && blen > 0) {
            memcpy(out + n, body, (size_t)blen);
            n += (size_t)blen;
        }
    }
    return n;
}

static void put32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

/* MPUB body of n messages "m0", "m1", ... */
static int32_t mpub_body(char *out, int n)
{
    size_t len = 4;
    put32(out, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        char m[16];
        int ml = snprintf(m, sizeof(m), "m%d", i);
        put32(out + len, (uint32_t)ml);
        memcpy(out + len + 4, m, (size_t)ml);
        len += 4 + (size_t)ml;
    }
    return (int32_t)len;
}

static void expect_ok(const char *buf, size_t len, tn_nsq_cmd_t *cmd)
{
    size_t used = 0;
    int rc = tn_nsq_parse(buf, len, &lim, cmd, &used);
    if (rc != 0)
        fail_msg("parse: %s %s", tn_nsq_err_code(cmd->err), cmd->errmsg);
    assert_int_equal(used, len);
    /* Every shorter prefix asks for more bytes and never fails. */
    for (size_t k = 0; k < len; k++) {
        tn_nsq_cmd_t c;
        int r = tn_nsq_parse(buf, k, &lim, &c, &used);
        if (r != TN_ESHORT)
            fail_msg("prefix of %zu/%zu bytes: rc %d %s", k, len, r, c.errmsg);
    }
}

static void expect_err(const char *buf, size_t len, tn_nsq_err_t err, const char *text)
{
    tn_nsq_cmd_t cmd;
    size_t used;
    assert_int_equal(tn_nsq_parse(buf, len, &lim, &cmd, &used), TN_EPROTO);
    assert_int_equal(cmd.err, err);
    if (strcmp(cmd.errmsg, text) != 0)
        fail_msg("error text \"%s\", expected \"%s\"", cmd.errmsg, text);
}

static void test_commands(void **state)
{
    (void)state;
    char buf[8192];
    tn_nsq_cmd_t c;
    size_t n;

    n = build(buf, "SUB orders workers#ephemeral\n", NULL, 0);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_SUB);
    assert_memory_equal(c.topic.base, "orders", 6);
    assert_int_equal(c.channel.len, strlen("workers#ephemeral"));

    n = build(buf, "PUB orders\n", "hello", 5);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_PUB);
    assert_int_equal(c.body.len, 5);
    assert_memory_equal(c.body.base, "hello", 5);

    n = build(buf, "PUB orders extra ignored\r\n", "x", 1); /* nsqd ignores extras; CRLF ok */
    expect_ok(buf, n, &c);
    assert_int_equal(c.topic.len, 6);

    n = build(buf, "DPUB orders 1500\n", "later", 5);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_DPUB);
    assert_int_equal(c.num, 1500);

    char body[4096];
    int32_t blen = mpub_body(body, 3);
    n = build(buf, "MPUB orders\n", body, blen);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_MPUB);
    assert_int_equal(c.nmsgs, 3);
    size_t pos = 0;
    tn_iov_t m;
    for (int i = 0; i < 3; i++) {
        assert_true(tn_nsq_mpub_next(&c, &pos, &m));
        char want[8];
        snprintf(want, sizeof(want), "m%d", i);
        assert_int_equal(m.len, strlen(want));
        assert_memory_equal(m.base, want, m.len);
    }
    assert_false(tn_nsq_mpub_next(&c, &pos, &m));

    n = build(buf, "RDY\n", NULL, 0); /* no count means 1 */
    expect_ok(buf, n, &c);
    assert_int_equal(c.num, 1);
    n = build(buf, "RDY 2500\n", NULL, 0);
    expect_ok(buf, n, &c);
    assert_int_equal(c.num, 2500);
    n = build(buf, "RDY \n", NULL, 0); /* nsqd's ByteToBase10 reads "" as 0 */
    expect_ok(buf, n, &c);
    assert_int_equal(c.num, 0);
    n = build(buf, "REQ 0001000000000042 \n", NULL, 0);
    expect_ok(buf, n, &c);
    assert_int_equal(c.num, 0);
    n = build(buf, "DPUB orders \n", "x", 1);
    expect_ok(buf, n, &c);
    assert_int_equal(c.num, 0);
    n = build(buf, "FIN 0001000000000042\n", NULL, 0);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_FIN);
    assert_memory_equal(c.id.base, "0001000000000042", 16);
    n = build(buf, "REQ 0001000000000042 5000\n", NULL, 0);
    expect_ok(buf, n, &c);
    assert_int_equal(c.num, 5000);
    n = build(buf, "TOUCH 0001000000000042\n", NULL, 0);
    expect_ok(buf, n, &c);
    n = build(buf, "NOP\n", NULL, 0);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_NOP);
    n = build(buf, "CLS\n", NULL, 0);
    expect_ok(buf, n, &c);
    n = build(buf, "IDENTIFY\n", "{\"heartbeat_interval\":1000}", 27);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_IDENTIFY);
    assert_int_equal(c.body.len, 27);
    n = build(buf, "AUTH\n", "secret", 6);
    expect_ok(buf, n, &c);
    assert_int_equal(c.op, TN_NSQ_AUTH);
}

static void test_pipelined_and_need(void **state)
{
    (void)state;
    char buf[512];
    size_t n = build(buf, "PUB a\n", "one", 3);
    n += build(buf + n, "NOP\n", NULL, 0);
    n += build(buf + n, "PUB b\n", "two", 3);
    tn_nsq_op_t ops[] = {TN_NSQ_PUB, TN_NSQ_NOP, TN_NSQ_PUB};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        tn_nsq_cmd_t c;
        size_t used;
        assert_int_equal(tn_nsq_parse(buf + off, n - off, &lim, &c, &used), 0);
        assert_int_equal(c.op, ops[i]);
        off += used;
    }
    assert_int_equal(off, n);

    /* Once the length is read, `need` tells the whole command's size. */
    n = build(buf, "PUB a\n", "0123456789", 10);
    tn_nsq_cmd_t c;
    size_t used;
    assert_int_equal(tn_nsq_parse(buf, 6, &lim, &c, &used), TN_ESHORT);
    assert_int_equal(c.need, 0);
    assert_int_equal(tn_nsq_parse(buf, 12, &lim, &c, &used), TN_ESHORT);
    assert_int_equal(c.need, n);
}

static void test_errors(void **state)
{
    (void)state;
    char buf[8192], body[4096];
    size_t n;
#define E(line, code, text) expect_err(line, strlen(line), TN_NSQ_E_##code, text)
    E("\n", INVALID, "invalid command ");
    E("pub orders\n", INVALID, "invalid command pub"); /* case-sensitive */
    E("HELLO\n", INVALID, "invalid command HELLO");
    E("PUB\n", INVALID, "PUB insufficient number of parameters");
    E("SUB orders\n", INVALID, "SUB insufficient number of parameters");
    E("PUB  orders\n", BAD_TOPIC, "PUB topic name \"\" is not valid"); /* double space */
    E("PUB bad/topic\n", BAD_TOPIC, "PUB topic name \"bad/topic\" is not valid");
    /* Names are quoted as Go's %q quotes them in nsqd's texts. */
    E("PUB a\"b\\c\n", BAD_TOPIC, "PUB topic name \"a\\\"b\\\\c\" is not valid");
    E("PUB a\tb\x01\n", BAD_TOPIC, "PUB topic name \"a\\tb\\x01\" is not valid");
    E("SUB t \xc3\xa9\xff\n", BAD_CHANNEL, "SUB channel name \"\xc3\xa9\\xff\" is not valid");
    E("MPUB ..\n", BAD_TOPIC, "E_BAD_TOPIC MPUB topic name \"..\" is not valid"); /* nsqd's */
    E("SUB t bad*channel\n", BAD_CHANNEL, "SUB channel name \"bad*channel\" is not valid");
    E("SUB t #ephemeral\n", BAD_CHANNEL, "SUB channel name \"#ephemeral\" is not valid");
    E("DPUB t soon\n", INVALID, "DPUB could not parse timeout soon");
    E("DPUB t -5\n", INVALID, "DPUB could not parse timeout -5");
    E("DPUB t 3600001\n", INVALID, "DPUB timeout 3600001 out of range 0-3600000");
    E("RDY many\n", INVALID, "RDY could not parse count many");
    E("RDY 2501\n", INVALID, "RDY count 2501 out of range 0-2500");
    E("FIN abc\n", INVALID, "invalid message ID");
    E("REQ 0001000000000042\n", INVALID, "REQ insufficient number of params");
    E("REQ 0001000000000042 -1\n", INVALID, "REQ could not parse timeout -1");
    E("TOUCH\n", INVALID, "TOUCH insufficient number of params");

    n = build(buf, "PUB t\n", "", 0); /* length prefix 0, no body */
    expect_err(buf, n, TN_NSQ_E_BAD_MESSAGE, "PUB invalid message body size 0");
    n = build(buf, "PUB t\n", NULL, 1025);
    expect_err(buf, n, TN_NSQ_E_BAD_MESSAGE, "PUB message too big 1025 > 1024");
    n = build(buf, "DPUB t 10\n", NULL, -3);
    expect_err(buf, n, TN_NSQ_E_BAD_MESSAGE, "DPUB invalid message body size -3");
    n = build(buf, "MPUB t\n", NULL, 4097);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "MPUB body too big 4097 > 4096");
    n = build(buf, "IDENTIFY\n", NULL, -1);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "IDENTIFY invalid body size -1");
    n = build(buf, "AUTH\n", NULL, 5000);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "AUTH body too big 5000 > 4096");
    n = build(buf, "AUTH x\n", "s", 1); /* nsqd: no parameters, checked before the body */
    expect_err(buf, n, TN_NSQ_E_INVALID, "AUTH invalid number of parameters");

    /* MPUB bodies. */
    int32_t blen = mpub_body(body, 2);
    put32(body, 0);
    n = build(buf, "MPUB t\n", body, blen);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "MPUB invalid message count 0");
    blen = mpub_body(body, 101);
    n = build(buf, "MPUB t\n", body, blen);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "MPUB invalid message count 101");
    blen = mpub_body(body, 2);
    put32(body + 4, 0);
    n = build(buf, "MPUB t\n", body, blen);
    expect_err(buf, n, TN_NSQ_E_BAD_MESSAGE, "MPUB invalid message(0) body size 0");
    blen = mpub_body(body, 2);
    put32(body + 4, 2000);
    n = build(buf, "MPUB t\n", body, blen);
    expect_err(buf, n, TN_NSQ_E_BAD_MESSAGE, "MPUB message too big 2000 > 1024");
    blen = mpub_body(body, 2);
    put32(body + 4, 900);
    n = build(buf, "MPUB t\n", body, blen);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "MPUB failed to read message body");
    /* nsqd would read surplus bytes as the next command; tern refuses. */
    blen = mpub_body(body, 2);
    memcpy(body + blen, "NOP\n", 4);
    n = build(buf, "MPUB t\n", body, blen + 4);
    expect_err(buf, n, TN_NSQ_E_BAD_BODY, "MPUB body has 4 bytes after its 2 messages");

    /* A line that never ends is refused once it passes the limit. */
    memset(buf, 'A', 1100);
    expect_err(buf, 1100, TN_NSQ_E_INVALID, "command line longer than 1024 bytes");
#undef E
}

static void test_fatal_rules(void **state)
{
    (void)state;
    assert_true(tn_nsq_err_fatal(TN_NSQ_E_INVALID));
    assert_true(tn_nsq_err_fatal(TN_NSQ_E_BAD_TOPIC));
    assert_true(tn_nsq_err_fatal(TN_NSQ_E_BAD_MESSAGE));
    assert_true(tn_nsq_err_fatal(TN_NSQ_E_PUB_FAILED));
    assert_false(tn_nsq_err_fatal(TN_NSQ_E_FIN_FAILED));
    assert_false(tn_nsq_err_fatal(TN_NSQ_E_REQ_FAILED));
    assert_false(tn_nsq_err_fatal(TN_NSQ_E_TOUCH_FAILED));
    assert_false(tn_nsq_err_fatal(TN_NSQ_E_THROTTLED));
    assert_string_equal(tn_nsq_err_code(TN_NSQ_E_AUTH_FIRST), "E_AUTH_FIRST");
    assert_string_equal(tn_nsq_op_name(TN_NSQ_TOUCH), "TOUCH");
}

static void test_names_and_ids(void **state)
{
    (void)state;
    assert_true(tn_nsq_valid_topic("a.b_c-D9", 8));
    assert_true(tn_nsq_valid_topic("t#ephemeral", 11));
    assert_false(tn_nsq_valid_topic("", 0));
    assert_false(tn_nsq_valid_topic(".", 1));
    assert_false(tn_nsq_valid_topic("a b", 3));
    assert_true(tn_nsq_valid_channel("c#ephemeral", 11));
    assert_true(tn_nsq_is_ephemeral("c#ephemeral", 11));
    assert_false(tn_nsq_is_ephemeral("c", 1));
    assert_false(tn_nsq_valid_channel("c#other", 7));
    assert_false(tn_nsq_valid_topic("#ephemeral", 10));
    /* nsqd's 64 characters, the #ephemeral suffix counted. */
    char name[80];
    memset(name, 'n', sizeof(name));
    assert_true(tn_nsq_valid_topic(name, 64));
    assert_false(tn_nsq_valid_topic(name, 65));
    assert_true(tn_nsq_valid_channel(name, 64));
    assert_false(tn_nsq_valid_channel(name, 65));
    memcpy(name + 54, "#ephemeral", 10);
    assert_true(tn_nsq_valid_topic(name, 64));
    memcpy(name + 55, "#ephemeral", 10);
    assert_false(tn_nsq_valid_topic(name, 65));
    assert_false(tn_nsq_valid_channel(name, 65));
    /* The error frame without text is the code alone (E_BAD_PROTOCOL). */
    tn_buf_t out;
    tn_buf_init(&out);
    assert_int_equal(tn_nsq_write_error(&out, TN_NSQ_E_BAD_PROTOCOL, ""), 0);
    assert_int_equal(tn_buf_size(&out), 8 + 14);
    assert_memory_equal(tn_buf_data(&out),
                        "\0\0\0\x12\0\0\0\x01"
                        "E_BAD_PROTOCOL",
                        22);
    tn_buf_fini(&out);

    char id[TN_NSQ_ID_LEN];
    tn_nsq_id_encode(3, 0x123456789aULL, id);
    assert_memory_equal(id, "000300123456789a", 16);
    uint32_t p;
    uint64_t off;
    assert_int_equal(tn_nsq_id_decode(id, 16, &p, &off), 0);
    assert_int_equal(p, 3);
    assert_int_equal(off, 0x123456789aULL);
    assert_int_equal(tn_nsq_id_decode("000300123456789A", 16, &p, &off), 0);
    assert_int_equal(tn_nsq_id_decode("00030012345678zz", 16, &p, &off), UV_EINVAL);
    assert_int_equal(tn_nsq_id_decode("0003", 4, &p, &off), UV_EINVAL);
    tn_nsq_id_encode(TN_NSQ_MAX_PARTITION, TN_NSQ_MAX_OFFSET, id);
    assert_memory_equal(id, "ffffffffffffffff", 16);
}

static void test_frames(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_nsq_write_response(&b, "OK", 2), 0);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.base, "\0\0\0\x06\0\0\0\0OK", 10);
    tn_buf_reset(&b);
    assert_int_equal(tn_nsq_write_error(&b, TN_NSQ_E_BAD_TOPIC, "line\r\nbreak"), 0);
    /* size = 4 + strlen("E_BAD_TOPIC line  break") = 27; CR and LF become spaces */
    assert_memory_equal(b.base,
                        "\0\0\0\x1b\0\0\0\x01"
                        "E_BAD_TOPIC line  break",
                        8 + 23);
    tn_buf_fini(&b);

    unsigned char hdr[TN_NSQ_FRAME_HDR + TN_NSQ_MSG_HDR];
    tn_nsq_message_header(hdr, 0x0102030405060708LL, 3, "0000000000000007", 5);
    assert_memory_equal(hdr, "\0\0\0\x23\0\0\0\x02", 8); /* 4 + 26 + 5 = 35 */
    assert_memory_equal(hdr + 8, "\x01\x02\x03\x04\x05\x06\x07\x08\0\x03", 10);
    assert_memory_equal(hdr + 18, "0000000000000007", 16);
}

/* The error frame a failed PUB/MPUB/DPUB gets: a replicated partition's
 * refusals read "E_PUB_FAILED <words>" for all three commands and keep the
 * connection; other failures keep nsqd's codes and fatality. */
static void test_pub_errors(void **state)
{
    (void)state;
    char text[160];
    bool fatal = true;
    const tn_nsq_op_t ops[] = {TN_NSQ_PUB, TN_NSQ_MPUB, TN_NSQ_DPUB};
    for (size_t i = 0; i < TN_ARRAY_SIZE(ops); i++) {
        fatal = true;
        assert_int_equal(tn_nsq_pub_error(ops[i], TN_EFEWREPLICAS, text, sizeof(text), &fatal),
                         TN_NSQ_E_PUB_FAILED);
        assert_string_equal(text, "not enough in-sync replicas");
        assert_false(fatal);
        fatal = true;
        assert_int_equal(tn_nsq_pub_error(ops[i], TN_EFENCED, text, sizeof(text), &fatal),
                         TN_NSQ_E_PUB_FAILED);
        assert_non_null(strstr(text, "leader"));
        assert_false(fatal);
        fatal = true;
        assert_int_equal(tn_nsq_pub_error(ops[i], TN_ENOTSERVING, text, sizeof(text), &fatal),
                         TN_NSQ_E_PUB_FAILED);
        assert_string_equal(text, "partition leader not serving yet");
        assert_false(fatal);
        fatal = true;
        assert_int_equal(tn_nsq_pub_error(ops[i], TN_EDISKHIGH, text, sizeof(text), &fatal),
                         TN_NSQ_E_THROTTLED);
        assert_false(fatal);
    }
    /* The frame on the wire, as a client matches it. */
    tn_buf_t b;
    tn_buf_init(&b);
    tn_nsq_err_t e = tn_nsq_pub_error(TN_NSQ_MPUB, TN_EFEWREPLICAS, text, sizeof(text), &fatal);
    assert_int_equal(tn_nsq_write_error(&b, e, text), 0);
    const char want[] = "E_PUB_FAILED not enough in-sync replicas";
    assert_int_equal(b.len, 8 + strlen(want));
    assert_memory_equal(b.base + 8, want, strlen(want));
    tn_buf_fini(&b);
    /* Others: the command's own code, fatal as nsqd has it. */
    assert_int_equal(tn_nsq_pub_error(TN_NSQ_MPUB, UV_EIO, text, sizeof(text), &fatal),
                     TN_NSQ_E_MPUB_FAILED);
    assert_true(fatal);
    assert_int_equal(strncmp(text, "MPUB failed: ", 13), 0);
    assert_int_equal(tn_nsq_pub_error(TN_NSQ_DPUB, TN_EREMOTE, text, sizeof(text), &fatal),
                     TN_NSQ_E_DPUB_FAILED);
    assert_true(fatal);
    assert_int_equal(tn_nsq_pub_error(TN_NSQ_PUB, TN_ECORRUPT, text, sizeof(text), &fatal),
                     TN_NSQ_E_PUB_FAILED);
    assert_true(fatal);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pub_errors),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_pipelined_and_need),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fatal_rules),
        cmocka_unit_test(test_names_and_ids),
        cmocka_unit_test(test_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
