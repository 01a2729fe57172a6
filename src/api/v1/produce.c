/* The /v1 produce routes: one message, and a batch (decoded by
 * api/batch.c), each answered once the engine has it durable; a
 * partition whose log lives on another node is answered 503. See v1.h.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/produce.h"

#include "api/v1/common.h"
#include "cluster/replerr.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "api/batch.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEY 1024

/* The answer to a produce that failed with status. The engine's
 * TN_EREMOTE reaches a door only when the router has no ingress log for
 * it (cluster/router.h), which every node of a cluster has. */
static void answer_failed(tn_http_request_t *r, int status)
{
    const char *why = tn_replerr_text(status);
    if (why != NULL)
        /* A replicated partition refusing for now (cluster/replerr.h). */
        tn__v1_error(r, 503, why, "Retry-After: 1\r\n");
    else if (status == TN_EREMOTE)
        tn__v1_error(r, 503, "this node cannot take produces for that partition now",
                     "Retry-After: 1\r\n");
    else if (status == TN_EDISKHIGH)
        tn__v1_error(r, 429, "disk above the high watermark", "Retry-After: 1\r\n");
    else if (status == TN_ENOTFOUND)
        /* Held while the topic was being created, which was taken back
         * (cluster/hold.h). */
        tn__v1_error(r, 404, "topic not found", NULL);
    else if (status == TN_ECORRUPT)
        /* Sticky until restart: retrying here cannot help, so no Retry-After. */
        tn__v1_error(r, 500,
                     "partition isolated: its log failed a checksum or structure check "
                     "(the node's log names the file and byte)",
                     NULL);
    else {
        char msg[160];
        snprintf(msg, sizeof msg, "produce failed: %s", tn_strerror(status));
        tn__v1_error(r, 500, msg, NULL);
    }
}

typedef struct {
    tn_pub_t pub;
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    uint32_t charge; /* counted against its user */
    char ident[72];
} produce_t;

/* Count a produce of n messages against r's user; false after 429. */
static bool produce_take(tn_v1_t *v, tn_http_request_t *r, uint32_t n, uint32_t *charge)
{
    if (tn_quota_take(&v->produces, v->o.security ? r->principal : "", n, charge))
        return true;
    tn__v1_error(r, 429, "too many concurrent produces for this user", "Retry-After: 1\r\n");
    return false;
}

static void produce_cancel(tn_http_request_t *r)
{
    produce_t *pr = r->data;
    pr->r = NULL;
}

static void on_produced(tn_pub_t *p, int status)
{
    produce_t *pr = p->data;
    tn_http_request_t *r = pr->r;
    tn_quota_give(&pr->v->produces, pr->ident, pr->charge);
    tn_pub_fini(&pr->pub);
    tn_free(pr);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    if (status == 0)
        tn_http_respond(r, 202, NULL, NULL, NULL, 0);
    else
        answer_failed(r, status);
}

static void on_produce(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_granted_topic(v, r, TN_GRANT_PRODUCE, true, topic);
    if (e == NULL || tn__v1_draining(v, r))
        return;
    if (tn_buf_size(&r->body) == 0) {
        tn__v1_error(r, 400, "message required", NULL);
        return;
    }
    char key[MAX_KEY + 1];
    int krc = tn_http_query(r->head.query, "key", key, sizeof(key));
    if (krc < 0) {
        tn__v1_error(r, 400, "invalid argument: key is malformed or longer than 1024 bytes", NULL);
        return;
    }
    int64_t part = -1;
    int q = tn__v1_query_int(r, "partition", &part);
    if (q < 0 || (q == 1 && part >= (int64_t)e->rec.partitions)) {
        tn__v1_error(r, 400, "invalid argument: partition out of range", NULL);
        return;
    }
    uint32_t charge = 0;
    if (!produce_take(v, r, 1, &charge))
        return;
    produce_t *pr = tn_calloc(1, sizeof(*pr));
    if (pr == NULL || tn_pub_init(&pr->pub, 1) != 0 ||
        tn_pub_set(&pr->pub, 0, tn_buf_data(&r->body), tn_buf_size(&r->body)) != 0 ||
        (krc == 1 && key[0] != '\0' && tn_pub_set_key(&pr->pub, 0, key, strlen(key)) != 0)) {
        if (pr != NULL)
            tn_pub_fini(&pr->pub);
        tn_free(pr);
        tn_quota_give(&v->produces, r->principal, charge);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    pr->v = v;
    pr->charge = charge;
    snprintf(pr->ident, sizeof(pr->ident), "%s", r->principal);
    if (q == 1) {
        pr->pub.pinned = true;
        pr->pub.pin = (uint32_t)part;
    } else if (krc == 1 && key[0] != '\0') {
        pr->pub.pinned = true;
        pr->pub.pin = tn__v1_key_hash(key, strlen(key)) % e->rec.partitions;
    }
    pr->pub.data = pr;
    pr->r = r;
    r->data = pr;
    r->on_cancel = produce_cancel;
    int rc = tn_router_publish(v->router, topic, strlen(topic), &pr->pub, 0, on_produced);
    if (rc != 0) {
        r->on_cancel = NULL;
        tn_quota_give(&v->produces, pr->ident, pr->charge);
        tn_pub_fini(&pr->pub);
        tn_free(pr);
        answer_failed(r, rc);
    }
}

/* --- batch produce ------------------------------------------------------------ */

/* One batch produce: a publish per partition it touches. */
typedef struct {
    tn_http_request_t *r; /* NULL once the client left */
    tn_v1_t *v;
    uint32_t charge; /* counted against its user */
    char ident[72];
    uint32_t pending; /* publishes not ended */
    uint32_t count;   /* messages */
    int status;       /* the first failure, or 0 */
    uint32_t npubs;
    tn_pub_t pubs[];
} batch_op_t;

static void batch_cancel(tn_http_request_t *r)
{
    batch_op_t *op = r->data;
    op->r = NULL;
}

static void batch_end(batch_op_t *op)
{
    tn_http_request_t *r = op->r;
    int status = op->status;
    uint32_t count = op->count;
    tn_quota_give(&op->v->produces, op->ident, op->charge);
    for (uint32_t i = 0; i < op->npubs; i++)
        tn_pub_fini(&op->pubs[i]);
    tn_free(op);
    if (r == NULL)
        return;
    r->on_cancel = NULL;
    if (status == 0) {
        char body[64];
        int n = snprintf(body, sizeof(body), "{\"accepted\":%" PRIu32 "}\n", count);
        tn_http_respond(r, 202, TN__V1_JSON, NULL, body, (size_t)n);
    } else {
        answer_failed(r, status);
    }
}

static void on_batch_published(tn_pub_t *p, int status)
{
    batch_op_t *op = p->data;
    if (status != 0 && op->status == 0)
        op->status = status;
    if (--op->pending == 0)
        batch_end(op);
}

static void on_produce_batch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_granted_topic(v, r, TN_GRANT_PRODUCE, true, topic);
    if (e == NULL || tn__v1_draining(v, r))
        return;
    tn_batch_t b;
    char err[192];
    int rc = tn_batch_decode(tn_buf_data(&r->body), tn_buf_size(&r->body), TN_V1_BATCH_MAX,
                             v->o.max_msg_size, MAX_KEY, &b, err, sizeof(err));
    if (rc != 0) {
        if (rc == UV_ENOMEM)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        else
            tn__v1_error(r, 400, err, NULL);
        return;
    }
    uint32_t nparts = e->rec.partitions;
    /* One partition for the messages without a key: a local one, when the
     * engine has the topic (the others live on other nodes). */
    tn_topic_t *bt = NULL;
    bool live = tn_broker_topic(v->broker, topic, strlen(topic), false, 0, NULL, &bt) == 0 &&
                bt->nparts >= nparts;
    uint32_t keyless = v->next_part++ % nparts;
    for (uint32_t k = 0; live && k < nparts && !tn_topic_part_local(bt, keyless); k++)
        keyless = v->next_part++ % nparts;
    uint32_t *part = tn_calloc(b.n, sizeof(*part));
    uint32_t *per = tn_calloc(nparts, sizeof(*per));
    batch_op_t *op = NULL;
    tn_iov_t *bodies = tn_calloc(b.n, sizeof(*bodies));
    uint32_t used = 0;
    rc = part == NULL || per == NULL || bodies == NULL ? UV_ENOMEM : 0;
    for (uint32_t i = 0; rc == 0 && i < b.n; i++) {
        const tn_batch_msg_t *m = &b.msgs[i];
        if (m->partition >= (int64_t)nparts) {
            snprintf(err, sizeof(err), "message %" PRIu32 ": partition out of range", i);
            rc = UV_EINVAL;
            break;
        }
        part[i] = m->partition >= 0 ? (uint32_t)m->partition
                  : m->key_len > 0  ? tn__v1_key_hash(b.data.base + m->key_off, m->key_len) % nparts
                                    : keyless;
        used += per[part[i]]++ == 0;
    }
    /* A partition of another node takes its messages through this node's
     * ingress log (the router): each partition's publish is all or nothing
     * where it is accepted. */
    if (rc == 0 && tn_store_disk_high(v->broker->store))
        rc = TN_EDISKHIGH;
    if (rc == 0) {
        op = tn_calloc(1, sizeof(*op) + used * sizeof(tn_pub_t));
        rc = op == NULL ? UV_ENOMEM : 0;
    }
    /* One publish per partition, its messages in batch order. */
    for (uint32_t p = 0; rc == 0 && p < nparts; p++) {
        if (per[p] == 0)
            continue;
        tn_pub_t *pub = &op->pubs[op->npubs];
        uint32_t k = 0;
        for (uint32_t i = 0; i < b.n; i++) {
            if (part[i] == p)
                bodies[k++] = tn_iov(b.data.base + b.msgs[i].payload_off, b.msgs[i].payload_len);
        }
        rc = tn_pub_init(pub, per[p]);
        if (rc == 0)
            op->npubs++;
        rc = rc ? rc : tn_pub_set_all(pub, bodies);
        k = 0;
        for (uint32_t i = 0; rc == 0 && i < b.n; i++) {
            if (part[i] != p)
                continue;
            if (b.msgs[i].key_len > 0)
                rc = tn_pub_set_key(pub, k, b.data.base + b.msgs[i].key_off, b.msgs[i].key_len);
            k++;
        }
        pub->pinned = true;
        pub->pin = p;
        pub->data = op;
    }
    tn_free(part);
    tn_free(per);
    tn_free(bodies);
    uint32_t count = b.n;
    tn_batch_fini(&b);
    if (rc != 0) {
        if (op != NULL) {
            for (uint32_t i = 0; i < op->npubs; i++)
                tn_pub_fini(&op->pubs[i]);
            tn_free(op);
        }
        if (rc == UV_EINVAL)
            tn__v1_error(r, 400, err, NULL);
        else if (rc == UV_ENOMEM)
            tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        else
            answer_failed(r, rc);
        return;
    }
    op->r = r;
    op->v = v;
    op->count = count;
    if (!produce_take(v, r, count, &op->charge)) {
        for (uint32_t i = 0; i < op->npubs; i++)
            tn_pub_fini(&op->pubs[i]);
        tn_free(op);
        return;
    }
    snprintf(op->ident, sizeof(op->ident), "%s", r->principal);
    op->pending = op->npubs + 1; /* held until every publish started */
    r->data = op;
    r->on_cancel = batch_cancel;
    for (uint32_t i = 0; i < op->npubs; i++) {
        int prc =
            tn_router_publish(v->router, topic, strlen(topic), &op->pubs[i], 0, on_batch_published);
        if (prc != 0)
            on_batch_published(&op->pubs[i], prc);
    }
    on_batch_published(&op->pubs[0], 0);
}

int tn__v1_produce_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "POST", "/v1/topics/{topic}/produce", v->o.max_msg_size,
                           TN__V1_TOO_BIG, on_produce, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics/{topic}/produce/batch", TN_V1_BATCH_MAX_BODY,
                            TN__V1_TOO_BIG, on_produce_batch, v);
    return rc;
}
