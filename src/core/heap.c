/* The indexed binary min-heap. See heap.h. */
#include "core/platform.h"

#include "core/heap.h"

#include "core/alloc.h"

#include <uv.h>

static bool less(const tn_heap_node_t *a, const tn_heap_node_t *b)
{
    return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void place(tn_heap_t *h, size_t i, tn_heap_node_t *node)
{
    h->v[i] = node;
    node->idx = i;
}

static void sift_up(tn_heap_t *h, size_t i)
{
    tn_heap_node_t *node = h->v[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!less(node, h->v[parent]))
            break;
        place(h, i, h->v[parent]);
        i = parent;
    }
    place(h, i, node);
}

static void sift_down(tn_heap_t *h, size_t i)
{
    tn_heap_node_t *node = h->v[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        const tn_heap_node_t *bn = node;
        if (l < h->n && less(h->v[l], bn)) {
            best = l;
            bn = h->v[l];
        }
        if (r < h->n && less(h->v[r], bn))
            best = r;
        if (best == i)
            break;
        place(h, i, h->v[best]);
        i = best;
    }
    place(h, i, node);
}

void tn_heap_init(tn_heap_t *h)
{
    h->v = NULL;
    h->n = h->cap = 0;
    h->next_seq = 0;
}

void tn_heap_fini(tn_heap_t *h)
{
    for (size_t i = 0; i < h->n; i++)
        h->v[i]->idx = TN_HEAP_NONE;
    tn_free(h->v);
    tn_heap_init(h);
}

int tn_heap_insert(tn_heap_t *h, tn_heap_node_t *node, int64_t key)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tn_heap_node_t **v = tn_realloc(h->v, cap * sizeof(*v));
        if (v == NULL)
            return UV_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    node->key = key;
    node->seq = h->next_seq++;
    h->v[h->n] = node;
    node->idx = h->n++;
    sift_up(h, node->idx);
    return 0;
}

void tn_heap_remove(tn_heap_t *h, tn_heap_node_t *node)
{
    size_t i = node->idx;
    node->idx = TN_HEAP_NONE;
    tn_heap_node_t *last = h->v[--h->n];
    if (i == h->n)
        return; /* it was the last one */
    place(h, i, last);
    if (i > 0 && less(last, h->v[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

void tn_heap_update(tn_heap_t *h, tn_heap_node_t *node, int64_t key)
{
    if (key == node->key)
        return;
    bool up = key < node->key;
    node->key = key;
    node->seq = h->next_seq++;
    if (up)
        sift_up(h, node->idx);
    else
        sift_down(h, node->idx);
}

tn_heap_node_t *tn_heap_pop(tn_heap_t *h)
{
    tn_heap_node_t *top = tn_heap_min(h);
    if (top != NULL)
        tn_heap_remove(h, top);
    return top;
}
