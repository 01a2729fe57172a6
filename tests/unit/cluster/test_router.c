/* The router's gather of partition stats (cluster/router.h,
 * tn_router_pstats) through real node RPC: an owner endpoint serving
 * PSTATS over a real broker, a lone metastore replica (libraft on
 * loopback) whose member 1 is that endpoint and owns every partition, and
 * a router playing node 2 with a caller endpoint, on one loop. Covers the
 * numbers of every partition coming from the owner (one call, later, not
 * inside tn_router_pstats), one partition alone, a partition the owner
 * says is not its own ("owner changed; retry"), an owner marked dead (not
 * called: "owner is down"), an owner nobody answers for ("owner
 * unreachable", the other entries unharmed), and the router as node 1 or
 * without node RPC (every partition read here, before the call returns).
 * The owner endpoint also answers PERRS (cluster/perrs.h) from a script:
 * a replicated topic's partitions get the errors it names beside their
 * numbers, and an owner that refuses PERRS as an earlier release does
 * (400) leaves them without errors and with their numbers. And
 * publishes to a topic being created (cluster/hold.h): held, nothing
 * written, until the mark clears (a stale TOPIC_READY does not clear
 * it), TN_ENOTFOUND once the record is taken back, TN_ECREATING after
 * the bound, TN_ECLOSED as the router is freed; and publishes to a
 * partition recovered at start whose placement this node has not
 * followed yet (start_held): held, nothing written, until the catalog
 * releases it, TN_EPLACING after the bound. Every test checks that
 * uv_loop_close returns 0. */
#include "core/platform.h"

#include "fixture_meta.h"
#include "fixture_rpc.h"
#include "testutil.h"

#include "cluster/hold.h"
#include "cluster/perrs.h"
#include "cluster/pstats.h"
#include "cluster/replerr.h"
#include "cluster/router.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/err.h"
#include "core/time.h"
#include "meta/meta.h"
#include "queue/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The engine's placement of topic "moved": partition 1 is node 7's. */
static bool place(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    (void)arg;
    bool moved = strcmp(t->name, "moved") == 0 && p == 1;
    *owner = moved ? 7 : 1;
    return !moved;
}

typedef struct {
    tu_fx_t *fx;
    uv_loop_t *loop;
    tn_broker_t *b;
    tn_meta_t *m;
    tn_srv_t *srv;
    tu_rpc_pair_t rpc;   /* the owner serves PSTATS and PERRS */
    tn_router_t *router; /* node 2's, over rpc.caller */
    bool older;          /* PERRS answered as an earlier release does */
    unsigned perrs;      /* PERRS requests the owner took */
} rfx_t;

/* The owner's PERRS answer from a script: partition 0 holds member 3's
 * "no space left on device", the others none; 400 as an earlier release
 * when f->older. */
static void on_perrs(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    rfx_t *f = arg;
    f->perrs++;
    if (f->older) {
        tn_rpc_reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    tn_wire_pstats_t w;
    assert_int_equal(tn_wire_pstats_decode(payload, len, &w, NULL, 0), 0);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_wire_perrs_reply_start(&b, w.count), 0);
    static const tn_wire_perr_t e = {3, "no space left on device"};
    for (uint32_t i = 0; i < w.count; i++) {
        uint32_t p = tn_wire_pstats_index(&w, i);
        assert_int_equal(tn_wire_perrs_reply_part(&b, p, &e, p == 0 ? 1 : 0), 0);
    }
    tn_rpc_reply(req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

static void commit(rfx_t *f, const tn_meta_cmd_t *c)
{
    tu_meta_commit(f->loop, f->m, c);
}

static void put_topic(rfx_t *f, const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c = tu_meta_topic_cmd(name, partitions);
    commit(f, &c);
}

/* Member 1's record again, with this API address. */
static void put_member(rfx_t *f, const char *api_addr)
{
    tn_meta_cmd_t c = tu_meta_member_cmd(1, api_addr);
    commit(f, &c);
}

static void member_status(rfx_t *f, uint8_t status)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_STATUS;
    c.member.id = 1;
    c.member.status = status;
    /* The status is for the heartbeat the record has (else refused as
     * changed). */
    c.member.heartbeat_ms = tn_meta_member_find(tn_meta_state(f->m), 1)->heartbeat_ms;
    commit(f, &c);
}

static rfx_t *rfx_new(void)
{
    rfx_t *f = calloc(1, sizeof(*f));
    f->fx = tu_fx_new(NULL);
    f->loop = &f->fx->loop;
    tn_broker_opts_t o;
    tu_broker_opts(&o);
    assert_int_equal(tn_broker_open(f->loop, f->fx->store, &o, &f->b), 0);
    tn_broker_set_placement(f->b, place, NULL);
    assert_int_equal(tn_pstats_srv_new(f->b, &f->srv), 0);
    tn_rpc_handler_t h[TN_SRV_HANDLERS + 1];
    size_t nh = 0;
    tn_srv_handlers(f->srv, h, &nh);
    h[nh++] = (tn_rpc_handler_t){TN_OP_PERRS, 0, on_perrs, f};
    tu_rpc_pair_open(&f->rpc, f->loop, h, nh);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/meta", f->fx->dir);
    f->m = tu_meta_lone(f->loop, dir, f->rpc.addr);
    tn_router_opts_t ro = {f->b, f->m, NULL, NULL, NULL};
    assert_int_equal(tn_router_new(&ro, &f->router), 0);
    tn_router_set_rpc(f->router, f->rpc.caller, 2, true);
    return f;
}

static void rfx_free(rfx_t *f)
{
    tu_srv_pair_close(&f->rpc, f->loop, f->srv);
    tn_broker_set_publisher(f->b, NULL, NULL); /* the engine outlives the router */
    tn_broker_set_append_check(f->b, NULL, NULL);
    tn_router_free(f->router);
    tu_broker_close(f->loop, f->b);
    tu_meta_close(f->loop, f->m);
    tu_fx_free(f->fx);
    free(f);
}

/* --- helpers ------------------------------------------------------------------------ */

/* The engine's topic (its record first, as the catalog would have it). */
static void topic(rfx_t *f, const char *name, uint32_t nparts)
{
    put_topic(f, name, nparts);
    (void)tu_broker_topic(f->loop, f->b, name, nparts);
}

/* Publish n messages to partition of topic on the broker. */
static void publish(rfx_t *f, const char *topic, uint32_t partition, uint32_t n)
{
    tu_broker_publish(f->loop, f->b, topic, partition, "body", 4, n);
}

typedef struct {
    tn_router_pstat_t items[8];
    uint32_t n;
    unsigned calls;
    bool done;
    /* Each item's errors, copied in the callback (the router's until it
     * returns). */
    uint32_t nerrs[8];
    tn_replica_perr_t errs[8][TN_WIRE_PERRS_MAX];
} gather_t;

static void on_gathered(void *arg, tn_router_pstat_t *items, uint32_t n)
{
    gather_t *g = arg;
    assert_ptr_equal(items, g->items);
    assert_int_equal(n, g->n);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(items[i].nerrs <= TN_WIRE_PERRS_MAX);
        assert_true((items[i].nerrs == 0) == (items[i].errs == NULL));
        g->nerrs[i] = items[i].nerrs;
        if (items[i].nerrs > 0)
            memcpy(g->errs[i], items[i].errs, items[i].nerrs * sizeof(*items[i].errs));
        items[i].errs = NULL; /* gone once this returns */
    }
    g->calls++;
    g->done = true;
}

/* Gather parts[0..n) of topic; *sync: whether cb ran inside the call. */
static gather_t *gather(rfx_t *f, const char *topic, const uint32_t *parts, uint32_t n, bool *sync)
{
    static gather_t g;
    memset(&g, 0, sizeof(g));
    g.n = n;
    for (uint32_t i = 0; i < n; i++)
        g.items[i].partition = parts[i];
    tn_router_pstats(f->router, topic, g.items, n, on_gathered, &g);
    *sync = g.done;
    assert_true(tu_run_loop(f->loop, tu_is_true, &g.done));
    assert_int_equal(g.calls, 1);
    return &g;
}

/* --- tests ------------------------------------------------------------------------------ */

/* Member 1 owns every partition: the router (node 2) gets each one's
 * numbers from it, later; one partition alone too. */
static void test_numbers_from_the_owner(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    topic(f, "t", 3);
    publish(f, "t", 0, 2);
    publish(f, "t", 1, 4);
    publish(f, "t", 2, 1);
    static const uint32_t all[] = {0, 1, 2};
    static const uint64_t want[] = {2, 4, 1};
    bool sync;
    gather_t *g = gather(f, "t", all, 3, &sync);
    assert_false(sync);
    for (uint32_t p = 0; p < 3; p++) {
        const tn_router_pstat_t *it = &g->items[p];
        assert_int_equal(it->partition, p);
        assert_int_equal(it->owner, 1);
        assert_true(it->have);
        assert_null(it->error);
        assert_int_equal(it->st.next_offset, want[p]);
        assert_int_equal(it->st.high_watermark, want[p]);
        assert_true(it->st.segments >= 1);
    }
    static const uint32_t one[] = {1};
    g = gather(f, "t", one, 1, &sync);
    assert_false(sync);
    assert_true(g->items[0].have);
    assert_int_equal(g->items[0].st.next_offset, 4);
    rfx_free(f);
}

/* The owner says partition 1 is not its own (its engine places it on
 * node 7): that entry is "owner changed; retry", the others have their
 * numbers. */
static void test_owner_changed(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    topic(f, "moved", 3);
    publish(f, "moved", 2, 3);
    static const uint32_t all[] = {0, 1, 2};
    bool sync;
    gather_t *g = gather(f, "moved", all, 3, &sync);
    assert_true(g->items[0].have);
    assert_false(g->items[1].have);
    assert_string_equal(g->items[1].error, "owner changed; retry");
    assert_int_equal(g->items[1].owner, 1);
    assert_true(g->items[2].have);
    assert_int_equal(g->items[2].st.next_offset, 3);
    rfx_free(f);
}

/* An owner marked dead is not called: every entry says so at once,
 * before tn_router_pstats returns. Alive again, it answers. */
static void test_owner_down(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    topic(f, "t", 2);
    member_status(f, TN_MEMBER_DEAD);
    static const uint32_t all[] = {0, 1};
    bool sync;
    gather_t *g = gather(f, "t", all, 2, &sync);
    assert_true(sync);
    for (uint32_t p = 0; p < 2; p++) {
        assert_false(g->items[p].have);
        assert_string_equal(g->items[p].error, "owner is down");
        assert_int_equal(g->items[p].owner, 1);
    }
    member_status(f, TN_MEMBER_ALIVE);
    g = gather(f, "t", all, 2, &sync);
    assert_false(sync);
    assert_true(g->items[0].have && g->items[1].have);
    rfx_free(f);
}

/* An owner whose address nobody answers on: "owner unreachable" once the
 * call fails; with no address at all, the same without a call. */
static void test_owner_unreachable(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    topic(f, "t", 2);
    uv_udp_t sock;
    char dead[64];
    tu_dead_peer(f->loop, &sock, dead, sizeof(dead));
    put_member(f, dead);
    static const uint32_t all[] = {0, 1};
    bool sync;
    gather_t *g = gather(f, "t", all, 2, &sync);
    assert_false(sync);
    for (uint32_t p = 0; p < 2; p++) {
        assert_false(g->items[p].have);
        assert_string_equal(g->items[p].error, "owner unreachable");
    }
    uv_close((uv_handle_t *)&sock, NULL);
    put_member(f, "");
    g = gather(f, "t", all, 2, &sync);
    assert_true(sync);
    assert_string_equal(g->items[0].error, "owner unreachable");
    rfx_free(f);
}

/* As node 1 (the owner itself), or with no node RPC: every partition is
 * read here, before tn_router_pstats returns, with no call. */
static void test_local_reads(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    topic(f, "t", 2);
    publish(f, "t", 1, 5);
    static const uint32_t all[] = {0, 1};
    tn_router_set_rpc(f->router, f->rpc.caller, 1, true);
    bool sync;
    gather_t *g = gather(f, "t", all, 2, &sync);
    assert_true(sync);
    assert_true(g->items[0].have && g->items[1].have);
    assert_int_equal(g->items[1].st.next_offset, 5);
    assert_int_equal(g->items[1].owner, 1);
    tn_router_set_rpc(f->router, NULL, 0, false);
    g = gather(f, "t", all, 2, &sync);
    assert_true(sync);
    assert_true(g->items[1].have);
    assert_int_equal(g->items[1].st.next_offset, 5);
    assert_null(g->items[1].error);
    rfx_free(f);
}

/* A replicated topic (factor 2 over members 1 and 3, both this owner's
 * endpoint): each owner is asked for errors beside the numbers, once per
 * gather, and partition 0 carries member 3's; a factor-1 topic is not
 * asked. An owner that refuses PERRS (an earlier release) leaves every
 * partition without errors, with its numbers. */
static void test_replica_errors(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    tn_meta_cmd_t m3 = tu_meta_member_cmd(3, f->rpc.addr);
    commit(f, &m3);
    tn_meta_cmd_t c = tu_meta_topic_cmd("rt", 2);
    c.topic.native = true;
    c.topic.replication_factor = 2;
    c.topic.min_insync = 1;
    commit(f, &c);
    const tn_meta_state_t *s = tn_meta_state(f->m);
    uint32_t leader[2];
    for (uint32_t p = 0; p < 2; p++) {
        const tn_pstate_t *ps = tn_meta_state_pstate(s, "rt", p);
        assert_non_null(ps);
        assert_int_equal(ps->nreplicas, 2);
        leader[p] = ps->leader;
        assert_true(leader[p] == 1 || leader[p] == 3);
    }
    /* One PERRS call per owner (a leader each: one or two). */
    unsigned owners = leader[0] == leader[1] ? 1 : 2;
    (void)tu_broker_topic(f->loop, f->b, "rt", 2);
    publish(f, "rt", 1, 2);
    static const uint32_t all[] = {0, 1};
    bool sync;
    gather_t *g = gather(f, "rt", all, 2, &sync);
    assert_false(sync);
    assert_int_equal(f->perrs, owners);
    assert_true(g->items[0].have && g->items[1].have);
    assert_int_equal(g->items[1].st.next_offset, 2);
    assert_int_equal(g->nerrs[0], 1);
    assert_int_equal(g->errs[0][0].node, 3);
    assert_string_equal(g->errs[0][0].text, "no space left on device");
    assert_int_equal(g->nerrs[1], 0);

    /* A factor-1 topic: no PERRS call. */
    topic(f, "t", 2);
    g = gather(f, "t", all, 2, &sync);
    assert_int_equal(f->perrs, owners);
    assert_true(g->items[0].have && g->items[1].have);
    assert_int_equal(g->nerrs[0], 0);

    /* An earlier release: the numbers, no errors. */
    f->older = true;
    g = gather(f, "rt", all, 2, &sync);
    assert_int_equal(f->perrs, 2 * owners);
    assert_true(g->items[0].have && g->items[1].have);
    assert_null(g->items[0].error);
    assert_int_equal(g->items[1].st.next_offset, 2);
    assert_int_equal(g->nerrs[0], 0);
    assert_int_equal(g->nerrs[1], 0);
    rfx_free(f);
}

/* --- publishes to a topic being created (cluster/hold.h) -------------------------------- */

typedef struct {
    tn_pub_t pub;
    bool done;
    int status;
} held_pub_t;

static void on_held_published(tn_pub_t *p, int status)
{
    held_pub_t *h = p->data;
    h->done = true;
    h->status = status;
}

static bool past(void *arg)
{
    return tn_now_mono_ms() >= *(const int64_t *)arg;
}

/* Run f's loop for ms. */
static void run_for(rfx_t *f, int64_t ms)
{
    int64_t until = tn_now_mono_ms() + ms;
    (void)tu_run_loop(f->loop, past, &until);
}

/* name's record, made at at by member 1 through /v1 (marked), and the
 * engine's topic of it. */
static void marked_topic(rfx_t *f, const char *name, int64_t at)
{
    tn_meta_cmd_t c = tu_meta_topic_cmd(name, 1);
    c.topic.created_at_ms = at;
    c.topic.creating = 1;
    commit(f, &c);
    (void)tu_broker_topic(f->loop, f->b, name, 1);
}

/* TOPIC_READY of name made at at: its answer. */
static int topic_ready(rfx_t *f, const char *name, int64_t at)
{
    tn_meta_cmd_t c = tu_meta_ready_cmd(name, at);
    return tu_meta_propose_wait(f->loop, f->m, &c);
}

/* Publish one message to name through the router (grow_here: as an NSQ
 * door's, which records a missing topic anew): held (not answered within
 * 300 ms). */
static void publish_held_as(rfx_t *f, held_pub_t *h, const char *name, bool grow_here)
{
    memset(h, 0, sizeof(*h));
    assert_int_equal(tn_pub_init(&h->pub, 1), 0);
    assert_int_equal(tn_pub_set(&h->pub, 0, "m", 1), 0);
    h->pub.data = h;
    h->pub.grow_here = grow_here;
    assert_int_equal(
        tn_router_publish(f->router, name, strlen(name), &h->pub, 0, on_held_published), 0);
    run_for(f, 300);
    assert_false(h->done);
}

static void publish_held(rfx_t *f, held_pub_t *h, const char *name)
{
    publish_held_as(f, h, name, false);
}

static uint64_t next_offset(rfx_t *f, const char *name)
{
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, name, strlen(name), false, 0, NULL, &t), 0);
    tn_plog_stats_t st;
    tn_plog_stats(tn_topic_part_plog(t, 0), &st);
    return st.written_next;
}

/* A publish of one message to name straight to the engine (not through
 * the router) is refused with want by its append check. */
static void engine_refuses(rfx_t *f, const char *name, int want)
{
    tn_pub_t direct;
    assert_int_equal(tn_pub_init(&direct, 1), 0);
    assert_int_equal(tn_pub_set(&direct, 0, "m", 1), 0);
    assert_int_equal(tn_broker_publish(f->b, name, strlen(name), &direct, 0, NULL), want);
    tn_pub_fini(&direct);
}

/* Held while marked, nothing written; taken once the mark clears. The
 * engine's own append check refuses a marked topic too. */
static void test_held_until_ready(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    marked_topic(f, "fresh", 1000);
    engine_refuses(f, "fresh", TN_ECREATING);
    held_pub_t h;
    publish_held(f, &h, "fresh");
    assert_int_equal(next_offset(f, "fresh"), 0);
    tn_router_stats_t st;
    tn_router_stats(f->router, &st);
    assert_int_equal(st.publishing, 1);
    /* A stale READY (another creation's time) leaves it held. */
    assert_int_equal(topic_ready(f, "fresh", 999), TN_ECHANGED);
    run_for(f, 100);
    assert_false(h.done);
    assert_int_equal(topic_ready(f, "fresh", 1000), 0);
    assert_true(tu_run_loop(f->loop, tu_is_true, &h.done));
    assert_int_equal(h.status, 0);
    assert_int_equal(next_offset(f, "fresh"), 1);
    tn_router_stats(f->router, &st);
    assert_int_equal(st.publishing, 0);
    tn_pub_fini(&h.pub);
    rfx_free(f);
}

/* Taken back while held: a publish that would not record the topic anew
 * (not an NSQ door's) gets TN_ENOTFOUND. */
static void test_held_then_taken_back(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    marked_topic(f, "doomed", 1000);
    held_pub_t h;
    publish_held(f, &h, "doomed");
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "doomed");
    commit(f, &c);
    assert_true(tu_run_loop(f->loop, tu_is_true, &h.done));
    assert_int_equal(h.status, TN_ENOTFOUND);
    assert_int_equal(next_offset(f, "doomed"), 0);
    tn_pub_fini(&h.pub);
    rfx_free(f);
}

static void on_old_deleted(void *arg, int status)
{
    assert_int_equal(status, 0);
    *(bool *)arg = true;
}

/* Taken back while an NSQ door's publish is held: it waits while the
 * engine still has the topic made from the old record, also while that
 * one is being deleted (it was routed onto it then, and refused UV_EBUSY:
 * /pub's E_STORAGE), and goes into the topic recorded anew once the old
 * one is gone. */
static void test_held_while_the_old_topic_goes(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    marked_topic(f, "undone", 1000);
    tn_topic_t *t = tn_broker_topic_find(f->b, "undone");
    t->record_created_ms = 1000; /* made from that record (the catalog's stamp) */
    held_pub_t h;
    publish_held_as(f, &h, "undone", true);
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "undone");
    commit(f, &c);
    /* The catalog deleting it: its files going on a worker. */
    t->state = TN_OBJ_DELETING;
    run_for(f, 200);
    if (h.done)
        fail_msg("answered %s while the old topic was being deleted", tn_strerror(h.status));
    t->state = TN_OBJ_READY;
    bool deleted = false;
    assert_int_equal(tn_topic_delete(t, on_old_deleted, &deleted), 0);
    assert_true(tu_run_loop(f->loop, tu_is_true, &deleted));
    assert_true(tu_run_loop(f->loop, tu_is_true, &h.done));
    assert_int_equal(h.status, 0);
    assert_int_equal(next_offset(f, "undone"), 1);
    tn_pub_fini(&h.pub);
    rfx_free(f);
}

/* Still marked after TN_ROUTER_CREATE_HOLD_MS: refused with the doors'
 * retryable answer; and a publish held as the router is freed answers
 * TN_ECLOSED. */
static void test_held_too_long(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    marked_topic(f, "slow", 1000);
    held_pub_t h;
    int64_t t0 = tn_now_mono_ms();
    publish_held(f, &h, "slow");
    assert_true(tu_run_loop(f->loop, tu_is_true, &h.done));
    assert_int_equal(h.status, TN_ECREATING);
    assert_true(tn_now_mono_ms() - t0 >= TN_ROUTER_CREATE_HOLD_MS);
    assert_true(tn_replerr_retryable(TN_ECREATING));
    assert_string_equal(tn_replerr_text(TN_ECREATING), "topic is being created; retry");
    tn_pub_fini(&h.pub);
    held_pub_t last;
    publish_held(f, &last, "slow");
    tn_broker_set_publisher(f->b, NULL, NULL);
    tn_broker_set_append_check(f->b, NULL, NULL);
    tn_router_free(f->router);
    assert_true(last.done);
    assert_int_equal(last.status, TN_ECLOSED);
    tn_pub_fini(&last.pub);
    assert_int_equal(tn_router_new(&(tn_router_opts_t){f->b, f->m, NULL, NULL, NULL}, &f->router),
                     0);
    rfx_free(f);
}

/* A partition recovered at start, held until this node followed the
 * placement (tn_broker_hold_recovered, as a cluster's catalog does):
 * the engine's append check refuses it, the router holds a publish to it
 * with nothing written, and routes it once the hold is released; still
 * held after TN_ROUTER_CREATE_HOLD_MS, it is refused with the doors'
 * retryable answer. */
static void test_held_until_placed(void **state)
{
    (void)state;
    rfx_t *f = rfx_new();
    tn_meta_cmd_t c = tu_meta_topic_cmd("kept", 1);
    commit(f, &c);
    (void)tu_broker_topic(f->loop, f->b, "kept", 1);
    tn_broker_hold_recovered(f->b, true);
    engine_refuses(f, "kept", TN_EPLACING);
    held_pub_t h;
    publish_held(f, &h, "kept");
    assert_int_equal(next_offset(f, "kept"), 0);
    tn_broker_hold_recovered(f->b, false);
    assert_true(tu_run_loop(f->loop, tu_is_true, &h.done));
    assert_int_equal(h.status, 0);
    assert_int_equal(next_offset(f, "kept"), 1);
    tn_pub_fini(&h.pub);

    tn_broker_hold_recovered(f->b, true);
    int64_t t0 = tn_now_mono_ms();
    publish_held(f, &h, "kept");
    assert_true(tu_run_loop(f->loop, tu_is_true, &h.done));
    assert_int_equal(h.status, TN_EPLACING);
    assert_true(tn_now_mono_ms() - t0 >= TN_ROUTER_CREATE_HOLD_MS);
    assert_int_equal(next_offset(f, "kept"), 1);
    assert_true(tn_replerr_retryable(TN_EPLACING));
    assert_string_equal(tn_replerr_text(TN_EPLACING),
                        "this node is still catching up with the cluster's placement; retry");
    tn_pub_fini(&h.pub);
    tn_router_stats_t st;
    tn_router_stats(f->router, &st);
    assert_int_equal(st.publishing, 0);
    rfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_from_the_owner),
        cmocka_unit_test(test_owner_changed),
        cmocka_unit_test(test_owner_down),
        cmocka_unit_test(test_owner_unreachable),
        cmocka_unit_test(test_local_reads),
        cmocka_unit_test(test_replica_errors),
        cmocka_unit_test(test_held_until_ready),
        cmocka_unit_test(test_held_then_taken_back),
        cmocka_unit_test(test_held_while_the_old_topic_goes),
        cmocka_unit_test(test_held_too_long),
        cmocka_unit_test(test_held_until_placed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
