/* Tests of the drain's state machine (api/drain.h) with no doors
 * attached, so nothing is in flight: serving until started, started once
 * (a second start changes nothing, the deadline stays), the starter hook
 * at the start, drained at the first check with the done hook (not timed
 * out), the GET body in each state, and a stop that ends the watch
 * without the done hook; the loop closes cleanly after tn_drain_close.
 * What the doors do while draining is tests/e2e/test_drain.py's. */
#include "core/platform.h"

#include "testutil.h"

#include "api/drain.h"
#include "core/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int started;
    int done;
    bool timed_out;
} hooks_t;

static void on_started(void *arg)
{
    ((hooks_t *)arg)->started++;
}

static void on_done(void *arg, bool timed_out)
{
    hooks_t *h = arg;
    h->done++;
    h->timed_out = timed_out;
}

static void body(const tn_drain_t *d, char *out, size_t cap)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_drain_json(d, &b);
    snprintf(out, cap, "%.*s", (int)tn_buf_size(&b), tn_buf_data(&b));
    tn_buf_fini(&b);
}

static long long field(const char *json, const char *name)
{
    char key[64];
    snprintf(key, sizeof(key), "\"%s\":", name);
    const char *p = strstr(json, key);
    assert_non_null(p);
    return strtoll(p + strlen(key), NULL, 10);
}

static void test_idle_drain_ends_at_the_first_check(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    hooks_t h = {0};
    tn_drain_opts_t o = {30000, on_started, on_done, &h};
    tn_drain_t *d = NULL;
    assert_int_equal(tn_drain_new(&loop, &o, &d), 0);
    assert_false(tn_drain_active(NULL));
    assert_false(tn_drain_active(d));
    assert_int_equal(tn_drain_state(d), TN_DRAIN_SERVING);
    char json[512];
    body(d, json, sizeof(json));
    assert_string_equal(json, "{\"state\":\"serving\",\"started_ms\":0,\"deadline_ms\":0,"
                              "\"nsq_in_flight\":0,\"nsq_consumers\":0,\"long_polls\":0,"
                              "\"ws_feeds\":0,\"publishes_in_progress\":0}");

    int64_t before = tn_now_wall_ms();
    assert_int_equal(tn_drain_start(d, 0), 0); /* 0: the configured bound */
    assert_int_equal(h.started, 1);
    assert_true(tn_drain_active(d));
    body(d, json, sizeof(json));
    assert_non_null(strstr(json, "\"state\":\"draining\""));
    long long started = field(json, "started_ms");
    assert_true(started >= before);
    assert_int_equal(field(json, "deadline_ms") - started, 30000);
    /* Again: nothing changes, the deadline stays. */
    assert_int_equal(tn_drain_start(d, 5000), UV_EALREADY);
    assert_int_equal(h.started, 1);
    body(d, json, sizeof(json));
    assert_int_equal(field(json, "deadline_ms") - started, 30000);

    while (h.done == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(h.done, 1);
    assert_false(h.timed_out);
    assert_int_equal(tn_drain_state(d), TN_DRAIN_DRAINED);
    body(d, json, sizeof(json));
    assert_non_null(strstr(json, "\"state\":\"drained\""));
    assert_true(tn_drain_active(d)); /* the doors still refuse */
    assert_int_equal(tn_drain_start(d, 0), UV_EALREADY);
    tn_drain_close(d);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(h.done, 1);
    tu_loop_fini(&loop);
}

static void test_stop_ends_the_watch_without_the_done_hook(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    hooks_t h = {0};
    tn_drain_opts_t o = {30000, on_started, on_done, &h};
    tn_drain_t *d = NULL;
    assert_int_equal(tn_drain_new(&loop, &o, &d), 0);
    assert_int_equal(tn_drain_start(d, 1000), 0);
    char json[512];
    body(d, json, sizeof(json));
    assert_int_equal(field(json, "deadline_ms") - field(json, "started_ms"), 1000);
    tn_drain_stop(d); /* the process shuts down another way */
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(h.done, 0);
    assert_int_equal(tn_drain_state(d), TN_DRAIN_DRAINING);
    assert_true(tn_drain_active(d));
    tn_drain_close(d);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(h.done, 0);
    tu_loop_fini(&loop);
}

static void test_a_stopped_drain_cannot_start(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    hooks_t h = {0};
    tn_drain_opts_t o = {30000, on_started, on_done, &h};
    tn_drain_t *d = NULL;
    assert_int_equal(tn_drain_new(&loop, &o, &d), 0);
    tn_drain_stop(d); /* shutting down before any drain: SIGINT */
    assert_int_equal(tn_drain_start(d, 0), UV_EALREADY);
    assert_int_equal(h.started, 0);
    assert_false(tn_drain_active(d));
    tn_drain_close(d);
    tn_drain_close(NULL);
    tn_drain_stop(NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    tu_loop_fini(&loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_drain_ends_at_the_first_check),
        cmocka_unit_test(test_stop_ends_the_watch_without_the_done_hook),
        cmocka_unit_test(test_a_stopped_drain_cannot_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
