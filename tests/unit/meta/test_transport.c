/* Tests of meta/transport.c, tern's libraft transport: three libraft
 * instances on one loop, each in its own temporary directory, elect a
 * leader and replicate (small entries, and large ones that make the TLS
 * pump apply back-pressure) over mutual TLS and in plaintext; a fourth
 * whose certificate comes from another CA is refused with a logged reason
 * while the cluster keeps committing; raw sockets that send a garbage or
 * out-of-bounds handshake are closed without reaching libraft, and a valid
 * one does reach it; closing fails a pending connect with RAFT_CANCELED
 * before the close callback. Addresses: the split of host:port (IPv4 or a
 * DNS name); three nodes whose Raft addresses are "localhost:port" replicate
 * (the dialer resolves the name each time, the listener binds the numeric
 * address it is given); a hello naming a host name reaches libraft with
 * the name; a name that does not resolve fails the connect like an
 * unreachable peer, and a close during the look-up cancels the connect.
 * Every test ends with uv_loop_close() == 0.
 * Certificates are made with the openssl command, once per run. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "meta/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char *certdir; /* ca.pem, n1..n3 (.pem/.key) from CA 1; rogue.pem/key from CA 2 */

static void sh(const char *fmt, ...) TN_PRINTF(1, 2);
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        fail_msg("command failed: %s", cmd);
}

#define NEWKEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static void make_certs(void)
{
    certdir = tu_tempdir();
    const char *d = certdir;
    for (int ca = 1; ca <= 2; ca++)
        sh("cd %s && openssl req -x509 " NEWKEY " -days 2 -subj /CN=tern-raft-ca%d -keyout ca%d.key"
           " -out ca%d.pem 2>/dev/null",
           d, ca, ca, ca);
    const char *names[] = {"n1", "n2", "n3", "rogue"};
    for (int i = 0; i < 4; i++) {
        int ca = i < 3 ? 1 : 2;
        sh("cd %s && openssl req " NEWKEY " -subj /CN=%s -keyout %s.key -out %s.csr 2>/dev/null &&"
           " openssl x509 -req -in %s.csr -CA ca%d.pem -CAkey ca%d.key -CAcreateserial -days 2"
           " -out %s.pem 2>/dev/null",
           d, names[i], names[i], names[i], names[i], ca, ca, names[i]);
    }
}

/* The host of the nodes' Raft addresses: "localhost" makes every address
 * a name, with the listener given the numeric one. */
static const char *node_host = "127.0.0.1";

static bool run_until(uv_loop_t *loop, bool (*cond)(void *), void *arg)
{
    int64_t deadline = tn_now_mono_ms() + 60000;
    while (!cond(arg)) {
        if (tn_now_mono_ms() > deadline)
            return false;
        uv_run(loop, UV_RUN_ONCE);
    }
    return true;
}

/* --- a libraft node over the transport ----------------------------------------- */

#define BIG_LEN (2 * 1024 * 1024)

typedef struct {
    uv_loop_t *loop;
    char *dir;
    raft_id id;
    char address[32];
    struct raft_uv_transport transport;
    struct raft_io io;
    struct raft_fsm fsm;
    struct raft raft;
    unsigned applied;   /* commands applied */
    unsigned corrupted; /* applied commands whose bytes were not as sent */
    bool started, closed;
} node_t;

/* A command is len bytes: byte i is (i * 7 + len) & 0xff. */
static void fill(unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)((i * 7 + len) & 0xff);
}

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    node_t *n = fsm->data;
    const unsigned char *p = buf->base;
    for (size_t i = 0; i < buf->len; i++) {
        if (p[i] != (unsigned char)((i * 7 + buf->len) & 0xff)) {
            n->corrupted++;
            break;
        }
    }
    n->applied++;
    *result = NULL;
    return 0;
}

static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *nbufs)
{
    node_t *n = fsm->data;
    *bufs = raft_malloc(sizeof(**bufs));
    (*bufs)[0].len = sizeof(n->applied);
    (*bufs)[0].base = raft_malloc(sizeof(n->applied));
    memcpy((*bufs)[0].base, &n->applied, sizeof(n->applied));
    *nbufs = 1;
    return 0;
}

static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    node_t *n = fsm->data;
    memcpy(&n->applied, buf->base, sizeof(n->applied));
    raft_free(buf->base);
    return 0;
}

/* Node id of n (1-based) at port, TLS with files prefix ("n1") and CA file
 * ca ("ca1"), or plaintext when prefix is NULL. voters: ids 1..nvoters at
 * ports[0..]. */
static void node_start(node_t *n, uv_loop_t *loop, raft_id id, const int *ports, int nvoters,
                       const char *prefix, const char *ca)
{
    memset(n, 0, sizeof(*n));
    n->loop = loop;
    n->dir = tu_tempdir();
    n->id = id;
    snprintf(n->address, sizeof(n->address), "%s:%d", node_host, ports[id - 1]);
    char cert[512], key[512], cafile[512], err[512] = "", listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", ports[id - 1]);
    tn_meta_transport_opts_t o = {NULL, NULL, NULL, listen};
    if (prefix != NULL) {
        snprintf(cert, sizeof(cert), "%s/%s.pem", certdir, prefix);
        snprintf(key, sizeof(key), "%s/%s.key", certdir, prefix);
        snprintf(cafile, sizeof(cafile), "%s/%s.pem", certdir, ca);
        o.tls_cert = cert;
        o.tls_key = key;
        o.tls_ca = cafile;
    }
    if (tn_meta_transport_init(&n->transport, loop, &o, err, sizeof(err)) != 0)
        fail_msg("transport: %s", err);
    assert_int_equal(raft_uv_init(&n->io, loop, n->dir, &n->transport), 0);
    raft_uv_set_connect_retry_delay(&n->io, 100);
    n->fsm.version = 1;
    n->fsm.data = n;
    n->fsm.apply = fsm_apply;
    n->fsm.snapshot = fsm_snapshot;
    n->fsm.restore = fsm_restore;
    assert_int_equal(raft_init(&n->raft, &n->io, &n->fsm, id, n->address), 0);
    n->raft.data = n;
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (int i = 0; i < nvoters; i++) {
        char a[32];
        snprintf(a, sizeof(a), "%s:%d", node_host, ports[i]);
        assert_int_equal(raft_configuration_add(&conf, (raft_id)i + 1, a, RAFT_VOTER), 0);
    }
    assert_int_equal(raft_bootstrap(&n->raft, &conf), 0);
    raft_configuration_close(&conf);
    /* Three nodes share one loop with their TLS handshakes: on a loaded
     * 2-core machine a 400 ms election timeout let elections churn for
     * the whole 60 s bound (CI, once); 1.2 s leaves room for late beats. */
    raft_set_election_timeout(&n->raft, 1200);
    raft_set_heartbeat_timeout(&n->raft, 100);
    raft_set_snapshot_threshold(&n->raft, 100000);
    assert_int_equal(raft_start(&n->raft), 0);
    n->started = true;
}

static void on_node_closed(struct raft *r)
{
    node_t *n = r->data;
    raft_uv_close(&n->io);
    tn_meta_transport_fini(&n->transport);
    n->closed = true;
}

static bool all_closed(void *arg)
{
    node_t **nodes = arg;
    for (int i = 0; nodes[i] != NULL; i++)
        if (!nodes[i]->closed)
            return false;
    return true;
}

/* Close the NULL-terminated nodes together and remove their directories. */
static void nodes_close(uv_loop_t *loop, node_t **nodes)
{
    for (int i = 0; nodes[i] != NULL; i++)
        raft_close(&nodes[i]->raft, on_node_closed);
    assert_true(run_until(loop, all_closed, nodes));
    for (int i = 0; nodes[i] != NULL; i++) {
        tu_rmrf(nodes[i]->dir);
        free(nodes[i]->dir);
    }
}

typedef struct {
    node_t *nodes; /* three */
    node_t *leader;
} cluster_t;

static bool has_leader(void *arg)
{
    cluster_t *c = arg;
    c->leader = NULL;
    for (int i = 0; i < 3; i++)
        if (raft_state(&c->nodes[i].raft) == RAFT_LEADER)
            c->leader = &c->nodes[i];
    return c->leader != NULL;
}

typedef struct {
    struct raft_apply req;
    int *done;
    int *failed;
} apply_t;

static void on_applied(struct raft_apply *req, int status, void *result)
{
    apply_t *a = req->data;
    (void)result;
    (*a->done)++;
    if (status != 0)
        (*a->failed)++;
    free(a);
}

typedef struct {
    node_t *nodes;
    unsigned want;
    int *done;
    int target;
} replicated_t;

static bool is_replicated(void *arg)
{
    replicated_t *r = arg;
    if (*r->done < r->target)
        return false;
    for (int i = 0; i < 3; i++)
        if (r->nodes[i].applied < r->want)
            return false;
    return true;
}

/* Propose count commands of len bytes on the leader (found again if it
 * moved) and wait until all three nodes applied them. */
static void replicate(uv_loop_t *loop, node_t *nodes, int count, size_t len)
{
    cluster_t c = {nodes, NULL};
    unsigned before = nodes[0].applied;
    for (int i = 1; i < 3; i++)
        if (nodes[i].applied > before)
            before = nodes[i].applied;
    int done = 0, failed = 0;
    for (int i = 0; i < count; i++) {
        assert_true(run_until(loop, has_leader, &c));
        apply_t *a = calloc(1, sizeof(*a));
        assert_non_null(a);
        a->req.data = a;
        a->done = &done;
        a->failed = &failed;
        struct raft_buffer buf = {raft_malloc(len), len};
        assert_non_null(buf.base);
        fill(buf.base, len);
        int rc = raft_apply(&c.leader->raft, &a->req, &buf, 1, on_applied);
        if (rc != 0) {
            raft_free(buf.base);
            free(a);
            fail_msg("raft_apply: %s", raft_strerror(rc));
        }
    }
    replicated_t r = {nodes, before + (unsigned)count, &done, count};
    assert_true(run_until(loop, is_replicated, &r));
    assert_int_equal(failed, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(nodes[i].corrupted, 0);
}

static void start_three(uv_loop_t *loop, node_t *nodes, int *ports, bool tls)
{
    for (int i = 0; i < 4; i++)
        ports[i] = tu_free_port(false);
    const char *names[] = {"n1", "n2", "n3"};
    for (int i = 0; i < 3; i++)
        node_start(&nodes[i], loop, (raft_id)i + 1, ports, 3, tls ? names[i] : NULL, "ca1");
    cluster_t c = {nodes, NULL};
    assert_true(run_until(loop, has_leader, &c));
}

/* --- the log, for what refusals say -------------------------------------------- */

static char logpath[4200];

static void log_capture(void)
{
    snprintf(logpath, sizeof(logpath), "%s/log", certdir);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    assert_true(fd >= 0);
    tn_log_set_fd(fd);
}

static void log_release(void)
{
    tn_log_set_fd(2);
}

static bool log_has(const char *a, const char *b)
{
    FILE *f = fopen(logpath, "r");
    if (f == NULL)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, a) != NULL && (b == NULL || strstr(line, b) != NULL);
    fclose(f);
    return found;
}

static bool refusal_logged(void *arg)
{
    (void)arg;
    return log_has("raft transport: connection from 127.0.0.1:", "certificate verify failed");
}

/* --- tests ---------------------------------------------------------------------- */

/* Runs first: the refusal lines are rate-limited per call site, so an
 * earlier refusal in this process could hold this one back. */
static void test_tls_cluster_refuses_other_ca(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    node_t nodes[4];
    int ports[4];
    log_capture();
    start_three(&loop, nodes, ports, true);
    replicate(&loop, nodes, 20, 104);
    /* Large entries: several times the pump's queue bound in flight. */
    replicate(&loop, nodes, 4, BIG_LEN);

    /* A fourth node trusts the cluster's CA but has a certificate from
     * another: its votes never arrive, the cluster keeps committing. */
    node_start(&nodes[3], &loop, 4, ports, 4, "rogue", "ca1");
    assert_true(run_until(&loop, refusal_logged, NULL));
    replicate(&loop, nodes, 10, 104);
    raft_id lid = 0;
    const char *laddr = NULL;
    raft_leader(&nodes[3].raft, &lid, &laddr);
    assert_int_equal(lid, 0);
    assert_int_equal(nodes[3].applied, 0);
    log_release();

    node_t *all[] = {&nodes[0], &nodes[1], &nodes[2], &nodes[3], NULL};
    nodes_close(&loop, all);
    tu_loop_fini(&loop);
}

static void test_plaintext_cluster(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    node_t nodes[3];
    int ports[4];
    start_three(&loop, nodes, ports, false);
    replicate(&loop, nodes, 20, 104);
    replicate(&loop, nodes, 2, BIG_LEN);
    node_t *all[] = {&nodes[0], &nodes[1], &nodes[2], NULL};
    nodes_close(&loop, all);
    tu_loop_fini(&loop);
}

/* --- a transport alone, and raw sockets against it ------------------------------ */

typedef struct {
    struct raft_uv_transport t;
    int accepted;
    raft_id accepted_id;
    char accepted_addr[64];
    bool closed;
    int order; /* events seen, for the close test */
    int connect_status;
    int connect_order, close_order;
    bool hold;         /* keep accepted streams (in held) instead of closing them */
    uv_stream_t *held; /* an accepted stream, or the connected one */
} solo_t;

static void on_stream_closed(uv_handle_t *h)
{
    raft_free(h);
}

static void on_solo_accept(struct raft_uv_transport *t, raft_id id, const char *address,
                           uv_stream_t *stream)
{
    solo_t *s = (solo_t *)t; /* t is the first member */
    s->accepted++;
    s->accepted_id = id;
    snprintf(s->accepted_addr, sizeof(s->accepted_addr), "%s", address);
    if (s->hold)
        s->held = stream;
    else
        uv_close((uv_handle_t *)stream, on_stream_closed);
}

static void on_solo_closed(struct raft_uv_transport *t)
{
    solo_t *s = (solo_t *)t;
    s->closed = true;
    s->close_order = ++s->order;
}

static bool solo_is_closed(void *arg)
{
    return ((solo_t *)arg)->closed;
}

/* A transport with Raft id 1 listening on 127.0.0.1:port, its address
 * host:port (host a name: the listener is given the numeric address). */
static void solo_start_as(solo_t *s, uv_loop_t *loop, int port, bool tls, const char *host)
{
    memset(s, 0, sizeof(*s));
    char cert[512], key[512], ca[512], err[512] = "", addr[300], listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    tn_meta_transport_opts_t o = {NULL, NULL, NULL, listen};
    if (tls) {
        snprintf(cert, sizeof(cert), "%s/n1.pem", certdir);
        snprintf(key, sizeof(key), "%s/n1.key", certdir);
        snprintf(ca, sizeof(ca), "%s/ca1.pem", certdir);
        o.tls_cert = cert;
        o.tls_key = key;
        o.tls_ca = ca;
    }
    if (tn_meta_transport_init(&s->t, loop, &o, err, sizeof(err)) != 0)
        fail_msg("transport: %s", err);
    snprintf(addr, sizeof(addr), "%s:%d", host, port);
    assert_int_equal(s->t.init(&s->t, 1, addr), 0);
    assert_int_equal(s->t.listen(&s->t, on_solo_accept), 0);
}

static void solo_start(solo_t *s, uv_loop_t *loop, int port, bool tls)
{
    solo_start_as(s, loop, port, tls, "127.0.0.1");
}

static void solo_close(uv_loop_t *loop, solo_t *s)
{
    s->t.close(&s->t, on_solo_closed);
    assert_true(run_until(loop, solo_is_closed, s));
    tn_meta_transport_fini(&s->t);
}

/* A raw client: connect, send bytes, collect what comes back until the
 * server closes. */
typedef struct {
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    char sent[512];
    size_t sentlen;
    char got[64];
    size_t gotlen;
    bool ended;
    bool handle_closed;
} raw_t;

static void on_raw_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    raw_t *r = h->data;
    (void)suggested;
    buf->base = r->got + r->gotlen;
    buf->len = sizeof(r->got) - r->gotlen;
}

static void on_raw_closed(uv_handle_t *h)
{
    ((raw_t *)h->data)->handle_closed = true;
}

static void on_raw_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    raw_t *r = s->data;
    (void)buf;
    if (nread > 0)
        r->gotlen += (size_t)nread;
    if (nread < 0 || r->gotlen == sizeof(r->got)) {
        r->ended = true;
        uv_close((uv_handle_t *)s, on_raw_closed);
    }
}

static void on_raw_written(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static void on_raw_connected(uv_connect_t *c, int status)
{
    raw_t *r = c->data;
    assert_int_equal(status, 0);
    uv_buf_t b = uv_buf_init(r->sent, (unsigned)r->sentlen);
    assert_int_equal(uv_write(&r->write, (uv_stream_t *)&r->tcp, &b, 1, on_raw_written), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&r->tcp, on_raw_alloc, on_raw_read), 0);
}

static bool raw_done(void *arg)
{
    raw_t *r = arg;
    return r->handle_closed;
}

/* Send bytes to port; run until the server ends the connection (or the
 * answer fills r->got). */
static void raw_send(uv_loop_t *loop, raw_t *r, int port, const void *bytes, size_t len)
{
    memset(r, 0, sizeof(*r));
    memcpy(r->sent, bytes, len);
    r->sentlen = len;
    uv_tcp_init(loop, &r->tcp);
    r->tcp.data = r;
    r->connect.data = r;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    assert_int_equal(uv_tcp_connect(&r->connect, &r->tcp, (struct sockaddr *)&sa, on_raw_connected),
                     0);
    assert_true(run_until(loop, raw_done, r));
}

/* A hello as transport.h lays it out. */
static size_t hello(unsigned char *out, const char *magic, unsigned version, unsigned alen,
                    uint64_t id, const char *addr)
{
    memcpy(out, magic, 4);
    out[4] = (unsigned char)version;
    out[5] = (unsigned char)(version >> 8);
    out[6] = (unsigned char)alen;
    out[7] = (unsigned char)(alen >> 8);
    for (int i = 0; i < 8; i++)
        out[8 + i] = (unsigned char)(id >> (8 * i));
    size_t n = strlen(addr);
    memcpy(out + 16, addr, n);
    return 16 + n;
}

static void test_garbage_handshakes(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    solo_t s;
    int port = tu_free_port(false);
    solo_start(&s, &loop, port, false);
    raw_t r;
    unsigned char h[300];

    /* Not a tern handshake at all. */
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_send(&loop, &r, port, http, strlen(http));
    assert_int_equal(r.gotlen, 0);
    /* An address length beyond the bound: refused before it is read. */
    size_t n = hello(h, "TNRH", 1, 60000, 7, "127.0.0.1:1");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(r.gotlen, 0);
    /* A version this build does not speak. */
    n = hello(h, "TNRH", 2, 11, 7, "127.0.0.1:1");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(r.gotlen, 0);
    /* Raft id 0, and an address that is not host:port. */
    n = hello(h, "TNRH", 1, 11, 0, "127.0.0.1:1");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(r.gotlen, 0);
    n = hello(h, "TNRH", 1, 11, 7, "example.org");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(r.gotlen, 0);
    n = hello(h, "TNRH", 1, 13, 7, "bad_name:4153");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(r.gotlen, 0);
    assert_int_equal(s.accepted, 0);

    /* A host name is an address too: libraft gets it as sent (Raft
     * compares the recorded strings, never what they resolve to). */
    n = hello(h, "TNRH", 1, 33, 9, "tern-0.tern-peers.ns.svc.local:41");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(s.accepted, 1);
    assert_int_equal(s.accepted_id, 9);
    assert_string_equal(s.accepted_addr, "tern-0.tern-peers.ns.svc.local:41");
    assert_int_equal(r.gotlen, 8);
    s.accepted = 0;

    /* A valid hello reaches libraft's callback and gets the answer. */
    n = hello(h, "TNRH", 1, 14, 7, "127.0.0.1:1234");
    raw_send(&loop, &r, port, h, n);
    assert_int_equal(s.accepted, 1);
    assert_int_equal(s.accepted_id, 7);
    assert_string_equal(s.accepted_addr, "127.0.0.1:1234");
    assert_int_equal(r.gotlen, 8);
    assert_memory_equal(r.got, "TNRA\1\0\0\0", 8);
    solo_close(&loop, &s);

    /* With TLS, plaintext bytes (even a valid hello) fail the TLS
     * handshake. */
    port = tu_free_port(false);
    solo_start(&s, &loop, port, true);
    n = hello(h, "TNRH", 1, 14, 7, "127.0.0.1:1234");
    raw_send(&loop, &r, port, h, n);
    raw_send(&loop, &r, port, http, strlen(http));
    assert_int_equal(s.accepted, 0);
    solo_close(&loop, &s);
    tu_loop_fini(&loop);
}

static void on_solo_connect(struct raft_uv_connect *req, uv_stream_t *stream, int status)
{
    solo_t *s = req->data;
    s->connect_status = status;
    s->connect_order = ++s->order;
    s->held = stream;
}

static void on_tick(uv_timer_t *t)
{
    *(bool *)t->data = true;
}

static bool flag_set(void *arg)
{
    return *(bool *)arg;
}

/* A peer that takes the TCP connection (the kernel's backlog) but never
 * answers the handshake: the connect is pending when the transport
 * closes, and must be failed with RAFT_CANCELED before the close
 * callback. */
static void test_close_cancels_pending_connect(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    int mute = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(mute >= 0);
    int mport = tu_free_port(false);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", mport, &sa);
    assert_int_equal(bind(mute, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(mute, 8), 0);

    for (int tls = 0; tls < 2; tls++) {
        solo_t s;
        solo_start(&s, &loop, tu_free_port(false), tls == 1);
        struct raft_uv_connect req;
        req.data = &s;
        char addr[32];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", mport);
        assert_int_equal(s.t.connect(&s.t, &req, 2, addr, on_solo_connect), 0);
        /* Long enough for the TCP connect to complete and the handshake to
         * go out; the peer never reads it. */
        bool ticked = false;
        uv_timer_t timer;
        uv_timer_init(&loop, &timer);
        timer.data = &ticked;
        uv_timer_start(&timer, on_tick, 200, 0);
        assert_true(run_until(&loop, flag_set, &ticked));
        uv_close((uv_handle_t *)&timer, NULL);
        assert_int_equal(s.connect_order, 0);
        solo_close(&loop, &s);
        assert_int_equal(s.connect_status, RAFT_CANCELED);
        assert_null(s.held);
        assert_int_equal(s.connect_order, 1);
        assert_int_equal(s.close_order, 2);
    }
    close(mute);
    tu_loop_fini(&loop);
}

static void split_ok(const char *address, const char *host, unsigned port, bool numeric)
{
    char h[300];
    unsigned p = 99999;
    bool num = !numeric;
    if (tn_meta_transport_split(address, h, sizeof(h), &p, &num) != 0)
        fail_msg("refused: %s", address);
    assert_string_equal(h, host);
    assert_int_equal(p, port);
    assert_int_equal(num, numeric);
}

static void split_bad(const char *address)
{
    char h[300];
    unsigned p;
    bool num;
    if (tn_meta_transport_split(address, h, sizeof(h), &p, &num) != UV_EINVAL)
        fail_msg("taken: %s", address);
}

static void test_address_split(void **state)
{
    (void)state;
    split_ok("127.0.0.1:4153", "127.0.0.1", 4153, true);
    split_ok(":4153", "", 4153, true);
    split_ok("10.0.0.7:0", "10.0.0.7", 0, true);
    split_ok("localhost:4153", "localhost", 4153, false);
    split_ok("tern-0.tern-peers.prod.svc.cluster.local:4153",
             "tern-0.tern-peers.prod.svc.cluster.local", 4153, false);
    split_ok("node1.example.:65535", "node1.example.", 65535, false);
    split_ok("3com.example:1", "3com.example", 1, false);
    split_bad("localhost");        /* no port */
    split_bad("localhost:");       /* empty port */
    split_bad("localhost:65536");  /* out of range */
    split_bad("localhost:41s3");   /* not a number */
    split_bad("localhost:123456"); /* too long */
    split_bad("[::1]:4153");       /* IPv6: Raft's addresses are IPv4 */
    split_bad("::1:4153");
    split_bad("10.0.1:4153"); /* digits and dots: a mistyped IPv4 address */
    split_bad("256.1.1.1:4153");
    split_bad("bad_name:4153");       /* '_' */
    split_bad("-lead.example:4153");  /* '-' first in a label */
    split_bad("trail-.example:4153"); /* and last */
    split_bad("a..b:4153");           /* empty label */
    split_bad(".a:4153");
    split_bad("a b:4153");
    char big[400];
    memset(big, 'a', 63);
    memcpy(big + 63, ".b:1", 5);
    split_ok(big, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.b", 1, false);
    memset(big, 'a', 64); /* a label over 63 bytes */
    memcpy(big + 64, ".b:1", 5);
    split_bad(big);
    for (int i = 0; i < 64; i++) /* 256 bytes of labels: over 253 */
        memcpy(big + 4 * i, "abc.", 4);
    memcpy(big + 255, ":1", 3);
    split_bad(big);
    /* The host must fit the caller's buffer. */
    char small[8];
    unsigned p;
    bool num;
    assert_int_equal(tn_meta_transport_split("localhost:1", small, sizeof(small), &p, &num),
                     UV_EINVAL);

    /* init takes a name only with a numeric address to listen on. */
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct raft_uv_transport t;
    char err[256];
    tn_meta_transport_opts_t o = {NULL, NULL, NULL, NULL};
    assert_int_equal(tn_meta_transport_init(&t, &loop, &o, err, sizeof(err)), 0);
    assert_int_equal(t.init(&t, 1, "localhost:4153"), RAFT_INVALID);
    assert_non_null(strstr(t.errmsg, "needs the numeric address"));
    assert_int_equal(t.init(&t, 1, "bad_name:4153"), RAFT_INVALID);
    assert_non_null(strstr(t.errmsg, "is not host:port"));
    tn_meta_transport_fini(&t);
    tu_loop_fini(&loop);
}

/* Three voters whose Raft addresses are "localhost:port": elected and
 * replicating, every dial a look-up of the name. */
static void test_named_cluster(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    node_t nodes[3];
    int ports[4];
    node_host = "localhost";
    start_three(&loop, nodes, ports, false);
    node_host = "127.0.0.1";
    assert_string_equal(nodes[0].raft.address, nodes[0].address);
    assert_non_null(strstr(nodes[0].address, "localhost:"));
    replicate(&loop, nodes, 20, 104);
    node_t *all[] = {&nodes[0], &nodes[1], &nodes[2], NULL};
    nodes_close(&loop, all);
    tu_loop_fini(&loop);
}

static bool connect_answered(void *arg)
{
    return ((solo_t *)arg)->connect_order != 0;
}

static bool stream_held(void *arg)
{
    return ((solo_t *)arg)->held != NULL;
}

/* Connects to names: one that resolves reaches the peer (which learns the
 * dialer's name from the hello), one that does not fails like an
 * unreachable peer (RAFT_NOCONNECTION, for libraft to retry), and a close
 * while the look-up runs answers the connect with RAFT_CANCELED before
 * the close callback. */
static void test_named_connects(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    solo_t a, b;
    int aport = tu_free_port(false), bport = tu_free_port(false);
    solo_start_as(&a, &loop, aport, false, "localhost");
    solo_start(&b, &loop, bport, false);
    b.hold = true;
    struct raft_uv_connect req;
    req.data = &a;
    char addr[64];
    snprintf(addr, sizeof(addr), "localhost:%d", bport);
    assert_int_equal(a.t.connect(&a.t, &req, 2, addr, on_solo_connect), 0);
    assert_true(run_until(&loop, connect_answered, &a));
    assert_int_equal(a.connect_status, 0);
    assert_non_null(a.held);
    assert_true(run_until(&loop, stream_held, &b));
    char want[64];
    snprintf(want, sizeof(want), "localhost:%d", aport);
    assert_string_equal(b.accepted_addr, want);
    uv_close((uv_handle_t *)a.held, on_stream_closed);
    uv_close((uv_handle_t *)b.held, on_stream_closed);
    a.held = NULL;
    solo_close(&loop, &b);

    a.connect_order = 0;
    assert_int_equal(a.t.connect(&a.t, &req, 2, "nowhere.invalid:4153", on_solo_connect), 0);
    assert_true(run_until(&loop, connect_answered, &a));
    assert_int_equal(a.connect_status, RAFT_NOCONNECTION);
    assert_null(a.held);
    /* Malformed names are refused at once. */
    assert_int_equal(a.t.connect(&a.t, &req, 2, "bad_name:4153", on_solo_connect),
                     RAFT_NOCONNECTION);
    assert_int_equal(a.t.connect(&a.t, &req, 2, "localhost:0", on_solo_connect), RAFT_NOCONNECTION);

    a.connect_order = 0;
    a.order = 0;
    assert_int_equal(a.t.connect(&a.t, &req, 2, "nowhere.invalid:4153", on_solo_connect), 0);
    solo_close(&loop, &a); /* the look-up may not have started */
    assert_int_equal(a.connect_status, RAFT_CANCELED);
    assert_int_equal(a.connect_order, 1);
    assert_int_equal(a.close_order, 2);
    tu_loop_fini(&loop);
}

/* Back-pressure: libraft's end on the accepting side is not read, so the
 * pump must stop reading the network there, the dialer's pump must stop
 * reading libraft's end in turn, and the dialer's 32 MiB write stays
 * pending, instead of either transport queueing it all in memory. Once the
 * acceptor's end is read, every byte arrives, in order. */
#define FLOOD_LEN (32u * 1024 * 1024)

typedef struct {
    uv_write_t w;
    bool done;
    int status;
    size_t got;
    bool bad;
    char rbuf[65536];
} flood_t;

static void on_flood_written(uv_write_t *w, int status)
{
    flood_t *f = w->data;
    f->done = true;
    f->status = status;
}

static void on_flood_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    flood_t *f = h->data;
    (void)suggested;
    buf->base = f->rbuf;
    buf->len = sizeof(f->rbuf);
}

static void on_flood_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    flood_t *f = st->data;
    if (nread < 0) {
        f->bad = true;
        return;
    }
    for (ssize_t i = 0; i < nread; i++)
        if ((unsigned char)buf->base[i] != (unsigned char)((f->got + (size_t)i) * 13 % 251))
            f->bad = true;
    f->got += (size_t)nread;
}

static bool flood_arrived(void *arg)
{
    flood_t *f = arg;
    return f->bad || (f->done && f->got == FLOOD_LEN);
}

static bool is_connected(void *arg)
{
    solo_t *s = arg;
    return s->connect_order != 0;
}

static bool is_accepted(void *arg)
{
    solo_t *s = arg;
    return s->held != NULL;
}

static void test_backpressure(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    solo_t a, b;
    int pa = tu_free_port(false);
    solo_start(&a, &loop, pa, true);
    a.hold = true;
    solo_start(&b, &loop, tu_free_port(false), true);
    struct raft_uv_connect req;
    req.data = &b;
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", pa);
    assert_int_equal(b.t.connect(&b.t, &req, 2, addr, on_solo_connect), 0);
    assert_true(run_until(&loop, is_connected, &b));
    assert_int_equal(b.connect_status, 0);
    assert_non_null(b.held);
    assert_true(run_until(&loop, is_accepted, &a));

    unsigned char *data = malloc(FLOOD_LEN);
    assert_non_null(data);
    for (size_t i = 0; i < FLOOD_LEN; i++)
        data[i] = (unsigned char)(i * 13 % 251);
    flood_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->w.data = f;
    uv_buf_t buf = uv_buf_init((char *)data, FLOOD_LEN);
    assert_int_equal(uv_write(&f->w, b.held, &buf, 1, on_flood_written), 0);
    bool ticked = false;
    uv_timer_t timer;
    uv_timer_init(&loop, &timer);
    timer.data = &ticked;
    uv_timer_start(&timer, on_tick, 1000, 0);
    assert_true(run_until(&loop, flag_set, &ticked));
    uv_close((uv_handle_t *)&timer, NULL);
    assert_false(f->done);

    a.held->data = f;
    assert_int_equal(uv_read_start(a.held, on_flood_alloc, on_flood_read), 0);
    assert_true(run_until(&loop, flood_arrived, f));
    assert_false(f->bad);
    assert_int_equal(f->status, 0);
    assert_int_equal(f->got, FLOOD_LEN);

    uv_close((uv_handle_t *)a.held, on_stream_closed);
    uv_close((uv_handle_t *)b.held, on_stream_closed);
    solo_close(&loop, &a);
    solo_close(&loop, &b);
    tu_loop_fini(&loop);
    free(f);
    free(data);
}

/* Files that do not load are named in the error; so is a partial set. */
static void test_bad_files(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct raft_uv_transport t;
    char err[512] = "", cert[512], key[512], ca[512];
    snprintf(cert, sizeof(cert), "%s/n1.pem", certdir);
    snprintf(key, sizeof(key), "%s/n1.key", certdir);
    snprintf(ca, sizeof(ca), "%s/ca1.pem", certdir);
    tn_meta_transport_opts_t o = {cert, key, NULL, NULL};
    assert_int_equal(tn_meta_transport_init(&t, &loop, &o, err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, "all three"));
    o.tls_ca = "/nonexistent/ca.pem";
    assert_int_equal(tn_meta_transport_init(&t, &loop, &o, err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, "\"/nonexistent/ca.pem\""));
    o.tls_ca = ca;
    o.tls_key = ca; /* not a key */
    assert_int_equal(tn_meta_transport_init(&t, &loop, &o, err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, ca));
    o.tls_key = key;
    o.tls_cert = "/nonexistent/cert.pem";
    assert_int_equal(tn_meta_transport_init(&t, &loop, &o, err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, "\"/nonexistent/cert.pem\""));
    tu_loop_fini(&loop);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    make_certs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_cluster_refuses_other_ca),
        cmocka_unit_test(test_plaintext_cluster),
        cmocka_unit_test(test_address_split),
        cmocka_unit_test(test_named_cluster),
        cmocka_unit_test(test_named_connects),
        cmocka_unit_test(test_garbage_handshakes),
        cmocka_unit_test(test_close_cancels_pending_connect),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_bad_files),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tu_rmrf(certdir);
    free(certdir);
    return rc;
}
