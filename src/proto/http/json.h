/* Strict decoding of a flat JSON object body into typed fields, one
 * element at a time (yajl's callback parser, in a preallocated arena):
 * nothing is built that the input could size beyond the caller's fields.
 *
 * Refused, with a message fit for a 400 answer: a body that is not one
 * JSON object, a syntax error, an unknown field, a duplicate field, a value
 * of the wrong type (including a fraction for an integer, or an integer out
 * of range), a nested object or array, a string longer than its field.
 * A null value leaves the field absent.
 *
 * Threads: any. */
#ifndef TN_PROTO_HTTP_JSON_H
#define TN_PROTO_HTTP_JSON_H

#include "core/platform.h"

#include "core/jsonvalid.h" /* TN_JSON_MAX_DEPTH, tn_json_valid */

#include <yajl/yajl_parse.h>

typedef enum { TN_JF_INT = 1, TN_JF_STR, TN_JF_BOOL } tn_jfield_type_t;

typedef struct {
    const char *name;
    tn_jfield_type_t type;
    size_t off; /* where in the output struct: int64_t, char[max + 1] or bool */
    size_t max; /* TN_JF_STR: longest value in bytes */
} tn_jfield_t;

#define TN_JSON_MAX_FIELDS 32
#define TN_JSON_MAX_BODY   (1024 * 1024)

/* Decode body into out. present[i] tells whether fields[i] was given.
 * 0, UV_EINVAL (err has the reason) or UV_ENOMEM. */
int tn_json_object(const char *body, size_t len, const tn_jfield_t *fields, size_t nfields,
                   void *out, bool *present, char *err, size_t errlen);

/* Run yajl's callback parser over body with ctx (cb may be NULL: only
 * check), in an arena sized from len. 0 with *ok telling whether the body
 * is exactly one JSON value (whitespace around it allowed, nesting at most
 * TN_JSON_MAX_DEPTH), or UV_ENOMEM. validate_utf8 false accepts strings
 * that are not UTF-8. */
int tn_json_events(const char *body, size_t len, const yajl_callbacks *cb, void *ctx,
                   bool validate_utf8, bool *ok);

#endif
