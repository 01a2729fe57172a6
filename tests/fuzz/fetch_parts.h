/* Checks shared by the fuzz targets of the two frames that carry FETCH's
 * partition tuples (cluster/fetch.h): fetch_frame (FETCH requests, opcode
 * TN_OP_FETCH) and flushed_frame (FLUSHED reports, TN_OP_FLUSHED). Each
 * target decodes its own header; these check what the two have in common.
 * The shape check both make is rpc_checks.h's fuzz_check_shape. Static
 * functions: included by each target's fuzz.c, nothing to link. */
#ifndef TN_FUZZ_FETCH_PARTS_H
#define TN_FUZZ_FETCH_PARTS_H

#include "core/platform.h"

#include "cluster/fetch.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/err.h"
#include "rpc_checks.h"

#include <stdlib.h>
#include <string.h>

/* Yields a decoded frame's next partition as tn_fetch_req_next and
 * tn_flushed_req_next do (r is the target's decoded frame). */
typedef int (*fuzz_parts_next_fn)(void *r, tn_fetch_part_t *p);

/* b holds the header a target wrote back from a decoded frame of count
 * partitions (owned by the caller, freed here); appends each partition
 * next yields and checks there are exactly count, each with a topic of 1
 * to 255 bytes, and that b is then the same size bytes as data. */
static void fuzz_parts_check_encode(tn_buf_t *b, uint32_t count, fuzz_parts_next_fn next, void *r,
                                    const uint8_t *data, size_t size)
{
    if (count == 0 || count > TN_FETCH_MAX_PARTS)
        abort();
    tn_fetch_part_t p;
    uint32_t n = 0;
    while (next(r, &p) == 0) {
        if (p.topic[0] == '\0' || strlen(p.topic) > 255 || tn_fetch_req_put_part(b, &p) != 0)
            abort();
        n++;
    }
    if (n != count || tn_buf_size(b) != size || memcmp(tn_buf_data(b), data, size) != 0)
        abort();
    tn_buf_fini(b);
}

#endif
