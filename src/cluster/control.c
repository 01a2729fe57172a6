/* The cluster control plane on node RPC. See control.h. */
#include "core/platform.h"

#include "cluster/control.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define DEFAULT_JOIN_RETRY_MS 2000
#define DEFAULT_FORWARD_MS    10000
/* A JOIN may wait for the joiner to catch up before it is a voter. */
#define JOIN_CALL_MS 10000

#define JSON "application/json"

typedef struct join_call_s join_call_t;

struct tn_control_s {
    uv_loop_t *loop;
    tn_meta_t *meta; /* borrowed, from tn_control_start */
    tn_rpc_t *rpc;   /* borrowed */
    uint64_t node_id;
    char raft_addr[TN_META_ADDR_MAX + 1];
    char api_addr[TN_META_ADDR_MAX + 1];
    char **join;
    size_t njoin;
    uint64_t join_retry_ms;
    uint64_t forward_ms;
    bool admitted;
    bool closing;
    bool timer_closed;
    unsigned join_inflight;
    unsigned refs; /* join calls and handlers that still use c */
    uv_timer_t join_timer;
    tn_rpc_handler_t handlers[4];
    void (*close_cb)(void *arg);
    void *close_arg;
};

struct join_call_s {
    tn_control_t *c;
    char addr[TN_META_ADDR_MAX + 1];
};

static void control_free(tn_control_t *c);

/* A join call or a handler's metastore request ended. */
static void unref(tn_control_t *c)
{
    c->refs--;
    if (c->refs == 0 && c->timer_closed)
        control_free(c);
}

/* --- replies -------------------------------------------------------------------- */

static void reply_error(tn_rpc_req_t *req, uint16_t status, const char *msg)
{
    char body[256];
    int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", msg);
    tn_rpc_reply(req, status, JSON, body, (size_t)n);
}

/* 421 with the leader's API address as the body, or 503 with none known. */
static void reply_not_leader(tn_control_t *c, tn_rpc_req_t *req)
{
    uint64_t id = 0;
    const char *api = "";
    if (c->meta != NULL && tn_meta_leader(c->meta, &id, &api) == 0 && api[0] != '\0') {
        tn_rpc_reply(req, 421, "text/plain", api, strlen(api));
        return;
    }
    reply_error(req, 503, "no metastore leader is known");
}

static void reply_int(tn_rpc_req_t *req, int32_t v)
{
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_put_i32(&b, v) != 0) {
        tn_buf_fini(&b);
        reply_error(req, 503, "out of memory");
        return;
    }
    tn_rpc_reply(req, 200, "application/x-tern-int", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* --- META_PROPOSE: a follower's proposal, on the leader ---------------------------- */

typedef struct {
    tn_meta_req_t mreq;
    tn_control_t *c;
    tn_rpc_req_t *req;
} proposal_t;

static void on_proposed(tn_meta_req_t *mreq, int status)
{
    proposal_t *p = mreq->data;
    tn_control_t *c = p->c;
    tn_rpc_req_t *req = p->req;
    tn_free(p);
    if (status == TN_ENOTLEADER)
        reply_not_leader(c, req);
    else if (status == TN_ECLOSED || status == TN_ENOLEADER)
        reply_error(req, 503, tn_strerror(status));
    else
        reply_int(req, status); /* the state machine's answer */
    unref(c);
}

static void on_meta_propose(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_control_t *c = arg;
    tn_wire_in_t in;
    const uint8_t *cmd = NULL;
    size_t clen = 0;
    tn_wire_in_init(&in, payload, len);
    tn_wire_get_bytes(&in, TN_META_MAX_CMD, &cmd, &clen);
    if (tn_wire_end(&in) != 0) {
        reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    if (c->meta == NULL || c->closing) {
        reply_error(req, 503, "the metastore is not open");
        return;
    }
    proposal_t *p = tn_calloc(1, sizeof(*p));
    if (p == NULL) {
        reply_error(req, 503, "out of memory");
        return;
    }
    p->c = c;
    p->req = req;
    p->mreq.data = p;
    int rc = tn_meta_propose_encoded(c->meta, &p->mreq, cmd, clen, on_proposed);
    if (rc == 0) {
        c->refs++;
        return;
    }
    tn_free(p);
    if (rc == TN_ENOTLEADER)
        reply_not_leader(c, req);
    else if (rc == TN_ECORRUPT)
        reply_error(req, 400, "malformed metastore command");
    else if (rc == UV_ENOTSUP)
        reply_error(req, 400, "unsupported metastore command");
    else
        reply_error(req, 503, tn_strerror(rc));
}

/* --- JOIN, on the leader ------------------------------------------------------------ */

typedef struct {
    tn_control_t *c;
    tn_rpc_req_t *req;
    uint64_t id;
} joining_t;

static void on_joined(void *arg, int status)
{
    joining_t *j = arg;
    tn_control_t *c = j->c;
    tn_rpc_req_t *req = j->req;
    uint64_t id = j->id;
    tn_free(j);
    switch (status) {
    case 0:
        TN_LOG(TN_LOG_NOTICE, "cluster: node %" PRIu64 " is a voter", id);
        tn_rpc_reply(req, 200, JSON, "{}", 2);
        break;
    case TN_EIDTAKEN:
        reply_error(req, 409, "a member with this id is in the cluster at another address");
        break;
    case UV_EADDRINUSE:
        reply_error(req, 409, "another member has this raft address");
        break;
    case TN_ENOTLEADER:
        reply_not_leader(c, req);
        break;
    default:
        reply_error(req, 503, tn_strerror(status));
        break;
    }
    unref(c);
}

static void on_join(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_control_t *c = arg;
    tn_wire_in_t in;
    uint64_t id = 0;
    char raft[TN_META_ADDR_MAX + 1];
    char api[TN_META_ADDR_MAX + 1];
    tn_wire_in_init(&in, payload, len);
    tn_wire_get_u64(&in, &id);
    tn_wire_get_str(&in, TN_META_ADDR_MAX, raft);
    tn_wire_get_str(&in, TN_META_ADDR_MAX, api);
    if (tn_wire_end(&in) != 0) {
        reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    if (c->meta == NULL || c->closing) {
        reply_error(req, 503, "the metastore is not open");
        return;
    }
    joining_t *j = tn_calloc(1, sizeof(*j));
    if (j == NULL) {
        reply_error(req, 503, "out of memory");
        return;
    }
    j->c = c;
    j->req = req;
    j->id = id;
    int rc = tn_meta_join(c->meta, id, raft, on_joined, j);
    if (rc == 0) {
        c->refs++;
        TN_LOG(TN_LOG_NOTICE, "cluster: node %" PRIu64 " (raft %s, api %s) asks to join", id, raft,
               api);
        return;
    }
    tn_free(j);
    if (rc == TN_ENOTLEADER)
        reply_not_leader(c, req);
    else if (rc == UV_EINVAL)
        reply_error(req, 400, "a join needs a node id >= 1 and a raft address host:port");
    else
        reply_error(req, 503, tn_strerror(rc));
}

/* --- LEADER_INDEX and NODE_STATUS ------------------------------------------------- */

typedef struct {
    tn_control_t *c;
    tn_rpc_req_t *req;
} confirm_t;

static void on_confirmed(void *arg, int status)
{
    confirm_t *k = arg;
    tn_control_t *c = k->c;
    tn_rpc_req_t *req = k->req;
    tn_free(k);
    if (status != 0) {
        if (status == TN_ENOTLEADER)
            reply_not_leader(c, req);
        else
            reply_error(req, 503, tn_strerror(status));
        unref(c);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_put_u64(&b, tn_meta_applied_index(c->meta)) != 0) {
        tn_buf_fini(&b);
        reply_error(req, 503, "out of memory");
        unref(c);
        return;
    }
    tn_rpc_reply(req, 200, "application/x-tern-int", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
    unref(c);
}

static void on_leader_index(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_control_t *c = arg;
    if (len != 0) {
        reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    uint64_t id = 0;
    const char *api = "";
    if (c->meta == NULL || c->closing || tn_meta_leader(c->meta, &id, &api) != 0 ||
        id != c->node_id) {
        reply_not_leader(c, req);
        return;
    }
    confirm_t *k = tn_calloc(1, sizeof(*k));
    if (k == NULL) {
        reply_error(req, 503, "out of memory");
        return;
    }
    k->c = c;
    k->req = req;
    int rc = tn_meta_confirm(c->meta, on_confirmed, k);
    if (rc != 0) {
        tn_free(k);
        reply_error(req, 503, tn_strerror(rc));
        return;
    }
    c->refs++;
}

static void on_node_status(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_control_t *c = arg;
    if (len != 0) {
        reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    uint64_t leader = 0;
    const char *api = "";
    bool open = c->meta != NULL && !c->closing;
    if (open)
        tn_meta_leader(c->meta, &leader, &api);
    char body[256];
    int n = snprintf(body, sizeof(body),
                     "{\"node_id\":\"%" PRIu64 "\",\"leader\":\"%" PRIu64
                     "\",\"ready\":%s,\"caught_up\":%s,\"applied\":%" PRIu64 "}",
                     c->node_id, leader, open && tn_meta_ready(c->meta) ? "true" : "false",
                     open && tn_meta_caught_up(c->meta) ? "true" : "false",
                     open ? tn_meta_applied_index(c->meta) : 0);
    tn_rpc_reply(req, 200, JSON, body, (size_t)n);
}

/* --- the forward hook, on a follower --------------------------------------------- */

typedef struct {
    tn_meta_forward_done done;
    void *done_arg;
} forward_t;

static void on_forward_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    forward_t *f = arg;
    tn_meta_forward_done done = f->done;
    void *done_arg = f->done_arg;
    tn_free(f);
    if (status != 0) {
        /* Not sent again: the leader may have applied it. */
        TN_LOG_RL(TN_LOG_WARN, 10000, "cluster: a proposal forwarded to the leader failed: %s",
                  err);
        done(done_arg, status);
        return;
    }
    if (reply->status == 200) {
        tn_wire_in_t in;
        int32_t rc = 0;
        tn_wire_in_init(&in, reply->body, reply->body_len);
        tn_wire_get_i32(&in, &rc);
        done(done_arg, tn_wire_end(&in) == 0 ? rc : TN_EPROTO);
    } else if (reply->status == 421) {
        done(done_arg, TN_ENOTLEADER);
    } else if (reply->status == 503) {
        done(done_arg, TN_ENOLEADER);
    } else if (reply->status == 400) {
        done(done_arg, UV_ENOTSUP); /* a leader of an older build */
    } else {
        done(done_arg, TN_EFAILED);
    }
}

int tn_control_forward(void *arg, uint64_t leader_id, const char *leader_api_addr, const void *cmd,
                       size_t len, tn_meta_forward_done done, void *done_arg)
{
    tn_control_t *c = arg;
    if (c->rpc == NULL || c->closing)
        return TN_ECLOSED;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_put_bytes(&b, cmd, len);
    forward_t *f = rc == 0 ? tn_calloc(1, sizeof(*f)) : NULL;
    if (f == NULL) {
        tn_buf_fini(&b);
        return UV_ENOMEM;
    }
    f->done = done;
    f->done_arg = done_arg;
    rc = tn_rpc_call(c->rpc, leader_api_addr, TN_OP_META_PROPOSE, tn_buf_data(&b), tn_buf_size(&b),
                     c->forward_ms, on_forward_reply, f, NULL);
    tn_buf_fini(&b);
    if (rc != 0)
        tn_free(f);
    (void)leader_id;
    return rc;
}

/* --- the join loop ----------------------------------------------------------------- */

static void send_join(tn_control_t *c, const char *addr);

static void on_join_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    join_call_t *jc = arg;
    tn_control_t *c = jc->c;
    c->join_inflight--;
    if (c->closing || c->admitted) {
        tn_free(jc);
        unref(c);
        return;
    }
    if (status != 0) {
        TN_LOG_RL(TN_LOG_WARN, 10000, "cluster: join through %s: %s", jc->addr, err);
    } else if (reply->status == 200) {
        c->admitted = true;
        uv_timer_stop(&c->join_timer);
        TN_LOG(TN_LOG_NOTICE, "cluster: admitted through %s; catching up", jc->addr);
    } else if (reply->status == 421 && reply->body_len > 0 && reply->body_len <= TN_META_ADDR_MAX) {
        char leader[TN_META_ADDR_MAX + 1];
        memcpy(leader, reply->body, reply->body_len);
        leader[reply->body_len] = '\0';
        if (strcmp(leader, jc->addr) != 0)
            send_join(c, leader);
    } else {
        TN_LOG_RL(TN_LOG_WARN, 10000, "cluster: join through %s refused (%u): %.*s", jc->addr,
                  reply->status, (int)(reply->body_len > 200 ? 200 : reply->body_len),
                  (const char *)reply->body);
    }
    tn_free(jc);
    unref(c);
}

static void send_join(tn_control_t *c, const char *addr)
{
    join_call_t *jc = tn_calloc(1, sizeof(*jc));
    if (jc == NULL)
        return;
    jc->c = c;
    snprintf(jc->addr, sizeof(jc->addr), "%s", addr);
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_put_u64(&b, c->node_id);
    if (rc == 0)
        rc = tn_wire_put_str(&b, c->raft_addr);
    if (rc == 0)
        rc = tn_wire_put_str(&b, c->api_addr);
    if (rc == 0)
        rc = tn_rpc_call(c->rpc, jc->addr, TN_OP_JOIN, tn_buf_data(&b), tn_buf_size(&b),
                         JOIN_CALL_MS, on_join_reply, jc, NULL);
    tn_buf_fini(&b);
    if (rc != 0) {
        if (rc != UV_ECONNREFUSED) /* in its dial backoff: the next sweep asks again */
            TN_LOG_RL(TN_LOG_WARN, 10000, "cluster: cannot ask %s to join: %s", jc->addr,
                      tn_strerror(rc));
        tn_free(jc);
        return;
    }
    c->join_inflight++;
    c->refs++;
}

static void on_join_tick(uv_timer_t *t)
{
    tn_control_t *c = t->data;
    if (c->closing || c->admitted || c->join_inflight > 0)
        return;
    for (size_t i = 0; i < c->njoin; i++)
        send_join(c, c->join[i]);
}

/* --- lifetime ----------------------------------------------------------------------- */

int tn_control_new(uv_loop_t *loop, const tn_control_opts_t *o, tn_control_t **out)
{
    if (o->node_id == 0 || o->raft_addr == NULL || strlen(o->raft_addr) > TN_META_ADDR_MAX ||
        (o->api_addr != NULL && strlen(o->api_addr) > TN_META_ADDR_MAX))
        return UV_EINVAL;
    tn_control_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->loop = loop;
    c->node_id = o->node_id;
    snprintf(c->raft_addr, sizeof(c->raft_addr), "%s", o->raft_addr);
    snprintf(c->api_addr, sizeof(c->api_addr), "%s", o->api_addr != NULL ? o->api_addr : "");
    c->join_retry_ms = o->join_retry_ms ? o->join_retry_ms : DEFAULT_JOIN_RETRY_MS;
    c->forward_ms = o->forward_timeout_ms ? o->forward_timeout_ms : DEFAULT_FORWARD_MS;
    if (o->njoin > 0) {
        c->join = tn_calloc(o->njoin, sizeof(*c->join));
        if (c->join == NULL) {
            tn_free(c);
            return UV_ENOMEM;
        }
        for (size_t i = 0; i < o->njoin; i++) {
            c->join[i] = tn_strdup(o->join[i]);
            if (c->join[i] == NULL) {
                for (size_t k = 0; k < i; k++)
                    tn_free(c->join[k]);
                tn_free(c->join);
                tn_free(c);
                return UV_ENOMEM;
            }
        }
        c->njoin = o->njoin;
    }
    c->admitted = c->njoin == 0;
    const tn_rpc_handler_t h[] = {
        {TN_OP_META_PROPOSE, TN_RPC_OP_COMMIT, on_meta_propose, c},
        {TN_OP_JOIN, TN_RPC_OP_EXEMPT, on_join, c},
        {TN_OP_LEADER_INDEX, TN_RPC_OP_EXEMPT, on_leader_index, c},
        {TN_OP_NODE_STATUS, 0, on_node_status, c},
    };
    memcpy(c->handlers, h, sizeof(h));
    uv_timer_init(loop, &c->join_timer);
    c->join_timer.data = c;
    *out = c;
    return 0;
}

const tn_rpc_handler_t *tn_control_handlers(tn_control_t *c, size_t *n)
{
    *n = sizeof(c->handlers) / sizeof(c->handlers[0]);
    return c->handlers;
}

void tn_control_start(tn_control_t *c, tn_meta_t *meta, tn_rpc_t *rpc)
{
    c->meta = meta;
    c->rpc = rpc;
    if (!c->admitted) {
        on_join_tick(&c->join_timer);
        uv_timer_start(&c->join_timer, on_join_tick, c->join_retry_ms, c->join_retry_ms);
    }
}

bool tn_control_admitted(const tn_control_t *c)
{
    return c->admitted;
}

static void control_free(tn_control_t *c)
{
    void (*cb)(void *) = c->close_cb;
    void *arg = c->close_arg;
    for (size_t i = 0; i < c->njoin; i++)
        tn_free(c->join[i]);
    tn_free(c->join);
    tn_free(c);
    if (cb != NULL)
        cb(arg);
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_control_t *c = h->data;
    c->timer_closed = true;
    if (c->refs == 0)
        control_free(c);
}

void tn_control_close(tn_control_t *c, void (*cb)(void *arg), void *arg)
{
    c->closing = true;
    c->close_cb = cb;
    c->close_arg = arg;
    uv_close((uv_handle_t *)&c->join_timer, on_timer_closed);
}
