/* MOVE_PROGRESS over node RPC: the local read and the call. See
 * moveprog.h for the design; the leader's handler is the router's
 * (router.c), which holds the metastore replica and the replica manager. */
#include "core/platform.h"

#include "cluster/moveprog.h"

#include "cluster/reply.h"
#include "core/buf.h"
#include "core/err.h"

#include <string.h>

/* The records the farthest-behind target member lacks, from rm's view. */
static bool move_lag(tn_replica_t *rm, const char *topic, uint32_t p, const tn_pstate_t *ps,
                     uint64_t *out)
{
    if (tn_pstate_move_ready(ps)) {
        *out = 0;
        return true;
    }
    if (rm == NULL)
        return false;
    uint64_t worst = 0;
    for (uint32_t i = 0; i < ps->ntarget; i++) {
        if (tn_pstate_isr_find(ps, ps->target[i]) >= 0)
            continue;
        uint64_t lag;
        if (tn_replica_peer_lag(rm, topic, p, ps->target[i], &lag) != 0)
            return false;
        worst = TN_MAX(worst, lag);
    }
    *out = worst;
    return true;
}

/* The leader's log size (*total) and what the farthest-behind target
 * member holds of it (*copied; all of it once every target is in sync). */
static bool move_bytes(tn_replica_t *rm, const char *topic, uint32_t p, const tn_pstate_t *ps,
                       uint64_t *copied, uint64_t *total)
{
    if (rm == NULL)
        return false;
    bool any = false;
    for (uint32_t i = 0; i < ps->ntarget; i++) {
        uint64_t c, t;
        if (tn_replica_move_progress(rm, topic, p, ps->target[i], &c, &t) != 0) {
            if (tn_pstate_isr_find(ps, ps->target[i]) >= 0 || ps->target[i] == ps->leader)
                continue; /* in sync: holds it all */
            return false;
        }
        if (!any || c < *copied)
            *copied = c;
        *total = t;
        any = true;
    }
    if (!any)
        return false; /* every target in sync, none fetching here: not the leader */
    if (tn_pstate_move_ready(ps))
        *copied = *total;
    return true;
}

void tn_moveprog_local(tn_replica_t *rm, const char *topic, uint32_t p, const tn_pstate_t *ps,
                       tn_wire_moveprog_reply_t *out)
{
    memset(out, 0, sizeof(*out));
    if (ps->ntarget == 0)
        return;
    if (move_bytes(rm, topic, p, ps, &out->bytes_copied, &out->bytes_total))
        out->known |= TN_WIRE_MOVEPROG_BYTES;
    else
        out->bytes_copied = out->bytes_total = 0;
    if (move_lag(rm, topic, p, ps, &out->lag_records))
        out->known |= TN_WIRE_MOVEPROG_LAG;
    else
        out->lag_records = 0;
}

/* --- the call ------------------------------------------------------------------------ */

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    (void)err;
    tn_moveprog_call_t *c = arg;
    c->call = NULL;
    if (status == 0) {
        if (reply->status == 200)
            status = tn_wire_moveprog_reply_decode(reply->body, reply->body_len, &c->out);
        else
            status = tn_reply_status_err(reply->status);
    }
    if (status != 0)
        memset(&c->out, 0, sizeof(c->out));
    c->cb(c, status);
}

int tn_moveprog_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, uint32_t p,
                     uint64_t timeout_ms, tn_moveprog_call_t *c, tn_moveprog_cb cb)
{
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_moveprog_encode(&b, topic, p);
    if (rc == 0) {
        memset(&c->out, 0, sizeof(c->out));
        c->cb = cb;
        rc = tn_rpc_call(rpc, peer_addr, TN_OP_MOVE_PROGRESS, tn_buf_data(&b), tn_buf_size(&b),
                         timeout_ms, on_reply, c, &c->call);
    }
    tn_buf_fini(&b);
    return rc;
}
