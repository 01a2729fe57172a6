/* The /v1 topic routes (topics.c). */
#ifndef TN_API_V1_TOPICS_H
#define TN_API_V1_TOPICS_H

#include "core/platform.h"

#include "api/v1.h"

/* GET, POST /v1/topics; GET, PATCH, DELETE /v1/topics/{topic}. 0 or
 * UV_ENOMEM. */
int tn__v1_topics_register(tn_http_server_t *srv, tn_v1_t *v);
/* After v->closing is set: creations still finishing (their TOPIC_READY
 * or take-back proposed again) stop; one with a proposal under way ends
 * with it. */
void tn__v1_topics_close(tn_v1_t *v);

#endif
