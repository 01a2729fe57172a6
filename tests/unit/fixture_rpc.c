/* Node RPC endpoints for the unit tests. See fixture_rpc.h. */
#include "core/platform.h"

#include "fixture_rpc.h"

#include "cluster/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tu_guard_ms(void)
{
    const char *s = getenv("TN_TEST_GUARD");
    return s != NULL ? (int)strtol(s, NULL, 10) : 30000;
}

static void on_guard(uv_timer_t *t)
{
    *(bool *)t->data = true;
}

void tu_run_until(uv_loop_t *loop, const bool *flag)
{
    bool expired = false;
    uv_timer_t guard;
    uv_timer_init(loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, on_guard, (uint64_t)tu_guard_ms(), 0);
    while (!*flag && !expired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    assert_true(*flag);
}

tn_rpc_t *tu_rpc_open_with(uv_loop_t *loop, const char *bind, const char *secret,
                           const tn_rpc_handler_t *h, size_t nh, void (*tweak)(tn_rpc_opts_t *o))
{
    tn_rpc_opts_t o;
    memset(&o, 0, sizeof o);
    o.bind = bind;
    o.secret = (const uint8_t *)secret;
    o.secret_len = strlen(secret);
    o.handlers = h;
    o.nhandlers = nh;
    if (tweak != NULL)
        tweak(&o);
    tn_rpc_t *r = NULL;
    char err[256];
    int rc = tn_rpc_open(loop, &o, &r, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "tn_rpc_open: %s\n", err);
    assert_int_equal(rc, 0);
    return r;
}

tn_rpc_t *tu_rpc_open(uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh)
{
    return tu_rpc_open_with(loop, "127.0.0.1:0", TU_RPC_SECRET, h, nh, NULL);
}

static void on_rpc_closed(void *arg)
{
    *(bool *)arg = true;
}

void tu_rpc_close(uv_loop_t *loop, tn_rpc_t *r)
{
    bool done = false;
    tn_rpc_close(r, on_rpc_closed, &done);
    tu_run_until(loop, &done);
}

void tu_rpc_pair_open(tu_rpc_pair_t *p, uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh)
{
    p->owner = tu_rpc_open(loop, h, nh);
    p->caller = tu_rpc_open(loop, NULL, 0);
    snprintf(p->addr, sizeof p->addr, "%s", tn_rpc_addr(p->owner));
}

void tu_rpc_pair_close(tu_rpc_pair_t *p, uv_loop_t *loop)
{
    tu_rpc_close(loop, p->caller);
    tu_rpc_close(loop, p->owner);
    p->caller = p->owner = NULL;
}

void tu_srv_pair_open(tu_rpc_pair_t *p, uv_loop_t *loop, tn_srv_t *srv, uint8_t op, unsigned flags)
{
    tn_rpc_handler_t h[TN_SRV_HANDLERS];
    size_t nh = 0;
    tn_srv_handlers(srv, h, &nh);
    assert_int_equal(nh, 1);
    assert_int_equal(h[0].op, op);
    assert_int_equal(h[0].flags, flags);
    tu_rpc_pair_open(p, loop, h, nh);
}

void tu_srv_pair_close(tu_rpc_pair_t *p, uv_loop_t *loop, tn_srv_t *srv)
{
    tu_rpc_pair_close(p, loop);
    tn_srv_free(srv);
}

tu_srv_fx_t *tu_srv_fx_new(void)
{
    tu_srv_fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    return f;
}

void tu_srv_fx_serve(tu_srv_fx_t *f, tn_srv_t *srv, uint8_t op, unsigned flags)
{
    f->srv = srv;
    tu_srv_pair_open(&f->rpc, &f->loop, srv, op, flags);
}

void tu_srv_fx_free(tu_srv_fx_t *f, uv_handle_t *handle)
{
    tu_srv_pair_close(&f->rpc, &f->loop, f->srv);
    if (handle != NULL)
        uv_close(handle, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
}

static void on_raw(void *arg, int status, const tn_wire_reply_t *rep, const char *err)
{
    (void)err;
    tu_rpc_raw_t *r = arg;
    r->done = true;
    r->status = status;
    if (status == 0) {
        r->http = rep->status;
        size_t n = TN_MIN(rep->body_len, sizeof(r->body) - 1);
        memcpy(r->body, rep->body, n);
        r->body[n] = '\0';
    }
}

uint16_t tu_rpc_raw(const tu_rpc_pair_t *p, uv_loop_t *loop, uint8_t op, const tn_buf_t *payload,
                    uint64_t timeout_ms, tu_rpc_raw_t *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(tn_rpc_call(p->caller, p->addr, op, tn_buf_data(payload), tn_buf_size(payload),
                                 timeout_ms, on_raw, r, NULL),
                     0);
    tu_run_until(loop, &r->done);
    assert_int_equal(r->status, 0);
    return r->http;
}

void tu_dead_peer(uv_loop_t *loop, uv_udp_t *sock, char *addr, size_t len)
{
    struct sockaddr_in sa;
    assert_int_equal(uv_udp_init(loop, sock), 0);
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_udp_bind(sock, (const struct sockaddr *)&sa, 0), 0);
    struct sockaddr_storage got;
    int n = sizeof(got);
    assert_int_equal(uv_udp_getsockname(sock, (struct sockaddr *)&got, &n), 0);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(((struct sockaddr_in *)&got)->sin_port));
}
