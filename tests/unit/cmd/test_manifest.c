/* The backup manifest decoder and its path rule (src/cmd/ternctl/manifest.c):
 * what api/backup.c writes decodes; every malformed, out-of-range or
 * escaping document is refused with a message naming the field (the
 * optional list of partitions isolated for damage too); a file is found
 * by its path; restore's
 * channel check says each channel file that does not pair up, also in a
 * backup of many files. */
#include "core/platform.h"

#include "testutil.h"

#include "cmd/ternctl/manifest.h"
#include "core/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    assert_int_equal(m.ttl_ms, 600000);
    assert_int_equal(m.nvoters, 2);
    assert_int_equal(m.voters[1].id, 2);
    assert_string_equal(m.voters[1].raft_addr, "127.0.0.1:4253");
    assert_int_equal(m.nfiles, 3);
    /* Sorted by path. */
    assert_string_equal(m.files[0].path, "FORMAT");
    assert_int_equal(m.files[0].len, 15);
    assert_string_equal(m.files[2].path, "topics/t1/0/00000000000000000000.log");
    assert_int_equal(m.files[2].crc, 3421037752u);
    /* Found by path (restore: whether a channel's stamp was copied). */
    assert_ptr_equal(tn_manifest_find(&m, "FORMAT"), &m.files[0]);
    assert_ptr_equal(tn_manifest_find(&m, "ingress/checkpoint"), &m.files[1]);
    assert_ptr_equal(tn_manifest_find(&m, "topics/t1/0/00000000000000000000.log"), &m.files[2]);
    assert_null(tn_manifest_find(&m, "topics/t1/c.cstamp"));
    assert_null(tn_manifest_find(&m, "A"));
    assert_null(tn_manifest_find(&m, "z"));
    tn_manifest_fini(&m);
}

/* The partitions the node had isolated for damage (api/backup.c copies
 * them whole): decoded when there, none when absent (an older server). */
static void test_decodes_isolated_partitions(void **state)
{
    (void)state;
    const char *doc =
        HEAD "\"files\":[{\"path\":\"topics/t1/0/00000000000000000000.log\","
             "\"length\":144,\"crc32c\":1}],\"isolated\":[{\"topic\":\"t1\",\"partition\":0,"
             "\"error\":\"partition t1/0: segment /d/x.log: bad record at byte 9 in a sealed "
             "segment: data failed its checksum or structure check\"}]}";
    tn_manifest_t m;
    char err[300];
    assert_int_equal(parse(doc, &m, err, sizeof(err)), 0);
    assert_int_equal(m.nisolated, 1);
    assert_string_equal(m.isolated[0].topic, "t1");
    assert_int_equal(m.isolated[0].partition, 0);
    assert_non_null(strstr(m.isolated[0].error, "in a sealed segment"));
    tn_manifest_fini(&m);
    assert_int_equal(parse(HEAD "\"files\":[],\"isolated\":[]}", &m, err, sizeof(err)), 0);
    assert_int_equal(m.nisolated, 0);
    tn_manifest_fini(&m);
    assert_int_equal(parse(HEAD "\"files\":[]}", &m, err, sizeof(err)), 0);
    assert_int_equal(m.nisolated, 0);
    assert_null(m.isolated);
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
    refused(HEAD "\"files\":[],\"isolated\":{}}", "isolated is not an array");
    refused("{\"format\":\"tern-backup 1\",\"storage_format\":1,\"session\":\"a\",\"node_id\":1,"
            "\"created_ms\":1,\"ttl_ms\":\"10m\"}",
            "ttl_ms");
    /* More entries than files: no such backup. */
    refused(HEAD "\"files\":[],\"isolated\":[{\"topic\":\"t\",\"partition\":0,\"error\":\"\"}]}",
            "isolated is not an array");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":1,\"crc32c\":0}],"
                 "\"isolated\":[{\"topic\":\"t\",\"partition\":-1,\"error\":\"\"}]}",
            "isolated entry 0");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":1,\"crc32c\":0}],"
                 "\"isolated\":[{\"topic\":\"\",\"partition\":0,\"error\":\"\"}]}",
            "isolated entry 0");
    refused(HEAD "\"files\":[{\"path\":\"FORMAT\",\"length\":1,\"crc32c\":0}],"
                 "\"isolated\":[{\"topic\":\"t\",\"partition\":0}]}",
            "isolated entry 0");
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

/* A manifest of the given paths (sorted, as the decoder leaves them);
 * the caller frees m->files and each path. */
static void files_of(tn_manifest_t *m, char **paths, size_t n)
{
    memset(m, 0, sizeof(*m));
    m->files = calloc(n, sizeof(*m->files));
    assert_non_null(m->files);
    for (size_t i = 0; i < n; i++)
        m->files[i].path = paths[i];
    m->nfiles = n;
}

/* tn_manifest_check_channels on paths: how many it said, its text in out. */
static long check(char **paths, size_t n, char *out, size_t outlen)
{
    tn_manifest_t m;
    files_of(&m, paths, n);
    FILE *f = fmemopen(out, outlen, "w");
    assert_non_null(f);
    long said = tn_manifest_check_channels(&m, f);
    fclose(f);
    free(m.files);
    return said;
}

static void test_channel_check_says_what_does_not_pair(void **state)
{
    (void)state;
    char *ok[] = {"FORMAT",
                  "topics/t/0/00000000000000000000.log",
                  "topics/t/0/c.ckpt",
                  "topics/t/0/c.wal",
                  "topics/t/1/00000000000000000000.log",
                  "topics/t/1/c.ckpt",
                  "topics/t/1/c.wal",
                  "topics/t/c.cstamp"};
    char out[4096] = "";
    assert_int_equal(check(ok, sizeof(ok) / sizeof(ok[0]), out, sizeof(out)), 0);
    assert_string_equal(out, "");
    char *odd[] = {"topics/t/0/00000000000000000000.log",
                   "topics/t/0/c.ckpt",
                   "topics/t/0/c.wal",
                   "topics/t/0/d.ckpt",
                   "topics/t/1/00000000000000000000.log",
                   "topics/t/1/c.wal",
                   "topics/t/2/00000000000000000000.log",
                   "topics/t/2/x.wal",
                   "topics/u/0/00000000000000000000.log"};
    assert_int_equal(check(odd, sizeof(odd) / sizeof(odd[0]), out, sizeof(out)), 6);
    assert_non_null(strstr(out, "partition t/0: channel d has a checkpoint but no WAL"));
    assert_non_null(strstr(out, "partition t/1: channel c has a WAL but no checkpoint in the "
                                "backup: ternd makes"));
    assert_non_null(strstr(out, "partition t/2: channel x has a WAL but no checkpoint in the "
                                "backup, nor on any other partition"));
    assert_non_null(strstr(out, "partition t/1: no file of channel d,"));
    assert_non_null(strstr(out, "partition t/2: no file of channel c,"));
    assert_non_null(strstr(out, "partition t/2: no file of channel d,"));
    assert_null(strstr(out, "partition u/"));
    /* A replicated partition's copy (an epochs file) without the channel:
     * a follower's, which gets it from its leader. Not said. */
    char *copy[] = {"topics/r/0/00000000000000000000.log",
                    "topics/r/0/c.ckpt",
                    "topics/r/0/c.wal",
                    "topics/r/0/epochs",
                    "topics/r/1/00000000000000000000.log",
                    "topics/r/1/epochs",
                    "topics/r/2/00000000000000000000.log"};
    out[0] = '\0';
    assert_int_equal(check(copy, sizeof(copy) / sizeof(copy[0]), out, sizeof(out)), 1);
    assert_non_null(strstr(out, "partition r/2: no file of channel c,"));
    assert_null(strstr(out, "partition r/1"));
}

/* A backup of one topic of 512 partitions with 20 channels each (20,992
 * files) is checked at once: the pairwise search this replaced ran
 * about 10^10 comparisons on it (a 17,600-file backup took 210 s). */
static void test_channel_check_many_files(void **state)
{
    (void)state;
    enum { PARTS = 512, CHANS = 20 };
    size_t cap = PARTS * (1 + 2 * CHANS), n = 0;
    char **paths = calloc(cap, sizeof(*paths));
    assert_non_null(paths);
    for (uint32_t p = 0; p < PARTS; p++) {
        char b[64];
        snprintf(b, sizeof(b), "topics/t/%" PRIu32 "/00000000000000000000.log", p);
        paths[n++] = strdup(b);
        for (int c = 0; c < CHANS; c++) {
            if (p == 300 && c == 7)
                continue; /* neither file: said for partition 300 */
            snprintf(b, sizeof(b), "topics/t/%" PRIu32 "/c%02d.ckpt", p, c);
            paths[n++] = strdup(b);
            if (p == 5 && c == 3)
                continue; /* the checkpoint alone */
            snprintf(b, sizeof(b), "topics/t/%" PRIu32 "/c%02d.wal", p, c);
            paths[n++] = strdup(b);
        }
    }
    char out[4096] = "";
    assert_int_equal(check(paths, n, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "partition t/5: channel c03 has a checkpoint but no WAL"));
    assert_non_null(strstr(out, "partition t/300: no file of channel c07,"));
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

/* restore's removal of an earlier topic's directory: a symbolic link in
 * its place, to a directory outside the data path, is removed as a link;
 * the directory it points at and its files survive. So does one a link
 * in the directory points at. Before, the link was followed and the
 * outside directory's files unlinked. */
static void test_remove_dir_follows_no_link(void **state)
{
    (void)state;
    char root[] = "/tmp/tern-rmdir-XXXXXX";
    assert_non_null(mkdtemp(root));
    char outside[128], victim[160], data[128], tdir[160], link_in[192], pause[192];
    snprintf(outside, sizeof(outside), "%s/outside", root);
    snprintf(victim, sizeof(victim), "%s/pause", outside);
    snprintf(data, sizeof(data), "%s/data", root);
    snprintf(tdir, sizeof(tdir), "%s/t", data);
    assert_int_equal(mkdir(outside, 0700), 0);
    assert_int_equal(mkdir(data, 0700), 0);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("keep", f);
    fclose(f);
    /* The topic directory is a link to the outside one. */
    assert_int_equal(symlink(outside, tdir), 0);
    int rc = tn_manifest_remove_dir(tdir);
    printf("removing a linked topic directory: %s, outside file %s\n", tn_err_name(rc),
           access(victim, F_OK) == 0 ? "kept" : "gone");
    assert_int_equal(rc, 0);
    assert_int_equal(access(victim, F_OK), 0);
    struct stat st;
    assert_int_not_equal(lstat(tdir, &st), 0);
    /* A directory holding a link to the outside one, beside a file. */
    assert_int_equal(mkdir(tdir, 0700), 0);
    snprintf(link_in, sizeof(link_in), "%s/c", tdir);
    snprintf(pause, sizeof(pause), "%s/pause", tdir);
    assert_int_equal(symlink(outside, link_in), 0);
    f = fopen(pause, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(tn_manifest_remove_dir(tdir), 0);
    assert_int_not_equal(lstat(tdir, &st), 0);
    assert_int_equal(access(victim, F_OK), 0);
    assert_int_equal(tn_manifest_remove_dir(tdir), 0); /* gone: nothing to do */
    unlink(victim);
    rmdir(outside);
    rmdir(data);
    rmdir(root);
}

/* A manifest nested a million deep (hostile, or any file put in its
 * place): refused with a message. Before, yajl built the tree and its
 * yajl_tree_free recursed once per level: ternctl restore died of a
 * stack overflow (SIGSEGV) instead of naming the file. */
/* depth '[' then as many ']' (the caller frees it). */
static char *nested(size_t depth)
{
    char *doc = malloc(2 * depth + 1);
    assert_non_null(doc);
    memset(doc, '[', depth);
    memset(doc + depth, ']', depth);
    doc[2 * depth] = '\0';
    return doc;
}

static void test_refuses_deep_nesting(void **state)
{
    (void)state;
    size_t depth = 1000000;
    char *doc = nested(depth);
    tn_manifest_t m;
    char err[300];
    int rc = parse(doc, &m, err, sizeof(err));
    printf("a manifest nested %zu deep: %s (%s)\n", depth, tn_err_name(rc), err);
    assert_int_equal(rc, UV_EINVAL);
    assert_non_null(strstr(err, "nested deeper"));
    tn_manifest_fini(&m);
    /* An object in an array in an object... too. */
    size_t n = 0;
    for (size_t i = 0; i < depth / 8; i++)
        n += (size_t)sprintf(doc + n, "{\"a\":[");
    for (size_t i = 0; i < depth / 8; i++)
        n += (size_t)sprintf(doc + n, "]}");
    assert_true(n <= 2 * depth);
    assert_int_equal(parse(doc, &m, err, sizeof(err)), UV_EINVAL);
    assert_non_null(strstr(err, "nested deeper"));
    tn_manifest_fini(&m);
    free(doc);
}

/* backup.json: what `ternctl backup` writes decodes (and a set from
 * before sets had an id); anything else is refused with a message. */
static void set_refused(const char *doc, const char *want)
{
    tn_manifest_set_t set;
    char err[200] = "";
    int rc = tn_manifest_set_parse(doc, strlen(doc), &set, err, sizeof(err));
    if (rc != UV_EINVAL || strstr(err, want) == NULL) {
        fprintf(stderr, "set %.80s\n  rc %d err \"%s\", wanted \"%s\"\n", doc, rc, err, want);
        fail();
    }
    assert_int_equal(set.n, 0);
}

static void test_set(void **state)
{
    (void)state;
    tn_manifest_set_t set;
    char err[200];
    const char *doc =
        "{\"format\":\"tern-backup-set 1\",\"id\":\"0123456789abcdef0123456789abcdef\","
        "\"metastore_from\":2,\"nodes\":[1,2,3]}\n";
    assert_int_equal(tn_manifest_set_parse(doc, strlen(doc), &set, err, sizeof(err)), 0);
    assert_int_equal(set.n, 3);
    assert_int_equal(set.ids[2], 3);
    assert_int_equal(set.meta_from, 2);
    assert_string_equal(set.id, "0123456789abcdef0123456789abcdef");
    doc = "{\"format\":\"tern-backup-set 1\",\"metastore_from\":1,\"nodes\":[1]}";
    assert_int_equal(tn_manifest_set_parse(doc, strlen(doc), &set, err, sizeof(err)), 0);
    assert_string_equal(set.id, "");
    set_refused("", "not a backup set");
    set_refused("{\"format\":\"tern-backup-set 2\",\"metastore_from\":1,\"nodes\":[1]}",
                "not a backup set");
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":0,\"nodes\":[1]}",
                "not a backup set");
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":1,\"nodes\":[]}",
                "not a backup set");
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":1,\"nodes\":[1,1]}",
                "names node 1 twice");
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":1,\"nodes\":[1,-2]}",
                "not a positive integer");
    /* Member ids are 32-bit (meta/partstate.h; the restore's rewrite
     * refuses the others): one above is refused as it is read. */
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":1,"
                "\"nodes\":[1,4294967296]}",
                "names node id 4294967296, above 4294967295 (member ids are 32-bit)");
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":4294967297,"
                "\"nodes\":[4294967297]}",
                "names node id 4294967297, above 4294967295");
    doc = "{\"format\":\"tern-backup-set 1\",\"metastore_from\":4294967295,"
          "\"nodes\":[4294967295]}";
    assert_int_equal(tn_manifest_set_parse(doc, strlen(doc), &set, err, sizeof(err)), 0);
    assert_int_equal(set.ids[0], UINT32_MAX);
    set_refused("{\"format\":\"tern-backup-set 1\",\"metastore_from\":3,\"nodes\":[1,2]}",
                "metastore_from is not one of its nodes");
    set_refused("{\"format\":\"tern-backup-set 1\",\"id\":\"ABCDEF0123456789\","
                "\"metastore_from\":1,\"nodes\":[1]}",
                "lowercase hex");
    char many[1024];
    int n = snprintf(many, sizeof(many),
                     "{\"format\":\"tern-backup-set 1\",\"metastore_from\":1,"
                     "\"nodes\":[1");
    for (int i = 2; i <= TN_MANIFEST_SET_MAX_NODES + 1; i++)
        n += snprintf(many + n, sizeof(many) - (size_t)n, ",%d", i);
    snprintf(many + n, sizeof(many) - (size_t)n, "]}");
    set_refused(many, "more than 64 nodes");
    /* Nested a million deep: refused, not a stack overflow. */
    char *deep = nested(500000);
    set_refused(deep, "nested deeper than 512 levels");
    free(deep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decodes_the_servers_document),
        cmocka_unit_test(test_decodes_isolated_partitions),
        cmocka_unit_test(test_refuses_bad_documents),
        cmocka_unit_test(test_path_rule),
        cmocka_unit_test(test_channel_check_says_what_does_not_pair),
        cmocka_unit_test(test_channel_check_many_files),
        cmocka_unit_test(test_remove_dir_follows_no_link),
        cmocka_unit_test(test_refuses_deep_nesting),
        cmocka_unit_test(test_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
