/* Channel WAL frames and replay.
 *
 * A channel's WAL (<channel>.wal) is a sequence of frames, all integers
 * little-endian:
 *
 *   0  u32 crc32c over bytes 4..20+len
 *   4  u8  op (cursor.h TN_WAL_*)
 *   5  u8  len, payload bytes
 *   6  u16 magic 0x5754 ("TW")
 *   8  u32 sync_mark: WAL bytes covered by an fdatasync when written
 *  12  u64 seq, dense and increasing; continues from the checkpoint's seq
 *  20  payload: FIN u64 offset | REQ u64 offset, i64 due_ms, u32 attempts |
 *      PAUSE u8 | EMPTY u64 offset | TIMEOUTS u64 count
 *
 * Replay applies, on top of a checkpoint, the frames whose seq is above the
 * checkpoint's; frames at or below it were folded in already (a crash
 * between the checkpoint's rename and the WAL's truncation leaves them).
 * The torn-tail rule is the segment log's: the valid prefix ends at the
 * first bad frame, and what follows is truncated unless a later valid
 * frame's sync_mark proves it had been durable (then: corruption). */
#ifndef TN_STORAGE_WAL_H
#define TN_STORAGE_WAL_H

#include "core/platform.h"

#include "storage/cursor.h"

#define TN_WAL_HDR       20
#define TN_WAL_MAX_FRAME (TN_WAL_HDR + 20)
#define TN_WAL_MAGIC     0x5754u

/* Encode r as frame seq into out (TN_WAL_MAX_FRAME bytes); returns its
 * length, or 0 for an unknown op. */
size_t tn_wal_encode(unsigned char *out, const tn_walrec_t *r, uint64_t seq, uint32_t sync_mark);

/* Decode one frame. Returns 0 (fills r, seq, sync_mark, *frame_len),
 * TN_ESHORT when buf holds less than a whole frame, or TN_ECORRUPT. */
int tn_wal_decode(const unsigned char *buf, size_t len, tn_walrec_t *r, uint64_t *seq,
                  uint32_t *sync_mark, size_t *frame_len);

typedef struct {
    uint64_t valid_len; /* bytes of whole, verified, in-sequence frames */
    uint64_t frames;    /* frames in that prefix */
    uint64_t applied;   /* of which applied (seq above the checkpoint) */
    int tail;           /* 0, TN_ESHORT (torn) or TN_ECORRUPT (bad frame) */
    bool durable_damage;
} tn_wal_replay_t;

/* Replay the WAL image buf onto c. Returns 0 (see out->tail and
 * out->durable_damage for what follows the valid prefix), TN_ECORRUPT for a
 * sequence gap between valid frames, or UV_ENOMEM. */
int tn_wal_replay(const unsigned char *buf, size_t len, tn_cursor_t *c, tn_wal_replay_t *out);

#endif
