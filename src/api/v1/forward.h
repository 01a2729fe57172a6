/* /v1 consumes in a cluster (forward.c): the door routes a consume
 * through cluster/router.h; the owner serves TN_OP_CONSUME on its lanes. */
#ifndef TN_API_V1_FORWARD_H
#define TN_API_V1_FORWARD_H

#include "core/platform.h"

#include "api/consume.h"
#include "api/v1.h"
#include "cluster/rpc.h"

/* Serve a validated, authorized /v1 consume: on this node's lanes when
 * every partition it may read is here (a lone node, always), else as
 * forward.c's design says. */
void tn__v1_consume_route(tn_v1_t *v, tn_http_request_t *r, const tn_consume_args_t *a);

/* A drain (api/drain.h): every consume routed here that waits on other
 * nodes is answered now (a batch with what it holds, else 204), and what
 * it asked of its owners is cancelled (they nack what they had taken).
 * The /v1 route refuses new consumes meanwhile. */
void tn__v1_forwards_drain(tn_v1_t *v);

/* The owner's records of leases its forwarded consumes answered with
 * (the grace of forward.c); freed by tn_v1_close. */
typedef struct tn__v1_grace_s tn__v1_grace_t;
void tn__v1_grace_free(tn_v1_t *v);

#endif
