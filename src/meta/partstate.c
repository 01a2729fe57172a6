/* The controller's rules over a replicated partition's state: see the
 * DESIGN comment in partstate.h. Everything here is a pure function of its
 * arguments. */
#include "core/platform.h"

#include "meta/partstate.h"

#include "core/err.h"

#include <string.h>

int tn_pstate_isr_find(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nisr; i++)
        if (ps->isr[i].node == node)
            return (int)i;
    return -1;
}

static const tn_pstate_node_t *node_find(const tn_pstate_nodes_t *nodes, uint32_t id)
{
    for (size_t i = 0; i < nodes->n; i++)
        if (nodes->v[i].id == id)
            return &nodes->v[i];
    return NULL;
}

static int replica_index(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == node)
            return (int)i;
    return -1;
}

static void set_remove(tn_pstate_member_t *v, uint32_t *n, uint32_t i)
{
    memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof(v[0]));
    (*n)--;
}

static int set_find(const tn_pstate_member_t *v, uint32_t n, uint32_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i].node == node)
            return (int)i;
    return -1;
}

static bool current(const tn_pstate_nodes_t *nodes, const tn_pstate_member_t *m)
{
    const tn_pstate_node_t *nd = node_find(nodes, m->node);
    return nd != NULL && nd->incarnation == m->incarnation;
}

/* m left the ISR: it joins the ELR when the ISR is now below min_insync
 * (the hw is frozen, so m holds everything below it). */
static void left_isr(tn_pstate_t *ps, const tn_pstate_member_t *m, const tn_pstate_nodes_t *nodes)
{
    int ri = replica_index(ps, m->node);
    if (ps->nisr >= ps->min_insync || !current(nodes, m) || (ri >= 0 && (ps->corrupt & (1u << ri))))
        return;
    if (set_find(ps->elr, ps->nelr, m->node) < 0 && ps->nelr < TN_PSTATE_MAX_REPLICAS)
        ps->elr[ps->nelr++] = *m;
}

int tn_pstate_create(tn_pstate_t *ps, const uint32_t *replicas, uint32_t n, uint32_t min_insync,
                     const tn_pstate_nodes_t *nodes, char *err, size_t errlen)
{
    if (n == 0 || n > TN_PSTATE_MAX_REPLICAS) {
        tn_errbuf(err, errlen, "a partition needs 1 to %d replicas, not %u", TN_PSTATE_MAX_REPLICAS,
                  n);
        return UV_EINVAL;
    }
    if (min_insync == 0 || min_insync > n) {
        tn_errbuf(err, errlen, "min_insync_replicas %u outside 1..%u", min_insync, n);
        return UV_EINVAL;
    }
    memset(ps, 0, sizeof(*ps));
    ps->min_insync = min_insync;
    for (uint32_t i = 0; i < n; i++) {
        const tn_pstate_node_t *nd = node_find(nodes, replicas[i]);
        if (replicas[i] == TN_PSTATE_NONE || nd == NULL) {
            tn_errbuf(err, errlen, "replica %u is not a known member", replicas[i]);
            return UV_EINVAL;
        }
        if (replica_index(ps, replicas[i]) >= 0) {
            tn_errbuf(err, errlen, "replica %u is listed twice", replicas[i]);
            return UV_EINVAL;
        }
        ps->replicas[ps->nreplicas++] = replicas[i];
        ps->isr[ps->nisr].node = replicas[i];
        ps->isr[ps->nisr].incarnation = nd->incarnation;
        ps->nisr++;
    }
    ps->leader_epoch = 1;
    ps->partition_epoch = 1;
    ps->leader = TN_PSTATE_NONE;
    for (uint32_t i = 0; i < ps->nreplicas; i++) {
        if (tn_pstate_eligible(ps, &ps->isr[i], nodes, TN_PSTATE_NONE)) {
            ps->leader = ps->isr[i].node;
            break;
        }
    }
    return 0;
}

bool tn_pstate_eligible(const tn_pstate_t *ps, const tn_pstate_member_t *m,
                        const tn_pstate_nodes_t *nodes, uint32_t except)
{
    if (m->node == except)
        return false;
    const tn_pstate_node_t *nd = node_find(nodes, m->node);
    if (nd == NULL || !nd->live || nd->incarnation != m->incarnation)
        return false;
    int ri = replica_index(ps, m->node);
    return ri >= 0 && !(ps->corrupt & (1u << ri));
}

/* The first eligible ISR member in replicas order (not except), else the
 * first eligible ELR member, which moves to the ISR; or NONE. */
static uint32_t first_eligible(tn_pstate_t *ps, const tn_pstate_nodes_t *nodes, uint32_t except)
{
    for (uint32_t r = 0; r < ps->nreplicas; r++) {
        int i = tn_pstate_isr_find(ps, ps->replicas[r]);
        if (i >= 0 && tn_pstate_eligible(ps, &ps->isr[i], nodes, except))
            return ps->replicas[r];
    }
    for (uint32_t r = 0; r < ps->nreplicas; r++) {
        int i = set_find(ps->elr, ps->nelr, ps->replicas[r]);
        if (i >= 0 && tn_pstate_eligible(ps, &ps->elr[i], nodes, except)) {
            if (ps->nisr < TN_PSTATE_MAX_REPLICAS)
                ps->isr[ps->nisr++] = ps->elr[i];
            set_remove(ps->elr, &ps->nelr, (uint32_t)i);
            return ps->replicas[r];
        }
    }
    return TN_PSTATE_NONE;
}

/* A new leader (NONE: offline). The epoch moves whenever the leader does,
 * and also when an offline partition gets one. */
static void set_leader(tn_pstate_t *ps, uint32_t leader)
{
    if (leader != ps->leader) {
        ps->leader = leader;
        ps->leader_epoch++;
        ps->unclean = false;
    }
}

bool tn_pstate_fence(tn_pstate_t *ps, uint32_t node, uint64_t incarnation,
                     const tn_pstate_nodes_t *nodes)
{
    if (replica_index(ps, node) < 0)
        return false;
    bool changed = false;
    /* Entries of a stale incarnation (a wiped disk) vouch for data that is
     * gone: they go too, and never to the ELR. */
    for (int pass = 0; pass < 2; pass++) { /* the stale ones first: they never count */
        for (uint32_t k = 0; k < ps->nisr;) {
            tn_pstate_member_t m = ps->isr[k];
            bool fenced = m.node == node && (incarnation == 0 || m.incarnation == incarnation);
            if (pass == 0 ? !current(nodes, &m) && !fenced : fenced) {
                set_remove(ps->isr, &ps->nisr, k);
                if (fenced)
                    left_isr(ps, &m, nodes);
                changed = true;
            } else {
                k++;
            }
        }
    }
    for (uint32_t k = 0; k < ps->nelr;) {
        if (!current(nodes, &ps->elr[k])) {
            set_remove(ps->elr, &ps->nelr, k);
            changed = true;
        } else {
            k++;
        }
    }
    if (ps->leader == node) {
        set_leader(ps, first_eligible(ps, nodes, node));
        changed = true;
    }
    if (changed)
        ps->partition_epoch++;
    return changed;
}

bool tn_pstate_elect(tn_pstate_t *ps, const tn_pstate_nodes_t *nodes)
{
    if (ps->leader != TN_PSTATE_NONE)
        return false;
    uint32_t l = first_eligible(ps, nodes, TN_PSTATE_NONE);
    if (l == TN_PSTATE_NONE)
        return false;
    set_leader(ps, l);
    ps->partition_epoch++;
    return true;
}

int tn_pstate_alter_isr(tn_pstate_t *ps, uint32_t proposer, uint32_t leader_epoch,
                        uint32_t expected_pe, const tn_pstate_member_t *isr, uint32_t n,
                        const tn_pstate_nodes_t *nodes, char *err, size_t errlen)
{
    return tn_pstate_alter_isr_ex(ps, proposer, leader_epoch, expected_pe, isr, n, true, nodes, err,
                                  errlen);
}

int tn_pstate_alter_isr_ex(tn_pstate_t *ps, uint32_t proposer, uint32_t leader_epoch,
                           uint32_t expected_pe, const tn_pstate_member_t *isr, uint32_t n,
                           bool channels_checked, const tn_pstate_nodes_t *nodes, char *err,
                           size_t errlen)
{
    if (expected_pe != ps->partition_epoch) {
        tn_errbuf(err, errlen, "partition epoch %u is stale (now %u)", expected_pe,
                  ps->partition_epoch);
        return TN_ECHANGED;
    }
    if (proposer != ps->leader || leader_epoch != ps->leader_epoch) {
        tn_errbuf(err, errlen, "node %u in leader epoch %u is not the leader (node %u, epoch %u)",
                  proposer, leader_epoch, ps->leader, ps->leader_epoch);
        return TN_ECHANGED;
    }
    if (n == 0 || n > ps->nreplicas) {
        tn_errbuf(err, errlen, "an ISR of %u members for %u replicas", n, ps->nreplicas);
        return UV_EINVAL;
    }
    bool has_leader = false;
    uint32_t repaired = 0;
    for (uint32_t k = 0; k < n; k++) {
        int ri = replica_index(ps, isr[k].node);
        if (ri < 0) {
            tn_errbuf(err, errlen, "ISR member %u is not a replica", isr[k].node);
            return UV_EINVAL;
        }
        for (uint32_t j = 0; j < k; j++) {
            if (isr[j].node == isr[k].node) {
                tn_errbuf(err, errlen, "ISR member %u is listed twice", isr[k].node);
                return UV_EINVAL;
            }
        }
        has_leader |= isr[k].node == ps->leader;
        int cur = tn_pstate_isr_find(ps, isr[k].node);
        if (cur >= 0 && ps->isr[cur].incarnation == isr[k].incarnation)
            continue; /* kept as it is */
        const tn_pstate_node_t *nd = node_find(nodes, isr[k].node);
        if (nd == NULL || nd->incarnation != isr[k].incarnation) {
            tn_errbuf(err, errlen, "member %u incarnation %016llx is not its current one",
                      isr[k].node, (unsigned long long)isr[k].incarnation);
            return UV_EPERM;
        }
        if (!nd->live) {
            tn_errbuf(err, errlen, "member %u has no live session", isr[k].node);
            return UV_EPERM;
        }
        if (!channels_checked) {
            tn_errbuf(err, errlen, "member %u is added without its channel state checked caught up",
                      isr[k].node);
            return UV_EPERM;
        }
        repaired |= 1u << ri;
    }
    if (!has_leader) {
        tn_errbuf(err, errlen, "the ISR must hold its leader %u", ps->leader);
        return UV_EINVAL;
    }
    tn_pstate_member_t old[TN_PSTATE_MAX_REPLICAS];
    uint32_t nold = ps->nisr;
    memcpy(old, ps->isr, nold * sizeof(old[0]));
    memcpy(ps->isr, isr, n * sizeof(*isr));
    ps->nisr = n;
    ps->corrupt &= ~repaired;
    if (n >= ps->min_insync) {
        ps->nelr = 0; /* the hw moves again: the ELR falls behind */
    } else {
        for (uint32_t k = 0; k < n; k++) {
            int e = set_find(ps->elr, ps->nelr, isr[k].node);
            if (e >= 0)
                set_remove(ps->elr, &ps->nelr, (uint32_t)e);
        }
        for (uint32_t k = 0; k < nold; k++)
            if (set_find(isr, n, old[k].node) < 0)
                left_isr(ps, &old[k], nodes);
    }
    ps->partition_epoch++;
    return 0;
}

int tn_pstate_force_leader(tn_pstate_t *ps, uint32_t node, bool unclean,
                           const tn_pstate_nodes_t *nodes, char *err, size_t errlen)
{
    if (replica_index(ps, node) < 0) {
        tn_errbuf(err, errlen, "node %u is not a replica", node);
        return UV_EINVAL;
    }
    const tn_pstate_node_t *nd = node_find(nodes, node);
    if (nd == NULL || !nd->live) {
        tn_errbuf(err, errlen, "node %u has no live session", node);
        return UV_EPERM;
    }
    int i = tn_pstate_isr_find(ps, node);
    if (i >= 0 && tn_pstate_eligible(ps, &ps->isr[i], nodes, TN_PSTATE_NONE)) {
        if (ps->leader != node) {
            set_leader(ps, node);
            ps->partition_epoch++;
        }
        return 0;
    }
    if (!unclean) {
        tn_errbuf(err, errlen,
                  "node %u is not an eligible in-sync replica; only an unclean election "
                  "may choose it",
                  node);
        return UV_EPERM;
    }
    ps->isr[0].node = node;
    ps->isr[0].incarnation = nd->incarnation;
    ps->nisr = 1;
    ps->nelr = 0;
    ps->corrupt &= ~(1u << replica_index(ps, node));
    ps->leader = node;
    ps->leader_epoch++;
    ps->partition_epoch++;
    ps->unclean = true;
    return 0;
}

bool tn_pstate_preferred_ready(const tn_pstate_t *ps, const tn_pstate_nodes_t *nodes)
{
    if (ps->nreplicas == 0 || ps->leader == ps->replicas[0])
        return false;
    int i = tn_pstate_isr_find(ps, ps->replicas[0]);
    return i >= 0 && tn_pstate_eligible(ps, &ps->isr[i], nodes, TN_PSTATE_NONE);
}

int tn_pstate_rebalance(tn_pstate_t *ps, const tn_pstate_nodes_t *nodes)
{
    if (!tn_pstate_preferred_ready(ps, nodes))
        return UV_EAGAIN;
    set_leader(ps, ps->replicas[0]);
    ps->partition_epoch++;
    return 0;
}

bool tn_pstate_mark_corrupt(tn_pstate_t *ps, uint32_t node, const tn_pstate_nodes_t *nodes)
{
    int ri = replica_index(ps, node);
    if (ri < 0)
        return false;
    bool changed = !(ps->corrupt & (1u << ri));
    ps->corrupt |= 1u << ri;
    int i = tn_pstate_isr_find(ps, node);
    if (i >= 0) {
        set_remove(ps->isr, &ps->nisr, (uint32_t)i);
        changed = true;
    }
    i = set_find(ps->elr, ps->nelr, node);
    if (i >= 0) {
        set_remove(ps->elr, &ps->nelr, (uint32_t)i);
        changed = true;
    }
    if (ps->leader == node) {
        set_leader(ps, first_eligible(ps, nodes, node));
        changed = true;
    }
    if (changed)
        ps->partition_epoch++;
    return changed;
}

/* --- reassignment (rules 6 to 8) ------------------------------------------------- */

static bool list_has(const uint32_t *v, uint32_t n, uint32_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == node)
            return true;
    return false;
}

/* replicas becomes v[0..n), the CRC marks following their members. */
static void set_replicas(tn_pstate_t *ps, const uint32_t *v, uint32_t n)
{
    uint32_t corrupt = 0;
    for (uint32_t i = 0; i < n; i++) {
        int ri = replica_index(ps, v[i]);
        if (ri >= 0 && (ps->corrupt & (1u << ri)))
            corrupt |= 1u << i;
    }
    uint32_t copy[TN_PSTATE_MAX_REPLICAS];
    memcpy(copy, v, n * sizeof(*v));
    memcpy(ps->replicas, copy, n * sizeof(*v));
    ps->nreplicas = n;
    ps->corrupt = corrupt;
}

/* The ISR and ELR keep the members of keep[0..n) only. */
static void sets_keep(tn_pstate_t *ps, const uint32_t *keep, uint32_t n)
{
    for (uint32_t k = 0; k < ps->nisr;) {
        if (list_has(keep, n, ps->isr[k].node))
            k++;
        else
            set_remove(ps->isr, &ps->nisr, k);
    }
    for (uint32_t k = 0; k < ps->nelr;) {
        if (list_has(keep, n, ps->elr[k].node))
            k++;
        else
            set_remove(ps->elr, &ps->nelr, k);
    }
}

/* The first ISR member in list order that is eligible, or NONE. */
static uint32_t first_eligible_of(const tn_pstate_t *ps, const uint32_t *list, uint32_t n,
                                  const tn_pstate_nodes_t *nodes)
{
    for (uint32_t k = 0; k < n; k++) {
        int i = tn_pstate_isr_find(ps, list[k]);
        if (i >= 0 && tn_pstate_eligible(ps, &ps->isr[i], nodes, TN_PSTATE_NONE))
            return list[k];
    }
    return TN_PSTATE_NONE;
}

static void move_clear(tn_pstate_t *ps)
{
    ps->ntarget = 0;
    ps->nold = 0;
    memset(ps->target, 0, sizeof(ps->target));
    memset(ps->old, 0, sizeof(ps->old));
    ps->move_id = 0;
    ps->move_started_ms = 0;
    ps->nmark = 0;
    memset(ps->mark, 0, sizeof(ps->mark));
}

int tn_pstate_move_begin(tn_pstate_t *ps, const uint32_t *target, uint32_t n, uint64_t id,
                         int64_t started_ms, const tn_pstate_nodes_t *nodes, char *err,
                         size_t errlen)
{
    if (ps->ntarget > 0) {
        tn_errbuf(err, errlen, "a move of this partition is under way (id %016llx)",
                  (unsigned long long)ps->move_id);
        return UV_EBUSY;
    }
    if (id == 0) {
        tn_errbuf(err, errlen, "a move needs an id");
        return UV_EINVAL;
    }
    if (n == 0) {
        tn_errbuf(err, errlen, "the target replica list is empty");
        return UV_EINVAL;
    }
    if (n > TN_PSTATE_MAX_REPLICAS) {
        tn_errbuf(err, errlen, "a partition has at most %d replicas, not %u",
                  TN_PSTATE_MAX_REPLICAS, n);
        return UV_EINVAL;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (list_has(target, i, target[i])) {
            tn_errbuf(err, errlen, "member %u is listed twice", target[i]);
            return UV_EINVAL;
        }
        const tn_pstate_node_t *nd = node_find(nodes, target[i]);
        if (target[i] == TN_PSTATE_NONE || nd == NULL) {
            tn_errbuf(err, errlen, "member %u is not a known member", target[i]);
            return UV_EINVAL;
        }
        if (!nd->live) {
            tn_errbuf(err, errlen, "member %u has no live session", target[i]);
            return UV_EINVAL;
        }
    }
    if (n < ps->min_insync) {
        tn_errbuf(err, errlen, "%u replicas are fewer than min_insync_replicas %u", n,
                  ps->min_insync);
        return UV_EINVAL;
    }
    if (n == ps->nreplicas && memcmp(target, ps->replicas, n * sizeof(*target)) == 0) {
        tn_errbuf(err, errlen, "the partition has these replicas already");
        return UV_EINVAL;
    }
    uint32_t all[2 * TN_PSTATE_MAX_REPLICAS];
    uint32_t nall = n;
    memcpy(all, target, n * sizeof(*target));
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (!list_has(target, n, ps->replicas[i]))
            all[nall++] = ps->replicas[i];
    if (nall > TN_PSTATE_MAX_REPLICAS) {
        tn_errbuf(err, errlen,
                  "the target and the replicas it replaces make %u members during the move, "
                  "more than %d",
                  nall, TN_PSTATE_MAX_REPLICAS);
        return UV_EINVAL;
    }
    ps->nold = ps->nreplicas;
    memcpy(ps->old, ps->replicas, ps->nreplicas * sizeof(ps->old[0]));
    ps->ntarget = n;
    memcpy(ps->target, target, n * sizeof(*target));
    ps->move_id = id;
    ps->move_started_ms = started_ms;
    ps->nmark = 0;
    memset(ps->mark, 0, sizeof(ps->mark));
    set_replicas(ps, all, nall);
    ps->partition_epoch++;
    return 0;
}

int tn_pstate_move_mark(tn_pstate_t *ps, uint64_t id, const tn_pstate_mark_t *mark, uint32_t n)
{
    if (ps->ntarget == 0 || id == 0 || ps->move_id != id)
        return TN_ENOTFOUND;
    if (n > TN_PSTATE_MAX_REPLICAS)
        return UV_EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        if (mark[i].ms < 0 || !list_has(ps->target, ps->ntarget, mark[i].node))
            return UV_EINVAL;
        for (uint32_t k = 0; k < i; k++)
            if (mark[k].node == mark[i].node)
                return UV_EINVAL;
    }
    ps->nmark = n;
    memset(ps->mark, 0, sizeof(ps->mark));
    if (n > 0)
        memcpy(ps->mark, mark, n * sizeof(*mark));
    return 0;
}

const tn_pstate_mark_t *tn_pstate_mark_find(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; ps->ntarget > 0 && i < ps->nmark && i < TN_PSTATE_MAX_REPLICAS; i++)
        if (ps->mark[i].node == node)
            return &ps->mark[i];
    return NULL;
}

bool tn_pstate_move_ready(const tn_pstate_t *ps)
{
    if (ps->ntarget == 0)
        return false;
    for (uint32_t i = 0; i < ps->ntarget; i++)
        if (tn_pstate_isr_find(ps, ps->target[i]) < 0)
            return false;
    return true;
}

uint32_t tn_pstate_move_blocked(const tn_pstate_t *ps, const uint32_t *gone, size_t ngone)
{
    for (uint32_t i = 0; i < ps->ntarget; i++) {
        if (tn_pstate_isr_find(ps, ps->target[i]) >= 0)
            continue;
        for (size_t j = 0; j < ngone; j++)
            if (gone[j] == ps->target[i])
                return ps->target[i];
    }
    return TN_PSTATE_NONE;
}

static int move_named(const tn_pstate_t *ps, uint64_t id, char *err, size_t errlen)
{
    if (ps->ntarget == 0 || ps->move_id != id) {
        tn_errbuf(err, errlen, "no move %016llx is under way for this partition",
                  (unsigned long long)id);
        return TN_ENOTFOUND;
    }
    return 0;
}

/* The end of a move (complete: list is ps->target; abort: ps->old), led
 * by leader: the replicas become list, the ISR and ELR keep only its
 * members (the ELR empties once the ISR holds min_insync), the move's
 * fields clear and the partition epoch moves. */
static void move_end(tn_pstate_t *ps, const uint32_t *list, uint32_t n, uint32_t leader)
{
    uint32_t keep[TN_PSTATE_MAX_REPLICAS]; /* list is ps's own, which this changes */
    memcpy(keep, list, n * sizeof(*keep));
    set_leader(ps, leader);
    set_replicas(ps, keep, n);
    sets_keep(ps, keep, n);
    if (ps->nisr >= ps->min_insync)
        ps->nelr = 0;
    move_clear(ps);
    ps->partition_epoch++;
}

int tn_pstate_move_complete(tn_pstate_t *ps, uint64_t id, const tn_pstate_nodes_t *nodes, char *err,
                            size_t errlen)
{
    int rc = move_named(ps, id, err, errlen);
    if (rc != 0)
        return rc;
    if (!tn_pstate_move_ready(ps)) {
        tn_errbuf(err, errlen, "not every target replica is in sync yet");
        return UV_EAGAIN;
    }
    uint32_t leader = ps->leader;
    if (!list_has(ps->target, ps->ntarget, leader)) {
        leader = first_eligible_of(ps, ps->target, ps->ntarget, nodes);
        if (leader == TN_PSTATE_NONE) {
            tn_errbuf(err, errlen, "no target replica may lead now");
            return UV_EAGAIN;
        }
    }
    move_end(ps, ps->target, ps->ntarget, leader);
    return 0;
}

/* The copies an election may choose (ISR and ELR members of their current
 * incarnation: each holds every record below the hw) in *all, and how many
 * of them list[0..n) holds in *kept. */
static void copies_held(const tn_pstate_t *ps, const uint32_t *list, uint32_t n,
                        const tn_pstate_nodes_t *nodes, uint32_t *all, uint32_t *kept)
{
    *all = *kept = 0;
    for (uint32_t k = 0; k < ps->nisr + ps->nelr; k++) {
        const tn_pstate_member_t *m = k < ps->nisr ? &ps->isr[k] : &ps->elr[k - ps->nisr];
        if (!current(nodes, m))
            continue;
        (*all)++;
        *kept += list_has(list, n, m->node);
    }
}

int tn_pstate_move_abort(tn_pstate_t *ps, uint64_t id, const tn_pstate_nodes_t *nodes, char *err,
                         size_t errlen)
{
    return tn_pstate_move_abort_ex(ps, id, true, nodes, err, errlen);
}

int tn_pstate_move_abort_ex(tn_pstate_t *ps, uint64_t id, bool keep_copies,
                            const tn_pstate_nodes_t *nodes, char *err, size_t errlen)
{
    int rc = move_named(ps, id, err, errlen);
    if (rc != 0)
        return rc;
    /* The target members it drops may hold copies of the acknowledged
     * records the old ones lack (an old member out of the ISR, a target
     * member in it or in the ELR): the abort must leave as many copies as
     * min_insync asks (or as there are, if fewer), else it would lose
     * what a single fault more could not, or leave no member to elect. */
    uint32_t all, kept;
    copies_held(ps, ps->old, ps->nold, nodes, &all, &kept);
    if (keep_copies && kept < TN_MIN(all, ps->min_insync)) {
        tn_errbuf(err, errlen,
                  "the old replicas hold %u of the %u copies an election may choose (min_insync "
                  "%u): the abort would drop the others; it can once the old replicas catch up",
                  kept, all, ps->min_insync);
        return UV_EPERM;
    }
    uint32_t leader = ps->leader;
    if (leader != TN_PSTATE_NONE && !list_has(ps->old, ps->nold, leader)) {
        leader = first_eligible_of(ps, ps->old, ps->nold, nodes);
        if (leader == TN_PSTATE_NONE) {
            tn_errbuf(err, errlen,
                      "no replica of the old list is an eligible in-sync replica: none could "
                      "lead if the move were aborted");
            return UV_EPERM;
        }
    }
    move_end(ps, ps->old, ps->nold, leader);
    return 0;
}
