/* Network addresses as options spell them. See netaddr.h. */
#include "core/platform.h"

#include "core/netaddr.h"

#include "core/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

/* An IP literal, as Go's net.ParseIP takes it: dotted-quad IPv4 (no
 * "127.1" shorthands, which the C resolver would also take), or IPv6,
 * optionally with a %zone. */
static bool is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1)
        return true;
    const char *pct = strchr(host, '%');
    if (pct == NULL || pct[1] == '\0')
        return false;
    char bare[TN_NETADDR_HOST_MAX + 1];
    snprintf(bare, sizeof(bare), "%.*s", (int)(pct - host), host);
    return inet_pton(AF_INET6, bare, buf) == 1;
}

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return n > 0;
}

int tn_netaddr_split(const char *text, tn_hostport_t *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    size_t len = strlen(text);
    if (len == 0) {
        tn_errbuf(why, whylen, "empty (expected host:port, or :port for every interface)");
        return TN_ECONFIG;
    }
    const char *host;
    size_t hl;
    const char *port;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL) {
            tn_errbuf(why, whylen, "missing ']' after the IPv6 address");
            return TN_ECONFIG;
        }
        host = text + 1;
        hl = (size_t)(close - host);
        if (close[1] == '\0') {
            tn_errbuf(why, whylen, "missing port (expected [IPv6 address]:port)");
            return TN_ECONFIG;
        }
        if (close[1] != ':') {
            tn_errbuf(why, whylen, "expected ':' and the port after ']'");
            return TN_ECONFIG;
        }
        if (hl == 0) {
            tn_errbuf(why, whylen, "empty brackets (for every interface write :port)");
            return TN_ECONFIG;
        }
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL) {
            if (all_digits(text, len))
                tn_errbuf(why, whylen,
                          "missing host and ':' (for port %s on every interface write :%s)", text,
                          text);
            else
                tn_errbuf(why, whylen, "missing port (expected host:port)");
            return TN_ECONFIG;
        }
        host = text;
        hl = (size_t)(colon - text);
        if (memchr(host, ':', hl) != NULL) {
            tn_errbuf(why, whylen, "an IPv6 address needs brackets, as in [::1]:4150");
            return TN_ECONFIG;
        }
        port = colon + 1;
    }
    if (hl > TN_NETADDR_HOST_MAX) {
        tn_errbuf(why, whylen, "host longer than %d bytes", TN_NETADDR_HOST_MAX);
        return TN_ECONFIG;
    }
    size_t pl = strlen(port);
    long p = 0;
    if (pl > 0 && !all_digits(port, pl)) {
        tn_errbuf(why, whylen, "port \"%s\" is not a number (0-65535)", port);
        return TN_ECONFIG;
    }
    for (size_t i = 0; i < pl && p <= 65535; i++)
        p = p * 10 + (port[i] - '0');
    if (p > 65535) {
        tn_errbuf(why, whylen, "port %s is out of range 0-65535", port);
        return TN_ECONFIG;
    }
    memcpy(out->host, host, hl);
    out->host[hl] = '\0';
    out->port = (int)p;
    out->numeric = hl == 0 || is_ip_literal(out->host);
    if (text[0] == '[' && out->numeric && strchr(out->host, ':') == NULL) {
        tn_errbuf(why, whylen, "brackets are for IPv6 addresses (write %s:%d)", out->host,
                  out->port);
        return TN_ECONFIG;
    }
    return 0;
}

static bool is_unspecified(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

static void set_any(tn_netaddr_t *out, int flags, int port)
{
    memset(&out->sa, 0, sizeof(out->sa));
    if (flags & TN_NETADDR_IPV4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->sa;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        sin->sin_port = htons((uint16_t)port);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->sa;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_addr = in6addr_any;
        sin6->sin6_port = htons((uint16_t)port);
    }
    out->any = true;
}

int tn_netaddr_resolve(const tn_hostport_t *hp, int flags, tn_netaddr_t *out, char *why,
                       size_t whylen)
{
    memset(out, 0, sizeof(*out));
    if (hp->host[0] == '\0') {
        set_any(out, flags, hp->port);
        tn_netaddr_format(&out->sa, out->name, sizeof(out->name));
        return 0;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = hp->numeric ? AI_NUMERICHOST : 0;
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(hp->host, NULL, &hints, &res);
    if (rc != 0) {
        if (rc == EAI_SYSTEM)
            tn_errbuf(why, whylen, "cannot resolve host \"%s\": %s", hp->host, strerror(errno));
        else
            tn_errbuf(why, whylen, "host \"%s\" does not resolve: %s", hp->host, gai_strerror(rc));
        return TN_ECONFIG;
    }
    /* Go's net.Listen: the first IPv4 address, else the first address. */
    const struct addrinfo *v4 = NULL, *v6 = NULL;
    for (const struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        if (a->ai_family == AF_INET && v4 == NULL)
            v4 = a;
        else if (a->ai_family == AF_INET6 && v6 == NULL)
            v6 = a;
    }
    const struct addrinfo *pick = v4 != NULL ? v4 : v6;
    if (pick != NULL && pick->ai_addrlen <= sizeof(out->sa))
        memcpy(&out->sa, pick->ai_addr, pick->ai_addrlen);
    freeaddrinfo(res);
    if (out->sa.ss_family == AF_UNSPEC) {
        tn_errbuf(why, whylen, "host \"%s\" has no IPv4 or IPv6 address", hp->host);
        return TN_ECONFIG;
    }
    /* 0.0.0.0 and [::] are every interface, both families, as in Go. */
    if (is_unspecified(&out->sa)) {
        set_any(out, flags, hp->port);
    } else if (out->sa.ss_family == AF_INET6 && (flags & TN_NETADDR_IPV4)) {
        if (hp->numeric)
            tn_errbuf(why, whylen, "only IPv4 addresses are taken here");
        else
            tn_errbuf(why, whylen, "host \"%s\" has no IPv4 address", hp->host);
        memset(out, 0, sizeof(*out));
        return TN_ECONFIG;
    } else if (out->sa.ss_family == AF_INET) {
        ((struct sockaddr_in *)&out->sa)->sin_port = htons((uint16_t)hp->port);
    } else {
        ((struct sockaddr_in6 *)&out->sa)->sin6_port = htons((uint16_t)hp->port);
    }
    tn_netaddr_format(&out->sa, out->name, sizeof(out->name));
    return 0;
}

void tn_netaddr_format(const struct sockaddr_storage *sa, char *out, size_t len)
{
    socklen_t sl;
    if (sa->ss_family == AF_INET)
        sl = sizeof(struct sockaddr_in);
    else if (sa->ss_family == AF_INET6)
        sl = sizeof(struct sockaddr_in6);
    else {
        snprintf(out, len, "?");
        return;
    }
    char host[NI_MAXHOST];
    if (getnameinfo((const struct sockaddr *)sa, sl, host, sizeof(host), NULL, 0, NI_NUMERICHOST) !=
        0) {
        snprintf(out, len, "?");
        return;
    }
    if (sa->ss_family == AF_INET6)
        snprintf(out, len, "[%s]:%d", host, tn_netaddr_port(sa));
    else
        snprintf(out, len, "%s:%d", host, tn_netaddr_port(sa));
}

int tn_netaddr_port(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    if (sa->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    return 0;
}

bool tn_netaddr_dns_name(const char *host)
{
    size_t hlen = strlen(host);
    if (hlen == 0 || hlen > 253)
        return false;
    bool letter = false;
    size_t label = 0;
    for (size_t i = 0; i < hlen; i++) {
        char ch = host[i];
        if (ch == '.') {
            if (label == 0 || host[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        if (!alpha && !(ch >= '0' && ch <= '9') && !(ch == '-' && label > 0))
            return false;
        letter = letter || alpha || ch == '-';
        if (++label > 63)
            return false;
    }
    return letter && host[hlen - 1] != '-';
}
