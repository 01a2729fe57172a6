/* The NSQ V2 wire codec. See codec.h. */
#include "core/platform.h"

#include "proto/nsq/codec.h"

#include "cluster/replerr.h"
#include "core/err.h"
#include "core/name.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define MAX_PARAMS 8

const char *tn_nsq_err_code(tn_nsq_err_t err)
{
    switch (err) {
#define TN_NSQ_ERR_CODE(name, fatal)                                                               \
    case TN_NSQ_E_##name:                                                                          \
        return "E_" #name;
        TN_NSQ_ERR_MAP(TN_NSQ_ERR_CODE)
#undef TN_NSQ_ERR_CODE
    case TN_NSQ_E_NONE:
        break;
    }
    return "";
}

bool tn_nsq_err_fatal(tn_nsq_err_t err)
{
    static const bool fatal[] = {false, /* TN_NSQ_E_NONE */
#define TN_NSQ_ERR_FATAL(name, is_fatal) is_fatal,
                                 TN_NSQ_ERR_MAP(TN_NSQ_ERR_FATAL)
#undef TN_NSQ_ERR_FATAL
    };
    return (size_t)err < TN_ARRAY_SIZE(fatal) && fatal[err];
}

static int fail(tn_nsq_cmd_t *cmd, tn_nsq_err_t err, const char *fmt, ...) TN_PRINTF(3, 4);
static int fail(tn_nsq_cmd_t *cmd, tn_nsq_err_t err, const char *fmt, ...)
{
    cmd->err = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd->errmsg, sizeof(cmd->errmsg), fmt, ap);
    va_end(ap);
    return TN_EPROTO;
}

/* Length of the valid UTF-8 sequence at s[0..len), or 0 when it is not
 * one (overlong forms and surrogates are not). */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
    unsigned char b = s[0];
    size_t n = b >= 0xc2 && b <= 0xdf   ? 2
               : b >= 0xe0 && b <= 0xef ? 3
               : b >= 0xf0 && b <= 0xf4 ? 4
                                        : 0;
    if (n == 0 || n > len)
        return 0;
    unsigned char lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* A name quoted as Go's %q (strconv.Quote) writes it in nsqd's error
 * texts: \" and \\ escaped, \a\b\f\n\r\t\v, other control bytes and
 * bytes that are not UTF-8 as \xNN; valid UTF-8 past ASCII is kept (Go
 * also escapes the few unprintable runes there, which names never hold
 * in practice). out is NUL-terminated, cut short if it fills. */
static const char *go_quote(char *out, size_t cap, const char *name, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)name;
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < len && o + 6 < cap;) {
        unsigned char ch = s[i];
        const char *esc = ch == '"'    ? "\\\""
                          : ch == '\\' ? "\\\\"
                          : ch == '\a' ? "\\a"
                          : ch == '\b' ? "\\b"
                          : ch == '\f' ? "\\f"
                          : ch == '\n' ? "\\n"
                          : ch == '\r' ? "\\r"
                          : ch == '\t' ? "\\t"
                          : ch == '\v' ? "\\v"
                                       : NULL;
        size_t n = ch >= 0x80 ? utf8_seq(s + i, len - i) : 1;
        if (esc != NULL) {
            out[o++] = esc[0];
            out[o++] = esc[1];
        } else if (ch < 0x20 || ch == 0x7f || n == 0) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
            n = 1;
        } else {
            if (o + n + 2 > cap)
                break;
            memcpy(out + o, s + i, n);
            o += n;
        }
        i += n;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

bool tn_nsq_is_ephemeral(const char *s, size_t len)
{
    return tn_name_ephemeral(s, len);
}

/* nsqd's rule (internal/protocol/names.go): 1 to 64 characters in all,
 * the "#ephemeral" suffix included. */
bool tn_nsq_valid_topic(const char *s, size_t len)
{
    return len <= TN_NSQ_NAME_MAX && tn_name_valid_any(s, len);
}

bool tn_nsq_valid_channel(const char *s, size_t len)
{
    return len <= TN_NSQ_NAME_MAX && tn_name_valid_any(s, len);
}

/* nsqd's ByteToBase10: decimal digits only, no sign; an empty one is 0
 * (so "RDY \n" is RDY 0 and "REQ <id> \n" a REQ without delay, as in
 * nsqd). */
static bool parse_u63(const char *s, size_t len, int64_t *out)
{
    if (len > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int32_t get_i32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (int32_t)((uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3]);
}

static const struct {
    const char *name;
    tn_nsq_op_t op;
    int min_params; /* including the command name */
    bool body;
} commands[] = {
    {"IDENTIFY", TN_NSQ_IDENTIFY, 1, true}, {"AUTH", TN_NSQ_AUTH, 1, true},
    {"SUB", TN_NSQ_SUB, 3, false},          {"PUB", TN_NSQ_PUB, 2, true},
    {"MPUB", TN_NSQ_MPUB, 2, true},         {"DPUB", TN_NSQ_DPUB, 3, true},
    {"RDY", TN_NSQ_RDY, 1, false},          {"FIN", TN_NSQ_FIN, 2, false},
    {"REQ", TN_NSQ_REQ, 3, false},          {"TOUCH", TN_NSQ_TOUCH, 2, false},
    {"NOP", TN_NSQ_NOP, 1, false},          {"CLS", TN_NSQ_CLS, 1, false},
};

const char *tn_nsq_op_name(tn_nsq_op_t op)
{
    /* Asked for every command (server.c refusal): the table is in the
     * enum's order, so op's entry is at op - 1. */
    size_t at = (size_t)op - 1;
    if (op >= 1 && at < TN_ARRAY_SIZE(commands) && commands[at].op == op)
        return commands[at].name;
    for (size_t i = 0; i < TN_ARRAY_SIZE(commands); i++) {
        if (commands[i].op == op)
            return commands[i].name;
    }
    return "";
}

static int check_mpub(tn_nsq_cmd_t *cmd, const tn_nsq_limits_t *lim)
{
    const char *p = cmd->body.base;
    size_t left = cmd->body.len;
    if (left < 4)
        return fail(cmd, TN_NSQ_E_BAD_BODY, "MPUB failed to read message count");
    int32_t count = get_i32(p);
    p += 4;
    left -= 4;
    if (count <= 0 || (uint32_t)count > lim->max_mpub_count)
        return fail(cmd, TN_NSQ_E_BAD_BODY, "MPUB invalid message count %d", count);
    for (int32_t i = 0; i < count; i++) {
        if (left < 4)
            return fail(cmd, TN_NSQ_E_BAD_BODY, "MPUB failed to read message body size");
        int32_t size = get_i32(p);
        p += 4;
        left -= 4;
        if (size <= 0)
            return fail(cmd, TN_NSQ_E_BAD_MESSAGE, "MPUB invalid message(%d) body size %d", i,
                        size);
        if ((uint64_t)size > lim->max_msg_size)
            return fail(cmd, TN_NSQ_E_BAD_MESSAGE, "MPUB message too big %d > %llu", size,
                        (unsigned long long)lim->max_msg_size);
        if ((size_t)size > left)
            return fail(cmd, TN_NSQ_E_BAD_BODY, "MPUB failed to read message body");
        p += size;
        left -= (size_t)size;
    }
    if (left != 0)
        return fail(cmd, TN_NSQ_E_BAD_BODY, "MPUB body has %zu bytes after its %d messages", left,
                    count);
    cmd->nmsgs = (uint32_t)count;
    return 0;
}

/* Check a body's declared length; returns 0 or TN_EPROTO. */
static int check_body_len(tn_nsq_cmd_t *cmd, const char *name, int32_t blen,
                          const tn_nsq_limits_t *lim)
{
    bool is_msg = cmd->op == TN_NSQ_PUB || cmd->op == TN_NSQ_DPUB;
    if (is_msg) {
        if (blen <= 0)
            return fail(cmd, TN_NSQ_E_BAD_MESSAGE, "%s invalid message body size %d", name, blen);
        if ((uint64_t)blen > lim->max_msg_size)
            return fail(cmd, TN_NSQ_E_BAD_MESSAGE, "%s message too big %d > %llu", name, blen,
                        (unsigned long long)lim->max_msg_size);
        return 0;
    }
    if (blen <= 0)
        return fail(cmd, TN_NSQ_E_BAD_BODY, "%s invalid body size %d", name, blen);
    if ((uint64_t)blen > lim->max_body_size)
        return fail(cmd, TN_NSQ_E_BAD_BODY, "%s body too big %d > %llu", name, blen,
                    (unsigned long long)lim->max_body_size);
    return 0;
}

int tn_nsq_parse(const char *buf, size_t len, const tn_nsq_limits_t *lim, tn_nsq_cmd_t *cmd,
                 size_t *consumed)
{
    /* Every field but errmsg (192 bytes, most of the struct): fail()
     * writes it, and only a TN_EPROTO answer reads it. */
    memset(cmd, 0, offsetof(tn_nsq_cmd_t, errmsg));
    cmd->errmsg[0] = '\0';
    size_t scan = TN_MIN(len, (size_t)lim->max_line + 2); /* room for "\r\n" */
    const char *nl = memchr(buf, '\n', scan);
    if (nl == NULL) {
        if (len >= (size_t)lim->max_line + 2)
            return fail(cmd, TN_NSQ_E_INVALID, "command line longer than %u bytes", lim->max_line);
        return TN_ESHORT;
    }
    size_t line_end = (size_t)(nl - buf) + 1;
    size_t line_len = line_end - 1;
    if (line_len > 0 && buf[line_len - 1] == '\r')
        line_len--;
    if (line_len > lim->max_line)
        return fail(cmd, TN_NSQ_E_INVALID, "command line longer than %u bytes", lim->max_line);

    char q[sizeof(cmd->errmsg)]; /* a quoted name for an error text */
    tn_iov_t params[MAX_PARAMS] = {{0}};
    int np = 0;
    size_t start = 0;
    for (size_t i = 0; i <= line_len && np < MAX_PARAMS; i++) {
        if (i == line_len || buf[i] == ' ') {
            params[np++] = tn_iov(buf + start, i - start);
            start = i + 1;
        }
    }
    int k = -1;
    for (size_t i = 0; i < TN_ARRAY_SIZE(commands); i++) {
        if (strlen(commands[i].name) == params[0].len &&
            memcmp(commands[i].name, params[0].base, params[0].len) == 0) {
            k = (int)i;
            break;
        }
    }
    if (k < 0)
        return fail(cmd, TN_NSQ_E_INVALID, "invalid command %.*s",
                    (int)TN_MIN(params[0].len, (size_t)64), params[0].base);
    const char *name = commands[k].name;
    cmd->op = commands[k].op;
    if (np < commands[k].min_params) /* nsqd's words: "params" for FIN, REQ and TOUCH */
        return fail(cmd, TN_NSQ_E_INVALID, "%s insufficient number of %s", name,
                    cmd->op == TN_NSQ_FIN || cmd->op == TN_NSQ_REQ || cmd->op == TN_NSQ_TOUCH
                        ? "params"
                        : "parameters");

    switch (cmd->op) {
    case TN_NSQ_AUTH:
        if (np != 1) /* nsqd's check, before the body */
            return fail(cmd, TN_NSQ_E_INVALID, "AUTH invalid number of parameters");
        break;
    case TN_NSQ_SUB:
        cmd->topic = params[1];
        cmd->channel = params[2];
        if (!tn_nsq_valid_topic(cmd->topic.base, cmd->topic.len))
            return fail(cmd, TN_NSQ_E_BAD_TOPIC, "SUB topic name %s is not valid",
                        go_quote(q, sizeof(q), cmd->topic.base, cmd->topic.len));
        if (!tn_nsq_valid_channel(cmd->channel.base, cmd->channel.len))
            return fail(cmd, TN_NSQ_E_BAD_CHANNEL, "SUB channel name %s is not valid",
                        go_quote(q, sizeof(q), cmd->channel.base, cmd->channel.len));
        if (tn_name_link_channel(cmd->channel.base, cmd->channel.len))
            return fail(cmd, TN_NSQ_E_BAD_CHANNEL, "SUB channel name %.*s " TN_NAME_LINK_REFUSED,
                        (int)cmd->channel.len, cmd->channel.base);
        if (tn_name_feed_channel(cmd->channel.base, cmd->channel.len))
            return fail(cmd, TN_NSQ_E_BAD_CHANNEL, "SUB channel name %.*s " TN_NAME_FEED_REFUSED,
                        (int)cmd->channel.len, cmd->channel.base);
        break;
    case TN_NSQ_PUB:
    case TN_NSQ_MPUB:
    case TN_NSQ_DPUB:
        cmd->topic = params[1];
        if (!tn_nsq_valid_topic(cmd->topic.base, cmd->topic.len))
            /* nsqd's MPUB text repeats the code: "E_BAD_TOPIC E_BAD_TOPIC MPUB ..." */
            return fail(cmd, TN_NSQ_E_BAD_TOPIC, "%s%s topic name %s is not valid",
                        cmd->op == TN_NSQ_MPUB ? "E_BAD_TOPIC " : "", name,
                        go_quote(q, sizeof(q), cmd->topic.base, cmd->topic.len));
        if (cmd->op == TN_NSQ_DPUB) {
            if (!parse_u63(params[2].base, params[2].len, &cmd->num))
                return fail(cmd, TN_NSQ_E_INVALID, "DPUB could not parse timeout %.*s",
                            (int)TN_MIN(params[2].len, (size_t)64), params[2].base);
            if (cmd->num > lim->max_defer_ms)
                return fail(cmd, TN_NSQ_E_INVALID, "DPUB timeout %lld out of range 0-%lld",
                            (long long)cmd->num, (long long)lim->max_defer_ms);
        }
        break;
    case TN_NSQ_RDY:
        cmd->num = 1;
        if (np > 1 && !parse_u63(params[1].base, params[1].len, &cmd->num))
            return fail(cmd, TN_NSQ_E_INVALID, "RDY could not parse count %.*s",
                        (int)TN_MIN(params[1].len, (size_t)64), params[1].base);
        if (cmd->num > lim->max_rdy_count)
            return fail(cmd, TN_NSQ_E_INVALID, "RDY count %lld out of range 0-%lld",
                        (long long)cmd->num, (long long)lim->max_rdy_count);
        break;
    case TN_NSQ_FIN:
    case TN_NSQ_REQ:
    case TN_NSQ_TOUCH:
        cmd->id = params[1];
        if (cmd->id.len != TN_NSQ_ID_LEN)
            return fail(cmd, TN_NSQ_E_INVALID, "invalid message ID");
        if (cmd->op == TN_NSQ_REQ && !parse_u63(params[2].base, params[2].len, &cmd->num))
            return fail(cmd, TN_NSQ_E_INVALID, "REQ could not parse timeout %.*s",
                        (int)TN_MIN(params[2].len, (size_t)64), params[2].base);
        break;
    default:
        break;
    }

    if (!commands[k].body) {
        *consumed = line_end;
        return 0;
    }
    if (len - line_end < 4)
        return TN_ESHORT;
    int32_t blen = get_i32(buf + line_end);
    int rc = check_body_len(cmd, name, blen, lim);
    if (rc != 0)
        return rc;
    uint64_t total = (uint64_t)line_end + 4 + (uint64_t)blen;
    if (len < total) {
        cmd->need = total;
        return TN_ESHORT;
    }
    cmd->body = tn_iov(buf + line_end + 4, (size_t)blen);
    if (cmd->op == TN_NSQ_MPUB && (rc = check_mpub(cmd, lim)) != 0)
        return rc;
    *consumed = (size_t)total;
    return 0;
}

bool tn_nsq_mpub_next(const tn_nsq_cmd_t *cmd, size_t *pos, tn_iov_t *msg)
{
    size_t p = *pos == 0 ? 4 : *pos;
    if (p + 4 > cmd->body.len)
        return false;
    uint32_t size = (uint32_t)get_i32(cmd->body.base + p);
    *msg = tn_iov(cmd->body.base + p + 4, size);
    *pos = p + 4 + size;
    return true;
}

void tn_nsq_id_encode(uint32_t partition, uint64_t offset, char out[TN_NSQ_ID_LEN])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t v =
        ((uint64_t)(partition & TN_NSQ_MAX_PARTITION) << 48) | (offset & TN_NSQ_MAX_OFFSET);
    for (int i = TN_NSQ_ID_LEN - 1; i >= 0; i--) {
        out[i] = hex[v & 0xf];
        v >>= 4;
    }
}

int tn_nsq_id_decode(const char *id, size_t len, uint32_t *partition, uint64_t *offset)
{
    if (len != TN_NSQ_ID_LEN)
        return UV_EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return UV_EINVAL;
        v = v << 4 | d;
    }
    *partition = (uint32_t)(v >> 48);
    *offset = v & TN_NSQ_MAX_OFFSET;
    return 0;
}

static int frame(tn_buf_t *out, int32_t type, const char *a, size_t alen, const char *b,
                 size_t blen)
{
    size_t data = alen + blen;
    int rc = tn_buf_reserve(out, TN_NSQ_FRAME_HDR + data);
    if (rc != 0)
        return rc;
    unsigned char *p = (unsigned char *)out->base + out->len;
    uint32_t size = (uint32_t)(4 + data);
    p[0] = (unsigned char)(size >> 24);
    p[1] = (unsigned char)(size >> 16);
    p[2] = (unsigned char)(size >> 8);
    p[3] = (unsigned char)size;
    p[4] = p[5] = p[6] = 0;
    p[7] = (unsigned char)type;
    memcpy(p + TN_NSQ_FRAME_HDR, a, alen);
    if (blen > 0)
        memcpy(p + TN_NSQ_FRAME_HDR + alen, b, blen);
    out->len += TN_NSQ_FRAME_HDR + data;
    return 0;
}

int tn_nsq_write_response(tn_buf_t *out, const char *data, size_t len)
{
    return frame(out, TN_NSQ_FRAME_RESPONSE, data, len, NULL, 0);
}

tn_nsq_err_t tn_nsq_pub_error(tn_nsq_op_t op, int status, char *text, size_t len, bool *fatal)
{
    const char *name = op == TN_NSQ_MPUB ? "MPUB" : op == TN_NSQ_DPUB ? "DPUB" : "PUB";
    tn_nsq_err_t e = op == TN_NSQ_MPUB   ? TN_NSQ_E_MPUB_FAILED
                     : op == TN_NSQ_DPUB ? TN_NSQ_E_DPUB_FAILED
                                         : TN_NSQ_E_PUB_FAILED;
    const char *why = tn_replerr_text(status);
    if (status == TN_EDISKHIGH) {
        e = TN_NSQ_E_THROTTLED;
        snprintf(text, len, "disk usage above the high watermark");
    } else if (why != NULL) {
        e = TN_NSQ_E_PUB_FAILED;
        snprintf(text, len, "%s", why);
        *fatal = false;
        return e;
    } else if (status == TN_EREMOTE) {
        /* Every partition of the topic is on other nodes and this node
         * has no ingress log to take it. */
        snprintf(text, len, "the partitions of this topic live on other nodes");
    } else {
        snprintf(text, len, "%s failed: %s", name, tn_strerror(status));
    }
    *fatal = tn_nsq_err_fatal(e);
    return e;
}

int tn_nsq_write_error(tn_buf_t *out, tn_nsq_err_t err, const char *text)
{
    char code[40];
    /* No text: the code alone, as nsqd sends E_BAD_PROTOCOL. */
    int n = snprintf(code, sizeof(code), text[0] != '\0' ? "%s " : "%s", tn_nsq_err_code(err));
    size_t tlen = strlen(text);
    size_t at = out->len + TN_NSQ_FRAME_HDR + (size_t)n;
    int rc = frame(out, TN_NSQ_FRAME_ERROR, code, (size_t)n, text, tlen);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < tlen; i++) {
        if (out->base[at + i] == '\r' || out->base[at + i] == '\n')
            out->base[at + i] = ' ';
    }
    return 0;
}

void tn_nsq_message_header(unsigned char out[TN_NSQ_FRAME_HDR + TN_NSQ_MSG_HDR], int64_t ts_ns,
                           uint16_t attempts, const char id[TN_NSQ_ID_LEN], uint32_t body_len)
{
    uint32_t size = 4 + TN_NSQ_MSG_HDR + body_len;
    for (int i = 0; i < 4; i++)
        out[i] = (unsigned char)(size >> (24 - 8 * i));
    out[4] = out[5] = out[6] = 0;
    out[7] = TN_NSQ_FRAME_MESSAGE;
    uint64_t ts = (uint64_t)ts_ns;
    for (int i = 0; i < 8; i++)
        out[8 + i] = (unsigned char)(ts >> (56 - 8 * i));
    out[16] = (unsigned char)(attempts >> 8);
    out[17] = (unsigned char)attempts;
    memcpy(out + 18, id, TN_NSQ_ID_LEN);
}
