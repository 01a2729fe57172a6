/* The NSQ V2 wire codec: parsing client commands from a byte stream,
 * encoding server frames, message IDs and names. No sockets and no state
 * beyond one command: the connection owns the buffer and the protocol
 * state (IDENTIFY, SUB, RDY, ...) and calls this for the bytes.
 *
 * Client commands are a line (`NAME params...\n`, `\r\n` tolerated,
 * params separated by single spaces) followed, for IDENTIFY, AUTH, PUB,
 * MPUB and DPUB, by a body: u32 big-endian length, then the bytes. MPUB's
 * body is u32 count, then count x (u32 length, bytes).
 *
 * Server frames: u32 size (4 + data length), i32 type (0 response,
 * 1 error, 2 message), data. A message frame's data is i64 timestamp (ns),
 * u16 attempts, the 16-character message ID, then the body. All integers
 * big-endian.
 *
 * Error texts follow nsqd's where clients compare them ("PUB invalid
 * message body size 0", "RDY count 9999 out of range 0-2500", ...).
 *
 * Thread safety: pure functions; any thread. */
#ifndef TN_PROTO_NSQ_CODEC_H
#define TN_PROTO_NSQ_CODEC_H

#include "core/platform.h"

#include "core/buf.h"

#define TN_NSQ_MAGIC         "  V2"
#define TN_NSQ_MAGIC_LEN     4
#define TN_NSQ_ID_LEN        16
#define TN_NSQ_MSG_HDR       26 /* timestamp, attempts, id */
#define TN_NSQ_FRAME_HDR     8  /* size, type */
#define TN_NSQ_MAX_PARTITION 0xFFFFu
#define TN_NSQ_MAX_OFFSET    ((UINT64_C(1) << 48) - 1)

enum { TN_NSQ_FRAME_RESPONSE = 0, TN_NSQ_FRAME_ERROR = 1, TN_NSQ_FRAME_MESSAGE = 2 };

typedef enum {
    TN_NSQ_IDENTIFY = 1,
    TN_NSQ_AUTH,
    TN_NSQ_SUB,
    TN_NSQ_PUB,
    TN_NSQ_MPUB,
    TN_NSQ_DPUB,
    TN_NSQ_RDY,
    TN_NSQ_FIN,
    TN_NSQ_REQ,
    TN_NSQ_TOUCH,
    TN_NSQ_NOP,
    TN_NSQ_CLS,
} tn_nsq_op_t;

/* Error codes sent to clients, X(name, fatal): fatal ones close the
 * connection after the error frame. nsqd keeps the connection only for
 * FIN, REQ and TOUCH failures; tern adds E_THROTTLED (disk pressure,
 * retry later), which keeps it too. */
#define TN_NSQ_ERR_MAP(X)                                                                          \
    X(INVALID, true)                                                                               \
    X(BAD_TOPIC, true)                                                                             \
    X(BAD_CHANNEL, true)                                                                           \
    X(BAD_BODY, true)                                                                              \
    X(BAD_MESSAGE, true)                                                                           \
    X(PUB_FAILED, true)                                                                            \
    X(MPUB_FAILED, true)                                                                           \
    X(DPUB_FAILED, true)                                                                           \
    X(FIN_FAILED, false)                                                                           \
    X(REQ_FAILED, false)                                                                           \
    X(TOUCH_FAILED, false)                                                                         \
    X(AUTH_FIRST, true)                                                                            \
    X(AUTH_FAILED, true)                                                                           \
    X(UNAUTHORIZED, true)                                                                          \
    X(AUTH_DISABLED, true)                                                                         \
    X(SUB_FAILED, true)                                                                            \
    X(IDENTIFY_FAILED, true)                                                                       \
    X(BAD_PROTOCOL, true)                                                                          \
    X(THROTTLED, false)

typedef enum {
    TN_NSQ_E_NONE = 0,
#define TN_NSQ_ERR_ENUM(name, fatal) TN_NSQ_E_##name,
    TN_NSQ_ERR_MAP(TN_NSQ_ERR_ENUM)
#undef TN_NSQ_ERR_ENUM
} tn_nsq_err_t;

/* "E_INVALID" and so on; "" for TN_NSQ_E_NONE. */
const char *tn_nsq_err_code(tn_nsq_err_t err);
/* "IDENTIFY", "PUB" and so on: the command's name on the wire. */
const char *tn_nsq_op_name(tn_nsq_op_t op);
/* Whether the connection closes after this error. */
bool tn_nsq_err_fatal(tn_nsq_err_t err);

/* The error frame for a PUB, MPUB or DPUB (op) the engine or the router
 * answered with status (non-zero): its code (returned), its text (into
 * text, len bytes) and whether the connection closes after it (*fatal).
 * - TN_EDISKHIGH: E_THROTTLED, connection kept (tern's disk pressure).
 * - A replication refusal that passes by itself (cluster/replerr.h:
 *   TN_EFEWREPLICAS, TN_EFENCED, TN_ENOTSERVING): E_PUB_FAILED for all
 *   three commands with the refusal's words ("E_PUB_FAILED not enough
 *   in-sync replicas"), connection kept so the client can retry on it.
 *   (nsqd closes the connection on E_PUB_FAILED, but nsqd has no failure
 *   that passes by itself; a producer that reconnects on every refusal
 *   would only add load while a replica catches up.)
 * - Anything else: E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED with the
 *   error's description, fatal as in nsqd. */
tn_nsq_err_t tn_nsq_pub_error(tn_nsq_op_t op, int status, char *text, size_t len, bool *fatal);

typedef struct {
    uint32_t max_line;       /* longest command line, without its newline */
    uint64_t max_msg_size;   /* PUB/DPUB body, and each MPUB message */
    uint64_t max_body_size;  /* MPUB, IDENTIFY and AUTH bodies */
    uint32_t max_mpub_count; /* messages in one MPUB */
    int64_t max_rdy_count;   /* RDY above this is E_INVALID */
    int64_t max_defer_ms;    /* DPUB above this is E_INVALID (REQ clamps instead) */
} tn_nsq_limits_t;

/* One parsed command. Every tn_iov_t points into the parsed buffer
 * (borrowed: valid while the caller keeps those bytes). */
typedef struct {
    tn_nsq_op_t op;
    tn_iov_t topic;   /* SUB, PUB, MPUB, DPUB */
    tn_iov_t channel; /* SUB */
    tn_iov_t id;      /* FIN, REQ, TOUCH: TN_NSQ_ID_LEN bytes */
    int64_t num;      /* RDY count, REQ timeout ms, DPUB defer ms */
    tn_iov_t body;    /* IDENTIFY, AUTH, PUB, DPUB body; MPUB's whole body */
    uint32_t nmsgs;   /* MPUB message count */
    /* When tn_nsq_parse returns TN_ESHORT: the total bytes the command
     * needs, once its length prefix has been read and checked (0 before),
     * so the caller can refuse to buffer more than it allows. */
    uint64_t need;
    /* When it returns TN_EPROTO: what to send the client. errmsg stays
     * last: tn_nsq_parse zeroes only the fields before it. */
    tn_nsq_err_t err;
    char errmsg[192];
} tn_nsq_cmd_t;

/* Parse one command from the front of buf. Returns 0 (cmd filled,
 * *consumed = its bytes), TN_ESHORT (the command is not complete yet; see
 * cmd->need), or TN_EPROTO (cmd->err and cmd->errmsg say why; the bytes
 * cannot be resynchronised, so a fatal error ends the connection). Checks
 * syntax, names, numbers and sizes; state rules (SUB before RDY, ...) are
 * the connection's, and nsqd checks them first: on TN_EPROTO cmd->op is
 * set (0 for an unknown command) so the caller can answer the state's
 * error instead. */
int tn_nsq_parse(const char *buf, size_t len, const tn_nsq_limits_t *lim, tn_nsq_cmd_t *cmd,
                 size_t *consumed);

/* Walk the messages of a parsed MPUB: *pos starts at 0; returns true and
 * sets *msg while messages remain. */
bool tn_nsq_mpub_next(const tn_nsq_cmd_t *cmd, size_t *pos, tn_iov_t *msg);

/* Topic and channel names as nsqd takes them: 1 to TN_NSQ_NAME_MAX
 * characters of tern's rule (core/name.h), optionally ending in
 * "#ephemeral", the suffix counted. A longer /v1 topic is not reachable
 * through the NSQ doors. */
#define TN_NSQ_NAME_MAX 64
bool tn_nsq_valid_topic(const char *s, size_t len);
bool tn_nsq_valid_channel(const char *s, size_t len);
/* Whether a valid name ends in "#ephemeral". */
bool tn_nsq_is_ephemeral(const char *s, size_t len);

/* Message IDs: 16 lowercase hex characters of (partition << 48 | offset). */
void tn_nsq_id_encode(uint32_t partition, uint64_t offset, char out[TN_NSQ_ID_LEN]);
/* 0, or UV_EINVAL when id is not 16 lowercase or uppercase hex characters. */
int tn_nsq_id_decode(const char *id, size_t len, uint32_t *partition, uint64_t *offset);

/* Frame writers; they append to out. 0 or UV_ENOMEM. */
int tn_nsq_write_response(tn_buf_t *out, const char *data, size_t len);
/* "E_CODE text", with CR and LF in text replaced by spaces. */
int tn_nsq_write_error(tn_buf_t *out, tn_nsq_err_t err, const char *text);
/* The frame header and message header of a message frame; the body is
 * sent after these (separately, so bodies are not copied). */
void tn_nsq_message_header(unsigned char out[TN_NSQ_FRAME_HDR + TN_NSQ_MSG_HDR], int64_t ts_ns,
                           uint16_t attempts, const char id[TN_NSQ_ID_LEN], uint32_t body_len);

#endif
