/* Prometheus /metrics: the text exposition of the engine, storage and
 * doors: publish and channel-log latency histograms, fsync latency, queue
 * depths, in-flight counts, connections, refused requests by reason, disk
 * state, timeouts, dead letters and TTL discards, and replication (the
 * replica manager's tn_replica_stats: under-replicated and offline
 * partitions, ISR changes, lag, elections, fenced requests; every series
 * is there, at 0, on a node without replicated partitions, so alert rules
 * and dashboards see a value rather than an absent series). Per-topic and
 * per-channel series stop at max_topics topics (the rest are counted in
 * tern_metrics_topics_omitted), so the label cardinality is bounded.
 *
 * Served on the API port, or on a listener of its own (`--metrics-address`)
 * meant to stay internal.
 *
 * Threads: the loop thread. */
#ifndef TN_API_METRICS_H
#define TN_API_METRICS_H

#include "core/platform.h"

#include "api/nsq/http.h"
#include "api/ws.h"
#include "cluster/dataplane.h"
#include "cluster/dispatch.h"
#include "cluster/replica.h"
#include "cluster/router.h"
#include "cluster/rpc.h"
#include "proto/nsq/server.h"
#include "storage/scrub.h"

struct tn_rchild_s;

typedef struct {
    tn_nsq_http_t *api; /* borrowed: broker, readiness, version */
    tn_nsq_server_t *nsq;
    tn_http_server_t *http;     /* the API server, for its connection counts */
    tn_http_server_t *https;    /* and its HTTPS twin (NULL when off), counted with it */
    tn_ws_t *ws;                /* NULL: the live feed is off */
    tn_rpc_t *rpc;              /* node RPC: the calls this node made; NULL before it opened */
    tn_dataplane_t *dataplane;  /* commits other nodes made here; NULL: none */
    tn_dispatch_t *dispatch;    /* the ingress log and its dispatcher; NULL: none (a lone node) */
    tn_router_t *router;        /* its SETTLE calls to other nodes; NULL: none (a lone node) */
    tn_scrub_t *scrub;          /* the scrub of sealed segments; NULL: not running */
    tn_replica_t *replica;      /* the replica manager; NULL: none (replication series read 0) */
    struct tn_rchild_s *rchild; /* remote children's cursors (api/rchild.h); NULL: none */
    uint32_t max_topics;
} tn_metrics_t;

/* Append the exposition to out. 0 or UV_ENOMEM. */
int tn_metrics_write(const tn_metrics_t *m, tn_buf_t *out);

/* Serve GET /metrics from srv; m is borrowed for the server's lifetime. */
int tn_metrics_register(tn_http_server_t *srv, tn_metrics_t *m);

#endif
