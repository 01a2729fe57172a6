/* Channels: creation, delivery, settling, timeouts and consumers. See
 * queue.h for the design and the invariants. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/fdroom.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "queue/internal.h"
#include "storage/io.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* --- channel log records ------------------------------------------------- */

typedef struct walop_s {
    tn_walop_t op;
    tn_chpart_t *cp;
    uint64_t frontier_after;
    int64_t start_ns;
    bool fin; /* a FIN: counted in cp->fins_unsynced until it is durable */
    /* A follower's record (tn_broker_chan_apply): the caller's request,
     * borrowed until its callback, which on_apply_walop runs. */
    tn_walop_t *outer;
    tn_walop_cb outer_cb;
    /* A dead letter's source FIN (record_dlq_fin): its move is done once
     * this is durable (dlq_done); dlq_cb (may be NULL) is told. */
    bool dlq;
    tn_dlq_done_cb dlq_cb;
    void *dlq_arg;
    struct walop_s *next_spare;
} walop_t;

/* Freed channel-log requests kept for reuse: one is needed per FIN. Loop
 * thread only. */
#define WALOP_SPARE 4096
static walop_t *walop_spare;
static uint32_t walop_nspare;

static walop_t *walop_get(void)
{
    walop_t *w = walop_spare;
    if (w != NULL) {
        walop_spare = w->next_spare;
        walop_nspare--;
        return w;
    }
    return tn_malloc(sizeof(*w));
}

void tn__channel_spares_free(void)
{
    while (walop_spare != NULL) {
        walop_t *w = walop_spare;
        walop_spare = w->next_spare;
        tn_free(w);
    }
    walop_nspare = 0;
}

static void walop_put(walop_t *w)
{
    if (walop_nspare >= WALOP_SPARE) {
        tn_free(w);
        return;
    }
    w->next_spare = walop_spare;
    walop_spare = w;
    walop_nspare++;
}

/* cp's log failed while running: no more deliveries from it, and the
 * node is not ready while it is open (tn_broker_logs_failed). */
static void log_broke(tn_chpart_t *cp)
{
    cp->broken = true;
    if (!cp->failed) {
        cp->failed = true;
        cp->ch->topic->broker->logs_failed++;
    }
}

/* How long a channel partition whose log found the disk full waits
 * before it checks for space again (full_check). */
#define FULL_RETRY_MS 1000

/* cp's log found the disk full (status): the records of that write
 * failed, but the live state applied them. Until full_resume takes it
 * back to the durable state, nothing is delivered from cp and nothing is
 * recorded (settles answer status, their leases kept), and the wake heap
 * brings full_check every FULL_RETRY_MS. */
static void log_full(tn_chpart_t *cp, int status)
{
    if (cp->full != 0)
        return;
    cp->full = status;
    cp->full_retry_ms = tn_now_mono_ms() + FULL_RETRY_MS;
    cp->ch->topic->broker->logs_full++;
    TN_LOG(TN_LOG_ERROR,
           "channel %s of %s/%" PRIu32
           ": log write failed (%s); delivery stops until space is freed",
           cp->ch->name, cp->ch->topic->name, cp->part->index, tn_strerror(status));
    tn__broker_rewake(cp);
}

/* cp's log failed with status (sticky) while running: say so once, and
 * stop (log_broke). TN_ECLOSED: the log is closing, nothing to say. */
static void log_failed_with(tn_chpart_t *cp, int status)
{
    if (cp->broken || status == TN_ECLOSED)
        return;
    log_broke(cp);
    TN_LOG(TN_LOG_ERROR, "channel %s of %s/%" PRIu32 ": log write failed (%s); delivery stops",
           cp->ch->name, cp->ch->topic->name, cp->part->index, tn_strerror(status));
}

/* Run the tn_channel_sync waits of cp that the completion of record
 * number done (the log's completed count) covers, with its status.
 * Records complete in the order queued, so a wait for seq is run by the
 * completion of record seq itself. */
static void sync_run(tn_chpart_t *cp, uint64_t done, int status)
{
    while (cp->sync_head != NULL && cp->sync_head->seq <= done) {
        tn_chan_sync_t *s = cp->sync_head;
        cp->sync_head = s->next;
        if (cp->sync_head == NULL)
            cp->sync_tail = NULL;
        s->next = NULL;
        s->cb(s, status);
    }
}

/* A dead-letter move of cp's channel ended with status: 0 once the
 * source's FIN is durable (the copy was before it), which is when the
 * move counts, once per message (a move whose FIN was refused goes back
 * to the channel and moves again); cb (may be NULL) is told either way. */
static void dlq_done(tn_chpart_t *cp, tn_dlq_done_cb cb, void *arg, int status)
{
    if (status == 0) {
        cp->ch->dlq_count++;
        cp->ch->topic->broker->dlq_moves++;
    }
    if (cb != NULL)
        cb(arg, status);
}

/* A dead-letter move of offset put its copy in the dead-letter topic, and
 * its source FIN was refused or failed: the next move settles the source
 * only (dead_letter). Out of memory: that move copies it again, as after
 * a restart. */
static void dlq_copied(tn_chpart_t *cp, uint64_t offset)
{
    (void)tn_u64map_put(&cp->dlq_copied, offset, cp);
}

/* Every offset of cp->dlq_copied forgotten: their next moves copy again. */
static void dlq_copied_clear(tn_chpart_t *cp)
{
    if (tn_u64map_size(&cp->dlq_copied) > 0) {
        tn_u64map_fini(&cp->dlq_copied);
        tn_u64map_init(&cp->dlq_copied);
    }
}

/* An EMPTY of below is durable: the offsets of cp->dlq_copied it settled
 * are not delivered again, so not moved again either (each deletion
 * changes the map: its walk starts over; the set is a few offsets at
 * most). */
static void dlq_copied_emptied(tn_chpart_t *cp, uint64_t below)
{
    size_t pos = 0;
    uint64_t offset;
    void *val;
    while (tn_u64map_next(&cp->dlq_copied, &pos, &offset, &val)) {
        if (offset >= below)
            continue;
        tn_u64map_del(&cp->dlq_copied, offset);
        pos = 0;
    }
}

static void on_walop(tn_walop_t *op, int status)
{
    walop_t *w = TN_CONTAINER_OF(op, walop_t, op);
    tn_chpart_t *cp = w->cp;
    tn_channel_t *ch = cp->ch;
    tn_broker_t *b = ch->topic->broker;
    if (status == 0 && w->op.rec.op == TN_WAL_FIN && tn_u64map_size(&cp->dlq_copied) > 0)
        tn_u64map_del(&cp->dlq_copied, w->op.rec.offset);
    else if (status == 0 && w->op.rec.op == TN_WAL_EMPTY && tn_u64map_size(&cp->dlq_copied) > 0)
        dlq_copied_emptied(cp, w->op.rec.offset);
    else if (status != 0 && w->dlq)
        dlq_copied(cp, w->op.rec.offset);
    if (w->dlq)
        dlq_done(cp, w->dlq_cb, w->dlq_arg, status);
    if (status == 0) {
        tn_hist_observe(&b->walop_hist, tn_now_mono_ns() - w->start_ns);
        /* Once a record failed for space (full), the live frontier may
         * count its FIN while the log lacks it: the bound GC reclaims
         * below waits for full_resume's durable one. */
        if (cp->full == 0 && w->frontier_after > cp->synced_frontier)
            cp->synced_frontier = w->frontier_after;
        if (w->fin && cp->fins_unsynced > 0)
            cp->fins_unsynced--;
    } else if (tn_io_nospace(status) && cp->cl != NULL && tn_chanlog_err(cp->cl) == 0) {
        log_full(cp, status);
    } else {
        log_failed_with(cp, status);
    }
    tn_walrec_t rec = w->op.rec;
    uint64_t frontier = w->frontier_after;
    walop_put(w);
    /* The channel is held (busy) until after the waits ran. */
    if (cp->cl != NULL) {
        uint64_t seq = tn_chanlog_completed(cp->cl);
        const tn_chan_repl_t *rp = &b->chan_repl;
        if (status == 0 && rp->replicated != NULL &&
            rp->replicated(rp->arg, ch->topic->name, cp->part->index)) {
            /* Its waits end when the replicas have it too. */
            cp->repl_high = seq;
            rp->durable(rp->arg, ch->topic->name, ch->name, cp->part->index, seq, &rec, frontier);
        } else {
            /* Replication stopped (this node no longer leads the
             * partition) with records unconfirmed: their waits fail,
             * retryably, rather than end as if the replicas had them. */
            if (cp->repl_high > cp->settled_seq)
                sync_run(cp, cp->repl_high, TN_EFENCED);
            if (seq > cp->settled_seq)
                cp->settled_seq = seq;
            sync_run(cp, seq, status);
        }
    }
    ch->busy--;
    if (ch->deleted && ch->busy == 0)
        tn__channel_free(ch);
    tn__broker_work_done(b);
}

/* record, and *out (when not NULL) the request written (NULL for a
 * channel in memory). */
static int record_ex(tn_chpart_t *cp, const tn_walrec_t *rec, walop_t **out)
{
    if (cp->full != 0)
        return cp->full; /* nothing changed: log_full */
    walop_t *w = NULL;
    if (cp->cl != NULL && (w = walop_get()) == NULL)
        return UV_ENOMEM;
    if (w != NULL)
        w->dlq = false;
    uint64_t finished = cp->cur.finish_count;
    int rc = tn_cursor_apply(&cp->cur, rec);
    if (rc != 0) {
        if (w != NULL)
            walop_put(w);
        return rc;
    }
    if (cp->cl == NULL) {
        cp->synced_frontier = cp->cur.frontier;
        return 0;
    }
    w->cp = cp;
    w->frontier_after = cp->cur.frontier;
    w->start_ns = tn_now_mono_ns();
    w->fin = cp->cur.finish_count > finished; /* a FIN of an offset not settled before */
    w->op.data = w;
    rc = tn_chanlog_submit_ex(cp->cl, &w->op, rec, on_walop, TN_WALOP_SPACE_OK);
    if (rc != 0) {
        walop_put(w);
        if (!cp->broken) {
            if (rc != TN_ECLOSED)
                log_broke(cp);
            cp->broken = true;
            TN_LOG(TN_LOG_ERROR, "channel %s of %s/%" PRIu32 ": %s; delivery stops", cp->ch->name,
                   cp->ch->topic->name, cp->part->index, tn_strerror(rc));
        }
        return rc;
    }
    if (w->fin)
        cp->fins_unsynced++;
    cp->ch->busy++;
    cp->ch->topic->broker->workers++;
    if (out != NULL)
        *out = w;
    return 0;
}

/* Apply rec to the live cursor and, for a durable channel, write it. An
 * error before the cursor changed (out of memory) leaves everything as it
 * was; a refused submit (the log's sticky error) leaves the cursor applied
 * and the partition broken. */
static int record(tn_chpart_t *cp, const tn_walrec_t *rec)
{
    return record_ex(cp, rec, NULL);
}

/* The sticky error of cp's log (0 when it can take records). */
static int log_failed(const tn_chpart_t *cp)
{
    if (cp->cl == NULL)
        return 0;
    int err = tn_chanlog_err(cp->cl);
    return err != 0 ? err : cp->broken ? UV_EIO : cp->full;
}

static int record_fin(tn_chpart_t *cp, uint64_t offset)
{
    tn_walrec_t r = {.op = TN_WAL_FIN, .offset = offset};
    return record(cp, &r);
}

static void pend_or_rescan(tn_chpart_t *cp, uint64_t offset, uint32_t attempts, int64_t due_mono);

/* A message leased to no one whose FIN could not be recorded for want of
 * memory (nothing recorded, and no full_resume to bring it back) goes
 * back to the channel with attempts, due a second later as a move that
 * cannot start is (the scan finds it when that fails too). */
static void fin_back_later(tn_chpart_t *cp, uint64_t offset, uint32_t attempts)
{
    pend_or_rescan(cp, offset, attempts, tn_now_mono_ms() + 1000);
    tn__broker_rewake(cp);
    tn__broker_pump_later(cp->ch);
}

/* The FIN that ends a dead letter's move (its copy durable; the message
 * leased to no one): dlq_done runs once it is durable or refused. Out of
 * memory, it goes back to the channel with again attempts
 * (fin_back_later); a full log's take-back brings it back itself. */
static void record_dlq_fin(tn_chpart_t *cp, uint64_t offset, uint32_t again, tn_dlq_done_cb cb,
                           void *arg)
{
    tn_walrec_t r = {.op = TN_WAL_FIN, .offset = offset};
    walop_t *w = NULL;
    int rc = record_ex(cp, &r, &w);
    if (rc != 0 || w == NULL) {
        if (rc != 0)
            dlq_copied(cp, offset);
        if (rc == UV_ENOMEM)
            fin_back_later(cp, offset, again);
        dlq_done(cp, cb, arg, rc); /* refused, or a channel in memory: done */
        return;
    }
    w->dlq = true;
    w->dlq_cb = cb;
    w->dlq_arg = arg;
}

/* A control record the scan passed: settled, not a message. */
static int record_skip(tn_chpart_t *cp, uint64_t offset)
{
    tn_walrec_t r = {.op = TN_WAL_SKIP, .offset = offset};
    return record(cp, &r);
}

/* --- pending entries ------------------------------------------------------ */

static int pend_insert(tn_chpart_t *cp, tn__pend_t *pe, int64_t due_mono, int64_t now_mono)
{
    pe->ready = due_mono <= now_mono;
    if (pe->ready)
        return tn_heap_insert(&cp->ready, &pe->node, (int64_t)pe->offset);
    return tn_heap_insert(&cp->pending, &pe->node, due_mono);
}

static void pend_unlink(tn_chpart_t *cp, tn__pend_t *pe)
{
    if (tn_heap_contains(&pe->node))
        tn_heap_remove(pe->ready ? &cp->ready : &cp->pending, &pe->node);
}

/* Make offset wait until due_mono (at once when it is not in the future). */
static int pend_add(tn_chpart_t *cp, uint64_t offset, uint32_t attempts, int64_t due_mono)
{
    int64_t now = tn_now_mono_ms();
    tn__pend_t *pe = tn_u64map_get(&cp->pend_map, offset);
    if (pe != NULL) {
        pend_unlink(cp, pe);
        pe->attempts = attempts;
        if (pend_insert(cp, pe, due_mono, now) != 0) {
            tn_u64map_del(&cp->pend_map, offset);
            tn_free(pe);
            return UV_ENOMEM;
        }
        return 0;
    }
    pe = tn_malloc(sizeof(*pe));
    if (pe == NULL)
        return UV_ENOMEM;
    tn_heap_node_init(&pe->node);
    pe->offset = offset;
    pe->attempts = attempts;
    if (tn_u64map_put(&cp->pend_map, offset, pe) != 0) {
        tn_free(pe);
        return UV_ENOMEM;
    }
    if (pend_insert(cp, pe, due_mono, now) != 0) {
        tn_u64map_del(&cp->pend_map, offset);
        tn_free(pe);
        return UV_ENOMEM;
    }
    return 0;
}

/* pend_add, or, out of memory, the scan rewound to offset: it finds the
 * message again either way. */
static void pend_or_rescan(tn_chpart_t *cp, uint64_t offset, uint32_t attempts, int64_t due_mono)
{
    if (pend_add(cp, offset, attempts, due_mono) != 0 && cp->scan > offset)
        cp->scan = offset;
}

static void pend_free(tn_chpart_t *cp, tn__pend_t *pe)
{
    pend_unlink(cp, pe);
    tn_u64map_del(&cp->pend_map, pe->offset);
    tn_free(pe);
}

/* Move the entries that have come due into the ready heap. */
static void promote(tn_chpart_t *cp, int64_t now_mono)
{
    for (;;) {
        tn_heap_node_t *n = tn_heap_min(&cp->pending);
        if (n == NULL || n->key > now_mono)
            return;
        tn__pend_t *pe = TN_CONTAINER_OF(n, tn__pend_t, node);
        tn_heap_remove(&cp->pending, n);
        if (pend_insert(cp, pe, now_mono, now_mono) != 0) {
            /* Out of memory: leave it pending a little longer. */
            pe->ready = false;
            tn_heap_insert(&cp->pending, &pe->node, now_mono + 100);
            return;
        }
    }
}

/* Wall-clock ms to the monotonic clock the timers use. */
static int64_t wall_to_mono(int64_t wall_ms, int64_t now_wall, int64_t now_mono)
{
    return wall_ms <= now_wall ? now_mono : now_mono + (wall_ms - now_wall);
}

/* --- channel partitions ----------------------------------------------------- */

/* Take over *cur (moved in). */
int tn__chpart_init(tn_chpart_t *cp, tn_channel_t *ch, tn_part_t *part, tn_chanlog_t *cl,
                    tn_cursor_t *cur)
{
    tn_broker_t *b = ch->topic->broker;
    cp->ch = ch;
    cp->part = part;
    cp->cl = cl;
    cp->cur = *cur;
    memset(cur, 0, sizeof(*cur));
    tn_leases_init(&cp->leases, b->nonce_seed++ * 7919u);
    tn_heap_init(&cp->pending);
    tn_heap_init(&cp->ready);
    tn_u64map_init(&cp->pend_map);
    tn_u64map_init(&cp->dlq_copied);
    tn_heap_node_init(&cp->wake);
    cp->scan = cp->cur.frontier;
    cp->synced_frontier = cp->cur.frontier;
    if (cl != NULL && tn_chanlog_err(cl) != 0)
        cp->broken = true;
    int64_t now_wall = tn_now_wall_ms();
    int64_t now_mono = tn_now_mono_ms();
    for (uint32_t i = 0; i < cp->cur.nrequeued; i++) {
        const tn_requeue_t *r = &cp->cur.requeued[i];
        int rc = pend_add(cp, r->offset, r->attempts, wall_to_mono(r->due_ms, now_wall, now_mono));
        if (rc != 0)
            return rc;
    }
    /* Offsets GC removed by age are settled for this channel. */
    if (cp->cur.frontier < part->first_offset) {
        tn_walrec_t r = {.op = TN_WAL_EMPTY, .offset = part->first_offset};
        record(cp, &r);
        cp->scan = cp->cur.frontier;
    }
    return 0;
}

static void chpart_fini(tn_chpart_t *cp);

void tn__chpart_take_pause(tn_chpart_t *cp)
{
    tn_channel_t *ch = cp->ch;
    if (ch == NULL || cp->cl == NULL || cp->cur.paused == ch->paused || log_failed(cp) != 0)
        return;
    tn_walrec_t r = {.op = TN_WAL_PAUSE, .value = ch->paused ? 1 : 0};
    (void)record(cp, &r); /* its failure breaks cp, which says so */
}

int tn__chpart_reset(tn_chpart_t *cp, tn_chanlog_t *cl, tn_cursor_t *cur)
{
    tn_channel_t *ch = cp->ch;
    tn_part_t *part = cp->part;
    /* A remote partition's state is idle: no lease, nothing pending. */
    chpart_fini(cp);
    memset(cp, 0, sizeof(*cp));
    int rc = tn__chpart_init(cp, ch, part, cl, cur);
    if (rc == 0)
        tn__chpart_take_pause(cp);
    return rc;
}

static void chpart_fini(tn_chpart_t *cp)
{
    if (cp->ch == NULL)
        return;
    /* Waits end with their records (the channel is held until those
     * completed); one left here has no record to wait for any more. */
    sync_run(cp, UINT64_MAX, TN_ECLOSED);
    tn_broker_t *b = cp->ch->topic->broker;
    if (cp->failed)
        b->logs_failed--;
    if (cp->full != 0)
        b->logs_full--;
    if (tn_heap_contains(&cp->wake))
        tn_heap_remove(&b->wakes, &cp->wake);
    size_t pos = 0;
    uint64_t key;
    void *val;
    while (tn_u64map_next(&cp->leases.by_offset, &pos, &key, &val)) {
        tn_lease_t *l = val;
        if (l->owner == NULL)
            continue; /* a dead-letter move: not in the budget */
        b->inflight_bytes -= l->bytes;
        b->inflight_msgs--;
    }
    tn_leases_fini(&cp->leases);
    tn_heap_fini(&cp->pending);
    tn_heap_fini(&cp->ready);
    pos = 0;
    while (tn_u64map_next(&cp->pend_map, &pos, &key, &val))
        tn_free(val);
    tn_u64map_fini(&cp->pend_map);
    tn_u64map_fini(&cp->dlq_copied);
    tn_cursor_fini(&cp->cur);
}

/* The highest offset the cursor refers to, plus one (0 when none). */
static uint64_t cursor_end(const tn_cursor_t *c)
{
    uint64_t end = c->frontier;
    if (c->nsettled > 0 && c->settled[c->nsettled - 1] + 1 > end)
        end = c->settled[c->nsettled - 1] + 1;
    if (c->nrequeued > 0 && c->requeued[c->nrequeued - 1].offset + 1 > end)
        end = c->requeued[c->nrequeued - 1].offset + 1;
    return end;
}

static void on_advanced(tn_plog_advance_t *req, int status)
{
    tn_part_t *p = req->data;
    p->advancing = false;
    tn_broker_t *b = p->topic->broker;
    if (status != 0)
        TN_LOG(TN_LOG_ERROR, "partition %s/%" PRIu32 ": cannot skip lost offsets: %s",
               p->topic->name, p->index, tn_strerror(status));
    tn__broker_work_done(b);
}

/* A channel that refers to offsets its partition lost (an unsynced tail of
 * a write_ack or relaxed log, cut by a power failure) must never see them
 * assigned to new messages: move the log past them.
 *
 * Not a replicated partition's copy (its log has an epochs file):
 * its offsets are its leader's, and its channel state is the leader's too,
 * installed from the leader's snapshot while the copy is under way (a
 * move's target, a follower catching up), so it refers past what the copy
 * holds yet without anything lost. The replica manager fetches the rest
 * from that offset on (or cuts a diverged tail by the epochs); a skip would
 * leave a hole in the copy for good, which the copy would serve once it
 * leads (tests/cluster/test_move_faults.py, a move's target SIGKILLed
 * mid-copy). An ISR member's channels refer below the high watermark,
 * which its flushed log covers, so a power cut leaves no copy a lost tail
 * that its channels refer to. */
static void check_lost_tail(tn_chpart_t *cp)
{
    tn_part_t *p = cp->part;
    uint64_t end = cursor_end(&cp->cur);
    if (end <= tn_plog_written_next(p->plog) || p->advancing || tn_plog_is_replica(p->plog))
        return;
    TN_LOG(TN_LOG_WARN,
           "partition %s/%" PRIu32 ": channel %s refers to offsets up to %" PRIu64
           " but the log ends at %" PRIu64 " (unsynced tail lost); skipping them",
           p->topic->name, p->index, cp->ch->name, end, tn_plog_written_next(p->plog));
    p->advance.data = p;
    if (tn_plog_advance(p->plog, &p->advance, end, on_advanced) == 0) {
        p->advancing = true;
        p->topic->broker->workers++;
    }
}

/* --- channels --------------------------------------------------------------- */

static tn_channel_t *channel_new(tn_topic_t *t, const char *name, size_t len)
{
    tn_channel_t *ch = tn_calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->topic = t;
    ch->gen = ++t->broker->channel_gen;
    ch->name = tn_malloc(len + 1);
    ch->parts = tn_calloc(t->nparts, sizeof(*ch->parts));
    bool ok = ch->name != NULL && ch->parts != NULL;
    for (uint32_t i = 0; ok && i < t->nparts; i++)
        ok = (ch->parts[i] = tn_calloc(1, sizeof(tn_chpart_t))) != NULL;
    if (!ok) {
        for (uint32_t i = 0; ch->parts != NULL && i < t->nparts; i++)
            tn_free(ch->parts[i]);
        tn_free(ch->name);
        tn_free(ch->parts);
        tn_free(ch);
        return NULL;
    }
    memcpy(ch->name, name, len);
    ch->name[len] = '\0';
    ch->ephemeral = tn_name_ephemeral(name, len);
    ch->memory = ch->ephemeral || t->memory;
    return ch;
}

void tn__channel_free(tn_channel_t *ch)
{
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        chpart_fini(ch->parts[i]);
        tn_free(ch->parts[i]);
    }
    tn_free(ch->parts);
    tn_free(ch->name);
    tn_free(ch);
}

static void channel_link(tn_topic_t *t, tn_channel_t *ch)
{
    ch->next = t->channels;
    t->channels = ch;
}

static void channel_unlink(tn_channel_t *ch)
{
    tn_channel_t **pp = &ch->topic->channels;
    while (*pp != NULL && *pp != ch)
        pp = &(*pp)->next;
    if (*pp == ch)
        *pp = ch->next;
}

static tn_channel_t *channel_find(tn_topic_t *t, const char *name, size_t len)
{
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* A channel loaded at start whose checkpoint partition i lacks (lost or
 * removed by hand, a backup restored without it, or a growth of the topic
 * cut short by a crash): *made says it is made there, *init (the caller
 * finis it then) from the partition's first retained offset. Its position
 * there is unknown, so every retained record is delivered again rather
 * than any unsettled one skipped; a WAL left without its checkpoint cannot
 * be replayed (its frames apply to the checkpoint) and is cut. */
static int start_missing(tn_topic_t *t, uint32_t i, const char *name, tn_cursor_t *init, bool *made)
{
    bool ckpt, wal;
    int rc = tn_chanlog_probe(t->broker->store, t->name, i, name, &ckpt, &wal);
    if (rc != 0 || ckpt)
        return rc;
    tn_plog_stats_t st;
    tn_plog_stats(t->parts[i]->plog, &st);
    tn_cursor_init(init, st.first_offset);
    *made = true;
    if (tn_plog_is_replica(t->parts[i]->plog))
        /* A replicated partition's copy: a follower's has no file of a
         * channel until its leader's first settle of it reaches it, and
         * takes the channel's state from its leader (setrepl.h). */
        TN_LOG(TN_LOG_INFO,
               "partition %s/%" PRIu32 ": channel %s has no checkpoint here (a replicated "
               "partition's copy: its state comes from the leader): made at offset %" PRIu64,
               t->name, i, name, st.first_offset);
    else if (st.written_next > st.first_offset || wal)
        TN_LOG(TN_LOG_WARN,
               "partition %s/%" PRIu32 ": channel %s has no checkpoint here (other partitions "
               "have the channel)%s: made anew from the first retained offset %" PRIu64
               ", so its %" PRIu64 " retained messages here are delivered again",
               t->name, i, name, wal ? "; its WAL without a checkpoint is discarded" : "",
               st.first_offset, st.written_next - st.first_offset);
    else
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%" PRIu32 ": channel %s has no checkpoint here (an empty "
               "partition, as a growth cut short leaves): made at offset %" PRIu64,
               t->name, i, name, st.first_offset);
    return 0;
}

/* Whether this node's channel ch, its partitions loaded (made: those
 * that lacked its files), is paused; stamped: whether it has a stamp file
 * here (one that cannot be read counts). As its pause file says: the
 * partitions' own flags cannot say it, as they travel with their
 * partition (a move, a failover) and a follower's copy holds its
 * leader's, so the first partition opened would impose its flag on them
 * all. Without a pause file, or with one that cannot be read, the stamp
 * file tells which case it is, as this release writes the pause file
 * before the stamp (chstamp_work, chan_create_work) and removes it after
 * (chdel_work):
 * - a stamp: a directory of an earlier release, which kept the pause in
 *   the partitions only: paused when any partition that kept its files
 *   here says so, whatever its copy (a pause kept rather than deliveries
 *   resumed that someone stopped);
 * - no stamp: this node never recorded the channel; a copy of a
 *   partition came here with its leader's channel state, pause flag
 *   included, and the node stopped before its stamp job: unpaused, as no
 *   flag here is this node's (the notice names each that says paused).
 *   A restore has the backup's pause file (api/backup.c take_pauses)
 *   and the stamp ternctl restore writes beside it, unless the backup was
 *   made by a release before backups carried pause files: neither, so
 *   unpaused then too. */
static bool load_paused(const tn_channel_t *ch, const bool *made, bool stamped)
{
    const tn_topic_t *t = ch->topic;
    const char *name = ch->name;
    int paused = -1;
    int rc = tn_store_channel_pause_read(t->broker->store, t->name, name, &paused);
    if (rc != 0)
        TN_LOG(TN_LOG_WARN,
               "channel %s of %s: its pause file (%s%s) cannot be read (%s): paused if a "
               "partition here says so and the channel has a stamp here",
               name, t->name, name, TN_STORE_CHAN_PAUSE_SUFFIX, tn_strerror(rc));
    if (paused >= 0)
        return paused == 1;
    for (uint32_t i = 0; i < t->nparts; i++) {
        if (t->parts[i]->remote || made[i] || !ch->parts[i]->cur.paused)
            continue;
        if (stamped)
            return true;
        TN_LOG(TN_LOG_NOTICE,
               "channel %s of %s/%" PRIu32 ": paused in this copy of the partition, but the "
               "channel has neither a pause file nor a stamp here (a copy made here, its "
               "leader's channel state in it, before this node recorded the channel, or a "
               "restore of a backup made before backups carried pause files): not taken for "
               "this node's pause",
               name, t->name, i);
    }
    return false;
}

int tn__channel_load(tn_topic_t *t, const char *name)
{
    tn_channel_t *ch = channel_new(t, name, strlen(name));
    if (ch == NULL)
        return UV_ENOMEM;
    tn_broker_t *b = t->broker;
    bool *made = tn_calloc(t->nparts, sizeof(*made)); /* the partitions that lacked it */
    if (made == NULL) {
        tn__channel_free(ch);
        return UV_ENOMEM;
    }
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_chanlog_t *cl;
        tn_cursor_t cur;
        if (t->parts[i]->remote) {
            /* Its log is on the partition's owner: idle state here. */
            tn_cursor_init(&cur, 0);
            int rc = tn__chpart_init(ch->parts[i], ch, t->parts[i], NULL, &cur);
            if (rc != 0) {
                tn_cursor_fini(&cur);
                tn_free(made);
                tn__channel_free(ch);
                return rc;
            }
            continue;
        }
        tn_cursor_t init;
        int rc = start_missing(t, i, name, &init, &made[i]);
        if (rc == 0)
            rc = tn_chanlog_open(b->store, t->name, i, name, made[i] ? &init : NULL, &cl, &cur);
        if (made[i])
            tn_cursor_fini(&init);
        if (rc != 0) {
            TN_LOG(TN_LOG_ERROR, "cannot open channel %s of %s/%" PRIu32 ": %s", name, t->name, i,
                   tn_strerror(rc));
            tn_free(made);
            tn__channel_free(ch);
            return rc;
        }
        if (tn_chanlog_err(cl) != 0)
            TN_LOG(TN_LOG_ERROR, "channel isolated: %s", cl->errmsg);
        rc = tn__chpart_init(ch->parts[i], ch, t->parts[i], cl, &cur);
        if (rc != 0) {
            tn_cursor_fini(&cur);
            tn_free(made);
            tn__channel_free(ch);
            return rc;
        }
        tn_chpart_t *cp = ch->parts[i];
        TN_LOG(TN_LOG_INFO,
               "channel %s of %s/%" PRIu32 ": settled below %" PRIu64 ", %" PRIu32
               " settled ahead, %" PRIu32 " requeued%s",
               name, t->name, i, cp->cur.frontier, cp->cur.nsettled, cp->cur.nrequeued,
               cp->cur.paused ? ", paused" : "");
        check_lost_tail(cp);
        tn__broker_rewake(cp);
    }
    /* Which record the files are of: the catalog replaces the channel if
     * its record has another stamp (deleted and made again meanwhile). */
    uint64_t stamp = 0;
    int rc = tn_store_channel_stamp_read(b->store, t->name, name, &stamp);
    if (rc != 0)
        TN_LOG(TN_LOG_WARN,
               "channel %s of %s: its stamp (%s%s) cannot be read (%s): the channel recorded "
               "under its name is taken for its own, as for files written before stamps",
               name, t->name, name, TN_STORE_CHAN_STAMP_SUFFIX, tn_strerror(rc));
    ch->paused = ch->paused_kept = load_paused(ch, made, rc != 0 || stamp != 0);
    tn_free(made);
    ch->stamp = ch->stamp_kept = stamp;
    ch->state = TN_OBJ_READY;
    channel_link(t, ch);
    return 0;
}

/* Creating a durable channel: on a worker thread, find where each
 * partition starts and open (create) its channel logs. */
typedef struct {
    uv_work_t work;
    tn_channel_t *ch;
    bool first;   /* the topic's first durable channel: it gets the backlog */
    bool at_tail; /* starts at the tail, whatever came before */
    bool since;   /* starts at since_ns, asked for (else the bootstrap window) */
    int64_t since_ns;
    tn_chanlog_t **cls;
    tn_cursor_t *curs;
    bool stamp_written; /* ch->stamp_kept is in the topic's directory */
    /* Remote partitions whose log the engine holds set aside for the
     * replica manager (a replicated partition's follower that led it or
     * loaded it from disk): the channel's log is opened there as on a
     * served one, as a channel loaded at start has it, so a follower's
     * records and snapshots go through it (tn_broker_chan_apply) and the
     * channel is served from it once led here again. */
    bool *aside;
    bool paused; /* this node's pause, kept from before (chan_create_work) */
    int rc;
} chan_job_t;

/* The first offset published at or after since_ns (binary search over the
 * partition's records; their publish times never go back). */
static uint64_t find_start(tn_plog_t *plog, uint64_t lo, uint64_t hi, int64_t since_ns)
{
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        tn_rec_t rec;
        tn_buf_reset(&scratch);
        int rc = tn_plog_read(plog, mid, &scratch, &rec);
        if (rc == 0 && rec.h.publish_ns >= since_ns)
            hi = mid;
        else
            lo = mid + 1;
    }
    tn_buf_fini(&scratch);
    return lo;
}

#ifdef TN_TEST
/* TERN_TEST_CHANNEL_CREATE_DELAY_MS=n (ternd-test): every durable
 * channel's creation work waits n ms first, so that a test can have the
 * metastore replica change while a channel is being made here. */
static void chan_create_test_delay(const tn_channel_t *ch)
{
    const char *v = getenv("TERN_TEST_CHANNEL_CREATE_DELAY_MS");
    if (v == NULL || atoi(v) <= 0)
        return;
    TN_LOG(TN_LOG_NOTICE,
           "creation of channel %s of %s held %d ms (TERN_TEST_CHANNEL_CREATE_DELAY_MS)", ch->name,
           ch->topic->name, atoi(v));
    uv_sleep((unsigned int)atoi(v));
}
#else
#define chan_create_test_delay(ch) ((void)(ch))
#endif

static void chan_create_work(uv_work_t *w)
{
    chan_job_t *j = TN_CONTAINER_OF(w, chan_job_t, work);
    tn_channel_t *ch = j->ch;
    tn_topic_t *t = ch->topic;
    chan_create_test_delay(ch);
    /* A stamp file already holding this channel's stamp means this node
     * had the channel (the stamp is written before its first checkpoint
     * and removed after its last) and lost its files on every partition,
     * or crashed before the first: its position here is unknown, so every
     * retained record is delivered again rather than the bootstrap window
     * skip the unsettled ones older than it. */
    uint64_t had = 0;
    bool had_it = ch->stamp_kept != 0 &&
                  tn_store_channel_stamp_read(t->broker->store, t->name, ch->name, &had) == 0 &&
                  had == ch->stamp_kept;
    bool lost = had_it && !j->first;
    /* This node's pause first, then the stamp, so that a stamp file here
     * means a pause file too (load_paused: a stamp without one is from an
     * earlier release). The pause is kept when the stamp says this node
     * had this very channel (it has no file of it on any partition: lost,
     * or a follower's copies the leader's settles never reached).
     * Otherwise the channel is made unpaused, and its pause file says so
     * (one left by a deleted channel of the name, a deletion cut short, is
     * not this one's), so that no partition's own flag decides it at the
     * next start. */
    int paused = -1;
    int prc = 0;
    if (had_it)
        prc = tn_store_channel_pause_read(t->broker->store, t->name, ch->name, &paused);
    if (prc != 0)
        /* As at start (load_paused), with no partition's files here to
         * say paused: unpaused, and the file says so from now on. */
        TN_LOG(TN_LOG_WARN,
               "channel %s of %s: its pause file (%s%s) cannot be read (%s): made unpaused, "
               "as no partition here has its files to say otherwise; the file is written anew",
               ch->name, t->name, ch->name, TN_STORE_CHAN_PAUSE_SUFFIX, tn_strerror(prc));
    if (paused >= 0)
        j->paused = paused == 1;
    else
        j->rc = tn_store_channel_pause_write(t->broker->store, t->name, ch->name, 0, NULL);
    /* The stamp before the first checkpoint: files of the channel are
     * never on disk with another channel's stamp beside them (a stamp left
     * by a deleted channel of the name goes when this one's is unknown). */
    if (j->rc == 0)
        j->rc = tn_store_channel_stamp_write(t->broker->store, t->name, ch->name, ch->stamp_kept,
                                             &j->stamp_written);
    if (j->rc != 0)
        return;
    for (uint32_t i = 0; i < t->nparts; i++) {
        if (t->parts[i]->remote && !j->aside[i])
            continue; /* its channel log is on the partition's owner */
        tn_plog_t *plog = t->parts[i]->plog;
        tn_plog_stats_t st;
        tn_plog_stats(plog, &st);
        uint64_t start = st.first_offset;
        if (lost && st.written_next > st.first_offset)
            TN_LOG(TN_LOG_WARN,
                   "partition %s/%" PRIu32 ": channel %s has no checkpoint here, but its stamp "
                   "file says this node had it: made anew from the first retained offset %" PRIu64
                   ", so its %" PRIu64 " retained messages here are delivered again",
                   t->name, i, ch->name, st.first_offset, st.written_next - st.first_offset);
        else if (j->at_tail)
            start = st.visible_next;
        else if (!j->first)
            start = find_start(plog, st.first_offset, st.visible_next, j->since_ns);
        tn_cursor_t init;
        tn_cursor_init(&init, start);
        int rc =
            tn_chanlog_open(t->broker->store, t->name, i, ch->name, &init, &j->cls[i], &j->curs[i]);
        tn_cursor_fini(&init);
        if (rc != 0) {
            j->rc = rc;
            return;
        }
    }
}

static void chan_create_done(uv_work_t *w, int status)
{
    chan_job_t *j = TN_CONTAINER_OF(w, chan_job_t, work);
    tn_channel_t *ch = j->ch;
    tn_topic_t *t = ch->topic;
    tn_broker_t *b = t->broker;
    int rc = j->rc != 0 ? j->rc : status;
    ch->busy--;
    if (!j->stamp_written)
        ch->stamp_kept = 0; /* no directory here yet: tn_channel_keep_stamp writes it later */
    for (uint32_t i = 0; i < t->nparts; i++) {
        if (t->parts[i]->remote && j->cls[i] == NULL)
            tn_cursor_init(&j->curs[i], 0); /* idle: the log is on its owner */
        if (rc == 0 && !b->closing) {
            rc = tn__chpart_init(ch->parts[i], ch, t->parts[i], j->cls[i], &j->curs[i]);
        } else {
            tn_cursor_fini(&j->curs[i]);
        }
    }
    if (rc == 0 && b->closing)
        rc = TN_ECLOSED;
    if (rc != 0) {
        TN_LOG_RL(TN_LOG_ERROR, 10000, "cannot create channel %s of %s: %s", ch->name, t->name,
                  tn_strerror(rc));
        ch->state = TN_OBJ_FAILED;
        ch->err = rc;
        channel_unlink(ch);
        tn__waiters_fire(&ch->waiters, rc);
        tn__channel_free(ch);
    } else {
        ch->state = TN_OBJ_READY;
        ch->paused = ch->paused_kept = j->paused;
        for (uint32_t i = 0; ch->paused && i < t->nparts; i++)
            if (!t->parts[i]->remote)
                tn__chpart_take_pause(ch->parts[i]);
        TN_LOG(TN_LOG_INFO, "channel %s of %s created, starting at offset %" PRIu64 "%s%s",
               ch->name, t->name, ch->parts[0]->cur.frontier,
               j->first     ? " (the retained backlog)"
               : j->at_tail ? " (the tail)"
               : j->since   ? " (its first record from the time asked for)"
                            : "",
               ch->paused ? ", paused as this node's pause file says" : "");
        tn__broker_event(b, TN_EV_CHANNEL_UP, t->name, ch->name);
        tn__waiters_fire(&ch->waiters, 0);
    }
    tn_free(j->cls);
    tn_free(j->curs);
    tn_free(j->aside);
    tn_free(j);
    tn__topic_place_resume(t);
    tn__broker_work_done(b);
}

static bool has_durable_channel(const tn_topic_t *t)
{
    for (const tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (!ch->memory)
            return true;
    return false;
}

/* Where a new durable channel starts: the retained backlog for a topic's
 * first (else the bootstrap window), the tail, or a given time. */
typedef enum { START_DEFAULT, START_TAIL, START_SINCE } start_t;

static int channel_get(tn_topic_t *t, const char *name, size_t len, bool create, start_t start,
                       int64_t since_ns, tn_waiter_t *w, tn_channel_t **out);

int tn_topic_channel(tn_topic_t *t, const char *name, size_t len, bool create, tn_waiter_t *w,
                     tn_channel_t **out)
{
    return channel_get(t, name, len, create, START_DEFAULT, 0, w, out);
}

int tn_topic_channel_at_tail(tn_topic_t *t, const char *name, size_t len, tn_waiter_t *w,
                             tn_channel_t **out)
{
    return channel_get(t, name, len, true, START_TAIL, 0, w, out);
}

int tn_topic_channel_since(tn_topic_t *t, const char *name, size_t len, int64_t since_ns,
                           tn_waiter_t *w, tn_channel_t **out)
{
    return channel_get(t, name, len, true, START_SINCE, since_ns, w, out);
}

static int channel_get(tn_topic_t *t, const char *name, size_t len, bool create, start_t start,
                       int64_t since_ns, tn_waiter_t *w, tn_channel_t **out)
{
    tn_broker_t *b = t->broker;
    if (b->closing)
        return TN_ECLOSED;
    tn_channel_t *ch = channel_find(t, name, len);
    if (ch != NULL) {
        if (ch->state == TN_OBJ_READY) {
            *out = ch;
            return 0;
        }
        if (ch->state == TN_OBJ_FAILED)
            return ch->err;
        if (w != NULL) {
            w->next = ch->waiters;
            ch->waiters = w;
        }
        return UV_EAGAIN;
    }
    if (!create)
        return TN_ENOTFOUND;
    if (t->growing) {
        /* It gets every partition once the topic has them all. */
        if (w != NULL) {
            w->next = t->waiters;
            t->waiters = w;
        }
        return UV_EAGAIN;
    }
    if (!tn_name_valid_any(name, len))
        return UV_EINVAL;
    /* The first channel of an ephemeral topic gets what the topic held
     * for it, as in nsqd; every other memory channel starts at the tail. */
    bool backlog = t->memory && t->channels == NULL && start == START_DEFAULT;
    ch = channel_new(t, name, len);
    if (ch == NULL)
        return UV_ENOMEM;
    if (!ch->memory && !tn_fd_room(TN_FD_CREATE)) {
        tn__channel_free(ch); /* its logs are files: as for a topic (tn_broker_topic) */
        return UV_EMFILE;
    }
    if (ch->memory) {
        for (uint32_t i = 0; i < t->nparts; i++) {
            tn_plog_stats_t st;
            memset(&st, 0, sizeof(st));
            if (!t->parts[i]->remote)
                tn_plog_stats(t->parts[i]->plog, &st);
            tn_cursor_t cur;
            tn_cursor_init(&cur, backlog ? st.first_offset : st.visible_next);
            int rc = tn__chpart_init(ch->parts[i], ch, t->parts[i], NULL, &cur);
            if (rc != 0) {
                tn_cursor_fini(&cur);
                tn__channel_free(ch);
                return rc;
            }
        }
        ch->state = TN_OBJ_READY;
        channel_link(t, ch);
        tn__broker_event(b, TN_EV_CHANNEL_UP, t->name, ch->name);
        *out = ch;
        return 0;
    }
    chan_job_t *j = tn_calloc(1, sizeof(*j));
    if (j != NULL) {
        j->cls = tn_calloc(t->nparts, sizeof(*j->cls));
        j->curs = tn_calloc(t->nparts, sizeof(*j->curs));
        j->aside = tn_calloc(t->nparts, sizeof(*j->aside));
    }
    if (j == NULL || j->cls == NULL || j->curs == NULL || j->aside == NULL) {
        if (j != NULL) {
            tn_free(j->cls);
            tn_free(j->curs);
            tn_free(j->aside);
        }
        tn_free(j);
        tn__channel_free(ch);
        return UV_ENOMEM;
    }
    /* Placement waits while the channel is made (tn_topic_busy), and a
     * set-aside log is not abandoned meanwhile, so this holds for the job. */
    for (uint32_t i = 0; i < t->nparts; i++)
        j->aside[i] = t->parts[i]->remote && t->parts[i]->plog != NULL &&
                      b->place_readopt != NULL && b->place_readopt(b->place_arg, t, i);
    j->ch = ch;
    j->first = !has_durable_channel(t) && start == START_DEFAULT;
    j->at_tail = start == START_TAIL;
    j->since = start == START_SINCE;
    j->since_ns =
        start == START_SINCE ? since_ns : tn_now_wall_ns() - b->opts.bootstrap_window_ms * 1000000;
    int rc = tn__gate_then_queue(b, &j->work, chan_create_work, chan_create_done, t, ch);
    if (rc != 0) {
        tn_free(j->cls);
        tn_free(j->curs);
        tn_free(j->aside);
        tn_free(j);
        tn__channel_free(ch);
        return rc;
    }
    ch->busy++;
    b->workers++;
    channel_link(t, ch);
    if (w != NULL) {
        w->next = NULL;
        ch->waiters = w;
    }
    return UV_EAGAIN;
}

void tn__channel_gate_passed(tn_channel_t *ch)
{
    ch->stamp_kept = ch->stamp;
}

/* --- the stamp ------------------------------------------------------------------ */

typedef struct {
    uv_work_t work;
    tn_channel_t *ch; /* loop thread only */
    tn_store_t *store;
    char *topic;
    char *name;
    uint64_t stamp;
    int paused; /* this node's pause when the job was queued */
    bool written;
    int rc;
} chstamp_job_t;

#ifdef TN_TEST
/* TERN_TEST_CHANNEL_STAMP_DELAY_MS=n (ternd-test): every channel stamp
 * write (tn_channel_keep_stamp) waits n ms first, so that a test can kill
 * a node between a replica's copy of a partition made here (its channel
 * state, the leader's, in it) and this node's pause and stamp files. */
static void chstamp_test_delay(const chstamp_job_t *j)
{
    const char *v = getenv("TERN_TEST_CHANNEL_STAMP_DELAY_MS");
    if (v == NULL || atoi(v) <= 0)
        return;
    TN_LOG(TN_LOG_NOTICE,
           "stamp write of channel %s of %s held %d ms (TERN_TEST_CHANNEL_STAMP_DELAY_MS)", j->name,
           j->topic, atoi(v));
    uv_sleep((unsigned int)atoi(v));
}
#else
#define chstamp_test_delay(j) ((void)(j))
#endif

static void chstamp_work(uv_work_t *w)
{
    chstamp_job_t *j = TN_CONTAINER_OF(w, chstamp_job_t, work);
    chstamp_test_delay(j);
    /* The node's pause before the stamp: a stamp file here means a pause
     * file too, so that load_paused can tell a directory of an earlier
     * release (a stamp, no pause file) from a copy made here before this
     * job (neither: the copy's flags are its leader's). */
    j->rc = tn_store_channel_pause_write(j->store, j->topic, j->name, j->paused, NULL);
    if (j->rc == 0)
        j->rc = tn_store_channel_stamp_write(j->store, j->topic, j->name, j->stamp, &j->written);
}

static void drop_one(void *arg);
static void pause_write_start(tn_channel_t *ch);
static void pause_waits_run(tn_channel_t *ch, uint64_t covers, int status);

static void chstamp_done(uv_work_t *w, int status)
{
    chstamp_job_t *j = TN_CONTAINER_OF(w, chstamp_job_t, work);
    tn_channel_t *ch = j->ch;
    tn_broker_t *b = ch->topic->broker;
    int rc = j->rc != 0 ? j->rc : status;
    ch->stamping = false;
    if (rc == 0)
        ch->paused_kept = j->paused == 1;
    if (rc == 0 && j->written && !ch->deleted) {
        ch->stamp_kept = j->stamp;
        /* The topic's directory is here now (a copy of a partition came):
         * the pause file holds the pause of when the job was queued; once
         * more with the current one, which also ends the waits
         * (pause_file_sync) for asks made meanwhile, whose writes waited
         * for this job (pause_write_start). */
        ch->pause_asked++;
    } else if (rc == 0 && j->written) {
        ch->stamp_kept = j->stamp;
    } else if (rc != 0)
        TN_LOG_RL(
            TN_LOG_WARN, 60000,
            "channel %s of %s: writing its pause file and stamp failed: %s; tried again later",
            j->name, j->topic, tn_strerror(rc));
    if (!ch->deleted && !ch->pause_writing && ch->pause_asked > ch->pause_done)
        pause_write_start(ch);
    else if (ch->deleted && !ch->pause_writing)
        pause_waits_run(ch, UINT64_MAX, TN_ECLOSED);
    void *drop = ch->stamp_drop;
    ch->stamp_drop = NULL;
    tn_free(j->topic);
    tn_free(j->name);
    tn_free(j);
    if (--ch->busy == 0 && ch->deleted)
        tn__channel_free(ch);
    if (drop != NULL)
        drop_one(drop); /* a deletion waiting for the write */
    tn__broker_work_done(b);
}

void tn_channel_keep_stamp(tn_channel_t *ch, bool copy_here)
{
    tn_topic_t *t = ch->topic;
    if (ch->memory || ch->deleted || ch->state != TN_OBJ_READY || ch->stamping || ch->stamp == 0 ||
        ch->stamp == ch->stamp_kept || t->deleted || t->state == TN_OBJ_DELETING ||
        t->broker->closing)
        return;
    if (!tn__topic_dir_here(t, copy_here))
        return;
    chstamp_job_t *j = tn_calloc(1, sizeof(*j));
    if (j == NULL)
        return;
    j->ch = ch;
    j->store = t->broker->store;
    j->stamp = ch->stamp;
    j->paused = ch->paused ? 1 : 0;
    j->topic = tn_strdup(t->name);
    j->name = tn_strdup(ch->name);
    if (j->topic == NULL || j->name == NULL ||
        uv_queue_work(t->broker->loop, &j->work, chstamp_work, chstamp_done) != 0) {
        tn_free(j->topic);
        tn_free(j->name);
        tn_free(j);
        return;
    }
    ch->stamping = true;
    ch->busy++;
    t->broker->workers++;
}

/* --- GC support ----------------------------------------------------------- */

uint64_t tn__topic_mem_bound(tn_topic_t *t, uint32_t p)
{
    if (t->channels == NULL)
        return 0; /* held for the first channel */
    uint64_t bound = UINT64_MAX;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (ch->parts[p]->cur.frontier < bound)
            bound = ch->parts[p]->cur.frontier;
    return bound;
}

void tn__part_mem_trim(tn_part_t *p)
{
    if (tn_plog_mem_trim(p->plog, tn__topic_mem_bound(p->topic, p->index)) == 0)
        return;
    tn_plog_stats_t st;
    tn_plog_stats(p->plog, &st);
    p->first_offset = st.first_offset;
}

void tn__topic_vanish_if_unused(tn_topic_t *t)
{
    /* nsqd deletes an ephemeral topic when its last channel goes. */
    if (t->memory && t->channels == NULL && t->state == TN_OBJ_READY && !t->deleted &&
        !t->broker->closing)
        (void)tn_topic_delete(t, NULL, NULL);
}

uint64_t tn__topic_gc_bound(tn_topic_t *t, uint32_t p)
{
    uint64_t bound = UINT64_MAX;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        if (ch->ephemeral)
            continue;
        if (ch->state != TN_OBJ_READY)
            return 0; /* where it starts is not known yet */
        if (ch->parts[p]->synced_frontier < bound)
            bound = ch->parts[p]->synced_frontier;
    }
    return bound;
}

void tn__topic_settle_below(tn_topic_t *t, uint32_t p, uint64_t below)
{
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        if (ch->state != TN_OBJ_READY)
            continue;
        tn_chpart_t *cp = ch->parts[p];
        if (cp->cur.frontier >= below)
            continue;
        tn_walrec_t r = {.op = TN_WAL_EMPTY, .offset = below};
        record(cp, &r);
        if (cp->scan < cp->cur.frontier)
            cp->scan = cp->cur.frontier;
    }
}

/* --- delivery --------------------------------------------------------------- */

typedef struct {
    tn_chpart_t *cp;
    uint64_t offset;
    uint32_t attempts;
    tn_centry_t *e;
} cand_t;

static bool budget_full(const tn_broker_t *b)
{
    return b->inflight_bytes >= b->opts.max_inflight_bytes ||
           b->inflight_msgs >= b->opts.max_inflight_msgs;
}

/* The next message of cp to deliver, if one is ready now; capped: the
 * topic's in-flight and acked-ahead caps apply (pulling consumers). */
static bool chpart_next(tn_chpart_t *cp, int64_t now_mono, int64_t now_wall, bool capped,
                        cand_t *out)
{
    if (cp->part->remote || cp->part->held || cp->part->start_held)
        return false; /* delivered by its owner; held for a hand-over, or until placed */
    if (cp->part->lease_until != 0 &&
        uv_now(cp->part->topic->broker->loop) >= cp->part->lease_until)
        return false; /* its leader's lease lapsed (cluster/handfence.h) */
    if (cp->broken || cp->full != 0 || tn_plog_err(cp->part->plog) != 0)
        return false;
    tn_part_t *part = cp->part;
    tn_topic_t *t = part->topic;
    if (capped && t->max_inflight_part > 0 && tn_leases_count(&cp->leases) >= t->max_inflight_part)
        return false;
    /* Due entries first: requeued, timed out, deferred. */
    promote(cp, now_mono);
    for (;;) {
        tn_heap_node_t *n = tn_heap_min(&cp->ready);
        if (n == NULL)
            break;
        tn__pend_t *pe = TN_CONTAINER_OF(n, tn__pend_t, node);
        if (tn_cursor_is_settled(&cp->cur, pe->offset)) {
            pend_free(cp, pe);
            continue;
        }
        tn_centry_t *e = tn__cache_get(part, pe->offset);
        if (e == NULL) {
            cp->waiting_fetch = true;
            tn__part_fetch(part, pe->offset);
            return false;
        }
        uint64_t off = pe->offset;
        uint32_t attempts = pe->attempts;
        pend_free(cp, pe);
        if (e->body == NULL) {
            if (e->control)
                record_skip(cp, off);
            else
                record_fin(cp, off);
            continue;
        }
        *out = (cand_t){cp, off, attempts, e};
        return true;
    }
    /* Then the scan, up to what the topic hands its channels. */
    uint64_t limit = tn__part_limit(part);
    uint64_t ahead = cp->cur.frontier + t->broker->opts.max_ahead;
    if (capped && t->max_acked_ahead > 0 && cp->cur.nsettled >= t->max_acked_ahead)
        ahead = cp->cur.frontier + 1; /* only the head may go out until it is acked */
    if (ahead < limit)
        limit = ahead;
    if (cp->scan < cp->cur.frontier)
        cp->scan = cp->cur.frontier;
    while (cp->scan < limit) {
        uint64_t off = cp->scan;
        if (tn_cursor_is_settled(&cp->cur, off) || tn_leases_get(&cp->leases, off) != NULL ||
            tn_u64map_get(&cp->pend_map, off) != NULL) {
            cp->scan++;
            continue;
        }
        tn_centry_t *e = tn__cache_get(part, off);
        if (e == NULL) {
            cp->waiting_fetch = true;
            tn__part_fetch(part, off);
            return false;
        }
        if (e->body == NULL) {
            if (e->control)
                record_skip(cp, off);
            else
                record_fin(cp, off);
            cp->scan++;
            continue;
        }
        if (e->deliver_at_ms > now_wall) {
            if (pend_add(cp, off, 0, wall_to_mono(e->deliver_at_ms, now_wall, now_mono)) != 0) {
                /* Out of memory: the scan stays at it and meets it again
                 * at the next pump, asked for here, as hand_over does:
                 * nothing else may pump this channel. */
                tn__broker_pump_later(cp->ch);
                return false;
            }
            cp->scan++;
            tn__broker_rewake(cp);
            continue;
        }
        cp->scan++;
        *out = (cand_t){cp, off, 0, e};
        return true;
    }
    return false;
}

static bool next_candidate(tn_channel_t *ch, tn_consumer_t *c, int64_t now_mono, int64_t now_wall,
                           cand_t *out)
{
    uint32_t n = ch->topic->nparts;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (ch->next_part + k) % n;
        if (c->hold != NULL && c->hold(c, i))
            continue;
        if (chpart_next(ch->parts[i], now_mono, now_wall, c->pull, out)) {
            ch->next_part = i + 1;
            return true;
        }
    }
    return false;
}

/* Whether c may take one more message: an NSQ consumer while its in-flight
 * count is under its RDY, a pulling one while it has asks left. */
static bool has_credit(const tn_consumer_t *c)
{
    return c->pull ? c->credit > 0 : c->owner.count < c->credit;
}

static void starve(tn_channel_t *ch)
{
    tn_broker_t *b = ch->topic->broker;
    if (ch->starving)
        return;
    ch->starving = true;
    ch->busy++;
    ch->starve_next = b->starved;
    b->starved = ch;
}

/* --- dead letters --------------------------------------------------------- */

typedef struct {
    tn_pub_t pub;
    tn_chpart_t *cp;
    uint64_t offset;
    uint32_t left_count; /* its partition's when the move started */
    tn_dlq_done_cb cb;   /* may be NULL */
    void *arg;
} dlq_move_t;

/* A dead letter whose move was refused (tn_broker_t.dlq_refused) is due
 * again this much later: the operator's fix is seen by then, and a
 * channel of such messages costs one check each per period meanwhile. */
#define DLQ_REFUSED_RETRY_MS 5000

/* <topic>.<channel>.DLQ; a name too long for that keeps a prefix of the
 * topic and adds a hash of both names, so it stays unique. */
void tn_channel_dlq_name(const tn_channel_t *ch, char *out, size_t len)
{
    int n = snprintf(out, len, "%s.%s.DLQ", ch->topic->name, ch->name);
    if (n > 0 && (size_t)n <= 255)
        return;
    uint32_t h = 2166136261u;
    for (const char *p = ch->topic->name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ 0) * 16777619u;
    for (const char *p = ch->name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(out, len, "%.*s.%08x.DLQ", TN_NAME_DLQ_PREFIX, ch->topic->name, h);
}

void tn__channel_dlq_gone(tn_broker_t *b, const char *dlq)
{
    /* Every dead-letter topic's name ends so (tn_channel_dlq_name): no
     * walk of every channel for the deletion of any other topic. */
    size_t len = strlen(dlq);
    if (len < 4 || strcmp(dlq + len - 4, ".DLQ") != 0)
        return;
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
                if (ch->state != TN_OBJ_READY || ch->parts == NULL)
                    continue;
                bool any = false;
                for (uint32_t k = 0; k < t->nparts && !any; k++)
                    any = ch->parts[k] != NULL && tn_u64map_size(&ch->parts[k]->dlq_copied) > 0;
                if (!any)
                    continue;
                char name[300];
                tn_channel_dlq_name(ch, name, sizeof(name));
                if (strcmp(name, dlq) != 0)
                    continue;
                for (uint32_t k = 0; k < t->nparts; k++) {
                    if (ch->parts[k] == NULL)
                        continue;
                    dlq_copied_clear(ch->parts[k]);
                }
            }
        }
    }
}

static void on_dlq_published(tn_pub_t *p, int status)
{
    dlq_move_t *d = p->data;
    tn_chpart_t *cp = d->cp;
    tn_channel_t *ch = cp->ch;
    tn_broker_t *b = ch->topic->broker;
    if (!ch->deleted && !b->closing) {
        tn_lease_t *l = tn_leases_get(&cp->leases, d->offset);
        uint32_t attempts = l != NULL ? l->attempts : 0;
        if (l != NULL)
            tn_leases_remove(&cp->leases, l);
        if (cp->part->remote || cp->part->left_count != d->left_count) {
            /* The partition went to another leader meanwhile: its log
             * (set aside, or served again since) follows that leader's
             * records, which hold no such FIN, so none is written; that
             * leader's delivery decides (a second copy in the dead-letter
             * topic, at worst). The message waits among the pending
             * entries, as tn__chpart_left's leases do, should the
             * partition be led here again (unless that log settled it). */
            pend_or_rescan(cp, d->offset, attempts > 0 ? attempts - 1 : 0, tn_now_mono_ms());
            dlq_done(cp, d->cb, d->arg, TN_EREMOTE);
        } else if (status == 0) {
            /* The copy is durable: now settle the source; the move counts
             * once that is durable (a refused FIN brings it back). */
            record_dlq_fin(cp, d->offset, attempts > 0 ? attempts - 1 : 0, d->cb, d->arg);
        } else {
            TN_LOG_RL(TN_LOG_ERROR, 10000,
                      "moving a message of %s/%s to its dead-letter topic failed: %s; retrying",
                      ch->topic->name, ch->name, tn_strerror(status));
            /* Back to the channel, due a second later (out of memory, the
             * scan finds it at once). */
            pend_or_rescan(cp, d->offset, attempts > 0 ? attempts - 1 : 0, tn_now_mono_ms() + 1000);
            dlq_done(cp, d->cb, d->arg, status);
        }
        tn__broker_rewake(cp);
        tn__broker_pump_later(ch);
    } else if (d->cb != NULL) {
        d->cb(d->arg, TN_ECLOSED);
    }
    tn_pub_fini(&d->pub);
    tn_free(d);
    ch->busy--;
    if (ch->deleted && ch->busy == 0)
        tn__channel_free(ch);
}

/* Publish a copy of body (and key, when not NULL) to the dead-letter
 * topic, then settle the source at offset of cp (delivered attempts
 * times; again is the attempts it goes back with when the move cannot
 * start). The message stays leased to no one meanwhile, so nothing
 * redelivers it; a crash in between delivers it again (and may copy it
 * twice), never loses it. A move that cannot start, or whose copy fails,
 * puts the message back among the pending entries (out of memory, the
 * scan rewound to it: pend_or_rescan). A move whose copy is durable but
 * whose source FIN was refused (a full disk) leaves offset in
 * cp->dlq_copied: the
 * message comes back with the log's state, and its next move (at its
 * next delivery, before any consumer gets it: hand_over) writes the FIN
 * alone, so the dead-letter topic holds one copy. */
static void dead_letter(tn_chpart_t *cp, uint64_t offset, uint32_t attempts, uint32_t again,
                        const tn_msg_t *body, const tn_msg_t *key, tn_dlq_done_cb cb, void *arg)
{
    tn_channel_t *ch = cp->ch;
    tn_broker_t *b = ch->topic->broker;
    if (tn_u64map_get(&cp->dlq_copied, offset) != NULL) {
        /* An earlier move's copy is durable there, its FIN refused: the
         * source's FIN alone, which a second copy would not make surer. */
        record_dlq_fin(cp, offset, again, cb, arg);
        return;
    }
    char name[300];
    tn_channel_dlq_name(ch, name, sizeof(name));
    char why[1024];
    if (b->dlq_refused != NULL &&
        b->dlq_refused(b->dlq_refused_arg, ch->topic->name, name, why, sizeof(why))) {
        TN_LOG_RL(TN_LOG_ERROR, 10000, "dead letters of %s/%s stay on their channel: %s",
                  ch->topic->name, ch->name, why);
        pend_or_rescan(cp, offset, again, tn_now_mono_ms() + DLQ_REFUSED_RETRY_MS);
        tn__broker_rewake(cp);
        dlq_done(cp, cb, arg, UV_EPERM);
        return;
    }
    dlq_move_t *d = tn_calloc(1, sizeof(*d));
    tn_lease_t *l;
    if (d == NULL || tn_pub_init(&d->pub, 1) != 0 ||
        tn_pub_set(&d->pub, 0, body->data, body->len) != 0 ||
        (key != NULL && key->len > 0 && tn_pub_set_key(&d->pub, 0, key->data, key->len) != 0) ||
        tn_leases_add(&cp->leases, offset, attempts, 0, NULL, INT64_MAX, &l) != 0) {
        if (d != NULL)
            tn_pub_fini(&d->pub);
        tn_free(d);
        pend_or_rescan(cp, offset, again, tn_now_mono_ms() + 1000);
        tn__broker_rewake(cp);
        dlq_done(cp, cb, arg, UV_ENOMEM);
        return;
    }
    l->data = cp;
    d->cp = cp;
    d->offset = offset;
    d->left_count = cp->part->left_count;
    d->cb = cb;
    d->arg = arg;
    d->pub.data = d;
    int rc = b->publisher != NULL
                 ? b->publisher(b->publisher_arg, name, strlen(name), &d->pub, 0, on_dlq_published)
                 : tn_broker_publish(b, name, strlen(name), &d->pub, 0, on_dlq_published);
    ch->busy++;
    if (rc != 0)
        on_dlq_published(&d->pub, rc);
}

/* A lease's deadline: now_ms plus timeout_ms, held at INT64_MAX (a lease
 * that does not end while the node runs) when the sum would overflow. A
 * /v1 topic's visibility timeout has no upper bound, as Narad's. */
static int64_t lease_deadline(int64_t now_ms, int64_t timeout_ms)
{
    return timeout_ms > INT64_MAX - now_ms ? INT64_MAX : now_ms + timeout_ms;
}

/* Give candidate k to c, or settle it without a delivery (expired,
 * sampled out), or start its dead-letter move. Returns false when its FIN
 * or lease could not be made for want of memory: it comes back
 * (fin_back_later, or pending soon), and the pump's pass ends there, since
 * the scan may have been rewound to it and would find it again at once. */
static bool hand_over(tn_consumer_t *c, const cand_t *k, int64_t now_mono, int64_t now_wall)
{
    tn_chpart_t *cp = k->cp;
    tn_topic_t *t = cp->ch->topic;
    tn_broker_t *b = t->broker;
    uint32_t attempts = k->attempts < 65535 ? k->attempts + 1 : 65535;
    /* Age against the TTL, not publish time plus TTL: the sum of a TTL
     * as long as int64 allows would overflow and discard at once. */
    if (t->ttl_ms > 0 && now_wall - k->e->publish_ns / 1000000 >= t->ttl_ms) {
        /* Expired: it leaves the channel undelivered, with no dead letter
         * (once its FIN is recorded: out of memory, it comes back). */
        int rc = record_fin(cp, k->offset);
        if (rc == UV_ENOMEM) {
            fin_back_later(cp, k->offset, k->attempts);
            return false;
        }
        t->ttl_discards++;
        b->ttl_discards++;
        return true;
    }
    uint32_t max_attempts = t->own_settings ? t->own_max_attempts : b->opts.max_attempts;
    /* A message whose move's copy is there already (its FIN refused)
     * goes on moving, not to a consumer. */
    bool copied =
        tn_u64map_size(&cp->dlq_copied) > 0 && tn_u64map_get(&cp->dlq_copied, k->offset) != NULL;
    if (copied || (max_attempts > 0 && attempts > max_attempts && t->ttl_ms == 0 && !t->is_dlq &&
                   !cp->ch->memory)) {
        /* The key stays behind, as nsqd's messages have none. */
        dead_letter(cp, k->offset, attempts, k->attempts, k->e->body, NULL, NULL, NULL);
        return true;
    }
    if (c->sample_rate > 0) {
        uint32_t n = c->sample_n++ % 100;
        if (n >= c->sample_rate) {
            /* Sampled out: consumed for this channel without being sent
             * (out of memory, its FIN unrecorded, it comes back). */
            if (record_fin(cp, k->offset) == UV_ENOMEM) {
                fin_back_later(cp, k->offset, k->attempts);
                return false;
            }
            return true;
        }
    }
    tn_lease_t *l;
    uint32_t bytes = k->e->body->len;
    int rc = tn_leases_add(&cp->leases, k->offset, attempts, bytes, &c->owner,
                           lease_deadline(now_mono, c->timeout_ms), &l);
    if (rc != 0) {
        /* Out of memory: try again soon (the scan finds it when even its
         * pending entry cannot be made); the pass ends here. */
        pend_or_rescan(cp, k->offset, k->attempts, now_mono + 100);
        tn__broker_rewake(cp);
        tn__broker_pump_later(cp->ch);
        return false;
    }
    l->data = cp;
    l->leased_ms = now_mono;
    b->inflight_bytes += bytes;
    b->inflight_msgs++;
    cp->ch->message_count++;
    c->message_count++;
    tn__broker_rewake(cp);
    tn_delivery_t d = {
        .partition = cp->part->index,
        .offset = k->offset,
        .nonce = l->nonce,
        .attempts = (uint16_t)attempts,
        .publish_ns = k->e->publish_ns,
        .body = k->e->body,
        .key = k->e->key,
    };
    if (c->pull)
        c->credit--;
    c->deliver(c, &d);
    return true;
}

/* Candidates go to consumers in rotation. A pinned consumer takes only
 * from its partition; once an unpinned one finds nothing, the others of
 * its kind (pulling or not: the caps differ) are not asked again in this
 * pass. */
void tn__channel_pump(tn_channel_t *ch)
{
    tn_broker_t *b = ch->topic->broker;
    if (ch->state != TN_OBJ_READY || ch->paused || ch->nconsumers == 0)
        return;
    int64_t now_mono = tn_now_mono_ms();
    int64_t now_wall = tn_now_wall_ms();
    bool drained[2] = {false, false}; /* [pull] */
    uint32_t idle = 0;
    tn_consumer_t *c = ch->consumers;
    while (c != NULL && idle < ch->nconsumers) {
        if (!has_credit(c) || (!c->pinned && drained[c->pull])) {
            c = c->next;
            idle++;
            continue;
        }
        if (budget_full(b)) {
            starve(ch);
            return;
        }
        cand_t k;
        bool got = c->pinned ? c->pin < ch->topic->nparts &&
                                   chpart_next(ch->parts[c->pin], now_mono, now_wall, c->pull, &k)
                             : next_candidate(ch, c, now_mono, now_wall, &k);
        if (!got) {
            /* One that holds partitions back found nothing of those alone. */
            drained[c->pull] = drained[c->pull] || (!c->pinned && c->hold == NULL);
            c = c->next;
            idle++;
            continue;
        }
        /* Rotate: the next message goes to the next consumer. */
        ch->consumers = c->next;
        if (!hand_over(c, &k, now_mono, now_wall))
            return; /* out of memory: fin_back_later pumps again later */
        c = ch->consumers;
        idle = 0;
    }
}

void tn_channel_pump_now(tn_channel_t *ch)
{
    tn__channel_pump(ch);
}

/* --- timeouts --------------------------------------------------------------- */

static void lease_end(tn_chpart_t *cp, tn_lease_t *l)
{
    tn_broker_t *b = cp->ch->topic->broker;
    b->inflight_bytes -= l->bytes;
    b->inflight_msgs--;
    tn_leases_remove(&cp->leases, l);
    if (b->starved != NULL && !budget_full(b))
        tn__broker_unstarve(b);
}

/* Space again: the live state becomes the durable one (cur, moved in),
 * which lacks what the failed writes applied: a FIN's message, its lease
 * ended, is unsettled again and the scan delivers it; a REQ's message
 * waits in the pending heap as before. Nothing is out to the log (see
 * full_check), so nothing applied later is lost. */
static void full_resume(tn_chpart_t *cp, tn_cursor_t *cur)
{
    tn_channel_t *ch = cp->ch;
    /* Leases lapsed meanwhile (their TIMEOUTS records refused): the
     * count, a counter, does not go back. */
    uint64_t timeouts = cp->cur.timeout_count;
    tn_cursor_fini(&cp->cur);
    cp->cur = *cur;
    memset(cur, 0, sizeof(*cur));
    cp->scan = cp->cur.frontier;
    cp->synced_frontier = cp->cur.frontier;
    cp->fins_unsynced = 0;
    int64_t now_wall = tn_now_wall_ms();
    int64_t now_mono = tn_now_mono_ms();
    for (uint32_t i = 0; i < cp->cur.nrequeued; i++) {
        const tn_requeue_t *r = &cp->cur.requeued[i];
        if (tn_u64map_get(&cp->pend_map, r->offset) == NULL &&
            tn_leases_get(&cp->leases, r->offset) == NULL)
            (void)pend_add(cp, r->offset, r->attempts,
                           wall_to_mono(r->due_ms, now_wall, now_mono)); /* else the scan */
    }
    cp->full = 0;
    ch->topic->broker->logs_full--;
    TN_LOG(TN_LOG_NOTICE, "channel %s of %s/%" PRIu32 ": its log writes again; delivery resumes",
           ch->name, ch->topic->name, cp->part->index);
    if (cp->cur.frontier < cp->part->first_offset) {
        tn_walrec_t r = {.op = TN_WAL_EMPTY, .offset = cp->part->first_offset};
        record(cp, &r);
        cp->scan = cp->cur.frontier;
    }
    if (timeouts > cp->cur.timeout_count) {
        tn_walrec_t r = {.op = TN_WAL_TIMEOUTS, .value = timeouts};
        record(cp, &r);
    }
    tn__chpart_take_pause(cp);
    tn__broker_pump_later(ch);
}

static void on_full_state(tn_chanlog_state_t *req, int status)
{
    tn_chpart_t *cp = req->data;
    tn_channel_t *ch = cp->ch;
    tn_broker_t *b = ch->topic->broker;
    cp->full_checking = false;
    if (ch->deleted || cp->full == 0) {
        if (status == 0)
            tn_cursor_fini(&req->cur);
    } else if (status == 0) {
        full_resume(cp, &req->cur);
    } else if (tn_io_nospace(status) || status == UV_ENOMEM) {
        cp->full_retry_ms = tn_now_mono_ms() + FULL_RETRY_MS; /* checked again */
    } else {
        log_failed_with(cp, status);
    }
    if (!ch->deleted)
        tn__broker_rewake(cp);
    ch->busy--;
    if (ch->deleted && ch->busy == 0)
        tn__channel_free(ch);
    tn__broker_work_done(b);
}

/* The wake heap's turn for a partition whose log found the disk full:
 * once every record queued to the log has completed, ask the log whether
 * it can grow again, and for its durable state (on_full_state). */
static void full_check(tn_chpart_t *cp)
{
    if (tn_chanlog_completed(cp->cl) != tn_chanlog_submitted(cp->cl)) {
        cp->full_retry_ms = tn_now_mono_ms() + 10; /* their completions first */
        return;
    }
    cp->full_req.data = cp;
    int rc = tn_chanlog_state(cp->cl, &cp->full_req, on_full_state);
    if (rc != 0) {
        cp->full_retry_ms = INT64_MAX; /* closing, or failed since */
        log_failed_with(cp, rc);
        return;
    }
    cp->full_checking = true;
    cp->ch->busy++;
    cp->ch->topic->broker->workers++;
}

void tn__chpart_wake(tn_chpart_t *cp, int64_t now_ms)
{
    tn_channel_t *ch = cp->ch;
    bool any = false;
    if (cp->full != 0 && !cp->full_checking && now_ms >= cp->full_retry_ms && cp->cl != NULL)
        full_check(cp);
    tn_lease_t *l;
    while ((l = tn_leases_expired(&cp->leases, now_ms)) != NULL) {
        uint64_t off = l->offset;
        uint32_t attempts = l->attempts;
        lease_end(cp, l);
        /* Out of memory: the scan finds it instead. */
        pend_or_rescan(cp, off, attempts, now_ms);
        cp->cur.timeout_count++;
        ch->topic->broker->timeouts++;
        any = true;
    }
    if (any && cp->cl != NULL) {
        tn_walrec_t r = {.op = TN_WAL_TIMEOUTS, .value = cp->cur.timeout_count};
        record(cp, &r);
    }
    promote(cp, now_ms);
    if (any || tn_heap_size(&cp->ready) > 0)
        tn__broker_pump_later(ch);
}

/* --- consumers ----------------------------------------------------------------- */

void tn_consumer_attach(tn_consumer_t *c, tn_channel_t *ch)
{
    c->ch = ch;
    c->owner.head = NULL;
    c->owner.count = 0;
    c->credit = 0;
    c->sample_n = 0;
    if (ch->consumers == NULL) {
        c->next = c->prev = c;
        ch->consumers = c;
    } else {
        tn_consumer_t *h = ch->consumers;
        c->next = h;
        c->prev = h->prev;
        h->prev->next = c;
        h->prev = c;
    }
    ch->nconsumers++;
}

void tn_consumer_detach(tn_consumer_t *c)
{
    tn_channel_t *ch = c->ch;
    if (ch == NULL)
        return;
    int64_t now = tn_now_mono_ms();
    while (c->owner.head != NULL) {
        tn_lease_t *l = c->owner.head;
        tn_chpart_t *cp = l->data;
        uint64_t off = l->offset;
        uint32_t attempts = l->attempts;
        lease_end(cp, l);
        /* Out of memory: the scan finds it instead. */
        pend_or_rescan(cp, off, attempts, now);
        tn__broker_rewake(cp);
    }
    if (c->next == c) {
        ch->consumers = NULL;
    } else {
        c->prev->next = c->next;
        c->next->prev = c->prev;
        if (ch->consumers == c)
            ch->consumers = c->next;
    }
    c->next = c->prev = NULL;
    c->ch = NULL;
    ch->nconsumers--;
    if (ch->ephemeral && ch->nconsumers == 0) {
        /* An ephemeral channel ends with its last consumer. */
        tn_topic_t *t = ch->topic;
        tn__broker_event(t->broker, TN_EV_CHANNEL_DOWN, t->name, ch->name);
        channel_unlink(ch);
        ch->deleted = true;
        for (uint32_t i = 0; i < t->nparts; i++)
            tn__broker_rewake(ch->parts[i]);
        if (ch->busy == 0)
            tn__channel_free(ch);
        tn__topic_vanish_if_unused(t);
        return;
    }
    tn__broker_pump_later(ch);
}

void tn__chpart_left(tn_chpart_t *cp)
{
    tn_channel_t *ch = cp->ch;
    if (ch == NULL || ch->consumers == NULL)
        return;
    int64_t now = tn_now_mono_ms();
    bool any = false;
    tn_consumer_t *c = ch->consumers;
    do {
        tn_lease_t *l = c->owner.head;
        while (l != NULL) {
            tn_lease_t *next = l->owner_next;
            if (l->data == cp) {
                uint64_t off = l->offset;
                uint32_t attempts = l->attempts;
                lease_end(cp, l);
                /* Out of memory: the offset is found by the scan instead. */
                pend_or_rescan(cp, off, attempts, now);
                any = true;
            }
            l = next;
        }
        c = c->next;
    } while (c != ch->consumers);
    if (any)
        tn__broker_pump_later(ch); /* their credit, for what is still served here */
}

void tn__topic_moved_away(tn_topic_t *t)
{
    tn_channel_t *next;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = next) {
        next = ch->next;
        /* Held: the last detach of an ephemeral channel would free it. */
        ch->busy++;
        for (;;) {
            tn_consumer_t *c = ch->consumers;
            size_t n = ch->nconsumers;
            while (n > 0 && c->moved == NULL) {
                c = c->next;
                n--;
            }
            if (n == 0)
                break;
            void (*moved)(tn_consumer_t * c) = c->moved;
            /* Detached first: the door may free c in its callback. */
            tn_consumer_detach(c);
            moved(c);
            if (ch->consumers == NULL)
                break;
        }
        /* Those that stay (left: never detached there) are told too. */
        tn_consumer_t *c = ch->consumers;
        for (size_t n = ch->nconsumers; n > 0; n--, c = c->next)
            if (c->left != NULL)
                c->left(c);
        ch->busy--;
        if (ch->deleted && ch->busy == 0)
            tn__channel_free(ch);
    }
}

void tn_consumer_credit(tn_consumer_t *c, uint32_t credit)
{
    bool more = credit > c->credit;
    c->credit = credit;
    if (more && c->ch != NULL)
        tn__broker_pump_later(c->ch);
}

static int find_lease(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                      uint32_t nonce, tn_chpart_t **cpp, tn_lease_t **lp)
{
    tn_channel_t *ch = c->ch;
    if (ch == NULL || partition >= ch->topic->nparts)
        return UV_EINVAL;
    tn_chpart_t *cp = ch->parts[partition];
    int rc = tn_leases_find(&cp->leases, offset, check_nonce, nonce, &c->owner, lp);
    if (rc != 0)
        return rc;
    *cpp = cp;
    return 0;
}

/* FIN a leased message (queue.h DESIGN: settling, step 1). */
static int settle(tn_consumer_t *c, tn_chpart_t *cp, tn_lease_t *l, uint64_t offset)
{
    int rc = log_failed(cp);
    if (rc != 0)
        return rc; /* the lease stays as it was */
    tn_walrec_t r = {.op = TN_WAL_FIN, .offset = offset};
    rc = record(cp, &r);
    if (rc != 0 && !cp->broken)
        return rc; /* out of memory before anything changed */
    lease_end(cp, l);
    if (rc == 0)
        c->finish_count++;
    tn__broker_rewake(cp);
    tn__broker_pump_later(c->ch);
    return rc;
}

int tn_consumer_fin(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                    uint32_t nonce)
{
    tn_chpart_t *cp;
    tn_lease_t *l;
    int rc = find_lease(c, partition, offset, check_nonce, nonce, &cp, &l);
    if (rc != 0)
        return rc;
    return settle(c, cp, l, offset);
}

void tn_channel_sync(tn_channel_t *ch, uint32_t partition, tn_chan_sync_t *s, tn_chan_sync_cb cb)
{
    tn_chpart_t *cp = NULL;
    if (ch != NULL && ch->state == TN_OBJ_READY && partition < ch->topic->nparts)
        cp = ch->parts[partition];
    if (cp == NULL || cp->cl == NULL) {
        cb(s, 0); /* memory only: nothing to make durable */
        return;
    }
    int err = log_failed(cp);
    uint64_t seq = tn_chanlog_submitted(cp->cl);
    if (err != 0 || (tn_chanlog_completed(cp->cl) >= seq && cp->settled_seq >= seq)) {
        cb(s, err);
        return;
    }
    s->seq = seq;
    s->cb = cb;
    s->next = NULL;
    if (cp->sync_tail != NULL)
        cp->sync_tail->next = s;
    else
        cp->sync_head = s;
    cp->sync_tail = s;
}

/* Syncs of several channel partitions, counted down: cb runs once with
 * the first error after the last one ended (tn_topic_part_requeue_leases:
 * one sync per channel; tn_channel_sync_all: one per local partition). */
typedef struct {
    tn_requeue_cb cb;
    void *arg;
    uint32_t pending; /* syncs not ended, plus one while they start */
    int status;       /* the first error */
    tn_chan_sync_t syncs[];
} syncs_op_t;

static syncs_op_t *syncs_op_new(uint32_t n, tn_requeue_cb cb, void *arg)
{
    syncs_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)n * sizeof(op->syncs[0]));
    if (op == NULL)
        return NULL;
    op->cb = cb;
    op->arg = arg;
    op->pending = 1; /* held while the syncs start */
    return op;
}

static void syncs_op_ended(syncs_op_t *op, int status)
{
    if (op->status == 0)
        op->status = status;
    if (--op->pending > 0)
        return;
    op->cb(op->arg, op->status);
    tn_free(op);
}

static void on_syncs_op_sync(tn_chan_sync_t *s, int status)
{
    syncs_op_ended(s->data, status);
}

/* Start the sync of partition p of ch as op's syncs[k]. */
static void syncs_op_start(syncs_op_t *op, uint32_t k, tn_channel_t *ch, uint32_t p)
{
    /* op is the sync's until its cb (each sync counted once). */
    op->syncs[k].data = op;
    op->pending++;
    tn_channel_sync(ch, p, &op->syncs[k], on_syncs_op_sync);
}

static void pause_file_sync(tn_channel_t *ch, tn_chan_sync_t *s, tn_chan_sync_cb cb);

int tn_channel_sync_all(tn_channel_t *ch, tn_requeue_cb cb, void *arg)
{
    uint32_t n = ch->state == TN_OBJ_READY ? ch->topic->nparts : 0;
    syncs_op_t *op = syncs_op_new(n + 1, cb, arg);
    if (op == NULL)
        return UV_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if (!ch->parts[i]->part->remote)
            syncs_op_start(op, i, ch, i);
    if (n > 0) {
        /* And the node's pause file (syncs[n]). */
        op->syncs[n].data = op;
        op->pending++;
        pause_file_sync(ch, &op->syncs[n], on_syncs_op_sync);
    }
    syncs_op_ended(op, 0);
    return 0;
}

int tn__topic_sync_channels(tn_topic_t *t, tn_requeue_cb cb, void *arg)
{
    uint32_t nch = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        nch++;
    syncs_op_t *op = syncs_op_new(nch * t->nparts, cb, arg);
    if (op == NULL)
        return UV_ENOMEM;
    uint32_t k = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL && k < nch * t->nparts; ch = ch->next) {
        for (uint32_t i = 0; i < t->nparts; i++, k++)
            if (ch->state == TN_OBJ_READY && !t->parts[i]->remote)
                syncs_op_start(op, k, ch, i);
    }
    syncs_op_ended(op, 0);
    return 0;
}

int tn_topic_part_requeue_leases(tn_topic_t *t, uint32_t p, tn_requeue_cb cb, void *arg)
{
    uint32_t nch = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        nch++;
    syncs_op_t *op = syncs_op_new(nch, cb, arg);
    if (op == NULL)
        return UV_ENOMEM;
    uint32_t k = 0;
    int refused = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL && k < nch; ch = ch->next, k++) {
        if (p < t->nparts && ch->state == TN_OBJ_READY && ch->consumers != NULL) {
            tn_chpart_t *cp = ch->parts[p];
            tn_consumer_t *c = ch->consumers;
            do {
                tn_lease_t *l = c->owner.head;
                while (l != NULL) {
                    tn_lease_t *next = l->owner_next;
                    /* A REQ refused (no memory for its pending entry, a
                     * log that cannot take its record) keeps its lease:
                     * cb gets that error, so the caller tries again
                     * before the hand-over rather than hand over a
                     * message still leased here whose attempts no record
                     * carries. The others are requeued meanwhile. */
                    int rc = l->data == cp ? tn_consumer_req(c, p, l->offset, false, 0, 0) : 0;
                    if (rc != 0 && refused == 0)
                        refused = rc;
                    l = next;
                }
                c = c->next;
            } while (c != ch->consumers);
        }
        syncs_op_start(op, k, ch, p);
    }
    syncs_op_ended(op, refused);
    return 0;
}

void tn_broker_set_chan_repl(tn_broker_t *b, const tn_chan_repl_t *hooks)
{
    if (hooks != NULL)
        b->chan_repl = *hooks;
    else
        memset(&b->chan_repl, 0, sizeof(b->chan_repl));
}

void tn_broker_chan_repl_done(tn_broker_t *b, const char *topic, const char *channel, uint32_t p,
                              uint64_t seq, int status)
{
    tn_topic_t *t = tn__topic_find(b, topic, strlen(topic));
    if (t == NULL || t->state != TN_OBJ_READY || p >= t->nparts)
        return;
    tn_channel_t *ch = channel_find(t, channel, strlen(channel));
    if (ch == NULL || ch->state != TN_OBJ_READY || ch->parts[p] == NULL || ch->parts[p]->cl == NULL)
        return;
    tn_chpart_t *cp = ch->parts[p];
    uint64_t done = tn_chanlog_completed(cp->cl);
    if (seq > done)
        seq = done; /* a stale report of a log opened before this one */
    if (status == 0 && seq > cp->settled_seq)
        cp->settled_seq = seq;
    sync_run(cp, seq, status);
}

/* A settle another leader made (tn_broker_chan_apply: rec applied to the
 * cursor) takes off the pending entries of the offsets it settled, which
 * a REQ from that leader made here: else they stayed until this node led
 * the partition again and their delivery came due, one per message ever
 * put back while the log follows (for days, beside a leader set aside),
 * and counted as deferred once led here. FIN and SKIP settle one offset,
 * EMPTY everything below its own. Out of memory: those of an EMPTY stay,
 * and delivery drops them as it meets them (chpart_next). */
static void pend_drop_settled(tn_chpart_t *cp, const tn_walrec_t *rec)
{
    if (tn_u64map_size(&cp->pend_map) == 0)
        return;
    if (rec->op == TN_WAL_FIN || rec->op == TN_WAL_SKIP) {
        tn__pend_t *pe = tn_u64map_get(&cp->pend_map, rec->offset);
        if (pe != NULL && tn_cursor_is_settled(&cp->cur, rec->offset))
            pend_free(cp, pe);
        return;
    }
    if (rec->op != TN_WAL_EMPTY)
        return;
    /* The map may not change while it is walked: the offsets first. */
    size_t n = 0, pos = 0;
    uint64_t key;
    void *val;
    while (tn_u64map_next(&cp->pend_map, &pos, &key, &val))
        n += tn_cursor_is_settled(&cp->cur, key);
    if (n == 0)
        return;
    uint64_t *offs = tn_malloc(n * sizeof(*offs));
    if (offs == NULL)
        return;
    size_t k = 0;
    pos = 0;
    while (k < n && tn_u64map_next(&cp->pend_map, &pos, &key, &val))
        if (tn_cursor_is_settled(&cp->cur, key))
            offs[k++] = key;
    for (size_t i = 0; i < k; i++)
        pend_free(cp, tn_u64map_get(&cp->pend_map, offs[i]));
    tn_free(offs);
}

/* A follower's record (tn_broker_chan_apply) completed. A write that
 * found the disk full failed alone (TN_WALOP_SPACE_OK) with the cursor
 * already applied: cp waits for space as a record of its own would
 * (log_full), and full_resume takes the cursor back to the durable state,
 * which the leader's retry then brings forward again. */
static void on_apply_walop(tn_walop_t *op, int status)
{
    walop_t *w = TN_CONTAINER_OF(op, walop_t, op);
    tn_chpart_t *cp = w->cp;
    tn_channel_t *ch = cp->ch;
    tn_broker_t *b = ch->topic->broker;
    tn_walop_t *outer = w->outer;
    tn_walop_cb cb = w->outer_cb;
    if (tn_io_nospace(status) && cp->cl != NULL && tn_chanlog_err(cp->cl) == 0)
        log_full(cp, status);
    walop_put(w);
    cb(outer, status);
    /* The channel is held (busy) until after the caller's callback. */
    ch->busy--;
    if (ch->deleted && ch->busy == 0)
        tn__channel_free(ch);
    tn__broker_work_done(b);
}

int tn_broker_chan_apply(tn_broker_t *b, const char *topic, const char *channel, uint32_t p,
                         const tn_walrec_t *rec, tn_walop_t *op, tn_walop_cb cb)
{
    tn_topic_t *t = tn__topic_find(b, topic, strlen(topic));
    if (t == NULL || t->state != TN_OBJ_READY || p >= t->nparts)
        return TN_ENOTFOUND;
    tn_channel_t *ch = channel_find(t, channel, strlen(channel));
    if (ch == NULL || ch->state != TN_OBJ_READY || ch->parts[p] == NULL || ch->parts[p]->cl == NULL)
        return TN_ENOTFOUND;
    tn_chpart_t *cp = ch->parts[p];
    if (!cp->part->remote)
        return UV_EBUSY;
    /* A record the log refuses changes nothing here: the leader sends it
     * again (setrepl.c engine_write), and the cursor stays the log's
     * state. So does one while the log waits for space (log_full): the
     * cursor is to be taken back. */
    if (cp->full != 0)
        return cp->full;
    int rc = tn_chanlog_refuses(cp->cl, rec);
    if (rc != 0)
        return rc;
    walop_t *w = walop_get();
    if (w == NULL)
        return UV_ENOMEM;
    /* Another leader's state: the offsets this node's own moves left
     * (dlq_copied) may hold other messages by now (a log cut at a
     * divergence), which a FIN alone would lose. */
    dlq_copied_clear(cp);
    rc = tn_cursor_apply(&cp->cur, rec);
    if (rc != 0) {
        walop_put(w);
        return rc;
    }
    /* A message put back by the leader waits here as there: until its
     * due time, with the attempts the record carries (a log opened from
     * its files does the same, tn__chpart_init), once this node serves
     * the partition again. The cursor alone would leave it to the scan,
     * which delivers at once and counts attempts from 0: a nack's delay
     * answered OK would be forgotten at a hand-back. A REQ of an offset
     * settled here is ignored, as the cursor ignores it, and so is one
     * leased here (a dead-letter move under way: an offset is never
     * pending and leased at once). Out of memory: the scan finds it. */
    if (rec->op == TN_WAL_REQ && !tn_cursor_is_settled(&cp->cur, rec->offset) &&
        tn_leases_get(&cp->leases, rec->offset) == NULL) {
        pend_or_rescan(cp, rec->offset, rec->attempts,
                       wall_to_mono(rec->due_ms, tn_now_wall_ms(), tn_now_mono_ms()));
        tn__broker_rewake(cp);
    } else if (rec->op != TN_WAL_REQ) {
        pend_drop_settled(cp, rec);
    }
    memset(w, 0, sizeof(*w));
    w->cp = cp;
    w->outer = op;
    w->outer_cb = cb;
    rc = tn_chanlog_submit_ex(cp->cl, &w->op, rec, on_apply_walop, TN_WALOP_SPACE_OK);
    if (rc != 0) {
        walop_put(w);
        return rc;
    }
    cp->ch->busy++;
    b->workers++;
    return 0;
}

int tn_consumer_ack(tn_consumer_t *c, uint32_t partition, uint64_t offset, uint32_t nonce)
{
    tn_chpart_t *cp;
    tn_lease_t *l;
    int rc = find_lease(c, partition, offset, true, nonce, &cp, &l);
    if (rc != 0)
        return rc;
    uint32_t cap = c->ch->topic->max_acked_ahead;
    if (cap > 0 && offset != cp->cur.frontier && cp->cur.nsettled >= cap)
        return UV_ENOBUFS;
    return settle(c, cp, l, offset);
}

int tn_consumer_req(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                    uint32_t nonce, int64_t delay_ms)
{
    tn_chpart_t *cp;
    tn_lease_t *l;
    int rc = find_lease(c, partition, offset, check_nonce, nonce, &cp, &l);
    if (rc != 0)
        return rc;
    if (delay_ms < 0)
        delay_ms = 0;
    rc = log_failed(cp);
    if (rc != 0)
        return rc; /* the lease stays as it was */
    uint32_t attempts = l->attempts;
    int64_t now_mono = tn_now_mono_ms();
    /* Its pending entry first, while it is still leased (the one moment an
     * offset is both): out of memory (UV_ENOMEM), the REQ is refused and
     * the lease stays as it was, so the delay is not lost to the scan,
     * which would deliver it at once. */
    rc = pend_add(cp, offset, attempts, now_mono + delay_ms);
    if (rc != 0)
        return rc;
    lease_end(cp, l);
    tn_walrec_t r = {.op = TN_WAL_REQ,
                     .offset = offset,
                     .due_ms = tn_now_wall_ms() + delay_ms,
                     .attempts = attempts};
    /* Out of memory for the record: the requeue holds in memory, and a
     * crash would deliver the message again at once anyway. */
    rc = record(cp, &r);
    c->requeue_count++;
    tn__broker_rewake(cp);
    tn__broker_pump_later(c->ch);
    return cp->broken ? rc : 0;
}

void tn_consumer_put_back(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                          uint32_t nonce, int64_t delay_ms)
{
    int rc = tn_consumer_req(c, partition, offset, check_nonce, nonce, delay_ms);
    tn_chpart_t *cp;
    tn_lease_t *l;
    if (rc == 0 || find_lease(c, partition, offset, check_nonce, nonce, &cp, &l) != 0)
        return; /* put back; or no such lease (any more: a REQ whose record failed) */
    /* Refused, the lease kept: it ends by delay_ms from now instead (not
     * later than it would have), as a timeout. Moving its deadline needs
     * no memory, and a lease's end never fails (pend_or_rescan). */
    if (delay_ms < 0)
        delay_ms = 0;
    int64_t deadline = lease_deadline(tn_now_mono_ms(), delay_ms);
    if (deadline < l->deadline.key)
        tn_leases_touch(&cp->leases, l, deadline);
    tn__broker_rewake(cp);
    TN_LOG_RL(TN_LOG_WARN, 10000,
              "channel %s of %s/%" PRIu32 ": putting offset %" PRIu64 " back: %s; its lease ends "
              "in %" PRId64 " ms instead",
              c->ch->name, c->ch->topic->name, partition, offset, tn_strerror(rc), delay_ms);
}

int tn_consumer_dead_letter(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                            uint32_t nonce, const tn_msg_t *body, const tn_msg_t *key,
                            tn_dlq_done_cb cb, void *arg)
{
    tn_chpart_t *cp;
    tn_lease_t *l;
    int rc = find_lease(c, partition, offset, check_nonce, nonce, &cp, &l);
    if (rc != 0)
        return rc;
    rc = log_failed(cp);
    if (rc != 0)
        return rc; /* the lease stays as it was */
    uint32_t attempts = l->attempts;
    lease_end(cp, l);
    tn__broker_pump_later(c->ch); /* before dead_letter, whose cb may detach c */
    dead_letter(cp, offset, attempts, attempts, body, key, cb, arg);
    return 0;
}

void tn_consumer_unhold(tn_consumer_t *c)
{
    if (c->ch != NULL)
        tn__broker_pump_later(c->ch);
}

int tn_consumer_touch(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                      uint32_t nonce, int64_t timeout_ms, int64_t max_ms)
{
    tn_chpart_t *cp;
    tn_lease_t *l;
    int rc = find_lease(c, partition, offset, check_nonce, nonce, &cp, &l);
    if (rc != 0)
        return rc;
    int64_t deadline = lease_deadline(tn_now_mono_ms(), timeout_ms);
    if (max_ms > 0 && l->leased_ms >= 0)
        deadline = TN_MIN(deadline, lease_deadline(l->leased_ms, max_ms));
    tn_leases_touch(&cp->leases, l, deadline);
    tn__broker_rewake(cp);
    return 0;
}

/* --- stats and admin -------------------------------------------------------- */

static bool ctl_settled(const void *cur, uint64_t offset)
{
    return tn_cursor_is_settled(cur, offset);
}

void tn_channel_stats(const tn_channel_t *ch, tn_channel_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (ch->state != TN_OBJ_READY)
        return;
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        const tn_chpart_t *cp = ch->parts[i];
        if (cp->part->remote)
            continue; /* counted by its owner */
        uint64_t tail = tn__part_limit(cp->part);
        uint64_t unsettled = tail > cp->cur.frontier ? tail - cp->cur.frontier : 0;
        unsettled = unsettled > cp->cur.nsettled ? unsettled - cp->cur.nsettled : 0;
        /* Control records (epoch starts, PRODUCER marks) are not messages.
         * The scan settles each one it passes (a SKIP, in nsettled or
         * below the frontier from then on); those from the scan on that
         * nothing settled yet are taken off here. */
        uint64_t from = TN_MAX(cp->scan, cp->cur.frontier);
        if (from < tail) {
            uint64_t ctl = tn_plog_controls_in(cp->part->plog, from, tail, ctl_settled, &cp->cur);
            unsettled -= TN_MIN(unsettled, ctl);
        }
        out->depth += unsettled;
        out->inflight += tn_leases_count(&cp->leases);
        /* Entries still in the pending heap wait for a time; due ones move
         * to the ready heap as the pump or the timer gets to them. */
        out->deferred += tn_heap_size(&cp->pending);
        /* A FIN counts as done only once its record is durable. */
        uint64_t unsynced = TN_MIN(cp->fins_unsynced, cp->cur.finish_count);
        out->depth += unsynced;
        out->finish_count += cp->cur.finish_count - unsynced;
        out->requeue_count += cp->cur.requeue_count;
        out->timeout_count += cp->cur.timeout_count;
    }
    /* Messages that entered the channel: finished or still in it. Both
     * parts survive a restart, so this does too. */
    out->message_count = out->finish_count + out->depth;
}

/* --- the node's pause file ------------------------------------------------------ */

typedef struct {
    uv_work_t work;
    tn_channel_t *ch; /* loop thread only */
    tn_store_t *store;
    char *topic;
    char *name;
    int paused;
    uint64_t covers; /* the asks (ch->pause_asked) this write covers */
    /* A pause on a node with no directory of the topic (no copy of any
     * partition here) makes one: the topic's stamp first (topic_ms, 0:
     * there already), then the pause file, then the channel's stamp
     * (stamp, 0: there already), so that a restart keeps the pause
     * (chan_create_work finds its stamp: this very channel's). */
    int64_t topic_ms;
    uint64_t stamp;
    bool stamp_written;
    int rc;
} chpause_job_t;

static void chpause_work(uv_work_t *w)
{
    chpause_job_t *j = TN_CONTAINER_OF(w, chpause_job_t, work);
    if (j->topic_ms > 0)
        j->rc = tn_store_topic_stamp_write(j->store, j->topic, j->topic_ms, true);
    if (j->rc == 0)
        j->rc = tn_store_channel_pause_write(j->store, j->topic, j->name, j->paused, NULL);
    if (j->rc == 0 && j->stamp != 0)
        j->rc =
            tn_store_channel_stamp_write(j->store, j->topic, j->name, j->stamp, &j->stamp_written);
}

/* End the waits the finished write covers (all of them when it failed:
 * the answer says so, as a record that failed). */
static void pause_waits_run(tn_channel_t *ch, uint64_t covers, int status)
{
    tn_chan_sync_t **pp = &ch->pause_waits;
    while (*pp != NULL) {
        tn_chan_sync_t *s = *pp;
        if (status == 0 && s->seq > covers) {
            pp = &s->next;
            continue;
        }
        *pp = s->next;
        s->next = NULL;
        s->cb(s, status);
    }
}

/* A pause file write (of paused) failed: every ask it covers, and every
 * one since, is answered with the error (pause_waits_run), so the
 * channel is taken back to the pause the file held before, in memory and
 * in the logs held here (tn__pause_take_back; a write asked is written
 * next, chpause_done, no answer waiting for it). */
static void pause_take_back(tn_channel_t *ch, bool paused)
{
    if (!tn__pause_take_back(&ch->paused, ch->paused_kept, paused, &ch->pause_asked))
        return;
    TN_LOG(TN_LOG_WARN, "channel %s of %s: %s again, as its pause file says", ch->name,
           ch->topic->name, ch->paused ? "paused" : "unpaused");
    for (uint32_t i = 0; i < ch->topic->nparts; i++)
        if (!ch->parts[i]->part->remote)
            tn__chpart_take_pause(ch->parts[i]);
    if (!ch->paused)
        tn__broker_pump_later(ch);
}

static void chpause_done(uv_work_t *w, int status)
{
    chpause_job_t *j = TN_CONTAINER_OF(w, chpause_job_t, work);
    tn_channel_t *ch = j->ch;
    tn_broker_t *b = ch->topic->broker;
    int rc = j->rc != 0 ? j->rc : status;
    ch->pause_writing = false;
    if (rc == 0 && j->topic_ms > 0)
        tn_topic_stamped(ch->topic, j->topic_ms);
    if (rc == 0 && j->stamp_written)
        ch->stamp_kept = j->stamp;
    if (rc == 0) {
        ch->pause_done = j->covers;
        ch->paused_kept = j->paused == 1;
    } else {
        TN_LOG_RL(TN_LOG_ERROR, 60000, "channel %s of %s: writing its pause file failed: %s",
                  j->name, j->topic, tn_strerror(rc));
        if (!ch->deleted)
            pause_take_back(ch, j->paused == 1);
    }
    uint64_t covers = j->covers;
    tn_free(j->topic);
    tn_free(j->name);
    tn_free(j);
    void *drop = ch->pause_drop;
    ch->pause_drop = NULL;
    pause_waits_run(ch, covers, rc);
    /* Asked again while it ran: the next write, unless the channel goes. */
    if (ch->pause_asked > covers && !ch->deleted)
        pause_write_start(ch);
    else if (ch->deleted)
        pause_waits_run(ch, UINT64_MAX, TN_ECLOSED);
    if (--ch->busy == 0 && ch->deleted)
        tn__channel_free(ch);
    if (drop != NULL)
        drop_one(drop); /* a deletion waiting for the write */
    tn__broker_work_done(b);
}

/* Write ch->paused to the pause file, covering every ask so far. A write
 * that cannot start ends the waits with its error. */
static void pause_write_start(tn_channel_t *ch)
{
    if (ch->stamping)
        return; /* the stamp job writes the pause file too: after it (chstamp_done) */
    tn_topic_t *t = ch->topic;
    chpause_job_t *j = tn_calloc(1, sizeof(*j));
    if (j != NULL) {
        j->ch = ch;
        j->store = t->broker->store;
        j->paused = ch->paused ? 1 : 0;
        j->covers = ch->pause_asked;
        /* Paused with its record's stamp known (a cluster's channel): the
         * directory is made for it when the topic has none here. */
        if (ch->paused && ch->stamp != 0 && !t->memory) {
            j->topic_ms = tn_topic_stamp_due(t);
            j->stamp = ch->stamp != ch->stamp_kept ? ch->stamp : 0;
        }
        j->topic = tn_strdup(t->name);
        j->name = tn_strdup(ch->name);
    }
    if (j == NULL || j->topic == NULL || j->name == NULL ||
        uv_queue_work(t->broker->loop, &j->work, chpause_work, chpause_done) != 0) {
        if (j != NULL) {
            tn_free(j->topic);
            tn_free(j->name);
            tn_free(j);
        }
        pause_waits_run(ch, UINT64_MAX, UV_ENOMEM);
        return;
    }
    ch->pause_writing = true;
    ch->busy++;
    t->broker->workers++;
}

/* Wait (s, cb) until the pause file holds every tn_channel_pause asked
 * so far: at once when it does. */
static void pause_file_sync(tn_channel_t *ch, tn_chan_sync_t *s, tn_chan_sync_cb cb)
{
    if (ch->memory || ch->pause_done >= ch->pause_asked) {
        cb(s, 0);
        return;
    }
    s->seq = ch->pause_asked;
    s->cb = cb;
    s->next = ch->pause_waits;
    ch->pause_waits = s;
    if (!ch->pause_writing)
        pause_write_start(ch); /* the last write failed: once more */
}

/* The error of the first log of a partition held here that cannot take
 * a record (found the disk full, or failed), else 0: a change of the
 * whole channel (a pause, an empty) is refused before anything changes,
 * so its answer (an error) and what a restart loads (the pause file, the
 * logs) agree. */
static int local_log_failed(const tn_channel_t *ch)
{
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        int err = ch->parts[i]->part->remote ? 0 : log_failed(ch->parts[i]);
        if (err != 0)
            return err;
    }
    return 0;
}

int tn_channel_pause(tn_channel_t *ch, bool paused)
{
    if (ch->state != TN_OBJ_READY)
        return UV_EAGAIN;
    /* Taken in memory and in the pause file with a log refusing its
     * record, the channel stayed paused past an error. */
    int err = local_log_failed(ch);
    if (err != 0)
        return err;
    ch->paused = paused;
    if (!ch->memory) {
        /* The node's pause, whatever it leads (a restart loads it). */
        ch->pause_asked++;
        if (!ch->pause_writing)
            pause_write_start(ch);
    }
    int rc = 0;
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        if (ch->parts[i]->part->remote)
            continue; /* one led here later takes ch->paused (tn__chpart_reset) */
        tn_walrec_t r = {.op = TN_WAL_PAUSE, .value = paused ? 1 : 0};
        int e = record(ch->parts[i], &r);
        if (e != 0 && rc == 0)
            rc = e;
    }
    if (!paused)
        tn__broker_pump_later(ch);
    return rc;
}

int tn_channel_empty(tn_channel_t *ch)
{
    if (ch->state != TN_OBJ_READY)
        return UV_EAGAIN;
    /* Leases and deferred messages dropped with a log refusing the
     * record: the answer an error, yet gone from memory, back after a
     * restart. */
    int err = local_log_failed(ch);
    if (err != 0)
        return err;
    tn_broker_t *b = ch->topic->broker;
    int rc = 0;
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        tn_chpart_t *cp = ch->parts[i];
        if (cp->part->remote)
            continue;
        /* In flight: the leases end (a late FIN fails, as in nsqd). */
        size_t pos = 0;
        uint64_t key;
        void *val;
        tn_lease_t *l;
        while ((l = tn_leases_expired(&cp->leases, INT64_MAX)) != NULL) {
            if (l->owner != NULL) {
                b->inflight_bytes -= l->bytes;
                b->inflight_msgs--;
            }
            tn_leases_remove(&cp->leases, l);
        }
        while (tn_u64map_next(&cp->pend_map, &pos, &key, &val)) {
            tn__pend_t *pe = val;
            pend_unlink(cp, pe);
            tn_free(pe);
        }
        tn_u64map_fini(&cp->pend_map);
        tn_u64map_init(&cp->pend_map);
        uint64_t tail = tn_plog_visible_next(cp->part->plog);
        if (cp->part->appended_next > tail)
            tail = cp->part->appended_next;
        tn_walrec_t r = {.op = TN_WAL_EMPTY, .offset = tail};
        int e = record(cp, &r);
        if (e != 0 && rc == 0)
            rc = e;
        if (cp->scan < cp->cur.frontier)
            cp->scan = cp->cur.frontier;
        tn__broker_rewake(cp);
    }
    if (b->starved != NULL)
        tn__broker_unstarve(b);
    return rc;
}

uint64_t tn__part_limit(const tn_part_t *p)
{
    uint64_t limit = TN_MIN(tn_plog_visible_next(p->plog), p->appended_next);
    return p->topic->paused && p->hold < limit ? p->hold : limit;
}

uint64_t tn_part_message_count(const tn_part_t *p)
{
    uint64_t next = tn_plog_written_next(p->plog);
    return next - TN_MIN(next, tn_plog_controls_below(p->plog, next));
}

uint64_t tn_topic_depth(const tn_topic_t *t)
{
    uint64_t depth = 0;
    for (uint32_t i = 0; i < t->nparts; i++) {
        const tn_part_t *p = t->parts[i];
        if (p->remote)
            continue; /* held by its owner */
        uint64_t end = TN_MIN(tn_plog_visible_next(p->plog), p->appended_next);
        uint64_t from = end;
        if (t->channels == NULL) {
            tn_plog_stats_t st;
            tn_plog_stats(p->plog, &st);
            from = st.first_offset;
        } else if (t->paused) {
            /* What retention reclaimed of the held messages is gone:
             * no channel gets it at the unpause. */
            tn_plog_stats_t st;
            tn_plog_stats(p->plog, &st);
            from = TN_MAX(p->hold, st.first_offset);
        }
        if (end > from) {
            /* Messages only: a replicated partition's control records
             * hold offsets too (storage/plog.h). */
            uint64_t ctl =
                tn_plog_controls_below(p->plog, end) -
                TN_MIN(tn_plog_controls_below(p->plog, end), tn_plog_controls_below(p->plog, from));
            depth += end - from - TN_MIN(end - from, ctl);
        }
    }
    return depth;
}

/* --- deletion ------------------------------------------------------------------- */

typedef struct {
    void (*done)(void *arg);
    void *arg;
    uint32_t left;
} drop_t;

static void kick_all(tn_channel_t *ch)
{
    /* Held: the last detach of an ephemeral channel would free it here. */
    ch->busy++;
    while (ch->nconsumers > 0) {
        tn_consumer_t *c = ch->consumers;
        void (*kick)(tn_consumer_t * c) = c->kick;
        /* Detached first: the door may free c in its kick. */
        tn_consumer_detach(c);
        c->replaced = ch->replaced;
        if (kick != NULL)
            kick(c);
    }
    ch->busy--;
}

static void drop_one(void *arg)
{
    drop_t *d = arg;
    if (--d->left == 0) {
        d->done(d->arg);
        tn_free(d);
    }
}

static void on_drop_closed(tn_chanlog_t *cl)
{
    drop_one(cl->data);
}

uint32_t tn__channel_drop(tn_channel_t *ch, void (*done)(void *arg), void *arg)
{
    if (ch->memory) {
        /* Nothing on disk. The last detach of an ephemeral channel's
         * consumers unlinks it; otherwise it is unlinked here. */
        tn_topic_t *t = ch->topic;
        kick_all(ch);
        if (!ch->deleted) {
            tn__broker_event(t->broker, TN_EV_CHANNEL_DOWN, t->name, ch->name);
            channel_unlink(ch);
            ch->deleted = true;
        }
        if (ch->busy == 0)
            tn__channel_free(ch);
        tn__topic_vanish_if_unused(t);
        return 0;
    }
    ch->busy++;
    kick_all(ch);
    tn__broker_event(ch->topic->broker, TN_EV_CHANNEL_DOWN, ch->topic->name, ch->name);
    channel_unlink(ch);
    ch->deleted = true;
    drop_t *d = tn_calloc(1, sizeof(*d));
    uint32_t n = 0;
    for (uint32_t i = 0; i < ch->topic->nparts; i++) {
        tn_chpart_t *cp = ch->parts[i];
        tn__broker_rewake(cp);
        if (cp->cl == NULL)
            continue;
        cp->broken = true;
        if (d != NULL) {
            cp->cl->data = d;
            d->left++;
            n++;
            tn_chanlog_close(cp->cl, on_drop_closed);
        } else {
            tn_chanlog_close(cp->cl, NULL); /* out of memory: not waited for */
        }
        cp->cl = NULL;
    }
    if (ch->stamping && d != NULL) {
        /* Its stamp being written: the files go once it is (chstamp_done). */
        ch->stamp_drop = d;
        d->left++;
        n++;
    }
    if (ch->pause_writing && d != NULL) {
        /* Its pause file being written: likewise (chpause_done). */
        ch->pause_drop = d;
        d->left++;
        n++;
    }
    if (d != NULL) {
        d->done = done;
        d->arg = arg;
        if (d->left == 0)
            tn_free(d);
    }
    ch->busy--;
    if (ch->busy == 0)
        tn__channel_free(ch);
    return n;
}

typedef struct {
    uv_work_t work;
    tn_broker_t *b;
    char *topic;
    char *channel;
    uint32_t nparts;
    tn_delete_cb cb;
    void *arg;
    int rc;
} chdel_t;

static void chdel_work(uv_work_t *w)
{
    chdel_t *d = TN_CONTAINER_OF(w, chdel_t, work);
    /* Partition 0 last: while its checkpoint exists the channel exists. */
    for (uint32_t i = d->nparts; i-- > 0;) {
        int rc = tn_chanlog_delete(d->b->store, d->topic, i, d->channel);
        if (rc != 0 && rc != UV_ENOENT && d->rc == 0)
            d->rc = rc;
    }
    /* Then its stamp and its pause file (no stamp without a pause file:
     * load_paused): ones left by a crash before are removed by the next
     * channel of the name, before its first checkpoint. */
    if (d->rc == 0)
        d->rc = tn_store_channel_stamp_write(d->b->store, d->topic, d->channel, 0, NULL);
    if (d->rc == 0)
        d->rc = tn_store_channel_pause_write(d->b->store, d->topic, d->channel, -1, NULL);
}

static void chdel_done(uv_work_t *w, int status)
{
    chdel_t *d = TN_CONTAINER_OF(w, chdel_t, work);
    tn_broker_t *b = d->b;
    if (d->rc == 0 && status != 0)
        d->rc = status;
    if (d->rc != 0)
        TN_LOG(TN_LOG_ERROR, "deleting channel %s of %s: %s", d->channel, d->topic,
               tn_strerror(d->rc));
    else
        TN_LOG(TN_LOG_INFO, "channel %s of %s deleted", d->channel, d->topic);
    if (d->cb != NULL)
        d->cb(d->arg, d->rc);
    tn_free(d->topic);
    tn_free(d->channel);
    tn_free(d);
    tn__broker_work_done(b);
}

/* The deletion counts as a broker work from tn_channel_delete on (so
 * tn_broker_close waits for logs still closing before it frees b). */
static void chdel_start(void *arg)
{
    chdel_t *d = arg;
    if (uv_queue_work(d->b->loop, &d->work, chdel_work, chdel_done) != 0) {
        d->rc = UV_ENOMEM;
        chdel_done(&d->work, 0);
    }
}

int tn_channel_delete(tn_channel_t *ch, tn_delete_cb cb, void *arg)
{
    if (ch->state != TN_OBJ_READY || ch->deleted || ch->topic->growing)
        return UV_EBUSY;
    tn_broker_t *b = ch->topic->broker;
    if (ch->memory) {
        tn__channel_drop(ch, NULL, NULL);
        if (cb != NULL)
            cb(arg, 0);
        return 0;
    }
    chdel_t *d = tn_calloc(1, sizeof(*d));
    if (d == NULL)
        return UV_ENOMEM;
    d->b = b;
    d->topic = tn_strdup(ch->topic->name);
    d->channel = tn_strdup(ch->name);
    d->nparts = ch->topic->nparts;
    d->cb = cb;
    d->arg = arg;
    if (d->topic == NULL || d->channel == NULL) {
        tn_free(d->topic);
        tn_free(d->channel);
        tn_free(d);
        return UV_ENOMEM;
    }
    b->workers++;
    if (tn__channel_drop(ch, chdel_start, d) == 0)
        chdel_start(d);
    return 0;
}
