/* The channel log: one channel's durable state on one partition, as a
 * checkpoint file plus a WAL, with group-committed records.
 *
 * A channel exists on disk exactly when its checkpoint exists. Creating
 * one truncates (or creates) its WAL and syncs it before writing the first
 * checkpoint, so the leftover WAL of a channel whose deletion crashed can
 * never replay into a new channel of the same name; deleting one removes
 * the checkpoint (and syncs the directory) before the WAL.
 *
 * A record (FIN, REQ, PAUSE, EMPTY, TIMEOUTS) completes on the loop thread
 * after the fdatasync that covers it. The WAL committer keeps its own
 * replica of the cursor, applying each record as it is written, and writes
 * a checkpoint (temp file, fsync, rename, directory fsync, then WAL
 * truncate and fsync) every checkpoint_every records, so replay at startup
 * stays short. The queue engine keeps the live state on the loop thread
 * and applies the same records there.
 *
 * Threads: open, submit, close and delete on the loop thread; records are
 * processed on the store's WAL committer thread. */
#ifndef TN_STORAGE_CHANLOG_H
#define TN_STORAGE_CHANLOG_H

#include "core/platform.h"

#include "storage/cursor.h"
#include "storage/store.h"

typedef struct tn_walop_s tn_walop_t;
typedef void (*tn_walop_cb)(tn_walop_t *op, int status);
typedef void (*tn_chanlog_cb)(tn_chanlog_t *cl);

/* A WAL record request: caller-owned, in use until its callback returns. */
struct tn_walop_s {
    tn__sreq_t s; /* private */
    void *data;
    tn_walrec_t rec;
    /* Private. */
    tn_chanlog_t *cl;
    tn_walop_cb cb;
    tn_walop_t *pnext;
    bool space_ok; /* TN_WALOP_SPACE_OK */
};

/* A full disk may fail this record alone (tn_chanlog_submit_ex). */
#define TN_WALOP_SPACE_OK 1u

/* The WAL committer's copy of the durable state (tn_chanlog_state):
 * caller-owned, in use until its callback returns. */
typedef struct tn_chanlog_state_s tn_chanlog_state_t;
typedef void (*tn_chanlog_state_cb)(tn_chanlog_state_t *req, int status);
struct tn_chanlog_state_s {
    tn__sreq_t s; /* private */
    void *data;
    tn_cursor_t cur; /* on success: the caller's (tn_cursor_fini) */
    /* Private. */
    tn_chanlog_t *cl;
    tn_chanlog_state_cb cb;
};

struct tn_chanlog_s {
    tn_store_t *store;
    char *dir;
    char *name;
    char *wal_path;
    atomic_int err;
    char errmsg[512];

    /* WAL committer thread (after open). */
    int fd;
    uint64_t wal_size;
    uint64_t synced;
    uint64_t alloc; /* WAL file size: wal_size plus zeroed space ahead */
    uint64_t next_seq;
    uint32_t since_ckpt;
    tn_cursor_t durable;
    tn_walop_t *rhead;
    tn_walop_t *rtail;
    tn_chanlog_t *rnext;
    bool in_round;
    atomic_uint_fast64_t checkpoints; /* any thread may read */

    /* Loop thread. */
    tn_chanlog_t *next_open;
    tn_chanlog_t *prev_open;
    tn__sreq_t close_req;
    tn_chanlog_cb close_cb;
    bool closing;
    uint64_t submitted; /* records queued (tn_chanlog_submit answered 0) */
    uint64_t completed; /* of those, records whose callback ran */
    void *data;
};

/* Open the channel `channel` of topic/partition, creating it from
 * `initial` (borrowed; NULL means frontier 0) when it has no checkpoint.
 * On success *state receives a copy of the recovered cursor (the caller
 * owns it: tn_cursor_fini). A torn WAL tail is truncated; a bad
 * checkpoint, a sequence gap or damage below the durable mark opens the
 * log isolated (tn_chanlog_err() != 0, errmsg says where) with *state at
 * the checkpoint. Returns an error only when no object could be made.
 * Blocks on disk: call at startup or from a worker thread. */
int tn_chanlog_open(tn_store_t *store, const char *topic, uint32_t partition, const char *channel,
                    const tn_cursor_t *initial, tn_chanlog_t **out, tn_cursor_t *state);

/* Queue one record. 0, or at once the sticky error, TN_ECLOSED or
 * UV_EINVAL (unknown op). cb runs on the loop thread after the fdatasync. */
int tn_chanlog_submit(tn_chanlog_t *cl, tn_walop_t *op, const tn_walrec_t *rec, tn_walop_cb cb);
/* The same with flags. TN_WALOP_SPACE_OK: when the WAL write of a round
 * whose records all have it finds the disk full (UV_ENOSPC, -EDQUOT),
 * those records fail with that error and the log stays usable (its
 * committer state and the WAL file as before the round); the caller must
 * then take back what it applied for them (tn_chanlog_state). Without
 * it, such a failure is sticky. */
int tn_chanlog_submit_ex(tn_chanlog_t *cl, tn_walop_t *op, const tn_walrec_t *rec, tn_walop_cb cb,
                         unsigned flags);
/* Loop thread: after every record queued so far, check that the WAL can
 * grow again (writes zeros ahead of it) and copy the state its records
 * made durable into req->cur. cb runs on the loop thread with 0, the
 * disk-full error (req->cur untouched), the sticky error, or UV_ENOMEM.
 * Returns 0, or TN_ECLOSED / the sticky error at once (cb not called). */
int tn_chanlog_state(tn_chanlog_t *cl, tn_chanlog_state_t *req, tn_chanlog_state_cb cb);

/* Loop thread: what tn_chanlog_submit would refuse rec with now (closing,
 * the log's sticky error, a record that does not encode), or 0. A caller
 * that changes state before submitting checks this first, so a refusal
 * leaves nothing changed for a retry to do again (the sticky error can
 * still come from the storage thread in between). */
int tn_chanlog_refuses(tn_chanlog_t *cl, const tn_walrec_t *rec);

int tn_chanlog_err(tn_chanlog_t *cl);

/* Loop thread: how many records were queued, and how many of them have
 * completed (their callback ran: written and synced, or failed, which
 * makes tn_chanlog_err() != 0, or for TN_WALOP_SPACE_OK records failed
 * alone on a full disk, answered as failed to whoever asked for them).
 * Records complete in the order they were queued, so every record queued
 * before a moment that did not fail is on disk once completed reaches
 * what submitted was then and the log has no error (api/backup.c waits
 * for that before copying a WAL). */
static inline uint64_t tn_chanlog_submitted(const tn_chanlog_t *cl)
{
    return cl->submitted;
}
static inline uint64_t tn_chanlog_completed(const tn_chanlog_t *cl)
{
    return cl->completed;
}

/* Close after queued records complete; cb (may be NULL) runs on the loop
 * thread before the memory is freed. */
void tn_chanlog_close(tn_chanlog_t *cl, tn_chanlog_cb cb);

/* Remove a closed channel's files: checkpoint, directory fsync, WAL. */
int tn_chanlog_delete(tn_store_t *store, const char *topic, uint32_t partition,
                      const char *channel);

/* Which of the channel's files are in topic/partition: *ckpt its
 * checkpoint (the channel exists there), *wal its WAL. Returns 0, or an
 * error other than the files' absence. Blocks on disk (a stat each). */
int tn_chanlog_probe(tn_store_t *store, const char *topic, uint32_t partition, const char *channel,
                     bool *ckpt, bool *wal);

/* Channels (names with a checkpoint) of one partition; cb borrows the name. */
typedef int (*tn_chanlog_list_cb)(void *arg, const char *channel);
int tn_chanlog_list(tn_store_t *store, const char *topic, uint32_t partition, tn_chanlog_list_cb cb,
                    void *arg);

/* Internal to src/storage. */
void tn__chanlog_round(tn__committer_t *c, tn__sreq_t *round);

#endif
