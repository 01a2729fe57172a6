/* The backup manifest decoder and its path rule (src/cmd/ternctl/manifest.c):
 * what api/backup.c writes decodes; every malformed, out-of-range or
 * escaping document is refused with a message naming the field. */
#include "core/platform.h"

#include "testutil.h"

#include "cmd/ternctl/manifest.h"

#include <stdio.h>
#include <string.h>

#define HEAD                                                                                       \
    "{\"format\":\"tern-backup 1\",\"storage_format\":1,\"session\":\"ab12\",\"node_id\":2,"       \
    "\"created_ms\":1796160142573,\"ttl_ms\":600000,\"metastore\":{\"path\":"                      \
    "\"metastore.snapshot\",\"length\":320,\"crc32c\":3854482451,\"applied_index\":4,"             \
    "\"voters\":[{\"id\":1,\"raft_address\":\"127.0.0.1:4153\"},{\"id\":2,\"raft_address\":"       \
    "\"127.0.0.1:4253\"}]},"

static int parse(const char *doc, tn_manifest_t *m, char *err, size_t errlen)
{
    err[0] = '\0';
    return tn_manifest_parse(doc, strlen(doc), m, err, errlen);
}

static void test_decodes_the_servers_document(void **state)
{
    (void)state;
    const char *doc =
        HEAD "\"files\":[{\"path\":\"topics/t1/0/00000000000000000000.log\","
             "\"length\":144,\"crc32c\":3421037752},{\"path\":\"FORMAT\",\"length\":15,"
             "\"crc32c\":4198987912},{\"path\":\"ingress/checkpoint\",\"length\":16,"
             "\"crc32c\":0}],\"later_field\":[1,2]}";
    tn_manifest_t m;
    char err[300];
    assert_int_equal(parse(doc, &m, err, sizeof(err)), 0);
    assert_string_equal(m.session, "ab12");
    assert_int_equal(m.node_id, 2);
    assert_int_equal(m.meta_len, 320);
    assert_int_equal(m.meta_crc, 3854482451u);
    assert_int_equal(m.applied_index, 4);
    assert_int_equal(m.nvoters, 2);
    assert_int_equal(m.voters[1].id, 2);
    assert_string_equal(m.voters[1].raft_addr, "127.0.0.1:4253");
    assert_int_equal(m.nfiles, 3);
    /* Sorted by path. */
    assert_string_equal(m.files[0].path, "FORMAT");
    assert_int_equal(m.files[0].len, 15);
    assert_string_equal(m.files[2].path, "topics/t1/0/00000000000000000000.log");
    assert_int_equal(m.files[2].crc, 3421037752u);
    tn_manifest_fini(&m);
}

static void refused(const char *doc, const char *want)
{
    tn_manifest_t m;
    char err[300];
    int rc = parse(doc, &m, err, sizeof(err));
    tn_manifest_fini(&m);
    if (rc != UV_EINVAL || strstr(err, want) == NULL) {
        fprintf(stderr, "doc %s\n  rc %d err \"%s\", wanted \"%s\"\n", doc, rc, err, want);
        fail();
    }
}

static void test_refuses_bad_documents(void **state)
{
    (void)state;
    refused("", "not JSON");
    refused("[1]", "not a JSON object");
    refused("{\"format\":\"tern-backup 2\"}", "format");
    refused(HEAD "\"files\":[]", "not JSON");
    refused("{\"format\":\"tern-backup 1\",\"storage_format\":2}", "storage_format");
    refused(HEAD "\"files\":{}}", "files is not an array");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":-1,\"crc32c\":0}]}", "length");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":1,\"crc32c\":4294967296}]}", "crc32c");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":1.5,\"crc32c\":0}]}", "length");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":1,\"crc32c\":0},"
                 "{\"path\":\"FORMAT\",\"length\":1,\"crc32c\":0}]}",
            "given twice");
    refused(HEAD "\"files\":[{\"path\":\"../x\",\"length\":1,\"crc32c\":0}]}", "../x");
    refused(HEAD "\"files\":[{\"length\":1,\"crc32c\":0}]}", "(missing)");
    /* node 3 is not a voter */
    refused("{\"format\":\"tern-backup 1\",\"storage_format\":1,\"session\":\"a\",\"node_id\":3,"
            "\"created_ms\":1,\"metastore\":{\"path\":\"metastore.snapshot\",\"length\":1,"
            "\"crc32c\":1,\"applied_index\":1,\"voters\":[{\"id\":1,\"raft_address\":\"a:1\"}]},"
            "\"files\":[]}",
            "not one of metastore.voters");
    refused("{\"format\":\"tern-backup 1\",\"storage_format\":1,\"session\":\"a\",\"node_id\":1,"
            "\"created_ms\":1,\"metastore\":{\"path\":\"../snap\",\"length\":1,"
            "\"crc32c\":1,\"applied_index\":1,\"voters\":[{\"id\":1,\"raft_address\":\"a:1\"}]},"
            "\"files\":[]}",
            "metastore.path");
    const char nul[] = "{\"format\":\"tern-backup 1\"\0}";
    tn_manifest_t m;
    char err[300];
    assert_int_equal(tn_manifest_parse(nul, sizeof(nul) - 1, &m, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "NUL"));
    tn_manifest_fini(&m);
}

static void test_path_rule(void **state)
{
    (void)state;
    assert_true(tn_manifest_path_ok("FORMAT"));
    assert_true(tn_manifest_path_ok("incarnation"));
    assert_false(tn_manifest_path_ok("incarnation/x"));
    assert_false(tn_manifest_path_ok("incarnation.tmp"));
    assert_true(tn_manifest_path_ok("topics/orders.v2/3/00000000000000000042.log"));
    assert_true(tn_manifest_path_ok("topics/t/0/c-1_x.wal"));
    assert_true(tn_manifest_path_ok("ingress/checkpoint"));
    assert_false(tn_manifest_path_ok(""));
    assert_false(tn_manifest_path_ok("/etc/passwd"));
    assert_false(tn_manifest_path_ok("topics/../../etc/passwd"));
    assert_false(tn_manifest_path_ok("topics/./x"));
    assert_false(tn_manifest_path_ok("topics//x"));
    assert_false(tn_manifest_path_ok("topics/x/"));
    assert_false(tn_manifest_path_ok("topics"));
    assert_false(tn_manifest_path_ok("meta/metadata1"));
    assert_false(tn_manifest_path_ok("LOCK"));
    assert_false(tn_manifest_path_ok("backup/x"));
    assert_false(tn_manifest_path_ok("topics/a b/0/x"));
    assert_false(tn_manifest_path_ok("topics/a\\b"));
    assert_false(tn_manifest_path_ok("FORMAT/x"));
    char longp[TN_MANIFEST_PATH_MAX + 2];
    memcpy(longp, "topics/", 7);
    memset(longp + 7, 'a', sizeof(longp) - 8);
    longp[sizeof(longp) - 1] = '\0';
    assert_false(tn_manifest_path_ok(longp));
    longp[TN_MANIFEST_PATH_MAX] = '\0';
    assert_true(tn_manifest_path_ok(longp));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decodes_the_servers_document),
        cmocka_unit_test(test_refuses_bad_documents),
        cmocka_unit_test(test_path_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
