/* The broker fixture the queue engine's tests share (tests/unit/queue:
 * test_channel.c, test_placement.c, test_topic.c): a broker over a
 * store of its own (tu_fx_t) with the tests' options, opened, closed and
 * restarted (recovery runs), the loop run until a condition holds or for a
 * while, the waiters of a publish, a topic or channel lookup, a callback
 * that runs once (a channel's sync of all partitions, a pause) and a
 * topic's growth, a consumer that records what it is delivered, and a
 * check of the hold points in a topic's pause file. What the test files
 * set differently stays in them: tweaks of the options, the placement,
 * the wait bound (test_topic.c waits up to 10 s), a sink's bound. Built
 * into every tests/unit/queue binary (see CMakeLists.txt). Every helper
 * fails the current test (cmocka) instead of returning an error. */
#ifndef TN_TESTS_FIXTURE_QUEUE_H
#define TN_TESTS_FIXTURE_QUEUE_H

#include "core/platform.h"

#include "testutil.h"

#include "queue/queue.h"

typedef struct {
    tu_fx_t *fx;           /* the loop and the store; owned */
    tn_broker_t *b;        /* owned; NULL while closed */
    tn_broker_opts_t opts; /* what each qfx_open passes */
    tn_place_fn place;     /* NULL: no placement (everything local) */
    int64_t wait_ms;       /* qfx_run_until's bound: 5000 unless the test sets it */
} qfx_t;

/* A fixture: a new store (tu_fx_new), the options of tu_broker_opts
 * adjusted by tweak (NULL: none), and a broker opened with them that asks
 * place (NULL: none; its arg NULL) where each partition lives. Freed by
 * qfx_free. */
qfx_t *qfx_new(void (*tweak)(tn_broker_opts_t *o), tn_place_fn place);

/* Close q's broker if it is open (qfx_close), its store, and free q. */
void qfx_free(qfx_t *q);

/* Open q->b over q's store with q->opts, and set q->place on it when
 * not NULL. */
void qfx_open(qfx_t *q);

/* Close q->b, running the loop (no timer of its own) until its handles
 * are closed and its storage requests have finished; q->b is NULL after. */
void qfx_close(qfx_t *q);

/* Close broker and store, open both again (recovery runs). */
void qfx_restart(qfx_t *q);

/* A tweak for qfx_new: memory logs bounded at 100 records and 1 MiB. */
void qfx_small_memlogs(tn_broker_opts_t *o);

/* Run the loop with a repeating 5 ms tick beside the broker's own timers
 * (some an hour apart), so a loop turn never sleeps longer than that: a
 * one-shot tick restarted each turn could fire before the turn's poll on
 * a loaded machine, and the poll then slept until the broker's next
 * timer. Stops when done(arg) says so (done NULL: never) or at
 * deadline_ms (tn_now_mono_ms); returns done. */
bool qfx_run(qfx_t *q, bool (*done)(void *), void *arg, int64_t deadline_ms);

/* qfx_run until done(arg), at most q->wait_ms; returns done. */
bool qfx_run_until(qfx_t *q, bool (*done)(void *), void *arg);

/* qfx_run for ms. */
void qfx_run_for(qfx_t *q, int64_t ms);

/* A publish and its completion: p.data must point at the qfx_pubw_t. */
typedef struct {
    tn_pub_t p;
    bool done;
    int status;
} qfx_pubw_t;

/* The publish callback that fills the qfx_pubw_t in p->data. */
void qfx_on_pub(tn_pub_t *p, int status);
/* cond for qfx_run_until: the qfx_pubw_t arg is done. */
bool qfx_pub_done(void *arg);

/* A waiter (w.cb = qfx_on_wait) and its completion. */
typedef struct {
    tn_waiter_t w;
    bool done;
    int status;
} qfx_waitw_t;

void qfx_on_wait(tn_waiter_t *w, int status);
/* cond for qfx_run_until: the qfx_waitw_t arg is done. */
bool qfx_wait_done(void *arg);

/* Make w (the caller's) ready to pass as a waiter: zeroed, w->w.cb set. */
void qfx_waitw_init(qfx_waitw_t *w);

/* Run the loop until w is done; the test fails unless it is, within
 * q->wait_ms, with status want. */
void qfx_wait(qfx_t *q, qfx_waitw_t *w, int want);

/* The topic name (borrowed for the call) of q->b, created with nparts
 * partitions (0: the default) when missing, running the loop while its
 * creation is under way. The topic is the broker's. */
tn_topic_t *qfx_topic(qfx_t *q, const char *name, uint32_t nparts);

/* The channel name (borrowed for the call) of t, created when missing,
 * running the loop while its creation is under way. The channel is t's. */
tn_channel_t *qfx_channel(qfx_t *q, tn_topic_t *t, const char *name);

/* The completion of a callback (void *arg, int status) that runs once:
 * tn_channel_sync_all's, tn_topic_pause's, tn_topic_empty's,
 * tn_broker_delete's. */
typedef struct {
    bool done;
    int status;
} qfx_allw_t;

/* Fills the qfx_allw_t arg; the test fails if it was done already. */
void qfx_on_sync_all(void *arg, int status);
/* cond for qfx_run_until: the qfx_allw_t arg is done. */
bool qfx_all_done(void *arg);

/* tn_topic_grow's completion, for one growth at a time: the test clears
 * qfx_grown_flag, passes qfx_on_grown (arg unused) and runs the loop
 * until qfx_is_grown. */
extern bool qfx_grown_flag;
extern int qfx_grown_status;
void qfx_on_grown(void *arg, int status);
bool qfx_is_grown(void *arg);

#define QFX_MAXD 256

/* A consumer that records its deliveries: each delivery (its body and
 * key pointers cleared: they are borrowed only for the callback) with its
 * body and key as strings, cut at 64 and 16 bytes. */
typedef struct {
    tn_consumer_t c;
    tn_delivery_t d[QFX_MAXD];
    char bodies[QFX_MAXD][64];
    char keys[QFX_MAXD][16];
    int n;
    int max; /* more deliveries than this fail the test */
} qfx_sink_t;

/* Make s (the caller's) ready to attach: zeroed, recording into itself,
 * taking at most max (at most QFX_MAXD) deliveries, timeout_ms. */
void qfx_sink_init(qfx_sink_t *s, int max, int64_t timeout_ms);

/* qfx_sink_init s for QFX_MAXD deliveries and timeout_ms, attach it to ch
 * (until tn_consumer_detach) and give it credit. */
void qfx_attach(qfx_sink_t *s, tn_channel_t *ch, uint32_t credit, int64_t timeout_ms);

/* Run the loop until s has had n deliveries; the test fails if it has not
 * within q->wait_ms. */
void qfx_expect_n(qfx_t *q, qfx_sink_t *s, int n);

/* t's pause file says paused, names every partition of t, and each local
 * partition's hold point there equals want[i]. */
void qfx_assert_file_holds(qfx_t *q, const tn_topic_t *t, const uint64_t *want);

#endif
