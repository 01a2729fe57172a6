/* The /v1/cluster routes (cluster.c): members, moves, decommissioning. */
#ifndef TN_API_V1_CLUSTER_H
#define TN_API_V1_CLUSTER_H

#include "core/platform.h"

#include "api/v1.h"

/* The /v1/cluster routes. 0 or UV_ENOMEM. */
int tn__v1_cluster_register(tn_http_server_t *srv, tn_v1_t *v);

#endif
