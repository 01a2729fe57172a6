/* The /v1/cluster routes (admins only): the members the metastore knows,
 * partition moves, and draining a member (decommission). Every node
 * registers itself as a member (the metastore does, each heartbeat
 * interval); the leader marks one dead when it stops. Owned partitions
 * are the metastore's assignments. Partition moves are not made yet:
 * draining is recorded, and `moves` stays empty.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/cluster.h"

#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_members(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r))
        return;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    uint64_t leader = 0;
    const char *leader_api = "";
    if (tn_meta_leader(v->meta, &leader, &leader_api) != 0)
        leader = 0; /* none known: no member is marked */
    int64_t now_wall = tn_now_wall_ms();
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"members\":[", 12);
    for (size_t i = 0; i < s->nmembers; i++) {
        const tn_meta_member_t *m = &s->members[i];
        /* addr (the Raft address) stays for the clients of the first
         * build; raft_addr says the same by name. */
        tn__v1_appendf(&b, "%s{\"id\":\"%" PRIu64 "\",\"addr\":", i > 0 ? "," : "", m->id);
        tn__v1_json_str(&b, m->addr);
        tn_buf_append(&b, ",\"raft_addr\":", 13);
        tn__v1_json_str(&b, m->addr);
        tn_buf_append(&b, ",\"api_addr\":", 12);
        tn__v1_json_str(&b, m->api_addr);
        tn__v1_appendf(
            &b,
            ",\"status\":\"%s\",\"leader\":%s,\"draining\":%s,\"last_heartbeat_ms\":%" PRId64
            ",\"owned_partitions\":%" PRIu64 ",\"outbound_moves\":0",
            m->status == TN_MEMBER_DEAD ? "dead" : "alive", m->id == leader ? "true" : "false",
            m->draining ? "true" : "false", m->heartbeat_ms, tn_meta_state_owned(s, m->id));
        /* Replicated partitions: its session (fenced until it registers
         * again) and the incarnation of its data directory (null unknown). */
        tn__v1_appendf(&b, ",\"session\":\"%s\"", m->fenced ? "fenced" : "live");
        if (m->incarnation != 0)
            tn__v1_appendf(&b, ",\"incarnation\":\"%016" PRIx64 "\"", m->incarnation);
        else
            tn_buf_append(&b, ",\"incarnation\":null", 19);
        /* When it was last heard from, by this node's view: the age of its
         * last registration by this node's wall clock (any node), and the
         * leader's Raft contact with it (the leader only; null elsewhere). */
        if (m->heartbeat_ms > 0)
            tn__v1_appendf(&b, ",\"heartbeat_age_ms\":%" PRId64,
                           TN_MAX(now_wall - m->heartbeat_ms, (int64_t)0));
        else
            tn_buf_append(&b, ",\"heartbeat_age_ms\":null", 24);
        uint64_t ago = 0;
        bool recent = false;
        if (tn_meta_heard(v->meta, m->id, &ago, &recent) == 0)
            tn__v1_appendf(&b, ",\"last_heard_ms_ago\":%" PRIu64 ",\"heard_recently\":%s}", ago,
                           recent ? "true" : "false");
        else
            tn_buf_append(&b, ",\"last_heard_ms_ago\":null,\"heard_recently\":null}", 48);
    }
    tn_buf_append(&b, "]}", 2);
    tn__v1_respond_buf(r, 200, &b);
}

static void on_moves(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r))
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"moves\":[]}", 12);
    tn__v1_respond_buf(r, 200, &b);
}

typedef struct {
    tn_meta_req_t mreq;
    tn_http_request_t *r; /* NULL once the client left */
} drain_t;

static void drain_cancel(tn_http_request_t *r)
{
    drain_t *d = r->data;
    d->r = NULL;
}

static void on_drained(tn_meta_req_t *req, int status)
{
    drain_t *d = req->data;
    tn_http_request_t *r = d->r;
    tn_free(d);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    if (status == 0)
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
    else if (status == TN_ENOTFOUND)
        tn__v1_error(r, 404, "member not found", NULL);
    else
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
}

static void decommission(tn_v1_t *v, tn_http_request_t *r, bool draining)
{
    if (draining && !tn__v1_guard_write(r))
        return;
    if (!tn__v1_admin_only(v, r))
        return;
    if (draining && !tn__v1_caught_up(v, r))
        return;
    const tn_iov_t *id = tn_http_param(r, "id");
    char buf[24] = "";
    if (id != NULL && id->len < sizeof(buf)) {
        memcpy(buf, id->base, id->len);
        buf[id->len] = '\0';
    }
    char *end = NULL;
    unsigned long long n = strtoull(buf, &end, 10);
    if (buf[0] < '0' || buf[0] > '9' || *end != '\0' || n == 0) {
        tn__v1_error(r, 404, "member not found", NULL);
        return;
    }
    drain_t *d = tn_calloc(1, sizeof(*d));
    if (d == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_DRAIN;
    c.member.id = n;
    c.member.draining = draining;
    d->r = r;
    d->mreq.data = d;
    r->data = d;
    r->on_cancel = drain_cancel;
    if (tn_meta_propose(v->meta, &d->mreq, &c, on_drained) != 0) {
        r->on_cancel = NULL;
        tn_free(d);
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
        return;
    }
    TN_LOG(TN_LOG_NOTICE, "audit: %s %s member %llu", r->principal[0] ? r->principal : "(open)",
           draining ? "set draining on" : "cleared draining on", n);
}

static void on_decommission(tn_http_request_t *r, void *arg)
{
    decommission(arg, r, true);
}

static void on_recommission(tn_http_request_t *r, void *arg)
{
    decommission(arg, r, false);
}

int tn__v1_cluster_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "GET", "/v1/cluster/members", 0, NULL, on_members, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/cluster/moves", 0, NULL, on_moves, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/cluster/members/{id}/decommission", 0, NULL,
                            on_decommission, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/cluster/members/{id}/decommission", 0, NULL,
                            on_recommission, v);
    return rc;
}
