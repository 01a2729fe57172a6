/* The helpers every /v1 route file uses (common.c): errors and JSON
 * output, the access checks, the cross-site guard, a topic as JSON and
 * shared parsing. Below the route files: it includes none of them, and
 * the route files include it (and lower modules) only. The nsqd door
 * (api/nsq/http.c) takes its access checks from here too, the consume
 * lanes (api/consume.c) its error and JSON output, and fan-out
 * (api/fanout.c) the key hash. */
#ifndef TN_API_V1_COMMON_H
#define TN_API_V1_COMMON_H

#include "core/platform.h"

#include "api/v1.h"
#include "auth/passwd.h"
#include "core/name.h"

#define TN__V1_JSON "application/json; charset=utf-8"

/* The 413s of /v1 routes (tn_http_route's too_big): a body over the
 * route's limit, and one sent to a route that takes none. */
#define TN__V1_TOO_BIG "{\"error\":\"request body too large\"}"
#define TN__V1_NO_BODY "{\"error\":\"this request takes no body\"}"

/* Why a link's channel (core/name.h) is refused, after "channel <name> ";
 * the nsqd door's refusal says it too. */
#define TN__V1_LINK_CHANNEL                                                                        \
    TN_NAME_LINK_REFUSED " (fanout. and 16 hex digits name no client's channel)"

/* A read-modify-write of a record (if_unchanged) that loses this many
 * races to other changes answers 409 instead of trying again. */
#define TN__V1_CHANGE_TRIES 5

/* Answer {"error": msg}; headers (may be NULL) are extra lines. */
void tn__v1_error(tn_http_request_t *r, int status, const char *msg, const char *headers);

/* The error of a topic or channel creation refused near the descriptor
 * limit (the engine's UV_EMFILE, core/fdroom.h): a 503 to retry, as the
 * NSQ doors' E_PUB_FAILED says "too many open files". */
#define TN__V1_FD_FULL                                                                             \
    "cannot create it now: too many open files (this node keeps its last descriptors for the "     \
    "partitions it has); retry later, or raise the descriptor limit"
/* The same refusal after the topic was recorded, when taking the record
 * back failed too (the metastore did not answer): the topic stays
 * recorded, its partitions missing here. */
#define TN__V1_FD_KEPT                                                                             \
    "cannot create it now: too many open files, and its record could not be taken back (the "      \
    "metastore did not answer): delete the topic, then create it again once descriptors are free"
/* Answer b (a JSON document, a newline is added) and release it. */
void tn__v1_respond_buf(tn_http_request_t *r, int status, tn_buf_t *b);
/* The answer of an operation that parked r until the metastore answered
 * it: r NULL (the client left) answers nothing; else r's cancel hook goes
 * off and r gets, for a status under 300, body (a JSON document) or no
 * body when body is NULL or empty; for an error, {"error": msg}, with
 * Retry-After: 1 on a 503. body (may be NULL) is released in any case. */
void tn__v1_end(tn_http_request_t *r, int status, const char *msg, tn_buf_t *body);
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
/* While the node drains (api/drain.h): true after answering 503
 * {"error":"the node is draining; ..."} with Retry-After (produce and
 * consume are refused; settling is not). */
bool tn__v1_draining(tn_v1_t *v, tn_http_request_t *r);
/* Admin, or false after answering 403. */
bool tn__v1_admin_only(tn_v1_t *v, tn_http_request_t *r);
/* For a destructive action: the metastore replica is caught up
 * (tn_meta_caught_up), or was confirmed current for r (r->confirmed).
 * Else false, and r is parked: this replica confirms with the leader
 * (tn_meta_confirm_until, within TN_META_PROPOSE_MS) and again(r, v)
 * runs once it did, with r->confirmed set, or r is answered 503 with
 * Retry-After when it could not. A follower a moment behind (a busy
 * metastore, a slow disk) serves the action instead of refusing it.
 * What again runs before this check must change nothing. */
bool tn__v1_caught_up(tn_v1_t *v, tn_http_request_t *r, tn_http_handler_cb again);
/* The answer to a metastore write that failed with status where none of
 * the request's own fits: 507 when the disk has no room for the
 * metastore's log (UV_ENOSPC), 500 for its I/O error (UV_EIO), else 503
 * "control plane temporarily unavailable" (retry). */
int tn__v1_meta_code(int status);
const char *tn__v1_meta_why(int status);
/* tn__v1_error with those, Retry-After on the 503. */
void tn__v1_meta_error(tn_http_request_t *r, int status);
/* The topic's owner or an admin (or security off). */
bool tn__v1_can_manage(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t);
/* With security on: name is a dead-letter topic of a topic the caller
 * neither owns nor administers (api/access.h, tn_access_dlq_refused), and
 * the answer was 403 naming the rule. */
bool tn__v1_dlq_refused(tn_v1_t *v, tn_http_request_t *r, const char *name);
/* Refuse one of nsqd's endpoints in its style: status and
 * {"message":code} (401 asks for Basic credentials; 429 and 503 carry
 * Retry-After). */
void tn__v1_nsq_refuse(tn_http_request_t *r, int status, const char *code);
/* Admin, or a grant of action matching topic. */
bool tn__v1_can_do(tn_v1_t *v, const tn_http_request_t *r, uint8_t action, const char *topic);
/* The topic named by the path's {topic}, copied into topic; NULL after
 * answering 404 when the metastore has no such topic (503 while the
 * replica is not caught up, nor confirmed current for r: it may not have
 * heard of it yet). */
const tn_meta_topic_entry_t *tn__v1_path_topic(tn_v1_t *v, tn_http_request_t *r,
                                               char topic[TN_NAME_MAX + 1]);
/* The path's {p}, a partition of e, into *out; false after answering 404. */
bool tn__v1_path_partition(tn_http_request_t *r, const tn_meta_topic_entry_t *e, uint32_t *out);
/* A query parameter that must be a non-negative integer when present
 * (decimal digits, at most INT64_MAX): 1 (value set), 0 (absent) or -1
 * (malformed). Readers of /v1 query
 * parameters may take the first value: a name given twice never reaches
 * a route (the /v1 guard answers 400). */
int tn__v1_query_int(const tn_http_request_t *r, const char *name, int64_t *out);
/* The cross-site guard of state-changing requests: false after 415. */
bool tn__v1_guard_write(tn_http_request_t *r);

/* Any grant on t's name, its ownership, or admin. */
bool tn__v1_can_read(tn_v1_t *v, const tn_http_request_t *r, const tn_meta_topic_t *t);
/* A topic as JSON; with stats (not NULL, borrowed), partition_stats of
 * those nstats partitions as the router gathered them
 * (tn_router_pstats). */
void tn__v1_topic_json(tn_v1_t *v, tn_buf_t *b, const tn_meta_topic_entry_t *e,
                       const tn_router_pstat_t *stats, uint32_t nstats);
/* The path's topic for an operation needing a grant of action (produce or
 * consume); write: a state-changing request (the cross-site guard). NULL
 * after answering 415, 404 or 403. A produce to a delay child is 409. */
const tn_meta_topic_entry_t *tn__v1_granted_topic(tn_v1_t *v, tn_http_request_t *r, uint8_t action,
                                                  bool write, char topic[TN_NAME_MAX + 1]);

#endif
