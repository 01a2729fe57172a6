/* Move traffic (issue 24): the rules that keep a partition copy off the
 * produce path, as pure functions with no I/O and no clock (time is an
 * input), so that tests/unit/cluster/test_throttle.c checks them alone.
 * The replica manager (replica.c) applies them:
 *
 *   - which connection a follower's fetch rides (tn_throttle_bulk): the
 *     node RPC bulk connection for a copy that is catching up, the normal
 *     one for an in-sync follower, whose fetch is on the ack path;
 *   - which fetches the serving leader throttles (tn_throttle_applies) and
 *     by how much (tn_throttle_t, a token bucket of option move-rate);
 *   - a move's state as GET /v1/cluster/moves shows it (copying or
 *     catching_up, tn_throttle_move_state);
 *   - the tally of finished moves for /metrics (tn_move_tally_t);
 *   - how many repairs of damaged replicas run at once
 *     (tn_repair_slots_t, option max-repairs-per-node).
 *
 * Why the leader's serving side holds the bucket: it is where a copy
 * costs the produce path (the source reads the records, often from disk,
 * and sends them on its own uplink), it is the one node that knows for
 * sure which followers are in the ISR (its core's committed state), and a
 * decommission, which moves every replica off one node, is bounded there
 * by one bucket. A target fed by several sources at once may take in up
 * to that many times move-rate; max-moves-per-node bounds how many.
 *
 * Threads: any; pure functions on caller-owned structs. */
#ifndef TN_CLUSTER_THROTTLE_H
#define TN_CLUSTER_THROTTLE_H

#include "core/platform.h"

#include "meta/partstate.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The option move-rate's default: 64 MiB/s. */
#define TN_THROTTLE_DEFAULT_RATE (64ull << 20)
/* The least a bucket holds when full, whatever the rate (a low rate
 * still reads in chunks worth a system call). */
#define TN_THROTTLE_MIN_BURST (64u << 10)
/* A move target that lacks more than this of its leader's log is
 * "copying"; at most this, "catching_up" (the rest comes in about one
 * fetch answer). */
#define TN_THROTTLE_CLOSE_BYTES (1ull << 20)

/* A token bucket of rate bytes/s (0: unlimited). Tokens go below 0 when
 * a read took more than it was granted (at least one record is always
 * read): the debt delays the next grants, so over any interval T the
 * bytes granted stay under burst + rate x T + one record. */
typedef struct tn_throttle_s {
    uint64_t rate;   /* bytes per second; 0 = unlimited */
    uint64_t burst;  /* the most tokens it holds: max(rate / 10, TN_THROTTLE_MIN_BURST) */
    int64_t tokens;  /* bytes that may be read now (negative: owed) */
    uint64_t at;     /* ms of the last refill */
    uint64_t waits;  /* grants refused for want of tokens (a fetch held) */
    uint64_t copied; /* bytes read under the bucket (settled) */
} tn_throttle_t;

/* A full bucket of rate bytes/s at time now (ms). */
void tn_throttle_init(tn_throttle_t *t, uint64_t rate, uint64_t now);
/* Whether a grant at now would give anything (tokens above 0, or
 * unlimited). Refills first. */
bool tn_throttle_ready(tn_throttle_t *t, uint64_t now);
/* Grant up to want bytes at now and take them: the bytes a fetch may read
 * (want itself when unlimited); 0 when the bucket is empty or owed, then
 * counted in waits. Settle every grant above 0 with tn_throttle_settle. */
uint64_t tn_throttle_grant(tn_throttle_t *t, uint64_t now, uint64_t want);
/* The read that followed a grant took got bytes: the unused part goes
 * back, a read past the grant (one record over it) is owed. */
void tn_throttle_settle(tn_throttle_t *t, uint64_t granted, uint64_t got);

/* Whether the leader throttles node's fetches of a partition in state ps
 * (borrowed): node is not in the ISR (a move's target, or a replica
 * catching up after a restart) while the ISR holds min_insync members
 * without it. A follower in the ISR is never throttled (its fetch is on
 * the ack path), nor one whose catching up the partition waits for to
 * take writes again (the ISR below min_insync). */
bool tn_throttle_applies(const tn_pstate_t *ps, uint32_t node);

/* Whether a follower's fetch rides the bulk connection: its copy is out
 * of the ISR (in_isr false: a move's target, or catching up), or far
 * behind its leader (tn_throttle_far of its last answer). An in-sync copy
 * that keeps up stays on the normal connection. */
bool tn_throttle_bulk(bool in_isr, bool far);
/* Whether a follower whose last fetch answer carried answer_bytes of
 * records, of the max_bytes it asked for, is far behind: the leader had
 * at least half a fetch's worth waiting, so more than one answer's worth
 * of records was queued for it (a follower that keeps up gets what was
 * written in one round trip, far less). */
bool tn_throttle_far(size_t answer_bytes, size_t max_bytes);

/* A move's state while under way, for GET /v1/cluster/moves: "handing_over"
 * once every target member is in the ISR (ready), else "copying" while
 * the farthest target lacks more than TN_THROTTLE_CLOSE_BYTES of the
 * leader's log (lag_known, lag_bytes), "catching_up" when closer or not
 * known here. A static string. */
const char *tn_throttle_move_state(bool ready, bool lag_known, uint64_t lag_bytes);

/* Repairs of damaged replicas (replica.c, DESIGN step 7), at most cap at
 * once on a node, on each side that holds the copied records in memory:
 * the follower that repairs (its copy of a segment, up to segment-bytes
 * plus a batch, held from the first read until the replacement is
 * written, twice that for a moment while the replacement takes its own
 * copy) and the leader that serves the reads (each read up to
 * fetch-max-bytes plus a batch, and its answer). A repair, or a read,
 * takes a slot before it starts and gives it back when it ends, however
 * it ends; one that finds none waits its turn (the follower asks again on
 * a later tick; the leader answers the read "busy", and the follower asks
 * for the same piece again shortly, keeping what it copied): nothing
 * fails for good for want of a slot. Option max-repairs-per-node. */
#define TN_REPAIR_SLOTS_DEFAULT 2
typedef struct tn_repair_slots_s {
    uint32_t cap;     /* the most at once (at least 1) */
    uint32_t running; /* slots taken now */
    uint32_t peak;    /* the most taken at once since init */
    uint64_t waits;   /* takes refused: one waited its turn */
} tn_repair_slots_t;

/* At most cap at once (0: TN_REPAIR_SLOTS_DEFAULT). */
void tn_repair_slots_init(tn_repair_slots_t *s, uint32_t cap);
/* Take a slot: true when one was free (then give it back once with
 * tn_repair_slots_give), false when cap are taken (counted in waits). */
bool tn_repair_slots_take(tn_repair_slots_t *s);
/* Give back a slot taken. */
void tn_repair_slots_give(tn_repair_slots_t *s);

/* Moves this node saw finish (its metastore replica's ring of finished
 * moves, scanned over and over): each counted once. */
#define TN_MOVE_TALLY_IDS 128
typedef struct tn_move_tally_s {
    int64_t since_ms;                /* moves finished before (wall ms) are not counted */
    uint64_t ids[TN_MOVE_TALLY_IDS]; /* counted ids, a ring */
    uint32_t nids, next;
    uint64_t done, aborted, failed;
    uint64_t seconds_count;
    double seconds_sum;
} tn_move_tally_t;

/* Count moves that finish from since_ms (wall clock ms) on. */
void tn_move_tally_init(tn_move_tally_t *t, int64_t since_ms);
/* Note a finished move: id, how it ended (meta/cmd.h tn_meta_move_end_t:
 * TN_MOVE_DONE, TN_MOVE_ABORTED, TN_MOVE_FAILED), its start and end (wall
 * ms). Counted unless seen already or finished before since_ms; true when
 * counted. */
bool tn_move_tally_note(tn_move_tally_t *t, uint64_t id, uint8_t end, int64_t started_ms,
                        int64_t finished_ms);

#endif
