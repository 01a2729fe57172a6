/* Tests of the tail cache: the per-partition ring (in-order appends,
 * growth, eviction under the byte budget, restart after a gap) and the
 * cold map for records read back from disk. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/log.h"
#include "queue/internal.h"

#include <string.h>

typedef struct {
    tn_broker_t b;
    tn_topic_t t;
    tn_part_t p[2];
} cfx_t;

static void cfx_init(cfx_t *f, uint64_t budget)
{
    memset(f, 0, sizeof(*f));
    f->b.opts.cache_bytes = budget;
    f->t.broker = &f->b;
    for (int i = 0; i < 2; i++) {
        f->p[i].topic = &f->t;
        f->p[i].index = (uint32_t)i;
        tn_u64map_init(&f->p[i].cache);
    }
}

static void cfx_fini(cfx_t *f)
{
    for (int i = 0; i < 2; i++)
        tn__cache_drop_part(&f->p[i]);
    assert_int_equal(f->b.hot_bytes, 0);
    assert_int_equal(f->b.cache_bytes, 0);
}

static tn_msg_t *msg(const char *s)
{
    return tn_msg_new(s, (uint32_t)strlen(s));
}

static void test_ring_in_order_and_growth(void **state)
{
    (void)state;
    cfx_t f;
    cfx_init(&f, 1 << 24);
    char buf[32];
    for (uint64_t off = 100; off < 5100; off++) {
        snprintf(buf, sizeof(buf), "m%llu", (unsigned long long)off);
        tn__cache_append(&f.p[0], off, (int64_t)off, 0, msg(buf), NULL);
    }
    assert_true(f.p[0].ring_cap >= 5000);
    for (uint64_t off = 100; off < 5100; off += 777) {
        tn_centry_t *e = tn__cache_get(&f.p[0], off);
        assert_non_null(e);
        snprintf(buf, sizeof(buf), "m%llu", (unsigned long long)off);
        assert_int_equal(e->body->len, strlen(buf));
        assert_memory_equal(e->body->data, buf, strlen(buf));
        assert_int_equal(e->publish_ns, (int64_t)off);
    }
    assert_null(tn__cache_get(&f.p[0], 99));
    assert_null(tn__cache_get(&f.p[0], 5100));
    cfx_fini(&f);
}

static void test_budget_evicts_oldest_in_turn(void **state)
{
    (void)state;
    cfx_t f;
    cfx_init(&f, 20 * 1024);
    char body[200];
    memset(body, 'x', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    for (uint64_t off = 0; off < 1000; off++)
        tn__cache_append(&f.p[off % 2], off / 2, 0, 0, msg(body), NULL);
    assert_true(f.b.hot_bytes <= 20 * 1024);
    /* The newest of each partition are kept, the oldest gone. */
    assert_non_null(tn__cache_get(&f.p[0], 499));
    assert_non_null(tn__cache_get(&f.p[1], 499));
    assert_null(tn__cache_get(&f.p[0], 0));
    assert_null(tn__cache_get(&f.p[1], 0));
    cfx_fini(&f);
}

static void test_idle_partition_gives_way(void **state)
{
    (void)state;
    cfx_t f;
    cfx_init(&f, 20 * 1024);
    char body[200];
    memset(body, 'x', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    for (uint64_t off = 0; off < 200; off++)
        tn__cache_append(&f.p[0], off, 0, 0, msg(body), NULL);
    /* p0 went quiet; p1 is busy: p1 keeps everything it appends while p0
     * has entries to give. */
    for (uint64_t off = 0; off < 50; off++)
        tn__cache_append(&f.p[1], off, 0, 0, msg(body), NULL);
    for (uint64_t off = 0; off < 50; off++)
        assert_non_null(tn__cache_get(&f.p[1], off));
    assert_null(tn__cache_get(&f.p[0], 60));
    assert_non_null(tn__cache_get(&f.p[0], 199));
    assert_true(f.b.hot_bytes <= 20 * 1024);
    cfx_fini(&f);
}

/* A ring that eviction empties gives its array back, not only its
 * entries: the quiet partition's array shrinks with what it holds and is
 * freed once it holds nothing; the newest entries it keeps meanwhile stay
 * readable after each move. */
static void test_idle_ring_gives_back_its_array(void **state)
{
    (void)state;
    cfx_t f;
    char body[200];
    memset(body, 'x', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    uint64_t per = sizeof(tn_centry_t) + 16 + strlen(body);
    cfx_init(&f, 20000 * per);
    for (uint64_t off = 0; off < 20000; off++)
        tn__cache_append(&f.p[0], off, (int64_t)off, 0, msg(body), NULL);
    assert_int_equal(f.p[0].ring_cap, 32768);
    /* p1 takes the budget over, a quarter of it first. */
    for (uint64_t off = 0; off < 15500; off++)
        tn__cache_append(&f.p[1], off, 0, 0, msg(body), NULL);
    uint64_t left = f.p[0].ring_hi - f.p[0].ring_lo;
    assert_int_equal(left, 4500);
    assert_int_equal(f.p[0].ring_cap, 16384); /* halved once it fell to a quarter */
    for (uint64_t off = 20000 - left; off < 20000; off += 97) {
        tn_centry_t *e = tn__cache_get(&f.p[0], off);
        assert_non_null(e);
        assert_int_equal(e->publish_ns, (int64_t)off);
        assert_int_equal(e->offset, off);
    }
    assert_null(tn__cache_get(&f.p[0], 20000 - left - 1));
    for (uint64_t off = 15500; off < 20000; off++)
        tn__cache_append(&f.p[1], off, 0, 0, msg(body), NULL);
    assert_int_equal(f.p[0].ring_hi, f.p[0].ring_lo);
    assert_null(f.p[0].ring);
    assert_int_equal(f.p[0].ring_cap, 0);
    /* Appended to again, it starts a new ring. */
    tn__cache_append(&f.p[0], 20000, 0, 0, msg(body), NULL);
    assert_non_null(tn__cache_get(&f.p[0], 20000));
    cfx_fini(&f);
}

static void test_gap_restarts_ring(void **state)
{
    (void)state;
    cfx_t f;
    cfx_init(&f, 1 << 20);
    tn__cache_append(&f.p[0], 10, 0, 0, msg("a"), NULL);
    tn__cache_append(&f.p[0], 11, 0, 0, msg("b"), NULL);
    tn__cache_append(&f.p[0], 50, 0, 0, msg("c"), NULL); /* offsets 12..49 were skipped */
    assert_null(tn__cache_get(&f.p[0], 10));
    assert_non_null(tn__cache_get(&f.p[0], 50));
    assert_int_equal(f.p[0].ring_lo, 50);
    cfx_fini(&f);
}

static void test_cold_map(void **state)
{
    (void)state;
    cfx_t f;
    cfx_init(&f, 4 * 4096); /* cold budget: a quarter */
    char body[512];
    memset(body, 'y', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    for (uint64_t off = 0; off < 40; off++)
        assert_int_equal(tn__cache_put(&f.p[1], off, 0, 0, msg(body), NULL, false), 0);
    assert_true(f.b.cache_bytes <= 4096 + 1024);
    assert_non_null(tn__cache_get(&f.p[1], 39));
    assert_null(tn__cache_get(&f.p[1], 0));
    /* A gap entry: no body. */
    assert_int_equal(tn__cache_put(&f.p[1], 100, 0, 0, NULL, NULL, false), 0);
    tn_centry_t *e = tn__cache_get(&f.p[1], 100);
    assert_non_null(e);
    assert_null(e->body);
    /* Replacing an entry keeps one. */
    assert_int_equal(tn__cache_put(&f.p[1], 39, 0, 0, msg("z"), NULL, false), 0);
    assert_int_equal(tn__cache_get(&f.p[1], 39)->body->len, 1);
    cfx_fini(&f);
}

static void test_alloc_failure_drops_not_crashes(void **state)
{
    (void)state;
    cfx_t f;
    cfx_init(&f, 1 << 20);
    for (int fail = 0; fail < 6; fail++) {
        tn_alloc_fail_after(fail);
        tn_msg_t *m = msg("q");
        if (m != NULL) {
            /* Each call takes over one reference, even when it fails. */
            tn_msg_ref(m);
            tn__cache_append(&f.p[0], (uint64_t)fail, 0, 0, m, NULL);
            tn__cache_put(&f.p[1], (uint64_t)fail, 0, 0, m, NULL, false);
        }
        tn_alloc_fail_after(-1);
    }
    cfx_fini(&f);
}

int main(void)
{
    tn_log_level = TN_LOG_WARN;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_in_order_and_growth),
        cmocka_unit_test(test_budget_evicts_oldest_in_turn),
        cmocka_unit_test(test_idle_partition_gives_way),
        cmocka_unit_test(test_idle_ring_gives_back_its_array),
        cmocka_unit_test(test_gap_restarts_ring),
        cmocka_unit_test(test_cold_map),
        cmocka_unit_test(test_alloc_failure_drops_not_crashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
