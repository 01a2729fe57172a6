/* Prometheus /metrics. See metrics.h. */
#include "core/platform.h"

#include "api/metrics.h"

#include "api/rchild.h"

#include "core/err.h"
#include "core/time.h"
#include "meta/state.h"
#include "storage/chanlog.h"
#include "storage/plog.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int put(tn_buf_t *b, const char *fmt, ...) TN_PRINTF(2, 3);
static int put(tn_buf_t *b, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return UV_EINVAL;
    return tn_buf_append(b, line, TN_MIN((size_t)n, sizeof(line) - 1));
}

static void family(tn_buf_t *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void scalar(tn_buf_t *b, const char *name, const char *type, const char *help, uint64_t v)
{
    family(b, name, type, help);
    put(b, "%s %" PRIu64 "\n", name, v);
}

/* The scrub's totals. A partition it isolates is counted where any
 * other isolated partition is. */
static void scrub_metrics(const tn_metrics_t *m, tn_buf_t *b)
{
    if (m->scrub == NULL)
        return;
    tn_scrub_counters_t c;
    tn_scrub_counters(m->scrub, &c);
    scalar(b, "tern_scrub_runs_total", "counter", "scrub runs finished (sealed segments checked)",
           c.runs);
    scalar(b, "tern_scrub_bytes_total", "counter", "bytes of segments and sidecars scrubbed",
           c.bytes);
    scalar(b, "tern_scrub_records_total", "counter", "records whose CRC the scrub checked",
           c.records);
    scalar(b, "tern_scrub_errors_total", "counter", "damage the scrub found (records or sidecars)",
           c.errors);
    scalar(b, "tern_scrub_running", "gauge", "1 while a scrub runs", c.running ? 1 : 0);
    family(b, "tern_scrub_last_success_timestamp_seconds", "gauge",
           "when the last scrub that found nothing finished (Unix time; 0: none yet)");
    put(b, "tern_scrub_last_success_timestamp_seconds %.3f\n", (double)c.last_success_ms / 1e3);
    family(b, "tern_scrub_last_duration_seconds", "gauge", "how long the last finished scrub took");
    put(b, "tern_scrub_last_duration_seconds %.3f\n", (double)c.last_duration_ns / 1e9);
}

static void per_topic(const tn_metrics_t *m, tn_buf_t *b)
{
    tn_broker_t *br = m->api->broker;
    uint32_t listed = 0, omitted = 0;
    /* One pass per family keeps each family's lines together, as the
     * exposition format asks. */
    static const char *const fams[][3] = {
        {"tern_topic_messages_total", "counter", "messages ever published to the topic"},
        {"tern_channel_depth", "gauge", "messages waiting in the channel (not in flight)"},
        {"tern_channel_in_flight", "gauge", "messages delivered and not yet finished"},
        {"tern_channel_deferred", "gauge", "messages waiting for a time (REQ delay, DPUB)"},
        {"tern_channel_finishes_total", "counter", "messages finished"},
        {"tern_channel_requeues_total", "counter", "messages requeued"},
        {"tern_channel_timeouts_total", "counter", "deliveries that timed out"},
        {"tern_channel_consumers", "gauge", "consumers attached"},
    };
    for (size_t f = 0; f < TN_ARRAY_SIZE(fams); f++) {
        family(b, fams[f][0], fams[f][1], fams[f][2]);
        listed = omitted = 0;
        for (size_t i = 0; i < br->nbuckets; i++) {
            for (tn_topic_t *t = br->buckets[i]; t != NULL; t = t->hnext) {
                if (t->state != TN_OBJ_READY)
                    continue;
                if (listed >= m->max_topics) {
                    omitted++;
                    continue;
                }
                listed++;
                if (f == 0) {
                    uint64_t total = 0;
                    for (uint32_t p = 0; p < t->nparts; p++)
                        if (tn_topic_part_local(t, p))
                            total += tn_part_message_count(t->parts[p]);
                    put(b, "%s{topic=\"%s\"} %" PRIu64 "\n", fams[f][0], t->name, total);
                    continue;
                }
                for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
                    if (ch->state != TN_OBJ_READY)
                        continue;
                    tn_channel_stats_t cs;
                    tn_channel_stats(ch, &cs);
                    uint64_t v = 0;
                    switch (f) {
                    case 1:
                        v = cs.depth - TN_MIN(cs.depth, cs.inflight + cs.deferred);
                        break;
                    case 2:
                        v = cs.inflight;
                        break;
                    case 3:
                        v = cs.deferred;
                        break;
                    case 4:
                        v = cs.finish_count;
                        break;
                    case 5:
                        v = cs.requeue_count;
                        break;
                    case 6:
                        v = cs.timeout_count;
                        break;
                    default:
                        v = ch->nconsumers;
                        break;
                    }
                    put(b, "%s{topic=\"%s\",channel=\"%s\"} %" PRIu64 "\n", fams[f][0], t->name,
                        ch->name, v);
                }
            }
        }
    }
    scalar(b, "tern_metrics_topics_omitted", "gauge",
           "topics left out of the per-topic series (metrics-max-topics)", omitted);
}

/* Isolated logs counted by count_isolated. */
typedef struct {
    uint64_t parts, chans;
} isolated_t;

static void count_isolated(tn_topic_t *t, uint32_t p, void *arg)
{
    isolated_t *n = arg;
    if (tn_plog_err(t->parts[p]->plog) != 0)
        n->parts++;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        if (ch->state != TN_OBJ_READY || ch->parts == NULL)
            continue;
        tn_chpart_t *cp = ch->parts[p];
        if (cp != NULL && cp->cl != NULL && tn_chanlog_err(cp->cl) != 0)
            n->chans++;
    }
}

/* Logs of this node's partitions and channels whose sticky error (a CRC
 * failure, a failed write or fdatasync, damage found by recovery) isolates
 * them until a restart: the storage-error alert's input. Every topic is
 * counted, whatever metrics-max-topics says. */
static void isolated(const tn_metrics_t *m, tn_buf_t *b)
{
    isolated_t n = {0, 0};
    tn_broker_each_local_part(m->api->broker, count_isolated, &n);
    family(b, "tern_isolated_logs", "gauge",
           "logs refusing reads and writes after a storage error, until a restart");
    put(b, "tern_isolated_logs{log=\"partition\"} %" PRIu64 "\n", n.parts);
    put(b, "tern_isolated_logs{log=\"channel\"} %" PRIu64 "\n", n.chans);
}

/* Replication, from the replica manager (cluster/replica.h). Gauges of
 * partitions led here (under-replicated, lag) count each partition on one
 * node only, so a sum over the cluster counts it once; offline counts the
 * partitions this node knows to have no leader, which every node reports
 * (take the max over nodes, as deploy/'s alert rule does). */
static void repl_metrics(const tn_metrics_t *m, tn_buf_t *b)
{
    tn_replica_stats_t rs;
    memset(&rs, 0, sizeof(rs));
    if (m->replica != NULL)
        tn_replica_stats(m->replica, &rs);
    family(b, "tern_replica_partitions", "gauge",
           "replicated partitions this node holds a replica of, by role");
    put(b, "tern_replica_partitions{role=\"leader\"} %" PRIu64 "\n", rs.leading);
    put(b, "tern_replica_partitions{role=\"follower\"} %" PRIu64 "\n", rs.following);
    scalar(b, "tern_partitions_under_replicated", "gauge",
           "partitions led here whose ISR is smaller than their replica set", rs.under_replicated);
    scalar(b, "tern_partitions_offline", "gauge",
           "replicated partitions with no leader (no eligible in-sync replica), as this node knows",
           rs.offline);
    scalar(b, "tern_replica_damaged_partitions", "gauge",
           "replicas on this node whose log failed a CRC check and is not repaired yet (out of the "
           "ISR and of elections)",
           rs.damaged);
    scalar(b, "tern_replica_repairs_total", "counter",
           "damaged segments this node replaced with its leader's copy", rs.repairs);
    scalar(b, "tern_replica_repairs_failed_total", "counter",
           "repair attempts that failed here (each is tried again)", rs.repairs_failed);
    scalar(b, "tern_replica_repairs_running", "gauge",
           "repairs of damaged replicas running on this node now (at most max-repairs-per-node)",
           rs.repairs_running);
    scalar(b, "tern_replica_repairs_running_peak", "gauge",
           "the most repairs of damaged replicas that ran on this node at once since it started",
           rs.repairs_running_peak);
    scalar(b, "tern_replica_repairs_waiting", "gauge",
           "damaged replicas on this node waiting their turn to be repaired (max-repairs-per-node)",
           rs.repairs_waiting);
    family(b, "tern_replica_repair_busy_total", "counter",
           "repair reads answered busy (max-repairs-per-node reads served at once), by side: "
           "served (this node answered it) and asked (this node's read, asked again)");
    put(b, "tern_replica_repair_busy_total{side=\"served\"} %" PRIu64 "\n", rs.repair_busy_served);
    put(b, "tern_replica_repair_busy_total{side=\"asked\"} %" PRIu64 "\n", rs.repair_busy_asked);
    scalar(b, "tern_isr_shrinks_total", "counter",
           "ISR shrinks this node proposed and the metastore applied", rs.isr_shrinks);
    scalar(b, "tern_isr_expands_total", "counter",
           "ISR expands this node proposed and the metastore applied", rs.isr_expands);
    scalar(b, "tern_replica_lag_records", "gauge",
           "the largest lag, in records, of a follower of a partition led here",
           rs.max_lag_records);
    scalar(b, "tern_replica_lag_bytes", "gauge",
           "the largest lag, in bytes, of a follower of a partition led here", rs.max_lag_bytes);
    family(b, "tern_replica_lag_seconds", "gauge",
           "the longest time a follower of a partition led here has been behind its log end");
    put(b, "tern_replica_lag_seconds %.3f\n", (double)rs.max_lag_ms / 1e3);
    family(b, "tern_replica_fetches_total", "counter", "FETCH requests, by side");
    put(b, "tern_replica_fetches_total{side=\"answered\"} %" PRIu64 "\n", rs.fetches);
    put(b, "tern_replica_fetches_total{side=\"sent\"} %" PRIu64 "\n", rs.fetches_sent);
    family(b, "tern_replica_fetches_sent_total", "counter",
           "FETCH requests this node sent as a follower, by node RPC connection (bulk: copies out "
           "of the ISR or far behind)");
    put(b, "tern_replica_fetches_sent_total{connection=\"normal\"} %" PRIu64 "\n",
        rs.fetches_sent - rs.fetches_sent_bulk);
    put(b, "tern_replica_fetches_sent_total{connection=\"bulk\"} %" PRIu64 "\n",
        rs.fetches_sent_bulk);
    scalar(b, "tern_moves_in_flight", "gauge",
           "partition moves under way (every node reports the cluster's number)",
           rs.moves_in_flight);
    family(b, "tern_move_bytes_total", "counter",
           "bytes of records copied to followers out of the ISR (moves' targets, catching-up "
           "replicas): read here for them (sent) or appended here while out of it (received)");
    put(b, "tern_move_bytes_total{direction=\"sent\"} %" PRIu64 "\n", rs.move_bytes_sent);
    put(b, "tern_move_bytes_total{direction=\"received\"} %" PRIu64 "\n", rs.move_bytes_received);
    scalar(b, "tern_move_throttle_waits_total", "counter",
           "catch-up fetches held, or answered short, for want of move-rate's tokens",
           rs.throttle_waits);
    family(b, "tern_moves_finished_total", "counter",
           "partition moves this node saw finish since it started, by outcome");
    put(b, "tern_moves_finished_total{outcome=\"done\"} %" PRIu64 "\n", rs.moves_done);
    put(b, "tern_moves_finished_total{outcome=\"aborted\"} %" PRIu64 "\n", rs.moves_aborted);
    put(b, "tern_moves_finished_total{outcome=\"failed\"} %" PRIu64 "\n", rs.moves_failed);
    family(b, "tern_move_duration_seconds", "summary",
           "how long the moves this node saw finish took, from begin to done or aborted");
    put(b, "tern_move_duration_seconds_sum %.3f\n", rs.move_seconds_sum);
    put(b, "tern_move_duration_seconds_count %" PRIu64 "\n", rs.move_seconds_count);
    scalar(b, "tern_leader_elections_total", "counter",
           "leader epoch changes this node has seen on its replicated partitions", rs.elections);
    scalar(b, "tern_fenced_requests_total", "counter",
           "fetches answered or received as fenced (a stale leader epoch)", rs.fenced);
    family(b, "tern_replica_truncations_total", "counter",
           "log suffixes truncated to the leader's divergence point, or refused (below the hw)");
    put(b, "tern_replica_truncations_total{result=\"done\"} %" PRIu64 "\n", rs.truncations);
    put(b, "tern_replica_truncations_total{result=\"refused\"} %" PRIu64 "\n",
        rs.truncations_refused);
    scalar(b, "tern_replica_resets_total", "counter",
           "follower copies emptied to restart at their leader's log start (retention removed "
           "what they lacked)",
           rs.resets);
    scalar(b, "tern_replica_gap_skips_total", "counter",
           "follower copies that skipped offsets their leader's log never assigned (a gap)",
           rs.skips);
}

/* The members this node's metastore replica records, alive and dead (a
 * member is dead once it missed cluster-dead-after of heartbeats). */
static void members(const tn_metrics_t *m, tn_buf_t *b)
{
    if (m->api->meta == NULL)
        return;
    const tn_meta_state_t *s = tn_meta_state(m->api->meta);
    uint64_t alive = 0, dead = 0;
    for (size_t i = 0; i < s->nmembers; i++) {
        if (s->members[i].status == TN_MEMBER_DEAD)
            dead++;
        else
            alive++;
    }
    family(b, "tern_cluster_members", "gauge",
           "cluster members in this node's metastore replica, by status");
    put(b, "tern_cluster_members{status=\"alive\"} %" PRIu64 "\n", alive);
    put(b, "tern_cluster_members{status=\"dead\"} %" PRIu64 "\n", dead);
    scalar(b, "tern_meta_term", "gauge",
           "the metastore's Raft term on this node (it rises with every election)",
           tn_meta_term(m->api->meta));
}

/* Dropped replicas' copies (storage/store.h): moved to quarantine/ (as the
 * last start found it), and marked in this run (moved at the next start). */
static void quarantine_metrics(const tn_metrics_t *m, tn_store_t *st, tn_buf_t *b)
{
    family(b, "tern_quarantined_partitions", "gauge",
           "copies of partitions dropped from this node's replicas: in quarantine/ (as the last "
           "start found it), or marked to move there at the next start");
    put(b, "tern_quarantined_partitions{state=\"moved\"} %" PRIu64 "\n", tn_store_quarantined(st));
    put(b, "tern_quarantined_partitions{state=\"marked\"} %" PRIu64 "\n",
        m->replica != NULL ? tn_replica_marked(m->replica) : 0);
}

int tn_metrics_write(const tn_metrics_t *m, tn_buf_t *b)
{
    tn_broker_t *br = m->api->broker;
    tn_store_t *st = br->store;
    family(b, "tern_build_info", "gauge", "ternd's version");
    put(b, "tern_build_info{version=\"%s\"} 1\n", m->api->version);
    scalar(b, "tern_ready", "gauge", "1 when /readyz answers 200",
           tn_nsq_http_ready(m->api) ? 1 : 0);
    tn_hist_write(&br->pub_hist, "tern_publish_duration_seconds", "",
                  "publish to its durability boundary (OK sent after this)", b);
    tn_hist_write(&br->walop_hist, "tern_channel_log_duration_seconds", "",
                  "a FIN, REQ or other channel record to its fdatasync", b);
    tn_hist_write(&st->fsync_hist, "tern_fsync_duration_seconds", "log=\"partition\"",
                  "fdatasync calls of the storage threads", b);
    tn_hist_write(&st->walsync_hist, "tern_fsync_duration_seconds", "log=\"channel\"", NULL, b);
    scalar(b, "tern_inflight_messages", "gauge", "delivered, unfinished messages (node-wide)",
           br->inflight_msgs);
    scalar(b, "tern_inflight_bytes", "gauge", "bytes of delivered, unfinished messages",
           br->inflight_bytes);
    family(b, "tern_tail_cache_bytes", "gauge", "message bodies held in memory");
    put(b, "tern_tail_cache_bytes{kind=\"recent\"} %" PRIu64 "\n", br->hot_bytes);
    put(b, "tern_tail_cache_bytes{kind=\"read_back\"} %" PRIu64 "\n", br->cache_bytes);
    scalar(b, "tern_timeouts_total", "counter", "deliveries that timed out", br->timeouts);
    scalar(b, "tern_dead_letters_total", "counter", "messages moved to a .DLQ topic",
           br->dlq_moves);
    scalar(b, "tern_ttl_discards_total", "counter", "messages expired by a TTL topic",
           br->ttl_discards);
    scalar(b, "tern_gc_segments_total", "counter", "segments reclaimed", br->gc_segments);
    scalar(b, "tern_disk_high", "gauge", "1 while publishes are refused for lack of disk",
           tn_store_disk_high(st) ? 1 : 0);
    scalar(b, "tern_channel_logs_full", "gauge",
           "channel logs (one per channel and partition) whose write found the disk full: "
           "their delivery and settles wait for space",
           tn_broker_logs_full(br));
    const tn__committer_t *cs[2] = {&st->logc, &st->walc};
    const char *logs[2] = {"partition", "channel"};
    family(b, "tern_commit_flowing", "gauge",
           "1 while a storage thread gathers rounds as they flow, 0 by cohort (operations.md)");
    for (int i = 0; i < 2; i++)
        put(b, "tern_commit_flowing{log=\"%s\"} %d\n", logs[i],
            atomic_load_explicit(&cs[i]->flowing, memory_order_relaxed) ? 1 : 0);
    family(b, "tern_commit_pace_epochs_total", "counter",
           "measured epochs of each way of gathering group-commit rounds");
    for (int i = 0; i < 2; i++)
        for (int w = 0; w < 2; w++)
            put(b, "tern_commit_pace_epochs_total{log=\"%s\",way=\"%s\"} %" PRIu64 "\n", logs[i],
                w == 0 ? "cohort" : "flow",
                (uint64_t)atomic_load_explicit(&cs[i]->pace_epochs[w], memory_order_relaxed));
    family(b, "tern_commit_pace_switches_total", "counter",
           "changes of the preferred way of gathering group-commit rounds");
    for (int i = 0; i < 2; i++)
        put(b, "tern_commit_pace_switches_total{log=\"%s\"} %" PRIu64 "\n", logs[i],
            (uint64_t)atomic_load_explicit(&cs[i]->pace_switches, memory_order_relaxed));
    uint64_t polled = st->poll_ns_total;
    if (st->poll_started_ns != 0)
        polled += (uint64_t)(tn_now_mono_ns() - st->poll_started_ns);
    family(b, "tern_busy_poll_seconds_total", "counter",
           "time the event loop polled for group commits instead of sleeping (commit-busy-poll)");
    put(b, "tern_busy_poll_seconds_total %.6f\n", (double)polled / 1e9);
    scalar(b, "tern_disk_used_percent", "gauge", "used space of the data path's file system",
           (uint64_t)atomic_load(&st->disk_used_pct));
    if (m->nsq != NULL) {
        tn_nsq_server_stats_t ns;
        tn_nsq_server_stats(m->nsq, &ns);
        scalar(b, "tern_nsq_connections", "gauge", "open NSQ TCP connections", ns.connections);
        scalar(b, "tern_nsq_refused_connections_total", "counter",
               "NSQ connections closed at once (max-connections)", ns.refused_connections);
        family(b, "tern_nsq_errors_total", "counter", "NSQ error frames sent, by code");
        for (int e = 1; e <= TN_NSQ_E_THROTTLED; e++)
            put(b, "tern_nsq_errors_total{code=\"%s\"} %" PRIu64 "\n",
                tn_nsq_err_code((tn_nsq_err_t)e), ns.errors[e]);
    }
    if (m->http != NULL) {
        tn_http_server_stats_t hs;
        tn_http_server_stats(m->http, &hs);
        if (m->https != NULL) {
            tn_http_server_stats_t tls;
            tn_http_server_stats(m->https, &tls);
            hs.connections += tls.connections;
            for (int k = 1; k <= 5; k++)
                hs.by_status[k] += tls.by_status[k];
            hs.large_body_bytes += tls.large_body_bytes;
        }
        scalar(b, "tern_http_connections", "gauge", "open HTTP connections", hs.connections);
        family(b, "tern_http_responses_total", "counter", "HTTP answers, by status class");
        for (int k = 1; k <= 5; k++)
            put(b, "tern_http_responses_total{class=\"%dxx\"} %" PRIu64 "\n", k, hs.by_status[k]);
        scalar(b, "tern_http_unauthorized_total", "counter",
               "HTTP answers 401: credentials missing or wrong", hs.unauthorized);
        scalar(b, "tern_http_large_body_bytes", "gauge",
               "bytes of the node-wide budget for bodies over 1 MiB in use", hs.large_body_bytes);
    }
    if (m->ws != NULL) {
        tn_ws_stats_t ws;
        tn_ws_stats(m->ws, &ws);
        scalar(b, "tern_ws_connections", "gauge", "live WebSocket connections", ws.connections);
        scalar(b, "tern_ws_messages_total", "counter", "live feed frames written whole",
               ws.messages);
        scalar(b, "tern_ws_bytes_total", "counter", "live feed frame bytes written", ws.bytes);
        family(b, "tern_ws_rejected_total", "counter",
               "live feed connections refused or closed, by reason");
        put(b, "tern_ws_rejected_total{reason=\"auth\"} %" PRIu64 "\n", ws.auth_failures);
        put(b, "tern_ws_rejected_total{reason=\"capacity\"} %" PRIu64 "\n", ws.capacity_rejections);
        put(b, "tern_ws_rejected_total{reason=\"not_ttl\"} %" PRIu64 "\n", ws.ttl_rejections);
        put(b, "tern_ws_rejected_total{reason=\"slow_consumer\"} %" PRIu64 "\n", ws.slow_closes);
    }
    scrub_metrics(m, b);
    per_topic(m, b);
    isolated(m, b);
    members(m, b);
    repl_metrics(m, b);
    quarantine_metrics(m, st, b);
    int rc = m->rpc != NULL ? tn_rpc_metrics_write(m->rpc, b) : 0;
    if (rc == 0 && m->dataplane != NULL)
        rc = tn_dataplane_metrics_write(m->dataplane, b);
    if (rc == 0 && m->dispatch != NULL)
        rc = tn_dispatch_metrics_write(m->dispatch, b);
    if (rc == 0 && m->router != NULL)
        tn_router_settle_metrics_write(m->router, b);
    if (rc == 0 && m->rchild != NULL)
        rc = tn_rchild_metrics_write(m->rchild, b);
    return rc;
}

static void on_metrics(tn_http_request_t *r, void *arg)
{
    tn_metrics_t *m = arg;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_metrics_write(m, &b);
    tn_http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, tn_buf_data(&b),
                    tn_buf_size(&b));
    tn_buf_fini(&b);
}

int tn_metrics_register(tn_http_server_t *srv, tn_metrics_t *m)
{
    return tn_http_route(srv, "GET", "/metrics", 0, NULL, on_metrics, m);
}
