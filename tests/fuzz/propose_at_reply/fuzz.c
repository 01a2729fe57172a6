/* Fuzz target: META_PROPOSE_AT's 200 reply body (cluster/wire.h), which a
 * follower decodes from the metastore leader. The input decodes or is
 * refused with TN_EPROTO (both outputs then 0); what decodes is exactly
 * TN_WIRE_PROPOSE_AT_REPLY bytes and encodes back to exactly the input. */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    int32_t status = 1;
    uint64_t index = 1;
    int rc = tn_wire_propose_at_reply_decode(data, size, &status, &index);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    if (rc != 0) {
        if (status != 0 || index != 0)
            abort();
        return 0;
    }
    if (size != TN_WIRE_PROPOSE_AT_REPLY)
        abort();
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_propose_at_reply_encode(&b, status, index) != 0 || tn_buf_size(&b) != size ||
        memcmp(tn_buf_data(&b), data, size) != 0)
        abort();
    tn_buf_fini(&b);
    return 0;
}
