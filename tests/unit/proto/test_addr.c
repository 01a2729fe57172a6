/* Listening on a resolved address (proto/addr.h): a port in use or an
 * address not on this host fails with a line naming the address, the
 * option and the system error; every interface takes IPv4 clients on its
 * one socket, and they are named as IPv4 peers. */
#include "core/platform.h"

#include "testutil.h"

#include "core/netaddr.h"
#include "proto/addr.h"

#include <string.h>

static tn_netaddr_t addr_of(const char *text, const char *option)
{
    tn_hostport_t hp;
    tn_netaddr_t na;
    char why[256] = "";
    if (tn_netaddr_split(text, &hp, why, sizeof(why)) != 0 ||
        tn_netaddr_resolve(&hp, 0, &na, why, sizeof(why)) != 0)
        fail_msg("%s: %s", text, why);
    na.option = option;
    return na;
}

typedef struct {
    uv_tcp_t accepted;
    bool got;
    char peer[64];
} accept_t;

static void on_conn(uv_stream_t *server, int status)
{
    accept_t *a = server->data;
    assert_int_equal(status, 0);
    assert_int_equal(uv_tcp_init(server->loop, &a->accepted), 0);
    assert_int_equal(uv_accept(server, (uv_stream_t *)&a->accepted), 0);
    tn_addr_peer(&a->accepted, a->peer, sizeof(a->peer));
    a->got = true;
}

static void on_connected(uv_connect_t *req, int status)
{
    assert_int_equal(status, 0);
    *(bool *)req->data = true;
}

static void test_port_in_use(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_tcp_t first, second;
    uv_tcp_init(&loop, &first);
    uv_tcp_init(&loop, &second);
    tn_netaddr_t na = addr_of("127.0.0.1:0", "tcp-address");
    char err[256] = "";
    assert_int_equal(tn_addr_listen(&first, &na, on_conn, err, sizeof(err)), 0);
    int port = tn_addr_local_port(&first);
    assert_true(port > 0);

    char text[64];
    snprintf(text, sizeof(text), "127.0.0.1:%d", port);
    na = addr_of(text, "http-address");
    assert_int_equal(tn_addr_listen(&second, &na, on_conn, err, sizeof(err)), UV_EADDRINUSE);
    char want[128];
    snprintf(want, sizeof(want), "cannot listen on 127.0.0.1:%d (http-address): %s", port,
             uv_strerror(UV_EADDRINUSE));
    assert_string_equal(err, want);
    uv_close((uv_handle_t *)&first, NULL);
    uv_close((uv_handle_t *)&second, NULL);
    tu_loop_fini(&loop);
}

static void test_address_not_here(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_tcp_t tcp;
    uv_tcp_init(&loop, &tcp);
    /* TEST-NET-1 (RFC 5737): never an address of this host. No option
     * name: the line leaves the parenthesis out. */
    tn_netaddr_t na = addr_of("192.0.2.1:4150", NULL);
    char err[256] = "";
    assert_int_equal(tn_addr_listen(&tcp, &na, on_conn, err, sizeof(err)), UV_EADDRNOTAVAIL);
    char want[128];
    snprintf(want, sizeof(want), "cannot listen on 192.0.2.1:4150: %s",
             uv_strerror(UV_EADDRNOTAVAIL));
    assert_string_equal(err, want);
    uv_close((uv_handle_t *)&tcp, NULL);
    tu_loop_fini(&loop);
}

static void test_every_interface_takes_ipv4(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_tcp_t server, client;
    uv_tcp_init(&loop, &server);
    uv_tcp_init(&loop, &client);
    accept_t a;
    memset(&a, 0, sizeof(a));
    server.data = &a;
    tn_netaddr_t na = addr_of(":0", "tcp-address");
    assert_true(na.any);
    char err[256] = "";
    if (tn_addr_listen(&server, &na, on_conn, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    int port = tn_addr_local_port(&server);
    assert_true(port > 0);

    struct sockaddr_in to;
    uv_ip4_addr("127.0.0.1", port, &to);
    uv_connect_t creq;
    bool connected = false;
    creq.data = &connected;
    assert_int_equal(uv_tcp_connect(&creq, &client, (const struct sockaddr *)&to, on_connected), 0);
    while (!connected || !a.got)
        uv_run(&loop, UV_RUN_ONCE);
    /* Named as nsqd names it, not as ::ffff:127.0.0.1. */
    assert_int_equal(strncmp(a.peer, "127.0.0.1:", 10), 0);
    char ip[64];
    tn_addr_peer_ip(a.peer, ip, sizeof(ip));
    assert_string_equal(ip, "127.0.0.1");
    uv_close((uv_handle_t *)&a.accepted, NULL);
    uv_close((uv_handle_t *)&client, NULL);
    uv_close((uv_handle_t *)&server, NULL);
    tu_loop_fini(&loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_address_not_here),
        cmocka_unit_test(test_every_interface_takes_ipv4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
