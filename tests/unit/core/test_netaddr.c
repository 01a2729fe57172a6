/* Network addresses as options spell them: the host:port forms nsqd takes
 * (numeric IPv4, [IPv6], names, an empty host), each syntax error's own
 * reason, every interface as one dual-stack address, IPv4-only
 * resolution, and the numeric names used in logs. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "core/netaddr.h"

#include <arpa/inet.h>
#include <string.h>

static void split_ok(const char *text, const char *host, int port, bool numeric)
{
    tn_hostport_t hp;
    char why[256] = "";
    if (tn_netaddr_split(text, &hp, why, sizeof(why)) != 0)
        fail_msg("\"%s\" refused: %s", text, why);
    assert_string_equal(hp.host, host);
    assert_int_equal(hp.port, port);
    assert_int_equal(hp.numeric, numeric);
}

static void split_bad(const char *text, const char *reason)
{
    tn_hostport_t hp;
    char why[256] = "";
    assert_int_equal(tn_netaddr_split(text, &hp, why, sizeof(why)), TN_ECONFIG);
    if (strstr(why, reason) == NULL)
        fail_msg("\"%s\": reason \"%s\" lacks \"%s\"", text, why, reason);
}

static void test_split(void **state)
{
    (void)state;
    split_ok("127.0.0.1:4150", "127.0.0.1", 4150, true);
    split_ok(":4150", "", 4150, true);
    split_ok("0.0.0.0:4150", "0.0.0.0", 4150, true);
    split_ok("[::1]:4150", "::1", 4150, true);
    split_ok("[::]:0", "::", 0, true);
    split_ok("[fe80::1%lo]:4150", "fe80::1%lo", 4150, true);
    split_ok("localhost:4150", "localhost", 4150, false);
    split_ok("127.1:4150", "127.1", 4150, false); /* not a literal to Go either */
    split_ok("127.0.0.1:", "127.0.0.1", 0, true); /* Go: an empty port is 0 */
    split_ok("h:65535", "h", 65535, false);
    split_ok("h:00080", "h", 80, false);

    split_bad("127.0.0.1:99999", "port 99999 is out of range 0-65535");
    split_bad("h:99999999999999999999999", "out of range 0-65535");
    split_bad("h:65536", "port 65536 is out of range");
    split_bad("localhost", "missing port");
    split_bad("4150", "for port 4150 on every interface write :4150");
    split_bad("", "empty");
    split_bad("h:http", "port \"http\" is not a number");
    split_bad("h:-1", "is not a number");
    split_bad("h: 80", "is not a number");
    split_bad("::1:4150", "IPv6 address needs brackets");
    split_bad("::1", "IPv6 address needs brackets");
    split_bad("[::1", "missing ']'");
    split_bad("[::1]", "missing port");
    split_bad("[::1]4150", "expected ':'");
    split_bad("[]:4150", "empty brackets");
    split_bad("[127.0.0.1]:4150", "brackets are for IPv6");
    char longhost[300];
    memset(longhost, 'a', 290);
    memcpy(longhost + 290, ":1", 3);
    split_bad(longhost, "longer than 255");
    /* why may be NULL */
    tn_hostport_t hp;
    assert_int_equal(tn_netaddr_split("x", &hp, NULL, 0), TN_ECONFIG);
}

static tn_netaddr_t resolve_ok(const char *text, int flags, const char *name)
{
    tn_hostport_t hp;
    tn_netaddr_t na;
    char why[256] = "";
    if (tn_netaddr_split(text, &hp, why, sizeof(why)) != 0 ||
        tn_netaddr_resolve(&hp, flags, &na, why, sizeof(why)) != 0)
        fail_msg("\"%s\" refused: %s", text, why);
    assert_string_equal(na.name, name);
    assert_null(na.option);
    return na;
}

static void resolve_bad(const char *text, int flags, const char *reason)
{
    tn_hostport_t hp;
    tn_netaddr_t na;
    char why[256] = "";
    assert_int_equal(tn_netaddr_split(text, &hp, why, sizeof(why)), 0);
    assert_int_equal(tn_netaddr_resolve(&hp, flags, &na, why, sizeof(why)), TN_ECONFIG);
    if (strstr(why, reason) == NULL)
        fail_msg("\"%s\": reason \"%s\" lacks \"%s\"", text, why, reason);
}

static void test_resolve(void **state)
{
    (void)state;
    tn_netaddr_t na = resolve_ok("127.0.0.1:4150", 0, "127.0.0.1:4150");
    assert_int_equal(na.sa.ss_family, AF_INET);
    assert_false(na.any);
    assert_int_equal(tn_netaddr_port(&na.sa), 4150);
    na = resolve_ok("[::1]:4151", 0, "[::1]:4151");
    assert_int_equal(na.sa.ss_family, AF_INET6);
    assert_false(na.any);

    /* Every interface, however spelled: one IPv6 socket that takes IPv4
     * too (Go's net.Listen), or 0.0.0.0 when IPv4 only is wanted. */
    const char *anys[] = {":4150", "0.0.0.0:4150", "[::]:4150", "[0:0::0]:4150"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(anys); i++) {
        na = resolve_ok(anys[i], 0, "[::]:4150");
        assert_true(na.any);
        assert_int_equal(na.sa.ss_family, AF_INET6);
        na = resolve_ok(anys[i], TN_NETADDR_IPV4, "0.0.0.0:4150");
        assert_true(na.any);
        assert_int_equal(na.sa.ss_family, AF_INET);
    }

    /* A name: its first IPv4 address. localhost has 127.0.0.1 in any
     * /etc/hosts, and perhaps ::1 before it; IPv4 wins either way. */
    na = resolve_ok("localhost:0", 0, "127.0.0.1:0");
    assert_false(na.any);
    resolve_ok("localhost:7", TN_NETADDR_IPV4, "127.0.0.1:7");

    resolve_bad("[::1]:4153", TN_NETADDR_IPV4, "only IPv4");
    /* .invalid never resolves (RFC 6761). */
    resolve_bad("no-such-host.invalid:4150", 0, "host \"no-such-host.invalid\" does not resolve");
}

static void test_format(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    char out[TN_NETADDR_NAME_MAX];
    tn_netaddr_format(&ss, out, sizeof(out));
    assert_string_equal(out, "?");
    assert_int_equal(tn_netaddr_port(&ss), 0);
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    sin6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::42", &sin6->sin6_addr);
    sin6->sin6_port = htons(65535);
    tn_netaddr_format(&ss, out, sizeof(out));
    assert_string_equal(out, "[2001:db8::42]:65535");
    /* Truncation keeps the string terminated. */
    tn_netaddr_format(&ss, out, 6);
    assert_int_equal(strlen(out), 5);
}

/* The host names Raft addresses take (tn_netaddr_dns_name). */
static void test_dns_name(void **state)
{
    (void)state;
    const char *good[] = {"localhost",
                          "tern-0.tern-peers",
                          "tern-0.tern-peers.prod.svc.cluster.local",
                          "node1.example.",
                          "3com.example",
                          "a",
                          "x-1"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!tn_netaddr_dns_name(good[i]))
            fail_msg("refused: %s", good[i]);
    const char *bad[] = {"",           "10.0.1",     "127.0.0.1", "123", "bad_name",
                         "-a.example", "a-.example", "a..b",      ".a",  "a b",
                         "[::1]",      "::1",        "a.-b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (tn_netaddr_dns_name(bad[i]))
            fail_msg("taken: %s", bad[i]);
    char label[80];
    memset(label, 'a', 63);
    label[63] = '\0';
    assert_true(tn_netaddr_dns_name(label));
    memset(label, 'a', 64);
    label[64] = '\0';
    assert_false(tn_netaddr_dns_name(label));
    char longname[300];
    for (int i = 0; i < 63; i++) /* 252 bytes: fits 253 */
        memcpy(longname + 4 * i, "abc.", 4);
    longname[252] = '\0';
    assert_true(tn_netaddr_dns_name(longname));
    memcpy(longname + 252, "ab", 3); /* 254 */
    assert_false(tn_netaddr_dns_name(longname));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_dns_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
