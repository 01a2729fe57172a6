/* Configuration: defaults, the precedence rule (default < file < env <
 * flag), value syntax, and errors that name the option and its range. */
#include "core/platform.h"

#include "testutil.h"

#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_defaults(void **state)
{
    (void)state;
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    assert_string_equal(cfg.data_path, "data");
    assert_int_equal(cfg.segment_bytes, 64 * 1024 * 1024);
    assert_int_equal(cfg.commit_max_requests, 64);
    assert_int_equal(cfg.commit_max_bytes, 8 * 1024 * 1024);
    assert_int_equal(cfg.commit_max_delay_ns, 1000000);
    assert_int_equal(cfg.commit_busy_poll_ns, 500000);
    assert_int_equal(cfg.commit_busy_poll_min, 8);
    assert_int_equal(cfg.wal_commit_max_records, 1024);
    assert_int_equal(cfg.durability, TN_DURABILITY_DURABLE);
    assert_int_equal(tn_config_validate(&cfg, NULL, 0), 0);
    tn_config_fini(&cfg);
}

static void test_parsers(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(tn_parse_size("64MiB", &v), 0);
    assert_int_equal(v, 64 * 1024 * 1024);
    assert_int_equal(tn_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(tn_parse_size("2G", &v), 0);
    assert_int_equal(v, 2LL * 1024 * 1024 * 1024);
    assert_int_equal(tn_parse_size("12XB", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_size("-1", &v), TN_ERANGE);
    assert_int_equal(tn_parse_size("99999999999999999999", &v), TN_ERANGE);
    assert_int_equal(tn_parse_duration_ns("1ms", &v), 0);
    assert_int_equal(v, 1000000);
    assert_int_equal(tn_parse_duration_ns("1m30s", &v), 0);
    assert_int_equal(v, 90LL * 1000000000);
    assert_int_equal(tn_parse_duration_ns("500us", &v), 0);
    assert_int_equal(v, 500000);
    assert_int_equal(tn_parse_duration_ns("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tn_parse_duration_ns("1.5s", &v), 0);
    assert_int_equal(v, 1500000000LL);
    assert_int_equal(tn_parse_duration_ns("0.25ms", &v), 0);
    assert_int_equal(v, 250000);
    assert_int_equal(tn_parse_duration_ns("1m0.5s", &v), 0);
    assert_int_equal(v, 60500000000LL);
    assert_int_equal(tn_parse_duration_ns("1.0000000001s", &v), 0); /* past 9 digits: cut */
    assert_int_equal(v, 1000000000LL);
    assert_int_equal(tn_parse_duration_ns("1.s", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("10", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("5parsecs", &v), TN_ECONFIG);
    assert_int_equal(tn_parse_duration_ns("unlimited", &v), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(tn_parse_size("unlimited", &v), 0);
    assert_int_equal(v, INT64_MAX);
    bool b;
    assert_int_equal(tn_parse_bool("yes", &b), 0);
    assert_true(b);
    assert_int_equal(tn_parse_bool("off", &b), 0);
    assert_false(b);
    assert_int_equal(tn_parse_bool("maybe", &b), TN_ECONFIG);
}

static char *write_tmp(const char *text)
{
    char *path = strdup("/tmp/tern-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_precedence(void **state)
{
    (void)state;
    char *file = write_tmp("# a comment\n"
                           "data_path = \"/from/file\"\n"
                           "segment-bytes = 1MiB\n"
                           "commit_max_requests = 10   # trailing comment\n"
                           "durability = relaxed\n");
    char cfgflag[256];
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", file);
    char *argv[] = {"ternd", cfgflag, "--commit-max-requests", "30", NULL};
    char *envp[] = {"TERN_SEGMENT_BYTES=2MiB", "TERN_COMMIT_MAX_REQUESTS=20", "HOME=/x",
                    "TERN_UNRELATED_THING=1", NULL};
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    int rc = tn_config_load(&cfg, 4, argv, envp, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    assert_string_equal(cfg.data_path, "/from/file");     /* file over default */
    assert_int_equal(cfg.segment_bytes, 2 * 1024 * 1024); /* env over file */
    assert_int_equal(cfg.commit_max_requests, 30);        /* flag over env */
    assert_int_equal(cfg.durability, TN_DURABILITY_RELAXED);
    tn_config_fini(&cfg);
    unlink(file);
    free(file);
}

static void expect_error(int argc, char **argv, char **envp, const char *must_contain1,
                         const char *must_contain2)
{
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    assert_int_equal(tn_config_load(&cfg, argc, argv, envp, err, sizeof(err)), TN_ECONFIG);
    if (strstr(err, must_contain1) == NULL || strstr(err, must_contain2) == NULL)
        fail_msg("error \"%s\" lacks \"%s\" or \"%s\"", err, must_contain1, must_contain2);
    tn_config_fini(&cfg);
}

static void test_errors_name_key_and_range(void **state)
{
    (void)state;
    char *a1[] = {"ternd", "--segment-bytes=12", NULL};
    expect_error(2, a1, NULL, "segment-bytes", "64KiB..1GiB");
    char *a2[] = {"ternd", "--commit-max-requests=lots", NULL};
    expect_error(2, a2, NULL, "commit-max-requests", "1..65536");
    char *a2b[] = {"ternd", "--commit-busy-poll=20ms", NULL};
    expect_error(2, a2b, NULL, "commit-busy-poll", "0..10ms");
    char *a3[] = {"ternd", "--durability=eventually", NULL};
    expect_error(2, a3, NULL, "durability", "durable, write_ack, relaxed");
    char *a3b[] = {"ternd", "--nsq-auth-users", "--auth-http-address=127.0.0.1:4181", NULL};
    expect_error(3, a3b, NULL, "nsq-auth-users", "auth-http-address");
    char *a3c[] = {"ternd", "--nsq-auth-users", "--security-enabled=false", NULL};
    expect_error(3, a3c, NULL, "nsq-auth-users", "security-enabled");
    char *a4[] = {"ternd", "--no-such-option=1", NULL};
    expect_error(2, a4, NULL, "unknown option", "--no-such-option");
    char *a5[] = {"ternd", NULL};
    char *e5[] = {"TERN_COMMIT_MAX_DELAY=1h", NULL};
    expect_error(1, a5, e5, "environment TERN_COMMIT_MAX_DELAY", "0..100ms");
    char *a6[] = {"ternd", "--disk-low-watermark=95", "--disk-high-watermark=90", NULL};
    expect_error(3, a6, NULL, "disk-low-watermark", "below disk-high-watermark");
    char *a7[] = {"ternd", "--data-path", NULL};
    expect_error(2, a7, NULL, "--data-path", "needs a value");
    char *a8[] = {"ternd", "stray", NULL};
    expect_error(2, a8, NULL, "unexpected argument", "stray");

    char *file = write_tmp("segment_bytes = 64MiB\nbogus line\n");
    char flag[256];
    snprintf(flag, sizeof(flag), "--config=%s", file);
    char *a9[] = {"ternd", flag, NULL};
    expect_error(2, a9, NULL, ":2", "name = value");
    unlink(file);
    free(file);

    char *a10[] = {"ternd", "--config=/nonexistent/tern.conf", NULL};
    expect_error(2, a10, NULL, "/nonexistent/tern.conf", "cannot open");
}

static void test_listener_addresses(void **state)
{
    (void)state;
    /* Defaults are resolved by init alone (IP literals never block). */
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    assert_string_equal(cfg.tcp_listen.addr.name, "127.0.0.1:4150");
    assert_string_equal(cfg.tcp_listen.addr.option, "tcp-address");
    assert_string_equal(cfg.http_listen.addr.name, "127.0.0.1:4151");
    assert_string_equal(cfg.raft_listen.addr.name, "127.0.0.1:4153");
    assert_int_equal(cfg.metrics_listen.addr.sa.ss_family, AF_UNSPEC); /* off */
    tn_config_fini(&cfg);

    /* nsqd's forms; a name resolves once, at the end of the load. */
    char *file = write_tmp("http_address = \"no-such-host.invalid:4151\"\n"
                           "metrics-address = \"localhost:9100\"\n");
    char cfgflag[256];
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", file);
    char *argv[] = {"ternd",
                    cfgflag,
                    "--tcp-address=:4150",
                    "--http-address=[::1]:0",
                    "--raft-address=0.0.0.0:4153",
                    NULL};
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    /* The file's name that does not resolve lost to the flag: never looked up. */
    if (tn_config_load(&cfg, 5, argv, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_string_equal(cfg.tcp_address, ":4150");
    assert_true(cfg.tcp_listen.addr.any);
    assert_string_equal(cfg.tcp_listen.addr.name, "[::]:4150");
    assert_string_equal(cfg.http_listen.addr.name, "[::1]:0");
    assert_string_equal(cfg.metrics_listen.addr.name, "127.0.0.1:9100");
    assert_string_equal(cfg.metrics_listen.addr.option, "metrics-address");
    assert_false(cfg.metrics_listen.pending);
    /* libraft takes IPv4 only: every interface is 0.0.0.0 there. */
    assert_string_equal(cfg.raft_listen.addr.name, "0.0.0.0:4153");
    tn_config_fini(&cfg);
    unlink(file);
    free(file);

    /* Each kind of mistake, with the option, its source and the value. */
    char *a1[] = {"ternd", "--tcp-address=127.0.0.1:99999", NULL};
    expect_error(2, a1, NULL,
                 "tcp-address (flag --tcp-address): \"127.0.0.1:99999\": port 99999 is out of "
                 "range 0-65535",
                 "");
    char *a2[] = {"ternd", "--http-address=localhost", NULL};
    expect_error(2, a2, NULL, "http-address (flag --http-address): \"localhost\"", "missing port");
    char *a3[] = {"ternd", "--http-address=", NULL};
    expect_error(2, a3, NULL, "http-address", "empty");
    char *a4[] = {"ternd", "--tcp-address", "4150", NULL};
    expect_error(3, a4, NULL, "tcp-address", "write :4150");
    char *a5[] = {"ternd", NULL};
    char *e5[] = {"TERN_METRICS_ADDRESS=no-such-host.invalid:9100", NULL};
    expect_error(1, a5, e5,
                 "metrics-address (environment TERN_METRICS_ADDRESS): "
                 "\"no-such-host.invalid:9100\"",
                 "does not resolve");
    char *e6[] = {"TERN_RAFT_ADDRESS=[::1]:4153", NULL};
    expect_error(1, a5, e6, "raft-address (environment TERN_RAFT_ADDRESS)", "only IPv4");
    file = write_tmp("tcp_address = \"nowhere.invalid:4150\"\n");
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", file);
    char *a7[] = {"ternd", cfgflag, NULL};
    char src[300];
    snprintf(src, sizeof(src), "tcp-address (config %s:1)", file);
    expect_error(2, a7, NULL, src, "host \"nowhere.invalid\" does not resolve");
    unlink(file);
    free(file);
}

static void test_lookupd_lists(void **state)
{
    (void)state;
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char *argv[] = {"ternd", "--lookupd-tcp-address= a:4160 ,[::1]:4160,,",
                    "--nsqlookupd-tcp-addresses=[\"b:4160\", \"[::2]:4160\"]", NULL};
    char err[512] = "";
    if (tn_config_load(&cfg, 3, argv, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    char *list = tn_config_lookupds(&cfg);
    assert_non_null(list);
    assert_string_equal(list, "a:4160,[::1]:4160,b:4160,[::2]:4160");
    tn_free(list);
    tn_config_fini(&cfg);

    assert_int_equal(tn_config_init(&cfg), 0);
    list = tn_config_lookupds(&cfg);
    assert_string_equal(list, "");
    tn_free(list);
    tn_config_fini(&cfg);

    char *a1[] = {"ternd", "--lookupd-tcp-address=a:4160,b", NULL};
    expect_error(2, a1, NULL, "lookupd-tcp-address (flag --lookupd-tcp-address): \"b\"",
                 "missing port");
    char *a2[] = {"ternd", "--lookupd-tcp-address=:4160", NULL};
    expect_error(2, a2, NULL, "lookupd-tcp-address", "missing host");
    char *a3[] = {"ternd", "--nsqlookupd-tcp-addresses=[\"a:0\"]", NULL};
    expect_error(2, a3, NULL, "nsqlookupd-tcp-addresses", "port 0 cannot be dialled");
}

static int nsq_auth_after(int argc, char **argv)
{
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    if (tn_config_load(&cfg, argc, argv, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    int v = cfg.nsq_auth;
    tn_config_fini(&cfg);
    return v;
}

static void test_nsq_auth(void **state)
{
    (void)state;
    /* Not given: derived from the two older options. */
    char *a0[] = {"ternd", NULL};
    assert_int_equal(nsq_auth_after(1, a0), TN_NSQ_AUTH_OPEN);
    char *a1[] = {"ternd", "--nsq-auth-users", NULL};
    assert_int_equal(nsq_auth_after(2, a1), TN_NSQ_AUTH_USERS);
    char *a2[] = {"ternd", "--auth-http-address=127.0.0.1:4181", NULL};
    assert_int_equal(nsq_auth_after(2, a2), TN_NSQ_AUTH_EXTERNAL);
    /* Given, alone or agreeing with them. */
    char *a3[] = {"ternd", "--nsq-auth=users", NULL};
    assert_int_equal(nsq_auth_after(2, a3), TN_NSQ_AUTH_USERS);
    char *a4[] = {"ternd", "--nsq-auth=users", "--nsq-auth-users=true", NULL};
    assert_int_equal(nsq_auth_after(3, a4), TN_NSQ_AUTH_USERS);
    char *a5[] = {"ternd", "--nsq-auth=external", "--auth-http-address=127.0.0.1:4181", NULL};
    assert_int_equal(nsq_auth_after(3, a5), TN_NSQ_AUTH_EXTERNAL);
    char *a6[] = {"ternd", "--nsq-auth=open", NULL};
    assert_int_equal(nsq_auth_after(2, a6), TN_NSQ_AUTH_OPEN);
    /* An empty value is "not given" again. */
    char *a7[] = {"ternd", "--nsq-auth=open", "--nsq-auth=", "--nsq-auth-users", NULL};
    assert_int_equal(nsq_auth_after(4, a7), TN_NSQ_AUTH_USERS);

    /* Contradictions name both options. */
    char *b1[] = {"ternd", "--nsq-auth=open", "--auth-http-address=127.0.0.1:4181", NULL};
    expect_error(3, b1, NULL, "nsq-auth=open", "auth-http-address");
    char *b2[] = {"ternd", "--nsq-auth=open", "--nsq-auth-users", NULL};
    expect_error(3, b2, NULL, "nsq-auth=open", "nsq-auth-users");
    char *b3[] = {"ternd", "--nsq-auth=external", NULL};
    expect_error(2, b3, NULL, "nsq-auth=external", "needs auth-http-address");
    char *b4[] = {"ternd", "--nsq-auth=users", "--auth-http-address=127.0.0.1:4181", NULL};
    expect_error(3, b4, NULL, "nsq-auth=users", "auth-http-address");
    char *b5[] = {"ternd", "--nsq-auth=external", "--auth-http-address=a:1", "--nsq-auth-users",
                  NULL};
    expect_error(4, b5, NULL, "nsq-auth=external", "nsq-auth-users");
    char *b6[] = {"ternd", "--nsq-auth=users", "--security-enabled=false", NULL};
    expect_error(3, b6, NULL, "nsq-auth=users", "security-enabled");
    char *b7[] = {"ternd", "--nsq-auth=ldap", NULL};
    expect_error(2, b7, NULL, "nsq-auth (flag --nsq-auth)", "open, users, external");
    char *b8[] = {"ternd", NULL};
    char *e8[] = {"TERN_NSQ_AUTH=external", NULL};
    expect_error(1, b8, e8, "nsq-auth=external", "auth-http-address");
}

static char *capture(void (*print)(FILE *, const tn_config_t *), const tn_config_t *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    print(f, cfg);
    fclose(f);
    return buf;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_help_groups_and_formats(void **state)
{
    (void)state;
    char *help = NULL;
    size_t hlen = 0;
    FILE *f = open_memstream(&help, &hlen);
    tn_config_print_help(f, "ternd");
    fclose(f);
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    char *printed = capture(tn_config_print, &cfg);

    /* Every option --print-config writes is in --help once, under an
     * area, with its default written the way --print-config writes it
     * ("" as (none)). */
    assert_null(strstr(help, "Other options"));
    char *line = printed;
    size_t noptions = 0;
    while (*line != '\0') {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        char *eq = strstr(line, " = ");
        assert_non_null(eq);
        *eq = '\0';
        char *value = eq + 3;
        size_t vl = strlen(value);
        if (vl >= 2 && value[0] == '"') {
            value[vl - 1] = '\0';
            value++;
        }
        char head[160], def[600];
        snprintf(head, sizeof(head), "\n  --%s ", line);
        if (count(help, head) != 1)
            fail_msg("--help shows --%s %zu times", line, count(help, head));
        const char *at = strstr(help, head);
        const char *eol = strchr(at + 1, '\n');
        snprintf(def, sizeof(def), "(default %s", value[0] != '\0' ? value : "(none)");
        const char *d = strstr(at, def);
        if (d == NULL || d > eol)
            fail_msg("--%s: %.*s lacks %s", line, (int)(eol - at), at, def);
        noptions++;
        line = nl + 1;
    }
    assert_true(noptions > 50); /* the loop read the whole list */
    assert_non_null(strstr(help, "\n  --config (default (none))"));

    const char *areas[] = {"\nGeneral:\n",      "\nListeners and addresses:\n",
                           "\nStorage:\n",      "\nDelivery:\n",
                           "\nNSQ protocol:\n", "\nHTTP:\n",
                           "\nSecurity:\n",     "\nMetastore:\n",
                           "\nLimits:\n"};
    const char *prev = help;
    for (size_t i = 0; i < TN_ARRAY_SIZE(areas); i++) {
        const char *a = strstr(help, areas[i]);
        if (a == NULL || a < prev)
            fail_msg("area %s missing or out of order", areas[i]);
        prev = a;
    }
    /* Human units everywhere. */
    assert_null(strstr(help, "9223372036854775807"));
    assert_non_null(strstr(help, "--retention (default 168h; range 0..unlimited)"));
    assert_non_null(strstr(help, "--max-msg-timeout (default 15m; range 1s..24h)"));
    assert_non_null(strstr(help, "--tail-cache-size (default 64MiB; range 0..unlimited)"));
    assert_non_null(strstr(help, "--metrics-address host:port (default (none))"));
    /* nsqd's no-op flags, and the environment. */
    for (size_t i = 0; i < tn_config_nsqd_ignored_count; i++) {
        char flag[160];
        snprintf(flag, sizeof(flag), "\n  --%s\n", tn_config_nsqd_ignored[i].name);
        if (count(help, flag) != 1)
            fail_msg("--help lacks the nsqd flag %s", flag);
    }
    assert_non_null(strstr(help, "\n  TERN_CONFIG\n"));
    assert_non_null(strstr(help, "\n  TERN_<OPTION>\n"));
    assert_non_null(strstr(help, "\n  TERN_ADMIN_PASSWORD\n"));
    assert_null(strstr(help, "TERN_CLUSTER_SECRET"));
    /* No line runs past 80 columns but the option heads. */
    for (const char *p = help; *p != '\0';) {
        const char *e = strchr(p, '\n');
        assert_non_null(e);
        if (e - p > 80 && strncmp(p, "  --", 4) != 0)
            fail_msg("long help line: %.*s", (int)(e - p), p);
        p = e + 1;
    }
    free(printed);
    free(help);
    tn_config_fini(&cfg);
}

static void test_help_lists_every_option(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tn_config_print_help(f, "ternd");
    fclose(f);
    const char *names[] = {"--data-path",
                           "--segment-bytes",
                           "--commit-max-requests",
                           "--commit-max-bytes",
                           "--commit-max-delay",
                           "--commit-busy-poll",
                           "--commit-busy-poll-min",
                           "--durability",
                           "--relaxed-sync-messages",
                           "--wal-commit-max-records",
                           "--checkpoint-every",
                           "--disk-high-watermark",
                           "--log-level",
                           "--max-msg-size",
                           "--help",
                           "default 64MiB"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(names); i++) {
        if (strstr(buf, names[i]) == NULL)
            fail_msg("--help lacks %s", names[i]);
    }
    free(buf);

    /* The printed configuration loads back to the same values. */
    tn_config_t cfg, back;
    assert_int_equal(tn_config_init(&cfg), 0);
    assert_int_equal(tn_config_init(&back), 0);
    char *argv[] = {"ternd",
                    "--commit-max-delay=750us",
                    "--segment-bytes=3MiB",
                    "--commit-busy-poll=0",
                    "--retention=unlimited",
                    "--msg-timeout=90s",
                    "--max-msg-timeout=2h",
                    NULL};
    assert_int_equal(tn_config_load(&cfg, 7, argv, NULL, NULL, 0), 0);
    char path[] = "/tmp/tern-print-XXXXXX";
    int fd = mkstemp(path);
    f = fdopen(fd, "w");
    tn_config_print(f, &cfg);
    fclose(f);
    char flag[256];
    snprintf(flag, sizeof(flag), "--config=%s", path);
    char *argv2[] = {"ternd", flag, NULL};
    char err[512] = "";
    int rc = tn_config_load(&back, 2, argv2, NULL, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    assert_int_equal(back.commit_max_delay_ns, 750000);
    assert_int_equal(back.commit_busy_poll_ns, 0);
    assert_int_equal(back.segment_bytes, 3 * 1024 * 1024);
    assert_int_equal(back.retention_ns, INT64_MAX);
    assert_int_equal(back.msg_timeout_ns, 90LL * 1000000000);
    assert_int_equal(back.max_msg_timeout_ns, 7200LL * 1000000000);
    unlink(path);
    tn_config_fini(&cfg);
    tn_config_fini(&back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_errors_name_key_and_range),
        cmocka_unit_test(test_listener_addresses),
        cmocka_unit_test(test_lookupd_lists),
        cmocka_unit_test(test_nsq_auth),
        cmocka_unit_test(test_help_groups_and_formats),
        cmocka_unit_test(test_help_lists_every_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
