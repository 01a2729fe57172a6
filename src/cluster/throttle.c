/* Move traffic rules: the token bucket of move-rate, the choice of
 * connection and of throttling, a move's state, the tally of finished
 * moves. See throttle.h. */
#include "core/platform.h"

#include "cluster/throttle.h"

#include "core/assert.h"
#include "meta/cmd.h"

#include <string.h>

static uint64_t burst_of(uint64_t rate)
{
    uint64_t b = rate / 10;
    return b > TN_THROTTLE_MIN_BURST ? b : TN_THROTTLE_MIN_BURST;
}

void tn_throttle_init(tn_throttle_t *t, uint64_t rate, uint64_t now)
{
    memset(t, 0, sizeof(*t));
    t->rate = rate;
    t->burst = burst_of(rate);
    t->tokens = (int64_t)t->burst;
    t->at = now;
}

static void refill(tn_throttle_t *t, uint64_t now)
{
    if (now <= t->at)
        return; /* a clock that went back adds nothing */
    uint64_t ms = now - t->at;
    t->at = now;
    if (ms > 1000000000)
        ms = 1000000000; /* no overflow below; the bucket is long full */
    int64_t add = (int64_t)(t->rate / 1000 * ms + t->rate % 1000 * ms / 1000);
    int64_t room = (int64_t)t->burst - t->tokens; /* > 0 unless full */
    if (room > 0)
        t->tokens += room < add ? room : add;
}

bool tn_throttle_ready(tn_throttle_t *t, uint64_t now)
{
    if (t->rate == 0)
        return true;
    refill(t, now);
    return t->tokens > 0;
}

uint64_t tn_throttle_grant(tn_throttle_t *t, uint64_t now, uint64_t want)
{
    if (t->rate == 0)
        return want;
    refill(t, now);
    if (t->tokens <= 0 || want == 0) {
        if (want > 0)
            t->waits++;
        return 0;
    }
    uint64_t g = (uint64_t)t->tokens < want ? (uint64_t)t->tokens : want;
    t->tokens -= (int64_t)g;
    return g;
}

void tn_throttle_settle(tn_throttle_t *t, uint64_t granted, uint64_t got)
{
    t->copied += got;
    if (t->rate == 0)
        return;
    if (got < granted)
        t->tokens += (int64_t)(granted - got);
    else
        t->tokens -= (int64_t)(got - granted);
    if (t->tokens > (int64_t)t->burst)
        t->tokens = (int64_t)t->burst;
}

bool tn_throttle_applies(const tn_pstate_t *ps, uint32_t node)
{
    return tn_pstate_isr_find(ps, node) < 0 && ps->nisr >= ps->min_insync;
}

bool tn_throttle_bulk(bool in_isr, bool far)
{
    return !in_isr || far;
}

bool tn_throttle_far(size_t answer_bytes, size_t max_bytes)
{
    return max_bytes > 0 && answer_bytes >= max_bytes / 2;
}

const char *tn_throttle_move_state(bool ready, bool lag_known, uint64_t lag_bytes)
{
    if (ready)
        return "handing_over";
    return lag_known && lag_bytes > TN_THROTTLE_CLOSE_BYTES ? "copying" : "catching_up";
}

void tn_move_tally_init(tn_move_tally_t *t, int64_t since_ms)
{
    memset(t, 0, sizeof(*t));
    t->since_ms = since_ms;
}

bool tn_move_tally_note(tn_move_tally_t *t, uint64_t id, uint8_t end, int64_t started_ms,
                        int64_t finished_ms)
{
    if (finished_ms < t->since_ms)
        return false;
    for (uint32_t i = 0; i < t->nids; i++)
        if (t->ids[i] == id)
            return false;
    t->ids[t->next] = id;
    t->next = (t->next + 1) % TN_MOVE_TALLY_IDS;
    if (t->nids < TN_MOVE_TALLY_IDS)
        t->nids++;
    if (end == TN_MOVE_DONE)
        t->done++;
    else if (end == TN_MOVE_FAILED)
        t->failed++;
    else
        t->aborted++;
    t->seconds_count++;
    if (finished_ms > started_ms)
        t->seconds_sum += (double)(finished_ms - started_ms) / 1e3;
    return true;
}

/* --- repairs at once ----------------------------------------------------------------- */

void tn_repair_slots_init(tn_repair_slots_t *s, uint32_t cap)
{
    memset(s, 0, sizeof(*s));
    s->cap = cap > 0 ? cap : TN_REPAIR_SLOTS_DEFAULT;
}

bool tn_repair_slots_take(tn_repair_slots_t *s)
{
    if (s->running >= s->cap) {
        s->waits++;
        return false;
    }
    s->running++;
    if (s->running > s->peak)
        s->peak = s->running;
    return true;
}

void tn_repair_slots_give(tn_repair_slots_t *s)
{
    TN_DASSERT(s->running > 0);
    if (s->running > 0)
        s->running--;
}
