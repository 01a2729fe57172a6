/* Writing a restored metastore (tn_meta_restore_write, meta.h): offline,
 * for `ternctl restore`, a Raft directory that starts from a backup's
 * snapshot. libraft's own uv I/O writes the files (its snapshot and
 * metadata formats are libraft's, and tern never writes them by hand), on
 * a loop of its own that runs only for this call.
 *
 * Why a snapshot at index 1: a node bootstrapping a cluster writes entry 1
 * (the configuration) and nothing else; a restored node instead finds the
 * snapshot (state and configuration at index 1, term 1) and term 1 in its
 * metadata, so libraft loads the state from it, the bootstrap at start is
 * refused as for any node with state, and every restored node of a
 * cluster, written from the same snapshot and voters, agrees on index 1.
 *
 * Threads: any; blocks. */
#include "core/platform.h"

#include "meta/meta.h"

#include "core/alloc.h"
#include "core/err.h"

#include <raft/uv.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int status; /* 1 while the request runs */
} wait_t;

static void on_put(struct raft_io_snapshot_put *req, int status)
{
    wait_t *w = req->data;
    w->status = status;
}

static void on_io_closed(struct raft_io *io)
{
    (void)io;
}

int tn_meta_restore_write(const char *dir, const void *snap, size_t len,
                          const tn_meta_peer_t *voters, size_t nvoters, uint64_t self_id, char *err,
                          size_t errlen)
{
    const char *self_addr = NULL;
    for (size_t i = 0; i < nvoters; i++)
        if (voters[i].id == self_id)
            self_addr = voters[i].raft_addr;
    if (self_addr == NULL) {
        tn_errbuf(err, errlen, "node %llu is not a voter of the backup's configuration",
                  (unsigned long long)self_id);
        return UV_EINVAL;
    }
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    int rc = 0;
    for (size_t i = 0; i < nvoters && rc == 0; i++)
        rc = raft_configuration_add(&conf, voters[i].id, voters[i].raft_addr, RAFT_VOTER);
    if (rc != 0) {
        raft_configuration_close(&conf);
        tn_errbuf(err, errlen, "metastore configuration: %s", raft_strerror(rc));
        return UV_EINVAL;
    }
    uv_loop_t loop;
    if ((rc = uv_loop_init(&loop)) != 0) {
        raft_configuration_close(&conf);
        tn_errbuf(err, errlen, "loop: %s", uv_strerror(rc));
        return rc;
    }
    struct raft_uv_transport tr;
    struct raft_io io;
    raft_term term = 0;
    raft_id voted_for = 0;
    struct raft_snapshot *found = NULL;
    raft_index start = 0;
    struct raft_entry *entries = NULL;
    size_t nentries = 0;
    memset(&tr, 0, sizeof(tr));
    memset(&io, 0, sizeof(io));
    int out = 0;
    if (raft_uv_tcp_init(&tr, &loop) != 0) {
        tn_errbuf(err, errlen, "metastore transport: cannot initialise");
        out = UV_EIO;
        goto err_after_loop;
    }
    if ((rc = raft_uv_init(&io, &loop, dir, &tr)) != 0) {
        tn_errbuf(err, errlen, "metastore %s: %s (%s)", dir, io.errmsg, raft_strerror(rc));
        out = UV_EIO;
        goto err_after_transport;
    }
    if ((rc = io.init(&io, self_id, self_addr)) != 0) {
        tn_errbuf(err, errlen, "metastore %s: %s (%s)", dir, io.errmsg, raft_strerror(rc));
        out = UV_EIO;
        goto err_after_io;
    }
    rc = io.load(&io, &term, &voted_for, &found, &start, &entries, &nentries);
    if (rc != 0 || term != 0 || found != NULL || nentries != 0) {
        tn_errbuf(err, errlen, "metastore %s: %s", dir,
                  rc != 0 ? io.errmsg : "already holds Raft state");
        out = rc != 0 ? UV_EIO : UV_EEXIST;
        goto err_after_init;
    }
    if ((rc = io.set_term(&io, 1)) != 0) {
        tn_errbuf(err, errlen, "metastore %s: term: %s (%s)", dir, io.errmsg, raft_strerror(rc));
        out = UV_EIO;
        goto err_after_init;
    }
    struct raft_buffer buf = {(void *)snap, len}; // NOLINT: libraft only reads it
    struct raft_snapshot s;
    memset(&s, 0, sizeof(s));
    s.index = 1;
    s.term = 1;
    s.configuration = conf;
    s.configuration_index = 1;
    s.bufs = &buf;
    s.n_bufs = 1;
    struct raft_io_snapshot_put req;
    memset(&req, 0, sizeof(req));
    wait_t w = {1};
    req.data = &w;
    if ((rc = io.snapshot_put(&io, 0, &req, &s, on_put)) != 0) {
        tn_errbuf(err, errlen, "metastore %s: snapshot: %s (%s)", dir, io.errmsg,
                  raft_strerror(rc));
        out = UV_EIO;
        goto err_after_init;
    }
    while (w.status == 1)
        uv_run(&loop, UV_RUN_ONCE);
    if (w.status != 0) {
        tn_errbuf(err, errlen, "metastore %s: snapshot: %s (%s)", dir, raft_strerror(w.status),
                  io.errmsg);
        out = UV_EIO;
    }
err_after_init:
err_after_io:
    if (found != NULL) {
        raft_configuration_close(&found->configuration);
        for (unsigned i = 0; i < found->n_bufs; i++)
            raft_free(found->bufs[i].base);
        raft_free(found->bufs);
        raft_free(found);
    }
    /* Entries found (refused above) come in batches libraft allocated:
     * the first entry's batch holds them all in the directories this
     * refuses, and the process exits soon after anyway. */
    if (nentries > 0 && entries[0].batch != NULL)
        raft_free(entries[0].batch);
    raft_free(entries);
    io.close(&io, on_io_closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    raft_uv_close(&io);
err_after_transport:
    /* libraft's io closed the transport (its close does); this frees it. */
    raft_uv_tcp_close(&tr);
err_after_loop:
    raft_configuration_close(&conf);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0 && out == 0) {
        tn_errbuf(err, errlen, "metastore %s: handles left open", dir);
        out = UV_EIO;
    }
    return out;
}
