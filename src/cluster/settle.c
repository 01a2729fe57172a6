/* SETTLE over node RPC: the owner's handler and the call. See settle.h
 * for the design. */
#include "core/platform.h"

#include "cluster/settle.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/name.h"

#include <stdio.h>
#include <string.h>

/* The server's hooks (cluster/srv.h). */
enum { HOOK_OWNS, HOOK_LOCAL };

/* One SETTLE request on the owner: from its decoding to its reply, which
 * waits for every handle's channel log record (settle.h step 3). */
typedef struct {
    tn_rpc_req_t *req;
    uint32_t count;
    uint32_t pending; /* handle waits not ended, +1 while starting */
    uint16_t st[TN_SETTLE_MAX];
    tn_chan_sync_t sync[TN_SETTLE_MAX];
} settling_t;

static void settling_release(settling_t *g)
{
    if (--g->pending > 0)
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_settle_reply_encode(&b, g->st, g->count) != 0)
        tn_rpc_reply_error(g->req, 503, "out of memory");
    else
        tn_rpc_reply(g->req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
    tn_free(g);
}

static void on_synced(tn_chan_sync_t *sync, int status)
{
    settling_t *g = sync->data;
    size_t i = (size_t)(sync - g->sync);
    /* A replicated partition's settle that its ISR could not confirm
     * (cluster/setrepl.h) is retryable: 421 when this node no longer leads
     * it (the caller looks the leader up again), 503 for too few in-sync
     * replicas; a channel log failure is 500. */
    g->st[i] = status == 0                                               ? 204
               : status == TN_EFENCED || status == TN_ECLOSED            ? 421
               : status == TN_EFEWREPLICAS || status == TN_EUNKNOWNEPOCH ? 503
                                                                         : 500;
    settling_release(g);
}

static void on_settle(tn_srv_t *s, tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    tn_settle_owns_fn owns = (tn_settle_owns_fn)s->fn[HOOK_OWNS];
    tn_settle_local_fn local = (tn_settle_local_fn)s->fn[HOOK_LOCAL];
    tn_wire_settle_t *w = tn_malloc(sizeof(*w));
    settling_t *g = tn_malloc(sizeof(*g));
    if (w == NULL || g == NULL) {
        tn_free(w);
        tn_free(g);
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    char msg[256];
    if (tn_wire_settle_decode(payload, len, w, msg, sizeof(msg)) != 0) {
        tn_rpc_reply_error(req, 400, msg);
        tn_free(w);
        tn_free(g);
        return;
    }
    if (!tn_name_valid_any(w->topic, strlen(w->topic)) ||
        !tn_name_valid(w->channel, strlen(w->channel))) {
        tn_rpc_reply_error(req, 400, "invalid topic or channel name");
        tn_free(w);
        tn_free(g);
        return;
    }
    g->req = req;
    g->count = w->count;
    g->pending = 1; /* held while the handles are settled */
    for (uint32_t i = 0; i < w->count; i++) {
        const tn_wire_handle_t *h = &w->h[i];
        if (!owns(s->arg[HOOK_OWNS], w->topic, h->partition)) {
            g->st[i] = 421;
            continue;
        }
        g->sync[i].data = g;
        g->pending++;
        int rc = local(s->arg[HOOK_LOCAL], w->topic, w->channel, h->partition, h->offset, h->nonce,
                       w->how, w->visibility_ms, &g->sync[i], on_synced);
        if (rc != 0) {
            g->pending--;
            g->st[i] = rc == UV_ENOBUFS ? 503 : rc == TN_ENOTFOUND ? 410 : 500;
        }
    }
    tn_free(w);
    settling_release(g);
}

static const tn_srv_op_t settle_op = {
    .op = TN_OP_SETTLE,
    .flags = 0, /* the messaging bound */
    .nhooks = 2,
    .not_ready = "this node is not ready to settle receipt handles",
    .handle = on_settle,
};

int tn_settle_srv_new(tn_srv_t **out)
{
    return tn_srv_new(&settle_op, NULL, out);
}

void tn_settle_srv_set_hooks(tn_srv_t *s, tn_settle_owns_fn owns, void *owns_arg,
                             tn_settle_local_fn local, void *local_arg)
{
    tn_srv_set_hook(s, HOOK_OWNS, (tn_srv_fn)owns, owns_arg);
    tn_srv_set_hook(s, HOOK_LOCAL, (tn_srv_fn)local, local_arg);
}

/* --- the call ------------------------------------------------------------------------ */

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    (void)err;
    tn_settle_call_t *c = arg;
    c->call = NULL;
    if (status == 0) {
        if (reply->status == 200)
            status = tn_wire_settle_reply_decode(reply->body, reply->body_len, c->n, c->status);
        else
            status = tn_reply_status_err(reply->status);
    }
    c->cb(c, status);
}

int tn_settle_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, const char *channel,
                   uint8_t how, int64_t visibility_ms, const tn_wire_handle_t *h, uint32_t n,
                   uint64_t timeout_ms, tn_settle_call_t *c, tn_settle_cb cb)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_settle_encode(&b, topic, channel, how, visibility_ms, h, n);
    if (rc == 0) {
        c->n = n;
        c->cb = cb;
        memset(c->status, 0, sizeof(c->status));
        rc = tn_rpc_call(rpc, peer_addr, TN_OP_SETTLE, tn_buf_data(&b), tn_buf_size(&b), timeout_ms,
                         on_reply, c, &c->call);
    }
    tn_buf_fini(&b);
    return rc;
}
