/* WAL frames: codec, and replay onto a checkpoint (checkpoint skip,
 * sequence gaps, torn tails, damage below the durable mark). */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "storage/cursor.h"
#include "storage/wal.h"

#include <string.h>

static tn_walrec_t fin(uint64_t off)
{
    return (tn_walrec_t){TN_WAL_FIN, off, 0, 0, 0};
}

static tn_walrec_t req(uint64_t off, int64_t due, uint32_t attempts)
{
    return (tn_walrec_t){TN_WAL_REQ, off, due, attempts, 0};
}

/* Build a WAL image of frames seq from..from+n-1 (FIN of offset seq). */
static size_t build_wal(unsigned char *buf, uint64_t from, int n, uint32_t mark)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        tn_walrec_t r = fin(from + (uint64_t)i);
        len += tn_wal_encode(buf + len, &r, from + (uint64_t)i, mark);
    }
    return len;
}

static void test_frame_codec(void **state)
{
    (void)state;
    unsigned char buf[TN_WAL_MAX_FRAME];
    tn_walrec_t in[] = {fin(5),
                        req(6, -3, 4),
                        {TN_WAL_PAUSE, 0, 0, 0, 1},
                        {TN_WAL_EMPTY, 9, 0, 0, 0},
                        {TN_WAL_TIMEOUTS, 0, 0, 0, 12345}};
    for (size_t i = 0; i < TN_ARRAY_SIZE(in); i++) {
        size_t n = tn_wal_encode(buf, &in[i], 1000 + i, 64);
        assert_true(n > 0);
        tn_walrec_t out;
        uint64_t seq;
        uint32_t mark;
        size_t flen;
        assert_int_equal(tn_wal_decode(buf, n, &out, &seq, &mark, &flen), 0);
        assert_int_equal(flen, n);
        assert_int_equal(seq, 1000 + i);
        assert_int_equal(mark, 64);
        assert_int_equal(out.op, in[i].op);
        assert_int_equal(out.offset, in[i].offset);
        assert_int_equal(out.due_ms, in[i].due_ms);
        assert_int_equal(out.attempts, in[i].attempts);
        assert_int_equal(out.value, in[i].value);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(tn_wal_decode(buf, k, &out, &seq, &mark, &flen), TN_ESHORT);
        for (size_t k = 0; k < n; k++) {
            buf[k] ^= 0x04;
            int rc = tn_wal_decode(buf, n, &out, &seq, &mark, &flen);
            assert_true(rc == TN_ECORRUPT || rc == TN_ESHORT);
            buf[k] ^= 0x04;
        }
    }
    tn_walrec_t bad = {42, 0, 0, 0, 0};
    assert_int_equal(tn_wal_encode(buf, &bad, 1, 0), 0);
}

static void test_replay(void **state)
{
    (void)state;
    unsigned char buf[64 * TN_WAL_MAX_FRAME];
    tn_cursor_t c;
    tn_wal_replay_t r;

    /* Frames at or below the checkpoint's seq are skipped. */
    size_t len = build_wal(buf, 1, 10, 0);
    tn_cursor_init(&c, 0);
    c.seq = 4;
    c.frontier = 0;
    assert_int_equal(tn_wal_replay(buf, len, &c, &r), 0);
    assert_int_equal(r.frames, 10);
    assert_int_equal(r.applied, 6);
    assert_int_equal(c.seq, 10);
    assert_int_equal(c.finish_count, 6);
    assert_int_equal(r.tail, 0);
    tn_cursor_fini(&c);

    /* A gap between the checkpoint and the first frame is corruption. */
    len = build_wal(buf, 7, 3, 0);
    tn_cursor_init(&c, 0);
    c.seq = 4;
    assert_int_equal(tn_wal_replay(buf, len, &c, &r), TN_ECORRUPT);
    tn_cursor_fini(&c);

    /* A gap between frames is corruption. */
    len = build_wal(buf, 1, 3, 0);
    len += build_wal(buf + len, 5, 2, 0);
    tn_cursor_init(&c, 0);
    assert_int_equal(tn_wal_replay(buf, len, &c, &r), TN_ECORRUPT);
    tn_cursor_fini(&c);

    /* A torn last frame, at every cut. */
    size_t full = build_wal(buf, 1, 5, 0);
    size_t four = full - (TN_WAL_HDR + 8);
    for (size_t cut = four; cut < full; cut++) {
        tn_cursor_init(&c, 0);
        assert_int_equal(tn_wal_replay(buf, cut, &c, &r), 0);
        assert_int_equal(r.valid_len, four);
        assert_int_equal(r.tail, cut == four ? 0 : TN_ESHORT);
        assert_int_equal(c.seq, 4);
        assert_false(r.durable_damage);
        tn_cursor_fini(&c);
    }

    /* A bad frame followed by one that says the bad one was durable. */
    len = build_wal(buf, 1, 4, 0);
    size_t second = TN_WAL_HDR + 8;
    len += build_wal(buf + len, 5, 1, (uint32_t)len);
    buf[second + 22] ^= 1;
    tn_cursor_init(&c, 0);
    assert_int_equal(tn_wal_replay(buf, len, &c, &r), 0);
    assert_int_equal(r.tail, TN_ECORRUPT);
    assert_true(r.durable_damage);
    assert_int_equal(r.valid_len, second);
    tn_cursor_fini(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_codec),
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
