/* Fuzz target: PURGE requests and replies (cluster/wire.h,
 * cluster/purge.h). The input, read as a request's fields, decodes or is
 * refused with TN_EPROTO and a sentence; what decodes has a topic of 1..255
 * bytes and a creation time of at least 0, encodes back to exactly the
 * input, and passes the RPC server's shape check (which refuses exactly
 * what the decoder refuses). The same bytes as a reply body, under each
 * status a member may answer, decode to the status the call reports, with
 * a sentence for every refusal. */
#include "core/platform.h"

#include "cluster/purge.h"
#include "cluster/wire.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const uint8_t *data, size_t size)
{
    uint8_t *req = malloc(size + 1);
    if (req == NULL)
        abort();
    tn_wire_purge_t w;
    char err[256];
    err[0] = '\0';
    int rc = tn_wire_purge_decode(data, size, &w, err, sizeof(err));
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc != 0 && (err[0] == '\0' || memchr(err, 0, sizeof(err)) == NULL))
        abort(); /* every refusal says why */
    req[0] = TN_OP_PURGE;
    if (size > 0)
        memcpy(req + 1, data, size);
    int check = tn_wire_request_check(req, size + 1);
    if ((rc == 0) != (check == 0) || (check != 0 && check != TN_EPROTO))
        abort();
    if (rc == 0) {
        size_t tlen = strlen(w.topic);
        if (tlen == 0 || tlen > 255 || w.created_at_ms < 0)
            abort();
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_purge_encode(&b, w.topic, w.created_at_ms) != 0 || tn_buf_size(&b) != size ||
            memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
    }
    free(req);
}

static void check_reply(const uint8_t *data, size_t size)
{
    static const uint16_t statuses[] = {204, 400, 500, 503, 200, 421};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        tn_purge_call_t c;
        memset(&c, 0, sizeof(c));
        int rc = tn_purge_reply_decode(statuses[i], data, size, &c);
        if (memchr(c.error, 0, sizeof(c.error)) == NULL || c.http_status != statuses[i])
            abort();
        switch (statuses[i]) {
        case 204:
            if (rc != 0 || c.error[0] != '\0')
                abort(); /* a 204 carries nothing to judge */
            break;
        case 400:
            if (rc != UV_EINVAL && rc != TN_EPROTO)
                abort();
            break;
        case 500:
            if (rc != UV_EIO && rc != TN_EPROTO)
                abort();
            break;
        case 503:
            if (rc != UV_EAGAIN && rc != TN_EPROTO)
                abort();
            break;
        default:
            if (rc != TN_EPROTO)
                abort(); /* not an answer a member gives */
            break;
        }
        if (rc != 0 && c.error[0] == '\0')
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64 * 1024)
        return 0;
    check_request(data, size);
    check_reply(data, size);
    return 0;
}
