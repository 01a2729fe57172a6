/* The /v1 consume and settle routes (consume.c). */
#ifndef TN_API_V1_CONSUME_H
#define TN_API_V1_CONSUME_H

#include "core/platform.h"

#include "api/v1.h"

/* GET /v1/topics/{topic}/consume, POST .../ack and .../ack/batch. 0 or
 * UV_ENOMEM. */
int tn__v1_consume_register(tn_http_server_t *srv, tn_v1_t *v);

#endif
