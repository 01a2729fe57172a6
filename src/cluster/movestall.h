/* A partition move whose target makes no progress (issue 24, option
 * move-stall-timeout): the rule that says when the partition's leader
 * asks the metastore to fail it, as a pure function with no I/O and no
 * clock (time is an input), so that tests/unit/cluster/test_movestall.c
 * checks it alone. The replica manager (replica.c) applies it.
 *
 * DESIGN: who detects a stalled move, and how it ends.
 *   1. Only the partition's leader sees how far each target member's copy
 *      reaches (the offsets of its fetches); the metastore leader, which
 *      proposes a move's end (meta.c check_moves), holds the move but never
 *      its progress (no per-second writes there). So the partition leader
 *      watches: each tick it feeds this rule the move under way in its
 *      committed state and, per target member outside the ISR, the log end
 *      its last fetch showed (or that it has not fetched here).
 *   2. A member's clock restarts whenever its copy advances (its fetch
 *      offset grew), when it has nothing left to copy (at the leader's log
 *      end: it waits for the ISR rule, not for records), while it is in
 *      the ISR, and while its metastore session is dead (a dead target is
 *      partstate.h rule 9's, after replace-dead-after). A new move starts
 *      every clock again; a node that stops leading drops its clocks, and
 *      one that takes the lead starts them as step 6 says.
 *   3. A target member outside the ISR whose clock reaches
 *      move-stall-timeout is stalled: the leader proposes PART_MOVE fail
 *      (TN_MOVE_FAIL) for that move id, with a reason naming the member and
 *      where its copy stands and, when the member reported one, its last
 *      append error (node RPC REPLICA_ERROR: a full or failing disk at
 *      the target; a leader that just took the lead waits up to two
 *      report periods for it: tn_movestall_wait_err; the reason's words:
 *      tn_movestall_reason), through tn_meta_propose_move (a follower of
 *      the metastore forwards it to the metastore leader: cluster/control.c).
 *   4. The metastore re-checks the fail when it applies it: the move id must
 *      be the one under way (a move that completed or ended meanwhile is
 *      not failed: TN_ENOTFOUND), and an old replica must be able to lead
 *      (partstate.h rule 8). The leader proposes no fail while its own ISR
 *      change is in flight (one that adds the target would make the move
 *      ready), so the two are ordered by the Raft log.
 *   5. The clocks survive a leader change through stall marks (partstate.h
 *      rule 10) without per-second metastore writes: the leader proposes
 *      MOVE_MARK, each watched target member's copy end and the wall-clock
 *      ms of its last advance, only when some target's copy stands
 *      elsewhere than its committed mark says (it advanced, or has no mark
 *      yet) AND the newest committed mark is older than timeout/4, and
 *      never more than once per timeout/4 per move (tn_movestall_mark). A
 *      copy that does not advance needs no new mark, so a stall costs at
 *      most one write; a copy that advances costs one per timeout/4.
 *   6. A leader (new, again, or the same after a restart) starts the clock of a
 *      target member from its committed mark when the member's copy stands
 *      where the mark says, or it has not fetched here yet (no sign of
 *      progress since): idle since the mark's ms, by the wall clock. Else
 *      (the copy stands elsewhere, or no mark) from now. So a move whose
 *      partition changes leaders every few seconds still fails about one
 *      timeout after its copy stopped, not never.
 *   Why marks per target member rather than one of the farthest-behind:
 *   with two targets, one stalled and one advancing, the farthest-behind
 *   may be the advancing one, whose mark says nothing of the other.
 * Failure modes: a mark is written at most timeout/4 after the progress it
 * records, so a new leader may start a clock up to timeout/4 too early
 * (the copy advanced after the mark: then it stands elsewhere, and the
 * clock starts from now, which is late, never early). Wall clocks of the
 * two leaders differing by d shift the judgement by d (NTP assumed; an
 * elapsed time below 0 reads as 0). A mark that the metastore refuses (the
 * move ended) or that an older build cannot apply (it keeps none) only
 * loses the memory: the clocks start from the new leader's start, as
 * before marks. A fail the metastore refuses is proposed again after a
 * pause while the stall lasts.
 *
 * Threads: any; pure functions on caller-owned structs. */
#ifndef TN_CLUSTER_MOVESTALL_H
#define TN_CLUSTER_MOVESTALL_H

#include "core/platform.h"

#include "meta/partstate.h"

#include <stdbool.h>
#include <stdint.h>

/* The option move-stall-timeout's default: 10 minutes. */
#define TN_MOVESTALL_DEFAULT_MS (10ull * 60 * 1000)

/* What the leader sees of one target member of the move under way. */
typedef struct tn_movestall_target_s {
    uint32_t node;
    bool in_isr;  /* in the committed ISR */
    bool alive;   /* its metastore session is not dead */
    bool seen;    /* it fetched from this leader in its epoch */
    uint64_t end; /* seen: the log end its last fetch showed */
} tn_movestall_target_t;

/* The clocks of one partition's move under way (zeroed: none). */
typedef struct tn_movestall_s {
    uint64_t move_id; /* the move the clocks are for (0: none) */
    uint32_t n;
    struct {
        uint32_t node;
        bool seen;    /* it fetched here */
        bool based;   /* end holds a mark's end (it may not have fetched here) */
        bool watched; /* outside the ISR and alive at the last check */
        uint64_t end; /* its copy's end (seen or based) */
        /* ms: the last progress (or the start of the watch); below 0 when
         * a mark puts it before this clock's origin */
        int64_t since;
    } m[TN_PSTATE_MAX_REPLICAS];
    /* The committed marks of move_id (tn_movestall_marks) and the wall
     * clock minus the monotonic one then (ms). */
    uint32_t nmark;
    tn_pstate_mark_t mark[TN_PSTATE_MAX_REPLICAS];
    int64_t wall_off;
    bool marked;        /* this leader proposed marks for move_id */
    uint64_t marked_at; /* ms: when (monotonic) */
} tn_movestall_t;

/* A stalled target member (tn_movestall_check). */
typedef struct tn_movestall_verdict_s {
    uint32_t node;    /* the member */
    bool seen;        /* it fetched here at all */
    bool based;       /* its clock came from a committed mark: it fetched
                       * from an earlier leader, where its copy stood */
    uint64_t end;     /* its copy's end (seen, or the mark's when based) */
    uint64_t idle_ms; /* how long it made no progress */
} tn_movestall_verdict_t;

/* Forget every clock. */
void tn_movestall_reset(tn_movestall_t *st);

/* Give the rule the committed stall marks of move move_id (mark[0..n),
 * borrowed, copied: the metastore replica's), at now (monotonic ms) when
 * the wall clock reads wall (ms). Call before each tn_movestall_check; a
 * clock made afterwards starts from its member's mark (DESIGN step 6).
 * Another move_id than the clocks' resets them. */
void tn_movestall_marks(tn_movestall_t *st, uint64_t move_id, const tn_pstate_mark_t *mark,
                        uint32_t n, uint64_t now, int64_t wall);

/* Whether the leader should propose stall marks now (DESIGN step 5):
 * after a tn_movestall_check at now that watched a target, with
 * timeout_ms. true: out[0..*nout) holds one mark per target member whose
 * copy end is known (wall-clock ms of its last advance), and the rule
 * notes that it proposed at now (the caller proposes MOVE_MARK; a proposal
 * lost or refused is not retried before timeout_ms/4). */
bool tn_movestall_mark(tn_movestall_t *st, uint64_t now, uint64_t timeout_ms, tn_pstate_mark_t *out,
                       uint32_t *nout);

/* Feed the rule at now (ms): the move move_id under way (0: none), ready
 * when every target member is in the ISR, its target members t[0..n)
 * (borrowed; n <= TN_PSTATE_MAX_REPLICAS), the leader's log end, and
 * timeout_ms (option move-stall-timeout; 0: never). Returns true with *out
 * set when a target member outside the ISR, alive, made no progress for
 * timeout_ms (the first such in t's order): the move is stalled. No move,
 * a ready one or timeout 0 resets the clocks and returns false. */
bool tn_movestall_check(tn_movestall_t *st, uint64_t move_id, bool ready,
                        const tn_movestall_target_t *t, uint32_t n, uint64_t log_end, uint64_t now,
                        uint64_t timeout_ms, tn_movestall_verdict_t *out);

/* Whether the leader, its lead taken at became_at (ms), waits at now
 * before proposing the fail of verdict v, so that the reason names the
 * target's append error (DESIGN step 3): err is the error the target
 * reported and still holds (NULL: none known); report_ms is the period at
 * which a target repeats a lasting error (to the leader of the epoch it
 * knows). true: wait (no error known yet, the target fetched here or
 * from an earlier leader - a lead just taken may not have heard from it
 * yet, while it has an error to tell - and the lead is younger than two
 * periods); false: fail now. */
bool tn_movestall_wait_err(const tn_movestall_verdict_t *v, const char *err, uint64_t became_at,
                           uint64_t now, uint64_t report_ms);

/* The reason a stalled move fails with, into why (len bytes, NUL ended):
 * "target member N copied no record for T (at offset E of L): the
 * partition stays on its old replicas" when v->seen or v->based, else "target member
 * N fetched nothing for T (the log ends at L): ...", T being timeout_ms
 * as tn_time_fmt_ms says it and L log_end; with "; its last append error:
 * ERR" before the closing parenthesis when err is not NULL (borrowed). The
 * error is cut to what fits before the tail, which is never cut; an error
 * with less than 8 bytes of room is left out. Only when the rest does not
 * fit in len either (offsets and a timeout of many digits: at most 166
 * bytes with no error) is the end cut. */
void tn_movestall_reason(const tn_movestall_verdict_t *v, uint64_t timeout_ms, uint64_t log_end,
                         const char *err, char *why, size_t len);

#endif
