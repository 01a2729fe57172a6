/* A deterministic simulation of replicated partitions: several decision
 * cores (cluster/repl.h), one per node and partition, and a controller
 * applying the metastore's rules (meta/partstate.h) as one linearizable
 * sequence (what the Raft metastore gives), over a seeded fake network and
 * fake disks. Time is a counter in milliseconds; nothing reads a clock.
 *
 * Faults: message drops, delays (so reordering) and duplicates; network
 * partitions (one node cut off, a node cut from the controller only, a
 * random split, a bridge where one node sees two that cannot see each
 * other, one-way links); process kills (written data survives),
 * power losses and failed fsyncs (unflushed data is lost), a wiped disk (a
 * new incarnation) or a flipped byte (a CRC failure when it is read; the
 * replica cuts its log there and reports it) -- one lost copy per schedule,
 * never of the last in-sync one -- and pauses (SIGSTOP) longer or shorter
 * than the session timeout. Producers write to whichever node believes it leads; consumers
 * read from whichever node serves (and does not hold its deliveries).
 *
 * Replica set changes (partstate.h rules 6 to 10, as the metastore and the
 * replica manager apply them), under the same faults:
 *   - moves begun at random by "drivers" (an admin, a decommission, a
 *     self-healing, a rebalance, a factor change): one member replaced
 *     (the leader 40% of the time; a member without a session half of the
 *     time there is one), the list reordered, one member dropped or one
 *     added (from min_insync replicas up to 4 with 5 nodes, 3 with 3); the
 *     metastore leader's scan every MOVE_SCAN_MS completes a move whose
 *     target is in the ISR (handing the leadership over when the leader
 *     leaves) or fails one waiting on a target dead for DEAD_MS, one
 *     command in flight, applied a Raft round later and re-checked (so a
 *     completion's min_insync follows the topic's, state.c part_move);
 *     admins abort moves at random; leaders write stall marks (rule 10:
 *     they bump no epoch and no replica reads them, so they change
 *     nothing a replica keeps);
 *   - with min_insync 1, the topic's min_insync rises to 2 and falls back
 *     (a topic's update: every partition's follows, capped by its
 *     replicas);
 *   - every node's metastore replica gets every state, and its replica
 *     manager the newest one only (meta.c tell_pstates: a state superseded
 *     before it was told is never told); a node the newest state names gets
 *     a core over its copy as found, one it no longer names drops its core
 *     (a leader resigns: its produces fail) and its copy is marked, then
 *     goes to quarantine/ (emptied) a while later or at the next start
 *     unless given back before;
 *   - an old leader about to hand over requeues its leases first (a delay
 *     before the CAS that completes the move) and holds its deliveries
 *     (replica.c propose_isr, hold_deliveries); a fetch to a node with no
 *     replica is answered NOT_LEADER.
 *
 * The checker (every change is checked when it happens, so after every
 * step, and again at the end after a healing phase):
 *   - no offset conflict: one record per (partition, offset) among all
 *     records ever committed (acknowledged, read, or below a node's hw);
 *   - no phantom: what a consumer read stays, at its offset, in every
 *     later leader's log and in the final logs;
 *   - no lost ack: every acknowledged record is in the log of every new
 *     leader when it takes over, and at the end in the log of every ISR
 *     member, below the leader's hw (readable);
 *   - replicas below their hw equal the committed records (so identical,
 *     and without holes);
 *   - at most one node acknowledges per (partition, epoch); a node acks
 *     only in the epoch its records carry, and nothing it acked is missing
 *     from the next leader's log (a fenced leader acks nothing that is
 *     lost);
 *   - no truncation below a follower's hw is ever asked for;
 *   - the controller's states stay whole: a leader is a replica in the
 *     ISR, ISR and ELR members are replicas (a member a move dropped is
 *     never elected), during a move the replicas are the target then the
 *     old ones it drops, and a stall mark bumps no epoch;
 *   - a member joins the ISR only with every committed record flushed (a
 *     new replica caught up in the current epoch; a copy lost since -- a
 *     wipe not yet registered, a CRC failure not yet applied -- excepted);
 *   - after healing no move is under way, and every ISR member holds a
 *     replica.
 *
 * Followers fetch once their copy is written and report its flush
 * (FLUSHED) while that fetch is out, as the shell does.
 *
 * TERN_SIM_SCHEDULES=n runs n schedules per configuration (default 1000,
 * 200 under TERN_SANITIZED;
 * make soak raises it); a failure prints its seed; TERN_SIM_SEED=s (with
 * TERN_SIM_NODES=3|5 and TERN_SIM_MIN_ISR=1|2) replays that schedule exactly, and
 * TERN_SIM_VERBOSE=1 traces it; TERN_SIM_KEEP_GOING=1 prints every failing
 * seed of a run before the test fails. */
#include "core/platform.h"

#include "cluster/repl.h"
#include "core/alloc.h"
#include "core/err.h"
#include "meta/partstate.h"

#include "testutil.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN     5
#define MAXP     2
#define LOGCAP   2048
#define PRODCAP  1700 /* producers stop at this log end */
#define BATCH    8
#define MAXMSG   4096
#define MAXPID   8192
#define MAXEPOCH 4096
#define UNSET    UINT32_MAX
#define CTL      0 /* the controller's endpoint; nodes are 1..n */

/* Timing, in simulated ms. */
#define SESSION_MS   600
#define HB_MS        50
#define LAG_MS       300
#define IDLE_MS      20
#define TIMEOUT_MS   100
#define REBALANCE_MS 500
#define FAULT_MS     4000
#define HEAL_MS      5000
#define MOVE_SCAN_MS 200  /* the metastore leader's scan of moves (meta.c check_moves) */
#define DEAD_MS      1500 /* replace-dead-after: a dead target fails its move */
#define RELEASE_MS   30   /* at most: an old leader requeues its leases before the hand-over */

/* --- the PRNG (splitmix64: one seed, one sequence) -------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(rng_next(s) % n);
}

static bool rng_chance(uint64_t *s, uint32_t per_million)
{
    return rng_below(s, 1000000) < per_million;
}

/* --- the world -------------------------------------------------------------------- */

typedef struct {
    uint32_t epoch;
    uint32_t pid; /* a produce's id, or EPOCH_PID | epoch for an epoch-start record */
    bool bad;     /* a flipped byte: its CRC check fails when it is read */
} rec_t;
#define EPOCH_PID 0x80000000u

typedef struct {
    rec_t r[LOGCAP];
    uint64_t len, flushed; /* [0, flushed) survives a power loss */
    bool needs_repair;     /* durable: a CRC failure not yet reported and applied */
} disk_t;

typedef struct {
    uint32_t p, pid, epoch;
    uint64_t off;
} pending_t;

typedef struct {
    uint32_t id;
    uint64_t inc;
    bool up, paused;
    bool reg_p[MAXP];     /* acts on p's states only after its registration's */
    bool corrupt_p[MAXP]; /* reported a CRC failure, not yet answered */
    /* The replica manager's part_t of p (replica.c on_pstate): a core
     * exists only while the newest state it applied names this node. */
    bool has_core[MAXP];
    uint32_t seen_pe[MAXP]; /* the newest partition epoch it applied (this run) */
    /* Its copy of p, dropped by a move, is marked (durable) and goes to
     * quarantine/ at quarantine_at, or at the next start; given back
     * before, the mark is taken away and the copy followed on. */
    bool dropped[MAXP];
    uint64_t quarantine_at[MAXP];
    /* A leader handing over (replica.c propose_isr, release_leases): the
     * leases requeued before the CAS that completes the move. */
    bool releasing[MAXP], hold_isr[MAXP];
    uint64_t release_at[MAXP], release_for[MAXP], released_move[MAXP];
    uint32_t hold_pe[MAXP];
    uint64_t boot, reg_sent_at;
    uint64_t down_until, pause_until;
    disk_t disk[MAXP];
    tn_repl_t core[MAXP];
    uint64_t checked_hw[MAXP]; /* the checker saw [0, checked_hw) below this core's hw */
    pending_t pend[256];
    uint32_t npend;
} node_t;

enum {
    M_HB,
    M_HB_FENCED,
    M_REG,
    M_STATE,
    M_META,
    M_ALTER,
    M_REFUSED,
    M_FETCH,
    M_FLUSHED, /* a follower's flush report */
    M_RECORDS,
    M_DIVERGING,
    M_FERR,
    M_CORRUPT,
};

enum { MV_NONE, MV_COMPLETE, MV_FAIL };

typedef struct {
    uint64_t at, seq;
    uint32_t from, to, type, p;
    uint64_t inc;
    tn_pstate_t ps;
    tn_repl_fetch_t fetch;
    tn_repl_action_t act;
    bool reg;         /* a state in reply to a registration */
    bool corrupt_ack; /* ... or to a CRC failure report (after applying it) */
    uint64_t boot;    /* REG: which start of the node */
    uint32_t nrec;
    rec_t recs[BATCH];
} msg_t;

typedef struct {
    uint32_t p, off, epoch, node;
} ack_t;

typedef struct {
    uint64_t seed, rng, now, seq;
    uint32_t n, rf, min_isr;
    node_t node[MAXN + 1];
    /* the controller */
    tn_pstate_t ps[MAXP];
    tn_pstate_node_t members[MAXN];
    uint64_t last_hb[MAXN + 1];
    uint64_t boot[MAXN + 1]; /* the start each live session belongs to */
    uint64_t ready_since[MAXP];
    /* the network */
    msg_t *q;
    uint32_t nq;
    bool cut[MAXN + 1][MAXN + 1]; /* from, to */
    uint64_t heal_at;
    bool faults, producing, wiped, flipped;
    /* moves: the topic's min_insync, the most replicas a move asks, the
     * last move id, when each member's session ended, and the metastore
     * leader's PART_MOVE complete or fail in flight (one at a time,
     * re-checked when applied) */
    uint32_t topic_min_isr, max_rf;
    uint64_t move_seq, dead_since[MAXN + 1];
    struct {
        uint32_t kind, p;
        uint64_t id, at;
    } mcmd;
    /* the ledger */
    uint32_t committed[MAXP][LOGCAP];
    ack_t acked[MAXPID];
    uint32_t nacks, npid, nfail, nread;
    uint32_t acker[MAXP][MAXEPOCH];
    uint64_t cursor[MAXP];
    char fail[256];
    bool verbose;
    /* counts over a run */
    uint32_t elections, faults_done, moves_begun, moves_done, moves_aborted;
} sim_t;

static void trace(sim_t *s, const char *fmt, ...) TN_PRINTF(2, 3);
static void trace(sim_t *s, const char *fmt, ...)
{
    if (!s->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("[%6" PRIu64 "] ", s->now);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static void violation(sim_t *s, const char *fmt, ...) TN_PRINTF(2, 3);
static void violation(sim_t *s, const char *fmt, ...)
{
    if (s->fail[0])
        return; /* the first one tells the story */
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(s->fail, sizeof(s->fail), "t=%" PRIu64 ": ", s->now);
    vsnprintf(s->fail + k, sizeof(s->fail) - (size_t)k, fmt, ap);
    va_end(ap);
    trace(s, "VIOLATION %s", s->fail);
}

/* --- the epoch history of a fake log ---------------------------------------------- */

/* The largest epoch <= epoch the log holds and its end offset. tn_epochs
 * (src/storage/epochs.h) provides the same rule from the partition's
 * epochs file; wiring the core to it is the next step. */
static int disk_epoch_end(void *arg, uint32_t epoch, uint32_t *found, uint64_t *end)
{
    const disk_t *d = arg;
    uint32_t f = 0;
    uint64_t i = 0;
    for (; i < d->len && d->r[i].epoch <= epoch; i++)
        f = d->r[i].epoch; /* epochs never decrease along a log */
    *found = f;
    *end = f == 0 ? 0 : i;
    return 0;
}

/* --- the checker ------------------------------------------------------------------ */

static void commit_at(sim_t *s, uint32_t p, uint64_t off, uint32_t pid, const char *why)
{
    if (off >= LOGCAP) {
        violation(s, "p%u offset %" PRIu64 " beyond the log", p, off);
        return;
    }
    uint32_t *c = &s->committed[p][off];
    if (*c == UNSET)
        *c = pid;
    else if (*c != pid)
        violation(s, "offset conflict (%s): p%u@%" PRIu64 " holds %08x, committed %08x", why, p,
                  off, pid, *c);
}

/* The core's hw moved: its log below it is committed. */
static void check_hw(sim_t *s, node_t *nd, uint32_t p)
{
    const tn_repl_t *r = &nd->core[p];
    const disk_t *d = &nd->disk[p];
    if (r->hw > d->len) {
        violation(s, "node %u p%u hw %" PRIu64 " beyond its log end %" PRIu64, nd->id, p, r->hw,
                  d->len);
        return;
    }
    for (uint64_t o = nd->checked_hw[p]; o < r->hw; o++)
        commit_at(s, p, o, d->r[o].pid, "below hw");
    if (r->hw > nd->checked_hw[p])
        nd->checked_hw[p] = r->hw;
}

/* A node takes over p in the controller's newest epoch: every record acked
 * in an earlier epoch, and every committed one, must be in its log. (A node
 * acting on a superseded state is checked by what it then does: it cannot
 * move its hw, so it acks and shows nothing.) */
static void check_new_leader(sim_t *s, node_t *nd, uint32_t p, uint32_t epoch)
{
    const disk_t *d = &nd->disk[p];
    if (epoch != s->ps[p].leader_epoch)
        return;
    for (uint32_t i = 1; i <= s->npid; i++) {
        const ack_t *a = &s->acked[i];
        if (a->node == 0 || a->p != p || a->epoch >= epoch)
            continue;
        if (a->off >= d->len || d->r[a->off].pid != i)
            violation(s,
                      "lost ack: p%u@%u (%08x, acked by node %u in epoch %u) is not in the "
                      "log of node %u, leader of epoch %u",
                      p, a->off, i, a->node, a->epoch, nd->id, epoch);
    }
    for (uint64_t o = 0; o < LOGCAP && s->committed[p][o] != UNSET; o++)
        if (o >= d->len || d->r[o].pid != s->committed[p][o])
            violation(s,
                      "phantom: p%u@%" PRIu64 " (%08x) is not in the log of node %u, leader "
                      "of epoch %u",
                      p, o, s->committed[p][o], nd->id, epoch);
}

static void ack(sim_t *s, node_t *nd, const pending_t *pe)
{
    const disk_t *d = &nd->disk[pe->p];
    if (pe->off >= d->len || d->r[pe->off].pid != pe->pid) {
        violation(s, "node %u acks p%u@%" PRIu64 " (%08x) it does not hold", nd->id, pe->p, pe->off,
                  pe->pid);
        return;
    }
    uint32_t *who = &s->acker[pe->p][pe->epoch % MAXEPOCH];
    if (*who == 0)
        *who = nd->id;
    else if (*who != nd->id)
        violation(s, "two nodes ack in p%u epoch %u: %u and %u", pe->p, pe->epoch, *who, nd->id);
    commit_at(s, pe->p, pe->off, pe->pid, "ack");
    s->acked[pe->pid] = (ack_t){pe->p, (uint32_t)pe->off, pe->epoch, nd->id};
    s->nacks++;
}

/* --- the network ------------------------------------------------------------------ */

static bool link_ok(sim_t *s, uint32_t from, uint32_t to)
{
    return !s->cut[from][to];
}

static void net_send(sim_t *s, msg_t *m)
{
    if (!link_ok(s, m->from, m->to) || rng_chance(&s->rng, 10000))
        return; /* cut or dropped */
    int copies = rng_chance(&s->rng, 5000) ? 2 : 1;
    for (int c = 0; c < copies && s->nq < MAXMSG; c++) {
        m->at = s->now + 1 + rng_below(&s->rng, 15);
        m->seq = s->seq++;
        s->q[s->nq++] = *m;
    }
}

static msg_t *msg_new(msg_t *m, uint32_t type, uint32_t from, uint32_t to, uint32_t p)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->from = from;
    m->to = to;
    m->p = p;
    return m;
}

/* --- a node ----------------------------------------------------------------------- */

static void node_step(sim_t *s, node_t *nd, uint32_t p, const tn_repl_event_t *ev,
                      const msg_t *ctx);

static void feed_log(sim_t *s, node_t *nd, uint32_t p)
{
    if (!nd->has_core[p])
        return;
    const disk_t *d = &nd->disk[p];
    tn_repl_event_t ev = {.type = TN_REPL_EV_LOG, .now = s->now};
    ev.u.log.end = d->len;
    ev.u.log.flushed = d->flushed;
    ev.u.log.last_epoch = d->len ? d->r[d->len - 1].epoch : 0;
    node_step(s, nd, p, &ev, NULL);
}

static void fail_pending(sim_t *s, node_t *nd, uint32_t p)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < nd->npend; i++) {
        if (nd->pend[i].p == p)
            s->nfail++;
        else
            nd->pend[k++] = nd->pend[i];
    }
    nd->npend = k;
}

static void complete_pending(sim_t *s, node_t *nd, uint32_t p, uint64_t hw, bool ok)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < nd->npend; i++) {
        pending_t *pe = &nd->pend[i];
        if (pe->p != p || pe->off >= hw) {
            nd->pend[k++] = *pe;
            continue;
        }
        if (ok)
            ack(s, nd, pe);
        else
            s->nfail++;
    }
    nd->npend = k;
}

static void send_corrupt(sim_t *s, node_t *nd, uint32_t p)
{
    msg_t m;
    msg_new(&m, M_CORRUPT, nd->id, CTL, p);
    m.inc = nd->inc;
    nd->reg_sent_at = s->now;
    net_send(s, &m);
}

/* A fresh core for p (a new part_t, a restart, a restart of the core
 * after a CRC failure): no state, nothing known of the log until fed. */
static void core_init(node_t *nd, uint32_t p)
{
    tn_repl_config_t cfg = {
        .node = nd->id,
        .incarnation = nd->inc,
        .replica_lag_ms = LAG_MS,
        .fetch_idle_ms = IDLE_MS,
        .fetch_timeout_ms = TIMEOUT_MS,
        .epoch_end = disk_epoch_end,
        .epoch_end_arg = &nd->disk[p],
    };
    tn_repl_init(&nd->core[p], &cfg);
    nd->checked_hw[p] = 0;
}

/* The shell's per-partition state that lives with its part_t. */
static void shell_reset(node_t *nd, uint32_t p)
{
    nd->releasing[p] = nd->hold_isr[p] = false;
    nd->release_at[p] = nd->release_for[p] = nd->released_move[p] = 0;
    nd->hold_pe[p] = 0;
}

/* A dropped copy moves to quarantine/: what it held is out of reach. */
static void quarantine(sim_t *s, node_t *nd, uint32_t p)
{
    disk_t *d = &nd->disk[p];
    trace(s, "node %u p%u: dropped copy (%" PRIu64 " records) to quarantine", nd->id, p, d->len);
    d->len = d->flushed = 0;
    d->needs_repair = false;
    nd->dropped[p] = false;
}

/* The state names nd a replica of p and it holds none (a move's target,
 * a copy given back, a restart): a part_t over its copy as found (the
 * mark taken away first; a copy whose move to quarantine/ was under way
 * is gone), its core fed the log, then the state. */
static void replica_add(sim_t *s, node_t *nd, uint32_t p)
{
    if (nd->dropped[p]) {
        trace(s, "node %u p%u: given back", nd->id, p);
        nd->dropped[p] = false;
    }
    nd->has_core[p] = true;
    core_init(nd, p);
    shell_reset(nd, p);
    feed_log(s, nd, p);
}

/* The state no longer names nd (a move dropped it): a leader resigns
 * (its produces waiting for the hw fail), the part_t goes, the copy
 * stays, marked dropped (replica.c part_drop, mark_dropped). */
static void replica_drop(sim_t *s, node_t *nd, uint32_t p)
{
    trace(s, "node %u p%u: dropped (%s)", nd->id, p,
          nd->core[p].role == TN_REPL_LEADER ? "leader" : "follower");
    if (nd->core[p].role == TN_REPL_LEADER)
        fail_pending(s, nd, p);
    nd->has_core[p] = false;
    core_init(nd, p);
    shell_reset(nd, p);
    nd->dropped[p] = true;
    nd->quarantine_at[p] = s->now + 10 + rng_below(&s->rng, 800);
}

/* replica.c hands_over: ps, led by nd, is a move that completes next by
 * handing the leadership away: nd is not in the target and every target
 * member is in isr[0..nisr). */
static bool hands_over(const node_t *nd, const tn_pstate_t *ps, const tn_pstate_member_t *isr,
                       uint32_t nisr)
{
    if (ps->leader != nd->id || ps->ntarget == 0)
        return false;
    for (uint32_t i = 0; i < ps->ntarget; i++) {
        bool in = false;
        for (uint32_t j = 0; j < nisr; j++)
            in |= isr[j].node == ps->target[i];
        if (ps->target[i] == nd->id || !in)
            return false;
    }
    return true;
}

/* replica.c hold_deliveries: whether nd holds p's deliveries. */
static bool holds(const node_t *nd, uint32_t p)
{
    const tn_pstate_t *ps = &nd->core[p].ps;
    bool requeued = ps->ntarget > 0 && (nd->releasing[p] || nd->released_move[p] == ps->move_id);
    return ps->leader != nd->id || nd->hold_isr[p] || requeued ||
           hands_over(nd, ps, ps->isr, ps->nisr);
}

/* A read of p at off failed its CRC check: the shell drops the log from
 * there (it re-fetches it from a clean leader), restarts the core from the
 * log as found, and reports the failure; until the controller answered
 * (the replica out of the ISR and elections, a leader replaced) the core
 * acts on no state. Returns whether the record was bad. */
static bool crc_check(sim_t *s, node_t *nd, uint32_t p, uint64_t off)
{
    disk_t *d = &nd->disk[p];
    if (off >= d->len || !d->r[off].bad)
        return false;
    trace(s, "node %u p%u: CRC failure at %" PRIu64 ", log cut there", nd->id, p, off);
    d->needs_repair = true; /* recorded before the log is cut */
    d->len = off;
    if (d->flushed > off)
        d->flushed = off;
    if (nd->core[p].role == TN_REPL_LEADER)
        fail_pending(s, nd, p);
    core_init(nd, p);
    nd->reg_p[p] = false;
    nd->corrupt_p[p] = true;
    feed_log(s, nd, p);
    send_corrupt(s, nd, p);
    return true;
}

static void do_actions(sim_t *s, node_t *nd, uint32_t p, const tn_repl_actions_t *acts,
                       const msg_t *ctx)
{
    disk_t *d = &nd->disk[p];
    tn_repl_t *r = &nd->core[p];
    msg_t m;
    for (uint32_t i = 0; i < acts->n; i++) {
        const tn_repl_action_t *a = &acts->a[i];
        switch (a->type) {
        case TN_REPL_ACT_APPEND_EPOCH_START:
            trace(s, "node %u leads p%u epoch %u from %" PRIu64, nd->id, p, a->epoch, a->offset);
            s->elections++;
            check_new_leader(s, nd, p, a->epoch);
            if (d->len >= LOGCAP) {
                violation(s, "log full");
                break;
            }
            d->r[d->len++] = (rec_t){a->epoch, EPOCH_PID | a->epoch, false};
            feed_log(s, nd, p);
            break;
        case TN_REPL_ACT_ANSWER_RECORDS:
            msg_new(&m, M_RECORDS, nd->id, a->node, p);
            m.act = *a;
            for (uint64_t o = a->offset; o < d->len && m.nrec < BATCH; o++) {
                if (crc_check(s, nd, p, o))
                    return; /* the core was restarted: the rest is moot */
                m.recs[m.nrec++] = d->r[o];
            }
            net_send(s, &m);
            break;
        case TN_REPL_ACT_ANSWER_DIVERGING:
            msg_new(&m, M_DIVERGING, nd->id, a->node, p);
            m.act = *a;
            m.act.leader_epoch = r->ps.leader_epoch;
            net_send(s, &m);
            break;
        case TN_REPL_ACT_ANSWER_ERROR:
            msg_new(&m, M_FERR, nd->id, a->node, p);
            m.act = *a;
            net_send(s, &m);
            break;
        case TN_REPL_ACT_PROPOSE_ISR: {
            /* replica.c propose_isr: the CAS that lets a move complete by
             * handing the leadership away waits for the leases' requeue
             * (the core proposes again after its timeout), then holds
             * deliveries until a newer state. */
            bool adds = false;
            for (uint32_t k = 0; k < a->nisr; k++)
                adds |= tn_pstate_isr_find(&r->ps, a->isr[k].node) < 0;
            bool handing = adds && hands_over(nd, &r->ps, a->isr, a->nisr);
            if (nd->releasing[p])
                break;
            if (handing && nd->released_move[p] != r->ps.move_id) {
                nd->releasing[p] = true;
                nd->release_for[p] = r->ps.move_id;
                nd->release_at[p] = s->now + 1 + rng_below(&s->rng, RELEASE_MS);
                break;
            }
            if (handing) {
                nd->hold_isr[p] = true;
                nd->hold_pe[p] = a->expected_pe;
            }
            msg_new(&m, M_ALTER, nd->id, CTL, p);
            m.act = *a;
            net_send(s, &m);
            break;
        }
        case TN_REPL_ACT_HW:
            complete_pending(s, nd, p, a->offset, a->acks_ok);
            break;
        case TN_REPL_ACT_RESIGN:
            fail_pending(s, nd, p);
            break;
        case TN_REPL_ACT_FETCH:
            msg_new(&m, M_FETCH, nd->id, a->node, p);
            m.fetch = a->fetch;
            net_send(s, &m);
            break;
        case TN_REPL_ACT_REPORT:
            msg_new(&m, M_FLUSHED, nd->id, a->node, p);
            m.fetch = a->fetch;
            net_send(s, &m);
            break;
        case TN_REPL_ACT_APPEND:
            if (ctx == NULL || a->offset != d->len || a->count > ctx->nrec ||
                d->len + a->count > LOGCAP) {
                violation(s, "node %u p%u: bad append at %" PRIu64, nd->id, p, a->offset);
                break;
            }
            for (uint64_t k = 0; k < a->count; k++)
                d->r[d->len++] = ctx->recs[k];
            feed_log(s, nd, p);
            break;
        case TN_REPL_ACT_TRUNCATE:
            trace(s, "node %u truncates p%u %" PRIu64 " -> %" PRIu64, nd->id, p, d->len, a->offset);
            if (a->offset < d->len)
                d->len = a->offset;
            if (d->flushed > d->len)
                d->flushed = d->len;
            feed_log(s, nd, p);
            break;
        case TN_REPL_ACT_TRUNCATE_REFUSED:
            violation(s, "node %u p%u: truncation to %" PRIu64 " below its hw %" PRIu64, nd->id, p,
                      a->offset, a->hw);
            break;
        case TN_REPL_ACT_REFRESH:
            net_send(s, msg_new(&m, M_META, nd->id, CTL, p));
            break;
        case TN_REPL_ACT_RESET:
            /* No simulated log has retention: every history starts at 0,
             * so a reset (a DIVERGING with no epoch in common) empties
             * the log. Past 0 only an OUT_OF_RANGE answer asks one, which
             * no simulated leader gives. */
            trace(s, "node %u resets p%u %" PRIu64 " -> %" PRIu64, nd->id, p, d->len, a->offset);
            if (a->offset != 0) {
                violation(s, "node %u p%u: reset to %" PRIu64 " with no retention", nd->id, p,
                          a->offset);
                break;
            }
            d->len = 0;
            d->flushed = 0;
            feed_log(s, nd, p);
            break;
        case TN_REPL_ACT_SKIP:
            /* Only a GAP answer asks one, and no simulated log has gaps. */
            violation(s, "node %u p%u: skip to %" PRIu64 " with no gap", nd->id, p, a->offset);
            break;
        }
    }
}

static void node_step(sim_t *s, node_t *nd, uint32_t p, const tn_repl_event_t *ev, const msg_t *ctx)
{
    tn_repl_actions_t acts;
    tn_repl_step(&nd->core[p], ev, &acts);
    do_actions(s, nd, p, &acts, ctx);
    check_hw(s, nd, p);
}

static void send_reg(sim_t *s, node_t *nd)
{
    msg_t m;
    msg_new(&m, M_REG, nd->id, CTL, 0);
    m.inc = nd->inc;
    m.boot = nd->boot;
    nd->reg_sent_at = s->now;
    net_send(s, &m);
}

static void node_start(sim_t *s, node_t *nd)
{
    nd->up = true;
    nd->paused = false;
    nd->npend = 0;
    for (uint32_t p = 0; p < MAXP; p++) {
        /* Recovery syncs what the log holds before it serves. */
        nd->disk[p].flushed = nd->disk[p].len;
        /* Cores come with the registration's answer (replica.c:
         * meta_current), over the copies as found. */
        nd->has_core[p] = false;
        nd->seen_pe[p] = 0;
        core_init(nd, p);
        shell_reset(nd, p);
        /* A marked copy moves to quarantine/ before recovery; a mark the
         * crash beat is made once the metastore is current (mark_sweep). */
        if (nd->dropped[p] && rng_chance(&s->rng, 700000))
            quarantine(s, nd, p);
        else if (nd->dropped[p])
            nd->quarantine_at[p] = s->now + 10 + rng_below(&s->rng, 800);
        nd->corrupt_p[p] = nd->disk[p].needs_repair;
    }
    nd->boot++;
    for (uint32_t p = 0; p < MAXP; p++) { /* recovery reads the whole log */
        for (uint64_t o = 0; o < nd->disk[p].len; o++)
            if (crc_check(s, nd, p, o))
                break;
        if (nd->corrupt_p[p])
            send_corrupt(s, nd, p); /* a report the crash interrupted */
    }
    send_reg(s, nd);
}

/* kind: 0 kill (written data survives), 1 power loss or failed fsync, 2 wiped disk */
static void node_down(sim_t *s, node_t *nd, int kind, uint64_t for_ms)
{
    trace(s, "node %u down (%s) for %" PRIu64 " ms", nd->id,
          kind == 0   ? "kill"
          : kind == 1 ? "power"
                      : "wipe",
          for_ms);
    nd->up = false;
    memset(nd->reg_p, 0, sizeof(nd->reg_p));
    nd->down_until = s->now + for_ms;
    /* Its connections die with it: nothing in flight to or from it arrives. */
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->nq; i++)
        if (s->q[i].to != nd->id && s->q[i].from != nd->id)
            s->q[k++] = s->q[i];
    s->nq = k;
    s->nfail += nd->npend; /* unknown outcome */
    nd->npend = 0;
    for (uint32_t p = 0; p < MAXP; p++) {
        if (kind >= 1)
            nd->disk[p].len = nd->disk[p].flushed;
        if (kind == 2) {
            nd->disk[p].len = nd->disk[p].flushed = 0;
            nd->disk[p].needs_repair = false;
            nd->dropped[p] = false;
        }
    }
    if (kind == 2)
        nd->inc = rng_next(&s->rng) | 1;
}

static void node_tick(sim_t *s, node_t *nd)
{
    msg_t m;
    bool registered = true;
    for (uint32_t p = 0; p < MAXP; p++)
        registered &= nd->reg_p[p];
    if (!registered && s->now >= nd->reg_sent_at + TIMEOUT_MS) {
        send_reg(s, nd);
        for (uint32_t p = 0; p < MAXP; p++)
            if (nd->corrupt_p[p])
                send_corrupt(s, nd, p);
    }
    /* States pushed by the controller can be lost: the shell polls too. */
    for (uint32_t p = 0; p < MAXP && s->now % 250 == nd->id % 250; p++)
        net_send(s, msg_new(&m, M_META, nd->id, CTL, p));
    if (s->now % HB_MS == nd->id % HB_MS) {
        msg_new(&m, M_HB, nd->id, CTL, 0);
        m.inc = nd->inc;
        net_send(s, &m);
    }
    for (uint32_t p = 0; p < MAXP && nd->up; p++) {
        disk_t *d = &nd->disk[p];
        if (nd->dropped[p] && s->now >= nd->quarantine_at[p])
            quarantine(s, nd, p);
        if (nd->releasing[p] && s->now >= nd->release_at[p]) {
            nd->releasing[p] = false;
            nd->released_move[p] = nd->release_for[p];
        }
        if (d->flushed < d->len && rng_chance(&s->rng, 400000)) {
            if (s->faults && rng_chance(&s->rng, 1500)) {
                node_down(s, nd, 1, 50 + rng_below(&s->rng, 1000)); /* fsync failed */
                return;
            }
            d->flushed = d->len;
            feed_log(s, nd, p);
        }
        if (!nd->has_core[p])
            continue;
        tn_repl_event_t ev = {.type = TN_REPL_EV_TICK, .now = s->now};
        node_step(s, nd, p, &ev, NULL);
    }
}

static bool is_replica(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == node)
            return true;
    return false;
}

/* A state newer than any this node applied (replica.c on_pstate): a
 * part_t is made when it names the node, dropped when it no longer does;
 * a copy of a partition that does not name it is marked dropped. */
static void apply_membership(sim_t *s, node_t *nd, uint32_t p, const tn_pstate_t *ps)
{
    if (ps->partition_epoch < nd->seen_pe[p])
        return;
    nd->seen_pe[p] = ps->partition_epoch;
    bool named = is_replica(ps, nd->id);
    if (named && !nd->has_core[p])
        replica_add(s, nd, p);
    else if (!named && nd->has_core[p])
        replica_drop(s, nd, p);
    else if (!named && !nd->dropped[p] && nd->disk[p].len > 0) {
        nd->dropped[p] = true;
        nd->quarantine_at[p] = s->now + 10 + rng_below(&s->rng, 800);
    }
}

static void node_receive(sim_t *s, node_t *nd, const msg_t *m)
{
    tn_repl_event_t ev = {.now = s->now};
    switch (m->type) {
    case M_HB_FENCED:
        nd->boot++; /* a new session */
        send_reg(s, nd);
        return;
    case M_STATE:
        /* A restarted node must not act on a state applied before its
         * registration fenced its previous session (it might name it the
         * leader of an epoch whose records it lost). */
        if (!nd->reg_p[m->p] && !m->reg)
            return;
        if (nd->corrupt_p[m->p] && !m->corrupt_ack)
            return; /* a registration's answer, but not yet the CRC report's */
        nd->reg_p[m->p] = true;
        if (m->corrupt_ack)
            nd->disk[m->p].needs_repair = nd->corrupt_p[m->p] = false;
        apply_membership(s, nd, m->p, &m->ps);
        if (!nd->has_core[m->p])
            return;
        if (nd->hold_isr[m->p] && m->ps.partition_epoch > nd->hold_pe[m->p])
            nd->hold_isr[m->p] = false;
        if (m->ps.partition_epoch > nd->core[m->p].ps.partition_epoch)
            trace(s, "node %u p%u applies pe %u", nd->id, m->p, m->ps.partition_epoch);
        ev.type = TN_REPL_EV_STATE;
        ev.u.state = &m->ps;
        break;
    case M_REFUSED:
        nd->hold_isr[m->p] = false;
        ev.type = TN_REPL_EV_ISR_REFUSED;
        ev.u.refused.partition_epoch = m->act.expected_pe;
        break;
    case M_FETCH:
        ev.type = TN_REPL_EV_FETCH;
        ev.u.fetch = m->fetch;
        break;
    case M_FLUSHED:
        ev.type = TN_REPL_EV_FLUSHED;
        ev.u.fetch = m->fetch;
        break;
    case M_RECORDS:
        ev.type = TN_REPL_EV_RECORDS;
        ev.u.records.leader_epoch = m->act.epoch;
        ev.u.records.from = m->act.offset;
        ev.u.records.count = m->nrec;
        ev.u.records.hw = m->act.hw;
        break;
    case M_DIVERGING:
        ev.type = TN_REPL_EV_DIVERGING;
        ev.u.diverging.leader_epoch = m->act.leader_epoch;
        ev.u.diverging.epoch = m->act.epoch;
        ev.u.diverging.end_offset = m->act.offset;
        ev.u.diverging.fetch_offset = m->act.count;
        ev.u.diverging.last_fetched_epoch = m->act.last_fetched_epoch;
        trace(s,
              "node %u p%u DIVERGING(%u, %" PRIu64 ") for fetch at %" PRIu64 ", its end %" PRIu64
              " last epoch %u hw %" PRIu64,
              nd->id, m->p, m->act.epoch, m->act.offset, m->act.count, nd->disk[m->p].len,
              nd->core[m->p].last_epoch, nd->core[m->p].hw);
        break;
    case M_FERR:
        ev.type = TN_REPL_EV_FETCH_ERROR;
        ev.u.error.leader_epoch = nd->core[m->p].ps.leader_epoch;
        ev.u.error.err = m->act.err;
        break;
    default:
        return;
    }
    if (!nd->has_core[m->p]) {
        /* No part_t here: a fetch is answered NOT_LEADER (the follower
         * reads its state again), anything else is dropped. */
        if (m->type == M_FETCH) {
            msg_t r;
            msg_new(&r, M_FERR, nd->id, m->from, m->p);
            r.act.err = TN_EREMOTE;
            net_send(s, &r);
        }
        return;
    }
    node_step(s, nd, m->p, &ev, m);
}

/* --- the controller --------------------------------------------------------------- */

static tn_pstate_nodes_t members(sim_t *s)
{
    return (tn_pstate_nodes_t){s->members, s->n};
}

/* The controller's rules keep a partition state whole: checked after
 * every change (partstate.h's invariants that a move touches). */
static void check_pstate(sim_t *s, uint32_t p)
{
    const tn_pstate_t *ps = &s->ps[p];
    if (ps->leader != TN_PSTATE_NONE &&
        (!is_replica(ps, ps->leader) || tn_pstate_isr_find(ps, ps->leader) < 0))
        violation(s, "p%u: leader %u is not a replica in the ISR (epoch %u)", p, ps->leader,
                  ps->leader_epoch);
    for (uint32_t k = 0; k < ps->nisr + ps->nelr; k++) {
        uint32_t node = k < ps->nisr ? ps->isr[k].node : ps->elr[k - ps->nisr].node;
        if (!is_replica(ps, node))
            violation(s, "p%u: ISR or ELR member %u is not a replica", p, node);
    }
    if (ps->ntarget == 0)
        return;
    uint32_t k = 0;
    bool ok = ps->ntarget <= ps->nreplicas &&
              memcmp(ps->target, ps->replicas, ps->ntarget * sizeof(ps->target[0])) == 0;
    for (uint32_t i = 0; ok && i < ps->nold; i++) {
        bool in_target = false;
        for (uint32_t j = 0; j < ps->ntarget; j++)
            in_target |= ps->target[j] == ps->old[i];
        if (!in_target)
            ok = ps->ntarget + k < ps->nreplicas && ps->replicas[ps->ntarget + k++] == ps->old[i];
    }
    if (!ok || ps->ntarget + k != ps->nreplicas)
        violation(s, "p%u: during move %" PRIu64 " the replicas are not the target then the old", p,
                  ps->move_id);
}

static void push_state(sim_t *s, uint32_t p)
{
    msg_t m;
    check_pstate(s, p);
    if (s->verbose) {
        const tn_pstate_t *ps = &s->ps[p];
        char isr[128] = "";
        for (uint32_t k = 0; k < ps->nisr; k++) {
            size_t l = strlen(isr);
            snprintf(isr + l, sizeof(isr) - l, " %u%s", ps->isr[k].node,
                     s->members[ps->isr[k].node - 1].incarnation == ps->isr[k].incarnation
                         ? ""
                         : "(stale)");
        }
        char elr[64] = "";
        for (uint32_t k = 0; k < ps->nelr; k++) {
            size_t l = strlen(elr);
            snprintf(elr + l, sizeof(elr) - l, " %u", ps->elr[k].node);
        }
        char rep[64] = "";
        for (uint32_t k = 0; k < ps->nreplicas; k++) {
            size_t l = strlen(rep);
            snprintf(rep + l, sizeof(rep) - l, " %u", ps->replicas[k]);
        }
        trace(s, "p%u: leader %u epoch %u pe %u replicas [%s ] isr [%s ] elr [%s ]%s", p,
              ps->leader, ps->leader_epoch, ps->partition_epoch, rep, isr, elr,
              ps->ntarget ? " (moving)" : "");
    }
    /* Every node's metastore replica applies every state, and tells its
     * replica manager at its tick the state as it is then (meta.c
     * tell_pstates): a state not told yet is told no more. */
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->nq; i++) {
        const msg_t *q = &s->q[i];
        if (q->type != M_STATE || q->p != p || q->reg || q->corrupt_ack)
            s->q[k++] = *q;
    }
    s->nq = k;
    for (uint32_t i = 1; i <= s->n; i++) {
        msg_new(&m, M_STATE, CTL, i, p);
        m.ps = s->ps[p];
        net_send(s, &m);
    }
}

/* The leader's CAS added member m to p's ISR: m's copy must hold every
 * committed record, flushed (it caught up in this epoch). Not a copy lost
 * since (a wiped disk whose new incarnation the controller has not seen,
 * a CRC failure not yet applied): the one lost copy a schedule allows. */
static void check_isr_add(sim_t *s, uint32_t p, const tn_pstate_member_t *m)
{
    const node_t *nd = &s->node[m->node];
    const disk_t *d = &nd->disk[p];
    if (nd->inc != m->incarnation || d->needs_repair || nd->corrupt_p[p])
        return;
    for (uint64_t o = 0; o < LOGCAP && s->committed[p][o] != UNSET; o++) {
        if (o >= d->flushed || d->r[o].pid != s->committed[p][o]) {
            violation(s,
                      "node %u joins p%u's ISR (epoch %u) without committed p%u@%" PRIu64
                      " (%08x; its log %" PRIu64 ", flushed %" PRIu64 ")",
                      m->node, p, s->ps[p].leader_epoch, p, o, s->committed[p][o], d->len,
                      d->flushed);
            return;
        }
    }
}

static void ctl_fence(sim_t *s, uint32_t node)
{
    tn_pstate_node_t *mb = &s->members[node - 1];
    if (mb->live)
        s->dead_since[node] = s->now;
    mb->live = false;
    tn_pstate_nodes_t v = members(s);
    trace(s, "controller fences node %u", node);
    for (uint32_t p = 0; p < MAXP; p++)
        if (tn_pstate_fence(&s->ps[p], node, mb->incarnation, &v))
            push_state(s, p);
}

static void ctl_receive(sim_t *s, const msg_t *m)
{
    tn_pstate_node_t *mb = &s->members[m->from - 1];
    tn_pstate_nodes_t v = members(s);
    msg_t r;
    switch (m->type) {
    case M_REG:
        /* The previous session of a restarted node, or the previous
         * incarnation of a wiped one (live or not: it may still lead). */
        if ((mb->live && s->boot[m->from] != m->boot) || mb->incarnation != m->inc)
            ctl_fence(s, m->from);
        s->boot[m->from] = m->boot;
        mb->incarnation = m->inc;
        mb->live = true;
        s->last_hb[m->from] = s->now;
        for (uint32_t p = 0; p < MAXP; p++) {
            if (tn_pstate_elect(&s->ps[p], &v))
                push_state(s, p);
            msg_new(&r, M_STATE, CTL, m->from, p);
            r.ps = s->ps[p];
            r.reg = true;
            net_send(s, &r);
        }
        return;
    case M_HB:
        if (mb->live && mb->incarnation == m->inc)
            s->last_hb[m->from] = s->now;
        else
            net_send(s, msg_new(&r, M_HB_FENCED, CTL, m->from, 0));
        return;
    case M_CORRUPT:
        if (mb->incarnation != m->inc)
            return;
        if (tn_pstate_mark_corrupt(&s->ps[m->p], m->from, &v)) {
            trace(s, "controller: node %u p%u has a CRC failure", m->from, m->p);
            push_state(s, m->p);
        }
        msg_new(&r, M_STATE, CTL, m->from, m->p);
        r.ps = s->ps[m->p];
        r.reg = r.corrupt_ack = true;
        net_send(s, &r);
        return;
    case M_META:
        msg_new(&r, M_STATE, CTL, m->from, m->p);
        r.ps = s->ps[m->p];
        net_send(s, &r);
        return;
    case M_ALTER: {
        char err[128];
        tn_pstate_t was = s->ps[m->p];
        int rc = tn_pstate_alter_isr(&s->ps[m->p], m->from, m->act.leader_epoch, m->act.expected_pe,
                                     m->act.isr, m->act.nisr, &v, err, sizeof(err));
        if (rc == 0) {
            trace(s, "p%u ISR now %u members (pe %u) by node %u", m->p, s->ps[m->p].nisr,
                  s->ps[m->p].partition_epoch, m->from);
            for (uint32_t k = 0; k < s->ps[m->p].nisr; k++)
                if (tn_pstate_isr_find(&was, s->ps[m->p].isr[k].node) < 0)
                    check_isr_add(s, m->p, &s->ps[m->p].isr[k]);
            push_state(s, m->p);
        } else {
            msg_new(&r, M_REFUSED, CTL, m->from, m->p);
            r.act.expected_pe = s->ps[m->p].partition_epoch;
            net_send(s, &r);
        }
        return;
    }
    default:
        return;
    }
}

/* --- the controller: moves --------------------------------------------------------- */

static void trace_list(sim_t *s, char *buf, size_t len, const uint32_t *v, uint32_t n)
{
    (void)s;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, len - l, " %u", v[i]);
    }
}

/* A new replica list for p, as an admin, a decommission, a self-healing
 * (a dead member replaced), a rebalance or a factor change might ask:
 * one member replaced (the leader sometimes), the list reordered, one
 * dropped or one added. PART_MOVE begin, applied at once. */
static void move_begin(sim_t *s, uint32_t p)
{
    tn_pstate_t *ps = &s->ps[p];
    uint32_t n = ps->nreplicas, nt = n, t[TN_PSTATE_MAX_REPLICAS];
    memcpy(t, ps->replicas, n * sizeof(t[0]));
    uint32_t spare[MAXN], nspare = 0;
    for (uint32_t i = 1; i <= s->n; i++)
        if (!is_replica(ps, i) && s->members[i - 1].live)
            spare[nspare++] = i;
    uint32_t victim = rng_below(&s->rng, n);
    for (uint32_t k = 0; k < n; k++) {
        if (t[k] == ps->leader && rng_chance(&s->rng, 400000))
            victim = k;
        if (!s->members[t[k] - 1].live && rng_chance(&s->rng, 500000))
            victim = k; /* self-healing replaces a dead member */
    }
    switch (rng_below(&s->rng, 4)) {
    case 0: /* replace one */
        if (nspare == 0)
            return;
        t[victim] = spare[rng_below(&s->rng, nspare)];
        break;
    case 1: /* another order (the preferred leader) */
        for (uint32_t k = n - 1; k > 0; k--) {
            uint32_t j = rng_below(&s->rng, k + 1), x = t[k];
            t[k] = t[j];
            t[j] = x;
        }
        break;
    case 2: /* one fewer */
        if (n <= ps->min_insync || n <= 1)
            return;
        memmove(&t[victim], &t[victim + 1], (n - victim - 1) * sizeof(t[0]));
        nt--;
        break;
    default: /* one more */
        if (n >= s->max_rf || nspare == 0)
            return;
        t[nt++] = spare[rng_below(&s->rng, nspare)];
        if (rng_chance(&s->rng, 500000)) {
            uint32_t j = rng_below(&s->rng, nt), x = t[nt - 1];
            t[nt - 1] = t[j];
            t[j] = x;
        }
        break;
    }
    tn_pstate_nodes_t v = members(s);
    char err[160], from[48], to[48];
    trace_list(s, from, sizeof(from), ps->replicas, ps->nreplicas);
    if (tn_pstate_move_begin(ps, t, nt, ++s->move_seq, (int64_t)s->now, &v, err, sizeof(err)) != 0)
        return;
    trace_list(s, to, sizeof(to), t, nt);
    trace(s, "p%u: move %" PRIu64 " begins: [%s ] -> [%s ]", p, s->move_seq, from, to);
    s->moves_begun++;
    push_state(s, p);
}

/* The partition leader's stall marks (partstate.h rule 10): where each
 * target member's copy stands. They bump no epoch and reach no replica's
 * rules: a mark changes nothing a replica keeps. (The leader's view is
 * read directly; the proposal's path is not what is under test.) */
static void move_mark(sim_t *s, uint32_t p)
{
    tn_pstate_t *ps = &s->ps[p];
    if (ps->leader == TN_PSTATE_NONE)
        return;
    const tn_repl_t *lr = &s->node[ps->leader].core[p];
    tn_pstate_mark_t mk[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < ps->ntarget; i++)
        for (uint32_t k = 0; k < lr->ps.nreplicas; k++)
            if (lr->peers[k].node == ps->target[i] && lr->peers[k].seen)
                mk[n++] = (tn_pstate_mark_t){ps->target[i], lr->peers[k].end, (int64_t)s->now};
    uint32_t pe = ps->partition_epoch;
    if (tn_pstate_move_mark(ps, ps->move_id, mk, n) == 0 && ps->partition_epoch != pe)
        violation(s, "p%u: a move mark bumped the partition epoch", p);
}

/* The metastore leader's PART_MOVE complete or fail, applied now
 * (partstate.h rules 7 to 9, re-checked; state.c part_move: a completed
 * move's min_insync becomes the topic's, capped by its replicas). */
static void move_apply(sim_t *s)
{
    uint32_t p = s->mcmd.p;
    tn_pstate_t *ps = &s->ps[p];
    tn_pstate_nodes_t v = members(s);
    char err[160];
    int rc;
    if (s->mcmd.kind == MV_COMPLETE) {
        rc = tn_pstate_move_complete(ps, s->mcmd.id, &v, err, sizeof(err));
        uint32_t want = s->topic_min_isr < ps->nreplicas ? s->topic_min_isr : ps->nreplicas;
        if (rc == 0 && ps->min_insync != want && ps->nisr >= want)
            ps->min_insync = want;
    } else {
        rc = tn_pstate_move_abort(ps, s->mcmd.id, &v, err, sizeof(err));
    }
    uint32_t kind = s->mcmd.kind;
    s->mcmd.kind = MV_NONE;
    if (rc != 0)
        return;
    trace(s, "p%u: move %" PRIu64 " %s", p, s->mcmd.id,
          kind == MV_COMPLETE ? "completes" : "fails (a target dead)");
    if (kind == MV_COMPLETE)
        s->moves_done++;
    else
        s->moves_aborted++;
    push_state(s, p);
}

/* An admin changes the topic's min_insync_replicas (state.c: TOPIC
 * update, pstates_min_insync): every partition's becomes it, capped by
 * its replicas (during a move, by the smaller of the target and the old
 * list). */
static void topic_min_insync(sim_t *s, uint32_t min_isr)
{
    s->topic_min_isr = min_isr;
    trace(s, "topic min_insync now %u", min_isr);
    for (uint32_t p = 0; p < MAXP; p++) {
        tn_pstate_t *ps = &s->ps[p];
        uint32_t cap =
            ps->ntarget > 0 ? (ps->ntarget < ps->nold ? ps->ntarget : ps->nold) : ps->nreplicas;
        uint32_t want = min_isr < cap ? min_isr : cap;
        if (ps->min_insync == want)
            continue;
        ps->min_insync = want;
        ps->partition_epoch++;
        push_state(s, p);
    }
}

static void ctl_moves(sim_t *s)
{
    tn_pstate_nodes_t v = members(s);
    char err[160];
    if (s->mcmd.kind != MV_NONE && s->now >= s->mcmd.at)
        move_apply(s);
    for (uint32_t p = 0; p < MAXP; p++) {
        tn_pstate_t *ps = &s->ps[p];
        if (ps->ntarget == 0) {
            if (s->faults && rng_chance(&s->rng, 30000))
                move_begin(s, p);
            continue;
        }
        /* An admin's abort, or the leader's fail of a stalled copy. */
        if (s->faults && rng_chance(&s->rng, 3000) &&
            tn_pstate_move_abort(ps, ps->move_id, &v, err, sizeof(err)) == 0) {
            trace(s, "p%u: move aborted", p);
            s->moves_aborted++;
            push_state(s, p);
            continue;
        }
        if (rng_chance(&s->rng, 20000))
            move_mark(s, p);
    }
    if (s->mcmd.kind != MV_NONE || s->now % MOVE_SCAN_MS != 0)
        return;
    /* meta.c check_moves: the first move ready to complete, or the first
     * that waits on a target dead past replace-dead-after (fail). */
    for (uint32_t p = 0; p < MAXP; p++) {
        const tn_pstate_t *ps = &s->ps[p];
        if (ps->ntarget == 0)
            continue;
        tn_pstate_t copy = *ps;
        uint32_t kind = MV_NONE;
        if (!tn_pstate_move_ready(ps)) {
            uint32_t gone[TN_PSTATE_MAX_REPLICAS];
            size_t ngone = 0;
            for (uint32_t i = 0; i < ps->ntarget; i++) {
                uint32_t t = ps->target[i];
                if (!s->members[t - 1].live && s->now >= s->dead_since[t] + DEAD_MS)
                    gone[ngone++] = t;
            }
            if (tn_pstate_move_blocked(ps, gone, ngone) != TN_PSTATE_NONE &&
                tn_pstate_move_abort(&copy, ps->move_id, &v, err, sizeof(err)) == 0)
                kind = MV_FAIL;
        } else if (tn_pstate_move_complete(&copy, ps->move_id, &v, err, sizeof(err)) == 0) {
            kind = MV_COMPLETE;
        }
        if (kind != MV_NONE) {
            s->mcmd.kind = kind;
            s->mcmd.p = p;
            s->mcmd.id = ps->move_id;
            s->mcmd.at = s->now + 1 + rng_below(&s->rng, 20); /* a Raft round */
            return;
        }
    }
}

static void ctl_tick(sim_t *s)
{
    ctl_moves(s);
    /* min_insync 1 promises one copy only: there it may rise to 2 and
     * fall back (where disk faults would break a promise of two, never). */
    if (s->min_isr == 1 && s->faults && rng_chance(&s->rng, 5000))
        topic_min_insync(s, s->topic_min_isr == 1 ? 2 : 1);
    for (uint32_t i = 1; i <= s->n; i++)
        if (s->members[i - 1].live && s->now > s->last_hb[i] + SESSION_MS)
            ctl_fence(s, i);
    tn_pstate_nodes_t v = members(s);
    for (uint32_t p = 0; p < MAXP; p++) {
        if (!tn_pstate_preferred_ready(&s->ps[p], &v)) {
            s->ready_since[p] = 0;
        } else if (s->ready_since[p] == 0) {
            s->ready_since[p] = s->now;
        } else if (s->now >= s->ready_since[p] + REBALANCE_MS) {
            if (tn_pstate_rebalance(&s->ps[p], &v) == 0) {
                trace(s, "p%u back to its preferred leader", p);
                push_state(s, p);
            }
            s->ready_since[p] = 0;
        }
    }
}

/* --- producers, consumers, faults ------------------------------------------------- */

static void produce(sim_t *s)
{
    node_t *nd = &s->node[1 + rng_below(&s->rng, s->n)];
    uint32_t p = rng_below(&s->rng, MAXP);
    tn_repl_t *r = &nd->core[p];
    disk_t *d = &nd->disk[p];
    if (!nd->up || nd->paused || !nd->has_core[p] || tn_repl_accepts(r) != 0 || d->len >= PRODCAP ||
        nd->npend >= 256 || s->npid + 1 >= MAXPID)
        return;
    uint32_t pid = ++s->npid;
    d->r[d->len] = (rec_t){r->ps.leader_epoch, pid, false};
    nd->pend[nd->npend++] = (pending_t){p, pid, r->ps.leader_epoch, d->len};
    d->len++;
    feed_log(s, nd, p);
}

static void consume(sim_t *s)
{
    node_t *nd = &s->node[1 + rng_below(&s->rng, s->n)];
    uint32_t p = rng_below(&s->rng, MAXP);
    tn_repl_t *r = &nd->core[p];
    if (!nd->up || nd->paused || !nd->has_core[p] || !tn_repl_serving(r) || holds(nd, p))
        return;
    for (int k = 0; k < BATCH && s->cursor[p] < r->hw; k++, s->cursor[p]++) {
        if (crc_check(s, nd, p, s->cursor[p]))
            return;
        commit_at(s, p, s->cursor[p], nd->disk[p].r[s->cursor[p]].pid, "read");
        s->nread++;
    }
}

/* Whether node holds the last electable copy of a partition: no other
 * ISR or ELR member of its current incarnation. */
static bool sole_isr_member(sim_t *s, uint32_t node)
{
    for (uint32_t p = 0; p < MAXP; p++) {
        const tn_pstate_t *ps = &s->ps[p];
        uint32_t others = 0;
        for (uint32_t k = 0; k < ps->nisr + ps->nelr; k++) {
            const tn_pstate_member_t *m = k < ps->nisr ? &ps->isr[k] : &ps->elr[k - ps->nisr];
            if (m->node != node && s->members[m->node - 1].incarnation == m->incarnation)
                others++;
        }
        if (others == 0)
            return true;
    }
    return false;
}

static void fault(sim_t *s)
{
    node_t *nd = &s->node[1 + rng_below(&s->rng, s->n)];
    uint32_t kind = rng_below(&s->rng, 9);
    if (kind == 8) {
        /* One flipped byte per schedule, in a flushed record of a replica
         * that is not the last in-sync copy of it. */
        uint32_t p = rng_below(&s->rng, MAXP);
        disk_t *d = &nd->disk[p];
        if (s->min_isr >= 2 && !s->flipped && !s->wiped && nd->up && d->flushed > 0 &&
            s->ps[p].nisr >= 2 && s->ps[p].nelr == 0) {
            uint64_t off = rng_below(&s->rng, (uint32_t)d->flushed);
            d->r[off].bad = true;
            s->flipped = true;
            trace(s, "node %u p%u: byte flipped at %" PRIu64, nd->id, p, off);
        }
        return;
    }
    s->faults_done++;
    switch (kind) {
    case 0:
    case 1:
        if (nd->up)
            node_down(s, nd, (int)kind, 10 + rng_below(&s->rng, 1200));
        break;
    case 2:
        /* A wiped disk loses what it held: the checker's promise covers one
         * lost copy per schedule (a wipe or a flipped byte), and not of the
         * last in-sync copy (only an unclean election could recover that,
         * as in Kafka). */
        if (s->min_isr >= 2 && nd->up && !s->wiped && !s->flipped && !sole_isr_member(s, nd->id)) {
            s->wiped = true;
            node_down(s, nd, 2, 10 + rng_below(&s->rng, 800));
        }
        break;
    case 3:
        if (nd->up && !nd->paused) {
            nd->paused = true;
            nd->pause_until = s->now + 100 + rng_below(&s->rng, 1500);
            trace(s, "node %u paused until %" PRIu64, nd->id, nd->pause_until);
        }
        break;
    case 4:
    case 5:
    case 6:
    case 7:
        if (s->heal_at != 0)
            break;
        s->heal_at = s->now + 100 + rng_below(&s->rng, 1500);
        if (kind == 4) { /* isolate one node */
            for (uint32_t j = 0; j <= s->n; j++)
                s->cut[nd->id][j] = s->cut[j][nd->id] = j != nd->id;
        } else if (kind == 5) { /* cut from the controller only */
            s->cut[nd->id][CTL] = s->cut[CTL][nd->id] = true;
        } else if (kind == 6) { /* a random split, the controller on one side */
            uint32_t side = (uint32_t)rng_next(&s->rng);
            for (uint32_t a = 0; a <= s->n; a++)
                for (uint32_t b = 0; b <= s->n; b++)
                    s->cut[a][b] = ((side >> a) & 1) != ((side >> b) & 1);
        } else if (rng_chance(&s->rng, 500000)) {
            /* A bridge: nd and another node cannot reach each other, every
             * other node (and the controller) reaches both. */
            uint32_t b = 1 + rng_below(&s->rng, s->n);
            if (b != nd->id)
                s->cut[nd->id][b] = s->cut[b][nd->id] = true;
        } else { /* one-way links */
            for (int k = 0; k < 2; k++) {
                uint32_t a = rng_below(&s->rng, s->n + 1), b = rng_below(&s->rng, s->n + 1);
                if (a != b)
                    s->cut[a][b] = true;
            }
        }
        trace(s, "network fault %u around node %u until %" PRIu64, kind, nd->id, s->heal_at);
        break;
    }
}

static void deliver(sim_t *s)
{
    for (;;) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < s->nq; i++)
            if (s->q[i].at <= s->now &&
                (best == UINT32_MAX || s->q[i].at < s->q[best].at ||
                 (s->q[i].at == s->q[best].at && s->q[i].seq < s->q[best].seq)))
                best = i;
        if (best == UINT32_MAX)
            return;
        msg_t m = s->q[best];
        s->q[best] = s->q[--s->nq];
        if (!link_ok(s, m.from, m.to))
            continue;
        if (m.to == CTL) {
            ctl_receive(s, &m);
            continue;
        }
        node_t *nd = &s->node[m.to];
        if (!nd->up)
            continue;
        if (nd->paused) { /* held in the socket until it runs again */
            m.at = nd->pause_until;
            s->q[s->nq++] = m;
            continue;
        }
        node_receive(s, nd, &m);
    }
}

/* --- a schedule ------------------------------------------------------------------- */

static uint32_t sim_min_isr = 2; /* of every partition in the next runs */

static void sim_setup(sim_t *s, uint64_t seed, uint32_t n)
{
    msg_t *q = s->q;
    memset(s, 0, sizeof(*s));
    s->q = q;
    s->seed = s->rng = seed;
    s->n = n;
    s->rf = 3;
    s->min_isr = s->topic_min_isr = sim_min_isr;
    s->max_rf = n >= 5 ? 4 : 3;
    s->verbose = getenv("TERN_SIM_VERBOSE") != NULL;
    memset(s->committed, 0xff, sizeof(s->committed));
    for (uint32_t i = 1; i <= n; i++) {
        s->node[i].id = i;
        s->node[i].inc = rng_next(&s->rng) | 1;
        s->members[i - 1] = (tn_pstate_node_t){i, s->node[i].inc, true};
    }
    tn_pstate_nodes_t v = members(s);
    for (uint32_t p = 0; p < MAXP; p++) {
        uint32_t replicas[3];
        for (uint32_t k = 0; k < s->rf; k++)
            replicas[k] = 1 + (p + k) % n;
        char err[128];
        assert_int_equal(
            tn_pstate_create(&s->ps[p], replicas, s->rf, s->min_isr, &v, err, sizeof(err)), 0);
    }
    for (uint32_t i = 1; i <= n; i++) {
        s->members[i - 1].live = false; /* until it registers */
        node_start(s, &s->node[i]);
        s->last_hb[i] = 0;
    }
    s->faults = s->producing = true;
}

static void sim_final_check(sim_t *s)
{
    for (uint32_t p = 0; p < MAXP && !s->fail[0]; p++) {
        const tn_pstate_t *ps = &s->ps[p];
        if (ps->leader == TN_PSTATE_NONE) {
            violation(s, "p%u offline after healing", p);
            return;
        }
        if (ps->ntarget > 0) {
            violation(s, "p%u: move %" PRIu64 " still under way after healing", p, ps->move_id);
            return;
        }
        node_t *l = &s->node[ps->leader];
        const tn_repl_t *lr = &l->core[p];
        if (!l->has_core[p] || lr->role != TN_REPL_LEADER || !tn_repl_serving(lr)) {
            violation(s,
                      "p%u: node %u leads but does not serve after healing (role %d, epoch %u, "
                      "hw %" PRIu64 ", epoch start %" PRIu64 ", registered %d)",
                      p, l->id, (int)lr->role, lr->ps.leader_epoch, lr->hw, lr->epoch_start,
                      (int)l->reg_p[p]);
            return;
        }
        for (uint32_t i = 1; i <= s->npid; i++) {
            const ack_t *a = &s->acked[i];
            if (a->node != 0 && a->p == p && a->off >= lr->hw)
                violation(s, "lost ack: p%u@%u (%08x) not readable (leader hw %" PRIu64 ")", p,
                          a->off, i, lr->hw);
        }
        check_new_leader(s, l, p, ps->leader_epoch);
        for (uint32_t k = 0; k < ps->nisr; k++) {
            node_t *m = &s->node[ps->isr[k].node];
            if (m->inc != ps->isr[k].incarnation)
                continue; /* a stale entry the leader is removing */
            if (!m->has_core[p])
                violation(s, "ISR member %u of p%u holds no replica", m->id, p);
            for (uint64_t o = 0; o < lr->hw; o++)
                if (o >= m->disk[p].len || m->disk[p].r[o].pid != l->disk[p].r[o].pid) {
                    violation(s, "ISR member %u of p%u differs from leader %u at %" PRIu64, m->id,
                              p, l->id, o);
                    break;
                }
        }
    }
}

/* Run one schedule; 0 when every invariant held, else -1 with s->fail. */
static int sim_run(sim_t *s, uint64_t seed, uint32_t n)
{
    sim_setup(s, seed, n);
    uint64_t end = FAULT_MS + HEAL_MS;
    for (s->now = 1; s->now <= end && !s->fail[0]; s->now++) {
        if (s->now == FAULT_MS) { /* heal: everything up, the network whole */
            s->faults = s->producing = false;
            memset(s->cut, 0, sizeof(s->cut));
            s->heal_at = 0;
            for (uint32_t i = 1; i <= n; i++) {
                if (s->node[i].paused)
                    s->node[i].pause_until = s->now;
                if (!s->node[i].up)
                    s->node[i].down_until = s->now;
            }
        }
        if (s->heal_at != 0 && s->now >= s->heal_at) {
            memset(s->cut, 0, sizeof(s->cut));
            s->heal_at = 0;
        }
        for (uint32_t i = 1; i <= n; i++) {
            node_t *nd = &s->node[i];
            if (!nd->up && s->now >= nd->down_until)
                node_start(s, nd);
            if (nd->paused && s->now >= nd->pause_until) {
                nd->paused = false;
                for (uint32_t k = 0; k < s->nq; k++) /* what it held arrives now */
                    if (s->q[k].to == i && s->q[k].at > s->now)
                        s->q[k].at = s->now;
                trace(s, "node %u resumes", i);
            }
        }
        deliver(s);
        for (uint32_t i = 1; i <= n; i++)
            if (s->node[i].up && !s->node[i].paused && s->now % 5 == i % 5)
                node_tick(s, &s->node[i]);
        if (s->now % 10 == 0)
            ctl_tick(s);
        if (s->producing && rng_chance(&s->rng, 300000))
            produce(s);
        if (rng_chance(&s->rng, 200000))
            consume(s);
        if (s->faults && rng_chance(&s->rng, 6000))
            fault(s);
    }
    if (!s->fail[0])
        sim_final_check(s);
    return s->fail[0] ? -1 : 0;
}

/* --- the tests -------------------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static sim_t *sim_new(void)
{
    sim_t *s = tn_calloc(1, sizeof(*s));
    assert_non_null(s);
    s->q = tn_calloc(MAXMSG, sizeof(msg_t));
    assert_non_null(s->q);
    return s;
}

static void sim_free(sim_t *s)
{
    tn_free(s->q);
    tn_free(s);
}

/* Runs the configured schedules of n nodes; returns the failures. */
static void run_many(uint32_t n, uint32_t min_isr)
{
    sim_min_isr = min_isr;
    sim_t *s = sim_new();
    const char *seed_env = getenv("TERN_SIM_SEED");
    if (seed_env != NULL && *seed_env) {
        if (env_u64("TERN_SIM_NODES", 3) == n && env_u64("TERN_SIM_MIN_ISR", 2) == min_isr) {
            int rc = sim_run(s, strtoull(seed_env, NULL, 0), n);
            printf("replay seed %s nodes %u: %s (acks %u, elections %u)\n", seed_env, n,
                   rc ? s->fail : "ok", s->nacks, s->elections);
            assert_int_equal(rc, 0);
        }
        sim_free(s);
        return;
    }
    /* Sanitized builds run ten times slower: fewer schedules by default. */
    uint64_t count = env_u64("TERN_SIM_SCHEDULES", getenv("TERN_SANITIZED") ? 200 : 1000);
    uint64_t base = env_u64("TERN_SIM_BASE", 0x7e51u) * 1000003u + n * 10 + min_isr;
    uint64_t acks = 0, reads = 0, elections = 0, faults = 0, begun = 0, done = 0, aborted = 0;
    /* TERN_SIM_KEEP_GOING=1: every failing seed is printed, then the test fails. */
    bool keep_going = getenv("TERN_SIM_KEEP_GOING") != NULL;
    uint64_t failures = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t seed = base + i * 0x9e3779b9u;
        if (sim_run(s, seed, n) != 0) {
            printf("FAILED: %s\nreplay: TERN_SIM_SEED=%" PRIu64 " TERN_SIM_NODES=%u "
                   "TERN_SIM_MIN_ISR=%u TERN_SIM_VERBOSE=1\n",
                   s->fail, seed, n, min_isr);
            fflush(stdout);
            if (keep_going) {
                failures++;
                continue;
            }
            sim_free(s);
            fail();
        }
        acks += s->nacks;
        reads += s->nread;
        elections += s->elections;
        faults += s->faults_done;
        begun += s->moves_begun;
        done += s->moves_done;
        aborted += s->moves_aborted;
    }
    printf("%" PRIu64 " schedules of %u nodes, min_insync %u: %" PRIu64 " acks, %" PRIu64
           " reads, %" PRIu64 " elections, %" PRIu64 " faults, moves %" PRIu64 " begun, %" PRIu64
           " completed, %" PRIu64 " aborted\n",
           count, n, min_isr, acks, reads, elections, faults, begun, done, aborted);
    assert_true(count == 0 || acks > count); /* the schedules did work */
    sim_free(s);
    if (failures > 0) {
        printf("%" PRIu64 " of %" PRIu64 " schedules failed\n", failures, count);
        fail();
    }
}

static void test_sim_3_nodes(void **state)
{
    (void)state;
    run_many(3, 2);
}

static void test_sim_5_nodes(void **state)
{
    (void)state;
    run_many(5, 2);
}

/* min_insync 1: the leader may ack alone; the ELR keeps such a last copy.
 * A lost disk copy is outside what min_insync 1 promises: no wipes or
 * flipped bytes here. */
static void test_sim_3_nodes_min_insync_1(void **state)
{
    (void)state;
    run_many(3, 1);
}

/* The checker can fail: a broken rule must be caught within a bound. */
static void expect_caught(int broken, const char *what)
{
    sim_t *s = sim_new();
    sim_min_isr = 2;
    tn_repl_test_break = broken;
    uint64_t i, bound = 3000;
    int rc = 0;
    for (i = 0; i < bound && rc == 0; i++) {
        rc = sim_run(s, 0xbadull * 7919u + i * 0x9e3779b9u, 3);
        if (rc != 0 && strstr(s->fail, "after healing") != NULL)
            rc = 0; /* a liveness failure: it is a safety violation we want */
    }
    tn_repl_test_break = TN_REPL_BREAK_NONE;
    printf("%s: %s after %" PRIu64 " schedules: %s\n", what, rc ? "caught" : "NOT caught", i,
           rc ? s->fail : "-");
    sim_free(s);
    assert_int_not_equal(rc, 0);
}

static void test_sim_catches_hw_over_written(void **state)
{
    (void)state;
    expect_caught(TN_REPL_BREAK_HW_WRITTEN, "hw over written offsets");
}

static void test_sim_catches_truncate_to_hw(void **state)
{
    (void)state;
    expect_caught(TN_REPL_BREAK_TRUNCATE_HW, "truncation to the follower's hw");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_3_nodes),
        cmocka_unit_test(test_sim_5_nodes),
        cmocka_unit_test(test_sim_3_nodes_min_insync_1),
        cmocka_unit_test(test_sim_catches_hw_over_written),
        cmocka_unit_test(test_sim_catches_truncate_to_hw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
