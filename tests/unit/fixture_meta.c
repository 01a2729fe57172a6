/* The unit tests' metastore helpers. See fixture_meta.h. */
#include "core/platform.h"

#include "fixture_meta.h"

#include "core/time.h"

#include <stdio.h>
#include <string.h>

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

bool tu_run_loop(uv_loop_t *loop, bool (*cond)(void *), void *arg)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, on_tick, 5, 5);
    int64_t deadline = tn_now_mono_ms() + 20000;
    bool ok;
    while (!(ok = cond(arg)) && tn_now_mono_ms() < deadline)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

bool tu_is_true(void *arg)
{
    return *(bool *)arg;
}

void tu_broker_opts(tn_broker_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->default_partitions = 1;
    o->bootstrap_window_ms = 90000;
    o->cache_bytes = 1 << 20;
    o->max_inflight_bytes = 1 << 30;
    o->max_inflight_msgs = 100000;
    o->max_ahead = 1 << 16;
    o->gc_interval_ms = 3600000;
}

typedef struct {
    tn_waiter_t w;
    bool done;
    int status;
} waitw_t;

static void on_wait(tn_waiter_t *w, int status)
{
    waitw_t *x = (waitw_t *)w;
    x->done = true;
    x->status = status;
}

tn_topic_t *tu_broker_topic(uv_loop_t *loop, tn_broker_t *b, const char *name, uint32_t nparts)
{
    tn_topic_t *t = NULL;
    waitw_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_wait;
    int rc = tn_broker_topic(b, name, strlen(name), true, nparts, &w.w, &t);
    if (rc == UV_EAGAIN) {
        assert_true(tu_run_loop(loop, tu_is_true, &w.done));
        assert_int_equal(w.status, 0);
        rc = tn_broker_topic(b, name, strlen(name), false, 0, NULL, &t);
    }
    assert_int_equal(rc, 0);
    return t;
}

typedef struct {
    tn_pub_t pub;
    bool done;
    int status;
} pubw_t;

static void on_published(tn_pub_t *p, int status)
{
    pubw_t *w = p->data;
    w->done = true;
    w->status = status;
}

void tu_broker_publish(uv_loop_t *loop, tn_broker_t *b, const char *topic, uint32_t p,
                       const void *body, size_t len, uint32_t n)
{
    pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.pub, n), 0);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(tn_pub_set(&w.pub, i, body, len), 0);
    w.pub.data = &w;
    w.pub.pinned = true;
    w.pub.pin = p;
    assert_int_equal(tn_broker_publish(b, topic, strlen(topic), &w.pub, 0, on_published), 0);
    assert_true(tu_run_loop(loop, tu_is_true, &w.done));
    assert_int_equal(w.status, 0);
    tn_pub_fini(&w.pub);
}

/* tn_broker_close's callback has no argument: the tests close one broker
 * at a time. */
static bool broker_closed;

static void on_broker_closed(tn_broker_t *b)
{
    (void)b;
    broker_closed = true;
}

void tu_broker_close(uv_loop_t *loop, tn_broker_t *b)
{
    broker_closed = false;
    tn_broker_close(b, on_broker_closed);
    assert_true(tu_run_loop(loop, tu_is_true, &broker_closed));
}

static bool lone_ready(void *arg)
{
    tn_meta_t *m = arg;
    return tn_meta_ready(m) && tn_meta_member_find(tn_meta_state(m), 1) != NULL;
}

tn_meta_t *tu_meta_lone(uv_loop_t *loop, const char *dir, const char *api_addr)
{
    tn_meta_opts_t mo;
    memset(&mo, 0, sizeof(mo));
    mo.dir = dir;
    mo.node_id = 1;
    mo.address = "127.0.0.1:0";
    mo.api_addr = api_addr;
    mo.election_ms = 150;
    mo.heartbeat_ms = 50;
    tn_meta_t *m = NULL;
    char err[256] = "";
    if (tn_meta_open(loop, &mo, &m, err, sizeof(err)) != 0)
        fail_msg("tn_meta_open: %s", err);
    assert_true(tu_run_loop(loop, lone_ready, m));
    return m;
}

static void on_meta_closed(void *arg)
{
    *(bool *)arg = true;
}

void tu_meta_close(uv_loop_t *loop, tn_meta_t *m)
{
    bool done = false;
    tn_meta_close(m, on_meta_closed, &done);
    assert_true(tu_run_loop(loop, tu_is_true, &done));
}

typedef struct {
    tn_meta_req_t req;
    bool done;
    int status;
} prop_t;

static void on_proposed(tn_meta_req_t *req, int status)
{
    prop_t *p = req->data;
    p->done = true;
    p->status = status;
}

int tu_meta_propose_wait(uv_loop_t *loop, tn_meta_t *m, const tn_meta_cmd_t *c)
{
    prop_t p;
    memset(&p, 0, sizeof(p));
    p.req.data = &p;
    assert_int_equal(tn_meta_propose(m, &p.req, c, on_proposed), 0);
    assert_true(tu_run_loop(loop, tu_is_true, &p.done));
    return p.status;
}

void tu_meta_commit(uv_loop_t *loop, tn_meta_t *m, const tn_meta_cmd_t *c)
{
    assert_int_equal(tu_meta_propose_wait(loop, m, c), 0);
}

tn_meta_cmd_t tu_meta_ready_cmd(const char *name, int64_t at)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_READY;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.topic.created_at_ms = at;
    return c;
}

tn_meta_cmd_t tu_meta_topic_cmd(const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_PUT;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.topic.partitions = partitions;
    c.topic.visibility_timeout_ms = 30000;
    c.topic.max_inflight = 1024;
    c.topic.max_acked_ahead = 1024;
    c.topic.created_at_ms = tn_now_wall_ms();
    return c;
}

tn_meta_cmd_t tu_meta_member_cmd(uint64_t id, const char *api_addr)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REG;
    c.member.id = id;
    snprintf(c.member.addr, sizeof(c.member.addr), "127.0.0.1:1");
    snprintf(c.member.api_addr, sizeof(c.member.api_addr), "%s", api_addr);
    c.member.heartbeat_ms = tn_now_wall_ms();
    return c;
}

tn_meta_cmd_t tu_meta_state_topic_cmd(const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_PUT;
    c.if_absent = true;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.topic.partitions = partitions;
    c.topic.retention_ms = 3600 * 1000LL;
    c.topic.visibility_timeout_ms = 30000;
    c.topic.max_inflight = 1024;
    c.topic.max_acked_ahead = 1024;
    c.topic.created_at_ms = 1700000000000LL;
    return c;
}

tn_meta_cmd_t tu_meta_native_topic_cmd(const char *name, uint32_t partitions, uint8_t factor,
                                       uint8_t min_insync)
{
    tn_meta_cmd_t c = tu_meta_state_topic_cmd(name, partitions);
    c.topic.native = true;
    c.topic.replication_factor = factor;
    c.topic.min_insync = min_insync;
    return c;
}

tn_meta_cmd_t tu_meta_rec_cmd(uint64_t id, uint64_t incarnation, uint64_t boot)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REC;
    c.member.id = id;
    snprintf(c.member.addr, sizeof(c.member.addr), "10.0.0.%llu:4153", (unsigned long long)id);
    snprintf(c.member.api_addr, sizeof(c.member.api_addr), "10.0.0.%llu:4151",
             (unsigned long long)id);
    c.member.heartbeat_ms = 1000;
    c.member.incarnation = incarnation;
    c.member.boot = boot;
    return c;
}

tn_pstate_t tu_pstate3(uint32_t r0, uint32_t r1, uint32_t r2, uint32_t leader,
                       uint32_t leader_epoch)
{
    tn_pstate_t ps;
    memset(&ps, 0, sizeof(ps));
    ps.nreplicas = 3;
    ps.replicas[0] = r0;
    ps.replicas[1] = r1;
    ps.replicas[2] = r2;
    ps.leader = leader;
    ps.leader_epoch = leader_epoch;
    ps.min_insync = 2;
    return ps;
}

void tu_meta_state_reload(const tn_meta_state_t *s, tn_meta_state_t *r)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(s, &b), 0);
    tn_meta_state_init(r);
    assert_int_equal(tn_meta_state_restore(r, tn_buf_data(&b), tn_buf_size(&b)), 0);
    tn_buf_fini(&b);
}
