/* The stalled-move rule: see movestall.h for the design. */
#include "core/platform.h"

#include "cluster/movestall.h"

#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void tn_movestall_reset(tn_movestall_t *st)
{
    memset(st, 0, sizeof(*st));
}

static const tn_pstate_mark_t *mark_of(const tn_movestall_t *st, uint32_t node)
{
    for (uint32_t i = 0; i < st->nmark; i++)
        if (st->mark[i].node == node)
            return &st->mark[i];
    return NULL;
}

/* The clock of node, made when it has none: from its committed mark when
 * its copy stands there or it has not fetched here (DESIGN step 6), else
 * from now. */
static uint32_t clock_of(tn_movestall_t *st, const tn_movestall_target_t *t, uint64_t now)
{
    for (uint32_t i = 0; i < st->n; i++)
        if (st->m[i].node == t->node)
            return i;
    uint32_t i = st->n++;
    memset(&st->m[i], 0, sizeof(st->m[i]));
    st->m[i].node = t->node;
    st->m[i].seen = t->seen;
    st->m[i].end = t->seen ? t->end : 0;
    st->m[i].since = (int64_t)now;
    const tn_pstate_mark_t *mk = mark_of(st, t->node);
    if (mk != NULL && (!t->seen || t->end == mk->end)) {
        /* Idle since the mark's ms by the wall clock (a mark from the
         * future, a skewed clock, reads as idle 0). */
        int64_t wall = (int64_t)now + st->wall_off;
        st->m[i].since = (int64_t)now - (wall > mk->ms ? wall - mk->ms : 0);
        st->m[i].based = true;
        st->m[i].end = mk->end;
    }
    return i;
}

void tn_movestall_marks(tn_movestall_t *st, uint64_t move_id, const tn_pstate_mark_t *mark,
                        uint32_t n, uint64_t now, int64_t wall)
{
    if (st->move_id != move_id) {
        tn_movestall_reset(st);
        st->move_id = move_id;
    }
    if (n > TN_PSTATE_MAX_REPLICAS)
        n = TN_PSTATE_MAX_REPLICAS;
    st->nmark = n;
    if (n > 0)
        memcpy(st->mark, mark, n * sizeof(*mark));
    st->wall_off = wall - (int64_t)now;
}

bool tn_movestall_mark(tn_movestall_t *st, uint64_t now, uint64_t timeout_ms, tn_pstate_mark_t *out,
                       uint32_t *nout)
{
    uint64_t period = timeout_ms / 4;
    *nout = 0;
    if (st->move_id == 0 || timeout_ms == 0)
        return false;
    if (st->marked && now < st->marked_at + period)
        return false; /* once per period per move */
    int64_t wall = (int64_t)now + st->wall_off;
    bool moved = false;
    for (uint32_t i = 0; i < st->nmark; i++)
        if (wall < st->mark[i].ms || (uint64_t)(wall - st->mark[i].ms) < period)
            return false; /* the newest committed mark is recent */
    for (uint32_t i = 0; i < st->n; i++) {
        if (!st->m[i].seen && !st->m[i].based)
            continue; /* nothing known of its copy */
        const tn_pstate_mark_t *mk = mark_of(st, st->m[i].node);
        if (st->m[i].watched && st->m[i].seen && (mk == NULL || mk->end != st->m[i].end))
            moved = true;
        int64_t ms = st->m[i].since + st->wall_off;
        out[*nout].node = st->m[i].node;
        out[*nout].end = st->m[i].end;
        out[*nout].ms = ms > 0 ? ms : 0;
        (*nout)++;
    }
    if (!moved) {
        *nout = 0;
        return false;
    }
    st->marked = true;
    st->marked_at = now;
    return true;
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
        if (t[k].seen && ((!st->m[i].seen && !st->m[i].based) || t[k].end > st->m[i].end)) {
            /* It copied something. A lower end (a truncation, a reset)
             * is not progress: the clock runs on. */
            st->m[i].since = (int64_t)now;
        }
        st->m[i].seen = t[k].seen;
        if (t[k].seen)
            st->m[i].end = t[k].end;
        st->m[i].watched = !t[k].in_isr && t[k].alive;
        if (t[k].in_isr || !t[k].alive || (t[k].seen && t[k].end >= log_end))
            st->m[i].since = (int64_t)now; /* in sync, dead (rule 9's), or nothing left to copy */
        int64_t idle = (int64_t)now - st->m[i].since;
        if (!stalled && idle >= 0 && (uint64_t)idle >= timeout_ms) {
            stalled = true;
            out->node = t[k].node;
            out->seen = st->m[i].seen;
            out->based = st->m[i].based;
            out->end = st->m[i].end;
            out->idle_ms = (uint64_t)idle;
        }
    }
    return stalled;
}

bool tn_movestall_wait_err(const tn_movestall_verdict_t *v, const char *err, uint64_t became_at,
                           uint64_t now, uint64_t report_ms)
{
    /* A target that never fetched, here or from an earlier leader,
     * appends nothing, so has no error to tell. */
    return err == NULL && (v->seen || v->based) && now < became_at + 2 * report_ms;
}

void tn_movestall_reason(const tn_movestall_verdict_t *v, uint64_t timeout_ms, uint64_t log_end,
                         const char *err, char *why, size_t len)
{
    static const char tail[] = "): the partition stays on its old replicas";
    static const char named[] = "; its last append error: ";
    char idle[32];
    if (len == 0)
        return;
    tn_time_fmt_ms(idle, sizeof(idle), timeout_ms);
    int at;
    if (v->seen || v->based)
        at = snprintf(why, len,
                      "target member %" PRIu32 " copied no record for %s (at offset %" PRIu64
                      " of %" PRIu64,
                      v->node, idle, v->end, log_end);
    else
        at = snprintf(why, len,
                      "target member %" PRIu32 " fetched nothing for %s (the log ends at %" PRIu64,
                      v->node, idle, log_end);
    if (at < 0 || (size_t)at >= len)
        return; /* the head alone fills it (cut) */
    /* The error as fits before the tail: cut, never the tail. */
    int64_t room =
        (int64_t)len - 1 - at - (int64_t)(sizeof(tail) - 1) - (int64_t)(sizeof(named) - 1);
    if (err != NULL && room >= 8)
        at += snprintf(why + at, len - (size_t)at, "%s%.*s", named, (int)room, err);
    snprintf(why + at, len - (size_t)at, "%s", tail);
}
