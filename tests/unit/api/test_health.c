/* Tests of the health endpoints over a real HTTP server on loopback:
 * /healthz is {"status":"ok"} until a shutdown begins, then 503
 * {"status":"shutting down"} (ternd's signal handler sets the flag and
 * closes the listener in the same loop pass, so no client of ternd can be
 * shown that answer: this is where it is seen); /readyz is
 * {"status":"ready"} or 503 {"error":"not ready"} with Retry-After, and
 * 503 {"status":"draining"} while the node drains (api/drain.h). */
#include "core/platform.h"

#include "testutil.h"

#include "api/drain.h"
#include "api/nsq/http.h"
#include "core/netaddr.h"
#include "proto/http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    uv_loop_t loop;
    tn_http_server_t *srv;
    tn_nsq_http_t api;
    bool closed;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    tn_http_opts_t o;
    tn_http_opts_default(&o);
    char err[256] = "";
    tn_hostport_t hp;
    tn_netaddr_t na;
    assert_int_equal(tn_netaddr_split("127.0.0.1:0", &hp, err, sizeof(err)), 0);
    assert_int_equal(tn_netaddr_resolve(&hp, 0, &na, err, sizeof(err)), 0);
    assert_int_equal(tn_http_server_start(&f->loop, &o, &na, &f->srv, err, sizeof(err)), 0);
    memset(&f->api, 0, sizeof(f->api));
    assert_int_equal(tn_nsq_http_register(f->srv, &f->api), 0);
    *state = f;
    return 0;
}

static void on_closed(void *arg)
{
    ((fixture_t *)arg)->closed = true;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    tn_http_server_close(f->srv, on_closed, f);
    while (!f->closed)
        uv_run(&f->loop, UV_RUN_ONCE);
    tu_loop_fini(&f->loop);
    free(f);
    return 0;
}

/* GET path over a fresh connection, running the loop until the server has
 * answered and closed it (Connection: close); the whole answer into out. */
static void get(fixture_t *f, const char *path, char *out, size_t outlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)tn_http_server_port(f->srv));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    assert_true(rc == 0 || errno == EINPROGRESS);
    char req[256];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    size_t sent = 0, got = 0;
    for (int spins = 0; spins < 100000; spins++) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        if (sent < (size_t)n) {
            ssize_t w = send(fd, req + sent, (size_t)n - sent, MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
            continue;
        }
        ssize_t r = recv(fd, out + got, outlen - 1 - got, 0);
        if (r == 0)
            break;
        if (r > 0)
            got += (size_t)r;
        else
            assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
        if (r < 0)
            usleep(200);
    }
    out[got] = '\0';
    close(fd);
}

static void assert_answer(const char *resp, const char *status_line, const char *body)
{
    assert_true(strncmp(resp, status_line, strlen(status_line)) == 0);
    assert_non_null(strstr(resp, "\r\nContent-Type: application/json; charset=utf-8\r\n"));
    const char *b = strstr(resp, "\r\n\r\n");
    assert_non_null(b);
    assert_string_equal(b + 4, body);
}

static void test_healthz(void **state)
{
    fixture_t *f = *state;
    char resp[2048];
    get(f, "/healthz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 200 ", "{\"status\":\"ok\"}\n");
    f->api.shutting_down = true; /* what ternd's SIGTERM handler sets */
    get(f, "/healthz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 503 ", "{\"status\":\"shutting down\"}\n");
}

static void test_readyz(void **state)
{
    fixture_t *f = *state;
    char resp[2048];
    get(f, "/readyz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 503 ", "{\"error\":\"not ready\"}\n");
    assert_non_null(strstr(resp, "\r\nRetry-After: 1\r\n"));
    f->api.ready = true;
    get(f, "/readyz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 200 ", "{\"status\":\"ready\"}\n");
    assert_null(strstr(resp, "Retry-After"));
}

/* While draining: /readyz 503 {"status":"draining"} with Retry-After,
 * however ready the node is, and tn_nsq_http_ready false (what the
 * systemd notification follows); /healthz stays 200. */
static void on_drain_done(void *arg, bool timed_out)
{
    (void)timed_out;
    *(bool *)arg = true;
}

static void test_draining(void **state)
{
    fixture_t *f = *state;
    bool done = false;
    tn_drain_opts_t o = {30000, NULL, on_drain_done, &done};
    tn_drain_t *d = NULL;
    assert_int_equal(tn_drain_new(&f->loop, &o, &d), 0);
    f->api.ready = true;
    f->api.drain = d;
    char resp[2048];
    get(f, "/readyz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 200 ", "{\"status\":\"ready\"}\n");
    assert_int_equal(tn_drain_start(d, 0), 0);
    assert_false(tn_nsq_http_ready(&f->api));
    get(f, "/readyz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 503 ", "{\"status\":\"draining\"}\n");
    assert_non_null(strstr(resp, "\r\nRetry-After: 1\r\n"));
    get(f, "/healthz", resp, sizeof(resp));
    assert_answer(resp, "HTTP/1.1 200 ", "{\"status\":\"ok\"}\n");
    f->api.drain = NULL;
    tn_drain_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_healthz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readyz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_draining, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
