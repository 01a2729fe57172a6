/* The decision core of a replicated partition on one node: the leader's
 * and the follower's rules as an event-driven state machine with no I/O
 * and no clock (time is an input). The shell around it (not written yet:
 * the fetch RPC, the segment log, the metastore client) turns its actions
 * into I/O and feeds it events; tests/unit/cluster/test_repl_sim.c drives
 * several cores with a fake network, disks and a controller.
 *
 * The controller's side (elections, fencing, the ISR compare-and-set) is
 * meta/partstate.h. The design, failure modes and invariants are in the
 * DESIGN comment of repl.c.
 *
 * Threads: a core belongs to the loop thread of its partition; every call
 * runs to completion and touches only the core. */
#ifndef TN_CLUSTER_REPL_H
#define TN_CLUSTER_REPL_H

#include "core/platform.h"

#include "meta/partstate.h"

#include <stdbool.h>
#include <stdint.h>

/* The epoch history of the local log: for epoch e, the largest epoch
 * e' <= e the log holds (*found, 0 when none) and the end offset of e'
 * (the start offset of the next epoch in the log, or the log end). 0, or a
 * negative error. tn_epochs (src/storage/epochs.h) answers this from the
 * partition's epochs file; the simulation from its record array. */
typedef int (*tn_repl_epoch_end_cb)(void *arg, uint32_t epoch, uint32_t *found,
                                    uint64_t *end_offset);

typedef struct tn_repl_config_s {
    uint32_t node;
    uint64_t incarnation;
    uint64_t replica_lag_ms;   /* ISR shrink after this long behind */
    uint64_t fetch_idle_ms;    /* follower: next fetch after an empty answer */
    uint64_t fetch_timeout_ms; /* follower: fetch again when unanswered; leader: re-propose */
    tn_repl_epoch_end_cb epoch_end;
    void *epoch_end_arg;
    /* Channel state gates the ISR: a follower is proposed into the ISR only
     * once the shell reported (TN_REPL_EV_CHANNELS) that its channels'
     * state caught up with this leader's, for the incarnation it fetches
     * with. false: the record log alone decides (the simulation). */
    bool channels_gate;
} tn_repl_config_t;

/* A follower's fetch. flushed_offset: the records below it are on the
 * follower's disk (fdatasync'ed); the leader counts nothing else. */
typedef struct tn_repl_fetch_s {
    uint32_t node;
    uint64_t incarnation;
    uint32_t leader_epoch;
    uint64_t fetch_offset;       /* the follower's log end */
    uint32_t last_fetched_epoch; /* epoch of the record at fetch_offset - 1 (0: empty log) */
    uint64_t flushed_offset;
    uint32_t partition_epoch; /* the newest partition state the follower applied */
} tn_repl_fetch_t;

typedef enum {
    TN_REPL_EV_STATE,        /* the metastore applied a partition state: u.state */
    TN_REPL_EV_LOG,          /* the local log: u.log (after appends, flushes, truncations) */
    TN_REPL_EV_FETCH,        /* leader: a follower's fetch, u.fetch */
    TN_REPL_EV_RECORDS,      /* follower: answer with records, u.records */
    TN_REPL_EV_DIVERGING,    /* follower: answer DIVERGING, u.diverging */
    TN_REPL_EV_FETCH_ERROR,  /* follower: answer FENCED/UNKNOWNEPOCH/REMOTE, u.error */
    TN_REPL_EV_ISR_REFUSED,  /* leader: the CAS was refused, u.refused */
    TN_REPL_EV_TICK,         /* time passed */
    TN_REPL_EV_CHANNELS,     /* leader: a follower's channel state caught up or not, u.channels */
    TN_REPL_EV_OUT_OF_RANGE, /* follower: answer OUT_OF_RANGE, u.out_of_range */
    TN_REPL_EV_FLUSHED,      /* leader: a follower's flush report, u.fetch (as its fetch's) */
    TN_REPL_EV_GAP,          /* follower: answer GAP, u.out_of_range (start: the gap's end) */
} tn_repl_ev_type_t;

typedef struct tn_repl_event_s {
    tn_repl_ev_type_t type;
    uint64_t now; /* monotonic ms; every event carries it */
    union {
        const tn_pstate_t *state; /* borrowed */
        struct {
            uint64_t end;        /* log end offset (next offset to write) */
            uint64_t flushed;    /* records below are on disk */
            uint32_t last_epoch; /* epoch of the record at end - 1 (0: empty) */
        } log;
        tn_repl_fetch_t fetch;
        struct {
            uint32_t leader_epoch;
            uint64_t from, count; /* records [from, from + count) */
            uint64_t hw;
        } records;
        struct {
            uint32_t leader_epoch;
            uint32_t epoch;
            uint64_t end_offset;
            uint64_t fetch_offset;       /* echoed from the fetch it answers */
            uint32_t last_fetched_epoch; /* likewise */
        } diverging;
        struct {
            uint32_t leader_epoch; /* the epoch the fetch carried */
            int err;               /* TN_EFENCED, TN_EUNKNOWNEPOCH, TN_EREMOTE */
        } error;
        struct {
            uint32_t leader_epoch;
            uint64_t start;        /* the leader's log start (GAP: the end of its gap) */
            uint64_t fetch_offset; /* echoed from the fetch it answers */
        } out_of_range;
        struct {
            uint32_t partition_epoch; /* the controller's, at refusal */
        } refused;
        struct {
            uint32_t node;
            uint64_t incarnation; /* the data directory the report is about */
            bool caught_up;       /* every channel of the partition, fdatasync'ed there */
        } channels;
    } u;
} tn_repl_event_t;

typedef enum {
    TN_REPL_ACT_APPEND_EPOCH_START, /* leader: append the epoch-start record of epoch at offset */
    TN_REPL_ACT_ANSWER_RECORDS,     /* leader: answer node with records from `offset`, and hw */
    TN_REPL_ACT_ANSWER_DIVERGING,   /* leader: answer node DIVERGING(epoch, offset) */
    TN_REPL_ACT_ANSWER_ERROR,       /* leader: answer node with err */
    TN_REPL_ACT_PROPOSE_ISR,        /* leader: send the CAS (isr, expected_pe) to the metastore */
    TN_REPL_ACT_HW,                 /* leader: hw moved: produces below it complete (acks_ok) */
    TN_REPL_ACT_RESIGN,             /* leader no more: fail the produces waiting for the hw */
    TN_REPL_ACT_FETCH,              /* follower: send fetch to node */
    TN_REPL_ACT_APPEND,             /* follower: append the answer's records */
    TN_REPL_ACT_TRUNCATE,           /* follower: truncate the log to offset (crash-safe) */
    TN_REPL_ACT_TRUNCATE_REFUSED,   /* follower: the point is below hw: report, stop fetching */
    TN_REPL_ACT_REFRESH,            /* ask the metastore for this partition's state */
    TN_REPL_ACT_RESET,              /* follower: empty the log, restart it at offset (crash-safe) */
    TN_REPL_ACT_REPORT,             /* follower: tell node the flushed offset (fetch) */
    TN_REPL_ACT_SKIP,               /* follower: make offset the log's next (tn_plog_advance) */
} tn_repl_act_type_t;

typedef struct tn_repl_action_s {
    tn_repl_act_type_t type;
    uint32_t node;   /* peer: answers and FETCH */
    uint32_t epoch;  /* EPOCH_START, DIVERGING, ANSWER_RECORDS (leader epoch) */
    uint64_t offset; /* EPOCH_START, RECORDS (from), DIVERGING, TRUNCATE*, HW, APPEND (from), RESET,
                        SKIP */
    uint64_t count;  /* APPEND; DIVERGING: the fetch_offset it answers */
    uint32_t last_fetched_epoch; /* DIVERGING: the one it answers */
    uint64_t hw;                 /* ANSWER_RECORDS, TRUNCATE_REFUSED */
    int err;                     /* ANSWER_ERROR */
    bool acks_ok;                /* HW: always true (the hw moves only with min_insync members) */
    tn_repl_fetch_t fetch;       /* FETCH, REPORT */
    uint32_t expected_pe, leader_epoch, nisr; /* PROPOSE_ISR */
    bool channels_checked; /* PROPOSE_ISR: members it adds passed the channels gate */
    tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
} tn_repl_action_t;

#define TN_REPL_MAX_ACTIONS 6
typedef struct tn_repl_actions_s {
    uint32_t n;
    tn_repl_action_t a[TN_REPL_MAX_ACTIONS];
} tn_repl_actions_t;

typedef enum { TN_REPL_NONE, TN_REPL_LEADER, TN_REPL_FOLLOWER } tn_repl_role_t;

/* The leader's log end at the last TN_REPL_MARKS fetches of a follower:
 * a flush report that reaches one of them says the follower caught up
 * with the leader as of that fetch. */
#define TN_REPL_MARKS 8

/* What the leader knows of one follower in the current epoch. */
typedef struct tn_repl_peer_s {
    uint32_t node;
    bool seen; /* fetched in this epoch */
    uint64_t incarnation;
    uint64_t end, flushed;
    uint64_t leo_mark; /* leader's log end at this follower's previous fetch */
    /* leo_mark and the marks before it, with when each was taken: a ring
     * whose next slot is mark_head, nmarks of them valid */
    uint64_t mark_leo[TN_REPL_MARKS], mark_at[TN_REPL_MARKS];
    uint32_t mark_head, nmarks;
    uint32_t min_pe; /* fetches from older partition states do not count */
    uint64_t caught_up_at;
    /* Its channels' state caught up (EV_CHANNELS) for chans_inc. */
    bool chans_ok;
    uint64_t chans_inc;
} tn_repl_peer_t;

typedef struct tn_repl_s {
    tn_repl_config_t cfg;
    tn_pstate_t ps; /* the newest applied state seen (partition_epoch 0: none) */
    tn_repl_role_t role;
    /* the local log */
    uint64_t end, flushed;
    uint32_t last_epoch;
    uint64_t hw; /* leader: exposed high watermark; follower: learned, <= end */
    /* leader */
    uint64_t epoch_start; /* offset of this epoch's start record */
    bool epoch_start_sent;
    uint64_t became_at;
    tn_repl_peer_t peers[TN_PSTATE_MAX_REPLICAS];
    bool proposing; /* a CAS is in flight */
    uint64_t proposed_at;
    uint32_t proposed_pe, nproposed;
    tn_pstate_member_t proposed[TN_PSTATE_MAX_REPLICAS];
    uint32_t nmaybe; /* members a CAS in flight may add: counted for the hw */
    tn_pstate_member_t maybe[TN_PSTATE_MAX_REPLICAS];
    bool acks_ok;
    /* follower */
    bool fetching;
    bool stopped; /* a refused truncation: no more fetches */
    uint64_t fetch_sent_at, next_fetch_at;
    /* The flushed offset the leader was last told of, by a fetch or a
     * report, in this leader epoch: a flush past it while a fetch is out
     * is reported (ACT_REPORT) without waiting for that fetch's answer. */
    uint64_t told;
} tn_repl_t;

/* Initialise r (caller-owned) for cfg (copied), with an empty log and no
 * partition state: feed TN_REPL_EV_LOG with the log as found, then
 * TN_REPL_EV_STATE. */
void tn_repl_init(tn_repl_t *r, const tn_repl_config_t *cfg);

/* Apply ev (borrowed) to r; the actions to carry out, in order, are
 * written to out (overwritten). Never fails: bad or stale input is
 * answered (ANSWER_ERROR) or ignored. */
void tn_repl_step(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out);

/* Whether r takes a produce now: 0; TN_EREMOTE not the leader;
 * TN_EFEWREPLICAS the committed ISR is smaller than min_insync. */
int tn_repl_accepts(const tn_repl_t *r);

/* Whether a leader may deliver, settle and move its hw: its epoch-start
 * record is below the hw. */
bool tn_repl_serving(const tn_repl_t *r);

#ifdef TN_TEST
/* Deliberately broken rules, to show the simulation's checker catches
 * them. Never set outside tests. */
enum {
    TN_REPL_BREAK_NONE,
    TN_REPL_BREAK_HW_WRITTEN,  /* hw over written offsets instead of flushed */
    TN_REPL_BREAK_TRUNCATE_HW, /* follower truncates to its own hw (pre-KIP-101) */
};
extern int tn_repl_test_break;
#endif

#endif
