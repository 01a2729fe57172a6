/* The metastore state machine. See state.h. */
#include "core/platform.h"

#include "meta/state.h"
#include "meta/owner.h"

#include "core/alloc.h"
#include "core/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SNAP_MAGIC "TMS1"
#define SNAP_HDR   24

void tn_meta_state_init(tn_meta_state_t *s)
{
    memset(s, 0, sizeof(*s));
}

static void topic_free(tn_meta_topic_entry_t *t)
{
    for (uint32_t i = 0; i < t->nchannels; i++)
        tn_free(t->channels[i]);
    tn_free(t->channels);
    tn_free(t->chstamps);
    tn_free(t->owners);
    tn_free(t->pstates);
    tn_free(t);
}

static void user_free(tn_meta_user_t *u)
{
    tn_meta_user_fini(u);
    tn_free(u);
}

void tn_meta_state_fini(tn_meta_state_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++)
        topic_free(s->topics[i]);
    for (size_t i = 0; i < s->nusers; i++)
        user_free(s->users[i]);
    tn_free(s->topics);
    tn_free(s->users);
    tn_free(s->members);
    tn_free(s->nodes);
    tn__meta_remotes_fini(&s->remotes);
    tn_free(s->removed);
    memset(s, 0, sizeof(*s));
}

size_t tn__meta_search(void *const *arr, size_t n, const char *name, size_t name_off, bool *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp((const char *)arr[mid] + name_off, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

#define TOPIC_NAME_OFF (offsetof(tn_meta_topic_entry_t, rec) + offsetof(tn_meta_topic_t, name))

/* Make room for one more pointer in *arr (capacity *cap). */
static int grow(void ***arr, size_t n, size_t *cap)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void **p = tn_realloc(*arr, nc * sizeof(*p));
    if (p == NULL)
        return UV_ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

static void insert_at(void **arr, size_t *n, size_t at, void *item)
{
    memmove(&arr[at + 1], &arr[at], (*n - at) * sizeof(*arr));
    arr[at] = item;
    (*n)++;
}

static void remove_at(void **arr, size_t *n, size_t at)
{
    memmove(&arr[at], &arr[at + 1], (*n - at - 1) * sizeof(*arr));
    (*n)--;
}

const tn_meta_topic_entry_t *tn_meta_topic_find(const tn_meta_state_t *s, const char *name)
{
    bool found;
    size_t i = tn__meta_search((void *const *)s->topics, s->ntopics, name, TOPIC_NAME_OFF, &found);
    return found ? s->topics[i] : NULL;
}

const tn_meta_user_t *tn_meta_user_find(const tn_meta_state_t *s, const char *name)
{
    bool found;
    size_t i = tn__meta_search((void *const *)s->users, s->nusers, name,
                               offsetof(tn_meta_user_t, name), &found);
    return found ? s->users[i] : NULL;
}

size_t tn_meta_topic_after(const tn_meta_state_t *s, const char *after)
{
    if (after[0] == '\0')
        return 0;
    bool found;
    size_t i = tn__meta_search((void *const *)s->topics, s->ntopics, after, TOPIC_NAME_OFF, &found);
    return found ? i + 1 : i;
}

static size_t channel_search(const tn_meta_topic_entry_t *t, const char *name, bool *found)
{
    size_t lo = 0, hi = t->nchannels;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(t->channels[mid], name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool tn_meta_channel_exists(const tn_meta_state_t *s, const char *topic, const char *channel)
{
    uint64_t stamp;
    return tn_meta_channel_find(s, topic, channel, &stamp);
}

bool tn_meta_channel_find(const tn_meta_state_t *s, const char *topic, const char *channel,
                          uint64_t *stamp)
{
    const tn_meta_topic_entry_t *t = tn_meta_topic_find(s, topic);
    bool found = false;
    size_t i = 0;
    if (t != NULL)
        i = channel_search(t, channel, &found);
    *stamp = found ? t->chstamps[i] : 0;
    return found;
}

/* One child more (d = 1) or less (d = -1) for the topic named parent
 * (which is there: a PUT naming a missing parent is refused). */
static void count_child(tn_meta_state_t *s, const char *parent, int d)
{
    tn_meta_topic_entry_t *p = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, parent);
    if (p != NULL)
        p->nchildren = (uint32_t)((int64_t)p->nchildren + d);
}

/* A topic's fan-out link cleared: it stands alone. */
static void unlink_child(tn_meta_topic_t *t)
{
    t->parent[0] = '\0';
    t->fanout_delay_ms = 0;
    t->attach_epoch = 0;
}

/* --- placement ------------------------------------------------------------------ */

static size_t alive_count(const tn_meta_state_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nmembers; i++)
        n += s->members[i].status == TN_MEMBER_ALIVE;
    return n;
}

/* The k-th alive member by id (k < alive_count). */
static uint64_t nth_alive(const tn_meta_state_t *s, size_t k)
{
    for (size_t i = 0; i < s->nmembers; i++) {
        if (s->members[i].status != TN_MEMBER_ALIVE)
            continue;
        if (k-- == 0)
            return s->members[i].id;
    }
    return 0;
}

static bool skipped(const tn_meta_cmd_t *c, uint64_t id)
{
    for (uint16_t i = 0; c != NULL && i < c->nskip; i++)
        if (c->skip[i] == id)
            return true;
    return false;
}

/* The members a command's new partitions go to: alive and not on its skip
 * list; when the skip list leaves none, every alive member (*all: a
 * placement on a member the leader has not heard from lately beats no
 * placement at all). Their count. */
static size_t eligible_count(const tn_meta_state_t *s, const tn_meta_cmd_t *c, bool *all)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nmembers; i++)
        n += s->members[i].status == TN_MEMBER_ALIVE && !skipped(c, s->members[i].id);
    *all = n == 0;
    return n > 0 ? n : alive_count(s);
}

/* The k-th of them by id (k < eligible_count). */
static uint64_t nth_eligible(const tn_meta_state_t *s, const tn_meta_cmd_t *c, bool all, size_t k)
{
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *m = &s->members[i];
        if (m->status != TN_MEMBER_ALIVE || (!all && skipped(c, m->id)))
            continue;
        if (k-- == 0)
            return m->id;
    }
    return 0;
}

static uint32_t count_unassigned(const tn_meta_topic_entry_t *t, uint32_t from, uint32_t to)
{
    uint32_t n = 0;
    for (uint32_t p = from; p < to; p++)
        n += t->owners[p] == 0;
    return n;
}

static size_t member_search(const tn_meta_state_t *s, uint64_t id, bool *found);

/* --- replicated partitions ------------------------------------------------------ */

/* Room in s->nodes for n members. */
static int nodes_fit(tn_meta_state_t *s, size_t n)
{
    if (n <= s->nodes_cap)
        return 0;
    tn_pstate_node_t *v = tn_realloc(s->nodes, n * sizeof(*v));
    if (v == NULL)
        return UV_ENOMEM;
    s->nodes = v;
    s->nodes_cap = n;
    return 0;
}

/* s->nodes from the members (after any change to them): what partstate
 * knows of each. Allocates only for a member more than before (a new
 * member makes the room first: member_register). */
static int refresh_nodes(tn_meta_state_t *s)
{
    if (s->nmembers == 0)
        return 0;
    if (nodes_fit(s, s->nmembers) != 0)
        return UV_ENOMEM;
    tn_pstate_node_t *v = s->nodes;
    for (size_t i = 0; i < s->nmembers; i++) {
        v[i].id = (uint32_t)s->members[i].id;
        v[i].incarnation = s->members[i].incarnation;
        v[i].live = !s->members[i].fenced;
    }
    return 0;
}

/* Whether t is a replicated topic (factor > 1): its partitions are made
 * with a state. A factor-1 topic may hold states too, of the partitions
 * a move gave one (tn_meta_state_move_from), so t->pstates != NULL does
 * not say it. */
static bool topic_replicated(const tn_meta_topic_entry_t *t)
{
    return tn_meta_topic_factor(&t->rec) > 1;
}

/* Room for a state per partition of t (a factor-1 topic's first moved
 * partition, or its snapshot's PART_STATE): owners_cap slots, zeroed. */
static int pstates_fit(tn_meta_topic_entry_t *t)
{
    if (t->pstates != NULL)
        return 0;
    t->pstates = tn_calloc(TN_MAX(t->owners_cap, 1), sizeof(*t->pstates));
    return t->pstates != NULL ? 0 : UV_ENOMEM;
}

static tn_pstate_nodes_t nodes_of(const tn_meta_state_t *s)
{
    tn_pstate_nodes_t n = {s->nodes, s->nodes != NULL ? s->nmembers : 0};
    return n;
}

static void tell(tn_meta_state_t *s, const tn_meta_topic_entry_t *t, const char *name, uint32_t p)
{
    if (s->pstate_cb == NULL)
        return;
    const tn_pstate_t *ps = NULL;
    if (t != NULL && t->pstates != NULL && p < t->rec.partitions && t->pstates[p].nreplicas > 0)
        ps = &t->pstates[p];
    s->pstate_cb(s->pstate_arg, name, p, ps);
}

/* Partition p of a replicated topic: min(factor, n) of the eligible
 * members, from index p mod n on, wrapping; its state made over them.
 * owners[p] is the first. */
static void place_replicated(tn_meta_state_t *s, const tn_meta_cmd_t *c, tn_meta_topic_entry_t *t,
                             bool all, size_t n, uint32_t p)
{
    uint32_t k = (uint32_t)TN_MIN((size_t)tn_meta_topic_factor(&t->rec), n);
    uint32_t replicas[TN_PSTATE_MAX_REPLICAS];
    for (uint32_t j = 0; j < k; j++)
        replicas[j] = (uint32_t)nth_eligible(s, c, all, (p + j) % n);
    uint32_t min_insync = TN_MIN((uint32_t)tn_meta_topic_min_insync(&t->rec), k);
    tn_pstate_nodes_t nodes = nodes_of(s);
    char err[128];
    if (k == 0 ||
        tn_pstate_create(&t->pstates[p], replicas, k, min_insync, &nodes, err, sizeof(err)) != 0) {
        memset(&t->pstates[p], 0, sizeof(t->pstates[p]));
        t->owners[p] = 0;
        return;
    }
    t->owners[p] = replicas[0];
}

/* Partitions [from, to) of t, made by c: owner = c's eligible members
 * (above) sorted by id, index p mod n (none alive: unassigned, picked up
 * at a registration); a replicated topic's get their replicas from there. */
static void place(tn_meta_state_t *s, const tn_meta_cmd_t *c, tn_meta_topic_entry_t *t,
                  uint32_t from, uint32_t to)
{
    bool all;
    size_t n = eligible_count(s, c, &all);
    for (uint32_t p = from; p < to; p++) {
        if (topic_replicated(t) && n > 0)
            place_replicated(s, c, t, all, n, p);
        else
            t->owners[p] = n > 0 ? nth_eligible(s, c, all, p % n) : 0;
        if (t->owners[p] == 0)
            s->unassigned++;
        else if (topic_replicated(t))
            tell(s, t, t->rec.name, p);
    }
}

/* A member became alive: every unassigned partition gets its owner by
 * the same rule. */
static void place_unassigned(tn_meta_state_t *s)
{
    size_t n = alive_count(s);
    if (s->unassigned == 0 || n == 0)
        return;
    for (size_t i = 0; i < s->ntopics; i++) {
        tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t p = 0; p < t->rec.partitions; p++) {
            if (t->owners[p] != 0)
                continue;
            if (topic_replicated(t)) {
                place_replicated(s, NULL, t, true, n, p);
                if (t->owners[p] != 0)
                    tell(s, t, t->rec.name, p);
            } else {
                t->owners[p] = nth_alive(s, p % n);
            }
        }
    }
    s->unassigned = 0;
    for (size_t i = 0; i < s->ntopics; i++)
        s->unassigned += count_unassigned(s->topics[i], 0, s->topics[i]->rec.partitions);
}

const tn_pstate_t *tn_meta_state_pstate(const tn_meta_state_t *s, const char *topic, uint32_t p)
{
    const tn_meta_topic_entry_t *t = tn_meta_topic_find(s, topic);
    if (t == NULL || t->pstates == NULL || p >= t->rec.partitions || t->pstates[p].nreplicas == 0)
        return NULL;
    return &t->pstates[p];
}

int tn_meta_state_move_from(const tn_meta_state_t *s, const char *topic, uint32_t p,
                            tn_pstate_t *out, char *err, size_t errlen)
{
    const tn_meta_topic_entry_t *t = tn_meta_topic_find(s, topic);
    if (t == NULL || p >= t->rec.partitions) {
        tn_errbuf(err, errlen, t == NULL ? "topic not found" : "no such partition");
        return TN_ENOTFOUND;
    }
    if (t->pstates != NULL && t->pstates[p].nreplicas > 0) {
        *out = t->pstates[p];
        return 0;
    }
    if (topic_replicated(t)) {
        tn_errbuf(err, errlen, "the partition is not placed yet: no member was alive to hold it");
        return UV_EINVAL;
    }
    uint32_t owner = (uint32_t)t->owners[p];
    if (owner == 0) {
        tn_errbuf(err, errlen, "the partition has no owner yet: no member was alive to hold it");
        return UV_EINVAL;
    }
    const tn_meta_member_t *m = tn_meta_member_find(s, owner);
    if (!tn_meta_member_live(m)) {
        tn_errbuf(err, errlen,
                  "its owner, member %" PRIu32 ", is not alive: the partition's only copy cannot "
                  "be copied until it is back",
                  owner);
        return UV_EPERM;
    }
    /* Rule 1 over the owner alone: replicas and ISR {owner}, the owner
     * leads in epoch 1 (the log of a partition that never had a state
     * has no epoch), min_insync 1. */
    tn_pstate_nodes_t nodes = nodes_of(s);
    return tn_pstate_create(out, &owner, 1, 1, &nodes, err, errlen);
}

void tn_meta_state_nodes(const tn_meta_state_t *s, tn_pstate_node_t *buf, size_t cap,
                         tn_pstate_nodes_t *out)
{
    size_t n = TN_MIN(cap, s->nmembers);
    for (size_t i = 0; i < n; i++) {
        buf[i].id = (uint32_t)s->members[i].id;
        buf[i].incarnation = s->members[i].incarnation;
        buf[i].live = !s->members[i].fenced;
    }
    out->v = buf;
    out->n = n;
}

uint8_t tn_meta_state_clamp_factor(const tn_meta_state_t *s, unsigned asked)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nmembers; i++)
        n += tn_meta_member_live(&s->members[i]);
    size_t f = TN_MIN((size_t)TN_MIN(asked, (unsigned)TN_META_MAX_FACTOR), n);
    return (uint8_t)(f > 0 ? f : 1);
}

void tn_meta_state_each_pstate(const tn_meta_state_t *s, tn_meta_pstate_cb cb, void *arg)
{
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t p = 0; t->pstates != NULL && p < t->rec.partitions; p++)
            if (t->pstates[p].nreplicas > 0)
                cb(arg, t->rec.name, p, &t->pstates[p]);
    }
}

/* Every partition state of every replicated topic through f (fence,
 * elect, ...); those it changed are told. */
static void each_pstate(tn_meta_state_t *s, bool (*f)(tn_pstate_t *ps, void *arg), void *arg)
{
    for (size_t i = 0; i < s->ntopics; i++) {
        tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t p = 0; t->pstates != NULL && p < t->rec.partitions; p++)
            if (t->pstates[p].nreplicas > 0 && f(&t->pstates[p], arg))
                tell(s, t, t->rec.name, p);
    }
}

typedef struct {
    uint32_t node;
    uint64_t incarnation;
    tn_pstate_nodes_t nodes;
} fence_arg_t;

static bool fence_one(tn_pstate_t *ps, void *arg)
{
    fence_arg_t *a = arg;
    return tn_pstate_fence(ps, a->node, a->incarnation, &a->nodes);
}

static bool elect_one(tn_pstate_t *ps, void *arg)
{
    fence_arg_t *a = arg;
    return ps->leader == TN_PSTATE_NONE && tn_pstate_elect(ps, &a->nodes);
}

/* Fence member i's session with incarnation (0: any) on every partition.
 * The topics it was creating through /v1 lose their mark: it can no
 * longer answer their creation, nor take it back (state.h). */
static void fence_member(tn_meta_state_t *s, size_t i, uint64_t incarnation)
{
    s->members[i].fenced = true;
    for (size_t k = 0; k < s->ntopics; k++)
        if (s->topics[k]->rec.creating == s->members[i].id)
            s->topics[k]->rec.creating = 0;
    (void)refresh_nodes(s); /* same size: no allocation */
    fence_arg_t a = {(uint32_t)s->members[i].id, incarnation, nodes_of(s)};
    each_pstate(s, fence_one, &a);
}

static void elect_offline(tn_meta_state_t *s)
{
    fence_arg_t a = {0, 0, nodes_of(s)};
    each_pstate(s, elect_one, &a);
}

/* The partition state a PART_* command names. */
static int find_pstate(tn_meta_state_t *s, const tn_meta_cmd_t *c, tn_meta_topic_entry_t **tp,
                       tn_pstate_t **out)
{
    tn_meta_topic_entry_t *t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
    if (t == NULL || c->part >= t->rec.partitions)
        return TN_ENOTFOUND;
    if (t->pstates == NULL || t->pstates[c->part].nreplicas == 0)
        return UV_EINVAL;
    *tp = t;
    *out = &t->pstates[c->part];
    return 0;
}

/* TOPIC_GROW_FOR of a replicated topic: partition p led by member, with
 * the alive members after it by id (wrapping) as its other replicas. */
static void grow_replicated(tn_meta_state_t *s, tn_meta_topic_entry_t *t, uint32_t p,
                            uint64_t member)
{
    size_t n = alive_count(s), at = 0;
    for (size_t k = 0; k < n; k++)
        if (nth_alive(s, k) == member)
            at = k;
    uint32_t factor = (uint32_t)TN_MIN((size_t)tn_meta_topic_factor(&t->rec), TN_MAX(n, 1));
    uint32_t replicas[TN_PSTATE_MAX_REPLICAS];
    uint32_t k = 0;
    replicas[k++] = (uint32_t)member;
    for (size_t j = 1; j < n && k < factor; j++) {
        uint64_t id = nth_alive(s, (at + j) % n);
        if (id != member)
            replicas[k++] = (uint32_t)id;
    }
    tn_pstate_nodes_t nodes = nodes_of(s);
    char err[128];
    uint32_t min_insync = TN_MIN((uint32_t)tn_meta_topic_min_insync(&t->rec), k);
    if (tn_pstate_create(&t->pstates[p], replicas, k, min_insync, &nodes, err, sizeof(err)) != 0)
        memset(&t->pstates[p], 0, sizeof(t->pstates[p]));
    else
        tell(s, t, t->rec.name, p);
}

static int part_move(tn_meta_state_t *s, const tn_meta_cmd_t *c, tn_meta_topic_entry_t *t,
                     tn_pstate_t *ps);

static int part_cmd(tn_meta_state_t *s, const tn_meta_cmd_t *c, bool restoring)
{
    tn_meta_topic_entry_t *t;
    tn_pstate_t *ps;
    if (c->type == TN_MC_PART_STATE) {
        if (!restoring)
            return UV_EINVAL; /* a snapshot record */
        t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
        if (t == NULL || c->part >= t->rec.partitions)
            return TN_ECORRUPT;
        if (pstates_fit(t) != 0)
            return UV_ENOMEM;
        t->pstates[c->part] = c->pstate;
        return 0;
    }
    int rc = find_pstate(s, c, &t, &ps);
    bool made = false; /* a factor-1 partition's first state, made for this move */
    if (rc == UV_EINVAL && c->type == TN_MC_PART_MOVE && c->move_kind == TN_MOVE_BEGIN) {
        tn_pstate_t from;
        char why[160];
        rc = tn_meta_state_move_from(s, c->topic.name, c->part, &from, why, sizeof(why));
        if (rc == 0) {
            t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
            if (pstates_fit(t) != 0)
                return UV_ENOMEM;
            ps = &t->pstates[c->part];
            *ps = from;
            made = true;
        }
    }
    if (rc != 0)
        return rc;
    tn_pstate_nodes_t nodes = nodes_of(s);
    tn_pstate_t was = *ps;
    if (made)
        memset(&was, 0, sizeof(was)); /* refused: the partition stays without one */
    char err[160];
    switch (c->type) {
    case TN_MC_PART_ISR:
        rc = tn_pstate_alter_isr_ex(ps, c->node, c->leader_epoch, c->expected_pe, c->isr, c->nisr,
                                    c->channels_checked, &nodes, err, sizeof(err));
        break;
    case TN_MC_PART_LEADER:
        rc = tn_pstate_force_leader(ps, c->node, c->unclean, &nodes, err, sizeof(err));
        break;
    case TN_MC_PART_REBALANCE:
        rc = tn_pstate_rebalance(ps, &nodes);
        break;
    case TN_MC_PART_CORRUPT:
        (void)tn_pstate_mark_corrupt(ps, c->node, &nodes);
        rc = 0;
        break;
    case TN_MC_PART_MOVE:
        rc = part_move(s, c, t, ps);
        break;
    case TN_MC_MOVE_MARK:
        /* Partstate.h rule 10: no epoch bumped, nobody told. */
        rc = tn_pstate_move_mark(ps, c->move_id, c->mark, c->nmark);
        break;
    default:
        return UV_ENOTSUP;
    }
    if (rc != 0)
        *ps = was;                                       /* a refused command changes nothing */
    else if (ps->partition_epoch != was.partition_epoch) /* bumped by every change */
        tell(s, t, t->rec.name, c->part);
    return rc;
}

/* --- partition moves ------------------------------------------------------------ */

static void move_keep(tn_meta_state_t *s, const tn_meta_move_t *mv)
{
    s->moves[s->moves_next] = *mv;
    s->moves_next = (s->moves_next + 1) % TN_META_MOVES_KEPT;
    if (s->nmoves < TN_META_MOVES_KEPT)
        s->nmoves++;
}

const tn_meta_move_t *tn_meta_state_move_done(const tn_meta_state_t *s, size_t k)
{
    if (k >= s->nmoves)
        return NULL;
    uint32_t at = (s->moves_next + TN_META_MOVES_KEPT - 1 - (uint32_t)k) % TN_META_MOVES_KEPT;
    return &s->moves[at];
}

const tn_pstate_t *tn_meta_state_move_find(const tn_meta_state_t *s, uint64_t id,
                                           const char **topic, uint32_t *p)
{
    for (size_t i = 0; id != 0 && i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t k = 0; t->pstates != NULL && k < t->rec.partitions; k++) {
            if (t->pstates[k].nreplicas > 0 && t->pstates[k].move_id == id) {
                *topic = t->rec.name;
                *p = k;
                return &t->pstates[k];
            }
        }
    }
    return NULL;
}

static bool has(const uint32_t *v, uint32_t n, uint64_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == node)
            return true;
    return false;
}

uint64_t tn_meta_state_outbound_moves(const tn_meta_state_t *s, uint64_t member)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t k = 0; t->pstates != NULL && k < t->rec.partitions; k++) {
            const tn_pstate_t *ps = &t->pstates[k];
            n += ps->ntarget > 0 && has(ps->old, ps->nold, member) &&
                 !has(ps->target, ps->ntarget, member);
        }
    }
    return n;
}

uint64_t tn_meta_state_replicas_held(const tn_meta_state_t *s, uint64_t member)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t k = 0; t->pstates != NULL && k < t->rec.partitions; k++)
            n += has(t->pstates[k].replicas, t->pstates[k].nreplicas, member);
    }
    return n;
}

uint64_t tn_meta_state_single_held(const tn_meta_state_t *s, uint64_t member)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t k = 0; !topic_replicated(t) && k < t->rec.partitions; k++)
            n += t->owners[k] == member && (t->pstates == NULL || t->pstates[k].nreplicas == 0);
    }
    return n;
}

/* PART_MOVE on ps (partition c->part of t): the rule of its kind; a
 * finished move is kept. */
static int part_move(tn_meta_state_t *s, const tn_meta_cmd_t *c, tn_meta_topic_entry_t *t,
                     tn_pstate_t *ps)
{
    tn_pstate_nodes_t nodes = nodes_of(s);
    char err[160];
    /* A factor-1 topic's partition moves to one member; one that has more
     * (its topic lowered by TOPIC_FACTOR, not shrunk yet) to at most as
     * many: a decommission or self-healing replaces a member of it before
     * the factor's moves shrink it (meta.c check_factor waits for them).
     * Before TOPIC_FACTOR such a partition had one replica: the same rule. */
    if (c->move_kind == TN_MOVE_BEGIN && !topic_replicated(t) && c->ntarget != 1 &&
        c->ntarget > ps->nreplicas)
        return UV_EINVAL;
    if (c->move_kind == TN_MOVE_BEGIN)
        return tn_pstate_move_begin(ps, c->target, c->ntarget, c->move_id, c->move_ms, &nodes, err,
                                    sizeof(err));
    tn_meta_move_t mv;
    memset(&mv, 0, sizeof(mv));
    mv.id = c->move_id;
    snprintf(mv.topic, sizeof(mv.topic), "%s", t->rec.name);
    mv.part = c->part;
    mv.started_ms = ps->move_started_ms;
    mv.finished_ms = c->move_ms;
    mv.nfrom = ps->nold;
    memcpy(mv.from, ps->old, sizeof(mv.from));
    mv.nto = ps->ntarget;
    memcpy(mv.to, ps->target, sizeof(mv.to));
    int rc;
    if (c->move_kind == TN_MOVE_COMPLETE) {
        rc = tn_pstate_move_complete(ps, c->move_id, &nodes, err, sizeof(err));
        mv.end = TN_MOVE_DONE;
        /* The topic's min_insync, capped by the replicas it ends with: a
         * partition raised to the topic's factor (TOPIC_FACTOR) takes it
         * now. Every replica in the ISR, as a completion needs. Not for an
         * older build's entry (move_unflagged): that build left it as it
         * was, and every replica, replaying it or restoring a snapshot
         * taken after it, must hold the same state. */
        uint32_t want = TN_MIN((uint32_t)tn_meta_topic_min_insync(&t->rec), ps->nreplicas);
        if (rc == 0 && !c->move_unflagged && ps->min_insync != want && ps->nisr >= want)
            ps->min_insync = want;
    } else {
        /* ABORT and FAIL both put the old replicas back (rule 8). */
        rc = tn_pstate_move_abort_ex(ps, c->move_id, !c->abort_unflagged, &nodes, err, sizeof(err));
        bool failed = c->move_kind == TN_MOVE_FAIL;
        mv.end = failed ? TN_MOVE_FAILED : TN_MOVE_ABORTED;
        snprintf(mv.reason, sizeof(mv.reason), "%s",
                 c->move_reason[0] != '\0' ? c->move_reason
                 : failed                  ? "failed"
                                           : "aborted");
    }
    if (rc == 0) {
        move_keep(s, &mv);
        t->owners[c->part] = ps->replicas[0];
    }
    return rc;
}

static int member_fence(tn_meta_state_t *s, const tn_meta_member_t *m, bool restoring)
{
    bool found;
    size_t i = member_search(s, m->id, &found);
    if (!found)
        return TN_ENOTFOUND;
    if (m->incarnation != 0 && m->incarnation != s->members[i].incarnation)
        return TN_ECHANGED; /* it registered with a new disk since: fenced then */
    if (restoring) {
        s->members[i].fenced = true;
        return refresh_nodes(s);
    }
    fence_member(s, i, m->incarnation);
    return 0;
}

/* A replicated partition's owner is its leader (0 while offline), so
 * routing that asks for the owner reaches the leader. */
uint64_t tn_meta_state_owner(const tn_meta_state_t *s, const char *topic, uint32_t p)
{
    const tn_meta_topic_entry_t *t = tn_meta_topic_find(s, topic);
    if (t == NULL || p >= t->rec.partitions)
        return 0;
    if (t->pstates != NULL && t->pstates[p].nreplicas > 0)
        return t->pstates[p].leader;
    return t->owners[p];
}

uint64_t tn_meta_state_owned(const tn_meta_state_t *s, uint64_t member)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t p = 0; p < t->rec.partitions; p++)
            n += t->owners[p] == member;
    }
    return n;
}

/* The owners array of t sized for partitions (new slots 0); UV_ENOMEM
 * leaves t as it was. */
static int owners_fit(tn_meta_topic_entry_t *t, uint32_t partitions)
{
    bool repl = tn_meta_topic_factor(&t->rec) > 1 || t->pstates != NULL;
    if (partitions <= t->owners_cap && (!repl || t->pstates != NULL))
        return 0;
    uint32_t cap = TN_MAX(partitions, t->owners_cap);
    if (repl) {
        tn_pstate_t *ps = tn_realloc(t->pstates, (size_t)cap * sizeof(*ps));
        if (ps == NULL)
            return UV_ENOMEM;
        uint32_t had = t->pstates != NULL ? t->owners_cap : 0;
        memset(ps + had, 0, (size_t)(cap - had) * sizeof(*ps));
        t->pstates = ps;
    }
    if (cap == t->owners_cap)
        return 0;
    uint64_t *o = tn_realloc(t->owners, (size_t)cap * sizeof(*o));
    if (o == NULL)
        return UV_ENOMEM;
    memset(o + t->owners_cap, 0, (size_t)(cap - t->owners_cap) * sizeof(*o));
    t->owners = o;
    t->owners_cap = cap;
    return 0;
}

/* The record c makes of a new topic: a factor asked (c->clamp) becomes
 * at most the members alive and live in s, min_insync at most that. Every
 * replica applies the same entry to the same state, so every one records
 * the same factor, whichever node took the request. */
static tn_meta_topic_t made_record(const tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    tn_meta_topic_t rec = c->topic;
    rec.replication_factor = tn_meta_topic_factor(&c->topic);
    if (c->clamp)
        rec.replication_factor = tn_meta_state_clamp_factor(s, rec.replication_factor);
    rec.min_insync = TN_MIN(tn_meta_topic_min_insync(&c->topic), rec.replication_factor);
    return rec;
}

/* Whether rec is what c made when it was first applied. A clamped factor
 * depends on the members alive then, which may have changed since: any
 * factor up to the one asked matches, with min_insync clamped to it. */
static bool made_by(const tn_meta_topic_t *rec, const tn_meta_cmd_t *c)
{
    tn_meta_topic_t want = c->topic;
    /* An owner the apply took from the parent (meta/owner.h rule 3). */
    if ((c->owner_rule & TN_META_OWN_FOLLOW) != 0)
        memcpy(want.owner, rec->owner, sizeof(want.owner));
    if (c->clamp && tn_meta_topic_factor(rec) <= tn_meta_topic_factor(&c->topic)) {
        want.replication_factor = tn_meta_topic_factor(rec);
        want.min_insync = TN_MIN(tn_meta_topic_min_insync(&c->topic), tn_meta_topic_factor(rec));
    }
    return tn_meta_topic_fingerprint(rec) == tn_meta_topic_fingerprint(&want);
}

/* restoring: a snapshot is being read, whose topics come by name, so a
 * child may come before its parent; restore counts children at the end. */
/* The topic's min_insync, capped by each partition's replicas, into the
 * states of partitions [0, upto) of t (a bumped epoch each; told when
 * told_too). During a move the list is target and old together: the cap
 * is the smaller of the two a move may end with. */
static void pstates_min_insync(tn_meta_state_t *s, tn_meta_topic_entry_t *t, uint32_t upto,
                               bool told_too)
{
    uint32_t min_insync = tn_meta_topic_min_insync(&t->rec);
    for (uint32_t p = 0; t->pstates != NULL && p < upto; p++) {
        tn_pstate_t *ps = &t->pstates[p];
        if (ps->nreplicas == 0)
            continue;
        uint32_t cap = ps->ntarget > 0 ? TN_MIN(ps->ntarget, ps->nold) : ps->nreplicas;
        if (ps->min_insync == TN_MIN(min_insync, cap))
            continue;
        ps->min_insync = TN_MIN(min_insync, cap);
        ps->partition_epoch++;
        if (told_too)
            tell(s, t, t->rec.name, p);
    }
}

/* TOPIC_FACTOR (docs/replication.md "Changing a topic's replication
 * factor"): the record's factor and min_insync become c's, while the
 * record is the one the change was made from (TN_ECHANGED). Raised above
 * 1, every partition that has an owner and no state (a factor-1 partition
 * that never moved) gets one over its owner alone in the same apply, as
 * its move would (tn_meta_state_move_from: replicas and ISR the owner,
 * leading in epoch 1, min_insync 1), so every placed partition of a
 * replicated topic has a state; an owner that is not alive refuses the
 * whole change (UV_EPERM), nothing changed. The count of each partition's
 * replicas is then moved to the factor by the metastore leader (meta.c
 * check_factor), and its min_insync follows at each move's completion
 * (part_move); here it is capped by the replicas each has now. */
static int topic_factor(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    tn_meta_topic_entry_t *t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
    if (t == NULL)
        return TN_ENOTFOUND;
    if (tn_meta_topic_fingerprint(&t->rec) != c->expect)
        return TN_ECHANGED;
    uint8_t factor = c->topic.replication_factor, min_insync = c->topic.min_insync;
    if (factor < 1 || factor > TN_META_MAX_FACTOR || min_insync < 1 || min_insync > factor)
        return UV_EINVAL;
    uint32_t n = t->rec.partitions;
    bool convert = false;
    for (uint32_t p = 0; factor > 1 && p < n; p++) {
        if (t->owners[p] == 0 || (t->pstates != NULL && t->pstates[p].nreplicas > 0))
            continue;
        const tn_meta_member_t *m = tn_meta_member_find(s, t->owners[p]);
        if (!tn_meta_member_live(m))
            return UV_EPERM;
        convert = true;
    }
    /* Room for every partition's state whenever the topic becomes a
     * replicated one, even with nothing to convert: a partition placed
     * later (place_unassigned, every owner 0 now) gets its state there. */
    if (factor > 1 && pstates_fit(t) != 0)
        return UV_ENOMEM;
    tn_pstate_nodes_t nodes = nodes_of(s);
    for (uint32_t p = 0; convert && p < n; p++) {
        tn_pstate_t *ps = &t->pstates[p];
        if (t->owners[p] == 0 || ps->nreplicas > 0)
            continue;
        uint32_t owner = (uint32_t)t->owners[p];
        char err[128];
        if (tn_pstate_create(ps, &owner, 1, 1, &nodes, err, sizeof(err)) != 0)
            memset(ps, 0, sizeof(*ps)); /* checked alive above: not reached */
        else
            tell(s, t, t->rec.name, p);
    }
    t->rec.replication_factor = factor;
    t->rec.min_insync = min_insync;
    pstates_min_insync(s, t, n, true);
    return 0;
}

static int topic_put(tn_meta_state_t *s, const tn_meta_cmd_t *c, bool restoring)
{
    bool found;
    size_t i = tn__meta_search((void *const *)s->topics, s->ntopics, c->topic.name, TOPIC_NAME_OFF,
                               &found);
    /* A copy sent again (a follower re-sent it to a new leader while the
     * old one's copy got committed too: meta.h) that finds exactly the
     * record it makes answers as the first copy did. */
    uint64_t fp = found ? tn_meta_topic_fingerprint(&s->topics[i]->rec) : 0;
    if (found && c->again && (c->if_absent || c->if_unchanged) && made_by(&s->topics[i]->rec, c))
        return 0;
    if (found && c->if_absent)
        return UV_EEXIST;
    if (found && c->if_unchanged && fp != c->expect)
        return TN_ECHANGED;
    if (!found && c->if_unchanged)
        return TN_ENOTFOUND;
    /* A link names a topic that is there (a parent deleted meanwhile
     * detached its children, and an attach made before that lands after
     * it): so no child ever names a missing parent. */
    if (!restoring && c->topic.parent[0] != '\0' && strcmp(c->topic.parent, c->topic.name) == 0)
        return UV_EINVAL;
    if (!restoring && c->topic.parent[0] != '\0' && tn_meta_topic_find(s, c->topic.parent) == NULL)
        return UV_ENOENT;
    if (found) {
        tn_meta_topic_entry_t *t = s->topics[i];
        uint32_t was = t->rec.partitions, now = c->topic.partitions;
        if (owners_fit(t, now) != 0)
            return UV_ENOMEM;
        /* Growth places only the new partitions; a shrink forgets the
         * owners of the ones gone. */
        if (now < was) {
            s->unassigned -= count_unassigned(t, now, was);
            memset(t->owners + now, 0, (size_t)(was - now) * sizeof(*t->owners));
            if (t->pstates != NULL)
                memset(t->pstates + now, 0, (size_t)(was - now) * sizeof(*t->pstates));
        }
        if (!restoring && strcmp(t->rec.parent, c->topic.parent) != 0) {
            if (t->rec.parent[0] != '\0')
                count_child(s, t->rec.parent, -1);
            if (c->topic.parent[0] != '\0')
                count_child(s, c->topic.parent, 1);
        }
        /* The factor stays (TOPIC_FACTOR changes it); a new min_insync
         * reaches every partition state. */
        uint8_t factor = tn_meta_topic_factor(&t->rec);
        uint8_t min_insync = TN_MIN(tn_meta_topic_min_insync(&c->topic), factor);
        bool min_changed = min_insync != tn_meta_topic_min_insync(&t->rec);
        char old_owner[sizeof(t->rec.owner)];
        memcpy(old_owner, t->rec.owner, sizeof(old_owner));
        uint64_t creating = t->rec.creating; /* only TOPIC_READY and fencing clear it */
        t->rec = c->topic;
        t->rec.creating = creating;
        /* Its dead-letter topics follow a new owner (meta/owner.h rule 3). */
        if (!restoring && (c->owner_rule & TN_META_OWN_CARRY) != 0 &&
            strcmp(old_owner, t->rec.owner) != 0)
            tn__meta_owner_carry(s, t->rec.name, old_owner, t->rec.owner);
        t->rec.replication_factor = factor;
        t->rec.min_insync = min_insync;
        for (uint32_t p = now; p < was && t->pstates != NULL; p++)
            tell(s, t, t->rec.name, p);
        if (min_changed)
            pstates_min_insync(s, t, TN_MIN(was, now), !restoring);
        if (now > was && restoring)
            s->unassigned += now - was;
        else if (now > was)
            place(s, c, t, was, now);
        return 0;
    }
    /* A snapshot's record is taken as it was made (it carries no clamp,
     * no owner rule). */
    tn_meta_topic_t rec = made_record(s, c);
    int rc = restoring ? 0 : tn__meta_owner_made(s, c->owner_rule, &rec); /* meta/owner.h rule 3 */
    if (rc != 0)
        return rc;
    if (grow((void ***)&s->topics, s->ntopics, &s->tcap) != 0)
        return UV_ENOMEM;
    tn_meta_topic_entry_t *t = tn_calloc(1, sizeof(*t));
    if (t == NULL)
        return UV_ENOMEM;
    t->rec = rec;
    if (owners_fit(t, c->topic.partitions) != 0) {
        tn_free(t->owners);
        tn_free(t->pstates);
        tn_free(t);
        return UV_ENOMEM;
    }
    insert_at((void **)s->topics, &s->ntopics, i, t);
    /* Restoring: the snapshot's owner record follows (none: unassigned). */
    if (restoring)
        s->unassigned += t->rec.partitions;
    else
        place(s, c, t, 0, t->rec.partitions);
    if (!restoring && t->rec.parent[0] != '\0')
        count_child(s, t->rec.parent, 1);
    return 0;
}

/* t->name's record if it is the one made at t->created_at_ms; else NULL
 * and *rc TN_ENOTFOUND when there is none (taken back, deleted),
 * TN_ECHANGED when it is another one made again under the name since. */
static tn_meta_topic_entry_t *topic_made_at(tn_meta_state_t *s, const tn_meta_topic_t *t, int *rc)
{
    bool found;
    size_t i =
        tn__meta_search((void *const *)s->topics, s->ntopics, t->name, TOPIC_NAME_OFF, &found);
    *rc = !found                                                ? TN_ENOTFOUND
          : s->topics[i]->rec.created_at_ms != t->created_at_ms ? TN_ECHANGED
                                                                : 0;
    return *rc == 0 ? s->topics[i] : NULL;
}

/* A /v1 creation's part is made (cmd.h TOPIC_READY): the mark of the
 * record made at c->topic.created_at_ms is cleared (topic_made_at's
 * refusals otherwise); 0 also when the mark was cleared already (its
 * member fenced meanwhile, or a copy sent again). */
static int topic_ready(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    int rc;
    tn_meta_topic_entry_t *e = topic_made_at(s, &c->topic, &rc);
    if (e != NULL)
        e->rec.creating = 0;
    return rc;
}

/* Deleting a parent detaches its children in the same change: they stay,
 * with their messages, as standalone topics, and every replica applying
 * the delete makes the same ones standalone. */
static int topic_delete(tn_meta_state_t *s, const char *name)
{
    bool found;
    size_t i = tn__meta_search((void *const *)s->topics, s->ntopics, name, TOPIC_NAME_OFF, &found);
    if (!found)
        return TN_ENOTFOUND;
    tn_meta_topic_entry_t *t = s->topics[i];
    s->unassigned -= count_unassigned(t, 0, t->rec.partitions);
    if (t->rec.parent[0] != '\0')
        count_child(s, t->rec.parent, -1);
    for (size_t k = 0; k < s->ntopics; k++) {
        if (k != i && strcmp(s->topics[k]->rec.parent, name) == 0)
            unlink_child(&s->topics[k]->rec);
    }
    uint32_t gone = t->pstates != NULL ? t->rec.partitions : 0;
    char tname[TN_NAME_MAX + 1];
    snprintf(tname, sizeof(tname), "%s", name); /* name may be t's own */
    topic_free(t);
    remove_at((void **)s->topics, &s->ntopics, i);
    for (uint32_t p = 0; p < gone; p++)
        tell(s, NULL, tname, p);
    return 0;
}

static int channel_put(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    tn_meta_topic_entry_t *t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
    if (t == NULL)
        return TN_ENOTFOUND;
    bool found;
    size_t i = channel_search(t, c->channel, &found);
    if (found)
        return c->if_absent ? UV_EEXIST : 0; /* the channel keeps its stamp */
    size_t n = t->nchannels, cap = t->chcap;
    if (grow((void ***)&t->channels, n, &cap) != 0)
        return UV_ENOMEM;
    if (cap != t->chcap) {
        uint64_t *st = tn_realloc(t->chstamps, cap * sizeof(*st));
        if (st == NULL)
            return UV_ENOMEM; /* channels grew alone: chcap still says the old size */
        t->chstamps = st;
        t->chcap = (uint32_t)cap;
    }
    char *name = tn_strdup(c->channel);
    if (name == NULL)
        return UV_ENOMEM;
    insert_at((void **)t->channels, &n, i, name);
    memmove(&t->chstamps[i + 1], &t->chstamps[i], (t->nchannels - i) * sizeof(*t->chstamps));
    t->chstamps[i] = c->chan_stamp;
    t->nchannels = (uint32_t)n;
    return 0;
}

static int channel_delete(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    tn_meta_topic_entry_t *t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
    if (t == NULL)
        return TN_ENOTFOUND;
    bool found;
    size_t i = channel_search(t, c->channel, &found);
    if (!found)
        return TN_ENOTFOUND;
    tn_free(t->channels[i]);
    size_t n = t->nchannels;
    remove_at((void **)t->channels, &n, i);
    memmove(&t->chstamps[i], &t->chstamps[i + 1], (n - i) * sizeof(*t->chstamps));
    t->nchannels = (uint32_t)n;
    return 0;
}

static int user_put(tn_meta_state_t *s, const tn_meta_cmd_t *c, bool restoring)
{
    bool found;
    size_t i = tn__meta_search((void *const *)s->users, s->nusers, c->user.name,
                               offsetof(tn_meta_user_t, name), &found);
    /* A copy sent again (see topic_put) finding the record it makes. */
    uint64_t fp = found ? tn_meta_user_fingerprint(s->users[i]) : 0;
    if (found && c->again && (c->if_absent || c->if_unchanged) &&
        fp == tn_meta_user_fingerprint(&c->user))
        return 0;
    if (found && c->if_absent)
        return UV_EEXIST;
    if (!found && c->if_unchanged)
        return TN_ENOTFOUND;
    if (found && c->if_unchanged && fp != c->expect)
        return TN_ECHANGED;
    /* The root user's invariants, whatever a door sent: a new user is root
     * only while there is none; an update keeps the root flag and the root
     * user's grants. */
    const tn_meta_user_t *old = found ? s->users[i] : NULL;
    if (old == NULL && c->user.root) {
        for (size_t k = 0; k < s->nusers; k++)
            if (s->users[k]->root)
                return UV_EPERM;
    }
    tn_meta_user_t *u = tn_calloc(1, sizeof(*u));
    tn_meta_user_t keep;
    if (old != NULL && old->root) {
        keep = c->user;
        keep.grants = old->grants;
        keep.ngrants = old->ngrants;
    }
    if (u == NULL || tn_meta_user_copy(u, old != NULL && old->root ? &keep : &c->user) != 0) {
        tn_free(u);
        return UV_ENOMEM;
    }
    if (old != NULL)
        u->root = old->root;
    if (found) {
        user_free(s->users[i]);
        s->users[i] = u;
    } else {
        if (grow((void ***)&s->users, s->nusers, &s->ucap) != 0) {
            user_free(u);
            return UV_ENOMEM;
        }
        insert_at((void **)s->users, &s->nusers, i, u);
        /* A new user takes over no topic (meta/owner.h rule 2); the root
         * user it would find is another, a root being made takes none. A
         * snapshot's record is taken as written (it carries no such mark). */
        if (c->fresh && !restoring)
            tn__meta_owner_disown(s, u->name);
    }
    s->users_version++;
    return 0;
}

static int user_delete(tn_meta_state_t *s, const char *name, bool disown)
{
    bool found;
    size_t i = tn__meta_search((void *const *)s->users, s->nusers, name,
                               offsetof(tn_meta_user_t, name), &found);
    if (!found)
        return TN_ENOTFOUND;
    if (s->users[i]->root)
        return UV_EPERM;
    if (disown) /* meta/owner.h rule 2 */
        tn__meta_owner_disown(s, name);
    user_free(s->users[i]);
    remove_at((void **)s->users, &s->nusers, i);
    s->users_version++;
    return 0;
}

/* The index of member id in the sorted array, or where it would go. */
static size_t member_search(const tn_meta_state_t *s, uint64_t id, bool *found)
{
    size_t lo = 0, hi = s->nmembers;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->members[mid].id == id) {
            *found = true;
            return mid;
        }
        if (s->members[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const tn_meta_member_t *tn_meta_member_find(const tn_meta_state_t *s, uint64_t id)
{
    bool found;
    size_t i = member_search(s, id, &found);
    return found ? &s->members[i] : NULL;
}

bool tn_meta_member_live(const tn_meta_member_t *m)
{
    return m != NULL && m->status == TN_MEMBER_ALIVE && !m->fenced;
}

/* --- removed members (state.h) ---------------------------------------------------- */

static size_t removed_search(const tn_meta_state_t *s, uint64_t id, bool *found)
{
    size_t lo = 0, hi = s->nremoved;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->removed[mid].id == id) {
            *found = true;
            return mid;
        }
        if (s->removed[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const tn_meta_removed_t *tn_meta_state_removed(const tn_meta_state_t *s, uint64_t id)
{
    bool found;
    size_t i = removed_search(s, id, &found);
    return found ? &s->removed[i] : NULL;
}

/* Record (or replace) id's tombstone. 0 or UV_ENOMEM (nothing changed). */
static int tomb_put(tn_meta_state_t *s, uint64_t id, uint64_t incarnation, int64_t ms)
{
    bool found;
    size_t i = removed_search(s, id, &found);
    if (!found) {
        if (s->nremoved == s->rcap) {
            size_t nc = s->rcap ? s->rcap * 2 : 4;
            tn_meta_removed_t *p = tn_realloc(s->removed, nc * sizeof(*p));
            if (p == NULL)
                return UV_ENOMEM;
            s->removed = p;
            s->rcap = nc;
        }
        memmove(&s->removed[i + 1], &s->removed[i], (s->nremoved - i) * sizeof(*s->removed));
        s->nremoved++;
    }
    s->removed[i] = (tn_meta_removed_t){id, incarnation, ms};
    return 0;
}

static void tomb_drop(tn_meta_state_t *s, uint64_t id)
{
    bool found;
    size_t i = removed_search(s, id, &found);
    if (!found)
        return;
    memmove(&s->removed[i], &s->removed[i + 1], (s->nremoved - i - 1) * sizeof(*s->removed));
    s->nremoved--;
}

uint64_t tn_meta_state_held(const tn_meta_state_t *s, uint64_t member)
{
    uint64_t n = tn_meta_state_replicas_held(s, member);
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        for (uint32_t k = 0; t->pstates == NULL && k < t->rec.partitions; k++)
            n += t->owners[k] == member;
    }
    return n;
}

int tn_meta_state_remove_check(const tn_meta_state_t *s, uint64_t member, uint64_t *held)
{
    if (tn_meta_member_find(s, member) == NULL)
        return TN_ENOTFOUND;
    uint64_t n = tn_meta_state_held(s, member);
    if (held != NULL)
        *held = n;
    /* The floor first: emptying the member would not help. */
    if (s->nmembers <= 1 || (s->nmembers >= 3 && s->nmembers - 1 < 3))
        return UV_EPERM;
    return n > 0 ? UV_EBUSY : 0;
}

/* MEMBER_REMOVE: the member leaves (state.h), its tombstone stays. A
 * snapshot's record is the tombstone alone. */
static int member_remove(tn_meta_state_t *s, const tn_meta_cmd_t *c, bool restoring)
{
    if (restoring)
        return tomb_put(s, c->member.id, c->member.incarnation, c->removed_ms);
    bool found;
    size_t i = member_search(s, c->member.id, &found);
    if (!found)
        return TN_ENOTFOUND;
    if (c->member.incarnation != 0 && c->member.incarnation != s->members[i].incarnation)
        return TN_ECHANGED; /* a new data directory registered under the id since */
    int rc = tn_meta_state_remove_check(s, c->member.id, NULL);
    if (rc == 0)
        rc = tomb_put(s, c->member.id, s->members[i].incarnation, c->removed_ms);
    if (rc != 0)
        return rc;
    memmove(&s->members[i], &s->members[i + 1], (s->nmembers - i - 1) * sizeof(*s->members));
    s->nmembers--;
    return refresh_nodes(s); /* fewer nodes: fits */
}

/* A registration (MEMBER_PUT of the first build, MEMBER_REG of the
 * previous one, or MEMBER_REC with the full record): the member is alive;
 * draining stays as it was. What an older registration does not carry
 * (MEMBER_PUT: the API address and heartbeat; both: the NSQ door's
 * addresses) stays as it was. */
static int member_register(tn_meta_state_t *s, const tn_meta_member_t *m, uint8_t type,
                           bool restoring)
{
    /* A removed member (its old data directory, or a build that does not
     * say) stays out; an empty data directory reusing the id is new. */
    const tn_meta_removed_t *tomb = tn_meta_state_removed(s, m->id);
    if (tomb != NULL && (m->incarnation == 0 || m->incarnation == tomb->incarnation))
        return UV_EPERM;
    bool found;
    size_t i = member_search(s, m->id, &found);
    if (!found) {
        /* Room for its partstate view first: nothing changes on failure. */
        if (nodes_fit(s, s->nmembers + 1) != 0)
            return UV_ENOMEM;
        if (s->nmembers == s->mcap) {
            size_t nc = s->mcap ? s->mcap * 2 : 4;
            tn_meta_member_t *p = tn_realloc(s->members, nc * sizeof(*p));
            if (p == NULL)
                return UV_ENOMEM;
            s->members = p;
            s->mcap = nc;
        }
        memmove(&s->members[i + 1], &s->members[i], (s->nmembers - i) * sizeof(*s->members));
        s->nmembers++;
        memset(&s->members[i], 0, sizeof(s->members[i]));
        s->members[i].id = m->id;
    }
    tn_meta_member_t *r = &s->members[i];
    snprintf(r->addr, sizeof(r->addr), "%s", m->addr);
    if (type != TN_MC_MEMBER_PUT) {
        snprintf(r->api_addr, sizeof(r->api_addr), "%s", m->api_addr);
        r->heartbeat_ms = m->heartbeat_ms;
    }
    if (type == TN_MC_MEMBER_REC)
        r->nsq = m->nsq;
    r->status = TN_MEMBER_ALIVE;
    if (restoring) {
        r->incarnation = m->incarnation;
        r->boot = m->boot;
        return refresh_nodes(s);
    }
    (void)refresh_nodes(s); /* room made above */
    /* Another disk than the one recorded: its replicas there are gone, so
     * its old incarnation is fenced first (an older registration carries
     * none, 0, and keeps the recorded one). */
    /* A restart (another process, the same disk) too, whether or not the
     * old session ended: the process lost what it held in memory (a
     * leader's high watermark, its role), so its partitions get leaders
     * in new epochs and it rejoins their ISRs through their leaders. The
     * same registration sent again (a failover) carries the same boot id:
     * no second fence. */
    bool was_fenced = r->fenced;
    bool new_disk = m->incarnation != 0 && m->incarnation != r->incarnation;
    bool restarted = m->boot != 0 && r->boot != 0 && m->boot != r->boot;
    if (found && (new_disk || restarted)) {
        fence_member(s, i, r->incarnation);
        was_fenced = true;
    }
    if (m->incarnation != 0)
        r->incarnation = m->incarnation;
    if (m->boot != 0)
        r->boot = m->boot;
    r->fenced = false;
    (void)refresh_nodes(s);
    if (was_fenced || !found)
        elect_offline(s);
    place_unassigned(s);
    tomb_drop(s, m->id);
    return 0;
}

/* Applies only while the record has the heartbeat the decision was made
 * from: a registration that landed after the leader looked wins. */
static int member_status(tn_meta_state_t *s, const tn_meta_member_t *m, bool restoring)
{
    bool found;
    size_t i = member_search(s, m->id, &found);
    if (!found)
        return TN_ENOTFOUND;
    if (s->members[i].heartbeat_ms != m->heartbeat_ms)
        return TN_ECHANGED;
    s->members[i].status = m->status;
    /* A dead owner keeps its partitions (their data is only there). */
    if (!restoring && m->status == TN_MEMBER_ALIVE)
        place_unassigned(s);
    return 0;
}

/* A snapshot's owners of one topic (read after the topic). */
static int part_owners(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    tn_meta_topic_entry_t *t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, c->topic.name);
    if (t == NULL || c->nowners != t->rec.partitions)
        return TN_ECORRUPT;
    s->unassigned -= count_unassigned(t, 0, t->rec.partitions);
    memcpy(t->owners, c->owners, (size_t)c->nowners * sizeof(*c->owners));
    s->unassigned += count_unassigned(t, 0, t->rec.partitions);
    return 0;
}

/* One partition more for an NSQ topic, owned by member, unless member
 * owns one of it already: at most one per member however often (and
 * however many at once) it asks, since every replica applies the asks in
 * the same order and all but the first find the partition there. */
static int topic_grow_for(tn_meta_state_t *s, const char *name, uint64_t member)
{
    tn_meta_topic_entry_t *t = (tn_meta_topic_entry_t *)tn_meta_topic_find(s, name);
    if (t == NULL)
        return TN_ENOTFOUND;
    if (t->rec.native)
        return UV_EPERM; /* a /v1 topic keeps the count its owner chose */
    if (tn_meta_member_find(s, member) == NULL)
        return UV_ENOENT;
    for (uint32_t p = 0; p < t->rec.partitions; p++)
        if (t->owners[p] == member)
            return 0;
    if (t->rec.partitions >= TN_META_MAX_PARTITIONS)
        return UV_ERANGE;
    if (owners_fit(t, t->rec.partitions + 1) != 0)
        return UV_ENOMEM;
    uint32_t p = t->rec.partitions;
    t->owners[p] = member;
    t->rec.partitions++;
    if (topic_replicated(t))
        grow_replicated(s, t, p, member);
    return 0;
}

static int member_drain(tn_meta_state_t *s, const tn_meta_member_t *m)
{
    bool found;
    size_t i = member_search(s, m->id, &found);
    if (!found)
        return TN_ENOTFOUND;
    s->members[i].draining = m->draining;
    return 0;
}

static int cluster_rebalance(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    const tn_meta_rebal_t *rb = &c->rebal;
    if (rb->wanted) {
        if (c->if_absent && s->rebal.wanted)
            return UV_EBUSY;
        s->rebal = *rb;
        return 0;
    }
    if (!s->rebal.wanted || s->rebal.id != rb->id)
        return TN_ECHANGED;
    memset(&s->rebal, 0, sizeof(s->rebal));
    return 0;
}

static int apply(tn_meta_state_t *s, const tn_meta_cmd_t *c, bool restoring)
{
    switch (c->type) {
    case TN_MC_TOPIC_PUT:
        return topic_put(s, c, restoring);
    case TN_MC_TOPIC_FACTOR:
        return topic_factor(s, c);
    case TN_MC_TOPIC_READY:
        return topic_ready(s, c);
    case TN_MC_TOPIC_DELETE: {
        int rc = 0;
        if (!c->if_created || topic_made_at(s, &c->topic, &rc) != NULL)
            rc = topic_delete(s, c->topic.name);
        if (rc == 0) /* its remote children go with it */
            tn__meta_rchild_drop_parent(&s->remotes, c->topic.name);
        return rc;
    }
    case TN_MC_CHANNEL_PUT:
        return channel_put(s, c);
    case TN_MC_CHANNEL_DELETE:
        return channel_delete(s, c);
    case TN_MC_USER_PUT:
        return user_put(s, c, restoring);
    case TN_MC_USER_DELETE:
        return user_delete(s, c->user.name, c->disown);
    case TN_MC_MEMBER_PUT:
    case TN_MC_MEMBER_REG:
    case TN_MC_MEMBER_REC:
        return member_register(s, &c->member, c->type, restoring);
    case TN_MC_TOPIC_GROW_FOR:
        return topic_grow_for(s, c->topic.name, c->member.id);
    case TN_MC_MEMBER_STATUS:
        return member_status(s, &c->member, restoring);
    case TN_MC_PART_OWNERS:
        /* A snapshot record: as a log entry it is refused. */
        return restoring ? part_owners(s, c) : UV_EINVAL;
    case TN_MC_MEMBER_DRAIN:
        return member_drain(s, &c->member);
    case TN_MC_NOOP:
        return 0;
    case TN_MC_MEMBER_FENCE:
        return member_fence(s, &c->member, restoring);
    case TN_MC_PART_ISR:
    case TN_MC_PART_LEADER:
    case TN_MC_PART_REBALANCE:
    case TN_MC_PART_CORRUPT:
    case TN_MC_PART_STATE:
    case TN_MC_PART_MOVE:
    case TN_MC_MOVE_MARK:
        return part_cmd(s, c, restoring);
    case TN_MC_MOVE_DONE:
        /* A snapshot record: as a log entry it is refused. */
        if (!restoring)
            return UV_EINVAL;
        move_keep(s, &c->move);
        return 0;
    case TN_MC_REMOTE_PUT:
    case TN_MC_REMOTE_DELETE:
    case TN_MC_REMOTE_SALT:
    case TN_MC_REMOTE_CHILD_PUT:
    case TN_MC_REMOTE_CHILD_DELETE:
        if (c->type == TN_MC_REMOTE_CHILD_PUT && c->remote != NULL &&
            tn_meta_topic_find(s, c->remote->child.parent) == NULL)
            return restoring ? TN_ECORRUPT : UV_ENOENT;
        return tn__meta_remotes_apply(&s->remotes, c->type, c->remote, restoring);
    case TN_MC_CLUSTER_REBALANCE:
        return cluster_rebalance(s, c);
    case TN_MC_MEMBER_REMOVE:
        return member_remove(s, c, restoring);
    default:
        return UV_ENOTSUP;
    }
}

/* Whether a command of type t may change who may touch a topic (the
 * access_gen rule, state.h). */
static bool access_cmd(uint8_t t)
{
    return t == TN_MC_TOPIC_PUT || t == TN_MC_TOPIC_DELETE || t == TN_MC_TOPIC_FACTOR ||
           t == TN_MC_TOPIC_GROW_FOR || t == TN_MC_USER_PUT || t == TN_MC_USER_DELETE;
}

int tn_meta_state_apply(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    /* Bumped whatever the answer: a refused command changes nothing, but
     * one more recheck costs little. */
    if (access_cmd(c->type))
        s->access_gen++;
    return apply(s, c, false);
}

/* --- snapshots ------------------------------------------------------------------ */

int tn_meta_state_snapshot(const tn_meta_state_t *s, tn_buf_t *out)
{
    size_t start = tn_buf_size(out);
    unsigned char hdr[SNAP_HDR] = {0};
    static const unsigned char magic[4] = {'T', 'M', 'S', '1'};
    memcpy(hdr, magic, sizeof(magic));
    tn_put_u64(hdr + 8, s->users_version);
    int rc = tn_buf_append(out, hdr, sizeof(hdr));
    uint64_t count = 0;
    tn_meta_cmd_t c;
    for (size_t i = 0; i < s->ntopics && rc == 0; i++) {
        const tn_meta_topic_entry_t *t = s->topics[i];
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_TOPIC_PUT;
        c.topic = t->rec;
        rc = tn_meta_cmd_encode(&c, out);
        count++;
        for (uint32_t k = 0; k < t->nchannels && rc == 0; k++) {
            memset(&c, 0, sizeof(c));
            c.type = TN_MC_CHANNEL_PUT;
            snprintf(c.topic.name, sizeof(c.topic.name), "%s", t->rec.name);
            snprintf(c.channel, sizeof(c.channel), "%s", t->channels[k]);
            c.chan_stamp = t->chstamps[k];
            rc = tn_meta_cmd_encode(&c, out);
            count++;
        }
        if (rc == 0 && count_unassigned(t, 0, t->rec.partitions) < t->rec.partitions) {
            memset(&c, 0, sizeof(c));
            c.type = TN_MC_PART_OWNERS;
            snprintf(c.topic.name, sizeof(c.topic.name), "%s", t->rec.name);
            c.owners = t->owners; /* borrowed: encode only reads it */
            c.nowners = t->rec.partitions;
            rc = tn_meta_cmd_encode(&c, out);
            count++;
        }
        for (uint32_t p = 0; t->pstates != NULL && p < t->rec.partitions && rc == 0; p++) {
            if (t->pstates[p].nreplicas == 0)
                continue;
            memset(&c, 0, sizeof(c));
            c.type = TN_MC_PART_STATE;
            snprintf(c.topic.name, sizeof(c.topic.name), "%s", t->rec.name);
            c.part = p;
            c.pstate = t->pstates[p];
            rc = tn_meta_cmd_encode(&c, out);
            count++;
        }
    }
    for (size_t i = 0; i < s->nusers && rc == 0; i++) {
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_USER_PUT;
        c.user = *s->users[i]; /* borrowed grants: encode only reads them */
        rc = tn_meta_cmd_encode(&c, out);
        count++;
    }
    for (size_t i = 0; i < s->nmembers && rc == 0; i++) {
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_MEMBER_REC;
        c.member = s->members[i];
        rc = tn_meta_cmd_encode(&c, out);
        count++;
        if (rc == 0 && s->members[i].status != TN_MEMBER_ALIVE) {
            c.type = TN_MC_MEMBER_STATUS;
            rc = tn_meta_cmd_encode(&c, out);
            count++;
        }
        if (rc == 0 && s->members[i].draining) {
            c.type = TN_MC_MEMBER_DRAIN;
            rc = tn_meta_cmd_encode(&c, out);
            count++;
        }
        if (rc == 0 && s->members[i].fenced) {
            c.type = TN_MC_MEMBER_FENCE;
            rc = tn_meta_cmd_encode(&c, out);
            count++;
        }
    }
    for (size_t i = 0; i < s->nremoved && rc == 0; i++) {
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_MEMBER_REMOVE;
        c.member.id = s->removed[i].id;
        c.member.incarnation = s->removed[i].incarnation;
        c.removed_ms = s->removed[i].removed_ms;
        rc = tn_meta_cmd_encode(&c, out);
        count++;
    }
    for (size_t k = s->nmoves; k > 0 && rc == 0; k--) {
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_MOVE_DONE;
        c.move = *tn_meta_state_move_done(s, k - 1);
        rc = tn_meta_cmd_encode(&c, out);
        count++;
    }
    if (rc == 0)
        rc = tn__meta_remotes_snapshot(&s->remotes, out, &count);
    if (rc == 0 && s->rebal.wanted) {
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_CLUSTER_REBALANCE;
        c.rebal = s->rebal;
        rc = tn_meta_cmd_encode(&c, out);
        count++;
    }
    if (rc != 0) {
        out->len = out->off + start;
        return rc;
    }
    tn_put_u64((unsigned char *)tn_buf_data(out) + start + 16, count);
    return 0;
}

/* After a restore: each topic's child count, from the links its children
 * name. A child whose parent is not in the snapshot (one written before
 * deleting a parent detached its children) stands alone, as it would had
 * the delete been applied now. */
static void settle_children(tn_meta_state_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++) {
        tn_meta_topic_t *rec = &s->topics[i]->rec;
        if (rec->parent[0] == '\0')
            continue;
        bool found;
        size_t k = tn__meta_search((void *const *)s->topics, s->ntopics, rec->parent,
                                   TOPIC_NAME_OFF, &found);
        if (found && k != i)
            s->topics[k]->nchildren++;
        else
            unlink_child(rec);
    }
}

int tn_meta_state_restore(tn_meta_state_t *s, const void *buf, size_t len)
{
    const unsigned char *b = buf;
    if (len < SNAP_HDR || memcmp(b, SNAP_MAGIC, 3) != 0)
        return TN_ECORRUPT;
    if (b[3] != '1')
        return UV_ENOTSUP;
    if (tn_get_u32(b + 4) != 0)
        return TN_ECORRUPT;
    uint64_t users_version = tn_get_u64(b + 8);
    uint64_t count = tn_get_u64(b + 16);
    tn_meta_state_t fresh;
    tn_meta_state_init(&fresh);
    size_t at = SNAP_HDR;
    int rc = 0;
    for (uint64_t i = 0; i < count && rc == 0; i++) {
        tn_meta_cmd_t c;
        size_t used;
        rc = tn_meta_cmd_decode(b + at, len - at, &c, &used);
        if (rc == TN_ESHORT)
            rc = TN_ECORRUPT;
        if (rc != 0)
            break;
        if (c.type != TN_MC_TOPIC_PUT && c.type != TN_MC_CHANNEL_PUT && c.type != TN_MC_USER_PUT &&
            c.type != TN_MC_MEMBER_PUT && c.type != TN_MC_MEMBER_DRAIN &&
            c.type != TN_MC_MEMBER_REG && c.type != TN_MC_MEMBER_REC &&
            c.type != TN_MC_MEMBER_STATUS && c.type != TN_MC_PART_OWNERS &&
            c.type != TN_MC_PART_STATE && c.type != TN_MC_MEMBER_FENCE &&
            c.type != TN_MC_MOVE_DONE && c.type != TN_MC_REMOTE_PUT &&
            c.type != TN_MC_REMOTE_SALT && c.type != TN_MC_REMOTE_CHILD_PUT &&
            c.type != TN_MC_MEMBER_REMOVE && (c.type != TN_MC_CLUSTER_REBALANCE || !c.rebal.wanted))
            rc = TN_ECORRUPT;
        if (rc == 0) {
            c.if_absent = true; /* a snapshot names each record once */
            rc = apply(&fresh, &c, true);
            if (rc == UV_EEXIST || rc == TN_ENOTFOUND || rc == UV_EBUSY)
                rc = TN_ECORRUPT;
        }
        tn_meta_cmd_fini(&c);
        at += used;
    }
    if (rc == 0 && at != len)
        rc = TN_ECORRUPT;
    if (rc != 0) {
        tn_meta_state_fini(&fresh);
        return rc;
    }
    settle_children(&fresh);
    fresh.users_version = users_version;
    fresh.access_gen = s->access_gen + 1;
    fresh.pstate_cb = s->pstate_cb;
    fresh.pstate_arg = s->pstate_arg;
    tn_meta_state_fini(s);
    *s = fresh;
    return 0;
}
