/* Node RPC client and server over QUIC. See rpc.h.
 *
 * DESIGN
 *
 * A call, on the happy path:
 *   1. tn_rpc_call finds the peer (one per address and socket), builds the
 *      REQUEST frame and arms the call's deadline timer.
 *   2. No connection: the call waits on the peer, which dials (once, for
 *      every waiter, under the dial timeout). Once the handshake completed
 *      the waiters are placed on streams.
 *   3. The call takes the next stream of its lane, round-robin; a slot
 *      without a stream opens one, whose first frame is our AUTH (the
 *      client proof over the connection's exporter material). The frame
 *      goes out at once on a stream whose server proved the secret, or when
 *      its AUTH frame arrives and checks out.
 *   4. The REPLY with the call's id finishes it: metrics, then cb.
 * A call leaves the id table as it finishes, so a late reply, an ERROR
 * frame for it or a second reply is ignored.
 *
 * Failures: the deadline (CANCEL frame if the request went out, then a
 * liveness PING on the connection), cancel (the same, without the ping),
 * a stream reset or a connection gone (every call on it fails), a server
 * that cannot prove the secret (its stream's calls fail with UV_EACCES
 * and the stream is reset), a dial failure (its waiters fail, and the
 * peer's backoff makes the next calls fail fast until it has passed).
 *
 * Server: a stream reads frames under the pre-auth cap until the client's
 * AUTH checked out, then under TN_WIRE_MAX_PAYLOAD. A request becomes a
 * tn_rpc_req_t in the stream's id table; gated ops wait in their gate's
 * queue (with a copy of the payload) while the bound is full; a CANCEL
 * answers a queued request at once and reaches a running one's cancel
 * callback; the end of the stream cancels every request on it, whose
 * replies are then dropped. Nothing in the frame path waits.
 *
 * Invariants: a call is in exactly one list (its peer's waiters or its
 * stream's calls) until it finishes; its memory goes with its timer's
 * close. A request is in its stream's table until it is answered or the
 * stream ends; its memory goes in tn_rpc_reply. */
#include "core/platform.h"

#include "cluster/rpc.h"

#include "cluster/quic.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/hist.h"
#include "core/log.h"
#include "core/netaddr.h"
#include "core/time.h"
#include "core/u64map.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ADDR_MAX      TN_NETADDR_NAME_MAX
#define UNSUPPORTED   "{\"error\":\"unsupported rpc operation\"}"
#define CANCELLED     "{\"error\":\"request cancelled by the caller before it ran\"}"
#define BAD_REPLY     "{\"error\":\"the handler gave an invalid reply\"}"
#define CT_JSON       "application/json"
#define CT_BYTES      "application/octet-stream"
#define AUTH_LOG_MS   10000
#define APP_AUTH_FAIL 1 /* stream reset code: the proof did not check out */
#define APP_PROTO     2 /* stream reset code: a frame we could not take */

enum { OUT_OK, OUT_ERROR, OUT_TIMEOUT, OUT_CANCELLED, OUT_UNAVAILABLE, OUT__COUNT };
static const char *const outcome_names[OUT__COUNT] = {"ok", "error", "timeout", "cancelled",
                                                      "unavailable"};

typedef struct peer_s peer_t;
typedef struct cstream_s cstream_t;
typedef struct sstream_s sstream_t;

enum { CALL_WAIT_CONN, CALL_WAIT_AUTH, CALL_SENT, CALL_DONE };

struct tn_rpc_call_s {
    tn_rpc_t *r;
    peer_t *p;
    cstream_t *st; /* the stream it is queued or sent on */
    uint64_t id;
    uint8_t op;
    int lane;
    int state;
    int deferred; /* an error to finish with when the timer fires now */
    const char *deferred_why;
    tn_buf_t frame;
    uv_timer_t timer;
    tn_rpc_call_cb cb;
    void *arg;
    int64_t start_ns;
    tn_rpc_call_t *prev, *next;
};

typedef struct {
    tn_rpc_call_t *head;
} call_list_t;

struct cstream_s {
    peer_t *p;
    tn_quic_stream_t *qs;
    int lane, slot;
    tn_wire_framer_t fr;
    bool authed;
    call_list_t calls;
};

struct peer_s {
    tn_rpc_t *r;
    peer_t *next;
    char addr[ADDR_MAX];
    struct sockaddr_storage sa; /* resolved again before every dial of a host name */
    char host[TN_NETADDR_HOST_MAX + 1];
    int port;
    bool numeric;
    bool resolving;         /* gai in flight */
    bool resolve_abandoned; /* the dial timed out while resolving */
    uv_getaddrinfo_t gai;
    bool bulk;
    tn_quic_conn_t *conn;
    bool ready;
    int dial_err;
    uv_timer_t dial_timer;
    unsigned failures;
    int64_t backoff_until_ms;
    call_list_t waiting;
    cstream_t *lanes[TN_LANE_COUNT][TN_LANE_STREAMS];
    unsigned rr[TN_LANE_COUNT];
    bool ping_inflight;
    int64_t last_ping_ms;
    uint64_t ping_rx_mark;
    uv_timer_t ping_timer;
    int64_t auth_log_next_ms;
};

typedef struct {
    unsigned limit, running;
    tn_rpc_req_t *head, *tail;
    bool draining;
} gate_t;

struct sstream_s {
    tn_rpc_t *r;
    sstream_t *prev, *next; /* r->sstreams */
    uint64_t stall_ms;      /* loop ms since the caller acknowledged nothing, 0: none due */
    uint64_t last_acked;
    tn_quic_stream_t *qs;
    tn_quic_conn_t *qc;
    tn_wire_framer_t fr;
    bool authed;
    tn_u64map_t reqs;
    char peer[ADDR_MAX];
};

struct tn_rpc_req_s {
    tn_rpc_t *r;
    sstream_t *ss; /* NULL once the stream ended */
    uint64_t id;
    uint8_t op;
    uint8_t *payload; /* a copy while queued */
    size_t len;
    gate_t *gate;
    bool queued, cancelled;
    void (*cancel_cb)(void *, tn_rpc_req_t *);
    void *cancel_arg;
    tn_rpc_req_t *qnext;
    char peer[ADDR_MAX];
};

struct tn_rpc_s {
    uv_loop_t *loop;
    uint8_t *secret;
    size_t secret_len;
    uint8_t reset_key[32];
    uint64_t dial_ms, reply_ms, ping_ms, ping_interval_ms, idle_ms;
    bool accept_any_proof;
    unsigned lane_streams;
    tn_quic_ep_t *ep, *bulk_ep;
    char addr[ADDR_MAX];
    tn_rpc_handler_t handlers[256];
    void (*late_cancel)(void *arg, const char *peer, uint64_t id);
    void *late_cancel_arg;
    gate_t gates[2]; /* 0: commits, 1: other messaging */
    peer_t *peers;
    tn_u64map_t calls;
    uint64_t next_id;
    tn_buf_t scratch;
    unsigned live_calls; /* calls whose memory is not yet gone */
    unsigned live_reqs;
    unsigned open_handles; /* endpoints and peer timers */
    sstream_t *sstreams;   /* server streams, for the reply write deadline */
    uv_timer_t write_timer;
    uint64_t reply_write_ms;
    bool closing;
    bool freeing; /* the write timer's close, the last step, is under way */
    void (*close_cb)(void *);
    void *close_arg;
    uint64_t counts[256][OUT__COUNT];
    tn_hist_t hist[256];
#ifdef TN_TEST
    tn_rpc_test_stats_t st;
#endif
};

#ifdef TN_TEST
#define STAT(r, f) ((r)->st.f++)
void tn_rpc_test_stats(const tn_rpc_t *r, tn_rpc_test_stats_t *out)
{
    *out = r->st;
}

void tn_rpc_test_deaf(tn_rpc_t *r, bool deaf)
{
    tn_quic_ep_test_deaf(r->ep, deaf);
}
#else
#define STAT(r, f) ((void)0)
#endif

static void peer_dial(peer_t *p);
static void dial_failed(peer_t *p, int why);
static void maybe_freed(tn_rpc_t *r);
static void call_place(tn_rpc_call_t *c);
static void on_call_timer(uv_timer_t *t);

/* --- lists ------------------------------------------------------------------------ */

static void list_push(call_list_t *l, tn_rpc_call_t *c)
{
    c->prev = NULL;
    c->next = l->head;
    if (l->head)
        l->head->prev = c;
    l->head = c;
}

static void list_del(call_list_t *l, tn_rpc_call_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (l->head == c)
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void call_unlink(tn_rpc_call_t *c)
{
    if (c->st)
        list_del(&c->st->calls, c);
    else if (c->p && c->state == CALL_WAIT_CONN)
        list_del(&c->p->waiting, c);
    c->st = NULL;
}

/* --- client: finishing calls -------------------------------------------------------- */

static void on_call_closed(uv_handle_t *h)
{
    tn_rpc_call_t *c = h->data;
    tn_rpc_t *r = c->r;
    tn_buf_fini(&c->frame);
    tn_free(c);
    r->live_calls--;
    maybe_freed(r);
}

static int outcome_of(int status, const tn_wire_reply_t *reply)
{
    if (status == 0)
        return reply && reply->status >= 500 ? OUT_ERROR : OUT_OK;
    if (status == UV_ETIMEDOUT)
        return OUT_TIMEOUT;
    if (status == TN_ECLOSED)
        return OUT_CANCELLED;
    return OUT_UNAVAILABLE;
}

static void call_finish(tn_rpc_call_t *c, int status, const tn_wire_reply_t *reply, const char *err)
{
    if (c->state == CALL_DONE)
        return;
    tn_rpc_t *r = c->r;
    call_unlink(c);
    c->state = CALL_DONE;
    tn_u64map_del(&r->calls, c->id);
    uv_timer_stop(&c->timer);
    r->counts[c->op][outcome_of(status, reply)]++;
    tn_hist_observe(&r->hist[c->op], tn_now_mono_ns() - c->start_ns);
    c->cb(c->arg, status, status == 0 ? reply : NULL, status == 0 ? NULL : err);
    uv_close((uv_handle_t *)&c->timer, on_call_closed);
}

static void call_failf(tn_rpc_call_t *c, int status, const char *fmt, ...) TN_PRINTF(3, 4);
static void call_failf(tn_rpc_call_t *c, int status, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    call_finish(c, status, NULL, msg);
}

static void fail_list(call_list_t *l, int status, const char *why, const char *addr)
{
    while (l->head)
        call_failf(l->head, status, "rpc to %s: %s", addr, why);
}

/* --- client: streams ----------------------------------------------------------------- */

static int stream_send_frame(tn_quic_stream_t *qs, uint8_t type, uint64_t id, const void *p,
                             size_t n)
{
    uint8_t hdr[TN_WIRE_HDR];
    tn_wire_hdr_encode(hdr, type, id, (uint32_t)n);
    int rc = tn_quic_stream_write(qs, hdr, sizeof hdr);
    if (rc == 0 && n > 0)
        rc = tn_quic_stream_write(qs, p, n);
    return rc;
}

static void cstream_free(cstream_t *st)
{
    peer_t *p = st->p;
    if (p->lanes[st->lane][st->slot] == st)
        p->lanes[st->lane][st->slot] = NULL;
    tn_wire_framer_fini(&st->fr);
    tn_free(st);
}

/* End st: its calls fail with status, the QUIC stream is reset (unless
 * it is gone already), the memory goes. */
static void cstream_fail(cstream_t *st, int status, const char *why, bool reset, uint64_t code)
{
    if (st->p->lanes[st->lane][st->slot] == st)
        st->p->lanes[st->lane][st->slot] = NULL;
    if (reset && st->qs)
        tn_quic_stream_reset(st->qs, code);
    st->qs = NULL;
    fail_list(&st->calls, status, why, st->p->addr);
    cstream_free(st);
}

static void call_send(tn_rpc_call_t *c)
{
    int rc = tn_quic_stream_write(c->st->qs, tn_buf_data(&c->frame), tn_buf_size(&c->frame));
    if (rc != 0) {
        /* Failed from the loop, as every failure of a call being placed:
         * this may run inside tn_rpc_call, and a callback there found its
         * caller between two steps (the replica manager's fetch slot
         * stayed in flight for ever). */
        call_unlink(c);
        c->state = CALL_SENT; /* in no list */
        c->deferred = rc == UV_ENOMEM ? UV_ENOMEM : UV_ECONNRESET;
        c->deferred_why = "sending failed: the stream is gone";
        tn_u64map_del(&c->r->calls, c->id);
        uv_timer_start(&c->timer, on_call_timer, 0, 0);
        return;
    }
    tn_buf_fini(&c->frame);
    tn_buf_init(&c->frame);
    c->state = CALL_SENT;
}

static void peer_pong(peer_t *p)
{
    p->ping_inflight = false;
    uv_timer_stop(&p->ping_timer);
}

static int on_client_frame(void *arg, const tn_wire_hdr_t *h, const uint8_t *payload)
{
    cstream_t *st = arg;
    peer_t *p = st->p;
    tn_rpc_t *r = p->r;
    if (!st->authed) {
        uint8_t ekm[TN_QUIC_EKM_LEN];
        if (tn_quic_conn_ekm(p->conn, ekm) != 0 ||
            tn_wire_auth_check(r->secret, r->secret_len, false, ekm, h, payload) != 0)
            return UV_EACCES; /* not the server's proof, or not a proof at all */
        st->authed = true;
        st->fr.max = TN_WIRE_MAX_PAYLOAD;
        /* Queued calls go out oldest first. */
        tn_rpc_call_t *last = st->calls.head;
        while (last && last->next)
            last = last->next;
        for (tn_rpc_call_t *c = last, *prev; c; c = prev) {
            prev = c->prev;
            if (c->state == CALL_WAIT_AUTH)
                call_send(c);
        }
        return 0;
    }
    switch (h->type) {
    case TN_WF_REPLY: {
        tn_rpc_call_t *c = tn_u64map_get(&r->calls, h->id);
        if (!c || c->st != st || c->state != CALL_SENT)
            return 0; /* abandoned: the reply raced a cancel or a deadline */
        tn_wire_reply_t rep;
        if (tn_wire_reply_decode(payload, h->len, &rep) != 0) {
            call_failf(c, TN_EPROTO, "rpc to %s: malformed reply", p->addr);
            return 0;
        }
        call_finish(c, 0, &rep, NULL);
        return 0;
    }
    case TN_WF_PONG:
        if (p->ping_inflight)
            STAT(r, pongs);
        peer_pong(p);
        return 0;
    case TN_WF_ERROR: {
        tn_rpc_call_t *c = tn_u64map_get(&r->calls, h->id);
        if (c && c->st == st) {
            tn_wire_in_t in;
            char msg[201] = "";
            uint16_t mlen = 0;
            tn_wire_in_init(&in, payload, h->len);
            if (tn_wire_get_u16(&in, &mlen) == 0) {
                size_t n = mlen < h->len - 2 ? mlen : h->len - 2;
                n = n < sizeof msg - 1 ? n : sizeof msg - 1;
                memcpy(msg, payload + 2, n);
                msg[n] = 0;
            }
            call_failf(c, TN_EPROTO, "rpc to %s: the server refused the frame: %s", p->addr, msg);
        }
        return 0; /* for a request nobody waits on: ignored */
    }
    default:
        return TN_EPROTO;
    }
}

/* A peer whose secret is not this node's: said at error level, at most
 * once per AUTH_LOG_MS per peer. */
static void log_secret_mismatch(peer_t *p, const char *what)
{
    int64_t now = tn_now_mono_ms();
    if (now < p->auth_log_next_ms)
        return;
    p->auth_log_next_ms = now + AUTH_LOG_MS;
    TN_LOG(TN_LOG_ERROR,
           "rpc: peer %s %s; no request is sent to it (is TERN_CLUSTER_SECRET the same on every "
           "node?)",
           p->addr, what);
}

static void on_cstream_data(void *arg, tn_quic_stream_t *qs, const uint8_t *data, size_t n)
{
    cstream_t *st = arg;
    int rc = tn_wire_framer_push(&st->fr, data, n, on_client_frame, st);
    if (rc == 0)
        return;
    peer_t *p = st->p;
    if (rc == UV_EACCES) {
        STAT(p->r, auth_failures);
        log_secret_mismatch(p, "could not prove the cluster secret");
        cstream_fail(st, UV_EACCES, "the peer could not prove the cluster secret", true,
                     APP_AUTH_FAIL);
        return;
    }
    TN_LOG_RL(TN_LOG_WARN, 10000, "rpc: stream to %s: bad frame: %s", p->addr, tn_strerror(rc));
    cstream_fail(st, rc == UV_ENOMEM ? UV_ENOMEM : TN_EPROTO, "bad frame from the peer", true,
                 APP_PROTO);
}

static void on_cstream_closed(void *arg, tn_quic_stream_t *qs, int err)
{
    cstream_t *st = arg;
    st->qs = NULL;
    if (!st->authed && err == UV_ECONNRESET && tn_quic_stream_peer_code(qs) == APP_AUTH_FAIL) {
        /* The server refused this node's proof: a different secret. */
        log_secret_mismatch(st->p, "refused this node's proof of the cluster secret");
        cstream_fail(st, UV_EACCES, "the peer refused this node's proof of the cluster secret",
                     false, 0);
        return;
    }
    cstream_fail(st, UV_ECONNRESET, "the stream ended", false, 0);
}

static const tn_quic_stream_cbs_t cstream_cbs = {on_cstream_data, on_cstream_closed};

static int cstream_open(peer_t *p, int lane, int slot, cstream_t **out)
{
    tn_rpc_t *r = p->r;
    uint8_t ekm[TN_QUIC_EKM_LEN], proof[TN_WIRE_PROOF_LEN];
    int rc = tn_quic_conn_ekm(p->conn, ekm);
    if (rc == 0)
        rc = tn_wire_proof(r->secret, r->secret_len, true, ekm, proof);
    if (rc != 0)
        return rc;
    cstream_t *st = tn_calloc(1, sizeof *st);
    if (!st)
        return UV_ENOMEM;
    st->p = p;
    st->lane = lane;
    st->slot = slot;
    tn_wire_framer_init(&st->fr, TN_WIRE_PROOF_CAP - TN_WIRE_HDR);
    rc = tn_quic_stream_open(p->conn, &cstream_cbs, st, &st->qs);
    if (rc == 0)
        rc = stream_send_frame(st->qs, TN_WF_AUTH, 0, proof, sizeof proof);
    if (rc != 0) {
        if (st->qs)
            tn_quic_stream_reset(st->qs, 0);
        tn_wire_framer_fini(&st->fr);
        tn_free(st);
        return rc;
    }
    p->lanes[lane][slot] = st;
    *out = st;
    return 0;
}

/* Put a call whose peer is ready on its lane's next stream. */
static void call_place(tn_rpc_call_t *c)
{
    peer_t *p = c->p;
    int lane = c->lane;
    unsigned n = lane == TN_LANE_CONTROL   ? TN_LANE_CONTROL_STREAMS
                 : lane == TN_LANE_REPLICA ? TN_LANE_REPLICA_STREAMS
                                           : TN_LANE_STREAMS;
    if (p->r->lane_streams && p->r->lane_streams < n)
        n = p->r->lane_streams;
    int slot = (int)(p->rr[lane]++ % n);
    cstream_t *st = p->lanes[lane][slot];
    if (!st) {
        int rc = cstream_open(p, lane, slot, &st);
        if (rc != 0) {
            /* Failed from the loop: this may run inside tn_rpc_call. */
            c->st = NULL;
            c->state = CALL_SENT; /* in no list */
            c->deferred = rc == UV_ENOMEM ? UV_ENOMEM : UV_ECONNRESET;
            c->deferred_why = "opening a stream failed";
            tn_u64map_del(&p->r->calls, c->id);
            uv_timer_start(&c->timer, on_call_timer, 0, 0);
            return;
        }
    }
    c->st = st;
    list_push(&st->calls, c);
    if (st->authed)
        call_send(c);
    else
        c->state = CALL_WAIT_AUTH;
}

/* --- client: liveness ping ------------------------------------------------------------- */

/* The ping's second is up without a PONG. "Nothing else arrived" is
 * judged by the connection's datagram count: a peer whose QUIC stack
 * answered anything (an ACK of the PING, another stream's reply) is alive
 * and only busy, and its connection stays; one that sent nothing at all
 * is taken for dead and closed, so the next call dials again. */
static void on_ping_timer(uv_timer_t *t)
{
    peer_t *p = t->data;
    if (!p->ping_inflight)
        return;
    p->ping_inflight = false;
    if (p->conn && tn_quic_conn_rx_packets(p->conn) == p->ping_rx_mark) {
        TN_LOG(TN_LOG_WARN,
               "rpc: peer %s sent nothing for %" PRIu64 " ms after a ping; "
               "closing the connection",
               p->addr, p->r->ping_ms);
        STAT(p->r, ping_closes);
        tn_quic_conn_close(p->conn, 0);
    }
}

static void peer_ping(peer_t *p)
{
    tn_rpc_t *r = p->r;
    int64_t now = tn_now_mono_ms();
    if (!p->ready || p->ping_inflight || r->closing ||
        (p->last_ping_ms && now - p->last_ping_ms < (int64_t)r->ping_interval_ms))
        return;
    cstream_t *st = NULL;
    for (int lane = TN_LANE_COUNT - 1; lane >= 0 && !st; lane--)
        for (int i = 0; i < TN_LANE_STREAMS && !st; i++)
            if (p->lanes[lane][i] && p->lanes[lane][i]->authed && p->lanes[lane][i]->qs)
                st = p->lanes[lane][i];
    if (!st || stream_send_frame(st->qs, TN_WF_PING, 0, NULL, 0) != 0)
        return;
    p->ping_inflight = true;
    STAT(r, pings);
    p->last_ping_ms = now;
    p->ping_rx_mark = tn_quic_conn_rx_packets(p->conn);
    uv_timer_start(&p->ping_timer, on_ping_timer, r->ping_ms, 0);
}

/* --- client: calls --------------------------------------------------------------------- */

static void on_call_timer(uv_timer_t *t)
{
    tn_rpc_call_t *c = t->data;
    if (c->deferred) {
        call_failf(c, c->deferred, "rpc to %s: %s", c->p->addr, c->deferred_why);
        return;
    }
    peer_t *p = c->p;
    bool sent = c->state == CALL_SENT;
    if (sent && c->st && c->st->qs)
        stream_send_frame(c->st->qs, TN_WF_CANCEL, c->id, NULL, 0);
    call_failf(c, UV_ETIMEDOUT, "rpc to %s: no reply within the deadline", p->addr);
    peer_ping(p);
}

void tn_rpc_call_cancel(tn_rpc_call_t *c)
{
    if (c->state == CALL_DONE || c->deferred)
        return;
    if (c->state == CALL_SENT && c->st && c->st->qs)
        stream_send_frame(c->st->qs, TN_WF_CANCEL, c->id, NULL, 0);
    call_unlink(c);
    tn_u64map_del(&c->r->calls, c->id);
    c->state = CALL_SENT; /* in no list now */
    c->deferred = TN_ECLOSED;
    c->deferred_why = "cancelled";
    uv_timer_start(&c->timer, on_call_timer, 0, 0);
}

/* --- client: peers and dials ----------------------------------------------------------- */

static void on_dial_timer(uv_timer_t *t)
{
    peer_t *p = t->data;
    if (p->conn && !p->ready) {
        p->dial_err = UV_ETIMEDOUT;
        tn_quic_conn_close(p->conn, 0);
    } else if (p->resolving && !p->resolve_abandoned) {
        p->resolve_abandoned = true; /* its answer, when it comes, is dropped */
        dial_failed(p, UV_ETIMEDOUT);
    }
}

static void on_conn_ready(void *arg, tn_quic_conn_t *qc)
{
    peer_t *p = arg;
    uv_timer_stop(&p->dial_timer);
    p->ready = true;
    p->failures = 0;
    /* Oldest waiter first. */
    tn_rpc_call_t *last = p->waiting.head;
    while (last && last->next)
        last = last->next;
    for (tn_rpc_call_t *c = last, *prev; c; c = prev) {
        prev = c->prev;
        list_del(&p->waiting, c);
        c->state = CALL_SENT; /* in no list until placed */
        call_place(c);
    }
}

/* A dial (resolution, handshake) failed: its waiters fail, and so do the
 * next calls until the backoff has passed. */
static void dial_failed(peer_t *p, int why)
{
    uv_timer_stop(&p->dial_timer);
    p->dial_err = 0;
    p->failures++;
    uint64_t wait = tn_wire_backoff_ms(p->failures);
    p->backoff_until_ms = tn_now_mono_ms() + (int64_t)wait;
    TN_LOG_RL(TN_LOG_WARN, 5000, "rpc: dial %s failed: %s; calls to it fail for %" PRIu64 " ms",
              p->addr, why == UV_ETIMEDOUT ? "timed out" : tn_strerror(why), wait);
    fail_list(&p->waiting, UV_ECONNREFUSED, why == UV_ETIMEDOUT ? "dial timed out" : "dial failed",
              p->addr);
}

static void on_conn_closed(void *arg, tn_quic_conn_t *qc, int err)
{
    peer_t *p = arg;
    tn_rpc_t *r = p->r;
    bool was_ready = p->ready;
    uv_timer_stop(&p->dial_timer);
    uv_timer_stop(&p->ping_timer);
    p->ping_inflight = false;
    p->conn = NULL;
    p->ready = false;
    if (r->closing) {
        fail_list(&p->waiting, TN_ECLOSED, "closing", p->addr);
        return;
    }
    if (was_ready) {
        if (err == UV_ECONNRESET)
            STAT(r, conn_resets);
        if (err == UV_ECONNRESET)
            TN_LOG(TN_LOG_NOTICE, "rpc: peer %s reset the connection (it restarted?)", p->addr);
        return; /* its streams failed their calls; the next call dials again */
    }
    dial_failed(p, p->dial_err ? p->dial_err : err);
}

static const tn_quic_conn_cbs_t client_conn_cbs = {on_conn_ready, NULL, on_conn_closed};

static void peer_connect(peer_t *p)
{
    tn_rpc_t *r = p->r;
    tn_quic_ep_t *ep = p->bulk ? r->bulk_ep : r->ep;
    int rc = tn_quic_connect(ep, (const struct sockaddr *)&p->sa, &client_conn_cbs, p, &p->conn);
    if (rc != 0) {
        p->conn = NULL;
        dial_failed(p, rc);
        return;
    }
    p->dial_err = 0;
    STAT(r, dials);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    peer_t *p = req->data;
    tn_rpc_t *r = p->r;
    p->resolving = false;
    r->open_handles--;
    bool abandoned = p->resolve_abandoned;
    p->resolve_abandoned = false;
    /* The first IPv4 address, or the first of any family (Go's rule, as
     * tn_netaddr_resolve has it). */
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = status == 0 ? res : NULL; a; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
        if (!pick && a->ai_family == AF_INET6)
            pick = a;
    }
    if (pick) {
        memset(&p->sa, 0, sizeof p->sa);
        memcpy(&p->sa, pick->ai_addr, pick->ai_addrlen);
        if (pick->ai_family == AF_INET)
            ((struct sockaddr_in *)&p->sa)->sin_port = htons((uint16_t)p->port);
        else
            ((struct sockaddr_in6 *)&p->sa)->sin6_port = htons((uint16_t)p->port);
    }
    if (res)
        uv_freeaddrinfo(res);
    if (r->closing) {
        maybe_freed(r);
        return;
    }
    if (abandoned)
        return; /* the dial timed out and failed already */
    if (!pick) {
        TN_LOG_RL(TN_LOG_WARN, 5000, "rpc: peer %s: resolving %s: %s", p->addr, p->host,
                  status ? uv_strerror(status) : "no IPv4 or IPv6 address");
        dial_failed(p, status ? status : UV_EAI_NONAME);
        return;
    }
    peer_connect(p);
}

/* Dial p: a host name is resolved first (off the loop, by libuv's
 * threadpool), on every dial, so a peer that came back at a new address
 * is found there. The dial timeout covers the resolution. */
static void peer_dial(peer_t *p)
{
    tn_rpc_t *r = p->r;
    uv_timer_start(&p->dial_timer, on_dial_timer, r->dial_ms, 0);
    if (p->numeric) {
        peer_connect(p);
        return;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    p->gai.data = p;
    int rc = uv_getaddrinfo(r->loop, &p->gai, on_resolved, p->host, NULL, &hints);
    if (rc != 0) {
        dial_failed(p, rc);
        return;
    }
    p->resolving = true;
    r->open_handles++;
}

static int parse_numeric(const char *text, struct sockaddr_storage *sa, char *why, size_t whylen)
{
    tn_hostport_t hp;
    if (tn_netaddr_split(text, &hp, why, whylen) != 0)
        return UV_EINVAL;
    memset(sa, 0, sizeof *sa);
    if (hp.host[0] == 0)
        snprintf(hp.host, sizeof hp.host, "0.0.0.0");
    if (uv_ip4_addr(hp.host, hp.port, (struct sockaddr_in *)sa) == 0)
        return 0;
    if (uv_ip6_addr(hp.host, hp.port, (struct sockaddr_in6 *)sa) == 0)
        return 0;
    tn_errbuf(why, whylen, "host %s is not a numeric IP address", hp.host);
    return UV_EINVAL;
}

static void on_peer_handle_closed(uv_handle_t *h)
{
    peer_t *p = h->data;
    tn_rpc_t *r = p->r;
    (void)p;
    r->open_handles--;
    maybe_freed(r);
}

static int peer_get(tn_rpc_t *r, const char *addr, bool bulk, peer_t **out)
{
    for (peer_t *p = r->peers; p; p = p->next)
        if (p->bulk == bulk && strcmp(p->addr, addr) == 0) {
            *out = p;
            return 0;
        }
    if (strlen(addr) >= ADDR_MAX)
        return UV_EINVAL;
    tn_hostport_t hp;
    struct sockaddr_storage sa;
    char why[128];
    if (tn_netaddr_split(addr, &hp, why, sizeof why) != 0 || hp.host[0] == 0 || hp.port == 0)
        return UV_EINVAL;
    memset(&sa, 0, sizeof sa);
    if (hp.numeric && parse_numeric(addr, &sa, why, sizeof why) != 0)
        return UV_EINVAL;
    if (bulk && !r->bulk_ep) {
        tn_quic_ep_opts_t qo;
        memset(&qo, 0, sizeof qo);
        struct sockaddr_storage local;
        tn_quic_ep_addr(r->ep, &local);
        if (local.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&local)->sin6_port = 0;
        else
            ((struct sockaddr_in *)&local)->sin_port = 0;
        qo.bind = (const struct sockaddr *)&local;
        memcpy(qo.reset_key, r->reset_key, sizeof qo.reset_key);
        qo.idle_timeout_ms = r->idle_ms;
        char err[160];
        int rc = tn_quic_ep_open(r->loop, &qo, &r->bulk_ep, err, sizeof err);
        if (rc != 0) {
            TN_LOG_RL(TN_LOG_ERROR, 5000, "rpc: the bulk endpoint: %s", err);
            return rc;
        }
        r->open_handles++;
    }
    peer_t *p = tn_calloc(1, sizeof *p);
    if (!p)
        return UV_ENOMEM;
    p->r = r;
    p->bulk = bulk;
    snprintf(p->addr, sizeof p->addr, "%s", addr);
    p->sa = sa;
    snprintf(p->host, sizeof p->host, "%s", hp.host);
    p->port = hp.port;
    p->numeric = hp.numeric;
    uv_timer_init(r->loop, &p->dial_timer);
    uv_timer_init(r->loop, &p->ping_timer);
    p->dial_timer.data = p->ping_timer.data = p;
    r->open_handles += 2;
    p->next = r->peers;
    r->peers = p;
    *out = p;
    return 0;
}

int tn_rpc_call_on(tn_rpc_t *r, const char *peer_addr, int lane, bool bulk, uint8_t op,
                   const void *payload, size_t len, uint64_t timeout_ms, tn_rpc_call_cb cb,
                   void *arg, tn_rpc_call_t **handle_out)
{
    if (r->closing)
        return TN_ECLOSED;
    if (len + 1 > TN_WIRE_MAX_PAYLOAD || !cb || lane >= TN_LANE_COUNT)
        return UV_EINVAL;
    peer_t *p;
    int rc = peer_get(r, peer_addr, bulk, &p);
    if (rc != 0)
        return rc;
    if (!p->conn && !p->resolving && p->failures && tn_now_mono_ms() < p->backoff_until_ms) {
        r->counts[op][OUT_UNAVAILABLE]++; /* counted, but no duration: it never left */
        return UV_ECONNREFUSED;
    }
    tn_rpc_call_t *c = tn_calloc(1, sizeof *c);
    if (!c)
        return UV_ENOMEM;
    c->r = r;
    c->p = p;
    c->op = op;
    c->lane = lane >= 0 ? lane : (int)tn_wire_op_lane(op);
    c->cb = cb;
    c->arg = arg;
    c->id = ++r->next_id;
    c->start_ns = tn_now_mono_ns();
    tn_buf_init(&c->frame);
    uint8_t hdr[TN_WIRE_HDR];
    tn_wire_hdr_encode(hdr, TN_WF_REQUEST, c->id, (uint32_t)(len + 1));
    if ((rc = tn_buf_reserve(&c->frame, TN_WIRE_HDR + 1 + len)) != 0 ||
        (rc = tn_buf_append(&c->frame, hdr, sizeof hdr)) != 0 ||
        (rc = tn_buf_append(&c->frame, &op, 1)) != 0 ||
        (len && (rc = tn_buf_append(&c->frame, payload, len)) != 0) ||
        (rc = tn_u64map_put(&r->calls, c->id, c)) != 0) {
        tn_buf_fini(&c->frame);
        tn_free(c);
        return rc;
    }
    uv_timer_init(r->loop, &c->timer);
    c->timer.data = c;
    r->live_calls++;
    uv_timer_start(&c->timer, on_call_timer, timeout_ms ? timeout_ms : r->reply_ms, 0);
    if (handle_out)
        *handle_out = c;
    if (p->ready) {
        c->state = CALL_SENT; /* in no list until placed */
        call_place(c);
        return 0;
    }
    if (!p->conn && !p->resolving)
        peer_dial(p);
    if (!p->conn && !p->resolving) {
        /* The dial could not even start: fail from the loop, not here. */
        c->state = CALL_SENT; /* in no list */
        c->deferred = UV_ECONNREFUSED;
        c->deferred_why = "the dial could not start";
        tn_u64map_del(&r->calls, c->id);
        uv_timer_start(&c->timer, on_call_timer, 0, 0);
        return 0;
    }
    c->state = CALL_WAIT_CONN;
    list_push(&p->waiting, c);
    return 0;
}

int tn_rpc_call(tn_rpc_t *r, const char *peer_addr, uint8_t op, const void *payload, size_t len,
                uint64_t timeout_ms, tn_rpc_call_cb cb, void *arg, tn_rpc_call_t **handle_out)
{
    return tn_rpc_call_on(r, peer_addr, -1, false, op, payload, len, timeout_ms, cb, arg,
                          handle_out);
}

int tn_rpc_call_bulk(tn_rpc_t *r, const char *peer_addr, uint8_t op, const void *payload,
                     size_t len, uint64_t timeout_ms, tn_rpc_call_cb cb, void *arg,
                     tn_rpc_call_t **handle_out)
{
    return tn_rpc_call_on(r, peer_addr, -1, true, op, payload, len, timeout_ms, cb, arg,
                          handle_out);
}

/* --- server ------------------------------------------------------------------------------- */

static void req_write_reply(tn_rpc_req_t *req, uint16_t status, const char *ctype, const void *body,
                            size_t len)
{
    sstream_t *ss = req->ss;
    if (!ss || !ss->qs)
        return;
    tn_buf_t *b = &req->r->scratch;
    tn_buf_reset(b);
    uint8_t hdr[TN_WIRE_HDR] = {0};
    int rc = tn_buf_append(b, hdr, sizeof hdr);
    if (rc == 0)
        rc = tn_wire_reply_encode(b, status, ctype, body, len);
    if (rc == UV_EINVAL || (rc == 0 && tn_buf_size(b) - TN_WIRE_HDR > TN_WIRE_MAX_PAYLOAD)) {
        TN_LOG_RL(TN_LOG_ERROR, 5000, "rpc: op %u gave an invalid reply (status %u, %zu bytes)",
                  req->op, status, len);
        b->len = TN_WIRE_HDR;
        rc = tn_wire_reply_encode(b, 500, CT_JSON, BAD_REPLY, strlen(BAD_REPLY));
    }
    if (rc != 0)
        return; /* out of memory: the caller's deadline answers for us */
    tn_wire_hdr_encode((uint8_t *)tn_buf_data(b), TN_WF_REPLY, req->id,
                       (uint32_t)(tn_buf_size(b) - TN_WIRE_HDR));
    tn_quic_stream_write(ss->qs, tn_buf_data(b), tn_buf_size(b));
    if (b->cap > 1024 * 1024) {
        tn_buf_fini(b); /* do not keep a big reply's buffer */
        tn_buf_init(b);
    }
}

static void req_free(tn_rpc_req_t *req)
{
    tn_rpc_t *r = req->r;
    tn_free(req->payload);
    tn_free(req);
    r->live_reqs--;
    maybe_freed(r);
}

static void req_run(tn_rpc_req_t *req, const uint8_t *payload, size_t len)
{
    tn_rpc_handler_t *h = &req->r->handlers[req->op];
    h->fn(req, payload, len, h->arg);
}

static void gate_drain(gate_t *g)
{
    if (g->draining)
        return;
    g->draining = true;
    while (g->running < g->limit && g->head) {
        tn_rpc_req_t *req = g->head;
        g->head = req->qnext;
        if (!g->head)
            g->tail = NULL;
        req->qnext = NULL;
        req->queued = false;
        g->running++;
        req_run(req, req->payload, req->len);
    }
    g->draining = false;
}

static void gate_unqueue(gate_t *g, tn_rpc_req_t *req)
{
    tn_rpc_req_t **pp = &g->head, *prev = NULL;
    while (*pp && *pp != req) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (!*pp)
        return;
    *pp = req->qnext;
    if (g->tail == req)
        g->tail = prev;
    req->qnext = NULL;
    req->queued = false;
}

void tn_rpc_reply(tn_rpc_req_t *req, uint16_t status, const char *ctype, const void *body,
                  size_t len)
{
    if (req->ss) {
        if (!req->cancelled)
            req_write_reply(req, status, ctype, body, len);
        tn_u64map_del(&req->ss->reqs, req->id);
    }
    /* The gate first: freeing the last request of a closing endpoint
     * frees the endpoint, gates included. */
    gate_t *g = req->gate;
    if (g) {
        g->running--;
        gate_drain(g);
    }
    req_free(req);
}

void tn_rpc_reply_error(tn_rpc_req_t *req, uint16_t status, const char *msg)
{
    static const char json[] = "application/json";
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_buf_append(&b, "{\"error\":\"", 10) != 0 || tn_buf_json_escape(&b, msg) != 0 ||
        tn_buf_append(&b, "\"}", 2) != 0) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        tn_rpc_reply(req, status, json, oom, sizeof(oom) - 1);
    } else {
        tn_rpc_reply(req, status, json, tn_buf_data(&b), tn_buf_size(&b));
    }
    tn_buf_fini(&b);
}

bool tn_rpc_req_cancelled(const tn_rpc_req_t *req)
{
    return req->cancelled;
}

void tn_rpc_req_on_cancel(tn_rpc_req_t *req, void (*cb)(void *arg, tn_rpc_req_t *req), void *arg)
{
    req->cancel_cb = cb;
    req->cancel_arg = arg;
    if (req->cancelled && cb)
        cb(arg, req);
}

const char *tn_rpc_req_peer(const tn_rpc_req_t *req)
{
    return req->peer;
}

uint64_t tn_rpc_req_id(const tn_rpc_req_t *req)
{
    return req->id;
}

void tn_rpc_on_late_cancel(tn_rpc_t *r, void (*cb)(void *arg, const char *peer, uint64_t id),
                           void *arg)
{
    r->late_cancel = cb;
    r->late_cancel_arg = arg;
}

/* The caller gave up on req (a CANCEL frame) or its stream ended. */
static void req_cancel(tn_rpc_req_t *req)
{
    if (req->cancelled)
        return;
    if (req->queued) {
        /* Answered without running, and its payload goes now rather than
         * when a slot frees. */
        gate_unqueue(req->gate, req);
        req->gate = NULL;
        STAT(req->r, queued_cancels);
        req_write_reply(req, 503, CT_JSON, CANCELLED, strlen(CANCELLED));
        if (req->ss)
            tn_u64map_del(&req->ss->reqs, req->id);
        req_free(req);
        return;
    }
    req->cancelled = true;
    if (req->cancel_cb)
        req->cancel_cb(req->cancel_arg, req);
}

static void on_echo(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_wire_in_t in;
    const uint8_t *body = NULL;
    size_t blen = 0;
    tn_wire_in_init(&in, payload, len);
    tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &body, &blen);
    if (tn_wire_end(&in) != 0) {
        tn_rpc_reply(req, 400, CT_JSON, UNSUPPORTED, strlen(UNSUPPORTED));
        return;
    }
    tn_rpc_reply(req, 200, CT_BYTES, body, blen);
}

static int server_request(sstream_t *ss, const tn_wire_hdr_t *h, const uint8_t *payload)
{
    tn_rpc_t *r = ss->r;
    uint8_t op = h->len ? payload[0] : 0;
    tn_rpc_handler_t *hd = &r->handlers[op];
    if (tn_u64map_get(&ss->reqs, h->id))
        return TN_EPROTO; /* a request id reused while the first runs */
    tn_rpc_req_t *req = tn_calloc(1, sizeof *req);
    if (!req)
        return UV_ENOMEM;
    req->r = r;
    req->ss = ss;
    req->id = h->id;
    req->op = op;
    snprintf(req->peer, sizeof req->peer, "%s", ss->peer);
    r->live_reqs++;
    if (!hd->fn || tn_wire_request_check(payload, h->len) != 0) {
        req_write_reply(req, 400, CT_JSON, UNSUPPORTED, strlen(UNSUPPORTED));
        req_free(req);
        return 0;
    }
    int rc = tn_u64map_put(&ss->reqs, h->id, req);
    if (rc != 0) {
        req_free(req);
        return rc;
    }
    const uint8_t *fields = payload + 1;
    size_t flen = h->len - 1;
    if (hd->flags & TN_RPC_OP_EXEMPT) {
        req_run(req, fields, flen);
        return 0;
    }
    gate_t *g = &r->gates[(hd->flags & TN_RPC_OP_COMMIT) ? 0 : 1];
    req->gate = g;
    if (g->running < g->limit && !g->head) {
        g->running++;
        req_run(req, fields, flen);
        return 0;
    }
    req->payload = tn_malloc(flen ? flen : 1);
    if (!req->payload) {
        tn_u64map_del(&ss->reqs, h->id);
        req_free(req);
        return UV_ENOMEM;
    }
    memcpy(req->payload, fields, flen);
    req->len = flen;
    req->queued = true;
    if (g->tail)
        g->tail->qnext = req;
    else
        g->head = req;
    g->tail = req;
    return 0;
}

static int on_server_frame(void *arg, const tn_wire_hdr_t *h, const uint8_t *payload)
{
    sstream_t *ss = arg;
    tn_rpc_t *r = ss->r;
    if (!ss->authed) {
        uint8_t ekm[TN_QUIC_EKM_LEN], proof[TN_WIRE_PROOF_LEN];
        int rc = tn_quic_conn_ekm(ss->qc, ekm);
        if (rc != 0)
            return rc;
        rc = tn_wire_auth_check(r->secret, r->secret_len, true, ekm, h, payload);
        if (rc == UV_EACCES && r->accept_any_proof)
            rc = 0;
        if (rc != 0)
            return rc;
        rc = tn_wire_proof(r->secret, r->secret_len, false, ekm, proof);
        if (rc == 0)
            rc = stream_send_frame(ss->qs, TN_WF_AUTH, 0, proof, sizeof proof);
        if (rc != 0)
            return rc;
        ss->authed = true;
        ss->fr.max = TN_WIRE_MAX_PAYLOAD;
        return 0;
    }
    switch (h->type) {
    case TN_WF_REQUEST:
        STAT(r, requests_in);
        return server_request(ss, h, payload);
    case TN_WF_CANCEL: {
        tn_rpc_req_t *req = tn_u64map_get(&ss->reqs, h->id);
        if (req)
            req_cancel(req);
        else if (r->late_cancel)
            r->late_cancel(r->late_cancel_arg, ss->peer, h->id); /* it crossed the reply */
        return 0;
    }
    case TN_WF_PING:
        return stream_send_frame(ss->qs, TN_WF_PONG, h->id, NULL, 0);
    case TN_WF_ERROR:
        return 0;
    default:
        return TN_EPROTO;
    }
}

static void sstream_end(sstream_t *ss)
{
    size_t pos = 0;
    uint64_t id;
    void *v;
    /* Detach first: a cancel callback may reply at once. */
    tn_rpc_req_t *list = NULL;
    while (tn_u64map_next(&ss->reqs, &pos, &id, &v)) {
        tn_rpc_req_t *req = v;
        req->ss = NULL;
        req->qnext = req->queued ? req->qnext : NULL;
        if (!req->queued) {
            req->qnext = list;
            list = req;
        }
    }
    /* Queued ones never run: drop them from their gates. */
    pos = 0;
    while (tn_u64map_next(&ss->reqs, &pos, &id, &v)) {
        tn_rpc_req_t *req = v;
        if (req->queued) {
            gate_unqueue(req->gate, req);
            req_free(req);
        }
    }
    tn_u64map_fini(&ss->reqs);
    while (list) {
        tn_rpc_req_t *req = list;
        list = req->qnext;
        req->qnext = NULL;
        req_cancel(req);
    }
    tn_wire_framer_fini(&ss->fr);
    tn_rpc_t *r = ss->r;
    if (ss->prev)
        ss->prev->next = ss->next;
    else
        r->sstreams = ss->next;
    if (ss->next)
        ss->next->prev = ss->prev;
    tn_free(ss);
}

static void on_sstream_data(void *arg, tn_quic_stream_t *qs, const uint8_t *data, size_t n)
{
    sstream_t *ss = arg;
    int rc = tn_wire_framer_push(&ss->fr, data, n, on_server_frame, ss);
    if (rc == 0)
        return;
    if (!ss->authed)
        STAT(ss->r, streams_refused);
    if (!ss->authed && rc != UV_ENOMEM)
        TN_LOG_RL(TN_LOG_WARN, 5000,
                  "rpc: stream from %s did not prove the cluster secret (%s); reset", ss->peer,
                  rc == UV_EACCES    ? "a wrong proof"
                  : rc == TN_EPROTO  ? "its first frame is no AUTH frame"
                  : rc == TN_ETOOBIG ? "a first frame over the pre-auth cap"
                                     : tn_strerror(rc));
    else
        TN_LOG_RL(TN_LOG_WARN, 5000,
                  "rpc: stream from %s sent a frame this node refuses (%s); reset", ss->peer,
                  tn_strerror(rc));
    tn_quic_stream_reset(qs, ss->authed ? APP_PROTO : APP_AUTH_FAIL);
    ss->qs = NULL;
    sstream_end(ss);
}

static void on_sstream_closed(void *arg, tn_quic_stream_t *qs, int err)
{
    sstream_t *ss = arg;
    ss->qs = NULL;
    sstream_end(ss);
}

static const tn_quic_stream_cbs_t sstream_cbs = {on_sstream_data, on_sstream_closed};

static void on_server_stream(void *arg, tn_quic_conn_t *qc, tn_quic_stream_t *qs)
{
    tn_rpc_t *r = arg;
    if (r->closing)
        return; /* left without callbacks: reset */
    sstream_t *ss = tn_calloc(1, sizeof *ss);
    if (!ss)
        return;
    ss->r = r;
    ss->qs = qs;
    ss->qc = qc;
    snprintf(ss->peer, sizeof ss->peer, "%s", tn_quic_conn_peer(qc));
    tn_u64map_init(&ss->reqs);
    tn_wire_framer_init(&ss->fr, TN_WIRE_PROOF_CAP - TN_WIRE_HDR);
    ss->next = r->sstreams;
    if (r->sstreams)
        r->sstreams->prev = ss;
    r->sstreams = ss;
    tn_quic_stream_set_cbs(qs, &sstream_cbs, ss);
}

/* Once a second: a server stream holding replies the caller has not
 * acknowledged any of for the budget (the reply write timeout, plus 1 s
 * per 256 KiB outstanding) is reset. The caller stopped reading, or its
 * path died without the connection noticing: the replies' memory goes and
 * the requests end as if the stream had. */
static void on_write_timer(uv_timer_t *t)
{
    tn_rpc_t *r = t->data;
    uint64_t now = uv_now(r->loop);
    sstream_t *next;
    for (sstream_t *ss = r->sstreams; ss; ss = next) {
        next = ss->next;
        if (!ss->qs)
            continue;
        size_t out = tn_quic_stream_unacked(ss->qs);
        uint64_t acked = tn_quic_stream_acked(ss->qs);
        if (out == 0 || acked != ss->last_acked || ss->stall_ms == 0) {
            ss->last_acked = acked;
            ss->stall_ms = out == 0 ? 0 : now;
            continue;
        }
        uint64_t budget = r->reply_write_ms + (uint64_t)(out / (256 * 1024)) * 1000;
        if (now - ss->stall_ms < budget)
            continue;
        STAT(r, reply_write_timeouts);
        TN_LOG_RL(TN_LOG_WARN, 5000,
                  "rpc: stream from %s: %zu reply bytes unacknowledged for %" PRIu64 " ms; reset",
                  ss->peer, out, now - ss->stall_ms);
        tn_quic_stream_reset(ss->qs, APP_PROTO);
        ss->qs = NULL;
        sstream_end(ss);
    }
}

static const tn_quic_conn_cbs_t server_conn_cbs = {NULL, on_server_stream, NULL};

/* --- open, metrics, close ---------------------------------------------------------------- */

static unsigned default_bound(void)
{
    unsigned n = 4 * (unsigned)uv_available_parallelism();
    return n > 64 ? n : 64;
}

int tn_rpc_open(uv_loop_t *loop, const tn_rpc_opts_t *o, tn_rpc_t **out, char *err, size_t errlen)
{
    if (!o->secret || o->secret_len == 0) {
        tn_errbuf(err, errlen, "rpc: an empty cluster secret");
        return TN_ECONFIG;
    }
    /* Read the way every listener option is (core/netaddr.h): "" or
     * [::] is every interface, IPv4 and IPv6 on one socket; a host name
     * resolves here, at startup. */
    tn_hostport_t hp;
    tn_netaddr_t na;
    char why[128] = "missing";
    if (!o->bind || tn_netaddr_split(o->bind, &hp, why, sizeof why) != 0 ||
        tn_netaddr_resolve(&hp, 0, &na, why, sizeof why) != 0) {
        tn_errbuf(err, errlen, "rpc: bind address %s: %s", o->bind ? o->bind : "(none)", why);
        return TN_ECONFIG;
    }
    struct sockaddr_storage sa = na.sa;
    tn_rpc_t *r = tn_calloc(1, sizeof *r);
    if (!r || !(r->secret = tn_malloc(o->secret_len))) {
        tn_free(r);
        tn_errbuf(err, errlen, "rpc: out of memory");
        return UV_ENOMEM;
    }
    r->loop = loop;
    memcpy(r->secret, o->secret, o->secret_len);
    r->secret_len = o->secret_len;
    r->dial_ms = o->dial_timeout_ms ? o->dial_timeout_ms : 1000;
    r->reply_ms = o->reply_timeout_ms ? o->reply_timeout_ms : 5000;
    r->ping_ms = o->ping_timeout_ms ? o->ping_timeout_ms : 1000;
    r->ping_interval_ms = o->ping_interval_ms ? o->ping_interval_ms : 1000;
    r->idle_ms = o->idle_timeout_ms ? o->idle_timeout_ms : 30000;
    r->lane_streams = o->lane_streams;
#ifdef TN_TEST
    r->accept_any_proof = o->test_accept_any_proof;
#endif
    r->gates[0].limit = o->max_commits ? o->max_commits : default_bound();
    r->gates[1].limit = o->max_messaging ? o->max_messaging : default_bound();
    for (size_t i = 0; i < o->nhandlers; i++)
        r->handlers[o->handlers[i].op] = o->handlers[i];
    r->handlers[TN_OP_ECHO] = (tn_rpc_handler_t){TN_OP_ECHO, TN_RPC_OP_EXEMPT, on_echo, NULL};
    tn_u64map_init(&r->calls);
    tn_buf_init(&r->scratch);
    for (int i = 0; i < 256; i++)
        tn_hist_init(&r->hist[i]);
    int rc = tn_wire_reset_key(r->secret, r->secret_len, r->reset_key);
    if (rc != 0) {
        tn_errbuf(err, errlen, "rpc: deriving the stateless reset key: %s", tn_strerror(rc));
        goto err_after_alloc;
    }
    tn_quic_ep_opts_t qo;
    memset(&qo, 0, sizeof qo);
    qo.bind = (const struct sockaddr *)&sa;
    memcpy(qo.reset_key, r->reset_key, sizeof qo.reset_key);
    qo.accept = true;
    qo.server_cbs = &server_conn_cbs;
    qo.server_arg = r;
    qo.idle_timeout_ms = r->idle_ms;
#ifdef TN_TEST
    qo.silent_close = o->test_silent_close;
#endif
    rc = tn_quic_ep_open(loop, &qo, &r->ep, err, errlen);
    if (rc != 0)
        goto err_after_alloc;
    r->open_handles = 1;
    r->reply_write_ms = o->reply_write_timeout_ms ? o->reply_write_timeout_ms : 5000;
    uv_timer_init(loop, &r->write_timer);
    r->write_timer.data = r;
    uv_timer_start(&r->write_timer, on_write_timer, 1000, 1000); /* closed last (maybe_freed) */
    struct sockaddr_storage local;
    tn_quic_ep_addr(r->ep, &local);
    tn_netaddr_format(&local, r->addr, sizeof r->addr);
    *out = r;
    return 0;

err_after_alloc:
    tn_u64map_fini(&r->calls);
    tn_buf_fini(&r->scratch);
    tn_free(r->secret);
    tn_free(r);
    return rc;
}

const char *tn_rpc_addr(const tn_rpc_t *r)
{
    return r->addr;
}

int tn_rpc_metrics_write(const tn_rpc_t *r, tn_buf_t *out)
{
    char line[256];
    bool any = false;
    int rc = 0;
    for (int op = 0; op < 256 && rc == 0; op++) {
        const char *name = tn_wire_op_name((uint8_t)op);
        for (int o = 0; o < OUT__COUNT && rc == 0; o++) {
            if (!r->counts[op][o])
                continue;
            if (!any) {
                const char *head = "# HELP tern_cluster_rpc_requests_total Node RPC calls this "
                                   "node made, by op and outcome.\n"
                                   "# TYPE tern_cluster_rpc_requests_total counter\n";
                rc = tn_buf_append(out, head, strlen(head));
                any = true;
            }
            int n =
                snprintf(line, sizeof line,
                         "tern_cluster_rpc_requests_total{op=\"%s\",outcome=\"%s\"} %" PRIu64 "\n",
                         name ? name : "unknown", outcome_names[o], r->counts[op][o]);
            if (rc == 0)
                rc = tn_buf_append(out, line, (size_t)n);
        }
    }
    bool first = true;
    for (int op = 0; op < 256 && rc == 0; op++) {
        bool used = false;
        for (int o = 0; o < OUT__COUNT; o++)
            used = used || r->counts[op][o];
        if (!used)
            continue;
        const char *name = tn_wire_op_name((uint8_t)op);
        snprintf(line, sizeof line, "op=\"%s\"", name ? name : "unknown");
        rc = tn_hist_write(&r->hist[op], "tern_cluster_rpc_request_seconds", line,
                           first ? "Node RPC call duration (seconds) as the caller saw it." : NULL,
                           out);
        first = false;
    }
    return rc;
}

/* The last step of a close: the write timer was kept open for it, so the
 * caller's close callback always runs from the loop, never inside a call
 * of ours (a reply that ended the last request, an endpoint's callback)
 * whose caller still holds what the close callback frees. */
static void on_write_timer_closed(uv_handle_t *h)
{
    tn_rpc_t *r = h->data;
    void (*cb)(void *) = r->close_cb;
    void *arg = r->close_arg;
    /* Peers go last: a call finishing late (a cancel's deferred end)
     * still names its peer. */
    while (r->peers) {
        peer_t *p = r->peers;
        r->peers = p->next;
        tn_free(p);
    }
    tn_u64map_fini(&r->calls);
    tn_buf_fini(&r->scratch);
    tn_free(r->secret);
    tn_free(r);
    if (cb)
        cb(arg);
}

static void maybe_freed(tn_rpc_t *r)
{
    if (!r->closing || r->freeing || r->live_calls || r->live_reqs || r->open_handles)
        return;
    r->freeing = true;
    uv_close((uv_handle_t *)&r->write_timer, on_write_timer_closed);
}

static void on_ep_closed(void *arg)
{
    tn_rpc_t *r = arg;
    r->open_handles--;
    maybe_freed(r);
}

void tn_rpc_close(tn_rpc_t *r, void (*cb)(void *arg), void *arg)
{
    if (r->closing)
        return;
    r->closing = true;
    r->close_cb = cb;
    r->close_arg = arg;
    /* Pending calls first, while their streams are still there. */
    for (peer_t *p = r->peers; p; p = p->next) {
        fail_list(&p->waiting, TN_ECLOSED, "closing", p->addr);
        for (int l = 0; l < TN_LANE_COUNT; l++)
            for (int i = 0; i < TN_LANE_STREAMS; i++)
                if (p->lanes[l][i])
                    fail_list(&p->lanes[l][i]->calls, TN_ECLOSED, "closing", p->addr);
    }
    /* Closing the endpoints ends every connection: client streams go, and
     * server streams cancel their requests. */
    r->open_handles++; /* held while the endpoints close */
    uv_timer_stop(&r->write_timer);
    tn_quic_ep_close(r->ep, on_ep_closed, r);
    if (r->bulk_ep)
        tn_quic_ep_close(r->bulk_ep, on_ep_closed, r);
    for (peer_t *p = r->peers; p; p = p->next) {
        if (p->resolving)
            uv_cancel((uv_req_t *)&p->gai); /* its callback still comes */
        uv_close((uv_handle_t *)&p->dial_timer, on_peer_handle_closed);
        uv_close((uv_handle_t *)&p->ping_timer, on_peer_handle_closed);
    }
    /* Requests still queued never run. */
    for (int g = 0; g < 2; g++)
        while (r->gates[g].head) {
            tn_rpc_req_t *req = r->gates[g].head;
            gate_unqueue(&r->gates[g], req);
            req_free(req);
        }
    r->open_handles--;
    maybe_freed(r);
}
