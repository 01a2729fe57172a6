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
 *   4. Listen for NSQ TCP clients, and run the loop until SIGINT or
 *      SIGTERM.
 *   5. Shut down in reverse: close the listener and every connection
 *      (in-flight messages go back to their channels), let the engine's
 *      storage requests finish, close every log, stop the storage threads
 *      and release the lock; remove the pid file. */
#include "core/platform.h"

#include "cmd/version.h"
#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "api/access.h"
#include "api/catalog.h"
#include "api/metrics.h"
#include "api/users.h"
#include "api/v1.h"
#include "api/fanout.h"
#include "api/nsq_http.h"
#include "api/ws.h"
#include "proto/http/server.h"
#include "proto/nsq/lookupd.h"
#include "proto/nsq/server.h"
#include "meta/meta.h"
#include "queue/queue.h"
#include "storage/store.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

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
    tn_ws_t *ws; /* NULL: the live feed is off */
    tn_meta_t *meta;
    tn_catalog_t *catalog;
    const char *data_path; /* borrowed from the config */
    tn_v1_t v1;
    tn_seed_t *seed;   /* the root user being seeded, or NULL */
    bool meta_stopped; /* libraft left on the loop: stop it and exit */
    tn_lookupd_t *lookupd;
    uv_signal_t sigint;
    uv_signal_t sigterm;
    int rc;
    uint64_t raft_id;
    bool security; /* security-enabled */
    const char *raft_address; /* borrowed from the configuration */
} daemon_t;

static daemon_t *g_daemon;

/* The NSQ TCP door's question, with no NSQ AUTH configured: is this topic
 * closed to it (api/access.h)? */
static bool nsq_protected(void *arg, const char *topic)
{
    daemon_t *d = arg;
    return d->security && tn_access_protected(d->meta, topic);
} /* for the close callbacks, which carry no argument */

static void on_store_closed(tn_store_t *store)
{
    (void)store;
    TN_LOG(TN_LOG_NOTICE, "storage closed; exiting");
    /* libraft's handles are still on the loop (tn_meta_stop). */
    if (g_daemon != NULL && g_daemon->meta_stopped)
        uv_stop(g_daemon->loop);
}

static void on_broker_closed(tn_broker_t *b)
{
    (void)b;
    daemon_t *d = g_daemon;
    if (d->meta != NULL) {
        tn_users_seed_cancel(d->seed);
        d->api.meta = NULL;
        tn_meta_stop(d->meta);
        d->meta_stopped = true;
    }
    tn_store_close(d->store, on_store_closed);
}

static void on_nsq_closed(void *arg)
{
    daemon_t *d = arg;
    tn_broker_close(d->broker, on_broker_closed);
}

static void on_http_closed(void *arg)
{
    daemon_t *d = arg;
    tn_ws_free(d->ws); /* its connections closed with the HTTP server */
    d->ws = NULL;
    d->metrics.ws = NULL;
    if (d->lookupd != NULL) {
        tn_lookupd_t *l = d->lookupd;
        d->lookupd = NULL;
        tn_lookupd_stop(l, on_http_closed, d);
        return;
    }
    if (d->metrics_http != NULL) {
        tn_http_server_t *m = d->metrics_http;
        d->metrics_http = NULL;
        tn_http_server_close(m, on_http_closed, d);
        return;
    }
    if (d->nsq != NULL)
        tn_nsq_server_close(d->nsq, on_nsq_closed, d);
    else
        tn_broker_close(d->broker, on_broker_closed);
}

static void on_signal(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;
    TN_LOG(TN_LOG_NOTICE, "%s received: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    d->api.ready = false;
    d->api.shutting_down = true;
    tn_catalog_stop(d->catalog);
    d->catalog = NULL;
    tn_v1_close(&d->v1);
    if (d->ws != NULL)
        tn_ws_close_all(d->ws, "E_SHUTDOWN", "the node is shutting down");
    if (d->http != NULL)
        tn_http_server_close(d->http, on_http_closed, d);
    else if (d->nsq != NULL)
        tn_nsq_server_close(d->nsq, on_nsq_closed, d);
    else if (d->broker != NULL)
        tn_broker_close(d->broker, on_broker_closed);
    else
        on_broker_closed(NULL);
}

/* lookupd-tcp-address and nsqd's config spelling ["a:1", "b:2"] as one
 * comma-separated list. */
static void lookupd_list(const tn_config_t *cfg, char *out, size_t len)
{
    size_t n = 0;
    const char *srcs[] = {cfg->lookupd_tcp_address, cfg->nsqlookupd_tcp_addresses};
    for (size_t k = 0; k < 2; k++) {
        for (const char *p = srcs[k]; *p != '\0' && n + 2 < len; p++) {
            char ch = *p;
            if (ch == '[' || ch == ']' || ch == '"' || ch == ' ')
                continue;
            out[n++] = ch;
        }
        if (n > 0 && n + 2 < len && out[n - 1] != ',' && k == 0 && srcs[1][0] != '\0')
            out[n++] = ',';
    }
    while (n > 0 && out[n - 1] == ',')
        n--;
    out[n] = '\0';
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
    tn_v1_join(d->meta, d->raft_id, d->raft_address);
    int rc =
        tn_users_seed_root(d->loop, d->meta, d->data_path, getenv("TERN_ADMIN_PASSWORD"), &d->seed);
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR, "cannot seed the root user: %s", tn_strerror(rc));
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
    mo.node_id = (uint64_t)cfg->node_id + 1;
    mo.address = cfg->raft_address;
    mo.election_ms = (unsigned)(cfg->raft_election_timeout_ns / 1000000);
    mo.heartbeat_ms = TN_MAX(mo.election_ms / 10, 10u);
    mo.on_ready = on_meta_ready;
    mo.ready_arg = d;
    d->data_path = cfg->data_path;
    d->raft_id = mo.node_id;
    d->raft_address = cfg->raft_address;
    return tn_meta_open(d->loop, &mo, &d->meta, err, errlen);
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
    tn_log_level = cfg.log_level;
    tn_alloc_install_uv();
    /* A peer that goes away while we write must cost an EPIPE on that
     * socket, not the process. */
    signal(SIGPIPE, SIG_IGN);
    for (uint32_t i = 0; i < cfg.nignored_seen; i++) {
        const tn_config_ignored_t *ig = &tn_config_nsqd_ignored[cfg.ignored_seen[i]];
        TN_LOG(TN_LOG_WARN, "nsqd option %s has no effect in tern: %s", ig->name, ig->instead);
    }
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
    int rc = tn_store_open(&loop, &opts, &d.store, err, sizeof(err));
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot open the data directory: %s", err);
        tn_broker_opts_fini(&bopts);
        uv_loop_close(&loop);
        tn_config_fini(&cfg);
        return 1;
    }
    if (cfg.pid_file[0] != '\0' && (rc = write_pid_file(cfg.pid_file)) != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot write the pid file %s: %s", cfg.pid_file, tn_strerror(rc));
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
    d.sigint.data = d.sigterm.data = &d;
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    d.loop = &loop;
    g_daemon = &d;
    rc = tn_broker_open(&loop, d.store, &bopts, &d.broker);
    tn_broker_opts_fini(&bopts);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "recovery failed: %s", tn_strerror(rc));
        d.rc = 1;
        uv_close((uv_handle_t *)&d.sigint, NULL);
        uv_close((uv_handle_t *)&d.sigterm, NULL);
        on_broker_closed(NULL);
    } else if (open_meta(&d, &cfg, err, sizeof(err)) != 0) {
        TN_LOG(TN_LOG_ERROR, "%s", err);
        d.rc = 1;
        uv_close((uv_handle_t *)&d.sigint, NULL);
        uv_close((uv_handle_t *)&d.sigterm, NULL);
        tn_broker_close(d.broker, on_broker_closed);
    } else {
        tn_catalog_opts_t co = {cfg.msg_timeout_ns / 1000000, cfg.retention_ns / 1000000,
                                (uint32_t)cfg.max_attempts, (uint8_t)cfg.durability};
        if (tn_catalog_start(d.broker, d.meta, &co, &d.catalog) != 0)
            TN_LOG(TN_LOG_WARN, "metastore: cannot follow the queue engine's topics");
        tn_nsq_opts_t nopts;
        tn_nsq_opts_from_config(&nopts, &cfg, TN_VERSION);
        /* The /v1 API is set up below, before the loop runs any AUTH. */
        tn_nsqauth_local_t nsq_users = tn_v1_nsq_auth(&d.v1);
        if (cfg.nsq_auth_users)
            nopts.auth_local = &nsq_users;
        nopts.is_protected = nsq_protected;
        nopts.protected_arg = &d;
        d.security = cfg.security_enabled;
        rc =
            tn_nsq_server_start(&loop, d.broker, &nopts, cfg.tcp_address, &d.nsq, err, sizeof(err));
        if (rc != 0) {
            TN_LOG(TN_LOG_ERROR, "%s", err);
            d.rc = 1;
            uv_close((uv_handle_t *)&d.sigint, NULL);
            uv_close((uv_handle_t *)&d.sigterm, NULL);
            tn_broker_close(d.broker, on_broker_closed);
        } else {
            tn_http_opts_t hopts;
            tn_http_opts_default(&hopts);
            hopts.max_connections = (uint32_t)cfg.http_max_connections;
            hopts.head_timeout_ms = cfg.http_head_timeout_ns / 1000000;
            hopts.body_timeout_ms = cfg.http_body_timeout_ns / 1000000;
            hopts.idle_timeout_ms = cfg.http_idle_timeout_ns / 1000000;
            hopts.large_body_budget = (uint64_t)cfg.http_large_body_budget;
            tn_nsq_http_init(&d.api, &cfg, TN_VERSION);
            d.api.broker = d.broker;
            d.api.meta = d.meta; /* deletions go through it; /readyz waits for it */
            d.api.tcp_port = tn_nsq_server_port(d.nsq);
            d.api.nsq = d.nsq;
            d.api.v1 = &d.v1; /* its users decide on protected topics */
            d.api.protect_all = cfg.nsq_auth_users;
            rc = tn_http_server_start(&loop, &hopts, cfg.http_address, &d.http, err, sizeof(err));
            if (rc == 0) {
                d.api.http_port = tn_http_server_port(d.http);
                rc = tn_nsq_http_register(d.http, &d.api);
            }
            tn_v1_opts_t vo = {cfg.security_enabled,
                               (uint32_t)cfg.max_partitions,
                               cfg.retention_ns / 1000000,
                               (uint64_t)cfg.max_msg_size,
                               cfg.http_max_consume_wait_ns / 1000000,
                               (uint32_t)cfg.http_max_consumes_per_user,
                               (uint32_t)cfg.http_max_produces_per_user};
            if (rc == 0 && (rc = tn_v1_init(&d.v1, &loop, d.meta, d.broker, &vo)) == 0)
                rc = tn_v1_register(d.http, &d.v1);
            if (rc == 0 && !cfg.security_enabled)
                TN_LOG(TN_LOG_WARN,
                       "security is OFF (security-enabled=false): /v1 asks for no "
                       "credentials and checks no rights; never run this in production");
            else if (rc == 0 && cfg.nsq_auth_users)
                TN_LOG(TN_LOG_NOTICE,
                       "NSQ AUTH is served by tern's users (secret user:password): every topic "
                       "needs an identity with the right grant, AUTH on TCP and Basic "
                       "credentials on nsqd's HTTP endpoints");
            else if (rc == 0 && cfg.auth_http_address[0] != '\0')
                TN_LOG(TN_LOG_NOTICE,
                       "NSQ AUTH is served by %s: its grants decide on TCP; on nsqd's HTTP "
                       "endpoints, topics with an owner need Basic credentials",
                       cfg.auth_http_address);
            else if (rc == 0)
                TN_LOG(TN_LOG_NOTICE, "/v1 requires Basic auth; the NSQ doors (TCP and nsqd's HTTP "
                                      "endpoints) are open as nsqd's are, since no NSQ auth is "
                                      "configured, but topics with an owner (made through /v1) "
                                      "are refused to them without credentials");
            if (rc == 0 && cfg.websocket_enabled) {
                wopts.broker = d.broker;
                wopts.auth = tn_nsq_server_auth(d.nsq);
                wopts.ready = &d.api.ready;
                wopts.is_protected = nsq_protected;
                wopts.protected_arg = &d;
                if ((rc = tn_ws_new(&loop, &wopts, &d.ws)) == 0)
                    rc = tn_ws_register(d.http, d.ws);
                if (rc == 0)
                    TN_LOG(TN_LOG_NOTICE,
                           "live WebSocket feed on /v1/ws/topics/{topic} (%u allowed origins)",
                           wopts.norigins);
            }
            d.metrics.ws = d.ws;
            d.metrics.api = &d.api;
            d.metrics.nsq = d.nsq;
            d.metrics.http = d.http;
            d.metrics.max_topics = (uint32_t)cfg.metrics_max_topics;
            if (rc == 0 && cfg.metrics_address[0] != '\0') {
                tn_http_opts_t mopts;
                tn_http_opts_default(&mopts);
                mopts.max_connections = 64;
                rc = tn_http_server_start(&loop, &mopts, cfg.metrics_address, &d.metrics_http, err,
                                          sizeof(err));
                if (rc == 0) {
                    rc = tn_metrics_register(d.metrics_http, &d.metrics);
                    TN_LOG(TN_LOG_NOTICE, "metrics listening on port %d (%s)",
                           tn_http_server_port(d.metrics_http), cfg.metrics_address);
                }
            } else if (rc == 0) {
                rc = tn_metrics_register(d.http, &d.metrics);
            }
            char lookupds[2048];
            lookupd_list(&cfg, lookupds, sizeof(lookupds));
            if (rc == 0 && lookupds[0] != '\0') {
                tn_lookupd_opts_t lo = {cfg.broadcast_address, d.api.tcp_port, d.api.http_port,
                                        TN_VERSION};
                rc = tn_lookupd_start(&loop, d.broker, lookupds, &lo, &d.lookupd);
                if (rc != 0)
                    snprintf(err, sizeof(err),
                             "lookupd-tcp-address \"%.900s\": expected host:port[,...]", lookupds);
            }
            if (rc != 0) {
                TN_LOG(TN_LOG_ERROR, "%s", err[0] ? err : "cannot start the HTTP server");
                d.rc = 1;
                raise(SIGTERM);
            } else {
                d.api.ready = true;
                TN_LOG(TN_LOG_NOTICE, "HTTP listening on port %d (%s)", d.api.http_port,
                       cfg.http_address);
            }
            char summary[256];
            summarise(d.broker, summary, sizeof(summary));
            TN_LOG(TN_LOG_NOTICE, "NSQ TCP listening on port %d (%s)", tn_nsq_server_port(d.nsq),
                   cfg.tcp_address);
            TN_LOG(TN_LOG_NOTICE, "ternd %s ready: data %s, %s", TN_VERSION, cfg.data_path,
                   summary);
            if (tn_store_disk_high(d.store))
                TN_LOG(TN_LOG_WARN, "disk is above the high watermark: publishes will be refused");
        }
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    if (d.meta_stopped) {
        /* The metastore's libraft still holds handles on the loop (see
         * tn_meta_stop): leave from here, where everything it holds is
         * still reachable. _exit, not exit: a worker thread may still be
         * running a job nobody waits for any more (a bcrypt hash of a
         * cancelled request), and exit's handlers (libcrypto's cleanup)
         * would pull its state from under it. Storage is closed and
         * durable; only the log streams need flushing. */
        if (cfg.pid_file[0] != '\0')
            unlink(cfg.pid_file);
        tn_config_fini(&cfg);
        fflush(stdout);
        fflush(stderr);
        _exit(d.rc);
    }
    rc = uv_loop_close(&loop);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "loop not closed cleanly: %s", uv_strerror(rc));
        d.rc = 1;
    }
    if (cfg.pid_file[0] != '\0')
        unlink(cfg.pid_file);
    tn_config_fini(&cfg);
    return d.rc;
}
