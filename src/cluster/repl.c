/* The decision core of a replicated partition on one node (cluster/repl.h):
 * the leader's and the follower's rules, events in, actions out.
 *
 * DESIGN: a replicated partition, as the core sees it.
 *   1. The metastore applies a partition state naming this node leader of
 *      epoch E (EV_STATE). The core asks for an epoch-start record at its
 *      log end S (ACT_APPEND_EPOCH_START) and forgets what it knew of the
 *      followers. It exposes nothing new (no hw move, so no acks, no
 *      deliveries, no settles) until the hw passes S.
 *   2. Producers append; the shell reports the log end and the flushed
 *      offset (EV_LOG). A produce is taken only when the committed ISR has
 *      at least min_insync members (tn_repl_accepts).
 *   3. Followers fetch (EV_FETCH) with (epoch, fetch_offset,
 *      last_fetched_epoch, flushed_offset, incarnation). A stale epoch is
 *      answered FENCED, a newer one UNKNOWNEPOCH (and the leader refreshes
 *      its state). When the leader's history ends last_fetched_epoch before
 *      fetch_offset, or lacks that epoch, the answer is DIVERGING(epoch',
 *      end) from the leader's history (KIP-320/279); otherwise records from
 *      fetch_offset, with the hw.
 *   4. hw = min of the flushed offsets of the committed ISR (what the
 *      followers' fetches and flush reports said: for one incarnation in
 *      one epoch it only grows, as reports and fetches cross), plus any
 *      member a CAS in flight may add (the safe direction: a late expand
 *      can never make the ISR larger than what the hw counted), of the
 *      incarnation the ISR names. It only grows, and moves only past S.
 *      It stays while the committed ISR has fewer than min_insync members
 *      (so those that left, the ELR, hold all of it), and while an ELR is
 *      left beside an ISR at min_insync (min_insync lowered under it): the
 *      leader then proposes the same ISR, which empties the ELR, before
 *      the hw moves past what its members hold. Each move is
 *      ACT_HW(h): produces below h complete with OK.
 *   5. A follower whose flushed offset has stayed behind the leader's log
 *      end (as of its previous fetch; a flushed offset, from a report or a
 *      fetch, that reaches the end as of one of the TN_REPL_MARKS fetches
 *      before counts as caught up at that fetch's time) for
 *      replica_lag_ms, or who fetches
 *      with another incarnation, is proposed out of the ISR (ACT_PROPOSE_ISR,
 *      a CAS on partition_epoch); one whose flushed offset reached the hw
 *      and passed S with the incarnation it fetches with, and which the
 *      first rule would keep (it caught up within replica_lag_ms: a
 *      silent follower is not re-added on the leader's own events), is
 *      proposed in, and with channels_gate only once the shell reported
 *      (EV_CHANNELS) that its channels' state caught up with the
 *      leader's for that incarnation (cluster/setrepl.c: a snapshot of
 *      each channel, then its records), so no member joins the ISR, and
 *      so none can be elected, without the settles the ISR confirmed.
 *      That report lapses when the follower joins or leaves the ISR or
 *      is marked corrupt: it speaks of one stretch outside the ISR. The
 *      members a proposal may add (maybe) are the shell's to count for
 *      the settle waits too (tn_replica_pending).
 *      The hw uses the new ISR only once the metastore applied it (EV_STATE).
 *   6. A follower fetches from the leader its state names, right after each
 *      append and each log change, after fetch_idle_ms when the last answer
 *      was empty, and again after fetch_timeout_ms without an answer. A
 *      fetch sent once records are written, before their fsync, carries the
 *      older flushed offset; when the flush comes while that fetch is out
 *      (parked at the leader until it has news), the follower reports it
 *      at once (ACT_REPORT, EV_FLUSHED at the leader), so its RPC round
 *      trip and its fsync overlap. A report carries the follower's log end
 *      and last epoch as a fetch does; the leader counts it only when that
 *      log agrees with its history there (as a fetch: a report may overtake
 *      the fetch sent before it), only up to that log end, for a follower
 *      that fetched in this epoch with that incarnation, not from before a
 *      corrupt mark, and only upward; a report of another epoch is ignored
 *      (a newer one: REFRESH). It
 *      learns hw = min(leader's hw, the log end it fetched at): not the
 *      end after the answer's records, whose append may fail (a deposed
 *      leader's own publishes landing first). On DIVERGING(e, end) it
 *      truncates to min(end, its own end of e): the divergence point from
 *      the epoch histories, never its own hw (KIP-101). A point below its
 *      hw is refused (ACT_TRUNCATE_REFUSED) and the follower stops: that
 *      would drop committed records, so it is reported, never done. After
 *      a DIVERGING the next fetch comes at the LOG event of a truncation
 *      that changed the log, else only after fetch_timeout_ms (a cut the
 *      shell could not make must not loop at every tick).
 *   7. FENCED, UNKNOWNEPOCH or REMOTE answers make the follower refresh its
 *      state from the metastore (ACT_REFRESH) and fetch again after
 *      fetch_idle_ms.
 * Failure modes: lost messages (fetches, answers, proposals, states) are
 * resent on timeouts or outdated by newer states; states arriving out of
 * order are ignored by partition_epoch; an answer to an older fetch is
 * dropped (records that do not start at the log end, a DIVERGING that
 * echoes another (fetch_offset, last_fetched_epoch)); a CAS refused by a rule is followed
 * by a same-ISR CAS so that a copy of the refused one still in flight can
 * never apply; a leader cut off from the metastore keeps its epoch but
 * cannot move its hw past what its ISR's followers flushed, and they leave
 * it once they learn the new epoch; a replica marked corrupt (it cut its
 * log at a CRC failure) counts only with fetches sent after it applied the
 * state that marked it, since earlier ones may describe records it no
 * longer has; so does a member that a move adds (in its target, not in its
 * old list) from the first state of that move the leader applies, since
 * it may have been dropped and its copy emptied (quarantine/) in states the
 * leader skipped; disk errors and power loss are the shell's: it restarts
 * the core from the log as found on disk.
 * What the shell must guarantee (the simulation does): a restarted core
 * acts on no partition state older than its registration's answer (the
 * registration fenced its previous session; an older state might name it
 * the leader of an epoch whose tail it lost); a CRC failure is recorded on
 * disk before the log is cut and reported until the metastore applied it;
 * states lost on the way are made up for by polling the metastore.
 * Invariants: (1) the hw never passes a record some committed ISR member
 * (or pending addition) has not flushed; (2) the exposed hw only grows
 * within a leader's tenure and never passes its log end; (3) no action of
 * a leader follows a state naming another leader; (4) a follower never
 * truncates below its hw; (5) nothing here reads a clock. */
#include "core/platform.h"

#include "cluster/repl.h"

#include "core/err.h"

#include <string.h>

#ifdef TN_TEST
int tn_repl_test_break = TN_REPL_BREAK_NONE;
#define BROKEN(x) (tn_repl_test_break == (x))
#else
#define BROKEN(x) 0
#endif

static tn_repl_action_t *push(tn_repl_actions_t *out, tn_repl_act_type_t type)
{
    /* Every event emits at most TN_REPL_MAX_ACTIONS actions by construction. */
    if (out->n >= TN_REPL_MAX_ACTIONS)
        return &out->a[TN_REPL_MAX_ACTIONS - 1];
    tn_repl_action_t *a = &out->a[out->n++];
    memset(a, 0, sizeof(*a));
    a->type = type;
    return a;
}

void tn_repl_init(tn_repl_t *r, const tn_repl_config_t *cfg)
{
    memset(r, 0, sizeof(*r));
    r->cfg = *cfg;
    r->role = TN_REPL_NONE;
}

static tn_repl_peer_t *peer_find(tn_repl_t *r, uint32_t node)
{
    for (uint32_t i = 0; i < r->ps.nreplicas; i++)
        if (r->peers[i].node == node)
            return &r->peers[i];
    return NULL;
}

static uint64_t u64_min(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* --- leader ---------------------------------------------------------------------- */

/* A follower whose flushed offset reached the leader's log end as of its
 * previous fetch is caught up now; one that reached the end as of an
 * earlier fetch (under load its flush lands a fetch or two behind: the
 * fetch goes once the copy is written, the sync comes after) was caught
 * up at that fetch. */
static void note_caught_up(tn_repl_peer_t *p, uint64_t now)
{
    if (p->flushed >= p->leo_mark) {
        p->caught_up_at = now;
        return;
    }
    for (uint32_t i = 1; i <= p->nmarks; i++) { /* newest first: ends only grow */
        uint32_t k = (p->mark_head + TN_REPL_MARKS - i) % TN_REPL_MARKS;
        if (p->mark_leo[k] <= p->flushed) {
            if (p->mark_at[k] > p->caught_up_at)
                p->caught_up_at = p->mark_at[k];
            return;
        }
    }
}

/* The leader's log end leo at a fetch of p at now. */
static void push_mark(tn_repl_peer_t *p, uint64_t leo, uint64_t now)
{
    p->leo_mark = leo;
    p->mark_leo[p->mark_head] = leo;
    p->mark_at[p->mark_head] = now;
    p->mark_head = (p->mark_head + 1) % TN_REPL_MARKS;
    if (p->nmarks < TN_REPL_MARKS)
        p->nmarks++;
}

/* What the hw may count for ISR member m: its flushed offset if it fetched
 * in this epoch with the incarnation the ISR names, else 0. */
static uint64_t member_flushed(tn_repl_t *r, const tn_pstate_member_t *m)
{
    if (m->node == r->cfg.node)
        return BROKEN(TN_REPL_BREAK_HW_WRITTEN) ? r->end : r->flushed;
    tn_repl_peer_t *p = peer_find(r, m->node);
    if (p == NULL || !p->seen || p->incarnation != m->incarnation)
        return 0;
    return BROKEN(TN_REPL_BREAK_HW_WRITTEN) ? p->end : p->flushed;
}

static void update_hw(tn_repl_t *r, tn_repl_actions_t *out)
{
    uint64_t h = r->end;
    for (uint32_t i = 0; i < r->ps.nisr; i++)
        h = u64_min(h, member_flushed(r, &r->ps.isr[i]));
    for (uint32_t i = 0; i < r->nmaybe; i++)
        h = u64_min(h, member_flushed(r, &r->maybe[i]));
    /* Below min_insync the hw stays where it is: nothing is acknowledged
     * or shown, and the members that left hold everything below it (the
     * controller may elect them: meta/partstate.h, ELR). So it does while
     * an ELR is left with the ISR at min_insync (min_insync lowered under
     * it: a topic's update): moving on would leave those members
     * electable without what it covers; the same-ISR CAS the leader
     * proposes then (maybe_clear_elr) empties the ELR first. */
    if (r->ps.nisr < r->ps.min_insync || r->ps.nelr > 0 || h <= r->epoch_start || h <= r->hw)
        return;
    r->hw = h;
    r->acks_ok = true;
    tn_repl_action_t *a = push(out, TN_REPL_ACT_HW);
    a->offset = h;
    a->acks_ok = r->acks_ok;
}

static void propose(tn_repl_t *r, uint64_t now, const tn_pstate_member_t *isr, uint32_t n,
                    tn_repl_actions_t *out)
{
    r->proposing = true;
    r->proposed_at = now;
    r->proposed_pe = r->ps.partition_epoch;
    r->nproposed = n;
    memcpy(r->proposed, isr, n * sizeof(*isr));
    tn_repl_action_t *a = push(out, TN_REPL_ACT_PROPOSE_ISR);
    a->expected_pe = r->proposed_pe;
    a->leader_epoch = r->ps.leader_epoch;
    a->channels_checked = r->cfg.channels_gate;
    a->nisr = n;
    memcpy(a->isr, isr, n * sizeof(*isr));
}

static void maybe_expand(tn_repl_t *r, uint64_t now, tn_repl_actions_t *out)
{
    if (r->proposing)
        return;
    for (uint32_t i = 0; i < r->ps.nreplicas; i++) {
        tn_repl_peer_t *p = &r->peers[i];
        if (p->node == r->cfg.node || !p->seen || tn_pstate_isr_find(&r->ps, p->node) >= 0)
            continue;
        if (p->flushed < r->hw || p->flushed <= r->epoch_start)
            continue;
        /* Only a follower the shrink rule would keep: one that went
         * silent (stopped, cut off) is not behind when nothing was
         * appended since, yet it must stay out until it fetches again. */
        if (now >= p->caught_up_at + r->cfg.replica_lag_ms)
            continue;
        /* Nor one whose channels' state (FINs, acks, requeues) is not
         * all there: elected, it would deliver again what was settled. */
        if (r->cfg.channels_gate && (!p->chans_ok || p->chans_inc != p->incarnation))
            continue;
        tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
        uint32_t n = r->ps.nisr;
        memcpy(isr, r->ps.isr, n * sizeof(isr[0]));
        isr[n].node = p->node;
        isr[n].incarnation = p->incarnation;
        n++;
        if (r->nmaybe < TN_PSTATE_MAX_REPLICAS)
            r->maybe[r->nmaybe++] = isr[n - 1];
        propose(r, now, isr, n, out);
        return;
    }
}

static void maybe_shrink(tn_repl_t *r, uint64_t now, tn_repl_actions_t *out)
{
    if (r->proposing)
        return;
    tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->ps.nisr; i++) {
        const tn_pstate_member_t *m = &r->ps.isr[i];
        tn_repl_peer_t *p = peer_find(r, m->node);
        bool out_of_sync = false;
        if (m->node != r->cfg.node && p != NULL) {
            if (p->seen && p->incarnation != m->incarnation)
                out_of_sync = true; /* a wiped disk: it lacks what the ISR entry vouched */
            else if (now >= p->caught_up_at + r->cfg.replica_lag_ms)
                out_of_sync = true;
        }
        if (!out_of_sync)
            isr[n++] = *m;
    }
    if (n < r->ps.nisr)
        propose(r, now, isr, n, out);
}

/* An ELR beside an ISR at min_insync (min_insync lowered: a topic's
 * update, meta/state.c) freezes the hw (update_hw): a CAS of the same ISR
 * empties it (the controller's rule for an ISR at min_insync). */
static void maybe_clear_elr(tn_repl_t *r, uint64_t now, tn_repl_actions_t *out)
{
    if (!r->proposing && r->ps.nelr > 0 && r->ps.nisr >= r->ps.min_insync)
        propose(r, now, r->ps.isr, r->ps.nisr, out);
}

static void become_leader(tn_repl_t *r, uint64_t now, tn_repl_actions_t *out)
{
    r->role = TN_REPL_LEADER;
    r->became_at = now;
    r->epoch_start = r->end;
    r->hw = u64_min(r->hw, r->end);
    memset(r->peers, 0, sizeof(r->peers));
    for (uint32_t i = 0; i < r->ps.nreplicas; i++) {
        r->peers[i].node = r->ps.replicas[i];
        r->peers[i].caught_up_at = now;
        r->peers[i].leo_mark = r->end;
    }
    tn_repl_action_t *a = push(out, TN_REPL_ACT_APPEND_EPOCH_START);
    a->epoch = r->ps.leader_epoch;
    a->offset = r->end;
}

static void answer_error(tn_repl_actions_t *out, uint32_t node, int err)
{
    tn_repl_action_t *a = push(out, TN_REPL_ACT_ANSWER_ERROR);
    a->node = node;
    a->err = err;
}

static void on_fetch(tn_repl_t *r, const tn_repl_fetch_t *f, uint64_t now, tn_repl_actions_t *out)
{
    if (f->leader_epoch < r->ps.leader_epoch) {
        answer_error(out, f->node, TN_EFENCED);
        return;
    }
    if (f->leader_epoch > r->ps.leader_epoch) {
        answer_error(out, f->node, TN_EUNKNOWNEPOCH);
        push(out, TN_REPL_ACT_REFRESH);
        return;
    }
    tn_repl_peer_t *p = peer_find(r, f->node);
    if (r->role != TN_REPL_LEADER || p == NULL || f->node == r->cfg.node) {
        answer_error(out, f->node, TN_EREMOTE);
        return;
    }
    /* last_fetched_epoch 0 past offset 0: a copy with no history, emptied
     * to restart at this log's start after OUT_OF_RANGE (on_out_of_range):
     * nothing below its end to compare, as Kafka skips the check for a
     * follower whose epoch cache is empty. A replicated log with records
     * always has the epoch of its last one (storage/plog.h). */
    if (f->fetch_offset > 0 && f->last_fetched_epoch != 0) {
        uint32_t found = 0;
        uint64_t end = 0;
        int rc = r->cfg.epoch_end(r->cfg.epoch_end_arg, f->last_fetched_epoch, &found, &end);
        if (rc < 0) {
            answer_error(out, f->node, rc);
            return;
        }
        if (found != f->last_fetched_epoch || end < f->fetch_offset) {
            tn_repl_action_t *a = push(out, TN_REPL_ACT_ANSWER_DIVERGING);
            a->node = f->node;
            a->epoch = found;
            a->offset = end;
            a->count = f->fetch_offset;
            a->last_fetched_epoch = f->last_fetched_epoch;
            a->hw = r->hw;
            return;
        }
    }
    if (f->partition_epoch < p->min_pe) {
        /* Sent before the follower applied the state that marked its
         * replica corrupt: its offsets may predate the cut of its log. */
        tn_repl_action_t *a = push(out, TN_REPL_ACT_ANSWER_RECORDS);
        a->node = f->node;
        a->epoch = r->ps.leader_epoch;
        a->offset = f->fetch_offset;
        a->hw = r->hw;
        return;
    }
    /* The flushed offset only grows for one incarnation in this epoch
     * (seen: a corrupt mark resets it): a fetch sent once its records
     * were written carries the flushed offset from before their sync, and
     * the flush report sent after the sync may come first. What it reports
     * stays on that disk: the records below it agree with this leader's
     * log, so no truncation in this epoch goes below it. */
    uint64_t flushed = u64_min(f->flushed_offset, f->fetch_offset);
    if (!p->seen || p->incarnation != f->incarnation) {
        p->seen = true;
        p->incarnation = f->incarnation;
        p->flushed = flushed;
    } else if (flushed > p->flushed) {
        p->flushed = flushed;
    }
    p->end = f->fetch_offset;
    note_caught_up(p, now);
    push_mark(p, r->end, now);
    update_hw(r, out);
    tn_repl_action_t *a = push(out, TN_REPL_ACT_ANSWER_RECORDS);
    a->node = f->node;
    a->epoch = r->ps.leader_epoch;
    a->offset = f->fetch_offset;
    a->hw = r->hw;
    maybe_expand(r, now, out);
}

/* A follower's flush report: its records below flushed_offset are on its
 * disk. It carries the follower's log end and the epoch of its last record
 * as a fetch does, and counts only when that log agrees with the leader's
 * history there (the fetch's check; a report may overtake the fetch sent
 * before it, so it must stand on its own), for a follower that fetched in
 * this epoch with that incarnation, not from before a corrupt mark, only
 * up to that log end (never records the follower has not fetched), and
 * only raising what the leader knows (a late or repeated report changes
 * nothing). A stale epoch is ignored (fenced: the follower learns it from
 * its next fetch), a newer one makes the leader read its state. */
static void on_flushed(tn_repl_t *r, const tn_repl_fetch_t *f, uint64_t now, tn_repl_actions_t *out)
{
    if (f->leader_epoch > r->ps.leader_epoch) {
        push(out, TN_REPL_ACT_REFRESH);
        return;
    }
    if (r->role != TN_REPL_LEADER || f->leader_epoch < r->ps.leader_epoch || f->node == r->cfg.node)
        return;
    tn_repl_peer_t *p = peer_find(r, f->node);
    if (p == NULL || !p->seen || p->incarnation != f->incarnation || f->partition_epoch < p->min_pe)
        return;
    if (f->fetch_offset > 0 && f->last_fetched_epoch != 0) { /* as on_fetch's */
        uint32_t found = 0;
        uint64_t end = 0;
        if (r->cfg.epoch_end(r->cfg.epoch_end_arg, f->last_fetched_epoch, &found, &end) < 0 ||
            found != f->last_fetched_epoch || end < f->fetch_offset)
            return;
    }
    uint64_t flushed = u64_min(f->flushed_offset, f->fetch_offset);
    if (flushed <= p->flushed)
        return;
    p->flushed = flushed;
    if (f->fetch_offset > p->end)
        p->end = f->fetch_offset;
    note_caught_up(p, now);
    update_hw(r, out);
    maybe_expand(r, now, out);
}

static void on_refused(tn_repl_t *r, uint32_t pe, uint64_t now, tn_repl_actions_t *out)
{
    if (r->role != TN_REPL_LEADER || !r->proposing)
        return;
    if (pe != r->ps.partition_epoch) {
        push(out, TN_REPL_ACT_REFRESH); /* the STATE will settle it */
        return;
    }
    /* Refused by a rule in the current partition epoch. A copy of that
     * proposal may still be in flight and apply later, so the members it
     * would add keep counting for the hw until a same-ISR CAS has moved
     * the partition epoch past it. */
    r->proposing = false;
    if (r->nmaybe > 0)
        propose(r, now, r->ps.isr, r->ps.nisr, out);
}

/* --- follower -------------------------------------------------------------------- */

/* A FETCH or REPORT to the leader with this log's position; what it
 * carries is what the leader has been told. */
static void push_fetch(tn_repl_t *r, tn_repl_act_type_t type, tn_repl_actions_t *out)
{
    r->told = r->flushed;
    tn_repl_action_t *a = push(out, type);
    a->node = r->ps.leader;
    a->fetch.node = r->cfg.node;
    a->fetch.incarnation = r->cfg.incarnation;
    a->fetch.leader_epoch = r->ps.leader_epoch;
    a->fetch.fetch_offset = r->end;
    a->fetch.last_fetched_epoch = r->last_epoch;
    a->fetch.flushed_offset = r->flushed;
    a->fetch.partition_epoch = r->ps.partition_epoch;
}

static void send_fetch(tn_repl_t *r, uint64_t now, tn_repl_actions_t *out)
{
    if (r->stopped || r->role != TN_REPL_FOLLOWER)
        return;
    r->fetching = true;
    r->fetch_sent_at = now;
    push_fetch(r, TN_REPL_ACT_FETCH, out);
}

/* The flushed offset moved past what the fetch out carried: tell the
 * leader now rather than with the next fetch, which waits for that
 * fetch's answer (parked at the leader until new records come). */
static void send_report(tn_repl_t *r, tn_repl_actions_t *out)
{
    push_fetch(r, TN_REPL_ACT_REPORT, out);
}

static bool answer_current(const tn_repl_t *r, uint32_t leader_epoch)
{
    return r->role == TN_REPL_FOLLOWER && leader_epoch == r->ps.leader_epoch;
}

static void on_records(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    if (!answer_current(r, ev->u.records.leader_epoch) || ev->u.records.from != r->end)
        return; /* an answer to an older fetch: the newer one is (re)sent */
    r->fetching = false;
    /* Only up to the log end the leader has just confirmed (the fetch's
     * offset): the records are not appended yet, and the append can fail
     * (a deposed leader's own publishes landing there first), after which
     * the log there is not the leader's. The next answer covers them. */
    uint64_t hw = u64_min(ev->u.records.hw, r->end);
    if (hw > r->hw)
        r->hw = hw;
    if (ev->u.records.count > 0) {
        tn_repl_action_t *a = push(out, TN_REPL_ACT_APPEND);
        a->offset = ev->u.records.from;
        a->count = ev->u.records.count;
        /* The LOG event after the append sends the next fetch. */
    } else {
        r->next_fetch_at = ev->now + r->cfg.fetch_idle_ms;
    }
}

static void truncate_to(tn_repl_t *r, uint64_t point, tn_repl_actions_t *out)
{
    if (point < r->hw) {
        r->stopped = true;
        tn_repl_action_t *a = push(out, TN_REPL_ACT_TRUNCATE_REFUSED);
        a->offset = point;
        a->hw = r->hw;
        return;
    }
    tn_repl_action_t *a = push(out, TN_REPL_ACT_TRUNCATE);
    a->offset = point;
}

static void on_diverging(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    if (!answer_current(r, ev->u.diverging.leader_epoch) ||
        ev->u.diverging.fetch_offset != r->end ||
        ev->u.diverging.last_fetched_epoch != r->last_epoch)
        return; /* answers a fetch from another log: a late copy */
    r->fetching = false;
    if (ev->u.diverging.epoch == 0) {
        /* Undefined: the leader holds no epoch at or below this log's
         * latest, and its history starts at end_offset (retention trimmed
         * it, or it never had ours). Every record here has such an
         * epoch, so each one at or past end_offset differs from the
         * leader's there and each one below lies below the partition's
         * log start: the copy empties and restarts at end_offset
         * (storage/epochs.h: TN_EPOCHS_RESET). A committed record cannot
         * be among those at or past it (it would carry the leader's
         * epoch), so end_offset is at or above the hw; below it, refused
         * as any point below the hw is. */
        r->next_fetch_at = ev->now + r->cfg.fetch_timeout_ms;
        if (ev->u.diverging.end_offset < r->hw) {
            truncate_to(r, ev->u.diverging.end_offset, out);
            return;
        }
        tn_repl_action_t *a = push(out, TN_REPL_ACT_RESET);
        a->offset = ev->u.diverging.end_offset;
        return;
    }
    uint32_t found = 0;
    uint64_t own_end = 0;
    if (r->cfg.epoch_end(r->cfg.epoch_end_arg, ev->u.diverging.epoch, &found, &own_end) < 0) {
        r->next_fetch_at = ev->now + r->cfg.fetch_idle_ms;
        return;
    }
    uint64_t point = u64_min(u64_min(ev->u.diverging.end_offset, own_end), r->end);
    /* A truncation that changes the log fetches again at the LOG event
     * after it; one that fails or changes nothing (the shell could not
     * cut there) must not turn into a fetch, DIVERGING and truncation at
     * every tick: the next fetch waits fetch_timeout_ms (fetch_idle_ms is
     * 0 in the shell, whose leader parks empty fetches instead). */
    r->next_fetch_at = ev->now + r->cfg.fetch_timeout_ms;
    truncate_to(r, point, out);
}

/* OUT_OF_RANGE and GAP (below): an answer naming the offset this copy
 * goes on from (the leader's log start, the end of its gap) takes act
 * there when it is past this log's end; the fetch goes again at the LOG
 * event after it (one that changes nothing waits fetch_timeout_ms, as a
 * truncation does). */
static void on_offset_answer(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_act_type_t act,
                             tn_repl_actions_t *out)
{
    if (!answer_current(r, ev->u.out_of_range.leader_epoch) ||
        ev->u.out_of_range.fetch_offset != r->end)
        return; /* answers a fetch from another log: a late copy */
    r->fetching = false;
    r->next_fetch_at = ev->now + r->cfg.fetch_timeout_ms;
    if (ev->u.out_of_range.start <= r->end)
        return; /* not past this log's end: ask again later */
    tn_repl_action_t *a = push(out, act);
    a->offset = ev->u.out_of_range.start;
}

/* The leader's log starts above this one's end: retention (or a drop)
 * removed every record this copy lacks, so no fetch from here can ever
 * succeed. Every record this copy holds lies below the partition's log
 * start, outside what the partition keeps, the hw included: the copy
 * empties and restarts at the leader's start (Kafka's
 * truncateFullyAndStartAt), its epochs history with it (on_offset_answer). */
static void on_out_of_range(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    on_offset_answer(r, ev, TN_REPL_ACT_RESET, out);
}

/* The leader's log has a gap where this copy ends: offsets it never
 * assigned (tn_plog_advance: the queue engine's recovery of a channel
 * that referred to a tail its log lost), so a fetch from here is answered
 * nothing for ever. This copy skips the same offsets (its next offset
 * becomes the gap's end, durably; on_offset_answer). Every record it
 * holds stays: they are the leader's below the gap (the fetch carried
 * their epoch, which the leader checked). */
static void on_gap(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    on_offset_answer(r, ev, TN_REPL_ACT_SKIP, out);
}

static void on_fetch_error(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    if (!answer_current(r, ev->u.error.leader_epoch))
        return;
    r->fetching = false;
    r->next_fetch_at = ev->now + r->cfg.fetch_idle_ms;
    /* FENCED or REMOTE: this follower's state is old. UNKNOWNEPOCH: the
     * leader's is (it refreshes itself); reading the state again costs
     * little and covers a state this follower applied out of turn. */
    push(out, TN_REPL_ACT_REFRESH);
}

/* --- events ---------------------------------------------------------------------- */

static bool list_has(const uint32_t *v, uint32_t n, uint32_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == node)
            return true;
    return false;
}

/* Whether node is a member the move under way in ps adds (in its target,
 * not in its old list), when that move is not the one in old. */
static bool adds_anew(const tn_pstate_t *ps, const tn_pstate_t *old, uint32_t node)
{
    return ps->ntarget > 0 && ps->move_id != old->move_id &&
           list_has(ps->target, ps->ntarget, node) && !list_has(ps->old, ps->nold, node);
}

/* The replica list changed within the leader's epoch (a partition move
 * began, completed or was aborted: the list grows, shrinks or reorders):
 * peers[i] follows replicas[i] again, each known peer keeping what the
 * leader knows of it, a new one starting as a new leader's do. A member
 * that a move this leader had not seen adds starts anew too, even when
 * the leader knew it: it was no replica when that move began, so its copy
 * may have been dropped and emptied (quarantine/) since, with the same
 * incarnation, in states this leader never saw (the metastore tells the
 * newest state, not each one: meta.c tell_pstates), and a flushed offset
 * it reported before would vouch for records it lacks (the list may even
 * look the same: 2,3,1, then 2,3 without it, then 2,3,1 again). */
static void peers_follow(tn_repl_t *r, const tn_pstate_t *old, uint64_t now)
{
    bool anew = false;
    for (uint32_t i = 0; i < r->ps.nreplicas; i++)
        anew |= adds_anew(&r->ps, old, r->ps.replicas[i]);
    if (!anew && old->nreplicas == r->ps.nreplicas &&
        memcmp(old->replicas, r->ps.replicas, r->ps.nreplicas * sizeof(r->ps.replicas[0])) == 0)
        return;
    tn_repl_peer_t was[TN_PSTATE_MAX_REPLICAS];
    memcpy(was, r->peers, sizeof(was));
    memset(r->peers, 0, sizeof(r->peers));
    for (uint32_t i = 0; i < r->ps.nreplicas; i++) {
        uint32_t node = r->ps.replicas[i];
        bool kept = false;
        for (uint32_t k = 0; k < old->nreplicas && !kept && !adds_anew(&r->ps, old, node); k++) {
            if (was[k].node == node) {
                r->peers[i] = was[k];
                kept = true;
            }
        }
        if (!kept) {
            r->peers[i].node = node;
            r->peers[i].caught_up_at = now;
            r->peers[i].leo_mark = r->end;
        }
    }
}

static void on_state(tn_repl_t *r, const tn_pstate_t *ps, uint64_t now, tn_repl_actions_t *out)
{
    if (ps->partition_epoch <= r->ps.partition_epoch)
        return; /* stale or repeated */
    uint32_t old_epoch = r->ps.leader_epoch;
    uint32_t old_corrupt = r->ps.corrupt;
    tn_repl_role_t old_role = r->role;
    tn_pstate_t old = r->ps;
    r->ps = *ps;
    /* A CAS in flight expected an older partition epoch: it can no longer
     * apply, and the committed ISR now says what it did. */
    r->proposing = false;
    r->nmaybe = 0;
    if (ps->leader == r->cfg.node) {
        bool same = old_role == TN_REPL_LEADER && old_epoch == ps->leader_epoch;
        if (!same)
            become_leader(r, now, out);
        else
            peers_follow(r, &old, now);
        /* A replica marked corrupt cut its log: what it reported before it
         * applied this state no longer holds. */
        for (uint32_t i = 0; i < ps->nreplicas; i++) {
            if ((ps->corrupt & (1u << i)) && !(same && (old_corrupt & (1u << i)))) {
                r->peers[i].seen = false;
                r->peers[i].chans_ok = false;
                r->peers[i].min_pe = ps->partition_epoch;
            }
            /* A report that its channels caught up holds for the stretch
             * outside the ISR it was made in: once the peer joined or
             * left, the settles confirmed since may not be on it, and
             * only a new report (EV_CHANNELS) lets it in again. */
            if ((tn_pstate_isr_find(&old, r->peers[i].node) >= 0) !=
                (tn_pstate_isr_find(ps, r->peers[i].node) >= 0))
                r->peers[i].chans_ok = false;
        }
        if (same) {
            update_hw(r, out);
            maybe_expand(r, now, out);
        }
        return;
    }
    if (old_role == TN_REPL_LEADER)
        push(out, TN_REPL_ACT_RESIGN);
    if (ps->leader == TN_PSTATE_NONE) {
        r->role = TN_REPL_NONE;
        r->fetching = false;
        return;
    }
    r->role = TN_REPL_FOLLOWER;
    if (old_role != TN_REPL_FOLLOWER || old_epoch != ps->leader_epoch) {
        if (BROKEN(TN_REPL_BREAK_TRUNCATE_HW) && r->hw < r->end) {
            tn_repl_action_t *a = push(out, TN_REPL_ACT_TRUNCATE);
            a->offset = r->hw;
            r->fetching = true; /* the LOG event after the truncation fetches */
            return;
        }
        send_fetch(r, now, out);
    }
}

static void on_log(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    bool changed = ev->u.log.end != r->end || ev->u.log.flushed != r->flushed;
    r->end = ev->u.log.end;
    r->flushed = ev->u.log.flushed;
    r->last_epoch = ev->u.log.last_epoch;
    if (r->hw > r->end)
        r->hw = r->end;
    if (r->role == TN_REPL_LEADER) {
        update_hw(r, out);
        maybe_expand(r, ev->now, out);
    } else if (r->role == TN_REPL_FOLLOWER && changed &&
               (!r->fetching || BROKEN(TN_REPL_BREAK_TRUNCATE_HW))) {
        send_fetch(r, ev->now, out);
    } else if (r->role == TN_REPL_FOLLOWER && r->fetching && !r->stopped && r->flushed > r->told) {
        send_report(r, out);
    }
}

static void on_channels(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    if (r->role != TN_REPL_LEADER)
        return;
    tn_repl_peer_t *p = peer_find(r, ev->u.channels.node);
    if (p == NULL || p->node == r->cfg.node)
        return;
    p->chans_ok = ev->u.channels.caught_up;
    p->chans_inc = ev->u.channels.incarnation;
    if (p->chans_ok)
        maybe_expand(r, ev->now, out);
}

static void on_tick(tn_repl_t *r, uint64_t now, tn_repl_actions_t *out)
{
    if (r->role == TN_REPL_LEADER) {
        if (r->proposing && now >= r->proposed_at + r->cfg.fetch_timeout_ms) {
            /* Lost or unanswered: the same CAS again (it cannot apply twice). */
            tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
            memcpy(isr, r->proposed, sizeof(isr));
            propose(r, now, isr, r->nproposed, out);
            push(out, TN_REPL_ACT_REFRESH);
        }
        maybe_shrink(r, now, out);
        maybe_clear_elr(r, now, out);
    } else if (r->role == TN_REPL_FOLLOWER && !r->stopped) {
        if (r->fetching ? now >= r->fetch_sent_at + r->cfg.fetch_timeout_ms
                        : now >= r->next_fetch_at)
            send_fetch(r, now, out);
    }
}

void tn_repl_step(tn_repl_t *r, const tn_repl_event_t *ev, tn_repl_actions_t *out)
{
    out->n = 0;
    switch (ev->type) {
    case TN_REPL_EV_STATE:
        on_state(r, ev->u.state, ev->now, out);
        break;
    case TN_REPL_EV_LOG:
        on_log(r, ev, out);
        break;
    case TN_REPL_EV_FETCH:
        on_fetch(r, &ev->u.fetch, ev->now, out);
        break;
    case TN_REPL_EV_RECORDS:
        on_records(r, ev, out);
        break;
    case TN_REPL_EV_DIVERGING:
        on_diverging(r, ev, out);
        break;
    case TN_REPL_EV_FETCH_ERROR:
        on_fetch_error(r, ev, out);
        break;
    case TN_REPL_EV_ISR_REFUSED:
        on_refused(r, ev->u.refused.partition_epoch, ev->now, out);
        break;
    case TN_REPL_EV_TICK:
        on_tick(r, ev->now, out);
        break;
    case TN_REPL_EV_CHANNELS:
        on_channels(r, ev, out);
        break;
    case TN_REPL_EV_OUT_OF_RANGE:
        on_out_of_range(r, ev, out);
        break;
    case TN_REPL_EV_FLUSHED:
        on_flushed(r, &ev->u.fetch, ev->now, out);
        break;
    case TN_REPL_EV_GAP:
        on_gap(r, ev, out);
        break;
    }
}

int tn_repl_accepts(const tn_repl_t *r)
{
    if (r->role != TN_REPL_LEADER)
        return TN_EREMOTE;
    if (r->ps.nisr < r->ps.min_insync)
        return TN_EFEWREPLICAS;
    return 0;
}

bool tn_repl_serving(const tn_repl_t *r)
{
    return r->role == TN_REPL_LEADER && r->hw > r->epoch_start;
}
