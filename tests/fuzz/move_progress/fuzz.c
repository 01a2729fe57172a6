/* Fuzz target: MOVE_PROGRESS requests and replies (cluster/wire.h,
 * cluster/moveprog.h). The input, read as a request's fields, decodes or
 * is refused with TN_EPROTO and a sentence; what decodes has a topic of
 * 1..255 bytes, encodes back to exactly the input, and passes the RPC
 * server's shape check (which refuses exactly what the decoder refuses).
 * The same bytes as a 200 reply body decode or are refused with
 * TN_EPROTO; what decodes has no unknown bit and no field set without its
 * bit, and encodes back to exactly the input. */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const uint8_t *data, size_t size)
{
    tn_wire_moveprog_t w;
    char err[256];
    err[0] = '\0';
    int rc = tn_wire_moveprog_decode(data, size, &w, err, sizeof(err));
    fuzz_check_request(TN_OP_MOVE_PROGRESS, data, size, rc, err, sizeof(err));
    if (rc == 0) {
        size_t tlen = strlen(w.topic);
        if (tlen == 0 || tlen > 255)
            abort();
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_moveprog_encode(&b, w.topic, w.partition) != 0 || tn_buf_size(&b) != size ||
            memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
    }
}

static void check_reply(const uint8_t *data, size_t size)
{
    tn_wire_moveprog_reply_t r;
    int rc = tn_wire_moveprog_reply_decode(data, size, &r);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc != 0)
        return;
    if (size != TN_WIRE_MOVEPROG_REPLY ||
        (r.known & ~(TN_WIRE_MOVEPROG_BYTES | TN_WIRE_MOVEPROG_LAG)) != 0 ||
        ((r.known & TN_WIRE_MOVEPROG_BYTES) == 0 && (r.bytes_copied | r.bytes_total) != 0) ||
        ((r.known & TN_WIRE_MOVEPROG_LAG) == 0 && r.lag_records != 0))
        abort();
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_moveprog_reply_encode(&b, &r) != 0 || tn_buf_size(&b) != size ||
        memcmp(tn_buf_data(&b), data, size) != 0)
        abort();
    tn_buf_fini(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    check_request(data, size);
    check_reply(data, size);
    return 0;
}
