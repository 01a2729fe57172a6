/* Verifying Basic credentials of tern's own users, the way a node under a
 * password-guessing flood stays up.
 *
 * DESIGN: a check.
 *   1. Unknown user name: denied at once, without bcrypt (a deliberate
 *      timing leak that spends bcrypt only on real users).
 *   2. A verified-credential cache: the same user, password and stored
 *      hash as a recent success is allowed at once. A new password, or
 *      the user made again under its name, has another hash (bcrypt salts
 *      each), so it goes back to bcrypt; a change of the user's grants, or
 *      of any other user, does not (what a user may do is read from its
 *      record at each request, not from here).
 *   3. Per-user throttle (a bucket of 5, one token back every 12 s, spent
 *      by failed bcrypt runs): empty means 429 without bcrypt. A user with
 *      recent failures also needs a token of a node-wide failure budget
 *      (32, 4 a second), given back by a correct password; while it is
 *      empty those checks are 429 at once. Users with no recent failures
 *      are never refused by the budget.
 *   4. bcrypt on worker threads, at most max_running at once; checks of
 *      users with no recent failures go first. Identical concurrent checks
 *      (same user and password) share one run; a requester that leaves
 *      (cancel) does not fail the others.
 *
 * Threads: the loop thread. */
#ifndef TN_AUTH_AUTHN_H
#define TN_AUTH_AUTHN_H

#include "core/platform.h"

#include "auth/passwd.h"

#include <uv.h>

typedef struct tn_authn_s tn_authn_t;
typedef struct tn_authn_req_s tn_authn_req_t;
typedef struct tn_authn_flight_s tn_authn_flight_t;

typedef enum {
    TN_AUTHN_OK = 0,
    TN_AUTHN_DENIED,    /* unknown user or wrong password: 401 */
    TN_AUTHN_THROTTLED, /* too many failures: 429 */
} tn_authn_result_t;

typedef void (*tn_authn_cb)(tn_authn_req_t *req, tn_authn_result_t result);

/* The stored hash of user, or NULL when there is no such user. The
 * string is copied before the call returns. */
typedef const char *(*tn_authn_lookup_cb)(void *arg, const char *user);

/* Caller-owned; in use until cb or tn_authn_cancel. */
struct tn_authn_req_s {
    void *data;
    /* Private. */
    tn_authn_t *a;
    tn_authn_cb cb;
    tn_authn_flight_t *flight;
    tn_authn_req_t *next;
};

typedef struct {
    uint32_t max_running;   /* concurrent bcrypt runs (4) */
    uint32_t cache_entries; /* verified credentials kept (4096) */
    int64_t now_ms_offset;  /* tests: added to the clock */
} tn_authn_opts_t;

typedef struct {
    uint64_t bcrypt_runs;
    uint64_t cache_hits;
    uint64_t denied;
    uint64_t throttled;
    uint32_t running;
    uint32_t queued;
} tn_authn_stats_t;

void tn_authn_opts_default(tn_authn_opts_t *o);
int tn_authn_new(uv_loop_t *loop, const tn_authn_opts_t *o, tn_authn_lookup_cb lookup, void *arg,
                 tn_authn_t **out);
/* Check user's password. cb may run before this returns (cache, unknown
 * user, throttle). */
void tn_authn_check(tn_authn_t *a, tn_authn_req_t *req, const char *user, const char *password,
                    size_t len, tn_authn_cb cb);
/* The requester leaves; cb will not run. */
void tn_authn_cancel(tn_authn_req_t *req);
void tn_authn_stats(const tn_authn_t *a, tn_authn_stats_t *out);
/* Free once no bcrypt run is left (runs under way finish first); pending
 * requests are cancelled. cb (may be NULL) runs when it is gone. */
void tn_authn_close(tn_authn_t *a, void (*cb)(void *arg), void *arg);

#ifdef TN_TEST
/* Move the throttle clock forward (tests). */
void tn__authn_advance(tn_authn_t *a, int64_t ms);
/* Stop the throttle clock where it is, so that only tn__authn_advance
 * moves it (tests: refills must not depend on how long bcrypt takes). */
void tn__authn_pin(tn_authn_t *a);
#endif

#endif
