/* IDENTIFY bodies: yajl callbacks collecting the known fields, then nsqd's
 * rules. See identify.h. */
#include "core/platform.h"

#include "proto/nsq/identify.h"

#include "core/alloc.h"
#include "proto/http/json.h"
#include "core/err.h"
#include "proto/nsq/codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <yajl/yajl_parse.h>

enum { F_NONE, F_INT, F_BOOL, F_STR };

#define MAX_DEPTH 32 /* deepest nesting accepted (unknown fields may nest) */

typedef struct {
    const char *key;
    int type;
    size_t off; /* into raw_t */
} field_t;

/* What the body said; present[] marks the fields that were there (a JSON
 * null counts as absent, as in Go). */
typedef struct {
    int64_t heartbeat_interval;
    int64_t output_buffer_size;
    int64_t output_buffer_timeout;
    int64_t msg_timeout;
    int64_t sample_rate;
    int64_t deflate_level;
    bool feature_negotiation;
    bool tls_v1;
    bool deflate;
    bool snappy;
    char client_id[TN_NSQ_CLIENT_STR];
    char hostname[TN_NSQ_CLIENT_STR];
    char user_agent[TN_NSQ_CLIENT_STR];
} raw_t;

#define R(f) offsetof(raw_t, f)
static const field_t fields[] = {
    {"heartbeat_interval", F_INT, R(heartbeat_interval)},
    {"output_buffer_size", F_INT, R(output_buffer_size)},
    {"output_buffer_timeout", F_INT, R(output_buffer_timeout)},
    {"msg_timeout", F_INT, R(msg_timeout)},
    {"sample_rate", F_INT, R(sample_rate)},
    {"deflate_level", F_INT, R(deflate_level)},
    {"feature_negotiation", F_BOOL, R(feature_negotiation)},
    {"tls_v1", F_BOOL, R(tls_v1)},
    {"deflate", F_BOOL, R(deflate)},
    {"snappy", F_BOOL, R(snappy)},
    {"client_id", F_STR, R(client_id)},
    {"hostname", F_STR, R(hostname)},
    {"user_agent", F_STR, R(user_agent)},
};
#define NFIELDS TN_ARRAY_SIZE(fields)

/* Positions in fields[]. */
enum {
    I_HB,
    I_OBS,
    I_OBT,
    I_MSGT,
    I_SAMPLE,
    I_DLEVEL,
    I_FEAT,
    I_TLS,
    I_DEFLATE,
    I_SNAPPY,
    I_CID,
    I_HOST,
    I_UA,
    I_COUNT
};
_Static_assert(I_COUNT == NFIELDS, "fields[] and its index enum disagree");

typedef struct {
    raw_t raw;
    bool present[NFIELDS];
    int depth;
    int field; /* index of the depth-1 key being read, or -1 */
    bool bad_type;
    bool too_deep;
} ctx_t;

/* A value at depth 1 for the current key: 1 to go on, 0 to stop. */
static int value(ctx_t *x, int type, long long i, int b, const unsigned char *s, size_t n)
{
    if (x->depth != 1 || x->field < 0)
        return 1; /* nested, or a key we do not know */
    const field_t *f = &fields[x->field];
    if (type == F_NONE) { /* null: Go leaves the field alone */
        x->field = -1;
        return 1;
    }
    if (f->type != type) {
        x->bad_type = true;
        return 0;
    }
    if (x->field == I_SAMPLE && (i < INT32_MIN || i > INT32_MAX)) {
        x->bad_type = true; /* nsqd's sample_rate is an int32: Go will not fit it */
        return 0;
    }
    char *p = (char *)&x->raw + f->off;
    if (type == F_INT) {
        *(int64_t *)p = i;
    } else if (type == F_BOOL) {
        *(bool *)p = b != 0;
    } else {
        size_t k = TN_MIN(n, (size_t)TN_NSQ_CLIENT_STR - 1);
        memcpy(p, s, k);
        p[k] = '\0';
    }
    x->present[x->field] = true;
    x->field = -1;
    return 1;
}

static int on_null(void *c)
{
    return value(c, F_NONE, 0, 0, NULL, 0);
}
static int on_bool(void *c, int b)
{
    return value(c, F_BOOL, 0, b, NULL, 0);
}
static int on_int(void *c, long long i)
{
    return value(c, F_INT, i, 0, NULL, 0);
}
static int on_double(void *c, double d)
{
    (void)d;
    ctx_t *x = c;
    if (x->depth == 1 && x->field >= 0) {
        x->bad_type = true; /* Go will not put 1.5 (or 1e400) in an int */
        return 0;
    }
    return 1;
}
static int on_string(void *c, const unsigned char *s, size_t n)
{
    return value(c, F_STR, 0, 0, s, n);
}
static int on_start_map(void *c)
{
    ctx_t *x = c;
    if (x->depth >= MAX_DEPTH) {
        x->too_deep = true;
        return 0;
    }
    if (x->depth == 1 && x->field >= 0) { /* an object where a known field's value goes */
        x->bad_type = true;
        return 0;
    }
    x->depth++;
    return 1;
}
static int on_map_key(void *c, const unsigned char *k, size_t n)
{
    ctx_t *x = c;
    if (x->depth != 1)
        return 1;
    x->field = -1;
    /* Go's encoding/json matches a key to a field ignoring case
     * ("Heartbeat_Interval" sets heartbeat_interval); ASCII case here,
     * which is all the field names hold. */
    for (size_t i = 0; i < NFIELDS; i++) {
        if (strlen(fields[i].key) == n && strncasecmp(fields[i].key, (const char *)k, n) == 0) {
            x->field = (int)i;
            break;
        }
    }
    return 1;
}
static int on_end_map(void *c)
{
    ctx_t *x = c;
    x->depth--;
    x->field = -1;
    return 1;
}
static int on_start_array(void *c)
{
    ctx_t *x = c;
    if (x->depth >= MAX_DEPTH) {
        x->too_deep = true;
        return 0;
    }
    if (x->depth == 0 || (x->depth == 1 && x->field >= 0)) {
        x->bad_type = true; /* a top-level array, or an array for a known field */
        return 0;
    }
    x->depth++;
    return 1;
}
static int on_end_array(void *c)
{
    ctx_t *x = c;
    x->depth--;
    if (x->depth == 1)
        x->field = -1;
    return 1;
}

static const yajl_callbacks callbacks = {
    on_null,      on_bool,    on_int,     on_double,      NULL,         on_string,
    on_start_map, on_map_key, on_end_map, on_start_array, on_end_array,
};

/* yajl's memory is tn_json_events' arena, sized from the body; nesting is
 * cut at MAX_DEPTH, which keeps yajl's state stack within it. */

void tn_nsq_client_defaults(tn_nsq_client_opts_t *c, int64_t msg_timeout_ms)
{
    memset(c, 0, sizeof(*c));
    c->heartbeat_ms = 30000;
    c->output_buffer_size = 16384;
    c->output_buffer_timeout_ms = 250;
    c->msg_timeout_ms = msg_timeout_ms;
    c->deflate_level = 6;
}

static int bad(int *err, char *msg, size_t msglen, int code, const char *fmt, ...) TN_PRINTF(5, 6);
static int bad(int *err, char *msg, size_t msglen, int code, const char *fmt, ...)
{
    *err = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return TN_EPROTO;
}

int tn_nsq_identify(const char *body, size_t len, const tn_nsq_server_opts_t *srv,
                    tn_nsq_client_opts_t *c, int *err, char *msg, size_t msglen)
{
    if (len > TN_NSQ_IDENTIFY_MAX)
        return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY, "IDENTIFY body too big %zu > %d", len,
                   TN_NSQ_IDENTIFY_MAX);
    ctx_t x;
    memset(&x, 0, sizeof(x));
    x.field = -1;
    /* Go accepts bytes that are not UTF-8 in strings; so do we. */
    bool parsed = false;
    int rc = tn_json_events(body, len, &callbacks, &x, false, &parsed);
    if (rc != 0)
        return rc;
    if (x.too_deep)
        return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY, "IDENTIFY body nested deeper than %d",
                   MAX_DEPTH);
    /* The body must be one JSON object (a top-level null is an empty one
     * for Go; a scalar is not an object). */
    bool object_ok = parsed && !x.bad_type;
    if (object_ok) {
        size_t i = 0;
        while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r'))
            i++;
        object_ok =
            i < len && (body[i] == '{' || (len - i >= 4 && memcmp(body + i, "null", 4) == 0));
    }
    if (!object_ok)
        return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY, "IDENTIFY failed to decode JSON body");

    const raw_t *r = &x.raw;
    tn_nsq_client_opts_t n = *c;

    if (x.present[I_HB]) {
        int64_t v = r->heartbeat_interval;
        if (v == -1)
            n.heartbeat_ms = 0;
        else if (v == 0)
            ;
        else if (v >= 1000 && v <= srv->max_heartbeat_interval_ms)
            n.heartbeat_ms = v;
        else
            return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY,
                       "IDENTIFY heartbeat interval (%lld) is invalid", (long long)v);
    }
    if (x.present[I_OBT]) {
        int64_t v = r->output_buffer_timeout;
        if (v == -1)
            n.output_buffer_timeout_ms = 0;
        else if (v == 0)
            ;
        else if (v >= srv->min_output_buffer_timeout_ms && v <= srv->max_output_buffer_timeout_ms)
            n.output_buffer_timeout_ms = v;
        else
            return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY,
                       "IDENTIFY output buffer timeout (%lld) is invalid", (long long)v);
    }
    if (x.present[I_OBS]) {
        int64_t v = r->output_buffer_size;
        if (v == -1) {
            /* No buffering: nsqd makes it a buffer of 1 byte, which its
             * IDENTIFY answer shows; every frame fills it. */
            n.output_buffer_size = 1;
            n.output_buffer_timeout_ms = 0;
        } else if (v == 0) {
        } else if (v >= 64 && v <= srv->max_output_buffer_size) {
            n.output_buffer_size = v;
        } else {
            return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY,
                       "IDENTIFY output buffer size (%lld) is invalid", (long long)v);
        }
    }
    if (x.present[I_SAMPLE]) {
        int64_t v = r->sample_rate;
        if (v < 0 || v > 99)
            return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY,
                       "IDENTIFY sample rate (%lld) is invalid", (long long)v);
        n.sample_rate = (int32_t)v;
    }
    if (x.present[I_MSGT]) {
        int64_t v = r->msg_timeout;
        if (v == 0)
            ;
        else if (v >= 1000 && v <= srv->max_msg_timeout_ms)
            n.msg_timeout_ms = v;
        else
            return bad(err, msg, msglen, TN_NSQ_E_BAD_BODY,
                       "IDENTIFY msg timeout (%lld) is invalid", (long long)v);
    }
    /* What this IDENTIFY negotiates, nothing of an earlier one's: as in
     * nsqd, without feature_negotiation the answer is "OK" and nothing is
     * upgraded (nor are snappy and deflate together an error). */
    n.feature_negotiation = r->feature_negotiation;
    bool fn = n.feature_negotiation;
    n.tls_v1 = fn && srv->tls_available && r->tls_v1;
    n.deflate = fn && srv->deflate_enabled && r->deflate;
    n.snappy = fn && srv->snappy_enabled && r->snappy;
    if (n.deflate && n.snappy)
        return bad(err, msg, msglen, TN_NSQ_E_IDENTIFY_FAILED,
                   "cannot enable both deflate and snappy compression");
    n.deflate_level = 6;
    if (n.deflate && x.present[I_DLEVEL] && r->deflate_level > 0)
        n.deflate_level = (int)TN_MIN(r->deflate_level, (int64_t)srv->max_deflate_level);
    if (n.deflate_level > srv->max_deflate_level)
        n.deflate_level = srv->max_deflate_level;
    if (x.present[I_CID])
        memcpy(n.client_id, r->client_id, sizeof(n.client_id));
    if (x.present[I_HOST])
        memcpy(n.hostname, r->hostname, sizeof(n.hostname));
    if (x.present[I_UA])
        memcpy(n.user_agent, r->user_agent, sizeof(n.user_agent));
    *c = n;
    return 0;
}

int tn_nsq_identify_response(const tn_nsq_client_opts_t *c, const tn_nsq_server_opts_t *srv,
                             const char *version, tn_buf_t *out)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf),
                     "{\"max_rdy_count\":%lld,\"version\":\"%s\",\"max_msg_timeout\":%lld,"
                     "\"msg_timeout\":%lld,\"tls_v1\":%s,\"deflate\":%s,\"deflate_level\":%d,"
                     "\"max_deflate_level\":%d,\"snappy\":%s,\"sample_rate\":%d,"
                     "\"auth_required\":%s,\"output_buffer_size\":%lld,"
                     "\"output_buffer_timeout\":%lld,\"topology_region\":\"\","
                     "\"topology_zone\":\"\"}",
                     (long long)srv->max_rdy_count, version, (long long)srv->max_msg_timeout_ms,
                     (long long)c->msg_timeout_ms, c->tls_v1 ? "true" : "false",
                     c->deflate ? "true" : "false", c->deflate_level, srv->max_deflate_level,
                     c->snappy ? "true" : "false", (int)c->sample_rate,
                     srv->auth_required ? "true" : "false", (long long)c->output_buffer_size,
                     (long long)c->output_buffer_timeout_ms);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return UV_EINVAL;
    return tn_buf_append(out, buf, (size_t)n);
}
