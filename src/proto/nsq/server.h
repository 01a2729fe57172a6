/* The NSQ V2 TCP server: a listener and one state machine per connection
 * that speaks nsqd's protocol over the queue engine.
 *
 * DESIGN: a connection.
 *   1. Within the handshake timeout the client sends the magic "  V2";
 *      anything else closes the socket.
 *   2. Commands are parsed from the input buffer (codec.h) and handled in
 *      order. Publishes go through the router (cluster/router.h: this
 *      node's partitions, or its ingress log for another node's) and their answers (OK or an
 *      error) leave in command order once their durability boundary is
 *      reached; several may be in flight (go-nsq pipelines them). A
 *      command that answers something else waits until the publishes
 *      before it have answered, so answers never cross.
 *   3. After SUB the connection is a consumer of its channel: RDY sets its
 *      credit, deliveries are written into the output buffer and flushed
 *      when the client's RDY count is reached, the buffer fills, or the
 *      output_buffer_timeout passes. FIN, REQ and TOUCH settle by message
 *      ID, checked against this connection's leases.
 *   4. IDENTIFY may switch on Snappy or Deflate: the IDENTIFY answer goes
 *      out plain, every later byte both ways through the stream, starting
 *      with an OK frame, as nsqd does.
 *   5. A fatal error frame is flushed, then the connection closes. Closing
 *      (by either side) returns the connection's in-flight messages to the
 *      channel at once.
 *
 * Bounds: a command's bytes are buffered only up to its checked size;
 * reading pauses while a connection has too many publishes in flight or
 * too much unsent output; a client silent for two heartbeat intervals is
 * dropped; a command must complete within the command timeout once its
 * first byte arrived; connections over max_connections are closed at once.
 *
 * Threads: the loop thread of the broker. */
#ifndef TN_PROTO_NSQ_SERVER_H
#define TN_PROTO_NSQ_SERVER_H

#include "core/platform.h"

#include "auth/nsqauth.h"
#include "cluster/router.h"
#include "core/netaddr.h"
#include "proto/nsq/codec.h"
#include "proto/nsq/identify.h"
#include "proto/nsq/tls.h"
#include "queue/queue.h"

#include <uv.h>

typedef struct tn_nsq_server_s tn_nsq_server_t;

typedef struct {
    tn_nsq_limits_t limits;
    tn_nsq_server_opts_t srv;
    int64_t msg_timeout_ms; /* default lease of a delivery */
    int64_t max_req_ms;     /* REQ delays are clamped to this */
    uint32_t max_connections;
    int64_t handshake_timeout_ms;
    int64_t command_timeout_ms;
    const char *version; /* borrowed for the server's lifetime */
    /* TLS: certificate and key PEM files (NULL or "": no TLS), client CA,
     * client policy (tls.h), minimum version; borrowed for the start. */
    const char *tls_cert;
    const char *tls_key;
    const char *tls_ca;
    const char *tls_min_version;
    int tls_policy;
    bool tls_required;
    const char *auth_http_address; /* nsqauthd servers, "" for none; borrowed */
    /* A local checker (tern's users) in place of auth servers; NULL for
     * none; copied. */
    const tn_nsqauth_local_t *auth_local;
    /* Without AUTH configured: whether a topic is closed to this open door
     * (owned through /v1; api/access.h). PUB, MPUB, DPUB and SUB on it are
     * refused with E_UNAUTHORIZED, and a subscription to it ends so
     * before its next message (asked before a subscription's deliveries
     * while protected_gen moves, and at its heartbeats). NULL: every
     * topic is open. */
    bool (*is_protected)(void *arg, const char *topic);
    void *protected_arg;
    /* A counter that moves whenever is_protected's answer may change
     * (meta.h tn_meta_access_gen; borrowed for the server's lifetime,
     * read on the loop thread): a subscription found open at one value
     * is not asked again before its deliveries while it holds. NULL:
     * asked before every delivery. */
    const uint64_t *protected_gen;
    /* Without AUTH configured: whether is_protected cannot judge topic
     * yet (api/access.h tn_access_unknown: the metastore replica has not
     * caught up since the start); text then gets the sentence. PUB, MPUB,
     * DPUB and SUB then wait, before is_protected is asked, up to 5 s for
     * it to become false (asked every 20 ms), then are refused with
     * E_PUB_FAILED, E_MPUB_FAILED, E_DPUB_FAILED or E_SUB_FAILED and that
     * sentence, the connection kept (the client retries). NULL: it
     * always can. Called with protected_arg. */
    bool (*protection_unknown)(void *arg, const char *topic, char *text, size_t len);
    /* With auth_local (tern's users): whether the AUTH'ed identity may not
     * PUB, MPUB or DPUB to topic beyond its grants (a dead-letter topic
     * of another's topic, api/access.h); text gets the E_UNAUTHORIZED
     * sentence. NULL: the grants alone decide. Called with protected_arg. */
    bool (*pub_refused)(void *arg, const char *topic, const char *identity, char *text, size_t len);
    /* Where publishes go (cluster/router.h); borrowed for the server's
     * lifetime. */
    tn_router_t *router;
} tn_nsq_opts_t;

void tn_nsq_opts_from_config(tn_nsq_opts_t *o, const tn_config_t *cfg, const char *version);

/* Listen on addr, resolved by the configuration (port 0 picks one). On
 * failure returns an error, writes a line into err (for a listener, one
 * naming the address, its option and the system error) and sets *out to
 * NULL. opts is copied; addr is borrowed for the call. */
int tn_nsq_server_start(uv_loop_t *loop, tn_broker_t *broker, const tn_nsq_opts_t *opts,
                        const tn_netaddr_t *addr, tn_nsq_server_t **out, char *err, size_t errlen);
typedef struct {
    uint32_t connections;
    uint32_t consumers;                      /* subscribed connections */
    uint64_t in_flight;                      /* messages they hold (FIN/REQ/TOUCH pending) */
    uint64_t errors[TN_NSQ_E_THROTTLED + 1]; /* error frames sent, by code */
    uint64_t refused_connections;            /* over max_connections */
} tn_nsq_server_stats_t;

void tn_nsq_server_stats(const tn_nsq_server_t *s, tn_nsq_server_stats_t *out);

/* /stats' "producers": a JSON array of the connections that have
 * published (nsqd's client entries, pub_counts limited to topic when it
 * is not ""), or null when none has. Appended to out; 0 or UV_ENOMEM.
 * Loop thread. */
int tn_nsq_server_producers_json(const tn_nsq_server_t *s, const tn_pubs_filter_t *f,
                                 tn_buf_t *out);

/* Start draining (api/drain.h), for good: every consumer is held at RDY 0
 * (later RDYs are ignored) while what it holds can still be FINed, REQed
 * and TOUCHed; PUB, MPUB and DPUB are answered E_PUB_FAILED,
 * E_MPUB_FAILED, E_DPUB_FAILED "the node is draining ..." and, unlike
 * other publish failures, keep the connection (a retryable refusal).
 * Publishes already under way answer as usual. Loop thread. */
void tn_nsq_server_drain(tn_nsq_server_t *s);

/* The port it listens on. */
/* The nsqauthd client AUTH uses, or NULL when AUTH is not configured
 * (other doors share its cache). */
tn_nsqauth_t *tn_nsq_server_auth(const tn_nsq_server_t *s);
int tn_nsq_server_port(const tn_nsq_server_t *s);
/* Whether the server has a TLS context (tls-cert was given at start). */
bool tn_nsq_server_has_tls(const tn_nsq_server_t *s);
/* Use ctx for IDENTIFY tls_v1 upgrades from now on (a certificate
 * reload); sessions already upgraded keep theirs. ctx is transferred; the
 * previous context is freed. Only for a server that has one. */
void tn_nsq_server_set_tls(tn_nsq_server_t *s, tn_tls_ctx_t *ctx);
/* Stop listening, close every connection (their in-flight messages go back
 * to their channels) and free the server; cb runs when all is closed. */
void tn_nsq_server_close(tn_nsq_server_t *s, void (*cb)(void *arg), void *arg);

#endif
