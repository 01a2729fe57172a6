/* The native /v1 API. See v1.h. */
#include "core/platform.h"

#include "api/v1.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON         "application/json; charset=utf-8"
#define LIST_DEFAULT 100
#define LIST_MAX     1000
#define WS_PREFIX    "/v1/ws/"

static void error(tn_http_request_t *r, int status, const char *msg, const char *headers)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"error\":\"", 10);
    tn_buf_json_escape(&b, msg);
    tn_buf_append(&b, "\"}\n", 3);
    tn_http_respond(r, status, JSON, headers, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

static void appendf(tn_buf_t *b, const char *fmt, ...) TN_PRINTF(2, 3);
static void appendf(tn_buf_t *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        tn_buf_append(b, line, (size_t)TN_MIN((size_t)n, sizeof(line) - 1));
}

static void json_str(tn_buf_t *b, const char *s)
{
    tn_buf_append(b, "\"", 1);
    tn_buf_json_escape(b, s);
    tn_buf_append(b, "\"", 1);
}

/* --- authentication ------------------------------------------------------------ */

typedef struct {
    tn_authn_req_t req;
    tn_http_request_t *r;
    char user[TN_USERNAME_MAX + 1];
} authing_t;

static const char *lookup(void *arg, const char *user, uint64_t *version)
{
    tn_v1_t *v = arg;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    *version = s->users_version;
    const tn_meta_user_t *u = tn_meta_user_find(s, user);
    return u != NULL ? u->hash : NULL;
}

static void unauthorized(tn_http_request_t *r)
{
    error(r, 401, "authentication required", "WWW-Authenticate: Basic realm=\"tern\"\r\n");
}

static void on_checked(tn_authn_req_t *req, tn_authn_result_t result)
{
    authing_t *a = req->data;
    tn_http_request_t *r = a->r;
    r->on_cancel = NULL;
    if (result == TN_AUTHN_OK) {
        snprintf(r->principal, sizeof(r->principal), "%s", a->user);
        tn_free(a);
        tn_http_resume(r);
        return;
    }
    tn_free(a);
    if (result == TN_AUTHN_THROTTLED)
        error(r, 429, "too many failed authentication attempts", "Retry-After: 12\r\n");
    else
        unauthorized(r);
}

static void on_auth_cancel(tn_http_request_t *r)
{
    authing_t *a = r->data;
    tn_authn_cancel(&a->req);
    tn_free(a);
}

static void guard(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    tn_iov_t path = r->head.path;
    size_t wl = sizeof(WS_PREFIX) - 1;
    if (!v->security || (path.len >= wl && memcmp(path.base, WS_PREFIX, wl) == 0)) {
        tn_http_resume(r);
        return;
    }
    const tn_iov_t *h = tn_http_header(&r->head, "authorization");
    char password[TN_PASSWORD_MAX + 1];
    size_t plen = 0;
    authing_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL) {
        error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (h == NULL || tn_basic_parse(h->base, h->len, a->user, password, &plen) != 0) {
        tn_free(a);
        unauthorized(r);
        return;
    }
    a->r = r;
    a->req.data = a;
    r->data = a;
    r->on_cancel = on_auth_cancel;
    tn_authn_check(v->authn, &a->req, a->user, password, plen, on_checked);
    memset(password, 0, sizeof(password));
}

/* --- authorization ------------------------------------------------------------ */

bool tn_v1_pattern_match(const char *pattern, const char *name)
{
    size_t n = strlen(pattern);
    if (n > 0 && pattern[n - 1] == '*')
        return strncmp(pattern, name, n - 1) == 0;
    return strcmp(pattern, name) == 0;
}

static const tn_meta_user_t *caller(tn_v1_t *v, const tn_http_request_t *r)
{
    return tn_meta_user_find(tn_meta_state(v->meta), r->principal);
}

static bool is_admin(tn_v1_t *v, const tn_http_request_t *r)
{
    if (!v->security)
        return true;
    const tn_meta_user_t *u = caller(v, r);
    if (u == NULL)
        return false;
    if (u->root)
        return true;
    for (uint16_t i = 0; i < u->ngrants; i++) {
        if (u->grants[i].action == TN_GRANT_ADMIN)
            return true;
    }
    return false;
}

/* Any grant on the topic's name, its ownership, or admin. */
static bool can_read(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t)
{
    if (is_admin(v, r))
        return true;
    const tn_meta_user_t *u = caller(v, r);
    if (u == NULL)
        return false;
    if (t->owner[0] != '\0' && strcmp(t->owner, u->name) == 0)
        return true;
    for (uint16_t i = 0; i < u->ngrants; i++) {
        for (uint16_t k = 0; k < u->grants[i].npatterns; k++) {
            if (tn_v1_pattern_match(u->grants[i].patterns[k], t->name))
                return true;
        }
    }
    return false;
}

/* --- users ------------------------------------------------------------------ */

static const char *action_name(uint8_t a)
{
    switch (a) {
    case TN_GRANT_PRODUCE:
        return "produce";
    case TN_GRANT_CONSUME:
        return "consume";
    case TN_GRANT_CREATE:
        return "create";
    default:
        return "admin";
    }
}

static void user_json(tn_buf_t *b, const tn_meta_user_t *u)
{
    tn_buf_append(b, "{\"username\":", 12);
    json_str(b, u->name);
    tn_buf_append(b, ",\"grants\":[", 11);
    for (uint16_t i = 0; i < u->ngrants; i++) {
        if (i > 0)
            tn_buf_append(b, ",", 1);
        appendf(b, "{\"action\":\"%s\",\"patterns\":[", action_name(u->grants[i].action));
        for (uint16_t k = 0; k < u->grants[i].npatterns; k++) {
            if (k > 0)
                tn_buf_append(b, ",", 1);
            json_str(b, u->grants[i].patterns[k]);
        }
        tn_buf_append(b, "]}", 2);
    }
    tn_buf_append(b, "]", 1);
    if (u->root)
        tn_buf_append(b, ",\"root\":true", 12);
    appendf(b, ",\"created_at_ms\":%" PRId64 ",\"updated_at_ms\":%" PRId64 "}", u->created_at_ms,
            u->updated_at_ms);
}

static void respond_buf(tn_http_request_t *r, int status, tn_buf_t *b)
{
    tn_buf_append(b, "\n", 1);
    tn_http_respond(r, status, JSON, NULL, tn_buf_data(b), tn_buf_size(b));
    tn_buf_fini(b);
}

static void on_users_list(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!is_admin(v, r)) {
        error(r, 403, "admin rights required", NULL);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "[", 1);
    for (size_t i = 0; i < s->nusers; i++) {
        if (i > 0)
            tn_buf_append(&b, ",", 1);
        user_json(&b, s->users[i]);
    }
    tn_buf_append(&b, "]", 1);
    respond_buf(r, 200, &b);
}

static void on_user_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!is_admin(v, r)) {
        error(r, 403, "admin rights required", NULL);
        return;
    }
    const tn_iov_t *name = tn_http_param(r, "username");
    char user[TN_USERNAME_MAX + 1] = "";
    if (name != NULL && name->len <= TN_USERNAME_MAX) {
        memcpy(user, name->base, name->len);
        user[name->len] = '\0';
    }
    const tn_meta_user_t *u = tn_meta_user_find(tn_meta_state(v->meta), user);
    if (u == NULL) {
        error(r, 404, "user not found", NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    user_json(&b, u);
    respond_buf(r, 200, &b);
}

/* --- topics ------------------------------------------------------------------ */

static const char *durability_name(uint8_t d)
{
    return d == 1 ? "write_ack" : d == 2 ? "relaxed" : "durable";
}

static void topic_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_topic_entry_t *e, bool stats,
                       int64_t only_partition)
{
    const tn_meta_topic_t *t = &e->rec;
    tn_buf_append(b, "{\"name\":", 8);
    json_str(b, t->name);
    appendf(b,
            ",\"partitions\":%u,\"retention_ms\":%" PRId64 ",\"visibility_timeout_ms\":%" PRId64
            ",\"max_in_flight_per_partition\":%" PRId64
            ",\"max_acked_ahead_per_partition\":%" PRId64 ",\"created_at\":%" PRId64,
            t->partitions, t->retention_ms, t->visibility_timeout_ms, t->max_inflight,
            t->max_acked_ahead, t->created_at_ms / 1000);
    if (t->owner[0] != '\0') {
        tn_buf_append(b, ",\"owner\":", 9);
        json_str(b, t->owner);
    }
    appendf(b,
            ",\"role\":\"%s\",\"delivery_mode\":\"%s\",\"ttl_ms\":%" PRId64
            ",\"max_attempts\":%u,\"durability\":\"%s\"",
            t->parent[0] != '\0' ? "child" : "standalone",
            t->delivery_mode == TN_DELIVERY_TTL_DISCARD ? "ttl_discard" : "reliable", t->ttl_ms,
            t->max_attempts, durability_name(t->durability));
    tn_buf_append(b, ",\"channels\":[", 13);
    for (uint32_t i = 0; i < e->nchannels; i++) {
        if (i > 0)
            tn_buf_append(b, ",", 1);
        json_str(b, e->channels[i]);
    }
    tn_buf_append(b, "]", 1);
    if (stats) {
        tn_buf_append(b, ",\"partition_stats\":[", 20);
        tn_topic_t *bt = NULL;
        bool live = tn_broker_topic(v->broker, t->name, strlen(t->name), false, 0, NULL, &bt) == 0;
        bool first = true;
        for (uint32_t p = 0; live && p < bt->nparts; p++) {
            if (only_partition >= 0 && (int64_t)p != only_partition)
                continue;
            tn_plog_stats_t st;
            tn_plog_stats(bt->parts[p].plog, &st);
            appendf(b,
                    "%s{\"index\":%u,\"segments\":%u,\"oldest_offset\":%" PRIu64
                    ",\"next_offset\":%" PRIu64 ",\"high_watermark\":%" PRIu64
                    ",\"size_bytes\":%" PRIu64 "}",
                    first ? "" : ",", p, st.segments, st.first_offset, st.written_next,
                    st.visible_next, st.bytes);
            first = false;
        }
        tn_buf_append(b, "]", 1);
    }
    tn_buf_append(b, "}", 1);
}

/* A query parameter that must be a non-negative integer when present:
 * 1 (value set), 0 (absent) or -1 (malformed). */
static int query_int(const tn_http_request_t *r, const char *name, int64_t *out)
{
    char buf[32];
    int rc = tn_http_query(r->head.query, name, buf, sizeof(buf));
    if (rc == 0)
        return 0;
    if (rc != 1 || buf[0] == '\0')
        return -1;
    char *end;
    long long x = strtoll(buf, &end, 10);
    if (*end != '\0' || x < 0 || buf[0] == '-' || buf[0] == '+')
        return -1;
    *out = x;
    return 1;
}

static void on_topics_list(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    int64_t limit = LIST_DEFAULT;
    int q = query_int(r, "limit", &limit);
    if (q < 0 || (q == 1 && limit < 1)) {
        error(r, 400, "limit must be a positive integer", NULL);
        return;
    }
    limit = TN_MIN(limit, (int64_t)LIST_MAX);
    char token[TN_NAME_MAX + 1] = "";
    int rc = tn_http_query(r->head.query, "page_token", token, sizeof(token));
    if (rc < 0) {
        error(r, 400, "invalid page_token", NULL);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"topics\":[", 11);
    int64_t n = 0;
    const char *last = NULL;
    bool more = false;
    for (size_t i = tn_meta_topic_after(s, token); i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *e = s->topics[i];
        if (!can_read(v, r, &e->rec))
            continue;
        if (n == limit) {
            more = true;
            break;
        }
        if (n > 0)
            tn_buf_append(&b, ",", 1);
        topic_json(v, &b, e, false, -1);
        last = e->rec.name;
        n++;
    }
    tn_buf_append(&b, "],\"next_page_token\":", 20);
    json_str(&b, more && last != NULL ? last : "");
    tn_buf_append(&b, "}", 1);
    respond_buf(r, 200, &b);
}

static void on_topic_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    const tn_iov_t *name = tn_http_param(r, "topic");
    char topic[TN_NAME_MAX + 1] = "";
    if (name != NULL && name->len <= TN_NAME_MAX) {
        memcpy(topic, name->base, name->len);
        topic[name->len] = '\0';
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(v->meta), topic);
    if (e == NULL) {
        error(r, 404, "topic not found", NULL);
        return;
    }
    if (!can_read(v, r, &e->rec)) {
        error(r, 403, "no grant on this topic", NULL);
        return;
    }
    int64_t part = -1;
    int q = query_int(r, "partition", &part);
    if (q < 0 || (q == 1 && part >= (int64_t)e->rec.partitions)) {
        error(r, 400, "invalid partition", NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    topic_json(v, &b, e, true, q == 1 ? part : -1);
    respond_buf(r, 200, &b);
}

/* --- lifetime ------------------------------------------------------------------ */

int tn_v1_init(tn_v1_t *v, uv_loop_t *loop, tn_meta_t *meta, tn_broker_t *b, bool security)
{
    memset(v, 0, sizeof(*v));
    v->meta = meta;
    v->broker = b;
    v->security = security;
    tn_authn_opts_t o;
    tn_authn_opts_default(&o);
    return tn_authn_new(loop, &o, lookup, v, &v->authn);
}

int tn_v1_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_guard(srv, "/v1", guard, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/users", 0, NULL, on_users_list, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/users/{username}", 0, NULL, on_user_get, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/topics", 0, NULL, on_topics_list, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/topics/{topic}", 0, NULL, on_topic_get, v);
    return rc;
}

void tn_v1_close(tn_v1_t *v)
{
    if (v->authn != NULL)
        tn_authn_close(v->authn, NULL, NULL);
    v->authn = NULL;
}
