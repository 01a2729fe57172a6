/* The router: what every door calls to publish, instead of the engine.
 *
 * DESIGN: produce anywhere.
 *   1. A door prepares a tn_pub_t as for the engine and calls
 *      tn_router_publish. The engine takes it when the partition lives
 *      here: pinned (by key or an explicit partition) to a local
 *      partition, or unpinned while the topic has local partitions (round
 *      robin over those). One fsync, at the owner: the common case never
 *      crosses the network.
 *   2. Otherwise the engine says TN_EREMOTE and the router accepts the
 *      publish into this node's ingress log (storage/ilog.h): for the
 *      pinned partition, or, unpinned, the next partition (round robin)
 *      whose owner is alive (any partition when none is). The publish
 *      completes with 0 once the ingress log's group commit made it
 *      durable; p->partition is the partition it was accepted for and
 *      p->remote is set (no offset is known yet).
 *   3. The dispatcher (cluster/dispatch.h), kicked after each accepted
 *      record, moves it to its owner later.
 * A lone node never takes step 2 (every partition is local). Without an
 * ingress log TN_EREMOTE reaches the door, as it did before routing.
 *
 * Threads: the loop thread. */
#ifndef TN_CLUSTER_ROUTER_H
#define TN_CLUSTER_ROUTER_H

#include "core/platform.h"

#include "meta/meta.h"
#include "queue/queue.h"
#include "storage/ilog.h"

typedef struct tn_router_s tn_router_t;

typedef struct {
    tn_broker_t *broker;
    tn_meta_t *meta;
    tn_ilog_t *ilog; /* NULL: no ingress log (a lone node) */
    /* Told after each record the ingress log took (the dispatcher's
     * kick); may be NULL. */
    void (*accepted)(void *arg);
    void *accepted_arg;
} tn_router_opts_t;

int tn_router_new(const tn_router_opts_t *o, tn_router_t **out);
/* After the ingress log closed (its appends in flight have answered). */
void tn_router_free(tn_router_t *r);
/* Set the accepted hook (tn_router_opts_t) once its target exists. */
void tn_router_on_accepted(tn_router_t *r, void (*cb)(void *arg), void *arg);

/* Publish p as tn_broker_publish does (same arguments, same statuses),
 * except that a publish for partitions another node owns is accepted into
 * the ingress log (step 2 above). */
int tn_router_publish(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p,
                      int64_t deliver_at_ms, tn_pub_cb cb);

typedef struct {
    uint64_t accepted;         /* publishes taken into the ingress log */
    uint64_t accepted_records; /* their messages */
    uint64_t failed;           /* ingress log appends that failed */
} tn_router_stats_t;
void tn_router_stats(const tn_router_t *r, tn_router_stats_t *out);

#endif
