/* Registration with nsqlookupd. See lookupd.h for the design. */
#include "core/platform.h"

#include "proto/nsq/lookupd.h"

#include "proto/nsq/codec.h"

#include "core/alloc.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/netaddr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PING_MS        15000
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 15000

typedef struct lconn_s lconn_t;

struct lconn_s {
    tn_lookupd_t *l;
    char host[256];
    char port[8];
    uv_getaddrinfo_t gai;
    uv_connect_t creq;
    uv_tcp_t tcp;
    uv_timer_t timer;
    tn_buf_t in;
    int backoff_ms;
    uint32_t refs; /* timer + tcp (when open) + a resolve or connect in flight */
    bool tcp_open;
    bool connected;
    bool gone; /* dropped from the set (tn_lookupd_set): closing, not to reconnect */
    lconn_t *next;
};

struct tn_lookupd_s {
    uv_loop_t *loop;
    tn_broker_t *broker;
    tn_lookupd_opts_t opts;
    char *broadcast;
    char *version;
    lconn_t *conns;
    /* Holds the object open while the set is empty, so it is freed only
     * in a close callback, as every other path frees it. */
    uv_timer_t anchor;
    uint32_t open; /* lconns not yet freed, plus the anchor until stop */
    bool stopping;
    void (*stop_cb)(void *arg);
    void *stop_arg;
};

static void lookupd_unref(tn_lookupd_t *l)
{
    if (--l->open == 0 && l->stopping) {
        void (*cb)(void *) = l->stop_cb;
        void *arg = l->stop_arg;
        tn_free(l->broadcast);
        tn_free(l->version);
        tn_free(l);
        if (cb != NULL)
            cb(arg);
    }
}

static void lconn_unref(lconn_t *c)
{
    if (--c->refs > 0)
        return;
    tn_lookupd_t *l = c->l;
    tn_buf_fini(&c->in);
    tn_free(c);
    lookupd_unref(l);
}

static void on_anchor_closed(uv_handle_t *h)
{
    lookupd_unref(h->data);
}

/* Whether c is on its way out: the client stops or c left the set. */
static bool ending(const lconn_t *c)
{
    return c->l->stopping || c->gone;
}

static void on_handle_closed(uv_handle_t *h)
{
    lconn_unref(h->data);
}

static void on_write_done(uv_write_t *w, int status)
{
    (void)status;
    tn_free(w); /* the bytes follow the request in one allocation */
}

static void send_bytes(lconn_t *c, const void *data, size_t len)
{
    if (!c->connected)
        return;
    uv_write_t *w = tn_malloc(sizeof(*w) + len);
    if (w == NULL)
        return;
    memcpy(w + 1, data, len);
    uv_buf_t b = uv_buf_init((char *)(w + 1), (unsigned)len);
    if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_write_done) != 0)
        tn_free(w);
}

/* "VERB topic[ channel]\n" */
static void send_cmd(lconn_t *c, const char *verb, const char *topic, const char *channel)
{
    /* Names nsqd would not take (a long /v1 topic) are not NSQ's to see. */
    if (!tn_nsq_valid_topic(topic, strlen(topic)) ||
        (channel != NULL && !tn_nsq_valid_channel(channel, strlen(channel))))
        return;
    char line[600];
    int n = channel != NULL ? snprintf(line, sizeof(line), "%s %s %s\n", verb, topic, channel)
                            : snprintf(line, sizeof(line), "%s %s\n", verb, topic);
    if (n > 0 && (size_t)n < sizeof(line))
        send_bytes(c, line, (size_t)n);
}

static void start_connect(lconn_t *c);

static void on_timer(uv_timer_t *t)
{
    lconn_t *c = t->data;
    if (c->connected) {
        send_bytes(c, "PING\n", 5);
        return;
    }
    start_connect(c);
}

/* The connection is gone: close the socket, try again after a backoff. */
static void lost(lconn_t *c)
{
    c->connected = false;
    if (c->tcp_open) {
        c->tcp_open = false;
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    }
    if (ending(c))
        return;
    uv_timer_start(&c->timer, on_timer, (uint64_t)c->backoff_ms, 0);
    c->backoff_ms = TN_MIN(c->backoff_ms * 2, BACKOFF_MAX_MS);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    lconn_t *c = h->data;
    (void)suggested;
    if (tn_buf_reserve(&c->in, 4096) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(c->in.base + c->in.len, 4096);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    lconn_t *c = s->data;
    (void)buf;
    if (n < 0) {
        TN_LOG_RL(TN_LOG_WARN, 60000, "lookupd %s:%s: connection lost (%s); reconnecting", c->host,
                  c->port, uv_strerror((int)n));
        lost(c);
        return;
    }
    c->in.len += (size_t)n;
    while (tn_buf_size(&c->in) >= 8) {
        const unsigned char *p = (const unsigned char *)tn_buf_data(&c->in);
        uint32_t size = be32(p);
        if (size < 4 || size > 1024 * 1024) {
            lost(c);
            return;
        }
        if (tn_buf_size(&c->in) < 4 + (size_t)size)
            break;
        uint32_t type = be32(p + 4);
        if (type == 1)
            TN_LOG_RL(TN_LOG_WARN, 60000, "lookupd %s:%s answered: %.*s", c->host, c->port,
                      (int)TN_MIN(size - 4, 200u), (const char *)p + 8);
        tn_buf_consume(&c->in, 4 + (size_t)size);
    }
}

/* Register everything this node has. */
static void register_all(lconn_t *c)
{
    tn_broker_t *b = c->l->broker;
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->state != TN_OBJ_READY)
                continue;
            send_cmd(c, "REGISTER", t->name, NULL);
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
                if (ch->state == TN_OBJ_READY)
                    send_cmd(c, "REGISTER", t->name, ch->name);
        }
    }
}

static void on_connected(uv_connect_t *req, int status)
{
    lconn_t *c = req->data;
    if (ending(c) || status != 0) {
        if (status != 0 && !ending(c))
            TN_LOG_RL(TN_LOG_WARN, 60000, "lookupd %s:%s: cannot connect (%s); retrying", c->host,
                      c->port, uv_strerror(status));
        lost(c);
        lconn_unref(c);
        return;
    }
    c->connected = true;
    c->backoff_ms = BACKOFF_MIN_MS;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    tn_lookupd_t *l = c->l;
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    char body[1024];
    int n = snprintf(body, sizeof(body),
                     "{\"broadcast_address\":\"%s\",\"hostname\":\"%s\",\"tcp_port\":%d,"
                     "\"http_port\":%d,\"version\":\"%s\"}",
                     l->broadcast[0] != '\0' ? l->broadcast : host, host, l->opts.tcp_port,
                     l->opts.http_port, l->version);
    /* The magic, the command line, then the body's u32 big-endian size. */
    static const char start[] = "  V1IDENTIFY\n";
    unsigned char size[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 8), (unsigned char)n};
    send_bytes(c, start, sizeof(start) - 1);
    send_bytes(c, size, sizeof(size));
    send_bytes(c, body, (size_t)n);
    register_all(c);
    uv_timer_start(&c->timer, on_timer, PING_MS, PING_MS);
    TN_LOG(TN_LOG_INFO, "registered with lookupd %s:%s", c->host, c->port);
    lconn_unref(c);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    lconn_t *c = g->data;
    if (ending(c) || status != 0 || res == NULL) {
        uv_freeaddrinfo(res);
        if (!ending(c))
            lost(c);
        lconn_unref(c);
        return;
    }
    uv_tcp_init(c->l->loop, &c->tcp);
    c->tcp.data = c;
    c->tcp_open = true;
    c->refs++;
    c->creq.data = c;
    int rc = uv_tcp_connect(&c->creq, &c->tcp, res->ai_addr, on_connected);
    uv_freeaddrinfo(res);
    if (rc != 0) {
        lost(c);
        lconn_unref(c);
        return;
    }
    /* the resolve's reference passes to the connect */
}

static void start_connect(lconn_t *c)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    c->gai.data = c;
    c->refs++;
    if (uv_getaddrinfo(c->l->loop, &c->gai, on_resolved, c->host, c->port, &hints) != 0) {
        c->refs--;
        lost(c);
    }
}

/* Engine events: follow creations and deletions. */
static void on_event(void *arg, tn_broker_event_t ev, const char *topic, const char *channel)
{
    tn_lookupd_t *l = arg;
    for (lconn_t *c = l->conns; c != NULL; c = c->next) {
        switch (ev) {
        case TN_EV_TOPIC_UP:
            send_cmd(c, "REGISTER", topic, NULL);
            break;
        case TN_EV_TOPIC_DOWN:
            send_cmd(c, "UNREGISTER", topic, NULL);
            break;
        case TN_EV_CHANNEL_UP:
            send_cmd(c, "REGISTER", topic, channel);
            break;
        case TN_EV_CHANNEL_DOWN:
            send_cmd(c, "UNREGISTER", topic, channel);
            break;
        case TN_EV_TOPIC_FAILED:
            break; /* never registered */
        case TN_EV_PARTS_OPENED:
            break; /* registered with the topic */
        }
    }
}

/* One "host:port" of a list (trimmed of spaces) into hp, as every
 * address option reads it ([IPv6]:port too): a server needs a host, and a
 * port to dial. */
static bool parse_one(const char *p, size_t len, tn_hostport_t *hp)
{
    char one[TN_NETADDR_HOST_MAX + 16];
    while (len > 0 && *p == ' ')
        p++, len--;
    while (len > 0 && p[len - 1] == ' ')
        len--;
    if (len == 0 || len >= sizeof(one))
        return false;
    memcpy(one, p, len);
    one[len] = '\0';
    return tn_netaddr_split(one, hp, NULL, 0) == 0 && hp->host[0] != '\0' && hp->port != 0;
}

static lconn_t *find_conn(tn_lookupd_t *l, const tn_hostport_t *hp)
{
    char port[8];
    snprintf(port, sizeof(port), "%d", hp->port);
    for (lconn_t *c = l->conns; c != NULL; c = c->next)
        if (strcmp(c->host, hp->host) == 0 && strcmp(c->port, port) == 0)
            return c;
    return NULL;
}

/* A new connection to hp, not yet started. NULL: out of memory. */
static lconn_t *add_conn(tn_lookupd_t *l, const tn_hostport_t *hp)
{
    lconn_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    snprintf(c->host, sizeof(c->host), "%s", hp->host);
    snprintf(c->port, sizeof(c->port), "%d", hp->port);
    c->l = l;
    c->backoff_ms = BACKOFF_MIN_MS;
    tn_buf_init(&c->in);
    uv_timer_init(l->loop, &c->timer);
    c->timer.data = c;
    c->refs = 1;
    c->next = l->conns;
    l->conns = c;
    l->open++;
    return c;
}

/* Close c's socket and timer; c goes when its last reference does. */
static void close_conn(lconn_t *c)
{
    c->connected = false;
    if (c->tcp_open) {
        c->tcp_open = false;
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    }
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

int tn_lookupd_start(uv_loop_t *loop, tn_broker_t *broker, const char *addrs,
                     const tn_lookupd_opts_t *opts, tn_lookupd_t **out)
{
    tn_lookupd_t *l = tn_calloc(1, sizeof(*l));
    if (l == NULL)
        return UV_ENOMEM;
    l->loop = loop;
    l->broker = broker;
    l->opts = *opts;
    l->broadcast = tn_strdup(opts->broadcast_address != NULL ? opts->broadcast_address : "");
    l->version = tn_strdup(opts->version);
    if (l->broadcast == NULL || l->version == NULL) {
        tn_free(l->broadcast);
        tn_free(l->version);
        tn_free(l);
        return UV_ENOMEM;
    }
    uv_timer_init(loop, &l->anchor);
    l->anchor.data = l;
    l->open = 1;
    const char *p = addrs;
    int rc = 0;
    while (*p != '\0' && rc == 0) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        tn_hostport_t hp;
        bool blank = strspn(p, " ") >= len;
        if (!blank && !parse_one(p, len, &hp))
            rc = UV_EINVAL;
        else if (!blank && find_conn(l, &hp) == NULL && add_conn(l, &hp) == NULL)
            rc = UV_ENOMEM;
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (rc == 0)
        rc = tn_broker_listen(broker, on_event, l);
    if (rc != 0) {
        l->stopping = true;
        for (lconn_t *c = l->conns; c != NULL; c = c->next)
            uv_close((uv_handle_t *)&c->timer, on_handle_closed);
        uv_close((uv_handle_t *)&l->anchor, on_anchor_closed);
        return rc;
    }
    for (lconn_t *c = l->conns; c != NULL; c = c->next)
        start_connect(c);
    *out = l;
    return 0;
}

int tn_lookupd_set(tn_lookupd_t *l, const char *const *addrs, size_t n)
{
    tn_hostport_t *want = n > 0 ? tn_calloc(n, sizeof(*want)) : NULL;
    bool *ok = n > 0 ? tn_calloc(n, sizeof(*ok)) : NULL;
    if (n > 0 && (want == NULL || ok == NULL)) {
        tn_free(want);
        tn_free(ok);
        return UV_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ok[i] = parse_one(addrs[i], strlen(addrs[i]), &want[i]);
        if (!ok[i])
            TN_LOG(TN_LOG_WARN, "lookupd \"%s\": not a host:port; not registering there", addrs[i]);
    }
    /* Leave the lookupds no longer wanted: nsqd closes the connection,
     * without UNREGISTER. */
    for (lconn_t **pp = &l->conns; *pp != NULL;) {
        lconn_t *c = *pp;
        bool keep = false;
        for (size_t i = 0; i < n && !keep; i++)
            keep = ok[i] && find_conn(l, &want[i]) == c;
        if (keep) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        c->gone = true;
        TN_LOG(TN_LOG_INFO, "lookupd %s:%s: removed", c->host, c->port);
        close_conn(c);
    }
    /* Join the new ones; their connections register everything. */
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!ok[i] || find_conn(l, &want[i]) != NULL)
            continue;
        lconn_t *c = add_conn(l, &want[i]);
        if (c == NULL)
            rc = UV_ENOMEM;
        else
            start_connect(c);
    }
    tn_free(want);
    tn_free(ok);
    return rc;
}

void tn_lookupd_stop(tn_lookupd_t *l, void (*cb)(void *arg), void *arg)
{
    l->stopping = true;
    l->stop_cb = cb;
    l->stop_arg = arg;
    tn_broker_unlisten(l->broker, on_event, l);
    for (lconn_t *c = l->conns; c != NULL; c = c->next)
        close_conn(c);
    uv_close((uv_handle_t *)&l->anchor, on_anchor_closed);
}
