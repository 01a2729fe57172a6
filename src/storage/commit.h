/* The committer: a storage thread that gathers requests into group commits.
 *
 * The loop thread submits requests; the committer takes the first, then
 * keeps gathering until it has max_reqs requests or max_bytes bytes, or
 * max_delay has passed since the first. It stops earlier when the round
 * already holds as many requests as the previous one (a steady set of
 * concurrent writers has all come back), or when no request arrived for a
 * short quiet gap; it does not wait at all after a round of one (a lone
 * writer should not pay the delay), and none of this waiting when an
 * urgent request (tn__committer_submit_urgent) is queued or in the round.
 * All of that waiting is the cohort way of gathering; the committer also
 * runs the flow way (no waiting: a round takes what is queued) and picks
 * the faster by measuring both (pace.h). It hands the
 * round to its `process` function, which writes, syncs and completes every
 * request through tn__store_complete. Between rounds it runs its `tick`
 * function when that is due (background syncs, disk checks).
 *
 * Internal to src/storage (tn__ names). Thread safety: submit from any
 * thread; process and tick run on the committer thread only. */
#ifndef TN_STORAGE_COMMIT_H
#define TN_STORAGE_COMMIT_H

#include "core/platform.h"

#include <stdatomic.h>
#include <uv.h>

typedef struct tn_store_s tn_store_t;
typedef struct tn__sreq_s tn__sreq_t;
typedef struct tn__committer_s tn__committer_t;

/* A storage request. Embedded first in every request type. */
struct tn__sreq_s {
    tn__sreq_t *next;
    uint64_t bytes; /* counted against the round's byte limit */
    int status;
    /* Control requests (GC, close, ...) set exec: it runs on the committer
     * thread after the round's records are written and synced, and must
     * complete the request itself. Record requests leave it NULL. */
    void (*exec)(tn__committer_t *c, tn__sreq_t *req);
    /* Runs on the loop thread when the request completes. */
    void (*done)(tn__sreq_t *req);
    /* Set by tn__committer_submit_urgent: the round it lands in waits for
     * no more requests (see there). */
    bool urgent;
};

/* Process one round (a NULL-terminated chain in submission order). */
typedef void (*tn__round_fn)(tn__committer_t *c, tn__sreq_t *round);
/* Periodic work; returns the monotonic ns time it wants to run next, or 0. */
typedef int64_t (*tn__tick_fn)(tn__committer_t *c, int64_t now_ns);

struct tn__committer_s {
    tn_store_t *store;
    const char *name;
    uv_thread_t thread;
    uv_mutex_t lock;
    uv_cond_t cond;
    tn__sreq_t *head;
    tn__sreq_t *tail;
    size_t qlen;
    uint64_t qbytes;
    bool waiting;   /* idle, waiting for the first request */
    bool gathering; /* waiting for more requests of a round */
    size_t round_n; /* requests taken so far by the gathering round */
    uint64_t round_bytes;
    size_t round_target;    /* the gathering round is complete at this many */
    int64_t last_submit_ns; /* monotonic time of the latest submission */
    bool stop;
    bool started;
    uint32_t max_reqs;
    uint64_t max_bytes;
    int64_t max_delay_ns;
    size_t last_round;
    int64_t next_tick_ns; /* committer thread only after start */
    tn__round_fn process;
    tn__tick_fn tick;
    /* Frees scratch at stop; NULL means scratch is one tn_malloc block. */
    void (*fini)(tn__committer_t *c);
    /* Scratch owned by the committer thread. */
    void *scratch;
    size_t scratch_cap;
    /* Counters: the committer thread writes, any thread may read. */
    atomic_uint_fast64_t rounds;
    atomic_uint_fast64_t requests;
    atomic_int_fast64_t round_ns; /* moving average of a round's processing time */
    /* How rounds are gathered (pace.h), published at each epoch's end:
     * the way now, counted epochs each way ([0] cohort, [1] flow) and
     * changes of the preferred way. */
    atomic_bool flowing;
    atomic_uint_fast64_t pace_epochs[2];
    atomic_uint_fast64_t pace_switches;
};

int tn__committer_start(tn__committer_t *c);
/* Move the control requests out of a round (order kept in both) and
 * return them; *round keeps the record requests. */
tn__sreq_t *tn__round_split(tn__sreq_t **round);
/* Run a round's control requests in order. */
void tn__round_exec(tn__committer_t *c, tn__sreq_t *controls);
/* Drain what is queued, then stop and join the thread. */
void tn__committer_stop(tn__committer_t *c);
void tn__committer_submit(tn__committer_t *c, tn__sreq_t *req);
/* Submit a request whose round must start now: the committer wakes for it
 * and ends the round it joins at the first moment the queue is empty,
 * instead of waiting for the cohort of the previous round or a quiet gap.
 * For a request another node waits for (a follower's copy of records,
 * whose fsync the leader's hw needs), which no later request of this
 * node's writers would join anyway. */
void tn__committer_submit_urgent(tn__committer_t *c, tn__sreq_t *req);
/* Ask for a tick no later than at_ns (any thread). */
void tn__committer_wake_at(tn__committer_t *c, int64_t at_ns);

#endif
