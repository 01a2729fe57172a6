/* Tests of placement in the queue engine (queue.h, "DESIGN: placement"):
 * a topic with partitions that live on other nodes keeps its partition
 * count, opens only its local partitions (no files for the others), and
 * publishing, delivery, depth, stats and replay reads skip the remote ones;
 * following the placement opens a partition placed here later (with its
 * channels), leaves a partition given to another node on disk, and a
 * restart finds a topic with holes where the remote partitions are. */
#include "core/platform.h"

#include "fixture_queue.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/time.h"
#include "queue/queue.h"
#include "storage/io.h"
#include "storage/store.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SELF 1
#define MAXD 64
#define MAXP 8

/* The placement the tests play the metastore with: the owner of each
 * partition index, for every topic; SELF is this node. */
static uint64_t owners[MAXP];

static bool place(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    (void)arg;
    (void)t;
    *owner = p < MAXP ? owners[p] : 0;
    return *owner == SELF;
}

static void place_all(uint64_t owner)
{
    for (int i = 0; i < MAXP; i++)
        owners[i] = owner;
}

/* Publish body (pin < 0: round robin); the final status, with the
 * partition it went to (or was refused for) and the owner named. */
static int publish(qfx_t *q, const char *topic, const char *body, int pin, uint32_t *partition,
                   uint64_t *owner)
{
    qfx_pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, body, strlen(body)), 0);
    w.p.data = &w;
    if (pin >= 0) {
        w.p.pinned = true;
        w.p.pin = (uint32_t)pin;
    }
    int rc = tn_broker_publish(q->b, topic, strlen(topic), &w.p, 0, qfx_on_pub);
    if (rc == 0) {
        assert_true(qfx_run_until(q, qfx_pub_done, &w));
        rc = w.status;
    }
    if (partition != NULL)
        *partition = w.p.partition;
    if (owner != NULL)
        *owner = w.p.owner;
    tn_pub_fini(&w.p);
    return rc;
}

/* Attach s to ch with credit: 60 s timeouts, at most MAXD deliveries. */
static void attach(qfx_sink_t *s, tn_channel_t *ch, uint32_t credit)
{
    qfx_sink_init(s, MAXD, 60000);
    tn_consumer_attach(&s->c, ch);
    tn_consumer_credit(&s->c, credit);
}

/* Which partitions of topic have files in the store. */
static int on_part(void *arg, const char *t, uint32_t p)
{
    (void)t;
    bool *on_disk = arg;
    if (p < MAXP)
        on_disk[p] = true;
    return 0;
}

static void parts_on_disk(qfx_t *q, const char *name, bool on_disk[MAXP])
{
    memset(on_disk, 0, MAXP * sizeof(bool));
    int rc = tn_store_list_partitions(q->fx->store, name, on_part, on_disk);
    assert_true(rc == 0 || rc == UV_ENOENT);
}

typedef struct {
    bool done;
    int status;
} cbw_t;

static void on_followed(void *arg, int status)
{
    cbw_t *w = arg;
    w->done = true;
    w->status = status;
}

static bool cb_done(void *arg)
{
    return ((cbw_t *)arg)->done;
}

static void follow(qfx_t *q, tn_topic_t *t)
{
    cbw_t w = {false, 0};
    assert_int_equal(tn_topic_follow_placement(t, on_followed, &w), 0);
    assert_true(qfx_run_until(q, cb_done, &w));
    assert_int_equal(w.status, 0);
}

/* TN_EV_PARTS_OPENED events the broker told, and the last topic named. */
static int opened_events;
static char opened_topic[256];

static void on_engine_event(void *arg, tn_broker_event_t ev, const char *topic, const char *channel)
{
    (void)arg;
    if (ev != TN_EV_PARTS_OPENED)
        return;
    assert_null(channel);
    opened_events++;
    snprintf(opened_topic, sizeof(opened_topic), "%s", topic);
}

/* --- tests ------------------------------------------------------------------ */

/* Partition 1 of three lives on node 7: no files, no publishes, no
 * deliveries, not in depth or stats; the others serve as ever. */
static bool five_finished(void *arg)
{
    tn_channel_stats_t st;
    tn_channel_stats(arg, &st);
    return st.finish_count >= 5;
}

static void test_remote_partition_skipped(void **state)
{
    (void)state;
    place_all(SELF);
    owners[1] = 7;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 3);
    assert_int_equal(t->nparts, 3);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(tn_topic_part_local(t, 1));
    assert_true(tn_topic_part_local(t, 2));
    assert_int_equal(t->parts[1]->owner, 7);
    assert_null(t->parts[1]->plog);
    bool on_disk[MAXP];
    parts_on_disk(q, "t", on_disk);
    assert_true(on_disk[0] && !on_disk[1] && on_disk[2]);

    /* Retained for the first channel: only local partitions count. */
    uint32_t where = 99;
    uint64_t owner = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(publish(q, "t", "m", -1, &where, &owner), 0);
        assert_int_not_equal(where, 1);
    }
    assert_int_equal(tn_topic_depth(t), 4);
    assert_int_equal(publish(q, "t", "m", 1, &where, &owner), TN_EREMOTE);
    assert_int_equal(where, 1);
    assert_int_equal(owner, 7);
    assert_int_equal(publish(q, "t", "m", 3, NULL, NULL), UV_EINVAL);
    const tn_centry_t *e = NULL;
    assert_int_equal(tn_part_record(t, 1, 0, NULL, &e), TN_EREMOTE);

    tn_channel_t *ch = qfx_channel(q, t, "c");
    tn_channel_stats_t st;
    tn_channel_stats(ch, &st);
    assert_int_equal(st.depth, 4);
    qfx_sink_t s;
    attach(&s, ch, 100);
    qfx_expect_n(q, &s, 4);
    for (int i = 0; i < s.n; i++) {
        assert_int_not_equal(s.d[i].partition, 1);
        assert_int_equal(tn_consumer_fin(&s.c, s.d[i].partition, s.d[i].offset, false, 0), 0);
    }
    /* A consumer pinned to the remote partition gets nothing. */
    qfx_sink_t pinned;
    qfx_sink_init(&pinned, MAXD, 60000);
    pinned.c.pinned = true;
    pinned.c.pin = 1;
    tn_consumer_attach(&pinned.c, ch);
    tn_consumer_credit(&pinned.c, 10);
    assert_int_equal(publish(q, "t", "late", -1, &where, NULL), 0);
    qfx_expect_n(q, &s, 5);
    qfx_run_for(q, 30);
    assert_int_equal(pinned.n, 0);
    assert_int_equal(tn_consumer_fin(&s.c, s.d[4].partition, s.d[4].offset, false, 0), 0);
    /* Admin actions walk the partitions too. */
    assert_int_equal(tn_channel_pause(ch, true), 0);
    assert_int_equal(tn_channel_pause(ch, false), 0);
    assert_int_equal(tn_channel_empty(ch), 0);
    tn_topic_pause(t, true, NULL, NULL);
    tn_topic_pause(t, false, NULL, NULL);
    /* A FIN counts once its channel log record is durable. */
    assert_true(qfx_run_until(q, five_finished, ch));
    tn_channel_stats(ch, &st);
    assert_int_equal(st.depth, 0);
    assert_int_equal(st.finish_count, 5);
    tn_consumer_detach(&pinned.c);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* Every partition elsewhere: a publish is refused, nothing is written. */
static void test_all_remote_refused(void **state)
{
    (void)state;
    place_all(5);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    uint64_t owner = 99;
    assert_int_equal(publish(q, "far", "m", -1, NULL, &owner), TN_EREMOTE);
    assert_int_equal(owner, 0); /* no single owner to name */
    tn_topic_t *t = qfx_topic(q, "far", 0);
    assert_int_equal(t->nparts, 1);
    assert_false(tn_topic_part_local(t, 0));
    assert_int_equal(t->parts[0]->owner, 5);
    bool on_disk[MAXP];
    parts_on_disk(q, "far", on_disk);
    assert_false(on_disk[0]);
    /* Its channels exist, idle, with nothing to deliver. */
    tn_channel_t *ch = qfx_channel(q, t, "c");
    tn_channel_stats_t st;
    tn_channel_stats(ch, &st);
    assert_int_equal(st.depth, 0);
    assert_int_equal(tn_topic_depth(t), 0);
    /* Ephemeral topics are never placed: local everywhere. */
    assert_int_equal(publish(q, "e#ephemeral", "m", -1, NULL, NULL), 0);
    qfx_free(q);
}

/* Placed here later: following the placement opens the partition and
 * its durable channel's log; it serves at once and survives a restart. */
static void test_open_later(void **state)
{
    (void)state;
    place_all(SELF);
    owners[1] = 0; /* not placed yet */
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    assert_false(tn_topic_part_local(t, 1));
    assert_int_equal(t->parts[1]->owner, 0);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t s;
    attach(&s, ch, 100);
    assert_int_equal(publish(q, "t", "zero", -1, NULL, NULL), 0);
    qfx_expect_n(q, &s, 1);
    assert_int_equal(s.d[0].partition, 0);
    assert_int_equal(tn_consumer_fin(&s.c, 0, s.d[0].offset, false, 0), 0);

    /* Still unplaced: following changes nothing, and tells nothing. */
    opened_events = 0;
    assert_int_equal(tn_broker_listen(q->b, on_engine_event, NULL), 0);
    follow(q, t);
    assert_false(tn_topic_part_local(t, 1));
    assert_int_equal(opened_events, 0);
    owners[1] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 1));
    /* Listeners hear of it (the catalog's NSQ publishes waiting for a
     * partition here go on at once). */
    assert_int_equal(opened_events, 1);
    assert_string_equal(opened_topic, "t");
    follow(q, t);
    assert_int_equal(opened_events, 1);
    tn_broker_unlisten(q->b, on_engine_event, NULL);
    assert_non_null(t->parts[1]->plog);
    bool on_disk[MAXP];
    parts_on_disk(q, "t", on_disk);
    assert_true(on_disk[0] && on_disk[1]);
    uint32_t where = 99;
    assert_int_equal(publish(q, "t", "one", 1, &where, NULL), 0);
    assert_int_equal(where, 1);
    qfx_expect_n(q, &s, 2);
    assert_int_equal(s.d[1].partition, 1);
    assert_int_equal(s.d[1].offset, 0);
    assert_int_equal(tn_consumer_fin(&s.c, 1, 0, false, 0), 0);
    /* Round robin covers it now. */
    assert_int_equal(publish(q, "t", "a", -1, NULL, NULL), 0);
    assert_int_equal(publish(q, "t", "b", -1, NULL, NULL), 0);
    qfx_expect_n(q, &s, 4);
    assert_int_not_equal(s.d[2].partition, s.d[3].partition);
    for (int i = 2; i < 4; i++)
        assert_int_equal(tn_consumer_fin(&s.c, s.d[i].partition, s.d[i].offset, false, 0), 0);
    tn_consumer_detach(&s.c);

    /* After a restart both partitions and the channel's progress load. */
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    assert_int_equal(t->nparts, 2);
    assert_true(tn_topic_part_local(t, 0) && tn_topic_part_local(t, 1));
    ch = qfx_channel(q, t, "c");
    attach(&s, ch, 100);
    qfx_run_for(q, 30);
    assert_int_equal(s.n, 0); /* everything was settled */
    tn_channel_stats_t st;
    tn_channel_stats(ch, &st);
    assert_int_equal(st.finish_count, 4);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* A paused channel stays paused on a partition opened later. */
static void test_open_later_keeps_pause(void **state)
{
    (void)state;
    place_all(SELF);
    owners[0] = 0;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    assert_int_equal(tn_channel_pause(ch, true), 0);
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    qfx_sink_t s;
    attach(&s, ch, 100);
    assert_int_equal(publish(q, "t", "x", 0, NULL, NULL), 0);
    qfx_run_for(q, 30);
    assert_int_equal(s.n, 0);
    assert_int_equal(tn_channel_pause(ch, false), 0);
    qfx_expect_n(q, &s, 1);
    assert_int_equal(s.d[0].partition, 0);
    tn_consumer_detach(&s.c);
    /* The pause was written to the new partition's channel log too. */
    assert_int_equal(tn_channel_pause(ch, true), 0);
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    ch = qfx_channel(q, t, "c");
    assert_true(ch->paused);
    qfx_free(q);
}

/* tn_channel_pause and the wait the door answers after: its status. */
static int pause_and_wait(qfx_t *q, tn_channel_t *ch, bool paused)
{
    assert_int_equal(tn_channel_pause(ch, paused), 0);
    qfx_allw_t w = {0};
    assert_int_equal(tn_channel_sync_all(ch, qfx_on_sync_all, &w), 0);
    assert_true(qfx_run_until(q, qfx_all_done, &w));
    return w.status;
}

/* Channel c of a topic t of 2 partitions on q, their files here (made
 * with everything local), then both placed on node 9: this node leads
 * none of them. */
static tn_channel_t *channel_led_elsewhere(qfx_t *q, tn_topic_t **t)
{
    *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, *t, "c");
    tn_broker_set_placement(q->b, place, NULL);
    place_all(9);
    follow(q, *t);
    return ch;
}

/* A node's pause is its own (docs/cluster.md, "Pause and empty are per
 * node"): paused while it leads none of the topic's partitions (their
 * files here, led elsewhere), the pause is kept in its pause file, the
 * wait the door answers after ends only once that file is durable (its
 * error if not), and a restart keeps the pause although no partition
 * here says so. Before the pause file, a node that led nothing kept its
 * pause in memory only. */
static void test_pause_kept_leading_nothing(void **state)
{
    (void)state;
    qfx_t *q = qfx_new(qfx_small_memlogs, NULL);
    tn_topic_t *t;
    tn_channel_t *ch = channel_led_elsewhere(q, &t);
    assert_false(tn_topic_part_local(t, 0) || tn_topic_part_local(t, 1));
    qfx_run_for(q, 30);
    tn_io_fail_sync_after(0, UV_EIO); /* the pause file's fdatasync */
    int rc = pause_and_wait(q, ch, true);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(rc, UV_EIO);
    assert_int_equal(pause_and_wait(q, ch, true), 0);
    q->place = place; /* the broker opened again asks it too */
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    ch = qfx_channel(q, t, "c");
    assert_true(ch->paused);
    assert_false(ch->parts[0]->cur.paused || ch->parts[1]->cur.paused);
    qfx_free(q);
}

static bool stamp_and_pause_written(void *arg)
{
    const tn_channel_t *ch = arg;
    return !ch->stamping && !ch->pause_writing;
}

/* A pause whose pause file cannot be written is taken back: the wait
 * the door answers after ends with the error, and the channel is as
 * that answer says (unpaused, in memory as after a restart, which loads
 * the file). Before, it stayed paused in memory until a restart. */
static void test_pause_file_write_failed_taken_back(void **state)
{
    (void)state;
    qfx_t *q = qfx_new(qfx_small_memlogs, NULL);
    tn_topic_t *t;
    tn_channel_t *ch = channel_led_elsewhere(q, &t);
    qfx_run_for(q, 30);
    tn_io_fail_sync_after(0, UV_EIO); /* the pause file's fdatasync */
    int rc = pause_and_wait(q, ch, true);
    tn_io_fail_sync_after(-1, 0);
    printf("pause whose file write failed: %s, paused %d\n", tn_err_name(rc), ch->paused);
    assert_int_equal(rc, UV_EIO);
    assert_false(ch->paused);
    assert_true(qfx_run_until(q, stamp_and_pause_written, ch));
    /* The same for an unpause of a paused channel. */
    assert_int_equal(pause_and_wait(q, ch, true), 0);
    tn_io_fail_sync_after(0, UV_EIO);
    rc = pause_and_wait(q, ch, false);
    tn_io_fail_sync_after(-1, 0);
    assert_int_equal(rc, UV_EIO);
    assert_true(ch->paused);
    assert_true(qfx_run_until(q, stamp_and_pause_written, ch));
    q->place = place; /* the broker opened again asks it too */
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    ch = qfx_channel(q, t, "c");
    assert_true(ch->paused);
    qfx_free(q);
}

/* A node paused while it held nothing of the topic (no directory: the
 * pause is in memory only) writes its pause file once the topic's
 * directory appears here, with the channel's stamp (a partition placed
 * here, a replica's copy). */
static void test_pause_written_when_the_directory_comes(void **state)
{
    (void)state;
    place_all(9);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    assert_int_equal(pause_and_wait(q, ch, true), 0);
    int paused = 0;
    assert_int_equal(tn_store_channel_pause_read(q->fx->store, "t", "c", &paused), 0);
    assert_int_equal(paused, -1); /* nowhere to write it */
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    ch->stamp = 42; /* the catalog's, from the channel's record */
    tn_channel_keep_stamp(ch, false);
    assert_true(qfx_run_until(q, stamp_and_pause_written, ch));
    assert_int_equal(tn_store_channel_pause_read(q->fx->store, "t", "c", &paused), 0);
    assert_int_equal(paused, 1);
    qfx_free(q);
}

static bool topic_pause_written(void *arg)
{
    return !((const tn_topic_t *)arg)->pause_writing;
}

static bool topic_quiet(void *arg)
{
    const tn_topic_t *t = arg;
    return !t->stamping && !t->pause_writing;
}

/* A topic's pause is the node's too, kept the same way: paused while it
 * held nothing of the topic (no directory: the 200 comes, the pause is in
 * memory), the node writes the topic's pause file once a partition is
 * placed here; that partition, not led here at the pause, holds from 0
 * (everything it takes until the unpause), and a restart keeps it so. A
 * topic made anew here removes a pause file an earlier one left in a
 * directory with no partition (never loaded): it starts unpaused, and so
 * does its next start. */
static void test_topic_pause_written_when_the_directory_comes(void **state)
{
    (void)state;
    place_all(9);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    qfx_allw_t w = {0};
    assert_int_equal(tn_topic_pause(t, true, qfx_on_sync_all, &w), 0);
    assert_true(qfx_run_until(q, qfx_all_done, &w));
    assert_int_equal(w.status, 0);
    int paused = 0;
    uint64_t *holds = NULL;
    uint32_t n = 0;
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, "t", &paused, &holds, &n), 0);
    assert_int_equal(paused, -1); /* nowhere to write it */
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    assert_true(qfx_run_until(q, topic_pause_written, t));
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, "t", &paused, &holds, &n), 0);
    assert_int_equal(paused, 1);
    assert_int_equal(n, 2);
    tn_free(holds);
    assert_int_equal(publish(q, "t", "x", 0, NULL, NULL), 0);
    assert_int_equal(tn_topic_depth(t), 1);
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    assert_true(t->paused);
    assert_int_equal(tn_topic_depth(t), 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t s;
    attach(&s, ch, 100);
    qfx_run_for(q, 30);
    assert_int_equal(s.n, 0);
    qfx_allw_t u = {0};
    assert_int_equal(tn_topic_pause(t, false, qfx_on_sync_all, &u), 0);
    qfx_expect_n(q, &s, 1);
    assert_int_equal(s.d[0].partition, 0);
    assert_int_equal(s.d[0].offset, 0);
    assert_true(qfx_run_until(q, qfx_all_done, &u));
    tn_consumer_detach(&s.c);

    /* A pause file left in a directory with no partition. */
    assert_int_equal(tn_store_topic_stamp_write(q->fx->store, "u", 42, true), 0);
    assert_int_equal(tn_store_topic_pause_write(q->fx->store, "u", true, NULL, 0, NULL), 0);
    t = qfx_topic(q, "u", 1);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(t->paused);
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, "u", &paused, &holds, &n), 0);
    assert_int_equal(paused, -1);
    qfx_restart(q);
    t = qfx_topic(q, "u", 0);
    assert_false(t->paused);
    qfx_free(q);
}

/* A partition placed here while the pause write that found no directory
 * of the topic has not ended yet (its worker between the write and its
 * end): its directory is made meanwhile, and the pause file is written
 * once that write ends, not left in memory until a restart unpauses it. */
static void test_topic_pause_dir_made_during_its_write(void **state)
{
    (void)state;
    place_all(9);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 1);
    assert_int_equal(setenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS", "1000", 1), 0);
    qfx_allw_t w = {0};
    assert_int_equal(tn_topic_pause(t, true, qfx_on_sync_all, &w), 0);
    assert_true(t->pause_writing);
    owners[0] = SELF;
    follow(q, t); /* its part_ready comes before the pause write ends */
    assert_true(tn_topic_part_local(t, 0));
    assert_int_equal(unsetenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS"), 0);
    assert_true(qfx_run_until(q, qfx_all_done, &w));
    assert_int_equal(w.status, 0);
    assert_true(qfx_run_until(q, topic_quiet, t));
    int paused = 0;
    uint64_t *holds = NULL;
    uint32_t n = 0;
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, "t", &paused, &holds, &n), 0);
    assert_int_equal(paused, 1);
    tn_free(holds);
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    assert_true(t->paused);
    qfx_free(q);
}

static bool all_replicated(void *arg, const tn_topic_t *t, uint32_t p);

/* Pause t (or unpause it) and wait for its pause file. */
static void topic_pause_wait(qfx_t *q, tn_topic_t *t, bool paused)
{
    qfx_allw_t w = {0};
    assert_int_equal(tn_topic_pause(t, paused, qfx_on_sync_all, &w), 0);
    assert_true(qfx_run_until(q, qfx_all_done, &w));
    assert_int_equal(w.status, 0);
}

/* A fixture whose every partition is placed here and replicated
 * (place_readopt), with topic t of one partition, its channel c and
 * three records of body. */
static qfx_t *replicated_t(const char *body, tn_topic_t **t, tn_channel_t **ch)
{
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = all_replicated;
    *t = qfx_topic(q, "t", 1);
    *ch = qfx_channel(q, *t, "c");
    for (int i = 0; i < 3; i++)
        assert_int_equal(publish(q, "t", body, 0, NULL, NULL), 0);
    return q;
}

/* Restart q: topic t comes back paused, its depth held (all of
 * partition 0's), which channel c's consumer gets only at the unpause,
 * from offset first on. */
static void restart_still_held(qfx_t *q, uint64_t held, uint64_t first)
{
    qfx_restart(q);
    tn_topic_t *t = qfx_topic(q, "t", 0);
    assert_true(t->paused);
    assert_int_equal(tn_topic_depth(t), held);
    qfx_sink_t s;
    attach(&s, qfx_channel(q, t, "c"), 100);
    qfx_run_for(q, 30);
    assert_int_equal(s.n, 0);
    topic_pause_wait(q, t, false);
    qfx_expect_n(q, &s, (int)held);
    assert_int_equal(s.d[0].offset, first);
    tn_consumer_detach(&s.c);
}

/* A replicated partition not led here when the topic is paused holds
 * from 0 once it comes to lead here (docs/cluster.md), whatever hold
 * point an earlier pause left it: one led here during an earlier pause
 * kept that pause's point, so the messages below it that the channel
 * had not taken, published before this pause, were delivered through a
 * paused node. */
static void test_topic_pause_remote_holds_from_zero(void **state)
{
    (void)state;
    tn_topic_t *t;
    tn_channel_t *ch;
    qfx_t *q = replicated_t("m", &t, &ch);
    /* An earlier pause, led here: its hold point is past the three. */
    topic_pause_wait(q, t, true);
    topic_pause_wait(q, t, false);
    /* Led elsewhere, then paused here, then led here again. */
    owners[0] = 9;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    topic_pause_wait(q, t, true);
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    assert_int_equal(tn_topic_depth(t), 3); /* its whole log */
    qfx_sink_t s;
    attach(&s, ch, 100);
    qfx_run_for(q, 30);
    assert_int_equal(s.n, 0);
    /* So does a restart. */
    tn_consumer_detach(&s.c);
    restart_still_held(q, 3, 0);
    qfx_free(q);
}

static void on_cut_done(tn_plog_trunc_t *req, int status)
{
    on_followed(req->data, status);
}

/* Cut pl at offset (floor 0), as the replica manager cuts a follower's
 * copy at a divergence point (cluster/replica.c, follower_truncate), and
 * append n records after it. */
static void cut_and_append(qfx_t *q, tn_plog_t *pl, uint64_t offset, int n)
{
    cbw_t w = {false, 0};
    tn_plog_trunc_t req;
    req.data = &w;
    assert_int_equal(tn_plog_truncate(pl, &req, offset, 0, on_cut_done), 0);
    assert_true(qfx_run_until(q, cb_done, &w));
    assert_int_equal(w.status, 0);
    for (int i = 0; i < n; i++) {
        uint64_t off = 0;
        assert_int_equal(tu_append(&q->fx->loop, pl, "new", 3, &off), 0);
        assert_int_equal(off, offset + (uint64_t)i);
    }
}

/* Partition 0 of paused topic t led here again: channel ch delivers
 * only offset 0 when n is 1 (nothing when 0), the depth is held, and so
 * are the records from hold on in the pause file and after a restart,
 * until the unpause delivers them. */
static void led_again_held(qfx_t *q, tn_topic_t *t, tn_channel_t *ch, int n, uint64_t held,
                           uint64_t hold)
{
    assert_true(qfx_run_until(q, topic_quiet, t));
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    qfx_sink_t s;
    attach(&s, ch, 100);
    if (n > 0)
        qfx_expect_n(q, &s, n);
    qfx_run_for(q, 30);
    for (int i = 0; i < s.n; i++)
        print_message("delivered offset %" PRIu64 " (%s)\n", s.d[i].offset, s.bodies[i]);
    assert_int_equal(s.n, n);
    if (n > 0) {
        assert_int_equal(s.d[0].offset, 0);
        assert_int_equal(tn_consumer_fin(&s.c, 0, 0, false, 0), 0);
    }
    assert_int_equal(tn_topic_depth(t), held);
    tn_consumer_detach(&s.c);
    assert_true(qfx_run_until(q, topic_quiet, t));
    qfx_assert_file_holds(q, t, &hold);
    restart_still_held(q, held, hold);
}

/* A paused topic's hold point never sits above a truncation of the log
 * (docs/cluster.md): a replicated partition led here at the pause holds
 * from its end then (3); deposed, its copy is cut at a divergence point
 * below that (1: a restart or an unclean election left the floor there)
 * and takes the new leader's records at the same offsets; led here again
 * while still paused, those records arrived after the pause and are held
 * like any other, here and after a restart (the pause file is written
 * with the lower point). Before, the hold stayed at 3 and offsets 1 and 2,
 * new records, were delivered through the paused node. own_log: the cut
 * and the records go through the replica manager's own log object of the
 * partition, the engine's set-aside one closed (tn_topic_part_abandon)
 * and the partition opened from its files when led here again. */
static void hold_below_a_cut(bool own_log)
{
    tn_topic_t *t;
    tn_channel_t *ch;
    qfx_t *q = replicated_t("old", &t, &ch);
    topic_pause_wait(q, t, true);
    assert_int_equal(tn_topic_depth(t), 0); /* everything went out before the pause */
    owners[0] = 9;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    if (own_log) {
        tn_plog_t *own = NULL;
        assert_int_equal(tn_plog_open(q->fx->store, "t", 0, &own), 0);
        cut_and_append(q, own, 1, 3);
        assert_int_equal(tn_topic_part_abandon(t, 0), 0);
        tu_plog_close(&q->fx->loop, own);
    } else {
        cut_and_append(q, t->parts[0]->plog, 1, 3);
    }
    led_again_held(q, t, ch, 1, 3, 1); /* offsets 1..3, all new */
    qfx_free(q);
}

static void test_topic_pause_hold_below_a_cut(void **state)
{
    (void)state;
    hold_below_a_cut(false);
}

static void test_topic_pause_hold_below_a_cut_own_log(void **state)
{
    (void)state;
    hold_below_a_cut(true);
}

/* A repair of partition 0 of t, seen from its cb: the hold point the
 * pause file held for it then. */
typedef struct {
    cbw_t w;
    const tn_topic_t *t;
    uint64_t file_hold; /* UINT64_MAX: no file */
    tn_buf_t copy;      /* the new leader's records from 0 on */
    tn_epoch_entry_t ep[4];
    uint32_t nep;
    tn_plog_repair_t req;
} repw_t;

static void on_repaired(tn_plog_repair_t *req, int status)
{
    repw_t *r = req->data;
    r->file_hold = UINT64_MAX;
    int paused = 0;
    uint64_t *holds = NULL;
    uint32_t n = 0;
    if (tn_store_topic_pause_read(r->t->broker->store, r->t->name, &paused, &holds, &n) == 0 &&
        n > 0)
        r->file_hold = holds[0];
    tn_free(holds);
    on_followed(&r->w, status);
}

/* Topic t (channel c) of one replicated partition, led here at the pause
 * (holding from 3, its three records delivered), then deposed (led by
 * node 9): its copy's active segment (base 0) is found damaged, and r
 * has the new leader's records for it, as a repair reads them
 * (docs/replication.md): after an unclean election, 0 as here and 1..3
 * others. */
static qfx_t *paused_damaged(tn_topic_t **t, tn_channel_t **ch, repw_t *r)
{
    qfx_t *q = replicated_t("old", t, ch);
    topic_pause_wait(q, *t, true);
    assert_int_equal(tn_topic_depth(*t), 0);
    owners[0] = 9;
    follow(q, *t);
    assert_false(tn_topic_part_local(*t, 0));
    tn_plog_t *lead = NULL;
    assert_int_equal(tn_plog_open(q->fx->store, "lead", 0, &lead), 0);
    uint64_t off = 0;
    assert_int_equal(tu_append(&q->fx->loop, lead, "old", 3, &off), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tu_append(&q->fx->loop, lead, "new", 3, &off), 0);
    memset(r, 0, sizeof(*r));
    r->t = *t;
    tn_buf_init(&r->copy);
    uint32_t n = 0;
    assert_int_equal(tn_plog_read_raw(lead, 0, 1 << 20, &r->copy, &n), 0);
    assert_int_equal(n, 4);
    r->nep = tn_plog_epochs_range(lead, 0, 4, r->ep, 4);
    tu_plog_close(&q->fx->loop, lead);
    tn_plog_t *pl = (*t)->parts[0]->plog;
    tn__plog_found_damage(pl, 0, "a record fails its CRC (test)");
    uint64_t b = 1, e = 0;
    assert_true(tn_plog_damage(pl, &b, &e));
    assert_int_equal(b, 0);
    assert_int_equal(e, TN_PLOG_DAMAGE_ACTIVE);
    return q;
}

/* Repair t's partition 0 with r's copy, as the replica manager does
 * (tn_plog_repair_active); its status. */
static int repair_with(qfx_t *q, tn_topic_t *t, repw_t *r)
{
    r->w = (cbw_t){false, 0};
    r->req.data = r;
    assert_int_equal(tn_plog_repair_active(t->parts[0]->plog, &r->req, 0, tn_buf_data(&r->copy),
                                           tn_buf_size(&r->copy), r->ep, r->nep, on_repaired),
                     0);
    assert_true(qfx_run_until(q, cb_done, &r->w));
    return r->w.status;
}

/* A repair of a paused topic's partition lowers its hold point as a cut
 * does (docs/cluster.md), to the repaired segment's base, and runs only
 * once the pause file holds it: the new leader's records there (others
 * than the pause saw) are held like any other, led here again and after
 * a restart. Before, the repair told no one: the hold stayed at 3 and
 * offsets 0..2 were delivered again, 1 and 2 new. The point comes down to
 * the base, not to the first record that differs (0 is held too). */
static void test_topic_pause_hold_below_a_repair(void **state)
{
    (void)state;
    repw_t r;
    tn_topic_t *t;
    tn_channel_t *ch;
    qfx_t *q = paused_damaged(&t, &ch, &r);
    assert_int_equal(repair_with(q, t, &r), 0);
    print_message("repaired; the pause file's hold then: %" PRIu64 "\n", r.file_hold);
    assert_int_equal(tn_plog_err(t->parts[0]->plog), 0);
    assert_int_equal(r.file_hold, 0);
    tn_buf_fini(&r.copy);
    led_again_held(q, t, ch, 0, 4, 0);
    qfx_free(q);
}

/* The pause write a repair waits for fails: the repair fails with it and
 * changes nothing (the copy stays isolated with its damage, no file
 * kept), and the next attempt runs only once a write has put the lowered
 * point in the file (the hold in memory is already down: it does not
 * wait for that by itself). */
static void test_topic_pause_repair_fails_with_its_file(void **state)
{
    (void)state;
    repw_t r;
    tn_topic_t *t;
    tn_channel_t *ch;
    qfx_t *q = paused_damaged(&t, &ch, &r);
    tn_plog_t *pl = t->parts[0]->plog;
    tn_io_fail_sync_after(0, UV_EIO); /* the repair's pause write */
    int rc = repair_with(q, t, &r);
    tn_io_fail_sync_after(-1, 0);
    print_message("the pause write failed: the repair %s, the log %s, the file's hold %" PRIu64
                  "\n",
                  tn_strerror(rc), tn_strerror(tn_plog_err(pl)), r.file_hold);
    assert_int_equal(rc, UV_EIO);
    assert_int_equal(tn_plog_err(pl), TN_ECORRUPT);
    assert_string_equal(r.req.quarantined, "");
    assert_int_equal(r.file_hold, 3);
    assert_true(qfx_run_until(q, topic_quiet, t));
    rc = repair_with(q, t, &r);
    print_message("again: the repair %s, the file's hold %" PRIu64 "\n", tn_strerror(rc),
                  r.file_hold);
    assert_int_equal(rc, 0);
    assert_int_equal(r.file_hold, 0);
    tn_buf_fini(&r.copy);
    qfx_free(q);
}

/* A cut of a paused topic's partition, seen from its truncation's cb
 * (what the replica manager waits for before it appends at the cut
 * offsets): whether a pause write was still under way then and the hold
 * point the pause file held for the partition. */
typedef struct {
    cbw_t w;
    const tn_topic_t *t;
    uint32_t p;
    bool writing;
    uint64_t file_hold; /* UINT64_MAX: no file, or no point for p */
} cutw_t;

static void on_cut_seen(tn_plog_trunc_t *req, int status)
{
    cutw_t *c = req->data;
    c->writing = c->t->pause_writing;
    c->file_hold = UINT64_MAX;
    int paused = 0;
    uint64_t *holds = NULL;
    uint32_t n = 0;
    if (tn_store_topic_pause_read(c->t->broker->store, c->t->name, &paused, &holds, &n) == 0 &&
        c->p < n)
        c->file_hold = holds[c->p];
    tn_free(holds);
    on_followed(&c->w, status);
}

/* Topic t of nparts, every partition replicated, three records in each,
 * paused (each holds from 3), then led by node 9: its copies here are a
 * follower's, to cut. */
static qfx_t *paused_follower(uint32_t nparts, tn_topic_t **t)
{
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = all_replicated;
    *t = qfx_topic(q, "t", nparts);
    (void)qfx_channel(q, *t, "c");
    for (uint32_t p = 0; p < nparts; p++)
        for (int i = 0; i < 3; i++)
            assert_int_equal(publish(q, "t", "old", (int)p, NULL, NULL), 0);
    topic_pause_wait(q, *t, true);
    for (uint32_t p = 0; p < nparts; p++)
        owners[p] = 9;
    follow(q, *t);
    return q;
}

static void cut_start(tn_topic_t *t, uint32_t p, uint64_t offset, tn_plog_trunc_t *req, cutw_t *c)
{
    memset(c, 0, sizeof(*c));
    c->t = t;
    c->p = p;
    req->data = c;
    assert_int_equal(tn_plog_truncate(t->parts[p]->plog, req, offset, 0, on_cut_seen), 0);
}

static bool hold_cut(void *arg)
{
    const tn_topic_t *t = arg;
    return t->parts[0]->hold == 1;
}

static void cut_print(const char *what, const cutw_t *c)
{
    print_message("%s: status %d, pause write under way %d, the file's hold %" PRIu64 "\n", what,
                  c->w.status, c->writing, c->file_hold);
}

/* The truncation of a paused topic's partition below its hold point
 * completes only once the pause file holds the lowered point
 * (docs/cluster.md): its caller (the replica manager) appends the new
 * leader's records at the cut offsets after its cb, and a crash then must
 * not leave the old point in the file. Several cuts at once (two
 * partitions, the second while the first's write is held on its worker):
 * each waits for a write covering its own point. A cut of a topic not
 * paused completes at once. */
static void test_topic_pause_cut_waits_for_its_file(void **state)
{
    (void)state;
    tn_topic_t *t;
    qfx_t *q = paused_follower(2, &t);
    tn_plog_trunc_t r0, r1;
    cutw_t c0, c1;
    assert_int_equal(setenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS", "300", 1), 0);
    cut_start(t, 0, 1, &r0, &c0);
    assert_true(qfx_run_until(q, hold_cut, t));
    cut_start(t, 1, 2, &r1, &c1);
    assert_true(qfx_run_until(q, cb_done, &c0.w));
    assert_true(qfx_run_until(q, cb_done, &c1.w));
    assert_int_equal(unsetenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS"), 0);
    cut_print("partition 0 cut at 1", &c0);
    cut_print("partition 1 cut at 2", &c1);
    assert_int_equal(c0.w.status, 0);
    assert_int_equal(c0.file_hold, 1);
    assert_int_equal(c1.w.status, 0);
    assert_int_equal(c1.file_hold, 2);
    assert_true(qfx_run_until(q, topic_quiet, t));
    /* Unpaused: at once, no write. */
    topic_pause_wait(q, t, false);
    uint64_t asked = t->pause_asked;
    cut_start(t, 0, 0, &r0, &c0);
    assert_true(qfx_run_until(q, cb_done, &c0.w));
    assert_int_equal(c0.w.status, 0);
    assert_int_equal(t->pause_asked, asked);
    qfx_free(q);
}

/* A paused follower's partition (paused_follower, one partition) cut at
 * 1 while a pause write is held 1 s on its worker (written already): the
 * cut's write waits behind it, and the cut for that. */
static qfx_t *cut_behind_a_write(tn_topic_t **t, tn_plog_trunc_t *r, cutw_t *c)
{
    qfx_t *q = paused_follower(1, t);
    assert_int_equal(setenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS", "1000", 1), 0);
    assert_int_equal(tn_topic_pause(*t, true, NULL, NULL), 0);
    qfx_run_for(q, 100);
    assert_true((*t)->pause_writing);
    cut_start(*t, 0, 1, r, c);
    assert_true(qfx_run_until(q, hold_cut, *t));
    assert_int_equal(unsetenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS"), 0); /* for the cut's write */
    return q;
}

/* The pause write a cut waits for fails (its fdatasync, armed once the
 * truncation is done): the cut's log fails (it refuses writes until a
 * restart: no record lands at the cut offsets with the old point in the
 * file), and the truncation's cb gets the error. The restart takes the
 * file's old point down to the log's end, the cut, and writes the file
 * with it. */
static void test_topic_pause_cut_fails_with_its_file(void **state)
{
    (void)state;
    tn_topic_t *t;
    tn_plog_trunc_t r;
    cutw_t c;
    qfx_t *q = cut_behind_a_write(&t, &r, &c);
    tn_io_fail_sync_after(0, UV_EIO); /* the cut's pause write, after the held one */
    assert_true(qfx_run_until(q, cb_done, &c.w));
    assert_true(qfx_run_until(q, topic_quiet, t));
    tn_io_fail_sync_after(-1, 0);
    uint64_t off = 0;
    int rc = tu_append(&q->fx->loop, t->parts[0]->plog, "new", 3, &off);
    cut_print("cut at 1, its pause write failed", &c);
    print_message("an append after it: %s\n", tn_strerror(rc));
    assert_int_equal(c.w.status, UV_EIO);
    assert_int_equal(rc, UV_EIO);
    assert_int_equal(c.file_hold, 3);
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    assert_true(t->paused);
    assert_int_equal(t->parts[0]->hold, 1);
    /* ... and writes it at once, before anything is appended there: a
     * second restart, with records at those offsets again, holds them. */
    c.file_hold = UINT64_MAX;
    c.t = t;
    on_cut_seen(&r, 0);
    print_message("after the restart: the file's hold %" PRIu64 "\n", c.file_hold);
    assert_int_equal(c.file_hold, 1);
    qfx_free(q);
}

/* The broker closes while a cut waits behind a pause write: the write for
 * it cannot start, the cut's log fails and its cb gets TN_ECLOSED; the
 * close does not wait for it forever (the log is pinned meanwhile). */
static void test_topic_pause_cut_waiting_at_close(void **state)
{
    (void)state;
    tn_topic_t *t;
    tn_plog_trunc_t r;
    cutw_t c;
    qfx_t *q = cut_behind_a_write(&t, &r, &c);
    qfx_close(q);
    cut_print("cut at 1, the broker closed", &c);
    assert_true(c.w.done);
    assert_int_equal(c.w.status, TN_ECLOSED);
    qfx_free(q);
}

/* A deletion of the topic asked while a cut waits behind a pause write
 * waits for both writes (tn_topic_wait_idle): the cut has ended by then,
 * the file holding its point, and the deletion goes on. */
static void test_topic_pause_cut_waiting_at_delete(void **state)
{
    (void)state;
    tn_topic_t *t;
    tn_plog_trunc_t r;
    cutw_t c;
    qfx_t *q = cut_behind_a_write(&t, &r, &c);
    assert_int_equal(tn_topic_delete(t, NULL, NULL), UV_EBUSY);
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    assert_int_equal(tn_topic_wait_idle(t, &w.w), UV_EAGAIN);
    qfx_wait(q, &w, 0);
    cut_print("cut at 1, the topic idle for its deletion", &c);
    assert_true(c.w.done);
    assert_int_equal(c.w.status, 0);
    assert_int_equal(c.file_hold, 1);
    cbw_t d = {false, 0};
    assert_int_equal(tn_topic_delete(t, on_followed, &d), 0);
    assert_true(qfx_run_until(q, cb_done, &d));
    assert_int_equal(d.status, 0);
    qfx_free(q);
}

/* The log a cut waits behind a pause write on is closed meanwhile (the
 * engine sets a follower's log aside: tn_topic_part_abandon; the replica
 * manager's own log closes likewise), its close queued behind the
 * truncation: the log stays open until the cut has ended (it is pinned
 * from the truncation's submission), not freed under the cut that the
 * pause write ends later. */
static bool aside_closed, closed_first;

static void on_aside_closed(tn_plog_t *pl)
{
    (void)pl;
    aside_closed = true;
}

static void on_cut_of_closing(tn_plog_trunc_t *req, int status)
{
    closed_first = aside_closed;
    on_cut_seen(req, status);
}

static void test_topic_pause_cut_of_a_log_closing(void **state)
{
    (void)state;
    tn_topic_t *t;
    tn_plog_trunc_t r;
    cutw_t c;
    qfx_t *q = paused_follower(1, &t);
    assert_int_equal(setenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS", "500", 1), 0);
    tn_plog_t *pl = t->parts[0]->plog;
    memset(&c, 0, sizeof(c));
    c.t = t;
    r.data = &c;
    aside_closed = closed_first = false;
    assert_int_equal(tn_plog_truncate(pl, &r, 1, 0, on_cut_of_closing), 0);
    assert_int_equal(tn_topic_part_abandon(t, 0), 0);
    pl->close_cb = on_aside_closed; /* set by the abandon to NULL: seen here */
    assert_true(qfx_run_until(q, cb_done, &c.w));
    assert_int_equal(unsetenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS"), 0);
    cut_print("cut at 1, its log closed meanwhile", &c);
    print_message("the log closed before the cut's cb: %d\n", closed_first);
    assert_false(closed_first);
    assert_int_equal(c.w.status, 0);
    assert_int_equal(c.file_hold, 1);
    assert_true(qfx_run_until(q, topic_quiet, t));
    qfx_run_for(q, 50);
    assert_true(aside_closed);
    qfx_free(q);
}

/* Topic t of two partitions, "p0" and "p1" published to them while every
 * partition was local (no placement: as recovered from disk), then the
 * placement set and followed with every partition unplaced (owner 0);
 * readopt: the place_readopt hook (NULL: none). */
static qfx_t *two_left_unplaced(bool (*readopt)(void *, const tn_topic_t *, uint32_t),
                                tn_topic_t **out)
{
    qfx_t *q = qfx_new(qfx_small_memlogs, NULL);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    assert_int_equal(publish(q, "t", "p0", 0, NULL, NULL), 0);
    assert_int_equal(publish(q, "t", "p1", 1, NULL, NULL), 0);
    tn_broker_set_placement(q->b, place, NULL);
    q->b->place_readopt = readopt;
    place_all(0);
    follow(q, t);
    *out = t;
    return q;
}

/* A partition open here that the placement gives to another node (a data
 * directory restored elsewhere) stops serving; its files stay. One left
 * unplaced stays local. */
static void test_given_away_left_on_disk(void **state)
{
    (void)state;
    tn_topic_t *t;
    qfx_t *q = two_left_unplaced(NULL, &t);
    assert_true(tn_topic_part_local(t, 0) && tn_topic_part_local(t, 1));
    owners[1] = 9;
    tn_broker_follow_placement(q->b);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(tn_topic_part_local(t, 1));
    assert_int_equal(t->parts[1]->owner, 9);
    assert_int_equal(tn_topic_depth(t), 1);
    assert_int_equal(publish(q, "t", "no", 1, NULL, NULL), TN_EREMOTE);
    bool on_disk[MAXP];
    parts_on_disk(q, "t", on_disk);
    assert_true(on_disk[1]);
    /* Set aside while running: given back, it waits for a restart. */
    owners[1] = SELF;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 1));
    /* Its record is still there for whoever looks at the disk. */
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    assert_true(tn_topic_part_local(t, 1));
    const tn_centry_t *e = NULL;
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    int rc = tn_part_record(t, 1, 0, &w.w, &e);
    if (rc == UV_EAGAIN) {
        assert_true(qfx_run_until(q, qfx_wait_done, &w));
        rc = tn_part_record(t, 1, 0, NULL, &e);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(e->body->len, 2);
    assert_memory_equal(e->body->data, "p1", 2);
    qfx_free(q);
}

static bool odd_replicated(void *arg, const tn_topic_t *t, uint32_t p)
{
    (void)arg;
    (void)t;
    return p % 2 == 1;
}

/* A partition open here (found on disk at start) that the placement
 * leaves unplaced (owner 0): a factor-1 one stays local, a replicated one
 * (offline: its state names no leader) goes remote, its log set aside,
 * and serves nothing. Before, both stayed local, so a node served the
 * copy of an offline partition the metastore may not even list on it
 * (cluster_offline_copy). */
static void test_offline_replicated_not_kept(void **state)
{
    (void)state;
    tn_topic_t *t;
    qfx_t *q = two_left_unplaced(odd_replicated, &t);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(tn_topic_part_local(t, 1));
    assert_int_equal(t->parts[1]->owner, 0);
    assert_non_null(tn_topic_part_plog(t, 1)); /* set aside */
    assert_int_equal(tn_topic_depth(t), 1);
    assert_int_equal(publish(q, "t", "no", 1, NULL, NULL), TN_EREMOTE);
    q->b->place_readopt = NULL;
    qfx_free(q);
}

/* A replicated partition's leader steps down (the place_readopt hook says
 * replicated): its log is set aside, and the consumers of the topic that
 * asked to hear of it (tn_consumer_t.moved: NSQ's) are detached and told;
 * those with a left callback (a /v1 lane's) are told and stay attached;
 * the others stay, untold. */
static int moved_calls;
static int left_calls;

static void on_moved(tn_consumer_t *c)
{
    (void)c;
    moved_calls++;
}

static void on_left(tn_consumer_t *c)
{
    assert_non_null(c->ch); /* still attached */
    left_calls++;
}

static bool all_replicated(void *arg, const tn_topic_t *t, uint32_t p)
{
    (void)arg;
    (void)t;
    (void)p;
    return true;
}

/* A dead letter's copy, held until the test ends it (aside_held_cb). */
static tn_pub_t *aside_held;
static tn_pub_cb aside_held_cb;

static int hold_copy(void *arg, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms,
                     tn_pub_cb cb)
{
    (void)arg;
    (void)topic;
    (void)len;
    (void)deliver_at_ms;
    aside_held = p;
    aside_held_cb = cb;
    return 0;
}

static void on_move_ended(void *arg, int status)
{
    *(int *)arg = status == 0 ? 1 : status;
}

static bool move_ended(void *arg)
{
    return *(int *)arg != 0;
}

/* A dead-letter move whose copy is durable only after this node handed
 * the partition to another leader writes nothing into the log set aside
 * (which follows that leader's records): the new leader's delivery
 * decides, and the message, back among the pending entries here, is
 * delivered again once the partition is led here again (unless that log
 * settled it meanwhile). Before: its FIN went into the set-aside log, a
 * settle the new leader never saw. */
static void test_dead_letter_done_after_hand_over_writes_no_fin(void **state)
{
    (void)state;
    tn_topic_t *t;
    tn_channel_t *ch;
    qfx_t *q = replicated_t("m", &t, &ch);
    qfx_sink_t s;
    attach(&s, ch, 10);
    qfx_expect_n(q, &s, 3);
    tn_broker_set_publisher(q->b, hold_copy, NULL);
    tn_msg_t *body = tn_msg_new("poison", 6);
    int ended = 0;
    assert_int_equal(tn_consumer_dead_letter(&s.c, 0, s.d[0].offset, true, s.d[0].nonce, body, NULL,
                                             on_move_ended, &ended),
                     0);
    tn_msg_unref(body);
    assert_non_null(aside_held);
    owners[0] = 9;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    aside_held_cb(aside_held, 0); /* the copy is durable now */
    assert_true(qfx_run_until(q, move_ended, &ended));
    bool settled = tn_cursor_is_settled(&ch->parts[0]->cur, s.d[0].offset);
    printf("move done after the hand-over: status %d (%s), settled in the set-aside log %d, "
           "dlq_count %" PRIu64 "\n",
           ended, ended == 1 ? "ok" : tn_err_name(ended), settled, ch->dlq_count);
    assert_false(settled);
    assert_int_equal(ended, TN_EREMOTE);
    assert_int_equal(ch->dlq_count, 0);
    tn_broker_set_publisher(q->b, NULL, NULL);
    /* Led here again: message 0 is delivered again, not lost. */
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    qfx_expect_n(q, &s, 4);
    assert_int_equal(s.d[3].offset, s.d[0].offset);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

static void test_moved_consumers_dropped(void **state)
{
    (void)state;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    place_all(SELF);
    q->b->place_readopt = all_replicated;
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t *nsq = calloc(1, sizeof(*nsq)), *other = calloc(1, sizeof(*other));
    qfx_sink_t *lane = calloc(1, sizeof(*lane));
    attach(nsq, ch, 1);
    nsq->c.moved = on_moved;
    attach(other, ch, 1);
    attach(lane, ch, 1);
    lane->c.left = on_left;
    moved_calls = 0;
    left_calls = 0;
    /* Nothing moved: a pass that changes nothing tells no one. */
    follow(q, t);
    assert_int_equal(moved_calls, 0);
    assert_int_equal(left_calls, 0);
    assert_int_equal(ch->nconsumers, 3);
    owners[1] = 9;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 1));
    assert_non_null(t->parts[1]->plog); /* set aside, not closed */
    assert_int_equal(moved_calls, 1);
    assert_int_equal(left_calls, 1);
    assert_null(nsq->c.ch);
    assert_ptr_equal(other->c.ch, ch);
    assert_ptr_equal(lane->c.ch, ch);
    assert_int_equal(ch->nconsumers, 2);
    tn_consumer_detach(&other->c);
    tn_consumer_detach(&lane->c);
    free(nsq);
    free(other);
    free(lane);
    qfx_free(q);
}

/* tn_topic_part_requeue_leases: every lease out on the partition goes
 * back as a REQ record keeping its attempts (the next delivery counts
 * one more), the other partitions' leases stay, and cb runs once the
 * records are durable. */
static int requeued_status = -1;

static void on_requeued(void *arg, int status)
{
    (void)arg;
    requeued_status = status;
}

static bool requeued(void *arg)
{
    (void)arg;
    return requeued_status != -1;
}

static void test_requeue_leases(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t *s = calloc(1, sizeof(*s));
    attach(s, ch, 3);
    assert_int_equal(publish(q, "t", "a", 0, NULL, NULL), 0);
    assert_int_equal(publish(q, "t", "b", 0, NULL, NULL), 0);
    assert_int_equal(publish(q, "t", "c", 1, NULL, NULL), 0);
    qfx_expect_n(q, s, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(s->d[i].attempts, 1);
    tn_topic_part_hold(t, 0, true); /* as the replica manager does */
    requeued_status = -1;
    assert_int_equal(tn_topic_part_requeue_leases(t, 0, on_requeued, NULL), 0);
    assert_true(qfx_run_until(q, requeued, NULL));
    assert_int_equal(requeued_status, 0);
    assert_int_equal(tn_consumer_inflight(&s->c), 1); /* partition 1's stays */
    tn_topic_part_hold(t, 0, false);
    tn_consumer_credit(&s->c, 5);
    qfx_expect_n(q, s, 5);
    for (int i = 3; i < 5; i++) {
        assert_int_equal(s->d[i].partition, 0);
        assert_int_equal(s->d[i].attempts, 2);
    }
    tn_consumer_detach(&s->c);
    free(s);
    qfx_free(q);
}

/* A replicated partition's log set aside while another log object of the
 * partition (the replica manager's own, cluster/replica.c) wrote on: it is
 * stale. tn_topic_part_abandon closes it, and placed here again the
 * partition is opened from its files, with every record, rather than
 * taken back at its old end. */
static void test_abandoned_log_reopened_from_files(void **state)
{
    (void)state;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    place_all(SELF);
    q->b->place_readopt = all_replicated;
    tn_topic_t *t = qfx_topic(q, "t", 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(publish(q, "t", "old", 0, NULL, NULL), 0);
    assert_int_equal(tn_topic_part_abandon(t, 0), 0); /* local: nothing to do */
    assert_non_null(t->parts[0]->plog);
    owners[0] = 9;
    follow(q, t);
    tn_plog_t *aside = t->parts[0]->plog;
    assert_non_null(aside);
    tn_plog_t *own = NULL;
    assert_int_equal(tn_plog_open(q->fx->store, "t", 0, &own), 0);
    for (int i = 0; i < 4; i++) {
        uint64_t off = 0;
        assert_int_equal(tu_append(&q->fx->loop, own, "new", 3, &off), 0);
        assert_int_equal(off, 3 + (uint64_t)i);
    }
    assert_int_equal(tn_plog_written_next(aside), 3); /* stale */
    assert_int_equal(tn_topic_part_abandon(t, 0), 0);
    assert_null(t->parts[0]->plog);
    assert_false(tn_topic_part_local(t, 0));
    tu_plog_close(&q->fx->loop, own);
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    assert_non_null(t->parts[0]->plog);
    assert_int_equal(tn_plog_written_next(t->parts[0]->plog), 7);
    place_all(SELF);
    qfx_free(q);
}

/* A replicated partition dropped from this node (cluster/replica.c,
 * "quarantine marks"): tn_topic_part_release closes the log set aside and
 * the channels' logs of it, the other partition goes on being served, and
 * the copy, marked, can then be moved to quarantine/ while the engine
 * runs; placed here again, the partition is opened from its (now empty)
 * files, its channel with a log again. */
static void test_released_partition_moved(void **state)
{
    (void)state;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    place_all(SELF);
    q->b->place_readopt = all_replicated;
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t *s = calloc(1, sizeof(*s));
    attach(s, ch, 10);
    assert_int_equal(publish(q, "t", "a", 0, NULL, NULL), 0);
    qfx_expect_n(q, s, 1);
    assert_int_equal(tn_consumer_fin(&s->c, 0, s->d[0].offset, false, 0), 0);
    cbw_t w = {0};
    assert_int_equal(tn_topic_part_release(t, 0, on_followed, &w), UV_EBUSY); /* local */
    assert_int_equal(tn_topic_part_release(t, 5, on_followed, &w), UV_EINVAL);
    owners[0] = 9;
    follow(q, t);
    assert_non_null(t->parts[0]->plog); /* set aside */
    assert_non_null(ch->parts[0]->cl);
    qfx_run_for(q, 20); /* the FIN's record completes */
    assert_int_equal(tn_topic_part_release(t, 0, on_followed, &w), 0);
    assert_true(qfx_run_until(q, cb_done, &w));
    assert_int_equal(w.status, 0);
    assert_null(t->parts[0]->plog);
    assert_null(ch->parts[0]->cl);
    /* Nothing held any more: again is nothing to do. */
    cbw_t w2 = {0};
    assert_int_equal(tn_topic_part_release(t, 0, on_followed, &w2), 0);
    assert_true(w2.done);
    /* Partition 1 is served as before. */
    assert_int_equal(publish(q, "t", "b", 1, NULL, NULL), 0);
    qfx_expect_n(q, s, 2);
    assert_int_equal(s->d[1].partition, 1);
    /* Marked and moved while the engine runs. */
    const char *path = q->fx->store->path;
    assert_int_equal(tn_store_mark_dropped(path, "t", 0, true, "pe2"), 0);
    bool moved = false;
    assert_int_equal(tn_store_quarantine_dropped(path, "t", 0, &moved), 0);
    assert_true(moved);
    bool on_disk[MAXP];
    parts_on_disk(q, "t", on_disk);
    assert_false(on_disk[0]);
    assert_true(on_disk[1]);
    /* Given back: opened from its files, none now: an empty log. */
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    assert_int_equal(tn_plog_written_next(t->parts[0]->plog), 0);
    assert_non_null(ch->parts[0]->cl);
    assert_int_equal(publish(q, "t", "c", 0, NULL, NULL), 0);
    qfx_expect_n(q, s, 3);
    assert_int_equal(s->d[2].partition, 0);
    assert_int_equal(s->d[2].offset, 0);
    tn_consumer_detach(&s->c);
    free(s);
    place_all(SELF);
    qfx_free(q);
}

/* A held partition (a leader about to hand over: tn_topic_part_hold)
 * takes publishes and settles but delivers nothing until the hold ends;
 * the other partitions deliver as ever. */
static void test_held_partition_delivers_nothing(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t *s = calloc(1, sizeof(*s));
    attach(s, ch, 100);
    assert_int_equal(publish(q, "t", "a", 0, NULL, NULL), 0);
    qfx_expect_n(q, s, 1);
    tn_topic_part_hold(t, 0, true);
    tn_topic_part_hold(t, 9, true); /* past nparts: nothing */
    assert_int_equal(publish(q, "t", "b", 0, NULL, NULL), 0);
    assert_int_equal(publish(q, "t", "c", 1, NULL, NULL), 0);
    qfx_expect_n(q, s, 2);
    qfx_run_for(q, 30);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->d[1].partition, 1);
    /* Settles of what it delivered before go on. */
    assert_int_equal(tn_consumer_fin(&s->c, 0, s->d[0].offset, false, 0), 0);
    tn_topic_part_hold(t, 0, false);
    qfx_expect_n(q, s, 3);
    assert_int_equal(s->d[2].partition, 0);
    tn_consumer_detach(&s->c);
    free(s);
    qfx_free(q);
}

/* A leader's delivery lease (tn_topic_part_lease, cluster/handfence.h):
 * a partition whose lease lapsed delivers nothing (publishes and settles
 * go on) until it is renewed; a partition without one is not bounded. */
static void test_lapsed_lease_delivers_nothing(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t *s = calloc(1, sizeof(*s));
    attach(s, ch, 100);
    uv_loop_t *loop = q->b->loop;
    uv_update_time(loop);
    tn_topic_part_lease(t, 0, uv_now(loop) + 60000); /* valid */
    tn_topic_part_lease(t, 9, 1);                    /* past nparts: nothing */
    assert_int_equal(publish(q, "t", "a", 0, NULL, NULL), 0);
    qfx_expect_n(q, s, 1);
    tn_topic_part_lease(t, 0, 1); /* lapsed */
    assert_int_equal(publish(q, "t", "b", 0, NULL, NULL), 0);
    assert_int_equal(publish(q, "t", "c", 1, NULL, NULL), 0);
    qfx_expect_n(q, s, 2);
    qfx_run_for(q, 30);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->d[1].partition, 1);
    assert_int_equal(tn_consumer_fin(&s->c, 0, s->d[0].offset, false, 0), 0);
    /* Renewed: what waited is delivered without another publish. */
    uv_update_time(loop);
    tn_topic_part_lease(t, 0, uv_now(loop) + 60000);
    qfx_expect_n(q, s, 3);
    assert_int_equal(s->d[2].partition, 0);
    /* A lease that runs out by itself stops deliveries too. */
    uv_update_time(loop);
    tn_topic_part_lease(t, 0, uv_now(loop) + 20);
    qfx_run_for(q, 40);
    assert_int_equal(publish(q, "t", "d", 0, NULL, NULL), 0);
    qfx_run_for(q, 30);
    assert_int_equal(s->n, 3);
    tn_topic_part_lease(t, 0, 0); /* no bound */
    qfx_expect_n(q, s, 4);
    tn_consumer_detach(&s->c);
    free(s);
    qfx_free(q);
}

/* A restart finds only the local partitions on disk: the missing ones
 * are remote (not placed yet), and channels are found on the lowest local
 * partition when partition 0 is another node's. */
static void test_restart_with_holes(void **state)
{
    (void)state;
    place_all(SELF);
    owners[0] = 4;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 3);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    assert_int_equal(publish(q, "t", "m", 2, NULL, NULL), 0);
    (void)ch;
    qfx_restart(q);
    t = qfx_topic(q, "t", 0);
    assert_int_equal(t->nparts, 3);
    assert_false(tn_topic_part_local(t, 0));
    assert_int_equal(t->parts[0]->owner, 0); /* until the placement is followed */
    assert_true(tn_topic_part_local(t, 1) && tn_topic_part_local(t, 2));
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    assert_int_equal(t->parts[0]->owner, 4);
    tn_channel_t *found = NULL;
    assert_int_equal(tn_topic_channel(t, "c", 1, false, NULL, &found), 0);
    qfx_sink_t s;
    attach(&s, found, 10);
    qfx_expect_n(q, &s, 1);
    assert_int_equal(s.d[0].partition, 2);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* Growth asks the placement for the new partitions only. */
static void test_grow_places_new_partitions(void **state)
{
    (void)state;
    place_all(SELF);
    owners[2] = 3;
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_topic_t *t = qfx_topic(q, "t", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_grown_flag = false;
    assert_int_equal(tn_topic_grow(t, 3, qfx_on_grown, NULL), 0);
    assert_true(qfx_run_until(q, qfx_is_grown, NULL));
    assert_int_equal(qfx_grown_status, 0);
    assert_int_equal(t->nparts, 3);
    assert_true(tn_topic_part_local(t, 1));
    assert_false(tn_topic_part_local(t, 2));
    assert_int_equal(t->parts[2]->owner, 3);
    bool on_disk[MAXP];
    parts_on_disk(q, "t", on_disk);
    assert_true(on_disk[0] && on_disk[1] && !on_disk[2]);
    qfx_sink_t s;
    attach(&s, ch, 10);
    for (int i = 0; i < 4; i++)
        assert_int_equal(publish(q, "t", "m", -1, NULL, NULL), 0);
    qfx_expect_n(q, &s, 4);
    for (int i = 0; i < 4; i++)
        assert_int_not_equal(s.d[i].partition, 2);
    assert_int_equal(publish(q, "t", "m", 2, NULL, NULL), TN_EREMOTE);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* The grow-here hook the tests play the catalog with: it holds the
 * waiter (hook_answer 0) or answers at once with hook_answer. */
static int hook_answer;
static int hook_asks;
static tn_waiter_t *hook_waiter;

static int grow_hook(void *arg, tn_topic_t *t, tn_waiter_t *w)
{
    (void)arg;
    (void)t;
    hook_asks++;
    if (hook_answer != 0)
        return hook_answer;
    hook_waiter = w;
    return UV_EAGAIN;
}

/* An NSQ publish (grow_here) of body to topic, started: 0 or the status
 * it was refused with at once. */
static int start_nsq_pub(qfx_t *q, const char *topic, qfx_pubw_t *w)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(tn_pub_init(&w->p, 1), 0);
    assert_int_equal(tn_pub_set(&w->p, 0, "m", 1), 0);
    w->p.data = w;
    w->p.grow_here = true;
    return tn_broker_publish(q->b, topic, strlen(topic), &w->p, 0, qfx_on_pub);
}

static void hook_says(qfx_t *q, qfx_pubw_t *w, int status)
{
    assert_non_null(hook_waiter);
    tn_waiter_t *h = hook_waiter;
    hook_waiter = NULL;
    h->cb(h, status);
    assert_true(qfx_run_until(q, qfx_pub_done, w));
}

static bool deleted_flag;
static void on_deleted(void *arg, int status)
{
    (void)arg;
    assert_int_equal(status, 0);
    deleted_flag = true;
}

static bool is_deleted(void *arg)
{
    (void)arg;
    return deleted_flag;
}

/* An NSQ publish that finds every partition on other nodes asks the
 * grow-here hook once, waits for it, and goes to the partition it got;
 * a refusal, a late error, an answer with still no partition here, or a
 * deletion meanwhile fail it; other publishes and ephemeral topics never
 * ask. */
static void test_grow_here(void **state)
{
    (void)state;
    place_all(5);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    tn_broker_set_grow_here(q->b, grow_hook, NULL);
    hook_asks = 0;
    hook_answer = 0;
    hook_waiter = NULL;
    /* Not an NSQ publish (a /v1 produce): refused at once, no ask. */
    assert_int_equal(publish(q, "fleet", "m", -1, NULL, NULL), TN_EREMOTE);
    assert_int_equal(hook_asks, 0);
    qfx_pubw_t w;
    assert_int_equal(start_nsq_pub(q, "fleet", &w), 0);
    qfx_run_for(q, 50);
    assert_false(w.done);
    assert_int_equal(hook_asks, 1);
    /* The metastore gives this node partition 1; the engine grows the
     * topic; then the hook answers and the publish goes there. */
    owners[1] = SELF;
    tn_topic_t *t = qfx_topic(q, "fleet", 0);
    qfx_grown_flag = false;
    assert_int_equal(tn_topic_grow(t, 2, qfx_on_grown, NULL), 0);
    assert_true(qfx_run_until(q, qfx_is_grown, NULL));
    assert_false(w.done);
    hook_says(q, &w, 0);
    assert_int_equal(w.status, 0);
    assert_int_equal(w.p.partition, 1);
    assert_int_equal(hook_asks, 1);
    tn_pub_fini(&w.p);
    /* With a partition here, no ask. */
    assert_int_equal(start_nsq_pub(q, "fleet", &w), 0);
    assert_true(qfx_run_until(q, qfx_pub_done, &w));
    assert_int_equal(w.status, 0);
    assert_int_equal(hook_asks, 1);
    tn_pub_fini(&w.p);

    /* "far" has its one partition on node 5. The hook refuses at once. */
    hook_answer = TN_EREMOTE;
    assert_int_equal(start_nsq_pub(q, "far", &w), 0); /* waits for the creation first */
    assert_true(qfx_run_until(q, qfx_pub_done, &w));
    assert_int_equal(w.status, TN_EREMOTE);
    assert_int_equal(hook_asks, 2);
    tn_pub_fini(&w.p);
    /* An error later (a refused growth, the deadline). */
    hook_answer = 0;
    assert_int_equal(start_nsq_pub(q, "far", &w), 0);
    hook_says(q, &w, UV_ETIMEDOUT);
    assert_int_equal(w.status, TN_EREMOTE);
    assert_int_equal(w.p.owner, 0);
    tn_pub_fini(&w.p);
    /* A 0 with still no partition here: refused, never asked twice. */
    assert_int_equal(start_nsq_pub(q, "far", &w), 0);
    hook_says(q, &w, 0);
    assert_int_equal(w.status, TN_EREMOTE);
    assert_int_equal(hook_asks, 4);
    tn_pub_fini(&w.p);
    /* The topic deleted while the publish waited: it fails, and the topic
     * goes once the hook has answered. */
    assert_int_equal(start_nsq_pub(q, "far", &w), 0);
    assert_non_null(hook_waiter);
    deleted_flag = false;
    assert_int_equal(tn_broker_delete(q->b, "far", NULL, on_deleted, NULL), 0);
    assert_true(qfx_run_until(q, is_deleted, NULL));
    hook_says(q, &w, 0);
    assert_int_equal(w.status, TN_ENOTFOUND);
    tn_pub_fini(&w.p);
    tn_topic_t *gone = NULL;
    assert_int_equal(tn_broker_topic(q->b, "far", 3, false, 0, NULL, &gone), TN_ENOTFOUND);
    /* Ephemeral topics are local everywhere: no ask. */
    assert_int_equal(start_nsq_pub(q, "e#ephemeral", &w), 0);
    assert_true(qfx_run_until(q, qfx_pub_done, &w));
    assert_int_equal(w.status, 0);
    assert_int_equal(hook_asks, 5);
    tn_pub_fini(&w.p);
    qfx_free(q);
}

/* Without a placement function nothing changes: every partition is local
 * and following is a no-op (a lone engine). */
static void test_no_placement_all_local(void **state)
{
    (void)state;
    qfx_t *q = qfx_new(qfx_small_memlogs, NULL);
    tn_topic_t *t = qfx_topic(q, "t", 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_true(tn_topic_part_local(t, i));
    follow(q, t);
    tn_broker_follow_placement(q->b);
    for (uint32_t i = 0; i < 3; i++)
        assert_true(tn_topic_part_local(t, i));
    qfx_free(q);
}

/* A replicated partition's channel records from another leader
 * (tn_broker_chan_apply, cluster/setrepl.h) while this node's engine has
 * its log set aside: refused while served here, applied to the channel
 * and written to its log while set aside, and served from that state
 * when the partition is led here again. */
static bool readopt_yes(void *arg, const tn_topic_t *t, uint32_t p)
{
    (void)arg;
    (void)t;
    (void)p;
    return true;
}

typedef struct {
    tn_walop_t op;
    bool done;
    int status;
} applyw_t;

static void on_applied(tn_walop_t *op, int status)
{
    applyw_t *w = op->data;
    w->done = true;
    w->status = status;
}

static bool applied(void *arg)
{
    return ((applyw_t *)arg)->done;
}

static void test_chan_apply_while_set_aside(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = readopt_yes;
    tn_topic_t *t = qfx_topic(q, "ra", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    for (int i = 0; i < 3; i++)
        assert_int_equal(publish(q, "ra", "m", 0, NULL, NULL), 0);
    applyw_t w[2];
    memset(w, 0, sizeof(w));
    tn_walrec_t fin0 = {.op = TN_WAL_FIN, .offset = 0};
    tn_walrec_t fin1 = {.op = TN_WAL_FIN, .offset = 1};
    w[0].op.data = &w[0];
    w[1].op.data = &w[1];
    /* Served here: this node leads it, its own settles write the log. */
    assert_int_equal(tn_broker_chan_apply(q->b, "ra", "c", 0, &fin0, &w[0].op, on_applied),
                     UV_EBUSY);
    assert_int_equal(tn_broker_chan_apply(q->b, "ra", "nope", 0, &fin0, &w[0].op, on_applied),
                     TN_ENOTFOUND);
    /* Another node leads it: the log is set aside, records go in. */
    owners[0] = 7;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    assert_int_equal(tn_broker_chan_apply(q->b, "ra", "c", 0, &fin0, &w[0].op, on_applied), 0);
    assert_int_equal(tn_broker_chan_apply(q->b, "ra", "c", 0, &fin1, &w[1].op, on_applied), 0);
    assert_true(qfx_run_until(q, applied, &w[1]));
    assert_true(w[0].done);
    assert_int_equal(w[0].status, 0);
    assert_int_equal(w[1].status, 0);
    /* Led here again: served from that state, lowest offset first, so
     * the first delivery is offset 2. */
    owners[0] = SELF;
    follow(q, t);
    qfx_sink_t s;
    attach(&s, ch, 3);
    qfx_expect_n(q, &s, 1);
    assert_int_equal(s.d[0].offset, 2);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* A REQ (a nack) the other leader made while this node's log was set
 * aside keeps its due time and its attempts when the partition is led
 * here again: the message waits out its delay and comes with the
 * attempts the record carries. Before, the record reached only the
 * cursor, and the scan delivered the message at once with its attempts
 * counted from 0 (a hand-back by the preferred-leader rebalance forgot
 * every nack's delay the other leader had answered OK). */
static void test_chan_apply_req_keeps_delay(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = readopt_yes;
    tn_topic_t *t = qfx_topic(q, "rq", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    for (int i = 0; i < 4; i++)
        assert_int_equal(publish(q, "rq", "m", 0, NULL, NULL), 0);
    owners[0] = 7;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    /* Node 7 put offset 0 back for a minute (after its 3rd delivery),
     * offset 1 for now (its 4th), offset 2 for 300 ms (its 2nd). */
    int64_t now = tn_now_wall_ms();
    tn_walrec_t recs[3] = {
        {.op = TN_WAL_REQ, .offset = 0, .due_ms = now + 60000, .attempts = 3},
        {.op = TN_WAL_REQ, .offset = 1, .due_ms = now, .attempts = 4},
        {.op = TN_WAL_REQ, .offset = 2, .due_ms = now + 300, .attempts = 2},
    };
    applyw_t w[3];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 3; i++) {
        w[i].op.data = &w[i];
        assert_int_equal(tn_broker_chan_apply(q->b, "rq", "c", 0, &recs[i], &w[i].op, on_applied),
                         0);
    }
    assert_true(qfx_run_until(q, applied, &w[2]));
    for (int i = 0; i < 3; i++)
        assert_int_equal(w[i].status, 0);
    /* Led here again: offsets 1 and 3 now, offset 2 once its time came
     * (nothing else wakes the channel), offset 0 not before its time. */
    owners[0] = SELF;
    follow(q, t);
    qfx_sink_t s;
    attach(&s, ch, 4);
    qfx_expect_n(q, &s, 3);
    qfx_run_for(q, 200);
    assert_int_equal(s.n, 3);
    static const uint32_t want[4] = {0, 5, 3, 1}; /* attempts by offset */
    for (int i = 0; i < 3; i++) {
        assert_int_not_equal(s.d[i].offset, 0);
        assert_int_equal(s.d[i].attempts, want[s.d[i].offset]);
    }
    assert_int_equal(s.d[2].offset, 2);
    assert_true(tn_now_wall_ms() >= now + 300);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* A REQ another leader made while this node's log was set aside, then
 * settled there (a FIN of a later delivery, or a frontier moved past it
 * by an EMPTY: retention, a purge) leaves nothing waiting here: the
 * pending entry the REQ made goes with the settle. Before, it stayed
 * until this node led the partition again and its delivery came due (a
 * set-aside log that follows for days kept one per message ever nacked,
 * and /stats counted them as deferred once led here). */
static void test_chan_apply_settle_drops_req(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = readopt_yes;
    tn_topic_t *t = qfx_topic(q, "rs", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    for (int i = 0; i < 4; i++)
        assert_int_equal(publish(q, "rs", "m", 0, NULL, NULL), 0);
    owners[0] = 7;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    /* Node 7 puts offsets 0, 1 and 2 back for a minute, then settles 0
     * (FIN) and everything below 2 (EMPTY). */
    int64_t due = tn_now_wall_ms() + 60000;
    tn_walrec_t recs[5] = {
        {.op = TN_WAL_REQ, .offset = 0, .due_ms = due, .attempts = 1},
        {.op = TN_WAL_REQ, .offset = 1, .due_ms = due, .attempts = 1},
        {.op = TN_WAL_REQ, .offset = 2, .due_ms = due, .attempts = 1},
        {.op = TN_WAL_FIN, .offset = 0},
        {.op = TN_WAL_EMPTY, .offset = 2},
    };
    applyw_t w[5];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 5; i++) {
        w[i].op.data = &w[i];
        assert_int_equal(tn_broker_chan_apply(q->b, "rs", "c", 0, &recs[i], &w[i].op, on_applied),
                         0);
    }
    assert_true(qfx_run_until(q, applied, &w[4]));
    for (int i = 0; i < 5; i++)
        assert_int_equal(w[i].status, 0);
    /* Led here again: only offset 2 waits for its time, offset 3 goes. */
    owners[0] = SELF;
    follow(q, t);
    tn_channel_stats_t st;
    tn_channel_stats(ch, &st);
    assert_int_equal(st.deferred, 1);
    qfx_sink_t s;
    attach(&s, ch, 4);
    qfx_expect_n(q, &s, 1);
    qfx_run_for(q, 100);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.d[0].offset, 3);
    tn_consumer_detach(&s.c);
    qfx_free(q);
}

/* A record the set-aside log refuses (its write failed: a sticky error)
 * changes nothing in the engine, so the leader's retry of it (setrepl.c
 * engine_write sends what was not queued again) counts nothing twice.
 * Before, a REQ reached the cursor before the refusal: requeue_count went
 * up once per retry (3 here instead of 1). */
static void test_chan_apply_refused_counts_once(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = readopt_yes;
    tn_topic_t *t = qfx_topic(q, "rf", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    assert_int_equal(publish(q, "rf", "m", 0, NULL, NULL), 0);
    owners[0] = 7;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    tn_walrec_t req = {.op = TN_WAL_REQ, .offset = 0, .due_ms = tn_now_wall_ms(), .attempts = 1};
    applyw_t w[3];
    memset(w, 0, sizeof(w));
    w[0].op.data = &w[0];
    /* Its WAL write (after the zeroed space ahead) fails: the log's
     * error is sticky from then on. */
    tn_io_fail_write_after(1, UV_EIO);
    assert_int_equal(tn_broker_chan_apply(q->b, "rf", "c", 0, &req, &w[0].op, on_applied), 0);
    assert_true(qfx_run_until(q, applied, &w[0]));
    tn_io_fail_write_after(-1, 0);
    assert_int_equal(w[0].status, UV_EIO);
    /* The follower's cursor (what /stats shows once led here again). */
    const tn_cursor_t *cur = &ch->parts[0]->cur;
    assert_int_equal(cur->requeue_count, 1);
    /* The leader sends it again, twice: refused, nothing counted. */
    for (int i = 1; i < 3; i++) {
        w[i].op.data = &w[i];
        assert_int_equal(tn_broker_chan_apply(q->b, "rf", "c", 0, &req, &w[i].op, on_applied),
                         UV_EIO);
    }
    assert_int_equal(cur->requeue_count, 1);
    qfx_free(q);
}

/* The lead of a replicated partition goes to another node while
 * consumers here hold its messages (a partition move's hand-over, a
 * failover of a live leader): their leases on it end without a record (a
 * FIN for one fails; the new leader delivers them again), the budget and
 * credit they held are free, the consumers with a moved callback (NSQ's)
 * are detached and told at once, and one without (a /v1 long poll) stays
 * and keeps the partitions still served here. Led here again, the
 * messages are delivered again from this node's state. */
static int away_calls;

static void on_away(tn_consumer_t *c)
{
    assert_null(c->ch); /* detached first */
    away_calls++;
}

static void test_lead_moved_away(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = readopt_yes;
    tn_topic_t *t = qfx_topic(q, "lm", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    for (int i = 0; i < 4; i++)
        assert_int_equal(publish(q, "lm", "m", i % 2, NULL, NULL), 0);
    qfx_sink_t held, nsq;
    attach(&held, ch, 4);
    qfx_expect_n(q, &held, 4);
    attach(&nsq, ch, 0);
    nsq.c.moved = on_away;
    assert_int_equal(q->b->inflight_msgs, 4);
    away_calls = 0;
    /* Partition 0 led by node 7 now: its leases end, the NSQ-like
     * consumer is told; partition 1 is still served here to the other. */
    owners[0] = 7;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    assert_int_equal(tn_leases_count(&ch->parts[0]->leases), 0);
    assert_int_equal(tn_leases_count(&ch->parts[1]->leases), 2);
    assert_int_equal(q->b->inflight_msgs, 2);
    assert_int_equal(held.c.owner.count, 2);
    assert_int_equal(away_calls, 1);
    assert_null(nsq.c.ch);
    assert_ptr_equal(held.c.ch, ch);
    int k = 0;
    while (held.d[k].partition != 0)
        k++;
    assert_int_equal(tn_consumer_fin(&held.c, 0, held.d[k].offset, true, held.d[k].nonce),
                     TN_ENOTFOUND);
    /* Partition 1 too: nothing of lm is served here; the consumer without
     * a moved callback stays attached, its leases gone. */
    owners[1] = 7;
    follow(q, t);
    assert_int_equal(away_calls, 1);
    assert_int_equal(held.c.owner.count, 0);
    assert_ptr_equal(held.c.ch, ch);
    assert_int_equal(q->b->inflight_msgs, 0);
    /* A placement pass that changes nothing tells no one again. */
    follow(q, t);
    assert_int_equal(away_calls, 1);
    /* Led here again: the four come again, none settled meanwhile. */
    place_all(SELF);
    follow(q, t);
    tn_consumer_detach(&held.c);
    qfx_sink_t again;
    attach(&again, ch, 8);
    qfx_expect_n(q, &again, 4);
    qfx_run_for(q, 50);
    assert_int_equal(again.n, 4);
    tn_consumer_detach(&again.c);
    qfx_free(q);
}

/* A replicated partition led elsewhere, its set-aside log abandoned
 * (tn_topic_part_abandon: the replica manager wrote the files through a
 * log of its own) while its channel's log stays with the engine (a
 * follower's records go through it, tn_broker_chan_apply), then led here
 * again (a move away and back): the placement opens the partition and its
 * channel logs from their files, so the channel log the engine held is
 * closed first, after its queued records, never left open beside the new
 * one. An orphan would hold its fd until the store closed, and its close
 * then would cut the WAL back to where it had left it, losing settles
 * the new log made durable. */
typedef struct {
    tn_chan_sync_t s;
    bool done;
    int status;
} syncw_t;

static void on_synced(tn_chan_sync_t *s, int status)
{
    syncw_t *w = s->data;
    w->done = true;
    w->status = status;
}

static bool synced(void *arg)
{
    return ((syncw_t *)arg)->done;
}

/* Wait until every record of ch's log on partition p so far is durable. */
static void chan_sync(qfx_t *q, tn_channel_t *ch, uint32_t p)
{
    syncw_t w = {0};
    w.s.data = &w;
    tn_channel_sync(ch, p, &w.s, on_synced);
    assert_true(qfx_run_until(q, synced, &w));
    assert_int_equal(w.status, 0);
}

/* The store's open channel logs named channel, and its open plogs. */
static int open_chanlogs(qfx_t *q, const char *channel)
{
    int n = 0;
    for (tn_chanlog_t *cl = q->fx->store->chanlogs; cl != NULL; cl = cl->next_open)
        n += strcmp(cl->name, channel) == 0;
    return n;
}

static int open_plogs(qfx_t *q)
{
    int n = 0;
    for (tn_plog_t *pl = q->fx->store->plogs; pl != NULL; pl = pl->next_open)
        n++;
    return n;
}

typedef struct {
    qfx_t *q;
    int chanlogs;
    int plogs;
} openw_t;

static bool open_counts(void *arg)
{
    openw_t *w = arg;
    return open_chanlogs(w->q, "c") == w->chanlogs && open_plogs(w->q) == w->plogs;
}

/* This process's open file descriptors. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static void test_abandoned_channel_logs_closed(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = all_replicated;
    tn_topic_t *t = qfx_topic(q, "or", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    for (int i = 0; i < 6; i++)
        assert_int_equal(publish(q, "or", "m", 0, NULL, NULL), 0);
    qfx_sink_t *s = calloc(1, sizeof(*s));
    attach(s, ch, 2);
    qfx_expect_n(q, s, 2);
    assert_int_equal(s->d[0].offset, 0);
    assert_int_equal(s->d[1].offset, 1);
    /* FIN 0 durable; FIN 1 queued, a wait on it. */
    assert_int_equal(tn_consumer_fin(&s->c, 0, 0, false, 0), 0);
    chan_sync(q, ch, 0);
    assert_int_equal(tn_consumer_fin(&s->c, 0, 1, false, 0), 0);
    syncw_t sw = {0};
    sw.s.data = &sw;
    tn_channel_sync(ch, 0, &sw.s, on_synced);
    tn_consumer_detach(&s->c);
    free(s);
    /* Led by node 9: the log is set aside, the channel's log kept. */
    owners[0] = 9;
    follow(q, t);
    assert_false(tn_topic_part_local(t, 0));
    tn_chanlog_t *old = ch->parts[0]->cl;
    assert_non_null(old);
    /* The other leader's records through the engine: FIN 2 durable, FIN
     * 3 still queued when the partition is placed here again. */
    applyw_t w[2];
    memset(w, 0, sizeof(w));
    w[0].op.data = &w[0];
    w[1].op.data = &w[1];
    tn_walrec_t fin2 = {.op = TN_WAL_FIN, .offset = 2};
    tn_walrec_t fin3 = {.op = TN_WAL_FIN, .offset = 3};
    assert_int_equal(tn_broker_chan_apply(q->b, "or", "c", 0, &fin2, &w[0].op, on_applied), 0);
    assert_true(qfx_run_until(q, applied, &w[0]));
    assert_int_equal(w[0].status, 0);
    openw_t before = {q, 1, 1};
    assert_true(qfx_run_until(q, open_counts, &before));
    int fds = open_fds();
    /* The manager's own log wrote the files: the set-aside one goes. */
    assert_int_equal(tn_topic_part_abandon(t, 0), 0);
    assert_null(t->parts[0]->plog);
    assert_ptr_equal(ch->parts[0]->cl, old); /* still the follower's */
    assert_int_equal(tn_broker_chan_apply(q->b, "or", "c", 0, &fin3, &w[1].op, on_applied), 0);
    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    assert_non_null(t->parts[0]->plog);
    /* The queued record completed (on the old log, before it closed), and
     * so did the wait on FIN 1. */
    assert_true(w[1].done);
    assert_int_equal(w[1].status, 0);
    assert_true(sw.done);
    assert_int_equal(sw.status, 0);
    /* One channel log and one plog open, as before: nothing orphaned. */
    openw_t after = {q, 1, 1};
    assert_true(qfx_run_until(q, open_counts, &after));
    assert_non_null(ch->parts[0]->cl);
    assert_ptr_equal(q->fx->store->chanlogs, ch->parts[0]->cl);
    assert_int_equal(open_fds(), fds);
    /* Opened from the files: FIN 0 to 3 are there; 4 and 5 come. */
    qfx_sink_t *s2 = calloc(1, sizeof(*s2));
    attach(s2, ch, 10);
    qfx_expect_n(q, s2, 2);
    qfx_run_for(q, 30);
    assert_int_equal(s2->n, 2);
    assert_int_equal(s2->d[0].offset, 4);
    assert_int_equal(s2->d[1].offset, 5);
    assert_int_equal(tn_consumer_fin(&s2->c, 0, 4, false, 0), 0);
    chan_sync(q, ch, 0);
    tn_consumer_detach(&s2->c);
    free(s2);
    /* FIN 4, durable in the new log, survives the store's close. */
    qfx_restart(q);
    t = qfx_topic(q, "or", 0);
    ch = qfx_channel(q, t, "c");
    qfx_sink_t *s3 = calloc(1, sizeof(*s3));
    attach(s3, ch, 10);
    qfx_expect_n(q, s3, 1);
    qfx_run_for(q, 30);
    assert_int_equal(s3->n, 1);
    assert_int_equal(s3->d[0].offset, 5);
    tn_consumer_detach(&s3->c);
    free(s3);
    qfx_free(q);
}

/* The same placement with the broker closing while the held channel log
 * closes: nothing is opened, the placement ends with TN_ECLOSED, and the
 * broker and the store close with nothing left open. */
static void test_placed_again_while_closing(void **state)
{
    (void)state;
    place_all(SELF);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    q->b->place_readopt = all_replicated;
    tn_topic_t *t = qfx_topic(q, "oc", 1);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    assert_int_equal(publish(q, "oc", "m", 0, NULL, NULL), 0);
    owners[0] = 9;
    follow(q, t);
    assert_non_null(ch->parts[0]->cl);
    assert_int_equal(tn_topic_part_abandon(t, 0), 0);
    owners[0] = SELF;
    cbw_t w = {0};
    assert_int_equal(tn_topic_follow_placement(t, on_followed, &w), 0);
    assert_false(w.done); /* the held log is closing */
    qfx_close(q);
    assert_true(w.done);
    assert_int_equal(w.status, TN_ECLOSED);
    /* The abandoned log's close (tn_plog_abandon) may still be finishing
     * when the broker's close has ended (on a busy machine it is): it
     * ends by itself, and nothing stays open. */
    openw_t none = {q, 0, 0};
    assert_true(qfx_run_until(q, open_counts, &none));
    place_all(SELF);
    qfx_free(q);
}

/* --- stamps (queue.h record_created_ms) ----------------------------------------- */

static void gate_pass(void *arg, tn_gate_t *g, tn_topic_t *t, tn_channel_t *ch)
{
    (void)arg;
    (void)t;
    (void)ch;
    tn_gate_done(g, 0);
}

/* The stamper the tests play the catalog with: topic name -> the record's
 * creation time, 1000 + its first letter. */
static int64_t stamper(void *arg, const char *name)
{
    (void)arg;
    return 1000 + name[0];
}

static int64_t stamp_on_disk(qfx_t *q, const char *name)
{
    int64_t ms = -1;
    assert_int_equal(tn_store_topic_stamp_read(q->fx->store, name, &ms), 0);
    return ms;
}

static void stamped_broker(qfx_t *q)
{
    tn_broker_set_gate(q->b, gate_pass, NULL);
    tn_broker_set_stamper(q->b, stamper, NULL);
}

static bool topic_idle(void *arg)
{
    return !tn_topic_busy(arg);
}

/* A topic made through the gate writes its record's creation time into
 * its directory before its first local partition: at its creation, at a
 * growth or a placement that brings one here (never a directory for a
 * topic with none here), and a restart loads it. A topic loaded from a
 * directory without one (made before stamps) writes the one it is given
 * (tn_topic_keep_stamp), busy meanwhile so that a deletion waits. */
static void test_stamps(void **state)
{
    (void)state;
    place_all(2); /* nothing here */
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    stamped_broker(q);
    tn_topic_t *t = qfx_topic(q, "r", 2);
    assert_int_equal(t->record_created_ms, 1000 + 'r');
    assert_int_equal(t->stamp_ms, 0);
    assert_int_equal(stamp_on_disk(q, "r"), 0); /* no directory made for it */
    owners[1] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 1));
    assert_int_equal(stamp_on_disk(q, "r"), 1000 + 'r');
    assert_int_equal(t->stamp_ms, 1000 + 'r');

    place_all(SELF);
    tn_topic_t *u = qfx_topic(q, "u", 1);
    assert_int_equal(stamp_on_disk(q, "u"), 1000 + 'u');
    assert_int_equal(u->stamp_ms, 1000 + 'u');
    place_all(2);
    tn_topic_t *g = qfx_topic(q, "g", 1);
    assert_int_equal(stamp_on_disk(q, "g"), 0);
    owners[2] = SELF;
    qfx_grown_flag = false;
    assert_int_equal(tn_topic_grow(g, 3, qfx_on_grown, NULL), 0);
    assert_true(qfx_run_until(q, qfx_is_grown, NULL));
    assert_int_equal(qfx_grown_status, 0);
    assert_true(tn_topic_part_local(g, 2));
    assert_int_equal(stamp_on_disk(q, "g"), 1000 + 'g');

    /* A topic whose only files here are a replica's own copy (opened by
     * the replica manager before the engine's topic was made, so the
     * creation had nothing local to stamp the directory for): stamped
     * once the caller says the copy is here, busy meanwhile. */
    place_all(2);
    tn_topic_t *f = qfx_topic(q, "f", 1);
    assert_false(tn_topic_part_local(f, 0));
    tn_plog_t *own = NULL;
    assert_int_equal(tn_plog_open(q->fx->store, "f", 0, &own), 0);
    assert_int_equal(stamp_on_disk(q, "f"), 0);
    tn_topic_keep_stamp(f, false); /* the engine sees no file of it here */
    assert_false(tn_topic_busy(f));
    assert_int_equal(f->stamp_ms, 0);
    tn_topic_keep_stamp(f, true);
    assert_true(tn_topic_busy(f));
    assert_int_equal(tn_topic_delete(f, NULL, NULL), UV_EBUSY);
    assert_true(qfx_run_until(q, topic_idle, f));
    assert_int_equal(f->stamp_ms, 1000 + 'f');
    assert_int_equal(stamp_on_disk(q, "f"), 1000 + 'f');
    tu_plog_close(&q->fx->loop, own);

    /* Without a stamper (a directory from an earlier release): none. */
    tn_broker_set_stamper(q->b, NULL, NULL);
    place_all(SELF);
    tn_topic_t *v = qfx_topic(q, "v", 1);
    assert_int_equal(v->record_created_ms, 0);
    assert_int_equal(stamp_on_disk(q, "v"), 0);

    qfx_restart(q);
    stamped_broker(q);
    t = qfx_topic(q, "r", 0);
    assert_int_equal(t->record_created_ms, 1000 + 'r');
    assert_int_equal(t->stamp_ms, 1000 + 'r');
    g = qfx_topic(q, "g", 0);
    assert_int_equal(g->record_created_ms, 1000 + 'g');
    v = qfx_topic(q, "v", 0);
    assert_int_equal(v->record_created_ms, 0);
    assert_int_equal(v->stamp_ms, 0);
    /* The catalog takes the record for it (stale()), then keeps it. */
    v->record_created_ms = 4242;
    tn_topic_keep_stamp(v, false);
    assert_true(tn_topic_busy(v));
    assert_int_equal(tn_topic_delete(v, NULL, NULL), UV_EBUSY);
    tn_topic_t *out = NULL;
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    /* It serves on meanwhile; a deletion waits for it (tn_topic_wait_idle). */
    assert_int_equal(tn_broker_topic(q->b, "v", 1, false, 0, NULL, &out), 0);
    assert_int_equal(tn_topic_wait_idle(v, &w.w), UV_EAGAIN);
    qfx_wait(q, &w, 0);
    assert_true(qfx_run_until(q, topic_idle, v));
    assert_int_equal(v->stamp_ms, 4242);
    assert_int_equal(stamp_on_disk(q, "v"), 4242);
    tn_topic_keep_stamp(v, false); /* written already: nothing to do */
    assert_false(tn_topic_busy(v));
    assert_int_equal(publish(q, "v", "m", 0, NULL, NULL), 0);

    qfx_restart(q);
    v = qfx_topic(q, "v", 0);
    assert_int_equal(v->record_created_ms, 4242);
    qfx_free(q);
}

/* The gate as the catalog's, for a channel: its record's stamp (42). */
static void gate_stamp(void *arg, tn_gate_t *g, tn_topic_t *t, tn_channel_t *ch)
{
    (void)arg;
    (void)t;
    if (ch != NULL)
        ch->stamp = 42;
    tn_gate_done(g, 0);
}

static void pause_topic_and_wait(qfx_t *q, tn_topic_t *t, bool paused)
{
    qfx_allw_t w = {0};
    assert_int_equal(tn_topic_pause(t, paused, qfx_on_sync_all, &w), 0);
    assert_true(qfx_run_until(q, qfx_all_done, &w));
    assert_int_equal(w.status, 0);
}

/* The topic t (2 partitions, none here) made again after a restart, as
 * the catalog makes a recorded topic whose directory holds no partition. */
static tn_topic_t *remade_after_restart(qfx_t *q, const char *name)
{
    qfx_restart(q);
    stamped_broker(q);
    tn_broker_set_gate(q->b, gate_stamp, NULL);
    return qfx_topic(q, name, 2);
}

/* A topic paused while the node holds no copy of any of its partitions
 * is durable all the same (nsqd keeps it in nsqd.dat): the pause makes
 * the topic's directory, its stamp first, then the pause file (points 0:
 * no partition led here), before the answer. A restart does not load a
 * directory with no partition; the topic made there from its record comes
 * back paused, as the stamp is that record's, and an unpause is durable
 * the same way. A partition placed here later holds from 0 and finds the
 * file written (no write waits for the directory). A topic of the name
 * made from another record (deleted and made again) starts unpaused and
 * removes the file. */
static void test_topic_pause_without_a_copy(void **state)
{
    (void)state;
    place_all(9);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    stamped_broker(q);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    pause_topic_and_wait(q, t, true);
    assert_false(t->pause_dirless);
    assert_int_equal(stamp_on_disk(q, "t"), 1000 + 't');
    int paused = 0;
    uint64_t *holds = NULL;
    uint32_t n = 0;
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, "t", &paused, &holds, &n), 0);
    assert_int_equal(paused, 1);
    assert_int_equal(n, 2);
    assert_true(holds[0] == 0 && holds[1] == 0);
    tn_free(holds);

    t = remade_after_restart(q, "t");
    assert_true(t->paused);
    pause_topic_and_wait(q, t, false);
    t = remade_after_restart(q, "t");
    assert_false(t->paused);
    pause_topic_and_wait(q, t, true);
    t = remade_after_restart(q, "t");
    assert_true(t->paused);

    owners[0] = SELF;
    follow(q, t);
    assert_true(tn_topic_part_local(t, 0));
    assert_false(t->pause_writing);
    assert_int_equal(publish(q, "t", "x", 0, NULL, NULL), 0);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    qfx_sink_t s;
    attach(&s, ch, 100);
    qfx_run_for(q, 30);
    assert_int_equal(s.n, 0);
    pause_topic_and_wait(q, t, false);
    qfx_expect_n(q, &s, 1);
    tn_consumer_detach(&s.c);

    /* Another record's directory (a topic of the name deleted while the
     * node was down, made again): not this topic's pause; it goes whole,
     * its channels' files with it. */
    place_all(9);
    assert_int_equal(tn_store_topic_stamp_write(q->fx->store, "u", 77, true), 0);
    assert_int_equal(tn_store_topic_pause_write(q->fx->store, "u", true, NULL, 0, NULL), 0);
    assert_int_equal(tn_store_channel_pause_write(q->fx->store, "u", "c", 1, NULL), 0);
    t = qfx_topic(q, "u", 2);
    assert_false(t->paused);
    assert_int_equal(tn_store_topic_pause_read(q->fx->store, "u", &paused, &holds, &n), 0);
    assert_int_equal(paused, -1);
    assert_int_equal(stamp_on_disk(q, "u"), 0);
    assert_int_equal(tn_store_channel_pause_read(q->fx->store, "u", "c", &paused), 0);
    assert_int_equal(paused, -1);
    t = remade_after_restart(q, "u");
    assert_false(t->paused);
    qfx_free(q);
}

/* A channel paused while the node holds no copy of its topic: the pause
 * makes the topic's directory with the topic's stamp, then the channel's
 * pause file, then its stamp, before the answer; the channel made again
 * after a restart (its record's stamp in the file: this very channel)
 * comes back paused, and unpaused after an unpause. */
static void test_channel_pause_without_a_copy(void **state)
{
    (void)state;
    place_all(9);
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    stamped_broker(q);
    tn_broker_set_gate(q->b, gate_stamp, NULL);
    tn_topic_t *t = qfx_topic(q, "t", 2);
    tn_channel_t *ch = qfx_channel(q, t, "c");
    assert_int_equal(ch->stamp, 42);
    assert_int_equal(pause_and_wait(q, ch, true), 0);
    assert_int_equal(stamp_on_disk(q, "t"), 1000 + 't');
    int paused = 0;
    assert_int_equal(tn_store_channel_pause_read(q->fx->store, "t", "c", &paused), 0);
    assert_int_equal(paused, 1);
    uint64_t stamp = 0;
    assert_int_equal(tn_store_channel_stamp_read(q->fx->store, "t", "c", &stamp), 0);
    assert_int_equal(stamp, 42);

    t = remade_after_restart(q, "t");
    ch = qfx_channel(q, t, "c");
    assert_true(ch->paused);
    assert_int_equal(pause_and_wait(q, ch, false), 0);
    t = remade_after_restart(q, "t");
    ch = qfx_channel(q, t, "c");
    assert_false(ch->paused);
    qfx_free(q);
}

/* Whether the topic named arg has a directory in the store of bare_q. */
static qfx_t *bare_q;

static bool has_dir(const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", bare_q->fx->store->topics_path, name);
    return stat(path, &st) == 0;
}

static bool dir_gone(void *arg)
{
    return !has_dir(arg);
}

static bool recorded_kb(void *arg, const char *topic)
{
    (void)arg;
    return strcmp(topic, "kb") == 0;
}

static int chan_paused_on_disk(qfx_t *q, const char *topic)
{
    int paused = -2;
    assert_int_equal(tn_store_channel_pause_read(q->fx->store, topic, "c", &paused), 0);
    return paused;
}

/* Topic directories the start found holding no partition, only a pause's
 * files (tn_broker_sweep_bare): one whose topic the caller records is
 * kept (the catalog makes it next), as is one a topic of the name here
 * took already; any other is trashed; a creation of the name while that
 * runs waits for it, then makes the topic afresh (nothing of the old
 * pause). */
static void test_bare_swept(void **state)
{
    (void)state;
    place_all(2); /* no partition here */
    qfx_t *q = qfx_new(qfx_small_memlogs, place);
    bare_q = q;
    const char *names[] = {"ka", "kb", "kc", "kd"};
    for (size_t i = 0; i < 4; i++) {
        bool written = false;
        assert_int_equal(tn_store_topic_stamp_write(q->fx->store, names[i], 1000 + 'k', true), 0);
        assert_int_equal(tn_store_channel_pause_write(q->fx->store, names[i], "c", 1, &written), 0);
        assert_true(written);
    }
    qfx_restart(q);
    stamped_broker(q);
    (void)qfx_topic(q, "kd", 1); /* its record's stamp: the pause is its */
    tn_broker_sweep_bare(q->b, recorded_kb, NULL);
    qfx_waitw_t w;
    qfx_waitw_init(&w);
    tn_topic_t *out = NULL;
    assert_int_equal(tn_broker_topic(q->b, "kc", 2, true, 1, &w.w, &out), UV_EAGAIN);
    qfx_wait(q, &w, 0);
    assert_false(has_dir("kc")); /* removed first, then made with nothing here */
    assert_int_equal(tn_broker_topic(q->b, "kc", 2, false, 0, NULL, &out), 0);
    assert_true(qfx_run_until(q, dir_gone, "ka"));
    assert_int_equal(chan_paused_on_disk(q, "kb"), 1);
    assert_int_equal(chan_paused_on_disk(q, "kd"), 1);
    /* A later sweep forgets kd (its topic's) and keeps kb while recorded. */
    tn_broker_sweep_bare(q->b, recorded_kb, NULL);
    qfx_run_for(q, 50);
    assert_true(has_dir("kb") && has_dir("kd"));
    qfx_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_partition_skipped),
        cmocka_unit_test(test_all_remote_refused),
        cmocka_unit_test(test_open_later),
        cmocka_unit_test(test_open_later_keeps_pause),
        cmocka_unit_test(test_pause_kept_leading_nothing),
        cmocka_unit_test(test_pause_file_write_failed_taken_back),
        cmocka_unit_test(test_pause_written_when_the_directory_comes),
        cmocka_unit_test(test_topic_pause_written_when_the_directory_comes),
        cmocka_unit_test(test_topic_pause_remote_holds_from_zero),
        cmocka_unit_test(test_topic_pause_hold_below_a_cut),
        cmocka_unit_test(test_topic_pause_hold_below_a_cut_own_log),
        cmocka_unit_test(test_topic_pause_hold_below_a_repair),
        cmocka_unit_test(test_topic_pause_repair_fails_with_its_file),
        cmocka_unit_test(test_topic_pause_cut_waits_for_its_file),
        cmocka_unit_test(test_topic_pause_cut_fails_with_its_file),
        cmocka_unit_test(test_topic_pause_cut_waiting_at_close),
        cmocka_unit_test(test_topic_pause_cut_waiting_at_delete),
        cmocka_unit_test(test_topic_pause_cut_of_a_log_closing),
        cmocka_unit_test(test_topic_pause_without_a_copy),
        cmocka_unit_test(test_channel_pause_without_a_copy),
        cmocka_unit_test(test_topic_pause_dir_made_during_its_write),
        cmocka_unit_test(test_given_away_left_on_disk),
        cmocka_unit_test(test_offline_replicated_not_kept),
        cmocka_unit_test(test_moved_consumers_dropped),
        cmocka_unit_test(test_dead_letter_done_after_hand_over_writes_no_fin),
        cmocka_unit_test(test_abandoned_log_reopened_from_files),
        cmocka_unit_test(test_released_partition_moved),
        cmocka_unit_test(test_requeue_leases),
        cmocka_unit_test(test_held_partition_delivers_nothing),
        cmocka_unit_test(test_lapsed_lease_delivers_nothing),
        cmocka_unit_test(test_restart_with_holes),
        cmocka_unit_test(test_grow_places_new_partitions),
        cmocka_unit_test(test_no_placement_all_local),
        cmocka_unit_test(test_grow_here),
        cmocka_unit_test(test_chan_apply_while_set_aside),
        cmocka_unit_test(test_chan_apply_req_keeps_delay),
        cmocka_unit_test(test_chan_apply_settle_drops_req),
        cmocka_unit_test(test_chan_apply_refused_counts_once),
        cmocka_unit_test(test_lead_moved_away),
        cmocka_unit_test(test_abandoned_channel_logs_closed),
        cmocka_unit_test(test_placed_again_while_closing),
        cmocka_unit_test(test_stamps),
        cmocka_unit_test(test_bare_swept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
