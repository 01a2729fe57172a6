/* The /v1/cluster routes (admins only): the members the metastore knows,
 * draining a member (decommission) and removing an empty one (DELETE
 * /v1/cluster/members/{id}, meta.h "Removal"); and the forced
 * election of a replicated partition's leader (POST
 * /v1/topics/{topic}/partitions/{p}/leader, docs/replication.md "What an
 * operator sees and does"). Every node
 * registers itself as a member (the metastore does, each heartbeat
 * interval); the leader marks one dead when it stops. Owned partitions
 * are the metastore's assignments; outbound moves, the partition moves
 * under way that take a replica off the member (the moves routes are in
 * moves.c). The metastore leader moves a draining member's replicas off
 * it (meta.c check_decommission).
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/cluster.h"

#include "api/v1/common.h"

#include "cluster/replica.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "meta/partstate.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The voters a members answer lists at most (ids are 1..1023). */
#define TN_V1_VOTERS_MAX 1024

/* ,"raft_voters":["1",...]: this node's view of the Raft configuration. */
static void append_voters(tn_buf_t *b, const uint64_t *ids, size_t n)
{
    tn_buf_append(b, ",\"raft_voters\":[", 16);
    for (size_t k = 0; k < n; k++)
        tn__v1_appendf(b, "%s\"%" PRIu64 "\"", k > 0 ? "," : "", ids[k]);
    tn_buf_append(b, "]", 1);
}

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
    uint64_t voters[TN_V1_VOTERS_MAX];
    size_t nvoters = TN_MIN(tn_meta_voters(v->meta, voters, TN_V1_VOTERS_MAX), TN_V1_VOTERS_MAX);
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
            ",\"owned_partitions\":%" PRIu64 ",\"outbound_moves\":%" PRIu64,
            m->status == TN_MEMBER_DEAD ? "dead" : "alive", m->id == leader ? "true" : "false",
            m->draining ? "true" : "false", m->heartbeat_ms, tn_meta_state_owned(s, m->id),
            tn_meta_state_outbound_moves(s, m->id));
        /* A decommission's progress: the replicated partitions it still
         * holds a replica of; done once it holds nothing (no factor-1
         * partition either: they move too, owners[p] following). */
        uint64_t held = tn_meta_state_replicas_held(s, m->id);
        tn__v1_appendf(&b, ",\"replica_partitions\":%" PRIu64 ",\"decommissioned\":%s", held,
                       m->draining && held == 0 && tn_meta_state_owned(s, m->id) == 0 ? "true"
                                                                                      : "false");
        /* Replicated partitions: its session (fenced until it registers
         * again) and the incarnation of its data directory (null unknown). */
        tn__v1_appendf(&b, ",\"session\":\"%s\"", m->fenced ? "fenced" : "live");
        /* A voter of the metastore, as this node's Raft configuration says. */
        bool voter = false;
        for (size_t k = 0; k < nvoters; k++)
            voter = voter || voters[k] == m->id;
        tn__v1_appendf(&b, ",\"voter\":%s", voter ? "true" : "false");
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
    tn_buf_append(&b, "]", 1);
    append_voters(&b, voters, nvoters);
    /* Removed members' tombstones: their old data directories stay out. */
    tn_buf_append(&b, ",\"removed\":[", 12);
    for (size_t i = 0; i < s->nremoved; i++)
        tn__v1_appendf(&b, "%s{\"id\":\"%" PRIu64 "\",\"removed_ms\":%" PRId64 "}",
                       i > 0 ? "," : "", s->removed[i].id, s->removed[i].removed_ms);
    tn_buf_append(&b, "]}", 2);
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
        tn__v1_meta_error(r, status);
}

static void on_decommission(tn_http_request_t *r, void *arg);

static void decommission(tn_v1_t *v, tn_http_request_t *r, bool draining)
{
    if (draining && !tn__v1_guard_write(r))
        return;
    if (!tn__v1_admin_only(v, r))
        return;
    if (draining && !tn__v1_caught_up(v, r, on_decommission))
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

/* --- removing a member ------------------------------------------------------------ */

/* DESIGN: DELETE /v1/cluster/members/{id} (docs/cluster.md "Removing a
 * member").
 *   1. Admins only (403), a caught-up metastore replica (503); the id
 *      (404). The rules run on this replica first for a clear answer
 *      (tn_meta_state_remove_check): 404 no such member, 409 while it
 *      holds partitions ("member 4 still holds 3 partitions: decommission
 *      it first") or when it would leave the metastore below three
 *      members (or with none).
 *   2. MEMBER_REMOVE (with the data directory incarnation seen here) goes
 *      to the metastore, whose state machine decides again on its current
 *      records: its refusals answer as above (TN_ECHANGED: 409, the member
 *      registered with another data directory meanwhile); no leader 503.
 *   3. Once applied, this replica is confirmed current (tn_meta_confirm:
 *      a re-sent copy that found the member gone answered TN_ENOTFOUND,
 *      and the tombstone here, of that incarnation, says it was ours).
 *   4. The metastore leader then takes the member out of the Raft
 *      configuration (meta.c check_removals). The answer waits for this
 *      node's configuration to drop it, polling every REMOVE_POLL_MS:
 *      200 {"id","removed":true,"raft_voters":[...]}; after REMOVE_WAIT_MS
 *      202 with the same and "raft_configuration":"pending" (GET
 *      /v1/cluster/members shows raft_voters). */

#define REMOVE_POLL_MS 100
#define REMOVE_WAIT_MS 15000

typedef struct {
    tn_meta_req_t mreq;
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    uint64_t id;
    uint64_t incarnation; /* the member's, as this replica saw it */
    uint64_t deadline;    /* loop ms */
    bool applied;         /* the metastore answered 0: removed */
    uv_timer_t timer;
    bool timer_on; /* timer initialised: freed in its close callback */
} remove_t;

static void remove_cancel(tn_http_request_t *r)
{
    remove_t *x = r->data;
    x->r = NULL;
}

static void on_remove_closed(uv_handle_t *h)
{
    tn_free(h->data);
}

/* The end of x: r answered already (or gone). */
static void remove_free(remove_t *x)
{
    if (x->r != NULL)
        x->r->on_cancel = NULL;
    if (x->timer_on)
        uv_close((uv_handle_t *)&x->timer, on_remove_closed);
    else
        tn_free(x);
}

/* 409 or 404 for a refusal rc, worded from this replica's records. */
static void remove_refused(tn_v1_t *v, tn_http_request_t *r, uint64_t id, int rc)
{
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    char msg[256];
    if (rc == TN_ENOTFOUND) {
        tn__v1_error(r, 404,
                     tn_meta_state_removed(s, id) != NULL ? "member not found: it was removed"
                                                          : "member not found",
                     NULL);
    } else if (rc == UV_EBUSY) {
        uint64_t held = tn_meta_state_held(s, id);
        snprintf(msg, sizeof(msg),
                 "member %" PRIu64 " still holds %" PRIu64 " partition%s: decommission it first",
                 id, held, held == 1 ? "" : "s");
        tn__v1_error(r, 409, msg, NULL);
    } else if (rc == UV_EPERM) {
        snprintf(msg, sizeof(msg),
                 "removing member %" PRIu64 " would leave %zu member%s: the metastore keeps at "
                 "least three voters in a cluster of three or more (add a member first)",
                 id, s->nmembers > 0 ? s->nmembers - 1 : 0, s->nmembers == 2 ? "" : "s");
        tn__v1_error(r, 409, msg, NULL);
    } else if (rc == TN_ECHANGED) {
        snprintf(msg, sizeof(msg),
                 "member %" PRIu64 " registered with another data directory meanwhile: look "
                 "at it again",
                 id);
        tn__v1_error(r, 409, msg, NULL);
    } else {
        tn__v1_meta_error(r, rc);
    }
}

static void remove_answer(remove_t *x, bool done)
{
    uint64_t voters[TN_V1_VOTERS_MAX];
    size_t n = TN_MIN(tn_meta_voters(x->v->meta, voters, TN_V1_VOTERS_MAX), TN_V1_VOTERS_MAX);
    tn_buf_t b;
    tn_buf_init(&b);
    tn__v1_appendf(&b, "{\"id\":\"%" PRIu64 "\",\"removed\":true", x->id);
    append_voters(&b, voters, n);
    if (!done)
        tn_buf_append(&b, ",\"raft_configuration\":\"pending\"", 31);
    tn_buf_append(&b, "}", 1);
    tn_http_request_t *r = x->r;
    r->on_cancel = NULL;
    x->r = NULL;
    tn__v1_respond_buf(r, done ? 200 : 202, &b);
}

static bool still_voter(tn_meta_t *meta, uint64_t id)
{
    uint64_t voters[TN_V1_VOTERS_MAX];
    size_t n = TN_MIN(tn_meta_voters(meta, voters, TN_V1_VOTERS_MAX), TN_V1_VOTERS_MAX);
    for (size_t k = 0; k < n; k++)
        if (voters[k] == id)
            return true;
    return false;
}

static void on_remove_poll(uv_timer_t *t)
{
    remove_t *x = t->data;
    if (x->r == NULL) {
        uv_timer_stop(t);
        remove_free(x);
        return;
    }
    bool done = !still_voter(x->v->meta, x->id);
    if (!done && uv_now(x->v->loop) < x->deadline)
        return;
    uv_timer_stop(t);
    remove_answer(x, done);
    remove_free(x);
}

/* Step 3: this replica applied everything the leader had committed. */
static void on_remove_current(void *arg, int status)
{
    remove_t *x = arg;
    if (x->r == NULL) {
        remove_free(x);
        return;
    }
    const tn_meta_removed_t *t = tn_meta_state_removed(tn_meta_state(x->v->meta), x->id);
    if (status != 0 && x->applied) {
        /* Removed; this replica could not be confirmed current in time. */
        remove_answer(x, false);
        remove_free(x);
        return;
    }
    if (status != 0 || t == NULL || (x->incarnation != 0 && t->incarnation != x->incarnation)) {
        remove_refused(x->v, x->r, x->id, status != 0 ? TN_ECLOSED : TN_ENOTFOUND);
        remove_free(x);
        return;
    }
    if (!still_voter(x->v->meta, x->id)) {
        remove_answer(x, true);
        remove_free(x);
        return;
    }
    x->deadline = uv_now(x->v->loop) + REMOVE_WAIT_MS;
    if (uv_timer_init(x->v->loop, &x->timer) != 0) {
        remove_answer(x, false);
        remove_free(x);
        return;
    }
    x->timer_on = true;
    x->timer.data = x;
    uv_timer_start(&x->timer, on_remove_poll, REMOVE_POLL_MS, REMOVE_POLL_MS);
}

static void on_removed(tn_meta_req_t *req, int status)
{
    remove_t *x = req->data;
    if (x->r == NULL) {
        remove_free(x);
        return;
    }
    if (status == 0 || status == TN_ENOTFOUND) {
        /* TN_ENOTFOUND may be a copy sent again after a failover, the
         * first having removed it: the tombstone tells (step 3). */
        x->applied = status == 0;
        if (status == 0)
            TN_LOG(TN_LOG_NOTICE, "member %" PRIu64 " removed from the metastore", x->id);
        if (tn_meta_confirm(x->v->meta, on_remove_current, x) == 0)
            return;
        status = status == 0 ? TN_ECLOSED : status;
        if (status == TN_ECLOSED) {
            remove_answer(x, false);
            remove_free(x);
            return;
        }
    }
    remove_refused(x->v, x->r, x->id, status);
    remove_free(x);
}

static void on_remove_member(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r) || !tn__v1_caught_up(v, r, on_remove_member))
        return;
    const tn_iov_t *idp = tn_http_param(r, "id");
    char buf[24] = "";
    if (idp != NULL && idp->len < sizeof(buf)) {
        memcpy(buf, idp->base, idp->len);
        buf[idp->len] = '\0';
    }
    char *end = NULL;
    unsigned long long id = strtoull(buf, &end, 10);
    if (buf[0] < '0' || buf[0] > '9' || *end != '\0' || id == 0) {
        tn__v1_error(r, 404, "member not found", NULL);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    int rc = tn_meta_state_remove_check(s, id, NULL);
    if (rc != 0) {
        remove_refused(v, r, id, rc);
        return;
    }
    remove_t *x = tn_calloc(1, sizeof(*x));
    if (x == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    x->r = r;
    x->v = v;
    x->id = id;
    x->incarnation = tn_meta_member_find(s, id)->incarnation;
    x->mreq.data = x;
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_MEMBER_REMOVE;
    c.member.id = id;
    c.member.incarnation = x->incarnation;
    c.removed_ms = tn_now_wall_ms();
    r->data = x;
    r->on_cancel = remove_cancel;
    if (tn_meta_propose(v->meta, &x->mreq, &c, on_removed) != 0) {
        r->on_cancel = NULL;
        tn_free(x);
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
        return;
    }
    TN_LOG(TN_LOG_NOTICE, "audit: %s removes member %llu",
           r->principal[0] ? r->principal : "(open)", id);
}

/* --- forced leader election ------------------------------------------------------ */

/* DESIGN: POST /v1/topics/{topic}/partitions/{p}/leader
 *   {"node": "3", "unclean": true}
 *   1. Admins only (403), a write (the cross-site guard, 415), a caught-up
 *      metastore replica (503); the body (400), the topic and partition
 *      (404) and a replicated partition (409: a factor-1 partition has one
 *      owner and no election).
 *   2. This node's metastore replica is confirmed current
 *      (tn_meta_confirm), then the rules run on a copy of the partition's
 *      state (tn_pstate_force_leader, the function the state machine
 *      applies): a refusal is 409 with its reason (not a replica, not
 *      live, not an eligible ISR member without "unclean"), and nothing is
 *      proposed.
 *   3. Otherwise PART_LEADER goes to the metastore (tn_meta_force_leader)
 *      and is logged at warn. Its answer: 0 is 200 with the partition's
 *      state once this replica applied it too (a second confirm), so the
 *      answer is what was done even if the state moved after step 2;
 *      TN_ENOTFOUND 404; anything else 503 + Retry-After. A refusal there
 *      (UV_EINVAL, UV_EPERM) means the state the metastore applied it to
 *      was not the one step 2 judged: an ISR change (a follower leaving or
 *      rejoining through its leader's CAS) committed in between. The
 *      election is judged again, from step 2 (a new confirm, the rules on
 *      the state as it is now: a refusal by them is 409 with their reason),
 *      and proposed again, at most FORCE_ATTEMPTS times in all; a state
 *      that keeps changing under it is 503 + Retry-After.
 *   4. For an unclean election the answer says how many records may be
 *      lost: "records_at_risk", the records below the high watermark the
 *      answering node last saw that the new leader lacks, when the answering
 *      node is the new leader and holds its replica (a lower bound: the old
 *      ISR may have acknowledged more since), else null (unknown). */

#define LEADER_REFUSED_CHANGED                                                                     \
    "the partition's state kept changing while the election was proposed: try again"
#define FORCE_ATTEMPTS 5

typedef struct {
    tn_meta_req_t mreq;
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    char topic[TN_NAME_MAX + 1];
    uint32_t partition;
    uint32_t node;
    bool unclean;
    unsigned attempts;  /* proposals made */
    tn_pstate_t expect; /* the state the rules gave on the copy */
    bool have_risk;
    uint64_t risk;
} force_t;

typedef struct {
    char node[24];
    int64_t node_int;
    bool unclean;
} force_body_t;

/* The rules' verdict on forcing node for ps now: 0 with *out the state
 * the election makes, or an error with the reason in err. */
static int force_check(tn_v1_t *v, const tn_pstate_t *ps, uint32_t node, bool unclean,
                       tn_pstate_t *out, char *err, size_t errlen)
{
    tn_pstate_node_t buf[64];
    tn_pstate_nodes_t nodes;
    tn_meta_state_nodes(tn_meta_state(v->meta), buf, TN_ARRAY_SIZE(buf), &nodes);
    *out = *ps;
    err[0] = '\0';
    int rc = tn_pstate_force_leader(out, node, unclean, &nodes, err, errlen);
    if (rc != 0 && err[0] == '\0')
        snprintf(err, errlen, "%s", tn_strerror(rc));
    return rc;
}

static void force_cancel(tn_http_request_t *r)
{
    force_t *f = r->data;
    f->r = NULL;
}

static void force_answer(force_t *f, const tn_pstate_t *ps)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"topic\":", 9);
    tn__v1_json_str(&b, f->topic);
    tn__v1_appendf(&b,
                   ",\"partition\":%" PRIu32 ",\"leader\":\"%" PRIu32 "\",\"leader_epoch\":%" PRIu32
                   ",\"unclean\":%s,\"isr\":[",
                   f->partition, ps->leader, ps->leader_epoch, ps->unclean ? "true" : "false");
    for (uint32_t i = 0; i < ps->nisr; i++)
        tn__v1_appendf(&b, "%s\"%" PRIu32 "\"", i > 0 ? "," : "", ps->isr[i].node);
    tn_buf_append(&b, "]", 1);
    if (ps->unclean && f->have_risk)
        tn__v1_appendf(&b, ",\"records_at_risk\":%" PRIu64 "}", f->risk);
    else if (ps->unclean)
        tn_buf_append(&b, ",\"records_at_risk\":null}", 24);
    else
        tn_buf_append(&b, "}", 1);
    tn__v1_respond_buf(f->r, 200, &b);
}

/* The command is applied on the metastore's leader and, after the
 * confirm, on this node's replica too: the answer shows the state as it
 * is, which may differ from the rules' verdict on the copy (the state may
 * have moved in between). */
static void on_applied_here(void *arg, int status)
{
    force_t *f = arg;
    if (f->r != NULL) {
        f->r->on_cancel = NULL;
        const tn_pstate_t *now =
            tn_meta_state_pstate(tn_meta_state(f->v->meta), f->topic, f->partition);
        /* Not applied here in time (UV_ETIMEDOUT) or gone since: the
         * verdict on the copy is the best answer left. */
        force_answer(f, status == 0 && now != NULL ? now : &f->expect);
    }
    tn_free(f);
}

static void on_current(void *arg, int status);

static void on_forced(tn_meta_req_t *req, int status)
{
    force_t *f = req->data;
    tn_http_request_t *r = f->r;
    if (status == 0) {
        TN_LOG(TN_LOG_WARN, "forced election applied: %s/%" PRIu32 " led by node %" PRIu32 "%s",
               f->topic, f->partition, f->node, f->unclean ? " (unclean requested)" : "");
        if (r != NULL && tn_meta_confirm(f->v->meta, on_applied_here, f) == 0)
            return;
        on_applied_here(f, TN_ECLOSED);
        return;
    }
    if (r == NULL)
        goto done;
    if ((status == UV_EINVAL || status == UV_EPERM) && f->attempts < FORCE_ATTEMPTS) {
        /* Judged on a state that moved before the command applied: judge
         * again on a current view (on_current answers a refusal by the
         * rules, or proposes again). */
        TN_LOG(TN_LOG_NOTICE,
               "forced election of %s/%" PRIu32 " (node %" PRIu32
               ") refused on a changed state (%s): judged again",
               f->topic, f->partition, f->node, tn_strerror(status));
        if (tn_meta_confirm(f->v->meta, on_current, f) == 0)
            return;
        status = TN_ECLOSED;
    }
    r->on_cancel = NULL;
    if (status == TN_ENOTFOUND) {
        tn__v1_error(r, 404, "no such topic or partition", NULL);
    } else if (status == UV_EINVAL || status == UV_EPERM) {
        tn__v1_error(r, 503, LEADER_REFUSED_CHANGED, "Retry-After: 1\r\n");
    } else {
        tn__v1_meta_error(r, status);
    }
done:
    tn_free(f);
}

/* The body: node as a string of digits (as /v1/cluster/members shows ids)
 * or a number, unclean a boolean (default false). false after 400. */
static bool force_body(tn_http_request_t *r, uint32_t *node, bool *unclean)
{
    static const tn_jfield_t as_str[] = {
        {"node", TN_JF_STR, offsetof(force_body_t, node), sizeof(((force_body_t *)0)->node) - 1},
        {"unclean", TN_JF_BOOL, offsetof(force_body_t, unclean), 0},
    };
    static const tn_jfield_t as_int[] = {
        {"node", TN_JF_INT, offsetof(force_body_t, node_int), 0},
        {"unclean", TN_JF_BOOL, offsetof(force_body_t, unclean), 0},
    };
    force_body_t b;
    memset(&b, 0, sizeof(b));
    bool given[2];
    char err[192];
    const char *body = tn_buf_data(&r->body);
    size_t len = tn_buf_size(&r->body);
    int rc = tn_json_object(body, len, as_str, 2, &b, given, err, sizeof(err));
    if (rc == UV_EINVAL) {
        char err2[192];
        memset(&b, 0, sizeof(b));
        if (tn_json_object(body, len, as_int, 2, &b, given, err2, sizeof(err2)) == 0) {
            rc = 0;
            snprintf(b.node, sizeof(b.node), "%" PRId64, b.node_int);
        }
    }
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return false;
    }
    if (rc != 0) {
        tn__v1_error(r, 400, err, NULL);
        return false;
    }
    if (!given[0]) {
        tn__v1_error(r, 400, "node required: the member id of the new leader", NULL);
        return false;
    }
    char *end = NULL;
    unsigned long long n = strtoull(b.node, &end, 10);
    if (b.node[0] < '0' || b.node[0] > '9' || *end != '\0' || n == 0 || n > UINT32_MAX) {
        tn__v1_error(r, 400, "node must be a member id (a positive integer)", NULL);
        return false;
    }
    *node = (uint32_t)n;
    *unclean = given[1] && b.unclean;
    return true;
}

/* Step 2 on a replica confirmed current (everything committed before
 * the request is applied here): the rules on a copy, then the proposal. */
static void on_current(void *arg, int status)
{
    force_t *f = arg;
    tn_http_request_t *r = f->r;
    if (r == NULL) {
        tn_free(f);
        return;
    }
    tn_v1_t *v = f->v;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(v->meta), f->topic);
    const tn_pstate_t *ps =
        e != NULL ? tn_meta_state_pstate(tn_meta_state(v->meta), f->topic, f->partition) : NULL;
    char err[192];
    if (status != 0) {
        r->on_cancel = NULL;
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
    } else if (e == NULL || f->partition >= e->rec.partitions) {
        r->on_cancel = NULL;
        tn__v1_error(r, 404, e == NULL ? "topic not found" : "no such partition", NULL);
    } else if (ps == NULL) {
        r->on_cancel = NULL;
        tn__v1_error(r, 409,
                     e->rec.replication_factor > 1
                         ? "the partition is not placed yet: no member was alive to hold it"
                         : "the topic is not replicated (replication_factor 1): a partition has "
                           "one owner and no leader election",
                     NULL);
    } else if (force_check(v, ps, f->node, f->unclean, &f->expect, err, sizeof(err)) != 0) {
        r->on_cancel = NULL;
        tn__v1_error(r, 409, err, NULL);
    } else {
        uint64_t hw, log_end;
        if (f->unclean && v->replica != NULL && f->node == v->node_id &&
            tn_replica_part_info(v->replica, f->topic, f->partition, &hw, &log_end) == 0) {
            f->have_risk = true;
            f->risk = hw > log_end ? hw - log_end : 0;
        }
        uint32_t was_leader = ps->leader, was_epoch = ps->leader_epoch;
        memset(&f->mreq, 0, sizeof(f->mreq));
        f->mreq.data = f;
        f->attempts++;
        int rc = tn_meta_force_leader(v->meta, &f->mreq, f->topic, f->partition, f->node,
                                      f->unclean, on_forced);
        if (rc == 0) {
            TN_LOG(TN_LOG_WARN,
                   "audit: %s forces an%s election of %s/%" PRIu32 ": node %" PRIu32
                   " (leader was %" PRIu32 ", epoch %" PRIu32 ", attempt %u)",
                   r->principal[0] ? r->principal : "(open)", f->unclean ? " UNCLEAN" : "",
                   f->topic, f->partition, f->node, was_leader, was_epoch, f->attempts);
            return;
        }
        r->on_cancel = NULL;
        tn__v1_error(r, 503,
                     rc == UV_ENOMEM ? "out of memory" : "control plane temporarily unavailable",
                     "Retry-After: 1\r\n");
    }
    tn_free(f);
}

static void on_force_leader(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r) ||
        !tn__v1_caught_up(v, r, on_force_leader))
        return;
    uint32_t node;
    bool unclean;
    if (!force_body(r, &node, &unclean))
        return;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    uint32_t p;
    if (e == NULL || !tn__v1_path_partition(r, e, &p))
        return;
    force_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    snprintf(f->topic, sizeof(f->topic), "%s", topic);
    f->partition = p;
    f->node = node;
    f->unclean = unclean;
    f->v = v;
    f->r = r;
    r->data = f;
    r->on_cancel = force_cancel;
    /* The rules are checked on a current view: members that just became
     * live, an ISR that just changed. */
    if (tn_meta_confirm(v->meta, on_current, f) != 0) {
        r->on_cancel = NULL;
        tn_free(f);
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
    }
}

int tn__v1_cluster_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "GET", "/v1/cluster/members", 0, TN__V1_NO_BODY, on_members, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/cluster/members/{id}/decommission", 0, TN__V1_NO_BODY,
                            on_decommission, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/cluster/members/{id}/decommission", 0,
                            TN__V1_NO_BODY, on_recommission, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/cluster/members/{id}", 0, TN__V1_NO_BODY,
                            on_remove_member, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/partitions/{p}/leader",
                            TN_JSON_MAX_BODY, TN__V1_TOO_BIG, on_force_leader, v);
    return rc;
}
