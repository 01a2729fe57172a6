/* The /v1/remotes routes: other tern clusters a remote child sends to, with
 * the password sealed in the metastore (meta/seal.h, meta/remote.h;
 * docs/remotes.md). Admin only, with security on.
 *
 * DESIGN: a create (POST) or a password change (PATCH).
 *   1. The cross-site guard, admin rights, the body (400); a body carrying
 *      a password that did not come over this node's HTTPS listener is
 *      refused 412 unless remotes-api-hop-encrypted says the hop to this
 *      node is encrypted; a node whose cluster secret was generated for
 *      this process refuses a create (409: the seal would not open after a
 *      restart).
 *   2. The URL is parsed and checked by the address guard
 *      (proto/http/guard.h: https only, allowed ports and hosts, no refused
 *      address literal): 400 with the reason.
 *   3. The password is sealed on this node (the cluster secret is every
 *      member's), under the cluster's salt (made once by the metastore
 *      leader: 503 before it exists), bound to the name, id, URL,
 *      username and CA.
 *   4. A REMOTE_PUT carrying who asked and a request id is proposed; the
 *      metastore forwards it to its leader from a follower. Its answer:
 *      201/200; 409 for a name taken; TN_ECHANGED (another write landed
 *      first) seals again from the state as it is now, up to
 *      TN__V1_CHANGE_TRIES times.
 *   5. An audit line here (who, what, which remote, the request id; never
 *      the password), and one on the metastore leader as it applies it.
 *
 * The password lives in this process only in the request body, the
 * operation (wiped when it ends) and the opened-credential cache (wiped
 * when replaced); answers and logs never carry it.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/remotes.h"

#include "api/v1/common.h"
#include "api/v1/rcheck.h"

#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "meta/remote.h"
#include "meta/seal.h"
#include "proto/http/guard.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SALT_NOT_YET                                                                               \
    "the cluster's seal salt is not made yet (the metastore leader makes it once it is "           \
    "ready); send it again in a moment"

/* An opened credential: the Authorization value for one version of one
 * remote (keyed by its record's fingerprint, which changes with any of
 * the fields the seal is bound to). */
typedef struct {
    char name[TN_REMOTE_NAME_MAX + 1];
    uint64_t fp;
    char *auth;    /* "Basic ..." (owned, wiped when freed); NULL when it did not open */
    char why[200]; /* why it did not open */
} cred_t;

typedef struct {
    uint8_t secret[TN_CONFIG_SECRET_MAX];
    size_t slen;
    bool generated;
    bool hop_encrypted;
    tn_guard_t guard;
    cred_t *creds;
    size_t ncreds, ccap;
} remotes_t;

/* --- the opened-credential cache -------------------------------------------------- */

static void cred_clear(cred_t *c)
{
    if (c->auth != NULL) {
        OPENSSL_cleanse(c->auth, strlen(c->auth));
        tn_free(c->auth);
    }
    c->auth = NULL;
}

/* Open r's sealed credential into c (fp set). */
static void cred_open(remotes_t *rs, const tn_meta_state_t *s, const tn_meta_remote_t *r, cred_t *c)
{
    cred_clear(c);
    snprintf(c->name, sizeof(c->name), "%s", r->name);
    c->fp = tn_meta_remote_fingerprint(r);
    c->why[0] = '\0';
    uint8_t key[TN_SEAL_KEY];
    char pw[TN_REMOTE_PASSWORD_MAX + 1];
    size_t plen = 0;
    tn_seal_ad_t ad = {r->name, r->id, r->url, r->username, r->ca_pem};
    int rc = !s->remotes.has_salt ? TN_ECORRUPT
             : rs->slen == 0      ? TN_EFAILED
                                  : tn_seal_key(rs->secret, rs->slen, s->remotes.salt, key);
    if (rc == 0)
        rc = tn_seal_open(key, &ad, r->sealed, r->sealed_len, pw, sizeof(pw), &plen, c->why,
                          sizeof(c->why));
    OPENSSL_cleanse(key, sizeof(key));
    if (rc == 0) {
        /* "Basic " + base64(username ":" password) */
        size_t ulen = strlen(r->username);
        size_t raw = ulen + 1 + plen;
        unsigned char *up = tn_malloc(raw);
        size_t b64 = 4 * ((raw + 2) / 3);
        c->auth = up != NULL ? tn_malloc(6 + b64 + 1) : NULL;
        if (c->auth != NULL) {
            memcpy(up, r->username, ulen);
            up[ulen] = ':';
            memcpy(up + ulen + 1, pw, plen);
            memcpy(c->auth, "Basic ", 6);
            EVP_EncodeBlock((unsigned char *)c->auth + 6, up, (int)raw);
        } else {
            snprintf(c->why, sizeof(c->why), "out of memory opening the credential");
        }
        if (up != NULL) {
            OPENSSL_cleanse(up, raw);
            tn_free(up);
        }
    } else {
        if (c->why[0] == '\0')
            snprintf(c->why, sizeof(c->why), "sealed credential of remote %s does not open: %s",
                     r->name,
                     rs->slen == 0 ? "this node has no cluster secret" : "no seal salt recorded");
        TN_LOG_RL(TN_LOG_ERROR, 10000, "remotes: %s (credential version %u)", c->why,
                  r->cred_version);
    }
    OPENSSL_cleanse(pw, sizeof(pw));
}

/* The cache entry of r, opened when r changed since; NULL when out of
 * memory. Entries of remotes gone are dropped on the way. */
static cred_t *cred_get(tn_v1_t *v, const tn_meta_remote_t *r)
{
    remotes_t *rs = v->remotes;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    for (size_t i = 0; i < rs->ncreds;) {
        if (tn_meta_remote_find(&s->remotes, rs->creds[i].name) == NULL) {
            cred_clear(&rs->creds[i]);
            rs->creds[i] = rs->creds[--rs->ncreds];
            continue;
        }
        i++;
    }
    cred_t *c = NULL;
    for (size_t i = 0; i < rs->ncreds && c == NULL; i++)
        if (strcmp(rs->creds[i].name, r->name) == 0)
            c = &rs->creds[i];
    if (c == NULL) {
        if (rs->ncreds == rs->ccap) {
            size_t cap = rs->ccap ? rs->ccap * 2 : 8;
            cred_t *n = tn_realloc(rs->creds, cap * sizeof(*n));
            if (n == NULL)
                return NULL;
            rs->creds = n;
            rs->ccap = cap;
        }
        c = &rs->creds[rs->ncreds++];
        memset(c, 0, sizeof(*c));
        cred_open(rs, s, r, c);
        return c;
    }
    if (c->fp != tn_meta_remote_fingerprint(r))
        cred_open(rs, s, r, c);
    return c;
}

int tn__v1_remote_credential(tn_v1_t *v, const char *name, const char **auth, const char **why)
{
    const tn_meta_remote_t *r = tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, name);
    if (r == NULL || v->remotes == NULL)
        return TN_ENOTFOUND;
    cred_t *c = cred_get(v, r);
    if (c == NULL)
        return UV_ENOMEM;
    *auth = c->auth;
    *why = c->why;
    return c->auth != NULL ? 0 : TN_ECORRUPT;
}

const char *tn__v1_remote_user(tn_v1_t *v, const char *remote)
{
    const tn_meta_remotes_t *rs = &tn_meta_state(v->meta)->remotes;
    size_t first;
    if (tn_meta_rchild_count(rs, NULL, remote, &first) == 0)
        return NULL;
    return rs->children[first]->child;
}

const tn_guard_t *tn__v1_remote_guard(tn_v1_t *v)
{
    const remotes_t *rs = v->remotes;
    return rs != NULL ? &rs->guard : NULL;
}

/* --- JSON ---------------------------------------------------------------------------- */

static void remote_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_remote_t *r, bool opened)
{
    tn_buf_append(b, "{\"name\":", 8);
    tn__v1_json_str(b, r->name);
    tn__v1_appendf(b, ",\"id\":\"%016" PRIx64 "\",\"url\":", r->id);
    tn__v1_json_str(b, r->url);
    tn_buf_append(b, ",\"username\":", 12);
    tn__v1_json_str(b, r->username);
    tn_buf_append(b, ",\"ca_pem\":", 10);
    if (r->ca_pem != NULL && r->ca_pem[0] != '\0')
        tn__v1_json_str(b, r->ca_pem);
    else
        tn_buf_append(b, "null", 4);
    tn__v1_appendf(b, ",\"credential_version\":%u", r->cred_version);
    /* Whether this node opens the sealed credential (its cache), and why
     * not; never anything of the credential itself. */
    cred_t *c = opened ? cred_get(v, r) : NULL;
    if (c != NULL && c->auth != NULL) {
        tn_buf_append(b, ",\"credential\":\"ready\"", 21);
    } else if (c != NULL) {
        tn_buf_append(b, ",\"credential\":\"does_not_open\",\"credential_error\":", 49);
        tn__v1_json_str(b, c->why);
    }
    tn__v1_appendf(b,
                   ",\"created_at_ms\":%" PRId64 ",\"updated_at_ms\":%" PRId64 ",\"created_by\":",
                   r->created_at_ms, r->updated_at_ms);
    tn__v1_json_str(b, r->created_by);
    tn_buf_append(b, ",\"updated_by\":", 14);
    tn__v1_json_str(b, r->updated_by);
    /* The last check this node keeps (api/v1/rcheck.c: in memory). */
    tn_buf_append(b, ",\"last_check\":", 14);
    tn__v1_rcheck_last_json(v, b, r->name, r->id);
    tn_buf_append(b, "}", 1);
}

static bool security_on(tn_v1_t *v, tn_http_request_t *r)
{
    if (v->o.security)
        return true;
    tn__v1_error(r, 403,
                 "remotes need security-enabled=true: they are managed by admins, and their "
                 "credentials are sealed under the cluster secret",
                 NULL);
    return false;
}

static void on_list(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!security_on(v, r) || !tn__v1_admin_only(v, r))
        return;
    const tn_meta_remotes_t *rs = &tn_meta_state(v->meta)->remotes;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"remotes\":[", 12);
    for (size_t i = 0; i < rs->n; i++) {
        if (i > 0)
            tn_buf_append(&b, ",", 1);
        remote_json(v, &b, rs->v[i], true);
    }
    tn_buf_append(&b, "]}", 2);
    tn__v1_respond_buf(r, 200, &b);
}

/* The path's remote name into name; false after answering 404. */
static bool path_name(tn_http_request_t *r, char name[TN_REMOTE_NAME_MAX + 1])
{
    const tn_iov_t *p = tn_http_param(r, "name");
    if (p == NULL || !tn_meta_remote_name_valid(p->base, p->len)) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return false;
    }
    memcpy(name, p->base, p->len);
    name[p->len] = '\0';
    return true;
}

static void on_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char name[TN_REMOTE_NAME_MAX + 1];
    if (!security_on(v, r) || !tn__v1_admin_only(v, r) || !path_name(r, name))
        return;
    const tn_meta_remote_t *rec = tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, name);
    if (rec == NULL) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    remote_json(v, &b, rec, true);
    tn__v1_respond_buf(r, 200, &b);
}

/* --- bodies --------------------------------------------------------------------------- */

typedef struct {
    char name[TN_REMOTE_NAME_MAX + 1];
    char url[TN_REMOTE_URL_MAX + 1];
    char username[TN_REMOTE_USER_MAX + 1];
    char password[TN_REMOTE_PASSWORD_MAX + 1];
    char ca_pem[TN_REMOTE_CA_MAX + 1];
} body_t;

enum { F_NAME, F_URL, F_USERNAME, F_PASSWORD, F_CA, F_COUNT };

static const tn_jfield_t body_fields[F_COUNT] = {
    {"name", TN_JF_STR, offsetof(body_t, name), TN_REMOTE_NAME_MAX},
    {"url", TN_JF_STR, offsetof(body_t, url), TN_REMOTE_URL_MAX},
    {"username", TN_JF_STR, offsetof(body_t, username), TN_REMOTE_USER_MAX},
    {"password", TN_JF_STR, offsetof(body_t, password), TN_REMOTE_PASSWORD_MAX},
    {"ca_pem", TN_JF_STR, offsetof(body_t, ca_pem), TN_REMOTE_CA_MAX},
};

static void body_free(body_t *b)
{
    if (b == NULL)
        return;
    OPENSSL_cleanse(b->password, sizeof(b->password));
    tn_free(b);
}

/* Decode r's body (fields F_NAME.. F_CA; PATCH takes no name); NULL after
 * answering 400 or 503. */
static body_t *decode(tn_http_request_t *r, bool patch, bool given[F_COUNT])
{
    body_t *b = tn_calloc(1, sizeof(*b));
    if (b == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return NULL;
    }
    char err[200];
    const tn_jfield_t *f = patch ? body_fields + 1 : body_fields;
    size_t nf = patch ? F_COUNT - 1 : F_COUNT;
    bool *g = patch ? given + 1 : given;
    given[F_NAME] = false;
    int rc =
        tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), f, nf, b, g, err, sizeof(err));
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        body_free(b);
        return NULL;
    }
    if (rc != 0) {
        tn__v1_error(r, 400, err, NULL);
        body_free(b);
        return NULL;
    }
    return b;
}

/* Check the fields given (400 after answering); url parsed into *u. */
static bool check_fields(tn_v1_t *v, tn_http_request_t *r, const body_t *b,
                         const bool given[F_COUNT], tn_guard_url_t *u)
{
    remotes_t *rs = v->remotes;
    char err[300], msg[400];
    if (given[F_NAME] && !tn_meta_remote_name_valid(b->name, strlen(b->name))) {
        tn__v1_error(r, 400, "invalid argument: name must match [A-Za-z0-9._-]{1,64}", NULL);
        return false;
    }
    if (given[F_URL]) {
        int rc = tn_guard_parse_url(b->url, strlen(b->url), u, err, sizeof(err));
        if (rc == 0)
            rc = tn_guard_check_url(&rs->guard, u, err, sizeof(err));
        if (rc != 0) {
            snprintf(msg, sizeof(msg), "invalid argument: url: %s", err);
            tn__v1_error(r, 400, msg, NULL);
            return false;
        }
    }
    if (given[F_USERNAME] && !tn_username_valid(b->username, strlen(b->username))) {
        tn__v1_error(r, 400, "invalid argument: username must match [A-Za-z0-9._-]{1,64}", NULL);
        return false;
    }
    if (given[F_PASSWORD] && b->password[0] == '\0') {
        tn__v1_error(r, 400, "invalid argument: password must be 1..1024 bytes", NULL);
        return false;
    }
    if (given[F_CA] && b->ca_pem[0] != '\0') {
        /* At least one certificate, and nothing that is not one. */
        BIO *bio = BIO_new_mem_buf(b->ca_pem, (int)strlen(b->ca_pem));
        int certs = 0;
        X509 *x;
        while (bio != NULL && (x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
            X509_free(x);
            certs++;
        }
        BIO_free(bio);
        if (certs == 0) {
            tn__v1_error(r, 400,
                         "invalid argument: ca_pem must hold PEM certificates "
                         "(-----BEGIN CERTIFICATE-----)",
                         NULL);
            return false;
        }
    }
    return true;
}

/* 412 for a body with a password that reached this node in clear. */
static bool hop_ok(tn_v1_t *v, tn_http_request_t *r, bool has_password)
{
    remotes_t *rs = v->remotes;
    if (!has_password || r->secure || rs->hop_encrypted)
        return true;
    tn__v1_error(r, 412,
                 "a remote's password must reach this node over its HTTPS listener "
                 "(https-address); set remotes-api-hop-encrypted=true only when the hop from "
                 "your ingress to this node is encrypted otherwise",
                 NULL);
    return false;
}

/* --- operations ------------------------------------------------------------------------ */

typedef enum { OP_CREATE = 1, OP_PATCH, OP_DELETE, OP_TAMPER } op_kind_t;

typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client left */
    op_kind_t kind;
    tn_meta_req_t mreq;
    tn_meta_remote_cmd_t cmd; /* what was proposed; cmd.rec.ca_pem borrowed from ca */
    char *ca;                 /* owned */
    char password[TN_REMOTE_PASSWORD_MAX + 1]; /* "" when not changing */
    size_t plen;
    /* PATCH: what changes (applied to the record as it is at each try) */
    bool set_url, set_user, set_ca;
    char url[TN_REMOTE_URL_MAX + 1];
    char username[TN_REMOTE_USER_MAX + 1];
    char request[TN_REMOTE_REQUEST_MAX + 1];
    char by[TN_REMOTE_BY_MAX + 1];
    int tries;
} rop_t;

static void rop_free(rop_t *op)
{
    OPENSSL_cleanse(op->password, sizeof(op->password));
    OPENSSL_cleanse(op->cmd.rec.sealed, sizeof(op->cmd.rec.sealed));
    tn_free(op->ca);
    tn_free(op);
}

static void rop_cancel(tn_http_request_t *r)
{
    rop_t *op = r->data;
    op->r = NULL;
}

static rop_t *rop_new(tn_v1_t *v, tn_http_request_t *r, op_kind_t kind)
{
    rop_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return NULL;
    }
    op->v = v;
    op->r = r;
    op->kind = kind;
    uint8_t id[8];
    if (RAND_bytes(id, sizeof(id)) != 1) {
        tn_free(op);
        tn__v1_error(r, 500, "no randomness for a request id", NULL);
        return NULL;
    }
    snprintf(op->request, sizeof(op->request), "%016" PRIx64, tn_get_u64(id));
    snprintf(op->by, sizeof(op->by), "%.*s", TN_REMOTE_BY_MAX, r->principal);
    r->data = op;
    r->on_cancel = rop_cancel;
    return op;
}

static void audit(const rop_t *op, const char *what)
{
    char version[40] = "";
    if (op->kind != OP_DELETE)
        snprintf(version, sizeof(version), ", credential version %u", op->cmd.rec.cred_version);
    TN_LOG(TN_LOG_NOTICE, "audit: %s %s remote %s (request %s%s, from %s)",
           op->by[0] != '\0' ? op->by : "(security off)", what, op->cmd.rec.name, op->request,
           version, op->r != NULL ? op->r->remote : "a client gone");
}

static void rop_end(rop_t *op, int status, const char *msg)
{
    tn_buf_t b;
    tn_buf_init(&b);
    if (op->r != NULL && (status == 200 || status == 201))
        remote_json(op->v, &b, &op->cmd.rec, false);
    tn__v1_end(op->r, status, msg, &b);
    rop_free(op);
}

static void propose(rop_t *op);

static void on_proposed(tn_meta_req_t *req, int status)
{
    rop_t *op = req->data;
    if (status == 0) {
        static const char *const what[] = {"", "created", "changed", "deleted",
                                           "tampered with (test hook)"};
        audit(op, what[op->kind]);
        rop_end(op, op->kind == OP_CREATE ? 201 : op->kind == OP_DELETE ? 204 : 200, NULL);
    } else if (status == TN_ECHANGED && ++op->tries < TN__V1_CHANGE_TRIES) {
        propose(op); /* sealed again from the state as it is now */
    } else if (status == TN_ECHANGED) {
        rop_end(op, 409, "the remote kept changing while this change was applied; send it again");
    } else if (status == UV_EEXIST) {
        rop_end(op, 409, "remote already exists");
    } else if (status == TN_ENOTFOUND) {
        rop_end(op, 404, "remote not found");
    } else if (status == UV_EBUSY) {
        /* A remote child was attached after the door's check. */
        rop_end(op, 409, "the remote is used by a remote child: detach it first");
    } else if (status == UV_EAGAIN) {
        rop_end(op, 503, SALT_NOT_YET);
    } else {
        rop_end(op, 503, "control plane temporarily unavailable");
    }
}

/* Seal op's password for op->cmd.rec under the cluster's salt, into
 * op->cmd: 0, UV_EAGAIN (no salt yet) or another error. */
static int seal(rop_t *op, const tn_meta_state_t *s)
{
    remotes_t *rs = op->v->remotes;
    if (!s->remotes.has_salt)
        return UV_EAGAIN; /* the metastore leader makes it once (meta/remote.h) */
    memcpy(op->cmd.salt, s->remotes.salt, TN_SEAL_SALT);
    uint8_t key[TN_SEAL_KEY];
    int rc = tn_seal_key(rs->secret, rs->slen, op->cmd.salt, key);
    tn_meta_remote_t *rec = &op->cmd.rec;
    tn_seal_ad_t ad = {rec->name, rec->id, rec->url, rec->username, rec->ca_pem};
    tn_buf_t b;
    tn_buf_init(&b);
    if (rc == 0)
        rc = tn_seal(key, &ad, op->password, op->plen, &b);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc == 0 && tn_buf_size(&b) <= sizeof(rec->sealed)) {
        memcpy(rec->sealed, tn_buf_data(&b), tn_buf_size(&b));
        rec->sealed_len = (uint16_t)tn_buf_size(&b);
    } else if (rc == 0) {
        rc = UV_EINVAL;
    }
    tn_buf_fini(&b); /* ciphertext only */
    return rc;
}

/* seal()'s answer rc: true when sealed, else false after ending op. */
static bool sealed(rop_t *op, int rc)
{
    if (rc == UV_EAGAIN)
        rop_end(op, 503, SALT_NOT_YET);
    else if (rc != 0)
        rop_end(op, 500, "sealing the credential failed");
    return rc == 0;
}

/* Propose op's change, made from the record as the metastore has it now. */
static void propose(rop_t *op)
{
    tn_v1_t *v = op->v;
    if (v->closing) {
        rop_end(op, 503, "shutting down");
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    const tn_meta_remote_t *cur = tn_meta_remote_find(&s->remotes, op->cmd.rec.name);
    tn_meta_remote_t *rec = &op->cmd.rec;
    int64_t now = tn_now_wall_ms();
    uint8_t type = TN_MC_REMOTE_PUT;
    if (op->kind == OP_CREATE) {
        if (cur != NULL) {
            rop_end(op, 409, "remote already exists");
            return;
        }
        op->cmd.cond = 1;
        rec->created_at_ms = rec->updated_at_ms = now;
        rec->cred_version = 1;
        if (!sealed(op, seal(op, s)))
            return;
    } else if (cur == NULL) {
        rop_end(op, 404, "remote not found");
        return;
    } else if (op->kind == OP_DELETE) {
        type = TN_MC_REMOTE_DELETE;
    } else {
        if (!op->set_ca) { /* a copy: the answer outlives cur */
            tn_free(op->ca);
            if ((op->ca = tn_strdup(cur->ca_pem)) == NULL) {
                rop_end(op, 503, "out of memory");
                return;
            }
        }
        *rec = *cur;
        rec->ca_pem = op->ca;
        op->cmd.cond = 2;
        op->cmd.expect = tn_meta_remote_fingerprint(cur);
        memcpy(op->cmd.salt, s->remotes.salt, TN_SEAL_SALT);
        rec->updated_at_ms = now;
        if (op->set_url)
            snprintf(rec->url, sizeof(rec->url), "%s", op->url);
        if (op->set_user)
            snprintf(rec->username, sizeof(rec->username), "%s", op->username);
        if (op->kind == OP_TAMPER) {
            rec->sealed[TN_SEAL_NONCE] ^= 0x01; /* one ciphertext bit: the tag fails */
        } else if (op->plen > 0) {
            rec->cred_version = cur->cred_version + 1;
            if (!sealed(op, seal(op, s)))
                return;
        }
    }
    snprintf(rec->updated_by, sizeof(rec->updated_by), "%s", op->by);
    snprintf(rec->request, sizeof(rec->request), "%s", op->request);
    if (op->kind == OP_CREATE)
        snprintf(rec->created_by, sizeof(rec->created_by), "%s", op->by);
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    c.remote = &op->cmd; /* borrowed: the proposal copies its encoding */
    op->mreq.data = op;
    int rc = tn_meta_propose(v->meta, &op->mreq, &c, on_proposed);
    if (rc != 0)
        rop_end(op, 503, "control plane temporarily unavailable");
}

/* --- routes ------------------------------------------------------------------------------ */

static void on_create(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    remotes_t *rs = v->remotes;
    if (!security_on(v, r) || !tn__v1_guard_write(r) || !tn__v1_admin_only(v, r))
        return;
    bool given[F_COUNT];
    body_t *b = decode(r, false, given);
    if (b == NULL)
        return;
    tn_guard_url_t u;
    if (!hop_ok(v, r, given[F_PASSWORD])) {
        body_free(b);
        return;
    }
    if (rs->slen == 0 || rs->generated) {
        tn__v1_error(r, 409,
                     "this node's cluster secret is generated for this process (no "
                     "TERN_CLUSTER_SECRET or cluster-secret-file): a remote's sealed credential "
                     "would not open after a restart; configure a cluster secret first",
                     NULL);
        body_free(b);
        return;
    }
    if (!given[F_NAME] || !given[F_URL] || !given[F_USERNAME] || !given[F_PASSWORD]) {
        tn__v1_error(r, 400, "invalid argument: name, url, username and password are required",
                     NULL);
        body_free(b);
        return;
    }
    if (!check_fields(v, r, b, given, &u)) {
        body_free(b);
        return;
    }
    if (tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, b->name) != NULL) {
        tn__v1_error(r, 409, "remote already exists", NULL);
        body_free(b);
        return;
    }
    rop_t *op = rop_new(v, r, OP_CREATE);
    if (op != NULL) {
        tn_meta_remote_t *rec = &op->cmd.rec;
        snprintf(rec->name, sizeof(rec->name), "%s", b->name);
        snprintf(rec->url, sizeof(rec->url), "%s", b->url);
        snprintf(rec->username, sizeof(rec->username), "%s", b->username);
        op->ca = tn_strdup(given[F_CA] ? b->ca_pem : "");
        uint8_t id[8];
        uint64_t rid = 0;
        while (rid == 0 && RAND_bytes(id, sizeof(id)) == 1)
            rid = tn_get_u64(id);
        rec->id = rid;
        rec->ca_pem = op->ca;
        op->plen = strlen(b->password);
        memcpy(op->password, b->password, op->plen);
        if (op->ca == NULL || rid == 0)
            rop_end(op, 503, "out of memory");
        else
            propose(op);
    }
    body_free(b);
}

static void on_patch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char name[TN_REMOTE_NAME_MAX + 1];
    if (!security_on(v, r) || !tn__v1_guard_write(r) || !tn__v1_admin_only(v, r) ||
        !path_name(r, name))
        return;
    const tn_meta_remote_t *cur = tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, name);
    if (cur == NULL) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return;
    }
    bool given[F_COUNT];
    body_t *b = decode(r, true, given);
    if (b == NULL)
        return;
    tn_guard_url_t u;
    bool url = given[F_URL] && strcmp(b->url, cur->url) != 0;
    bool user = given[F_USERNAME] && strcmp(b->username, cur->username) != 0;
    bool ca = given[F_CA] && strcmp(b->ca_pem, cur->ca_pem) != 0;
    const char *refusal = NULL;
    if (!hop_ok(v, r, given[F_PASSWORD])) {
        body_free(b);
        return;
    }
    if (!given[F_URL] && !given[F_USERNAME] && !given[F_CA] && !given[F_PASSWORD])
        refusal = "invalid argument: give password, url, username or ca_pem";
    else if ((url || user || ca) && !given[F_PASSWORD])
        refusal = "invalid argument: changing url, username or ca_pem needs the password again: "
                  "the sealed credential is bound to them";
    if (refusal != NULL) {
        tn__v1_error(r, 400, refusal, NULL);
        body_free(b);
        return;
    }
    if (!check_fields(v, r, b, given, &u)) {
        body_free(b);
        return;
    }
    rop_t *op = rop_new(v, r, OP_PATCH);
    if (op != NULL) {
        snprintf(op->cmd.rec.name, sizeof(op->cmd.rec.name), "%s", name);
        op->set_url = url;
        op->set_user = user;
        op->set_ca = ca;
        snprintf(op->url, sizeof(op->url), "%s", b->url);
        snprintf(op->username, sizeof(op->username), "%s", b->username);
        op->ca = ca ? tn_strdup(b->ca_pem) : NULL;
        op->plen = given[F_PASSWORD] ? strlen(b->password) : 0;
        memcpy(op->password, b->password, op->plen);
        if (ca && op->ca == NULL)
            rop_end(op, 503, "out of memory");
        else
            propose(op);
    }
    body_free(b);
}

static void on_delete(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char name[TN_REMOTE_NAME_MAX + 1];
    if (!security_on(v, r) || !tn__v1_admin_only(v, r) || !path_name(r, name))
        return;
    if (tn_meta_remote_find(&tn_meta_state(v->meta)->remotes, name) == NULL) {
        tn__v1_error(r, 404, "remote not found", NULL);
        return;
    }
    const char *child = tn__v1_remote_user(v, name);
    if (child != NULL) {
        char msg[400];
        snprintf(msg, sizeof(msg), "remote %s is used by the remote child %s: detach it first",
                 name, child);
        tn__v1_error(r, 409, msg, NULL);
        return;
    }
    if (!tn__v1_caught_up(v, r, on_delete))
        return;
    rop_t *op = rop_new(v, r, OP_DELETE);
    if (op != NULL) {
        snprintf(op->cmd.rec.name, sizeof(op->cmd.rec.name), "%s", name);
        propose(op);
    }
}

#ifdef TN_TEST
/* Test hook (TN_TEST builds only, ternd-test): flip one bit of a remote's
 * sealed credential through the metastore, so that every node holds a
 * tampered record and the end-to-end test sees it refused. */
static void on_tamper(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char name[TN_REMOTE_NAME_MAX + 1];
    if (!security_on(v, r) || !tn__v1_admin_only(v, r) || !path_name(r, name))
        return;
    rop_t *op = rop_new(v, r, OP_TAMPER);
    if (op != NULL) {
        snprintf(op->cmd.rec.name, sizeof(op->cmd.rec.name), "%s", name);
        propose(op);
    }
}
#endif

int tn__v1_remotes_register(tn_http_server_t *srv, tn_v1_t *v)
{
    if (v->remotes == NULL) {
        remotes_t *rs = tn_calloc(1, sizeof(*rs));
        if (rs == NULL)
            return UV_ENOMEM;
        size_t n = TN_MIN(v->o.cluster_secret_len, sizeof(rs->secret));
        if (n > 0)
            memcpy(rs->secret, v->o.cluster_secret, n);
        rs->slen = n;
        rs->generated = v->o.cluster_secret_generated;
        rs->hop_encrypted = v->o.remotes_hop_encrypted;
        if (v->o.remotes_guard != NULL) {
            rs->guard = *v->o.remotes_guard;
        } else {
            char err[200];
            if (tn_guard_init(&rs->guard, NULL, NULL, NULL, err, sizeof(err)) != 0) {
                tn_free(rs);
                return UV_EINVAL;
            }
        }
        v->remotes = rs;
        /* Copied: v->o keeps no pointer to the caller's secret or guard. */
        v->o.cluster_secret = NULL;
        v->o.remotes_guard = NULL;
    }
    int rc = tn_http_route(srv, "GET", "/v1/remotes", 0, TN__V1_NO_BODY, on_list, v);
    rc = rc ? rc : tn_http_route(srv, "GET", "/v1/remotes/{name}", 0, TN__V1_NO_BODY, on_get, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/remotes", TN_JSON_MAX_BODY, TN__V1_TOO_BIG, on_create,
                            v);
    rc = rc ? rc
            : tn_http_route(srv, "PATCH", "/v1/remotes/{name}", TN_JSON_MAX_BODY, TN__V1_TOO_BIG,
                            on_patch, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/remotes/{name}", 0, TN__V1_NO_BODY, on_delete, v);
    rc = rc ? rc : tn__v1_rcheck_register(srv, v);
#ifdef TN_TEST
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/remotes/{name}/test-tamper", 0, TN__V1_NO_BODY,
                            on_tamper, v);
#endif
    return rc;
}

void tn__v1_remotes_close(tn_v1_t *v)
{
    tn__v1_rcheck_close(v);
    remotes_t *rs = v->remotes;
    if (rs == NULL)
        return;
    for (size_t i = 0; i < rs->ncreds; i++)
        cred_clear(&rs->creds[i]);
    tn_free(rs->creds);
    OPENSSL_cleanse(rs, sizeof(*rs));
    tn_free(rs);
    v->remotes = NULL;
}
