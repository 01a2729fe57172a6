/* Tests of the catalog's placement (api/catalog.h, "DESIGN: placement"):
 * a lone metastore replica (libraft on loopback) with the queue engine and
 * the catalog on one loop. As one of a cluster, records another node made
 * (a topic, a channel, a growth) are made in the engine as they are
 * applied, with only the partitions the metastore gives this node opened
 * and the others remote, naming their owner; as a lone node every
 * partition of a topic is here, as before placement. Then three voters,
 * each with its own store, engine and catalog, on one loop (libraft's TCP
 * transport on loopback, forwarding by a direct call to the leader): each
 * opens only the partition it owns, and NSQ publishes on a node that owns
 * none of an NSQ topic grow it by one partition there. A confirmed delete
 * (tn_catalog_purge) waits for the replica to drop the record (or times
 * out), removes the files once, whichever of it and the deletion that
 * follows the records comes first, and never touches a topic made again. */
#include "core/platform.h"

#include "fixture_meta.h"
#include "testutil.h"

#include "api/catalog.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/time.h"
#include "meta/meta.h"
#include "queue/queue.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    tu_fx_t *fx;
    tn_broker_t *b;
    tn_meta_t *m;
    tn_catalog_t *cat;
} cfx_t;

static bool run_until(cfx_t *f, bool (*cond)(void *), void *arg)
{
    return tu_run_loop(&f->fx->loop, cond, arg);
}

/* The store and engine, without metastore or catalog yet (cfx_start). */
static cfx_t *cfx_open(void)
{
    cfx_t *f = calloc(1, sizeof(*f));
    f->fx = tu_fx_new(NULL);
    tn_broker_opts_t o;
    tu_broker_opts(&o);
    assert_int_equal(tn_broker_open(&f->fx->loop, f->fx->store, &o, &f->b), 0);
    return f;
}

static void cfx_start(cfx_t *f, bool cluster)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/meta", f->fx->dir);
    f->m = tu_meta_lone(&f->fx->loop, dir, NULL);
    tn_catalog_opts_t co = {30000, 0, 0, 0, 1, cluster, 1, 1, false};
    assert_int_equal(tn_catalog_start(f->b, f->m, &co, &f->cat), 0);
    tn_catalog_reconcile(f->cat);
}

static cfx_t *cfx_new(bool cluster)
{
    cfx_t *f = cfx_open();
    cfx_start(f, cluster);
    return f;
}

static void cfx_free(cfx_t *f)
{
    tn_catalog_stop(f->cat);
    tu_broker_close(&f->fx->loop, f->b);
    tu_meta_close(&f->fx->loop, f->m);
    tu_fx_free(f->fx);
    free(f);
}

/* Commit c, as another node's proposal forwarded here would be. */
static void commit(cfx_t *f, const tn_meta_cmd_t *c)
{
    tu_meta_commit(&f->fx->loop, f->m, c);
}

static void register_member(cfx_t *f, uint64_t id)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REG;
    c.member.id = id;
    snprintf(c.member.addr, sizeof(c.member.addr), "127.0.0.%llu:4153", (unsigned long long)id);
    snprintf(c.member.api_addr, sizeof(c.member.api_addr), "127.0.0.%llu:4151",
             (unsigned long long)id);
    c.member.heartbeat_ms = tn_now_wall_ms();
    commit(f, &c);
}

static void put_topic(cfx_t *f, const char *name, uint32_t partitions)
{
    tn_meta_cmd_t c = tu_meta_topic_cmd(name, partitions);
    commit(f, &c);
}

static void put_channel(cfx_t *f, const char *topic, const char *channel)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_CHANNEL_PUT;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    snprintf(c.channel, sizeof(c.channel), "%s", channel);
    commit(f, &c);
}

typedef struct {
    cfx_t *f;
    const char *topic;
    uint32_t nparts;
    const char *channel; /* NULL: none needed */
} has_topic_t;

/* The engine has the topic with nparts partitions (and the channel), ready,
 * every partition placed as the metastore says. */
static bool engine_follows(void *arg)
{
    has_topic_t *h = arg;
    tn_topic_t *t = NULL;
    if (tn_broker_topic(h->f->b, h->topic, strlen(h->topic), false, 0, NULL, &t) != 0 ||
        t->nparts != h->nparts)
        return false;
    if (h->channel != NULL) {
        tn_channel_t *ch = NULL;
        if (tn_topic_channel(t, h->channel, strlen(h->channel), false, NULL, &ch) != 0)
            return false;
    }
    const tn_meta_state_t *s = tn_meta_state(h->f->m);
    for (uint32_t p = 0; p < t->nparts; p++) {
        uint64_t owner = tn_meta_state_owner(s, h->topic, p);
        if (owner == 0 || tn_topic_part_local(t, p) != (owner == 1))
            return false;
        if (owner != 1 && t->parts[p]->owner != owner)
            return false;
    }
    return true;
}

typedef struct {
    tn_pub_t p;
    bool done;
    int status;
} pubw_t;

static void on_pub(tn_pub_t *p, int status)
{
    pubw_t *w = p->data;
    w->done = true;
    w->status = status;
}

static bool pub_done(void *arg)
{
    return ((pubw_t *)arg)->done;
}

static int publish_on(uv_loop_t *loop, tn_broker_t *b, const char *topic, int pin, uint64_t *owner)
{
    pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "m", 1), 0);
    w.p.data = &w;
    if (pin >= 0) {
        w.p.pinned = true;
        w.p.pin = (uint32_t)pin;
    }
    int rc = tn_broker_publish(b, topic, strlen(topic), &w.p, 0, on_pub);
    if (rc == 0) {
        assert_true(tu_run_loop(loop, pub_done, &w));
        rc = w.status;
    }
    if (owner != NULL)
        *owner = w.p.owner;
    tn_pub_fini(&w.p);
    return rc;
}

/* Start an NSQ publish (grow_here) of topic on b; w receives the answer. */
static int start_nsq_pub(tn_broker_t *b, const char *topic, pubw_t *w)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(tn_pub_init(&w->p, 1), 0);
    assert_int_equal(tn_pub_set(&w->p, 0, "m", 1), 0);
    w->p.data = w;
    w->p.grow_here = true;
    return tn_broker_publish(b, topic, strlen(topic), &w->p, 0, on_pub);
}

static int publish(cfx_t *f, const char *topic, int pin, uint64_t *owner)
{
    return publish_on(&f->fx->loop, f->b, topic, pin, owner);
}

typedef struct {
    bool done;
    int status;
    char why[256];
} purgew_t;

static void on_purged(void *arg, int status, const char *why)
{
    purgew_t *w = arg;
    w->done = true;
    w->status = status;
    snprintf(w->why, sizeof(w->why), "%s", why != NULL ? why : "");
}

static bool purge_done(void *arg)
{
    return ((purgew_t *)arg)->done;
}

static void delete_topic(cfx_t *f, const char *name)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    commit(f, &c);
}

static bool topic_dir_exists(cfx_t *f, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/topics/%s", f->fx->dir, name);
    return access(path, F_OK) == 0;
}

static int64_t created_at(cfx_t *f, const char *name)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(f->m), name);
    assert_non_null(e);
    return e->rec.created_at_ms;
}

/* --- tests ------------------------------------------------------------------ */

/* One of a cluster: another node's records are made here, only this
 * node's partitions open, growth places the new ones. */
static void test_cluster_follows_records(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(true);
    register_member(f, 2); /* alive: it takes every other partition */
    put_topic(f, "far", 3);
    has_topic_t h = {f, "far", 3, NULL};
    assert_true(run_until(f, engine_follows, &h));
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "far", 3, false, 0, NULL, &t), 0);
    uint32_t local = 0;
    int remote = -1;
    for (uint32_t p = 0; p < 3; p++) {
        if (tn_topic_part_local(t, p))
            local++;
        else
            remote = (int)p;
    }
    /* Two members, p mod 2: this node has two of the three. */
    assert_int_equal(local, 2);
    assert_true(remote >= 0);
    uint64_t owner = 0;
    assert_int_equal(publish(f, "far", remote, &owner), TN_EREMOTE);
    assert_int_equal(owner, 2);
    assert_int_equal(publish(f, "far", -1, NULL), 0);

    /* A channel and a growth recorded elsewhere follow too. */
    put_channel(f, "far", "audit");
    h.channel = "audit";
    assert_true(run_until(f, engine_follows, &h));
    put_topic(f, "far", 5);
    h.nparts = 5;
    assert_true(run_until(f, engine_follows, &h));

    /* A topic made here through a door is placed at its creation. */
    assert_int_equal(publish(f, "near", -1, NULL), 0);
    has_topic_t n = {f, "near", 1, NULL};
    assert_true(engine_follows(&n));
    cfx_free(f);
}

static void channel_cmd(cfx_t *f, uint8_t type, const char *topic, const char *channel,
                        uint64_t stamp)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    snprintf(c.channel, sizeof(c.channel), "%s", channel);
    c.chan_stamp = stamp;
    commit(f, &c);
}

typedef struct {
    cfx_t *f;
    uint64_t stamp;   /* the engine's channel has it */
    uint64_t not_gen; /* and is another object than this one */
    uint64_t gen;     /* out */
} stamped_t;

static bool channel_stamped(void *arg)
{
    stamped_t *x = arg;
    tn_topic_t *t = NULL;
    tn_channel_t *ch = NULL;
    if (tn_broker_topic(x->f->b, "far", 3, false, 0, NULL, &t) != 0 ||
        tn_topic_channel(t, "audit", 5, false, NULL, &ch) != 0 || ch->stamp != x->stamp ||
        ch->gen == x->not_gen)
        return false;
    x->gen = ch->gen;
    return true;
}

/* A channel's stamp (meta/cmd.h CHANNEL_PUT): the engine's channel made
 * from a record takes its stamp; one proposed here without a stamp gets
 * one drawn (tn_meta_propose). A channel deleted and made again while the
 * catalog did not look (TERN_TEST_CATALOG_HOLD), both changes seen at
 * once, is replaced: the engine's channel with the old stamp goes and a
 * new object with the record's is made. Before, the name being recorded,
 * the old channel stayed with its state. */
static void test_channel_made_again_at_once(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(true);
    register_member(f, 2);
    put_topic(f, "far", 1);
    channel_cmd(f, TN_MC_CHANNEL_PUT, "far", "audit", 0x77);
    stamped_t x = {f, 0x77, 0, 0};
    assert_true(run_until(f, channel_stamped, &x));
    uint64_t first = x.gen;

    char hold[4096];
    snprintf(hold, sizeof(hold), "%s/catalog-hold", f->fx->dir);
    FILE *h = fopen(hold, "w");
    assert_non_null(h);
    fclose(h);
    assert_int_equal(setenv("TERN_TEST_CATALOG_HOLD", hold, 1), 0);
    channel_cmd(f, TN_MC_CHANNEL_DELETE, "far", "audit", 0);
    channel_cmd(f, TN_MC_CHANNEL_PUT, "far", "audit", 0); /* drawn at the proposal */
    uint64_t drawn = 0;
    assert_true(tn_meta_channel_find(tn_meta_state(f->m), "far", "audit", &drawn));
    assert_true(drawn != 0 && drawn != 0x77);
    /* Held (its timer looks every 100 ms): the engine keeps the old
     * channel. */
    int64_t until = tn_now_mono_ms() + 300;
    while (tn_now_mono_ms() < until) {
        uv_run(&f->fx->loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    x = (stamped_t){f, 0x77, 0, 0};
    assert_true(channel_stamped(&x));
    assert_int_equal(x.gen, first);
    assert_int_equal(unlink(hold), 0);
    x = (stamped_t){f, drawn, first, 0};
    assert_true(run_until(f, channel_stamped, &x));
    unsetenv("TERN_TEST_CATALOG_HOLD");
    cfx_free(f);
}

typedef struct {
    tn_waiter_t w;
    bool done;
    int status;
} madew_t;

static void on_made(tn_waiter_t *w, int status)
{
    madew_t *x = (madew_t *)w;
    x->done = true;
    x->status = status;
}

static bool made_done(void *arg)
{
    return ((madew_t *)arg)->done;
}

/* Make topic and its channel in the engine before any catalog gates it,
 * as recovery finds them on disk at start: the channel has no stamp. */
static tn_channel_t *engine_channel_made(cfx_t *f, const char *topic, const char *channel)
{
    tn_topic_t *t = NULL;
    madew_t w;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_made;
    int rc = tn_broker_topic(f->b, topic, strlen(topic), true, 1, &w.w, &t);
    if (rc == UV_EAGAIN) {
        assert_true(run_until(f, made_done, &w));
        assert_int_equal(w.status, 0);
        rc = tn_broker_topic(f->b, topic, strlen(topic), false, 0, NULL, &t);
    }
    assert_int_equal(rc, 0);
    tn_channel_t *ch = NULL;
    memset(&w, 0, sizeof(w));
    w.w.cb = on_made;
    rc = tn_topic_channel(t, channel, strlen(channel), true, &w.w, &ch);
    if (rc == UV_EAGAIN) {
        assert_true(run_until(f, made_done, &w));
        assert_int_equal(w.status, 0);
        rc = tn_topic_channel(t, channel, strlen(channel), false, NULL, &ch);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(ch->stamp, 0);
    return ch;
}

/* A replica that is not confirmed current yet passes through older
 * states (one started empty beside files, `ternctl restore --rejoin`,
 * catching up with the leader's log): a channel loaded from disk must
 * not take the stamp of a record such a state shows. Here the node's
 * files hold channel audit as it is since it was deleted and made
 * again (stamp 0x22); its replica shows first the record it had before
 * (0x11), then the deletion and the new one. Before, the catalog gave
 * the engine's channel 0x11 at once and, the replica confirmed, found it
 * recorded with another stamp and replaced it: the channel's state on
 * this node (frontier, finished offsets, deferred REQs) dropped, a new
 * one made at the bootstrap window. Its stamp now waits for a confirmed
 * replica, as follow_deletions does: it takes 0x22 and stays the same
 * channel. (TERN_TEST_CATALOG_UNCONFIRMED holds the confirmation.) */
static void test_loaded_channel_waits_for_a_current_replica(void **state)
{
    (void)state;
    cfx_t *f = cfx_open();
    char unconfirmed[4096];
    snprintf(unconfirmed, sizeof(unconfirmed), "%s/unconfirmed", f->fx->dir);
    FILE *h = fopen(unconfirmed, "w");
    assert_non_null(h);
    fclose(h);
    assert_int_equal(setenv("TERN_TEST_CATALOG_UNCONFIRMED", unconfirmed, 1), 0);
    uint64_t gen = engine_channel_made(f, "far", "audit")->gen;
    cfx_start(f, true);
    register_member(f, 2);
    put_topic(f, "far", 1);
    channel_cmd(f, TN_MC_CHANNEL_PUT, "far", "audit", 0x11);
    tn_catalog_reconcile(f->cat); /* the catalog looks at this state */
    channel_cmd(f, TN_MC_CHANNEL_DELETE, "far", "audit", 0);
    channel_cmd(f, TN_MC_CHANNEL_PUT, "far", "audit", 0x22);
    assert_int_equal(unlink(unconfirmed), 0);
    tn_catalog_reconcile(f->cat); /* asks for the confirmation */
    stamped_t x = {f, 0x22, 0, 0};
    assert_true(run_until(f, channel_stamped, &x));
    assert_int_equal(x.gen, gen);
    unsetenv("TERN_TEST_CATALOG_UNCONFIRMED");
    cfx_free(f);
}

typedef struct {
    tn_meta_req_t req;
    bool done;
    int status;
} rawp_t;

static void on_raw_proposed(tn_meta_req_t *req, int status)
{
    rawp_t *x = req->data;
    x->done = true;
    x->status = status;
}

static bool raw_done(void *arg)
{
    return ((rawp_t *)arg)->done;
}

/* Commit the CHANNEL_PUT of an older build: encoded without a stamp, as
 * another node's forwarded bytes (tn_meta_propose would draw one). */
static void put_older_channel(cfx_t *f, const char *topic, const char *channel)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_CHANNEL_PUT;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    snprintf(c.channel, sizeof(c.channel), "%s", channel);
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    rawp_t x;
    memset(&x, 0, sizeof(x));
    x.req.data = &x;
    assert_int_equal(
        tn_meta_propose_encoded(f->m, &x.req, tn_buf_data(&b), tn_buf_size(&b), on_raw_proposed),
        0);
    assert_true(run_until(f, raw_done, &x));
    assert_int_equal(x.status, 0);
    tn_buf_fini(&b);
    uint64_t stamp = 1;
    assert_true(tn_meta_channel_find(tn_meta_state(f->m), topic, channel, &stamp));
    assert_true(stamp == 0);
}

/* A channel an older build recorded (stamp 0, meta/cmd.h CHANNEL_PUT) is
 * never replaced for its stamp: its engine channel keeps stamp 0 and stays
 * the same object through later changes of the replica, also one loaded
 * from disk. */
static void test_older_channel_is_kept(void **state)
{
    (void)state;
    cfx_t *f = cfx_open();
    /* The records arrive before the replica is confirmed: the engine's
     * topic is not taken for deleted meanwhile. */
    char unconfirmed[4096];
    snprintf(unconfirmed, sizeof(unconfirmed), "%s/unconfirmed", f->fx->dir);
    FILE *u = fopen(unconfirmed, "w");
    assert_non_null(u);
    fclose(u);
    assert_int_equal(setenv("TERN_TEST_CATALOG_UNCONFIRMED", unconfirmed, 1), 0);
    uint64_t gen = engine_channel_made(f, "far", "audit")->gen;
    cfx_start(f, true);
    register_member(f, 2);
    put_topic(f, "far", 1);
    put_older_channel(f, "far", "audit");
    assert_int_equal(unlink(unconfirmed), 0);
    unsetenv("TERN_TEST_CATALOG_UNCONFIRMED");
    channel_cmd(f, TN_MC_CHANNEL_PUT, "far", "other", 0x33); /* a change after it */
    stamped_t x = {f, 0, 0, 0};
    has_topic_t h = {f, "far", 1, "other"};
    assert_true(run_until(f, engine_follows, &h));
    register_member(f, 2); /* one more change, looked at with the replica confirmed */
    assert_true(run_until(f, engine_follows, &h));
    assert_true(channel_stamped(&x));
    assert_int_equal(x.gen, gen);
    cfx_free(f);
}

/* A lone node: every partition is here, as before placement. */
static void test_lone_node_has_every_partition(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(false);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "t", 1, true, 4, NULL, &t), UV_EAGAIN);
    for (int p = 0; p < 4; p++)
        assert_int_equal(publish(f, "t", p, NULL), 0);
    assert_int_equal(tn_broker_topic(f->b, "t", 1, false, 0, NULL, &t), 0);
    for (uint32_t p = 0; p < 4; p++) {
        assert_true(tn_topic_part_local(t, p));
        assert_int_equal(tn_meta_state_owner(tn_meta_state(f->m), "t", p), 1);
    }
    cfx_free(f);
}

/* --- three nodes on one loop ------------------------------------------------------ */

#define N 3

typedef struct {
    uv_loop_t loop;
    char *dir;
    tn_store_t *store[N + 1]; /* by node id */
    tn_broker_t *b[N + 1];
    tn_meta_t *m[N + 1];
    tn_catalog_t *cat[N + 1];
    char raft[N + 1][32];
    char api[N + 1][32];
} cluster_t;

typedef struct {
    tn_meta_req_t req;
    tn_meta_forward_done done;
    void *done_arg;
} hop_t;

static void on_hop(tn_meta_req_t *req, int status)
{
    hop_t *h = req->data;
    h->done(h->done_arg, status, req->index);
    free(h);
}

/* Node RPC's stand-in: the leader's tn_meta_propose_encoded, called
 * directly. */
static int forward_hook(void *arg, uint64_t leader, const char *api, const void *cmd, size_t len,
                        tn_meta_forward_done done, void *done_arg)
{
    cluster_t *c = arg;
    (void)api;
    assert_true(leader >= 1 && leader <= N);
    hop_t *h = calloc(1, sizeof(*h));
    h->done = done;
    h->done_arg = done_arg;
    h->req.data = h;
    int rc = tn_meta_propose_encoded(c->m[leader], &h->req, cmd, len, on_hop);
    if (rc != 0) {
        free(h);
        done(done_arg, rc, 0);
    }
    return 0;
}

static bool cluster_ready(void *arg)
{
    cluster_t *c = arg;
    for (uint64_t i = 1; i <= N; i++) {
        if (!tn_meta_ready(c->m[i]) || !tn_meta_caught_up(c->m[i]))
            return false;
        const tn_meta_state_t *s = tn_meta_state(c->m[i]);
        for (uint64_t k = 1; k <= N; k++)
            if (tn_meta_member_find(s, k) == NULL)
                return false;
    }
    return true;
}

static void cluster_open(cluster_t *c)
{
    /* libraft writes to peers that closed (ternd ignores SIGPIPE too). */
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&c->loop);
    c->dir = tu_tempdir();
    tn_meta_peer_t peers[N];
    for (uint64_t i = 1; i <= N; i++) {
        snprintf(c->raft[i], sizeof(c->raft[i]), "127.0.0.1:%d", tu_free_port(false));
        snprintf(c->api[i], sizeof(c->api[i]), "127.0.0.%llu:4151", (unsigned long long)i);
        peers[i - 1].id = i;
        snprintf(peers[i - 1].raft_addr, sizeof(peers[i - 1].raft_addr), "%s", c->raft[i]);
    }
    for (uint64_t i = 1; i <= N; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/node%llu", c->dir, (unsigned long long)i);
        tn_store_opts_t so;
        tu_store_opts(&so, path);
        c->store[i] = tu_store_open(&c->loop, &so);
        tn_broker_opts_t o;
        tu_broker_opts(&o);
        o.default_partitions = 3;
        assert_int_equal(tn_broker_open(&c->loop, c->store[i], &o, &c->b[i]), 0);
        snprintf(path, sizeof(path), "%s/node%llu/meta", c->dir, (unsigned long long)i);
        tn_meta_opts_t mo;
        memset(&mo, 0, sizeof(mo));
        mo.dir = path;
        mo.node_id = i;
        mo.address = c->raft[i];
        mo.api_addr = c->api[i];
        mo.election_ms = 300;
        mo.heartbeat_ms = 50;
        mo.heartbeat_interval_ms = 200;
        mo.dead_after_ms = 30000;
        mo.peers = peers;
        mo.npeers = N;
        mo.forward = forward_hook;
        mo.forward_arg = c;
        char err[256] = "";
        if (tn_meta_open(&c->loop, &mo, &c->m[i], err, sizeof(err)) != 0)
            fail_msg("tn_meta_open %llu: %s", (unsigned long long)i, err);
    }
    assert_true(tu_run_loop(&c->loop, cluster_ready, c));
    for (uint64_t i = 1; i <= N; i++) {
        tn_catalog_opts_t co = {30000, 0, 0, 0, i, true, 1, 1, false};
        assert_int_equal(tn_catalog_start(c->b[i], c->m[i], &co, &c->cat[i]), 0);
        tn_catalog_reconcile(c->cat[i]);
    }
}

static int closing;

static void on_node_broker_closed(tn_broker_t *b)
{
    (void)b;
    closing--;
}

static void on_node_meta_closed(void *arg)
{
    (void)arg;
    closing--;
}

static bool all_closed(void *arg)
{
    (void)arg;
    return closing == 0;
}

static void cluster_close(cluster_t *c)
{
    closing = N;
    for (uint64_t i = 1; i <= N; i++) {
        tn_catalog_stop(c->cat[i]);
        tn_broker_close(c->b[i], on_node_broker_closed);
    }
    assert_true(tu_run_loop(&c->loop, all_closed, NULL));
    closing = N;
    for (uint64_t i = 1; i <= N; i++)
        tn_meta_close(c->m[i], on_node_meta_closed, NULL);
    assert_true(tu_run_loop(&c->loop, all_closed, NULL));
    for (uint64_t i = 1; i <= N; i++)
        tu_store_close(&c->loop, c->store[i]);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&c->loop), 0);
    tu_rmrf(c->dir);
    free(c->dir);
}

typedef struct {
    cluster_t *c;
    const char *topic;
    uint32_t nparts;
} placed_t;

/* Every node's engine has the topic with every partition placed as the
 * metastore says: open on its owner only, remote (naming it) elsewhere. */
static bool placed_everywhere(void *arg)
{
    placed_t *w = arg;
    for (uint64_t i = 1; i <= N; i++) {
        tn_topic_t *t = NULL;
        if (tn_broker_topic(w->c->b[i], w->topic, strlen(w->topic), false, 0, NULL, &t) != 0 ||
            t->nparts != w->nparts)
            return false;
        for (uint32_t p = 0; p < t->nparts; p++) {
            uint64_t owner = tn_meta_state_owner(tn_meta_state(w->c->m[i]), w->topic, p);
            if (owner == 0 || tn_topic_part_local(t, p) != (owner == i) ||
                (owner != i && t->parts[p]->owner != owner))
                return false;
        }
    }
    return true;
}

static int count_part(void *arg, const char *t, uint32_t p)
{
    (void)t;
    (void)p;
    (*(int *)arg)++;
    return 0;
}

/* Three nodes: a topic made by a publish on a follower lands there at
 * once (its gate waits for the record in the local replica), every node
 * opens only the partition it owns, and a pinned publish elsewhere is
 * refused naming the owner. */
static void test_three_nodes(void **state)
{
    (void)state;
    cluster_t *c = calloc(1, sizeof(*c));
    cluster_open(c);
    uint64_t leader = 0;
    const char *api = NULL;
    assert_int_equal(tn_meta_leader(c->m[1], &leader, &api), 0);
    uint64_t follower = leader == 1 ? 2 : 1;
    assert_int_equal(publish_on(&c->loop, c->b[follower], "orders", -1, NULL), 0);
    placed_t w = {c, "orders", 3};
    assert_true(tu_run_loop(&c->loop, placed_everywhere, &w));
    for (uint64_t i = 1; i <= N; i++) {
        tn_topic_t *t = NULL;
        assert_int_equal(tn_broker_topic(c->b[i], "orders", 6, false, 0, NULL, &t), 0);
        int local = 0;
        for (uint32_t p = 0; p < 3; p++) {
            uint64_t owner = 0;
            if (tn_topic_part_local(t, p)) {
                local++;
                assert_int_equal(publish_on(&c->loop, c->b[i], "orders", (int)p, NULL), 0);
            } else {
                assert_int_equal(publish_on(&c->loop, c->b[i], "orders", (int)p, &owner),
                                 TN_EREMOTE);
                assert_int_equal(owner, tn_meta_state_owner(tn_meta_state(c->m[i]), "orders", p));
            }
        }
        assert_int_equal(local, 1); /* three members, p mod 3 */
        int on_disk = 0;
        assert_int_equal(tn_store_list_partitions(c->store[i], "orders", count_part, &on_disk), 0);
        assert_int_equal(on_disk, 1);
    }
    /* A growth recorded through another node is followed everywhere. */
    tn_meta_cmd_t g;
    memset(&g, 0, sizeof(g));
    g.type = TN_MC_TOPIC_PUT;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->m[leader]), "orders");
    assert_non_null(e);
    g.topic = e->rec;
    g.topic.partitions = 6;
    tu_meta_commit(&c->loop, c->m[follower], &g);
    w.nparts = 6;
    assert_true(tu_run_loop(&c->loop, placed_everywhere, &w));
    cluster_close(c);
    free(c);
}

/* A recorded topic with one partition (on node 1) made on every node. */
static void one_partition_topic(cluster_t *c, const char *name, bool native)
{
    tn_meta_cmd_t t = tu_meta_topic_cmd(name, 1);
    t.if_absent = true;
    t.topic.native = native;
    tu_meta_commit(&c->loop, c->m[1], &t);
    placed_t w = {c, name, 1};
    assert_true(tu_run_loop(&c->loop, placed_everywhere, &w));
}

/* Three nodes: NSQ publishes on the two nodes that own no partition of an
 * NSQ topic (several at once on each) grow it by one partition each, owned
 * there, and go to it; every node then has three partitions, one its own;
 * a /v1 topic refuses them and keeps its one partition. */
/* A confirmed delete as one of a cluster: the record must go first, the
 * deletion that follows the records and the purge delete once, and a
 * topic made again is left alone. */
static void test_purge_in_a_cluster(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(true);
    put_topic(f, "gone", 2);
    has_topic_t h = {f, "gone", 2, NULL};
    assert_true(run_until(f, engine_follows, &h));
    assert_int_equal(publish(f, "gone", 0, NULL), 0);
    assert_true(topic_dir_exists(f, "gone"));
    int64_t old = created_at(f, "gone");

    /* The record is still there: the purge waits, then says so. */
    purgew_t w = {0};
    assert_int_equal(tn_catalog_purge(f->cat, "gone", old, 200, on_purged, &w), 0);
    assert_true(run_until(f, purge_done, &w));
    assert_int_equal(w.status, UV_ETIMEDOUT);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "gone", 4, false, 0, NULL, &t), 0);
    assert_true(topic_dir_exists(f, "gone"));

    /* Asked before the deletion commits: answered once the files are gone. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_catalog_purge(f->cat, "gone", old, 10000, on_purged, &w), 0);
    assert_false(w.done);
    delete_topic(f, "gone");
    assert_true(run_until(f, purge_done, &w));
    assert_int_equal(w.status, 0);
    assert_int_equal(tn_broker_topic(f->b, "gone", 4, false, 0, NULL, &t), TN_ENOTFOUND);
    assert_false(topic_dir_exists(f, "gone"));
    /* Asked again (a retried call): nothing left, 0 at once. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_catalog_purge(f->cat, "gone", old, 10000, on_purged, &w), 0);
    assert_true(w.done);
    assert_int_equal(w.status, 0);

    /* Made again under the same name: a purge of the old one leaves it. */
    usleep(2000); /* another creation time */
    put_topic(f, "gone", 1);
    h.nparts = 1;
    assert_true(run_until(f, engine_follows, &h));
    assert_int_equal(publish(f, "gone", 0, NULL), 0);
    assert_true(created_at(f, "gone") != old);
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_catalog_purge(f->cat, "gone", old, 10000, on_purged, &w), 0);
    assert_true(run_until(f, purge_done, &w));
    assert_int_equal(w.status, 0);
    assert_int_equal(tn_broker_topic(f->b, "gone", 4, false, 0, NULL, &t), 0);
    assert_true(topic_dir_exists(f, "gone"));

    /* Stopping answers a purge under way. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_catalog_purge(f->cat, "gone", created_at(f, "gone"), 10000, on_purged, &w),
                     0);
    assert_false(w.done);
    tn_catalog_stop(f->cat);
    assert_true(w.done);
    assert_int_equal(w.status, TN_ECLOSED);
    f->cat = NULL;
    cfx_free(f);
}

/* On a lone node nothing follows the records: the purge deletes. */
static void test_purge_on_a_lone_node(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(false);
    assert_int_equal(publish(f, "solo", -1, NULL), 0); /* made through the gate: recorded */
    int64_t at = created_at(f, "solo");
    delete_topic(f, "solo");
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "solo", 4, false, 0, NULL, &t), 0);
    purgew_t w = {0};
    assert_int_equal(tn_catalog_purge(f->cat, "solo", at, 5000, on_purged, &w), 0);
    assert_true(run_until(f, purge_done, &w));
    assert_int_equal(w.status, 0);
    assert_int_equal(tn_broker_topic(f->b, "solo", 4, false, 0, NULL, &t), TN_ENOTFOUND);
    assert_false(topic_dir_exists(f, "solo"));
    /* A topic never there: nothing to do. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_catalog_purge(f->cat, "never", 1, 5000, on_purged, &w), 0);
    assert_true(w.done);
    assert_int_equal(w.status, 0);
    cfx_free(f);
}

static bool deadline_passed(void *arg)
{
    return tn_now_mono_ms() >= *(int64_t *)arg;
}

/* A lone node's NSQ auto-creation the engine failed (a file in the topic
 * directory's place) has its record taken back. A publish of the name
 * while that TOPIC_DELETE is under way (the record still there) waits and
 * records the topic anew: it must not pass the gate on the old record,
 * have its message acknowledged, and then lose the topic to the deletion
 * and the purge that follows it. */
static void test_publish_while_a_creation_is_taken_back(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(false);
    char blocker[4096];
    snprintf(blocker, sizeof(blocker), "%s/topics/racy", f->fx->dir);
    FILE *fp = fopen(blocker, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_not_equal(publish(f, "racy", -1, NULL), 0);
    /* The take-back is proposed, and mostly not committed yet (when it
     * is, this run misses the race: the publish records the topic anew). */
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(f->m), "racy");
    int64_t old = e != NULL ? e->rec.created_at_ms : 0;
    assert_int_equal(unlink(blocker), 0);
    assert_int_equal(publish(f, "racy", -1, NULL), 0); /* acknowledged */
    /* The take-back, its purge (PURGE_CHECK_MS) and the new record settle. */
    int64_t until = tn_now_mono_ms() + 1500;
    (void)run_until(f, deadline_passed, &until);
    e = tn_meta_topic_find(tn_meta_state(f->m), "racy");
    assert_non_null(e);
    assert_true(e->rec.created_at_ms != old);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "racy", 4, false, 0, NULL, &t), 0);
    assert_true(topic_dir_exists(f, "racy"));
    cfx_free(f);
}

/* Another door's take-back (a /v1 create the engine failed): while it
 * holds the name, a publish that would make the topic waits instead of
 * passing the gate on the record being deleted, and records the topic
 * anew once released. A hold the catalog's stop finds goes with it. */
static void test_creations_wait_for_a_held_take_back(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(false);
    put_topic(f, "held", 1); /* recorded, not made: the failed creation's */
    int64_t old = created_at(f, "held");
    tn_catalog_hold_creations(f->cat, "held", old, true);
    pubw_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_pub_init(&w.p, 1), 0);
    assert_int_equal(tn_pub_set(&w.p, 0, "m", 1), 0);
    w.p.data = &w;
    int rc = tn_broker_publish(f->b, "held", 4, &w.p, 0, on_pub);
    assert_int_equal(rc, 0);
    int64_t until = tn_now_mono_ms() + 300;
    (void)run_until(f, deadline_passed, &until);
    assert_false(w.done); /* waits for the take-back */
    delete_topic(f, "held");
    tn_catalog_hold_creations(f->cat, "held", old, false);
    assert_true(run_until(f, pub_done, &w));
    assert_int_equal(w.status, 0);
    tn_pub_fini(&w.p);
    assert_true(created_at(f, "held") > old);
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "held", 4, false, 0, NULL, &t), 0);
    tn_catalog_hold_creations(f->cat, "other", 1, true); /* freed by the stop */
    cfx_free(f);
}

typedef struct {
    cfx_t *f;
    const char *topic;
} named_t;

static bool engine_lacks(void *arg)
{
    named_t *n = arg;
    tn_topic_t *t = NULL;
    return tn_broker_topic(n->f->b, n->topic, strlen(n->topic), false, 0, NULL, &t) == TN_ENOTFOUND;
}

/* The catalog's own making of a record waits behind another door's
 * take-back like any creation; if a user deletes the topic meanwhile, it
 * fails at once (nothing holds the name as being made, so the deletion's
 * purge is not kept waiting for the take-back), and it never records the
 * topic again as a client's creation would (was: recorded anew, with no
 * owner, once the take-back released the name: the deleted topic came
 * back). */
static void test_a_make_held_by_a_take_back_stays_deleted(void **state)
{
    (void)state;
    cfx_t *f = cfx_new(false);
    put_topic(f, "undone", 1); /* recorded, not made */
    int64_t old = created_at(f, "undone");
    tn_catalog_hold_creations(f->cat, "undone", old, true);
    tn_catalog_reconcile(f->cat); /* makes what the records name: held */
    tn_topic_t *t = NULL;
    assert_int_equal(tn_broker_topic(f->b, "undone", 6, false, 0, NULL, &t), UV_EAGAIN);
    delete_topic(f, "undone");
    /* The deletion's purge here ends while the take-back still holds. */
    purgew_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(tn_catalog_purge(f->cat, "undone", old, 10000, on_purged, &w), 0);
    assert_true(run_until(f, purge_done, &w));
    assert_int_equal(w.status, 0);
    named_t n = {f, "undone"};
    assert_true(engine_lacks(&n));
    tn_catalog_hold_creations(f->cat, "undone", old, false);
    int64_t until = tn_now_mono_ms() + 300;
    (void)run_until(f, deadline_passed, &until);
    assert_null(tn_meta_topic_find(tn_meta_state(f->m), "undone"));
    assert_true(engine_lacks(&n));
    cfx_free(f);
}

static void test_nsq_publishes_grow_the_topic(void **state)
{
    (void)state;
    cluster_t *c = calloc(1, sizeof(*c));
    cluster_open(c);
    one_partition_topic(c, "fleet", false);
    pubw_t w[2][3];
    for (uint64_t i = 2; i <= 3; i++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(start_nsq_pub(c->b[i], "fleet", &w[i - 2][k]), 0);
    for (uint64_t i = 2; i <= 3; i++)
        for (int k = 0; k < 3; k++) {
            pubw_t *x = &w[i - 2][k];
            assert_true(tu_run_loop(&c->loop, pub_done, x));
            assert_int_equal(x->status, 0);
            assert_int_equal(tn_meta_state_owner(tn_meta_state(c->m[i]), "fleet", x->p.partition),
                             i);
            tn_pub_fini(&x->p);
        }
    placed_t pl = {c, "fleet", 3};
    assert_true(tu_run_loop(&c->loop, placed_everywhere, &pl));
    for (uint64_t i = 1; i <= N; i++) {
        const tn_meta_state_t *s = tn_meta_state(c->m[i]);
        assert_int_equal(tn_meta_topic_find(s, "fleet")->rec.partitions, 3);
        uint64_t seen = 0;
        for (uint32_t p = 0; p < 3; p++)
            seen |= UINT64_C(1) << tn_meta_state_owner(s, "fleet", p);
        assert_int_equal(seen, 2 | 4 | 8);
    }
    /* Owning one now, node 3 publishes without asking again. */
    assert_int_equal(start_nsq_pub(c->b[3], "fleet", &w[0][0]), 0);
    assert_true(tu_run_loop(&c->loop, pub_done, &w[0][0]));
    assert_int_equal(w[0][0].status, 0);
    tn_pub_fini(&w[0][0].p);
    assert_int_equal(tn_meta_topic_find(tn_meta_state(c->m[3]), "fleet")->rec.partitions, 3);

    one_partition_topic(c, "owned", true);
    assert_int_equal(start_nsq_pub(c->b[2], "owned", &w[0][0]), TN_EREMOTE);
    tn_pub_fini(&w[0][0].p);
    assert_int_equal(tn_meta_topic_find(tn_meta_state(c->m[2]), "owned")->rec.partitions, 1);
    cluster_close(c);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_follows_records),
        cmocka_unit_test(test_channel_made_again_at_once),
        cmocka_unit_test(test_loaded_channel_waits_for_a_current_replica),
        cmocka_unit_test(test_older_channel_is_kept),
        cmocka_unit_test(test_lone_node_has_every_partition),
        cmocka_unit_test(test_three_nodes),
        cmocka_unit_test(test_nsq_publishes_grow_the_topic),
        cmocka_unit_test(test_purge_in_a_cluster),
        cmocka_unit_test(test_purge_on_a_lone_node),
        cmocka_unit_test(test_publish_while_a_creation_is_taken_back),
        cmocka_unit_test(test_creations_wait_for_a_held_take_back),
        cmocka_unit_test(test_a_make_held_by_a_take_back_stays_deleted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
