/* A hash map from 64-bit keys to non-NULL pointers: open addressing with
 * linear probing and backward-shift deletion (no tombstones), growing at
 * 70% load and shrinking when it falls under 1/8, so its memory follows
 * what it holds (in-flight leases by offset, clients by id, ...).
 *
 * Values are borrowed: the map never frees them. Thread safety: one
 * thread. Out of memory is an error: a put that cannot grow the table
 * fails and leaves the map as it was; a shrink that cannot allocate is
 * skipped. */
#ifndef TN_CORE_U64MAP_H
#define TN_CORE_U64MAP_H

#include "core/platform.h"

typedef struct {
    uint64_t key;
    void *val; /* NULL marks an empty slot */
} tn_u64map_slot_t;

typedef struct {
    tn_u64map_slot_t *slots;
    size_t cap; /* 0 or a power of two */
    size_t n;
} tn_u64map_t;

void tn_u64map_init(tn_u64map_t *m);
void tn_u64map_fini(tn_u64map_t *m);
static inline size_t tn_u64map_size(const tn_u64map_t *m)
{
    return m->n;
}
/* The value for key, or NULL. */
void *tn_u64map_get(const tn_u64map_t *m, uint64_t key);
/* Insert or replace (val must not be NULL). 0, UV_EINVAL or UV_ENOMEM. */
int tn_u64map_put(tn_u64map_t *m, uint64_t key, void *val);
/* Remove key; returns its value, or NULL when absent. */
void *tn_u64map_del(tn_u64map_t *m, uint64_t key);
/* Iterate: *pos starts at 0; returns false at the end. The map must not
 * change during an iteration. */
bool tn_u64map_next(const tn_u64map_t *m, size_t *pos, uint64_t *key, void **val);

/* A key made of strings: FNV-1a 64 of s continuing from h (start with
 * TN_U64MAP_STRKEY_INIT; chain several strings through h). Two strings
 * may collide: a map keyed so keeps the whole string to compare. */
#define TN_U64MAP_STRKEY_INIT 14695981039346656037ull
static inline uint64_t tn_u64map_strkey(uint64_t h, const char *s)
{
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

#endif
