/* The live WebSocket feed: GET /v1/ws/topics/{topic} streams the messages
 * of an existing ttl_discard topic, best effort, from the moment the
 * server says `ready`. Off by default (websocket-enabled).
 *
 * DESIGN: a connection.
 *   1. Handshake checks, in this order, each a status with
 *      {"message": CODE, "detail": text}: no query string (400
 *      E_WS_QUERY_FORBIDDEN); an Origin header, when sent, equal to an
 *      entry of websocket-allowed-origins (403 E_WS_ORIGIN); a WebSocket
 *      upgrade, version 13, with a valid key (426 / 400 E_WS_HANDSHAKE);
 *      the tern.live.v1 subprotocol offered (400 E_WS_SUBPROTOCOL); the
 *      topic exists (404 E_BAD_TOPIC) and is ttl_discard (409
 *      E_WS_TTL_REQUIRED); the node is ready (503 E_NOT_READY); room for
 *      one more connection, node-wide and for the topic (429
 *      E_WS_CAPACITY); with AUTH configured, an `Authorization: Bearer`
 *      secret is checked before the upgrade (403 E_AUTH_FAILED or
 *      E_UNAUTHORIZED, 503 E_AUTH_FAILED).
 *   2. 101 Switching Protocols. With AUTH configured and no Bearer
 *      secret, the server sends {"type":"auth_required"} and waits
 *      websocket-auth-timeout for {"type":"auth","secret":"..."}.
 *   3. The connection gets its own ephemeral channel
 *      ws.<node-id>.<subscription id>#ephemeral at the topic's tail, then
 *      the server sends {"type":"ready",...}: the capture boundary.
 *   4. One message at a time: one binary frame (a 24-byte big-endian
 *      header, then the body); once the whole frame is written the message
 *      is finished. A frame not written within websocket-write-timeout (or
 *      the message's remaining TTL) closes the connection. Frames in
 *      flight take bytes of a node-wide budget; a connection that finds it
 *      spent waits for a frame to finish elsewhere.
 *   5. The server pings every websocket-heartbeat-interval; a peer silent
 *      for two intervals is closed (E_WS_HEARTBEAT). A data frame from the
 *      client is E_WS_CONTROL. A client breaking RFC 6455 gets a Close
 *      with its status code (1002, 1007, 1009: frame headers are checked
 *      before libwslay reads them, which would send none for some) and
 *      the connection closes.
 *   6. Terminal errors: a text frame {"type":"error","code":...,
 *      "detail":...}, then a Close frame whose reason is the code, then
 *      the connection closes.
 *
 * Threads: the loop thread. */
#ifndef TN_API_WS_H
#define TN_API_WS_H

#include "core/platform.h"

#include "auth/nsqauth.h"
#include "core/config.h"
#include "proto/http/server.h"
#include "queue/queue.h"

#define TN_WS_SUBPROTOCOL "tern.live.v1"
#define TN_WS_MAGIC       "TNL1"
#define TN_WS_HDR         24
#define TN_WS_MAX_ORIGINS 64

typedef struct tn_ws_s tn_ws_t;

typedef struct {
    tn_broker_t *broker;
    tn_nsqauth_t *auth; /* NULL: no AUTH */
    /* Without AUTH: whether a topic is closed to the open feed (owned
     * through /v1; api/access.h). NULL: every topic is open. */
    bool (*is_protected)(void *arg, const char *topic);
    /* Without AUTH: whether is_protected cannot judge topic yet
     * (api/access.h tn_access_unknown); text then gets the sentence, and
     * a new feed is refused 503 E_NOT_READY with it (Retry-After: 1).
     * NULL: it always can. Called with protected_arg. */
    bool (*protection_unknown)(void *arg, const char *topic, char *text, size_t len);
    void *protected_arg;
    /* A counter that moves whenever is_protected's answer may change
     * (meta.h tn_meta_access_gen; borrowed for the feed's lifetime, read
     * on the loop thread): a feed found open at one value is not asked
     * again before its frames while it holds. NULL: asked before every
     * frame. */
    const uint64_t *protected_gen;
    const bool *ready; /* the node's readiness (borrowed) */
    /* The node's drain (api/drain.h; borrowed, NULL: none): new feeds get
     * 503 E_DRAINING while it runs (it closes the open ones itself). */
    const struct tn_drain_s *drain;
    int64_t node_id;
    uint32_t max_connections;
    uint32_t max_per_topic;
    uint64_t frame_budget;
    int64_t heartbeat_ms;
    int64_t auth_timeout_ms;
    int64_t write_timeout_ms;
    char origins[TN_WS_MAX_ORIGINS][256];
    uint32_t norigins;
} tn_ws_opts_t;

/* Fill o from cfg (broker, auth and ready are the caller's). 0, or
 * TN_ECONFIG with a line in err (an origin that is not scheme://host[:port],
 * a wildcard, a path, too many). */
int tn_ws_opts_from_config(tn_ws_opts_t *o, const tn_config_t *cfg, char *err, size_t errlen);

typedef struct {
    uint32_t connections;
    uint64_t messages; /* frames written whole */
    uint64_t bytes;
    uint64_t auth_failures;
    uint64_t capacity_rejections;
    uint64_t ttl_rejections; /* topics that are not ttl_discard */
    uint64_t slow_closes;    /* a frame missed its write deadline */
} tn_ws_stats_t;

/* 0 or UV_ENOMEM. opts are copied. */
int tn_ws_new(uv_loop_t *loop, const tn_ws_opts_t *opts, tn_ws_t **out);
/* Register the route on srv; ws is borrowed for the server's lifetime. */
int tn_ws_register(tn_http_server_t *srv, tn_ws_t *ws);
/* Send every connection the error code (E_SHUTDOWN) and close it. */
void tn_ws_close_all(tn_ws_t *ws, const char *code, const char *detail);
void tn_ws_stats(const tn_ws_t *ws, tn_ws_stats_t *out);
/* After the HTTP server has closed (no connection is left). */
void tn_ws_free(tn_ws_t *ws);

/* Whether origin is an exact entry of the allowlist. */
bool tn_ws_origin_allowed(const tn_ws_opts_t *o, const char *origin, size_t len);

#ifdef TN_TEST
/* Feed bytes from a client to a session in its auth phase, with no
 * network and no broker: the frame decoder and the control parser.
 * 0, or -1 when an invariant broke: the session left the auth phase other
 * than by failing, failed auth more than once, or was not let go whole
 * (still linked, or a handle left on the loop). */
int tn__ws_fuzz(const uint8_t *data, size_t len);
#endif

#endif
