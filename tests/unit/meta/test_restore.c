/* A whole cluster restored from one backup (meta/restore.h): the choice of
 * the copy to lead as a table (ties, a copy ahead in epoch but shorter,
 * empty, missing and damaged copies), the rewritten partition state, the
 * derived incarnations, and the rewrite of a real snapshot: the same bytes
 * from every member's restore, channel stamps kept, and a restored
 * member's first registration fences nothing, so the partition keeps the
 * leader and epochs the restore chose. */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/alloc.h"
#include "core/err.h"
#include "meta/restore.h"
#include "meta/state.h"

#include <stdio.h>
#include <string.h>

#define COPY(node, epoch, end)                                                                     \
    {                                                                                              \
        (node), true, false, (epoch), (end), (epoch)                                               \
    }
#define MISSING(node)                                                                              \
    {                                                                                              \
        (node), false, false, 0, 0, 0                                                              \
    }
#define DAMAGED(node, max)                                                                         \
    {                                                                                              \
        (node), true, true, 0, 0, (max)                                                            \
    }

static void test_choose_table(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        tn_meta_restore_copy_t c[3];
        int best;
    } rows[] = {
        {"all equal: the first in replicas order",
         {COPY(1, 3, 40), COPY(2, 3, 40), COPY(3, 3, 40)},
         0},
        {"a longer log in the same epoch", {COPY(1, 3, 40), COPY(2, 3, 41), COPY(3, 3, 39)}, 1},
        {"a tie between later replicas: the earlier of them",
         {COPY(1, 3, 10), COPY(2, 3, 41), COPY(3, 3, 41)},
         1},
        {"ahead in epoch but shorter wins", {COPY(1, 3, 90), COPY(2, 4, 50), COPY(3, 3, 95)}, 1},
        {"an empty copy loses to any record", {COPY(1, 0, 0), COPY(2, 1, 1), COPY(3, 0, 0)}, 1},
        {"every copy empty: the preferred replica",
         {COPY(1, 0, 0), COPY(2, 0, 0), COPY(3, 0, 0)},
         0},
        {"a missing copy is no candidate", {MISSING(1), COPY(2, 2, 5), COPY(3, 2, 7)}, 2},
        {"a damaged copy is no candidate, however high its epoch",
         {DAMAGED(1, 9), COPY(2, 2, 5), COPY(3, 1, 7)},
         1},
        {"nothing to choose", {MISSING(1), DAMAGED(2, 4), MISSING(3)}, -1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int got = tn_meta_restore_choose(rows[i].c, 3);
        if (got != rows[i].best)
            fail_msg("%s: chose %d, want %d", rows[i].what, got, rows[i].best);
    }
    assert_int_equal(tn_meta_restore_choose(NULL, 0), -1);
}

static tn_pstate_t old_state(void)
{
    tn_pstate_t ps = tu_pstate3(1, 2, 3, 2, 4);
    ps.partition_epoch = 17;
    ps.nisr = 1;
    ps.isr[0] = (tn_pstate_member_t){2, 0x22};
    ps.nelr = 1;
    ps.elr[0] = (tn_pstate_member_t){3, 0x33};
    ps.corrupt = 1u << 0;
    ps.unclean = true;
    return ps;
}

static void test_rewritten_state(void **state)
{
    (void)state;
    tn_pstate_t old = old_state();
    /* The logs are ahead of the snapshot's state (epoch 6 > 4), and one
     * copy names an epoch 8 its log never wrote in. */
    tn_meta_restore_copy_t c[3] = {COPY(1, 6, 30), COPY(2, 5, 40), COPY(3, 6, 29)};
    c[2].max_epoch = 8;
    int best = tn_meta_restore_choose(c, 3);
    assert_int_equal(best, 0);
    tn_pstate_t now;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, best, 0xabc, &now), 0);
    assert_int_equal(now.leader, 1);
    assert_int_equal(now.leader_epoch, 9);
    assert_int_equal(now.partition_epoch, 18);
    assert_int_equal(now.nisr, 1);
    assert_int_equal(now.isr[0].node, 1);
    assert_true(now.isr[0].incarnation == 0xabc);
    assert_int_equal(now.nelr, 0);
    assert_int_equal(now.corrupt, 0);
    assert_false(now.unclean);
    assert_int_equal(now.min_insync, 2);
    assert_int_equal(now.nreplicas, 3);
    assert_memory_equal(now.replicas, old.replicas, sizeof(old.replicas));

    /* The snapshot's epoch above every copy's still counts. */
    old.leader_epoch = 12;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, best, 0xabc, &now), 0);
    assert_int_equal(now.leader_epoch, 13);

    /* No copy: offline, nobody to elect, epochs still moved on. */
    tn_meta_restore_copy_t none[3] = {MISSING(1), DAMAGED(2, 14), MISSING(3)};
    assert_int_equal(
        tn_meta_restore_pstate(&old, none, 3, tn_meta_restore_choose(none, 3), 0, &now), 0);
    assert_int_equal(now.leader, TN_PSTATE_NONE);
    assert_int_equal(now.nisr, 0);
    assert_int_equal(now.nelr, 0);
    assert_int_equal(now.leader_epoch, 15);
    assert_int_equal(now.partition_epoch, 18);
}

static void test_incarnations(void **state)
{
    (void)state;
    const char *id = "0123456789abcdef0123456789abcdef";
    uint64_t a1 = tn_meta_restore_incarnation(id, 1);
    assert_true(a1 != 0);
    assert_true(a1 == tn_meta_restore_incarnation(id, 1)); /* every node derives the same */
    assert_true(a1 != tn_meta_restore_incarnation(id, 2));
    assert_true(a1 != tn_meta_restore_incarnation("0123456789abcdef0123456789abcdee", 1));
    /* Member 1 of backup "x1" is not member 11 of backup "x". */
    assert_true(tn_meta_restore_incarnation("x1", 1) != tn_meta_restore_incarnation("x", 11));
}

/* --- the rewrite of a snapshot -------------------------------------------------- */

/* s initialised with members 1..n registered. */
static void members_up(tn_meta_state_t *s, uint64_t n)
{
    tn_meta_state_init(s);
    for (uint64_t id = 1; id <= n; id++) {
        tn_meta_cmd_t c = tu_meta_rec_cmd(id, 0x100 + id, 0x900 + id);
        assert_int_equal(tn_meta_state_apply(s, &c), 0);
    }
}

/* The copies a test backup holds: partition 0 has node 3 ahead; partition
 * 1 has no copy at all. */
static int copies_cb(void *arg, const char *t, uint32_t p, const tn_pstate_t *ps,
                     tn_meta_restore_copy_t *copies, uint32_t ncopies, char *err, size_t errlen)
{
    (void)arg;
    (void)err;
    (void)errlen;
    assert_string_equal(t, "rt");
    assert_int_equal(ncopies, ps->nreplicas); /* every member is a replica */
    for (uint32_t k = 0; k < ps->nreplicas; k++) {
        if (p == 1)
            continue; /* missing */
        copies[k].present = true;
        copies[k].last_epoch = copies[k].max_epoch = 3;
        copies[k].log_end = copies[k].node == 3 ? 12 : 10;
    }
    return 0;
}

typedef struct {
    int told;
    int offline;
} told_t;

static void told_cb(void *arg, const char *t, uint32_t p, const tn_pstate_t *old,
                    const tn_pstate_t *now, const tn_meta_restore_copy_t *copies, uint32_t ncopies,
                    int best)
{
    (void)t;
    (void)old;
    (void)copies;
    (void)ncopies;
    told_t *x = arg;
    x->told++;
    if (best < 0) {
        x->offline++;
        assert_int_equal(p, 1);
        assert_int_equal(now->leader, TN_PSTATE_NONE);
    }
}

static int fail_cb(void *arg, const char *t, uint32_t p, const tn_pstate_t *ps,
                   tn_meta_restore_copy_t *copies, uint32_t ncopies, char *err, size_t errlen)
{
    (void)ncopies;
    (void)arg;
    (void)t;
    (void)p;
    (void)ps;
    (void)copies;
    tn_errbuf(err, errlen, "node 2's copy is unreadable");
    return UV_EIO;
}

static void test_rewrite_snapshot(void **state)
{
    (void)state;
    tn_meta_state_t s;
    members_up(&s, 3);
    tn_meta_cmd_t t = tu_meta_native_topic_cmd("rt", 2, 3, 2);
    assert_int_equal(tn_meta_state_apply(&s, &t), 0);
    /* Channels: one stamped (meta/cmd.h CHANNEL_PUT), one an older
     * build's (none). */
    tn_meta_cmd_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.type = TN_MC_CHANNEL_PUT;
    snprintf(ch.topic.name, sizeof(ch.topic.name), "rt");
    snprintf(ch.channel, sizeof(ch.channel), "audit");
    ch.chan_stamp = 0xc4a1;
    assert_int_equal(tn_meta_state_apply(&s, &ch), 0);
    snprintf(ch.channel, sizeof(ch.channel), "older");
    ch.chan_stamp = 0;
    assert_int_equal(tn_meta_state_apply(&s, &ch), 0);
    const tn_pstate_t *ps0 = tn_meta_state_pstate(&s, "rt", 0);
    assert_non_null(ps0);
    uint32_t old_epoch = ps0->leader_epoch;
    tn_buf_t snap;
    tn_buf_init(&snap);
    assert_int_equal(tn_meta_state_snapshot(&s, &snap), 0);
    tn_meta_state_fini(&s);

    const char *bid = "feedfacefeedfacefeedfacefeedface";
    const uint64_t members[3] = {1, 2, 3};
    tn_buf_t a, b;
    tn_buf_init(&a);
    tn_buf_init(&b);
    char err[200];
    told_t told = {0, 0};
    assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid, members,
                                             3, copies_cb, told_cb, &told, &a, err, sizeof(err)),
                     0);
    assert_int_equal(told.told, 2);
    assert_int_equal(told.offline, 1);
    /* Another member's restore of the same backup: the same bytes. */
    assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid, members,
                                             3, copies_cb, NULL, NULL, &b, err, sizeof(err)),
                     0);
    assert_int_equal(tn_buf_size(&a), tn_buf_size(&b));
    assert_memory_equal(tn_buf_data(&a), tn_buf_data(&b), tn_buf_size(&a));

    tn_meta_state_init(&s);
    assert_int_equal(tn_meta_state_restore(&s, tn_buf_data(&a), tn_buf_size(&a)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "rt", 0);
    assert_non_null(ps);
    assert_int_equal(ps->leader, 3); /* the longest copy */
    assert_int_equal(ps->leader_epoch, TN_MAX(old_epoch, 3u) + 1);
    assert_int_equal(ps->nisr, 1);
    assert_true(ps->isr[0].incarnation == tn_meta_restore_incarnation(bid, 3));
    const tn_pstate_t *off = tn_meta_state_pstate(&s, "rt", 1);
    assert_non_null(off);
    assert_int_equal(off->leader, TN_PSTATE_NONE);
    assert_int_equal(off->nisr + off->nelr, 0);
    /* Channels keep their stamps: a restored node's catalog takes the
     * same channel for the same one (api/catalog.c, follow_deletions). */
    uint64_t stamp = 1;
    assert_true(tn_meta_channel_find(&s, "rt", "audit", &stamp));
    assert_true(stamp == 0xc4a1);
    assert_true(tn_meta_channel_find(&s, "rt", "older", &stamp));
    assert_true(stamp == 0);
    for (uint64_t id = 1; id <= 3; id++) {
        const tn_meta_member_t *m = tn_meta_member_find(&s, id);
        assert_non_null(m);
        assert_true(m->incarnation == tn_meta_restore_incarnation(bid, id));
        assert_true(m->boot == 0);
        assert_false(m->fenced);
    }
    /* The restored node's first registration (its derived incarnation, a
     * new process) fences nothing: the partition keeps the leader and the
     * epochs the restore chose. */
    tn_pstate_t chosen = *ps;
    tn_meta_cmd_t r3 = tu_meta_rec_cmd(3, tn_meta_restore_incarnation(bid, 3), 0x77);
    assert_int_equal(tn_meta_state_apply(&s, &r3), 0);
    ps = tn_meta_state_pstate(&s, "rt", 0);
    assert_int_equal(ps->leader, 3);
    assert_int_equal(ps->leader_epoch, chosen.leader_epoch);
    assert_int_equal(ps->partition_epoch, chosen.partition_epoch);
    /* A second start of it is a restart like any other (a new epoch). */
    tn_meta_cmd_t again = tu_meta_rec_cmd(3, tn_meta_restore_incarnation(bid, 3), 0x78);
    assert_int_equal(tn_meta_state_apply(&s, &again), 0);
    ps = tn_meta_state_pstate(&s, "rt", 0);
    assert_true(ps->leader_epoch > chosen.leader_epoch);
    /* Whereas another incarnation (a random one, what a restore gave
     * before) fences the only ISR member's copy for good: offline. */
    tn_meta_cmd_t other = tu_meta_rec_cmd(3, 0x5eed, 0x79);
    assert_int_equal(tn_meta_state_apply(&s, &other), 0);
    ps = tn_meta_state_pstate(&s, "rt", 0);
    assert_int_equal(ps->leader, TN_PSTATE_NONE);
    tn_meta_state_fini(&s);

    /* A copies callback's failure ends the rewrite with its words. */
    tn_buf_t c;
    tn_buf_init(&c);
    assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid, members,
                                             3, fail_cb, NULL, NULL, &c, err, sizeof(err)),
                     UV_EIO);
    assert_string_equal(err, "node 2's copy is unreadable");
    /* A damaged snapshot is refused. */
    ((unsigned char *)tn_buf_data(&snap))[0] ^= 0xff;
    assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid, members,
                                             3, copies_cb, NULL, NULL, &c, err, sizeof(err)),
                     TN_ECORRUPT);
    assert_non_null(strstr(err, "snapshot"));
    tn_buf_fini(&c);
    tn_buf_fini(&a);
    tn_buf_fini(&b);
    tn_buf_fini(&snap);
}

/* --- a copy on a member the snapshot no longer lists (restore.h step 3a) --------- */

static void test_nonreplica_copy_state(void **state)
{
    (void)state;
    /* A move from {1} to {2} completed after node 1's copy was taken and
     * before the snapshot restored: replicas {2}, whose copy is empty. */
    tn_pstate_t old;
    memset(&old, 0, sizeof(old));
    old.nreplicas = 1;
    old.replicas[0] = 2;
    old.leader = 2;
    old.leader_epoch = 2;
    old.partition_epoch = 7;
    old.nisr = 1;
    old.isr[0].node = 2;
    old.min_insync = 1;
    tn_meta_restore_copy_t c[3] = {COPY(2, 0, 0), COPY(1, 1, 5), MISSING(3)};
    int best = tn_meta_restore_choose(c, 3);
    assert_int_equal(best, 1);
    tn_pstate_t now;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, best, 0xabc, &now), 0);
    assert_int_equal(now.leader, 1);
    assert_int_equal(now.nreplicas, 2);
    assert_int_equal(now.replicas[0], 1); /* first: the factor's move keeps it */
    assert_int_equal(now.replicas[1], 2);
    assert_int_equal(now.nisr, 1);
    assert_int_equal(now.isr[0].node, 1);
    assert_true(now.isr[0].incarnation == 0xabc);
    assert_int_equal(now.leader_epoch, 3);
    assert_int_equal(now.ntarget, 0);

    /* A replica's copy as good as the other member's: the replica (ties
     * go to the earlier copy), nothing added. */
    tn_meta_restore_copy_t tie[2] = {COPY(2, 1, 5), COPY(1, 1, 5)};
    assert_int_equal(tn_meta_restore_choose(tie, 2), 0);
    assert_int_equal(tn_meta_restore_pstate(&old, tie, 2, 0, 0xabc, &now), 0);
    assert_int_equal(now.nreplicas, 1);
    assert_int_equal(now.leader, 2);

    /* A move under way in the snapshot (target {3}, old {2}): the member
     * joins as an old replica, last, so replicas stays the target
     * followed by the old replicas not in it. */
    tn_pstate_t mv = old;
    mv.nreplicas = 2;
    mv.replicas[0] = 3;
    mv.replicas[1] = 2;
    mv.ntarget = 1;
    mv.target[0] = 3;
    mv.nold = 1;
    mv.old[0] = 2;
    mv.move_id = 99;
    tn_meta_restore_copy_t cm[3] = {COPY(3, 0, 0), COPY(2, 0, 0), COPY(1, 1, 5)};
    best = tn_meta_restore_choose(cm, 3);
    assert_int_equal(best, 2);
    assert_int_equal(tn_meta_restore_pstate(&mv, cm, 3, best, 0xabc, &now), 0);
    assert_int_equal(now.leader, 1);
    assert_int_equal(now.nreplicas, 3);
    uint32_t want_r[3] = {3, 2, 1};
    assert_memory_equal(now.replicas, want_r, sizeof(want_r));
    assert_int_equal(now.nold, 2);
    assert_int_equal(now.old[1], 1);
    assert_int_equal(now.ntarget, 1);
    assert_true(now.move_id == 99);

    /* No room for another replica: refused, not lost. */
    tn_pstate_t full = old;
    full.nreplicas = TN_PSTATE_MAX_REPLICAS;
    tn_meta_restore_copy_t cf[TN_PSTATE_MAX_REPLICAS + 1];
    for (uint32_t i = 0; i < TN_PSTATE_MAX_REPLICAS; i++) {
        full.replicas[i] = 10 + i;
        cf[i] = (tn_meta_restore_copy_t)MISSING(10 + i);
    }
    cf[TN_PSTATE_MAX_REPLICAS] = (tn_meta_restore_copy_t)COPY(1, 1, 5);
    best = tn_meta_restore_choose(cf, TN_PSTATE_MAX_REPLICAS + 1);
    assert_int_equal(best, TN_PSTATE_MAX_REPLICAS);
    memset(&now, 0x5a, sizeof(now));
    assert_int_equal(
        tn_meta_restore_pstate(&full, cf, TN_PSTATE_MAX_REPLICAS + 1, best, 0xabc, &now), UV_E2BIG);
}

/* The copies of a backup whose snapshot was taken after rm/0 moved off
 * the member *arg (factor 2): its replicas have empty copies, *arg the
 * whole one. copies[ps->nreplicas..) are the other members'. */
static int moved_cb(void *arg, const char *t, uint32_t p, const tn_pstate_t *ps,
                    tn_meta_restore_copy_t *copies, uint32_t ncopies, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    uint32_t *holder = arg;
    assert_string_equal(t, "rm");
    assert_int_equal(p, 0);
    assert_int_equal(ncopies, 4); /* the two replicas, then the two other members */
    for (uint32_t k = 0; k < ncopies; k++) {
        assert_int_equal(k < ps->nreplicas,
                         copies[k].node == ps->replicas[0] || copies[k].node == ps->replicas[1]);
        if (k < ps->nreplicas)
            copies[k].present = true; /* empty */
        else if (copies[k].node == *holder) {
            copies[k].present = true;
            copies[k].last_epoch = copies[k].max_epoch = 1;
            copies[k].log_end = 5;
        }
    }
    return 0;
}

/* *s: members 1..n registered and a native topic of parts partitions
 * (factor, min_insync); its snapshot appended to snap. */
static void topic_snapshot(tn_meta_state_t *s, uint64_t n, const char *topic, uint32_t parts,
                           uint8_t factor, uint8_t min_insync, tn_buf_t *snap)
{
    members_up(s, n);
    tn_meta_cmd_t t = tu_meta_native_topic_cmd(topic, parts, factor, min_insync);
    assert_int_equal(tn_meta_state_apply(s, &t), 0);
    assert_int_equal(tn_meta_state_snapshot(s, snap), 0);
}

static void test_rewrite_nonreplica_copy(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_buf_t snap, out;
    tn_buf_init(&snap);
    tn_buf_init(&out);
    topic_snapshot(&s, 4, "rm", 1, 2, 1, &snap);
    const tn_pstate_t *ps0 = tn_meta_state_pstate(&s, "rm", 0);
    assert_non_null(ps0);
    assert_int_equal(ps0->nreplicas, 2);
    uint32_t r0 = ps0->replicas[0], r1 = ps0->replicas[1];
    uint32_t holder = 4;
    while (holder == r0 || holder == r1)
        holder--;
    tn_meta_state_fini(&s);
    const char *bid = "feedfacefeedfacefeedfacefeedface";
    const uint64_t members[4] = {1, 2, 3, 4};
    char err[300];
    assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid, members,
                                             4, moved_cb, NULL, &holder, &out, err, sizeof(err)),
                     0);
    tn_meta_state_init(&s);
    assert_int_equal(tn_meta_state_restore(&s, tn_buf_data(&out), tn_buf_size(&out)), 0);
    const tn_pstate_t *ps = tn_meta_state_pstate(&s, "rm", 0);
    assert_non_null(ps);
    assert_int_equal(ps->leader, holder);
    assert_int_equal(ps->nreplicas, 3);
    assert_int_equal(ps->replicas[0], holder);
    assert_int_equal(ps->replicas[1], r0);
    assert_int_equal(ps->replicas[2], r1);
    assert_int_equal(ps->nisr, 1);
    assert_true(ps->isr[0].incarnation == tn_meta_restore_incarnation(bid, holder));
    assert_true(tn_meta_state_owner(&s, "rm", 0) == holder);
    tn_meta_state_fini(&s);
    tn_buf_fini(&out);
    tn_buf_fini(&snap);
}

/* --- what a hostile or damaged backup may hold (tests/fuzz/meta_restore) -------- */

/* Epochs at the top of their range: no epoch lies above them, so the
 * restore is refused (before: leader_epoch wrapped to 0, a snapshot no
 * node could load, and partition_epoch to 0, below every CAS). */
static void test_epochs_at_the_top(void **state)
{
    (void)state;
    tn_pstate_t old = old_state();
    tn_meta_restore_copy_t c[3] = {COPY(1, 6, 30), COPY(2, 5, 40), COPY(3, 6, 29)};
    tn_pstate_t now;
    memset(&now, 0x5a, sizeof(now));
    tn_pstate_t before = now;
    c[2].max_epoch = UINT32_MAX; /* a copy's epochs file names it */
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, 0, 0xabc, &now), UV_ERANGE);
    c[2].max_epoch = 6;
    c[1].last_epoch = UINT32_MAX;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, 1, 0xabc, &now), UV_ERANGE);
    c[1].last_epoch = 5;
    old.leader_epoch = UINT32_MAX;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, 0, 0xabc, &now), UV_ERANGE);
    old = old_state();
    old.partition_epoch = UINT32_MAX;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, 0, 0xabc, &now), UV_ERANGE);
    assert_memory_equal(&now, &before, sizeof(now)); /* *out untouched */
    /* One below the top still has room. */
    old = old_state();
    c[2].max_epoch = UINT32_MAX - 1;
    assert_int_equal(tn_meta_restore_pstate(&old, c, 3, 0, 0xabc, &now), 0);
    assert_true(now.leader_epoch == UINT32_MAX);
}

/* The copies of every replica: epochs at the top of their range. */
static int top_cb(void *arg, const char *t, uint32_t p, const tn_pstate_t *ps,
                  tn_meta_restore_copy_t *copies, uint32_t ncopies, char *err, size_t errlen)
{
    (void)arg;
    (void)t;
    (void)p;
    (void)ps;
    (void)err;
    (void)errlen;
    for (uint32_t k = 0; k < ncopies; k++) {
        copies[k].present = true;
        copies[k].last_epoch = 3;
        copies[k].log_end = 10;
        copies[k].max_epoch = UINT32_MAX;
    }
    return 0;
}

static void test_rewrite_refuses_what_no_node_could_load(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_buf_t snap, out;
    tn_buf_init(&snap);
    tn_buf_init(&out);
    topic_snapshot(&s, 3, "rt", 1, 3, 2, &snap);
    tn_meta_state_fini(&s);
    const char *bid = "feedfacefeedfacefeedfacefeedface";
    char err[600];
    const uint64_t three[3] = {1, 2, 3};
    assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid, three, 3,
                                             top_cb, NULL, NULL, &out, err, sizeof(err)),
                     UV_ERANGE);
    assert_non_null(strstr(err, "rt/0"));
    assert_non_null(strstr(err, "4294967295"));
    assert_int_equal(tn_buf_size(&out), 0);

    /* Member ids that are no node's (node ids are 32 bits, 0 is none),
     * and one named twice: refused, naming it (before: 2^32 + 1 became
     * node 1 and 2^32 node 0, so a copy of theirs could make a replica
     * twice over, or make "no node" lead). */
    static const struct {
        uint64_t ids[4];
        const char *says;
    } bad[] = {
        {{1, 2, 3, 0}, "member 0 "},
        {{1, 2, 3, (1ull << 32) + 1}, "member 4294967297 "},
        {{1, 2, 3, 1ull << 32}, "member 4294967296 "},
        {{1, 2, 3, 2}, "member 2 "},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(tn_meta_restore_rewrite(tn_buf_data(&snap), tn_buf_size(&snap), bid,
                                                 bad[i].ids, 4, copies_cb, NULL, NULL, &out, err,
                                                 sizeof(err)),
                         UV_EINVAL);
        if (strstr(err, bad[i].says) == NULL)
            fail_msg("members row %zu: %s", i, err);
        assert_int_equal(tn_buf_size(&out), 0);
    }
    tn_buf_fini(&out);
    tn_buf_fini(&snap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose_table),
        cmocka_unit_test(test_rewritten_state),
        cmocka_unit_test(test_incarnations),
        cmocka_unit_test(test_rewrite_snapshot),
        cmocka_unit_test(test_nonreplica_copy_state),
        cmocka_unit_test(test_rewrite_nonreplica_copy),
        cmocka_unit_test(test_epochs_at_the_top),
        cmocka_unit_test(test_rewrite_refuses_what_no_node_could_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
