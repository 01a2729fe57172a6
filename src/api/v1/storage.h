/* The /v1/storage routes (storage.c): the scrub of sealed segments, on
 * request and its report. */
#ifndef TN_API_V1_STORAGE_H
#define TN_API_V1_STORAGE_H

#include "core/platform.h"

#include "api/v1.h"
#include "storage/scrub.h"

/* The /v1/storage routes. 0 or UV_ENOMEM. */
int tn__v1_storage_register(tn_http_server_t *srv, tn_v1_t *v);

/* A scrub report as JSON (one object), appended to b. */
void tn__v1_scrub_report_json(tn_buf_t *b, const tn_scrub_report_t *rep);

#endif
