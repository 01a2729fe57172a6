/* The sd_notify datagram protocol: see notify.h. The manager learns who
 * sent a message from the kernel (SCM_CREDENTIALS on its socket), so a
 * message is just the assignments as one datagram on an unconnected
 * SOCK_DGRAM Unix socket, sent with sendto to NOTIFY_SOCKET's address. */
#include "core/platform.h"

#include "core/err.h"
#include "core/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static void set_off(tn_notify_t *n)
{
    n->fd = -1;
    n->addrlen = 0;
}

int tn_notify_open(tn_notify_t *n, const char *value, char *err, size_t errlen)
{
    memset(n, 0, sizeof(*n));
    set_off(n);
    if (value == NULL || value[0] == '\0')
        return 0;
    snprintf(n->where, sizeof(n->where), "%s", value);
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    size_t len = strlen(value);
    if (value[0] != '/' && value[0] != '@') {
        /* Newer managers also name vsock: addresses; tern runs on the host. */
        tn_errbuf(err, errlen,
                  "NOTIFY_SOCKET=%s: not a socket path (/...) or an abstract name (@...)", value);
        return TN_ECONFIG;
    }
    /* A path needs room for its NUL; an abstract name has none, its '@'
     * becomes the leading NUL byte. */
    if ((value[0] == '/' && len >= sizeof(sun.sun_path)) ||
        (value[0] == '@' && len > sizeof(sun.sun_path))) {
        tn_errbuf(err, errlen, "NOTIFY_SOCKET is %zu bytes, more than a socket address holds (%zu)",
                  len, sizeof(sun.sun_path) - 1);
        return TN_ECONFIG;
    }
    memcpy(sun.sun_path, value, len);
    if (value[0] == '@')
        sun.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int rc = tn_err_from_errno(errno);
        tn_errbuf(err, errlen, "NOTIFY_SOCKET=%s: socket: %s", value, tn_strerror(rc));
        return rc;
    }
    struct timeval tv = {TN_NOTIFY_SEND_TIMEOUT_MS / 1000,
                         (TN_NOTIFY_SEND_TIMEOUT_MS % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    n->addr = sun;
    /* An abstract name is exactly its bytes: no trailing NULs. */
    n->addrlen = (uint32_t)(offsetof(struct sockaddr_un, sun_path) + len + (value[0] == '/'));
    n->fd = fd;
    return 0;
}

bool tn_notify_on(const tn_notify_t *n)
{
    return n->fd >= 0;
}

int tn_notify_send(tn_notify_t *n, const char *msg)
{
    if (n->fd < 0)
        return 0;
    ssize_t w;
    do {
        w = sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL, (const struct sockaddr *)&n->addr,
                   (socklen_t)n->addrlen);
    } while (w < 0 && errno == EINTR);
    if (w < 0)
        return tn_err_from_errno(errno == EWOULDBLOCK ? EAGAIN : errno);
    return 0;
}

int tn_notify_sendf(tn_notify_t *n, const char *fmt, ...)
{
    if (n->fd < 0)
        return 0;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (len < 0)
        return UV_EINVAL;
    return tn_notify_send(n, msg);
}

void tn_notify_close(tn_notify_t *n)
{
    if (n->fd >= 0)
        close(n->fd);
    set_off(n);
}
