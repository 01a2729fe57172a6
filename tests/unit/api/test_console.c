/* Tests of the web console's embedded files and content types: the table
 * the build generates from console/ holds index.html and the files it
 * loads, each NUL-terminated after its counted bytes, under names the
 * router can take; every extension the console uses has its type, and
 * anything else is served as bytes. (How they are served over HTTP:
 * tests/e2e/test_console.py.) */
#include "core/platform.h"

#include "testutil.h"

#include "api/console.h"

#include <stdio.h>
#include <string.h>

static const tn_console_file_t *find(const char *name)
{
    for (size_t i = 0; i < tn_console_nfiles; i++) {
        if (strcmp(tn_console_files[i].name, name) == 0)
            return &tn_console_files[i];
    }
    return NULL;
}

static void test_the_table_holds_the_page_and_what_it_loads(void **state)
{
    (void)state;
    const tn_console_file_t *index = find("index.html");
    assert_non_null(index);
    assert_non_null(strstr((const char *)index->data, "<!doctype html>"));
    /* What index.html refers to is embedded too. */
    static const char *const refs[] = {"app.js", "app.css", "favicon.svg"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(refs); i++) {
        char quoted[64];
        snprintf(quoted, sizeof(quoted), "\"%s\"", refs[i]);
        assert_non_null(strstr((const char *)index->data, quoted));
        assert_non_null(find(refs[i]));
    }
    for (size_t i = 0; i < tn_console_nfiles; i++) {
        const tn_console_file_t *f = &tn_console_files[i];
        assert_true(f->len > 0);
        assert_int_equal(f->data[f->len], 0);
        assert_int_equal(strlen((const char *)f->data), f->len); /* text: no NUL inside */
        assert_true(strlen(f->name) <= 128);
        assert_null(strchr(f->name, '/'));
        if (i > 0) /* sorted by name, each once */
            assert_true(strcmp(tn_console_files[i - 1].name, f->name) < 0);
    }
}

static void test_content_types(void **state)
{
    (void)state;
    assert_string_equal(tn_console_content_type("index.html"), "text/html; charset=utf-8");
    assert_string_equal(tn_console_content_type("app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(tn_console_content_type("app.css"), "text/css; charset=utf-8");
    assert_string_equal(tn_console_content_type("favicon.svg"), "image/svg+xml");
    assert_string_equal(tn_console_content_type("a.b.png"), "image/png");
    assert_string_equal(tn_console_content_type("app.js.map"), "application/octet-stream");
    assert_string_equal(tn_console_content_type("README"), "application/octet-stream");
    assert_string_equal(tn_console_content_type("html"), "application/octet-stream");
    assert_string_equal(tn_console_content_type(".html"), "text/html; charset=utf-8");
    /* Every embedded file has a type of its own. */
    for (size_t i = 0; i < tn_console_nfiles; i++)
        assert_string_not_equal(tn_console_content_type(tn_console_files[i].name),
                                "application/octet-stream");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_table_holds_the_page_and_what_it_loads),
        cmocka_unit_test(test_content_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
