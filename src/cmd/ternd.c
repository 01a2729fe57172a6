/* ternd, the tern daemon.
 *
 * DESIGN: startup and shutdown.
 *   1. Read the configuration (defaults, config file, TERN_* environment,
 *      flags); a bad value exits with status 2 and a line naming the option
 *      and its accepted range.
 *   2. Open the data directory: take its lock (a second daemon on the same
 *      directory exits with status 1), check FORMAT, start the storage
 *      threads.
 *   3. Recover every partition log and channel log on disk. A partition
 *      found damaged is isolated and reported; the others serve.
 *   4. Run the loop until SIGINT or SIGTERM, then close every log (queued
 *      writes finish first), stop the storage threads and release the lock.
 *
 * The NSQ and HTTP listeners arrive with the queue engine and HTTP issues;
 * until then ternd owns and recovers the data directory. */
#include "core/platform.h"

#include "cmd/version.h"
#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "storage/chanlog.h"
#include "storage/plog.h"
#include "storage/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

typedef struct {
    tn_store_t *store;
    uv_signal_t sigint;
    uv_signal_t sigterm;
    uint64_t partitions;
    uint64_t isolated;
    uint64_t channels;
    uint64_t records;
    int rc;
} daemon_t;

static int recover_channel(void *arg, const char *channel);

typedef struct {
    daemon_t *d;
    const char *topic;
    uint32_t partition;
} chan_ctx_t;

static int recover_partition(void *arg, const char *topic, uint32_t partition)
{
    daemon_t *d = arg;
    tn_plog_t *plog;
    int rc = tn_plog_open(d->store, topic, partition, &plog);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot open partition %s/%" PRIu32 ": %s", topic, partition,
               tn_strerror(rc));
        return rc;
    }
    d->partitions++;
    tn_plog_stats_t st;
    tn_plog_stats(plog, &st);
    if (st.err != 0) {
        d->isolated++;
        TN_LOG(TN_LOG_ERROR, "partition %s/%" PRIu32 " isolated: %s", topic, partition,
               plog->errmsg);
        return 0;
    }
    d->records += st.written_next - st.first_offset;
    TN_LOG(TN_LOG_INFO,
           "partition %s/%" PRIu32 ": %" PRIu64 " records from offset %" PRIu64
           ", next offset %" PRIu64 ", %" PRIu32 " segments, %" PRIu64 " bytes",
           topic, partition, st.written_next - st.first_offset, st.first_offset, st.written_next,
           st.segments, st.bytes);
    chan_ctx_t ctx = {d, topic, partition};
    return tn_chanlog_list(d->store, topic, partition, recover_channel, &ctx);
}

static int recover_channel(void *arg, const char *channel)
{
    chan_ctx_t *ctx = arg;
    tn_chanlog_t *cl;
    tn_cursor_t state;
    int rc = tn_chanlog_open(ctx->d->store, ctx->topic, ctx->partition, channel, NULL, &cl, &state);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot open channel %s of %s/%" PRIu32 ": %s", channel, ctx->topic,
               ctx->partition, tn_strerror(rc));
        return rc;
    }
    ctx->d->channels++;
    if (tn_chanlog_err(cl) != 0)
        TN_LOG(TN_LOG_ERROR, "channel isolated: %s", cl->errmsg);
    else
        TN_LOG(TN_LOG_INFO,
               "channel %s of %s/%" PRIu32 ": settled below %" PRIu64 ", %" PRIu32
               " settled ahead, %" PRIu32 " requeued%s",
               channel, ctx->topic, ctx->partition, state.frontier, state.nsettled, state.nrequeued,
               state.paused ? ", paused" : "");
    tn_cursor_fini(&state);
    return 0;
}

static int recover_topic(void *arg, const char *topic)
{
    daemon_t *d = arg;
    return tn_store_list_partitions(d->store, topic, recover_partition, d);
}

static void on_store_closed(tn_store_t *store)
{
    (void)store;
    TN_LOG(TN_LOG_NOTICE, "storage closed; exiting");
}

static void on_signal(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;
    TN_LOG(TN_LOG_NOTICE, "%s received: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    tn_store_close(d->store, on_store_closed);
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

    uv_loop_t loop;
    uv_loop_init(&loop);
    daemon_t d;
    memset(&d, 0, sizeof(d));
    tn_store_opts_t opts;
    tn_store_opts_from_config(&opts, &cfg);
    int rc = tn_store_open(&loop, &opts, &d.store, err, sizeof(err));
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "cannot open the data directory: %s", err);
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
    rc = tn_store_list_topics(d.store, recover_topic, &d);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "recovery failed: %s", tn_strerror(rc));
        d.rc = 1;
        uv_close((uv_handle_t *)&d.sigint, NULL);
        uv_close((uv_handle_t *)&d.sigterm, NULL);
        tn_store_close(d.store, NULL);
    } else {
        TN_LOG(TN_LOG_NOTICE,
               "ternd %s ready: data %s, %" PRIu64 " partitions (%" PRIu64 " isolated), %" PRIu64
               " channels, %" PRIu64 " records recovered",
               TN_VERSION, cfg.data_path, d.partitions, d.isolated, d.channels, d.records);
        if (tn_store_disk_high(d.store))
            TN_LOG(TN_LOG_WARN, "disk is above the high watermark: publishes will be refused");
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&loop);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "loop not closed cleanly: %s", uv_strerror(rc));
        d.rc = 1;
    }
    tn_config_fini(&cfg);
    return d.rc;
}
