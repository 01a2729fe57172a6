/* Choosing how a committer gathers rounds. See pace.h. */
#include "core/platform.h"

#include "storage/pace.h"

#include <string.h>

static void next_epoch(tn__pace_t *p, int64_t now_ns)
{
    p->flow = p->phase == 1 ? !p->pref_flow : p->pref_flow;
    p->start_ns = now_ns;
    p->reqs = 0;
    p->rounds = 0;
    p->idle = false;
}

void tn__pace_init(tn__pace_t *p, int64_t now_ns)
{
    memset(p, 0, sizeof(*p));
    p->soon = true; /* the first probe comes after the first counted epoch */
    next_epoch(p, now_ns);
}

void tn__pace_idle(tn__pace_t *p, int64_t idle_ns)
{
    if (idle_ns > TN_PACE_IDLE_NS)
        p->idle = true;
}

void tn__pace_round(tn__pace_t *p, size_t n, int64_t now_ns)
{
    p->reqs += n;
    p->rounds++;
    int64_t took = now_ns - p->start_ns;
    if (took < TN_PACE_EPOCH_NS || p->rounds < TN_PACE_EPOCH_ROUNDS)
        return;
    /* Rounds of fewer than two requests on average in a cohort epoch: the
     * load gives cohort nothing to gather. Flow epochs count however small
     * their rounds: flow itself splits a few writers into rounds of one. */
    bool no_cohort = !p->flow && p->reqs < 2 * p->rounds;
    if (p->idle || no_cohort) {
        if (no_cohort && p->phase == 1) {
            /* A probe of cohort with nothing to gather: the two ways do the
             * same under this load, and cohort costs less. */
            p->pref_flow = false;
            p->switches++;
            p->backoff = 0;
            p->wins = 0;
            p->soon = false;
            p->phase = 0;
        } else if (p->phase != 0) { /* probe again after one counted epoch */
            p->phase = 0;
            p->soon = true;
        }
        next_epoch(p, now_ns);
        return;
    }
    double rate = (double)p->reqs * 1e9 / (double)took;
    p->epochs[p->flow ? 1 : 0]++;
    switch (p->phase) {
    case 1:
        p->probe = rate;
        p->phase = 2;
        break;
    case 2: {
        p->rate[p->pref_flow ? 1 : 0] = (p->before + rate) / 2;
        p->rate[p->pref_flow ? 0 : 1] = p->probe;
        /* Flow only when clearly faster, twice: cohort costs less CPU per
         * request, so a tie goes to it. */
        bool faster = p->rate[1] * 100 > p->rate[0] * (100 + TN_PACE_MARGIN_PCT);
        p->soon = false;
        if (faster != p->pref_flow && (p->pref_flow || ++p->wins >= TN_PACE_FLOW_WINS)) {
            p->pref_flow = faster;
            p->switches++;
            p->backoff = 0;
            p->wins = 0;
        } else if (faster && !p->pref_flow) {
            p->soon = true; /* confirm with another probe at once */
        } else {
            p->wins = 0;
            if (p->backoff < TN_PACE_BACKOFF_MAX)
                p->backoff++;
        }
        p->phase = 0;
        p->since = 0;
        p->before = rate;
        break;
    }
    default:
        p->before = rate;
        p->since++;
        if (p->soon || p->since >= (uint32_t)TN_PACE_PROBE_EVERY << p->backoff)
            p->phase = 1;
        break;
    }
    next_epoch(p, now_ns);
}
