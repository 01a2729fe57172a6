/* Decoding the bodies of the native API's batch requests, one element at
 * a time (yajl's callback parser through tn_json_events): what a body
 * holds is copied out as it is read, an element that breaks a rule stops
 * the parse at its first token, and the count is refused at the first
 * element past the limit. So a body costs at most its own size (plus
 * yajl's bounded state), however it is shaped: `[0,0,0,...]` stops at the
 * first 0.
 *
 * A batch produce body is a JSON array of message objects:
 *   {"payload": <JSON value>, "payload_encoding": "base64",
 *    "key": "<string>", "key_encoding": "base64", "partition": <int >= 0>}
 * payload is required. A string payload is the message's bytes (UTF-8),
 * or with payload_encoding "base64" (the only encoding) the bytes it
 * encodes; any other JSON value is stored as its JSON text (compact), so
 * a consume renders it back as the same value. A key is its UTF-8 bytes,
 * or with key_encoding "base64" the bytes it encodes (as a consume shows
 * a key that is not UTF-8); max_key bounds the decoded key.
 *
 * A batch ack body is a JSON array of receipt handle strings.
 *
 * Errors name the element (counting from 0) and are fit for a 400 answer.
 *
 * Threads: any. */
#ifndef TN_API_BATCH_H
#define TN_API_BATCH_H

#include "core/platform.h"

#include "core/buf.h"

typedef struct {
    size_t payload_off; /* into the batch's data */
    size_t payload_len;
    size_t key_off;
    size_t key_len;    /* 0: no key */
    int64_t partition; /* -1: none given */
} tn_batch_msg_t;

typedef struct {
    tn_buf_t data; /* payloads and keys, back to back */
    tn_batch_msg_t *msgs;
    uint32_t n;
} tn_batch_t;

/* Decode a batch produce body of at most max_msgs messages, each payload
 * 1..max_msg_size bytes and each key at most max_key bytes. 0 with *out
 * filled (tn_batch_fini releases it), UV_EINVAL with the reason in err, or
 * UV_ENOMEM. */
int tn_batch_decode(const char *body, size_t len, uint32_t max_msgs, uint64_t max_msg_size,
                    size_t max_key, tn_batch_t *out, char *err, size_t errlen);
void tn_batch_fini(tn_batch_t *b);

#define TN_HANDLE_MAX 64 /* longest receipt handle kept */

/* Decode a batch ack body of at most max handles into handles (each
 * NUL-terminated; a string longer than TN_HANDLE_MAX - 1 bytes is kept cut
 * short between characters, which no valid handle is, and a NUL in one is
 * kept as U+FFFD, so it is no valid handle either). 0 with *n set,
 * UV_EINVAL with err, or UV_ENOMEM. */
int tn_batch_handles(const char *body, size_t len, uint32_t max, char (*handles)[TN_HANDLE_MAX],
                     uint32_t *n, char *err, size_t errlen);

#endif
