/* The partition log: one partition's append-only sequence of records,
 * stored as segment files, with group-committed appends.
 *
 * Offsets are dense from 0 and never reused. Three positions move forward:
 * written_next (records written to the file), durable_next (records
 * covered by an fdatasync) and visible_next (what consumers may see, per
 * the durability mode: durable_next in durable and write_ack, written_next
 * in relaxed). An append completes (its callback runs on the loop thread)
 * at the durability boundary of the partition's mode.
 *
 * Ownership and threads: a log is opened and used on the loop thread of its
 * store; appends are processed on the store's log committer thread;
 * tn_plog_read and the position getters may be called from any thread. */
#ifndef TN_STORAGE_PLOG_H
#define TN_STORAGE_PLOG_H

#include "core/platform.h"

#include "core/buf.h"
#include "storage/record.h"
#include "storage/segment.h"
#include "storage/store.h"

typedef struct tn_append_s tn_append_t;
typedef void (*tn_append_cb)(tn_append_t *req, int status);
typedef void (*tn_plog_cb)(tn_plog_t *plog);

/* One record to append. key and body are borrowed until the append's
 * callback runs. */
typedef struct {
    tn_iov_t key;          /* may be empty; at most 65535 bytes */
    tn_iov_t body;         /* at most the store's max_body */
    int64_t deliver_at_ms; /* 0 = deliverable at once */
} tn_rec_in_t;

/* An append request: caller-owned memory, in use from tn_plog_append until
 * its callback returns. */
struct tn_append_s {
    tn__sreq_t s; /* private */
    void *data;   /* for the caller */
    /* Results, valid in the callback when status is 0. */
    uint64_t first_offset; /* offset of recs[0]; the rest follow densely */
    int64_t publish_ns;
    /* Private. */
    tn_plog_t *plog;
    const tn_rec_in_t *recs;
    uint32_t nrecs;
    tn_append_cb cb;
    unsigned char *hdrs;
    unsigned char hdr_inline[TN_REC_HDR];
    tn_append_t *pnext;
};

/* A GC request. */
typedef struct tn_plog_gc_s tn_plog_gc_t;
typedef void (*tn_plog_gc_cb)(tn_plog_gc_t *req, int status);
struct tn_plog_gc_s {
    tn__sreq_t s;
    void *data;
    /* in */
    tn_plog_t *plog;
    uint64_t below_offset; /* segments wholly below this may go */
    int64_t older_than_ns; /* or whose newest record is older (wall ns); 0 = off */
    tn_plog_gc_cb cb;
    /* out */
    uint32_t deleted;
    uint64_t deleted_bytes;
};

/* An advance request. */
typedef struct tn_plog_advance_s tn_plog_advance_t;
typedef void (*tn_plog_advance_cb)(tn_plog_advance_t *req, int status);
struct tn_plog_advance_s {
    tn__sreq_t s;
    void *data;
    tn_plog_t *plog;
    uint64_t next;
    tn_plog_advance_cb cb;
};

/* A request to drop the records below an offset (tn_plog_drop_below). */
typedef struct tn_plog_floor_s tn_plog_floor_t;
typedef void (*tn_plog_floor_cb)(tn_plog_floor_t *req, int status);
struct tn_plog_floor_s {
    tn__sreq_t s;
    void *data;
    tn_plog_t *plog;
    uint64_t below;
    tn_plog_floor_cb cb;
};

typedef struct {
    uint64_t first_offset; /* lowest offset still stored */
    uint64_t written_next;
    uint64_t durable_next;
    uint64_t visible_next;
    uint32_t segments;
    uint64_t bytes;
    uint64_t unsynced_messages; /* written, not yet covered by an fdatasync */
    int err;
} tn_plog_stats_t;

struct tn_plog_s {
    tn_store_t *store;
    char *topic;
    uint32_t partition;
    char *dir;
    atomic_int durability;
    atomic_int err; /* sticky: TN_ECORRUPT, an I/O error, ... */
    char errmsg[512];
    atomic_uint_fast64_t written_next;
    atomic_uint_fast64_t durable_next;
    /* Records below it are dropped (tn_plog_drop_below): read as absent,
     * free for GC. Guarded by lock; durable in the partition's floor file. */
    uint64_t floor;

    /* Segments, oldest first; the last is active. Guarded by lock. */
    uv_mutex_t lock;
    tn_seg_t **segs;
    uint32_t nsegs;
    uint32_t segs_cap;

    /* Committer thread only. */
    uint64_t next_offset;
    int64_t last_publish_ns;
    tn_append_t *rhead; /* this round's appends */
    tn_append_t *rtail;
    tn_plog_t *rnext; /* next log touched this round */
    bool in_round;
    int round_mode;      /* durability mode read once per round */
    uint64_t round_msgs; /* records and bytes written this round */
    uint64_t round_bytes;
    uint64_t unsynced_msgs;
    uint64_t unsynced_bytes;
    int64_t unsynced_since_ns;
    tn_plog_t *relaxed_next; /* list of logs with unsynced relaxed data */
    bool in_relaxed;
    bool no_zeros; /* writing zeros ahead failed: not again until the next segment */

    /* Loop thread. */
    tn_plog_cb on_progress; /* visible_next may have moved */
    void *data;
    tn__sreq_t progress_req;
    bool progress_queued; /* guarded by the store's done_lock */
    tn_plog_t *next_open;
    tn_plog_t *prev_open;
    tn__sreq_t close_req;
    tn_plog_cb close_cb;
    bool closing;

    /* Memory-only logs (tn_plog_open_memory): the records of offsets
     * [mem_first, written_next) in a ring of mem_cap slots (a power of
     * two), slot offset & (mem_cap - 1). Guarded by lock. */
    bool mem;
    struct tn__mrec_s *mrecs;
    uint32_t mem_cap;
    uint64_t mem_first;
    uint64_t mem_bytes;
    uint32_t mem_max_records;
    uint64_t mem_max_bytes;
};

/* Open a partition log, creating its directory and first segment when
 * missing, and recover it: sealed segments are checked through their
 * sidecars (rebuilt from a scan when missing or bad), the active segment is
 * scanned and a torn tail truncated. Corruption does not fail the open: the
 * log opens isolated, with tn_plog_err() returning TN_ECORRUPT and errmsg
 * saying where; every append and read then fails. Returns 0, or an error
 * when no log object could be made (out of memory, I/O error on the
 * directory). Blocks on disk: call at startup, or from a worker thread. */
int tn_plog_open(tn_store_t *store, const char *topic, uint32_t partition, tn_plog_t **out);

/* Open a log that keeps its records in memory only (an NSQ `#ephemeral`
 * topic's partition): nothing is written to disk, a restart loses it.
 * It holds at most max_records records and max_bytes of keys and bodies;
 * an append beyond either is refused with TN_EFULL until
 * tn_plog_mem_trim drops what every reader is done with. Appends complete
 * on a later loop turn (never inside tn_plog_append), as for a disk log;
 * reads, stats and close work as for one; GC (tn_plog_gc_plan) never
 * picks anything, and tn_plog_advance is UV_EINVAL. Loop thread; does not
 * block. 0 or UV_ENOMEM. */
int tn_plog_open_memory(tn_store_t *store, const char *topic, uint32_t partition,
                        uint32_t max_records, uint64_t max_bytes, tn_plog_t **out);

/* A memory log: drop the records below offset below (loop thread).
 * Returns how many went. */
uint64_t tn_plog_mem_trim(tn_plog_t *plog, uint64_t below);

/* Close the log after its queued requests complete; cb (may be NULL) runs
 * on the loop thread, after which the memory is freed. */
void tn_plog_close(tn_plog_t *plog, tn_plog_cb cb);

/* Append n >= 1 records as one atomic batch. Returns 0 when queued (cb will
 * run on the loop thread with the final status), or at once: UV_EINVAL (no
 * records), TN_ETOOBIG (a body or key over its limit), TN_EDISKHIGH (disk
 * above the high watermark), the log's sticky error, TN_ECLOSED, UV_ENOMEM.
 * recs and the bytes they point to are borrowed until cb runs. */
int tn_plog_append(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                   tn_append_cb cb);

/* Read the record at offset into scratch (rec points into it). Verifies
 * the CRC; a mismatch makes the log's error sticky. Returns 0,
 * TN_ENOTFOUND (below the first stored offset or at/after written_next),
 * TN_EGAP, TN_ECORRUPT or an I/O error. Any thread. */
int tn_plog_read(tn_plog_t *plog, uint64_t offset, tn_buf_t *scratch, tn_rec_t *rec);

/* Positions and state (any thread). */
uint64_t tn_plog_written_next(tn_plog_t *plog);
uint64_t tn_plog_durable_next(tn_plog_t *plog);
uint64_t tn_plog_visible_next(tn_plog_t *plog);
int tn_plog_err(tn_plog_t *plog);
void tn_plog_stats(tn_plog_t *plog, tn_plog_stats_t *out);

/* Change the durability mode for later rounds (a tn_durability_t). */
void tn_plog_set_durability(tn_plog_t *plog, int mode);

/* How many of the oldest sealed segments GC may delete for the given
 * bounds: each must lie wholly below below_offset or have its newest
 * record older than older_than_ns (wall clock; 0 = no age limit). Only a
 * prefix qualifies, never the active segment. Any thread. */
uint32_t tn_plog_gc_plan(tn_plog_t *plog, uint64_t below_offset, int64_t older_than_ns);

/* The base offset of the oldest segment holding a record published at or
 * after ns (wall clock), or the active segment's base: every record below
 * it is older than ns. Segment granularity; for keeping a time window of
 * records out of GC. Any thread. */
uint64_t tn_plog_offset_after_ns(tn_plog_t *plog, int64_t ns);

/* Delete the segments tn_plog_gc_plan would name at the time the committer
 * runs the request (unlink, then fsync the directory). Readers holding a
 * segment keep it until they finish. 0 when queued, else an error. */
int tn_plog_gc(tn_plog_t *plog, tn_plog_gc_t *req, uint64_t below_offset, int64_t older_than_ns,
               tn_plog_gc_cb cb);

/* Make next the next offset to assign, if it is above the current one:
 * the offsets skipped are never assigned and read as TN_EGAP (TN_ENOTFOUND
 * when no record precedes them, as after GC). The recovery
 * of a channel that refers to offsets the log lost (an unsynced tail in
 * write_ack or relaxed mode, cut by a power failure) uses this so that no
 * offset is ever reused. Durable (a new segment starts at next) when cb
 * runs with 0. Queued after earlier appends. 0 when queued, TN_ECLOSED,
 * UV_EINVAL. */
int tn_plog_advance(tn_plog_t *plog, tn_plog_advance_t *req, uint64_t next, tn_plog_advance_cb cb);

/* Drop every record below `below` (at most the next offset to assign):
 * they read as TN_ENOTFOUND from then on, the stats' first_offset moves
 * up to it, and GC reclaims the segments wholly below it whatever the
 * bounds it is given. Durable before cb runs with 0: the floor file is
 * written and synced (for a memory log, the records are freed). Queued
 * after earlier appends. 0 when queued, TN_ECLOSED. */
int tn_plog_drop_below(tn_plog_t *plog, tn_plog_floor_t *req, uint64_t below, tn_plog_floor_cb cb);

/* Internal to src/storage: memlog.c serves these for memory logs. */
int tn__memlog_append(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                      tn_append_cb cb);
int tn__memlog_read(tn_plog_t *plog, uint64_t offset, tn_buf_t *scratch, tn_rec_t *rec);
void tn__memlog_free(tn_plog_t *plog);
void tn__plog_round(tn__committer_t *c, tn__sreq_t *round);
int64_t tn__plog_tick(tn__committer_t *c, int64_t now_ns);
void tn__plog_committer_fini(tn__committer_t *c);
/* Isolate the log as recovery does for damage it finds (scrub.c): the
 * sticky error becomes err, errmsg says "partition T/P: <what>: <err>",
 * logged at error level. No-op when the log already failed. Any thread. */
void tn__plog_isolate(tn_plog_t *plog, int err, const char *fmt, ...) TN_PRINTF(3, 4);

#endif
