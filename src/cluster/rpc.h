/* Node RPC: the peer client and the server of the cluster plane, on the
 * QUIC endpoints of quic.c and the frames of wire.h.
 *
 * One tn_rpc_t per node serves its RPC address and dials its peers from
 * the same UDP socket (bulk calls from a second socket made on first use).
 *
 * Client: one connection per peer address (a dial shared by the callers
 * that wait for it, 1 s dial timeout; a failed dial is remembered for
 * tn_wire_backoff_ms, during which calls to that peer fail at once).
 * Requests ride the lane of their opcode (16 streams each for produce,
 * consume and ack, 4 for control), opened on demand and shared,
 * round-robin over the lane's streams, and are matched to replies by
 * request id. Every stream starts with the AUTH frame (the client's proof
 * of the cluster secret over the session's exporter material) and carries
 * no request until the server's proof checked out. A call that ends on its
 * deadline sends a CANCEL frame and starts a liveness PING on its
 * connection (one at a time, at most one per second): the connection is
 * closed when no PONG came back within 1 s and nothing else arrived on it.
 *
 * Server: the first frame of a stream must be AUTH (read under the 64-byte
 * pre-auth cap); a wrong proof resets the stream (logged, rate-limited,
 * with the peer address). Then REQUEST frames up to TN_WIRE_MAX_PAYLOAD:
 * an unknown opcode or a malformed request is answered 400 "unsupported
 * rpc operation"; a known one runs its handler, under one of two
 * concurrency bounds (commits; other messaging) unless the op is exempt. A
 * request whose caller cancelled while it queued is answered 503 without
 * running its handler; a CANCEL for a running one reaches the handler's
 * cancel callback, and so does the end of its stream.
 *
 * TN_OP_ECHO is served here (the transport's own round trip).
 *
 * Threads: everything on the loop thread of tn_rpc_open. tn_rpc_close must
 * not be called from inside a callback of the same tn_rpc_t. */
#ifndef TN_CLUSTER_RPC_H
#define TN_CLUSTER_RPC_H

#include "core/platform.h"

#include "cluster/wire.h"
#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct tn_rpc_s tn_rpc_t;
typedef struct tn_rpc_call_s tn_rpc_call_t;
typedef struct tn_rpc_req_s tn_rpc_req_t;

/* A request reached this node: payload (borrowed for the call) is the
 * op's fields, after the opcode byte. The handler answers with
 * tn_rpc_reply exactly once, now or later. */
typedef void (*tn_rpc_handler_cb)(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg);

/* Handler flags. */
#define TN_RPC_OP_COMMIT 1u /* runs under the commit bound (else the messaging bound) */
#define TN_RPC_OP_EXEMPT 2u /* no bound: long polls, and ops that call other peers */

typedef struct {
    uint8_t op;
    unsigned flags;
    tn_rpc_handler_cb fn;
    void *arg;
} tn_rpc_handler_t;

typedef struct {
    /* "host:port" (UDP), read as every listener option is (core/netaddr.h:
     * "" or [::] is every interface, IPv4 and IPv6); a host name resolves
     * in the call, which blocks. Borrowed for the call. */
    const char *bind;
    const uint8_t *secret; /* the cluster secret (or a generated one); copied; not empty */
    size_t secret_len;
    const tn_rpc_handler_t *handlers; /* copied; TN_OP_ECHO is built in */
    size_t nhandlers;
    unsigned max_commits;      /* concurrent commit handlers; 0 = max(64, 4 x cores) */
    unsigned max_messaging;    /* concurrent other bounded handlers; 0 = the same */
    uint64_t dial_timeout_ms;  /* 0 = 1000 */
    uint64_t reply_timeout_ms; /* a call's timeout when it gives 0; 0 = 5000 */
    uint64_t ping_timeout_ms;  /* 0 = 1000 */
    uint64_t ping_interval_ms; /* the least time between two pings of a connection; 0 = 1000 */
    uint64_t idle_timeout_ms;  /* QUIC idle timeout; 0 = 30000 */
    /* A server stream whose replies the caller has not acknowledged for
     * this long, plus 1 s per 256 KiB still unacknowledged, is reset (its
     * requests end as if the stream had); 0 = 5000. */
    uint64_t reply_write_timeout_ms;
    /* Streams per lane, at most the defaults (16/16/16/4); 0 = those. 1
     * makes each lane one stream, as the benchmark's one-stream run wants. */
    unsigned lane_streams;
#ifdef TN_TEST
    bool test_accept_any_proof; /* an impostor server: takes any client proof */
    bool test_silent_close;     /* close without CONNECTION_CLOSE, as a crash would */
#endif
} tn_rpc_opts_t;

/* Open the RPC endpoint on loop. 0 and *out, or an error explained in
 * err (TN_ECONFIG for a bad address or empty secret, the bind's UV_ code,
 * UV_ENOMEM). */
int tn_rpc_open(uv_loop_t *loop, const tn_rpc_opts_t *o, tn_rpc_t **out, char *err, size_t errlen);
/* The "ip:port" the server listens on (the kernel's port for port 0). */
const char *tn_rpc_addr(const tn_rpc_t *r);

/* A call ended: status 0 with the reply (borrowed for the callback; any
 * HTTP status), or an error with err (a sentence, borrowed):
 * UV_ETIMEDOUT (the deadline passed), TN_ECLOSED (cancelled, or the RPC
 * closing), UV_ECONNREFUSED (the dial failed, or the peer is in its dial
 * backoff), UV_EACCES (the peer could not prove the cluster secret),
 * UV_ECONNRESET (the connection went), TN_EPROTO (a malformed reply),
 * UV_ENOMEM. */
typedef void (*tn_rpc_call_cb)(void *arg, int status, const tn_wire_reply_t *reply,
                               const char *err);

/* Call op on peer_addr ("host:port", borrowed; a host name is resolved
 * off the loop before each dial of it, within the dial timeout) with payload (the op's
 * fields without the opcode; copied), within timeout_ms (0 = the reply
 * timeout). 0: cb runs exactly once, later, never inside this call, and
 * *handle_out (may be NULL) is valid until it does. An error (cb never
 * runs): UV_EINVAL (not host:port, port 0, payload over
 * TN_WIRE_MAX_PAYLOAD - 1),
 * UV_ECONNREFUSED (the peer is in its dial backoff: fail fast), TN_ECLOSED
 * (closing), UV_ENOMEM. */
int tn_rpc_call(tn_rpc_t *r, const char *peer_addr, uint8_t op, const void *payload, size_t len,
                uint64_t timeout_ms, tn_rpc_call_cb cb, void *arg, tn_rpc_call_t **handle_out);
/* The same over the bulk connection (a second socket and connection per
 * peer), for partition transfers that must not share a flow-control
 * window with commit replies. */
int tn_rpc_call_bulk(tn_rpc_t *r, const char *peer_addr, uint8_t op, const void *payload,
                     size_t len, uint64_t timeout_ms, tn_rpc_call_cb cb, void *arg,
                     tn_rpc_call_t **handle_out);
/* The general form: lane is a tn_wire_lane_t to ride instead of the
 * op's own (-1: the op's), bulk picks the bulk connection. For the
 * benchmark, the tests, and a caller that knows better than the op
 * table. */
int tn_rpc_call_on(tn_rpc_t *r, const char *peer_addr, int lane, bool bulk, uint8_t op,
                   const void *payload, size_t len, uint64_t timeout_ms, tn_rpc_call_cb cb,
                   void *arg, tn_rpc_call_t **handle_out);
/* Abandon c: a CANCEL frame goes to the server if the request was sent,
 * and cb runs with TN_ECLOSED (from the loop, not inside this call). Only
 * before cb ran. */
void tn_rpc_call_cancel(tn_rpc_call_t *c);

/* --- server side ---------------------------------------------------------------- */

/* Answer req (status 100..599, ctype NUL-terminated or NULL, body copied)
 * exactly once; req is freed. After the caller cancelled or the stream
 * ended the answer is dropped, but the call is still required. */
void tn_rpc_reply(tn_rpc_req_t *req, uint16_t status, const char *ctype, const void *body,
                  size_t len);
/* Answer req with status and the JSON body {"error":msg} (msg escaped;
 * {"error":"out of memory"} when the body cannot be made), as
 * tn_rpc_reply. */
void tn_rpc_reply_error(tn_rpc_req_t *req, uint16_t status, const char *msg);
/* Whether the caller cancelled req or its stream ended. */
bool tn_rpc_req_cancelled(const tn_rpc_req_t *req);
/* cb(arg, req) once when the caller cancels req or its stream ends (now,
 * if that happened already); req stays valid until tn_rpc_reply. */
void tn_rpc_req_on_cancel(tn_rpc_req_t *req, void (*cb)(void *arg, tn_rpc_req_t *req), void *arg);
/* The caller's "ip:port", for logs; valid until tn_rpc_reply. */
const char *tn_rpc_req_peer(const tn_rpc_req_t *req);
/* The request id the caller gave req: unique among the calls of the
 * caller's endpoint (its "ip:port", tn_rpc_req_peer). */
uint64_t tn_rpc_req_id(const tn_rpc_req_t *req);
/* cb(arg, peer, id) when a CANCEL arrives for a request this server no
 * longer has: it was answered and the caller gave up before the answer
 * reached it (the two crossed), so the answer was dropped there. peer and
 * id as tn_rpc_req_peer and tn_rpc_req_id gave them (peer borrowed for
 * the call). A CANCEL for an id never seen comes here too. NULL: none. */
void tn_rpc_on_late_cancel(tn_rpc_t *r, void (*cb)(void *arg, const char *peer, uint64_t id),
                           void *arg);

/* Append the Prometheus text of tern_cluster_rpc_requests_total{op,outcome}
 * and tern_cluster_rpc_request_seconds{op} (calls this node made) to out.
 * 0 or UV_ENOMEM. */
int tn_rpc_metrics_write(const tn_rpc_t *r, tn_buf_t *out);

#ifdef TN_TEST
typedef struct {
    uint64_t dials;                /* connections dialled */
    uint64_t conn_resets;          /* connections ended by a stateless reset */
    uint64_t pings, pongs;         /* liveness pings sent and answered */
    uint64_t ping_closes;          /* connections closed because a ping went unanswered */
    uint64_t auth_failures;        /* client streams whose server failed its proof */
    uint64_t requests_in;          /* REQUEST frames taken by this server */
    uint64_t streams_refused;      /* server streams reset for want of a proof */
    uint64_t queued_cancels;       /* queued requests answered without running */
    uint64_t reply_write_timeouts; /* server streams reset by the reply write deadline */
} tn_rpc_test_stats_t;
void tn_rpc_test_stats(const tn_rpc_t *r, tn_rpc_test_stats_t *out);
/* The endpoint drops every datagram it receives (or stops dropping). */
void tn_rpc_test_deaf(tn_rpc_t *r, bool deaf);
#endif

/* Close everything: pending calls end with TN_ECLOSED, running handlers
 * get their cancel callback and must still reply; cb(arg) when the memory
 * is gone (after the last handler replied). */
void tn_rpc_close(tn_rpc_t *r, void (*cb)(void *arg), void *arg);

#endif
