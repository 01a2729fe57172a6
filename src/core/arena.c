/* The parser arena. See arena.h. */
#include "core/platform.h"

#include "core/arena.h"

#include <string.h>

/* Each block is preceded by 16 bytes holding its size (for realloc). */
void *tn_arena_malloc(void *ctx, size_t n)
{
    tn_arena_t *a = ctx;
    size_t need = ((n + 15) & ~(size_t)15) + 16;
    if (a->cap - a->used < need)
        return NULL; /* the caller's sizing rules this out */
    char *p = a->base + a->used;
    memcpy(p, &n, sizeof(n));
    a->used += need;
    return p + 16;
}

void *tn_arena_realloc(void *ctx, void *ptr, size_t n)
{
    if (ptr == NULL)
        return tn_arena_malloc(ctx, n);
    size_t old;
    memcpy(&old, (char *)ptr - 16, sizeof(old));
    if (n <= old)
        return ptr;
    void *q = tn_arena_malloc(ctx, n);
    if (q != NULL)
        memcpy(q, ptr, old);
    return q;
}

void tn_arena_free(void *ctx, void *ptr)
{
    (void)ctx;
    (void)ptr;
}
