/* The record codec: one message in a partition's segment file.
 *
 * Layout (all integers little-endian), TN_REC_HDR = 44 bytes of header then
 * the key and the body:
 *
 *   0  u32 magic "TNR1"
 *   4  u32 crc32c over bytes 8..44, then the key, then the body
 *   8  u64 offset            position in the partition, dense from 0
 *  16  i64 publish_ns        wall clock at the group commit, ns since epoch
 *  24  i64 deliver_at_ms     deferred delivery time, ms since epoch; 0 = now
 *  32  u32 body_len          <= TN_REC_MAX_BODY
 *  36  u32 sync_mark         bytes of this segment known durable (fdatasync
 *                            completed) when this record was written
 *  40  u16 key_len
 *  42  u16 flags             TN_REC_F_MORE: the next record belongs to the
 *                            same atomic batch; TN_REC_F_CONTROL: a
 *                            control record (below); other bits must be 0
 *
 * A control record is written by the broker, not a producer: it holds an
 * offset like any record but is never delivered to a consumer and is not
 * counted as a message (depth, message counts). Its body starts with a u8
 * kind (TN_CTRL_*):
 *   1 EPOCH_START  then u32 epoch: the first record a leader writes in its
 *                  leader epoch (tn_plog_begin_epoch);
 *   2 PRODUCER     then u64 node, u64 seq, u32 count: the next count
 *                  records came from a batch forwarded by node with that
 *                  sequence number (produce through non-leaders);
 *   others reserved: a reader skips a control record of a kind it does
 *   not know.
 *
 * sync_mark lets recovery tell a torn, never-acknowledged tail (truncate)
 * from corruption of data that had been made durable (refuse): see
 * segment.c. */
#ifndef TN_STORAGE_RECORD_H
#define TN_STORAGE_RECORD_H

#include "core/platform.h"

#define TN_REC_HDR       44
#define TN_REC_MAGIC     0x31524E54u /* "TNR1" read as a little-endian u32 */
#define TN_REC_MAX_BODY  (256u * 1024 * 1024)
#define TN_REC_F_MORE    0x0001u
#define TN_REC_F_CONTROL 0x0002u
#define TN_REC_F_KNOWN   (TN_REC_F_MORE | TN_REC_F_CONTROL)

/* Control record kinds (the body's first byte) and body sizes. */
#define TN_CTRL_EPOCH_START      1
#define TN_CTRL_PRODUCER         2
#define TN_CTRL_EPOCH_START_SIZE 5  /* u8 kind, u32 epoch */
#define TN_CTRL_PRODUCER_SIZE    21 /* u8 kind, u64 node, u64 seq, u32 count */

typedef struct {
    uint64_t offset;
    int64_t publish_ns;
    int64_t deliver_at_ms;
    uint32_t body_len;
    uint32_t sync_mark;
    uint16_t key_len;
    uint16_t flags;
} tn_rec_hdr_t;

/* A decoded record. key and body point into the buffer it was decoded
 * from (borrowed). */
typedef struct {
    tn_rec_hdr_t h;
    const char *key;
    const char *body;
} tn_rec_t;

static inline uint64_t tn_rec_size(const tn_rec_hdr_t *h)
{
    return TN_REC_HDR + (uint64_t)h->key_len + h->body_len;
}

/* Encode h into out[TN_REC_HDR], computing the CRC over key and body
 * (borrowed; either may be NULL when its length is 0). */
void tn_rec_encode(unsigned char *out, const tn_rec_hdr_t *h, const void *key, const void *body);

/* Decode and sanity-check a header (magic, flags, lengths) without the CRC.
 * Returns 0, TN_ESHORT (fewer than TN_REC_HDR bytes) or TN_ECORRUPT. */
int tn_rec_decode_hdr(const unsigned char *buf, size_t len, tn_rec_hdr_t *h);

/* Decode a whole record from buf and verify its CRC. Returns 0 and fills
 * rec (pointing into buf), TN_ESHORT when buf holds less than the whole
 * record, or TN_ECORRUPT. */
int tn_rec_decode(const unsigned char *buf, size_t len, tn_rec_t *rec);

/* Verify a record whose header, key and body were read separately. */
int tn_rec_verify(const unsigned char *hdr, const void *key, const void *body);

/* Check a run of records back to back, as a follower receives them:
 * each whole and CRC-good, offsets dense from first_offset, the last one
 * ending an atomic batch (no TN_REC_F_MORE). *count = how many. 0, or
 * TN_ECORRUPT (also for an empty run or a record cut off). Pure. */
int tn_rec_check_run(const void *bytes, size_t len, uint64_t first_offset, uint32_t *count);

/* Re-encode the record at rec (a whole, valid record) with sync_mark,
 * recomputing its CRC in place: a follower makes the leader's
 * segment-local mark its own. */
void tn_rec_set_sync_mark(unsigned char *rec, uint32_t sync_mark);

/* A decoded control record body. */
typedef struct {
    uint8_t kind;   /* TN_CTRL_* (or a reserved kind) */
    uint32_t epoch; /* EPOCH_START */
    uint64_t node;  /* PRODUCER */
    uint64_t seq;
    uint32_t count;
} tn_ctrl_t;

/* Encode an EPOCH_START body into out[TN_CTRL_EPOCH_START_SIZE]. */
void tn_ctrl_encode_epoch(unsigned char *out, uint32_t epoch);
/* Encode a PRODUCER body into out[TN_CTRL_PRODUCER_SIZE]. */
void tn_ctrl_encode_producer(unsigned char *out, uint64_t node, uint64_t seq, uint32_t count);
/* Decode a control record's body. 0 (a reserved kind decodes with only
 * kind set), or TN_ECORRUPT: empty, or shorter than its kind needs. */
int tn_ctrl_decode(const void *body, size_t len, tn_ctrl_t *out);

#endif
