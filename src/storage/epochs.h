/* The leader-epoch history of one partition replica: which leader epoch
 * wrote which range of the log, as an ordered list of (epoch, start offset)
 * entries, kept in the file `epochs` beside the partition's segments.
 *
 * Replication (KIP-101/279/320 in Kafka's terms) needs two answers from it:
 * the leader tells a follower where one of the follower's epochs ends in the
 * leader's log (tn_epochs_end_offset_for), and the follower turns that
 * answer into the offset to truncate its own log to, or into another
 * question (tn_epochs_follower_step). Both are pure: no I/O, no clock, no
 * allocation, so a simulation can drive them.
 *
 * DESIGN.
 *   Invariants of a history (checked on load, kept by every mutation):
 *     1. Epochs strictly increase and start offsets strictly increase.
 *     2. An entry covers [start, next entry's start), the last one
 *        [start, log end). A leader adds its epoch at its log end when it
 *        is elected, before it writes anything (Kafka PR #5678), so the last
 *        entry may cover nothing yet.
 *     3. Assigning a higher epoch at the start offset of the latest entry
 *        replaces that entry: the latest leader wrote nothing in its epoch,
 *        so no record carries it and no follower can ask about a range of
 *        it. Without the replacement the order would not be strict and
 *        "the end of epoch E" would be ambiguous.
 *   Persisting: tn_epochs_save writes `epochs.tmp`, fdatasyncs it, renames
 *   it over `epochs` and fsyncs the directory (tn_io_write_file_atomic). A
 *   crash leaves either the old file or the new one; a leftover
 *   `epochs.tmp` is removed by the partition's recovery, as every `.tmp`.
 *   Order against the log (what a crash between the two steps leaves must
 *   still be a history the log agrees with):
 *     - a new epoch: assign and save before writing its first record, so
 *       no record on disk carries an epoch the file lacks;
 *     - a suffix truncation: truncate the log durably first, then
 *       truncate_from_end and save; the other order could leave records of
 *       a dropped epoch counted as the previous epoch's, which the follower
 *       rule would then keep;
 *     - retention: drop the segments, then truncate_from_start and save
 *       (either order is harmless).
 *   After a restart the caller repairs what a crash between the steps left
 *   once the log is recovered: tn_epochs_truncate_from_end(h, log_end)
 *   and tn_epochs_truncate_from_start(h, log_start), as Kafka does. That
 *   also drops a leader's entry at its log end (invariant 2); a restarted
 *   replica leads again only in a newly elected epoch, which it records
 *   then.
 *   Failures: a file with a bad magic, length, CRC or order is
 *   TN_ECORRUPT, a good file of another version TN_EFORMAT; the caller
 *   isolates the partition as it does for any other damage.
 *
 * Threads: a history is a plain value owned by one thread at a time. The
 * load and save functions do blocking file I/O and run on storage threads,
 * never on the loop thread; the others touch memory only. */
#ifndef TN_STORAGE_EPOCHS_H
#define TN_STORAGE_EPOCHS_H

#include "core/platform.h"

#include "core/buf.h"

/* The file's name in the partition directory. */
#define TN_EPOCHS_FILE "epochs"
/* The most entries a history holds (one per leader change that wrote
 * something and is still within retention); the file is then 12 MiB. */
#define TN_EPOCHS_MAX (1u << 20)
/* "No such epoch / offset" in an answer (Kafka's UNDEFINED_EPOCH and
 * UNDEFINED_EPOCH_OFFSET). */
#define TN_EPOCHS_UNDEFINED        UINT32_MAX
#define TN_EPOCHS_UNDEFINED_OFFSET UINT64_MAX

typedef struct {
    uint32_t epoch;
    uint64_t start; /* offset of the epoch's first record */
} tn_epoch_entry_t;

typedef struct tn_epochs_s {
    tn_epoch_entry_t *entries; /* n entries, invariants 1-3 above */
    uint32_t n;
    uint32_t cap;
    char errmsg[512]; /* why the last failing call failed */
} tn_epochs_t;

/* An empty history (caller-owned memory). */
void tn_epochs_init(tn_epochs_t *h);
void tn_epochs_fini(tn_epochs_t *h);

/* The latest epoch, or TN_EPOCHS_UNDEFINED when the history is empty. */
uint32_t tn_epochs_latest(const tn_epochs_t *h);

/* Record that epoch starts at start. A lower epoch, or a start below the
 * latest entry's, is TN_ERANGE (a leader would be writing under a stale
 * epoch, or into the past); the latest epoch again at or past its start is
 * no change (a follower calls this for every batch it copies); a higher
 * epoch at the latest entry's start replaces that entry (invariant 3).
 * *changed (may be NULL) says whether the history changed, i.e. whether it
 * needs saving. TN_ETOOBIG past TN_EPOCHS_MAX entries, UV_ENOMEM. */
int tn_epochs_assign(tn_epochs_t *h, uint32_t epoch, uint64_t start, bool *changed);

/* The log's suffix from offset on was truncated: drop every entry that
 * starts at or after offset. Returns whether anything was dropped. */
bool tn_epochs_truncate_from_end(tn_epochs_t *h, uint64_t offset);

/* Retention dropped the records below offset: drop the entries that end at
 * or below it and move the start of the one covering offset up to offset.
 * Entries that start past offset stay. Returns whether anything changed. */
bool tn_epochs_truncate_from_start(tn_epochs_t *h, uint64_t offset);

/* The leader's answer to a follower asking for the end of epoch requested
 * (Kafka's OffsetsForLeaderEpoch), given the leader's log end:
 *   - requested is the latest epoch: (latest, log_end);
 *   - otherwise the largest epoch E <= requested and the start offset of
 *     the entry after E's (where E's range ends), in *epoch_out and
 *     *end_out;
 *   - requested below the first entry, requested TN_EPOCHS_UNDEFINED, or
 *     an empty history: (TN_EPOCHS_UNDEFINED, TN_EPOCHS_UNDEFINED_OFFSET),
 *     return 0 ("undefined": the two logs share no epoch this history
 *     still knows);
 *   - requested above the latest epoch: TN_ERANGE and no answer. The asker
 *     has heard of a newer leader than this replica has (KIP-320): this
 *     replica is stale, and the caller answers "unknown epoch" / fenced.
 * log_end must be at least the latest entry's start. Pure. */
int tn_epochs_end_offset_for(const tn_epochs_t *h, uint64_t log_end, uint32_t requested,
                             uint32_t *epoch_out, uint64_t *end_out);

/* What a follower does with the leader's answer. */
typedef enum {
    /* Truncate the log to offset (nothing to do when it is the log end),
     * then fetch from there. */
    TN_EPOCHS_TRUNCATE,
    /* Ask the leader again, for epoch. */
    TN_EPOCHS_ASK_AGAIN,
    /* The two logs share no epoch either side still knows: discard the
     * whole log and fetch from the leader's log start. */
    TN_EPOCHS_RESET,
} tn_epochs_action_t;

typedef struct {
    tn_epochs_action_t action;
    uint32_t epoch;  /* TN_EPOCHS_ASK_AGAIN */
    uint64_t offset; /* TN_EPOCHS_TRUNCATE */
} tn_epochs_step_t;

/* The follower's next step after asking the leader for the end of epoch
 * asked (the follower's latest epoch first, then what a previous
 * TN_EPOCHS_ASK_AGAIN named) and getting (leader_epoch, leader_end) from
 * tn_epochs_end_offset_for on the leader. h and log_end are the
 * follower's own. The rule (KIP-279):
 *   1. An undefined answer: TN_EPOCHS_RESET.
 *   2. Otherwise let (F, F_end) be the follower's own answer for
 *      leader_epoch (tn_epochs_end_offset_for on h):
 *      a. F == leader_epoch: both logs hold that epoch, and an epoch has
 *         one leader, so they agree up to where it ends on the shorter
 *         side: TN_EPOCHS_TRUNCATE to min(leader_end, F_end).
 *      b. F < leader_epoch: the follower lacks the leader's epoch, so it
 *         cannot tell where they part inside it; TN_EPOCHS_ASK_AGAIN with F.
 *      c. F undefined: every epoch the follower has is newer than the
 *         leader's answer and unknown to the leader: TN_EPOCHS_RESET.
 * It converges: each TN_EPOCHS_ASK_AGAIN names an epoch of h strictly
 * below the one asked before (F < leader_epoch <= asked), so after at most
 * h->n rounds the answer is TRUNCATE or RESET. The caller starts over with
 * its latest epoch when the leader changes in between.
 * TN_EPROTO when the answer cannot come from a correct leader (an epoch
 * above asked, or a defined epoch with an undefined offset); TN_ERANGE
 * when asked is above the follower's own latest epoch; *out is written only
 * on success. An empty h (a replica with nothing yet) always resets. Pure. */
int tn_epochs_follower_step(const tn_epochs_t *h, uint64_t log_end, uint32_t asked,
                            uint32_t leader_epoch, uint64_t leader_end, tn_epochs_step_t *out);

/* The follower rule above run to its end against a leader's history, in
 * one call: where the follower's log (h, log_end) would be cut to agree
 * with the leader's (leader, leader_end), in *keep: the follower keeps
 * its records below *keep (log_end when nothing goes, 0 when it resets).
 * `ternctl restore` uses it to say how many records each copy of a
 * partition loses to the copy it chose to lead. 0, or
 * tn_epochs_end_offset_for's and tn_epochs_follower_step's errors
 * (TN_ERANGE: the follower holds an epoch newer than the leader's latest).
 * Pure. */
int tn_epochs_agree_end(const tn_epochs_t *leader, uint64_t leader_end, const tn_epochs_t *h,
                        uint64_t log_end, uint64_t *keep);

/* Append the file image of h to out (format in docs/storage-format.md).
 * UV_ENOMEM. */
int tn_epochs_encode(const tn_epochs_t *h, tn_buf_t *out);

/* Replace h's entries with those of the file image data[0..len) (borrowed).
 * TN_ECORRUPT (bad magic, length, CRC or order) or TN_EFORMAT (another
 * version) with h->errmsg saying what, leaving h unchanged; UV_ENOMEM. */
int tn_epochs_decode(tn_epochs_t *h, const void *data, size_t len);

/* Load dir/epochs into h (replacing its entries); a missing file is an
 * empty history. Errors as tn_epochs_decode, plus I/O errors; h->errmsg
 * names the file. Storage threads only. */
int tn_epochs_load(tn_epochs_t *h, const char *dir);

/* Write h to dir/epochs crash-safely (see DESIGN above). An I/O error
 * leaves the previous file in place; h->errmsg says what failed. Storage
 * threads only. */
int tn_epochs_save(tn_epochs_t *h, const char *dir);

#endif
