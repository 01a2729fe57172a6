/* Socket addresses. See addr.h. */
#include "core/platform.h"

#include "proto/addr.h"

#include "core/err.h"
#include "core/fdroom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tn_addr_listen(uv_tcp_t *tcp, const tn_netaddr_t *addr, uv_connection_cb cb, char *err,
                   size_t errlen)
{
    int rc = uv_tcp_bind(tcp, (const struct sockaddr *)&addr->sa, 0);
    if (rc == UV_EAFNOSUPPORT && addr->any && addr->sa.ss_family == AF_INET6) {
        /* No IPv6 here: every interface is what IPv4 has (the handle has
         * no socket yet, so it binds afresh). */
        struct sockaddr_in sin;
        uv_ip4_addr("0.0.0.0", tn_netaddr_port(&addr->sa), &sin);
        rc = uv_tcp_bind(tcp, (const struct sockaddr *)&sin, 0);
    }
    /* A port in use shows here: libuv reports bind's EADDRINUSE at listen. */
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)tcp, 511, cb);
    if (rc != 0 && addr->option != NULL)
        tn_errbuf(err, errlen, "cannot listen on %s (%s): %s", addr->name, addr->option,
                  uv_strerror(rc));
    else if (rc != 0)
        tn_errbuf(err, errlen, "cannot listen on %s: %s", addr->name, uv_strerror(rc));
    return rc;
}

void tn_addr_peer(const uv_tcp_t *tcp, char *out, size_t len)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    snprintf(out, len, "?");
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sl) != 0)
        return;
    char host[48] = "";
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((const struct sockaddr_in *)&ss, host, sizeof(host));
    } else if (ss.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
        /* An IPv4 client of a listener on every interface (one IPv6
         * socket): named as IPv4, as nsqd's Go names it. */
        const uint8_t *b = sin6->sin6_addr.s6_addr + 12;
        snprintf(host, sizeof(host), "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name(sin6, host, sizeof(host));
    }
    snprintf(out, len, "%s:%d", host, tn_netaddr_port(&ss));
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
    return tn_netaddr_port(&ss);
}

bool tn_addr_fd_room(const uv_tcp_t *tcp)
{
    uv_os_fd_t fd;
    return uv_fileno((const uv_handle_t *)tcp, &fd) != 0 || tn_fd_room_at(fd, TN_FD_CONNS);
}
