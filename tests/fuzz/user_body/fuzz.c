/* Fuzz target: the body of a user change (POST /v1/users and PUT .../grants).
 * It decodes or is refused with a reason; what decodes keeps the rules: a
 * valid user name, a password without NUL within its limit, at most 64
 * grants of a known action, admin grants without patterns and the others
 * with 1..64 patterns, each a name optionally ending in '*'. */
#include "core/platform.h"

#include "api/v1/users.h"
#include "core/name.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    static tn__v1_user_body_t x;
    unsigned all = 1u << TN__V1_UF_USERNAME | 1u << TN__V1_UF_PASSWORD | 1u << TN__V1_UF_GRANTS;
    int rc = tn__v1_user_body((const char *)data, size, all, &x);
    if (rc == UV_EINVAL) {
        if (x.err[0] == '\0')
            abort();
        return 0;
    }
    if (rc != 0)
        abort();
    if (x.seen[TN__V1_UF_USERNAME] && !tn_username_valid(x.username, strlen(x.username)))
        abort();
    if (x.seen[TN__V1_UF_PASSWORD] && (x.plen == 0 || x.plen > TN_BCRYPT_PASSWORD_MAX ||
                                       memchr(x.password, '\0', x.plen) != NULL))
        abort();
    if (x.ngrants > TN_META_MAX_GRANTS)
        abort();
    for (uint16_t i = 0; i < x.ngrants; i++) {
        const tn_meta_grant_t *g = &x.grants[i];
        if (g->action < TN_GRANT_PRODUCE || g->action > TN_GRANT_ADMIN)
            abort();
        if ((g->action == TN_GRANT_ADMIN) != (g->npatterns == 0) ||
            g->npatterns > TN_META_MAX_PATTERNS)
            abort();
        for (uint16_t k = 0; k < g->npatterns; k++) {
            size_t n = strlen(g->patterns[k]);
            size_t base = n > 0 && g->patterns[k][n - 1] == '*' ? n - 1 : n;
            if (base > TN_NAME_MAX || (base > 0 && !tn_name_valid(g->patterns[k], base)))
                abort();
        }
    }
    tn__v1_user_body_fini(&x);
    return 0;
}
