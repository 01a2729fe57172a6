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
#include <sys/stat.h>
#include <unistd.h>

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
    assert_int_equal(cfg.commit_busy_poll_cost_ns, 2000);
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
                    "--allow-plaintext-raft",
                    NULL};
    assert_int_equal(tn_config_init(&cfg), 0);
    char err[512] = "";
    /* The file's name that does not resolve lost to the flag: never looked up. */
    if (tn_config_load(&cfg, 6, argv, NULL, err, sizeof(err)) != 0)
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
                           "\nCluster:\n",      "\nLimits:\n"};
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
    assert_non_null(strstr(help, "\n  TERN_CLUSTER_SECRET\n"));
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
                           "--commit-busy-poll-cost",
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

/* --- the cluster options ------------------------------------------------ */

#define SECRET40 "0123456789abcdef0123456789abcdef01234567"

/* Load argv (NULL-terminated) and envp into cfg; the error, if any, into
 * err. */
static int load(tn_config_t *cfg, char **argv, char **envp, char *err, size_t errlen)
{
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    assert_int_equal(tn_config_init(cfg), 0);
    err[0] = '\0';
    return tn_config_load(cfg, argc, argv, envp, err, errlen);
}

static void expect_refused(char **argv, char **envp, const char *must1, const char *must2)
{
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    expect_error(argc, argv, envp, must1, must2);
}

static void expect_loads(char **argv, char **envp)
{
    tn_config_t cfg;
    char err[512];
    if (load(&cfg, argv, envp, err, sizeof(err)) != 0)
        fail_msg("refused: %s", err);
    tn_config_fini(&cfg);
}

/* A file of text with the given mode. Free the path. */
static char *write_mode(const char *text, size_t len, mode_t mode)
{
    char *path = strdup("/tmp/tern-secret-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static void test_cluster_defaults(void **state)
{
    (void)state;
    tn_config_t cfg;
    assert_int_equal(tn_config_init(&cfg), 0);
    assert_string_equal(cfg.advertise_address, "");
    assert_string_equal(cfg.peers_text, "");
    assert_int_equal(cfg.cluster_heartbeat_interval_ns, 5000000000LL);
    assert_int_equal(cfg.cluster_dead_after_ns, 30000000000LL);
    assert_int_equal(cfg.cluster_rpc_dial_timeout_ns, 1000000000LL);
    assert_int_equal(cfg.cluster_rpc_timeout_ns, 5000000000LL);
    assert_int_equal(cfg.cluster_join_interval_ns, 2000000000LL);
    assert_false(cfg.allow_plaintext_raft);
    assert_false(cfg.allow_insecure_cluster);
    tn_config_fini(&cfg);

    /* A lone secured node: a generated 32-byte secret, a new one each
     * process; the HTTP address is advertised; Raft id node-id + 1. */
    char *argv[] = {"ternd", NULL};
    char err[512];
    tn_config_t a, b;
    assert_int_equal(load(&a, argv, NULL, err, sizeof(err)), 0);
    assert_int_equal(load(&b, argv, NULL, err, sizeof(err)), 0);
    assert_true(a.cluster_secret_generated);
    assert_int_equal(a.cluster_secret_len, 32);
    assert_int_equal(b.cluster_secret_len, 32);
    assert_memory_not_equal(a.cluster_secret, b.cluster_secret, 32);
    assert_false(tn_config_clustered(&a));
    assert_int_equal(tn_config_raft_id(&a), 1);
    assert_string_equal(a.advertise, "127.0.0.1:4151");
    assert_int_equal(a.npeers, 0);
    assert_int_equal(a.njoin, 0);
    /* --print-config shows no secret (nor any trace of one). */
    char *printed = capture(tn_config_print, &a);
    assert_null(strstr(printed, "cluster-secret ="));
    assert_non_null(strstr(printed, "cluster-secret-file = \"\"\n"));
    free(printed);
    /* fini wipes it. */
    tn_config_fini(&a);
    uint8_t zero[TN_CONFIG_SECRET_MAX] = {0};
    assert_memory_equal(a.cluster_secret, zero, sizeof(zero));
    assert_int_equal(a.cluster_secret_len, 0);
    tn_config_fini(&b);

    /* Security off: no secret, none generated (node RPC is open, and
     * ternd warns so). A wildcard or port-0 HTTP address advertises
     * nothing on a lone node. */
    char *off[] = {"ternd", "--security-enabled=false", "--http-address=:4151", NULL};
    assert_int_equal(load(&a, off, NULL, err, sizeof(err)), 0);
    assert_int_equal(a.cluster_secret_len, 0);
    assert_false(a.cluster_secret_generated);
    assert_string_equal(a.advertise, "");
    tn_config_fini(&a);
    char *zero_port[] = {"ternd", "--http-address=127.0.0.1:0", "--node-id=7", NULL};
    assert_int_equal(load(&a, zero_port, NULL, err, sizeof(err)), 0);
    assert_string_equal(a.advertise, "");
    assert_int_equal(tn_config_raft_id(&a), 8);
    tn_config_fini(&a);
}

static void test_cluster_peers(void **state)
{
    (void)state;
    char *env[] = {"TERN_CLUSTER_SECRET=" SECRET40, NULL};
    char *argv[] = {"ternd",
                    "--node-id=2",
                    "--raft-address=LocalHost:5002",
                    "--http-address=127.0.0.1:5102",
                    "--peers= 1@127.0.0.1:5001, 2@localhost:5002,3@127.0.0.1:5003 ",
                    NULL};
    tn_config_t cfg;
    char err[512];
    if (load(&cfg, argv, env, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_true(tn_config_clustered(&cfg));
    assert_int_equal(tn_config_raft_id(&cfg), 2); /* the id --peers lists it under */
    assert_int_equal(cfg.npeers, 3);
    assert_int_equal(cfg.peers[0].id, 1);
    assert_string_equal(cfg.peers[0].name, "127.0.0.1:5001");
    assert_int_equal(cfg.peers[0].addr.sa.ss_family, AF_INET);
    assert_int_equal(cfg.peers[1].id, 2);
    /* A name stays a name (the transport resolves it when it dials), in
     * lower case; this node's own is resolved once, for its listener. */
    assert_string_equal(cfg.peers[1].name, "localhost:5002");
    assert_int_equal(cfg.peers[1].addr.sa.ss_family, AF_UNSPEC);
    assert_string_equal(cfg.peers[1].addr.option, "peers");
    assert_string_equal(cfg.raft_name, "localhost:5002");
    assert_string_equal(cfg.raft_listen.addr.name, "127.0.0.1:5002");
    assert_int_equal(cfg.peers[2].id, 3);
    assert_string_equal(cfg.advertise, "127.0.0.1:5102");
    assert_int_equal(cfg.cluster_secret_len, 40);
    assert_memory_equal(cfg.cluster_secret, SECRET40, 40);
    assert_false(cfg.cluster_secret_generated);
    /* --print-config writes the list back as given; it loads again. */
    char *printed = capture(tn_config_print, &cfg);
    assert_non_null(
        strstr(printed, "peers = \" 1@127.0.0.1:5001, 2@localhost:5002,3@127.0.0.1:5003 \"\n"));
    free(printed);
    tn_config_fini(&cfg);

    /* A wildcard HTTP listener with an advertised address. */
    char *adv[] = {"ternd",
                   "--node-id=1",
                   "--raft-address=127.0.0.1:5001",
                   "--http-address=0.0.0.0:5101",
                   "--advertise-address=node1.example:5101",
                   "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                   NULL};
    assert_int_equal(load(&cfg, adv, env, err, sizeof(err)), 0);
    assert_string_equal(cfg.advertise, "node1.example:5101");
    tn_config_fini(&cfg);

#define NODE2 "--node-id=2", "--raft-address=127.0.0.1:5002", "--http-address=127.0.0.1:5102"
    /* Each entry's syntax, with the option and its source. */
    char *p1[] = {"ternd", NODE2, "--peers=x@127.0.0.1:5001,2@127.0.0.1:5002", NULL};
    expect_refused(p1, env, "peers (flag --peers): \"x@127.0.0.1:5001\"", "node-id of 1..1023");
    char *p2[] = {"ternd", NODE2, "--peers=0@127.0.0.1:5001,2@127.0.0.1:5002", NULL};
    expect_refused(p2, env, "peers", "node-id of 1..1023");
    char *p3[] = {"ternd", NODE2, "--peers=1024@127.0.0.1:5001", NULL};
    expect_refused(p3, env, "peers", "node-id of 1..1023");
    char *p4[] = {"ternd", NODE2, "--peers=127.0.0.1:5001", NULL};
    expect_refused(p4, env, "\"127.0.0.1:5001\"", "expected ID@host:port");
    char *p5[] = {"ternd", NODE2, "--peers=1@0.0.0.0:5001,2@127.0.0.1:5002", NULL};
    expect_refused(p5, env, "\"0.0.0.0:5001\"", "every interface");
    char *p6[] = {"ternd", NODE2, "--peers=1@127.0.0.1:0,2@127.0.0.1:5002", NULL};
    expect_refused(p6, env, "peers", "port 0 cannot be dialled");
    char *p7[] = {"ternd", NODE2, "--peers=1@127.0.0.1,2@127.0.0.1:5002", NULL};
    expect_refused(p7, env, "peers", "missing port");
    /* Resolved at the end of the load, like the listeners: IPv4 only. */
    char *p8[] = {"ternd", NODE2, "--peers=1@[::1]:5001,2@127.0.0.1:5002", NULL};
    expect_refused(p8, env, "peers: \"1@[::1]:5001\"", "IPv4");
    char *p9[] = {"ternd", NODE2, "--peers=1@bad_name.example:5001,2@127.0.0.1:5002", NULL};
    expect_refused(p9, env, "peers: \"1@bad_name.example:5001\"",
                   "neither an IPv4 address nor a DNS host name");
    char *p10[] = {"ternd", NODE2, "--peers=1@10.1.2:5001,2@127.0.0.1:5002", NULL};
    expect_refused(p10, env, "peers: \"1@10.1.2:5001\"", "nor a DNS host name");
    /* A peer's name is not looked up at start: one not resolving yet (a
     * pod not scheduled) is dialled again later, like a peer that is down. */
    char *p11[] = {"ternd", NODE2, "--peers=1@nowhere.invalid:5001,2@127.0.0.1:5002", NULL};
    assert_int_equal(load(&cfg, p11, env, err, sizeof(err)), 0);
    assert_string_equal(cfg.peers[0].name, "nowhere.invalid:5001");
    tn_config_fini(&cfg);
    /* This node's own name must resolve: it is what the listener binds. */
    char *p12[] = {"ternd",
                   "--node-id=2",
                   "--raft-address=nowhere.invalid:5002",
                   "--http-address=127.0.0.1:5102",
                   "--peers=1@127.0.0.1:5001,2@nowhere.invalid:5002",
                   NULL};
    expect_refused(p12, env, "raft-address", "host \"nowhere.invalid\" does not resolve");
    /* The list as a whole. */
    char *q1[] = {"ternd", NODE2, "--peers=2@127.0.0.1:5001,2@127.0.0.1:5002", NULL};
    expect_refused(q1, env, "peers lists node 2 twice", "");
    /* The recorded strings are compared, not what they resolve to. */
    char *q2[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5002,2@127.0.0.1:5002", NULL};
    expect_refused(q2, env, "peers lists 127.0.0.1:5002 for nodes 1 and 2", "");
    char *q6[] = {"ternd", NODE2, "--peers=1@Localhost:5002,2@localhost:5002", NULL};
    expect_refused(q6, env, "peers lists localhost:5002 for nodes 1 and 2", "");
    char *q7[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5001,2@localhost:5002", NULL};
    expect_refused(q7, env, "peers lists this node (2) at localhost:5002",
                   "raft-address is 127.0.0.1:5002");
    char *q3[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5001,3@127.0.0.1:5003", NULL};
    expect_refused(q3, env, "peers has no entry for this node (node-id 2)", "");
    char *q4[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5001,2@127.0.0.1:5009", NULL};
    expect_refused(q4, env, "peers lists this node (2) at 127.0.0.1:5009",
                   "raft-address is 127.0.0.1:5002");
    char *q5[] = {"ternd", NODE2, "--peers=1@192.0.2.1:5001,2@127.0.0.1:5002", NULL};
    expect_refused(q5, env,
                   "peers mixes loopback and other IPv4 addresses (192.0.2.1:5001, "
                   "127.0.0.1:5002)",
                   "");
    /* A name's addresses are known only when it is dialled: not mixed. */
    char *q8[] = {"ternd", NODE2, "--peers=1@node1.example:5001,2@127.0.0.1:5002", NULL};
    expect_loads(q8, env);
    /* This node's own settings. */
    char *n1[] = {"ternd", "--raft-address=127.0.0.1:5002", "--http-address=127.0.0.1:5102",
                  "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002", NULL};
    expect_refused(n1, env, "node-id must be >= 1 with peers", "");
    char *n2[] = {"ternd",
                  "--node-id=2",
                  "--raft-address=0.0.0.0:5002",
                  "--http-address=127.0.0.1:5102",
                  "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  "--allow-plaintext-raft",
                  NULL};
    expect_refused(n2, env, "raft-address 0.0.0.0:5002 is every interface", "");
    char *n3[] = {"ternd",
                  "--node-id=2",
                  "--raft-address=127.0.0.1:0",
                  "--http-address=127.0.0.1:5102",
                  "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  NULL};
    expect_refused(n3, env, "raft-address 127.0.0.1:0 has port 0", "");
    char *n4[] = {"ternd",
                  "--node-id=2",
                  "--raft-address=127.0.0.1:5002",
                  "--http-address=[::]:5102",
                  "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  NULL};
    expect_refused(n4, env, "http-address [::]:5102 is every interface", "advertise-address");
    char *n5[] = {"ternd",
                  "--node-id=2",
                  "--raft-address=127.0.0.1:5002",
                  "--http-address=127.0.0.1:0",
                  "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  NULL};
    expect_refused(n5, env, "http-address 127.0.0.1:0 has port 0", "");
    char *n6[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  "--advertise-address=0.0.0.0:5102", NULL};
    expect_refused(n6, env, "advertise-address (flag --advertise-address): \"0.0.0.0:5102\"",
                   "every interface");
    char *n7[] = {"ternd", NODE2, "--advertise-address=:5102", NULL};
    expect_refused(n7, env, "advertise-address", "missing host");
    char *n8[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  "--join=127.0.0.1:5101", NULL};
    expect_refused(n8, env, "peers and join exclude each other", "");
    /* Secured, with peers, and no secret. */
    char *s1[] = {"ternd", NODE2, "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002", NULL};
    expect_refused(s1, NULL, "TERN_CLUSTER_SECRET", "cluster-secret-file");
#undef NODE2
}

static void test_cluster_join(void **state)
{
    (void)state;
    char *env[] = {"TERN_CLUSTER_SECRET=" SECRET40, NULL};
    char *argv[] = {"ternd",
                    "--node-id=4",
                    "--raft-address=127.0.0.1:5004",
                    "--http-address=127.0.0.1:5104",
                    "--join=127.0.0.1:5101, node2.example:5102",
                    NULL};
    tn_config_t cfg;
    char err[512];
    if (load(&cfg, argv, env, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_true(tn_config_clustered(&cfg));
    assert_int_equal(tn_config_raft_id(&cfg), 4);
    assert_int_equal(cfg.npeers, 0);
    assert_int_equal(cfg.njoin, 2);
    assert_string_equal(cfg.join[0], "127.0.0.1:5101");
    assert_string_equal(cfg.join[1], "node2.example:5102"); /* resolved when dialled */
    tn_config_fini(&cfg);

    char *j1[] = {"ternd", "--raft-address=127.0.0.1:5004", "--http-address=127.0.0.1:5104",
                  "--join=127.0.0.1:5101", NULL};
    expect_refused(j1, env, "node-id must be >= 1 with join", "");
    char *j2[] = {"ternd", "--node-id=4", "--join=127.0.0.1", NULL};
    expect_refused(j2, env, "join (flag --join): \"127.0.0.1\"", "missing port");
    char *j3[] = {"ternd", "--node-id=4", "--join=127.0.0.1:0", NULL};
    expect_refused(j3, env, "join", "port 0");
    char *j4[] = {"ternd",
                  "--node-id=4",
                  "--raft-address=127.0.0.1:5004",
                  "--http-address=127.0.0.1:5104",
                  "--join=0.0.0.0:5101",
                  NULL};
    expect_refused(j4, env, "join: \"0.0.0.0:5101\"", "every interface");
    char *j5[] = {"ternd",
                  "--node-id=4",
                  "--raft-address=127.0.0.1:5004",
                  "--http-address=127.0.0.1:5104",
                  "--join=127.0.0.1:5101",
                  NULL};
    expect_refused(j5, NULL, "a node with join and security-enabled needs the cluster secret",
                   "TERN_CLUSTER_SECRET or cluster-secret-file");
}

static void test_cluster_secret(void **state)
{
    (void)state;
    char *peers[] = {"ternd",
                     "--node-id=1",
                     "--raft-address=127.0.0.1:5001",
                     "--http-address=127.0.0.1:5101",
                     "--peers=1@127.0.0.1:5001",
                     NULL,
                     NULL};
    tn_config_t cfg;
    char err[512];

    /* From a file: one trailing newline (or CRLF) is not part of it. */
    const char *texts[] = {SECRET40 "\n", SECRET40 "\r\n", SECRET40};
    for (size_t i = 0; i < TN_ARRAY_SIZE(texts); i++) {
        char *path = write_mode(texts[i], strlen(texts[i]), 0600);
        char flag[300];
        snprintf(flag, sizeof(flag), "--cluster-secret-file=%s", path);
        peers[5] = flag;
        if (load(&cfg, peers, NULL, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        assert_int_equal(cfg.cluster_secret_len, 40);
        assert_memory_equal(cfg.cluster_secret, SECRET40, 40);
        tn_config_fini(&cfg);
        unlink(path);
        free(path);
    }
    /* Binary bytes are bytes; a second newline is part of it. */
    char bin[34];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (char)(i * 37);
    bin[32] = '\n';
    bin[33] = '\n';
    char *path = write_mode(bin, sizeof(bin), 0400);
    char flag[300];
    snprintf(flag, sizeof(flag), "--cluster-secret-file=%s", path);
    peers[5] = flag;
    assert_int_equal(load(&cfg, peers, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.cluster_secret_len, 33);
    assert_memory_equal(cfg.cluster_secret, bin, 33);
    tn_config_fini(&cfg);
    /* Both ways at once. */
    char *both[] = {"TERN_CLUSTER_SECRET=" SECRET40, NULL};
    expect_refused(peers, both, "TERN_CLUSTER_SECRET and cluster-secret-file are both set", "");
    unlink(path);
    free(path);

    /* Too short (31 bytes and the newline), too long, readable by others,
     * missing, not a file. */
    path = write_mode("0123456789abcdef0123456789abcde\n", 32, 0600);
    snprintf(flag, sizeof(flag), "--cluster-secret-file=%s", path);
    expect_refused(peers, NULL, "cluster-secret-file", "is 31 bytes; it needs 32 to 1024");
    unlink(path);
    free(path);
    char big[1100];
    memset(big, 'k', sizeof(big));
    path = write_mode(big, sizeof(big), 0600);
    snprintf(flag, sizeof(flag), "--cluster-secret-file=%s", path);
    expect_refused(peers, NULL, "cluster-secret-file", "is over 1024 bytes");
    unlink(path);
    free(path);
    path = write_mode(SECRET40, 40, 0640);
    snprintf(flag, sizeof(flag), "--cluster-secret-file=%s", path);
    expect_refused(peers, NULL, "mode 0640 lets group or others at it", "chmod 600");
    assert_int_equal(chmod(path, 0604), 0);
    expect_refused(peers, NULL, "mode 0604", "readable by its owner only");
    unlink(path);
    expect_refused(peers, NULL, "cluster-secret-file", "cannot open: No such file");
    free(path);
    peers[5] = "--cluster-secret-file=/tmp";
    expect_refused(peers, NULL, "cluster-secret-file \"/tmp\"", "not a regular file");

    /* From the environment; too short there too. A lone node takes a
     * given one and generates none. */
    peers[5] = NULL;
    char *shortenv[] = {"TERN_CLUSTER_SECRET=short", NULL};
    expect_refused(peers, shortenv, "TERN_CLUSTER_SECRET", "is 5 bytes");
    char *emptyenv[] = {"TERN_CLUSTER_SECRET=", NULL};
    char *lone[] = {"ternd", NULL};
    expect_refused(lone, emptyenv, "TERN_CLUSTER_SECRET", "is 0 bytes");
    assert_int_equal(load(&cfg, lone, both, err, sizeof(err)), 0);
    assert_false(cfg.cluster_secret_generated);
    assert_int_equal(cfg.cluster_secret_len, 40);
    tn_config_fini(&cfg);

    /* Never a flag or config-file value; and never in an error. */
    char *flagged[] = {"ternd", "--cluster-secret=" SECRET40, NULL};
    expect_refused(flagged, NULL, "cluster-secret (flag --cluster-secret) is not taken",
                   "TERN_CLUSTER_SECRET or cluster-secret-file");
    char *file = write_tmp("cluster_secret = " SECRET40 "\n");
    char cfgflag[256];
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", file);
    char *filed[] = {"ternd", cfgflag, NULL};
    assert_int_equal(load(&cfg, filed, NULL, err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, "cluster-secret (config "));
    assert_null(strstr(err, SECRET40));
    tn_config_fini(&cfg);
    unlink(file);
    free(file);
}

static void test_cluster_security(void **state)
{
    (void)state;
    char *env[] = {"TERN_CLUSTER_SECRET=" SECRET40, NULL};
    /* Security off with peers: only with allow-insecure-cluster; then no
     * secret is needed and none is generated. */
    char *off[] = {"ternd",
                   "--security-enabled=false",
                   "--node-id=1",
                   "--raft-address=127.0.0.1:5001",
                   "--http-address=127.0.0.1:5101",
                   "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                   NULL,
                   NULL};
    expect_refused(off, NULL, "security-enabled=false with peers needs allow-insecure-cluster", "");
    off[6] = "--allow-insecure-cluster";
    tn_config_t cfg;
    char err[512];
    assert_int_equal(load(&cfg, off, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.cluster_secret_len, 0);
    assert_false(cfg.cluster_secret_generated);
    tn_config_fini(&cfg);

    /* Secured Raft off loopback (even on a lone node): TLS files, or
     * allow-plaintext-raft. TEST-NET-1 is never bound by the loader. */
    char *ca = write_mode("CA\n", 3, 0644);
    char *cert = write_mode("CERT\n", 5, 0644);
    char *key = write_mode("KEY\n", 4, 0600);
    char fca[300], fcert[300], fkey[300];
    snprintf(fca, sizeof(fca), "--raft-tls-ca=%s", ca);
    snprintf(fcert, sizeof(fcert), "--raft-tls-cert=%s", cert);
    snprintf(fkey, sizeof(fkey), "--raft-tls-key=%s", key);
    char *r1[] = {"ternd", "--raft-address=192.0.2.1:4153", NULL, NULL, NULL, NULL};
    expect_refused(r1, NULL, "raft-address 192.0.2.1:4153 is not a loopback address",
                   "raft-tls-cert, raft-tls-key and raft-tls-ca");
    expect_refused(r1, NULL, "", "allow-plaintext-raft");
    r1[2] = "--allow-plaintext-raft";
    expect_loads(r1, NULL);
    r1[2] = fcert;
    r1[3] = fkey;
    r1[4] = fca;
    assert_int_equal(load(&cfg, r1, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.raft_tls_ca, ca);
    tn_config_fini(&cfg);
    char *r2[] = {"ternd", "--raft-address=192.0.2.1:4153", "--security-enabled=false", NULL};
    expect_loads(r2, NULL);
    /* Loopback needs neither; a whole loopback cluster neither. */
    char *r3[] = {"ternd", "--raft-address=127.0.0.9:4153", NULL};
    expect_loads(r3, NULL);
    char *lo[] = {"ternd",
                  "--node-id=1",
                  "--raft-address=127.0.0.1:5001",
                  "--http-address=127.0.0.1:5101",
                  "--peers=1@127.0.0.1:5001,2@127.0.0.1:5002",
                  NULL};
    expect_loads(lo, env);
    /* The three go together, and each must be readable. */
    char *t1[] = {"ternd", fcert, fkey, NULL};
    expect_refused(t1, NULL, "raft-tls-cert, raft-tls-key and raft-tls-ca go together",
                   "raft-tls-ca is missing");
    char *t2[] = {"ternd", fca, fkey, NULL};
    expect_refused(t2, NULL, "go together", "raft-tls-cert is missing");
    char *t3[] = {"ternd", fcert, fkey, "--raft-tls-ca=/nonexistent/ca.pem", NULL};
    expect_refused(t3, NULL, "raft-tls-ca: cannot read \"/nonexistent/ca.pem\"", "No such file");
    unlink(ca);
    unlink(cert);
    unlink(key);
    free(ca);
    free(cert);
    free(key);
}

static void test_cluster_timeouts(void **state)
{
    (void)state;
    char *a1[] = {"ternd", "--cluster-heartbeat-interval=2s", "--cluster-dead-after=3s", NULL};
    expect_refused(a1, NULL, "cluster-dead-after (3s) must be at least twice",
                   "cluster-heartbeat-interval (2s)");
    char *a2[] = {"ternd",
                  "--cluster-heartbeat-interval=1s",
                  "--cluster-dead-after=2s",
                  "--cluster-rpc-dial-timeout=250ms",
                  "--cluster-rpc-timeout=10s",
                  "--cluster-join-interval=500ms",
                  NULL};
    tn_config_t cfg;
    char err[512];
    if (load(&cfg, a2, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(cfg.cluster_dead_after_ns, 2000000000LL);
    assert_int_equal(cfg.cluster_rpc_dial_timeout_ns, 250000000LL);
    assert_int_equal(cfg.cluster_rpc_timeout_ns, 10000000000LL);
    assert_int_equal(cfg.cluster_join_interval_ns, 500000000LL);
    tn_config_fini(&cfg);
    char *a3[] = {"ternd", "--cluster-rpc-dial-timeout=5ms", NULL};
    expect_refused(a3, NULL, "cluster-rpc-dial-timeout", "10ms..1m");
    char *a4[] = {"ternd", "--cluster-heartbeat-interval=2m", NULL};
    expect_refused(a4, NULL, "cluster-heartbeat-interval", "100ms..1m");
}

/* Replicated topics are on by default: default-replication-factor is 3
 * (the metastore clamps it to the members alive), any factor 1..5 loads
 * without another option, and experimental-replication, deprecated and
 * gating nothing, still loads from a flag, a config file and the
 * environment, so older command lines and files start. */
static void test_replication_defaults(void **state)
{
    (void)state;
    tn_config_t cfg;
    char err[512];
    char *a1[] = {"ternd", NULL};
    if (load(&cfg, a1, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_false(cfg.experimental_replication);
    assert_int_equal(cfg.default_replication_factor, 3);
    assert_int_equal(cfg.min_insync_replicas, 2);
    tn_config_fini(&cfg);
    for (int f = 1; f <= 5; f++) {
        char flag[64];
        snprintf(flag, sizeof(flag), "--default-replication-factor=%d", f);
        char *a2[] = {"ternd", flag, NULL};
        if (load(&cfg, a2, NULL, err, sizeof(err)) != 0)
            fail_msg("factor %d refused: %s", f, err);
        assert_int_equal(cfg.default_replication_factor, f);
        assert_false(cfg.experimental_replication);
        tn_config_fini(&cfg);
    }
    char *a3[] = {"ternd", "--default-replication-factor=6", NULL};
    expect_refused(a3, NULL, "default-replication-factor", "1..5");
    char *a4[] = {"ternd", "--experimental-replication", "--default-replication-factor=1", NULL};
    if (load(&cfg, a4, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_true(cfg.experimental_replication);
    assert_int_equal(cfg.default_replication_factor, 1);
    tn_config_fini(&cfg);
    char *file = write_tmp("experimental-replication = true\n");
    char cfgflag[256];
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", file);
    char *a5[] = {"ternd", cfgflag, NULL};
    if (load(&cfg, a5, NULL, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_true(cfg.experimental_replication);
    assert_int_equal(cfg.default_replication_factor, 3);
    tn_config_fini(&cfg);
    unlink(file);
    free(file);
    char *e6[] = {"TERN_EXPERIMENTAL_REPLICATION=true", NULL};
    if (load(&cfg, a1, e6, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_true(cfg.experimental_replication);
    tn_config_fini(&cfg);
}

/* What branch serve added: log-format, nsqd's log-level fatal,
 * https-address and its certificate, and the change list SIGHUP logs. */
static void note_change(const char *name, void *arg)
{
    char *out = arg;
    strcat(out, name);
    strcat(out, " ");
}

static void test_serve_options(void **state)
{
    (void)state;
    tn_config_t a, b;
    assert_int_equal(tn_config_init(&a), 0);
    assert_int_equal(a.log_format, 0);
    assert_string_equal(a.https_address, "");
    char err[512] = "";
    char *envp[] = {NULL};
    char *argv[] = {"ternd",
                    "--log-format=json",
                    "--log-level=fatal",
                    "--https-address=127.0.0.1:0",
                    "--tls-cert=/c",
                    "--tls-key=/k",
                    NULL};
    assert_int_equal(tn_config_load(&a, 6, argv, envp, err, sizeof(err)), 0);
    assert_int_equal(a.log_format, 1);
    assert_int_equal(a.log_level, 5);
    assert_int_equal(a.https_listen.addr.sa.ss_family, AF_INET);

    assert_int_equal(tn_config_init(&b), 0);
    char *argv2[] = {"ternd",
                     "--log-format=json",
                     "--log-level=debug",
                     "--max-msg-size=2MiB",
                     "--https-address=127.0.0.1:0",
                     "--tls-cert=/c",
                     "--tls-key=/k",
                     NULL};
    assert_int_equal(tn_config_load(&b, 7, argv2, envp, err, sizeof(err)), 0);
    char changed[256] = "";
    tn_config_each_change(&a, &b, note_change, changed);
    assert_string_equal(changed, "log-level max-msg-size ");
    changed[0] = '\0';
    tn_config_each_change(&a, &a, note_change, changed);
    assert_string_equal(changed, "");
    tn_config_fini(&a);
    tn_config_fini(&b);

    char *no_cert[] = {"ternd", "--https-address=127.0.0.1:0", NULL};
    expect_error(2, no_cert, envp, "https-address needs tls-cert", "tls-key");
    char *bad_format[] = {"ternd", "--log-format=xml", NULL};
    expect_error(2, bad_format, envp, "log-format", "json");
    /* What the startup line lists as settings from the environment. */
    assert_true(tn_config_env_is_setting("TERN_DATA_PATH=/d"));
    assert_true(tn_config_env_is_setting("TERN_LOG_FORMAT=json"));
    assert_true(tn_config_env_is_setting("TERN_CLUSTER_SECRET=s"));
    assert_false(tn_config_env_is_setting("TERN_CONFIG=/c"));
    assert_false(tn_config_env_is_setting("TERN_ADMIN_PASSWORD=p"));
    assert_false(tn_config_env_is_setting("TERN_DATA_PATH"));
    assert_false(tn_config_env_is_setting("TERNDATA_PATH=x"));
    char *bad_addr[] = {"ternd", "--https-address=[::1", "--tls-cert=/c", "--tls-key=/k", NULL};
    expect_error(4, bad_addr, envp, "https-address", "missing ']'");
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
        cmocka_unit_test(test_cluster_defaults),
        cmocka_unit_test(test_cluster_peers),
        cmocka_unit_test(test_cluster_join),
        cmocka_unit_test(test_cluster_secret),
        cmocka_unit_test(test_cluster_security),
        cmocka_unit_test(test_cluster_timeouts),
        cmocka_unit_test(test_replication_defaults),
        cmocka_unit_test(test_serve_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
