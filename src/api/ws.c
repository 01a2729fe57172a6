/* The live WebSocket feed. See ws.h. Frames are read and written with
 * libwslay's event API: its receive callback takes bytes from the HTTP
 * connection's input, its send callback appends to the connection's
 * output (which always accepts everything: the budget and the one-frame
 * rule bound what is queued). */
#include "core/platform.h"

#include "api/ws.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "api/drain.h"
#include "proto/http/json.h"
#include "proto/addr.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <wslay/wslay.h>
#include <yajl/yajl_tree.h>

#define WS_GUID             "258EAFA5-E914-47DA-95CA-C5AB0DC11B65"
#define MAX_CONTROL         (64 * 1024) /* largest message a client may send */
#define MAX_SECRET          4096
#define MAX_PENDING_CONTROL (1024 * 1024) /* control bytes a client may leave unread */
#define ERR_JSON            "application/json; charset=utf-8"
#define CLOSE_GOING_AWAY    1001
#define CLOSE_PROTOCOL      1002
#define CLOSE_TOO_BIG       1009
#define CLOSE_POLICY        1008
#define CLOSE_INTERNAL      1011
#define CLOSE_RESTART       1012
#define CLOSE_TRY_LATER     1013
#define CONSUMER_SLACK_MS   1000

typedef enum { S_HANDSHAKE = 0, S_AUTH, S_READY, S_CLOSING, S_GONE } sstate_t;

typedef struct session_s session_t;

struct tn_ws_s {
    uv_loop_t *loop;
    tn_ws_opts_t o;
    session_t *sessions;
    uint32_t nsessions;
    uint64_t next_id;
    uint64_t budget_used;
    session_t *budget_waiters; /* FIFO through bnext */
    session_t *budget_tail;
    tn_ws_stats_t st;
    tn_buf_t frame; /* scratch for one binary frame */
};

struct session_s {
    tn_ws_t *ws;
    tn_http_conn_t *hc;     /* after the upgrade, until the connection is gone */
    tn_http_request_t *req; /* parked while a Bearer secret is checked */
    wslay_event_context_ptr ctx;
    sstate_t state;
    uint32_t refs;
    uint64_t id;
    char topic[TN_NAME_MAX + 1];
    char remote[64];
    char accept[64]; /* Sec-WebSocket-Accept */
    tn_consumer_t cons;
    bool attached;
    tn_auth_req_t areq;
    bool authing;
    tn_authz_t *authz;
    char *secret; /* the secret authz came from, checked again when authz expires; owned */
    /* Without AUTH: the opts' protected_gen when the topic was last found
     * open (UINT64_MAX: not yet); auth_current asks again once it moved. */
    uint64_t open_gen;
    const char *rx; /* input being fed to wslay */
    size_t rx_len;
    /* The client's frame headers, read ahead of wslay (scan_frames): the
     * one being read, and the payload bytes left of the current frame. */
    uint8_t fh[14];
    uint8_t fh_len;
    bool rx_failed; /* a frame was refused: nothing more is read */
    uint64_t fpay_left;
    uv_timer_t hb;
    uv_timer_t deadline;
    int64_t last_rx_ms;
    /* the delivery held: waiting for frame budget, or its frame queued */
    bool held;
    bool inflight; /* its frame is queued */
    bool written;  /* whole, waiting for its finish to run */
    uint32_t part;
    uint64_t off;
    uint32_t nonce;
    uint16_t attempts;
    int64_t publish_ns;
    int64_t left_ms; /* its remaining TTL when delivered */
    tn_msg_t *msg;
    size_t frame_bytes;
    bool waiting_budget;
    const char *fail_code; /* a failure found inside an engine callback, for the timer */
    const char *fail_detail;
    session_t *bnext;
    session_t *prev;
    session_t *next;
};

/* --- options ------------------------------------------------------------------ */

/* scheme://host[:port] with nothing else: no path, no wildcard. */
static bool origin_valid(const char *s, size_t len)
{
    const char *sep = NULL;
    for (size_t i = 0; i + 2 < len; i++) {
        if (memcmp(s + i, "://", 3) == 0) {
            sep = s + i;
            break;
        }
    }
    if (sep == NULL || sep == s)
        return false;
    for (const char *p = s; p < sep; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '+' || *p == '-' ||
              *p == '.'))
            return false;
    }
    const char *host = sep + 3, *end = s + len;
    if (host == end)
        return false;
    for (const char *p = host; p < end; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '/' || ch == '*' || ch == '?' || ch == '#' || ch == '@' || ch <= ' ' ||
            ch >= 0x7f)
            return false;
    }
    return true;
}

int tn_ws_opts_from_config(tn_ws_opts_t *o, const tn_config_t *cfg, char *err, size_t errlen)
{
    memset(o, 0, sizeof(*o));
    o->node_id = cfg->node_id;
    o->max_connections = (uint32_t)cfg->websocket_max_connections;
    o->max_per_topic = (uint32_t)cfg->websocket_max_connections_per_topic;
    o->frame_budget = (uint64_t)cfg->websocket_frame_inflight_bytes;
    o->heartbeat_ms = cfg->websocket_heartbeat_interval_ns / 1000000;
    o->auth_timeout_ms = cfg->websocket_auth_timeout_ns / 1000000;
    o->write_timeout_ms = cfg->websocket_write_timeout_ns / 1000000;
    const char *p = cfg->websocket_allowed_origins;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len > 0) {
            if (!origin_valid(p, len) || len >= sizeof(o->origins[0])) {
                tn_errbuf(err, errlen,
                          "websocket-allowed-origins: \"%.*s\" is not an exact origin "
                          "(scheme://host[:port], no path, no wildcard)",
                          (int)TN_MIN(len, (size_t)200), p);
                return TN_ECONFIG;
            }
            if (o->norigins == TN_WS_MAX_ORIGINS) {
                tn_errbuf(err, errlen, "websocket-allowed-origins: more than %d origins",
                          TN_WS_MAX_ORIGINS);
                return TN_ECONFIG;
            }
            memcpy(o->origins[o->norigins], p, len);
            o->origins[o->norigins][len] = '\0';
            o->norigins++;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}

bool tn_ws_origin_allowed(const tn_ws_opts_t *o, const char *origin, size_t len)
{
    for (uint32_t i = 0; i < o->norigins; i++) {
        if (strlen(o->origins[i]) == len && memcmp(o->origins[i], origin, len) == 0)
            return true;
    }
    return false;
}

/* --- session lifetime ------------------------------------------------------------ */

static void session_unref(session_t *s)
{
    if (--s->refs > 0)
        return;
    if (s->ctx != NULL)
        wslay_event_context_free(s->ctx);
    tn_authz_unref(s->authz);
    tn_free(s->secret);
    tn_free(s);
}

static void on_timer_closed(uv_handle_t *h)
{
    session_unref(h->data);
}

static void budget_unwait(session_t *s)
{
    if (!s->waiting_budget)
        return;
    tn_ws_t *ws = s->ws;
    session_t **pp = &ws->budget_waiters, *prev = NULL;
    while (*pp != NULL && *pp != s) {
        prev = *pp;
        pp = &(*pp)->bnext;
    }
    if (*pp == s) {
        *pp = s->bnext;
        if (ws->budget_tail == s)
            ws->budget_tail = prev;
    }
    s->bnext = NULL;
    s->waiting_budget = false;
}

static void try_send(session_t *s);

/* Deliveries waiting for budget go out, oldest first. */
static void budget_release(tn_ws_t *ws, size_t bytes)
{
    ws->budget_used -= bytes;
    while (ws->budget_waiters != NULL && ws->budget_used < ws->o.frame_budget) {
        session_t *s = ws->budget_waiters;
        budget_unwait(s);
        try_send(s);
        if (s->waiting_budget)
            break; /* still too big for what is free */
    }
}

static void drop_held(session_t *s)
{
    if (s->inflight)
        budget_release(s->ws, s->frame_bytes);
    tn_msg_unref(s->msg);
    s->msg = NULL;
    s->held = s->inflight = s->written = false;
}

/* Let go of the queue: lease, channel, budget, auth. */
static void session_detach(session_t *s)
{
    if (s->authing) {
        tn_nsqauth_cancel(&s->areq);
        s->authing = false;
    }
    budget_unwait(s);
    if (s->held)
        drop_held(s);
    if (s->attached) {
        s->attached = false;
        tn_consumer_detach(&s->cons); /* the lease goes back; the channel goes */
    }
}

/* The session ends for good: everything let go, timers closed, unlinked. */
static void session_end(session_t *s)
{
    if (s->state == S_GONE)
        return;
    s->state = S_GONE;
    tn_ws_t *ws = s->ws;
    session_detach(s);
    s->hc = NULL;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        ws->sessions = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    ws->nsessions--;
    uv_close((uv_handle_t *)&s->hb, on_timer_closed);
    uv_close((uv_handle_t *)&s->deadline, on_timer_closed);
    session_unref(s);
}

/* --- output ------------------------------------------------------------------ */

static void send_queued(session_t *s)
{
    if (s->ctx != NULL && s->state != S_GONE)
        (void)wslay_event_send(s->ctx);
}

static void queue_text(session_t *s, const char *text, size_t len)
{
    struct wslay_event_msg m = {WSLAY_TEXT_FRAME, (const uint8_t *)text, len};
    (void)wslay_event_queue_msg(s->ctx, &m);
}

static int close_code_for(const char *code)
{
    if (strcmp(code, "E_SHUTDOWN") == 0 || strcmp(code, "E_DRAINING") == 0 ||
        strcmp(code, "E_WS_HEARTBEAT") == 0)
        return CLOSE_GOING_AWAY;
    if (strcmp(code, "E_TOPIC_CLOSED") == 0 || strcmp(code, "E_WS_TTL_REQUIRED") == 0 ||
        strcmp(code, "E_OWNER_CHANGED") == 0)
        return CLOSE_RESTART;
    if (strcmp(code, "E_WS_CAPACITY") == 0 || strcmp(code, "E_AUTH_OVERLOADED") == 0)
        return CLOSE_TRY_LATER;
    if (strcmp(code, "E_INTERNAL") == 0)
        return CLOSE_INTERNAL;
    return CLOSE_POLICY;
}

/* head, then `<code>","detail":"<detail>"}`, both escaped, into b: an
 * error's JSON (head opens it up to the code's quote). */
static int error_json(tn_buf_t *b, const char *head, const char *code, const char *detail)
{
    int rc = tn_buf_append(b, head, strlen(head));
    if (rc == 0)
        rc = tn_buf_json_escape(b, code);
    if (rc == 0)
        rc = tn_buf_append(b, "\",\"detail\":\"", 12);
    if (rc == 0)
        rc = tn_buf_json_escape(b, detail);
    if (rc == 0)
        rc = tn_buf_append(b, "\"}", 2);
    return rc;
}

/* A terminal error: the error control frame, a Close frame with the code
 * as its reason, then the connection closes once they are written. */
static void session_fail(session_t *s, const char *code, const char *detail)
{
    if (s->state == S_CLOSING || s->state == S_GONE)
        return;
    s->state = S_CLOSING;
    session_detach(s);
    uv_timer_stop(&s->hb);
    uv_timer_stop(&s->deadline);
    if (s->hc == NULL)
        return;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = error_json(&b, "{\"type\":\"error\",\"code\":\"", code, detail);
    s->refs++;
    if (rc == 0) {
        /* Out before the Close is queued: wslay sends control frames
         * ahead of data frames. */
        queue_text(s, tn_buf_data(&b), tn_buf_size(&b));
        send_queued(s);
    }
    tn_buf_fini(&b);
    (void)wslay_event_queue_close(s->ctx, (uint16_t)close_code_for(code), (const uint8_t *)code,
                                  strlen(code));
    send_queued(s);
    if (s->hc != NULL)
        tn_http_conn_close(s->hc);
    session_unref(s);
}

/* --- delivery ------------------------------------------------------------------ */

static void on_deadline(uv_timer_t *t);
static bool auth_current(session_t *s);

/* Fail from the timer: the engine's callbacks must not see their consumer
 * detached under them. */
static void fail_soon(session_t *s, const char *code, const char *detail)
{
    if (s->fail_code != NULL)
        return;
    s->fail_code = code;
    s->fail_detail = detail;
    uv_timer_start(&s->deadline, on_deadline, 0, 0);
}

/* The held frame was written whole (or its message expired): finish the
 * message. Runs from the timer, never inside the engine's callback. */
static void frame_done(session_t *s)
{
    uint32_t part = s->part, nonce = s->nonce;
    uint64_t off = s->off;
    if (s->frame_bytes > 0) {
        s->ws->st.messages++;
        s->ws->st.bytes += s->frame_bytes;
    }
    drop_held(s);
    (void)tn_consumer_fin(&s->cons, part, off, true, nonce);
}

static void on_deadline(uv_timer_t *t)
{
    session_t *s = t->data;
    if (s->fail_code != NULL) {
        session_fail(s, s->fail_code, s->fail_detail);
        return;
    }
    if (s->state == S_AUTH) {
        s->ws->st.auth_failures++;
        session_fail(s, "E_AUTH_TIMEOUT", "no auth control frame before the deadline");
        return;
    }
    if (s->state == S_READY && s->held && !s->inflight && !s->waiting_budget) {
        try_send(s); /* the grants were checked again */
        return;
    }
    if (s->state != S_READY || !s->inflight)
        return;
    if (s->written) {
        frame_done(s);
        return;
    }
    /* A frame cannot be taken back half-written: the connection goes. */
    s->ws->st.slow_closes++;
    TN_LOG(TN_LOG_INFO, "websocket %s: frame not written in time; closing", s->remote);
    s->refs++;
    session_detach(s);
    s->state = S_CLOSING;
    uv_timer_stop(&s->hb);
    if (s->hc != NULL)
        tn_http_conn_abort(s->hc);
    session_unref(s);
}

static void on_drain(void *arg)
{
    session_t *s = arg;
    if (s->inflight && !s->written && s->state == S_READY) {
        s->written = true;
        uv_timer_start(&s->deadline, on_deadline, 0, 0);
    }
}

static void put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

/* Queue the held delivery's frame when the node's frame budget allows. */
static void try_send(session_t *s)
{
    tn_ws_t *ws = s->ws;
    if (!s->held || s->inflight || s->state != S_READY || !auth_current(s))
        return;
    size_t bytes = TN_WS_HDR + s->msg->len;
    if (ws->budget_used > 0 && ws->budget_used + bytes > ws->o.frame_budget) {
        s->waiting_budget = true;
        s->bnext = NULL;
        if (ws->budget_tail != NULL)
            ws->budget_tail->bnext = s;
        else
            ws->budget_waiters = s;
        ws->budget_tail = s;
        return;
    }
    tn_buf_reset(&ws->frame);
    if (tn_buf_reserve(&ws->frame, bytes) != 0) {
        fail_soon(s, "E_INTERNAL", "out of memory");
        return;
    }
    unsigned char *h = (unsigned char *)ws->frame.base;
    static const unsigned char magic[4] = {'T', 'N', 'L', '1'};
    memcpy(h, magic, sizeof(magic));
    put_u16(h + 4, TN_WS_HDR);
    put_u16(h + 6, s->attempts);
    put_u64(h + 8, (uint64_t)s->publish_ns);
    put_u64(h + 16, ((uint64_t)s->part << 48) | s->off);
    memcpy(h + TN_WS_HDR, s->msg->data, s->msg->len);
    struct wslay_event_msg m = {WSLAY_BINARY_FRAME, h, bytes};
    if (wslay_event_queue_msg(s->ctx, &m) != 0) {
        fail_soon(s, "E_INTERNAL", "cannot queue the frame");
        return;
    }
    s->inflight = true;
    s->written = false;
    s->frame_bytes = bytes;
    ws->budget_used += bytes;
    send_queued(s);
    if (s->hc == NULL || s->state != S_READY || !s->inflight)
        return;
    if (tn_http_conn_pending(s->hc) == 0) {
        s->written = true;
        uv_timer_start(&s->deadline, on_deadline, 0, 0);
    } else {
        int64_t ms = TN_MIN(ws->o.write_timeout_ms, s->left_ms);
        uv_timer_start(&s->deadline, on_deadline, (uint64_t)TN_MAX(ms, (int64_t)1), 0);
    }
}

static void on_deliver(tn_consumer_t *cons, const tn_delivery_t *d)
{
    session_t *s = cons->data;
    tn_topic_t *t = cons->ch->topic;
    if (s->state != S_READY || s->inflight)
        return; /* its lease runs out; the channel goes with the session */
    if (s->held) {
        /* The one waiting for budget outlived its lease: this replaces it. */
        budget_unwait(s);
        drop_held(s);
    }
    s->held = true;
    s->part = d->partition;
    s->off = d->offset;
    s->nonce = d->nonce;
    s->attempts = d->attempts;
    s->publish_ns = d->publish_ns;
    s->msg = tn_msg_ref(d->body);
    s->left_ms = t->ttl_ms - (tn_now_wall_ms() - d->publish_ns / 1000000);
    if (t->ttl_ms > 0 && s->left_ms <= 0) {
        /* Expired on the way: finished without a frame. */
        s->inflight = s->written = true;
        s->frame_bytes = 0;
        uv_timer_start(&s->deadline, on_deadline, 0, 0);
        return;
    }
    if (t->ttl_ms <= 0) {
        s->ws->st.ttl_rejections++;
        fail_soon(s, "E_WS_TTL_REQUIRED", "the topic is no longer ttl_discard");
        return;
    }
    try_send(s);
}

static void on_kick(tn_consumer_t *cons)
{
    session_t *s = cons->data;
    session_fail(s, "E_TOPIC_CLOSED", "the topic or its channel was deleted");
}

/* A partition of the topic that this node served is now led by another
 * node (a move's hand-over, a failover): the feed no longer carries its
 * messages. Closed (the engine detached cons already), as NSQ consumers
 * are, so the client looks the topic up again and connects to its
 * owners. */
static void on_moved(tn_consumer_t *cons)
{
    session_t *s = cons->data;
    session_fail(s, "E_OWNER_CHANGED",
                 "a partition of the topic that this node served is now led by another node: "
                 "look the topic up again (/lookup) and connect to its owners");
}

/* --- ready ------------------------------------------------------------------ */

static void on_heartbeat(uv_timer_t *t)
{
    session_t *s = t->data;
    if (s->state != S_READY && s->state != S_AUTH)
        return;
    if (tn_now_mono_ms() - s->last_rx_ms > 2 * s->ws->o.heartbeat_ms) {
        session_fail(s, "E_WS_HEARTBEAT", "no frame from the peer for two heartbeat intervals");
        return;
    }
    struct wslay_event_msg m = {WSLAY_PING, (const uint8_t *)"hb", 2};
    (void)wslay_event_queue_msg(s->ctx, &m);
    send_queued(s);
    if (s->state == S_READY)
        (void)auth_current(s); /* an idle feed whose grants went is closed too */
}

static void go_ready(session_t *s)
{
    tn_ws_t *ws = s->ws;
    uv_timer_stop(&s->deadline);
    tn_topic_t *t = NULL;
    int rc = ws->o.broker != NULL
                 ? tn_broker_topic(ws->o.broker, s->topic, strlen(s->topic), false, 0, NULL, &t)
                 : TN_ENOTFOUND;
    if (rc != 0) {
        session_fail(s, "E_TOPIC_CLOSED", "the topic is gone");
        return;
    }
    if (t->ttl_ms <= 0) {
        ws->st.ttl_rejections++;
        session_fail(s, "E_WS_TTL_REQUIRED", "the topic is no longer ttl_discard");
        return;
    }
    char chname[96];
    int n = snprintf(chname, sizeof(chname),
                     TN_NAME_FEED_PREFIX "%" PRId64 ".%" PRIu64 "#ephemeral", ws->o.node_id, s->id);
    tn_channel_t *ch = NULL;
    rc = tn_topic_channel(t, chname, (size_t)n, true, NULL, &ch);
    if (rc != 0) {
        session_fail(s, "E_INTERNAL", "cannot create the connection's channel");
        return;
    }
    memset(&s->cons, 0, sizeof(s->cons));
    s->cons.deliver = on_deliver;
    s->cons.kick = on_kick;
    s->cons.moved = on_moved;
    s->cons.data = s;
    s->cons.timeout_ms = ws->o.write_timeout_ms + CONSUMER_SLACK_MS;
    tn_consumer_attach(&s->cons, ch);
    s->attached = true;
    s->state = S_READY;
    char ready[TN_NAME_MAX + 160];
    n = snprintf(ready, sizeof(ready),
                 "{\"type\":\"ready\",\"topic\":\"%s\",\"subscription_id\":\"%" PRIu64
                 "\",\"start\":\"tail\",\"ack\":\"auto\"}",
                 s->topic, s->id);
    queue_text(s, ready, (size_t)n);
    send_queued(s);
    if (s->state == S_READY)
        tn_consumer_credit(&s->cons, 1);
}

/* --- auth ------------------------------------------------------------------ */

static const char *auth_error(session_t *s, tn_auth_result_t result, tn_authz_t *authz, int *status)
{
    if (result == TN_AUTH_OK && tn_authz_can_subscribe(authz, s->topic, "websocket#ephemeral"))
        return NULL;
    s->ws->st.auth_failures++;
    *status = result == TN_AUTH_UNAVAILABLE ? 503 : 403;
    if (result == TN_AUTH_OK || result == TN_AUTH_NONE)
        return "E_UNAUTHORIZED";
    return "E_AUTH_FAILED";
}

static const char *auth_detail(const char *code)
{
    if (strcmp(code, "E_UNAUTHORIZED") == 0)
        return "the secret does not permit subscribing to this topic";
    return "the auth server refused the secret or did not answer";
}

/* An auth check of s ended: NULL when it permits the topic (authz is
 * then s's, in place of what it had), else the error code (authz let go,
 * *status the handshake's answer). */
static const char *take_authz(session_t *s, tn_auth_result_t result, tn_authz_t *authz, int *status)
{
    s->authing = false;
    const char *code = auth_error(s, result, authz, status);
    if (code != NULL) {
        tn_authz_unref(authz);
        return code;
    }
    tn_authz_unref(s->authz);
    s->authz = authz;
    return NULL;
}

/* Grants expire (the auth server's ttl; 60 s for tern's users, whose
 * grants also go stale as soon as a user or topic changes:
 * auth/nsqauth.h tn_authz_current): a feed sends no frame on grants no
 * longer current. The secret is checked again, and the held frame goes
 * when the answer still permits the topic; a secret refused or no longer
 * permitting it (a user deleted, a grant revoked), or an auth server
 * that does not answer, ends the feed with the same error as at the
 * handshake. */
static void on_recheck(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    session_t *s = req->data;
    int status = 0;
    const char *code = take_authz(s, result, authz, &status);
    if (code != NULL) {
        fail_soon(s, code, auth_detail(code)); /* maybe inside the engine's callback */
        return;
    }
    if (s->held && !s->inflight)
        uv_timer_start(&s->deadline, on_deadline, 0, 0); /* try_send, from the timer */
}

/* Whether s may be sent its topic's messages now. Without AUTH: while
 * the topic has no owner (one given an owner since the handshake ends
 * the feed, as the handshake would refuse it). With AUTH: while its
 * grants are current; once not, a check of its secret starts
 * (on_recheck, maybe before this returns). */
static bool auth_current(session_t *s)
{
    tn_ws_t *ws = s->ws;
    if (ws->o.auth == NULL) {
        const uint64_t *gen = ws->o.protected_gen;
        if (gen != NULL && s->open_gen == *gen)
            return true; /* found open, and nothing changed since */
        if (ws->o.is_protected == NULL || !ws->o.is_protected(ws->o.protected_arg, s->topic)) {
            if (gen != NULL)
                s->open_gen = *gen;
            return true;
        }
        if (s->fail_code == NULL)
            ws->st.auth_failures++;
        fail_soon(s, "E_UNAUTHORIZED",
                  "the topic is protected now (it was given an owner) and the feed has no NSQ "
                  "auth configured");
        return false;
    }
    /* The loop's clock, as the NSQ door's needs_recheck: no clock read a
     * frame. */
    if (s->authz == NULL || s->secret == NULL ||
        tn_authz_current(s->authz, (int64_t)uv_now(ws->loop)))
        return true;
    if (s->authing)
        return false;
    char ip[64];
    tn_addr_peer_ip(s->remote, ip, sizeof(ip));
    s->areq.data = s;
    s->authing = true;
    if (tn_nsqauth_check(ws->o.auth, &s->areq, ip, false, "", s->secret, strlen(s->secret),
                         on_recheck) != 0) {
        s->authing = false;
        fail_soon(s, "E_AUTH_OVERLOADED", "cannot start the auth check");
    }
    return false;
}

/* Keep the secret of s's check, for auth_current; false when out of memory. */
static bool keep_secret(session_t *s, const char *secret, size_t len)
{
    tn_free(s->secret);
    s->secret = tn_malloc(len + 1);
    if (s->secret == NULL)
        return false;
    memcpy(s->secret, secret, len);
    s->secret[len] = '\0';
    return true;
}

static void on_frame_auth(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    session_t *s = req->data;
    int status = 0;
    const char *code = take_authz(s, result, authz, &status);
    if (code != NULL) {
        session_fail(s, code, auth_detail(code));
        return;
    }
    go_ready(s);
}

/* {"type":"auth","secret":"..."}: the secret, or NULL. */
static bool parse_auth(const uint8_t *msg, size_t len, char *secret, size_t cap)
{
    if (len == 0 || len > MAX_CONTROL)
        return false;
    char *text = tn_malloc(len + 1);
    if (text == NULL)
        return false;
    memcpy(text, msg, len);
    text[len] = '\0';
    bool ok = false;
    /* Checked first: yajl's tree frees itself one call per level, and
     * this message comes before any authentication (64 KiB of '[' would
     * nest that deep). */
    yajl_val root = tn_json_valid(text, len) ? yajl_tree_parse(text, NULL, 0) : NULL;
    if (YAJL_IS_OBJECT(root)) {
        const char *tp[] = {"type", NULL}, *sp[] = {"secret", NULL};
        yajl_val type = yajl_tree_get(root, tp, yajl_t_string);
        yajl_val sec = yajl_tree_get(root, sp, yajl_t_string);
        const char *tv = type != NULL ? type->u.string : NULL;
        const char *v = sec != NULL ? sec->u.string : NULL;
        if (tv != NULL && v != NULL && strcmp(tv, "auth") == 0) {
            size_t n = strlen(v);
            if (n > 0 && n < cap) {
                memcpy(secret, v, n + 1);
                ok = true;
            }
        }
    }
    yajl_tree_free(root);
    tn_free(text);
    return ok;
}

static void on_auth_frame(session_t *s, const struct wslay_event_on_msg_recv_arg *m)
{
    char secret[MAX_SECRET];
    if (m->opcode != WSLAY_TEXT_FRAME ||
        !parse_auth(m->msg, m->msg_length, secret, sizeof(secret))) {
        s->ws->st.auth_failures++;
        session_fail(s, "E_BAD_AUTH", "expected {\"type\":\"auth\",\"secret\":\"...\"}");
        return;
    }
    if (s->authing || s->ws->o.auth == NULL) {
        session_fail(s, "E_BAD_AUTH", "unexpected auth control frame");
        return;
    }
    if (!keep_secret(s, secret, strlen(secret))) {
        session_fail(s, "E_INTERNAL", "out of memory");
        return;
    }
    char ip[64];
    tn_addr_peer_ip(s->remote, ip, sizeof(ip));
    s->areq.data = s;
    s->authing = true;
    if (tn_nsqauth_check(s->ws->o.auth, &s->areq, ip, false, "", secret, strlen(secret),
                         on_frame_auth) != 0) {
        s->authing = false;
        session_fail(s, "E_AUTH_OVERLOADED", "cannot start the auth check");
    }
}

/* --- input ------------------------------------------------------------------ */

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    session_t *s = user;
    (void)flags;
    if (s->rx_len == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = TN_MIN(len, s->rx_len);
    memcpy(buf, s->rx, n);
    s->rx += n;
    s->rx_len -= n;
    return (ssize_t)n;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    session_t *s = user;
    (void)flags;
    if (s->hc == NULL)
        return (ssize_t)len; /* no connection (the fuzz target): dropped */
    if (tn_http_conn_write(s->hc, data, len) != 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)len;
}

static void ws_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *m,
                   void *user)
{
    session_t *s = user;
    (void)ctx;
    if (m->opcode == WSLAY_PING || m->opcode == WSLAY_PONG || m->opcode == WSLAY_CONNECTION_CLOSE)
        return; /* pongs are queued by wslay; a Close is answered below */
    if (s->state == S_AUTH) {
        on_auth_frame(s, m);
        return;
    }
    if (s->state == S_READY)
        session_fail(s, "E_WS_CONTROL", "the feed takes no data frames from the client");
}

static const struct wslay_event_callbacks callbacks = {
    .recv_callback = ws_recv,
    .send_callback = ws_send,
    .on_msg_recv_callback = ws_msg,
};

/* Check the client's frame headers before wslay reads them (RFC 6455
 * 5.2, 5.5): wslay answers a control frame over 125 bytes, a fragmented
 * one or a length with its top bit set with a Close without a status
 * code, echoes a 1-byte Close body as a clean close, and finds a frame
 * declared past the bound only once its payload comes. Returns how many
 * bytes of data may go to wslay: all of them, or those before the frame
 * refused (*code and *why then say why). */
static size_t scan_frames(session_t *s, const char *data, size_t len, uint16_t *code,
                          const char **why)
{
    size_t i = 0, start = 0;
    *code = 0;
    while (i < len) {
        if (s->fpay_left > 0) {
            size_t n = (size_t)TN_MIN((uint64_t)(len - i), s->fpay_left);
            i += n;
            s->fpay_left -= n;
            continue;
        }
        if (s->fh_len == 0)
            start = i;
        s->fh[s->fh_len++] = (uint8_t)data[i++];
        if (s->fh_len < 2)
            continue;
        uint8_t l7 = s->fh[1] & 0x7f;
        size_t need = 2u + (l7 == 126 ? 2u : l7 == 127 ? 8u : 0u) + (s->fh[1] & 0x80 ? 4u : 0u);
        if (s->fh_len < need)
            continue;
        uint64_t plen = l7;
        for (size_t k = 0; l7 >= 126 && k < (l7 == 126 ? 2u : 8u); k++)
            plen = (k == 0 ? 0 : plen << 8) | s->fh[2 + k];
        bool fin = (s->fh[0] & 0x80) != 0;
        uint8_t opcode = s->fh[0] & 0x0f;
        s->fh_len = 0;
        s->fpay_left = plen;
        if (plen >> 63 != 0)
            *why = "a frame length with its top bit set";
        else if ((opcode & 0x8) != 0 && !fin)
            *why = "a fragmented control frame";
        else if ((opcode & 0x8) != 0 && plen > 125)
            *why = "a control frame over 125 bytes";
        else if (opcode == WSLAY_CONNECTION_CLOSE && plen == 1)
            *why = "a Close frame with a 1-byte body";
        else if ((opcode & 0x8) == 0 && plen > MAX_CONTROL)
            *why = "a frame over 64 KiB";
        else
            continue;
        *code = (opcode & 0x8) == 0 && plen >> 63 == 0 ? CLOSE_TOO_BIG : CLOSE_PROTOCOL;
        s->rx_failed = true;
        return start;
    }
    return len;
}

static void feed(session_t *s, const char *data, size_t len)
{
    s->last_rx_ms = tn_now_mono_ms();
    uint16_t code = 0;
    const char *why = NULL;
    s->rx = data;
    s->rx_len = s->rx_failed ? 0 : scan_frames(s, data, len, &code, &why);
    s->refs++;
    int rc = wslay_event_recv(s->ctx);
    s->rx_len = 0;
    if (code != 0 && rc == 0 && wslay_event_get_read_enabled(s->ctx)) {
        /* The frames before the refused one were read; the Close goes
         * out after what they queued (a pong). */
        (void)wslay_event_queue_close(s->ctx, code, (const uint8_t *)why, strlen(why));
        wslay_event_shutdown_read(s->ctx);
    }
    if (s->state != S_GONE) {
        send_queued(s);
        if (s->hc != NULL && tn_http_conn_pending(s->hc) >
                                 (s->inflight ? s->frame_bytes : 0) + MAX_PENDING_CONTROL) {
            /* Pings answered faster than the client reads the pongs. */
            s->ws->st.slow_closes++;
            session_detach(s);
            s->state = S_CLOSING;
            uv_timer_stop(&s->hb);
            uv_timer_stop(&s->deadline);
            tn_http_conn_abort(s->hc);
        } else if (rc != 0 || !wslay_event_get_read_enabled(s->ctx)) {
            /* The peer closed (wslay has queued the answering Close) or
             * broke the protocol. */
            session_detach(s);
            if (s->state != S_GONE)
                s->state = S_CLOSING;
            uv_timer_stop(&s->hb);
            uv_timer_stop(&s->deadline);
            send_queued(s);
            if (s->hc != NULL)
                tn_http_conn_close(s->hc);
        }
    }
    session_unref(s);
}

static void on_data(void *arg, const char *data, size_t len)
{
    feed(arg, data, len);
}

static void on_conn_close(void *arg)
{
    session_t *s = arg;
    s->hc = NULL;
    session_end(s);
}

static const tn_http_upgrade_ops_t upgrade_ops = {on_data, on_drain, on_conn_close};

/* --- handshake ------------------------------------------------------------------ */

static void answer(tn_http_request_t *r, int status, const char *code, const char *detail,
                   const char *headers)
{
    /* detail may name the topic (up to 255 bytes, quoted): escaped, and
     * never cut. */
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = error_json(&b, "{\"message\":\"", code, detail);
    if (rc == 0)
        tn_http_respond(r, status, ERR_JSON, headers, tn_buf_data(&b), tn_buf_size(&b));
    else
        tn_http_respond(r, status, NULL, headers, NULL, 0); /* out of memory: the status alone */
    tn_buf_fini(&b);
}

/* Whether a comma-separated header value holds token (case-insensitive). */
static bool has_token(const tn_iov_t *v, const char *token)
{
    if (v == NULL)
        return false;
    size_t tl = strlen(token), i = 0;
    while (i < v->len) {
        while (i < v->len && (v->base[i] == ' ' || v->base[i] == '\t' || v->base[i] == ','))
            i++;
        size_t start = i;
        while (i < v->len && v->base[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v->base[end - 1] == ' ' || v->base[end - 1] == '\t'))
            end--;
        if (end - start == tl && strncasecmp(v->base + start, token, tl) == 0)
            return true;
    }
    return false;
}

/* Sec-WebSocket-Accept for a key: base64(SHA-1(key + GUID)). */
static bool accept_key(const tn_iov_t *key, char *out, size_t outlen)
{
    if (key == NULL || key->len != 24 || key->base[22] != '=' || key->base[23] != '=')
        return false;
    unsigned char raw[24];
    if (EVP_DecodeBlock(raw, (const unsigned char *)key->base, 24) != 18)
        return false;
    char buf[24 + sizeof(WS_GUID)];
    memcpy(buf, key->base, 24);
    memcpy(buf + 24, WS_GUID, sizeof(WS_GUID) - 1);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(buf, 24 + sizeof(WS_GUID) - 1, md, &mdlen, EVP_sha1(), NULL) != 1 ||
        outlen < 4 * ((mdlen + 2) / 3) + 1)
        return false;
    EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen);
    return true;
}

static uint32_t topic_count(const tn_ws_t *ws, const char *topic)
{
    uint32_t n = 0;
    for (const session_t *s = ws->sessions; s != NULL; s = s->next) {
        if (strcmp(s->topic, topic) == 0)
            n++;
    }
    return n;
}

static void upgrade(session_t *s, tn_http_request_t *r)
{
    char headers[256];
    snprintf(headers, sizeof(headers),
             "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
             "Sec-WebSocket-Protocol: " TN_WS_SUBPROTOCOL "\r\n",
             s->accept);
    s->req = NULL;
    s->hc = tn_http_upgrade(r, headers, &upgrade_ops, s);
    if (s->hc == NULL) {
        session_end(s);
        return;
    }
    s->last_rx_ms = tn_now_mono_ms();
    uv_timer_start(&s->hb, on_heartbeat, (uint64_t)s->ws->o.heartbeat_ms,
                   (uint64_t)s->ws->o.heartbeat_ms);
    if (s->ws->o.auth != NULL && s->authz == NULL) {
        s->state = S_AUTH;
        static const char req[] = "{\"type\":\"auth_required\"}";
        queue_text(s, req, sizeof(req) - 1);
        send_queued(s);
        uv_timer_start(&s->deadline, on_deadline, (uint64_t)s->ws->o.auth_timeout_ms, 0);
        return;
    }
    go_ready(s);
}

static void on_header_auth(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    session_t *s = req->data;
    tn_http_request_t *r = s->req;
    int status = 0;
    const char *code = take_authz(s, result, authz, &status);
    if (code != NULL) {
        s->req = NULL;
        r->on_cancel = NULL;
        answer(r, status, code, auth_detail(code), NULL);
        session_end(s);
        return;
    }
    r->on_cancel = NULL;
    upgrade(s, r);
}

static void on_handshake_cancel(tn_http_request_t *r)
{
    session_t *s = r->data;
    s->req = NULL;
    session_end(s);
}

static session_t *session_new(tn_ws_t *ws, const char *topic, const char *remote)
{
    session_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    if (wslay_event_context_server_init(&s->ctx, &callbacks, s) != 0) {
        tn_free(s);
        return NULL;
    }
    wslay_event_config_set_max_recv_msg_length(s->ctx, MAX_CONTROL);
    s->ws = ws;
    s->refs = 3; /* the session, and its two timers until closed */
    s->id = ++ws->next_id;
    s->open_gen = UINT64_MAX;
    snprintf(s->topic, sizeof(s->topic), "%s", topic);
    snprintf(s->remote, sizeof(s->remote), "%s", remote);
    uv_timer_init(ws->loop, &s->hb);
    uv_timer_init(ws->loop, &s->deadline);
    s->hb.data = s->deadline.data = s;
    s->next = ws->sessions;
    if (ws->sessions != NULL)
        ws->sessions->prev = s;
    ws->sessions = s;
    ws->nsessions++;
    return s;
}

static void handle_ws(tn_http_request_t *r, void *arg)
{
    tn_ws_t *ws = arg;
    tn_http_req_t *h = &r->head;
    if (memchr(h->target.base, '?', h->target.len) != NULL) {
        answer(r, 400, "E_WS_QUERY_FORBIDDEN",
               "query parameters are not accepted: use the path and headers", NULL);
        return;
    }
    const tn_iov_t *origin = tn_http_header(h, "origin");
    if (origin != NULL && !tn_ws_origin_allowed(&ws->o, origin->base, origin->len)) {
        answer(r, 403, "E_WS_ORIGIN", "the Origin is not in websocket-allowed-origins", NULL);
        return;
    }
    const tn_iov_t *up = tn_http_header(h, "upgrade");
    /* An HTTP/1.1 GET (RFC 6455 4.1): an HTTP/1.0 request's Upgrade is
     * ignored (RFC 9110 7.8), and a HEAD upgrades nothing. */
    if (h->minor == 0 || h->method.len != 3 || memcmp(h->method.base, "GET", 3) != 0 ||
        !has_token(up, "websocket") || !has_token(tn_http_header(h, "connection"), "upgrade")) {
        answer(r, 426, "E_WS_HANDSHAKE", "a WebSocket upgrade is required here",
               "Upgrade: websocket\r\nConnection: Upgrade\r\n");
        return;
    }
    /* Each at most once (RFC 6455 11.3.1, 11.3.5): which one would count? */
    if (tn_http_header_count(h, "sec-websocket-key") > 1 ||
        tn_http_header_count(h, "sec-websocket-version") > 1) {
        answer(r, 400, "E_WS_HANDSHAKE",
               "Sec-WebSocket-Key and Sec-WebSocket-Version may come once each", NULL);
        return;
    }
    const tn_iov_t *ver = tn_http_header(h, "sec-websocket-version");
    if (ver == NULL || ver->len != 2 || memcmp(ver->base, "13", 2) != 0) {
        answer(r, 426, "E_WS_HANDSHAKE", "WebSocket version 13 is required",
               "Sec-WebSocket-Version: 13\r\n");
        return;
    }
    char accept[64];
    if (!accept_key(tn_http_header(h, "sec-websocket-key"), accept, sizeof(accept))) {
        answer(r, 400, "E_WS_HANDSHAKE", "Sec-WebSocket-Key must be 16 bytes in base64", NULL);
        return;
    }
    if (!has_token(tn_http_header(h, "sec-websocket-protocol"), TN_WS_SUBPROTOCOL)) {
        answer(r, 400, "E_WS_SUBPROTOCOL", "the upgrade must offer " TN_WS_SUBPROTOCOL, NULL);
        return;
    }
    const tn_iov_t *name = tn_http_param(r, "topic");
    char topic[TN_NAME_MAX + 1];
    if (name == NULL || !tn_name_valid(name->base, name->len)) {
        answer(r, 400, "E_BAD_TOPIC", "not a valid topic name", NULL);
        return;
    }
    memcpy(topic, name->base, name->len);
    topic[name->len] = '\0';
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(ws->o.broker, topic, name->len, false, 0, NULL, &t);
    if (rc == UV_EAGAIN) {
        answer(r, 503, "E_TOPIC_NOT_READY",
               "the topic is being made, grown or placed on this node; retry",
               "Retry-After: 1\r\n");
        return;
    }
    if (rc != 0) {
        answer(r, 404, "E_BAD_TOPIC", "no such topic on this node", NULL);
        return;
    }
    if (t->ttl_ms <= 0) {
        ws->st.ttl_rejections++;
        answer(r, 409, "E_WS_TTL_REQUIRED", "the live feed serves ttl_discard topics only", NULL);
        return;
    }
    char why[640];
    if (ws->o.auth == NULL && ws->o.protection_unknown != NULL &&
        ws->o.protection_unknown(ws->o.protected_arg, topic, why, sizeof(why))) {
        answer(r, 503, "E_NOT_READY", why, "Retry-After: 1\r\n");
        return;
    }
    if (ws->o.auth == NULL && ws->o.is_protected != NULL &&
        ws->o.is_protected(ws->o.protected_arg, topic)) {
        ws->st.auth_failures++;
        answer(r, 403, "E_UNAUTHORIZED",
               "the topic is protected (it has an owner) and the feed has no NSQ auth configured",
               NULL);
        return;
    }
    if (tn_drain_active(ws->o.drain)) {
        answer(r, 503, "E_DRAINING", "the node is draining; connect to another node",
               "Retry-After: 1\r\n");
        return;
    }
    if (ws->o.ready != NULL && !*ws->o.ready) {
        answer(r, 503, "E_NOT_READY", "the node is not serving", "Retry-After: 1\r\n");
        return;
    }
    if (ws->nsessions >= ws->o.max_connections || topic_count(ws, topic) >= ws->o.max_per_topic) {
        ws->st.capacity_rejections++;
        answer(r, 429, "E_WS_CAPACITY", "too many live connections; back off",
               "Retry-After: 1\r\n");
        return;
    }
    const tn_iov_t *authz = tn_http_header(h, "authorization");
    static const char bearer[] = "Bearer ";
    size_t bl = sizeof(bearer) - 1;
    if (ws->o.auth != NULL && authz != NULL &&
        (authz->len <= bl || strncasecmp(authz->base, bearer, bl) != 0 ||
         authz->len - bl >= MAX_SECRET)) {
        ws->st.auth_failures++;
        answer(r, 400, "E_BAD_AUTH", "Authorization must be `Bearer <secret>`", NULL);
        return;
    }
    session_t *s = session_new(ws, topic, r->remote);
    if (s == NULL) {
        answer(r, 503, "E_INTERNAL", "out of memory", NULL);
        return;
    }
    memcpy(s->accept, accept, sizeof(accept));
    if (ws->o.auth != NULL && authz != NULL) {
        if (!keep_secret(s, authz->base + bl, authz->len - bl)) {
            answer(r, 503, "E_INTERNAL", "out of memory", NULL);
            session_end(s);
            return;
        }
        char ip[64];
        tn_addr_peer_ip(r->remote, ip, sizeof(ip));
        s->req = r;
        r->data = s;
        r->on_cancel = on_handshake_cancel;
        s->areq.data = s;
        s->authing = true;
        if (tn_nsqauth_check(ws->o.auth, &s->areq, ip, false, "", authz->base + bl, authz->len - bl,
                             on_header_auth) != 0) {
            s->authing = false;
            s->req = NULL;
            r->on_cancel = NULL;
            answer(r, 503, "E_AUTH_OVERLOADED", "cannot start the auth check", NULL);
            session_end(s);
        }
        return;
    }
    upgrade(s, r);
}

/* --- the feed ------------------------------------------------------------------ */

int tn_ws_new(uv_loop_t *loop, const tn_ws_opts_t *opts, tn_ws_t **out)
{
    tn_ws_t *ws = tn_calloc(1, sizeof(*ws));
    if (ws == NULL)
        return UV_ENOMEM;
    ws->loop = loop;
    ws->o = *opts;
    tn_buf_init(&ws->frame);
    *out = ws;
    return 0;
}

int tn_ws_register(tn_http_server_t *srv, tn_ws_t *ws)
{
    return tn_http_route(srv, "GET", "/v1/ws/topics/{topic}", 0, NULL, handle_ws, ws);
}

void tn_ws_close_all(tn_ws_t *ws, const char *code, const char *detail)
{
    for (session_t *s = ws->sessions; s != NULL; s = s->next)
        session_fail(s, code, detail);
}

void tn_ws_stats(const tn_ws_t *ws, tn_ws_stats_t *out)
{
    *out = ws->st;
    out->connections = ws->nsessions;
}

void tn_ws_free(tn_ws_t *ws)
{
    if (ws == NULL)
        return;
    tn_buf_fini(&ws->frame);
    tn_free(ws);
}

#ifdef TN_TEST
int tn__ws_fuzz(const uint8_t *data, size_t len)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_ws_opts_t o;
    memset(&o, 0, sizeof(o));
    o.heartbeat_ms = 1000;
    tn_ws_t *ws;
    if (tn_ws_new(&loop, &o, &ws) != 0) {
        uv_loop_close(&loop);
        return 0;
    }
    int bad = 0;
    session_t *s = session_new(ws, "t", "127.0.0.1:1");
    if (s != NULL) {
        s->state = S_AUTH;
        /* In pieces, as the network hands them over. */
        size_t at = 0, step = len % 7 + 1;
        while (at < len && s->state != S_GONE) {
            size_t n = TN_MIN(step, len - at);
            feed(s, (const char *)data + at, n);
            at += n;
            step = step * 3 % 4096 + 1;
        }
        /* No auth is configured: nothing leaves the auth phase but a
         * failure, and a session fails once. */
        if ((s->state != S_AUTH && s->state != S_CLOSING) || ws->st.auth_failures > 1)
            bad = -1;
        session_end(s);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    if (ws->sessions != NULL || ws->nsessions != 0)
        bad = -1;
    if (uv_loop_close(&loop) != 0)
        bad = -1;
    tn_ws_free(ws);
    return bad;
}
#endif
