/* The replica manager (replica.h): the shell around one tn_repl_t per
 * replicated partition this node holds a replica of.
 *
 * DESIGN: a replicated partition on this node.
 *   1. The metastore tells of a partition state (tn_meta_on_pstate, and
 *      once for every replicated partition at start). A partition that
 *      names this node among its replicas gets a part_t and a core. Its
 *      log comes first: the engine's, when the engine holds it (a log
 *      found on disk at start, or one the engine led), else one this
 *      manager opens (tn_plog_open, on a worker thread). The core is fed
 *      the log as found (EV_LOG), then the state (EV_STATE). A partition
 *      move (meta/partstate.h rules 6 to 8) is only a new state here: a
 *      node it adds gets a part_t as above (an empty log when it never held
 *      the partition) and fetches; a node it drops loses its part_t
 *      (part_drop: a leader resigns first, so the engine sets its log
 *      aside; a follower closes its own), its files left where they are,
 *      marked dropped (tn_store_mark_dropped: the next start moves them to
 *      quarantine/; "quarantine marks" below); a
 *      leader whose list changes in its epoch keeps its peers' positions
 *      (repl.c).
 *   2. Leader. The core asks for an epoch-start record. The manager hands
 *      the partition to the engine: its placement answer
 *      (tn_replica_local) turns true, and tn_topic_follow_placement opens
 *      the partition there (or takes back the log it set aside), recovering
 *      its channels from their logs as after a restart. Once the engine
 *      has it, the manager takes the engine's plog, gates it on the hw
 *      (tn_plog_set_gated) and appends the epoch-start record
 *      (tn_plog_begin_epoch). Produces go through the engine; their
 *      appends complete once the hw covers them (tn_plog_set_hw on each
 *      ACT_HW).
 *   3. Followers fetch: a FETCH call carries every partition the
 *      follower wants to fetch from one leader node when it is sent; a
 *      partition is in one call to a leader at a time (in_call), and one
 *      that wants to fetch while another call to that leader is parked
 *      goes in a new call at once (group_get). The leader feeds each to its core (EV_FETCH) and
 *      answers at once when any partition has records or another answer;
 *      else the call is parked until a log end moves, or a hw moves and
 *      the call waited HW_LINGER_MS (checked on each event that may move
 *      them, wake_fetches, and on the tick), or its wait_ms passes.
 *      Records are read off the loop (tn_plog_read_raw on a worker),
 *      except for a call that was parked (it waited at the log end, so
 *      it reads only records written since) or one whose every record
 *      was written within the last WARM_MS or two (a follower that keeps
 *      up): those are still in the page cache and read on the loop (no
 *      worker hand-off on an acknowledgement's path); their epochs are
 *      added on the loop (tn_plog_epochs_range). Move traffic
 *      (cluster/throttle.h): a follower whose copy is out of the ISR or
 *      far behind sends its fetches on node RPC's bulk connection
 *      (fetch_lane); the leader holds such a follower's fetch (out of the
 *      ISR, the ISR at min_insync without it) until move-rate's bucket has
 *      tokens, and reads at most their grant, on a worker.
 *   4. Follower. The answer's records go to tn_plog_append_raw, which
 *      completes once they are written: the core hears of the log (EV_LOG)
 *      and fetches again at once, with the older flushed offset. When the
 *      watch says they are flushed (step 5), the core hears of the log
 *      again and, that fetch being out (parked at the leader), reports the
 *      flushed offset (ACT_REPORT): a FLUSHED call per leader node carries
 *      every partition's report (one in flight; a fetch sent first takes
 *      the report off), and the leader feeds each to its core
 *      (EV_FLUSHED), which may move the hw at once. The follower's sync
 *      and its round trip overlap. DIVERGING truncates
 *      (tn_plog_truncate with the core's hw as the floor). An empty
 *      answer parks the next fetch at once (unless it came at once with
 *      the same hw: then the tick, no busy loop).
 *   5. Events: every log held is watched (tn_plog_set_repl_watch); the
 *      store calls on_watch when one was written, synced or its hw moved:
 *      the log is fed (EV_LOG), parked fetches with news are answered and
 *      the fetches that wait are sent. A timer (TICK_MS) does the same for
 *      every log as a safety net, ticks the cores (timeouts) and reads the
 *      metastore again.
 *   6. Demotion (ACT_RESIGN): the appends waiting for the hw fail with
 *      TN_EFENCED (tn_plog_fail_gated); the placement answer turns false
 *      and tn_topic_follow_placement makes the partition remote in the
 *      engine, which sets its log aside; the manager follows on that log.
 *   7. Damage. A log this manager holds that turns sticky with
 *      TN_ECORRUPT (a CRC failure found by a read, tn_plog_read_raw, the
 *      scrub or recovery) is reported once with PART_CORRUPT
 *      (tn_meta_mark_corrupt): the replica leaves the ISR, the ELR and
 *      elections, and a leader's partition moves to a clean ISR member
 *      (none: offline). It fetches no more. Once the mark is applied and
 *      the node follows a leader, it reads the damaged segment's range
 *      [base, end) (tn_plog_damage) from the leader with REPAIR calls
 *      (TN_OP_REPAIR: whole batches, CRC-checked on both sides), hands the
 *      whole range to tn_plog_repair (a crash-safe replacement that
 *      re-opens the log in place), and feeds the core the log as found:
 *      it fetches again and the leader's usual expand rule adds it back
 *      once caught up (that CAS clears the mark). The active segment
 *      (tn_plog_damage's end TN_PLOG_DAMAGE_ACTIVE) is copied from its
 *      base up to the leader's hw, or a segment's worth (REPAIR calls with
 *      flushed_offset UINT64_MAX; the first one carries the epoch of this
 *      copy's record below the base, which the leader checks as a fetch's
 *      divergence: DIVERGING empties the segment instead; OUT_OF_RANGE, the
 *      leader's log starting above the offset asked, ends the copy there),
 *      with the answers' epochs, and handed to tn_plog_repair_active:
 *      what this copy held from the base on goes, and the fetches go on
 *      from the copy's end. A range that runs into a gap of the leader's
 *      log (offsets never assigned: its answer GAP) ends there, the gap
 *      kept: a sealed segment's records before it go to
 *      tn_plog_repair_gap, an active segment's copy ends at it and the
 *      fetch skips it (ACT_SKIP). A damaged epochs file
 *      (tn_plog_epochs_damaged) is rebuilt from the records
 *      (tn_plog_rebuild_epochs), with the
 *      leader's epoch of this copy's first offset from one REPAIR call (a
 *      batch up to its hw), before a damaged active segment beside it is
 *      repaired (from the records below that segment). At most
 *      max-repairs-per-node repairs run at once here, and as many repair
 *      reads are served at once (rm->rep_slots, rm->read_slots:
 *      throttle.h): a repair that finds no slot waits its turn on the
 *      tick; a read that finds none is answered 429 busy and the follower
 *      asks again after REPAIR_BUSY_MS, keeping its copy and its slot.
 *      A repair that fails is tried again after REPAIR_RETRY_MS; damage
 *      it cannot place (overlapping segments) stays isolated and is
 *      logged. A partition
 *      whose every replica is damaged has no leader to repair from: it
 *      stays offline, logged every minute.
 * Failure modes: a fetch call that fails or times out is sent again by
 * the core's fetch timeout; an ISR proposal the metastore refuses is
 * EV_ISR_REFUSED; a truncation below the hw is refused (the partition
 * stays out of the ISR; counted and logged); an append or truncation that
 * fails leaves the core to fetch again.
 * Invariants: (1) the engine and the manager never write the same log:
 * a follower appends only while the engine's partition is remote, and
 * never through a second log object beside one the engine holds (a log of
 * our own is opened only while the engine's topic is idle and holds none;
 * one the engine set aside that ours wrote past is abandoned,
 * abandon_aside; a leader never leads from a log ending below its epoch
 * start, stale_take: docs/replication.md, "A stale engine log"); (2) a
 * leader's appends are acknowledged only under the hw (the plog gate);
 * (3) nothing is answered to a fetch for an epoch other than the core's. */
#include "core/platform.h"

#include "cluster/replica.h"

#include "cluster/fetch.h"
#include "cluster/handfence.h"
#include "cluster/movestall.h"
#include "cluster/repl.h"
#include "cluster/throttle.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "storage/io.h"
#include "storage/plog.h"
#include "storage/record.h"
#include "storage/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK_MS         10
#define START_AGAIN_MS  250 /* an epoch start the disk refused, asked again */
#define FETCH_IDLE_MS   0
#define DEFAULT_LAG_MS  10000
#define DEFAULT_WAIT_MS 500
#define DEFAULT_MAX     (1u << 20)
#define NBUCKETS        256
#define ISR_RETRY_MS    500
/* A hand-over whose leases were requeued (release_leases) and that has not
 * happened this long after resumes deliveries (the ISR change refused, the
 * target fallen behind or gone): the next attempt requeues again. */
#define RELEASE_HOLD_MS 10000
#define DMG_RETRY_MS    1000  /* a PART_CORRUPT that did not apply */
#define REPAIR_RETRY_MS 2000  /* a repair read or replacement that failed */
#define REPAIR_CALL_MS  30000 /* one REPAIR call */
/* A REPAIR read the leader answered busy (max-repairs-per-node reads
 * served there at once) is asked again after this long, the copy kept. */
#define REPAIR_BUSY_MS 200
#define STUCK_LOG_MS   60000 /* "cannot repair" at most this often */
#define CHANS_MS       50
#define REPORT_CALL_MS 2000 /* one FLUSHED call (a lost one only costs time) */
/* A parked fetch is answered for a hw that moved (no records) only after
 * it waited this long: under load the records that follow every ack carry
 * the hw anyway, and an answer of a hw alone costs the follower a round
 * trip (docs/performance.md). Idle, a follower's hw lags by at most this
 * (or the tick). */
#define HW_LINGER_MS 5
/* A leader's log end is noted every WARM_MS: records at or past the end
 * noted one period before the last (written within the last one or two
 * periods) are still in the page cache, and a fetch for them is read on
 * the loop (freq_answer). */
#define WARM_MS 1000
/* Finished moves are tallied for /metrics (tn_move_tally_t) this often. */
#define TALLY_MS 250
/* A stalled move's fail the metastore did not take is proposed again
 * after this long, while the stall lasts (cluster/movestall.h). */
#define STALL_RETRY_MS 5000
/* A follower's failed append of fetched records is logged at most this
 * often per partition (it fetches the same records again). */
#define APPEND_LOG_MS 10000

typedef enum { SRC_NONE, SRC_OPENING, SRC_OWN, SRC_ENGINE, SRC_CLOSING } src_t;

typedef struct part_s part_t;
/* One epoch-start record asked of the log (tn_plog_begin_epoch). It
 * completes like an append, once the hw covers it, so one asked before a
 * resignation may complete long after, in a later epoch of this node:
 * each is its own allocation, and a newer epoch's never waits for an
 * older one's (the committer writes them in order anyway). */
typedef struct start_s {
    tn_append_t req;
    part_t *pt;
    uint32_t epoch;
    struct start_s *next; /* the part's records not completed (starts) */
} start_t;

struct part_s {
    tn_replica_t *rm;
    part_t *next; /* bucket */
    char *topic;
    uint32_t p;
    tn_repl_t core;
    bool core_fed; /* the first LOG went in */
    tn_pstate_t ps;
    bool has_ps; /* ps waits to be fed */
    bool dead;   /* the partition went away: freed when idle */
    /* the log */
    src_t src;
    tn_plog_t *plog;
    uint64_t fed_end, fed_flushed;
    uint32_t fed_epoch;
    /* leader */
    bool handed;    /* the engine may open and serve it */
    bool releasing; /* the follower's channel logs are closing (o.release) */
    bool released;  /* ... and are closed: the hand-over may go on */
    bool ready;     /* the engine's plog is gated and the epoch-start record asked */
    /* The engine's log ended below the epoch start (leader_take): the
     * engine sets it aside, it is closed (tn_topic_part_abandon) and the
     * partition handed over again, to be opened from its files. Once per
     * leader epoch (reopen_epoch); stale_logged: a second short log was
     * reported. */
    bool reopening;
    bool stale_logged;
    uint32_t reopen_epoch;
    /* Our own log is open but the engine still holds one set aside for
     * the partition, which could not be closed yet (abandon_aside): the
     * tick tries again. */
    bool aside_stale;
    /* When it was handed (loop ms): the TN_TEST take-over delay counts
     * from it. */
    uint64_t handed_at;
    uint32_t start_epoch;
    bool start_pending;
    uint64_t start_after; /* loop ms: a start refused for space waits until then */
    start_t *start_cur;   /* the newest epoch-start record asked, until it completes */
    start_t *starts;      /* every one asked and not completed (the close fails them) */
#ifdef TN_TEST
    bool test_gapped;    /* TERN_TEST_LEADER_GAP was applied */
    bool test_open_held; /* TERN_TEST_COPY_OPEN_HOLD holds its open (noticed) */
#endif
    uint64_t last_hw; /* what parked fetches were answered against */
    uint64_t last_end;
    /* The log end noted at warm_at and the one noted before it (warm_at
     * 0: none since the lead was taken; nothing is warm). */
    uint64_t warm_from, warm_next, warm_at;
    /* The move under way's stall clocks (cluster/movestall.h) and its
     * PART_MOVE fail in flight. */
    tn_movestall_t stall;
    tn_meta_req_t stall_req;
    bool stall_busy;
    uint64_t stall_retry_at; /* no fail proposed before (after a refusal) */
    tn_meta_req_t mark_req;  /* its MOVE_MARK in flight (mark_busy) */
    bool mark_busy;
    tn_meta_req_t isr_req;
    bool isr_busy;
    uint64_t isr_retry_at;          /* no proposal before (after a refusal) */
    uint32_t isr_adds, isr_removes; /* of the proposal in flight */
    /* The proposal in flight (expecting partition epoch hold_pe) completes
     * a move's target that takes the leadership off this node: deliveries
     * are held from before it is sent (hold_deliveries). */
    bool hold_isr;
    uint32_t hold_pe;
    /* The leases of the move released_move (0: none) are requeued with
     * their attempts and those records confirmed by the target members
     * (release_leases): the hand-over's ISR change may go; requeuing while
     * that runs. Deliveries are held from the release to the move's end. */
    uint64_t released_move;
    uint64_t release_for; /* the move requeuing is for */
    uint64_t released_at; /* when released_move was set (ms) */
    bool requeuing;
    /* Taken over from a live node: deliveries held until it stopped
     * (cluster/handfence.h). */
    tn_handfence_t fence;
    uint64_t chans_at; /* feed_channels last asked (ms) */
    /* follower */
    bool want;            /* a fetch waits to be sent */
    bool in_call;         /* in a FETCH call to call_leader not yet ended */
    uint32_t call_leader; /* (one call per leader at a time; a new leader's
                           * fetch does not wait for an old leader's call) */
    tn_repl_fetch_t wantf;
    uint32_t want_node;
    bool far;         /* the last answer says this copy is far behind (fetch_lane) */
    bool report_want; /* a flush report waits to be sent (ACT_REPORT) */
    tn_repl_fetch_t reportf;
    uint32_t report_node;
    bool appending;
    int append_err;           /* the last append of fetched records that failed (0: none since) */
    uint64_t append_log_at;   /* ms: the last failed append logged */
    uint32_t append_unlogged; /* failed appends not logged since */
    /* The follower's REPLICA_ERROR reports to its leader (wire.h): the
     * error last told (0: none, or its end told), when, and the call. */
    int err_told;
    uint64_t err_told_at;
    bool err_clear_want; /* the end of a told error is still to be told */
    tn_rpc_call_t *err_call;
    /* The leader's: its followers' last reported append errors, cleared
     * by a report of their end, by progress past `end` (where the copy
     * stood when the error came), or by a lead taken after `at` (a lasting
     * error is reported again, each ERR_REPORT_MS, to the new lead). */
    struct {
        uint32_t node;
        uint64_t end;
        uint64_t at; /* now_ms when it came */
        char text[TN_WIRE_REPLERR_MAX + 1];
    } perr[TN_PSTATE_MAX_REPLICAS];
    tn_append_t app;
    tn_buf_t appbuf;
    tn_epoch_entry_t *appep;
    bool truncating;
    tn_plog_trunc_t trunc;
    tn_plog_advance_t adv;    /* the second step of a reset (follower_reset) */
    uint64_t reset_to;        /* the reset under way: the leader's log start */
    uint64_t trunc_asked;     /* the divergence point of the truncation under way */
    uint64_t trunc_logged_at; /* ms: the last failed truncation logged */
    uint32_t trunc_unlogged;  /* failed truncations not logged since */
    uv_work_t open_work;
    int64_t open_stamp; /* the engine topic's stamp the opening writes first (0: none) */
    int open_rc;
    /* a damaged copy (its log isolated by a CRC failure): reported with
     * PART_CORRUPT, then repaired from the leader (DESIGN step 7) */
    bool dmg_busy; /* PART_CORRUPT in flight */
    tn_meta_req_t dmg_req;
    uint64_t dmg_retry_at;
    bool dmg_logged;
    /* the damage's range recorded on disk (tn_plog_record_damage), so a
     * restart before the repair finds it again */
    tn_plog_dmgrec_t dmg_rec;
    bool dmg_rec_busy, dmg_recorded;
    uint64_t dmg_stuck_logged_at; /* the last "cannot repair" line */
    bool dmg_stuck;               /* no repair can reach the damage (check_damage) */
    bool rep_busy;                /* reading the range, or replacing the segment (a slot of
                                     rm->rep_slots held: rep_begin, rep_release) */
    bool rep_waiting;             /* ready to repair, waiting for a slot (its turn) */
    bool rep_waiting_logged;      /* ... said so once */
    uint64_t rep_resend_at;       /* the read answered busy: asked again then (0: none) */
    uint64_t rep_retry_at;
    uint64_t rep_base, rep_end, rep_next;
    uint32_t rep_from; /* the leader read from */
    /* the damaged segment is the active one: the copy is what the leader
     * holds below its hw from rep_base on (rep_end unknown until read),
     * with its epochs (rep_ep: tn_epoch_entry_t back to back) */
    bool rep_active;
    /* the epochs file is damaged: rebuilt from the records, the leader
     * asked only for the epoch of this copy's first offset (rep_base) */
    bool rep_epochs;
    tn_buf_t rep_ep;
    tn_buf_t rep_buf;
    tn_rpc_call_t *rep_call;
    tn_plog_repair_t rep_req;
    uint32_t busy; /* callbacks outstanding (open, append, truncate, start, isr, repair) */
    /* Given back to this node after its copy was marked dropped in this
     * run: not fed until the mark is taken away ("quarantine marks"). */
    bool unmarking;
};

typedef struct fitem_s {
    char topic[256];
    uint32_t p;
    uint16_t status;
    uint64_t offset, hw;
    uint32_t epoch;
    uint64_t end_offset;
    tn_plog_t *plog; /* RECORDS to read: the plog (engine-owned) */
    tn_buf_t recs;
    uint32_t count;
    int read_rc;
    bool out_of_range;  /* from is below the log's start (read_work): OUT_OF_RANGE */
    bool gap;           /* from is in a gap of the log (read_work): GAP */
    uint64_t log_start; /* OUT_OF_RANGE: the log's start; GAP: the gap's end */
    bool throttled;     /* a catch-up fetch: read under move-rate (tn_throttle_applies) */
    uint64_t grant;     /* ... the bytes the bucket granted it, settled in reply_now */
} fitem_t;

typedef struct freq_s freq_t;
struct freq_s {
    tn_replica_t *rm;
    freq_t *prev, *next; /* parked or working */
    tn_rpc_req_t *req;
    uint32_t node;
    uint32_t max_bytes;
    uint64_t deadline;
    uint64_t parked_at;
    bool working, answered;
    bool parked; /* it waited at every partition's log end (freq_answer) */
    uv_work_t work;
    uint32_t n;
    fitem_t items[];
};

/* What a follower's call to a leader node carries: the fetches that wait
 * for that node (FETCH), or the flush reports that wait for it (FLUSHED). */
typedef enum { CALL_FETCH, CALL_REPORT, CALL_KINDS } call_kind_t;

/* One call slot to one leader node (group_get). FETCH: a partition that
 * wants to fetch never waits for a parked call, so a leader may have several
 * slots, one idle at most. FLUSHED: one call in flight per leader; reports
 * that come meanwhile go in the next (a fetch sent first carries the offset
 * and takes the partition's report off). */
typedef struct group_s group_t;
struct group_s {
    tn_replica_t *rm;
    group_t *next;
    call_kind_t kind;
    uint32_t leader;
    bool bulk; /* CALL_FETCH: rides the bulk connection (fetch_lane) */
    bool inflight;
    tn_rpc_call_t *call;
    /* CALL_FETCH: the partitions in the call, to match the answers to */
    uint32_t n;
    struct {
        char *topic;
        uint32_t p;
        uint32_t leader_epoch;
    } * sent;
};

struct tn_replica_s {
    tn_replica_opts_t o;
    char *data_dir;
    uv_timer_t timer; /* the tick; while closing, the close watch */
    uint64_t close_at;
    bool started, closing;
    void (*close_cb)(void *arg);
    void *close_arg;
    part_t *buckets[NBUCKETS];
    freq_t *fetches;             /* parked and working */
    group_t *groups[CALL_KINDS]; /* by call_kind_t */
    uint32_t working;            /* worker jobs in flight */
    uint32_t open_handles;
    tn_replica_stats_t st;
    /* the answer being fed to a core (follower records) */
    const tn_fetch_rpart_t *cur;
    /* tn_replica_on_lead (rfwd: the router's PRODUCE window) */
    tn_replica_lead_cb lead_cb;
    void *lead_arg;
    /* move-rate: what this node serves to followers out of the ISR */
    tn_throttle_t bucket;
    /* max-repairs-per-node: repairs this node runs (follower side) and
     * repair reads it serves (leader side) at once (throttle.h) */
    tn_repair_slots_t rep_slots, read_slots;
    tn_move_tally_t tally; /* finished moves, for /metrics */
    uint64_t tally_at;
    /* Quarantine marks: jobs run one at a time, in order (mq), and the
     * partitions marked dropped in this run (marked). */
    struct mark_s *mq, *mq_tail;
    bool mq_busy;
    uv_work_t mq_work;
    struct mkey_s *marked;
    size_t nmarked, markcap;
    /* Dropped copies marked in this run, on their way to quarantine/
     * while the node runs ("quarantine marks"). */
    struct rel_s *rels;
    bool marks_swept; /* mark_sweep ran (once the metastore was current) */
    /* The delivery lease and take-over hold's timing (handfence.h). */
    tn_handfence_cfg_t fence_cfg;
};

/* A close still waiting this long says what for (on_close_watch). */
#define CLOSE_WATCH_MS 5000

/* A failed truncation is logged at most once in this many ms. */
#define TRUNC_LOG_MS 10000

static uint64_t now_ms(tn_replica_t *rm)
{
    return uv_now(rm->o.loop);
}

static uint32_t hash_name(const char *topic, uint32_t p)
{
    uint32_t h = 2166136261u;
    for (const char *c = topic; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    h = (h ^ p) * 16777619u;
    return h % NBUCKETS;
}

static part_t *part_find(tn_replica_t *rm, const char *topic, uint32_t p)
{
    for (part_t *pt = rm->buckets[hash_name(topic, p)]; pt != NULL; pt = pt->next)
        if (pt->p == p && strcmp(pt->topic, topic) == 0 && !pt->dead)
            return pt;
    return NULL;
}

/* The engine's topic, or NULL. */
static tn_topic_t *engine_topic(tn_replica_t *rm, const char *topic)
{
    tn_topic_t *t = NULL;
    if (tn_broker_topic(rm->o.broker, topic, strlen(topic), false, 0, NULL, &t) != 0)
        return NULL;
    return t;
}

/* Whether the engine serves partition p (its log open and local). */
static bool engine_local(tn_replica_t *rm, part_t *pt, tn_plog_t **plog)
{
    tn_topic_t *t = engine_topic(rm, pt->topic);
    if (t == NULL || pt->p >= t->nparts || !tn_topic_part_local(t, pt->p))
        return false;
    if (plog != NULL)
        *plog = tn_topic_part_plog(t, pt->p);
    return tn_topic_part_plog(t, pt->p) != NULL;
}

/* The engine's set-aside log of p (remote, log open), or NULL. */
static tn_plog_t *engine_aside(tn_replica_t *rm, part_t *pt)
{
    tn_topic_t *t = engine_topic(rm, pt->topic);
    if (t == NULL || pt->p >= t->nparts || tn_topic_part_local(t, pt->p))
        return NULL;
    return tn_topic_part_plog(t, pt->p);
}

static void follow_placement(tn_replica_t *rm, part_t *pt)
{
    tn_topic_t *t = engine_topic(rm, pt->topic);
    if (t != NULL)
        (void)tn_topic_follow_placement(t, NULL, NULL);
}

/* Whether the engine's topic t is not the one the metastore records under
 * its name: made from a record deleted since (its stamp, queue.h
 * record_created_ms, is another record's creation time; 0, from before
 * stamps, is taken for the recorded one, as the catalog does). The
 * catalog deletes it here once it follows the deletion; until then its
 * logs hold the old topic's records, which a partition of the new one must
 * neither follow on (a truncation to the epochs they share would keep old
 * records as the new topic's, and an append there would be reported
 * flushed, counted in the hw, then removed with the old files) nor lead
 * from. The partition waits, as for a busy topic (DESIGN invariant 1). */
static bool engine_stale(tn_replica_t *rm, const tn_topic_t *t)
{
#ifdef TN_TEST
    if (getenv("TERN_TEST_FOLLOW_STALE_TOPIC") != NULL)
        return false; /* the order before this check, for tests */
#endif
    if (t->record_created_ms == 0)
        return false;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(rm->o.meta), t->name);
    return e != NULL && e->rec.created_at_ms != t->record_created_ms;
}

/* Whether the engine's topic is being created, grown or placed (or
 * deleted), or is a stale one (engine_stale): engine_topic does not see it
 * then, yet the engine may hold the partition's log (set aside, or being
 * opened). */
static bool engine_busy(tn_replica_t *rm, part_t *pt)
{
    tn_topic_t *t = tn_broker_topic_find(rm->o.broker, pt->topic);
    return t != NULL && (tn_topic_busy(t) || engine_stale(rm, t));
}

static uint64_t test_own_beside(const part_t *pt);
static bool test_append_fails(const part_t *pt);
static bool test_open_held(part_t *pt);

/* Our own log is open on the partition's files (or is handed over): a
 * log the engine set aside for the partition has not seen what ours
 * wrote, so it is closed, never followed on or served again (invariant
 * 1). false when the engine is busy with it (the caller asks again). */
static bool abandon_aside(part_t *pt)
{
    tn_topic_t *t = tn_broker_topic_find(pt->rm->o.broker, pt->topic);
    if (t == NULL || test_own_beside(pt) >= 2)
        return true;
    return tn_topic_part_abandon(t, pt->p) == 0;
}

static int epoch_end_cb(void *arg, uint32_t epoch, uint32_t *found, uint64_t *end)
{
    part_t *pt = arg;
    if (pt->plog == NULL || (pt->src != SRC_OWN && pt->src != SRC_ENGINE)) {
        /* No log in hand (being opened, or handed to the engine): no
         * answer rather than an empty log's, which would send a follower
         * to truncate everything. */
        return UV_EAGAIN;
    }
    return tn_plog_epoch_end(pt->plog, epoch, found, end);
}

static void run(part_t *pt, const tn_repl_event_t *ev);
static void send_fetches(tn_replica_t *rm);
static void send_waiting(tn_replica_t *rm, call_kind_t kind);
static void wake_fetches(tn_replica_t *rm);

/* Take pl as the partition's log and watch it (on_watch). */
static void hold_log(part_t *pt, tn_plog_t *pl, src_t src)
{
    pt->plog = pl;
    pt->src = src;
    tn_plog_set_repl_watch(pl, true);
}

static void feed_log(part_t *pt, uint64_t end, uint64_t flushed, uint32_t epoch)
{
    pt->fed_end = end;
    pt->fed_flushed = flushed;
    pt->fed_epoch = epoch;
    pt->core_fed = true;
    tn_repl_event_t ev = {.type = TN_REPL_EV_LOG, .now = now_ms(pt->rm)};
    ev.u.log.end = end;
    ev.u.log.flushed = flushed;
    ev.u.log.last_epoch = epoch;
    run(pt, &ev);
}

/* The local log as it is: fed when it changed. A follower's is fed once
 * its appends are written (its core fetches again) and again once they
 * are flushed (its core reports that: DESIGN step 4), never while an
 * append or a truncation is under way. */
static void poll_log(part_t *pt)
{
    if (pt->plog == NULL || (pt->src != SRC_OWN && pt->src != SRC_ENGINE))
        return;
    if (pt->core.role == TN_REPL_LEADER && !pt->ready)
        return; /* the engine is taking it over */
    uint64_t end = tn_plog_written_next(pt->plog);
    uint64_t flushed = tn_plog_durable_next(pt->plog);
    if (flushed > end)
        flushed = end;
    uint32_t epoch = tn_plog_last_epoch(pt->plog);
    if (pt->core_fed && end == pt->fed_end && flushed == pt->fed_flushed && epoch == pt->fed_epoch)
        return;
    if (pt->core.role == TN_REPL_FOLLOWER && (pt->appending || pt->truncating))
        return;
    feed_log(pt, end, flushed, epoch);
}

static void feed_state(part_t *pt)
{
    if (!pt->has_ps || !pt->core_fed)
        return;
    pt->has_ps = false;
    uint32_t old = pt->core.ps.leader_epoch;
    tn_repl_event_t ev = {.type = TN_REPL_EV_STATE, .now = now_ms(pt->rm)};
    ev.u.state = &pt->ps;
    run(pt, &ev);
    if (pt->core.ps.leader_epoch != old)
        pt->rm->st.elections++;
}

/* --- the log: opening a follower's own, taking the engine's ---------------------- */

static void open_work(uv_work_t *w)
{
    part_t *pt = TN_CONTAINER_OF(w, part_t, open_work);
    tn_store_t *store = pt->rm->o.broker->store;
    /* The topic's stamp before a directory of it is made here (queue.h,
     * record_created_ms). */
    pt->open_rc = pt->open_stamp != 0
                      ? tn_store_topic_stamp_write(store, pt->topic, pt->open_stamp, true)
                      : 0;
    if (pt->open_rc == 0)
        pt->open_rc = tn_plog_open(store, pt->topic, pt->p, &pt->plog);
    /* Known for a copy at its next start even before its first record:
     * its channel state, the leader's snapshot, comes before the records,
     * and the engine skips a factor-1 log to the end its channels refer
     * to (queue/channel.c, check_lost_tail). That state waits for this
     * mark (tn_replica_copy_ready, setrepl.h copy_ready). A failure is
     * the log's sticky error (it takes no write, as for any, nor channel
     * state). */
    if (pt->open_rc == 0)
        (void)tn_plog_mark_replica(pt->plog);
}

static void part_maybe_free(part_t *pt);

/* The end of a repair, however it ends: its slot goes back. */
static void rep_release(part_t *pt)
{
    if (!pt->rep_busy)
        return;
    pt->rep_busy = false;
    pt->rep_resend_at = 0;
    tn_repair_slots_give(&pt->rm->rep_slots);
}

static void open_done(uv_work_t *w, int status)
{
    part_t *pt = TN_CONTAINER_OF(w, part_t, open_work);
    tn_replica_t *rm = pt->rm;
    rm->working--;
    pt->busy--;
    int rc = pt->open_rc != 0 ? pt->open_rc : status;
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "replica %s/%" PRIu32 ": cannot open its log: %s", pt->topic, pt->p,
               tn_strerror(rc));
        pt->plog = NULL;
        pt->src = SRC_NONE;
    } else {
        tn_topic_t *t = tn_broker_topic_find(rm->o.broker, pt->topic);
        if (pt->open_stamp != 0 && t != NULL && t->record_created_ms == pt->open_stamp)
            tn_topic_stamped(t, pt->open_stamp);
        hold_log(pt, pt->plog, SRC_OWN);
        pt->plog->on_progress = NULL;
        tn_plog_set_durability(pt->plog, TN_DURABILITY_DURABLE);
        pt->aside_stale = !abandon_aside(pt);
    }
    if (pt->dead || rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (rc == 0) {
        poll_log(pt);
        feed_state(pt);
    }
}

/* Get a log to follow on (or to learn the log end before leading): the
 * engine's set-aside one, else one of our own (async). true when there
 * is one now. */
static bool ensure_log(part_t *pt)
{
    tn_replica_t *rm = pt->rm;
    if (pt->src == SRC_OWN || pt->src == SRC_ENGINE)
        return true;
    if (pt->src == SRC_OPENING || pt->src == SRC_CLOSING)
        return false;
    if (engine_busy(rm, pt)) {
        /* The engine's topic is being grown or placed: its set-aside log
         * of the partition, if any, is out of sight, and a log of our own
         * opened now would be a second object on the same files, leaving
         * the engine's stale (it then served from where it ended: a
         * restarted replica given the lead back led from its old end).
         * The tick asks again. */
        return false;
    }
    tn_topic_t *t = tn_broker_topic_find(rm->o.broker, pt->topic);
    if (t == NULL) {
        /* The engine has not made the topic yet (its catalog follows the
         * record a moment after the metastore applied it): a copy opened
         * now would make the topic's directory without its stamp, and a
         * node stopped before the catalog wrote one would take those
         * records at its next start for whatever topic of the name is
         * recorded by then. The tick asks again. */
        return false;
    }
    uint64_t hook = test_own_beside(pt);
    tn_plog_t *pl = engine_aside(rm, pt);
    if (hook != 0 && engine_local(rm, pt, NULL))
        return false; /* TN_TEST: wait until the engine sets it aside */
    if (pl != NULL && hook == 0) {
        hold_log(pt, pl, SRC_ENGINE);
        pl->on_progress = NULL;
        return true;
    }
    if (engine_local(rm, pt, &pl)) {
        /* The engine still serves it (a demotion the engine follows
         * once its topic is idle): the leader's log, the same file. */
        hold_log(pt, pl, SRC_ENGINE);
        return true;
    }
    if (test_open_held(pt))
        return false; /* TN_TEST: the tick asks again */
    pt->src = SRC_OPENING;
    pt->busy++;
    rm->working++;
    pt->open_stamp = tn_topic_stamp_due(t);
    if (uv_queue_work(rm->o.loop, &pt->open_work, open_work, open_done) != 0) {
        pt->busy--;
        rm->working--;
        pt->src = SRC_NONE;
    }
    return false;
}

static void on_own_closed(tn_plog_t *plog)
{
    part_t *pt = plog->data;
    pt->busy--;
    pt->src = SRC_NONE;
    pt->plog = NULL;
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (pt->handed)
        follow_placement(pt->rm, pt);
}

/* Give up our own log (the engine takes over, or the partition went). */
static void release_own(part_t *pt)
{
    if (pt->src != SRC_OWN)
        return;
    pt->src = SRC_CLOSING;
    pt->busy++;
    pt->plog->data = pt;
    pt->plog->on_progress = NULL;
    tn_plog_close(pt->plog, on_own_closed);
}

/* --- leader: hand-over to the engine ---------------------------------------------- */

static void leader_begin(part_t *pt);
static void test_gap(part_t *pt);

/* Ask for the epoch start again START_AGAIN_MS from now (the tick's
 * leader_begin), after the disk refused it for space. */
static void start_later(part_t *pt)
{
    pt->start_pending = true;
    pt->start_after = now_ms(pt->rm) + START_AGAIN_MS;
}

static void on_start_done(tn_append_t *req, int status)
{
    start_t *st = TN_CONTAINER_OF(req, start_t, req);
    part_t *pt = st->pt;
    uint32_t epoch = st->epoch;
    bool current = pt->start_cur == st;
    for (start_t **pp = &pt->starts; *pp != NULL; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    tn_free(st);
    pt->busy--;
    if (current)
        pt->start_cur = NULL;
    if (status == TN_ERANGE)
        /* A restarted node leads, for a moment, the epoch its replayed
         * metastore names, whose start its log already holds: it never
         * leads an epoch again (a tail lost meanwhile would let two logs
         * differ under one epoch) and waits for the newer one the
         * metastore gives it. */
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": epoch %" PRIu32
               " began here before; serving waits for a newer epoch",
               pt->topic, pt->p, epoch);
    else if (status != 0 && status != TN_EFENCED)
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "replica %s/%" PRIu32 ": epoch %" PRIu32 " start record: %s%s", pt->topic, pt->p,
                  epoch, tn_strerror(status), tn_io_nospace(status) ? "; trying again" : "");
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status == 0 && current)
        test_gap(pt);
    /* A full disk failed the record alone (the log is not failed, and
     * its epoch may be asked for again: plog.c epoch_prepare): the tick
     * asks again, so the partition serves once space is freed. A newer
     * epoch asked meanwhile made this one not current. */
    if (tn_io_nospace(status) && current && pt->ready && pt->start_epoch == epoch)
        start_later(pt);
    /* A newer epoch asked meanwhile has begun already (leader_begin does
     * not wait for an older record); this covers a leader_begin that
     * could not run then. */
    leader_begin(pt);
}

static void leader_begin(part_t *pt)
{
    /* Never behind an older record still waiting for its hw: one asked
     * just before a resignation waits for a hw that only this epoch's
     * start moves (case 07: led, resigned and led again within 8 ms after
     * all three nodes were killed, the partition never served again). */
    if (!pt->start_pending || !pt->ready || now_ms(pt->rm) < pt->start_after)
        return;
    start_t *st = tn_calloc(1, sizeof(*st));
    if (st == NULL) {
        TN_LOG_RL(TN_LOG_ERROR, 5000,
                  "replica %s/%" PRIu32 ": cannot begin epoch %" PRIu32 ": out of memory; "
                  "trying again on the tick",
                  pt->topic, pt->p, pt->start_epoch);
        return;
    }
    pt->start_pending = false;
    st->pt = pt;
    st->epoch = pt->start_epoch;
    st->req.data = pt;
    pt->busy++;
    pt->start_cur = st;
    st->next = pt->starts;
    pt->starts = st;
    int rc = tn_plog_begin_epoch(pt->plog, &st->req, st->epoch, on_start_done);
    if (rc != 0) {
        pt->busy--;
        pt->start_cur = NULL;
        pt->starts = st->next;
        tn_free(st);
        /* The disk above its high watermark: asked again a moment
         * later, as one that found the disk full. */
        bool again = rc == TN_EDISKHIGH;
        if (again)
            start_later(pt);
        TN_LOG_RL(TN_LOG_ERROR, 10000,
                  "replica %s/%" PRIu32 ": cannot begin epoch %" PRIu32 ": %s%s", pt->topic, pt->p,
                  pt->start_epoch, tn_strerror(rc), again ? "; trying again" : "");
    }
}

#ifdef TN_TEST
/* Test hooks (a ternd built on the TN_TEST libraries: ternd-test) read a
 * variable of the environment holding comma-separated PREFIX=N pairs: the
 * N of the first PREFIX topic starts with, else 0. */
static uint64_t test_topic_num(const char *var, const char *topic)
{
    const char *spec = getenv(var);
    while (spec != NULL && *spec != '\0') {
        const char *eq = strchr(spec, '=');
        if (eq == NULL)
            return 0;
        size_t plen = (size_t)(eq - spec);
        char *end = NULL;
        unsigned long long n = strtoull(eq + 1, &end, 10);
        if (strncmp(topic, spec, plen) == 0)
            return (uint64_t)n;
        spec = end != NULL && *end == ',' ? end + 1 : "";
    }
    return 0;
}

/* TERN_TEST_EPOCH_START_DELAY: how long (ms) a new leader of topic waits,
 * once the partition is handed to the engine, before it gates the
 * engine's log and starts its epoch. It widens the window in which the
 * engine holds a led partition that is not serving yet, for the tests of
 * the publish path (tests/cluster/test_nsq_replicated.py). */
static uint64_t test_take_delay(const char *topic)
{
    return test_topic_num("TERN_TEST_EPOCH_START_DELAY", topic);
}

/* TERN_TEST_LEADER_GAP: how many offsets a leader of topic skips
 * (tn_plog_advance) right after its first epoch-start record, once per
 * partition and process: the gap the queue engine's recovery leaves when
 * a channel refers to a tail its log lost, which followers must skip
 * (tests/cluster/test_replica.py). */
static void on_test_gap(tn_plog_advance_t *req, int status)
{
    part_t *pt = req->data;
    pt->busy--;
    TN_LOG(TN_LOG_NOTICE, "replica %s/%" PRIu32 ": TN_TEST gap to %" PRIu64 ": %s", pt->topic,
           pt->p, pt->reset_to, status == 0 ? "made" : tn_strerror(status));
    if (pt->dead || pt->rm->closing)
        part_maybe_free(pt);
}

static void test_gap(part_t *pt)
{
    uint64_t n = test_topic_num("TERN_TEST_LEADER_GAP", pt->topic);
    if (n == 0 || pt->test_gapped || pt->plog == NULL)
        return;
    pt->test_gapped = true;
    pt->reset_to = tn_plog_written_next(pt->plog) + n;
    memset(&pt->adv, 0, sizeof(pt->adv));
    pt->adv.data = pt;
    pt->busy++;
    int rc = tn_plog_advance(pt->plog, &pt->adv, pt->reset_to, on_test_gap);
    if (rc != 0)
        on_test_gap(&pt->adv, rc);
}
/* TERN_TEST_OWN_LOG: a follower of topic opens a log of its own even when
 * the engine holds one set aside for the partition (once the engine has
 * set it aside): the state a lookup during the topic's growth left
 * (ensure_log). 1: the set-aside log is closed as after that state
 * (abandon_aside); 2: it is left open, stale, for leader_take to find
 * (tests/cluster/test_stale_take.py). */
static uint64_t test_own_beside(const part_t *pt)
{
    return test_topic_num("TERN_TEST_OWN_LOG", pt->topic);
}

/* Whether the file the environment variable var names exists and one of
 * its lines is "topic/partition" of pt. */
static bool test_file_lists(const char *var, const part_t *pt)
{
    const char *path = getenv(var);
    FILE *f = path != NULL && *path != '\0' ? fopen(path, "r") : NULL;
    if (f == NULL)
        return false;
    char want[300], line[300];
    snprintf(want, sizeof(want), "%s/%" PRIu32, pt->topic, pt->p);
    bool hit = false;
    while (!hit && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        hit = strcmp(line, want) == 0;
    }
    fclose(f);
    return hit;
}

/* TERN_TEST_APPEND_ENOSPC: the path of a file; while it exists and one of
 * its lines is "topic/partition", this node's appends of records it
 * fetched for that partition fail with ENOSPC, as on a full disk, and the
 * rest of the node works on (tests/cluster/test_move_stall.py: a move
 * target that refuses the copy for good). */
static bool test_append_fails(const part_t *pt)
{
    return test_file_lists("TERN_TEST_APPEND_ENOSPC", pt);
}

/* TERN_TEST_COPY_OPEN_HOLD: the path of a file; while it exists and one
 * of its lines is "topic/partition", this node's replica manager opens no
 * copy of its own of that partition (ensure_log: the tick asks again), so
 * the leader's channel state comes to the follower before the copy is
 * open and marked a replica's (tests/cluster/test_move_faults.py,
 * test_target_killed_before_its_copy_opens). A notice says when the hold
 * begins. */
static bool test_open_held(part_t *pt)
{
    bool held = test_file_lists("TERN_TEST_COPY_OPEN_HOLD", pt);
    if (held && !pt->test_open_held)
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": opening its copy held (TERN_TEST_COPY_OPEN_HOLD)",
               pt->topic, pt->p);
    pt->test_open_held = held;
    return held;
}

/* TERN_TEST_UNMARK_DELAY_MS: taking away the dropped mark of a copy of
 * topic given back waits this long first (on the mark queue's worker),
 * so a test can stop the node while the copy is still marked
 * (tests/cluster/test_chan_given_back.py). */
static void test_unmark_delay(const char *topic, uint32_t p)
{
    uint64_t ms = test_topic_num("TERN_TEST_UNMARK_DELAY_MS", topic);
    if (ms == 0)
        return;
    TN_LOG(TN_LOG_NOTICE,
           "replica %s/%" PRIu32 ": taking its dropped mark away held %" PRIu64
           " ms (TERN_TEST_UNMARK_DELAY_MS)",
           topic, p, ms);
    uv_sleep((unsigned int)ms);
    TN_LOG(TN_LOG_NOTICE, "replica %s/%" PRIu32 ": taking its dropped mark away now", topic, p);
}

/* TERN_TEST_QUARANTINE_HOLD: a copy of topic marked dropped stays marked
 * where it is while the node runs (not moved at once, as when something
 * keeps it in use), so a test can give the partition back before the move
 * (tests/cluster/test_remove.py). */
static bool test_hold_quarantine(const char *topic)
{
    return test_topic_num("TERN_TEST_QUARANTINE_HOLD", topic) != 0;
}

/* TERN_TEST_REPAIR_DELAY_MS: a repair of topic on this node holds its
 * slot (max-repairs-per-node) this long before its first read; and
 * TERN_TEST_REPAIR_READ_DELAY_MS: each repair read of topic this node
 * serves holds its slot this long (on the worker) before it reads. Both
 * make repairs overlap, so a test sees the cap at work
 * (tests/cluster/test_repair.py, RepairCap). */
static uint64_t test_repair_delay(const char *topic)
{
    return test_topic_num("TERN_TEST_REPAIR_DELAY_MS", topic);
}

static void test_repair_read_delay(const char *topic)
{
    uint64_t ms = test_topic_num("TERN_TEST_REPAIR_READ_DELAY_MS", topic);
    if (ms > 0)
        uv_sleep((unsigned int)ms);
}
#else
static inline uint64_t test_repair_delay(const char *topic)
{
    (void)topic;
    return 0;
}

static inline void test_repair_read_delay(const char *topic)
{
    (void)topic;
}

static uint64_t test_own_beside(const part_t *pt)
{
    (void)pt;
    return 0;
}

static inline bool test_append_fails(const part_t *pt)
{
    (void)pt;
    return false;
}

static inline bool test_open_held(part_t *pt)
{
    (void)pt;
    return false;
}

static inline bool test_hold_quarantine(const char *topic)
{
    (void)topic;
    return false;
}

static inline void test_unmark_delay(const char *topic, uint32_t p)
{
    (void)topic;
    (void)p;
}

static inline uint64_t test_take_delay(const char *topic)
{
    (void)topic;
    return 0;
}

static inline void test_gap(part_t *pt)
{
    (void)pt;
}
#endif

static void hand_over(part_t *pt);
static void reopen_step(part_t *pt);

/* The engine's log of a partition this node is to lead ends at end,
 * below the epoch's start: the core counted records (its log as fed,
 * which the ISR acknowledged) that this log object does not hold. Never
 * led from: the epoch-start record would land at end, below followers'
 * hw (they refuse to truncate there and leave the ISR), and the records
 * between would not be served. The cause seen: the engine took back a
 * log it set aside while the manager followed on a log object of its own
 * (stale, not short on disk). So the partition is taken back from the
 * engine and handed over again once its log is closed
 * (tn_topic_part_abandon): the engine opens it from its files. Once per
 * leader epoch: a log that is short again is short on disk; it stays not
 * ready (said once), and a newer state (another leader) ends it
 * (docs/replication.md, "A stale engine log"). */
static void stale_take(part_t *pt, uint64_t end)
{
    uint32_t epoch = pt->core.ps.leader_epoch;
    if (pt->reopen_epoch == epoch) {
        if (!pt->stale_logged)
            TN_LOG(TN_LOG_ERROR,
                   "replica %s/%" PRIu32 ": opened from its files, the log still ends at %" PRIu64
                   ", below epoch %" PRIu32 "'s start %" PRIu64
                   ": not leading from it; not serving until a newer state",
                   pt->topic, pt->p, end, epoch, pt->core.epoch_start);
        pt->stale_logged = true;
        return;
    }
    TN_LOG(TN_LOG_ERROR,
           "replica %s/%" PRIu32 ": the engine's log ends at %" PRIu64 ", below epoch %" PRIu32
           "'s start %" PRIu64 ": not leading from it; opening the partition's files again",
           pt->topic, pt->p, end, epoch, pt->core.epoch_start);
    pt->reopen_epoch = epoch;
    pt->stale_logged = false;
    pt->reopening = true;
    pt->handed = false;
    follow_placement(pt->rm, pt);
    reopen_step(pt);
}

/* stale_take's next step, on the tick: once the engine set the log aside,
 * it is closed and the partition handed over again. */
static void reopen_step(part_t *pt)
{
    if (!pt->reopening)
        return;
    if (pt->core.role != TN_REPL_LEADER || pt->handed) {
        pt->reopening = false; /* resigned, or handed again meanwhile */
        return;
    }
    tn_topic_t *t = engine_topic(pt->rm, pt->topic);
    if (t == NULL)
        return; /* busy: the tick asks again */
    if (tn_topic_part_local(t, pt->p)) {
        follow_placement(pt->rm, pt); /* not set aside yet */
        return;
    }
    if (tn_topic_part_abandon(t, pt->p) != 0)
        return;
    pt->reopening = false;
    hand_over(pt);
}

/* The engine opened (or took back) the partition: gate it and start the
 * epoch. */
static void leader_take(part_t *pt)
{
    tn_plog_t *pl = NULL;
    if (pt->ready || pt->core.role != TN_REPL_LEADER || !pt->handed || engine_busy(pt->rm, pt) ||
        !engine_local(pt->rm, pt, &pl))
        return; /* (a stale topic's log is deleted, not led from: the tick) */
    if (now_ms(pt->rm) < pt->handed_at + test_take_delay(pt->topic))
        return; /* TN_TEST only: the tick takes it later */
    uint64_t end = tn_plog_written_next(pl);
    if (end < pt->core.epoch_start) {
        stale_take(pt, end);
        return;
    }
    hold_log(pt, pl, SRC_ENGINE);
    pt->ready = true;
    tn_plog_set_gated(pl, true);
    tn_plog_set_hw(pl, pt->core.hw);
    if (pt->rm->lead_cb != NULL)
        pt->rm->lead_cb(pt->rm->lead_arg, pt->topic, pt->p, pl);
    if (end != pt->core.epoch_start)
        TN_LOG(TN_LOG_WARN,
               "replica %s/%" PRIu32 ": the engine's log ends at %" PRIu64
               ", the epoch was to start at %" PRIu64,
               pt->topic, pt->p, end, pt->core.epoch_start);
    leader_begin(pt);
    TN_LOG(TN_LOG_NOTICE, "replica %s/%" PRIu32 ": leading epoch %" PRIu32 " from offset %" PRIu64,
           pt->topic, pt->p, pt->core.ps.leader_epoch, end);
}

/* The channel logs this node kept as a follower (cluster/setrepl.h) are
 * closed: the engine may open them with the partition. */
static void on_channels_released(void *arg)
{
    part_t *pt = arg;
    pt->busy--;
    pt->releasing = false;
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (pt->core.role != TN_REPL_LEADER)
        return; /* resigned meanwhile */
    pt->released = true;
    hand_over(pt);
}

static void hand_over(part_t *pt)
{
    if (pt->handed || pt->releasing)
        return;
    tn_replica_t *rm = pt->rm;
    if (rm->o.release != NULL && !pt->released) {
        pt->releasing = true;
        pt->busy++;
        rm->o.release(rm->o.release_arg, pt->topic, pt->p, on_channels_released, pt);
        return;
    }
    pt->released = false;
    pt->handed = true;
    pt->handed_at = now_ms(rm);
    pt->ready = false;
    if (pt->src == SRC_OWN) {
        /* Our log wrote the files: the engine must open them afresh, not
         * take back a log it set aside before (leader_take checks too). */
        pt->aside_stale = !abandon_aside(pt);
        release_own(pt); /* follow_placement once closed */
        return;
    }
    if (pt->src == SRC_ENGINE) {
        pt->plog = NULL;
        pt->src = SRC_NONE;
    }
    follow_placement(pt->rm, pt);
    leader_take(pt);
}

static void resign(part_t *pt)
{
    /* The gate stays on: should the engine take one more append before
     * it follows the placement (its topic busy), that append waits for a
     * hw that no longer moves and is failed below, never acknowledged
     * unreplicated. A follower's copies never wait for the gate. */
    if (pt->ready && pt->plog != NULL)
        tn_plog_fail_gated(pt->plog, TN_EFENCED);
    if (pt->ready && pt->rm->lead_cb != NULL)
        pt->rm->lead_cb(pt->rm->lead_arg, pt->topic, pt->p, NULL);
    pt->ready = false;
    pt->start_pending = false;
    if (pt->handed) {
        pt->handed = false;
        follow_placement(pt->rm, pt);
    }
    /* The engine's log, set aside (or still served while the engine's
     * topic is busy: appends wait, invariant 1), is let go. A log of our
     * own stays (a follower follows on it), and so does one being opened
     * or closed: its worker or close callback sets plog and src, and
     * clearing them here raced it (a leader-elect that resigned while its
     * log was opening held a NULL log when the open ended). */
    if (pt->src == SRC_ENGINE) {
        pt->src = SRC_NONE;
        pt->plog = NULL;
    }
    (void)ensure_log(pt);
}

/* --- ISR proposals ----------------------------------------------------------------- */

/* Whether ps, led by this node, is a move that the metastore leader
 * completes next by handing the leadership to another node: this node is
 * not in the target and every target member is in isr[0..nisr). */
static bool hands_over(const tn_replica_t *rm, const tn_pstate_t *ps, const tn_pstate_member_t *isr,
                       uint32_t nisr)
{
    if (ps->leader != rm->o.node || ps->ntarget == 0)
        return false;
    for (uint32_t i = 0; i < ps->ntarget; i++) {
        bool in = false;
        for (uint32_t j = 0; j < nisr; j++)
            in |= isr[j].node == ps->target[i];
        if (ps->target[i] == rm->o.node || !in)
            return false;
    }
    return true;
}

/* Deliveries of pt held or not (the engine's flag is the replica
 * manager's alone: the engine never clears it). Held on a node the state
 * does not name the leader (it resigns right after, and the flag stays
 * until it leads again), while a move's hand-over is proposed (below),
 * and during a take-over hold (handfence.h).
 *
 * A leader about to hand over stops delivering before the ISR change
 * that lets the metastore complete the move is even proposed, so the new
 * leader, which serves only after the completion (applied after that
 * change), never delivers while this node still does: otherwise, until
 * this node's replica applied the completion, it could deliver a message
 * whose ack the new leader answered (cluster_moves_f1 saw it). Appends,
 * settles and the leases out go on. The hold ends with a state that says
 * otherwise (an abort, the target out of the ISR) or a refused proposal;
 * a completion sets the log aside (and a later lead here clears it). */
#ifdef TN_TEST
/* TERN_TEST_HANDFENCE_OFF=n (ternd-test), so a test can show what the
 * rules prevent: bit 0 (1) no take-over hold (handfence.h); bit 1 (2) no
 * hold of the old leader's own (a move's hand-over, or a state naming
 * another leader); bit 2 (4) no delivery lease. */
static bool handfence_off(int bit)
{
    const char *v = getenv("TERN_TEST_HANDFENCE_OFF");
    return v != NULL && (atoi(v) & bit) != 0;
}
#endif

static void hold_deliveries(part_t *pt)
{
    tn_topic_t *t = engine_topic(pt->rm, pt->topic);
    if (t == NULL)
        return;
    bool requeued = pt->ps.ntarget > 0 && (pt->requeuing || pt->released_move == pt->ps.move_id);
    bool own = pt->ps.leader != pt->rm->o.node || pt->hold_isr || requeued ||
               hands_over(pt->rm, &pt->ps, pt->ps.isr, pt->ps.nisr);
#ifdef TN_TEST
    if (handfence_off(2))
        own = false;
#endif
    tn_topic_part_hold(t, pt->p, own || tn_handfence_holds(&pt->fence, now_ms(pt->rm)));
}

/* A state ps reached pt (before pt->ps takes it): a node that takes the
 * lead from another live node holds its deliveries until that node is
 * known to have stopped (handfence.h). */
static void note_leader_change(part_t *pt, const tn_pstate_t *ps)
{
    tn_replica_t *rm = pt->rm;
    tn_handfence_change_t c = {.self = rm->o.node, .leader = ps->leader, .epoch = ps->leader_epoch};
    if (pt->has_ps) {
        c.old_leader = pt->ps.leader == TN_PSTATE_NONE ? 0 : pt->ps.leader;
        c.old_epoch = pt->ps.leader_epoch;
    }
    if (c.old_leader != 0 && c.old_leader != rm->o.node) {
        const tn_meta_member_t *mem =
            tn_meta_member_find(tn_meta_state(rm->o.meta), (uint64_t)c.old_leader);
        c.old_fenced = mem == NULL || mem->fenced;
    }
#ifdef TN_TEST
    if (handfence_off(1))
        c.old_leader = 0;
#endif
    uint32_t was = pt->fence.node != 0 ? pt->fence.epoch : 0;
    if (tn_handfence_change(&pt->fence, &rm->fence_cfg, &c, now_ms(rm)) && pt->fence.epoch != was)
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": took the lead (epoch %" PRIu32 ") from live node %" PRIu32
               ": deliveries held until it stops",
               pt->topic, pt->p, ps->leader_epoch, c.old_leader);
}

/* node fetched pt (or reported a flush) with leader_epoch: the old
 * leader doing so with this leader's epoch ends a take-over hold. */
static void note_fetched(part_t *pt, uint32_t node, uint32_t leader_epoch)
{
    if (pt != NULL && pt->fence.node != 0 && tn_handfence_fetched(&pt->fence, node, leader_epoch))
        hold_deliveries(pt);
}

/* A leader's delivery lease, renewed from its metastore replica's newest
 * confirmation (handfence.h); every tick. */
static void renew_lease(part_t *pt)
{
    tn_topic_t *t = engine_topic(pt->rm, pt->topic);
#ifdef TN_TEST
    if (t != NULL && handfence_off(4)) {
        tn_topic_part_lease(t, pt->p, 0);
        return;
    }
#endif
    if (t != NULL)
        tn_topic_part_lease(
            t, pt->p,
            tn_handfence_lease_until(&pt->rm->fence_cfg, tn_meta_confirmed_at(pt->rm->o.meta)));
}

static void on_isr_done(tn_meta_req_t *req, int status)
{
    part_t *pt = req->data;
    tn_replica_t *rm = pt->rm;
    pt->busy--;
    pt->isr_busy = false;
    if (pt->dead || rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status == 0) {
        rm->st.isr_shrinks += pt->isr_removes;
        rm->st.isr_expands += pt->isr_adds;
        return; /* the STATE follows */
    }
    TN_LOG_RL(TN_LOG_NOTICE, 5000, "replica %s/%" PRIu32 ": ISR change refused: %s", pt->topic,
              pt->p, tn_strerror(status));
    if (pt->hold_isr) {
        pt->hold_isr = false;
        hold_deliveries(pt);
    }
    /* Not again at once: the core proposes again after its timeout, or
     * the state it lacked arrives. */
    pt->isr_retry_at = now_ms(rm) + ISR_RETRY_MS;
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(rm->o.meta), pt->topic, pt->p);
    tn_repl_event_t ev = {.type = TN_REPL_EV_ISR_REFUSED, .now = now_ms(rm)};
    ev.u.refused.partition_epoch = ps != NULL ? ps->partition_epoch : 0;
    run(pt, &ev);
}

static void on_released(void *arg, int status)
{
    part_t *pt = arg;
    tn_replica_t *rm = pt->rm;
    pt->busy--;
    pt->requeuing = false;
    if (pt->dead || rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status == 0) {
        pt->released_move = pt->release_for;
        pt->released_at = now_ms(rm);
    } else {
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "replica %s/%" PRIu32 ": requeuing the leases before a hand-over: %s (tried "
                  "again)",
                  pt->topic, pt->p, tn_strerror(status));
        pt->isr_retry_at = now_ms(rm) + ISR_RETRY_MS;
    }
    hold_deliveries(pt);
}

/* Before the ISR change that lets the metastore complete a move taking
 * the leadership off this node: deliveries held, every lease out on the
 * partition requeued as a REQ record that keeps its attempts, and those
 * records confirmed on the ISR and on the target members catching up
 * (their channel state caught up, so the settle rule counts them:
 * setrepl.h, tn_setrepl_commit_with), so the new leader delivers those
 * messages again with their attempts (issue 24: channel state, attempts
 * included, moves with the partition). The proposal waits for it (the
 * core proposes again). */
static void release_leases(part_t *pt)
{
    tn_topic_t *t = engine_topic(pt->rm, pt->topic);
    if (t == NULL)
        return;
    pt->requeuing = true;
    pt->release_for = pt->core.ps.move_id;
    pt->busy++;
    hold_deliveries(pt);
    if (tn_topic_part_requeue_leases(t, pt->p, on_released, pt) != 0)
        on_released(pt, UV_ENOMEM);
}

static void propose_isr(part_t *pt, const tn_repl_action_t *a)
{
    tn_replica_t *rm = pt->rm;
    if (pt->isr_busy || pt->requeuing || now_ms(rm) < pt->isr_retry_at)
        return; /* the core proposes again after its timeout */
    if (hands_over(rm, &pt->core.ps, a->isr, a->nisr) && pt->released_move != pt->core.ps.move_id) {
        bool adds_any = false;
        for (uint32_t i = 0; i < a->nisr; i++)
            adds_any |= tn_pstate_isr_find(&pt->core.ps, a->isr[i].node) < 0;
        if (adds_any) {
            release_leases(pt);
            return;
        }
    }
    uint32_t adds = 0, removes = 0;
    for (uint32_t i = 0; i < a->nisr; i++)
        adds += tn_pstate_isr_find(&pt->core.ps, a->isr[i].node) < 0;
    for (uint32_t i = 0; i < pt->core.ps.nisr; i++) {
        bool kept = false;
        for (uint32_t j = 0; j < a->nisr; j++)
            kept |= a->isr[j].node == pt->core.ps.isr[i].node;
        removes += !kept;
    }
    pt->isr_adds = adds;
    pt->isr_removes = removes;
    memset(&pt->isr_req, 0, sizeof(pt->isr_req));
    pt->isr_req.data = pt;
    pt->isr_busy = true;
    pt->busy++;
    if (adds > 0 && hands_over(rm, &pt->core.ps, a->isr, a->nisr)) {
        pt->hold_isr = true;
        pt->hold_pe = a->expected_pe;
        hold_deliveries(pt);
    }
    int rc = tn_meta_propose_isr(rm->o.meta, &pt->isr_req, pt->topic, pt->p, a->leader_epoch,
                                 a->expected_pe, a->isr, a->nisr, a->channels_checked, on_isr_done);
    if (rc != 0) {
        pt->isr_busy = false;
        pt->busy--;
        if (pt->hold_isr) {
            pt->hold_isr = false;
            hold_deliveries(pt);
        }
    } else if (removes > 0) {
        TN_LOG(TN_LOG_NOTICE, "replica %s/%" PRIu32 ": proposing to shrink the ISR to %" PRIu32,
               pt->topic, pt->p, a->nisr);
    }
}

/* --- follower: appends and truncations ------------------------------------------- */

/* The end of an append of fetched records: a failure is kept (append_err)
 * and logged at most every APPEND_LOG_MS per partition, with how many were
 * not (the core fetches the same records again, so a disk that is full
 * or read-only fails it over and over; the leader fails a move that waits
 * on this copy after move-stall-timeout: cluster/movestall.h). */
static void report_append_err(part_t *pt);
static const char *member_addr(tn_replica_t *rm, uint32_t node);

static void append_result(part_t *pt, int status)
{
    if (status == 0) {
        if (pt->append_err != 0)
            TN_LOG(TN_LOG_NOTICE, "replica %s/%" PRIu32 ": appending fetched records again",
                   pt->topic, pt->p);
        pt->append_err = 0;
        if (pt->err_told != 0) {
            pt->err_told = 0;
            pt->err_clear_want = true;
        }
        report_append_err(pt);
        return;
    }
    pt->append_err = status;
    report_append_err(pt);
    uint64_t now = now_ms(pt->rm);
    if (pt->append_log_at != 0 && now < pt->append_log_at + APPEND_LOG_MS) {
        pt->append_unlogged++;
        return;
    }
    TN_LOG(TN_LOG_WARN,
           "replica %s/%" PRIu32 ": appending fetched records at %" PRIu64 ": %s (%" PRIu32
           " more failures not logged)",
           pt->topic, pt->p, pt->core.end, tn_strerror(status), pt->append_unlogged);
    pt->append_log_at = now;
    pt->append_unlogged = 0;
}

static void on_append_done(tn_append_t *req, int status)
{
    part_t *pt = req->data;
    pt->busy--;
    pt->appending = false;
    tn_buf_reset(&pt->appbuf);
    tn_free(pt->appep);
    pt->appep = NULL;
    append_result(pt, status);
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    poll_log(pt); /* written: fetch again (the watch tells of the flush) */
    send_fetches(pt->rm);
}

static void follower_append(part_t *pt, const tn_repl_action_t *a)
{
    const tn_fetch_rpart_t *rp = pt->rm->cur;
    if (rp == NULL || pt->appending || pt->truncating || pt->plog == NULL ||
        (pt->src != SRC_OWN && pt->src != SRC_ENGINE))
        return;
    if (pt->src == SRC_ENGINE && engine_local(pt->rm, pt, NULL))
        return; /* invariant 1: the engine still serves it */
    tn_buf_reset(&pt->appbuf);
    if (tn_buf_append(&pt->appbuf, rp->records, rp->records_len) != 0)
        return;
    pt->appep = rp->nepochs > 0 ? tn_calloc(rp->nepochs, sizeof(*pt->appep)) : NULL;
    if (rp->nepochs > 0 && pt->appep == NULL)
        return;
    for (uint32_t i = 0; i < rp->nepochs; i++)
        tn_fetch_rpart_epoch(rp, i, &pt->appep[i]);
    memset(&pt->app, 0, sizeof(pt->app));
    pt->app.data = pt;
    pt->appending = true;
    pt->want = false;
    pt->busy++;
    int rc = test_append_fails(pt)
                 ? UV_ENOSPC
                 : tn_plog_append_raw(pt->plog, &pt->app, tn_buf_data(&pt->appbuf),
                                      tn_buf_size(&pt->appbuf), a->offset, pt->appep, rp->nepochs,
                                      on_append_done);
    if (rc != 0) {
        pt->appending = false;
        pt->busy--;
        tn_free(pt->appep);
        pt->appep = NULL;
        append_result(pt, rc);
    }
}

static void on_trunc_done(tn_plog_trunc_t *req, int status)
{
    part_t *pt = req->data;
    pt->busy--;
    pt->truncating = false;
    if (status != 0) {
        /* The core fetches again only after fetch_idle_ms (a truncation
         * that changed nothing); log once per TRUNC_LOG_MS with how many
         * went unlogged, so a partition that cannot truncate is seen
         * without flooding the log. */
        uint64_t now = now_ms(pt->rm);
        if (pt->trunc_logged_at == 0 || now >= pt->trunc_logged_at + TRUNC_LOG_MS) {
            TN_LOG(TN_LOG_ERROR,
                   "replica %s/%" PRIu32 ": truncating its log to %" PRIu64 " (hw %" PRIu64
                   "): %s%s (%" PRIu32 " more failures since the last report)",
                   pt->topic, pt->p, pt->trunc_asked, pt->core.hw, tn_strerror(status),
                   status == TN_ERANGE ? ": the batch holding that point starts below the hw, "
                                         "it stays out of the ISR"
                                       : "",
                   pt->trunc_unlogged);
            pt->trunc_logged_at = now;
            pt->trunc_unlogged = 0;
        } else {
            pt->trunc_unlogged++;
        }
        if (status == TN_ERANGE)
            pt->rm->st.truncations_refused++;
    } else {
        if (req->cut_to < pt->trunc_asked)
            TN_LOG(TN_LOG_NOTICE,
                   "replica %s/%" PRIu32 ": the divergence point %" PRIu64
                   " is inside an atomic batch: truncated to its start %" PRIu64,
                   pt->topic, pt->p, pt->trunc_asked, req->cut_to);
        if (pt->trunc_logged_at != 0 || pt->trunc_unlogged != 0)
            TN_LOG(TN_LOG_NOTICE,
                   "replica %s/%" PRIu32 ": truncated its log to %" PRIu64 " after %" PRIu32
                   " failures not logged",
                   pt->topic, pt->p, req->cut_to, pt->trunc_unlogged);
        pt->trunc_logged_at = 0;
        pt->trunc_unlogged = 0;
    }
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    pt->core_fed = false; /* feed the log as it is now, whatever changed */
    poll_log(pt);
    send_fetches(pt->rm);
}

/* The guard of a follower's truncation and of its reset, which truncates
 * first: false when the log cannot be cut now (a truncation or an append
 * under way, no log, or one the engine leads from); the core asks again
 * after its timeout. Else pt->trunc is ready for the plog call, the
 * partition is marked truncating (no fetch meanwhile) and busy: true. */
static bool trunc_begin(part_t *pt)
{
    if (pt->truncating || pt->appending || pt->plog == NULL ||
        (pt->src != SRC_OWN && pt->src != SRC_ENGINE))
        return false;
    if (pt->src == SRC_ENGINE && engine_local(pt->rm, pt, NULL))
        return false;
    memset(&pt->trunc, 0, sizeof(pt->trunc));
    pt->trunc.data = pt;
    pt->truncating = true;
    pt->want = false;
    pt->busy++;
    return true;
}

static void follower_truncate(part_t *pt, uint64_t offset)
{
    if (!trunc_begin(pt))
        return;
    pt->rm->st.truncations++;
    if (pt->trunc_logged_at == 0) /* else failing again: on_trunc_done reports it */
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": truncating its log to %" PRIu64 " (hw %" PRIu64 ")",
               pt->topic, pt->p, offset, pt->core.hw);
    /* A point inside an atomic batch (the divergence point is a batch
     * boundary of the leader-of-that-epoch's log, but not always of this
     * copy's: docs/replication.md, "Leader epochs and where a follower's
     * log diverges") cuts at the start of that batch: the batch goes whole
     * and is fetched again. That is safe when the start is at or above the
     * hw, the floor given here: (1) every record below the hw is kept, so
     * nothing acknowledged is dropped from this copy (invariant 4); (2) the
     * records removed between the batch start and the point are at or
     * above the hw, so no acknowledgement counted this copy for them as
     * flushed-and-kept beyond what the leader's log holds: the leader's
     * log reaches the point (it is at most its end of the epoch), so the
     * next fetch, from the batch start, copies them back from it (except
     * offsets that log skipped: docs/replication.md, known faults); (3) a
     * batch never spans two segments, so its start is a cut the log can
     * make. A start below the hw is refused (TN_ERANGE), as a point below
     * it is: reported, never done. */
    pt->trunc_asked = offset;
    int rc = tn_plog_truncate_batch(pt->plog, &pt->trunc, offset, pt->core.hw, on_trunc_done);
    if (rc != 0) {
        pt->truncating = false;
        pt->busy--;
        TN_LOG(TN_LOG_ERROR, "replica %s/%" PRIu32 ": cannot truncate to %" PRIu64 ": %s",
               pt->topic, pt->p, offset, tn_strerror(rc));
        if (rc == TN_ERANGE)
            pt->rm->st.truncations_refused++;
    }
}

/* A reset (ACT_RESET: the leader's log starts above this copy's end)
 * empties the log and restarts it at the leader's start, in two steps
 * that a crash between leaves safe: tn_plog_truncate to 0 with floor 0
 * removes every record and every epochs-history entry (each starts at or
 * above 0), then tn_plog_advance makes the start the next offset. A crash
 * after the first leaves an empty log at 0, which fetches, is answered
 * OUT_OF_RANGE and resets again. The floor is 0, not the hw: every record
 * this copy holds lies below the partition's log start, which the leader's
 * retention already moved past them. */
/* The end of a reset or a skip (both hold the log as a truncation does):
 * the core is fed the log as it is now, whatever changed, and fetches. */
static void relog_finished(part_t *pt)
{
    pt->busy--;
    pt->truncating = false;
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    pt->core_fed = false;
    poll_log(pt);
    send_fetches(pt->rm);
}

static void reset_finished(part_t *pt, int status)
{
    if (status != 0)
        TN_LOG_RL(TN_LOG_ERROR, 5000,
                  "replica %s/%" PRIu32 ": restarting its log at the leader's start %" PRIu64
                  ": %s",
                  pt->topic, pt->p, pt->reset_to, tn_strerror(status));
    else
        TN_LOG(TN_LOG_NOTICE, "replica %s/%" PRIu32 ": its log restarts at %" PRIu64, pt->topic,
               pt->p, pt->reset_to);
    relog_finished(pt);
}

static void on_reset_advanced(tn_plog_advance_t *req, int status)
{
    reset_finished(req->data, status);
}

static void on_reset_emptied(tn_plog_trunc_t *req, int status)
{
    part_t *pt = req->data;
    if (status == 0 && pt->plog != req->plog)
        status = TN_ECLOSED; /* the engine closed it meanwhile (engine_log_closing) */
    if (status == 0 && !pt->dead && !pt->rm->closing) {
        memset(&pt->adv, 0, sizeof(pt->adv));
        pt->adv.data = pt;
        status = tn_plog_advance(pt->plog, &pt->adv, pt->reset_to, on_reset_advanced);
        if (status == 0)
            return;
    }
    reset_finished(pt, status);
}

static void follower_reset(part_t *pt, uint64_t start)
{
    if (!trunc_begin(pt))
        return;
    TN_LOG(TN_LOG_NOTICE,
           "replica %s/%" PRIu32 ": the leader's log starts at %" PRIu64
           " and this copy (end %" PRIu64
           ") holds nothing past it the leader keeps (retention removed what it lacks, or "
           "its epochs are older than the leader's first): emptying it to restart there",
           pt->topic, pt->p, start, tn_plog_written_next(pt->plog));
    pt->reset_to = start;
    pt->rm->st.resets++;
    int rc = tn_plog_truncate(pt->plog, &pt->trunc, 0, 0, on_reset_emptied);
    if (rc != 0)
        reset_finished(pt, rc);
}

/* A skip (ACT_SKIP: the leader's log has a gap where this copy ends) makes
 * the gap's end this log's next offset, durably (tn_plog_advance starts a
 * segment there), so this copy has the leader's gap too and fetches past
 * it. Nothing is removed: a crash before it leaves the log as it was,
 * which fetches, is answered GAP and skips again. */
static void on_skip_advanced(tn_plog_advance_t *req, int status)
{
    part_t *pt = req->data;
    if (status != 0)
        TN_LOG_RL(TN_LOG_ERROR, 5000,
                  "replica %s/%" PRIu32 ": skipping the leader's gap to %" PRIu64 ": %s", pt->topic,
                  pt->p, pt->reset_to, tn_strerror(status));
    else
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": offsets up to %" PRIu64
               " were never assigned on the leader (a gap in its log): this copy skips them",
               pt->topic, pt->p, pt->reset_to);
    relog_finished(pt);
}

static void follower_skip(part_t *pt, uint64_t next)
{
    if (!trunc_begin(pt))
        return;
    pt->reset_to = next;
    pt->rm->st.skips++;
    memset(&pt->adv, 0, sizeof(pt->adv));
    pt->adv.data = pt;
    int rc = tn_plog_advance(pt->plog, &pt->adv, next, on_skip_advanced);
    if (rc != 0)
        on_skip_advanced(&pt->adv, rc);
}

/* --- leader: answering fetches --------------------------------------------------- */

static void answer_item(freq_t *f, const tn_repl_action_t *a, fitem_t *it);

/* The fetch item being fed to its core (the leader's answers fill it). */
static fitem_t *cur_item;

static void run(part_t *pt, const tn_repl_event_t *ev)
{
    tn_repl_actions_t out;
    tn_repl_step(&pt->core, ev, &out);
    for (uint32_t i = 0; i < out.n; i++) {
        const tn_repl_action_t *a = &out.a[i];
        switch (a->type) {
        case TN_REPL_ACT_APPEND_EPOCH_START:
            pt->start_epoch = a->epoch;
            pt->start_pending = true;
            pt->start_after = 0;
            if (pt->ready)
                leader_begin(pt);
            else
                hand_over(pt);
            break;
        case TN_REPL_ACT_ANSWER_RECORDS:
        case TN_REPL_ACT_ANSWER_DIVERGING:
        case TN_REPL_ACT_ANSWER_ERROR:
            if (cur_item != NULL)
                answer_item(NULL, a, cur_item);
            break;
        case TN_REPL_ACT_PROPOSE_ISR:
            propose_isr(pt, a);
            break;
        case TN_REPL_ACT_HW:
            if (pt->ready && pt->plog != NULL)
                tn_plog_set_hw(pt->plog, a->offset);
            break;
        case TN_REPL_ACT_RESIGN:
            resign(pt);
            break;
        case TN_REPL_ACT_FETCH:
            /* While records are being appended or the log cut, the core's
             * view of its log end is behind: it fetches again once the
             * LOG event after them comes. */
            if (pt->appending || pt->truncating || pt->rep_busy ||
                (pt->plog != NULL && (pt->src == SRC_OWN || pt->src == SRC_ENGINE) &&
                 (tn_plog_written_next(pt->plog) != pt->core.end || tn_plog_err(pt->plog) != 0))) {
                /* (A damaged copy fetches again once repaired: step 7.) */
                pt->core.fetching = false; /* never sent: the LOG event asks again */
                break;
            }
            pt->want = true;
            pt->wantf = a->fetch;
            pt->want_node = a->node;
            break;
        case TN_REPL_ACT_APPEND:
            follower_append(pt, a);
            break;
        case TN_REPL_ACT_TRUNCATE:
            follower_truncate(pt, a->offset);
            break;
        case TN_REPL_ACT_RESET:
            follower_reset(pt, a->offset);
            break;
        case TN_REPL_ACT_SKIP:
            follower_skip(pt, a->offset);
            break;
        case TN_REPL_ACT_TRUNCATE_REFUSED:
            pt->rm->st.truncations_refused++;
            TN_LOG(TN_LOG_ERROR,
                   "replica %s/%" PRIu32 ": the leader's log diverges at %" PRIu64
                   ", below this replica's hw %" PRIu64
                   ": refusing to truncate committed records; it stays out of the ISR",
                   pt->topic, pt->p, a->offset, a->hw);
            break;
        case TN_REPL_ACT_REFRESH:
            /* Read after this step: feeding a state from inside one would
             * nest steps. The tick does it. */
            pt->has_ps = false;
            break;
        case TN_REPL_ACT_REPORT:
            pt->report_want = true;
            pt->reportf = a->fetch;
            pt->report_node = a->node;
            break;
        }
    }
}

static void answer_item(freq_t *f, const tn_repl_action_t *a, fitem_t *it)
{
    (void)f;
    it->hw = a->hw;
    switch (a->type) {
    case TN_REPL_ACT_ANSWER_RECORDS:
        it->status = TN_FETCH_RECORDS;
        it->offset = a->offset;
        break;
    case TN_REPL_ACT_ANSWER_DIVERGING:
        it->status = TN_FETCH_DIVERGING;
        it->epoch = a->epoch;
        it->end_offset = a->offset;
        break;
    default:
        it->status = a->err == TN_EFENCED         ? TN_FETCH_FENCED
                     : a->err == TN_EUNKNOWNEPOCH ? TN_FETCH_UNKNOWN_EPOCH
                     : a->err == TN_EREMOTE       ? TN_FETCH_NOT_LEADER
                                                  : TN_FETCH_ERROR;
        break;
    }
}

static void freq_unlink(freq_t *f)
{
    if (f->prev != NULL)
        f->prev->next = f->next;
    else if (f->rm->fetches == f)
        f->rm->fetches = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
}

static void freq_free(freq_t *f)
{
    for (uint32_t i = 0; i < f->n; i++)
        tn_buf_fini(&f->items[i].recs);
    tn_free(f);
}

static void read_work(uv_work_t *w)
{
    freq_t *f = TN_CONTAINER_OF(w, freq_t, work);
    size_t left = f->max_bytes;
    for (uint32_t i = 0; i < f->n; i++) {
        fitem_t *it = &f->items[i];
        if (it->plog == NULL)
            continue;
        size_t max = left > 0 ? left : 1; /* at least one record each */
        if (it->throttled && it->grant < max)
            max = (size_t)it->grant; /* move-rate's grant (above 0: freq_answer) */
        it->read_rc = tn_plog_read_raw(it->plog, it->offset, max, &it->recs, &it->count);
        if (it->read_rc == TN_ENOTFOUND) {
            /* Below the log's start (retention, a drop): the follower
             * restarts there, or it would be answered nothing for ever. */
            tn_plog_stats_t st;
            tn_plog_stats(it->plog, &st);
            if (it->offset < st.first_offset) {
                it->out_of_range = true;
                it->log_start = st.first_offset;
            }
        }
        if (it->read_rc == TN_EGAP) {
            /* Offsets the log never assigned (tn_plog_advance): the
             * follower skips them, or it would be answered nothing for
             * ever. */
            uint64_t end = tn_plog_gap_end(it->plog, it->offset);
            if (end > it->offset) {
                it->gap = true;
                it->log_start = end;
            }
        }
        if (it->read_rc == TN_ENOTFOUND || it->read_rc == TN_EGAP) {
            it->read_rc = 0;
            it->count = 0;
            tn_buf_reset(&it->recs);
        }
        size_t got = tn_buf_size(&it->recs);
        left = got < left ? left - got : 0;
    }
}

static void reply_now(freq_t *f)
{
    tn_replica_t *rm = f->rm;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_fetch_reply_put_head(&b, f->n);
    tn_epoch_entry_t *ep = tn_calloc(TN_FETCH_MAX_EPOCHS, sizeof(*ep));
    if (ep == NULL)
        rc = UV_ENOMEM;
    for (uint32_t i = 0; i < f->n; i++) {
        fitem_t *it = &f->items[i];
        if (it->throttled && it->grant > 0) {
            tn_throttle_settle(&rm->bucket, it->grant, tn_buf_size(&it->recs));
            it->grant = 0;
        }
    }
    for (uint32_t i = 0; rc == 0 && i < f->n; i++) {
        fitem_t *it = &f->items[i];
        part_t *pt = part_find(rm, it->topic, it->p);
        uint64_t hw = pt != NULL ? pt->core.hw : it->hw;
        switch (it->status) {
        case TN_FETCH_RECORDS: {
            if (it->read_rc != 0 || (it->count > 0 && (pt == NULL || pt->plog != it->plog))) {
                rc = tn_fetch_reply_put_status(&b, TN_FETCH_ERROR, hw);
                break;
            }
            if (it->out_of_range) {
                rc = tn_fetch_reply_put_out_of_range(&b, hw, it->log_start);
                break;
            }
            if (it->gap) {
                rc = tn_fetch_reply_put_gap(&b, hw, it->log_start);
                break;
            }
            uint32_t nep = 0;
            if (it->count > 0)
                nep = tn_plog_epochs_range(it->plog, it->offset, it->offset + it->count, ep,
                                           TN_FETCH_MAX_EPOCHS);
            rc = tn_fetch_reply_put_records(&b, hw, it->offset, it->count, ep, nep,
                                            tn_buf_data(&it->recs), tn_buf_size(&it->recs));
            break;
        }
        case TN_FETCH_DIVERGING:
            rc = tn_fetch_reply_put_diverging(&b, hw, it->epoch, it->end_offset);
            break;
        default:
            if (it->status == TN_FETCH_FENCED)
                rm->st.fenced++;
            rc = tn_fetch_reply_put_status(&b, it->status, hw);
            break;
        }
    }
    tn_free(ep);
    rm->st.fetches++;
    if (rc == 0)
        tn_rpc_reply(f->req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    else
        tn_rpc_reply(f->req, 503, "application/json", "{\"error\":\"out of memory\"}", 25);
    tn_buf_fini(&b);
}

static void maybe_close_done(tn_replica_t *rm);

static void read_done(uv_work_t *w, int status)
{
    (void)status;
    freq_t *f = TN_CONTAINER_OF(w, freq_t, work);
    tn_replica_t *rm = f->rm;
    rm->working--;
    freq_unlink(f);
    reply_now(f);
    for (uint32_t i = 0; i < f->n; i++)
        if (f->items[i].plog != NULL)
            tn_plog_unpin(f->items[i].plog); /* freq_answer pinned it */
    freq_free(f);
    if (rm->closing)
        maybe_close_done(rm);
}

/* The first offset of pt's log written recently enough to be read on
 * the loop (WARM_MS); UINT64_MAX when none is known to be. */
static uint64_t warm_from(const part_t *pt)
{
    return pt->warm_at != 0 ? pt->warm_from : UINT64_MAX;
}

/* On the tick: note a leader's log end every WARM_MS. */
static void note_warm(part_t *pt, uint64_t now)
{
    if (pt->core.role != TN_REPL_LEADER || !pt->ready || pt->plog == NULL) {
        pt->warm_at = 0;
        return;
    }
    uint64_t end = tn_plog_written_next(pt->plog);
    if (pt->warm_at == 0) {
        pt->warm_from = pt->warm_next = end;
        pt->warm_at = now;
    } else if (now >= pt->warm_at + WARM_MS) {
        pt->warm_from = pt->warm_next;
        pt->warm_next = end;
        pt->warm_at = now;
    }
}

/* Answer f now: read what there is to read off the loop first. */
static void freq_answer(freq_t *f)
{
    tn_replica_t *rm = f->rm;
    bool read = false, warm = true, cold = false;
    for (uint32_t i = 0; i < f->n; i++) {
        fitem_t *it = &f->items[i];
        it->plog = NULL;
        if (it->status != TN_FETCH_RECORDS)
            continue;
        part_t *pt = part_find(rm, it->topic, it->p);
        if (pt == NULL || !pt->ready || pt->plog == NULL)
            continue;
        if (it->offset < tn_plog_written_next(pt->plog)) {
            if (it->throttled) {
                /* A catch-up read: at most what move-rate grants now
                 * (nothing: answered without records, the follower asks
                 * again), on a worker (it reads from far behind). */
                it->grant = tn_throttle_grant(&rm->bucket, now_ms(rm), f->max_bytes);
                if (it->grant == 0)
                    continue;
                cold = true;
            }
            it->plog = pt->plog;
            read = true;
            warm = warm && it->offset >= warm_from(pt);
        }
    }
    f->working = true;
    if (read && !cold && (f->parked || warm)) {
        /* A fetch that waited at the log end reads only what was written
         * since, and one that came while its records were being written
         * (a follower that keeps up) reads what was written within the
         * last WARM_MS or two: records still in the page cache, a copy
         * rather than disk I/O, so read here, without the two thread
         * hand-offs a worker costs on every acknowledgement's path (half
         * the copies under load: docs/performance.md). A fetch from
         * further behind reads on a worker. */
        read_work(&f->work);
        freq_unlink(f);
        reply_now(f);
        freq_free(f);
        return;
    }
    if (read && !rm->closing) {
        /* The engine owns these logs and may close one while the worker
         * reads it (its topic deleted): pinned, it stays until read_done. */
        for (uint32_t i = 0; i < f->n; i++)
            if (f->items[i].plog != NULL)
                tn_plog_pin(f->items[i].plog);
        rm->working++;
        if (uv_queue_work(rm->o.loop, &f->work, read_work, read_done) == 0)
            return;
        rm->working--;
        for (uint32_t i = 0; i < f->n; i++) {
            if (f->items[i].plog != NULL)
                tn_plog_unpin(f->items[i].plog);
            f->items[i].plog = NULL;
        }
    }
    freq_unlink(f);
    reply_now(f);
    freq_free(f);
}

/* Whether parked f has something to say: records past an offset, a
 * partition that left, or one that moved its hw (once f waited
 * HW_LINGER_MS). */
static bool freq_due(freq_t *f, uint64_t now)
{
    if (now >= f->deadline || f->rm->closing)
        return true;
    for (uint32_t i = 0; i < f->n; i++) {
        fitem_t *it = &f->items[i];
        if (it->status != TN_FETCH_RECORDS)
            return true;
        part_t *pt = part_find(f->rm, it->topic, it->p);
        if (pt == NULL || pt->core.role != TN_REPL_LEADER)
            return true;
        if (!pt->ready || pt->plog == NULL)
            continue;
        /* A catch-up fetch held for move-rate is due once the bucket
         * has tokens; a hw alone is no news to it (it is not in the ISR). */
        if (it->offset < tn_plog_written_next(pt->plog) &&
            (!it->throttled || tn_throttle_ready(&f->rm->bucket, now)))
            return true;
        if (!it->throttled && pt->core.hw != it->hw && now >= f->parked_at + HW_LINGER_MS)
            return true;
    }
    return false;
}

static void on_fetch_cancel(void *arg, tn_rpc_req_t *req)
{
    (void)req;
    freq_t *f = arg;
    if (f->working)
        return; /* answered (and dropped) when the read ends */
    freq_unlink(f);
    tn_rpc_reply(f->req, 503, "application/json", "{\"error\":\"cancelled\"}", 21);
    tn_replica_t *rm = f->rm;
    freq_free(f);
    if (rm->closing)
        maybe_close_done(rm);
}

/* The node RPC handlers (FETCH, FLUSHED, REPAIR) before the manager runs
 * or once it closes: 503, and true. */
static bool refused_not_ready(tn_replica_t *rm, tn_rpc_req_t *req)
{
    if (rm != NULL && !rm->closing && rm->started)
        return false;
    tn_rpc_reply(req, 503, "application/json", "{\"error\":\"not ready\"}", 21);
    return true;
}

/* Whether pt leads now, its log taken over (what a flush report and a
 * repair read need). */
static bool leads_ready(const part_t *pt)
{
    return pt != NULL && pt->core_fed && pt->core.role == TN_REPL_LEADER && pt->ready &&
           pt->plog != NULL;
}

/* A FETCH's or a FLUSHED report's partition tuple fp from node, as the
 * core's event of type (EV_FETCH or EV_FLUSHED). */
static tn_repl_event_t fetch_event(tn_repl_ev_type_t type, uint64_t now, uint32_t node,
                                   uint64_t incarnation, const tn_fetch_part_t *fp)
{
    tn_repl_event_t ev = {.type = type, .now = now};
    ev.u.fetch.node = node;
    ev.u.fetch.incarnation = incarnation;
    ev.u.fetch.leader_epoch = fp->leader_epoch;
    ev.u.fetch.fetch_offset = fp->fetch_offset;
    ev.u.fetch.last_fetched_epoch = fp->last_fetched_epoch;
    ev.u.fetch.flushed_offset = fp->flushed_offset;
    ev.u.fetch.partition_epoch = fp->partition_epoch;
    return ev;
}

void tn_replica_on_fetch(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_replica_t *rm = arg;
    if (refused_not_ready(rm, req))
        return;
    tn_fetch_req_t fr;
    if (tn_fetch_req_decode(payload, len, &fr) != 0) {
        tn_rpc_reply(req, 400, "application/json", "{\"error\":\"malformed fetch\"}", 27);
        return;
    }
    freq_t *f = tn_calloc(1, sizeof(*f) + (size_t)fr.count * sizeof(fitem_t));
    if (f == NULL) {
        tn_rpc_reply(req, 503, "application/json", "{\"error\":\"out of memory\"}", 25);
        return;
    }
    f->rm = rm;
    f->req = req;
    f->node = fr.node;
    f->n = fr.count;
    f->max_bytes = fr.max_bytes > 0 && fr.max_bytes < rm->o.fetch_max_bytes
                       ? fr.max_bytes
                       : (uint32_t)rm->o.fetch_max_bytes;
    uint64_t wait = fr.wait_ms < 30000 ? fr.wait_ms : 30000;
    f->deadline = now_ms(rm) + wait;
    f->parked_at = now_ms(rm);
    bool due = wait == 0, held = false;
    uint64_t now = now_ms(rm);
    for (uint32_t i = 0; i < f->n; i++) {
        fitem_t *it = &f->items[i];
        tn_buf_init(&it->recs);
        tn_fetch_part_t fp;
        (void)tn_fetch_req_next(&fr, &fp);
        snprintf(it->topic, sizeof(it->topic), "%s", fp.topic);
        it->p = fp.partition;
        it->status = TN_FETCH_NOT_LEADER;
        part_t *pt = part_find(rm, it->topic, it->p);
        note_fetched(pt, fr.node, fp.leader_epoch);
        /* A leader whose log the engine is taking over answers nothing
         * yet (NOT_LEADER: the follower asks again shortly). */
        if (pt != NULL && pt->core_fed &&
            !(pt->core.role == TN_REPL_LEADER && (!pt->ready || pt->plog == NULL))) {
            tn_repl_event_t ev = fetch_event(TN_REPL_EV_FETCH, now, fr.node, fr.incarnation, &fp);
            cur_item = it;
            run(pt, &ev);
            cur_item = NULL;
        }
        if (it->status == TN_FETCH_RECORDS && pt != NULL)
            it->throttled = tn_throttle_applies(&pt->core.ps, fr.node);
        if (it->status != TN_FETCH_RECORDS) {
            due = true;
        } else if (pt != NULL && pt->ready && pt->plog != NULL &&
                   it->offset < tn_plog_written_next(pt->plog)) {
            if (!it->throttled || tn_throttle_ready(&rm->bucket, now))
                due = true;
            else
                held = true; /* records wait, move-rate's tokens do not */
        }
    }
    if (held && !due)
        rm->bucket.waits++;
    /* This fetch may have moved a hw that other parked fetches wait for. */
    wake_fetches(rm);
    f->next = rm->fetches;
    if (rm->fetches != NULL)
        rm->fetches->prev = f;
    rm->fetches = f;
    if (due) {
        freq_answer(f);
        return;
    }
    f->parked = true;
    tn_rpc_req_on_cancel(req, on_fetch_cancel, f);
}

/* A follower's flush reports (TN_OP_FLUSHED): each fed to its partition's
 * core, which checks it as a fetch and counts it or not (repl.c,
 * on_flushed); the hw may move, and parked fetches are woken for it. */
void tn_replica_on_flushed(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_replica_t *rm = arg;
    if (refused_not_ready(rm, req))
        return;
    tn_flushed_req_t fr;
    if (tn_flushed_req_decode(payload, len, &fr) != 0) {
        tn_rpc_reply(req, 400, "application/json", "{\"error\":\"malformed flush report\"}", 34);
        return;
    }
    uint64_t now = now_ms(rm);
    tn_fetch_part_t fp;
    while (tn_flushed_req_next(&fr, &fp) == 0) {
        part_t *pt = part_find(rm, fp.topic, fp.partition);
        note_fetched(pt, fr.node, fp.leader_epoch);
        if (!leads_ready(pt))
            continue;
        if (fp.leader_epoch < pt->core.ps.leader_epoch)
            rm->st.fenced++;
        tn_repl_event_t ev = fetch_event(TN_REPL_EV_FLUSHED, now, fr.node, fr.incarnation, &fp);
        run(pt, &ev);
    }
    wake_fetches(rm);
    tn_rpc_reply(req, 204, NULL, NULL, 0);
}

/* --- append errors: the follower's reports, the leader's record --------------------- */

#define ERR_REPORT_MS 1000 /* a lasting append error is told again this often */

static void on_err_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    part_t *pt = arg;
    (void)reply;
    (void)err;
    pt->busy--;
    pt->err_call = NULL;
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status != 0 && pt->err_told == 0)
        pt->err_clear_want = true; /* the end was not told: again on the next append */
}

/* Tell the partition's leader of this follower's append error (or of its
 * end): when it starts or changes, every ERR_REPORT_MS while it lasts,
 * once when it ends (TN_OP_REPLICA_ERROR; a lost report only costs the
 * reason its words). One call in flight per partition. */
static void report_append_err(part_t *pt)
{
    tn_replica_t *rm = pt->rm;
    uint64_t now = now_ms(rm);
    int e = pt->append_err;
    bool want =
        e != 0 ? (e != pt->err_told || now >= pt->err_told_at + ERR_REPORT_MS) : pt->err_clear_want;
    uint32_t leader = pt->core.ps.leader;
    if (!want || pt->err_call != NULL || rm->o.rpc == NULL || rm->closing || leader == 0 ||
        leader == rm->o.node || pt->core.ps.leader_epoch == 0)
        return;
    const char *addr = member_addr(rm, leader);
    if (addr == NULL)
        return;
    tn_wire_replerr_t r;
    memset(&r, 0, sizeof(r));
    r.node = rm->o.node;
    r.incarnation = tn_meta_incarnation(rm->o.meta);
    snprintf(r.topic, sizeof(r.topic), "%s", pt->topic);
    r.partition = pt->p;
    r.leader_epoch = pt->core.ps.leader_epoch;
    if (e != 0)
        snprintf(r.error, sizeof(r.error), "%s", tn_strerror(e));
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_replerr_encode(&b, &r);
    if (rc == 0) {
        pt->busy++; /* before: on_err_reply may run inside the call */
        rc = tn_rpc_call(rm->o.rpc, addr, TN_OP_REPLICA_ERROR, tn_buf_data(&b), tn_buf_size(&b),
                         REPORT_CALL_MS, on_err_reply, pt, &pt->err_call);
        if (rc != 0) {
            pt->busy--;
            pt->err_call = NULL;
        }
    }
    tn_buf_fini(&b);
    if (rc != 0)
        return;
    pt->err_told = e;
    pt->err_told_at = now;
    if (e == 0)
        pt->err_clear_want = false;
}

/* The end of node's copy as this leader's core saw it (0: not seen). */
static uint64_t peer_end(const part_t *pt, uint32_t node)
{
    for (uint32_t j = 0; j < TN_PSTATE_MAX_REPLICAS; j++)
        if (pt->core.peers[j].node == node && pt->core.peers[j].seen)
            return pt->core.peers[j].end;
    return 0;
}

/* The last append error node reported and still holds (NULL: none): one
 * whose copy advanced since is over, and so is one told to an earlier lead
 * of this node (the copy's end then was stale: peers restart unseen). */
static const char *peer_err(part_t *pt, uint32_t node)
{
    for (uint32_t i = 0; i < TN_PSTATE_MAX_REPLICAS; i++) {
        if (pt->perr[i].node != node || pt->perr[i].text[0] == '\0')
            continue;
        if (peer_end(pt, node) > pt->perr[i].end || pt->perr[i].at < pt->core.became_at) {
            pt->perr[i].text[0] = '\0';
            return NULL;
        }
        return pt->perr[i].text;
    }
    return NULL;
}

void tn_replica_on_replica_error(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_replica_t *rm = arg;
    if (refused_not_ready(rm, req))
        return;
    tn_wire_replerr_t r;
    char why[128];
    if (tn_wire_replerr_decode(payload, len, &r, why, sizeof(why)) != 0) {
        char body[200];
        int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", why);
        tn_rpc_reply(req, 400, "application/json", body, (size_t)n);
        return;
    }
    part_t *pt = part_find(rm, r.topic, r.partition);
    if (leads_ready(pt) && r.leader_epoch == pt->core.ps.leader_epoch && r.node != rm->o.node) {
        /* Its slot, else a free one, else the first (members no longer
         * watched fill the others). */
        int at = -1;
        for (int i = 0; i < TN_PSTATE_MAX_REPLICAS && at < 0; i++)
            if (pt->perr[i].node == r.node)
                at = i;
        for (int i = 0; i < TN_PSTATE_MAX_REPLICAS && at < 0; i++)
            if (pt->perr[i].node == 0)
                at = i;
        if (at < 0)
            at = 0;
        pt->perr[at].node = r.node;
        pt->perr[at].end = peer_end(pt, r.node);
        pt->perr[at].at = now_ms(rm);
        snprintf(pt->perr[at].text, sizeof(pt->perr[at].text), "%s", r.error);
    }
    tn_rpc_reply(req, 204, NULL, NULL, 0);
}

/* --- follower: calls to leader nodes (fetches, flush reports) ---------------------- */

/* Which connection pt's next fetch rides: true for node RPC's bulk
 * connection (a copy out of the ISR, a move's target among them, or one
 * far behind: cluster/throttle.h), false for the normal one, where an
 * in-sync follower's fetch is on the ack path. Every fetch lane choice is
 * made here. A copy that switches never has two fetches out: a partition
 * is in one call to a leader at a time (in_call, part_waits), whatever
 * its connection, so what it appends stays in order. */
static bool fetch_lane(const part_t *pt)
{
    bool in_isr = tn_pstate_isr_find(&pt->core.ps, pt->rm->o.node) >= 0;
    return tn_throttle_bulk(in_isr, pt->far);
}

/* Whether pt waits to go in a call of kind to leader (FETCH: on the bulk
 * connection or not). */
static bool part_waits(const part_t *pt, call_kind_t kind, uint32_t leader, bool bulk)
{
    if (pt->dead)
        return false;
    if (kind == CALL_REPORT)
        return pt->report_want && pt->report_node == leader;
    return pt->want && pt->want_node == leader && !pt->appending && !pt->truncating &&
           !(pt->in_call && pt->call_leader == leader) && fetch_lane(pt) == bulk;
}

/* The call slot for kind's next call to leader: FETCH, an idle one (made
 * when every one is in flight: a partition that wants to fetch never waits
 * for a parked call of others); FLUSHED, the leader's only one, in flight
 * or not. */
static group_t *group_get(tn_replica_t *rm, call_kind_t kind, uint32_t leader, bool bulk)
{
    for (group_t *g = rm->groups[kind]; g != NULL; g = g->next)
        if (g->leader == leader && (kind == CALL_REPORT || (!g->inflight && g->bulk == bulk)))
            return g;
    group_t *g = tn_calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->rm = rm;
    g->kind = kind;
    g->leader = leader;
    g->bulk = kind == CALL_FETCH && bulk;
    g->next = rm->groups[kind];
    rm->groups[kind] = g;
    return g;
}

static void group_clear(group_t *g)
{
    for (uint32_t i = 0; i < g->n; i++) {
        part_t *pt = part_find(g->rm, g->sent[i].topic, g->sent[i].p);
        if (pt != NULL && pt->call_leader == g->leader)
            pt->in_call = false;
        tn_free(g->sent[i].topic);
    }
    tn_free(g->sent);
    g->sent = NULL;
    g->n = 0;
}

static void on_fetch_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    group_t *g = arg;
    tn_replica_t *rm = g->rm;
    g->inflight = false;
    g->call = NULL;
    tn_fetch_reply_t fr;
    bool ok = status == 0 && reply->status == 200 &&
              tn_fetch_reply_decode(reply->body, reply->body_len, &fr) == 0 && fr.count == g->n;
    if (!ok) {
        if (status != 0 && status != TN_ECLOSED)
            TN_LOG_RL(TN_LOG_WARN, 5000, "replica: fetch from node %" PRIu32 ": %s", g->leader,
                      err != NULL ? err : tn_strerror(status));
        else if (status == 0)
            TN_LOG_RL(TN_LOG_WARN, 5000, "replica: fetch from node %" PRIu32 ": answer %u",
                      g->leader, reply->status);
        group_clear(g);
        if (rm->closing)
            maybe_close_done(rm);
        return; /* the cores fetch again after their timeout */
    }
    uint64_t now = now_ms(rm);
    for (uint32_t i = 0; i < g->n && !rm->closing; i++) {
        tn_fetch_rpart_t rp;
        if (tn_fetch_reply_next(&fr, &rp) != 0)
            break;
        part_t *pt = part_find(rm, g->sent[i].topic, g->sent[i].p);
        if (pt == NULL)
            continue;
        tn_repl_event_t ev = {.now = now};
        switch (rp.status) {
        case TN_FETCH_RECORDS:
            pt->far = tn_throttle_far(rp.records_len, rm->o.fetch_max_bytes);
            if (tn_pstate_isr_find(&pt->core.ps, rm->o.node) < 0)
                rm->st.move_bytes_received += rp.records_len;
            ev.type = TN_REPL_EV_RECORDS;
            ev.u.records.leader_epoch = g->sent[i].leader_epoch;
            ev.u.records.from = rp.from;
            ev.u.records.count = rp.count;
            ev.u.records.hw = rp.hw;
            break;
        case TN_FETCH_DIVERGING:
            ev.type = TN_REPL_EV_DIVERGING;
            ev.u.diverging.leader_epoch = g->sent[i].leader_epoch;
            ev.u.diverging.epoch = rp.epoch;
            ev.u.diverging.end_offset = rp.end_offset;
            ev.u.diverging.fetch_offset = pt->core.end;
            ev.u.diverging.last_fetched_epoch = pt->core.last_epoch;
            break;
        case TN_FETCH_OUT_OF_RANGE:
        case TN_FETCH_GAP:
            ev.type = rp.status == TN_FETCH_GAP ? TN_REPL_EV_GAP : TN_REPL_EV_OUT_OF_RANGE;
            ev.u.out_of_range.leader_epoch = g->sent[i].leader_epoch;
            ev.u.out_of_range.start = rp.end_offset;
            ev.u.out_of_range.fetch_offset = pt->core.end;
            break;
        default:
            if (rp.status == TN_FETCH_FENCED)
                rm->st.fenced++;
            ev.type = TN_REPL_EV_FETCH_ERROR;
            ev.u.error.leader_epoch = g->sent[i].leader_epoch;
            ev.u.error.err = rp.status == TN_FETCH_FENCED          ? TN_EFENCED
                             : rp.status == TN_FETCH_UNKNOWN_EPOCH ? TN_EUNKNOWNEPOCH
                                                                   : TN_EREMOTE;
            break;
        }
        TN_LOG(TN_LOG_DEBUG,
               "replica %s/%" PRIu32 ": answer %u from node %" PRIu32 ": from %" PRIu64
               " count %" PRIu32 " hw %" PRIu64 " (log end %" PRIu64 ")",
               pt->topic, pt->p, rp.status, g->leader, rp.from, rp.count, rp.hw, pt->core.end);
        uint64_t old_hw = pt->core.hw, sent_at = pt->core.fetch_sent_at;
        rm->cur = &rp;
        run(pt, &ev);
        rm->cur = NULL;
        if (ev.type == TN_REPL_EV_RECORDS && rp.count == 0 && !pt->dead &&
            (pt->core.hw != old_hw || now > sent_at)) {
            /* Nothing new but the hw (or the wait ran out): park the next
             * fetch at once rather than on the tick, so that records the
             * leader writes next reach this copy without a tick's delay.
             * An empty answer at once with the same hw (a leader that
             * cannot read there) waits for the tick: no busy loop. */
            tn_repl_event_t tick = {.type = TN_REPL_EV_TICK, .now = now};
            run(pt, &tick);
        }
    }
    group_clear(g);
    if (rm->closing)
        maybe_close_done(rm);
    else
        send_fetches(rm);
}

static const char *member_addr(tn_replica_t *rm, uint32_t node)
{
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(rm->o.meta), node);
    return m != NULL && m->api_addr[0] != '\0' ? m->api_addr : NULL;
}

static void on_report_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    group_t *g = arg;
    tn_replica_t *rm = g->rm;
    g->inflight = false;
    g->call = NULL;
    /* A report lost or refused costs only time: the next fetch carries
     * the flushed offset too. */
    if (status != 0 && status != TN_ECLOSED)
        TN_LOG_RL(TN_LOG_WARN, 5000, "replica: flush report to node %" PRIu32 ": %s", g->leader,
                  err != NULL ? err : tn_strerror(status));
    else if (status == 0 && reply->status != 204)
        TN_LOG_RL(TN_LOG_WARN, 5000, "replica: flush report to node %" PRIu32 ": answer %u",
                  g->leader, reply->status);
    if (rm->closing)
        maybe_close_done(rm);
    else
        send_waiting(rm, CALL_REPORT);
}

/* FETCH: a partition put in g's call. The answer is matched to it by
 * g->sent[k]; a flush report this fetch tells is taken off. 0 or
 * UV_ENOMEM. */
static int fetch_took(group_t *g, uint32_t k, part_t *pt, const tn_fetch_part_t *fp)
{
    TN_LOG(TN_LOG_DEBUG,
           "replica %s/%" PRIu32 ": fetch from node %" PRIu32 " epoch %" PRIu32 " offset %" PRIu64
           " last epoch %" PRIu32 " flushed %" PRIu64,
           pt->topic, pt->p, g->leader, fp->leader_epoch, fp->fetch_offset, fp->last_fetched_epoch,
           fp->flushed_offset);
    g->sent[k].topic = tn_strdup(pt->topic);
    g->sent[k].p = pt->p;
    g->sent[k].leader_epoch = fp->leader_epoch;
    if (g->sent[k].topic == NULL)
        return UV_ENOMEM;
    pt->want = false;
    pt->in_call = true;
    pt->call_leader = g->leader;
    if (pt->report_want && pt->report_node == g->leader &&
        pt->reportf.flushed_offset <= fp->flushed_offset)
        pt->report_want = false; /* this fetch tells it */
    return 0;
}

/* One call to g's leader with every partition that waits for it (up to
 * TN_FETCH_MAX_PARTS): a FETCH, or a FLUSHED report. A report that cannot
 * be sent is dropped: the next fetch carries its offset too. */
static void group_send(group_t *g)
{
    tn_replica_t *rm = g->rm;
    bool fetch = g->kind == CALL_FETCH;
    if (g->inflight || rm->o.rpc == NULL || rm->closing)
        return;
    uint32_t n = 0;
    for (uint32_t b = 0; b < NBUCKETS; b++)
        for (part_t *pt = rm->buckets[b]; pt != NULL; pt = pt->next)
            n += part_waits(pt, g->kind, g->leader, g->bulk);
    if (n == 0)
        return;
    if (n > TN_FETCH_MAX_PARTS)
        n = TN_FETCH_MAX_PARTS;
    const char *addr = member_addr(rm, g->leader);
    if (addr == NULL)
        return;
    if (fetch && (g->sent = tn_calloc(n, sizeof(*g->sent))) == NULL)
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    uint32_t wait = (uint32_t)rm->o.fetch_wait_ms;
    uint64_t inc = tn_meta_incarnation(rm->o.meta);
    int rc =
        fetch ? tn_fetch_req_put_head(&b, rm->o.node, inc, wait, (uint32_t)rm->o.fetch_max_bytes, n)
              : tn_flushed_req_put_head(&b, rm->o.node, inc, n);
    uint32_t k = 0;
    for (uint32_t bk = 0; rc == 0 && bk < NBUCKETS && k < n; bk++)
        for (part_t *pt = rm->buckets[bk]; rc == 0 && pt != NULL && k < n; pt = pt->next) {
            if (!part_waits(pt, g->kind, g->leader, g->bulk))
                continue;
            const tn_repl_fetch_t *f = fetch ? &pt->wantf : &pt->reportf;
            tn_fetch_part_t fp;
            snprintf(fp.topic, sizeof(fp.topic), "%s", pt->topic);
            fp.partition = pt->p;
            fp.leader_epoch = f->leader_epoch;
            fp.fetch_offset = f->fetch_offset;
            fp.last_fetched_epoch = f->last_fetched_epoch;
            fp.flushed_offset = f->flushed_offset;
            fp.partition_epoch = f->partition_epoch;
            if ((rc = tn_fetch_req_put_part(&b, &fp)) != 0)
                break;
            if (fetch && (rc = fetch_took(g, k, pt, &fp)) != 0)
                break;
            if (!fetch)
                pt->report_want = false;
            k++;
        }
    if (fetch)
        g->n = k;
    if (rc == 0) {
        /* In flight before the call: its callback may run inside it (a
         * send that fails at once) and must leave the slot free. Marked
         * after it, that callback's "free" was overwritten and the slot
         * stayed in flight for ever: its partitions never fetched from
         * that leader again, and the close waited for it (cluster_cycles,
         * "1 call(s) in flight"). */
        g->inflight = true;
        rc = fetch ? tn_rpc_call_on(rm->o.rpc, addr, -1, g->bulk, TN_OP_FETCH, tn_buf_data(&b),
                                    tn_buf_size(&b), wait + 5000, on_fetch_reply, g, &g->call)
                   : tn_rpc_call(rm->o.rpc, addr, TN_OP_FLUSHED, tn_buf_data(&b), tn_buf_size(&b),
                                 REPORT_CALL_MS, on_report_reply, g, &g->call);
        if (rc != 0)
            g->inflight = false;
    }
    tn_buf_fini(&b);
    if (rc != 0) {
        group_clear(g);
        return;
    }
    if (fetch)
        rm->st.fetches_sent++;
    if (fetch && g->bulk)
        rm->st.fetches_sent_bulk++;
}

/* For each leader node that a partition's call of kind waits for, one
 * call (group_send takes every partition that waits for that leader). */
static void send_waiting(tn_replica_t *rm, call_kind_t kind)
{
    if (rm->closing || rm->o.rpc == NULL)
        return;
    for (uint32_t b = 0; b < NBUCKETS; b++)
        for (part_t *pt = rm->buckets[b]; pt != NULL; pt = pt->next) {
            uint32_t leader = kind == CALL_FETCH ? pt->want_node : pt->report_node;
            bool bulk = kind == CALL_FETCH && fetch_lane(pt);
            if (part_waits(pt, kind, leader, bulk)) {
                group_t *g = group_get(rm, kind, leader, bulk);
                if (g != NULL)
                    group_send(g);
            }
        }
}

/* The fetches that wait, then the flush reports that wait. */
static void send_fetches(tn_replica_t *rm)
{
    send_waiting(rm, CALL_FETCH);
    send_waiting(rm, CALL_REPORT);
}

/* --- partitions come and go ---------------------------------------------------------- */

static void part_maybe_free(part_t *pt)
{
    if (pt->busy > 0)
        return;
    if (pt->src == SRC_OWN && pt->plog != NULL) {
        release_own(pt);
        return;
    }
    tn_replica_t *rm = pt->rm;
    part_t **pp = &rm->buckets[hash_name(pt->topic, pt->p)];
    while (*pp != NULL && *pp != pt)
        pp = &(*pp)->next;
    if (*pp == pt)
        *pp = pt->next;
    rep_release(pt); /* (a repair waiting to ask its leader again) */
    tn_buf_fini(&pt->appbuf);
    tn_buf_fini(&pt->rep_buf);
    tn_buf_fini(&pt->rep_ep);
    tn_free(pt->appep);
    tn_free(pt->topic);
    tn_free(pt);
    if (rm->closing)
        maybe_close_done(rm);
}

static bool is_replica(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == node)
            return true;
    return false;
}

static void part_drop(part_t *pt)
{
    tn_plog_t *engine_log = pt->src == SRC_ENGINE ? pt->plog : NULL;
    pt->busy++; /* the gate's failures complete the epoch-start append here */
    if (pt->core.role == TN_REPL_LEADER)
        resign(pt);
    if (pt->src == SRC_ENGINE && pt->plog != NULL)
        engine_log = pt->plog;
    /* No longer a replica here (a move dropped it): the engine's log is set
     * aside, and an append still being written to it when the leadership
     * went would wait for a hw that nothing moves any more (the tick fails
     * a follower's such appends, but a dropped partition has no tick), so
     * the publish never ended and the node's drain timed out. The gate
     * fails what waits and what would wait, until it is turned on again. */
    if (engine_log != NULL)
        tn_plog_gate_shut(engine_log, TN_EFENCED);
    pt->busy--;
    pt->dead = true;
    pt->want = false;
    if (pt->src == SRC_ENGINE) {
        pt->plog = NULL;
        pt->src = SRC_NONE;
    }
    part_maybe_free(pt);
}

/* The core's first events: the log as found, then the state (once a log
 * is in hand: an own log being opened feeds them when it is). */
static void first_feed(part_t *pt)
{
    tn_replica_t *rm = pt->rm;
    if (engine_busy(rm, pt))
        return; /* its log may be out of sight (ensure_log): the tick feeds it */
    if (pt->ps.leader == rm->o.node && engine_aside(rm, pt) == NULL &&
        !engine_local(rm, pt, NULL) && pt->src == SRC_NONE) {
        /* Leading with no log here at all: an empty one. */
        feed_log(pt, 0, 0, 0);
    } else if (ensure_log(pt)) {
        poll_log(pt);
        if (!pt->core_fed && pt->plog != NULL)
            feed_log(pt, tn_plog_written_next(pt->plog), tn_plog_durable_next(pt->plog),
                     tn_plog_last_epoch(pt->plog));
    }
    feed_state(pt);
}

/* Whether the cores may act on the metastore replica's states: it is
 * ready (caught up) and holds this process's own registration. A
 * restarted node's replica is ready once it replayed what it had, which
 * may still name it the leader of an epoch it was fenced out of; its
 * registration (same apply) fences that old session, so a state it sees
 * after it is one made for this process. */
static bool meta_current(tn_replica_t *rm)
{
    if (!tn_meta_ready(rm->o.meta))
        return false;
    uint64_t boot = tn_meta_boot(rm->o.meta);
    if (boot == 0)
        return true; /* registrations carry no boot id */
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(rm->o.meta), rm->o.node);
    return m != NULL && m->boot == boot;
}

/* --- quarantine marks ------------------------------------------------------------- */

/* A partition this node no longer holds a replica of (the metastore's
 * state, committed, drops it) gets its directory marked dropped
 * (tn_store_mark_dropped, on a worker thread); the next start moves it to
 * quarantine/ before recovery, so it is never served again. Only a
 * current state marks (meta_current: not one the metastore replays at
 * start, which a later entry may contradict). Level-triggered: once the
 * metastore is current, every replicated partition whose state does not
 * name this node and whose copy the engine still holds (found on disk at
 * start) is marked too, so a crash between the drop and its mark is
 * marked at the next start, moved at the one after. A partition given back to this node in the same
 * run has its mark taken away before its core is fed (unmarking): the jobs run one at a time in
 * submission order, so the mark and its removal never cross, and the copy is never followed on
 * while a mark could move it away at a restart. A mark that fails leaves the copy in place (as
 * before marks); a removal that fails leaves the partition unfed here (out of the ISR), logged.
 *
 * Moving at once (rel_t, on the tick): a marked copy goes to quarantine/ while the node runs as
 * soon as nothing here uses it any more:
 *   1. no part_t of it is left (a dropped one is freed once idle, its own log closed) and no
 *      fetch answer is being read from it (fetch_reads);
 *   2. the channel logs this node kept for it as a follower are closed (o.release, setrepl);
 *   3. the engine closes what it still holds of it (tn_topic_part_release: the log set aside
 *      for a demoted leader, and its channel logs), which it does only once the partition is
 *      remote there, no read, collection or advance uses the log and no channel record is in
 *      flight (UV_EBUSY: the tick asks again);
 *   4. a move job goes on the same queue as the marks (tn_store_quarantine_dropped: the start's
 *      rename and fsyncs), so it runs after the mark and before any later removal of it.
 * Given back before the job was queued, the mark is gone (mark_given_back) and the move is
 * given up; the new part_t waits until a step in flight (2, 3) has ended (rel_blocks), then for
 * its removal job as above, and follows on its copy as before (the engine opens it from its
 * files if it leads again). Given back after, the move runs first: the removal finds no
 * directory, and the replica starts from an empty log and catches up. The job moves only a
 * marked directory, so a crash leaves the marked copy in topics/ (moved at the next start) or
 * the moved one in quarantine/. A copy something keeps in use (the engine serving it: not
 * remote there) stays marked, and the next start moves it. While a copy is marked, being
 * unmarked or moved (tn_replica_copy_moving), the follower's channel logs of it take nothing
 * (setrepl.h, copy_moving): what they wrote could go with the copy. */

typedef struct mark_s {
    struct mark_s *next;
    char *topic;
    uint32_t p;
    bool dropped;
    bool move;  /* move the marked copy to quarantine/ now (rel_t) */
    bool moved; /* ... and it was */
    char tag[24];
    int rc;
} mark_t;

typedef struct mkey_s {
    char *topic;
    uint32_t p;
} mkey_t;

static size_t marked_find(const tn_replica_t *rm, const char *topic, uint32_t p)
{
    for (size_t i = 0; i < rm->nmarked; i++)
        if (rm->marked[i].p == p && strcmp(rm->marked[i].topic, topic) == 0)
            return i;
    return rm->nmarked;
}

static void mark_free(mark_t *m)
{
    tn_free(m->topic);
    tn_free(m);
}

static void mark_work(uv_work_t *w)
{
    tn_replica_t *rm = TN_CONTAINER_OF(w, tn_replica_t, mq_work);
    mark_t *m = rm->mq;
    const char *path = rm->o.broker->store->path;
    if (!m->dropped && !m->move)
        test_unmark_delay(m->topic, m->p);
    m->rc = m->move ? tn_store_quarantine_dropped(path, m->topic, m->p, &m->moved)
                    : tn_store_mark_dropped(path, m->topic, m->p, m->dropped, m->tag);
}

static void mark_after(uv_work_t *w, int status);
static void move_after(tn_replica_t *rm, mark_t *m, int rc);
static void rel_add(tn_replica_t *rm, const char *topic, uint32_t p);
static bool rel_blocks(const part_t *pt);

static void mark_next(tn_replica_t *rm)
{
    if (rm->mq_busy || rm->mq == NULL || rm->closing)
        return;
    rm->mq_busy = true;
    rm->working++;
    if (uv_queue_work(rm->o.loop, &rm->mq_work, mark_work, mark_after) != 0) {
        rm->working--;
        rm->mq_busy = false;
        TN_LOG_RL(TN_LOG_WARN, 10000, "replica: cannot queue a quarantine mark");
    }
}

/* Free the jobs not started (the one running frees itself). */
static void mark_flush(tn_replica_t *rm)
{
    mark_t *m = rm->mq_busy && rm->mq != NULL ? rm->mq->next : rm->mq;
    if (rm->mq_busy && rm->mq != NULL)
        rm->mq->next = NULL;
    else
        rm->mq = NULL;
    rm->mq_tail = rm->mq;
    while (m != NULL) {
        mark_t *next = m->next;
        mark_free(m);
        m = next;
    }
}

static void mark_after(uv_work_t *w, int status)
{
    tn_replica_t *rm = TN_CONTAINER_OF(w, tn_replica_t, mq_work);
    mark_t *m = rm->mq;
    rm->mq = m->next;
    if (rm->mq == NULL)
        rm->mq_tail = NULL;
    rm->mq_busy = false;
    rm->working--;
    int rc = m->rc != 0 ? m->rc : status;
    if (m->move) {
        move_after(rm, m, rc);
        return;
    }
    if (rc != 0)
        TN_LOG(m->dropped ? TN_LOG_WARN : TN_LOG_ERROR, "replica %s/%" PRIu32 ": cannot %s: %s%s",
               m->topic, m->p,
               m->dropped ? "mark its dropped copy for quarantine" : "take its dropped mark away",
               tn_strerror(rc),
               m->dropped ? " (the copy stays where it is, unserved)"
                          : " (this node does not follow on it until a restart)");
    part_t *pt = !m->dropped && !rm->closing ? part_find(rm, m->topic, m->p) : NULL;
    if (m->dropped && rc == 0 && !rm->closing)
        rel_add(rm, m->topic, m->p);
    mark_free(m);
    if (rm->closing) {
        mark_flush(rm);
        maybe_close_done(rm);
        return;
    }
    if (pt != NULL && rc == 0 && pt->unmarking) {
        pt->unmarking = false;
        if (meta_current(rm) && pt->has_ps && !pt->core_fed && !pt->dead && !rel_blocks(pt)) {
            first_feed(pt);
            send_fetches(rm);
        }
    }
    mark_next(rm);
}

static int job_submit(tn_replica_t *rm, const char *topic, uint32_t p, bool dropped, bool move,
                      const char *tag)
{
    mark_t *m = tn_calloc(1, sizeof(*m));
    if (m == NULL || (m->topic = tn_strdup(topic)) == NULL) {
        tn_free(m);
        return UV_ENOMEM;
    }
    m->p = p;
    m->dropped = dropped;
    m->move = move;
    snprintf(m->tag, sizeof(m->tag), "%s", tag != NULL ? tag : "");
    if (rm->mq_tail != NULL)
        rm->mq_tail->next = m;
    else
        rm->mq = m;
    rm->mq_tail = m;
    mark_next(rm);
    return 0;
}

static int mark_submit(tn_replica_t *rm, const char *topic, uint32_t p, bool dropped,
                       const char *tag)
{
    return job_submit(rm, topic, p, dropped, false, tag);
}

/* ps (committed) does not name this node: mark its copy here, once per
 * run (had: this manager held a replica until now). */
static void mark_dropped(tn_replica_t *rm, const char *topic, uint32_t p, const tn_pstate_t *ps,
                         bool had)
{
    if (rm->o.broker->store == NULL || marked_find(rm, topic, p) < rm->nmarked)
        return;
    if (!had) {
        /* Only a copy the engine holds and does not serve (found at
         * start, or set aside): nothing else of it is here. */
        tn_topic_t *t = engine_topic(rm, topic);
        if (t == NULL || p >= t->nparts || tn_topic_part_local(t, p) ||
            tn_topic_part_plog(t, p) == NULL)
            return;
    }
    if (rm->nmarked == rm->markcap) {
        size_t cap = rm->markcap ? rm->markcap * 2 : 8;
        mkey_t *v = tn_realloc(rm->marked, cap * sizeof(*v));
        if (v == NULL)
            return; /* left in place; the next start marks it */
        rm->marked = v;
        rm->markcap = cap;
    }
    char tag[24];
    snprintf(tag, sizeof(tag), "pe%" PRIu32, ps->partition_epoch);
    char *name = tn_strdup(topic);
    if (name == NULL || mark_submit(rm, topic, p, true, tag) != 0) {
        tn_free(name);
        return;
    }
    rm->marked[rm->nmarked++] = (mkey_t){name, p}; /* owned by rm until freed */
}

/* A new part_t for a partition marked dropped in this run: the mark goes
 * first; pt waits (unmarking). */
static void mark_given_back(tn_replica_t *rm, part_t *pt)
{
    size_t i = marked_find(rm, pt->topic, pt->p);
    if (i == rm->nmarked)
        return;
    pt->unmarking = true;
    if (mark_submit(rm, pt->topic, pt->p, false, NULL) != 0) {
        TN_LOG(TN_LOG_ERROR,
               "replica %s/%" PRIu32 ": out of memory taking its dropped mark away: this node "
               "does not follow on it until a restart",
               pt->topic, pt->p);
        return;
    }
    tn_free(rm->marked[i].topic);
    rm->marked[i] = rm->marked[--rm->nmarked];
}

static void sweep_one(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    tn_replica_t *rm = arg;
    if (ps != NULL && !is_replica(ps, rm->o.node) && part_find(rm, topic, p) == NULL)
        mark_dropped(rm, topic, p, ps, false);
}

/* Once the metastore is current: the copies it does not list here. */
static void mark_sweep(tn_replica_t *rm)
{
    if (rm->marks_swept)
        return;
    rm->marks_swept = true;
    tn_meta_state_each_pstate(tn_meta_state(rm->o.meta), sweep_one, rm);
}

uint64_t tn_replica_marked(const tn_replica_t *rm)
{
    return rm->nmarked;
}

/* --- dropped copies to quarantine/ while the node runs ("quarantine marks") --------- */

typedef enum {
    REL_WAIT,     /* until no part_t or fetch of it is left */
    REL_CHANNELS, /* the follower's channel logs (o.release) */
    REL_ENGINE,   /* what the engine holds (tn_topic_part_release) */
    REL_MOVE,     /* the move job, queued */
} rel_stage_t;

typedef struct rel_s {
    struct rel_s *next;
    tn_replica_t *rm;
    char *topic;
    uint32_t p;
    rel_stage_t stage;
    bool busy; /* a callback (release, engine close, move job) is out */
} rel_t;

static rel_t *rel_find(const tn_replica_t *rm, const char *topic, uint32_t p)
{
    for (rel_t *r = rm->rels; r != NULL; r = r->next)
        if (r->p == p && strcmp(r->topic, topic) == 0)
            return r;
    return NULL;
}

static void rel_free(rel_t *r)
{
    tn_replica_t *rm = r->rm;
    rel_t **pp = &rm->rels;
    while (*pp != NULL && *pp != r)
        pp = &(*pp)->next;
    if (*pp == r)
        *pp = r->next;
    tn_free(r->topic);
    tn_free(r);
}

/* A marked copy: move it once nothing uses it (the tick's rel_step). Out
 * of memory leaves it for the next start. */
static void rel_add(tn_replica_t *rm, const char *topic, uint32_t p)
{
    if (rel_find(rm, topic, p) != NULL)
        return;
    rel_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL || (r->topic = tn_strdup(topic)) == NULL) {
        tn_free(r);
        return;
    }
    r->rm = rm;
    r->p = p;
    r->next = rm->rels;
    rm->rels = r;
}

/* A step of the release of pt's copy is in flight: pt (given back) waits. */
static bool rel_blocks(const part_t *pt)
{
    const rel_t *r = rel_find(pt->rm, pt->topic, pt->p);
    return r != NULL && r->busy && r->stage != REL_MOVE;
}

/* Any part_t of (topic, p), a dead one (still closing its own log, or
 * busy) too. */
static bool part_left(const tn_replica_t *rm, const char *topic, uint32_t p)
{
    for (part_t *pt = rm->buckets[hash_name(topic, p)]; pt != NULL; pt = pt->next)
        if (pt->p == p && strcmp(pt->topic, topic) == 0)
            return true;
    return false;
}

/* A fetch answer being read from (topic, p)'s log on a worker. */
static bool fetch_reads(const tn_replica_t *rm, const char *topic, uint32_t p)
{
    for (const freq_t *f = rm->fetches; f != NULL; f = f->next)
        for (uint32_t i = 0; f->working && i < f->n; i++)
            if (f->items[i].plog != NULL && f->items[i].p == p &&
                strcmp(f->items[i].topic, topic) == 0)
                return true;
    return false;
}

bool tn_replica_copy_moving(tn_replica_t *rm, const char *topic, uint32_t p)
{
    if (marked_find(rm, topic, p) < rm->nmarked || rel_find(rm, topic, p) != NULL)
        return true;
    const part_t *pt = part_find(rm, topic, p);
    return pt != NULL && pt->unmarking;
}

bool tn_replica_copy_ready(tn_replica_t *rm, const char *topic, uint32_t p)
{
    const part_t *pt = part_find(rm, topic, p);
    return pt != NULL && !pt->dead && pt->plog != NULL &&
           (pt->src == SRC_OWN || pt->src == SRC_ENGINE) && tn_plog_is_replica(pt->plog);
}

static void rel_step(rel_t *r);

static void rel_done(rel_t *r)
{
    tn_replica_t *rm = r->rm;
    rm->working--;
    r->busy = false;
    if (rm->closing) {
        rel_free(r);
        maybe_close_done(rm);
        return;
    }
    r->stage++;
    rel_step(r);
}

static void on_rel_channels(void *arg)
{
    rel_done(arg);
}

static void on_rel_engine(void *arg, int status)
{
    (void)status; /* the closes report nothing */
    rel_done(arg);
}

static void rel_step(rel_t *r)
{
    tn_replica_t *rm = r->rm;
    if (r->busy)
        return;
    if (marked_find(rm, r->topic, r->p) == rm->nmarked) {
        rel_free(r); /* given back (its mark taken away), or the topic went */
        return;
    }
    if (r->stage == REL_WAIT) {
        if (part_left(rm, r->topic, r->p) || fetch_reads(rm, r->topic, r->p) ||
            test_hold_quarantine(r->topic))
            return;
        r->stage = REL_CHANNELS;
    }
    if (r->stage == REL_CHANNELS) {
        if (rm->o.release == NULL) {
            r->stage = REL_ENGINE;
        } else {
            r->busy = true;
            rm->working++;
            rm->o.release(rm->o.release_arg, r->topic, r->p, on_rel_channels, r);
            return; /* on_rel_channels goes on (possibly already has) */
        }
    }
    if (r->stage == REL_ENGINE) {
        tn_topic_t *t = tn_broker_topic_find(rm->o.broker, r->topic);
        if (t != NULL) {
            r->busy = true;
            rm->working++;
            int rc = tn_topic_part_release(t, r->p, on_rel_engine, r);
            if (rc == 0)
                return; /* on_rel_engine goes on (possibly already has) */
            r->busy = false;
            rm->working--;
            if (rc != UV_EINVAL)
                return; /* served here, or busy: the tick asks again */
        }
        r->stage = REL_MOVE; /* nothing of it in the engine */
    }
    if (r->stage == REL_MOVE) {
        if (job_submit(rm, r->topic, r->p, false, true, NULL) != 0)
            return; /* out of memory: the tick asks again */
        r->busy = true;
    }
}

/* The move job ran: the copy is in quarantine/ (moved), or was not marked
 * any more (given back before), or stays marked (an error: the next start
 * moves it). */
static void move_after(tn_replica_t *rm, mark_t *m, int rc)
{
    if (rc != 0)
        TN_LOG(TN_LOG_WARN,
               "replica %s/%" PRIu32 ": cannot move its dropped copy to quarantine now: %s (it "
               "stays marked; the next start moves it)",
               m->topic, m->p, tn_strerror(rc));
    if (m->moved)
        tn_store_note_quarantined(rm->o.broker->store);
    if (rc == 0) {
        /* Nothing of it is marked in topics/ any more (moved, or no
         * copy): a later give-back starts from an empty log. */
        size_t i = marked_find(rm, m->topic, m->p);
        if (i < rm->nmarked) {
            tn_free(rm->marked[i].topic);
            rm->marked[i] = rm->marked[--rm->nmarked];
        }
    }
    rel_t *r = rel_find(rm, m->topic, m->p);
    if (r != NULL && r->stage == REL_MOVE)
        rel_free(r);
    mark_free(m);
    if (rm->closing) {
        mark_flush(rm);
        maybe_close_done(rm);
        return;
    }
    mark_next(rm);
}

static void rel_tick(tn_replica_t *rm)
{
    for (rel_t *r = rm->rels, *next; r != NULL; r = next) {
        next = r->next;
        rel_step(r); /* may free r, never another */
    }
}

static void on_pstate(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    tn_replica_t *rm = arg;
    if (rm->closing)
        return;
    part_t *pt = part_find(rm, topic, p);
    if (ps == NULL || !is_replica(ps, rm->o.node)) {
        bool had = pt != NULL;
        if (pt != NULL)
            part_drop(pt);
        if (ps != NULL && rm->marks_swept && meta_current(rm))
            mark_dropped(rm, topic, p, ps, had);
        return;
    }
    if (pt == NULL) {
        pt = tn_calloc(1, sizeof(*pt));
        if (pt == NULL || (pt->topic = tn_strdup(topic)) == NULL) {
            tn_free(pt);
            TN_LOG(TN_LOG_ERROR, "replica %s/%" PRIu32 ": out of memory", topic, p);
            return;
        }
        pt->rm = rm;
        pt->p = p;
        tn_buf_init(&pt->appbuf);
        tn_buf_init(&pt->rep_buf);
        tn_buf_init(&pt->rep_ep);
        tn_repl_config_t cfg = {
            .node = rm->o.node,
            .incarnation = tn_meta_incarnation(rm->o.meta),
            .replica_lag_ms = rm->o.replica_lag_ms,
            .fetch_idle_ms = FETCH_IDLE_MS,
            .fetch_timeout_ms = rm->o.fetch_timeout_ms,
            .epoch_end = epoch_end_cb,
            .epoch_end_arg = pt,
            .channels_gate = rm->o.channels != NULL,
        };
        tn_repl_init(&pt->core, &cfg);
        uint32_t h = hash_name(topic, p);
        pt->next = rm->buckets[h];
        rm->buckets[h] = pt;
        mark_given_back(rm, pt);
    }
    if (pt->has_ps && pt->ps.partition_epoch > ps->partition_epoch)
        return;
    note_leader_change(pt, ps);
    pt->ps = *ps;
    pt->has_ps = true;
    if (pt->hold_isr && ps->partition_epoch > pt->hold_pe)
        pt->hold_isr = false; /* the proposal, or what came after it, is applied */
    hold_deliveries(pt);
    /* Replaying its log at start, the metastore tells of states this node
     * has since been fenced out of (it may name it the leader of an epoch
     * whose tail it lost): no core acts before the metastore is ready and
     * holds this process's registration (meta_current; the tick feeds the
     * newest state then). */
    if (!meta_current(rm) || pt->unmarking || rel_blocks(pt))
        return;
    if (!pt->core_fed)
        first_feed(pt);
    else
        feed_state(pt);
    send_fetches(rm);
}

/* --- events: the logs move --------------------------------------------------------- */

/* The engine closes pl, a log it owns (its topic deleted, a log set aside
 * abandoned), which the partition's part_t may hold (SRC_ENGINE): as a
 * follower's copy, or as the log a leader leads from. It is let go now
 * (tn_plog_close tells the watch before the close is queued), so nothing
 * here touches it once it is freed. What was asked of it before (a
 * truncation, a reset, an append of fetched records) still completes
 * first, on_trunc_done and the like finding no log held; reads of it on a
 * worker pin it (freq_answer). The partition then waits for the engine's
 * topic to be idle again and takes the log it holds, or opens one of its
 * own (ensure_log, on the tick): a topic deleted and made again under the
 * same name gets the new topic's files, fetched from the leader. */
static void engine_log_closing(tn_replica_t *rm, tn_plog_t *pl)
{
    part_t *pt = part_find(rm, pl->topic, pl->partition);
    if (pt == NULL || pt->plog != pl || pt->src != SRC_ENGINE)
        return; /* a log of our own closes through release_own */
    TN_LOG(TN_LOG_NOTICE,
           "replica %s/%" PRIu32 ": the engine closes the log this replica %s; letting it go",
           pt->topic, pt->p, pt->core.role == TN_REPL_LEADER ? "leads from" : "follows on");
    if (pt->ready) {
        /* A leader's: the router's window forgets it; the leader takes
         * the engine's next log of the partition on the tick
         * (leader_take), as after a hand-over. */
        if (rm->lead_cb != NULL)
            rm->lead_cb(rm->lead_arg, pt->topic, pt->p, NULL);
        pt->ready = false;
        pt->start_pending = false;
    }
    pt->plog = NULL;
    pt->src = SRC_NONE;
    /* A fetch not sent yet was asked for that log's end: the next log's
     * first poll feeds it whatever it holds (fed_end can match no end),
     * and the core fetches from there. */
    if (pt->want) {
        pt->want = false;
        pt->core.fetching = false;
    }
    pt->fed_end = UINT64_MAX;
}

/* Answer the parked fetches that have something to say now (records past
 * their offset, a hw that moved, a partition that left). */
static void wake_fetches(tn_replica_t *rm)
{
    uint64_t now = now_ms(rm);
    for (freq_t *f = rm->fetches, *next; f != NULL; f = next) {
        next = f->next;
        if (!f->working && freq_due(f, now))
            freq_answer(f);
    }
}

/* The store's replica watch: a log this manager holds was written to, made
 * durable, or its hw moved. A leader's core hears its log end and flushed
 * offset at once (the hw may move) and the parked fetches waiting for
 * records are answered; a follower whose copy is now flushed reports it
 * at once (or fetches, when no fetch is out), carrying the flushed offset
 * the leader's hw waits for. */
static void on_watch(void *arg, tn_plog_t *pl)
{
    tn_replica_t *rm = arg;
    if (pl->closing) {
        engine_log_closing(rm, pl);
        return;
    }
    if (rm->closing || !meta_current(rm))
        return;
    part_t *pt = part_find(rm, pl->topic, pl->partition);
    if (pt == NULL || pt->plog != pl || !pt->core_fed)
        return;
    poll_log(pt);
    wake_fetches(rm);
    send_fetches(rm);
}

/* --- damage: reporting it, repairing from the leader (DESIGN step 7) ---------------- */

/* Whether the metastore's state marks this node's replica of pt damaged. */
static bool marked_damaged(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == node)
            return (ps->corrupt & (1u << i)) != 0;
    return false;
}

static void on_damage_reported(tn_meta_req_t *req, int status)
{
    part_t *pt = req->data;
    pt->busy--;
    pt->dmg_busy = false;
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status != 0) {
        TN_LOG_RL(TN_LOG_WARN, 5000, "replica %s/%" PRIu32 ": reporting its damaged copy: %s",
                  pt->topic, pt->p, tn_strerror(status));
        pt->dmg_retry_at = now_ms(pt->rm) + DMG_RETRY_MS;
    }
}

static void on_damage_recorded(tn_plog_dmgrec_t *req, int status)
{
    part_t *pt = req->data;
    pt->busy--;
    pt->dmg_rec_busy = false;
    if (pt->dead || pt->rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status != 0)
        TN_LOG_RL(TN_LOG_WARN, 5000,
                  "replica %s/%" PRIu32 ": recording where its copy is damaged: %s; a restart "
                  "before the repair may not find the damage again until a scrub or a read does",
                  pt->topic, pt->p, tn_strerror(status));
    pt->dmg_recorded = true; /* once: the repair goes on either way */
}

/* Record the damage's range in the partition's directory once, so a
 * restart before the repair isolates the copy again at open (recovery
 * trusts a valid segment sidecar and would not see it). */
static void record_damage(part_t *pt)
{
    if (pt->dmg_recorded || pt->dmg_rec_busy)
        return;
    memset(&pt->dmg_rec, 0, sizeof(pt->dmg_rec));
    pt->dmg_rec.data = pt;
    if (tn_plog_record_damage(pt->plog, &pt->dmg_rec, on_damage_recorded) != 0) {
        pt->dmg_recorded = true; /* no range known (not a sealed segment's records) */
        return;
    }
    pt->dmg_rec_busy = true;
    pt->busy++;
}

static void repair_send(part_t *pt);

/* The range under repair, for a log line: "offsets A..B", or for the
 * active segment "the active segment from offset A". */
static const char *rep_range(const part_t *pt, char *buf, size_t len)
{
    if (pt->rep_epochs)
        snprintf(buf, len, "its epochs file (the epoch of offset %" PRIu64 ")", pt->rep_base);
    else if (pt->rep_active)
        snprintf(buf, len, "the active segment from offset %" PRIu64, pt->rep_base);
    else
        snprintf(buf, len, "offsets %" PRIu64 "..%" PRIu64, pt->rep_base, pt->rep_end - 1);
    return buf;
}

static void repair_fail(part_t *pt, const char *what, const char *why)
{
    tn_replica_t *rm = pt->rm;
    rm->st.repairs_failed++;
    char range[96];
    TN_LOG_RL(TN_LOG_WARN, 5000,
              "replica %s/%" PRIu32 ": repair of %s from node %" PRIu32 ": %s: %s; trying again",
              pt->topic, pt->p, rep_range(pt, range, sizeof(range)), pt->rep_from, what, why);
    rep_release(pt);
    pt->rep_retry_at = now_ms(rm) + REPAIR_RETRY_MS;
    tn_buf_reset(&pt->rep_buf);
    tn_buf_reset(&pt->rep_ep);
}

/* The end of a repair's storage step (a segment replaced, the epochs file
 * rebuilt; what: its name for a failure's line): false when the caller
 * has nothing more to do (the partition is going, or the step failed and
 * is tried again); true when it succeeded, counted, with the marks of the
 * damage cleared (the repair removed its record: damage found next is
 * new). The caller logs it, then calls repair_resumed. */
static bool repair_ended(part_t *pt, int status, const char *what)
{
    tn_replica_t *rm = pt->rm;
    pt->busy--;
    if (pt->dead || rm->closing) {
        rep_release(pt);
        part_maybe_free(pt);
        return false;
    }
    if (status != 0) {
        repair_fail(pt, what, tn_strerror(status));
        return false;
    }
    rep_release(pt);
    pt->dmg_logged = false;
    pt->dmg_stuck = false;
    pt->dmg_recorded = false;
    rm->st.repairs++;
    return true;
}

/* After a repair's step succeeded: the core is fed the log as it is now
 * and fetches again. */
static void repair_resumed(part_t *pt)
{
    pt->core_fed = false;
    poll_log(pt);
    send_fetches(pt->rm);
}

static void on_repaired(tn_plog_repair_t *req, int status)
{
    part_t *pt = req->data;
    tn_buf_fini(&pt->rep_buf);
    tn_buf_init(&pt->rep_buf);
    if (!repair_ended(pt, status, "replacing the segment"))
        return;
    int err = pt->plog != NULL ? tn_plog_err(pt->plog) : 0;
    char range[96];
    if (pt->rep_active && req->end > req->base)
        snprintf(range, sizeof(range), "offsets %" PRIu64 "..%" PRIu64 " (the active segment)",
                 req->base, req->end - 1);
    else if (pt->rep_active)
        snprintf(range, sizeof(range),
                 "offsets from %" PRIu64 " (the active segment, emptied: nothing of it to copy)",
                 req->base);
    else if (req->recs_end < req->end)
        snprintf(range, sizeof(range),
                 "offsets %" PRIu64 "..%" PRIu64 " (then the leader's gap up to %" PRIu64 ")",
                 req->base, req->recs_end - 1, req->end);
    else
        rep_range(pt, range, sizeof(range));
    TN_LOG(TN_LOG_NOTICE,
           "replica %s/%" PRIu32 ": repaired %s from node %" PRIu32
           " (the damaged file is kept as %s)%s",
           pt->topic, pt->p, range, pt->rep_from, req->quarantined,
           err != 0 ? "; more damage found, repairing that next"
                    : "; it catches up and rejoins the ISR");
    repair_resumed(pt);
}

/* The start of a repair's storage step (what: its name for a failure's
 * line): false, the repair failed and is tried again, when this node does
 * not hold the log to write (no log, or one it does not write through);
 * else pt->rep_req is ready for the plog call and the partition busy. */
static bool repair_step_begin(part_t *pt, const char *what)
{
    if (pt->plog == NULL || (pt->src != SRC_OWN && pt->src != SRC_ENGINE)) {
        repair_fail(pt, what, "the log is not in hand");
        return false;
    }
    memset(&pt->rep_req, 0, sizeof(pt->rep_req));
    pt->rep_req.data = pt;
    pt->busy++;
    return true;
}

/* The whole copy of a damaged active segment in hand (or nothing to
 * copy): replace the segment with it. */
static void repair_active_replace(part_t *pt)
{
    if (!repair_step_begin(pt, "replacing the segment"))
        return;
    int rc = tn_plog_repair_active(
        pt->plog, &pt->rep_req, pt->rep_base, tn_buf_data(&pt->rep_buf), tn_buf_size(&pt->rep_buf),
        (const tn_epoch_entry_t *)tn_buf_data(&pt->rep_ep),
        (uint32_t)(tn_buf_size(&pt->rep_ep) / sizeof(tn_epoch_entry_t)), on_repaired);
    if (rc != 0) {
        pt->busy--;
        repair_fail(pt, "replacing the segment", tn_strerror(rc));
        return;
    }
    tn_buf_fini(&pt->rep_buf); /* the request has its own copies */
    tn_buf_init(&pt->rep_buf);
    tn_buf_reset(&pt->rep_ep);
}

/* The whole range of a damaged sealed segment in hand (gap: its records,
 * the rest of the range a gap of the leader's log): replace the segment
 * with it. */
static void repair_sealed_replace(part_t *pt, bool gap)
{
    if (!repair_step_begin(pt, "replacing the segment"))
        return;
    int rc = (gap ? tn_plog_repair_gap : tn_plog_repair)(pt->plog, &pt->rep_req, pt->rep_base,
                                                         pt->rep_end, tn_buf_data(&pt->rep_buf),
                                                         tn_buf_size(&pt->rep_buf), on_repaired);
    if (rc != 0) {
        pt->busy--;
        repair_fail(pt, "replacing the segment", tn_strerror(rc));
        return;
    }
    tn_buf_fini(&pt->rep_buf); /* the request has its own copy */
    tn_buf_init(&pt->rep_buf);
}

/* One answer for a damaged active segment (DESIGN step 7): records from
 * rep_next up to the leader's hw, or DIVERGING to the first call when
 * this copy parted from the leader's log below the segment. */
static void repair_active_reply(part_t *pt, const tn_fetch_rpart_t *rp)
{
    if (rp->status == TN_FETCH_DIVERGING && pt->rep_next == pt->rep_base) {
        /* Nothing from rep_base on is the leader's (the divergence point
         * lies below it): the damaged segment is replaced by an empty one
         * and the fetches' usual rules cut this copy back to where it
         * parted (never below the hw) and copy the rest. */
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": this copy parts from node %" PRIu32
               "'s log below its damaged active segment (the leader's epoch %" PRIu32
               " ends at %" PRIu64 "): the segment is emptied, then the copy follows as usual",
               pt->topic, pt->p, pt->rep_from, rp->epoch, rp->end_offset);
        tn_buf_reset(&pt->rep_buf);
        tn_buf_reset(&pt->rep_ep);
        repair_active_replace(pt);
        return;
    }
    if (rp->status == TN_FETCH_OUT_OF_RANGE) {
        /* The leader's log starts above rep_next (its retention went past
         * it: a copy's segment can start a few records before the
         * leader's, its fetches written whole): nothing from there on is
         * the partition's. The copy is what is in hand, possibly nothing;
         * the usual fetch from its end is answered the same and restarts
         * the log at the leader's start (a reset). */
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": node %" PRIu32 "'s log starts at %" PRIu64
               ", above offset %" PRIu64 " of the damaged active segment: the copy ends there",
               pt->topic, pt->p, pt->rep_from, rp->end_offset, pt->rep_next);
        repair_active_replace(pt);
        return;
    }
    if (rp->status == TN_FETCH_GAP && rp->end_offset > pt->rep_next) {
        /* The leader never assigned the offsets from rep_next to
         * end_offset (tn_plog_advance): a segment holds no gap, so the
         * copy ends there, and the usual fetch from its end is answered
         * GAP and skips them (a new segment at end_offset), as any copy
         * of this log does: the same offsets, the same gap. */
        TN_LOG(TN_LOG_NOTICE,
               "replica %s/%" PRIu32 ": node %" PRIu32 "'s log has a gap at offsets %" PRIu64
               "..%" PRIu64 " (never assigned): the copy of the damaged active segment ends "
               "there, and the fetch skips the gap",
               pt->topic, pt->p, pt->rep_from, pt->rep_next, rp->end_offset - 1);
        repair_active_replace(pt);
        return;
    }
    char why[64];
    if (rp->status != TN_FETCH_RECORDS) {
        snprintf(why, sizeof(why), "the leader answered %s",
                 rp->status == TN_FETCH_ERROR           ? "that it cannot read the range"
                 : rp->status == TN_FETCH_NOT_LEADER    ? "that it does not lead"
                 : rp->status == TN_FETCH_FENCED        ? "fenced"
                 : rp->status == TN_FETCH_UNKNOWN_EPOCH ? "unknown epoch"
                                                        : "another status");
        repair_fail(pt, "reading", why);
        return;
    }
    uint32_t n = 0;
    if (rp->from != pt->rep_next ||
        (rp->count > 0 &&
         (tn_rec_check_run(rp->records, rp->records_len, rp->from, &n) != 0 || n != rp->count))) {
        repair_fail(pt, "reading", "records that do not continue the range");
        return;
    }
    /* The epochs, merged with those of the answers before (each answer's
     * first entry starts at its own first offset). */
    for (uint32_t i = 0; i < rp->nepochs; i++) {
        tn_epoch_entry_t e;
        tn_fetch_rpart_epoch(rp, i, &e);
        size_t have = tn_buf_size(&pt->rep_ep) / sizeof(e);
        const tn_epoch_entry_t *last =
            have > 0 ? (const tn_epoch_entry_t *)tn_buf_data(&pt->rep_ep) + have - 1 : NULL;
        if (last != NULL && last->epoch == e.epoch)
            continue;
        if ((last != NULL && (e.epoch < last->epoch || e.start <= last->start)) ||
            e.start < rp->from || e.start >= rp->from + rp->count) {
            repair_fail(pt, "reading", "epochs that do not follow the records");
            return;
        }
        if (tn_buf_append(&pt->rep_ep, &e, sizeof(e)) != 0) {
            repair_fail(pt, "reading", "out of memory");
            return;
        }
    }
    if (rp->count > 0 && tn_buf_append(&pt->rep_buf, rp->records, rp->records_len) != 0) {
        repair_fail(pt, "reading", "out of memory");
        return;
    }
    pt->rep_next += rp->count;
    /* Done at the leader's hw (an empty answer), or once a segment's worth
     * is in hand (what this copy's active segment held, at most): the
     * rest comes by the usual fetches. */
    uint64_t enough = pt->plog != NULL ? pt->plog->store->opts.segment_bytes : 0;
    if (rp->count > 0 && tn_buf_size(&pt->rep_buf) < enough) {
        repair_send(pt);
        return;
    }
    repair_active_replace(pt);
}

static void on_epochs_rebuilt(tn_plog_repair_t *req, int status)
{
    part_t *pt = req->data;
    if (!repair_ended(pt, status, "rebuilding the epochs file"))
        return;
    int err = pt->plog != NULL ? tn_plog_err(pt->plog) : 0;
    TN_LOG(TN_LOG_NOTICE,
           "replica %s/%" PRIu32 ": rebuilt its epochs file from its records (%" PRIu64
           " epochs; the first records' epoch %" PRIu32 " from node %" PRIu32 ")%s",
           pt->topic, pt->p, req->end, req->first_epoch, pt->rep_from,
           err != 0 ? "; more damage found, repairing that next"
                    : "; it catches up and rejoins the ISR");
    repair_resumed(pt);
}

/* The leader's answer for a damaged epochs file: the epoch of this copy's
 * first offset (none when the leader cannot say, e.g. its log starts
 * above it: the rebuild then needs the log to start with an EPOCH_START
 * record). */
static void repair_epochs_reply(part_t *pt, const tn_fetch_rpart_t *rp)
{
    if (rp->status != TN_FETCH_RECORDS && rp->status != TN_FETCH_ERROR &&
        rp->status != TN_FETCH_OUT_OF_RANGE) {
        repair_fail(pt, "reading", "the leader answered that it does not lead, or another epoch");
        return;
    }
    uint32_t first_epoch = 0;
    if (rp->status == TN_FETCH_RECORDS && rp->count > 0 && rp->from == pt->rep_base &&
        rp->nepochs > 0) {
        tn_epoch_entry_t e;
        tn_fetch_rpart_epoch(rp, 0, &e);
        if (e.start == rp->from)
            first_epoch = e.epoch;
    }
    if (!repair_step_begin(pt, "rebuilding the epochs file"))
        return;
    int rc = tn_plog_rebuild_epochs(pt->plog, &pt->rep_req, first_epoch, on_epochs_rebuilt);
    if (rc != 0) {
        pt->busy--;
        repair_fail(pt, "rebuilding the epochs file", tn_strerror(rc));
    }
}

static void on_repair_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    part_t *pt = arg;
    tn_replica_t *rm = pt->rm;
    pt->busy--;
    pt->rep_call = NULL;
    if (pt->dead || rm->closing) {
        rep_release(pt);
        part_maybe_free(pt);
        return;
    }
    if (status != 0) {
        repair_fail(pt, "reading", err != NULL ? err : tn_strerror(status));
        return;
    }
    if (reply->status == 429) {
        /* The leader serves max-repairs-per-node repair reads already:
         * the same piece is asked again shortly, the copy kept (and this
         * node's slot with it). */
        rm->st.repair_busy_asked++;
        TN_LOG_RL(TN_LOG_NOTICE, 5000,
                  "replica %s/%" PRIu32 ": node %" PRIu32
                  " is busy serving other repairs (max-repairs-per-node): asking again for "
                  "offsets from %" PRIu64 " shortly",
                  pt->topic, pt->p, pt->rep_from, pt->rep_next);
        pt->rep_resend_at = now_ms(rm) + REPAIR_BUSY_MS;
        return;
    }
    char why[64];
    tn_fetch_reply_t fr;
    tn_fetch_rpart_t rp;
    if (reply->status != 200 || tn_fetch_reply_decode(reply->body, reply->body_len, &fr) != 0 ||
        fr.count != 1 || tn_fetch_reply_next(&fr, &rp) != 0) {
        snprintf(why, sizeof(why), "answer %u", reply->status);
        repair_fail(pt, "reading", why);
        return;
    }
    if (pt->rep_epochs) {
        repair_epochs_reply(pt, &rp);
        return;
    }
    if (pt->rep_active) {
        repair_active_reply(pt, &rp);
        return;
    }
    if (rp.status == TN_FETCH_GAP && pt->rep_next > pt->rep_base && rp.end_offset >= pt->rep_end) {
        /* The rest of the range is offsets the leader never assigned
         * (tn_plog_advance left a gap after this segment's records, up to
         * the next segment's base): so does this copy. */
        repair_sealed_replace(pt, true);
        return;
    }
    if (rp.status != TN_FETCH_RECORDS) {
        snprintf(why, sizeof(why), "the leader answered %s",
                 rp.status == TN_FETCH_ERROR           ? "that it cannot read the range"
                 : rp.status == TN_FETCH_GAP           ? "a gap inside the segment's records"
                 : rp.status == TN_FETCH_NOT_LEADER    ? "that it does not lead"
                 : rp.status == TN_FETCH_FENCED        ? "fenced"
                 : rp.status == TN_FETCH_UNKNOWN_EPOCH ? "unknown epoch"
                                                       : "another status");
        repair_fail(pt, "reading", why);
        return;
    }
    uint32_t n = 0;
    if (rp.from != pt->rep_next || rp.count == 0 || pt->rep_next + rp.count > pt->rep_end ||
        tn_rec_check_run(rp.records, rp.records_len, rp.from, &n) != 0 || n != rp.count) {
        repair_fail(pt, "reading", "records that do not continue the range");
        return;
    }
    if (tn_buf_append(&pt->rep_buf, rp.records, rp.records_len) != 0) {
        repair_fail(pt, "reading", "out of memory");
        return;
    }
    pt->rep_next += rp.count;
    if (pt->rep_next < pt->rep_end) {
        repair_send(pt);
        return;
    }
    repair_sealed_replace(pt, false);
}

/* Ask the leader for the next piece of the damaged range. */
static void repair_send(part_t *pt)
{
    tn_replica_t *rm = pt->rm;
    const char *addr = member_addr(rm, pt->rep_from);
    if (addr == NULL || rm->o.rpc == NULL) {
        repair_fail(pt, "reading", "no address for the leader");
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn_fetch_part_t fp;
    memset(&fp, 0, sizeof(fp));
    snprintf(fp.topic, sizeof(fp.topic), "%s", pt->topic);
    fp.partition = pt->p;
    fp.leader_epoch = pt->core.ps.leader_epoch;
    fp.fetch_offset = pt->rep_next;
    fp.flushed_offset = pt->rep_end;
    fp.partition_epoch = pt->core.ps.partition_epoch;
    if (pt->rep_active) {
        /* Up to the leader's hw; the first call asks the leader to check
         * that this copy's log agrees with its own below the segment. */
        fp.flushed_offset = UINT64_MAX;
        if (pt->rep_next == pt->rep_base && pt->plog != NULL)
            fp.last_fetched_epoch = tn_plog_damage_prefix_epoch(pt->plog, pt->rep_base);
    }
    if (pt->rep_epochs)
        fp.flushed_offset = UINT64_MAX; /* one batch up to the hw: its epoch */
    int rc = tn_fetch_req_put_head(&b, rm->o.node, tn_meta_incarnation(rm->o.meta), 0,
                                   pt->rep_epochs ? 1 : (uint32_t)rm->o.fetch_max_bytes, 1);
    if (rc == 0)
        rc = tn_fetch_req_put_part(&b, &fp);
    if (rc == 0) {
        pt->busy++; /* before: on_repair_reply may run inside the call */
        rc = tn_rpc_call(rm->o.rpc, addr, TN_OP_REPAIR, tn_buf_data(&b), tn_buf_size(&b),
                         REPAIR_CALL_MS, on_repair_reply, pt, &pt->rep_call);
        if (rc != 0)
            pt->busy--;
    }
    tn_buf_fini(&b);
    if (rc != 0)
        repair_fail(pt, "reading", tn_strerror(rc));
}

/* The tick's look at a partition's log: a damaged copy is reported, then
 * repaired from the leader; one that cannot be says so. */
static void check_damage(part_t *pt, uint64_t now)
{
    tn_replica_t *rm = pt->rm;
    if (pt->rep_busy && pt->rep_resend_at != 0 && now >= pt->rep_resend_at &&
        pt->rep_call == NULL) {
        pt->rep_resend_at = 0; /* the leader was busy: its turn may have come */
        repair_send(pt);
        return;
    }
    pt->rep_waiting = false;
    if (pt->plog == NULL || (pt->src != SRC_OWN && pt->src != SRC_ENGINE) || pt->rep_busy)
        return;
    if (tn_plog_err(pt->plog) != TN_ECORRUPT)
        return;
    if (!pt->dmg_logged) {
        pt->dmg_logged = true;
        TN_LOG(TN_LOG_ERROR,
               "replica %s/%" PRIu32 ": this copy is damaged (%s): out of the ISR and of "
               "elections until it is repaired from the leader",
               pt->topic, pt->p, pt->plog->errmsg);
    }
    record_damage(pt);
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(rm->o.meta), pt->topic, pt->p);
    if (ps == NULL)
        return;
    if (!marked_damaged(ps, rm->o.node)) {
        if (pt->dmg_busy || now < pt->dmg_retry_at)
            return;
        memset(&pt->dmg_req, 0, sizeof(pt->dmg_req));
        pt->dmg_req.data = pt;
        pt->dmg_busy = true;
        pt->busy++;
        int rc = tn_meta_mark_corrupt(rm->o.meta, &pt->dmg_req, pt->topic, pt->p, rm->o.node,
                                      on_damage_reported);
        if (rc != 0) {
            pt->dmg_busy = false;
            pt->busy--;
            pt->dmg_retry_at = now + DMG_RETRY_MS;
        }
        return;
    }
    if (now < pt->rep_retry_at || pt->appending || pt->truncating)
        return;
    uint64_t base = 0, end = 0;
    bool where = tn_plog_damage(pt->plog, &base, &end);
    /* A damaged epochs file is rebuilt first, also beside a damaged
     * active segment: that repair needs the history below the segment. */
    bool epochs = tn_plog_epochs_damaged(pt->plog);
    if (epochs) {
        tn_plog_stats_t st;
        tn_plog_stats(pt->plog, &st);
        base = st.first_offset;
    }
    uint32_t leader = pt->core.ps.leader;
    /* Waiting for a leader other than this node (or for the core to learn
     * the metastore's epoch) passes; the other two stay until an admin
     * acts: tn_replica_mends then says no. */
    pt->dmg_stuck = pt->core.ps.partition_epoch >= ps->partition_epoch &&
                    ((!where && !epochs) || leader == TN_PSTATE_NONE);
    if ((!where && !epochs) || pt->core.role != TN_REPL_FOLLOWER || leader == TN_PSTATE_NONE ||
        leader == rm->o.node || pt->core.ps.partition_epoch < ps->partition_epoch) {
        if (pt->core.ps.partition_epoch >= ps->partition_epoch &&
            (pt->dmg_stuck_logged_at == 0 || now >= pt->dmg_stuck_logged_at + STUCK_LOG_MS)) {
            pt->dmg_stuck_logged_at = now;
            TN_LOG(TN_LOG_ERROR, "replica %s/%" PRIu32 ": cannot repair this copy: %s", pt->topic,
                   pt->p,
                   !where && !epochs ? "the damage is not in the records of a segment"
                   : leader == TN_PSTATE_NONE
                       ? "no leader to copy from (every in-sync replica is damaged or down); "
                         "the partition stays offline"
                       : "waiting for a leader other than this node");
        }
        return;
    }
    if (!tn_repair_slots_take(&rm->rep_slots)) {
        /* max-repairs-per-node repairs run here already, each holding up
         * to a segment in memory: this one waits its turn (a later tick). */
        if (!pt->rep_waiting_logged) {
            pt->rep_waiting_logged = true;
            TN_LOG(TN_LOG_NOTICE,
                   "replica %s/%" PRIu32 ": waiting its turn to be repaired: %" PRIu32
                   " repairs run on this node already (max-repairs-per-node)",
                   pt->topic, pt->p, rm->rep_slots.running);
        }
        pt->rep_waiting = true;
        return;
    }
    pt->rep_waiting_logged = false;
    pt->rep_busy = true;
    pt->rep_epochs = epochs;
    pt->rep_active = !epochs && end == TN_PLOG_DAMAGE_ACTIVE;
    pt->rep_base = base;
    pt->rep_end = end;
    pt->rep_next = base;
    pt->rep_from = leader;
    tn_buf_reset(&pt->rep_buf);
    tn_buf_reset(&pt->rep_ep);
    pt->want = false;
    char range[96];
    TN_LOG(TN_LOG_NOTICE,
           "replica %s/%" PRIu32 ": repairing %s from node %" PRIu32 " (%" PRIu32
           " of at most %" PRIu32 " repairs at once here)",
           pt->topic, pt->p, rep_range(pt, range, sizeof(range)), leader, rm->rep_slots.running,
           rm->rep_slots.cap);
    uint64_t delay = test_repair_delay(pt->topic);
    if (delay > 0) {
        pt->rep_resend_at = now + delay; /* the tick sends it (check_damage) */
        return;
    }
    repair_send(pt);
}

/* --- leader: serving a damaged follower's range (TN_OP_REPAIR) ---------------------- */

typedef struct {
    tn_replica_t *rm;
    tn_rpc_req_t *req;
    uv_work_t work;
    tn_plog_t *plog;
    char topic[256];
    uint32_t p;
    uint64_t from, to;
    bool upto_hw; /* an active segment's copy: to is the hw, cut at a batch end below it */
    size_t max;
    tn_buf_t recs;
    uint32_t count;
    int rc;
    uint32_t div_epoch; /* TN_FETCH_DIVERGING: the leader's epoch and its end */
    uint64_t div_end;
    /* (up to the hw) from is below this log's start: TN_FETCH_OUT_OF_RANGE */
    bool out_of_range;
    /* from is in a gap of this log (offsets never assigned,
     * tn_plog_advance): TN_FETCH_GAP */
    bool gap;
    uint64_t log_start; /* OUT_OF_RANGE: the log's start; GAP: the gap's end */
} rreq_t;

static void repair_read_work(uv_work_t *w)
{
    rreq_t *r = TN_CONTAINER_OF(w, rreq_t, work);
    test_repair_read_delay(r->topic);
    if (r->from >= r->to)
        return; /* (up to the hw) nothing below it */
    r->rc = tn_plog_read_raw(r->plog, r->from, r->max, &r->recs, &r->count);
    if (r->rc == TN_ENOTFOUND && r->upto_hw) {
        /* Below the log's start (retention went past it): nothing of the
         * copy's range from there is the partition's any more; the copy
         * is told where the log starts (its fetch then restarts there). */
        tn_plog_stats_t st;
        tn_plog_stats(r->plog, &st);
        if (r->from < st.first_offset) {
            r->out_of_range = true;
            r->log_start = st.first_offset;
            r->rc = 0;
            r->count = 0;
            tn_buf_reset(&r->recs);
        }
    }
    if (r->rc == TN_EGAP) {
        /* Offsets this log never assigned (tn_plog_advance): the copy
         * has the same gap, up to its end, as a fetch skips it. */
        uint64_t end = tn_plog_gap_end(r->plog, r->from);
        if (end > r->from) {
            r->gap = true;
            r->log_start = end;
            r->rc = 0;
            r->count = 0;
            tn_buf_reset(&r->recs);
        }
    }
    if (r->rc != 0 || r->count == 0)
        return;
    /* Never past the end of the range, which must be a batch's end (up to
     * the hw: cut at the last batch end below it). */
    const unsigned char *b = (const unsigned char *)tn_buf_data(&r->recs);
    size_t len = tn_buf_size(&r->recs), pos = 0, batch_pos = 0;
    uint32_t n = 0, batch_n = 0;
    bool more = false;
    while (pos < len) {
        tn_rec_hdr_t h;
        if (tn_rec_decode_hdr(b + pos, len - pos, &h) != 0) {
            r->rc = TN_ECORRUPT;
            return;
        }
        if (h.offset >= r->to)
            break;
        more = (h.flags & TN_REC_F_MORE) != 0;
        pos += (size_t)tn_rec_size(&h);
        n++;
        if (!more) {
            batch_pos = pos;
            batch_n = n;
        }
    }
    if (more && !r->upto_hw) {
        r->rc = UV_EINVAL; /* the end falls inside a batch */
        return;
    }
    r->recs.len = r->recs.off + batch_pos; /* cut at the range end */
    r->count = batch_n;
}

static void repair_reply(rreq_t *r, uint16_t status)
{
    tn_replica_t *rm = r->rm;
    part_t *pt = part_find(rm, r->topic, r->p);
    uint64_t hw = pt != NULL ? pt->core.hw : 0;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_fetch_reply_put_head(&b, 1);
    if (rc == 0 && status == TN_FETCH_RECORDS) {
        tn_epoch_entry_t ep[64];
        uint32_t nep =
            r->count > 0 ? tn_plog_epochs_range(r->plog, r->from, r->from + r->count, ep, 64) : 0;
        rc = tn_fetch_reply_put_records(&b, hw, r->from, r->count, ep, nep, tn_buf_data(&r->recs),
                                        tn_buf_size(&r->recs));
    } else if (rc == 0 && status == TN_FETCH_DIVERGING) {
        rc = tn_fetch_reply_put_diverging(&b, hw, r->div_epoch, r->div_end);
    } else if (rc == 0 && status == TN_FETCH_OUT_OF_RANGE) {
        rc = tn_fetch_reply_put_out_of_range(&b, hw, r->log_start);
    } else if (rc == 0 && status == TN_FETCH_GAP) {
        rc = tn_fetch_reply_put_gap(&b, hw, r->log_start);
    } else if (rc == 0) {
        rc = tn_fetch_reply_put_status(&b, status, hw);
    }
    if (rc == 0)
        tn_rpc_reply(r->req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    else
        tn_rpc_reply(r->req, 503, "application/json", "{\"error\":\"out of memory\"}", 25);
    tn_buf_fini(&b);
    tn_buf_fini(&r->recs);
    tn_free(r);
}

static void repair_read_done(uv_work_t *w, int status)
{
    rreq_t *r = TN_CONTAINER_OF(w, rreq_t, work);
    tn_replica_t *rm = r->rm;
    rm->working--;
    tn_repair_slots_give(&rm->read_slots); /* (the answer is made at once, below) */
    part_t *pt = part_find(rm, r->topic, r->p);
    bool ok = status == 0 && r->rc == 0 && (r->count > 0 || r->upto_hw || r->gap) && pt != NULL &&
              pt->plog == r->plog && pt->core.role == TN_REPL_LEADER;
    if (!ok && r->rc != 0)
        TN_LOG_RL(TN_LOG_WARN, 5000,
                  "replica %s/%" PRIu32 ": cannot serve offsets from %" PRIu64 " for a repair: %s",
                  r->topic, r->p, r->from, tn_strerror(r->rc));
    tn_plog_t *pinned = r->plog;
    uint16_t answer = !ok               ? TN_FETCH_ERROR
                      : r->out_of_range ? TN_FETCH_OUT_OF_RANGE
                      : r->gap          ? TN_FETCH_GAP
                                        : TN_FETCH_RECORDS;
    repair_reply(r, answer); /* frees r */
    tn_plog_unpin(pinned);
    if (rm->closing)
        maybe_close_done(rm);
}

void tn_replica_on_repair(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_replica_t *rm = arg;
    if (refused_not_ready(rm, req))
        return;
    tn_fetch_req_t fr;
    tn_fetch_part_t fp;
    if (tn_fetch_req_decode(payload, len, &fr) != 0 || fr.count != 1 ||
        tn_fetch_req_next(&fr, &fp) != 0 || fp.flushed_offset <= fp.fetch_offset) {
        tn_rpc_reply(req, 400, "application/json", "{\"error\":\"malformed repair\"}", 28);
        return;
    }
    rreq_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL) {
        tn_rpc_reply(req, 503, "application/json", "{\"error\":\"out of memory\"}", 25);
        return;
    }
    r->rm = rm;
    r->req = req;
    snprintf(r->topic, sizeof(r->topic), "%s", fp.topic);
    r->p = fp.partition;
    r->from = fp.fetch_offset;
    r->to = fp.flushed_offset;
    r->upto_hw = fp.flushed_offset == UINT64_MAX;
    r->max = fr.max_bytes > 0 && fr.max_bytes < rm->o.fetch_max_bytes ? fr.max_bytes
                                                                      : rm->o.fetch_max_bytes;
    tn_buf_init(&r->recs);
    part_t *pt = part_find(rm, r->topic, r->p);
    uint16_t status = TN_FETCH_RECORDS;
    if (!leads_ready(pt))
        status = TN_FETCH_NOT_LEADER;
    else if (fp.leader_epoch < pt->core.ps.leader_epoch)
        status = TN_FETCH_FENCED;
    else if (fp.leader_epoch > pt->core.ps.leader_epoch)
        status = TN_FETCH_UNKNOWN_EPOCH;
    else if (tn_plog_err(pt->plog) != 0 || (!r->upto_hw && r->to > tn_plog_written_next(pt->plog)))
        status = TN_FETCH_ERROR;
    if (status == TN_FETCH_RECORDS && r->upto_hw)
        r->to = pt->core.hw; /* committed: the same on every replica, for good */
    if (status == TN_FETCH_RECORDS && fp.last_fetched_epoch != 0 && fp.fetch_offset > 0) {
        /* An active segment's copy: the asking log's record before
         * fetch_offset carries last_fetched_epoch; it agrees with this log
         * below fetch_offset only when this history has that epoch running
         * at least to fetch_offset (a fetch's check, repl.c). */
        uint32_t found = 0;
        uint64_t end = 0;
        if (tn_plog_epoch_end(pt->plog, fp.last_fetched_epoch, &found, &end) != 0) {
            status = TN_FETCH_ERROR;
        } else if (found != fp.last_fetched_epoch || end < fp.fetch_offset) {
            status = TN_FETCH_DIVERGING;
            r->div_epoch = found;
            r->div_end = end;
        }
    }
    if (status != TN_FETCH_RECORDS) {
        repair_reply(r, status);
        return;
    }
    if (!tn_repair_slots_take(&rm->read_slots)) {
        /* max-repairs-per-node reads served at once already, each
         * holding up to fetch-max-bytes and its answer: the follower asks
         * again shortly (429), keeping what it copied. */
        char body[160];
        int n = snprintf(body, sizeof(body),
                         "{\"error\":\"busy: this node serves %" PRIu32
                         " repair reads at once already (max-repairs-per-node)\"}",
                         rm->read_slots.running);
        tn_rpc_reply(req, 429, "application/json", body, (size_t)n);
        tn_buf_fini(&r->recs);
        tn_free(r);
        return;
    }
    r->plog = pt->plog;
    tn_plog_pin(r->plog); /* the engine's: kept while the worker reads it (freq_answer) */
    rm->working++;
    if (uv_queue_work(rm->o.loop, &r->work, repair_read_work, repair_read_done) != 0) {
        rm->working--;
        tn_repair_slots_give(&rm->read_slots);
        tn_plog_unpin(r->plog);
        repair_reply(r, TN_FETCH_ERROR);
    }
}

/* --- the tick ---------------------------------------------------------------------- */

/* A leader's followers outside the ISR: is their channels' state caught
 * up (o.channels, which also starts their catching up)? Told to the core,
 * which proposes none of them into the ISR before (repl.c, step 5). */
static void feed_channels(part_t *pt, uint64_t now)
{
    tn_replica_t *rm = pt->rm;
    /* Every CHANS_MS is enough: the question walks the partition's
     * channels, and the answer waits for a snapshot's round trip anyway. */
    if (rm->o.channels == NULL || now < pt->chans_at + CHANS_MS)
        return;
    pt->chans_at = now;
    for (uint32_t i = 0; i < TN_PSTATE_MAX_REPLICAS; i++) {
        const tn_repl_peer_t *p = &pt->core.peers[i];
        if (p->node == 0 || p->node == rm->o.node || !p->seen ||
            tn_pstate_isr_find(&pt->core.ps, p->node) >= 0)
            continue;
        bool ok = rm->o.channels(rm->o.channels_arg, pt->topic, pt->p, p->node, p->incarnation);
        if (ok == p->chans_ok && p->chans_inc == p->incarnation)
            continue;
        tn_repl_event_t ev = {.type = TN_REPL_EV_CHANNELS, .now = now};
        ev.u.channels.node = p->node;
        ev.u.channels.incarnation = p->incarnation;
        ev.u.channels.caught_up = ok;
        run(pt, &ev);
    }
}

/* --- stalled moves (cluster/movestall.h) -------------------------------------------- */

static void on_stall_failed(tn_meta_req_t *req, int status)
{
    part_t *pt = req->data;
    tn_replica_t *rm = pt->rm;
    pt->busy--;
    pt->stall_busy = false;
    if (pt->dead || rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status == 0 || status == TN_ENOTFOUND)
        return; /* failed, or the move ended meanwhile: the STATE follows */
    TN_LOG_RL(TN_LOG_WARN, 60000, "replica %s/%" PRIu32 ": failing a stalled move: %s%s", pt->topic,
              pt->p, tn_strerror(status),
              status == UV_EPERM ? " (no old replica could lead: tried again later)" : "");
    pt->stall_retry_at = now_ms(rm) + STALL_RETRY_MS;
}

static void on_stall_marked(tn_meta_req_t *req, int status)
{
    part_t *pt = req->data;
    tn_replica_t *rm = pt->rm;
    pt->busy--;
    pt->mark_busy = false;
    if (pt->dead || rm->closing) {
        part_maybe_free(pt);
        return;
    }
    if (status != 0 && status != TN_ENOTFOUND)
        TN_LOG_RL(TN_LOG_WARN, 60000, "replica %s/%" PRIu32 ": recording a move's stall marks: %s",
                  pt->topic, pt->p, tn_strerror(status));
}

/* Propose the move's stall marks when movestall.h's step 5 says so. */
static void propose_marks(part_t *pt, uint64_t now)
{
    tn_replica_t *rm = pt->rm;
    tn_pstate_mark_t mk[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    if (pt->mark_busy || !tn_movestall_mark(&pt->stall, now, rm->o.move_stall_ms, mk, &n))
        return;
    pt->mark_req.data = pt;
    pt->mark_busy = true;
    pt->busy++;
    int rc = tn_meta_propose_move_mark(rm->o.meta, &pt->mark_req, pt->topic, pt->p,
                                       pt->stall.move_id, mk, n, on_stall_marked);
    if (rc != 0) {
        pt->mark_busy = false;
        pt->busy--;
        TN_LOG_RL(TN_LOG_WARN, 60000, "replica %s/%" PRIu32 ": recording a move's stall marks: %s",
                  pt->topic, pt->p, tn_strerror(rc));
    }
}

/* The leader of a partition with a move under way: a target member outside
 * the ISR, alive, whose copy made no progress for move-stall-timeout gets
 * the move failed (PART_MOVE fail, re-checked when applied: movestall.h). */
static void check_stall(part_t *pt, uint64_t now)
{
    tn_replica_t *rm = pt->rm;
    const tn_pstate_t *ps = &pt->core.ps;
    if (!leads_ready(pt) || ps->ntarget == 0) {
        if (pt->stall.move_id != 0)
            tn_movestall_reset(&pt->stall);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(rm->o.meta);
    tn_movestall_target_t t[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < ps->ntarget && i < TN_PSTATE_MAX_REPLICAS; i++) {
        uint32_t node = ps->target[i];
        if (node == rm->o.node)
            continue; /* the leader holds it all */
        const tn_meta_member_t *mb = tn_meta_member_find(s, node);
        tn_movestall_target_t *x = &t[n++];
        memset(x, 0, sizeof(*x));
        x->node = node;
        x->in_isr = tn_pstate_isr_find(ps, node) >= 0;
        x->alive = mb != NULL && mb->status != TN_MEMBER_DEAD;
        for (uint32_t j = 0; j < TN_PSTATE_MAX_REPLICAS; j++) {
            const tn_repl_peer_t *peer = &pt->core.peers[j];
            if (peer->node == node && peer->seen) {
                x->seen = true;
                x->end = peer->end;
            }
        }
    }
    /* The committed marks (a MOVE_MARK bumps no epoch: they are read from
     * the metastore replica, not from the core's copy of the state). */
    const tn_pstate_t *cps = tn_meta_state_pstate(s, pt->topic, pt->p);
    bool same = cps != NULL && cps->move_id == ps->move_id;
    tn_movestall_marks(&pt->stall, ps->move_id, same ? cps->mark : NULL, same ? cps->nmark : 0, now,
                       tn_now_wall_ms());
    tn_movestall_verdict_t v;
    bool stalled = tn_movestall_check(&pt->stall, ps->move_id, tn_pstate_move_ready(ps), t, n,
                                      pt->core.end, now, rm->o.move_stall_ms, &v);
    if (!stalled) {
        propose_marks(pt, now);
        return;
    }
    /* One fail in flight; none while an ISR change of ours is (it may add
     * the target: the Raft log orders the two). */
    if (pt->stall_busy || pt->isr_busy || now < pt->stall_retry_at)
        return;
    /* A lead just taken waits a moment for the target's append error, so
     * that the reason names it (movestall.h step 3). */
    const char *pe = peer_err(pt, v.node);
    if (tn_movestall_wait_err(&v, pe, pt->core.became_at, now, ERR_REPORT_MS))
        return;
    char why[TN_META_MOVE_REASON_MAX + 1];
    tn_movestall_reason(&v, rm->o.move_stall_ms, pt->core.end, pe, why, sizeof(why));
    TN_LOG(TN_LOG_WARN,
           "replica %s/%" PRIu32 ": move %016" PRIx64 " stalled (no progress for %" PRIu64
           " ms), failing it: %s",
           pt->topic, pt->p, ps->move_id, v.idle_ms, why);
    pt->stall_req.data = pt;
    pt->stall_busy = true;
    pt->busy++;
    int rc = tn_meta_propose_move(rm->o.meta, &pt->stall_req, pt->topic, pt->p, TN_MOVE_FAIL,
                                  ps->move_id, NULL, 0, why, on_stall_failed);
    if (rc != 0) {
        pt->stall_busy = false;
        pt->busy--;
        pt->stall_retry_at = now + STALL_RETRY_MS;
        TN_LOG_RL(TN_LOG_WARN, 60000, "replica %s/%" PRIu32 ": failing a stalled move: %s",
                  pt->topic, pt->p, tn_strerror(rc));
    }
}

/* Count the moves the metastore replica shows finished since this node
 * started (its ring of the last ones, each counted once). */
static void tally_moves(tn_replica_t *rm)
{
    const tn_meta_state_t *s = tn_meta_state(rm->o.meta);
    for (size_t k = 0; tn_meta_state_move_done(s, k) != NULL; k++) {
        const tn_meta_move_t *mv = tn_meta_state_move_done(s, k);
        (void)tn_move_tally_note(&rm->tally, mv->id, mv->end, mv->started_ms, mv->finished_ms);
    }
}

static void on_tick(uv_timer_t *t)
{
    tn_replica_t *rm = t->data;
    uint64_t now = now_ms(rm);
    if (!meta_current(rm))
        return; /* see on_pstate */
    mark_sweep(rm);
    rel_tick(rm);
    for (uint32_t b = 0; b < NBUCKETS; b++)
        for (part_t *pt = rm->buckets[b], *next; pt != NULL; pt = next) {
            next = pt->next;
            if (pt->dead)
                continue;
            reopen_step(pt);
            if (pt->aside_stale && pt->src == SRC_OWN)
                pt->aside_stale = !abandon_aside(pt);
            if (pt->core.role == TN_REPL_LEADER && !pt->ready)
                leader_take(pt);
            if (pt->unmarking || rel_blocks(pt))
                continue; /* "quarantine marks" */
            if (!pt->core_fed && pt->has_ps) {
                first_feed(pt);
                continue;
            }
            /* (Also when not fed since a truncation, reset or repair that
             * ended after the engine closed the log: engine_log_closing.) */
            if (pt->core.role != TN_REPL_LEADER && pt->src == SRC_NONE)
                (void)ensure_log(pt);
            if (pt->core.role != TN_REPL_LEADER && pt->src == SRC_ENGINE && pt->plog != NULL)
                tn_plog_fail_gated(pt->plog, TN_EFENCED); /* see resign() */
            poll_log(pt);
            if (!pt->core_fed)
                continue;
            if (pt->has_ps) {
                feed_state(pt);
            } else {
                /* Polling the metastore makes up for lost notifications
                 * (and answers the cores' REFRESH). */
                const tn_pstate_t *ps =
                    tn_meta_state_pstate(tn_meta_state(rm->o.meta), pt->topic, pt->p);
                if (ps != NULL && ps->partition_epoch > pt->core.ps.partition_epoch) {
                    note_leader_change(pt, ps);
                    pt->ps = *ps;
                    pt->has_ps = true;
                    hold_deliveries(pt);
                    feed_state(pt);
                }
            }
            /* Not only once serving: a leader whose committed ISR is below
             * min_insync cannot serve until a follower is added, and one
             * is added only with its channels caught up. */
            if (pt->core.role == TN_REPL_LEADER) {
                feed_channels(pt, now);
                check_stall(pt, now);
                renew_lease(pt);
                if (pt->released_move != 0 && now >= pt->released_at + RELEASE_HOLD_MS) {
                    pt->released_move = 0; /* the hand-over did not come: deliver again */
                    hold_deliveries(pt);
                }
                /* Below min_insync nothing commits until a follower is
                 * back: the publishes waiting for the hw are answered now
                 * (503, as Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND), not
                 * left until their clients give up; the epoch-start record
                 * waits on. */
                if (pt->ready && pt->plog != NULL && tn_repl_accepts(&pt->core) == TN_EFEWREPLICAS)
                    tn_plog_fail_gated_records(pt->plog, TN_EFEWREPLICAS);
            } else if (pt->stall.move_id != 0) {
                /* Not leading: no clocks kept (a lead taken again starts
                 * them from the committed marks: movestall.h step 6). */
                tn_movestall_reset(&pt->stall);
            }
            if (pt->fence.node != 0 && !tn_handfence_holds(&pt->fence, now))
                hold_deliveries(pt); /* its bound passed (handfence.h) */
            note_warm(pt, now);
            leader_begin(pt); /* one that ran out of memory asks again */
            tn_repl_event_t ev = {.type = TN_REPL_EV_TICK, .now = now};
            run(pt, &ev);
            if (!pt->dead)
                check_damage(pt, now);
        }
    if (now >= rm->tally_at + TALLY_MS) {
        rm->tally_at = now;
        tally_moves(rm);
    }
    wake_fetches(rm);
    send_fetches(rm);
}

/* --- public ------------------------------------------------------------------------ */

int tn_replica_new(const tn_replica_opts_t *o, tn_replica_t **out)
{
    if (o == NULL || o->loop == NULL || o->meta == NULL || o->broker == NULL)
        return UV_EINVAL;
    tn_replica_t *rm = tn_calloc(1, sizeof(*rm));
    if (rm == NULL)
        return UV_ENOMEM;
    rm->o = *o;
    rm->o.data_dir = NULL;
    if (rm->o.replica_lag_ms == 0)
        rm->o.replica_lag_ms = DEFAULT_LAG_MS;
    if (rm->o.fetch_wait_ms == 0)
        rm->o.fetch_wait_ms = DEFAULT_WAIT_MS;
    if (rm->o.fetch_timeout_ms == 0)
        rm->o.fetch_timeout_ms = rm->o.fetch_wait_ms + 2000;
    if (rm->o.fetch_max_bytes == 0)
        rm->o.fetch_max_bytes = DEFAULT_MAX;
    tn_throttle_init(&rm->bucket, rm->o.move_rate, uv_now(o->loop));
    tn_repair_slots_init(&rm->rep_slots, rm->o.max_repairs);
    tn_repair_slots_init(&rm->read_slots, rm->o.max_repairs);
    unsigned election_ms, session_ms;
    tn_meta_timeouts(o->meta, &election_ms, &session_ms);
    tn_handfence_config(&rm->fence_cfg, election_ms, session_ms);
    tn_move_tally_init(&rm->tally, (int64_t)tn_now_wall_ms());
    uv_timer_init(o->loop, &rm->timer);
    rm->timer.data = rm;
    rm->open_handles = 1;
    *out = rm;
    return 0;
}

void tn_replica_set_rpc(tn_replica_t *rm, tn_rpc_t *rpc)
{
    rm->o.rpc = rpc;
    if (rpc == NULL)
        for (group_t *g = rm->groups[CALL_FETCH]; g != NULL; g = g->next)
            if (g->inflight && g->call != NULL)
                tn_rpc_call_cancel(g->call);
}

/* Gate every log the engine recovered from disk with an epoch history (a
 * replicated partition's), hw 0: what such a log holds past the hw its
 * leader had (a tail never replicated) is not delivered while the engine
 * still holds the partition from its start, before the placement moves
 * it (tn_topic_follow_placement) or a leader here sets the hw
 * (leader_take). Appends to it are refused meanwhile
 * (tn_replica_may_append). */
static void gate_recovered(tn_replica_t *rm)
{
    tn_broker_t *b = rm->o.broker;
    for (size_t i = 0; i < b->nbuckets; i++)
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->memory)
                continue;
            for (uint32_t p = 0; p < t->nparts; p++) {
                tn_plog_t *pl = tn_topic_part_plog(t, p);
                if (pl != NULL && tn_plog_last_epoch(pl) > 0)
                    tn_plog_set_gated(pl, true);
            }
        }
}

int tn_replica_start(tn_replica_t *rm)
{
    rm->started = true;
    gate_recovered(rm);
    tn_meta_on_pstate(rm->o.meta, on_pstate, rm);
    tn_store_set_repl_watch(rm->o.broker->store, on_watch, rm);
    return uv_timer_start(&rm->timer, on_tick, TICK_MS, TICK_MS);
}

static void on_timer_closed(uv_handle_t *h);

static void maybe_close_done(tn_replica_t *rm)
{
    if (!rm->closing || rm->working > 0 || rm->fetches != NULL)
        return;
    for (uint32_t b = 0; b < NBUCKETS; b++)
        if (rm->buckets[b] != NULL)
            return;
    for (int kind = 0; kind < CALL_KINDS; kind++)
        for (group_t *g = rm->groups[kind]; g != NULL; g = g->next)
            if (g->inflight)
                return;
    if (rm->open_handles > 0) {
        /* The close watch (the tick's timer) goes last. */
        if (!uv_is_closing((uv_handle_t *)&rm->timer))
            uv_close((uv_handle_t *)&rm->timer, on_timer_closed);
        return;
    }
    for (int kind = 0; kind < CALL_KINDS; kind++)
        while (rm->groups[kind] != NULL) {
            group_t *g = rm->groups[kind];
            rm->groups[kind] = g->next;
            group_clear(g);
            tn_free(g);
        }
    for (size_t i = 0; i < rm->nmarked; i++)
        tn_free(rm->marked[i].topic);
    tn_free(rm->marked);
    while (rm->rels != NULL)
        rel_free(rm->rels); /* their callbacks ran (working is 0); a move job not run was flushed */
    void (*cb)(void *) = rm->close_cb;
    void *arg = rm->close_arg;
    rm->closing = false; /* once */
    rm->close_cb = NULL;
    tn_free(rm);
    if (cb != NULL)
        cb(arg);
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_replica_t *rm = h->data;
    rm->open_handles--;
    maybe_close_done(rm);
}

/* The close watch: a close that has not ended after CLOSE_WATCH_MS says
 * what it still waits for (then every 10 s), so a stop that hangs names
 * its cause in the log. */
static void on_close_watch(uv_timer_t *t)
{
    tn_replica_t *rm = t->data;
    uint32_t nfetches = 0, ncalls = 0, nparts = 0;
    for (freq_t *f = rm->fetches; f != NULL; f = f->next)
        nfetches++;
    for (int kind = 0; kind < CALL_KINDS; kind++)
        for (group_t *g = rm->groups[kind]; g != NULL; g = g->next)
            ncalls += g->inflight;
    const part_t *first = NULL;
    for (uint32_t b = 0; b < NBUCKETS; b++)
        for (const part_t *pt = rm->buckets[b]; pt != NULL; pt = pt->next) {
            nparts++;
            if (first == NULL)
                first = pt;
        }
    TN_LOG(TN_LOG_WARN,
           "replica: still closing after %" PRIu64 " ms: %" PRIu32 " worker job(s), %" PRIu32
           " fetch(es) to answer, %" PRIu32 " call(s) in flight, %" PRIu32 " partition(s) busy",
           uv_now(rm->o.loop) - rm->close_at, rm->working, nfetches, ncalls, nparts);
    if (first != NULL)
        TN_LOG(TN_LOG_WARN,
               "replica %s/%" PRIu32 ": closing, %" PRIu32
               " callback(s) out: src %d, appending %d, "
               "truncating %d, isr %d, damage %d/%d, repair %d, releasing %d, epoch start %s",
               first->topic, first->p, first->busy, (int)first->src, first->appending,
               first->truncating, first->isr_busy, first->dmg_busy, first->dmg_rec_busy,
               first->rep_busy, first->releasing, first->starts != NULL ? "waiting" : "none");
}

void tn_replica_close(tn_replica_t *rm, void (*cb)(void *arg), void *arg)
{
    rm->closing = true;
    rm->close_cb = cb;
    rm->close_arg = arg;
    mark_flush(rm);
    if (rm->started)
        tn_meta_on_pstate(rm->o.meta, NULL, NULL);
    if (rm->o.broker->store->repl_arg == rm)
        tn_store_set_repl_watch(rm->o.broker->store, NULL, NULL);
    uv_timer_stop(&rm->timer);
    for (freq_t *f = rm->fetches, *next; f != NULL; f = next) {
        next = f->next;
        if (!f->working)
            freq_answer(f);
    }
    for (int kind = 0; kind < CALL_KINDS; kind++)
        for (group_t *g = rm->groups[kind]; g != NULL; g = g->next)
            if (g->inflight && g->call != NULL)
                tn_rpc_call_cancel(g->call);
    for (uint32_t b = 0; b < NBUCKETS; b++)
        for (part_t *pt = rm->buckets[b], *next; pt != NULL; pt = next) {
            next = pt->next;
            if (pt->rep_call != NULL)
                tn_rpc_call_cancel(pt->rep_call); /* its callback frees what it holds */
            if (pt->err_call != NULL)
                tn_rpc_call_cancel(pt->err_call);
            /* The gate fails what waits for the hw now (the epoch-start
             * append completes here: on_start_done would free pt under
             * our feet) and what would wait later (one still being
             * written): nothing moves the hw any more. Not only a ready
             * leader's: an epoch-start record asked just before a
             * resignation (led for a moment, then a newer leader named)
             * waits for a hw in a log no longer ready, and the close
             * waited for it for ever (cluster_cycles: a node that had
             * drained never exited). */
            pt->busy++;
            if (pt->plog != NULL)
                tn_plog_gate_shut(pt->plog, TN_ECLOSED);
            /* Records asked of a log set aside since: their logs first
             * (a completion unlinks and frees its record; one still being
             * written fails once it is, the gate being shut). */
            tn_plog_t *logs[8];
            uint32_t nlogs = 0;
            for (const start_t *st = pt->starts; st != NULL && nlogs < 8; st = st->next) {
                uint32_t k = 0;
                while (k < nlogs && logs[k] != st->req.plog)
                    k++;
                if (k == nlogs && st->req.plog != pt->plog)
                    logs[nlogs++] = st->req.plog;
            }
            for (uint32_t k = 0; k < nlogs; k++)
                tn_plog_gate_shut(logs[k], TN_ECLOSED);
            pt->ready = false;
            pt->busy--;
            if (!pt->dead) {
                pt->dead = true;
                if (pt->src == SRC_ENGINE) {
                    pt->plog = NULL;
                    pt->src = SRC_NONE;
                }
            }
            part_maybe_free(pt);
        }
    /* Done: the timer closes, then rm is freed (on_timer_closed). Not yet:
     * the tick's timer watches the rest. */
    rm->close_at = uv_now(rm->o.loop);
    maybe_close_done(rm);
    if (!uv_is_closing((uv_handle_t *)&rm->timer))
        uv_timer_start(&rm->timer, on_close_watch, CLOSE_WATCH_MS, 10000);
}

bool tn_replica_local(tn_replica_t *rm, const char *topic, uint32_t p, bool *decided)
{
    part_t *pt = part_find(rm, topic, p);
    if (pt != NULL) {
        *decided = true;
        /* Not while our own log closes (hand_over's release_own): the
         * engine, placing the topic for another reason meanwhile, would
         * open the files while that log's last append or its close is
         * still being written (seen: "incomplete data" on the opening);
         * on_own_closed follows the placement once it is closed. */
        return pt->handed && pt->src != SRC_CLOSING;
    }
    *decided = tn_meta_state_pstate(tn_meta_state(rm->o.meta), topic, p) != NULL;
    return false;
}

void tn_replica_on_lead(tn_replica_t *rm, tn_replica_lead_cb cb, void *arg)
{
    rm->lead_cb = cb;
    rm->lead_arg = arg;
}

int tn_replica_accepts(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t *leader_epoch)
{
    part_t *pt = part_find(rm, topic, p);
    if (pt == NULL || pt->core.role != TN_REPL_LEADER || !pt->handed)
        return TN_EREMOTE;
    int rc = tn_repl_accepts(&pt->core);
    if (rc != 0)
        return rc;
    if (!pt->ready || !tn_repl_serving(&pt->core))
        return TN_ENOTSERVING;
    if (leader_epoch != NULL)
        *leader_epoch = pt->core.ps.leader_epoch;
    return 0;
}

int tn_replica_may_append(tn_replica_t *rm, const char *topic, uint32_t p, tn_plog_t *pl)
{
    if (part_find(rm, topic, p) == NULL) {
        /* No core here: replicated (a state names other replicas, or this
         * node's core is not made yet) or not at all. */
        const tn_meta_state_t *s = tn_meta_state(rm->o.meta);
        if (tn_meta_state_pstate(s, topic, p) != NULL)
            return TN_EREMOTE;
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
        if (e != NULL)
            return tn_meta_topic_factor(&e->rec) > 1 ? TN_EREMOTE : 0;
        /* Not in the metastore replica (yet): a log found on disk with an
         * epoch history is replicated, whatever the replica will say. */
        return pl != NULL && tn_plog_last_epoch(pl) > 0 ? TN_ENOTSERVING : 0;
    }
    return tn_replica_accepts(rm, topic, p, NULL);
}

bool tn_replica_serving(tn_replica_t *rm, const char *topic, uint32_t p)
{
    part_t *pt = part_find(rm, topic, p);
    return pt != NULL && pt->ready && tn_repl_serving(&pt->core);
}

bool tn_replica_mends(tn_replica_t *rm, const char *topic, uint32_t p)
{
    part_t *pt = part_find(rm, topic, p);
    if (pt == NULL) /* not opened by the manager yet: its first tick decides */
        return tn_meta_state_pstate(tn_meta_state(rm->o.meta), topic, p) != NULL;
    return !pt->dead && (pt->src == SRC_OWN || pt->src == SRC_ENGINE) && !pt->dmg_stuck;
}

bool tn_replica_leads(tn_replica_t *rm, const char *topic, uint32_t p)
{
    part_t *pt = part_find(rm, topic, p);
    return pt != NULL && pt->core.role == TN_REPL_LEADER;
}

uint32_t tn_replica_pending(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t *out)
{
    part_t *pt = part_find(rm, topic, p);
    if (pt == NULL || pt->dead || pt->core.role != TN_REPL_LEADER)
        return 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < pt->core.nmaybe && n < TN_PSTATE_MAX_REPLICAS; i++)
        out[n++] = pt->core.maybe[i].node;
    return n;
}

bool tn_replica_replicated(tn_replica_t *rm, const char *topic, uint32_t p)
{
    return part_find(rm, topic, p) != NULL ||
           tn_meta_state_pstate(tn_meta_state(rm->o.meta), topic, p) != NULL;
}

bool tn_replica_holds_own(tn_replica_t *rm, const char *topic, uint32_t nparts)
{
    for (uint32_t p = 0; p < nparts; p++) {
        const part_t *pt = part_find(rm, topic, p);
        if (pt != NULL && pt->src == SRC_OWN && pt->plog != NULL)
            return true;
    }
    return false;
}

void tn_replica_each_own_log(tn_replica_t *rm, tn_replica_log_cb cb, void *arg)
{
    for (size_t i = 0; i < NBUCKETS; i++)
        for (part_t *pt = rm->buckets[i]; pt != NULL; pt = pt->next)
            if (!pt->dead && pt->src == SRC_OWN && pt->plog != NULL)
                cb(arg, pt->topic, pt->p, pt->plog);
}

void tn_replica_each_follower_log(tn_replica_t *rm, tn_replica_log_cb cb, void *arg)
{
    for (size_t i = 0; i < NBUCKETS; i++)
        for (part_t *pt = rm->buckets[i]; pt != NULL; pt = pt->next)
            if (!pt->dead && pt->plog != NULL &&
                (pt->src == SRC_OWN || (pt->src == SRC_ENGINE && !engine_local(rm, pt, NULL))))
                cb(arg, pt->topic, pt->p, pt->plog);
}

static void count_move(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    (void)topic;
    (void)p;
    *(uint64_t *)arg += ps->ntarget > 0;
}

void tn_replica_stats(tn_replica_t *rm, tn_replica_stats_t *out)
{
    *out = rm->st;
    out->partitions = out->leading = out->serving = out->following = 0;
    out->under_replicated = out->offline = out->damaged = 0;
    out->max_lag_records = out->max_lag_bytes = out->max_lag_ms = 0;
    out->move_bytes_sent = rm->bucket.copied;
    out->repairs_running = rm->rep_slots.running;
    out->repairs_running_peak = rm->rep_slots.peak;
    out->repairs_waiting = 0;
    out->repair_busy_served = rm->read_slots.waits;
    out->throttle_waits = rm->bucket.waits;
    out->moves_done = rm->tally.done;
    out->moves_aborted = rm->tally.aborted;
    out->moves_failed = rm->tally.failed;
    out->move_seconds_count = rm->tally.seconds_count;
    out->move_seconds_sum = rm->tally.seconds_sum;
    out->moves_in_flight = 0;
    tn_meta_state_each_pstate(tn_meta_state(rm->o.meta), count_move, &out->moves_in_flight);
    uint64_t now = now_ms(rm);
    for (uint32_t b = 0; b < NBUCKETS; b++)
        for (part_t *pt = rm->buckets[b]; pt != NULL; pt = pt->next) {
            if (pt->dead)
                continue;
            out->partitions++;
            out->repairs_waiting += pt->rep_waiting;
            out->damaged += pt->plog != NULL && (pt->src == SRC_OWN || pt->src == SRC_ENGINE) &&
                            tn_plog_err(pt->plog) == TN_ECORRUPT;
            const tn_repl_t *c = &pt->core;
            if (c->ps.partition_epoch != 0 && c->ps.leader == TN_PSTATE_NONE)
                out->offline++;
            if (c->role == TN_REPL_FOLLOWER)
                out->following++;
            if (c->role != TN_REPL_LEADER)
                continue;
            out->leading++;
            out->serving += pt->ready && tn_repl_serving(c);
            if (c->ps.nisr < c->ps.nreplicas)
                out->under_replicated++;
            for (uint32_t i = 0; i < c->ps.nreplicas; i++) {
                const tn_repl_peer_t *peer = &c->peers[i];
                if (peer->node == rm->o.node || peer->node == 0)
                    continue;
                uint64_t lag = c->end > peer->flushed ? c->end - peer->flushed : 0;
                if (lag > out->max_lag_records)
                    out->max_lag_records = lag;
                uint64_t lag_bytes = lag > 0 && pt->ready && pt->plog != NULL
                                         ? tn_plog_bytes_from(pt->plog, peer->flushed)
                                         : 0;
                if (lag_bytes > out->max_lag_bytes)
                    out->max_lag_bytes = lag_bytes;
                uint64_t ms = now > peer->caught_up_at ? now - peer->caught_up_at : 0;
                if (ms > out->max_lag_ms)
                    out->max_lag_ms = ms;
            }
        }
}

int tn_replica_part_info(tn_replica_t *rm, const char *topic, uint32_t p, uint64_t *hw,
                         uint64_t *log_end)
{
    part_t *pt = part_find(rm, topic, p);
    if (pt == NULL || !pt->core_fed)
        return TN_ENOTFOUND;
    *hw = pt->core.hw;
    *log_end = pt->core.end;
    return 0;
}

uint32_t tn_replica_part_errors(tn_replica_t *rm, const char *topic, uint32_t p,
                                tn_replica_perr_t *out)
{
    part_t *pt = part_find(rm, topic, p);
    if (!leads_ready(pt))
        return 0;
    const tn_pstate_t *ps = &pt->core.ps;
    uint32_t n = 0;
    for (uint32_t i = 0; i < TN_PSTATE_MAX_REPLICAS; i++) {
        uint32_t node = pt->perr[i].node;
        if (node == 0)
            continue;
        /* A member no longer a replica nor a target keeps its slot until
         * another takes it: not shown. */
        bool member = false;
        for (uint32_t j = 0; j < ps->nreplicas && !member; j++)
            member = ps->replicas[j] == node;
        for (uint32_t j = 0; j < ps->ntarget && !member; j++)
            member = ps->target[j] == node;
        const char *e = member ? peer_err(pt, node) : NULL;
        if (e == NULL)
            continue;
        out[n].node = node;
        snprintf(out[n].text, sizeof(out[n].text), "%s", e);
        n++;
    }
    return n;
}

int tn_replica_peer_lag(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t node,
                        uint64_t *lag)
{
    part_t *pt = part_find(rm, topic, p);
    if (pt == NULL || !pt->core_fed || pt->core.role != TN_REPL_LEADER)
        return TN_ENOTFOUND;
    if (node == rm->o.node) {
        *lag = 0;
        return 0;
    }
    for (uint32_t i = 0; i < pt->core.ps.nreplicas; i++) {
        const tn_repl_peer_t *peer = &pt->core.peers[i];
        if (peer->node == node && peer->seen) {
            *lag = pt->core.end > peer->end ? pt->core.end - peer->end : 0;
            return 0;
        }
    }
    return TN_ENOTFOUND;
}

int tn_replica_move_progress(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t node,
                             uint64_t *copied, uint64_t *total)
{
    part_t *pt = part_find(rm, topic, p);
    if (!leads_ready(pt))
        return TN_ENOTFOUND;
    for (uint32_t i = 0; i < pt->core.ps.nreplicas; i++) {
        const tn_repl_peer_t *peer = &pt->core.peers[i];
        if (peer->node == node && peer->seen) {
            *total = tn_plog_bytes_from(pt->plog, 0);
            uint64_t left = peer->end < pt->core.end ? tn_plog_bytes_from(pt->plog, peer->end) : 0;
            *copied = *total > left ? *total - left : 0;
            return 0;
        }
    }
    return TN_ENOTFOUND;
}
