/* Strict flat-object JSON decoding. See json.h. */
#include "core/platform.h"

#include "proto/http/json.h"

#include "core/alloc.h"
#include "core/arena.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>
#include <yajl/yajl_parse.h>

/* yajl does not check its own allocations, so it must never see one
 * fail: each parse gets an arena allocated up front and sized so that
 * yajl cannot exhaust it (nesting is refused past TN_JSON_MAX_DEPTH, which
 * bounds its state stack; its string buffer doubles up to twice the longest string,
 * each doubling a fresh block here, so 8 x the body plus a fixed part
 * covers the worst case). */
#define ARENA_FIXED (16 * 1024)

typedef struct {
    const tn_jfield_t *fields;
    size_t n;
    char *out;
    bool *present;
    bool seen[TN_JSON_MAX_FIELDS];
    int depth;
    int field; /* the key being read, or -1 */
    char err[160];
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

static const char *type_name(tn_jfield_type_t t)
{
    return t == TN_JF_INT ? "an integer" : t == TN_JF_STR ? "a string" : "a boolean";
}

/* A scalar at depth 1 for the current key. */
static int scalar(ctx_t *x, int type, long long i, int b, const unsigned char *s, size_t len)
{
    if (x->depth != 1 || x->field < 0)
        return fail(x, "invalid json: the body must be one JSON object");
    const tn_jfield_t *f = &x->fields[x->field];
    int idx = x->field;
    x->field = -1;
    if (type == 0) /* null */
        return 1;
    if ((int)f->type != type)
        return fail(x, "invalid json: field \"%s\" must be %s", f->name, type_name(f->type));
    char *p = x->out + f->off;
    if (type == TN_JF_INT) {
        int64_t v = i;
        memcpy(p, &v, sizeof(v));
    } else if (type == TN_JF_BOOL) {
        bool v = b != 0;
        memcpy(p, &v, sizeof(v));
    } else {
        if (len > f->max || memchr(s, '\0', len) != NULL)
            return fail(x, "invalid json: field \"%s\" is longer than %zu bytes or holds NUL",
                        f->name, f->max);
        memcpy(p, s, len);
        p[len] = '\0';
    }
    x->present[idx] = true;
    return 1;
}

static int on_null(void *c)
{
    return scalar(c, 0, 0, 0, NULL, 0);
}

static int on_bool(void *c, int b)
{
    return scalar(c, TN_JF_BOOL, 0, b, NULL, 0);
}

static int on_int(void *c, long long i)
{
    return scalar(c, TN_JF_INT, i, 0, NULL, 0);
}

static int on_double(void *c, double d)
{
    ctx_t *x = c;
    (void)d;
    if (x->depth == 1 && x->field >= 0 && x->fields[x->field].type == TN_JF_INT)
        return fail(x, "invalid json: field \"%s\" must be an integer", x->fields[x->field].name);
    return scalar(c, -1, 0, 0, NULL, 0);
}

/* A number as its text (yajl's number callback, so that an integer
 * past int64 is named here: yajl's own integer parsing fails the whole
 * body as not well-formed, though JSON sets numbers no limit). */
static int on_number(void *c, const char *s, size_t n)
{
    ctx_t *x = c;
    if (memchr(s, '.', n) != NULL || memchr(s, 'e', n) != NULL || memchr(s, 'E', n) != NULL)
        return on_double(c, 0);
    /* JSON has no leading zeros: 21 characters are past int64 already. */
    char buf[24];
    long long v = 0;
    bool range = n < sizeof(buf);
    if (range) {
        memcpy(buf, s, n);
        buf[n] = '\0';
        errno = 0;
        v = strtoll(buf, NULL, 10);
        range = errno != ERANGE;
    }
    if (!range && x->depth == 1 && x->field >= 0 && x->fields[x->field].type == TN_JF_INT)
        return fail(x, "invalid json: field \"%s\" is out of range (a 64-bit integer)",
                    x->fields[x->field].name);
    return on_int(c, v); /* in range, or a number where none is due: its own error */
}

static int on_string(void *c, const unsigned char *s, size_t n)
{
    return scalar(c, TN_JF_STR, 0, 0, s, n);
}

static int on_start_map(void *c)
{
    ctx_t *x = c;
    if (x->depth != 0)
        return fail(x, "invalid json: nested objects are not accepted here");
    x->depth = 1;
    return 1;
}

static int on_map_key(void *c, const unsigned char *k, size_t n)
{
    ctx_t *x = c;
    for (size_t i = 0; i < x->n; i++) {
        if (strlen(x->fields[i].name) == n && memcmp(x->fields[i].name, k, n) == 0) {
            if (x->seen[i])
                return fail(x, "invalid json: duplicate field \"%s\"", x->fields[i].name);
            x->seen[i] = true;
            x->field = (int)i;
            return 1;
        }
    }
    return fail(x, "invalid json: unknown field \"%.*s\"", (int)TN_MIN(n, (size_t)64), k);
}

static int on_end_map(void *c)
{
    ctx_t *x = c;
    x->depth = 2; /* done: anything after is not one object */
    return 1;
}

static int on_start_array(void *c)
{
    ctx_t *x = c;
    if (x->depth == 1 && x->field >= 0)
        return fail(x, "invalid json: field \"%s\" must be %s", x->fields[x->field].name,
                    type_name(x->fields[x->field].type));
    return fail(x, "invalid json: the body must be one JSON object");
}

static int on_end_array(void *c)
{
    (void)c;
    return 0;
}

static const yajl_callbacks callbacks = {
    on_null,      on_bool,    NULL,       NULL,           on_number,    on_string,
    on_start_map, on_map_key, on_end_map, on_start_array, on_end_array,
};

/* Every event passes through here on its way to the caller's callbacks,
 * to note where the top-level value ends: yajl takes a second value that
 * starts but does not end (`"a" "`) for the end of its input, so what
 * follows the first value must be whitespace. (A second complete value is
 * yajl's own "trailing garbage", at its first token.) */
typedef struct {
    const yajl_callbacks *cb;
    void *ctx;
    yajl_handle h;
    size_t depth;
    size_t end;     /* where the top-level value ended; 0: not yet */
    size_t len;     /* of the whole input */
    bool finishing; /* in yajl_complete_parse: a number ends with the input */
} wrap_t;

static void ended(wrap_t *w)
{
    if (w->depth == 0)
        w->end = w->finishing ? w->len : yajl_get_bytes_consumed(w->h);
}

static int value(wrap_t *w)
{
    ended(w);
    return 1;
}

#define FORWARD(w, fn, ...) ((w)->cb != NULL && (w)->cb->fn != NULL ? (w)->cb->fn(__VA_ARGS__) : 1)

static int w_null(void *c)
{
    wrap_t *w = c;
    return value(w) && FORWARD(w, yajl_null, w->ctx);
}

static int w_bool(void *c, int b)
{
    wrap_t *w = c;
    return value(w) && FORWARD(w, yajl_boolean, w->ctx, b);
}

static int w_int(void *c, long long i)
{
    wrap_t *w = c;
    return value(w) && FORWARD(w, yajl_integer, w->ctx, i);
}

static int w_double(void *c, double d)
{
    wrap_t *w = c;
    return value(w) && FORWARD(w, yajl_double, w->ctx, d);
}

static int w_number(void *c, const char *s, size_t n)
{
    wrap_t *w = c;
    return value(w) && FORWARD(w, yajl_number, w->ctx, s, n);
}

static int w_string(void *c, const unsigned char *s, size_t n)
{
    wrap_t *w = c;
    return value(w) && FORWARD(w, yajl_string, w->ctx, s, n);
}

static int w_start_map(void *c)
{
    wrap_t *w = c;
    if (++w->depth > TN_JSON_MAX_DEPTH)
        return 0;
    return FORWARD(w, yajl_start_map, w->ctx);
}

static int w_map_key(void *c, const unsigned char *k, size_t n)
{
    wrap_t *w = c;
    return FORWARD(w, yajl_map_key, w->ctx, k, n);
}

static int w_end_map(void *c)
{
    wrap_t *w = c;
    w->depth--;
    ended(w);
    return FORWARD(w, yajl_end_map, w->ctx);
}

static int w_start_array(void *c)
{
    wrap_t *w = c;
    if (++w->depth > TN_JSON_MAX_DEPTH)
        return 0;
    return FORWARD(w, yajl_start_array, w->ctx);
}

static int w_end_array(void *c)
{
    wrap_t *w = c;
    w->depth--;
    ended(w);
    return FORWARD(w, yajl_end_array, w->ctx);
}

int tn_json_events(const char *body, size_t len, const yajl_callbacks *cb, void *ctx,
                   bool validate_utf8, bool *ok)
{
    wrap_t w = {cb, ctx, NULL, 0, 0, len, false};
    yajl_callbacks wcb = {w_null,      w_bool,    NULL,      NULL,          NULL,       w_string,
                          w_start_map, w_map_key, w_end_map, w_start_array, w_end_array};
    if (cb == NULL || cb->yajl_number != NULL) {
        wcb.yajl_number = w_number;
    } else {
        wcb.yajl_integer = w_int;
        wcb.yajl_double = w_double;
    }
    tn_arena_t arena = {NULL, 0, ARENA_FIXED + 8 * len};
    arena.base = tn_malloc(arena.cap);
    if (arena.base == NULL)
        return UV_ENOMEM;
    yajl_alloc_funcs af = {tn_arena_malloc, tn_arena_realloc, tn_arena_free, &arena};
    yajl_handle h = yajl_alloc(&wcb, &af, &w);
    if (h == NULL) {
        tn_free(arena.base);
        return UV_ENOMEM;
    }
    w.h = h;
    if (!validate_utf8)
        yajl_config(h, yajl_dont_validate_strings, 1);
    yajl_status st = yajl_parse(h, (const unsigned char *)body, len);
    w.finishing = true;
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    yajl_free(h);
    tn_free(arena.base);
    *ok = st == yajl_status_ok && w.end > 0 && w.depth == 0;
    for (size_t i = w.end; *ok && i < len; i++)
        *ok = body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r';
    return 0;
}

int tn_json_object(const char *body, size_t len, const tn_jfield_t *fields, size_t nfields,
                   void *out, bool *present, char *err, size_t errlen)
{
    if (nfields > TN_JSON_MAX_FIELDS || len > TN_JSON_MAX_BODY) {
        snprintf(err, errlen, "request body too large");
        return UV_EINVAL;
    }
    ctx_t x;
    memset(&x, 0, sizeof(x));
    x.fields = fields;
    x.n = nfields;
    x.out = out;
    x.present = present;
    x.field = -1;
    memset(present, 0, nfields * sizeof(*present));
    bool ok = false;
    int rc = tn_json_events(body, len, &callbacks, &x, true, &ok);
    if (rc != 0)
        return rc;
    if (x.err[0] != '\0') {
        snprintf(err, errlen, "%s", x.err);
        return UV_EINVAL;
    }
    if (!ok) {
        snprintf(err, errlen, "invalid json: not well-formed");
        return UV_EINVAL;
    }
    if (x.depth != 2) {
        snprintf(err, errlen, "invalid json: the body must be one JSON object");
        return UV_EINVAL;
    }
    return 0;
}
