/* Fuzz target: SETTLE_REPL requests (cluster/wire.h), the channel-state
 * replication a follower decodes from its partition's leader. The input,
 * read as a request's fields, decodes or is refused with TN_EPROTO and a
 * sentence; what decodes has names, an epoch and a first sequence number
 * of at least 1, 1..TN_SETREPL_MAX records of known ops, encodes back to
 * exactly the input, and passes the RPC server's shape check (which
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
    if (size > 64 * 1024)
        return 0;
    tn_wire_setrepl_t *w = malloc(sizeof(*w));
    if (w == NULL)
        abort();
    char err[256];
    int rc = tn_wire_setrepl_decode(data, size, w, err, sizeof(err));
    fuzz_check_request(TN_OP_SETTLE_REPL, data, size, rc, err, sizeof(err));
    if (rc == 0) {
        if (w->count == 0 || w->count > TN_SETREPL_MAX || w->leader_epoch == 0 ||
            w->first_seq == 0 || w->first_seq > UINT64_MAX - w->count || w->topic[0] == '\0' ||
            w->channel[0] == '\0')
            abort();
        tn_walrec_t *recs = malloc(w->count * sizeof(*recs));
        if (recs == NULL)
            abort();
        for (uint32_t i = 0; i < w->count; i++) {
            tn_wire_setrepl_rec(w, i, &recs[i]);
            if (recs[i].op < TN_WAL_FIN || recs[i].op > TN_SETREPL_OP_MAX)
                abort();
        }
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_wire_setrepl_encode(&b, w->topic, w->partition, w->leader_epoch, w->channel,
                                   w->stream, w->first_seq, w->base_frontier, recs, w->count,
                                   w->chan_stamp, w->incarnation) != 0 ||
            tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort();
        tn_buf_fini(&b);
        free(recs);
    }
    free(w);
    return 0;
}
