/* Names shared by the files of the /v1 API (v1.c, v1_users.c) and no one
 * else. */
#ifndef TN_API_V1_COMMON_H
#define TN_API_V1_COMMON_H

#include "core/platform.h"

#include "api/v1.h"
#include "auth/passwd.h"

#define TN__V1_JSON "application/json; charset=utf-8"

/* A read-modify-write of a record (if_unchanged) that loses this many
 * races to other changes answers 409 instead of trying again. */
#define TN__V1_CHANGE_TRIES 5

/* Answer {"error": msg}; headers (may be NULL) are extra lines. */
void tn__v1_error(tn_http_request_t *r, int status, const char *msg, const char *headers);
/* Answer b (a JSON document, a newline is added) and release it. */
void tn__v1_respond_buf(tn_http_request_t *r, int status, tn_buf_t *b);
void tn__v1_appendf(tn_buf_t *b, const char *fmt, ...) TN_PRINTF(2, 3);
/* s as a JSON string, quotes included. */
void tn__v1_json_str(tn_buf_t *b, const char *s);

/* The partition hash of a message key (FNV-1a; modulo the partition
 * count): produce, batch produce and fan-out copies agree on it. */
uint32_t tn__v1_key_hash(const char *k, size_t n);

/* The authenticated user of r (NULL with security off). */
const tn_meta_user_t *tn__v1_caller(tn_v1_t *v, const tn_http_request_t *r);
/* The root user or an `admin` grant (always, with security off). */
bool tn__v1_is_admin(tn_v1_t *v, const tn_http_request_t *r);
/* Whether u holds a grant of action (0: any) whose pattern matches name. */
bool tn__v1_has_grant(const tn_meta_user_t *u, uint8_t action, const char *name);
/* Admin, or false after answering 403. */
bool tn__v1_admin_only(tn_v1_t *v, tn_http_request_t *r);
/* For a destructive action: the metastore is caught up (tn_meta_caught_up),
 * or false after answering 503 with Retry-After. */
bool tn__v1_caught_up(tn_v1_t *v, tn_http_request_t *r);
/* The topic's owner or an admin (or security off). */
bool tn__v1_can_manage(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t);
/* Refuse one of nsqd's endpoints in its style: status and
 * {"message":code} (401 asks for Basic credentials). */
void tn__v1_nsq_refuse(tn_http_request_t *r, int status, const char *code);
/* Admin, or a grant of action matching topic. */
bool tn__v1_can_do(tn_v1_t *v, const tn_http_request_t *r, uint8_t action, const char *topic);
/* The topic named by the path's {topic}, copied into topic; NULL after
 * answering 404 when the metastore has no such topic. */
const tn_meta_topic_entry_t *tn__v1_path_topic(tn_v1_t *v, tn_http_request_t *r,
                                               char topic[TN_NAME_MAX + 1]);
/* A query parameter that must be a non-negative integer when present:
 * 1 (value set), 0 (absent) or -1 (malformed). Readers of /v1 query
 * parameters may take the first value: a name given twice never reaches
 * a route (the /v1 guard answers 400). */
int tn__v1_query_int(const tn_http_request_t *r, const char *name, int64_t *out);
/* The cross-site guard of state-changing requests: false after 415. */
bool tn__v1_guard_write(tn_http_request_t *r);

/* Any grant on t's name, its ownership, or admin. */
bool tn__v1_can_read(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t);
/* A topic as JSON (stats: with partition_stats, of only_partition when
 * >= 0). */
void tn__v1_topic_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_topic_entry_t *e, bool stats,
                       int64_t only_partition);

/* v1_children.c: the child topic routes. 0 or UV_ENOMEM. */
int tn__v1_children_register(tn_http_server_t *srv, tn_v1_t *v);
/* How many children parent has. */
size_t tn__v1_children_of(const tn_meta_state_t *s, const char *parent);
/* Why parent -> child may not be linked with delay_ms: an HTTP status
 * with *msg, or 0. */
int tn__v1_link_refusal(tn_v1_t *v, const tn_meta_topic_t *parent, const tn_meta_topic_t *child,
                        int64_t delay_ms, const char **msg);

/* Attach child (just created) to parent and answer r (may be NULL: the
 * client left) 201 with the child's record, or the error. */
void tn__v1_attach_created(tn_v1_t *v, tn_http_request_t *r, const char *parent, const char *child,
                           int64_t delay_ms);

/* v1_cluster.c: the /v1/cluster routes. 0 or UV_ENOMEM. */
int tn__v1_cluster_register(tn_http_server_t *srv, tn_v1_t *v);

enum { TN__V1_UF_USERNAME, TN__V1_UF_PASSWORD, TN__V1_UF_GRANTS, TN__V1_UF_COUNT };

/* v1_users.c. A user body: {"username", "password", "grants": [{"action", "patterns":
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

/* v1_users.c: the /v1/users routes. 0 or UV_ENOMEM. */
int tn__v1_users_register(tn_http_server_t *srv, tn_v1_t *v);
/* Stop hashing (answers waiting requests 503). */
void tn__v1_users_close(tn_v1_t *v);

#endif
