/* The /v1 routes of child topics: attach, list (with lag), detach. The
 * copying itself is fanout.c's.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/children.h"

#include "api/v1/common.h"
#include "api/v1/rchildren.h"

#include "api/fanout.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define MAX_CHILDREN 108
#define MAX_DELAY_MS (365LL * 24 * 3600 * 1000)
#define HOUR_MS      (3600LL * 1000)

size_t tn__v1_children_of(const tn_meta_state_t *s, const char *parent)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, parent);
    return e != NULL ? e->nchildren : 0;
}

/* An attach or detach under way. */
typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client left */
    tn_meta_req_t mreq;
    tn_waiter_t wait;
    char parent[TN_NAME_MAX + 1];
    char child[TN_NAME_MAX + 1];
    uint64_t epoch;
    int64_t delay_ms;
    bool attach;
    bool created; /* create-and-attach: answer 201 with the child */
    int tries;    /* proposals refused because the child's record changed */
    bool held;    /* an attach with its epoch: hold on v->fanout's list */
    tn_fanout_hold_t hold;
} link_t;

static void link_cancel(tn_http_request_t *r)
{
    link_t *l = r->data;
    l->r = NULL;
}

static void link_end(link_t *l, int status, const char *msg)
{
    tn_http_request_t *r = l->r;
    tn_v1_t *v = l->v;
    char shown[TN_NAME_MAX + 1];
    snprintf(shown, sizeof(shown), "%s", l->created ? l->child : l->parent);
    if (status == 200 && l->created)
        status = 201;
    if (l->held && v->fanout != NULL)
        tn_fanout_release(v->fanout, &l->hold);
    tn_free(l);
    tn_buf_t b;
    tn_buf_init(&b);
    if (r != NULL && (status == 200 || status == 201)) {
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(v->meta), shown);
        if (e != NULL)
            tn__v1_topic_json(v, &b, e, NULL, 0);
        else
            tn_buf_append(&b, "{}", 2);
    }
    tn__v1_end(r, status, msg, &b);
}

static void propose_link(link_t *l);

/* The link recorded and (status 0) applied here: this node's copiers
 * follow it, and the answer shows it. Otherwise (the confirmation timed
 * out, the metastore is closing) it is recorded all the same, and the
 * answer shows what the replica has now. */
static void on_link_applied(void *arg, int status)
{
    link_t *l = arg;
    if (status != 0 && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "%s %s: recorded, not yet applied here (%s)",
               l->attach ? "attaching" : "detaching", l->child, tn_strerror(status));
    if (!l->v->closing && l->v->fanout != NULL)
        tn_fanout_sync(l->v->fanout);
    link_end(l, l->attach ? 200 : 204, NULL);
}

static void on_link_recorded(tn_meta_req_t *req, int status)
{
    link_t *l = req->data;
    if (status == TN_ECHANGED && ++l->tries < TN__V1_CHANGE_TRIES && !l->v->closing) {
        propose_link(l); /* another change landed first: again on top of it */
        return;
    }
    if (status != 0) {
        if (l->attach)
            tn_fanout_drop_channel(l->v->broker, l->parent, l->epoch);
        if (status == TN_ENOTFOUND) /* deleted while the link was on its way */
            link_end(l, 404, "child topic not found");
        else if (status == UV_ENOENT) /* the parent was */
            link_end(l, 404, "parent topic not found");
        else if (status == UV_EINVAL)
            link_end(l, 400, "invalid argument: a topic cannot be its own child");
        else if (status == TN_ECHANGED)
            link_end(l, 409, "the child topic kept changing meanwhile; send the request again");
        else
            link_end(l, tn__v1_meta_code(status), tn__v1_meta_why(status));
        return;
    }
    if (l->r != NULL)
        TN_LOG(TN_LOG_NOTICE, "audit: %s %s child %s %s %s",
               l->r->principal[0] ? l->r->principal : "(open)", l->attach ? "attached" : "detached",
               l->child, l->attach ? "to" : "from", l->parent);
    /* A follower hears the leader's answer before its own replica has the
     * change: the answer shows the record, and this node's copier starts,
     * once it is here. */
    if (l->v->closing || tn_meta_confirm(l->v->meta, on_link_applied, l) != 0)
        on_link_applied(l, 0);
}

/* Record the child's link (attach) or its absence (detach). */
static void propose_link(link_t *l)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(l->v->meta), l->child);
    if (e == NULL) {
        if (l->attach)
            tn_fanout_drop_channel(l->v->broker, l->parent, l->epoch);
        link_end(l, 404, "child topic not found");
        return;
    }
    if (l->tries > 0) {
        /* Made again after another change landed: the request's checks
         * again, on the records as they are now. */
        const char *msg = NULL;
        int st = 0;
        if (l->attach) {
            const tn_meta_topic_entry_t *pe =
                tn_meta_topic_find(tn_meta_state(l->v->meta), l->parent);
            if (pe == NULL) {
                st = 404;
                msg = "parent topic not found";
            } else {
                st = tn__v1_link_refusal(l->v, &pe->rec, &e->rec, l->delay_ms, &msg);
            }
        } else if (strcmp(e->rec.parent, l->parent) != 0) {
            st = 404;
            msg = "not found: the child is not attached to this parent";
        }
        if (st != 0) {
            if (l->attach)
                tn_fanout_drop_channel(l->v->broker, l->parent, l->epoch);
            link_end(l, st, msg);
            return;
        }
    }
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_PUT;
    c.if_unchanged = true; /* made from the record as it is now */
    c.expect = tn_meta_topic_fingerprint(&e->rec);
    c.topic = e->rec;
    if (l->attach) {
        snprintf(c.topic.parent, sizeof(c.topic.parent), "%s", l->parent);
        c.topic.fanout_delay_ms = l->delay_ms;
        c.topic.attach_epoch = l->epoch;
    } else {
        c.topic.parent[0] = '\0';
        c.topic.fanout_delay_ms = 0;
        c.topic.attach_epoch = 0;
    }
    l->mreq.data = l;
    if (tn_meta_propose(l->v->meta, &l->mreq, &c, on_link_recorded) != 0) {
        if (l->attach)
            tn_fanout_drop_channel(l->v->broker, l->parent, l->epoch);
        link_end(l, 503, "control plane temporarily unavailable");
    }
}

static void attach_step(link_t *l);

static void on_link_channel(tn_waiter_t *w, int status)
{
    link_t *l = w->data;
    if (status != 0) {
        link_end(l, 503, "creating the fan-out channel failed");
        return;
    }
    attach_step(l);
}

/* The parent's channel for the child, at its tail, then the record. */
static void attach_step(link_t *l)
{
    tn_channel_t *ch = NULL;
    l->wait.cb = on_link_channel;
    l->wait.data = l;
    int rc = l->v->closing
                 ? TN_ENOTFOUND
                 : tn_fanout_open_channel(l->v->broker, l->parent, l->epoch, true, &l->wait, &ch);
    if (rc == UV_EAGAIN)
        return;
    if (rc == TN_ENOTFOUND) {
        link_end(l, 503, "the parent topic is not ready");
        return;
    }
    if (rc != 0) {
        link_end(l, 503, "creating the fan-out channel failed");
        return;
    }
    propose_link(l);
}

static link_t *link_new(tn_v1_t *v, tn_http_request_t *r, const char *parent, const char *child,
                        bool attach)
{
    link_t *l = tn_calloc(1, sizeof(*l));
    if (l == NULL) {
        if (r != NULL)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return NULL;
    }
    l->v = v;
    l->r = r;
    l->attach = attach;
    snprintf(l->parent, sizeof(l->parent), "%s", parent);
    snprintf(l->child, sizeof(l->child), "%s", child);
    if (r != NULL) {
        r->data = l;
        r->on_cancel = link_cancel;
    }
    return l;
}

/* A fresh epoch for l (tn_fanout_epoch), its channel held from the
 * fan-out's sweep until l ends; false when there is no randomness. */
static bool new_epoch(link_t *l)
{
    if (!tn_fanout_epoch(&l->epoch))
        return false;
    if (l->v->fanout != NULL) { /* NULL: closing, and the attach ends at once */
        l->hold.epoch = l->epoch;
        tn_fanout_hold(l->v->fanout, &l->hold);
        l->held = true;
    }
    return true;
}

void tn__v1_attach_created(tn_v1_t *v, tn_http_request_t *r, const char *parent, const char *child,
                           int64_t delay_ms)
{
    link_t *l = link_new(v, r, parent, child, true);
    if (l == NULL)
        return;
    l->created = true;
    l->delay_ms = delay_ms;
    if (!new_epoch(l)) {
        link_end(l, 503, "the topic was created but could not be attached");
        return;
    }
    attach_step(l);
}

typedef struct {
    char child[TN_NAME_MAX + 1];
    int64_t delay_ms;
    char remote[TN_REMOTE_NAME_MAX + 1];
    int64_t fanout_delay_ms;
} attach_body_t;

/* "fanout_delay_ms" is "delay_ms" under the name the remote children's
 * documents use; one of the two at most. */
static const tn_jfield_t attach_fields[] = {
    {"child", TN_JF_STR, offsetof(attach_body_t, child), TN_NAME_MAX},
    {"delay_ms", TN_JF_INT, offsetof(attach_body_t, delay_ms), 0},
    {"remote", TN_JF_STR, offsetof(attach_body_t, remote), TN_REMOTE_NAME_MAX},
    {"fanout_delay_ms", TN_JF_INT, offsetof(attach_body_t, fanout_delay_ms), 0},
};

/* Why the link parent -> child may not be made (status and message), or
 * 0. */
int tn__v1_link_refusal(tn_v1_t *v, const tn_meta_topic_t *parent, const tn_meta_topic_t *child,
                        int64_t delay_ms, const char **msg)
{
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    if (strcmp(parent->name, child->name) == 0) {
        *msg = "invalid argument: a topic cannot be its own child";
        return 400;
    }
    if (delay_ms < 0 || delay_ms > MAX_DELAY_MS) {
        *msg = "invalid argument: delay_ms must be 0 .. 1 year";
        return 400;
    }
    if (parent->retention_ms != 0 && parent->retention_ms < delay_ms + HOUR_MS) {
        *msg = "invalid argument: the delay exceeds the parent's retention (it needs the delay "
               "plus an hour)";
        return 400;
    }
    if (parent->parent[0] != '\0') {
        *msg = "fan-out role conflict: the parent is itself a child";
        return 409;
    }
    if (tn__v1_children_of(s, child->name) > 0) {
        *msg = "fan-out role conflict: the child is a parent";
        return 409;
    }
    if (strcmp(child->parent, parent->name) == 0) {
        *msg = "child already attached";
        return 409;
    }
    if (child->parent[0] != '\0') {
        *msg = "fan-out role conflict: the child is attached to another parent";
        return 409;
    }
    if (tn__v1_children_of(s, parent->name) >= MAX_CHILDREN) {
        *msg = "fan-out child limit reached (108)";
        return 409;
    }
    return 0;
}

static void on_attach(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r))
        return;
    char parent[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *pe = tn__v1_path_topic(v, r, parent);
    if (pe == NULL)
        return;
    attach_body_t b;
    memset(&b, 0, sizeof(b));
    bool given[4];
    char err[192];
    int rc = tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), attach_fields, 4, &b,
                            given, err, sizeof(err));
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (rc != 0 || !given[0]) {
        tn__v1_error(r, 400, rc != 0 ? err : "invalid argument: child required", NULL);
        return;
    }
    if (given[1] && given[3]) {
        tn__v1_error(r, 400, "invalid argument: give delay_ms or fanout_delay_ms, not both", NULL);
        return;
    }
    if (given[3])
        b.delay_ms = b.fanout_delay_ms;
    if (given[2]) { /* a child on another cluster */
        tn__v1_rchild_attach(v, r, on_attach, parent, b.remote, b.child, b.delay_ms);
        return;
    }
    const tn_meta_topic_entry_t *ce = tn_meta_topic_find(tn_meta_state(v->meta), b.child);
    if (ce == NULL) {
        tn__v1_error(r, 404, "child topic not found", NULL);
        return;
    }
    if (!tn__v1_can_manage(v, r, &pe->rec) || !tn__v1_can_manage(v, r, &ce->rec)) {
        tn__v1_error(r, 403, "attaching needs ownership (or admin) of both topics", NULL);
        return;
    }
    const char *msg = NULL;
    int status = tn__v1_link_refusal(v, &pe->rec, &ce->rec, b.delay_ms, &msg);
    if (status != 0) {
        tn__v1_error(r, status, msg, NULL);
        return;
    }
    link_t *l = link_new(v, r, parent, b.child, true);
    if (l == NULL)
        return;
    l->delay_ms = b.delay_ms;
    if (!new_epoch(l)) {
        link_end(l, 503, "no randomness for the attach epoch");
        return;
    }
    attach_step(l);
}

static void on_detach(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char parent[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *pe = tn__v1_path_topic(v, r, parent);
    if (pe == NULL)
        return;
    const tn_iov_t *cn = tn_http_param(r, "child");
    char child[TN_NAME_MAX + 1] = "";
    if (cn != NULL && cn->len <= TN_NAME_MAX) {
        memcpy(child, cn->base, cn->len);
        child[cn->len] = '\0';
    }
    char remote[TN_REMOTE_NAME_MAX + 1];
    int q = tn_http_query(r->head.query, "remote", remote, sizeof(remote));
    if (q < 0) {
        tn__v1_error(r, 400, "invalid argument: remote must be a remote's name", NULL);
        return;
    }
    if (q == 1) { /* a child on another cluster */
        tn__v1_rchild_detach(v, r, parent, remote, child);
        return;
    }
    const tn_meta_topic_entry_t *ce = tn_meta_topic_find(tn_meta_state(v->meta), child);
    if (ce == NULL || strcmp(ce->rec.parent, parent) != 0) {
        tn__v1_error(r, 404, "not found: the child is not attached to this parent", NULL);
        return;
    }
    if (!tn__v1_can_manage(v, r, &pe->rec) || !tn__v1_can_manage(v, r, &ce->rec)) {
        tn__v1_error(r, 403, "detaching needs ownership (or admin) of both topics", NULL);
        return;
    }
    link_t *l = link_new(v, r, parent, child, false);
    if (l != NULL)
        propose_link(l);
}

static void on_children(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char parent[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *pe = tn__v1_path_topic(v, r, parent);
    if (pe == NULL)
        return;
    if (!tn__v1_can_read(v, r, &pe->rec)) {
        tn__v1_error(r, 403, "no grant on this topic", NULL);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"parent\":", 10);
    tn__v1_json_str(&b, parent);
    tn_buf_append(&b, ",\"children\":[", 13);
    bool first = true;
    for (size_t i = 0; i < s->ntopics; i++) {
        const tn_meta_topic_t *t = &s->topics[i]->rec;
        if (strcmp(t->parent, parent) != 0)
            continue;
        uint64_t lag = 0;
        bool complete = tn_fanout_lag(v->fanout, t->name, &lag);
        tn_buf_append(&b, first ? "{\"name\":" : ",{\"name\":", first ? 8 : 9);
        tn__v1_json_str(&b, t->name);
        tn__v1_appendf(
            &b, ",\"delay_ms\":%" PRId64 ",\"lag_messages\":%" PRIu64 ",\"lag_complete\":%s}",
            t->fanout_delay_ms, lag, complete ? "true" : "false");
        first = false;
    }
    tn__v1_rchildren_json(v, &b, parent, &first);
    tn_buf_append(&b, "]}", 2);
    tn__v1_respond_buf(r, 200, &b);
}

int tn__v1_children_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "POST", "/v1/topics/{topic}/children", TN_JSON_MAX_BODY,
                           TN__V1_TOO_BIG, on_attach, v);
    rc = rc ? rc
            : tn_http_route(srv, "GET", "/v1/topics/{topic}/children", 0, TN__V1_NO_BODY,
                            on_children, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/topics/{topic}/children/{child}", 0, TN__V1_NO_BODY,
                            on_detach, v);
    return rc;
}
