/* The /v1/users routes: reading, creating and deleting users, their
 * grants and passwords. See v1.h for who may do what; the metastore
 * re-checks the root user's invariants when it applies a change.
 *
 * DESIGN: a password change or a new user.
 *   1. Validate the body and the caller's rights (answers 400/403/404).
 *   2. Hash the password with bcrypt on a worker thread, at most two at
 *      a time node-wide; requests beyond wait in order (up to 64, then
 *      503). A self-service change first checks the current password in
 *      the same job.
 *   3. Propose the user record to the metastore and answer when it is
 *      applied. Each change is logged as an audit line.
 *
 * Threads: the loop thread (hashing on the libuv pool). */
#include "core/platform.h"

#include "api/v1/users.h"

#include "api/v1/common.h"
#include "api/users.h"

#include "auth/nsqauth.h"
#include "auth/passwd.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASH_RUNNING 2  /* bcrypt hashes at once */
#define HASH_WAITING 64 /* queued behind them, then 503 */

static const char *action_name(uint8_t a)
{
    switch (a) {
    case TN_GRANT_PRODUCE:
        return "produce";
    case TN_GRANT_CONSUME:
        return "consume";
    case TN_GRANT_CREATE:
        return "create";
    default:
        return "admin";
    }
}

static void user_json(tn_buf_t *b, const tn_meta_user_t *u)
{
    tn_buf_append(b, "{\"username\":", 12);
    tn__v1_json_str(b, u->name);
    tn_buf_append(b, ",\"grants\":[", 11);
    for (uint16_t i = 0; i < u->ngrants; i++) {
        if (i > 0)
            tn_buf_append(b, ",", 1);
        tn__v1_appendf(b, "{\"action\":\"%s\",\"patterns\":[", action_name(u->grants[i].action));
        for (uint16_t k = 0; k < u->grants[i].npatterns; k++) {
            if (k > 0)
                tn_buf_append(b, ",", 1);
            tn__v1_json_str(b, u->grants[i].patterns[k]);
        }
        tn_buf_append(b, "]}", 2);
    }
    tn_buf_append(b, "]", 1);
    if (u->root)
        tn_buf_append(b, ",\"root\":true", 12);
    tn__v1_appendf(b, ",\"created_at_ms\":%" PRId64 ",\"updated_at_ms\":%" PRId64 "}",
                   u->created_at_ms, u->updated_at_ms);
}

static void on_users_list(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_admin_only(v, r))
        return;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "[", 1);
    for (size_t i = 0; i < s->nusers; i++) {
        if (i > 0)
            tn_buf_append(&b, ",", 1);
        user_json(&b, s->users[i]);
    }
    tn_buf_append(&b, "]", 1);
    tn__v1_respond_buf(r, 200, &b);
}

/* An admin reads any user; any user reads their own record (its grants
 * tell a client such as the web console what it may offer). */
static void on_user_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    const tn_iov_t *name = tn_http_param(r, "username");
    char user[TN_USERNAME_MAX + 1] = "";
    if (name != NULL && name->len <= TN_USERNAME_MAX) {
        memcpy(user, name->base, name->len);
        user[name->len] = '\0';
    }
    bool self = r->principal[0] != '\0' && strcmp(user, r->principal) == 0;
    if (!self && !tn__v1_admin_only(v, r))
        return;
    const tn_meta_user_t *u = tn_meta_user_find(tn_meta_state(v->meta), user);
    if (u == NULL) {
        tn__v1_error(r, 404, "user not found", NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    user_json(&b, u);
    tn__v1_respond_buf(r, 200, &b);
}

/* --- request bodies -------------------------------------------------------------- */

static const char *const user_fields[TN__V1_UF_COUNT] = {"username", "password", "grants"};

static int ufail(tn__v1_user_body_t *x, const char *fmt, ...) TN_PRINTF(2, 3);
static int ufail(tn__v1_user_body_t *x, const char *fmt, ...)
{
    if (x->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err, sizeof(x->err), fmt, ap);
        va_end(ap);
    }
    return 0;
}

void tn__v1_user_body_fini(tn__v1_user_body_t *x)
{
    for (uint16_t i = 0; i < x->ngrants; i++) {
        for (uint16_t k = 0; k < x->grants[i].npatterns; k++)
            tn_free(x->grants[i].patterns[k]);
        tn_free(x->grants[i].patterns);
    }
    x->ngrants = 0;
    OPENSSL_cleanse(x->password, sizeof(x->password));
}

static int u_string(void *c, const unsigned char *s, size_t n)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 1 && x->field == TN__V1_UF_USERNAME) {
        if (n > TN_USERNAME_MAX || !tn_username_valid((const char *)s, n))
            return ufail(x, "invalid argument: username must match [A-Za-z0-9._-]{1,64}");
        memcpy(x->username, s, n);
        x->username[n] = '\0';
        return 1;
    }
    if (x->depth == 1 && x->field == TN__V1_UF_PASSWORD) {
        if (n == 0 || n > TN_BCRYPT_PASSWORD_MAX || memchr(s, '\0', n) != NULL)
            return ufail(x, "invalid argument: password must be 1..72 bytes without NUL (bcrypt "
                            "reads no more)");
        memcpy(x->password, s, n);
        x->password[n] = '\0';
        x->plen = n;
        return 1;
    }
    if (x->depth == 3 && x->gfield == 0) {
        static const char *const names[] = {"produce", "consume", "create", "admin"};
        tn_meta_grant_t *g = &x->grants[x->ngrants - 1];
        for (uint8_t a = 0; a < 4; a++) {
            if (strlen(names[a]) == n && memcmp(names[a], s, n) == 0) {
                g->action = (uint8_t)(TN_GRANT_PRODUCE + a);
                x->gfield = -1;
                return 1;
            }
        }
        return ufail(x, "invalid argument: grant action must be produce, consume, create or admin");
    }
    if (x->depth == 4) {
        tn_meta_grant_t *g = &x->grants[x->ngrants - 1];
        bool star = n > 0 && s[n - 1] == '*';
        size_t base = star ? n - 1 : n;
        if (base > TN_NAME_MAX || (base > 0 && !tn_name_valid((const char *)s, base)))
            return ufail(x, "invalid argument: a pattern is a name ([A-Za-z0-9._-]{0,255}) "
                            "optionally ending in *");
        if (g->npatterns == TN_META_MAX_PATTERNS)
            return ufail(x, "invalid argument: at most %d patterns per grant",
                         TN_META_MAX_PATTERNS);
        char *p = tn_malloc(n + 1);
        if (p == NULL) {
            x->oom = true;
            return 0;
        }
        memcpy(p, s, n);
        p[n] = '\0';
        g->patterns[g->npatterns++] = p;
        return 1;
    }
    return ufail(x, "invalid json: unexpected string");
}

static int u_other(void *c)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 1 && x->field >= 0)
        return ufail(x, "invalid json: field \"%s\" has the wrong type", user_fields[x->field]);
    return ufail(x, "invalid json: unexpected value");
}

static int u_bool(void *c, int b)
{
    (void)b;
    return u_other(c);
}

static int u_number(void *c, const char *s, size_t n)
{
    (void)s;
    (void)n;
    return u_other(c);
}

static int u_start_map(void *c)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 0) {
        x->depth = 1;
        x->field = -1;
        return 1;
    }
    if (x->depth == 2) {
        if (x->ngrants == TN_META_MAX_GRANTS)
            return ufail(x, "invalid argument: at most %d grants", TN_META_MAX_GRANTS);
        tn_meta_grant_t *g = &x->grants[x->ngrants++];
        memset(g, 0, sizeof(*g));
        g->patterns = tn_calloc(TN_META_MAX_PATTERNS, sizeof(char *));
        if (g->patterns == NULL) {
            x->ngrants--;
            x->oom = true;
            return 0;
        }
        x->depth = 3;
        x->gfield = -1;
        x->gseen[0] = x->gseen[1] = false;
        return 1;
    }
    return u_other(c);
}

static int u_key(void *c, const unsigned char *k, size_t n)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 1) {
        for (int i = 0; i < TN__V1_UF_COUNT; i++) {
            if (strlen(user_fields[i]) != n || memcmp(user_fields[i], k, n) != 0)
                continue;
            if (!(x->allow & (1u << i)))
                break;
            if (x->seen[i])
                return ufail(x, "invalid json: duplicate field \"%s\"", user_fields[i]);
            x->seen[i] = true;
            x->field = i;
            return 1;
        }
        return ufail(x, "invalid json: unknown field \"%.*s\"", (int)TN_MIN(n, (size_t)64), k);
    }
    static const char *const gnames[] = {"action", "patterns"};
    for (int i = 0; i < 2; i++) {
        if (strlen(gnames[i]) == n && memcmp(gnames[i], k, n) == 0) {
            if (x->gseen[i])
                return ufail(x, "invalid json: duplicate field \"%s\" in a grant", gnames[i]);
            x->gseen[i] = true;
            x->gfield = i;
            return 1;
        }
    }
    return ufail(x, "invalid json: unknown field \"%.*s\" in a grant", (int)TN_MIN(n, (size_t)64),
                 k);
}

static int u_end_map(void *c)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 3) {
        if (!x->gseen[0])
            return ufail(x, "invalid argument: a grant needs an action");
        x->depth = 2;
        return 1;
    }
    x->depth = 5; /* the top object ended */
    return 1;
}

static int u_start_array(void *c)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 1 && x->field == TN__V1_UF_GRANTS) {
        x->depth = 2;
        return 1;
    }
    if (x->depth == 3 && x->gfield == 1) {
        x->depth = 4;
        return 1;
    }
    return u_other(c);
}

static int u_end_array(void *c)
{
    tn__v1_user_body_t *x = c;
    if (x->depth == 4) {
        x->depth = 3;
        x->gfield = -1;
    } else {
        x->depth = 1;
        x->field = -1;
    }
    return 1;
}

static const yajl_callbacks user_callbacks = {
    u_other,     u_bool, NULL,      NULL,          u_number,    u_string,
    u_start_map, u_key,  u_end_map, u_start_array, u_end_array,
};

int tn__v1_user_body(const char *body, size_t len, unsigned allow, tn__v1_user_body_t *x)
{
    memset(x, 0, sizeof(*x));
    x->allow = allow;
    x->field = -1;
    bool ok = false;
    int rc = tn_json_events(body, len, &user_callbacks, x, true, &ok);
    if (rc != 0 || x->oom) {
        tn__v1_user_body_fini(x);
        return UV_ENOMEM;
    }
    if (x->err[0] == '\0' && (!ok || x->depth != 5))
        snprintf(x->err, sizeof(x->err), "invalid json: the body must be one JSON object");
    /* Grants: scoped ones need a pattern, admin none. */
    for (uint16_t i = 0; x->err[0] == '\0' && i < x->ngrants; i++) {
        const tn_meta_grant_t *g = &x->grants[i];
        if (g->action == TN_GRANT_ADMIN && g->npatterns > 0)
            snprintf(x->err, sizeof(x->err), "invalid argument: an admin grant takes no patterns");
        else if (g->action != TN_GRANT_ADMIN && g->npatterns == 0)
            snprintf(x->err, sizeof(x->err), "invalid argument: a %s grant needs a pattern",
                     action_name(g->action));
    }
    if (x->err[0] != '\0') {
        char err[sizeof(x->err)];
        memcpy(err, x->err, sizeof(err));
        tn__v1_user_body_fini(x);
        memcpy(x->err, err, sizeof(err));
        return UV_EINVAL;
    }
    return 0;
}

/* Decode r's body into x (allow: the fields this route takes); false after
 * answering 400 or 503. */
static bool decode_user(tn_http_request_t *r, tn__v1_user_body_t *x, unsigned allow)
{
    int rc = tn__v1_user_body(tn_buf_data(&r->body), tn_buf_size(&r->body), allow, x);
    if (rc == UV_ENOMEM)
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
    else if (rc != 0)
        tn__v1_error(r, 400, x->err, NULL);
    return rc == 0;
}

/* --- rights ------------------------------------------------------------------ */

static bool caller_is_root(tn_v1_t *v, const tn_http_request_t *r)
{
    if (!v->o.security)
        return true;
    const tn_meta_user_t *u = tn__v1_caller(v, r);
    return u != NULL && u->root;
}

static bool grants_admin(const tn_meta_grant_t *g, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++)
        if (g[i].action == TN_GRANT_ADMIN)
            return true;
    return false;
}

static bool path_user(tn_http_request_t *r, char out[TN_USERNAME_MAX + 1])
{
    const tn_iov_t *name = tn_http_param(r, "username");
    out[0] = '\0';
    if (name == NULL || name->len > TN_USERNAME_MAX)
        return false;
    memcpy(out, name->base, name->len);
    out[name->len] = '\0';
    return true;
}

static void audit(const tn_http_request_t *r, const char *what, const char *user)
{
    TN_LOG(TN_LOG_NOTICE, "audit: %s %s user %s (from %s)",
           r->principal[0] != '\0' ? r->principal : "(security off)", what, user, r->remote);
}

/* --- operations ------------------------------------------------------------------ */

typedef enum { OP_CREATE = 1, OP_PASSWORD, OP_GRANTS, OP_DELETE } op_kind_t;

/* One user change: hashing (maybe), then the proposal. */
typedef struct uop_s uop_t;
struct uop_s {
    uv_work_t work;
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client left */
    op_kind_t kind;
    tn_meta_req_t mreq;
    char user[TN_USERNAME_MAX + 1];
    char password[TN_PASSWORD_MAX + 1]; /* to hash */
    size_t plen;
    char current[TN_PASSWORD_MAX + 1]; /* self-service: checked first */
    size_t clen;
    char check_hash[TN_META_HASH_MAX + 1]; /* "" when no check */
    char hash[TN_BCRYPT_HASH_MAX + 1];
    bool wrong_current;
    int rc;
    tn_meta_grant_t *grants; /* OP_CREATE, OP_GRANTS (owns_grants) */
    uint16_t ngrants;
    bool owns_grants;
    int tries;       /* proposals refused because the record changed meanwhile */
    bool confirmed;  /* this replica confirmed current before a 404 or a delete (on_confirmed) */
    int unconfirmed; /* that confirmation's error (0: confirmed) */
    /* Loop ms: the request's metastore budget, TN_META_PROPOSE_MS from
     * its first step there (0 before), which the confirmation before a
     * 404 and every proposal (a change made again too) share, as one
     * write's forwards and read-back wait do. */
    uint64_t until;
    uop_t *next; /* waiting to hash */
};

/* The hashing queue, one per tn_v1_t (in v->users). */
typedef struct {
    uint32_t running;
    uint32_t waiting;
    uop_t *head;
    uop_t *tail;
} hashq_t;

static void release_grants(tn_meta_grant_t *g, uint16_t n)
{
    tn_meta_user_t u;
    memset(&u, 0, sizeof(u));
    u.grants = g;
    u.ngrants = n;
    tn_meta_user_fini(&u);
}

static void uop_free(uop_t *op)
{
    if (op->owns_grants)
        release_grants(op->grants, op->ngrants);
    OPENSSL_cleanse(op->password, sizeof(op->password));
    OPENSSL_cleanse(op->current, sizeof(op->current));
    tn_free(op);
}

static void uop_cancel(tn_http_request_t *r)
{
    uop_t *op = r->data;
    op->r = NULL;
}

static void uop_end(uop_t *op, int status, const char *msg)
{
    tn_buf_t b;
    tn_buf_init(&b);
    const tn_meta_user_t *u = NULL;
    if (op->r != NULL && (status == 200 || status == 201))
        u = tn_meta_user_find(tn_meta_state(op->v->meta), op->user);
    if (u != NULL)
        user_json(&b, u);
    tn__v1_end(op->r, status, msg, &b);
    uop_free(op);
}

static void propose(uop_t *op);

/* This replica is now as current as the leader was when the confirmation
 * was asked (or could not be made so: unconfirmed): look for the user
 * again. */
static void on_confirmed(void *arg, int status)
{
    uop_t *op = arg;
    op->unconfirmed = status;
    propose(op);
}

static void on_user_proposed(tn_meta_req_t *req, int status)
{
    uop_t *op = req->data;
    if (status == 0) {
        static const char *const what[] = {"", "created", "changed the password of",
                                           "changed the grants of", "deleted"};
        if (op->r != NULL)
            audit(op->r, what[op->kind], op->user);
        uop_end(op, op->kind == OP_CREATE ? 201 : op->kind == OP_GRANTS ? 200 : 204, NULL);
    } else if (status == TN_ECHANGED && ++op->tries < TN__V1_CHANGE_TRIES) {
        propose(op); /* made again from the record as it is now */
    } else if (status == TN_ECHANGED) {
        uop_end(op, 409, "the user kept changing while this change was applied; send it again");
    } else if (status == UV_EEXIST) {
        uop_end(op, 409, "user already exists");
    } else if (status == TN_ENOTFOUND) {
        uop_end(op, 404, "user not found");
    } else if (status == UV_EPERM) {
        uop_end(op, 403, "the root user's record cannot change that way");
    } else {
        uop_end(op, tn__v1_meta_code(status), tn__v1_meta_why(status));
    }
}

/* Propose op's change: the record as the metastore has it now, changed. */
static void propose(uop_t *op)
{
    tn_v1_t *v = op->v;
    if (v->closing) {
        uop_end(op, 503, "shutting down");
        return;
    }
    if (op->until == 0)
        op->until = uv_now(v->loop) + TN_META_PROPOSE_MS;
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    const tn_meta_user_t *cur = tn_meta_user_find(tn_meta_state(v->meta), op->user);
    int64_t now = tn_now_wall_ms();
    if (op->kind == OP_CREATE) {
        c.type = TN_MC_USER_PUT;
        c.if_absent = true;
        c.fresh = true; /* it takes over no topic left with its name (meta/owner.h) */
        snprintf(c.user.name, sizeof(c.user.name), "%s", op->user);
        snprintf(c.user.hash, sizeof(c.user.hash), "%s", op->hash);
        c.user.created_at_ms = c.user.updated_at_ms = now;
        c.user.ngrants = op->ngrants;
        c.user.grants = op->grants; /* borrowed: encoding copies */
    } else if (cur == NULL) {
        /* Made through another node a moment ago, maybe, and not applied
         * here yet: this replica catches up with the leader before the
         * user is said not to exist, within the request's budget. */
        if (!op->confirmed) {
            op->confirmed = true;
            op->unconfirmed = tn_meta_confirm_until(v->meta, op->until, on_confirmed, op);
            if (op->unconfirmed == 0)
                return;
        }
        /* Not confirmed (no leader, this node cut off): the user may
         * exist, as for a topic's 404 (common.c tn__v1_path_topic). */
        if (op->unconfirmed != 0)
            uop_end(op, 503, "control plane not caught up");
        else
            uop_end(op, 404, "user not found");
        return;
    } else if (op->check_hash[0] != '\0' && strcmp(cur->hash, op->check_hash) != 0) {
        /* A self-service change checked the current password against a
         * hash that has been replaced since: that check no longer holds. */
        uop_end(op, 409, "the password changed while this change was applied; send it again");
        return;
    } else if (op->kind == OP_DELETE &&
               (op->confirmed ? op->unconfirmed != 0 : !tn_meta_caught_up(v->meta))) {
        /* A destructive action waits for a current replica: one behind
         * confirms with the leader first, within the request's budget
         * (as api/v1/common.c tn__v1_caught_up). */
        if (!op->confirmed) {
            op->confirmed = true;
            op->unconfirmed = tn_meta_confirm_until(v->meta, op->until, on_confirmed, op);
            if (op->unconfirmed == 0)
                return;
        }
        uop_end(op, 503, "control plane not caught up");
        return;
    } else if (op->kind == OP_DELETE) {
        c.type = TN_MC_USER_DELETE;
        snprintf(c.user.name, sizeof(c.user.name), "%s", op->user);
        c.disown = true; /* its topics pass to the root user (meta/owner.h) */
    } else {
        /* Made from the record as it is now; refused if another change
         * lands first (then read again), or if a delete did. */
        c.type = TN_MC_USER_PUT;
        c.if_unchanged = true;
        c.expect = tn_meta_user_fingerprint(cur);
        c.user = *cur; /* borrowed grants */
        c.user.updated_at_ms = now;
        if (op->kind == OP_PASSWORD) {
            snprintf(c.user.hash, sizeof(c.user.hash), "%s", op->hash);
        } else {
            c.user.ngrants = op->ngrants;
            c.user.grants = op->grants;
        }
    }
    op->mreq.data = op;
    int rc = tn_meta_propose_until(v->meta, &op->mreq, &c, op->until, on_user_proposed);
    if (rc != 0)
        uop_end(op, 503, "control plane temporarily unavailable");
}

static void hash_next(tn_v1_t *v);

static void hash_work(uv_work_t *w)
{
    uop_t *op = w->data;
    if (op->check_hash[0] != '\0' && !tn_bcrypt_verify(op->current, op->clen, op->check_hash)) {
        op->wrong_current = true;
        return;
    }
    op->rc = tn_bcrypt_hash(op->password, op->plen, op->hash);
}

static void hash_done(uv_work_t *w, int status)
{
    uop_t *op = w->data;
    tn_v1_t *v = op->v;
    hashq_t *q = v->users;
    q->running--;
    if (op->r == NULL || v->closing)
        uop_end(op, 503, "shutting down");
    else if (op->wrong_current)
        uop_end(op, 403, "current password is wrong");
    else if (status != 0 || op->rc != 0)
        uop_end(op, 500, "password hashing failed");
    else
        propose(op);
    hash_next(v);
}

static void hash_next(tn_v1_t *v)
{
    hashq_t *q = v->users;
    while (q->running < HASH_RUNNING && q->head != NULL) {
        uop_t *op = q->head;
        q->head = op->next;
        if (q->head == NULL)
            q->tail = NULL;
        q->waiting--;
        if (op->r == NULL || v->closing) {
            uop_end(op, 503, "shutting down");
            continue;
        }
        op->work.data = op;
        if (uv_queue_work(v->loop, &op->work, hash_work, hash_done) != 0) {
            uop_end(op, 503, "password hashing is busy");
            continue;
        }
        q->running++;
    }
}

/* A new op for r; NULL after answering 503. */
static uop_t *uop_new(tn_v1_t *v, tn_http_request_t *r, op_kind_t kind, const char *user)
{
    uop_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return NULL;
    }
    op->v = v;
    op->r = r;
    op->kind = kind;
    snprintf(op->user, sizeof(op->user), "%s", user);
    r->data = op;
    r->on_cancel = uop_cancel;
    return op;
}

/* Queue op for hashing (grants, if any, must be the op's own by now). */
static void hash_start(uop_t *op)
{
    tn_v1_t *v = op->v;
    hashq_t *q = v->users;
    if (q->waiting >= HASH_WAITING) {
        uop_end(op, 503, "password hashing is busy");
        return;
    }
    op->next = NULL;
    if (q->tail != NULL)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    q->waiting++;
    hash_next(v);
}

/* --- routes ------------------------------------------------------------------ */

/* Deep copy of grants into op (hashing outlives the request's body). */
static bool own_grants(uop_t *op, const tn__v1_user_body_t *x)
{
    tn_meta_user_t tmp, src;
    memset(&tmp, 0, sizeof(tmp));
    memset(&src, 0, sizeof(src));
    src.ngrants = x->ngrants;
    src.grants = (tn_meta_grant_t *)x->grants;
    if (tn_meta_user_copy(&tmp, &src) != 0)
        return false;
    op->grants = tmp.grants;
    op->ngrants = tmp.ngrants;
    op->owns_grants = true;
    return true;
}

static void on_user_create(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r))
        return;
    tn__v1_user_body_t *x = tn_malloc(sizeof(*x));
    if (x == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (!decode_user(
            r, x, 1u << TN__V1_UF_USERNAME | 1u << TN__V1_UF_PASSWORD | 1u << TN__V1_UF_GRANTS)) {
        tn_free(x);
        return;
    }
    const char *refusal = NULL;
    int status = 400;
    if (!x->seen[TN__V1_UF_USERNAME] || !x->seen[TN__V1_UF_PASSWORD]) {
        refusal = "invalid argument: username and password are required";
    } else if (grants_admin(x->grants, x->ngrants) && !caller_is_root(v, r)) {
        refusal = "only the root user may grant admin";
        status = 403;
    } else if (tn_meta_user_find(tn_meta_state(v->meta), x->username) != NULL) {
        refusal = "user already exists";
        status = 409;
    }
    if (refusal != NULL) {
        tn__v1_error(r, status, refusal, NULL);
        tn__v1_user_body_fini(x);
        tn_free(x);
        return;
    }
    uop_t *op = uop_new(v, r, OP_CREATE, x->username);
    if (op != NULL) {
        memcpy(op->password, x->password, x->plen);
        op->plen = x->plen;
        if (!own_grants(op, x)) {
            r->on_cancel = NULL;
            uop_free(op);
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
            op = NULL;
        }
    }
    tn__v1_user_body_fini(x);
    tn_free(x);
    if (op != NULL)
        hash_start(op);
}

/* Whether the path names a user an admin may change (another, non-root
 * user, into user): false after answering 403 (not_root: the root user;
 * not_self: the caller) or 404 (a name no user can have). A user this
 * replica lacks passes: made through another node a moment ago, maybe,
 * and the change confirms this replica before its 404 (propose). */
static bool other_user(tn_v1_t *v, tn_http_request_t *r, char user[TN_USERNAME_MAX + 1],
                       const char *not_root, const char *not_self)
{
    if (!tn__v1_admin_only(v, r))
        return false;
    if (!path_user(r, user)) {
        tn__v1_error(r, 404, "user not found", NULL);
        return false;
    }
    const tn_meta_user_t *u = tn_meta_user_find(tn_meta_state(v->meta), user);
    if ((u != NULL && u->root) || strcmp(user, r->principal) == 0) {
        tn__v1_error(r, 403, u != NULL && u->root ? not_root : not_self, NULL);
        return false;
    }
    return true;
}

static void on_user_delete(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char user[TN_USERNAME_MAX + 1];
    if (!other_user(v, r, user, "the root user cannot be deleted", "you cannot delete yourself"))
        return;
    uop_t *op = uop_new(v, r, OP_DELETE, user);
    if (op != NULL)
        propose(op);
}

static void on_user_grants(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char user[TN_USERNAME_MAX + 1];
    if (!tn__v1_guard_write(r) || !other_user(v, r, user, "the root user's grants cannot change",
                                              "you cannot change your own grants"))
        return;
    tn__v1_user_body_t *x = tn_malloc(sizeof(*x));
    if (x == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    if (!decode_user(r, x, 1u << TN__V1_UF_GRANTS)) {
        tn_free(x);
        return;
    }
    if (!x->seen[TN__V1_UF_GRANTS]) {
        tn__v1_error(r, 400, "invalid argument: grants required", NULL);
    } else if (grants_admin(x->grants, x->ngrants) && !caller_is_root(v, r)) {
        tn__v1_error(r, 403, "only the root user may grant admin", NULL);
    } else {
        uop_t *op = uop_new(v, r, OP_GRANTS, user);
        if (op != NULL && !own_grants(op, x)) { /* a retry may outlive the body */
            uop_end(op, 503, "out of memory");
            op = NULL;
        }
        if (op != NULL)
            propose(op);
    }
    tn__v1_user_body_fini(x);
    tn_free(x);
}

typedef struct {
    char current_password[TN_PASSWORD_MAX + 1];
    char new_password[TN_PASSWORD_MAX + 1];
} pw_body_t;

static const tn_jfield_t pw_fields[] = {
    {"current_password", TN_JF_STR, offsetof(pw_body_t, current_password), TN_PASSWORD_MAX},
    {"new_password", TN_JF_STR, offsetof(pw_body_t, new_password), TN_PASSWORD_MAX},
};

static void on_user_password(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char user[TN_USERNAME_MAX + 1];
    if (!tn__v1_guard_write(r))
        return;
    const tn_meta_user_t *u =
        path_user(r, user) ? tn_meta_user_find(tn_meta_state(v->meta), user) : NULL;
    bool self = v->o.security && strcmp(user, r->principal) == 0;
    bool admin = tn__v1_is_admin(v, r);
    if (!admin && !self) {
        tn__v1_error(r, 403, "admin rights required", NULL);
        return;
    }
    /* An admin's change to a user this replica lacks goes on: made
     * through another node a moment ago, maybe (other_user). */
    if (u == NULL && (!admin || !path_user(r, user))) {
        tn__v1_error(r, 404, "user not found", NULL);
        return;
    }
    if (u != NULL && u->root && !caller_is_root(v, r)) {
        tn__v1_error(r, 403, "only the root user may change its password", NULL);
        return;
    }
    pw_body_t *b = tn_calloc(1, sizeof(*b));
    bool given[2];
    char err[160];
    int rc = b == NULL ? UV_ENOMEM
                       : tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), pw_fields, 2,
                                        b, given, err, sizeof(err));
    size_t nlen = b != NULL ? strlen(b->new_password) : 0;
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
    } else if (rc != 0) {
        tn__v1_error(r, 400, err, NULL);
    } else if (!given[1] || nlen == 0) {
        tn__v1_error(r, 400, "invalid argument: new_password required", NULL);
    } else if (nlen > TN_BCRYPT_PASSWORD_MAX) {
        tn__v1_error(r, 400,
                     "invalid argument: new_password must be 1..72 bytes (bcrypt reads no more)",
                     NULL);
    } else if (!admin && !given[0]) {
        tn__v1_error(r, 400, "invalid argument: current_password required", NULL);
    } else {
        uop_t *op = uop_new(v, r, OP_PASSWORD, user);
        if (op != NULL) {
            memcpy(op->password, b->new_password, nlen);
            op->plen = nlen;
            if (!admin) {
                op->clen = strlen(b->current_password);
                memcpy(op->current, b->current_password, op->clen);
                snprintf(op->check_hash, sizeof(op->check_hash), "%s", u->hash);
            }
            hash_start(op);
        }
    }
    if (b != NULL) {
        OPENSSL_cleanse(b, sizeof(*b));
        tn_free(b);
    }
}

/* --- NSQ AUTH by tern users --------------------------------------------------- */

/* The grants also go stale as soon as the metastore's access generation
 * moves (a user or topic command: a grant, a user, an owner changed), so
 * a change reaches open connections before their next message; the ttl
 * stays as a backstop. */
#define NSQ_AUTH_TTL_MS 60000

typedef struct {
    tn_authn_req_t areq;
    tn_auth_req_t *req;
    tn_v1_t *v;
    char user[TN_USERNAME_MAX + 1];
} nsqcheck_t;

static void on_nsq_checked(tn_authn_req_t *areq, tn_authn_result_t result)
{
    nsqcheck_t *nc = areq->data;
    tn_auth_req_t *req = nc->req;
    tn_meta_t *meta = nc->v->meta;
    const tn_meta_state_t *ms = tn_meta_state(meta);
    const tn_meta_user_t *u = result == TN_AUTHN_OK ? tn_meta_user_find(ms, nc->user) : NULL;
    tn_free(nc);
    if (u == NULL && result == TN_AUTHN_DENIED && !tn_users_ready(meta)) {
        /* Not judged yet (api/users.h): the secret may be right. nsqd
         * answers an auth server it cannot reach with E_AUTH_FAILED, which
         * the client may retry; a denial here would say it is wrong. */
        tn_nsqauth_answer(req, TN_AUTH_UNAVAILABLE, NULL);
        return;
    }
    if (u == NULL) {
        tn_nsqauth_answer(req, TN_AUTH_DENIED, NULL);
        return;
    }
    /* The topics the user owns are theirs to publish to and consume, as
     * on /v1; the root user, like an admin, has every topic. */
    size_t owned = 0;
    for (size_t i = 0; i < ms->ntopics; i++)
        owned += strcmp(ms->topics[i]->rec.owner, u->name) == 0;
    size_t cap = (size_t)TN_META_MAX_GRANTS * TN_META_MAX_PATTERNS + owned + 1;
    tn_authz_grant_t *g = tn_malloc(cap * sizeof(*g));
    if (g == NULL) {
        tn_nsqauth_answer(req, TN_AUTH_UNAVAILABLE, NULL);
        return;
    }
    uint32_t n = 0;
    if (u->root)
        g[n++] = (tn_authz_grant_t){"*", true, true};
    for (size_t i = 0; i < ms->ntopics; i++)
        if (strcmp(ms->topics[i]->rec.owner, u->name) == 0)
            g[n++] = (tn_authz_grant_t){ms->topics[i]->rec.name, true, true};
    for (uint16_t i = 0; i < u->ngrants; i++) {
        const tn_meta_grant_t *gr = &u->grants[i];
        if (gr->action == TN_GRANT_ADMIN) {
            g[n++] = (tn_authz_grant_t){"*", true, true};
            continue;
        }
        if (gr->action != TN_GRANT_PRODUCE && gr->action != TN_GRANT_CONSUME)
            continue;
        for (uint16_t k = 0; k < gr->npatterns; k++)
            g[n++] = (tn_authz_grant_t){gr->patterns[k], gr->action == TN_GRANT_PRODUCE,
                                        gr->action == TN_GRANT_CONSUME};
    }
    if (n == 0) {
        tn_free(g);
        tn_nsqauth_answer(req, TN_AUTH_NONE, NULL);
        return;
    }
    tn_authz_t *authz = tn_authz_from_grants(u->name, g, n, NSQ_AUTH_TTL_MS);
    tn_free(g);
    if (authz != NULL) {
        authz->gen_src = tn_meta_access_gen(meta);
        authz->gen = *authz->gen_src;
    }
    tn_nsqauth_answer(req, authz != NULL ? TN_AUTH_OK : TN_AUTH_UNAVAILABLE, authz);
}

static int nsq_check(void *arg, tn_auth_req_t *req, const char *secret, size_t len)
{
    tn_v1_t *v = arg;
    if (v->authn == NULL || v->closing)
        return UV_ECANCELED;
    const char *colon = memchr(secret, ':', len);
    size_t ul = colon != NULL ? (size_t)(colon - secret) : 0;
    size_t pl = colon != NULL ? len - ul - 1 : 0;
    if (colon == NULL || ul == 0 || ul > TN_USERNAME_MAX || pl == 0 || pl > TN_PASSWORD_MAX) {
        tn_nsqauth_answer(req, TN_AUTH_DENIED, NULL);
        return 0;
    }
    nsqcheck_t *nc = tn_calloc(1, sizeof(*nc));
    if (nc == NULL)
        return UV_ENOMEM;
    nc->req = req;
    nc->v = v;
    memcpy(nc->user, secret, ul);
    nc->areq.data = nc;
    req->local_data = nc;
    tn_authn_check(v->authn, &nc->areq, nc->user, colon + 1, pl, on_nsq_checked);
    return 0;
}

static void nsq_cancel(void *arg, tn_auth_req_t *req)
{
    (void)arg;
    nsqcheck_t *nc = req->local_data;
    if (nc == NULL)
        return;
    tn_authn_cancel(&nc->areq);
    tn_free(nc);
}

tn_nsqauth_local_t tn_v1_nsq_auth(tn_v1_t *v)
{
    return (tn_nsqauth_local_t){nsq_check, nsq_cancel, v};
}

int tn__v1_users_register(tn_http_server_t *srv, tn_v1_t *v)
{
    /* Called once per listener (HTTP, HTTPS): one queue for them all. */
    if (v->users == NULL)
        v->users = tn_calloc(1, sizeof(hashq_t));
    if (v->users == NULL)
        return UV_ENOMEM;
    int rc = tn_http_route(srv, "GET", "/v1/users", 0, TN__V1_NO_BODY, on_users_list, v);
    rc = rc ? rc
            : tn_http_route(srv, "GET", "/v1/users/{username}", 0, TN__V1_NO_BODY, on_user_get, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/users", TN_JSON_MAX_BODY, TN__V1_TOO_BIG,
                            on_user_create, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/users/{username}", 0, TN__V1_NO_BODY,
                            on_user_delete, v);
    rc = rc ? rc
            : tn_http_route(srv, "PUT", "/v1/users/{username}/grants", TN_JSON_MAX_BODY,
                            TN__V1_TOO_BIG, on_user_grants, v);
    rc = rc ? rc
            : tn_http_route(srv, "PUT", "/v1/users/{username}/password", TN_JSON_MAX_BODY,
                            TN__V1_TOO_BIG, on_user_password, v);
    return rc;
}

void tn__v1_users_close(tn_v1_t *v)
{
    hashq_t *q = v->users;
    if (q == NULL)
        return;
    while (q->head != NULL) {
        uop_t *op = q->head;
        q->head = op->next;
        q->waiting--;
        uop_end(op, 503, "shutting down");
    }
    q->tail = NULL;
    /* Running jobs end in hash_done, which sees closing. The queue itself
     * is freed with the API (tn_v1_free is not needed: the process exits). */
}
