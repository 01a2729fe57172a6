/* The planning decisions of partition moves: see the DESIGN comment in
 * placement.h. Every function here is a pure function of its arguments;
 * a plan works on a copy of the partitions' lists (scratch, freed before
 * it returns) and leaves only its result in the plan. */
#include "core/platform.h"

#include "meta/placement.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/err.h"

#include <string.h>

#define NONE UINT32_MAX

void tn_place_plan_init(tn_place_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
}

void tn_place_plan_fini(tn_place_plan_t *plan)
{
    tn_free(plan->changes);
    tn_free(plan->problems);
    tn_free(plan->loads);
    tn_place_plan_init(plan);
}

/* The index of member id in in->members (sorted by id), or NONE. */
static uint32_t member_index(const tn_place_in_t *in, uint32_t id)
{
    size_t lo = 0, hi = in->nmembers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (in->members[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < in->nmembers && in->members[lo].id == id ? (uint32_t)lo : NONE;
}

static int position(const tn_place_part_t *p, uint32_t id)
{
    for (uint32_t i = 0; i < p->factor; i++)
        if (p->replicas[i] == id)
            return (int)i;
    return -1;
}

int tn_place_check(const tn_place_in_t *in, char *err, size_t errlen)
{
    if (in->nmembers >= NONE) {
        tn_errbuf(err, errlen, "%zu members: more than a plan can hold", in->nmembers);
        return UV_EINVAL;
    }
    for (size_t i = 0; i < in->nmembers; i++) {
        uint32_t id = in->members[i].id;
        if (id == 0) {
            tn_errbuf(err, errlen, "member id 0: ids start at 1");
            return UV_EINVAL;
        }
        if (i > 0 && in->members[i - 1].id >= id) {
            tn_errbuf(err, errlen,
                      in->members[i - 1].id == id ? "member %u listed twice"
                                                  : "members not sorted by id (%u after %u)",
                      id, in->members[i - 1].id);
            return UV_EINVAL;
        }
    }
    for (size_t k = 0; k < in->nparts; k++) {
        const tn_place_part_t *p = &in->parts[k];
        if (p->factor == 0 || p->factor > TN_PLACE_MAX_REPLICAS) {
            tn_errbuf(err, errlen, "topic %u partition %u: factor %u outside 1..%d", p->topic,
                      p->partition, p->factor, TN_PLACE_MAX_REPLICAS);
            return UV_EINVAL;
        }
        for (uint32_t i = 0; i < p->factor; i++) {
            if (member_index(in, p->replicas[i]) == NONE) {
                tn_errbuf(err, errlen, "topic %u partition %u: replica %u is not a member",
                          p->topic, p->partition, p->replicas[i]);
                return UV_EINVAL;
            }
            if (position(p, p->replicas[i]) != (int)i) {
                tn_errbuf(err, errlen, "topic %u partition %u: replica %u listed twice", p->topic,
                          p->partition, p->replicas[i]);
                return UV_EINVAL;
            }
        }
    }
    return 0;
}

void tn_place_loads(const tn_place_in_t *in, tn_place_load_t *out)
{
    memset(out, 0, in->nmembers * sizeof(*out));
    for (size_t k = 0; k < in->nparts; k++) {
        const tn_place_part_t *p = &in->parts[k];
        for (uint32_t i = 0; i < p->factor; i++) {
            uint32_t m = member_index(in, p->replicas[i]);
            out[m].replicas++;
            out[m].leaders += i == 0;
        }
    }
}

void tn_place_apply(tn_place_part_t *parts, size_t nparts, const tn_place_plan_t *plan)
{
    for (size_t i = 0; i < plan->nchanges; i++)
        if (plan->changes[i].part < nparts)
            parts[plan->changes[i].part] = plan->changes[i].to;
}

/* --- the work of one plan ------------------------------------------------------- */

typedef struct {
    const tn_place_in_t *in;
    tn_place_plan_t *plan;
    tn_place_part_t *parts; /* owned: the lists as the plan leaves them so far */
    uint8_t *why;           /* owned: per partition, a tn_place_why_t or 0 */
    uint32_t why_member;
    tn_place_load_t *loads; /* = plan->loads */
    /* Owned scratch of the leader step (rebalance only): partitions by
     * leader member (order, start), and the BFS over members. */
    uint32_t *order, *start, *prev_member, *prev_part, *queue;
    uint8_t *seen;
} work_t;

static bool eligible(const work_t *w, uint32_t m)
{
    return w->in->members[m].alive && !w->in->members[m].draining;
}

static void *alloc_n(size_t n, size_t size)
{
    return tn_calloc(n > 0 ? n : 1, size);
}

static void work_free(work_t *w)
{
    tn_free(w->parts);
    tn_free(w->why);
    tn_free(w->order);
    tn_free(w->start);
    tn_free(w->prev_member);
    tn_free(w->prev_part);
    tn_free(w->queue);
    tn_free(w->seen);
}

/* Check in, empty plan, and make the working copy and the loads. */
static int work_begin(work_t *w, const tn_place_in_t *in, tn_place_plan_t *plan, bool leaders,
                      char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    tn_place_plan_fini(plan);
    int rc = tn_place_check(in, err, errlen);
    if (rc != 0)
        return rc;
    w->in = in;
    w->plan = plan;
    w->parts = alloc_n(in->nparts, sizeof(*w->parts));
    w->why = alloc_n(in->nparts, sizeof(*w->why));
    plan->loads = alloc_n(in->nmembers, sizeof(*plan->loads));
    if (leaders) {
        w->order = alloc_n(in->nparts, sizeof(*w->order));
        w->start = alloc_n(in->nmembers + 1, sizeof(*w->start));
        w->prev_member = alloc_n(in->nmembers, sizeof(*w->prev_member));
        w->prev_part = alloc_n(in->nmembers, sizeof(*w->prev_part));
        w->queue = alloc_n(in->nmembers, sizeof(*w->queue));
        w->seen = alloc_n(in->nmembers, sizeof(*w->seen));
    }
    if (w->parts == NULL || w->why == NULL || plan->loads == NULL ||
        (leaders && (w->order == NULL || w->start == NULL || w->prev_member == NULL ||
                     w->prev_part == NULL || w->queue == NULL || w->seen == NULL))) {
        work_free(w);
        tn_place_plan_fini(plan);
        tn_errbuf(err, errlen, "out of memory planning %zu partitions", in->nparts);
        return UV_ENOMEM;
    }
    if (in->nparts > 0)
        memcpy(w->parts, in->parts, in->nparts * sizeof(*w->parts));
    plan->nloads = in->nmembers;
    w->loads = plan->loads;
    tn_place_loads(in, w->loads);
    return 0;
}

static uint32_t spread(const work_t *w, bool leaders)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t m = 0; m < w->in->nmembers; m++) {
        if (!eligible(w, m))
            continue;
        uint32_t v = leaders ? w->loads[m].leaders : w->loads[m].replicas;
        lo = TN_MIN(lo, v);
        hi = TN_MAX(hi, v);
    }
    return hi >= lo ? hi - lo : 0;
}

static bool same_list(const tn_place_part_t *a, const tn_place_part_t *b)
{
    return a->factor == b->factor &&
           memcmp(a->replicas, b->replicas, a->factor * sizeof(uint32_t)) == 0;
}

/* The plan's changes and problems from the working copy; frees the work. */
static int work_end(work_t *w, char *err, size_t errlen)
{
    const tn_place_in_t *in = w->in;
    tn_place_plan_t *plan = w->plan;
    size_t nchanges = 0, nproblems = 0;
    for (size_t k = 0; k < in->nparts; k++) {
        nchanges += !same_list(&w->parts[k], &in->parts[k]);
        nproblems += w->why[k] != 0;
    }
    plan->changes = alloc_n(nchanges, sizeof(*plan->changes));
    plan->problems = alloc_n(nproblems, sizeof(*plan->problems));
    if (plan->changes == NULL || plan->problems == NULL) {
        work_free(w);
        tn_place_plan_fini(plan);
        tn_errbuf(err, errlen, "out of memory for a plan of %zu changes", nchanges);
        return UV_ENOMEM;
    }
    for (size_t k = 0; k < in->nparts; k++) {
        const tn_place_part_t *from = &in->parts[k], *to = &w->parts[k];
        if (w->why[k] != 0)
            plan->problems[plan->nproblems++] =
                (tn_place_problem_t){(uint32_t)k, w->why_member, (tn_place_why_t)w->why[k]};
        if (same_list(to, from))
            continue;
        tn_place_change_t *c = &plan->changes[plan->nchanges++];
        c->part = (uint32_t)k;
        c->to = *to;
        c->moved = 0;
        for (uint32_t i = 0; i < to->factor; i++)
            c->moved += position(from, to->replicas[i]) < 0;
        plan->moves += c->moved;
        plan->reorders += c->moved == 0;
    }
    plan->replica_spread = spread(w, false);
    plan->leader_spread = spread(w, true);
    work_free(w);
    return 0;
}

/* Less loaded (the load order of the DESIGN comment): fewer replicas, then
 * fewer leaderships, then the lower id (members are sorted by id). */
static bool less_loaded(const work_t *w, uint32_t a, uint32_t b)
{
    const tn_place_load_t *la = &w->loads[a], *lb = &w->loads[b];
    if (la->replicas != lb->replicas)
        return la->replicas < lb->replicas;
    if (la->leaders != lb->leaders)
        return la->leaders < lb->leaders;
    return a < b;
}

/* More loaded: more replicas, then more leaderships, then the lower id
 * (the source a rebalance takes from first). */
static bool more_loaded(const work_t *w, uint32_t a, uint32_t b)
{
    const tn_place_load_t *la = &w->loads[a], *lb = &w->loads[b];
    if (la->replicas != lb->replicas)
        return la->replicas > lb->replicas;
    if (la->leaders != lb->leaders)
        return la->leaders > lb->leaders;
    return a < b;
}

/* Put member index `to` at position pos of partition k in place of what is
 * there, keeping the loads. */
static void replace_at(work_t *w, size_t k, uint32_t pos, uint32_t to)
{
    tn_place_part_t *p = &w->parts[k];
    uint32_t from = member_index(w->in, p->replicas[pos]);
    w->loads[from].replicas--;
    w->loads[to].replicas++;
    if (pos == 0) {
        w->loads[from].leaders--;
        w->loads[to].leaders++;
    }
    p->replicas[pos] = w->in->members[to].id;
}

/* Move the replica at position pos of partition k to the front (the
 * preferred leader), the others keeping their order. */
static void to_front(work_t *w, size_t k, uint32_t pos)
{
    tn_place_part_t *p = &w->parts[k];
    if (pos == 0)
        return;
    uint32_t id = p->replicas[pos];
    w->loads[member_index(w->in, p->replicas[0])].leaders--;
    w->loads[member_index(w->in, id)].leaders++;
    memmove(&p->replicas[1], &p->replicas[0], pos * sizeof(p->replicas[0]));
    p->replicas[0] = id;
}

/* --- decommission and heal ------------------------------------------------------ */

static bool other_alive(const work_t *w, const tn_place_part_t *p, uint32_t id)
{
    for (uint32_t i = 0; i < p->factor; i++)
        if (p->replicas[i] != id && w->in->members[member_index(w->in, p->replicas[i])].alive)
            return true;
    return false;
}

static int replace_member(const tn_place_in_t *in, uint32_t member, bool heal, uint32_t max_moves,
                          tn_place_plan_t *plan, char *err, size_t errlen)
{
    work_t w;
    int rc = work_begin(&w, in, plan, false, err, errlen);
    if (rc != 0)
        return rc;
    uint32_t mi = member_index(in, member);
    if (mi == NONE || (heal && in->members[mi].alive)) {
        work_free(&w);
        tn_place_plan_fini(plan);
        if (mi == NONE) {
            tn_errbuf(err, errlen, "member %u is not a member of the cluster", member);
            return TN_ENOTFOUND;
        }
        tn_errbuf(err, errlen,
                  "member %u is alive: healing re-creates only a dead member's replicas "
                  "(decommission it to move them)",
                  member);
        return UV_EINVAL;
    }
    w.why_member = member;
    uint32_t moves = 0;
    for (size_t k = 0; k < in->nparts; k++) {
        tn_place_part_t *p = &w.parts[k];
        int pos = position(p, member);
        if (pos < 0)
            continue;
        if (!in->members[mi].alive && !other_alive(&w, p, member)) {
            w.why[k] = TN_PLACE_OFFLINE;
            continue;
        }
        uint32_t best = NONE;
        for (uint32_t m = 0; m < in->nmembers; m++)
            if (eligible(&w, m) && position(p, in->members[m].id) < 0 &&
                (best == NONE || less_loaded(&w, m, best)))
                best = m;
        if (best == NONE) {
            w.why[k] = TN_PLACE_NO_ROOM;
            continue;
        }
        if (max_moves > 0 && moves == max_moves) {
            plan->more = true;
            continue;
        }
        replace_at(&w, k, (uint32_t)pos, best);
        moves++;
    }
    return work_end(&w, err, errlen);
}

int tn_place_decommission(const tn_place_in_t *in, uint32_t member, uint32_t max_moves,
                          tn_place_plan_t *plan, char *err, size_t errlen)
{
    return replace_member(in, member, false, max_moves, plan, err, errlen);
}

int tn_place_heal(const tn_place_in_t *in, uint32_t member, uint32_t max_moves,
                  tn_place_plan_t *plan, char *err, size_t errlen)
{
    return replace_member(in, member, true, max_moves, plan, err, errlen);
}

/* --- rebalance: preferred leaders ----------------------------------------------- */

/* The partitions each eligible member leads: order[start[m]..start[m+1]),
 * in input order (a counting sort). */
static void index_leaders(work_t *w)
{
    const tn_place_in_t *in = w->in;
    memset(w->start, 0, (in->nmembers + 1) * sizeof(*w->start));
    for (size_t k = 0; k < in->nparts; k++)
        w->start[member_index(in, w->parts[k].replicas[0]) + 1]++;
    for (uint32_t m = 0; m < in->nmembers; m++)
        w->start[m + 1] += w->start[m];
    /* prev_member as the fill cursor of each member's run. */
    memcpy(w->prev_member, w->start, in->nmembers * sizeof(*w->prev_member));
    for (size_t k = 0; k < in->nparts; k++)
        w->order[w->prev_member[member_index(in, w->parts[k].replicas[0])]++] = (uint32_t)k;
}

/* From eligible member a, over "a partition led by u has eligible replica
 * v": the reachable member with the fewest leaderships (the nearest
 * first), with prev_member/prev_part set along the way to it; NONE when
 * it leads no fewer than a minus two. */
static uint32_t find_chain(work_t *w, uint32_t a)
{
    const tn_place_in_t *in = w->in;
    memset(w->seen, 0, in->nmembers);
    uint32_t head = 0, tail = 0, best = a;
    w->queue[tail++] = a;
    w->seen[a] = 1;
    while (head < tail) {
        uint32_t u = w->queue[head++];
        if (w->loads[u].leaders < w->loads[best].leaders)
            best = u;
        for (uint32_t j = w->start[u]; j < w->start[u + 1]; j++) {
            const tn_place_part_t *p = &w->parts[w->order[j]];
            for (uint32_t i = 1; i < p->factor; i++) {
                uint32_t v = member_index(in, p->replicas[i]);
                if (w->seen[v] || !eligible(w, v))
                    continue;
                w->seen[v] = 1;
                w->prev_member[v] = u;
                w->prev_part[v] = w->order[j];
                w->queue[tail++] = v;
            }
        }
    }
    return w->loads[best].leaders + 2 <= w->loads[a].leaders ? best : NONE;
}

/* Fewer preferred leaderships, then the lower id. */
static bool less_led(const work_t *w, uint32_t a, uint32_t b)
{
    if (w->loads[a].leaders != w->loads[b].leaders)
        return w->loads[a].leaders < w->loads[b].leaders;
    return a < b;
}

/* Rule 3a: preferred leaders over the eligible members by reordering. */
static void balance_leaders(work_t *w)
{
    const tn_place_in_t *in = w->in;
    /* A preferred leader that cannot lead gives way to the least led
     * eligible replica (ties: the lower id). */
    for (size_t k = 0; k < in->nparts; k++) {
        tn_place_part_t *p = &w->parts[k];
        if (eligible(w, member_index(in, p->replicas[0])))
            continue;
        uint32_t best = NONE, best_pos = 0;
        for (uint32_t i = 1; i < p->factor; i++) {
            uint32_t m = member_index(in, p->replicas[i]);
            if (eligible(w, m) && (best == NONE || less_led(w, m, best))) {
                best = m;
                best_pos = i;
            }
        }
        if (best != NONE)
            to_front(w, k, best_pos);
    }
    /* Shift chains while one exists from a member to one that leads two
     * fewer. Each shift lowers the sum of squared leader counts, so this
     * ends; when no chain is left, no reordering gets the counts closer. */
    for (;;) {
        if (spread(w, true) <= 1)
            return;
        index_leaders(w);
        uint32_t lo = UINT32_MAX, hi = 0, a = NONE, b = NONE;
        for (uint32_t m = 0; m < in->nmembers; m++) {
            if (eligible(w, m)) {
                lo = TN_MIN(lo, w->loads[m].leaders);
                hi = TN_MAX(hi, w->loads[m].leaders);
            }
        }
        /* Sources by most leaderships first, then the lower id. */
        for (uint32_t c = hi; c >= lo + 2 && b == NONE; c--) {
            for (uint32_t m = 0; m < in->nmembers && b == NONE; m++) {
                if (eligible(w, m) && w->loads[m].leaders == c) {
                    b = find_chain(w, m);
                    a = m;
                }
            }
        }
        if (b == NONE)
            return;
        for (uint32_t v = b; v != a;) {
            uint32_t k = w->prev_part[v], u = w->prev_member[v];
            to_front(w, k, (uint32_t)position(&w->parts[k], in->members[v].id));
            v = u;
        }
    }
}

/* --- rebalance: replica counts -------------------------------------------------- */

/* Rule 3b. Returns the moves made. */
static uint32_t balance_replicas(work_t *w, uint32_t max_moves)
{
    const tn_place_in_t *in = w->in;
    uint32_t moves = 0;
    for (;;) {
        uint32_t src = NONE, dst = NONE;
        for (uint32_t m = 0; m < in->nmembers; m++) {
            if (!eligible(w, m))
                continue;
            /* src: the most loaded (most replicas, then most leaderships,
             * then the lower id); dst: the least loaded. */
            if (src == NONE || more_loaded(w, m, src))
                src = m;
            if (dst == NONE || less_loaded(w, m, dst))
                dst = m;
        }
        if (src == NONE || w->loads[src].replicas < w->loads[dst].replicas + 2)
            return moves;
        if (max_moves > 0 && moves == max_moves) {
            w->plan->more = true;
            return moves;
        }
        bool lead = w->loads[src].leaders >= w->loads[dst].leaders + 2;
        size_t pick = SIZE_MAX;
        int pick_pos = -1;
        for (size_t k = 0; k < in->nparts; k++) {
            const tn_place_part_t *p = &w->parts[k];
            int pos = position(p, in->members[src].id);
            if (pos < 0 || position(p, in->members[dst].id) >= 0)
                continue;
            if (pick == SIZE_MAX) {
                pick = k;
                pick_pos = pos;
            }
            if ((pos == 0) == lead) {
                pick = k;
                pick_pos = pos;
                break;
            }
        }
        /* src holds more replicas than dst, so one of its partitions is
         * not on dst. */
        TN_DASSERT(pick != SIZE_MAX);
        if (pick == SIZE_MAX)
            return moves;
        replace_at(w, pick, (uint32_t)pick_pos, dst);
        moves++;
    }
}

int tn_place_rebalance(const tn_place_in_t *in, uint32_t max_moves, tn_place_plan_t *plan,
                       char *err, size_t errlen)
{
    work_t w;
    int rc = work_begin(&w, in, plan, true, err, errlen);
    if (rc != 0)
        return rc;
    balance_leaders(&w);
    balance_replicas(&w, max_moves);
    balance_leaders(&w);
    return work_end(&w, err, errlen);
}

/* --- the replication factor ------------------------------------------------------ */

/* The position rule 4 drops from partition k: the last one whose member is
 * not eligible, else the last; never position 0. */
static uint32_t drop_pos(const work_t *w, const tn_place_part_t *p)
{
    for (uint32_t i = p->factor - 1; i > 0; i--)
        if (!eligible(w, member_index(w->in, p->replicas[i])))
            return i;
    return p->factor - 1;
}

int tn_place_refactor(const tn_place_in_t *in, const uint32_t *want, tn_place_plan_t *plan,
                      char *err, size_t errlen)
{
    work_t w;
    int rc = work_begin(&w, in, plan, false, err, errlen);
    if (rc != 0)
        return rc;
    for (size_t k = 0; k < in->nparts; k++) {
        if (want[k] < 1 || want[k] > TN_PLACE_MAX_REPLICAS) {
            work_free(&w);
            tn_place_plan_fini(plan);
            tn_errbuf(err, errlen, "partition %zu: a factor of %u is outside 1..%d", k, want[k],
                      TN_PLACE_MAX_REPLICAS);
            return UV_EINVAL;
        }
    }
    for (size_t k = 0; k < in->nparts; k++) {
        tn_place_part_t *p = &w.parts[k];
        while (p->factor > want[k]) {
            uint32_t pos = drop_pos(&w, p);
            uint32_t m = member_index(in, p->replicas[pos]);
            w.loads[m].replicas--;
            memmove(&p->replicas[pos], &p->replicas[pos + 1],
                    (p->factor - pos - 1) * sizeof(p->replicas[0]));
            p->factor--;
            p->replicas[p->factor] = 0;
        }
        uint32_t room = 0;
        for (uint32_t m = 0; m < in->nmembers; m++)
            room += eligible(&w, m) && position(p, in->members[m].id) < 0;
        if (p->factor < want[k] && room < want[k] - p->factor) {
            w.why[k] = TN_PLACE_NO_ROOM; /* all or nothing: the list stays */
            continue;
        }
        while (p->factor < want[k]) {
            uint32_t best = NONE;
            for (uint32_t m = 0; m < in->nmembers; m++)
                if (eligible(&w, m) && position(p, in->members[m].id) < 0 &&
                    (best == NONE || less_loaded(&w, m, best)))
                    best = m;
            w.loads[best].replicas++;
            p->replicas[p->factor++] = in->members[best].id;
        }
    }
    return work_end(&w, err, errlen);
}
