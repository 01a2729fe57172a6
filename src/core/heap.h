/* An indexed binary min-heap of deadlines: for lease timeouts, requeue
 * delays and deferred deliveries, so the next due item is found in O(1)
 * and any item can be rescheduled or removed in O(log n) without a scan.
 *
 * Items are caller-owned tn_heap_node_t structs embedded in the caller's
 * own records (intrusive): the heap stores pointers and keeps each node's
 * position in node->idx. Ties break by insertion order (seq), so items
 * with equal deadlines come out first-in first-out.
 *
 * Thread safety: one thread. Out of memory on insert is an error. */
#ifndef TN_CORE_HEAP_H
#define TN_CORE_HEAP_H

#include "core/platform.h"

#define TN_HEAP_NONE SIZE_MAX /* idx of a node not in any heap */

typedef struct {
    int64_t key;  /* the deadline; smallest comes out first */
    uint64_t seq; /* insertion order, for ties */
    size_t idx;   /* position in the heap, TN_HEAP_NONE when out */
} tn_heap_node_t;

typedef struct {
    tn_heap_node_t **v;
    size_t n;
    size_t cap;
    uint64_t next_seq;
} tn_heap_t;

void tn_heap_init(tn_heap_t *h);
void tn_heap_fini(tn_heap_t *h);
static inline void tn_heap_node_init(tn_heap_node_t *node)
{
    node->idx = TN_HEAP_NONE;
}
static inline bool tn_heap_contains(const tn_heap_node_t *node)
{
    return node->idx != TN_HEAP_NONE;
}
static inline size_t tn_heap_size(const tn_heap_t *h)
{
    return h->n;
}
/* The node with the smallest key, or NULL. Borrowed. */
static inline tn_heap_node_t *tn_heap_min(const tn_heap_t *h)
{
    return h->n ? h->v[0] : NULL;
}

/* Insert node (not in a heap) with key. 0 or UV_ENOMEM (node unchanged). */
int tn_heap_insert(tn_heap_t *h, tn_heap_node_t *node, int64_t key);
/* Remove node (in this heap). */
void tn_heap_remove(tn_heap_t *h, tn_heap_node_t *node);
/* Change the key of a node in this heap; it keeps its place among equals
 * only if the key does not change. */
void tn_heap_update(tn_heap_t *h, tn_heap_node_t *node, int64_t key);
/* Remove and return the smallest node, or NULL. */
tn_heap_node_t *tn_heap_pop(tn_heap_t *h);

#endif
