/* Socket addresses for the listeners of every door: parsing a
 * "host:port" option, naming a peer, and reading the port a listener got
 * (port 0 lets the kernel choose).
 *
 * Thread safety: pure functions, or calls on a handle of the caller's loop. */
#ifndef TN_PROTO_ADDR_H
#define TN_PROTO_ADDR_H

#include "core/platform.h"

#include <uv.h>

/* "host:port" with a numeric IPv4 or [IPv6] host (empty: every IPv4
 * interface). 0 or UV_EINVAL. */
int tn_addr_parse(const char *addr, struct sockaddr_storage *ss);
/* "ip:port" of tcp's peer, or "?" (out always NUL-terminated). */
void tn_addr_peer(const uv_tcp_t *tcp, char *out, size_t len);
/* The local port of a bound handle, or 0. */
int tn_addr_local_port(const uv_tcp_t *tcp);

#endif
