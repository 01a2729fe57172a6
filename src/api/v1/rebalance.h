/* The rebalance routes (rebalance.c): POST and GET /v1/cluster/rebalance. */
#ifndef TN_API_V1_REBALANCE_H
#define TN_API_V1_REBALANCE_H

#include "core/platform.h"

#include "api/v1.h"

/* The routes. 0 or UV_ENOMEM. */
int tn__v1_rebalance_register(tn_http_server_t *srv, tn_v1_t *v);

#endif
