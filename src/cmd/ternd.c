/* ternd, the tern daemon.
 *
 * DESIGN: startup and shutdown.
 *   1. Read the configuration (defaults, config file, TERN_* environment,
 *      flags); a bad value exits with status 2 and a line naming the option
 *      and its accepted range.
 *   2. Open the data directory: take its lock (a second daemon on the same
 *      directory exits with status 1), check FORMAT, start the storage
 *      threads; then write --pid-file, if given (a daemon refused the lock
 *      leaves the running one's file alone).
 *   3. Open the queue engine: it recovers every partition log and channel
 *      log on disk. A partition found damaged is isolated and reported;
 *      the others serve.
 *   4. Start the metastore (its Raft listener), then, in a cluster, open
 *      the ingress log (what this node accepted for other nodes'
 *      partitions: recovered, then dispatched once node RPC is up), then
 *      the doors, which all publish through the router: the NSQ
 *      TCP listener, the HTTP listener and its APIs, the metrics listener,
 *      lookupd registration. Listener addresses were resolved in step 1,
 *      so nothing here looks up a name. If any of them fails (a port in
 *      use, say), log why, naming the option and the address, close what
 *      started, and exit with status 1 without ever logging "ready".
 *      Otherwise log "ready" and run the loop until SIGINT or SIGTERM
 *      (SIGHUP reloads what can change live: serve.h).
 *      Under a service manager (NOTIFY_SOCKET) STATUS= lines follow these
 *      steps, READY=1 goes out once /readyz would first answer 200 (the
 *      metastore caught up too and, with security on, the root user's
 *      seed applied: tn_nsq_http_ready), and STOPPING=1 when a drain
 *      (step 5) or a shutdown (step 6) begins: core/notify.h.
 *   5. The first SIGTERM (or POST /v1/drain) drains the node first
 *      (api/drain.h): out of readiness, new publishes and consumes
 *      refused, until nothing is in flight or drain-timeout passes; then
 *      step 6, and exit 0. SIGINT, or a second signal, goes to step 6 now.
 *   6. Shut down in reverse: close the listener and every connection
 *      (in-flight messages go back to their channels); stop the dispatcher
 *      (what it has not committed stays in the ingress log); close node
 *      RPC; close the metastore (what was proposed is answered first, and libraft closes
 *      once it writes nothing: meta.c); then the engine: let its storage
 *      requests finish, close every log and the ingress log, stop the storage threads and
 *      release the lock; remove the pid file. The loop then closes with
 *      nothing left on it. */
#include "core/platform.h"

#include "cmd/serve.h"
#include "cmd/version.h"
#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/notify.h"
#include "api/access.h"
#include "api/backup.h"
#include "api/catalog.h"
#include "api/consume.h"
#include "api/console.h"
#include "api/drain.h"
#include "api/metrics.h"
#include "api/users.h"
#include "auth/passwd.h"
#include "api/v1.h"
#include "proto/http/guard.h"
#include "api/fanout.h"
#include "api/nsq/http.h"
#include "api/ws.h"
#include "proto/http/server.h"
#include "proto/nsq/lookupd.h"
#include "proto/nsq/server.h"
#include "cluster/control.h"
#include "cluster/dataplane.h"
#include "cluster/dispatch.h"
#include "cluster/pstats.h"
#include "cluster/purge.h"
#include "cluster/produce.h"
#include "cluster/replica.h"
#include "cluster/router.h"
#include "cluster/setrepl.h"
#include "cluster/settle.h"
#include "cluster/srv.h"
#include "cluster/rpc.h"
#include "meta/meta.h"
#include "queue/queue.h"
#include "storage/ilog.h"
#include "storage/scrub.h"
#include "storage/store.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/resource.h>

extern char **environ;

typedef struct {
    uv_loop_t *loop;
    tn_store_t *store;
    tn_broker_t *broker;
    tn_nsq_server_t *nsq;
    tn_http_server_t *http;
    tn_http_server_t *metrics_http; /* NULL: /metrics is on the API port */
    tn_nsq_http_t api;
    tn_metrics_t metrics;
    tn_ws_t *ws;                 /* NULL: the live feed is off */
    tn_console_t *console;       /* NULL: the console is off */
    tn_console_t *console_https; /* the same on the HTTPS listener */
    tn_meta_t *meta;
    tn_catalog_t *catalog;
    const char *data_path; /* borrowed from the config */
    tn_v1_t v1;
    tn_backup_t *backup; /* /v1/backup sessions */
    tn_seed_t *seed;     /* the root user being seeded, or NULL */
    tn_lookupd_t *lookupd;
    tn_drain_t *drain; /* the graceful drain (api/drain.h), once the doors start */
    uv_signal_t sigint;
    uv_signal_t sigterm;
    uv_signal_t sighup;  /* reload (serve.h) */
    tn_reload_t *reload; /* the reload under way, or NULL */
    tn_reload_target_t reload_target;
    tn_http_server_t *https; /* NULL: https-address is off */
    tn_tls_ctx_t *https_tls; /* the pair new HTTPS handshakes use */
    int rc;
    uint64_t raft_id;
    bool cluster;              /* peers or join addresses: placement counts */
    bool security;             /* security-enabled */
    const char *raft_address;  /* borrowed from the configuration: what Raft listens on */
    const char *raft_name;     /* likewise: what Raft records (raft-address as given) */
    tn_meta_peer_t *peers;     /* --peers for the metastore, or NULL */
    tn_control_t *control;     /* the cluster control plane on node RPC */
    tn_rpc_t *rpc;             /* node RPC (QUIC on the HTTP port number, over UDP) */
    tn_dataplane_t *dataplane; /* node RPC's COMMIT: other nodes' produces for our partitions */
    tn_ilog_t *ilog;           /* in a cluster: produces accepted for other nodes' partitions */
    tn_router_t *router;       /* what every door publishes through */
    tn_srv_t *settle;          /* node RPC's SETTLE: acks other nodes took for our partitions */
    tn_setrepl_t *setrepl;     /* channel state of replicated partitions, to and from replicas */
    tn_srv_t *pstats;          /* node RPC's PSTATS: our partitions' numbers for other nodes */
    tn_srv_t *purge;           /* node RPC's PURGE: topics deleted through other nodes */
    tn_srv_t *rcheck;          /* node RPC's REMOTE_CHECK: remote checks other nodes ask */
    tn_dispatch_t *dispatch;   /* moves the ingress log's records to their owners */
    tn_replica_t *replica;     /* replicated partitions: followers' fetches, leaders' hand-over */
    int64_t replica_lag_ms;
    int64_t move_rate;     /* bytes/s, 0 unlimited (cluster/throttle.h) */
    int64_t move_stall_ms; /* 0: never (cluster/movestall.h) */
    int64_t max_repairs;   /* max-repairs-per-node (cluster/throttle.h) */
    tn_scrub_t *scrub;     /* checks the sealed segments' CRCs and indexes */
    bool dispatch_stopped;
    bool stopping;          /* a signal came: leadership transfer, then shut_down */
    bool shut;              /* shut_down ran */
    bool signals_open;      /* sigint, sigterm, sighup: until storage closed */
    bool meta_drained;      /* libraft left open on the loop: stop the loop and exit */
    tn_notify_t notify;     /* the service manager (NOTIFY_SOCKET), or off */
    uv_timer_t ready_poll;  /* until READY=1 is sent (notify on) */
    bool ready_poll_inited; /* ready_poll is on the loop: shut_down closes it */
    bool notify_failed;     /* a send failed: logged once */
    bool sent_stopping;     /* STOPPING=1 went out */
    /* The stop watch: a shutdown not over after STOP_WATCH_MS logs the
     * close it waits for (closing), then again every STOP_WATCH_MS. */
    uv_timer_t stop_watch;
    bool stop_watch_on;
    const char *closing;
    uint64_t stop_at;
    /* The address NSQ clients are told to dial (nsq_broadcast). */
    char broadcast[TN_META_HOST_MAX + 1];
} daemon_t;

static daemon_t *g_daemon;

/* A shutdown still going after this long logs what it waits for. */
#define STOP_WATCH_MS 10000
/* nsqd sets this header on every answer but /ping's, its own 404 and 405
 * included; the HTTP listeners add it to the answers they make
 * themselves. */
#define NSQ_V1_HEADER "X-NSQ-Content-Type: nsq; version=1.0\r\n"

/* The NSQ TCP door's question, with no NSQ AUTH configured: is this topic
 * closed to it (api/access.h)? */
static bool nsq_protected(void *arg, const char *topic)
{
    daemon_t *d = arg;
    return d->security && tn_access_protected(d->meta, topic);
}

/* The open doors' question before is_protected's: can the local replica
 * judge topic yet (api/access.h)? */
static bool nsq_protection_unknown(void *arg, const char *topic, char *text, size_t len)
{
    daemon_t *d = arg;
    return d->security && tn_access_unknown(d->meta, topic, text, len);
}

/* With tern's users serving NSQ AUTH: the dead-letter topics of another's
 * topic are closed to identity's publishes (api/access.h). */
static bool nsq_pub_refused(void *arg, const char *topic, const char *identity, char *text,
                            size_t len)
{
    daemon_t *d = arg;
    return d->security && tn_access_dlq_refused(d->meta, topic, identity, text, len);
}

/* The engine's question before a dead letter moves (queue.h): into a
 * topic owned by anyone but the parent's owner, never (api/access.h). */
static bool dlq_refused(void *arg, const char *topic, const char *dlq, char *why, size_t len)
{
    daemon_t *d = arg;
    return d->security && tn_access_dlq_mismatch(d->meta, topic, dlq, why, len);
} /* for the close callbacks, which carry no argument */

/* The signal handlers' end: when storage has closed (or the start
 * failed), not when the shutdown begins, so a signal during the shutdown
 * is said and ignored (on_signal) rather than ending the process. */
static void close_signals(daemon_t *d)
{
    if (!d->signals_open)
        return;
    d->signals_open = false;
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
    /* The process is on its way out (storage closed, or it never served):
     * a late signal must not end it by its default action instead of the
     * exit status it is about to give. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
}

static void on_store_closed(tn_store_t *store)
{
    (void)store;
    TN_LOG(TN_LOG_NOTICE, "storage closed; exiting");
    if (g_daemon != NULL)
        close_signals(g_daemon);
    if (g_daemon != NULL && g_daemon->stop_watch_on) {
        g_daemon->stop_watch_on = false;
        uv_close((uv_handle_t *)&g_daemon->stop_watch, NULL);
    }
    /* libraft's handles are still on the loop (tn_meta_drain). */
    if (g_daemon != NULL && g_daemon->meta_drained)
        uv_stop(g_daemon->loop);
}

/* The ingress log closed (after its appends in flight answered): the
 * router and the dispatcher have nothing left, then storage closes. */
static void on_ilog_closed(tn_ilog_t *l)
{
    (void)l;
    daemon_t *d = g_daemon;
    d->ilog = NULL;
    tn_dispatch_free(d->dispatch);
    d->dispatch = NULL;
    tn_router_free(d->router);
    d->router = NULL;
    d->closing = "storage";
    tn_store_close(d->store, on_store_closed);
}

static void on_broker_closed(tn_broker_t *b)
{
    (void)b;
    g_daemon->closing = "the ingress log";
    if (g_daemon->ilog != NULL)
        tn_ilog_close(g_daemon->ilog, on_ilog_closed);
    else
        on_ilog_closed(NULL);
}

/* Then the engine, then storage. */
static void close_engine(daemon_t *d)
{
    d->closing = "the broker";
    if (d->broker != NULL)
        tn_broker_close(d->broker, on_broker_closed);
    else
        on_broker_closed(NULL);
}

/* The metastore has drained: what was proposed is answered and libraft
 * writes nothing; libraft itself stays open (tn_meta_drain). */
static void on_meta_closed(void *arg)
{
    daemon_t *d = arg;
    d->meta_drained = true;
    close_engine(d);
}

/* The doors are closed: the metastore closes before the engine, because
 * the answers to what was proposed still arrive while it closes (meta.c
 * waits for them before closing libraft) and they lead into the engine (a
 * recorded deletion removes the files, a recorded creation makes them). */
static void close_meta(daemon_t *d)
{
    tn_drain_close(d->drain); /* every door has closed */
    d->drain = NULL;
    if (d->meta == NULL) {
        close_engine(d);
        return;
    }
    tn_users_seed_cancel(d->seed);
    d->api.meta = NULL;
    d->closing = "the metastore (its proposals in flight)";
    tn_meta_drain(d->meta, on_meta_closed, d);
}

static void on_nsq_closed(void *arg)
{
    close_meta(arg);
}

static void on_http_closed(void *arg)
{
    daemon_t *d = arg;
    if (d->https != NULL) {
        /* HTTPS after HTTP, so the live feed's sessions on both are gone
         * before it is freed. */
        tn_http_server_t *h = d->https;
        d->https = NULL;
        d->metrics.https = NULL;
        d->closing = "the HTTPS server";
        tn_http_server_close(h, on_http_closed, d);
        return;
    }
    tn_ws_free(d->ws); /* its connections closed with the HTTP server */
    d->ws = NULL;
    tn_console_free(d->console); /* its routes went with the HTTP server */
    d->console = NULL;
    tn_console_free(d->console_https); /* and these with the HTTPS one */
    d->console_https = NULL;
    d->metrics.ws = NULL;
    if (d->lookupd != NULL) {
        tn_lookupd_t *l = d->lookupd;
        d->lookupd = NULL;
        d->closing = "the lookupd client";
        tn_lookupd_stop(l, on_http_closed, d);
        return;
    }
    if (d->metrics_http != NULL) {
        tn_http_server_t *m = d->metrics_http;
        d->metrics_http = NULL;
        d->closing = "the metrics server";
        tn_http_server_close(m, on_http_closed, d);
        return;
    }
    if (d->dispatch != NULL && !d->dispatch_stopped) {
        /* The dispatcher first: its commits to other nodes are cancelled
         * (their records stay in the ingress log for the next start). */
        d->dispatch_stopped = true;
        d->metrics.dispatch = NULL;
        d->closing = "the dispatcher";
        tn_dispatch_stop(d->dispatch, on_http_closed, d);
        return;
    }
    if (d->replica != NULL) {
        /* The replica manager before node RPC: its parked fetches are
         * answered, its own fetches cancelled, its follower logs closed. */
        tn_replica_t *rm = d->replica;
        d->replica = NULL;
        d->metrics.replica = NULL;
        d->v1.replica = NULL;
        if (d->router != NULL)
            tn_router_set_replica(d->router, NULL);
        d->closing = "the replica manager";
        tn_replica_close(rm, on_http_closed, d);
        return;
    }
    if (d->rpc != NULL) {
        /* Node RPC next: its calls in flight end, its handlers answer.
         * The metastore stops proposing first (a member registration
         * would call the control plane's forward hook once it is gone);
         * it closes after the NSQ server. */
        if (d->meta != NULL)
            tn_meta_stop(d->meta);
        tn_rpc_t *r = d->rpc;
        d->rpc = NULL;
        if (d->router != NULL)
            tn_router_set_rpc(d->router, NULL, d->raft_id, d->cluster);
        if (d->setrepl != NULL)
            tn_setrepl_set_rpc(d->setrepl, NULL); /* no new pushes */
        d->metrics.rpc = NULL;
        d->metrics.router = NULL;
        d->closing = "node RPC";
        tn_rpc_close(r, on_http_closed, d);
        return;
    }
    if (d->setrepl != NULL) {
        /* Its handler answered and its calls ended (node RPC closed);
         * waits still held fail, its follower channel logs close. */
        tn_setrepl_t *sr = d->setrepl;
        d->setrepl = NULL;
        d->closing = "channel replication";
        tn_setrepl_close(sr, on_http_closed, d);
        return;
    }
    d->metrics.dataplane = NULL;
    tn_dataplane_free(d->dataplane); /* its handlers answered: node RPC closed */
    d->dataplane = NULL;
    tn_srv_free(d->settle);
    d->settle = NULL;
    tn_srv_free(d->pstats);
    d->pstats = NULL;
    tn_srv_free(d->purge);
    d->purge = NULL;
    tn_srv_free(d->rcheck);
    d->rcheck = NULL;
    if (d->control != NULL) {
        tn_control_t *c = d->control;
        d->control = NULL;
        d->closing = "the control plane";
        tn_control_close(c, on_http_closed, d);
        return;
    }
    d->closing = "the NSQ server";
    if (d->nsq != NULL)
        tn_nsq_server_close(d->nsq, on_nsq_closed, d);
    else
        close_meta(d);
}

/* PUT /config/nsqlookupd_tcp_addresses (api/nsq/http.h): re-point the
 * registration, starting the client if no lookupd was configured. */
static int set_lookupds(void *arg, const char *const *addrs, size_t n)
{
    daemon_t *d = arg;
    /* The HTTP server closes before the lookupd client (shut_down), so
     * no PUT comes after that stopped. */
    if (d->lookupd == NULL) {
        tn_lookupd_opts_t lo = {d->broadcast, d->api.tcp_port, d->api.http_port, TN_VERSION};
        int rc = tn_lookupd_start(d->loop, d->broker, "", &lo, &d->lookupd);
        if (rc != 0)
            return rc;
    }
    return tn_lookupd_set(d->lookupd, addrs, n);
}

/* One message to the service manager (core/notify.h). Only the first
 * failure is logged; the daemon serves either way. */
static void notify(daemon_t *d, const char *fmt, ...) TN_PRINTF(2, 3);
static void notify(daemon_t *d, const char *fmt, ...)
{
    if (!tn_notify_on(&d->notify))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int rc = tn_notify_send(&d->notify, msg);
    if (rc != 0 && !d->notify_failed)
        TN_LOG(TN_LOG_WARN, "cannot notify the service manager at %s: %s", d->notify.where,
               tn_strerror(rc));
    d->notify_failed |= rc != 0;
}

static void notify_stopping(daemon_t *d, const char *why)
{
    if (d->sent_stopping)
        return;
    d->sent_stopping = true;
    notify(d, "STOPPING=1\nSTATUS=%s", why);
}

/* READY=1 when /readyz would first answer 200 (tn_nsq_http_started):
 * the engine has recovered, the doors are up (api.ready), the metastore
 * has caught up with its leader (in a cluster that needs a quorum) and,
 * with security on, the users can be judged (the root user's seed
 * applied: api/users.h). A storage failure that holds until a restart (a
 * partition recovery isolated) keeps /readyz at 503 but not READY=1, which
 * would then never come (the unit waits for it with no timeout). Polled every 100 ms from the ready
 * line until then; the STATUS line says what is awaited. */
static void on_ready_poll(uv_timer_t *t)
{
    daemon_t *d = t->data;
    if (!tn_nsq_http_started(&d->api))
        return;
    uv_timer_stop(t);
    notify(d, "READY=1\nMAINPID=%ld\nSTATUS=serving: NSQ TCP port %d, HTTP port %d", (long)getpid(),
           d->api.tcp_port, d->api.http_port);
}

static void start_ready_poll(daemon_t *d)
{
    if (!tn_notify_on(&d->notify))
        return;
    notify(d, "STATUS=listening; waiting for the metastore to catch up (and the root user)");
    uv_timer_init(d->loop, &d->ready_poll);
    d->ready_poll.data = d;
    d->ready_poll_inited = true;
    uv_timer_start(&d->ready_poll, on_ready_poll, 0, 100);
}

static void on_stop_watch(uv_timer_t *t)
{
    daemon_t *d = t->data;
    TN_LOG(TN_LOG_WARN, "shutting down: still waiting for %s to close after %llu ms", d->closing,
           (unsigned long long)(uv_now(d->loop) - d->stop_at));
}

/* Close everything that started, front to back; the loop then runs dry.
 * For a signal, and for a start that failed part way. */
static void shut_down(daemon_t *d)
{
    if (d->shut)
        return;
    d->shut = true;
    notify_stopping(d, "shutting down");
    d->closing = "the HTTP server";
    d->stop_at = uv_now(d->loop);
    if (uv_timer_init(d->loop, &d->stop_watch) == 0) {
        d->stop_watch.data = d;
        d->stop_watch_on = true;
        uv_timer_start(&d->stop_watch, on_stop_watch, STOP_WATCH_MS, STOP_WATCH_MS);
    }
    if (d->ready_poll_inited)
        uv_close((uv_handle_t *)&d->ready_poll, NULL);
    d->ready_poll_inited = false;
    tn_drain_stop(d->drain); /* a drain under way ends here; its doors close */
    /* The signal handlers stay until storage has closed (on_store_closed):
     * a signal now is said and ignored, where the default action would
     * end the process by that signal in the middle of closing (a second
     * SIGTERM sent just as a leadership hand-over ended did). */
    tn_reload_detach(d->reload);
    d->api.ready = false;
    d->api.shutting_down = true;
    /* Purges stop reaching the catalog before it stops (which answers
     * those under way). */
    if (d->router != NULL)
        tn_router_on_purge(d->router, NULL, NULL);
    if (d->purge != NULL)
        tn_purge_srv_set_hook(d->purge, NULL, NULL);
    d->v1.catalog = NULL; /* its holds go with it */
    tn_catalog_stop(d->catalog);
    d->catalog = NULL;
    /* Settling stops reaching the consume registry before it closes. */
    if (d->router != NULL)
        tn_router_on_settle(d->router, NULL, NULL);
    if (d->settle != NULL)
        tn_settle_srv_set_hooks(d->settle, NULL, NULL, NULL, NULL);
    /* A scrub going on stops (its waiting requests are answered) before
     * the doors and the store close. */
    d->v1.scrub = NULL;
    d->metrics.scrub = NULL;
    tn_scrub_close(d->scrub);
    d->scrub = NULL;
    tn_backup_close(d->backup);
    d->backup = NULL;
    d->metrics.rchild = NULL;
    /* Remote checks stop reaching /v1 before it closes. */
    if (d->router != NULL)
        tn_router_on_rcheck(d->router, NULL, NULL);
    if (d->rcheck != NULL)
        tn_rcheck_srv_set_hook(d->rcheck, NULL, NULL);
    tn_v1_close(&d->v1);
    if (d->ws != NULL)
        tn_ws_close_all(d->ws, "E_SHUTDOWN", "the node is shutting down");
    if (d->http != NULL)
        tn_http_server_close(d->http, on_http_closed, d);
    else
        on_http_closed(d);
}

static void on_transferred(void *arg, int status)
{
    daemon_t *d = arg;
    uint64_t leader = 0;
    const char *api = "";
    if (status == 0 && tn_meta_leader(d->meta, &leader, &api) == 0 && leader != d->raft_id)
        TN_LOG(TN_LOG_NOTICE, "metastore leadership handed to node %llu",
               (unsigned long long)leader);
    else if (status != 0 && status != TN_ENOTFOUND && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "metastore leadership transfer failed: %s; stopping anyway",
               tn_strerror(status));
    shut_down(d);
}

/* Stop serving: a leader hands Raft leadership to another voter first,
 * then shut_down. Called again while the handover runs: shut_down now. */
static void stop(daemon_t *d)
{
    if (d->stopping) {
        /* A second signal while leadership is being handed over: now. */
        shut_down(d);
        return;
    }
    d->stopping = true;
    notify_stopping(d, "shutting down");
    uint64_t leader = 0;
    const char *api = "";
    /* A leader hands Raft leadership to another voter first, so the
     * cluster does not wait an election timeout for a new one. */
    if (d->meta != NULL && d->api.ready && tn_meta_leader(d->meta, &leader, &api) == 0 &&
        leader == d->raft_id && tn_meta_transfer(d->meta, on_transferred, d) == 0)
        return;
    shut_down(d);
}

/* A drain began, by the first SIGTERM or POST /v1/drain.
 * STOPPING=1 (core/notify.h) tells a service manager the node is on its
 * way out while it drains. */
static void on_drain_started(void *arg)
{
    notify_stopping(arg, "draining");
}

/* The drain ended: nothing in flight, or its bound passed (drain.c logged
 * which); the node stops as after a signal, and exits 0. */
static void on_drain_done(void *arg, bool timed_out)
{
    (void)timed_out;
    stop(arg);
}

static void on_signal(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;
    if (d->shut) {
        TN_LOG(TN_LOG_NOTICE, "%s received: already shutting down",
               signum == SIGINT ? "SIGINT" : "SIGTERM");
        return;
    }
    /* The first SIGTERM of a serving node drains it (a rolling restart's
     * stop); SIGINT, a SIGTERM during startup, and any second signal stop
     * at once, as before drains existed. */
    if (signum == SIGTERM && !d->stopping && d->api.ready && d->drain != NULL &&
        tn_drain_start(d->drain, 0) == 0) {
        TN_LOG(TN_LOG_NOTICE, "SIGTERM received: draining (a second SIGTERM or SIGINT stops now)");
        return;
    }
    TN_LOG(TN_LOG_NOTICE, "%s received: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    stop(d);
}

static void on_reloaded(void *arg)
{
    daemon_t *d = arg;
    d->reload = NULL;
}

/* SIGHUP: reload what can change live (serve.h). */
static void on_sighup(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;
    (void)signum;
    if (d->reload != NULL) {
        TN_LOG(TN_LOG_WARN, "SIGHUP: a reload is under way; this one is ignored");
        return;
    }
    if (!d->api.ready || d->stopping || d->shut)
        return;                      /* starting or stopping: nothing to reload into */
    d->reload_target.envp = environ; /* the TERN_* variables as they are now */
    d->reload_target.https = d->https;
    d->reload_target.https_ctx = &d->https_tls;
    d->reload_target.nsq = d->nsq;
    int rc = tn_reload_start(d->loop, &d->reload_target, on_reloaded, d, &d->reload);
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR, "SIGHUP: cannot start the reload: %s", tn_strerror(rc));
}

/* --pid-file: the process id and a newline. Returns 0 or a negative errno. */
static int write_pid_file(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return tn_err_from_errno(errno);
    int rc = fprintf(f, "%ld\n", (long)getpid()) < 0 ? tn_err_from_errno(errno) : 0;
    if (fclose(f) != 0 && rc == 0)
        rc = tn_err_from_errno(errno);
    return rc;
}

/* The recovery summary for the ready line. */
static void summarise(tn_broker_t *b, char *out, size_t len)
{
    uint64_t parts = 0, isolated = 0, channels = 0, records = 0;
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            for (uint32_t p = 0; p < t->nparts; p++) {
                if (!tn_topic_part_local(t, p))
                    continue; /* no files here: another node's */
                tn_plog_stats_t st;
                tn_plog_stats(t->parts[p]->plog, &st);
                parts++;
                if (st.err != 0)
                    isolated++;
                else
                    records += st.written_next - st.first_offset;
            }
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
                channels += t->nparts;
        }
    }
    snprintf(out, len,
             "%" PRIu64 " partitions (%" PRIu64 " isolated), %" PRIu64 " channels, %" PRIu64
             " records recovered",
             parts, isolated, channels, records);
}

/* This node was removed from the cluster (meta.h "Removal"): it stops, as
 * an administrator asked, and exits 0; its data directory does not start
 * again (the metastore said why, in one error line). */
static void on_removed(void *arg)
{
    daemon_t *d = arg;
    TN_LOG(TN_LOG_NOTICE, "this node was removed from the cluster: shutting down");
    stop(d);
}

static void on_meta_ready(void *arg)
{
    daemon_t *d = arg;
    /* Topics created through /v1 carry their settings in the metastore
     * (the engine takes the others' from the server's options). */
    const tn_meta_state_t *ms = tn_meta_state(d->meta);
    for (size_t i = 0; d->broker != NULL && i < ms->ntopics; i++)
        tn_v1_apply_topic(d->broker, &ms->topics[i]->rec);
    if (d->catalog != NULL)
        tn_catalog_reconcile(d->catalog);
    if (d->v1.fanout != NULL)
        tn_fanout_sync(d->v1.fanout);
    const char *pw = getenv("TERN_ADMIN_PASSWORD");
    int rc = tn_users_seed_root(d->loop, d->meta, d->data_path, pw, &d->seed);
    if (rc != 0 && pw != NULL && strlen(pw) > TN_BCRYPT_PASSWORD_MAX)
        TN_LOG(TN_LOG_ERROR,
               "cannot seed the root user: TERN_ADMIN_PASSWORD is longer than %d bytes (bcrypt "
               "reads no more); the node stays not ready",
               TN_BCRYPT_PASSWORD_MAX);
    else if (rc != 0)
        TN_LOG(TN_LOG_ERROR, "cannot seed the root user: %s", tn_strerror(rc));
}

/* Whether dir holds Raft state: libraft's metadata files, written by the
 * bootstrap and by every node once it has taken part. */
static bool has_raft_state(const char *dir)
{
    char path[4200];
    for (int i = 1; i <= 2; i++) {
        snprintf(path, sizeof(path), "%s/metadata%d", dir, i);
        if (access(path, F_OK) == 0)
            return true;
    }
    return false;
}

static const char *nonempty(const char *s)
{
    return s[0] != '\0' ? s : NULL;
}

/* The metastore, in <data>/meta, after the engine has recovered (libraft
 * runs on the loop from here on). */
static int open_meta(daemon_t *d, const tn_config_t *cfg, char *err, size_t errlen)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/meta", cfg->data_path);
    tn_meta_opts_t mo;
    memset(&mo, 0, sizeof(mo));
    mo.dir = dir;
    mo.node_id = tn_config_raft_id(cfg);
    /* Raft records raft-address as given (a name stays a name, and peers
     * resolve it each time they dial); the listener binds what it resolved
     * to at start. */
    mo.address = cfg->raft_name;
    mo.listen = cfg->raft_listen.addr.name;
    mo.election_ms = (unsigned)(cfg->raft_election_timeout_ns / 1000000);
    mo.heartbeat_ms = TN_MAX(mo.election_ms / 10, 10u);
    mo.on_ready = on_meta_ready;
    mo.ready_arg = d;
    if (cfg->npeers > 0) {
        d->peers = tn_calloc(cfg->npeers, sizeof(*d->peers));
        if (d->peers == NULL) {
            tn_errbuf(err, errlen, "metastore: %s", tn_strerror(UV_ENOMEM));
            return UV_ENOMEM;
        }
        for (size_t i = 0; i < cfg->npeers; i++) {
            d->peers[i].id = cfg->peers[i].id;
            snprintf(d->peers[i].raft_addr, sizeof(d->peers[i].raft_addr), "%s",
                     cfg->peers[i].name);
        }
    }
    mo.peers = d->peers;
    mo.npeers = cfg->npeers;
    mo.join_only = cfg->njoin > 0 && !has_raft_state(dir);
    mo.api_addr = nonempty(cfg->advertise);
    mo.heartbeat_interval_ms = (unsigned)(cfg->cluster_heartbeat_interval_ns / 1000000);
    mo.dead_after_ms = (unsigned)(cfg->cluster_dead_after_ns / 1000000);
    mo.session_timeout_ms = (unsigned)(cfg->member_session_timeout_ns / 1000000);
    mo.rebalance_delay_ms = (unsigned)(cfg->leader_rebalance_delay_ns / 1000000);
    mo.replace_dead_ms = (uint64_t)(cfg->replace_dead_after_ns / 1000000);
    mo.max_moves_per_node = (unsigned)cfg->max_moves_per_node;
    mo.no_auto_rebalance = !cfg->auto_rebalance;
    /* The data directory's incarnation (made with it, or now for one from
     * before incarnations): a wiped disk registers as another one. */
    int irc = tn_meta_incarnation_load(cfg->data_path, &mo.incarnation, err, errlen);
    if (irc != 0)
        return irc;
    /* The control plane first: the metastore forwards a follower's
     * proposals through it, and node RPC (opened with the doors) serves
     * its operations. */
    tn_control_opts_t copts;
    memset(&copts, 0, sizeof(copts));
    copts.node_id = mo.node_id;
    copts.raft_addr = mo.address;
    copts.api_addr = cfg->advertise;
    if (mo.join_only) {
        copts.join = (const char *const *)cfg->join;
        copts.njoin = cfg->njoin;
    }
    copts.join_retry_ms = (uint64_t)(cfg->cluster_join_interval_ns / 1000000);
    int crc = tn_control_new(d->loop, &copts, &d->control);
    if (crc != 0) {
        tn_errbuf(err, errlen, "cluster control plane: %s", tn_strerror(crc));
        return crc;
    }
    mo.forward = tn_control_forward;
    mo.forward_arg = d->control;
    mo.tls_cert = nonempty(cfg->raft_tls_cert);
    mo.tls_key = nonempty(cfg->raft_tls_key);
    mo.tls_ca = nonempty(cfg->raft_tls_ca);
    d->data_path = cfg->data_path;
    d->raft_id = mo.node_id;
    d->replica_lag_ms = cfg->replica_lag_time_max_ns / 1000000;
    d->move_rate = cfg->move_rate;
    d->move_stall_ms = cfg->move_stall_timeout_ns / 1000000;
    d->max_repairs = cfg->max_repairs_per_node;
    d->raft_address = cfg->raft_listen.addr.name;
    d->raft_name = cfg->raft_name;
    /* One of a cluster, not a lone node: unassigned partitions wait for an
     * owner rather than open here (catalog.c, place()). */
    d->cluster = cfg->npeers > 0 || cfg->njoin > 0;
    int rc = tn_meta_open(d->loop, &mo, &d->meta, err, errlen);
    if (rc != 0) {
        tn_control_close(d->control, NULL, NULL);
        d->control = NULL;
        return rc;
    }
    tn_meta_on_removed(d->meta, on_removed, d);
    if (strcmp(d->raft_name, d->raft_address) != 0)
        TN_LOG(TN_LOG_NOTICE, "metastore Raft listening on %s (raft-address %s, %s)",
               d->raft_address, d->raft_name, mo.tls_cert != NULL ? "mutual TLS" : "plain");
    else
        TN_LOG(TN_LOG_NOTICE, "metastore Raft listening on %s (raft-address, %s)", d->raft_address,
               mo.tls_cert != NULL ? "mutual TLS" : "plain");
    return 0;
}

/* A listener's option text for its "listening" line, with the address
 * it resolved to when that reads differently ("localhost:4150 =
 * 127.0.0.1:4150"). */
static const char *bound(const char *text, const tn_config_listen_t *l, char *buf, size_t len)
{
    if (strcmp(text, l->addr.name) == 0)
        return text;
    snprintf(buf, len, "%s = %s", text, l->addr.name);
    return buf;
}

/* With security off and no secret, node RPC is open, as that mode opts
 * into: every node of such a cluster proves this public value, which
 * authenticates nothing (startup warns). */
static const uint8_t open_secret[32] = "tern node rpc: no secret (open)";

/* Node RPC on the HTTP listener's address and port, over UDP. */
static int start_rpc(daemon_t *d, const tn_config_t *cfg, char *err, size_t errlen)
{
    tn_hostport_t hp;
    char why[128];
    if (tn_netaddr_split(cfg->http_listen.addr.name, &hp, why, sizeof(why)) != 0) {
        tn_errbuf(err, errlen, "node RPC: %s: %s", cfg->http_listen.addr.name, why);
        return TN_ECONFIG;
    }
    char bind[TN_NETADDR_NAME_MAX + 8];
    snprintf(bind, sizeof(bind), strchr(hp.host, ':') != NULL ? "[%s]:%d" : "%s:%d", hp.host,
             d->api.http_port);
    /* The control plane's operations, then the data plane's. */
    tn_srv_t *srvs[] = {d->settle, d->pstats, d->purge, d->rcheck};
    tn_rpc_handler_t h[TN_OP__COUNT + TN_DATAPLANE_HANDLERS +
                       TN_ARRAY_SIZE(srvs) * TN_SRV_HANDLERS + TN_PRODUCE_HANDLERS +
                       TN_SETREPL_HANDLERS + 4];
    size_t nh = 0, ndata = 0;
    const tn_rpc_handler_t *ch = tn_control_handlers(d->control, &nh);
    memcpy(h, ch, nh * sizeof(*h));
    tn_dataplane_handlers(d->dataplane, h + nh, &ndata);
    nh += ndata;
    for (size_t i = 0; i < TN_ARRAY_SIZE(srvs); i++) {
        tn_srv_handlers(srvs[i], h + nh, &ndata);
        nh += ndata;
    }
    tn_router_produce_handlers(d->router, h + nh, &ndata);
    nh += ndata;
    if (d->setrepl != NULL) {
        tn_setrepl_handlers(d->setrepl, h + nh, &ndata);
        nh += ndata;
    }
    tn_v1_consume_handler(&d->v1, &h[nh++]); /* d->v1 is set up below, before the loop runs */
    tn_router_moveprog_handler(d->router, &h[nh++]); /* moves' progress, asked of leaders */
    tn_router_perrs_handler(d->router, &h[nh++]);    /* replica errors, asked of leaders */
    if (d->replica != NULL) /* followers' long polls: exempt from the bounds */
        h[nh++] =
            (tn_rpc_handler_t){TN_OP_FETCH, TN_RPC_OP_EXEMPT, tn_replica_on_fetch, d->replica};
    if (d->replica != NULL)
        h[nh++] = (tn_rpc_handler_t){TN_OP_REPAIR, 0, tn_replica_on_repair, d->replica};
    if (d->replica != NULL) /* followers' flush reports: answered at once */
        h[nh++] = (tn_rpc_handler_t){TN_OP_FLUSHED, 0, tn_replica_on_flushed, d->replica};
    if (d->replica != NULL) /* followers' append errors (a stalled move's reason) */
        h[nh++] =
            (tn_rpc_handler_t){TN_OP_REPLICA_ERROR, 0, tn_replica_on_replica_error, d->replica};
    tn_rpc_opts_t ro;
    memset(&ro, 0, sizeof(ro));
    ro.bind = bind;
    ro.secret = cfg->cluster_secret_len > 0 ? cfg->cluster_secret : open_secret;
    ro.secret_len = cfg->cluster_secret_len > 0 ? cfg->cluster_secret_len : sizeof(open_secret);
    ro.handlers = h;
    ro.nhandlers = nh;
    ro.dial_timeout_ms = (uint64_t)(cfg->cluster_rpc_dial_timeout_ns / 1000000);
    ro.reply_timeout_ms = (uint64_t)(cfg->cluster_rpc_timeout_ns / 1000000);
    ro.reply_write_timeout_ms = (uint64_t)(cfg->cluster_rpc_reply_write_timeout_ns / 1000000);
    int rc = tn_rpc_open(d->loop, &ro, &d->rpc, err, errlen);
    if (rc != 0)
        return rc;
    TN_LOG(TN_LOG_NOTICE, "node RPC listening on %s/udp (QUIC, TLS 1.3)", tn_rpc_addr(d->rpc));
    /* A caller's CANCEL that crossed a forwarded consume's answer. */
    tn_rpc_on_late_cancel(d->rpc, tn_v1_consume_late_cancel, &d->v1);
    tn_control_start(d->control, d->meta, d->rpc);
    /* Receipt handles settled and consumes forwarded on their owners. */
    tn_router_set_rpc(d->router, d->rpc, d->raft_id, d->cluster);
    if (d->setrepl != NULL)
        tn_setrepl_set_rpc(d->setrepl, d->rpc);
    if (d->replica != NULL) {
        tn_replica_set_rpc(d->replica, d->rpc);
        if ((rc = tn_replica_start(d->replica)) != 0) {
            tn_errbuf(err, errlen, "cannot start the replica manager: %s", tn_strerror(rc));
            return rc;
        }
    }
    d->metrics.rpc = d->rpc;
    if (d->cluster)
        d->metrics.router = d->router;
    d->metrics.dataplane = d->dataplane;
    d->metrics.replica = d->replica;
    d->v1.replica = d->replica; /* records_at_risk, replica_high_watermark */
    d->v1.node_id = d->raft_id;
    if (d->ilog == NULL)
        return 0;
    tn_dispatch_opts_t dopts;
    memset(&dopts, 0, sizeof(dopts));
    dopts.loop = d->loop;
    dopts.broker = d->broker;
    dopts.meta = d->meta;
    dopts.ilog = d->ilog;
    dopts.rpc = d->rpc;
    dopts.node_id = d->raft_id;
    if ((rc = tn_dispatch_new(&dopts, &d->dispatch)) != 0) {
        tn_errbuf(err, errlen, "cannot start the ingress log's dispatcher: %s", tn_strerror(rc));
        return rc;
    }
    tn_router_on_accepted(d->router, tn_dispatch_kick, d->dispatch);
    d->metrics.dispatch = d->dispatch;
    return 0;
}

/* The metastore replica's state of a replicated partition, for setrepl. */
static int setrepl_pstate(void *arg, const char *topic, uint32_t p, tn_pstate_t *out)
{
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(arg), topic, p);
    if (ps == NULL)
        return TN_ENOTFOUND;
    *out = *ps;
    return 0;
}

/* The members the replica manager's core proposed into the ISR of a
 * partition it leads (none before it exists or after it closed). */
static uint32_t setrepl_pending(void *arg, const char *topic, uint32_t p, uint32_t *out)
{
    daemon_t *d = arg;
    return d->replica != NULL ? tn_replica_pending(d->replica, topic, p, out) : 0;
}

/* Whether this node's copy of a partition is on its way to or from
 * quarantine/ (the replica manager's marks), for setrepl. */
static bool setrepl_copy_moving(void *arg, const char *topic, uint32_t p)
{
    daemon_t *d = arg;
    return d->replica != NULL && tn_replica_copy_moving(d->replica, topic, p);
}

/* Whether this node's copy of a partition is open and marked a
 * replica's (the replica manager's), for setrepl: its channel state waits
 * until it is. */
static bool setrepl_copy_ready(void *arg, const char *topic, uint32_t p)
{
    daemon_t *d = arg;
    return d->replica != NULL && tn_replica_copy_ready(d->replica, topic, p);
}

/* The replica manager's promotion step: the follower's channel logs of
 * the partition close before the engine opens them. */
static void setrepl_release(void *arg, const char *topic, uint32_t p, void (*cb)(void *cb_arg),
                            void *cb_arg)
{
    tn_setrepl_release(arg, topic, p, cb, cb_arg);
}

/* The replica manager's ISR gate: a follower's channels caught up. */
static bool setrepl_channels(void *arg, const char *topic, uint32_t p, uint32_t node,
                             uint64_t incarnation)
{
    return tn_setrepl_catch_up(arg, topic, p, node, incarnation);
}

/* The router every door publishes through, and node RPC's data plane; in
 * a cluster also the ingress log (<data>/ingress), recovered here. */
static int open_routing(daemon_t *d, char *err, size_t errlen)
{
    int rc;
    if (d->cluster) {
        char why[512];
        if ((rc = tn_ilog_open(d->store, &d->ilog, why, sizeof(why))) != 0) {
            tn_errbuf(err, errlen, "cannot open the ingress log: %s", why);
            return rc;
        }
        tn_ilog_stats_t st;
        tn_ilog_stats(d->ilog, &st);
        if (st.pending_records > 0)
            TN_LOG(TN_LOG_NOTICE,
                   "ingress log: %" PRIu64 " record(s) accepted for other nodes are still to be "
                   "committed to their owners",
                   st.pending_records);
    }
    tn_router_opts_t ro = {d->broker, d->meta, d->ilog, NULL, NULL};
    rc = tn_router_new(&ro, &d->router);
    if (rc == 0 && d->meta != NULL) {
        /* Channel state of replicated partitions (cluster/setrepl.h):
         * settles there wait for the ISR; followers keep channel logs. */
        tn_setrepl_opts_t so;
        memset(&so, 0, sizeof(so));
        so.loop = d->loop;
        so.node_id = (uint32_t)d->raft_id;
        so.meta = d->meta;
        so.store = d->store;
        so.broker = d->broker;
        so.pstate = setrepl_pstate;
        so.pstate_arg = d->meta;
        so.pending = setrepl_pending;
        so.pending_arg = d;
        so.copy_moving = setrepl_copy_moving;
        so.copy_moving_arg = d;
        so.copy_ready = setrepl_copy_ready;
        so.copy_ready_arg = d;
        so.incarnation = tn_meta_incarnation(d->meta);
        rc = tn_setrepl_new(&so, &d->setrepl);
    }
    if (rc == 0 && d->meta != NULL) {
        /* Replicated partitions (docs/replication.md): started with node
         * RPC; the placement asks it about replicated partitions. */
        tn_replica_opts_t rpo;
        memset(&rpo, 0, sizeof(rpo));
        rpo.loop = d->loop;
        rpo.meta = d->meta;
        rpo.broker = d->broker;
        rpo.node = (uint32_t)d->raft_id;
        rpo.replica_lag_ms = (uint64_t)d->replica_lag_ms;
        rpo.move_rate = (uint64_t)d->move_rate;
        rpo.move_stall_ms = (uint64_t)d->move_stall_ms;
        rpo.max_repairs = (uint32_t)d->max_repairs;
        rpo.release = setrepl_release;
        rpo.release_arg = d->setrepl;
        rpo.channels = setrepl_channels;
        rpo.channels_arg = d->setrepl;
        rc = tn_replica_new(&rpo, &d->replica);
        if (rc == 0) {
            tn_router_set_replica(d->router, d->replica);
            if (d->catalog != NULL)
                tn_catalog_set_replica(d->catalog, d->replica);
        }
    }
    if (rc == 0)
        rc = tn_dataplane_new(d->loop, d->broker, &d->dataplane);
    if (rc == 0)
        rc = tn_settle_srv_new(&d->settle);
    if (rc == 0)
        rc = tn_pstats_srv_new(d->broker, &d->pstats);
    if (rc == 0)
        rc = tn_purge_srv_new(&d->purge);
    if (rc == 0)
        rc = tn_rcheck_srv_new(&d->rcheck);
    /* Topic deletes confirmed by every member purge through the catalog
     * here, for this node's doors and for other nodes' PURGE calls. */
    if (rc == 0 && d->catalog != NULL) {
        tn_router_on_purge(d->router, tn_catalog_purge, d->catalog);
        tn_purge_srv_set_hook(d->purge, tn_catalog_purge, d->catalog);
    }
    if (rc != 0)
        tn_errbuf(err, errlen, "cannot set up routing: %s", tn_strerror(rc));
    return rc;
}

/* The address NSQ clients are told to dial (/info, /lookup, /nodes,
 * nsqlookupd registration), into d->broadcast: broadcast-address when
 * given; else, in a cluster, the host of advertise-address (the address
 * other nodes and clients reach this node at); else "" (the host name, as
 * nsqd). 0, or TN_ECONFIG with the reason in err. */
static int nsq_broadcast(daemon_t *d, const tn_config_t *cfg, char *err, size_t errlen)
{
    const char *host = cfg->broadcast_address;
    tn_hostport_t hp;
    char why[128];
    if (host[0] == '\0' && d->cluster && cfg->advertise[0] != '\0') {
        if (tn_netaddr_split(cfg->advertise, &hp, why, sizeof(why)) != 0) {
            tn_errbuf(err, errlen, "advertise-address %s: %s", cfg->advertise, why);
            return TN_ECONFIG;
        }
        host = hp.host;
    }
    if (strlen(host) >= sizeof(d->broadcast)) {
        tn_errbuf(err, errlen, "broadcast-address is longer than %zu bytes",
                  sizeof(d->broadcast) - 1);
        return TN_ECONFIG;
    }
    snprintf(d->broadcast, sizeof(d->broadcast), "%s", host);
    return 0;
}

/* This node's NSQ door for its member record, once its listeners have
 * bound: what /lookup and /nodes on every node list for it. */
static int register_nsq(daemon_t *d, char *err, size_t errlen)
{
    tn_meta_nsq_t nsq;
    memset(&nsq, 0, sizeof(nsq));
    snprintf(nsq.broadcast, sizeof(nsq.broadcast), "%s", d->broadcast);
    if (gethostname(nsq.hostname, sizeof(nsq.hostname) - 1) != 0)
        snprintf(nsq.hostname, sizeof(nsq.hostname), "localhost");
    nsq.tcp_port = (uint16_t)d->api.tcp_port;
    nsq.http_port = (uint16_t)d->api.http_port;
    snprintf(nsq.version, sizeof(nsq.version), "%s", TN_VERSION);
    int rc = tn_meta_set_nsq(d->meta, &nsq);
    if (rc != 0)
        tn_errbuf(err, errlen, "metastore: this node's NSQ addresses: %s", tn_strerror(rc));
    return rc;
}

/* nsqd's answer on its plain HTTP port when tls-required=true. */
static void tls_required_guard(tn_http_request_t *r, void *arg)
{
    daemon_t *d = arg;
    char body[96];
    int n = snprintf(body, sizeof(body), "{\"message\":\"TLS_REQUIRED\",\"https_port\":%d}",
                     d->https != NULL ? tn_http_server_port(d->https) : 0);
    tn_http_respond(r, 403, "application/json; charset=utf-8", NSQ_V1_HEADER, body, (size_t)n);
}

/* The HTTPS listener (https-address): the HTTP listener's routes over
 * TLS with tls-cert and tls-key. /metrics joins them in start_doors when
 * it has no listener of its own. A certificate or key that does not load
 * fails the start with a line naming the file. */
static int start_https(daemon_t *d, const tn_config_t *cfg, char *err, size_t errlen)
{
    char why[768];
    int rc = tn_serve_https_ctx(cfg, &d->https_tls, why, sizeof(why));
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot serve HTTPS (https-address): %s", why);
        return rc;
    }
    tn_http_opts_t hopts;
    tn_http_opts_default(&hopts);
    hopts.max_connections = (uint32_t)cfg->http_max_connections;
    hopts.head_timeout_ms = cfg->http_head_timeout_ns / 1000000;
    hopts.body_timeout_ms = cfg->http_body_timeout_ns / 1000000;
    hopts.idle_timeout_ms = cfg->http_idle_timeout_ns / 1000000;
    hopts.large_body_budget = (uint64_t)cfg->http_large_body_budget;
    hopts.own_headers = NSQ_V1_HEADER;
    hopts.tls = d->https_tls;
    rc = tn_http_server_start(d->loop, &hopts, &cfg->https_listen.addr, &d->https, err, errlen);
    if (rc != 0)
        return rc;
    rc = tn_nsq_http_register(d->https, &d->api);
    rc = rc ? rc : tn_v1_register(d->https, &d->v1);
    if (rc == 0 && d->ws != NULL)
        rc = tn_ws_register(d->https, d->ws);
    if (rc == 0 && cfg->console)
        rc = tn_console_register(d->https, &d->console_https);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot set up the HTTPS APIs: %s", tn_strerror(rc));
        return rc;
    }
    char as[TN_NETADDR_NAME_MAX + 300];
    char fp[96];
    tn_tls_ctx_fingerprint(d->https_tls, fp, sizeof(fp));
    TN_LOG(TN_LOG_NOTICE,
           "HTTPS listening on port %d (%s, TLS 1.2+, ALPN http/1.1; certificate %s, SHA-256 %s)",
           tn_http_server_port(d->https),
           bound(cfg->https_address, &cfg->https_listen, as, sizeof(as)), cfg->tls_cert, fp);
    return 0;
}

/* Everything that serves, once the engine and the metastore are up: the
 * NSQ TCP listener, the HTTP listener with its APIs, the live feed, the
 * metrics listener, lookupd registration. Returns nonzero with the reason
 * in err at the first that fails; shut_down closes what started. */
static int start_doors(daemon_t *d, const tn_config_t *cfg, tn_ws_opts_t *wopts, char *err,
                       size_t errlen)
{
    uv_loop_t *loop = d->loop;
    char as[TN_NETADDR_NAME_MAX + 300];
    tn_catalog_opts_t co = {cfg->msg_timeout_ns / 1000000,
                            cfg->retention_ns / 1000000,
                            (uint32_t)cfg->max_attempts,
                            (uint8_t)cfg->durability,
                            d->raft_id,
                            d->cluster,
                            (uint8_t)cfg->default_replication_factor,
                            (uint8_t)cfg->min_insync_replicas,
                            cfg->security_enabled};
    if (tn_catalog_start(d->broker, d->meta, &co, &d->catalog) != 0)
        TN_LOG(TN_LOG_WARN, "metastore: cannot follow the queue engine's topics");
    /* The drain every door asks before it takes new work (api/drain.h). */
    tn_drain_opts_t dro = {cfg->drain_timeout_ns / 1000000, on_drain_started, on_drain_done, d};
    int rc = tn_drain_new(loop, &dro, &d->drain);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot set up draining: %s", tn_strerror(rc));
        return rc;
    }
    rc = open_routing(d, err, errlen);
    if (rc != 0)
        return rc;
    tn_scrub_opts_t so = {(uint64_t)cfg->scrub_rate,
                          cfg->scrub_interval_ns,
                          cfg->scrub_quiet_period_ns,
                          NULL,
                          NULL,
                          NULL};
    if ((rc = tn_scrub_new(loop, d->store, &so, &d->scrub)) != 0) {
        tn_errbuf(err, errlen, "cannot start the scrubber: %s", tn_strerror(rc));
        return rc;
    }
    d->metrics.scrub = d->scrub;
    if (cfg->scrub_interval_ns > 0)
        TN_LOG(TN_LOG_INFO,
               "scrub: sealed segments every %" PRId64 " s, first after %" PRId64
               " s, at most %" PRId64 " bytes/s",
               cfg->scrub_interval_ns / 1000000000, cfg->scrub_quiet_period_ns / 1000000000,
               cfg->scrub_rate);
    else
        TN_LOG(TN_LOG_INFO, "scrub: on request only (scrub-interval 0)");
    tn_nsq_opts_t nopts;
    tn_nsq_opts_from_config(&nopts, cfg, TN_VERSION);
    /* How the NSQ doors authenticate (nsq-auth, as the configuration
     * settled it): tern's users, an nsqauthd server, or not at all. The
     * /v1 API is set up below, before the loop runs any AUTH. */
    tn_nsqauth_local_t nsq_users = tn_v1_nsq_auth(&d->v1);
    nopts.auth_local = cfg->nsq_auth == TN_NSQ_AUTH_USERS ? &nsq_users : NULL;
    if (cfg->nsq_auth != TN_NSQ_AUTH_EXTERNAL)
        nopts.auth_http_address = "";
    /* Without NSQ auth, topics with an owner are closed to the open doors. */
    d->security = cfg->security_enabled;
    d->broker->dlq_refused = dlq_refused;
    d->broker->dlq_refused_arg = d;
    nopts.is_protected = nsq_protected;
    nopts.protection_unknown = nsq_protection_unknown;
    nopts.protected_arg = d;
    nopts.protected_gen = tn_meta_access_gen(d->meta); /* drained after the doors close */
    if (cfg->nsq_auth == TN_NSQ_AUTH_USERS)
        nopts.pub_refused = nsq_pub_refused;
    nopts.router = d->router;
    rc = tn_nsq_server_start(loop, d->broker, &nopts, &cfg->tcp_listen.addr, &d->nsq, err, errlen);
    if (rc != 0)
        return rc;
    TN_LOG(TN_LOG_NOTICE, "NSQ TCP listening on port %d (%s, %s)", tn_nsq_server_port(d->nsq),
           bound(cfg->tcp_address, &cfg->tcp_listen, as, sizeof(as)),
           cfg->tls_cert[0] == '\0' ? "plain; no tls-cert for the tls_v1 upgrade"
           : cfg->tls_required != 0 ? "TLS required, by IDENTIFY's tls_v1 upgrade"
                                    : "plain, TLS by IDENTIFY's tls_v1 upgrade");

    tn_http_opts_t hopts;
    tn_http_opts_default(&hopts);
    hopts.max_connections = (uint32_t)cfg->http_max_connections;
    hopts.head_timeout_ms = cfg->http_head_timeout_ns / 1000000;
    hopts.body_timeout_ms = cfg->http_body_timeout_ns / 1000000;
    hopts.idle_timeout_ms = cfg->http_idle_timeout_ns / 1000000;
    hopts.large_body_budget = (uint64_t)cfg->http_large_body_budget;
    hopts.own_headers = NSQ_V1_HEADER;
    tn_nsq_http_init(&d->api, cfg, TN_VERSION);
    if ((rc = nsq_broadcast(d, cfg, err, errlen)) != 0)
        return rc;
    d->api.broadcast_address = d->broadcast;
    d->api.broker = d->broker;
    d->api.router = d->router;
    d->api.meta = d->meta; /* deletions go through it; /readyz waits for it */
    d->api.tcp_port = tn_nsq_server_port(d->nsq);
    d->api.node_id = d->raft_id; /* its member id, for /lookup and /nodes */
    d->api.nsq = d->nsq;         /* /stats lists its producers */
    d->api.v1 = &d->v1;          /* its users decide on protected topics */
    d->api.protect_all = cfg->nsq_auth == TN_NSQ_AUTH_USERS;
    d->api.drain = d->drain;
    rc = tn_http_server_start(loop, &hopts, &cfg->http_listen.addr, &d->http, err, errlen);
    if (rc != 0)
        return rc;
    d->api.http_port = tn_http_server_port(d->http);
    bool https = cfg->https_listen.addr.sa.ss_family != AF_UNSPEC;
    /* nsqd's tls-required=true: plain HTTP answers every request 403
     * TLS_REQUIRED with the HTTPS port (first guard: before every other). */
    if (https && cfg->tls_required == 1 &&
        (rc = tn_http_guard(d->http, "/", tls_required_guard, d)) != 0) {
        tn_errbuf(err, errlen, "cannot set up the HTTP listener: %s", tn_strerror(rc));
        return rc;
    }
    TN_LOG(TN_LOG_NOTICE, "HTTP listening on port %d (%s, plain%s)", d->api.http_port,
           bound(cfg->http_address, &cfg->http_listen, as, sizeof(as)),
           https && cfg->tls_required == 1 ? "; tls-required: every request is answered 403 "
                                             "TLS_REQUIRED with the HTTPS port"
                                           : "");
    if ((rc = register_nsq(d, err, errlen)) != 0)
        return rc;
    if ((rc = start_rpc(d, cfg, err, errlen)) != 0)
        return rc;
    rc = tn_nsq_http_register(d->http, &d->api);
    tn_v1_opts_t vo = {cfg->security_enabled,
                       (uint32_t)cfg->max_partitions,
                       cfg->retention_ns / 1000000,
                       (uint64_t)cfg->max_msg_size,
                       cfg->http_max_consume_wait_ns / 1000000,
                       (uint32_t)cfg->http_max_consumes_per_user,
                       (uint32_t)cfg->http_max_produces_per_user,
                       (uint8_t)cfg->default_replication_factor,
                       (uint8_t)cfg->min_insync_replicas,
                       NULL,
                       0,
                       false,
                       NULL,
                       false};
    /* Remotes: the secret and the guard are copied by tn_v1_register; the
     * guard's options were checked in main. */
    tn_guard_t guard;
    char gerr[256];
    if (rc == 0 &&
        (rc = tn_guard_init(&guard, cfg->remotes_allowed_ports, cfg->remotes_allowed_hosts,
                            cfg->remotes_allow_addresses, gerr, sizeof(gerr))) != 0)
        tn_errbuf(err, errlen, "%s", gerr);
    vo.cluster_secret = cfg->cluster_secret;
    vo.cluster_secret_len = cfg->cluster_secret_len;
    vo.cluster_secret_generated = cfg->cluster_secret_generated;
    vo.remotes_guard = &guard;
    vo.remotes_hop_encrypted = cfg->remotes_api_hop_encrypted;
    if (rc == 0 && (rc = tn_v1_init(&d->v1, loop, d->meta, d->broker, d->router, &vo)) == 0) {
        d->v1.scrub = d->scrub;
        d->v1.drain = d->drain;
        d->v1.replica = d->replica; /* NULL until node RPC starts it, set again then */
        d->v1.node_id = d->raft_id;
        d->v1.catalog = d->catalog;
        rc = tn_v1_register(d->http, &d->v1);
    }
    if (rc == 0) {
        tn_backup_opts_t bo = {d->data_path, d->raft_id, cfg->backup_session_ttl_ns / 1000000};
        char berr[256];
        if ((rc = tn_backup_new(loop, &d->v1, d->ilog, &bo, &d->backup, berr, sizeof(berr))) != 0)
            TN_LOG(TN_LOG_ERROR, "%s", berr);
        rc = rc ? rc : tn_backup_register(d->http, d->backup);
    }
    if (rc == 0) {
        /* Acks for this node's partitions, from its doors and from others. */
        tn_router_on_settle(d->router, tn_consume_settle_hook, d->v1.consume);
        tn_settle_srv_set_hooks(d->settle, tn_router_settle_owns, d->router, tn_consume_settle_hook,
                                d->v1.consume);
        /* Remote checks: this node's part, for its doors and for other
         * nodes' REMOTE_CHECK calls. */
        tn_router_on_rcheck(d->router, tn_v1_remote_check, &d->v1);
        tn_rcheck_srv_set_hook(d->rcheck, tn_v1_remote_check, &d->v1);
    }
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot set up the HTTP APIs: %s", tn_strerror(rc));
        return rc;
    }
    if (cfg->experimental_replication)
        TN_LOG(TN_LOG_NOTICE,
               "experimental-replication is deprecated and has no effect: "
               "replicated topics are on by default (default-replication-factor "
               "%" PRId64 ")",
               cfg->default_replication_factor);
    if (!cfg->security_enabled)
        TN_LOG(TN_LOG_WARN, "security is OFF (security-enabled=false): /v1 asks for no "
                            "credentials and checks no rights; never run this in production");
    else if (cfg->nsq_auth == TN_NSQ_AUTH_USERS)
        TN_LOG(TN_LOG_NOTICE,
               "nsq-auth=users: NSQ AUTH is served by tern's users (secret user:password); every "
               "topic needs an identity with the right grant, AUTH on TCP and Basic credentials "
               "on nsqd's HTTP endpoints");
    else if (cfg->nsq_auth == TN_NSQ_AUTH_EXTERNAL)
        TN_LOG(TN_LOG_NOTICE,
               "nsq-auth=external: NSQ AUTH is served by %s, whose grants decide on TCP; on "
               "nsqd's HTTP endpoints, topics with an owner need Basic credentials",
               cfg->auth_http_address);
    else
        TN_LOG(TN_LOG_NOTICE, "/v1 requires Basic auth; the NSQ doors (TCP and nsqd's HTTP "
                              "endpoints) are open as nsqd's are (nsq-auth=open), but topics with "
                              "an owner (made through /v1) are refused to them without "
                              "credentials");
    if (cfg->websocket_enabled) {
        wopts->broker = d->broker;
        wopts->auth = tn_nsq_server_auth(d->nsq);
        wopts->ready = &d->api.ready;
        wopts->drain = d->drain;
        wopts->is_protected = nsq_protected;
        wopts->protection_unknown = nsq_protection_unknown;
        wopts->protected_arg = d;
        wopts->protected_gen = tn_meta_access_gen(d->meta);
        if ((rc = tn_ws_new(loop, wopts, &d->ws)) == 0)
            rc = tn_ws_register(d->http, d->ws);
        if (rc != 0) {
            tn_errbuf(err, errlen, "cannot set up the live WebSocket feed: %s", tn_strerror(rc));
            return rc;
        }
        TN_LOG(TN_LOG_NOTICE, "live WebSocket feed on /v1/ws/topics/{topic} (%u allowed origins)",
               wopts->norigins);
    }
    if (cfg->console) {
        if ((rc = tn_console_register(d->http, &d->console)) != 0) {
            tn_errbuf(err, errlen, "cannot set up the web console: %s", tn_strerror(rc));
            return rc;
        }
        TN_LOG(TN_LOG_NOTICE, "web console on /console/ (off with --console=false)");
    }
    if (https && (rc = start_https(d, cfg, err, errlen)) != 0)
        return rc;
    tn_drain_doors_t doors = {d->nsq, d->ws, &d->v1, d->router, d->http, d->https};
    tn_drain_attach(d->drain, &doors);
    d->metrics.ws = d->ws;
    d->metrics.api = &d->api;
    d->metrics.rchild = d->v1.rchild;
    d->metrics.nsq = d->nsq;
    d->metrics.http = d->http;
    d->metrics.https = d->https;
    d->metrics.max_topics = (uint32_t)cfg->metrics_max_topics;
    if (cfg->metrics_listen.addr.sa.ss_family != AF_UNSPEC) {
        tn_http_opts_t mopts;
        tn_http_opts_default(&mopts);
        mopts.max_connections = 64;
        rc = tn_http_server_start(loop, &mopts, &cfg->metrics_listen.addr, &d->metrics_http, err,
                                  errlen);
        if (rc != 0)
            return rc;
        rc = tn_metrics_register(d->metrics_http, &d->metrics);
        if (rc == 0)
            TN_LOG(TN_LOG_NOTICE, "metrics listening on port %d (%s, plain)",
                   tn_http_server_port(d->metrics_http),
                   bound(cfg->metrics_address, &cfg->metrics_listen, as, sizeof(as)));
    } else {
        rc = tn_metrics_register(d->http, &d->metrics);
        if (rc == 0 && d->https != NULL)
            rc = tn_metrics_register(d->https, &d->metrics);
    }
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot set up /metrics: %s", tn_strerror(rc));
        return rc;
    }
    char *lookupds = tn_config_lookupds(cfg);
    if (lookupds == NULL || tn_nsq_http_set_lookupds(&d->api, lookupds) != 0) {
        tn_free(lookupds);
        tn_errbuf(err, errlen, "cannot start lookupd registration: %s", tn_strerror(UV_ENOMEM));
        return UV_ENOMEM;
    }
    d->api.set_lookupds = set_lookupds;
    d->api.set_lookupds_arg = d;
    if (lookupds[0] != '\0') {
        tn_lookupd_opts_t lo = {d->broadcast, d->api.tcp_port, d->api.http_port, TN_VERSION};
        rc = tn_lookupd_start(loop, d->broker, lookupds, &lo, &d->lookupd);
        if (rc != 0)
            tn_errbuf(err, errlen, "cannot start registration with nsqlookupd %s: %s", lookupds,
                      tn_strerror(rc));
    }
    tn_free(lookupds);
    return rc;
}

int main(int argc, char **argv)
{
    tn_config_t cfg;
    char err[1024] = "";
    if (tn_config_init(&cfg) != 0) {
        fprintf(stderr, "ternd: out of memory\n");
        return 1;
    }
    if (tn_config_load(&cfg, argc, argv, environ, err, sizeof(err)) != 0) {
        fprintf(stderr, "ternd: %s\n", err);
        tn_config_fini(&cfg);
        return 2;
    }
    tn_guard_t guard; /* the remotes options, checked before anything starts */
    if (tn_guard_init(&guard, cfg.remotes_allowed_ports, cfg.remotes_allowed_hosts,
                      cfg.remotes_allow_addresses, err, sizeof(err)) != 0) {
        fprintf(stderr, "ternd: %s\n", err);
        tn_config_fini(&cfg);
        return 2;
    }
    if (cfg.want_help) {
        tn_config_print_help(stdout, "ternd");
        tn_config_fini(&cfg);
        return 0;
    }
    if (cfg.want_version) {
        printf("ternd %s\n", TN_VERSION);
        tn_config_fini(&cfg);
        return 0;
    }
    if (cfg.want_print) {
        tn_config_print(stdout, &cfg);
        tn_config_fini(&cfg);
        return 0;
    }
    tn_serve_logging(&cfg, environ);
    tn_serve_log_source(&cfg, argc, argv, environ);
    tn_alloc_install_uv();
    /* A peer that goes away while we write must cost an EPIPE on that
     * socket, not the process. */
    signal(SIGPIPE, SIG_IGN);
    /* Every connection, segment and channel file is a descriptor: take the
     * whole hard limit, as Go's runtime does for nsqd (a failure leaves the
     * soft one). The doors leave the top quarter to storage
     * (tn_addr_fd_room). */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &nofile);
    }
    for (uint32_t i = 0; i < cfg.nignored_seen; i++) {
        const tn_config_ignored_t *ig = &tn_config_nsqd_ignored[cfg.ignored_seen[i]];
        TN_LOG(TN_LOG_WARN, "nsqd option %s has no effect in tern: %s", ig->name, ig->instead);
    }
    if (cfg.cluster_secret_generated)
        TN_LOG(TN_LOG_NOTICE, "single node with no cluster secret: generated a per-process "
                              "secret, so node RPC is closed to other processes");
    else if (cfg.cluster_secret_len == 0)
        TN_LOG(TN_LOG_WARN, "node RPC plane is unauthenticated (security-enabled=false and no "
                            "cluster secret)");
    tn_ws_opts_t wopts;
    if (tn_ws_opts_from_config(&wopts, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "ternd: %s\n", err);
        tn_config_fini(&cfg);
        return 2;
    }
    tn_broker_opts_t bopts;
    if (tn_broker_opts_from_config(&bopts, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "ternd: %s\n", err);
        tn_config_fini(&cfg);
        return 2;
    }

    uv_loop_t loop;
    uv_loop_init(&loop);
    daemon_t d;
    memset(&d, 0, sizeof(d));
    tn_store_opts_t opts;
    tn_store_opts_from_config(&opts, &cfg);
    /* Type=notify under systemd (packaging/systemd/ternd.service). */
    if (tn_notify_open(&d.notify, getenv("NOTIFY_SOCKET"), err, sizeof(err)) != 0)
        TN_LOG(TN_LOG_WARN, "not notifying the service manager: %s", err);
    notify(&d, "STATUS=opening the data directory %s", cfg.data_path);
    int rc = tn_store_open(&loop, &opts, &d.store, err, sizeof(err));
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot open the data directory: %s", err);
        notify(&d, "STATUS=cannot open the data directory: %s", err);
        tn_broker_opts_fini(&bopts);
        uv_loop_close(&loop);
        tn_config_fini(&cfg);
        return 1;
    }
    if (cfg.pid_file[0] != '\0' && (rc = write_pid_file(cfg.pid_file)) != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot write the pid file %s: %s", cfg.pid_file, tn_strerror(rc));
        notify(&d, "STATUS=cannot write the pid file %s: %s", cfg.pid_file, tn_strerror(rc));
        tn_broker_opts_fini(&bopts);
        tn_store_close(d.store, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        tn_config_fini(&cfg);
        return 1;
    }
    /* Handlers first: a signal during recovery is acted on once the loop runs. */
    uv_signal_init(&loop, &d.sigint);
    uv_signal_init(&loop, &d.sigterm);
    uv_signal_init(&loop, &d.sighup);
    d.sigint.data = d.sigterm.data = d.sighup.data = &d;
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sighup, on_sighup, SIGHUP);
    d.signals_open = true;
    d.reload_target = (tn_reload_target_t){&cfg, argc, argv, environ, NULL, NULL, NULL};
    d.loop = &loop;
    g_daemon = &d;
    notify(&d, "STATUS=recovering partitions and channels in %s", cfg.data_path);
    rc = tn_broker_open(&loop, d.store, &bopts, &d.broker);
    tn_broker_opts_fini(&bopts);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "recovery failed: %s", tn_strerror(rc));
        notify(&d, "STATUS=recovery failed: %s", tn_strerror(rc));
        d.rc = 1;
        close_signals(&d);
        on_broker_closed(NULL);
    } else if (open_meta(&d, &cfg, err, sizeof(err)) != 0) {
        TN_LOG(TN_LOG_ERROR, "%s", err);
        notify(&d, "STATUS=%s", err);
        d.rc = 1;
        close_signals(&d);
        tn_broker_close(d.broker, on_broker_closed);
    } else if (start_doors(&d, &cfg, &wopts, err, sizeof(err)) != 0) {
        /* Nothing is served yet: say why, close what started, exit 1.
         * The metastore stops first, so it does not come up (and seed,
         * and say "ready") while the rest closes. */
        TN_LOG(TN_LOG_ERROR, "%s", err);
        d.rc = 1;
        tn_meta_stop(d.meta);
        shut_down(&d);
        notify(&d, "STATUS=%s", err); /* after shut_down's, to stay shown */
    } else {
        char summary[256];
        summarise(d.broker, summary, sizeof(summary));
        d.api.ready = true;
        TN_LOG(TN_LOG_NOTICE, "ternd %s ready: data %s, %s", TN_VERSION, cfg.data_path, summary);
        if (tn_store_disk_high(d.store))
            TN_LOG(TN_LOG_WARN, "disk is above the high watermark: publishes will be refused");
        start_ready_poll(&d);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    tn_nsq_http_fini(&d.api);
    /* With the metastore drained, libraft's handles are still on the loop
     * (tn_meta_drain): everything else has closed, storage is durable. */
    rc = d.meta_drained ? 0 : uv_loop_close(&loop);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "loop not closed cleanly: %s", uv_strerror(rc));
        d.rc = 1;
    }
    if (cfg.pid_file[0] != '\0')
        unlink(cfg.pid_file);
    tn_notify_close(&d.notify);
    tn_free(d.peers);
    tn_tls_ctx_free(d.https_tls); /* the HTTPS listener closed */
    tn_config_fini(&cfg);
    /* _exit, not exit: libuv never joins its worker threads, and one that
     * hashed a password (bcrypt) holds OpenSSL's per-thread state, which
     * exit's handlers (libcrypto's cleanup) would pull the shared state
     * from under. Everything on the loop has closed and storage is
     * durable; only the log streams need flushing. */
    fflush(stdout);
    fflush(stderr);
    _exit(d.rc);
}
