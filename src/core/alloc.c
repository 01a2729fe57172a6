/* The allocator: thin wrappers over libc with, under TN_TEST, a countdown
 * after which every allocation fails. */
#include "core/platform.h"

#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#ifdef TN_TEST
static atomic_long fail_countdown = -1;
static atomic_ulong alloc_total;
static atomic_bool fail_fired;

static bool should_fail(void)
{
    long n = atomic_load(&fail_countdown);
    while (n >= 0) {
        if (n == 0) {
            atomic_store(&fail_fired, true);
            return true;
        }
        if (atomic_compare_exchange_weak(&fail_countdown, &n, n - 1))
            return false;
    }
    return false;
}

void tn_alloc_fail_after(long n)
{
    atomic_store(&fail_fired, false);
    atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

unsigned long tn_alloc_count(void)
{
    return atomic_load(&alloc_total);
}

bool tn_alloc_failed(void)
{
    return atomic_load(&fail_fired);
}
#define TN_ALLOC_CHECK()                                                                           \
    do {                                                                                           \
        if (should_fail())                                                                         \
            return NULL;                                                                           \
        atomic_fetch_add(&alloc_total, 1);                                                         \
    } while (0)
#else
#define TN_ALLOC_CHECK()                                                                           \
    do {                                                                                           \
    } while (0)
#endif

void *tn_malloc(size_t size)
{
    TN_ALLOC_CHECK();
    return malloc(size ? size : 1);
}

void *tn_calloc(size_t count, size_t size)
{
    TN_ALLOC_CHECK();
    return calloc(count ? count : 1, size ? size : 1);
}

void *tn_realloc(void *ptr, size_t size)
{
    TN_ALLOC_CHECK();
    return realloc(ptr, size ? size : 1);
}

void tn_free(void *ptr)
{
    free(ptr);
}

char *tn_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = tn_malloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

int tn_alloc_install_uv(void)
{
    return uv_replace_allocator(tn_malloc, tn_realloc, tn_calloc, tn_free);
}
