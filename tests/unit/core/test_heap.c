/* The indexed heap, against a sorted-array model under random inserts,
 * removals, updates and pops; FIFO among equal keys; allocation failure. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/heap.h"

#include <stdlib.h>

#define N 2000

typedef struct {
    tn_heap_node_t node;
    int id;
} item_t;

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The smallest (key, seq) among items in the heap, by brute force. */
static item_t *model_min(item_t *items)
{
    item_t *best = NULL;
    for (int i = 0; i < N; i++) {
        if (!tn_heap_contains(&items[i].node))
            continue;
        if (best == NULL || items[i].node.key < best->node.key ||
            (items[i].node.key == best->node.key && items[i].node.seq < best->node.seq))
            best = &items[i];
    }
    return best;
}

static void test_against_model(void **state)
{
    (void)state;
    static item_t items[N];
    tn_heap_t h;
    tn_heap_init(&h);
    for (int i = 0; i < N; i++) {
        items[i].id = i;
        tn_heap_node_init(&items[i].node);
    }
    size_t in = 0;
    for (int step = 0; step < 50000; step++) {
        item_t *it = &items[rnd() % N];
        int64_t key = (int64_t)(rnd() % 100) - 50; /* many ties */
        switch (rnd() % 4) {
        case 0:
        case 1:
            if (!tn_heap_contains(&it->node)) {
                assert_int_equal(tn_heap_insert(&h, &it->node, key), 0);
                in++;
            } else {
                tn_heap_update(&h, &it->node, key);
                assert_int_equal(it->node.key, key);
            }
            break;
        case 2:
            if (tn_heap_contains(&it->node)) {
                tn_heap_remove(&h, &it->node);
                assert_false(tn_heap_contains(&it->node));
                in--;
            }
            break;
        default: {
            item_t *want = model_min(items);
            tn_heap_node_t *got = tn_heap_pop(&h);
            if (want == NULL) {
                assert_null(got);
            } else {
                assert_ptr_equal(got, &want->node);
                in--;
            }
            break;
        }
        }
        assert_int_equal(tn_heap_size(&h), in);
        item_t *want = model_min(items);
        assert_ptr_equal(tn_heap_min(&h), want ? &want->node : NULL);
    }
    tn_heap_fini(&h);
    for (int i = 0; i < N; i++)
        assert_false(tn_heap_contains(&items[i].node));
}

static void test_fifo_among_equals(void **state)
{
    (void)state;
    item_t items[10];
    tn_heap_t h;
    tn_heap_init(&h);
    for (int i = 0; i < 10; i++) {
        items[i].id = i;
        tn_heap_node_init(&items[i].node);
        assert_int_equal(tn_heap_insert(&h, &items[i].node, 7), 0);
    }
    for (int i = 0; i < 10; i++)
        assert_ptr_equal(tn_heap_pop(&h), &items[i].node);
    tn_heap_fini(&h);
}

static void test_insert_fails_cleanly(void **state)
{
    (void)state;
    item_t it;
    tn_heap_node_init(&it.node);
    tn_heap_t h;
    tn_heap_init(&h);
    tn_alloc_fail_after(0);
    int rc = tn_heap_insert(&h, &it.node, 1);
    tn_alloc_fail_after(-1);
    assert_int_equal(rc, UV_ENOMEM);
    assert_false(tn_heap_contains(&it.node));
    assert_int_equal(tn_heap_size(&h), 0);
    assert_int_equal(tn_heap_insert(&h, &it.node, 1), 0);
    tn_heap_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_fifo_among_equals),
        cmocka_unit_test(test_insert_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
