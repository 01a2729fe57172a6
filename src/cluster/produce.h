/* Produce through a node that does not lead the partition: PRODUCE, a
 * batch for a replicated partition (factor > 1) that another node took,
 * forwarded to the partition's leader; the leader's handler with its
 * duplicate window, and the caller's call.
 *
 * DESIGN: a forwarded produce (docs/replication.md, "Produce through a
 * non-leader").
 *   1. The router of the node that took the publish (the accepting node)
 *      gives the batch a seq, unique per accepting node, and calls
 *      tn_produce_call on the leader its metastore replica shows (produce
 *      lane), carrying the leader epoch it knows.
 *   2. The leader's handler decodes the request exactly, asks the accepts
 *      hook (rfetch's tn_replica_accepts) whether it leads the partition
 *      and takes produces, compares the epochs (an older one is fenced:
 *      409), then looks (node, seq) up in the partition's window:
 *      - stored (done): answers the first copy's first_offset, storing
 *        nothing;
 *      - being stored (pending): waits for the first copy's end and
 *        answers the same;
 *      - new: publishes one atomic batch, a PRODUCER control record
 *        (node, seq, count) followed by the records, pinned to the
 *        partition; the engine's hw gate completes it once the high
 *        watermark covers its last record.
 *   3. 200 {"first_offset":N} (N: the first record after the control
 *      record) leaves only from that completion. The accepting node
 *      completes its door's publish with it.
 *   4. Retries (the router's): a 421 naming another leader, a fenced
 *      epoch, or a lost answer (connection reset, timeout) go again with
 *      the SAME seq to whichever leader the metastore shows then, until
 *      the publish's deadline. A leader that stored the first copy
 *      answers from its window; a new leader rebuilt its window from the
 *      PRODUCER records of its log tail when it was promoted
 *      (tn_produce_server_rebuild_log), so a copy the old leader replicated
 *      before it died is found there too.
 * Invariant: per partition, a (node, seq) the window holds is stored at
 * most once; a 200 leaves only once the hw covers the batch.
 * Limits: the window keeps the last TN_PRODUCE_WINDOW seqs per accepting
 * node; a retry older than that (4096 newer batches from the same node in
 * between) would be stored again. A rebuild sees only the log tail it is
 * given.
 *
 * Threads: the loop thread (the broker's and the RPC endpoint's). */
#ifndef TN_CLUSTER_PRODUCE_H
#define TN_CLUSTER_PRODUCE_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "queue/queue.h"
#include "storage/record.h"

#include <uv.h>

/* A PRODUCE call (the caller side, below). */
typedef struct tn_produce_call_s tn_produce_call_t;
typedef void (*tn_produce_cb)(tn_produce_call_t *c, int status);

/* --- the PRODUCER control record's body ---------------------------------------------
 *
 * storage/record.h's TN_CTRL_PRODUCER: [1] kind 2, [8] node, [8] seq, [4]
 * count (little-endian, as record headers): the next count records of the
 * log came from the forwarded batch (node, seq). Written with
 * TN_REC_F_CONTROL, so consumers never see it. These wrap record.h's
 * codec, refusing any other kind or length. */

#define TN_PRODUCE_CTL_PRODUCER TN_CTRL_PRODUCER
#define TN_PRODUCE_CTL_LEN      TN_CTRL_PRODUCER_SIZE

void tn_produce_ctl_encode(uint8_t out[TN_PRODUCE_CTL_LEN], uint64_t node, uint64_t seq,
                           uint32_t count);
/* 0, or TN_EPROTO when body (borrowed) is not a PRODUCER body. */
int tn_produce_ctl_decode(const void *body, size_t len, uint64_t *node, uint64_t *seq,
                          uint32_t *count);

/* --- the window: (accepting node, seq) -> first_offset, per partition -------------- */

#define TN_PRODUCE_WINDOW 4096 /* seqs kept per accepting node */

typedef struct tn_produce_window_s tn_produce_window_t;
typedef struct tn_produce_wait_s tn_produce_wait_t;

/* A retry waiting for the first copy of its (node, seq): cb runs once,
 * with 0 and the first copy's first_offset, or the first copy's error.
 * Caller-owned, in use from tn_produce_window_begin until cb. */
typedef void (*tn_produce_wait_cb)(tn_produce_wait_t *w, int status, uint64_t first_offset);
struct tn_produce_wait_s {
    tn_produce_wait_cb cb;
    void *data;
    tn_produce_wait_t *next; /* private */
};

typedef enum {
    TN_PRODUCE_NEW = 0,     /* not seen: the caller stores it, then _complete */
    TN_PRODUCE_DONE = 1,    /* stored: *first_offset */
    TN_PRODUCE_PENDING = 2, /* being stored: wait queued, its cb answers */
} tn_produce_seen_t;

/* cap: seqs kept per accepting node (TN_PRODUCE_WINDOW; at least 1). 0 or
 * UV_ENOMEM. */
int tn_produce_window_new(uint32_t cap, tn_produce_window_t **out);
/* Pending waits are answered TN_ECLOSED first. */
void tn_produce_window_free(tn_produce_window_t *w);
/* Look (node, seq) up: a tn_produce_seen_t, or UV_ENOMEM (nothing
 * changed). NEW enters it as pending: the caller must end it with
 * tn_produce_window_complete. PENDING queues wait (not NULL). */
int tn_produce_window_begin(tn_produce_window_t *w, uint64_t node, uint64_t seq,
                            tn_produce_wait_t *wait, uint64_t *first_offset);
/* The first copy of (node, seq) ended: status 0 keeps first_offset for
 * later retries and answers the waits with it; an error forgets (node,
 * seq) (nothing acknowledged: a retry stores it) and answers the waits
 * with status. Unknown (node, seq): nothing. */
void tn_produce_window_complete(tn_produce_window_t *w, uint64_t node, uint64_t seq, int status,
                                uint64_t first_offset);
/* Enter (node, seq) as stored at first_offset (a PRODUCER record of the
 * log tail); one already there is left as it is. 0 or UV_ENOMEM. */
int tn_produce_window_note(tn_produce_window_t *w, uint64_t node, uint64_t seq,
                           uint64_t first_offset);
/* Forget everything, answering pending waits with status (a leader that
 * resigned: its appends failed). */
void tn_produce_window_clear(tn_produce_window_t *w, int status);
/* (node, seq) pairs held, pending ones included. */
size_t tn_produce_window_size(const tn_produce_window_t *w);
/* Enter the PRODUCER records found in raw (borrowed): records encoded as
 * in a segment (storage/record.h), back to back, as tn_plog_read_raw
 * gives them. A record that does not decode ends the scan. The count of
 * entries noted, or UV_ENOMEM. */
int tn_produce_window_scan(tn_produce_window_t *w, const void *raw, size_t len);

/* --- the leader side ---------------------------------------------------------------- */

/* Whether this node leads (topic, p) and takes produces (rfetch's
 * tn_replica_accepts): 0 with *leader_epoch; TN_EREMOTE; TN_EFEWREPLICAS;
 * another error (not serving yet). */
typedef int (*tn_produce_accepts_fn)(void *arg, const char *topic, uint32_t p,
                                     uint32_t *leader_epoch);
/* The leader of (topic, p) by this node's metastore replica (0: none):
 * named in a 421. */
typedef uint64_t (*tn_produce_leader_fn)(void *arg, const char *topic, uint32_t p);

typedef struct tn_produce_server_s tn_produce_server_t;

typedef struct {
    uv_loop_t *loop;
    tn_broker_t *broker; /* borrowed: outlives the server */
    /* NULL: a partition open here is accepted at epoch 0 (the engine
     * decides), as a factor-1 owner would. */
    tn_produce_accepts_fn accepts;
    void *accepts_arg;
    tn_produce_leader_fn leader; /* may be NULL */
    void *leader_arg;
} tn_produce_server_opts_t;

typedef struct {
    uint64_t produces;   /* answered 200 after storing */
    uint64_t records;    /* in those */
    uint64_t duplicates; /* answered 200 from the window */
    uint64_t refused;    /* answered 4xx */
    uint64_t failed;     /* answered 5xx */
    uint64_t inflight;
} tn_produce_stats_t;

int tn_produce_server_new(const tn_produce_server_opts_t *o, tn_produce_server_t **out);
/* Set the accepts hook once it exists (ternd: after the replica manager). */
void tn_produce_server_set_accepts(tn_produce_server_t *s, tn_produce_accepts_fn fn, void *arg);
#define TN_PRODUCE_HANDLERS 1
/* The handler (TN_OP_PRODUCE, under the commit bound), arg s. */
void tn_produce_server_handlers(tn_produce_server_t *s, tn_rpc_handler_t *out, size_t *n);
/* Serve the request fields req (borrowed for the call; as
 * tn_wire_produce_encode writes them) here, as the handler serves a
 * PRODUCE from another node: for a publish this node took while its
 * metastore names it the leader. 0: cb runs once, possibly before this
 * returns, with the status tn_produce_call's would have; UV_ENOMEM: cb
 * never runs. */
int tn_produce_local(tn_produce_server_t *s, const tn_buf_t *req, tn_produce_call_t *c,
                     tn_produce_cb cb);
/* This node became leader of (topic, p): rebuild its window from raw
 * (borrowed; the log tail as tn_plog_read_raw reads it). 0 or
 * UV_ENOMEM. */
int tn_produce_server_rebuild(tn_produce_server_t *s, const char *topic, uint32_t p,
                              const void *raw, size_t len);
/* The log tail a new leader scans for PRODUCER records: at most this
 * many records before its log end (and at most TN_PRODUCE_REBUILD_BYTES). */
#define TN_PRODUCE_REBUILD_RECORDS 65536
#define TN_PRODUCE_REBUILD_BYTES   (64u * 1024 * 1024)
/* This node became leader of (topic, p) with log pl (borrowed, pinned
 * until the read ends: tn_plog_pin, so a close the engine asks meanwhile,
 * its topic deleted, waits for it; loop thread): read the log's tail (the last
 * TN_PRODUCE_REBUILD_RECORDS records) on a worker thread and enter its
 * PRODUCER records into the partition's window. Until that ends, PRODUCE
 * for the partition answers 503 (retried by the caller), so no retry of
 * a batch the old leader stored slips past the window. The window is
 * emptied first (a new term). 0, or UV_ENOMEM / the worker queue's error
 * (the window then stays empty: at-least-once for retries of earlier
 * batches). */
int tn_produce_server_rebuild_log(tn_produce_server_t *s, const char *topic, uint32_t p,
                                  tn_plog_t *pl);
/* This node no longer leads (topic, p): its window goes, pending waits
 * answered status. */
void tn_produce_server_resign(tn_produce_server_t *s, const char *topic, uint32_t p, int status);
void tn_produce_server_stats(const tn_produce_server_t *s, tn_produce_stats_t *out);
/* After the RPC endpoint closed (no handler runs); running handlers keep
 * it until they answered. */
void tn_produce_server_free(tn_produce_server_t *s);

/* --- the caller side ---------------------------------------------------------------- */

/* The end of a call: 0, the batch is under the leader's hw from
 * c->first_offset on; TN_EREMOTE, the peer does not lead it (c->leader:
 * the member it names, 0 unknown); TN_EFENCED, the epoch sent is stale;
 * TN_EFEWREPLICAS, committed ISR below min_insync (do not retry);
 * UV_EAGAIN, the leader could not take it now (503: not serving yet,
 * storage error, shutting down); TN_ENOTFOUND, UV_ERANGE, TN_EDISKHIGH,
 * UV_EINVAL as COMMIT's; TN_EPROTO; or the call's error (rpc.h). */
struct tn_produce_call_s {
    void *data;
    uint64_t first_offset;
    uint64_t leader;
    uint16_t http_status;
    char error[256];
    /* Private. */
    tn_rpc_call_t *call;
    tn_produce_cb cb;
};

/* Decode a PRODUCE reply (borrowed) into c; the status as tn_produce_cb
 * gets it. For the call and the fuzz target. */
int tn_produce_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_produce_call_t *c);
/* Send the already encoded request fields req (borrowed; the opcode is
 * added) to peer_addr within timeout_ms. 0: cb runs once, later. Else
 * cb never runs: UV_EINVAL, TN_ETOOBIG, UV_ECONNREFUSED, TN_ECLOSED,
 * UV_ENOMEM. */
int tn_produce_call(tn_rpc_t *rpc, const char *peer_addr, const tn_buf_t *req, uint64_t timeout_ms,
                    tn_produce_call_t *c, tn_produce_cb cb);
/* Abandon c before its cb: cb runs with TN_ECLOSED. */
void tn_produce_call_cancel(tn_produce_call_t *c);

#endif
