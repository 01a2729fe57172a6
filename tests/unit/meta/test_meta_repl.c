/* Tests of replicated partitions through a real metastore (libraft, one
 * voter): the incarnation file of a data directory (made once, kept, a
 * damaged one refused), registrations carrying it, the partition
 * proposals (tn_meta_propose_isr, tn_meta_force_leader,
 * tn_meta_mark_corrupt) answered by the state machine, and
 * tn_meta_on_pstate telling of made, changed and removed partition states,
 * and of every one again after a restart. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/time.h"
#include "meta/meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool run_until(uv_loop_t *loop, bool (*cond)(void *), void *arg)
{
    int64_t deadline = tn_now_mono_ms() + 30000;
    while (!cond(arg)) {
        if (tn_now_mono_ms() > deadline)
            return false;
        uv_run(loop, UV_RUN_ONCE);
    }
    return true;
}

static bool is_ready(void *arg)
{
    return tn_meta_ready(arg);
}

static bool closed_flag;
static void on_closed(void *arg)
{
    (void)arg;
    closed_flag = true;
}

static bool is_closed(void *arg)
{
    (void)arg;
    return closed_flag;
}

static tn_meta_t *open_meta(uv_loop_t *loop, const char *dir, uint64_t incarnation)
{
    tn_meta_opts_t o;
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    o.node_id = 1;
    o.address = "127.0.0.1:0";
    o.election_ms = 150;
    o.heartbeat_ms = 50;
    o.incarnation = incarnation;
    tn_meta_t *m = NULL;
    char err[256] = "";
    if (tn_meta_open(loop, &o, &m, err, sizeof(err)) != 0)
        fail_msg("tn_meta_open: %s", err);
    assert_true(run_until(loop, is_ready, m));
    return m;
}

static void close_meta(uv_loop_t *loop, tn_meta_t *m)
{
    closed_flag = false;
    tn_meta_close(m, on_closed, NULL);
    assert_true(run_until(loop, is_closed, NULL));
}

typedef struct {
    int done;
    int status;
} answer_t;

static void on_answer(tn_meta_req_t *req, int status)
{
    answer_t *a = req->data;
    a->done++;
    a->status = status;
}

static bool answered(void *arg)
{
    return ((answer_t *)arg)->done > 0;
}

/* What the listener was told last, per partition 0..3 of topic "r". */
typedef struct {
    int calls[4];
    bool gone[4];
    tn_pstate_t last[4];
} heard_t;

static void on_pstate(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps)
{
    heard_t *h = arg;
    assert_string_equal(topic, "r");
    assert_true(p < 4);
    h->calls[p]++;
    h->gone[p] = ps == NULL;
    if (ps != NULL)
        h->last[p] = *ps;
}

typedef struct {
    heard_t *h;
    uint32_t p;
    int calls;
} wait_told_t;

static bool told(void *arg)
{
    wait_told_t *w = arg;
    return w->h->calls[w->p] >= w->calls;
}

static int propose(uv_loop_t *loop, tn_meta_t *m, const tn_meta_cmd_t *c)
{
    tn_meta_req_t req;
    answer_t a = {0, 0};
    req.data = &a;
    assert_int_equal(tn_meta_propose(m, &req, c, on_answer), 0);
    assert_true(run_until(loop, answered, &a));
    return a.status;
}

static void test_incarnation_file(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    uint64_t a = 0, b = 0;
    char err[256] = "";
    assert_int_equal(tn_meta_incarnation_load(dir, &a, err, sizeof(err)), 0);
    assert_true(a != 0);
    assert_int_equal(tn_meta_incarnation_load(dir, &b, err, sizeof(err)), 0);
    assert_true(a == b);
    char path[4096], text[64];
    snprintf(path, sizeof(path), "%s/incarnation", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    char want[32];
    snprintf(want, sizeof(want), "%016llx\n", (unsigned long long)a);
    assert_string_equal(text, want);
    /* No temporary file is left behind. */
    snprintf(path, sizeof(path), "%s/incarnation.tmp", dir);
    assert_int_equal(access(path, F_OK), -1);
    /* Damaged or zero: refused, never replaced by a new one. */
    const char *bad[] = {"xyz\n", "0000000000000000\n", "00000000000000011\n", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "%s/incarnation", dir);
        f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        err[0] = '\0';
        assert_int_equal(tn_meta_incarnation_load(dir, &b, err, sizeof(err)), TN_ECORRUPT);
        assert_non_null(strstr(err, "not an incarnation file"));
    }
    /* Another directory: another incarnation. */
    char *other = tu_tempdir();
    assert_int_equal(tn_meta_incarnation_load(other, &b, err, sizeof(err)), 0);
    assert_true(a != b);
    tu_rmrf(other);
    free(other);
    tu_rmrf(dir);
    free(dir);
}

static bool registered(void *arg)
{
    const tn_meta_member_t *me = tn_meta_member_find(tn_meta_state(arg), 1);
    return me != NULL && me->incarnation == tn_meta_incarnation(arg);
}

typedef struct {
    tn_meta_t *m;
    uint32_t epoch;
} epoch_t;

static bool restarted_epoch(void *arg)
{
    epoch_t *e = arg;
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(e->m), "r", 0);
    return ps != NULL && ps->leader == 1 && ps->leader_epoch > e->epoch;
}

static void test_proposals_and_notifications(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char mdir[4096];
    snprintf(mdir, sizeof(mdir), "%s/meta", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_meta_t *m = open_meta(&loop, mdir, 0x5eed);
    assert_true(tn_meta_incarnation(m) == 0x5eed);
    assert_true(run_until(&loop, registered, m));
    heard_t h;
    memset(&h, 0, sizeof(h));
    tn_meta_on_pstate(m, on_pstate, &h);

    tn_meta_cmd_t t;
    memset(&t, 0, sizeof(t));
    t.type = TN_MC_TOPIC_PUT;
    snprintf(t.topic.name, sizeof(t.topic.name), "r");
    t.topic.partitions = 2;
    t.topic.visibility_timeout_ms = 30000;
    t.topic.native = true;
    t.topic.replication_factor = 3;
    t.topic.min_insync = 2;
    assert_int_equal(propose(&loop, m, &t), 0);
    /* One member: one replica, min_insync clamped; told of each. */
    wait_told_t w = {&h, 1, 1};
    assert_true(run_until(&loop, told, &w));
    assert_int_equal(h.last[1].nreplicas, 1);
    assert_int_equal(h.last[1].leader, 1);
    assert_int_equal(h.last[1].min_insync, 1);
    assert_true(h.last[1].isr[0].incarnation == 0x5eed);
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(m), "r", 0);
    assert_non_null(ps);
    assert_int_equal(tn_meta_state_owner(tn_meta_state(m), "r", 0), 1);

    /* The leader's CAS: accepted, then the same again is stale. */
    tn_pstate_member_t isr[1] = {{1, 0x5eed}};
    uint32_t pe = ps->partition_epoch;
    tn_meta_req_t req;
    answer_t a = {0, 0};
    req.data = &a;
    /* (Counted before proposing: the tick may tell before the answer.) */
    int before = h.calls[0];
    assert_int_equal(
        tn_meta_propose_isr(m, &req, "r", 0, ps->leader_epoch, pe, isr, 1, true, on_answer), 0);
    assert_true(run_until(&loop, answered, &a));
    assert_int_equal(a.status, 0);
    assert_int_equal(tn_meta_state_pstate(tn_meta_state(m), "r", 0)->partition_epoch, pe + 1);
    w = (wait_told_t){&h, 0, before + 1};
    assert_true(run_until(&loop, told, &w));
    assert_int_equal(h.last[0].partition_epoch, pe + 1);
    a.done = 0;
    assert_int_equal(tn_meta_propose_isr(m, &req, "r", 0, 1, pe, isr, 1, true, on_answer), 0);
    assert_true(run_until(&loop, answered, &a));
    assert_int_equal(a.status, TN_ECHANGED);
    /* Bad arguments are refused at once. */
    assert_int_equal(tn_meta_propose_isr(m, &req, "r", 0, 1, pe, isr, 0, true, on_answer),
                     UV_EINVAL);
    assert_int_equal(tn_meta_propose_isr(m, &req, "", 0, 1, pe, isr, 1, true, on_answer),
                     UV_EINVAL);
    assert_int_equal(tn_meta_force_leader(m, &req, "r", 0, 0, false, on_answer), UV_EINVAL);
    /* A forced election of a non-replica; of the leader itself. */
    a.done = 0;
    assert_int_equal(tn_meta_force_leader(m, &req, "r", 0, 2, false, on_answer), 0);
    assert_true(run_until(&loop, answered, &a));
    assert_int_equal(a.status, UV_EINVAL);
    /* A CRC failure on the only replica: offline, and told so. */
    a.done = 0;
    before = h.calls[1];
    assert_int_equal(tn_meta_mark_corrupt(m, &req, "r", 1, 1, on_answer), 0);
    assert_true(run_until(&loop, answered, &a));
    assert_int_equal(a.status, 0);
    w = (wait_told_t){&h, 1, before + 1};
    assert_true(run_until(&loop, told, &w));
    assert_int_equal(h.last[1].leader, TN_PSTATE_NONE);
    assert_int_equal(tn_meta_state_owner(tn_meta_state(m), "r", 1), 0);
    /* An unclean forced election brings it back. */
    a.done = 0;
    assert_int_equal(tn_meta_force_leader(m, &req, "r", 1, 1, true, on_answer), 0);
    assert_true(run_until(&loop, answered, &a));
    assert_int_equal(a.status, 0);
    assert_int_equal(tn_meta_state_pstate(tn_meta_state(m), "r", 1)->leader, 1);
    assert_true(tn_meta_state_pstate(tn_meta_state(m), "r", 1)->unclean);
    uint32_t epoch0 = tn_meta_state_pstate(tn_meta_state(m), "r", 0)->leader_epoch;
    close_meta(&loop, m);

    /* A restart: the listener is told of every partition once ready; the
     * process's first registration (another boot id, the same disk)
     * fences its old session, so its partitions get a new epoch (the only
     * replica, out of the ISR into the ELR, elected back from it). */
    m = open_meta(&loop, mdir, 0x5eed);
    memset(&h, 0, sizeof(h));
    tn_meta_on_pstate(m, on_pstate, &h);
    w = (wait_told_t){&h, 1, 1};
    assert_true(run_until(&loop, told, &w));
    assert_true(run_until(&loop, restarted_epoch, &(epoch_t){m, epoch0}));
    w = (wait_told_t){&h, 0, h.calls[0] + 1};
    if (h.last[0].leader_epoch <= epoch0)
        assert_true(run_until(&loop, told, &w));
    assert_int_equal(h.last[0].leader, 1);
    assert_true(h.last[0].leader_epoch > epoch0);
    /* A delete: each partition told gone. */
    tn_meta_cmd_t del;
    memset(&del, 0, sizeof(del));
    del.type = TN_MC_TOPIC_DELETE;
    snprintf(del.topic.name, sizeof(del.topic.name), "r");
    assert_int_equal(propose(&loop, m, &del), 0);
    w = (wait_told_t){&h, 1, 2};
    assert_true(run_until(&loop, told, &w));
    assert_true(h.gone[0] && h.gone[1]);
    assert_null(tn_meta_state_pstate(tn_meta_state(m), "r", 0));
    close_meta(&loop, m);

    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_incarnation_file),
        cmocka_unit_test(test_proposals_and_notifications),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
