/* The partition move routes (moves.c): PATCH
 * /v1/topics/{topic}/partitions/{p}, GET /v1/cluster/moves, DELETE
 * /v1/cluster/moves/{id}. */
#ifndef TN_API_V1_MOVES_H
#define TN_API_V1_MOVES_H

#include "core/platform.h"

#include "api/v1.h"
#include "meta/partstate.h"

/* The routes. 0 or UV_ENOMEM. */
int tn__v1_moves_register(tn_http_server_t *srv, tn_v1_t *v);

/* Decode a move's body, {"replicas": ["2", "4", "3"]} (member ids as
 * strings of digits or as numbers, preferred leader first), into
 * target[0..*n) (TN_PSTATE_MAX_REPLICAS slots). 0; UV_EINVAL with the
 * reason in err (fit for a 400: not one JSON object, an unknown or
 * repeated field, no replicas, an empty list, more than
 * TN_PSTATE_MAX_REPLICAS, an id that is not a positive integer below
 * 2^32); UV_ENOMEM. Any thread. */
int tn__v1_move_body(const char *body, size_t len, uint32_t *target, uint32_t *n, char *err,
                     size_t errlen);

#endif
