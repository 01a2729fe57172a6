/* PERRS over node RPC: the local read, the owner's answer and the call.
 * See perrs.h for the design. */
#include "core/platform.h"

#include "cluster/perrs.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/name.h"

#include <string.h>

uint32_t tn_perrs_local(tn_replica_t *rm, const char *topic, uint32_t p, tn_replica_perr_t *out)
{
    return rm != NULL ? tn_replica_part_errors(rm, topic, p, out) : 0;
}

void tn_perrs_answer(tn_replica_t *rm, tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    tn_wire_pstats_t w;
    char msg[256];
    if (tn_wire_pstats_decode(payload, len, &w, msg, sizeof(msg)) != 0) {
        tn_rpc_reply_error(req, 400, msg);
        return;
    }
    if (!tn_name_valid_any(w.topic, strlen(w.topic))) {
        tn_rpc_reply_error(req, 400, "invalid topic name");
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_perrs_reply_start(&b, w.count);
    for (uint32_t i = 0; rc == 0 && i < w.count; i++) {
        uint32_t p = tn_wire_pstats_index(&w, i);
        tn_replica_perr_t pe[TN_WIRE_PERRS_MAX];
        uint32_t npe = tn_perrs_local(rm, w.topic, p, pe);
        rc = tn_wire_perrs_reply_part(&b, p, pe, npe);
        if (rc == UV_EINVAL) /* a text the wire cannot carry: the partition shows none */
            rc = tn_wire_perrs_reply_part(&b, p, NULL, 0);
    }
    if (rc != 0)
        tn_rpc_reply_error(req, 503, "out of memory");
    else
        tn_rpc_reply(req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* --- the call ------------------------------------------------------------------------ */

/* A 200 body into c->counts and c->errs: the decoder's first pass counts
 * and checks, the second fills room of that size. */
static int take_reply(tn_perrs_call_t *c, const uint8_t *body, size_t len)
{
    size_t total;
    int rc = tn_wire_perrs_reply_decode(body, len, c->parts, c->n, c->counts, NULL, &total);
    if (rc != 0 || total == 0)
        return rc;
    c->errs = tn_malloc(total * sizeof(*c->errs));
    if (c->errs == NULL)
        return UV_ENOMEM;
    rc = tn_wire_perrs_reply_decode(body, len, c->parts, c->n, c->counts, c->errs, &c->nerrs);
    if (rc != 0) { /* cannot be: the same bytes decoded a moment ago */
        tn_free(c->errs);
        c->errs = NULL;
        c->nerrs = 0;
    }
    return rc;
}

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    (void)err;
    tn_perrs_call_t *c = arg;
    c->call = NULL;
    if (status == 0) {
        if (reply->status == 200)
            status = take_reply(c, reply->body, reply->body_len);
        else
            status = tn_reply_status_err(reply->status);
    }
    c->cb(c, status);
}

int tn_perrs_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, const uint32_t *parts,
                  uint32_t n, uint8_t *counts, uint64_t timeout_ms, tn_perrs_call_t *c,
                  tn_perrs_cb cb)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_pstats_encode(&b, topic, parts, n);
    if (rc == 0) {
        c->parts = parts;
        c->n = n;
        c->counts = counts;
        c->errs = NULL;
        c->nerrs = 0;
        c->cb = cb;
        rc = tn_rpc_call(rpc, peer_addr, TN_OP_PERRS, tn_buf_data(&b), tn_buf_size(&b), timeout_ms,
                         on_reply, c, &c->call);
    }
    tn_buf_fini(&b);
    return rc;
}
