/* The committer: rounds respect the request and byte limits (a request
 * that would overflow the byte limit waits for the next round, one larger
 * than the limit goes alone), keep submission order, start at once for an
 * urgent request, run ticks when asked, and drain the queue on stop. The process function here
 * records rounds instead of writing anything. */
#include "core/platform.h"

#include "testutil.h"

#include "storage/commit.h"

#include <string.h>

#define MAXR 64

typedef struct {
    tn__sreq_t s;
    int id;
} req_t;

static uv_mutex_t mu;
static uv_sem_t gate; /* the first round waits here */
static bool block_first;
static int rounds[MAXR]; /* size of each round */
static int order[1024];  /* ids in processing order */
static int nrounds, nprocessed;
static int ticks;
static bool in_first; /* the first round is being processed (and held) */

static void process(tn__committer_t *c, tn__sreq_t *round)
{
    (void)c;
    uv_mutex_lock(&mu);
    bool wait = block_first && nrounds == 0;
    in_first = true;
    uv_mutex_unlock(&mu);
    if (wait)
        uv_sem_wait(&gate);
    int n = 0;
    uv_mutex_lock(&mu);
    for (tn__sreq_t *s = round; s != NULL; s = s->next, n++)
        order[nprocessed++] = ((req_t *)s)->id;
    if (nrounds < MAXR)
        rounds[nrounds] = n;
    nrounds++;
    uv_mutex_unlock(&mu);
}

static int64_t tick(tn__committer_t *c, int64_t now)
{
    (void)c;
    (void)now;
    uv_mutex_lock(&mu);
    ticks++;
    uv_mutex_unlock(&mu);
    return 0;
}

static void reset(tn__committer_t *c, uint32_t max_reqs, uint64_t max_bytes)
{
    memset(c, 0, sizeof(*c));
    c->name = "test";
    c->max_reqs = max_reqs;
    c->max_bytes = max_bytes;
    c->max_delay_ns = 1000000;
    c->process = process;
    c->tick = tick;
    nrounds = nprocessed = ticks = 0;
    in_first = false;
    memset(rounds, 0, sizeof(rounds));
}

static int group_setup(void **state)
{
    (void)state;
    uv_mutex_init(&mu);
    return uv_sem_init(&gate, 0);
}

static void wait_processed(int n)
{
    for (int i = 0; i < 100000; i++) {
        uv_mutex_lock(&mu);
        int done = nprocessed;
        uv_mutex_unlock(&mu);
        if (done >= n)
            return;
        uv_sleep(1);
    }
    fail_msg("only %d of %d requests processed", nprocessed, n);
}

static void wait_first_round(void)
{
    for (int i = 0; i < 100000; i++) {
        uv_mutex_lock(&mu);
        bool started = in_first;
        uv_mutex_unlock(&mu);
        if (started)
            return;
        uv_sleep(1);
    }
    fail_msg("the first round never started");
}

static void test_request_limit_and_order(void **state)
{
    (void)state;
    tn__committer_t c;
    reset(&c, 4, 1 << 20);
    block_first = true;
    assert_int_equal(tn__committer_start(&c), 0);
    static req_t reqs[11];
    reqs[0] = (req_t){{0}, 0};
    tn__committer_submit(&c, &reqs[0].s);
    wait_first_round();
    /* While round 1 is held, ten more queue up. */
    for (int i = 1; i < 11; i++) {
        reqs[i] = (req_t){{0}, i};
        reqs[i].s.bytes = 10;
        tn__committer_submit(&c, &reqs[i].s);
    }
    uv_sem_post(&gate);
    wait_processed(11);
    tn__committer_stop(&c);
    block_first = false;
    for (int i = 0; i < 11; i++)
        assert_int_equal(order[i], i);
    assert_int_equal(rounds[0], 1);
    for (int r = 1; r < nrounds; r++)
        assert_true(rounds[r] >= 1 && rounds[r] <= 4);
    assert_int_equal(rounds[1], 4);
    assert_int_equal(rounds[2], 4);
    assert_int_equal(atomic_load(&c.requests), 11);
}

static void test_byte_limit_carries_over(void **state)
{
    (void)state;
    tn__committer_t c;
    reset(&c, 64, 1000);
    block_first = true;
    assert_int_equal(tn__committer_start(&c), 0);
    static req_t reqs[8];
    for (int i = 0; i < 8; i++) {
        reqs[i] = (req_t){{0}, i};
        /* #5 alone is larger than a whole round. */
        reqs[i].s.bytes = i == 5 ? 5000 : 400;
        tn__committer_submit(&c, &reqs[i].s);
        if (i == 0)
            wait_first_round();
    }
    uv_sem_post(&gate);
    wait_processed(8);
    tn__committer_stop(&c);
    block_first = false;
    /* Rounds: [0] (held), [1,2] (800; a third would pass 1000),
     * [3,4], [5] (oversize, alone), [6,7]. */
    int expect[] = {1, 2, 2, 1, 2};
    assert_int_equal(nrounds, 5);
    for (int r = 0; r < 5; r++)
        assert_int_equal(rounds[r], expect[r]);
}

/* After a round of three the committer waits for a cohort of three (up to
 * max_delay, here far longer than the test may take); an urgent request
 * ends that wait, and the round it joins, at once. */
static void test_urgent_ends_the_wait(void **state)
{
    (void)state;
    tn__committer_t c;
    reset(&c, 64, 1 << 20);
    c.max_delay_ns = 1000 * (int64_t)1000000000;
    block_first = true;
    assert_int_equal(tn__committer_start(&c), 0);
    static req_t reqs[6];
    for (int i = 0; i < 6; i++)
        reqs[i] = (req_t){{0}, i};
    tn__committer_submit(&c, &reqs[0].s);
    wait_first_round();
    for (int i = 1; i < 4; i++)
        tn__committer_submit(&c, &reqs[i].s);
    uv_sem_post(&gate);
    wait_processed(4);
    tn__committer_submit(&c, &reqs[4].s);        /* one of three: waits */
    tn__committer_submit_urgent(&c, &reqs[5].s); /* ... no longer */
    wait_processed(6);
    tn__committer_stop(&c);
    block_first = false;
    int expect[] = {1, 3, 2};
    assert_int_equal(nrounds, 3);
    for (int r = 0; r < 3; r++)
        assert_int_equal(rounds[r], expect[r]);
    for (int i = 0; i < 6; i++)
        assert_int_equal(order[i], i);
}

static void test_ticks_and_drain_on_stop(void **state)
{
    (void)state;
    tn__committer_t c;
    reset(&c, 64, 1 << 20);
    assert_int_equal(tn__committer_start(&c), 0);
    tn__committer_wake_at(&c, 0); /* due at once (0 is not "never") */
    for (int i = 0; i < 100000; i++) {
        uv_mutex_lock(&mu);
        int t = ticks;
        uv_mutex_unlock(&mu);
        if (t > 0)
            break;
        uv_sleep(1);
    }
    assert_true(ticks >= 1);
    static req_t reqs[100];
    for (int i = 0; i < 100; i++) {
        reqs[i] = (req_t){{0}, i};
        tn__committer_submit(&c, &reqs[i].s);
    }
    tn__committer_stop(&c); /* everything queued is processed first */
    assert_int_equal(nprocessed, 100);
    for (int i = 0; i < 100; i++)
        assert_int_equal(order[i], i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_limit_and_order),
        cmocka_unit_test(test_byte_limit_carries_over),
        cmocka_unit_test(test_urgent_ends_the_wait),
        cmocka_unit_test(test_ticks_and_drain_on_stop),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
