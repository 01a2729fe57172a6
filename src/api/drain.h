/* The node's drain: how a node leaves service for a restart without
 * refusing anything it already took. One state for the whole process;
 * every door asks tn_drain_active before it takes new work.
 *
 * DESIGN: a drain (docs/operations.md, "Draining and rolling restarts").
 *   1. POST /v1/drain (admin) or the first SIGTERM calls tn_drain_start:
 *      the state becomes "draining" with a deadline (drain-timeout, 30 s,
 *      or the POST's timeout_ms). The starter hook runs (ternd: the place
 *      where systemd hears STOPPING=1).
 *   2. At once: /readyz answers 503 {"status":"draining"} (a load
 *      balancer stops sending); the NSQ TCP server holds every consumer
 *      at RDY 0 and refuses PUB/MPUB/DPUB with a retryable, non-fatal
 *      E_PUB_FAILED (tn_nsq_server_drain); the /v1 door answers its
 *      waiting long polls, those waiting on other nodes for a client
 *      here included (204, or 200 with what a batch already holds), and
 *      its lanes park no new ones (tn_v1_drain); every WebSocket feed is
 *      closed with E_DRAINING; every HTTP answer from then on closes its
 *      connection (a client's retry opens a new one, which a load
 *      balancer sends to a ready node). From then on nsqd's /pub and
 *      /mpub, /v1 produce and /v1 consume answer 503 with Retry-After,
 *      and new feeds 503 E_DRAINING: the doors check tn_drain_active.
 *   3. What keeps working: FIN, REQ and TOUCH of what NSQ consumers hold,
 *      /v1 ack, extend and nack (from any node), /healthz (200 until the
 *      exit), reads (/stats, /v1 topics, /metrics), and node RPC: other
 *      nodes' commits into this node's partitions, their settles, stats
 *      and purges. A consume another node forwards here gets 204 (no new
 *      leases leave a draining node).
 *   4. Every 100 ms the drain counts what is still in flight: messages
 *      NSQ consumers hold, parked /v1 long polls, open feeds, publishes
 *      the router has not answered. When all are 0 the state becomes
 *      "drained" and the done hook runs (ternd shuts down and exits 0);
 *      when the deadline passes first, the done hook runs with timed_out
 *      (the node exits 0 all the same; what was held is redelivered).
 * A drain is never cancelled: the node exits at its end.
 *
 * Threads: the loop thread. */
#ifndef TN_API_DRAIN_H
#define TN_API_DRAIN_H

#include "core/platform.h"

#include "core/buf.h"

#include <uv.h>

typedef struct tn_drain_s tn_drain_t;

typedef enum { TN_DRAIN_SERVING = 0, TN_DRAIN_DRAINING, TN_DRAIN_DRAINED } tn_drain_state_t;

/* What a drain waits for, counted now. */
typedef struct {
    uint64_t nsq_in_flight; /* messages NSQ consumers hold */
    uint32_t nsq_consumers; /* subscribed NSQ connections (not waited for) */
    uint32_t long_polls;    /* /v1 consumes under way (tn_v1_long_polls) */
    uint32_t ws_feeds;      /* open WebSocket feeds */
    uint64_t publishes;     /* publishes under way in the router */
} tn_drain_counts_t;

/* Where the counts come from and what a drain stops; every pointer is
 * borrowed until tn_drain_close and may be NULL (that door is not
 * running). Set with tn_drain_attach once the doors are up. */
typedef struct {
    struct tn_nsq_server_s *nsq;
    struct tn_ws_s *ws;
    struct tn_v1_s *v1; /* its lanes and the consumes it routed to other nodes */
    struct tn_router_s *router;
    struct tn_http_server_s *http;  /* its answers stop keeping connections open */
    struct tn_http_server_s *https; /* the same for the HTTPS listener */
} tn_drain_doors_t;

typedef struct {
    int64_t timeout_ms; /* drain-timeout: the default bound */
    /* A drain began (once per process): ternd's spot for STOPPING=1. */
    void (*started)(void *arg);
    /* The drain ended: quiet (timed_out false) or its deadline passed.
     * Runs once; the callee shuts the process down. */
    void (*done)(void *arg, bool timed_out);
    void *arg;
} tn_drain_opts_t;

/* 0 or UV_ENOMEM. opts copied. */
int tn_drain_new(uv_loop_t *loop, const tn_drain_opts_t *opts, tn_drain_t **out);
/* The doors to stop and count (copied). */
void tn_drain_attach(tn_drain_t *d, const tn_drain_doors_t *doors);

/* Begin draining with a bound of timeout_ms (<= 0: the configured
 * drain-timeout). 0 when it began now; UV_EALREADY when a drain was
 * already under way or over (nothing changes; its deadline stays). */
int tn_drain_start(tn_drain_t *d, int64_t timeout_ms);

/* Whether the doors refuse new work: draining or drained. NULL: false. */
bool tn_drain_active(const tn_drain_t *d);
tn_drain_state_t tn_drain_state(const tn_drain_t *d);
void tn_drain_counts(const tn_drain_t *d, tn_drain_counts_t *out);

/* GET /v1/drain's body, appended to out: {"state", "started_ms",
 * "deadline_ms" (wall clock ms, 0 while serving), "nsq_in_flight",
 * "nsq_consumers", "long_polls", "ws_feeds", "publishes_in_progress"}. */
void tn_drain_json(const tn_drain_t *d, tn_buf_t *out);

/* The process is shutting down (by another way, or at the drain's end):
 * the watch stops for good (no done hook) and the doors are forgotten;
 * the state stays, for doors still answering. NULL: nothing. */
void tn_drain_stop(tn_drain_t *d);
/* Once no door can ask any more: stop, and free it once its timer has
 * closed. NULL: nothing. */
void tn_drain_close(tn_drain_t *d);

#endif
