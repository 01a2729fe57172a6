/* The credential verifier. See authn.h. */
#include "core/platform.h"

#include "auth/authn.h"

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"
#include "core/u64map.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#define USER_BURST       5.0
#define USER_REFILL_MS   12000.0
#define NODE_BURST       32.0
#define NODE_PER_SEC     4.0
#define BUDGET_LOG_EVERY 10000

typedef struct {
    char user[TN_USERNAME_MAX + 1];
    unsigned char mac[32];
    char hash[TN_BCRYPT_HASH_MAX + 1]; /* the stored hash it was verified against */
} cred_t;

typedef struct {
    char user[TN_USERNAME_MAX + 1];
    double tokens;
    int64_t at_ms;
} bucket_t;

struct tn_authn_flight_s {
    tn_authn_t *a;
    uv_work_t work;
    char user[TN_USERNAME_MAX + 1];
    unsigned char mac[32];
    char hash[TN_BCRYPT_HASH_MAX + 1];
    char password[TN_PASSWORD_MAX + 1];
    size_t len;
    bool suspect;     /* the user has recent failures */
    bool took_budget; /* a node budget token is held */
    bool ok;
    bool started;
    tn_authn_req_t *waiters;
    tn_authn_flight_t *next;  /* in the all-flights list */
    tn_authn_flight_t *qnext; /* in a run queue */
};

struct tn_authn_s {
    uv_loop_t *loop;
    tn_authn_opts_t o;
    tn_authn_lookup_cb lookup;
    void *lookup_arg;
    unsigned char key[32]; /* HMAC key for cached credentials, per process */
    /* HMAC-SHA256 keyed with key once, re-initialised for each check
     * (OpenSSL's one-shot HMAC() fetches the digest and builds and frees
     * its contexts every call: about 4x the cost). Loop thread only. */
    EVP_MAC *hmac;
    EVP_MAC_CTX *mac;
    tn_u64map_t creds;   /* fnv(user) -> cred_t */
    tn_u64map_t buckets; /* fnv(user) -> bucket_t */
    double node_tokens;
    int64_t node_at_ms;
    int64_t last_budget_log;
    tn_authn_flight_t *flights;
    tn_authn_flight_t *clean_head, *clean_tail;
    tn_authn_flight_t *suspect_head, *suspect_tail;
    uint32_t running;
    uint32_t queued;
    int64_t skew_ms;   /* tests: added to the clock (tn__authn_advance) */
    int64_t pinned_ms; /* tests: the clock stands here when not 0 */
    bool closing;
    void (*close_cb)(void *arg);
    void *close_arg;
    tn_authn_stats_t st;
};

static uint64_t fnv(const char *s)
{
    return tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, s);
}

static int64_t now_ms(const tn_authn_t *a)
{
    return (a->pinned_ms != 0 ? a->pinned_ms : tn_now_mono_ms()) + a->skew_ms;
}

/* a->hmac and a->mac keyed with a->key. 0 or UV_ENOMEM (OpenSSL could
 * not make them; nothing is left to free). */
static int mac_new(tn_authn_t *a)
{
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    a->hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    a->mac = a->hmac != NULL ? EVP_MAC_CTX_new(a->hmac) : NULL;
    if (a->mac == NULL || EVP_MAC_init(a->mac, a->key, sizeof(a->key), params) != 1) {
        EVP_MAC_CTX_free(a->mac);
        EVP_MAC_free(a->hmac);
        a->mac = NULL;
        a->hmac = NULL;
        return UV_ENOMEM;
    }
    return 0;
}

void tn_authn_opts_default(tn_authn_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->max_running = 4;
    o->cache_entries = 4096;
}

int tn_authn_new(uv_loop_t *loop, const tn_authn_opts_t *o, tn_authn_lookup_cb lookup, void *arg,
                 tn_authn_t **out)
{
    tn_authn_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return UV_ENOMEM;
    if (RAND_bytes(a->key, sizeof(a->key)) != 1) {
        tn_free(a);
        return UV_EIO;
    }
    int rc = mac_new(a);
    if (rc != 0) {
        OPENSSL_cleanse(a->key, sizeof(a->key));
        tn_free(a);
        return rc;
    }
    a->loop = loop;
    a->o = *o;
    if (a->o.max_running == 0)
        a->o.max_running = 4;
    if (a->o.cache_entries == 0)
        a->o.cache_entries = 4096;
    a->lookup = lookup;
    a->lookup_arg = arg;
    tn_u64map_init(&a->creds);
    tn_u64map_init(&a->buckets);
    a->node_tokens = NODE_BURST;
    a->node_at_ms = now_ms(a);
    *out = a;
    return 0;
}

/* The credential cache's MAC of user and password: HMAC-SHA256 under
 * the process key of user, a NUL, then the password. False only if
 * OpenSSL fails on a context it has already keyed (not seen); out is then
 * zeros and must not be used. */
static bool mac_of(const tn_authn_t *a, const char *user, const char *pw, size_t len,
                   unsigned char out[32])
{
    size_t n = 0;
    bool ok = EVP_MAC_init(a->mac, NULL, 0, NULL) == 1 &&
              EVP_MAC_update(a->mac, (const unsigned char *)user, strlen(user) + 1) == 1 &&
              EVP_MAC_update(a->mac, (const unsigned char *)pw, len) == 1 &&
              EVP_MAC_final(a->mac, out, &n, 32) == 1 && n == 32;
    /* Start over at once: no byte of the password stays in the context. */
    (void)EVP_MAC_init(a->mac, NULL, 0, NULL);
    if (!ok)
        memset(out, 0, 32);
    return ok;
}

/* The user's throttle bucket, refilled to now (NULL: no recent failure). */
static bucket_t *bucket_of(tn_authn_t *a, const char *user)
{
    bucket_t *b = tn_u64map_get(&a->buckets, fnv(user));
    if (b == NULL || strcmp(b->user, user) != 0)
        return NULL;
    int64_t now = now_ms(a);
    b->tokens += (double)(now - b->at_ms) / USER_REFILL_MS;
    b->at_ms = now;
    if (b->tokens >= USER_BURST) {
        /* Full again: forgotten. */
        tn_u64map_del(&a->buckets, fnv(user));
        tn_free(b);
        return NULL;
    }
    return b;
}

static void node_refill(tn_authn_t *a)
{
    int64_t now = now_ms(a);
    a->node_tokens += (double)(now - a->node_at_ms) * NODE_PER_SEC / 1000.0;
    if (a->node_tokens > NODE_BURST)
        a->node_tokens = NODE_BURST;
    a->node_at_ms = now;
}

static void spend_user_token(tn_authn_t *a, const char *user)
{
    bucket_t *b = bucket_of(a, user);
    if (b == NULL) {
        b = tn_calloc(1, sizeof(*b));
        if (b == NULL)
            return;
        snprintf(b->user, sizeof(b->user), "%s", user);
        b->tokens = USER_BURST;
        b->at_ms = now_ms(a);
        bucket_t *old = tn_u64map_del(&a->buckets, fnv(user));
        tn_free(old);
        if (tn_u64map_put(&a->buckets, fnv(user), b) != 0) {
            tn_free(b);
            return;
        }
    }
    b->tokens -= 1.0;
}

static void cache_put(tn_authn_t *a, const tn_authn_flight_t *f)
{
    uint64_t k = fnv(f->user);
    cred_t *c = tn_u64map_get(&a->creds, k);
    if (c == NULL) {
        if (tn_u64map_size(&a->creds) >= a->o.cache_entries) {
            /* Full: drop one entry (the map's first). */
            size_t pos = 0;
            uint64_t key;
            void *val;
            if (tn_u64map_next(&a->creds, &pos, &key, &val)) {
                tn_u64map_del(&a->creds, key);
                tn_free(val);
            }
        }
        c = tn_calloc(1, sizeof(*c));
        if (c == NULL || tn_u64map_put(&a->creds, k, c) != 0) {
            tn_free(c);
            return;
        }
    }
    snprintf(c->user, sizeof(c->user), "%s", f->user);
    memcpy(c->mac, f->mac, 32);
    memcpy(c->hash, f->hash, sizeof(c->hash));
}

/* --- running bcrypt ------------------------------------------------------------ */

static void run_next(tn_authn_t *a);

static void finish(tn_authn_flight_t *f, tn_authn_result_t r)
{
    tn_authn_t *a = f->a;
    /* Unlink from all flights. */
    for (tn_authn_flight_t **pp = &a->flights; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    tn_authn_req_t *w = f->waiters;
    f->waiters = NULL;
    OPENSSL_cleanse(f->password, sizeof(f->password));
    tn_free(f);
    while (w != NULL) {
        tn_authn_req_t *next = w->next;
        w->flight = NULL;
        w->next = NULL;
        if (r == TN_AUTHN_DENIED)
            a->st.denied++;
        w->cb(w, r);
        w = next;
    }
}

static void work_verify(uv_work_t *w)
{
    tn_authn_flight_t *f = w->data;
    f->ok = tn_bcrypt_verify(f->password, f->len, f->hash);
}

static void maybe_closed(tn_authn_t *a);

static void work_done(uv_work_t *w, int status)
{
    tn_authn_flight_t *f = w->data;
    tn_authn_t *a = f->a;
    a->running--;
    a->st.bcrypt_runs++;
    bool ok = status == 0 && f->ok;
    if (ok) {
        cache_put(a, f);
        if (f->took_budget) {
            node_refill(a);
            a->node_tokens = TN_MIN(a->node_tokens + 1.0, NODE_BURST);
        }
    } else {
        spend_user_token(a, f->user);
        if (!f->took_budget) {
            /* A failed first attempt spends a budget token when one is left. */
            node_refill(a);
            if (a->node_tokens >= 1.0)
                a->node_tokens -= 1.0;
        }
    }
    finish(f, ok ? TN_AUTHN_OK : TN_AUTHN_DENIED);
    run_next(a);
    maybe_closed(a);
}

static tn_authn_flight_t *dequeue(tn_authn_t *a)
{
    tn_authn_flight_t **head = a->clean_head != NULL ? &a->clean_head : &a->suspect_head;
    tn_authn_flight_t **tail = head == &a->clean_head ? &a->clean_tail : &a->suspect_tail;
    tn_authn_flight_t *f = *head;
    if (f != NULL) {
        *head = f->qnext;
        if (*head == NULL)
            *tail = NULL;
        f->qnext = NULL;
        a->queued--;
    }
    return f;
}

static void run_next(tn_authn_t *a)
{
    while (a->running < a->o.max_running) {
        tn_authn_flight_t *f = dequeue(a);
        if (f == NULL)
            return;
        if (f->waiters == NULL) {
            /* Everyone left before it started. */
            if (f->took_budget)
                a->node_tokens = TN_MIN(a->node_tokens + 1.0, NODE_BURST);
            finish(f, TN_AUTHN_DENIED);
            continue;
        }
        f->started = true;
        f->work.data = f;
        if (uv_queue_work(a->loop, &f->work, work_verify, work_done) != 0) {
            finish(f, TN_AUTHN_DENIED);
            continue;
        }
        a->running++;
    }
}

/* --- checks ------------------------------------------------------------------ */

static void answer(tn_authn_t *a, tn_authn_req_t *req, tn_authn_result_t r)
{
    if (r == TN_AUTHN_DENIED)
        a->st.denied++;
    else if (r == TN_AUTHN_THROTTLED)
        a->st.throttled++;
    req->cb(req, r);
}

void tn_authn_check(tn_authn_t *a, tn_authn_req_t *req, const char *user, const char *password,
                    size_t len, tn_authn_cb cb)
{
    req->a = a;
    req->cb = cb;
    req->flight = NULL;
    req->next = NULL;
    if (a->closing || !tn_username_valid(user, strlen(user)) || len > TN_PASSWORD_MAX) {
        answer(a, req, TN_AUTHN_DENIED);
        return;
    }
    const char *hash = a->lookup(a->lookup_arg, user);
    if (hash == NULL || strlen(hash) > TN_BCRYPT_HASH_MAX) {
        answer(a, req, TN_AUTHN_DENIED); /* unknown user: no bcrypt */
        return;
    }
    unsigned char mac[32];
    if (!mac_of(a, user, password, len, mac)) {
        TN_LOG_RL(TN_LOG_ERROR, 10000, "authentication: HMAC of a credential failed (OpenSSL)");
        answer(a, req, TN_AUTHN_DENIED);
        return;
    }
    cred_t *c = tn_u64map_get(&a->creds, fnv(user));
    if (c != NULL && strcmp(c->hash, hash) == 0 && strcmp(c->user, user) == 0 &&
        CRYPTO_memcmp(c->mac, mac, 32) == 0) {
        a->st.cache_hits++;
        req->cb(req, TN_AUTHN_OK);
        return;
    }
    /* The same check under way: wait for its answer. */
    for (tn_authn_flight_t *f = a->flights; f != NULL; f = f->next) {
        if (strcmp(f->hash, hash) == 0 && strcmp(f->user, user) == 0 &&
            CRYPTO_memcmp(f->mac, mac, 32) == 0) {
            req->flight = f;
            req->next = f->waiters;
            f->waiters = req;
            return;
        }
    }
    bucket_t *b = bucket_of(a, user);
    bool suspect = b != NULL;
    if (b != NULL && b->tokens < 1.0) {
        answer(a, req, TN_AUTHN_THROTTLED);
        return;
    }
    bool took = false;
    if (suspect) {
        node_refill(a);
        if (a->node_tokens < 1.0) {
            int64_t now = now_ms(a);
            if (now - a->last_budget_log >= BUDGET_LOG_EVERY) {
                a->last_budget_log = now;
                TN_LOG(TN_LOG_WARN, "authentication failure budget exhausted");
            }
            answer(a, req, TN_AUTHN_THROTTLED);
            return;
        }
        a->node_tokens -= 1.0;
        took = true;
    }
    tn_authn_flight_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL) {
        if (took)
            a->node_tokens += 1.0;
        answer(a, req, TN_AUTHN_THROTTLED);
        return;
    }
    f->a = a;
    snprintf(f->user, sizeof(f->user), "%s", user);
    memcpy(f->mac, mac, 32);
    snprintf(f->hash, sizeof(f->hash), "%s", hash);
    memcpy(f->password, password, len);
    f->len = len;
    f->suspect = suspect;
    f->took_budget = took;
    f->waiters = req;
    req->flight = f;
    f->next = a->flights;
    a->flights = f;
    tn_authn_flight_t **head = suspect ? &a->suspect_head : &a->clean_head;
    tn_authn_flight_t **tail = suspect ? &a->suspect_tail : &a->clean_tail;
    if (*tail != NULL)
        (*tail)->qnext = f;
    else
        *head = f;
    *tail = f;
    a->queued++;
    run_next(a);
}

void tn_authn_cancel(tn_authn_req_t *req)
{
    tn_authn_flight_t *f = req->flight;
    if (f == NULL)
        return;
    for (tn_authn_req_t **pp = &f->waiters; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == req) {
            *pp = req->next;
            break;
        }
    }
    req->flight = NULL;
    req->next = NULL;
}

void tn_authn_stats(const tn_authn_t *a, tn_authn_stats_t *out)
{
    *out = a->st;
    out->running = a->running;
    out->queued = a->queued;
}

static void free_map(tn_u64map_t *m)
{
    size_t pos = 0;
    uint64_t key;
    void *val;
    while (tn_u64map_next(m, &pos, &key, &val))
        tn_free(val);
    tn_u64map_fini(m);
}

static void maybe_closed(tn_authn_t *a)
{
    if (!a->closing || a->running > 0)
        return;
    free_map(&a->creds);
    free_map(&a->buckets);
    void (*cb)(void *) = a->close_cb;
    void *arg = a->close_arg;
    EVP_MAC_CTX_free(a->mac);
    EVP_MAC_free(a->hmac);
    OPENSSL_cleanse(a->key, sizeof(a->key));
    tn_free(a);
    if (cb != NULL)
        cb(arg);
}

void tn_authn_close(tn_authn_t *a, void (*cb)(void *arg), void *arg)
{
    a->closing = true;
    a->close_cb = cb;
    a->close_arg = arg;
    /* Queued runs never start; their requesters are cancelled. */
    tn_authn_flight_t *f;
    while ((f = dequeue(a)) != NULL) {
        for (tn_authn_req_t *w = f->waiters; w != NULL; w = w->next)
            w->flight = NULL;
        f->waiters = NULL;
        finish(f, TN_AUTHN_DENIED);
    }
    for (f = a->flights; f != NULL; f = f->next) {
        for (tn_authn_req_t *w = f->waiters; w != NULL; w = w->next)
            w->flight = NULL;
        f->waiters = NULL;
    }
    maybe_closed(a);
}

#ifdef TN_TEST
void tn__authn_advance(tn_authn_t *a, int64_t ms)
{
    a->skew_ms += ms;
}

void tn__authn_pin(tn_authn_t *a)
{
    a->pinned_ms = tn_now_mono_ms();
}
#endif
