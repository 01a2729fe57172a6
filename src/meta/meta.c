/* The metastore on libraft. See meta.h. */
#include "core/platform.h"

#include "meta/meta.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/netaddr.h"
#include "core/time.h"
#include "meta/placement.h"
#include "meta/rebalance.h"
#include "meta/room.h"
#include "meta/transport.h"
#include "storage/io.h"

#include <inttypes.h>
#include <raft/uv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* How often the tick runs while something waits (a proposal for a
 * leader, a join, a transfer, readiness), and otherwise. */
#define LEADER_POLL_MS 10
#define TICK_MS        100
/* libraft's io ticks this many times an election timeout (io_start). */
#define ELECTION_TICKS 100
/* A failed connection to a peer is dialled again after a heartbeat
 * timeout, at most this long (libraft's own delay). */
#define CONNECT_RETRY_MAX_MS 1000
/* A proposal waits at most this long for a leader to be known. */
#define NO_LEADER_MS 5000
/* A follower is caught up only if it heard from the leader this recently. */
#define CONTACT_MS 5000
/* A join waits at most this long for the configuration to be free. */
#define JOIN_MS                       30000
#define DEFAULT_HEARTBEAT_INTERVAL_MS 5000
#define DEFAULT_DEAD_AFTER_MS         30000
/* Followers push_commit tracks for a second push (more get the heartbeat). */
#define PUSH_OWED_MAX 8
/* A proposal's whole budget, forwards and re-sends included (meta.h). */
#define PROPOSE_MS TN_META_PROPOSE_MS
/* A forward that failed at a leader goes to that same leader again no
 * sooner than this (another leader: at once). */
#define RESEND_MS 250
/* A member is heard recently while the leader had Raft contact with it
 * within this many election timeouts (meta.h). */
#define RECENT_ELECTIONS     2
#define DEFAULT_SESSION_MS   6000
#define DEFAULT_REBALANCE_MS 30000
/* How often the leader looks for partitions to move back to their
 * preferred leader. */
#define REBALANCE_SCAN_MS 1000
/* How often the leader looks for moves whose target is all in sync. */
#define MOVE_SCAN_MS 200
/* How often the leader looks for replicas to move off draining members,
 * and for a rebalance's next move (how many may touch one member at once
 * is max-moves-per-node). */
#define DECOM_SCAN_MS 250
/* A removed member still heard from gets this long to receive its own
 * tombstone (it then stops by itself) before the leader takes it out of
 * the Raft configuration, after which the leader sends it nothing. */
#define REMOVE_WAIT_MS 3000
/* The file in the Raft directory that marks this node removed. */
#define REMOVED_FILE "removed"

typedef struct fwd_s fwd_t;
typedef struct join_s join_t;
typedef struct confirm_s confirm_t;

/* The leader's last Raft contact with a member (loop ms). */
typedef struct {
    uint64_t id;
    uint64_t at;
} heard_t;

/* A partition whose state changed, to be told (tn_meta_on_pstate). */
typedef struct {
    char topic[TN_NAME_MAX + 1];
    uint32_t p;
} pnote_t;

/* On the leader: since when (loop ms) partition p of topic has had its
 * preferred leader ready to take over (tn_pstate_preferred_ready). */
typedef struct {
    char topic[TN_NAME_MAX + 1];
    uint32_t p;
    uint64_t since;
} ready_t;

struct tn_meta_s {
    uv_loop_t *loop;
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport transport;
    struct raft_fsm fsm;
    tn_meta_state_t state;
    raft_index start_index; /* last log index when started */
    bool ready;
    bool closing;       /* no more proposals (tn_meta_stop or tn_meta_close) */
    bool close_started; /* tn_meta_close was called */
    bool drain_only;    /* tn_meta_drain: no raft_close at the end */
    unsigned close_polls;
    uint32_t inflight;       /* proposals handed to libraft, not yet answered */
    uint64_t last_answer_ms; /* loop time of the last answer */
    tn_meta_req_t *waiting;  /* proposals before leadership, FIFO */
    tn_meta_req_t *waiting_tail;
    uv_timer_t poll;
    char address[TN_META_ADDR_MAX + 1];
    void (*close_cb)(void *arg);
    void *close_arg;
    void (*on_ready)(void *arg);
    void *ready_arg;
    /* The cluster. */
    uint64_t id;
    tn_meta_forward_fn forward;
    void *forward_arg;
    fwd_t *fwds;          /* forwarded, waiting for the leader's answer */
    join_t *joins;        /* tn_meta_join requests, FIFO, one in libraft at a time */
    confirm_t *confirms;  /* tn_meta_confirm NOOPs not yet answered and applied */
    uint64_t confirm_seq; /* the next NOOP's nonce (random start per open) */
    /* This node's registration, and the leader's dead marking. */
    tn_meta_req_t reg;
    tn_meta_req_t mark;
    tn_meta_req_t salt; /* the leader's REMOTE_SALT (make_salt) */
    bool salt_busy;
    uint64_t next_reg_ms;
    /* Loop ms until which proposals wait rather than go to libraft: the
     * disk had no room for the log's next segment (room_for_entry). */
    uint64_t no_room_until;
    /* The disk's room for the log, read rarely (room.h tn_meta_room_t):
     * the last reading, its loop ms, and the entry bytes proposed since. */
    tn_meta_room_t room;
    bool room_read; /* room holds a reading that may still be used */
    uint64_t room_at;
    uint64_t room_spent;
    /* The reading was taken with a snapshot due, the one after
     * room_due_base (raft.log.snapshot.last_index then): it serves that
     * snapshot's proposals until it is old (room_stale). */
    bool room_due;
    raft_index room_due_base;
    struct raft_transfer room_xfer; /* hands leadership away for room */
    bool room_xfer_busy;
    int64_t leader_since_wall; /* wall ms this node became leader; 0 = not leader */
    /* Heard recently, on the leader (meta.h): contacts sampled each tick,
     * counted from no earlier than when this node took over. */
    bool leading;               /* the tick saw this node lead (since, heard valid) */
    uint64_t leader_since_mono; /* loop ms it took over */
    raft_term leading_term;     /* the term of that */
    heard_t *heard;
    size_t nheard, heardcap;
    /* A new leader's barrier: libraft (0.15) appends no entry at election, so
     * until one of the leader's own term commits, its commit index may lag
     * what the cluster committed, and the replica looks caught up while it
     * is not (caught_up). */
    struct raft_barrier lead_barrier;
    raft_term lead_term;    /* the term whose barrier applied here (0: none) */
    raft_term lead_asked;   /* the term lead_barrier was asked in */
    bool lead_barrier_busy; /* lead_barrier is in libraft */
    /* A follower learns that an entry is committed with the leader's next
     * AppendEntries, a heartbeat (100 ms) later unless an entry goes out
     * first: after applying a change a follower waits for (pushes) the
     * leader sends its heartbeats at once, which carry the new commit
     * index (push_commit). */
    bool push_wanted; /* such a change applied since the last push */
    /* Followers that had not stored the entries a push said were
     * committed (their write still under way): pushed to again once the
     * leader hears they have, within a heartbeat timeout (push_more). */
    struct {
        uint64_t id;
        raft_index until; /* its match index to wait for */
    } pushes_owed[PUSH_OWED_MAX];
    uint64_t push_owed_until; /* loop ms */
    /* tn_meta_transfer (meta.h): a barrier finds the voters that answer,
     * then raft_transfer to one of them. */
    struct raft_barrier xfer_barrier;
    struct raft_transfer xfer;
    uint64_t xfer_deadline;
    uint64_t xfer_start_ms; /* when it was asked (loop time) */
    uint64_t xfer_down_ms;  /* when it saw itself stepped down (0: not yet) */
    void (*xfer_cb)(void *arg, int status);
    void *xfer_arg;
    int xfer_status;          /* 1 while undecided */
    int xfer_barrier_status;  /* the barrier's answer; 1 while it has none */
    uint64_t xfer_target;     /* the voter chosen (0: none yet) */
    uint64_t self_xfer_after; /* check_removals: no handover tried before (loop ms) */
    unsigned election_ms;
    /* libraft's io start, which io_start calls with a finer tick. */
    int (*uv_start)(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv);
    /* libraft's receive callback, which io_recv calls after it looked. */
    raft_io_recv_cb raft_recv;
    /* libraft's tick callback (io_start), which push_commit calls too. */
    raft_io_tick_cb raft_tick;
    /* The highest commit index a leader's AppendEntries carried (io_recv):
     * committed, so a follower whose log lacks it is behind, whatever its
     * own commit index says (caught_up). */
    raft_index leader_commit_seen;
    /* tn_meta_steady: the commit index this node knew of and had not
     * applied when its tick first saw it behind, and since when (loop
     * ms; 0: not behind at the last tick). */
    raft_index lag_index;
    uint64_t lag_since;
    /* A new cluster this node bootstrapped with others, until it has a
     * leader: every election timer is drawn from [E/4, E/2]
     * (first_elections). */
    bool first_elections;
    bool stood; /* said that it asks for votes */
    unsigned hb_interval_ms;
    unsigned dead_after_ms;
    bool addr_checked;
    /* tn_meta_on_change: applied entries changed the state since the last
     * tick (told from the tick, never from inside libraft's callbacks). */
    bool changed;
    void (*on_change)(void *arg);
    void *change_arg;
    bool reg_busy;
    bool reg_failing;
    bool mark_busy;
    bool xfer_active;       /* a transfer request is waiting for its answer */
    bool xfer_choosing;     /* its barrier is out: the target is not chosen yet */
    bool xfer_barrier_busy; /* xfer_barrier is in libraft */
    bool xfer_in_raft;      /* raft_transfer took it and has not called back */
    char api_addr[TN_META_ADDR_MAX + 1];
    tn_meta_nsq_t nsq; /* this node's NSQ door, for its registration */
    /* Replicated partitions. */
    uint64_t incarnation; /* this node's */
    uint64_t boot;        /* this process's (registrations: a restart) */
    unsigned session_ms;
    unsigned rebalance_ms;
    uint64_t replace_dead_ms; /* 0: never */
    /* The members the leader has seen dead, since when (its loop time;
     * rebuilt each decommission scan, emptied when it stops leading). */
    struct dead_seen_s {
        uint64_t id;
        uint64_t since;
    } * deads;
    size_t ndeads;
    void (*on_pstate)(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps);
    void *pstate_arg;
    pnote_t *pnotes; /* changed since the last tick, in order */
    size_t npnotes, pnotecap;
    bool pnotes_all; /* tell every replicated partition at the next tick */
    /* tn_meta_confirmed_at: the newest confirmation seen (loop ms). */
    uint64_t confirmed_at;
#ifdef TN_TEST
    /* TERN_TEST_META_APPEND_DELAY_FILE: log appends libraft was not told
     * of yet, in order (slow_append). */
    struct slow_append_s *slow_head, *slow_tail;
    int (*uv_append)(struct raft_io *io, struct raft_io_append *req,
                     const struct raft_entry entries[], unsigned n, raft_io_append_cb cb);
    uint64_t pnotes_since; /* TERN_TEST_PSTATE_LAG_MS: notes pending since (0: none) */
    /* TERN_TEST_MOVE_COMPLETE_DELAY_MS: moves seen ready, and since when (loop ms) */
    struct {
        uint64_t move, since;
    } held[8];
#endif
    tn_meta_req_t fence; /* the leader's MEMBER_FENCE, one at a time */
    bool fence_busy;
    tn_meta_req_t rebal; /* the leader's PART_REBALANCE, one at a time */
    bool rebal_busy;
    ready_t *readies; /* sorted as the state's topics, then partitions */
    size_t nreadies, readycap;
    uint64_t next_scan_ms;
    tn_meta_req_t movereq; /* the leader's PART_MOVE complete, one at a time */
    bool move_busy;
    uint64_t next_move_ms;
    tn_meta_req_t decomreq; /* a decommission's PART_MOVE begin, one at a time */
    bool decom_busy;
    bool decom_pending; /* the last scan left a decommission or heal move to begin */
    uint64_t next_decom_ms;
    /* Factor (check_factor): the leader's PART_MOVE begins, one at a time. */
    tn_meta_req_t factorreq;
    bool factor_busy;
    bool factor_pending; /* the last scan left a partition's count to change */
    uint64_t next_factor_ms;
    /* Rebalance (check_spread): the leader's proposals, one at a time. */
    uint32_t max_moves;  /* max-moves-per-node */
    bool auto_rebalance; /* a member joining asks for a rebalance */
    tn_meta_req_t spreadreq;
    bool spread_busy;
    bool spread_join; /* spreadreq is a join's request for a rebalance */
    /* Members that joined or came back (fsm_apply, on every ready node,
     * so a leader elected just after a join judges it too), not judged
     * yet by check_spread, with the loop time each was noted; forgotten
     * after JOIN_JUDGE_MS; more at once than this are not noted. */
    struct {
        uint64_t id;
        uint64_t at;
        bool leading; /* noted while this node led */
    } joined[16];
    size_t njoined;
    uint64_t next_spread_ms;
    /* Removed members (meta.h "Removal"). */
    char dir[1024];                /* the Raft directory (REMOVED_FILE) */
    bool removed;                  /* this node's own tombstone applied */
    void (*on_removed)(void *arg); /* tn_meta_on_removed */
    void *removed_arg;
    struct raft_change rmchange; /* the leader's raft_remove, one at a time */
    bool rm_busy;
    uint64_t rm_id;      /* the member it waits on (REMOVE_WAIT_MS) */
    uint64_t rm_since;   /* loop ms it began waiting */
    raft_index rm_index; /* the commit index the member should reach */
    uint64_t *rejoined;  /* tombstoned ids this leader admitted (tn_meta_join) */
    size_t nrejoined;
};

/* A proposal sent to the leader; m NULL once abandoned (the metastore
 * closed and answered the request itself). */
struct fwd_s {
    tn_meta_t *m;
    tn_meta_req_t *req;
    uint64_t leader; /* the node it went to */
    fwd_t *prev, *next;
};

/* A tn_meta_confirm through a NOOP (a follower's), or a wait until this
 * replica has applied a log index the leader named (wait_applied). */
struct confirm_s {
    tn_meta_t *m;
    struct raft_barrier barrier;
    tn_meta_req_t req;
    uint64_t index;    /* a wait for this index (answered from the start); 0: a NOOP's */
    uint64_t nonce;    /* of its NOOP, with this node's id */
    uint64_t deadline; /* loop ms */
    int status;
    bool answered; /* the NOOP's proposal answered (status) */
    bool applied;  /* the NOOP applied to this replica */
    void (*cb)(void *arg, int status);
    void *arg;
    confirm_t *next; /* m->confirms */
};

enum { JOIN_START, JOIN_ADDING, JOIN_PROMOTE, JOIN_PROMOTING, JOIN_DONE };

struct join_s {
    tn_meta_t *m; /* NULL once abandoned while libraft holds the change */
    uint64_t id;
    char addr[TN_META_ADDR_MAX + 1];
    int step;
    int status;
    uint64_t deadline;
    struct raft_change change;
    void (*cb)(void *arg, int status);
    void *arg;
    join_t *next;
};

/* --- the state machine, as libraft sees it --------------------------------------- */

static void confirm_applied(tn_meta_t *m, uint64_t nonce);
static void wake(tn_meta_t *m);
static void note_heard(tn_meta_t *m, uint64_t id, uint64_t now);
static bool rejoined(const tn_meta_t *m, uint64_t id);

/* Whether c, applied to s, is a member joining: a registration of an id s
 * does not know, or of a member s has marked dead (auto-rebalance). */
static bool joins_now(const tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    if (c->type != TN_MC_MEMBER_REC && c->type != TN_MC_MEMBER_REG && c->type != TN_MC_MEMBER_PUT)
        return false;
    const tn_meta_member_t *mb = tn_meta_member_find(s, c->member.id);
    return mb == NULL || mb->status == TN_MEMBER_DEAD;
}

/* How long a join noted on a node stays to be judged: a leader elected
 * within it judges the joins it applied as a follower (a join applied
 * just before a leader change); one elected later does not. */
#define JOIN_JUDGE_MS 60000

/* Whether joined[i] may be judged. TN_TEST builds:
 * TERN_TEST_JOIN_JUDGED_ELSEWHERE=1 never judges a join noted while this
 * node led, as if it had died before judging it, so a test shows the next
 * leader judging it. */
static bool join_due(const tn_meta_t *m, size_t i)
{
#ifdef TN_TEST
    const char *v = getenv("TERN_TEST_JOIN_JUDGED_ELSEWHERE");
    if (v != NULL && strcmp(v, "1") == 0 && m->joined[i].leading)
        return false;
#else
    (void)m;
    (void)i;
#endif
    return true;
}

static void note_joined(tn_meta_t *m, uint64_t id)
{
    for (size_t i = 0; i < m->njoined; i++)
        if (m->joined[i].id == id)
            return;
    if (m->njoined < TN_ARRAY_SIZE(m->joined)) {
        m->joined[m->njoined].id = id;
        m->joined[m->njoined].leading = m->leading;
        m->joined[m->njoined++].at = uv_now(m->loop);
    }
}

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    tn_meta_t *m = fsm->data;
    tn_meta_cmd_t c;
    size_t used;
    int rc = tn_meta_cmd_decode(buf->base, buf->len, &c, &used);
    if (rc == 0) {
        /* Noted on every node once it is ready (not while it replays
         * its log at a start): the leader judges them, and a follower
         * elected soon after a join judges the joins it applied. */
        bool joins = m->ready && joins_now(&m->state, &c);
        rc = tn_meta_state_apply(&m->state, &c);
        /* A change: the tick tells the listener (tn_meta_on_change) at
         * the loop's next turn, not at its next idle tick (TICK_MS, 100
         * ms, on a quiet node): a setting read back through this node
         * then holds in its engine before another request is served (a
         * PATCHed cap was read back here while the engine that leads the
         * partition still delivered past the old one). */
        if (rc == 0 && c.type != TN_MC_NOOP) {
            m->changed = true;
            wake(m);
        }
        if (joins && rc == 0)
            note_joined(m, c.member.id);
        /* A registration is a sign of life too (sessions: meta.h). */
        if (rc == 0 && m->leading &&
            (c.type == TN_MC_MEMBER_REC || c.type == TN_MC_MEMBER_REG ||
             c.type == TN_MC_MEMBER_PUT))
            note_heard(m, c.member.id, uv_now(m->loop));
        if (c.type == TN_MC_NOOP && c.member.id == m->id)
            confirm_applied(m, c.nonce);
        else if (m->confirms != NULL)
            wake(m); /* a wait by index may be done (run_confirms) */
        if (m->leading && (c.type == TN_MC_REMOTE_PUT || c.type == TN_MC_REMOTE_DELETE ||
                           c.type == TN_MC_REMOTE_CHILD_PUT || c.type == TN_MC_REMOTE_CHILD_DELETE))
            tn_meta_remote_audit(c.type, c.remote, rc); /* the leader's audit line */
        tn_meta_cmd_fini(&c);
    } else {
        /* Refused as a whole and identically by every replica of this
         * build: the state does not change. */
        TN_LOG(TN_LOG_ERROR, "metastore: log entry of %zu bytes refused: %s", buf->len,
               rc == UV_ENOTSUP ? "unknown command version or type" : tn_strerror(rc));
        if (rc != UV_ENOTSUP)
            rc = TN_ECORRUPT;
    }
    /* libraft hands this pointer to the proposer's callback as is: the
     * state machine's answer travels in it. */
    *result = (void *)(intptr_t)rc; // NOLINT(performance-no-int-to-ptr)
    return 0;
}

static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n)
{
    tn_meta_t *m = fsm->data;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_meta_state_snapshot(&m->state, &b) != 0) {
        tn_buf_fini(&b);
        return RAFT_NOMEM;
    }
    struct raft_buffer *arr = raft_malloc(sizeof(*arr));
    void *copy = raft_malloc(tn_buf_size(&b));
    if (arr == NULL || copy == NULL) {
        raft_free(arr);
        raft_free(copy);
        tn_buf_fini(&b);
        return RAFT_NOMEM;
    }
    memcpy(copy, tn_buf_data(&b), tn_buf_size(&b));
    arr[0].base = copy;
    arr[0].len = tn_buf_size(&b);
    tn_buf_fini(&b);
    *bufs = arr;
    *n = 1;
    return 0;
}

static void pnote_all_current(tn_meta_t *m);

static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    tn_meta_t *m = fsm->data;
    /* Those there now are told too: the restore may have removed them. */
    pnote_all_current(m);
    int rc = tn_meta_state_restore(&m->state, buf->base, buf->len);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "metastore: snapshot of %zu bytes refused: %s", buf->len,
               tn_strerror(rc));
        return rc == UV_ENOMEM ? RAFT_NOMEM : RAFT_CORRUPT;
    }
    raft_free(buf->base);
    m->changed = true;
    m->pnotes_all = true;
    wake(m); /* told at the loop's next turn, as a change is (fsm_apply) */
    return 0;
}

/* --- proposals ------------------------------------------------------------------ */

/* The answer to the caller of a proposal that was sent more than once:
 * a second copy that finds what was asked already done answers 0 (meta.h). */
static int answer(const tn_meta_req_t *req, int status)
{
    if (!req->resent)
        return status;
    if (status == TN_ENOTFOUND &&
        (req->type == TN_MC_TOPIC_DELETE || req->type == TN_MC_CHANNEL_DELETE ||
         req->type == TN_MC_USER_DELETE || req->type == TN_MC_REMOTE_DELETE ||
         req->type == TN_MC_REMOTE_CHILD_DELETE))
        return 0;
    if (status == UV_EEXIST && req->type == TN_MC_CHANNEL_PUT && req->if_absent)
        return 0;
    return status;
}

static void on_applied(struct raft_apply *a, int status, void *result)
{
    tn_meta_req_t *req = a->data;
    req->meta->inflight--;
    req->meta->last_answer_ms = uv_now(req->meta->loop);
    int rc;
    if (status == RAFT_NOSPACE || status == RAFT_IOERR)
        /* The entry's write failed (room_for_entry did not see it coming):
         * the leader dropped it from its log, so it is not committed. */
        TN_LOG_RL(TN_LOG_ERROR, 60000, "metastore: writing its log: %s",
                  raft_errmsg(&req->meta->raft)[0] ? raft_errmsg(&req->meta->raft)
                                                   : raft_strerror(status));
    if (status != 0)
        rc = req->meta->closing || status == RAFT_SHUTDOWN               ? TN_ECLOSED
             : status == RAFT_NOTLEADER || status == RAFT_LEADERSHIPLOST ? TN_ENOTLEADER
             : status == RAFT_NOSPACE                                    ? UV_ENOSPC
             : status == RAFT_IOERR                                      ? UV_EIO
                                                                         : TN_EFAILED;
    else
        rc = (int)(intptr_t)result;
    req->index = status == 0 ? a->index : 0;
    if (status == 0 && req->push) {
        req->meta->push_wanted = true;
        wake(req->meta); /* push_commit, from the tick: not inside libraft's apply */
    }
    req->cb(req, answer(req, rc));
}

static uint64_t heard_at(const tn_meta_t *m, uint64_t id)
{
    for (size_t i = 0; i < m->nheard; i++)
        if (m->heard[i].id == id)
            return TN_MAX(m->heard[i].at, m->leader_since_mono);
    return m->leader_since_mono;
}

static bool heard_recently(const tn_meta_t *m, uint64_t id, uint64_t now)
{
    return id == m->id || now - heard_at(m, id) <= RECENT_ELECTIONS * (uint64_t)m->election_ms;
}

/* On the leader, for a TOPIC_PUT: the alive members not heard recently go
 * into the command's skip list (re-encoded in req->buf), so placement
 * passes over them on every replica; so do draining members, while the
 * others left are enough for the topic's factor (a topic placed on fewer
 * replicas than asked is worse than a replica its member's decommission
 * moves off later). The command goes as it came when no member is skipped
 * (its encoding then is the one older builds know), when this node has no
 * view yet, or when re-encoding fails. */
static void stamp_skip(tn_meta_t *m, tn_meta_req_t *req)
{
    const uint8_t *b = req->buf.base;
    if (!m->leading || m->leading_term != m->raft.current_term || req->buf.len < TN_META_HDR ||
        b[3] != TN_MC_TOPIC_PUT)
        return;
    const tn_meta_state_t *s = &m->state;
    uint64_t now = uv_now(m->loop);
    size_t alive = 0, unheard = 0, draining = 0;
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *mem = &s->members[i];
        if (mem->status != TN_MEMBER_ALIVE)
            continue;
        alive++;
        if (!heard_recently(m, mem->id, now))
            unheard++;
        else if (mem->draining)
            draining++;
    }
    if (unheard + draining == 0)
        return;
    tn_meta_cmd_t c;
    size_t used;
    if (tn_meta_cmd_decode(req->buf.base, req->buf.len, &c, &used) != 0)
        return;
    bool skip_draining =
        draining > 0 && alive - unheard - draining >= tn_meta_topic_factor(&c.topic);
    size_t n = unheard + (skip_draining ? draining : 0);
    if (n == 0) {
        tn_meta_cmd_fini(&c);
        return;
    }
    tn_free(c.skip);
    c.nskip = 0;
    c.skip = tn_calloc(TN_MIN(n, (size_t)TN_META_MAX_SKIP), sizeof(*c.skip));
    for (size_t i = 0; c.skip != NULL && i < s->nmembers && c.nskip < TN_META_MAX_SKIP; i++) {
        const tn_meta_member_t *mem = &s->members[i];
        if (mem->status == TN_MEMBER_ALIVE &&
            (!heard_recently(m, mem->id, now) || (skip_draining && mem->draining)))
            c.skip[c.nskip++] = mem->id; /* members are sorted by id */
    }
    tn_buf_t out;
    tn_buf_init(&out);
    void *copy = NULL;
    if (c.skip != NULL && tn_meta_cmd_encode(&c, &out) == 0)
        copy = raft_malloc(tn_buf_size(&out));
    if (copy != NULL) {
        memcpy(copy, tn_buf_data(&out), tn_buf_size(&out));
        raft_free(req->buf.base);
        req->buf.base = copy;
        req->buf.len = tn_buf_size(&out);
        TN_LOG(TN_LOG_INFO,
               "metastore: topic %s placed past %u member(s) not heard from lately or draining",
               c.topic.name, (unsigned)c.nskip);
    }
    tn_buf_fini(&out);
    tn_meta_cmd_fini(&c);
}

/* Entries a snapshot is counted as due ahead of libraft's threshold. */
#define SNAPSHOT_MARGIN 4
/* After a proposal refused for room, the others wait this long before
 * the disk is looked at again (and then answered), so that the tick's
 * drivers (registration, dead marking) do not propose again at once. */
#define NO_ROOM_RETRY_MS 1000

static void on_room_transferred(struct raft_transfer *x)
{
    tn_meta_t *m = x->data;
    m->room_xfer_busy = false;
}

static bool xfer_other_voter(const tn_meta_t *m);

/* A leader whose disk has no room for its log hands leadership to another
 * voter (libraft picks the most caught-up one): the cluster's writes go on
 * there rather than wait for this disk. raft_transfer appends nothing (a
 * drain's tn_meta_transfer first commits a barrier, which this disk could
 * not take). */
static void hand_over_for_room(tn_meta_t *m)
{
    if (raft_state(&m->raft) != RAFT_LEADER || m->room_xfer_busy || m->xfer_active ||
        m->xfer_in_raft || m->raft.transfer != NULL || !xfer_other_voter(m))
        return;
    memset(&m->room_xfer, 0, sizeof(m->room_xfer));
    m->room_xfer.data = m;
    int rc = raft_transfer(&m->raft, &m->room_xfer, 0, on_room_transferred);
    if (rc == 0) {
        m->room_xfer_busy = true;
        TN_LOG(TN_LOG_NOTICE, "metastore: handing leadership over to another voter: this "
                              "node's disk has no room for the metastore's log");
    }
}

/* How long a reading of the disk's room serves proposals (room.h) when
 * nothing else asks for a new one: the bound on how late a disk filled by
 * others is noticed while libraft needs no segment (when it may, at a
 * snapshot due, the disk is read again). */
#define ROOM_READING_MS 1000

/* Whether the room reading may no longer hold for the next entry: none
 * yet (a refusal drops it), too old, TN_META_ROOM_BURST bytes proposed
 * since, or a snapshot due (soon: libraft may need a segment now) that
 * the reading was not taken for. Once per snapshot due, not once a loop
 * millisecond while it is due: a burst near a snapshot cost a statvfs a
 * millisecond on the loop thread. Within the reading's second, the
 * judge counts what was proposed since as taken, as for any reading. */
static bool room_stale(const tn_meta_t *m, uint64_t now, bool soon)
{
    return !m->room_read || now - m->room_at >= ROOM_READING_MS ||
           m->room_spent >= TN_META_ROOM_BURST ||
           (soon && (!m->room_due || m->room_due_base != m->raft.log.snapshot.last_index));
}

/* 0, or UV_ENOSPC when the next entry (bytes long) could need a new log
 * segment and the disk has no room for one (room.h: libraft 0.15 crashes
 * when that allocation fails under waiting appends). A snapshot closes
 * the segment being written, so one that is due needs a prepared segment
 * or room. The disk is read only when room_stale says so; in between,
 * what was proposed since the reading counts as taken. */
static int room_for_entry(tn_meta_t *m, size_t bytes)
{
    uint64_t now = uv_now(m->loop);
    if (now < m->no_room_until)
        return UV_ENOSPC;
    raft_index next = raft_last_index(&m->raft) + 1 + m->inflight;
    bool soon =
        next + SNAPSHOT_MARGIN >= m->raft.log.snapshot.last_index + m->raft.snapshot.threshold;
    if (room_stale(m, now, soon)) {
        tn_meta_room_read(m->dir, &m->room);
        m->room_read = true;
        m->room_at = now;
        m->room_spent = 0;
        m->room_due = soon;
        m->room_due_base = m->raft.log.snapshot.last_index;
    }
    char why[1200];
    int rc = tn_meta_room_judge(&m->room, m->room_spent, soon, m->dir, why, sizeof(why));
    if (rc == 0) {
        m->room_spent += bytes;
        return 0;
    }
    /* The next look, after the wait, reads the disk again: space freed
     * meanwhile is taken at once. */
    m->room_read = false;
    m->no_room_until = now + NO_ROOM_RETRY_MS;
    hand_over_for_room(m);
    TN_LOG_RL(TN_LOG_WARN, 60000,
              "metastore: %s; metastore writes are refused until space is freed", why);
    return rc;
}

/* Hand req to libraft: 0 (on_applied answers it), or the error libraft
 * refused the entry with at once (RAFT_NOTLEADER while a leadership
 * transfer is under way, out of memory), or UV_ENOSPC (room_for_entry):
 * req's buffer is still ours then, and its callback has not run. */
static int submit_try(tn_meta_t *m, tn_meta_req_t *req)
{
    int rc = room_for_entry(m, req->buf.len);
    if (rc != 0)
        return rc;
    stamp_skip(m, req);
    req->apply.data = req;
    rc = raft_apply(&m->raft, &req->apply, &req->buf, 1, on_applied);
    if (rc == 0) {
        m->inflight++;
        return 0;
    }
    TN_LOG(TN_LOG_WARN, "metastore: proposal refused: %s", raft_strerror(rc));
    return rc == RAFT_NOMEM ? UV_ENOMEM : rc == RAFT_NOTLEADER ? TN_ENOTLEADER : TN_EFAILED;
}

/* submit_try, answering req with a refusal. */
static void submit(tn_meta_t *m, tn_meta_req_t *req)
{
    int rc = submit_try(m, req);
    if (rc != 0) {
        raft_free(req->buf.base);
        req->cb(req, answer(req, rc));
    }
}

static void on_poll(uv_timer_t *t);

/* Run the tick after delay_ms (0: at once; something waits). */
static void wake_in(tn_meta_t *m, uint64_t delay_ms)
{
    if (!m->closing)
        uv_timer_start(&m->poll, on_poll, delay_ms, LEADER_POLL_MS);
}

static void wake(tn_meta_t *m)
{
    wake_in(m, 0);
}

/* At the head of the waiting list (a forward the leader sent back). */
static void push_front(tn_meta_t *m, tn_meta_req_t *req)
{
    req->next = m->waiting;
    m->waiting = req;
    if (m->waiting_tail == NULL)
        m->waiting_tail = req;
}

static void fwd_unlink(tn_meta_t *m, fwd_t *f)
{
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        m->fwds = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
}

/* A forward's failure that did not come with the leader's answer: the
 * command may or may not be in the log, and sending it again is safe
 * (meta.h). */
static bool resendable(int status)
{
    switch (status) {
    case TN_ENOTLEADER:
    case TN_ENOLEADER:
    case TN_ECLOSED:
    case UV_ETIMEDOUT:
    case UV_ECONNREFUSED:
    case UV_ECONNRESET:
    case UV_ECONNABORTED:
    case UV_EPIPE:
    case UV_EHOSTUNREACH:
    case UV_ENETUNREACH:
    case UV_ECANCELED:
        return true;
    default:
        return false;
    }
}

static int stamp_channel(tn_meta_cmd_t *c);

/* A CHANNEL_PUT sent again gets a stamp of its own: the first copy may
 * have been committed and its channel deleted before this one commits,
 * and this one then makes a new channel, which must not carry the
 * deleted one's identity (a node whose engine still has that channel
 * would keep its state under the new record). A copy that finds the
 * channel changes nothing (the record keeps its stamp, state.h). Left as
 * it is when it cannot be redone (out of memory, no random bytes). */
static void restamp(tn_meta_req_t *req)
{
    tn_meta_cmd_t c;
    size_t used = 0;
    if (tn_meta_cmd_decode(req->buf.base, req->buf.len, &c, &used) != 0)
        return;
    uint64_t old = c.chan_stamp;
    c.chan_stamp = 0;
    tn_buf_t b;
    tn_buf_init(&b);
    void *copy = NULL;
    if (old != 0 && used == req->buf.len && stamp_channel(&c) == 0 &&
        tn_meta_cmd_encode(&c, &b) == 0)
        copy = raft_malloc(tn_buf_size(&b));
    if (copy != NULL) {
        memcpy(copy, tn_buf_data(&b), tn_buf_size(&b));
        raft_free(req->buf.base);
        req->buf.base = copy;
        req->buf.len = tn_buf_size(&b);
    }
    tn_buf_fini(&b);
    tn_meta_cmd_fini(&c);
}

/* req waits again for a leader to send it to, ahead of newer proposals,
 * within what is left of its budget. */
static void requeue(tn_meta_t *m, tn_meta_req_t *req)
{
    /* Marked again in its bytes (cmd.h): the copies that follow answer as
     * the first would, should it be committed after all. */
    if (req->type == TN_MC_CHANNEL_PUT)
        restamp(req);
    uint8_t *b = req->buf.base;
    if (req->buf.len > TN_META_HDR && b[3] == TN_MC_TOPIC_PUT)
        b[TN_META_HDR] |= TN_META_TOPIC_AGAIN;
    else if (req->buf.len > TN_META_HDR && (b[3] == TN_MC_USER_PUT || b[3] == TN_MC_REMOTE_PUT))
        b[TN_META_HDR] |= TN_META_USER_AGAIN; /* TN_REMOTE_AGAIN is the same bit */
    req->resent = true;
    req->deadline = TN_MIN(uv_now(m->loop) + NO_LEADER_MS, req->expires);
    push_front(m, req);
}

/* A forwarded deletion of a topic or channel that the leader answered,
 * answered to its caller once this replica has applied it too
 * (tn_meta_confirm): a door takes the engine's part at its answer, and
 * the catalog, still seeing the record, would make the topic or channel
 * again from it and record it anew (docs/cluster.md "Deleting through a
 * follower"). A forwarded change a client reads back (read_back) waits
 * the same way, but is answered as the leader answered even when the
 * confirmation fails. */
typedef struct {
    tn_meta_req_t *req;
    int status; /* the leader's answer */
} applied_here_t;

static bool removes_record(uint8_t type)
{
    return type == TN_MC_TOPIC_DELETE || type == TN_MC_CHANNEL_DELETE;
}

/* A change a client asks for and may read back from the node it asked
 * (its answer's body, its next GET): answered once this replica has it
 * too, whatever the confirmation's outcome (the change is committed; a
 * replica that cannot catch up within its bound answers as before). Not
 * the members' and partitions' own bookkeeping (registrations, ISR
 * changes, ownership), which no client reads back and which must not
 * wait a second round trip. */
static bool read_back(uint8_t type)
{
    switch (type) {
    case TN_MC_TOPIC_PUT:
    case TN_MC_CHANNEL_PUT:
    case TN_MC_USER_PUT:
    case TN_MC_USER_DELETE:
    case TN_MC_MEMBER_DRAIN:
    case TN_MC_PART_LEADER:
    case TN_MC_PART_MOVE:
    case TN_MC_CLUSTER_REBALANCE:
    case TN_MC_MEMBER_REMOVE:
    case TN_MC_TOPIC_FACTOR:
    case TN_MC_TOPIC_READY:
    case TN_MC_REMOTE_PUT:
    case TN_MC_REMOTE_DELETE:
    case TN_MC_REMOTE_CHILD_PUT:
    case TN_MC_REMOTE_CHILD_DELETE:
        return true;
    default:
        return false;
    }
}

/* Whether the followers should learn at once that an entry of this type
 * is committed (push_commit): a follower's change that it waits to read
 * back (or its NOOP, an older build's way to wait), a topic made or
 * grown, whose replicas the followers open before the first publish to
 * it is acknowledged (an NSQ publish that made the topic waits for that),
 * and the changes of who leads a partition and who is in its ISR, which
 * the partition's replicas act on from their own copy (cluster/replica.c:
 * a leader counts a shrunk ISR, and so acknowledges the publishes waiting
 * on a dead follower, only once its copy has it; a new leader starts
 * serving, an old one stops, when theirs do). */
static bool pushes(uint8_t type)
{
    switch (type) {
    case TN_MC_NOOP:
    case TN_MC_TOPIC_GROW_FOR:
    case TN_MC_PART_ISR:
    case TN_MC_MEMBER_FENCE:
    case TN_MC_PART_REBALANCE:
    case TN_MC_PART_CORRUPT:
        return true;
    default:
        return read_back(type) || removes_record(type);
    }
}

static int confirm_until(tn_meta_t *m, uint64_t until, void (*cb)(void *arg, int status),
                         void *arg);
static int wait_applied(tn_meta_t *m, uint64_t index, uint64_t until,
                        void (*cb)(void *arg, int status), void *arg);

static void on_applied_here(void *arg, int status)
{
    applied_here_t *h = arg;
    tn_meta_req_t *req = h->req;
    int answered = h->status;
    tn_free(h);
    /* Not confirmed (no leader, the NOOP not applied here in time, the
     * metastore closing): the deletion is committed but not here yet, and
     * the caller learns only that (its engine's part is left to the
     * catalog, which follows the record once this replica has it). */
    req->cb(req, status == 0 || !removes_record(req->type) ? answer(req, answered) : status);
}

static void on_forwarded(void *arg, int status, uint64_t index)
{
    fwd_t *f = arg;
    tn_meta_t *m = f->m;
    tn_meta_req_t *req = f->req;
    uint64_t leader = f->leader;
    if (m != NULL)
        fwd_unlink(m, f);
    tn_free(f);
    if (m == NULL)
        return; /* answered already (the metastore closed), or sent elsewhere */
    uint64_t now = uv_now(m->loop);
    if (resendable(status) && !m->closing && now < req->expires) {
        /* Not answered there: send it again once a leader is known (at
         * the next poll, not at once: a hook answering at once must not
         * spin the loop), to this same one only after RESEND_MS. */
        req->avoid = leader;
        req->avoid_until = now + RESEND_MS;
        requeue(m, req);
        wake_in(m, LEADER_POLL_MS);
        return;
    }
    raft_free(req->buf.base);
    req->index = index;
    /* answer: a copy sent again that finds its change made succeeded too
     * (the first copy's answer lost), and is read back the same way. */
    if (((status == 0 || status == TN_ENOTFOUND) && removes_record(req->type)) ||
        (answer(req, status) == 0 && read_back(req->type))) {
        if (index != 0 && raft_last_applied(&m->raft) >= index) {
            req->cb(req, answer(req, status)); /* here already */
            return;
        }
        applied_here_t *h = tn_malloc(sizeof(*h));
        int rc = h != NULL ? 0 : UV_ENOMEM;
        if (h != NULL) {
            h->req = req;
            h->status = status;
            /* A change read back waits within the write's own budget (a
             * write has PROPOSE_MS in all); a deletion's wait has its own
             * bounds (docs/cluster.md "Deleting through a follower"). The
             * leader named the entry's index: this replica applying it is
             * enough. A leader of an older build did not: a no-op of this
             * node's, through the leader and applied here, follows
             * everything committed before it. */
            uint64_t until = removes_record(req->type) ? 0 : req->expires;
            rc = index != 0 ? wait_applied(m, index, until, on_applied_here, h)
                            : confirm_until(m, until, on_applied_here, h);
            if (rc == 0)
                return;
            tn_free(h);
        }
        req->cb(req, removes_record(req->type) ? rc : answer(req, status));
        return;
    }
    req->cb(req, answer(req, status));
}

/* Forwards out to a node that no longer leads as far as this node knows
 * (another leader is known, or this node leads): abandoned, their late
 * answers dropped, and their proposals sent to the leader now; forwards
 * past their budget: UV_ETIMEDOUT. From the tick, before
 * dispatch_waiting. */
static void reroute_forwards(tn_meta_t *m)
{
    if (m->fwds == NULL)
        return;
    raft_id leader = 0;
    const char *raft_addr = NULL;
    raft_leader(&m->raft, &leader, &raft_addr);
    bool self = raft_state(&m->raft) == RAFT_LEADER;
    uint64_t now = uv_now(m->loop);
    tn_meta_req_t *again = NULL, *expired = NULL;
    fwd_t *f = m->fwds;
    while (f != NULL) {
        fwd_t *next = f->next;
        tn_meta_req_t *req = f->req;
        bool moved = self || (leader != 0 && leader != f->leader);
        if (moved || now >= req->expires) {
            fwd_unlink(m, f);
            f->m = NULL; /* freed when the hook answers */
            if (now >= req->expires) {
                req->next = expired;
                expired = req;
            } else {
                TN_LOG(TN_LOG_INFO,
                       "metastore: leader %llu replaced %llu: sending a forwarded proposal again",
                       (unsigned long long)leader, (unsigned long long)f->leader);
                req->next = again;
                again = req;
            }
        }
        f = next;
    }
    /* Both lists are newest first (fwds is): pushing each to the front
     * leaves the oldest at the head. */
    while (again != NULL) {
        tn_meta_req_t *req = again;
        again = req->next;
        requeue(m, req);
    }
    while (expired != NULL) {
        tn_meta_req_t *req = expired;
        expired = req->next;
        raft_free(req->buf.base);
        req->cb(req, UV_ETIMEDOUT);
    }
}

/* Hand req to the leader through the forward hook. */
static void forward(tn_meta_t *m, tn_meta_req_t *req, uint64_t leader, const char *api)
{
    fwd_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL) {
        raft_free(req->buf.base);
        req->cb(req, UV_ENOMEM);
        return;
    }
    f->m = m;
    f->req = req;
    f->leader = leader;
    f->next = m->fwds;
    if (m->fwds != NULL)
        m->fwds->prev = f;
    m->fwds = f;
    int rc = m->forward(m->forward_arg, leader, api, req->buf.base, req->buf.len, on_forwarded, f);
    if (rc != 0) {
        fwd_unlink(m, f);
        tn_free(f);
        TN_LOG(TN_LOG_WARN, "metastore: forwarding a proposal to leader %llu at %s failed: %s",
               (unsigned long long)leader, api, tn_strerror(rc));
        raft_free(req->buf.base);
        req->cb(req, rc);
    }
}

/* The API address in the leader's member record ("" before it registered). */
static const char *member_api(const tn_meta_t *m, uint64_t id)
{
    const tn_meta_member_t *mem = tn_meta_member_find(&m->state, id);
    return mem != NULL ? mem->api_addr : "";
}

/* Send what waits where it can go: to libraft on the leader, to the
 * leader through the forward hook on a follower; answer TN_ENOLEADER what
 * waited past its deadline. */
static void dispatch_waiting(tn_meta_t *m)
{
    if (m->waiting == NULL)
        return;
    raft_id leader = 0;
    const char *raft_addr = NULL;
    raft_leader(&m->raft, &leader, &raft_addr);
    bool self = raft_state(&m->raft) == RAFT_LEADER;
    const char *api = leader != 0 && !self ? member_api(m, leader) : "";
    bool can_forward = !self && leader != 0 && m->forward != NULL && api[0] != '\0';
    uint64_t now = uv_now(m->loop);
    tn_meta_req_t *list = m->waiting;
    tn_meta_req_t *keep = NULL, *keep_tail = NULL;
    m->waiting = m->waiting_tail = NULL;
    while (list != NULL) {
        tn_meta_req_t *req = list;
        list = req->next;
        req->next = NULL;
        if (m->closing) {
            raft_free(req->buf.base);
            req->cb(req, TN_ECLOSED);
        } else if (self && now < m->no_room_until) {
            /* No room for the log (room_for_entry): kept until it is
             * looked at again, then sent or answered UV_ENOSPC. */
            if (keep_tail != NULL)
                keep_tail->next = req;
            else
                keep = req;
            keep_tail = req;
        } else if (self) {
            submit(m, req);
        } else if (can_forward && (req->avoid != leader || now >= req->avoid_until)) {
            forward(m, req, leader, api);
        } else if (now >= req->deadline) {
            /* A leader known but out of reach (no hook, or no API address
             * recorded for it yet): this node is not the leader. */
            raft_free(req->buf.base);
            req->cb(req, leader != 0 ? TN_ENOTLEADER : TN_ENOLEADER);
        } else {
            if (keep_tail != NULL)
                keep_tail->next = req;
            else
                keep = req;
            keep_tail = req;
        }
    }
    while (keep != NULL && m->closing) {
        /* A callback above closed the metastore after these were kept. */
        tn_meta_req_t *req = keep;
        keep = req->next;
        raft_free(req->buf.base);
        req->cb(req, TN_ECLOSED);
    }
    if (keep != NULL) {
        /* Before anything proposed meanwhile. */
        keep_tail->next = m->waiting;
        if (m->waiting == NULL)
            m->waiting_tail = keep_tail;
        m->waiting = keep;
    }
}

static void enqueue(tn_meta_t *m, tn_meta_req_t *req)
{
    req->next = NULL;
    req->deadline = uv_now(m->loop) + NO_LEADER_MS;
    if (m->waiting_tail != NULL)
        m->waiting_tail->next = req;
    else
        m->waiting = req;
    m->waiting_tail = req;
    wake(m);
}

/* req's buffer: a raft_malloc copy of len bytes. */
static int take_buffer(tn_meta_req_t *req, const void *p, size_t len)
{
    req->buf.len = len;
    req->buf.base = raft_malloc(len);
    if (req->buf.base == NULL)
        return UV_ENOMEM;
    memcpy(req->buf.base, p, len);
    return 0;
}

/* A CHANNEL_PUT without a stamp (cmd.h) gets one here, drawn at random
 * (not 0), so that every proposer's channel has an identity. 0 or
 * TN_EFAILED (no random bytes). */
static int stamp_channel(tn_meta_cmd_t *c)
{
    while (c->type == TN_MC_CHANNEL_PUT && c->chan_stamp == 0)
        if (getrandom(&c->chan_stamp, sizeof(c->chan_stamp), 0) != (ssize_t)sizeof(c->chan_stamp))
            return TN_EFAILED;
    return 0;
}

int tn_meta_propose(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_cmd_t *c, tn_meta_cb cb)
{
    if (m->closing)
        return TN_ECLOSED;
    tn_meta_cmd_t stamped;
    if (c->type == TN_MC_CHANNEL_PUT && c->chan_stamp == 0) {
        stamped = *c; /* a CHANNEL_PUT owns no memory: the shallow copy is whole */
        if (stamp_channel(&stamped) != 0)
            return TN_EFAILED;
        c = &stamped;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_meta_cmd_encode(c, &b);
    if (rc == 0)
        rc = take_buffer(req, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
    if (rc != 0)
        return rc;
    req->meta = m;
    req->cb = cb;
    req->next = NULL;
    req->type = c->type;
    req->if_absent = c->if_absent;
    req->resent = false;
    req->push = pushes(c->type);
    req->index = 0;
    req->avoid = 0;
    req->expires = uv_now(m->loop) + PROPOSE_MS;
    if (raft_state(&m->raft) == RAFT_LEADER && m->waiting == NULL && submit_try(m, req) == 0)
        return 0;
    /* Not the leader, behind others, or refused by libraft at once: from
     * the tick (dispatch_waiting), which answers a second refusal. Never
     * answered inside this call: the drivers mark themselves busy once it
     * returns 0, and their callbacks clear the mark. */
    enqueue(m, req);
    return 0;
}

int tn_meta_propose_until(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_cmd_t *c, uint64_t until,
                          tn_meta_cb cb)
{
    if (until != 0 && !m->closing && uv_now(m->loop) >= until)
        return UV_ETIMEDOUT;
    int rc = tn_meta_propose(m, req, c, cb);
    if (rc == 0 && until != 0) {
        /* Not answered inside tn_meta_propose: waiting or forwarded, it
         * gives up at until too (its deadline for a leader, its expiry
         * for forwards, re-sends and the read-back wait). */
        req->expires = TN_MIN(req->expires, until);
        req->deadline = TN_MIN(req->deadline, until);
    }
    return rc;
}

int tn_meta_propose_encoded(tn_meta_t *m, tn_meta_req_t *req, const void *buf, size_t len,
                            tn_meta_cb cb)
{
    if (m->closing)
        return TN_ECLOSED;
    if (raft_state(&m->raft) != RAFT_LEADER)
        return TN_ENOTLEADER;
    tn_meta_cmd_t c;
    size_t used = 0;
    int rc = tn_meta_cmd_decode(buf, len, &c, &used);
    if (rc == TN_ESHORT)
        rc = TN_ECORRUPT;
    if (rc != 0)
        return rc;
    uint8_t type = c.type;
    tn_meta_cmd_fini(&c);
    if (used != len)
        return TN_ECORRUPT; /* one command, nothing after it */
    if (type == TN_MC_PART_OWNERS || type == TN_MC_PART_STATE)
        return UV_EINVAL; /* a snapshot record */
    rc = take_buffer(req, buf, len);
    if (rc != 0)
        return rc;
    req->meta = m;
    req->cb = cb;
    req->next = NULL;
    req->type = type;
    req->resent = false;
    req->index = 0;
    req->push = pushes(type);
    rc = submit_try(m, req);
    if (rc != 0)
        raft_free(req->buf.base); /* answered by the caller, not through cb */
    return rc;
}

int tn_meta_leader(tn_meta_t *m, uint64_t *id, const char **api_addr)
{
    raft_id leader = 0;
    const char *raft_addr = NULL;
    raft_leader(&m->raft, &leader, &raft_addr);
    if (leader == 0 || m->closing)
        return TN_ENOLEADER;
    *id = leader;
    *api_addr = leader == m->id ? m->api_addr : member_api(m, leader);
    return 0;
}

/* Answer everything that waits for this node: proposals (waiting or
 * forwarded), joins, a transfer. At close and stop. */
static void fail_waiting(tn_meta_t *m, int status)
{
    while (m->waiting != NULL) {
        tn_meta_req_t *req = m->waiting;
        m->waiting = req->next;
        raft_free(req->buf.base);
        req->cb(req, status);
    }
    m->waiting_tail = NULL;
    while (m->fwds != NULL) {
        fwd_t *f = m->fwds;
        fwd_unlink(m, f);
        f->m = NULL; /* freed when the hook answers */
        raft_free(f->req->buf.base);
        f->req->cb(f->req, status);
    }
    while (m->joins != NULL) {
        join_t *j = m->joins;
        m->joins = j->next;
        j->cb(j->arg, status);
        if (j->step == JOIN_ADDING || j->step == JOIN_PROMOTING)
            j->m = NULL; /* libraft holds it: freed by its callback */
        else
            tn_free(j);
    }
    if (m->xfer_active) {
        m->xfer_active = false;
        m->xfer_choosing = false;
        m->xfer_cb(m->xfer_arg, status);
    }
    /* Confirmations answered but not yet applied here; one still in
     * libraft (a leader's NOOP) is answered by its on_applied. */
    confirm_t **pp = &m->confirms;
    while (*pp != NULL) {
        confirm_t *c = *pp;
        if (!c->answered) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        c->cb(c->arg, status);
        tn_free(c);
    }
}

/* --- members ------------------------------------------------------------------- */

static bool is_voter(tn_meta_t *m)
{
    const struct raft_configuration *c = &m->raft.configuration;
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].id == m->id)
            return c->servers[i].role == RAFT_VOTER;
    return false;
}

/* What this node knows is committed: its commit index, and a follower's
 * leader's (leader_commit_seen). */
static raft_index known_commit(tn_meta_t *m)
{
    raft_index known = m->raft.commit_index;
    if (raft_state(&m->raft) != RAFT_LEADER && m->leader_commit_seen > known)
        known = m->leader_commit_seen;
    return known;
}

/* Every condition of caught_up but the last: the leader known and heard
 * from, this node a voter, and what its log held at start replayed. */
static bool in_touch(tn_meta_t *m)
{
    if (m->closing)
        return false;
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader(&m->raft, &leader, &addr);
    if (leader == 0 || !is_voter(m))
        return false;
    /* A leader knows what is committed only once an entry of its own term is
     * (lead_barrier): before that, entries of earlier terms it holds may be
     * committed and not applied. */
    if (raft_state(&m->raft) == RAFT_LEADER && m->lead_term != m->raft.current_term)
        return false;
    if (raft_state(&m->raft) != RAFT_LEADER &&
        m->io.time(&m->io) - m->raft.election_timer_start > CONTACT_MS)
        return false;
    /* A restarted follower that heard from the leader without an append
     * succeeding yet still has the commit index of its start (its
     * snapshot's): what its own log held is applied first, or it would
     * answer for a state older than the one it had before the restart. */
    return raft_last_applied(&m->raft) >= m->start_index;
}

static bool caught_up(tn_meta_t *m)
{
    /* Nor is one caught up whose log lacks entries the leader said are
     * committed (known_commit): its own commit index moves only with
     * appends that match its log, so a follower restarted behind (the
     * leader's first append refused) would otherwise count as caught up
     * at its start's state. */
    return in_touch(m) && raft_last_applied(&m->raft) >= known_commit(m);
}

/* Readiness (tn_meta_steady): how long this node may stay behind what it
 * knows is committed. A follower learns of a commit as soon as the leader
 * has it from a majority, which may be before its own disk holds the
 * entry: under a burst of changes, or on a slow disk, it is behind for
 * the time of a write, every time. */
#define STEADY_LAG_MS 2000

/* From the tick: when this node was first seen behind what it knew was
 * committed then. Once that is applied, a lag seen later counts from
 * then, so under a steady stream of changes it is measured from a tick
 * that saw it (at most one earlier lag, itself under STEADY_LAG_MS, late). */
static void note_lag(tn_meta_t *m)
{
    raft_index applied = raft_last_applied(&m->raft);
    if (m->lag_since != 0 && applied >= m->lag_index)
        m->lag_since = 0;
    raft_index known = known_commit(m);
    if (m->lag_since == 0 && known > applied) {
        m->lag_index = known;
        m->lag_since = uv_now(m->loop);
    }
}

static void on_registered(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->reg_busy = false;
    if (status == 0 || status == TN_ECLOSED) {
        if (status == 0 && m->reg_failing)
            TN_LOG(TN_LOG_NOTICE, "metastore: member registration of node %llu recorded again",
                   (unsigned long long)m->id);
        m->reg_failing = status != 0 && m->reg_failing;
        return;
    }
    if (status == UV_EPERM) {
        /* state.h: a removed member's id with its old data directory. */
        TN_LOG_RL(
            TN_LOG_ERROR, 60000,
            "metastore: the registration of node %llu was refused: it was removed from the "
            "cluster (DELETE /v1/cluster/members/%llu) and this data directory is the removed "
            "member's. Stop it; to add this machine back, start ternd with an empty data "
            "directory and --join",
            (unsigned long long)m->id, (unsigned long long)m->id);
        m->reg_failing = true;
        return;
    }
    if (!m->reg_failing)
        TN_LOG(TN_LOG_WARN, "metastore: member registration of node %llu failed: %s",
               (unsigned long long)m->id, tn_strerror(status));
    m->reg_failing = true;
}

int tn_meta_set_nsq(tn_meta_t *m, const tn_meta_nsq_t *nsq)
{
    if (memchr(nsq->broadcast, '\0', sizeof(nsq->broadcast)) == NULL ||
        memchr(nsq->hostname, '\0', sizeof(nsq->hostname)) == NULL ||
        memchr(nsq->version, '\0', sizeof(nsq->version)) == NULL)
        return UV_EINVAL;
    const tn_meta_nsq_t *was = &m->nsq;
    if (strcmp(was->broadcast, nsq->broadcast) == 0 && strcmp(was->hostname, nsq->hostname) == 0 &&
        was->tcp_port == nsq->tcp_port && was->http_port == nsq->http_port &&
        strcmp(was->version, nsq->version) == 0)
        return 0;
    m->nsq = *nsq;
    m->next_reg_ms = 0; /* at the next tick, not a heartbeat interval later */
    return 0;
}

/* Every heartbeat interval: this node's full member record. */
static void register_self(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (m->reg_busy || now < m->next_reg_ms || m->removed)
        return;
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REC;
    c.member.id = m->id;
    snprintf(c.member.addr, sizeof(c.member.addr), "%s", m->address);
    snprintf(c.member.api_addr, sizeof(c.member.api_addr), "%s", m->api_addr);
    c.member.nsq = m->nsq;
    c.member.incarnation = m->incarnation;
    c.member.boot = m->incarnation != 0 ? m->boot : 0;
    c.member.heartbeat_ms = tn_now_wall_ms();
    m->reg.data = m;
    m->next_reg_ms = now + m->hb_interval_ms;
    if (tn_meta_propose(m, &m->reg, &c, on_registered) == 0)
        m->reg_busy = true;
}

static void on_marked(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->mark_busy = false;
    if (status != 0 && status != TN_ECHANGED && status != TN_ECLOSED)
        TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: marking a member dead failed: %s",
                  tn_strerror(status));
}

/* On the leader: the first alive member whose last registration is
 * dead_after old, by this node's wall clock, counting from no earlier
 * than when this node became leader (a new leader gives every member a
 * full dead_after to register). One MEMBER_STATUS at a time. */
static void mark_dead(tn_meta_t *m)
{
    if (m->mark_busy || m->leader_since_wall == 0)
        return;
    int64_t now = tn_now_wall_ms();
    const tn_meta_state_t *s = &m->state;
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *mem = &s->members[i];
        if (mem->id == m->id || mem->status != TN_MEMBER_ALIVE)
            continue;
        int64_t since = TN_MAX(mem->heartbeat_ms, m->leader_since_wall);
        if (now - since <= (int64_t)m->dead_after_ms)
            continue;
        tn_meta_cmd_t c;
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_MEMBER_STATUS;
        c.member.id = mem->id;
        c.member.status = TN_MEMBER_DEAD;
        c.member.heartbeat_ms = mem->heartbeat_ms;
        TN_LOG(TN_LOG_WARN,
               "metastore: member %llu (%s) has not registered for %lld ms: marking it dead",
               (unsigned long long)mem->id, mem->api_addr, (long long)(now - mem->heartbeat_ms));
        m->mark.data = m;
        if (tn_meta_propose(m, &m->mark, &c, on_marked) == 0)
            m->mark_busy = true;
        return;
    }
}

static void on_salted(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->salt_busy = false;
    if (status == 0)
        TN_LOG(TN_LOG_DEBUG, "metastore: made the cluster's seal salt for remotes' credentials");
    else if (status != UV_EEXIST && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "metastore: making the seal salt failed: %s", tn_strerror(status));
}

/* On the leader, once ready: the cluster's seal salt for remotes'
 * credentials (meta/remote.h), made once, when the state has none. */
static void make_salt(tn_meta_t *m)
{
    if (m->salt_busy || !m->ready || m->state.remotes.has_salt)
        return;
    tn_meta_remote_cmd_t a;
    memset(&a, 0, sizeof(a));
    if (getrandom(a.salt, sizeof(a.salt), 0) != (ssize_t)sizeof(a.salt))
        return; /* tried again next tick */
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_REMOTE_SALT;
    c.remote = &a;
    m->salt.data = m;
    if (tn_meta_propose(m, &m->salt, &c, on_salted) == 0)
        m->salt_busy = true;
    memset(a.salt, 0, sizeof(a.salt));
}

/* Once the Raft configuration names this node: the address it records is
 * the one peers dial, kept from the node's first start. */
static void check_address(tn_meta_t *m)
{
    if (m->addr_checked)
        return;
    const struct raft_configuration *c = &m->raft.configuration;
    for (unsigned i = 0; i < c->n; i++) {
        if (c->servers[i].id != m->id)
            continue;
        m->addr_checked = true;
        if (strcmp(c->servers[i].address, m->address) != 0)
            TN_LOG(TN_LOG_ERROR,
                   "metastore: the Raft configuration records node %llu at %s, but it now "
                   "advertises %s; peers keep dialing %s (the address a node first started on)",
                   (unsigned long long)m->id, c->servers[i].address, m->address,
                   c->servers[i].address);
        return;
    }
}

/* --- joins ---------------------------------------------------------------------- */

static int change_error(int rc)
{
    switch (rc) {
    case RAFT_NOTLEADER:
    case RAFT_LEADERSHIPLOST:
        return TN_ENOTLEADER;
    case RAFT_SHUTDOWN:
        return TN_ECLOSED;
    case RAFT_NOMEM:
        return UV_ENOMEM;
    default:
        return TN_EFAILED;
    }
}

static void join_finish(join_t *j, int status)
{
    j->step = JOIN_DONE;
    j->status = status;
}

static void on_join_change(struct raft_change *req, int status)
{
    join_t *j = req->data;
    tn_meta_t *m = j->m;
    if (m == NULL) {
        tn_free(j);
        return;
    }
    if (status != 0) {
        TN_LOG(TN_LOG_WARN, "metastore: join of node %llu at %s: %s", (unsigned long long)j->id,
               j->addr, raft_strerror(status));
        join_finish(j, m->closing ? TN_ECLOSED : change_error(status));
    } else if (j->step == JOIN_ADDING) {
        j->step = JOIN_PROMOTE;
    } else {
        TN_LOG(TN_LOG_NOTICE, "metastore: node %llu at %s joined as a voter",
               (unsigned long long)j->id, j->addr);
        join_finish(j, 0);
    }
    wake(m);
}

/* Take the head join one step further. */
static void join_step(tn_meta_t *m, join_t *j)
{
    if (j->step == JOIN_ADDING || j->step == JOIN_PROMOTING || j->step == JOIN_DONE)
        return;
    if (raft_state(&m->raft) != RAFT_LEADER) {
        join_finish(j, TN_ENOTLEADER);
        return;
    }
    const struct raft_configuration *c = &m->raft.configuration;
    const struct raft_server *srv = NULL;
    for (unsigned i = 0; i < c->n; i++) {
        if (c->servers[i].id == j->id)
            srv = &c->servers[i];
        else if (strcmp(c->servers[i].address, j->addr) == 0) {
            join_finish(j, UV_EADDRINUSE);
            return;
        }
    }
    if (srv != NULL && strcmp(srv->address, j->addr) != 0) {
        join_finish(j, TN_EIDTAKEN);
        return;
    }
    if (srv != NULL && srv->role == RAFT_VOTER) {
        join_finish(j, 0);
        return;
    }
    j->change.data = j;
    int rc;
    if (srv == NULL) {
        rc = raft_add(&m->raft, &j->change, j->id, j->addr, on_join_change);
        if (rc == 0)
            j->step = JOIN_ADDING;
    } else {
        rc = raft_assign(&m->raft, &j->change, j->id, RAFT_VOTER, on_join_change);
        if (rc == 0)
            j->step = JOIN_PROMOTING;
    }
    if (rc == RAFT_CANTCHANGE) {
        if (uv_now(m->loop) >= j->deadline)
            join_finish(j, UV_ETIMEDOUT);
        return; /* another change is under way: the next tick tries again */
    }
    if (rc != 0) {
        TN_LOG(TN_LOG_WARN, "metastore: join of node %llu at %s refused: %s",
               (unsigned long long)j->id, j->addr, raft_strerror(rc));
        join_finish(j, change_error(rc));
    }
}

static void run_joins(tn_meta_t *m)
{
    while (m->joins != NULL && !m->closing) {
        join_t *j = m->joins;
        join_step(m, j);
        if (j->step != JOIN_DONE)
            return;
        m->joins = j->next;
        j->cb(j->arg, j->status);
        tn_free(j);
    }
}

int tn_meta_join(tn_meta_t *m, uint64_t id, const char *raft_addr,
                 void (*cb)(void *arg, int status), void *arg)
{
    if (m->closing)
        return TN_ECLOSED;
    if (raft_state(&m->raft) != RAFT_LEADER)
        return TN_ENOTLEADER;
    if (id == 0 || raft_addr == NULL || raft_addr[0] == '\0' ||
        strlen(raft_addr) > TN_META_ADDR_MAX)
        return UV_EINVAL;
    join_t *j = tn_calloc(1, sizeof(*j));
    if (j == NULL)
        return UV_ENOMEM;
    j->m = m;
    j->id = id;
    snprintf(j->addr, sizeof(j->addr), "%s", raft_addr);
    j->cb = cb;
    j->arg = arg;
    j->step = JOIN_START;
    j->deadline = uv_now(m->loop) + JOIN_MS;
    if (tn_meta_state_removed(&m->state, id) != NULL && !rejoined(m, id)) {
        /* An id removed before, joining again (a join comes only from an
         * empty Raft directory): not taken out again while its
         * registration, which clears the tombstone, is on its way. */
        uint64_t *v = tn_realloc(m->rejoined, (m->nrejoined + 1) * sizeof(*v));
        if (v == NULL) {
            tn_free(j);
            return UV_ENOMEM;
        }
        v[m->nrejoined++] = id;
        m->rejoined = v;
    }
    join_t **pp = &m->joins;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = j;
    wake(m);
    return 0;
}

/* --- leadership transfer -------------------------------------------------------- */

/* DESIGN (tn_meta_transfer, meta.h): choosing the voter to hand over to.
 *   1. The leader appends a barrier entry. A voter that is up stores it
 *      and says so: its match index (libraft's progress: what the voter
 *      reported holding) reaches the barrier's index. A voter stopped or
 *      cut off reports nothing. (libraft's own choice, raft_transfer with
 *      id 0, goes by the next index it sends, which runs ahead of what a
 *      gone voter holds, so it picks a voter stopped a moment ago as
 *      readily as a live one, and then waits for it in vain.)
 *   2. Once the barrier commits (a majority holds it, so the voter chosen
 *      can win the election), the target is, of the other voters holding
 *      it, the one holding the most of the log (configuration order on a
 *      tie); raft_transfer sends it TimeoutNow once it holds the whole log.
 *   3. Done once another node is known to lead (or this one stepped down
 *      and learnt of no leader within an election timeout).
 * Failures: no commit within an election timeout (no majority answers):
 * no handover, TN_ENOTFOUND, one notice line. libraft ends its transfer
 * after an election timeout with this node still leading (the target went
 * away after it answered): UV_ETIMEDOUT then, not at the overall bound.
 * All on loop (monotonic) time. The heard-recently view (note_contacts)
 * does not take part: sampled at ticks, it shows every voter unheard after
 * the loop stalled for two election timeouts, and a handover that would
 * have worked was skipped. */

static void on_transferred(struct raft_transfer *req)
{
    tn_meta_t *m = req->data;
    m->xfer_in_raft = false;
    wake(m);
}

static void on_xfer_barrier(struct raft_barrier *b, int status)
{
    tn_meta_t *m = b->data;
    m->xfer_barrier_busy = false;
    m->xfer_barrier_status = status;
    wake(m);
}

/* The voter to hand leadership to (step 2); 0: none holds the barrier. */
static raft_id xfer_target(const tn_meta_t *m)
{
    const struct raft_configuration *conf = &m->raft.configuration;
    const struct raft_progress *prog = m->raft.leader_state.progress;
    raft_id best = 0;
    raft_index most = 0;
    for (unsigned i = 0; prog != NULL && i < conf->n; i++) {
        const struct raft_server *s = &conf->servers[i];
        if (s->id == m->id || s->role != RAFT_VOTER || prog[i].match_index < m->xfer_barrier.index)
            continue;
        if (best == 0 || prog[i].match_index > most) {
            best = s->id;
            most = prog[i].match_index;
        }
    }
    return best;
}

/* Whether the configuration has a voter other than this node. */
static bool xfer_other_voter(const tn_meta_t *m)
{
    const struct raft_configuration *conf = &m->raft.configuration;
    for (unsigned i = 0; i < conf->n; i++)
        if (conf->servers[i].id != m->id && conf->servers[i].role == RAFT_VOTER)
            return true;
    return false;
}

/* Steps 1 and 2, on the leader, while the barrier is out: false while it
 * waits; true once xfer_status says what came of it (1: raft_transfer took
 * the target). */
static bool xfer_choose(tn_meta_t *m)
{
    if (m->xfer_barrier_status == 1) {
        if (uv_now(m->loop) < m->xfer_start_ms + m->election_ms)
            return false;
        TN_LOG_RL(TN_LOG_NOTICE, 10000,
                  "metastore: no majority of the voters stored a new entry within %u ms: "
                  "not handing leadership over",
                  m->election_ms);
        m->xfer_status = TN_ENOTFOUND;
        return true;
    }
    if (m->xfer_barrier_status != 0) {
        TN_LOG(TN_LOG_WARN, "metastore: leadership transfer: barrier failed: %s",
               raft_strerror(m->xfer_barrier_status));
        m->xfer_status = TN_EFAILED;
        return true;
    }
    raft_id target = xfer_target(m);
    if (target == 0) {
        /* The barrier committed, so a majority holds it, but the
         * configuration changed under it (or this node is its only voter
         * now). */
        TN_LOG(TN_LOG_NOTICE, "metastore: no other voter stored a new entry: not handing "
                              "leadership over");
        m->xfer_status = TN_ENOTFOUND;
        return true;
    }
    memset(&m->xfer, 0, sizeof(m->xfer));
    m->xfer.data = m;
    int rc = raft_transfer(&m->raft, &m->xfer, target, on_transferred);
    if (rc != 0) {
        TN_LOG(TN_LOG_WARN, "metastore: leadership transfer to node %llu refused: %s",
               (unsigned long long)target, raft_strerror(rc));
        m->xfer_status = TN_EFAILED;
        return true;
    }
    TN_LOG(TN_LOG_NOTICE, "metastore: handing leadership over to node %llu (answered in %llu ms)",
           (unsigned long long)target, (unsigned long long)(uv_now(m->loop) - m->xfer_start_ms));
    m->xfer_in_raft = true;
    m->xfer_target = target;
    m->xfer_status = 1;
    return true;
}

static void run_transfer(tn_meta_t *m)
{
    if (!m->xfer_active)
        return;
    if (m->xfer_choosing) {
        /* A node that stopped leading meanwhile waits below to learn the
         * new leader. */
        if (raft_state(&m->raft) == RAFT_LEADER && !xfer_choose(m))
            return;
        m->xfer_choosing = false;
    }
    bool started = m->xfer_status == 1;
    raft_id leader = 0;
    const char *addr = NULL;
    if (started) {
        /* Done once another node is known to lead: until the new
         * leader's first message (later on a loaded machine) a node that
         * stepped down knows of none. It waits for it one election
         * timeout at most: when the whole cluster stops at once no new
         * leader comes. Still leading once libraft gave the transfer up
         * (an election timeout after it began: the target did not take
         * over) is a failure at once. */
        uint64_t now = uv_now(m->loop);
        bool stepped_down = raft_state(&m->raft) != RAFT_LEADER;
        raft_leader(&m->raft, &leader, &addr);
        if (stepped_down && m->xfer_down_ms == 0)
            m->xfer_down_ms = now;
        if (stepped_down && ((leader != 0 && leader != m->id) ||
                             now >= m->xfer_down_ms + m->election_ms || now >= m->xfer_deadline))
            m->xfer_status = 0;
        else if ((!stepped_down && !m->xfer_in_raft) || now >= m->xfer_deadline)
            m->xfer_status = UV_ETIMEDOUT;
        else
            return;
    }
    m->xfer_active = false;
    if (started && m->xfer_status == 0)
        TN_LOG(TN_LOG_NOTICE, "metastore: leadership handed over (leader now %llu)",
               (unsigned long long)leader);
    else if (m->xfer_status == UV_ETIMEDOUT && m->xfer_target != 0)
        TN_LOG(TN_LOG_WARN,
               "metastore: node %llu answered but did not take leadership over within %u ms "
               "(stopping too?)",
               (unsigned long long)m->xfer_target, m->election_ms);
    m->xfer_cb(m->xfer_arg, m->xfer_status);
}

int tn_meta_transfer(tn_meta_t *m, void (*cb)(void *arg, int status), void *arg)
{
    if (m->closing)
        return TN_ECLOSED;
    if (m->xfer_active || m->xfer_in_raft)
        return UV_EBUSY;
    uint64_t now = uv_now(m->loop);
    m->xfer_cb = cb;
    m->xfer_arg = arg;
    m->xfer_active = true;
    m->xfer_status = 0;
    m->xfer_target = 0;
    m->xfer_deadline = now + 3 * (uint64_t)m->election_ms + 2000;
    m->xfer_start_ms = now;
    m->xfer_down_ms = 0;
    if (raft_state(&m->raft) == RAFT_LEADER) {
        if (!xfer_other_voter(m)) {
            m->xfer_status = TN_ENOTFOUND;
        } else if (m->xfer_barrier_busy) {
            /* The barrier of an earlier transfer is still out: its answer
             * serves this one too. */
            m->xfer_choosing = true;
            m->xfer_status = 1;
        } else {
            memset(&m->xfer_barrier, 0, sizeof(m->xfer_barrier));
            m->xfer_barrier.data = m;
            int rc = raft_barrier(&m->raft, &m->xfer_barrier, on_xfer_barrier);
            if (rc == 0) {
                m->xfer_barrier_busy = true;
                m->xfer_barrier_status = 1;
                m->xfer_choosing = true;
                m->xfer_status = 1;
            } else {
                m->xfer_status = TN_EFAILED;
                TN_LOG(TN_LOG_WARN, "metastore: leadership transfer refused: %s",
                       raft_strerror(rc));
            }
        }
    }
    wake(m);
    return 0;
}

/* --- confirmation ---------------------------------------------------------------- */

static void on_barrier(struct raft_barrier *b, int status)
{
    confirm_t *c = b->data;
    int rc = status == 0                                                 ? 0
             : c->m->closing || status == RAFT_SHUTDOWN                  ? TN_ECLOSED
             : status == RAFT_NOTLEADER || status == RAFT_LEADERSHIPLOST ? TN_ENOTLEADER
                                                                         : TN_EFAILED;
    void (*cb)(void *, int) = c->cb;
    void *arg = c->arg;
    tn_free(c);
    cb(arg, rc);
}

static void confirm_finish(tn_meta_t *m, confirm_t *c, int status)
{
    for (confirm_t **pp = &m->confirms; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    void (*cb)(void *, int) = c->cb;
    void *arg = c->arg;
    tn_free(c);
    cb(arg, status);
}

/* From fsm_apply: this node's NOOP reached its own replica. */
static void confirm_applied(tn_meta_t *m, uint64_t nonce)
{
    for (confirm_t *c = m->confirms; c != NULL; c = c->next) {
        if (c->nonce == nonce) {
            c->applied = true;
            wake(m);
            return;
        }
    }
}

static void on_confirm_noop(tn_meta_req_t *req, int status)
{
    confirm_t *c = req->data;
    c->answered = true;
    c->status = c->m->closing && status == 0 ? TN_ECLOSED : status;
    if (c->status != 0 || c->applied)
        confirm_finish(c->m, c, c->status);
}

/* Answered 0 by the leader: done once applied here too (then every
 * entry committed before the confirmation is in this replica), or
 * UV_ETIMEDOUT at the deadline. A wait by index: done once this replica
 * applied it. */
static void run_confirms(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    uint64_t applied = raft_last_applied(&m->raft);
    confirm_t *c = m->confirms;
    while (c != NULL && !m->closing) {
        confirm_t *next = c->next;
        if (c->index != 0 && applied >= c->index)
            confirm_finish(m, c, 0);
        else if (c->answered && c->applied)
            confirm_finish(m, c, 0);
        else if (c->answered && now >= c->deadline)
            confirm_finish(m, c, UV_ETIMEDOUT);
        c = next;
    }
}

/* A confirmation (or a wait by index) for cb(arg, status), bounded by
 * until (loop ms; 0: none): TN_ECLOSED, UV_ETIMEDOUT when until has
 * passed, or UV_ENOMEM, with *out NULL. */
static int confirm_new(tn_meta_t *m, uint64_t until, void (*cb)(void *arg, int status), void *arg,
                       confirm_t **out)
{
    *out = NULL;
    if (m->closing)
        return TN_ECLOSED;
    if (until != 0 && uv_now(m->loop) >= until)
        return UV_ETIMEDOUT;
    confirm_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->m = m;
    c->cb = cb;
    c->arg = arg;
    *out = c;
    return 0;
}

/* tn_meta_confirm, bounded by until (loop ms; 0: by its own bounds
 * alone): UV_ETIMEDOUT at once when that has passed. */
static int confirm_until(tn_meta_t *m, uint64_t until, void (*cb)(void *arg, int status), void *arg)
{
    confirm_t *c = NULL;
    int rc = confirm_new(m, until, cb, arg, &c);
    if (rc != 0)
        return rc;
    if (raft_state(&m->raft) == RAFT_LEADER) {
        c->barrier.data = c;
        if (raft_barrier(&m->raft, &c->barrier, on_barrier) == 0)
            return 0;
    }
    /* A follower (or a leader whose barrier was refused): a NOOP of this
     * node's through the log, forwarded to the leader from a follower. */
    tn_meta_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.type = TN_MC_NOOP;
    cmd.member.id = m->id;
    cmd.nonce = c->nonce = m->confirm_seq++;
    c->deadline = uv_now(m->loop) + 2 * (uint64_t)NO_LEADER_MS;
    if (until != 0)
        c->deadline = TN_MIN(c->deadline, until);
    c->req.data = c;
    c->next = m->confirms;
    m->confirms = c;
    /* Its no-op, waiting or forwarded, gives up at until too. */
    rc = tn_meta_propose_until(m, &c->req, &cmd, until, on_confirm_noop);
    if (rc != 0) {
        m->confirms = c->next;
        tn_free(c);
    }
    return rc;
}

/* cb(arg, 0) once this replica has applied index (the leader's answer to
 * a forward named it: every entry up to it is committed), or UV_ETIMEDOUT
 * at until (loop ms; 0: 2 * NO_LEADER_MS from now, a confirmation's own
 * bound) or TN_ECLOSED at close; from the tick, never inside this call.
 * 0, or UV_ETIMEDOUT / TN_ECLOSED / UV_ENOMEM at once (cb never runs).
 * No message goes out: the leader sends its commit index at once
 * (push_commit) and the entries come as they do. */
static int wait_applied(tn_meta_t *m, uint64_t index, uint64_t until,
                        void (*cb)(void *arg, int status), void *arg)
{
    confirm_t *c = NULL;
    int rc = confirm_new(m, until, cb, arg, &c);
    if (rc != 0)
        return rc;
    c->index = index;
    c->answered = true; /* no NOOP to wait for: answered at close like one */
    c->deadline = until != 0 ? until : uv_now(m->loop) + 2 * (uint64_t)NO_LEADER_MS;
    c->next = m->confirms;
    m->confirms = c;
    wake(m); /* applied meanwhile: the tick finds it */
    return 0;
}

int tn_meta_confirm(tn_meta_t *m, void (*cb)(void *arg, int status), void *arg)
{
    return confirm_until(m, 0, cb, arg);
}

int tn_meta_confirm_until(tn_meta_t *m, uint64_t until, void (*cb)(void *arg, int status),
                          void *arg)
{
    return confirm_until(m, until, cb, arg);
}

/* --- replicated partitions ------------------------------------------------------ */

/* The state machine's report of a changed partition state, from inside
 * an apply: kept for the tick, which tells the listener outside
 * libraft's callbacks. */
static void on_state_pstate(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    (void)ps; /* looked up again when told: the state then */
    tn_meta_t *m = arg;
    if (m->on_pstate == NULL)
        return;
    if (m->npnotes > 0 && m->pnotes[m->npnotes - 1].p == p &&
        strcmp(m->pnotes[m->npnotes - 1].topic, topic) == 0)
        return;
    if (m->npnotes == m->pnotecap) {
        size_t cap = m->pnotecap ? 2 * m->pnotecap : 16;
        pnote_t *v = tn_realloc(m->pnotes, cap * sizeof(*v));
        if (v == NULL) {
            /* Every current one is told instead; one that went away is
             * missed (its listener learns it from the next change). */
            TN_LOG(TN_LOG_WARN, "metastore: out of memory noting partition %s/%u", topic, p);
            m->pnotes_all = true;
            return;
        }
        m->pnotes = v;
        m->pnotecap = cap;
    }
    pnote_t *n = &m->pnotes[m->npnotes++];
    snprintf(n->topic, sizeof(n->topic), "%s", topic);
    n->p = p;
    wake(m);
}

/* Every replicated partition the replica holds now, noted. */
static void pnote_all_current(tn_meta_t *m)
{
    if (m->on_pstate != NULL)
        tn_meta_state_each_pstate(&m->state, on_state_pstate, m);
}

static void tell_each(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    tn_meta_t *m = arg;
    if (m->on_pstate != NULL)
        m->on_pstate(m->pstate_arg, topic, p, ps);
}

#ifdef TN_TEST
/* TERN_TEST_PSTATE_LAG_MS=n (ternd-test): this node tells its partition
 * listeners (the replica manager) of changed partition states n ms after
 * applying them, so a test can show a node that learns a leadership
 * change late (the old leader of a hand-over, docs/replication.md
 * "Leadership changes and deliveries"). Its delivery lease is not
 * renewed meanwhile (tn_meta_confirmed_at), as for any lag. True while
 * the notes wait. */
static bool pstates_lagging(tn_meta_t *m)
{
    const char *v = getenv("TERN_TEST_PSTATE_LAG_MS");
    if (v == NULL || atoi(v) <= 0 || !m->ready) {
        m->pnotes_since = 0;
        return false;
    }
    uint64_t now = uv_now(m->loop);
    if (m->pnotes_since == 0)
        m->pnotes_since = now;
    if (now < m->pnotes_since + (uint64_t)atoi(v))
        return true;
    m->pnotes_since = 0;
    return false;
}
#endif

/* From the tick, once ready: the noted partitions with their state now. */
static void tell_pstates(tn_meta_t *m)
{
    if (!m->ready || (m->npnotes == 0 && !m->pnotes_all))
        return;
#ifdef TN_TEST
    if (pstates_lagging(m))
        return;
#endif
    pnote_t *v = m->pnotes;
    size_t n = m->npnotes;
    bool all = m->pnotes_all;
    m->pnotes = NULL;
    m->npnotes = m->pnotecap = 0;
    m->pnotes_all = false;
    for (size_t i = 0; i < n && m->on_pstate != NULL && !m->closing; i++)
        m->on_pstate(m->pstate_arg, v[i].topic, v[i].p,
                     tn_meta_state_pstate(&m->state, v[i].topic, v[i].p));
    tn_free(v);
    if (all && !m->closing)
        tn_meta_state_each_pstate(&m->state, tell_each, m);
}

void tn_meta_on_pstate(tn_meta_t *m,
                       void (*cb)(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps),
                       void *arg)
{
    m->on_pstate = cb;
    m->pstate_arg = arg;
    if (cb == NULL) {
        tn_free(m->pnotes);
        m->pnotes = NULL;
        m->npnotes = m->pnotecap = 0;
        m->pnotes_all = false;
        return;
    }
    m->pnotes_all = true;
    wake(m);
}

uint64_t tn_meta_incarnation(const tn_meta_t *m)
{
    return m->incarnation;
}

uint64_t tn_meta_boot(const tn_meta_t *m)
{
    return m->incarnation != 0 ? m->boot : 0;
}

static void on_fenced(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->fence_busy = false;
    if (status != 0 && status != TN_ECHANGED && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "metastore: fencing a member failed: %s", tn_strerror(status));
}

/* On the leader, once its barrier applied (the replica holds everything
 * committed before its term): the first live member not heard from for
 * session_ms gets a MEMBER_FENCE. One at a time; a fenced member is not
 * fenced again until it registers. */
static void check_sessions(tn_meta_t *m)
{
    if (m->fence_busy || !m->leading || m->lead_term != m->raft.current_term)
        return;
    uint64_t now = uv_now(m->loop);
    const tn_meta_state_t *s = &m->state;
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *mem = &s->members[i];
        if (mem->id == m->id || mem->fenced)
            continue;
        uint64_t ago = now - heard_at(m, mem->id);
        if (ago <= m->session_ms)
            continue;
        tn_meta_cmd_t c;
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_MEMBER_FENCE;
        c.member.id = mem->id;
        c.member.incarnation = mem->incarnation;
        TN_LOG(TN_LOG_WARN,
               "metastore: member %llu (%s) not heard from for %llu ms: ending its session",
               (unsigned long long)mem->id, mem->api_addr, (unsigned long long)ago);
        m->fence.data = m;
        if (tn_meta_propose(m, &m->fence, &c, on_fenced) == 0)
            m->fence_busy = true;
        return;
    }
}

static void on_rebalanced(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->rebal_busy = false;
    if (status != 0 && status != UV_EAGAIN && status != TN_ECLOSED && status != TN_ENOTFOUND)
        TN_LOG(TN_LOG_WARN, "metastore: moving a partition back to its preferred leader: %s",
               tn_strerror(status));
}

typedef struct {
    tn_meta_t *m;
    ready_t *now; /* this scan's, in the state's order */
    size_t n, cap;
    size_t at; /* the next of m->readies to compare with */
    tn_pstate_nodes_t nodes;
    uint64_t t;
    bool failed;
} scan_t;

static int ready_cmp(const ready_t *a, const char *topic, uint32_t p)
{
    int c = strcmp(a->topic, topic);
    return c != 0 ? c : (a->p < p ? -1 : a->p > p);
}

static void scan_one(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    scan_t *sc = arg;
    if (sc->failed || !tn_pstate_preferred_ready(ps, &sc->nodes))
        return;
    tn_meta_t *m = sc->m;
    uint64_t since = sc->t;
    while (sc->at < m->nreadies && ready_cmp(&m->readies[sc->at], topic, p) < 0)
        sc->at++;
    if (sc->at < m->nreadies && ready_cmp(&m->readies[sc->at], topic, p) == 0)
        since = m->readies[sc->at].since;
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? 2 * sc->cap : 16;
        ready_t *v = tn_realloc(sc->now, cap * sizeof(*v));
        if (v == NULL) {
            sc->failed = true;
            return;
        }
        sc->now = v;
        sc->cap = cap;
    }
    ready_t *r = &sc->now[sc->n++];
    snprintf(r->topic, sizeof(r->topic), "%s", topic);
    r->p = p;
    r->since = since;
}

/* On the leader, every REBALANCE_SCAN_MS: the partitions whose preferred
 * leader is ready, since when (loop time, from no earlier than this
 * node's leadership); one ready for rebalance_ms gets a PART_REBALANCE
 * (re-checked when applied). */
static void check_rebalance(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (!m->leading || m->lead_term != m->raft.current_term) {
        m->nreadies = 0;
        return;
    }
    if (now < m->next_scan_ms)
        return;
    m->next_scan_ms = now + REBALANCE_SCAN_MS;
    tn_pstate_nodes_t nodes = {m->state.nodes, m->state.nodes != NULL ? m->state.nmembers : 0};
    scan_t sc = {m, NULL, 0, 0, 0, nodes, now, false};
    tn_meta_state_each_pstate(&m->state, scan_one, &sc);
    if (sc.failed) {
        tn_free(sc.now);
        return; /* again at the next scan */
    }
    tn_free(m->readies);
    m->readies = sc.now;
    m->nreadies = sc.n;
    m->readycap = sc.cap;
    for (size_t i = 0; i < m->nreadies && !m->rebal_busy; i++) {
        ready_t *r = &m->readies[i];
        if (now - r->since < m->rebalance_ms)
            continue;
        tn_meta_cmd_t c;
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_PART_REBALANCE;
        snprintf(c.topic.name, sizeof(c.topic.name), "%s", r->topic);
        c.part = r->p;
        r->since = now; /* not again before another delay */
        TN_LOG(TN_LOG_NOTICE, "metastore: partition %s/%u goes back to its preferred leader",
               r->topic, r->p);
        m->rebal.data = m;
        if (tn_meta_propose(m, &m->rebal, &c, on_rebalanced) == 0)
            m->rebal_busy = true;
    }
}

static void on_move_completed(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->move_busy = false;
    if (status != 0 && status != UV_EAGAIN && status != TN_ECLOSED && status != TN_ENOTFOUND)
        TN_LOG(TN_LOG_WARN, "metastore: completing a partition move: %s", tn_strerror(status));
}

static void on_move_failed(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->move_busy = false;
    if (status != 0 && status != TN_ECLOSED && status != TN_ENOTFOUND)
        TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: failing a partition move: %s%s",
                  tn_strerror(status),
                  status == UV_EPERM ? " (the old replicas cannot take the partition back yet: "
                                       "none could lead, or they hold too few in-sync copies; "
                                       "tried again later)"
                                     : "");
}

typedef struct {
    tn_meta_t *m;
    tn_pstate_nodes_t nodes;
    uint64_t now; /* loop ms */
    bool proposed;
} move_scan_t;

static bool replaceable(const tn_meta_t *m, const tn_meta_member_t *mb, uint64_t now);

/* The first target member of ps's move out of the ISR and dead for
 * replace-dead-after (as this leader saw it), or 0 (partstate.h rule 9):
 * the move cannot finish without it, and the self-healing that would
 * replace it waits for the move to end. */
static uint32_t move_dead_target(const tn_meta_t *m, const tn_pstate_t *ps, uint64_t now)
{
    uint32_t gone[TN_PSTATE_MAX_REPLICAS];
    size_t ngone = 0;
    for (uint32_t i = 0; i < ps->ntarget; i++) {
        const tn_meta_member_t *mb = tn_meta_member_find(&m->state, ps->target[i]);
        if (mb != NULL && replaceable(m, mb, now))
            gone[ngone++] = ps->target[i];
    }
    return tn_pstate_move_blocked(ps, gone, ngone);
}

/* A move one of whose target members is dead for replace-dead-after:
 * PART_MOVE fail, the old replicas back (rule 8), kept as failed with the
 * reason (re-checked when applied: refused, nothing changes, while no old
 * replica could lead). */
static void move_fail(move_scan_t *sc, const char *topic, uint32_t p, const tn_pstate_t *ps,
                      uint32_t dead)
{
    tn_meta_t *m = sc->m;
    char why[TN_META_MOVE_REASON_MAX + 1], after[32];
    tn_time_fmt_ms(after, sizeof(after), m->replace_dead_ms);
    snprintf(why, sizeof(why),
             "target member %" PRIu32 " was dead for longer than replace-dead-after "
             "(%s): the partition stays on its old replicas",
             dead, after);
    TN_LOG(TN_LOG_WARN, "metastore: move %016" PRIx64 " of %s/%" PRIu32 " failed: %s", ps->move_id,
           topic, p, why);
    m->movereq.data = m;
    if (tn_meta_propose_move(m, &m->movereq, topic, p, TN_MOVE_FAIL, ps->move_id, NULL, 0, why,
                             on_move_failed) == 0)
        m->move_busy = true;
    sc->proposed = true;
}

/* A command of type on partition p of topic, every other field zero. */
static void part_cmd_init(tn_meta_cmd_t *c, uint8_t type, const char *topic, uint32_t p)
{
    memset(c, 0, sizeof(*c));
    c->type = type;
    snprintf(c->topic.name, sizeof(c->topic.name), "%s", topic);
    c->part = p;
}

#ifdef TN_TEST
/* TERN_TEST_MOVE_COMPLETE_DELAY_MS=n (ternd-test): this node, leading the
 * metastore, proposes a move's completion only once it has seen the move
 * ready (handing_over) for n ms, counted again by each new leader, so a
 * test can kill a node or abort the move while it is handing over
 * (tests/cluster/test_move_faults.py). Up to 8 moves are timed at once
 * (a ninth takes the oldest's slot, which starts again). With
 * TERN_TEST_MOVE_COMPLETE_HOLD_FILE=path too, moves are held only while
 * path exists, so a test done with its fault lets them complete at once. */
static bool complete_held(tn_meta_t *m, uint64_t move_id, uint64_t now)
{
    const char *v = getenv("TERN_TEST_MOVE_COMPLETE_DELAY_MS");
    if (v == NULL || atoi(v) <= 0)
        return false;
    const char *file = getenv("TERN_TEST_MOVE_COMPLETE_HOLD_FILE");
    if (file != NULL && file[0] != '\0' && access(file, F_OK) != 0)
        return false;
    size_t slot = 0;
    for (size_t i = 0; i < TN_ARRAY_SIZE(m->held); i++) {
        if (m->held[i].move == move_id) {
            slot = i;
            break;
        }
        if (m->held[i].since < m->held[slot].since)
            slot = i;
    }
    if (m->held[slot].move != move_id) {
        m->held[slot].move = move_id;
        m->held[slot].since = now;
    }
    return now < m->held[slot].since + (uint64_t)atoi(v);
}
#endif

/* A move whose target is all in the ISR, and whose leader is in the
 * target or may hand over to one that is eligible: its completion. One
 * that cannot finish (move_dead_target): its failure. */
static void move_one(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    move_scan_t *sc = arg;
    if (sc->proposed || ps->ntarget == 0)
        return;
    if (!tn_pstate_move_ready(ps)) {
        uint32_t dead = move_dead_target(sc->m, ps, sc->now);
        if (dead != 0) {
            tn_pstate_t copy = *ps;
            char err[160];
            if (tn_pstate_move_abort(&copy, ps->move_id, &sc->nodes, err, sizeof(err)) == 0)
                move_fail(sc, topic, p, ps, dead);
        }
        return;
    }
    tn_pstate_t copy = *ps;
    char err[160];
    if (tn_pstate_move_complete(&copy, ps->move_id, &sc->nodes, err, sizeof(err)) != 0)
        return; /* not yet (no target member may lead): the next scan */
    tn_meta_t *m = sc->m;
#ifdef TN_TEST
    if (complete_held(m, ps->move_id, sc->now))
        return;
#endif
    tn_meta_cmd_t c;
    part_cmd_init(&c, TN_MC_PART_MOVE, topic, p);
    c.move_kind = TN_MOVE_COMPLETE;
    c.move_id = ps->move_id;
    c.move_ms = tn_now_wall_ms();
    TN_LOG(TN_LOG_NOTICE,
           "metastore: move %016" PRIx64 " of %s/%" PRIu32 ": every target replica in sync, "
           "completing (leader %" PRIu32 " -> %" PRIu32 ")",
           ps->move_id, topic, p, ps->leader, copy.leader);
    m->movereq.data = m;
    if (tn_meta_propose(m, &m->movereq, &c, on_move_completed) == 0)
        m->move_busy = true;
    sc->proposed = true;
}

/* On the leader, every MOVE_SCAN_MS: the first move ready to complete
 * gets a PART_MOVE complete (re-checked when applied), or the first that
 * cannot finish a PART_MOVE fail, one at a time. A
 * move thus ends without anyone waiting on it, and a new metastore leader
 * picks up the moves from the state. */
static void check_moves(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (m->move_busy || !m->leading || m->lead_term != m->raft.current_term ||
        now < m->next_move_ms)
        return;
    m->next_move_ms = now + MOVE_SCAN_MS;
    tn_pstate_nodes_t nodes = {m->state.nodes, m->state.nodes != NULL ? m->state.nmembers : 0};
    move_scan_t sc = {m, nodes, now, false};
    tn_meta_state_each_pstate(&m->state, move_one, &sc);
}

/* --- decommission: replicas off draining members ------------------------------------ */

/* Whether a driver's PART_MOVE begin or a rebalance's proposal is in
 * flight (decommission and self-healing, factor, rebalance: each keeps
 * one of its own). The state a plan reads does not have it until it is
 * answered, so no driver plans meanwhile: two begins could pick one
 * partition (the second refused), or touch a member by more moves than
 * max-moves-per-node. */
static bool change_in_flight(const tn_meta_t *m)
{
    return m->decom_busy || m->factor_busy || m->spread_busy;
}

/* The PART_MOVE begin of change ch of a plan over in, with a new random
 * id, through req (one at a time per driver: its data is m): the id, or 0
 * when it could not be proposed (the scan stops; the next one plans again). */
static uint64_t begin_change(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_rebal_in_t *in,
                             const tn_place_change_t *ch, tn_meta_cb cb)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id) || id == 0)
        return 0;
    req->data = m;
    const tn_place_part_t *pp = &in->parts[ch->part];
    if (tn_meta_propose_move(m, req, in->topics[ch->part]->rec.name, pp->partition, TN_MOVE_BEGIN,
                             id, ch->to.replicas, ch->to.factor, NULL, cb) != 0)
        return 0;
    return id;
}

static void on_decom_begun(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->decom_busy = false;
    if (status != 0 && status != UV_EBUSY && status != TN_ECLOSED && status != TN_ENOTFOUND)
        TN_LOG(TN_LOG_WARN, "metastore: a decommission's partition move: %s", tn_strerror(status));
}

/* The members dead now, each with the loop time this leader first saw it
 * dead (kept from the last scan). false: out of memory. */
static bool note_deads(tn_meta_t *m, uint64_t now)
{
    const tn_meta_state_t *s = &m->state;
    size_t n = 0;
    for (size_t i = 0; i < s->nmembers; i++)
        n += s->members[i].status == TN_MEMBER_DEAD;
    struct dead_seen_s *v = n > 0 ? tn_calloc(n, sizeof(*v)) : NULL;
    if (n > 0 && v == NULL)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < s->nmembers; i++) {
        if (s->members[i].status != TN_MEMBER_DEAD)
            continue;
        v[k].id = s->members[i].id;
        v[k].since = now;
        for (size_t j = 0; j < m->ndeads; j++)
            if (m->deads[j].id == v[k].id)
                v[k].since = m->deads[j].since;
        k++;
    }
    tn_free(m->deads);
    m->deads = v;
    m->ndeads = n;
    return true;
}

/* Whether member mb has been dead for replace-dead-after (as this leader
 * saw it). */
static bool replaceable(const tn_meta_t *m, const tn_meta_member_t *mb, uint64_t now)
{
    if (m->replace_dead_ms == 0 || mb->status != TN_MEMBER_DEAD)
        return false;
    for (size_t j = 0; j < m->ndeads; j++)
        if (m->deads[j].id == mb->id)
            return now - m->deads[j].since >= m->replace_dead_ms;
    return false;
}

/* On the leader, every DECOM_SCAN_MS: for each draining member that still
 * holds replicas of replicated partitions, and each member dead for
 * replace-dead-after, the planner's decommission or heal rule
 * (meta/placement.h: each replica to the least loaded alive, non-draining
 * member; a dead member's factor-1 partitions, or ones with no alive
 * replica left, are reported offline, never recreated empty) gives their
 * new lists, and one PART_MOVE begin is proposed for a partition with no
 * move under way whose members are alive, while every member it takes a
 * replica off or puts one on is touched by fewer than max-moves-per-node
 * moves under way (tn_meta_rebal_take; rebalances and heals count too);
 * the moves complete as any do (check_moves). decom_pending says whether
 * a change is left to begin, which a rebalance waits for (check_spread).
 * A factor-1 partition moves the same way off an alive member (its
 * PART_MOVE begin gives it a state over its owner:
 * tn_meta_state_move_from); off a dead one the planner reports it
 * offline. */
static void check_decommission(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (!m->leading || m->lead_term != m->raft.current_term) {
        m->ndeads = 0; /* a new leadership counts from its own start */
        m->decom_pending = false;
        return;
    }
    if (change_in_flight(m) || now < m->next_decom_ms)
        return;
    m->next_decom_ms = now + DECOM_SCAN_MS;
    const tn_meta_state_t *s = &m->state;
    if (!note_deads(m, now))
        return; /* out of memory: the next scan */
    bool any = false;
    for (size_t i = 0; i < s->nmembers && !any; i++)
        any = (s->members[i].draining || replaceable(m, &s->members[i], now)) &&
              (tn_meta_state_replicas_held(s, s->members[i].id) > 0 ||
               tn_meta_state_single_held(s, s->members[i].id) > 0);
    if (!any) {
        m->decom_pending = false;
        return;
    }
    tn_meta_rebal_in_t din;
    if (tn_meta_rebal_in_init(&din, s) != 0)
        return; /* again at the next scan */
    tn_place_in_t in = tn_meta_rebal_place_in(&din);
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    bool pending = false;
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *mb = &s->members[i];
        bool heal = !mb->draining && replaceable(m, mb, now);
        if (!mb->draining && !heal)
            continue;
        const char *what = heal ? "replacing dead member" : "decommission of member";
        char err[160];
        int prc = heal ? tn_place_heal(&in, (uint32_t)mb->id, 0, &plan, err, sizeof(err))
                       : tn_place_decommission(&in, (uint32_t)mb->id, 0, &plan, err, sizeof(err));
        if (prc != 0) {
            TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: %s %" PRIu64 ": %s", what, mb->id, err);
            continue;
        }
        for (size_t k = 0; k < plan.nproblems; k++) {
            const tn_place_part_t *pp = &din.parts[plan.problems[k].part];
            TN_LOG_RL(TN_LOG_WARN, 60000,
                      "metastore: %s %" PRIu64 ": partition %s/%" PRIu32 " cannot move off it: %s",
                      what, mb->id, din.topics[plan.problems[k].part]->rec.name, pp->partition,
                      plan.problems[k].why == TN_PLACE_NO_ROOM
                          ? "every other alive member that is not draining holds it already"
                          : "no alive replica left to copy from");
        }
        for (size_t k = 0; k < plan.nchanges && !m->decom_busy; k++) {
            const tn_place_change_t *ch = &plan.changes[k];
            if (ch->moved == 0)
                continue;
            bool blocked;
            bool may = tn_meta_rebal_take(&din, ch, m->max_moves, &blocked);
            pending = pending || !blocked; /* blocked: a member of it is not alive */
            if (!may)
                continue;
            uint64_t id = begin_change(m, &m->decomreq, &din, ch, on_decom_begun);
            if (id == 0)
                break;
            m->decom_busy = true;
            TN_LOG(TN_LOG_NOTICE,
                   "metastore: %s %" PRIu64 ": moving %s/%" PRIu32 " (move %016" PRIx64 ")", what,
                   mb->id, din.topics[ch->part]->rec.name, din.parts[ch->part].partition, id);
        }
    }
    m->decom_pending = pending;
    tn_place_plan_fini(&plan);
    tn_meta_rebal_in_fini(&din);
}

/* --- the replication factor: each partition's replicas as many as its topic's ------- */

static void on_factor_begun(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->factor_busy = false;
    if (status != 0 && status != UV_EBUSY && status != TN_ECLOSED && status != TN_ENOTFOUND)
        TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: a replication factor's partition move: %s",
                  tn_strerror(status));
}

/* On the leader, every DECOM_SCAN_MS once no decommission or self-healing
 * has a move left to begin (those go first): every placed partition whose
 * replicas, as they will be once the move under way is done, are not as
 * many as its topic's replication_factor (a factor changed by
 * TOPIC_FACTOR, or a partition made while too few members were alive)
 * gets the planner's factor rule (meta/placement.h rule 4: members
 * appended, least loaded first, or dropped from the end, the ones not
 * eligible first, never the preferred leader), and one PART_MOVE begin is
 * proposed at a time for a partition with no move under way whose new
 * members are all alive, under max-moves-per-node (tn_meta_rebal_take);
 * the moves complete as any do (check_moves). A partition that cannot get
 * enough members is left as it is and logged at most once a minute.
 * factor_pending says whether a change is left to begin, which a
 * rebalance waits for (check_spread). */
static void check_factor(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (!m->leading || m->lead_term != m->raft.current_term) {
        m->factor_pending = false;
        return;
    }
    if (change_in_flight(m) || m->decom_pending || now < m->next_factor_ms)
        return;
    m->next_factor_ms = now + DECOM_SCAN_MS;
    tn_meta_rebal_in_t in;
    if (tn_meta_rebal_in_init(&in, &m->state) != 0)
        return; /* out of memory: the next scan */
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    char err[160];
    bool pending = false;
    if (tn_meta_factor_plan(&in, &plan, err, sizeof(err)) != 0) {
        TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: replication factor: %s", err);
        goto done;
    }
    for (size_t k = 0; k < plan.nproblems; k++) {
        const tn_place_part_t *pp = &in.parts[plan.problems[k].part];
        const tn_meta_topic_entry_t *t = in.topics[plan.problems[k].part];
        TN_LOG_RL(TN_LOG_WARN, 60000,
                  "metastore: partition %s/%" PRIu32 " has %" PRIu32
                  " replicas and its topic's replication_factor is %u: too few alive members "
                  "that are not draining hold none of it to add the rest",
                  t->rec.name, pp->partition, pp->factor, tn_meta_topic_factor(&t->rec));
    }
    for (size_t k = 0; k < plan.nchanges && !m->factor_busy; k++) {
        const tn_place_change_t *ch = &plan.changes[k];
        bool blocked;
        bool may = tn_meta_rebal_take(&in, ch, m->max_moves, &blocked);
        pending = pending || !blocked;
        if (!may)
            continue;
        uint64_t id = begin_change(m, &m->factorreq, &in, ch, on_factor_begun);
        if (id == 0)
            break;
        m->factor_busy = true;
        const tn_place_part_t *pp = &in.parts[ch->part];
        const char *topic = in.topics[ch->part]->rec.name;
        TN_LOG(TN_LOG_NOTICE,
               "metastore: replication factor of %s is %u: moving %s/%" PRIu32 " from %" PRIu32
               " to %" PRIu32 " replicas (move %016" PRIx64 ")",
               topic, tn_meta_topic_factor(&in.topics[ch->part]->rec), topic, pp->partition,
               pp->factor, ch->to.factor, id);
    }
done:
    m->factor_pending = pending;
    tn_place_plan_fini(&plan);
    tn_meta_rebal_in_fini(&in);
}

/* --- rebalance: replicas and preferred leaders spread over the members ---------------- */

/* Keep the joins noted within JOIN_JUDGE_MS and, with judged, drop those
 * due (judged now). */
static void forget_joins(tn_meta_t *m, bool judged)
{
    uint64_t now = uv_now(m->loop);
    size_t k = 0;
    for (size_t i = 0; i < m->njoined; i++) {
        if (now - m->joined[i].at >= JOIN_JUDGE_MS || (judged && join_due(m, i)))
            continue;
        m->joined[k++] = m->joined[i];
    }
    m->njoined = k;
}

/* The member of m->joined, alive and not draining in in, holding at
 * least two replicas fewer than the most loaded such member: what a join
 * must show for auto-rebalance to ask for a rebalance (a member that came
 * back holding its share asks for nothing). 0: none; *spread is the most
 * minus that member's count. */
static uint64_t joined_short(const tn_meta_t *m, const tn_meta_rebal_in_t *in, uint32_t *spread)
{
    tn_place_in_t pin = tn_meta_rebal_place_in(in);
    tn_place_load_t *loads = tn_calloc(in->nmembers > 0 ? in->nmembers : 1, sizeof(*loads));
    if (loads == NULL)
        return 0;
    tn_place_loads(&pin, loads);
    uint32_t hi = 0;
    for (size_t i = 0; i < in->nmembers; i++)
        if (in->members[i].alive && !in->members[i].draining)
            hi = TN_MAX(hi, loads[i].replicas);
    uint64_t found = 0;
    for (size_t j = 0; j < m->njoined && found == 0; j++) {
        uint64_t id = m->joined[j].id;
        int k = id <= UINT32_MAX && join_due(m, j) ? tn_meta_rebal_member(in, (uint32_t)id) : -1;
        if (k >= 0 && in->members[k].alive && !in->members[k].draining &&
            loads[k].replicas + 1 < hi) {
            found = id;
            *spread = hi - loads[k].replicas;
        }
    }
    tn_free(loads);
    return found;
}

static void on_spread_proposed(tn_meta_req_t *req, int status)
{
    tn_meta_t *m = req->data;
    m->spread_busy = false;
    if (m->spread_join && (status == 0 || status == UV_EBUSY))
        forget_joins(m, true); /* judged; otherwise judged again at the next scan */
    m->spread_join = false;
    if (status != 0 && status != UV_EBUSY && status != TN_ECLOSED && status != TN_ENOTFOUND &&
        status != TN_ECHANGED)
        TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: a rebalance's proposal: %s", tn_strerror(status));
}

int tn_meta_propose_rebalance(tn_meta_t *m, tn_meta_req_t *req, bool wanted, uint8_t reason,
                              uint64_t id, tn_meta_cb cb)
{
    if (id == 0 || reason < TN_REBAL_API || reason > TN_REBAL_JOIN)
        return UV_EINVAL;
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_CLUSTER_REBALANCE;
    c.if_absent = wanted;
    c.rebal.wanted = wanted;
    c.rebal.reason = reason;
    c.rebal.id = id;
    c.rebal.since_ms = tn_now_wall_ms();
    return tn_meta_propose(m, req, &c, cb);
}

/* Joins seen with auto-rebalance on and no rebalance wanted: ask for one
 * when a member that joined holds two replicas fewer than the most loaded
 * (joined_short). The joins are judged once (again if the proposal was not
 * recorded). */
static void spread_join(tn_meta_t *m, const tn_meta_rebal_in_t *in)
{
    uint32_t spread = 0;
    uint64_t who = joined_short(m, in, &spread);
    uint64_t id = 0;
    if (who == 0 || getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id) || id == 0) {
        if (who == 0)
            forget_joins(m, true);
        return;
    }
    TN_LOG(TN_LOG_NOTICE,
           "metastore: member %" PRIu64 " joined holding %" PRIu32
           " replicas fewer than the most loaded member: rebalancing (auto-rebalance)",
           who, spread);
    m->spreadreq.data = m;
    m->spread_join = true;
    if (tn_meta_propose_rebalance(m, &m->spreadreq, true, TN_REBAL_JOIN, id, on_spread_proposed) ==
        0) {
        m->spread_busy = true;
    } else {
        m->spread_join = false;
    }
}

/* On the leader, every DECOM_SCAN_MS while a rebalance is wanted and no
 * decommission or self-healing has a move left to begin: plan over the
 * state as it will be (meta/rebalance.h, DESIGN) and begin the first
 * change tn_meta_rebal_take allows, one PART_MOVE at a time; with nothing
 * left to begin and no move under way, propose the rebalance over. A join
 * seen (fsm_apply) with auto-rebalance on asks for one (spread_join). */
static void check_spread(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (!m->auto_rebalance)
        m->njoined = 0; /* joins seen with it off are not judged later */
    forget_joins(m, false);
    if (!m->leading || m->lead_term != m->raft.current_term)
        return;
    const tn_meta_state_t *s = &m->state;
    if (change_in_flight(m) || now < m->next_spread_ms || (!s->rebal.wanted && m->njoined == 0))
        return;
    m->next_spread_ms = now + DECOM_SCAN_MS;
    tn_meta_rebal_in_t in;
    if (tn_meta_rebal_in_init(&in, s) != 0)
        return; /* out of memory: the next scan */
    if (!s->rebal.wanted) {
        spread_join(m, &in);
        tn_meta_rebal_in_fini(&in);
        return;
    }
    forget_joins(m, true); /* the rebalance under way plans over them */
    if (m->decom_pending || m->factor_pending) {
        tn_meta_rebal_in_fini(&in);
        return; /* a decommission, self-healing or factor change first */
    }
    tn_place_plan_t plan;
    tn_place_plan_init(&plan);
    char err[160];
    if (tn_meta_rebal_plan(&in, &plan, err, sizeof(err)) != 0) {
        TN_LOG_RL(TN_LOG_WARN, 60000, "metastore: rebalance: %s", err);
        goto done;
    }
    size_t blocked = 0;
    for (size_t k = 0; k < plan.nchanges && !m->spread_busy; k++) {
        const tn_place_change_t *ch = &plan.changes[k];
        bool no;
        if (!tn_meta_rebal_take(&in, ch, m->max_moves, &no)) {
            blocked += no;
            continue;
        }
        uint64_t id = begin_change(m, &m->spreadreq, &in, ch, on_spread_proposed);
        if (id == 0)
            break;
        m->spread_busy = true;
        TN_LOG(TN_LOG_NOTICE, "metastore: rebalance: %s %s/%" PRIu32 " (move %016" PRIx64 ")",
               ch->moved > 0 ? "moving" : "reordering the replicas of",
               in.topics[ch->part]->rec.name, in.parts[ch->part].partition, id);
    }
    if (!m->spread_busy && in.nmoving == 0) {
        /* Nothing under way, so nothing was held by the cap or a move:
         * every change left is blocked. */
        if (blocked > 0)
            TN_LOG(TN_LOG_WARN,
                   "metastore: rebalance over with %zu change(s) not begun: a member of the new "
                   "list is not alive (POST /v1/cluster/rebalance again once it is back)",
                   blocked);
        else
            TN_LOG(TN_LOG_NOTICE,
                   "metastore: rebalance over: replica counts %" PRIu32
                   " apart, preferred leaderships %" PRIu32 " apart",
                   plan.replica_spread, plan.leader_spread);
        m->spreadreq.data = m;
        if (tn_meta_propose_rebalance(m, &m->spreadreq, false, s->rebal.reason, s->rebal.id,
                                      on_spread_proposed) == 0)
            m->spread_busy = true;
    }
done:
    tn_place_plan_fini(&plan);
    tn_meta_rebal_in_fini(&in);
}

/* --- removed members (meta.h "Removal") -------------------------------------------- */

static bool rejoined(const tn_meta_t *m, uint64_t id)
{
    for (size_t i = 0; i < m->nrejoined; i++)
        if (m->rejoined[i] == id)
            return true;
    return false;
}

/* This node's own tombstone applied (a removal committed while it was a
 * voter, or replayed from its log): it marks its Raft directory, says so
 * once, and tells the daemon, which stops. The mark is a small file
 * written on the loop thread, once in the node's life, as it stops. */
static void check_removed_self(tn_meta_t *m)
{
    if (m->removed || m->incarnation == 0)
        return;
    const tn_meta_removed_t *t = tn_meta_state_removed(&m->state, m->id);
    if (t == NULL || t->incarnation != m->incarnation)
        return;
    m->removed = true;
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "node %" PRIu64 " (incarnation %016" PRIx64
                     ") was removed from the cluster at %" PRId64 " (wall ms)\n",
                     m->id, m->incarnation, t->removed_ms);
    int rc = tn_io_write_file_atomic(m->dir, REMOVED_FILE, text, (size_t)n);
    if (rc != 0)
        TN_LOG(TN_LOG_WARN, "metastore: cannot write %s/%s: %s", m->dir, REMOVED_FILE,
               tn_strerror(rc));
    TN_LOG(TN_LOG_ERROR,
           "metastore: this node (%" PRIu64 ") was removed from the cluster "
           "(DELETE /v1/cluster/members/%" PRIu64 "): it takes no further part and stops. Its "
           "data directory stays the removed member's and will not start again; to add this "
           "machine back, start ternd with an empty data directory and --join",
           m->id, m->id);
    if (m->on_removed != NULL)
        m->on_removed(m->removed_arg);
}

static void on_rm_change(struct raft_change *req, int status)
{
    tn_meta_t *m = req->data;
    m->rm_busy = false;
    if (status == 0)
        TN_LOG(TN_LOG_NOTICE, "metastore: node %" PRIu64 " removed from the Raft configuration",
               m->rm_id);
    else if (status != RAFT_SHUTDOWN)
        TN_LOG(TN_LOG_WARN, "metastore: removing node %" PRIu64 " from the Raft configuration: %s",
               m->rm_id, raft_strerror(status));
    m->rm_id = 0;
    if (!m->closing)
        wake(m);
}

static void on_self_xfer(void *arg, int status)
{
    tn_meta_t *m = arg;
    /* TN_ENOTFOUND: no voter could take over (logged); tried again an
     * election timeout later, as after any failure. */
    if (status != 0 && status != TN_ECLOSED && status != TN_ENOTFOUND)
        TN_LOG(TN_LOG_WARN, "metastore: handing leadership over before this node's removal: %s",
               tn_strerror(status));
    if (status != 0 && !m->closing)
        m->self_xfer_after = uv_now(m->loop) + m->election_ms;
}

/* On the leader, each tick: a server of the Raft configuration whose id
 * has a tombstone and no member record (a removal committed) leaves the
 * configuration, one change at a time. Level-triggered: a new leader
 * finishes what the last began. The leader itself hands leadership over
 * first (libraft's leader never removes itself; the next leader removes
 * it). A removed member still heard from first gets REMOVE_WAIT_MS to
 * receive its tombstone, so it stops by itself rather than wait, cut off,
 * for a leader. Spares and ids this leader admitted again (an empty data
 * directory reusing the id, before its registration clears the
 * tombstone) are left alone. */
static void check_removals(tn_meta_t *m)
{
    /* An id admitted again counts as such until its registration cleared
     * the tombstone (a later removal of it is a removal again). */
    size_t k = 0;
    for (size_t i = 0; i < m->nrejoined; i++)
        if (tn_meta_state_removed(&m->state, m->rejoined[i]) != NULL &&
            tn_meta_member_find(&m->state, m->rejoined[i]) == NULL)
            m->rejoined[k++] = m->rejoined[i];
    m->nrejoined = k;
    if (!m->leading || m->lead_term != m->raft.current_term || m->rm_busy)
        return;
    const struct raft_configuration *conf = &m->raft.configuration;
    const struct raft_progress *prog = m->raft.leader_state.progress;
    uint64_t now = uv_now(m->loop);
    for (unsigned i = 0; i < conf->n; i++) {
        uint64_t id = conf->servers[i].id;
        if (conf->servers[i].role == RAFT_SPARE || tn_meta_state_removed(&m->state, id) == NULL ||
            tn_meta_member_find(&m->state, id) != NULL || rejoined(m, id))
            continue;
        if (id == m->id) {
            if (!m->xfer_active && !m->xfer_in_raft && now >= m->self_xfer_after)
                (void)tn_meta_transfer(m, on_self_xfer, m);
            return;
        }
        if (m->rm_id != id) {
            m->rm_id = id;
            m->rm_since = now;
            m->rm_index = m->raft.commit_index;
        }
        if (prog != NULL && prog[i].match_index < m->rm_index && now - m->rm_since < REMOVE_WAIT_MS)
            return; /* give it its tombstone first */
        memset(&m->rmchange, 0, sizeof(m->rmchange));
        m->rmchange.data = m;
        int rc = raft_remove(&m->raft, &m->rmchange, id, on_rm_change);
        if (rc == 0) {
            m->rm_busy = true;
            TN_LOG(TN_LOG_NOTICE,
                   "metastore: member %" PRIu64 " was removed: taking it out of the Raft "
                   "configuration",
                   id);
        } else if (rc != RAFT_CANTCHANGE) {
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "metastore: cannot take removed node %" PRIu64
                      " out of the Raft configuration: %s",
                      id, raft_strerror(rc));
        }
        return;
    }
}

void tn_meta_on_removed(tn_meta_t *m, void (*cb)(void *arg), void *arg)
{
    m->on_removed = cb;
    m->removed_arg = arg;
}

bool tn_meta_removed(const tn_meta_t *m)
{
    return m->removed;
}

size_t tn_meta_voters(tn_meta_t *m, uint64_t *ids, size_t cap)
{
    const struct raft_configuration *c = &m->raft.configuration;
    size_t n = 0;
    for (unsigned i = 0; i < c->n; i++) {
        if (c->servers[i].role != RAFT_VOTER)
            continue;
        if (n < cap)
            ids[n] = c->servers[i].id;
        n++;
    }
    return n;
}

static bool part_args_ok(const char *topic, uint32_t p)
{
    size_t n = strlen(topic);
    return n <= TN_NAME_MAX && tn_name_valid(topic, n) && p < TN_META_MAX_PARTITIONS;
}

int tn_meta_propose_isr(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                        uint32_t leader_epoch, uint32_t expected_pe, const tn_pstate_member_t *isr,
                        uint32_t n, bool channels_checked, tn_meta_cb cb)
{
    if (!part_args_ok(topic, p) || n == 0 || n > TN_PSTATE_MAX_REPLICAS)
        return UV_EINVAL;
    tn_meta_cmd_t c;
    part_cmd_init(&c, TN_MC_PART_ISR, topic, p);
    c.node = (uint32_t)m->id;
    c.leader_epoch = leader_epoch;
    c.expected_pe = expected_pe;
    c.nisr = n;
    memcpy(c.isr, isr, n * sizeof(*isr));
    c.channels_checked = channels_checked;
    return tn_meta_propose(m, req, &c, cb);
}

int tn_meta_force_leader(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                         uint32_t node, bool unclean, tn_meta_cb cb)
{
    if (!part_args_ok(topic, p) || node == TN_PSTATE_NONE)
        return UV_EINVAL;
    tn_meta_cmd_t c;
    part_cmd_init(&c, TN_MC_PART_LEADER, topic, p);
    c.node = node;
    c.unclean = unclean;
    return tn_meta_propose(m, req, &c, cb);
}

int tn_meta_propose_move(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                         uint8_t kind, uint64_t id, const uint32_t *target, uint32_t n,
                         const char *reason, tn_meta_cb cb)
{
    if (!part_args_ok(topic, p) || id == 0 || kind > TN_MOVE_FAIL ||
        (kind == TN_MOVE_BEGIN && (n == 0 || n > TN_PSTATE_MAX_REPLICAS)) ||
        (reason != NULL && strlen(reason) > TN_META_MOVE_REASON_MAX))
        return UV_EINVAL;
    tn_meta_cmd_t c;
    part_cmd_init(&c, TN_MC_PART_MOVE, topic, p);
    c.move_kind = kind;
    c.move_id = id;
    c.move_ms = tn_now_wall_ms();
    if (kind == TN_MOVE_BEGIN) {
        c.ntarget = n;
        memcpy(c.target, target, n * sizeof(*target));
    }
    if ((kind == TN_MOVE_ABORT || kind == TN_MOVE_FAIL) && reason != NULL)
        snprintf(c.move_reason, sizeof(c.move_reason), "%s", reason);
    return tn_meta_propose(m, req, &c, cb);
}

int tn_meta_propose_move_mark(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                              uint64_t id, const tn_pstate_mark_t *mark, uint32_t n, tn_meta_cb cb)
{
    if (!part_args_ok(topic, p) || id == 0 || n > TN_PSTATE_MAX_REPLICAS)
        return UV_EINVAL;
    tn_meta_cmd_t c;
    part_cmd_init(&c, TN_MC_MOVE_MARK, topic, p);
    c.move_id = id;
    c.nmark = n;
    if (n > 0)
        memcpy(c.mark, mark, n * sizeof(*mark));
    return tn_meta_propose(m, req, &c, cb);
}

int tn_meta_mark_corrupt(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                         uint32_t node, tn_meta_cb cb)
{
    if (!part_args_ok(topic, p) || node == TN_PSTATE_NONE)
        return UV_EINVAL;
    tn_meta_cmd_t c;
    part_cmd_init(&c, TN_MC_PART_CORRUPT, topic, p);
    c.node = node;
    return tn_meta_propose(m, req, &c, cb);
}

int tn_meta_incarnation_load(const char *data_dir, uint64_t *out, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/" TN_META_INCARNATION_FILE, data_dir);
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_io_read_file(path, 64, &b);
    if (rc == 0) {
        char text[32] = "";
        bool ok = b.len == 17 && ((const char *)b.base)[16] == '\n';
        uint64_t v = 0;
        if (ok) {
            memcpy(text, b.base, 16);
            for (int i = 0; ok && i < 16; i++) {
                char ch = text[i];
                int d = ch >= '0' && ch <= '9'   ? ch - '0'
                        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                                 : -1;
                ok = d >= 0;
                v = v << 4 | (uint64_t)(d >= 0 ? d : 0);
            }
        }
        tn_buf_fini(&b);
        if (!ok || v == 0) {
            tn_errbuf(err, errlen,
                      "%s is not an incarnation file (16 hex digits and a newline); remove it only "
                      "if this node's data directory is new or wiped",
                      path);
            return TN_ECORRUPT;
        }
        *out = v;
        return 0;
    }
    tn_buf_fini(&b);
    if (rc != UV_ENOENT) {
        tn_errbuf(err, errlen, "cannot read %s: %s", path, tn_strerror(rc));
        return rc;
    }
    uint64_t v = 0;
    while (v == 0) {
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
            rc = tn_err_from_errno(errno);
            tn_errbuf(err, errlen, "cannot make an incarnation: getrandom: %s", tn_strerror(rc));
            return rc;
        }
    }
    char text[32];
    int n = snprintf(text, sizeof(text), "%016llx\n", (unsigned long long)v);
    rc = tn_io_write_file_atomic(data_dir, TN_META_INCARNATION_FILE, text, (size_t)n);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot write %s: %s", path, tn_strerror(rc));
        return rc;
    }
    TN_LOG(TN_LOG_NOTICE, "data directory %s: new incarnation %016llx", data_dir,
           (unsigned long long)v);
    *out = v;
    return 0;
}

/* --- the tick ------------------------------------------------------------------- */

static void on_lead_barrier(struct raft_barrier *b, int status)
{
    tn_meta_t *m = b->data;
    m->lead_barrier_busy = false;
    if (status == 0)
        m->lead_term = m->lead_asked; /* every entry before it is applied */
    if (!m->closing)
        wake(m); /* ready, and the caught-up waiters, may follow */
}

/* A leader that applied a change the followers should have at once
 * (req->push: pushes) sends its heartbeats now rather than when the
 * heartbeat timeout comes: they carry the commit index, so the follower
 * waiting to read the change back (wait_applied, or an older build's
 * NOOP), or to open its replica of a new topic, applies it a round trip
 * later (from the entries it stored already: no write) instead of up to a
 * heartbeat later. libraft (0.15) sends a follower an AppendEntries at a
 * tick when nothing went to it for a heartbeat timeout (its progress'
 * last_send) or it is behind: marking each follower's last send as long
 * ago and ticking sends every follower one. The rest of a tick is timed
 * by elapsed time (io_start: ternd ticks libraft finer than it asks
 * already), so an extra tick changes nothing else. One push for every
 * change applied since the last, and a second to each follower that had
 * not stored the entries yet, once it has (pushes_owed); from the tick
 * (on_poll, every LEADER_POLL_MS), never inside libraft's callbacks. */
static void push_commit(tn_meta_t *m)
{
    struct raft_progress *prog = m->raft.leader_state.progress;
    bool leader = raft_state(&m->raft) == RAFT_LEADER && m->raft_tick != NULL && prog != NULL;
    if (!leader || uv_now(m->loop) >= m->push_owed_until)
        memset(m->pushes_owed, 0, sizeof(m->pushes_owed));
    if (!leader) {
        m->push_wanted = false;
        return;
    }
    /* A follower whose write of the pushed entries was still under way
     * when the push came applies only what it had stored; the commit
     * index reaches it again only with the next message. Once its answer
     * says it stored them (its match index), it is pushed to again. */
    const struct raft_configuration *conf = &m->raft.configuration;
    bool send = false;
    for (unsigned i = 0; i < conf->n; i++) {
        for (unsigned k = 0; k < PUSH_OWED_MAX; k++) {
            if (m->pushes_owed[k].id == conf->servers[i].id && m->pushes_owed[k].until != 0 &&
                prog[i].match_index >= m->pushes_owed[k].until) {
                m->pushes_owed[k].until = 0;
                prog[i].last_send = 0;
                send = true;
            }
        }
    }
    if (m->push_wanted) {
        m->push_wanted = false;
        raft_index commit = m->raft.commit_index;
        memset(m->pushes_owed, 0, sizeof(m->pushes_owed));
        unsigned owed = 0;
        for (unsigned i = 0; i < conf->n; i++) {
            if (conf->servers[i].id == m->id)
                continue;
            prog[i].last_send = 0;
            if (prog[i].match_index < commit && owed < PUSH_OWED_MAX) {
                m->pushes_owed[owed].id = conf->servers[i].id;
                m->pushes_owed[owed].until = commit;
                owed++;
            }
        }
        m->push_owed_until = uv_now(m->loop) + m->raft.heartbeat_timeout;
        send = true;
    }
    if (send)
        m->raft_tick(&m->io);
}

/* A leader without a barrier applied in its term asks for one. */
static void lead_barrier(tn_meta_t *m)
{
    if (raft_state(&m->raft) != RAFT_LEADER || m->lead_barrier_busy ||
        m->lead_term == m->raft.current_term)
        return;
    m->lead_barrier.data = m;
    m->lead_asked = m->raft.current_term;
    if (raft_barrier(&m->raft, &m->lead_barrier, on_lead_barrier) == 0)
        m->lead_barrier_busy = true; /* refused: asked again next tick */
}

/* On the leader, each tick: every server libraft had a message from in
 * its current election timeout (libraft clears the flags at each one) is
 * heard now. A failed allocation only leaves a member looking unheard. */
static void note_contacts(tn_meta_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (!m->leading || m->leading_term != m->raft.current_term) {
        m->leading = true;
        m->leading_term = m->raft.current_term;
        m->leader_since_mono = now;
        m->nheard = 0;
    }
    const struct raft_configuration *conf = &m->raft.configuration;
    const struct raft_progress *prog = m->raft.leader_state.progress;
    for (unsigned i = 0; i < conf->n; i++) {
        uint64_t id = conf->servers[i].id;
        if (id != m->id && (prog == NULL || !prog[i].recent_recv))
            continue;
        note_heard(m, id, now);
    }
}

static void note_heard(tn_meta_t *m, uint64_t id, uint64_t now)
{
    size_t k = 0;
    while (k < m->nheard && m->heard[k].id != id)
        k++;
    if (k == m->nheard) {
        if (m->nheard == m->heardcap) {
            size_t cap = m->heardcap ? 2 * m->heardcap : 8;
            heard_t *h = tn_realloc(m->heard, cap * sizeof(*h));
            if (h == NULL)
                return;
            m->heard = h;
            m->heardcap = cap;
        }
        m->heard[m->nheard++].id = id;
    }
    m->heard[k].at = now;
}

int tn_meta_heard(tn_meta_t *m, uint64_t id, uint64_t *ago_ms, bool *recent)
{
    if (m->closing || raft_state(&m->raft) != RAFT_LEADER || !m->leading)
        return TN_ENOTLEADER;
    const struct raft_configuration *conf = &m->raft.configuration;
    unsigned i = 0;
    while (i < conf->n && conf->servers[i].id != id)
        i++;
    if (i == conf->n)
        return TN_ENOTFOUND;
    uint64_t now = uv_now(m->loop);
    *ago_ms = id == m->id ? 0 : now - heard_at(m, id);
    *recent = heard_recently(m, id, now);
    return 0;
}

#ifdef TN_TEST
/* TERN_TEST_FIRST_TIMERS_MS="a,b,c" (unit tests): node i's election
 * timers while a new cluster has no leader are the i-th value, in ms (at
 * most E/2), not a random draw, so a test can give voters that start
 * together timers that expire when it chooses. 0: none for this node. */
static unsigned first_timer_fixed(const tn_meta_t *m)
{
    const char *v = getenv("TERN_TEST_FIRST_TIMERS_MS");
    for (uint64_t i = 1; v != NULL && *v != '\0'; i++) {
        char *end;
        unsigned long ms = strtoul(v, &end, 10);
        if (i == m->id)
            return ms <= m->election_ms / 2 ? (unsigned)ms : 0;
        v = *end == ',' ? end + 1 : "";
    }
    return 0;
}
#endif

/* An election timer for a voter of a new cluster with no leader yet:
 * from [E/4, E/2] (first_elections). */
static unsigned first_timer(tn_meta_t *m)
{
#ifdef TN_TEST
    unsigned fixed = first_timer_fixed(m);
    if (fixed != 0)
        return fixed;
#endif
    unsigned e = m->election_ms;
    return (unsigned)m->io.random(&m->io, (int)(e / 4), (int)(e / 2));
}

/* A new cluster's voters start together and none has led yet: there is
 * no leader whose silence an election timer could detect, yet libraft
 * draws each from [E, 2E], which left every new cluster leaderless for
 * 1-2 s, and for 2-4 more after a first election that elected no one (a
 * split vote: voters that stood at the same tick, io_start; no vote
 * request or answer was seen lost while connections came up). Until a
 * leader is known, each timer libraft draws is drawn again from [E/4,
 * E/2] (libraft's own random source), the first at the start; once one
 * is known, every timer is libraft's, as is every timer of a node that
 * restarts on its state. The timers decide only when this node asks for
 * (pre-)votes, never who wins.
 * Polled every LEADER_POLL_MS: a timer libraft drew since is replaced
 * before it can fire. */
static void first_elections(tn_meta_t *m)
{
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader(&m->raft, &leader, &addr);
    int state = raft_state(&m->raft);
    if (leader != 0 || state == RAFT_LEADER) {
        m->first_elections = false;
        TN_LOG(TN_LOG_NOTICE, "metastore: the new cluster's first leader is node %llu (term %llu)",
               (unsigned long long)(state == RAFT_LEADER ? m->raft.id : leader),
               (unsigned long long)m->raft.current_term);
        return;
    }
    unsigned e = m->election_ms;
    unsigned *timer = NULL;
    if (state == RAFT_FOLLOWER)
        timer = &m->raft.follower_state.randomized_election_timeout;
    else if (state == RAFT_CANDIDATE)
        timer = &m->raft.candidate_state.randomized_election_timeout;
    if (state == RAFT_CANDIDATE && !m->stood) {
        m->stood = true;
        TN_LOG(TN_LOG_NOTICE,
               "metastore: no leader yet in this new cluster: this node asks for votes");
    }
    if (timer != NULL && *timer > e / 2)
        *timer = first_timer(m);
}

/* libraft (0.15) looks at its election timer only when its io ticks, and
 * asks for a tick once a heartbeat timeout (E/10 in ternd), so a timer
 * fired at the first tick after it expired. Voters whose ticks come at
 * the same moments (a new cluster's, started together) stood together
 * whenever their timers fell between the same two ticks: each passed
 * pre-vote (a candidate grants the others' too), each voted for itself,
 * and nobody was elected until a later round (a split vote). The first
 * timers, drawn from [E/4, E/2], span under three ticks: 2 of 30 new
 * ternd clusters with a 16 s election timeout split so under load, every
 * vote request answered within milliseconds (libraft's trace). The io
 * ticks every E/ELECTION_TICKS instead, at most once a
 * heartbeat timeout: everything libraft does at a tick is measured in
 * elapsed time (a leader's heartbeats still go once a heartbeat timeout,
 * its quorum check once an election timeout, a promotion's rounds and a
 * transfer's deadline likewise), so only the timers' resolution changes. */
static void io_recv(struct raft_io *io, struct raft_message *msg)
{
    tn_meta_t *m = TN_CONTAINER_OF(io, tn_meta_t, io);
    /* Any leader's commit index is committed (whatever its term): read
     * before libraft takes the message. */
    if (msg->type == RAFT_IO_APPEND_ENTRIES &&
        msg->append_entries.leader_commit > m->leader_commit_seen)
        m->leader_commit_seen = msg->append_entries.leader_commit;
    m->raft_recv(io, msg);
}

static int io_start(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv)
{
    tn_meta_t *m = TN_CONTAINER_OF(io, tn_meta_t, io);
    unsigned fine = TN_MAX(m->election_ms / ELECTION_TICKS, 1u);
    m->raft_recv = recv;
    m->raft_tick = tick;
    return m->uv_start(io, TN_MIN(msecs, fine), tick, io_recv);
}

#ifdef TN_TEST
/* TERN_TEST_META_APPEND_DELAY_FILE=path (ternd-test): while the file
 * exists, libraft learns that each of this node's metastore log appends
 * is stored the number of milliseconds the file holds after it is (a
 * slow disk), in order; the tick tells it (a close, at once). So a test
 * can show a follower told of commits its log does not hold yet
 * (tn_meta_steady). */
typedef struct slow_append_s {
    struct raft_io_append *req;
    void *data; /* libraft's req->data, given back before its callback */
    raft_io_append_cb cb;
    int status;
    bool stored;
    uint64_t due; /* loop ms; never before the one before it */
    struct slow_append_s *next;
} slow_append_t;

static void slow_stored(struct raft_io_append *req, int status)
{
    tn_meta_t *m = req->data;
    for (slow_append_t *a = m->slow_head; a != NULL; a = a->next)
        if (a->req == req && !a->stored) {
            a->stored = true;
            a->status = status;
            return;
        }
}

static int slow_append(struct raft_io *io, struct raft_io_append *req,
                       const struct raft_entry entries[], unsigned n, raft_io_append_cb cb)
{
    tn_meta_t *m = TN_CONTAINER_OF(io, tn_meta_t, io);
    uint64_t delay = 0;
    FILE *f = fopen(getenv("TERN_TEST_META_APPEND_DELAY_FILE"), "r");
    if (f != NULL) {
        unsigned long long v = 0;
        if (fscanf(f, "%llu", &v) == 1)
            delay = v;
        fclose(f);
    }
    if (delay == 0 && m->slow_head == NULL)
        return m->uv_append(io, req, entries, n, cb);
    slow_append_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return RAFT_NOMEM;
    uint64_t due = uv_now(m->loop) + delay;
    a->req = req;
    a->data = req->data;
    a->cb = cb;
    a->due = m->slow_tail != NULL ? TN_MAX(due, m->slow_tail->due) : due;
    slow_append_t *before = m->slow_tail;
    if (before != NULL)
        before->next = a;
    else
        m->slow_head = a;
    m->slow_tail = a;
    req->data = m;
    int rc = m->uv_append(io, req, entries, n, slow_stored);
    if (rc != 0) {
        req->data = a->data;
        if (before != NULL)
            before->next = NULL;
        else
            m->slow_head = NULL;
        m->slow_tail = before;
        tn_free(a);
    }
    return rc;
}

/* Tells libraft of the appends stored and due (all: every one stored). */
static void slow_release(tn_meta_t *m, bool all)
{
    uint64_t now = uv_now(m->loop);
    while (m->slow_head != NULL && m->slow_head->stored && (all || m->slow_head->due <= now)) {
        slow_append_t *a = m->slow_head;
        m->slow_head = a->next;
        if (m->slow_head == NULL)
            m->slow_tail = NULL;
        a->req->data = a->data;
        raft_io_append_cb cb = a->cb;
        struct raft_io_append *req = a->req;
        int status = a->status;
        tn_free(a);
        cb(req, status);
    }
}
#endif

static void on_poll(uv_timer_t *t)
{
    tn_meta_t *m = t->data;
    if (m->closing)
        return;
    if (m->first_elections)
        first_elections(m);
#ifdef TN_TEST
    slow_release(m, false);
    if (m->closing)
        return;
#endif
    lead_barrier(m);
    push_commit(m);
    note_lag(m);
    bool leader = raft_state(&m->raft) == RAFT_LEADER;
    if (leader && m->leader_since_wall == 0)
        m->leader_since_wall = tn_now_wall_ms();
    else if (!leader)
        m->leader_since_wall = 0;
    if (leader)
        note_contacts(m);
    else
        m->leading = false;
    check_address(m);
    reroute_forwards(m);
    if (!m->closing)
        dispatch_waiting(m);
    if (!m->closing)
        run_joins(m);
    if (!m->closing)
        run_transfer(m);
    if (!m->closing)
        run_confirms(m);
    if (!m->closing && !m->ready && caught_up(m) && raft_last_applied(&m->raft) >= m->start_index) {
        m->ready = true;
        TN_LOG(TN_LOG_NOTICE, "metastore ready: %s, %zu topics, %zu users, log index %llu",
               leader ? "leader" : "follower", m->state.ntopics, m->state.nusers,
               (unsigned long long)raft_last_index(&m->raft));
        m->changed = false; /* on_ready covers what came before */
        m->pnotes_all = m->on_pstate != NULL;
        if (m->on_ready != NULL)
            m->on_ready(m->ready_arg);
    }
    if (!m->closing)
        tell_pstates(m);
    if (!m->closing && m->ready && m->changed && m->on_change != NULL) {
        m->changed = false;
        m->on_change(m->change_arg);
    }
    if (!m->closing)
        register_self(m);
    if (!m->closing && leader)
        mark_dead(m);
    if (!m->closing && leader)
        check_sessions(m);
    if (!m->closing && leader)
        make_salt(m);
    if (!m->closing)
        check_rebalance(m);
    if (!m->closing)
        check_moves(m);
    if (!m->closing)
        check_decommission(m);
    if (!m->closing)
        check_factor(m);
    if (!m->closing)
        check_spread(m);
    if (!m->closing)
        check_removed_self(m);
    if (!m->closing)
        check_removals(m);
    if (m->closing)
        return; /* the close owns the timer now */
    bool busy = m->waiting != NULL || m->fwds != NULL || m->joins != NULL || m->xfer_active ||
                m->confirms != NULL || !m->ready;
    uv_timer_set_repeat(t, busy ? LEADER_POLL_MS : TICK_MS);
}

void tn_meta_on_change(tn_meta_t *m, void (*cb)(void *arg), void *arg)
{
    m->on_change = cb;
    m->change_arg = arg;
}

const tn_meta_state_t *tn_meta_state(const tn_meta_t *m)
{
    return &m->state;
}

const uint64_t *tn_meta_access_gen(const tn_meta_t *m)
{
    return &m->state.access_gen;
}

bool tn_meta_ready(tn_meta_t *m)
{
    return m->ready && !m->closing;
}

uint64_t tn_meta_applied_index(tn_meta_t *m)
{
    return raft_last_applied(&m->raft);
}

uint64_t tn_meta_start_index(const tn_meta_t *m)
{
    return m->start_index;
}

uint64_t tn_meta_term(tn_meta_t *m)
{
    return m->raft.current_term;
}

bool tn_meta_caught_up(tn_meta_t *m)
{
    return caught_up(m);
}

bool tn_meta_steady(tn_meta_t *m)
{
    if (!in_touch(m))
        return false;
    if (caught_up(m) || m->lag_since == 0 || raft_last_applied(&m->raft) >= m->lag_index)
        return true; /* not behind, or behind since after the last tick */
    return uv_now(m->loop) - m->lag_since < STEADY_LAG_MS;
}

void tn_meta_timeouts(const tn_meta_t *m, unsigned *election_ms, unsigned *session_ms)
{
    *election_ms = m->election_ms;
    *session_ms = m->session_ms;
}

uint64_t tn_meta_confirmed_at(tn_meta_t *m)
{
    /* Only while every change applied was told to the partition
     * listeners: until then this node may still act on a state a newer
     * one replaced. */
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader(&m->raft, &leader, &addr);
    if (m->closing || !m->ready || leader == 0 || m->npnotes > 0 || m->pnotes_all ||
        raft_last_applied(&m->raft) < m->start_index ||
        raft_last_applied(&m->raft) < m->raft.commit_index)
        return m->confirmed_at;
    if (raft_state(&m->raft) == RAFT_LEADER && m->lead_term != m->raft.current_term)
        return m->confirmed_at; /* its commit index may lag (caught_up) */
    uint64_t at;
    if (raft_state(&m->raft) == RAFT_LEADER) {
        /* A leader cut off from a quorum steps down within an election
         * timeout (libraft's check-quorum), and no other leader commits
         * before that: count its confirmation from that far back. */
        uint64_t now = uv_now(m->loop);
        at = now > m->election_ms ? now - m->election_ms : 0;
    } else {
        /* The last append from the leader: what it said was committed
         * is applied (caught_up), and so is every entry received (the
         * entries of an append are in the log before its commit index
         * counts them), so whatever was committed before it was sent is
         * known here. */
        if (raft_last_index(&m->raft) > raft_last_applied(&m->raft))
            return m->confirmed_at;
        at = m->raft.election_timer_start;
    }
    if (at > m->confirmed_at)
        m->confirmed_at = at;
    return m->confirmed_at;
}

/* --- lifetime ------------------------------------------------------------------ */

static void meta_free(tn_meta_t *m)
{
    tn_meta_state_fini(&m->state);
    tn_free(m->heard);
    tn_free(m->pnotes);
    tn_free(m->readies);
    tn_free(m->deads);
    tn_free(m->rejoined);
    void (*cb)(void *) = m->close_cb;
    void *arg = m->close_arg;
    tn_free(m);
    if (cb != NULL)
        cb(arg);
}

static void on_poll_closed(uv_handle_t *h)
{
    meta_free(h->data);
}

static void on_raft_closed(struct raft *r)
{
    tn_meta_t *m = r->data;
    raft_uv_close(&m->io);
    tn_meta_transport_fini(&m->transport);
    uv_close((uv_handle_t *)&m->poll, on_poll_closed);
}

/* Why raft_start could not listen on address, into why ("" when a socket
 * of our own can listen there after all). libraft 0.15's TCP transport
 * drops the system error of its bind and listen: raft_start answers
 * RAFT_IOERR, and raft_errmsg, the io's and the transport's errmsg stay
 * empty. So repeat the two, as libuv makes them (SO_REUSEADDR, as libraft's
 * listener has), on a socket that is closed again at once. */
static void explain_listen(const char *address, char *why, size_t len)
{
    why[0] = '\0';
    tn_hostport_t hp;
    tn_netaddr_t na;
    if (tn_netaddr_split(address, &hp, NULL, 0) != 0 || !hp.numeric ||
        tn_netaddr_resolve(&hp, TN_NETADDR_IPV4, &na, NULL, 0) != 0)
        return;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, len, "%s", tn_strerror(tn_err_from_errno(errno)));
        return;
    }
    int on = 1;
    int rc = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (rc == 0)
        rc = bind(fd, (const struct sockaddr *)&na.sa, sizeof(struct sockaddr_in));
    if (rc == 0)
        rc = listen(fd, 1);
    if (rc != 0)
        snprintf(why, len, "%s", tn_strerror(tn_err_from_errno(errno)));
    close(fd);
}

/* The initial configuration: the peers, or this node alone. */
static int initial_conf(const tn_meta_opts_t *o, struct raft_configuration *conf, char *err,
                        size_t errlen)
{
    if (o->npeers == 0)
        return raft_configuration_add(conf, o->node_id, o->address, RAFT_VOTER) == 0 ? 0
                                                                                     : UV_ENOMEM;
    bool self = false;
    for (size_t i = 0; i < o->npeers; i++) {
        const tn_meta_peer_t *p = &o->peers[i];
        if (p->id == o->node_id) {
            self = true;
            if (strcmp(p->raft_addr, o->address) != 0) {
                tn_errbuf(err, errlen,
                          "metastore: peer %llu is at %s in the peer list, but this node (%llu) "
                          "listens on %s",
                          (unsigned long long)p->id, p->raft_addr, (unsigned long long)p->id,
                          o->address);
                return UV_EINVAL;
            }
        }
        int rc = raft_configuration_add(conf, p->id, p->raft_addr, RAFT_VOTER);
        if (rc != 0) {
            tn_errbuf(err, errlen, "metastore: peer %llu at %s: %s", (unsigned long long)p->id,
                      p->raft_addr,
                      rc == RAFT_DUPLICATEID        ? "the id is listed twice"
                      : rc == RAFT_DUPLICATEADDRESS ? "the address is listed twice"
                                                    : raft_strerror(rc));
            return UV_EINVAL;
        }
    }
    if (!self) {
        tn_errbuf(err, errlen, "metastore: the peer list does not name this node (%llu)",
                  (unsigned long long)o->node_id);
        return UV_EINVAL;
    }
    return 0;
}

int tn_meta_open(uv_loop_t *loop, const tn_meta_opts_t *o, tn_meta_t **out, char *err,
                 size_t errlen)
{
    if (o->node_id == 0 || strlen(o->address) > TN_META_ADDR_MAX ||
        (o->api_addr != NULL && strlen(o->api_addr) > TN_META_ADDR_MAX)) {
        tn_errbuf(err, errlen, "metastore: node id must be >= 1 and the addresses at most %d bytes",
                  TN_META_ADDR_MAX);
        return UV_EINVAL;
    }
    if (o->join_only && o->npeers > 0) {
        tn_errbuf(err, errlen, "metastore: a joining node takes no initial peer list");
        return UV_EINVAL;
    }
    if (strlen(o->dir) + sizeof(REMOVED_FILE) + 1 > sizeof(((tn_meta_t *)0)->dir)) {
        tn_errbuf(err, errlen, "metastore: the directory name %s is too long", o->dir);
        return UV_EINVAL;
    }
    /* A node removed from the cluster never takes part again with this
     * Raft state (meta.h "Removal"). */
    char mark[1100];
    snprintf(mark, sizeof(mark), "%s/" REMOVED_FILE, o->dir);
    if (access(mark, F_OK) == 0) {
        tn_errbuf(err, errlen,
                  "metastore: node %llu was removed from the cluster and %s is the removed "
                  "member's (%s says so): it does not start again. To add this machine back, "
                  "start ternd with an empty data directory and --join",
                  (unsigned long long)o->node_id, o->dir, mark);
        return UV_EPERM;
    }
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    int crc = o->join_only ? 0 : initial_conf(o, &conf, err, errlen);
    if (crc != 0) {
        raft_configuration_close(&conf);
        return crc;
    }
    if (mkdir(o->dir, 0755) != 0 && errno != EEXIST) {
        int rc = tn_err_from_errno(errno);
        raft_configuration_close(&conf);
        tn_errbuf(err, errlen, "metastore: cannot create %s: %s", o->dir, tn_strerror(rc));
        return rc;
    }
    tn_meta_t *m = tn_calloc(1, sizeof(*m));
    if (m == NULL) {
        raft_configuration_close(&conf);
        return UV_ENOMEM;
    }
    m->loop = loop;
    snprintf(m->dir, sizeof(m->dir), "%s", o->dir);
    m->on_ready = o->on_ready;
    m->ready_arg = o->ready_arg;
    m->id = o->node_id;
    snprintf(m->api_addr, sizeof(m->api_addr), "%s", o->api_addr != NULL ? o->api_addr : "");
    m->election_ms = o->election_ms ? o->election_ms : 1000;
    m->hb_interval_ms =
        o->heartbeat_interval_ms ? o->heartbeat_interval_ms : DEFAULT_HEARTBEAT_INTERVAL_MS;
    m->dead_after_ms = o->dead_after_ms ? o->dead_after_ms : DEFAULT_DEAD_AFTER_MS;
    m->forward = o->forward;
    m->forward_arg = o->forward_arg;
    m->confirm_seq = (uint64_t)tn_now_wall_ns();
    m->incarnation = o->incarnation;
    /* A random id of this process: its first registration tells the
     * metastore it restarted. */
    if (getrandom(&m->boot, sizeof(m->boot), 0) != (ssize_t)sizeof(m->boot))
        m->boot = (uint64_t)tn_now_wall_ns() ^ ((uint64_t)getpid() << 32);
    m->boot |= 1; /* never 0 */
    m->session_ms = o->session_timeout_ms ? o->session_timeout_ms : DEFAULT_SESSION_MS;
    m->rebalance_ms = o->rebalance_delay_ms ? o->rebalance_delay_ms : DEFAULT_REBALANCE_MS;
    m->replace_dead_ms = o->replace_dead_ms;
    m->max_moves = o->max_moves_per_node ? o->max_moves_per_node : TN_META_MOVES_PER_NODE;
    m->auto_rebalance = !o->no_auto_rebalance;
    tn_meta_state_init(&m->state);
    m->state.pstate_cb = on_state_pstate;
    m->state.pstate_arg = m;
    snprintf(m->address, sizeof(m->address), "%s", o->address);
    m->fsm.version = 1;
    m->fsm.data = m;
    m->fsm.apply = fsm_apply;
    m->fsm.snapshot = fsm_snapshot;
    m->fsm.restore = fsm_restore;
    uv_timer_init(loop, &m->poll);
    m->poll.data = m;
    tn_meta_transport_opts_t topts = {o->tls_cert, o->tls_key, o->tls_ca, o->listen};
    char terr[512];
    int rc = tn_meta_transport_init(&m->transport, loop, &topts, terr, sizeof(terr));
    if (rc != 0) {
        tn_errbuf(err, errlen, "metastore: %s", rc == UV_ENOMEM ? tn_strerror(rc) : terr);
        goto fail_timer;
    }
    rc = raft_uv_init(&m->io, loop, o->dir, &m->transport);
    if (rc != 0) {
        tn_errbuf(err, errlen, "metastore: %s: %s", o->dir, raft_strerror(rc));
        tn_meta_transport_fini(&m->transport);
        goto fail_timer;
    }
    unsigned heartbeat_ms = o->heartbeat_ms ? o->heartbeat_ms : 100;
    m->uv_start = m->io.start;
    m->io.start = io_start;
#ifdef TN_TEST
    if (getenv("TERN_TEST_META_APPEND_DELAY_FILE") != NULL) {
        m->uv_append = m->io.append;
        m->io.append = slow_append;
    }
#endif
    /* A peer whose connection failed is dialled again a heartbeat later,
     * not libraft's second: a follower back from a restart hears from
     * the leader as soon as it would have had it never left, well before
     * its own election timer expires. One dial at a time per peer. */
    raft_uv_set_connect_retry_delay(&m->io, TN_MIN(heartbeat_ms, CONNECT_RETRY_MAX_MS));
    /* libraft's default, set here so room.c counts the size it allocates. */
    raft_uv_set_segment_size(&m->io, TN_META_SEGMENT_BYTES);
    rc = raft_init(&m->raft, &m->io, &m->fsm, o->node_id, m->address);
    if (rc != 0) {
        tn_errbuf(err, errlen, "metastore: %s", raft_errmsg(&m->raft));
        goto fail_io;
    }
    m->raft.data = m;
    /* Every initial node bootstraps the same configuration (index 1 is the
     * same entry everywhere); a joining node has none until the leader
     * adds it. */
    rc = o->join_only ? RAFT_CANTBOOTSTRAP : raft_bootstrap(&m->raft, &conf);
    raft_configuration_close(&conf);
    bool bootstrapped = rc == 0;
    if (rc == 0 && o->npeers == 0) {
        TN_LOG(TN_LOG_NOTICE, "metastore: new cluster bootstrapped with node %llu at %s",
               (unsigned long long)o->node_id, m->address);
    } else if (rc == 0) {
        TN_LOG(TN_LOG_NOTICE,
               "metastore: new cluster bootstrapped with %zu voters (this node %llu at %s)",
               o->npeers, (unsigned long long)o->node_id, m->address);
    } else if (rc != RAFT_CANTBOOTSTRAP) {
        tn_errbuf(err, errlen, "metastore: bootstrap: %s", raft_errmsg(&m->raft));
        goto fail_raft;
    } else if (o->join_only) {
        TN_LOG(TN_LOG_NOTICE, "metastore: node %llu at %s waits to be added to a cluster",
               (unsigned long long)o->node_id, m->address);
    }
    raft_set_election_timeout(&m->raft, m->election_ms);
    raft_set_heartbeat_timeout(&m->raft, heartbeat_ms);
    raft_set_snapshot_threshold(&m->raft, o->snapshot_threshold ? o->snapshot_threshold : 1024);
    raft_set_snapshot_trailing(&m->raft, 128);
    /* Pre-vote (Raft thesis 9.6): a node that was cut off asks whether it
     * could win before it raises its term, so one rejoining does not make
     * a healthy leader step down with its higher term (docs/cluster.md). */
    raft_set_pre_vote(&m->raft, true);
    /* A refused bootstrap (a node that has its state) leaves its text in
     * the errmsg: clear it, so only raft_start's own failure shows. */
    m->raft.errmsg[0] = '\0';
    m->io.errmsg[0] = '\0';
    m->transport.errmsg[0] = '\0';
    /* Before libraft allocates its first segment (room.h: it crashes when
     * that fails). The directory exists by now (raft_init probed it). */
    if (tn_meta_room_check(o->dir, NULL, err, errlen) != 0)
        goto fail_raft;
    rc = raft_start(&m->raft);
    if (rc != 0) {
        /* The first of libraft's messages that says something; for a
         * listener that failed, none does (see explain_listen). */
        const char *msg = raft_errmsg(&m->raft);
        if (msg[0] == '\0')
            msg = m->io.errmsg;
        if (msg[0] == '\0')
            msg = m->transport.errmsg;
        char why[128] = "";
        const char *listen = o->listen != NULL && o->listen[0] != '\0' ? o->listen : m->address;
        if (msg[0] == '\0' && rc == RAFT_IOERR)
            explain_listen(listen, why, sizeof(why));
        if (why[0] != '\0')
            tn_errbuf(err, errlen, "metastore: cannot listen on %s (raft-address): %s", listen,
                      why);
        else
            tn_errbuf(err, errlen, "metastore: start: %s",
                      msg[0] != '\0' ? msg : raft_strerror(rc));
        goto fail_raft;
    }
    if (bootstrapped && o->npeers > 1 && raft_state(&m->raft) == RAFT_FOLLOWER) {
        /* Short election timers until a leader is known. */
        m->first_elections = true;
        first_elections(m);
    }
    m->start_index = raft_last_index(&m->raft);
    uv_timer_start(&m->poll, on_poll, LEADER_POLL_MS, LEADER_POLL_MS);
    *out = m;
    return 0;

fail_raft:
    /* raft_init succeeded: only raft_close releases it, asynchronously. */
    m->closing = true;
    raft_close(&m->raft, on_raft_closed);
    *out = NULL;
    return TN_EFAILED;
fail_io:
    raft_uv_close(&m->io);
    tn_meta_transport_fini(&m->transport);
fail_timer:
    raft_configuration_close(&conf);
    uv_close((uv_handle_t *)&m->poll, on_poll_closed);
    *out = NULL;
    return TN_EFAILED;
}

/* Close libraft only while it writes nothing. raft_close (uvAppendClose)
 * fails the disk appends in flight at once, inside the call, and libraft
 * 0.15 mishandles that: the leader's append callback truncates its
 * in-memory log from each failed append's first index, so with two or
 * more in flight the second truncates past the end of the log
 * (replication.c appendLeaderCb -> logTruncate; an assertion in a debug
 * build of libraft, a corrupted log and a NULL dereference in Debian's);
 * and a write the kernel already had completes into a segment the close
 * abandoned (uv_append.c uvAliveSegmentWriteCb; libuv's uv_poll_stop
 * assertion). Nothing is being written when every proposal of ours has its
 * answer, every entry in the log is stored (last_stored is the last
 * index; it also lags while a follower installs a snapshot) and no
 * snapshot is being taken (a SIGSEGV inside libraft at a stop under ASan,
 * with a stream of writes that takes a snapshot every 1024 entries). settled()
 * and raft_close run in the same timer callback, so no append starts
 * between them, and never inside a libraft callback (tn_meta_close). The
 * wait is bounded: CLOSE_WAIT_POLLS polls of LEADER_POLL_MS; past that
 * libraft is closed anyway, with a warning. */
#define CLOSE_WAIT_POLLS 300

static bool settled(tn_meta_t *m)
{
    /* A snapshot being taken writes too (its put completes later, from
     * libraft's I/O): wait for it as for an append. */
    return m->inflight == 0 && m->raft.last_stored == raft_last_index(&m->raft) &&
           m->raft.snapshot.put.data == NULL && m->raft.snapshot.pending.term == 0;
}

static void on_close_poll(uv_timer_t *t)
{
    tn_meta_t *m = t->data;
#ifdef TN_TEST
    slow_release(m, true);
#endif
    if (++m->close_polls < CLOSE_WAIT_POLLS && !settled(m))
        return;
    if (!settled(m))
        TN_LOG(TN_LOG_WARN,
               "metastore: closing while libraft still writes (%u proposals in flight, log "
               "index %llu, stored %llu)",
               m->inflight, (unsigned long long)raft_last_index(&m->raft),
               (unsigned long long)m->raft.last_stored);
    uv_timer_stop(t);
    if (m->drain_only) {
        /* libraft stays open: the process exits with it (tn_meta_drain). */
        if (m->close_cb != NULL)
            m->close_cb(m->close_arg);
        return;
    }
    raft_close(&m->raft, on_raft_closed);
}

void tn_meta_drain(tn_meta_t *m, void (*cb)(void *arg), void *arg)
{
    if (m->close_started)
        return;
    m->drain_only = true;
    tn_meta_close(m, cb, arg);
}

void tn_meta_close(tn_meta_t *m, void (*cb)(void *arg), void *arg)
{
    if (m->close_started)
        return;
    m->close_started = true;
    m->closing = true; /* perhaps already, by tn_meta_stop */
    m->close_cb = cb;
    m->close_arg = arg;
    fail_waiting(m, TN_ECLOSED);
    uv_timer_stop(&m->poll);
    /* Never raft_close from here: the caller may be inside a libraft
     * callback (a proposal's answer comes from within its disk-write
     * callback, and what the answer sets off may end in a close), and libraft
     * 0.15 asserts when closed under its own write callback
     * (uvAliveSegmentWriteCb finds uv->closing with the segment not being
     * finalized). The timer runs the first check on the next loop pass. */
    uv_timer_start(&m->poll, on_close_poll, 0, LEADER_POLL_MS);
}

void tn_meta_stop(tn_meta_t *m)
{
    if (m->closing)
        return;
    m->closing = true;
    fail_waiting(m, TN_ECLOSED);
    uv_timer_stop(&m->poll);
}

int tn_meta_backup(tn_meta_t *m, tn_buf_t *snap, tn_meta_peer_t **voters, size_t *nvoters,
                   uint64_t *applied)
{
    *voters = NULL;
    *nvoters = 0;
    *applied = raft_last_applied(&m->raft);
    int rc = tn_meta_state_snapshot(&m->state, snap);
    if (rc != 0)
        return rc;
    const struct raft_configuration *conf = &m->raft.configuration;
    if (conf->n == 0)
        return 0;
    tn_meta_peer_t *v = tn_calloc(conf->n, sizeof(*v));
    if (v == NULL)
        return UV_ENOMEM;
    size_t k = 0;
    for (unsigned i = 0; i < conf->n; i++) {
        const struct raft_server *s = &conf->servers[i];
        /* Spares and standbys are not in the restored cluster: a restore
         * starts the voters of the backup, each from its own copy. */
        if (s->role != RAFT_VOTER || s->id == 0 || strlen(s->address) > TN_META_ADDR_MAX)
            continue;
        v[k].id = s->id; /* the member id */
        snprintf(v[k].raft_addr, sizeof(v[k].raft_addr), "%s", s->address);
        k++;
    }
    *voters = v;
    *nvoters = k;
    return 0;
}
