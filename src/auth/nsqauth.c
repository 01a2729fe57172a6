/* NSQ AUTH through nsqauthd-compatible servers. See nsqauth.h.
 *
 * DESIGN: one check.
 *   1. Look the key (remote ip, tls, common name, secret) up in the cache;
 *      an entry that has not expired answers at once.
 *   2. Otherwise send an HTTP/1.0 GET to the first server (resolve,
 *      connect, write, read to EOF), bounded by one timer for the whole
 *      exchange and by TN_NSQAUTH_MAX_RESPONSE bytes.
 *   3. 200 with a valid body: build the grants (compiling each regex),
 *      cache them until their TTL, answer OK (or DENIED when they grant
 *      nothing). 401/403: DENIED. Anything else: the next server, and
 *      UNAVAILABLE after the last.
 * A caller that goes away cancels: its request runs to the end (so handles
 * close in order) and answers no one. */
#include "core/platform.h"

#include "auth/nsqauth.h"

#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/jsonvalid.h"
#include "core/log.h"
#include "core/time.h"
#include "core/u64map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#define CACHE_MAX   10000
#define MAX_TTL_S   3600
#define MAX_PATTERN 512

typedef struct {
    char host[256];
    char port[8];
} server_t;

typedef struct centry_s {
    char *key;
    uint64_t hash;
    tn_authz_t *authz;
    struct centry_s *older;
    struct centry_s *newer;
} centry_t;

struct tn_nsqauth_s {
    uv_loop_t *loop;
    server_t *servers;
    uint32_t nservers;
    int64_t timeout_ms;
    tn_u64map_t cache; /* hash(key) -> centry_t */
    centry_t *oldest;
    centry_t *newest;
    size_t ncache;
    uint32_t inflight;
    bool closing;
    bool has_local;
    tn_nsqauth_local_t local;
};

typedef struct {
    uv_getaddrinfo_t gai;
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    uv_timer_t timer;
    tn_auth_req_t *req;
    tn_nsqauth_t *auth;
    char *request;
    tn_buf_t resp;
    int handles;
    bool tcp_open;
    bool finished;
} http_t;

/* --- grants ---------------------------------------------------------------- */

void tn_authz_ref(tn_authz_t *a)
{
    a->refs++;
}

void tn_authz_unref(tn_authz_t *a)
{
    if (a == NULL || --a->refs > 0)
        return;
    for (uint32_t i = 0; i < a->nrules; i++) {
        tn_authz_rule_t *r = &a->rules[i];
        regfree(&r->topic);
        for (uint32_t k = 0; k < r->nchannels; k++)
            regfree(&r->channels[k]);
        tn_free(r->channels);
    }
    tn_free(a->rules);
    tn_free(a->identity);
    tn_free(a->identity_url);
    tn_free(a);
}

static bool matches(const regex_t *re, const char *s)
{
    return regexec(re, s, 0, NULL, 0) == 0;
}

bool tn_authz_can_publish(const tn_authz_t *a, const char *topic)
{
    for (uint32_t i = 0; i < a->nrules; i++)
        if (a->rules[i].publish && matches(&a->rules[i].topic, topic))
            return true;
    return false;
}

bool tn_authz_can_subscribe(const tn_authz_t *a, const char *topic, const char *channel)
{
    for (uint32_t i = 0; i < a->nrules; i++) {
        const tn_authz_rule_t *r = &a->rules[i];
        if (!r->subscribe || !matches(&r->topic, topic))
            continue;
        for (uint32_t k = 0; k < r->nchannels; k++)
            if (matches(&r->channels[k], channel))
                return true;
    }
    return false;
}

static const char *str_at(yajl_val v, const char *name)
{
    const char *path[] = {name, NULL};
    yajl_val s = yajl_tree_get(v, path, yajl_t_string);
    return s != NULL ? YAJL_GET_STRING(s) : NULL;
}

/* Patterns come from the auth server. glibc's regcomp can take time and
 * memory exponential in stacked repetitions ("a++++", "(a{30}){30}"),
 * which nsqauthd's RE2 would never do; such patterns are refused: no
 * quantifier right after another, bounds of at most 32, at most 64
 * quantifiers. */
static bool pattern_tame(const char *p)
{
    bool after_quant = false;
    int quants = 0;
    for (; *p; p++) {
        char c = *p;
        if (c == '\\' && p[1] != '\0') {
            p++;
            after_quant = false;
            continue;
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (after_quant || ++quants > 64)
                return false;
            if (c == '{') {
                const char *q = p + 1;
                while (*q && *q != '}') {
                    if (*q >= '0' && *q <= '9') {
                        long n = strtol(q, (char **)&q, 10);
                        if (n > 32)
                            return false;
                    } else {
                        q++;
                    }
                }
                if (*q != '}')
                    return false;
                p = q;
            }
            after_quant = true;
            continue;
        }
        after_quant = false;
    }
    return true;
}

static int compile(regex_t *re, const char *pattern)
{
    if (strlen(pattern) > MAX_PATTERN || !pattern_tame(pattern))
        return UV_EINVAL;
    return regcomp(re, pattern, REG_EXTENDED | REG_NOSUB) == 0 ? 0 : UV_EINVAL;
}

tn_authz_t *tn_nsqauth_parse(const char *body)
{
    char errbuf[128];
    /* Checked first: the answer may be nested as deep as its size allows
     * (TN_NSQAUTH_MAX_RESPONSE), and yajl frees its tree by a recursion
     * per level, past the loop thread's stack. */
    if (!tn_json_valid(body, strlen(body)))
        return NULL;
    yajl_val root = yajl_tree_parse(body, errbuf, sizeof(errbuf));
    if (root == NULL || !YAJL_IS_OBJECT(root)) {
        yajl_tree_free(root);
        return NULL;
    }
    tn_authz_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL) {
        yajl_tree_free(root);
        return NULL;
    }
    a->refs = 1;
    const char *ttl_path[] = {"ttl", NULL};
    yajl_val ttl = yajl_tree_get(root, ttl_path, yajl_t_number);
    const char *auths_path[] = {"authorizations", NULL};
    yajl_val auths = yajl_tree_get(root, auths_path, yajl_t_array);
    if (ttl == NULL || !YAJL_IS_INTEGER(ttl) || YAJL_GET_INTEGER(ttl) <= 0 ||
        (auths == NULL && yajl_tree_get(root, auths_path, yajl_t_null) == NULL))
        goto bad;
    long long secs = YAJL_GET_INTEGER(ttl);
    if (secs > MAX_TTL_S)
        secs = MAX_TTL_S;
    a->expires_ms = tn_now_mono_ms() + secs * 1000;
    const char *id = str_at(root, "identity");
    const char *url = str_at(root, "identity_url");
    a->identity = tn_strdup(id != NULL ? id : "");
    a->identity_url = tn_strdup(url != NULL ? url : "");
    if (a->identity == NULL || a->identity_url == NULL)
        goto bad;
    size_t n = auths != NULL ? auths->u.array.len : 0;
    if (n > TN_NSQAUTH_MAX_RULES)
        goto bad;
    a->rules = n ? tn_calloc(n, sizeof(*a->rules)) : NULL;
    if (n > 0 && a->rules == NULL)
        goto bad;
    for (size_t i = 0; i < n; i++) {
        yajl_val item = auths->u.array.values[i];
        const char *topic = str_at(item, "topic");
        const char *ch_path[] = {"channels", NULL};
        const char *perm_path[] = {"permissions", NULL};
        yajl_val chans = yajl_tree_get(item, ch_path, yajl_t_array);
        yajl_val perms = yajl_tree_get(item, perm_path, yajl_t_array);
        if (topic == NULL || perms == NULL)
            goto bad;
        tn_authz_rule_t *r = &a->rules[a->nrules];
        if (compile(&r->topic, topic) != 0)
            goto bad;
        a->nrules++;
        size_t nc = chans != NULL ? chans->u.array.len : 0;
        if (nc > TN_NSQAUTH_MAX_RULES)
            goto bad;
        r->channels = nc ? tn_calloc(nc, sizeof(*r->channels)) : NULL;
        if (nc > 0 && r->channels == NULL)
            goto bad;
        for (size_t k = 0; k < nc; k++) {
            yajl_val c = chans->u.array.values[k];
            if (!YAJL_IS_STRING(c) || compile(&r->channels[k], YAJL_GET_STRING(c)) != 0)
                goto bad;
            r->nchannels++;
        }
        for (size_t k = 0; k < perms->u.array.len; k++) {
            yajl_val p = perms->u.array.values[k];
            const char *perm = YAJL_IS_STRING(p) ? p->u.string : NULL;
            if (perm == NULL)
                goto bad;
            if (strcmp(perm, "publish") == 0)
                r->publish = true;
            else if (strcmp(perm, "subscribe") == 0)
                r->subscribe = true;
        }
    }
    yajl_tree_free(root);
    return a;
bad:
    yajl_tree_free(root);
    tn_authz_unref(a);
    return NULL;
}

tn_authz_t *tn_authz_from_grants(const char *identity, const tn_authz_grant_t *g, uint32_t n,
                                 int64_t ttl_ms)
{
    tn_authz_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->refs = 1;
    a->expires_ms = tn_now_mono_ms() + ttl_ms;
    a->identity = tn_strdup(identity);
    a->identity_url = tn_strdup("");
    a->rules = n > 0 ? tn_calloc(n, sizeof(*a->rules)) : NULL;
    if (a->identity == NULL || a->identity_url == NULL || (n > 0 && a->rules == NULL))
        goto bad;
    for (uint32_t i = 0; i < n; i++) {
        /* Names hold [A-Za-z0-9._-]: only '.' needs escaping. */
        char re[2 * 256 + 4];
        size_t len = strlen(g[i].pattern);
        bool prefix = len > 0 && g[i].pattern[len - 1] == '*';
        size_t k = 0;
        re[k++] = '^';
        for (size_t j = 0; j < len - (prefix ? 1 : 0) && k + 4 < sizeof(re); j++) {
            char c = g[i].pattern[j];
            if (c == '.')
                re[k++] = '\\';
            else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '-'))
                goto bad;
            re[k++] = c;
        }
        if (!prefix)
            re[k++] = '$';
        re[k] = '\0';
        tn_authz_rule_t *r = &a->rules[a->nrules];
        if (regcomp(&r->topic, re, REG_EXTENDED | REG_NOSUB) != 0)
            goto bad;
        a->nrules++;
        r->channels = tn_calloc(1, sizeof(*r->channels));
        if (r->channels == NULL || regcomp(&r->channels[0], ".*", REG_EXTENDED | REG_NOSUB) != 0)
            goto bad;
        r->nchannels = 1;
        r->publish = g[i].publish;
        r->subscribe = g[i].subscribe;
    }
    return a;
bad:
    tn_authz_unref(a);
    return NULL;
}

/* --- cache ------------------------------------------------------------------- */

static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void centry_drop(tn_nsqauth_t *a, centry_t *e)
{
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        a->oldest = e->newer;
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        a->newest = e->older;
    tn_u64map_del(&a->cache, e->hash);
    a->ncache--;
    tn_authz_unref(e->authz);
    tn_free(e->key);
    tn_free(e);
}

static tn_authz_t *cache_get(tn_nsqauth_t *a, const char *key)
{
    uint64_t h = hash_key(key);
    centry_t *e = tn_u64map_get(&a->cache, h);
    if (e == NULL || strcmp(e->key, key) != 0)
        return NULL;
    if (e->authz->expires_ms <= tn_now_mono_ms()) {
        centry_drop(a, e);
        return NULL;
    }
    return e->authz;
}

static void cache_put(tn_nsqauth_t *a, const char *key, tn_authz_t *authz)
{
    uint64_t h = hash_key(key);
    centry_t *old = tn_u64map_get(&a->cache, h);
    if (old != NULL)
        centry_drop(a, old);
    while (a->ncache >= CACHE_MAX && a->oldest != NULL)
        centry_drop(a, a->oldest);
    centry_t *e = tn_calloc(1, sizeof(*e));
    if (e == NULL)
        return;
    e->key = tn_strdup(key);
    if (e->key == NULL || tn_u64map_put(&a->cache, h, e) != 0) {
        tn_free(e->key);
        tn_free(e);
        return;
    }
    e->hash = h;
    e->authz = authz;
    tn_authz_ref(authz);
    e->older = a->newest;
    if (a->newest != NULL)
        a->newest->newer = e;
    else
        a->oldest = e;
    a->newest = e;
    a->ncache++;
}

/* --- HTTP ---------------------------------------------------------------------- */

static void try_server(tn_auth_req_t *req);
static void maybe_free(tn_nsqauth_t *a);

static void req_done(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    tn_free(req->key);
    tn_free(req->query);
    req->key = req->query = NULL;
    req->http = NULL;
    req->cb(req, result, authz);
}

static void on_http_closed(uv_handle_t *h)
{
    http_t *x = h->data;
    if (--x->handles > 0)
        return;
    tn_nsqauth_t *a = x->auth;
    tn_buf_fini(&x->resp);
    tn_free(x->request);
    tn_free(x);
    a->inflight--;
    maybe_free(a);
}

/* The exchange is over: decide, then close the handles. */
static void http_finish(http_t *x, bool ok)
{
    if (x->finished)
        return;
    x->finished = true;
    uv_timer_stop(&x->timer);
    tn_auth_req_t *req = x->req;
    tn_nsqauth_t *a = x->auth;
    if (req != NULL && !a->closing) {
        int status = 0;
        const char *body = NULL;
        if (ok && tn_buf_append(&x->resp, "", 1) == 0) {
            const char *r = tn_buf_data(&x->resp);
            /* "HTTP/1.x NNN ..." */
            if (strncmp(r, "HTTP/1.", 7) == 0 && r[7] != '\0' && r[8] == ' ') {
                char *end;
                long v = strtol(r + 9, &end, 10);
                if (end == r + 12 && v >= 100 && v <= 599)
                    status = (int)v;
            }
            body = strstr(r, "\r\n\r\n");
            if (body != NULL)
                body += 4;
        }
        if (status == 401 || status == 403) {
            req_done(req, TN_AUTH_DENIED, NULL);
        } else {
            tn_authz_t *authz = status == 200 && body != NULL ? tn_nsqauth_parse(body) : NULL;
            if (authz != NULL) {
                cache_put(a, req->key, authz);
                req_done(req, authz->nrules > 0 ? TN_AUTH_OK : TN_AUTH_NONE,
                         authz->nrules > 0 ? authz : NULL);
                if (authz->nrules == 0)
                    tn_authz_unref(authz);
            } else {
                TN_LOG_RL(TN_LOG_WARN, 10000, "auth server %s:%s gave no usable answer (HTTP %d)",
                          a->servers[req->server].host, a->servers[req->server].port, status);
                req->server++;
                if (req->server < a->nservers)
                    try_server(req);
                else
                    req_done(req, TN_AUTH_UNAVAILABLE, NULL);
            }
        }
    } else if (req != NULL) {
        req_done(req, TN_AUTH_UNAVAILABLE, NULL);
    }
    x->handles = 1;
    if (x->tcp_open) {
        x->handles++;
        uv_close((uv_handle_t *)&x->tcp, on_http_closed);
    }
    uv_close((uv_handle_t *)&x->timer, on_http_closed);
}

static void on_timeout(uv_timer_t *t)
{
    http_t *x = t->data;
    http_finish(x, false);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    http_t *x = h->data;
    (void)suggested;
    if (tn_buf_reserve(&x->resp, 16384) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(x->resp.base + x->resp.len, 16384);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    http_t *x = s->data;
    (void)buf;
    if (n == UV_EOF) {
        http_finish(x, true);
        return;
    }
    if (n < 0) {
        http_finish(x, false);
        return;
    }
    x->resp.len += (size_t)n;
    if (tn_buf_size(&x->resp) > TN_NSQAUTH_MAX_RESPONSE)
        http_finish(x, false);
}

static void on_written(uv_write_t *w, int status)
{
    http_t *x = w->data;
    if (x->finished)
        return;
    if (status != 0) {
        http_finish(x, false);
        return;
    }
    uv_read_start((uv_stream_t *)&x->tcp, on_alloc, on_read);
}

static void on_connected(uv_connect_t *c, int status)
{
    http_t *x = c->data;
    if (x->finished)
        return;
    if (status != 0) {
        http_finish(x, false);
        return;
    }
    uv_buf_t b = uv_buf_init(x->request, (unsigned)strlen(x->request));
    x->write.data = x;
    if (uv_write(&x->write, (uv_stream_t *)&x->tcp, &b, 1, on_written) != 0)
        http_finish(x, false);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    http_t *x = g->data;
    if (x->finished) {
        uv_freeaddrinfo(res);
        return;
    }
    if (status != 0 || res == NULL) {
        uv_freeaddrinfo(res);
        http_finish(x, false);
        return;
    }
    uv_tcp_init(x->auth->loop, &x->tcp);
    x->tcp.data = x;
    x->tcp_open = true;
    x->connect.data = x;
    int rc = uv_tcp_connect(&x->connect, &x->tcp, res->ai_addr, on_connected);
    uv_freeaddrinfo(res);
    if (rc != 0)
        http_finish(x, false);
}

static void try_server(tn_auth_req_t *req)
{
    tn_nsqauth_t *a = req->auth;
    const server_t *srv = &a->servers[req->server];
    http_t *x = tn_calloc(1, sizeof(*x));
    if (x == NULL) {
        req_done(req, TN_AUTH_UNAVAILABLE, NULL);
        return;
    }
    size_t len = strlen(req->query) + strlen(srv->host) + 128;
    x->request = tn_malloc(len);
    if (x->request == NULL) {
        tn_free(x);
        req_done(req, TN_AUTH_UNAVAILABLE, NULL);
        return;
    }
    snprintf(x->request, len,
             "GET /auth?%s HTTP/1.0\r\nHost: %s:%s\r\nUser-Agent: ternd\r\nAccept: "
             "application/json\r\nConnection: close\r\n\r\n",
             req->query, srv->host, srv->port);
    x->req = req;
    x->auth = a;
    tn_buf_init(&x->resp);
    req->http = x;
    a->inflight++;
    uv_timer_init(a->loop, &x->timer);
    x->timer.data = x;
    uv_timer_start(&x->timer, on_timeout, (uint64_t)a->timeout_ms, 0);
    x->gai.data = x;
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (uv_getaddrinfo(a->loop, &x->gai, on_resolved, srv->host, srv->port, &hints) != 0)
        http_finish(x, false);
}

/* --- public ----------------------------------------------------------------------- */

static int url_escape(tn_buf_t *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            rc = tn_buf_append(out, &s[i], 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            rc = tn_buf_append(out, e, 3);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int tn_nsqauth_new(uv_loop_t *loop, const char *servers, int64_t timeout_ms, tn_nsqauth_t **out)
{
    tn_nsqauth_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return UV_ENOMEM;
    a->loop = loop;
    a->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    tn_u64map_init(&a->cache);
    const char *p = servers;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' '))
            p++, len--;
        if (len >= 7 && strncmp(p, "http://", 7) == 0)
            p += 7, len -= 7;
        const char *colon = memrchr(p, ':', len);
        if (len > 0) {
            server_t *ns = tn_realloc(a->servers, (a->nservers + 1) * sizeof(*ns));
            if (ns == NULL) {
                tn_free(a->servers);
                tn_free(a);
                return UV_ENOMEM;
            }
            a->servers = ns;
            server_t *s = &a->servers[a->nservers++];
            size_t hl = colon != NULL ? (size_t)(colon - p) : len;
            snprintf(s->host, sizeof(s->host), "%.*s", (int)hl, p);
            if (colon != NULL)
                snprintf(s->port, sizeof(s->port), "%.*s", (int)(len - hl - 1), colon + 1);
            else
                snprintf(s->port, sizeof(s->port), "4181");
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (a->nservers == 0) {
        tn_free(a);
        return UV_EINVAL;
    }
    *out = a;
    return 0;
}

int tn_nsqauth_new_local(uv_loop_t *loop, const tn_nsqauth_local_t *local, tn_nsqauth_t **out)
{
    tn_nsqauth_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return UV_ENOMEM;
    a->loop = loop;
    tn_u64map_init(&a->cache);
    a->has_local = true;
    a->local = *local;
    *out = a;
    return 0;
}

void tn_nsqauth_answer(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    tn_nsqauth_t *a = req->auth;
    req->local = false;
    req->local_data = NULL;
    a->inflight--;
    req_done(req, result, authz);
    maybe_free(a);
}

bool tn_nsqauth_is_local(const tn_nsqauth_t *a)
{
    return a->has_local;
}

static void maybe_free(tn_nsqauth_t *a)
{
    if (!a->closing || a->inflight > 0)
        return;
    while (a->oldest != NULL)
        centry_drop(a, a->oldest);
    tn_u64map_fini(&a->cache);
    tn_free(a->servers);
    tn_free(a);
}

void tn_nsqauth_close(tn_nsqauth_t *a)
{
    a->closing = true;
    maybe_free(a);
}

int tn_nsqauth_check(tn_nsqauth_t *a, tn_auth_req_t *req, const char *remote_ip, bool tls,
                     const char *common_name, const char *secret, size_t secret_len, tn_auth_cb cb)
{
    void *data = req->data;
    memset(req, 0, sizeof(*req));
    req->data = data;
    req->auth = a;
    req->cb = cb;
    if (a->has_local) {
        req->local = true;
        a->inflight++;
        int rc = a->local.check(a->local.arg, req, secret, secret_len);
        if (rc != 0 && req->local)
            tn_nsqauth_answer(req, TN_AUTH_UNAVAILABLE, NULL);
        return 0;
    }
    tn_buf_t q;
    tn_buf_init(&q);
    int rc = tn_buf_append(&q, "remote_ip=", 10);
    if (rc == 0)
        rc = url_escape(&q, remote_ip, strlen(remote_ip));
    if (rc == 0)
        rc = tn_buf_append(
            &q, tls ? "&tls=true&common_name=" : "&tls=false&common_name=", tls ? 22 : 23);
    if (rc == 0)
        rc = url_escape(&q, common_name, strlen(common_name));
    if (rc == 0)
        rc = tn_buf_append(&q, "&auth_secret=", 13);
    if (rc == 0)
        rc = url_escape(&q, secret, secret_len);
    if (rc == 0)
        rc = tn_buf_append(&q, "", 1);
    if (rc != 0) {
        tn_buf_fini(&q);
        return rc;
    }
    req->query = q.base; /* taken over */
    req->key = tn_strdup(req->query);
    if (req->key == NULL) {
        tn_free(req->query);
        req->query = NULL;
        return UV_ENOMEM;
    }
    tn_authz_t *hit = cache_get(a, req->key);
    if (hit != NULL) {
        tn_authz_ref(hit);
        req_done(req, TN_AUTH_OK, hit);
        return 0;
    }
    req->server = 0;
    try_server(req);
    return 0;
}

void tn_nsqauth_cancel(tn_auth_req_t *req)
{
    if (req->local) {
        tn_nsqauth_t *a = req->auth;
        a->local.cancel(a->local.arg, req);
        req->local = false;
        req->local_data = NULL;
        a->inflight--;
        maybe_free(a);
        return;
    }
    /* The exchange runs on (its handles close in order) but answers no one. */
    if (req->http != NULL)
        ((http_t *)req->http)->req = NULL;
    req->http = NULL;
    tn_free(req->key);
    tn_free(req->query);
    req->key = req->query = NULL;
}
