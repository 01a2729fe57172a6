/* Fuzz target: HTTP/1.1 responses as the blocking client reads them
 * (proto/http/client.h). The first byte picks how the rest is split into
 * reads (1 to 256 bytes each) and whether the request was HEAD; responses
 * are parsed one after another while each completes, and the connection's
 * close ends the input. Checks: a feed never takes more than it was given
 * and takes all of it when it asks for more, the body is never longer than
 * the input, a refusal carries a reason, a complete answer has a status
 * from 100 to 599. The input is also parsed as a base URL (NUL-terminated
 * copy), whose parts must fit their buffers and be NUL-terminated. */
#include "core/platform.h"

#include "core/err.h"
#include "proto/http/client.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    size_t total;
} count_t;

static int count(void *ud, const char *p, size_t n)
{
    (void)p;
    ((count_t *)ud)->total += n;
    return 0;
}

static void check_url(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return;
    memcpy(s, data, size);
    s[size] = '\0';
    tn_hc_url_t u;
    char err[256];
    int rc = tn_hc_url_parse(s, &u, err, sizeof(err));
    if (rc == 0) {
        if (u.host[0] == '\0' || memchr(u.host, '\0', sizeof(u.host)) == NULL ||
            memchr(u.prefix, '\0', sizeof(u.prefix)) == NULL || atoi(u.port) < 1 ||
            atoi(u.port) > 65535)
            abort();
    } else if (rc != UV_EINVAL || err[0] == '\0') {
        abort();
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 1 << 20)
        return 0;
    check_url(data, size);
    size_t step = (size_t)(data[0] & 0x7f) * 2 + 1;
    bool head = (data[0] & 0x80) != 0;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1, off = 0;
    while (off < len) {
        tn_hc_parser_t p;
        count_t body = {0};
        tn_hc_parser_init(&p, head, count, &body);
        size_t start = off;
        int rc = TN_ESHORT;
        while (off < len && rc == TN_ESHORT) {
            size_t n = TN_MIN(step, len - off), used = 0;
            rc = tn_hc_parser_feed(&p, buf + off, n, &used);
            if (used > n || (rc == TN_ESHORT && used != n))
                abort();
            off += rc == 0 || rc == TN_ESHORT ? used : n; /* *used is unset on an error */
        }
        if (rc == TN_ESHORT)
            rc = tn_hc_parser_eof(&p);
        if (body.total > off - start)
            abort();
        if (rc == 0 && (p.status < 100 || p.status > 599))
            abort();
        if (rc == TN_EPROTO && p.errmsg[0] == '\0')
            abort();
        if (rc != 0 && rc != TN_EPROTO)
            abort();
        tn_hc_parser_fini(&p);
        if (rc != 0 || off == start)
            break;
    }
    return 0;
}
