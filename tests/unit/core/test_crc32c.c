/* CRC32C: published check values for both implementations, agreement
 * between them on random data at every alignment, chaining, and the patch
 * of a few changed bytes against recomputing. */
#include "core/platform.h"

#include "testutil.h"

#include "core/crc32c.h"

#include <string.h>

static void check_values(uint32_t (*fn)(uint32_t, const void *, size_t))
{
    /* RFC 3720 (iSCSI) appendix B.4 test vectors, and the usual "123456789". */
    unsigned char buf[48];
    assert_int_equal(fn(0, "123456789", 9), 0xE3069283u);
    memset(buf, 0, 32);
    assert_int_equal(fn(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, 32);
    assert_int_equal(fn(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(fn(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    assert_int_equal(fn(0, buf, 32), 0x113FDB5Cu);
    assert_int_equal(fn(0, "", 0), 0u);
}

static void test_sw_check_values(void **state)
{
    (void)state;
    check_values(tn_crc32c_sw);
}

static void test_hw_check_values(void **state)
{
    (void)state;
    if (!tn_crc32c_hw_available())
        skip();
    check_values(tn_crc32c_hw);
}

static void test_dispatch_check_values(void **state)
{
    (void)state;
    check_values(tn_crc32c);
}

static void test_sw_hw_agree_and_chain(void **state)
{
    (void)state;
    unsigned char buf[4096 + 16];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245 + 12345;
        buf[i] = (unsigned char)(x >> 16);
    }
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len < 300; len += 7) {
            uint32_t sw = tn_crc32c_sw(0, buf + off, len);
            if (tn_crc32c_hw_available())
                assert_int_equal(sw, tn_crc32c_hw(0, buf + off, len));
            /* Chaining at any split gives the same value. */
            size_t cut = len / 3;
            uint32_t part = tn_crc32c(0, buf + off, cut);
            assert_int_equal(tn_crc32c(part, buf + off + cut, len - cut), sw);
        }
    }
}

static void test_patch_matches_recompute(void **state)
{
    (void)state;
    static unsigned char buf[70000];
    uint32_t x = 777;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245 + 12345;
        buf[i] = (unsigned char)(x >> 16);
    }
    size_t lens[] = {1, 4, 9, 44, 300, 4096, 65537, sizeof(buf)};
    for (size_t l = 0; l < TN_ARRAY_SIZE(lens); l++) {
        size_t len = lens[l];
        for (size_t n = 1; n <= 8 && n <= len; n += 3) {
            size_t positions[] = {0, len / 2, len - n};
            for (size_t q = 0; q < TN_ARRAY_SIZE(positions); q++) {
                size_t at = positions[q] + n <= len ? positions[q] : len - n;
                unsigned char was[8], now[8];
                memcpy(was, buf + at, n);
                for (size_t i = 0; i < n; i++) {
                    x = x * 1103515245 + 12345;
                    now[i] = (unsigned char)(x >> 16);
                }
                uint32_t before = tn_crc32c(0, buf, len);
                memcpy(buf + at, now, n);
                uint32_t want = tn_crc32c(0, buf, len);
                assert_int_equal(tn_crc32c_patch(before, was, now, n, len - at - n), want);
                /* A CRC that did not match before still does not after. */
                assert_int_not_equal(tn_crc32c_patch(before ^ 1, was, now, n, len - at - n), want);
                memcpy(buf + at, was, n);
            }
        }
    }
    /* No change: the same CRC. */
    assert_int_equal(tn_crc32c_patch(0xdeadbeefu, "abcd", "abcd", 4, 1000), 0xdeadbeefu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sw_check_values),
        cmocka_unit_test(test_hw_check_values),
        cmocka_unit_test(test_dispatch_check_values),
        cmocka_unit_test(test_sw_hw_agree_and_chain),
        cmocka_unit_test(test_patch_matches_recompute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
