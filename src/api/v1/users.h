/* The /v1/users routes (users.c), the user body decoder they share with
 * the fuzz target, and NSQ AUTH by tern's users (tn_v1_nsq_auth, v1.h). */
#ifndef TN_API_V1_USERS_H
#define TN_API_V1_USERS_H

#include "core/platform.h"

#include "api/v1.h"
#include "auth/passwd.h"

enum { TN__V1_UF_USERNAME, TN__V1_UF_PASSWORD, TN__V1_UF_GRANTS, TN__V1_UF_COUNT };

/* A user body: {"username", "password", "grants": [{"action", "patterns":
 * [...]}]}, each field allowed or not per route. */
typedef struct {
    unsigned allow; /* 1 << UF_... */
    bool seen[TN__V1_UF_COUNT];
    char username[TN_USERNAME_MAX + 1];
    char password[TN_PASSWORD_MAX + 1];
    size_t plen;
    tn_meta_grant_t grants[TN_META_MAX_GRANTS];
    uint16_t ngrants;
    /* parsing */
    int depth;  /* 1 object, 2 grants array, 3 a grant, 4 its patterns */
    int field;  /* at depth 1 */
    int gfield; /* at depth 3: 0 action, 1 patterns, -1 none */
    bool gseen[2];
    char err[160];
    bool oom;
} tn__v1_user_body_t;

/* Decode a user body (allow: 1 << TN__V1_UF_... of the fields taken) into
 * x, one element at a time. 0 (tn__v1_user_body_fini releases x),
 * UV_EINVAL with x->err, or UV_ENOMEM. */
int tn__v1_user_body(const char *body, size_t len, unsigned allow, tn__v1_user_body_t *x);
void tn__v1_user_body_fini(tn__v1_user_body_t *x);

/* The /v1/users routes. 0 or UV_ENOMEM. */
int tn__v1_users_register(tn_http_server_t *srv, tn_v1_t *v);
/* Stop hashing (answers waiting requests 503). */
void tn__v1_users_close(tn_v1_t *v);

#endif
