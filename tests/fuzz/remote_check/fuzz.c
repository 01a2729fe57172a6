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
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const uint8_t *data, size_t size)
{
    tn_wire_rcheck_t w;
    char err[256];
    err[0] = '\0';
    int rc = tn_wire_rcheck_decode(data, size, &w, err, sizeof(err));
    fuzz_check_request(TN_OP_REMOTE_CHECK, data, size, rc, err, sizeof(err));
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
    /* 500 and 204 are not answers a member gives. */
    static const fuzz_reply_rule_t rules[] = {
        {200, 0, false},         {400, UV_EINVAL, false}, {404, TN_ENOTFOUND, false},
        {503, UV_EAGAIN, false}, {500, TN_EPROTO, true},  {204, TN_EPROTO, true},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(rules); i++) {
        tn_rcheck_call_t c;
        memset(&c, 0, sizeof(c));
        int rc = tn_rcheck_reply_decode(rules[i].status, data, size, &c);
        fuzz_check_reply(&rules[i], rc, c.http_status, c.error, sizeof(c.error));
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
