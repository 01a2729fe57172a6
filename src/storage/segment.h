/* Segment files: the pieces of a partition log.
 *
 * A segment is `<base>.log`, base being the offset of its first record as
 * 20 decimal digits, holding records back to back (record.h). When sealed it
 * gets a sidecar `<base>.idx`, written atomically after the segment's data
 * is durable, so that opening a partition reads one small header per sealed
 * segment instead of scanning its records:
 *
 *   0  u32 magic "TNI2" ("TNI1": an older sidecar, still read)
 *   4  u32 crc32c over bytes 8..H (H: 80 for TNI2, 64 for TNI1)
 *   8  u64 base offset
 *  16  u64 record count
 *  24  u64 segment length in bytes (must equal the .log file's length)
 *  32  i64 first publish_ns
 *  40  i64 last publish_ns (the newest record; drives age retention)
 *  48  u32 entry count
 *  52  u32 crc32c over the entries
 *  56  u64 reserved, 0
 *  64  u64 control records of the partition below base (TNI2 only)
 *  72  u64 control records in this segment (TNI2 only)
 *   H  entries: { u32 offset - base, u32 byte position } each
 *
 * The entries form a sparse index (one per index-interval bytes of log),
 * loaded only when a reader first needs the segment. The two control
 * counts (TN_REC_F_CONTROL records: epoch starts, PRODUCER marks, which
 * hold offsets but are not messages) let the log count messages without
 * reading its records (plog.h, tn_plog_controls_below); a TNI1 sidecar
 * does not have them, and the log counts that segment's control records
 * itself when it may hold any.
 *
 * Ownership and threads: a tn_seg_t belongs to its partition log. Its size,
 * count and index change only on the log's commit thread, under the log's
 * lock; readers copy what they need under that lock and read the file
 * without it, holding a reference so the segment outlives a concurrent GC. */
#ifndef TN_STORAGE_SEGMENT_H
#define TN_STORAGE_SEGMENT_H

#include "core/platform.h"

#include "core/buf.h"
#include "storage/record.h"

#include <stdatomic.h>

#define TN_SEG_IDX_HDR    80          /* TNI2 */
#define TN_SEG_IDX_HDR_V1 64          /* TNI1 */
#define TN_SEG_IDX_MAGIC  0x32494E54u /* "TNI2" */
#define TN_SEG_IDX_MAGIC1 0x31494E54u /* "TNI1" */

/* A sidecar's header size by its magic; 0 when it is neither. */
static inline size_t tn_seg_idx_hdr_size(uint32_t magic)
{
    return magic == TN_SEG_IDX_MAGIC    ? TN_SEG_IDX_HDR
           : magic == TN_SEG_IDX_MAGIC1 ? TN_SEG_IDX_HDR_V1
                                        : 0;
}

typedef struct {
    uint32_t rel; /* offset - base */
    uint32_t pos; /* byte position of that record */
} tn_ient_t;

typedef struct tn_seg_s {
    uint64_t base;
    uint64_t count;   /* records */
    uint64_t size;    /* valid bytes */
    uint64_t synced;  /* bytes known durable */
    uint64_t alloc;   /* file size: valid bytes plus zeroed space ahead of them */
    int64_t first_ns; /* publish time of the first record, 0 if empty */
    int64_t last_ns;  /* newest publish time, 0 if empty */
    int fd;
    bool sealed;
    bool idx_loaded;
    atomic_uint refs;
    tn_ient_t *idx;
    uint32_t nidx;
    uint32_t idx_cap;
    uint64_t idx_next_pos; /* add an index entry at or after this position */
    char *path;            /* <dir>/<base>.log */
    /* Control records (TN_REC_F_CONTROL). ctl_base: how many the partition
     * holds below base (as far as its log knows: counted from its oldest
     * segment when it was made, or from offset 0); nctl: how many this
     * segment holds; ctl_known: nctl is known (false only for a TNI1
     * sidecar until the log counts). ctl_offs: their offsets, ascending,
     * when ctl_listed (the active segment and the one before it: the
     * partition log keeps them for counting up to any offset there).
     * Changed under the log's lock. */
    uint64_t ctl_base;
    uint64_t nctl;
    bool ctl_known;
    bool ctl_listed;
    uint64_t *ctl_offs;
    uint32_t nctl_offs;
    uint32_t ctl_offs_cap;
} tn_seg_t;

/* What a scan found. */
typedef struct {
    uint64_t count;     /* whole records (complete batches) */
    uint64_t valid_len; /* bytes they span */
    int64_t first_ns;
    int64_t last_ns;
    uint64_t max_sync_mark;
    int tail;            /* 0: clean end; TN_ESHORT: torn; TN_ECORRUPT: bad data */
    uint64_t tail_pos;   /* where the problem starts */
    bool durable_damage; /* a later valid record proves tail_pos was durable */
    bool zero_tail;      /* every byte from tail_pos on is zero: space written ahead */
    uint64_t ncontrol;   /* control records among the whole records counted */
} tn_seg_scan_t;

/* Format the file name of a segment ("%020llu.log") into buf. */
void tn_seg_name(uint64_t base, const char *ext, char *buf, size_t len);
/* Parse "<20 digits>.log"; false if name is not a segment name. */
bool tn_seg_parse_name(const char *name, uint64_t *base);

/* Storage-internal (the partition log's and the ingress log's recovery):
 * the bases of the segment files in dir, ascending, in *bases (allocated
 * with tn_malloc; the caller frees it with tn_free; NULL when *n is 0).
 * On the way it removes every "*.tmp" file there: an atomic write (a
 * sidecar, a checkpoint) that never reached its rename. dir is borrowed.
 * 0, or opendir's error, or UV_ENOMEM (then *bases is NULL). */
int tn__seg_list(const char *dir, uint64_t **bases, size_t *n);
/* tn__seg_list without the removal: a read-only look at dir (the probe of
 * a backup's copy, tn_plog_probe), the same answers and errors. */
int tn__seg_bases(const char *dir, uint64_t **bases, size_t *n);

/* A new segment object for path (copied), with one reference, not open. */
int tn_seg_new(const char *path, uint64_t base, tn_seg_t **out);
/* Drop a reference; the last one closes the file and frees. */
void tn_seg_unref(tn_seg_t *seg);
static inline void tn_seg_ref(tn_seg_t *seg)
{
    atomic_fetch_add(&seg->refs, 1);
}

/* Scan the records of fd (file_size bytes) that should start at offset
 * base. Builds seg's sparse index as it goes when seg is not NULL, and
 * its list of control record offsets (seg->ctl_offs, ctl_listed). Reads
 * with the shim; returns 0 (and fills out, including a torn or corrupt
 * tail) or an I/O error. */
int tn_seg_scan(int fd, uint64_t file_size, uint64_t base, uint32_t interval, tn_seg_t *seg,
                tn_seg_scan_t *out);

/* Add an index entry for a record at pos when the interval says so. Call
 * with the log's lock held. 0 or UV_ENOMEM. */
int tn_seg_index_note(tn_seg_t *seg, uint64_t offset, uint64_t pos, uint32_t interval);

/* Note a control record at offset in seg's count and, when listed, its
 * list. Call with the log's lock held. 0 or UV_ENOMEM (the list is then
 * dropped: ctl_listed false; the count stays right). */
int tn_seg_ctl_note(tn_seg_t *seg, uint64_t offset);
/* Forget seg's list of control offsets (its count stays). */
void tn_seg_ctl_unlist(tn_seg_t *seg);
/* Control records of seg below offset (base <= offset <= base + count)
 * from its list; seg must be listed. */
uint64_t tn_seg_ctl_below(const tn_seg_t *seg, uint64_t offset);

/* Write seg's sidecar (TNI2, with ctl_base and nctl) atomically in dir.
 * The segment's data must already be durable. */
int tn_seg_index_write(const tn_seg_t *seg, const char *dir);

/* Read and check a sidecar header against file_size; fills count, size
 * and times, and for TNI2 ctl_base and nctl (ctl_known; a TNI1 leaves
 * ctl_known false and ctl_base 0). 0, UV_ENOENT or TN_ECORRUPT. */
int tn_seg_index_open(tn_seg_t *seg, uint64_t file_size);

/* Load a sealed segment's index entries from its sidecar. */
int tn_seg_index_load(tn_seg_t *seg);

/* Position of the last index entry at or before offset (log lock held). */
uint64_t tn_seg_index_find(const tn_seg_t *seg, uint64_t offset);

/* Read the record at offset, scanning forward from byte position start and
 * never past limit. The record is decoded into scratch (reset first) and
 * rec points into it. 0, TN_ECORRUPT, TN_EGAP or an I/O error. */
int tn_seg_read_at(tn_seg_t *seg, uint64_t start, uint64_t limit, uint64_t offset,
                   tn_buf_t *scratch, tn_rec_t *rec);

#endif
