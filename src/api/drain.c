/* The node's drain state and its watch over what is still in flight. See
 * drain.h.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/drain.h"

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"
#include "api/v1.h"
#include "api/ws.h"
#include "cluster/router.h"
#include "proto/http/server.h"
#include "proto/nsq/server.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define CHECK_MS 100 /* how often a drain counts what is in flight */

struct tn_drain_s {
    uv_loop_t *loop;
    tn_drain_opts_t o;
    tn_drain_doors_t doors;
    tn_drain_state_t state;
    int64_t started_ms;  /* wall clock */
    int64_t deadline_ms; /* wall clock, for GET */
    int64_t deadline_mono;
    uv_timer_t timer;
    bool done; /* the done hook ran */
};

int tn_drain_new(uv_loop_t *loop, const tn_drain_opts_t *opts, tn_drain_t **out)
{
    tn_drain_t *d = tn_calloc(1, sizeof(*d));
    if (d == NULL)
        return UV_ENOMEM;
    d->loop = loop;
    d->o = *opts;
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    *out = d;
    return 0;
}

void tn_drain_attach(tn_drain_t *d, const tn_drain_doors_t *doors)
{
    d->doors = *doors;
}

void tn_drain_counts(const tn_drain_t *d, tn_drain_counts_t *out)
{
    memset(out, 0, sizeof(*out));
    if (d->doors.nsq != NULL) {
        tn_nsq_server_stats_t st;
        tn_nsq_server_stats(d->doors.nsq, &st);
        out->nsq_in_flight = st.in_flight;
        out->nsq_consumers = st.consumers;
    }
    out->long_polls = d->doors.v1 != NULL ? tn_v1_long_polls(d->doors.v1) : 0;
    if (d->doors.ws != NULL) {
        tn_ws_stats_t st;
        tn_ws_stats(d->doors.ws, &st);
        out->ws_feeds = st.connections;
    }
    if (d->doors.router != NULL) {
        tn_router_stats_t st;
        tn_router_stats(d->doors.router, &st);
        out->publishes = st.publishing;
    }
}

static bool quiet(const tn_drain_counts_t *c)
{
    return c->nsq_in_flight == 0 && c->long_polls == 0 && c->ws_feeds == 0 && c->publishes == 0;
}

static void end(tn_drain_t *d, bool timed_out)
{
    uv_timer_stop(&d->timer);
    d->done = true;
    if (d->o.done != NULL)
        d->o.done(d->o.arg, timed_out);
}

static void on_check(uv_timer_t *t)
{
    tn_drain_t *d = t->data;
    tn_drain_counts_t c;
    tn_drain_counts(d, &c);
    if (quiet(&c)) {
        d->state = TN_DRAIN_DRAINED;
        TN_LOG(TN_LOG_NOTICE, "drained after %" PRId64 " ms: nothing in flight; exiting",
               tn_now_wall_ms() - d->started_ms);
        end(d, false);
        return;
    }
    if (tn_now_mono_ms() >= d->deadline_mono) {
        TN_LOG(TN_LOG_WARN,
               "drain timed out: %" PRIu64 " NSQ message(s) in flight, %" PRIu32
               " long poll(s), %" PRIu32 " live feed(s), %" PRIu64
               " publish(es) under way; exiting anyway (unfinished messages are delivered again)",
               c.nsq_in_flight, c.long_polls, c.ws_feeds, c.publishes);
        end(d, true);
    }
}

int tn_drain_start(tn_drain_t *d, int64_t timeout_ms)
{
    if (d->state != TN_DRAIN_SERVING || d->done)
        return UV_EALREADY;
    if (timeout_ms <= 0)
        timeout_ms = d->o.timeout_ms;
    d->state = TN_DRAIN_DRAINING;
    d->started_ms = tn_now_wall_ms();
    d->deadline_ms = d->started_ms + timeout_ms;
    d->deadline_mono = tn_now_mono_ms() + timeout_ms;
    TN_LOG(TN_LOG_NOTICE,
           "draining: out of readiness, refusing publishes and new consumes, waiting up to %" PRId64
           " ms for what is in flight",
           timeout_ms);
    if (d->o.started != NULL)
        d->o.started(d->o.arg);
    if (d->doors.nsq != NULL)
        tn_nsq_server_drain(d->doors.nsq);
    if (d->doors.v1 != NULL)
        tn_v1_drain(d->doors.v1);
    if (d->doors.http != NULL)
        tn_http_server_end_keepalive(d->doors.http);
    if (d->doors.https != NULL)
        tn_http_server_end_keepalive(d->doors.https);
    if (d->doors.ws != NULL)
        tn_ws_close_all(d->doors.ws, "E_DRAINING", "the node is draining; reconnect to another");
    /* Counted from the first check on (a feed's close takes a loop turn);
     * the first at once, so an idle node goes within one turn. */
    uv_timer_start(&d->timer, on_check, 0, CHECK_MS);
    return 0;
}

bool tn_drain_active(const tn_drain_t *d)
{
    return d != NULL && d->state != TN_DRAIN_SERVING;
}

tn_drain_state_t tn_drain_state(const tn_drain_t *d)
{
    return d->state;
}

void tn_drain_json(const tn_drain_t *d, tn_buf_t *out)
{
    static const char *const names[] = {"serving", "draining", "drained"};
    tn_drain_counts_t c;
    tn_drain_counts(d, &c);
    char line[512];
    int n = snprintf(line, sizeof(line),
                     "{\"state\":\"%s\",\"started_ms\":%" PRId64 ",\"deadline_ms\":%" PRId64
                     ",\"nsq_in_flight\":%" PRIu64 ",\"nsq_consumers\":%" PRIu32
                     ",\"long_polls\":%" PRIu32 ",\"ws_feeds\":%" PRIu32
                     ",\"publishes_in_progress\":%" PRIu64 "}",
                     names[d->state], d->started_ms, d->deadline_ms, c.nsq_in_flight,
                     c.nsq_consumers, c.long_polls, c.ws_feeds, c.publishes);
    if (n > 0)
        tn_buf_append(out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_free(h->data);
}

void tn_drain_stop(tn_drain_t *d)
{
    if (d == NULL)
        return;
    uv_timer_stop(&d->timer);
    d->done = true;
    memset(&d->doors, 0, sizeof(d->doors));
}

void tn_drain_close(tn_drain_t *d)
{
    if (d == NULL)
        return;
    tn_drain_stop(d);
    uv_close((uv_handle_t *)&d->timer, on_timer_closed);
}
