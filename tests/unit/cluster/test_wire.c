/* The node RPC wire codec: frame headers and their refusals, the framer
 * over every way a stream can cut its bytes, field and reply round trips
 * and refusals, the opcode table, the COMMIT codec, the secret proof and
 * the backoff. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/wire.h"
#include "cluster/fetch.h"
#include "cluster/rcheck.h"
#include "core/alloc.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

/* --- frame header --------------------------------------------------------- */

static void test_hdr_round_trip(void **state)
{
    (void)state;
    uint8_t b[TN_WIRE_HDR];
    tn_wire_hdr_encode(b, TN_WF_REQUEST, 0x0102030405060708ull, 0x00a0b0c0);
    static const uint8_t want[TN_WIRE_HDR] = {'T', 'N', 'R', '1', 1, 8, 0,    0,    1,    2,
                                              3,   4,   5,   6,   7, 8, 0x00, 0xa0, 0xb0, 0xc0};
    assert_memory_equal(b, want, TN_WIRE_HDR);
    tn_wire_hdr_t h;
    assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), TN_WIRE_MAX_PAYLOAD, &h), 0);
    assert_int_equal(h.type, TN_WF_REQUEST);
    assert_true(h.id == 0x0102030405060708ull);
    assert_int_equal(h.len, 0x00a0b0c0);

    static const uint8_t types[] = {TN_WF_ERROR,   TN_WF_PING,  TN_WF_PONG, TN_WF_CANCEL,
                                    TN_WF_REQUEST, TN_WF_REPLY, TN_WF_AUTH};
    for (size_t i = 0; i < TN_ARRAY_SIZE(types); i++) {
        tn_wire_hdr_encode(b, types[i], UINT64_MAX, 0);
        assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), 0, &h), 0);
        assert_int_equal(h.type, types[i]);
        assert_true(h.id == UINT64_MAX);
        assert_int_equal(h.len, 0);
    }
}

static void test_hdr_refusals(void **state)
{
    (void)state;
    uint8_t good[TN_WIRE_HDR], b[TN_WIRE_HDR];
    tn_wire_hdr_t h;
    tn_wire_hdr_encode(good, TN_WF_REPLY, 7, 100);

    for (size_t n = 0; n < TN_WIRE_HDR; n++)
        assert_int_equal(tn_wire_hdr_decode(good, n, TN_WIRE_MAX_PAYLOAD, &h), TN_ESHORT);

    for (int i = 0; i < 4; i++) { /* every magic byte */
        memcpy(b, good, sizeof(b));
        b[i] ^= 0x01;
        assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), TN_WIRE_MAX_PAYLOAD, &h), TN_EPROTO);
    }
    memcpy(b, good, sizeof(b));
    b[4] = 2; /* version */
    assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), TN_WIRE_MAX_PAYLOAD, &h), TN_EPROTO);
    b[4] = 0;
    assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), TN_WIRE_MAX_PAYLOAD, &h), TN_EPROTO);
    for (int i = 6; i < 8; i++) { /* reserved */
        memcpy(b, good, sizeof(b));
        b[i] = 0x80;
        assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), TN_WIRE_MAX_PAYLOAD, &h), TN_EPROTO);
    }
    static const uint8_t bad_types[] = {0, 1, 2, 7, 11, 255};
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad_types); i++) {
        tn_wire_hdr_encode(b, bad_types[i], 1, 0);
        assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), TN_WIRE_MAX_PAYLOAD, &h), TN_EPROTO);
    }
    /* Over the caller's cap, and over the absolute cap whatever it says. */
    assert_int_equal(tn_wire_hdr_decode(good, sizeof(good), 99, &h), TN_ETOOBIG);
    assert_int_equal(tn_wire_hdr_decode(good, sizeof(good), 100, &h), 0);
    tn_wire_hdr_encode(b, TN_WF_REQUEST, 1, TN_WIRE_MAX_PAYLOAD + 1);
    assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), UINT32_MAX, &h), TN_ETOOBIG);
    tn_wire_hdr_encode(b, TN_WF_REQUEST, 1, TN_WIRE_MAX_PAYLOAD);
    assert_int_equal(tn_wire_hdr_decode(b, sizeof(b), UINT32_MAX, &h), 0);
}

static void test_frame_append(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_PING, 3, NULL, 0), 0);
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_AUTH, 4, "abc", 3), 0);
    assert_int_equal(tn_buf_size(&b), 2 * TN_WIRE_HDR + 3);
    tn_wire_hdr_t h;
    const uint8_t *p = (const uint8_t *)tn_buf_data(&b);
    assert_int_equal(tn_wire_hdr_decode(p, TN_WIRE_HDR, 0, &h), 0);
    assert_int_equal(h.type, TN_WF_PING);
    assert_int_equal(tn_wire_hdr_decode(p + TN_WIRE_HDR, TN_WIRE_HDR, 3, &h), 0);
    assert_int_equal(h.type, TN_WF_AUTH);
    assert_true(h.id == 4);
    assert_memory_equal(p + 2 * TN_WIRE_HDR, "abc", 3);
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_REQUEST, 5, p, TN_WIRE_MAX_PAYLOAD + 1),
                     UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 2 * TN_WIRE_HDR + 3);
    tn_buf_fini(&b);
}

/* --- the framer -------------------------------------------------------------- */

#define MAX_SEEN 64

typedef struct {
    size_t n;
    tn_wire_hdr_t h[MAX_SEEN];
    uint8_t payload[MAX_SEEN][256];
    int fail_at;         /* return an error on this frame (1-based), 0 never */
    uint32_t raise_to;   /* when not 0, set f->max to it after the first frame */
    tn_wire_framer_t *f; /* for raise_to */
} seen_t;

static int on_frame(void *arg, const tn_wire_hdr_t *h, const uint8_t *payload)
{
    seen_t *s = arg;
    assert_true(s->n < MAX_SEEN);
    s->h[s->n] = *h;
    memcpy(s->payload[s->n], payload, TN_MIN(h->len, sizeof(s->payload[0])));
    s->n++;
    if (s->fail_at != 0 && (int)s->n == s->fail_at)
        return UV_ECANCELED;
    if (s->raise_to != 0)
        s->f->max = s->raise_to;
    return 0;
}

/* Three frames of 0, 5 and 200 payload bytes. */
static void three_frames(tn_buf_t *b)
{
    uint8_t big[200];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)i;
    tn_buf_init(b);
    assert_int_equal(tn_wire_frame_append(b, TN_WF_PING, 1, NULL, 0), 0);
    assert_int_equal(tn_wire_frame_append(b, TN_WF_REQUEST, 2, "hello", 5), 0);
    assert_int_equal(tn_wire_frame_append(b, TN_WF_REPLY, 3, big, sizeof(big)), 0);
}

static void expect_three(const seen_t *s)
{
    assert_int_equal(s->n, 3);
    assert_int_equal(s->h[0].type, TN_WF_PING);
    assert_int_equal(s->h[0].len, 0);
    assert_true(s->h[1].id == 2);
    assert_int_equal(s->h[1].len, 5);
    assert_memory_equal(s->payload[1], "hello", 5);
    assert_int_equal(s->h[2].type, TN_WF_REPLY);
    assert_int_equal(s->h[2].len, 200);
    for (int i = 0; i < 200; i++)
        assert_int_equal(s->payload[2][i], i);
}

static void push_in_chunks(size_t chunk)
{
    tn_buf_t b;
    three_frames(&b);
    seen_t s = {0};
    tn_wire_framer_t f;
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    const uint8_t *p = (const uint8_t *)tn_buf_data(&b);
    size_t len = tn_buf_size(&b);
    for (size_t at = 0; at < len; at += chunk)
        assert_int_equal(tn_wire_framer_push(&f, p + at, TN_MIN(chunk, len - at), on_frame, &s), 0);
    expect_three(&s);
    assert_int_equal(tn_buf_size(&f.pending), 0);
    tn_wire_framer_fini(&f);
    tn_buf_fini(&b);
}

static void test_framer_byte_by_byte(void **state)
{
    (void)state;
    push_in_chunks(1);
}

static void test_framer_odd_chunks(void **state)
{
    (void)state;
    static const size_t chunks[] = {2, 3, 7, 13, 19, 20, 21, 39, 41, 199, 245};
    for (size_t i = 0; i < TN_ARRAY_SIZE(chunks); i++)
        push_in_chunks(chunks[i]);
}

static void test_framer_one_push(void **state)
{
    (void)state;
    push_in_chunks(100000); /* all three frames in one push */
    /* An empty push is nothing. */
    tn_wire_framer_t f;
    seen_t s = {0};
    tn_wire_framer_init(&f, 10);
    assert_int_equal(tn_wire_framer_push(&f, "", 0, on_frame, &s), 0);
    assert_int_equal(s.n, 0);
    tn_wire_framer_fini(&f);
}

static void test_framer_holds_only_incomplete(void **state)
{
    (void)state;
    tn_buf_t b;
    three_frames(&b);
    seen_t s = {0};
    tn_wire_framer_t f;
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    /* The first two frames whole and 10 bytes of the third. */
    size_t cut = 2 * TN_WIRE_HDR + 5 + 10;
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), cut, on_frame, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(tn_buf_size(&f.pending), 10);
    assert_int_equal(
        tn_wire_framer_push(&f, tn_buf_data(&b) + cut, tn_buf_size(&b) - cut, on_frame, &s), 0);
    expect_three(&s);
    assert_int_equal(tn_buf_size(&f.pending), 0);
    tn_wire_framer_fini(&f);
    tn_buf_fini(&b);
}

static void test_framer_proof_cap(void **state)
{
    (void)state;
    const uint32_t cap = TN_WIRE_PROOF_CAP - TN_WIRE_HDR;
    uint8_t hdr[TN_WIRE_HDR];
    tn_wire_framer_t f;
    seen_t s = {0};

    /* A proof-sized frame passes under the cap. */
    tn_buf_t b;
    tn_buf_init(&b);
    uint8_t proof[TN_WIRE_PROOF_LEN] = {1, 2, 3};
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_AUTH, 0, proof, sizeof(proof)), 0);
    tn_wire_framer_init(&f, cap);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), tn_buf_size(&b), on_frame, &s), 0);
    assert_int_equal(s.n, 1);
    assert_memory_equal(s.payload[0], proof, sizeof(proof));
    tn_wire_framer_fini(&f);
    tn_buf_fini(&b);

    /* A header announcing one byte more is refused on its own, before any
     * payload, whether it comes whole or byte by byte. */
    tn_wire_hdr_encode(hdr, TN_WF_AUTH, 0, cap + 1);
    memset(&s, 0, sizeof(s));
    tn_wire_framer_init(&f, cap);
    assert_int_equal(tn_wire_framer_push(&f, hdr, sizeof(hdr), on_frame, &s), TN_ETOOBIG);
    assert_int_equal(s.n, 0);
    assert_int_equal(tn_buf_size(&f.pending), 0);
    tn_wire_framer_fini(&f);

    tn_wire_hdr_encode(hdr, TN_WF_REQUEST, 9, TN_WIRE_MAX_PAYLOAD);
    tn_wire_framer_init(&f, cap);
    for (size_t i = 0; i + 1 < sizeof(hdr); i++)
        assert_int_equal(tn_wire_framer_push(&f, hdr + i, 1, on_frame, &s), 0);
    assert_int_equal(tn_wire_framer_push(&f, hdr + sizeof(hdr) - 1, 1, on_frame, &s), TN_ETOOBIG);
    assert_int_equal(s.n, 0);
    assert_int_equal(tn_buf_size(&f.pending), 0);
    tn_wire_framer_fini(&f);
}

static void test_framer_sticky(void **state)
{
    (void)state;
    uint8_t junk[TN_WIRE_HDR] = "XXXXXXXXXXXXXXXXXXX";
    tn_buf_t b;
    three_frames(&b);
    tn_wire_framer_t f;
    seen_t s = {0};

    /* A bad header: this push and every later one fail, good frames too. */
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    assert_int_equal(tn_wire_framer_push(&f, junk, sizeof(junk), on_frame, &s), TN_EPROTO);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), tn_buf_size(&b), on_frame, &s),
                     TN_EPROTO);
    assert_int_equal(s.n, 0);
    tn_wire_framer_fini(&f);

    /* Good frames before the bad one are delivered; nothing after. */
    tn_buf_t c;
    tn_buf_init(&c);
    assert_int_equal(tn_buf_append(&c, tn_buf_data(&b), TN_WIRE_HDR), 0); /* the ping */
    assert_int_equal(tn_buf_append(&c, junk, sizeof(junk)), 0);
    assert_int_equal(tn_buf_append(&c, tn_buf_data(&b), tn_buf_size(&b)), 0);
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&c), tn_buf_size(&c), on_frame, &s),
                     TN_EPROTO);
    assert_int_equal(s.n, 1);
    tn_wire_framer_fini(&f);
    tn_buf_fini(&c);

    /* A callback's error stops the push at that frame and sticks. */
    memset(&s, 0, sizeof(s));
    s.fail_at = 2;
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), tn_buf_size(&b), on_frame, &s),
                     UV_ECANCELED);
    assert_int_equal(s.n, 2);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), tn_buf_size(&b), on_frame, &s),
                     UV_ECANCELED);
    assert_int_equal(s.n, 2);
    tn_wire_framer_fini(&f);

    /* The same when the failing frame was completed from pending bytes. */
    memset(&s, 0, sizeof(s));
    s.fail_at = 1;
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), 5, on_frame, &s), 0);
    assert_int_equal(
        tn_wire_framer_push(&f, tn_buf_data(&b) + 5, tn_buf_size(&b) - 5, on_frame, &s),
        UV_ECANCELED);
    assert_int_equal(s.n, 1);
    assert_int_equal(tn_buf_size(&f.pending), 0);
    tn_wire_framer_fini(&f);
    tn_buf_fini(&b);
}

static void test_framer_callback_raises_max(void **state)
{
    (void)state;
    /* A proof under the pre-auth cap, then a 200-byte request in the same
     * push: refused without the raise, taken with it. */
    const uint32_t cap = TN_WIRE_PROOF_CAP - TN_WIRE_HDR;
    uint8_t big[200] = {0};
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_AUTH, 0, big, TN_WIRE_PROOF_LEN), 0);
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_REQUEST, 1, big, sizeof(big)), 0);

    for (size_t chunk = 1; chunk <= tn_buf_size(&b); chunk = chunk * 3 + 1) {
        tn_wire_framer_t f;
        seen_t s = {0};
        tn_wire_framer_init(&f, cap);
        int rc = 0;
        for (size_t at = 0; at < tn_buf_size(&b) && rc == 0; at += chunk)
            rc = tn_wire_framer_push(&f, tn_buf_data(&b) + at, TN_MIN(chunk, tn_buf_size(&b) - at),
                                     on_frame, &s);
        assert_int_equal(rc, TN_ETOOBIG);
        assert_int_equal(s.n, 1);
        tn_wire_framer_fini(&f);

        memset(&s, 0, sizeof(s));
        s.f = &f;
        s.raise_to = TN_WIRE_MAX_PAYLOAD;
        tn_wire_framer_init(&f, cap);
        for (size_t at = 0; at < tn_buf_size(&b); at += chunk)
            assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b) + at,
                                                 TN_MIN(chunk, tn_buf_size(&b) - at), on_frame, &s),
                             0);
        assert_int_equal(s.n, 2);
        assert_int_equal(s.h[1].len, sizeof(big));
        tn_wire_framer_fini(&f);
    }
    tn_buf_fini(&b);
}

static void test_framer_out_of_memory(void **state)
{
    (void)state;
    tn_buf_t b;
    three_frames(&b);
    tn_wire_framer_t f;
    seen_t s = {0};
    tn_wire_framer_init(&f, TN_WIRE_MAX_PAYLOAD);
    tn_alloc_fail_after(0);
    int rc = tn_wire_framer_push(&f, tn_buf_data(&b), 3, on_frame, &s);
    tn_alloc_fail_after(-1);
    assert_int_equal(rc, UV_ENOMEM);
    assert_int_equal(tn_wire_framer_push(&f, tn_buf_data(&b), tn_buf_size(&b), on_frame, &s),
                     UV_ENOMEM);
    assert_int_equal(s.n, 0);
    tn_wire_framer_fini(&f);
    tn_buf_fini(&b);
}

/* --- fields -------------------------------------------------------------------- */

static void test_writers_out_of_memory(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_alloc_fail_after(0);
    assert_int_equal(tn_wire_put_u8(&b, 1), UV_ENOMEM);
    assert_int_equal(tn_wire_put_u64(&b, 1), UV_ENOMEM);
    assert_int_equal(tn_wire_put_str(&b, "x"), UV_ENOMEM);
    assert_int_equal(tn_wire_frame_append(&b, TN_WF_PING, 1, NULL, 0), UV_ENOMEM);
    assert_int_equal(tn_wire_reply_encode(&b, 200, "text/plain", "ok", 2), UV_ENOMEM);
    tn_alloc_fail_after(-1);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
}

static void test_fields_round_trip(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_put_u8(&b, 0xab), 0);
    assert_int_equal(tn_wire_put_bool(&b, true), 0);
    assert_int_equal(tn_wire_put_bool(&b, false), 0);
    assert_int_equal(tn_wire_put_u16(&b, 0xbeef), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0xdeadbeef), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0x0123456789abcdefull), 0);
    assert_int_equal(tn_wire_put_i32(&b, -2), 0);
    assert_int_equal(tn_wire_put_i64(&b, INT64_MIN), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "\0\1\2", 3), 0);
    assert_int_equal(tn_wire_put_bytes(&b, NULL, 0), 0);
    assert_int_equal(tn_wire_put_str(&b, "127.0.0.1:4261"), 0);
    assert_int_equal(tn_wire_put_str(&b, ""), 0);

    /* Big-endian on the wire. */
    static const uint8_t head[] = {0xab, 1,    0,    0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef,
                                   0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xff,
                                   0xff, 0xff, 0xfe, 0x80, 0,    0,    0,    0,    0,
                                   0,    0,    0,    0,    0,    3,    0,    1,    2};
    assert_memory_equal(tn_buf_data(&b), head, sizeof(head));

    tn_wire_in_t in;
    tn_wire_in_init(&in, tn_buf_data(&b), tn_buf_size(&b));
    uint8_t u8;
    bool t, f;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    int64_t i64;
    const uint8_t *bytes;
    size_t n;
    char str[32];
    assert_int_equal(tn_wire_get_u8(&in, &u8), 0);
    assert_int_equal(u8, 0xab);
    assert_int_equal(tn_wire_get_bool(&in, &t), 0);
    assert_true(t);
    assert_int_equal(tn_wire_get_bool(&in, &f), 0);
    assert_false(f);
    assert_int_equal(tn_wire_get_u16(&in, &u16), 0);
    assert_int_equal(u16, 0xbeef);
    assert_int_equal(tn_wire_get_u32(&in, &u32), 0);
    assert_int_equal(u32, 0xdeadbeef);
    assert_int_equal(tn_wire_get_u64(&in, &u64), 0);
    assert_true(u64 == 0x0123456789abcdefull);
    assert_int_equal(tn_wire_get_i32(&in, &i32), 0);
    assert_int_equal(i32, -2);
    assert_int_equal(tn_wire_get_i64(&in, &i64), 0);
    assert_true(i64 == INT64_MIN);
    assert_int_equal(tn_wire_get_bytes(&in, 3, &bytes, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(bytes, "\0\1\2", 3);
    assert_ptr_equal(bytes, (const uint8_t *)tn_buf_data(&b) + sizeof(head) - 3); /* borrowed */
    assert_int_equal(tn_wire_get_bytes(&in, 0, &bytes, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(tn_wire_end(&in), TN_EPROTO); /* two strings still unread */
    assert_int_equal(tn_wire_get_str(&in, 14, str), 0);
    assert_string_equal(str, "127.0.0.1:4261");
    assert_int_equal(tn_wire_get_str(&in, 0, str), 0);
    assert_string_equal(str, "");
    assert_int_equal(tn_wire_end(&in), 0);
    tn_buf_fini(&b);
}

/* Every fixed-size reader on one byte fewer than it needs fails, and the
 * failure sticks. */
static void test_fields_short(void **state)
{
    (void)state;
    static const uint8_t z[8] = {0};
    tn_wire_in_t in;
    uint8_t u8;
    bool bl;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64 = 77;
    int32_t i32;
    int64_t i64;
    tn_wire_in_init(&in, z, 0);
    assert_int_equal(tn_wire_get_u8(&in, &u8), TN_EPROTO);
    tn_wire_in_init(&in, z, 0);
    assert_int_equal(tn_wire_get_bool(&in, &bl), TN_EPROTO);
    tn_wire_in_init(&in, z, 1);
    assert_int_equal(tn_wire_get_u16(&in, &u16), TN_EPROTO);
    tn_wire_in_init(&in, z, 3);
    assert_int_equal(tn_wire_get_u32(&in, &u32), TN_EPROTO);
    tn_wire_in_init(&in, z, 3);
    assert_int_equal(tn_wire_get_i32(&in, &i32), TN_EPROTO);
    tn_wire_in_init(&in, z, 7);
    assert_int_equal(tn_wire_get_u64(&in, &u64), TN_EPROTO);
    assert_true(u64 == 77); /* output left unset */
    tn_wire_in_init(&in, z, 7);
    assert_int_equal(tn_wire_get_i64(&in, &i64), TN_EPROTO);
    /* Sticky: a read that would fit now fails too, and so does the end. */
    assert_int_equal(tn_wire_get_u8(&in, &u8), TN_EPROTO);
    assert_int_equal(tn_wire_end(&in), TN_EPROTO);

    /* A byte field whose length prefix is cut, or whose bytes are. */
    const uint8_t *bytes;
    size_t n;
    char s[8];
    static const uint8_t cut_len[] = {0, 0, 0};
    tn_wire_in_init(&in, cut_len, sizeof(cut_len));
    assert_int_equal(tn_wire_get_bytes(&in, 100, &bytes, &n), TN_EPROTO);
    static const uint8_t cut_body[] = {0, 0, 0, 4, 'a', 'b', 'c'};
    tn_wire_in_init(&in, cut_body, sizeof(cut_body));
    assert_int_equal(tn_wire_get_bytes(&in, 100, &bytes, &n), TN_EPROTO);
    tn_wire_in_init(&in, cut_body, sizeof(cut_body));
    assert_int_equal(tn_wire_get_str(&in, 7, s), TN_EPROTO);
    /* A length near 4 GiB does not wrap the bounds check. */
    static const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 'a'};
    tn_wire_in_init(&in, huge, sizeof(huge));
    assert_int_equal(tn_wire_get_bytes(&in, SIZE_MAX, &bytes, &n), TN_EPROTO);
}

static void test_fields_overlong_trailing_bool(void **state)
{
    (void)state;
    tn_wire_in_t in;
    const uint8_t *bytes;
    size_t n;
    char s[8];
    /* Over the field's max, though the bytes are there. */
    static const uint8_t four[] = {0, 0, 0, 4, 'a', 'b', 'c', 'd'};
    tn_wire_in_init(&in, four, sizeof(four));
    assert_int_equal(tn_wire_get_bytes(&in, 3, &bytes, &n), TN_EPROTO);
    assert_int_equal(tn_wire_end(&in), TN_EPROTO);
    tn_wire_in_init(&in, four, sizeof(four));
    assert_int_equal(tn_wire_get_str(&in, 3, s), TN_EPROTO);
    tn_wire_in_init(&in, four, sizeof(four));
    assert_int_equal(tn_wire_get_str(&in, 4, s), 0);
    assert_string_equal(s, "abcd");
    assert_int_equal(tn_wire_end(&in), 0);
    /* A string holding a NUL. */
    static const uint8_t nul[] = {0, 0, 0, 3, 'a', 0, 'c'};
    tn_wire_in_init(&in, nul, sizeof(nul));
    assert_int_equal(tn_wire_get_str(&in, 7, s), TN_EPROTO);
    /* Trailing bytes. */
    tn_wire_in_init(&in, four, sizeof(four));
    uint32_t u32;
    assert_int_equal(tn_wire_get_u32(&in, &u32), 0);
    assert_int_equal(tn_wire_end(&in), TN_EPROTO);
    /* A bool other than 0 or 1. */
    static const uint8_t bools[] = {2, 0xff};
    for (size_t i = 0; i < sizeof(bools); i++) {
        bool v = false;
        tn_wire_in_init(&in, &bools[i], 1);
        assert_int_equal(tn_wire_get_bool(&in, &v), TN_EPROTO);
        assert_false(v);
        assert_int_equal(tn_wire_end(&in), TN_EPROTO);
    }
}

/* --- reply ---------------------------------------------------------------------- */

static void test_reply_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    static const char body[] = "{\"error\":\"no leader\"}";
    assert_int_equal(tn_wire_reply_encode(&b, 503, "application/json", body, strlen(body)), 0);
    static const uint8_t head[] = {0x01, 0xf7, 0, 0, 0, 16};
    assert_memory_equal(tn_buf_data(&b), head, sizeof(head));
    tn_wire_reply_t r;
    assert_int_equal(tn_wire_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), 0);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.ctype_len, 16);
    assert_memory_equal(r.ctype, "application/json", 16);
    assert_int_equal(r.body_len, strlen(body));
    assert_memory_equal(r.body, body, strlen(body));

    /* No content type, no body. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_reply_encode(&b, 204, NULL, NULL, 0), 0);
    assert_int_equal(tn_buf_size(&b), 10);
    assert_int_equal(tn_wire_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), 0);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.ctype_len, 0);
    assert_int_equal(r.body_len, 0);

    /* Encoder refusals leave the buffer as it was. */
    char ctype[257];
    memset(ctype, 'x', 256);
    ctype[256] = '\0';
    assert_int_equal(tn_wire_reply_encode(&b, 200, ctype, NULL, 0), UV_EINVAL);
    assert_int_equal(tn_wire_reply_encode(&b, 99, "", NULL, 0), UV_EINVAL);
    assert_int_equal(tn_wire_reply_encode(&b, 600, "", NULL, 0), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 10);
    ctype[255] = '\0';
    assert_int_equal(tn_wire_reply_encode(&b, 599, ctype, "x", 1), 0);
    assert_int_equal(tn_wire_reply_decode(tn_buf_data(&b) + 10, tn_buf_size(&b) - 10, &r), 0);
    assert_int_equal(r.status, 599);
    assert_int_equal(r.ctype_len, 255);

    /* Decoder refusals: every cut, a trailing byte, bad statuses, a long
     * content type. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_reply_encode(&b, 200, "text/plain", "ok", 2), 0);
    for (size_t cut = 0; cut < tn_buf_size(&b); cut++)
        assert_int_equal(tn_wire_reply_decode(tn_buf_data(&b), cut, &r), TN_EPROTO);
    assert_int_equal(tn_buf_append(&b, "!", 1), 0);
    assert_int_equal(tn_wire_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    static const uint16_t bad_status[] = {0, 99, 600, 0xffff};
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad_status); i++) {
        tn_buf_t c;
        tn_buf_init(&c);
        assert_int_equal(tn_wire_put_u16(&c, bad_status[i]), 0);
        assert_int_equal(tn_wire_put_str(&c, ""), 0);
        assert_int_equal(tn_wire_put_str(&c, ""), 0);
        assert_int_equal(tn_wire_reply_decode(tn_buf_data(&c), tn_buf_size(&c), &r), TN_EPROTO);
        tn_buf_fini(&c);
    }
    /* Control characters in the content type (it becomes a header). */
    static const char *const dirty[] = {"text/plain\r\nX-Evil: 1", "a\tb", "\x7f"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(dirty); i++) {
        tn_buf_t c;
        tn_buf_init(&c);
        assert_int_equal(tn_wire_reply_encode(&c, 200, dirty[i], NULL, 0), UV_EINVAL);
        assert_int_equal(tn_buf_size(&c), 0);
        assert_int_equal(tn_wire_put_u16(&c, 200), 0);
        assert_int_equal(tn_wire_put_str(&c, dirty[i]), 0);
        assert_int_equal(tn_wire_put_str(&c, ""), 0);
        assert_int_equal(tn_wire_reply_decode(tn_buf_data(&c), tn_buf_size(&c), &r), TN_EPROTO);
        tn_buf_fini(&c);
    }
    tn_buf_t c;
    tn_buf_init(&c);
    assert_int_equal(tn_wire_put_u16(&c, 200), 0);
    assert_int_equal(tn_wire_put_bytes(&c, "a\0b", 3), 0);
    assert_int_equal(tn_wire_put_str(&c, ""), 0);
    assert_int_equal(tn_wire_reply_decode(tn_buf_data(&c), tn_buf_size(&c), &r), TN_EPROTO);
    tn_buf_fini(&c);
    tn_buf_reset(&b);
    memset(ctype, 'x', 256);
    ctype[256] = '\0';
    assert_int_equal(tn_wire_put_u16(&b, 200), 0);
    assert_int_equal(tn_wire_put_str(&b, ctype), 0);
    assert_int_equal(tn_wire_put_str(&b, ""), 0);
    assert_int_equal(tn_wire_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_fini(&b);
}

/* --- opcodes and request shapes --------------------------------------------------- */

static void test_op_table(void **state)
{
    (void)state;
    static const struct {
        uint8_t op;
        const char *name;
        tn_wire_lane_t lane;
    } want[] = {
        {TN_OP_ECHO, "echo", TN_LANE_CONTROL},
        {TN_OP_META_PROPOSE, "meta_propose", TN_LANE_CONTROL},
        {TN_OP_JOIN, "join", TN_LANE_CONTROL},
        {TN_OP_LEADER_INDEX, "leader_index", TN_LANE_CONTROL},
        {TN_OP_NODE_STATUS, "node_status", TN_LANE_CONTROL},
        {TN_OP_COMMIT, "commit", TN_LANE_PRODUCE},
        {TN_OP_SETTLE, "settle", TN_LANE_ACK},
        {TN_OP_CONSUME, "consume", TN_LANE_CONSUME},
        {TN_OP_PSTATS, "pstats", TN_LANE_CONTROL},
        {TN_OP_PURGE, "purge", TN_LANE_CONTROL},
        {TN_OP_FETCH, "fetch", TN_LANE_REPLICA},
        {TN_OP_PRODUCE, "produce", TN_LANE_PRODUCE},
        {TN_OP_SETTLE_REPL, "settle_repl", TN_LANE_REPLICA},
        {TN_OP_REPAIR, "repair", TN_LANE_REPLICA},
        {TN_OP_CHAN_SNAP, "chan_snap", TN_LANE_REPLICA},
        {TN_OP_FLUSHED, "flushed", TN_LANE_REPLICA},
        {TN_OP_REMOTE_CHECK, "remote_check", TN_LANE_CONTROL},
        {TN_OP_MOVE_PROGRESS, "move_progress", TN_LANE_CONTROL},
        {TN_OP_REPLICA_ERROR, "replica_error", TN_LANE_REPLICA},
        {TN_OP_PERRS, "perrs", TN_LANE_CONTROL},
        {TN_OP_META_PROPOSE_AT, "meta_propose_at", TN_LANE_CONTROL},
    };
    /* Every op this build knows is listed (numbers are fixed per wave, so
     * one may be another branch's and unknown here). */
    size_t known = 0;
    for (unsigned op = 1; op < TN_OP__COUNT; op++)
        known += tn_wire_op_name((uint8_t)op) != NULL;
    assert_int_equal(TN_ARRAY_SIZE(want), known);
    assert_int_equal(TN_OP_COMMIT, 6); /* stable on the wire */
    assert_int_equal(TN_OP_SETTLE, 7);
    assert_int_equal(TN_OP_CONSUME, 8);
    assert_int_equal(TN_OP_PSTATS, 9);
    assert_int_equal(TN_OP_PURGE, 10);
    assert_int_equal(TN_OP_FETCH, 11);
    assert_int_equal(TN_OP_PRODUCE, 12);
    assert_int_equal(TN_OP_SETTLE_REPL, 13);
    assert_int_equal(TN_OP_REPAIR, 14);
    assert_int_equal(TN_OP_CHAN_SNAP, 15);
    assert_int_equal(TN_OP_FLUSHED, 16);
    assert_int_equal(TN_OP_REMOTE_CHECK, 17);
    assert_int_equal(TN_OP_MOVE_PROGRESS, 18);
    assert_int_equal(TN_OP_REPLICA_ERROR, 19);
    assert_int_equal(TN_OP_PERRS, 20);
    assert_int_equal(TN_OP_META_PROPOSE_AT, 21);
    for (size_t i = 0; i < TN_ARRAY_SIZE(want); i++) {
        assert_non_null(tn_wire_op_name(want[i].op));
        assert_string_equal(tn_wire_op_name(want[i].op), want[i].name);
        assert_int_equal(tn_wire_op_lane(want[i].op), want[i].lane);
    }
    assert_null(tn_wire_op_name(0));
    for (unsigned op = TN_OP__COUNT; op <= 255; op++) {
        assert_null(tn_wire_op_name((uint8_t)op));
        assert_int_equal(tn_wire_op_lane((uint8_t)op), TN_LANE_CONTROL);
    }
}

static void test_request_check(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);

    /* Good requests of every op, and each one cut or grown by a byte. */
    tn_buf_t good[TN_OP__COUNT];
    for (int op = TN_OP_ECHO; op < TN_OP__COUNT; op++) {
        tn_buf_init(&good[op]);
        assert_int_equal(tn_wire_put_u8(&good[op], (uint8_t)op), 0);
    }
    assert_int_equal(tn_wire_put_bytes(&good[TN_OP_ECHO], "ping", 4), 0);
    assert_int_equal(tn_wire_put_bytes(&good[TN_OP_META_PROPOSE], "TM\1\1\0\0\0\0", 8), 0);
    assert_int_equal(tn_wire_put_bytes(&good[TN_OP_META_PROPOSE_AT], "TM\1\1\0\0\0\0", 8), 0);
    assert_int_equal(tn_wire_put_u64(&good[TN_OP_JOIN], 2), 0);
    assert_int_equal(tn_wire_put_str(&good[TN_OP_JOIN], "127.0.0.1:4262"), 0);
    assert_int_equal(tn_wire_put_str(&good[TN_OP_JOIN], "127.0.0.1:4252"), 0);
    tn_commit_rec_t rec = {tn_iov("k", 1), tn_iov("body", 4), 0, 1700000000000};
    assert_int_equal(tn_wire_commit_encode(&good[TN_OP_COMMIT], "t", 0, &rec, 1), 0);
    tn_wire_handle_t hd = {1, 2, 3};
    assert_int_equal(
        tn_wire_settle_encode(&good[TN_OP_SETTLE], "t", "default", TN_WIRE_SETTLE_ACK, 0, &hd, 1),
        0);
    tn_wire_consume_t wc = {.topic = "t", .channel = "c", .wait_ms = 1000, .local_only = true};
    assert_int_equal(tn_wire_consume_encode(&good[TN_OP_CONSUME], &wc), 0);
    static const uint32_t some[] = {0, 2};
    assert_int_equal(tn_wire_pstats_encode(&good[TN_OP_PSTATS], "t", some, 2), 0);
    assert_int_equal(tn_wire_pstats_encode(&good[TN_OP_PERRS], "t", some, 2), 0);
    assert_int_equal(tn_wire_purge_encode(&good[TN_OP_PURGE], "t", 1764590000000), 0);
    assert_int_equal(tn_fetch_req_put_head(&good[TN_OP_FETCH], 2, 77, 500, 1 << 20, 1), 0);
    tn_fetch_part_t fp = {.topic = "t", .partition = 1, .leader_epoch = 3, .fetch_offset = 9};
    assert_int_equal(tn_fetch_req_put_part(&good[TN_OP_FETCH], &fp), 0);
    /* REPAIR: the FETCH layout with exactly one partition. */
    assert_int_equal(tn_fetch_req_put_head(&good[TN_OP_REPAIR], 2, 77, 0, 1 << 20, 1), 0);
    tn_fetch_part_t rp = {
        .topic = "t", .partition = 1, .leader_epoch = 3, .fetch_offset = 9, .flushed_offset = 20};
    assert_int_equal(tn_fetch_req_put_part(&good[TN_OP_REPAIR], &rp), 0);
    tn_buf_t two;
    tn_buf_init(&two);
    assert_int_equal(tn_wire_put_u8(&two, TN_OP_REPAIR), 0);
    assert_int_equal(tn_fetch_req_put_head(&two, 2, 77, 0, 1 << 20, 2), 0);
    assert_int_equal(tn_fetch_req_put_part(&two, &rp), 0);
    assert_int_equal(tn_fetch_req_put_part(&two, &rp), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&two), tn_buf_size(&two)), TN_EPROTO);
    tn_buf_fini(&two);
    assert_int_equal(tn_flushed_req_put_head(&good[TN_OP_FLUSHED], 2, 77, 1), 0);
    tn_fetch_part_t flp = {.topic = "t",
                           .partition = 1,
                           .leader_epoch = 3,
                           .fetch_offset = 10,
                           .last_fetched_epoch = 3,
                           .flushed_offset = 9,
                           .partition_epoch = 4};
    assert_int_equal(tn_fetch_req_put_part(&good[TN_OP_FLUSHED], &flp), 0);
    assert_int_equal(tn_wire_rcheck_encode(&good[TN_OP_REMOTE_CHECK], "eu", 7, "orders"), 0);
    assert_int_equal(tn_wire_moveprog_encode(&good[TN_OP_MOVE_PROGRESS], "t", 3), 0);
    tn_wire_replerr_t re = {.node = 3,
                            .topic = "t",
                            .partition = 1,
                            .leader_epoch = 2,
                            .error = "no space left on device"};
    assert_int_equal(tn_wire_replerr_encode(&good[TN_OP_REPLICA_ERROR], &re), 0);
    tn_wire_produce_hdr_t ph = {.topic = "t", .partition = 1, .node = 2, .seq = 3};
    assert_int_equal(tn_wire_produce_encode(&good[TN_OP_PRODUCE], &ph, &rec, 1), 0);
    tn_walrec_t wr = {.op = TN_WAL_FIN, .offset = 7};
    assert_int_equal(tn_wire_setrepl_encode(&good[TN_OP_SETTLE_REPL], "t", 0, 1, "default", 9, 1, 0,
                                            &wr, 1, 0, 0),
                     0);
    tn_cursor_t snap;
    tn_cursor_init(&snap, 4);
    assert_int_equal(tn_cursor_apply(&snap, &wr), 0);
    assert_int_equal(
        tn_wire_chansnap_encode(&good[TN_OP_CHAN_SNAP], "t", 0, 1, "default", 9, 1, 0, &snap, 0),
        0);
    tn_cursor_fini(&snap);
    for (int op = TN_OP_ECHO; op < TN_OP__COUNT; op++) {
        tn_buf_t *g = &good[op];
        if (tn_wire_op_name((uint8_t)op) == NULL) {
            assert_int_equal(tn_wire_request_check(tn_buf_data(g), tn_buf_size(g)), UV_ENOTSUP);
            tn_buf_fini(g);
            continue; /* not this build's */
        }
        assert_int_equal(tn_wire_request_check(tn_buf_data(g), tn_buf_size(g)), 0);
        if (tn_buf_size(g) > 1)
            assert_int_equal(tn_wire_request_check(tn_buf_data(g), tn_buf_size(g) - 1), TN_EPROTO);
        assert_int_equal(tn_buf_append(g, "", 1), 0);
        assert_int_equal(tn_wire_request_check(tn_buf_data(g), tn_buf_size(g)), TN_EPROTO);
        tn_buf_fini(g);
    }

    /* No opcode; unknown opcodes, with or without a payload. */
    assert_int_equal(tn_wire_request_check("", 0), TN_EPROTO);
    static const uint8_t unknown[] = {0, TN_OP__COUNT, 200, 255};
    for (size_t i = 0; i < sizeof(unknown); i++) {
        assert_int_equal(tn_wire_request_check(&unknown[i], 1), UV_ENOTSUP);
        uint8_t more[3] = {unknown[i], 1, 2};
        assert_int_equal(tn_wire_request_check(more, sizeof(more)), UV_ENOTSUP);
    }

    /* JOIN: an address over TN_WIRE_ADDR_MAX, or holding a NUL. */
    char addr[TN_WIRE_ADDR_MAX + 2];
    memset(addr, 'a', TN_WIRE_ADDR_MAX + 1);
    addr[TN_WIRE_ADDR_MAX + 1] = '\0';
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_JOIN), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_str(&b, addr), 0);
    assert_int_equal(tn_wire_put_str(&b, "x"), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&b), tn_buf_size(&b)), TN_EPROTO);
    addr[TN_WIRE_ADDR_MAX] = '\0';
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_JOIN), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_str(&b, "x"), 0);
    assert_int_equal(tn_wire_put_str(&b, addr), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&b), tn_buf_size(&b)), 0);
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_JOIN), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "a\0b", 3), 0);
    assert_int_equal(tn_wire_put_str(&b, "x"), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&b), tn_buf_size(&b)), TN_EPROTO);
    tn_buf_fini(&b);
}

/* --- COMMIT ---------------------------------------------------------------------------- */

/* A COMMIT request (the opcode byte, then the fields) of n records. */
static void commit_request(tn_buf_t *b, const char *topic, uint32_t partition,
                           const tn_commit_rec_t *recs, uint32_t n)
{
    tn_buf_reset(b);
    assert_int_equal(tn_wire_put_u8(b, TN_OP_COMMIT), 0);
    assert_int_equal(tn_wire_commit_encode(b, topic, partition, recs, n), 0);
}

static int commit_decode(const tn_buf_t *b, uint32_t max_body, tn_wire_commit_t *c)
{
    char err[256];
    return tn_wire_commit_decode((const uint8_t *)tn_buf_data(b) + 1, tn_buf_size(b) - 1, max_body,
                                 c, err, sizeof(err));
}

/* Records round trip in order (keys empty or not, both times), the size
 * function says the exact length, and the decoder hands out each record
 * once. */
static void test_commit_round_trip(void **state)
{
    (void)state;
    static char big[3000];
    memset(big, 'x', sizeof(big));
    tn_commit_rec_t recs[3] = {
        {tn_iov("", 0), tn_iov("one", 3), 0, 1},
        {tn_iov("key-2", 5), tn_iov(big, sizeof(big)), 1700000000123, 1700000000000},
        {tn_iov("k", 1), tn_iov("", 0), INT64_MAX, 0},
    };
    tn_buf_t b;
    tn_buf_init(&b);
    commit_request(&b, "orders.eu", 7, recs, 3);
    assert_int_equal(tn_buf_size(&b), tn_commit_encoded_size("orders.eu", recs, 3));
    size_t sum = tn_commit_head_size(9);
    for (int i = 0; i < 3; i++)
        sum += tn_commit_rec_size(recs[i].key.len, recs[i].body.len);
    assert_int_equal(sum, tn_buf_size(&b));
    assert_int_equal(tn_wire_request_check(tn_buf_data(&b), tn_buf_size(&b)), 0);

    tn_wire_commit_t c;
    assert_int_equal(commit_decode(&b, 1 << 20, &c), 0);
    assert_string_equal(c.topic, "orders.eu");
    assert_int_equal(c.topic_len, 9);
    assert_int_equal(c.partition, 7);
    assert_int_equal(c.count, 3);
    tn_commit_rec_t got;
    for (int i = 0; i < 3; i++) {
        assert_true(tn_wire_commit_next(&c, &got));
        assert_int_equal(got.key.len, recs[i].key.len);
        assert_memory_equal(got.key.base, recs[i].key.base, got.key.len);
        assert_int_equal(got.body.len, recs[i].body.len);
        assert_memory_equal(got.body.base, recs[i].body.base, got.body.len);
        assert_int_equal(got.deliver_at_ms, recs[i].deliver_at_ms);
        assert_int_equal(got.created_ms, recs[i].created_ms);
    }
    assert_false(tn_wire_commit_next(&c, &got));
    tn_buf_fini(&b);
}

/* What the decoder refuses: every cut, a trailing byte, a count beyond
 * what the bytes hold, a key over 65535 bytes, a body over the limit (its
 * own code), a topic over 255 bytes or with a NUL; and the encoder's
 * refusals. */
/* CONSUME: every field round-trips, the encoded bytes are the documented
 * layout, and every cut, a trailing byte, a bool of 2, an overlong name
 * and the encoder's refusals are refused. */
static void test_consume_codec(void **state)
{
    (void)state;
    tn_wire_consume_t c;
    memset(&c, 0, sizeof(c));
    snprintf(c.topic, sizeof(c.topic), "orders");
    snprintf(c.channel, sizeof(c.channel), "workers");
    c.partition = 7;
    c.pinned = true;
    c.offset = 0x0102030405060708ull;
    c.replay = false;
    c.wait_ms = 5000;
    c.max = 100;
    c.local_only = true;
    snprintf(c.ident, sizeof(c.ident), "alice");
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_consume_encode(&b, &c), 0);
    /* 4+6, 4+7, 4, 1, 8, 1, 8, 4, 1, 4+5 */
    assert_int_equal(tn_buf_size(&b), 10 + 11 + 4 + 1 + 8 + 1 + 8 + 4 + 1 + 9);
    assert_memory_equal((const uint8_t *)tn_buf_data(&b) + tn_buf_size(&b) - 9, "\0\0\0\5alice", 9);
    const uint8_t *p = (const uint8_t *)tn_buf_data(&b);
    assert_memory_equal(p, "\0\0\0\6orders\0\0\0\7workers\0\0\0\7\1", 26);
    tn_wire_consume_t d;
    char err[200];
    assert_int_equal(tn_wire_consume_decode(p, tn_buf_size(&b), &d, err, sizeof(err)), 0);
    assert_string_equal(d.topic, "orders");
    assert_string_equal(d.channel, "workers");
    assert_int_equal(d.partition, 7);
    assert_true(d.pinned);
    assert_true(d.offset == 0x0102030405060708ull);
    assert_false(d.replay);
    assert_int_equal(d.wait_ms, 5000);
    assert_int_equal(d.max, 100);
    assert_true(d.local_only);
    assert_string_equal(d.ident, "alice");
    /* Every cut is refused, with a sentence. */
    for (size_t n = 0; n < tn_buf_size(&b); n++) {
        err[0] = '\0';
        assert_int_equal(tn_wire_consume_decode(p, n, &d, err, sizeof(err)), TN_EPROTO);
        assert_true(err[0] != '\0');
    }
    /* A trailing byte. */
    uint8_t more[128];
    memcpy(more, p, tn_buf_size(&b));
    more[tn_buf_size(&b)] = 0;
    assert_int_equal(tn_wire_consume_decode(more, tn_buf_size(&b) + 1, &d, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "after the last field"));
    /* A bool other than 0 or 1 (pinned is at offset 25). */
    more[25] = 2;
    assert_int_equal(tn_wire_consume_decode(more, tn_buf_size(&b), &d, NULL, 0), TN_EPROTO);
    tn_buf_fini(&b);
    /* A topic of 256 bytes on the wire. */
    tn_buf_init(&b);
    char big[257];
    memset(big, 'a', 256);
    big[256] = '\0';
    assert_int_equal(tn_wire_put_str(&b, big), 0);
    assert_int_equal(tn_wire_put_str(&b, "c"), 0);
    assert_int_equal(tn_wire_consume_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     TN_EPROTO);
    tn_buf_fini(&b);
    /* The encoder's refusals leave the buffer as it was. */
    tn_buf_init(&b);
    tn_buf_append(&b, "x", 1);
    tn_wire_consume_t bad = c;
    bad.topic[0] = '\0';
    assert_int_equal(tn_wire_consume_encode(&b, &bad), UV_EINVAL);
    bad = c;
    bad.channel[0] = '\0';
    assert_int_equal(tn_wire_consume_encode(&b, &bad), UV_EINVAL);
    bad = c;
    bad.wait_ms = -1;
    assert_int_equal(tn_wire_consume_encode(&b, &bad), UV_EINVAL);
    bad = c;
    memset(bad.ident, 'u', sizeof(bad.ident)); /* no NUL within 72 bytes: over 71 */
    assert_int_equal(tn_wire_consume_encode(&b, &bad), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 1);
    /* No user ("" : security off) is 4 zero bytes; a user of 72 bytes on
     * the wire is refused. */
    bad = c;
    bad.ident[0] = '\0';
    tn_buf_t e;
    tn_buf_init(&e);
    assert_int_equal(tn_wire_consume_encode(&e, &bad), 0);
    assert_int_equal(tn_buf_size(&e), 10 + 11 + 4 + 1 + 8 + 1 + 8 + 4 + 1 + 4);
    assert_int_equal(tn_wire_consume_decode(tn_buf_data(&e), tn_buf_size(&e), &d, NULL, 0), 0);
    assert_string_equal(d.ident, "");
    e.len -= 4;
    char longname[73];
    memset(longname, 'u', 72);
    longname[72] = '\0';
    assert_int_equal(tn_wire_put_str(&e, longname), 0);
    assert_int_equal(tn_wire_consume_decode(tn_buf_data(&e), tn_buf_size(&e), &d, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "the user"));
    tn_buf_fini(&e);
    /* The request check knows the op. */
    tn_buf_t r;
    tn_buf_init(&r);
    assert_int_equal(tn_wire_put_u8(&r, TN_OP_CONSUME), 0);
    assert_int_equal(tn_wire_consume_encode(&r, &c), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&r), tn_buf_size(&r)), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&r), tn_buf_size(&r) - 1), TN_EPROTO);
    tn_buf_fini(&r);
    tn_buf_fini(&b);
}

static void test_commit_refusals(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_wire_commit_t c;
    tn_commit_rec_t recs[2] = {
        {tn_iov("k", 1), tn_iov("body", 4), 5, 6},
        {tn_iov("", 0), tn_iov("b2", 2), 0, 7},
    };
    commit_request(&b, "t", 0, recs, 2);
    size_t full = tn_buf_size(&b);
    for (size_t cut = 1; cut < full; cut++) {
        tn_wire_commit_t cc;
        assert_int_equal(tn_wire_commit_decode((const uint8_t *)tn_buf_data(&b) + 1, cut - 1,
                                               1 << 20, &cc, NULL, 0),
                         TN_EPROTO);
        assert_int_equal(tn_wire_request_check(tn_buf_data(&b), cut), TN_EPROTO);
    }
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(commit_decode(&b, 1 << 20, &c), TN_EPROTO);

    /* A body over the limit: TN_ETOOBIG, while the shape check passes. */
    commit_request(&b, "t", 0, recs, 2);
    assert_int_equal(commit_decode(&b, 3, &c), TN_ETOOBIG);
    char err[256];
    assert_int_equal(tn_wire_commit_decode((const uint8_t *)tn_buf_data(&b) + 1,
                                           tn_buf_size(&b) - 1, 3, &c, err, sizeof(err)),
                     TN_ETOOBIG);
    assert_non_null(strstr(err, "record 0"));
    assert_int_equal(commit_decode(&b, 4, &c), 0);

    /* A count of a million in a short payload. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_COMMIT), 0);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1000000), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tn_wire_put_bytes(&b, "", 0), 0);
        assert_int_equal(tn_wire_put_bytes(&b, "", 0), 0);
        assert_int_equal(tn_wire_put_i64(&b, 0), 0);
        assert_int_equal(tn_wire_put_i64(&b, 0), 0);
    }
    assert_int_equal(commit_decode(&b, 1 << 20, &c), TN_EPROTO);

    /* A key of 65536 bytes, built by hand (the encoder refuses it). */
    static char key[TN_COMMIT_KEY_MAX + 1];
    memset(key, 'k', sizeof(key));
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_COMMIT), 0);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_put_bytes(&b, key, sizeof(key)), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "x", 1), 0);
    assert_int_equal(tn_wire_put_i64(&b, 0), 0);
    assert_int_equal(tn_wire_put_i64(&b, 0), 0);
    assert_int_equal(commit_decode(&b, 1 << 20, &c), TN_EPROTO);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&b), tn_buf_size(&b)), TN_EPROTO);
    tn_commit_rec_t kr = {tn_iov(key, sizeof(key)), tn_iov("x", 1), 0, 0};
    assert_int_equal(tn_wire_commit_encode(&b, "t", 0, &kr, 1), UV_EINVAL);
    kr.key.len = TN_COMMIT_KEY_MAX;
    commit_request(&b, "t", 0, &kr, 1);
    assert_int_equal(commit_decode(&b, 1 << 20, &c), 0);

    /* A topic over 255 bytes or holding a NUL. */
    char topic[258];
    memset(topic, 'a', 256);
    topic[256] = '\0';
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_COMMIT), 0);
    assert_int_equal(tn_wire_put_str(&b, topic), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "", 0), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "x", 1), 0);
    assert_int_equal(tn_wire_put_i64(&b, 0), 0);
    assert_int_equal(tn_wire_put_i64(&b, 0), 0);
    assert_int_equal(commit_decode(&b, 1 << 20, &c), TN_EPROTO);
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u8(&b, TN_OP_COMMIT), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "a\0b", 3), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(commit_decode(&b, 1 << 20, &c), TN_EPROTO);

    /* The encoder: no topic, too long a topic, no record, a negative time;
     * b is left as it was. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_commit_encode(&b, "", 0, recs, 1), UV_EINVAL);
    assert_int_equal(tn_wire_commit_encode(&b, topic, 0, recs, 1), UV_EINVAL);
    assert_int_equal(tn_wire_commit_encode(&b, "t", 0, recs, 0), UV_EINVAL);
    tn_commit_rec_t neg = {tn_iov("", 0), tn_iov("x", 1), -1, 0};
    assert_int_equal(tn_wire_commit_encode(&b, "t", 0, &neg, 1), UV_EINVAL);
    neg.deliver_at_ms = 0;
    neg.created_ms = -5;
    assert_int_equal(tn_wire_commit_encode(&b, "t", 0, &neg, 1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
}

/* The encoder leaves nothing behind when memory runs out at any point. */
/* PSTATS: a request round trip, the encoder's and the decoder's refusals
 * (each with its sentence), and the reply codec against the indexes asked
 * for. */
/* MOVE_PROGRESS: the request round-trips and refuses bad shapes; the
 * reply round-trips and refuses unknown bits and fields set without
 * theirs. */
/* REPLICA_ERROR (opcode 19): a follower's append error, or its end (""),
 * round trip and refusals. */
static void test_replerr_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    char err[128];
    tn_wire_replerr_t r = {.node = 3,
                           .incarnation = 99,
                           .topic = "orders",
                           .partition = 7,
                           .leader_epoch = 4,
                           .error = "no space left on device"},
                      d;
    assert_int_equal(tn_wire_replerr_encode(&b, &r), 0);
    assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     0);
    assert_int_equal(d.node, 3);
    assert_int_equal(d.incarnation, 99);
    assert_string_equal(d.topic, "orders");
    assert_int_equal(d.partition, 7);
    assert_int_equal(d.leader_epoch, 4);
    assert_string_equal(d.error, "no space left on device");
    /* Every cut is refused, and so is a byte more. */
    for (size_t n = 0; n < tn_buf_size(&b); n++)
        assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), n, &d, err, sizeof(err)),
                         TN_EPROTO);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "after the error"));
    /* The end of an error: an empty text. */
    tn_buf_reset(&b);
    r.error[0] = '\0';
    assert_int_equal(tn_wire_replerr_encode(&b, &r), 0);
    assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     0);
    assert_string_equal(d.error, "");
    /* Refused to encode: no topic, epoch 0, a control byte, too long. */
    size_t at = tn_buf_size(&b);
    tn_wire_replerr_t bad = r;
    bad.topic[0] = '\0';
    assert_int_equal(tn_wire_replerr_encode(&b, &bad), UV_EINVAL);
    bad = r;
    bad.leader_epoch = 0;
    assert_int_equal(tn_wire_replerr_encode(&b, &bad), UV_EINVAL);
    bad = r;
    snprintf(bad.error, sizeof(bad.error), "a\nb");
    assert_int_equal(tn_wire_replerr_encode(&b, &bad), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), at);
    /* Refused to decode: a control byte, epoch 0, a text over the cap. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u32(&b, 3), 0);
    assert_int_equal(tn_wire_put_u64(&b, 9), 0);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    size_t head = tn_buf_size(&b);
    assert_int_equal(tn_wire_put_str(&b, "a\tb"), 0);
    assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "error text"));
    b.len = head;
    char longer[TN_WIRE_REPLERR_MAX + 2];
    memset(longer, 'e', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    assert_int_equal(tn_wire_put_str(&b, longer), 0);
    assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     TN_EPROTO);
    b.len = head - 4;
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_str(&b, "eio"), 0);
    assert_int_equal(tn_wire_replerr_decode(tn_buf_data(&b), tn_buf_size(&b), &d, err, sizeof(err)),
                     TN_EPROTO);
    tn_buf_fini(&b);
}

static void test_moveprog_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_moveprog_encode(&b, "", 0), UV_EINVAL);
    assert_int_equal(tn_wire_moveprog_encode(&b, "orders", 7), 0);
    tn_wire_moveprog_t w;
    char err[128];
    assert_int_equal(
        tn_wire_moveprog_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)), 0);
    assert_string_equal(w.topic, "orders");
    assert_int_equal(w.partition, 7);
    assert_int_equal(
        tn_wire_moveprog_decode(tn_buf_data(&b), tn_buf_size(&b) - 1, &w, err, sizeof(err)),
        TN_EPROTO);
    assert_non_null(strstr(err, "the partition"));
    assert_int_equal(tn_buf_append(&b, "x", 1), 0);
    assert_int_equal(
        tn_wire_moveprog_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)), TN_EPROTO);
    assert_non_null(strstr(err, "1 bytes after the partition"));
    tn_buf_reset(&b);
    tn_wire_moveprog_reply_t r = {TN_WIRE_MOVEPROG_BYTES | TN_WIRE_MOVEPROG_LAG, 10, 40, 3}, d;
    assert_int_equal(tn_wire_moveprog_reply_encode(&b, &r), 0);
    assert_int_equal(tn_buf_size(&b), TN_WIRE_MOVEPROG_REPLY);
    assert_int_equal(tn_wire_moveprog_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &d), 0);
    /* Field by field: the struct's padding is not the decoder's to set
     * (a byte compare read whatever an earlier test left on the stack). */
    assert_int_equal(d.known, r.known);
    assert_int_equal(d.bytes_copied, r.bytes_copied);
    assert_int_equal(d.bytes_total, r.bytes_total);
    assert_int_equal(d.lag_records, r.lag_records);
    uint8_t raw[TN_WIRE_MOVEPROG_REPLY];
    memcpy(raw, tn_buf_data(&b), sizeof(raw));
    raw[0] = 4; /* an unknown bit */
    assert_int_equal(tn_wire_moveprog_reply_decode(raw, sizeof(raw), &d), TN_EPROTO);
    raw[0] = TN_WIRE_MOVEPROG_LAG; /* bytes set without their bit */
    assert_int_equal(tn_wire_moveprog_reply_decode(raw, sizeof(raw), &d), TN_EPROTO);
    assert_int_equal(tn_wire_moveprog_reply_decode(raw, sizeof(raw) - 1, &d), TN_EPROTO);
    /* Nothing known: every field written 0, whatever r held. */
    tn_buf_reset(&b);
    r.known = 0;
    assert_int_equal(tn_wire_moveprog_reply_encode(&b, &r), 0);
    assert_int_equal(tn_wire_moveprog_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &d), 0);
    assert_true(d.known == 0 && d.bytes_copied == 0 && d.bytes_total == 0 && d.lag_records == 0);
    r.known = 8;
    assert_int_equal(tn_wire_moveprog_reply_encode(&b, &r), UV_EINVAL);
    tn_buf_fini(&b);
}

static void test_pstats_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    static const uint32_t parts[] = {2, 0, 7};
    assert_int_equal(tn_wire_pstats_encode(&b, "orders", parts, 3), 0);
    tn_wire_pstats_t w;
    char err[256];
    assert_int_equal(tn_wire_pstats_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
                     0);
    assert_string_equal(w.topic, "orders");
    assert_int_equal(w.count, 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(tn_wire_pstats_index(&w, i), parts[i]);
    /* Short by a byte, a byte trailing. */
    err[0] = '\0';
    assert_int_equal(
        tn_wire_pstats_decode(tn_buf_data(&b), tn_buf_size(&b) - 1, &w, err, sizeof(err)),
        TN_EPROTO);
    assert_non_null(strstr(err, "need 12 bytes, not 11"));
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_wire_pstats_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
                     TN_EPROTO);

    /* The encoder refuses what the decoder would. */
    size_t before = tn_buf_size(&b);
    assert_int_equal(tn_wire_pstats_encode(&b, "", parts, 1), UV_EINVAL);
    assert_int_equal(tn_wire_pstats_encode(&b, "t", parts, 0), UV_EINVAL);
    assert_int_equal(tn_wire_pstats_encode(&b, "t", parts, TN_PSTATS_MAX + 1), UV_EINVAL);
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = '\0';
    assert_int_equal(tn_wire_pstats_encode(&b, longname, parts, 1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), before);

    /* Decoder refusals: an empty topic, count 0, a count over the cap,
     * a count the payload does not hold. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, ""), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_pstats_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "empty topic"));
    static const uint32_t bad_counts[] = {0, TN_PSTATS_MAX + 1, 0xFFFFFFFFu};
    for (size_t k = 0; k < TN_ARRAY_SIZE(bad_counts); k++) {
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_put_str(&b, "t"), 0);
        assert_int_equal(tn_wire_put_u32(&b, bad_counts[k]), 0);
        assert_int_equal(
            tn_wire_pstats_decode(tn_buf_data(&b), tn_buf_size(&b), &w, err, sizeof(err)),
            TN_EPROTO);
        assert_non_null(strstr(err, "is not 1..65535"));
    }
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_str(&b, "t"), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1000), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_pstats_decode(tn_buf_data(&b), tn_buf_size(&b), &w, NULL, 0),
                     TN_EPROTO);

    /* Replies: numbers for 200 only, statuses in the asked order. */
    tn_wire_pstat_t st[3] = {
        {2, 200, 3, 10, 42, 40, 9000, 5, 4},
        {0, 421, 0, 0, 0, 0, 0, 0, 0},
        {7, 416, 0, 0, 0, 0, 0, 0, 0},
    };
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_pstats_reply_encode(&b, st, 3), 0);
    assert_int_equal(tn_buf_size(&b), 4 + 6 + 52 + 6 + 6);
    tn_wire_pstat_t got[3];
    assert_int_equal(tn_wire_pstats_reply_decode(tn_buf_data(&b), tn_buf_size(&b), parts, 3, got),
                     0);
    assert_int_equal(got[0].partition, 2);
    assert_int_equal(got[0].status, 200);
    assert_int_equal(got[0].segments, 3);
    assert_int_equal(got[0].oldest_offset, 10);
    assert_int_equal(got[0].next_offset, 42);
    assert_int_equal(got[0].high_watermark, 40);
    assert_int_equal(got[0].size_bytes, 9000);
    assert_int_equal(got[0].controls, 5);
    assert_int_equal(got[0].stored_controls, 4);
    assert_int_equal(got[1].status, 421);
    assert_int_equal(got[2].status, 416);
    static const uint32_t other[] = {2, 7, 0};
    assert_int_equal(tn_wire_pstats_reply_decode(tn_buf_data(&b), tn_buf_size(&b), other, 3, got),
                     TN_EPROTO); /* out of order */
    assert_int_equal(tn_wire_pstats_reply_decode(tn_buf_data(&b), tn_buf_size(&b), parts, 2, got),
                     TN_EPROTO); /* another count */
    assert_int_equal(
        tn_wire_pstats_reply_decode(tn_buf_data(&b), tn_buf_size(&b) - 1, parts, 3, got),
        TN_EPROTO);
    /* Counts that cannot be: more control records than offsets, more
     * stored than written. */
    for (int k = 0; k < 2; k++) {
        tn_wire_pstat_t bad = st[0];
        if (k == 0)
            bad.controls = 43;
        else
            bad.stored_controls = 6;
        tn_buf_reset(&b);
        assert_int_equal(tn_wire_pstats_reply_encode(&b, &bad, 1), 0);
        assert_int_equal(
            tn_wire_pstats_reply_decode(tn_buf_data(&b), tn_buf_size(&b), parts, 1, got),
            TN_EPROTO);
    }
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_pstats_reply_encode(&b, st, 3), 0);
    st[1].status = 418;
    before = tn_buf_size(&b);
    assert_int_equal(tn_wire_pstats_reply_encode(&b, st, 3), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), before);
    tn_buf_fini(&b);
}

/* PERRS: the request is PSTATS'; the reply's exact bytes and every
 * refusal of its encoder and decoder. */
/* META_PROPOSE_AT's 200 reply: the answer and the index, exactly 12
 * bytes; anything else is refused and leaves both 0. */
static void test_propose_at_reply_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_propose_at_reply_encode(&b, -17, 0x0102030405060708ull), 0);
    static const uint8_t want[] = {0xff, 0xff, 0xff, 0xef, 1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(tn_buf_size(&b), TN_WIRE_PROPOSE_AT_REPLY);
    assert_memory_equal(tn_buf_data(&b), want, sizeof(want));
    int32_t status = 1;
    uint64_t index = 1;
    assert_int_equal(tn_wire_propose_at_reply_decode(want, sizeof(want), &status, &index), 0);
    assert_int_equal(status, -17);
    assert_true(index == 0x0102030405060708ull);
    for (size_t cut = 0; cut < sizeof(want); cut++) {
        assert_int_equal(tn_wire_propose_at_reply_decode(want, cut, &status, &index), TN_EPROTO);
        assert_int_equal(status, 0);
        assert_true(index == 0);
    }
    uint8_t more[sizeof(want) + 1];
    memcpy(more, want, sizeof(want));
    more[sizeof(want)] = 0;
    assert_int_equal(tn_wire_propose_at_reply_decode(more, sizeof(more), &status, &index),
                     TN_EPROTO);
    tn_buf_fini(&b);
}

static void test_perrs_codec(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    static const uint32_t parts[] = {2, 0, 7};
    tn_wire_perr_t e2[2] = {{3, "no space left on device"}, {5, "i/o error"}};
    assert_int_equal(tn_wire_perrs_reply_start(&b, 3), 0);
    assert_int_equal(tn_wire_perrs_reply_part(&b, 2, e2, 2), 0);
    assert_int_equal(tn_wire_perrs_reply_part(&b, 0, NULL, 0), 0);
    tn_wire_perr_t e7 = {4, "x"};
    assert_int_equal(tn_wire_perrs_reply_part(&b, 7, &e7, 1), 0);
    static const uint8_t want[] = {
        0,   0,   0,   3,                      /* count */
        0,   0,   0,   2,   2,                 /* index 2, two errors */
        0,   0,   0,   3,   0,   0,   0,   23, /* node 3, 23 bytes */
        'n', 'o', ' ', 's', 'p', 'a', 'c', 'e', ' ', 'l', 'e', 'f', 't', ' ', 'o',
        'n', ' ', 'd', 'e', 'v', 'i', 'c', 'e',                               /* */
        0,   0,   0,   5,   0,   0,   0,   9,                                 /* node 5, 9 bytes */
        'i', '/', 'o', ' ', 'e', 'r', 'r', 'o', 'r',                          /* */
        0,   0,   0,   0,   0,                                                /* index 0, none */
        0,   0,   0,   7,   1,   0,   0,   0,   4,   0,   0,   0,   1,   'x', /* index 7, node 4:
                                                                                 "x" */
    };
    assert_int_equal(tn_buf_size(&b), sizeof(want));
    assert_memory_equal(tn_buf_data(&b), want, sizeof(want));

    uint8_t counts[3];
    tn_wire_perr_t got[3];
    size_t total = 99;
    assert_int_equal(tn_wire_perrs_reply_decode(want, sizeof(want), parts, 3, counts, NULL, &total),
                     0);
    assert_int_equal(total, 3);
    assert_int_equal(counts[0], 2);
    assert_int_equal(counts[1], 0);
    assert_int_equal(counts[2], 1);
    memset(counts, 0xff, sizeof(counts));
    assert_int_equal(tn_wire_perrs_reply_decode(want, sizeof(want), parts, 3, counts, got, &total),
                     0);
    assert_int_equal(total, 3);
    assert_int_equal(counts[0], 2);
    assert_int_equal(got[0].node, 3);
    assert_string_equal(got[0].text, "no space left on device");
    assert_int_equal(got[1].node, 5);
    assert_string_equal(got[1].text, "i/o error");
    assert_int_equal(got[2].node, 4);
    assert_string_equal(got[2].text, "x");

    /* Refused: short (every cut), trailing, another count, an index out
     * of order. */
    for (size_t cut = 0; cut < sizeof(want); cut++)
        assert_int_equal(tn_wire_perrs_reply_decode(want, cut, parts, 3, counts, NULL, &total),
                         TN_EPROTO);
    uint8_t more[sizeof(want) + 1];
    memcpy(more, want, sizeof(want));
    more[sizeof(want)] = 0;
    assert_int_equal(tn_wire_perrs_reply_decode(more, sizeof(more), parts, 3, counts, NULL, &total),
                     TN_EPROTO);
    assert_int_equal(tn_wire_perrs_reply_decode(want, sizeof(want), parts, 2, counts, NULL, &total),
                     TN_EPROTO);
    static const uint32_t other[] = {0, 2, 7};
    assert_int_equal(tn_wire_perrs_reply_decode(want, sizeof(want), other, 3, counts, NULL, &total),
                     TN_EPROTO);

    /* Refused by the decoder, byte by byte: n too big, node 0, a text
     * empty, too long, with a control byte (and a NUL). */
    uint8_t one[4 + 5 + 4 + 4 + TN_WIRE_REPLERR_MAX + 1];
    static const uint32_t p0[] = {0};
    struct {
        uint8_t n;
        uint32_t node;
        uint32_t len;
        uint8_t fill;
    } bad[] = {
        {TN_WIRE_PERRS_MAX + 1, 1, 1, 'a'},
        {1, 0, 1, 'a'},
        {1, 1, 0, 'a'},
        {1, 1, TN_WIRE_REPLERR_MAX + 1, 'a'},
        {1, 1, 3, '\n'},
        {1, 1, 3, 0},
        {1, 1, 3, 0x7f},
        {1, 1, 3, 0x80},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        size_t at = 0;
        memset(one, 0, sizeof(one));
        one[3] = 1; /* count 1, index 0 */
        at = 8;
        one[at++] = bad[i].n;
        one[at++] = (uint8_t)(bad[i].node >> 24);
        one[at++] = (uint8_t)(bad[i].node >> 16);
        one[at++] = (uint8_t)(bad[i].node >> 8);
        one[at++] = (uint8_t)bad[i].node;
        one[at++] = 0;
        one[at++] = 0;
        one[at++] = (uint8_t)(bad[i].len >> 8);
        one[at++] = (uint8_t)bad[i].len;
        memset(one + at, bad[i].fill, bad[i].len);
        at += bad[i].len;
        assert_int_equal(tn_wire_perrs_reply_decode(one, at, p0, 1, counts, NULL, &total),
                         TN_EPROTO);
    }
    /* The same frame with a good entry decodes (the refusals above are
     * the field's, not the frame's). */
    tn_buf_reset(&b);
    tn_wire_perr_t longest = {1, ""};
    memset(longest.text, 'a', TN_WIRE_REPLERR_MAX);
    longest.text[TN_WIRE_REPLERR_MAX] = '\0';
    tn_wire_perr_t eight[TN_WIRE_PERRS_MAX];
    for (uint32_t i = 0; i < TN_WIRE_PERRS_MAX; i++)
        eight[i] = longest;
    assert_int_equal(tn_wire_perrs_reply_start(&b, 1), 0);
    assert_int_equal(tn_wire_perrs_reply_part(&b, 0, eight, TN_WIRE_PERRS_MAX), 0);
    assert_int_equal(
        tn_wire_perrs_reply_decode(tn_buf_data(&b), tn_buf_size(&b), p0, 1, counts, NULL, &total),
        0);
    assert_int_equal(total, TN_WIRE_PERRS_MAX);

    /* The encoder refuses what the decoder would, and leaves b as it was. */
    size_t before = tn_buf_size(&b);
    assert_int_equal(tn_wire_perrs_reply_part(&b, 1, eight, TN_WIRE_PERRS_MAX + 1), UV_EINVAL);
    tn_wire_perr_t no[5] = {{0, "x"}, {1, ""}, {1, "a\tb"}, {1, "\x7f"}, {1, "\xc3\xa9"}};
    for (size_t i = 0; i < TN_ARRAY_SIZE(no); i++)
        assert_int_equal(tn_wire_perrs_reply_part(&b, 1, &no[i], 1), UV_EINVAL);
    tn_wire_perr_t toolong;
    toolong.node = 1;
    memset(toolong.text, 'a', sizeof(toolong.text)); /* no NUL within the field */
    assert_int_equal(tn_wire_perrs_reply_part(&b, 1, &toolong, 1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), before);
    /* Out of memory half way leaves b as it was too. */
    for (int fail = 0; fail < 3; fail++) {
        tn_buf_t m;
        tn_buf_init(&m);
        tn_alloc_fail_after(fail);
        int rc = tn_wire_perrs_reply_part(&m, 0, eight, TN_WIRE_PERRS_MAX);
        tn_alloc_fail_after(-1);
        if (rc != 0) {
            assert_int_equal(rc, UV_ENOMEM);
            assert_int_equal(tn_buf_size(&m), 0);
        }
        tn_buf_fini(&m);
    }
    tn_buf_fini(&b);
}

static void test_commit_encode_out_of_memory(void **state)
{
    (void)state;
    tn_commit_rec_t recs[2] = {
        {tn_iov("k", 1), tn_iov("body", 4), 5, 6},
        {tn_iov("", 0), tn_iov("b2", 2), 0, 7},
    };
    for (int fail = 0; fail < 3; fail++) {
        tn_buf_t b;
        tn_buf_init(&b);
        assert_int_equal(tn_buf_append(&b, "x", 1), 0);
        tn_alloc_fail_after(fail);
        int rc = tn_wire_commit_encode(&b, "t", 0, recs, 2);
        tn_alloc_fail_after(-1);
        if (rc != 0) {
            assert_int_equal(rc, UV_ENOMEM);
            assert_int_equal(tn_buf_size(&b), 1);
        }
        tn_buf_fini(&b);
    }
}

/* --- the secret proof --------------------------------------------------------------- */

static void test_hmac_rfc4231(void **state)
{
    (void)state;
    uint8_t out[32];
    /* RFC 4231 test case 1. */
    uint8_t key1[20];
    memset(key1, 0x0b, sizeof(key1));
    static const uint8_t mac1[32] = {0xb0, 0x34, 0x4c, 0x61, 0xd8, 0xdb, 0x38, 0x53,
                                     0x5c, 0xa8, 0xaf, 0xce, 0xaf, 0x0b, 0xf1, 0x2b,
                                     0x88, 0x1d, 0xc2, 0x00, 0xc9, 0x83, 0x3d, 0xa7,
                                     0x26, 0xe9, 0x37, 0x6c, 0x2e, 0x32, 0xcf, 0xf7};
    assert_int_equal(tn_wire_hmac_sha256(key1, sizeof(key1), "Hi There", 8, out), 0);
    assert_memory_equal(out, mac1, 32);
    /* Test case 2: a key shorter than the output. */
    static const uint8_t mac2[32] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e,
                                     0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                                     0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83,
                                     0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
    const char *data2 = "what do ya want for nothing?";
    assert_int_equal(tn_wire_hmac_sha256((const uint8_t *)"Jefe", 4, data2, strlen(data2), out), 0);
    assert_memory_equal(out, mac2, 32);
}

static const uint8_t secret[] = "a cluster secret of some length";

static void test_proof(void **state)
{
    (void)state;
    uint8_t ekm[TN_WIRE_EKM_LEN];
    for (size_t i = 0; i < sizeof(ekm); i++)
        ekm[i] = (uint8_t)(i * 7 + 1);
    uint8_t pc[TN_WIRE_PROOF_LEN], ps[TN_WIRE_PROOF_LEN], want[TN_WIRE_PROOF_LEN];
    assert_int_equal(tn_wire_proof(secret, sizeof(secret) - 1, true, ekm, pc), 0);
    assert_int_equal(tn_wire_proof(secret, sizeof(secret) - 1, false, ekm, ps), 0);
    assert_memory_not_equal(pc, ps, TN_WIRE_PROOF_LEN); /* the roles differ */

    /* The proof is HMAC(secret, role || ekm), as documented. */
    static const char *const roles[] = {"client", "server"};
    const uint8_t *proofs[] = {pc, ps};
    for (int i = 0; i < 2; i++) {
        tn_buf_t msg;
        tn_buf_init(&msg);
        assert_int_equal(tn_buf_append(&msg, roles[i], 6), 0);
        assert_int_equal(tn_buf_append(&msg, ekm, sizeof(ekm)), 0);
        assert_int_equal(tn_wire_hmac_sha256(secret, sizeof(secret) - 1, tn_buf_data(&msg),
                                             tn_buf_size(&msg), want),
                         0);
        assert_memory_equal(proofs[i], want, TN_WIRE_PROOF_LEN);
        tn_buf_fini(&msg);
    }

    assert_true(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, pc, sizeof(pc)));
    assert_true(tn_wire_proof_check(secret, sizeof(secret) - 1, false, ekm, ps, sizeof(ps)));
    /* A proof of one role does not pass for the other. */
    assert_false(tn_wire_proof_check(secret, sizeof(secret) - 1, false, ekm, pc, sizeof(pc)));
    assert_false(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, ps, sizeof(ps)));
    /* Any flipped bit of the ekm, the proof or the secret fails. */
    for (size_t bit = 0; bit < 8 * TN_WIRE_EKM_LEN; bit++) {
        ekm[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_false(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, pc, sizeof(pc)));
        ekm[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    for (size_t bit = 0; bit < 8 * TN_WIRE_PROOF_LEN; bit++) {
        pc[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_false(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, pc, sizeof(pc)));
        pc[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    uint8_t other[sizeof(secret)];
    memcpy(other, secret, sizeof(secret));
    other[0] ^= 1;
    assert_false(tn_wire_proof_check(other, sizeof(secret) - 1, true, ekm, pc, sizeof(pc)));
    /* Wrong lengths, even with the right prefix. */
    uint8_t longer[TN_WIRE_PROOF_LEN + 1];
    memcpy(longer, pc, sizeof(pc));
    longer[TN_WIRE_PROOF_LEN] = 0;
    assert_false(
        tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, longer, sizeof(longer)));
    assert_false(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, pc, sizeof(pc) - 1));
    assert_false(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, pc, 0));
    assert_true(tn_wire_proof_check(secret, sizeof(secret) - 1, true, ekm, pc, sizeof(pc)));
    /* An empty secret proves nothing. */
    assert_int_equal(tn_wire_proof(secret, 0, true, ekm, want), UV_EINVAL);
    assert_false(tn_wire_proof_check(secret, 0, true, ekm, pc, sizeof(pc)));
}

static void test_auth_check(void **state)
{
    (void)state;
    uint8_t ekm[TN_WIRE_EKM_LEN] = {9, 8, 7};
    uint8_t pc[TN_WIRE_PROOF_LEN];
    assert_int_equal(tn_wire_proof(secret, sizeof(secret) - 1, true, ekm, pc), 0);
    tn_wire_hdr_t h = {.type = TN_WF_AUTH, .id = 0, .len = TN_WIRE_PROOF_LEN};
    assert_int_equal(tn_wire_auth_check(secret, sizeof(secret) - 1, true, ekm, &h, pc), 0);
    assert_int_equal(tn_wire_auth_check(secret, sizeof(secret) - 1, false, ekm, &h, pc), UV_EACCES);
    pc[31] ^= 0x80;
    assert_int_equal(tn_wire_auth_check(secret, sizeof(secret) - 1, true, ekm, &h, pc), UV_EACCES);
    pc[31] ^= 0x80;
    h.type = TN_WF_REQUEST; /* a request before the proof */
    assert_int_equal(tn_wire_auth_check(secret, sizeof(secret) - 1, true, ekm, &h, pc), TN_EPROTO);
    h.type = TN_WF_AUTH;
    h.len = TN_WIRE_PROOF_LEN - 1;
    assert_int_equal(tn_wire_auth_check(secret, sizeof(secret) - 1, true, ekm, &h, pc), TN_EPROTO);
}

static void test_reset_key(void **state)
{
    (void)state;
    uint8_t k1[32], k2[32], want[32];
    assert_int_equal(tn_wire_reset_key(secret, sizeof(secret) - 1, k1), 0);
    assert_int_equal(tn_wire_reset_key(secret, sizeof(secret) - 1, k2), 0);
    assert_memory_equal(k1, k2, 32); /* every node of a cluster derives the same key */
    const char *ctx = "tern-quic-stateless-reset-v1";
    assert_int_equal(tn_wire_hmac_sha256(secret, sizeof(secret) - 1, ctx, strlen(ctx), want), 0);
    assert_memory_equal(k1, want, 32);
    assert_int_equal(tn_wire_reset_key(secret, sizeof(secret) - 2, k2), 0);
    assert_memory_not_equal(k1, k2, 32);
    assert_int_equal(tn_wire_reset_key(secret, 0, k2), UV_EINVAL);
}

/* --- backoff ------------------------------------------------------------------------- */

static void test_backoff(void **state)
{
    (void)state;
    assert_int_equal(tn_wire_backoff_ms(0), 0);
    assert_int_equal(tn_wire_backoff_ms(1), 250);
    assert_int_equal(tn_wire_backoff_ms(2), 500);
    assert_int_equal(tn_wire_backoff_ms(3), 1000);
    assert_int_equal(tn_wire_backoff_ms(4), 2000);
    assert_int_equal(tn_wire_backoff_ms(5), 2000);
    assert_int_equal(tn_wire_backoff_ms(100), 2000);
    assert_int_equal(tn_wire_backoff_ms(UINT32_MAX), 2000);
}

/* --- SETTLE --------------------------------------------------------------------------- */

static void test_settle_round_trip(void **state)
{
    (void)state;
    tn_wire_handle_t h[TN_SETTLE_MAX];
    for (uint32_t i = 0; i < TN_SETTLE_MAX; i++)
        h[i] = (tn_wire_handle_t){i, UINT64_MAX - i, UINT32_MAX - i};
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_settle_encode(&b, "orders", "billing", TN_WIRE_SETTLE_EXTEND, 30000, h,
                                           TN_SETTLE_MAX),
                     0);
    /* 4+6, 4+7, how, visibility, count, and 16 bytes a handle. */
    assert_int_equal(tn_buf_size(&b), 10 + 11 + 1 + 8 + 4 + 16 * TN_SETTLE_MAX);
    tn_wire_settle_t *w = malloc(sizeof(*w));
    assert_non_null(w);
    char err[256];
    assert_int_equal(tn_wire_settle_decode(tn_buf_data(&b), tn_buf_size(&b), w, err, sizeof(err)),
                     0);
    assert_string_equal(w->topic, "orders");
    assert_string_equal(w->channel, "billing");
    assert_int_equal(w->how, TN_WIRE_SETTLE_EXTEND);
    assert_int_equal(w->visibility_ms, 30000);
    assert_int_equal(w->count, TN_SETTLE_MAX);
    for (uint32_t i = 0; i < TN_SETTLE_MAX; i++) {
        assert_int_equal(w->h[i].partition, i);
        assert_true(w->h[i].offset == UINT64_MAX - i);
        assert_int_equal(w->h[i].nonce, UINT32_MAX - i);
    }
    /* Every cut is refused, and so is a trailing byte. */
    for (size_t cut = 0; cut < tn_buf_size(&b); cut++)
        assert_int_equal(tn_wire_settle_decode(tn_buf_data(&b), cut, w, NULL, 0), TN_EPROTO);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_wire_settle_decode(tn_buf_data(&b), tn_buf_size(&b), w, err, sizeof(err)),
                     TN_EPROTO);
    assert_non_null(strstr(err, "after the last handle"));
    free(w);
    tn_buf_fini(&b);
}

/* A request with these head fields and count handles of zeros. */
static void settle_raw(tn_buf_t *b, const char *topic, const char *channel, uint8_t how,
                       int64_t vis, uint32_t count)
{
    tn_buf_reset(b);
    assert_int_equal(tn_wire_put_str(b, topic), 0);
    assert_int_equal(tn_wire_put_str(b, channel), 0);
    assert_int_equal(tn_wire_put_u8(b, how), 0);
    assert_int_equal(tn_wire_put_i64(b, vis), 0);
    assert_int_equal(tn_wire_put_u32(b, count), 0);
    for (uint32_t i = 0; i < count && i <= TN_SETTLE_MAX; i++) {
        assert_int_equal(tn_wire_put_u32(b, 0), 0);
        assert_int_equal(tn_wire_put_u64(b, 0), 0);
        assert_int_equal(tn_wire_put_u32(b, 1), 0);
    }
}

static void test_settle_refusals(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_wire_settle_t *w = malloc(sizeof(*w));
    assert_non_null(w);
    char err[256];
    settle_raw(&b, "t", "c", TN_WIRE_SETTLE_NACK, 0, 1);
    assert_int_equal(tn_wire_settle_decode(tn_buf_data(&b), tn_buf_size(&b), w, err, sizeof(err)),
                     0);
    struct {
        const char *topic, *channel;
        uint8_t how;
        int64_t vis;
        uint32_t count;
        const char *says;
    } bad[] = {
        {"", "c", 1, 0, 1, "empty topic"},
        {"t", "", 1, 0, 1, "empty topic or channel"},
        {"t", "c", 0, 0, 1, "how 0"},
        {"t", "c", 4, 0, 1, "how 4"},
        {"t", "c", 1, -1, 1, "negative visibility"},
        {"t", "c", 1, 0, 0, "count 0"},
        {"t", "c", 1, 0, TN_SETTLE_MAX + 1, "count 101"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        settle_raw(&b, bad[i].topic, bad[i].channel, bad[i].how, bad[i].vis, bad[i].count);
        err[0] = '\0';
        assert_int_equal(
            tn_wire_settle_decode(tn_buf_data(&b), tn_buf_size(&b), w, err, sizeof(err)),
            TN_EPROTO);
        assert_non_null(strstr(err, bad[i].says));
    }
    /* A name over 255 bytes. */
    char longname[257];
    memset(longname, 'a', 256);
    longname[256] = '\0';
    settle_raw(&b, longname, "c", 1, 0, 1);
    assert_int_equal(tn_wire_settle_decode(tn_buf_data(&b), tn_buf_size(&b), w, NULL, 0),
                     TN_EPROTO);
    /* The encoder refuses the same values. */
    tn_wire_handle_t h = {0, 0, 1};
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_settle_encode(&b, "", "c", 1, 0, &h, 1), UV_EINVAL);
    assert_int_equal(tn_wire_settle_encode(&b, "t", longname, 1, 0, &h, 1), UV_EINVAL);
    assert_int_equal(tn_wire_settle_encode(&b, "t", "c", 0, 0, &h, 1), UV_EINVAL);
    assert_int_equal(tn_wire_settle_encode(&b, "t", "c", 1, -5, &h, 1), UV_EINVAL);
    assert_int_equal(tn_wire_settle_encode(&b, "t", "c", 1, 0, &h, 0), UV_EINVAL);
    assert_int_equal(tn_wire_settle_encode(&b, "t", "c", 1, 0, &h, TN_SETTLE_MAX + 1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    free(w);
    tn_buf_fini(&b);
}

static void test_settle_reply(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    const uint16_t st[5] = {204, 410, 503, 421, 500};
    assert_int_equal(tn_wire_settle_reply_encode(&b, st, 5), 0);
    assert_int_equal(tn_buf_size(&b), 4 + 2 * 5);
    uint16_t out[5];
    assert_int_equal(tn_wire_settle_reply_decode(tn_buf_data(&b), tn_buf_size(&b), 5, out), 0);
    assert_memory_equal(out, st, sizeof(st));
    /* Another count than asked, a cut, a trailing byte, a status SETTLE
     * never answers. */
    assert_int_equal(tn_wire_settle_reply_decode(tn_buf_data(&b), tn_buf_size(&b), 4, out),
                     TN_EPROTO);
    assert_int_equal(tn_wire_settle_reply_decode(tn_buf_data(&b), tn_buf_size(&b) - 1, 5, out),
                     TN_EPROTO);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_wire_settle_reply_decode(tn_buf_data(&b), tn_buf_size(&b), 5, out),
                     TN_EPROTO);
    /* The fuzz corpus's reply-status-500: one handle, a channel log
     * failure (500), decodes. */
    const uint8_t one500[] = {0, 0, 0, 1, 0x01, 0xf4};
    assert_int_equal(tn_wire_settle_reply_decode(one500, sizeof(one500), 1, out), 0);
    assert_int_equal(out[0], 500);
    const uint16_t odd[1] = {200};
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_settle_reply_encode(&b, odd, 1), 0);
    assert_int_equal(tn_wire_settle_reply_decode(tn_buf_data(&b), tn_buf_size(&b), 1, out),
                     TN_EPROTO);
    tn_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_round_trip),
        cmocka_unit_test(test_hdr_refusals),
        cmocka_unit_test(test_frame_append),
        cmocka_unit_test(test_framer_byte_by_byte),
        cmocka_unit_test(test_framer_odd_chunks),
        cmocka_unit_test(test_framer_one_push),
        cmocka_unit_test(test_framer_holds_only_incomplete),
        cmocka_unit_test(test_framer_proof_cap),
        cmocka_unit_test(test_framer_sticky),
        cmocka_unit_test(test_framer_callback_raises_max),
        cmocka_unit_test(test_framer_out_of_memory),
        cmocka_unit_test(test_writers_out_of_memory),
        cmocka_unit_test(test_fields_round_trip),
        cmocka_unit_test(test_fields_short),
        cmocka_unit_test(test_fields_overlong_trailing_bool),
        cmocka_unit_test(test_reply_codec),
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_request_check),
        cmocka_unit_test(test_commit_round_trip),
        cmocka_unit_test(test_settle_round_trip),
        cmocka_unit_test(test_settle_refusals),
        cmocka_unit_test(test_settle_reply),
        cmocka_unit_test(test_commit_refusals),
        cmocka_unit_test(test_consume_codec),
        cmocka_unit_test(test_pstats_codec),
        cmocka_unit_test(test_perrs_codec),
        cmocka_unit_test(test_propose_at_reply_codec),
        cmocka_unit_test(test_moveprog_codec),
        cmocka_unit_test(test_replerr_codec),
        cmocka_unit_test(test_commit_encode_out_of_memory),
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_proof),
        cmocka_unit_test(test_auth_check),
        cmocka_unit_test(test_reset_key),
        cmocka_unit_test(test_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
