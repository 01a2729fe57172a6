/* Remote checks (docs/remotes.md, "Checks"): POST /v1/remotes/{name}/check,
 * the check at a remote child's attach, this node's part of a check (the
 * local hook of REMOTE_CHECK, cluster/rcheck.h) and the last result each
 * node keeps (last_check in GET /v1/remotes/{name}).
 *
 * DESIGN: a check.
 *   1. The door asks the router (tn_router_rcheck) for a check of the
 *      remote (name and id) with a topic or none: every live member runs
 *      its part at once, this node included.
 *   2. A member's part (tn_v1_remote_check): a fresh outbound client for
 *      the remote's URL and CA (proto/http/rclient.h: the address guard at
 *      the dial, TLS verification), the remote's credential as this node
 *      opens it, and one request:
 *        - no topic: GET /v1/topics?limit=1; a 2xx proves the remote
 *          answers, its certificate verifies and (on a remote with
 *          security on) the credential authenticates;
 *        - a topic: POST /v1/topics/{topic}/produce/batch with an empty
 *          batch `[]`. tern's route authenticates (401), looks the topic
 *          up (404), checks the produce grant (403) and refuses a delay
 *          child (409) before it reads the body, whose emptiness it then
 *          refuses with 400: so a 400 here proves all of those without
 *          producing anything, and counts as ok (a 2xx too).
 *      The result is a class of the client, the remote's HTTP status and
 *      the time taken; nothing the remote sent but its status.
 *   3. The door's answer is the table member -> result; the asking node
 *      keeps the table as its last check of that remote, and every member
 *      keeps its own row as its last when it ran for another node (the
 *      newer of the two is shown). Not in the metastore: a check is what
 *      one node saw of another cluster at one time, kept in memory, lost
 *      at a restart.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/rcheck.h"

#include "api/v1/common.h"
#include "api/v1/remotes.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "meta/remote.h"
#include "proto/http/json.h"
#include "proto/http/rclient.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(TN_RC_NCLASSES == TN_RCHECK_NCLASSES, "the check's classes are the client's");

/* A check's own timeouts: well inside TN_RCHECK_CALL_MS. */
#define CONNECT_MS  5000
#define TLS_MS      5000
#define RESPONSE_MS 10000

/* One node's part under way. */
typedef struct lcheck_s {
    struct lcheck_s *next;
    struct rchecks_s *owner;
    tn_rc_t *rc;
    int64_t start_ms;
    bool topic;
    char name[TN_REMOTE_NAME_MAX + 1];
    uint64_t id;
    char topic_name[TN_NAME_MAX + 1];
    tn_rcheck_done_cb done;
    void *done_arg;
} lcheck_t;

/* The last check of one remote seen here. */
typedef struct {
    char name[TN_REMOTE_NAME_MAX + 1];
    uint64_t id;
    int64_t at_ms; /* wall clock, when it ended */
    char topic[TN_NAME_MAX + 1];
    bool asked_here; /* the whole table; else this node's row of another node's check */
    tn_router_rcheck_row_t *rows;
    uint32_t n;
} last_t;

typedef struct rchecks_s {
    tn_v1_t *v;
    lcheck_t *running;
    last_t *last;
    size_t nlast, clast;
    bool closing;
} rchecks_t;

/* The state, made by the first tn__v1_rcheck_register (NULL before, and
 * after tn__v1_rcheck_close: nothing is kept then). */
static rchecks_t *rchecks(tn_v1_t *v)
{
    return v->rchecks;
}

/* --- the last check ------------------------------------------------------------------- */

static void remember(tn_v1_t *v, const char *name, uint64_t id, const char *topic, bool asked_here,
                     const tn_router_rcheck_row_t *rows, uint32_t n)
{
    rchecks_t *rs = rchecks(v);
    if (rs == NULL || rs->closing)
        return;
    /* Owned by the last_t it goes into until replaced or closed. */
    tn_router_rcheck_row_t *copy = tn_calloc(n > 0 ? n : 1, sizeof(*copy));
    if (copy == NULL)
        return; /* the previous one stays: it is only shown */
    memcpy(copy, rows, (size_t)n * sizeof(*copy));
    last_t *l = NULL;
    for (size_t i = 0; i < rs->nlast && l == NULL; i++)
        if (strcmp(rs->last[i].name, name) == 0)
            l = &rs->last[i];
    if (l == NULL) {
        if (rs->nlast == rs->clast) {
            size_t cap = rs->clast ? rs->clast * 2 : 8;
            last_t *nl = tn_realloc(rs->last, cap * sizeof(*nl));
            if (nl == NULL) {
                tn_free(copy);
                return;
            }
            rs->last = nl;
            rs->clast = cap;
        }
        l = &rs->last[rs->nlast++];
        memset(l, 0, sizeof(*l));
    }
    tn_free(l->rows);
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->id = id;
    l->at_ms = tn_now_wall_ms();
    snprintf(l->topic, sizeof(l->topic), "%s", topic);
    l->asked_here = asked_here;
    l->rows = copy;
    l->n = n;
}

/* The overall class: ok when every row is, else the first failing row's. */
static uint8_t overall(const tn_router_rcheck_row_t *rows, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (rows[i].res.cls != TN_RC_OK)
            return rows[i].res.cls;
    return TN_RC_OK;
}

static void table_json(tn_buf_t *b, int64_t at_ms, const char *topic, bool asked_here,
                       const tn_router_rcheck_row_t *rows, uint32_t n)
{
    tn__v1_appendf(b, "{\"at_ms\":%" PRId64 ",\"topic\":", at_ms);
    if (topic[0] != '\0')
        tn__v1_json_str(b, topic);
    else
        tn_buf_append(b, "null", 4);
    tn__v1_appendf(b, ",\"status\":\"%s\",\"asked_here\":%s,\"members\":{",
                   tn_rc_class_name((tn_rc_class_t)overall(rows, n)),
                   asked_here ? "true" : "false");
    for (uint32_t i = 0; i < n; i++) {
        const tn_router_rcheck_row_t *w = &rows[i];
        tn__v1_appendf(b, "%s\"%" PRIu64 "\":{\"status\":\"%s\",\"ms\":%" PRIu32, i > 0 ? "," : "",
                       w->node, tn_rc_class_name((tn_rc_class_t)w->res.cls), w->res.ms);
        if (w->member_error) {
            tn_buf_append(b, ",\"member_unreachable\":true,\"error\":", 35);
            tn__v1_json_str(b, w->error);
        } else if (w->res.cls != TN_RC_OK) {
            if (w->res.status != 0)
                tn__v1_appendf(b, ",\"http_status\":%u", w->res.status);
            /* The outbound client's own words, never the remote's. */
            tn_buf_append(b, ",\"detail\":", 10);
            tn__v1_json_str(b, w->res.detail);
        }
        tn_buf_append(b, "}", 1);
    }
    tn_buf_append(b, "}}", 2);
}

void tn__v1_rcheck_last_json(tn_v1_t *v, tn_buf_t *b, const char *name, uint64_t id)
{
    const rchecks_t *rs = v->rchecks;
    for (size_t i = 0; rs != NULL && i < rs->nlast; i++) {
        const last_t *l = &rs->last[i];
        if (strcmp(l->name, name) == 0 && l->id == id) {
            table_json(b, l->at_ms, l->topic, l->asked_here, l->rows, l->n);
            return;
        }
    }
    tn_buf_append(b, "null", 4);
}

/* --- this node's part ------------------------------------------------------------------ */

static void lcheck_end(lcheck_t *c, const tn_rcheck_result_t *res)
{
    rchecks_t *rs = c->owner;
    for (lcheck_t **pp = &rs->running; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    if (c->rc != NULL)
        tn_rc_close(c->rc);
    c->rc = NULL;
    /* This node's row, as its last check of the remote (the asking node
     * replaces it with the whole table right after). */
    tn_router_rcheck_row_t row;
    memset(&row, 0, sizeof(row));
    row.node = rs->v->node_id;
    row.res = *res;
    remember(rs->v, c->name, c->id, c->topic_name, false, &row, 1);
    c->done(c->done_arg, res);
    tn_free(c);
}

static void fill(tn_rcheck_result_t *res, const lcheck_t *c, tn_rc_class_t cls, int status,
                 const char *detail)
{
    memset(res, 0, sizeof(*res));
    res->cls = (uint8_t)cls;
    res->status = status >= 100 && status <= 599 ? (uint16_t)status : 0;
    int64_t took = tn_now_mono_ms() - c->start_ms;
    res->ms = took > 0 ? (uint32_t)TN_MIN(took, (int64_t)UINT32_MAX) : 0;
    if (cls != TN_RC_OK)
        snprintf(res->detail, sizeof(res->detail), "%.*s", TN_RCHECK_DETAIL_MAX, detail);
}

static void on_answer(void *ud, const tn_rc_result_t *r)
{
    lcheck_t *c = ud;
    tn_rc_class_t cls = r->cls;
    /* The empty batch's 400 is the answer that proves the route let the
     * user produce on the topic (see the top of the file). */
    if (c->topic && r->status == 400)
        cls = TN_RC_OK;
    tn_rcheck_result_t res;
    fill(&res, c, cls, r->status, r->err == UV_ECANCELED ? "the check was stopped" : r->detail);
    lcheck_end(c, &res);
}

int tn_v1_remote_check(void *arg, const char *remote, uint64_t remote_id, const char *topic,
                       tn_rcheck_done_cb done, void *done_arg)
{
    tn_v1_t *v = arg;
    rchecks_t *rs = rchecks(v);
    if (rs == NULL || v->closing || rs->closing)
        return TN_ECLOSED;
    const tn_meta_remote_t *rec = tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, remote);
    if (rec == NULL || rec->id != remote_id)
        return TN_ENOTFOUND;
    const tn_guard_t *guard = tn__v1_remote_guard(v);
    if (guard == NULL)
        return TN_ECLOSED;
    /* Owned by rs->running until lcheck_end frees it (its client's answer,
     * or at once). */
    lcheck_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->owner = rs;
    c->start_ms = tn_now_mono_ms();
    c->topic = topic[0] != '\0';
    snprintf(c->name, sizeof(c->name), "%s", remote);
    c->id = remote_id;
    snprintf(c->topic_name, sizeof(c->topic_name), "%s", topic);
    c->done = done;
    c->done_arg = done_arg;
    c->next = rs->running;
    rs->running = c;
    tn_rcheck_result_t res;
    const char *auth = NULL, *why = NULL;
    if (tn__v1_remote_credential(v, remote, &auth, &why) != 0 || auth == NULL) {
        fill(&res, c, TN_RC_AUTH, 0, "the remote's credential does not open on this node");
        lcheck_end(c, &res);
        return 0;
    }
    tn_rc_opts_t o = {.url = rec->url,
                      .ca_pem = rec->ca_pem,
                      .guard = guard,
                      .connect_timeout_ms = CONNECT_MS,
                      .tls_timeout_ms = TLS_MS,
                      .response_timeout_ms = RESPONSE_MS};
    char err[256];
    int rc = tn_rc_new(v->loop, &o, &c->rc, err, sizeof(err));
    if (rc != 0) {
        c->rc = NULL;
        fill(&res, c, rc == UV_ENOMEM ? TN_RC_UNREACHABLE : TN_RC_REFUSED, 0,
             rc == UV_ENOMEM ? "out of memory" : err);
        lcheck_end(c, &res);
        return 0;
    }
    /* The path: a topic name's '#' escaped, as the cursors send it. */
    char path[3 * TN_NAME_MAX + 64];
    if (c->topic) {
        size_t k = (size_t)snprintf(path, sizeof(path), "/v1/topics/");
        for (const char *s = topic; *s != '\0' && k + 4 < sizeof(path); s++) {
            if (*s == '#') {
                memcpy(path + k, "%23", 3);
                k += 3;
            } else {
                path[k++] = *s;
            }
        }
        snprintf(path + k, sizeof(path) - k, "/produce/batch");
    } else {
        snprintf(path, sizeof(path), "/v1/topics?limit=1");
    }
    tn_rc_req_t q = {c->topic ? "POST" : "GET",
                     path,
                     auth,
                     c->topic ? "application/json" : NULL,
                     c->topic ? "[]" : NULL,
                     c->topic ? 2 : 0};
    rc = tn_rc_request(c->rc, &q, on_answer, c);
    if (rc != 0) {
        fill(&res, c, TN_RC_UNREACHABLE, 0, tn_strerror(rc));
        lcheck_end(c, &res);
    }
    return 0;
}

/* --- a check asked here ------------------------------------------------------------------ */

typedef struct {
    tn_v1_t *v;
    char name[TN_REMOTE_NAME_MAX + 1];
    uint64_t id;
    char topic[TN_NAME_MAX + 1];
    tn__v1_rcheck_cb cb;
    void *arg;
} ask_t;

static void on_table(void *arg, const tn_router_rcheck_row_t *rows, uint32_t n)
{
    ask_t *a = arg;
    tn_v1_t *v = a->v;
    remember(v, a->name, a->id, a->topic, true, rows, n);
    uint8_t cls = overall(rows, n);
    TN_LOG(cls == TN_RC_OK ? TN_LOG_INFO : TN_LOG_WARN,
           "remote check of %s%s%s: %s on %" PRIu32 " member(s)", a->name,
           a->topic[0] != '\0' ? " with topic " : "", a->topic,
           tn_rc_class_name((tn_rc_class_t)cls), n);
    a->cb(a->arg, rows, n);
    tn_free(a);
}

int tn__v1_rcheck_ask(tn_v1_t *v, const char *name, uint64_t id, const char *topic,
                      tn__v1_rcheck_cb cb, void *arg)
{
    /* Owned by the router's fan-out until on_table frees it. */
    ask_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return UV_ENOMEM;
    a->v = v;
    snprintf(a->name, sizeof(a->name), "%s", name);
    a->id = id;
    snprintf(a->topic, sizeof(a->topic), "%s", topic);
    a->cb = cb;
    a->arg = arg;
    int rc = tn_router_rcheck(v->router, name, id, topic, on_table, a);
    if (rc != 0)
        tn_free(a);
    return rc;
}

void tn__v1_rcheck_table_json(tn_buf_t *b, const char *topic, const tn_router_rcheck_row_t *rows,
                              uint32_t n)
{
    table_json(b, tn_now_wall_ms(), topic, true, rows, n);
}

bool tn__v1_rcheck_failures(char *out, size_t len, const tn_router_rcheck_row_t *rows, uint32_t n)
{
    size_t k = 0;
    bool any = false;
    out[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        const tn_router_rcheck_row_t *w = &rows[i];
        if (w->res.cls == TN_RC_OK)
            continue;
        char status[32] = "";
        if (w->res.status != 0)
            snprintf(status, sizeof(status), " (HTTP %u)", w->res.status);
        int m = snprintf(out + k, len - k, "%snode %" PRIu64 ": %s%s%s", any ? "; " : "", w->node,
                         tn_rc_class_name((tn_rc_class_t)w->res.cls), status,
                         w->member_error ? " (the member gave no result)" : "");
        any = true;
        if (m < 0 || (size_t)m >= len - k)
            break;
        k += (size_t)m;
    }
    return any;
}

/* --- POST /v1/remotes/{name}/check --------------------------------------------------------- */

typedef struct {
    tn_http_request_t *r; /* NULL once the client left */
    char name[TN_REMOTE_NAME_MAX + 1];
    char topic[TN_NAME_MAX + 1];
} route_op_t;

static void route_cancel(tn_http_request_t *r)
{
    route_op_t *op = r->data;
    op->r = NULL;
}

static void on_route_table(void *arg, const tn_router_rcheck_row_t *rows, uint32_t n)
{
    route_op_t *op = arg;
    if (op->r != NULL) {
        op->r->on_cancel = NULL;
        tn_buf_t b;
        tn_buf_init(&b);
        tn_buf_append(&b, "{\"remote\":", 10);
        tn__v1_json_str(&b, op->name);
        tn_buf_append(&b, ",\"check\":", 9);
        table_json(&b, tn_now_wall_ms(), op->topic, true, rows, n);
        tn_buf_append(&b, "}", 1);
        tn__v1_respond_buf(op->r, 200, &b);
    }
    tn_free(op);
}

typedef struct {
    char topic[TN_NAME_MAX + 1];
} check_body_t;

static const tn_jfield_t check_fields[] = {
    {"topic", TN_JF_STR, offsetof(check_body_t, topic), TN_NAME_MAX},
};

static void on_check(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!v->o.security) {
        tn__v1_error(r, 403,
                     "remotes need security-enabled=true: they are managed by admins, and their "
                     "credentials are sealed under the cluster secret",
                     NULL);
        return;
    }
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r))
        return;
    const tn_iov_t *p = tn_http_param(r, "name");
    char name[TN_REMOTE_NAME_MAX + 1];
    if (p == NULL || !tn_meta_remote_name_valid(p->base, p->len)) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return;
    }
    memcpy(name, p->base, p->len);
    name[p->len] = '\0';
    const tn_meta_remote_t *rec = tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, name);
    if (rec == NULL) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return;
    }
    check_body_t body;
    memset(&body, 0, sizeof(body));
    bool given[1] = {false};
    if (tn_buf_size(&r->body) > 0) {
        char err[200];
        int rc = tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), check_fields, 1,
                                &body, given, err, sizeof(err));
        if (rc == UV_ENOMEM) {
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
            return;
        }
        if (rc != 0) {
            tn__v1_error(r, 400, err, NULL);
            return;
        }
        if (given[0] && !tn_name_valid(body.topic, strlen(body.topic))) {
            tn__v1_error(r, 400, "invalid argument: topic must be a topic name", NULL);
            return;
        }
    }
    /* Owned by the check until on_route_table frees it (r->data borrows
     * it until then). */
    route_op_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    op->r = r;
    snprintf(op->name, sizeof(op->name), "%s", name);
    snprintf(op->topic, sizeof(op->topic), "%s", body.topic);
    r->data = op;
    r->on_cancel = route_cancel;
    if (tn__v1_rcheck_ask(v, name, rec->id, body.topic, on_route_table, op) != 0) {
        r->on_cancel = NULL;
        tn_free(op);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
    }
}

int tn__v1_rcheck_register(tn_http_server_t *srv, tn_v1_t *v)
{
    if (v->rchecks == NULL) {
        rchecks_t *rs = tn_calloc(1, sizeof(*rs));
        if (rs == NULL)
            return UV_ENOMEM;
        rs->v = v;
        v->rchecks = rs;
    }
    return tn_http_route(srv, "POST", "/v1/remotes/{name}/check", TN_JSON_MAX_BODY, TN__V1_TOO_BIG,
                         on_check, v);
}

void tn__v1_rcheck_close(tn_v1_t *v)
{
    rchecks_t *rs = v->rchecks;
    if (rs == NULL)
        return;
    rs->closing = true;
    /* Each running part ends now (its client's close answers its request
     * UV_ECANCELED, which ends it and unlinks it). */
    while (rs->running != NULL) {
        lcheck_t *c = rs->running;
        tn_rc_t *rc = c->rc;
        if (rc == NULL) {
            rs->running = c->next; /* cannot be: a part without a client ended at once */
            continue;
        }
        c->rc = NULL;
        tn_rc_close(rc);
        if (rs->running == c) { /* not answered by the close: end it here */
            tn_rcheck_result_t res;
            fill(&res, c, TN_RC_UNREACHABLE, 0, "the check was stopped");
            lcheck_end(c, &res);
        }
    }
    for (size_t i = 0; i < rs->nlast; i++)
        tn_free(rs->last[i].rows);
    tn_free(rs->last);
    tn_free(rs);
    v->rchecks = NULL;
}
