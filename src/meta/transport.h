/* tern's libraft transport (struct raft_uv_transport): Raft's connections
 * between nodes over TCP, with OpenSSL mutual TLS when certificate files
 * are given and in plaintext otherwise. Raft has no authentication of its
 * own, so with TLS a node talks Raft only with peers whose certificate
 * chains to the configured CA, and refuses (and logs) any other.
 *
 * libraft connections are one-way: the dialer only writes Raft messages,
 * the acceptor only reads them. Before handing a connection to libraft the
 * two ends exchange a small handshake of tern's own (after TLS, inside it):
 *
 *   dialer -> acceptor, 16 bytes then the address:
 *     [4] "TNRH"   [2] version (1, little endian)   [2] address length (1..TN_META_ADDR_MAX)
 *     [8] the dialer's Raft id (little endian, >= 1)   [n] its Raft address, "a.b.c.d:port"
 *   acceptor -> dialer, 8 bytes: [4] "TNRA"   [2] version (1)   [2] zero
 *
 * A handshake that breaks any of these rules, or does not complete within
 * TN_META_TRANSPORT_HANDSHAKE_MS, closes the connection. The answer lets
 * the dialer report a refused connection as a failed connect (libraft
 * retries it) rather than as a stream that dies at its first write.
 *
 * DESIGN: a connection with TLS.
 *   1. connect (dialer) or accept (acceptor) a TCP socket; TLS 1.3 (1.2 at
 *      least) runs on memory BIOs on the loop thread, both sides present
 *      their certificate and verify the other's chain against the CA.
 *   2. The handshake above, inside TLS.
 *   3. An AF_UNIX socketpair: one end, a uv_pipe_t allocated with
 *      raft_malloc, goes to libraft (which owns it from then on: it closes
 *      it and frees it with raft_free); the transport pumps the other end
 *      to and from the TLS connection. Back-pressure: while more than
 *      TN_META_TRANSPORT_QUEUE_MAX bytes wait to be written on one side,
 *      the other side is not read.
 *   4. Either side ending (EOF, an error, TLS failing) closes both of the
 *      transport's handles; libraft then sees EOF on its end.
 * Without TLS, steps 1 and 3 fall away: libraft gets the TCP stream
 * itself, read exactly up to the end of the handshake.
 *
 * Messages around a connection's life are libraft's (0.15, uv_send.c):
 * this transport holds none. A message to a peer with no connection yet
 * (or one being dialled) waits in libraft's queue for that peer, in
 * order, and is written once the connect succeeds; when a connect fails
 * (the peer not listening yet: it listens from raft_start), the queue is
 * cut to its newest 3, the older ones answered RAFT_NOCONNECTION, and
 * the peer is dialled again after the connect retry delay (tn_meta_open
 * sets it to a heartbeat timeout). A write to a connection that broke
 * answers RAFT_IOERR and libraft dials again at once; bytes accepted by
 * the kernel (or, with TLS, the socketpair) before the break was seen are
 * lost and were answered 0, as on any stream. Connections are one-way,
 * so two nodes dialling each other at once make two connections, one for
 * each direction, and neither is closed for the other.
 *
 * Close (libraft's transport close, from raft_close): stop listening,
 * close every connection still handshaking or pumping, fail pending
 * connects with RAFT_CANCELED, and only then call the close callback.
 *
 * Addresses are "host:port" where host is a numeric IPv4 address or a DNS
 * name (tn_meta_transport_split has the rules); the string is what Raft
 * records and what the handshake carries, compared as a string, never as
 * an IP. A connect to a name looks it up with uv_getaddrinfo (in libuv's
 * thread pool, never blocking the loop) each time libraft dials, and takes
 * its first IPv4 address: a peer re-created at another IP under the same
 * name is reached at the new one. A name that does not resolve fails the
 * connect like an unreachable peer (libraft retries it). The listener
 * binds a numeric address: opts.listen (the config resolves this node's
 * own name once, at start), or the address itself when it is numeric; an
 * empty host listens on every interface.
 *
 * Threads: the loop thread of the raft_io it serves. */
#ifndef TN_META_TRANSPORT_H
#define TN_META_TRANSPORT_H

#include "core/platform.h"

#include <stdbool.h>
#include <stddef.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#define TN_META_TRANSPORT_HANDSHAKE_MS 10000
#define TN_META_TRANSPORT_QUEUE_MAX    (256 * 1024)

typedef struct {
    /* PEM files, borrowed for the call: all three for mutual TLS, all
     * NULL (or "") for plaintext. */
    const char *tls_cert; /* this node's certificate (chain) */
    const char *tls_key;  /* its private key */
    const char *tls_ca;   /* the CA that peers' certificates must chain to */
    /* Numeric IPv4 "a.b.c.d:port" to listen on, borrowed for the call; NULL
     * (or "") listens on the Raft address itself, which must then be
     * numeric. Needed when the Raft address is a host name. */
    const char *listen;
} tn_meta_transport_opts_t;

/* Set up t (caller-owned) for raft_uv_init on loop: t->impl is allocated
 * and the certificates are loaded now. On failure returns TN_ECONFIG (only
 * some TLS files given, or one that does not load: err names it and says
 * why) or UV_ENOMEM, and t needs no fini. */
int tn_meta_transport_init(struct raft_uv_transport *t, uv_loop_t *loop,
                           const tn_meta_transport_opts_t *o, char *err, size_t errlen);
/* Split a Raft address "host:port" into host (hostlen bytes, at least
 * 254) and port (decimal 0..65535), and say whether host is numeric:
 * empty or an IPv4 literal; otherwise it must be a DNS name by
 * tn_netaddr_dns_name's rules. 0 or UV_EINVAL (IPv6 literals included:
 * Raft's addresses are IPv4). */
int tn_meta_transport_split(const char *address, char *host, size_t hostlen, unsigned *port,
                            bool *numeric);

/* Release t's memory: after libraft closed the transport (the raft_io's
 * close, i.e. in or after raft_close's callback), or when t was never
 * initialised by libraft (raft_uv_init or raft_init failed). */
void tn_meta_transport_fini(struct raft_uv_transport *t);

#endif
