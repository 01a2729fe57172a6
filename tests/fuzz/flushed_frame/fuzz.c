/* Fuzz target: FLUSHED reports (a follower's flush report to its leader,
 * cluster/fetch.h). The input, read as a report's fields, decodes or is
 * refused with TN_EPROTO; what decodes yields exactly count partitions with
 * non-empty topics, encodes back to the same bytes, and passes the RPC
 * server's shape check (which refuses exactly what the decoder refuses):
 * the checks in fetch_parts.h, shared with fetch_frame. */
#include "core/platform.h"

#include "cluster/fetch.h"
#include "cluster/wire.h"
#include "fetch_parts.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int next_part(void *r, tn_fetch_part_t *p)
{
    return tn_flushed_req_next(r, p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    tn_flushed_req_t r;
    int rc = tn_flushed_req_decode(data, size, &r);
    fuzz_check_shape(TN_OP_FLUSHED, data, size, rc);
    if (rc != 0)
        return 0;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_flushed_req_put_head(&b, r.node, r.incarnation, r.count) != 0)
        abort();
    fuzz_parts_check_encode(&b, r.count, next_part, &r, data, size);
    return 0;
}
