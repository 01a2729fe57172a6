/* Tests of the remotes address guard (proto/http/guard.h): URL parsing and
 * its refusals, the options, and the refused address set in every
 * spelling (inet_aton forms, IPv6 literals, IPv4-mapped, -compatible and
 * NAT64 forms), with remotes-allow-addresses letting some through. */
#include "core/platform.h"

#include "testutil.h"

#include "proto/http/guard.h"

#include <arpa/inet.h>
#include <string.h>

static tn_guard_t g; /* defaults */

static int setup(void **state)
{
    (void)state;
    char err[200];
    return tn_guard_init(&g, NULL, NULL, NULL, err, sizeof(err));
}

static int parse(const char *url, tn_guard_url_t *u, char *err)
{
    return tn_guard_parse_url(url, strlen(url), u, err, 300);
}

/* The URL parses, and the guard refuses it with the one message. */
static void refused_literal(const tn_guard_t *guard, const char *url)
{
    tn_guard_url_t u;
    char err[300] = "";
    if (parse(url, &u, err) != 0)
        fail_msg("%s: did not parse: %s", url, err);
    assert_true(u.literal);
    int rc = tn_guard_check_url(guard, &u, err, sizeof(err));
    if (rc != UV_EACCES)
        fail_msg("%s (read as %s): not refused", url, u.host);
    assert_string_equal(err, TN_GUARD_REFUSED);
}

static void allowed_url(const tn_guard_t *guard, const char *url)
{
    tn_guard_url_t u;
    char err[300] = "";
    if (parse(url, &u, err) != 0)
        fail_msg("%s: did not parse: %s", url, err);
    if (tn_guard_check_url(guard, &u, err, sizeof(err)) != 0)
        fail_msg("%s: refused: %s", url, err);
}

static void bad_url(const char *url, const char *msg)
{
    tn_guard_url_t u;
    char err[300] = "";
    assert_int_equal(parse(url, &u, err), UV_EINVAL);
    if (strstr(err, msg) == NULL)
        fail_msg("%s: got \"%s\", expected \"%s\"", url, err, msg);
}

static void test_parse(void **state)
{
    (void)state;
    tn_guard_url_t u;
    char err[300];
    assert_int_equal(parse("https://EU.Example.com:4443/base", &u, err), 0);
    assert_string_equal(u.host, "eu.example.com");
    assert_int_equal(u.port, 4443);
    assert_string_equal(u.path, "/base");
    assert_false(u.literal);
    assert_int_equal(parse("HTTPS://eu.example.com.", &u, err), 0);
    assert_string_equal(u.host, "eu.example.com");
    assert_int_equal(u.port, 443);
    assert_string_equal(u.path, "/");
    assert_int_equal(parse("https://10.1.2.3:443", &u, err), 0);
    assert_true(u.literal);
    assert_string_equal(u.host, "10.1.2.3");
    assert_int_equal(ntohs(((struct sockaddr_in *)&u.addr)->sin_port), 443);
    assert_int_equal(parse("https://[2001:db8::1]:4443/", &u, err), 0);
    assert_true(u.literal);
    assert_int_equal(u.addr.ss_family, AF_INET6);
    assert_string_equal(u.host, "2001:db8::1");
    allowed_url(&g, "https://eu.example.com");
    allowed_url(&g, "https://10.0.0.1:4443");
    allowed_url(&g, "https://192.168.1.1");
    allowed_url(&g, "https://172.16.0.9");
    allowed_url(&g, "https://[fd12:3456::1]");
    allowed_url(&g, "https://8.8.8.8");
}

static void test_refusals(void **state)
{
    (void)state;
    bad_url("http://eu.example.com", "the scheme must be https");
    bad_url("ftp://eu.example.com", "the scheme must be https");
    bad_url("eu.example.com", "must start with https://");
    bad_url("https:eu.example.com", "must start with https://");
    bad_url("", "empty");
    bad_url("https://user:pw@eu.example.com", "credentials in the url");
    bad_url("https://user@127.0.0.1", "credentials in the url");
    bad_url("https://eu.example.com/?a=1", "query or a fragment");
    bad_url("https://eu.example.com#frag", "query or a fragment");
    bad_url("https://", "no host");
    bad_url("https://:443", "no host");
    bad_url("https://eu.example.com:0", "port must be 1..65535");
    bad_url("https://eu.example.com:65536", "port must be 1..65535");
    bad_url("https://eu.example.com:+443", "port must be 1..65535");
    bad_url("https://eu.example.com:44a", "port must be 1..65535");
    bad_url("https://eu example.com", "space");
    bad_url("https://eu%2eexample.com", "percent-encoded");
    bad_url("https://%31%32%37.0.0.1", "percent-encoded");
    bad_url("https://eu_x.example.com", "not a DNS name");
    bad_url("https://[::1", "closed with ]");
    bad_url("https://[fe80::1%25eth0]", "zone ids");
    bad_url("https://[::1]x", "unexpected bytes");
    bad_url("https://[not-v6]", "not an address");
    bad_url("https://256.0.0.1", "neither a DNS name nor an IPv4");
    bad_url("https://1.2.3.4.5", "neither a DNS name nor an IPv4");
    bad_url("https://0x100000000", "neither a DNS name nor an IPv4");
    bad_url("https://08.0.0.1", "neither a DNS name nor an IPv4");
    bad_url("https://0x", "neither a DNS name nor an IPv4");
    bad_url("https://1..1", "neither a DNS name nor an IPv4");
    bad_url("https://4294967296", "neither a DNS name nor an IPv4");
    bad_url("https://eu.example.com\x01", "control");
    bad_url("https://eu.example.com/\xc3\xa9", "non-ASCII");
}

/* Every spelling of a refused address, and the ports and hosts lists. */
static void test_spellings(void **state)
{
    (void)state;
    static const char *const refused[] = {
        "https://127.0.0.1",
        "https://127.0.0.1:4443",
        "https://2130706433",
        "https://017700000001",
        "https://0x7f000001",
        "https://0x7F.0.0.1",
        "https://0177.0.0.1",
        "https://0177.0.0.01",
        "https://0x7f.1",
        "https://127.1",
        "https://127.0.1",
        "https://0127.0.0.1", /* octal 0127 = 87: allowed? no: */
        "https://127.255.255.254",
        "https://127.000.000.001",
        "https://127.0.0.1.",
        "https://[::1]",
        "https://[0:0:0:0:0:0:0:1]",
        "https://[::ffff:127.0.0.1]",
        "https://[::ffff:7f00:1]",
        "https://[::127.0.0.1]",
        "https://[64:ff9b::127.0.0.1]",
        "https://[::]",
        "https://0.0.0.0",
        "https://0",
        "https://0x0",
        "https://00",
        "https://169.254.169.254",
        "https://2852039166",
        "https://0xa9fea9fe",
        "https://0251.0376.0251.0376",
        "https://169.254.43518",
        "https://[::ffff:169.254.169.254]",
        "https://[::ffff:a9fe:a9fe]",
        "https://[fd00:ec2::254]",
        "https://[FD00:0EC2:0:0:0:0:0:0254]",
        "https://100.100.100.200",
        "https://1684301000",
        "https://[::ffff:100.100.100.200]",
        "https://169.254.0.1",
        "https://[fe80::1]",
        "https://[febf::1]",
        "https://224.0.0.1",
        "https://239.255.255.250",
        "https://[ff02::1]",
        "https://255.255.255.255",
        "https://[::ffff:224.0.0.1]",
        "https://[::ffff:0.0.0.0]",
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(refused); i++) {
        if (strcmp(refused[i], "https://0127.0.0.1") == 0)
            continue; /* 0127 is octal 87: 87.0.0.1 is an ordinary address (below) */
        refused_literal(&g, refused[i]);
    }
    allowed_url(&g, "https://0127.0.0.1");
    tn_guard_url_t u;
    char err[300];
    assert_int_equal(parse("https://0127.0.0.1", &u, err), 0);
    assert_string_equal(u.host, "87.0.0.1");
    assert_int_equal(parse("https://0x7f.1", &u, err), 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(parse("https://2130706433", &u, err), 0);
    assert_string_equal(u.host, "127.0.0.1");
    /* not refused: neighbours of the refused set */
    allowed_url(&g, "https://126.255.255.255");
    allowed_url(&g, "https://128.0.0.1");
    allowed_url(&g, "https://169.253.255.255");
    allowed_url(&g, "https://100.100.100.201");
    allowed_url(&g, "https://[fd00:ec2::253]");
    allowed_url(&g, "https://[fec0::1]");
    allowed_url(&g, "https://[::ffff:10.0.0.1]");
    allowed_url(&g, "https://1.0.0.0");
    allowed_url(&g, "https://223.255.255.255");
    allowed_url(&g, "https://240.0.0.1");

    /* Ports and hosts. */
    assert_int_equal(parse("https://eu.example.com:8443", &u, err), 0);
    assert_int_equal(tn_guard_check_url(&g, &u, err, sizeof(err)), UV_EACCES);
    assert_string_equal(err, "port 8443 is not in remotes-allowed-ports (443,4443)");
    tn_guard_t h;
    assert_int_equal(
        tn_guard_init(&h, " 8443 ", "EU.example.com., us.example.com", NULL, err, sizeof(err)), 0);
    allowed_url(&h, "https://eu.example.com:8443");
    assert_int_equal(parse("https://eu.example.com", &u, err), 0);
    assert_int_equal(tn_guard_check_url(&h, &u, err, sizeof(err)), UV_EACCES);
    assert_string_equal(err, "port 443 is not in remotes-allowed-ports (8443)");
    assert_int_equal(parse("https://ap.example.com:8443", &u, err), 0);
    assert_int_equal(tn_guard_check_url(&h, &u, err, sizeof(err)), UV_EACCES);
    assert_string_equal(err, "host ap.example.com is not in remotes-allowed-hosts");
}

static void test_allow_list(void **state)
{
    (void)state;
    tn_guard_t a;
    char err[300];
    assert_int_equal(tn_guard_init(&a, NULL, NULL, "127.0.0.0/8, ::1, fe80::/16, 169.254.169.254",
                                   err, sizeof(err)),
                     0);
    allowed_url(&a, "https://127.0.0.1");
    allowed_url(&a, "https://2130706433");
    allowed_url(&a, "https://127.1:4443");
    allowed_url(&a, "https://[::ffff:127.0.0.1]"); /* the IPv4 inside is listed */
    allowed_url(&a, "https://[::1]");
    allowed_url(&a, "https://[fe80::1]");
    allowed_url(&a, "https://169.254.169.254");
    refused_literal(&a, "https://169.254.169.253");
    refused_literal(&a, "https://[febf::1]"); /* fe80::/10 but outside fe80::/16 */
    refused_literal(&a, "https://0.0.0.0");
    refused_literal(&a, "https://[fd00:ec2::254]");
    /* resolved addresses, as a dial would check them */
    struct sockaddr_in in;
    memset(&in, 0, sizeof(in));
    in.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.53", &in.sin_addr);
    assert_int_equal(tn_guard_check_addr(&a, (struct sockaddr *)&in), 0);
    assert_int_equal(tn_guard_check_addr(&g, (struct sockaddr *)&in), UV_EACCES);
    inet_pton(AF_INET, "10.9.8.7", &in.sin_addr);
    assert_int_equal(tn_guard_check_addr(&g, (struct sockaddr *)&in), 0);
    struct sockaddr_in6 in6;
    memset(&in6, 0, sizeof(in6));
    in6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:169.254.169.254", &in6.sin6_addr);
    assert_int_equal(tn_guard_check_addr(&g, (struct sockaddr *)&in6), UV_EACCES);
    inet_pton(AF_INET6, "2001:db8::5", &in6.sin6_addr);
    assert_int_equal(tn_guard_check_addr(&g, (struct sockaddr *)&in6), 0);
    struct sockaddr un = {.sa_family = AF_UNIX};
    assert_int_equal(tn_guard_check_addr(&g, &un), UV_EACCES);
    assert_int_equal(tn_guard_check_addr(&g, NULL), UV_EACCES);

    /* The options' refusals name the option and the item. */
    static const struct {
        const char *ports, *hosts, *allow, *msg;
    } bad[] = {
        {"0", NULL, NULL, "remotes-allowed-ports: \"0\" is not a port (1..65535)"},
        {"443,,4443", NULL, NULL, "remotes-allowed-ports: an empty item"},
        {"https", NULL, NULL, "remotes-allowed-ports: \"https\" is not a port"},
        {NULL, "eu_x.example.com", NULL, "remotes-allowed-hosts: \"eu_x.example.com\" is not"},
        {NULL, NULL, "127.0.0.0/33", "remotes-allow-addresses: \"127.0.0.0/33\" is not a CIDR"},
        {NULL, NULL, "::1/129", "remotes-allow-addresses: \"::1/129\" is not a CIDR"},
        {NULL, NULL, "localhost", "remotes-allow-addresses: \"localhost\" is not a CIDR"},
        {NULL, NULL, "10.0.0.0/", "remotes-allow-addresses: \"10.0.0.0/\" is not a CIDR"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        assert_int_equal(
            tn_guard_init(&a, bad[i].ports, bad[i].hosts, bad[i].allow, err, sizeof(err)),
            UV_EINVAL);
        if (strstr(err, bad[i].msg) == NULL)
            fail_msg("got \"%s\", expected \"%s\"", err, bad[i].msg);
    }
}

static void test_aton(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } ok[] = {
        {"1", "0.0.0.1"},
        {"1.2", "1.0.0.2"},
        {"1.2.3", "1.2.0.3"},
        {"1.2.3.4", "1.2.3.4"},
        {"0x1.0x2.0x3.0x4", "1.2.3.4"},
        {"01.02.03.04", "1.2.3.4"},
        {"1.65535", "1.0.255.255"},
        {"1.2.65535", "1.2.255.255"},
        {"4294967295", "255.255.255.255"},
        {"0xffffffff", "255.255.255.255"},
        {"037777777777", "255.255.255.255"},
    };
    for (size_t i = 0; i < TN_ARRAY_SIZE(ok); i++) {
        struct in_addr a;
        char buf[32];
        assert_int_equal(tn_guard_parse_ipv4(ok[i].in, strlen(ok[i].in), &a), 0);
        inet_ntop(AF_INET, &a, buf, sizeof(buf));
        assert_string_equal(buf, ok[i].out);
    }
    static const char *const bad[] = {"",      ".",       "1.",         ".1",        "1.2.3.4.5",
                                      "256.1", "1.256.1", "1.16777216", "1.2.65536", "09",
                                      "0x1g",  "1 .2",    "-1",         "+1",        "1.2.3.256"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(bad); i++) {
        struct in_addr a;
        if (tn_guard_parse_ipv4(bad[i], strlen(bad[i]), &a) != UV_EINVAL)
            fail_msg("\"%s\" parsed", bad[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),     cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_spellings), cmocka_unit_test(test_allow_list),
        cmocka_unit_test(test_aton),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
