/* QUIC endpoints on libuv with ngtcp2 0.12 and GnuTLS. See quic.h.
 *
 * DESIGN
 *
 * The happy path of a datagram:
 *   1. on_recv decodes the version and connection IDs (ngtcp2_pkt_decode_
 *      version_cid with our fixed 16-byte CIDs for short headers) and looks
 *      the destination CID up in the endpoint's CID table.
 *   2. A known CID: ngtcp2_conn_read_pkt on its connection. ngtcp2 calls
 *      back for stream data (delivered to the stream's owner at once; the
 *      windows are extended when the owner returns), acknowledgements (the
 *      send chunks they cover are freed) and stream ends.
 *   3. An unknown CID on a long-header Initial, when the endpoint accepts:
 *      a new server connection. An unknown CID on a short header: a
 *      stateless reset, smaller than the packet that caused it. Anything
 *      else is dropped with a rate-limited debug line.
 *   4. The connection is marked dirty; the endpoint's prepare handle (run
 *      once per loop pass, before the loop polls) flushes every dirty
 *      connection: ngtcp2_conn_writev_stream until it has nothing, the
 *      packets laid end to end in the endpoint's batch buffer, then the
 *      connection's timer is armed for ngtcp2_conn_get_expiry.
 *
 * Batches (the cost of a packet is mostly the kernel's, one sendmsg and
 * one recvmsg each, then its AEAD): a flush's packets of one size leave in
 * one sendmsg with UDP_SEGMENT (GSO; the kernel cuts them into datagrams
 * of that size, a shorter last one ending the batch), at most GSO_SEGS of
 * them; a path MTU probe goes alone. No datagram is larger than ngtcp2 made it, so what a real path
 * carries is unchanged. A kernel or socket that refuses GSO (EIO: no
 * checksum offload on the route; EINVAL, ENOPROTOOPT, EOPNOTSUPP: too old)
 * turns it off for the endpoint, logged once, and every packet goes alone
 * with uv_udp_try_send as before; a full socket (EAGAIN, ENOBUFS) sends
 * the batch's packets alone, a copy queued with uv_udp_send when the
 * socket is still full. The socket is read with UDP_GRO where the kernel
 * has it (Linux 5.0; libuv's UDP handle has no GRO, so a dup of the socket
 * under a uv_poll reads it): one recvmsg takes a sender's batch, cut at
 * the size the control message gives. Else libuv reads it with recvmmsg
 * (UV_UDP_RECVMMSG, RECV_CHUNKS datagrams a call). Each datagram goes into
 * ngtcp2 at once; the flush after the burst answers them all.
 *
 * Invariants:
 *   - A connection is freed only from the top of a loop callback (the
 *     receive callback after read_pkt returned, the timer, the flush), never
 *     inside an ngtcp2 callback: tn_quic_conn_close and errors met inside
 *     callbacks set a flag the flush acts on. tn_quic_ep_close may run
 *     inside one (an owner's data callback): it kills every connection at
 *     once, but their ngtcp2 and TLS objects live until the timer's close
 *     callback, and every ngtcp2 callback fails at once for a dead
 *     connection, so ngtcp2 stops with the packet it was reading.
 *   - Stream bytes handed to ngtcp2 stay where they are until acknowledged
 *     (ngtcp2 keeps pointers for retransmission): a send chunk never moves
 *     or grows past its capacity, and goes only when every byte in it was
 *     acknowledged, or with the stream.
 *   - Once a stream's owner closed or reset it, or its closed callback ran,
 *     no callback reaches the owner for it again.
 *
 * Failure modes: a fatal ngtcp2 error sends a CONNECTION_CLOSE (a TLS
 * alert for a handshake failure, so the peer does not wait for its
 * handshake timeout) and kills the connection; a peer's close or a
 * stateless reset (NGTCP2_ERR_DRAINING) kills it at once, without the
 * draining period, because nothing of ours reuses its CIDs. */
#include "core/platform.h"

#include "cluster/quic.h"

#include "cluster/wire.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/netaddr.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <netinet/udp.h>
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* Linux 4.18; older headers lack it */
#endif
#ifndef UDP_GRO
#define UDP_GRO 104 /* Linux 5.0 */
#endif
#endif

#define CID_LEN     16 /* every CID we issue */
#define MAX_PKT     NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE
#define RECV_BUF    65536 /* libuv's recvmmsg takes one datagram per 64 KiB */
#define RECV_CHUNKS 16    /* datagrams per recvmmsg */
/* Packets per GSO send: the kernel takes at most 64 segments and 64 KiB
 * of UDP payload in one; 44 full packets of MAX_PKT fit. */
#define GSO_SEGS      44
#define GRO_READS     32 /* recvmsg calls per readable event, as libuv's */
#define CID_BUCKETS   256
#define CHUNK_MIN     16384
#define MAX_VECS      8
#define MAX_QUEUED    512 /* copies waiting in uv_udp_send when the socket is full */
#define CACHE_ENTRIES 16  /* client TLS sessions kept */
#define RESETS_PER_S  1000

#define PRIORITY "NORMAL:-VERS-ALL:+VERS-TLS1.3:%DISABLE_TLS13_COMPAT_MODE"

typedef struct chunk_s chunk_t;
struct chunk_s {
    chunk_t *next;
    uint64_t off; /* stream offset of data[0] */
    size_t len;
    size_t cap;
    uint8_t data[];
};

struct tn_quic_stream_s {
    tn_quic_conn_t *c;
    int64_t id;
    const tn_quic_stream_cbs_t *cbs;
    void *arg;
    chunk_t *head, *tail; /* bytes not yet acknowledged, in offset order */
    uint64_t acked;       /* stream offset acknowledged */
    uint64_t sent;        /* stream offset handed to ngtcp2 */
    uint64_t written;     /* stream offset queued by the owner */
    uint64_t reset_code;
    uint64_t peer_code; /* the application code of the peer's reset, 0 for none */
    bool detached;      /* the owner is gone: no callbacks */
    bool fin_pending;   /* send FIN after the queued bytes */
    bool fin_sent;      /* ngtcp2 took the FIN */
    bool reset_wanted;  /* shut the stream down on the next flush */
    bool blocked;       /* ngtcp2 refused more data in this flush */
    tn_quic_stream_t *prev, *next;
};

typedef struct cid_ent_s cid_ent_t;
struct cid_ent_s {
    cid_ent_t *next;  /* bucket chain */
    cid_ent_t *cnext; /* the connection's list */
    tn_quic_conn_t *c;
    uint8_t len;
    uint8_t cid[NGTCP2_MAX_CIDLEN];
};

struct tn_quic_conn_s {
    tn_quic_ep_t *ep;
    ngtcp2_conn *q;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    uv_timer_t timer;
    struct sockaddr_storage remote;
    socklen_t remotelen;
    char peer[TN_NETADDR_NAME_MAX];
    const tn_quic_conn_cbs_t *cbs;
    void *arg;
    cid_ent_t *cids;
    tn_quic_stream_t *streams;
    uint8_t ekm[TN_QUIC_EKM_LEN];
    uint64_t rx_packets;
    uint64_t app_code;
    int fail; /* an error met inside a callback: kill on the next flush */
    bool server;
    bool ready;
    bool resumed;
    bool closing; /* the owner closed it: CONNECTION_CLOSE on the next flush */
    bool dead;    /* killed; memory goes with the timer's close */
    bool dirty;
    bool reset_seen;
    tn_quic_conn_t *prev, *next;
};

typedef struct {
    char key[TN_NETADDR_NAME_MAX];
    gnutls_datum_t data;
    uint64_t used;
} cache_ent_t;

struct tn_quic_ep_s {
    uv_loop_t *loop;
    uv_udp_t udp;
    uv_prepare_t prep;
    struct sockaddr_storage local;
    socklen_t locallen;
    uint8_t reset_key[TN_QUIC_RESET_KEY_LEN];
    bool accept;
    const tn_quic_conn_cbs_t *server_cbs;
    void *server_arg;
    unsigned max_conns;
    unsigned nserver;
    uint64_t idle_ns, keepalive_ns, handshake_ns;
    tn_quic_conn_t *conns;
    unsigned ndirty;
    cid_ent_t *buckets[CID_BUCKETS];
    gnutls_datum_t ticket_key;
    cache_ent_t cache[CACHE_ENTRIES];
    uint64_t cache_clock;
    unsigned queued;
    bool gso_off; /* the kernel refused UDP_SEGMENT: one datagram per send */
    /* With UDP_GRO the socket is read through rpoll, on rfd (a dup of the
     * socket, so libuv's watcher of the socket for sends is another). */
    bool gro;
    int rfd;
    uv_poll_t rpoll;
    uint64_t reset_second;
    unsigned resets_this_second;
    bool closing;
#ifdef TN_TEST
    bool test_deaf;   /* drop every datagram received */
    bool test_no_gso; /* a GSO send fails as a kernel without it would */
    tn_quic_ep_test_stats_t test_stats;
#endif
    bool silent_close;
    unsigned handles; /* the socket and the prepare handle, until closed */
    unsigned pending_closes;
    void (*close_cb)(void *);
    void *close_arg;
    uint8_t *rbuf;                    /* RECV_CHUNKS x RECV_BUF (recvmmsg); GRO reads use 64 KiB */
    uint8_t sbuf[GSO_SEGS * MAX_PKT]; /* a flush's batch of packets */
};

/* --- the process's certificate ---------------------------------------------- */

static pthread_once_t cred_once = PTHREAD_ONCE_INIT;
static gnutls_certificate_credentials_t cred;
static int cred_err;

static void make_cred(void)
{
    gnutls_x509_privkey_t key = NULL;
    gnutls_x509_crt_t crt = NULL;
    int rv = gnutls_x509_privkey_init(&key);
    if (rv == 0)
        rv = gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                          GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0);
    if (rv == 0)
        rv = gnutls_x509_crt_init(&crt);
    uint8_t serial[16] = {0};
    if (rv == 0)
        rv = gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial);
    serial[0] &= 0x7f;
    time_t now = time(NULL);
    if (rv == 0)
        rv = gnutls_x509_crt_set_version(crt, 3);
    if (rv == 0)
        rv = gnutls_x509_crt_set_serial(crt, serial, sizeof serial);
    /* Dates carry no trust (the dialer never checks them); a year keeps
     * dialers that do check working. */
    if (rv == 0)
        rv = gnutls_x509_crt_set_activation_time(crt, now - 3600);
    if (rv == 0)
        rv = gnutls_x509_crt_set_expiration_time(crt, now + 366 * 86400);
    if (rv == 0)
        rv = gnutls_x509_crt_set_dn(crt, "CN=tern-cluster", NULL);
    if (rv == 0)
        rv = gnutls_x509_crt_set_key(crt, key);
    if (rv == 0)
        rv = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0);
    if (rv == 0)
        rv = gnutls_certificate_allocate_credentials(&cred);
    if (rv == 0)
        rv = gnutls_certificate_set_x509_key(cred, &crt, 1, key);
    if (rv != 0) {
        TN_LOG(TN_LOG_ERROR, "quic: making the TLS certificate: %s", gnutls_strerror(rv));
        cred_err = TN_EFAILED;
    }
    if (crt)
        gnutls_x509_crt_deinit(crt);
    if (key)
        gnutls_x509_privkey_deinit(key);
}

/* --- small helpers ------------------------------------------------------------ */

static void *mem_malloc(size_t size, void *ud)
{
    return tn_malloc(size);
}
static void mem_free(void *p, void *ud)
{
    tn_free(p);
}
static void *mem_calloc(size_t n, size_t size, void *ud)
{
    return tn_calloc(n, size);
}
static void *mem_realloc(void *p, size_t size, void *ud)
{
    return tn_realloc(p, size);
}
static const ngtcp2_mem qmem = {NULL, mem_malloc, mem_free, mem_calloc, mem_realloc};

static int rnd(void *p, size_t n)
{
    return gnutls_rnd(GNUTLS_RND_NONCE, p, n) == 0 ? 0 : TN_EFAILED;
}

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    if (rnd(dest, len) != 0)
        memset(dest, 0, len); /* gnutls_rnd does not fail once initialised */
}

static unsigned cid_hash(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h % CID_BUCKETS;
}

static tn_quic_conn_t *cid_find(tn_quic_ep_t *ep, const uint8_t *p, size_t n)
{
    for (cid_ent_t *e = ep->buckets[cid_hash(p, n)]; e; e = e->next)
        if (e->len == n && memcmp(e->cid, p, n) == 0)
            return e->c;
    return NULL;
}

static int cid_add(tn_quic_conn_t *c, const uint8_t *p, size_t n)
{
    if (n > NGTCP2_MAX_CIDLEN)
        return UV_EINVAL;
    cid_ent_t *e = tn_calloc(1, sizeof *e);
    if (!e)
        return UV_ENOMEM;
    e->c = c;
    e->len = (uint8_t)n;
    memcpy(e->cid, p, n);
    unsigned b = cid_hash(p, n);
    e->next = c->ep->buckets[b];
    c->ep->buckets[b] = e;
    e->cnext = c->cids;
    c->cids = e;
    return 0;
}

static void cid_unlink(tn_quic_ep_t *ep, cid_ent_t *e)
{
    cid_ent_t **pp = &ep->buckets[cid_hash(e->cid, e->len)];
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    if (*pp)
        *pp = e->next;
}

static void cid_remove(tn_quic_conn_t *c, const uint8_t *p, size_t n)
{
    for (cid_ent_t **pp = &c->cids; *pp; pp = &(*pp)->cnext) {
        cid_ent_t *e = *pp;
        if (e->len == n && memcmp(e->cid, p, n) == 0) {
            cid_unlink(c->ep, e);
            *pp = e->cnext;
            tn_free(e);
            return;
        }
    }
}

static void cid_remove_all(tn_quic_conn_t *c)
{
    while (c->cids) {
        cid_ent_t *e = c->cids;
        c->cids = e->cnext;
        cid_unlink(c->ep, e);
        tn_free(e);
    }
}

static void mark_dirty(tn_quic_conn_t *c)
{
    if (c->dead || c->dirty)
        return;
    c->dirty = true;
    if (c->ep->ndirty++ == 0)
        uv_ref((uv_handle_t *)&c->ep->prep);
}

/* --- sending datagrams -------------------------------------------------------- */

typedef struct {
    uv_udp_send_t req;
    tn_quic_ep_t *ep;
    size_t len;
    uint8_t data[];
} send_req_t;

static void on_sent(uv_udp_send_t *req, int status)
{
    send_req_t *s = (send_req_t *)req;
    s->ep->queued--;
    tn_free(s);
}

static void ep_send(tn_quic_ep_t *ep, const struct sockaddr *to, const uint8_t *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int rc = uv_udp_try_send(&ep->udp, &b, 1, to);
#ifdef TN_TEST
    if (rc >= 0)
        ep->test_stats.single_sends++;
#endif
    if (rc >= 0)
        return;
    if (rc != UV_EAGAIN || ep->queued >= MAX_QUEUED) {
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: dropped an outgoing datagram: %s", uv_strerror(rc));
        return;
    }
    send_req_t *s = tn_malloc(sizeof *s + n);
    if (!s)
        return; /* QUIC retransmits what a lost datagram carried */
    s->ep = ep;
    s->len = n;
    memcpy(s->data, p, n);
    b = uv_buf_init((char *)s->data, (unsigned)n);
    if (uv_udp_send(&s->req, &ep->udp, &b, 1, to, on_sent) != 0) {
        tn_free(s);
        return;
    }
    ep->queued++;
}

/* One sendmsg of len bytes cut by the kernel into datagrams of seg bytes
 * (the last may be shorter). 0, or the UV_ code of the failure. */
static int gso_send(tn_quic_ep_t *ep, const struct sockaddr *to, const uint8_t *p, size_t len,
                    size_t seg)
{
#ifdef TN_TEST
    if (ep->test_no_gso)
        return UV_EINVAL; /* what a kernel before 4.18 answers */
#endif
#ifdef __linux__
    uv_os_fd_t fd;
    int rc = uv_fileno((const uv_handle_t *)&ep->udp, &fd);
    if (rc != 0)
        return rc;
    struct iovec iov = {(void *)p, len};
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_name = (void *)to;
    m.msg_namelen =
        to->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t seg16 = (uint16_t)seg;
    memcpy(CMSG_DATA(cm), &seg16, sizeof seg16);
    ssize_t r;
    do
        r = sendmsg(fd, &m, 0);
    while (r < 0 && errno == EINTR);
    return r < 0 ? uv_translate_sys_error(errno) : 0;
#else
    return UV_ENOTSUP;
#endif
}

/* Send the len bytes of packets at p, each seg bytes but the last: one
 * GSO send when the kernel takes it, else one datagram each. */
static void ep_send_batch(tn_quic_ep_t *ep, const struct sockaddr *to, const uint8_t *p, size_t len,
                          size_t seg)
{
    /* Behind datagrams queued in libuv, the batch goes through the queue
     * too (ep_send), so the socket's order stays the order of the flush. */
    if (len > seg && !ep->gso_off && ep->queued == 0) {
        int rc = gso_send(ep, to, p, len, seg);
        if (rc == 0) {
#ifdef TN_TEST
            ep->test_stats.gso_sends++;
#endif
            return;
        }
        if (rc == UV_EIO || rc == UV_EINVAL || rc == UV_ENOPROTOOPT || rc == UV_ENOTSUP) {
            ep->gso_off = true;
#ifdef TN_TEST
            ep->test_stats.gso_refused++;
#endif
            TN_LOG(TN_LOG_INFO,
                   "quic: the kernel refused a UDP GSO send (%s): one datagram per send from now "
                   "on",
                   uv_strerror(rc));
        }
        /* Anything else (a full socket: EAGAIN, ENOBUFS) falls back for
         * this batch only. */
    }
    for (size_t off = 0; off < len; off += seg)
        ep_send(ep, to, p + off, TN_MIN(seg, len - off));
}

/* --- streams ------------------------------------------------------------------ */

static tn_quic_stream_t *stream_new(tn_quic_conn_t *c, int64_t id)
{
    tn_quic_stream_t *s = tn_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->c = c;
    s->id = id;
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    return s;
}

static void stream_free(tn_quic_stream_t *s)
{
    tn_quic_conn_t *c = s->c;
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    while (s->head) {
        chunk_t *k = s->head;
        s->head = k->next;
        tn_free(k);
    }
    tn_free(s);
}

/* Tell the owner the stream ended (once), then detach it. */
static void stream_end(tn_quic_stream_t *s, int err)
{
    if (s->detached)
        return;
    s->detached = true;
    if (s->cbs && s->cbs->closed)
        s->cbs->closed(s->arg, s, err);
}

/* Fill v with the unsent bytes of s from s->sent; returns the count. */
static size_t stream_vecs(tn_quic_stream_t *s, ngtcp2_vec *v, size_t max, uint64_t *total)
{
    size_t n = 0;
    *total = 0;
    for (chunk_t *k = s->head; k && n < max; k = k->next) {
        uint64_t end = k->off + k->len;
        if (end <= s->sent)
            continue;
        uint64_t from = s->sent > k->off ? s->sent - k->off : 0;
        v[n].base = k->data + from;
        v[n].len = (size_t)(k->len - from);
        *total += v[n].len;
        n++;
    }
    return n;
}

/* --- connections: dying ------------------------------------------------------ */

static void on_ep_handle_closed(uv_handle_t *h)
{
    tn_quic_ep_t *ep = h->data;
    if (--ep->handles > 0)
        return;
    for (int i = 0; i < CACHE_ENTRIES; i++)
        if (ep->cache[i].data.data)
            gnutls_free(ep->cache[i].data.data);
    if (ep->ticket_key.data)
        gnutls_free(ep->ticket_key.data);
    tn_free(ep->rbuf);
    void (*cb)(void *) = ep->close_cb;
    void *arg = ep->close_arg;
    tn_free(ep);
    if (cb)
        cb(arg);
}

static void on_rpoll_closed(uv_handle_t *h)
{
    tn_quic_ep_t *ep = h->data;
    close(ep->rfd); /* only now: libuv watched it until the close */
    on_ep_handle_closed(h);
}

static void ep_close_handles(tn_quic_ep_t *ep)
{
    uv_close((uv_handle_t *)&ep->udp, on_ep_handle_closed);
    uv_close((uv_handle_t *)&ep->prep, on_ep_handle_closed);
    if (ep->gro)
        uv_close((uv_handle_t *)&ep->rpoll, on_rpoll_closed);
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_quic_conn_t *c = h->data;
    tn_quic_ep_t *ep = c->ep;
    /* ngtcp2 and TLS go here, never in conn_kill: a kill may come from
     * inside an ngtcp2 call (an owner's callback that closes the endpoint),
     * and ngtcp2 goes on with the packet after the callback returns. */
    if (c->q)
        ngtcp2_conn_del(c->q);
    if (c->tls)
        gnutls_deinit(c->tls);
    tn_free(c);
    ep->pending_closes--;
    if (ep->closing && ep->pending_closes == 0)
        ep_close_handles(ep);
}

/* Kill c now: the owner's callbacks run first (streams, then the
 * connection); its streams go at once, its ngtcp2 and TLS objects and c
 * itself with the timer's close (on_timer_closed), so a kill from inside
 * an ngtcp2 call is safe: every callback returns at once for a dead
 * connection. */
static void conn_kill(tn_quic_conn_t *c, int err)
{
    if (c->dead)
        return;
    c->dead = true;
    tn_quic_ep_t *ep = c->ep;
    if (c->dirty) {
        c->dirty = false;
        if (--ep->ndirty == 0)
            uv_unref((uv_handle_t *)&ep->prep);
    }
    cid_remove_all(c);
    for (tn_quic_stream_t *s = c->streams; s; s = s->next)
        stream_end(s, err);
    if (c->cbs && c->cbs->closed)
        c->cbs->closed(c->arg, c, err);
    while (c->streams)
        stream_free(c->streams);
    if (c->server)
        ep->nserver--;
    if (c->prev)
        c->prev->next = c->next;
    else
        ep->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

static void conn_send_close(tn_quic_conn_t *c, const ngtcp2_connection_close_error *ccerr)
{
    if (!c->q || ngtcp2_conn_is_in_closing_period(c->q) || ngtcp2_conn_is_in_draining_period(c->q))
        return;
    uint8_t buf[MAX_PKT];
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(c->q, &ps.path, &pi, buf, sizeof buf, ccerr,
                                                        uv_hrtime());
    if (n > 0)
        ep_send(c->ep, (const struct sockaddr *)&c->remote, buf, (size_t)n);
}

/* Close c after the ngtcp2 error rv and kill it. */
static void conn_fail(tn_quic_conn_t *c, int rv)
{
    if (c->dead)
        return;
    ngtcp2_connection_close_error ccerr;
    ngtcp2_connection_close_error_default(&ccerr);
    int err = TN_EPROTO;
    switch (rv) {
    case NGTCP2_ERR_DRAINING:
        err = c->reset_seen ? UV_ECONNRESET : TN_ECLOSED;
        break;
    case NGTCP2_ERR_CLOSING:
        err = TN_ECLOSED;
        break;
    case NGTCP2_ERR_DROP_CONN:
        break;
    case NGTCP2_ERR_IDLE_CLOSE:
    case NGTCP2_ERR_HANDSHAKE_TIMEOUT:
        err = UV_ETIMEDOUT;
        break;
    case NGTCP2_ERR_CRYPTO:
        ngtcp2_connection_close_error_set_transport_error_tls_alert(
            &ccerr, ngtcp2_conn_get_tls_alert(c->q), NULL, 0);
        conn_send_close(c, &ccerr);
        break;
    default:
        ngtcp2_connection_close_error_set_transport_error_liberr(&ccerr, rv, NULL, 0);
        conn_send_close(c, &ccerr);
        break;
    }
    if (c->fail)
        err = c->fail;
    if (err == TN_EPROTO)
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: connection with %s failed: %s", c->peer,
                  ngtcp2_strerror(rv));
    conn_kill(c, err);
}

/* --- connections: writing ---------------------------------------------------- */

static void on_conn_timer(uv_timer_t *t);

static void conn_arm_timer(tn_quic_conn_t *c)
{
    ngtcp2_tstamp exp = ngtcp2_conn_get_expiry(c->q);
    if (exp == UINT64_MAX) {
        uv_timer_stop(&c->timer);
        return;
    }
    uint64_t now = uv_hrtime();
    /* Rounded down: the pacer asks for waits well under a millisecond, and
     * rounding them up to libuv's 1 ms would cap a connection at one
     * burst per millisecond. A wait under 1 ms comes back on the next loop
     * pass. */
    uint64_t ms = exp <= now ? 0 : (exp - now) / 1000000;
    uv_timer_start(&c->timer, on_conn_timer, ms, 0);
}

static void conn_flush(tn_quic_conn_t *c)
{
    if (c->dead)
        return;
    if (c->fail) {
        ngtcp2_connection_close_error ccerr;
        ngtcp2_connection_close_error_default(&ccerr);
        ngtcp2_connection_close_error_set_transport_error_liberr(
            &ccerr, NGTCP2_ERR_CALLBACK_FAILURE, NULL, 0);
        conn_send_close(c, &ccerr);
        conn_kill(c, c->fail);
        return;
    }
    if (c->closing) {
        ngtcp2_connection_close_error ccerr;
        ngtcp2_connection_close_error_default(&ccerr);
        ngtcp2_connection_close_error_set_application_error(&ccerr, c->app_code, NULL, 0);
        conn_send_close(c, &ccerr);
        conn_kill(c, TN_ECLOSED);
        return;
    }
    for (tn_quic_stream_t *s = c->streams, *next; s; s = next) {
        next = s->next;
        s->blocked = false;
        if (s->reset_wanted) {
            s->reset_wanted = false;
            ngtcp2_conn_shutdown_stream(c->q, s->id, s->reset_code);
        }
    }
    uint64_t ts = uv_hrtime();
    tn_quic_ep_t *ep = c->ep;
    const struct sockaddr *to = (const struct sockaddr *)&c->remote;
    /* The batch: nseg packets in ep->sbuf, off bytes, each seg bytes but
     * the last. Packets after the first get room for seg bytes only, so
     * none is larger; a shorter one ends the batch. */
    uint8_t *buf = ep->sbuf;
    size_t off = 0, seg = 0;
    unsigned nseg = 0, maxseg = ep->gso_off ? 1 : GSO_SEGS;
    /* A packet larger than the path is known to carry is a path MTU
     * probe: it goes alone, so a batch's segment size is always one the
     * path carries and a GSO refusal is never the probe's size. */
    size_t path_max = ngtcp2_conn_get_path_max_tx_udp_payload_size(c->q);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    tn_quic_stream_t *s = c->streams;
    for (;;) {
        while (s && (s->blocked || s->fin_sent || (s->sent == s->written && !s->fin_pending)))
            s = s->next;
        ngtcp2_vec v[MAX_VECS];
        size_t nv = 0;
        uint64_t total = 0;
        uint32_t flags = 0;
        int64_t sid = -1;
        if (s) {
            sid = s->id;
            nv = stream_vecs(s, v, MAX_VECS, &total);
            flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
            if (s->fin_pending && s->sent + total == s->written)
                flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        }
        ngtcp2_ssize ndata = -1;
        size_t room = nseg == 0 ? MAX_PKT : seg;
        ngtcp2_ssize n = ngtcp2_conn_writev_stream(c->q, &ps.path, &pi, buf + off, room, &ndata,
                                                   flags, sid, v, nv, ts);
        if (c->dead) /* an owner's callback inside ngtcp2 closed the endpoint: s is gone */
            return;
        if (s && ndata >= 0) {
            s->sent += (uint64_t)ndata;
            if ((flags & NGTCP2_WRITE_STREAM_FLAG_FIN) && s->sent == s->written)
                s->fin_sent = true;
        }
        if (n < 0) {
            if (n == NGTCP2_ERR_WRITE_MORE)
                continue;
            if (s && (n == NGTCP2_ERR_STREAM_DATA_BLOCKED || n == NGTCP2_ERR_STREAM_SHUT_WR ||
                      n == NGTCP2_ERR_STREAM_NOT_FOUND)) {
                s->blocked = true;
                continue;
            }
            if (nseg > 0)
                ep_send_batch(ep, to, buf, off, seg); /* they were made: the peer may need them */
            conn_fail(c, (int)n);
            return;
        }
        if (n == 0) {
            if (nseg == 0)
                break;
            /* Nothing more, or nothing more that fits in seg bytes (a
             * path MTU probe is larger): send the batch and ask again
             * with a whole packet's room. */
            ep_send_batch(ep, to, buf, off, seg);
            off = 0;
            nseg = 0;
            continue;
        }
        if (nseg == 0 && (size_t)n > path_max) {
            ep_send(ep, to, buf, (size_t)n);
            continue;
        }
        if (nseg++ == 0)
            seg = (size_t)n;
        off += (size_t)n;
        if ((size_t)n < seg || nseg == maxseg) {
            ep_send_batch(ep, to, buf, off, seg);
            off = 0;
            nseg = 0;
        }
    }
    conn_arm_timer(c);
}

static void on_prepare(uv_prepare_t *h)
{
    tn_quic_ep_t *ep = h->data;
    tn_quic_conn_t *next;
    for (tn_quic_conn_t *c = ep->conns; c && ep->ndirty; c = next) {
        next = c->next;
        if (!c->dirty)
            continue;
        c->dirty = false;
        if (--ep->ndirty == 0)
            uv_unref((uv_handle_t *)&ep->prep);
        conn_flush(c); /* may kill c, never another connection */
    }
}

static void on_conn_timer(uv_timer_t *t)
{
    tn_quic_conn_t *c = t->data;
    if (c->dead)
        return;
    int rv = ngtcp2_conn_handle_expiry(c->q, uv_hrtime());
    if (rv != 0) {
        conn_fail(c, rv);
        return;
    }
    conn_flush(c);
}

/* --- ngtcp2 callbacks ------------------------------------------------------------ */

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    tn_quic_conn_t *c = ref->user_data;
    return c->q;
}

static int on_handshake_completed(ngtcp2_conn *q, void *ud)
{
    tn_quic_conn_t *c = ud;
    if (c->dead)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    gnutls_datum_t alpn;
    if (gnutls_alpn_get_selected_protocol(c->tls, &alpn) != 0 ||
        alpn.size != strlen(TN_WIRE_ALPN) || memcmp(alpn.data, TN_WIRE_ALPN, alpn.size) != 0) {
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: %s offered no ALPN %s", c->peer, TN_WIRE_ALPN);
        c->fail = TN_EPROTO;
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    if (gnutls_prf_rfc5705(c->tls, strlen(TN_WIRE_EKM_LABEL), TN_WIRE_EKM_LABEL, 0, NULL,
                           TN_QUIC_EKM_LEN, (char *)c->ekm) != 0) {
        c->fail = TN_EFAILED;
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    c->resumed = gnutls_session_is_resumed(c->tls) != 0;
    c->ready = true;
    if (c->cbs && c->cbs->ready)
        c->cbs->ready(c->arg, c);
    return 0;
}

static int on_recv_stream_data(ngtcp2_conn *q, uint32_t flags, int64_t sid, uint64_t off,
                               const uint8_t *data, size_t len, void *ud, void *sud)
{
    tn_quic_conn_t *c = ud;
    tn_quic_stream_t *s = sud;
    if (c->dead)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    if (s && !s->detached && len > 0 && s->cbs && s->cbs->data)
        s->cbs->data(s->arg, s, data, len);
    if (c->dead) /* the owner closed the endpoint: s is gone */
        return NGTCP2_ERR_CALLBACK_FAILURE;
    /* The owner took the bytes (a framer copies what it keeps): give the
     * window back at once. */
    ngtcp2_conn_extend_max_stream_offset(q, sid, len);
    ngtcp2_conn_extend_max_offset(q, len);
    if ((flags & NGTCP2_STREAM_DATA_FLAG_FIN) && s && !s->detached) {
        stream_end(s, 0);
        s->fin_pending = true;
        mark_dirty(c);
    }
    return 0;
}

static int on_acked(ngtcp2_conn *q, int64_t sid, uint64_t off, uint64_t len, void *ud, void *sud)
{
    tn_quic_conn_t *c = ud;
    tn_quic_stream_t *s = sud;
    if (c->dead)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    if (!s)
        return 0;
    if (off + len > s->acked)
        s->acked = off + len;
    while (s->head && s->head->off + s->head->len <= s->acked && s->head != s->tail) {
        chunk_t *k = s->head;
        s->head = k->next;
        tn_free(k);
    }
    if (s->head && s->head == s->tail && s->head->off + s->head->len <= s->acked &&
        s->acked == s->written) {
        tn_free(s->head);
        s->head = s->tail = NULL;
    }
    return 0;
}

static int on_stream_open(ngtcp2_conn *q, int64_t sid, void *ud)
{
    tn_quic_conn_t *c = ud;
    if (c->dead)
        return 0;
    tn_quic_stream_t *s = stream_new(c, sid);
    if (!s) {
        c->fail = UV_ENOMEM;
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    ngtcp2_conn_set_stream_user_data(q, sid, s);
    if (c->cbs && c->cbs->stream)
        c->cbs->stream(c->arg, c, s);
    if (!s->cbs && !s->detached)
        tn_quic_stream_reset(s, 0);
    return 0;
}

static int on_stream_close(ngtcp2_conn *q, uint32_t flags, int64_t sid, uint64_t code, void *ud,
                           void *sud)
{
    tn_quic_conn_t *c = ud;
    tn_quic_stream_t *s = sud;
    if (c->dead || !s)
        return 0;
    if ((flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) && s->peer_code == 0)
        s->peer_code = code;
    stream_end(s, (flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) ? UV_ECONNRESET : 0);
    bool remote = ngtcp2_conn_is_server(q) ? (sid & 1) == 0 : (sid & 1) == 1;
    stream_free(s);
    if (remote && (sid & 2) == 0)
        ngtcp2_conn_extend_max_streams_bidi(q, 1);
    return 0;
}

static int on_stream_reset(ngtcp2_conn *q, int64_t sid, uint64_t final_size, uint64_t code,
                           void *ud, void *sud)
{
    tn_quic_conn_t *c = ud;
    tn_quic_stream_t *s = sud;
    if (c->dead || !s)
        return 0;
    bool was = s->detached;
    s->peer_code = code;
    stream_end(s, UV_ECONNRESET);
    if (!was) {
        s->reset_wanted = true;
        s->reset_code = 0;
        mark_dirty(c);
    }
    return 0;
}

static int on_stop_sending(ngtcp2_conn *q, int64_t sid, uint64_t code, void *ud, void *sud)
{
    return on_stream_reset(q, sid, 0, code, ud, sud);
}

static int on_stateless_reset(ngtcp2_conn *q, const ngtcp2_pkt_stateless_reset *sr, void *ud)
{
    tn_quic_conn_t *c = ud;
    c->reset_seen = true;
    return 0;
}

static int on_new_cid(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *ud)
{
    tn_quic_conn_t *c = ud;
    if (c->dead) /* its CIDs left the table: none may point at it again */
        return NGTCP2_ERR_CALLBACK_FAILURE;
    if (rnd(cid->data, cidlen) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    cid->datalen = cidlen;
    if (ngtcp2_crypto_generate_stateless_reset_token(token, c->ep->reset_key,
                                                     sizeof c->ep->reset_key, cid) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    if (cid_add(c, cid->data, cid->datalen) != 0) {
        c->fail = UV_ENOMEM;
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_remove_cid(ngtcp2_conn *q, const ngtcp2_cid *cid, void *ud)
{
    tn_quic_conn_t *c = ud;
    if (c->dead)
        return 0;
    cid_remove(c, cid->data, cid->datalen);
    return 0;
}

static void fill_callbacks(ngtcp2_callbacks *cb, bool server)
{
    memset(cb, 0, sizeof *cb);
    if (server) {
        cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    } else {
        cb->client_initial = ngtcp2_crypto_client_initial_cb;
        cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
    }
    cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
    cb->encrypt = ngtcp2_crypto_encrypt_cb;
    cb->decrypt = ngtcp2_crypto_decrypt_cb;
    cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
    cb->update_key = ngtcp2_crypto_update_key_cb;
    cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
    cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
    cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
    cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
    cb->rand = on_rand;
    cb->get_new_connection_id = on_new_cid;
    cb->remove_connection_id = on_remove_cid;
    cb->handshake_completed = on_handshake_completed;
    cb->recv_stream_data = on_recv_stream_data;
    cb->acked_stream_data_offset = on_acked;
    cb->stream_open = on_stream_open;
    cb->stream_close = on_stream_close;
    cb->stream_reset = on_stream_reset;
    cb->stream_stop_sending = on_stop_sending;
    cb->recv_stateless_reset = on_stateless_reset;
}

static void fill_settings(tn_quic_ep_t *ep, ngtcp2_settings *st, ngtcp2_transport_params *p,
                          bool server)
{
    ngtcp2_settings_default(st);
    st->initial_ts = uv_hrtime();
    st->handshake_timeout = ep->handshake_ns;
    st->max_window = 64u * 1024 * 1024;
    st->max_stream_window = 16u * 1024 * 1024;
    ngtcp2_transport_params_default(p);
    p->initial_max_stream_data_bidi_local = 1024 * 1024;
    p->initial_max_stream_data_bidi_remote = 1024 * 1024;
    p->initial_max_stream_data_uni = 0;
    p->initial_max_data = 8u * 1024 * 1024;
    /* Only dialers open streams: 4 lanes of at most 16 each fit, with room
     * for streams still closing. */
    p->initial_max_streams_bidi = server ? 128 : 0;
    p->initial_max_streams_uni = 0;
    p->max_idle_timeout = ep->idle_ns;
}

/* --- TLS ------------------------------------------------------------------------- */

static cache_ent_t *cache_find(tn_quic_ep_t *ep, const char *key)
{
    for (int i = 0; i < CACHE_ENTRIES; i++)
        if (ep->cache[i].data.data && strcmp(ep->cache[i].key, key) == 0)
            return &ep->cache[i];
    return NULL;
}

/* A client saw a session ticket: keep the session for the next dial. */
static int on_ticket(gnutls_session_t tls, unsigned htype, unsigned when, unsigned incoming,
                     const gnutls_datum_t *msg)
{
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(tls);
    tn_quic_conn_t *c = ref->user_data;
    tn_quic_ep_t *ep = c->ep;
    gnutls_datum_t d;
    if (gnutls_session_get_data2(tls, &d) != 0)
        return 0;
    cache_ent_t *e = cache_find(ep, c->peer);
    if (!e) {
        e = &ep->cache[0];
        for (int i = 0; i < CACHE_ENTRIES; i++) {
            if (!ep->cache[i].data.data) {
                e = &ep->cache[i];
                break;
            }
            if (ep->cache[i].used < e->used)
                e = &ep->cache[i];
        }
    }
    if (e->data.data)
        gnutls_free(e->data.data);
    e->data = d;
    snprintf(e->key, sizeof e->key, "%s", c->peer);
    e->used = ++ep->cache_clock;
    return 0;
}

static int tls_setup(tn_quic_conn_t *c)
{
    tn_quic_ep_t *ep = c->ep;
    int rv = gnutls_init(&c->tls, c->server ? GNUTLS_SERVER : GNUTLS_CLIENT);
    if (rv != 0) {
        c->tls = NULL;
        return TN_EFAILED;
    }
    const char *errpos = NULL;
    rv = gnutls_priority_set_direct(c->tls, PRIORITY, &errpos);
    if (rv == 0)
        rv = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, cred);
    if (rv == 0)
        rv = c->server ? ngtcp2_crypto_gnutls_configure_server_session(c->tls)
                       : ngtcp2_crypto_gnutls_configure_client_session(c->tls);
    gnutls_datum_t alpn = {(unsigned char *)TN_WIRE_ALPN, (unsigned)strlen(TN_WIRE_ALPN)};
    if (rv == 0)
        rv = gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
    if (rv == 0 && c->server)
        rv = gnutls_session_ticket_enable_server(c->tls, &ep->ticket_key);
    if (rv == 0 && !c->server) {
        cache_ent_t *e = cache_find(ep, c->peer);
        if (e && gnutls_session_set_data(c->tls, e->data.data, e->data.size) == 0)
            e->used = ++ep->cache_clock;
        gnutls_handshake_set_hook_function(c->tls, GNUTLS_HANDSHAKE_NEW_SESSION_TICKET,
                                           GNUTLS_HOOK_POST, on_ticket);
    }
    if (rv != 0) {
        TN_LOG(TN_LOG_ERROR, "quic: TLS session setup: %s", gnutls_strerror(rv));
        return TN_EFAILED;
    }
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    gnutls_session_set_ptr(c->tls, &c->ref);
    return 0;
}

/* --- connections: making ----------------------------------------------------------- */

static tn_quic_conn_t *conn_alloc(tn_quic_ep_t *ep, bool server, const struct sockaddr *remote)
{
    tn_quic_conn_t *c = tn_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ep = ep;
    c->server = server;
    c->remotelen =
        remote->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    memcpy(&c->remote, remote, c->remotelen);
    tn_netaddr_format(&c->remote, c->peer, sizeof c->peer);
    uv_timer_init(ep->loop, &c->timer);
    c->timer.data = c;
    c->next = ep->conns;
    if (ep->conns)
        ep->conns->prev = c;
    ep->conns = c;
    ep->pending_closes++;
    if (server)
        ep->nserver++;
    return c;
}

/* Tear down a connection that never got an ngtcp2 object or never ran:
 * no owner callback (the owner never saw it). */
static void conn_abort(tn_quic_conn_t *c)
{
    c->cbs = NULL;
    conn_kill(c, UV_ENOMEM);
}

static ngtcp2_path conn_path(tn_quic_conn_t *c, const struct sockaddr *remote, socklen_t rlen)
{
    ngtcp2_path path;
    memset(&path, 0, sizeof path);
    path.local.addr = (ngtcp2_sockaddr *)&c->ep->local;
    path.local.addrlen = c->ep->locallen;
    path.remote.addr = (ngtcp2_sockaddr *)remote;
    path.remote.addrlen = rlen;
    return path;
}

static void conn_read(tn_quic_conn_t *c, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    socklen_t flen =
        from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    ngtcp2_path path = conn_path(c, from, flen);
    ngtcp2_pkt_info pi;
    memset(&pi, 0, sizeof pi);
    c->rx_packets++;
    int rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, p, n, uv_hrtime());
    if (c->dead)
        return;
    if (rv != 0 &&
        (c->fail || ngtcp2_err_is_fatal(rv) || rv == NGTCP2_ERR_DRAINING ||
         rv == NGTCP2_ERR_CLOSING || rv == NGTCP2_ERR_DROP_CONN || rv == NGTCP2_ERR_CRYPTO)) {
        conn_fail(c, rv);
        return;
    }
    mark_dirty(c);
}

static void ep_accept(tn_quic_ep_t *ep, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, p, n) != 0) {
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: dropped a long-header packet for no connection");
        return;
    }
    if (ep->nserver >= ep->max_conns) {
        TN_LOG_RL(TN_LOG_WARN, 5000, "quic: refusing a connection: %u open", ep->nserver);
        return;
    }
    tn_quic_conn_t *c = conn_alloc(ep, true, from);
    if (!c)
        return;
    c->cbs = ep->server_cbs;
    c->arg = ep->server_arg;
    ngtcp2_cid scid;
    scid.datalen = CID_LEN;
    ngtcp2_callbacks cbs;
    ngtcp2_settings st;
    ngtcp2_transport_params tp;
    fill_callbacks(&cbs, true);
    fill_settings(ep, &st, &tp, true);
    tp.original_dcid = hd.dcid;
    tp.stateless_reset_token_present = 1;
    ngtcp2_path path = conn_path(c, from, c->remotelen);
    if (rnd(scid.data, CID_LEN) != 0 ||
        ngtcp2_crypto_generate_stateless_reset_token(tp.stateless_reset_token, ep->reset_key,
                                                     sizeof ep->reset_key, &scid) != 0 ||
        ngtcp2_conn_server_new(&c->q, &hd.scid, &scid, &path, hd.version, &cbs, &st, &tp, &qmem,
                               c) != 0) {
        c->q = NULL;
        conn_abort(c);
        return;
    }
    if (tls_setup(c) != 0 || cid_add(c, scid.data, scid.datalen) != 0 ||
        cid_add(c, hd.dcid.data, hd.dcid.datalen) != 0) {
        conn_abort(c);
        return;
    }
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    ngtcp2_conn_set_keep_alive_timeout(c->q, ep->keepalive_ns);
    conn_read(c, from, p, n);
}

static void ep_reset(tn_quic_ep_t *ep, const struct sockaddr *from, const uint8_t *dcid,
                     size_t dcidlen, size_t pktlen)
{
    /* Smaller than the packet that caused it, so two endpoints that both
     * lost state cannot answer each other forever. */
    if (pktlen < 1 + NGTCP2_MIN_STATELESS_RESET_RANDLEN + NGTCP2_STATELESS_RESET_TOKENLEN + 1)
        return;
    uint64_t sec = uv_hrtime() / 1000000000u;
    if (sec != ep->reset_second) {
        ep->reset_second = sec;
        ep->resets_this_second = 0;
    }
    if (++ep->resets_this_second > RESETS_PER_S)
        return;
    size_t randlen = pktlen - 1 - NGTCP2_STATELESS_RESET_TOKENLEN - 1;
    if (randlen > 64)
        randlen = 64;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rbytes[64], buf[128];
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, dcid, dcidlen);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->reset_key, sizeof ep->reset_key,
                                                     &cid) != 0 ||
        rnd(rbytes, randlen) != 0)
        return;
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(buf, sizeof buf, token, rbytes, randlen);
    if (n > 0)
        ep_send(ep, from, buf, (size_t)n);
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
    if (a->ss_family != b->sa_family)
        return false;
    if (b->sa_family == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)a;
        const struct sockaddr_in *y = (const struct sockaddr_in *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
    const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)b;
    return x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
}

/* Whether the packet ends with the stateless reset token of one of c's
 * destination CIDs. */
static bool conn_has_token(tn_quic_conn_t *c, const uint8_t *p, size_t n)
{
    if (n < NGTCP2_STATELESS_RESET_TOKENLEN + 1 + NGTCP2_MIN_STATELESS_RESET_RANDLEN)
        return false;
    const uint8_t *tail = p + n - NGTCP2_STATELESS_RESET_TOKENLEN;
    ngtcp2_cid_token toks[16];
    size_t num = ngtcp2_conn_get_num_active_dcid(c->q);
    if (num > 16)
        return true; /* more than we look at: let ngtcp2 decide */
    num = ngtcp2_conn_get_active_dcid(c->q, toks);
    for (size_t i = 0; i < num; i++)
        if (toks[i].token_present &&
            memcmp(toks[i].token, tail, NGTCP2_STATELESS_RESET_TOKENLEN) == 0)
            return true;
    return false;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    tn_quic_ep_t *ep = h->data;
    *buf = uv_buf_init((char *)ep->rbuf, RECV_CHUNKS * RECV_BUF);
}

/* One datagram of n bytes at p from `from`. */
static void ep_input(tn_quic_ep_t *ep, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    if (n == 0 || ep->closing)
        return;
#ifdef TN_TEST
    if (ep->test_deaf) {
        ep->test_stats.deaf_drops++;
        return;
    }
#endif
    if (from->sa_family != AF_INET && from->sa_family != AF_INET6)
        return;
    ngtcp2_version_cid vc;
    int rv = ngtcp2_pkt_decode_version_cid(&vc, p, n, CID_LEN);
    if (rv != 0) {
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: dropped a datagram that is no QUIC packet (%zu bytes)",
                  n);
        return;
    }
    tn_quic_conn_t *c = cid_find(ep, vc.dcid, vc.dcidlen);
    if (c) {
        conn_read(c, from, p, n);
        return;
    }
    if (p[0] & 0x80) {
        if (ep->accept)
            ep_accept(ep, from, p, n);
        return;
    }
    /* A short header for no CID we issued. A stateless reset from a peer
     * that lost our connection looks like this (its "CID" is random): it
     * goes to the connection with that peer whose DCID's reset token it
     * ends with, and ngtcp2 acts on it. Anything else is answered with a
     * reset of our own, which also tells a peer that restarted as a client
     * to drop what it still holds of us. */
    bool offered = false;
    for (tn_quic_conn_t *k = ep->conns, *next; k; k = next) {
        next = k->next;
        if (!k->dead && k->q && same_addr(&k->remote, from) && conn_has_token(k, p, n)) {
            offered = true;
            conn_read(k, from, p, n);
        }
    }
    if (!offered)
        ep_reset(ep, from, vc.dcid, vc.dcidlen, n);
}

/* libuv's read of the socket (no UDP_GRO): one datagram per call. */
static void on_recv(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *from,
                    unsigned flags)
{
    tn_quic_ep_t *ep = h->data;
    if (nread < 0) {
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: receive: %s", uv_strerror((int)nread));
        return;
    }
    /* nread 0 and no address: nothing more to read, or recvmmsg's buffer
     * given back (UV_UDP_MMSG_FREE; it is ep->rbuf, kept). */
    if (nread == 0 || !from)
        return;
    ep_input(ep, from, (const uint8_t *)buf->base, (size_t)nread);
}

#ifdef __linux__
/* The read of a UDP_GRO socket: one recvmsg may carry several datagrams
 * of one sender laid end to end, each of the size the UDP_GRO control
 * message gives but the last. */
static void on_readable(uv_poll_t *h, int status, int events)
{
    tn_quic_ep_t *ep = h->data;
    if (status < 0) {
        TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: receive: %s", uv_strerror(status));
        return;
    }
    for (int i = 0; i < GRO_READS && !ep->closing; i++) {
        struct sockaddr_storage from;
        struct iovec iov = {ep->rbuf, RECV_BUF};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_name = &from;
        m.msg_namelen = sizeof from;
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        ssize_t r = recvmsg(ep->rfd, &m, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                TN_LOG_RL(TN_LOG_DEBUG, 5000, "quic: receive: %s", strerror(errno));
            return;
        }
        size_t len = (size_t)r, seg = len;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
                int g;
                memcpy(&g, CMSG_DATA(cm), sizeof g);
                if (g > 0)
                    seg = (size_t)g;
            }
        }
#ifdef TN_TEST
        if (seg < len)
            ep->test_stats.gro_reads++;
#endif
        /* ep_input returns at once once an owner closed the endpoint. */
        for (size_t off = 0; off < len; off += seg)
            ep_input(ep, (const struct sockaddr *)&from, ep->rbuf + off, TN_MIN(seg, len - off));
    }
}

/* Read the socket with UDP_GRO when the kernel has it (Linux 5.0); false
 * when it has not, and libuv reads it. */
static bool ep_start_gro(tn_quic_ep_t *ep, bool no_gro)
{
    uv_os_fd_t fd;
    int one = 1, zero = 0;
    if (no_gro || uv_fileno((const uv_handle_t *)&ep->udp, &fd) != 0 ||
        setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0)
        return false;
    ep->rfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (ep->rfd >= 0 && uv_poll_init_socket(ep->loop, &ep->rpoll, ep->rfd) == 0) {
        ep->rpoll.data = ep;
        ep->handles++;
        if (uv_poll_start(&ep->rpoll, UV_READABLE, on_readable) == 0) {
            ep->gro = true;
            return true;
        }
        /* It counts among the endpoint's handles until closed. */
        uv_close((uv_handle_t *)&ep->rpoll, on_rpoll_closed);
    } else if (ep->rfd >= 0) {
        close(ep->rfd);
    }
    setsockopt(fd, SOL_UDP, UDP_GRO, &zero, sizeof zero);
    return false;
}
#else
static bool ep_start_gro(tn_quic_ep_t *ep, bool no_gro)
{
    return false;
}
#endif

/* --- the public functions ------------------------------------------------------------- */

int tn_quic_ep_open(uv_loop_t *loop, const tn_quic_ep_opts_t *o, tn_quic_ep_t **out, char *err,
                    size_t errlen)
{
    pthread_once(&cred_once, make_cred);
    if (cred_err) {
        tn_errbuf(err, errlen, "quic: could not make the TLS certificate");
        return cred_err;
    }
    tn_quic_ep_t *ep = tn_calloc(1, sizeof *ep);
    if (!ep) {
        tn_errbuf(err, errlen, "quic: out of memory");
        return UV_ENOMEM;
    }
    ep->loop = loop;
    memcpy(ep->reset_key, o->reset_key, sizeof ep->reset_key);
    ep->accept = o->accept;
#ifdef TN_TEST
    ep->silent_close = o->silent_close;
#endif
    ep->server_cbs = o->server_cbs;
    ep->server_arg = o->server_arg;
    ep->max_conns = o->max_conns ? o->max_conns : 1024;
    ep->idle_ns = (o->idle_timeout_ms ? o->idle_timeout_ms : 30000) * NGTCP2_MILLISECONDS;
    ep->keepalive_ns = (o->keepalive_ms ? o->keepalive_ms : 10000) * NGTCP2_MILLISECONDS;
    ep->handshake_ns = (o->handshake_ms ? o->handshake_ms : 10000) * NGTCP2_MILLISECONDS;
    if (gnutls_session_ticket_key_generate(&ep->ticket_key) != 0) {
        tn_free(ep);
        tn_errbuf(err, errlen, "quic: could not make a session ticket key");
        return TN_EFAILED;
    }
    /* Owned by ep; freed with its handles (on_ep_handle_closed). */
    ep->rbuf = tn_malloc((size_t)RECV_CHUNKS * RECV_BUF);
    int rc = ep->rbuf ? uv_udp_init_ex(loop, &ep->udp, AF_UNSPEC | UV_UDP_RECVMMSG) : UV_ENOMEM;
    if (rc != 0) {
        gnutls_free(ep->ticket_key.data);
        tn_free(ep->rbuf);
        tn_free(ep);
        tn_errbuf(err, errlen, "quic: udp socket: %s", uv_strerror(rc));
        return rc;
    }
    ep->udp.data = ep;
    ep->handles = 2;
    uv_prepare_init(loop, &ep->prep);
    ep->prep.data = ep;
    uv_prepare_start(&ep->prep, on_prepare);
    uv_unref((uv_handle_t *)&ep->prep);
    char name[TN_NETADDR_NAME_MAX];
    tn_netaddr_format((const struct sockaddr_storage *)o->bind, name, sizeof name);
    rc = uv_udp_bind(&ep->udp, o->bind, 0);
    int len = sizeof ep->local;
    if (rc == 0)
        rc = uv_udp_getsockname(&ep->udp, (struct sockaddr *)&ep->local, &len);
    ep->locallen = (socklen_t)len;
    if (rc == 0) {
        /* Room for a burst of many streams' packets: the kernel's default
         * (about 200 KiB) drops under 64 calls of 4 KiB in flight, and a
         * drop costs a loss recovery. The kernel caps it at rmem_max. */
        int bufsz = 4 * 1024 * 1024;
        uv_recv_buffer_size((uv_handle_t *)&ep->udp, &bufsz);
        bufsz = 4 * 1024 * 1024;
        uv_send_buffer_size((uv_handle_t *)&ep->udp, &bufsz);
        bool no_gro = false;
#ifdef TN_TEST
        no_gro = o->test_no_gro;
#endif
        if (!ep_start_gro(ep, no_gro))
            rc = uv_udp_recv_start(&ep->udp, on_alloc, on_recv);
    }
    if (rc != 0) {
        tn_errbuf(err, errlen, "quic: bind %s/udp: %s", name, uv_strerror(rc));
        /* The memory goes when libuv lets go of the handles. */
        ep->closing = true;
        ep_close_handles(ep);
        *out = NULL;
        return rc;
    }
    *out = ep;
    return 0;
}

void tn_quic_ep_addr(const tn_quic_ep_t *ep, struct sockaddr_storage *out)
{
    memcpy(out, &ep->local, sizeof *out);
}

void tn_quic_ep_close(tn_quic_ep_t *ep, void (*cb)(void *arg), void *arg)
{
    ep->closing = true;
    ep->close_cb = cb;
    ep->close_arg = arg;
    while (ep->conns) {
        tn_quic_conn_t *c = ep->conns;
        if (c->q && !c->fail && !ep->silent_close) {
            ngtcp2_connection_close_error ccerr;
            ngtcp2_connection_close_error_default(&ccerr);
            ngtcp2_connection_close_error_set_application_error(&ccerr, 0, NULL, 0);
            conn_send_close(c, &ccerr);
        }
        conn_kill(c, TN_ECLOSED);
    }
    if (ep->pending_closes == 0)
        ep_close_handles(ep);
}

int tn_quic_connect(tn_quic_ep_t *ep, const struct sockaddr *peer, const tn_quic_conn_cbs_t *cbs,
                    void *arg, tn_quic_conn_t **out)
{
    if (ep->closing)
        return TN_ECLOSED;
    if (peer->sa_family != AF_INET && peer->sa_family != AF_INET6)
        return UV_EINVAL;
    struct sockaddr_in6 mapped;
    if (peer->sa_family == AF_INET && ep->local.ss_family == AF_INET6) {
        /* A dual-stack socket reaches IPv4 peers at their mapped address. */
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)peer;
        memset(&mapped, 0, sizeof mapped);
        mapped.sin6_family = AF_INET6;
        mapped.sin6_port = v4->sin_port;
        mapped.sin6_addr.s6_addr[10] = 0xff;
        mapped.sin6_addr.s6_addr[11] = 0xff;
        memcpy(&mapped.sin6_addr.s6_addr[12], &v4->sin_addr, 4);
        peer = (const struct sockaddr *)&mapped;
    }
    if (peer->sa_family != ep->local.ss_family)
        return UV_EAFNOSUPPORT;
    tn_quic_conn_t *c = conn_alloc(ep, false, peer);
    if (!c)
        return UV_ENOMEM;
    ngtcp2_cid scid, dcid;
    scid.datalen = dcid.datalen = CID_LEN;
    ngtcp2_callbacks qcbs;
    ngtcp2_settings st;
    ngtcp2_transport_params tp;
    fill_callbacks(&qcbs, false);
    fill_settings(ep, &st, &tp, false);
    ngtcp2_path path = conn_path(c, (const struct sockaddr *)&c->remote, c->remotelen);
    int rc = UV_ENOMEM;
    if (rnd(scid.data, CID_LEN) != 0 || rnd(dcid.data, CID_LEN) != 0)
        rc = TN_EFAILED;
    else if (ngtcp2_conn_client_new(&c->q, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &qcbs, &st,
                                    &tp, &qmem, c) == 0)
        rc = 0;
    if (rc != 0) {
        c->q = NULL;
        conn_abort(c);
        return rc;
    }
    rc = tls_setup(c);
    if (rc == 0)
        rc = cid_add(c, scid.data, scid.datalen);
    if (rc != 0) {
        conn_abort(c);
        return rc;
    }
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    ngtcp2_conn_set_keep_alive_timeout(c->q, ep->keepalive_ns);
    c->cbs = cbs;
    c->arg = arg;
    mark_dirty(c);
    *out = c;
    return 0;
}

void tn_quic_conn_set_cbs(tn_quic_conn_t *c, const tn_quic_conn_cbs_t *cbs, void *arg)
{
    c->cbs = cbs;
    c->arg = arg;
}

int tn_quic_conn_ekm(tn_quic_conn_t *c, uint8_t out[TN_QUIC_EKM_LEN])
{
    if (!c->ready || c->dead)
        return TN_ECLOSED;
    memcpy(out, c->ekm, TN_QUIC_EKM_LEN);
    return 0;
}

void tn_quic_conn_close(tn_quic_conn_t *c, uint64_t app_code)
{
    if (c->dead || c->closing)
        return;
    c->closing = true;
    c->app_code = app_code;
    mark_dirty(c);
}

const char *tn_quic_conn_peer(const tn_quic_conn_t *c)
{
    return c->peer;
}

bool tn_quic_conn_resumed(const tn_quic_conn_t *c)
{
    return c->resumed;
}

bool tn_quic_conn_closing(const tn_quic_conn_t *c)
{
    return c->dead || c->closing || c->fail;
}

uint64_t tn_quic_conn_rx_packets(const tn_quic_conn_t *c)
{
    return c->rx_packets;
}

int tn_quic_stream_open(tn_quic_conn_t *c, const tn_quic_stream_cbs_t *cbs, void *arg,
                        tn_quic_stream_t **out)
{
    if (!c->ready || tn_quic_conn_closing(c))
        return TN_ECLOSED;
    if (ngtcp2_conn_get_streams_bidi_left(c->q) == 0)
        return UV_EAGAIN;
    tn_quic_stream_t *s = stream_new(c, -1);
    if (!s)
        return UV_ENOMEM;
    int rv = ngtcp2_conn_open_bidi_stream(c->q, &s->id, s);
    if (rv != 0) {
        stream_free(s);
        return rv == NGTCP2_ERR_STREAM_ID_BLOCKED ? UV_EAGAIN : UV_ENOMEM;
    }
    s->cbs = cbs;
    s->arg = arg;
    *out = s;
    return 0;
}

void tn_quic_stream_set_cbs(tn_quic_stream_t *s, const tn_quic_stream_cbs_t *cbs, void *arg)
{
    s->cbs = cbs;
    s->arg = arg;
}

int tn_quic_stream_write(tn_quic_stream_t *s, const void *p, size_t n)
{
    if (s->detached || s->fin_pending || tn_quic_conn_closing(s->c))
        return TN_ECLOSED;
    if (n == 0)
        return 0;
    chunk_t *k = s->tail;
    if (k && k->cap - k->len >= n) {
        memcpy(k->data + k->len, p, n);
        k->len += n;
    } else {
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        k = tn_malloc(sizeof *k + cap);
        if (!k)
            return UV_ENOMEM;
        k->next = NULL;
        k->off = s->written;
        k->len = n;
        k->cap = cap;
        memcpy(k->data, p, n);
        if (s->tail)
            s->tail->next = k;
        else
            s->head = k;
        s->tail = k;
    }
    s->written += n;
    mark_dirty(s->c);
    return 0;
}

uint64_t tn_quic_stream_acked(const tn_quic_stream_t *s)
{
    return s->acked;
}

size_t tn_quic_stream_unacked(const tn_quic_stream_t *s)
{
    return (size_t)(s->written - s->acked);
}

void tn_quic_stream_close(tn_quic_stream_t *s)
{
    if (s->detached)
        return;
    s->detached = true;
    s->fin_pending = true;
    mark_dirty(s->c);
}

uint64_t tn_quic_stream_peer_code(const tn_quic_stream_t *s)
{
    return s->peer_code;
}

void tn_quic_stream_reset(tn_quic_stream_t *s, uint64_t app_code)
{
    if (s->detached && (s->reset_wanted || s->fin_sent))
        return;
    s->detached = true;
    s->reset_wanted = true;
    s->reset_code = app_code;
    mark_dirty(s->c);
}

tn_quic_conn_t *tn_quic_stream_conn(const tn_quic_stream_t *s)
{
    return s->c;
}

int64_t tn_quic_stream_id(const tn_quic_stream_t *s)
{
    return s->id;
}

#ifdef TN_TEST
void tn_quic_ep_test_deaf(tn_quic_ep_t *ep, bool deaf)
{
    ep->test_deaf = deaf;
}

void tn_quic_ep_test_no_gso(tn_quic_ep_t *ep)
{
    ep->test_no_gso = true;
}

void tn_quic_ep_test_stats(const tn_quic_ep_t *ep, tn_quic_ep_test_stats_t *out)
{
    *out = ep->test_stats;
    out->gso_off = ep->gso_off;
    out->gro = ep->gro;
}

void tn_quic_ep_test_input(tn_quic_ep_t *ep, const struct sockaddr *from, const uint8_t *p,
                           size_t n)
{
    if (n > RECV_BUF)
        n = RECV_BUF;
    memcpy(ep->rbuf, p, n);
    ep_input(ep, from, ep->rbuf, n);
}
#endif
