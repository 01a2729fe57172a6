/* Buffers, messages, the allocator's failure injection, the error table
 * and logging. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static void test_alloc_failure_injection(void **state)
{
    (void)state;
    tn_alloc_fail_after(2);
    void *a = tn_malloc(8), *b = tn_malloc(8);
    void *c = tn_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_true(tn_alloc_failed());
    tn_buf_t buf;
    tn_buf_init(&buf);
    assert_int_equal(tn_buf_append(&buf, "x", 1), UV_ENOMEM);
    assert_null(tn_msg_new("x", 1));
    tn_alloc_fail_after(-1);
    assert_int_equal(tn_buf_append(&buf, "x", 1), 0);
    tn_buf_fini(&buf);
    tn_free(a);
    tn_free(b);
}

static void test_error_table(void **state)
{
    (void)state;
    assert_string_equal(tn_err_name(TN_ECORRUPT), "TN_ECORRUPT");
    assert_string_equal(tn_err_name(TN_EDISKHIGH), "TN_EDISKHIGH");
    assert_string_equal(tn_err_name(UV_EIO), "EIO");
    assert_string_equal(tn_err_name(0), "OK");
    assert_non_null(strstr(tn_strerror(TN_EDISKHIGH), "watermark"));
    assert_string_equal(tn_strerror(UV_ENOMEM), uv_strerror(UV_ENOMEM));
    /* Every tern code has its own name and text. */
    for (int e = TN__ERR_BASE + 1; e < TN__ERR_END; e++) {
        assert_int_equal(strncmp(tn_err_name(e), "TN_E", 4), 0);
        assert_true(strlen(tn_strerror(e)) > 5);
    }
    assert_int_equal(tn_err_from_errno(5), -5);
}

static void test_log_levels_and_rate_limit(void **state)
{
    (void)state;
    assert_int_equal(tn_log_level_parse("warn"), TN_LOG_WARN);
    assert_int_equal(tn_log_level_parse("loud"), -1);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    tn_log_set_fd(fds[1]);
    int saved = tn_log_level;
    tn_log_level = TN_LOG_WARN;
    int evaluated = 0;
    TN_LOG(TN_LOG_INFO, "not written %d", ++evaluated);
    assert_int_equal(evaluated, 0); /* arguments not evaluated below the level */
    for (int i = 0; i < 100; i++)
        TN_LOG_RL(TN_LOG_ERROR, 60000, "repeated error %d", i);
    TN_LOG(TN_LOG_WARN, "last line");
    tn_log_set_fd(2);
    tn_log_level = saved;
    close(fds[1]);
    char buf[8192];
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_null(strstr(buf, "not written"));
    assert_non_null(strstr(buf, "repeated error 0"));
    assert_null(strstr(buf, "repeated error 1\n"));
    assert_non_null(strstr(buf, "last line"));
    assert_non_null(strstr(buf, "error "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_grow_consume),          cmocka_unit_test(test_msg_refcount),
        cmocka_unit_test(test_alloc_failure_injection),   cmocka_unit_test(test_error_table),
        cmocka_unit_test(test_log_levels_and_rate_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
