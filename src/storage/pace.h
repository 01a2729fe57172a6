/* How a committer gathers its rounds, chosen by measuring both ways.
 *
 * Two ways of gathering a round:
 *   - cohort: after a round of several requests, wait (up to max_delay)
 *     for as many to come back before starting the next round, and end a
 *     round once it is as large as the last one. Fewer, larger rounds:
 *     fewer wake-ups and fewer syncs per request. It wins where the event
 *     loop's CPU is the limit, or where a sync is slow against the time
 *     the writers take to come back (their turnaround).
 *   - flow: start a round with whatever is queued the moment the previous
 *     one ends. Requests that come back while a round syncs form the next
 *     one, so the disk never waits for the writers' turnaround. It wins
 *     where a sync is short against that turnaround, and on virtual disks
 *     where a sync issued after an idle gap is slower than one issued
 *     back to back (measured on the development VM: 2 KiB appends with
 *     fdatasync, 60 µs back to back, p90 370-680 µs after a 50 µs gap).
 * Which wins depends on the machine and the load (docs/performance.md has
 * both outcomes), so the committer measures instead of guessing.
 *
 * DESIGN.
 *   Time is cut into epochs of at least TN_PACE_EPOCH_NS and
 *   TN_PACE_EPOCH_ROUNDS rounds; an epoch runs one way and its rate is the
 *   requests it completed per second. The preferred way runs most epochs.
 *   After TN_PACE_PROBE_EVERY counted epochs one epoch runs the other way
 *   (a probe), then one more the preferred way. The probe's rate is set
 *   against the mean of the preferred epochs just before and just after
 *   it (a load that drifts during the three cancels out). Flow is faster
 *   when its rate beats cohort's by more than TN_PACE_MARGIN_PCT percent;
 *   cohort, preferred, gives way to flow only when flow is faster in
 *   TN_PACE_FLOW_WINS probes in a row (each winning probe is followed by
 *   another at once), and flow gives way to cohort at the first probe
 *   where it is not faster. The bias is deliberate: at the same rate
 *   cohort costs less CPU per request (fewer rounds, fewer syncs: the
 *   kernel's share of a sync is counted against the broker too), and a
 *   disk at its bandwidth limit makes epochs noisy. The first probe comes
 *   after the first counted epoch. Each probe that leaves the preference
 *   as it was doubles the wait before the next, up to
 *   TN_PACE_PROBE_EVERY << TN_PACE_BACKOFF_MAX epochs (about 16 s), so a
 *   clear winner pays little for the probes; a change resets the wait.
 *   A cohort epoch whose rounds averaged fewer than two requests is not
 *   counted (no cohort: both ways do the same); a flow epoch counts
 *   whatever its rounds, since flow itself can split a few writers into
 *   rounds of one that cohort would gather. A probe of cohort that finds
 *   no cohort makes cohort preferred (the same rate for less CPU). An
 *   epoch in which the committer sat idle for longer than TN_PACE_IDLE_NS
 *   is not counted either (the load stopped, so the rate says nothing
 *   about the way); one not counted during a probe starts the probe
 *   again.
 *   Comparing adjacent epochs under a load that changes between them can
 *   pick the wrong way; the next probe, a second or so later, corrects it.
 *   Neither way changes what is durable when: a request still completes
 *   only after the sync of the round that holds it.
 *   Pure: no clock, no I/O, no locking; the committer thread passes the
 *   times in and owns the state.
 */
#ifndef TN_STORAGE_PACE_H
#define TN_STORAGE_PACE_H

#include "core/platform.h"

#define TN_PACE_EPOCH_NS     (200 * 1000 * 1000LL)
#define TN_PACE_EPOCH_ROUNDS 64
#define TN_PACE_PROBE_EVERY  10
#define TN_PACE_BACKOFF_MAX  3
#define TN_PACE_MARGIN_PCT   10
#define TN_PACE_FLOW_WINS    2
#define TN_PACE_IDLE_NS      (10 * 1000 * 1000LL)

typedef struct {
    bool flow;          /* the way the current epoch runs (read this) */
    bool pref_flow;     /* the preferred way */
    uint8_t phase;      /* 0 normal, 1 probing, 2 the epoch after a probe */
    int64_t start_ns;   /* the current epoch's start */
    uint64_t reqs;      /* requests completed in the current epoch */
    uint64_t rounds;    /* rounds completed in the current epoch */
    bool idle;          /* the current epoch had an idle gap: not counted */
    double before;      /* the preferred way's rate in the latest counted epoch */
    double probe;       /* the probe's rate */
    double rate[2];     /* latest decided rates, [0] cohort, [1] flow */
    uint32_t since;     /* counted epochs of the preferred way since a probe */
    uint32_t backoff;   /* probes in a row that changed nothing, up to TN_PACE_BACKOFF_MAX */
    uint32_t wins;      /* probes in a row where flow was faster, cohort preferred */
    bool soon;          /* probe at the next counted epoch */
    uint64_t epochs[2]; /* counted epochs run each way */
    uint64_t switches;  /* changes of the preferred way */
} tn__pace_t;

/* Start at now_ns, preferring cohort (what a committer did before it
 * measured). */
void tn__pace_init(tn__pace_t *p, int64_t now_ns);
/* A round of n requests ended at now_ns; may end the epoch and change
 * p->flow for the next round. */
void tn__pace_round(tn__pace_t *p, size_t n, int64_t now_ns);
/* The committer waited idle for its first request for idle_ns. */
void tn__pace_idle(tn__pace_t *p, int64_t idle_ns);

#endif
