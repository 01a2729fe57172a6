/* Node RPC endpoints for the cluster unit tests. See fixture_rpc.h. */
#include "core/platform.h"

#include "fixture_rpc.h"

#include <stdio.h>
#include <string.h>

#define SECRET "correct horse battery staple"

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
    uv_timer_start(&guard, on_guard, TU_GUARD_MS, 0);
    while (!*flag && !expired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    assert_true(*flag);
}

tn_rpc_t *tu_rpc_open(uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh)
{
    tn_rpc_opts_t o;
    memset(&o, 0, sizeof o);
    o.bind = "127.0.0.1:0";
    o.secret = (const uint8_t *)SECRET;
    o.secret_len = strlen(SECRET);
    o.handlers = h;
    o.nhandlers = nh;
    tn_rpc_t *r = NULL;
    char err[256];
    int rc = tn_rpc_open(loop, &o, &r, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "tn_rpc_open: %s\n", err);
    assert_int_equal(rc, 0);
    return r;
}

void tu_rpc_pair_open(tu_rpc_pair_t *p, uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh)
{
    p->owner = tu_rpc_open(loop, h, nh);
    p->caller = tu_rpc_open(loop, NULL, 0);
    snprintf(p->addr, sizeof p->addr, "%s", tn_rpc_addr(p->owner));
}

static void on_rpc_closed(void *arg)
{
    *(bool *)arg = true;
}

void tu_rpc_pair_close(tu_rpc_pair_t *p, uv_loop_t *loop)
{
    bool done = false;
    tn_rpc_close(p->caller, on_rpc_closed, &done);
    tu_run_until(loop, &done);
    done = false;
    tn_rpc_close(p->owner, on_rpc_closed, &done);
    tu_run_until(loop, &done);
    p->caller = p->owner = NULL;
}
