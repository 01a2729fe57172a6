/* The error table: tn_strerror() and tn_err_name() for tern's own codes,
 * falling through to libuv for system and libuv codes. */
#include "core/platform.h"

#include "core/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

void tn_errbuf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *tn_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define TN_ERR_TEXT(name, text)                                                                    \
    case TN_E##name:                                                                               \
        return text;
        TN_ERR_MAP(TN_ERR_TEXT)
#undef TN_ERR_TEXT
    case -EDQUOT: /* a quota's full disk: libuv has no code for it */
        return "disk quota exceeded";
    default:
        return uv_strerror(err);
    }
}

const char *tn_err_name(int err)
{
    switch (err) {
    case 0:
        return "OK";
#define TN_ERR_NAME(name, text)                                                                    \
    case TN_E##name:                                                                               \
        return "TN_E" #name;
        TN_ERR_MAP(TN_ERR_NAME)
#undef TN_ERR_NAME
    case -EDQUOT:
        return "EDQUOT";
    default:
        return uv_err_name(err);
    }
}
