/* The ingress log: this node's write-ahead log of the produces it accepted
 * for partitions that other nodes own.
 *
 * A produce for a remote partition is acknowledged to its client once its
 * record is durable here; the dispatcher (src/cluster) later reads the
 * records, commits them to their owners' partition logs and then moves the
 * checkpoint: "every record below it is in its owner's log". Segments
 * wholly below the checkpoint are deleted.
 *
 * Files under <data>/ingress/ (docs/storage-format.md has every byte):
 *
 *   <20-digit first seq>.log   segments of frames, at most segment_bytes
 *                              each (one larger frame alone)
 *   checkpoint                 u32 magic "TNK1" | u32 crc32c | u64 next
 *
 * Seqs are dense from 0 and increase across segments. Three positions move
 * forward: next (the next seq to assign), durable (every seq below it is
 * covered by an fdatasync) and checkpoint (every seq below it is in its
 * owner's log; checkpoint <= durable <= next).
 *
 * Threads: open, append, checkpoint and close on the store's loop thread
 * (open blocks on disk: call it at start); appends and checkpoints are
 * processed by the store's log committer in the same rounds as partition
 * appends. tn_ilog_read, the position getters and tn_ilog_stats may be
 * called from any thread. */
#ifndef TN_STORAGE_ILOG_H
#define TN_STORAGE_ILOG_H

#include "core/platform.h"

#include "core/buf.h"
#include "storage/commit.h"
#include "storage/store.h"

#include <stdatomic.h>

#define TN_ILOG_HDR       20          /* magic, payload length, seq, crc32c */
#define TN_ILOG_MAGIC     0x31494E54u /* "TNI1" read as a little-endian u32 */
#define TN_ILOG_VERSION   1
#define TN_ILOG_F_PINNED  0x01
#define TN_ILOG_MAX_TOPIC 255
#define TN_ILOG_MAX_KEY   65535
#define TN_ILOG_MAX_BODY  (100 * 1024 * 1024) /* the largest max-msg-size */
/* Fixed payload bytes: version, flags, sync mark, the three lengths,
 * partition and the two times. */
#define TN_ILOG_FIXED       (1 + 1 + 4 + 2 + 2 + 4 + 8 + 8 + 4)
#define TN_ILOG_MAX_PAYLOAD (TN_ILOG_FIXED + TN_ILOG_MAX_TOPIC + TN_ILOG_MAX_KEY + TN_ILOG_MAX_BODY)

#define TN_ILOG_SEGMENT_BYTES (64 * TN_MIB)
#define TN_ILOG_ROTATE_BYTES  TN_MIB

typedef struct tn_ilog_s tn_ilog_t;

/* One produce accepted for another node's partition. In an append, the
 * bytes are borrowed until the append's callback runs; in a batch from
 * tn_ilog_read they point into the batch. */
typedef struct {
    tn_iov_t topic;        /* 1..255 bytes */
    tn_iov_t key;          /* may be empty; at most 65535 bytes */
    tn_iov_t body;         /* at most the store's max_body */
    uint32_t partition;    /* chosen at accept */
    bool pinned;           /* by key or explicit partition: never rerouted */
    int64_t deliver_at_ms; /* 0: at once (a DPUB keeps its time); >= 0 */
    int64_t created_ms;    /* wall clock at accept */
} tn_irec_t;

/* Frame bytes of a record (header included). */
size_t tn_irec_size(const tn_irec_t *rec);

/* Encode rec as frame seq into out (tn_irec_size(rec) bytes); returns the
 * length. sync_mark: the segment bytes an fdatasync covered when the frame
 * was written (recovery tells a torn tail from damage by it). rec must be
 * valid (lengths within their limits). */
size_t tn_irec_encode(unsigned char *out, const tn_irec_t *rec, uint64_t seq, uint32_t sync_mark);

/* Decode the frame at the start of buf. Returns 0 (rec points into buf;
 * *seq and *used, the frame's bytes, are set; sync_mark may be NULL),
 * TN_ESHORT when buf holds
 * less than the whole frame (*used, when not 0, is the frame's length),
 * or TN_ECORRUPT (bad magic, length, checksum or structure; trailing bytes
 * in the payload are refused). Pure: no allocation, any thread. */
int tn_irec_decode(const void *buf, size_t len, tn_irec_t *rec, uint64_t *seq, size_t *used,
                   uint32_t *sync_mark);

typedef struct tn_ilog_append_s tn_ilog_append_t;
typedef void (*tn_ilog_cb)(tn_ilog_append_t *a, int status);

/* An append request: caller-owned memory, in use from tn_ilog_append until
 * its callback returns. */
struct tn_ilog_append_s {
    tn__sreq_t s; /* private */
    void *data;   /* for the caller */
    /* Result, valid in the callback when status is 0: the seq of recs[0];
     * the rest follow densely. */
    uint64_t first_seq;
    /* Private. */
    tn_ilog_t *log;
    const tn_irec_t *recs;
    uint32_t nrecs;
    tn_ilog_cb cb;
    unsigned char *hdrs; /* per record: frame header and payload fields */
    tn_ilog_append_t *rnext;
};

/* A checkpoint request: caller-owned, in use until its callback returns. */
typedef struct tn_ilog_ckpt_s tn_ilog_ckpt_t;
typedef void (*tn_ilog_ckpt_cb)(tn_ilog_ckpt_t *req, int status);
struct tn_ilog_ckpt_s {
    tn__sreq_t s; /* private */
    void *data;
    /* Result: segments deleted by the compaction that followed. */
    uint32_t deleted;
    /* Private. */
    tn_ilog_t *log;
    uint64_t next;
    tn_ilog_ckpt_cb cb;
};

/* One record of a read batch. */
typedef struct {
    uint64_t seq;
    tn_irec_t rec;
} tn_ilog_entry_t;

/* Decoded, owned copies of records: free with tn_ilog_batch_fini. */
typedef struct {
    tn_ilog_entry_t *recs;
    uint32_t n;
    uint64_t next; /* the seq after the last record returned (from when none) */
    size_t bytes;  /* frame bytes of the records returned */
    char *mem;     /* private: the frames the records point into */
} tn_ilog_batch_t;

typedef struct {
    uint64_t next_seq;
    uint64_t durable_seq;
    uint64_t checkpoint_seq;
    uint64_t pending_records;  /* durable or not, at or above the checkpoint */
    uint64_t pending_bytes;    /* their frame bytes */
    int64_t oldest_pending_ms; /* created_ms of the record at the checkpoint; 0: none */
    uint32_t segments;
    uint64_t bytes; /* every segment's bytes */
    int err;        /* the latched error, or 0 */
} tn_ilog_stats_t;

typedef struct {
    uint64_t segment_bytes; /* a segment takes no frame past this (one larger frame alone) */
    uint64_t rotate_bytes;  /* an active segment this large and wholly checkpointed rotates */
} tn_ilog_opts_t;

typedef void (*tn_ilog_close_cb)(tn_ilog_t *l);

/* Open <data>/ingress/ (creating it) and recover it, with 64 MiB segments
 * and 1 MiB for rotation. Blocks on disk: call at start, on the store's
 * loop thread. A torn tail of the last segment (an incomplete frame, or a
 * bad one that no later valid frame proves durable by its sync mark) is
 * truncated and logged at warn.
 * Returns 0, TN_ECORRUPT (a bad frame in a sealed segment or before a
 * later valid frame, a seq out of order, a damaged checkpoint file, or a
 * checkpoint ahead of the recovered next seq) with a line naming file and
 * offset in err, UV_EBUSY (the store has its ingress log open already),
 * UV_ENOMEM or an I/O error. */
int tn_ilog_open(tn_store_t *store, tn_ilog_t **out, char *err, size_t errlen);
/* The same with chosen sizes (tests use small ones). opts is copied. */
int tn_ilog_open_opts(tn_store_t *store, const tn_ilog_opts_t *opts, tn_ilog_t **out, char *err,
                      size_t errlen);

/* Append n >= 1 records as one batch of dense seqs. Returns 0 when queued
 * (cb runs on the loop thread once every record is durable, or with the
 * error that stopped it), or at once: UV_EINVAL (n == 0, a topic of 0 or
 * more than 255 bytes, deliver_at_ms < 0), TN_ETOOBIG (a key over 65535
 * bytes or a body over the store's max_body), TN_EDISKHIGH, the latched
 * error of an earlier write or fdatasync failure, TN_ECLOSED, UV_ENOMEM.
 * recs and the bytes they point to are borrowed until cb runs. */
int tn_ilog_append(tn_ilog_t *l, tn_ilog_append_t *a, const tn_irec_t *recs, uint32_t n,
                   tn_ilog_cb cb);

/* Decoded, owned copies of durable records from seq `from` on: at most
 * max_recs of them, and no more frame bytes than max_bytes except that
 * the first record is returned whatever its size. Fewer (maybe none) when
 * fewer are durable. Returns 0 (out filled; tn_ilog_batch_fini it),
 * UV_ERANGE (from is below the oldest stored seq: compaction removed it),
 * UV_EINVAL (from above next, or max_recs 0), TN_ECORRUPT (a record failed
 * its check: latched), UV_ENOMEM or an I/O error. Any thread. */
int tn_ilog_read(tn_ilog_t *l, uint64_t from, uint32_t max_recs, size_t max_bytes,
                 tn_ilog_batch_t *out);
void tn_ilog_batch_fini(tn_ilog_batch_t *b);

/* Record that every record below next is in its owner's log: the
 * checkpoint file is written (temp, fsync, rename, directory fsync), then
 * segments whose successor starts at or below the checkpoint are deleted,
 * and an active segment of at least rotate_bytes wholly below it is
 * rotated so that it goes too. A next at or below the current checkpoint
 * changes nothing (it never moves back). Queued after earlier appends;
 * cb runs on the loop thread with 0 or the (latched) I/O error. Returns 0
 * when queued, UV_EINVAL (next above durable), TN_ECLOSED. */
int tn_ilog_checkpoint(tn_ilog_t *l, tn_ilog_ckpt_t *req, uint64_t next, tn_ilog_ckpt_cb cb);

uint64_t tn_ilog_next_seq(const tn_ilog_t *l);       /* next seq to assign */
uint64_t tn_ilog_durable_seq(const tn_ilog_t *l);    /* every seq below is durable */
uint64_t tn_ilog_checkpoint_seq(const tn_ilog_t *l); /* every seq below is in its owner's log */
int tn_ilog_err(const tn_ilog_t *l);                 /* the latched error, or 0 */
const char *tn_ilog_errmsg(const tn_ilog_t *l);
void tn_ilog_stats(tn_ilog_t *l, tn_ilog_stats_t *out);

/* Close after the requests queued before it finish; cb (may be NULL) runs
 * on the loop thread, then the memory is freed. tn_store_close closes a
 * log still open. */
void tn_ilog_close(tn_ilog_t *l, tn_ilog_close_cb cb);

/* Internal to src/storage: the log committer's round hands the ingress
 * appends to these (plog.c). take moves them out of the round chain;
 * write writes them; sync makes them durable and completes them. */
tn__sreq_t *tn__ilog_take(tn__sreq_t **round);
void tn__ilog_write(tn__committer_t *c, tn__sreq_t *appends);
void tn__ilog_sync(tn__committer_t *c, tn__sreq_t *appends);

#endif
