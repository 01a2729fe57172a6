/* Hooked node RPC servers: the scaffolding. See srv.h. */
#include "core/platform.h"

#include "cluster/srv.h"

#include "core/alloc.h"
#include "core/assert.h"

int tn_srv_new(const tn_srv_op_t *op, void *ctx, tn_srv_t **out)
{
    TN_DASSERT(op->nhooks <= TN_SRV_MAX_HOOKS);
    tn_srv_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->op = op;
    s->ctx = ctx;
    *out = s;
    return 0;
}

void tn_srv_set_hook(tn_srv_t *s, unsigned i, tn_srv_fn fn, void *arg)
{
    TN_DASSERT(i < s->op->nhooks);
    s->fn[i] = fn;
    s->arg[i] = arg;
}

void tn_srv_free(tn_srv_t *s)
{
    tn_free(s);
}

static void on_request(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_srv_t *s = arg;
    for (unsigned i = 0; i < s->op->nhooks; i++) {
        if (s->fn[i] == NULL) {
            tn_rpc_reply_error(req, 503, s->op->not_ready);
            return;
        }
    }
    s->op->handle(s, req, payload, len);
}

void tn_srv_handlers(tn_srv_t *s, tn_rpc_handler_t *out, size_t *n)
{
    out[0] = (tn_rpc_handler_t){s->op->op, s->op->flags, on_request, s};
    *n = TN_SRV_HANDLERS;
}
