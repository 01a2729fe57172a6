/* Fuzz target: the record decoder. Whatever the bytes, decoding either
 * fails cleanly or yields a record that re-encodes to the same bytes. */
#include "core/platform.h"

#include "storage/record.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tn_rec_t rec;
    if (tn_rec_decode(data, size, &rec) != 0)
        return 0;
    size_t n = (size_t)tn_rec_size(&rec.h);
    if (n > size)
        abort();
    unsigned char hdr[TN_REC_HDR];
    tn_rec_encode(hdr, &rec.h, rec.key, rec.body);
    if (memcmp(hdr, data, TN_REC_HDR) != 0)
        abort();
    return 0;
}
