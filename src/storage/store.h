/* The store: one data directory and the storage threads that serve it.
 *
 * Layout under the data path (docs/storage-format.md has every byte):
 *
 *   FORMAT                       "tern-storage <version>\n"
 *   LOCK                         flock()ed by the running daemon; holds its pid
 *   topics/<topic>/<partition>/  one partition log: <base>.log segments,
 *                                <base>.idx sidecars, <channel>.wal and
 *                                <channel>.ckpt channel state
 *   meta/                        metastore (Raft log and snapshots)
 *   ingress/                     the ingress log (ilog.h)
 *   trash/                       deleted topics on their way out
 *   quarantine/<topic>.<p>.<tag>.<ms>/
 *                                a dropped replica's copy, out of the live
 *                                tree (tn_store_mark_dropped); never read
 *
 * The store owns two committer threads: one for partition log appends (and
 * segment rolls, GC, background syncs, the disk check), one for channel WAL
 * records and checkpoints. Their completions come back to the loop thread
 * on one list, with one eventfd write when the list was empty (the loop's
 * wake-up; a round's completions are one wake-up, whatever their number).
 * Not a uv_async_t: libuv 1.44's async makes a woken loop spin (up to 997
 * `pause`s, then sched_yield) until the sender's write(2) has returned,
 * ~5% of the loop's CPU at PUB x 8 (docs/performance.md, 2026-12-03).
 *
 * Busy-polling: while at least busy_poll_min publish appends are out and
 * the partition committer's rounds take no longer than busy_poll_ns on
 * average, the loop polls for their completions (a uv_idle_t, so the loop
 * keeps serving every other event) instead of sleeping until the eventfd
 * wakes it: each round's answers go out a wake-up sooner (~12 µs on a VM),
 * which is what a set of producers waiting on the same commits gains. It
 * stops when the appends drop below the minimum, after busy_poll_ns
 * without a submission or completion, or after four times that without a
 * completion (a stalled disk); a lone producer, or a disk slower than the
 * budget on average, never makes it poll. Nor does a round too long for
 * the appends waiting on it: polling costs the loop about a round's time
 * of CPU, shared by the appends it answers, so it polls only while the
 * average round divided by the appends out is at most busy_poll_cost_ns
 * (8 producers on a 350 µs sync would pay ~44 µs of CPU per message; the
 * default, 2 µs, lets 64 appends out poll for rounds of up to 128 µs).
 *
 * Thread safety: open/close and every tn_store_* call on the loop thread
 * that opened it, unless a function says otherwise. */
#ifndef TN_STORAGE_STORE_H
#define TN_STORAGE_STORE_H

#include "core/platform.h"

#include "core/config.h"
#include "core/hist.h"
#include "storage/commit.h"

#include <stdatomic.h>
#include <uv.h>

#define TN_STORE_FORMAT 1

typedef struct tn_plog_s tn_plog_t;

/* A cut the queue engine holds back (tn_store_set_cut_watch): the store's,
 * inside the truncation request; next and seq are the watcher's while it
 * holds it. */
typedef struct tn_store_cut_s tn_store_cut_t;
struct tn_store_cut_s {
    tn_store_cut_t *next;
    uint64_t seq;
    /* The store's: what tn_store_cut_done ends (storage/plog.c). */
    void (*done)(tn_store_cut_t *wait, int status);
};
typedef bool (*tn_store_cut_watch_cb)(void *arg, const char *topic, uint32_t partition,
                                      uint64_t cut, tn_store_cut_t *wait);

typedef struct tn_chanlog_s tn_chanlog_t;
typedef struct tn_ilog_s tn_ilog_t;
typedef void (*tn_store_close_cb)(tn_store_t *store);

/* Storage settings; tn_store_opts_from_config fills them from a config. */
typedef struct {
    const char *data_path; /* borrowed for tn_store_open; the store copies it */
    uint64_t segment_bytes;
    uint32_t index_interval;
    uint32_t max_body;
    int durability; /* tn_durability_t, default for new partitions */
    uint32_t commit_max_requests;
    uint64_t commit_max_bytes;
    int64_t commit_max_delay_ns;
    int64_t busy_poll_ns;      /* 0: the loop never busy-polls */
    uint32_t busy_poll_min;    /* publish appends out that start it */
    int64_t busy_poll_cost_ns; /* most average round time per append out; 0: no limit */
    uint64_t relaxed_sync_messages;
    uint64_t relaxed_sync_bytes;
    int64_t relaxed_sync_interval_ns;
    uint32_t wal_max_records;
    int64_t wal_max_delay_ns;
    uint32_t checkpoint_every;
    int disk_high_pct;
    int disk_low_pct;
    uint64_t disk_min_free;
    int64_t disk_check_interval_ns;
} tn_store_opts_t;

void tn_store_opts_from_config(tn_store_opts_t *o, const tn_config_t *cfg);

struct tn_store_s {
    uv_loop_t *loop;
    tn_store_opts_t opts;
    char *path;
    char *topics_path;
    int lock_fd;
    int wake_fd;    /* eventfd: written when done_head goes from empty to not */
    uv_poll_t wake; /* the loop's watcher of wake_fd */
    uv_mutex_t done_lock;
    /* The replica manager's watch (tn_store_set_repl_watch, loop thread). */
    void (*repl_cb)(void *arg, tn_plog_t *plog);
    void *repl_arg;
    /* The queue engine's watch of truncations (tn_store_set_cut_watch,
     * loop thread). */
    tn_store_cut_watch_cb cut_cb;
    void *cut_arg;
    tn__sreq_t *done_head;
    tn__sreq_t *done_tail;
    /* Busy-polling (loop thread only; see above). */
    uv_idle_t poll;
    uint32_t appends_out;    /* publish appends submitted, not completed */
    int64_t poll_until_ns;   /* stop polling at this time */
    int64_t progress_ns;     /* the last completion, or appends began to be out */
    int64_t poll_started_ns; /* 0 while not polling */
    uint64_t poll_ns_total;  /* time spent polling, for metrics */
    tn__committer_t logc;
    tn__committer_t walc;
    tn_hist_t fsync_hist;   /* fdatasync of partition logs (storage threads write it) */
    tn_hist_t walsync_hist; /* fdatasync of channel logs */
    atomic_bool disk_high;
    atomic_int disk_used_pct;
    atomic_uint_fast64_t disk_free;
    /* Open objects, for closing them with the store. Opens may run on
     * worker threads, so the lists are guarded by open_lock. */
    uv_mutex_t open_lock;
    tn_plog_t *plogs;
    tn_chanlog_t *chanlogs;
    tn_ilog_t *ilog; /* the ingress log, when open (at most one) */
    size_t closing;
    tn_store_close_cb close_cb;
    char errmsg[512];
    uint64_t quarantined; /* entries in quarantine/ (tn_store_quarantined) */
};

/* Quarantine of dropped copies (docs/storage-format.md "quarantine/").
 * A replicated partition's copy that the metastore dropped from its
 * replicas (a move, a decommission) is marked with a file `dropped` in its
 * directory (tag: a short word of [A-Za-z0-9], the partition epoch of the
 * drop); the next tn_store_open, before anything lists partitions, renames
 * every marked directory to quarantine/<topic>.<p>.<tag>.<wall ms>
 * (both directories fsynced), so it is never recovered nor served, and
 * never deleted; once nothing of the running node uses the copy any more,
 * it is moved sooner (tn_store_quarantine_dropped). dropped false takes
 * the mark away (the partition was given back to this node before the
 * move: it follows on its copy as before). 0 (also when the partition has
 * no directory here, or no mark to take away), or an I/O error.
 * Blocking: a worker thread. */
#define TN_STORE_DROPPED_FILE "dropped"
int tn_store_mark_dropped(const char *data_path, const char *topic, uint32_t p, bool dropped,
                          const char *tag);
/* Move the marked copy of partition p of topic to quarantine/ now, while
 * the node runs, as the next open would (the same rename, fsyncs and log
 * line): the caller has made sure nothing of this process holds it open
 * any more (cluster/replica.c, "quarantine marks"). Only a marked copy
 * moves: *moved (may be NULL) says whether it did; 0 also when the
 * partition has no directory here or no mark (taken away: it was given
 * back). A crash at any point leaves the marked copy in topics/ or the
 * moved one in quarantine/. An I/O error leaves the copy marked where it
 * is (the next open moves it). Blocking: a worker thread. */
int tn_store_quarantine_dropped(const char *data_path, const char *topic, uint32_t p, bool *moved);
/* Entries in quarantine/: what the last open found, after its sweep, plus
 * the copies moved since (tn_store_note_quarantined). */
static inline uint64_t tn_store_quarantined(const tn_store_t *store)
{
    return store->quarantined;
}
/* One more copy moved to quarantine/ by tn_store_quarantine_dropped.
 * Loop thread. */
static inline void tn_store_note_quarantined(tn_store_t *store)
{
    store->quarantined++;
}

/* Open (creating if needed) the data directory: take the lock, check or
 * write FORMAT, start the storage threads. On failure returns TN_ELOCKED,
 * TN_EFORMAT, TN_ECORRUPT or an I/O error and writes a line into err.
 * Copies opts. */
int tn_store_open(uv_loop_t *loop, const tn_store_opts_t *opts, tn_store_t **out, char *err,
                  size_t errlen);

/* Close every partition log and channel log still open, and the ingress
 * log (after their queued requests finish), stop the threads, release the lock, and call cb; the
 * store is freed after cb returns. */
void tn_store_close(tn_store_t *store, tn_store_close_cb cb);

/* The replica manager's watch over the logs it replicates: cb(arg, plog)
 * runs on the loop thread, on a later turn, after records were written
 * to, or made durable in, a log marked with tn_plog_set_repl_watch (and
 * when its hw moved). Positions are read by cb; several changes may be
 * told once. cb is also called at once, inside tn_plog_close, when such a
 * log starts closing (plog->closing true): the watcher lets go of it (its
 * memory is freed once the close completes). cb NULL turns it off. Loop
 * thread. */
void tn_store_set_repl_watch(tn_store_t *store, void (*cb)(void *arg, tn_plog_t *plog), void *arg);

/* The queue engine's watch over truncations: cb(arg, topic, partition,
 * cut, wait) runs on the loop thread when a tn_plog_truncate* of any log
 * of the store removed records (its positions moved back, whatever its
 * status), before the request's own cb, with the offset the log was cut
 * at (topic borrowed for the call). A damaged copy's repair
 * (tn_plog_repair, _gap, _active) of a log holding records from its base
 * on tells it too, with the base, before the repair changes any file: it
 * replaces those records with the leader's, or drops them, and runs only
 * once the watch is done (its failure then fails the repair, nothing
 * changed). Whoever asked for the cut (the replica
 * manager cuts a follower's copy at a divergence point, or empties it for
 * a reset: cluster/replica.c) and whichever log object of the partition
 * it ran on (the engine's, set aside, or the manager's own): the records
 * from cut on are others than the engine may have seen there, so a
 * paused topic's hold point comes down to it (queue/topic.c,
 * tn__topic_hold_cut).
 *
 * cb returns false when it has nothing to make durable first (the common
 * case: the topic is not paused): the request completes at once. True:
 * it keeps wait (owned by the store, inside the request) until what it
 * must write for the cut (the pause file with the lowered point) has
 * ended, then calls tn_store_cut_done(wait, status), exactly once (within
 * cb too, when that write cannot start), and only then does the request's
 * cb run; the log stays open meanwhile (it is pinned). The caller of the truncation appends at the
 * cut offsets only after its cb, so no record that arrives there can outlive a crash with the old
 * point in the file. cb NULL turns it off. Loop thread. */
void tn_store_set_cut_watch(tn_store_t *store, tn_store_cut_watch_cb cb, void *arg);

/* The end of a cut the watch held (above; storage/plog.c). For a
 * repair: status 0 runs it, else it fails with status, nothing changed.
 * For a truncation: status 0: the request's cb
 * runs with the truncation's own status. Else what had to be written for
 * the cut could not be: the log fails with status (a sticky error: it
 * refuses writes until a restart, so nothing lands at the cut offsets
 * that a restart would take with the old point) and the request's cb gets
 * the truncation's error, or status. Loop thread. */
void tn_store_cut_done(tn_store_cut_t *wait, int status);

/* Topics and partitions present on disk, for recovery at startup. The
 * callback borrows the name. Returns 0 or an I/O error. */
typedef int (*tn_store_topic_cb)(void *arg, const char *topic);
int tn_store_list_topics(tn_store_t *store, tn_store_topic_cb cb, void *arg);
typedef int (*tn_store_partition_cb)(void *arg, const char *topic, uint32_t partition);
int tn_store_list_partitions(tn_store_t *store, const char *topic, tn_store_partition_cb cb,
                             void *arg);
/* Whether name is a partition directory's: its index (at most
 * UINT32_MAX, decimal, no leading zero) into *p. */
bool tn_store_partition_name(const char *name, uint32_t *p);

/* A topic directory's stamp (`topics/<topic>/stamp`, storage-format.md):
 * the creation time (Unix ms, not 0) of the metastore record the topic was
 * made from, so a node that comes back after the topic was deleted and
 * made again under its name tells its old files from the new topic.
 * tn_store_topic_stamp_write replaces it atomically; with make_dir it
 * first makes the topic's directory (a topic whose first local partition
 * is about to be made), else a topic with no directory here is left
 * alone (0). tn_store_topic_stamp_read: 0 with *ms 0 when the topic has
 * no directory or no stamp (made before stamps, or a lone node's);
 * TN_ECORRUPT when the file is not a stamp (size, magic, CRC, or 0).
 * Blocking: a worker thread (read: also before the loop runs). */
#define TN_STORE_STAMP_FILE "stamp"
int tn_store_topic_stamp_write(tn_store_t *store, const char *topic, int64_t ms, bool make_dir);
int tn_store_topic_stamp_read(tn_store_t *store, const char *topic, int64_t *ms);
/* The same write into topic_dir (an existing topic directory, named
 * whole), without a store: for `ternctl restore`. And the same read from
 * topic_dir (named whole): for a backup, which reads the stamp beside the
 * files it copies (api/backup.c) and in its copy. */
int tn_store_stamp_write_dir(const char *topic_dir, int64_t ms);
int tn_store_stamp_read_dir(const char *topic_dir, int64_t *ms);

/* A channel's stamp (`topics/<topic>/<channel>.cstamp`, storage-format.md):
 * the random id (not 0) of the metastore record (CHANNEL_PUT) the channel
 * was made from, so that a node which comes back after the channel was
 * deleted and made again under its name (its topic kept) tells its files
 * of the old channel from the new one. It is kept once per topic
 * directory, beside the partitions that hold the channel's logs.
 * tn_store_channel_stamp_write replaces it atomically, in an existing
 * topic directory only (none here: 0 with *written false; written may be
 * NULL); stamp 0 removes it (then fsyncs the directory), so that a stamp
 * left by a deleted channel is never taken for a new one's.
 * tn_store_channel_stamp_read: 0 with *stamp 0 when there is none (a
 * channel made by an earlier release, or a fan-out link's); TN_ECORRUPT
 * when the file is not a stamp (size, magic, CRC, or 0). Blocking: a
 * worker thread (read: also before the loop runs). */
#define TN_STORE_CHAN_STAMP_SUFFIX ".cstamp"
int tn_store_channel_stamp_write(tn_store_t *store, const char *topic, const char *channel,
                                 uint64_t stamp, bool *written);
int tn_store_channel_stamp_read(tn_store_t *store, const char *topic, const char *channel,
                                uint64_t *stamp);
/* The same write (stamp not 0) into topic_dir (an existing topic
 * directory, named whole), without a store: for `ternctl restore`. And
 * the same read from topic_dir (named whole): for a backup, which reads
 * the stamps beside the files it copies (api/backup.c) and in its copy. */
int tn_store_channel_stamp_write_dir(const char *topic_dir, const char *channel, uint64_t stamp);
int tn_store_channel_stamp_read_dir(const char *topic_dir, const char *channel, uint64_t *stamp);

/* A channel's pause on this node (`topics/<topic>/<channel>.cpause`,
 * storage-format.md): whether this node's channel is paused as a whole
 * (nsqd's /channel/pause is per node, docs/cluster.md). It is the node's,
 * not a partition's: the channel logs' PAUSE records travel with their
 * partition (a move, a follower's copy of its leader's state), so they
 * cannot say what this node was told. tn_store_channel_pause_write
 * replaces it atomically with paused (1 or 0), in an existing topic
 * directory only (none here: 0 with *written false; written may be NULL);
 * -1 removes it (then fsyncs the directory), so that a file left by a
 * deleted channel is never taken for a new one's.
 * tn_store_channel_pause_read: *paused 1 or 0, or -1 when there is none
 * (a channel never paused or unpaused since it was made, or one paused by
 * an earlier release); TN_ECORRUPT when the file is not one (size, magic,
 * CRC, or a value other than 0 and 1). Blocking: a worker thread (read:
 * also before the loop runs). */
#define TN_STORE_CHAN_PAUSE_SUFFIX ".cpause"
int tn_store_channel_pause_write(tn_store_t *store, const char *topic, const char *channel,
                                 int paused, bool *written);
int tn_store_channel_pause_read(tn_store_t *store, const char *topic, const char *channel,
                                int *paused);

/* A topic's pause on this node (`topics/<topic>/pause`, storage-format.md,
 * "Topic pause"): nsqd's /topic/pause, which nsqd keeps in its metadata
 * file, so a restart keeps it; per node, as the channel's. It holds
 * whether the topic is paused and, for each of its partitions, the hold
 * point: the offset from which what arrived is held at the topic
 * (queue.h, tn_part_t.hold). tn_store_topic_pause_write replaces it
 * atomically (temporary file, fsync, rename, directory fsync) with
 * paused and the n hold points holds (borrowed; n 0 when unpaused), in
 * an existing topic directory only (none here: 0 with *written false;
 * written may be NULL). tn_store_topic_pause_read: *paused 1 or 0, or -1
 * when there is none (a topic never paused, or an ephemeral one), and
 * *holds (transferred: tn_free; NULL when *n is 0) with its *n hold
 * points; TN_ECORRUPT when the file is not one (size, magic, CRC, a
 * paused value other than 0 and 1). Blocking: a worker thread (read:
 * also before the loop runs). */
#define TN_STORE_TOPIC_PAUSE_FILE      "pause"
#define TN_STORE_TOPIC_PAUSE_MAX_HOLDS 65536u
int tn_store_topic_pause_write(tn_store_t *store, const char *topic, bool paused,
                               const uint64_t *holds, uint32_t n, bool *written);
int tn_store_topic_pause_read(tn_store_t *store, const char *topic, int *paused, uint64_t **holds,
                              uint32_t *n);
/* Remove the topic's pause file, then fsync its directory (nothing when
 * there is none): a topic made here anew starts unpaused, and a file left
 * by an earlier one must not pause it at the next start. Blocking: a
 * worker thread. */
int tn_store_topic_pause_remove(tn_store_t *store, const char *topic);
/* Whether the topic directory topic_dir (named whole) holds a pause file
 * (the topic's or a channel's) and no partition directory: what a cluster
 * node's pause of a topic it holds no copy of makes (docs/cluster.md),
 * which the start does not load. false when it cannot be read. For a
 * backup (api/backup.c) and `ternctl restore`. Blocking. */
bool tn_store_dir_pause_only(const char *topic_dir);

/* Remove a topic's directory (its logs and channel logs closed): renamed
 * into trash/ (durably: the topic is gone from then on, even after a
 * crash), then deleted; a start clears what a crash left in trash/.
 * Blocks on disk: call from a worker thread. 0 or an I/O error. */
int tn_store_remove_topic(tn_store_t *store, const char *topic);

/* Whether disk usage is above the high watermark (any thread). */
static inline bool tn_store_disk_high(tn_store_t *store)
{
    return atomic_load_explicit(&store->disk_high, memory_order_relaxed);
}

/* Whether name is a valid topic or channel name for storage:
 * [A-Za-z0-9._-]{1,255}, and not "." or "..". */
bool tn_store_valid_name(const char *name);

/* Internal to src/storage. */
void tn__store_complete(tn_store_t *store, tn__sreq_t *head, tn__sreq_t *tail);
/* A publish append was submitted / completed (loop thread). */
void tn__store_append_out(tn_store_t *store);
void tn__store_append_back(tn_store_t *store);
/* A plog or chanlog finished closing (loop thread). */
void tn__store_closed_one(tn_store_t *store);

#endif
