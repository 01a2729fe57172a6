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

/* Whether s[*at..len) starts with one or more decimal digits and then
 * sep; *at moves past sep. */
static bool digits_then(const char *s, size_t len, size_t *at, char sep)
{
    size_t i = *at;
    while (i < len && s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == *at || i == len || s[i] != sep)
        return false;
    *at = i + 1;
    return true;
}

bool tn_name_feed_channel(const char *s, size_t len)
{
    size_t k = sizeof(TN_NAME_FEED_PREFIX) - 1;
    if (!tn_name_ephemeral(s, len) || len < k || memcmp(s, TN_NAME_FEED_PREFIX, k) != 0)
        return false;
    size_t at = k;
    return digits_then(s, len, &at, '.') && digits_then(s, len, &at, '#') &&
           at == len - TN_NAME_EPHEMERAL_LEN + 1;
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
