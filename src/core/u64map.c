/* The u64 -> pointer hash map. See u64map.h. */
#include "core/platform.h"

#include "core/u64map.h"

#include "core/alloc.h"

#include <uv.h>

#define MIN_CAP 16

static size_t hash(uint64_t k)
{
    /* splitmix64's finaliser: every input bit reaches every output bit. */
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    k ^= k >> 31;
    return (size_t)k;
}

void tn_u64map_init(tn_u64map_t *m)
{
    m->slots = NULL;
    m->cap = 0;
    m->n = 0;
}

void tn_u64map_fini(tn_u64map_t *m)
{
    tn_free(m->slots);
    tn_u64map_init(m);
}

static size_t find(const tn_u64map_t *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        if (m->slots[i].val == NULL || m->slots[i].key == key)
            return i;
    }
}

void *tn_u64map_get(const tn_u64map_t *m, uint64_t key)
{
    if (m->n == 0)
        return NULL;
    return m->slots[find(m, key)].val;
}

static int resize(tn_u64map_t *m, size_t cap)
{
    tn_u64map_slot_t *slots = tn_calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return UV_ENOMEM;
    tn_u64map_t next = {slots, cap, 0};
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].val != NULL) {
            size_t j = find(&next, m->slots[i].key);
            next.slots[j] = m->slots[i];
            next.n++;
        }
    }
    tn_free(m->slots);
    *m = next;
    return 0;
}

int tn_u64map_put(tn_u64map_t *m, uint64_t key, void *val)
{
    if (val == NULL)
        return UV_EINVAL;
    if ((m->n + 1) * 10 > m->cap * 7) {
        int rc = resize(m, m->cap ? m->cap * 2 : MIN_CAP);
        if (rc != 0)
            return rc;
    }
    size_t i = find(m, key);
    if (m->slots[i].val == NULL)
        m->n++;
    m->slots[i].key = key;
    m->slots[i].val = val;
    return 0;
}

void *tn_u64map_del(tn_u64map_t *m, uint64_t key)
{
    if (m->n == 0)
        return NULL;
    size_t mask = m->cap - 1;
    size_t i = find(m, key);
    void *val = m->slots[i].val;
    if (val == NULL)
        return NULL;
    /* Backward shift: pull later members of the probe run into the hole
     * when their home slot is at or before it (cyclically). */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->slots[j].val != NULL; j = (j + 1) & mask) {
        size_t home = hash(m->slots[j].key) & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].val = NULL;
    m->n--;
    if (m->cap > MIN_CAP && m->n * 8 < m->cap)
        (void)resize(m, m->cap / 2); /* a failed shrink only costs memory */
    return val;
}

bool tn_u64map_next(const tn_u64map_t *m, size_t *pos, uint64_t *key, void **val)
{
    for (size_t i = *pos; i < m->cap; i++) {
        if (m->slots[i].val != NULL) {
            *key = m->slots[i].key;
            *val = m->slots[i].val;
            *pos = i + 1;
            return true;
        }
    }
    *pos = m->cap;
    return false;
}
