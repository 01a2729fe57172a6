/* The /v1 produce routes (produce.c). */
#ifndef TN_API_V1_PRODUCE_H
#define TN_API_V1_PRODUCE_H

#include "core/platform.h"

#include "api/v1.h"

/* POST /v1/topics/{topic}/produce and .../produce/batch. 0 or UV_ENOMEM. */
int tn__v1_produce_register(tn_http_server_t *srv, tn_v1_t *v);

#endif
