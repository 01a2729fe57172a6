/* Growable buffers and reference-counted messages. */
#include "core/platform.h"

#include "testutil.h"

#include "core/buf.h"

#include <string.h>

static void test_buf_grow_consume(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(tn_buf_append(&b, "abcdefgh", 8), 0);
    assert_int_equal(tn_buf_size(&b), 8000);
    tn_buf_consume(&b, 7996);
    assert_int_equal(tn_buf_size(&b), 4);
    assert_memory_equal(tn_buf_data(&b), "efgh", 4);
    /* Consumed space is reused before growing. */
    size_t cap = b.cap;
    assert_int_equal(tn_buf_append(&b, "x", 1), 0);
    assert_int_equal(b.cap, cap);
    tn_buf_consume(&b, 5);
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
}

static void test_reserve_zero_allocates(void **state)
{
    (void)state;
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_buf_reserve(&b, 0), 0);
    assert_non_null(b.base); /* base + len is then always defined */
    tn_buf_fini(&b);
    /* Never grown: no bytes, and no pointer arithmetic on NULL. */
    tn_buf_init(&b);
    assert_null(tn_buf_data(&b));
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);
}

static void test_msg_refcount(void **state)
{
    (void)state;
    tn_msg_t *m = tn_msg_new("hello", 5);
    assert_non_null(m);
    assert_int_equal(m->len, 5);
    assert_memory_equal(m->data, "hello", 5);
    tn_msg_ref(m);
    assert_int_equal(m->refs, 2);
    tn_msg_unref(m);
    assert_int_equal(m->refs, 1);
    tn_msg_unref(m); /* freed: ASan would report a leak otherwise */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_grow_consume),
        cmocka_unit_test(test_reserve_zero_allocates),
        cmocka_unit_test(test_msg_refcount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
