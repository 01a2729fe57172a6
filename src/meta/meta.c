/* The metastore on libraft. See meta.h. */
#include "core/platform.h"

#include "meta/meta.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/netaddr.h"
#include "meta/transport.h"

#include <raft/uv.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* How often a node not yet leader looks again before sending what waits. */
#define LEADER_POLL_MS 10

struct tn_meta_s {
    uv_loop_t *loop;
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport transport;
    struct raft_fsm fsm;
    tn_meta_state_t state;
    raft_index start_index; /* last log index when started */
    bool ready;
    bool closing;       /* no more proposals (tn_meta_stop or tn_meta_close) */
    bool close_started; /* tn_meta_close was called */
    unsigned close_polls;
    uint32_t inflight;       /* proposals handed to libraft, not yet answered */
    uint64_t last_answer_ms; /* loop time of the last answer */
    tn_meta_req_t *waiting;  /* proposals before leadership, FIFO */
    tn_meta_req_t *waiting_tail;
    uv_timer_t poll;
    char address[TN_META_ADDR_MAX + 1];
    void (*close_cb)(void *arg);
    void *close_arg;
    void (*on_ready)(void *arg);
    void *ready_arg;
};

/* --- the state machine, as libraft sees it --------------------------------------- */

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    tn_meta_t *m = fsm->data;
    tn_meta_cmd_t c;
    size_t used;
    int rc = tn_meta_cmd_decode(buf->base, buf->len, &c, &used);
    if (rc == 0) {
        rc = tn_meta_state_apply(&m->state, &c);
        tn_meta_cmd_fini(&c);
    } else {
        /* Refused as a whole and identically by every replica of this
         * build: the state does not change. */
        TN_LOG(TN_LOG_ERROR, "metastore: log entry of %zu bytes refused: %s", buf->len,
               rc == UV_ENOTSUP ? "unknown command version or type" : tn_strerror(rc));
        if (rc != UV_ENOTSUP)
            rc = TN_ECORRUPT;
    }
    /* libraft hands this pointer to the proposer's callback as is: the
     * state machine's answer travels in it. */
    *result = (void *)(intptr_t)rc; // NOLINT(performance-no-int-to-ptr)
    return 0;
}

static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n)
{
    tn_meta_t *m = fsm->data;
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_meta_state_snapshot(&m->state, &b) != 0) {
        tn_buf_fini(&b);
        return RAFT_NOMEM;
    }
    struct raft_buffer *arr = raft_malloc(sizeof(*arr));
    void *copy = raft_malloc(tn_buf_size(&b));
    if (arr == NULL || copy == NULL) {
        raft_free(arr);
        raft_free(copy);
        tn_buf_fini(&b);
        return RAFT_NOMEM;
    }
    memcpy(copy, tn_buf_data(&b), tn_buf_size(&b));
    arr[0].base = copy;
    arr[0].len = tn_buf_size(&b);
    tn_buf_fini(&b);
    *bufs = arr;
    *n = 1;
    return 0;
}

static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    tn_meta_t *m = fsm->data;
    int rc = tn_meta_state_restore(&m->state, buf->base, buf->len);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "metastore: snapshot of %zu bytes refused: %s", buf->len,
               tn_strerror(rc));
        return rc == UV_ENOMEM ? RAFT_NOMEM : RAFT_CORRUPT;
    }
    raft_free(buf->base);
    return 0;
}

/* --- proposals ------------------------------------------------------------------ */

static void on_applied(struct raft_apply *a, int status, void *result)
{
    tn_meta_req_t *req = a->data;
    req->meta->inflight--;
    req->meta->last_answer_ms = uv_now(req->meta->loop);
    int rc;
    if (status != 0)
        rc = req->meta->closing || status == RAFT_SHUTDOWN ? TN_ECLOSED : TN_EFAILED;
    else
        rc = (int)(intptr_t)result;
    req->cb(req, rc);
}

static void submit(tn_meta_t *m, tn_meta_req_t *req)
{
    req->apply.data = req;
    int rc = raft_apply(&m->raft, &req->apply, &req->buf, 1, on_applied);
    if (rc == 0)
        m->inflight++;
    if (rc != 0) {
        /* Not taken: the buffer is still ours. */
        raft_free(req->buf.base);
        TN_LOG(TN_LOG_WARN, "metastore: proposal refused: %s", raft_strerror(rc));
        req->cb(req, rc == RAFT_NOMEM ? UV_ENOMEM : TN_EFAILED);
    }
}

static void fail_waiting(tn_meta_t *m, int status)
{
    while (m->waiting != NULL) {
        tn_meta_req_t *req = m->waiting;
        m->waiting = req->next;
        raft_free(req->buf.base);
        req->cb(req, status);
    }
    m->waiting_tail = NULL;
}

static void on_poll(uv_timer_t *t)
{
    tn_meta_t *m = t->data;
    if (m->closing || raft_state(&m->raft) != RAFT_LEADER)
        return;
    while (m->waiting != NULL) {
        tn_meta_req_t *req = m->waiting;
        m->waiting = req->next;
        if (m->waiting == NULL)
            m->waiting_tail = NULL;
        submit(m, req);
    }
    if (!m->ready && raft_last_applied(&m->raft) >= m->start_index) {
        m->ready = true;
        TN_LOG(TN_LOG_NOTICE, "metastore ready: leader, %zu topics, %zu users, log index %llu",
               m->state.ntopics, m->state.nusers, (unsigned long long)raft_last_index(&m->raft));
        if (m->on_ready != NULL)
            m->on_ready(m->ready_arg);
    }
    if (m->ready)
        uv_timer_stop(t);
}

int tn_meta_propose(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_cmd_t *c, tn_meta_cb cb)
{
    if (m->closing)
        return TN_ECLOSED;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_meta_cmd_encode(c, &b);
    if (rc != 0) {
        tn_buf_fini(&b);
        return rc;
    }
    req->buf.len = tn_buf_size(&b);
    req->buf.base = raft_malloc(req->buf.len);
    if (req->buf.base == NULL) {
        tn_buf_fini(&b);
        return UV_ENOMEM;
    }
    memcpy(req->buf.base, tn_buf_data(&b), req->buf.len);
    tn_buf_fini(&b);
    req->meta = m;
    req->cb = cb;
    req->next = NULL;
    if (raft_state(&m->raft) == RAFT_LEADER && m->waiting == NULL) {
        submit(m, req);
        return 0;
    }
    if (m->waiting_tail != NULL)
        m->waiting_tail->next = req;
    else
        m->waiting = req;
    m->waiting_tail = req;
    if (!uv_is_active((uv_handle_t *)&m->poll))
        uv_timer_start(&m->poll, on_poll, LEADER_POLL_MS, LEADER_POLL_MS);
    return 0;
}

const tn_meta_state_t *tn_meta_state(const tn_meta_t *m)
{
    return &m->state;
}

bool tn_meta_ready(tn_meta_t *m)
{
    return m->ready && !m->closing;
}

/* --- lifetime ------------------------------------------------------------------ */

static void meta_free(tn_meta_t *m)
{
    tn_meta_state_fini(&m->state);
    void (*cb)(void *) = m->close_cb;
    void *arg = m->close_arg;
    tn_free(m);
    if (cb != NULL)
        cb(arg);
}

static void on_poll_closed(uv_handle_t *h)
{
    meta_free(h->data);
}

static void on_raft_closed(struct raft *r)
{
    tn_meta_t *m = r->data;
    raft_uv_close(&m->io);
    tn_meta_transport_fini(&m->transport);
    uv_close((uv_handle_t *)&m->poll, on_poll_closed);
}

/* Why raft_start could not listen on address, into why ("" when a socket
 * of our own can listen there after all). libraft 0.15's TCP transport
 * drops the system error of its bind and listen: raft_start answers
 * RAFT_IOERR, and raft_errmsg, the io's and the transport's errmsg stay
 * empty. So repeat the two, as libuv makes them (SO_REUSEADDR, as libraft's
 * listener has), on a socket that is closed again at once. */
static void explain_listen(const char *address, char *why, size_t len)
{
    why[0] = '\0';
    tn_hostport_t hp;
    tn_netaddr_t na;
    if (tn_netaddr_split(address, &hp, NULL, 0) != 0 || !hp.numeric ||
        tn_netaddr_resolve(&hp, TN_NETADDR_IPV4, &na, NULL, 0) != 0)
        return;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, len, "%s", tn_strerror(tn_err_from_errno(errno)));
        return;
    }
    int on = 1;
    int rc = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (rc == 0)
        rc = bind(fd, (const struct sockaddr *)&na.sa, sizeof(struct sockaddr_in));
    if (rc == 0)
        rc = listen(fd, 1);
    if (rc != 0)
        snprintf(why, len, "%s", tn_strerror(tn_err_from_errno(errno)));
    close(fd);
}

int tn_meta_open(uv_loop_t *loop, const tn_meta_opts_t *o, tn_meta_t **out, char *err,
                 size_t errlen)
{
    if (o->node_id == 0 || strlen(o->address) > TN_META_ADDR_MAX) {
        tn_errbuf(err, errlen, "metastore: node id must be >= 1 and the address at most %d bytes",
                  TN_META_ADDR_MAX);
        return UV_EINVAL;
    }
    if (mkdir(o->dir, 0755) != 0 && errno != EEXIST) {
        int rc = tn_err_from_errno(errno);
        tn_errbuf(err, errlen, "metastore: cannot create %s: %s", o->dir, tn_strerror(rc));
        return rc;
    }
    tn_meta_t *m = tn_calloc(1, sizeof(*m));
    if (m == NULL)
        return UV_ENOMEM;
    m->loop = loop;
    m->on_ready = o->on_ready;
    m->ready_arg = o->ready_arg;
    tn_meta_state_init(&m->state);
    snprintf(m->address, sizeof(m->address), "%s", o->address);
    m->fsm.version = 1;
    m->fsm.data = m;
    m->fsm.apply = fsm_apply;
    m->fsm.snapshot = fsm_snapshot;
    m->fsm.restore = fsm_restore;
    uv_timer_init(loop, &m->poll);
    m->poll.data = m;
    tn_meta_transport_opts_t topts = {o->tls_cert, o->tls_key, o->tls_ca};
    char terr[512];
    int rc = tn_meta_transport_init(&m->transport, loop, &topts, terr, sizeof(terr));
    if (rc != 0) {
        tn_errbuf(err, errlen, "metastore: %s", rc == UV_ENOMEM ? tn_strerror(rc) : terr);
        goto fail_timer;
    }
    rc = raft_uv_init(&m->io, loop, o->dir, &m->transport);
    if (rc != 0) {
        tn_errbuf(err, errlen, "metastore: %s: %s", o->dir, raft_strerror(rc));
        tn_meta_transport_fini(&m->transport);
        goto fail_timer;
    }
    rc = raft_init(&m->raft, &m->io, &m->fsm, o->node_id, m->address);
    if (rc != 0) {
        tn_errbuf(err, errlen, "metastore: %s", raft_errmsg(&m->raft));
        goto fail_io;
    }
    m->raft.data = m;
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    rc = raft_configuration_add(&conf, o->node_id, m->address, RAFT_VOTER);
    if (rc == 0)
        rc = raft_bootstrap(&m->raft, &conf);
    raft_configuration_close(&conf);
    if (rc == 0) {
        TN_LOG(TN_LOG_NOTICE, "metastore: new cluster bootstrapped with node %llu at %s",
               (unsigned long long)o->node_id, m->address);
    } else if (rc != RAFT_CANTBOOTSTRAP) {
        tn_errbuf(err, errlen, "metastore: bootstrap: %s", raft_errmsg(&m->raft));
        goto fail_raft;
    }
    raft_set_election_timeout(&m->raft, o->election_ms ? o->election_ms : 1000);
    raft_set_heartbeat_timeout(&m->raft, o->heartbeat_ms ? o->heartbeat_ms : 100);
    raft_set_snapshot_threshold(&m->raft, o->snapshot_threshold ? o->snapshot_threshold : 1024);
    raft_set_snapshot_trailing(&m->raft, 128);
    /* A refused bootstrap (a node that has its state) leaves its text in
     * the errmsg: clear it, so only raft_start's own failure shows. */
    m->raft.errmsg[0] = '\0';
    m->io.errmsg[0] = '\0';
    m->transport.errmsg[0] = '\0';
    rc = raft_start(&m->raft);
    if (rc != 0) {
        /* The first of libraft's messages that says something; for a
         * listener that failed, none does (see explain_listen). */
        const char *msg = raft_errmsg(&m->raft);
        if (msg[0] == '\0')
            msg = m->io.errmsg;
        if (msg[0] == '\0')
            msg = m->transport.errmsg;
        char why[128] = "";
        if (msg[0] == '\0' && rc == RAFT_IOERR)
            explain_listen(m->address, why, sizeof(why));
        if (why[0] != '\0')
            tn_errbuf(err, errlen, "metastore: cannot listen on %s (raft-address): %s", m->address,
                      why);
        else
            tn_errbuf(err, errlen, "metastore: start: %s",
                      msg[0] != '\0' ? msg : raft_strerror(rc));
        goto fail_raft;
    }
    m->start_index = raft_last_index(&m->raft);
    uv_timer_start(&m->poll, on_poll, LEADER_POLL_MS, LEADER_POLL_MS);
    *out = m;
    return 0;

fail_raft:
    /* raft_init succeeded: only raft_close releases it, asynchronously. */
    m->closing = true;
    raft_close(&m->raft, on_raft_closed);
    *out = NULL;
    return TN_EFAILED;
fail_io:
    raft_uv_close(&m->io);
    tn_meta_transport_fini(&m->transport);
fail_timer:
    uv_close((uv_handle_t *)&m->poll, on_poll_closed);
    *out = NULL;
    return TN_EFAILED;
}

/* Close libraft only while it writes nothing. raft_close (uvAppendClose)
 * fails the disk appends in flight at once, inside the call, and libraft
 * 0.15 mishandles that: the leader's append callback truncates its
 * in-memory log from each failed append's first index, so with two or
 * more in flight the second truncates past the end of the log
 * (replication.c appendLeaderCb -> logTruncate; an assertion in a debug
 * build of libraft, a corrupted log and a NULL dereference in Debian's);
 * and a write the kernel already had completes into a segment the close
 * abandoned (uv_append.c uvAliveSegmentWriteCb; libuv's uv_poll_stop
 * assertion). Nothing is being written when every proposal of ours has its
 * answer and every entry in the log is stored (last_stored is the last
 * index; it also lags while a follower installs a snapshot). settled()
 * and raft_close run in the same timer callback, so no append starts
 * between them, and never inside a libraft callback (tn_meta_close). The
 * wait is bounded: CLOSE_WAIT_POLLS polls of LEADER_POLL_MS; past that
 * libraft is closed anyway, with a warning. */
#define CLOSE_WAIT_POLLS 300

static bool settled(tn_meta_t *m)
{
    return m->inflight == 0 && m->raft.last_stored == raft_last_index(&m->raft);
}

static void on_close_poll(uv_timer_t *t)
{
    tn_meta_t *m = t->data;
    if (++m->close_polls < CLOSE_WAIT_POLLS && !settled(m))
        return;
    if (!settled(m))
        TN_LOG(TN_LOG_WARN,
               "metastore: closing while libraft still writes (%u proposals in flight, log "
               "index %llu, stored %llu)",
               m->inflight, (unsigned long long)raft_last_index(&m->raft),
               (unsigned long long)m->raft.last_stored);
    uv_timer_stop(t);
    raft_close(&m->raft, on_raft_closed);
}

void tn_meta_close(tn_meta_t *m, void (*cb)(void *arg), void *arg)
{
    if (m->close_started)
        return;
    m->close_started = true;
    m->closing = true; /* perhaps already, by tn_meta_stop */
    m->close_cb = cb;
    m->close_arg = arg;
    fail_waiting(m, TN_ECLOSED);
    uv_timer_stop(&m->poll);
    /* Never raft_close from here: the caller may be inside a libraft
     * callback (a proposal's answer comes from within its disk-write
     * callback, and what the answer sets off may end in a close), and libraft
     * 0.15 asserts when closed under its own write callback
     * (uvAliveSegmentWriteCb finds uv->closing with the segment not being
     * finalized). The timer runs the first check on the next loop pass. */
    uv_timer_start(&m->poll, on_close_poll, 0, LEADER_POLL_MS);
}

void tn_meta_stop(tn_meta_t *m)
{
    if (m->closing)
        return;
    m->closing = true;
    fail_waiting(m, TN_ECLOSED);
    uv_timer_stop(&m->poll);
}
