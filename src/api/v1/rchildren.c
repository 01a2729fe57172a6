/* The /v1 side of remote children (docs/remotes.md, "Remote children"):
 * attach and detach (through the children routes of children.c), and
 * their entries in GET children. The cursors are api/rchild.c's.
 *
 * Attach:
 *   1. Security on, admin (remotes are admins'), the remote exists, the
 *      child's name is a topic name, the delay 0 .. 1 year, the parent not
 *      an ephemeral topic, not attached already (400/403/404/409).
 *   2. The check (api/v1/rcheck.h) with the child topic on every live
 *      member: the remote answers, its certificate verifies, the
 *      credential works, the topic is there and the user may produce on
 *      it. Any member's failure refuses the attach with 502, naming the
 *      members and their classes, with the table (nothing is made).
 *   3. A fresh epoch (tn_fanout_epoch), held from the fan-out's sweep; the
 *      parent's cursor channel made at its tail (when this node's engine
 *      has the parent already; else its cursor makes it later, from the
 *      attach time the epoch carries, as on every other node).
 *   4. REMOTE_CHILD_PUT (if_absent, with the remote's id) proposed; once
 *      recorded, this node's cursors follow it and the answer is 201 with
 *      the child. A refusal deletes the channel made in step 3.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/rchildren.h"

#include "api/v1/common.h"
#include "api/v1/rcheck.h"

#include "api/fanout.h"
#include "api/rchild.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <inttypes.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#define MAX_REMOTE_CHILDREN 108 /* per parent, as local children */

typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client left */
    tn_meta_req_t mreq;
    tn_waiter_t wait;
    tn_meta_remote_cmd_t cmd;
    bool attach;
    bool held;
    tn_fanout_hold_t hold;
} rcop_t;

static void rcop_cancel(tn_http_request_t *r)
{
    rcop_t *op = r->data;
    op->r = NULL;
}

static void child_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_rchild_t *ch)
{
    tn_rchild_status_t st;
    tn_rchild_status(v->rchild, ch->parent, ch->remote, ch->child, &st);
    tn_buf_append(b, "{\"name\":", 8);
    tn__v1_json_str(b, ch->child);
    tn_buf_append(b, ",\"remote\":", 10);
    tn__v1_json_str(b, ch->remote);
    tn__v1_appendf(b,
                   ",\"delay_ms\":%" PRId64 ",\"lag_messages\":%" PRIu64 ",\"lag_seconds\":%" PRId64
                   ",\"lag_complete\":%s,\"sent\":%" PRIu64,
                   ch->delay_ms, st.lag, st.lag_ms / 1000, st.running ? "true" : "false", st.sent);
    tn__v1_appendf(b, ",\"dead_letters\":%" PRIu64, st.dead_letters);
    if (st.dlq[0] != '\0') {
        tn_buf_append(b, ",\"dead_letter_topic\":", 21);
        tn__v1_json_str(b, st.dlq);
    }
    if (st.retrying)
        tn__v1_appendf(b, ",\"state\":\"retrying\",\"class\":\"%s\",\"status\":%d",
                       tn_rc_class_name(st.cls), st.status);
    else
        tn_buf_append(b, ",\"state\":\"ok\"", 13);
    tn__v1_appendf(b, ",\"created_at_ms\":%" PRId64 ",\"created_by\":", ch->created_at_ms);
    tn__v1_json_str(b, ch->created_by);
    tn_buf_append(b, "}", 1);
}

void tn__v1_rchildren_json(tn_v1_t *v, tn_buf_t *b, const char *parent, bool *first)
{
    const tn_meta_remotes_t *rs = &tn_meta_state(v->meta)->remotes;
    for (size_t i = 0; i < rs->nchildren; i++) {
        if (strcmp(rs->children[i]->parent, parent) != 0)
            continue;
        if (!*first)
            tn_buf_append(b, ",", 1);
        child_json(v, b, rs->children[i]);
        *first = false;
    }
}

static void rcop_end(rcop_t *op, int status, const char *msg)
{
    tn_http_request_t *r = op->r;
    tn_v1_t *v = op->v;
    const tn_meta_rchild_t *ch = &op->cmd.child;
    if (status >= 300 && op->attach && ch->epoch != 0)
        tn_fanout_drop_channel(v->broker, ch->parent, ch->epoch);
    if (op->held && v->fanout != NULL)
        tn_fanout_release(v->fanout, &op->hold);
    if (r != NULL) {
        r->on_cancel = NULL;
        if (status == 201) {
            const tn_meta_rchild_t *now = tn_meta_rchild_find(&tn_meta_state(v->meta)->remotes,
                                                              ch->parent, ch->remote, ch->child);
            tn_buf_t b;
            tn_buf_init(&b);
            child_json(v, &b, now != NULL ? now : ch);
            tn__v1_respond_buf(r, 201, &b);
        } else if (status == 204) {
            tn_http_respond(r, 204, NULL, NULL, NULL, 0);
        } else {
            tn__v1_error(r, status, msg, status == 503 ? "Retry-After: 1\r\n" : NULL);
        }
    }
    tn_free(op);
}

static void on_applied(void *arg, int status)
{
    rcop_t *op = arg;
    (void)status;
    if (!op->v->closing && op->v->rchild != NULL)
        tn_rchild_sync(op->v->rchild);
    rcop_end(op, op->attach ? 201 : 204, NULL);
}

static void on_recorded(tn_meta_req_t *req, int status)
{
    rcop_t *op = req->data;
    const tn_meta_rchild_t *ch = &op->cmd.child;
    if (status != 0) {
        if (status == UV_ENOENT)
            rcop_end(op, 404, "parent topic not found");
        else if (status == TN_ENOTFOUND && op->attach)
            rcop_end(op, 404, "remote not found (deleted, or made again, meanwhile)");
        else if (status == TN_ENOTFOUND)
            rcop_end(op, 404, "not found: no such remote child of this parent");
        else if (status == UV_EEXIST)
            rcop_end(op, 409, "remote child already attached");
        else
            rcop_end(op, tn__v1_meta_code(status), tn__v1_meta_why(status));
        return;
    }
    TN_LOG(TN_LOG_NOTICE, "audit: %s %s remote child %s on remote %s %s %s (request %s, from %s)",
           ch->created_by[0] != '\0' ? ch->created_by : "(security off)",
           op->attach ? "attached" : "detached", ch->child, ch->remote, op->attach ? "to" : "from",
           ch->parent, ch->request, op->r != NULL ? op->r->remote : "a client gone");
    if (op->v->closing || tn_meta_confirm(op->v->meta, on_applied, op) != 0)
        on_applied(op, 0);
}

static void propose(rcop_t *op)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = op->attach ? TN_MC_REMOTE_CHILD_PUT : TN_MC_REMOTE_CHILD_DELETE;
    c.remote = &op->cmd;
    op->mreq.data = op;
    if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_recorded) != 0)
        rcop_end(op, 503, "control plane temporarily unavailable");
}

static void open_cursor(rcop_t *op);

static void on_channel(tn_waiter_t *w, int status)
{
    rcop_t *op = w->data;
    if (status != 0) {
        rcop_end(op, 503, "creating the remote child's cursor channel failed");
        return;
    }
    open_cursor(op); /* made, or the parent is placed: ready now */
}

static rcop_t *rcop_new(tn_v1_t *v, tn_http_request_t *r, bool attach, const char *parent,
                        const char *remote, const char *child)
{
    rcop_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return NULL;
    }
    op->v = v;
    op->r = r;
    op->attach = attach;
    tn_meta_rchild_t *ch = &op->cmd.child;
    snprintf(ch->parent, sizeof(ch->parent), "%s", parent);
    snprintf(ch->remote, sizeof(ch->remote), "%s", remote);
    snprintf(ch->child, sizeof(ch->child), "%s", child);
    snprintf(ch->created_by, sizeof(ch->created_by), "%.64s", r->principal);
    uint8_t id[8];
    if (RAND_bytes(id, sizeof(id)) != 1) {
        tn_free(op);
        tn__v1_error(r, 503, "no randomness for the request id", "Retry-After: 1\r\n");
        return NULL;
    }
    for (int i = 0; i < 8; i++)
        snprintf(ch->request + 2 * i, 3, "%02x", id[i]);
    r->data = op;
    r->on_cancel = rcop_cancel;
    return op;
}

static void attach_go(rcop_t *op);

/* Step 2's answer. */
static void on_checked(void *arg, const tn_router_rcheck_row_t *rows, uint32_t n)
{
    rcop_t *op = arg;
    char failures[600];
    if (!tn__v1_rcheck_failures(failures, sizeof(failures), rows, n)) {
        if (op->v->closing)
            rcop_end(op, 503, "the node is stopping");
        else
            attach_go(op);
        return;
    }
    TN_LOG(TN_LOG_WARN, "remote child %s -> %s:%s refused: the remote check failed: %s",
           op->cmd.child.parent, op->cmd.child.remote, op->cmd.child.child, failures);
    tn_http_request_t *r = op->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        op->r = NULL;
        tn_buf_t b;
        tn_buf_init(&b);
        char msg[1100];
        snprintf(msg, sizeof(msg),
                 "the remote check with topic %s failed, so the remote child is not attached: %s",
                 op->cmd.child.child, failures);
        tn_buf_append(&b, "{\"error\":", 9);
        tn__v1_json_str(&b, msg);
        tn_buf_append(&b, ",\"check\":", 9);
        tn__v1_rcheck_table_json(&b, op->cmd.child.child, rows, n);
        tn_buf_append(&b, "}", 1);
        tn__v1_respond_buf(r, 502, &b);
    }
    rcop_end(op, 502, NULL);
}

static bool allowed(tn_v1_t *v, tn_http_request_t *r)
{
    if (!v->o.security) {
        tn__v1_error(r, 403,
                     "remote children need security-enabled=true: remotes are managed by admins",
                     NULL);
        return false;
    }
    return tn__v1_admin_only(v, r);
}

void tn__v1_rchild_attach(tn_v1_t *v, tn_http_request_t *r, tn_http_handler_cb route,
                          const char *parent, const char *remote, const char *child,
                          int64_t delay_ms)
{
    if (!allowed(v, r))
        return;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    const tn_meta_remote_t *rec = tn_meta_remote_find(&s->remotes, remote);
    if (!tn_name_valid(child, strlen(child))) {
        tn__v1_error(r, 400, "invalid argument: child must be a topic name", NULL);
        return;
    }
    if (delay_ms < 0 || delay_ms > TN_RCHILD_MAX_DELAY_MS) {
        tn__v1_error(r, 400, "invalid argument: fanout_delay_ms must be 0 .. 1 year", NULL);
        return;
    }
    if (tn_name_ephemeral(parent, strlen(parent))) {
        tn__v1_error(r, 400, "invalid argument: an ephemeral topic cannot have remote children",
                     NULL);
        return;
    }
    if (rec == NULL) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return;
    }
    if (tn_meta_rchild_find(&s->remotes, parent, remote, child) != NULL) {
        tn__v1_error(r, 409, "remote child already attached", NULL);
        return;
    }
    size_t first;
    if (tn_meta_rchild_count(&s->remotes, parent, NULL, &first) >= MAX_REMOTE_CHILDREN) {
        tn__v1_error(r, 409, "remote child limit reached (108)", NULL);
        return;
    }
    if (!tn__v1_caught_up(v, r, route))
        return;
    rcop_t *op = rcop_new(v, r, true, parent, remote, child);
    if (op == NULL)
        return;
    tn_meta_rchild_t *ch = &op->cmd.child;
    op->cmd.cond = 1;
    ch->remote_id = rec->id;
    ch->delay_ms = delay_ms;
    if (tn__v1_rcheck_ask(v, remote, rec->id, child, on_checked, op) != 0)
        rcop_end(op, 503, "out of memory");
}

/* Step 3: the check passed. */
static void attach_go(rcop_t *op)
{
    tn_v1_t *v = op->v;
    tn_meta_rchild_t *ch = &op->cmd.child;
    ch->created_at_ms = tn_now_wall_ms();
    if (!tn_fanout_epoch(&ch->epoch)) {
        ch->epoch = 0;
        rcop_end(op, 503, "no randomness for the attach epoch");
        return;
    }
    if (v->fanout != NULL) {
        op->hold.epoch = ch->epoch;
        tn_fanout_hold(v->fanout, &op->hold);
        op->held = true;
    }
    open_cursor(op);
}

/* Step 4: the cursor channel at the parent's tail, then the record. */
static void open_cursor(rcop_t *op)
{
    tn_v1_t *v = op->v;
    tn_meta_rchild_t *ch = &op->cmd.child;
    if (v->closing) {
        rcop_end(op, 503, "the node is stopping");
        return;
    }
    tn_channel_t *cch = NULL;
    op->wait.cb = on_channel;
    op->wait.data = op;
    int rc = tn_fanout_open_channel(v->broker, ch->parent, ch->epoch, true, &op->wait, &cch);
    if (rc == UV_EAGAIN)
        return;
    if (rc == TN_ENOTFOUND) {
        /* This node's engine has not made the parent yet (its catalog
         * follows the metastore): its cursor makes the channel when it
         * does, from the attach time the epoch carries. */
        propose(op);
        return;
    }
    if (rc != 0) {
        rcop_end(op, 503, "creating the remote child's cursor channel failed");
        return;
    }
    propose(op);
}

void tn__v1_rchild_detach(tn_v1_t *v, tn_http_request_t *r, const char *parent, const char *remote,
                          const char *child)
{
    if (!allowed(v, r))
        return;
    if (tn_meta_rchild_find(&tn_meta_state(v->meta)->remotes, parent, remote, child) == NULL) {
        tn__v1_error(r, 404, "not found: no such remote child of this parent", NULL);
        return;
    }
    rcop_t *op = rcop_new(v, r, false, parent, remote, child);
    if (op != NULL)
        propose(op);
}
