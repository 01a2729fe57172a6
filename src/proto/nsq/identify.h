/* IDENTIFY: decoding the JSON body a client sends and applying it to the
 * connection's settings with nsqd's rules and error texts, and writing the
 * feature-negotiation response.
 *
 * The body is decoded with yajl's callback parser, one element at a time,
 * so nothing is built beyond the fields kept. Unknown fields are ignored
 * (nested values too); a known field of the wrong JSON type, a non-object
 * body, or malformed JSON is "failed to decode JSON body", as nsqd says.
 * Bodies over TN_NSQ_IDENTIFY_MAX or nested deeper than 32 levels are
 * refused (E_BAD_BODY); real clients send a few hundred bytes.
 * Values apply like nsqd's: 0 (or absent) leaves a setting as it was, -1
 * disables heartbeats / output buffering / the buffer timeout, anything
 * else must be in range or IDENTIFY fails with nsqd's text, e.g.
 * `heartbeat interval (100) is invalid`. A client may IDENTIFY more than
 * once before SUB; each applies its settings on top of the previous, but
 * feature_negotiation, tls_v1, snappy, deflate and deflate_level are each
 * IDENTIFY's own, and without feature_negotiation none of the last four
 * is granted (nsqd answers such an IDENTIFY "OK" and upgrades nothing).
 *
 * Thread safety: pure functions; any thread. */
#ifndef TN_PROTO_NSQ_IDENTIFY_H
#define TN_PROTO_NSQ_IDENTIFY_H

#include "core/platform.h"

#include "core/buf.h"

#define TN_NSQ_CLIENT_STR   256
#define TN_NSQ_IDENTIFY_MAX (64 * 1024) /* tern's cap; nsqd allows max-body-size */

/* The server's side: nsqd's flags of the same names. */
typedef struct {
    int64_t max_heartbeat_interval_ms;    /* 60000 */
    int64_t max_output_buffer_size;       /* 65536 */
    int64_t min_output_buffer_timeout_ms; /* 25 */
    int64_t max_output_buffer_timeout_ms; /* 30000 */
    int64_t max_msg_timeout_ms;           /* 900000 */
    int64_t max_rdy_count;                /* 2500 */
    int max_deflate_level;                /* 6 */
    bool tls_available;                   /* a certificate is configured */
    bool deflate_enabled;
    bool snappy_enabled;
    bool auth_required;
} tn_nsq_server_opts_t;

/* A connection's settings. tn_nsq_client_defaults gives nsqd's. */
typedef struct {
    int64_t heartbeat_ms;             /* 0: disabled */
    int64_t output_buffer_size;       /* bytes; 1 (nsqd's -1): unbuffered */
    int64_t output_buffer_timeout_ms; /* 0: flush at once */
    int64_t msg_timeout_ms;
    int32_t sample_rate; /* 0: every message */
    bool feature_negotiation;
    bool tls_v1;
    bool deflate;
    int deflate_level;
    bool snappy;
    char client_id[TN_NSQ_CLIENT_STR];
    char hostname[TN_NSQ_CLIENT_STR];
    char user_agent[TN_NSQ_CLIENT_STR];
} tn_nsq_client_opts_t;

void tn_nsq_client_defaults(tn_nsq_client_opts_t *c, int64_t msg_timeout_ms);

/* Decode body and apply it to *c (unchanged on failure). Returns 0, or
 * TN_EPROTO with *err set (E_BAD_BODY, or E_IDENTIFY_FAILED when both
 * compressions are asked for) and msg holding the text after the code,
 * e.g. "IDENTIFY heartbeat interval (100) is invalid". Also UV_ENOMEM. */
int tn_nsq_identify(const char *body, size_t len, const tn_nsq_server_opts_t *srv,
                    tn_nsq_client_opts_t *c, int *err, char *msg, size_t msglen);

/* Append the JSON answer to a feature-negotiating IDENTIFY (nsqd's keys). */
int tn_nsq_identify_response(const tn_nsq_client_opts_t *c, const tn_nsq_server_opts_t *srv,
                             const char *version, tn_buf_t *out);

#endif
