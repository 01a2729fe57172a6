/* Names of topics and channels, one rule for every door and for storage:
 * [A-Za-z0-9._-]{1,255}, and never "." or ".." (so a name is safe as a
 * file name as it is). NSQ's "#ephemeral" suffix is the NSQ codec's
 * business, on top of this rule. */
#ifndef TN_CORE_NAME_H
#define TN_CORE_NAME_H

#include "core/platform.h"

#define TN_NAME_MAX 255

bool tn_name_valid(const char *s, size_t len);

#endif
