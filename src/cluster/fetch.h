/* The FETCH frame (TN_OP_FETCH on TN_LANE_REPLICA): a follower node's
 * long-poll to one leader node for every partition the two share, and the
 * leader's answer. Only the codec lives here; the manager (replica.h)
 * sends and serves it. docs/cluster.md lists the layout.
 *
 * Request fields (after the opcode byte): u32 follower node, u64
 * incarnation, u32 wait_ms, u32 max_bytes, u32 count (1..TN_FETCH_MAX_PARTS),
 * then count partitions of string topic (1..255 bytes), u32 partition, u32
 * leader_epoch, u64 fetch_offset, u32 last_fetched_epoch, u64
 * flushed_offset, u32 partition_epoch.
 *
 * Reply (200, application/octet-stream): u32 count (the request's), then
 * per partition in the request's order u16 status, u64 hw, and for
 * TN_FETCH_RECORDS: u64 from, u32 count, u32 nepochs (0..TN_FETCH_MAX_EPOCHS)
 * then nepochs of (u32 epoch, u64 start), bytes records (TNR1 records back
 * to back, as the leader's log holds them); for TN_FETCH_DIVERGING: u32
 * epoch, u64 end_offset; for TN_FETCH_OUT_OF_RANGE and TN_FETCH_GAP: u64
 * end_offset. Other statuses carry nothing more.
 *
 * The FLUSHED frame (TN_OP_FLUSHED on TN_LANE_REPLICA) is a follower's
 * report that records it fetched are now on its disk, sent while its next
 * fetch is parked at the leader (replica.h). Request fields: u32 follower
 * node, u64 incarnation, u32 count (1..TN_FETCH_MAX_PARTS), then count
 * partitions in the FETCH request's partition layout (fetch_offset is the
 * follower's log end, last_fetched_epoch the epoch of its record before
 * it: the leader checks them as a fetch's). Reply 204, no body.
 *
 * Threads: any; pure functions. */
#ifndef TN_CLUSTER_FETCH_H
#define TN_CLUSTER_FETCH_H

#include "core/platform.h"

#include "cluster/wire.h"
#include "core/buf.h"
#include "storage/epochs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TN_FETCH_MAX_PARTS  65535
#define TN_FETCH_MAX_EPOCHS 4096

/* Per-partition answer statuses (stable on the wire). */
enum {
    TN_FETCH_RECORDS = 0,       /* records from `from` (count may be 0), and the hw */
    TN_FETCH_DIVERGING = 1,     /* truncate: the leader's (epoch, end_offset) */
    TN_FETCH_FENCED = 2,        /* the fetch's leader epoch is older than the leader's */
    TN_FETCH_UNKNOWN_EPOCH = 3, /* ... newer than the callee knows */
    TN_FETCH_NOT_LEADER = 4,    /* the callee does not lead the partition */
    TN_FETCH_ERROR = 5,         /* the callee could not read its log */
    TN_FETCH_OUT_OF_RANGE = 6,  /* fetch_offset is below the leader's log start (end_offset) */
    TN_FETCH_GAP = 7, /* fetch_offset is in a gap of the leader's log; end_offset: its end */
    TN_FETCH__STATUS_COUNT
};

/* A fetch's header. After tn_fetch_req_decode, tn_fetch_req_next yields
 * the partitions (the reader borrows the payload). */
typedef struct {
    uint32_t node;
    uint64_t incarnation;
    uint32_t wait_ms;
    uint32_t max_bytes;
    uint32_t count;
    tn_wire_in_t in; /* at the next partition */
    uint32_t left;
} tn_fetch_req_t;

typedef struct {
    char topic[256];
    uint32_t partition;
    uint32_t leader_epoch;
    uint64_t fetch_offset;
    uint32_t last_fetched_epoch;
    uint64_t flushed_offset;
    uint32_t partition_epoch;
} tn_fetch_part_t;

/* Append a request's header (after the opcode byte). 0, UV_ENOMEM,
 * UV_EINVAL (count not 1..TN_FETCH_MAX_PARTS). Then append count parts. */
int tn_fetch_req_put_head(tn_buf_t *b, uint32_t node, uint64_t incarnation, uint32_t wait_ms,
                          uint32_t max_bytes, uint32_t count);
/* Append one partition (borrowed). 0, UV_ENOMEM, UV_EINVAL (topic empty or
 * over 255 bytes). */
int tn_fetch_req_put_part(tn_buf_t *b, const tn_fetch_part_t *p);
/* Exact decode of a request (p, len: after the opcode byte; borrowed
 * while out is used): checks every partition, then rewinds to the first.
 * 0 or TN_EPROTO. */
int tn_fetch_req_decode(const void *p, size_t len, tn_fetch_req_t *out);
/* The next partition of a decoded request: 0, or TN_ENOTFOUND after the
 * last. */
int tn_fetch_req_next(tn_fetch_req_t *r, tn_fetch_part_t *out);

/* A flush report's header; tn_flushed_req_next yields the partitions
 * (the reader borrows the payload). */
typedef struct {
    uint32_t node;
    uint64_t incarnation;
    uint32_t count;
    tn_wire_in_t in; /* at the next partition */
    uint32_t left;
} tn_flushed_req_t;

/* Append a flush report's header (after the opcode byte). 0, UV_ENOMEM,
 * UV_EINVAL (count not 1..TN_FETCH_MAX_PARTS). Then append count parts
 * with tn_fetch_req_put_part. */
int tn_flushed_req_put_head(tn_buf_t *b, uint32_t node, uint64_t incarnation, uint32_t count);
/* Decode and walk a flush report as tn_fetch_req_decode and _next do a
 * request: its own header, then the same partition tuples, read by the
 * same code. */
int tn_flushed_req_decode(const void *p, size_t len, tn_flushed_req_t *out);
int tn_flushed_req_next(tn_flushed_req_t *r, tn_fetch_part_t *out);

/* One partition's answer; the pointers borrow the reply payload. */
typedef struct {
    uint16_t status;
    uint64_t hw;
    /* TN_FETCH_RECORDS */
    uint64_t from;
    uint32_t count;
    uint32_t nepochs;
    const uint8_t *epochs; /* nepochs x 12 bytes: tn_fetch_rpart_epoch */
    const uint8_t *records;
    size_t records_len;
    /* TN_FETCH_DIVERGING; end_offset also TN_FETCH_OUT_OF_RANGE (the
     * leader's log start) and TN_FETCH_GAP (the gap's end) */
    uint32_t epoch;
    uint64_t end_offset;
} tn_fetch_rpart_t;

typedef struct {
    uint32_t count;
    tn_wire_in_t in;
    uint32_t left;
} tn_fetch_reply_t;

/* Writers of a reply body: the head, then one put per partition. Each
 * returns 0, UV_ENOMEM or UV_EINVAL (status not a TN_FETCH_ value, or
 * nepochs over TN_FETCH_MAX_EPOCHS); on failure b is as it was. */
int tn_fetch_reply_put_head(tn_buf_t *b, uint32_t count);
int tn_fetch_reply_put_records(tn_buf_t *b, uint64_t hw, uint64_t from, uint32_t count,
                               const tn_epoch_entry_t *epochs, uint32_t nepochs,
                               const void *records, size_t len);
int tn_fetch_reply_put_diverging(tn_buf_t *b, uint64_t hw, uint32_t epoch, uint64_t end_offset);
/* OUT_OF_RANGE: retention (or a drop) removed the records the follower
 * lacks; the leader's log now starts at start. */
int tn_fetch_reply_put_out_of_range(tn_buf_t *b, uint64_t hw, uint64_t start);
/* GAP: fetch_offset falls in offsets the leader's log never assigned
 * (tn_plog_advance, storage/plog.h); the next record, or the log end, is
 * at end. The follower skips to it the same way. */
int tn_fetch_reply_put_gap(tn_buf_t *b, uint64_t hw, uint64_t end);
/* A status with no more fields (FENCED, UNKNOWN_EPOCH, NOT_LEADER, ERROR). */
int tn_fetch_reply_put_status(tn_buf_t *b, uint16_t status, uint64_t hw);
/* Exact decode of a reply body (borrowed while out is used): checks every
 * partition, then rewinds. 0 or TN_EPROTO (short, trailing, an unknown
 * status, too many epochs, count not 1..TN_FETCH_MAX_PARTS). */
int tn_fetch_reply_decode(const void *p, size_t len, tn_fetch_reply_t *out);
/* The next partition's answer: 0, or TN_ENOTFOUND after the last. */
int tn_fetch_reply_next(tn_fetch_reply_t *r, tn_fetch_rpart_t *out);
/* Epoch entry i (< part->nepochs) of a RECORDS answer. */
void tn_fetch_rpart_epoch(const tn_fetch_rpart_t *part, uint32_t i, tn_epoch_entry_t *out);

#endif
