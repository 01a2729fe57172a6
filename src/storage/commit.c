/* The committer thread: gathering rounds of requests. See commit.h. */
#include "core/platform.h"

#include "storage/commit.h"
#include "storage/pace.h"

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Shortest and longest quiet gap that ends a round early. */
#define QUIET_MIN_NS 20000

static void timed_wait(tn__committer_t *c, int64_t deadline_ns)
{
    int64_t now = tn_now_mono_ns();
    if (deadline_ns <= now)
        return;
    uv_cond_timedwait(&c->cond, &c->lock, (uint64_t)(deadline_ns - now));
}

/* Take the queue's first request (lock held, queue not empty). */
static tn__sreq_t *pop(tn__committer_t *c)
{
    tn__sreq_t *r = c->head;
    c->head = r->next;
    if (c->head == NULL)
        c->tail = NULL;
    c->qlen--;
    c->qbytes -= r->bytes;
    r->next = NULL;
    return r;
}

/* Run the due tick without the lock (held on entry and on return) and
 * keep the earlier of its answer and any wake_at made meanwhile. */
static void run_tick(tn__committer_t *c, int64_t now)
{
    c->next_tick_ns = 0;
    uv_mutex_unlock(&c->lock);
    int64_t next = c->tick(c, now);
    uv_mutex_lock(&c->lock);
    if (next != 0 && (c->next_tick_ns == 0 || next < c->next_tick_ns))
        c->next_tick_ns = next;
}

static void committer_main(void *arg)
{
    tn__committer_t *c = arg;
    /* Named for profiles and /proc (perf, top -H): "tern-log", "tern-wal". */
    char tname[16];
    snprintf(tname, sizeof(tname), "tern-%s", c->name != NULL ? c->name : "commit");
    pthread_setname_np(pthread_self(), tname);
    tn__pace_t pace;
    tn__pace_init(&pace, tn_now_mono_ns());
    uv_mutex_lock(&c->lock);
    for (;;) {
        /* The way rounds are gathered (pace.h): cohort or flow. */
        bool cohort = c->max_delay_ns > 0 && !pace.flow;
        /* Cohort: after a round of several requests their writers will
         * likely all come back: wait for that many (up to max_delay)
         * before waking, instead of waking for the first and again for
         * the rest. */
        bool expect_cohort = c->last_round > 1 && cohort;
        int64_t idle_from = c->head == NULL ? tn_now_mono_ns() : 0;
        while (c->head == NULL && !c->stop) {
            int64_t now = tn_now_mono_ns();
            if (c->next_tick_ns != 0 && now >= c->next_tick_ns) {
                run_tick(c, now);
                continue;
            }
            if (expect_cohort) {
                expect_cohort = false;
                c->gathering = true;
                c->round_n = 0;
                c->round_bytes = 0;
                c->round_target = TN_MIN((size_t)c->max_reqs, c->last_round);
                int64_t deadline = now + c->max_delay_ns;
                if (c->next_tick_ns != 0 && c->next_tick_ns < deadline)
                    deadline = c->next_tick_ns;
                timed_wait(c, deadline);
                c->gathering = false;
                continue;
            }
            c->waiting = true;
            if (c->next_tick_ns != 0)
                timed_wait(c, c->next_tick_ns);
            else
                uv_cond_wait(&c->cond, &c->lock);
            c->waiting = false;
        }
        if (c->head == NULL && c->stop)
            break;
        if (idle_from != 0)
            tn__pace_idle(&pace, tn_now_mono_ns() - idle_from);

        /* Gather a round. */
        tn__sreq_t *first = pop(c), *last = first;
        bool urgent = first->urgent;
        size_t n = 1;
        uint64_t bytes = first->bytes;
        int64_t start = tn_now_mono_ns();
        int64_t quiet = TN_MAX(c->max_delay_ns / 8, QUIET_MIN_NS);
        bool wait_more = c->last_round > 1 && cohort;
        /* A round as large as the last one has every steady writer in it. */
        size_t target = TN_MIN((size_t)c->max_reqs, TN_MAX(c->last_round, (size_t)2));
        while (n < c->max_reqs && bytes < c->max_bytes) {
            if (c->head != NULL) {
                if (bytes + c->head->bytes > c->max_bytes)
                    break; /* carried to the next round */
                tn__sreq_t *r = pop(c);
                last->next = r;
                last = r;
                urgent |= r->urgent;
                n++;
                bytes += r->bytes;
                continue;
            }
            if (!wait_more || c->stop || n >= target || urgent)
                break;
            int64_t deadline = TN_MIN(start + c->max_delay_ns, c->last_submit_ns + quiet);
            if (tn_now_mono_ns() >= deadline)
                break;
            c->gathering = true;
            c->round_n = n;
            c->round_bytes = bytes;
            c->round_target = target;
            timed_wait(c, deadline);
            c->gathering = false;
        }
        c->last_round = n;
        uv_mutex_unlock(&c->lock);

        int64_t t0 = tn_now_mono_ns();
        c->process(c, first);
        int64_t took = tn_now_mono_ns() - t0;
        int64_t avg = atomic_load_explicit(&c->round_ns, memory_order_relaxed);
        atomic_store_explicit(&c->round_ns, avg == 0 ? took : avg + (took - avg) / 8,
                              memory_order_relaxed);
        atomic_fetch_add_explicit(&c->rounds, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->requests, n, memory_order_relaxed);
        if (c->max_delay_ns > 0) {
            tn__pace_round(&pace, n, t0 + took);
            if (pace.rounds == 0) { /* an epoch ended */
                if (pace.switches != atomic_load_explicit(&c->pace_switches, memory_order_relaxed))
                    TN_LOG(TN_LOG_DEBUG, "%s rounds: now gathered %s (cohort %.0f/s, flow %.0f/s)",
                           tname, pace.pref_flow ? "as they flow" : "by cohort", pace.rate[0],
                           pace.rate[1]);
                atomic_store_explicit(&c->flowing, pace.flow, memory_order_relaxed);
                atomic_store_explicit(&c->pace_epochs[0], pace.epochs[0], memory_order_relaxed);
                atomic_store_explicit(&c->pace_epochs[1], pace.epochs[1], memory_order_relaxed);
                atomic_store_explicit(&c->pace_switches, pace.switches, memory_order_relaxed);
            }
        }

        uv_mutex_lock(&c->lock);
        int64_t now = tn_now_mono_ns();
        if (c->next_tick_ns != 0 && now >= c->next_tick_ns)
            run_tick(c, now);
    }
    uv_mutex_unlock(&c->lock);
}

int tn__committer_start(tn__committer_t *c)
{
    int rc = uv_mutex_init(&c->lock);
    if (rc != 0)
        return rc;
    rc = uv_cond_init(&c->cond);
    if (rc != 0) {
        uv_mutex_destroy(&c->lock);
        return rc;
    }
    rc = uv_thread_create(&c->thread, committer_main, c);
    if (rc != 0) {
        uv_cond_destroy(&c->cond);
        uv_mutex_destroy(&c->lock);
        return rc;
    }
    c->started = true;
    return 0;
}

void tn__committer_stop(tn__committer_t *c)
{
    if (!c->started)
        return;
    uv_mutex_lock(&c->lock);
    c->stop = true;
    uv_cond_signal(&c->cond);
    uv_mutex_unlock(&c->lock);
    uv_thread_join(&c->thread);
    uv_cond_destroy(&c->cond);
    uv_mutex_destroy(&c->lock);
    if (c->fini != NULL)
        c->fini(c);
    else
        tn_free(c->scratch);
    c->scratch = NULL;
    c->started = false;
}

static void submit(tn__committer_t *c, tn__sreq_t *req, bool urgent)
{
    req->next = NULL;
    req->urgent = urgent;
    uv_mutex_lock(&c->lock);
    if (c->tail != NULL)
        c->tail->next = req;
    else
        c->head = req;
    c->tail = req;
    c->qlen++;
    c->qbytes += req->bytes;
    c->last_submit_ns = tn_now_mono_ns();
    if (c->waiting || (c->gathering && (urgent || c->round_n + c->qlen >= c->round_target ||
                                        c->round_bytes + c->qbytes >= c->max_bytes)))
        uv_cond_signal(&c->cond);
    uv_mutex_unlock(&c->lock);
}

void tn__committer_submit(tn__committer_t *c, tn__sreq_t *req)
{
    submit(c, req, false);
}

void tn__committer_submit_urgent(tn__committer_t *c, tn__sreq_t *req)
{
    submit(c, req, true);
}

void tn__committer_wake_at(tn__committer_t *c, int64_t at_ns)
{
    if (at_ns < 1)
        at_ns = 1; /* 0 means "no tick due" */
    uv_mutex_lock(&c->lock);
    if (c->next_tick_ns == 0 || at_ns < c->next_tick_ns) {
        c->next_tick_ns = at_ns;
        if (c->waiting)
            uv_cond_signal(&c->cond);
    }
    uv_mutex_unlock(&c->lock);
}

tn__sreq_t *tn__round_split(tn__sreq_t **round)
{
    tn__sreq_t *records = NULL, **rt = &records;
    tn__sreq_t *controls = NULL, **ct = &controls;
    for (tn__sreq_t *s = *round, *next; s != NULL; s = next) {
        next = s->next;
        s->next = NULL;
        if (s->exec != NULL) {
            *ct = s;
            ct = &s->next;
        } else {
            *rt = s;
            rt = &s->next;
        }
    }
    *round = records;
    return controls;
}

void tn__round_exec(tn__committer_t *c, tn__sreq_t *controls)
{
    for (tn__sreq_t *s = controls, *next; s != NULL; s = next) {
        next = s->next;
        s->exec(c, s);
    }
}
