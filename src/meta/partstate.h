/* The state of a replicated partition as the metastore holds it, and the
 * controller's rules over it: elections, fencing a member whose session
 * expired, the leader's ISR compare-and-set, a forced (admin) election and
 * the preferred-leader rebalance. Pure functions over plain structs: no I/O,
 * no clock, no allocation, so the metastore's state machine can apply them
 * as commands (every replica applies the same command to the same state and
 * gets the same result) and a simulation can drive them.
 *
 * Not wired into the metastore yet: src/meta/state.c will hold a
 * tn_pstate_t per replicated partition and apply these as commands.
 *
 * DESIGN: the controller's rules.
 *   1. A partition is created with its replicas; its ISR is every replica
 *      with its current incarnation, and its leader the first live one in
 *      replicas order (tn_pstate_create). leader_epoch starts at 1.
 *   2. A member's session expires (or it registers again after a restart,
 *      or with a new incarnation, whether or not its old session is still
 *      live): one command fences it, and applying it runs tn_pstate_fence on every
 *      partition. For a partition it led, the new leader is the first ISR
 *      member in replicas order that is eligible (live, its incarnation the
 *      current one, no CRC failure) and not the fenced node, else the first
 *      eligible ELR member (below); leader_epoch and partition_epoch are
 *      bumped. The fenced member leaves the ISR. No eligible member: the
 *      partition is offline (leader TN_PSTATE_NONE) until one comes back
 *      (tn_pstate_elect) or an admin forces a leader.
 *   3. The leader proposes ISR changes as a compare-and-set on
 *      partition_epoch (tn_pstate_alter_isr). The controller refuses a stale
 *      partition_epoch, a proposer that is not the current leader in the
 *      current leader_epoch, an ISR without its leader or with a
 *      non-replica, and an added member whose incarnation is not the
 *      current one or whose session is not live (KIP-903).
 *   4. An admin may force a leader (tn_pstate_force_leader): clean when the
 *      node is an eligible ISR member, otherwise only with unclean set,
 *      which makes it the only ISR member and marks the epoch unclean
 *      (KIP-460/704).
 *   5. When the preferred leader (replicas[0]) is an eligible ISR member
 *      and does not lead, the controller moves leadership back to it once it
 *      has seen that for leader-rebalance-delay (the timer is the caller's;
 *      tn_pstate_rebalance re-checks the condition when applied).
 * Eligible leader replicas (KIP-966). A member that leaves the ISR (fenced,
 * or shrunk out by the leader) while fewer than min_insync members remain
 * joins the ELR, with its incarnation. The leader moves the hw only while
 * the committed ISR has min_insync members, so from then on the hw is
 * frozen and every ELR member holds every record below it (an ISR member
 * had flushed all of it). An election takes the first eligible ISR member,
 * else the first eligible ELR member, which becomes the ISR. The ELR is
 * emptied when the ISR is back to min_insync (the hw moves again, the ELR
 * members fall behind). So a partition whose ISR members died one after the
 * other comes back, cleanly, with the first of them to return, instead of
 * waiting for the very last one (which might come back with a wiped disk).
 * A member whose incarnation is no longer its node's (a wiped disk) leaves
 * the ISR and ELR at the next fence and never counts for either; a member
 * with a CRC failure leaves both.
 * Reassignment (a partition move, KIP-455; docs/replication.md "Partition
 * moves"):
 *   6. Begin (tn_pstate_move_begin): given a target replica list and the
 *      move's id and start time (the proposer's: no clock here), replicas
 *      becomes the target followed by the old replicas not in it, and the
 *      old list is kept. The adding members are replicas at once: they
 *      fetch, and the leader's CAS (rule 3, unchanged) adds them to the
 *      ISR once caught up. Refused while a move is under way, or for a
 *      target that is empty, has duplicates, an unknown or not live member,
 *      more than TN_PSTATE_MAX_REPLICAS (also counting the old replicas it
 *      drops, which stay replicas until the end), fewer than min_insync
 *      members, or equals the current list.
 *   7. Complete (tn_pstate_move_complete, re-checked when applied): only
 *      when every target member is in the ISR. A leader not in the target
 *      hands over to the first eligible target ISR member (an election:
 *      leader_epoch bumped; none eligible: refused, tried again later).
 *      replicas becomes the target; the ISR and ELR keep target members
 *      only; the move is cleared.
 *   8. Abort (tn_pstate_move_abort): replicas back to the old list; ISR
 *      and ELR keep old members only; a leader that is not an old replica
 *      hands over to the first eligible old ISR member; refused when none
 *      is (no old replica could lead), and when the old members would hold
 *      fewer of the ISR and ELR copies (current incarnations) than
 *      min_insync, or than there are if fewer: a target member in the ISR
 *      or the ELR may hold acknowledged records an old member out of the
 *      ISR lacks, and dropping it would leave them on fewer disks than
 *      min_insync promised (or, the partition offline, none to elect).
 *   9. Failure: a move one of whose target members outside the ISR the
 *      controller gave up on (dead past replace-dead-after: the caller's
 *      list, tn_pstate_move_blocked) cannot complete; it is aborted by
 *      rule 8 and kept as failed (the metastore's PART_MOVE fail). The
 *      partition's leader proposes the same fail for a target member that,
 *      alive, copied nothing for move-stall-timeout (cluster/movestall.h).
 *  10. Stall marks (tn_pstate_move_mark): the partition's leader records,
 *      rarely, where each target member's copy stood and since when
 *      (cluster/movestall.h), so a new leader judges a stall from the last
 *      progress its predecessor saw instead of from its own start. Taken
 *      only for the move id under way, over target members; they replace
 *      the marks before; no epoch is bumped (a mark is no state change a
 *      follower or an ISR CAS must see). A move's begin and end clear them.
 *   A fence, a CRC mark, a forced election, an ISR CAS and the rebalance
 *   work during a move as before, over the whole list (target and old).
 * Invariants: leader_epoch and partition_epoch only grow; partition_epoch
 * grows on every change; a leader other than NONE is an ISR member; the
 * ISR holds min_insync members or the ELR holds those that left it since
 * the hw froze; an ISR member added by a CAS had the
 * incarnation its node has now. During a move (ntarget > 0): replicas is
 * exactly the target followed by the old replicas not in it, so every
 * target and every old member is a replica; ntarget >= min_insync; the
 * target differs from the old list; move_id is not 0. Without one,
 * ntarget, nold and move_id are 0. */
#ifndef TN_META_PARTSTATE_H
#define TN_META_PARTSTATE_H

#include "core/platform.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TN_PSTATE_MAX_REPLICAS 8
#define TN_PSTATE_NONE         0u /* node ids start at 1 */

typedef struct tn_pstate_member_s {
    uint32_t node;
    uint64_t incarnation;
} tn_pstate_member_t;

/* A stall mark of the move under way (rule 10): where a target member's
 * copy stood (end, the log end its fetches showed) and since when (ms,
 * the partition leader's wall clock when it last advanced). */
typedef struct tn_pstate_mark_s {
    uint32_t node;
    uint64_t end;
    int64_t ms;
} tn_pstate_mark_t;

typedef struct tn_pstate_s {
    uint32_t nreplicas;
    uint32_t replicas[TN_PSTATE_MAX_REPLICAS]; /* preference order */
    uint32_t leader;                           /* TN_PSTATE_NONE: offline */
    uint32_t leader_epoch;
    uint32_t partition_epoch;
    uint32_t nisr;
    tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
    uint32_t nelr; /* eligible leader replicas (KIP-966): see the DESIGN comment */
    tn_pstate_member_t elr[TN_PSTATE_MAX_REPLICAS];
    uint32_t min_insync; /* min_insync_replicas of the partition */
    uint32_t corrupt;    /* bit i: replicas[i] failed a CRC check, not repaired */
    bool unclean;        /* the current epoch began with a forced unclean election */
    /* A reassignment under way (rule 6; ntarget 0: none). */
    uint32_t ntarget;
    uint32_t target[TN_PSTATE_MAX_REPLICAS]; /* the replicas it ends with */
    uint32_t nold;
    uint32_t old[TN_PSTATE_MAX_REPLICAS]; /* the replicas before it (abort's list) */
    uint64_t move_id;                     /* the proposer's, not 0 */
    int64_t move_started_ms;              /* the proposer's wall clock */
    /* The move's stall marks (rule 10; nmark 0: none), each a target
     * member's, distinct. Changing them bumps no epoch. */
    uint32_t nmark;
    tn_pstate_mark_t mark[TN_PSTATE_MAX_REPLICAS];
} tn_pstate_t;

/* What the controller knows of a member node: its current incarnation (a
 * random id made when its data directory was created) and whether its
 * session is live. */
typedef struct tn_pstate_node_s {
    uint32_t id;
    uint64_t incarnation;
    bool live;
} tn_pstate_node_t;

typedef struct tn_pstate_nodes_s {
    const tn_pstate_node_t *v; /* borrowed */
    size_t n;
} tn_pstate_nodes_t;

/* Create ps over replicas[0..n) (copied; ids distinct, not NONE, n <=
 * TN_PSTATE_MAX_REPLICAS, every one known to nodes), min_insync in 1..n.
 * 0, or UV_EINVAL with the reason in err. */
int tn_pstate_create(tn_pstate_t *ps, const uint32_t *replicas, uint32_t n, uint32_t min_insync,
                     const tn_pstate_nodes_t *nodes, char *err, size_t errlen);

/* Whether ISR member m of ps may lead: its node is live, has incarnation
 * m->incarnation now, is not `except`, and has no CRC failure recorded. */
bool tn_pstate_eligible(const tn_pstate_t *ps, const tn_pstate_member_t *m,
                        const tn_pstate_nodes_t *nodes, uint32_t except);

/* Apply the fence of node (session with incarnation; 0 matches any) to ps:
 * see step 2 above. nodes may still show the node live; it is treated as
 * not. Returns whether ps changed. */
bool tn_pstate_fence(tn_pstate_t *ps, uint32_t node, uint64_t incarnation,
                     const tn_pstate_nodes_t *nodes);

/* An offline partition gets the first eligible ISR member, else ELR
 * member, as leader (after a member registered again). Returns whether ps
 * changed. */
bool tn_pstate_elect(tn_pstate_t *ps, const tn_pstate_nodes_t *nodes);

/* The leader's compare-and-set: proposer (node, its leader_epoch) asks
 * that the ISR become isr[0..n) (copied) given partition_epoch expected_pe.
 * The same ISR as now is accepted too: it only bumps partition_epoch
 * (a leader uses it to outdate a proposal of its own still in flight).
 * Members re-added, or added after a CRC failure, clear that failure.
 * 0 (partition_epoch bumped); TN_ECHANGED stale partition_epoch or the
 * proposer is not the leader of the current epoch; UV_EINVAL a malformed
 * ISR (empty, duplicate, not a replica, without the leader); UV_EPERM an
 * added member whose incarnation is not current or whose session is not
 * live, or any added member when !channels_checked (the proposer did not
 * check that its channel state caught up: elected, it would deliver again
 * what the ISR settled). The reason is in err. */
int tn_pstate_alter_isr_ex(tn_pstate_t *ps, uint32_t proposer, uint32_t leader_epoch,
                           uint32_t expected_pe, const tn_pstate_member_t *isr, uint32_t n,
                           bool channels_checked, const tn_pstate_nodes_t *nodes, char *err,
                           size_t errlen);
/* tn_pstate_alter_isr_ex with channels_checked: the rules over record
 * logs alone (the simulation, which has no channels). */
int tn_pstate_alter_isr(tn_pstate_t *ps, uint32_t proposer, uint32_t leader_epoch,
                        uint32_t expected_pe, const tn_pstate_member_t *isr, uint32_t n,
                        const tn_pstate_nodes_t *nodes, char *err, size_t errlen);

/* An admin's one-shot election of node. 0; UV_EINVAL node not a replica;
 * UV_EPERM node not live, or not an eligible ISR member and !unclean.
 * Unclean: the ISR becomes node alone with its current incarnation and
 * ps->unclean is set (records the old ISR had and node lacks are lost). */
int tn_pstate_force_leader(tn_pstate_t *ps, uint32_t node, bool unclean,
                           const tn_pstate_nodes_t *nodes, char *err, size_t errlen);

/* Whether the preferred leader (replicas[0]) is an eligible ISR member
 * that does not lead ps. */
bool tn_pstate_preferred_ready(const tn_pstate_t *ps, const tn_pstate_nodes_t *nodes);

/* Move leadership to the preferred leader when tn_pstate_preferred_ready.
 * 0 moved; UV_EAGAIN not ready (nothing changed). */
int tn_pstate_rebalance(tn_pstate_t *ps, const tn_pstate_nodes_t *nodes);

/* Record that node's replica failed a CRC check: it leaves the ISR and the
 * ELR, and elections, until a CAS adds it back; a leader hands over.
 * Returns whether ps changed. */
bool tn_pstate_mark_corrupt(tn_pstate_t *ps, uint32_t node, const tn_pstate_nodes_t *nodes);

/* Begin moving ps to target[0..n) (copied; preference order), with the
 * proposer's id (not 0) and start time: rule 6. 0 (partition_epoch
 * bumped); UV_EBUSY a move is under way; UV_EINVAL a bad target (the
 * reason in err). */
int tn_pstate_move_begin(tn_pstate_t *ps, const uint32_t *target, uint32_t n, uint64_t id,
                         int64_t started_ms, const tn_pstate_nodes_t *nodes, char *err,
                         size_t errlen);

/* Whether every target member of the move under way is in the ISR (the
 * controller then proposes the completion). */
bool tn_pstate_move_ready(const tn_pstate_t *ps);

/* Rule 9: the first target member of the move under way in ps that is
 * outside the ISR (the move waits for it) and listed in gone[0..ngone)
 * (members the controller gave up on), or TN_PSTATE_NONE (no move, or
 * none such). */
uint32_t tn_pstate_move_blocked(const tn_pstate_t *ps, const uint32_t *gone, size_t ngone);

/* Complete the move id: rule 7. 0; TN_ENOTFOUND no move id under way;
 * UV_EAGAIN not every target member is in the ISR, or the leader must
 * hand over and no target ISR member is eligible (nothing changed). */
int tn_pstate_move_complete(tn_pstate_t *ps, uint64_t id, const tn_pstate_nodes_t *nodes, char *err,
                            size_t errlen);

/* Abort the move id: rule 8. 0; TN_ENOTFOUND no move id under way;
 * UV_EPERM the leader is not an old replica and no old ISR member may
 * lead, or the old members would hold fewer ISR and ELR copies than
 * min_insync (or than there are) (nothing changed; the reason in err). */
int tn_pstate_move_abort(tn_pstate_t *ps, uint64_t id, const tn_pstate_nodes_t *nodes, char *err,
                         size_t errlen);

/* tn_pstate_move_abort with rule 8's refusal for too few copies only when
 * keep_copies: false applies an older build's PART_MOVE abort as that
 * build did (its entries replay with the rule they were made under). */
int tn_pstate_move_abort_ex(tn_pstate_t *ps, uint64_t id, bool keep_copies,
                            const tn_pstate_nodes_t *nodes, char *err, size_t errlen);

/* Set the stall marks of the move id to mark[0..n) (copied; n <=
 * TN_PSTATE_MAX_REPLICAS): rule 10. 0; TN_ENOTFOUND no move id under way;
 * UV_EINVAL a mark of a member that is not a target member, or two of
 * one member, or a negative ms (nothing changed). */
int tn_pstate_move_mark(tn_pstate_t *ps, uint64_t id, const tn_pstate_mark_t *mark, uint32_t n);

/* The stall mark of node in the move under way in ps, or NULL. */
const tn_pstate_mark_t *tn_pstate_mark_find(const tn_pstate_t *ps, uint32_t node);

/* The ISR index of node in ps, or -1. */
int tn_pstate_isr_find(const tn_pstate_t *ps, uint32_t node);

#endif
