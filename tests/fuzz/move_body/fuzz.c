/* Fuzz target: a partition move's body ({"replicas": [...]},
 * api/v1/moves.h). It decodes or is refused with a reason; what decodes
 * holds 1..TN_PSTATE_MAX_REPLICAS member ids, none 0. */
#include "core/platform.h"

#include "api/v1/moves.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    uint32_t target[TN_PSTATE_MAX_REPLICAS];
    uint32_t n = 0;
    char err[192] = "";
    int rc = tn__v1_move_body((const char *)data, size, target, &n, err, sizeof(err));
    if (rc == 0) {
        if (n == 0 || n > TN_PSTATE_MAX_REPLICAS)
            abort();
        for (uint32_t i = 0; i < n; i++)
            if (target[i] == 0)
                abort();
    } else if (rc != UV_ENOMEM && (rc != UV_EINVAL || err[0] == '\0')) {
        abort();
    }
    return 0;
}
