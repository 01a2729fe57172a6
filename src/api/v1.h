/* The native /v1 API: authentication of every /v1 request and its routes,
 * in src/api/v1/: the guard and the table of routes (routes.c), topics
 * (create, list, get, change, delete: topics.c), produce (single and
 * batch: produce.c), consume and settle (consume.c, over the lanes of
 * api/consume.c), users (users.c), child topics (children.c, fanout.c)
 * and the cluster (cluster.c); the helpers they share are common.c's. The
 * full reference is docs/http-api.md.
 *
 * DESIGN: a /v1 request.
 *   1. The HTTP server's guard runs before routing, so an unauthenticated
 *      request to any /v1 path, known or not, is 401 (with
 *      `WWW-Authenticate: Basic realm="tern"`). The live feed under
 *      /v1/ws/ authenticates on its own (see ws.h).
 *   2. Basic credentials are checked by the verifier (auth/authn.h)
 *      against the users in the metastore: 401 for unknown users and wrong
 *      passwords, 429 when throttled.
 *   3. The route's handler authorizes: user management and the cluster
 *      routes are for admins (the root user or an `admin` grant); a
 *      topic's record, stats and children need any grant matching its
 *      name, its ownership, or admin, and lists hold only such topics;
 *      produce needs a `produce` grant, consume and settling `consume`;
 *      changing, deleting and linking topics needs ownership or admin.
 * Errors are {"error": "<message>"}. POST, PUT and PATCH also need an API
 * content type (application/json or application/octet-stream) or an
 * X-Tern-Client / X-Narad-Client header, checked after authentication
 * (415): a cross-site form cannot send either.
 *
 * DESIGN: creating a topic. Validate the body, authorize (a `create`
 * grant on the name, or admin), propose the record to the metastore
 * (if absent: a race loses with 409), then create the topic in the queue
 * engine and its `default` channel, and answer 201 with the record
 * (with a parent, attach it first and answer with the attached child).
 *
 * With security off (`security-enabled=false`, a development mode) no
 * credentials are asked for and every check passes.
 *
 * Threads: the loop thread. */
#ifndef TN_API_V1_H
#define TN_API_V1_H

#include "core/platform.h"

#include "api/quota.h"
#include "auth/authn.h"
#include "auth/nsqauth.h"
#include "core/u64map.h"
#include "cluster/router.h"
#include "cluster/rpc.h"
#include "meta/meta.h"
#include "proto/http/server.h"
#include "queue/queue.h"

#define TN_V1_BATCH_MAX      1000               /* messages in a batch produce */
#define TN_V1_BATCH_MAX_BODY (16 * 1024 * 1024) /* its body, decoded */

typedef struct {
    bool security;
    uint32_t max_partitions;      /* 108 */
    int64_t default_retention_ms; /* 7 days */
    uint64_t max_msg_size;        /* the message size limit, inclusive */
    int64_t max_consume_wait_ms;  /* 10 s */
    uint32_t max_consumes_per_user;
    uint32_t max_produces_per_user; /* 0: no cap */
    /* default-replication-factor (3) and min-insync-replicas (2): a create
     * that does not say. 0 reads as 1. The metastore clamps the factor to
     * the members alive (docs/replication.md). */
    uint8_t default_replication_factor;
    uint8_t min_insync_replicas;
    /* Remotes (api/v1/remotes.h, docs/remotes.md): the cluster secret
     * (borrowed until the first tn_v1_register, which copies it and clears
     * the two pointers; length 0: none),
     * whether it was generated for this process (a lone node: remotes are
     * refused), the address guard (borrowed likewise, copied; NULL: the
     * defaults) and remotes-api-hop-encrypted. */
    const uint8_t *cluster_secret;
    size_t cluster_secret_len;
    bool cluster_secret_generated;
    const struct tn_guard_s *remotes_guard;
    bool remotes_hop_encrypted;
} tn_v1_opts_t;

/* A probe that found nothing (api/v1/forward.c, "the empty memo"). */
#define TN__V1_MEMO_SLOTS 256
typedef struct {
    uint64_t key;  /* topic, channel and owner, hashed */
    int64_t at_ms; /* monotonic; 0: none */
} tn__v1_memo_t;

typedef struct tn_v1_s {
    tn_meta_t *meta;
    tn_broker_t *broker;
    tn_router_t *router; /* where produces go (cluster/router.h) */
    tn_authn_t *authn;
    struct tn_consume_s *consume; /* api/consume.h */
    struct tn_fanout_s *fanout;   /* api/fanout.h */
    struct tn_rchild_s *rchild;   /* api/rchild.h: remote children's cursors */
    tn_v1_opts_t o;
    uint32_t next_part;  /* batch produces without keys take turns */
    tn_quota_t produces; /* per user in progress */
    uv_loop_t *loop;
    void *users;   /* v1/users.c's hashing queue */
    void *remotes; /* v1/remotes.c's secret copy and opened credentials */
    void *rchecks; /* v1/rcheck.c's checks under way and last results */
    /* Leases of forwarded consumes answered in the last 2 s
     * (api/v1/forward.c): oldest first, and by caller and request. */
    struct tn__v1_grace_s *grace_head, *grace_tail;
    uint32_t ngrace;
    tn_u64map_t grace_ix;
    /* The node's drain (api/drain.h), set by the caller before
     * tn_v1_register: /v1/drain, and produce and consume refused while it
     * runs. NULL: no drain routes. */
    struct tn_drain_s *drain;
    /* Consumes routed to other nodes, not finished (api/v1/forward.c). */
    struct tn__v1_fwd_s *fwds;
    uint32_t nfwds;
    /* Probes that found nothing, by topic, channel and owner
     * (api/v1/forward.c, "the empty memo"). */
    tn__v1_memo_t empty_memo[TN__V1_MEMO_SLOTS];
    bool closing;
    struct tn_scrub_s *scrub; /* storage/scrub.h, borrowed; NULL: /v1/storage/scrub answers 503 */
    /* The replica manager (cluster/replica.h), borrowed, set by the caller
     * before tn_v1_register; NULL: none (a forced unclean election's
     * records_at_risk is null). */
    struct tn_replica_s *replica;
    uint64_t node_id; /* this node's member id, set with replica */
    /* The catalog (api/catalog.h), borrowed, set by the caller before
     * tn_v1_register and cleared before it stops; NULL: none. A create
     * whose record is taken back holds the name's creations there
     * (tn_catalog_hold_creations). */
    struct tn_catalog_s *catalog;
    /* /v1 creations that answered while their record still carried this
     * node's creation mark, finishing by themselves (api/v1/topics.c,
     * finish_later; owned here), and the timer that retries them (owned;
     * NULL until the first). */
    struct tn__v1_op_s *finishing;
    uv_timer_t *finish_timer;
} tn_v1_t;

/* 0 or an error; tn_v1_close releases it. */
int tn_v1_init(tn_v1_t *v, uv_loop_t *loop, tn_meta_t *meta, tn_broker_t *b, tn_router_t *router,
               const tn_v1_opts_t *o);
/* Register the guard and routes on srv; v is borrowed for its lifetime. */
int tn_v1_register(tn_http_server_t *srv, tn_v1_t *v);
void tn_v1_close(tn_v1_t *v);

/* The checker that makes tern's users serve NSQ AUTH (secret
 * user:password; produce grants publish, consume grants subscribe to any
 * channel, admin both on every topic). v must be initialised before the
 * first AUTH arrives. */
tn_nsqauth_local_t tn_v1_nsq_auth(tn_v1_t *v);

/* This node's part of a remote check (cluster/rcheck.h's local hook; arg
 * is the tn_v1_t, api/v1/rcheck.c): a fresh HTTPS client to the remote,
 * its credential as this node opens it, one request. 0: done runs exactly
 * once, now or later; TN_ENOTFOUND (no such remote with that id here),
 * TN_ECLOSED, UV_ENOMEM: never. */
int tn_v1_remote_check(void *arg, const char *remote, uint64_t remote_id, const char *topic,
                       tn_rcheck_done_cb done, void *done_arg);

/* Give the queue engine's topic (when it exists) the settings of its
 * record: the /v1 caps and TTL, and for a topic created through /v1 its
 * own retention, dead-lettering and durability. */
void tn_v1_apply_topic(tn_broker_t *b, const tn_meta_topic_t *rec);

/* The TN_OP_CONSUME handler for the RPC table (a consume another node
 * forwarded, run on v's lanes; exempt from the RPC bounds: a long poll).
 * v may be initialised after the table is made, before the loop runs. */
void tn_v1_consume_handler(tn_v1_t *v, tn_rpc_handler_t *out);
/* For tn_rpc_on_late_cancel (arg v): a caller gave up on a forwarded
 * consume as its answer went; the leases that answer carried are nacked
 * at once (within 2 s of the answer). */
void tn_v1_consume_late_cancel(void *arg, const char *peer, uint64_t id);

/* A drain (api/drain.h): the consumes waiting on this node, on its lanes
 * or on other nodes for a client here, are answered now (204, or 200 with
 * what a batch holds) and later ones reaching the lanes get 204
 * (tn_consume_drain). For good. */
void tn_v1_drain(tn_v1_t *v);
/* Consumes under way: on the lanes (a forwarded one included), or routed
 * to other nodes and not finished. */
uint32_t tn_v1_long_polls(const tn_v1_t *v);

/* Whether pattern (exact, or a prefix ending in '*') matches name. */
bool tn_v1_pattern_match(const char *pattern, const char *name);

#endif
