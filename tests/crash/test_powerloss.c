/* Power-loss simulation. SIGKILL keeps the page cache, so only a test that
 * drops unsynced writes can show that fsync is done right. Each iteration:
 *
 *   1. start the I/O shim's simulator on the data dir and pick a random
 *      moment (a count of mutating I/O operations) for the power to go off;
 *   2. open the store (recovery may itself be cut), append batches to a few
 *      partitions, FIN acknowledged records through channel logs, and
 *      sometimes GC, all concurrently, recording what was acknowledged;
 *   3. cut, close everything, and rewrite the directory into a state a
 *      machine could be in after the cut (unsynced writes dropped, kept or
 *      torn; unsynced directory changes lost);
 *   4. reopen without the simulator and check the ledger: recovery
 *      succeeds, every acknowledged record is present and intact (durable
 *      mode), every record read is well formed, every acknowledged FIN is
 *      still settled.
 *
 * test_ingress_log does the same for the ingress log: waves of appends
 * (rounds of several frames, segment rotations) and checkpoints with
 * compaction, cut at a random operation; after each cut recovery must
 * succeed, every stored record be whole and dense, every acknowledged
 * record at or above the checkpoint be present, the checkpoint not below
 * one acknowledged.
 *
 * test_durable_on_a_full_disk runs the first scenario with the disk
 * full now and then: in each wave one write and one file create fail
 * with ENOSPC (a batch's records, a roll's sidecar or next segment, a
 * channel log's frames or checkpoint), which fails those requests alone,
 * before the cut (FINs are submitted as the queue engine does, with
 * TN_WALOP_SPACE_OK).
 *
 * The directory carries over between iterations, so later iterations
 * recover from what earlier cuts left. */
#include "core/platform.h"

#include "body.h"

#include "testutil.h"

#include "core/err.h"
#include "core/log.h"
#include "storage/chanlog.h"
#include "storage/ilog.h"
#include "storage/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#define NPART   3
#define MAXREC  200000
#define BATCHES 32
#define WAVES   4

typedef struct {
    uint64_t acked_next[NPART]; /* not used for ordering; highest acked + 1 */
    uint32_t *acked_id[NPART];  /* offset -> id + 1 of an acknowledged record; 0 none */
    uint8_t *fin_acked[NPART];  /* offset -> FIN acknowledged */
    uint64_t gc_floor[NPART];   /* records below may be gone (a GC was asked) */
    uint32_t next_id;
    uint64_t rng;
} ledger_t;

static uint64_t gaps_seen; /* offsets skipped by advances, seen by verify */
static bool full_disk;     /* test_durable_on_a_full_disk */

static uint64_t rnd(ledger_t *l)
{
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    return l->rng;
}

/* Self-describing body: "id=<n>;" then bytes derived from n. */

typedef struct {
    tn_append_t req;
    tn_rec_in_t recs[8];
    char bodies[8][512];
    uint32_t ids[8];
    int part;
    ledger_t *l;
    int *pending;
} batch_t;

static void on_batch(tn_append_t *req, int status)
{
    batch_t *b = req->data;
    (*b->pending)--;
    if (status != 0)
        return;
    for (uint32_t i = 0; i < req->nrecs; i++) {
        uint64_t off = req->first_offset + i;
        assert_true(off < MAXREC);
        b->l->acked_id[b->part][off] = b->ids[i] + 1;
        if (off + 1 > b->l->acked_next[b->part])
            b->l->acked_next[b->part] = off + 1;
    }
}

typedef struct {
    tn_walop_t op;
    int part;
    ledger_t *l;
    int *pending;
} fin_t;

static void on_fin(tn_walop_t *op, int status)
{
    fin_t *f = op->data;
    (*f->pending)--;
    if (status == 0)
        f->l->fin_acked[f->part][op->rec.offset] = 1;
}

typedef struct {
    tn_plog_gc_t req;
    int *pending;
} gc_t;

typedef struct {
    tn_plog_advance_t req;
    int *pending;
} adv_t;

static void on_advance(tn_plog_advance_t *req, int status)
{
    (void)status;
    (*((adv_t *)req->data)->pending)--;
}

static void on_gc(tn_plog_gc_t *req, int status)
{
    (void)status;
    (*((gc_t *)req->data)->pending)--;
}

static void verify(uv_loop_t *loop, const char *dir, tn_store_opts_t *opts, ledger_t *l)
{
    tn_store_t *store = tu_store_open(loop, opts);
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    for (int p = 0; p < NPART; p++) {
        tn_plog_t *plog;
        assert_int_equal(tn_plog_open(store, "t", (uint32_t)p, &plog), 0);
        if (tn_plog_err(plog) != 0)
            fail_msg("recovery of partition %d failed: %s", p, plog->errmsg);
        tn_plog_stats_t st;
        tn_plog_stats(plog, &st);
        bool durable = opts->durability == TN_DURABILITY_DURABLE;
        for (uint64_t off = 0; off < l->acked_next[p] || off < st.written_next; off++) {
            tn_rec_t rec;
            int rc = tn_plog_read(plog, off, &scratch, &rec);
            uint32_t want = off < MAXREC ? l->acked_id[p][off] : 0;
            if (rc == TN_EGAP) { /* skipped by an advance: never acknowledged */
                gaps_seen++;
                if (want != 0 && durable)
                    fail_msg("partition %d: acknowledged offset %llu (id %u) lost in a gap", p,
                             (unsigned long long)off, want - 1);
                continue;
            }
            if (rc == TN_ENOTFOUND && (off < st.first_offset || off >= st.written_next)) {
                if (want != 0 && durable && off >= l->gc_floor[p])
                    fail_msg("partition %d: acknowledged offset %llu (id %u) lost", p,
                             (unsigned long long)off, want - 1);
                continue;
            }
            if (rc != 0)
                fail_msg("partition %d offset %llu: %s", p, (unsigned long long)off,
                         tn_strerror(rc));
            uint32_t got = crash_body_check(rec.body, rec.h.body_len);
            if (got == 0)
                fail_msg("partition %d offset %llu: malformed body", p, (unsigned long long)off);
            if (want != 0 && got != want && durable)
                fail_msg("partition %d offset %llu: id %u, acknowledged id %u", p,
                         (unsigned long long)off, got - 1, want - 1);
        }
        /* Offsets past the recovered tail were never acknowledged durably:
         * forget them, they will be written again. */
        for (uint64_t off = st.written_next; off < l->acked_next[p]; off++)
            l->acked_id[p][off] = 0;
        if (l->acked_next[p] > st.written_next)
            l->acked_next[p] = st.written_next;

        tn_chanlog_t *cl;
        tn_cursor_t cur;
        assert_int_equal(tn_chanlog_open(store, "t", (uint32_t)p, "ch", NULL, &cl, &cur), 0);
        if (tn_chanlog_err(cl) != 0)
            fail_msg("recovery of channel on partition %d failed: %s", p, cl->errmsg);
        for (uint64_t off = 0; off < MAXREC; off++) {
            if (l->fin_acked[p][off] && !tn_cursor_is_settled(&cur, off))
                fail_msg("partition %d: acknowledged FIN of %llu lost", p, (unsigned long long)off);
        }
        tn_cursor_fini(&cur);
    }
    tn_buf_fini(&scratch);
    tu_store_close(loop, store);
    (void)dir;
}

/* One iteration with the power cut after `cut` mutating operations (or
 * never when cut < 0). Returns the operations it performed. */
static long iterate(uv_loop_t *loop, const char *dir, tn_store_opts_t *opts, ledger_t *l, long cut,
                    bool gc, long *ops_after_open)
{
    *ops_after_open = LONG_MAX;
    assert_int_equal(tn_io_sim_start(dir), 0);
    long ops0 = tn_io_sim_ops();
    if (cut >= 0)
        tn_io_sim_cut_after(cut);
    tn_store_t *store = NULL;
    char err[512];
    int rc = tn_store_open(loop, opts, &store, err, sizeof(err));
    if (rc != 0) {
        assert_true(tn_io_sim_is_cut());
        goto powerloss;
    }
    tn_plog_t *plogs[NPART] = {NULL};
    tn_chanlog_t *cls[NPART] = {NULL};
    for (int p = 0; p < NPART; p++) {
        tn_cursor_t cur;
        if (tn_plog_open(store, "t", (uint32_t)p, &plogs[p]) != 0)
            plogs[p] = NULL;
        if (tn_chanlog_open(store, "t", (uint32_t)p, "ch", NULL, &cls[p], &cur) == 0)
            tn_cursor_fini(&cur);
        else
            cls[p] = NULL;
    }

    int pending = 0;
    static batch_t batches[BATCHES];
    static fin_t fins[64];
    static gc_t gcs[NPART];
    *ops_after_open = tn_io_sim_ops() - ops0;
    static adv_t advs[WAVES];
    for (int wave = 0; wave < WAVES; wave++) {
        if (full_disk) {
            tn_io_fail_write_after((long)(rnd(l) % 24), UV_ENOSPC);
            tn_io_fail_create_after((long)(rnd(l) % 3), UV_ENOSPC);
        }
        /* Now and then skip ahead, as recovery after a lost tail does. */
        int ap = (int)(rnd(l) % NPART);
        if (rnd(l) % 8 == 0 && plogs[ap] != NULL) {
            advs[wave].pending = &pending;
            advs[wave].req.data = &advs[wave];
            if (tn_plog_advance(plogs[ap], &advs[wave].req, tn_plog_written_next(plogs[ap]) + 5,
                                on_advance) == 0)
                pending++;
        }
        for (int i = 0; i < BATCHES; i++) {
            batch_t *b = &batches[i];
            b->part = (int)(rnd(l) % NPART);
            b->l = l;
            b->pending = &pending;
            b->req.data = b;
            uint32_t n = 1 + (uint32_t)(rnd(l) % 4 == 0 ? rnd(l) % 8 : 0);
            for (uint32_t k = 0; k < n; k++) {
                b->ids[k] = l->next_id++;
                size_t len = crash_body(b->ids[k], b->bodies[k], sizeof(b->bodies[k]));
                b->recs[k] = (tn_rec_in_t){{NULL, 0}, tn_iov(b->bodies[k], len), 0};
            }
            if (plogs[b->part] != NULL &&
                tn_plog_append(plogs[b->part], &b->req, b->recs, n, on_batch) == 0)
                pending++;
        }
        while (pending > 0)
            uv_run(loop, UV_RUN_ONCE);
    }
    /* FIN some acknowledged records that are not settled yet. */
    int nf = 0;
    for (int p = 0; p < NPART && cls[p] != NULL; p++) {
        for (int k = 0; k < 20 && nf < 64; k++) {
            if (l->acked_next[p] == 0)
                break;
            uint64_t off = rnd(l) % l->acked_next[p];
            if (l->acked_id[p][off] == 0 || l->fin_acked[p][off])
                continue;
            fin_t *f = &fins[nf];
            f->part = p;
            f->l = l;
            f->pending = &pending;
            f->op.data = f;
            tn_walrec_t r = {TN_WAL_FIN, off, 0, 0, 0};
            unsigned flags = full_disk ? TN_WALOP_SPACE_OK : 0; /* as the queue engine's */
            if (tn_chanlog_submit_ex(cls[p], &f->op, &r, on_fin, flags) == 0) {
                pending++;
                nf++;
            }
        }
    }
    if (gc) {
        for (int p = 0; p < NPART; p++) {
            if (plogs[p] == NULL)
                continue;
            uint64_t below = l->acked_next[p] / 2;
            if (below > l->gc_floor[p])
                l->gc_floor[p] = below;
            gcs[p].pending = &pending;
            gcs[p].req.data = &gcs[p];
            if (tn_plog_gc(plogs[p], &gcs[p].req, below, 0, on_gc) == 0)
                pending++;
        }
    }
    while (pending > 0)
        uv_run(loop, UV_RUN_ONCE);
    tu_store_close(loop, store);
powerloss:;
    tn_io_fail_write_after(-1, 0);
    tn_io_fail_create_after(-1, 0);
    long ops = tn_io_sim_ops() - ops0;
    assert_int_equal(tn_io_sim_powerloss(rnd(l)), 0);
    return ops;
}

static void run_scenario(tn_store_opts_t *opts, const char *dir, int iterations, bool gc,
                         uint64_t seed)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    ledger_t *l = calloc(1, sizeof(*l));
    for (int p = 0; p < NPART; p++) {
        l->acked_id[p] = calloc(MAXREC, sizeof(uint32_t));
        l->fin_acked[p] = calloc(MAXREC, 1);
    }
    l->rng = seed;
    /* A first iteration without a cut measures how many operations one takes. */
    long opened;
    long full = iterate(&loop, dir, opts, l, -1, gc, &opened);
    verify(&loop, dir, opts, l);
    int cuts_in_recovery = 0;
    for (int i = 0; i < iterations; i++) {
        /* Every fourth cut falls inside open and recovery (the last
         * iteration's count of them), which a pick over the whole run
         * seldom does: a short run cuts recovery too. */
        uint64_t range = (uint64_t)(i % 4 == 3 && opened > 0 ? opened : full + full / 4 + 1);
        long cut = (long)(rnd(l) % range);
        long ops = iterate(&loop, dir, opts, l, cut, gc && i % 3 == 0, &opened);
        if (cut < opened)
            cuts_in_recovery++;
        if (ops > full)
            full = ops;
        verify(&loop, dir, opts, l);
    }
    uint64_t acked = 0, fins = 0;
    for (int p = 0; p < NPART; p++) {
        for (uint64_t off = 0; off < MAXREC; off++) {
            acked += l->acked_id[p][off] != 0;
            fins += l->fin_acked[p][off];
        }
    }
    printf("# %d power cuts: %llu acknowledged records and %llu FINs checked, "
           "%d cuts during open/recovery, %llu skipped offsets read\n",
           iterations, (unsigned long long)acked, (unsigned long long)fins, cuts_in_recovery,
           (unsigned long long)gaps_seen);
    gaps_seen = 0;
    assert_true(acked > 0);
    for (int p = 0; p < NPART; p++) {
        free(l->acked_id[p]);
        free(l->fin_acked[p]);
    }
    free(l);
    tu_loop_fini(&loop);
}

/* Power cuts per scenario (the GC, relaxed and ingress log scenarios run
 * a half or a third of it): TERN_POWERLOSS_ITERATIONS when set; else 300
 * under TERN_SOAK (make soak), and 40 in the ordinary suite (make test,
 * make asan), enough for cuts during recovery, during appends, FINs and
 * GC in every scenario, with the carried-over directory recovering from
 * earlier cuts. */
static int iterations(void)
{
    const char *s = getenv("TERN_POWERLOSS_ITERATIONS");
    if (s != NULL)
        return atoi(s);
    s = getenv("TERN_SOAK");
    return s != NULL && s[0] != '\0' && strcmp(s, "0") != 0 ? 300 : 40;
}

static void test_durable_appends_rolls_and_fins(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    o.checkpoint_every = 16; /* checkpoints under cuts too */
    run_scenario(&o, dir, iterations(), false, 0x1234567);
    tu_rmrf(dir);
    free(dir);
}

static void test_durable_with_gc(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    o.checkpoint_every = 16;
    run_scenario(&o, dir, iterations() / 2, true, 0xABCDEF1);
    tu_rmrf(dir);
    free(dir);
}

static void test_durable_on_a_full_disk(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    o.checkpoint_every = 16;
    full_disk = true;
    run_scenario(&o, dir, iterations() / 2, false, 0x5EED);
    full_disk = false;
    tu_rmrf(dir);
    free(dir);
}

static void test_relaxed_never_corrupt(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    o.durability = TN_DURABILITY_RELAXED;
    o.relaxed_sync_messages = 7;
    run_scenario(&o, dir, iterations() / 3, false, 0x777);
    tu_rmrf(dir);
    free(dir);
}

/* --- the ingress log ------------------------------------------------------- */

/* Iterations of the ingress log scenario: appends in waves from many
 * requests at once (so rounds hold several frames and segments rotate),
 * now and then a checkpoint (so segments are compacted and the checkpoint
 * file rewritten), the power cut at a random operation. */
#define ILOG_MAXREC 400000

typedef struct {
    uint32_t *acked_id;  /* seq -> id + 1 of an acknowledged record; 0 none */
    uint64_t acked_ckpt; /* the highest checkpoint acknowledged */
    uint32_t next_id;
    uint64_t rng;
} iledger_t;

static uint64_t irnd(iledger_t *l)
{
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    return l->rng;
}

static const tn_ilog_opts_t ilog_opts = {.segment_bytes = 16 * 1024, .rotate_bytes = 4096};

typedef struct {
    tn_ilog_append_t req;
    tn_irec_t recs[8];
    char bodies[8][512];
    uint32_t ids[8];
    iledger_t *l;
    int *pending;
} ibatch_t;

static void on_ibatch(tn_ilog_append_t *req, int status)
{
    ibatch_t *b = req->data;
    (*b->pending)--;
    if (status != 0)
        return;
    for (uint32_t i = 0; i < req->nrecs; i++) {
        uint64_t seq = req->first_seq + i;
        assert_true(seq < ILOG_MAXREC);
        b->l->acked_id[seq] = b->ids[i] + 1;
    }
}

typedef struct {
    tn_ilog_ckpt_t req;
    iledger_t *l;
    int *pending;
} ickpt_t;

static void on_ickpt(tn_ilog_ckpt_t *req, int status)
{
    ickpt_t *c = req->data;
    (*c->pending)--;
    if (status == 0 && req->next > c->l->acked_ckpt)
        c->l->acked_ckpt = req->next;
}

static bool ilog_closed;

static void on_ilog_closed(tn_ilog_t *il)
{
    (void)il;
    ilog_closed = true;
}

static void close_ilog(uv_loop_t *loop, tn_ilog_t *il)
{
    ilog_closed = false;
    tn_ilog_close(il, on_ilog_closed);
    while (!ilog_closed)
        uv_run(loop, UV_RUN_ONCE);
}

static void iverify(uv_loop_t *loop, tn_store_opts_t *opts, iledger_t *l, uint64_t *checked)
{
    tn_store_t *store = tu_store_open(loop, opts);
    tn_ilog_t *il;
    char err[512] = "";
    int rc = tn_ilog_open_opts(store, &ilog_opts, &il, err, sizeof(err));
    if (rc != 0)
        fail_msg("recovery of the ingress log failed: %s: %s", tn_strerror(rc), err);
    uint64_t next = tn_ilog_next_seq(il), ckpt = tn_ilog_checkpoint_seq(il);
    if (ckpt < l->acked_ckpt)
        fail_msg("ingress checkpoint %llu is below the acknowledged %llu", (unsigned long long)ckpt,
                 (unsigned long long)l->acked_ckpt);
    /* Every stored record, from the oldest on, dense and whole. */
    uint64_t seq = 0;
    bool below_oldest = true;
    while (seq < next) {
        tn_ilog_batch_t b;
        rc = tn_ilog_read(il, seq, 256, 1 << 20, &b);
        if (rc == UV_ERANGE && below_oldest) {
            if (l->acked_id[seq] != 0 && seq >= ckpt)
                fail_msg("acknowledged ingress seq %llu lost", (unsigned long long)seq);
            seq++;
            continue;
        }
        if (rc != 0 || b.n == 0)
            fail_msg("ingress read at seq %llu: %s", (unsigned long long)seq,
                     rc != 0 ? tn_strerror(rc) : "nothing below next");
        below_oldest = false;
        for (uint32_t i = 0; i < b.n; i++) {
            const tn_irec_t *r = &b.recs[i].rec;
            uint32_t got = (uint32_t)crash_body_check(r->body.base, r->body.len);
            if (b.recs[i].seq != seq + i || got == 0 || r->topic.len != 1 ||
                r->partition != (got - 1) % 5 || r->created_ms != (int64_t)got)
                fail_msg("ingress seq %llu: malformed record", (unsigned long long)(seq + i));
            uint32_t want = l->acked_id[seq + i];
            if (want != 0 && want != got)
                fail_msg("ingress seq %llu: id %u, acknowledged id %u",
                         (unsigned long long)(seq + i), got - 1, want - 1);
            *checked += want != 0;
        }
        seq += b.n;
        tn_ilog_batch_fini(&b);
    }
    /* Nothing acknowledged past the recovered end; what was written there
     * unacknowledged is forgotten (its seqs are assigned again). */
    for (uint64_t s = next; s < ILOG_MAXREC; s++) {
        if (l->acked_id[s] != 0)
            fail_msg("acknowledged ingress seq %llu is past the recovered next %llu",
                     (unsigned long long)s, (unsigned long long)next);
    }
    close_ilog(loop, il);
    tu_store_close(loop, store);
}

static long iiterate(uv_loop_t *loop, const char *dir, tn_store_opts_t *opts, iledger_t *l,
                     long cut)
{
    assert_int_equal(tn_io_sim_start(dir), 0);
    long ops0 = tn_io_sim_ops();
    if (cut >= 0)
        tn_io_sim_cut_after(cut);
    tn_store_t *store = NULL;
    char err[512];
    if (tn_store_open(loop, opts, &store, err, sizeof(err)) != 0) {
        assert_true(tn_io_sim_is_cut());
        goto powerloss;
    }
    tn_ilog_t *il = NULL;
    if (tn_ilog_open_opts(store, &ilog_opts, &il, err, sizeof(err)) != 0) {
        if (!tn_io_sim_is_cut())
            fail_msg("ingress log open failed without a cut: %s", err);
        tu_store_close(loop, store);
        goto powerloss;
    }
    int pending = 0;
    static ibatch_t batches[BATCHES];
    static ickpt_t ck;
    for (int wave = 0; wave < WAVES; wave++) {
        for (int i = 0; i < BATCHES; i++) {
            ibatch_t *b = &batches[i];
            b->l = l;
            b->pending = &pending;
            b->req.data = b;
            uint32_t n = 1 + (uint32_t)(irnd(l) % 4 == 0 ? irnd(l) % 8 : 0);
            for (uint32_t k = 0; k < n; k++) {
                uint32_t id = l->next_id++;
                b->ids[k] = id;
                size_t len = crash_body(id, b->bodies[k], sizeof(b->bodies[k]));
                b->recs[k] = (tn_irec_t){tn_iov("t", 1), tn_iov(NULL, 0), tn_iov(b->bodies[k], len),
                                         id % 5,         false,           0,
                                         (int64_t)id + 1};
            }
            if (tn_ilog_append(il, &b->req, b->recs, n, on_ibatch) == 0)
                pending++;
        }
        /* Checkpoint what an earlier wave made durable, behind by a bit. */
        uint64_t durable = tn_ilog_durable_seq(il);
        if (wave % 2 == 1 && durable > 20) {
            ck.l = l;
            ck.pending = &pending;
            ck.req.data = &ck;
            if (tn_ilog_checkpoint(il, &ck.req, durable - 20, on_ickpt) == 0)
                pending++;
        }
        while (pending > 0)
            uv_run(loop, UV_RUN_ONCE);
    }
    close_ilog(loop, il);
    tu_store_close(loop, store);
powerloss:;
    long ops = tn_io_sim_ops() - ops0;
    assert_int_equal(tn_io_sim_powerloss(irnd(l)), 0);
    return ops;
}

static void test_ingress_log(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    tn_store_opts_t o;
    tu_store_opts(&o, dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    iledger_t *l = calloc(1, sizeof(*l));
    l->acked_id = calloc(ILOG_MAXREC, sizeof(uint32_t));
    l->rng = 0x5EED1106;
    uint64_t checked = 0;
    long full = iiterate(&loop, dir, &o, l, -1);
    iverify(&loop, &o, l, &checked);
    int n = iterations() / 2;
    for (int i = 0; i < n; i++) {
        long cut = (long)(irnd(l) % (uint64_t)(full + full / 4 + 1));
        long ops = iiterate(&loop, dir, &o, l, cut);
        if (ops > full)
            full = ops;
        iverify(&loop, &o, l, &checked);
    }
    printf("# %d power cuts of the ingress log: %llu acknowledged records found intact (summed "
           "over the checks), "
           "checkpoint %llu\n",
           n, (unsigned long long)checked, (unsigned long long)l->acked_ckpt);
    assert_true(checked > 0 && l->acked_ckpt > 0);
    free(l->acked_id);
    free(l);
    tu_loop_fini(&loop);
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    tn_log_level = TN_LOG_ERROR + 1; /* recovery warnings are expected by the hundred */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durable_appends_rolls_and_fins),
        cmocka_unit_test(test_durable_with_gc),
        cmocka_unit_test(test_durable_on_a_full_disk),
        cmocka_unit_test(test_relaxed_never_corrupt),
        cmocka_unit_test(test_ingress_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
