/* The /v1 door: its guard (authentication of every /v1 request, and of
 * nsqd's endpoints when credentials are given) and the table of its
 * routes, which live in the route files beside this one (topics.c,
 * produce.c, consume.c, children.c, users.c, cluster.c); its lifetime.
 * See v1.h.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1.h"

#include "api/v1/children.h"
#include "api/v1/cluster.h"
#include "api/v1/moves.h"
#include "api/v1/rebalance.h"
#include "api/v1/common.h"
#include "api/v1/consume.h"
#include "api/v1/drain.h"
#include "api/v1/forward.h"
#include "api/v1/produce.h"
#include "api/v1/remotes.h"
#include "api/v1/storage.h"
#include "api/v1/topics.h"
#include "api/v1/users.h"

#include "core/alloc.h"
#include "api/consume.h"
#include "api/fanout.h"
#include "api/rchild.h"
#include "api/users.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS_PREFIX "/v1/ws/"

/* --- authentication ------------------------------------------------------------ */

typedef struct {
    tn_authn_req_t req;
    tn_http_request_t *r;
    tn_v1_t *v;
    bool nsq; /* for one of nsqd's endpoints: answered in their style */
    char user[TN_USERNAME_MAX + 1];
} authing_t;

static const char *lookup(void *arg, const char *user)
{
    tn_v1_t *v = arg;
    const tn_meta_user_t *u = tn_meta_user_find(tn_meta_state(v->meta), user);
    return u != NULL ? u->hash : NULL;
}

static void unauthorized(tn_http_request_t *r)
{
    tn__v1_error(r, 401, "authentication required", "WWW-Authenticate: Basic realm=\"tern\"\r\n");
}

/* Order keys (spans) by length, then bytes. */
static int key_cmp(const void *a, const void *b)
{
    const tn_iov_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->base, y->base, x->len);
}

/* A query parameter (its raw name) given more than once in q, into *dup:
 * 1, 0 (none), or UV_ENOMEM. Sorting the names keeps a query of many
 * distinct ones cheap. */
static int repeated_param(tn_iov_t q, tn_iov_t *dup)
{
    size_t n = 1;
    for (size_t i = 0; i < q.len; i++)
        n += q.base[i] == '&';
    if (q.len == 0 || n < 2)
        return 0;
    tn_iov_t few[16];
    tn_iov_t *keys = n <= TN_ARRAY_SIZE(few) ? few : tn_malloc(n * sizeof(*keys));
    if (keys == NULL)
        return UV_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i <= q.len;) {
        size_t start = i;
        while (i < q.len && q.base[i] != '&')
            i++;
        const char *eq = memchr(q.base + start, '=', i - start);
        size_t klen = eq != NULL ? (size_t)(eq - (q.base + start)) : i - start;
        if (klen > 0) /* "a&&b": an empty pair names nothing */
            keys[k++] = tn_iov(q.base + start, klen);
        i++;
    }
    qsort(keys, k, sizeof(*keys), key_cmp);
    int found = 0;
    for (size_t i = 1; i < k && !found; i++) {
        if (key_cmp(&keys[i - 1], &keys[i]) == 0) {
            *dup = keys[i];
            found = 1;
        }
    }
    if (keys != few)
        tn_free(keys);
    return found;
}

/* Let an authenticated /v1 request through to its route, unless a query
 * parameter comes twice: no /v1 route takes a parameter more than once,
 * so a second value is a client's mistake, refused here for every route
 * rather than letting one value win silently. */
static void pass(tn_http_request_t *r)
{
    tn_iov_t path = r->head.path;
    tn_iov_t dup;
    int rc =
        path.len >= 3 && memcmp(path.base, "/v1", 3) == 0 ? repeated_param(r->head.query, &dup) : 0;
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (rc == 1) {
        char msg[160];
        snprintf(msg, sizeof(msg), "invalid argument: query parameter %.*s given more than once",
                 (int)TN_MIN(dup.len, (size_t)64), dup.base);
        tn__v1_error(r, 400, msg, NULL);
        return;
    }
    tn_http_resume(r);
}

static void on_checked(tn_authn_req_t *req, tn_authn_result_t result)
{
    authing_t *a = req->data;
    tn_http_request_t *r = a->r;
    r->on_cancel = NULL;
    bool nsq = a->nsq;
    /* Refused while the users cannot be judged here (api/users.h): the
     * replica is still replaying its log (a node starting, or restarting
     * after a crash), the root user's seed is not applied yet, or the
     * replica is not caught up. The user may exist, or will, so the truth
     * is "not yet", not "wrong credentials": the same for any credentials,
     * right or wrong, as the node cannot tell them apart. */
    bool early = result == TN_AUTHN_DENIED && !tn_users_ready(a->v->meta);
    if (result == TN_AUTHN_OK) {
        snprintf(r->principal, sizeof(r->principal), "%s", a->user);
        tn_free(a);
        if (nsq)
            tn_http_resume(r); /* nsqd's endpoints take the first of a repeated parameter */
        else
            pass(r);
        return;
    }
    tn_free(a);
    if (early && nsq)
        tn__v1_nsq_refuse(r, 503, "NOT_READY");
    else if (early)
        tn__v1_error(r, 503, "control plane not caught up", "Retry-After: 1\r\n");
    else if (nsq)
        tn__v1_nsq_refuse(r, result == TN_AUTHN_THROTTLED ? 429 : 401,
                          result == TN_AUTHN_THROTTLED ? "TOO_MANY_FAILED_LOGINS" : "AUTH_FAILED");
    else if (result == TN_AUTHN_THROTTLED)
        tn__v1_error(r, 429, "too many failed authentication attempts", "Retry-After: 12\r\n");
    else
        unauthorized(r);
}

static void on_auth_cancel(tn_http_request_t *r)
{
    authing_t *a = r->data;
    tn_authn_cancel(&a->req);
    tn_free(a);
}

static void guard(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    tn_iov_t path = r->head.path;
    size_t wl = sizeof(WS_PREFIX) - 1;
    if (path.len >= wl && memcmp(path.base, WS_PREFIX, wl) == 0) {
        tn_http_resume(r); /* the live feed checks its own credentials and query */
        return;
    }
    if (!v->o.security) {
        pass(r);
        return;
    }
    const tn_iov_t *h = tn_http_header(&r->head, "authorization");
    char password[TN_PASSWORD_MAX + 1];
    size_t plen = 0;
    authing_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (h == NULL || tn_basic_parse(h->base, h->len, a->user, password, &plen) != 0) {
        tn_free(a);
        unauthorized(r);
        return;
    }
    a->r = r;
    a->v = v;
    a->req.data = a;
    r->data = a;
    r->on_cancel = on_auth_cancel;
    tn_authn_check(v->authn, &a->req, a->user, password, plen, on_checked);
    memset(password, 0, sizeof(password));
}

/* nsqd's endpoints: credentials are optional (nsqd has none; a topic
 * without an owner stays open), but when given they must be right, and
 * the handler then knows who asks (r->principal) for a protected topic
 * (api/access.h). */
static void nsq_guard(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    const tn_iov_t *h = tn_http_header(&r->head, "authorization");
    if (!v->o.security || h == NULL) {
        tn_http_resume(r);
        return;
    }
    authing_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL) {
        tn__v1_nsq_refuse(r, 503, "E_OUT_OF_MEMORY");
        return;
    }
    char password[TN_PASSWORD_MAX + 1];
    size_t plen = 0;
    if (tn_basic_parse(h->base, h->len, a->user, password, &plen) != 0) {
        tn_free(a);
        tn__v1_nsq_refuse(r, 401, "AUTH_FAILED");
        return;
    }
    a->r = r;
    a->v = v;
    a->nsq = true;
    a->req.data = a;
    r->data = a;
    r->on_cancel = on_auth_cancel;
    tn_authn_check(v->authn, &a->req, a->user, password, plen, on_checked);
    memset(password, 0, sizeof(password));
}

/* --- lifetime ------------------------------------------------------------------ */

int tn_v1_init(tn_v1_t *v, uv_loop_t *loop, tn_meta_t *meta, tn_broker_t *b, tn_router_t *router,
               const tn_v1_opts_t *o)
{
    memset(v, 0, sizeof(*v));
    v->meta = meta;
    v->broker = b;
    v->router = router;
    v->loop = loop;
    tn_quota_init(&v->produces, o->max_produces_per_user);
    tn_u64map_init(&v->grace_ix);
    v->o = *o;
    tn_authn_opts_t ao;
    tn_authn_opts_default(&ao);
    tn_consume_opts_t co = {o->max_consumes_per_user};
    int rc = tn_consume_new(loop, b, &co, &v->consume);
    rc = rc ? rc : tn_fanout_new(loop, b, router, meta, &v->fanout);
    rc = rc ? rc : tn_rchild_new(loop, v, &v->rchild);
    return rc != 0 ? rc : tn_authn_new(loop, &ao, lookup, v, &v->authn);
}

int tn_v1_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_guard(srv, "/v1", guard, v);
    rc = rc ? rc : tn_http_guard_not_found(srv, "/v1", "{\"error\":\"not found\"}\n");
    /* /metrics on this listener names every topic: it takes the same
     * credentials (a listener of its own, metrics-address, stays open). */
    rc = rc ? rc : tn_http_guard(srv, "/metrics", guard, v);
    /* nsqd's endpoints that name a topic or list them, and /config/
     * (api/nsq/http.c checks the rights on protected topics, and an
     * admin's for a config change when every topic is guarded). */
    static const char *const nsq_paths[] = {"/pub",   "/mpub",   "/topic/", "/channel/",
                                            "/stats", "/lookup", "/topics", "/channels",
                                            "/nodes", "/config/"};
    for (size_t i = 0; rc == 0 && i < TN_ARRAY_SIZE(nsq_paths); i++)
        rc = tn_http_guard(srv, nsq_paths[i], nsq_guard, v);
    rc = rc ? rc : tn__v1_users_register(srv, v);
    rc = rc ? rc : tn__v1_remotes_register(srv, v);
    rc = rc ? rc : tn__v1_cluster_register(srv, v);
    rc = rc ? rc : tn__v1_moves_register(srv, v);
    rc = rc ? rc : tn__v1_rebalance_register(srv, v);
    rc = rc ? rc : tn__v1_children_register(srv, v);
    rc = rc ? rc : tn__v1_topics_register(srv, v);
    rc = rc ? rc : tn__v1_produce_register(srv, v);
    rc = rc ? rc : tn__v1_consume_register(srv, v);
    rc = rc ? rc : tn__v1_storage_register(srv, v);
    rc = rc ? rc : tn__v1_drain_register(srv, v);
    return rc;
}

void tn_v1_drain(tn_v1_t *v)
{
    tn_consume_drain(v->consume);
    tn__v1_forwards_drain(v);
}

uint32_t tn_v1_long_polls(const tn_v1_t *v)
{
    return tn_consume_pending(v->consume) + v->nfwds;
}

void tn_v1_close(tn_v1_t *v)
{
    v->closing = true;
    tn_consume_close(v->consume);
    v->consume = NULL;
    tn__v1_grace_free(v);
    tn_fanout_close(v->fanout);
    v->fanout = NULL;
    tn_rchild_close(v->rchild);
    v->rchild = NULL;
    tn__v1_users_close(v);
    tn__v1_remotes_close(v);
    tn__v1_topics_close(v);
    tn_quota_fini(&v->produces);
    if (v->authn != NULL)
        tn_authn_close(v->authn, NULL, NULL);
    v->authn = NULL;
}
