/* Fuzz target: CHAN_SNAP requests (cluster/wire.h), the channel state a
 * follower installs from its partition's leader before it may rejoin the
 * ISR. The input, read as a request's fields, decodes or is refused with
 * TN_EPROTO and a sentence; what decodes has names, an epoch of at least
 * 1 and a state the cursor rules accept (settled offsets ascending above
 * the frontier, requeued entries ascending at or above it), encodes back
 * to exactly the input, and passes the RPC server's shape check (which
 * refuses exactly what the decoder refuses). */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 256 * 1024)
        return 0;
    tn_wire_chansnap_t *w = malloc(sizeof(*w));
    if (w == NULL)
        abort();
    char err[256];
    int rc = tn_wire_chansnap_decode(data, size, w, err, sizeof(err));
    fuzz_check_request(TN_OP_CHAN_SNAP, data, size, rc, err, sizeof(err));
    if (rc != 0 && (w->state.nsettled != 0 || w->state.nrequeued != 0))
        abort(); /* a refused state holds nothing */
    if (rc == 0) {
        const tn_cursor_t *c = &w->state;
        if (w->leader_epoch == 0 || w->topic[0] == '\0' || w->channel[0] == '\0')
            abort();
        for (uint32_t i = 0; i < c->nsettled; i++)
            if (c->settled[i] <= c->frontier || (i > 0 && c->settled[i] <= c->settled[i - 1]))
                abort();
        for (uint32_t i = 0; i < c->nrequeued; i++)
            if (c->requeued[i].offset < c->frontier ||
                (i > 0 && c->requeued[i].offset <= c->requeued[i - 1].offset))
                abort();
        /* The image carries its own seq, which the request ignores: the
         * re-encoding must match byte for byte with that one kept. */
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_chansnap_encode(&b, w->topic, w->partition, w->leader_epoch, w->channel,
                                    w->stream, w->seq, w->incarnation, c, w->chan_stamp) != 0 ||
            tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
    }
    tn_cursor_fini(&w->state);
    free(w);
    return 0;
}
