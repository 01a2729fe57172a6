/* The allocator. All tern allocations go through tn_malloc and friends (and
 * libuv's, through tn_alloc_install_uv), so that tests built with TN_TEST
 * can make the Nth allocation fail and check that out-of-memory is handled
 * as an error everywhere in storage, queue and cluster code.
 *
 * Thread safety: the functions may be called from any thread. The failure
 * injection counters are atomic. */
#ifndef TN_CORE_ALLOC_H
#define TN_CORE_ALLOC_H

#include "core/platform.h"

void *tn_malloc(size_t size);
void *tn_calloc(size_t count, size_t size);
void *tn_realloc(void *ptr, size_t size);
void tn_free(void *ptr);
/* Copy of s, or NULL on allocation failure. */
char *tn_strdup(const char *s);

/* Route libuv's own allocations through tn_malloc. Call before the first
 * loop is created. Returns 0 or a libuv error. */
int tn_alloc_install_uv(void);

#ifdef TN_TEST
/* Let `n` more allocations succeed, then fail every one after (n >= 0), or
 * disarm (n < 0). */
void tn_alloc_fail_after(long n);
/* Allocations made since the process started (successful ones). */
unsigned long tn_alloc_count(void);
/* Whether an injected failure has fired since the last fail_after call. */
bool tn_alloc_failed(void);
#endif

#endif
