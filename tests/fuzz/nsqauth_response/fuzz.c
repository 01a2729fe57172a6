/* Fuzz target: an auth server's answer to AUTH (JSON with grants and
 * regexes). It parses or refuses; what it accepts has a TTL within the
 * cap, and its rules answer permission checks without crashing. */
#include "core/platform.h"

#include "auth/nsqauth.h"
#include "core/time.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *body = malloc(size + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data, size);
    body[size] = '\0';
    tn_authz_t *a = tn_nsqauth_parse(body);
    if (a != NULL) {
        if (a->expires_ms - tn_now_mono_ms() > 3600 * 1000 || a->identity == NULL)
            abort();
        (void)tn_authz_can_publish(a, "topic");
        (void)tn_authz_can_subscribe(a, "topic", "channel");
        tn_authz_unref(a);
    }
    free(body);
    return 0;
}
