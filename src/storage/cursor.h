/* A channel cursor: the durable part of one channel's state on one
 * partition, rebuilt at startup from a checkpoint plus the channel WAL.
 *
 * Every offset below `frontier` is settled. Above it, `settled` holds the
 * offsets finished out of order (sorted), and `requeued` the messages put
 * back with a delivery time and attempt count (sorted by offset). Leases,
 * in-flight deadlines and RDY state are not durable and live in the queue
 * engine. The queue engine bounds how far ahead of the frontier it
 * delivers, which bounds both sets.
 *
 * The checkpoint file (<channel>.ckpt), all integers little-endian:
 *
 *   0  u32 magic "TNC1"
 *   4  u32 crc32c over bytes 8..end
 *   8  u32 version (1)
 *  12  u32 flags (bit 0: paused)
 *  16  u64 seq, the last WAL record folded in
 *  24  u64 frontier
 *  32  u64 finish_count
 *  40  u64 requeue_count
 *  48  u64 timeout_count
 *  56  u32 settled count, 60 u32 requeued count
 *  64  settled offsets, u64 each, ascending, each above the frontier
 *      then requeued entries { u64 offset, i64 due_ms, u32 attempts },
 *      ascending, each at or above the frontier
 *
 * Thread safety: a cursor belongs to one thread at a time. */
#ifndef TN_STORAGE_CURSOR_H
#define TN_STORAGE_CURSOR_H

#include "core/platform.h"

#include "core/buf.h"

#define TN_CKPT_MAGIC 0x31434E54u /* "TNC1" */
#define TN_CKPT_HDR   64

/* WAL record types. */
enum {
    TN_WAL_FIN = 1,      /* offset settled */
    TN_WAL_REQ = 2,      /* offset requeued: due_ms, attempts */
    TN_WAL_PAUSE = 3,    /* value: 1 paused, 0 unpaused */
    TN_WAL_EMPTY = 4,    /* everything below offset settled */
    TN_WAL_TIMEOUTS = 5, /* value: cumulative timeout count */
    TN_WAL_SKIP = 6,     /* offset settled without counting as a message: a
                          * control record (record.h) the scan passed */
};

typedef struct {
    uint8_t op;
    uint64_t offset;
    int64_t due_ms;
    uint32_t attempts;
    uint64_t value;
} tn_walrec_t;

typedef struct {
    uint64_t offset;
    int64_t due_ms;
    uint32_t attempts;
} tn_requeue_t;

typedef struct {
    uint64_t seq;
    uint64_t frontier;
    uint64_t *settled;
    uint32_t nsettled;
    uint32_t settled_cap;
    tn_requeue_t *requeued;
    uint32_t nrequeued;
    uint32_t requeued_cap;
    bool paused;
    uint64_t finish_count;
    uint64_t requeue_count;
    uint64_t timeout_count;
} tn_cursor_t;

void tn_cursor_init(tn_cursor_t *c, uint64_t frontier);
void tn_cursor_fini(tn_cursor_t *c);
/* Deep copy into dst (initialised by this call). 0 or UV_ENOMEM. */
int tn_cursor_copy(tn_cursor_t *dst, const tn_cursor_t *src);

/* Apply one record. FIN is idempotent; REQ of a settled offset is ignored,
 * and so is one equal to the requeued entry of its offset (due_ms and
 * attempts the same: the same record written again, which requeue_count
 * counts once; a later requeue of the message comes from a later
 * delivery, with more attempts, but one at the cap, 65535, with the same
 * due time would count once too). Returns 0, UV_ENOMEM, or UV_EINVAL for
 * an unknown op. */
int tn_cursor_apply(tn_cursor_t *c, const tn_walrec_t *r);

bool tn_cursor_is_settled(const tn_cursor_t *c, uint64_t offset);
/* The requeue entry for offset, or NULL. Borrowed. */
const tn_requeue_t *tn_cursor_requeued(const tn_cursor_t *c, uint64_t offset);

/* Serialise to a checkpoint file image (appended to out). */
int tn_cursor_encode(const tn_cursor_t *c, tn_buf_t *out);
/* Parse a checkpoint image into c (initialised by this call). 0,
 * TN_ECORRUPT or UV_ENOMEM. */
int tn_cursor_decode(const void *data, size_t len, tn_cursor_t *c);

#endif
