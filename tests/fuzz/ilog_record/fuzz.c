/* Fuzz target: the ingress log's frame decoder, run over the input as
 * recovery runs over a segment (frame after frame until the first that
 * does not decode). Checks: a decoded frame lies inside the input and
 * re-encodes to exactly its bytes (the format has one encoding per
 * record); "need more" names a length past the input, or none. */
#include "core/platform.h"

#include "core/err.h"
#include "storage/ilog.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos < size) {
        tn_irec_t rec;
        uint64_t seq;
        size_t used;
        uint32_t mark;
        int rc = tn_irec_decode(data + pos, size - pos, &rec, &seq, &used, &mark);
        if (rc == TN_ESHORT) {
            if (used != 0 && used <= size - pos)
                abort();
            break;
        }
        if (rc != 0) {
            if (rc != TN_ECORRUPT)
                abort();
            break;
        }
        if (used > size - pos || used != tn_irec_size(&rec) || rec.topic.len == 0 ||
            rec.topic.len > TN_ILOG_MAX_TOPIC || rec.deliver_at_ms < 0)
            abort();
        unsigned char *copy = malloc(used);
        if (copy == NULL)
            abort();
        if (tn_irec_encode(copy, &rec, seq, mark) != used || memcmp(copy, data + pos, used) != 0)
            abort();
        free(copy);
        pos += used;
    }
    return 0;
}
