/* Node RPC servers whose work is done by hooks: the scaffolding that the
 * servers of PURGE (cluster/purge.h), REMOTE_CHECK (cluster/rcheck.h),
 * SETTLE (cluster/settle.h) and PSTATS (cluster/pstats.h) share. Each of
 * those files keeps its own op handler and its typed hook setter; this one
 * holds the server (what it serves, its hooks and their arguments, a
 * context fixed when it is made), hands its handler to the RPC table, and
 * answers 503 with the server's sentence while any of its hooks is unset,
 * so an op handler runs only with every hook in place.
 *
 * Lifecycle: the daemon makes a server before node RPC opens, sets its
 * hooks once the part that does the work is up (the catalog, /v1, the
 * consume registry), clears them before that part stops, and frees the
 * server only after the RPC endpoint closed. A request under way keeps the
 * hooks it started with.
 *
 * Threads: the loop thread of the RPC endpoint. */
#ifndef TN_CLUSTER_SRV_H
#define TN_CLUSTER_SRV_H

#include "core/platform.h"

#include "cluster/rpc.h"

#include <stddef.h>
#include <stdint.h>

/* The most hooks a server has (SETTLE's owns and local). */
#define TN_SRV_MAX_HOOKS 2
/* How many handlers tn_srv_handlers writes. */
#define TN_SRV_HANDLERS 1

/* A hook as stored: a function of the server's own hook type, converted
 * to this one (C converts function pointers to another function pointer
 * type and back unchanged). Only a server's typed setter converts to it,
 * and only its op handler converts back, to the same type. */
typedef void (*tn_srv_fn)(void);

typedef struct tn_srv_s tn_srv_t;

/* A server's op handler: as tn_rpc_handler_cb, with the server (every one
 * of its hooks set) in place of arg. It answers with tn_rpc_reply exactly
 * once, now or later. */
typedef void (*tn_srv_handler_cb)(tn_srv_t *s, tn_rpc_req_t *req, const uint8_t *payload,
                                  size_t len);

/* What a server serves. */
typedef struct {
    uint8_t op;            /* TN_OP_* */
    unsigned flags;        /* TN_RPC_OP_* */
    unsigned nhooks;       /* 0..TN_SRV_MAX_HOOKS: all set before handle runs */
    const char *not_ready; /* the 503 sentence while a hook is unset */
    tn_srv_handler_cb handle;
} tn_srv_op_t;

/* Read by the op handler; written only through the functions below. */
struct tn_srv_s {
    const tn_srv_op_t *op;          /* borrowed (static) */
    void *ctx;                      /* borrowed, fixed at tn_srv_new */
    tn_srv_fn fn[TN_SRV_MAX_HOOKS]; /* NULL: unset */
    void *arg[TN_SRV_MAX_HOOKS];    /* borrowed: each hook's argument */
};

/* A server of op (borrowed until tn_srv_free; static in practice) with
 * context ctx (borrowed, may be NULL) and no hook set. 0 or UV_ENOMEM. */
int tn_srv_new(const tn_srv_op_t *op, void *ctx, tn_srv_t **out);
/* Set hook i (< op->nhooks) to fn with arg (borrowed until the hook is
 * set again); fn NULL: unset, and requests answer 503. */
void tn_srv_set_hook(tn_srv_t *s, unsigned i, tn_srv_fn fn, void *arg);
/* s's handler for the RPC table (TN_SRV_HANDLERS of them into out, their
 * number into *n), arg s. */
void tn_srv_handlers(tn_srv_t *s, tn_rpc_handler_t *out, size_t *n);
/* Free s (NULL: nothing), only after the RPC endpoint it serves closed. */
void tn_srv_free(tn_srv_t *s);

#endif
