/* The NSQ V2 TCP server. See server.h for the design. */
#include "core/platform.h"

#include "proto/nsq/server.h"

#include "auth/nsqauth.h"
#include "cluster/hold.h"
#include "cluster/replerr.h"
#include "core/alloc.h"
#include "core/assert.h"
#include "proto/addr.h"
#include "proto/stream.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "proto/nsq/clientstats.h"
#include "proto/nsq/compress.h"
#include "proto/nsq/tls.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PENDING_PUBS 64                /* publishes in flight per connection */
#define MAX_UNSENT       (8 * 1024 * 1024) /* output bytes before reading pauses */
#define DELIVERY_HOLD    (256 * 1024) /* output waiting for the socket before deliveries pause */
#define READ_CHUNK       (64 * 1024)
/* How long a command waits for the open door to be able to judge its
 * topic (unjudged_refused) before it is refused, and how often it looks
 * again meanwhile: the router's start hold's (cluster/hold.h). */
#define JUDGE_WAIT_MS TN_ROUTER_CREATE_HOLD_MS
#define JUDGE_POLL_MS TN_HOLD_POLL_MS

typedef enum { ST_MAGIC = 0, ST_ACTIVE, ST_CLOSED } conn_state_t;

typedef struct conn_s conn_t;

/* A publish in flight; answers leave in this order. */
typedef struct pubreq_s {
    tn_pub_t pub;
    conn_t *conn;
    tn_nsq_op_t op;
    tn_nsq_pubcount_t *pc; /* the connection's count for the topic */
    bool done;
    int status;
    struct pubreq_s *next;
} pubreq_t;

/* Field order follows the protocol state, not packing: a few dozen bytes
 * per connection. */
struct conn_s { // NOLINT(clang-analyzer-optin.performance.Padding)
    uv_tcp_t tcp;
    uv_timer_t hb;    /* heartbeats, idle and command timeouts */
    uv_timer_t flush; /* output_buffer_timeout */
    uv_write_t wreq;
    tn_nsq_server_t *srv;
    conn_t *prev;
    conn_t *next;
    conn_state_t state;
    uint32_t refs; /* handles open + publishes in flight */
    char remote[64];

    tn_buf_t in;    /* received bytes, decompressed: what commands parse from */
    tn_buf_t out;   /* frames not encoded yet */
    tn_buf_t stage; /* compressed bytes on their way into TLS */
    tn_buf_t wire;  /* encoded bytes not handed to the socket yet */
    tn_buf_t wbuf;  /* bytes being written */
    tn_buf_t tlsin; /* decrypted bytes on their way to the decompressor */
    bool writing;
    bool flush_armed;
    bool close_after_write;
    bool draining; /* write side shut down after a fatal error */
    uv_shutdown_t shutdown;
    bool reading;

    tn_nsq_client_opts_t opts;
    bool subscribed;
    uint32_t rdy; /* the client's last RDY (the engine's credit unless held) */
    bool held;    /* deliveries paused while its output waits (DELIVERY_HOLD) */
    bool cls;     /* CLS received: no more deliveries */
    bool blocked; /* waiting for a topic or channel to be created */
    /* Waiting since (mono ms) for the door to judge the next command's
     * topic (unjudged_refused), on_hb looking again every JUDGE_POLL_MS;
     * 0: not waiting. */
    int64_t judge_since;
    tn_waiter_t wait;
    char sub_topic[256];
    char sub_channel[256];
    tn_consumer_t consumer;
    tn_topic_t *topic;

    pubreq_t *phead;
    pubreq_t *ptail;
    uint32_t npending;
    tn_nsq_pubcount_t *pubs; /* what it has published, per topic: a producer in /stats */

    int64_t last_recv_ms;
    int64_t cmd_started_ms; /* first byte of an incomplete command, 0 if none */
    int64_t last_hb_ms;
    int64_t connected_ms;

    /* compression, once negotiated */
    bool snappy;
    bool deflate;
    tn_snappy_dec_t sdec;
    tn_snappy_enc_t senc;
    tn_inflate_t zdec;
    tn_deflate_t zenc;
    bool decode_more;

    /* AUTH */
    tn_authz_t *authz;
    char *secret;
    size_t secret_len;
    tn_auth_req_t areq;
    bool authing;
    /* A subscription's right to consume is checked again before its next
     * message once its grants expired (or, without AUTH, when its topic
     * was given an owner): deliveries pause, on_hb runs the check, and
     * what was delivered meanwhile waits in unchecked, sent once the
     * check permits it (dropped with the connection otherwise: its
     * leases go back to the channel when the consumer detaches). */
    bool recheck_due;
    tn_buf_t unchecked;
    /* Without AUTH: the opts' protected_gen when the subscription's topic
     * was last found open (UINT64_MAX: not yet); needs_recheck asks
     * again only once it moved. */
    uint64_t open_gen;

    /* TLS, once negotiated */
    tn_tls_t *tls;
    bool tls_done;
    char common_name[256];
};

struct tn_nsq_server_s {
    uv_loop_t *loop;
    tn_tls_ctx_t *tls;  /* NULL when no certificate is configured */
    tn_nsqauth_t *auth; /* NULL when AUTH is not configured */
    tn_broker_t *broker;
    tn_nsq_opts_t opts;
    uv_tcp_t listener;
    int port;
    conn_t *conns;
    uint32_t nconns;
    bool closing;
    bool draining; /* tn_nsq_server_drain: no publishes, no deliveries */
    uint32_t refs; /* listener + connections */
    uint64_t errors[TN_NSQ_E_THROTTLED + 1];
    uint64_t refused;
    void (*close_cb)(void *arg);
    void *close_arg;
};

void tn_nsq_opts_from_config(tn_nsq_opts_t *o, const tn_config_t *cfg, const char *version)
{
    memset(o, 0, sizeof(*o));
    o->limits.max_line = 1024;
    o->limits.max_msg_size = (uint64_t)cfg->max_msg_size;
    o->limits.max_body_size = (uint64_t)cfg->max_body_size;
    o->limits.max_mpub_count = 65536;
    o->limits.max_rdy_count = cfg->max_rdy_count;
    o->limits.max_defer_ms = cfg->max_req_timeout_ns / 1000000;
    o->srv.max_heartbeat_interval_ms = cfg->max_heartbeat_interval_ns / 1000000;
    o->srv.max_output_buffer_size = cfg->max_output_buffer_size;
    o->srv.min_output_buffer_timeout_ms = 25;
    o->srv.max_output_buffer_timeout_ms = cfg->max_output_buffer_timeout_ns / 1000000;
    o->srv.max_msg_timeout_ms = cfg->max_msg_timeout_ns / 1000000;
    o->srv.max_rdy_count = cfg->max_rdy_count;
    o->srv.max_deflate_level = (int)cfg->max_deflate_level;
    o->srv.deflate_enabled = cfg->deflate;
    o->srv.snappy_enabled = cfg->snappy;
    o->srv.auth_required = false;
    o->msg_timeout_ms = cfg->msg_timeout_ns / 1000000;
    o->max_req_ms = cfg->max_req_timeout_ns / 1000000;
    o->max_connections = (uint32_t)cfg->max_connections;
    o->handshake_timeout_ms = 5000;
    o->command_timeout_ms = 30000;
    o->version = version;
    o->tls_cert = cfg->tls_cert;
    o->tls_key = cfg->tls_key;
    o->tls_ca = cfg->tls_root_ca_file;
    o->tls_min_version = cfg->tls_min_version;
    o->tls_policy = cfg->tls_client_auth_policy;
    o->tls_required = cfg->tls_required != 0;
    o->auth_http_address = cfg->auth_http_address;
    o->srv.tls_available = cfg->tls_cert[0] != '\0';
}

static void start_reading(conn_t *c);
static void process(conn_t *c);
static void arm_hb(conn_t *c);
static void on_hb(uv_timer_t *t);
static void feed_plain(conn_t *c, const char *data, size_t len);
static void switch_compression(conn_t *c);
static void tls_established(conn_t *c);

/* --- lifetime ---------------------------------------------------------------- */

static void server_unref(tn_nsq_server_t *s)
{
    if (--s->refs > 0)
        return;
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    tn_tls_ctx_free(s->tls);
    if (s->auth != NULL)
        tn_nsqauth_close(s->auth);
    tn_free(s);
    if (cb != NULL)
        cb(arg);
}

static void conn_unref(conn_t *c)
{
    if (--c->refs > 0)
        return;
    tn_nsq_server_t *s = c->srv;
    tn_buf_fini(&c->in);
    tn_buf_fini(&c->out);
    tn_buf_fini(&c->stage);
    tn_buf_fini(&c->wire);
    tn_buf_fini(&c->wbuf);
    tn_buf_fini(&c->tlsin);
    tn_buf_fini(&c->unchecked);
    tn_tls_free(c->tls);
    tn_authz_unref(c->authz);
    tn_nsq_pubcount_free(c->pubs);
    tn_free(c->secret);
    tn_snappy_dec_fini(&c->sdec);
    tn_snappy_enc_fini(&c->senc);
    if (c->deflate) {
        tn_inflate_fini(&c->zdec);
        tn_deflate_fini(&c->zenc);
    }
    tn_free(c);
    server_unref(s);
}

static void on_handle_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void conn_close(conn_t *c)
{
    if (c->state == ST_CLOSED)
        return;
    c->state = ST_CLOSED;
    tn_nsq_server_t *s = c->srv;
    if (c->subscribed)
        tn_consumer_detach(&c->consumer);
    c->subscribed = false;
    if (c->authing) {
        tn_nsqauth_cancel(&c->areq);
        c->authing = false;
        c->refs--; /* the reference the check held; handles still hold theirs */
    }
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->nconns--;
    uv_close((uv_handle_t *)&c->hb, on_handle_closed);
    uv_close((uv_handle_t *)&c->flush, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

/* --- output ------------------------------------------------------------------ */

static void flush(conn_t *c);

static void on_drain_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    conn_unref(req->data);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* After a fatal error frame is out: shut down the write side and read
 * (and drop) what the client still sends, briefly, before closing, so the
 * client reads the error instead of a connection reset. */
static void close_gracefully(conn_t *c)
{
    if (c->state == ST_CLOSED || c->draining)
        return;
    c->draining = true;
    uv_timer_stop(&c->hb);
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    c->refs++;
    if (!c->reading && uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = true;
    uv_timer_start(&c->flush, on_drain_timeout, 1000, 0);
}

static size_t unsent(const conn_t *c)
{
    return tn_buf_size(&c->out) + tn_buf_size(&c->stage) + tn_buf_size(&c->wire) +
           tn_buf_size(&c->wbuf);
}

/* The RDY the engine may use: the client's, but none after CLS, while
 * the server drains, or while the right to consume is checked again. */
static uint32_t rdy_in_force(const conn_t *c)
{
    return c->cls || c->srv->draining || c->authing || c->recheck_due ? 0 : c->rdy;
}

/* Deliveries resume once the socket took what waited (on_written). */
static void release_held(conn_t *c)
{
    if (c->held && (!c->writing || unsent(c) < DELIVERY_HOLD)) {
        c->held = false;
        tn_consumer_credit(&c->consumer, rdy_in_force(c));
    }
}

static void on_written(uv_write_t *req, int status)
{
    conn_t *c = req->data;
    c->writing = false;
    tn_buf_reset(&c->wbuf);
    if (c->state == ST_CLOSED) {
        conn_unref(c);
        return;
    }
    if (status != 0) {
        conn_close(c);
        conn_unref(c);
        return;
    }
    flush(c);
    if (c->state != ST_CLOSED)
        release_held(c);
    if (c->state != ST_CLOSED && !c->writing && c->close_after_write)
        close_gracefully(c);
    else if (c->state != ST_CLOSED && !c->writing) {
        /* Output drained: reading may resume. */
        process(c);
        start_reading(c);
    }
    conn_unref(c);
}

/* Encode the frames in out through the layers in force now (compression,
 * then TLS) into wire. Called before a layer changes, so every byte is
 * encoded with the layers that were negotiated when it was queued. */
static int encode_out(conn_t *c)
{
    int rc = 0;
    size_t n = tn_buf_size(&c->out);
    if (n > 0) {
        const char *data = tn_buf_data(&c->out);
        tn_buf_t *dst = c->tls != NULL ? &c->stage : &c->wire;
        if (c->snappy) {
            rc = tn_snappy_encode(&c->senc, data, n, dst);
        } else if (c->deflate) {
            rc = tn_deflate_encode(&c->zenc, data, n, dst);
        } else if (c->tls == NULL) {
            if (tn_buf_size(&c->wire) == 0) {
                /* Swap instead of copying. */
                tn_buf_t t = c->wire;
                c->wire = c->out;
                c->out = t;
            } else {
                rc = tn_buf_append(&c->wire, data, n);
            }
        }
        if (rc == 0 && c->tls != NULL) {
            if (c->snappy || c->deflate)
                rc = tn_tls_write(c->tls, tn_buf_data(&c->stage), tn_buf_size(&c->stage), &c->wire);
            else
                rc = tn_tls_write(c->tls, data, n, &c->wire);
            tn_buf_reset(&c->stage);
        }
        tn_buf_reset(&c->out);
    }
    if (rc == 0 && c->tls != NULL)
        rc = tn_tls_drain(c->tls, &c->wire);
    return rc;
}

static void flush(conn_t *c)
{
    if (c->state == ST_CLOSED)
        return;
    if (c->flush_armed) {
        uv_timer_stop(&c->flush);
        c->flush_armed = false;
    }
    if (encode_out(c) != 0) {
        conn_close(c);
        return;
    }
    if (c->writing)
        return;
    c->wreq.data = c;
    int rc = tn_stream_send((uv_stream_t *)&c->tcp, &c->wire, &c->wbuf, &c->wreq, on_written);
    if (rc < 0) {
        conn_close(c);
    } else if (rc == 0) {
        if (c->close_after_write)
            close_gracefully(c);
    } else {
        c->writing = true;
        c->refs++;
    }
}

static void on_flush_timer(uv_timer_t *t)
{
    conn_t *c = t->data;
    c->flush_armed = false;
    flush(c);
}

static void respond(conn_t *c, const char *text)
{
    if (tn_nsq_write_response(&c->out, text, strlen(text)) != 0)
        conn_close(c);
    else
        flush(c);
}

/* Send an error frame; a fatal one closes the connection once written.
 * fatal is the code's own (tn_nsq_err_fatal) but for a refusal that asks
 * the client to retry later (a drain), which keeps the connection. */
static void send_error_as(conn_t *c, tn_nsq_err_t err, const char *text, bool fatal)
{
    if (c->state == ST_CLOSED)
        return;
    if ((size_t)err < TN_ARRAY_SIZE(c->srv->errors))
        c->srv->errors[err]++;
    if (tn_nsq_write_error(&c->out, err, text) != 0) {
        conn_close(c);
        return;
    }
    if (fatal) {
        c->close_after_write = true;
        if (c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = false;
        }
    }
    flush(c);
}

static void send_error(conn_t *c, tn_nsq_err_t err, const char *text)
{
    send_error_as(c, err, text, tn_nsq_err_fatal(err));
}

/* --- deliveries -------------------------------------------------------------- */

static bool consume_allowed(conn_t *c);

static void on_deliver(tn_consumer_t *cons, const tn_delivery_t *d)
{
    conn_t *c = cons->data;
    /* Leased to c either way: a message held for the check goes if it
     * permits (recheck). */
    bool allowed = consume_allowed(c);
    tn_buf_t *dst = allowed ? &c->out : &c->unchecked;
    char id[TN_NSQ_ID_LEN];
    tn_nsq_id_encode(d->partition, d->offset, id);
    unsigned char hdr[TN_NSQ_FRAME_HDR + TN_NSQ_MSG_HDR];
    tn_nsq_message_header(hdr, d->publish_ns, d->attempts, id, d->body->len);
    if (tn_buf_append(dst, hdr, sizeof(hdr)) != 0 ||
        tn_buf_append(dst, d->body->data, d->body->len) != 0) {
        conn_close(c);
        return;
    }
    if (!allowed)
        return;
    /* nsqd flushes at once when the client's RDY count is reached, or
     * when buffering is off; otherwise after output_buffer_timeout. */
    bool full = c->opts.output_buffer_size == 0 ||
                tn_buf_size(&c->out) >= (size_t)c->opts.output_buffer_size ||
                tn_consumer_inflight(cons) >= cons->credit;
    if (full || c->opts.output_buffer_timeout_ms == 0) {
        flush(c);
    } else if (!c->flush_armed) {
        c->flush_armed = true;
        uv_timer_start(&c->flush, on_flush_timer, (uint64_t)c->opts.output_buffer_timeout_ms, 0);
    }
    /* nsqd writes a message before it takes the next, so a client that
     * stops reading holds what its socket buffers take, whatever its RDY.
     * Here the engine stops delivering to it while its output waits for
     * the socket, and the rest stays for the channel's other consumers. */
    if (c->state != ST_CLOSED && !c->held && c->writing && unsent(c) >= DELIVERY_HOLD) {
        c->held = true;
        tn_consumer_credit(cons, 0);
    }
}

/* The /stats entry of a connection (consumer or producer), in nsqd's
 * field names; f limits its pub_counts. */
static void describe_conn(conn_t *c, const tn_pubs_filter_t *f, tn_buf_t *out)
{
    const tn_consumer_t *cons = c->subscribed ? &c->consumer : NULL;
    tn_tls_info_t tls;
    if (c->tls_done)
        tn_tls_info(c->tls, &tls);
    int64_t age_ms = tn_now_mono_ms() - c->connected_ms;
    tn_nsq_client_stats_t s = {
        .client_id = c->opts.client_id,
        .hostname = c->opts.hostname,
        .remote_address = c->remote,
        .user_agent = c->opts.user_agent,
        .state = cons == NULL ? TN_NSQ_STATE_INIT
                 : c->cls     ? TN_NSQ_STATE_CLOSING
                              : TN_NSQ_STATE_SUBSCRIBED,
        .ready_count = cons != NULL ? rdy_in_force(c) : 0,
        .in_flight_count = cons != NULL ? tn_consumer_inflight(cons) : 0,
        .message_count = cons != NULL ? cons->message_count : 0,
        .finish_count = cons != NULL ? cons->finish_count : 0,
        .requeue_count = cons != NULL ? cons->requeue_count : 0,
        .connect_ts = (tn_now_wall_ms() - age_ms) / 1000,
        .sample_rate = c->opts.sample_rate,
        .deflate = c->deflate,
        .snappy = c->snappy,
        .authed = c->authz != NULL,
        .auth_identity = c->authz != NULL ? c->authz->identity : NULL,
        .auth_identity_url = c->authz != NULL ? c->authz->identity_url : NULL,
        .pubs = c->pubs,
        .tls = c->tls_done ? &tls : NULL,
    };
    tn_nsq_client_stats_json(out, &s, f);
}

static void on_describe(tn_consumer_t *cons, const tn_pubs_filter_t *f, tn_buf_t *out)
{
    describe_conn(cons->data, f, out);
}

/* Its channel or topic is being deleted, or a partition it consumed moved
 * to another node (a move or failover handed its lead away): drop the
 * client, as nsqd does for a deleted topic, so that it looks the topic up
 * again and finds the new leader (docs/cluster.md, "What clients see at
 * the hand-over"). */
static void on_kick(tn_consumer_t *cons)
{
    conn_close(cons->data);
}

/* --- publishes ------------------------------------------------------------------ */

static void answer_publishes(conn_t *c)
{
    while (c->phead != NULL && c->phead->done) {
        pubreq_t *r = c->phead;
        c->phead = r->next;
        if (c->phead == NULL)
            c->ptail = NULL;
        c->npending--;
        if (r->status == 0 && r->pc != NULL)
            r->pc->count += r->op == TN_NSQ_MPUB ? r->pub.n : 1;
        if (c->state != ST_CLOSED) {
            if (r->status == 0) {
                respond(c, "OK");
            } else {
                char text[160];
                bool fatal;
                tn_nsq_err_t e = tn_nsq_pub_error(r->op, r->status, text, sizeof(text), &fatal);
                send_error_as(c, e, text, fatal);
            }
        }
        tn_pub_fini(&r->pub);
        tn_free(r);
        conn_unref(c);
    }
}

static void on_published(tn_pub_t *p, int status)
{
    pubreq_t *r = p->data;
    conn_t *c = r->conn;
    r->done = true;
    r->status = status;
    c->refs++; /* answer_publishes may drop the last reference */
    answer_publishes(c);
    if (c->state != ST_CLOSED && c->npending < MAX_PENDING_PUBS) {
        process(c);
        start_reading(c);
    }
    conn_unref(c);
}

/* A publish while draining: refused, after the publishes before it have
 * answered (answers leave in command order); the connection stays, and
 * the client retries on another node. */
static void refuse_draining(conn_t *c, const tn_nsq_cmd_t *cmd)
{
    tn_nsq_err_t e = cmd->op == TN_NSQ_MPUB   ? TN_NSQ_E_MPUB_FAILED
                     : cmd->op == TN_NSQ_DPUB ? TN_NSQ_E_DPUB_FAILED
                                              : TN_NSQ_E_PUB_FAILED;
    send_error_as(c, e, "the node is draining (it stops soon); publish to another node", false);
}

static void handle_publish(conn_t *c, const tn_nsq_cmd_t *cmd)
{
    uint32_t n = cmd->op == TN_NSQ_MPUB ? cmd->nmsgs : 1;
    pubreq_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL || tn_pub_init(&r->pub, n) != 0) {
        tn_free(r);
        send_error(c, TN_NSQ_E_PUB_FAILED, "out of memory");
        return;
    }
    r->conn = c;
    r->op = cmd->op;
    r->pub.data = r;
    r->pub.grow_here = true; /* NSQ topics grow where they are published */
    r->pc = tn_nsq_pubcount_get(&c->pubs, cmd->topic.base, cmd->topic.len);
    int rc = 0;
    if (cmd->op == TN_NSQ_MPUB) {
        tn_iov_t *bodies = tn_malloc(n * sizeof(*bodies));
        if (bodies == NULL) {
            rc = UV_ENOMEM;
        } else {
            size_t pos = 0;
            for (uint32_t i = 0; i < n && tn_nsq_mpub_next(cmd, &pos, &bodies[i]); i++)
                ;
            rc = tn_pub_set_all(&r->pub, bodies);
            tn_free(bodies);
        }
    } else {
        rc = tn_pub_set(&r->pub, 0, cmd->body.base, cmd->body.len);
    }
    int64_t deliver_at = 0;
    if (cmd->op == TN_NSQ_DPUB && cmd->num > 0)
        deliver_at = tn_now_wall_ms() + cmd->num;
    if (rc == 0)
        rc = tn_router_publish(c->srv->opts.router, cmd->topic.base, cmd->topic.len, &r->pub,
                               deliver_at, on_published);
    if (rc != 0) {
        /* Answer in order: queue it as done. */
        r->done = true;
        r->status = rc;
    }
    if (c->ptail != NULL)
        c->ptail->next = r;
    else
        c->phead = r;
    c->ptail = r;
    c->npending++;
    c->refs++;
    if (r->done)
        answer_publishes(c);
}

/* --- SUB -------------------------------------------------------------------------- */

static void sub_continue(conn_t *c);

static void on_sub_wait(tn_waiter_t *w, int status)
{
    conn_t *c = w->data;
    if (c->state == ST_CLOSED) {
        conn_unref(c);
        return;
    }
    if (status != 0) {
        c->blocked = false;
        char text[160];
        snprintf(text, sizeof(text), "SUB failed to create topic or channel: %s",
                 tn_strerror(status));
        send_error(c, TN_NSQ_E_SUB_FAILED, text);
        conn_unref(c);
        return;
    }
    sub_continue(c);
    conn_unref(c);
}

/* Find or create the topic, then the channel; waits when either is being
 * created (the connection reads no further command meanwhile). */
static void sub_continue(conn_t *c)
{
    tn_broker_t *b = c->srv->broker;
    c->wait.cb = on_sub_wait;
    c->wait.data = c;
    tn_topic_t *t;
    int rc = tn_broker_topic(b, c->sub_topic, strlen(c->sub_topic), true, 0, &c->wait, &t);
    if (rc == UV_EAGAIN) {
        c->blocked = true;
        c->refs++;
        return;
    }
    tn_channel_t *ch = NULL;
    if (rc == 0)
        rc = tn_topic_channel(t, c->sub_channel, strlen(c->sub_channel), true, &c->wait, &ch);
    if (rc == UV_EAGAIN) {
        c->blocked = true;
        c->refs++;
        return;
    }
    c->blocked = false;
    if (rc != 0) {
        char text[160];
        snprintf(text, sizeof(text), "SUB failed to create topic or channel: %s", tn_strerror(rc));
        send_error(c, TN_NSQ_E_SUB_FAILED, text);
        return;
    }
    c->topic = t;
    c->consumer.deliver = on_deliver;
    c->consumer.describe = on_describe;
    c->consumer.kick = on_kick;
    c->consumer.moved = on_kick; /* a partition moved off: look it up again */
    c->consumer.data = c;
    c->consumer.timeout_ms = c->opts.msg_timeout_ms + c->opts.output_buffer_timeout_ms;
    c->consumer.sample_rate = (uint32_t)c->opts.sample_rate;
    tn_consumer_attach(&c->consumer, ch);
    c->subscribed = true;
    respond(c, "OK");
    process(c);
    start_reading(c);
}

/* --- commands --------------------------------------------------------------------- */

static void switch_compression(conn_t *c)
{
    /* Bytes after IDENTIFY that are already here are compressed: take
     * them out of the parse buffer and feed them to the decoder. */
    tn_buf_t raw = c->in;
    tn_buf_init(&c->in);
    flush(c); /* what is queued goes out uncompressed */
    if (c->opts.snappy) {
        c->snappy = true;
    } else if (c->opts.deflate) {
        if (tn_inflate_init(&c->zdec) != 0 ||
            tn_deflate_init(&c->zenc, c->opts.deflate_level) != 0) {
            tn_buf_fini(&raw);
            conn_close(c);
            return;
        }
        c->deflate = true;
    }
    respond(c, "OK");
    if (tn_buf_size(&raw) > 0)
        feed_plain(c, tn_buf_data(&raw), tn_buf_size(&raw));
    tn_buf_fini(&raw);
}

static void start_tls(conn_t *c)
{
    flush(c); /* the IDENTIFY answer goes out in the clear */
    c->tls = tn_tls_new(c->srv->tls);
    if (c->tls == NULL) {
        conn_close(c);
        return;
    }
    /* Handshake bytes that arrived with the IDENTIFY. */
    if (tn_buf_size(&c->in) > 0) {
        tn_buf_t raw = c->in;
        tn_buf_init(&c->in);
        bool done = false;
        int rc = tn_tls_feed(c->tls, tn_buf_data(&raw), tn_buf_size(&raw), &c->tlsin, &done);
        tn_buf_fini(&raw);
        flush(c);
        if (rc != 0) {
            conn_close(c);
            return;
        }
        if (done)
            tls_established(c);
    }
}

static void handle_identify(conn_t *c, const tn_nsq_cmd_t *cmd, size_t consumed)
{
    int err = 0;
    char msg[256];
    tn_nsq_client_opts_t n = c->opts;
    int rc = tn_nsq_identify(cmd->body.base, cmd->body.len, &c->srv->opts.srv, &n, &err, msg,
                             sizeof(msg));
    if (rc != 0) {
        send_error(c, rc == TN_EPROTO ? (tn_nsq_err_t)err : TN_NSQ_E_IDENTIFY_FAILED,
                   rc == TN_EPROTO ? msg : "IDENTIFY failed: out of memory");
        return;
    }
    /* A second IDENTIFY may come (nsqd's rule), but one asking again for
     * an upgrade already made is refused: nsqd would wrap the stream a
     * second time, which no client means. */
    if ((n.snappy || n.deflate) && (c->snappy || c->deflate)) {
        send_error(c, TN_NSQ_E_INVALID, "IDENTIFY compression already negotiated");
        return;
    }
    if (n.tls_v1 && c->tls != NULL) {
        send_error(c, TN_NSQ_E_INVALID, "IDENTIFY TLS already negotiated");
        return;
    }
    c->opts = n;
    tn_buf_consume(&c->in, consumed);
    if (c->opts.feature_negotiation) {
        tn_buf_t body;
        tn_buf_init(&body);
        rc = tn_nsq_identify_response(&c->opts, &c->srv->opts.srv, c->srv->opts.version, &body);
        if (rc == 0)
            rc = tn_nsq_write_response(&c->out, tn_buf_data(&body), tn_buf_size(&body));
        tn_buf_fini(&body);
        if (rc != 0) {
            conn_close(c);
            return;
        }
        flush(c);
    } else {
        respond(c, "OK");
    }
    arm_hb(c);
    if (c->opts.tls_v1)
        start_tls(c);
    else if (c->opts.snappy || c->opts.deflate)
        switch_compression(c);
}

static void settle_failed(conn_t *c, tn_nsq_err_t e, const char *name, const tn_nsq_cmd_t *cmd,
                          int rc)
{
    char text[160];
    /* A replicated partition refusing for now (cluster/replerr.h) says so
     * in the words every door uses; E_*_FAILED keeps the connection. */
    const char *why = tn_replerr_text(rc);
    /* nsqd's words (channel.go popInFlightMessage); UV_ESRCH is a lease
     * of another consumer, the NSQ door checking no nonce. */
    snprintf(text, sizeof(text), "%s %.*s failed %s", name, (int)cmd->id.len, cmd->id.base,
             why != NULL                             ? why
             : rc == UV_ESRCH                        ? "client does not own message"
             : rc == TN_ENOTFOUND || rc == UV_EINVAL ? "ID not in flight"
                                                     : tn_strerror(rc));
    send_error(c, e, text);
}

/* --- AUTH -------------------------------------------------------------------------- */

static void json_str(tn_buf_t *out, const char *s)
{
    tn_buf_append(out, "\"", 1);
    tn_buf_json_escape(out, s);
    tn_buf_append(out, "\"", 1);
}

static void consume_checked(conn_t *c);
static void refuse_consumer(conn_t *c, tn_nsq_err_t err, const char *text);
static void sub_refused_text(const conn_t *c, char *text, size_t len);

static void on_auth(tn_auth_req_t *req, tn_auth_result_t result, tn_authz_t *authz)
{
    conn_t *c = req->data;
    bool first = c->authz == NULL;
    c->authing = false;
    c->blocked = false;
    if (c->subscribed &&
        (result == TN_AUTH_NONE ||
         (result == TN_AUTH_OK && !tn_authz_can_subscribe(authz, c->sub_topic, c->sub_channel)))) {
        /* Checked again: no longer a right to its subscription. */
        char text[640];
        sub_refused_text(c, text, sizeof(text));
        tn_authz_unref(authz);
        refuse_consumer(c, TN_NSQ_E_UNAUTHORIZED, text);
        conn_unref(c);
        return;
    }
    if (result != TN_AUTH_OK) {
        if (c->subscribed)
            tn_consumer_credit(&c->consumer, 0);
        if (result == TN_AUTH_NONE)
            send_error(c, TN_NSQ_E_UNAUTHORIZED, "AUTH no authorizations found");
        else if (result == TN_AUTH_DENIED)
            send_error(c, TN_NSQ_E_AUTH_FAILED, "AUTH failed: denied by the auth server");
        else if (tn_nsqauth_is_local(c->srv->auth))
            /* tern's users, not judged yet (a node starting: api/users.h):
             * the error nsqd gives when its auth server is unreachable. */
            send_error(c, TN_NSQ_E_AUTH_FAILED,
                       "AUTH failed: credentials cannot be checked yet; try again");
        else
            send_error(c, TN_NSQ_E_AUTH_FAILED, "AUTH failed: no auth server answered");
        conn_unref(c);
        return;
    }
    tn_authz_unref(c->authz);
    c->authz = authz;
    if (first) {
        tn_buf_t body;
        tn_buf_init(&body);
        tn_buf_append(&body, "{\"identity\":", 12);
        json_str(&body, authz->identity);
        tn_buf_append(&body, ",\"identity_url\":", 16);
        json_str(&body, authz->identity_url);
        char tail[64];
        int n = snprintf(tail, sizeof(tail), ",\"permission_count\":%u}", authz->nrules);
        tn_buf_append(&body, tail, (size_t)n);
        if (tn_nsq_write_response(&c->out, tn_buf_data(&body), tn_buf_size(&body)) != 0)
            conn_close(c);
        else
            flush(c);
        tn_buf_fini(&body);
    }
    if (c->subscribed && c->state != ST_CLOSED)
        consume_checked(c);
    if (c->state != ST_CLOSED) {
        process(c);
        start_reading(c);
    }
    conn_unref(c);
}

/* Ask the auth servers about the connection's secret (first AUTH, or a
 * renewal once the grants expired); the connection waits. */
static void start_auth(conn_t *c)
{
    c->areq.data = c;
    c->authing = true;
    c->blocked = true;
    c->refs++;
    if (c->subscribed)
        tn_consumer_credit(&c->consumer, 0); /* until the answer (rdy_in_force) */
    char ip[64];
    tn_addr_peer_ip(c->remote, ip, sizeof(ip));
    if (tn_nsqauth_check(c->srv->auth, &c->areq, ip, c->tls_done, c->common_name, c->secret,
                         c->secret_len, on_auth) != 0) {
        c->authing = false;
        c->blocked = false;
        send_error(c, TN_NSQ_E_AUTH_FAILED, "AUTH failed: out of memory");
        conn_unref(c);
    }
}

static void handle_auth(conn_t *c, const tn_nsq_cmd_t *cmd, size_t consumed)
{
    tn_buf_consume(&c->in, consumed);
    /* In nsqd's order: the state (refusal), then a second AUTH, then no
     * server. */
    if (c->authz != NULL || c->secret != NULL) {
        send_error(c, TN_NSQ_E_INVALID, "AUTH already set");
        return;
    }
    if (c->srv->auth == NULL) {
        send_error(c, TN_NSQ_E_AUTH_DISABLED, "AUTH disabled");
        return;
    }
    if (cmd->body.len == 0) {
        send_error(c, TN_NSQ_E_BAD_BODY, "AUTH invalid body size 0");
        return;
    }
    c->secret = tn_malloc(cmd->body.len);
    if (c->secret == NULL) {
        send_error(c, TN_NSQ_E_AUTH_FAILED, "AUTH failed: out of memory");
        return;
    }
    memcpy(c->secret, cmd->body.base, cmd->body.len);
    c->secret_len = cmd->body.len;
    start_auth(c);
}

/* A parsed name as a C string, cut to fit as "%.*s" would be (a valid name
 * holds no NUL). Not snprintf: this runs for every PUB, where that was
 * ~600 instructions, a tenth of the loop's user time per message. */
static void copy_name(char *dst, size_t cap, tn_iov_t name)
{
    size_t n = TN_MIN(name.len, cap - 1);
    memcpy(dst, name.base, n);
    dst[n] = '\0';
}

/* Without AUTH: whether command name (SUB, PUB, ...) on topic is refused,
 * the topic being protected; text then says so. */
static bool open_refused(const conn_t *c, const char *name, const char *topic, char *text,
                         size_t len)
{
    const tn_nsq_opts_t *o = &c->srv->opts;
    if (o->is_protected == NULL || !o->is_protected(o->protected_arg, topic))
        return false;
    /* An open door cannot authenticate anyone: NSQ clients send AUTH
     * only when the server asks for it, for every topic. */
    snprintf(text, len,
             "%s on \"%s\" refused: the topic is protected (it has an owner) and this "
             "server's NSQ doors are open (no NSQ auth configured)",
             name, topic);
    return true;
}

/* Without AUTH, before open_refused: whether is_protected cannot judge
 * topic yet (protection_unknown); text then says so. */
static bool open_unjudged(const conn_t *c, const char *topic, char *text, size_t len)
{
    const tn_nsq_opts_t *o = &c->srv->opts;
    return c->srv->auth == NULL && o->protection_unknown != NULL &&
           o->protection_unknown(o->protected_arg, topic, text, len);
}

/* --- a subscription's right, checked again ------------------------------------------ */

/* Without AUTH: whether c's subscribed topic is protected now, asked of
 * is_protected; an open one is remembered at protected_gen's value. */
static bool sub_protected(conn_t *c)
{
    char text[640];
    if (open_refused(c, "SUB", c->sub_topic, text, sizeof(text)))
        return true;
    if (c->srv->opts.protected_gen != NULL)
        c->open_gen = *c->srv->opts.protected_gen;
    return false;
}

/* Whether c's subscription must be checked before its next message: its
 * grants expired or (tern's users) the metastore's access changed since
 * they were read, or (without AUTH) its topic is protected now. The open
 * topic's answer holds while protected_gen does: per delivery that is a
 * comparison, where asking the metastore was ~140 instructions. Expiry
 * is judged on the loop's clock (uv_now, the same monotonic base, at
 * most one loop pass behind): a clock read per delivery is not worth
 * the milliseconds against a ttl of seconds. */
static bool needs_recheck(conn_t *c)
{
    if (c->srv->auth != NULL)
        return !tn_authz_current(c->authz, (int64_t)uv_now(c->srv->loop));
    const uint64_t *gen = c->srv->opts.protected_gen;
    if (gen != NULL && c->open_gen == *gen)
        return false;
    return sub_protected(c);
}

/* Whether a message may go to c now. When not, deliveries pause and on_hb
 * runs the check (recheck), out of the engine's callback. */
static bool consume_allowed(conn_t *c)
{
    if (c->close_after_write)
        return false;
    if (c->authing || c->recheck_due)
        return false;
    if (!needs_recheck(c))
        return true;
    c->recheck_due = true;
    tn_consumer_credit(&c->consumer, 0);
    uv_timer_start(&c->hb, on_hb, 0, 0);
    return false;
}

static void sub_refused_text(const conn_t *c, char *text, size_t len)
{
    snprintf(text, len,
             "AUTH failed for SUB on \"%s\" \"%s\": the grants, checked again once they "
             "expired or changed, no longer permit it",
             c->sub_topic, c->sub_channel);
}

/* The subscription's right ended: nothing more is sent to it, and the
 * error closes the connection (its leases return to the channel then). */
static void refuse_consumer(conn_t *c, tn_nsq_err_t err, const char *text)
{
    tn_consumer_credit(&c->consumer, 0);
    tn_buf_reset(&c->unchecked);
    send_error(c, err, text);
}

/* The check permits the subscription: what waited goes, deliveries resume. */
static void consume_checked(conn_t *c)
{
    c->recheck_due = false;
    if (tn_buf_size(&c->unchecked) > 0) {
        int rc = tn_buf_append(&c->out, tn_buf_data(&c->unchecked), tn_buf_size(&c->unchecked));
        tn_buf_reset(&c->unchecked);
        if (rc != 0) {
            conn_close(c);
            return;
        }
        flush(c);
    }
    if (c->state != ST_CLOSED && !c->held)
        tn_consumer_credit(&c->consumer, rdy_in_force(c));
}

/* From on_hb: check c's subscription again. Without AUTH a protected
 * topic ends it; with AUTH expired grants are asked for again (on_auth
 * judges the answer). */
static void recheck(conn_t *c)
{
    if (c->authing || c->close_after_write)
        return;
    if (!needs_recheck(c)) {
        consume_checked(c);
        return;
    }
    c->recheck_due = false;
    if (c->srv->auth != NULL) {
        start_auth(c);
        return;
    }
    char text[640];
    (void)open_refused(c, "SUB", c->sub_topic, text, sizeof(text));
    refuse_consumer(c, TN_NSQ_E_UNAUTHORIZED, text);
}

/* May this command run? With AUTH configured the connection's grants
 * decide; without, a protected topic is refused. 1 yes, 0 no (an error
 * went out), -1 not yet (the grants expired and are being renewed). */
static int auth_gate(conn_t *c, const tn_nsq_cmd_t *cmd)
{
    const char *name = cmd->op == TN_NSQ_SUB    ? "SUB"
                       : cmd->op == TN_NSQ_MPUB ? "MPUB"
                       : cmd->op == TN_NSQ_DPUB ? "DPUB"
                                                : "PUB";
    char text[640];
    const tn_nsq_opts_t *o = &c->srv->opts;
    if (c->srv->auth == NULL) {
        char topic[TN_NSQ_NAME_MAX + 1];
        copy_name(topic, sizeof(topic), cmd->topic);
        if (!open_refused(c, name, topic, text, sizeof(text)))
            return 1;
        send_error(c, TN_NSQ_E_UNAUTHORIZED, text);
        return 0;
    }
    if (c->authz == NULL) {
        snprintf(text, sizeof(text), "AUTH required before %s", name);
        send_error(c, TN_NSQ_E_AUTH_FIRST, text);
        return 0;
    }
    if (!tn_authz_current(c->authz, tn_now_mono_ms())) {
        start_auth(c);
        return -1;
    }
    char topic[256], channel[256] = "";
    copy_name(topic, sizeof(topic), cmd->topic);
    bool ok;
    if (cmd->op == TN_NSQ_SUB) {
        copy_name(channel, sizeof(channel), cmd->channel);
        ok = tn_authz_can_subscribe(c->authz, topic, channel);
    } else {
        ok = tn_authz_can_publish(c->authz, topic);
        if (ok && o->pub_refused != NULL &&
            o->pub_refused(o->protected_arg, topic, c->authz->identity, text, sizeof(text))) {
            char line[sizeof(text) + 16];
            snprintf(line, sizeof(line), "%s refused: %s", name, text);
            send_error(c, TN_NSQ_E_UNAUTHORIZED, line);
            return 0;
        }
    }
    if (ok)
        return 1;
    snprintf(text, sizeof(text), "AUTH failed for %s on \"%s\" \"%s\"", name, topic, channel);
    send_error(c, TN_NSQ_E_UNAUTHORIZED, text);
    return 0;
}

/* Without AUTH, while the open door cannot judge the topic of a SUB,
 * PUB, MPUB or DPUB (open_unjudged): the command waits, unread, up to
 * JUDGE_WAIT_MS (a lone node's replica catches up within milliseconds of
 * its start; a node whose cluster is down does not), then is refused,
 * its error out, the connection kept (the client retries, as after a
 * drain's refusal). 1 refused; -1 waiting (on_hb looks again; a
 * publish's refusal also waits for the answers of the publishes before
 * it, as answers leave in command order: on_published resumes); 0
 * judged. Before auth_gate, which would find the topic open. */
static int unjudged_refused(conn_t *c, const tn_nsq_cmd_t *cmd)
{
    char topic[TN_NSQ_NAME_MAX + 1];
    char text[640];
    copy_name(topic, sizeof(topic), cmd->topic);
    if (!open_unjudged(c, topic, text, sizeof(text))) {
        c->judge_since = 0;
        return 0;
    }
    int64_t now = tn_now_mono_ms();
    if (c->judge_since == 0) {
        c->judge_since = now;
        arm_hb(c);
    }
    if (now - c->judge_since < JUDGE_WAIT_MS || (cmd->op != TN_NSQ_SUB && c->phead != NULL))
        return -1;
    c->judge_since = 0;
    tn_nsq_err_t e = cmd->op == TN_NSQ_SUB    ? TN_NSQ_E_SUB_FAILED
                     : cmd->op == TN_NSQ_MPUB ? TN_NSQ_E_MPUB_FAILED
                     : cmd->op == TN_NSQ_DPUB ? TN_NSQ_E_DPUB_FAILED
                                              : TN_NSQ_E_PUB_FAILED;
    send_error_as(c, e, text, false);
    return 1;
}

/* Whether the command answers with a frame other than a publish answer
 * (these wait until earlier publishes have answered). */
static bool answers(tn_nsq_op_t op)
{
    switch (op) {
    case TN_NSQ_PUB:
    case TN_NSQ_MPUB:
    case TN_NSQ_DPUB:
    case TN_NSQ_RDY:
    case TN_NSQ_NOP:
        return false;
    default:
        return true;
    }
}

/* What nsqd checks of a command before its arguments (protocol_v2.go:
 * enforceTLSPolicy for all but IDENTIFY, then the command's state): the
 * error to answer (its words into text), or TN_NSQ_E_NONE. A command
 * whose arguments are also wrong gets this error, as from nsqd. */
static tn_nsq_err_t refusal(const conn_t *c, tn_nsq_op_t op, char *text, size_t len)
{
    bool refused;
    if (c->srv->opts.tls_required && c->tls == NULL && op != TN_NSQ_IDENTIFY) {
        snprintf(text, len, "cannot %s in current state (TLS required)", tn_nsq_op_name(op));
        return TN_NSQ_E_INVALID;
    }
    switch (op) {
    case TN_NSQ_IDENTIFY:
    case TN_NSQ_AUTH:
        refused = c->subscribed;
        break;
    case TN_NSQ_SUB:
        if (!c->subscribed && c->opts.heartbeat_ms <= 0) {
            snprintf(text, len, "cannot SUB with heartbeats disabled");
            return TN_NSQ_E_INVALID;
        }
        refused = c->subscribed;
        break;
    case TN_NSQ_RDY: /* after CLS, ignored (parse_failed, handle) */
    case TN_NSQ_FIN: /* FIN, REQ and TOUCH still work after CLS */
    case TN_NSQ_REQ:
    case TN_NSQ_TOUCH:
        refused = !c->subscribed;
        break;
    case TN_NSQ_CLS:
        refused = !c->subscribed || c->cls;
        break;
    default:
        refused = false;
        break;
    }
    if (!refused)
        return TN_NSQ_E_NONE;
    snprintf(text, len, "cannot %s in current state", tn_nsq_op_name(op));
    return TN_NSQ_E_INVALID;
}

/* Handle one command. Returns false when the connection must stop
 * processing (closed, blocked); *consume says whether the bytes are used
 * up (IDENTIFY consumes them itself, before switching compression). */
static bool handle(conn_t *c, const tn_nsq_cmd_t *cmd, size_t consumed)
{
    uint32_t part;
    uint64_t off;
    int rc;
    char text[96];
    tn_nsq_err_t refused = refusal(c, cmd->op, text, sizeof(text));
    if (refused != TN_NSQ_E_NONE) {
        send_error(c, refused, text);
        return false;
    }
    if (cmd->op == TN_NSQ_SUB || cmd->op == TN_NSQ_PUB || cmd->op == TN_NSQ_MPUB ||
        cmd->op == TN_NSQ_DPUB) {
        int u = unjudged_refused(c, cmd);
        if (u < 0)
            return false; /* not consumed: it runs again once judged, or refused */
        if (u > 0) {
            tn_buf_consume(&c->in, consumed);
            return c->state != ST_CLOSED && !c->close_after_write;
        }
        int g = auth_gate(c, cmd);
        if (g <= 0)
            return false; /* not consumed when waiting: it runs after the renewal */
    }
    switch (cmd->op) {
    case TN_NSQ_IDENTIFY:
        handle_identify(c, cmd, consumed);
        return c->state != ST_CLOSED && !c->close_after_write;
    case TN_NSQ_AUTH:
        /* Consumed first: a cached answer resumes processing at once. The
         * secret is copied before the bytes can move. */
        handle_auth(c, cmd, consumed);
        return !c->blocked && c->state != ST_CLOSED && !c->close_after_write;
    case TN_NSQ_SUB:
        snprintf(c->sub_topic, sizeof(c->sub_topic), "%.*s", (int)cmd->topic.len, cmd->topic.base);
        snprintf(c->sub_channel, sizeof(c->sub_channel), "%.*s", (int)cmd->channel.len,
                 cmd->channel.base);
        tn_buf_consume(&c->in, consumed);
        sub_continue(c);
        return !c->blocked && c->state != ST_CLOSED && !c->close_after_write;
    case TN_NSQ_PUB:
    case TN_NSQ_MPUB:
    case TN_NSQ_DPUB:
        if (c->srv->draining && c->phead != NULL)
            return false; /* waits for the answers before it (on_published resumes) */
        if (c->srv->draining)
            refuse_draining(c, cmd);
        else
            handle_publish(c, cmd);
        break;
    case TN_NSQ_RDY:
        if (c->cls)
            break; /* nsqd ignores RDY once CLS was sent */
        c->rdy = (uint32_t)cmd->num;
        /* Kept for release_held while deliveries are held (and 0 in force
         * after CLS or during a drain, which holds every consumer). */
        if (!c->held)
            tn_consumer_credit(&c->consumer, rdy_in_force(c));
        break;
    case TN_NSQ_FIN:
    case TN_NSQ_REQ:
    case TN_NSQ_TOUCH: {
        const char *name = tn_nsq_op_name(cmd->op);
        if (tn_nsq_id_decode(cmd->id.base, cmd->id.len, &part, &off) != 0) {
            /* nsqd checks only an ID's length: 16 bytes that are not one
             * of its IDs are simply not in flight (the connection stays). */
            settle_failed(c,
                          cmd->op == TN_NSQ_FIN   ? TN_NSQ_E_FIN_FAILED
                          : cmd->op == TN_NSQ_REQ ? TN_NSQ_E_REQ_FAILED
                                                  : TN_NSQ_E_TOUCH_FAILED,
                          name, cmd, TN_ENOTFOUND);
            break;
        }
        if (cmd->op == TN_NSQ_FIN) {
            rc = tn_consumer_fin(&c->consumer, part, off, false, 0);
            if (rc != 0)
                settle_failed(c, TN_NSQ_E_FIN_FAILED, name, cmd, rc);
        } else if (cmd->op == TN_NSQ_REQ) {
            int64_t delay = cmd->num;
            if (delay > c->srv->opts.max_req_ms)
                delay = c->srv->opts.max_req_ms;
            rc = tn_consumer_req(&c->consumer, part, off, false, 0, delay);
            if (rc != 0)
                settle_failed(c, TN_NSQ_E_REQ_FAILED, name, cmd, rc);
        } else {
            rc = tn_consumer_touch(&c->consumer, part, off, false, 0, c->opts.msg_timeout_ms,
                                   c->srv->opts.srv.max_msg_timeout_ms);
            if (rc != 0)
                settle_failed(c, TN_NSQ_E_TOUCH_FAILED, name, cmd, rc);
        }
        break;
    }
    case TN_NSQ_NOP:
        break;
    case TN_NSQ_CLS:
        c->cls = true;
        tn_consumer_credit(&c->consumer, 0);
        respond(c, "CLOSE_WAIT");
        break;
    }
    tn_buf_consume(&c->in, consumed);
    return c->state != ST_CLOSED && !c->close_after_write;
}

static void decode_more(conn_t *c)
{
    bool more = false;
    int rc = c->snappy ? tn_snappy_decode(&c->sdec, NULL, 0, &c->in, READ_CHUNK * 4, &more)
                       : tn_inflate_decode(&c->zdec, NULL, 0, &c->in, READ_CHUNK * 4, &more);
    c->decode_more = more;
    if (rc != 0)
        send_error(c, TN_NSQ_E_BAD_BODY, "invalid compressed stream");
}

/* A command that did not parse: nsqd's checks that come before the
 * failing part go first (protocol_v2.go): the TLS policy, even for an
 * unknown command; the state (a RDY after CLS is ignored, whatever its
 * count); MPUB's AUTH, which nsqd checks before reading the body. Then
 * the parser's error. */
static void parse_failed(conn_t *c, const tn_nsq_cmd_t *cmd)
{
    const char *line = tn_buf_data(&c->in);
    const char *nl = memchr(line, '\n', tn_buf_size(&c->in));
    char text[128];
    if (cmd->op == 0 && nl != NULL && c->srv->opts.tls_required && c->tls == NULL) {
        size_t n = strcspn(line, " \r\n"); /* ends at nl at the latest */
        snprintf(text, sizeof(text), "cannot %.*s in current state (TLS required)",
                 (int)TN_MIN(n, (size_t)64), line);
        send_error(c, TN_NSQ_E_INVALID, text);
        return;
    }
    if (cmd->op == TN_NSQ_RDY && c->cls && nl != NULL) {
        tn_buf_consume(&c->in, (size_t)(nl - line) + 1);
        return;
    }
    tn_nsq_err_t refused = cmd->op != 0 ? refusal(c, cmd->op, text, sizeof(text)) : TN_NSQ_E_NONE;
    if (refused != TN_NSQ_E_NONE) {
        send_error(c, refused, text);
        return;
    }
    /* A topic not judged yet (unjudged_refused) is not refused here: the
     * parse error, fatal, goes out as on an open topic. */
    if (cmd->op == TN_NSQ_MPUB &&
        (cmd->err == TN_NSQ_E_BAD_BODY || cmd->err == TN_NSQ_E_BAD_MESSAGE) &&
        auth_gate(c, cmd) != 1)
        return; /* refused, or the grants are being renewed: parsed again after */
    send_error(c, cmd->err, cmd->errmsg);
}

static void process(conn_t *c)
{
    for (;;) {
        if (c->state != ST_ACTIVE || c->blocked || c->close_after_write)
            return;
        if (c->tls != NULL && !c->tls_done)
            return; /* handshake under way */
        if (c->npending >= MAX_PENDING_PUBS)
            return;
        size_t len = tn_buf_size(&c->in);
        if (len == 0) {
            c->cmd_started_ms = 0;
            if (c->decode_more) {
                decode_more(c);
                continue;
            }
            return;
        }
        tn_nsq_cmd_t cmd;
        size_t consumed = 0;
        int rc = tn_nsq_parse(tn_buf_data(&c->in), len, &c->srv->opts.limits, &cmd, &consumed);
        if (rc == TN_ESHORT) {
            if (c->cmd_started_ms == 0) {
                c->cmd_started_ms = tn_now_mono_ms();
                arm_hb(c);
            }
            if (c->decode_more) {
                decode_more(c);
                continue;
            }
            return;
        }
        if (rc != 0 && c->npending > 0)
            return; /* answer the publishes before the error */
        if (rc != 0) {
            parse_failed(c, &cmd);
            if (c->state != ST_ACTIVE || c->close_after_write)
                return;
            continue; /* an ignored RDY */
        }
        if (answers(cmd.op) && c->npending > 0)
            return;
        c->cmd_started_ms = 0;
        if (!handle(c, &cmd, consumed))
            return;
    }
}

/* --- input ------------------------------------------------------------------------- */

/* Bytes after TLS: through the decompressor when one is on. */
static void feed_plain(conn_t *c, const char *data, size_t len)
{
    if (!c->snappy && !c->deflate) {
        if (tn_buf_append(&c->in, data, len) != 0)
            conn_close(c);
        return;
    }
    bool more = false;
    int rc = c->snappy ? tn_snappy_decode(&c->sdec, data, len, &c->in, READ_CHUNK * 4, &more)
                       : tn_inflate_decode(&c->zdec, data, len, &c->in, READ_CHUNK * 4, &more);
    c->decode_more = more;
    if (rc != 0)
        send_error(c, TN_NSQ_E_BAD_BODY, "invalid compressed stream");
}

/* The TLS handshake finished: answer OK through it, as nsqd does, then
 * switch on the compression IDENTIFY negotiated, if any. */
static void tls_established(conn_t *c)
{
    c->tls_done = true;
    tn_tls_common_name(c->tls, c->common_name, sizeof(c->common_name));
    respond(c, "OK");
    if (c->state != ST_CLOSED && (c->opts.snappy || c->opts.deflate))
        switch_compression(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    static char scratch[READ_CHUNK]; /* loop thread only; compressed input lands here */
    if (c->snappy || c->deflate || c->tls != NULL || c->draining) {
        *buf = uv_buf_init(scratch, sizeof(scratch));
        return;
    }
    if (tn_buf_reserve(&c->in, READ_CHUNK) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(c->in.base + c->in.len, READ_CHUNK);
}

static void stop_reading(conn_t *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static bool should_read(const conn_t *c)
{
    return c->state == ST_ACTIVE || c->state == ST_MAGIC
               ? !c->blocked && !c->close_after_write && c->npending < MAX_PENDING_PUBS &&
                     !c->decode_more && unsent(c) < MAX_UNSENT
               : false;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void start_reading(conn_t *c)
{
    if (c->reading || !should_read(c))
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = true;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = stream->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->draining)
        return; /* dropped: the connection is closing */
    /* The loop's time (CLOCK_MONOTONIC's, as tn_now_mono_ms, read when
     * the poll returned): for the heartbeat's liveness deadline, in
     * seconds, a few ms early is as good, and a read of the clock per
     * command is not free. */
    c->last_recv_ms = (int64_t)uv_now(stream->loop);
    if (c->tls != NULL) {
        bool done = false;
        int rc = tn_tls_feed(c->tls, buf->base, (size_t)nread, &c->tlsin, &done);
        flush(c); /* handshake records, alerts */
        if (rc != 0) {
            TN_LOG_RL(TN_LOG_NOTICE, 10000, "NSQ client %s: %s; closing", c->remote,
                      tn_tls_errmsg(c->tls));
            conn_close(c);
            return;
        }
        if (done && !c->tls_done)
            tls_established(c);
        if (c->state == ST_CLOSED)
            return;
        if (tn_buf_size(&c->tlsin) > 0) {
            feed_plain(c, tn_buf_data(&c->tlsin), tn_buf_size(&c->tlsin));
            tn_buf_reset(&c->tlsin);
        }
    } else if (c->snappy || c->deflate) {
        feed_plain(c, buf->base, (size_t)nread);
    } else {
        c->in.len += (size_t)nread;
    }
    if (c->state == ST_MAGIC) {
        if (tn_buf_size(&c->in) < TN_NSQ_MAGIC_LEN)
            return;
        if (memcmp(tn_buf_data(&c->in), TN_NSQ_MAGIC, TN_NSQ_MAGIC_LEN) != 0) {
            TN_LOG_RL(TN_LOG_NOTICE, 10000, "NSQ client %s: bad protocol magic; closing",
                      c->remote);
            /* nsqd answers with a bare E_BAD_PROTOCOL error frame. */
            tn_buf_reset(&c->in);
            send_error(c, TN_NSQ_E_BAD_PROTOCOL, "");
            return;
        }
        tn_buf_consume(&c->in, TN_NSQ_MAGIC_LEN);
        c->state = ST_ACTIVE;
        c->last_hb_ms = c->last_recv_ms;
        arm_hb(c);
    }
    process(c);
    if (!should_read(c))
        stop_reading(c);
}

/* --- timers ------------------------------------------------------------------------- */

static void on_hb(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->draining)
        return;
    int64_t now = tn_now_mono_ms();
    if (c->state == ST_MAGIC) {
        if (now - c->connected_ms >= c->srv->opts.handshake_timeout_ms) {
            conn_close(c);
            return;
        }
        arm_hb(c);
        return;
    }
    if (c->judge_since != 0) {
        process(c); /* the command waiting for its topic to be judged */
        if (c->state == ST_CLOSED || c->close_after_write)
            return;
    }
    if (c->subscribed && (c->recheck_due || needs_recheck(c))) {
        /* A delivery found its right to consume must be checked, or an
         * idle subscription's grants expired. */
        recheck(c);
        if (c->state == ST_CLOSED || c->close_after_write)
            return;
    }
    if (c->cmd_started_ms != 0 && now - c->cmd_started_ms >= c->srv->opts.command_timeout_ms &&
        !c->blocked && c->npending == 0) {
        send_error(c, TN_NSQ_E_INVALID, "command timed out");
        return;
    }
    int64_t hb = c->opts.heartbeat_ms;
    if (hb > 0) {
        if (now - c->last_recv_ms >= 2 * hb) {
            TN_LOG_RL(TN_LOG_NOTICE, 10000, "NSQ client %s: no data for %" PRId64 " ms; closing",
                      c->remote, now - c->last_recv_ms);
            conn_close(c);
            return;
        }
        if (now - c->last_hb_ms >= hb) {
            c->last_hb_ms = now;
            respond(c, "_heartbeat_");
        }
    }
    arm_hb(c);
}

/* Run on_hb at the earliest of: the handshake deadline, the next
 * heartbeat, the liveness deadline, the command deadline. */
static void arm_hb(conn_t *c)
{
    if (c->state == ST_CLOSED || c->draining)
        return;
    int64_t now = tn_now_mono_ms();
    int64_t at;
    if (c->state == ST_MAGIC) {
        at = c->connected_ms + c->srv->opts.handshake_timeout_ms;
    } else {
        at = now + c->srv->opts.command_timeout_ms;
        int64_t hb = c->opts.heartbeat_ms;
        if (hb > 0) {
            at = TN_MIN(at, c->last_hb_ms + hb);
            at = TN_MIN(at, c->last_recv_ms + 2 * hb);
        }
        if (c->cmd_started_ms != 0)
            at = TN_MIN(at, c->cmd_started_ms + c->srv->opts.command_timeout_ms);
        if (c->judge_since != 0)
            at = TN_MIN(at, now + JUDGE_POLL_MS);
    }
    int64_t delay = at > now ? at - now : 1;
    uv_timer_start(&c->hb, on_hb, (uint64_t)delay, 0);
}

/* --- listener ------------------------------------------------------------------------- */

static void on_reject_closed(uv_handle_t *h)
{
    tn_free(h);
}

static void on_connection(uv_stream_t *server, int status)
{
    tn_nsq_server_t *s = server->data;
    if (status != 0 || s->closing)
        return;
    if (s->nconns >= s->opts.max_connections) {
        uv_tcp_t *t = tn_malloc(sizeof(*t));
        if (t == NULL)
            return;
        uv_tcp_init(s->loop, t);
        s->refused++;
        if (uv_accept(server, (uv_stream_t *)t) == 0)
            TN_LOG_RL(TN_LOG_WARN, 10000, "NSQ connection refused: %" PRIu32 " open (max)",
                      s->nconns);
        uv_close((uv_handle_t *)t, on_reject_closed);
        return;
    }
    conn_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    bool accepted = uv_accept(server, (uv_stream_t *)&c->tcp) == 0;
    if (accepted && !tn_addr_fd_room(&c->tcp)) {
        s->refused++;
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "NSQ connection refused: near the descriptor limit (%" PRIu32 " open)",
                  s->nconns);
        accepted = false;
    }
    if (!accepted) {
        c->refs = 1;
        s->refs++;
        c->state = ST_CLOSED;
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_timer_init(s->loop, &c->hb);
    c->hb.data = c;
    uv_timer_init(s->loop, &c->flush);
    c->flush.data = c;
    c->refs = 3;
    s->refs++;
    tn_buf_init(&c->in);
    tn_buf_init(&c->out);
    tn_buf_init(&c->stage);
    tn_buf_init(&c->wire);
    tn_buf_init(&c->wbuf);
    tn_buf_init(&c->tlsin);
    tn_buf_init(&c->unchecked);
    c->open_gen = UINT64_MAX;
    tn_snappy_dec_init(&c->sdec);
    tn_snappy_enc_init(&c->senc);
    tn_nsq_client_defaults(&c->opts, s->opts.msg_timeout_ms);
    c->connected_ms = c->last_recv_ms = tn_now_mono_ms();
    tn_addr_peer(&c->tcp, c->remote, sizeof(c->remote));
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    arm_hb(c);
    start_reading(c);
}

static void on_listener_closed(uv_handle_t *h)
{
    server_unref(h->data);
}

int tn_nsq_server_start(uv_loop_t *loop, tn_broker_t *broker, const tn_nsq_opts_t *opts,
                        const tn_netaddr_t *addr, tn_nsq_server_t **out, char *err, size_t errlen)
{
    int rc;
    *out = NULL;
    tn_nsq_server_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->loop = loop;
    s->broker = broker;
    s->opts = *opts;
    if (opts->tls_cert != NULL && opts->tls_cert[0] != '\0') {
        rc = tn_tls_ctx_new(opts->tls_cert, opts->tls_key, opts->tls_ca,
                            (tn_tls_client_policy_t)opts->tls_policy, opts->tls_min_version,
                            &s->tls, err, errlen);
        if (rc != 0) {
            tn_free(s);
            return rc;
        }
    }
    s->opts.srv.tls_available = s->tls != NULL;
    if (opts->auth_local != NULL) {
        rc = tn_nsqauth_new_local(loop, opts->auth_local, &s->auth);
        if (rc != 0) {
            tn_errbuf(err, errlen, "NSQ AUTH by tern users: %s", tn_strerror(rc));
            tn_tls_ctx_free(s->tls);
            tn_free(s);
            return rc;
        }
    } else if (opts->auth_http_address != NULL && opts->auth_http_address[0] != '\0') {
        rc = tn_nsqauth_new(loop, opts->auth_http_address, 5000, &s->auth);
        if (rc != 0) {
            tn_errbuf(err, errlen, "auth-http-address \"%s\": %s", opts->auth_http_address,
                      tn_strerror(rc));
            tn_tls_ctx_free(s->tls);
            tn_free(s);
            return rc;
        }
    }
    s->opts.srv.auth_required = s->auth != NULL;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->refs = 1;
    rc = tn_addr_listen(&s->listener, addr, on_connection, err, errlen);
    if (rc != 0) {
        /* Freed once the handle has closed (the caller runs the loop). */
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
        *out = NULL;
        return rc;
    }
    s->port = tn_addr_local_port(&s->listener);
    *out = s;
    return 0;
}

int tn_nsq_server_producers_json(const tn_nsq_server_t *s, const tn_pubs_filter_t *f, tn_buf_t *out)
{
    bool any = false;
    /* A producer is a connection with a publish that succeeded, to a
     * topic the caller is shown (f's shown: the others are not named, nor
     * is a producer of those alone). nsqd's topic filter names only that
     * topic's count, and keeps every producer. */
    tn_pubs_filter_t shown = {NULL, f != NULL ? f->shown : NULL, f != NULL ? f->arg : NULL};
    for (conn_t *c = s->conns; c != NULL; c = c->next) {
        bool published = false;
        for (const tn_nsq_pubcount_t *p = c->pubs; p != NULL && !published; p = p->next)
            published = tn_nsq_pubcount_shown(p, &shown);
        if (!published)
            continue;
        tn_buf_append(out, any ? "," : "[", 1);
        describe_conn(c, f, out);
        any = true;
    }
    return any ? tn_buf_append(out, "]", 1) : tn_buf_append(out, "null", 4);
}

void tn_nsq_server_drain(tn_nsq_server_t *s)
{
    s->draining = true;
    for (conn_t *c = s->conns; c != NULL; c = c->next)
        if (c->subscribed)
            tn_consumer_credit(&c->consumer, 0);
}

void tn_nsq_server_stats(const tn_nsq_server_t *s, tn_nsq_server_stats_t *out)
{
    out->connections = s->nconns;
    out->consumers = 0;
    out->in_flight = 0;
    for (const conn_t *c = s->conns; c != NULL; c = c->next) {
        if (!c->subscribed)
            continue;
        out->consumers++;
        out->in_flight += tn_consumer_inflight(&c->consumer);
    }
    memcpy(out->errors, s->errors, sizeof(out->errors));
    out->refused_connections = s->refused;
}

tn_nsqauth_t *tn_nsq_server_auth(const tn_nsq_server_t *s)
{
    return s->auth;
}

bool tn_nsq_server_has_tls(const tn_nsq_server_t *s)
{
    return s->tls != NULL;
}

void tn_nsq_server_set_tls(tn_nsq_server_t *s, tn_tls_ctx_t *ctx)
{
    TN_ASSERT(s->tls != NULL && ctx != NULL);
    tn_tls_ctx_free(s->tls);
    s->tls = ctx;
}

int tn_nsq_server_port(const tn_nsq_server_t *s)
{
    return s->port;
}

void tn_nsq_server_close(tn_nsq_server_t *s, void (*cb)(void *arg), void *arg)
{
    s->closing = true;
    s->close_cb = cb;
    s->close_arg = arg;
    while (s->conns != NULL)
        conn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
