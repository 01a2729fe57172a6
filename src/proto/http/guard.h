/* The address guard of the outbound plane (docs/remotes.md): which remote
 * URLs a cluster may be told to dial, and which resolved addresses a dial
 * may reach. Pure: parsing and checks only; the caller resolves names and
 * passes each address in (after DNS resolution, so that a name rebound to
 * a refused address is refused at every dial).
 *
 * Rules.
 *   1. A remote URL is https://host[:port][/path]: any other scheme,
 *      userinfo (user@host), a query, a fragment, or a host outside
 *      [A-Za-z0-9.-] (percent-escapes included) is refused with a reason.
 *      The port defaults to 443.
 *   2. The port must be one of remotes-allowed-ports (default 443,4443);
 *      the host (lower case, one trailing dot dropped) one of
 *      remotes-allowed-hosts when that option is set.
 *   3. A host whose last label starts with a digit is an IPv4 literal and
 *      is read with inet_aton's rules (1 to 4 parts, each decimal, octal
 *      with a leading 0 or hex with 0x; the last part fills the bytes
 *      left): 2130706433, 0177.0.0.1, 0x7f.1 and 127.1 are all 127.0.0.1.
 *      A host that reads as no address is refused. [v6] is an IPv6
 *      literal (no zone id).
 *   4. Refused addresses: loopback (127/8, ::1), link-local (169.254/16,
 *      fe80::/10), multicast (224/4, ff00::/8), unspecified (0/8, ::),
 *      broadcast (255.255.255.255), the cloud metadata addresses
 *      169.254.169.254, fd00:ec2::254 and 100.100.100.200, and the
 *      IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64
 *      (64:ff9b::a.b.c.d) forms of the IPv4 ones: unless an entry of
 *      remotes-allow-addresses (CIDRs) holds the address (or, for those
 *      IPv6 forms, the IPv4 address inside). Private ranges (10/8,
 *      172.16/12, 192.168/16, fc00::/7 but fd00:ec2::254) stay allowed.
 *   5. Not an oracle: every refused address gets the same answer
 *      (UV_EACCES, TN_GUARD_REFUSED), whatever the reason.
 *
 * Threads: any (no shared state; a tn_guard_t is read-only once made). */
#ifndef TN_PROTO_HTTP_GUARD_H
#define TN_PROTO_HTTP_GUARD_H

#include "core/platform.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define TN_GUARD_HOST_MAX  253
#define TN_GUARD_PATH_MAX  1024
#define TN_GUARD_URL_MAX   2048
#define TN_GUARD_MAX_PORTS 32
#define TN_GUARD_MAX_HOSTS 64
#define TN_GUARD_MAX_CIDRS 64
/* The one message for every refused address (rule 5). */
#define TN_GUARD_REFUSED       "refused by the remotes address guard"
#define TN_GUARD_DEFAULT_PORTS "443,4443"

/* A parsed remote URL. */
typedef struct {
    char host[TN_GUARD_HOST_MAX + 1]; /* lower case; an IPv6 literal without brackets */
    uint16_t port;
    char path[TN_GUARD_PATH_MAX + 1]; /* "/" when none */
    bool literal;                     /* the host is an address literal: addr holds it */
    struct sockaddr_storage addr;     /* AF_INET or AF_INET6, with port */
} tn_guard_url_t;

/* One CIDR of remotes-allow-addresses. */
typedef struct {
    int family; /* AF_INET or AF_INET6 */
    uint8_t bytes[16];
    uint8_t prefix;
} tn_guard_cidr_t;

typedef struct tn_guard_s {
    uint16_t ports[TN_GUARD_MAX_PORTS];
    size_t nports;
    char hosts[TN_GUARD_MAX_HOSTS][TN_GUARD_HOST_MAX + 1]; /* lower case; none: any host */
    size_t nhosts;
    tn_guard_cidr_t allow[TN_GUARD_MAX_CIDRS];
    size_t nallow;
} tn_guard_t;

/* Make g from the three options' texts (borrowed; comma-separated, spaces
 * around items ignored): ports (NULL or "": TN_GUARD_DEFAULT_PORTS),
 * hosts (NULL or "": any), allow (NULL or "": none; each a.b.c.d/n,
 * v6/n, or an address alone for /32 or /128). 0, or UV_EINVAL with err
 * naming the option and the item ("remotes-allowed-ports: \"0\" is not a
 * port (1..65535)"). */
int tn_guard_init(tn_guard_t *g, const char *ports, const char *hosts, const char *allow, char *err,
                  size_t errlen);

/* Parse url[0..len) (rule 1 and 3). 0, or UV_EINVAL with err saying what
 * is wrong ("the scheme must be https", ...). Never resolves a name. */
int tn_guard_parse_url(const char *url, size_t len, tn_guard_url_t *out, char *err, size_t errlen);

/* Rule 2 for a parsed URL, and rule 4 for its host when it is a literal.
 * 0; UV_EACCES with err: "port 80 is not in remotes-allowed-ports
 * (443,4443)", "host x is not in remotes-allowed-hosts", or
 * TN_GUARD_REFUSED for a refused literal (the same for every reason). */
int tn_guard_check_url(const tn_guard_t *g, const tn_guard_url_t *u, char *err, size_t errlen);

/* Rule 4 for a resolved address (AF_INET or AF_INET6; any other family is
 * refused): 0 or UV_EACCES. */
int tn_guard_check_addr(const tn_guard_t *g, const struct sockaddr *sa);

/* inet_aton's reading of s[0..len) (rule 3) into *out (network order):
 * 0, or UV_EINVAL when it is not an IPv4 address in any spelling. */
int tn_guard_parse_ipv4(const char *s, size_t len, struct in_addr *out);

#endif
