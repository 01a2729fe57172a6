/* Fuzz target: bytes from a WebSocket client of the live feed, in the auth
 * phase: libwslay's frame decoder as tern drives it (pieces of any size,
 * masked and unmasked frames, fragments, control frames, oversized
 * messages) and the auth control parser. Anything goes in; the session
 * stays in its auth phase or fails (once), and ends cleanly: unlinked, with
 * no handle left on the loop (tn__ws_fuzz checks). */
#include "core/platform.h"

#include "api/ws.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    if (tn__ws_fuzz(data, size) != 0)
        abort();
    return 0;
}
