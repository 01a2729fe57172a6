/* The /v1 consume and settle routes: consume (a long poll handed to the
 * consume lanes, api/consume.c), ack and ack/batch. See v1.h.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/consume.h"

#include "api/v1/common.h"
#include "api/v1/forward.h"

#include "core/alloc.h"
#include "core/err.h"
#include "api/batch.h"
#include "api/consume.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPHEMERAL_SUFFIX "#ephemeral"

/* The `channel` query parameter ("default" when absent) into out; false
 * after answering 400. */
static bool query_channel(tn_http_request_t *r, char out[TN_NAME_MAX + 1])
{
    int rc = tn_http_query(r->head.query, "channel", out, TN_NAME_MAX + 1);
    if (rc == 0) {
        snprintf(out, TN_NAME_MAX + 1, "default");
        return true;
    }
    size_t n = rc == 1 ? strlen(out) : 0;
    size_t k = sizeof(EPHEMERAL_SUFFIX) - 1;
    if (n >= k && strcmp(out + n - k, EPHEMERAL_SUFFIX) == 0) {
        tn__v1_error(
            r, 400,
            "invalid argument: ephemeral channels live only while a connected consumer holds "
            "them (NSQ TCP or the live feed)",
            NULL);
        return false;
    }
    if (rc != 1 || !tn_name_valid(out, n)) {
        tn__v1_error(r, 400, "invalid argument: channel must match [A-Za-z0-9._-]{1,255}", NULL);
        return false;
    }
    return true;
}

/* `wait`: a Go-style duration (negative means 0), clamped to the most
 * allowed. false after answering 400. */
static bool query_wait(tn_v1_t *v, tn_http_request_t *r, int64_t *out)
{
    char buf[64];
    int rc = tn_http_query(r->head.query, "wait", buf, sizeof(buf));
    *out = 0;
    if (rc == 0 || (rc == 1 && buf[0] == '\0'))
        return true;
    int64_t ns = 0;
    const char *d = buf[0] == '-' ? buf + 1 : buf;
    if (rc != 1 || tn_parse_duration_ns(d, &ns) != 0) {
        tn__v1_error(r, 400, "invalid argument: wait must be a duration such as 500ms or 5s", NULL);
        return false;
    }
    if (buf[0] != '-')
        *out = TN_MIN(ns / 1000000, v->o.max_consume_wait_ms);
    return true;
}

static void on_consume(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_granted_topic(v, r, TN_GRANT_CONSUME, false, topic);
    if (e == NULL)
        return;
    tn_consume_args_t a;
    memset(&a, 0, sizeof(a));
    snprintf(a.topic, sizeof(a.topic), "%s", topic);
    if (!query_channel(r, a.channel) || !query_wait(v, r, &a.wait_ms))
        return;
    int64_t part = 0;
    int64_t offset = 0;
    int64_t max = 0;
    int qp = tn__v1_query_int(r, "partition", &part);
    int qo = tn__v1_query_int(r, "offset", &offset);
    int qm = tn__v1_query_int(r, "max", &max);
    if (qp < 0 || (qp == 1 && part >= (int64_t)e->rec.partitions)) {
        tn__v1_error(r, 400, "invalid argument: partition out of range", NULL);
        return;
    }
    if (qo < 0) {
        tn__v1_error(r, 400, "invalid argument: offset must be a non-negative integer", NULL);
        return;
    }
    if (qo == 1 && qp != 1) {
        tn__v1_error(r, 400, "partition required for replay-mode consume", NULL);
        return;
    }
    if (qm != 0) {
        if (qm < 0 || max < 1 || max > TN_CONSUME_BATCH_MAX) {
            tn__v1_error(r, 400, "invalid argument: max must be 1..100", NULL);
            return;
        }
        if (tn_http_header(&r->head, "x-tern-client") == NULL &&
            tn_http_header(&r->head, "x-narad-client") == NULL) {
            tn__v1_error(r, 400, "a batch consume (max) needs an X-Tern-Client header", NULL);
            return;
        }
        if (qo == 1) {
            tn__v1_error(r, 400,
                         "invalid argument: max does not combine with offset (replay reads one)",
                         NULL);
            return;
        }
    }
    a.partitions = e->rec.partitions;
    a.visibility_ms = e->rec.visibility_timeout_ms;
    a.pinned = qp == 1;
    a.partition = (uint32_t)part;
    a.replay = qo == 1;
    a.offset = (uint64_t)offset;
    a.max = (uint32_t)max;
    a.ident = v->o.security ? r->principal : "";
    tn__v1_consume_route(v, r, &a);
}

/* `extend`: absent, empty or false acks; true or 1 extends; 0 nacks.
 * false after answering 400. */
static bool query_extend(tn_http_request_t *r, tn_settle_t *how)
{
    char ext[16];
    int rc = tn_http_query(r->head.query, "extend", ext, sizeof(ext));
    if (rc == 0 || (rc == 1 && (ext[0] == '\0' || strcmp(ext, "false") == 0))) {
        *how = TN_SETTLE_ACK;
    } else if (rc == 1 && (strcmp(ext, "true") == 0 || strcmp(ext, "1") == 0)) {
        *how = TN_SETTLE_EXTEND;
    } else if (rc == 1 && strcmp(ext, "0") == 0) {
        *how = TN_SETTLE_NACK;
    } else {
        tn__v1_error(r, 400, "invalid argument: extend must be true, false, 1 or 0", NULL);
        return false;
    }
    return true;
}

static void on_ack(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_granted_topic(v, r, TN_GRANT_CONSUME, true, topic);
    if (e == NULL)
        return;
    char handle[96];
    int rc = tn_http_query(r->head.query, "receipt_handle", handle, sizeof(handle));
    if (rc == 0 || (rc == 1 && handle[0] == '\0')) {
        tn__v1_error(r, 400, "receipt_handle required", NULL);
        return;
    }
    uint32_t p, nonce;
    uint64_t off;
    if (rc != 1 || tn_receipt_parse(handle, strlen(handle), &p, &off, &nonce) != 0) {
        tn__v1_error(r, 400, "receipt handle is malformed", NULL);
        return;
    }
    tn_settle_t how;
    char channel[TN_NAME_MAX + 1];
    if (!query_extend(r, &how) || !query_channel(r, channel))
        return;
    rc = tn_consume_settle(v->consume, topic, channel, p, off, nonce, how,
                           e->rec.visibility_timeout_ms);
    if (rc == 0)
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
    else if (rc == UV_ENOBUFS)
        tn__v1_error(r, 503, "acked-ahead set is full; head of queue may be stuck",
                     "Retry-After: 1\r\n");
    else
        tn__v1_error(r, 410, "receipt handle no longer matches an active reservation", NULL);
}

static void on_ack_batch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_granted_topic(v, r, TN_GRANT_CONSUME, true, topic);
    if (e == NULL)
        return;
    tn_settle_t how;
    char channel[TN_NAME_MAX + 1];
    if (!query_extend(r, &how) || !query_channel(r, channel))
        return;
    char(*handles)[TN_HANDLE_MAX] = tn_calloc(TN_CONSUME_BATCH_MAX, TN_HANDLE_MAX);
    if (handles == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    uint32_t n = 0;
    char err[160];
    int rc = tn_batch_handles(tn_buf_data(&r->body), tn_buf_size(&r->body), TN_CONSUME_BATCH_MAX,
                              handles, &n, err, sizeof(err));
    if (rc != 0) {
        tn_free(handles);
        if (rc == UV_ENOMEM)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 400, err, NULL);
        return;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"results\":[", 12);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p, nonce;
        uint64_t off;
        int status;
        const char *msg = NULL;
        if (tn_receipt_parse(handles[i], strlen(handles[i]), &p, &off, &nonce) != 0) {
            status = 400;
            msg = "receipt handle is malformed";
        } else {
            rc = tn_consume_settle(v->consume, topic, channel, p, off, nonce, how,
                                   e->rec.visibility_timeout_ms);
            status = rc == 0 ? 204 : rc == UV_ENOBUFS ? 503 : 410;
            msg = rc == 0            ? NULL
                  : rc == UV_ENOBUFS ? "acked-ahead set is full; head of queue may be stuck"
                                     : "receipt handle no longer matches an active reservation";
        }
        tn_buf_append(&b,
                      i > 0 ? ",{\"receipt_handle\":" : "{\"receipt_handle\":", i > 0 ? 19 : 18);
        tn__v1_json_str(&b, handles[i]);
        tn__v1_appendf(&b, ",\"status\":%d", status);
        if (msg != NULL) {
            tn_buf_append(&b, ",\"error\":", 9);
            tn__v1_json_str(&b, msg);
        }
        tn_buf_append(&b, "}", 1);
    }
    tn_buf_append(&b, "]}", 2);
    tn_free(handles);
    tn__v1_respond_buf(r, 200, &b);
}

int tn__v1_consume_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "GET", "/v1/topics/{topic}/consume", 0, NULL, on_consume, v);
    rc = rc ? rc : tn_http_route(srv, "POST", "/v1/topics/{topic}/ack", 0, NULL, on_ack, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/ack/batch", TN_JSON_MAX_BODY,
                            "request body too large", on_ack_batch, v);
    return rc;
}
