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
/* Bind an initialised tcp handle to ss and listen with cb. On failure
 * writes "cannot listen on <addr>: <reason>" into err; the caller closes
 * the handle either way when done with it. 0 or a libuv error. */
int tn_addr_listen(uv_tcp_t *tcp, const struct sockaddr_storage *ss, uv_connection_cb cb,
                   const char *addr, char *err, size_t errlen);
/* "ip:port" of tcp's peer, or "?" (out always NUL-terminated). */
void tn_addr_peer(const uv_tcp_t *tcp, char *out, size_t len);
/* The IP part of a peer name written by tn_addr_peer ("ip:port"). */
void tn_addr_peer_ip(const char *peer, char *out, size_t len);
/* The local port of a bound handle, or 0. */
int tn_addr_local_port(const uv_tcp_t *tcp);

#endif
