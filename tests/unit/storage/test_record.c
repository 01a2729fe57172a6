/* The record codec: round trips, and detection of every damaged byte,
 * short input and unknown flags. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "storage/record.h"

#include <string.h>

static size_t build(unsigned char *buf, uint64_t offset, const char *key, const char *body,
                    uint16_t flags)
{
    tn_rec_hdr_t h = {offset,
                      1700000000123456789LL,
                      1700000001000LL,
                      (uint32_t)strlen(body),
                      4096,
                      (uint16_t)strlen(key),
                      flags};
    tn_rec_encode(buf, &h, key, body);
    memcpy(buf + TN_REC_HDR, key, h.key_len);
    memcpy(buf + TN_REC_HDR + h.key_len, body, h.body_len);
    return (size_t)tn_rec_size(&h);
}

static void test_round_trip(void **state)
{
    (void)state;
    unsigned char buf[256];
    size_t n = build(buf, 42, "user-7", "hello, world", TN_REC_F_MORE);
    assert_int_equal(n, TN_REC_HDR + 6 + 12);
    tn_rec_t rec;
    assert_int_equal(tn_rec_decode(buf, n, &rec), 0);
    assert_int_equal(rec.h.offset, 42);
    assert_int_equal(rec.h.publish_ns, 1700000000123456789LL);
    assert_int_equal(rec.h.deliver_at_ms, 1700000001000LL);
    assert_int_equal(rec.h.sync_mark, 4096);
    assert_int_equal(rec.h.flags, TN_REC_F_MORE);
    assert_int_equal(rec.h.key_len, 6);
    assert_memory_equal(rec.key, "user-7", 6);
    assert_int_equal(rec.h.body_len, 12);
    assert_memory_equal(rec.body, "hello, world", 12);

    /* Empty key and body. */
    n = build(buf, 0, "", "", 0);
    assert_int_equal(n, TN_REC_HDR);
    assert_int_equal(tn_rec_decode(buf, n, &rec), 0);
    assert_int_equal(rec.h.body_len, 0);
}

static void test_every_byte_flip_detected(void **state)
{
    (void)state;
    unsigned char buf[256];
    size_t n = build(buf, 7, "k", "some body bytes", 0);
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1 << bit);
            tn_rec_t rec;
            int rc = tn_rec_decode(buf, n, &rec);
            /* A flip in a length field may make the record look longer
             * (short) instead of corrupt; it must never decode. */
            if (rc != TN_ECORRUPT && rc != TN_ESHORT)
                fail_msg("flip of bit %d in byte %zu decoded (rc %d)", bit, i, rc);
            buf[i] ^= (unsigned char)(1 << bit);
        }
    }
}

static void test_short_and_unknown_flags(void **state)
{
    (void)state;
    unsigned char buf[256];
    size_t n = build(buf, 1, "", "abc", 0);
    tn_rec_t rec;
    for (size_t len = 0; len < n; len++)
        assert_int_equal(tn_rec_decode(buf, len, &rec), TN_ESHORT);
    n = build(buf, 1, "", "abc", 0x8000);
    assert_int_equal(tn_rec_decode(buf, n, &rec), TN_ECORRUPT);
    tn_rec_hdr_t h;
    memset(buf, 0, sizeof(buf));
    assert_int_equal(tn_rec_decode_hdr(buf, TN_REC_HDR, &h), TN_ECORRUPT);
}

static void test_set_sync_mark(void **state)
{
    (void)state;
    unsigned char buf[256], want[256];
    size_t n = build(buf, 9, "key", "a body of some length", 0);
    tn_rec_set_sync_mark(buf, 123456789);
    tn_rec_t rec;
    assert_int_equal(tn_rec_decode(buf, n, &rec), 0);
    assert_int_equal(rec.h.sync_mark, 123456789);
    /* The same bytes as encoding the record with that mark from scratch. */
    tn_rec_hdr_t h = rec.h;
    tn_rec_encode(want, &h, rec.key, rec.body);
    memcpy(want + TN_REC_HDR, buf + TN_REC_HDR, n - TN_REC_HDR);
    assert_memory_equal(buf, want, n);
    /* A record damaged before the mark is set stays damaged. */
    buf[n - 1] ^= 0x10;
    tn_rec_set_sync_mark(buf, 7);
    assert_int_equal(tn_rec_decode(buf, n, &rec), TN_ECORRUPT);
    /* Empty key and body. */
    n = build(buf, 0, "", "", 0);
    tn_rec_set_sync_mark(buf, 1);
    assert_int_equal(tn_rec_decode(buf, n, &rec), 0);
    assert_int_equal(rec.h.sync_mark, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_every_byte_flip_detected),
        cmocka_unit_test(test_short_and_unknown_flags),
        cmocka_unit_test(test_set_sync_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
