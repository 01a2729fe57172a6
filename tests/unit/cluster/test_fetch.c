/* The FETCH frame codec (cluster/fetch.h): request and reply round trips
 * with several partitions, every status, epochs and records, and the
 * FLUSHED report's; every cut of a good frame refused; counts, statuses and epoch counts out of
 * range refused; writers leave the buffer as it was when they refuse. */
#include "core/platform.h"

#include "testutil.h"

#include "cluster/fetch.h"
#include "cluster/wire.h"
#include "core/err.h"

#include <string.h>

static void make_request(tn_buf_t *b)
{
    assert_int_equal(tn_fetch_req_put_head(b, 3, 0x1122334455667788ull, 500, 1 << 20, 2), 0);
    tn_fetch_part_t a = {.topic = "orders",
                         .partition = 7,
                         .leader_epoch = 4,
                         .fetch_offset = 1000,
                         .last_fetched_epoch = 3,
                         .flushed_offset = 998,
                         .partition_epoch = 12};
    tn_fetch_part_t z = {.topic = "x", .partition = 0, .leader_epoch = 1};
    assert_int_equal(tn_fetch_req_put_part(b, &a), 0);
    assert_int_equal(tn_fetch_req_put_part(b, &z), 0);
}

static void test_request_round_trip(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    make_request(&b);
    tn_fetch_req_t r;
    assert_int_equal(tn_fetch_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), 0);
    assert_int_equal(r.node, 3);
    assert_true(r.incarnation == 0x1122334455667788ull);
    assert_int_equal(r.wait_ms, 500);
    assert_int_equal(r.max_bytes, 1 << 20);
    assert_int_equal(r.count, 2);
    tn_fetch_part_t p;
    assert_int_equal(tn_fetch_req_next(&r, &p), 0);
    assert_string_equal(p.topic, "orders");
    assert_int_equal(p.partition, 7);
    assert_int_equal(p.leader_epoch, 4);
    assert_true(p.fetch_offset == 1000);
    assert_int_equal(p.last_fetched_epoch, 3);
    assert_true(p.flushed_offset == 998);
    assert_int_equal(p.partition_epoch, 12);
    assert_int_equal(tn_fetch_req_next(&r, &p), 0);
    assert_string_equal(p.topic, "x");
    assert_int_equal(tn_fetch_req_next(&r, &p), TN_ENOTFOUND);
    /* Every cut, and a byte more, is refused. */
    for (size_t n = 0; n < tn_buf_size(&b); n++)
        assert_int_equal(tn_fetch_req_decode(tn_buf_data(&b), n, &r), TN_EPROTO);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_fetch_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_fini(&b);
}

static void test_request_refusals(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_fetch_req_put_head(&b, 1, 1, 0, 0, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_req_put_head(&b, 1, 1, 0, 0, TN_FETCH_MAX_PARTS + 1), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_fetch_part_t empty = {.topic = ""};
    assert_int_equal(tn_fetch_req_put_part(&b, &empty), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    /* A count that does not match the partitions that follow. */
    assert_int_equal(tn_fetch_req_put_head(&b, 1, 1, 0, 0, 2), 0);
    tn_fetch_part_t one = {.topic = "t"};
    assert_int_equal(tn_fetch_req_put_part(&b, &one), 0);
    tn_fetch_req_t r;
    assert_int_equal(tn_fetch_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    /* A count of 0 written by hand. */
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_fetch_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    /* An empty topic written by hand. */
    tn_buf_reset(&b);
    assert_int_equal(tn_fetch_req_put_head(&b, 1, 1, 0, 0, 1), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "", 0), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_fetch_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    /* The RPC server's shape check agrees. */
    tn_buf_t req;
    tn_buf_init(&req);
    assert_int_equal(tn_wire_put_u8(&req, TN_OP_FETCH), 0);
    make_request(&req);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req)), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req) - 1), TN_EPROTO);
    tn_buf_fini(&req);
    tn_buf_fini(&b);
}

/* The FLUSHED report (TN_OP_FLUSHED: its header, then FETCH's partition
 * layout): round trip, every cut, refusals. */
static void test_flushed_round_trip(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_flushed_req_put_head(&b, 3, 0x1122334455667788ull, 2), 0);
    tn_fetch_part_t a = {.topic = "orders",
                         .partition = 7,
                         .leader_epoch = 4,
                         .fetch_offset = 1002,
                         .last_fetched_epoch = 4,
                         .flushed_offset = 1000,
                         .partition_epoch = 12};
    tn_fetch_part_t z = {.topic = "x", .partition = 0, .leader_epoch = 1};
    assert_int_equal(tn_fetch_req_put_part(&b, &a), 0);
    assert_int_equal(tn_fetch_req_put_part(&b, &z), 0);
    tn_flushed_req_t r;
    assert_int_equal(tn_flushed_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), 0);
    assert_int_equal(r.node, 3);
    assert_true(r.incarnation == 0x1122334455667788ull);
    assert_int_equal(r.count, 2);
    tn_fetch_part_t p;
    assert_int_equal(tn_flushed_req_next(&r, &p), 0);
    assert_string_equal(p.topic, "orders");
    assert_int_equal(p.partition, 7);
    assert_int_equal(p.leader_epoch, 4);
    assert_true(p.fetch_offset == 1002);
    assert_int_equal(p.last_fetched_epoch, 4);
    assert_true(p.flushed_offset == 1000);
    assert_int_equal(p.partition_epoch, 12);
    assert_int_equal(tn_flushed_req_next(&r, &p), 0);
    assert_string_equal(p.topic, "x");
    assert_int_equal(p.leader_epoch, 1);
    assert_int_equal(tn_flushed_req_next(&r, &p), TN_ENOTFOUND);
    /* Every cut, and a byte more, is refused; the server's check agrees. */
    for (size_t n = 0; n < tn_buf_size(&b); n++)
        assert_int_equal(tn_flushed_req_decode(tn_buf_data(&b), n, &r), TN_EPROTO);
    tn_buf_t req;
    tn_buf_init(&req);
    assert_int_equal(tn_wire_put_u8(&req, TN_OP_FLUSHED), 0);
    assert_int_equal(tn_buf_append(&req, tn_buf_data(&b), tn_buf_size(&b)), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req)), 0);
    assert_int_equal(tn_wire_request_check(tn_buf_data(&req), tn_buf_size(&req) - 1), TN_EPROTO);
    tn_buf_fini(&req);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_flushed_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);

    /* Writers refuse a count out of range and an empty or long topic,
     * leaving the buffer as it was. */
    tn_buf_reset(&b);
    assert_int_equal(tn_flushed_req_put_head(&b, 1, 1, 0), UV_EINVAL);
    assert_int_equal(tn_flushed_req_put_head(&b, 1, 1, TN_FETCH_MAX_PARTS + 1), UV_EINVAL);
    tn_fetch_part_t empty = {.topic = ""};
    assert_int_equal(tn_fetch_req_put_part(&b, &empty), UV_EINVAL);
    tn_fetch_part_t long_topic;
    memset(&long_topic, 0, sizeof(long_topic));
    memset(long_topic.topic, 'a', 255);
    assert_int_equal(tn_fetch_req_put_part(&b, &long_topic), 0); /* 255 is the most */
    tn_buf_reset(&b);
    /* A count that does not match; a count of 0 and an empty topic
     * written by hand. */
    assert_int_equal(tn_flushed_req_put_head(&b, 1, 1, 2), 0);
    assert_int_equal(tn_fetch_req_put_part(&b, &z), 0);
    assert_int_equal(tn_flushed_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_reset(&b);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    assert_int_equal(tn_wire_put_u64(&b, 1), 0);
    assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_flushed_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_reset(&b);
    assert_int_equal(tn_flushed_req_put_head(&b, 1, 1, 1), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "", 0), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(tn_wire_put_u32(&b, 0), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_flushed_req_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_fini(&b);
}

static void test_reply_round_trip(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_epoch_entry_t ep[2] = {{3, 90}, {4, 100}};
    assert_int_equal(tn_fetch_reply_put_head(&b, 8), 0);
    assert_int_equal(tn_fetch_reply_put_records(&b, 95, 90, 12, ep, 2, "recordbytes", 11), 0);
    assert_int_equal(tn_fetch_reply_put_records(&b, 7, 7, 0, NULL, 0, NULL, 0), 0);
    assert_int_equal(tn_fetch_reply_put_diverging(&b, 5, 2, 40), 0);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_FENCED, 1), 0);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_NOT_LEADER, 0), 0);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_ERROR, 0), 0);
    assert_int_equal(tn_fetch_reply_put_out_of_range(&b, 900, 800), 0);
    assert_int_equal(tn_fetch_reply_put_gap(&b, 30, 4000), 0);
    tn_fetch_reply_t r;
    assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), 0);
    assert_int_equal(r.count, 8);
    tn_fetch_rpart_t p;
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_int_equal(p.status, TN_FETCH_RECORDS);
    assert_true(p.hw == 95 && p.from == 90 && p.count == 12 && p.nepochs == 2);
    tn_epoch_entry_t e;
    tn_fetch_rpart_epoch(&p, 1, &e);
    assert_true(e.epoch == 4 && e.start == 100);
    tn_fetch_rpart_epoch(&p, 0, &e);
    assert_true(e.epoch == 3 && e.start == 90);
    assert_int_equal(p.records_len, 11);
    assert_memory_equal(p.records, "recordbytes", 11);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_true(p.status == TN_FETCH_RECORDS && p.count == 0 && p.records_len == 0 && p.hw == 7);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_true(p.status == TN_FETCH_DIVERGING && p.epoch == 2 && p.end_offset == 40);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_int_equal(p.status, TN_FETCH_FENCED);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_int_equal(p.status, TN_FETCH_NOT_LEADER);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_int_equal(p.status, TN_FETCH_ERROR);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_true(p.status == TN_FETCH_OUT_OF_RANGE && p.hw == 900 && p.end_offset == 800);
    assert_int_equal(tn_fetch_reply_next(&r, &p), 0);
    assert_true(p.status == TN_FETCH_GAP && p.hw == 30 && p.end_offset == 4000);
    assert_int_equal(tn_fetch_reply_next(&r, &p), TN_ENOTFOUND);
    for (size_t n = 0; n < tn_buf_size(&b); n++)
        assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), n, &r), TN_EPROTO);
    assert_int_equal(tn_buf_append(&b, "", 1), 0);
    assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_fini(&b);
}

static void test_reply_refusals(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_fetch_reply_put_head(&b, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_RECORDS, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_DIVERGING, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_OUT_OF_RANGE, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH_GAP, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_reply_put_status(&b, TN_FETCH__STATUS_COUNT, 0), UV_EINVAL);
    assert_int_equal(tn_fetch_reply_put_records(&b, 0, 0, 1, NULL, TN_FETCH_MAX_EPOCHS + 1, "r", 1),
                     UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_fetch_reply_t r;
    /* An unknown status. */
    assert_int_equal(tn_fetch_reply_put_head(&b, 1), 0);
    assert_int_equal(tn_wire_put_u16(&b, TN_FETCH__STATUS_COUNT), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    /* Too many epochs, and epochs past the end. */
    tn_buf_reset(&b);
    assert_int_equal(tn_fetch_reply_put_head(&b, 1), 0);
    assert_int_equal(tn_wire_put_u16(&b, TN_FETCH_RECORDS), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_wire_put_u64(&b, 0), 0);
    assert_int_equal(tn_wire_put_u32(&b, 1), 0);
    size_t at = tn_buf_size(&b);
    assert_int_equal(tn_wire_put_u32(&b, TN_FETCH_MAX_EPOCHS + 1), 0);
    assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    b.len = at;
    assert_int_equal(tn_wire_put_u32(&b, 1000), 0);
    assert_int_equal(tn_wire_put_bytes(&b, "r", 1), 0);
    assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    /* Records with a count of 0. */
    tn_buf_reset(&b);
    assert_int_equal(tn_fetch_reply_put_head(&b, 1), 0);
    assert_int_equal(tn_fetch_reply_put_records(&b, 0, 0, 0, NULL, 0, "r", 1), 0);
    assert_int_equal(tn_fetch_reply_decode(tn_buf_data(&b), tn_buf_size(&b), &r), TN_EPROTO);
    tn_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_round_trip), cmocka_unit_test(test_request_refusals),
        cmocka_unit_test(test_flushed_round_trip), cmocka_unit_test(test_reply_round_trip),
        cmocka_unit_test(test_reply_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
