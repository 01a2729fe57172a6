/* The leader-epoch history: assign and the two truncations, the leader's
 * answer and the follower's truncation rule (every KIP-101 and KIP-279
 * scenario as a table, each checked by truncating and copying modelled
 * logs until they match), and the file: round trips, every kind of damage,
 * and crash points of a save under the I/O shim's power-loss simulator. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "storage/epochs.h"
#include "storage/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define U  TN_EPOCHS_UNDEFINED
#define UO TN_EPOCHS_UNDEFINED_OFFSET

static void expect_entries(const tn_epochs_t *h, const tn_epoch_entry_t *want, uint32_t n)
{
    assert_int_equal(h->n, n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(h->entries[i].epoch, want[i].epoch);
        assert_int_equal(h->entries[i].start, want[i].start);
    }
}

static void build(tn_epochs_t *h, const tn_epoch_entry_t *e, uint32_t n)
{
    tn_epochs_init(h);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(tn_epochs_assign(h, e[i].epoch, e[i].start, NULL), 0);
    expect_entries(h, e, n);
}

/* --- assign and truncation --------------------------------------------- */

static void test_assign(void **state)
{
    (void)state;
    tn_epochs_t h;
    tn_epochs_init(&h);
    bool changed;
    assert_int_equal(tn_epochs_latest(&h), U);
    assert_int_equal(tn_epochs_assign(&h, 1, 0, &changed), 0);
    assert_true(changed);
    /* The same epoch again, at or past its start: a follower's next batch. */
    assert_int_equal(tn_epochs_assign(&h, 1, 0, &changed), 0);
    assert_false(changed);
    assert_int_equal(tn_epochs_assign(&h, 1, 7, &changed), 0);
    assert_false(changed);
    assert_int_equal(tn_epochs_assign(&h, 3, 10, &changed), 0);
    assert_true(changed);
    /* Epoch 4 is elected at 10 before 3 wrote anything: it replaces 3. */
    assert_int_equal(tn_epochs_assign(&h, 4, 10, &changed), 0);
    assert_true(changed);
    tn_epoch_entry_t want[] = {{1, 0}, {4, 10}};
    expect_entries(&h, want, 2);
    assert_int_equal(tn_epochs_latest(&h), 4);

    /* Refusals leave the history alone and say why. */
    assert_int_equal(tn_epochs_assign(&h, 3, 20, &changed), TN_ERANGE);
    assert_false(changed);
    assert_non_null(strstr(h.errmsg, "below the latest epoch 4"));
    assert_int_equal(tn_epochs_assign(&h, 5, 9, NULL), TN_ERANGE);
    assert_non_null(strstr(h.errmsg, "starts below the latest epoch 4's start 10"));
    assert_int_equal(tn_epochs_assign(&h, 4, 9, NULL), TN_ERANGE);
    assert_int_equal(tn_epochs_assign(&h, U, 30, NULL), TN_ERANGE);
    assert_non_null(strstr(h.errmsg, "reserved"));
    expect_entries(&h, want, 2);

    /* Out of memory is an error, not an abort. */
    tn_epochs_t g;
    tn_epochs_init(&g);
    tn_alloc_fail_after(0);
    assert_int_equal(tn_epochs_assign(&g, 1, 0, NULL), UV_ENOMEM);
    tn_alloc_fail_after(-1);
    assert_int_equal(g.n, 0);
    assert_int_equal(tn_epochs_assign(&g, 1, 0, NULL), 0);
    tn_epochs_fini(&g);
    tn_epochs_fini(&h);
}

static void test_truncate_from_end(void **state)
{
    (void)state;
    tn_epoch_entry_t e[] = {{1, 0}, {3, 10}, {6, 20}};
    tn_epochs_t h;
    build(&h, e, 3);
    assert_false(tn_epochs_truncate_from_end(&h, 21)); /* inside epoch 6 */
    expect_entries(&h, e, 3);
    assert_true(tn_epochs_truncate_from_end(&h, 20)); /* exactly at 6's start */
    expect_entries(&h, e, 2);
    assert_true(tn_epochs_truncate_from_end(&h, 5));
    expect_entries(&h, e, 1);
    assert_true(tn_epochs_truncate_from_end(&h, 0));
    assert_int_equal(h.n, 0);
    assert_false(tn_epochs_truncate_from_end(&h, 0));
    /* After a truncation the log's next epoch may start where 3 did. */
    assert_int_equal(tn_epochs_assign(&h, 7, 0, NULL), 0);
    tn_epochs_fini(&h);
}

static void test_truncate_from_start(void **state)
{
    (void)state;
    tn_epoch_entry_t e[] = {{1, 0}, {3, 10}, {6, 20}};
    tn_epochs_t h;
    build(&h, e, 3);
    assert_false(tn_epochs_truncate_from_start(&h, 0));
    expect_entries(&h, e, 3);
    assert_true(tn_epochs_truncate_from_start(&h, 4)); /* inside epoch 1 */
    tn_epoch_entry_t a[] = {{1, 4}, {3, 10}, {6, 20}};
    expect_entries(&h, a, 3);
    assert_true(tn_epochs_truncate_from_start(&h, 10)); /* exactly at 3's start */
    expect_entries(&h, e + 1, 2);
    assert_true(tn_epochs_truncate_from_start(&h, 25)); /* past the last start */
    tn_epoch_entry_t b[] = {{6, 25}};
    expect_entries(&h, b, 1);
    assert_false(tn_epochs_truncate_from_start(&h, 25));
    /* The latest epoch keeps going from the new start. */
    assert_int_equal(tn_epochs_assign(&h, 6, 30, NULL), 0);
    assert_int_equal(h.n, 1);
    tn_epochs_fini(&h);
    tn_epochs_init(&h);
    assert_false(tn_epochs_truncate_from_start(&h, 5));
    tn_epochs_fini(&h);
}

/* --- the leader's answer ------------------------------------------------ */

static void test_end_offset_for(void **state)
{
    (void)state;
    tn_epoch_entry_t e[] = {{1, 0}, {3, 10}, {6, 20}};
    tn_epochs_t h;
    build(&h, e, 3);
    static const struct {
        uint32_t requested;
        int rc;
        uint32_t epoch;
        uint64_t end;
    } rows[] = {
        {0, 0, U, UO}, /* below the first entry: undefined */
        {1, 0, 1, 10}, /* an epoch it has: ends where the next starts */
        {2, 0, 1, 10}, /* one it lacks: its largest epoch below */
        {3, 0, 3, 20},         {5, 0, 3, 20}, {6, 0, 6, 25}, /* the latest: ends at the log end */
        {7, TN_ERANGE, U, UO}, /* newer than the leader knows (KIP-320) */
        {U, 0, U, UO},         /* the asker has no epoch */
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(rows); i++) {
        uint32_t epoch = 42;
        uint64_t end = 42;
        assert_int_equal(tn_epochs_end_offset_for(&h, 25, rows[i].requested, &epoch, &end),
                         rows[i].rc);
        if (rows[i].rc == 0) {
            assert_int_equal(epoch, rows[i].epoch);
            assert_int_equal(end, rows[i].end);
        }
    }
    tn_epochs_fini(&h);
    tn_epochs_init(&h);
    uint32_t epoch;
    uint64_t end;
    assert_int_equal(tn_epochs_end_offset_for(&h, 0, 3, &epoch, &end), 0);
    assert_int_equal(epoch, U);
    assert_int_equal(end, UO);
    tn_epochs_fini(&h);
}

static void test_follower_step_refuses(void **state)
{
    (void)state;
    tn_epoch_entry_t e[] = {{1, 0}, {3, 10}};
    tn_epochs_t h;
    build(&h, e, 2);
    tn_epochs_step_t s = {.action = TN_EPOCHS_ASK_AGAIN, .epoch = 77, .offset = 77};
    /* A leader cannot answer an epoch above the one asked. */
    assert_int_equal(tn_epochs_follower_step(&h, 15, 1, 3, 10, &s), TN_EPROTO);
    /* A failed step leaves *out alone (no "truncate to 0" to misread). */
    assert_int_equal(s.action, TN_EPOCHS_ASK_AGAIN);
    assert_int_equal(s.offset, 77);
    /* Nor a defined epoch without an offset. */
    assert_int_equal(tn_epochs_follower_step(&h, 15, 3, 3, UO, &s), TN_EPROTO);
    /* The follower asked about an epoch above its own latest. */
    assert_int_equal(tn_epochs_follower_step(&h, 15, 5, 3, 12, &s), TN_ERANGE);
    /* An empty follower resets whatever the answer. */
    tn_epochs_t empty;
    tn_epochs_init(&empty);
    assert_int_equal(tn_epochs_follower_step(&empty, 0, U, 3, 12, &s), 0);
    assert_int_equal(s.action, TN_EPOCHS_RESET);
    /* tn_epochs_agree_end: a follower holding an epoch newer than the
     * leader's latest (the leader is stale) has no answer. */
    tn_epochs_t newer;
    tn_epochs_init(&newer);
    assert_int_equal(tn_epochs_assign(&newer, 9, 0, NULL), 0);
    uint64_t keep = 77;
    assert_int_equal(tn_epochs_agree_end(&h, 15, &newer, 4, &keep), TN_ERANGE);
    assert_int_equal(keep, 77);
    tn_epochs_fini(&newer);
    /* A sane one. */
    assert_int_equal(tn_epochs_follower_step(&h, 15, 3, 3, 12, &s), 0);
    assert_int_equal(s.action, TN_EPOCHS_TRUNCATE);
    assert_int_equal(s.offset, 12);
    tn_epochs_fini(&h);
}

/* --- divergence scenarios ------------------------------------------------
 *
 * A log is modelled as the epoch of each record, one character per offset
 * from 0 ("0011" = offsets 0-1 in epoch 0, 2-3 in epoch 1). A record is
 * identified by (offset, epoch): one leader per epoch, so two replicas
 * holding the same offset in the same epoch hold the same record. Each
 * replica's history is built from its log the way replication builds it
 * (assign per record), plus an epoch elected at the log end with nothing
 * written yet where the row says so. Then the follower asks the leader
 * until it may truncate, truncates, copies the leader's suffix, and the
 * two logs must be identical below the leader's end. */

#define MAXLOG 32

typedef struct {
    const char *name;
    const char *leader;
    int leader_empty;      /* epoch the leader was elected in at its log end, or -1 */
    uint64_t leader_start; /* retention dropped the leader's records below this */
    const char *follower;
    int follower_empty;
    uint64_t acked;       /* records every in-sync replica had (never lost) */
    uint64_t follower_hw; /* the follower's own, stale high watermark */
    bool hw_rule_fails;   /* truncating to follower_hw loses acked data or diverges */
    const char *asks;     /* the epochs the follower asks, in order */
    tn_epochs_action_t action;
    uint64_t truncate_to;
} scenario_t;

static const scenario_t scenarios[] = {
    {"KIP-101 1: follower B restarts with HW 1 although the leader's is 2", "00", -1, 0, "00", -1,
     2, 1, true, "0", TN_EPOCHS_TRUNCATE, 2},
    {"KIP-101 1, then: A crashed, B leads in epoch 1, A follows", "00", 1, 0, "00", -1, 2, 1, true,
     "0", TN_EPOCHS_TRUNCATE, 2},
    {"KIP-101 2: both crash, B (without m2) leads first and writes m3 at 1", "01", -1, 0, "00", -1,
     1, 2, true, "0", TN_EPOCHS_TRUNCATE, 1},
    {"KIP-279: the logs diverge by more than one epoch", "0002", -1, 0, "0011", -1, 2, 2, false,
     "1", TN_EPOCHS_TRUNCATE, 2},
    {"KIP-279: the leader lacks the follower's latest epoch", "0022", -1, 0, "00111", -1, 2, 2,
     false, "1", TN_EPOCHS_TRUNCATE, 2},
    {"KIP-279: fast double failovers, the follower asks again twice", "00113355", -1, 0, "0002244",
     -1, 2, 2, false, "420", TN_EPOCHS_TRUNCATE, 2},
    {"KIP-279: the follower led an epoch and wrote nothing in it", "0002", -1, 0, "000", 1, 3, 3,
     false, "1", TN_EPOCHS_TRUNCATE, 3},
    {"KIP-279 / #5678: the new leader has written nothing in its epoch yet", "000", 2, 0, "00011",
     -1, 3, 3, false, "1", TN_EPOCHS_TRUNCATE, 3},
    {"KIP-279: empty epochs on both sides", "0002", 3, 0, "000", 1, 3, 3, false, "1",
     TN_EPOCHS_TRUNCATE, 3},
    {"follower behind in the leader's epoch: nothing to truncate", "0011", -1, 0, "001", -1, 2, 2,
     false, "1", TN_EPOCHS_TRUNCATE, 3},
    {"identical logs", "0011", -1, 0, "0011", -1, 4, 4, false, "1", TN_EPOCHS_TRUNCATE, 4},
    {"a new replica with an empty log", "0011", -1, 0, "", -1, 0, 0, false, "", TN_EPOCHS_RESET, 0},
    {"retention dropped every epoch the follower knows", "00112222", -1, 6, "0011", -1, 4, 4, false,
     "1", TN_EPOCHS_RESET, 0},
};

typedef struct {
    uint32_t epoch[MAXLOG];
    uint64_t start; /* offsets below are absent */
    uint64_t end;
} mlog_t;

static void mlog_from(mlog_t *l, const char *s)
{
    memset(l, 0, sizeof(*l));
    l->end = strlen(s);
    assert_true(l->end <= MAXLOG);
    for (uint64_t i = 0; i < l->end; i++)
        l->epoch[i] = (uint32_t)(s[i] - '0');
}

static void history_of(tn_epochs_t *h, const mlog_t *l, int empty)
{
    tn_epochs_init(h);
    for (uint64_t i = l->start; i < l->end; i++)
        assert_int_equal(tn_epochs_assign(h, l->epoch[i], i, NULL), 0);
    if (empty >= 0)
        assert_int_equal(tn_epochs_assign(h, (uint32_t)empty, l->end, NULL), 0);
}

/* Ask until the follower may truncate; returns the last step. */
static tn_epochs_step_t converge(const scenario_t *sc, const tn_epochs_t *lh, const mlog_t *ll,
                                 const tn_epochs_t *fh, const mlog_t *fl)
{
    uint32_t asked = tn_epochs_latest(fh);
    size_t rounds = 0;
    for (;;) {
        if (asked != U) {
            assert_true(rounds < strlen(sc->asks));
            assert_int_equal(asked, (uint32_t)(sc->asks[rounds] - '0'));
        }
        rounds++;
        assert_true(rounds <= fh->n + 1); /* the rule's bound */
        uint32_t le;
        uint64_t lend;
        assert_int_equal(tn_epochs_end_offset_for(lh, ll->end, asked, &le, &lend), 0);
        tn_epochs_step_t s;
        assert_int_equal(tn_epochs_follower_step(fh, fl->end, asked, le, lend, &s), 0);
        if (s.action != TN_EPOCHS_ASK_AGAIN) {
            assert_int_equal(rounds, TN_MAX(strlen(sc->asks), 1));
            return s;
        }
        assert_true(s.epoch < asked);
        asked = s.epoch;
    }
}

/* Truncate fl to `to` (or reset it to the leader's start), copy the
 * leader's suffix, and report whether the logs then match. */
static bool repair(mlog_t *fl, tn_epochs_t *fh, const mlog_t *ll, tn_epochs_action_t action,
                   uint64_t to)
{
    if (action == TN_EPOCHS_RESET) {
        fl->start = fl->end = ll->start;
        if (fh != NULL)
            tn_epochs_truncate_from_end(fh, 0);
    } else {
        if (to < fl->end)
            fl->end = to;
        if (fh != NULL)
            tn_epochs_truncate_from_end(fh, fl->end);
    }
    for (uint64_t i = TN_MAX(fl->end, ll->start); i < ll->end; i++) {
        fl->epoch[i] = ll->epoch[i];
        if (fh != NULL)
            assert_int_equal(tn_epochs_assign(fh, ll->epoch[i], i, NULL), 0);
    }
    fl->end = TN_MAX(fl->end, ll->end);
    if (fl->end != ll->end)
        return false;
    for (uint64_t i = ll->start; i < ll->end; i++)
        if (i >= fl->start && fl->epoch[i] != ll->epoch[i])
            return false;
    return fl->start <= ll->start;
}

static void test_divergence_table(void **state)
{
    (void)state;
    for (size_t k = 0; k < TN_ARRAY_SIZE(scenarios); k++) {
        const scenario_t *sc = &scenarios[k];
        print_message("scenario: %s\n", sc->name);
        mlog_t ll, fl;
        mlog_from(&ll, sc->leader);
        mlog_from(&fl, sc->follower);
        tn_epochs_t lh, fh;
        history_of(&lh, &ll, sc->leader_empty);
        history_of(&fh, &fl, sc->follower_empty);
        if (sc->leader_start > 0) {
            tn_epochs_truncate_from_start(&lh, sc->leader_start);
            ll.start = sc->leader_start;
        }

        tn_epochs_step_t s = converge(sc, &lh, &ll, &fh, &fl);
        assert_int_equal(s.action, sc->action);
        /* The whole exchange in one call (what `ternctl restore` reports
         * as the records each copy holds beyond its leader's log). */
        uint64_t keep = UINT64_MAX;
        assert_int_equal(tn_epochs_agree_end(&lh, ll.end, &fh, fl.end, &keep), 0);
        assert_int_equal(keep, s.action == TN_EPOCHS_RESET ? 0 : TN_MIN(s.offset, fl.end));
        if (s.action == TN_EPOCHS_TRUNCATE) {
            assert_int_equal(s.offset, sc->truncate_to);
            /* Acknowledged records the follower holds are never cut. */
            assert_true(s.offset >= TN_MIN(sc->acked, fl.end));
        }

        /* The pre-KIP-101 rule (truncate to the local HW) on a copy. */
        mlog_t hl = fl;
        bool hw_ok = repair(&hl, NULL, &ll, TN_EPOCHS_TRUNCATE, sc->follower_hw) &&
                     sc->follower_hw >= TN_MIN(sc->acked, fl.end);
        assert_true(hw_ok != sc->hw_rule_fails);

        /* The epoch rule: the logs match below the leader's end, and the
         * follower's history is the one its new log implies. */
        assert_true(repair(&fl, &fh, &ll, s.action, s.offset));
        tn_epochs_t want;
        history_of(&want, &ll, -1);
        if (ll.start > 0)
            tn_epochs_truncate_from_start(&want, ll.start);
        expect_entries(&fh, want.entries, want.n);
        /* And asking again now is a no-op. */
        if (fh.n > 0) {
            uint32_t le;
            uint64_t lend;
            uint32_t asked = tn_epochs_latest(&fh);
            assert_int_equal(tn_epochs_end_offset_for(&lh, ll.end, asked, &le, &lend), 0);
            assert_int_equal(tn_epochs_follower_step(&fh, fl.end, asked, le, lend, &s), 0);
            assert_int_equal(s.action, TN_EPOCHS_TRUNCATE);
            assert_int_equal(s.offset, fl.end);
        }
        tn_epochs_fini(&want);
        tn_epochs_fini(&lh);
        tn_epochs_fini(&fh);
    }
}

/* Without the leader's entry at its log end (#5678), a follower holding an
 * epoch the leader never saw asks about an epoch "from the future". */
static void test_leader_without_election_entry(void **state)
{
    (void)state;
    tn_epoch_entry_t l[] = {{0, 0}};
    tn_epoch_entry_t f[] = {{0, 0}, {1, 3}};
    tn_epochs_t lh, fh;
    build(&lh, l, 1);
    build(&fh, f, 2);
    uint32_t le;
    uint64_t lend;
    assert_int_equal(tn_epochs_end_offset_for(&lh, 3, 1, &le, &lend), TN_ERANGE);
    assert_int_equal(tn_epochs_assign(&lh, 2, 3, NULL), 0);
    assert_int_equal(tn_epochs_end_offset_for(&lh, 3, 1, &le, &lend), 0);
    assert_int_equal(le, 0);
    assert_int_equal(lend, 3);
    tn_epochs_fini(&lh);
    tn_epochs_fini(&fh);
}

/* A crash between the two steps of a suffix truncation. The follower F
 * holds epoch 1 at offsets 3-5; the leader wrote epoch 0 up to 5 and was
 * elected again (epoch 2) at 5: F must truncate to 3. Cutting the log
 * first and repairing the history at restart converges; saving the history
 * first and losing the log cut would keep F's epoch-1 records at 3-4 as if
 * they were epoch 0's. */
static void test_truncation_crash_order(void **state)
{
    (void)state;
    mlog_t ll, fl;
    mlog_from(&ll, "00000");
    mlog_from(&fl, "000111");
    tn_epochs_t lh, fh;
    history_of(&lh, &ll, 2);
    history_of(&fh, &fl, -1);
    uint32_t le;
    uint64_t lend;
    tn_epochs_step_t s;
    assert_int_equal(tn_epochs_end_offset_for(&lh, ll.end, 1, &le, &lend), 0);
    assert_int_equal(tn_epochs_follower_step(&fh, fl.end, 1, le, lend, &s), 0);
    assert_int_equal(s.action, TN_EPOCHS_TRUNCATE);
    assert_int_equal(s.offset, 3);

    /* Right order: the log is cut to 3, the crash loses the history's
     * save, and the restart repairs it from the log's end. */
    mlog_t right = fl;
    tn_epochs_t rh;
    history_of(&rh, &fl, -1);
    right.end = 3;
    assert_true(tn_epochs_truncate_from_end(&rh, right.end));
    assert_int_equal(tn_epochs_end_offset_for(&lh, ll.end, tn_epochs_latest(&rh), &le, &lend), 0);
    assert_int_equal(tn_epochs_follower_step(&rh, right.end, tn_epochs_latest(&rh), le, lend, &s),
                     0);
    assert_int_equal(s.action, TN_EPOCHS_TRUNCATE);
    assert_true(repair(&right, &rh, &ll, s.action, s.offset));

    /* Wrong order: the history was saved without epoch 1, the log cut was
     * lost; the follower now believes offsets 3-5 are epoch 0's. */
    mlog_t wrong = fl;
    assert_true(tn_epochs_truncate_from_end(&fh, 3));
    assert_int_equal(tn_epochs_end_offset_for(&lh, ll.end, 0, &le, &lend), 0);
    assert_int_equal(tn_epochs_follower_step(&fh, wrong.end, 0, le, lend, &s), 0);
    assert_int_equal(s.action, TN_EPOCHS_TRUNCATE);
    assert_int_equal(s.offset, 5);
    assert_false(repair(&wrong, NULL, &ll, s.action, s.offset));
    tn_epochs_fini(&rh);
    tn_epochs_fini(&lh);
    tn_epochs_fini(&fh);
}

/* --- the file ------------------------------------------------------------ */

static void path_in(char *buf, const char *dir, const char *name)
{
    snprintf(buf, 4096, "%s/%s", dir, name);
}

static void write_raw(const char *dir, const void *data, size_t len)
{
    char p[4096];
    path_in(p, dir, TN_EPOCHS_FILE);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void test_file_round_trip(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    tn_epochs_t h;
    tn_epochs_init(&h);
    assert_int_equal(tn_epochs_load(&h, dir), 0); /* missing: empty */
    assert_int_equal(h.n, 0);
    assert_int_equal(tn_epochs_save(&h, dir), 0);
    char p[4096];
    path_in(p, dir, TN_EPOCHS_FILE);
    assert_int_equal(tu_file_size(p), 16);
    assert_int_equal(tn_epochs_load(&h, dir), 0);
    assert_int_equal(h.n, 0);

    tn_epoch_entry_t e[] = {{0, 0}, {7, 100}, {UINT32_MAX - 1, UINT64_MAX - 1}};
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(tn_epochs_assign(&h, e[i].epoch, e[i].start, NULL), 0);
    assert_int_equal(tn_epochs_save(&h, dir), 0);
    assert_int_equal(tu_file_size(p), 16 + 3 * 12);
    tn_epochs_t g;
    tn_epochs_init(&g);
    assert_int_equal(tn_epochs_assign(&g, 9, 9, NULL), 0); /* replaced by the load */
    assert_int_equal(tn_epochs_load(&g, dir), 0);
    expect_entries(&g, e, 3);

    /* The bytes are the documented ones. */
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_io_read_file(p, 1024, &b), 0);
    const unsigned char *d = (const unsigned char *)b.base;
    assert_memory_equal(d, "TNE1", 4);
    assert_int_equal(tn_get_u32(d + 4), 1);
    assert_int_equal(tn_get_u32(d + 8), 3);
    assert_int_equal(tn_get_u32(d + 24), 7);
    assert_int_equal(tn_get_u64(d + 28), 100);
    assert_int_equal(tn_get_u32(d + 48), tn_crc32c(0, d, 48));
    tn_buf_fini(&b);

    /* A missing file after a full one is empty again. */
    assert_int_equal(unlink(p), 0);
    assert_int_equal(tn_epochs_load(&g, dir), 0);
    assert_int_equal(g.n, 0);
    tn_epochs_fini(&g);
    tn_epochs_fini(&h);
    tu_rmrf(dir);
    free(dir);
}

/* A file image with a correct CRC over whatever the fields say. */
static size_t image(unsigned char *buf, uint32_t magic, uint32_t version, uint32_t count,
                    const tn_epoch_entry_t *e, uint32_t n)
{
    tn_put_u32(buf, magic);
    tn_put_u32(buf + 4, version);
    tn_put_u32(buf + 8, count);
    size_t len = 12;
    for (uint32_t i = 0; i < n; i++, len += 12) {
        tn_put_u32(buf + len, e[i].epoch);
        tn_put_u64(buf + len + 4, e[i].start);
    }
    tn_put_u32(buf + len, tn_crc32c(0, buf, len));
    return len + 4;
}

static void test_file_damage(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096];
    path_in(p, dir, TN_EPOCHS_FILE);
    const uint32_t M = 0x31454E54u;
    tn_epoch_entry_t good[] = {{1, 0}, {2, 5}, {4, 9}};
    tn_epoch_entry_t same_epoch[] = {{1, 0}, {1, 5}};
    tn_epoch_entry_t lower_epoch[] = {{3, 0}, {2, 5}};
    tn_epoch_entry_t same_start[] = {{1, 5}, {2, 5}};
    tn_epoch_entry_t lower_start[] = {{1, 5}, {2, 4}};
    tn_epoch_entry_t reserved[] = {{U, 5}};
    unsigned char buf[256];
    struct {
        const char *what;
        size_t len;
        int rc;
        const char *msg;
    } rows[16];
    unsigned char imgs[16][256];
    size_t n = 0;
#define ROW(w, l, r, m)                                                                            \
    do {                                                                                           \
        memcpy(imgs[n], buf, sizeof(buf));                                                         \
        rows[n].what = (w);                                                                        \
        rows[n].len = (l);                                                                         \
        rows[n].rc = (r);                                                                          \
        rows[n].msg = (m);                                                                         \
        n++;                                                                                       \
    } while (0)
    size_t len = image(buf, M, 1, 3, good, 3);
    buf[0] = 'X';
    ROW("bad magic", len, TN_ECORRUPT, "bad magic");
    len = image(buf, M, 1, 3, good, 3);
    buf[20] ^= 0x01;
    ROW("flipped bit in an entry", len, TN_ECORRUPT, "CRC mismatch");
    len = image(buf, M, 1, 3, good, 3);
    buf[len - 1] ^= 0x80;
    ROW("flipped bit in the CRC", len, TN_ECORRUPT, "CRC mismatch");
    len = image(buf, M, 1, 3, good, 3);
    ROW("torn: last entry cut", len - 10, TN_ECORRUPT, "CRC mismatch");
    ROW("torn: a header only", 8, TN_ECORRUPT, "shorter than");
    ROW("empty", 0, TN_ECORRUPT, "shorter than");
    len = image(buf, M, 1, 2, good, 3);
    ROW("count below the entries", len, TN_ECORRUPT, "do not hold the 2 entries");
    len = image(buf, M, 1, 4, good, 3);
    ROW("count above the entries", len, TN_ECORRUPT, "do not hold the 4 entries");
    len = image(buf, M, 1, UINT32_MAX, good, 3);
    ROW("absurd count", len, TN_ECORRUPT, "do not hold");
    len = image(buf, M, 2, 3, good, 3);
    ROW("another version", len, TN_EFORMAT, "format version 2");
    len = image(buf, M, 1, 2, same_epoch, 2);
    ROW("epoch repeated", len, TN_ECORRUPT, "strictly increasing");
    len = image(buf, M, 1, 2, lower_epoch, 2);
    ROW("epoch going down", len, TN_ECORRUPT, "strictly increasing");
    len = image(buf, M, 1, 2, same_start, 2);
    ROW("start repeated", len, TN_ECORRUPT, "strictly increasing");
    len = image(buf, M, 1, 2, lower_start, 2);
    ROW("start going down", len, TN_ECORRUPT, "strictly increasing");
    len = image(buf, M, 1, 1, reserved, 1);
    ROW("reserved epoch", len, TN_ECORRUPT, "reserved epoch");
#undef ROW
    tn_epochs_t h;
    tn_epochs_init(&h);
    for (size_t i = 0; i < n; i++) {
        print_message("damage: %s\n", rows[i].what);
        write_raw(dir, imgs[i], rows[i].len);
        assert_int_equal(tn_epochs_assign(&h, 8, 8, NULL), 0);
        assert_int_equal(tn_epochs_load(&h, dir), rows[i].rc);
        assert_non_null(strstr(h.errmsg, p)); /* names the file */
        assert_non_null(strstr(h.errmsg, rows[i].msg));
        /* Left unchanged. */
        assert_int_equal(h.n, 1);
        assert_int_equal(h.entries[0].epoch, 8);
        tn_epochs_truncate_from_end(&h, 0);
    }
    /* The same images through the decoder alone. */
    assert_int_equal(tn_epochs_decode(&h, imgs[0], rows[0].len), TN_ECORRUPT);
    len = image(buf, M, 1, 3, good, 3);
    assert_int_equal(tn_epochs_decode(&h, buf, len), 0);
    expect_entries(&h, good, 3);
    /* A trailing byte. */
    buf[len] = 0;
    assert_int_equal(tn_epochs_decode(&h, buf, len + 1), TN_ECORRUPT);
    tn_epochs_fini(&h);
    tu_rmrf(dir);
    free(dir);
}

static void test_save_failures(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char p[4096], tmp[4096];
    path_in(p, dir, TN_EPOCHS_FILE);
    path_in(tmp, dir, TN_EPOCHS_FILE ".tmp");
    tn_epoch_entry_t e[] = {{1, 0}, {2, 5}};
    tn_epochs_t h;
    build(&h, e, 1);
    assert_int_equal(tn_epochs_save(&h, dir), 0);
    assert_int_equal(tn_epochs_assign(&h, 2, 5, NULL), 0);

    /* A failed fdatasync (then a failed write): the old file stands, no
     * temporary file is left, and the error says where. */
    tn_io_fail_sync_after(0, UV_EIO);
    assert_int_equal(tn_epochs_save(&h, dir), UV_EIO);
    tn_io_fail_sync_after(-1, 0);
    assert_non_null(strstr(h.errmsg, "writing epochs file in"));
    tn_io_fail_write_after(0, UV_ENOSPC);
    assert_int_equal(tn_epochs_save(&h, dir), UV_ENOSPC);
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(tu_file_size(tmp), -1);
    tn_epochs_t g;
    tn_epochs_init(&g);
    assert_int_equal(tn_epochs_load(&g, dir), 0);
    expect_entries(&g, e, 1);

    /* A crash left a temporary file (a half-written new version): loading
     * ignores it, and the next save replaces it. */
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("TNE1 half", 1, 9, f), 9);
    fclose(f);
    assert_int_equal(tn_epochs_load(&g, dir), 0);
    expect_entries(&g, e, 1);
    assert_int_equal(tn_epochs_save(&h, dir), 0);
    assert_int_equal(tu_file_size(tmp), -1);
    assert_int_equal(tn_epochs_load(&g, dir), 0);
    expect_entries(&g, e, 2);
    tn_epochs_fini(&g);
    tn_epochs_fini(&h);
    tu_rmrf(dir);
    free(dir);
}

/* Power cut at every operation of a save, under many post-cut states: the
 * file read back is the old history or the new one, never damage, and the
 * new one once the save returned success. */
static void test_save_crash_points(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char tmp[4096];
    path_in(tmp, dir, TN_EPOCHS_FILE ".tmp");
    tn_epoch_entry_t e[] = {{1, 0}, {2, 5}, {3, 9}};
    tn_epochs_t old, next;
    build(&old, e, 2);
    build(&next, e, 3);
    /* How many mutating operations a save makes. */
    assert_int_equal(tn_epochs_save(&old, dir), 0);
    assert_int_equal(tn_io_sim_start(dir), 0);
    assert_int_equal(tn_epochs_save(&next, dir), 0);
    long ops = tn_io_sim_ops();
    tn_io_sim_stop();
    assert_true(ops >= 4); /* create+write, sync, rename, dir sync */
    int saw_old = 0, saw_new = 0;
    for (long cut = 0; cut <= ops; cut++) {
        for (uint64_t seed = 1; seed <= 12; seed++) {
            assert_int_equal(tn_epochs_save(&old, dir), 0);
            assert_int_equal(tn_io_sim_start(dir), 0);
            tn_io_sim_cut_after(cut);
            int rc = tn_epochs_save(&next, dir);
            assert_true(rc == 0 || rc == UV_EIO);
            assert_int_equal(tn_io_sim_powerloss(seed * 31 + (uint64_t)cut), 0);
            tn_epochs_t got;
            tn_epochs_init(&got);
            assert_int_equal(tn_epochs_load(&got, dir), 0);
            if (got.n == 2) {
                assert_int_not_equal(rc, 0);
                expect_entries(&got, e, 2);
                saw_old++;
            } else {
                expect_entries(&got, e, 3);
                saw_new++;
            }
            tn_epochs_fini(&got);
            remove(tmp); /* recovery's job (every .tmp in a partition dir) */
        }
    }
    assert_true(saw_old > 0 && saw_new > 0);
    tn_epochs_fini(&old);
    tn_epochs_fini(&next);
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign),
        cmocka_unit_test(test_truncate_from_end),
        cmocka_unit_test(test_truncate_from_start),
        cmocka_unit_test(test_end_offset_for),
        cmocka_unit_test(test_follower_step_refuses),
        cmocka_unit_test(test_divergence_table),
        cmocka_unit_test(test_leader_without_election_entry),
        cmocka_unit_test(test_truncation_crash_order),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_file_damage),
        cmocka_unit_test(test_save_failures),
        cmocka_unit_test(test_save_crash_points),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
