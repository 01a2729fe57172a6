/* NSQ's HTTP API. See http.h. */
#include "core/platform.h"

#include "api/nsq/http.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "api/access.h"
#include "api/drain.h"
#include "api/users.h"
#include "api/v1/common.h"
#include "cluster/hold.h"
#include "cluster/replerr.h"
#include "cluster/replica.h"
#include "proto/http/json.h"
#include "proto/nsq/codec.h"
#include "storage/io.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define V1_HEADER "X-NSQ-Content-Type: nsq; version=1.0\r\n"

void tn_nsq_http_init(tn_nsq_http_t *api, const tn_config_t *cfg, const char *version)
{
    memset(api, 0, sizeof(*api));
    api->version = version;
    api->broadcast_address = cfg->broadcast_address;
    api->max_msg_size = (uint64_t)cfg->max_msg_size;
    api->max_body_size = (uint64_t)cfg->max_body_size;
    api->max_defer_ms = cfg->max_req_timeout_ns / 1000000;
    api->max_heartbeat_interval_ms = cfg->max_heartbeat_interval_ns / 1000000;
    api->max_output_buffer_size = cfg->max_output_buffer_size;
    api->max_output_buffer_timeout_ms = cfg->max_output_buffer_timeout_ns / 1000000;
    api->max_deflate_level = (int)cfg->max_deflate_level;
    api->start_time = tn_now_wall_ns() / 1000000000;
}

/* Whether the client asked for nsqd's v1 responses. nsqd 1.x answers
 * every endpoint but /ping in the v1 shape (bare JSON, errors as
 * {"message":...}, the X-NSQ-Content-Type header) whatever the client
 * asks; the header on /ping is only for clients that ask. */
static bool wants_v1(const tn_http_request_t *r)
{
    const tn_iov_t *a = tn_http_header(&r->head, "accept");
    if (a == NULL)
        return false;
    char v[256];
    snprintf(v, sizeof(v), "%.*s", (int)TN_MIN(a->len, sizeof(v) - 1), a->base);
    return strstr(v, "application/vnd.nsq") != NULL && strstr(v, "version=1.0") != NULL;
}

static void answer_json(tn_http_request_t *r, int status, const char *json)
{
    const char *extra = status == 429 || status == 503 ? V1_HEADER "Retry-After: 1\r\n" : V1_HEADER;
    tn_http_respond(r, status, "application/json; charset=utf-8", extra, json, strlen(json));
}

static void answer_error(tn_http_request_t *r, int status, const char *code)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"message\":\"%s\"}", code);
    answer_json(r, status, body);
}

/* 503 + Retry-After for a replicated partition that refuses for now
 * (cluster/replerr.h): nsqd's {"message"} in its E_PUB_FAILED words, and
 * the {"error"} every tern door answers such a refusal with. */
static void answer_refused(tn_http_request_t *r, const char *why)
{
    /* why is one of replerr's constants: plain words, nothing to escape. */
    char body[256];
    snprintf(body, sizeof(body), "{\"message\":\"E_PUB_FAILED %s\",\"error\":\"%s\"}", why, why);
    answer_json(r, 503, body);
}

static void answer_ok(tn_http_request_t *r)
{
    tn_http_respond(r, 200, "text/plain; charset=utf-8", V1_HEADER, "OK", 2);
}

/* 200 with no body: a management action done. */
static void answer_done(tn_http_request_t *r)
{
    tn_http_respond(r, 200, NULL, V1_HEADER, "", 0);
}

/* --- /ping, /info, health -------------------------------------------------- */

/* The failures of this node's storage: the first one's words, and how
 * many. sticky: only those that hold until a restart (or an operator), for
 * /readyz; else also those that clear by themselves (a full disk), for
 * /ping. */
typedef struct {
    const tn_nsq_http_t *api;
    bool sticky;
    char first[400];
    uint32_t n;
} failures_t;

/* Counts the log of partition p of topic in f when it fails: its error
 * (sticky), or with full its last write's full disk or descriptor
 * refusal (cleared by the next write that succeeds). */
static void log_failure(failures_t *f, const char *topic, uint32_t p, tn_plog_t *pl, bool full_too)
{
    int err = tn_plog_err(pl);
    int full = err == 0 && full_too && !f->sticky ? tn_plog_nospace(pl) : 0;
    if (err == 0 && full == 0)
        return;
    /* A replica's damaged copy that its leader's records repair while the
     * node runs: every request this node takes is served meanwhile. */
    tn_replica_t *rm = f->api->v1 != NULL ? f->api->v1->replica : NULL;
    if (err == TN_ECORRUPT && rm != NULL && tn_replica_mends(rm, topic, p))
        return;
    if (f->n++ == 0)
        snprintf(f->first, sizeof(f->first), "partition %s/%" PRIu32 ": %s; %s", topic, p,
                 tn_strerror(err != 0 ? err : full),
                 err != 0              ? "it refuses writes until restart"
                 : tn_io_nospace(full) ? "publishes to it fail until space is freed"
                                       : "publishes to it fail until a descriptor is free");
}

static void part_failure(tn_topic_t *t, uint32_t p, void *arg)
{
    log_failure(arg, t->name, p, t->parts[p]->plog, true);
}

/* A follower's copy (the engine does not serve it): only its sticky
 * failure counts, as its full disk fails no publish (its leader's copy
 * takes them; it fetches again once space is freed). */
static void follower_failure(void *arg, const char *topic, uint32_t p, tn_plog_t *pl)
{
    log_failure(arg, topic, p, pl, false);
}

/* Fill f with the failures of this node's storage (f->sticky says which):
 * channel logs that failed (until a restart) or found the disk full (until
 * they write again), a partition's log (a follower's copy too) that failed
 * (sticky, but for a replica's copy its leader repairs), or one whose last
 * write found the disk full or no descriptor (until a write to it
 * succeeds). */
static void storage_failures(const tn_nsq_http_t *api, failures_t *f)
{
    f->n = 0;
    if (api->broker == NULL)
        return;
    uint32_t failed = tn_broker_logs_failed(api->broker);
    if (failed != 0 && f->n++ == 0)
        snprintf(f->first, sizeof(f->first),
                 "%" PRIu32 " channel log(s) failed to write (see the log); "
                 "restart ternd once the disk is fixed",
                 failed);
    uint32_t full = f->sticky ? 0 : tn_broker_logs_full(api->broker);
    if (full != 0 && f->n++ == 0)
        snprintf(f->first, sizeof(f->first),
                 "%" PRIu32 " channel log(s) found the disk full; their delivery resumes "
                 "once space is freed",
                 full);
    tn_broker_each_local_part(api->broker, part_failure, f);
    if (api->v1 != NULL && api->v1->replica != NULL)
        tn_replica_each_follower_log(api->v1->replica, follower_failure, f);
}

/* The first failure's words, with how many more there are, after prefix
 * and before suffix; out gets the text. */
static int failures_text(const failures_t *f, const char *prefix, const char *suffix, char *out,
                         size_t size)
{
    if (f->n <= 1)
        return snprintf(out, size, "%s%s%s", prefix, f->first, suffix);
    return snprintf(out, size, "%s%s (and %" PRIu32 " more)%s", prefix, f->first, f->n - 1, suffix);
}

/* nsqd's health (its GetHealth): "OK", or "NOK - <error>" while writes to
 * this node's storage fail (storage_failures, all of them). The first
 * failure found is named, with how many more there are. out gets the text;
 * returns whether healthy. */
static bool health(const tn_nsq_http_t *api, char *out, size_t size)
{
    failures_t f = {.api = api, .sticky = false};
    storage_failures(api, &f);
    if (f.n == 0)
        snprintf(out, size, "OK");
    else
        failures_text(&f, "NOK - ", "", out, size);
    return f.n == 0;
}

static void on_ping(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    /* nsqd answers a bare OK here, without the v1 header, or 500 with its
     * health text (http.go's pingHandler). */
    char h[512];
    bool ok = health(api, h, sizeof(h));
    tn_http_respond(r, ok ? 200 : 500, "text/plain; charset=utf-8", wants_v1(r) ? V1_HEADER : NULL,
                    h, strlen(h));
}

static void on_info(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    const char *bcast = api->broadcast_address[0] != '\0' ? api->broadcast_address : host;
    char body[1024];
    /* Durations in nanoseconds, as nsqd's /info has them. */
    snprintf(body, sizeof(body),
             "{\"version\":\"%s\",\"broadcast_address\":\"%s\",\"hostname\":\"%s\","
             "\"http_port\":%d,\"tcp_port\":%d,\"start_time\":%" PRId64
             ",\"max_heartbeat_interval\":%" PRId64 ",\"max_output_buffer_size\":%" PRId64
             ",\"max_output_buffer_timeout\":%" PRId64 ",\"max_deflate_level\":%d}",
             api->version, bcast, host, api->http_port, api->tcp_port, api->start_time,
             api->max_heartbeat_interval_ms * 1000000, api->max_output_buffer_size,
             api->max_output_buffer_timeout_ms * 1000000, api->max_deflate_level);
    answer_json(r, 200, body);
}

/* Liveness: 200 {"status":"ok"} while the process serves, 503
 * {"status":"shutting down"} once its shutdown began. */
static void on_healthz(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    static const char ok[] = "{\"status\":\"ok\"}\n";
    static const char bye[] = "{\"status\":\"shutting down\"}\n";
    if (api->shutting_down)
        tn_http_respond(r, 503, "application/json; charset=utf-8", NULL, bye, sizeof(bye) - 1);
    else
        tn_http_respond(r, 200, "application/json; charset=utf-8", NULL, ok, sizeof(ok) - 1);
}

bool tn_nsq_http_started(tn_nsq_http_t *api)
{
    if (!api->ready || tn_drain_active(api->drain))
        return false;
    if (api->meta == NULL)
        return true;
    /* Caught up (leader known and heard from, a voter, the log found at
     * start replayed, nothing known committed for long unapplied:
     * tn_meta_steady, so a follower is not out of readiness for the
     * time its disk writes an entry the others committed). */
    if (!tn_meta_ready(api->meta) || !tn_meta_steady(api->meta))
        return false;
    /* With security on, ready means usable: the users can be judged (the
     * root user's seed is applied here too), so a client that waited for
     * 200 is never refused for credentials that are right (users.h; a
     * request met while its user's entry is still being written waits
     * or is answered 503, as at any time). */
    return api->v1 == NULL || !api->v1->o.security || tn_meta_state(api->meta)->nusers > 0;
}

/* Whether a storage failure that holds until a restart keeps /readyz at
 * 503; f gets them. A channel log that failed to write or sync can no
 * longer make its acks durable, a partition log isolated refuses its
 * writes and reads (the error is sticky). */
static bool storage_stuck(const tn_nsq_http_t *api, failures_t *f)
{
    f->api = api;
    f->sticky = true;
    storage_failures(api, f);
    return f->n != 0;
}

bool tn_nsq_http_ready(tn_nsq_http_t *api)
{
    failures_t f;
    return tn_nsq_http_started(api) && !storage_stuck(api, &f);
}

static void on_readyz(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    static const char ready[] = "{\"status\":\"ready\"}\n";
    static const char not_ready[] = "{\"error\":\"not ready\"}\n";
    static const char draining[] = "{\"status\":\"draining\"}\n";
    failures_t f;
    if (tn_drain_active(api->drain))
        tn_http_respond(r, 503, "application/json; charset=utf-8", "Retry-After: 1\r\n", draining,
                        sizeof(draining) - 1);
    else if (api->ready && storage_stuck(api, &f)) {
        /* Says what is wrong: a restart (after the disk or the damaged
         * segment is dealt with) is the way back (operations.md). */
        char why[512];
        int n = failures_text(&f, "{\"error\":\"", "\"}\n", why, sizeof(why));
        tn_http_respond(r, 503, "application/json; charset=utf-8", "Retry-After: 1\r\n", why,
                        TN_MIN((size_t)n, sizeof(why) - 1));
    } else if (tn_nsq_http_started(api))
        tn_http_respond(r, 200, "application/json; charset=utf-8", NULL, ready, sizeof(ready) - 1);
    else
        tn_http_respond(r, 503, "application/json; charset=utf-8", "Retry-After: 1\r\n", not_ready,
                        sizeof(not_ready) - 1);
}

/* --- /stats ------------------------------------------------------------------- */

static int appendf(tn_buf_t *b, const char *fmt, ...) TN_PRINTF(2, 3);
static int appendf(tn_buf_t *b, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return UV_EINVAL;
    return tn_buf_append(b, line, TN_MIN((size_t)n, sizeof(line) - 1));
}

typedef struct {
    uint64_t depth;         /* held by the topic itself (tn_topic_depth) */
    uint64_t message_count; /* ever published (control records are not messages) */
    uint32_t nchannels;
} topic_sums_t;

static void topic_sums(const tn_topic_t *t, topic_sums_t *out)
{
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < t->nparts; i++)
        if (tn_topic_part_local(t, i))
            out->message_count += tn_part_message_count(t->parts[i]);
    out->depth = tn_topic_depth(t);
    for (const tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        out->nchannels++;
}

static bool name_is(const char *name, const char *want)
{
    return want[0] == '\0' || strcmp(name, want) == 0;
}

/* Whether the NSQ doors see a topic or channel: a name longer than nsqd
 * takes (a /v1 topic can have 255 characters) is not reachable there, so
 * it is not listed there either. */
static bool nsq_named(const char *name)
{
    return tn_nsq_valid_topic(name, strlen(name));
}

/* --- access ----------------------------------------------------------------- */

/* Whether these endpoints need credentials for topic: a protected one
 * (api/access.h), or every topic when NSQ AUTH is served by tern's users. */
static bool guarded(const tn_nsq_http_t *api, const char *topic)
{
    if (api->v1 == NULL || !api->v1->o.security)
        return false;
    return api->protect_all || tn_access_protected(api->meta, topic);
}

/* NEED_MAKE: to /topic/create (NEED_READ's right, and a dead-letter
 * topic's name only for its parent's owner). */
typedef enum { NEED_READ, NEED_MAKE, NEED_PRODUCE, NEED_CONSUME, NEED_MANAGE } need_t;

/* Whether r's user may do what need says on topic: admin, the topic's
 * owner, or a grant of the kind (any grant, to see it). */
static bool may(tn_nsq_http_t *api, const tn_http_request_t *r, const char *topic, need_t need)
{
    tn_v1_t *v = api->v1;
    if (r->principal[0] == '\0')
        return false;
    if (tn__v1_is_admin(v, r))
        return true;
    char why[TN_NAME_MAX * 2 + 128];
    if ((need == NEED_MAKE || need == NEED_PRODUCE) &&
        tn_access_dlq_refused(api->meta, topic, r->principal, why, sizeof(why)))
        return false;
    const char *owner = tn_access_owner(api->meta, topic);
    if (owner != NULL && strcmp(owner, r->principal) == 0)
        return true;
    switch (need) {
    case NEED_READ:
    case NEED_MAKE:
        return tn__v1_has_grant(tn__v1_caller(v, r), 0, topic);
    case NEED_PRODUCE:
        return tn__v1_can_do(v, r, TN_GRANT_PRODUCE, topic);
    case NEED_CONSUME:
        return tn__v1_can_do(v, r, TN_GRANT_CONSUME, topic);
    case NEED_MANAGE:
        break;
    }
    return false;
}

/* The open doors' answer while the replica cannot judge whether topic is
 * protected (api/access.h tn_access_unknown, why its sentence): nsqd's
 * NOT_READY, as for credentials not judged yet, and tern's words. */
static void answer_unjudged(tn_http_request_t *r, const char *why)
{
    tn_buf_t b;
    tn_buf_init(&b);
    static const char head[] = "{\"message\":\"NOT_READY\",\"error\":\"";
    int rc = tn_buf_append(&b, head, sizeof(head) - 1);
    if (rc == 0)
        rc = tn_buf_json_escape(&b, why);
    if (rc == 0)
        rc = tn_buf_append(&b, "\"}", 2);
    if (rc == 0)
        tn_http_respond(r, 503, "application/json; charset=utf-8", V1_HEADER "Retry-After: 1\r\n",
                        tn_buf_data(&b), tn_buf_size(&b));
    else
        answer_error(r, 503, "NOT_READY");
    tn_buf_fini(&b);
}

/* How long a request that authorize() would judge waits for this node's
 * replica to be able to (tn_access_unknown) before it is judged anyway
 * (503 NOT_READY), as the router's start hold (cluster/hold.h); a listing
 * (then without the topics r may not see: hidden) less, so that it is
 * answered within nsqadmin's 5 s HTTP request timeout (its connect's 2 s
 * included) rather than shown as an error; how often it looks again
 * meanwhile. A lone node's replica catches up within milliseconds of its
 * start (its listings are then never short of its open topics); a node
 * whose cluster is down does not. */
#define JUDGE_WAIT_MS TN_ROUTER_CREATE_HOLD_MS
#define JUDGE_LIST_MS 3000
#define JUDGE_POLL_MS TN_HOLD_POLL_MS

/* A request waiting for this node's replica to be able to judge whether
 * its topic is protected (judge_later). */
typedef struct {
    uv_timer_t timer;
    tn_http_request_t *r; /* NULL once the client left */
    tn_nsq_http_t *api;
    tn_http_handler_cb handler;
    uint64_t until; /* uv_now */
} judge_wait_t;

static void on_judge_closed(uv_handle_t *h)
{
    tn_free(h->data);
}

static void on_judge_cancel(tn_http_request_t *r)
{
    judge_wait_t *w = r->data;
    w->r = NULL; /* the poll frees it */
}

static void on_judge_poll(uv_timer_t *t)
{
    judge_wait_t *w = t->data;
    tn_http_request_t *r = w->r;
    if (r != NULL && !tn_meta_ready(w->api->meta) && uv_now(t->loop) < w->until)
        return;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, on_judge_closed);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    r->data = NULL;
    w->api->judged = r; /* judge_later lets it through now */
    w->handler(r, w->api);
    w->api->judged = NULL;
}

/* Whether r (for handler, a route that authorize() judges, or a listing)
 * waits, before anything else, for the open doors to be able to judge its
 * topics: with security on, while this node's replica has not caught up
 * since the start (tn_access_unknown). Then handler(r, api) runs again
 * once it has, or after wait_ms (JUDGE_WAIT_MS: authorize then answers
 * 503; JUDGE_LIST_MS: a listing leaves out what r may not see, hidden),
 * or never if the client leaves first. */
static bool judge_later(tn_http_request_t *r, tn_nsq_http_t *api, tn_http_handler_cb handler,
                        uint64_t wait_ms)
{
    if (api->judged == r || api->v1 == NULL || !api->v1->o.security || api->protect_all ||
        api->meta == NULL || tn_meta_ready(api->meta))
        return false;
    judge_wait_t *w = tn_calloc(1, sizeof(*w));
    if (w == NULL || uv_timer_init(api->v1->loop, &w->timer) != 0) {
        tn_free(w);
        return false; /* judged at once: authorize answers 503 */
    }
    w->timer.data = w;
    w->r = r;
    w->api = api;
    w->handler = handler;
    w->until = uv_now(api->v1->loop) + wait_ms;
    r->data = w;
    r->on_cancel = on_judge_cancel;
    uv_timer_start(&w->timer, on_judge_poll, JUDGE_POLL_MS, JUDGE_POLL_MS);
    return true;
}

/* Whether these open doors cannot judge yet whether topic is protected
 * (api/access.h tn_access_unknown; why gets its sentence): with security
 * on and no NSQ auth, while this node's replica has not caught up since
 * the start. Then every topic is treated as guarded (it may have an
 * owner, or be open, or have lost its owner since the replica's
 * snapshot). */
static bool unjudged(tn_nsq_http_t *api, const char *topic, char *why, size_t len)
{
    return api->v1 != NULL && api->v1->o.security && !api->protect_all &&
           tn_access_unknown(api->meta, topic, why, len);
}

/* For a guarded topic, whether r may go on; false after answering 401
 * (no credentials came) or 403 (they do not cover it). A topic the doors
 * cannot judge yet (unjudged) is answered 503 where it would be refused. */
static bool authorize(tn_http_request_t *r, tn_nsq_http_t *api, const char *topic, need_t need)
{
    char why[TN_NAME_MAX + 160];
    if (unjudged(api, topic, why, sizeof(why))) {
        if (r->principal[0] != '\0' && may(api, r, topic, need))
            return true; /* an admin, or a grant that covers it whoever owns it */
        answer_unjudged(r, why);
        return false;
    }
    if (!guarded(api, topic))
        return true;
    if (r->principal[0] == '\0') {
        tn__v1_nsq_refuse(r, 401, "AUTH_REQUIRED");
        return false;
    }
    if (!may(api, r, topic, need)) {
        tn__v1_nsq_refuse(r, 403, "FORBIDDEN");
        return false;
    }
    return true;
}

/* Whether the listings leave topic out for r: it is guarded, or the doors
 * cannot judge it yet (unjudged: it may be protected), and r's user may
 * not see it whoever owns it (an admin, a grant on it, its owner). An
 * anonymous caller sees no protected topic, and no topic at all until the
 * replica can tell which are protected. */
static bool hidden(tn_nsq_http_t *api, const tn_http_request_t *r, const char *topic)
{
    char why[TN_NAME_MAX + 160];
    if (!guarded(api, topic) && !unjudged(api, topic, why, sizeof(why)))
        return false;
    return !may(api, r, topic, NEED_READ);
}

/* Whether r is shown topic t: ready, reachable by NSQ, and not hidden
 * from r's user. */
static bool nsq_topic(tn_nsq_http_t *api, const tn_http_request_t *r, const tn_topic_t *t)
{
    return t->state == TN_OBJ_READY && nsq_named(t->name) && !hidden(api, r, t->name);
}

static bool nsq_channel(const tn_channel_t *ch)
{
    return ch->state == TN_OBJ_READY && nsq_named(ch->name);
}

static int by_topic_name(const void *a, const void *b)
{
    return strcmp((*(tn_topic_t *const *)a)->name, (*(tn_topic_t *const *)b)->name);
}

static int by_channel_name(const void *a, const void *b)
{
    return strcmp((*(tn_channel_t *const *)a)->name, (*(tn_channel_t *const *)b)->name);
}

/* The topics /stats shows, sorted by name as nsqd sorts them (ftopic ""
 * for all): a tn_malloc'ed array, *n long (NULL when none). */
static tn_topic_t **stats_topics(tn_nsq_http_t *api, const tn_http_request_t *r, const char *ftopic,
                                 size_t *n)
{
    tn_broker_t *br = api->broker;
    tn_topic_t **v = br->ntopics > 0 ? tn_malloc(br->ntopics * sizeof(*v)) : NULL;
    *n = 0;
    for (size_t i = 0; v != NULL && i < br->nbuckets; i++)
        for (tn_topic_t *t = br->buckets[i]; t != NULL && *n < br->ntopics; t = t->hnext)
            if (nsq_topic(api, r, t) && name_is(t->name, ftopic))
                v[(*n)++] = t;
    if (*n > 1)
        qsort(v, *n, sizeof(*v), by_topic_name);
    return v;
}

/* Whether /stats shows t for the channel filter fchan ("" for all): nsqd
 * leaves out a topic without the channel named (its GetStats). */
static bool has_channel(const tn_topic_t *t, const char *fchan)
{
    if (fchan[0] == '\0')
        return true;
    for (const tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (nsq_channel(ch) && strcmp(ch->name, fchan) == 0)
            return true;
    return false;
}

/* Same for the channels of t. */
static tn_channel_t **stats_channels(const tn_topic_t *t, const char *fchan, size_t *n)
{
    size_t all = 0;
    for (const tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        all++;
    tn_channel_t **v = all > 0 ? tn_malloc(all * sizeof(*v)) : NULL;
    *n = 0;
    for (tn_channel_t *ch = t->channels; v != NULL && ch != NULL; ch = ch->next)
        if (nsq_channel(ch) && name_is(ch->name, fchan))
            v[(*n)++] = ch;
    if (*n > 1)
        qsort(v, *n, sizeof(*v), by_channel_name);
    return v;
}

/* A replicated topic's partitions that are under-replicated (ISR smaller
 * than the replica set) and offline (no leader), from the metastore's
 * partition states; false for a factor-1 topic (or no metastore). */
static bool repl_counts(tn_nsq_http_t *api, const char *topic, uint32_t *under, uint32_t *offline)
{
    *under = *offline = 0;
    if (api->meta == NULL)
        return false;
    const tn_meta_state_t *s = tn_meta_state(api->meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    if (e == NULL || e->rec.replication_factor <= 1)
        return false;
    for (uint32_t p = 0; p < e->rec.partitions; p++) {
        const tn_pstate_t *ps = tn_meta_state_pstate(s, topic, p);
        if (ps == NULL)
            continue;
        if (ps->leader == TN_PSTATE_NONE)
            (*offline)++;
        else if (ps->nisr < ps->nreplicas)
            (*under)++;
    }
    return true;
}

/* Whether a client object of /stats names topic in its pub_counts for
 * the caller (tn_pubs_filter_t.shown): as the listings show topics. */
typedef struct {
    tn_nsq_http_t *api;
    const tn_http_request_t *r;
} shown_t;

static bool pub_shown(void *arg, const char *topic)
{
    shown_t *s = arg;
    return nsq_named(topic) && !hidden(s->api, s->r, topic);
}

/* nsqd's /stats JSON: topics is null only when a named topic does not
 * exist; with a channel named, topics without it are left out; channels
 * and (with include_clients) clients are arrays, empty when there are
 * none. Clients' pub_counts name only topics the caller is shown. */
static void stats_json(tn_nsq_http_t *api, const tn_http_request_t *r, tn_buf_t *b,
                       const char *ftopic, const char *fchan, bool clients)
{
    shown_t sh = {api, r};
    tn_pubs_filter_t pubs = {ftopic, pub_shown, &sh};
    static const char latency[] = "\"e2e_processing_latency\":{\"count\":0,\"percentiles\":null}";
    char h[512];
    health(api, h, sizeof(h));
    appendf(b, "{\"version\":\"%s\",\"health\":", api->version);
    tn__v1_json_str(b, h);
    appendf(b, ",\"start_time\":%" PRId64 ",\"topics\":", api->start_time);
    size_t nt;
    tn_topic_t **topics = stats_topics(api, r, ftopic, &nt);
    if (nt == 0 && ftopic[0] != '\0') {
        tn_buf_append(b, "null", 4);
    } else {
        tn_buf_append(b, "[", 1);
        bool any_topic = false;
        for (size_t i = 0; i < nt; i++) {
            tn_topic_t *t = topics[i];
            if (!has_channel(t, fchan))
                continue;
            size_t nc;
            tn_channel_t **chans = stats_channels(t, fchan, &nc);
            topic_sums_t ts;
            topic_sums(t, &ts);
            if (any_topic)
                tn_buf_append(b, ",", 1);
            any_topic = true;
            appendf(b, "{\"topic_name\":\"%s\",\"channels\":[", t->name);
            for (size_t k = 0; k < nc; k++) {
                tn_channel_t *ch = chans[k];
                tn_channel_stats_t cs;
                tn_channel_stats(ch, &cs);
                /* nsqd's depth excludes what is in flight and deferred. */
                uint64_t depth = cs.depth - TN_MIN(cs.depth, cs.inflight + cs.deferred);
                if (k > 0)
                    tn_buf_append(b, ",", 1);
                appendf(b,
                        "{\"channel_name\":\"%s\",\"depth\":%" PRIu64 ",\"backend_depth\":%" PRIu64
                        ",\"in_flight_count\":%" PRIu64 ",\"deferred_count\":%" PRIu64
                        ",\"message_count\":%" PRIu64 ",\"requeue_count\":%" PRIu64
                        ",\"timeout_count\":%" PRIu64 ",\"client_count\":%u,\"clients\":",
                        ch->name, depth, depth, cs.inflight, cs.deferred, cs.message_count,
                        cs.requeue_count, cs.timeout_count, ch->nconsumers);
                if (!clients) {
                    tn_buf_append(b, "null", 4); /* nsqd: include_clients=false */
                } else {
                    tn_consumer_t *c = ch->consumers;
                    tn_buf_append(b, "[", 1);
                    for (uint32_t j = 0; j < ch->nconsumers; j++, c = c->next) {
                        if (j > 0)
                            tn_buf_append(b, ",", 1);
                        if (c->describe != NULL)
                            c->describe(c, &pubs, b);
                        else
                            tn_buf_append(b, "{}", 2);
                    }
                    tn_buf_append(b, "]", 1);
                }
                appendf(b, ",\"paused\":%s,%s}", ch->paused ? "true" : "false", latency);
            }
            tn_free(chans);
            /* tern's own: how many of a replicated topic's partitions
             * are under-replicated or offline (0 for factor 1). */
            uint32_t under, offline;
            repl_counts(api, t->name, &under, &offline);
            appendf(b, "],\"under_replicated_partitions\":%u,\"offline_partitions\":%u", under,
                    offline);
            appendf(b,
                    ",\"depth\":%" PRIu64 ",\"backend_depth\":%" PRIu64
                    ",\"message_count\":%" PRIu64 ",\"message_bytes\":%" PRIu64
                    ",\"paused\":%s,%s}",
                    ts.depth, ts.depth, ts.message_count, t->message_bytes,
                    t->paused ? "true" : "false", latency);
        }
        tn_buf_append(b, "]", 1);
    }
    tn_free(topics);
    tn_buf_append(b, ",\"producers\":", 13);
    if (clients && api->nsq != NULL)
        tn_nsq_server_producers_json(api->nsq, &pubs, b);
    else
        tn_buf_append(b, "null", 4);
    tn_buf_append(b, "}", 1);
}

/* nsqd's text /stats, without its Go memory section, client lines and
 * e2e latency column (tern keeps no percentiles; format=json has the
 * clients). */
static void stats_text(tn_nsq_http_t *api, const tn_http_request_t *r, tn_buf_t *b,
                       const char *ftopic, const char *fchan)
{
    char when[32];
    time_t start = (time_t)api->start_time;
    struct tm tm;
    gmtime_r(&start, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    int64_t up = tn_now_wall_ns() / 1000000000 - api->start_time;
    char h[512];
    health(api, h, sizeof(h));
    appendf(b, "ternd v%s\nstart_time %s\nuptime %" PRId64 "s\n\nHealth: %s\n", api->version, when,
            up, h);
    size_t nt, shown = 0;
    tn_topic_t **topics = stats_topics(api, r, ftopic, &nt);
    for (size_t i = 0; i < nt; i++)
        if (has_channel(topics[i], fchan))
            topics[shown++] = topics[i];
    appendf(b, shown == 0 ? "\nTopics: None\n" : "\nTopics:");
    for (size_t i = 0; i < shown; i++) {
        tn_topic_t *t = topics[i];
        topic_sums_t ts;
        topic_sums(t, &ts);
        appendf(b, "\n%s[%-15s] depth: %-5" PRIu64 " be-depth: %-5" PRIu64 " msgs: %" PRIu64,
                t->paused ? "*P " : "   ", t->name, ts.depth, ts.depth, ts.message_count);
        uint32_t under, offline;
        if (repl_counts(api, t->name, &under, &offline))
            appendf(b, " under-replicated: %u offline: %u", under, offline);
        appendf(b, "\n");
        size_t nc;
        tn_channel_t **chans = stats_channels(t, fchan, &nc);
        for (size_t k = 0; k < nc; k++) {
            tn_channel_t *ch = chans[k];
            tn_channel_stats_t cs;
            tn_channel_stats(ch, &cs);
            uint64_t depth = cs.depth - TN_MIN(cs.depth, cs.inflight + cs.deferred);
            appendf(b,
                    "%s[%-25s] depth: %-5" PRIu64 " be-depth: %-5" PRIu64 " inflt: %-4" PRIu64
                    " def: %-4" PRIu64 " re-q: %-5" PRIu64 " timeout: %-5" PRIu64 " msgs: %" PRIu64
                    "\n",
                    ch->paused ? "   *P " : "      ", ch->name, depth, depth, cs.inflight,
                    cs.deferred, cs.requeue_count, cs.timeout_count, cs.message_count);
        }
        tn_free(chans);
    }
    tn_free(topics);
}

static bool hex_digit(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* Whether Go's url.ParseQuery takes the query, as nsqd needs before it
 * reads any argument (else 400 INVALID_REQUEST): every '%' starts a
 * two-hex-digit escape, and no ';' is in it (Go refuses it as a
 * separator since 1.17). */
static bool query_ok(tn_iov_t q)
{
    for (size_t i = 0; i < q.len; i++) {
        if (q.base[i] == ';')
            return false;
        if (q.base[i] == '%' &&
            (i + 2 >= q.len || !hex_digit(q.base[i + 1]) || !hex_digit(q.base[i + 2])))
            return false;
    }
    return true;
}

static void on_stats(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_stats, JUDGE_LIST_MS))
        return;
    char format[16] = "", topic[256] = "", channel[256] = "", inc[16] = "true";
    /* A topic or channel too long to be any one's name matches none (as in
     * nsqd): "." is no topic's or channel's name either. Other values that
     * do not fit are no value nsqd knows, so the default. */
    if (!query_ok(r->head.query)) {
        answer_error(r, 400, "INVALID_REQUEST");
        return;
    }
    if (tn_http_query(r->head.query, "format", format, sizeof(format)) < 0)
        format[0] = '\0';
    if (tn_http_query(r->head.query, "topic", topic, sizeof(topic)) < 0)
        snprintf(topic, sizeof(topic), ".");
    if (tn_http_query(r->head.query, "channel", channel, sizeof(channel)) < 0)
        snprintf(channel, sizeof(channel), ".");
    if (tn_http_query(r->head.query, "include_clients", inc, sizeof(inc)) < 0)
        snprintf(inc, sizeof(inc), "true");
    tn_buf_t b;
    tn_buf_init(&b);
    if (strcmp(format, "json") == 0) {
        stats_json(api, r, &b, topic, channel, strcmp(inc, "false") != 0 && strcmp(inc, "0") != 0);
        tn_buf_append(&b, "", 1);
        answer_json(r, 200, tn_buf_data(&b));
    } else {
        stats_text(api, r, &b, topic, channel);
        tn_http_respond(r, 200, "text/plain; charset=utf-8", V1_HEADER, tn_buf_data(&b),
                        tn_buf_size(&b));
    }
    tn_buf_fini(&b);
}

/* --- lookupd endpoints ------------------------------------------------------------- */

/* Every node answers nsqlookupd's questions for the whole cluster from its
 * metastore replica: a topic's producers are the alive members owning a
 * partition of it (each serves its own partitions over NSQ TCP), with the
 * NSQ addresses their member records carry; this node's own entry comes
 * from its live listeners. A lone node is the one member, so it lists
 * itself, as nsqd and nsqlookupd together would. */

/* This node as NSQ clients reach it. */
static void self_nsq(const tn_nsq_http_t *api, tn_meta_nsq_t *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->hostname, sizeof(out->hostname), "localhost");
    gethostname(out->hostname, sizeof(out->hostname) - 1);
    snprintf(out->broadcast, sizeof(out->broadcast), "%s",
             api->broadcast_address[0] != '\0' ? api->broadcast_address : out->hostname);
    out->tcp_port = (uint16_t)api->tcp_port;
    out->http_port = (uint16_t)api->http_port;
    snprintf(out->version, sizeof(out->version), "%s", api->version);
}

/* A lookupd producer entry (nsqlookupd's PeerInfo), without the closing
 * brace. remote_address is the address the node is reached at (nsqlookupd
 * has the nsqd's end of its registration connection there). */
static void producer_json(const tn_meta_nsq_t *n, tn_buf_t *b)
{
    char remote[TN_META_HOST_MAX + 8];
    snprintf(remote, sizeof(remote), "%s:%d", n->broadcast, n->tcp_port);
    tn_buf_append(b, "{\"remote_address\":", 18);
    tn__v1_json_str(b, remote);
    tn_buf_append(b, ",\"hostname\":", 12);
    tn__v1_json_str(b, n->hostname);
    tn_buf_append(b, ",\"broadcast_address\":", 21);
    tn__v1_json_str(b, n->broadcast);
    appendf(b, ",\"tcp_port\":%d,\"http_port\":%d,\"version\":", n->tcp_port, n->http_port);
    tn__v1_json_str(b, n->version);
}

static bool has_local_part(const tn_topic_t *t)
{
    for (uint32_t p = 0; t != NULL && p < t->nparts; p++)
        if (tn_topic_part_local(t, p))
            return true;
    return false;
}

/* Whether the record names member the owner of a partition of e (a
 * replicated one's preferred leader), or the leader of one now: after a
 * failover a replicated partition is served by its new leader, and its
 * preferred leader serves it again once leadership returns. */
static bool owns_part(const tn_meta_topic_entry_t *e, uint64_t member)
{
    for (uint32_t p = 0; e != NULL && p < e->rec.partitions; p++) {
        if (e->owners[p] == member)
            return true;
        if (e->pstates != NULL && e->pstates[p].nreplicas > 0 && e->pstates[p].leader == member)
            return true;
    }
    return false;
}

/* Whether member m (this node when self) serves topic: the record names
 * it the owner or the leader of a partition; for this node also a partition open here
 * (before its first registration, or an ephemeral topic, which is never
 * recorded and lives on each node that has it). */
static bool serves(const tn_meta_member_t *m, bool self, const tn_meta_topic_entry_t *e,
                   const tn_topic_t *t)
{
    if (self)
        return owns_part(e, m->id) || has_local_part(t);
    return m->status == TN_MEMBER_ALIVE && m->nsq.tcp_port != 0 && owns_part(e, m->id);
}

static const tn_meta_state_t *replica(const tn_nsq_http_t *api)
{
    return api->meta != NULL ? tn_meta_state(api->meta) : NULL;
}

/* The producers of a topic (t: the engine's, or NULL; e: its record, or
 * NULL) as a JSON array, sorted by member id; this node also before its
 * record is in the replica. */
static void producers_json(tn_nsq_http_t *api, const tn_meta_topic_entry_t *e, const tn_topic_t *t,
                           tn_buf_t *b)
{
    const tn_meta_state_t *s = replica(api);
    size_t n = s != NULL ? s->nmembers : 0;
    tn_meta_nsq_t me;
    self_nsq(api, &me);
    const tn_meta_member_t lone = {.id = api->node_id};
    bool first = true;
    tn_buf_append(b, "[", 1);
    for (size_t i = 0; i < n + 1; i++) {
        const tn_meta_member_t *m = i < n ? &s->members[i] : &lone;
        bool self = m->id == api->node_id;
        if (m == &lone && s != NULL && tn_meta_member_find(s, api->node_id) != NULL)
            break;
        if (!serves(m, self, e, t))
            continue;
        if (!first)
            tn_buf_append(b, ",", 1);
        producer_json(self ? &me : &m->nsq, b);
        tn_buf_append(b, "}", 1);
        first = false;
    }
    tn_buf_append(b, "]", 1);
}

/* The topic's channels: the engine's (in its order), then those its record
 * names that the engine has not made yet. */
static void channels_json(const tn_topic_t *t, const tn_meta_topic_entry_t *e, tn_buf_t *b)
{
    tn_buf_append(b, "[", 1);
    bool first = true;
    for (const tn_channel_t *ch = t != NULL ? t->channels : NULL; ch != NULL; ch = ch->next) {
        if (!nsq_channel(ch))
            continue;
        appendf(b, "%s\"%s\"", first ? "" : ",", ch->name);
        first = false;
    }
    for (uint32_t i = 0; e != NULL && i < e->nchannels; i++) {
        const char *name = e->channels[i];
        bool listed = false;
        for (const tn_channel_t *ch = t != NULL ? t->channels : NULL; ch != NULL && !listed;
             ch = ch->next)
            listed = nsq_channel(ch) && strcmp(ch->name, name) == 0;
        if (listed || !nsq_named(name))
            continue;
        appendf(b, "%s\"%s\"", first ? "" : ",", name);
        first = false;
    }
    tn_buf_append(b, "]", 1);
}

/* go-nsq reads /lookup's plain body only when this header is present. */
static void answer_lookupd(tn_http_request_t *r, int status, tn_buf_t *b)
{
    tn_buf_append(b, "", 1);
    tn_http_respond(r, status, "application/json; charset=utf-8", V1_HEADER, tn_buf_data(b),
                    tn_buf_size(b) - 1);
}

/* The topic= argument, which must be there: false when the 400 was
 * answered. An empty one is there (nsqd tells a missing key from an empty
 * value): the name check that follows refuses it. */
static bool topic_arg(tn_http_request_t *r, char *topic, size_t len)
{
    if (!query_ok(r->head.query)) {
        answer_error(r, 400, "INVALID_REQUEST");
        return false;
    }
    int rc = tn_http_query(r->head.query, "topic", topic, len);
    /* Too long to be any topic's name, or holding a NUL (the only escape
     * query_ok lets through that tn_http_query refuses): there, but
     * invalid. */
    if (rc == TN_ETOOBIG || rc == UV_EINVAL) {
        topic[0] = '\0';
        return true;
    }
    if (rc != 1) {
        answer_error(r, 400, "MISSING_ARG_TOPIC");
        return false;
    }
    return true;
}

static tn_topic_t *ready_topic(tn_nsq_http_t *api, const tn_http_request_t *r, const char *name)
{
    tn_topic_t *t;
    if (tn_broker_topic(api->broker, name, strlen(name), false, 0, NULL, &t) != 0)
        return NULL;
    return nsq_topic(api, r, t) ? t : NULL;
}

/* The topic as these endpoints see it: *t the engine's when ready, *e its
 * record; false when neither is there (or r may not see it). A topic
 * recorded through another node is known before this engine has made it. */
static bool lookup_topic(tn_nsq_http_t *api, const tn_http_request_t *r, const char *name,
                         tn_topic_t **t, const tn_meta_topic_entry_t **e)
{
    const tn_meta_state_t *s = replica(api);
    *t = ready_topic(api, r, name);
    *e = s != NULL ? tn_meta_topic_find(s, name) : NULL;
    if (*t == NULL && *e != NULL && (!nsq_named(name) || hidden(api, r, name)))
        *e = NULL;
    return *t != NULL || *e != NULL;
}

static void on_lookup(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_lookup, JUDGE_LIST_MS))
        return;
    char topic[256];
    if (!topic_arg(r, topic, sizeof(topic)))
        return;
    tn_topic_t *t;
    const tn_meta_topic_entry_t *e;
    if (!lookup_topic(api, r, topic, &t, &e)) {
        answer_error(r, 404, "TOPIC_NOT_FOUND");
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"channels\":", 12);
    channels_json(t, e, &b);
    tn_buf_append(&b, ",\"producers\":", 13);
    producers_json(api, e, t, &b);
    tn_buf_append(&b, "}", 1);
    answer_lookupd(r, 200, &b);
    tn_buf_fini(&b);
}

/* The names of the topics r sees that member m serves (every topic, for
 * m NULL), as a JSON array; returns how many. */
static uint64_t topics_json(tn_nsq_http_t *api, const tn_http_request_t *r,
                            const tn_meta_member_t *m, bool self, tn_buf_t *b)
{
    const tn_meta_state_t *s = replica(api);
    tn_buf_append(b, "[", 1);
    uint64_t n = 0;
    tn_broker_t *br = api->broker;
    for (size_t i = 0; i < br->nbuckets; i++)
        for (tn_topic_t *t = br->buckets[i]; t != NULL; t = t->hnext) {
            if (!nsq_topic(api, r, t))
                continue;
            if (m != NULL && !serves(m, self, s != NULL ? tn_meta_topic_find(s, t->name) : NULL, t))
                continue;
            appendf(b, "%s\"%s\"", n++ ? "," : "", t->name);
        }
    tn_buf_append(b, "]", 1);
    return n;
}

static void on_topics(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_topics, JUDGE_LIST_MS))
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"topics\":", 10);
    topics_json(api, r, NULL, false, &b);
    tn_buf_append(&b, "}", 1);
    answer_lookupd(r, 200, &b);
    tn_buf_fini(&b);
}

static void on_channels(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_channels, JUDGE_LIST_MS))
        return;
    char topic[256];
    if (!topic_arg(r, topic, sizeof(topic)))
        return;
    tn_topic_t *t;
    const tn_meta_topic_entry_t *e;
    lookup_topic(api, r, topic, &t, &e);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"channels\":", 12);
    channels_json(t, e, &b);
    tn_buf_append(&b, "}", 1);
    answer_lookupd(r, 200, &b);
    tn_buf_fini(&b);
}

/* One /nodes entry: the member, the topics it serves and a tombstone flag
 * for each (nsqadmin needs them; tern tombstones nothing). */
static void node_json(tn_nsq_http_t *api, const tn_http_request_t *r, const tn_meta_member_t *m,
                      bool self, const tn_meta_nsq_t *n, tn_buf_t *b)
{
    producer_json(n, b);
    tn_buf_append(b, ",\"topics\":", 10);
    uint64_t ntopics = topics_json(api, r, m, self, b);
    tn_buf_append(b, ",\"tombstones\":[", 15);
    for (uint64_t i = 0; i < ntopics; i++)
        appendf(b, "%sfalse", i > 0 ? "," : "");
    tn_buf_append(b, "]}", 2);
}

/* Every alive member with an NSQ address, sorted by id; this node always
 * (also before its record is in the replica). */
static void on_nodes(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_nodes, JUDGE_LIST_MS))
        return;
    const tn_meta_state_t *s = replica(api);
    size_t n = s != NULL ? s->nmembers : 0;
    tn_meta_nsq_t me;
    self_nsq(api, &me);
    const tn_meta_member_t lone = {.id = api->node_id};
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"producers\":[", 14);
    bool first = true;
    for (size_t i = 0; i < n + 1; i++) {
        const tn_meta_member_t *m = i < n ? &s->members[i] : &lone;
        bool self = m->id == api->node_id;
        if (m == &lone && s != NULL && tn_meta_member_find(s, api->node_id) != NULL)
            break;
        if (!self && (m->status != TN_MEMBER_ALIVE || m->nsq.tcp_port == 0))
            continue;
        if (!first)
            tn_buf_append(&b, ",", 1);
        node_json(api, r, m, self, self ? &me : &m->nsq, &b);
        first = false;
    }
    tn_buf_append(&b, "]}", 2);
    answer_lookupd(r, 200, &b);
    tn_buf_fini(&b);
}

/* nsqlookupd's POST /topic/tombstone: topic= and node= are checked as it
 * checks them (400 INVALID_REQUEST, MISSING_ARG_TOPIC, MISSING_ARG_NODE),
 * then 200. tern tombstones nothing: /lookup is answered from the
 * cluster's records, the same on every node, and a node hidden for a
 * while by the one asked would make the answers differ
 * (docs/nsq-compatibility.md). */
static void on_topic_tombstone(tn_http_request_t *r, void *arg)
{
    (void)arg;
    char topic[256], node[8];
    if (!topic_arg(r, topic, sizeof(topic)))
        return;
    /* 0: not there; a value too long for node[] is there. */
    if (tn_http_query(r->head.query, "node", node, sizeof(node)) == 0) {
        answer_error(r, 400, "MISSING_ARG_NODE");
        return;
    }
    answer_done(r);
}

/* --- topic and channel management ------------------------------------------------ */

enum { OP_CREATE, OP_EMPTY, OP_PAUSE, OP_UNPAUSE, OP_DELETE };

typedef struct {
    tn_waiter_t w;
    tn_http_request_t *r; /* NULL once the client went away */
    tn_nsq_http_t *api;
    int op;
    bool channel_op;
    char topic[256];
    char channel[256];
    tn_meta_req_t mreq;
    bool recorded;         /* a deletion: the metastore has dropped the record */
    bool ok_text;          /* an /mpub of no message: a made topic is answered OK */
    int64_t created_at_ms; /* a topic deletion: the record's, for the purge */
} mgmt_t;

static void mgmt_run(mgmt_t *m);

static void on_deleted(void *arg, int status)
{
    mgmt_t *m = arg;
    if (m->r != NULL) {
        m->r->on_cancel = NULL;
        if (status == 0)
            answer_done(m->r);
        else
            answer_error(m->r, 503, "E_STORAGE");
    }
    tn_free(m);
}

static void on_mgmt_cancel(tn_http_request_t *r)
{
    mgmt_t *m = r->data;
    m->r = NULL; /* the creation goes on; its waiter frees m */
}

static void on_mgmt_wait(tn_waiter_t *w, int status)
{
    mgmt_t *m = (mgmt_t *)w;
    if (m->r == NULL) {
        tn_free(m);
        return;
    }
    if (status != 0) {
        m->r->on_cancel = NULL;
        answer_error(m->r, 503, "E_STORAGE");
        tn_free(m);
        return;
    }
    mgmt_run(m);
}

/* A channel's pause, unpause or emptying is durable, or failed. */
static void on_channel_synced(void *arg, int status)
{
    on_deleted(arg, status);
}

/* /topic/empty has dropped what the topic held. */
static void on_emptied(void *arg, int status)
{
    on_deleted(arg, status);
}

/* /topic/pause, /topic/unpause: the node's pause file holds it. */
static void on_topic_paused(void *arg, int status)
{
    on_deleted(arg, status);
}

/* The engine's answer to a recorded deletion: nothing there is done too. */
static void on_engine_deleted(void *arg, int status)
{
    on_deleted(arg, status == TN_ENOTFOUND ? 0 : status);
}

/* A topic deletion purged on every live member, or not on some: the
 * record is deleted either way (500 names the members that did not
 * confirm; they delete it when their replica shows the deletion). */
static void on_topic_purged(void *arg, int status, const char *error)
{
    mgmt_t *m = arg;
    if (m->r != NULL) {
        m->r->on_cancel = NULL;
        if (status == 0) {
            answer_done(m->r);
        } else {
            static const char head[] = "{\"message\":\"topic deleted; ";
            tn_buf_t b;
            tn_buf_init(&b);
            if (tn_buf_append(&b, head, sizeof(head) - 1) != 0 ||
                tn_buf_json_escape(&b, error) != 0 ||
                tn_buf_append(&b, "\"}", 3) != 0) /* with the NUL answer_json wants */
                answer_error(m->r, 500, "topic deleted; not purged on every node");
            else
                answer_json(m->r, 500, tn_buf_data(&b));
            tn_buf_fini(&b);
        }
    }
    tn_free(m);
}

/* A deletion the metastore has recorded: now the engine's part. */
static void on_delete_recorded(tn_meta_req_t *req, int status)
{
    mgmt_t *m = req->data;
    if (status != 0 && status != TN_ENOTFOUND) {
        if (m->r != NULL) {
            m->r->on_cancel = NULL;
            answer_error(m->r, 503, "E_METASTORE");
        }
        tn_free(m);
        return;
    }
    m->recorded = true;
    /* The topic's files go on every live member, this one included, and
     * the answer waits for them (cluster/router.h). */
    if (status == 0 && !m->channel_op && m->api->router != NULL &&
        tn_router_purge(m->api->router, m->topic, m->created_at_ms, on_topic_purged, m) == 0)
        return;
    /* The engine's part, even if the client has left (else a restart would
     * make it again). */
    int rc = tn_broker_delete(m->api->broker, m->topic, m->channel_op ? m->channel : NULL,
                              on_engine_deleted, m);
    if (rc != 0)
        on_deleted(m, rc);
}

/* Propose the deletion of m's topic or channel, from the record as this
 * node's replica has it now. */
static void propose_delete(mgmt_t *m)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = m->channel_op ? TN_MC_CHANNEL_DELETE : TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", m->topic);
    snprintf(c.channel, sizeof(c.channel), "%s", m->channel);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(m->api->meta), m->topic);
    m->created_at_ms = e != NULL ? e->rec.created_at_ms : 0;
    int rc = tn_meta_propose(m->api->meta, &m->mreq, &c, on_delete_recorded);
    if (rc != 0)
        on_delete_recorded(&m->mreq, rc);
}

/* This replica confirmed current with the leader, or could not be. */
static void on_delete_current(void *arg, int status)
{
    mgmt_t *m = arg;
    if (status == 0)
        propose_delete(m);
    else
        on_delete_recorded(&m->mreq, TN_ENOLEADER); /* 503 E_METASTORE */
}

/* Propose the deletion of m's topic or channel first; false when there is
 * no metastore (the engine deletes at once). */
static bool delete_through_meta(mgmt_t *m)
{
    if (m->api->meta == NULL || m->recorded || tn_nsq_is_ephemeral(m->topic, strlen(m->topic)) ||
        (m->channel_op && tn_nsq_is_ephemeral(m->channel, strlen(m->channel))))
        return false;
    m->mreq.data = m;
    m->r->on_cancel = on_mgmt_cancel;
    /* A destructive action waits for a current replica: one behind (a
     * busy metastore, a slow disk) confirms with the leader first; 503
     * E_METASTORE when it cannot within 10 s (api/v1/common.h,
     * tn__v1_caught_up). */
    if (tn_meta_caught_up(m->api->meta))
        propose_delete(m);
    else if (tn_meta_confirm(m->api->meta, on_delete_current, m) != 0)
        on_delete_recorded(&m->mreq, TN_ENOLEADER);
    return true;
}

/* Do the operation, or wait for a topic or channel being created; frees m
 * once answered. */
static void mgmt_run(mgmt_t *m)
{
    tn_http_request_t *r = m->r;
    tn_broker_t *b = m->api->broker;
    bool create = m->op == OP_CREATE;
    tn_topic_t *t;
    m->w.cb = on_mgmt_wait;
    /* /channel/create needs the topic to exist, as in nsqd. */
    int rc = tn_broker_topic(b, m->topic, strlen(m->topic), create && !m->channel_op, 0, &m->w, &t);
    if (rc == UV_EAGAIN)
        return;
    r->on_cancel = NULL;
    if (rc == TN_ENOTFOUND) {
        answer_error(r, 404, "TOPIC_NOT_FOUND");
        tn_free(m);
        return;
    }
    if (rc == UV_EBUSY) {
        answer_error(r, 409, "TOPIC_BEING_DELETED");
        tn_free(m);
        return;
    }
    if (rc != 0) {
        answer_error(r, 503, "E_STORAGE");
        tn_free(m);
        return;
    }
    if (!m->channel_op && m->op == OP_DELETE) {
        if (delete_through_meta(m))
            return;
        r->on_cancel = on_mgmt_cancel;
        rc = tn_topic_delete(t, on_deleted, m);
        if (rc != 0) {
            r->on_cancel = NULL;
            answer_error(r, rc == UV_EBUSY ? 409 : 503, rc == UV_EBUSY ? "BUSY" : "E_STORAGE");
            tn_free(m);
        }
        return;
    }
    if (!m->channel_op) {
        if (m->op == OP_EMPTY) {
            r->on_cancel = on_mgmt_cancel;
            rc = tn_topic_empty(t, on_emptied, m);
            if (rc == 0)
                return; /* on_emptied answers and frees m */
            r->on_cancel = NULL;
            if (rc == UV_EAGAIN)
                answer_error(r, 409, "CHANNELS_BEHIND_PAUSE");
            else
                answer_error(r, rc == UV_EBUSY ? 409 : 503, rc == UV_EBUSY ? "BUSY" : "E_STORAGE");
            tn_free(m);
            return;
        } else if (m->op == OP_PAUSE || m->op == OP_UNPAUSE) {
            /* Answered once the node's pause file holds it (DESIGN.md:
             * "done" only after the fsync), as nsqd persists its metadata
             * before answering. */
            r->on_cancel = on_mgmt_cancel;
            rc = tn_topic_pause(t, m->op == OP_PAUSE, on_topic_paused, m);
            if (rc == 0)
                return; /* on_topic_paused answers and frees m */
            r->on_cancel = NULL;
            answer_error(r, rc == UV_EBUSY ? 409 : 503, rc == UV_EBUSY ? "BUSY" : "E_STORAGE");
            tn_free(m);
            return;
        }
        if (m->ok_text)
            answer_ok(r);
        else
            answer_done(r);
        tn_free(m);
        return;
    }
    tn_channel_t *ch;
    r->on_cancel = on_mgmt_cancel;
    rc = tn_topic_channel(t, m->channel, strlen(m->channel), create, &m->w, &ch);
    if (rc == UV_EAGAIN)
        return;
    r->on_cancel = NULL;
    if (rc == TN_ENOTFOUND)
        answer_error(r, 404, "CHANNEL_NOT_FOUND");
    else if (rc != 0)
        answer_error(r, 503, "E_STORAGE");
    else if (m->op == OP_DELETE) {
        if (delete_through_meta(m))
            return;
        r->on_cancel = on_mgmt_cancel;
        rc = tn_channel_delete(ch, on_deleted, m);
        if (rc == 0)
            return; /* on_deleted answers and frees m */
        r->on_cancel = NULL;
        answer_error(r, rc == UV_EBUSY ? 409 : 503, rc == UV_EBUSY ? "BUSY" : "E_STORAGE");
    } else if (m->op == OP_CREATE) {
        answer_done(r);
    } else {
        /* Answered once the records are durable in every partition held
         * here (DESIGN.md: "done" only after the fdatasync). */
        if (m->op == OP_EMPTY)
            rc = tn_channel_empty(ch);
        else
            rc = tn_channel_pause(ch, m->op == OP_PAUSE);
        if (rc == 0) {
            r->on_cancel = on_mgmt_cancel;
            rc = tn_channel_sync_all(ch, on_channel_synced, m);
            if (rc == 0)
                return; /* on_channel_synced answers and frees m */
            r->on_cancel = NULL;
        }
        answer_error(r, 503, "E_STORAGE");
    }
    tn_free(m);
}

/* A management action on r, or NULL after answering 503 (out of memory). */
static mgmt_t *mgmt_new(tn_http_request_t *r, tn_nsq_http_t *api, int op, bool channel_op)
{
    mgmt_t *m = tn_calloc(1, sizeof(*m));
    if (m == NULL) {
        answer_error(r, 503, "E_OUT_OF_MEMORY");
        return NULL;
    }
    m->r = r;
    m->api = api;
    m->op = op;
    m->channel_op = channel_op;
    return m;
}

/* Run m for r, whose answer it owns from now on. */
static void mgmt_start(tn_http_request_t *r, mgmt_t *m)
{
    r->data = m;
    r->on_cancel = on_mgmt_cancel;
    mgmt_run(m);
}

static void mgmt(tn_http_request_t *r, tn_nsq_http_t *api, int op, bool channel_op)
{
    mgmt_t *m = mgmt_new(r, api, op, channel_op);
    if (m == NULL)
        return;
    /* nsqd names errors by family: the channel endpoints say INVALID_ARG_TOPIC. */
    if (!topic_arg(r, m->topic, sizeof(m->topic))) {
        tn_free(m);
        return;
    }
    if (!tn_nsq_valid_topic(m->topic, strlen(m->topic))) {
        /* nsqd's /topic/delete, /topic/pause and /topic/unpause look the
         * name up without checking it: a topic that cannot exist is one
         * it does not have. */
        if (!channel_op && (op == OP_DELETE || op == OP_PAUSE || op == OP_UNPAUSE))
            answer_error(r, 404, "TOPIC_NOT_FOUND");
        else
            answer_error(r, 400, channel_op ? "INVALID_ARG_TOPIC" : "INVALID_TOPIC");
        tn_free(m);
        return;
    }
    if (channel_op) {
        int rc = tn_http_query(r->head.query, "channel", m->channel, sizeof(m->channel));
        if (rc == TN_ETOOBIG || rc == UV_EINVAL) { /* too long, or a NUL: there, but invalid */
            m->channel[0] = '\0';
            rc = 1;
        }
        if (rc != 1) {
            answer_error(r, 400, "MISSING_ARG_CHANNEL");
            tn_free(m);
            return;
        }
        if (!tn_nsq_valid_channel(m->channel, strlen(m->channel))) {
            answer_error(r, 400, "INVALID_ARG_CHANNEL");
            tn_free(m);
            return;
        }
        if (tn_name_link_channel(m->channel, strlen(m->channel))) {
            /* A link's channel is the node's own (core/name.h); the name
             * is valid, so the words say why. */
            char body[512];
            snprintf(body, sizeof(body),
                     "{\"message\":\"INVALID_ARG_CHANNEL\",\"error\":\"channel %s %s\"}",
                     m->channel, TN__V1_LINK_CHANNEL);
            answer_json(r, 400, body);
            tn_free(m);
            return;
        }
    }
    /* On a guarded topic: a channel's actions are its consumers' (a
     * consume grant); the topic's, its owner's; creating an existing
     * topic, anyone's who may see it (a dead-letter topic's name, its
     * parent's owner's: api/access.h). */
    need_t need = channel_op ? NEED_CONSUME : op == OP_CREATE ? NEED_MAKE : NEED_MANAGE;
    if (!authorize(r, api, m->topic, need)) {
        tn_free(m);
        return;
    }
    mgmt_start(r, m);
}

#define MGMT_HANDLER(fn, op, chan)                                                                 \
    static void fn(tn_http_request_t *r, void *arg)                                                \
    {                                                                                              \
        if (!judge_later(r, arg, fn, JUDGE_WAIT_MS))                                               \
            mgmt(r, arg, op, chan);                                                                \
    }
MGMT_HANDLER(on_topic_create, OP_CREATE, false)
MGMT_HANDLER(on_topic_empty, OP_EMPTY, false)
MGMT_HANDLER(on_topic_pause, OP_PAUSE, false)
MGMT_HANDLER(on_topic_unpause, OP_UNPAUSE, false)
MGMT_HANDLER(on_channel_create, OP_CREATE, true)
MGMT_HANDLER(on_channel_empty, OP_EMPTY, true)
MGMT_HANDLER(on_channel_pause, OP_PAUSE, true)
MGMT_HANDLER(on_channel_unpause, OP_UNPAUSE, true)
MGMT_HANDLER(on_topic_delete, OP_DELETE, false)
MGMT_HANDLER(on_channel_delete, OP_DELETE, true)

/* --- /pub, /mpub ---------------------------------------------------------------- */

typedef struct {
    tn_pub_t pub;
    tn_http_request_t *r; /* NULL once the client went away */
} hpub_t;

static void on_hpub_cancel(tn_http_request_t *r)
{
    hpub_t *h = r->data;
    h->r = NULL; /* the publish goes on; nobody to tell */
}

static void on_hpub_done(tn_pub_t *p, int status)
{
    hpub_t *h = p->data;
    tn_http_request_t *r = h->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        const char *why = tn_replerr_text(status);
        if (status == 0)
            answer_ok(r);
        else if (why != NULL)
            answer_refused(r, why);
        else if (status == TN_EDISKHIGH)
            answer_error(r, 429, "E_THROTTLED");
        else if (status == TN_EFULL)
            answer_error(r, 503, "EPHEMERAL_TOPIC_FULL");
        else if (status == TN_EREMOTE)
            /* No partition of the topic is on this node; publishing through
             * the node that holds one comes with routing. */
            answer_error(r, 503, "E_PUB_FAILED: the partitions of this topic live on other nodes");
        else
            answer_error(r, 503, "E_STORAGE");
    }
    tn_pub_fini(&h->pub);
    tn_free(h);
}

/* topic= and defer= of a publish; false when an error was answered. */
static bool pub_args(tn_http_request_t *r, tn_nsq_http_t *api, char *topic, size_t tlen,
                     int64_t *deliver_at)
{
    if (tn_drain_active(api->drain)) {
        /* Retryable: a client (or the load balancer, which /readyz took
         * this node out of) sends it to another node. */
        answer_error(r, 503, "E_DRAINING");
        return false;
    }
    if (!query_ok(r->head.query)) {
        answer_error(r, 400, "INVALID_REQUEST");
        return false;
    }
    int rc = tn_http_query(r->head.query, "topic", topic, tlen);
    if (rc == 0) {
        answer_error(r, 400, "MISSING_ARG_TOPIC");
        return false;
    }
    if (rc != 1 || !tn_nsq_valid_topic(topic, strlen(topic))) {
        answer_error(r, 400, "INVALID_TOPIC");
        return false;
    }
    *deliver_at = 0;
    char d[32];
    rc = tn_http_query(r->head.query, "defer", d, sizeof(d));
    if (rc == 1) {
        char *end;
        long long v = strtoll(d, &end, 10);
        /* Go's strconv.ParseInt: a sign, then digits only (strtoll
         * would skip white space first). */
        if (d[0] == '\0' || isspace((unsigned char)d[0]) || *end != '\0' || v < 0 ||
            v > api->max_defer_ms) {
            answer_error(r, 400, "INVALID_DEFER");
            return false;
        }
        if (v > 0)
            *deliver_at = tn_now_wall_ms() + v;
    } else if (rc != 0) {
        answer_error(r, 400, "INVALID_DEFER");
        return false;
    }
    return authorize(r, api, topic, NEED_PRODUCE);
}

static void publish(tn_http_request_t *r, tn_nsq_http_t *api, hpub_t *h, const char *topic,
                    int64_t deliver_at)
{
    h->r = r;
    h->pub.data = h;
    h->pub.grow_here = true; /* NSQ topics grow where they are published */
    r->data = h;
    r->on_cancel = on_hpub_cancel;
    int rc =
        tn_router_publish(api->router, topic, strlen(topic), &h->pub, deliver_at, on_hpub_done);
    if (rc != 0)
        on_hpub_done(&h->pub, rc);
}

static void on_pub(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_pub, JUDGE_WAIT_MS))
        return;
    char topic[256];
    int64_t deliver_at;
    /* nsqd looks at the body before the query: an empty body is
     * MSG_EMPTY whatever the topic. */
    size_t len = tn_buf_size(&r->body);
    if (len == 0) {
        answer_error(r, 400, "MSG_EMPTY");
        return;
    }
    if (len > api->max_msg_size) {
        answer_error(r, 413, "MSG_TOO_BIG");
        return;
    }
    if (!pub_args(r, api, topic, sizeof(topic), &deliver_at))
        return;
    hpub_t *h = tn_calloc(1, sizeof(*h));
    if (h == NULL || tn_pub_init(&h->pub, 1) != 0 ||
        tn_pub_set(&h->pub, 0, tn_buf_data(&r->body), len) != 0) {
        if (h != NULL)
            tn_pub_fini(&h->pub);
        tn_free(h);
        answer_error(r, 503, "E_OUT_OF_MEMORY");
        return;
    }
    publish(r, api, h, topic, deliver_at);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Split an /mpub body into messages. Returns the count (0 with *code set
 * on a malformed body) and fills bodies (caller frees). */
static uint32_t split_mpub(tn_http_request_t *r, tn_nsq_http_t *api, bool binary, tn_iov_t **out,
                           const char **code, int *status)
{
    const char *data = tn_buf_data(&r->body);
    size_t len = tn_buf_size(&r->body);
    *out = NULL;
    *status = 413;
    if (binary) {
        if (len < 4) {
            *code = "BAD_BODY";
            return 0;
        }
        uint32_t n = be32((const unsigned char *)data);
        if (n == 0 || n > 65536) {
            *code = "BAD_BODY";
            return 0;
        }
        tn_iov_t *v = tn_malloc(n * sizeof(*v));
        if (v == NULL) {
            *code = "E_OUT_OF_MEMORY";
            *status = 503;
            return 0;
        }
        /* Past the count, nsqd's readMPUB calls every fault the message's
         * (E_BAD_MESSAGE, so 413 BAD_MESSAGE): a size missing or cut
         * short, a size of 0, negative (as an int32) or over
         * --max-msg-size, a message cut short. */
        size_t p = 4;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t m = len - p < 4 ? 0 : be32((const unsigned char *)data + p);
            p += len - p < 4 ? len - p : 4;
            if (m == 0 || m > INT32_MAX || m > api->max_msg_size || len - p < m) {
                tn_free(v);
                *code = "BAD_MESSAGE";
                return 0;
            }
            v[i] = tn_iov(data + p, m);
            p += m;
        }
        if (p != len) {
            /* tern refuses surplus bytes rather than ignore them. */
            tn_free(v);
            *code = "BAD_BODY";
            return 0;
        }
        *out = v;
        return n;
    }
    /* Text: one message per line; empty lines are skipped. */
    uint32_t n = 0, cap = 0;
    tn_iov_t *v = NULL;
    size_t p = 0;
    while (p < len) {
        const char *nl = memchr(data + p, '\n', len - p);
        size_t end = nl != NULL ? (size_t)(nl - data) : len;
        size_t m = end - p;
        if (m > 0) {
            if (m > api->max_msg_size) {
                tn_free(v);
                *code = "MSG_TOO_BIG";
                return 0;
            }
            if (n == 65536) {
                tn_free(v);
                *code = "BAD_BODY";
                return 0;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                tn_iov_t *nv = tn_realloc(v, cap * sizeof(*nv));
                if (nv == NULL) {
                    tn_free(v);
                    *code = "E_OUT_OF_MEMORY";
                    *status = 503;
                    return 0;
                }
                v = nv;
            }
            v[n++] = tn_iov(data + p, m);
        }
        p = end + 1;
    }
    *code = NULL;
    *out = v;
    return n;
}

static void on_mpub(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    if (judge_later(r, api, on_mpub, JUDGE_WAIT_MS))
        return;
    char topic[256];
    int64_t deliver_at;
    if (!pub_args(r, api, topic, sizeof(topic), &deliver_at))
        return;
    /* nsqd: text unless binary= is there; then binary but for false and
     * 0 (a value it does not know, an empty one too, is binary). */
    char b[8];
    int brc = tn_http_query(r->head.query, "binary", b, sizeof(b));
    bool binary = brc != 0 && !(brc == 1 && (strcmp(b, "false") == 0 || strcmp(b, "0") == 0));
    tn_iov_t *bodies;
    const char *code;
    int status;
    uint32_t n = split_mpub(r, api, binary, &bodies, &code, &status);
    if (n == 0) {
        tn_free(bodies);
        if (code != NULL) {
            answer_error(r, status, code);
            return;
        }
        /* A text body of no message publishes nothing, but nsqd has made
         * the topic before it reads the body: made here too, then OK. */
        mgmt_t *m = mgmt_new(r, api, OP_CREATE, false);
        if (m == NULL)
            return;
        m->ok_text = true;
        snprintf(m->topic, sizeof(m->topic), "%s", topic);
        mgmt_start(r, m);
        return;
    }
    hpub_t *h = tn_calloc(1, sizeof(*h));
    if (h == NULL || tn_pub_init(&h->pub, n) != 0 || tn_pub_set_all(&h->pub, bodies) != 0) {
        if (h != NULL)
            tn_pub_fini(&h->pub);
        tn_free(h);
        tn_free(bodies);
        answer_error(r, 503, "E_OUT_OF_MEMORY");
        return;
    }
    tn_free(bodies);
    publish(r, api, h, topic, deliver_at);
}

/* --- /config/{opt} ----------------------------------------------------------- */

void tn_nsq_http_fini(tn_nsq_http_t *api)
{
    tn_free(api->lookupds_json);
    api->lookupds_json = NULL;
}

/* The JSON array of n strings (addrs[i] of lens[i] bytes), or "null"
 * when null (nsqd's nil list after a PUT of null). NULL: out of memory. */
static char *lookupds_json(char *const *addrs, const size_t *lens, size_t n, bool null)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = null ? tn_buf_append(&b, "null", 4) : tn_buf_append(&b, "[", 1);
    for (size_t i = 0; i < n && !null; i++) {
        if (i > 0)
            rc = rc ? rc : tn_buf_append(&b, ",", 1);
        rc = rc ? rc : tn_buf_append(&b, "\"", 1);
        rc = rc ? rc : tn_buf_json_escape_n(&b, addrs[i], lens[i]);
        rc = rc ? rc : tn_buf_append(&b, "\"", 1);
    }
    rc = rc || null ? rc : tn_buf_append(&b, "]", 1);
    rc = rc ? rc : tn_buf_append(&b, "", 1); /* the NUL, to hand the text over as a string */
    if (rc != 0) {
        tn_buf_fini(&b);
        return NULL;
    }
    return b.base; /* transferred: nothing was consumed, so the text starts there */
}

int tn_nsq_http_set_lookupds(tn_nsq_http_t *api, const char *addrs)
{
    /* At most one entry per comma, plus one. */
    size_t cap = 1;
    for (const char *p = addrs; *p != '\0'; p++)
        cap += *p == ',';
    char **v = tn_calloc(cap, sizeof(*v));
    size_t *lens = tn_calloc(cap, sizeof(*lens));
    size_t n = 0;
    char *json = NULL;
    if (v != NULL && lens != NULL) {
        for (const char *p = addrs; *p != '\0';) {
            const char *end = strchr(p, ',');
            size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
            while (len > 0 && *p == ' ')
                p++, len--;
            while (len > 0 && p[len - 1] == ' ')
                len--;
            if (len > 0) {
                v[n] = (char *)p;
                lens[n++] = len;
            }
            if (end == NULL)
                break;
            p = end + 1;
        }
        json = lookupds_json(v, lens, n, false);
    }
    tn_free(v);
    tn_free(lens);
    if (json == NULL)
        return UV_ENOMEM;
    tn_free(api->lookupds_json);
    api->lookupds_json = json;
    return 0;
}

/* A PUT body of nsqlookupd_tcp_addresses, as Go's json.Unmarshal into a
 * []string takes it: an array of strings (a null element is ""), or null
 * for none. */
typedef struct {
    char **v;
    size_t *lens;
    size_t n, cap;
    int depth;
    bool null; /* the whole value was null */
    bool bad;
    bool nomem;
} addr_list_t;

static int al_add(addr_list_t *a, const char *s, size_t len)
{
    if (a->depth != 1) {
        a->bad = true;
        return 0;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        char **v = tn_realloc(a->v, cap * sizeof(*v));
        if (v != NULL)
            a->v = v;
        size_t *l = v != NULL ? tn_realloc(a->lens, cap * sizeof(*l)) : NULL;
        if (l == NULL) {
            a->nomem = true;
            return 0;
        }
        a->lens = l;
        a->cap = cap;
    }
    char *copy = tn_malloc(len + 1);
    if (copy == NULL) {
        a->nomem = true;
        return 0;
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    a->v[a->n] = copy;
    a->lens[a->n++] = len;
    return 1;
}

static int al_null(void *ctx)
{
    addr_list_t *a = ctx;
    if (a->depth == 0) {
        a->null = true;
        return 1;
    }
    return al_add(a, "", 0);
}

static int al_string(void *ctx, const unsigned char *s, size_t len)
{
    return al_add(ctx, (const char *)s, len);
}

static int al_start_array(void *ctx)
{
    addr_list_t *a = ctx;
    if (a->depth++ != 0)
        a->bad = true;
    return !a->bad;
}

static int al_end_array(void *ctx)
{
    ((addr_list_t *)ctx)->depth--;
    return 1;
}

static int al_other(void *ctx)
{
    ((addr_list_t *)ctx)->bad = true;
    return 0;
}

static int al_bool(void *ctx, int b)
{
    (void)b;
    return al_other(ctx);
}

static int al_number(void *ctx, const char *s, size_t len)
{
    (void)s, (void)len;
    return al_other(ctx);
}

static int al_key(void *ctx, const unsigned char *s, size_t len)
{
    (void)s, (void)len;
    return al_other(ctx);
}

static void al_fini(addr_list_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        tn_free(a->v[i]);
    tn_free(a->v);
    tn_free(a->lens);
}

/* false after answering an error. */
static bool put_lookupds(tn_http_request_t *r, tn_nsq_http_t *api)
{
    static const yajl_callbacks cbs = {
        al_null,  al_bool, NULL,     NULL,           al_number,    al_string,
        al_other, al_key,  al_other, al_start_array, al_end_array,
    };
    addr_list_t a = {0};
    bool ok = false;
    int rc = tn_json_events(tn_buf_data(&r->body), tn_buf_size(&r->body), &cbs, &a, true, &ok);
    if (rc == 0 && a.nomem)
        rc = UV_ENOMEM;
    if (rc != 0) {
        al_fini(&a);
        answer_error(r, 500, "INTERNAL_ERROR");
        return false;
    }
    if (!ok || a.bad) {
        al_fini(&a);
        answer_error(r, 400, "INVALID_VALUE");
        return false;
    }
    char *json = lookupds_json(a.v, a.lens, a.n, a.null);
    if (json == NULL || api->set_lookupds == NULL ||
        api->set_lookupds(api->set_lookupds_arg, (const char *const *)a.v, a.n) != 0) {
        tn_free(json);
        al_fini(&a);
        answer_error(r, 500, "INTERNAL_ERROR");
        return false;
    }
    al_fini(&a);
    tn_free(api->lookupds_json);
    api->lookupds_json = json;
    TN_LOG(TN_LOG_NOTICE, "nsqlookupd_tcp_addresses set to %s by PUT /config", json);
    return true;
}

/* The log levels of /config/log_level: nsqd's, by the name PUT takes (in
 * any case) and the number GET answers, its fatal being tern's error as
 * --log-level fatal is; and tern's notice, which nsqd has no number for:
 * GET answers its name, "notice", a JSON string. PUT also takes what GET
 * answers (a number, or the name in quotes), so a level read can be put
 * back as it was read. */
static const struct {
    const char *name;
    char number; /* nsqd's, '\0' for none */
    int level;
} nsq_levels[] = {
    {"debug", '1', TN_LOG_DEBUG}, {"info", '2', TN_LOG_INFO},   {"notice", '\0', TN_LOG_NOTICE},
    {"warn", '3', TN_LOG_WARN},   {"error", '4', TN_LOG_ERROR}, {"fatal", '5', TN_LOG_ERROR},
};

/* false after answering an error. */
static bool put_log_level(tn_http_request_t *r)
{
    const char *body = tn_buf_data(&r->body);
    size_t len = tn_buf_size(&r->body);
    bool quoted = len >= 2 && body[0] == '"' && body[len - 1] == '"';
    if (quoted) {
        body++;
        len -= 2;
    }
    for (size_t i = 0; i < TN_ARRAY_SIZE(nsq_levels); i++) {
        bool named =
            strlen(nsq_levels[i].name) == len && strncasecmp(body, nsq_levels[i].name, len) == 0;
        bool numbered =
            !quoted && len == 1 && nsq_levels[i].number != '\0' && body[0] == nsq_levels[i].number;
        if (named || numbered) {
            tn_log_set_level(nsq_levels[i].level);
            TN_LOG(TN_LOG_NOTICE, "log level set to %s by PUT /config", nsq_levels[i].name);
            return true;
        }
    }
    answer_error(r, 400, "INVALID_VALUE");
    return false;
}

/* What GET /config/log_level answers: nsqd's number for the level, or
 * the name in quotes when nsqd has none. */
static void answer_log_level(tn_http_request_t *r)
{
    int level = tn_log_level;
    char body[16] = "5"; /* TN_LOG_OFF, not settable here: as nsqd's fatal */
    for (size_t i = 0; i < TN_ARRAY_SIZE(nsq_levels); i++) {
        if (nsq_levels[i].level != level)
            continue;
        if (nsq_levels[i].number != '\0')
            snprintf(body, sizeof(body), "%c", nsq_levels[i].number);
        else
            snprintf(body, sizeof(body), "\"%s\"", nsq_levels[i].name);
        break;
    }
    answer_json(r, 200, body);
}

/* GET or PUT /config/{opt}, nsqd's doConfig for the two options it
 * can change at runtime. A PUT changes how the node runs for everyone,
 * so when NSQ AUTH is served by tern's users (every topic guarded) it
 * takes an admin, as a guarded topic's management takes its owner or an
 * admin; with open doors it is open, as in nsqd. */
static void on_config(tn_http_request_t *r, void *arg)
{
    tn_nsq_http_t *api = arg;
    const tn_iov_t *opt = tn_http_param(r, "opt");
    bool lookupds = opt->len == 24 && memcmp(opt->base, "nsqlookupd_tcp_addresses", 24) == 0;
    bool level = opt->len == 9 && memcmp(opt->base, "log_level", 9) == 0;
    bool put = r->head.method.len == 3 && memcmp(r->head.method.base, "PUT", 3) == 0;
    if (put) {
        if (api->v1 != NULL && api->v1->o.security && api->protect_all) {
            if (r->principal[0] == '\0') {
                tn__v1_nsq_refuse(r, 401, "AUTH_REQUIRED");
                return;
            }
            if (!tn__v1_is_admin(api->v1, r)) {
                tn__v1_nsq_refuse(r, 403, "FORBIDDEN");
                return;
            }
        }
        /* nsqd checks the body before the option. */
        if (tn_buf_size(&r->body) == 0) {
            answer_error(r, 413, "INVALID_VALUE");
            return;
        }
        if (lookupds && !put_lookupds(r, api))
            return;
        if (level && !put_log_level(r))
            return;
    }
    if (lookupds && api->lookupds_json != NULL) {
        answer_json(r, 200, api->lookupds_json);
    } else if (level) {
        answer_log_level(r);
    } else if (lookupds) {
        answer_json(r, 200, "[]");
    } else {
        answer_error(r, 400, "INVALID_OPTION");
    }
}

/* nsqd's topic and channel endpoints read no body, so a client's body there
 * (a form, "{}") is no error: up to this much is read and ignored. */
#define IGNORED_BODY (64 * 1024)

/* How much body a route reads; the message and body limits are api's,
 * known only when the routes are registered. */
enum { BODY_NONE, BODY_IGNORED, BODY_MSG, BODY_MPUB };

/* nsqd's HTTP routes, registered in this order (the server tries them in
 * it). A route with two methods is registered once per method. Who may
 * call a route is its handler's decision (authorize() per topic, on_config
 * for a PUT); HEAD and OPTIONS are the server's, from these routes. */
static const struct {
    const char *methods[2]; /* the second may be NULL */
    const char *path;
    uint8_t body;
    const char *too_big; /* the 413's message; NULL: the server's BODY_TOO_BIG */
    tn_http_handler_cb handler;
} nsq_routes[] = {
    {{"GET"}, "/ping", BODY_NONE, NULL, on_ping},
    {{"GET"}, "/info", BODY_NONE, NULL, on_info},
    {{"GET"}, "/healthz", BODY_NONE, NULL, on_healthz},
    {{"GET"}, "/stats", BODY_NONE, NULL, on_stats},
    {{"POST"}, "/topic/create", BODY_IGNORED, NULL, on_topic_create},
    {{"POST"}, "/topic/empty", BODY_IGNORED, NULL, on_topic_empty},
    {{"POST"}, "/topic/pause", BODY_IGNORED, NULL, on_topic_pause},
    {{"POST"}, "/topic/unpause", BODY_IGNORED, NULL, on_topic_unpause},
    {{"POST"}, "/channel/create", BODY_IGNORED, NULL, on_channel_create},
    {{"POST"}, "/channel/empty", BODY_IGNORED, NULL, on_channel_empty},
    {{"POST"}, "/channel/pause", BODY_IGNORED, NULL, on_channel_pause},
    {{"POST"}, "/channel/unpause", BODY_IGNORED, NULL, on_channel_unpause},
    {{"POST"}, "/topic/delete", BODY_IGNORED, NULL, on_topic_delete},
    {{"POST"}, "/channel/delete", BODY_IGNORED, NULL, on_channel_delete},
    {{"GET"}, "/lookup", BODY_NONE, NULL, on_lookup},
    {{"GET"}, "/topics", BODY_NONE, NULL, on_topics},
    {{"GET"}, "/channels", BODY_NONE, NULL, on_channels},
    {{"GET"}, "/nodes", BODY_NONE, NULL, on_nodes},
    {{"POST"}, "/topic/tombstone", BODY_IGNORED, NULL, on_topic_tombstone},
    {{"GET"}, "/readyz", BODY_NONE, NULL, on_readyz},
    {{"GET"}, "/config/{opt}", BODY_NONE, NULL, on_config},
    /* nsqd reads at most --max-msg-size bytes, and refuses more with
     * 413 INVALID_VALUE. */
    {{"PUT"}, "/config/{opt}", BODY_MSG, "INVALID_VALUE", on_config},
    {{"POST", "PUT"}, "/pub", BODY_MSG, "MSG_TOO_BIG", on_pub},
    {{"POST", "PUT"}, "/mpub", BODY_MPUB, "BODY_TOO_BIG", on_mpub},
};

int tn_nsq_http_register(tn_http_server_t *srv, tn_nsq_http_t *api)
{
    const uint64_t max_body[] = {
        [BODY_NONE] = 0,
        [BODY_IGNORED] = IGNORED_BODY,
        [BODY_MSG] = api->max_msg_size,
        [BODY_MPUB] = api->max_body_size,
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(nsq_routes); i++) {
        for (size_t m = 0; m < 2 && nsq_routes[i].methods[m] != NULL; m++) {
            int rc = tn_http_route(srv, nsq_routes[i].methods[m], nsq_routes[i].path,
                                   max_body[nsq_routes[i].body], nsq_routes[i].too_big,
                                   nsq_routes[i].handler, api);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}
