/* Request body content codings: `gzip` (zlib) and `zstd` (libzstd), and
 * `identity`. A body is decoded into a new buffer under a cap on the
 * decoded size, checked as output is produced, so a small compressed body
 * cannot expand past its route's limit in memory.
 *
 * Thread safety: pure functions; any thread. */
#ifndef TN_PROTO_HTTP_ENCODING_H
#define TN_PROTO_HTTP_ENCODING_H

#include "core/platform.h"

#include "core/buf.h"

/* Decode in (borrowed) per the Content-Encoding value coding into out
 * (appended). Returns 0; UV_ENOTSUP for a coding other than gzip, x-gzip,
 * zstd and identity (answer 415); TN_ETOOBIG when the decoded body would
 * pass max_out; TN_ECORRUPT for a malformed or truncated stream; UV_ENOMEM. */
int tn_http_decode_body(tn_iov_t coding, tn_iov_t in, uint64_t max_out, tn_buf_t *out);

#endif
