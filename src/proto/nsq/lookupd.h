/* Registration with nsqlookupd servers over their TCP protocol, as nsqd
 * does with --lookupd-tcp-address, so tern nodes can join a running NSQ
 * deployment next to nsqd nodes.
 *
 * DESIGN: one connection per lookupd.
 *   1. Connect, send the magic "  V1", IDENTIFY with this node's
 *      broadcast address, ports, host name and version (JSON body).
 *   2. REGISTER every topic and every channel this node has; then follow
 *      the engine's events: REGISTER on creation, UNREGISTER on deletion.
 *   3. PING every 15 s. Commands are answered in order (an OK or an error
 *      frame); an error is logged, not fatal.
 *   4. A failed or closed connection is retried with a backoff of 1 s
 *      doubling to 15 s; the next connection registers everything again.
 *   5. tn_lookupd_set replaces the set at runtime (nsqd's PUT
 *      /config/nsqlookupd_tcp_addresses): connections to lookupds left
 *      out close, as nsqd's do, without UNREGISTER; new ones go through
 *      steps 1-4; those in both sets stay as they are.
 *
 * Threads: the loop thread. */
#ifndef TN_PROTO_NSQ_LOOKUPD_H
#define TN_PROTO_NSQ_LOOKUPD_H

#include "core/platform.h"

#include "queue/queue.h"

#include <uv.h>

typedef struct tn_lookupd_s tn_lookupd_t;

typedef struct {
    const char *broadcast_address; /* borrowed; "" means the host name */
    int tcp_port;
    int http_port;
    const char *version;
} tn_lookupd_opts_t;

/* Register with every host:port of the comma-separated list addrs (may
 * be empty: none until tn_lookupd_set). The broker's topics and channels
 * are registered, and later changes followed (this installs the broker's
 * event hook). 0, UV_EINVAL (a bad address) or UV_ENOMEM. */
int tn_lookupd_start(uv_loop_t *loop, tn_broker_t *broker, const char *addrs,
                     const tn_lookupd_opts_t *opts, tn_lookupd_t **out);
/* Make addrs (n "host:port" strings, borrowed) the set of lookupds, as
 * in step 5. An entry that is no host:port is logged and skipped (nsqd
 * takes it and fails to dial it); an empty set closes every connection
 * and keeps l for a later call. 0 or UV_ENOMEM (the set may then be
 * partly applied). */
int tn_lookupd_set(tn_lookupd_t *l, const char *const *addrs, size_t n);
/* Close every connection; cb runs when all handles are closed. */
void tn_lookupd_stop(tn_lookupd_t *l, void (*cb)(void *arg), void *arg);

#endif
