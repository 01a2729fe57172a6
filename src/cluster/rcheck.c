/* REMOTE_CHECK over node RPC: the codecs, the member's handler and the
 * call. See rcheck.h for the design. */
#include "core/platform.h"

#include "cluster/rcheck.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/err.h"

#include <stdio.h>
#include <string.h>

#define OCTETS "application/octet-stream"

/* --- codecs ---------------------------------------------------------------------- */

int tn_wire_rcheck_encode(tn_buf_t *b, const char *remote, uint64_t remote_id, const char *topic)
{
    size_t rlen = strlen(remote), tlen = strlen(topic);
    if (rlen == 0 || rlen > TN_RCHECK_REMOTE_MAX || tlen > TN_RCHECK_TOPIC_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_bytes(b, remote, rlen)) != 0 ||
        (rc = tn_wire_put_u64(b, remote_id)) != 0 || (rc = tn_wire_put_bytes(b, topic, tlen)) != 0)
        b->len = at; /* nothing half-written stays behind */
    return rc;
}

int tn_wire_rcheck_decode(const void *p, size_t len, tn_wire_rcheck_t *out, char *err,
                          size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, TN_RCHECK_REMOTE_MAX, out->remote) != 0 || out->remote[0] == '\0') {
        tn_errbuf(err, errlen, "malformed remote_check request: the remote");
        return TN_EPROTO;
    }
    if (tn_wire_get_u64(&in, &out->remote_id) != 0) {
        tn_errbuf(err, errlen, "malformed remote_check request: the remote id");
        return TN_EPROTO;
    }
    if (tn_wire_get_str(&in, TN_RCHECK_TOPIC_MAX, out->topic) != 0) {
        tn_errbuf(err, errlen, "malformed remote_check request: the topic");
        return TN_EPROTO;
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed remote_check request: %zu bytes after the topic",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

static bool result_valid(const tn_rcheck_result_t *res)
{
    return res->cls < TN_RCHECK_NCLASSES &&
           (res->status == 0 || (res->status >= 100 && res->status <= 599));
}

int tn_rcheck_result_encode(tn_buf_t *b, const tn_rcheck_result_t *res)
{
    size_t dlen = strnlen(res->detail, sizeof(res->detail));
    if (!result_valid(res) || dlen > TN_RCHECK_DETAIL_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_u8(b, res->cls)) != 0 || (rc = tn_wire_put_u16(b, res->status)) != 0 ||
        (rc = tn_wire_put_u32(b, res->ms)) != 0 ||
        (rc = tn_wire_put_bytes(b, res->detail, dlen)) != 0)
        b->len = at;
    return rc;
}

int tn_rcheck_result_decode(const void *p, size_t len, tn_rcheck_result_t *out)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    memset(out, 0, sizeof(*out));
    if (tn_wire_get_u8(&in, &out->cls) != 0 || tn_wire_get_u16(&in, &out->status) != 0 ||
        tn_wire_get_u32(&in, &out->ms) != 0 ||
        tn_wire_get_str(&in, TN_RCHECK_DETAIL_MAX, out->detail) != 0 || tn_wire_end(&in) != 0 ||
        !result_valid(out)) {
        memset(out, 0, sizeof(*out));
        return TN_EPROTO;
    }
    return 0;
}

/* --- the member side -------------------------------------------------------------- */

static void on_checked(void *arg, const tn_rcheck_result_t *res)
{
    tn_rpc_req_t *req = arg;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_rcheck_result_encode(&b, res) == 0)
        tn_rpc_reply(req, 200, OCTETS, tn_buf_data(&b), tn_buf_size(&b));
    else
        tn_rpc_reply_error(req, 503, "out of memory");
    tn_buf_fini(&b);
}

static void on_rcheck(tn_srv_t *s, tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    tn_rcheck_local_fn local = (tn_rcheck_local_fn)s->fn[0];
    tn_wire_rcheck_t w;
    char msg[320];
    if (tn_wire_rcheck_decode(payload, len, &w, msg, sizeof(msg)) != 0) {
        tn_rpc_reply_error(req, 400, msg);
        return;
    }
    int rc = local(s->arg[0], w.remote, w.remote_id, w.topic, on_checked, req);
    if (rc == TN_ENOTFOUND) {
        snprintf(msg, sizeof(msg),
                 "remote %s is not in this node's metastore replica (not yet, or made again "
                 "meanwhile)",
                 w.remote);
        tn_rpc_reply_error(req, 404, msg);
    } else if (rc != 0) {
        tn_rpc_reply_error(req, 503,
                           rc == TN_ECLOSED ? "this node is shutting down" : "out of memory");
    }
}

/* Exempt: it waits on another cluster for seconds, which must not hold a
 * slot of the bounds produces and acks share. */
static const tn_srv_op_t rcheck_op = {
    .op = TN_OP_REMOTE_CHECK,
    .flags = TN_RPC_OP_EXEMPT,
    .nhooks = 1,
    .not_ready = "this node is not ready to check remotes",
    .handle = on_rcheck,
};

int tn_rcheck_srv_new(tn_srv_t **out)
{
    return tn_srv_new(&rcheck_op, NULL, out);
}

void tn_rcheck_srv_set_hook(tn_srv_t *s, tn_rcheck_local_fn fn, void *arg)
{
    tn_srv_set_hook(s, 0, (tn_srv_fn)fn, arg);
}

/* --- the call ------------------------------------------------------------------------ */

int tn_rcheck_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_rcheck_call_t *c)
{
    c->http_status = status;
    c->error[0] = '\0';
    memset(&c->result, 0, sizeof(c->result));
    if (status == 200) {
        if (tn_rcheck_result_decode(body, len, &c->result) == 0)
            return 0;
        snprintf(c->error, sizeof(c->error), "a malformed remote_check answer");
        return TN_EPROTO;
    }
    if (tn_reply_error_decode(status, body, len, "remote_check answer", c->error,
                              sizeof(c->error)) != 0)
        return TN_EPROTO;
    switch (status) {
    case 404:
        return TN_ENOTFOUND;
    case 503:
        return UV_EAGAIN;
    case 400:
        return UV_EINVAL;
    default:
        snprintf(c->error, sizeof(c->error), "an unexpected %u remote_check answer", status);
        return TN_EPROTO;
    }
}

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    tn_rcheck_call_t *c = arg;
    c->call = NULL;
    if (status == 0)
        status = tn_rcheck_reply_decode(reply->status, reply->body, reply->body_len, c);
    else
        snprintf(c->error, sizeof(c->error), "%s", err != NULL ? err : tn_strerror(status));
    c->cb(c, status);
}

int tn_rcheck_call(tn_rpc_t *rpc, const char *peer_addr, const char *remote, uint64_t remote_id,
                   const char *topic, uint64_t timeout_ms, tn_rcheck_call_t *c, tn_rcheck_cb cb)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_rcheck_encode(&b, remote, remote_id, topic);
    if (rc == 0) {
        c->http_status = 0;
        c->error[0] = '\0';
        memset(&c->result, 0, sizeof(c->result));
        c->cb = cb;
        rc = tn_rpc_call(rpc, peer_addr, TN_OP_REMOTE_CHECK, tn_buf_data(&b), tn_buf_size(&b),
                         timeout_ms, on_reply, c, &c->call);
    }
    tn_buf_fini(&b);
    return rc;
}
