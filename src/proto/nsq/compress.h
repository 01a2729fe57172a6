/* The compressed streams NSQ clients negotiate with IDENTIFY: Snappy's
 * framing format (stream identifier, then chunks of at most 64 KiB of
 * data, each with a masked CRC32C of its uncompressed bytes) and raw
 * deflate with a sync flush after every write.
 *
 * Decoders take input in pieces as it arrives and append what it decodes
 * to an output buffer, at most max_out bytes per call: input they did not
 * get to is kept, and *more says to call again (with no new input) once
 * the output has been consumed. A few bytes of deflate can stand for
 * megabytes; this keeps a connection's memory bounded by what it reads.
 *
 * Thread safety: a stream object belongs to one connection (one thread). */
#ifndef TN_PROTO_NSQ_COMPRESS_H
#define TN_PROTO_NSQ_COMPRESS_H

#include "core/platform.h"

#include "core/buf.h"

#include <zlib.h>

#define TN_SNAPPY_MAX_CHUNK 65536 /* uncompressed bytes in one chunk */

typedef struct {
    tn_buf_t in; /* a partial chunk, and input not decoded yet */
    bool header_seen;
} tn_snappy_dec_t;

typedef struct {
    bool header_sent;
    tn_buf_t scratch;
} tn_snappy_enc_t;

void tn_snappy_dec_init(tn_snappy_dec_t *d);
void tn_snappy_dec_fini(tn_snappy_dec_t *d);
/* Decode data (borrowed). Returns 0, TN_ECORRUPT (not a valid stream:
 * missing identifier, bad CRC, bad chunk type or length) or UV_ENOMEM. */
int tn_snappy_decode(tn_snappy_dec_t *d, const char *data, size_t len, tn_buf_t *out,
                     size_t max_out, bool *more);

void tn_snappy_enc_init(tn_snappy_enc_t *e);
void tn_snappy_enc_fini(tn_snappy_enc_t *e);
/* Encode data as chunks (the stream identifier first, once). */
int tn_snappy_encode(tn_snappy_enc_t *e, const char *data, size_t len, tn_buf_t *out);

typedef struct {
    z_stream z;
    bool ready;
    tn_buf_t pending; /* input not inflated yet */
} tn_inflate_t;

typedef struct {
    z_stream z;
    bool ready;
} tn_deflate_t;

int tn_inflate_init(tn_inflate_t *d);
void tn_inflate_fini(tn_inflate_t *d);
/* 0, TN_ECORRUPT (not a deflate stream) or UV_ENOMEM. */
int tn_inflate_decode(tn_inflate_t *d, const char *data, size_t len, tn_buf_t *out, size_t max_out,
                      bool *more);

/* level 1..9. 0 or UV_ENOMEM / UV_EINVAL. */
int tn_deflate_init(tn_deflate_t *e, int level);
void tn_deflate_fini(tn_deflate_t *e);
/* Compress data and sync-flush, so the peer can decode everything sent. */
int tn_deflate_encode(tn_deflate_t *e, const char *data, size_t len, tn_buf_t *out);

#endif
