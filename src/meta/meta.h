/* The metastore: the state machine of meta/state.h replicated with
 * libraft (libuv I/O, tern's TCP transport of meta/transport.h, with
 * mutual TLS when the certificate files are given), its log and snapshots in
 * <data>/meta/. A node with no Raft state bootstraps itself as the single
 * voter of a new cluster; a cluster of one runs the same code path as a
 * larger one.
 *
 * DESIGN: a metadata write.
 *   1. The door builds a command (meta/cmd.h) and proposes it
 *      (tn_meta_propose). Until this node is leader (right after start),
 *      proposals wait in order.
 *   2. libraft appends it to the log (fsynced) and commits it once a
 *      majority has it (a single voter: at once).
 *   3. Every replica applies it to its state in log order; on the
 *      proposing node the request's callback then runs with the state
 *      machine's answer (0, UV_EEXIST, TN_ENOTFOUND, UV_ENOTSUP for a
 *      command this build does not know).
 *
 * Ready (tn_meta_ready): a leader is known and everything in the log at
 * start has been applied, so reads from the local replica are current.
 *
 * Threads: the loop thread. */
#ifndef TN_META_META_H
#define TN_META_META_H

#include "core/platform.h"

#include "meta/cmd.h"
#include "meta/state.h"

#include <raft.h>
#include <uv.h>

typedef struct tn_meta_s tn_meta_t;
typedef struct tn_meta_req_s tn_meta_req_t;

/* status: the state machine's answer, or an error that kept the command
 * out of the log (TN_ECLOSED when the metastore closed first). */
typedef void (*tn_meta_cb)(tn_meta_req_t *req, int status);

/* Caller-owned; in use until cb. */
struct tn_meta_req_s {
    void *data;
    /* Private. */
    struct raft_apply apply;
    tn_meta_t *meta;
    tn_meta_cb cb;
    struct raft_buffer buf;
    tn_meta_req_t *next; /* waiting for leadership */
};

typedef struct {
    const char *dir;      /* the Raft directory (<data>/meta), created if missing */
    uint64_t node_id;     /* >= 1 */
    const char *address;  /* this node's Raft address, IPv4 host:port */
    unsigned election_ms; /* election timeout */
    unsigned heartbeat_ms;
    unsigned snapshot_threshold; /* log entries between snapshots */
    void (*on_ready)(void *arg); /* optional: once, when first ready */
    void *ready_arg;
    /* PEM files, borrowed for tn_meta_open: all three for Raft over mutual
     * TLS (peers must present a certificate signed by tls_ca), or none
     * for plaintext. */
    const char *tls_cert, *tls_key, *tls_ca;
} tn_meta_opts_t;

/* Open (and bootstrap when new) and start. On failure err has a line. */
int tn_meta_open(uv_loop_t *loop, const tn_meta_opts_t *o, tn_meta_t **out, char *err,
                 size_t errlen);
/* Propose c (copied). 0 (cb follows), UV_EINVAL (c does not encode),
 * TN_ECLOSED or UV_ENOMEM. */
int tn_meta_propose(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_cmd_t *c, tn_meta_cb cb);
/* The local replica, for reads. */
const tn_meta_state_t *tn_meta_state(const tn_meta_t *m);
bool tn_meta_ready(tn_meta_t *m);
/* Close: no more proposals, waiting ones get TN_ECLOSED; those already
 * handed to libraft get their answers first, and libraft is closed only
 * once it writes nothing (at most 3 s of waiting): libraft 0.15 corrupts
 * its in-memory log when raft_close fails two or more appends in flight
 * (the crash tern saw at raft_close; meta.c's settled() has the detail).
 * cb runs once libraft, its transport and every handle of theirs have
 * closed, and m is freed then. Also after tn_meta_stop. */
void tn_meta_close(tn_meta_t *m, void (*cb)(void *arg), void *arg);
/* Stop taking proposals (waiting ones get TN_ECLOSED) without closing
 * libraft yet: for a start that fails part way, so the metastore does not
 * come up while the rest closes. tn_meta_close follows. */
void tn_meta_stop(tn_meta_t *m);

#endif
