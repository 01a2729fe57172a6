/* The stalled-move rule: see movestall.h for the design. */
#include "core/platform.h"

#include "cluster/movestall.h"

#include <string.h>

void tn_movestall_reset(tn_movestall_t *st)
{
    memset(st, 0, sizeof(*st));
}

/* The clock of node, made (started at now) when it has none. */
static uint32_t clock_of(tn_movestall_t *st, const tn_movestall_target_t *t, uint64_t now)
{
    for (uint32_t i = 0; i < st->n; i++)
        if (st->m[i].node == t->node)
            return i;
    uint32_t i = st->n++;
    st->m[i].node = t->node;
    st->m[i].seen = t->seen;
    st->m[i].end = t->seen ? t->end : 0;
    st->m[i].since = now;
    return i;
}

bool tn_movestall_check(tn_movestall_t *st, uint64_t move_id, bool ready,
                        const tn_movestall_target_t *t, uint32_t n, uint64_t log_end, uint64_t now,
                        uint64_t timeout_ms, tn_movestall_verdict_t *out)
{
    if (move_id == 0 || ready || timeout_ms == 0 || n > TN_PSTATE_MAX_REPLICAS) {
        tn_movestall_reset(st);
        return false;
    }
    if (st->move_id != move_id) {
        tn_movestall_reset(st);
        st->move_id = move_id;
    }
    bool stalled = false;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = clock_of(st, &t[k], now);
        if (t[k].seen && (!st->m[i].seen || t[k].end > st->m[i].end)) {
            /* It copied something. A lower end (a truncation, a reset)
             * is not progress: the clock runs on. */
            st->m[i].since = now;
        }
        st->m[i].seen = t[k].seen;
        if (t[k].seen)
            st->m[i].end = t[k].end;
        if (t[k].in_isr || !t[k].alive || (t[k].seen && t[k].end >= log_end))
            st->m[i].since = now; /* in sync, dead (rule 9's), or nothing left to copy */
        if (!stalled && now >= st->m[i].since && now - st->m[i].since >= timeout_ms) {
            stalled = true;
            out->node = t[k].node;
            out->seen = st->m[i].seen;
            out->end = st->m[i].end;
            out->idle_ms = now - st->m[i].since;
        }
    }
    return stalled;
}
