/* The node RPC wire format: the frames a cluster stream carries, the
 * fields of a request and a reply, the opcode table, and the secret proof
 * bound to a QUIC session. Pure functions and a byte-level framer; no
 * sockets, so every decoder here is unit-tested and fuzzed on its own.
 *
 * A frame (all integers big-endian), TN_WIRE_HDR = 20 bytes of header:
 *   [4] magic "TNR1"  [1] version (1)  [1] type  [2] reserved (0)
 *   [8] request id    [4] payload length (<= TN_WIRE_MAX_PAYLOAD)
 *   payload
 * Types: AUTH (the 32-byte proof, first frame each way), REQUEST, REPLY,
 * CANCEL (no payload: the request with that id is abandoned), PING and PONG
 * (no payload), ERROR (u16 length + message: a frame the peer could not
 * take, for a request id nobody may be waiting on).
 *
 * A request payload: [1] opcode, then the op's fields in order. Integers
 * are big-endian; strings and byte fields are [4] length + bytes; a bool is
 * one byte, 0 or 1. Decoding is exact: a missing field, a length beyond
 * the payload, a bool other than 0/1 or a trailing byte is TN_EPROTO, so an
 * older node answers a field it does not know with 400 instead of
 * guessing.
 *
 * A reply payload: [2] HTTP status, [4] content type length + content
 * type, [4] body length + body. Errors travel as their HTTP status and a
 * JSON body, so the HTTP boundary passes them through unchanged.
 *
 * Threads: any (pure functions; a framer belongs to its stream's thread). */
#ifndef TN_CLUSTER_WIRE_H
#define TN_CLUSTER_WIRE_H

#include "core/platform.h"

#include "core/buf.h"
#include "storage/cursor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TN_WIRE_MAGIC       0x544E5231u /* "TNR1" */
#define TN_WIRE_VERSION     1
#define TN_WIRE_HDR         20
#define TN_WIRE_MAX_PAYLOAD (16u * 1024 * 1024)
/* Before a stream has proved the secret, a frame is read under this cap
 * (header included), so an unauthenticated peer cannot make a node hold
 * more than this per stream. */
#define TN_WIRE_PROOF_CAP 64
#define TN_WIRE_PROOF_LEN 32 /* HMAC-SHA256 */
#define TN_WIRE_EKM_LEN   32 /* RFC 8446 exporter output */
/* The exporter label both ends use for the proof's keying material. */
#define TN_WIRE_EKM_LABEL "tern-cluster-auth-v1"
/* ALPN of node RPC over QUIC. */
#define TN_WIRE_ALPN "tern-cluster-v1"
/* The longest Raft or API address a request carries (a member record's,
 * TN_META_ADDR_MAX). */
#define TN_WIRE_ADDR_MAX 256

typedef enum {
    TN_WF_ERROR = 3,
    TN_WF_PING = 4,
    TN_WF_PONG = 5,
    TN_WF_CANCEL = 6,
    TN_WF_REQUEST = 8,
    TN_WF_REPLY = 9,
    TN_WF_AUTH = 10,
} tn_wire_frame_type_t;

/* Lanes: a request rides the lane of its opcode, so bulk traffic never
 * queues control calls behind it. */
typedef enum {
    TN_LANE_PRODUCE = 0,
    TN_LANE_CONSUME = 1,
    TN_LANE_ACK = 2,
    TN_LANE_CONTROL = 3,
    TN_LANE_REPLICA = 4, /* followers' long-poll fetches, replicated settles */
    TN_LANE_COUNT = 5,
} tn_wire_lane_t;

#define TN_LANE_STREAMS         16 /* produce, consume, ack */
#define TN_LANE_CONTROL_STREAMS 4
#define TN_LANE_REPLICA_STREAMS 4

/* Opcodes. Values are stable on the wire and only ever appended; the one
 * table (wire.c) names each op, its lane and its metric label, and
 * docs/cluster.md lists them. */
typedef enum {
    /* Echo the payload back (200, application/octet-stream): the round
     * trip the benchmarks and the liveness checks measure. Fields: bytes. */
    TN_OP_ECHO = 1,
    /* Propose a metastore command on the leader. Fields: bytes command
     * (meta/cmd.h encoding). Reply 200 with the state machine's answer as
     * a [4] signed big-endian int; 421 with the leader's API address as the
     * body when this node is not the leader; 503 when there is none. */
    TN_OP_META_PROPOSE = 2,
    /* Ask to be admitted as a voter. Fields: u64 node id, string Raft
     * address, string API address. 200 once admitted (or already a
     * member); 409 when the id is taken by another address. A follower
     * passes it on to the leader and answers with its reply (421 + the
     * leader's address when it cannot). */
    TN_OP_JOIN = 3,
    /* The leader's applied index, after a Raft barrier confirmed it still
     * leads and everything before is applied: for destructive actions on a
     * follower. Fields: none. Reply 200 with [8] index; 421 + the leader's
     * address on a follower. */
    TN_OP_LEADER_INDEX = 4,
    /* This node's view: JSON {node_id, leader, ready, caught_up,
     * applied}. Fields: none. */
    TN_OP_NODE_STATUS = 5,
    /* Commit a batch of produces to one partition the callee owns, as one
     * append (the dispatcher moving ingress log records to their owner;
     * cluster/dataplane.h). Produce lane. Fields: string topic (1..255
     * bytes), u32 partition, u32 count, then count records of bytes key
     * (at most 65535), bytes body, i64 deliver_at_ms, i64 created_ms.
     * Replies (JSON): 200 {"first_offset":N} once every record is durable;
     * 421 {"error":...,"owner_node":"3"} (null: not placed) when the
     * callee does not own the partition; 404 no such topic; 416 no such
     * partition; 507 disk above the high watermark; 503 storage error or
     * shutting down; 400 malformed. */
    TN_OP_COMMIT = 6,
    /* Settle receipt handles of partitions the callee owns (an ack,
     * extend or nack a client sent to another node; cluster/settle.h).
     * Ack lane. Fields: string topic (1..255 bytes), string channel
     * (1..255 bytes), u8 how (1 ack, 2 extend, 3 nack), i64 visibility_ms
     * (>= 0: the extension), u32 count (1..100), then count handles of u32
     * partition, u64 offset, u32 nonce. Replies: 200
     * application/octet-stream, u32 count then a u16 status per handle in
     * order (204 settled, after the fdatasync of the channel WAL record
     * covering it; 410 no such live lease; 503 the acked-ahead set is
     * full; 421 the callee does not own the partition; 500 the channel
     * WAL could not take or sync it); 503
     * {"error":...} not ready or shutting down; 400 malformed. */
    TN_OP_SETTLE = 7,
    /* Consume from partitions the callee owns, on its own consume lanes
     * (a /v1 consume another node took; api/v1/forward.c). Consume lane.
     * Fields: string topic (1..255 bytes), string channel (1..255 bytes),
     * u32 partition, bool pinned, u64 offset, bool replay, i64 wait_ms,
     * u32 max (0: a single message), bool local_only (always true from a
     * forwarding node: the callee never forwards it on). Reply: the status
     * and JSON body the /v1 consume route would answer (200 a message or
     * {"messages":[...]}, 204, 400, 404, 410, 429, 503 also when the
     * partition is not the callee's), relayed as is. */
    TN_OP_CONSUME = 8,
    /* The numbers of partitions of a topic the callee owns (GET
     * /v1/topics/{t} on another node; cluster/pstats.h). Control lane: a
     * small read answered at once from memory, which must not queue
     * behind 16 MiB commit frames on the produce lane or long polls on the
     * consume lane, and is as rare as the control plane's own calls.
     * Fields: string topic (1..255 bytes), u32 count (1..TN_PSTATS_MAX),
     * then count u32 partition indexes. Reply: 200
     * application/octet-stream, u32 count (the request's) then per
     * partition, in the request's order, u32 index, u16 status and, for
     * status 200 only, u32 segments, u64 oldest_offset, u64 next_offset,
     * u64 high_watermark, u64 size_bytes. Per-partition statuses: 200;
     * 404 no such topic on the callee; 416 no such partition; 421 the
     * callee does not own it; 503 the topic is being created or grown
     * there. 503 {"error":...} for the whole request when the callee is
     * out of memory; 400 malformed or an invalid topic name. */
    TN_OP_PSTATS = 9,
    /* Purge a deleted topic from the callee's engine and disk (the node
     * that took a topic delete confirming that every member has done so;
     * cluster/purge.h). Control lane. Fields: string topic (1..255 bytes),
     * i64 created_at_ms (>= 0: the deleted record's creation time, so a
     * topic made again under the same name is never purged). Replies: 204
     * once the callee's replica no longer has that record and no files of
     * that topic are left; 503 {"error":...} the replica did not show the
     * deletion within 5 s, or the callee is not ready or shutting down;
     * 500 {"error":...} the deletion failed, with its cause; 400
     * malformed. */
    TN_OP_PURGE = 10,
    /* A follower node's long-poll for every replicated partition it
     * follows on the callee (cluster/fetch.h has the layout; replica.h
     * serves it). Replica lane. Reply 200 application/octet-stream: a
     * per-partition answer in the request's order (records from the
     * fetch offset with their epochs and the hw, diverging, fenced,
     * unknown epoch, not leader, error). The callee answers at once when
     * it has records (or a non-record answer) for any partition, else
     * parks the fetch until its log or hw moves or wait_ms passes. 503
     * {"error":...} the callee has no replica manager or is closing; 400
     * malformed. */
    TN_OP_FETCH = 11,
    /* A produce to a replicated partition (factor > 1) that another node
     * took, forwarded to the partition's leader (cluster/produce.h).
     * Produce lane. Fields: string topic (1..255 bytes), u32 partition,
     * u32 leader_epoch (the epoch the caller's metastore replica shows; 0:
     * whatever the callee has), u64 node (the accepting node's id), u64
     * seq (unique per accepting node: a retry carries the same), u32 count
     * (1..), then count records as COMMIT's (bytes key, bytes body, i64
     * deliver_at_ms, i64 created_ms). Replies (JSON): 200
     * {"first_offset":N} once the leader's high watermark covers the whole
     * batch (a retry of a (node, seq) the leader has stored answers the
     * first copy's offset without storing again); 421 {"error":...,
     * "leader_node":"3"} (null: none) the callee does not lead it; 409
     * {"error":...} a stale leader_epoch (fenced); 503 {"error":...,
     * "reason":"few_replicas"} committed ISR below min_insync (not
     * retried), 503 {"error":...} the leader is not serving yet, a storage
     * error, shutting down; 404 no such topic; 416 no such partition; 507
     * disk above the high watermark; 400 malformed. */
    TN_OP_PRODUCE = 12,
    /* Push a channel's durable WAL records of a replicated partition from
     * its leader to a committed-ISR follower (cluster/setrepl.h). Replica
     * lane. Fields: string topic (1..255 bytes), u32 partition, u32
     * leader_epoch (>= 1), string channel (1..255 bytes), u64 first_seq
     * (the leader's sequence number of the first record, >= 1), u64
     * base_frontier (where a follower creating the channel's log starts
     * it: the leader's frontier when this stream began), u32 count
     * (1..TN_SETREPL_MAX), then count records of u8 op (1..6, storage/
     * cursor.h TN_WAL_*), u64 offset, i64 due_ms, u32 attempts, u64 value,
     * then, when the leader's channel has one, u64 chan_stamp (not 0: the
     * stamp of the channel's metastore record, meta/cmd.h CHANNEL_PUT;
     * absent in an older build's request: 0, unknown), then, when the
     * leader knows it, u64 incarnation (not 0: the follower's data
     * directory the leader holds it synced for; chan_stamp is then
     * written even when 0; absent: 0, any).
     * Replies: 204 once every record is in the follower's channel log and
     * fdatasync'ed; 409 {"error":...} the leader_epoch is older than the
     * follower's (fenced), or the follower's data directory is another
     * incarnation (it needs the channel's state first: CHAN_SNAP); 421
     * the follower does not follow this partition (no replica here, or
     * it leads it); 503 {"error":...} not ready, a newer epoch it has not
     * seen yet, its engine's channel not the one of chan_stamp (yet),
     * shutting down; 500 the channel log failed; 400 malformed. */
    TN_OP_SETTLE_REPL = 13,
    /* A damaged replica's read of a range of its leader's log, to replace
     * a segment that failed its CRC (docs/replication.md, "Repair of a
     * damaged replica"). Replica lane. The FETCH request layout
     * (cluster/fetch.h) with exactly one partition, whose fetch_offset is
     * the first offset wanted and flushed_offset the end of the range
     * (exclusive); wait_ms and last_fetched_epoch are ignored. Reply 200:
     * a FETCH reply of one partition: RECORDS from fetch_offset (whole
     * batches, at most max_bytes beyond the first batch, never past the
     * end; every record's CRC checked by the leader as it reads), or
     * FENCED / UNKNOWN_EPOCH / NOT_LEADER for the leader_epoch as in a
     * FETCH, ERROR when the leader cannot read the range (its own copy
     * damaged, the range no longer held, the end inside a batch). 503
     * not ready; 400 malformed. Nothing on the leader changes: the core
     * does not hear of it (it is not a follower's position). */
    TN_OP_REPAIR = 14,
    /* A channel's whole state on a replicated partition, from its leader
     * to a follower that lacks some of it (a wiped disk, a channel made
     * while it was away, records the leader no longer keeps): what the
     * follower installs before SETTLE_REPL records of that stream count
     * (cluster/setrepl.h). Replica lane. Fields: string topic (1..255
     * bytes), u32 partition, u32 leader_epoch (>= 1), string channel
     * (1..255 bytes), u64 stream (as SETTLE_REPL's), u64 seq (the last
     * record of that stream the state includes; 0: none), u64 incarnation
     * (the follower's data directory the leader means; 0: any), u32
     * length, then length bytes: the state as a channel checkpoint image
     * (TNC1, storage/cursor.h; its own seq field is ignored), then maybe
     * u64 chan_stamp (as SETTLE_REPL's). Replies: 204
     * once the follower's channel log holds at least that state,
     * fdatasync'ed; 409 {"error":...} a stale leader epoch, or another
     * incarnation; 421, 503, 500, 400 as SETTLE_REPL. */
    TN_OP_CHAN_SNAP = 15,
    /* A follower's report that records it fetched are on its disk
     * (fdatasync'ed), sent as soon as its sync completes while its next
     * fetch is parked at the leader, so the leader's hw need not wait for
     * that fetch's answer (cluster/fetch.h has the layout; replica.h
     * serves it). Replica lane. Fields: u32 follower node, u64
     * incarnation, u32 count (1..65535), then count partitions in FETCH's
     * partition layout (string topic, u32 partition, u32 leader_epoch,
     * u64 fetch_offset: the follower's log end, u32 last_fetched_epoch,
     * u64 flushed_offset, u32 partition_epoch). Reply 204 once the
     * reports were fed to the leader's cores (a report for a partition the
     * callee does not lead, of a stale epoch, or of a log its history does
     * not have is not counted: the next fetch carries the offset anyway);
     * 503 {"error":...} not ready or closing; 400 malformed. */
    TN_OP_FLUSHED = 16,
    /* A remote check (cluster/rcheck.h; docs/remotes.md, "Checks"): the
     * callee checks from its own network that it reaches a remote (another
     * tern cluster) over HTTPS with the remote's credential and, with a
     * topic, that the topic is there and takes the user's produces.
     * Control lane, exempt from the bounds (it waits on the remote).
     * Fields: string remote (1..64 bytes), u64 remote id (the record's at
     * the caller), string topic (0..255 bytes; "": no topic). Reply 200
     * application/octet-stream: u8 class (0 ok .. 7 server_error, the
     * outbound client's classes), u16 the remote's HTTP status (0: none
     * came), u32 ms, string detail (0..191 bytes, the client's own words,
     * never the remote's); 404 {"error":...} the callee's metastore replica
     * has no such remote with that id; 503 {"error":...} not ready, out of
     * memory or shutting down; 400 malformed. */
    TN_OP_REMOTE_CHECK = 17,
    /* A partition move's progress as its leader sees it (GET
     * /v1/cluster/moves on another node; cluster/moveprog.h). Control
     * lane: a small read answered at once from memory. Fields: string
     * topic (1..255 bytes), u32 partition. Reply: 200
     * application/octet-stream, u8 known (bit 0: the bytes, bit 1: the
     * lag; no other bit), u64 bytes_copied, u64 bytes_total, u64
     * lag_records (each 0 unless its bit is set): what the callee can tell
     * (nothing when it does not lead the partition, or no move is under
     * way there); 503 {"error":...} no replica manager; 400 malformed. */
    TN_OP_MOVE_PROGRESS = 18,
    /* A follower's report that its appends of records it fetched for one
     * partition fail, or succeed again (cluster/movestall.h: the reason of
     * a stalled move names the error). Replica lane. Fields: u32 follower
     * node, u64 incarnation, string topic (1..255 bytes), u32 partition,
     * u32 leader_epoch (the follower's view; >= 1), string error
     * (0..TN_WIRE_REPLERR_MAX printable ASCII bytes: the append's error as
     * tn_strerror words it; "": its appends succeed again). Sent when the
     * error starts or changes, again every second while it lasts, and once
     * when it ends. Reply 204 (a report for a partition the callee does
     * not lead, or of another leader epoch, is dropped); 503 {"error":...}
     * no replica manager or not ready; 400 malformed. An older callee
     * answers 400 (an unknown opcode): the report is lost, nothing else. */
    TN_OP_REPLICA_ERROR = 19,
    /* The append errors a replicated partition's leader holds for its
     * replicas and move targets (TN_OP_REPLICA_ERROR's reports), for GET
     * /v1/topics/{t} on another node (cluster/perrs.h). Control lane, as
     * PSTATS, and sent beside it to the same owner. Fields: PSTATS'
     * (string topic (1..255 bytes), u32 count (1..TN_PSTATS_MAX), then
     * count u32 partition indexes). Reply: 200 application/octet-stream,
     * u32 count (the request's) then per partition, in the request's
     * order, u32 index, u8 n (0..TN_WIRE_PERRS_MAX), then n times u32
     * node (>= 1) and string error (1..TN_WIRE_REPLERR_MAX printable
     * ASCII bytes, as tn_strerror words it): n is 0 where the callee does
     * not lead the
     * partition or holds no error for it. 400 malformed or an invalid
     * topic name. An older callee answers 400 (an unknown opcode): the
     * caller shows no errors for those partitions, nothing else. */
    TN_OP_PERRS = 20,
    /* META_PROPOSE whose answer also says where the entry is: a follower
     * waits until its own replica has applied that index before it
     * answers a change it may read back (meta/meta.h). Control lane.
     * Fields: META_PROPOSE's (bytes command). Reply 200
     * application/x-tern-int: [4] signed big-endian state machine answer,
     * [8] the log index at which the leader applied the entry (0: not
     * applied, an answer such as a failed write); 421 and 503 as
     * META_PROPOSE. An older callee answers 400 "unsupported rpc
     * operation" (an unknown opcode): the caller sends META_PROPOSE
     * instead and confirms with a no-op, as before. */
    TN_OP_META_PROPOSE_AT = 21,
    TN_OP__COUNT
} tn_wire_op_t;

typedef struct {
    uint8_t type;
    uint64_t id;
    uint32_t len;
} tn_wire_hdr_t;

/* Write a frame header into out. */
void tn_wire_hdr_encode(uint8_t out[TN_WIRE_HDR], uint8_t type, uint64_t id, uint32_t len);
/* Decode a header from the front of buf. 0, TN_ESHORT (fewer than
 * TN_WIRE_HDR bytes), TN_EPROTO (bad magic, version, reserved bits or
 * type) or TN_ETOOBIG (payload longer than max, or than
 * TN_WIRE_MAX_PAYLOAD whatever max says). The payload length of a type
 * that carries none (PING, PONG, CANCEL) is the frame handler's to
 * refuse. */
int tn_wire_hdr_decode(const uint8_t *buf, size_t len, uint32_t max, tn_wire_hdr_t *h);
/* Append a whole frame (header + payload, copied) to out. 0 or UV_ENOMEM;
 * UV_EINVAL when len > TN_WIRE_MAX_PAYLOAD. */
int tn_wire_frame_append(tn_buf_t *out, uint8_t type, uint64_t id, const void *payload, size_t len);

/* --- the framer: a stream's bytes in, whole frames out ----------------------- */

typedef struct {
    tn_buf_t pending; /* bytes of a frame not yet whole */
    uint32_t max;     /* payload cap for the next frame */
    int err;          /* sticky: once a frame is refused the stream is done */
} tn_wire_framer_t;

/* frame: a whole frame; payload borrowed for the call. Return 0 to go on,
 * or an error to stop (the framer keeps it as its sticky error). The
 * callback may change f->max (the cap after a proof). */
typedef int (*tn_wire_frame_cb)(void *arg, const tn_wire_hdr_t *h, const uint8_t *payload);

void tn_wire_framer_init(tn_wire_framer_t *f, uint32_t max);
void tn_wire_framer_fini(tn_wire_framer_t *f);
/* Feed bytes (borrowed); calls cb for each whole frame, in order. Holds
 * only the bytes of an incomplete frame, and refuses a frame over the cap
 * as soon as its header is in, before its payload arrives. 0, or the
 * sticky error (TN_EPROTO, TN_ETOOBIG, UV_ENOMEM, or what cb returned).
 * cb must not push into the same framer. */
int tn_wire_framer_push(tn_wire_framer_t *f, const void *data, size_t len, tn_wire_frame_cb cb,
                        void *arg);

/* --- request and reply fields ---------------------------------------------- */

/* Writers append to a tn_buf_t; each returns 0 or UV_ENOMEM. */
int tn_wire_put_u8(tn_buf_t *b, uint8_t v);
int tn_wire_put_bool(tn_buf_t *b, bool v);
int tn_wire_put_u16(tn_buf_t *b, uint16_t v);
int tn_wire_put_u32(tn_buf_t *b, uint32_t v);
int tn_wire_put_u64(tn_buf_t *b, uint64_t v);
int tn_wire_put_i32(tn_buf_t *b, int32_t v);
int tn_wire_put_i64(tn_buf_t *b, int64_t v);
/* [4] length + bytes (copied); UV_EINVAL past 4 GiB - 1. */
int tn_wire_put_bytes(tn_buf_t *b, const void *p, size_t len);
int tn_wire_put_str(tn_buf_t *b, const char *s);

/* A reader over a borrowed payload. After the first failure every get
 * returns TN_EPROTO and leaves its output unset; tn_wire_end then checks
 * nothing trails. */
typedef struct {
    const uint8_t *p;
    size_t len;
    size_t off;
    int err;
} tn_wire_in_t;

void tn_wire_in_init(tn_wire_in_t *in, const void *p, size_t len);
int tn_wire_get_u8(tn_wire_in_t *in, uint8_t *v);
int tn_wire_get_bool(tn_wire_in_t *in, bool *v);
int tn_wire_get_u16(tn_wire_in_t *in, uint16_t *v);
int tn_wire_get_u32(tn_wire_in_t *in, uint32_t *v);
int tn_wire_get_u64(tn_wire_in_t *in, uint64_t *v);
int tn_wire_get_i32(tn_wire_in_t *in, int32_t *v);
int tn_wire_get_i64(tn_wire_in_t *in, int64_t *v);
/* A byte field of at most max bytes; *out points into the payload. */
int tn_wire_get_bytes(tn_wire_in_t *in, size_t max, const uint8_t **out, size_t *len);
/* A string of at most max bytes with no NUL, copied into out (max + 1). */
int tn_wire_get_str(tn_wire_in_t *in, size_t max, char *out);
/* 0 when every byte was read and nothing failed, else TN_EPROTO. */
int tn_wire_end(const tn_wire_in_t *in);

/* A reply: status, content type (borrowed, may be ""), body (borrowed). */
typedef struct {
    uint16_t status;
    const char *ctype;
    size_t ctype_len;
    const uint8_t *body;
    size_t body_len;
} tn_wire_reply_t;

/* Append a reply payload; ctype (NUL-terminated, NULL for "") and body
 * copied. 0, UV_ENOMEM, or UV_EINVAL (status outside 100..599, content type
 * over 255 bytes or holding a control character); on failure b is as it
 * was. */
int tn_wire_reply_encode(tn_buf_t *b, uint16_t status, const char *ctype, const void *body,
                         size_t len);
/* Exact decode of a reply payload; fields point into it. 0 or TN_EPROTO
 * (status outside 100..599, content type over 255 bytes or holding a
 * control character, since it becomes an HTTP header; short, trailing). */
int tn_wire_reply_decode(const void *p, size_t len, tn_wire_reply_t *out);

/* --- opcodes ------------------------------------------------------------------ */

/* NULL for an opcode this build does not know. The name is the metric's
 * op label ("echo", "meta_propose", ...). */
const char *tn_wire_op_name(uint8_t op);
/* The lane of op; TN_LANE_CONTROL for an unknown one. */
tn_wire_lane_t tn_wire_op_lane(uint8_t op);
/* Whether a request payload (borrowed) is exactly an opcode this build
 * knows followed by that op's fields, as listed above (bytes up to
 * TN_WIRE_MAX_PAYLOAD, addresses up to TN_WIRE_ADDR_MAX). The shape only:
 * the handler judges the values. 0, TN_EPROTO (empty, a field short,
 * overlong or malformed, or trailing bytes) or UV_ENOTSUP (unknown
 * opcode, answered 400 "unsupported rpc operation"). */
int tn_wire_request_check(const void *p, size_t len);

/* --- COMMIT --------------------------------------------------------------------- */

#define TN_COMMIT_KEY_MAX 65535
/* The bytes a record adds to a COMMIT request beyond its key and body:
 * two lengths and two times. */
#define TN_COMMIT_REC_FIXED 24

/* One record of a COMMIT: key and body borrowed (from the caller, or from
 * the payload once decoded). deliver_at_ms: wall clock, 0 at once;
 * created_ms: the wall clock of its accept on the node that took it. */
typedef struct {
    tn_iov_t key;
    tn_iov_t body;
    int64_t deliver_at_ms;
    int64_t created_ms;
} tn_commit_rec_t;

/* Bytes of a COMMIT request payload (the opcode byte included) of topic
 * with no record yet, and what each record adds: a batch fits one request
 * while head + the sum of its records is at most TN_WIRE_MAX_PAYLOAD. */
static inline size_t tn_commit_head_size(size_t topic_len)
{
    return 1 + 4 + topic_len + 4 + 4;
}
static inline size_t tn_commit_rec_size(size_t key_len, size_t body_len)
{
    return TN_COMMIT_REC_FIXED + key_len + body_len;
}
/* The whole request payload of these n records (borrowed), opcode byte
 * included: what the dispatcher compares with TN_WIRE_MAX_PAYLOAD. */
size_t tn_commit_encoded_size(const char *topic, const tn_commit_rec_t *recs, uint32_t n);

/* Append a COMMIT request's fields (after the opcode byte) to b; every
 * byte copied. 0, UV_ENOMEM, or UV_EINVAL (topic empty or over 255 bytes,
 * n 0, a key over TN_COMMIT_KEY_MAX, a time negative); on failure b is
 * as it was. */
int tn_wire_commit_encode(tn_buf_t *b, const char *topic, uint32_t partition,
                          const tn_commit_rec_t *recs, uint32_t n);

/* A decoded COMMIT request: topic and the position of its records in the
 * payload (borrowed), which tn_wire_commit_next hands out in order. */
typedef struct {
    char topic[256];
    size_t topic_len;
    uint32_t partition;
    uint32_t count;
    uint32_t next;   /* records handed out so far */
    tn_wire_in_t in; /* at the next record */
} tn_wire_commit_t;

/* Decode the fields of a COMMIT request (p, len: after the opcode byte;
 * borrowed while out is used), checking every record once: exact length,
 * count at most what fits the payload, every key at most
 * TN_COMMIT_KEY_MAX and every body at most max_body bytes. The values are
 * the handler's to judge (count 0, the topic's name, negative times). 0,
 * TN_EPROTO (short, overlong, trailing, a topic over 255 bytes or holding
 * a NUL) or TN_ETOOBIG (a body over max_body), whichever comes first in
 * the payload, with a sentence in err (may be NULL). */
int tn_wire_commit_decode(const void *p, size_t len, uint32_t max_body, tn_wire_commit_t *out,
                          char *err, size_t errlen);
/* The next record of a decoded request; false once all count were
 * given. */
bool tn_wire_commit_next(tn_wire_commit_t *c, tn_commit_rec_t *rec);

/* --- PRODUCE -------------------------------------------------------------------- */

/* Bytes of a PRODUCE request payload (opcode included) with no record:
 * what head adds beyond COMMIT's is the epoch, node and seq. Records are
 * sized as COMMIT's (tn_commit_rec_size). */
static inline size_t tn_produce_head_size(size_t topic_len)
{
    return 1 + 4 + topic_len + 4 + 4 + 8 + 8 + 4;
}

/* The fixed fields of a PRODUCE request. */
typedef struct {
    char topic[256];
    uint32_t partition;
    uint32_t leader_epoch; /* 0: the callee's own */
    uint64_t node;         /* the accepting node */
    uint64_t seq;          /* unique per accepting node; a retry repeats it */
} tn_wire_produce_hdr_t;

/* A decoded PRODUCE request: the fixed fields and the records' position
 * in the payload (borrowed), which tn_wire_produce_next hands out. */
typedef struct {
    tn_wire_produce_hdr_t h;
    uint32_t count;
    uint32_t next;
    tn_wire_in_t in;
} tn_wire_produce_t;

/* Append a PRODUCE request's fields (after the opcode byte) for
 * recs[0..n) (borrowed; every byte copied). 0, UV_ENOMEM, or UV_EINVAL
 * (topic empty or over 255 bytes, n 0, a key over TN_COMMIT_KEY_MAX, a
 * negative time); on failure b is as it was. */
int tn_wire_produce_encode(tn_buf_t *b, const tn_wire_produce_hdr_t *h, const tn_commit_rec_t *recs,
                           uint32_t n);
/* Decode the fields of a PRODUCE request (p, len: after the opcode byte;
 * borrowed while out is used), checking every record as COMMIT's decoder
 * does (bodies up to max_body). 0, TN_EPROTO (short, overlong, trailing,
 * count 0, a topic empty, over 255 bytes or holding a NUL) or TN_ETOOBIG
 * (a body over max_body), with a sentence in err (may be NULL). */
int tn_wire_produce_decode(const void *p, size_t len, uint32_t max_body, tn_wire_produce_t *out,
                           char *err, size_t errlen);
/* The next record of a decoded request; false once all were given. */
bool tn_wire_produce_next(tn_wire_produce_t *w, tn_commit_rec_t *rec);

/* --- SETTLE ---------------------------------------------------------------------- */

#define TN_SETTLE_MAX 100 /* handles per request: the /v1 ack batch's maximum */

typedef enum {
    TN_WIRE_SETTLE_ACK = 1,
    TN_WIRE_SETTLE_EXTEND = 2,
    TN_WIRE_SETTLE_NACK = 3,
} tn_wire_settle_how_t;

/* A receipt handle `partition:offset:nonce`. */
typedef struct {
    uint32_t partition;
    uint64_t offset;
    uint32_t nonce;
} tn_wire_handle_t;

/* A decoded SETTLE request (every field copied). */
typedef struct {
    char topic[256];
    char channel[256];
    uint8_t how;
    int64_t visibility_ms;
    uint32_t count;
    tn_wire_handle_t h[TN_SETTLE_MAX];
} tn_wire_settle_t;

/* Append a SETTLE request's fields (after the opcode byte) to b. 0,
 * UV_ENOMEM, or UV_EINVAL (topic or channel empty or over 255 bytes, how
 * not 1..3, a negative visibility, n not 1..TN_SETTLE_MAX); on failure b
 * is as it was. */
int tn_wire_settle_encode(tn_buf_t *b, const char *topic, const char *channel, uint8_t how,
                          int64_t visibility_ms, const tn_wire_handle_t *h, uint32_t n);
/* Exact decode of a SETTLE request's fields (after the opcode byte). 0 or
 * TN_EPROTO (short, trailing, a string over 255 bytes, empty or holding a
 * NUL, how not 1..3, a negative visibility, count not 1..TN_SETTLE_MAX),
 * with a sentence in err (may be NULL). */
int tn_wire_settle_decode(const void *p, size_t len, tn_wire_settle_t *out, char *err,
                          size_t errlen);
/* A SETTLE 200 reply body: u32 n, then n u16 statuses. 0 or UV_ENOMEM. */
int tn_wire_settle_reply_encode(tn_buf_t *b, const uint16_t *status, uint32_t n);
/* Exact decode of a SETTLE 200 reply body that must answer n handles;
 * every status one of 204, 410, 421, 500, 503. 0 or TN_EPROTO. */
int tn_wire_settle_reply_decode(const void *p, size_t len, uint32_t n, uint16_t *status);
/* --- CONSUME -------------------------------------------------------------------- */

#define TN_WIRE_CONSUME_IDENT_MAX 71

/* The fields of a CONSUME request. */
typedef struct {
    char topic[256];
    char channel[256];
    uint32_t partition;
    bool pinned;
    uint64_t offset;
    bool replay;
    int64_t wait_ms;
    uint32_t max;
    bool local_only;
    /* The user the forwarding node serves (its per-user consume cap's
     * name; "" none: security off). The owner counts the consume under
     * it too. At most TN_WIRE_CONSUME_IDENT_MAX bytes. */
    char ident[TN_WIRE_CONSUME_IDENT_MAX + 1];
} tn_wire_consume_t;

/* Append a CONSUME request's fields (after the opcode byte) to b. 0,
 * UV_ENOMEM, or UV_EINVAL (topic or channel empty or over 255 bytes, an
 * ident over TN_WIRE_CONSUME_IDENT_MAX, wait_ms negative); on failure b
 * is as it was. */
int tn_wire_consume_encode(tn_buf_t *b, const tn_wire_consume_t *c);
/* Exact decode of a CONSUME request (p, len: after the opcode byte). The
 * values are the handler's to judge (names, ranges, a negative wait).
 * 0 or TN_EPROTO (short, trailing, a name over 255 bytes or an ident over
 * TN_WIRE_CONSUME_IDENT_MAX, either holding a NUL, a bool other than 0 or
 * 1), with a sentence in err (may be NULL). */
int tn_wire_consume_decode(const void *p, size_t len, tn_wire_consume_t *out, char *err,
                           size_t errlen);

/* --- PSTATS ---------------------------------------------------------------------- */

/* Partitions per PSTATS request: max-partitions' upper bound, so one call
 * asks an owner for every partition of a topic. */
#define TN_PSTATS_MAX 65535

/* A decoded PSTATS request: the topic, and the partition indexes left in
 * the payload (borrowed), read with tn_wire_pstats_index. */
typedef struct {
    char topic[256];
    uint32_t count;
    const uint8_t *parts; /* count big-endian u32s */
} tn_wire_pstats_t;

/* One partition's answer in a PSTATS reply: the numbers only when status
 * is 200. */
typedef struct {
    uint32_t partition;
    uint16_t status; /* 200, 404, 416, 421, 503 */
    uint32_t segments;
    uint64_t oldest_offset;
    uint64_t next_offset;
    uint64_t high_watermark;
    uint64_t size_bytes;
    /* Control records (not messages; storage/plog.h): below next_offset,
     * and of those the ones at or above oldest_offset. */
    uint64_t controls;
    uint64_t stored_controls;
} tn_wire_pstat_t;

/* Append a PSTATS request's fields (after the opcode byte) for parts[0..n)
 * (borrowed) of topic. 0, UV_ENOMEM, or UV_EINVAL (topic empty or over
 * 255 bytes, n not 1..TN_PSTATS_MAX); on failure b is as it was. */
int tn_wire_pstats_encode(tn_buf_t *b, const char *topic, const uint32_t *parts, uint32_t n);
/* Exact decode of a PSTATS request's fields (p, len: after the opcode
 * byte; borrowed while out is used). The topic's name is the handler's to
 * judge. 0 or TN_EPROTO (short, trailing, a topic empty, over 255 bytes or
 * holding a NUL, count not 1..TN_PSTATS_MAX or not what the payload
 * holds), with a sentence in err (may be NULL). */
int tn_wire_pstats_decode(const void *p, size_t len, tn_wire_pstats_t *out, char *err,
                          size_t errlen);
/* The i-th partition index (i < w->count) of a decoded request. */
uint32_t tn_wire_pstats_index(const tn_wire_pstats_t *w, uint32_t i);
/* A PSTATS 200 reply body for st[0..n). 0, UV_ENOMEM, or UV_EINVAL (a
 * status not one of 200, 404, 416, 421, 503); on failure b is as it
 * was. */
int tn_wire_pstats_reply_encode(tn_buf_t *b, const tn_wire_pstat_t *st, uint32_t n);
/* Exact decode of a PSTATS 200 reply body that must answer parts[0..n)
 * (borrowed) in that order, into out[0..n) (numbers 0 for a status other
 * than 200). 0 or TN_EPROTO (another count, an index out of order, an
 * unknown status, short or trailing). */
int tn_wire_pstats_reply_decode(const void *p, size_t len, const uint32_t *parts, uint32_t n,
                                tn_wire_pstat_t *out);

/* --- PURGE ---------------------------------------------------------------------- */

/* A decoded PURGE request. */
typedef struct {
    char topic[256];
    int64_t created_at_ms;
} tn_wire_purge_t;

/* Append a PURGE request's fields (after the opcode byte) to b. 0,
 * UV_ENOMEM, or UV_EINVAL (topic empty or over 255 bytes, created_at_ms
 * negative); on failure b is as it was. */
int tn_wire_purge_encode(tn_buf_t *b, const char *topic, int64_t created_at_ms);
/* Exact decode of a PURGE request (p, len: after the opcode byte). The
 * name's syntax is the handler's to judge. 0 or TN_EPROTO (short,
 * trailing, a topic empty, over 255 bytes or holding a NUL, a negative
 * created_at_ms), with a sentence in err (may be NULL). */
int tn_wire_purge_decode(const void *p, size_t len, tn_wire_purge_t *out, char *err, size_t errlen);

/* --- META_PROPOSE_AT -------------------------------------------------------------- */

#define TN_WIRE_PROPOSE_AT_REPLY 12 /* a 200 reply's size */

/* Append a META_PROPOSE_AT 200 reply body to b: the state machine's answer
 * and the entry's log index (0: not applied). 0 or UV_ENOMEM; on failure b
 * is as it was. */
int tn_wire_propose_at_reply_encode(tn_buf_t *b, int32_t status, uint64_t index);
/* Exact decode of a META_PROPOSE_AT 200 reply body. 0 or TN_EPROTO
 * (another size). */
int tn_wire_propose_at_reply_decode(const void *p, size_t len, int32_t *status, uint64_t *index);

/* --- MOVE_PROGRESS ---------------------------------------------------------------- */

#define TN_WIRE_MOVEPROG_BYTES 1u /* known: bytes_copied and bytes_total */
#define TN_WIRE_MOVEPROG_LAG   2u /* known: lag_records */
#define TN_WIRE_MOVEPROG_REPLY 25 /* a 200 reply's size */

/* A decoded MOVE_PROGRESS request. */
typedef struct {
    char topic[256];
    uint32_t partition;
} tn_wire_moveprog_t;

/* A move's progress (a MOVE_PROGRESS reply): known is
 * TN_WIRE_MOVEPROG_BYTES | TN_WIRE_MOVEPROG_LAG bits; a field whose bit is
 * clear is 0. */
typedef struct {
    uint8_t known;
    uint64_t bytes_copied, bytes_total, lag_records;
} tn_wire_moveprog_reply_t;

/* Append a MOVE_PROGRESS request's fields (after the opcode byte) to b.
 * 0, UV_ENOMEM, or UV_EINVAL (topic empty or over 255 bytes); on failure b
 * is as it was. */
int tn_wire_moveprog_encode(tn_buf_t *b, const char *topic, uint32_t partition);
/* Exact decode of a MOVE_PROGRESS request (p, len: after the opcode
 * byte). 0 or TN_EPROTO (short, trailing, a topic empty, over 255 bytes or
 * holding a NUL), with a sentence in err (may be NULL). */
int tn_wire_moveprog_decode(const void *p, size_t len, tn_wire_moveprog_t *out, char *err,
                            size_t errlen);
/* Append a 200 reply body for r to b (a field whose bit is clear is
 * written 0). 0, UV_ENOMEM, UV_EINVAL (an unknown bit). */
int tn_wire_moveprog_reply_encode(tn_buf_t *b, const tn_wire_moveprog_reply_t *r);
/* Exact decode of a 200 reply body. 0 or TN_EPROTO (another size, an
 * unknown bit, a field set whose bit is clear). */
int tn_wire_moveprog_reply_decode(const void *p, size_t len, tn_wire_moveprog_reply_t *out);

/* --- REPLICA_ERROR ---------------------------------------------------------------- */

#define TN_WIRE_REPLERR_MAX 96 /* an error's text, bytes */

/* A REPLICA_ERROR request. */
typedef struct {
    uint32_t node;
    uint64_t incarnation;
    char topic[256];
    uint32_t partition;
    uint32_t leader_epoch;
    char error[TN_WIRE_REPLERR_MAX + 1]; /* "": the appends succeed again */
} tn_wire_replerr_t;

/* Append r's fields (after the opcode byte) to b. 0, UV_ENOMEM, or
 * UV_EINVAL (a topic empty or over 255 bytes, leader_epoch 0, an error
 * over TN_WIRE_REPLERR_MAX bytes or not printable ASCII); on failure b is
 * as it was. */
int tn_wire_replerr_encode(tn_buf_t *b, const tn_wire_replerr_t *r);
/* Exact decode of a REPLICA_ERROR request (p, len: after the opcode
 * byte). 0 or TN_EPROTO (short, trailing, a bad field as above), with a
 * sentence in err (may be NULL). */
int tn_wire_replerr_decode(const void *p, size_t len, tn_wire_replerr_t *out, char *err,
                           size_t errlen);

/* --- PERRS ----------------------------------------------------------------------- */

/* Errors per partition in a PERRS reply: a partition's members
 * (meta/partstate.h TN_PSTATE_MAX_REPLICAS, checked in wire.c). */
#define TN_WIRE_PERRS_MAX 8

/* One member's append error in a PERRS reply (cluster/replica.h's
 * tn_replica_perr_t is this type). */
typedef struct tn_wire_perr_s {
    uint32_t node;                      /* >= 1 */
    char text[TN_WIRE_REPLERR_MAX + 1]; /* 1..TN_WIRE_REPLERR_MAX printable ASCII bytes */
} tn_wire_perr_t;

/* A PERRS request is a PSTATS request (tn_wire_pstats_encode, _decode,
 * _index). Its 200 reply body is written in two steps: the count once,
 * then each partition in the request's order; the count must be the
 * number of partitions that follow (the decoder holds it to that). */

/* Append a PERRS 200 reply body's count n to b. 0 or UV_ENOMEM (b as it
 * was). */
int tn_wire_perrs_reply_start(tn_buf_t *b, uint32_t n);
/* Append partition index's entry with errs[0..nerrs) (borrowed) to b. 0,
 * UV_ENOMEM, or UV_EINVAL (nerrs over TN_WIRE_PERRS_MAX, a node 0, a text
 * empty, over TN_WIRE_REPLERR_MAX bytes or not printable ASCII); on
 * failure b is as it was. */
int tn_wire_perrs_reply_part(tn_buf_t *b, uint32_t index, const tn_wire_perr_t *errs,
                             uint32_t nerrs);
/* Exact decode of a PERRS 200 reply body that must answer parts[0..n)
 * (borrowed) in that order: counts[i] (caller's room for n) the errors of
 * parts[i], *total their sum; with errs non-NULL also the errors
 * themselves, partition after partition, into errs[0..*total) (room the
 * caller sized from an earlier call with errs NULL on the same bytes).
 * 0 or TN_EPROTO (another count, an index out of order, n over
 * TN_WIRE_PERRS_MAX, a node 0, a text empty, too long or not printable
 * ASCII, short or trailing). */
int tn_wire_perrs_reply_decode(const void *p, size_t len, const uint32_t *parts, uint32_t n,
                               uint8_t *counts, tn_wire_perr_t *errs, size_t *total);

/* --- SETTLE_REPL ------------------------------------------------------------------ */

#define TN_SETREPL_MAX      1024 /* records per request: the channel log's group commit */
#define TN_SETREPL_REC_SIZE 29   /* u8 op, u64 offset, i64 due_ms, u32 attempts, u64 value */
/* Record ops a request may carry: TN_WAL_FIN .. this (storage/cursor.h). */
#define TN_SETREPL_OP_MAX TN_WAL_SKIP

/* A decoded SETTLE_REPL request: names copied, records left in the
 * payload (borrowed), read with tn_wire_setrepl_rec. */
typedef struct {
    char topic[256];
    uint32_t partition;
    uint32_t leader_epoch;
    char channel[256];
    uint64_t stream;    /* the leader's id of this record stream (a channel log it opened) */
    uint64_t first_seq; /* its sequence number of the first record, from 1 */
    /* The frontier a follower creating this channel's log starts it at
     * (the leader's frontier when the stream began; records follow). */
    uint64_t base_frontier;
    uint32_t count;
    const uint8_t *recs; /* count * TN_SETREPL_REC_SIZE bytes */
    /* The stamp of the leader's channel (meta/cmd.h CHANNEL_PUT), 0 when
     * the request had none (an older build, a channel without one). */
    uint64_t chan_stamp;
    /* The follower's data directory incarnation the leader means, 0 when
     * the request had none (an older build, not known): any. */
    uint64_t incarnation;
} tn_wire_setrepl_t;

/* Append a SETTLE_REPL request's fields (after the opcode byte) for
 * recs[0..n) (borrowed) to b, then chan_stamp and incarnation: both
 * when incarnation is not 0, chan_stamp alone when only it is not 0,
 * neither else (the encoding of older builds). 0, UV_ENOMEM, or
 * UV_EINVAL (topic or channel empty or over 255 bytes, leader_epoch or
 * first_seq 0, n not 1..TN_SETREPL_MAX, a record op not
 * 1..TN_SETREPL_OP_MAX); on failure b is as it was. */
int tn_wire_setrepl_encode(tn_buf_t *b, const char *topic, uint32_t partition,
                           uint32_t leader_epoch, const char *channel, uint64_t stream,
                           uint64_t first_seq, uint64_t base_frontier, const tn_walrec_t *recs,
                           uint32_t n, uint64_t chan_stamp, uint64_t incarnation);
/* Exact decode of a SETTLE_REPL request's fields (p, len: after the
 * opcode byte; borrowed while out is used). The names' syntax is the
 * handler's to judge. 0 or TN_EPROTO (short, trailing, a string empty,
 * over 255 bytes or holding a NUL, leader_epoch or first_seq 0, first_seq
 * + count overflowing, count not 1..TN_SETREPL_MAX or not what the
 * payload holds, a record op not 1..TN_SETREPL_OP_MAX, a chan_stamp of 0
 * alone, an incarnation of 0 written), with a sentence in err (may be
 * NULL). */
int tn_wire_setrepl_decode(const void *p, size_t len, tn_wire_setrepl_t *out, char *err,
                           size_t errlen);
/* Record i (< w->count) of a decoded request. */
void tn_wire_setrepl_rec(const tn_wire_setrepl_t *w, uint32_t i, tn_walrec_t *out);

/* --- CHAN_SNAP -------------------------------------------------------------------- */

/* A decoded CHAN_SNAP request: names copied, the state decoded into its
 * own memory (the caller owns state: tn_cursor_fini, also on failure it
 * is initialised and empty). */
typedef struct {
    char topic[256];
    uint32_t partition;
    uint32_t leader_epoch;
    char channel[256];
    uint64_t stream;
    uint64_t seq;         /* the last record of the stream the state includes */
    uint64_t incarnation; /* the follower's the leader means; 0: any */
    tn_cursor_t state;
    uint64_t chan_stamp; /* as tn_wire_setrepl_t's */
} tn_wire_chansnap_t;

/* Append a CHAN_SNAP request's fields (after the opcode byte) to b, the
 * state (borrowed) as a checkpoint image, chan_stamp last unless 0. 0,
 * UV_ENOMEM, or UV_EINVAL
 * (topic or channel empty or over 255 bytes, leader_epoch 0, an image
 * over TN_WIRE_MAX_PAYLOAD); on failure b is as it was. */
int tn_wire_chansnap_encode(tn_buf_t *b, const char *topic, uint32_t partition,
                            uint32_t leader_epoch, const char *channel, uint64_t stream,
                            uint64_t seq, uint64_t incarnation, const tn_cursor_t *state,
                            uint64_t chan_stamp);
/* Exact decode of a CHAN_SNAP request's fields (p, len: after the opcode
 * byte; borrowed for the call). 0; TN_EPROTO (short, trailing, a string
 * empty, over 255 bytes or holding a NUL, leader_epoch 0, a length not
 * what the payload holds, an image that is not a valid checkpoint) with a
 * sentence in err (may be NULL); UV_ENOMEM. out->state is initialised in
 * every case: the caller finalises it. */
int tn_wire_chansnap_decode(const void *p, size_t len, tn_wire_chansnap_t *out, char *err,
                            size_t errlen);

/* --- the secret proof ----------------------------------------------------------- */

/* HMAC-SHA256(key, data) into out, the building block of the proof and
 * the reset key (OpenSSL). 0, UV_EINVAL (key over INT_MAX bytes) or
 * TN_EFAILED when the crypto library refuses. */
int tn_wire_hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t len,
                        uint8_t out[32]);
/* HMAC-SHA256(secret, role || ekm), role the six bytes "client" or
 * "server" (no NUL). 0, UV_EINVAL for an empty secret, or TN_EFAILED when
 * the crypto library refuses. */
int tn_wire_proof(const uint8_t *secret, size_t secret_len, bool client,
                  const uint8_t ekm[TN_WIRE_EKM_LEN], uint8_t out[TN_WIRE_PROOF_LEN]);
/* Whether proof (len bytes) is the peer's proof for role and ekm; compares
 * in constant time, and a length other than TN_WIRE_PROOF_LEN or an empty
 * secret is false. */
bool tn_wire_proof_check(const uint8_t *secret, size_t secret_len, bool client,
                         const uint8_t ekm[TN_WIRE_EKM_LEN], const uint8_t *proof, size_t len);
/* The peer's proof frame, the first frame of a stream (header and payload
 * borrowed, as the framer hands them over): 0 when it is an AUTH frame of
 * TN_WIRE_PROOF_LEN bytes that proves the secret for the role (client:
 * the proof a client sends) and ekm; TN_EPROTO for another frame type or
 * length; UV_EACCES for a wrong proof (or an empty secret). */
int tn_wire_auth_check(const uint8_t *secret, size_t secret_len, bool client,
                       const uint8_t ekm[TN_WIRE_EKM_LEN], const tn_wire_hdr_t *h,
                       const uint8_t *payload);
/* The QUIC stateless reset key: HMAC-SHA256(secret, "tern-quic-stateless-reset-v1").
 * 0, UV_EINVAL for an empty secret, or TN_EFAILED. */
int tn_wire_reset_key(const uint8_t *secret, size_t secret_len, uint8_t out[32]);

/* --- dial backoff --------------------------------------------------------------- */

/* The wait after the n-th consecutive failed dial: 250 ms doubling to
 * 2 s (250, 500, 1000, 2000, 2000, ...); 0 for n = 0. */
uint64_t tn_wire_backoff_ms(unsigned failures);

/* The member id in a reply's decimal string (owner_node, leader_node):
 * 1..20 digits, no sign, no overflow. s borrowed. */
bool tn_wire_parse_node_id(const char *s, uint64_t *out);

#endif
