/* A rebalance of the replicas over the members (issue 24; docs/cluster.md
 * "Rebalancing the members"), the pure part the metastore leader and the
 * POST /v1/cluster/rebalance handler share: the planner's input read from
 * the metastore state, the moves under way that touch each member, and
 * which changes of a plan may begin now under max-moves-per-node. No I/O,
 * no clock: meta.c proposes what these say, so a simulation or a unit test
 * gets the same answers from the same state.
 *
 * DESIGN: a rebalance, step by step (the driver is meta.c's check_spread).
 *   1. Asked: POST /v1/cluster/rebalance, or, with auto-rebalance on, the
 *      metastore leader when a member joins (a new id registers, or a
 *      member marked dead registers again) holding at least two replicas
 *      fewer than the most loaded alive, non-draining member.
 *      Either proposes CLUSTER_REBALANCE wanted (if none is): the state
 *      then says a rebalance is under way, so whichever member leads the
 *      metastore drives it, a new leader after a change too.
 *   2. Every scan, while one is wanted and no decommission, self-healing or
 *      factor change (meta.c check_factor)
 *      has a move left to begin (those go first), the leader plans over
 *      the state as it will be once the moves under way are done
 *      (tn_meta_rebal_in_init: a moving partition counts with its target)
 *      with the planner's rebalance rule (meta/placement.h), and begins,
 *      one PART_MOVE at a time, the first change that tn_meta_rebal_take
 *      allows: a partition with no move under way; every member of its new
 *      list alive; for a change that copies replicas, every member it takes
 *      a replica off or puts one on touched by fewer than
 *      max-moves-per-node moves under way. A reorder of the preferred
 *      leaders is a PART_MOVE to the same members in a new order: nothing
 *      is copied, it completes as soon as every member is in the ISR, and
 *      the preferred-leader rebalance (leader-rebalance-delay) then moves
 *      leadership to the new first member.
 *   3. When the plan has nothing left that may begin and no move is under
 *      way, the leader proposes CLUSTER_REBALANCE over, with the id it
 *      was asked with (a newer rebalance is never ended by it). Changes
 *      that could not begin (a member of the new list not alive) are
 *      logged; POST again once it is back.
 * Invariants: a member is never touched by more than max-moves-per-node
 * replica-copying moves begun by a rebalance, a decommission or
 * self-healing (each counts the others' moves under way); a draining or
 * dead member never receives a replica and never gives one up to a
 * rebalance (the planner's eligibility). */
#ifndef TN_META_REBALANCE_H
#define TN_META_REBALANCE_H

#include "core/platform.h"

#include "meta/placement.h"
#include "meta/state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The default of max-moves-per-node: replica-copying moves under way that
 * may touch one member (as the member giving up a replica or the one
 * receiving it). */
#define TN_META_MOVES_PER_NODE 2

/* The planner's view of a metastore state. */
typedef struct {
    tn_place_member_t *members; /* owned; the state's members, in its (id) order */
    uint32_t *busy;             /* owned; per members[i]: replica-copying moves under way
                                   that take a replica off it or put one on it */
    size_t nmembers;
    tn_place_part_t *parts; /* owned; every placed partition (factor 1 too), its list as it
                               will be (a move's target while one runs) */
    const tn_meta_topic_entry_t **topics; /* owned array; the entries borrowed from the state
                                             (valid until its next apply): parts[i]'s topic */
    bool *moving;                         /* owned; parts[i] has a move under way */
    size_t nparts, cap;
    size_t nmoving; /* moves under way, reorders included */
} tn_meta_rebal_in_t;

/* Read state s (borrowed for the call; in->topics points into it) into in:
 * every placed partition, factor-1 ones that never moved included (no
 * partition state: their owner is their list; a move makes them a
 * one-replica replicated partition, state.h tn_meta_state_move_from), so a
 * decommission moves them off its member and a rebalance spreads them like
 * any replica. Partitions whose list names a member s does not know are
 * left out. 0 or UV_ENOMEM (in is then empty). Any thread that owns s. */
int tn_meta_rebal_in_init(tn_meta_rebal_in_t *in, const tn_meta_state_t *s);
void tn_meta_rebal_in_fini(tn_meta_rebal_in_t *in);

/* in as the planner's input (borrowing in's arrays). */
tn_place_in_t tn_meta_rebal_place_in(const tn_meta_rebal_in_t *in);

/* The index of member id in in->members, or -1. */
int tn_meta_rebal_member(const tn_meta_rebal_in_t *in, uint32_t id);

/* Whether change ch of a plan over in may begin now (DESIGN step 2):
 * false when its partition is moving, when its new list names a member
 * that is not alive (*blocked set), or when a member it takes a replica
 * off or puts one on already has cap moves under way touching it (cap 0:
 * no cap). true counts the change in in->busy, so the next call sees it. */
bool tn_meta_rebal_take(tn_meta_rebal_in_t *in, const tn_place_change_t *ch, uint32_t cap,
                        bool *blocked);

/* The rebalance plan of s now, over in (made by the caller from s): the
 * planner's rebalance rule, uncapped. 0, or an error with err filled
 * (tn_place_rebalance's). */
int tn_meta_rebal_plan(const tn_meta_rebal_in_t *in, tn_place_plan_t *plan, char *err,
                       size_t errlen);

/* The factor plan of s now, over in (made by the caller from s): the
 * planner's factor rule (placement.h rule 4) with each partition's topic's
 * replication_factor as its wanted count, uncapped; a partition whose list
 * has that many already is left as it is. 0, or an error with err filled. */
int tn_meta_factor_plan(const tn_meta_rebal_in_t *in, tn_place_plan_t *plan, char *err,
                        size_t errlen);

#endif
