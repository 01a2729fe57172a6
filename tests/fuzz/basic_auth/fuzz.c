/* Fuzz target: an Authorization header value as the native API will read
 * it (`Basic base64(user:password)`). It parses or is refused; what parses
 * has a valid user name and a password with no NUL, within the limits. */
#include "core/platform.h"

#include "auth/passwd.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char user[TN_USERNAME_MAX + 1], pw[TN_PASSWORD_MAX + 1];
    size_t pl = 0;
    if (tn_basic_parse((const char *)data, size, user, pw, &pl) == 0) {
        if (!tn_username_valid(user, strlen(user)) || pl > TN_PASSWORD_MAX ||
            memchr(pw, '\0', pl) != NULL || pw[pl] != '\0')
            abort();
    }
    return 0;
}
