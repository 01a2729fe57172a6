/* Fuzz target: SETTLE requests and replies (cluster/wire.h). The input,
 * read as a request's fields, decodes or is refused with TN_EPROTO; what
 * decodes has 1..TN_SETTLE_MAX handles, a known how and a visibility of
 * at least 0, encodes back to exactly the input, and passes the RPC
 * server's shape check (which refuses exactly what the decoder refuses).
 * The same bytes as a reply body decode for at most one handle count (the
 * one they name), with statuses SETTLE answers (204, 410, 421, 500, 503),
 * and what decodes encodes back the same. */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const uint8_t *data, size_t size)
{
    tn_wire_settle_t *w = malloc(sizeof(*w));
    if (w == NULL)
        abort();
    char err[256];
    int rc = tn_wire_settle_decode(data, size, w, err, sizeof(err));
    fuzz_check_request(TN_OP_SETTLE, data, size, rc, err, sizeof(err));
    if (rc == 0) {
        if (w->count == 0 || w->count > TN_SETTLE_MAX || w->how < TN_WIRE_SETTLE_ACK ||
            w->how > TN_WIRE_SETTLE_NACK || w->visibility_ms < 0 || w->topic[0] == '\0' ||
            w->channel[0] == '\0')
            abort();
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_settle_encode(&b, w->topic, w->channel, w->how, w->visibility_ms, w->h,
                                  w->count) != 0 ||
            tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
    }
    free(w);
}

static void check_reply(const uint8_t *data, size_t size)
{
    uint16_t st[TN_SETTLE_MAX];
    uint32_t decoded = 0;
    for (uint32_t n = 0; n <= TN_SETTLE_MAX; n++) {
        int rc = tn_wire_settle_reply_decode(data, size, n, st);
        if (rc != 0 && rc != TN_EPROTO)
            abort();
        if (rc != 0)
            continue;
        if (++decoded > 1 || size != 4 + 2 * (size_t)n)
            abort();
        for (uint32_t i = 0; i < n; i++)
            if (st[i] != 204 && st[i] != 410 && st[i] != 421 && st[i] != 500 && st[i] != 503)
                abort();
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_settle_reply_encode(&b, st, n) != 0 || tn_buf_size(&b) != size ||
            memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
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
