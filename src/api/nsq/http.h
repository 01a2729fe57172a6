/* NSQ's HTTP API on tern's HTTP server: /ping, /info, /pub, /mpub,
 * /config/{opt}, and the health endpoints /healthz and /readyz. Publishing answers `OK` at
 * the same durability boundary as the TCP PUB (after the fdatasync in
 * durable mode). Errors are nsqd's: a status and {"message": "<CODE>"};
 * a request whose Accept names `application/vnd.nsq; version=1.0` gets
 * the `X-NSQ-Content-Type: nsq; version=1.0` header, as from nsqd.
 *
 * Threads: the loop thread. */
#ifndef TN_API_NSQ_HTTP_H
#define TN_API_NSQ_HTTP_H

#include "core/platform.h"

#include "core/config.h"
#include "cluster/router.h"
#include "meta/meta.h"
#include "proto/http/server.h"
#include "proto/nsq/server.h"
#include "queue/queue.h"

typedef struct {
    tn_broker_t *broker;
    tn_router_t *router;           /* where /pub and /mpub go (cluster/router.h) */
    const char *version;           /* borrowed */
    const char *broadcast_address; /* borrowed; "" means the host name */
    int tcp_port;
    int http_port;
    uint64_t node_id; /* this node's member id, for the lookupd endpoints */
    uint64_t max_msg_size;
    uint64_t max_body_size;
    int64_t max_defer_ms;
    int64_t max_heartbeat_interval_ms;
    int64_t max_output_buffer_size;
    int64_t max_output_buffer_timeout_ms;
    int max_deflate_level;
    int64_t start_time;   /* unix seconds */
    bool ready;           /* storage opened and recovered, listeners up, not draining */
    bool shutting_down;   /* a shutdown began (SIGTERM, SIGINT): /healthz answers 503 */
    tn_meta_t *meta;      /* /readyz also waits for its replica to catch up (NULL: not used) */
    tn_nsq_server_t *nsq; /* the NSQ TCP server, for /stats' producers (NULL: none) */
    /* The /v1 API, whose users and grants decide on protected topics
     * (api/access.h); NULL: nothing is protected. */
    struct tn_v1_s *v1;
    bool protect_all; /* NSQ AUTH by tern's users: every topic needs credentials here */
    /* Private: the request a wait for the replica's judgement runs again
     * (http.c judge_later). */
    tn_http_request_t *judged;
    /* The node's drain (api/drain.h; NULL: none): while it runs /readyz
     * answers 503 {"status":"draining"} and /pub, /mpub 503 E_DRAINING. */
    struct tn_drain_s *drain;
    /* nsqd's /config/nsqlookupd_tcp_addresses: the list as GET answers it
     * (JSON, owned; set with tn_nsq_http_set_lookupds), and the hook a PUT
     * calls with the new one (n strings, borrowed for the call; 0 or a
     * negative error) to re-point the lookupd registration (NULL: PUT
     * answers 500). Not persisted, as in nsqd. */
    char *lookupds_json;
    int (*set_lookupds)(void *arg, const char *const *addrs, size_t n);
    void *set_lookupds_arg;
} tn_nsq_http_t;

/* Fill the settings from cfg (ports and broker are the caller's). */
void tn_nsq_http_init(tn_nsq_http_t *api, const tn_config_t *cfg, const char *version);

/* Free what the settings own. */
void tn_nsq_http_fini(tn_nsq_http_t *api);

/* Make the comma-separated list addrs (as --lookupd-tcp-address takes it)
 * what GET /config/nsqlookupd_tcp_addresses answers. 0 or UV_ENOMEM. */
int tn_nsq_http_set_lookupds(tn_nsq_http_t *api, const char *addrs);

/* When ternd sends READY=1: ready, not draining, and the metastore caught
 * up; with security on, also the users judged here (tn_users_ready: the
 * root user's seed applied). */
bool tn_nsq_http_started(tn_nsq_http_t *api);

/* What /readyz answers (tern_ready): started, and no storage failure that
 * holds until a restart (a channel log that failed to write or sync, a
 * partition log isolated that no repair from a leader mends). A start
 * that finds a partition isolated still sends READY=1: waiting for it
 * would hold the start forever. */
bool tn_nsq_http_ready(tn_nsq_http_t *api);

/* Register the routes on srv; api is borrowed for the server's lifetime.
 * 0 or UV_ENOMEM. */
int tn_nsq_http_register(tn_http_server_t *srv, tn_nsq_http_t *api);

#endif
