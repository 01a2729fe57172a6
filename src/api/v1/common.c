/* The helpers every /v1 route file uses (common.h): errors and JSON
 * output, the access checks, the cross-site guard of state-changing
 * requests, a topic as JSON, and shared parsing. It includes none of the
 * route files.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/err.h"
#include "api/access.h"
#include "api/drain.h"
#include "cluster/replica.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void tn__v1_error(tn_http_request_t *r, int status, const char *msg, const char *headers)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"error\":\"", 10);
    tn_buf_json_escape(&b, msg);
    tn_buf_append(&b, "\"}\n", 3);
    tn_http_respond(r, status, TN__V1_JSON, headers, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

void tn__v1_end(tn_http_request_t *r, int status, const char *msg, tn_buf_t *body)
{
    if (r != NULL) {
        r->on_cancel = NULL;
        if (status >= 300) {
            tn__v1_error(r, status, msg, status == 503 ? "Retry-After: 1\r\n" : NULL);
        } else if (body != NULL && tn_buf_size(body) > 0) {
            tn__v1_respond_buf(r, status, body); /* releases body */
            return;
        } else {
            tn_http_respond(r, status, NULL, NULL, NULL, 0);
        }
    }
    if (body != NULL)
        tn_buf_fini(body);
}

bool tn__v1_draining(tn_v1_t *v, tn_http_request_t *r)
{
    if (!tn_drain_active(v->drain))
        return false;
    tn__v1_error(r, 503, "the node is draining (it stops soon); retry on another node",
                 "Retry-After: 1\r\n");
    return true;
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
    tn_http_respond(r, status, TN__V1_JSON, NULL, tn_buf_data(b), tn_buf_size(b));
    tn_buf_fini(b);
}

void tn__v1_nsq_refuse(tn_http_request_t *r, int status, const char *code)
{
    char body[96];
    int n = snprintf(body, sizeof(body), "{\"message\":\"%s\"}", code);
    const char *hdrs = status == 401   ? "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                                         "WWW-Authenticate: Basic realm=\"tern\"\r\n"
                       : status == 429 ? "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                                         "Retry-After: 12\r\n"
                       : status == 503 ? "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                                         "Retry-After: 1\r\n"
                                       : "X-NSQ-Content-Type: nsq; version=1.0\r\n";
    tn_http_respond(r, status, "application/json; charset=utf-8", hdrs, body, (size_t)n);
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
    return tn_access_user_admin(tn__v1_caller(v, r));
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
    /* A replica behind its leader (a node just restarted, an election)
     * cannot tell "no such topic" from "not heard of it yet". */
    if (e == NULL && !r->confirmed && !tn_meta_caught_up(v->meta))
        tn__v1_error(r, 503, "control plane not caught up", "Retry-After: 1\r\n");
    else if (e == NULL)
        tn__v1_error(r, 404, "topic not found", NULL);
    return e;
}

bool tn__v1_path_partition(tn_http_request_t *r, const tn_meta_topic_entry_t *e, uint32_t *out)
{
    const tn_iov_t *pp = tn_http_param(r, "p");
    char buf[12] = "";
    if (pp != NULL && pp->len > 0 && pp->len < sizeof(buf)) {
        memcpy(buf, pp->base, pp->len);
        buf[pp->len] = '\0';
    }
    char *end = NULL;
    unsigned long n = strtoul(buf, &end, 10);
    if (buf[0] < '0' || buf[0] > '9' || *end != '\0' || n >= e->rec.partitions) {
        tn__v1_error(r, 404, "no such partition", NULL);
        return false;
    }
    *out = (uint32_t)n;
    return true;
}

/* A request parked by tn__v1_caught_up until this replica is confirmed
 * current. */
typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client went away */
    tn_http_handler_cb again;
} current_wait_t;

static void current_cancel(tn_http_request_t *r)
{
    current_wait_t *w = r->data;
    w->r = NULL; /* freed when the confirmation answers */
}

static void on_current(void *arg, int status)
{
    current_wait_t *w = arg;
    tn_http_request_t *r = w->r;
    tn_v1_t *v = w->v;
    tn_http_handler_cb again = w->again;
    tn_free(w);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    r->data = NULL;
    if (status != 0 || v->closing) {
        tn__v1_error(r, 503, "control plane not caught up", "Retry-After: 1\r\n");
        return;
    }
    r->confirmed = true;
    again(r, v);
}

bool tn__v1_caught_up(tn_v1_t *v, tn_http_request_t *r, tn_http_handler_cb again)
{
    if (r->confirmed || tn_meta_caught_up(v->meta))
        return true;
    current_wait_t *w = tn_calloc(1, sizeof(*w));
    if (w == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return false;
    }
    w->v = v;
    w->r = r;
    w->again = again;
    r->data = w;
    r->on_cancel = current_cancel;
    if (tn_meta_confirm_until(v->meta, uv_now(v->loop) + TN_META_PROPOSE_MS, on_current, w) != 0) {
        r->on_cancel = NULL;
        r->data = NULL;
        tn_free(w);
        tn__v1_error(r, 503, "control plane not caught up", "Retry-After: 1\r\n");
    }
    return false;
}

int tn__v1_meta_code(int status)
{
    return status == UV_ENOSPC ? 507 : status == UV_EIO ? 500 : 503;
}

const char *tn__v1_meta_why(int status)
{
    return status == UV_ENOSPC ? "metastore: no space left on device; its writes are refused "
                                 "until space is freed"
           : status == UV_EIO  ? "metastore: i/o error writing its log"
                               : "control plane temporarily unavailable";
}

void tn__v1_meta_error(tn_http_request_t *r, int status)
{
    int code = tn__v1_meta_code(status);
    tn__v1_error(r, code, tn__v1_meta_why(status), code == 503 ? "Retry-After: 1\r\n" : NULL);
}

bool tn__v1_admin_only(tn_v1_t *v, tn_http_request_t *r)
{
    if (tn__v1_is_admin(v, r))
        return true;
    tn__v1_error(r, 403, "admin rights required", NULL);
    return false;
}

/* --- a topic as JSON, query parameters ----------------------------------------- */

static const char *durability_name(uint8_t d)
{
    return d == 1 ? "write_ack" : d == 2 ? "relaxed" : "durable";
}

/* The replicated partition's high watermark and log end as this node's
 * replica manager sees them (cluster/replica.h, tn_replica_part_info):
 * TN_ENOTFOUND when this node holds no replica of it, UV_ENOTSUP without a
 * replica manager (v->replica NULL: a lone node, or before it starts). */
static int replica_part_info(tn_v1_t *v, const char *topic, uint32_t p, uint64_t *hw,
                             uint64_t *log_end)
{
    if (v->replica == NULL)
        return UV_ENOTSUP;
    return tn_replica_part_info(v->replica, topic, p, hw, log_end);
}

static void json_members(tn_buf_t *b, const char *key, const tn_pstate_member_t *v, uint32_t n)
{
    tn__v1_appendf(b, ",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        tn__v1_appendf(b, "%s\"%u\"", i > 0 ? "," : "", v[i].node);
    tn_buf_append(b, "]", 1);
}

/* A replicated partition's state in the local metastore replica
 * (docs/replication.md, "What an operator sees and does"): leader (null
 * while offline), replicas (the preferred leader first), isr, elr (when
 * any), leader_epoch, partition_epoch, under_replicated (ISR smaller than
 * the replica set), offline (no leader), unclean (the epoch began with a
 * forced unclean election), damaged (the replicas whose copy failed a
 * CRC check and is not repaired yet, when any), replica_errors (when
 * any: the append errors its replicas and move targets reported to the
 * leader and it still holds, by node id; the router asks the leader, so
 * every node shows the same, and none when the leader could not be
 * asked); node ids as strings as everywhere in /v1.
 * log_end is the log end of this node's replica when it holds one
 * (replica_high_watermark beside it), else the leader's next offset from
 * the partition's numbers (st). */
static void json_pstate(tn_v1_t *v, tn_buf_t *b, const char *topic, uint32_t p,
                        const tn_router_pstat_t *st)
{
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(v->meta), topic, p);
    if (ps == NULL)
        return;
    if (ps->leader != TN_PSTATE_NONE)
        tn__v1_appendf(b, ",\"leader\":\"%u\"", ps->leader);
    else
        tn_buf_append(b, ",\"leader\":null", 14);
    tn_buf_append(b, ",\"replicas\":[", 13);
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        tn__v1_appendf(b, "%s\"%u\"", i > 0 ? "," : "", ps->replicas[i]);
    tn_buf_append(b, "]", 1);
    json_members(b, "isr", ps->isr, ps->nisr);
    if (ps->nelr > 0)
        json_members(b, "elr", ps->elr, ps->nelr);
    tn__v1_appendf(b,
                   ",\"leader_epoch\":%u,\"partition_epoch\":%u,\"min_insync_replicas\":%u"
                   ",\"under_replicated\":%s,\"offline\":%s,\"unclean\":%s",
                   ps->leader_epoch, ps->partition_epoch, ps->min_insync,
                   ps->nisr < ps->nreplicas ? "true" : "false",
                   ps->leader == TN_PSTATE_NONE ? "true" : "false", ps->unclean ? "true" : "false");
    if (ps->corrupt != 0) {
        tn_buf_append(b, ",\"damaged\":[", 12);
        bool first = true;
        for (uint32_t i = 0; i < ps->nreplicas; i++)
            if (ps->corrupt & (1u << i)) {
                tn__v1_appendf(b, "%s\"%u\"", first ? "" : ",", ps->replicas[i]);
                first = false;
            }
        tn_buf_append(b, "]", 1);
    }
    /* The leader's knowledge, gathered from it by the router (read here
     * when this node leads): its members' append errors. */
    for (uint32_t i = 0; i < st->nerrs; i++) {
        tn__v1_appendf(b, "%s\"%u\":", i == 0 ? ",\"replica_errors\":{" : ",", st->errs[i].node);
        tn__v1_json_str(b, st->errs[i].text);
    }
    if (st->nerrs > 0)
        tn_buf_append(b, "}", 1);
    uint64_t hw, end;
    if (replica_part_info(v, topic, p, &hw, &end) == 0)
        tn__v1_appendf(b, ",\"replica_high_watermark\":%" PRIu64 ",\"log_end\":%" PRIu64, hw, end);
    else if (st->have)
        tn__v1_appendf(b, ",\"log_end\":%" PRIu64, st->st.next_offset);
}

void tn__v1_topic_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_topic_entry_t *e,
                       const tn_router_pstat_t *stats, uint32_t nstats)
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
    tn__v1_appendf(b, ",\"replication_factor\":%u,\"min_insync_replicas\":%u",
                   tn_meta_topic_factor(t), tn_meta_topic_min_insync(t));
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
    if (stats != NULL) {
        /* One entry per partition gathered (the router read each where
         * its log is): its owner as the metastore had it then (null while
         * no member was alive to take it), the log's numbers when they
         * came, and why not when an owner gave none. */
        tn_buf_append(b, ",\"partition_stats\":[", 20);
        for (uint32_t i = 0; i < nstats; i++) {
            const tn_router_pstat_t *ps = &stats[i];
            tn__v1_appendf(b, "%s{\"index\":%u", i > 0 ? "," : "", ps->partition);
            if (ps->have) {
                /* Offsets skip a replicated partition's control records;
                 * the two counts are of messages only (docs/replication.md,
                 * "Counts and offsets"). */
                const tn_wire_pstat_t *w = &ps->st;
                uint64_t stored = w->next_offset - TN_MIN(w->next_offset, w->oldest_offset);
                tn__v1_appendf(b,
                               ",\"segments\":%u,\"oldest_offset\":%" PRIu64
                               ",\"next_offset\":%" PRIu64 ",\"high_watermark\":%" PRIu64
                               ",\"size_bytes\":%" PRIu64 ",\"message_count\":%" PRIu64
                               ",\"stored_messages\":%" PRIu64,
                               w->segments, w->oldest_offset, w->next_offset, w->high_watermark,
                               w->size_bytes, w->next_offset - TN_MIN(w->next_offset, w->controls),
                               stored - TN_MIN(stored, w->stored_controls));
            }
            if (ps->owner != 0)
                tn__v1_appendf(b, ",\"owner_node\":\"%" PRIu64 "\"", ps->owner);
            else
                tn_buf_append(b, ",\"owner_node\":null", 18);
            if (ps->error != NULL) {
                tn_buf_append(b, ",\"error\":", 9);
                tn__v1_json_str(b, ps->error);
            }
            json_pstate(v, b, t->name, ps->partition, ps);
            tn_buf_append(b, "}", 1);
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
    /* Decimal digits only, and at most INT64_MAX: strtoll would skip
     * spaces, take a sign and saturate, reading another number. */
    int64_t x = 0;
    for (const char *p = buf; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || x > (INT64_MAX - (*p - '0')) / 10)
            return -1;
        x = x * 10 + (*p - '0');
    }
    *out = x;
    return 1;
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

bool tn__v1_can_manage(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t)
{
    bool owner = t->owner[0] != '\0' && strcmp(t->owner, r->principal) == 0;
    return !v->o.security || owner || tn__v1_is_admin(v, r);
}

bool tn__v1_dlq_refused(tn_v1_t *v, tn_http_request_t *r, const char *name)
{
    char why[TN_NAME_MAX * 2 + 128];
    if (!v->o.security || !tn_access_dlq_refused(v->meta, name, r->principal, why, sizeof(why)))
        return false;
    tn__v1_error(r, 403, why, NULL);
    return true;
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

/* The path's topic for an operation needing a grant of action (produce or
 * consume); write: a state-changing request (the cross-site guard). NULL
 * after answering 415, 404 or 403. A produce to a delay child is 409. */
const tn_meta_topic_entry_t *tn__v1_granted_topic(tn_v1_t *v, tn_http_request_t *r, uint8_t action,
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
    if (action == TN_GRANT_PRODUCE && tn__v1_dlq_refused(v, r, topic))
        return NULL;
    if (action == TN_GRANT_PRODUCE && e->rec.parent[0] != '\0' && e->rec.fanout_delay_ms > 0) {
        tn__v1_error(r, 409, "direct produce to a delay child is not allowed", NULL);
        return NULL;
    }
    return e;
}
