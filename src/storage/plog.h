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
#include "storage/epochs.h"
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
    /* Replication (private). kind: 0 records, 1 raw (tn_plog_append_raw),
     * 2 epoch start (tn_plog_begin_epoch). */
    uint8_t kind;
    uint32_t ncontrol;  /* the first ncontrol records are control records */
    uint32_t epoch;     /* kind 2 */
    unsigned char *raw; /* kind 1: owned copy of the records */
    size_t raw_len;
    uint64_t raw_first;        /* kind 1: offset the first record carries */
    tn_epoch_entry_t *repochs; /* kind 1: owned copy of the epochs */
    uint32_t nrepochs;
    unsigned char ctrl_body[TN_CTRL_EPOCH_START_SIZE];
    tn_rec_in_t ctrl_rec; /* kind 2 */
    tn_append_t *gnext;   /* waiting for the hw (loop thread) */
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

/* A damaged segment's repair (tn_plog_repair). */
typedef struct tn_plog_repair_s tn_plog_repair_t;
typedef void (*tn_plog_repair_cb)(tn_plog_repair_t *req, int status);
struct tn_plog_repair_s {
    tn__sreq_t s;
    void *data;
    tn_plog_t *plog;
    uint64_t base, end;
    uint64_t recs_end;  /* tn_plog_repair(_gap): the copy's records end here */
    unsigned char *raw; /* owned copy of the records, freed before cb */
    size_t raw_len;
    /* tn_plog_repair_active: the copy's epochs (owned, freed before cb) */
    bool active;
    uint32_t first_epoch; /* tn_plog_rebuild_epochs */
    tn_epoch_entry_t *repochs;
    uint32_t nrepochs;
    tn_plog_repair_cb cb;
    /* The store's: held by its cut watch (tn_store_set_cut_watch) before
     * the repair runs; pre_status its failure, pinned whether it held
     * the log. */
    tn_store_cut_t cut_wait;
    int pre_status;
    bool pinned;
    /* out: where the damaged file was kept (a path in the partition's
     * directory), "" when the repair stopped before that */
    char quarantined[512];
};

/* A damage record's write (tn_plog_record_damage). */
typedef struct tn_plog_dmgrec_s tn_plog_dmgrec_t;
typedef void (*tn_plog_dmgrec_cb)(tn_plog_dmgrec_t *req, int status);
struct tn_plog_dmgrec_s {
    tn__sreq_t s;
    void *data;
    tn_plog_t *plog;
    tn_plog_dmgrec_cb cb;
};

/* A suffix truncation request (tn_plog_truncate). */
typedef struct tn_plog_trunc_s tn_plog_trunc_t;
typedef void (*tn_plog_trunc_cb)(tn_plog_trunc_t *req, int status);
struct tn_plog_trunc_s {
    tn__sreq_t s;
    void *data;
    tn_plog_t *plog;
    uint64_t offset;
    uint64_t floor;
    tn_plog_trunc_cb cb;
    bool batch_down; /* tn_plog_truncate_batch */
    /* out */
    uint64_t dropped; /* records removed */
    uint64_t cut_to;  /* the log end after it (with status 0) */
    /* The store's: held by its cut watch (tn_store_set_cut_watch). */
    tn_store_cut_t cut_wait;
};

typedef struct {
    uint64_t first_offset; /* lowest offset still stored */
    uint64_t written_next;
    uint64_t durable_next;
    uint64_t visible_next;
    uint32_t segments;
    uint64_t bytes;
    uint64_t unsynced_messages; /* written, not yet covered by an fdatasync */
    /* Control records (not messages; tn_plog_controls_below): below
     * written_next, and of those the ones in [first_offset, written_next).
     * 0 for a factor-1 partition. Messages ever written: written_next -
     * controls; stored now: written_next - first_offset - stored_controls. */
    uint64_t controls;
    uint64_t stored_controls;
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
    /* The last write round's full-disk error (UV_ENOSPC, -EDQUOT), which
     * is not sticky; 0 again once a round writes (tn_plog_nospace). */
    atomic_int nospace;
    /* Where a TN_ECORRUPT came from, when it was a record of a segment:
     * that segment's base and the next one's base, or
     * TN_PLOG_DAMAGE_ACTIVE for the active segment (bad_end 0: not known).
     * Written before err turns sticky; read with it (tn_plog_damage). */
    atomic_uint_fast64_t bad_base;
    atomic_uint_fast64_t bad_end;
    atomic_uint_fast64_t written_next;
    atomic_uint_fast64_t durable_next;
    /* Records below it are dropped (tn_plog_drop_below): read as absent,
     * free for GC. Guarded by lock; durable in the partition's floor file. */
    uint64_t floor;
    /* Control records below the floor when it lies inside a segment whose
     * control offsets are not listed (plog.c, "control records"); guarded
     * by lock. */
    uint64_t floor_ctl;
    bool floor_ctl_known;

    /* Held by whoever writes the damage record, with the check that the
     * log has not failed yet and the isolation that follows it
     * (tn__plog_found_damage); taken before lock, never while holding it. */
    uv_mutex_t dmg_lock;

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
    bool round_synced; /* synced with the round's other logs (sync_round) */
    int round_rc;      /* ... with this result */
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
    bool progress_queued;   /* guarded by the store's done_lock */
    atomic_bool repl_watch; /* tn_plog_set_repl_watch */
    tn_plog_t *next_open;
    tn_plog_t *prev_open;
    tn__sreq_t close_req;
    tn_plog_cb close_cb;
    bool closing;
    bool abandoned; /* tn_plog_abandon: the close touches no file */
    /* Readers off the loop that are not the log's owner (tn_plog_pin): a
     * close asked meanwhile is held (close_held) until the last unpins. */
    uint32_t pins;
    bool close_held;

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

    /* Replication. The leader-epoch history, guarded by lock; changed and
     * saved on the committer thread only. epochs_used: the partition has
     * an epochs file (a replicated one); a factor-1 partition never gets
     * one. */
    tn_epochs_t epochs;
    bool epochs_used;
    /* Committer thread: the epoch whose start record this process's
     * begin_epoch could not write for space (the epoch assigned at the
     * log end, no record of its start anywhere): begin_epoch may ask for
     * it again, as it may not after a restart (epoch_prepare). 0: none. */
    uint32_t epoch_unwritten;
    /* The open found the epochs file damaged (the log isolated for it:
     * tn_plog_epochs_damaged). */
    bool epochs_bad;
    /* The hw gate (tn_plog_set_gated). gated and hw are written on the
     * loop thread, read by any thread. gwait: appends written and synced
     * as their mode wants, waiting for the hw to cover them, oldest first
     * (loop thread). */
    atomic_bool gated;
    atomic_uint_fast64_t hw;
    tn_append_t *ghead;
    tn_append_t *gtail;
    /* tn_plog_gate_shut's status (loop thread): an append that would
     * wait for the hw completes with it at once; 0: none. */
    int gshut;
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

/* What tn_plog_open would recover from the partition directory dir,
 * found without writing anything there (plogprobe.c): for `ternctl
 * restore`, which looks at every member's copy of a replicated partition
 * in a backup before it writes a byte. It reads with recovery's own
 * pieces (segment sidecars and scans, the floor, damage and epochs files) and
 * applies recovery's decisions in memory: a torn tail of the last segment
 * is not counted, a sealed segment's damage, a damaged floor or epochs
 * file, or a damage record (the `damage` file) that is damaged or still
 * names a segment is TN_ECORRUPT (the log would open isolated; a record
 * naming the last segment as the active one also keeps its tail from
 * being taken for a torn write), and the epoch history is cut to the log
 * as recovery cuts it. */
typedef struct {
    uint64_t log_start; /* the first offset the log holds (floor included) */
    uint64_t log_end;   /* the offset the next append would get */
    tn_epochs_t epochs; /* the history as recovery leaves it (owned: tn_plog_probe_fini) */
    /* The highest epoch the file named before recovery's cut (an entry a
     * leader recorded at its log end and wrote nothing in), 0 for none. */
    uint32_t max_epoch;
    char errmsg[300]; /* what was damaged, or what failed */
} tn_plog_probe_t;

/* Probe dir (borrowed) into *out (caller-owned; fini it after any
 * return). A missing dir is UV_ENOENT; a directory without segments is an
 * empty log (0, 0). 0, TN_ECORRUPT (what storage would isolate: errmsg),
 * an I/O error or UV_ENOMEM. Any thread; blocks. */
int tn_plog_probe(const char *dir, tn_plog_probe_t *out);
void tn_plog_probe_fini(tn_plog_probe_t *out);

/* Storage-internal (the log's recovery and the probe): read dir's floor
 * file into *floor, which a missing file leaves as it was. 0,
 * TN_ECORRUPT or an I/O error. */
int tn__plog_floor_load(const char *dir, uint64_t *floor);

/* Storage-internal (the log's recovery and the probe): dir's damage
 * record (the `damage` file, docs/storage-format.md), read before the
 * segments are. */
typedef struct {
    bool found;         /* a file is there */
    bool damaged;       /* ... of another size, magic or CRC */
    uint64_t base, end; /* the segment it names (end TN_PLOG_DAMAGE_ACTIVE: the active one) */
} tn__plog_dmgfile_t;

/* Read dir's damage file into *d (none: found false). 0 (a damaged file
 * too: d->damaged) or an I/O error. */
int tn__plog_damage_load(const char *dir, tn__plog_dmgfile_t *d);

/* Whether the valid record d still names a segment, so the log opens
 * isolated for it: now_end is what follows the segment at d->base as the
 * recovered segments stand (the next one's base, TN_PLOG_DAMAGE_ACTIVE
 * when it is the last, 0 when no segment starts at d->base). The same
 * range, or for the active segment's damage the segment at base, the last
 * one or one sealed since. */
bool tn__plog_damage_names(const tn__plog_dmgfile_t *d, uint64_t now_end);

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
 * on the loop thread, after which the memory is freed. Appends waiting
 * for the hw gate (or reaching it while the log closes) complete with
 * TN_ECLOSED; requests asked from now on are refused with TN_ECLOSED. A
 * log under tn_plog_set_repl_watch tells the store's replica watch at
 * once (plog->closing is then true), so that a user of the log other
 * than its owner (the replica manager holds logs the engine owns) lets
 * go of it before it is freed; the requests it queued before still
 * complete first. A pinned log (tn_plog_pin) is closed only once the last
 * pin is released. */
void tn_plog_close(tn_plog_t *plog, tn_plog_cb cb);

/* Keep pl's memory while a worker thread reads it for a user that does
 * not own it (the replica manager serving a fetch from the engine's log):
 * a close asked meanwhile waits for tn_plog_unpin (so does a truncation,
 * until its cb: tn_plog_truncate). Both on the loop thread; every pin is
 * released exactly once. */
void tn_plog_pin(tn_plog_t *pl);
void tn_plog_unpin(tn_plog_t *pl);

/* Close a log object whose files another object of the same partition
 * has written since it last looked (a replicated partition's log the
 * engine set aside while the replica manager followed on a log of its
 * own, cluster/replica.c): its segments' sizes and its record counts are
 * stale, so the close writes, syncs and truncates nothing (tn_plog_close
 * trims the preallocated tail of what it takes for the last segment,
 * which would cut the other object's records). Otherwise as
 * tn_plog_close. */
void tn_plog_abandon(tn_plog_t *plog, tn_plog_cb cb);

/* Append n >= 1 records as one atomic batch. Returns 0 when queued (cb will
 * run on the loop thread with the final status), or at once: UV_EINVAL (no
 * records), TN_ETOOBIG (a body or key over its limit), TN_EDISKHIGH (disk
 * above the high watermark), the log's sticky error, TN_ECLOSED, UV_ENOMEM.
 * recs and the bytes they point to are borrowed until cb runs. */
int tn_plog_append(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                   tn_append_cb cb);

/* tn_plog_append, with the first ncontrol (<= n) records written as
 * control records (TN_REC_F_CONTROL; each body a control body, record.h:
 * a PRODUCER record ahead of a forwarded batch, in the same atomic batch).
 * UV_EINVAL when ncontrol > n or a control body is empty. */
int tn_plog_append_ex(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                      uint32_t ncontrol, tn_append_cb cb);

/* Read the record at offset into scratch (rec points into it). Verifies
 * the CRC; a mismatch makes the log's error sticky. Returns 0,
 * TN_ENOTFOUND (below the first stored offset or at/after written_next),
 * TN_EGAP, TN_ECORRUPT or an I/O error. Any thread. */
int tn_plog_read(tn_plog_t *plog, uint64_t offset, tn_buf_t *scratch, tn_rec_t *rec);

/* Where a gap left by tn_plog_advance that holds offset ends: the first
 * offset at or above it that was assigned a record, or written_next when
 * none was; offset itself when it is not in a gap (a record, below the
 * first stored offset, or at or past written_next). Any thread. */
uint64_t tn_plog_gap_end(tn_plog_t *plog, uint64_t offset);

/* The bytes the log stores at or past offset (all of them for an offset
 * at or below its start): exact at a segment's bounds, within a sparse
 * index interval inside one (an estimate from the mean record size where
 * the index is not loaded, and in memory). For a copy's progress. Any
 * thread. */
uint64_t tn_plog_bytes_from(tn_plog_t *plog, uint64_t offset);

/* Positions and state (any thread). */
uint64_t tn_plog_written_next(tn_plog_t *plog);
uint64_t tn_plog_durable_next(tn_plog_t *plog);
uint64_t tn_plog_visible_next(tn_plog_t *plog);
int tn_plog_err(tn_plog_t *plog);
/* UV_ENOSPC or -EDQUOT while the last write round found the disk full
 * (its publishes failed, the log did not), 0 once a later one wrote. */
int tn_plog_nospace(tn_plog_t *plog);
void tn_plog_stats(tn_plog_t *plog, tn_plog_stats_t *out);

/* How many control records (TN_REC_F_CONTROL: epoch starts, PRODUCER
 * marks; they hold offsets but are not messages) the log holds below
 * offset, counting those retention dropped since (each sealed segment's
 * sidecar carries the count below it). Messages among the offsets
 * [a, b): (b - a) - (tn_plog_controls_below(b) - tn_plog_controls_below(a)).
 * Exact for any offset in the active segment (and in the one sealed
 * before it while the log stays open), at any segment's bounds, at the
 * drop floor and past the log end; inside an older sealed segment it is
 * the count below that segment's base. Counted from offset 0, or
 * for a log copied from a leader's first offset (a follower's reset) or
 * opened from TNI1 sidecars, from its oldest segment then. 0 for memory
 * logs and factor-1 partitions (which never hold one). Any thread. */
uint64_t tn_plog_controls_below(tn_plog_t *plog, uint64_t offset);

/* How many control records in [from, to) are not passed by settled
 * (called with arg and the offset; may be NULL: none is): a channel's
 * count of the control records it has not settled yet. Where the range
 * lies in a segment whose control offsets are not listed (see
 * tn_plog_controls_below), settled is not asked and every control record
 * there counts. settled runs under the log's lock: it must not call the
 * log. Any thread. */
uint64_t tn_plog_controls_in(tn_plog_t *plog, uint64_t from, uint64_t to,
                             bool (*settled)(const void *arg, uint64_t offset), const void *arg);

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

/* --- replication ---------------------------------------------------------
 *
 * A replicated partition (replication factor > 1) keeps its leader-epoch
 * history (storage/epochs.h) in the file `epochs` beside its segments. It
 * is loaded at open and repaired after recovery (entries past the log end
 * or below its start dropped). Factor-1 partitions never begin an epoch or
 * copy one, and so never get the file: their format is unchanged. A copy
 * gets it with its first fetched records, empty when they carry no epoch
 * (a factor-1 partition's records below its first epoch, copied by its
 * move), so that a copy is known for one at its next start. */

/* The epoch-end answer of the local log (the tn_repl_epoch_end_cb shape):
 * for epoch, the largest epoch E <= epoch the history holds in *found and
 * where E ends in this log (the next entry's start, or written_next for the
 * latest) in *end. An epoch above the latest: *found = latest,
 * *end = written_next. An epoch below every entry: *found = 0, *end = the
 * first entry's start (where the history, and so the log's records, start:
 * retention trims both); an empty history: 0 and 0. 0, or the log's
 * sticky error. Any thread. */
int tn_plog_epoch_end(tn_plog_t *pl, uint32_t epoch, uint32_t *found, uint64_t *end);
/* The same with the log as a void *: a tn_repl_epoch_end_cb to hand to
 * tn_repl_config_t (epoch_end_arg = the tn_plog_t). */
int tn_plog_epoch_end_cb(void *plog, uint32_t epoch, uint32_t *found, uint64_t *end);

/* Whether the log is a replicated partition's copy, whose offsets are its
 * leader's: it has an `epochs` file (written by its first epoch as a
 * leader, or by the first records it copied, empty when they precede
 * every epoch). Any thread. */
bool tn_plog_is_replica(tn_plog_t *pl);

/* Mark a log its replica manager has just opened as a replicated
 * partition's copy: its epochs file is written, empty, when it has none,
 * durably, so that a copy that holds its leader's channel state before
 * any of its records is known for one at its next start. 0 (also for a
 * memory log, or one already marked or isolated), or the write's error,
 * which is the log's sticky error too. On the opening thread, before any
 * request on the log. */
int tn_plog_mark_replica(tn_plog_t *pl);

/* The epoch of the record at written_next - 1, 0 when the log is empty or
 * the history has no entry covering it. Any thread. */
uint32_t tn_plog_last_epoch(tn_plog_t *pl);

/* Copy into out (at most max) the history entries that cover [from, to),
 * oldest first, the first one's start raised to from: what a follower
 * copying records [from, to) records with them. Returns how many were
 * written. Any thread. */
uint32_t tn_plog_epochs_range(tn_plog_t *pl, uint64_t from, uint64_t to, tn_epoch_entry_t *out,
                              uint32_t max);

/* The leader's first write in a new leader epoch: on the committer
 * thread, in order with the appends queued before it, assign epoch at the
 * log end and save the epochs file (durably), then append one EPOCH_START
 * control record. Completes like an append (the mode's durability
 * boundary, and the hw when gated) with req->first_offset = the record's
 * offset. 0 when queued, or at once: UV_EINVAL (epoch 0 or a memory log),
 * TN_ECLOSED, the sticky error, TN_EDISKHIGH. At run time TN_ERANGE when
 * epoch is not above the history's latest epoch (nothing written). Loop
 * thread. */
int tn_plog_begin_epoch(tn_plog_t *pl, tn_append_t *req, uint32_t epoch, tn_append_cb cb);

/* A follower's copy of the leader's records: bytes[0..len) are TNR1
 * records back to back as tn_plog_read_raw returned them (whole atomic
 * batches), the first at first_offset, offsets dense. Checked at once
 * (magic, header, CRC, density, batches complete): TN_ECORRUPT when not;
 * the epochs must be ordered and start within the run (as
 * tn_plog_epochs_range gives them), else TN_ECORRUPT too;
 * the bytes are copied, so they are borrowed only for the call. On the
 * committer thread, in order: first_offset must equal the next offset of
 * the log then (else TN_ERANGE, nothing written); the epochs (copied;
 * entries the history already has are no change) are assigned and the
 * file saved before the records are written; each record's sync_mark is
 * re-encoded for the local segment (CRC recomputed); publish_ns and
 * deliver_at_ms are kept. Completes once WRITTEN, whatever the mode (the
 * follower fetches again at once and reports durability by watching
 * durable_next / on_progress), and never waits for the hw gate. len 0 is
 * UV_EINVAL. Loop thread. */
int tn_plog_append_raw(tn_plog_t *pl, tn_append_t *req, const void *bytes, size_t len,
                       uint64_t first_offset, const tn_epoch_entry_t *epochs, uint32_t nepochs,
                       tn_append_cb cb);

/* The leader's read for a follower: append to out the records from offset
 * from on, whole atomic batches only, as stored (TNR1 records back to
 * back; sync_mark is this log's), stopping before max_bytes would be
 * passed, at written_next, or at a gap; at least one whole batch when
 * from < written_next, even when it alone is larger than max_bytes. Each
 * record's CRC is verified (a mismatch makes the log's error sticky).
 * *count = records read (0 at the log end). Returns 0, TN_ENOTFOUND
 * (from below the first stored offset, or above written_next), TN_EGAP
 * (from falls in a gap), TN_ECORRUPT, UV_ENOMEM or an I/O error. Reads
 * the segment files: blocking, call from a worker thread, never from the
 * loop thread, except for records written moments ago (still in the page
 * cache: the replica manager's answer to a fetch that waited at the log
 * end). Any thread. */
int tn_plog_read_raw(tn_plog_t *pl, uint64_t from, size_t max_bytes, tn_buf_t *out,
                     uint32_t *count);

/* Crash-safe suffix truncation: remove every record at or above offset,
 * on the committer thread after the appends queued before it. Steps: the
 * positions move back to offset (readers get TN_ENOTFOUND above it), the
 * segments after the one holding offset are unlinked, newest first, and
 * the directory fsynced; the segment holding offset is
 * cut (ftruncate, its sidecar removed, fdatasync, directory fsync) and
 * becomes the active one; then the epochs history drops the entries
 * starting at or after offset and is saved. A crash at any point leaves
 * a log that reopens as either the old suffix or a shorter one, with
 * epochs agreeing after the open's repair. After it: written_next =
 * durable_next = offset, the hw is capped at offset. offset at or above
 * the next offset is no change (0). Refused at once with TN_ERANGE when
 * offset < floor (the hw: acknowledged records are never truncated), and
 * at run time with UV_EINVAL (nothing changed) when offset is inside an
 * atomic batch. An offset below the log's first stored offset empties it
 * and restarts it at offset (a follower's reset: the emptied first segment
 * is renamed to start there); a drop floor (tn_plog_drop_below) above
 * offset is lowered to it first. Memory logs: UV_EINVAL.
 * The caller must keep consumers off the truncated range: the queue
 * engine caches records above visible_next-at-fetch in its tail cache
 * (src/queue/cache.c) and its appended_next; a partition whose log is
 * truncated must be detached from the engine (a follower's is) or have
 * that cache dropped and appended_next reset before it serves again.
 * A cut that removed records is told to the store's cut watch
 * (tn_store_set_cut_watch) before cb, which may hold cb back until the
 * engine has made the cut durable on its side (a paused topic's pause
 * file: docs/cluster.md); a failure there fails the log (sticky) and cb
 * gets that error. Records go at the cut offsets only after cb. The log
 * is pinned (tn_plog_pin) from here until cb has run: a close asked
 * meanwhile waits for it.
 * 0 when queued, TN_ECLOSED, TN_ERANGE, UV_EINVAL. Loop thread. */
int tn_plog_truncate(tn_plog_t *pl, tn_plog_trunc_t *req, uint64_t offset, uint64_t floor,
                     tn_plog_trunc_cb cb);

/* tn_plog_truncate, except that an offset inside an atomic batch cuts at
 * the start of that batch instead of being refused: the batch goes whole.
 * That start below floor is refused at run time with TN_ERANGE (nothing
 * changed). req->cut_to tells where the log ends after it (status 0).
 * A follower's truncation to a divergence point (cluster/replica.c). */
int tn_plog_truncate_batch(tn_plog_t *pl, tn_plog_trunc_t *req, uint64_t offset, uint64_t floor,
                           tn_plog_trunc_cb cb);

/* tn_plog_damage's *end when the damaged segment is the active one (the
 * last): its records from base on, however many there are. */
#define TN_PLOG_DAMAGE_ACTIVE UINT64_MAX

/* Where the damage of an isolated log is, for a repair from another
 * replica: true when the sticky error is TN_ECORRUPT and it was found in
 * the records of a segment (by recovery, a read, tn_plog_read_raw or the
 * scrub); *base is that segment's base offset and *end the next segment's
 * (exclusive), or TN_PLOG_DAMAGE_ACTIVE when the segment is the last one
 * (tn_plog_repair_active). A segment that was active when its damage was
 * found and has been followed by another since is a sealed one here.
 * False otherwise (no damage, another error, damage in a sidecar or the
 * epochs file, or segments that overlap). Any thread. */
bool tn_plog_damage(tn_plog_t *pl, uint64_t *base, uint64_t *end);

/* For the repair of a damaged active segment at base: the epoch of the
 * record at base - 1 in this log's epoch history (loaded also when the log
 * opened isolated), which the leader checks against its own history before
 * it serves the copy (its log and this one agree below base only then);
 * 0 when the history does not cover base - 1 (base 0, or an empty
 * history). Any thread. */
uint32_t tn_plog_damage_prefix_epoch(tn_plog_t *pl, uint64_t base);

/* Record durably where this isolated log's damage is (tn_plog_damage):
 * the partition's `damage` file (docs/storage-format.md) holds the range,
 * and an open that finds it, with the segment [base, end) still there,
 * isolates the log for it again (TN_ECORRUPT, tn_plog_damage giving the
 * range) even when recovery would not see the damage (it trusts a valid
 * segment sidecar and does not re-read the records), until tn_plog_repair
 * replaces the segment, which removes the record. A record that no
 * segment matches at open (truncated or collected since) is dropped. On
 * the committer thread; cb with 0 once the file and its directory are
 * synced (also when the damage is gone by then, or the file already names
 * it, as tn__plog_found_damage leaves it for the active segment: nothing
 * written).
 * Refused at once: UV_EINVAL (a memory log, no range known, cb NULL),
 * TN_ECLOSED. */
int tn_plog_record_damage(tn_plog_t *pl, tn_plog_dmgrec_t *req, tn_plog_dmgrec_cb cb);

/* Replace the damaged segment [base, end) (tn_plog_damage) with a good
 * copy of its records, bytes[0..len) (TNR1 records back to back as
 * tn_plog_read_raw returns them: CRC-good, offsets dense from base, exactly
 * end - base of them, the last ending a batch; copied, so borrowed for the
 * call only), then re-open the log in place. On the committer thread,
 * crash-safely, in this order (docs/storage-format.md):
 *   1. write `<base>.repair` with the records (each sync_mark re-encoded
 *      for the new file), fdatasync it;
 *   2. copy the damaged `<base>.log` to `<base>.log.damaged.<wall ms>`
 *      (kept for the operator; never read again), fdatasync it, fsync the
 *      directory;
 *   3. unlink the sidecar `<base>.idx` (it describes the damaged file),
 *      fsync the directory;
 *   4. rename `<base>.repair` over `<base>.log`;
 *   5. fsync the directory;
 *   6. recover the partition's directory again, as tn_plog_open does, and
 *      swap what it found into this log object (segments, positions,
 *      epochs, floor, sticky error): callers keep their pointer.
 * A crash before step 4 leaves the damaged file in place (the log opens
 * isolated again, and a repair starts over; a leftover `.repair` file is
 * rewritten); after it, the good copy. No record is ever absent: the
 * offsets [base, end) are in one file or the other at every point. The
 * re-open may find more damage (another segment): the log stays isolated
 * with that one in tn_plog_damage. Refused at once: UV_EINVAL (a memory
 * log, len 0, no callback), TN_ECORRUPT (bytes not such a run, or not
 * end - base records), TN_ECLOSED; at run time UV_EINVAL when the log's
 * damage is no longer [base, end) (nothing changed). 0 when queued. Loop
 * thread; cb runs on it. Before it runs, the store's cut watch hears of
 * it with base (tn_store_set_cut_watch: the records from base on are
 * replaced by the leader's, which after an unclean election may be
 * others), and may hold it until the engine has made that durable on its
 * side (a paused topic's pause file: docs/cluster.md); a failure there
 * fails the repair with that error, nothing changed. The same for
 * tn_plog_repair_gap and tn_plog_repair_active (when the log holds
 * records from base on). */
int tn_plog_repair(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, uint64_t end,
                   const void *bytes, size_t len, tn_plog_repair_cb cb);

/* tn_plog_repair for a segment the leader's log ends with a gap: the copy
 * holds the records [base, base + n) (1 <= n <= end - base) and the
 * offsets [base + n, end) were never assigned (tn_plog_advance: the next
 * segment starts at end, after the gap), on the leader and so in this
 * copy, which a read there then answers TN_EGAP. The caller knows it from
 * the leader (its repair read's GAP answer, whose gap ends at or past
 * end). The same steps, crash outcomes and refusals, but TN_ECORRUPT only
 * for more than end - base records. req->recs_end is base + n. */
int tn_plog_repair_gap(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, uint64_t end,
                       const void *bytes, size_t len, tn_plog_repair_cb cb);

/* Replace the damaged ACTIVE segment at base (tn_plog_damage's end
 * TN_PLOG_DAMAGE_ACTIVE) with the leader's records from base on:
 * bytes[0..len) (as for tn_plog_repair, the first at base, n of them; len
 * 0: none, the segment is replaced by an empty one) and the leader's
 * epochs covering them (as tn_plog_epochs_range gives them for
 * [base, base + n): ordered, each starting in the run; copied). Whatever
 * this copy held from base on is dropped: records past base + n were
 * above the leader's hw, or are fetched again. On the committer thread,
 * crash-safely (docs/storage-format.md): 0. the damage record is written
 * (durable: until it goes, an open isolates the log again); 1-5 as
 * tn_plog_repair (`<base>.repair`, the damaged file kept as
 * `<base>.log.damaged.<wall ms>`, rename, directory fsync); 6. the epochs
 * file becomes this copy's entries starting below base followed by the
 * given ones (written atomically); 7. the damage record is removed and the
 * directory fsynced; 8. the log is recovered in place. A crash before 7
 * reopens the log isolated by the record, whatever files are in place,
 * and the repair starts over. The caller checks first that this log agrees
 * with the leader's below base (tn_plog_damage_prefix_epoch). req->end is
 * base + n. Refused at once: UV_EINVAL (a memory log, no callback, bytes
 * NULL with len > 0, epochs given for no records), TN_ECORRUPT (not such
 * a run, or epochs out of order or outside it), TN_ECLOSED, UV_ENOMEM; at
 * run time UV_EINVAL when the damage is not the active segment at base any
 * more, TN_ECORRUPT when the epochs file cannot be read (nothing changed
 * then, the log stays isolated). 0 when queued. Loop thread; cb on it. */
int tn_plog_repair_active(tn_plog_t *pl, tn_plog_repair_t *req, uint64_t base, const void *bytes,
                          size_t len, const tn_epoch_entry_t *epochs, uint32_t nepochs,
                          tn_plog_repair_cb cb);

/* Whether the log is isolated because its open found the `epochs` file
 * damaged (TN_ECORRUPT: a bad CRC, length, magic or order; not a file of
 * another version), alone or beside damage in the active segment (then
 * tn_plog_damage names that too, and the file is rebuilt first: the
 * segment's repair needs the history below it): tn_plog_rebuild_epochs
 * repairs it. Any thread. */
bool tn_plog_epochs_damaged(tn_plog_t *pl);

/* Rebuild a damaged epochs file (tn_plog_epochs_damaged) from the log's
 * own records: every EPOCH_START control record at offset o with epoch e
 * is the entry (e, o), as the leader of e recorded it before it wrote the
 * record (tn_plog_begin_epoch) and as every copy of its records carries
 * it; the records before the first one (its EPOCH_START dropped by
 * retention, or a copy restarted at a leader's log start) get
 * first_epoch, the leader's epoch of the log's first offset (0: not
 * known; then the rebuild needs the log to start with an EPOCH_START). On
 * the committer thread: every segment is read (each control record's CRC
 * checked), the file written atomically, then the log recovered in place.
 * With the active segment damaged too, only the records below it are read
 * (tn_plog_repair_active replaces the rest, with the leader's epochs), and
 * the log stays isolated by that segment.
 * A crash leaves the damaged file (the log opens isolated again and the
 * rebuild starts over) or the rebuilt one. req->end is the number of
 * entries. Refused at once: UV_EINVAL (a memory log, no callback),
 * TN_ECLOSED; at run time UV_EINVAL when the log is not isolated by a
 * damaged epochs file any more (or a sealed segment is damaged too),
 * TN_ERANGE when the log does not start
 * with an EPOCH_START and first_epoch is 0, TN_ECORRUPT when the records
 * cannot be read or their epochs do not rise (or first_epoch is not below
 * the first EPOCH_START's), all with nothing changed. 0 when queued. Loop
 * thread; cb on it. */
int tn_plog_rebuild_epochs(tn_plog_t *pl, tn_plog_repair_t *req, uint32_t first_epoch,
                           tn_plog_repair_cb cb);

/* The hw gate of a replicated leader (loop thread). While gated, an
 * append (tn_plog_append, tn_plog_begin_epoch) that its mode would
 * complete waits until tn_plog_set_hw covers its last record (hw > last
 * offset), then completes with 0, in offset order; visible_next is
 * min(what the mode allows, hw), so consumers see only committed records.
 * Errors complete at once. Turning the gate off completes every waiting
 * append (with 0) and lifts the cap. */
void tn_plog_set_gated(tn_plog_t *pl, bool on);
/* Move the hw (never back, and never past written_next: capped); completes
 * the waiting appends it covers and fires on_progress (on a later loop
 * turn) when it moved. */
void tn_plog_set_hw(tn_plog_t *pl, uint64_t hw);
/* Complete every append waiting for the hw with status (a resigned or
 * fenced leader: TN_EFENCED, TN_EREMOTE, ...). */
void tn_plog_fail_gated(tn_plog_t *pl, int status);
/* tn_plog_fail_gated for the appends of records only: an epoch-start
 * record keeps waiting (its leader serves once the hw passes it). A leader
 * whose ISR fell below min_insync fails its waiting publishes with it
 * (their records stay in the log, and are committed if the ISR grows
 * back). */
void tn_plog_fail_gated_records(tn_plog_t *pl, int status);
/* tn_plog_fail_gated, and every append that would wait for the hw later
 * (one still being written now) completes with status too, until the gate
 * is turned on again: the hw will never move (the replica manager closes).
 * Loop thread. */
void tn_plog_gate_shut(tn_plog_t *pl, int status);
/* The hw (any thread): 0 until set. */
uint64_t tn_plog_hw(tn_plog_t *pl);
/* Tell the store's replica watch (tn_store_set_repl_watch) of this log's
 * writes, flushes and hw moves from now on (on: true; false stops it).
 * Loop thread. */
void tn_plog_set_repl_watch(tn_plog_t *pl, bool on);

#ifdef TN_TEST
/* Stop the next tn_plog_truncate after step k (1: positions moved, 2:
 * later segments unlinked, 3: segment cut, 4: sidecar removed and synced;
 * 5: epochs truncated, not saved) as a crash would: the rest is skipped,
 * the request completes with UV_EIO and the log turns sticky. -1 (the
 * default) disarms. */
void tn__plog_trunc_stop_after(int k);
/* Stop the next tn_plog_repair after step k (1..5 above; 1..6 for
 * tn_plog_repair_active; 1 for tn_plog_rebuild_epochs: after the scan,
 * before the file is written) as a crash would: the rest is skipped and the
 * request completes with UV_EIO (the log stays isolated). -1 (the
 * default) disarms. */
void tn__plog_repair_stop_after(int k);
#endif

/* Internal to src/storage: memlog.c serves these for memory logs. */
int tn__memlog_append(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                      tn_append_cb cb);
int tn__memlog_read(tn_plog_t *plog, uint64_t offset, tn_buf_t *scratch, tn_rec_t *rec);
void tn__memlog_free(tn_plog_t *plog);
void tn__plog_round(tn__committer_t *c, tn__sreq_t *round);
int64_t tn__plog_tick(tn__committer_t *c, int64_t now_ns);
void tn__plog_committer_fini(tn__committer_t *c);
/* Damage found while the log runs (a read, the scrub) in the records of
 * the segment at base: isolate the log for it as recovery does (sticky
 * TN_ECORRUPT, errmsg "partition T/P: <what>: <err>", logged at error
 * level, tn_plog_damage giving the segment's range). When that segment is
 * the active one, the damage record (the `damage` file) is written and
 * synced first, before the isolation is seen: a restart must isolate the
 * log again, not cut the records from the bad one on as a torn tail. No-op
 * when the log already failed. Any thread but the loop's (it blocks on
 * disk); takes the log's locks. */
void tn__plog_found_damage(tn_plog_t *plog, uint64_t base, const char *fmt, ...) TN_PRINTF(3, 4);

#endif
