/* Socket addresses for the listeners of every door: listening on an
 * address the configuration resolved (core/netaddr.h), naming a peer, and
 * reading the port a listener got (port 0 lets the kernel choose).
 *
 * Thread safety: calls on a handle of the caller's loop. */
#ifndef TN_PROTO_ADDR_H
#define TN_PROTO_ADDR_H

#include "core/platform.h"

#include "core/netaddr.h"

#include <uv.h>

/* Bind an initialised tcp handle to addr and listen with cb. Every
 * interface (addr->any) is one IPv6 socket that takes IPv4 too, or
 * 0.0.0.0 when the host has no IPv6. On failure writes "cannot listen on
 * <address> (<option>): <reason>" into err; the caller closes the handle
 * either way when done with it. Borrows addr. 0 or a libuv error. */
int tn_addr_listen(uv_tcp_t *tcp, const tn_netaddr_t *addr, uv_connection_cb cb, char *err,
                   size_t errlen);
/* "ip:port" of tcp's peer, or "?" (out always NUL-terminated). */
void tn_addr_peer(const uv_tcp_t *tcp, char *out, size_t len);
/* The IP part of a peer name written by tn_addr_peer ("ip:port"). */
void tn_addr_peer_ip(const char *peer, char *out, size_t len);
/* The local port of a bound handle, or 0. */
int tn_addr_local_port(const uv_tcp_t *tcp);
/* Whether a client connection just accepted into tcp may stay open: its
 * descriptor lies below the doors' mark under the descriptor limit
 * (core/fdroom.h, TN_FD_CONNS), so a flood of connections cannot starve
 * storage of the files it opens. A door refuses by closing the connection
 * at once. Borrows tcp. */
bool tn_addr_fd_room(const uv_tcp_t *tcp);

#endif
