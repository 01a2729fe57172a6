/* The cluster control plane (cluster/control.c) through real node RPC: a
 * small cluster in one process, each node a tn_meta_t (libraft over
 * loopback TCP), a tn_rpc_t (QUIC over loopback UDP) serving the
 * control's handlers, and a tn_control_t, all on one loop. Nodes 1 and 2
 * bootstrap as the two voters; node 3 starts join_only with their API
 * addresses as its join list. Covers a follower's proposal forwarded to
 * the leader (META_PROPOSE_AT, and META_PROPOSE to a leader that answers
 * it as an older build), META_PROPOSE on a follower (421 + the leader's address) and
 * malformed payloads (400), JOIN (admission, and 400 for a bad id or
 * address), LEADER_INDEX (200 + 8 bytes on the leader, 421 elsewhere),
 * NODE_STATUS, and a close with calls and handlers in flight
 * (uv_loop_close() == 0; ASan checks the memory). Time bounds are
 * generous: the machine may be loaded. */
#include "core/platform.h"

#include "cluster/control.h"
#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/time.h"
#include "meta/meta.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SECRET   "control plane test secret"
#define NNODES   3
#define GUARD_MS 30000

/* A control handler as the RPC endpoint sees it: the test notes each
 * request before the control plane's handler takes it, and answers the
 * requests that come once that control plane is freed itself (ternd
 * closes node RPC before the control plane; here the endpoints stay open
 * after it, to carry the answers of its close). */
typedef struct {
    uint64_t node;
    tn_rpc_handler_t inner;
} shim_t;

/* A request a node's control handler took: its op and fields. */
typedef struct {
    uint64_t node;
    uint8_t op;
    uint8_t *fields;
    size_t len;
} took_t;

typedef struct {
    uv_loop_t loop;
    char *dir;
    char mdir[NNODES + 1][4096];
    char raft[NNODES + 1][32];
    char api[NNODES + 1][32];
    tn_meta_t *m[NNODES + 1]; /* by id */
    tn_rpc_t *rpc[NNODES + 1];
    tn_control_t *ctl[NNODES + 1];
    uint64_t leader, follower; /* of nodes 1 and 2 (of 1..3 once three_settled) */
    uint64_t third;            /* the other one, once three_settled */
    shim_t shim[NNODES + 1][5];
    bool old[NNODES + 1];       /* the node answers META_PROPOSE_AT as an older build (400) */
    bool ctl_freed[NNODES + 1]; /* its close callback came */
    took_t *took;               /* every request a node's control handlers took */
    size_t ntook;
    size_t took_from; /* took() looks from here on */
} fixture_t;

static fixture_t fx;

/* --- helpers ------------------------------------------------------------------------ */

static bool run_until(bool (*cond)(void *), void *arg)
{
    int64_t deadline = tn_now_mono_ms() + GUARD_MS;
    while (!cond(arg)) {
        if (tn_now_mono_ms() > deadline)
            return false;
        uv_run(&fx.loop, UV_RUN_ONCE);
    }
    return true;
}

typedef struct {
    bool done;
    int status;
    uint16_t http;
    char body[512];
    size_t blen;
} res_t;

static void on_res(void *arg, int status, const tn_wire_reply_t *rep, const char *err)
{
    res_t *r = arg;
    assert_false(r->done); /* exactly once */
    r->done = true;
    r->status = status;
    if (status != 0) {
        snprintf(r->body, sizeof(r->body), "%s", err);
        return;
    }
    r->http = rep->status;
    r->blen = rep->body_len < sizeof(r->body) - 1 ? rep->body_len : sizeof(r->body) - 1;
    memcpy(r->body, rep->body, r->blen);
    r->body[r->blen] = '\0';
}

static bool res_done(void *arg)
{
    return ((res_t *)arg)->done;
}

/* Send op with payload from node `from`'s endpoint to node `to`'s API
 * address and wait for the answer, which must be a reply. */
static void call(uint64_t from, uint64_t to, uint8_t op, const void *p, size_t len, res_t *res)
{
    memset(res, 0, sizeof(*res));
    assert_int_equal(tn_rpc_call(fx.rpc[from], fx.api[to], op, p, len, 10000, on_res, res, NULL),
                     0);
    assert_true(run_until(res_done, res));
    if (res->status != 0)
        fail_msg("call %u to node %llu: %s", op, (unsigned long long)to, res->body);
}

static void on_shim(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    shim_t *s = arg;
    if (fx.ctl_freed[s->node]) {
        tn_rpc_reply_error(req, 503, "test: the control plane is gone");
        return;
    }
    took_t *v = realloc(fx.took, (fx.ntook + 1) * sizeof(*v));
    assert_non_null(v);
    fx.took = v;
    took_t *t = &fx.took[fx.ntook++];
    t->node = s->node;
    t->op = s->inner.op;
    t->len = len;
    t->fields = malloc(len ? len : 1);
    assert_non_null(t->fields);
    if (len > 0)
        memcpy(t->fields, payload, len);
    if (fx.old[s->node] && s->inner.op == TN_OP_META_PROPOSE_AT) {
        /* What the RPC server of an older build answers an opcode it
         * does not know (cluster/rpc.c). */
        static const char unsupported[] = "{\"error\":\"unsupported rpc operation\"}";
        tn_rpc_reply(req, 400, "application/json", unsupported, strlen(unsupported));
        return;
    }
    s->inner.fn(req, payload, len, s->inner.arg);
}

/* Whether node's control handler for op (node 0: any node's) took a
 * request whose fields are (fields, len), or, with len 0 and fields not
 * NULL, fields containing the string fields. */
static bool took(uint64_t node, uint8_t op, const void *fields, size_t len)
{
    for (size_t i = fx.took_from; i < fx.ntook; i++) {
        const took_t *t = &fx.took[i];
        if ((node != 0 && t->node != node) || t->op != op)
            continue;
        if (len > 0 ? t->len == len && memcmp(t->fields, fields, len) == 0
                    : fields == NULL || memmem(t->fields, t->len, fields, strlen(fields)) != NULL)
            return true;
    }
    return false;
}

static tn_meta_cmd_t topic_cmd(const char *name, bool if_absent)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_PUT;
    c.if_absent = if_absent;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", name);
    c.topic.partitions = 2;
    c.topic.retention_ms = 3600 * 1000LL;
    c.topic.visibility_timeout_ms = 30000;
    c.topic.max_inflight = 64;
    c.topic.max_acked_ahead = 64;
    c.topic.created_at_ms = 1700000000000LL;
    snprintf(c.topic.owner, sizeof(c.topic.owner), "alice");
    return c;
}

/* Node id with its control plane, node RPC and metastore, opened in the
 * order ternd opens them; join_only nodes ask the join addresses. */
static void node_open(uint64_t id, bool join_only, const char *const *join, size_t njoin)
{
    tn_control_opts_t co;
    memset(&co, 0, sizeof(co));
    co.node_id = id;
    co.raft_addr = fx.raft[id];
    co.api_addr = fx.api[id];
    co.join = join;
    co.njoin = njoin;
    co.join_retry_ms = 300;
    assert_int_equal(tn_control_new(&fx.loop, &co, &fx.ctl[id]), 0);

    size_t nh = 0;
    const tn_rpc_handler_t *ch = tn_control_handlers(fx.ctl[id], &nh);
    assert_int_equal(nh, 5);
    tn_rpc_handler_t h[5];
    for (size_t i = 0; i < nh; i++) {
        fx.shim[id][i].node = id;
        fx.shim[id][i].inner = ch[i];
        h[i] = ch[i];
        h[i].fn = on_shim;
        h[i].arg = &fx.shim[id][i];
    }
    tn_rpc_opts_t ro;
    memset(&ro, 0, sizeof(ro));
    ro.bind = fx.api[id];
    ro.secret = (const uint8_t *)SECRET;
    ro.secret_len = strlen(SECRET);
    ro.handlers = h;
    ro.nhandlers = nh;
    char err[256] = "";
    if (tn_rpc_open(&fx.loop, &ro, &fx.rpc[id], err, sizeof(err)) != 0)
        fail_msg("tn_rpc_open %llu: %s", (unsigned long long)id, err);
    assert_string_equal(tn_rpc_addr(fx.rpc[id]), fx.api[id]);

    tn_meta_peer_t peers[2];
    for (uint64_t i = 1; i <= 2; i++) {
        peers[i - 1].id = i;
        snprintf(peers[i - 1].raft_addr, sizeof(peers[i - 1].raft_addr), "%s", fx.raft[i]);
    }
    tn_meta_opts_t mo;
    memset(&mo, 0, sizeof(mo));
    mo.dir = fx.mdir[id];
    mo.node_id = id;
    mo.address = fx.raft[id];
    mo.api_addr = fx.api[id];
    mo.election_ms = 300;
    mo.heartbeat_ms = 50;
    mo.heartbeat_interval_ms = 200;
    mo.dead_after_ms = 10000;
    mo.peers = join_only ? NULL : peers;
    mo.npeers = join_only ? 0 : 2;
    mo.join_only = join_only;
    mo.forward = tn_control_forward;
    mo.forward_arg = fx.ctl[id];
    if (tn_meta_open(&fx.loop, &mo, &fx.m[id], err, sizeof(err)) != 0)
        fail_msg("tn_meta_open %llu: %s", (unsigned long long)id, err);
    tn_control_start(fx.ctl[id], fx.m[id], fx.rpc[id]);
}

/* Nodes 1 and 2 agree on a leader, are caught up, and know each other's
 * API address. */
static bool two_settled(void *arg)
{
    (void)arg;
    uint64_t agreed = 0;
    for (uint64_t i = 1; i <= 2; i++) {
        uint64_t id = 0;
        const char *api = "";
        if (!tn_meta_ready(fx.m[i]) || !tn_meta_caught_up(fx.m[i]) ||
            tn_meta_leader(fx.m[i], &id, &api) != 0 || api[0] == '\0')
            return false;
        if (agreed != 0 && id != agreed)
            return false;
        agreed = id;
        for (uint64_t k = 1; k <= 2; k++) {
            const tn_meta_member_t *mem = tn_meta_member_find(tn_meta_state(fx.m[i]), k);
            if (mem == NULL || strcmp(mem->api_addr, fx.api[k]) != 0)
                return false;
        }
    }
    fx.leader = agreed;
    fx.follower = agreed == 1 ? 2 : 1;
    return true;
}

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN); /* libraft writes to peers that closed */
    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    fx.dir = tu_tempdir();
    for (uint64_t i = 1; i <= NNODES; i++) {
        snprintf(fx.mdir[i], sizeof(fx.mdir[i]), "%s/meta%llu", fx.dir, (unsigned long long)i);
        snprintf(fx.raft[i], sizeof(fx.raft[i]), "127.0.0.1:%d", tu_free_port(true));
        snprintf(fx.api[i], sizeof(fx.api[i]), "127.0.0.1:%d", tu_free_port(true));
    }
    node_open(1, false, NULL, 0);
    node_open(2, false, NULL, 0);
    assert_true(run_until(two_settled, NULL));
    assert_true(tn_control_admitted(fx.ctl[1])); /* no join list */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmrf(fx.dir);
    free(fx.dir);
    for (size_t i = 0; i < fx.ntook; i++)
        free(fx.took[i].fields);
    free(fx.took);
    return 0;
}

static uint64_t requests_in(uint64_t id)
{
    tn_rpc_test_stats_t st;
    tn_rpc_test_stats(fx.rpc[id], &st);
    return st.requests_in;
}

/* --- tests --------------------------------------------------------------------------- */

typedef struct {
    int done;
    int status;
} answer_t;

static void on_proposed(tn_meta_req_t *req, int status)
{
    answer_t *a = req->data;
    a->done++;
    a->status = status;
}

static bool answered(void *arg)
{
    return ((answer_t *)arg)->done > 0;
}

/* How many requests for op node's control handlers took from took_from on. */
static size_t took_n(uint64_t node, uint8_t op)
{
    size_t n = 0;
    for (size_t i = fx.took_from; i < fx.ntook; i++)
        n += fx.took[i].node == node && fx.took[i].op == op;
    return n;
}

/* Propose a topic of that name on the follower and wait for its answer. */
static void propose_on_follower(const char *name, tn_meta_req_t *req, answer_t *a)
{
    tn_meta_cmd_t t = topic_cmd(name, true);
    a->done = 0;
    a->status = -1;
    memset(req, 0, sizeof(*req));
    req->data = a;
    assert_int_equal(tn_meta_propose(fx.m[fx.follower], req, &t, on_proposed), 0);
    assert_true(run_until(answered, a));
}

/* propose_on_follower of name (then name1, name2, ... into out) from a
 * fresh count of the requests taken, made again under the next name when
 * a leader election happened meanwhile: on a loaded machine the two nodes
 * can stall past the 300 ms election timeout, the leader steps down, and
 * a proposal forwarded to it is rightly sent again, which the exact counts
 * test_forward checks do not allow for (seen once in CI's rehearsal). */
static void propose_in_one_term(const char *name, char out[32], tn_meta_req_t *req, answer_t *a)
{
    for (int i = 0;; i++) {
        assert_true(run_until(two_settled, NULL));
        uint64_t term = tn_meta_term(fx.m[fx.leader]);
        fx.took_from = fx.ntook;
        if (i == 0)
            snprintf(out, 32, "%s", name);
        else
            snprintf(out, 32, "%s%d", name, i);
        propose_on_follower(out, req, a);
        if (tn_meta_term(fx.m[1]) == term && tn_meta_term(fx.m[2]) == term)
            return;
        assert_true(i < 5);
    }
}

/* A proposal made on the follower goes to the leader over node RPC
 * (tn_control_forward, META_PROPOSE_AT) and the follower's callback gets
 * the leader's state-machine answer, with the entry's index, once its
 * own replica has applied it (the read-back). */
static void test_forward(void **state)
{
    (void)state;
    uint64_t before[3] = {0, requests_in(1), requests_in(2)};
    answer_t a;
    tn_meta_req_t req;
    char name[32];
    propose_in_one_term("orders", name, &req, &a);
    assert_int_equal(a.status, 0);
    assert_true(requests_in(fx.leader) > before[fx.leader]); /* it went over RPC */
    assert_non_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.leader]), name));
    assert_non_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.follower]), name));
    assert_int_equal(took_n(fx.leader, TN_OP_META_PROPOSE_AT), 1);
    assert_int_equal(took_n(fx.leader, TN_OP_META_PROPOSE), 0); /* no no-op confirmation */
    assert_true(req.index > 0);
    assert_true(tn_meta_applied_index(fx.m[fx.follower]) >= req.index);

    propose_on_follower(name, &req, &a);
    assert_int_equal(a.status, UV_EEXIST); /* the leader's answer to an if_absent put */
}

/* A leader of an older build (META_PROPOSE_AT answered 400 "unsupported
 * rpc operation"): the follower sends the command again as META_PROPOSE,
 * whose answer names no index, and confirms with a no-op of its own
 * (a second META_PROPOSE) before it answers; the next proposal to that
 * leader goes as META_PROPOSE at once. */
static void test_forward_to_older_leader(void **state)
{
    (void)state;
    fx.old[fx.leader] = true;
    fx.took_from = fx.ntook;
    answer_t a;
    tn_meta_req_t req;
    propose_on_follower("legacy", &req, &a);
    assert_int_equal(a.status, 0);
    assert_int_equal(req.index, 0);
    assert_non_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.follower]), "legacy"));
    assert_int_equal(took_n(fx.leader, TN_OP_META_PROPOSE_AT), 1);
    assert_true(took(fx.leader, TN_OP_META_PROPOSE, NULL, 0));
    assert_true(took_n(fx.leader, TN_OP_META_PROPOSE) >= 2); /* the command, the no-op */

    propose_on_follower("legacy2", &req, &a);
    assert_int_equal(a.status, 0);
    assert_non_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.follower]), "legacy2"));
    assert_int_equal(took_n(fx.leader, TN_OP_META_PROPOSE_AT), 1); /* not asked again */
    fx.old[fx.leader] = false;
}

/* META_PROPOSE straight to a follower: 421 with the leader's API address;
 * malformed payloads: 400; a good one on the leader: 200 with the answer. */
static void test_meta_propose(void **state)
{
    (void)state;
    tn_meta_cmd_t t = topic_cmd("direct", true);
    tn_buf_t cmd, p;
    tn_buf_init(&cmd);
    tn_buf_init(&p);
    assert_int_equal(tn_meta_cmd_encode(&t, &cmd), 0);
    assert_int_equal(tn_wire_put_bytes(&p, tn_buf_data(&cmd), tn_buf_size(&cmd)), 0);
    res_t r;

    call(fx.leader, fx.follower, TN_OP_META_PROPOSE, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 421);
    assert_string_equal(r.body, fx.api[fx.leader]);
    assert_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.leader]), "direct"));

    /* Short: the byte field's length says more than there is. */
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&p), 3, &r);
    assert_int_equal(r.http, 400);
    assert_non_null(strstr(r.body, "unsupported rpc operation"));
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&p), tn_buf_size(&p) - 1, &r);
    assert_int_equal(r.http, 400);
    /* A trailing byte after the field. */
    tn_buf_t trail;
    tn_buf_init(&trail);
    assert_int_equal(tn_buf_append(&trail, tn_buf_data(&p), tn_buf_size(&p)), 0);
    assert_int_equal(tn_buf_append(&trail, "x", 1), 0);
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&trail), tn_buf_size(&trail), &r);
    assert_int_equal(r.http, 400);
    assert_non_null(strstr(r.body, "unsupported rpc operation"));
    tn_buf_fini(&trail);
    /* A well-framed field holding a command that does not decode. */
    tn_buf_t bad;
    tn_buf_init(&bad);
    assert_int_equal(tn_wire_put_bytes(&bad, tn_buf_data(&cmd), tn_buf_size(&cmd) - 8), 0);
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&bad), tn_buf_size(&bad), &r);
    assert_int_equal(r.http, 400);
    assert_non_null(strstr(r.body, "malformed metastore command"));
    tn_buf_fini(&bad);
    assert_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.leader]), "direct"));

    /* The same command on the leader: 200 with the answer as [4]. */
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 200);
    assert_int_equal(r.blen, 4);
    tn_wire_in_t in;
    int32_t v = -1;
    tn_wire_in_init(&in, r.body, r.blen);
    assert_int_equal(tn_wire_get_i32(&in, &v), 0);
    assert_int_equal(v, 0);
    assert_non_null(tn_meta_topic_find(tn_meta_state(fx.m[fx.leader]), "direct"));

    /* META_PROPOSE_AT: the answer and the entry's index, [4] + [8]. */
    t = topic_cmd("direct-at", true);
    tn_buf_reset(&cmd);
    tn_buf_reset(&p);
    assert_int_equal(tn_meta_cmd_encode(&t, &cmd), 0);
    assert_int_equal(tn_wire_put_bytes(&p, tn_buf_data(&cmd), tn_buf_size(&cmd)), 0);
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE_AT, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 200);
    uint64_t index = 0;
    assert_int_equal(tn_wire_propose_at_reply_decode(r.body, r.blen, &v, &index), 0);
    assert_int_equal(v, 0);
    assert_true(index > 0 && index <= tn_meta_applied_index(fx.m[fx.leader]));
    call(fx.follower, fx.leader, TN_OP_META_PROPOSE_AT, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 200);
    uint64_t again = 0;
    assert_int_equal(tn_wire_propose_at_reply_decode(r.body, r.blen, &v, &again), 0);
    assert_int_equal(v, UV_EEXIST); /* applied too: a later entry */
    assert_true(again > index);
    call(fx.leader, fx.follower, TN_OP_META_PROPOSE_AT, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 421);
    tn_buf_fini(&p);
    tn_buf_fini(&cmd);
}

/* LEADER_INDEX: 200 with [8] >= the leader's applied index on the leader;
 * 421 with the leader's address on a follower; 400 with a payload. */
static void test_leader_index(void **state)
{
    (void)state;
    uint64_t applied = tn_meta_applied_index(fx.m[fx.leader]);
    assert_true(applied > 0);
    res_t r;
    call(fx.follower, fx.leader, TN_OP_LEADER_INDEX, NULL, 0, &r);
    assert_int_equal(r.http, 200);
    assert_int_equal(r.blen, 8);
    tn_wire_in_t in;
    uint64_t idx = 0;
    tn_wire_in_init(&in, r.body, r.blen);
    assert_int_equal(tn_wire_get_u64(&in, &idx), 0);
    assert_true(idx >= applied);

    call(fx.leader, fx.follower, TN_OP_LEADER_INDEX, NULL, 0, &r);
    assert_int_equal(r.http, 421);
    assert_string_equal(r.body, fx.api[fx.leader]);

    call(fx.follower, fx.leader, TN_OP_LEADER_INDEX, "x", 1, &r);
    assert_int_equal(r.http, 400);
}

/* NODE_STATUS: JSON naming the node and the leader. */
static void test_node_status(void **state)
{
    (void)state;
    char want[64];
    for (uint64_t id = 1; id <= 2; id++) {
        res_t r;
        call(id == 1 ? 2 : 1, id, TN_OP_NODE_STATUS, NULL, 0, &r);
        assert_int_equal(r.http, 200);
        assert_true(r.body[0] == '{' && r.body[r.blen - 1] == '}');
        snprintf(want, sizeof(want), "\"node_id\":\"%llu\"", (unsigned long long)id);
        assert_non_null(strstr(r.body, want));
        snprintf(want, sizeof(want), "\"leader\":\"%llu\"", (unsigned long long)fx.leader);
        assert_non_null(strstr(r.body, want));
        assert_non_null(strstr(r.body, "\"ready\":true"));
    }
}

static bool node3_admitted(void *arg)
{
    (void)arg;
    return tn_control_admitted(fx.ctl[3]) && tn_meta_ready(fx.m[3]) && tn_meta_caught_up(fx.m[3]);
}

/* Nodes 1..3 agree on a leader and are caught up: fx.leader, a follower
 * (fx.follower) and the other (fx.third) are set. */
static bool three_settled(void *arg)
{
    (void)arg;
    uint64_t agreed = 0;
    for (uint64_t i = 1; i <= NNODES; i++) {
        uint64_t id = 0;
        const char *api = "";
        if (!tn_meta_ready(fx.m[i]) || !tn_meta_caught_up(fx.m[i]) ||
            tn_meta_leader(fx.m[i], &id, &api) != 0 || api[0] == '\0' ||
            (agreed != 0 && id != agreed))
            return false;
        agreed = id;
    }
    fx.leader = agreed;
    fx.follower = agreed == 1 ? 2 : 1;
    fx.third = NNODES * (NNODES + 1) / 2 - fx.leader - fx.follower;
    return true;
}

/* Whether node id has led, without a break, since it led in term. */
static bool leads_since(uint64_t id, uint64_t term)
{
    uint64_t lid = 0;
    const char *api = "";
    return tn_meta_leader(fx.m[id], &lid, &api) == 0 && lid == id && tn_meta_term(fx.m[id]) == term;
}

/* Whether body is an API address of a member (a 421's body). */
static bool a_member_api(const char *body)
{
    for (uint64_t i = 1; i <= NNODES; i++)
        if (strcmp(body, fx.api[i]) == 0)
            return true;
    return false;
}

/* JOIN: bad fields are 400; a join_only node asking the others is
 * admitted and becomes a voter (caught up implies a voter). */
static void test_join(void **state)
{
    (void)state;
    res_t r;
    tn_buf_t p;
    tn_buf_init(&p);
    assert_int_equal(tn_wire_put_u64(&p, 0), 0);
    assert_int_equal(tn_wire_put_str(&p, "127.0.0.1:1"), 0);
    assert_int_equal(tn_wire_put_str(&p, "127.0.0.1:2"), 0);
    call(fx.follower, fx.leader, TN_OP_JOIN, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 400);
    assert_non_null(strstr(r.body, "node id >= 1"));
    tn_buf_reset(&p);
    assert_int_equal(tn_wire_put_u64(&p, 7), 0);
    assert_int_equal(tn_wire_put_str(&p, ""), 0);
    assert_int_equal(tn_wire_put_str(&p, "127.0.0.1:2"), 0);
    call(fx.follower, fx.leader, TN_OP_JOIN, tn_buf_data(&p), tn_buf_size(&p), &r);
    assert_int_equal(r.http, 400);
    assert_non_null(strstr(r.body, "raft address"));
    /* A truncated payload. */
    call(fx.follower, fx.leader, TN_OP_JOIN, tn_buf_data(&p), 5, &r);
    assert_int_equal(r.http, 400);
    tn_buf_fini(&p);

    /* The follower first in the join list: it passes the JOIN on to the
     * leader (the loop asks both at once). */
    const char *join[2] = {fx.api[fx.follower], fx.api[fx.leader]};
    node_open(3, true, join, 2);
    assert_false(tn_control_admitted(fx.ctl[3]));
    assert_true(run_until(node3_admitted, NULL));
    /* Node 3 follows the leader the others follow (not necessarily the
     * one setup found: on a loaded machine the leadership may move). */
    assert_true(run_until(three_settled, NULL));
}

typedef struct {
    int closed;
    int want;
} closes_t;

static void on_one_closed(void *arg)
{
    ((closes_t *)arg)->closed++;
}

typedef struct {
    closes_t *cl;
    uint64_t node;
} ctl_close_t;

/* A node's control plane is freed: its handlers must not be called. */
static void on_ctl_closed(void *arg)
{
    ctl_close_t *x = arg;
    fx.ctl_freed[x->node] = true;
    on_one_closed(x->cl);
}

static bool all_closed(void *arg)
{
    closes_t *c = arg;
    return c->closed >= c->want;
}

static bool three_done(void *arg)
{
    res_t **r = arg;
    return r[0]->done && r[1]->done && r[2]->done;
}

/* A JOIN payload for id at raft (nothing listens there). */
static void join_payload(tn_buf_t *b, uint64_t id, const char *raft)
{
    tn_buf_init(b);
    assert_int_equal(tn_wire_put_u64(b, id), 0);
    assert_int_equal(tn_wire_put_str(b, raft), 0);
    assert_int_equal(tn_wire_put_str(b, "127.0.0.1:9"), 0);
}

/* Everything closes with work in flight: on the leader a JOIN it holds (a
 * spare that never catches up), a META_PROPOSE, a LEADER_INDEX and a
 * proposal forwarded from a follower; on the third node the join loop of
 * another control plane (node 9) whose JOIN is out. The control planes
 * close first: the leader answers what it holds 503 at once, the
 * follower's forwarded proposal ends TN_ECLOSED; then the metastores and
 * the RPC endpoints close and uv_loop_close() == 0 (under ASan nothing
 * leaks or is used after its free).
 *
 * One process runs every node on one loop: a stall of the loop longer than
 * the election timeout (a loaded machine, ASan) makes the leader step down
 * (libraft's check that a quorum answered) before the close. Its held JOIN
 * is then answered as a leader that lost its leadership answers one (503
 * "no metastore leader is known", or 421 and the new leader's address) or,
 * when the close comes first, 503 "closing"; and the proposals get a
 * leader change's answers (their own tests' matter), so then only that
 * each is answered once is checked here. */
static void test_close_in_flight(void **state)
{
    (void)state;
    assert_true(run_until(three_settled, NULL));
    uint64_t term = tn_meta_term(fx.m[fx.leader]);
    uint64_t from = fx.third; /* neither the leader nor the follower */
    fx.took_from = fx.ntook;
    tn_meta_cmd_t t = topic_cmd("inflight", true);
    tn_buf_t cmd, p, j9, j10;
    tn_buf_init(&cmd);
    tn_buf_init(&p);
    assert_int_equal(tn_meta_cmd_encode(&t, &cmd), 0);
    assert_int_equal(tn_wire_put_bytes(&p, tn_buf_data(&cmd), tn_buf_size(&cmd)), 0);
    char raft10[32];
    snprintf(raft10, sizeof(raft10), "127.0.0.1:%d", tu_free_port(true));
    join_payload(&j10, 10, raft10);
    res_t join, propose, index;
    memset(&join, 0, sizeof(join));
    memset(&propose, 0, sizeof(propose));
    memset(&index, 0, sizeof(index));
    assert_int_equal(tn_rpc_call(fx.rpc[from], fx.api[fx.leader], TN_OP_JOIN, tn_buf_data(&j10),
                                 tn_buf_size(&j10), 20000, on_res, &join, NULL),
                     0);
    assert_int_equal(tn_rpc_call(fx.rpc[from], fx.api[fx.leader], TN_OP_META_PROPOSE,
                                 tn_buf_data(&p), tn_buf_size(&p), 20000, on_res, &propose, NULL),
                     0);
    assert_int_equal(tn_rpc_call(fx.rpc[from], fx.api[fx.leader], TN_OP_LEADER_INDEX, NULL, 0,
                                 20000, on_res, &index, NULL),
                     0);

    /* Node 9: never started, nothing listens at its Raft address; its join
     * loop runs on the third node's endpoint. */
    char raft9[32];
    snprintf(raft9, sizeof(raft9), "127.0.0.1:%d", tu_free_port(true));
    join_payload(&j9, 9, raft9);
    const char *join9[1] = {fx.api[fx.leader]};
    tn_control_opts_t co;
    memset(&co, 0, sizeof(co));
    co.node_id = 9;
    co.raft_addr = raft9;
    co.api_addr = "127.0.0.1:9";
    co.join = join9;
    co.njoin = 1;
    co.join_retry_ms = 100000;
    tn_control_t *c9 = NULL;
    assert_int_equal(tn_control_new(&fx.loop, &co, &c9), 0);
    tn_control_start(c9, fx.m[from], fx.rpc[from]);
    assert_false(tn_control_admitted(c9));

    /* The leader's handlers have all four requests. (Not a count of the
     * requests its endpoint took: the other nodes forward their member
     * registrations to it all along.) */
    int64_t deadline = tn_now_mono_ms() + GUARD_MS;
    while (!(took(fx.leader, TN_OP_JOIN, tn_buf_data(&j10), tn_buf_size(&j10)) &&
             took(fx.leader, TN_OP_JOIN, tn_buf_data(&j9), tn_buf_size(&j9)) &&
             took(fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&p), tn_buf_size(&p)) &&
             took(fx.leader, TN_OP_LEADER_INDEX, NULL, 0)) &&
           tn_now_mono_ms() < deadline)
        uv_run(&fx.loop, UV_RUN_ONCE);
    assert_true(took(fx.leader, TN_OP_JOIN, tn_buf_data(&j10), tn_buf_size(&j10)));
    assert_true(took(fx.leader, TN_OP_JOIN, tn_buf_data(&j9), tn_buf_size(&j9)));
    assert_true(took(fx.leader, TN_OP_META_PROPOSE, tn_buf_data(&p), tn_buf_size(&p)));
    assert_true(took(fx.leader, TN_OP_LEADER_INDEX, NULL, 0));
    if (leads_since(fx.leader, term))
        assert_false(join.done); /* held: node 10 never catches up */
    tn_buf_fini(&j9);
    tn_buf_fini(&j10);
    tn_buf_fini(&p);
    tn_buf_fini(&cmd);

    /* A proposal on the follower, forwarded: its call is out once the
     * leader took the request, and its answer needs a commit first. */
    answer_t a = {0, -1};
    tn_meta_req_t req;
    memset(&req, 0, sizeof(req));
    req.data = &a;
    tn_meta_cmd_t f = topic_cmd("forwarded", true);
    assert_int_equal(tn_meta_propose(fx.m[fx.follower], &req, &f, on_proposed), 0);
    while (!took(0, TN_OP_META_PROPOSE, "forwarded", 0) && a.done == 0 &&
           tn_now_mono_ms() < deadline)
        uv_run(&fx.loop, UV_RUN_ONCE);

    /* The control planes close (the follower's first), then the
     * metastores; the RPC endpoints stay open until the answers are in. */
    bool led = leads_since(fx.leader, term); /* up to the close: nothing runs between */
    if (led) {
        assert_true(took(fx.leader, TN_OP_META_PROPOSE, "forwarded", 0));
        assert_int_equal(a.done, 0);
    } else {
        assert_true(took(0, TN_OP_META_PROPOSE, "forwarded", 0) || a.done > 0);
    }
    closes_t cl = {0, 0};
    tn_control_close(c9, on_one_closed, &cl);
    cl.want++;
    uint64_t order[NNODES] = {fx.follower, from, fx.leader};
    ctl_close_t cc[NNODES];
    for (int i = 0; i < NNODES; i++) {
        cc[i].cl = &cl;
        cc[i].node = order[i];
        tn_control_close(fx.ctl[order[i]], on_ctl_closed, &cc[i]);
        cl.want++;
    }
    for (uint64_t i = 1; i <= NNODES; i++) {
        tn_meta_close(fx.m[i], on_one_closed, &cl);
        cl.want++;
    }
    res_t *three[3] = {&join, &propose, &index};
    assert_true(run_until(three_done, three));
    assert_true(run_until(answered, &a));
    assert_int_equal(join.status, 0);
    assert_int_equal(propose.status, 0);
    assert_int_equal(index.status, 0);
    assert_int_equal(a.done, 1);
    if (led) {
        assert_int_equal(join.http, 503);
        if (strstr(join.body, "closing") == NULL)
            fail_msg("the held JOIN was answered %d: %s", join.http, join.body);
        /* These two may have been answered before the close. */
        assert_true(propose.http == 200 || propose.http == 503);
        assert_true(index.http == 200 || index.http == 503);
        assert_int_equal(a.status, TN_ECLOSED);
    } else {
        fprintf(stderr,
                "note: node %llu lost its leadership before the close (term %llu); the held "
                "JOIN was answered %d: %s\n",
                (unsigned long long)fx.leader, (unsigned long long)term, join.http, join.body);
        if (!(join.http == 503 && (strstr(join.body, "closing") != NULL ||
                                   strstr(join.body, "no metastore leader is known") != NULL)) &&
            !(join.http == 421 && a_member_api(join.body)))
            fail_msg("the held JOIN was answered %d: %s", join.http, join.body);
    }

    for (uint64_t i = 1; i <= NNODES; i++) {
        tn_rpc_close(fx.rpc[i], on_one_closed, &cl);
        cl.want++;
    }
    assert_true(run_until(all_closed, &cl));
    assert_int_equal(cl.closed, cl.want);
    tu_loop_fini(&fx.loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),         cmocka_unit_test(test_forward_to_older_leader),
        cmocka_unit_test(test_meta_propose),    cmocka_unit_test(test_leader_index),
        cmocka_unit_test(test_node_status),     cmocka_unit_test(test_join),
        cmocka_unit_test(test_close_in_flight),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
