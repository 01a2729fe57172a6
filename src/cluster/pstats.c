/* PSTATS over node RPC: the local read, the owner's handler and the call.
 * See pstats.h for the design. */
#include "core/platform.h"

#include "cluster/pstats.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/name.h"

#include <stdio.h>
#include <string.h>

uint16_t tn_pstats_local(tn_broker_t *b, const char *topic, uint32_t p, tn_wire_pstat_t *out)
{
    memset(out, 0, sizeof(*out));
    out->partition = p;
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(b, topic, strlen(topic), false, 0, NULL, &t);
    if (rc == UV_EAGAIN)
        out->status = 503;
    else if (rc != 0)
        out->status = 404; /* not found, being deleted, or a name no topic has */
    else if (p >= t->nparts)
        out->status = 416;
    else if (!tn_topic_part_local(t, p))
        out->status = 421;
    else {
        tn_plog_stats_t st;
        tn_plog_stats(t->parts[p]->plog, &st);
        out->status = 200;
        out->segments = st.segments;
        out->oldest_offset = st.first_offset;
        out->next_offset = st.written_next;
        out->high_watermark = st.visible_next;
        out->size_bytes = st.bytes;
        out->controls = st.controls;
        out->stored_controls = st.stored_controls;
    }
    return out->status;
}

static void on_pstats(tn_srv_t *s, tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    tn_broker_t *broker = s->ctx;
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
    tn_wire_pstat_t *st = tn_malloc((size_t)w.count * sizeof(*st));
    if (st == NULL) {
        tn_rpc_reply_error(req, 503, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < w.count; i++)
        (void)tn_pstats_local(broker, w.topic, tn_wire_pstats_index(&w, i), &st[i]);
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_pstats_reply_encode(&b, st, w.count) != 0)
        tn_rpc_reply_error(req, 503, "out of memory");
    else
        tn_rpc_reply(req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
    tn_free(st);
}

/* No hooks: the broker is there from the start. */
static const tn_srv_op_t pstats_op = {
    .op = TN_OP_PSTATS,
    .flags = 0, /* the messaging bound */
    .nhooks = 0,
    .handle = on_pstats,
};

int tn_pstats_srv_new(tn_broker_t *b, tn_srv_t **out)
{
    return tn_srv_new(&pstats_op, b, out);
}

/* --- the call ------------------------------------------------------------------------ */

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    (void)err;
    tn_pstats_call_t *c = arg;
    c->call = NULL;
    if (status == 0) {
        if (reply->status == 200)
            status =
                tn_wire_pstats_reply_decode(reply->body, reply->body_len, c->parts, c->n, c->out);
        else
            status = tn_reply_status_err(reply->status);
    }
    c->cb(c, status);
}

int tn_pstats_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, const uint32_t *parts,
                   uint32_t n, tn_wire_pstat_t *out, uint64_t timeout_ms, tn_pstats_call_t *c,
                   tn_pstats_cb cb)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_pstats_encode(&b, topic, parts, n);
    if (rc == 0) {
        c->parts = parts;
        c->n = n;
        c->out = out;
        c->cb = cb;
        rc = tn_rpc_call(rpc, peer_addr, TN_OP_PSTATS, tn_buf_data(&b), tn_buf_size(&b), timeout_ms,
                         on_reply, c, &c->call);
    }
    tn_buf_fini(&b);
    return rc;
}
