/* Remote checks in /v1 (rcheck.c; docs/remotes.md, "Checks"): the route
 * POST /v1/remotes/{name}/check, the check at a remote child's attach,
 * this node's part of every check (the REMOTE_CHECK hook) and the last
 * check kept per node.
 *
 * Threads: the loop thread. */
#ifndef TN_API_V1_RCHECK_H
#define TN_API_V1_RCHECK_H

#include "core/platform.h"

#include "api/v1.h"
#include "cluster/router.h"
#include "core/buf.h"

/* The route on srv (the state is made at the first call). 0 or
 * UV_ENOMEM. */
int tn__v1_rcheck_register(tn_http_server_t *srv, tn_v1_t *v);
/* End every part under way (their callers get "the check was stopped")
 * and free the state. */
void tn__v1_rcheck_close(tn_v1_t *v);

/* The end of a check asked here: rows (sorted by node) borrowed for the
 * call. */
typedef void (*tn__v1_rcheck_cb)(void *arg, const tn_router_rcheck_row_t *rows, uint32_t n);
/* Check remote name (id) with topic ("": none) on every live member and
 * keep the table as this node's last check of it. 0: cb runs exactly
 * once, possibly before this returns; UV_ENOMEM: never. */
int tn__v1_rcheck_ask(tn_v1_t *v, const char *name, uint64_t id, const char *topic,
                      tn__v1_rcheck_cb cb, void *arg);
/* Append a check's table as JSON: {"at_ms","topic","status","asked_here",
 * "members":{node:{"status","ms",...}}}. */
void tn__v1_rcheck_table_json(tn_buf_t *b, const char *topic, const tn_router_rcheck_row_t *rows,
                              uint32_t n);
/* The failing rows in a sentence ("node 2: auth (HTTP 401); node 3:
 * unreachable (the member gave no result)") into out; false when every
 * row is ok. */
bool tn__v1_rcheck_failures(char *out, size_t len, const tn_router_rcheck_row_t *rows, uint32_t n);
/* Append the last check of remote (name, id) this node keeps, or null. */
void tn__v1_rcheck_last_json(tn_v1_t *v, tn_buf_t *b, const char *name, uint64_t id);

#endif
