/* The /v1/drain routes (drain.c): start a drain (admins), watch it. */
#ifndef TN_API_V1_DRAIN_H
#define TN_API_V1_DRAIN_H

#include "core/platform.h"

#include "api/v1.h"

/* POST and GET /v1/drain, over v->drain (api/drain.h; none: 404 as an
 * unknown route). 0 or UV_ENOMEM. */
int tn__v1_drain_register(tn_http_server_t *srv, tn_v1_t *v);

#endif
