/* Channel-state replication: the waiting rule, the leader's push of
 * channel log records to its committed-ISR followers, and the follower's
 * writing of them to its own channel logs. See setrepl.h for the API.
 *
 * DESIGN: a settle of a replicated partition.
 *   1. A FIN / ack / REQ / nack (any door: NSQ, /v1, a forwarded
 *      TN_OP_SETTLE) changes the channel's state in memory on the leader
 *      and queues a record to the channel log (queue/channel.c). The door
 *      waits with tn_channel_sync, as on a lone node.
 *   2. The record completes locally (after the channel log's fdatasync).
 *      For a partition the metastore says is replicated, the engine does
 *      not end the waits it covers: it hands the record to durable() here
 *      with its number in the log (seq, from 1 since the log's open).
 *   3. Records are kept per stream (topic, partition, channel: one open
 *      channel log, with a random id so a follower tells a reopened log
 *      from the one before). Each replica of the partition gets them
 *      with TN_OP_SETTLE_REPL on the replica lane, one call in flight per
 *      (follower, stream): what arrives while a call is out rides the
 *      next one, which is the batching (up to TN_SETREPL_MAX records).
 *   4. A follower checks the leader_epoch against its metastore replica
 *      (older: 409 fenced; newer: 503 until its replica catches up; not a
 *      follower of the partition: 421), opens (creates on the first
 *      record) its own channel log for (topic, partition, channel) on a
 *      worker thread, skips records it already has (same stream id, seq
 *      below what it wrote: a retried call whose answer was lost), queues
 *      the rest, and answers 204 once every record it queued so far is
 *      fdatasync'ed (a record the log or the engine refused is not
 *      written: the request fails, and the retry writes it). The channel
 *      log's committer keeps its own cursor and checkpoints, so a
 *      promoted follower's engine opens the log as it would its own. It
 *      takes a channel's records only while its engine has that channel
 *      (engine_channel: 503 else), and a log it holds belongs to the
 *      engine's channel object it was opened for (tn_channel_t.gen): the
 *      engine deleting the channel here removes its files, so the log
 *      closes, and a channel made again under the name gets a log made
 *      anew. Which channel of the name the leader's records are of is
 *      told by its stamp (queue.h tn_channel_t.stamp, from the metastore
 *      record), sent with each call: a follower whose engine's channel
 *      has another (an old one its catalog has not replaced yet) answers
 *      503 until it has the leader's (an older leader sends none, and is
 *      not checked). Each call carries too the incarnation of this
 *      node's data directory the leader holds synced (peer_t.inc: its
 *      ISR entry's, or the one its snapshot was meant for): a follower
 *      whose own is another (wiped and made anew, before the leader saw
 *      it register) answers 409, and the leader marks it not synced: it
 *      gets a snapshot (step 8) before any record counts from it. An
 *      older build answers 400 to the incarnation (a trailing field): the
 *      leader sends that follower the older encoding since (no_inc). Nor
 *      does it write while this node's copy of the
 *      partition is on its way to or from quarantine/ (o.copy_moving:
 *      marked dropped, its mark being taken away, or being moved), since
 *      what it wrote could go with the copy; nor (503) before its replica
 *      manager holds its copy of the partition open and marked a
 *      replica's (o.copy_ready: its `epochs` file on disk). The channel
 *      logs here are opened beside the manager's open of the partition's
 *      log, and nothing else orders the two: a copy killed with the
 *      leader's state synced and no mark yet was taken at its next start
 *      for a factor-1 log that lost its tail, and skipped forward to the
 *      end its channels refer to (queue/channel.c, check_lost_tail): a
 *      hole in the copy for good.
 *   5. On each answer the leader computes with tn_setrepl_commit (pure)
 *      the highest seq that every follower of the committed ISR has (the
 *      ISR holding at least min_insync members): any ISR member may be
 *      elected next, so, as for the record log's hw (cluster/repl.c), a
 *      settle counts only once all of them have it. A slow follower holds
 *      settles until the leader shrinks it out of the ISR (rfetch), as it
 *      holds produces. tn_broker_chan_repl_done ends the waits up to it,
 *      and the doors answer. Records every ISR follower has are dropped.
 *   6. The ISR or the leadership changes (tn_setrepl_pstate_changed, and
 *      a 250 ms check of every stream against the metastore replica):
 *      waits are checked again against the new ISR (a follower shrunk out
 *      no longer counts, nor is pushed to; one added is pushed to from the
 *      oldest record kept). When this node no longer leads the partition
 *      (or in another epoch) the waits fail with TN_EFENCED, and when the
 *      committed ISR is below min_insync with TN_EFEWREPLICAS: both are
 *      retryable for a client (503), and a failed settle may or may not
 *      have reached the followers (at-least-once allows a redelivery).
 *   7. Promotion: rfetch's manager calls tn_setrepl_release before it
 *      hands the partition to the engine; the follower's channel logs of
 *      that partition close first (after their queued records), then its
 *      callback runs, and requests for the partition get 421 meanwhile.
 *   8. A replica outside the committed ISR lacks the channel's state from
 *      before what the stream keeps (a wiped disk, a restart, a channel
 *      made while it was away, records dropped past TN_SETREPL_KEEP_MAX).
 *      Such a peer is not "synced": before any record it is sent the
 *      engine's live cursor of the channel (TN_OP_CHAN_SNAP) as of the
 *      log's submitted count S, meant for the data directory incarnation
 *      the metastore shows for it; the follower writes it to its channel
 *      log as FIN/EMPTY/REQ/PAUSE/TIMEOUTS records (they only add
 *      settles), answers 204 once they are synced, and takes the
 *      stream's records after S. A peer that is in the committed ISR
 *      when it joins a stream is synced (the gate below let it in with
 *      every channel caught up, and the waits count it since); one that
 *      leaves the ISR, whose incarnation changes, that lacks records
 *      no longer kept, or that a move adds anew (in its target, not its
 *      old list, a move this node had not seen: dropped and added back
 *      meanwhile, its copy may have gone to quarantine/), is not synced
 *      any more.
 *   9. The ISR gate: tn_setrepl_catch_up(node, incarnation), asked by the
 *      replica manager each tick for the leader's followers outside the
 *      ISR, makes a stream for every durable channel of the partition
 *      that has none (no settle since its log opened), pumps them, and is
 *      true once the follower is synced for that incarnation on each and
 *      answered a call with every record the ISR confirmed ("counted").
 *      The core proposes it into the ISR only then (repl.c, channels
 *      gate), and the metastore takes an addition only from a proposal
 *      that says it checked (PART_ISR flags). The waits count the
 *      maximal ISR (tn_setrepl_extra): a counted follower outside the
 *      ISR counts like an ISR member until a call to it failed and the
 *      gate answered no for it since (so the core, which proposes on
 *      the gate's last answer, never adds it after settles went on
 *      without it); a follower the gate said yes to last (vouch_t)
 *      counts from the start in every stream of the partition made
 *      since (a channel made after that answer); a member the core
 *      proposed (o.pending) counts until the CAS is decided, answering
 *      or not: once in it may be elected; and so does an ELR left
 *      beside an ISR at min_insync (min_insync lowered under it) until
 *      the leader's same-ISR CAS empties it.
 * Failure modes: a follower that fails a call is retried with a backoff
 * (100 ms doubling to 1 s) from its last confirmed record; while it is in
 * the committed ISR its stalled confirmations hold settles, until the
 * leader shrinks it out of the ISR (rfetch), as they hold produces. A
 * follower's channel log that fails answers 500 (the leader retries; the
 * follower's storage error is sticky), except a write that finds the disk
 * full: those records fail alone (TN_WALOP_SPACE_OK, the WAL cut back),
 * the call is answered 507, and the leader's retry writes them once
 * there is room, with no restart (a log the engine holds refuses the
 * records with that error until it took its cursor back to the log's
 * durable state: tn_broker_chan_apply). Meanwhile the follower confirms
 * nothing: while it is in the committed ISR settles wait for it as in
 * any failed call, until the leader shrinks it out for its record
 * copies' lag (the same disk fails them once a publish comes; nothing
 * shrinks a follower whose channel logs alone fail), and it comes back
 * through the gate (step 9) with a snapshot once space returns. Leases and in-flight deliveries
 * stay on the leader: after a failover the new leader delivers again
 * every message whose FIN was not confirmed.
 *
 * Invariants: a settle of a replicated partition is answered OK only
 * after its record (and every record before it in its channel log) is
 * fdatasync'ed on the leader and on every member of the ISR the metastore
 * committed, which has at least min_insync members, and of the maximal
 * ISR (any other member that may be elected before it has it); a
 * follower never writes the channel log of a partition this node leads
 * (its engine owns it); a follower answers 204 only for records it has
 * synced, and for a snapshot only once its records are synced, and
 * neither for another data directory than its own (a wiped disk's
 * fresh log confirms nothing until it installed a snapshot); every
 * member of the committed ISR holds every settle the ISR confirmed (it
 * joined through the gate, and the waits counted it since), so
 * whichever is elected next delivers none of them again.
 *
 * Known limits: records go to every synced replica, in the ISR or not,
 * and the leader keeps them until every synced replica has them, but at
 * most TN_SETREPL_KEEP_MAX decided ones (o.keep_max): a replica that
 * lacks some needs a snapshot again (step 8), also when the pass that
 * dropped them is the one that would push to it (pump: never the records
 * after a gap, which it would answer 204 to and count as caught up
 * without). A snapshot is one call, bounded by the RPC payload (16 MiB).
 * A replica that leaves the ISR gets a new snapshot of every channel
 * before it comes back, even with its disk intact. A follower creates a
 * channel's log at the frontier the leader had when its record stream
 * began (base_frontier). A node whose engine still holds the channel's
 * log (a leader set aside without a restart, or a partition its engine
 * opened from disk at start before the placement moved it) writes the
 * records through the engine (tn_broker_chan_apply), which applies them
 * to the channel's cursor too, so the engine serves them if it leads
 * again; a message the other leader put back waits there until its due
 * time and keeps its attempts, as in a log opened from its files (before,
 * the engine's scan delivered it at once, attempts from 0).
 *
 * Threads: the loop thread (the RPC endpoint's and the engine's). */
#include "core/platform.h"

#include "cluster/setrepl.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "storage/chanlog.h"
#include "storage/io.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TICK_MS      250
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000
#define UNCOUNT_MS   1000 /* o.uncount_ms's default */

/* --- the waiting rule --------------------------------------------------------------- */

static uint64_t acked_by(const tn_setrepl_ack_t *acks, uint32_t nacks, uint32_t node)
{
    uint64_t a = 0;
    for (uint32_t k = 0; k < nacks; k++)
        if (acks[k].node == node && acks[k].acked > a)
            a = acks[k].acked;
    return a;
}

uint64_t tn_setrepl_commit_with(uint64_t local, const tn_setrepl_ack_t *acks, uint32_t nacks,
                                const tn_pstate_member_t *isr, uint32_t nisr, const uint32_t *extra,
                                uint32_t nextra, uint32_t self, uint32_t min_insync, bool *starved)
{
    if (min_insync == 0)
        min_insync = 1;
    bool self_in = false;
    for (uint32_t i = 0; i < nisr; i++)
        if (isr[i].node == self)
            self_in = true;
    bool st = !self_in || nisr < min_insync;
    if (starved != NULL)
        *starved = st;
    if (st)
        return 0;
    /* The lowest ack among the ISR followers, capped at local: any of
     * them may be the next leader (cluster/repl.c moves the hw the same
     * way, invariant 1); and among the extra members, which may be in
     * the ISR by the time a failover looks. */
    uint64_t c = local;
    for (uint32_t i = 0; i < nisr; i++) {
        if (isr[i].node == self)
            continue;
        uint64_t a = acked_by(acks, nacks, isr[i].node);
        if (a < c)
            c = a;
    }
    for (uint32_t i = 0; i < nextra; i++) {
        if (extra[i] == self)
            continue;
        uint64_t a = acked_by(acks, nacks, extra[i]);
        if (a < c)
            c = a;
    }
    return c;
}

uint64_t tn_setrepl_commit(uint64_t local, const tn_setrepl_ack_t *acks, uint32_t nacks,
                           const tn_pstate_member_t *isr, uint32_t nisr, uint32_t self,
                           uint32_t min_insync, bool *starved)
{
    return tn_setrepl_commit_with(local, acks, nacks, isr, nisr, NULL, 0, self, min_insync,
                                  starved);
}

static bool isr_has(const tn_pstate_member_t *isr, uint32_t nisr, uint32_t node)
{
    for (uint32_t i = 0; i < nisr; i++)
        if (isr[i].node == node)
            return true;
    return false;
}

static uint32_t extra_add(uint32_t *out, uint32_t n, const tn_pstate_member_t *isr, uint32_t nisr,
                          uint32_t node)
{
    if (n >= TN_PSTATE_MAX_REPLICAS || isr_has(isr, nisr, node))
        return n;
    for (uint32_t k = 0; k < n; k++)
        if (out[k] == node)
            return n;
    out[n] = node;
    return n + 1;
}

uint32_t tn_setrepl_extra(const tn_pstate_member_t *isr, uint32_t nisr,
                          const tn_pstate_member_t *elr, uint32_t nelr, const uint32_t *counted,
                          uint32_t ncounted, const uint32_t *pending, uint32_t npending,
                          uint32_t *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < nelr; i++)
        n = extra_add(out, n, isr, nisr, elr[i].node);
    for (uint32_t i = 0; i < ncounted; i++)
        n = extra_add(out, n, isr, nisr, counted[i]);
    for (uint32_t i = 0; i < npending; i++)
        n = extra_add(out, n, isr, nisr, pending[i]);
    return n;
}

uint64_t tn_setrepl_trim(uint64_t low, uint64_t high, uint64_t done, uint64_t min_acked,
                         uint64_t keep_max)
{
    uint64_t drop = min_acked < done ? min_acked : done; /* the last one dropped */
    if (high >= low && high - low + 1 > keep_max && high - keep_max > drop)
        drop = high - keep_max < done ? high - keep_max : done;
    if (drop + 1 <= low)
        return low;
    return drop + 1 > high + 1 ? high + 1 : drop + 1;
}

/* --- state ---------------------------------------------------------------------------- */

typedef struct stream_s stream_t;

typedef struct {
    uint32_t node;
    uint64_t acked; /* confirmed up to (in this stream) */
    bool inflight;  /* a call is out */
    bool gone;      /* left the ISR while its call was out */
    /* It holds the channel's whole state up to acked, for data directory
     * inc (0: the one its ISR entry vouched for, not known here): it was
     * in the committed ISR when it joined this stream, or it installed a
     * snapshot (CHAN_SNAP). Until then it is sent a snapshot, no records. */
    bool synced;
    uint64_t inc;
    /* Synced, and it answered a call with every record the ISR had
     * confirmed: it counts for the waits like an ISR member
     * (tn_setrepl_commit_with), since the ISR may be taking it in, until
     * a call to it fails. */
    bool counted;
    /* A call to it failed while counted (monotonic ms; 0: none): it stops
     * counting when the ISR gate next asks about it (tn_setrepl_catch_up
     * answers no then), so the core never proposes it on an older yes
     * after settles went on without it; or o.uncount_ms later on a check,
     * when the gate is not asking (it is not a candidate then). */
    int64_t uncount_at;
    bool in_isr; /* in the committed ISR when last looked */
    /* It refused (400) a call that carried its incarnation: an older
     * build, which takes records only without it (and checks none). */
    bool no_inc;
    unsigned failures;
    int64_t retry_at; /* monotonic ms: no call before */
} peer_t;

struct stream_s {
    stream_t *next;
    tn_setrepl_t *s;
    char *topic;
    char *channel;
    uint32_t p;
    uint64_t id;
    uint32_t epoch;
    uint64_t base_frontier; /* the channel's frontier at its first record */
    uint64_t low;           /* seq of recs[0] */
    uint64_t high;          /* the last seq the engine handed over */
    tn_walrec_t *recs;
    size_t cap;
    uint64_t done; /* the waits up to here ended (confirmed or failed) */
    peer_t peers[TN_PSTATE_MAX_REPLICAS];
    uint32_t npeers;
    uint64_t move_id; /* the partition's move under way when peers were last synced */
    uint32_t refs;    /* calls in flight */
    bool dead;
};

typedef struct pcall_s {
    struct pcall_s *next, *prev; /* calls out */
    stream_t *st;
    uint32_t node;
    uint64_t last; /* the call's last seq (a snapshot: the seq its state includes) */
    bool snap;     /* a CHAN_SNAP call */
    uint64_t inc;  /* the follower's incarnation the call was meant for (0: any) */
    tn_rpc_call_t *call;
} pcall_t;

typedef struct flog_s flog_t;
typedef struct freq_s freq_t;

/* A SETTLE_REPL request on the follower, from decoding to its answer. */
struct freq_s {
    freq_t *next;
    tn_rpc_req_t *req;
    tn_wire_setrepl_t w; /* recs point into rec_bytes */
    uint8_t *rec_bytes;
    uint64_t target; /* answered once the log completed this many records */
    int status;      /* an answer decided before the records are written */
    tn_walop_t *ops;
    flog_t *fl;
    /* A CHAN_SNAP: its records are the state's, never skipped; once
     * queued, the log is at snap_next of w.stream. */
    tn_setrepl_t *snap;
    uint64_t snap_next;
};

/* A channel log this node holds as a follower. */
struct flog_s {
    flog_t *next;
    tn_setrepl_t *s;
    char *topic;
    char *channel;
    uint32_t p;
    tn_chanlog_t *cl; /* NULL for an engine one */
    /* The engine holds this channel's log (tn_broker_chan_apply): records
     * go through it, and inflight counts those not completed yet. */
    bool engine;
    uint32_t inflight;
    uint64_t gen; /* the engine's channel object it belongs to (engine_channel) */
    bool opening;
    bool closing;
    int open_err;
    uint64_t base_frontier; /* where the log starts when the open creates it */
    uint64_t stream;        /* the leader stream last written */
    uint64_t next_seq;      /* its next record */
    freq_t *queued;         /* waiting for the open */
    freq_t *waiting;        /* records queued, waiting for completion */
    uv_work_t work;
    struct release_s *rel;
};

typedef struct release_s {
    struct release_s *next;
    char *topic;
    uint32_t p;
    uint32_t pending; /* logs still closing */
    tn_setrepl_release_cb cb;
    void *arg;
    bool fired;
} release_t;

/* A follower the ISR gate last said yes to (tn_setrepl_catch_up true):
 * the leader's core may propose it into the ISR on that answer until the
 * gate next says no, so it counts in every stream of the partition made
 * meanwhile (a channel made since, a channel log opened again), as it
 * does, counted, in those it answered for (step 9). */
typedef struct vouch_s {
    struct vouch_s *next;
    char *topic;
    uint32_t p;
    uint32_t node;
    uint64_t move_id; /* the partition's move under way when it was said */
} vouch_t;

struct tn_setrepl_s {
    tn_setrepl_opts_t o;
    stream_t *streams;
    pcall_t *calls;
    flog_t *flogs;
    release_t *released; /* partitions handed to the engine */
    vouch_t *vouched;
    uv_timer_t tick;
    uint64_t idgen;
    uint32_t busy; /* calls, flogs, the timer: s is freed when 0 after close */
    bool closing;
    void (*close_cb)(void *arg);
    void *close_arg;
    tn_setrepl_stats_t st;
};

static void maybe_free(tn_setrepl_t *s);

/* --- the leader ------------------------------------------------------------------------- */

static stream_t *stream_find(tn_setrepl_t *s, const char *topic, uint32_t p, const char *channel)
{
    for (stream_t *st = s->streams; st != NULL; st = st->next)
        if (!st->dead && st->p == p && strcmp(st->topic, topic) == 0 &&
            strcmp(st->channel, channel) == 0)
            return st;
    return NULL;
}

static void stream_free(stream_t *st)
{
    tn_free(st->topic);
    tn_free(st->channel);
    tn_free(st->recs);
    tn_free(st);
}

/* End the waits of st up to its last record with status (an error). */
static void stream_fail(stream_t *st, int status)
{
    if (st->high > st->done) {
        st->done = st->high;
        tn_broker_chan_repl_done(st->s->o.broker, st->topic, st->channel, st->p, st->high, status);
    }
}

/* Take st out of the table; its memory goes when no call holds it. */
static void stream_kill(stream_t *st, int status)
{
    tn_setrepl_t *s = st->s;
    stream_fail(st, status);
    st->dead = true;
    for (stream_t **pp = &s->streams; *pp != NULL; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    s->st.streams--;
    if (st->refs == 0)
        stream_free(st);
}

static stream_t *stream_new(tn_setrepl_t *s, const char *topic, uint32_t p, const char *channel,
                            uint32_t epoch, uint64_t first)
{
    stream_t *st = tn_calloc(1, sizeof(*st));
    if (st == NULL)
        return NULL;
    st->topic = tn_strdup(topic);
    st->channel = tn_strdup(channel);
    if (st->topic == NULL || st->channel == NULL) {
        stream_free(st);
        return NULL;
    }
    st->s = s;
    st->p = p;
    st->epoch = epoch;
    st->low = first;
    st->high = first - 1;
    st->done = first - 1;
    st->id = ((uint64_t)tn_now_wall_ns() ^ ((uint64_t)s->o.node_id << 48)) + ++s->idgen;
    if (st->id == 0)
        st->id = 1;
    st->next = s->streams;
    s->streams = st;
    s->st.streams++;
    return st;
}

/* The data directory incarnation the metastore replica has for node (0:
 * unknown). */
static uint64_t member_inc(tn_setrepl_t *s, uint32_t node)
{
    if (s->o.meta == NULL)
        return 0;
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(s->o.meta), node);
    return m != NULL ? m->incarnation : 0;
}

static bool list_has(const uint32_t *v, uint32_t n, uint32_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == node)
            return true;
    return false;
}

/* Whether node is a member the move under way in ps adds (in its target,
 * not in its old list), when that move is not move_id: it was no replica
 * when that move began, so its copy may have been dropped and emptied
 * (quarantine/, channel logs with it) in states this node never looked
 * at, with the same incarnation (repl.c, adds_anew, for the record log). */
static bool adds_anew(const tn_pstate_t *ps, uint64_t move_id, uint32_t node)
{
    return ps->ntarget > 0 && ps->move_id != move_id && list_has(ps->target, ps->ntarget, node) &&
           !list_has(ps->old, ps->nold, node);
}

static bool is_replica(const tn_pstate_t *ps, uint32_t node);

static vouch_t **vouch_find(tn_setrepl_t *s, const char *topic, uint32_t p, uint32_t node)
{
    vouch_t **pp = &s->vouched;
    while (*pp != NULL &&
           ((*pp)->node != node || (*pp)->p != p || strcmp((*pp)->topic, topic) != 0))
        pp = &(*pp)->next;
    return pp;
}

static void vouch_free(vouch_t **pp)
{
    vouch_t *v = *pp;
    *pp = v->next;
    tn_free(v->topic);
    tn_free(v);
}

/* Whether the gate's yes for node on partition p of topic still stands
 * in ps: this node leads, node is a replica outside the ISR, and no move
 * added it anew since. */
static bool vouch_holds(tn_setrepl_t *s, const vouch_t *v, const tn_pstate_t *ps)
{
    return ps->leader == s->o.node_id && is_replica(ps, v->node) &&
           tn_pstate_isr_find(ps, v->node) < 0 && !adds_anew(ps, v->move_id, v->node);
}

static bool vouched(tn_setrepl_t *s, const char *topic, uint32_t p, uint32_t node,
                    const tn_pstate_t *ps)
{
    vouch_t **pp = vouch_find(s, topic, p, node);
    return *pp != NULL && vouch_holds(s, *pp, ps);
}

/* Make st's followers the replicas of ps (minus this node): every one is
 * pushed to, in the ISR or not, so a replica out of the ISR (down for a
 * while, catching up its log) gets the channel state it missed before it
 * is back in the ISR and may be elected; a new one starts from the oldest
 * record kept; one that is no longer a replica goes. */
static void peers_sync(stream_t *st, const tn_pstate_t *ps)
{
    uint32_t self = st->s->o.node_id;
    peer_t keep[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < ps->nreplicas; i++) {
        uint32_t node = ps->replicas[i];
        if (node == self)
            continue;
        peer_t *old = NULL;
        for (uint32_t k = 0; k < st->npeers; k++)
            if (st->peers[k].node == node)
                old = &st->peers[k];
        if (old != NULL) {
            keep[n] = *old;
            keep[n].gone = false;
            if (adds_anew(ps, st->move_id, node) && tn_pstate_isr_find(ps, node) < 0) {
                /* Dropped and added back meanwhile: what it installed may
                 * have gone with its copy. */
                keep[n].synced = false;
                keep[n].counted = false;
                keep[n].uncount_at = 0;
            }
        } else {
            /* An ISR member holds every settle the ISR confirmed (it was
             * let in only once caught up, and the waits count it since),
             * so the stream's records are all it needs; any other
             * replica gets a snapshot first, and counts from the start
             * when the ISR gate said yes for it last (vouch_t). */
            int k = tn_pstate_isr_find(ps, node);
            keep[n] = (peer_t){.node = node,
                               .acked = st->low - 1,
                               .synced = k >= 0,
                               .counted = k < 0 && vouched(st->s, st->topic, st->p, node, ps),
                               .in_isr = k >= 0,
                               .inc = k >= 0 ? ps->isr[k].incarnation : 0};
        }
        n++;
    }
    /* A replica that left with a call out stays, marked, so the reply
     * finds it; it counts for nothing. */
    for (uint32_t k = 0; k < st->npeers && n < TN_PSTATE_MAX_REPLICAS; k++) {
        if (!st->peers[k].inflight)
            continue;
        bool in = false;
        for (uint32_t i = 0; i < n; i++)
            if (keep[i].node == st->peers[k].node)
                in = true;
        if (!in) {
            keep[n] = st->peers[k];
            keep[n].gone = true;
            n++;
        }
    }
    memcpy(st->peers, keep, n * sizeof(keep[0]));
    st->npeers = n;
    st->move_id = ps->move_id;
}

/* Confirm what the maximal ISR has (the committed ISR, an ELR left beside
 * it, the counted followers and the core's proposed additions:
 * tn_setrepl_extra), drop what every replica has (within
 * TN_SETREPL_KEEP_MAX). */
static void evaluate(stream_t *st, const tn_pstate_t *ps)
{
    tn_setrepl_ack_t acks[TN_PSTATE_MAX_REPLICAS];
    uint32_t counted[TN_PSTATE_MAX_REPLICAS], pending[TN_PSTATE_MAX_REPLICAS];
    uint32_t extra[TN_PSTATE_MAX_REPLICAS];
    uint32_t nacks = 0, ncounted = 0, npending = 0;
    uint64_t min_acked = st->high;
    for (uint32_t i = 0; i < st->npeers; i++) {
        peer_t *pe = &st->peers[i];
        if (pe->gone)
            continue;
        acks[nacks++] = (tn_setrepl_ack_t){pe->node, pe->acked};
        /* One not synced gets a snapshot, not the records kept. */
        if (pe->synced && pe->acked < min_acked)
            min_acked = pe->acked;
        if (pe->counted)
            counted[ncounted++] = pe->node;
    }
    /* The maximal ISR: a member the core proposed counts from the
     * proposal on, answering or not (a call to it that failed un-counts
     * it above, but the CAS may still apply and elect it). */
    tn_setrepl_t *s = st->s;
    if (s->o.pending != NULL) {
        npending = s->o.pending(s->o.pending_arg, st->topic, st->p, pending);
        if (npending > TN_PSTATE_MAX_REPLICAS)
            npending = TN_PSTATE_MAX_REPLICAS;
    }
    uint32_t nextra = tn_setrepl_extra(ps->isr, ps->nisr, ps->elr, ps->nelr, counted, ncounted,
                                       pending, npending, extra);
    bool starved = false;
    uint64_t c = tn_setrepl_commit_with(st->high, acks, nacks, ps->isr, ps->nisr, extra, nextra,
                                        st->s->o.node_id, ps->min_insync, &starved);
    if (starved) {
        stream_fail(st, TN_EFEWREPLICAS);
    } else if (c > st->done) {
        st->done = c;
        tn_broker_chan_repl_done(st->s->o.broker, st->topic, st->channel, st->p, c, 0);
    }
    /* Keep what some ISR follower still lacks (within a bound), and what
     * is not decided. */
    uint64_t low = tn_setrepl_trim(st->low, st->high, st->done, min_acked, s->o.keep_max);
    if (low > st->low) {
        size_t k = (size_t)(low - st->low);
        size_t have = (size_t)(st->high - st->low + 1);
        memmove(st->recs, st->recs + k, (have - k) * sizeof(st->recs[0]));
        st->low = low;
    }
}

static void pump(stream_t *st);

static const char *member_addr(tn_setrepl_t *s, uint32_t node)
{
    if (s->o.addr != NULL)
        return s->o.addr(s->o.addr_arg, node);
    if (s->o.meta == NULL)
        return NULL;
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(s->o.meta), node);
    return m != NULL && m->api_addr[0] != '\0' ? m->api_addr : NULL;
}

static peer_t *peer_find(stream_t *st, uint32_t node)
{
    for (uint32_t i = 0; i < st->npeers; i++)
        if (st->peers[i].node == node)
            return &st->peers[i];
    return NULL;
}

static void peer_failed(peer_t *pe)
{
    pe->failures++;
    int64_t wait = RETRY_MIN_MS;
    for (unsigned i = 1; i < pe->failures && wait < RETRY_MAX_MS; i++)
        wait *= 2;
    if (wait > RETRY_MAX_MS)
        wait = RETRY_MAX_MS;
    pe->retry_at = tn_now_mono_ms() + wait;
}

/* The check of st against the metastore replica: false when st was
 * killed (this node no longer leads its partition in st's epoch). */
static bool stream_check(stream_t *st, const tn_pstate_t *ps)
{
    tn_setrepl_t *s = st->s;
    if (ps == NULL || ps->leader != s->o.node_id || ps->leader_epoch != st->epoch) {
        stream_kill(st, TN_EFENCED);
        return false;
    }
    peers_sync(st, ps);
    for (uint32_t i = 0; i < st->npeers; i++) {
        peer_t *pe = &st->peers[i];
        bool in = tn_pstate_isr_find(ps, pe->node) >= 0;
        if (pe->in_isr && !in) {
            /* Shrunk out: it comes back only through a new snapshot
             * (it may be down, its disk may be wiped meanwhile). */
            pe->synced = false;
            pe->counted = false;
            pe->uncount_at = 0;
        }
        if (pe->uncount_at != 0 && tn_now_mono_ms() >= pe->uncount_at + (int64_t)s->o.uncount_ms) {
            pe->counted = false;
            pe->uncount_at = 0;
        }
        pe->in_isr = in;
        if (!pe->synced || pe->gone)
            continue;
        /* Records it lacks that the leader no longer keeps, or a data
         * directory that is not the one it was synced with (a wiped
         * disk): a new snapshot. */
        uint64_t cur = member_inc(s, pe->node);
        if (pe->acked + 1 < st->low || (cur != 0 && pe->inc != 0 && cur != pe->inc)) {
            pe->synced = false;
            pe->counted = false;
            pe->uncount_at = 0;
        } else if (pe->inc == 0) {
            pe->inc = cur;
        }
    }
    evaluate(st, ps);
    return true;
}

static void on_push_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    pcall_t *pc = arg;
    stream_t *st = pc->st;
    tn_setrepl_t *s = st->s;
    if (pc->prev != NULL)
        pc->prev->next = pc->next;
    else
        s->calls = pc->next;
    if (pc->next != NULL)
        pc->next->prev = pc->prev;
    st->refs--;
    s->busy--;
    peer_t *pe = peer_find(st, pc->node);
    if (pe != NULL)
        pe->inflight = false;
    uint16_t code = status == 0 ? reply->status : 0;
    if (code == 204) {
        if (pe != NULL && pc->snap) {
            pe->synced = true;
            pe->inc = pc->inc;
        }
        if (pe != NULL && pc->last > pe->acked)
            pe->acked = pc->last;
        if (pe != NULL) {
            pe->failures = 0;
            pe->uncount_at = 0;
        }
        if (pe != NULL && pe->synced && !pe->gone && pe->acked >= st->done)
            pe->counted = true;
    } else {
        s->st.call_failures++;
        if (pe != NULL) {
            /* The waits stop waiting for it once the gate was told. */
            if (pe->counted && pe->uncount_at == 0)
                pe->uncount_at = tn_now_mono_ms();
            peer_failed(pe);
            if (!pc->snap && code == 409) {
                /* Its data directory is not the one it was synced with
                 * (wiped and made anew before this node saw its new
                 * incarnation), or this node is fenced (the stream ends
                 * at its next check): the records confirm nothing, it
                 * needs the channel's state first. */
                pe->synced = false;
            } else if (!pc->snap && code == 400 && pc->inc != 0 && !pe->no_inc) {
                /* An older build: the older encoding. A newer one answers
                 * 400 only to a malformed call (a bug), which this would
                 * leave unchecked for the stream's life: said once, with
                 * the follower's words, and counted. */
                pe->no_inc = true;
                s->st.inc_refused++;
                int n = (int)TN_MIN(reply->body_len, 200);
                TN_LOG(TN_LOG_NOTICE,
                       "setrepl: node %" PRIu32 " refused the incarnation in records of channel %s "
                       "of %s/%" PRIu32 " (400: %.*s); taking it for an older build, it gets "
                       "them unchecked from now on",
                       pc->node, st->channel, st->topic, st->p, n, (const char *)reply->body);
            }
        }
        if (status != TN_ECLOSED)
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "setrepl: node %" PRIu32 " did not take %s of channel %s of %s/%" PRIu32
                      ": %s",
                      pc->node, pc->snap ? "the state" : "records", st->channel, st->topic, st->p,
                      status != 0   ? (err != NULL ? err : tn_strerror(status))
                      : code == 409 ? "fenced (stale leader epoch) or another data directory"
                                    : "refused");
    }
    tn_free(pc);
    if (st->dead) {
        if (st->refs == 0)
            stream_free(st);
        maybe_free(s);
        return;
    }
    if (s->closing) {
        maybe_free(s);
        return;
    }
    tn_pstate_t ps;
    if (s->o.pstate(s->o.pstate_arg, st->topic, st->p, &ps) != 0) {
        stream_kill(st, TN_EFENCED);
        return;
    }
    if (stream_check(st, &ps))
        pump(st);
}

/* The engine's channel partition of (topic, channel, p) when this node
 * serves it (its log open here), else NULL. Borrowed for the tick. */
/* The stamp of the engine's channel (queue.h tn_channel_t.stamp; 0: not
 * known), which the leader's calls carry so that a follower writes them
 * only into its own channel of that record. */
static uint64_t engine_stamp(tn_setrepl_t *s, const char *topic, const char *channel)
{
    tn_topic_t *t = s->o.broker != NULL ? tn_broker_topic_find(s->o.broker, topic) : NULL;
    if (t == NULL)
        return 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (!ch->deleted && strcmp(ch->name, channel) == 0)
            return ch->stamp;
    return 0;
}

static tn_chpart_t *engine_chpart(tn_setrepl_t *s, const char *topic, uint32_t p,
                                  const char *channel)
{
    tn_topic_t *t = NULL;
    tn_channel_t *ch = NULL;
    if (s->o.broker == NULL ||
        tn_broker_topic(s->o.broker, topic, strlen(topic), false, 0, NULL, &t) != 0 ||
        t->state != TN_OBJ_READY || p >= t->nparts || t->parts[p]->remote ||
        tn_topic_channel(t, channel, strlen(channel), false, NULL, &ch) != 0 ||
        ch->state != TN_OBJ_READY || ch->parts == NULL || ch->parts[p] == NULL)
        return NULL;
    return ch->parts[p]->cl != NULL ? ch->parts[p] : NULL;
}

static void call_out(tn_setrepl_t *s, stream_t *st, peer_t *pe, pcall_t *pc)
{
    s->st.calls++;
    pc->prev = NULL;
    pc->next = s->calls;
    if (s->calls != NULL)
        s->calls->prev = pc;
    s->calls = pc;
    pe->inflight = true;
    st->refs++;
    s->busy++;
}

/* Send pe the channel's whole state as the engine has it now: the live
 * cursor, which holds every record queued to the log so far (the log's
 * submitted count, seq here), durable or not; the records after seq
 * follow as SETTLE_REPL once installed. */
static void send_snapshot(stream_t *st, peer_t *pe, const char *addr)
{
    tn_setrepl_t *s = st->s;
    tn_chpart_t *cp = engine_chpart(s, st->topic, st->p, st->channel);
    pcall_t *pc = tn_malloc(sizeof(*pc));
    if (cp == NULL || addr == NULL || pc == NULL) {
        tn_free(pc);
        peer_failed(pe);
        return;
    }
    uint64_t seq = tn_chanlog_submitted(cp->cl);
    uint64_t inc = member_inc(s, pe->node);
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_chansnap_encode(&b, st->topic, st->p, st->epoch, st->channel, st->id, seq, inc,
                                     &cp->cur, engine_stamp(s, st->topic, st->channel));
    if (rc == 0) {
        *pc = (pcall_t){.st = st, .node = pe->node, .last = seq, .snap = true, .inc = inc};
        rc = tn_rpc_call(s->o.rpc, addr, TN_OP_CHAN_SNAP, tn_buf_data(&b), tn_buf_size(&b),
                         s->o.call_timeout_ms, on_push_reply, pc, &pc->call);
    }
    tn_buf_fini(&b);
    if (rc != 0) {
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "setrepl: cannot send node %" PRIu32 " the state of channel %s of %s/%" PRIu32
                  ": %s",
                  pe->node, st->channel, st->topic, st->p, tn_strerror(rc));
        tn_free(pc);
        s->st.call_failures++;
        peer_failed(pe);
        return;
    }
    s->st.snapshots_sent++;
    call_out(s, st, pe, pc);
}

/* Send each follower that has no call out what it lacks: its snapshot
 * first, then the records after it. */
static void pump(stream_t *st)
{
    tn_setrepl_t *s = st->s;
    int64_t now = tn_now_mono_ms();
    for (uint32_t i = 0; i < st->npeers; i++) {
        peer_t *pe = &st->peers[i];
        if (pe->gone || pe->inflight || pe->retry_at > now)
            continue;
        if (pe->synced && pe->acked + 1 < st->low) {
            /* Records it lacks were dropped since its last check (the
             * pass that decided them, evaluate): the rest after a gap
             * would make it look caught up without them. */
            pe->synced = false;
            pe->counted = false;
            pe->uncount_at = 0;
        }
        if (!pe->synced) {
            send_snapshot(st, pe, s->o.rpc != NULL ? member_addr(s, pe->node) : NULL);
            continue;
        }
        if (pe->acked >= st->high)
            continue;
        uint64_t first = pe->acked + 1;
        uint64_t n64 = st->high - first + 1;
        uint32_t n = n64 > TN_SETREPL_MAX ? TN_SETREPL_MAX : (uint32_t)n64;
        const char *addr = s->o.rpc != NULL ? member_addr(s, pe->node) : NULL;
        pcall_t *pc = tn_malloc(sizeof(*pc));
        if (addr == NULL || pc == NULL) {
            tn_free(pc);
            peer_failed(pe);
            continue;
        }
        /* The data directory it is synced for: one made anew since (a
         * wiped disk this node has not seen registered yet) refuses the
         * records (409) rather than confirm them without the state
         * before them. */
        uint64_t inc = pe->no_inc ? 0 : pe->inc;
        tn_buf_t b;
        tn_buf_init(&b);
        int rc = tn_wire_setrepl_encode(&b, st->topic, st->p, st->epoch, st->channel, st->id, first,
                                        st->base_frontier, st->recs + (first - st->low), n,
                                        engine_stamp(s, st->topic, st->channel), inc);
        if (rc == 0) {
            *pc = (pcall_t){.st = st, .node = pe->node, .last = first + n - 1, .inc = inc};
            rc = tn_rpc_call(s->o.rpc, addr, TN_OP_SETTLE_REPL, tn_buf_data(&b), tn_buf_size(&b),
                             s->o.call_timeout_ms, on_push_reply, pc, &pc->call);
        }
        tn_buf_fini(&b);
        if (rc != 0) {
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "setrepl: cannot call node %" PRIu32 " for channel %s of %s/%" PRIu32 ": %s",
                      pe->node, st->channel, st->topic, st->p, tn_strerror(rc));
            tn_free(pc);
            s->st.call_failures++;
            peer_failed(pe);
            continue;
        }
        s->st.pushed_records += n;
        call_out(s, st, pe, pc);
    }
}

/* The engine's hooks (queue.h tn_chan_repl_t). */
static bool hook_replicated(void *arg, const char *topic, uint32_t p)
{
    tn_setrepl_t *s = arg;
    tn_pstate_t ps;
    return !s->closing && s->o.pstate(s->o.pstate_arg, topic, p, &ps) == 0;
}

static void hook_durable(void *arg, const char *topic, const char *channel, uint32_t p,
                         uint64_t seq, const tn_walrec_t *rec, uint64_t frontier)
{
    tn_setrepl_t *s = arg;
    tn_pstate_t ps;
    int rc = s->o.pstate(s->o.pstate_arg, topic, p, &ps);
    stream_t *st = stream_find(s, topic, p, channel);
    if (st != NULL && (rc != 0 || seq != st->high + 1 || ps.leader_epoch != st->epoch)) {
        /* Another epoch, or a log opened again: a new stream. */
        stream_kill(st, TN_EFENCED);
        st = NULL;
    }
    if (rc != 0 || ps.leader != s->o.node_id) {
        tn_broker_chan_repl_done(s->o.broker, topic, channel, p, seq, TN_EFENCED);
        return;
    }
    if (st == NULL && (st = stream_new(s, topic, p, channel, ps.leader_epoch, seq)) == NULL) {
        tn_broker_chan_repl_done(s->o.broker, topic, channel, p, seq, UV_ENOMEM);
        return;
    }
    if (st->high < st->low)
        st->base_frontier = frontier; /* its first record */
    size_t have = (size_t)(st->high - st->low + 1);
    if (have == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        tn_walrec_t *r = tn_realloc(st->recs, cap * sizeof(*r));
        if (r == NULL) {
            stream_kill(st, UV_ENOMEM);
            tn_broker_chan_repl_done(s->o.broker, topic, channel, p, seq, UV_ENOMEM);
            return;
        }
        st->recs = r;
        st->cap = cap;
    }
    st->recs[have] = *rec;
    st->high = seq;
    if (stream_check(st, &ps))
        pump(st);
}

static bool is_replica(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == node)
            return true;
    return false;
}

/* Whether this node follows the partition of ps (NULL: not replicated). */
static bool follows_here(const tn_setrepl_t *s, const tn_pstate_t *ps)
{
    return ps != NULL && ps->leader != s->o.node_id && is_replica(ps, s->o.node_id);
}

static void flog_close(flog_t *fl);
static int engine_channel(tn_setrepl_t *s, const char *topic, uint32_t p, const char *channel,
                          uint64_t *gen, uint64_t *stamp, bool *held);

static void on_tick(uv_timer_t *t)
{
    tn_setrepl_t *s = t->data;
    stream_t *next;
    for (stream_t *st = s->streams; st != NULL; st = next) {
        next = st->next;
        tn_pstate_t ps;
        if (s->o.pstate(s->o.pstate_arg, st->topic, st->p, &ps) != 0) {
            stream_kill(st, TN_EFENCED);
            continue;
        }
        if (stream_check(st, &ps))
            pump(st);
    }
    /* Follower logs of partitions no longer followed here, and of
     * channels deleted here since they opened (engine_channel). */
    flog_t *fnext;
    for (flog_t *fl = s->flogs; fl != NULL; fl = fnext) {
        fnext = fl->next;
        if (fl->closing)
            continue;
        tn_pstate_t ps;
        bool found = s->o.pstate(s->o.pstate_arg, fl->topic, fl->p, &ps) == 0;
        uint64_t gen, stamp;
        bool held;
        if (!follows_here(s, found ? &ps : NULL) ||
            engine_channel(s, fl->topic, fl->p, fl->channel, &gen, &stamp, &held) != 0 ||
            gen != fl->gen)
            flog_close(fl); /* may free fl, never another */
    }
    /* The gate's yes answers that no longer stand. */
    for (vouch_t **pp = &s->vouched; *pp != NULL;) {
        tn_pstate_t ps;
        if (s->o.pstate(s->o.pstate_arg, (*pp)->topic, (*pp)->p, &ps) != 0 ||
            !vouch_holds(s, *pp, &ps))
            vouch_free(pp);
        else
            pp = &(*pp)->next;
    }
    /* Releases done with, once this node follows the partition again. */
    for (release_t **pp = &s->released; *pp != NULL;) {
        release_t *r = *pp;
        tn_pstate_t ps;
        if (r->pending == 0 && s->o.pstate(s->o.pstate_arg, r->topic, r->p, &ps) == 0 &&
            follows_here(s, &ps)) {
            *pp = r->next;
            tn_free(r->topic);
            tn_free(r);
        } else {
            pp = &r->next;
        }
    }
}

static void freq_free(freq_t *q)
{
    tn_free(q->rec_bytes);
    tn_free(q->ops);
    tn_free(q);
}

static void freq_answer(freq_t *q, int status)
{
    if (status == 0 && q->snap != NULL) {
        q->snap->st.snapshots_installed++;
        TN_LOG(TN_LOG_INFO,
               "setrepl: channel %s of %s/%" PRIu32
               ": installed the leader's state (stream %" PRIx64 ", as of record %" PRIu64 ")",
               q->w.channel, q->w.topic, q->w.partition, q->w.stream, q->snap_next - 1);
    }
    if (status == 0)
        tn_rpc_reply(q->req, 204, NULL, NULL, 0);
    else if (status == 421)
        tn_rpc_reply_error(q->req, 421, "this node does not follow the partition");
    else if (status == UV_ENOMEM)
        tn_rpc_reply_error(q->req, 503, "out of memory");
    else if (tn_io_nospace(status))
        tn_rpc_reply_error(q->req, 507, "the channel log found the disk full");
    else
        tn_rpc_reply_error(q->req, 500, "the channel log failed");
    freq_free(q);
}

static bool is_released(tn_setrepl_t *s, const char *topic, uint32_t p)
{
    for (release_t *r = s->released; r != NULL; r = r->next)
        if (r->p == p && strcmp(r->topic, topic) == 0)
            return true;
    return false;
}

static void flog_unlink_free(flog_t *fl)
{
    tn_setrepl_t *s = fl->s;
    for (flog_t **pp = &s->flogs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == fl) {
            *pp = fl->next;
            break;
        }
    release_t *rel = fl->rel;
    tn_free(fl->topic);
    tn_free(fl->channel);
    tn_free(fl);
    s->st.followed--;
    s->busy--;
    if (rel != NULL && --rel->pending == 0 && !rel->fired) {
        rel->fired = true;
        if (rel->cb != NULL)
            rel->cb(rel->arg);
    }
    maybe_free(s);
}

/* Answer the requests of fl whose records have all completed. */
static void flog_settle_waits(flog_t *fl)
{
    uint64_t done = tn_chanlog_completed(fl->cl);
    int err = tn_chanlog_err(fl->cl);
    freq_t **pp = &fl->waiting;
    while (*pp != NULL) {
        freq_t *q = *pp;
        if (q->target <= done) {
            *pp = q->next;
            freq_answer(q, q->status != 0 ? q->status : err);
        } else {
            pp = &q->next;
        }
    }
}

/* A record of fl failed alone for space (TN_WALOP_SPACE_OK), and with
 * it the rest of its round: no request waiting now may say its records
 * are on disk, and the leader's retry (from its last confirmed record)
 * writes them all again, none skipped (a record written twice changes
 * nothing: they set, never toggle, in stream order, and a REQ the log
 * has counts once: tn_cursor_apply). */
static void flog_space_failed(flog_t *fl, int status)
{
    for (freq_t *w = fl->waiting; w != NULL; w = w->next)
        if (w->status == 0)
            w->status = status;
    fl->stream = 0;
    fl->next_seq = 0;
}

static void on_follow_walop(tn_walop_t *op, int status)
{
    freq_t *q = op->data;
    flog_t *fl = q->fl;
    if (tn_io_nospace(status))
        flog_space_failed(fl, status);
    /* Any other failure is sticky in the log: tn_chanlog_err. */
    flog_settle_waits(fl);
}

static void on_flog_closed(tn_chanlog_t *cl)
{
    flog_t *fl = cl->data;
    fl->cl = NULL;
    flog_unlink_free(fl);
}

static void flog_close(flog_t *fl)
{
    fl->closing = true;
    if (fl->opening)
        return; /* closed when the open ends */
    for (freq_t *q = fl->queued; q != NULL;) {
        freq_t *n = q->next;
        freq_answer(q, 421);
        q = n;
    }
    fl->queued = NULL;
    if (fl->engine && fl->inflight > 0)
        return; /* freed when its records completed (on_engine_walop) */
    if (fl->cl == NULL) {
        flog_unlink_free(fl);
        return;
    }
    /* Queued records complete first; their requests are answered then. */
    fl->cl->data = fl;
    tn_chanlog_close(fl->cl, on_flog_closed);
}

/* An engine log's record completed: once all of fl's have, the requests
 * waiting are answered (records complete in the order queued, so every
 * one before is on disk too). */
static void on_engine_walop(tn_walop_t *op, int status)
{
    freq_t *q = op->data;
    flog_t *fl = q->fl;
    if (status != 0 && q->status == 0)
        q->status = status;
    if (tn_io_nospace(status))
        flog_space_failed(fl, status); /* the engine takes its cursor back */
    if (--fl->inflight > 0)
        return;
    freq_t *w = fl->waiting;
    fl->waiting = NULL;
    while (w != NULL) {
        freq_t *n = w->next;
        freq_answer(w, w->status);
        w = n;
    }
    if (fl->closing)
        flog_unlink_free(fl);
}

/* q's records from skip on, through the engine's log of the channel. */
static void engine_write(flog_t *fl, freq_t *q, uint32_t skip)
{
    tn_setrepl_t *s = fl->s;
    const tn_wire_setrepl_t *w = &q->w;
    q->fl = fl;
    for (uint32_t i = skip; i < w->count; i++) {
        tn_walrec_t rec;
        tn_wire_setrepl_rec(w, i, &rec);
        q->ops[i].data = q;
        int rc = tn_broker_chan_apply(s->o.broker, fl->topic, fl->channel, fl->p, &rec, &q->ops[i],
                                      on_engine_walop);
        if (rc != 0) {
            q->status = rc;
            break;
        }
        fl->inflight++;
        s->st.served_records++;
        fl->stream = w->stream;
        fl->next_seq = w->first_seq + i + 1;
    }
    /* Only records it queued count as written: after a refusal the
     * leader's retry must write the rest, not skip them. */
    if (q->status == 0 && fl->stream != w->stream) {
        fl->stream = w->stream;
        fl->next_seq = w->first_seq + w->count;
    }
    if (q->snap != NULL && q->status == 0)
        fl->next_seq = q->snap_next;
    if (fl->inflight == 0) {
        freq_answer(q, q->status);
        return;
    }
    q->next = fl->waiting;
    fl->waiting = q;
}

/* Queue q's records (those fl has not written yet) to fl's log. */
static void flog_write(flog_t *fl, freq_t *q)
{
    tn_setrepl_t *s = fl->s;
    const tn_wire_setrepl_t *w = &q->w;
    uint32_t skip = 0;
    if (q->snap != NULL) {
        /* A state: every record of it goes in (they only add settles). */
        fl->stream = 0;
    } else if (fl->stream == w->stream && fl->next_seq > w->first_seq) {
        uint64_t k = fl->next_seq - w->first_seq;
        skip = k > w->count ? w->count : (uint32_t)k;
    } else if (fl->stream == w->stream && fl->next_seq < w->first_seq) {
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "setrepl: channel %s of %s/%" PRIu32 ": records %" PRIu64 "..%" PRIu64
                  " of the leader's stream never arrived here",
                  fl->channel, fl->topic, fl->p, fl->next_seq, w->first_seq - 1);
    }
    if (fl->engine) {
        engine_write(fl, q, skip);
        return;
    }
    int err = tn_chanlog_err(fl->cl);
    if (err != 0) {
        freq_answer(q, err);
        return;
    }
    q->fl = fl;
    for (uint32_t i = skip; i < w->count; i++) {
        tn_walrec_t rec;
        tn_wire_setrepl_rec(w, i, &rec);
        q->ops[i].data = q;
        int rc = tn_chanlog_submit_ex(fl->cl, &q->ops[i], &rec, on_follow_walop, TN_WALOP_SPACE_OK);
        if (rc != 0) {
            q->status = rc;
            break;
        }
        s->st.served_records++;
        fl->stream = w->stream;
        fl->next_seq = w->first_seq + i + 1;
    }
    if (q->status == 0 && fl->stream != w->stream) { /* as in engine_write */
        fl->stream = w->stream;
        fl->next_seq = w->first_seq + w->count;
    }
    if (q->snap != NULL && q->status == 0)
        fl->next_seq = q->snap_next;
    /* Answered once everything queued to the log so far is on disk. */
    q->target = tn_chanlog_submitted(fl->cl);
    q->next = fl->waiting;
    fl->waiting = q;
    flog_settle_waits(fl);
}

static void open_work(uv_work_t *wk)
{
    flog_t *fl = wk->data;
    tn_cursor_t cur, init;
    tn_chanlog_t *cl = NULL;
    tn_cursor_init(&init, fl->base_frontier);
    int rc = tn_chanlog_open(fl->s->o.store, fl->topic, fl->p, fl->channel, &init, &cl, &cur);
    tn_cursor_fini(&init);
    if (rc == 0) {
        tn_cursor_fini(&cur);
        fl->cl = cl;
        rc = tn_chanlog_err(cl);
    }
    fl->open_err = rc;
}

static void open_done(uv_work_t *wk, int status)
{
    flog_t *fl = wk->data;
    fl->opening = false;
    if (status != 0 && fl->open_err == 0)
        fl->open_err = status;
    if (fl->open_err != 0)
        TN_LOG_RL(TN_LOG_ERROR, 10000, "setrepl: channel %s of %s/%" PRIu32 ": open failed: %s",
                  fl->channel, fl->topic, fl->p, tn_strerror(fl->open_err));
    if (fl->closing || fl->open_err != 0) {
        int answer = fl->closing ? 421 : fl->open_err;
        for (freq_t *q = fl->queued; q != NULL;) {
            freq_t *n = q->next;
            freq_answer(q, answer);
            q = n;
        }
        fl->queued = NULL;
        if (fl->cl != NULL) {
            fl->closing = true;
            fl->cl->data = fl;
            tn_chanlog_close(fl->cl, on_flog_closed);
        } else {
            flog_unlink_free(fl);
        }
        return;
    }
    /* In arrival order: the list was built newest first. */
    freq_t *rev = NULL;
    for (freq_t *q = fl->queued; q != NULL;) {
        freq_t *n = q->next;
        q->next = rev;
        rev = q;
        q = n;
    }
    fl->queued = NULL;
    for (freq_t *q = rev; q != NULL;) {
        freq_t *n = q->next;
        flog_write(fl, q);
        q = n;
    }
}

static flog_t *flog_get(tn_setrepl_t *s, const char *topic, uint32_t p, const char *channel,
                        uint64_t base_frontier, bool engine, uint64_t gen)
{
    for (flog_t *fl = s->flogs; fl != NULL; fl = fl->next)
        if (fl->p == p && strcmp(fl->topic, topic) == 0 && strcmp(fl->channel, channel) == 0)
            return fl;
    flog_t *fl = tn_calloc(1, sizeof(*fl));
    if (fl == NULL)
        return NULL;
    fl->topic = tn_strdup(topic);
    fl->channel = tn_strdup(channel);
    if (fl->topic == NULL || fl->channel == NULL) {
        tn_free(fl->topic);
        tn_free(fl->channel);
        tn_free(fl);
        return NULL;
    }
    fl->s = s;
    fl->p = p;
    fl->base_frontier = base_frontier;
    fl->engine = engine;
    fl->gen = gen;
    fl->opening = !engine;
    fl->work.data = fl;
    if (!engine && uv_queue_work(s->o.loop, &fl->work, open_work, open_done) != 0) {
        tn_free(fl->topic);
        tn_free(fl->channel);
        tn_free(fl);
        return NULL;
    }
    fl->next = s->flogs;
    s->flogs = fl;
    s->st.followed++;
    s->busy++;
    return fl;
}

/* Whether the engine's topic t is not the one the metastore records under
 * its name (an old topic of the name, deleted and made again while this
 * node lagged, which the catalog deletes here with its files). */
static bool topic_stale(tn_setrepl_t *s, const tn_topic_t *t)
{
    if (s->o.meta == NULL || t->record_created_ms == 0)
        return false;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(s->o.meta), t->name);
    return e != NULL && e->rec.created_at_ms != t->record_created_ms;
}

/* The engine's channel (topic, channel) that this node's follower log of
 * it on partition p belongs to: *gen, which channel object it is
 * (queue.h tn_channel_t.gen), *stamp, which metastore record it is made
 * from (tn_channel_t.stamp, 0: not known), and *held, whether the engine has its log
 * of p open (a partition it led and set aside, or opened from disk at
 * start: two writers must never share one log, so the records then go
 * through the engine). 0, or UV_EAGAIN while the engine has no such
 * channel: not made here yet, or being deleted (its files go, every
 * partition's, this node's followed ones too), or its topic is an old
 * one of the name (stale: deleted here with its files). A follower
 * writes a channel's records only while the engine has that channel, to
 * files of that channel: a log kept open across a deletion wrote the
 * records of the channel made again into the deleted files, and once
 * promoted the node made that channel anew at offset 0. No engine (unit
 * tests of the handler alone): 0, gen 0, not held. */
static int engine_channel(tn_setrepl_t *s, const char *topic, uint32_t p, const char *channel,
                          uint64_t *gen, uint64_t *stamp, bool *held)
{
    *gen = 0;
    *stamp = 0;
    *held = false;
    if (s->o.broker == NULL)
        return 0;
    tn_topic_t *t = tn_broker_topic_find(s->o.broker, topic);
    if (t == NULL || t->state == TN_OBJ_DELETING || t->state == TN_OBJ_FAILED || topic_stale(s, t))
        return UV_EAGAIN;
    tn_channel_t *ch = t->channels;
    while (ch != NULL && strcmp(ch->name, channel) != 0)
        ch = ch->next;
    if (ch == NULL || ch->memory || ch->deleted || ch->state == TN_OBJ_DELETING ||
        ch->state == TN_OBJ_FAILED)
        return UV_EAGAIN;
    *gen = ch->gen;
    *stamp = ch->stamp;
    *held = ch->state == TN_OBJ_READY && p < t->nparts && ch->parts != NULL &&
            ch->parts[p] != NULL && ch->parts[p]->cl != NULL;
    return 0;
}

/* Hand q (its records copied, its ops made) to its channel's follower
 * log: written now, queued while the log opens, or refused while the
 * engine's channel is not there (engine_channel) or the log changes hands
 * (held: the engine holds it; gen: another channel object than the log's,
 * the channel deleted and made again). Answers q on failure. */
static void freq_submit(tn_setrepl_t *s, tn_rpc_req_t *req, freq_t *q)
{
    uint64_t gen, stamp;
    bool held;
    if (s->o.copy_moving != NULL &&
        s->o.copy_moving(s->o.copy_moving_arg, q->w.topic, q->w.partition)) {
        TN_LOG_RL(TN_LOG_NOTICE, 10000,
                  "setrepl: channel %s of %s/%" PRIu32
                  ": this copy is on its way to or from quarantine/; its channel state waits",
                  q->w.channel, q->w.topic, q->w.partition);
        tn_rpc_reply_error(req, 503, "this copy is being moved (quarantine marks); retry");
        freq_free(q);
        return;
    }
    if (s->o.copy_ready != NULL &&
        !s->o.copy_ready(s->o.copy_ready_arg, q->w.topic, q->w.partition)) {
        TN_LOG_RL(TN_LOG_NOTICE, 10000,
                  "setrepl: channel %s of %s/%" PRIu32
                  ": this node's copy of the partition is not open yet (marked a replica's); "
                  "its channel state waits",
                  q->w.channel, q->w.topic, q->w.partition);
        tn_rpc_reply_error(req, 503, "this node's copy of the partition is not open yet; retry");
        freq_free(q);
        return;
    }
    if (engine_channel(s, q->w.topic, q->w.partition, q->w.channel, &gen, &stamp, &held) != 0) {
        tn_rpc_reply_error(req, 503, "channel not made here yet, or being deleted; retry");
        freq_free(q);
        return;
    }
    if (s->o.broker != NULL && q->w.chan_stamp != 0 && stamp != q->w.chan_stamp) {
        /* Another channel of the name (deleted and made again; this
         * node's catalog has not replaced it yet), or one whose record the
         * catalog has not matched yet (stamp 0): the records are not its. */
        s->st.other_channel++;
        TN_LOG_RL(TN_LOG_NOTICE, 10000,
                  "setrepl: channel %s of %s/%" PRIu32 ": the leader's is stamped %" PRIx64
                  ", this node's %" PRIx64 " (made again, or not matched to its record yet); "
                  "its state waits",
                  q->w.channel, q->w.topic, q->w.partition, q->w.chan_stamp, stamp);
        tn_rpc_reply_error(req, 503, "this node's channel is another one of the name; retry");
        freq_free(q);
        return;
    }
    flog_t *fl =
        flog_get(s, q->w.topic, q->w.partition, q->w.channel, q->w.base_frontier, held, gen);
    if (fl == NULL) {
        freq_answer(q, UV_ENOMEM);
        return;
    }
    if (!fl->closing && fl->gen != gen)
        flog_close(fl); /* the deleted channel's: its queued records complete first */
    if (fl->closing || fl->engine != held) {
        /* Closing, or the engine took its log up or gave it up: the
         * leader tries again once this one is gone. */
        if (!fl->closing && !fl->opening && fl->inflight == 0 && fl->waiting == NULL)
            flog_close(fl);
        tn_rpc_reply_error(req, 503, "channel log changing hands; retry");
        freq_free(q);
        return;
    }
    if (fl->opening) {
        q->next = fl->queued;
        fl->queued = q;
        return;
    }
    flog_write(fl, q);
}
static void on_settle_repl(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_setrepl_t *s = arg;
    if (s->closing) {
        tn_rpc_reply_error(req, 503, "shutting down");
        return;
    }
    freq_t *q = tn_calloc(1, sizeof(*q));
    if (q == NULL) {
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    q->req = req;
    char msg[256];
    if (tn_wire_setrepl_decode(payload, len, &q->w, msg, sizeof(msg)) != 0) {
        tn_rpc_reply_error(req, 400, msg);
        freq_free(q);
        return;
    }
    if (!tn_name_valid_any(q->w.topic, strlen(q->w.topic)) ||
        !tn_name_valid(q->w.channel, strlen(q->w.channel))) {
        tn_rpc_reply_error(req, 400, "invalid topic or channel name");
        freq_free(q);
        return;
    }
    tn_pstate_t ps;
    if (s->o.pstate(s->o.pstate_arg, q->w.topic, q->w.partition, &ps) != 0 ||
        !follows_here(s, &ps) || is_released(s, q->w.topic, q->w.partition)) {
        freq_answer(q, 421);
        return;
    }
    if (q->w.leader_epoch < ps.leader_epoch) {
        s->st.fenced++;
        tn_rpc_reply_error(req, 409, "stale leader epoch (fenced)");
        freq_free(q);
        return;
    }
    if (q->w.leader_epoch > ps.leader_epoch) {
        tn_rpc_reply_error(req, 503, "leader epoch newer than this node knows; retry");
        freq_free(q);
        return;
    }
    if (q->w.incarnation != 0 && s->o.incarnation != 0 && q->w.incarnation != s->o.incarnation) {
        /* The leader holds another data directory of this node synced
         * (this one was made anew: a wiped disk), before it saw the new
         * one: these records, without the channel's state before them,
         * must not count as held here. It sends a snapshot next. */
        s->st.other_incarnation++;
        TN_LOG_RL(TN_LOG_NOTICE, 10000,
                  "setrepl: channel %s of %s/%" PRIu32 ": the leader's records are meant for data "
                  "directory %" PRIx64 ", this node's is %" PRIx64 "; they wait for its state",
                  q->w.channel, q->w.topic, q->w.partition, q->w.incarnation, s->o.incarnation);
        tn_rpc_reply_error(req, 409,
                           "the records are meant for another data directory (incarnation)");
        freq_free(q);
        return;
    }
    /* The records outlive the payload while the log opens. */
    size_t nb = (size_t)q->w.count * TN_SETREPL_REC_SIZE;
    q->rec_bytes = tn_malloc(nb);
    q->ops = tn_calloc(q->w.count, sizeof(*q->ops));
    if (q->rec_bytes == NULL || q->ops == NULL) {
        freq_answer(q, UV_ENOMEM);
        return;
    }
    memcpy(q->rec_bytes, q->w.recs, nb);
    q->w.recs = q->rec_bytes;
    freq_submit(s, req, q);
}

/* The records that bring a channel log to at least state c: everything
 * below its frontier, the offsets it finished above, its requeued entries
 * (due time, attempts), pause, the timeout count. Applied over what a log
 * holds they only add settles (a FIN or REQ the log has is idempotent; a
 * REQ of an offset settled there is ignored): a follower whose log had
 * more keeps it. Encoded as SETTLE_REPL records into *out (tn_malloc'd,
 * transferred to the caller), *n of them. 0 or UV_ENOMEM. */
static int state_records(const tn_cursor_t *c, uint8_t **out, uint32_t *n)
{
    uint64_t count = 2 + (c->frontier > 0) + (uint64_t)c->nsettled + c->nrequeued;
    if (count > UINT32_MAX / TN_SETREPL_REC_SIZE)
        return UV_ENOMEM;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_buf_reserve(&b, (size_t)count * TN_SETREPL_REC_SIZE);
    uint32_t k = 0;
#define PUT(op_, off_, due_, att_, val_)                                                           \
    do {                                                                                           \
        rc = rc != 0 ? rc : tn_wire_put_u8(&b, (op_));                                             \
        rc = rc != 0 ? rc : tn_wire_put_u64(&b, (off_));                                           \
        rc = rc != 0 ? rc : tn_wire_put_i64(&b, (due_));                                           \
        rc = rc != 0 ? rc : tn_wire_put_u32(&b, (att_));                                           \
        rc = rc != 0 ? rc : tn_wire_put_u64(&b, (val_));                                           \
        k++;                                                                                       \
    } while (0)
    if (c->frontier > 0)
        PUT(TN_WAL_EMPTY, c->frontier, 0, 0, 0);
    for (uint32_t i = 0; i < c->nsettled; i++)
        PUT(TN_WAL_FIN, c->settled[i], 0, 0, 0);
    for (uint32_t i = 0; i < c->nrequeued; i++)
        PUT(TN_WAL_REQ, c->requeued[i].offset, c->requeued[i].due_ms, c->requeued[i].attempts, 0);
    PUT(TN_WAL_PAUSE, 0, 0, 0, c->paused ? 1 : 0);
    PUT(TN_WAL_TIMEOUTS, 0, 0, 0, c->timeout_count);
#undef PUT
    uint8_t *bytes = rc == 0 ? tn_malloc(b.len) : NULL;
    if (rc == 0 && bytes == NULL)
        rc = UV_ENOMEM;
    if (rc == 0) {
        memcpy(bytes, b.base, b.len);
        *out = bytes;
        *n = k;
    }
    tn_buf_fini(&b);
    return rc;
}

static void on_chan_snap(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_setrepl_t *s = arg;
    if (s->closing) {
        tn_rpc_reply_error(req, 503, "shutting down");
        return;
    }
    tn_wire_chansnap_t w;
    char msg[256];
    int rc = tn_wire_chansnap_decode(payload, len, &w, msg, sizeof(msg));
    if (rc != 0) {
        tn_cursor_fini(&w.state);
        tn_rpc_reply_error(req, rc == UV_ENOMEM ? 503 : 400, msg);
        return;
    }
    if (!tn_name_valid_any(w.topic, strlen(w.topic)) ||
        !tn_name_valid(w.channel, strlen(w.channel))) {
        tn_cursor_fini(&w.state);
        tn_rpc_reply_error(req, 400, "invalid topic or channel name");
        return;
    }
    tn_pstate_t ps;
    if (s->o.pstate(s->o.pstate_arg, w.topic, w.partition, &ps) != 0 || !follows_here(s, &ps) ||
        is_released(s, w.topic, w.partition)) {
        tn_cursor_fini(&w.state);
        tn_rpc_reply_error(req, 421, "this node does not follow the partition");
        return;
    }
    if (w.leader_epoch < ps.leader_epoch) {
        tn_cursor_fini(&w.state);
        s->st.fenced++;
        tn_rpc_reply_error(req, 409, "stale leader epoch (fenced)");
        return;
    }
    if (w.leader_epoch > ps.leader_epoch) {
        tn_cursor_fini(&w.state);
        tn_rpc_reply_error(req, 503, "leader epoch newer than this node knows; retry");
        return;
    }
    if (w.incarnation != 0 && s->o.incarnation != 0 && w.incarnation != s->o.incarnation) {
        tn_cursor_fini(&w.state);
        tn_rpc_reply_error(req, 409, "the state is meant for another data directory (incarnation)");
        return;
    }
    freq_t *q = tn_calloc(1, sizeof(*q));
    uint8_t *bytes = NULL;
    uint32_t n = 0;
    if (q == NULL || state_records(&w.state, &bytes, &n) != 0) {
        tn_free(q);
        tn_cursor_fini(&w.state);
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    q->req = req;
    q->snap = s;
    q->snap_next = w.seq + 1;
    memcpy(q->w.topic, w.topic, sizeof(q->w.topic));
    memcpy(q->w.channel, w.channel, sizeof(q->w.channel));
    q->w.partition = w.partition;
    q->w.leader_epoch = w.leader_epoch;
    q->w.stream = w.stream;
    q->w.first_seq = 1;
    q->w.base_frontier = w.state.frontier;
    q->w.count = n;
    q->w.recs = bytes;
    q->w.chan_stamp = w.chan_stamp;
    q->rec_bytes = bytes; /* transferred: freq_free frees it */
    tn_cursor_fini(&w.state);
    q->ops = tn_calloc(n, sizeof(*q->ops));
    if (q->ops == NULL) {
        freq_answer(q, UV_ENOMEM);
        return;
    }
    freq_submit(s, req, q);
}

/* --- lifecycle and the manager's calls ------------------------------------------------- */

int tn_setrepl_new(const tn_setrepl_opts_t *opts, tn_setrepl_t **out)
{
    tn_setrepl_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->o = *opts;
    if (s->o.call_timeout_ms == 0)
        s->o.call_timeout_ms = 5000;
    if (s->o.keep_max == 0)
        s->o.keep_max = TN_SETREPL_KEEP_MAX;
    if (s->o.uncount_ms == 0)
        s->o.uncount_ms = UNCOUNT_MS;
    int rc = uv_timer_init(s->o.loop, &s->tick);
    if (rc != 0) {
        tn_free(s);
        return rc;
    }
    s->tick.data = s;
    s->busy = 1; /* the timer */
    uv_timer_start(&s->tick, on_tick, TICK_MS, TICK_MS);
    if (s->o.broker != NULL) {
        tn_chan_repl_t h = {hook_replicated, hook_durable, s};
        tn_broker_set_chan_repl(s->o.broker, &h);
    }
    *out = s;
    return 0;
}

void tn_setrepl_set_rpc(tn_setrepl_t *s, tn_rpc_t *rpc)
{
    s->o.rpc = rpc;
}

void tn_setrepl_handlers(tn_setrepl_t *s, tn_rpc_handler_t *out, size_t *n)
{
    out[0] = (tn_rpc_handler_t){TN_OP_SETTLE_REPL, 0, on_settle_repl, s};
    out[1] = (tn_rpc_handler_t){TN_OP_CHAN_SNAP, 0, on_chan_snap, s};
    *n = TN_SETREPL_HANDLERS;
}

void tn_setrepl_pstate_changed(tn_setrepl_t *s, const char *topic, uint32_t p,
                               const tn_pstate_t *ps)
{
    if (s->closing)
        return;
    for (vouch_t **pp = &s->vouched; *pp != NULL;) {
        if ((*pp)->p == p && strcmp((*pp)->topic, topic) == 0 &&
            (ps == NULL || !vouch_holds(s, *pp, ps)))
            vouch_free(pp);
        else
            pp = &(*pp)->next;
    }
    stream_t *next;
    for (stream_t *st = s->streams; st != NULL; st = next) {
        next = st->next;
        if (st->p != p || strcmp(st->topic, topic) != 0)
            continue;
        if (stream_check(st, ps))
            pump(st);
    }
    if (follows_here(s, ps)) {
        /* Following again (demoted): a release no longer holds. */
        for (release_t **pp = &s->released; *pp != NULL;) {
            release_t *r = *pp;
            if (r->p == p && strcmp(r->topic, topic) == 0 && r->pending == 0) {
                *pp = r->next;
                tn_free(r->topic);
                tn_free(r);
            } else {
                pp = &r->next;
            }
        }
        return;
    }
    flog_t *fnext;
    for (flog_t *fl = s->flogs; fl != NULL; fl = fnext) {
        fnext = fl->next;
        if (!fl->closing && fl->p == p && strcmp(fl->topic, topic) == 0)
            flog_close(fl);
    }
}

static bool catch_up(tn_setrepl_t *s, const char *topic, uint32_t p, uint32_t node,
                     uint64_t incarnation, tn_pstate_t *ps_out)
{
    tn_pstate_t ps;
    tn_topic_t *t = NULL;
    if (s->closing || s->o.broker == NULL || s->o.pstate(s->o.pstate_arg, topic, p, &ps) != 0 ||
        ps.leader != s->o.node_id || !is_replica(&ps, node) ||
        tn_broker_topic(s->o.broker, topic, strlen(topic), false, 0, NULL, &t) != 0 ||
        t->state != TN_OBJ_READY || p >= t->nparts || t->parts[p]->remote)
        return false;
    bool all = true;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        if (ch->memory || ch->state == TN_OBJ_DELETING || ch->state == TN_OBJ_FAILED)
            continue;
        tn_chpart_t *cp = ch->state == TN_OBJ_READY && ch->parts != NULL ? ch->parts[p] : NULL;
        if (cp == NULL || cp->cl == NULL) {
            all = false; /* being made, or its log not open yet */
            continue;
        }
        stream_t *st = stream_find(s, topic, p, ch->name);
        if (st == NULL) {
            /* No settle since the log opened: a stream with no records
             * yet, whose next is the log's next completion. */
            st = stream_new(s, topic, p, ch->name, ps.leader_epoch,
                            tn_chanlog_completed(cp->cl) + 1);
            if (st == NULL) {
                all = false;
                continue;
            }
            st->base_frontier = cp->synced_frontier;
        }
        if (!stream_check(st, &ps)) {
            all = false;
            continue;
        }
        pump(st);
        peer_t *pe = peer_find(st, node);
        if (pe != NULL && pe->uncount_at != 0) {
            /* A call to it failed: no now, so it stops counting (the
             * core hears this answer before it can propose it again). */
            pe->counted = false;
            pe->uncount_at = 0;
            evaluate(st, &ps);
        }
        if (pe == NULL || pe->gone || !pe->synced || !pe->counted ||
            (incarnation != 0 && pe->inc != incarnation))
            all = false;
    }
    *ps_out = ps;
    return all;
}

bool tn_setrepl_catch_up(tn_setrepl_t *s, const char *topic, uint32_t p, uint32_t node,
                         uint64_t incarnation)
{
    tn_pstate_t ps;
    bool yes = catch_up(s, topic, p, node, incarnation, &ps);
    vouch_t **pp = vouch_find(s, topic, p, node);
    if (!yes) {
        if (*pp != NULL)
            vouch_free(pp);
        return false;
    }
    /* The core may propose node on this yes until the gate says no: it
     * counts in the partition's new streams meanwhile (out of memory:
     * no yes). */
    if (*pp == NULL) {
        vouch_t *v = tn_calloc(1, sizeof(*v));
        if (v == NULL || (v->topic = tn_strdup(topic)) == NULL) {
            tn_free(v);
            return false;
        }
        v->p = p;
        v->node = node;
        *pp = v;
    }
    (*pp)->move_id = ps.move_id;
    return true;
}

void tn_setrepl_release(tn_setrepl_t *s, const char *topic, uint32_t p, tn_setrepl_release_cb cb,
                        void *arg)
{
    release_t *r = NULL;
    for (release_t *x = s->released; x != NULL; x = x->next)
        if (x->p == p && strcmp(x->topic, topic) == 0)
            r = x;
    if (r == NULL && (r = tn_calloc(1, sizeof(*r))) != NULL) {
        if ((r->topic = tn_strdup(topic)) == NULL) {
            tn_free(r);
            r = NULL;
        } else {
            r->p = p;
            r->next = s->released;
            s->released = r;
        }
    }
    if (r != NULL) {
        r->cb = cb;
        r->arg = arg;
        r->fired = false;
    }
    flog_t *fnext;
    uint32_t n = 0;
    for (flog_t *fl = s->flogs; fl != NULL; fl = fnext) {
        fnext = fl->next;
        if (fl->p != p || strcmp(fl->topic, topic) != 0)
            continue;
        n++;
        if (r != NULL) {
            fl->rel = r;
            r->pending++;
        }
        if (!fl->closing)
            flog_close(fl);
    }
    if (r == NULL) {
        /* Out of memory for the record: the logs still close, in order. */
        if (cb != NULL && n == 0)
            cb(arg);
        else if (cb != NULL)
            TN_LOG(TN_LOG_ERROR, "setrepl: out of memory releasing %s/%" PRIu32, topic, p);
        return;
    }
    if (r->pending == 0 && !r->fired) {
        r->fired = true;
        if (cb != NULL)
            cb(arg);
    }
}

void tn_setrepl_stats(const tn_setrepl_t *s, tn_setrepl_stats_t *out)
{
    *out = s->st;
}

static void on_tick_closed(uv_handle_t *h)
{
    tn_setrepl_t *s = h->data;
    s->busy--;
    maybe_free(s);
}

static void maybe_free(tn_setrepl_t *s)
{
    if (!s->closing || s->busy > 0)
        return;
    while (s->vouched != NULL)
        vouch_free(&s->vouched);
    while (s->released != NULL) {
        release_t *r = s->released;
        s->released = r->next;
        tn_free(r->topic);
        tn_free(r);
    }
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    tn_free(s);
    if (cb != NULL)
        cb(arg);
}

void tn_setrepl_close(tn_setrepl_t *s, void (*cb)(void *arg), void *arg)
{
    s->closing = true;
    s->close_cb = cb;
    s->close_arg = arg;
    if (s->o.broker != NULL)
        tn_broker_set_chan_repl(s->o.broker, NULL);
    while (s->streams != NULL) {
        stream_t *st = s->streams;
        /* A call out keeps the stream; cancel it so its reply comes soon. */
        stream_kill(st, TN_ECLOSED);
    }
    /* Their replies come with TN_ECLOSED, from the loop. */
    for (pcall_t *pc = s->calls; pc != NULL; pc = pc->next)
        tn_rpc_call_cancel(pc->call);
    flog_t *fnext;
    for (flog_t *fl = s->flogs; fl != NULL; fl = fnext) {
        fnext = fl->next;
        if (!fl->closing)
            flog_close(fl);
    }
    uv_timer_stop(&s->tick);
    uv_close((uv_handle_t *)&s->tick, on_tick_closed);
}
