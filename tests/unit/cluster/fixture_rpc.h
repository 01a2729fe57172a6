/* Node RPC endpoints for the cluster unit tests that drive a handler over
 * real node RPC (test_dataplane.c, test_settle.c): an owner endpoint that
 * serves the handlers under test and a caller endpoint that serves none,
 * both on one loop over loopback with one secret, and running the loop
 * until a flag is set. Linked into every test of tests/unit/cluster (see
 * CMakeLists.txt). Every helper fails the current test (cmocka) instead of
 * returning an error. */
#ifndef TN_TESTS_CLUSTER_FIXTURE_RPC_H
#define TN_TESTS_CLUSTER_FIXTURE_RPC_H

#include "core/platform.h"

#include "testutil.h"

#include "cluster/rpc.h"

/* How long a wait may take before the test fails (ms). */
#define TU_GUARD_MS 30000

/* Run loop until *flag (borrowed) is true; fail after TU_GUARD_MS. */
void tu_run_until(uv_loop_t *loop, const bool *flag);

/* A node RPC endpoint on 127.0.0.1, port 0, with the tests' secret,
 * serving the nh handlers of h (copied; NULL, 0: none). */
tn_rpc_t *tu_rpc_open(uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh);

typedef struct {
    tn_rpc_t *owner;  /* serves the handlers */
    tn_rpc_t *caller; /* serves nothing */
    char addr[64];    /* the owner's address, for calls */
} tu_rpc_pair_t;

/* Open both endpoints into p: the owner serving h (as tu_rpc_open). */
void tu_rpc_pair_open(tu_rpc_pair_t *p, uv_loop_t *loop, const tn_rpc_handler_t *h, size_t nh);
/* Close the caller, then the owner, running loop until each is closed. */
void tu_rpc_pair_close(tu_rpc_pair_t *p, uv_loop_t *loop);

#endif
