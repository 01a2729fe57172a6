/* Network addresses as options spell them: "host:port", read the way
 * nsqd reads its listener options (Go's net.Listen), so an nsqd command
 * line or config file means the same to ternd.
 *
 *   - host: a numeric IPv4 address, an IPv6 address in brackets
 *     ("[::1]"), a host name, or nothing (":4150"). Nothing, 0.0.0.0 and
 *     [::] all mean every interface, IPv4 and IPv6 alike, as in Go: one
 *     IPv6 socket that also takes IPv4 (when the host has no IPv6, an
 *     IPv4 socket on 0.0.0.0).
 *   - A host name is resolved once, by tn_netaddr_resolve, and the
 *     listener binds the name's first IPv4 address, or its first address
 *     when it has no IPv4 one (Go's rule). Resolving blocks: call it at
 *     startup, never on a loop that serves.
 *   - port: decimal 0..65535; empty ("127.0.0.1:") is 0, as in Go; 0 lets
 *     the kernel choose a free port. Service names ("localhost:http") are
 *     not taken.
 *
 * Thread safety: pure functions; any thread. */
#ifndef TN_CORE_NETADDR_H
#define TN_CORE_NETADDR_H

#include "core/platform.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define TN_NETADDR_HOST_MAX 255
/* "[ffff:...:ffff%scope]:65535" fits */
#define TN_NETADDR_NAME_MAX 80

/* "host:port" split, not yet resolved. */
typedef struct {
    char host[TN_NETADDR_HOST_MAX + 1]; /* brackets removed; "" for every interface */
    int port;                           /* 0..65535 */
    bool numeric;                       /* host is "" or an IP literal: resolving never blocks */
} tn_hostport_t;

/* A resolved listener address. */
typedef struct {
    struct sockaddr_storage sa;     /* ss_family AF_UNSPEC: none (an empty, optional option) */
    bool any;                       /* every interface: sa is [::] (or 0.0.0.0 with IPv4 only) */
    char name[TN_NETADDR_NAME_MAX]; /* numeric, for logs: "127.0.0.1:4150", "[::]:4150" */
    const char *option; /* the option it came from, e.g. "tcp-address" (static), or NULL */
} tn_netaddr_t;

/* Flags of tn_netaddr_resolve. */
#define TN_NETADDR_IPV4 1 /* IPv4 only: every interface is 0.0.0.0, names resolve to IPv4 */

/* Split text into host and port. On a syntax error returns TN_ECONFIG and
 * writes what is wrong into why (without the text itself), e.g. "port
 * 99999 is out of range 0-65535" or "missing port (expected host:port)".
 * Borrows text. */
int tn_netaddr_split(const char *text, tn_hostport_t *out, char *why, size_t whylen);

/* Resolve hp into out (out->option is left NULL). Blocks on the system
 * resolver when hp->numeric is false. 0, or TN_ECONFIG with the reason in
 * why (a name that does not resolve, an IPv6 address under
 * TN_NETADDR_IPV4). */
int tn_netaddr_resolve(const tn_hostport_t *hp, int flags, tn_netaddr_t *out, char *why,
                       size_t whylen);

/* Whether host is a DNS host name as tern's Raft takes one: labels of
 * letters, digits and '-' (not first or last in a label), 1..63 bytes
 * each, at most 253 bytes in all, an optional final dot, and not digits
 * and dots alone (that is a mistyped IPv4 address, not a name). */
bool tn_netaddr_dns_name(const char *host);

/* The numeric "ip:port" (IPv6 in brackets) of sa into out; "?" for a
 * family other than IPv4 and IPv6. out is always NUL-terminated. */
void tn_netaddr_format(const struct sockaddr_storage *sa, char *out, size_t len);

/* The port of sa, or 0 for a family other than IPv4 and IPv6. */
int tn_netaddr_port(const struct sockaddr_storage *sa);

#endif
