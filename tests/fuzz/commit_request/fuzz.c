/* Fuzz target: COMMIT requests and replies (cluster/wire.h,
 * cluster/dataplane.h). The input, read as a request's fields, decodes or
 * is refused with TN_EPROTO or TN_ETOOBIG; what decodes hands out exactly
 * count records that, written again field by field, give the same bytes,
 * whose sizes add up to the input's, and which pass the RPC server's shape
 * check; the encoder writes them back the same when their values are
 * ones it takes. The same bytes as a reply body of each status COMMIT
 * answers decode to that status's code or to TN_EPROTO. */
#include "core/platform.h"

#include "cluster/dataplane.h"
#include "cluster/wire.h"
#include "core/err.h"
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_BODY 1024
#define FUZZ_MAX_RECS 4096

static void check_request(const uint8_t *data, size_t size)
{
    tn_wire_commit_t c;
    char err[256];
    int rc = tn_wire_commit_decode(data, size, FUZZ_MAX_BODY, &c, err, sizeof(err));
    if (rc != 0 && rc != TN_EPROTO && rc != TN_ETOOBIG)
        abort();
    tn_wire_commit_t wide;
    int wrc = tn_wire_commit_decode(data, size, UINT32_MAX, &wide, NULL, 0);
    if (rc == 0 && wrc != 0)
        abort(); /* a higher limit never refuses more */
    /* (TN_ETOOBIG is the first refusal met, in order: bytes after that
     * body may still be malformed.) */
    /* The RPC server's shape check: the opcode, then these fields. */
    int crc = fuzz_request_check(TN_OP_COMMIT, data, size);
    if ((wrc == 0) != (crc == 0))
        abort();
    if (wrc != 0)
        return;

    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_put_str(&b, wide.topic) != 0 || tn_wire_put_u32(&b, wide.partition) != 0 ||
        tn_wire_put_u32(&b, wide.count) != 0)
        abort();
    size_t sum = tn_commit_head_size(wide.topic_len);
    tn_commit_rec_t *recs = calloc(wide.count > 0 ? wide.count : 1, sizeof(*recs));
    if (recs == NULL)
        abort();
    bool encodable = wide.topic_len > 0 && wide.count > 0 && wide.count <= FUZZ_MAX_RECS;
    uint32_t n = 0;
    tn_commit_rec_t r;
    while (tn_wire_commit_next(&wide, &r)) {
        if (r.key.len > TN_COMMIT_KEY_MAX || tn_wire_put_bytes(&b, r.key.base, r.key.len) != 0 ||
            tn_wire_put_bytes(&b, r.body.base, r.body.len) != 0 ||
            tn_wire_put_i64(&b, r.deliver_at_ms) != 0 || tn_wire_put_i64(&b, r.created_ms) != 0)
            abort();
        sum += tn_commit_rec_size(r.key.len, r.body.len);
        if (r.deliver_at_ms < 0 || r.created_ms < 0)
            encodable = false;
        recs[n++] = r;
    }
    if (n != wide.count || tn_wire_commit_next(&wide, &r))
        abort(); /* exactly count records */
    if (tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
        abort(); /* what decodes writes back the same */
    if (sum != size + 1)
        abort(); /* the size functions count the opcode byte too */
    if (encodable) {
        if (tn_commit_encoded_size(wide.topic, recs, n) != size + 1)
            abort();
        tn_buf_reset(&b);
        if (tn_wire_commit_encode(&b, wide.topic, wide.partition, recs, n) != 0 ||
            tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
    }
    free(recs);
    tn_buf_fini(&b);
}

static void check_replies(const uint8_t *data, size_t size)
{
    static const struct {
        uint16_t status;
        int code;
    } answers[] = {{200, 0},         {421, TN_EREMOTE},   {404, TN_ENOTFOUND},
                   {416, UV_ERANGE}, {507, TN_EDISKHIGH}, {503, UV_EAGAIN},
                   {400, UV_EINVAL}, {500, TN_EPROTO}};
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        tn_commit_call_t c;
        memset(&c, 0, sizeof(c));
        int rc = tn_commit_reply_decode(answers[i].status, data, size, &c);
        if (rc != answers[i].code && rc != TN_EPROTO)
            abort();
        if (c.http_status != answers[i].status || memchr(c.error, 0, sizeof(c.error)) == NULL)
            abort();
        if (answers[i].status != 421 && c.owner != 0)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    check_request(data, size);
    check_replies(data, size);
    return 0;
}
