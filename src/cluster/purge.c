/* PURGE over node RPC: the member's handler and the call. See purge.h
 * for the design. */
#include "core/platform.h"

#include "cluster/purge.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/name.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A request whose local purge is under way. */
typedef struct {
    tn_rpc_req_t *req;
    char topic[256];
} job_t;

static void on_purged(void *arg, int status, const char *why)
{
    job_t *j = arg;
    char msg[512];
    if (status == 0) {
        tn_rpc_reply(j->req, 204, NULL, NULL, 0);
    } else if (status == UV_ETIMEDOUT) {
        snprintf(msg, sizeof(msg),
                 "the metastore replica here still recorded topic %s after %d ms; retry later",
                 j->topic, TN_PURGE_WAIT_MS);
        tn_rpc_reply_error(j->req, 503, msg);
    } else if (status == TN_ECLOSED) {
        tn_rpc_reply_error(j->req, 503, "this node is shutting down");
    } else {
        snprintf(msg, sizeof(msg), "deleting topic %s here failed: %s", j->topic,
                 why != NULL ? why : tn_strerror(status));
        tn_rpc_reply_error(j->req, 500, msg);
    }
    tn_free(j);
}

static void on_purge(tn_srv_t *s, tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    tn_purge_local_fn local = (tn_purge_local_fn)s->fn[0];
    tn_wire_purge_t w;
    char msg[256];
    if (tn_wire_purge_decode(payload, len, &w, msg, sizeof(msg)) != 0) {
        tn_rpc_reply_error(req, 400, msg);
        return;
    }
    if (!tn_name_valid_any(w.topic, strlen(w.topic))) {
        tn_rpc_reply_error(req, 400, "invalid topic name");
        return;
    }
    job_t *j = tn_malloc(sizeof(*j));
    if (j == NULL) {
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    j->req = req;
    snprintf(j->topic, sizeof(j->topic), "%s", w.topic);
    int rc = local(s->arg[0], w.topic, w.created_at_ms, TN_PURGE_WAIT_MS, on_purged, j);
    if (rc != 0) {
        tn_rpc_reply_error(req, 503,
                           rc == TN_ECLOSED ? "this node is shutting down" : "out of memory");
        tn_free(j);
    }
}

/* Exempt: it may wait for the replica and for the deletion, seconds that
 * must not hold a slot of the bounds produces and acks share. */
static const tn_srv_op_t purge_op = {
    .op = TN_OP_PURGE,
    .flags = TN_RPC_OP_EXEMPT,
    .nhooks = 1,
    .not_ready = "this node is not ready to purge topics",
    .handle = on_purge,
};

int tn_purge_srv_new(tn_srv_t **out)
{
    return tn_srv_new(&purge_op, NULL, out);
}

void tn_purge_srv_set_hook(tn_srv_t *s, tn_purge_local_fn fn, void *arg)
{
    tn_srv_set_hook(s, 0, (tn_srv_fn)fn, arg);
}

/* --- the call ------------------------------------------------------------------------ */

int tn_purge_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_purge_call_t *c)
{
    c->http_status = status;
    c->error[0] = '\0';
    if (status == 204)
        return 0;
    if (tn_reply_error_decode(status, body, len, "purge reply", c->error, sizeof(c->error)) != 0)
        return TN_EPROTO;
    switch (status) {
    case 503:
        return UV_EAGAIN;
    case 500:
        return UV_EIO;
    case 400:
        return UV_EINVAL;
    default:
        snprintf(c->error, sizeof(c->error), "an unexpected %u purge reply", status);
        return TN_EPROTO;
    }
}

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    tn_purge_call_t *c = arg;
    c->call = NULL;
    if (status == 0)
        status = tn_purge_reply_decode(reply->status, reply->body, reply->body_len, c);
    else
        snprintf(c->error, sizeof(c->error), "%s", err != NULL ? err : tn_strerror(status));
    c->cb(c, status);
}

int tn_purge_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, int64_t created_at_ms,
                  uint64_t timeout_ms, tn_purge_call_t *c, tn_purge_cb cb)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_purge_encode(&b, topic, created_at_ms);
    if (rc == 0) {
        c->http_status = 0;
        c->error[0] = '\0';
        c->cb = cb;
        rc = tn_rpc_call(rpc, peer_addr, TN_OP_PURGE, tn_buf_data(&b), tn_buf_size(&b), timeout_ms,
                         on_reply, c, &c->call);
    }
    tn_buf_fini(&b);
    return rc;
}
