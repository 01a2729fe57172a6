/* NSQ compressed streams: round trips at every piece size, streams made
 * by other implementations (Python's zlib; a Snappy frame whose CRC was
 * computed independently), every kind of bad Snappy chunk, sync-flush
 * boundaries, and output caps against decompression bombs. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "proto/nsq/compress.h"

#include <stdlib.h>
#include <string.h>

static char *sample(size_t n, bool compressible)
{
    char *p = malloc(n + 1);
    uint32_t x = 7;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245 + 12345;
        p[i] = compressible ? (char)('a' + (i / 7) % 5) : (char)(x >> 16);
    }
    return p;
}

/* Decode `in` fed in pieces of `piece` bytes, draining with a cap. */
static void snappy_decode_all(const tn_buf_t *in, size_t piece, tn_buf_t *out)
{
    tn_snappy_dec_t d;
    tn_snappy_dec_init(&d);
    for (size_t off = 0; off < in->len; off += piece) {
        size_t n = TN_MIN(piece, in->len - off);
        bool more;
        assert_int_equal(tn_snappy_decode(&d, in->base + off, n, out, 100000, &more), 0);
        while (more)
            assert_int_equal(tn_snappy_decode(&d, NULL, 0, out, 100000, &more), 0);
    }
    tn_snappy_dec_fini(&d);
}

static void test_snappy_round_trips(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, 100, 65536, 65537, 300000};
    for (size_t s = 0; s < TN_ARRAY_SIZE(sizes); s++) {
        for (int comp = 0; comp < 2; comp++) {
            char *data = sample(sizes[s], comp);
            tn_snappy_enc_t e;
            tn_snappy_enc_init(&e);
            tn_buf_t enc, dec;
            tn_buf_init(&enc);
            tn_buf_init(&dec);
            /* Written in two calls: one stream identifier only. */
            size_t half = sizes[s] / 2;
            assert_int_equal(tn_snappy_encode(&e, data, half, &enc), 0);
            assert_int_equal(tn_snappy_encode(&e, data + half, sizes[s] - half, &enc), 0);
            assert_memory_equal(enc.base, "\xff\x06\x00\x00sNaPpY", 10);
            if (comp && sizes[s] > 1000)
                assert_true(enc.len < sizes[s] / 2);
            size_t pieces[] = {1, 7, 4096, 1 << 20};
            for (size_t p = 0; p < TN_ARRAY_SIZE(pieces); p++) {
                if (pieces[p] == 1 && sizes[s] > 100000)
                    continue; /* byte at a time is slow and proves nothing more */
                tn_buf_reset(&dec);
                snappy_decode_all(&enc, pieces[p], &dec);
                assert_int_equal(dec.len, sizes[s]);
                if (sizes[s] > 0)
                    assert_memory_equal(dec.base, data, sizes[s]);
            }
            tn_buf_fini(&enc);
            tn_buf_fini(&dec);
            tn_snappy_enc_fini(&e);
            free(data);
        }
    }
}

static int snappy_one(const char *bytes, size_t len, tn_buf_t *out)
{
    tn_snappy_dec_t d;
    tn_snappy_dec_init(&d);
    bool more;
    int rc = tn_snappy_decode(&d, bytes, len, out, 1 << 20, &more);
    tn_snappy_dec_fini(&d);
    return rc;
}

static void test_snappy_foreign_and_bad(void **state)
{
    (void)state;
    tn_buf_t out;
    tn_buf_init(&out);
    /* Stream identifier, a padding chunk (skipped), an uncompressed chunk
     * "hello" whose masked CRC32C (0x191c1fbb) was computed elsewhere. */
    static const char good[] = "\xff\x06\x00\x00sNaPpY"
                               "\xfe\x02\x00\x00\x00\x00"
                               "\x01\x09\x00\x00\xbb\x1f\x1c\x19hello";
    assert_int_equal(snappy_one(good, sizeof(good) - 1, &out), 0);
    assert_int_equal(out.len, 5);
    assert_memory_equal(out.base, "hello", 5);

    char bad[64];
    memcpy(bad, good, sizeof(good));
    bad[16 + 4] ^= 1; /* CRC */
    tn_buf_reset(&out);
    assert_int_equal(snappy_one(bad, sizeof(good) - 1, &out), TN_ECORRUPT);
    /* No stream identifier first. */
    assert_int_equal(snappy_one(good + 16, sizeof(good) - 17, &out), TN_ECORRUPT);
    /* A reserved, unskippable chunk type. */
    memcpy(bad, good, sizeof(good));
    bad[10] = 0x02;
    assert_int_equal(snappy_one(bad, sizeof(good) - 1, &out), TN_ECORRUPT);
    /* A wrong identifier. */
    memcpy(bad, good, sizeof(good));
    bad[4] = 'x';
    assert_int_equal(snappy_one(bad, sizeof(good) - 1, &out), TN_ECORRUPT);
    /* A chunk longer than any valid one. */
    static const char huge[] = "\xff\x06\x00\x00sNaPpY\x00\xff\xff\xff";
    assert_int_equal(snappy_one(huge, sizeof(huge) - 1, &out), TN_ECORRUPT);
    /* A compressed chunk that is not snappy data. */
    static const char junk[] =
        "\xff\x06\x00\x00sNaPpY\x00\x08\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff";
    assert_int_equal(snappy_one(junk, sizeof(junk) - 1, &out), TN_ECORRUPT);
    tn_buf_fini(&out);
}

static void test_snappy_output_cap(void **state)
{
    (void)state;
    char *data = sample(640 * 1024, true);
    tn_snappy_enc_t e;
    tn_snappy_enc_init(&e);
    tn_buf_t enc, dec;
    tn_buf_init(&enc);
    tn_buf_init(&dec);
    assert_int_equal(tn_snappy_encode(&e, data, 640 * 1024, &enc), 0);
    tn_snappy_dec_t d;
    tn_snappy_dec_init(&d);
    bool more;
    assert_int_equal(tn_snappy_decode(&d, enc.base, enc.len, &dec, 100000, &more), 0);
    assert_true(more);
    assert_true(dec.len >= 100000 && dec.len < 100000 + 65536 + 1);
    int calls = 1;
    while (more) {
        size_t before = dec.len;
        assert_int_equal(tn_snappy_decode(&d, NULL, 0, &dec, 100000, &more), 0);
        /* A call stops at the first chunk boundary past the cap. */
        assert_true(dec.len - before < 100000 + 65536);
        calls++;
    }
    assert_int_equal(dec.len, 640 * 1024);
    assert_memory_equal(dec.base, data, dec.len);
    assert_true(calls >= 4); /* 640 KiB at most ~160 KiB a call */
    tn_snappy_dec_fini(&d);
    tn_snappy_enc_fini(&e);
    tn_buf_fini(&enc);
    tn_buf_fini(&dec);
    free(data);
}

static void test_deflate(void **state)
{
    (void)state;
    /* From Python: zlib.compressobj(6, DEFLATED, -15), then Z_SYNC_FLUSH. */
    static const char py[] = "\x0a\x08\x75\x52\x28\xe1\x62\x60\x60\x60\xcd\x48\xcd\xc9\xc9\x07"
                             "\x00\x00\x00\xff\xff";
    tn_inflate_t d;
    assert_int_equal(tn_inflate_init(&d), 0);
    tn_buf_t out;
    tn_buf_init(&out);
    bool more;
    assert_int_equal(tn_inflate_decode(&d, py, sizeof(py) - 1, &out, 1 << 20, &more), 0);
    assert_false(more);
    assert_int_equal(out.len, 15);
    assert_memory_equal(out.base, "PUB t\n\0\0\0\x05hello", 15);
    tn_inflate_fini(&d);

    /* Our encoder's sync flush: every write decodes whole, on its own. */
    tn_deflate_t e;
    assert_int_equal(tn_deflate_init(&e, 6), 0);
    assert_int_equal(tn_inflate_init(&d), 0);
    for (int i = 0; i < 50; i++) {
        char msg[64];
        int n = snprintf(msg, sizeof(msg), "frame number %d", i);
        tn_buf_t enc;
        tn_buf_init(&enc);
        assert_int_equal(tn_deflate_encode(&e, msg, (size_t)n, &enc), 0);
        tn_buf_reset(&out);
        /* Fed a byte at a time, it still adds up. */
        for (size_t k = 0; k < enc.len; k++)
            assert_int_equal(tn_inflate_decode(&d, enc.base + k, 1, &out, 1 << 20, &more), 0);
        assert_int_equal(out.len, (size_t)n);
        assert_memory_equal(out.base, msg, (size_t)n);
        tn_buf_fini(&enc);
    }
    tn_deflate_fini(&e);
    tn_inflate_fini(&d);
    assert_int_equal(tn_deflate_init(&e, 0), UV_EINVAL);

    /* Not deflate at all. */
    assert_int_equal(tn_inflate_init(&d), 0);
    tn_buf_reset(&out);
    assert_int_equal(tn_inflate_decode(&d, "\xff\xff\xff\xff\xff", 5, &out, 1 << 20, &more),
                     TN_ECORRUPT);
    tn_inflate_fini(&d);
    tn_buf_fini(&out);
}

static void test_inflate_bomb_is_capped(void **state)
{
    (void)state;
    size_t n = 8 * 1024 * 1024;
    char *zeros = calloc(1, n);
    tn_deflate_t e;
    assert_int_equal(tn_deflate_init(&e, 9), 0);
    tn_buf_t enc, out;
    tn_buf_init(&enc);
    tn_buf_init(&out);
    assert_int_equal(tn_deflate_encode(&e, zeros, n, &enc), 0);
    assert_true(enc.len < 20000); /* 8 MiB from a few KiB */
    tn_inflate_t d;
    assert_int_equal(tn_inflate_init(&d), 0);
    bool more;
    assert_int_equal(tn_inflate_decode(&d, enc.base, enc.len, &out, 64 * 1024, &more), 0);
    assert_true(more);
    assert_int_equal(out.len, 64 * 1024);
    size_t total = out.len;
    while (more) {
        tn_buf_reset(&out); /* the connection consumed it */
        assert_int_equal(tn_inflate_decode(&d, NULL, 0, &out, 64 * 1024, &more), 0);
        assert_true(out.len <= 64 * 1024);
        total += out.len;
    }
    assert_int_equal(total, n);
    tn_inflate_fini(&d);
    tn_deflate_fini(&e);
    tn_buf_fini(&enc);
    tn_buf_fini(&out);
    free(zeros);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snappy_round_trips),
        cmocka_unit_test(test_snappy_foreign_and_bad),
        cmocka_unit_test(test_snappy_output_cap),
        cmocka_unit_test(test_deflate),
        cmocka_unit_test(test_inflate_bomb_is_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
