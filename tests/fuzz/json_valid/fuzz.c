/* Fuzz target: tn_json_valid (one pass, no allocation) against yajl's
 * verdict through tn_json_events on the same bytes. tn_json_valid never
 * accepts what yajl refuses, and refuses what yajl accepts only for the
 * whitespace RFC 8259 does not have (\v and \f, which yajl takes). */
#include "core/platform.h"

#include "proto/http/json.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    bool ok = false;
    if (tn_json_events((const char *)data, size, NULL, NULL, true, &ok) != 0)
        return 0; /* out of memory: no verdict to compare */
    bool mine = tn_json_valid((const char *)data, size);
    if (mine && !ok)
        abort();
    if (!mine && ok && memchr(data, '\v', size) == NULL && memchr(data, '\f', size) == NULL)
        abort();
    return 0;
}
