/* Fuzz target: REMOTE_CHECK requests, results and replies
 * (cluster/rcheck.h). The input, read as a request's fields, decodes or is
 * refused with TN_EPROTO and a sentence; what decodes has a remote of
 * 1..64 bytes and a topic of at most 255, encodes back to exactly the
 * input, and passes the RPC server's shape check (which refuses exactly
 * what the decoder refuses). The same bytes as a 200 answer's body decode
 * to a result with a known class, a status of 0 or 100..599 and a detail
 * of at most 191 bytes that encodes back to the input, or are refused;
 * under each status a member may answer they decode to the status the
 * call reports, with a sentence for every refusal. */
#include "core/platform.h"

#include "cluster/rcheck.h"
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
    tn_wire_rcheck_t w;
    char err[256];
    err[0] = '\0';
    int rc = tn_wire_rcheck_decode(data, size, &w, err, sizeof(err));
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc != 0 && (err[0] == '\0' || memchr(err, 0, sizeof(err)) == NULL))
        abort(); /* every refusal says why */
    req[0] = TN_OP_REMOTE_CHECK;
    if (size > 0)
        memcpy(req + 1, data, size);
    int check = tn_wire_request_check(req, size + 1);
    if ((rc == 0) != (check == 0) || (check != 0 && check != TN_EPROTO))
        abort();
    if (rc == 0) {
        size_t rlen = strlen(w.remote), tlen = strlen(w.topic);
        if (rlen == 0 || rlen > 64 || tlen > 255)
            abort();
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_rcheck_encode(&b, w.remote, w.remote_id, w.topic) != 0 ||
            tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
    }
    free(req);
}

static void check_result(const uint8_t *data, size_t size)
{
    tn_rcheck_result_t res;
    int rc = tn_rcheck_result_decode(data, size, &res);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc != 0)
        return;
    if (res.cls >= TN_RCHECK_NCLASSES ||
        (res.status != 0 && (res.status < 100 || res.status > 599)) ||
        memchr(res.detail, 0, sizeof(res.detail)) == NULL)
        abort();
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_rcheck_result_encode(&b, &res) != 0 || tn_buf_size(&b) != size ||
        memcmp(tn_buf_data(&b), data, size) != 0)
        abort();
    tn_buf_fini(&b);
}

static void check_reply(const uint8_t *data, size_t size)
{
    static const uint16_t statuses[] = {200, 400, 404, 503, 500, 204};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        tn_rcheck_call_t c;
        memset(&c, 0, sizeof(c));
        int rc = tn_rcheck_reply_decode(statuses[i], data, size, &c);
        if (memchr(c.error, 0, sizeof(c.error)) == NULL || c.http_status != statuses[i])
            abort();
        switch (statuses[i]) {
        case 200:
            if (rc != 0 && rc != TN_EPROTO)
                abort();
            if (rc == 0 && c.error[0] != '\0')
                abort();
            break;
        case 400:
            if (rc != UV_EINVAL && rc != TN_EPROTO)
                abort();
            break;
        case 404:
            if (rc != TN_ENOTFOUND && rc != TN_EPROTO)
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
    check_result(data, size);
    check_reply(data, size);
    return 0;
}
