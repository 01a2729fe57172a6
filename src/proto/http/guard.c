/* The address guard of the outbound plane. See guard.h for the rules. */
#include "core/platform.h"

#include "proto/http/guard.h"

#include "core/err.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

/* --- small parsers ------------------------------------------------------------ */

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* One inet_aton part: 0x hex, 0 octal, else decimal. false when malformed
 * or above max. */
static bool aton_part(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0)
        return false;
    unsigned base = 10;
    size_t i = 0;
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        i = 2;
        if (n == 2)
            return false; /* "0x" alone: no digits */
    } else if (s[0] == '0' && n > 1) {
        base = 8;
        i = 1;
    }
    uint64_t v = 0;
    for (; i < n; i++) {
        char c = lower(s[i]);
        unsigned d;
        if (is_digit(c))
            d = (unsigned)(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return false;
        if (d >= base)
            return false;
        v = v * base + d;
        if (v > max)
            return false;
    }
    *out = v;
    return true;
}

int tn_guard_parse_ipv4(const char *s, size_t len, struct in_addr *out)
{
    uint64_t parts[4];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.')
            continue;
        if (n == 4)
            return UV_EINVAL;
        /* every part but the last is one byte; the last fills the rest */
        uint64_t max = 0xffffffffu;
        if (!aton_part(s + start, i - start, max, &parts[n]))
            return UV_EINVAL;
        n++;
        start = i + 1;
    }
    uint32_t a = 0;
    for (size_t k = 0; k + 1 < n; k++) {
        if (parts[k] > 255)
            return UV_EINVAL;
        a |= (uint32_t)parts[k] << (24 - 8 * k);
    }
    uint64_t last = parts[n - 1];
    unsigned bits = (unsigned)(8 * (4 - (n - 1)));
    if (bits < 32 && last >> bits != 0)
        return UV_EINVAL;
    a |= (uint32_t)last;
    out->s_addr = htonl(a);
    return 0;
}

/* A decimal port 1..65535 in s[0..n). */
static bool parse_port(const char *s, size_t n, uint16_t *out)
{
    if (n == 0 || n > 5)
        return false;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *out = (uint16_t)v;
    return true;
}

/* A DNS name: labels of [a-z0-9-] (already lower case), 1..63 each. */
static bool dns_name(const char *s, size_t n)
{
    if (n == 0 || n > TN_GUARD_HOST_MAX)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0)
                return false;
            label = 0;
            continue;
        }
        if (!(is_digit(c) || (c >= 'a' && c <= 'z') || c == '-'))
            return false;
        if (++label > 63)
            return false;
    }
    return label > 0;
}

/* --- the refused set ------------------------------------------------------------ */

static bool refused4(uint32_t a) /* host order */
{
    uint32_t top = a >> 24;
    return top == 127 || top == 0 ||           /* loopback, unspecified / "this network" */
           (a & 0xffff0000u) == 0xa9fe0000u || /* 169.254/16 link-local (metadata too) */
           (a & 0xf0000000u) == 0xe0000000u || /* 224/4 multicast */
           a == 0xffffffffu ||                 /* broadcast */
           a == 0x646464c8u;                   /* 100.100.100.200 metadata */
}

/* The IPv4 address an IPv6 one carries (mapped, compatible, NAT64), into
 * *v4 (host order): true when it carries one. */
static bool embedded4(const uint8_t b[16], uint32_t *v4)
{
    static const uint8_t zero[12];
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (memcmp(b, mapped, 12) != 0 && memcmp(b, zero, 12) != 0 && memcmp(b, nat64, 12) != 0)
        return false;
    *v4 = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
    return true;
}

static bool refused6(const uint8_t b[16])
{
    static const uint8_t zero[16];
    static const uint8_t loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const uint8_t ec2[16] = {0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54};
    if (memcmp(b, zero, 16) == 0 || memcmp(b, loop, 16) == 0 || memcmp(b, ec2, 16) == 0)
        return true;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) /* fe80::/10 */
        return true;
    if (b[0] == 0xff) /* ff00::/8 */
        return true;
    uint32_t v4;
    return embedded4(b, &v4) && refused4(v4);
}

static bool cidr_holds(const tn_guard_cidr_t *c, int family, const uint8_t *bytes)
{
    if (c->family != family)
        return false;
    unsigned full = c->prefix / 8, rest = c->prefix % 8;
    if (memcmp(c->bytes, bytes, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (c->bytes[full] & mask) == (bytes[full] & mask);
}

static bool allowed(const tn_guard_t *g, int family, const uint8_t *bytes)
{
    for (size_t i = 0; i < g->nallow; i++)
        if (cidr_holds(&g->allow[i], family, bytes))
            return true;
    return false;
}

int tn_guard_check_addr(const tn_guard_t *g, const struct sockaddr *sa)
{
    if (sa == NULL)
        return UV_EACCES;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        uint8_t b[4];
        memcpy(b, &in->sin_addr.s_addr, 4);
        if (!refused4(ntohl(in->sin_addr.s_addr)) || allowed(g, AF_INET, b))
            return 0;
        return UV_EACCES;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        const uint8_t *b = in6->sin6_addr.s6_addr;
        if (!refused6(b) || allowed(g, AF_INET6, b))
            return 0;
        uint32_t v4;
        if (embedded4(b, &v4)) {
            uint8_t b4[4] = {(uint8_t)(v4 >> 24), (uint8_t)(v4 >> 16), (uint8_t)(v4 >> 8),
                             (uint8_t)v4};
            if (allowed(g, AF_INET, b4))
                return 0;
        }
        return UV_EACCES;
    }
    return UV_EACCES;
}

/* --- options ---------------------------------------------------------------------- */

/* Call fn on each comma-separated item of list, trimmed of spaces; an
 * empty item is an error. */
static int each_item(const char *list, const char *option, char *err, size_t errlen,
                     int (*fn)(tn_guard_t *g, const char *s, size_t n, const char *option,
                               char *err, size_t errlen),
                     tn_guard_t *g)
{
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        const char *s = p;
        while (n > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            n--;
        }
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (n == 0) {
            tn_errbuf(err, errlen, "%s: an empty item in \"%s\"", option, list);
            return UV_EINVAL;
        }
        int rc = fn(g, s, n, option, err, errlen);
        if (rc != 0)
            return rc;
        if (comma == NULL)
            return 0;
        p = comma + 1;
    }
}

static int add_port(tn_guard_t *g, const char *s, size_t n, const char *option, char *err,
                    size_t errlen)
{
    uint16_t port;
    if (!parse_port(s, n, &port)) {
        tn_errbuf(err, errlen, "%s: \"%.*s\" is not a port (1..65535)", option, (int)n, s);
        return UV_EINVAL;
    }
    if (g->nports == TN_GUARD_MAX_PORTS) {
        tn_errbuf(err, errlen, "%s: at most %d ports", option, TN_GUARD_MAX_PORTS);
        return UV_EINVAL;
    }
    g->ports[g->nports++] = port;
    return 0;
}

static int add_host(tn_guard_t *g, const char *s, size_t n, const char *option, char *err,
                    size_t errlen)
{
    char h[TN_GUARD_HOST_MAX + 2];
    if (n > TN_GUARD_HOST_MAX + 1) {
        tn_errbuf(err, errlen, "%s: a host name is at most %d bytes", option, TN_GUARD_HOST_MAX);
        return UV_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = lower(s[i]);
    if (n > 1 && h[n - 1] == '.')
        n--;
    h[n] = '\0';
    if (!dns_name(h, n)) {
        tn_errbuf(err, errlen, "%s: \"%.*s\" is not a DNS name", option, (int)n, s);
        return UV_EINVAL;
    }
    if (g->nhosts == TN_GUARD_MAX_HOSTS) {
        tn_errbuf(err, errlen, "%s: at most %d hosts", option, TN_GUARD_MAX_HOSTS);
        return UV_EINVAL;
    }
    memcpy(g->hosts[g->nhosts++], h, n + 1);
    return 0;
}

static int add_cidr(tn_guard_t *g, const char *s, size_t n, const char *option, char *err,
                    size_t errlen)
{
    char a[64];
    const char *slash = memchr(s, '/', n);
    size_t alen = slash != NULL ? (size_t)(slash - s) : n;
    tn_guard_cidr_t c;
    memset(&c, 0, sizeof(c));
    bool ok = alen > 0 && alen < sizeof(a);
    if (ok) {
        memcpy(a, s, alen);
        a[alen] = '\0';
        if (inet_pton(AF_INET, a, c.bytes) == 1)
            c.family = AF_INET;
        else if (inet_pton(AF_INET6, a, c.bytes) == 1)
            c.family = AF_INET6;
        else
            ok = false;
    }
    unsigned maxp = c.family == AF_INET ? 32 : 128;
    unsigned prefix = maxp;
    if (ok && slash != NULL) {
        size_t plen = n - alen - 1;
        prefix = 0;
        ok = plen > 0 && plen <= 3;
        for (size_t i = 0; ok && i < plen; i++) {
            ok = is_digit(slash[1 + i]);
            prefix = prefix * 10 + (unsigned)(slash[1 + i] - '0');
        }
        ok = ok && prefix <= maxp;
    }
    if (!ok) {
        tn_errbuf(err, errlen,
                  "%s: \"%.*s\" is not a CIDR (a.b.c.d/n with n 0..32, or an IPv6 address/n "
                  "with n 0..128)",
                  option, (int)n, s);
        return UV_EINVAL;
    }
    if (g->nallow == TN_GUARD_MAX_CIDRS) {
        tn_errbuf(err, errlen, "%s: at most %d CIDRs", option, TN_GUARD_MAX_CIDRS);
        return UV_EINVAL;
    }
    c.prefix = (uint8_t)prefix;
    g->allow[g->nallow++] = c;
    return 0;
}

int tn_guard_init(tn_guard_t *g, const char *ports, const char *hosts, const char *allow, char *err,
                  size_t errlen)
{
    memset(g, 0, sizeof(*g));
    if (ports == NULL || ports[0] == '\0')
        ports = TN_GUARD_DEFAULT_PORTS;
    int rc = each_item(ports, "remotes-allowed-ports", err, errlen, add_port, g);
    if (rc == 0 && hosts != NULL && hosts[0] != '\0')
        rc = each_item(hosts, "remotes-allowed-hosts", err, errlen, add_host, g);
    if (rc == 0 && allow != NULL && allow[0] != '\0')
        rc = each_item(allow, "remotes-allow-addresses", err, errlen, add_cidr, g);
    return rc;
}

/* --- URLs --------------------------------------------------------------------------- */

#define URL_FAIL(...)                                                                              \
    do {                                                                                           \
        tn_errbuf(err, errlen, __VA_ARGS__);                                                       \
        return UV_EINVAL;                                                                          \
    } while (0)

int tn_guard_parse_url(const char *url, size_t len, tn_guard_url_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (len == 0)
        URL_FAIL("the url is empty");
    if (len > TN_GUARD_URL_MAX)
        URL_FAIL("the url is longer than %d bytes", TN_GUARD_URL_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= 0x20 || (unsigned char)url[i] >= 0x7f)
            URL_FAIL("the url holds a space, a control or a non-ASCII byte");
    const char *colon = memchr(url, ':', len);
    if (colon == NULL || colon == url)
        URL_FAIL("the url has no scheme: it must start with https://");
    size_t slen = (size_t)(colon - url);
    if (slen != 5 || strncasecmp(url, "https", 5) != 0)
        URL_FAIL("the scheme must be https (\"%.*s\" given): remotes are reached over TLS only",
                 (int)TN_MIN(slen, (size_t)16), url);
    const char *p = colon + 1, *end = url + len;
    if (end - p < 2 || p[0] != '/' || p[1] != '/')
        URL_FAIL("the url must start with https://");
    p += 2;
    const char *aend = p;
    while (aend < end && *aend != '/' && *aend != '?' && *aend != '#')
        aend++;
    if (memchr(p, '@', (size_t)(aend - p)) != NULL)
        URL_FAIL("credentials in the url (user@host) are refused: give username and password "
                 "as fields");
    if (aend < end && (*aend == '?' || *aend == '#'))
        URL_FAIL("the url must not carry a query or a fragment");
    if (memchr(aend, '?', (size_t)(end - aend)) != NULL ||
        memchr(aend, '#', (size_t)(end - aend)) != NULL)
        URL_FAIL("the url must not carry a query or a fragment");
    /* host [:port] */
    const char *h = p, *hend, *portp = NULL;
    if (p < aend && *p == '[') {
        const char *rb = memchr(p, ']', (size_t)(aend - p));
        if (rb == NULL)
            URL_FAIL("an IPv6 host must be closed with ]");
        h = p + 1;
        hend = rb;
        if (rb + 1 < aend) {
            if (rb[1] != ':')
                URL_FAIL("unexpected bytes after the IPv6 host");
            portp = rb + 2;
        }
        char a[64];
        size_t n = (size_t)(hend - h);
        if (n == 0 || n >= sizeof(a) || memchr(h, '%', n) != NULL)
            URL_FAIL("the IPv6 host is not an address (zone ids are refused)");
        memcpy(a, h, n);
        a[n] = '\0';
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&out->addr;
        if (inet_pton(AF_INET6, a, &in6->sin6_addr) != 1)
            URL_FAIL("the IPv6 host is not an address");
        in6->sin6_family = AF_INET6;
        out->literal = true;
        for (size_t i = 0; i < n; i++)
            out->host[i] = lower(a[i]);
    } else {
        const char *c = memchr(p, ':', (size_t)(aend - p));
        hend = c != NULL ? c : aend;
        if (c != NULL)
            portp = c + 1;
        size_t n = (size_t)(hend - h);
        if (n == 0)
            URL_FAIL("the url has no host");
        if (n > TN_GUARD_HOST_MAX + 1)
            URL_FAIL("the host is longer than %d bytes", TN_GUARD_HOST_MAX);
        char host[TN_GUARD_HOST_MAX + 2];
        for (size_t i = 0; i < n; i++)
            host[i] = lower(h[i]);
        if (n > 1 && host[n - 1] == '.')
            n--; /* "example.com." is example.com */
        host[n] = '\0';
        if (memchr(host, '%', n) != NULL)
            URL_FAIL("the host must not be percent-encoded");
        const char *last = memrchr(host, '.', n);
        last = last != NULL ? last + 1 : host;
        if (is_digit(*last)) {
            struct sockaddr_in *in = (struct sockaddr_in *)&out->addr;
            if (tn_guard_parse_ipv4(host, n, &in->sin_addr) != 0)
                URL_FAIL("the host \"%s\" is neither a DNS name nor an IPv4 address", host);
            in->sin_family = AF_INET;
            out->literal = true;
            inet_ntop(AF_INET, &in->sin_addr, out->host, sizeof(out->host));
        } else {
            if (!dns_name(host, n))
                URL_FAIL("the host \"%s\" is not a DNS name ([a-z0-9-] labels of 1..63 bytes)",
                         host);
            memcpy(out->host, host, n + 1);
        }
    }
    out->port = 443;
    if (portp != NULL && !parse_port(portp, (size_t)(aend - portp), &out->port))
        URL_FAIL("the port must be 1..65535");
    if (out->addr.ss_family == AF_INET)
        ((struct sockaddr_in *)&out->addr)->sin_port = htons(out->port);
    else if (out->addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&out->addr)->sin6_port = htons(out->port);
    size_t plen = (size_t)(end - aend);
    if (plen > TN_GUARD_PATH_MAX)
        URL_FAIL("the path is longer than %d bytes", TN_GUARD_PATH_MAX);
    if (plen == 0)
        snprintf(out->path, sizeof(out->path), "/");
    else
        memcpy(out->path, aend, plen);
    return 0;
}

int tn_guard_check_url(const tn_guard_t *g, const tn_guard_url_t *u, char *err, size_t errlen)
{
    bool port_ok = false;
    for (size_t i = 0; i < g->nports && !port_ok; i++)
        port_ok = g->ports[i] == u->port;
    if (!port_ok) {
        char list[TN_GUARD_MAX_PORTS * 6 + 1] = "";
        size_t off = 0;
        for (size_t i = 0; i < g->nports; i++)
            off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%u", i > 0 ? "," : "",
                                    g->ports[i]);
        tn_errbuf(err, errlen, "port %u is not in remotes-allowed-ports (%s)", u->port, list);
        return UV_EACCES;
    }
    if (g->nhosts > 0) {
        bool host_ok = false;
        for (size_t i = 0; i < g->nhosts && !host_ok; i++)
            host_ok = strcmp(g->hosts[i], u->host) == 0;
        if (!host_ok) {
            tn_errbuf(err, errlen, "host %s is not in remotes-allowed-hosts", u->host);
            return UV_EACCES;
        }
    }
    if (u->literal && tn_guard_check_addr(g, (const struct sockaddr *)&u->addr) != 0) {
        tn_errbuf(err, errlen, "%s", TN_GUARD_REFUSED);
        return UV_EACCES;
    }
    return 0;
}
