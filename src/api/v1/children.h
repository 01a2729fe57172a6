/* The /v1 child topic routes (children.c), and the linking the topic
 * routes use when a topic is created with a parent. */
#ifndef TN_API_V1_CHILDREN_H
#define TN_API_V1_CHILDREN_H

#include "core/platform.h"

#include "api/v1.h"

/* The child topic routes. 0 or UV_ENOMEM. */
int tn__v1_children_register(tn_http_server_t *srv, tn_v1_t *v);
/* How many children parent has. */
size_t tn__v1_children_of(const tn_meta_state_t *s, const char *parent);
/* Why parent -> child may not be linked with delay_ms: an HTTP status
 * with *msg, or 0. */
int tn__v1_link_refusal(tn_v1_t *v, const tn_meta_topic_t *parent, const tn_meta_topic_t *child,
                        int64_t delay_ms, const char **msg);

/* Attach child (just created) to parent and answer r (may be NULL: the
 * client left) 201 with the child's record, or the error. */
void tn__v1_attach_created(tn_v1_t *v, tn_http_request_t *r, const char *parent, const char *child,
                           int64_t delay_ms);

#endif
