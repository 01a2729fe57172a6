/* Socket addresses. See addr.h. */
#include "core/platform.h"

#include "proto/addr.h"

#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tn_addr_parse(const char *addr, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    const char *colon = strrchr(addr, ':');
    if (colon == NULL)
        return UV_EINVAL;
    char host[256];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof(host))
        return UV_EINVAL;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535 || end == colon + 1)
        return UV_EINVAL;
    if (hl == 0)
        snprintf(host, sizeof(host), "0.0.0.0");
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        return uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)ss);
    }
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss);
}

int tn_addr_listen(uv_tcp_t *tcp, const struct sockaddr_storage *ss, uv_connection_cb cb,
                   const char *addr, char *err, size_t errlen)
{
    int rc = uv_tcp_bind(tcp, (const struct sockaddr *)ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)tcp, 511, cb);
    if (rc != 0)
        tn_errbuf(err, errlen, "cannot listen on %s: %s", addr, uv_strerror(rc));
    return rc;
}

static int port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    return 0;
}

void tn_addr_peer(const uv_tcp_t *tcp, char *out, size_t len)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    snprintf(out, len, "?");
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sl) != 0)
        return;
    char host[48] = "";
    if (ss.ss_family == AF_INET)
        uv_ip4_name((const struct sockaddr_in *)&ss, host, sizeof(host));
    else if (ss.ss_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)&ss, host, sizeof(host));
    snprintf(out, len, "%s:%d", host, port_of(&ss));
}

void tn_addr_peer_ip(const char *peer, char *out, size_t len)
{
    snprintf(out, len, "%s", peer);
    char *colon = strrchr(out, ':');
    if (colon != NULL)
        *colon = '\0';
}

int tn_addr_local_port(const uv_tcp_t *tcp)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    return port_of(&ss);
}
