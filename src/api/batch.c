/* Batch request bodies of the native API. See batch.h. */
#include "core/platform.h"

#include "api/batch.h"

#include "core/alloc.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

enum { F_NONE = -1, F_PAYLOAD, F_ENCODING, F_KEY, F_KEY_ENCODING, F_PARTITION, F_COUNT };
static const char *const field_names[F_COUNT] = {"payload", "payload_encoding", "key",
                                                 "key_encoding", "partition"};

typedef struct {
    tn_batch_t *b;
    uint32_t max_msgs;
    uint64_t max_msg_size;
    size_t max_key;
    size_t depth; /* 1: in the array, 2: in a message, more: in a payload */
    int field;    /* the key being read at depth 2 */
    bool seen[F_COUNT];
    bool base64;
    bool key_base64; /* key_encoding "base64": the key decoded when the message ends */
    bool string_payload;
    tn_buf_t raw;                      /* a non-string payload being written out as JSON */
    bool comma[TN_JSON_MAX_DEPTH + 2]; /* raw: a value was written at this depth */
    bool after_key;                    /* raw: a key was just written */
    char err[160];
    bool oom;
} ctx_t;

static int fail(ctx_t *x, const char *fmt, ...) TN_PRINTF(2, 3);
static int fail(ctx_t *x, const char *fmt, ...)
{
    if (x->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err, sizeof(x->err), fmt, ap);
        va_end(ap);
    }
    return 0;
}

static uint32_t index_of(const ctx_t *x)
{
    return x->b->n - 1;
}

static tn_batch_msg_t *cur(ctx_t *x)
{
    return &x->b->msgs[x->b->n - 1];
}

/* --- a non-string payload, written out as compact JSON --------------------- */

static int raw_put(ctx_t *x, const void *s, size_t n)
{
    if (tn_buf_append(&x->raw, s, n) != 0) {
        x->oom = true;
        return 0;
    }
    if (tn_buf_size(&x->raw) > x->max_msg_size)
        return fail(x, "message %" PRIu32 ": payload larger than %" PRIu64 " bytes", index_of(x),
                    x->max_msg_size);
    return 1;
}

/* Before a value inside the payload: the comma that separates it. */
static int raw_sep(ctx_t *x)
{
    size_t d = x->depth;
    if (x->after_key) {
        x->after_key = false;
        return 1;
    }
    if (d > 2 && x->comma[d] && !raw_put(x, ",", 1))
        return 0;
    x->comma[d] = true;
    return 1;
}

static int raw_string(ctx_t *x, const unsigned char *s, size_t n)
{
    if (!raw_put(x, "\"", 1))
        return 0;
    if (tn_buf_json_escape_n(&x->raw, (const char *)s, n) != 0) {
        x->oom = true;
        return 0;
    }
    return raw_put(x, "\"", 1);
}

/* The payload value ended: it becomes the message's payload (a string
 * that may still be base64 gets room for its encoding; the decoded size
 * is checked when the message ends). */
static int payload_done(ctx_t *x, const void *data, size_t len, bool string)
{
    tn_batch_msg_t *m = cur(x);
    uint64_t max = string ? x->max_msg_size / 3 * 4 + 4 : x->max_msg_size;
    x->string_payload = string;
    if (len == 0)
        return fail(x, "message %" PRIu32 ": empty payload", index_of(x));
    if (len > max)
        return fail(x, "message %" PRIu32 ": payload larger than %" PRIu64 " bytes", index_of(x),
                    x->max_msg_size);
    m->payload_off = x->b->data.len;
    m->payload_len = len;
    if (tn_buf_append(&x->b->data, data, len) != 0) {
        x->oom = true;
        return 0;
    }
    return 1;
}

/* --- events ------------------------------------------------------------------ */

/* A scalar: inside a payload, written out; at depth 2 the current field's
 * value; anywhere else a shape error. */
static int scalar(ctx_t *x, const char *text, size_t tlen, const unsigned char *s, size_t slen,
                  bool is_string, bool is_int, long long ival)
{
    if (x->depth > 2)
        return raw_sep(x) && (is_string ? raw_string(x, s, slen) : raw_put(x, text, tlen));
    if (x->depth != 2)
        return fail(x, "message %" PRIu32 " must be an object", x->b->n);
    int f = x->field;
    x->field = F_NONE;
    tn_batch_msg_t *m = cur(x);
    switch (f) {
    case F_PAYLOAD:
        if (is_string)
            return payload_done(x, s, slen, true);
        return payload_done(x, text, tlen, false);
    case F_ENCODING:
    case F_KEY_ENCODING:
        if (!is_string || slen != 6 || memcmp(s, "base64", 6) != 0)
            return fail(x, "message %" PRIu32 ": %s must be \"base64\"", index_of(x),
                        field_names[f]);
        if (f == F_ENCODING)
            x->base64 = true;
        else
            x->key_base64 = true;
        return 1;
    case F_KEY:
        if (!is_string)
            return fail(x, "message %" PRIu32 ": key must be a string", index_of(x));
        /* Room for a base64 key here; its length is checked once decoded
         * (when the message ends). */
        if (slen > x->max_key / 3 * 4 + 4)
            return fail(x, "message %" PRIu32 ": key longer than %zu bytes", index_of(x),
                        x->max_key);
        m->key_off = x->b->data.len;
        m->key_len = slen;
        if (tn_buf_append(&x->b->data, s, slen) != 0) {
            x->oom = true;
            return 0;
        }
        return 1;
    case F_PARTITION:
        if (!is_int || ival < 0)
            return fail(x, "message %" PRIu32 ": partition must be an integer >= 0", index_of(x));
        m->partition = ival;
        return 1;
    default:
        return fail(x, "message %" PRIu32 " is malformed", index_of(x));
    }
}

static int on_null(void *c)
{
    return scalar(c, "null", 4, NULL, 0, false, false, 0);
}

static int on_bool(void *c, int b)
{
    return scalar(c, b ? "true" : "false", b ? 4 : 5, NULL, 0, false, false, 0);
}

static int on_number(void *c, const char *s, size_t n)
{
    ctx_t *x = c;
    long long v = 0;
    bool is_int = n > 0 && n < 19;
    for (size_t i = 0; is_int && i < n; i++) {
        is_int = s[i] >= '0' && s[i] <= '9';
        v = v * 10 + (s[i] - '0');
    }
    if (!is_int && x->depth == 2 && x->field == F_PARTITION)
        return fail(x, "message %" PRIu32 ": partition must be an integer >= 0", index_of(x));
    return scalar(c, s, n, NULL, 0, false, is_int, v);
}

static int on_string(void *c, const unsigned char *s, size_t n)
{
    return scalar(c, NULL, 0, s, n, true, false, 0);
}

static int open_value(ctx_t *x, char brace)
{
    if (x->depth == 0) {
        if (brace != '[')
            return fail(x, "the body must be a JSON array of messages");
        x->depth = 1;
        return 1;
    }
    if (x->depth == 1) {
        if (brace != '{')
            return fail(x, "message %" PRIu32 " must be an object", x->b->n);
        if (x->b->n == x->max_msgs)
            return fail(x, "a batch holds at most %" PRIu32 " messages", x->max_msgs);
        tn_batch_msg_t *m = &x->b->msgs[x->b->n++];
        memset(m, 0, sizeof(*m));
        m->payload_off = SIZE_MAX;
        m->partition = -1;
        memset(x->seen, 0, sizeof(x->seen));
        x->base64 = false;
        x->key_base64 = false;
        x->field = F_NONE;
        x->depth = 2;
        return 1;
    }
    if (x->depth == 2) {
        if (x->field != F_PAYLOAD)
            return fail(x, "message %" PRIu32 ": only payload may be an object or array",
                        index_of(x));
        tn_buf_reset(&x->raw);
    } else if (!raw_sep(x)) {
        return 0;
    }
    x->depth++;
    x->comma[x->depth] = false;
    return raw_put(x, &brace, 1);
}

static int close_value(ctx_t *x, char brace)
{
    if (x->depth == 1) {
        x->depth = 0;
        return 1;
    }
    if (x->depth == 2) {
        tn_batch_msg_t *m = cur(x);
        if (!x->seen[F_PAYLOAD])
            return fail(x, "message %" PRIu32 ": payload required", index_of(x));
        if (x->base64) {
            if (!x->string_payload)
                return fail(x, "message %" PRIu32 ": a base64 payload must be a string",
                            index_of(x));
            /* Decoded in place: it only shrinks. */
            size_t n = 0;
            char *enc = x->b->data.base + m->payload_off;
            if (tn_base64_decode(enc, m->payload_len, (unsigned char *)enc, m->payload_len, &n) !=
                    0 ||
                n == 0)
                return fail(x, "message %" PRIu32 ": payload is not valid base64", index_of(x));
            m->payload_len = n;
        }
        if (m->payload_len > x->max_msg_size)
            return fail(x, "message %" PRIu32 ": payload larger than %" PRIu64 " bytes",
                        index_of(x), x->max_msg_size);
        if (x->key_base64 && !x->seen[F_KEY])
            return fail(x, "message %" PRIu32 ": key_encoding needs a key", index_of(x));
        if (x->key_base64) {
            /* Decoded in place, as a payload. */
            size_t n = 0;
            char *enc = x->b->data.base + m->key_off;
            if (m->key_len > 0 &&
                tn_base64_decode(enc, m->key_len, (unsigned char *)enc, m->key_len, &n) != 0)
                return fail(x, "message %" PRIu32 ": key is not valid base64", index_of(x));
            m->key_len = n;
        }
        if (m->key_len > x->max_key)
            return fail(x, "message %" PRIu32 ": key longer than %zu bytes", index_of(x),
                        x->max_key);
        x->depth = 1;
        return 1;
    }
    if (!raw_put(x, &brace, 1))
        return 0;
    x->depth--;
    if (x->depth == 2) {
        x->field = F_NONE;
        return payload_done(x, tn_buf_data(&x->raw), tn_buf_size(&x->raw), false);
    }
    return 1;
}

static int on_start_map(void *c)
{
    return open_value(c, '{');
}

static int on_end_map(void *c)
{
    return close_value(c, '}');
}

static int on_start_array(void *c)
{
    return open_value(c, '[');
}

static int on_end_array(void *c)
{
    return close_value(c, ']');
}

static int on_map_key(void *c, const unsigned char *k, size_t n)
{
    ctx_t *x = c;
    if (x->depth > 2)
        return raw_sep(x) && raw_string(x, k, n) && raw_put(x, ":", 1) && (x->after_key = true);
    for (int i = 0; i < F_COUNT; i++) {
        if (strlen(field_names[i]) == n && memcmp(field_names[i], k, n) == 0) {
            if (x->seen[i])
                return fail(x, "message %" PRIu32 ": duplicate field \"%s\"", index_of(x),
                            field_names[i]);
            x->seen[i] = true;
            x->field = i;
            return 1;
        }
    }
    return fail(x, "message %" PRIu32 ": unknown field \"%.*s\"", index_of(x),
                (int)TN_MIN(n, (size_t)64), k);
}

static const yajl_callbacks produce_callbacks = {
    on_null,      on_bool,    NULL,       NULL,           on_number,    on_string,
    on_start_map, on_map_key, on_end_map, on_start_array, on_end_array,
};

int tn_batch_decode(const char *body, size_t len, uint32_t max_msgs, uint64_t max_msg_size,
                    size_t max_key, tn_batch_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    tn_buf_init(&out->data);
    out->msgs = tn_calloc(TN_MAX(max_msgs, 1u), sizeof(*out->msgs));
    ctx_t *x = tn_calloc(1, sizeof(*x));
    if (out->msgs == NULL || x == NULL) {
        tn_free(x);
        tn_batch_fini(out);
        return UV_ENOMEM;
    }
    x->b = out;
    x->max_msgs = max_msgs;
    x->max_msg_size = max_msg_size;
    x->max_key = max_key;
    x->field = F_NONE;
    tn_buf_init(&x->raw);
    bool ok = false;
    int rc = tn_json_events(body, len, &produce_callbacks, x, true, &ok);
    if (rc == 0 && x->oom)
        rc = UV_ENOMEM;
    if (rc == 0 && (x->err[0] != '\0' || !ok)) {
        snprintf(err, errlen, "%s", x->err[0] != '\0' ? x->err : "invalid json: not well-formed");
        rc = UV_EINVAL;
    }
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "a batch needs at least one message");
        rc = UV_EINVAL;
    }
    tn_buf_fini(&x->raw);
    tn_free(x);
    if (rc != 0)
        tn_batch_fini(out);
    return rc;
}

void tn_batch_fini(tn_batch_t *b)
{
    tn_buf_fini(&b->data);
    tn_free(b->msgs);
    b->msgs = NULL;
    b->n = 0;
}

/* --- receipt handles -------------------------------------------------------- */

typedef struct {
    char (*handles)[TN_HANDLE_MAX];
    uint32_t max;
    uint32_t n;
    int depth;
    char err[96];
} hctx_t;

static int h_fail(hctx_t *x, const char *msg)
{
    if (x->err[0] == '\0')
        snprintf(x->err, sizeof(x->err), "%s", msg);
    return 0;
}

static int h_other(void *c)
{
    return h_fail(c, "the body must be a JSON array of receipt handle strings");
}

static int h_bool(void *c, int b)
{
    (void)b;
    return h_other(c);
}

static int h_number(void *c, const char *s, size_t n)
{
    (void)s;
    (void)n;
    return h_other(c);
}

static int h_key(void *c, const unsigned char *k, size_t n)
{
    (void)k;
    (void)n;
    return h_other(c);
}

/* A handle as kept: whole characters up to TN_HANDLE_MAX - 1 bytes (the
 * body is valid UTF-8, so its echo in the answer stays so), a NUL shown
 * as U+FFFD, so that a handle holding one is malformed rather than read
 * as the part before it. */
static void keep_handle(char out[TN_HANDLE_MAX], const unsigned char *s, size_t n)
{
    static const char repl[] = "\xEF\xBF\xBD";
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char ch = s[i];
        size_t len = ch < 0x80 ? 1 : ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
        const char *from = ch == 0 ? repl : (const char *)s + i;
        size_t w = ch == 0 ? sizeof(repl) - 1 : len;
        if (i + len > n || k + w > TN_HANDLE_MAX - 1)
            break;
        memcpy(out + k, from, w);
        k += w;
        i += len;
    }
    out[k] = '\0';
}

static int h_string(void *c, const unsigned char *s, size_t n)
{
    hctx_t *x = c;
    if (x->depth != 1)
        return h_other(c);
    if (x->n == x->max) {
        snprintf(x->err, sizeof(x->err), "a batch holds at most %" PRIu32 " receipt handles",
                 x->max);
        return 0;
    }
    keep_handle(x->handles[x->n++], s, n);
    return 1;
}

static int h_start_array(void *c)
{
    hctx_t *x = c;
    if (x->depth != 0)
        return h_other(c);
    x->depth = 1;
    return 1;
}

static int h_end_array(void *c)
{
    hctx_t *x = c;
    x->depth = 2;
    return 1;
}

static const yajl_callbacks handle_callbacks = {
    h_other, h_bool, NULL,    NULL,          h_number,    h_string,
    h_other, h_key,  h_other, h_start_array, h_end_array,
};

int tn_batch_handles(const char *body, size_t len, uint32_t max, char (*handles)[TN_HANDLE_MAX],
                     uint32_t *n, char *err, size_t errlen)
{
    hctx_t x;
    memset(&x, 0, sizeof(x));
    x.handles = handles;
    x.max = max;
    bool ok = false;
    int rc = tn_json_events(body, len, &handle_callbacks, &x, true, &ok);
    if (rc != 0)
        return rc;
    if (x.err[0] != '\0' || !ok) {
        snprintf(err, errlen, "%s", x.err[0] != '\0' ? x.err : "invalid json: not well-formed");
        return UV_EINVAL;
    }
    if (x.n == 0) {
        snprintf(err, errlen, "a batch needs at least one receipt handle");
        return UV_EINVAL;
    }
    *n = x.n;
    return 0;
}
