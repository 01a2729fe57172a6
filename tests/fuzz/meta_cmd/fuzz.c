/* Fuzz target: metastore log entries and snapshots. A command decodes or
 * is refused; what decodes encodes back to the same bytes and applies to a
 * state machine; the same bytes as a snapshot restore or are refused,
 * leaving the state as it was. */
#include "core/platform.h"

#include "meta/state.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    size_t at = 0;
    while (at < size) {
        tn_meta_cmd_t c;
        size_t used = 0;
        if (tn_meta_cmd_decode(data + at, size - at, &c, &used) != 0)
            break;
        tn_buf_t b;
        tn_buf_init(&b);
        if (tn_meta_cmd_encode(&c, &b) != 0 || tn_buf_size(&b) != used ||
            memcmp(tn_buf_data(&b), data + at, used) != 0)
            abort(); /* what decodes must encode back the same */
        tn_buf_fini(&b);
        (void)tn_meta_state_apply(&s, &c);
        tn_meta_cmd_fini(&c);
        at += used;
    }
    size_t before = s.ntopics;
    if (tn_meta_state_restore(&s, data, size) != 0 && s.ntopics != before)
        abort(); /* a refused snapshot changes nothing */
    tn_meta_state_fini(&s);
    return 0;
}
