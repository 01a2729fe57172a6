/* A rebalance's pure part: the planner's input from the metastore state,
 * moves under way per member, and which changes may begin. See
 * rebalance.h. */
#include "core/platform.h"

#include "meta/rebalance.h"

#include "core/alloc.h"
#include "core/err.h"

#include <string.h>

static bool has(const uint32_t *v, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

int tn_meta_rebal_member(const tn_meta_rebal_in_t *in, uint32_t id)
{
    size_t lo = 0, hi = in->nmembers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (in->members[mid].id == id)
            return (int)mid;
        if (in->members[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Count a move from old[0..nold) to to[0..nto) in busy: each member that
 * gives up a replica and each that receives one. */
static void count_move(tn_meta_rebal_in_t *in, const uint32_t *old, uint32_t nold,
                       const uint32_t *to, uint32_t nto)
{
    for (uint32_t i = 0; i < nto; i++) {
        int k = has(old, nold, to[i]) ? -1 : tn_meta_rebal_member(in, to[i]);
        if (k >= 0)
            in->busy[k]++;
    }
    for (uint32_t i = 0; i < nold; i++) {
        int k = has(to, nto, old[i]) ? -1 : tn_meta_rebal_member(in, old[i]);
        if (k >= 0)
            in->busy[k]++;
    }
}

static int grow(tn_meta_rebal_in_t *in)
{
    size_t cap = in->cap ? in->cap * 2 : 64;
    tn_place_part_t *parts = tn_realloc(in->parts, cap * sizeof(*parts));
    if (parts == NULL)
        return UV_ENOMEM;
    in->parts = parts;
    const tn_meta_topic_entry_t **topics = tn_realloc(in->topics, cap * sizeof(*topics));
    if (topics == NULL)
        return UV_ENOMEM;
    in->topics = topics;
    bool *moving = tn_realloc(in->moving, cap * sizeof(*moving));
    if (moving == NULL)
        return UV_ENOMEM;
    in->moving = moving;
    in->cap = cap;
    return 0;
}

static int collect(tn_meta_rebal_in_t *in, const tn_meta_state_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t k = 0; k < t->rec.partitions; k++) {
            /* A factor-1 partition that never moved has no state: its
             * owner is its list (its move makes it one: state.h,
             * tn_meta_state_move_from). */
            uint64_t owner = t->owners != NULL && k < t->owners_cap ? t->owners[k] : 0;
            tn_pstate_t single = {.nreplicas = owner != 0};
            single.replicas[0] = (uint32_t)owner;
            const tn_pstate_t *ps =
                t->pstates != NULL && t->pstates[k].nreplicas > 0 ? &t->pstates[k] : &single;
            if (ps == &single && tn_meta_topic_factor(&t->rec) > 1)
                continue;
            if (ps->nreplicas == 0)
                continue; /* not placed */
            if (ps->ntarget > 0) {
                in->nmoving++;
                count_move(in, ps->old, ps->nold, ps->target, ps->ntarget);
            }
            const uint32_t *list = ps->ntarget > 0 ? ps->target : ps->replicas;
            uint32_t n = ps->ntarget > 0 ? ps->ntarget : ps->nreplicas;
            bool known = n > 0 && n <= TN_PLACE_MAX_REPLICAS;
            for (uint32_t r = 0; known && r < n; r++)
                known = tn_meta_rebal_member(in, list[r]) >= 0;
            if (!known)
                continue;
            if (in->nparts == in->cap && grow(in) != 0)
                return UV_ENOMEM;
            tn_place_part_t *pp = &in->parts[in->nparts];
            memset(pp, 0, sizeof(*pp));
            pp->topic = (uint32_t)i;
            pp->partition = k;
            pp->factor = n;
            memcpy(pp->replicas, list, n * sizeof(*list));
            in->topics[in->nparts] = t;
            in->moving[in->nparts] = ps->ntarget > 0;
            in->nparts++;
        }
    }
    return 0;
}

int tn_meta_rebal_in_init(tn_meta_rebal_in_t *in, const tn_meta_state_t *s)
{
    memset(in, 0, sizeof(*in));
    if (s->nmembers > 0) {
        in->members = tn_calloc(s->nmembers, sizeof(*in->members));
        in->busy = tn_calloc(s->nmembers, sizeof(*in->busy));
        if (in->members == NULL || in->busy == NULL) {
            tn_meta_rebal_in_fini(in);
            return UV_ENOMEM;
        }
    }
    in->nmembers = s->nmembers;
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *mb = &s->members[i];
        in->members[i].id = (uint32_t)mb->id;
        in->members[i].alive = tn_meta_member_live(mb);
        in->members[i].draining = mb->draining;
    }
    if (collect(in, s) != 0) {
        tn_meta_rebal_in_fini(in);
        return UV_ENOMEM;
    }
    return 0;
}

void tn_meta_rebal_in_fini(tn_meta_rebal_in_t *in)
{
    tn_free(in->members);
    tn_free(in->busy);
    tn_free(in->parts);
    tn_free(in->topics);
    tn_free(in->moving);
    memset(in, 0, sizeof(*in));
}

tn_place_in_t tn_meta_rebal_place_in(const tn_meta_rebal_in_t *in)
{
    tn_place_in_t p = {in->members, in->nmembers, in->parts, in->nparts};
    return p;
}

bool tn_meta_rebal_take(tn_meta_rebal_in_t *in, const tn_place_change_t *ch, uint32_t cap,
                        bool *blocked)
{
    *blocked = false;
    if (ch->part >= in->nparts || in->moving[ch->part])
        return false;
    const tn_place_part_t *from = &in->parts[ch->part];
    for (uint32_t i = 0; i < ch->to.factor; i++) {
        int k = tn_meta_rebal_member(in, ch->to.replicas[i]);
        if (k < 0 || !in->members[k].alive) {
            *blocked = true;
            return false;
        }
    }
    if (ch->moved > 0 && cap > 0) {
        for (uint32_t i = 0; i < ch->to.factor; i++) {
            int k = has(from->replicas, from->factor, ch->to.replicas[i])
                        ? -1
                        : tn_meta_rebal_member(in, ch->to.replicas[i]);
            if (k >= 0 && in->busy[k] >= cap)
                return false;
        }
        for (uint32_t i = 0; i < from->factor; i++) {
            int k = has(ch->to.replicas, ch->to.factor, from->replicas[i])
                        ? -1
                        : tn_meta_rebal_member(in, from->replicas[i]);
            if (k >= 0 && in->busy[k] >= cap)
                return false;
        }
    }
    count_move(in, from->replicas, from->factor, ch->to.replicas, ch->to.factor);
    in->moving[ch->part] = true;
    return true;
}

int tn_meta_rebal_plan(const tn_meta_rebal_in_t *in, tn_place_plan_t *plan, char *err,
                       size_t errlen)
{
    tn_place_in_t pin = tn_meta_rebal_place_in(in);
    return tn_place_rebalance(&pin, 0, plan, err, errlen);
}

int tn_meta_factor_plan(const tn_meta_rebal_in_t *in, tn_place_plan_t *plan, char *err,
                        size_t errlen)
{
    uint32_t *want = tn_calloc(in->nparts > 0 ? in->nparts : 1, sizeof(*want));
    if (want == NULL) {
        tn_place_plan_fini(plan);
        tn_errbuf(err, errlen, "out of memory planning %zu partitions", in->nparts);
        return UV_ENOMEM;
    }
    for (size_t i = 0; i < in->nparts; i++)
        want[i] = tn_meta_topic_factor(&in->topics[i]->rec);
    tn_place_in_t pin = tn_meta_rebal_place_in(in);
    int rc = tn_place_refactor(&pin, want, plan, err, errlen);
    tn_free(want);
    return rc;
}
