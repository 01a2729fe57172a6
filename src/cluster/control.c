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
/* A leader that did not know META_PROPOSE_AT (an older build) is sent
 * META_PROPOSE for this long before it is asked again (it may have been
 * upgraded meanwhile). */
#define PLAIN_PROPOSE_MS 60000

#define JSON "application/json"

typedef struct join_call_s join_call_t;
typedef struct pending_s pending_t;
typedef struct forward_s forward_t;
typedef struct relay_s relay_t;

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
    uint64_t plain_leader; /* answered META_PROPOSE_AT 400 (an older build) ... */
    uint64_t plain_until;  /* ... so sent META_PROPOSE until then (loop ms) */
    unsigned join_inflight;
    unsigned refs;       /* join calls, forwards and handlers that still use c */
    pending_t *pending;  /* handlers waiting for the metastore */
    forward_t *forwards; /* forwarded proposals whose call is out */
    join_call_t *join_calls;
    relay_t *relays; /* JOINs a follower passes on to the leader */
    uv_timer_t join_timer;
    tn_rpc_handler_t handlers[5];
    void (*close_cb)(void *arg);
    void *close_arg;
};

struct join_call_s {
    tn_control_t *c;
    tn_rpc_call_t *call; /* until on_join_reply */
    join_call_t *prev, *next;
    char addr[TN_META_ADDR_MAX + 1];
};

/* A handler waiting for the metastore (META_PROPOSE, JOIN, LEADER_INDEX).
 * req goes NULL once it was answered early (its caller cancelled, or c
 * closed); the metastore's callback still comes and frees it. c goes NULL
 * when tn_control_close detached it: c need not wait for the metastore
 * (a JOIN may take 30 s), and the callback then only frees the record. */
struct pending_s {
    tn_control_t *c;
    tn_rpc_req_t *req;
    pending_t *prev, *next;
    tn_meta_req_t mreq; /* META_PROPOSE */
    bool at;            /* META_PROPOSE_AT: the answer carries the index */
    uint64_t id;        /* JOIN */
};

/* A proposal forwarded to the leader; cancelled by tn_control_close. */
struct forward_s {
    tn_control_t *c;
    tn_rpc_call_t *call; /* until on_forward_reply */
    forward_t *prev, *next;
    tn_meta_forward_done done;
    void *done_arg;
    uint64_t leader;
    bool at;      /* sent as META_PROPOSE_AT */
    tn_buf_t cmd; /* the request's fields, for META_PROPOSE after a 400 */
    char addr[TN_META_ADDR_MAX + 1];
};

/* A JOIN that reached a follower, passed on to the leader and answered
 * with the leader's reply; cancelled by tn_control_close. */
struct relay_s {
    tn_control_t *c;
    tn_rpc_req_t *req;
    tn_rpc_call_t *call; /* until on_relay_reply */
    relay_t *prev, *next;
};

/* Doubly linked lists of the kinds above, headed in c. */
#define LIST_LINK(head, x)                                                                         \
    do {                                                                                           \
        (x)->prev = NULL;                                                                          \
        (x)->next = (head);                                                                        \
        if ((head) != NULL)                                                                        \
            (head)->prev = (x);                                                                    \
        (head) = (x);                                                                              \
    } while (0)
#define LIST_UNLINK(head, x)                                                                       \
    do {                                                                                           \
        if ((x)->prev != NULL)                                                                     \
            (x)->prev->next = (x)->next;                                                           \
        else                                                                                       \
            (head) = (x)->next;                                                                    \
        if ((x)->next != NULL)                                                                     \
            (x)->next->prev = (x)->prev;                                                           \
        (x)->prev = (x)->next = NULL;                                                              \
    } while (0)

static void control_free(tn_control_t *c);

/* A join call or a handler's metastore request ended. */
static void unref(tn_control_t *c)
{
    c->refs--;
    if (c->refs == 0 && c->timer_closed)
        control_free(c);
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
    tn_rpc_reply_error(req, 503, "no metastore leader is known");
}

static void reply_int(tn_rpc_req_t *req, int32_t v)
{
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_put_i32(&b, v) != 0) {
        tn_buf_fini(&b);
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    tn_rpc_reply(req, 200, "application/x-tern-int", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* META_PROPOSE_AT's answer: status and the entry's index. */
static void reply_at(tn_rpc_req_t *req, int32_t status, uint64_t index)
{
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_propose_at_reply_encode(&b, status, index) != 0) {
        tn_buf_fini(&b);
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    tn_rpc_reply(req, 200, "application/x-tern-int", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* --- handlers waiting for the metastore ------------------------------------------- */

/* Answer p's request 503 now; the metastore's answer is dropped later. */
static void answer_early(pending_t *p, const char *msg)
{
    tn_rpc_req_t *req = p->req;
    p->req = NULL;
    tn_rpc_reply_error(req, 503, msg);
}

static void on_req_cancel(void *arg, tn_rpc_req_t *req)
{
    pending_t *p = arg;
    if (p->req == req) /* the reply is dropped, but still owed */
        answer_early(p, "the request was cancelled");
}

/* A pending record for req, linked and counted: the metastore call that
 * follows may answer before it returns. NULL (req answered 503) when out
 * of memory or when the caller cancelled already. */
static pending_t *pending_begin(tn_control_t *c, tn_rpc_req_t *req)
{
    pending_t *p = tn_calloc(1, sizeof(*p));
    if (p == NULL) {
        tn_rpc_reply_error(req, 503, "out of memory");
        return NULL;
    }
    p->c = c;
    p->req = req;
    p->mreq.data = p;
    LIST_LINK(c->pending, p);
    c->refs++;
    tn_rpc_req_on_cancel(req, on_req_cancel, p);
    if (p->req == NULL) { /* cancelled already: answered */
        LIST_UNLINK(c->pending, p);
        c->refs--;
        tn_free(p);
        return NULL;
    }
    return p;
}

/* The metastore's answer came (or its call failed at once): p goes, and
 * its request (unless answered early) is returned for the answer. */
static tn_rpc_req_t *pending_end(pending_t *p)
{
    tn_rpc_req_t *req = p->req;
    if (p->c != NULL)
        LIST_UNLINK(p->c->pending, p);
    tn_free(p);
    return req;
}

/* --- META_PROPOSE: a follower's proposal, on the leader ---------------------------- */

static void on_proposed(tn_meta_req_t *mreq, int status)
{
    pending_t *p = mreq->data;
    tn_control_t *c = p->c;
    bool at = p->at;
    uint64_t index = mreq->index;
    tn_rpc_req_t *req = pending_end(p);
    if (c == NULL) /* detached at close, answered then */
        return;
    if (req == NULL) { /* answered already */
        unref(c);
        return;
    }
    if (status == TN_ENOTLEADER)
        reply_not_leader(c, req);
    else if (status == TN_ECLOSED || status == TN_ENOLEADER)
        tn_rpc_reply_error(req, 503, tn_strerror(status));
    else if (at)
        reply_at(req, status, index);
    else
        reply_int(req, status); /* the state machine's answer */
    unref(c);
}

/* META_PROPOSE, or META_PROPOSE_AT (at: the answer says where). */
static void propose(tn_control_t *c, tn_rpc_req_t *req, const uint8_t *payload, size_t len, bool at)
{
    tn_wire_in_t in;
    const uint8_t *cmd = NULL;
    size_t clen = 0;
    tn_wire_in_init(&in, payload, len);
    tn_wire_get_bytes(&in, TN_META_MAX_CMD, &cmd, &clen);
    if (tn_wire_end(&in) != 0) {
        tn_rpc_reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    if (c->meta == NULL || c->closing) {
        tn_rpc_reply_error(req, 503, "the metastore is not open");
        return;
    }
    pending_t *p = pending_begin(c, req);
    if (p == NULL)
        return;
    p->at = at;
    int rc = tn_meta_propose_encoded(c->meta, &p->mreq, cmd, clen, on_proposed);
    if (rc == 0)
        return;
    pending_end(p);
    c->refs--; /* not closing: c stays */
    if (rc == TN_ENOTLEADER)
        reply_not_leader(c, req);
    else if (rc == TN_ECORRUPT)
        tn_rpc_reply_error(req, 400, "malformed metastore command");
    else if (rc == UV_ENOTSUP)
        tn_rpc_reply_error(req, 400, "unsupported metastore command");
    else
        tn_rpc_reply_error(req, 503, tn_strerror(rc));
}

static void on_meta_propose(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    propose(arg, req, payload, len, false);
}

static void on_meta_propose_at(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    propose(arg, req, payload, len, true);
}

/* --- JOIN, on the leader ------------------------------------------------------------ */

static void on_joined(void *arg, int status)
{
    pending_t *p = arg;
    tn_control_t *c = p->c;
    uint64_t id = p->id;
    tn_rpc_req_t *req = pending_end(p);
    if (req == NULL) {
        if (c == NULL) /* detached at close */
            return;
        TN_LOG(TN_LOG_INFO,
               "cluster: the join of node %" PRIu64 " ended (%s) after its request was cancelled",
               id, status == 0 ? "a voter" : tn_strerror(status));
        unref(c);
        return;
    }
    switch (status) {
    case 0:
        TN_LOG(TN_LOG_NOTICE, "cluster: node %" PRIu64 " is a voter", id);
        tn_rpc_reply(req, 200, JSON, "{}", 2);
        break;
    case TN_EIDTAKEN:
        tn_rpc_reply_error(req, 409, "a member with this id is in the cluster at another address");
        break;
    case UV_EADDRINUSE:
        tn_rpc_reply_error(req, 409, "another member has this raft address");
        break;
    case TN_ENOTLEADER:
        reply_not_leader(c, req);
        break;
    default:
        tn_rpc_reply_error(req, 503, tn_strerror(status));
        break;
    }
    unref(c);
}

/* --- JOIN, on a follower: passed on to the leader ----------------------------------- */

static void on_relay_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    relay_t *r = arg;
    tn_control_t *c = r->c;
    tn_rpc_req_t *req = r->req;
    LIST_UNLINK(c->relays, r);
    tn_free(r);
    if (status == 0) {
        char ctype[256];
        size_t n = reply->ctype_len < sizeof(ctype) ? reply->ctype_len : sizeof(ctype) - 1;
        memcpy(ctype, reply->ctype, n);
        ctype[n] = '\0';
        tn_rpc_reply(req, reply->status, ctype, reply->body, reply->body_len);
    } else {
        char msg[200];
        snprintf(msg, sizeof(msg), "the leader did not answer the join: %s",
                 err != NULL ? err : tn_strerror(status));
        tn_rpc_reply_error(req, 503, msg);
    }
    unref(c);
}

static void on_relay_cancel(void *arg, tn_rpc_req_t *req)
{
    relay_t *r = arg;
    tn_rpc_call_cancel(r->call); /* its callback answers req (the answer is dropped) */
}

/* Whether addr is the API address of a member: a JOIN from a member was
 * relayed already, and is answered 421 rather than passed on again (two
 * followers that each take the other for the leader never loop). */
static bool from_member(tn_control_t *c, const char *addr)
{
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    for (size_t i = 0; i < s->nmembers; i++)
        if (strcmp(s->members[i].api_addr, addr) == 0)
            return true;
    return false;
}

/* A JOIN reached this follower: pass it on to the leader as it came, and
 * answer with the leader's reply ("a join any member forwards to the
 * leader"). false (nothing sent) when no leader is known, when the
 * request came from a member, or when the call cannot be made. */
static bool relay_join(tn_control_t *c, tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    uint64_t leader = 0;
    const char *api = "";
    if (tn_meta_leader(c->meta, &leader, &api) != 0 || api[0] == '\0' || leader == c->node_id ||
        from_member(c, tn_rpc_req_peer(req)))
        return false;
    relay_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return false;
    r->c = c;
    r->req = req;
    if (tn_rpc_call(c->rpc, api, TN_OP_JOIN, payload, len, JOIN_CALL_MS, on_relay_reply, r,
                    &r->call) != 0) {
        tn_free(r);
        return false;
    }
    LIST_LINK(c->relays, r);
    c->refs++;
    tn_rpc_req_on_cancel(req, on_relay_cancel, r);
    return true;
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
        tn_rpc_reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    if (c->meta == NULL || c->closing) {
        tn_rpc_reply_error(req, 503, "the metastore is not open");
        return;
    }
    pending_t *p = pending_begin(c, req);
    if (p == NULL)
        return;
    p->id = id;
    int rc = tn_meta_join(c->meta, id, raft, on_joined, p);
    if (rc == 0) {
        TN_LOG(TN_LOG_NOTICE, "cluster: node %" PRIu64 " (raft %s, api %s) asks to join", id, raft,
               api);
        return;
    }
    pending_end(p);
    c->refs--; /* not closing: c stays */
    if (rc == TN_ENOTLEADER && relay_join(c, req, payload, len))
        return;
    if (rc == TN_ENOTLEADER)
        reply_not_leader(c, req);
    else if (rc == UV_EINVAL)
        tn_rpc_reply_error(req, 400, "a join needs a node id >= 1 and a raft address host:port");
    else
        tn_rpc_reply_error(req, 503, tn_strerror(rc));
}

/* --- LEADER_INDEX and NODE_STATUS ------------------------------------------------- */

static void on_confirmed(void *arg, int status)
{
    pending_t *p = arg;
    tn_control_t *c = p->c;
    tn_rpc_req_t *req = pending_end(p);
    if (c == NULL) /* detached at close, answered then */
        return;
    if (req == NULL) {
        unref(c);
        return;
    }
    if (status != 0) {
        if (status == TN_ENOTLEADER)
            reply_not_leader(c, req);
        else
            tn_rpc_reply_error(req, 503, tn_strerror(status));
        unref(c);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_put_u64(&b, tn_meta_applied_index(c->meta)) != 0) {
        tn_buf_fini(&b);
        tn_rpc_reply_error(req, 503, "out of memory");
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
        tn_rpc_reply_error(req, 400, "unsupported rpc operation");
        return;
    }
    uint64_t id = 0;
    const char *api = "";
    if (c->meta == NULL || c->closing || tn_meta_leader(c->meta, &id, &api) != 0 ||
        id != c->node_id) {
        reply_not_leader(c, req);
        return;
    }
    pending_t *p = pending_begin(c, req);
    if (p == NULL)
        return;
    int rc = tn_meta_confirm(c->meta, on_confirmed, p);
    if (rc != 0) {
        pending_end(p);
        c->refs--; /* not closing: c stays */
        tn_rpc_reply_error(req, 503, tn_strerror(rc));
    }
}

static void on_node_status(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_control_t *c = arg;
    if (len != 0) {
        tn_rpc_reply_error(req, 400, "unsupported rpc operation");
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

static void forward_reply(tn_meta_forward_done done, void *done_arg, bool at, int status,
                          const tn_wire_reply_t *reply, const char *err)
{
    if (status != 0) {
        /* Not sent again: the leader may have applied it. */
        TN_LOG_RL(TN_LOG_WARN, 10000, "cluster: a proposal forwarded to the leader failed: %s",
                  err);
        done(done_arg, status, 0);
        return;
    }
    if (reply->status == 200) {
        int32_t rc = 0;
        uint64_t index = 0;
        int dec = 0;
        if (at) {
            dec = tn_wire_propose_at_reply_decode(reply->body, reply->body_len, &rc, &index);
        } else {
            tn_wire_in_t in;
            tn_wire_in_init(&in, reply->body, reply->body_len);
            tn_wire_get_i32(&in, &rc);
            dec = tn_wire_end(&in);
        }
        done(done_arg, dec == 0 ? rc : TN_EPROTO, dec == 0 ? index : 0);
    } else if (reply->status == 421) {
        done(done_arg, TN_ENOTLEADER, 0);
    } else if (reply->status == 503) {
        done(done_arg, TN_ENOLEADER, 0);
    } else if (reply->status == 400) {
        done(done_arg, UV_ENOTSUP, 0); /* a leader of an older build */
    } else {
        done(done_arg, TN_EFAILED, 0);
    }
}

/* The RPC server's answer to an opcode it does not know (cluster/rpc.c). */
static bool unknown_op(const tn_wire_reply_t *reply)
{
    static const char unsupported[] = "{\"error\":\"unsupported rpc operation\"}";
    return reply->status == 400 && reply->body_len == sizeof(unsupported) - 1 &&
           memcmp(reply->body, unsupported, reply->body_len) == 0;
}

static void on_forward_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err);

static int forward_send(tn_control_t *c, forward_t *f)
{
    return tn_rpc_call(c->rpc, f->addr, f->at ? TN_OP_META_PROPOSE_AT : TN_OP_META_PROPOSE,
                       tn_buf_data(&f->cmd), tn_buf_size(&f->cmd), c->forward_ms, on_forward_reply,
                       f, &f->call);
}

static void on_forward_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    forward_t *f = arg;
    tn_control_t *c = f->c;
    if (status == 0 && f->at && unknown_op(reply) && !c->closing) {
        /* A leader of an older build: META_PROPOSE, which it knows (the
         * answer has no index; the metastore confirms with a no-op). Its
         * 400 says it did not look at the command. */
        c->plain_leader = f->leader;
        c->plain_until = uv_now(c->loop) + PLAIN_PROPOSE_MS;
        f->at = false;
        int rc = forward_send(c, f);
        if (rc == 0)
            return;
        status = rc;
        err = tn_strerror(rc);
    }
    bool at = f->at;
    tn_meta_forward_done done = f->done;
    void *done_arg = f->done_arg;
    LIST_UNLINK(c->forwards, f);
    tn_buf_fini(&f->cmd);
    tn_free(f);
    forward_reply(done, done_arg, at, status, reply, err);
    unref(c); /* after done: it may forward again */
}

int tn_control_forward(void *arg, uint64_t leader_id, const char *leader_api_addr, const void *cmd,
                       size_t len, tn_meta_forward_done done, void *done_arg)
{
    tn_control_t *c = arg;
    if (c->rpc == NULL || c->closing)
        return TN_ECLOSED;
    if (strlen(leader_api_addr) > TN_META_ADDR_MAX)
        return UV_EINVAL;
    forward_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL)
        return UV_ENOMEM;
    tn_buf_init(&f->cmd);
    if (tn_wire_put_bytes(&f->cmd, cmd, len) != 0) {
        tn_buf_fini(&f->cmd);
        tn_free(f);
        return UV_ENOMEM;
    }
    f->c = c;
    f->done = done;
    f->done_arg = done_arg;
    f->leader = leader_id;
    f->at = !(c->plain_leader == leader_id && uv_now(c->loop) < c->plain_until);
    snprintf(f->addr, sizeof(f->addr), "%s", leader_api_addr);
    int rc = forward_send(c, f);
    if (rc != 0) {
        tn_buf_fini(&f->cmd);
        tn_free(f);
    } else {
        LIST_LINK(c->forwards, f);
        c->refs++;
    }
    return rc;
}

/* --- the join loop ----------------------------------------------------------------- */

static void send_join(tn_control_t *c, const char *addr);

static void on_join_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    join_call_t *jc = arg;
    tn_control_t *c = jc->c;
    c->join_inflight--;
    LIST_UNLINK(c->join_calls, jc);
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
                         JOIN_CALL_MS, on_join_reply, jc, &jc->call);
    tn_buf_fini(&b);
    if (rc != 0) {
        if (rc != UV_ECONNREFUSED) /* in its dial backoff: the next sweep asks again */
            TN_LOG_RL(TN_LOG_WARN, 10000, "cluster: cannot ask %s to join: %s", jc->addr,
                      tn_strerror(rc));
        tn_free(jc);
        return;
    }
    LIST_LINK(c->join_calls, jc);
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
        {TN_OP_META_PROPOSE_AT, TN_RPC_OP_COMMIT, on_meta_propose_at, c},
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
    /* Handlers answer now and their records are detached (the metastore's
     * callbacks still come and free them). Calls are cancelled: their
     * callbacks come from the loop with TN_ECLOSED, and the last
     * reference frees c. */
    while (c->pending != NULL) {
        pending_t *p = c->pending;
        LIST_UNLINK(c->pending, p);
        p->c = NULL;
        c->refs--;
        if (p->req != NULL)
            answer_early(p, "the control plane is closing");
    }
    for (forward_t *f = c->forwards; f != NULL; f = f->next)
        tn_rpc_call_cancel(f->call);
    for (join_call_t *jc = c->join_calls; jc != NULL; jc = jc->next)
        tn_rpc_call_cancel(jc->call);
    for (relay_t *r = c->relays; r != NULL; r = r->next)
        tn_rpc_call_cancel(r->call);
    uv_close((uv_handle_t *)&c->join_timer, on_timer_closed);
}
