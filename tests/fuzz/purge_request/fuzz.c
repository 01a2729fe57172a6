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
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const uint8_t *data, size_t size)
{
    tn_wire_purge_t w;
    char err[256];
    err[0] = '\0';
    int rc = tn_wire_purge_decode(data, size, &w, err, sizeof(err));
    fuzz_check_request(TN_OP_PURGE, data, size, rc, err, sizeof(err));
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
}

static void check_reply(const uint8_t *data, size_t size)
{
    /* 204 carries nothing to judge; 200 and 421 are not answers a member
     * gives. */
    static const fuzz_reply_rule_t rules[] = {
        {204, 0, true},          {400, UV_EINVAL, false}, {500, UV_EIO, false},
        {503, UV_EAGAIN, false}, {200, TN_EPROTO, true},  {421, TN_EPROTO, true},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(rules); i++) {
        tn_purge_call_t c;
        memset(&c, 0, sizeof(c));
        int rc = tn_purge_reply_decode(rules[i].status, data, size, &c);
        fuzz_check_reply(&rules[i], rc, c.http_status, c.error, sizeof(c.error));
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
