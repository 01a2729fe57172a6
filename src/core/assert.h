/* Assertions. TN_ASSERT is always on: for invariants whose violation would
 * corrupt durable state (an offset reused, a durable position ahead of the
 * data), where stopping the process is the safe answer. TN_DASSERT is on
 * in debug and sanitizer builds only (TN_DEBUG). Neither may have side
 * effects. Bad input is never asserted: it gets an error. */
#ifndef TN_CORE_ASSERT_H
#define TN_CORE_ASSERT_H

#include "core/platform.h"

TN_NORETURN void tn_assert_fail(const char *expr, const char *file, int line);

#define TN_ASSERT(expr)                                                                            \
    do {                                                                                           \
        if (TN_UNLIKELY(!(expr)))                                                                  \
            tn_assert_fail(#expr, __FILE__, __LINE__);                                             \
    } while (0)

#ifdef TN_DEBUG
#define TN_DASSERT(expr) TN_ASSERT(expr)
#else
#define TN_DASSERT(expr)                                                                           \
    do {                                                                                           \
    } while (0)
#endif

#endif
