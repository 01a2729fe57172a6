/* The planning decisions of partition moves (issue 24): which replica
 * lists to ask for when a member is decommissioned, when a dead member's
 * replicas are re-created elsewhere (self-healing), and when replicas and
 * preferred leaders are spread again over the members (rebalance). Pure
 * functions over plain arrays: no I/O, no clock, and no allocation but the
 * plan they fill (owned by the plan, freed by tn_place_plan_fini) and
 * scratch freed before they return, so the metastore leader and a
 * simulation get the same plan from the same input.
 *
 * Decommission, self-healing (meta.c check_decommission), the factor
 * (meta.c check_factor) and rebalance (meta.c check_spread,
 * meta/rebalance.h) run these on the metastore leader and begin
 * PART_MOVEs with the changes.
 *
 * Where this must agree with the placement at creation (meta/state.c,
 * place()/place_replicated()): both treat replicas[0] as the preferred
 * leader, both write lists of distinct member ids, and both give new
 * replicas only to alive members. state.c has no notion of load: it places
 * partition p of a new topic on the eligible members by position (index
 * p mod n, wrapping), which spreads a topic's replicas and preferred
 * leaders evenly by itself; it also passes over the members on the
 * command's skip list, which the metastore leader fills with the members
 * it has not heard from lately and the draining ones (while enough others
 * are left for the factor: meta.c stamp_skip). The load here is tn_place_loads' (replicas held,
 * preferred leaderships held, per member); placement at creation, if it ever weighs load, must use
 * the same function so a create and a rebalance agree on what "least loaded" means.
 *
 * DESIGN: the rules.
 *   Eligible member: alive and not draining. Only an eligible member ever
 *   receives a replica, and a partition never holds a member twice.
 *   Load order: a member is less loaded than another when it holds fewer
 *   replicas; at equal replicas, fewer preferred leaderships; then the
 *   lower id.
 *   1. Decommission(member): in input order, every partition holding the
 *      member gets, in the member's position, the least loaded eligible
 *      member not already its replica; loads are updated after each pick,
 *      so the replacements spread. A partition with no such member (too
 *      few members) is reported TN_PLACE_NO_ROOM and keeps its list; one
 *      whose member is dead and has no other alive replica to copy from is
 *      reported TN_PLACE_OFFLINE.
 *   2. Heal(dead member): the same, refused for an alive member; a
 *      partition of factor 1 on it, or whose every other replica is dead
 *      too, cannot be restored: reported TN_PLACE_OFFLINE, never given an
 *      empty replacement.
 *   3. Rebalance, over the eligible members (replicas on dead or draining
 *      members stay where they are and count for nobody):
 *      a. preferred leaders by reordering lists (no data moves): a
 *         partition whose preferred leader is not eligible gets its least
 *         led eligible replica in front; then, while some member leads at
 *         least two more partitions than another it can hand one to along
 *         a chain (A leads p which B also holds, B leads q which C holds,
 *         ...), the chain is shifted: A leads one fewer, the last one more,
 *         the members between the same. The chosen replica moves to the
 *         front; the others keep their order.
 *      b. replica counts by moves: while the most loaded member holds at
 *         least two replicas more than the least loaded one, one replica
 *         moves from the first to the second (same position in the list).
 *         The partition moved is the first, in input order, that the target
 *         does not hold, preferring one the source leads when the source
 *         leads at least two more partitions than the target, else one it
 *         does not lead.
 *         Each move brings the counts one step closer to within one, so
 *         the number of moves is the least there can be: max(sum over
 *         members of max(0, load - ceil(T/n)), sum of max(0, floor(T/n) -
 *         load)) for T replicas on n members (the first sum alone is a
 *         lower bound but not always enough: loads 2,2,2,0 need one move).
 *      c. step a again (the moves may have shifted leaderships).
 *      Within one: replica counts always end within one (unless max_moves
 *      stopped the moves first). Preferred-leader counts end within one
 *      whenever a reordering of the final lists can reach it, which is
 *      always the case when every partition has the same factor and all its
 *      replicas on eligible members; with mixed factors it may not be (three
 *      factor-1 partitions on A, three factor-2 ones on B and C: A leads 3
 *      whatever the order), and plan->leader_spread says so.
 *   4. Factor (a partition's replica count made its topic's
 *      replication_factor): appended, the least loaded eligible members
 *      it lacks, in the load order, one at a time; dropped, from the end,
 *      the members that are not eligible first, never position 0. All
 *      or nothing: a partition that cannot get enough members is reported
 *      TN_PLACE_NO_ROOM and keeps its list.
 *   max_moves (0 = no cap) bounds the replicas placed on a new member per
 *   call (reorders move no data and are not counted); plan->more says that
 *   the cap stopped the plan: apply it, then plan again.
 * Invariants: the same input gives the same plan (input order, then ids,
 * decide every tie); a plan applied and planned again gives no change;
 * every list in a plan has the partition's factor, distinct members, and
 * only eligible members that it did not hold before. */
#ifndef TN_META_PLACEMENT_H
#define TN_META_PLACEMENT_H

#include "core/platform.h"

#include "meta/partstate.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TN_PLACE_MAX_REPLICAS TN_PSTATE_MAX_REPLICAS

typedef struct tn_place_member_s {
    uint32_t id; /* node ids start at 1 */
    bool alive;
    bool draining;
} tn_place_member_t;

typedef struct tn_place_part_s {
    uint32_t topic;     /* the caller's topic index or id (carried, not used) */
    uint32_t partition; /* carried, not used */
    uint32_t factor;    /* replicas in the list: the partition's replication factor */
    uint32_t replicas[TN_PLACE_MAX_REPLICAS]; /* preference order: [0] the preferred leader */
} tn_place_part_t;

/* A placement to plan over. members sorted by id, ids distinct and not 0;
 * every partition's factor in 1..TN_PLACE_MAX_REPLICAS and its replicas
 * distinct members of members[] (tn_place_check). */
typedef struct tn_place_in_s {
    const tn_place_member_t *members; /* borrowed */
    size_t nmembers;
    const tn_place_part_t *parts; /* borrowed */
    size_t nparts;
} tn_place_in_t;

typedef struct tn_place_load_s {
    uint32_t replicas; /* partitions holding the member */
    uint32_t leaders;  /* partitions whose preferred leader (replicas[0]) it is */
} tn_place_load_t;

/* One partition's new list. moved: members in it that the old one lacked
 * (replicas to copy); 0 for a reorder. */
typedef struct tn_place_change_s {
    uint32_t part; /* index into in->parts */
    uint32_t moved;
    tn_place_part_t to;
} tn_place_change_t;

typedef enum {
    TN_PLACE_NO_ROOM = 1, /* every eligible member already holds a replica of it */
    TN_PLACE_OFFLINE = 2, /* no alive replica left to copy from (factor 1 on a dead member) */
} tn_place_why_t;

/* A partition the plan could not give a replacement for member. */
typedef struct tn_place_problem_s {
    uint32_t part; /* index into in->parts */
    uint32_t member;
    tn_place_why_t why;
} tn_place_problem_t;

typedef struct tn_place_plan_s {
    tn_place_change_t *changes; /* owned by the plan; by part index, one per changed partition */
    size_t nchanges;
    tn_place_problem_t *problems; /* owned by the plan; by part index */
    size_t nproblems;
    tn_place_load_t *loads; /* owned by the plan: per in->members[i], after the plan */
    size_t nloads;
    uint32_t moves;    /* sum of changes[].moved */
    uint32_t reorders; /* changes with moved == 0 */
    bool more;         /* max_moves stopped the plan: apply it and plan again */
    /* Over the eligible members after the plan (0 with none): the most
     * minus the fewest replicas held, and preferred leaderships held. */
    uint32_t replica_spread;
    uint32_t leader_spread;
} tn_place_plan_t;

void tn_place_plan_init(tn_place_plan_t *plan);
/* Frees what the plan owns and leaves it as after init. */
void tn_place_plan_fini(tn_place_plan_t *plan);

/* Whether in is well formed (see tn_place_in_t). 0, or UV_EINVAL with the
 * reason in err. */
int tn_place_check(const tn_place_in_t *in, char *err, size_t errlen);

/* The load of every member: out[i] for in->members[i] (out caller-owned,
 * in->nmembers entries). in must pass tn_place_check. */
void tn_place_loads(const tn_place_in_t *in, tn_place_load_t *out);

/* Plans (rules 1, 2 and 3 of the DESIGN comment) into plan, which must
 * have been initialised; what it held before is freed first. On error the
 * plan is empty. 0; UV_EINVAL a malformed input (tn_place_check), or for
 * heal a member that is alive; TN_ENOTFOUND member is not in in->members;
 * UV_ENOMEM. The reason is in err. Any thread; in is only read. */
int tn_place_decommission(const tn_place_in_t *in, uint32_t member, uint32_t max_moves,
                          tn_place_plan_t *plan, char *err, size_t errlen);
int tn_place_heal(const tn_place_in_t *in, uint32_t member, uint32_t max_moves,
                  tn_place_plan_t *plan, char *err, size_t errlen);
int tn_place_rebalance(const tn_place_in_t *in, uint32_t max_moves, tn_place_plan_t *plan,
                       char *err, size_t errlen);

/* Rule 4 (the factor): every partition k whose list is not want[k] long
 * (caller-owned, in->nparts entries, each 1..TN_PLACE_MAX_REPLICAS, else
 * UV_EINVAL) gets one that is: a longer list keeps its members in their
 * order and appends the least loaded eligible members it lacks, one at a
 * time (loads updated after each pick); one with too few such members is
 * reported TN_PLACE_NO_ROOM and keeps its list (never a partial change). A
 * shorter list keeps position 0 (the preferred leader) and drops, one at a
 * time, the last member that is not eligible, else the last. Changes that
 * only drop replicas have moved 0. Any thread; in is only read. */
int tn_place_refactor(const tn_place_in_t *in, const uint32_t *want, tn_place_plan_t *plan,
                      char *err, size_t errlen);

/* Apply plan's changes to parts (caller-owned, the in->parts the plan was
 * made from, or a copy of it): what the move mechanism will have done once
 * every change is through. For a simulation and the tests. */
void tn_place_apply(tn_place_part_t *parts, size_t nparts, const tn_place_plan_t *plan);

#endif
