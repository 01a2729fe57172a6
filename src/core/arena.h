/* A bump arena for a parser that must never see an allocation fail
 * (yajl does not check its own): the caller sizes it up front from the
 * input's bound, and running out of it is then impossible rather than
 * handled. The three functions have the shape of yajl_alloc_funcs.
 *
 * Threads: one arena per parse. */
#ifndef TN_CORE_ARENA_H
#define TN_CORE_ARENA_H

#include "core/platform.h"

typedef struct {
    char *base; /* owned by the caller */
    size_t used;
    size_t cap;
} tn_arena_t;

void *tn_arena_malloc(void *ctx, size_t n);
void *tn_arena_realloc(void *ctx, void *ptr, size_t n);
/* A no-op: the arena goes as a whole. */
void tn_arena_free(void *ctx, void *ptr);

#endif
