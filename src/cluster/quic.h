/* QUIC endpoints for node RPC: ngtcp2 0.12 and GnuTLS on a libuv UDP
 * socket. Every ngtcp2 and GnuTLS call of tern lives in quic.c, so a port
 * to ngtcp2 1.x touches one file; callers see endpoints, connections and
 * bidirectional byte streams.
 *
 * An endpoint is one UDP socket. It dials (client connections) and, when
 * opened with accept set, serves: incoming packets are routed to their
 * connection by destination connection ID, so one socket carries many
 * connections of both roles. Packets for a connection ID the endpoint does
 * not know are answered with a stateless reset whose token is derived from
 * the endpoint's reset key, so a peer that held a connection to a process
 * that restarted with the same key drops it at once; a client that receives
 * a valid reset closes the connection immediately (closed with
 * UV_ECONNRESET). Garbage datagrams are dropped (a rate-limited debug line).
 *
 * TLS: TLS 1.3 only, one ephemeral ECDSA P-256 self-signed certificate per
 * process, never verified by the dialer (the session-bound secret proof of
 * rpc.c is the authentication), ALPN TN_WIRE_ALPN mandatory on both ends.
 * A dialer keeps a small session cache per peer address, so a redial
 * resumes; a resumed session still yields fresh exporter material.
 *
 * Streams are byte streams: writes are copied and sent in order, reads are
 * delivered as they arrive (in order) and the flow-control windows are
 * extended as soon as the data callback returns. Idle timeout 30 s with a
 * keepalive ping well inside it.
 *
 * Callbacks may call any function of this file, including closing the
 * connection they were called for; the memory of a connection or stream
 * stays valid until its closed callback returns.
 *
 * Threads: an endpoint and everything on it belong to its loop's thread. */
#ifndef TN_CLUSTER_QUIC_H
#define TN_CLUSTER_QUIC_H

#include "core/platform.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#define TN_QUIC_RESET_KEY_LEN 32
#define TN_QUIC_EKM_LEN       32

typedef struct tn_quic_ep_s tn_quic_ep_t;
typedef struct tn_quic_conn_s tn_quic_conn_t;
typedef struct tn_quic_stream_s tn_quic_stream_t;

/* Connection events. Every callback may be NULL. */
typedef struct {
    /* The handshake completed (ALPN checked): tn_quic_conn_ekm works and
     * streams may be opened. */
    void (*ready)(void *arg, tn_quic_conn_t *c);
    /* The peer opened stream s. Call tn_quic_stream_set_cbs to take it;
     * a stream left without callbacks is reset when this returns. */
    void (*stream)(void *arg, tn_quic_conn_t *c, tn_quic_stream_t *s);
    /* The connection is gone: err is TN_ECLOSED (closed by either end),
     * UV_ECONNRESET (stateless reset), UV_ETIMEDOUT (idle or handshake
     * timeout), TN_EPROTO (TLS or transport failure, ALPN mismatch) or
     * UV_ENOMEM. Each of its streams' closed callbacks ran before. The
     * connection is freed after this returns. Called once, also when the
     * endpoint closes. */
    void (*closed)(void *arg, tn_quic_conn_t *c, int err);
} tn_quic_conn_cbs_t;

/* Stream events. */
typedef struct {
    /* n > 0 bytes of the stream, in order; p borrowed for the call. */
    void (*data)(void *arg, tn_quic_stream_t *s, const uint8_t *p, size_t n);
    /* The stream ended: 0 when the peer finished it (FIN), UV_ECONNRESET
     * when the peer reset it, or the connection's error when it went. The
     * stream is freed after this returns. Not called after the owner's own
     * tn_quic_stream_close or tn_quic_stream_reset. */
    void (*closed)(void *arg, tn_quic_stream_t *s, int err);
} tn_quic_stream_cbs_t;

typedef struct {
    const struct sockaddr *bind; /* borrowed; IPv4 or IPv6; port 0 lets the kernel choose */
    /* The stateless reset key (copied); rpc.c derives it from the cluster
     * secret with tn_wire_reset_key, so every process of a cluster answers
     * for the others' old connection IDs. */
    uint8_t reset_key[TN_QUIC_RESET_KEY_LEN];
    bool accept;                          /* serve incoming connections */
    const tn_quic_conn_cbs_t *server_cbs; /* borrowed for the endpoint's life; for accepted ones */
    void *server_arg;
    unsigned max_conns;       /* accepted connections at once; 0 = 1024 */
    uint64_t idle_timeout_ms; /* 0 = 30000 */
    uint64_t keepalive_ms;    /* 0 = 10000 */
    uint64_t handshake_ms;    /* 0 = 10000 */
#ifdef TN_TEST
    bool silent_close; /* tn_quic_ep_close sends no CONNECTION_CLOSE, as a crash would */
    bool test_no_gro;  /* read as on a kernel without UDP_GRO (libuv's recvmmsg) */
#endif
} tn_quic_ep_opts_t;

/* Open an endpoint bound to o->bind. 0 and *out, or an error (UV_ code of
 * the bind, TN_EFAILED from TLS setup, UV_ENOMEM) explained in err. */
int tn_quic_ep_open(uv_loop_t *loop, const tn_quic_ep_opts_t *o, tn_quic_ep_t **out, char *err,
                    size_t errlen);
/* The bound address (the kernel's port when 0 was asked). */
void tn_quic_ep_addr(const tn_quic_ep_t *ep, struct sockaddr_storage *out);
/* Close every connection (their closed callbacks run with TN_ECLOSED,
 * after a CONNECTION_CLOSE is sent), then the socket; cb(arg) when the
 * memory is gone. No callbacks of the endpoint's objects after cb. */
void tn_quic_ep_close(tn_quic_ep_t *ep, void (*cb)(void *arg), void *arg);

/* Dial peer (borrowed). 0 and *out (the connection, not yet ready: ready
 * or closed follows), or UV_ENOMEM / TN_EFAILED / UV_EINVAL. cbs borrowed
 * until closed. */
int tn_quic_connect(tn_quic_ep_t *ep, const struct sockaddr *peer, const tn_quic_conn_cbs_t *cbs,
                    void *arg, tn_quic_conn_t **out);
/* Replace the callbacks of c (for an accepted connection, in its ready or
 * first stream callback). */
void tn_quic_conn_set_cbs(tn_quic_conn_t *c, const tn_quic_conn_cbs_t *cbs, void *arg);
/* The 32 bytes of RFC 8446 exporter material under TN_WIRE_EKM_LABEL. 0,
 * or TN_ECLOSED before the handshake completed. */
int tn_quic_conn_ekm(tn_quic_conn_t *c, uint8_t out[TN_QUIC_EKM_LEN]);
/* Close c: a CONNECTION_CLOSE with app_code goes to the peer, then the
 * closed callback runs (err TN_ECLOSED) from the loop, not inside this
 * call. Idempotent. */
void tn_quic_conn_close(tn_quic_conn_t *c, uint64_t app_code);
/* "ip:port" of the peer, for logs; valid while c is. */
const char *tn_quic_conn_peer(const tn_quic_conn_t *c);
/* Whether the TLS session was resumed from the session cache. */
bool tn_quic_conn_resumed(const tn_quic_conn_t *c);
/* Whether the connection is closing or gone (no more streams). */
bool tn_quic_conn_closing(const tn_quic_conn_t *c);
/* Datagrams received on c so far: the liveness check's "did anything arrive". */
uint64_t tn_quic_conn_rx_packets(const tn_quic_conn_t *c);

/* Open a bidirectional stream on a ready connection. 0 and *out, or
 * TN_ECLOSED (not ready, closing), UV_EAGAIN (the peer's stream limit),
 * UV_ENOMEM. cbs borrowed until the stream ends. */
int tn_quic_stream_open(tn_quic_conn_t *c, const tn_quic_stream_cbs_t *cbs, void *arg,
                        tn_quic_stream_t **out);
void tn_quic_stream_set_cbs(tn_quic_stream_t *s, const tn_quic_stream_cbs_t *cbs, void *arg);
/* Queue n bytes (copied) for sending; they leave on the next loop pass.
 * 0, UV_ENOMEM or TN_ECLOSED (stream finished, reset or its connection
 * closing). */
int tn_quic_stream_write(tn_quic_stream_t *s, const void *p, size_t n);
/* Bytes written and not yet acknowledged by the peer. */
/* Bytes of s the peer has acknowledged so far. */
uint64_t tn_quic_stream_acked(const tn_quic_stream_t *s);
size_t tn_quic_stream_unacked(const tn_quic_stream_t *s);
/* Finish the stream after the queued bytes (FIN) and stop reading; no
 * callbacks after this call; the memory goes when ngtcp2 is done. */
void tn_quic_stream_close(tn_quic_stream_t *s);
/* In the closed callback of a stream the peer reset: the application
 * code it gave (0 when none). */
uint64_t tn_quic_stream_peer_code(const tn_quic_stream_t *s);
/* Abort both directions with app_code (RESET_STREAM + STOP_SENDING); no
 * callbacks after this call. */
void tn_quic_stream_reset(tn_quic_stream_t *s, uint64_t app_code);
tn_quic_conn_t *tn_quic_stream_conn(const tn_quic_stream_t *s);
#ifdef TN_TEST
/* Take n bytes (borrowed) as a datagram from `from`, as the socket would
 * have delivered it: the fuzz target's way in. */
void tn_quic_ep_test_input(tn_quic_ep_t *ep, const struct sockaddr *from, const uint8_t *p,
                           size_t n);
/* Drop every datagram the socket receives (a peer whose path stopped
 * delivering), or stop dropping. */
void tn_quic_ep_test_deaf(tn_quic_ep_t *ep, bool deaf);
/* Every GSO send from now on fails with EINVAL, as on a kernel before
 * 4.18: the endpoint falls back to one datagram per send. */
void tn_quic_ep_test_no_gso(tn_quic_ep_t *ep);
typedef struct {
    uint64_t gso_sends;    /* batches sent with one UDP_SEGMENT sendmsg */
    uint64_t single_sends; /* datagrams sent alone (uv_udp_try_send) */
    uint64_t gso_refused;  /* GSO sends the kernel (or the hook) refused */
    uint64_t deaf_drops;   /* datagrams dropped by tn_quic_ep_test_deaf */
    uint64_t gro_reads;    /* reads that carried several datagrams (UDP_GRO) */
    bool gso_off;          /* GSO turned off for the endpoint */
    bool gro;              /* the socket is read with UDP_GRO */
} tn_quic_ep_test_stats_t;
void tn_quic_ep_test_stats(const tn_quic_ep_t *ep, tn_quic_ep_test_stats_t *out);
#endif
int64_t tn_quic_stream_id(const tn_quic_stream_t *s);

#endif
