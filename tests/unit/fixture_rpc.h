/* Node RPC endpoints for the unit tests that drive a handler over real
 * node RPC (tests/unit/cluster: test_dataplane.c, test_pstats.c,
 * test_perrs.c, test_purge.c, test_rcheck.c, test_router.c, test_router_rcheck.c,
 * test_settle.c, test_rpc.c; tests/unit/api: test_forward.c): endpoints on
 * one loop over loopback with one secret, an owner endpoint that serves
 * the handlers under test beside a caller endpoint that serves none, a
 * hooked server (cluster/srv.h) served that way, alone on a loop of its
 * own or beside other parts, a raw request to the owner, a peer nobody
 * answers for, and running the loop until a flag is set. Built once into
 * the tern_unit_fixtures library that every unit test links (see
 * CMakeLists.txt). Every helper fails the current test (cmocka) instead
 * of returning an error. */
#ifndef TN_TESTS_FIXTURE_RPC_H
#define TN_TESTS_FIXTURE_RPC_H

#include "core/platform.h"

#include "testutil.h"

#include "cluster/rpc.h"
#include "cluster/srv.h"
#include "core/buf.h"

/* The secret of the tests' endpoints. */
#define TU_RPC_SECRET "correct horse battery staple"

/* How long a wait may take before the test fails (ms): $TN_TEST_GUARD
 * when set, else 30000. */
int tu_guard_ms(void);

/* Run loop until *flag (borrowed) is true; fail after tu_guard_ms(). */
void tu_run_until(uv_loop_t *loop, const bool *flag);

/* A node RPC endpoint bound to bind with secret (both borrowed for the
 * call), serving the nh handlers of h (copied; NULL, 0: none); tweak (may
 * be NULL) adjusts the options last. */
tn_rpc_t *tu_rpc_open_with(uv_loop_t *loop, const char *bind, const char *secret,
                           const tn_rpc_handler_t *h, size_t nh, void (*tweak)(tn_rpc_opts_t *o));
/* The same on 127.0.0.1, port 0, with TU_RPC_SECRET and no tweak. */
tn_rpc_t *tu_rpc_open(uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh);
/* Close r and run loop until it is closed. */
void tu_rpc_close(uv_loop_t *loop, tn_rpc_t *r);

typedef struct {
    tn_rpc_t *owner;  /* serves the handlers */
    tn_rpc_t *caller; /* serves nothing */
    char addr[64];    /* the owner's address, for calls */
} tu_rpc_pair_t;

/* Open both endpoints into p: the owner serving h (as tu_rpc_open). */
void tu_rpc_pair_open(tu_rpc_pair_t *p, uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh);
/* Close the caller, then the owner, running loop until each is closed. */
void tu_rpc_pair_close(tu_rpc_pair_t *p, uv_loop_t *loop);

/* Open p as tu_rpc_pair_open, its owner serving srv's handler (srv
 * borrowed until tu_srv_pair_close), after checking that the handler is
 * op's with flags (TN_RPC_OP_*). */
void tu_srv_pair_open(tu_rpc_pair_t *p, uv_loop_t *loop, tn_srv_t *srv, uint8_t op, unsigned flags);
/* Close p as tu_rpc_pair_close, then free srv (only now: its handler
 * answered). */
void tu_srv_pair_close(tu_rpc_pair_t *p, uv_loop_t *loop, tn_srv_t *srv);

/* A hooked server alone on a loop of its own: the fixture of the tests
 * that script a server's hooks (test_purge.c, test_rcheck.c,
 * test_settle.c). */
typedef struct {
    uv_loop_t loop;
    tn_srv_t *srv;     /* owned from tu_srv_fx_serve */
    tu_rpc_pair_t rpc; /* the owner serves srv */
} tu_srv_fx_t;

/* A fixture (owned by the caller, freed by tu_srv_fx_free) with its loop
 * running and nothing served yet: the test makes its own handles on
 * f->loop and its server, then serves it. */
tu_srv_fx_t *tu_srv_fx_new(void);
/* Serve srv (transferred) as tu_srv_pair_open does. */
void tu_srv_fx_serve(tu_srv_fx_t *f, tn_srv_t *srv, uint8_t op, unsigned flags);
/* Close the pair and free the server, close handle (the test's own on
 * f->loop; NULL: none), check that the loop closes, and free f. */
void tu_srv_fx_free(tu_srv_fx_t *f, uv_handle_t *handle);

/* A raw request's answer: its HTTP status and body (cut to fit, NUL
 * ended). */
typedef struct {
    bool done;
    int status; /* the call's own: 0 once answered */
    uint16_t http;
    char body[1024];
} tu_rpc_raw_t;

/* Send payload (borrowed; the request after its opcode) as op from p's
 * caller to its owner, run loop until answered within timeout_ms, check
 * that it was, and return the answer's HTTP status (also in r). */
uint16_t tu_rpc_raw(const tu_rpc_pair_t *p, uv_loop_t *loop, uint8_t op, const tn_buf_t *payload,
                    uint64_t timeout_ms, tu_rpc_raw_t *r);

/* Bind sock (caller-owned, closed by the caller) to a UDP port on
 * 127.0.0.1 that nothing reads, and write its address into addr: a peer
 * whose calls fail or time out. */
void tu_dead_peer(uv_loop_t *loop, uv_udp_t *sock, char *addr, size_t len);

#endif
