/* The QUIC endpoints on their own: two endpoints on one loop over
 * loopback. The exporter material both ends see, a byte stream both ways
 * with a FIN, session resumption from the dialer's cache, a close seen by
 * both ends, a stream refused by a server that takes no streams, an
 * endpoint closed inside a callback, and bursts larger than one GSO batch
 * (with GSO and GRO, with both fallbacks forced, with a stretch of
 * loss).
 * uv_loop_close returns 0 at the end of each test. */
#include "core/platform.h"

#include "cluster/quic.h"
#include "core/err.h"

#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    tn_quic_conn_t *conn;
    int ready, closed, streams;
    int err;
    uint8_t ekm[TN_QUIC_EKM_LEN];
    tn_quic_stream_t *s;
} side_t;

typedef struct {
    tn_buf_t got;
    int ended;
    int err;
    bool echo; /* write back what arrives */
} sdata_t;

static void on_sdata(void *arg, tn_quic_stream_t *s, const uint8_t *p, size_t n)
{
    sdata_t *d = arg;
    assert_int_equal(tn_buf_append(&d->got, p, n), 0);
    if (d->echo)
        assert_int_equal(tn_quic_stream_write(s, p, n), 0);
}

static void on_sclosed(void *arg, tn_quic_stream_t *s, int err)
{
    sdata_t *d = arg;
    d->ended++;
    d->err = err;
}

static const tn_quic_stream_cbs_t scbs = {on_sdata, on_sclosed};

static sdata_t server_data;

static void on_ready(void *arg, tn_quic_conn_t *c)
{
    side_t *s = arg;
    s->conn = c;
    s->ready++;
    assert_int_equal(tn_quic_conn_ekm(c, s->ekm), 0);
}

static void on_stream(void *arg, tn_quic_conn_t *c, tn_quic_stream_t *st)
{
    side_t *s = arg;
    s->streams++;
    s->s = st;
    if (server_data.echo)
        tn_quic_stream_set_cbs(st, &scbs, &server_data);
}

static void on_closed(void *arg, tn_quic_conn_t *c, int err)
{
    side_t *s = arg;
    s->closed++;
    s->err = err;
    s->conn = NULL;
}

static const tn_quic_conn_cbs_t cbs = {on_ready, on_stream, on_closed};

static side_t srv_side, cli_side;

static bool open_no_gro; /* ep_open reads as on a kernel without UDP_GRO */

static tn_quic_ep_t *ep_open(uv_loop_t *loop, bool accept)
{
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    tn_quic_ep_opts_t o;
    memset(&o, 0, sizeof o);
    o.bind = (const struct sockaddr *)&a;
    memset(o.reset_key, 7, sizeof o.reset_key);
    o.accept = accept;
    o.server_cbs = &cbs;
    o.server_arg = &srv_side;
    o.test_no_gro = open_no_gro;
    tn_quic_ep_t *ep = NULL;
    char err[128];
    assert_int_equal(tn_quic_ep_open(loop, &o, &ep, err, sizeof err), 0);
    return ep;
}

static void run_while(uv_loop_t *loop, const int *v, int want)
{
    int64_t spins = 0;
    while (*v < want) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (++spins % 1000 == 0)
            usleep(1000);
        assert_true(spins < 20000000);
    }
}

static void on_ep_closed(void *arg)
{
    (*(int *)arg)++;
}

static void ep_close(uv_loop_t *loop, tn_quic_ep_t *ep)
{
    int done = 0;
    tn_quic_ep_close(ep, on_ep_closed, &done);
    run_while(loop, &done, 1);
}

/* Both endpoints closed, then the loop, which must hold nothing more. */
static void eps_close(uv_loop_t *loop, tn_quic_ep_t *cli, tn_quic_ep_t *srv)
{
    ep_close(loop, cli);
    ep_close(loop, srv);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* cli's connection to srv, whose streams echo, once its handshake is done. */
static tn_quic_conn_t *echo_connect(uv_loop_t *loop, tn_quic_ep_t *cli, tn_quic_ep_t *srv)
{
    struct sockaddr_storage sa;
    tn_quic_ep_addr(srv, &sa);
    server_data.echo = true;
    tn_quic_conn_t *c = NULL;
    assert_int_equal(tn_quic_connect(cli, (const struct sockaddr *)&sa, &cbs, &cli_side, &c), 0);
    run_while(loop, &cli_side.ready, 1);
    return c;
}

static void setup(void)
{
    memset(&srv_side, 0, sizeof srv_side);
    memset(&cli_side, 0, sizeof cli_side);
    tn_buf_fini(&server_data.got);
    memset(&server_data, 0, sizeof server_data);
    tn_buf_init(&server_data.got);
}

static void test_stream_ekm_close(void **state)
{
    setup();
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_quic_ep_t *srv = ep_open(&loop, true);
    tn_quic_ep_t *cli = ep_open(&loop, false);
    struct sockaddr_storage sa;
    tn_quic_ep_addr(srv, &sa);
    server_data.echo = true;
    tn_quic_conn_t *c = NULL;
    assert_int_equal(tn_quic_connect(cli, (const struct sockaddr *)&sa, &cbs, &cli_side, &c), 0);
    uint8_t tmp[TN_QUIC_EKM_LEN];
    assert_int_equal(tn_quic_conn_ekm(c, tmp), TN_ECLOSED); /* not before the handshake */
    run_while(&loop, &cli_side.ready, 1);
    assert_false(tn_quic_conn_resumed(c));

    sdata_t cd;
    memset(&cd, 0, sizeof cd);
    tn_buf_init(&cd.got);
    tn_quic_stream_t *s = NULL;
    assert_int_equal(tn_quic_stream_open(c, &scbs, &cd, &s), 0);
    /* 300 KiB both ways: several packets, windows given back as read. */
    size_t total = 300 * 1024;
    uint8_t *buf = malloc(total);
    for (size_t i = 0; i < total; i++)
        buf[i] = (uint8_t)(i * 31 + 7);
    assert_int_equal(tn_quic_stream_write(s, buf, total), 0);
    while (tn_buf_size(&cd.got) < total) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    assert_memory_equal(tn_buf_data(&cd.got), buf, total);
    assert_memory_equal(tn_buf_data(&server_data.got), buf, total);
    run_while(&loop, &srv_side.ready, 1);
    /* Both ends exported the same keying material. */
    assert_memory_equal(cli_side.ekm, srv_side.ekm, TN_QUIC_EKM_LEN);

    /* The dialer finishes its stream: the server sees the FIN. */
    tn_quic_stream_close(s);
    run_while(&loop, &server_data.ended, 1);
    assert_int_equal(server_data.err, 0);
    assert_int_equal(cd.ended, 0); /* no callback after the owner's close */

    /* A close by the dialer reaches the server. */
    tn_quic_conn_close(c, 0);
    assert_int_equal(cli_side.closed, 0); /* from the loop, not inside */
    run_while(&loop, &cli_side.closed, 1);
    assert_int_equal(cli_side.err, TN_ECLOSED);
    run_while(&loop, &srv_side.closed, 1);
    assert_int_equal(srv_side.err, TN_ECLOSED);

    free(buf);
    tn_buf_fini(&cd.got);
    eps_close(&loop, cli, srv);
}

static void test_resumption(void **state)
{
    setup();
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_quic_ep_t *srv = ep_open(&loop, true);
    tn_quic_ep_t *cli = ep_open(&loop, false);
    struct sockaddr_storage sa;
    tn_quic_ep_addr(srv, &sa);
    uint8_t first[TN_QUIC_EKM_LEN];
    for (int round = 0; round < 2; round++) {
        tn_quic_conn_t *c = NULL;
        assert_int_equal(tn_quic_connect(cli, (const struct sockaddr *)&sa, &cbs, &cli_side, &c),
                         0);
        run_while(&loop, &cli_side.ready, round + 1);
        /* The second dial resumes from the ticket of the first. */
        assert_int_equal(tn_quic_conn_resumed(c), round == 1);
        if (round == 0) {
            memcpy(first, cli_side.ekm, sizeof first);
            /* Give the session ticket time to arrive. */
            for (int i = 0; i < 50; i++) {
                uv_run(&loop, UV_RUN_NOWAIT);
                usleep(1000);
            }
        } else {
            /* Fresh keying material all the same. */
            assert_memory_not_equal(first, cli_side.ekm, sizeof first);
        }
        tn_quic_conn_close(c, 0);
        run_while(&loop, &cli_side.closed, round + 1);
    }
    eps_close(&loop, cli, srv);
}

static void test_stream_refused(void **state)
{
    setup();
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_quic_ep_t *srv = ep_open(&loop, true);
    tn_quic_ep_t *cli = ep_open(&loop, false);
    struct sockaddr_storage sa;
    tn_quic_ep_addr(srv, &sa);
    tn_quic_conn_t *c = NULL;
    assert_int_equal(tn_quic_connect(cli, (const struct sockaddr *)&sa, &cbs, &cli_side, &c), 0);
    run_while(&loop, &cli_side.ready, 1);
    /* The server's stream callback leaves it without callbacks: reset. */
    sdata_t cd;
    memset(&cd, 0, sizeof cd);
    tn_buf_init(&cd.got);
    tn_quic_stream_t *s = NULL;
    assert_int_equal(tn_quic_stream_open(c, &scbs, &cd, &s), 0);
    assert_int_equal(tn_quic_stream_write(s, "hello", 5), 0);
    run_while(&loop, &cd.ended, 1);
    assert_int_equal(cd.err, UV_ECONNRESET);
    assert_int_equal(srv_side.streams, 1);
    tn_buf_fini(&cd.got);
    /* Closing the endpoint ends its connections: the peer hears of it. */
    ep_close(&loop, srv);
    run_while(&loop, &cli_side.closed, 1);
    assert_int_equal(cli_side.err, TN_ECLOSED);
    ep_close(&loop, cli);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* An owner that closes the whole endpoint from inside a stream's data
 * callback (node RPC does, when the last call a shutdown waits for
 * ends): ngtcp2 goes on with the packet after the callback returns, so
 * nothing of the connection may be freed under it. Run under ASan or
 * valgrind to see a use after free. */
static tn_quic_ep_t *close_me;
static int close_me_done;

static void on_sdata_close_ep(void *arg, tn_quic_stream_t *s, const uint8_t *p, size_t n)
{
    on_sdata(arg, s, p, n);
    if (close_me) {
        tn_quic_ep_t *ep = close_me;
        close_me = NULL;
        tn_quic_ep_close(ep, on_ep_closed, &close_me_done);
    }
}

static const tn_quic_stream_cbs_t close_cbs = {on_sdata_close_ep, on_sclosed};

static void test_close_inside_callback(void **state)
{
    setup();
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_quic_ep_t *srv = ep_open(&loop, true);
    tn_quic_ep_t *cli = ep_open(&loop, false);
    tn_quic_conn_t *c = echo_connect(&loop, cli, srv);
    /* Several streams whose echoes share packets, and one large one. */
    enum { NS = 8 };
    sdata_t cd[NS];
    size_t total = 64 * 1024;
    uint8_t *buf = malloc(total);
    for (size_t i = 0; i < total; i++)
        buf[i] = (uint8_t)(i * 13 + 1);
    for (int i = 0; i < NS; i++) {
        memset(&cd[i], 0, sizeof cd[i]);
        tn_buf_init(&cd[i].got);
        tn_quic_stream_t *s = NULL;
        assert_int_equal(tn_quic_stream_open(c, &close_cbs, &cd[i], &s), 0);
        assert_int_equal(tn_quic_stream_write(s, buf, i == 0 ? total : 100), 0);
    }
    close_me = cli;
    close_me_done = 0;
    run_while(&loop, &close_me_done, 1);
    /* The client's streams and connection ended, each once. */
    assert_int_equal(cli_side.closed, 1);
    assert_int_equal(cli_side.err, TN_ECLOSED);
    for (int i = 0; i < NS; i++) {
        assert_true(cd[i].ended <= 1);
        tn_buf_fini(&cd[i].got);
    }
    /* The server hears of the close. */
    run_while(&loop, &srv_side.closed, 1);
    free(buf);
    ep_close(&loop, srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A burst far larger than one GSO batch (44 packets, about 62 KiB), both
 * ways at once: the echo of 1 MiB on one stream and 100 small streams
 * whose packets share batches. With gso false both endpoints act as on a
 * kernel without UDP_SEGMENT; with deaf_at set the server drops every
 * datagram for a while once that many bytes arrived (whole batches lost),
 * and QUIC's loss recovery brings the rest. */
static void burst(bool gso, size_t deaf_at)
{
    setup();
    uv_loop_t loop;
    uv_loop_init(&loop);
    open_no_gro = !gso;
    tn_quic_ep_t *srv = ep_open(&loop, true);
    tn_quic_ep_t *cli = ep_open(&loop, false);
    open_no_gro = false;
    if (!gso) {
        tn_quic_ep_test_no_gso(srv);
        tn_quic_ep_test_no_gso(cli);
    }
    tn_quic_conn_t *c = echo_connect(&loop, cli, srv);

    size_t total = 1024 * 1024;
    uint8_t *buf = malloc(total);
    for (size_t i = 0; i < total; i++)
        buf[i] = (uint8_t)(i * 29 + 3);
    sdata_t big;
    memset(&big, 0, sizeof big);
    tn_buf_init(&big.got);
    tn_quic_stream_t *s = NULL;
    assert_int_equal(tn_quic_stream_open(c, &scbs, &big, &s), 0);
    assert_int_equal(tn_quic_stream_write(s, buf, total), 0);
    enum { NSMALL = 100 };
    static sdata_t small[NSMALL];
    for (int i = 0; i < NSMALL; i++) {
        memset(&small[i], 0, sizeof small[i]);
        tn_buf_init(&small[i].got);
        tn_quic_stream_t *t = NULL;
        /* The server takes 128 streams at once: 101 fit. */
        assert_int_equal(tn_quic_stream_open(c, &scbs, &small[i], &t), 0);
        assert_int_equal(tn_quic_stream_write(t, buf + i, 700), 0);
    }
    if (deaf_at) {
        int64_t spins = 0;
        while (tn_buf_size(&server_data.got) < deaf_at) {
            uv_run(&loop, UV_RUN_NOWAIT);
            assert_true(++spins < 20000000);
        }
        tn_quic_ep_test_deaf(srv, true);
        for (int i = 0; i < 30; i++) {
            uv_run(&loop, UV_RUN_NOWAIT);
            usleep(1000);
        }
        tn_quic_ep_test_deaf(srv, false);
    }
    int64_t spins = 0;
    while (tn_buf_size(&big.got) < total) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (++spins % 1000 == 0)
            usleep(1000);
        assert_true(spins < 20000000);
    }
    assert_int_equal(tn_buf_size(&big.got), total);
    assert_memory_equal(tn_buf_data(&big.got), buf, total);
    for (int i = 0; i < NSMALL; i++) {
        while (tn_buf_size(&small[i].got) < 700) {
            uv_run(&loop, UV_RUN_NOWAIT);
            if (++spins % 1000 == 0)
                usleep(1000);
            assert_true(spins < 20000000);
        }
        assert_int_equal(tn_buf_size(&small[i].got), 700);
        assert_memory_equal(tn_buf_data(&small[i].got), buf + i, 700);
        tn_buf_fini(&small[i].got);
    }

    tn_quic_ep_test_stats_t cs, ss;
    tn_quic_ep_test_stats(cli, &cs);
    tn_quic_ep_test_stats(srv, &ss);
    if (deaf_at)
        assert_true(ss.deaf_drops > 0); /* something was lost */
    if (gso) {
        /* Either the kernel took the batches, or it refused the first
         * and the endpoint remembered: one refusal, then singles. */
        assert_true(cs.gso_sends > 0 || (cs.gso_off && cs.gso_refused == 1));
        assert_true(ss.gso_sends > 0 || (ss.gso_off && ss.gso_refused == 1));
        if (cs.gso_sends > 0) {
            assert_false(cs.gso_off);
            /* 1 MiB went in far fewer sends than its 700-odd packets. */
            assert_true(cs.gso_sends + cs.single_sends < 500);
        }
        /* A kernel with UDP_GRO hands the server batches of the client's
         * GSO sends in one read (over loopback, always whole). */
        if (ss.gro && cs.gso_sends > 0)
            assert_true(ss.gro_reads > 0);
    } else {
        assert_true(cs.gso_off && ss.gso_off);
        assert_false(cs.gro || ss.gro); /* libuv's recvmmsg read them */
        assert_int_equal(ss.gro_reads, 0);
        assert_int_equal(cs.gso_refused, 1);
        assert_int_equal(ss.gso_refused, 1);
        assert_int_equal(cs.gso_sends, 0);
        assert_int_equal(ss.gso_sends, 0);
        assert_true(cs.single_sends > 700); /* every packet alone */
        assert_true(ss.single_sends > 700);
    }

    tn_quic_stream_close(s);
    run_while(&loop, &server_data.ended, 1);
    tn_quic_conn_close(c, 0);
    run_while(&loop, &srv_side.closed, 1);
    free(buf);
    tn_buf_fini(&big.got);
    eps_close(&loop, cli, srv);
}

static void test_burst_gso(void **state)
{
    burst(true, 0);
}

static void test_burst_no_gso(void **state)
{
    burst(false, 0);
}

static void test_burst_loss(void **state)
{
    burst(true, 256 * 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_ekm_close), cmocka_unit_test(test_resumption),
        cmocka_unit_test(test_stream_refused),   cmocka_unit_test(test_close_inside_callback),
        cmocka_unit_test(test_burst_gso),        cmocka_unit_test(test_burst_no_gso),
        cmocka_unit_test(test_burst_loss),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tn_buf_fini(&server_data.got);
    return rc;
}
