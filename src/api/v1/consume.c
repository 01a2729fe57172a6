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
 * after answering 400 (a link's channel too: core/name.h). */
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
    if (tn_name_link_channel(out, n)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "invalid argument: channel %s %s", out, TN__V1_LINK_CHANNEL);
        tn__v1_error(r, 400, msg, NULL);
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
    if (e == NULL || tn__v1_draining(v, r))
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

/* --- settling: ack, extend, nack (through the router: any node) -------------------- */

/* One ack or ack batch being settled: from tn_router_settle to its
 * callback. r is NULL once the client left. */
typedef struct {
    tn_http_request_t *r;
    bool batch;
    uint32_t n;
    tn_router_settle_item_t items[TN_CONSUME_BATCH_MAX];
    char (*handles)[TN_HANDLE_MAX];       /* a batch's handles as sent; owned */
    int16_t parsed[TN_CONSUME_BATCH_MAX]; /* a batch's: its item, or -1 when malformed */
} settle_op_t;

static void settle_cancel(tn_http_request_t *r)
{
    settle_op_t *op = r->data;
    op->r = NULL;
}

static void settle_free(settle_op_t *op)
{
    tn_free(op->handles);
    tn_free(op);
}

static void answer_ack(tn_http_request_t *r, const tn_router_settle_item_t *it)
{
    if (it->status == 204)
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
    else
        tn__v1_error(r, it->status, it->error, it->status == 503 ? "Retry-After: 1\r\n" : NULL);
}

static void answer_batch(tn_http_request_t *r, const settle_op_t *op, uint32_t count)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"results\":[", 12);
    for (uint32_t i = 0; i < count; i++) {
        int status = 400;
        const char *msg = "receipt handle is malformed";
        if (op->parsed[i] >= 0) {
            const tn_router_settle_item_t *it = &op->items[op->parsed[i]];
            status = it->status;
            msg = it->error;
        }
        tn_buf_append(&b,
                      i > 0 ? ",{\"receipt_handle\":" : "{\"receipt_handle\":", i > 0 ? 19 : 18);
        tn__v1_json_str(&b, op->handles[i]);
        tn__v1_appendf(&b, ",\"status\":%d", status);
        if (msg != NULL) {
            tn_buf_append(&b, ",\"error\":", 9);
            tn__v1_json_str(&b, msg);
        }
        tn_buf_append(&b, "}", 1);
    }
    tn_buf_append(&b, "]}", 2);
    tn__v1_respond_buf(r, 200, &b);
}

static void on_settled(void *arg, tn_router_settle_item_t *items, uint32_t n)
{
    (void)items;
    (void)n;
    settle_op_t *op = arg;
    tn_http_request_t *r = op->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        if (op->batch)
            answer_batch(r, op, op->n);
        else
            answer_ack(r, &op->items[0]);
    }
    settle_free(op);
}

static uint8_t settle_how(tn_settle_t how)
{
    return how == TN_SETTLE_ACK      ? TN_WIRE_SETTLE_ACK
           : how == TN_SETTLE_EXTEND ? TN_WIRE_SETTLE_EXTEND
                                     : TN_WIRE_SETTLE_NACK;
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
    settle_op_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    op->r = r;
    op->n = 1;
    op->items[0] = (tn_router_settle_item_t){p, off, nonce, 0, NULL};
    r->data = op;
    r->on_cancel = settle_cancel;
    tn_router_settle(v->router, topic, channel, settle_how(how), e->rec.visibility_timeout_ms,
                     op->items, 1, on_settled, op);
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
    settle_op_t *op = tn_calloc(1, sizeof(*op));
    char(*handles)[TN_HANDLE_MAX] = tn_calloc(TN_CONSUME_BATCH_MAX, TN_HANDLE_MAX);
    if (op == NULL || handles == NULL) {
        tn_free(op);
        tn_free(handles);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    op->handles = handles;
    op->batch = true;
    uint32_t count = 0;
    char err[160];
    int rc = tn_batch_handles(tn_buf_data(&r->body), tn_buf_size(&r->body), TN_CONSUME_BATCH_MAX,
                              handles, &count, err, sizeof(err));
    if (rc != 0) {
        settle_free(op);
        if (rc == UV_ENOMEM)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 400, err, NULL);
        return;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < count; i++) {
        tn_router_settle_item_t *it = &op->items[k];
        if (tn_receipt_parse(handles[i], strlen(handles[i]), &it->partition, &it->offset,
                             &it->nonce) != 0) {
            op->parsed[i] = -1;
            continue;
        }
        op->parsed[i] = (int16_t)k++;
    }
    op->n = count;
    if (k == 0) {
        answer_batch(r, op, count);
        settle_free(op);
        return;
    }
    op->r = r;
    r->data = op;
    r->on_cancel = settle_cancel;
    tn_router_settle(v->router, topic, channel, settle_how(how), e->rec.visibility_timeout_ms,
                     op->items, k, on_settled, op);
}

int tn__v1_consume_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc =
        tn_http_route(srv, "GET", "/v1/topics/{topic}/consume", 0, TN__V1_NO_BODY, on_consume, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/ack", 0, TN__V1_NO_BODY, on_ack, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/ack/batch", TN_JSON_MAX_BODY,
                            TN__V1_TOO_BIG, on_ack_batch, v);
    return rc;
}
