/* NSQ AUTH against nsqauthd-compatible HTTP servers.
 *
 * A client's AUTH secret is checked by
 *
 *   GET http://<server>/auth?remote_ip=<ip>&tls=<bool>&common_name=<cn>&auth_secret=<secret>
 *
 * answered with JSON {"ttl": seconds, "identity": ..., "identity_url": ...,
 * "authorizations": [{"topic": regex, "channels": [regex...],
 * "permissions": ["publish" | "subscribe"...]}]}. Servers are tried in
 * order: 401 or 403 is a definitive denial, anything else (refused
 * connection, timeout, 5xx, a body that does not parse) tries the next.
 * Results are cached for their TTL, keyed by (remote ip, tls, common name,
 * secret), so reconnecting clients do not cost a request each.
 *
 * Regexes are unanchored searches like NSQ's (POSIX extended syntax, which
 * covers what nsqauthd configurations use: `.*`, `^prefix`, `a|b`).
 *
 * Threads: the loop thread. */
#ifndef TN_AUTH_NSQAUTH_H
#define TN_AUTH_NSQAUTH_H

#include "core/platform.h"

#include <regex.h>
#include <uv.h>

#define TN_NSQAUTH_MAX_RESPONSE (256 * 1024)
#define TN_NSQAUTH_MAX_RULES    256

typedef struct tn_nsqauth_s tn_nsqauth_t;
typedef struct tn_authz_s tn_authz_t;
typedef struct tn_auth_req_s tn_auth_req_t;

/* What a secret grants: shared by the cache and the connections using it
 * (reference-counted). */
typedef struct {
    regex_t topic;
    regex_t *channels;
    uint32_t nchannels;
    bool publish;
    bool subscribe;
} tn_authz_rule_t;

struct tn_authz_s {
    uint32_t refs;
    char *identity;
    char *identity_url;
    int64_t expires_ms; /* monotonic */
    tn_authz_rule_t *rules;
    uint32_t nrules;
    /* Grants read from a state that says when it changed (a local
     * checker's: the metastore's access generation, meta.h
     * tn_meta_access_gen): gen_src is that counter (borrowed; it outlives
     * every authz holding it) and gen its value when they were read; they
     * are stale once it moved. NULL for an auth server's, which hold for
     * their ttl as nsqd's do. */
    const uint64_t *gen_src;
    uint64_t gen;
};

/* Whether a's grants still hold at now_ms (monotonic): not expired, and
 * (for a local checker's) the state they were read from unchanged. A
 * comparison or two, for a check before every delivery. */
static inline bool tn_authz_current(const tn_authz_t *a, int64_t now_ms)
{
    return a->expires_ms > now_ms && (a->gen_src == NULL || *a->gen_src == a->gen);
}

void tn_authz_ref(tn_authz_t *a);
void tn_authz_unref(tn_authz_t *a);
/* Grants from an auth server's answer (body NUL-terminated, borrowed): a
 * new reference, or NULL when the body is not a valid answer (not JSON,
 * no positive integer ttl, a bad regex, over the limits). */
tn_authz_t *tn_nsqauth_parse(const char *body);

/* Whether a may publish to topic / subscribe to topic's channel. */
bool tn_authz_can_publish(const tn_authz_t *a, const char *topic);
bool tn_authz_can_subscribe(const tn_authz_t *a, const char *topic, const char *channel);

typedef enum {
    TN_AUTH_OK = 0,
    TN_AUTH_DENIED,      /* 401/403 */
    TN_AUTH_NONE,        /* answered, but granted nothing */
    TN_AUTH_UNAVAILABLE, /* no server answered usably */
} tn_auth_result_t;

/* cb runs on the loop thread; authz (on TN_AUTH_OK) is a new reference for
 * the caller. */
typedef void (*tn_auth_cb)(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz);

/* Caller-owned; in use until cb runs, or until tn_nsqauth_cancel. */
struct tn_auth_req_s {
    void *data;
    /* private */
    tn_nsqauth_t *auth;
    tn_auth_cb cb;
    char *key;
    char *query;
    uint32_t server;
    void *http; /* the request in flight */
    tn_auth_req_t *next;
    bool local;       /* a local check is in flight */
    void *local_data; /* for the local checker */
};

/* servers: comma-separated host:port list (borrowed). 0, UV_EINVAL (empty
 * list) or UV_ENOMEM. */
int tn_nsqauth_new(uv_loop_t *loop, const char *servers, int64_t timeout_ms, tn_nsqauth_t **out);
/* A checker in place of the HTTP servers (tern's own users serving NSQ
 * AUTH). check starts checking secret for req and answers through
 * tn_nsqauth_answer, at once or later; it returns 0, or an error (the
 * check then fails as unavailable, and no answer may follow). cancel
 * abandons req's check: no answer may follow it. Answers are not cached
 * here (the checker has its own cache). */
typedef struct {
    int (*check)(void *arg, tn_auth_req_t *req, const char *secret, size_t len);
    void (*cancel)(void *arg, tn_auth_req_t *req);
    void *arg;
} tn_nsqauth_local_t;

/* local is copied. 0 or UV_ENOMEM. */
int tn_nsqauth_new_local(uv_loop_t *loop, const tn_nsqauth_local_t *local, tn_nsqauth_t **out);
/* A local checker's answer; authz (on TN_AUTH_OK) is handed over. A
 * local checker answers TN_AUTH_UNAVAILABLE for a secret it cannot judge
 * yet (tern's users while the node is not ready), or when out of memory. */
void tn_nsqauth_answer(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz);
/* Whether a checks secrets with a local checker (tn_nsqauth_new_local). */
bool tn_nsqauth_is_local(const tn_nsqauth_t *a);

/* A grant of tern's kind as an NSQ rule: pattern is a topic name, or a
 * prefix ending in '*' ("*" alone: every topic); any channel. */
typedef struct {
    const char *pattern;
    bool publish;
    bool subscribe;
} tn_authz_grant_t;
/* Grants (valid for ttl_ms) from tern's: a new reference, or NULL (out of
 * memory, or a pattern that is not a name). */
tn_authz_t *tn_authz_from_grants(const char *identity, const tn_authz_grant_t *g, uint32_t n,
                                 int64_t ttl_ms);

/* Cancel what is in flight and free once it has wound down. */
void tn_nsqauth_close(tn_nsqauth_t *a);

/* Check a secret. Answers from the cache at once (cb runs before this
 * returns) or asks the servers. 0 or UV_ENOMEM. */
int tn_nsqauth_check(tn_nsqauth_t *a, tn_auth_req_t *req, const char *remote_ip, bool tls,
                     const char *common_name, const char *secret, size_t secret_len, tn_auth_cb cb);
/* The caller goes away: cb will not run. */
void tn_nsqauth_cancel(tn_auth_req_t *req);

#endif
