/* The service manager's readiness protocol (sd_notify), written here so
 * ternd needs no libsystemd: systemd passes a datagram socket's address in
 * NOTIFY_SOCKET, and the service sends it newline-separated `NAME=value`
 * assignments (READY=1, STATUS=..., STOPPING=1, MAINPID=...). A path
 * beginning with '/' is a socket in the file system; one beginning with '@'
 * is in the abstract namespace (the '@' stands for the leading NUL byte).
 *
 * With NOTIFY_SOCKET unset or empty every call is a no-op that succeeds:
 * ternd run by hand, or by a manager that does not listen, behaves the same.
 *
 * Calls block for at most TN_NOTIFY_SEND_TIMEOUT_MS (a full receive queue
 * at the manager); ternd sends a handful of messages in a lifetime, at its
 * state changes, so that bound is the most the loop thread can stall. Call
 * from one thread. */
#ifndef TN_CORE_NOTIFY_H
#define TN_CORE_NOTIFY_H

#include "core/platform.h"

#include <sys/un.h>

#define TN_NOTIFY_SEND_TIMEOUT_MS 1000

typedef struct {
    int fd;                  /* -1: off (no NOTIFY_SOCKET) */
    char where[112];         /* the address as given, for error messages */
    struct sockaddr_un addr; /* where datagrams go */
    uint32_t addrlen;        /* its length: an abstract name has no trailing NUL */
} tn_notify_t;

/* Set n up for the address in value (NOTIFY_SOCKET's; borrowed). NULL or
 * "" leaves n off and returns 0. Returns 0, TN_ECONFIG for an address that
 * is neither absolute nor abstract, or longer than a socket address holds
 * (with the reason in err), or a negative errno from socket(). On an error
 * n is off, so later calls are no-ops. */
int tn_notify_open(tn_notify_t *n, const char *value, char *err, size_t errlen);

/* Whether messages go anywhere. */
bool tn_notify_on(const tn_notify_t *n);

/* Send msg (borrowed; newline-separated assignments, no trailing newline
 * needed) as one datagram. 0 when sent or when n is off; a negative errno
 * otherwise (UV_EAGAIN: the manager's queue stayed full for the timeout). */
int tn_notify_send(tn_notify_t *n, const char *msg);

/* Formatted tn_notify_send; a message longer than 4 KiB is cut there. */
int tn_notify_sendf(tn_notify_t *n, const char *fmt, ...) TN_PRINTF(2, 3);

/* Close the socket; n is off afterwards. */
void tn_notify_close(tn_notify_t *n);

#endif
