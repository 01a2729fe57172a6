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
 * The rewrite of that snapshot for a whole cluster restored from one
 * backup (tn_meta_restore_rewrite and its pure pieces) is described in
 * restore.h.
 *
 * Threads: any; blocks. */
#include "core/platform.h"

#include "meta/meta.h"
#include "meta/restore.h"

#include "core/alloc.h"
#include "core/err.h"
#include "meta/state.h"
#include "storage/io.h"

#include <inttypes.h>
#include <openssl/sha.h>
#include <raft/uv.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* --- a whole cluster restored: the rewrite (restore.h) ------------------------------ */

static bool candidate(const tn_meta_restore_copy_t *c)
{
    return c->present && !c->damaged;
}

int tn_meta_restore_choose(const tn_meta_restore_copy_t *copies, uint32_t n)
{
    int best = -1;
    for (uint32_t i = 0; i < n; i++) {
        const tn_meta_restore_copy_t *c = &copies[i];
        if (!candidate(c))
            continue;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        const tn_meta_restore_copy_t *b = &copies[best];
        /* Strictly better only: a tie keeps the earlier replica. */
        if (c->last_epoch > b->last_epoch ||
            (c->last_epoch == b->last_epoch && c->log_end > b->log_end))
            best = (int)i;
    }
    return best;
}

int tn_meta_restore_pstate(const tn_pstate_t *old, const tn_meta_restore_copy_t *copies,
                           uint32_t ncopies, int best, uint64_t best_incarnation, tn_pstate_t *out)
{
    tn_pstate_t ps = *old;
    uint32_t top = old->leader_epoch;
    for (uint32_t i = 0; i < ncopies; i++) {
        top = TN_MAX(top, copies[i].max_epoch);
        top = TN_MAX(top, copies[i].last_epoch);
    }
    if (top == UINT32_MAX || old->partition_epoch == UINT32_MAX)
        return UV_ERANGE; /* no epoch lies above: a damaged backup */
    ps.leader_epoch = top + 1;
    ps.partition_epoch = old->partition_epoch + 1;
    memset(ps.isr, 0, sizeof(ps.isr));
    memset(ps.elr, 0, sizeof(ps.elr));
    ps.nisr = 0;
    ps.nelr = 0;
    ps.corrupt = 0;
    ps.unclean = false;
    ps.leader = TN_PSTATE_NONE;
    if (best >= 0 && (uint32_t)best >= old->nreplicas && (uint32_t)best < ncopies) {
        /* Step 3a: a member the snapshot no longer lists becomes a replica. */
        uint32_t node = copies[best].node;
        if (old->nreplicas >= TN_PSTATE_MAX_REPLICAS ||
            (old->ntarget > 0 && old->nold >= TN_PSTATE_MAX_REPLICAS))
            return UV_E2BIG;
        if (old->ntarget == 0) {
            memmove(&ps.replicas[1], &ps.replicas[0], old->nreplicas * sizeof(ps.replicas[0]));
            ps.replicas[0] = node;
        } else {
            ps.old[ps.nold++] = node;
            ps.replicas[old->nreplicas] = node;
        }
        ps.nreplicas++;
    }
    if (best >= 0 && (uint32_t)best < ncopies) {
        ps.leader = copies[best].node;
        ps.isr[0].node = ps.leader;
        ps.isr[0].incarnation = best_incarnation;
        ps.nisr = 1;
    }
    *out = ps;
    return 0;
}

uint64_t tn_meta_restore_incarnation(const char *backup_id, uint64_t member)
{
    static const char tag[] = "tern-restore-incarnation";
    char in[512];
    size_t idlen = strnlen(backup_id, 256);
    size_t n = 0;
    memcpy(in, tag, sizeof(tag)); /* with its NUL */
    n += sizeof(tag);
    memcpy(in + n, backup_id, idlen);
    n += idlen;
    in[n++] = '\0';
    n += (size_t)snprintf(in + n, sizeof(in) - n, "%" PRIu64, member);
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)in, n, md);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | md[i];
    return v != 0 ? v : 1;
}

static tn_meta_member_t *member_of(tn_meta_state_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->nmembers; i++)
        if (s->members[i].id == id)
            return &s->members[i];
    return NULL;
}

static bool in_replicas(const tn_pstate_t *ps, uint64_t id)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == id)
            return true;
    return false;
}

static bool in_set(const uint64_t *members, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (members[i] == id)
            return true;
    return false;
}

int tn_meta_restore_rewrite(const void *snap, size_t len, const char *backup_id,
                            const uint64_t *members, size_t n, tn_meta_restore_copies_cb copies_cb,
                            tn_meta_restore_told_cb told_cb, void *arg, tn_buf_t *out, char *err,
                            size_t errlen)
{
    /* Node ids are 32 bits and 0 is none (partstate.h): a member id
     * beyond would alias another node's, or none, in copies[].node. */
    for (size_t i = 0; i < n; i++) {
        if (members[i] == 0 || members[i] > UINT32_MAX) {
            tn_errbuf(err, errlen,
                      "member %" PRIu64 " of the backup is no node id (1..%" PRIu32 ")", members[i],
                      UINT32_MAX);
            return UV_EINVAL;
        }
        for (size_t k = 0; k < i; k++)
            if (members[k] == members[i]) {
                tn_errbuf(err, errlen, "member %" PRIu64 " of the backup is named twice",
                          members[i]);
                return UV_EINVAL;
            }
    }
    tn_meta_state_t st;
    tn_meta_state_init(&st);
    int rc = tn_meta_state_restore(&st, snap, len);
    if (rc != 0) {
        tn_errbuf(err, errlen, "the metastore snapshot: %s",
                  rc == UV_ENOTSUP ? "a newer format than this build reads" : tn_strerror(rc));
        goto out;
    }
    /* copies[]: the replicas' first (replicas order), then every other
     * restored member's (members order). */
    tn_meta_restore_copy_t *copies = tn_calloc(TN_PSTATE_MAX_REPLICAS + n, sizeof(*copies));
    if (copies == NULL) {
        rc = UV_ENOMEM;
        tn_errbuf(err, errlen, "%s", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < st.ntopics && rc == 0; i++) {
        tn_meta_topic_entry_t *t = st.topics[i];
        for (uint32_t p = 0; t->pstates != NULL && p < t->rec.partitions && rc == 0; p++) {
            tn_pstate_t *ps = &t->pstates[p];
            if (ps->nreplicas == 0)
                continue; /* not placed: no member was alive when it was made */
            uint32_t nc = ps->nreplicas;
            memset(copies, 0, (TN_PSTATE_MAX_REPLICAS + n) * sizeof(*copies));
            for (uint32_t k = 0; k < ps->nreplicas; k++)
                copies[k].node = ps->replicas[k];
            for (size_t k = 0; k < n; k++)
                if (!in_replicas(ps, members[k]))
                    copies[nc++].node = (uint32_t)members[k];
            if ((rc = copies_cb(arg, t->rec.name, p, ps, copies, nc, err, errlen)) != 0)
                break;
            /* A copy of a member the backup does not restore cannot lead:
             * its node would register with another incarnation. */
            for (uint32_t k = 0; k < ps->nreplicas; k++)
                if (!in_set(members, n, copies[k].node))
                    copies[k].present = false;
            int best = tn_meta_restore_choose(copies, nc);
            uint64_t inc =
                best >= 0 ? tn_meta_restore_incarnation(backup_id, copies[best].node) : 0;
            tn_pstate_t now;
            if ((rc = tn_meta_restore_pstate(ps, copies, nc, best, inc, &now)) == UV_ERANGE) {
                tn_errbuf(err, errlen,
                          "partition %s/%" PRIu32 ": the backup names epoch %" PRIu32 " (its "
                          "metastore's leader or partition epoch, or a copy's), the highest there "
                          "is, and the restored partition needs one above it: the backup is "
                          "damaged",
                          t->rec.name, p, UINT32_MAX);
                break;
            }
            if (rc != 0) {
                tn_errbuf(err, errlen,
                          "partition %s/%" PRIu32 ": its longest copy in the latest epoch is "
                          "node %" PRIu32 "'s, which the backup's metastore no longer lists as "
                          "a replica, and the partition has %d replicas already (the most): "
                          "the partition changed while the backup was taken; take the backup "
                          "again",
                          t->rec.name, p, copies[best].node, TN_PSTATE_MAX_REPLICAS);
                break;
            }
            if (told_cb != NULL)
                told_cb(arg, t->rec.name, p, ps, &now, copies, nc, best);
            *ps = now;
            t->owners[p] = ps->replicas[0]; /* a replicated partition's owner (state.c) */
        }
    }
    tn_free(copies);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        tn_meta_member_t *m = member_of(&st, members[i]);
        if (m == NULL)
            continue; /* not a member in this snapshot: it registers as a new one */
        m->incarnation = tn_meta_restore_incarnation(backup_id, m->id);
        m->boot = 0;
        m->fenced = false;
    }
    if ((rc = tn_meta_state_snapshot(&st, out)) != 0)
        tn_errbuf(err, errlen, "the rewritten metastore snapshot: %s", tn_strerror(rc));
out:
    tn_meta_state_fini(&st);
    return rc;
}

int tn_meta_restore_incarnation_write(const char *data_dir, uint64_t incarnation, char *err,
                                      size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/" TN_META_INCARNATION_FILE, data_dir);
    if (access(path, F_OK) == 0) {
        tn_errbuf(err, errlen, "%s exists already", path);
        return UV_EEXIST;
    }
    /* The format of tn_meta_incarnation_load (meta.c), which reads it. */
    char text[32];
    int len = snprintf(text, sizeof(text), "%016" PRIx64 "\n", incarnation);
    int rc = tn_io_write_file_atomic(data_dir, TN_META_INCARNATION_FILE, text, (size_t)len);
    if (rc != 0)
        tn_errbuf(err, errlen, "cannot write %s: %s", path, tn_strerror(rc));
    return rc;
}
