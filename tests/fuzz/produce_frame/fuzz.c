/* Fuzz target: PRODUCE requests, replies and PRODUCER control bodies
 * (cluster/wire.h, cluster/produce.h). The input, read as a request's
 * fields, decodes or is refused with TN_EPROTO or TN_ETOOBIG; what
 * decodes hands out exactly count records that the encoder writes back
 * to the same bytes (when their values are ones it takes) and that pass
 * the RPC server's shape check, and the check refuses what does not
 * decode. The same bytes as a reply body of each status PRODUCE answers
 * decode to that status's code or TN_EPROTO, and as a control body decode
 * only when they are one, re-encoding the same. The window's scan of the
 * bytes as a log tail never notes more than it could hold. */
#include "core/platform.h"

#include "cluster/produce.h"
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
    tn_wire_produce_t w;
    char err[256];
    int rc = tn_wire_produce_decode(data, size, FUZZ_MAX_BODY, &w, err, sizeof(err));
    if (rc != 0 && rc != TN_EPROTO && rc != TN_ETOOBIG)
        abort();
    if (rc != 0 && memchr(err, 0, sizeof(err)) == NULL)
        abort();
    tn_wire_produce_t wide;
    int wrc = tn_wire_produce_decode(data, size, UINT32_MAX, &wide, NULL, 0);
    if (rc == 0 && wrc != 0)
        abort();
    int crc = fuzz_request_check(TN_OP_PRODUCE, data, size);
    if ((wrc == 0) != (crc == 0))
        abort();
    if (wrc != 0)
        return;
    tn_commit_rec_t *recs = calloc(wide.count, sizeof(*recs));
    if (recs == NULL)
        abort();
    bool encodable = wide.count <= FUZZ_MAX_RECS;
    size_t sum = tn_produce_head_size(strlen(wide.h.topic));
    uint32_t n = 0;
    tn_commit_rec_t r;
    while (tn_wire_produce_next(&wide, &r)) {
        if (r.key.len > TN_COMMIT_KEY_MAX)
            abort();
        if (r.deliver_at_ms < 0 || r.created_ms < 0)
            encodable = false;
        sum += tn_commit_rec_size(r.key.len, r.body.len);
        recs[n++] = r;
    }
    if (n != wide.count || tn_wire_produce_next(&wide, &r))
        abort(); /* exactly count records */
    if (sum != size + 1)
        abort(); /* the size functions count the opcode byte too */
    if (encodable) {
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_produce_encode(&b, &wide.h, recs, n) != 0 || tn_buf_size(&b) != size ||
            memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
    }
    free(recs);
}

static void check_replies(const uint8_t *data, size_t size)
{
    static const struct {
        uint16_t status;
        int code, alt;
    } answers[] = {{200, 0, 0},
                   {421, TN_EREMOTE, TN_EREMOTE},
                   {409, TN_EFENCED, TN_EFENCED},
                   {503, UV_EAGAIN, TN_EFEWREPLICAS},
                   {404, TN_ENOTFOUND, TN_ENOTFOUND},
                   {416, UV_ERANGE, UV_ERANGE},
                   {507, TN_EDISKHIGH, TN_EDISKHIGH},
                   {400, UV_EINVAL, UV_EINVAL},
                   {500, TN_EPROTO, TN_EPROTO}};
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        tn_produce_call_t c;
        memset(&c, 0, sizeof(c));
        int rc = tn_produce_reply_decode(answers[i].status, data, size, &c);
        if (rc != answers[i].code && rc != answers[i].alt && rc != TN_EPROTO)
            abort();
        if (c.http_status != answers[i].status || memchr(c.error, 0, sizeof(c.error)) == NULL)
            abort();
        if (answers[i].status != 421 && c.leader != 0)
            abort();
    }
}

static void check_ctl(const uint8_t *data, size_t size)
{
    uint64_t node, seq;
    uint32_t count;
    if (tn_produce_ctl_decode(data, size, &node, &seq, &count) != 0)
        return;
    uint8_t again[TN_PRODUCE_CTL_LEN];
    tn_produce_ctl_encode(again, node, seq, count);
    if (size != TN_PRODUCE_CTL_LEN || memcmp(again, data, size) != 0)
        abort();
}

static void check_scan(const uint8_t *data, size_t size)
{
    tn_produce_window_t *w;
    if (tn_produce_window_new(8, &w) != 0)
        abort();
    int n = tn_produce_window_scan(w, data, size);
    if (n < 0 || (size_t)n > size / TN_PRODUCE_CTL_LEN)
        abort();
    if (tn_produce_window_size(w) > (size_t)n)
        abort();
    tn_produce_window_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    check_request(data, size);
    check_replies(data, size);
    check_ctl(data, size);
    check_scan(data, size);
    return 0;
}
