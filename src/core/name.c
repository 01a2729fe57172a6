/* The name rule. See name.h. */
#include "core/platform.h"

#include "core/name.h"

#include <string.h>

bool tn_name_valid(const char *s, size_t len)
{
    if (len == 0 || len > TN_NAME_MAX)
        return false;
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool tn_name_ephemeral(const char *s, size_t len)
{
    return len > TN_NAME_EPHEMERAL_LEN &&
           memcmp(s + len - TN_NAME_EPHEMERAL_LEN, TN_NAME_EPHEMERAL, TN_NAME_EPHEMERAL_LEN) == 0;
}

bool tn_name_valid_any(const char *s, size_t len)
{
    if (len > TN_NAME_MAX)
        return false;
    return tn_name_valid(s, tn_name_ephemeral(s, len) ? len - TN_NAME_EPHEMERAL_LEN : len);
}

bool tn_name_link_channel(const char *s, size_t len)
{
    if (len != TN_NAME_LINK_PREFIX_LEN + 16 ||
        memcmp(s, TN_NAME_LINK_PREFIX, TN_NAME_LINK_PREFIX_LEN) != 0)
        return false;
    for (size_t i = TN_NAME_LINK_PREFIX_LEN; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}
