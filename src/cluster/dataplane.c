/* The data plane of node RPC: the COMMIT handler over the engine and the
 * call that sends one. See dataplane.h for the design. */
#include "core/platform.h"

#include "cluster/dataplane.h"

#include "cluster/reply.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/name.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define JSON "application/json"

struct tn_dataplane_s {
    uv_loop_t *loop;
    tn_broker_t *broker; /* borrowed */
    bool closing;        /* tn_dataplane_free ran: freed with the last handler */
    tn_dataplane_stats_t st;
    tn_hist_t age; /* oldest record's accept to durable here */
};

/* One COMMIT being served: from its decode to its answer. */
typedef struct {
    tn_dataplane_t *dp;
    tn_rpc_req_t *req;
    tn_pub_t pub; /* pinned to partition; in use from tn_broker_publish to on_committed */
    /* On the topic's waiters while it is being created or grown; a waiter
     * cannot be taken back, so the commit lives until it fires. */
    tn_waiter_t wait;
    uint32_t partition;
    uint32_t count;
    int64_t oldest_ms; /* the smallest created_ms of its records */
    size_t topic_len;
    char topic[256];
} commit_t;

int tn_dataplane_new(uv_loop_t *loop, tn_broker_t *b, tn_dataplane_t **out)
{
    tn_dataplane_t *dp = tn_calloc(1, sizeof(*dp));
    if (dp == NULL)
        return UV_ENOMEM;
    dp->loop = loop;
    dp->broker = b;
    tn_hist_init(&dp->age);
    *out = dp;
    return 0;
}

void tn_dataplane_free(tn_dataplane_t *dp)
{
    if (dp == NULL)
        return;
    dp->closing = true;
    if (dp->st.inflight == 0)
        tn_free(dp);
}

void tn_dataplane_stats(const tn_dataplane_t *dp, tn_dataplane_stats_t *out)
{
    *out = dp->st;
}

int tn_dataplane_metrics_write(const tn_dataplane_t *dp, tn_buf_t *out)
{
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "# HELP tern_cluster_commits_total Batches other nodes committed to this "
                     "node's partitions, by outcome.\n"
                     "# TYPE tern_cluster_commits_total counter\n"
                     "tern_cluster_commits_total{outcome=\"ok\"} %" PRIu64 "\n"
                     "tern_cluster_commits_total{outcome=\"refused\"} %" PRIu64 "\n"
                     "tern_cluster_commits_total{outcome=\"failed\"} %" PRIu64 "\n",
                     dp->st.commits, dp->st.refused, dp->st.failed);
    int rc = tn_buf_append(out, text, (size_t)n);
    if (rc == 0)
        rc = tn_hist_write(&dp->age, "tern_cluster_commit_age_seconds", "",
                           "From the accept of a committed batch's oldest record on the node "
                           "that took it to durable here (seconds; two nodes' wall clocks).",
                           out);
    return rc;
}

/* --- the handler ------------------------------------------------------------------ */

/* Answer c's request and free c (and dp, when it was freed meanwhile). */
static void finish(commit_t *c, uint16_t status, const char *body, size_t len)
{
    tn_dataplane_t *dp = c->dp;
    if (status == 200) {
        dp->st.commits++;
        dp->st.records += c->count;
        if (tn_rpc_req_cancelled(c->req))
            dp->st.late_replies++;
        int64_t age_ms = tn_now_wall_ms() - c->oldest_ms;
        tn_hist_observe(&dp->age, age_ms > 0 ? age_ms * 1000000 : 0);
    } else if (status < 500) {
        dp->st.refused++;
    } else {
        dp->st.failed++;
    }
    tn_rpc_reply(c->req, status, JSON, body, len);
    tn_pub_fini(&c->pub);
    tn_free(c);
    dp->st.inflight--;
    if (dp->closing && dp->st.inflight == 0)
        tn_free(dp);
}

/* An {"error":msg} answer; msg holds nothing JSON would escape (topic
 * names are [A-Za-z0-9._-#]). */
static void finish_error(commit_t *c, uint16_t status, const char *msg)
{
    char body[512];
    int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", msg);
    finish(c, status, body, (size_t)TN_MIN((size_t)n, sizeof(body) - 1));
}

/* 421: the partition lives on another node (owner 0: not placed yet). */
static void finish_remote(commit_t *c, uint64_t owner)
{
    char body[512], node[24];
    if (owner != 0)
        snprintf(node, sizeof(node), "\"%" PRIu64 "\"", owner);
    else
        snprintf(node, sizeof(node), "null");
    int n = snprintf(body, sizeof(body),
                     "{\"error\":\"partition %" PRIu32 " of %s is not on this node\","
                     "\"owner_node\":%s}",
                     c->partition, c->topic, node);
    finish(c, 421, body, (size_t)TN_MIN((size_t)n, sizeof(body) - 1));
}

/* The answer for an engine error from the lookup or the publish. */
static void finish_status(commit_t *c, int status)
{
    char msg[320];
    switch (status) {
    case TN_EREMOTE:
        finish_remote(c, c->pub.owner);
        return;
    case TN_ENOTFOUND:
        snprintf(msg, sizeof(msg), "no topic %s on this node", c->topic);
        finish_error(c, 404, msg);
        return;
    case UV_EBUSY:
        snprintf(msg, sizeof(msg), "topic %s is being deleted", c->topic);
        finish_error(c, 404, msg);
        return;
    case UV_EINVAL: /* the pin out of range: the partition count never shrinks */
        snprintf(msg, sizeof(msg), "no partition %" PRIu32 " in topic %s", c->partition, c->topic);
        finish_error(c, 416, msg);
        return;
    case TN_EDISKHIGH:
        finish_error(c, 507, "disk usage is above the high watermark; writes refused");
        return;
    case TN_ECLOSED:
        finish_error(c, 503, "this node is shutting down");
        return;
    default:
        snprintf(msg, sizeof(msg), "the commit failed: %s", tn_strerror(status));
        finish_error(c, 503, msg);
        return;
    }
}

static void on_committed(tn_pub_t *p, int status)
{
    commit_t *c = p->data;
    if (status != 0) {
        finish_status(c, status);
        return;
    }
    char body[64];
    int n = snprintf(body, sizeof(body), "{\"first_offset\":%" PRIu64 "}", p->first_offset);
    finish(c, 200, body, (size_t)n);
}

static void commit_start(commit_t *c);

static void on_topic_wait(tn_waiter_t *w, int status)
{
    (void)status; /* looked up again: the lookup says what became of it */
    commit_start(w->data);
}

/* Look the topic up (never creating it), check the partition, publish. */
static void commit_start(commit_t *c)
{
    if (tn_rpc_req_cancelled(c->req)) {
        /* Nothing appended yet: the caller's retry is the only copy. */
        finish_error(c, 503, "the request was cancelled before its commit started");
        return;
    }
    tn_broker_t *b = c->dp->broker;
    tn_topic_t *t = NULL;
    c->wait.cb = on_topic_wait;
    c->wait.data = c;
    int rc = tn_broker_topic(b, c->topic, c->topic_len, false, 0, &c->wait, &t);
    if (rc == UV_EAGAIN)
        return; /* being created, grown or placed: on_topic_wait */
    if (rc != 0) {
        finish_status(c, rc);
        return;
    }
    if (c->partition >= t->nparts) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no partition %" PRIu32 " in topic %s: it has %" PRIu32,
                 c->partition, c->topic, t->nparts);
        finish_error(c, 416, msg);
        return;
    }
    if (!tn_topic_part_local(t, c->partition)) {
        finish_remote(c, t->parts[c->partition]->owner);
        return;
    }
    rc = tn_broker_publish(b, c->topic, c->topic_len, &c->pub, 0, on_committed);
    if (rc != 0)
        finish_status(c, rc);
}

/* Copy the request's records into c->pub (bodies in one allocation),
 * each with its own delivery time. 0, UV_EINVAL with msg (a negative
 * time), or UV_ENOMEM. */
static int commit_fill(commit_t *c, const tn_wire_commit_t *wc, char *msg, size_t msglen)
{
    tn_rec_in_t *recs = tn_malloc((size_t)c->count * sizeof(*recs));
    if (recs == NULL)
        return UV_ENOMEM;
    tn_wire_commit_t it = *wc;
    tn_commit_rec_t rec;
    c->oldest_ms = INT64_MAX;
    for (uint32_t i = 0; tn_wire_commit_next(&it, &rec); i++) {
        if (rec.deliver_at_ms < 0 || rec.created_ms < 0) {
            snprintf(msg, msglen, "record %" PRIu32 " has a negative %s", i,
                     rec.deliver_at_ms < 0 ? "deliver_at_ms" : "created_ms");
            tn_free(recs);
            return UV_EINVAL;
        }
        recs[i] = (tn_rec_in_t){rec.key, rec.body, rec.deliver_at_ms};
        c->oldest_ms = TN_MIN(c->oldest_ms, rec.created_ms);
    }
    int rc = tn_pub_fill(&c->pub, recs);
    tn_free(recs);
    return rc;
}

static void on_commit(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_dataplane_t *dp = arg;
    commit_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        dp->st.failed++;
        tn_rpc_reply(req, 503, JSON, oom, strlen(oom));
        return;
    }
    c->dp = dp;
    c->req = req;
    dp->st.inflight++;
    if (dp->closing) {
        finish_error(c, 503, "this node is shutting down");
        return;
    }
    tn_wire_commit_t wc;
    char msg[320];
    int rc = tn_wire_commit_decode(payload, len, dp->broker->store->opts.max_body, &wc, msg,
                                   sizeof(msg));
    if (rc != 0) {
        finish_error(c, 400, msg);
        return;
    }
    if (!tn_name_valid_any(wc.topic, wc.topic_len)) {
        finish_error(c, 400, "invalid topic name");
        return;
    }
    if (wc.count == 0) {
        finish_error(c, 400, "a commit must carry at least one record");
        return;
    }
    memcpy(c->topic, wc.topic, wc.topic_len + 1);
    c->topic_len = wc.topic_len;
    c->partition = wc.partition;
    c->count = wc.count;
    rc = tn_pub_init(&c->pub, wc.count);
    if (rc == 0)
        rc = commit_fill(c, &wc, msg, sizeof(msg));
    if (rc == UV_EINVAL) {
        finish_error(c, 400, msg);
        return;
    }
    if (rc != 0) {
        finish_error(c, 503, "out of memory");
        return;
    }
    c->pub.data = c;
    c->pub.pinned = true;
    c->pub.pin = c->partition;
    commit_start(c);
}

void tn_dataplane_handlers(tn_dataplane_t *dp, tn_rpc_handler_t *out, size_t *n)
{
    out[0] = (tn_rpc_handler_t){TN_OP_COMMIT, TN_RPC_OP_COMMIT, on_commit, dp};
    *n = TN_DATAPLANE_HANDLERS;
}

/* --- the call ------------------------------------------------------------------------ */

static void set_error(tn_commit_call_t *c, const char *msg)
{
    snprintf(c->error, sizeof(c->error), "%s", msg);
}

int tn_commit_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_commit_call_t *c)
{
    tn_store_reply_t r;
    int rc = tn_store_reply_decode(status, body, len, "commit", "owner_node", &r);
    c->http_status = status;
    c->first_offset = r.first_offset;
    c->owner = r.node;
    set_error(c, r.error);
    if (rc != TN_STORE_REPLY_ERROR)
        return rc;
    switch (status) {
    case 400:
        return UV_EINVAL;
    case 404:
        return TN_ENOTFOUND;
    case 416:
        return UV_ERANGE;
    case 503:
        return UV_EAGAIN;
    case 507:
        return TN_EDISKHIGH;
    default:
        return TN_EPROTO; /* a status COMMIT does not answer, with its sentence */
    }
}

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    tn_commit_call_t *c = arg;
    c->call = NULL;
    if (status != 0) {
        c->http_status = 0;
        set_error(c, err != NULL ? err : tn_strerror(status));
        c->cb(c, status);
        return;
    }
    c->cb(c, tn_commit_reply_decode(reply->status, reply->body, reply->body_len, c));
}

int tn_commit_call(tn_rpc_t *rpc, const char *peer_addr, const char *topic, uint32_t partition,
                   const tn_commit_rec_t *recs, uint32_t n, uint64_t timeout_ms,
                   tn_commit_call_t *c, tn_commit_cb cb)
{
    if (n > 0 && tn_commit_encoded_size(topic, recs, n) > TN_WIRE_MAX_PAYLOAD)
        return TN_ETOOBIG;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_commit_encode(&b, topic, partition, recs, n);
    if (rc != 0) {
        tn_buf_fini(&b);
        return rc;
    }
    c->first_offset = 0;
    c->owner = 0;
    c->http_status = 0;
    c->error[0] = '\0';
    c->cb = cb;
    rc = tn_rpc_call(rpc, peer_addr, TN_OP_COMMIT, tn_buf_data(&b), tn_buf_size(&b), timeout_ms,
                     on_reply, c, &c->call);
    tn_buf_fini(&b);
    return rc;
}

void tn_commit_call_cancel(tn_commit_call_t *c)
{
    if (c->call != NULL)
        tn_rpc_call_cancel(c->call);
}
