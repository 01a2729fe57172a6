/* Channel cursors: applying WAL records and the checkpoint codec. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "storage/cursor.h"

#include <string.h>

static tn_walrec_t fin(uint64_t off)
{
    return (tn_walrec_t){TN_WAL_FIN, off, 0, 0, 0};
}

static tn_walrec_t req(uint64_t off, int64_t due, uint32_t attempts)
{
    return (tn_walrec_t){TN_WAL_REQ, off, due, attempts, 0};
}

static void test_apply(void **state)
{
    (void)state;
    tn_cursor_t c;
    tn_cursor_init(&c, 10);
    assert_true(tn_cursor_is_settled(&c, 9));
    assert_false(tn_cursor_is_settled(&c, 10));
    tn_walrec_t r;
    r = fin(12);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    r = fin(11);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.frontier, 10);
    assert_int_equal(c.nsettled, 2);
    r = fin(10);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.frontier, 13); /* 10, 11, 12 all settled */
    assert_int_equal(c.nsettled, 0);
    assert_int_equal(c.finish_count, 3);
    r = fin(11); /* idempotent */
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.finish_count, 3);

    r = req(20, 5000, 2);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    r = req(15, 6000, 1);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    r = req(20, 7000, 3);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.nrequeued, 2);
    assert_int_equal(c.requeue_count, 3);
    /* The same record again (a follower's log written again by the
     * leader's retry): counted once. */
    r = req(20, 7000, 3);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.requeue_count, 3);
    const tn_requeue_t *q = tn_cursor_requeued(&c, 20);
    assert_non_null(q);
    assert_int_equal(q->due_ms, 7000);
    assert_int_equal(q->attempts, 3);
    r = fin(20); /* settling drops the requeue */
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_null(tn_cursor_requeued(&c, 20));
    r = req(20, 1, 1); /* requeue of a settled offset: ignored */
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_null(tn_cursor_requeued(&c, 20));

    r = (tn_walrec_t){TN_WAL_PAUSE, 0, 0, 0, 1};
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_true(c.paused);
    r = (tn_walrec_t){TN_WAL_TIMEOUTS, 0, 0, 0, 9};
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    r = (tn_walrec_t){TN_WAL_TIMEOUTS, 0, 0, 0, 4}; /* absolute: never goes back */
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.timeout_count, 9);

    r = fin(21);
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    r = (tn_walrec_t){TN_WAL_EMPTY, 18, 0, 0, 0};
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.frontier, 18);
    assert_null(tn_cursor_requeued(&c, 15));
    r = (tn_walrec_t){TN_WAL_EMPTY, 20, 0, 0, 0};
    assert_int_equal(tn_cursor_apply(&c, &r), 0);
    assert_int_equal(c.frontier, 22); /* 20 and 21 were settled already */

    r = (tn_walrec_t){99, 0, 0, 0, 0};
    assert_int_equal(tn_cursor_apply(&c, &r), UV_EINVAL);
    tn_cursor_fini(&c);
}

static void test_checkpoint_codec(void **state)
{
    (void)state;
    tn_cursor_t c;
    tn_cursor_init(&c, 100);
    for (uint64_t off = 102; off < 200; off += 3) {
        tn_walrec_t r = fin(off);
        assert_int_equal(tn_cursor_apply(&c, &r), 0);
    }
    for (uint64_t off = 101; off < 150; off += 5) {
        tn_walrec_t r = req(off, (int64_t)off * 10, (uint32_t)off % 7);
        assert_int_equal(tn_cursor_apply(&c, &r), 0);
    }
    c.paused = true;
    c.seq = 77;
    c.timeout_count = 5;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_cursor_encode(&c, &b), 0);
    tn_cursor_t d;
    assert_int_equal(tn_cursor_decode(b.base, b.len, &d), 0);
    assert_int_equal(d.seq, 77);
    assert_int_equal(d.frontier, c.frontier);
    assert_int_equal(d.nsettled, c.nsettled);
    assert_memory_equal(d.settled, c.settled, c.nsettled * 8);
    assert_int_equal(d.nrequeued, c.nrequeued);
    for (uint32_t i = 0; i < c.nrequeued; i++) {
        assert_int_equal(d.requeued[i].offset, c.requeued[i].offset);
        assert_int_equal(d.requeued[i].due_ms, c.requeued[i].due_ms);
        assert_int_equal(d.requeued[i].attempts, c.requeued[i].attempts);
    }
    assert_true(d.paused);
    assert_int_equal(d.finish_count, c.finish_count);
    assert_int_equal(d.requeue_count, c.requeue_count);
    assert_int_equal(d.timeout_count, 5);
    tn_cursor_fini(&d);

    /* Any damaged byte is refused. */
    for (size_t i = 0; i < b.len; i++) {
        b.base[i] ^= 0x10;
        assert_int_equal(tn_cursor_decode(b.base, b.len, &d), TN_ECORRUPT);
        b.base[i] ^= 0x10;
    }
    assert_int_equal(tn_cursor_decode(b.base, b.len - 1, &d), TN_ECORRUPT);
    assert_int_equal(tn_cursor_decode(b.base, 10, &d), TN_ECORRUPT);
    tn_buf_fini(&b);
    tn_cursor_fini(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_checkpoint_codec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
