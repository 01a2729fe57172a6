/* The native /v1 API. See v1.h. */
#include "core/platform.h"

#include "api/v1.h"

#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "api/batch.h"
#include "api/fanout.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define JSON         "application/json; charset=utf-8"
#define LIST_DEFAULT 100
#define LIST_MAX     1000
#define WS_PREFIX    "/v1/ws/"

void tn__v1_error(tn_http_request_t *r, int status, const char *msg, const char *headers)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"error\":\"", 10);
    tn_buf_json_escape(&b, msg);
    tn_buf_append(&b, "\"}\n", 3);
    tn_http_respond(r, status, JSON, headers, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

void tn__v1_appendf(tn_buf_t *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        tn_buf_append(b, line, (size_t)TN_MIN((size_t)n, sizeof(line) - 1));
}

void tn__v1_json_str(tn_buf_t *b, const char *s)
{
    tn_buf_append(b, "\"", 1);
    tn_buf_json_escape(b, s);
    tn_buf_append(b, "\"", 1);
}

void tn__v1_respond_buf(tn_http_request_t *r, int status, tn_buf_t *b)
{
    tn_buf_append(b, "\n", 1);
    tn_http_respond(r, status, JSON, NULL, tn_buf_data(b), tn_buf_size(b));
    tn_buf_fini(b);
}

/* --- authentication ------------------------------------------------------------ */

typedef struct {
    tn_authn_req_t req;
    tn_http_request_t *r;
    bool nsq; /* for one of nsqd's endpoints: answered in their style */
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
    tn__v1_error(r, 401, "authentication required", "WWW-Authenticate: Basic realm=\"tern\"\r\n");
}

void tn__v1_nsq_refuse(tn_http_request_t *r, int status, const char *code)
{
    char body[96];
    int n = snprintf(body, sizeof(body), "{\"message\":\"%s\"}", code);
    const char *hdrs = status == 401   ? "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                                         "WWW-Authenticate: Basic realm=\"tern\"\r\n"
                       : status == 429 ? "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                                         "Retry-After: 12\r\n"
                                       : "X-NSQ-Content-Type: nsq; version=1.0\r\n";
    tn_http_respond(r, status, "application/json; charset=utf-8", hdrs, body, (size_t)n);
}

/* Order keys (spans) by length, then bytes. */
static int key_cmp(const void *a, const void *b)
{
    const tn_iov_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->base, y->base, x->len);
}

/* A query parameter (its raw name) given more than once in q, into *dup:
 * 1, 0 (none), or UV_ENOMEM. Sorting the names keeps a query of many
 * distinct ones cheap. */
static int repeated_param(tn_iov_t q, tn_iov_t *dup)
{
    size_t n = 1;
    for (size_t i = 0; i < q.len; i++)
        n += q.base[i] == '&';
    if (q.len == 0 || n < 2)
        return 0;
    tn_iov_t few[16];
    tn_iov_t *keys = n <= TN_ARRAY_SIZE(few) ? few : tn_malloc(n * sizeof(*keys));
    if (keys == NULL)
        return UV_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i <= q.len;) {
        size_t start = i;
        while (i < q.len && q.base[i] != '&')
            i++;
        const char *eq = memchr(q.base + start, '=', i - start);
        size_t klen = eq != NULL ? (size_t)(eq - (q.base + start)) : i - start;
        if (klen > 0) /* "a&&b": an empty pair names nothing */
            keys[k++] = tn_iov(q.base + start, klen);
        i++;
    }
    qsort(keys, k, sizeof(*keys), key_cmp);
    int found = 0;
    for (size_t i = 1; i < k && !found; i++) {
        if (key_cmp(&keys[i - 1], &keys[i]) == 0) {
            *dup = keys[i];
            found = 1;
        }
    }
    if (keys != few)
        tn_free(keys);
    return found;
}

/* Let an authenticated /v1 request through to its route, unless a query
 * parameter comes twice: no /v1 route takes a parameter more than once,
 * so a second value is a client's mistake, refused here for every route
 * rather than letting one value win silently. */
static void pass(tn_http_request_t *r)
{
    tn_iov_t path = r->head.path;
    tn_iov_t dup;
    int rc =
        path.len >= 3 && memcmp(path.base, "/v1", 3) == 0 ? repeated_param(r->head.query, &dup) : 0;
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (rc == 1) {
        char msg[160];
        snprintf(msg, sizeof(msg), "invalid argument: query parameter %.*s given more than once",
                 (int)TN_MIN(dup.len, (size_t)64), dup.base);
        tn__v1_error(r, 400, msg, NULL);
        return;
    }
    tn_http_resume(r);
}

static void on_checked(tn_authn_req_t *req, tn_authn_result_t result)
{
    authing_t *a = req->data;
    tn_http_request_t *r = a->r;
    r->on_cancel = NULL;
    bool nsq = a->nsq;
    if (result == TN_AUTHN_OK) {
        snprintf(r->principal, sizeof(r->principal), "%s", a->user);
        tn_free(a);
        if (nsq)
            tn_http_resume(r); /* nsqd's endpoints take the first of a repeated parameter */
        else
            pass(r);
        return;
    }
    tn_free(a);
    if (nsq)
        tn__v1_nsq_refuse(r, result == TN_AUTHN_THROTTLED ? 429 : 401,
                          result == TN_AUTHN_THROTTLED ? "TOO_MANY_FAILED_LOGINS" : "AUTH_FAILED");
    else if (result == TN_AUTHN_THROTTLED)
        tn__v1_error(r, 429, "too many failed authentication attempts", "Retry-After: 12\r\n");
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
    if (path.len >= wl && memcmp(path.base, WS_PREFIX, wl) == 0) {
        tn_http_resume(r); /* the live feed checks its own credentials and query */
        return;
    }
    if (!v->o.security) {
        pass(r);
        return;
    }
    const tn_iov_t *h = tn_http_header(&r->head, "authorization");
    char password[TN_PASSWORD_MAX + 1];
    size_t plen = 0;
    authing_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
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

/* nsqd's endpoints: credentials are optional (nsqd has none; a topic
 * without an owner stays open), but when given they must be right, and
 * the handler then knows who asks (r->principal) for a protected topic
 * (api/access.h). */
static void nsq_guard(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    const tn_iov_t *h = tn_http_header(&r->head, "authorization");
    if (!v->o.security || h == NULL) {
        tn_http_resume(r);
        return;
    }
    authing_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL) {
        tn__v1_nsq_refuse(r, 503, "E_OUT_OF_MEMORY");
        return;
    }
    char password[TN_PASSWORD_MAX + 1];
    size_t plen = 0;
    if (tn_basic_parse(h->base, h->len, a->user, password, &plen) != 0) {
        tn_free(a);
        tn__v1_nsq_refuse(r, 401, "AUTH_FAILED");
        return;
    }
    a->r = r;
    a->nsq = true;
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

const tn_meta_user_t *tn__v1_caller(tn_v1_t *v, const tn_http_request_t *r)
{
    return tn_meta_user_find(tn_meta_state(v->meta), r->principal);
}

bool tn__v1_is_admin(tn_v1_t *v, const tn_http_request_t *r)
{
    if (!v->o.security)
        return true;
    const tn_meta_user_t *u = tn__v1_caller(v, r);
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

/* Whether u holds a grant of action (0: any) whose pattern matches name. */
bool tn__v1_has_grant(const tn_meta_user_t *u, uint8_t action, const char *name)
{
    for (uint16_t i = 0; u != NULL && i < u->ngrants; i++) {
        if (action != 0 && u->grants[i].action != action)
            continue;
        for (uint16_t k = 0; k < u->grants[i].npatterns; k++) {
            if (tn_v1_pattern_match(u->grants[i].patterns[k], name))
                return true;
        }
    }
    return false;
}

/* Any grant on the topic's name, its ownership, or admin. */
bool tn__v1_can_read(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t)
{
    if (tn__v1_is_admin(v, r))
        return true;
    const tn_meta_user_t *u = tn__v1_caller(v, r);
    if (u == NULL)
        return false;
    if (t->owner[0] != '\0' && strcmp(t->owner, u->name) == 0)
        return true;
    return tn__v1_has_grant(u, 0, t->name);
}

/* The topic named by the path's {topic}, copied into topic; NULL after
 * answering 404 when the metastore has no such topic. */
const tn_meta_topic_entry_t *tn__v1_path_topic(tn_v1_t *v, tn_http_request_t *r,
                                               char topic[TN_NAME_MAX + 1])
{
    const tn_iov_t *name = tn_http_param(r, "topic");
    topic[0] = '\0';
    if (name != NULL && name->len <= TN_NAME_MAX) {
        memcpy(topic, name->base, name->len);
        topic[name->len] = '\0';
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(v->meta), topic);
    if (e == NULL)
        tn__v1_error(r, 404, "topic not found", NULL);
    return e;
}

bool tn__v1_caught_up(tn_v1_t *v, tn_http_request_t *r)
{
    if (tn_meta_caught_up(v->meta))
        return true;
    tn__v1_error(r, 503, "control plane not caught up", "Retry-After: 1\r\n");
    return false;
}

bool tn__v1_admin_only(tn_v1_t *v, tn_http_request_t *r)
{
    if (tn__v1_is_admin(v, r))
        return true;
    tn__v1_error(r, 403, "admin rights required", NULL);
    return false;
}

/* --- topics ------------------------------------------------------------------ */

static const char *durability_name(uint8_t d)
{
    return d == 1 ? "write_ack" : d == 2 ? "relaxed" : "durable";
}

void tn__v1_topic_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_topic_entry_t *e, bool stats,
                       int64_t only_partition)
{
    const tn_meta_topic_t *t = &e->rec;
    tn_buf_append(b, "{\"name\":", 8);
    tn__v1_json_str(b, t->name);
    tn__v1_appendf(b,
                   ",\"partitions\":%u,\"retention_ms\":%" PRId64
                   ",\"visibility_timeout_ms\":%" PRId64 ",\"max_in_flight_per_partition\":%" PRId64
                   ",\"max_acked_ahead_per_partition\":%" PRId64 ",\"created_at\":%" PRId64,
                   t->partitions, t->retention_ms, t->visibility_timeout_ms, t->max_inflight,
                   t->max_acked_ahead, t->created_at_ms / 1000);
    if (t->owner[0] != '\0') {
        tn_buf_append(b, ",\"owner\":", 9);
        tn__v1_json_str(b, t->owner);
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    size_t nchildren = t->parent[0] != '\0' ? 0 : e->nchildren;
    tn__v1_appendf(b,
                   ",\"role\":\"%s\",\"delivery_mode\":\"%s\",\"ttl_ms\":%" PRId64
                   ",\"max_attempts\":%u,\"durability\":\"%s\"",
                   t->parent[0] != '\0' ? "child"
                   : nchildren > 0      ? "parent"
                                        : "standalone",
                   t->delivery_mode == TN_DELIVERY_TTL_DISCARD ? "ttl_discard" : "reliable",
                   t->ttl_ms, t->max_attempts, durability_name(t->durability));
    if (t->parent[0] != '\0') {
        tn_buf_append(b, ",\"parent\":", 10);
        tn__v1_json_str(b, t->parent);
        tn__v1_appendf(b, ",\"attach_epoch\":\"%016" PRIx64 "\",\"fanout_delay_ms\":%" PRId64,
                       t->attach_epoch, t->fanout_delay_ms);
    } else if (nchildren > 0) {
        tn_buf_append(b, ",\"children\":[", 13);
        size_t seen = 0;
        for (size_t i = 0; i < s->ntopics && seen < nchildren; i++) {
            if (strcmp(s->topics[i]->rec.parent, t->name) != 0)
                continue;
            if (seen++ > 0)
                tn_buf_append(b, ",", 1);
            tn__v1_json_str(b, s->topics[i]->rec.name);
        }
        tn_buf_append(b, "]", 1);
    }
    tn_buf_append(b, ",\"channels\":[", 13);
    for (uint32_t i = 0; i < e->nchannels; i++) {
        if (i > 0)
            tn_buf_append(b, ",", 1);
        tn__v1_json_str(b, e->channels[i]);
    }
    tn_buf_append(b, "]", 1);
    if (stats) {
        tn_buf_append(b, ",\"partition_stats\":[", 20);
        tn_topic_t *bt = NULL;
        bool live = tn_broker_topic(v->broker, t->name, strlen(t->name), false, 0, NULL, &bt) == 0;
        uint32_t nlocal = live ? bt->nparts : 0;
        bool first = true;
        /* One entry per partition of the record, on every node: its owner
         * (the metastore's assignment, null while no member was alive to
         * take it), and the log's numbers where the log is on this node. */
        for (uint32_t p = 0; p < TN_MAX(t->partitions, nlocal); p++) {
            if (only_partition >= 0 && (int64_t)p != only_partition)
                continue;
            tn__v1_appendf(b, "%s{\"index\":%u", first ? "" : ",", p);
            first = false;
            if (p < nlocal && tn_topic_part_local(bt, p)) {
                tn_plog_stats_t st;
                tn_plog_stats(bt->parts[p]->plog, &st);
                tn__v1_appendf(
                    b,
                    ",\"segments\":%u,\"oldest_offset\":%" PRIu64 ",\"next_offset\":%" PRIu64
                    ",\"high_watermark\":%" PRIu64 ",\"size_bytes\":%" PRIu64,
                    st.segments, st.first_offset, st.written_next, st.visible_next, st.bytes);
            }
            uint64_t owner = tn_meta_state_owner(s, t->name, p);
            if (owner != 0)
                tn__v1_appendf(b, ",\"owner_node\":\"%" PRIu64 "\"}", owner);
            else
                tn__v1_appendf(b, ",\"owner_node\":null}");
        }
        tn_buf_append(b, "]", 1);
    }
    tn_buf_append(b, "}", 1);
}

/* A query parameter that must be a non-negative integer when present:
 * 1 (value set), 0 (absent) or -1 (malformed). */
int tn__v1_query_int(const tn_http_request_t *r, const char *name, int64_t *out)
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
    int q = tn__v1_query_int(r, "limit", &limit);
    if (q < 0 || (q == 1 && limit < 1)) {
        tn__v1_error(r, 400, "limit must be a positive integer", NULL);
        return;
    }
    limit = TN_MIN(limit, (int64_t)LIST_MAX);
    char token[TN_NAME_MAX + 1] = "";
    int rc = tn_http_query(r->head.query, "page_token", token, sizeof(token));
    if (rc < 0) {
        tn__v1_error(r, 400, "invalid page_token", NULL);
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
        if (!tn__v1_can_read(v, r, &e->rec))
            continue;
        if (n == limit) {
            more = true;
            break;
        }
        if (n > 0)
            tn_buf_append(&b, ",", 1);
        tn__v1_topic_json(v, &b, e, false, -1);
        last = e->rec.name;
        n++;
    }
    tn_buf_append(&b, "],\"next_page_token\":", 20);
    tn__v1_json_str(&b, more && last != NULL ? last : "");
    tn_buf_append(&b, "}", 1);
    tn__v1_respond_buf(r, 200, &b);
}

static void on_topic_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return;
    if (!tn__v1_can_read(v, r, &e->rec)) {
        tn__v1_error(r, 403, "no grant on this topic", NULL);
        return;
    }
    int64_t part = -1;
    int q = tn__v1_query_int(r, "partition", &part);
    if (q < 0 || (q == 1 && part >= (int64_t)e->rec.partitions)) {
        tn__v1_error(r, 400, "invalid partition", NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn__v1_topic_json(v, &b, e, true, q == 1 ? part : -1);
    tn__v1_respond_buf(r, 200, &b);
}

void tn_v1_apply_topic(tn_broker_t *b, const tn_meta_topic_t *rec)
{
    tn_topic_t *t = NULL;
    if (tn_broker_topic(b, rec->name, strlen(rec->name), false, 0, NULL, &t) != 0)
        return;
    t->max_inflight_part = (uint32_t)TN_MIN(rec->max_inflight, (int64_t)UINT32_MAX);
    t->max_acked_ahead = (uint32_t)TN_MIN(rec->max_acked_ahead, (int64_t)UINT32_MAX);
    if (rec->delivery_mode == TN_DELIVERY_TTL_DISCARD && rec->ttl_ms > 0)
        t->ttl_ms = rec->ttl_ms;
    if (!rec->native)
        return;
    t->own_settings = true;
    t->own_retention_ns =
        rec->retention_ms > INT64_MAX / 1000000 ? INT64_MAX : rec->retention_ms * 1000000;
    t->own_max_attempts = rec->max_attempts;
    tn_topic_set_durability(t, rec->durability);
}

/* --- creating and deleting topics ---------------------------------------------------- */

#define DEFAULT_PARTITIONS 3
#define DEFAULT_VISIBILITY 30000
#define DEFAULT_CAP        1024
/* A topic's retention_ms is 0 (no age limit) or at least an hour: what a
 * lagging child or a slow consumer can count on. */
#define MIN_RETENTION_MS (3600LL * 1000)

/* Why a retention_ms asked for is refused (into err), or false. */
static bool retention_refused(int64_t ms, char *err, size_t errlen)
{
    if (ms == 0 || ms >= MIN_RETENTION_MS)
        return false;
    if (ms < 0)
        snprintf(err, errlen, "invalid argument: retention_ms must be >= 0 (0 means no age limit)");
    else
        snprintf(err, errlen,
                 "invalid argument: retention_ms must be 0 (no age limit) or at least %lld "
                 "(1 hour); got %" PRId64,
                 MIN_RETENTION_MS, ms);
    return true;
}

/* The cross-site guard of state-changing requests. */
static bool api_request(const tn_http_request_t *r)
{
    if (tn_http_header(&r->head, "x-tern-client") != NULL ||
        tn_http_header(&r->head, "x-narad-client") != NULL)
        return true;
    const tn_iov_t *ct = tn_http_header(&r->head, "content-type");
    if (ct == NULL)
        return false;
    static const char *const ok[] = {"application/json", "application/octet-stream"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(ok); i++) {
        size_t n = strlen(ok[i]);
        if (ct->len >= n && strncasecmp(ct->base, ok[i], n) == 0 &&
            (ct->len == n || ct->base[n] == ';' || ct->base[n] == ' '))
            return true;
    }
    return false;
}

bool tn__v1_guard_write(tn_http_request_t *r)
{
    if (api_request(r))
        return true;
    tn__v1_error(r, 415,
                 "state-changing requests need Content-Type application/json or "
                 "application/octet-stream, or an X-Tern-Client header",
                 NULL);
    return false;
}

typedef struct {
    char name[TN_NAME_MAX + 1];
    int64_t partitions;
    int64_t retention_ms;
    int64_t visibility_timeout_ms;
    int64_t max_inflight;
    int64_t max_acked_ahead;
    char delivery_mode[16];
    int64_t ttl_ms;
    int64_t max_attempts;
    char durability[16];
    char owner[TN_USERNAME_MAX + 1];
    char parent[TN_NAME_MAX + 1];
    int64_t fanout_delay_ms;
} create_body_t;

enum {
    CF_NAME,
    CF_PARTITIONS,
    CF_RETENTION,
    CF_VISIBILITY,
    CF_INFLIGHT,
    CF_ACKED_AHEAD,
    CF_MODE,
    CF_TTL,
    CF_ATTEMPTS,
    CF_DURABILITY,
    CF_OWNER,
    CF_PARENT,
    CF_DELAY,
    CF_COUNT
};

static const tn_jfield_t create_fields[] = {
    {"name", TN_JF_STR, offsetof(create_body_t, name), TN_NAME_MAX},
    {"partitions", TN_JF_INT, offsetof(create_body_t, partitions), 0},
    {"retention_ms", TN_JF_INT, offsetof(create_body_t, retention_ms), 0},
    {"visibility_timeout_ms", TN_JF_INT, offsetof(create_body_t, visibility_timeout_ms), 0},
    {"max_in_flight_per_partition", TN_JF_INT, offsetof(create_body_t, max_inflight), 0},
    {"max_acked_ahead_per_partition", TN_JF_INT, offsetof(create_body_t, max_acked_ahead), 0},
    {"delivery_mode", TN_JF_STR, offsetof(create_body_t, delivery_mode), 15},
    {"ttl_ms", TN_JF_INT, offsetof(create_body_t, ttl_ms), 0},
    {"max_attempts", TN_JF_INT, offsetof(create_body_t, max_attempts), 0},
    {"durability", TN_JF_STR, offsetof(create_body_t, durability), 15},
    {"owner", TN_JF_STR, offsetof(create_body_t, owner), TN_USERNAME_MAX},
    {"parent", TN_JF_STR, offsetof(create_body_t, parent), TN_NAME_MAX},
    {"fanout_delay_ms", TN_JF_INT, offsetof(create_body_t, fanout_delay_ms), 0},
};
_Static_assert(TN_ARRAY_SIZE(create_fields) == CF_COUNT, "create_fields and its enum disagree");

/* The record a create body asks for, or a 400 message in err. */
static bool topic_from_body(tn_v1_t *v, const create_body_t *b, const bool *given,
                            tn_meta_topic_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    if (!given[CF_NAME] || !tn_name_valid(b->name, strlen(b->name))) {
        snprintf(err, errlen, "invalid argument: name must match [A-Za-z0-9._-]{1,255}");
        return false;
    }
    if (given[CF_DELAY] && !given[CF_PARENT]) {
        snprintf(err, errlen, "invalid argument: fanout_delay_ms requires parent");
        return false;
    }
    snprintf(t->name, sizeof(t->name), "%s", b->name);
    int64_t parts = given[CF_PARTITIONS] ? b->partitions : DEFAULT_PARTITIONS;
    if (parts < 1 || parts > (int64_t)v->o.max_partitions) {
        snprintf(err, errlen, "invalid argument: partitions must be 1..%u", v->o.max_partitions);
        return false;
    }
    t->partitions = (uint32_t)parts;
    if (given[CF_RETENTION] && retention_refused(b->retention_ms, err, errlen))
        return false;
    t->retention_ms = given[CF_RETENTION] ? b->retention_ms : v->o.default_retention_ms;
    t->visibility_timeout_ms = given[CF_VISIBILITY] && b->visibility_timeout_ms != 0
                                   ? b->visibility_timeout_ms
                                   : DEFAULT_VISIBILITY;
    t->max_inflight = given[CF_INFLIGHT] && b->max_inflight != 0 ? b->max_inflight : DEFAULT_CAP;
    t->max_acked_ahead =
        given[CF_ACKED_AHEAD] && b->max_acked_ahead != 0 ? b->max_acked_ahead : DEFAULT_CAP;
    if (t->retention_ms < 0 || t->visibility_timeout_ms < 0 || t->max_inflight < 0 ||
        t->max_acked_ahead < 0) {
        snprintf(err, errlen, "invalid argument: retention, timeouts and caps must be >= 0");
        return false;
    }
    const char *mode = given[CF_MODE] ? b->delivery_mode : "reliable";
    if (strcmp(mode, "reliable") == 0) {
        t->delivery_mode = TN_DELIVERY_RELIABLE;
        if (given[CF_TTL] && b->ttl_ms != 0) {
            snprintf(err, errlen, "invalid argument: ttl_ms needs delivery_mode ttl_discard");
            return false;
        }
    } else if (strcmp(mode, "ttl_discard") == 0) {
        t->delivery_mode = TN_DELIVERY_TTL_DISCARD;
        if (!given[CF_TTL] || b->ttl_ms <= 0) {
            snprintf(err, errlen, "invalid argument: delivery_mode ttl_discard needs ttl_ms > 0");
            return false;
        }
        t->ttl_ms = b->ttl_ms;
    } else {
        snprintf(err, errlen, "invalid argument: delivery_mode must be reliable or ttl_discard");
        return false;
    }
    if (given[CF_ATTEMPTS] && (b->max_attempts < 0 || b->max_attempts > UINT16_MAX)) {
        snprintf(err, errlen, "invalid argument: max_attempts must be 0..65535");
        return false;
    }
    t->max_attempts = given[CF_ATTEMPTS] ? (uint32_t)b->max_attempts : 0;
    const char *dur = given[CF_DURABILITY] ? b->durability : "durable";
    if (strcmp(dur, "durable") == 0) {
        t->durability = 0;
    } else if (strcmp(dur, "write_ack") == 0) {
        t->durability = 1;
    } else if (strcmp(dur, "relaxed") == 0) {
        t->durability = 2;
    } else {
        snprintf(err, errlen, "invalid argument: durability must be durable, write_ack or relaxed");
        return false;
    }
    t->created_at_ms = tn_now_wall_ms();
    return true;
}

bool tn__v1_can_manage(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t)
{
    bool owner = t->owner[0] != '\0' && strcmp(t->owner, r->principal) == 0;
    return !v->o.security || owner || tn__v1_is_admin(v, r);
}

static bool can_create(tn_v1_t *v, const tn_http_request_t *r, const char *name)
{
    return tn__v1_is_admin(v, r) || tn__v1_has_grant(tn__v1_caller(v, r), TN_GRANT_CREATE, name);
}

typedef struct {
    int64_t partitions;
    int64_t retention_ms;
    int64_t visibility_timeout_ms;
    int64_t max_inflight;
    int64_t max_acked_ahead;
    char owner[TN_USERNAME_MAX + 1];
} patch_body_t;

enum {
    PF_PARTITIONS,
    PF_RETENTION,
    PF_VISIBILITY,
    PF_INFLIGHT,
    PF_ACKED_AHEAD,
    PF_OWNER,
    PF_COUNT
};

/* A PATCH's fields, kept to make the change again from a newer record. */
typedef struct {
    patch_body_t b;
    bool given[PF_COUNT];
} patch_t;

/* One create, change or delete under way; the request may leave before
 * it ends. */
typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client left */
    tn_meta_req_t mreq;
    tn_waiter_t wait;
    char topic[TN_NAME_MAX + 1];
    int64_t ttl_ms;
    uint32_t partitions;
    char parent[TN_NAME_MAX + 1]; /* create-and-attach */
    int64_t delay_ms;
    patch_t patch; /* PATCH */
    int tries;     /* PATCH proposals refused because the record changed */
} op_t;

static void op_cancel(tn_http_request_t *r)
{
    op_t *op = r->data;
    op->r = NULL;
}

static void op_end(op_t *op, int status, const char *msg)
{
    if (op->r != NULL) {
        op->r->on_cancel = NULL;
        if (status == 201 || status == 200) {
            const tn_meta_topic_entry_t *e =
                tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
            tn_buf_t b;
            tn_buf_init(&b);
            if (e != NULL)
                tn__v1_topic_json(op->v, &b, e, false, -1);
            else
                tn_buf_append(&b, "{}", 2);
            tn__v1_respond_buf(op->r, status, &b);
        } else if (status == 204) {
            tn_http_respond(op->r, 204, NULL, NULL, NULL, 0);
        } else {
            tn__v1_error(op->r, status, msg, status == 503 ? "Retry-After: 1\r\n" : NULL);
        }
    }
    tn_free(op);
}

/* Start an operation on c's topic by proposing c; r stays parked until
 * the operation answers it (cb may run before this returns). parent (may
 * be NULL): a creation then attaches the topic to it. false when it could
 * not start, with r answered. */
static bool op_start(tn_v1_t *v, tn_http_request_t *r, const tn_meta_cmd_t *c, tn_meta_cb cb,
                     const char *parent, int64_t delay_ms, const patch_t *patch)
{
    op_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return false;
    }
    op->v = v;
    op->r = r;
    if (parent != NULL)
        snprintf(op->parent, sizeof(op->parent), "%s", parent);
    op->delay_ms = delay_ms;
    if (patch != NULL)
        op->patch = *patch;
    snprintf(op->topic, sizeof(op->topic), "%s", c->topic.name);
    op->ttl_ms = c->topic.ttl_ms;
    op->partitions = c->topic.partitions;
    op->mreq.data = op;
    r->data = op;
    r->on_cancel = op_cancel;
    if (tn_meta_propose(v->meta, &op->mreq, c, cb) != 0) {
        r->on_cancel = NULL;
        tn_free(op);
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
        return false;
    }
    return true;
}

static void create_step(op_t *op);

static void on_channel_recorded(tn_meta_req_t *req, int status)
{
    (void)status; /* recorded, or the catalog was first: either way it is there */
    op_t *op = req->data;
    if (op->parent[0] != '\0') {
        /* The attach answers (201 with the attached child). */
        tn__v1_attach_created(op->v, op->r, op->parent, op->topic, op->delay_ms);
        tn_free(op);
        return;
    }
    op_end(op, 201, NULL);
}

static void on_create_wait(tn_waiter_t *w, int status)
{
    op_t *op = w->data;
    if (status != 0) {
        TN_LOG(TN_LOG_ERROR, "topic %s: creating it in the queue engine failed: %s", op->topic,
               tn_strerror(status));
        op_end(op, 500, "create failed");
        return;
    }
    create_step(op);
}

/* The engine's side: the topic, then its default channel. */
static void create_step(op_t *op)
{
    if (op->v->closing) {
        op_end(op, 503, "shutting down");
        return;
    }
    op->wait.cb = on_create_wait;
    op->wait.data = op;
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(op->v->broker, op->topic, strlen(op->topic), true, op->partitions,
                             &op->wait, &t);
    if (rc == UV_EAGAIN)
        return;
    tn_channel_t *ch = NULL;
    if (rc == 0) {
        if (op->ttl_ms > 0)
            t->ttl_ms = op->ttl_ms;
        rc = tn_topic_channel(t, "default", 7, true, &op->wait, &ch);
        if (rc == UV_EAGAIN)
            return;
    }
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "topic %s: creating it in the queue engine failed: %s", op->topic,
               tn_strerror(rc));
        op_end(op, 500, "create failed");
        return;
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    if (e != NULL)
        tn_v1_apply_topic(op->v->broker, &e->rec);
    /* The default channel is in the record the answer shows. */
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_CHANNEL_PUT;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", op->topic);
    snprintf(c.channel, sizeof(c.channel), "default");
    op->mreq.data = op;
    if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_channel_recorded) != 0)
        op_end(op, 201, NULL);
}

static void on_create_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    if (status == UV_EEXIST) {
        op_end(op, 409, "topic already exists");
        return;
    }
    if (status != 0) {
        op_end(op, 503, "control plane temporarily unavailable");
        return;
    }
    create_step(op);
}

static void on_topic_create(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r))
        return;
    create_body_t b;
    memset(&b, 0, sizeof(b));
    bool given[CF_COUNT];
    char err[192];
    int rc = tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), create_fields, CF_COUNT,
                            &b, given, err, sizeof(err));
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    if (rc != 0 || !topic_from_body(v, &b, given, &c.topic, err, sizeof(err))) {
        tn__v1_error(r, 400, err, NULL);
        return;
    }
    if (v->o.security && !can_create(v, r, c.topic.name)) {
        tn__v1_error(r, 403, "no create grant for this topic name", NULL);
        return;
    }
    tn_topic_t *existing = NULL;
    if (tn_meta_topic_find(tn_meta_state(v->meta), c.topic.name) != NULL ||
        tn_broker_topic(v->broker, c.topic.name, strlen(c.topic.name), false, 0, NULL, &existing) !=
            TN_ENOTFOUND) {
        tn__v1_error(r, 409, "topic already exists", NULL);
        return;
    }
    if (given[CF_PARENT]) {
        const tn_meta_topic_entry_t *pe = tn_meta_topic_find(tn_meta_state(v->meta), b.parent);
        if (pe == NULL) {
            tn__v1_error(r, 404, "parent topic not found", NULL);
            return;
        }
        if (!tn__v1_can_manage(v, r, &pe->rec)) {
            tn__v1_error(r, 403, "attaching needs ownership (or admin) of the parent", NULL);
            return;
        }
        /* Parent partition p feeds child partition p (fanout.h). */
        if (given[CF_PARTITIONS] && c.topic.partitions != pe->rec.partitions) {
            snprintf(err, sizeof(err),
                     "invalid argument: a topic created with a parent has the parent's partition "
                     "count: the parent has %u, the request asks for %u",
                     pe->rec.partitions, c.topic.partitions);
            tn__v1_error(r, 400, err, NULL);
            return;
        }
        c.topic.partitions = pe->rec.partitions;
        const char *msg = NULL;
        int st = tn__v1_link_refusal(v, &pe->rec, &c.topic, b.fanout_delay_ms, &msg);
        if (st != 0) {
            tn__v1_error(r, st, msg, NULL);
            return;
        }
    }
    if (v->o.security)
        snprintf(c.topic.owner, sizeof(c.topic.owner), "%.*s", TN_USERNAME_MAX, r->principal);
    c.type = TN_MC_TOPIC_PUT;
    c.if_absent = true;
    c.topic.native = true;
    (void)op_start(v, r, &c, on_create_recorded, given[CF_PARENT] ? b.parent : NULL,
                   b.fanout_delay_ms, NULL);
}

static const tn_jfield_t patch_fields[] = {
    {"partitions", TN_JF_INT, offsetof(patch_body_t, partitions), 0},
    {"retention_ms", TN_JF_INT, offsetof(patch_body_t, retention_ms), 0},
    {"visibility_timeout_ms", TN_JF_INT, offsetof(patch_body_t, visibility_timeout_ms), 0},
    {"max_in_flight_per_partition", TN_JF_INT, offsetof(patch_body_t, max_inflight), 0},
    {"max_acked_ahead_per_partition", TN_JF_INT, offsetof(patch_body_t, max_acked_ahead), 0},
    {"owner", TN_JF_STR, offsetof(patch_body_t, owner), TN_USERNAME_MAX},
};
_Static_assert(TN_ARRAY_SIZE(patch_fields) == PF_COUNT, "patch_fields and its enum disagree");

static void on_grown(void *arg, int status)
{
    op_t *op = arg;
    if (status != 0) {
        op_end(op, 500, "growing the topic failed");
        return;
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    if (e != NULL)
        tn_v1_apply_topic(op->v->broker, &e->rec);
    op_end(op, 200, NULL);
}

/* The update p makes of cur, into c: true, or false with why it is
 * refused in err. The proposal is refused in turn if the record changes
 * before it lands. */
static bool patch_make(tn_v1_t *v, const patch_t *p, const tn_meta_topic_t *cur, tn_meta_cmd_t *c,
                       char *err, size_t errlen)
{
    const patch_body_t *b = &p->b;
    if (p->given[PF_PARTITIONS] && b->partitions <= (int64_t)cur->partitions) {
        snprintf(err, errlen, "invalid argument: partitions can only grow: the topic has %u",
                 cur->partitions);
        return false;
    }
    if (p->given[PF_PARTITIONS] && b->partitions > v->o.max_partitions) {
        snprintf(err, errlen, "invalid argument: partitions must be at most %u (max-partitions)",
                 v->o.max_partitions);
        return false;
    }
    memset(c, 0, sizeof(*c));
    c->type = TN_MC_TOPIC_PUT;
    c->if_unchanged = true;
    c->expect = tn_meta_topic_fingerprint(cur);
    c->topic = *cur;
    if (p->given[PF_PARTITIONS])
        c->topic.partitions = (uint32_t)b->partitions;
    if (p->given[PF_RETENTION])
        c->topic.retention_ms = b->retention_ms;
    if (p->given[PF_VISIBILITY])
        c->topic.visibility_timeout_ms =
            b->visibility_timeout_ms ? b->visibility_timeout_ms : DEFAULT_VISIBILITY;
    if (p->given[PF_INFLIGHT])
        c->topic.max_inflight = b->max_inflight ? b->max_inflight : DEFAULT_CAP;
    if (p->given[PF_ACKED_AHEAD])
        c->topic.max_acked_ahead = b->max_acked_ahead ? b->max_acked_ahead : DEFAULT_CAP;
    if (p->given[PF_OWNER])
        snprintf(c->topic.owner, sizeof(c->topic.owner), "%s", b->owner);
    return true;
}

static void grow_engine(op_t *op);

static void on_engine_idle(tn_waiter_t *w, int status)
{
    (void)status; /* what it waited for ended: look again */
    grow_engine(w->data);
}

/* Grow the engine's topic to the recorded partitions. The catalog follows
 * every change of the replica too, so the topic may be growing already,
 * or placing partitions, or making a channel: this waits for that and
 * looks again. */
static void grow_engine(op_t *op)
{
    tn_topic_t *t = NULL;
    op->wait.cb = on_engine_idle;
    op->wait.data = op;
    int rc = op->v->closing ? TN_ECLOSED
                            : tn_broker_topic(op->v->broker, op->topic, strlen(op->topic), false, 0,
                                              &op->wait, &t);
    if (rc == UV_EAGAIN)
        return;
    if (rc == TN_ECLOSED) {
        op_end(op, 503, "shutting down");
        return;
    }
    if (rc != 0 || t->nparts >= op->partitions) {
        on_grown(op, 0); /* grown by the catalog, or gone from the engine: the record answers */
        return;
    }
    if (tn_topic_wait_idle(t, &op->wait) == UV_EAGAIN)
        return;
    rc = tn_topic_grow(t, op->partitions, on_grown, op);
    if (rc != 0)
        op_end(op, 503, "growing the topic failed");
}

static void on_patch_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    if (status == TN_ENOTFOUND) { /* deleted while the change was on its way */
        op_end(op, 404, "topic not found");
        return;
    }
    if (status == TN_ECHANGED && ++op->tries < TN__V1_CHANGE_TRIES && !op->v->closing) {
        /* Another change landed first: make this one again on top of it. */
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
        tn_meta_cmd_t c;
        char refusal[160];
        if (e == NULL) {
            op_end(op, 404, "topic not found");
        } else if (!patch_make(op->v, &op->patch, &e->rec, &c, refusal, sizeof(refusal))) {
            op_end(op, 409, refusal); /* e.g. it grew to the asked count meanwhile */
        } else {
            op->partitions = c.topic.partitions; /* before: the answer may come at once */
            if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_patch_recorded) != 0)
                op_end(op, 503, "control plane temporarily unavailable");
        }
        return;
    }
    if (status == TN_ECHANGED) {
        op_end(op, 409, "the topic kept changing while this change was applied; send it again");
        return;
    }
    if (status != 0) {
        op_end(op, 503, "control plane temporarily unavailable");
        return;
    }
    grow_engine(op); /* more partitions: the record has them; now the engine's topic */
}

static void on_topic_patch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r))
        return;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return;
    if (!tn__v1_can_manage(v, r, &e->rec)) {
        tn__v1_error(r, 403, "only the topic's owner or an admin may change it", NULL);
        return;
    }
    patch_body_t b;
    memset(&b, 0, sizeof(b));
    bool given[PF_COUNT];
    char err[192];
    int rc = tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), patch_fields, PF_COUNT,
                            &b, given, err, sizeof(err));
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    bool any = false;
    for (int i = 0; i < PF_COUNT; i++)
        any = any || given[i];
    bool refused = rc != 0;
    if (!refused && !any) {
        snprintf(err, sizeof(err),
                 "invalid argument: give at least one of partitions, retention_ms, "
                 "visibility_timeout_ms, max_in_flight_per_partition, "
                 "max_acked_ahead_per_partition, owner");
        refused = true;
    } else if (!refused && given[PF_RETENTION]) {
        refused = retention_refused(b.retention_ms, err, sizeof(err));
    }
    /* Adopting a topic (an NSQ door's, say) protects it on every door
     * (api/access.h); "" gives it back to the open doors. */
    if (!refused && given[PF_OWNER] && v->o.security && !tn__v1_is_admin(v, r)) {
        tn__v1_error(r, 403, "only an admin may change a topic's owner", NULL);
        return;
    }
    if (!refused && given[PF_OWNER] && b.owner[0] != '\0' &&
        tn_meta_user_find(tn_meta_state(v->meta), b.owner) == NULL) {
        snprintf(err, sizeof(err), "invalid argument: owner %s is not a user", b.owner);
        refused = true;
    }
    if (!refused && (b.visibility_timeout_ms < 0 || b.max_inflight < 0 || b.max_acked_ahead < 0)) {
        snprintf(err, sizeof(err), "invalid argument: timeouts and caps must be >= 0");
        refused = true;
    }
    patch_t p;
    p.b = b;
    memcpy(p.given, given, sizeof(p.given));
    tn_meta_cmd_t c;
    if (refused || !patch_make(v, &p, &e->rec, &c, err, sizeof(err))) {
        tn__v1_error(r, 400, err, NULL);
        return;
    }
    (void)op_start(v, r, &c, on_patch_recorded, NULL, 0, &p);
}

static void on_engine_deleted(void *arg, int status)
{
    op_t *op = arg;
    if (status != 0 && status != TN_ENOTFOUND) { /* not there: nothing to remove */
        TN_LOG(TN_LOG_ERROR, "topic %s: deleting it in the queue engine failed: %s", op->topic,
               tn_strerror(status));
        op_end(op, 500, "delete failed");
        return;
    }
    op_end(op, 204, NULL);
}

static void on_delete_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    if (status == TN_ENOTFOUND) {
        op_end(op, 404, "topic not found");
        return;
    }
    if (status != 0) {
        op_end(op, 503, "control plane temporarily unavailable");
        return;
    }
    /* The engine's part (waiting for a creation or growth under way). */
    if (op->v->closing) {
        op_end(op, 503, "shutting down");
        return;
    }
    /* Its children stand alone now (the delete detached them): their
     * fan-out runners stop before the topic goes. */
    tn_fanout_sync(op->v->fanout);
    if (tn_broker_delete(op->v->broker, op->topic, NULL, on_engine_deleted, op) != 0)
        op_end(op, 503, "out of memory");
}

static void on_topic_delete(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return;
    if (!tn__v1_can_manage(v, r, &e->rec)) {
        tn__v1_error(r, 403, "only the topic's owner or an admin may delete it", NULL);
        return;
    }
    if (!tn__v1_caught_up(v, r))
        return;
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    (void)op_start(v, r, &c, on_delete_recorded, NULL, 0, NULL);
}

/* --- produce ------------------------------------------------------------------ */

#define MAX_KEY 1024

/* 503 for a produce to a partition whose log lives on another node (the
 * engine's TN_EREMOTE): this node does not route it yet. owner 0: not
 * placed yet (a retry soon may land), or with partition UINT32_MAX: no
 * partition of the topic is here. */
static void answer_remote(tn_http_request_t *r, uint32_t partition, uint64_t owner)
{
    tn_buf_t b;
    tn_buf_init(&b);
    if (partition == UINT32_MAX)
        tn__v1_appendf(&b, "{\"error\":\"every partition of this topic lives on another node; "
                           "produce there (this node does not route produces yet)\"");
    else if (owner != 0)
        tn__v1_appendf(
            &b,
            "{\"error\":\"partition %" PRIu32 " lives on node %" PRIu64
            "; produce there (this node does not route produces yet)\",\"partition\":%" PRIu32
            ",\"owner_node\":\"%" PRIu64 "\"",
            partition, owner, partition, owner);
    else
        tn__v1_appendf(&b,
                       "{\"error\":\"partition %" PRIu32
                       " is not placed on a node yet\",\"partition\":%" PRIu32
                       ",\"owner_node\":null",
                       partition, partition);
    tn_buf_append(&b, "}\n", 2);
    tn_http_respond(r, 503, JSON, owner == 0 ? "Retry-After: 1\r\n" : NULL, tn_buf_data(&b),
                    tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* The partition a TN_EREMOTE publish names for answer_remote. */
static uint32_t remote_partition(const tn_pub_t *p)
{
    return p->pinned ? p->partition : UINT32_MAX;
}

typedef struct {
    tn_pub_t pub;
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    uint32_t charge; /* counted against its user */
    char ident[72];
} produce_t;

/* Count a produce of n messages against r's user; false after 429. */
static bool produce_take(tn_v1_t *v, tn_http_request_t *r, uint32_t n, uint32_t *charge)
{
    if (tn_quota_take(&v->produces, v->o.security ? r->principal : "", n, charge))
        return true;
    tn__v1_error(r, 429, "too many concurrent produces for this user", "Retry-After: 1\r\n");
    return false;
}

bool tn__v1_can_do(tn_v1_t *v, const tn_http_request_t *r, uint8_t action, const char *topic)
{
    return tn__v1_is_admin(v, r) || tn__v1_has_grant(tn__v1_caller(v, r), action, topic);
}

uint32_t tn__v1_key_hash(const char *k, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)k[i];
        h *= 16777619u;
    }
    return h;
}

static void produce_cancel(tn_http_request_t *r)
{
    produce_t *pr = r->data;
    pr->r = NULL;
}

static void on_produced(tn_pub_t *p, int status)
{
    produce_t *pr = p->data;
    tn_http_request_t *r = pr->r;
    uint32_t rpart = remote_partition(p);
    uint64_t owner = p->owner;
    tn_quota_give(&pr->v->produces, pr->ident, pr->charge);
    tn_pub_fini(&pr->pub);
    tn_free(pr);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    if (status == 0)
        tn_http_respond(r, 202, NULL, NULL, NULL, 0);
    else if (status == TN_EREMOTE)
        answer_remote(r, rpart, owner);
    else if (status == TN_EDISKHIGH)
        tn__v1_error(r, 429, "disk above the high watermark", "Retry-After: 1\r\n");
    else
        tn__v1_error(r, 500, "produce failed", NULL);
}

/* The path's topic for an operation needing a grant of action (produce or
 * consume); write: a state-changing request (the cross-site guard). NULL
 * after answering 415, 404 or 403. A produce to a delay child is 409. */
static const tn_meta_topic_entry_t *granted_topic(tn_v1_t *v, tn_http_request_t *r, uint8_t action,
                                                  bool write, char topic[TN_NAME_MAX + 1])
{
    if (write && !tn__v1_guard_write(r))
        return NULL;
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return NULL;
    if (v->o.security && !tn__v1_can_do(v, r, action, topic)) {
        tn__v1_error(r, 403,
                     action == TN_GRANT_PRODUCE ? "no produce grant for this topic"
                                                : "no consume grant for this topic",
                     NULL);
        return NULL;
    }
    if (action == TN_GRANT_PRODUCE && e->rec.parent[0] != '\0' && e->rec.fanout_delay_ms > 0) {
        tn__v1_error(r, 409, "direct produce to a delay child is not allowed", NULL);
        return NULL;
    }
    return e;
}

static void on_produce(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = granted_topic(v, r, TN_GRANT_PRODUCE, true, topic);
    if (e == NULL)
        return;
    if (tn_buf_size(&r->body) == 0) {
        tn__v1_error(r, 400, "message required", NULL);
        return;
    }
    char key[MAX_KEY + 1];
    int krc = tn_http_query(r->head.query, "key", key, sizeof(key));
    if (krc < 0) {
        tn__v1_error(r, 400, "invalid argument: key is malformed or longer than 1024 bytes", NULL);
        return;
    }
    int64_t part = -1;
    int q = tn__v1_query_int(r, "partition", &part);
    if (q < 0 || (q == 1 && part >= (int64_t)e->rec.partitions)) {
        tn__v1_error(r, 400, "invalid argument: partition out of range", NULL);
        return;
    }
    uint32_t charge = 0;
    if (!produce_take(v, r, 1, &charge))
        return;
    produce_t *pr = tn_calloc(1, sizeof(*pr));
    if (pr == NULL || tn_pub_init(&pr->pub, 1) != 0 ||
        tn_pub_set(&pr->pub, 0, tn_buf_data(&r->body), tn_buf_size(&r->body)) != 0 ||
        (krc == 1 && key[0] != '\0' && tn_pub_set_key(&pr->pub, 0, key, strlen(key)) != 0)) {
        if (pr != NULL)
            tn_pub_fini(&pr->pub);
        tn_free(pr);
        tn_quota_give(&v->produces, r->principal, charge);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    pr->v = v;
    pr->charge = charge;
    snprintf(pr->ident, sizeof(pr->ident), "%s", r->principal);
    if (q == 1) {
        pr->pub.pinned = true;
        pr->pub.pin = (uint32_t)part;
    } else if (krc == 1 && key[0] != '\0') {
        pr->pub.pinned = true;
        pr->pub.pin = tn__v1_key_hash(key, strlen(key)) % e->rec.partitions;
    }
    pr->pub.data = pr;
    pr->r = r;
    r->data = pr;
    r->on_cancel = produce_cancel;
    int rc = tn_broker_publish(v->broker, topic, strlen(topic), &pr->pub, 0, on_produced);
    if (rc != 0) {
        r->on_cancel = NULL;
        tn_quota_give(&v->produces, pr->ident, pr->charge);
        uint32_t rpart = remote_partition(&pr->pub);
        uint64_t owner = pr->pub.owner;
        tn_pub_fini(&pr->pub);
        tn_free(pr);
        if (rc == TN_EREMOTE)
            answer_remote(r, rpart, owner);
        else if (rc == TN_EDISKHIGH)
            tn__v1_error(r, 429, "disk above the high watermark", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 500, "produce failed", NULL);
    }
}

/* --- batch produce ------------------------------------------------------------ */

/* One batch produce: a publish per partition it touches. */
typedef struct {
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    uint32_t charge; /* counted against its user */
    char ident[72];
    uint32_t pending;     /* publishes not ended */
    uint32_t count;       /* messages */
    int status;           /* the first failure, or 0 */
    uint32_t remote_part; /* with status TN_EREMOTE: answer_remote's */
    uint64_t remote_owner;
    uint32_t npubs;
    tn_pub_t pubs[];
} batch_op_t;

static void batch_cancel(tn_http_request_t *r)
{
    batch_op_t *op = r->data;
    op->r = NULL;
}

static void batch_end(batch_op_t *op)
{
    tn_http_request_t *r = op->r;
    int status = op->status;
    uint32_t count = op->count;
    uint32_t rpart = op->remote_part;
    uint64_t owner = op->remote_owner;
    tn_quota_give(&op->v->produces, op->ident, op->charge);
    for (uint32_t i = 0; i < op->npubs; i++)
        tn_pub_fini(&op->pubs[i]);
    tn_free(op);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    if (status == 0) {
        char body[64];
        int n = snprintf(body, sizeof(body), "{\"accepted\":%" PRIu32 "}\n", count);
        tn_http_respond(r, 202, JSON, NULL, body, (size_t)n);
    } else if (status == TN_EREMOTE) {
        answer_remote(r, rpart, owner);
    } else if (status == TN_EDISKHIGH) {
        tn__v1_error(r, 429, "disk above the high watermark", "Retry-After: 1\r\n");
    } else {
        tn__v1_error(r, 500, "produce failed", NULL);
    }
}

static void on_batch_published(tn_pub_t *p, int status)
{
    batch_op_t *op = p->data;
    if (status != 0 && op->status == 0) {
        op->status = status;
        op->remote_part = remote_partition(p);
        op->remote_owner = p->owner;
    }
    if (--op->pending == 0)
        batch_end(op);
}

static void on_produce_batch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = granted_topic(v, r, TN_GRANT_PRODUCE, true, topic);
    if (e == NULL)
        return;
    tn_batch_t b;
    char err[192];
    int rc = tn_batch_decode(tn_buf_data(&r->body), tn_buf_size(&r->body), TN_V1_BATCH_MAX,
                             v->o.max_msg_size, MAX_KEY, &b, err, sizeof(err));
    if (rc != 0) {
        if (rc == UV_ENOMEM)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 400, err, NULL);
        return;
    }
    uint32_t nparts = e->rec.partitions;
    /* One partition for the messages without a key: a local one, when the
     * engine has the topic (the others live on other nodes). */
    tn_topic_t *bt = NULL;
    bool live = tn_broker_topic(v->broker, topic, strlen(topic), false, 0, NULL, &bt) == 0 &&
                bt->nparts >= nparts;
    uint32_t keyless = v->next_part++ % nparts;
    for (uint32_t k = 0; live && k < nparts && !tn_topic_part_local(bt, keyless); k++)
        keyless = v->next_part++ % nparts;
    uint32_t *part = tn_calloc(b.n, sizeof(*part));
    uint32_t *per = tn_calloc(nparts, sizeof(*per));
    batch_op_t *op = NULL;
    tn_iov_t *bodies = tn_calloc(b.n, sizeof(*bodies));
    uint32_t used = 0;
    rc = part == NULL || per == NULL || bodies == NULL ? UV_ENOMEM : 0;
    for (uint32_t i = 0; rc == 0 && i < b.n; i++) {
        const tn_batch_msg_t *m = &b.msgs[i];
        if (m->partition >= (int64_t)nparts) {
            snprintf(err, sizeof(err), "message %" PRIu32 ": partition out of range", i);
            rc = UV_EINVAL;
            break;
        }
        part[i] = m->partition >= 0 ? (uint32_t)m->partition
                  : m->key_len > 0  ? tn__v1_key_hash(b.data.base + m->key_off, m->key_len) % nparts
                                    : keyless;
        used += per[part[i]]++ == 0;
    }
    /* All or nothing: refused before anything is published when a
     * partition it needs lives on another node. */
    uint32_t rpart = UINT32_MAX;
    for (uint32_t p = 0; rc == 0 && live && p < nparts; p++) {
        if (per[p] > 0 && !tn_topic_part_local(bt, p)) {
            rpart = p;
            rc = TN_EREMOTE;
        }
    }
    if (rc == 0 && tn_store_disk_high(v->broker->store))
        rc = TN_EDISKHIGH;
    if (rc == 0) {
        op = tn_calloc(1, sizeof(*op) + used * sizeof(tn_pub_t));
        rc = op == NULL ? UV_ENOMEM : 0;
    }
    /* One publish per partition, its messages in batch order. */
    for (uint32_t p = 0; rc == 0 && p < nparts; p++) {
        if (per[p] == 0)
            continue;
        tn_pub_t *pub = &op->pubs[op->npubs];
        uint32_t k = 0;
        for (uint32_t i = 0; i < b.n; i++) {
            if (part[i] == p)
                bodies[k++] = tn_iov(b.data.base + b.msgs[i].payload_off, b.msgs[i].payload_len);
        }
        rc = tn_pub_init(pub, per[p]);
        if (rc == 0)
            op->npubs++;
        rc = rc ? rc : tn_pub_set_all(pub, bodies);
        k = 0;
        for (uint32_t i = 0; rc == 0 && i < b.n; i++) {
            if (part[i] != p)
                continue;
            if (b.msgs[i].key_len > 0)
                rc = tn_pub_set_key(pub, k, b.data.base + b.msgs[i].key_off, b.msgs[i].key_len);
            k++;
        }
        pub->pinned = true;
        pub->pin = p;
        pub->data = op;
    }
    tn_free(part);
    tn_free(per);
    tn_free(bodies);
    uint32_t count = b.n;
    tn_batch_fini(&b);
    if (rc != 0) {
        if (op != NULL) {
            for (uint32_t i = 0; i < op->npubs; i++)
                tn_pub_fini(&op->pubs[i]);
            tn_free(op);
        }
        if (rc == UV_EINVAL)
            tn__v1_error(r, 400, err, NULL);
        else if (rc == TN_EREMOTE)
            answer_remote(r, rpart, bt->parts[rpart]->owner);
        else if (rc == TN_EDISKHIGH)
            tn__v1_error(r, 429, "disk above the high watermark", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    op->r = r;
    op->v = v;
    op->count = count;
    if (!produce_take(v, r, count, &op->charge)) {
        for (uint32_t i = 0; i < op->npubs; i++)
            tn_pub_fini(&op->pubs[i]);
        tn_free(op);
        return;
    }
    snprintf(op->ident, sizeof(op->ident), "%s", r->principal);
    op->pending = op->npubs + 1; /* held until every publish started */
    r->data = op;
    r->on_cancel = batch_cancel;
    for (uint32_t i = 0; i < op->npubs; i++) {
        int prc =
            tn_broker_publish(v->broker, topic, strlen(topic), &op->pubs[i], 0, on_batch_published);
        if (prc != 0)
            on_batch_published(&op->pubs[i], prc);
    }
    on_batch_published(&op->pubs[0], 0);
}

/* --- consume and settle -------------------------------------------------------- */

#define EPHEMERAL_SUFFIX "#ephemeral"

/* The `channel` query parameter ("default" when absent) into out; false
 * after answering 400. */
static bool query_channel(tn_http_request_t *r, char out[TN_NAME_MAX + 1])
{
    int rc = tn_http_query(r->head.query, "channel", out, TN_NAME_MAX + 1);
    if (rc == 0) {
        snprintf(out, TN_NAME_MAX + 1, "default");
        return true;
    }
    size_t n = rc == 1 ? strlen(out) : 0;
    size_t k = sizeof(EPHEMERAL_SUFFIX) - 1;
    if (n >= k && strcmp(out + n - k, EPHEMERAL_SUFFIX) == 0) {
        tn__v1_error(
            r, 400,
            "invalid argument: ephemeral channels live only while a connected consumer holds "
            "them (NSQ TCP or the live feed)",
            NULL);
        return false;
    }
    if (rc != 1 || !tn_name_valid(out, n)) {
        tn__v1_error(r, 400, "invalid argument: channel must match [A-Za-z0-9._-]{1,255}", NULL);
        return false;
    }
    return true;
}

/* `wait`: a Go-style duration (negative means 0), clamped to the most
 * allowed. false after answering 400. */
static bool query_wait(tn_v1_t *v, tn_http_request_t *r, int64_t *out)
{
    char buf[64];
    int rc = tn_http_query(r->head.query, "wait", buf, sizeof(buf));
    *out = 0;
    if (rc == 0 || (rc == 1 && buf[0] == '\0'))
        return true;
    int64_t ns = 0;
    const char *d = buf[0] == '-' ? buf + 1 : buf;
    if (rc != 1 || tn_parse_duration_ns(d, &ns) != 0) {
        tn__v1_error(r, 400, "invalid argument: wait must be a duration such as 500ms or 5s", NULL);
        return false;
    }
    if (buf[0] != '-')
        *out = TN_MIN(ns / 1000000, v->o.max_consume_wait_ms);
    return true;
}

static void on_consume(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = granted_topic(v, r, TN_GRANT_CONSUME, false, topic);
    if (e == NULL)
        return;
    tn_consume_args_t a;
    memset(&a, 0, sizeof(a));
    snprintf(a.topic, sizeof(a.topic), "%s", topic);
    if (!query_channel(r, a.channel) || !query_wait(v, r, &a.wait_ms))
        return;
    int64_t part = 0;
    int64_t offset = 0;
    int64_t max = 0;
    int qp = tn__v1_query_int(r, "partition", &part);
    int qo = tn__v1_query_int(r, "offset", &offset);
    int qm = tn__v1_query_int(r, "max", &max);
    if (qp < 0 || (qp == 1 && part >= (int64_t)e->rec.partitions)) {
        tn__v1_error(r, 400, "invalid argument: partition out of range", NULL);
        return;
    }
    if (qo < 0) {
        tn__v1_error(r, 400, "invalid argument: offset must be a non-negative integer", NULL);
        return;
    }
    if (qo == 1 && qp != 1) {
        tn__v1_error(r, 400, "partition required for replay-mode consume", NULL);
        return;
    }
    if (qm != 0) {
        if (qm < 0 || max < 1 || max > TN_CONSUME_BATCH_MAX) {
            tn__v1_error(r, 400, "invalid argument: max must be 1..100", NULL);
            return;
        }
        if (tn_http_header(&r->head, "x-tern-client") == NULL &&
            tn_http_header(&r->head, "x-narad-client") == NULL) {
            tn__v1_error(r, 400, "a batch consume (max) needs an X-Tern-Client header", NULL);
            return;
        }
        if (qo == 1) {
            tn__v1_error(r, 400,
                         "invalid argument: max does not combine with offset (replay reads one)",
                         NULL);
            return;
        }
    }
    a.partitions = e->rec.partitions;
    a.visibility_ms = e->rec.visibility_timeout_ms;
    a.pinned = qp == 1;
    a.partition = (uint32_t)part;
    a.replay = qo == 1;
    a.offset = (uint64_t)offset;
    a.max = (uint32_t)max;
    a.ident = v->o.security ? r->principal : "";
    tn_consume_start(v->consume, r, &a);
}

/* `extend`: absent, empty or false acks; true or 1 extends; 0 nacks.
 * false after answering 400. */
static bool query_extend(tn_http_request_t *r, tn_settle_t *how)
{
    char ext[16];
    int rc = tn_http_query(r->head.query, "extend", ext, sizeof(ext));
    if (rc == 0 || (rc == 1 && (ext[0] == '\0' || strcmp(ext, "false") == 0))) {
        *how = TN_SETTLE_ACK;
    } else if (rc == 1 && (strcmp(ext, "true") == 0 || strcmp(ext, "1") == 0)) {
        *how = TN_SETTLE_EXTEND;
    } else if (rc == 1 && strcmp(ext, "0") == 0) {
        *how = TN_SETTLE_NACK;
    } else {
        tn__v1_error(r, 400, "invalid argument: extend must be true, false, 1 or 0", NULL);
        return false;
    }
    return true;
}

static void on_ack(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = granted_topic(v, r, TN_GRANT_CONSUME, true, topic);
    if (e == NULL)
        return;
    char handle[96];
    int rc = tn_http_query(r->head.query, "receipt_handle", handle, sizeof(handle));
    if (rc == 0 || (rc == 1 && handle[0] == '\0')) {
        tn__v1_error(r, 400, "receipt_handle required", NULL);
        return;
    }
    uint32_t p, nonce;
    uint64_t off;
    if (rc != 1 || tn_receipt_parse(handle, strlen(handle), &p, &off, &nonce) != 0) {
        tn__v1_error(r, 400, "receipt handle is malformed", NULL);
        return;
    }
    tn_settle_t how;
    char channel[TN_NAME_MAX + 1];
    if (!query_extend(r, &how) || !query_channel(r, channel))
        return;
    rc = tn_consume_settle(v->consume, topic, channel, p, off, nonce, how,
                           e->rec.visibility_timeout_ms);
    if (rc == 0)
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
    else if (rc == UV_ENOBUFS)
        tn__v1_error(r, 503, "acked-ahead set is full; head of queue may be stuck",
                     "Retry-After: 1\r\n");
    else
        tn__v1_error(r, 410, "receipt handle no longer matches an active reservation", NULL);
}

static void on_ack_batch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = granted_topic(v, r, TN_GRANT_CONSUME, true, topic);
    if (e == NULL)
        return;
    tn_settle_t how;
    char channel[TN_NAME_MAX + 1];
    if (!query_extend(r, &how) || !query_channel(r, channel))
        return;
    char(*handles)[TN_HANDLE_MAX] = tn_calloc(TN_CONSUME_BATCH_MAX, TN_HANDLE_MAX);
    if (handles == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    uint32_t n = 0;
    char err[160];
    int rc = tn_batch_handles(tn_buf_data(&r->body), tn_buf_size(&r->body), TN_CONSUME_BATCH_MAX,
                              handles, &n, err, sizeof(err));
    if (rc != 0) {
        tn_free(handles);
        if (rc == UV_ENOMEM)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 400, err, NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"results\":[", 12);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p, nonce;
        uint64_t off;
        int status;
        const char *msg = NULL;
        if (tn_receipt_parse(handles[i], strlen(handles[i]), &p, &off, &nonce) != 0) {
            status = 400;
            msg = "receipt handle is malformed";
        } else {
            rc = tn_consume_settle(v->consume, topic, channel, p, off, nonce, how,
                                   e->rec.visibility_timeout_ms);
            status = rc == 0 ? 204 : rc == UV_ENOBUFS ? 503 : 410;
            msg = rc == 0            ? NULL
                  : rc == UV_ENOBUFS ? "acked-ahead set is full; head of queue may be stuck"
                                     : "receipt handle no longer matches an active reservation";
        }
        tn_buf_append(&b,
                      i > 0 ? ",{\"receipt_handle\":" : "{\"receipt_handle\":", i > 0 ? 19 : 18);
        tn__v1_json_str(&b, handles[i]);
        tn__v1_appendf(&b, ",\"status\":%d", status);
        if (msg != NULL) {
            tn_buf_append(&b, ",\"error\":", 9);
            tn__v1_json_str(&b, msg);
        }
        tn_buf_append(&b, "}", 1);
    }
    tn_buf_append(&b, "]}", 2);
    tn_free(handles);
    tn__v1_respond_buf(r, 200, &b);
}

/* --- lifetime ------------------------------------------------------------------ */

int tn_v1_init(tn_v1_t *v, uv_loop_t *loop, tn_meta_t *meta, tn_broker_t *b, const tn_v1_opts_t *o)
{
    memset(v, 0, sizeof(*v));
    v->meta = meta;
    v->broker = b;
    v->loop = loop;
    tn_quota_init(&v->produces, o->max_produces_per_user);
    v->o = *o;
    tn_authn_opts_t ao;
    tn_authn_opts_default(&ao);
    tn_consume_opts_t co = {o->max_consumes_per_user};
    int rc = tn_consume_new(loop, b, &co, &v->consume);
    rc = rc ? rc : tn_fanout_new(loop, b, meta, &v->fanout);
    return rc != 0 ? rc : tn_authn_new(loop, &ao, lookup, v, &v->authn);
}

int tn_v1_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_guard(srv, "/v1", guard, v);
    rc = rc ? rc : tn_http_guard_not_found(srv, "/v1", "{\"error\":\"not found\"}\n");
    /* /metrics on this listener names every topic: it takes the same
     * credentials (a listener of its own, metrics-address, stays open). */
    rc = rc ? rc : tn_http_guard(srv, "/metrics", guard, v);
    /* nsqd's endpoints that name a topic or list them (api/nsq_http.c
     * checks the rights on protected topics). */
    static const char *const nsq_paths[] = {"/pub",      "/mpub",     "/topic/",
                                            "/channel/", "/stats",    "/lookup",
                                            "/topics",   "/channels", "/nodes"};
    for (size_t i = 0; rc == 0 && i < TN_ARRAY_SIZE(nsq_paths); i++)
        rc = tn_http_guard(srv, nsq_paths[i], nsq_guard, v);
    rc = rc ? rc : tn__v1_users_register(srv, v);
    rc = rc ? rc : tn__v1_cluster_register(srv, v);
    rc = rc ? rc : tn__v1_children_register(srv, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/topics", 0, NULL, on_topics_list, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/topics/{topic}", 0, NULL, on_topic_get, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics", TN_JSON_MAX_BODY, "request body too large",
                            on_topic_create, v);
    rc = rc ? rc : tn_http_route(srv, "DELETE", "/v1/topics/{topic}", 0, NULL, on_topic_delete, v);
    rc = rc ? rc
            : tn_http_route(srv, "PATCH", "/v1/topics/{topic}", TN_JSON_MAX_BODY,
                            "request body too large", on_topic_patch, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/produce", v->o.max_msg_size,
                            "request body too large", on_produce, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/topics/{topic}/consume", 0, NULL, on_consume, v);
    rc = rc ? rc : tn_http_route(srv, "POST", "/v1/topics/{topic}/ack", 0, NULL, on_ack, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/produce/batch", TN_V1_BATCH_MAX_BODY,
                            "request body too large", on_produce_batch, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/ack/batch", TN_JSON_MAX_BODY,
                            "request body too large", on_ack_batch, v);
    return rc;
}

void tn_v1_close(tn_v1_t *v)
{
    v->closing = true;
    tn_consume_close(v->consume);
    v->consume = NULL;
    tn_fanout_close(v->fanout);
    v->fanout = NULL;
    tn__v1_users_close(v);
    tn_quota_fini(&v->produces);
    if (v->authn != NULL)
        tn_authn_close(v->authn, NULL, NULL);
    v->authn = NULL;
}
