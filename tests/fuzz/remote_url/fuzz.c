/* Fuzz target: the remotes address guard's URL and address parsers
 * (proto/http/guard.h). A URL parses or is refused with a reason; what
 * parses has a valid DNS name or an address literal, a port 1..65535 and a
 * path starting with '/', and the guard's check answers 0 or UV_EACCES
 * with a message. An IPv4 spelling tern reads as an address, glibc's
 * inet_aton reads as the same address. The option lists parse or are
 * refused with a message. */
#include "core/platform.h"

#include "proto/http/guard.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    static tn_guard_t def, allow;
    static bool made;
    char err[300];
    if (!made) {
        if (tn_guard_init(&def, NULL, NULL, NULL, err, sizeof(err)) != 0 ||
            tn_guard_init(&allow, "443,4443,8443", "eu.example.com", "127.0.0.0/8,::1,fe80::/10",
                          err, sizeof(err)) != 0)
            abort();
        made = true;
    }
    const char *s = (const char *)data;
    tn_guard_url_t u;
    err[0] = '\0';
    int rc = tn_guard_parse_url(s, size, &u, err, sizeof(err));
    if (rc != 0) {
        if (rc != UV_EINVAL || err[0] == '\0')
            abort();
    } else {
        if (u.host[0] == '\0' || u.port == 0 || u.path[0] != '/')
            abort();
        if (u.literal && u.addr.ss_family != AF_INET && u.addr.ss_family != AF_INET6)
            abort();
        for (int k = 0; k < 2; k++) {
            err[0] = '\0';
            int c = tn_guard_check_url(k == 0 ? &def : &allow, &u, err, sizeof(err));
            if (c != 0 && (c != UV_EACCES || err[0] == '\0'))
                abort();
        }
    }
    /* The IPv4 reader against inet_aton (which also takes trailing junk
     * after a space, and "0x" alone: only one direction is checked). */
    char buf[64];
    if (size < sizeof(buf) && memchr(s, '\0', size) == NULL) {
        memcpy(buf, s, size);
        buf[size] = '\0';
        struct in_addr mine, theirs;
        if (tn_guard_parse_ipv4(s, size, &mine) == 0 &&
            (inet_aton(buf, &theirs) == 0 || theirs.s_addr != mine.s_addr))
            abort();
    }
    /* The options (one NUL-terminated copy). */
    char *opt = malloc(size + 1);
    if (opt == NULL)
        return 0;
    memcpy(opt, s, size);
    opt[size] = '\0';
    tn_guard_t g;
    for (int k = 0; k < 3; k++) {
        err[0] = '\0';
        rc = tn_guard_init(&g, k == 0 ? opt : NULL, k == 1 ? opt : NULL, k == 2 ? opt : NULL, err,
                           sizeof(err));
        if (rc != 0 && (rc != UV_EINVAL || err[0] == '\0'))
            abort();
    }
    free(opt);
    return 0;
}
