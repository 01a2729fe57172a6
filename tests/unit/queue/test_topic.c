/* Tests of a publish whose records carry delivery times of their own
 * (tn_pub_set_deliver_at, queue.h): the batch is one append (dense offsets
 * in one partition), each record keeps its own time in the tail cache and
 * on disk (read back after a restart), records without one take the
 * publish's, only the records due are delivered, the setter refuses
 * what it cannot take, and tn_pub_fill copies in whole records (body, key,
 * own time) as the ingress log's commits do. The broker's append check
 * (tn_broker_set_append_check) refuses an append, nothing written, also
 * for a publish that waited for its topic to be made, and for one to a
 * topic the caller found ready (tn_topic_publish). */
#include "core/platform.h"

#include "fixture_queue.h"

#include "core/err.h"
#include "core/time.h"
#include "queue/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 16

typedef struct {
    tn_consumer_t c;
    uint64_t offsets[MAXD];
    int n;
} sink_t;

static void on_deliver(tn_consumer_t *c, const tn_delivery_t *d)
{
    sink_t *s = c->data;
    assert_true(s->n < MAXD);
    s->offsets[s->n++] = d->offset;
}

/* The topic tests' fixture: memory logs of 100 records and 1 MiB, and
 * waits of up to 10 s. */
static qfx_t *new_qfx(void)
{
    qfx_t *q = qfx_new(qfx_small_memlogs, NULL);
    q->wait_ms = 10000;
    return q;
}

/* Publish w->p (set up by the caller) with the publish's own time at;
 * returns the final status. */
static int publish(qfx_t *q, qfx_pubw_t *w, const char *topic, int64_t at)
{
    w->p.data = w;
    int rc = tn_broker_publish(q->b, topic, strlen(topic), &w->p, at, qfx_on_pub);
    if (rc == 0) {
        assert_true(qfx_run_until(q, qfx_pub_done, w));
        rc = w->status;
    }
    return rc;
}

/* The record at offset of partition 0, read from disk when it is not in
 * the cache. */
static const tn_centry_t *record(qfx_t *q, tn_topic_t *t, uint64_t offset)
{
    const tn_centry_t *e = NULL;
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    int rc = tn_part_record(t, 0, offset, &w.w, &e);
    if (rc == UV_EAGAIN) {
        qfx_wait(q, &w, 0);
        rc = tn_part_record(t, 0, offset, NULL, &e);
    }
    assert_int_equal(rc, 0);
    return e;
}

static void expect_record(const tn_centry_t *e, const char *body, const char *key, int64_t at)
{
    assert_non_null(e->body);
    assert_int_equal(e->body->len, strlen(body));
    assert_memory_equal(e->body->data, body, strlen(body));
    if (key == NULL) {
        assert_null(e->key);
    } else {
        assert_non_null(e->key);
        assert_int_equal(e->key->len, strlen(key));
        assert_memory_equal(e->key->data, key, strlen(key));
    }
    assert_int_equal(e->deliver_at_ms, at);
}

/* --- tests ------------------------------------------------------------------ */

/* Four records, one append: the first takes the publish's time (an hour
 * ahead), the second its own 0 (at once), the third its own past time, the
 * fourth its own time a day ahead. The offsets are dense in one partition,
 * the cache and the disk keep each time, and only the two due records are
 * delivered. */
static void test_own_times_one_append(void **state)
{
    (void)state;
    qfx_t *q = new_qfx();
    tn_topic_t *t = qfx_topic(q, "t", 0);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    int64_t now = tn_now_wall_ms();
    int64_t hour = now + 3600 * 1000, past = now - 5000, day = now + 86400 * 1000;

    qfx_pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 4), 0);
    const char *bodies[4] = {"default", "now", "past", "later"};
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(tn_pub_set(&w.p, i, bodies[i], strlen(bodies[i])), 0);
    assert_int_equal(tn_pub_set_key(&w.p, 1, "k1", 2), 0);
    assert_int_equal(tn_pub_set_deliver_at(&w.p, 1, 0), 0);
    assert_int_equal(tn_pub_set_deliver_at(&w.p, 2, past), 0);
    assert_int_equal(tn_pub_set_deliver_at(&w.p, 3, day), 0);
    assert_int_equal(publish(q, &w, "t", hour), 0);
    assert_int_equal(w.p.partition, 0);
    assert_int_equal(w.p.first_offset, 0);
    tn_pub_fini(&w.p);

    int64_t want[4] = {hour, 0, past, day};
    for (uint64_t i = 0; i < 4; i++)
        expect_record(record(q, t, i), bodies[i], i == 1 ? "k1" : NULL, want[i]);

    sink_t s;
    memset(&s, 0, sizeof(s));
    s.c.deliver = on_deliver;
    s.c.data = &s;
    s.c.timeout_ms = 60000;
    tn_consumer_attach(&s.c, ch);
    tn_consumer_credit(&s.c, 8);
    qfx_run_for(q, 300);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.offsets[0], 1);
    assert_int_equal(s.offsets[1], 2);
    tn_channel_stats_t st;
    tn_channel_stats(ch, &st);
    assert_int_equal(st.deferred, 2);
    tn_consumer_detach(&s.c);

    /* From disk, after a restart: the same times. */
    qfx_close(q);
    tu_fx_reopen(q->fx);
    qfx_open(q);
    t = qfx_topic(q, "t", 0);
    for (uint64_t i = 0; i < 4; i++)
        expect_record(record(q, t, i), bodies[i], i == 1 ? "k1" : NULL, want[i]);
    qfx_free(q);
}

/* A publish without times of its own gives every record the publish's
 * (the common path), and so does a batch set in one go; setting a body
 * again drops the time it had. */
static void test_default_times(void **state)
{
    (void)state;
    qfx_t *q = new_qfx();
    tn_topic_t *t = qfx_topic(q, "t", 0);
    int64_t later = tn_now_wall_ms() + 3600 * 1000;

    qfx_pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 2), 0);
    tn_iov_t bodies[2] = {tn_iov("a", 1), tn_iov("b", 1)};
    assert_int_equal(tn_pub_set_all(&w.p, bodies), 0);
    assert_int_equal(publish(q, &w, "t", later), 0);
    tn_pub_fini(&w.p);
    expect_record(record(q, t, 0), "a", NULL, later);
    expect_record(record(q, t, 1), "b", NULL, later);

    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 2), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "c", 1), 0);
    assert_int_equal(tn_pub_set_deliver_at(&w.p, 0, 0), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "C", 1), 0); /* the time goes with the body */
    assert_int_equal(tn_pub_set(&w.p, 1, "d", 1), 0);
    assert_int_equal(tn_pub_set_deliver_at(&w.p, 1, 0), 0);
    assert_int_equal(publish(q, &w, "t", later), 0);
    assert_int_equal(w.p.first_offset, 2);
    tn_pub_fini(&w.p);
    expect_record(record(q, t, 2), "C", NULL, later);
    expect_record(record(q, t, 3), "d", NULL, 0);
    qfx_free(q);
}

/* The setter refuses an index out of range, a record with no body yet
 * and a negative time, and leaves the publish as it was. */
static void test_set_deliver_at_refused(void **state)
{
    (void)state;
    tn_pub_t p;
    assert_int_equal(tn_pub_init(&p, 2), 0);
    assert_int_equal(tn_pub_set_deliver_at(&p, 0, 10), UV_EINVAL); /* no body */
    assert_int_equal(tn_pub_set(&p, 0, "a", 1), 0);
    assert_int_equal(tn_pub_set_deliver_at(&p, 2, 10), UV_EINVAL);
    assert_int_equal(tn_pub_set_deliver_at(&p, 0, -1), UV_EINVAL);
    assert_false(p.own_times);
    assert_int_equal(tn_pub_set_deliver_at(&p, 0, 10), 0);
    assert_true(p.own_times);
    tn_pub_fini(&p);
}

/* tn_pub_fill: three records with and without keys, each with its own
 * time (0 at once too, which the publish's time does not override), one
 * append; a key over 65535 bytes and a negative time are refused. */
static void test_fill(void **state)
{
    (void)state;
    qfx_t *q = new_qfx();
    tn_topic_t *t = qfx_topic(q, "t", 0);
    int64_t now = tn_now_wall_ms();
    int64_t later = now + 3600 * 1000, day = now + 86400 * 1000;

    const tn_rec_in_t recs[3] = {
        {tn_iov("k0", 2), tn_iov("zero", 4), 0},
        {tn_iov(NULL, 0), tn_iov("one", 3), day},
        {tn_iov("k2", 2), tn_iov("two", 3), later},
    };
    qfx_pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 3), 0);
    assert_int_equal(tn_pub_fill(&w.p, recs), 0);
    assert_int_equal(publish(q, &w, "t", later), 0);
    assert_int_equal(w.p.first_offset, 0);
    tn_pub_fini(&w.p);
    expect_record(record(q, t, 0), "zero", "k0", 0);
    expect_record(record(q, t, 1), "one", NULL, day);
    expect_record(record(q, t, 2), "two", "k2", later);

    static char big[65536];
    tn_rec_in_t bad = {tn_iov(big, sizeof(big)), tn_iov("x", 1), 0};
    tn_pub_t p;
    assert_int_equal(tn_pub_init(&p, 1), 0);
    assert_int_equal(tn_pub_fill(&p, &bad), UV_EINVAL);
    tn_pub_fini(&p);
    bad = (tn_rec_in_t){tn_iov(NULL, 0), tn_iov("x", 1), -1};
    assert_int_equal(tn_pub_init(&p, 1), 0);
    assert_int_equal(tn_pub_fill(&p, &bad), UV_EINVAL);
    tn_pub_fini(&p);
    qfx_free(q);
}

/* The append check: asked with the topic and the partition right before
 * each append; a refusal fails the publish with its status and writes
 * nothing, whether the topic was there or was made by this publish (which
 * waited for it); once it answers 0 the publish goes on at offset 0. */
typedef struct {
    int answer;
    int asked;
    uint32_t partition;
    char topic[32];
} check_t;

static int on_check(void *arg, const tn_topic_t *t, uint32_t p)
{
    check_t *c = arg;
    c->asked++;
    c->partition = p;
    snprintf(c->topic, sizeof(c->topic), "%s", t->name);
    return c->answer;
}

static void test_append_check(void **state)
{
    (void)state;
    qfx_t *q = new_qfx();
    check_t c = {.answer = TN_ENOTSERVING};
    tn_broker_set_append_check(q->b, on_check, &c);
    /* Made by the publish: it waits for the topic, then is refused. */
    qfx_pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "a", 1), 0);
    assert_int_equal(publish(q, &w, "made", 0), TN_ENOTSERVING);
    assert_int_equal(c.asked, 1);
    assert_string_equal(c.topic, "made");
    assert_int_equal(w.p.partition, 0);
    tn_topic_t *t = qfx_topic(q, "made", 0);
    tn_plog_stats_t st;
    tn_plog_stats(tn_topic_part_plog(t, 0), &st);
    assert_int_equal(st.written_next, 0);
    /* The topic there: refused at once, with the status given. */
    c.answer = TN_EREMOTE;
    w.done = false;
    assert_int_equal(publish(q, &w, "made", 0), TN_EREMOTE);
    assert_int_equal(c.asked, 2);
    tn_plog_stats(tn_topic_part_plog(t, 0), &st);
    assert_int_equal(st.written_next, 0);
    /* Taken: the first record of the partition. */
    c.answer = 0;
    w.done = false;
    assert_int_equal(publish(q, &w, "made", 0), 0);
    assert_int_equal(c.asked, 3);
    assert_int_equal(w.p.first_offset, 0);
    tn_pub_fini(&w.p);
    /* Removed: not asked again. */
    tn_broker_set_append_check(q->b, NULL, NULL);
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "b", 1), 0);
    assert_int_equal(publish(q, &w, "made", 0), 0);
    assert_int_equal(w.p.first_offset, 1);
    assert_int_equal(c.asked, 3);
    tn_pub_fini(&w.p);
    qfx_free(q);
}

static int publish_to(qfx_t *q, qfx_pubw_t *w, tn_topic_t *t)
{
    w->p.data = w;
    w->done = false;
    int rc = tn_topic_publish(t, &w->p, 0, qfx_on_pub);
    if (rc == 0) {
        assert_true(qfx_run_until(q, qfx_pub_done, w));
        rc = w->status;
    }
    return rc;
}

/* tn_topic_publish, the door's publish to a topic it found ready: the
 * same outcomes as a publish by name (appended, the append check asked,
 * its refusal given back with nothing written) without a look-up. */
static void test_topic_publish(void **state)
{
    (void)state;
    qfx_t *q = new_qfx();
    check_t c = {.answer = 0};
    tn_broker_set_append_check(q->b, on_check, &c);
    tn_topic_t *t = qfx_topic(q, "ready", 0);
    qfx_pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "a", 1), 0);
    assert_int_equal(publish_to(q, &w, t), 0);
    assert_int_equal(w.p.first_offset, 0);
    assert_ptr_equal(w.p.topic, t);
    assert_int_equal(c.asked, 1);
    assert_string_equal(c.topic, "ready");
    tn_pub_fini(&w.p);
    /* Refused by the check: nothing written. */
    c.answer = TN_ENOTSERVING;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "b", 1), 0);
    assert_int_equal(publish_to(q, &w, t), TN_ENOTSERVING);
    tn_plog_stats_t st;
    tn_plog_stats(tn_topic_part_plog(t, 0), &st);
    assert_int_equal(st.written_next, 1);
    c.answer = 0;
    assert_int_equal(publish_to(q, &w, t), 0);
    assert_int_equal(w.p.first_offset, 1);
    const tn_centry_t *e = record(q, t, 1);
    expect_record(e, "b", NULL, 0);
    tn_pub_fini(&w.p);
    qfx_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_check),  cmocka_unit_test(test_own_times_one_append),
        cmocka_unit_test(test_default_times), cmocka_unit_test(test_set_deliver_at_refused),
        cmocka_unit_test(test_fill),          cmocka_unit_test(test_topic_publish),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
