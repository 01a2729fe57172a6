/* Fuzz target: FLUSHED reports (a follower's flush report to its leader,
 * cluster/fetch.h). The input, read as a report's fields, decodes or is
 * refused with TN_EPROTO; what decodes yields exactly count partitions with
 * non-empty topics, encodes back to the same bytes, and passes the RPC
 * server's shape check (which refuses exactly what the decoder refuses). */
#include "core/platform.h"

#include "cluster/fetch.h"
#include "cluster/wire.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    tn_flushed_req_t r;
    int rc = tn_flushed_req_decode(data, size, &r);
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    uint8_t *req = malloc(size + 1);
    if (req == NULL)
        abort();
    req[0] = TN_OP_FLUSHED;
    if (size > 0)
        memcpy(req + 1, data, size);
    int check = tn_wire_request_check(req, size + 1);
    free(req);
    if ((rc == 0) != (check == 0) || (check != 0 && check != TN_EPROTO))
        abort();
    if (rc != 0)
        return 0;
    if (r.count == 0 || r.count > TN_FETCH_MAX_PARTS)
        abort();
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_flushed_req_put_head(&b, r.node, r.incarnation, r.count) != 0)
        abort();
    tn_fetch_part_t p;
    uint32_t n = 0;
    while (tn_flushed_req_next(&r, &p) == 0) {
        if (p.topic[0] == '\0' || strlen(p.topic) > 255 || tn_fetch_req_put_part(&b, &p) != 0)
            abort();
        n++;
    }
    if (n != r.count || tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
        abort();
    tn_buf_fini(&b);
    return 0;
}
