/* The /v1/storage routes (admins only): `POST /v1/storage/scrub` starts a
 * scrub of every sealed segment now (202 with the run's id, or with
 * `wait=true` 200 with its report once it ends), `GET /v1/storage/scrub`
 * answers the report of the run going on, or else of the last one.
 * docs/http-api.md has the fields; storage/scrub.h what a run checks.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/storage.h"

#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *status_name(const tn_scrub_report_t *rep)
{
    switch (rep->state) {
    case TN_SCRUB_RUNNING:
        return "running";
    case TN_SCRUB_DONE:
        return rep->errors_total > 0 ? "errors" : "ok";
    case TN_SCRUB_STOPPED:
        return "stopped";
    default:
        return "none";
    }
}

void tn__v1_scrub_report_json(tn_buf_t *b, const tn_scrub_report_t *rep)
{
    tn__v1_appendf(b, "{\"id\":%" PRIu64 ",\"status\":\"%s\",\"trigger\":\"%s\"", rep->id,
                   status_name(rep), rep->background ? "background" : "request");
    if (rep->state == TN_SCRUB_NONE) {
        tn__v1_appendf(b, ",\"started_ms\":null,\"finished_ms\":null");
    } else if (rep->state == TN_SCRUB_RUNNING) {
        tn__v1_appendf(b, ",\"started_ms\":%" PRId64 ",\"finished_ms\":null", rep->started_ms);
    } else {
        tn__v1_appendf(b, ",\"started_ms\":%" PRId64 ",\"finished_ms\":%" PRId64, rep->started_ms,
                       rep->finished_ms);
    }
    tn__v1_appendf(b,
                   ",\"partitions\":%" PRIu64 ",\"segments\":%" PRIu64
                   ",\"segments_skipped\":%" PRIu64 ",\"bytes\":%" PRIu64
                   ",\"records_checked\":%" PRIu64 ",\"throttled_ms\":%" PRId64
                   ",\"errors_total\":%" PRIu64 ",\"errors\":[",
                   rep->partitions, rep->segments, rep->segments_skipped, rep->bytes, rep->records,
                   rep->throttled_ns / 1000000, rep->errors_total);
    for (uint32_t i = 0; i < rep->nerrors; i++) {
        const tn_scrub_error_t *e = &rep->errors[i];
        tn_buf_append(b, i > 0 ? ",{\"topic\":" : "{\"topic\":", i > 0 ? 10 : 9);
        tn__v1_json_str(b, e->topic);
        tn__v1_appendf(b,
                       ",\"partition\":%" PRIu32 ",\"segment\":%" PRIu64 ",\"file\":", e->partition,
                       e->segment);
        tn__v1_json_str(b, e->file);
        tn__v1_appendf(b, ",\"position\":%" PRIu64, e->pos);
        if (e->offset != UINT64_MAX)
            tn__v1_appendf(b, ",\"offset\":%" PRIu64, e->offset);
        else
            tn__v1_appendf(b, ",\"offset\":null");
        tn__v1_appendf(b, ",\"isolated\":%s,\"error\":", e->isolated ? "true" : "false");
        tn__v1_json_str(b, e->what);
        tn_buf_append(b, "}", 1);
    }
    tn_buf_append(b, "]}", 2);
}

typedef struct {
    tn_scrub_wait_t w;
    tn_v1_t *v;
    tn_http_request_t *r;
} waiting_t;

static void on_wait_cancel(tn_http_request_t *r)
{
    waiting_t *x = r->data;
    if (x->v->scrub != NULL)
        tn_scrub_wait_cancel(x->v->scrub, &x->w);
    tn_free(x);
}

static void on_run_over(tn_scrub_wait_t *w, const tn_scrub_report_t *rep)
{
    waiting_t *x = w->data;
    tn_http_request_t *r = x->r;
    tn_free(x);
    r->on_cancel = NULL;
    tn_buf_t b;
    tn_buf_init(&b);
    tn__v1_scrub_report_json(&b, rep);
    tn__v1_respond_buf(r, 200, &b);
}

static bool have_scrubber(tn_v1_t *v, tn_http_request_t *r)
{
    if (v->scrub != NULL)
        return true;
    tn__v1_error(r, 503, "the scrubber is not running", "Retry-After: 1\r\n");
    return false;
}

static void on_scrub_post(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r) || !have_scrubber(v, r))
        return;
    char buf[16];
    int rc = tn_http_query(r->head.query, "wait", buf, sizeof(buf));
    bool wait = rc == 1 && (strcmp(buf, "true") == 0 || strcmp(buf, "1") == 0);
    if (rc < 0 || (rc == 1 && !wait && strcmp(buf, "false") != 0 && strcmp(buf, "0") != 0)) {
        tn__v1_error(r, 400, "invalid argument: wait must be true or false", NULL);
        return;
    }
    waiting_t *x = NULL;
    if (wait && (x = tn_calloc(1, sizeof(*x))) == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    uint64_t id;
    bool started;
    tn_scrub_start(v->scrub, &id, &started);
    TN_LOG(TN_LOG_NOTICE, "audit: %s %s scrub run %" PRIu64,
           r->principal[0] ? r->principal : "(open)", started ? "started" : "joined", id);
    if (x != NULL) {
        x->v = v;
        x->r = r;
        x->w.data = x;
        r->data = x;
        r->on_cancel = on_wait_cancel;
        tn_scrub_wait(v->scrub, &x->w, id, on_run_over);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn__v1_appendf(&b, "{\"id\":%" PRIu64 ",\"status\":\"running\",\"started\":%s}", id,
                   started ? "true" : "false");
    tn__v1_respond_buf(r, 202, &b);
}

static void on_scrub_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r) || !have_scrubber(v, r))
        return;
    tn_scrub_report_t *rep = tn_malloc(sizeof(*rep));
    if (rep == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    tn_scrub_report(v->scrub, rep);
    tn_buf_t b;
    tn_buf_init(&b);
    tn__v1_scrub_report_json(&b, rep);
    tn_free(rep);
    /* The report's object, with when the timer starts the next run. */
    b.len--;
    int64_t next = tn_scrub_next_ms(v->scrub);
    if (next > 0)
        tn__v1_appendf(&b, ",\"next_background_ms\":%" PRId64 "}", next);
    else
        tn__v1_appendf(&b, ",\"next_background_ms\":null}");
    tn__v1_respond_buf(r, 200, &b);
}

int tn__v1_storage_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "POST", "/v1/storage/scrub", 0, TN__V1_NO_BODY, on_scrub_post, v);
    return rc ? rc
              : tn_http_route(srv, "GET", "/v1/storage/scrub", 0, TN__V1_NO_BODY, on_scrub_get, v);
}
