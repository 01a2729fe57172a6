/* The /v1/drain routes: POST starts the node's drain (admins only; body
 * optional, {"timeout_ms": N} bounds it instead of drain-timeout), GET
 * shows its progress to any authenticated user. The drain itself is
 * api/drain.h's.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/drain.h"

#include "api/v1/common.h"

#include "core/err.h"
#include "core/log.h"
#include "api/drain.h"
#include "proto/http/json.h"

#include <stddef.h>
#include <stdio.h>

#define MAX_TIMEOUT_MS (24LL * 3600 * 1000) /* drain-timeout's own upper bound */

typedef struct {
    int64_t timeout_ms;
} drain_body_t;

static const tn_jfield_t drain_fields[] = {
    {"timeout_ms", TN_JF_INT, offsetof(drain_body_t, timeout_ms), 0},
};

static void answer(tn_v1_t *v, tn_http_request_t *r, int status)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_drain_json(v->drain, &b);
    tn__v1_respond_buf(r, status, &b);
}

static void on_drain_get(tn_http_request_t *r, void *arg)
{
    answer(arg, r, 200);
}

static void on_drain_post(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r) || !tn__v1_admin_only(v, r))
        return;
    drain_body_t body = {0};
    size_t len = tn_buf_size(&r->body);
    if (len > 0) {
        bool given[1];
        char err[160];
        int rc = tn_json_object(tn_buf_data(&r->body), len, drain_fields, 1, &body, given, err,
                                sizeof(err));
        if (rc == UV_ENOMEM) {
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
            return;
        }
        if (rc != 0) {
            tn__v1_error(r, 400, err, NULL);
            return;
        }
        if (given[0] && (body.timeout_ms <= 0 || body.timeout_ms > MAX_TIMEOUT_MS)) {
            char msg[128];
            snprintf(msg, sizeof(msg),
                     "invalid argument: timeout_ms must be from 1 to %lld (24 hours)",
                     (long long)MAX_TIMEOUT_MS);
            tn__v1_error(r, 400, msg, NULL);
            return;
        }
    }
    int rc = tn_drain_start(v->drain, body.timeout_ms);
    if (rc == 0)
        TN_LOG(TN_LOG_NOTICE, "audit: %s started a drain (POST /v1/drain)",
               r->principal[0] != '\0' ? r->principal : "(open)");
    answer(v, r, rc == 0 ? 202 : 200);
}

int tn__v1_drain_register(tn_http_server_t *srv, tn_v1_t *v)
{
    if (v->drain == NULL)
        return 0;
    int rc = tn_http_route(srv, "GET", "/v1/drain", 0, TN__V1_NO_BODY, on_drain_get, v);
    rc = rc ? rc : tn_http_route(srv, "POST", "/v1/drain", 4096, TN__V1_TOO_BIG, on_drain_post, v);
    return rc;
}
