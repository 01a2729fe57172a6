/* Remote children in /v1 (rchildren.c): attach, detach and their entries
 * in GET /v1/topics/{parent}/children. The children routes (children.c)
 * call these when the request names a remote.
 *
 * Threads: the loop thread. */
#ifndef TN_API_V1_RCHILDREN_H
#define TN_API_V1_RCHILDREN_H

#include "core/platform.h"

#include "api/v1.h"

/* POST /v1/topics/{parent}/children {"child","remote","fanout_delay_ms"}:
 * answers r (201 with the remote child, or the error). The strings are
 * borrowed for the call; the caller checked the cross-site guard and that
 * parent exists. route is the caller's handler, run again for r once a
 * lagging metastore replica was confirmed current (tn__v1_caught_up): it
 * changes nothing before this call. */
void tn__v1_rchild_attach(tn_v1_t *v, tn_http_request_t *r, tn_http_handler_cb route,
                          const char *parent, const char *remote, const char *child,
                          int64_t delay_ms);
/* DELETE /v1/topics/{parent}/children/{child}?remote=: answers r (204). */
void tn__v1_rchild_detach(tn_v1_t *v, tn_http_request_t *r, const char *parent, const char *remote,
                          const char *child);
/* Append parent's remote children as JSON objects to b (a ',' before
 * each but when *first; *first false after one). */
void tn__v1_rchildren_json(tn_v1_t *v, tn_buf_t *b, const char *parent, bool *first);

#endif
