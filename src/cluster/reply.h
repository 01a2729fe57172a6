/* The JSON answer of a node RPC call that stores records (COMMIT,
 * cluster/dataplane.h; PRODUCE, cluster/produce.h): 200
 * {"first_offset":N}, or an error status with {"error":"...", ...}, 421
 * naming another member in one field. Both callers decode it here and map
 * the other statuses to their own codes. Also the sentence of the plain
 * {"error":"..."} answers of PURGE (cluster/purge.h) and REMOTE_CHECK
 * (cluster/rcheck.h), whose callers map the statuses likewise; and the
 * error of a binary answer's other statuses.
 *
 * Threads: any (pure). */
#ifndef TN_CLUSTER_REPLY_H
#define TN_CLUSTER_REPLY_H

#include <stddef.h>
#include <stdint.h>

/* A store reply is a short JSON object; anything longer is not one. */
#define TN_STORE_REPLY_MAX 4096

typedef struct {
    uint64_t first_offset; /* 200 */
    uint64_t node;         /* 421: the member node_key names; 0 absent or null */
    char reason[32];       /* "reason" when the error reply has one (cut), else "" */
    char error[256];       /* the reply's sentence, or what is wrong with the reply */
} tn_store_reply_t;

/* The answer of tn_store_reply_decode when the reply is a well-formed
 * error other than 421: out->error and out->reason are set, and the
 * caller maps the status. */
#define TN_STORE_REPLY_ERROR 1

/* Decode a reply (body borrowed) of call what ("commit", "produce": the
 * sentences name it) whose 421 names a member in node_key: 0 (200 with a
 * first_offset), TN_EREMOTE (421, out->node), TN_STORE_REPLY_ERROR, or
 * TN_EPROTO (not a JSON object, a 200 without a first_offset, an error
 * without its sentence, a malformed node id): out->error says why. */
int tn_store_reply_decode(uint16_t status, const uint8_t *body, size_t len, const char *what,
                          const char *node_key, tn_store_reply_t *out);

/* The sentence of an error answer {"error":"..."} (body borrowed) with
 * status to call what ("purge reply", "remote_check answer": the
 * sentences name it), into error (errlen bytes, NUL ended): 0 with the
 * answer's sentence, or "a <status> <what> with an empty error" when it is
 * ""; TN_EPROTO with "a <status> <what> without an error" when the body is
 * no JSON with an error string (over TN_STORE_REPLY_MAX bytes, a NUL
 * byte, not JSON, no "error"). */
int tn_reply_error_decode(uint16_t status, const uint8_t *body, size_t len, const char *what,
                          char *error, size_t errlen);

/* The error a call whose 200 answer is binary (PSTATS, PERRS, SETTLE,
 * MOVE_PROGRESS) reports for any other status: UV_EAGAIN for 503 (the
 * callee could not answer now), UV_EINVAL for 400 (it refused the
 * request, as a node of an earlier release refuses an opcode it does not
 * know), TN_EPROTO for the rest. */
int tn_reply_status_err(uint16_t status);

#endif
