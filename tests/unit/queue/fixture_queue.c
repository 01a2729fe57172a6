/* The queue engine tests' broker fixture. See fixture_queue.h. */
#include "core/platform.h"

#include "fixture_queue.h"

#include "fixture_meta.h"

#include "core/alloc.h"
#include "core/time.h"
#include "storage/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qfx_t *qfx_new(void (*tweak)(tn_broker_opts_t *o), tn_place_fn place)
{
    qfx_t *q = calloc(1, sizeof(*q));
    q->fx = tu_fx_new(NULL);
    tu_broker_opts(&q->opts);
    if (tweak != NULL)
        tweak(&q->opts);
    q->place = place;
    q->wait_ms = 5000;
    qfx_open(q);
    return q;
}

void qfx_free(qfx_t *q)
{
    if (q->b != NULL)
        qfx_close(q);
    tu_fx_free(q->fx);
    free(q);
}

void qfx_open(qfx_t *q)
{
    assert_int_equal(tn_broker_open(&q->fx->loop, q->fx->store, &q->opts, &q->b), 0);
    if (q->place != NULL)
        tn_broker_set_placement(q->b, q->place, NULL);
}

/* tn_broker_close's callback has no argument: a fixture closes one broker
 * at a time. */
static bool broker_closed;

static void on_broker_closed(tn_broker_t *b)
{
    (void)b;
    broker_closed = true;
}

void qfx_close(qfx_t *q)
{
    broker_closed = false;
    tn_broker_close(q->b, on_broker_closed);
    /* Its handles close and its storage requests finish first. */
    while (!broker_closed)
        uv_run(&q->fx->loop, UV_RUN_ONCE);
    q->b = NULL;
}

void qfx_restart(qfx_t *q)
{
    qfx_close(q);
    tu_fx_reopen(q->fx);
    qfx_open(q);
}

void qfx_small_memlogs(tn_broker_opts_t *o)
{
    o->mem_max_records = 100;
    o->mem_max_bytes = 1 << 20;
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

bool qfx_run(qfx_t *q, bool (*done)(void *), void *arg, int64_t deadline_ms)
{
    uv_timer_t t;
    uv_timer_init(&q->fx->loop, &t);
    uv_timer_start(&t, on_tick, 5, 5);
    bool ok;
    while (!(ok = done != NULL && done(arg)) && tn_now_mono_ms() < deadline_ms)
        uv_run(&q->fx->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&q->fx->loop, UV_RUN_NOWAIT);
    return ok;
}

bool qfx_run_until(qfx_t *q, bool (*done)(void *), void *arg)
{
    return qfx_run(q, done, arg, tn_now_mono_ms() + q->wait_ms);
}

void qfx_run_for(qfx_t *q, int64_t ms)
{
    (void)qfx_run(q, NULL, NULL, tn_now_mono_ms() + ms);
}

void qfx_on_pub(tn_pub_t *p, int status)
{
    qfx_pubw_t *w = p->data;
    w->done = true;
    w->status = status;
}

bool qfx_pub_done(void *arg)
{
    return ((qfx_pubw_t *)arg)->done;
}

void qfx_on_wait(tn_waiter_t *w, int status)
{
    qfx_waitw_t *x = (qfx_waitw_t *)w;
    x->done = true;
    x->status = status;
}

bool qfx_wait_done(void *arg)
{
    return ((qfx_waitw_t *)arg)->done;
}

void qfx_waitw_init(qfx_waitw_t *w)
{
    memset(w, 0, sizeof(*w));
    w->w.cb = qfx_on_wait;
}

void qfx_wait(qfx_t *q, qfx_waitw_t *w, int want)
{
    assert_true(qfx_run_until(q, qfx_wait_done, w));
    assert_int_equal(w->status, want);
}

tn_topic_t *qfx_topic(qfx_t *q, const char *name, uint32_t nparts)
{
    tn_topic_t *t = NULL;
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    int rc = tn_broker_topic(q->b, name, strlen(name), true, nparts, &w.w, &t);
    if (rc == UV_EAGAIN) {
        qfx_wait(q, &w, 0);
        rc = tn_broker_topic(q->b, name, strlen(name), false, 0, NULL, &t);
    }
    assert_int_equal(rc, 0);
    return t;
}

tn_channel_t *qfx_channel(qfx_t *q, tn_topic_t *t, const char *name)
{
    tn_channel_t *ch = NULL;
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    int rc = tn_topic_channel(t, name, strlen(name), true, &w.w, &ch);
    if (rc == UV_EAGAIN) {
        qfx_wait(q, &w, 0);
        rc = tn_topic_channel(t, name, strlen(name), false, NULL, &ch);
    }
    assert_int_equal(rc, 0);
    return ch;
}

void qfx_on_sync_all(void *arg, int status)
{
    qfx_allw_t *w = arg;
    assert_false(w->done);
    w->done = true;
    w->status = status;
}

bool qfx_all_done(void *arg)
{
    return ((qfx_allw_t *)arg)->done;
}

bool qfx_grown_flag;
int qfx_grown_status;

void qfx_on_grown(void *arg, int status)
{
    (void)arg;
    qfx_grown_flag = true;
    qfx_grown_status = status;
}

bool qfx_is_grown(void *arg)
{
    (void)arg;
    return qfx_grown_flag;
}

static void on_deliver(tn_consumer_t *c, const tn_delivery_t *d)
{
    qfx_sink_t *s = c->data;
    assert_true(s->n < s->max);
    s->d[s->n] = *d;
    snprintf(s->bodies[s->n], sizeof(s->bodies[0]), "%.*s", (int)d->body->len, d->body->data);
    if (d->key != NULL)
        snprintf(s->keys[s->n], sizeof(s->keys[0]), "%.*s", (int)d->key->len, d->key->data);
    s->d[s->n].body = NULL; /* borrowed only for the callback */
    s->d[s->n].key = NULL;
    s->n++;
}

void qfx_sink_init(qfx_sink_t *s, int max, int64_t timeout_ms)
{
    assert_true(max <= QFX_MAXD);
    memset(s, 0, sizeof(*s));
    s->max = max;
    s->c.deliver = on_deliver;
    s->c.data = s;
    s->c.timeout_ms = timeout_ms;
}

void qfx_attach(qfx_sink_t *s, tn_channel_t *ch, uint32_t credit, int64_t timeout_ms)
{
    qfx_sink_init(s, QFX_MAXD, timeout_ms);
    tn_consumer_attach(&s->c, ch);
    tn_consumer_credit(&s->c, credit);
}

typedef struct {
    qfx_sink_t *s;
    int n;
} want_t;

static bool has_n(void *arg)
{
    want_t *w = arg;
    return w->s->n >= w->n;
}

void qfx_expect_n(qfx_t *q, qfx_sink_t *s, int n)
{
    want_t w = {s, n};
    assert_true(qfx_run_until(q, has_n, &w));
}

void qfx_assert_file_holds(qfx_t *q, const tn_topic_t *t, const uint64_t *want)
{
    int paused = 0;
    uint64_t *holds = NULL;
    uint32_t n = 0;
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, t->name, &paused, &holds, &n), 0);
    assert_int_equal(paused, 1);
    assert_int_equal(n, t->nparts);
    for (uint32_t i = 0; i < n; i++)
        if (!t->parts[i]->remote)
            assert_int_equal(holds[i], want[i]);
    tn_free(holds);
}
