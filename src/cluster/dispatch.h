/* The dispatcher: moves what the ingress log (storage/ilog.h) accepted to
 * the partitions' owners, and advances the log's checkpoint past what they
 * made durable.
 *
 * DESIGN: a pass (run when the router accepted a record, when a commit
 * ended, and every 50 ms while something waits).
 *   1. Read: durable records past what it holds are read on a worker
 *      thread into a window of at most window_records records (and
 *      window_bytes bytes), in seq order.
 *   2. Route each waiting record from the local metastore replica: the
 *      owner of its (topic, partition). An owner that is dead, or alive
 *      and failing for 3 commits in a row (stuck), gets its unpinned
 *      records rerouted to the next partition, circularly, whose owner is
 *      alive and not stuck; a pinned record (a key or an explicit
 *      partition) waits for its partition's owner. A record whose topic the
 *      replica no longer has is dropped only once the replica is caught up
 *      and the leader confirmed it (tn_meta_confirm) and the topic is still
 *      absent; until then it waits. When the window is full, records
 *      waiting for a dead owner are parked: their copy is let go (the log
 *      keeps them) and so is every later record of their (topic,
 *      partition), so what waits holds up no other owner and a partition
 *      keeps its order; once the owner is alive again (or the topic is
 *      gone) they are read again, oldest first. The window tracks at most
 *      262,144 records from its oldest uncommitted one.
 *   3. Commit: per destination (topic, partition) one batch at a time, so
 *      a partition gets its records in seq order, at most max_inflight
 *      batches at once, each bounded in records and bytes (below the node
 *      RPC frame cap). This node's own partitions are published to the
 *      engine; the others go to their owner over node RPC (TN_OP_COMMIT,
 *      30 s budget). A failed batch goes back to waiting; its destination
 *      is retried after 1 s. A batch in flight to an owner the replica
 *      marks dead meanwhile is cancelled at the next pass (passes run
 *      every 50 ms while batches are in flight), so its records go back
 *      to waiting (step 2) at once instead of after the budget.
 *   4. Checkpoint: the first record not yet committed bounds it; the log
 *      persists it and removes the segments below (one checkpoint at a
 *      time, at most every 200 ms unless 4096 records wait for one, so
 *      its fsyncs stay out of most produces' rounds; a last one at a
 *      stop).
 * At-least-once: a crash (of this node, or a reply lost) after an owner
 * made a batch durable and before the checkpoint covered it commits it
 * again at the next pass or start: the owner then holds it twice.
 *
 * Threads: the loop thread (reads run on the libuv thread pool). */
#ifndef TN_CLUSTER_DISPATCH_H
#define TN_CLUSTER_DISPATCH_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "core/buf.h"
#include "meta/meta.h"
#include "queue/queue.h"
#include "storage/ilog.h"

typedef struct tn_dispatch_s tn_dispatch_t;

typedef struct {
    uv_loop_t *loop;
    tn_broker_t *broker;
    tn_meta_t *meta;
    tn_ilog_t *ilog;
    tn_rpc_t *rpc;
    uint64_t node_id;
    uint64_t commit_timeout_ms; /* 0 = 30000 */
    uint32_t window_records;    /* 0 = 4096 */
    size_t window_bytes;        /* 0 = 16 MiB */
    size_t batch_bytes;         /* one commit's records; 0 = 1 MiB (always below the frame cap) */
    uint32_t batch_records;     /* 0 = 1024 */
    unsigned max_inflight;      /* batches at once; 0 = 16 */
} tn_dispatch_opts_t;

int tn_dispatch_new(const tn_dispatch_opts_t *o, tn_dispatch_t **out);
/* A record was accepted (tn_router_opts_t.accepted): run a pass soon. */
void tn_dispatch_kick(void *d);
/* Stop: no new reads or commits; commits to other nodes are cancelled
 * (their records stay in the log for the next start). cb(arg) once
 * nothing of the dispatcher's is in flight; then tn_dispatch_free. */
void tn_dispatch_stop(tn_dispatch_t *d, void (*cb)(void *arg), void *arg);
void tn_dispatch_free(tn_dispatch_t *d);

typedef struct {
    uint64_t committed;      /* records their owner made durable */
    uint64_t committed_here; /* of them, published to this node's engine */
    uint64_t batches;
    uint64_t failures; /* batches that failed */
    uint64_t reroutes; /* records sent to another partition */
    uint64_t dropped;  /* records of a deleted topic */
    uint64_t window;   /* records read and not yet below the checkpoint */
} tn_dispatch_stats_t;
void tn_dispatch_stats(const tn_dispatch_t *d, tn_dispatch_stats_t *out);

/* Append the Prometheus text of the ingress log and the dispatcher
 * (records and bytes waiting, per destination node too; the oldest
 * record's age; dispatch latency; reroutes, drops, failures) to out. 0 or
 * UV_ENOMEM. */
int tn_dispatch_metrics_write(const tn_dispatch_t *d, tn_buf_t *out);

#endif
