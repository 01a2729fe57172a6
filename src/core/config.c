/* Configuration: the option table, value parsers, and the sources in
 * precedence order. See config.h for the rules. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/netaddr.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* OPT_ADDR: a listener's host:port, resolved by tn_config_load (see
 * listeners[]); OPT_ADDRS: host:port servers to dial, comma-separated,
 * checked but resolved only when dialled; OPT_DIAL: one such host:port,
 * never a wildcard; OPT_PEERS: ID@host:port, comma-separated, resolved by
 * tn_config_load (settle_cluster). All are kept as text. */
typedef enum {
    OPT_STR,
    OPT_INT,
    OPT_SIZE,
    OPT_DURATION,
    OPT_BOOL,
    OPT_ENUM,
    OPT_ADDR,
    OPT_ADDRS,
    OPT_DIAL,
    OPT_PEERS
} opt_type_t;

typedef struct {
    const char *name;
    opt_type_t type;
    size_t offset;
    const char *def;
    int64_t min;
    int64_t max;
    const char *const *choices; /* OPT_ENUM, NULL-terminated */
    const char *help;
} opt_t;

#define F(field) offsetof(tn_config_t, field)
#define MS       ((int64_t)1000000)
#define SEC      (1000 * MS)

/* "fatal" is nsqd's name for "errors only"; tern has no fatal lines, so it
 * means error (ternd reads it so). */
static const char *const log_levels[] = {"debug", "info", "notice", "warn", "error", "fatal", NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const durabilities[] = {"durable", "write_ack", "relaxed", NULL};
static const char *const client_auth_policies[] = {"", "require", "require-verify", NULL};
static const char *const tls_required_values[] = {"false", "true", "tcp-https", NULL};
/* In tn_nsq_auth_t order. */
static const char *const nsq_auth_values[] = {"open", "users", "external", NULL};

static const opt_t options[] = {
    {"config", OPT_STR, F(config_file), "", 0, 0, NULL,
     "config file of `name = value` lines (also TERN_CONFIG)"},
    {"data-path", OPT_STR, F(data_path), "data", 0, 0, NULL,
     "directory holding the message log, channel state and metadata"},
    {"pid-file", OPT_STR, F(pid_file), "", 0, 0, NULL,
     "file to write ternd's process id to once the data directory is locked; removed at a "
     "clean exit (empty: none)"},
    {"drain-timeout", OPT_DURATION, F(drain_timeout_ns), "30s", 0, 24 * 3600 * SEC, NULL,
     "a drain (the first SIGTERM, POST /v1/drain) waits this long at most for NSQ in-flight "
     "messages, /v1 long polls, live feeds and publishes to end before the process exits"},
    {"log-level", OPT_ENUM, F(log_level), "info", 0, 0, log_levels,
     "least severe log level written: debug, info, notice, warn, error (nsqd's fatal: error); "
     "reloaded on SIGHUP"},
    {"log-format", OPT_ENUM, F(log_format), "text", 0, 0, log_formats,
     "log line format: text, or json (one object a line: ts, level, src, msg); reloaded on "
     "SIGHUP"},
    {"segment-bytes", OPT_SIZE, F(segment_bytes), "64MiB", 64 * 1024, 1024 * 1024 * 1024, NULL,
     "size at which a partition's active segment file is sealed and a new one begun"},
    {"index-interval-bytes", OPT_SIZE, F(index_interval_bytes), "4KiB", 256, 1024 * 1024, NULL,
     "log bytes between two entries of a segment's sparse offset index"},
    {"max-msg-size", OPT_SIZE, F(max_msg_size), "1MiB", 1, 100 * 1024 * 1024, NULL,
     "largest message body accepted, in bytes"},
    {"durability", OPT_ENUM, F(durability), "durable", 0, 0, durabilities,
     "default publish durability: durable (ack after fdatasync), write_ack (ack after write, "
     "deliver after fdatasync), relaxed (ack and deliver after write)"},
    {"commit-max-requests", OPT_INT, F(commit_max_requests), "64", 1, 65536, NULL,
     "most publish requests gathered into one group commit"},
    {"commit-max-bytes", OPT_SIZE, F(commit_max_bytes), "8MiB", 4096, 256 * 1024 * 1024, NULL,
     "most record bytes gathered into one group commit"},
    {"commit-max-delay", OPT_DURATION, F(commit_max_delay_ns), "1ms", 0, 100 * MS, NULL,
     "longest a group commit waits for more requests after its first (0: no waiting, each round "
     "takes what is queued)"},
    {"commit-busy-poll", OPT_DURATION, F(commit_busy_poll_ns), "500us", 0, 10 * MS, NULL,
     "longest the event loop polls for a group commit to finish instead of sleeping, while "
     "commit-busy-poll-min publishes wait on it and commits take no longer (0: never)"},
    {"commit-busy-poll-min", OPT_INT, F(commit_busy_poll_min), "8", 1, 65536, NULL,
     "fewest publishes waiting on group commits that make the event loop busy-poll"},
    {"commit-busy-poll-cost", OPT_DURATION, F(commit_busy_poll_cost_ns), "2us", 0, 10 * MS, NULL,
     "most polling per waiting publish: the event loop busy-polls only while a group commit's "
     "average time divided by the publishes waiting on it is at most this (0: no limit)"},
    {"relaxed-sync-messages", OPT_INT, F(relaxed_sync_messages), "2500", 1, 10000000, NULL,
     "relaxed mode: fdatasync after this many unsynced messages"},
    {"relaxed-sync-bytes", OPT_SIZE, F(relaxed_sync_bytes), "8MiB", 4096, 1024 * 1024 * 1024, NULL,
     "relaxed mode: fdatasync after this many unsynced bytes"},
    {"relaxed-sync-interval", OPT_DURATION, F(relaxed_sync_interval_ns), "10ms", MS, 10 * SEC, NULL,
     "relaxed mode: fdatasync at most this long after an unsynced write"},
    {"wal-commit-max-records", OPT_INT, F(wal_commit_max_records), "1024", 1, 65536, NULL,
     "most channel WAL records (FIN, REQ, ...) gathered into one group commit"},
    {"wal-commit-max-delay", OPT_DURATION, F(wal_commit_max_delay_ns), "1ms", 0, 100 * MS, NULL,
     "longest a channel WAL group commit waits for more records after its first"},
    {"checkpoint-every", OPT_INT, F(checkpoint_every), "8192", 16, 1048576, NULL,
     "channel WAL records between two checkpoints of a channel's state"},
    {"disk-high-watermark", OPT_INT, F(disk_high_watermark), "90", 1, 100, NULL,
     "disk usage percent at or above which publishes are refused"},
    {"disk-low-watermark", OPT_INT, F(disk_low_watermark), "85", 0, 99, NULL,
     "disk usage percent below which publishes are accepted again"},
    {"disk-min-free-bytes", OPT_SIZE, F(disk_min_free_bytes), "256MiB", 0, INT64_MAX, NULL,
     "publishes are refused while fewer bytes than this are free"},
    {"disk-check-interval", OPT_DURATION, F(disk_check_interval_ns), "1s", 10 * MS, 60 * SEC, NULL,
     "how often free disk space is checked"},
    {"scrub-rate", OPT_SIZE, F(scrub_rate), "64MiB", 64 * 1024, 16LL * 1024 * 1024 * 1024, NULL,
     "bytes per second the background scrub of sealed segments reads"},
    {"scrub-interval", OPT_DURATION, F(scrub_interval_ns), "1h", 0, 30 * 24 * 3600 * SEC, NULL,
     "how often every sealed segment is scrubbed (CRCs and index checked; 0: only on request)"},
    {"scrub-quiet-period", OPT_DURATION, F(scrub_quiet_period_ns), "30s", 0, 24 * 3600 * SEC, NULL,
     "how long after start the first background scrub waits"},
    {"tcp-address", OPT_ADDR, F(tcp_address), "127.0.0.1:4150", 0, 0, NULL,
     "NSQ TCP listener, host:port (:port or 0.0.0.0:port: every interface; port 0 picks a "
     "free port)"},
    {"http-address", OPT_ADDR, F(http_address), "127.0.0.1:4151", 0, 0, NULL,
     "HTTP listener, host:port"},
    {"https-address", OPT_ADDR, F(https_address), "", 0, 0, NULL,
     "HTTPS listener serving the same API as http-address over TLS with tls-cert and tls-key, "
     "host:port (default: off)"},
    {"lookupd-tcp-address", OPT_ADDRS, F(lookupd_tcp_address), "", 0, 0, NULL,
     "nsqlookupd servers to register topics and channels with, host:port, comma-separated"},
    {"nsqlookupd-tcp-addresses", OPT_ADDRS, F(nsqlookupd_tcp_addresses), "", 0, 0, NULL,
     "the same, as nsqd's config file spells it ([\"host:port\", ...] accepted)"},
    {"metrics-address", OPT_ADDR, F(metrics_address), "", 0, 0, NULL,
     "a listener of its own for /metrics, host:port (default: on http-address)"},
    {"console", OPT_BOOL, F(console), "true", 0, 0, NULL,
     "serve the web console under /console/ on the HTTP listener (static files; the page calls "
     "the API with the credentials its user logs in with)"},
    {"websocket-enabled", OPT_BOOL, F(websocket_enabled), "false", 0, 0, NULL,
     "serve the live WebSocket feed of ttl_discard topics (GET /v1/ws/topics/{topic})"},
    {"websocket-max-connections", OPT_INT, F(websocket_max_connections), "1024", 1, 1000000, NULL,
     "live WebSocket connections the node keeps at once (more: 429 E_WS_CAPACITY)"},
    {"websocket-max-connections-per-topic", OPT_INT, F(websocket_max_connections_per_topic), "256",
     1, 1000000, NULL, "live WebSocket connections per topic"},
    {"websocket-frame-inflight-bytes", OPT_SIZE, F(websocket_frame_inflight_bytes), "128MiB",
     1024 * 1024, (int64_t)64 * 1024 * 1024 * 1024, NULL,
     "node-wide bytes of WebSocket frames queued and not yet written"},
    {"websocket-allowed-origins", OPT_STR, F(websocket_allowed_origins), "", 0, 0, NULL,
     "comma-separated exact origins (scheme://host[:port]) browsers may connect from"},
    {"websocket-heartbeat-interval", OPT_DURATION, F(websocket_heartbeat_interval_ns), "30s",
     100 * MS, 3600 * SEC, NULL,
     "the server pings this often; a peer silent for two intervals is closed"},
    {"websocket-auth-timeout", OPT_DURATION, F(websocket_auth_timeout_ns), "10s", 100 * MS,
     600 * SEC, NULL, "time for the auth control frame when AUTH is configured"},
    {"websocket-write-timeout", OPT_DURATION, F(websocket_write_timeout_ns), "10s", 100 * MS,
     600 * SEC, NULL,
     "a message frame must be written within this (or the message's remaining TTL)"},
    {"metrics-max-topics", OPT_INT, F(metrics_max_topics), "1000", 0, 1000000, NULL,
     "topics with their own /metrics series; the rest are only counted"},
    {"http-head-timeout", OPT_DURATION, F(http_head_timeout_ns), "5s", 100 * MS, 600 * SEC, NULL,
     "a request head must arrive within this from its first byte (408)"},
    {"http-body-timeout", OPT_DURATION, F(http_body_timeout_ns), "30s", 100 * MS, 3600 * SEC, NULL,
     "a request body may pause this long between bytes (408)"},
    {"http-idle-timeout", OPT_DURATION, F(http_idle_timeout_ns), "60s", 100 * MS, 24 * 3600 * SEC,
     NULL,
     "a connection that sends no request and takes no byte of its answer for this long is closed"},
    {"http-max-connections", OPT_INT, F(http_max_connections), "10000", 1, 1000000, NULL,
     "open HTTP connections at most; more wait in the kernel's accept backlog"},
    {"http-large-body-budget", OPT_SIZE, F(http_large_body_budget), "256MiB", 1024 * 1024,
     INT64_MAX, NULL, "node-wide bytes of HTTP request bodies over 1 MiB being read (503 beyond)"},
    {"broadcast-address", OPT_STR, F(broadcast_address), "", 0, 0, NULL,
     "address advertised to clients and lookupd (default: the host name; in a cluster, the host "
     "of advertise-address)"},
    {"node-id", OPT_INT, F(node_id), "0", 0, 1023, NULL,
     "this node's id in the cluster: with peers or join >= 1 and its Raft id; a lone node's Raft "
     "id "
     "is node-id + 1"},
    {"max-partitions", OPT_INT, F(max_partitions), "108", 1, 65535, NULL,
     "most partitions a topic created through /v1 may have"},
    {"http-max-consume-wait", OPT_DURATION, F(http_max_consume_wait_ns), "10s", 0, 60 * SEC, NULL,
     "longest wait a /v1 consume may ask for (longer ones are clamped)"},
    {"http-max-consumes-per-user", OPT_INT, F(http_max_consumes_per_user), "64", 0, 1000000, NULL,
     "concurrent /v1 consumes per user, a batch of N counting N (429 beyond; 0: no cap)"},
    {"http-max-produces-per-user", OPT_INT, F(http_max_produces_per_user), "0", 0, 1000000, NULL,
     "concurrent /v1 produces per user, a batch of N counting N (429 beyond; 0: no cap)"},
    /* backup */
    {"backup-session-ttl", OPT_DURATION, F(backup_session_ttl_ns), "10m", SEC, 24 * 3600 * SEC,
     NULL,
     "an online backup session (/v1/backup) not used for this long ends and unpins its files"},
    {"security-enabled", OPT_BOOL, F(security_enabled), "true", 0, 0, NULL,
     "require Basic auth (tern's own users) on /v1; false is a development mode"},
    {"raft-address", OPT_ADDR, F(raft_address), "127.0.0.1:4153", 0, 0, NULL,
     "the metastore's Raft address, recorded by Raft and dialled by peers: IPv4 or DNS name "
     "host:port; the listener binds what it resolves to at start (port 0 picks one, fine for a "
     "single node)"},
    {"raft-election-timeout", OPT_DURATION, F(raft_election_timeout_ns), "1s", 50 * MS, 60 * SEC,
     NULL, "Raft election timeout of the metastore"},
    {"max-connections", OPT_INT, F(max_connections), "10000", 1, 1000000, NULL,
     "open NSQ connections at most; more are accepted and closed at once"},
    {"max-body-size", OPT_SIZE, F(max_body_size), "64MiB", 1024, 256 * 1024 * 1024, NULL,
     "largest MPUB body"},
    {"max-rdy-count", OPT_INT, F(max_rdy_count), "2500", 1, 1000000, NULL,
     "largest RDY count a client may send"},
    {"msg-timeout", OPT_DURATION, F(msg_timeout_ns), "60s", SEC, 3600 * SEC, NULL,
     "default in-flight timeout of a delivered message"},
    {"max-msg-timeout", OPT_DURATION, F(max_msg_timeout_ns), "15m", SEC, 24 * 3600 * SEC, NULL,
     "largest msg_timeout a client may ask for in IDENTIFY"},
    {"max-req-timeout", OPT_DURATION, F(max_req_timeout_ns), "1h", 0, 7 * 24 * 3600 * SEC, NULL,
     "largest REQ delay (larger ones are clamped) and DPUB delay (larger ones are refused)"},
    {"max-heartbeat-interval", OPT_DURATION, F(max_heartbeat_interval_ns), "60s", SEC, 3600 * SEC,
     NULL, "largest heartbeat_interval a client may ask for"},
    {"max-output-buffer-size", OPT_SIZE, F(max_output_buffer_size), "64KiB", 64, 64 * 1024 * 1024,
     NULL, "largest output_buffer_size a client may ask for"},
    {"max-output-buffer-timeout", OPT_DURATION, F(max_output_buffer_timeout_ns), "30s", MS,
     3600 * SEC, NULL, "largest output_buffer_timeout a client may ask for"},
    {"deflate", OPT_BOOL, F(deflate), "true", 0, 0, NULL, "offer deflate compression"},
    {"max-deflate-level", OPT_INT, F(max_deflate_level), "6", 1, 9, NULL,
     "highest deflate level a client may ask for"},
    {"snappy", OPT_BOOL, F(snappy), "true", 0, 0, NULL, "offer snappy compression"},
    {"tls-cert", OPT_STR, F(tls_cert), "", 0, 0, NULL,
     "PEM certificate (chain) for TLS; enables the tls_v1 upgrade"},
    {"tls-key", OPT_STR, F(tls_key), "", 0, 0, NULL, "PEM private key of tls-cert"},
    {"tls-root-ca-file", OPT_STR, F(tls_root_ca_file), "", 0, 0, NULL,
     "PEM CA bundle that verifies client certificates"},
    {"tls-client-auth-policy", OPT_ENUM, F(tls_client_auth_policy), "", 0, 0, client_auth_policies,
     "ask clients for a certificate: require, or require-verify"},
    {"tls-required", OPT_ENUM, F(tls_required), "false", 0, 0, tls_required_values,
     "NSQ TCP clients must upgrade to TLS before any command but IDENTIFY"},
    {"tls-min-version", OPT_STR, F(tls_min_version), "tls1.2", 0, 0, NULL,
     "oldest TLS version accepted: tls1.0, tls1.1, tls1.2 or tls1.3"},
    /* Not given (""): derived from the two below (see settle_nsq_auth). */
    {"nsq-auth", OPT_ENUM, F(nsq_auth_given), "", 0, 0, nsq_auth_values,
     "how the NSQ doors (TCP 4150 and nsqd's HTTP endpoints) authenticate: open (nsqd's default: "
     "no AUTH), users (AUTH user:password against tern's users), external (an nsqauthd server, "
     "auth-http-address)"},
    {"nsq-auth-users", OPT_BOOL, F(nsq_auth_users), "false", 0, 0, NULL,
     "tern's own users serve NSQ AUTH (secret user:password; produce grants publish, consume "
     "grants subscribe) in place of an auth server"},
    {"auth-http-address", OPT_STR, F(auth_http_address), "", 0, 0, NULL,
     "nsqauthd-compatible servers for AUTH, host:port, comma-separated"},
    {"bootstrap-window", OPT_DURATION, F(bootstrap_window_ns), "90s", 0, 7 * 24 * 3600 * SEC, NULL,
     "a channel created after others starts this far back from the tail"},
    {"retention", OPT_DURATION, F(retention_ns), "168h", 0, INT64_MAX, NULL,
     "segments older than this are reclaimed even if unconsumed (0: no age limit)"},
    {"max-attempts", OPT_INT, F(max_attempts), "0", 0, 65535, NULL,
     "deliveries before a message moves to <topic>.<channel>.DLQ (0: never)"},
    {"ttl-discard-topics", OPT_STR, F(ttl_discard_topics), "", 0, 0, NULL,
     "topics whose messages expire: name=duration, comma-separated; a trailing * matches a "
     "prefix (e.g. metrics.*=5m)"},
    {"tail-cache-size", OPT_SIZE, F(tail_cache_bytes), "64MiB", 0, INT64_MAX, NULL,
     "recent message bodies kept in memory so fresh deliveries do not read the disk"},
    {"max-inflight-bytes", OPT_SIZE, F(max_inflight_bytes), "512MiB", 1024 * 1024, INT64_MAX, NULL,
     "node-wide bytes of delivered, unfinished messages"},
    {"max-inflight-messages", OPT_INT, F(max_inflight_messages), "262144", 1, 100000000, NULL,
     "node-wide count of delivered, unfinished messages"},
    {"max-ahead", OPT_INT, F(max_ahead), "262144", 1024, 16777216, NULL,
     "how far past a channel's oldest unfinished message it delivers"},
    {"gc-interval", OPT_DURATION, F(gc_interval_ns), "10s", 10 * MS, 3600 * SEC, NULL,
     "how often finished segments are reclaimed"},
    {"advertise-address", OPT_DIAL, F(advertise_address), "", 0, 0, NULL,
     "the API address other nodes and clients reach this node at: HTTP on TCP and node RPC on "
     "UDP, the same port number (default: http-address when it names one interface)"},
    {"peers", OPT_PEERS, F(peers_text), "", 0, 0, NULL,
     "the Raft addresses of the initial voters (ID@host:port, IPv4 or a DNS name resolved at each "
     "dial), this node included, the same on every initial node; an empty data directory "
     "bootstraps with exactly these voters"},
    {"join", OPT_ADDRS, F(join_text), "", 0, 0, NULL,
     "API addresses of existing members, for a node added later: it asks to be admitted until "
     "the leader adds it as a voter"},
    {"cluster-secret-file", OPT_STR, F(cluster_secret_file), "", 0, 0, NULL,
     "file holding the cluster secret (at least 32 bytes; a trailing newline is not part of it; "
     "readable by its owner only), or TERN_CLUSTER_SECRET; never a flag value"},
    {"raft-tls-cert", OPT_STR, F(raft_tls_cert), "", 0, 0, NULL,
     "PEM certificate this node presents on Raft connections (mutual TLS; with raft-tls-key and "
     "raft-tls-ca)"},
    {"raft-tls-key", OPT_STR, F(raft_tls_key), "", 0, 0, NULL, "PEM private key of raft-tls-cert"},
    {"raft-tls-ca", OPT_STR, F(raft_tls_ca), "", 0, 0, NULL,
     "PEM CA that signs every node's Raft certificate; peers' certificates are verified with it"},
    {"allow-plaintext-raft", OPT_BOOL, F(allow_plaintext_raft), "false", 0, 0, NULL,
     "with security on, let Raft on a non-loopback raft-address run without TLS (fence its "
     "port: Raft has no authentication of its own)"},
    {"allow-insecure-cluster", OPT_BOOL, F(allow_insecure_cluster), "false", 0, 0, NULL,
     "let a node with security-enabled=false take peers or join (its node RPC is "
     "unauthenticated without a cluster secret)"},
    {"cluster-heartbeat-interval", OPT_DURATION, F(cluster_heartbeat_interval_ns), "5s", 100 * MS,
     60 * SEC, NULL, "how often a member re-registers with the cluster"},
    {"cluster-dead-after", OPT_DURATION, F(cluster_dead_after_ns), "30s", 200 * MS, 3600 * SEC,
     NULL,
     "the leader marks a member dead after this long without its heartbeat (at least two "
     "heartbeat intervals)"},
    {"cluster-rpc-dial-timeout", OPT_DURATION, F(cluster_rpc_dial_timeout_ns), "1s", 10 * MS,
     60 * SEC, NULL, "longest a node RPC dial to a peer may take"},
    {"cluster-rpc-timeout", OPT_DURATION, F(cluster_rpc_timeout_ns), "5s", 100 * MS, 600 * SEC,
     NULL, "reply deadline of a node RPC whose caller has none of its own"},
    {"cluster-rpc-reply-write-timeout", OPT_DURATION, F(cluster_rpc_reply_write_timeout_ns), "5s",
     100 * MS, 600 * SEC, NULL,
     "a node RPC stream whose replies its caller has not acknowledged for this long (plus 1s per "
     "256 KiB outstanding) is reset"},
    {"cluster-join-interval", OPT_DURATION, F(cluster_join_interval_ns), "2s", 100 * MS, 60 * SEC,
     NULL, "a joining node asks the --join addresses to be admitted this often"},
    {"experimental-replication", OPT_BOOL, F(experimental_replication), "false", 0, 0, NULL,
     "deprecated, no effect: replicated topics are on by default (accepted so that older "
     "command lines and config files still start; a notice at start says it is ignored)"},
    {"default-replication-factor", OPT_INT, F(default_replication_factor), "3", 1, 5, NULL,
     "replicas of each partition of a new topic that does not say (NSQ-created, child and DLQ "
     "topics too); the metastore clamps it to the members alive when the topic is made (a "
     "lone node: 1)"},
    {"min-insync-replicas", OPT_INT, F(min_insync_replicas), "2", 1, 5, NULL,
     "in-sync replicas (the leader included) a write to a replicated partition needs before it "
     "is acknowledged, for topics that do not say; clamped to the topic's replication factor"},
    {"member-session-timeout", OPT_DURATION, F(member_session_timeout_ns), "6s", 500 * MS,
     600 * SEC, NULL,
     "the metastore leader ends the session of a member it has not heard from for this long: "
     "the partitions it led get new leaders from their in-sync replicas"},
    {"replica-lag-time-max", OPT_DURATION, F(replica_lag_time_max_ns), "10s", 100 * MS, 3600 * SEC,
     NULL,
     "a follower whose flushed copy of a replicated partition stays behind its leader's log end "
     "for this long leaves the in-sync replicas until it catches up"},
    {"move-rate", OPT_SIZE, F(move_rate), "64MiB", 0, 16LL * 1024 * 1024 * 1024, NULL,
     "bytes per second this node reads for followers catching up out of the in-sync replicas "
     "(partition moves' targets, restarted replicas), over all of them; in-sync followers are "
     "never throttled (0: unlimited)"},
    {"leader-rebalance-delay", OPT_DURATION, F(leader_rebalance_delay_ns), "30s", 1 * SEC,
     86400 * SEC, NULL,
     "a partition whose preferred replica has been in sync and live for this long while "
     "another leads it goes back to the preferred one"},
    {"replace-dead-after", OPT_DURATION, F(replace_dead_after_ns), "10m", 0, 30 * 86400 * SEC, NULL,
     "a member marked dead for this long has its replicas of replicated partitions re-created "
     "on the other members, from their surviving replicas (0: never)"},
    {"move-stall-timeout", OPT_DURATION, F(move_stall_timeout_ns), "10m", 0, 30 * 86400 * SEC, NULL,
     "a partition move whose target member, alive and outside the in-sync replicas, copies no "
     "record for this long fails, and the partition stays on its old replicas (0: never)"},
    {"remotes-allowed-ports", OPT_STR, F(remotes_allowed_ports), "443,4443", 0, 0, NULL,
     "ports a remote's https URL may name, comma-separated (docs/remotes.md)"},
    {"remotes-allowed-hosts", OPT_STR, F(remotes_allowed_hosts), "", 0, 0, NULL,
     "DNS names a remote's URL may name, comma-separated (default: any host the address "
     "guard lets through)"},
    {"remotes-allow-addresses", OPT_STR, F(remotes_allow_addresses), "", 0, 0, NULL,
     "CIDRs (IPv4 or IPv6, comma-separated) the remotes address guard lets through although "
     "they are refused by default: loopback, link-local, multicast, unspecified and cloud "
     "metadata addresses"},
    {"remotes-api-hop-encrypted", OPT_BOOL, F(remotes_api_hop_encrypted), "false", 0, 0, NULL,
     "the hop from your ingress to this node's plain HTTP listener is encrypted otherwise: "
     "accept a remote's password over it (else only over https-address; 412)"},
    {"auto-rebalance", OPT_BOOL, F(auto_rebalance), "true", 0, 0, NULL,
     "when a member joins (or comes back after its replicas were re-created elsewhere) holding "
     "fewer replicas than the others, spread replicas and preferred leaders over the members "
     "again (off: only POST /v1/cluster/rebalance does)"},
    {"max-moves-per-node", OPT_INT, F(max_moves_per_node), "2", 1, 64, NULL,
     "partition moves copying a replica that may take one off, or put one on, a member at once "
     "(decommission, self-healing and rebalance alike)"},
    {"max-repairs-per-node", OPT_INT, F(max_repairs_per_node), "2", 1, 64, NULL,
     "repairs of damaged replicas this node runs at once (each holds up to segment-bytes of "
     "copied records in memory), and repair reads it serves its followers at once; more wait "
     "their turn"},
};

/* The OPT_ADDR options: where each keeps its resolved address, and how it
 * resolves. */
static const struct {
    size_t text;   /* the option's offset */
    size_t listen; /* its tn_config_listen_t */
    bool optional; /* "" leaves this listener off */
    int flags;     /* TN_NETADDR_* */
} listeners[] = {
    {F(tcp_address), F(tcp_listen), false, 0},
    {F(http_address), F(http_listen), false, 0},
    {F(https_address), F(https_listen), true, 0},
    {F(metrics_address), F(metrics_listen), true, 0},
    /* The Raft listener binds IPv4 (the transport dials IPv4); a host name
     * is resolved once, here, for the listener, and is what Raft records
     * (raft_name, settle_cluster). */
    {F(raft_address), F(raft_listen), false, TN_NETADDR_IPV4},
};

const tn_config_ignored_t tn_config_nsqd_ignored[] = {
    {"mem-queue-size", "every message is written to disk and fsynced; the tail cache "
                       "(tail-cache-size) keeps recent ones in memory"},
    {"sync-every", "publishes are fsynced before OK by group commit (durability, "
                   "commit-max-requests)"},
    {"sync-timeout", "fsyncs are group-committed within commit-max-delay"},
    {"max-bytes-per-file", "segments roll at segment-bytes"},
    {"max-channel-consumers", "consumers per channel are bounded by max-connections"},
    {"min-output-buffer-timeout", "the lowest output_buffer_timeout is 25ms"},
    {"output-buffer-timeout", "clients choose output_buffer_timeout in IDENTIFY (default 250ms)"},
    {"e2e-processing-latency-percentile", "latency percentiles come with /stats and /metrics"},
    {"e2e-processing-latency-window-time", "latency percentiles come with /stats and /metrics"},
    {"statsd-address", "tern exports Prometheus /metrics instead of statsd"},
    {"statsd-prefix", "tern exports Prometheus /metrics instead of statsd"},
    {"statsd-interval", "tern exports Prometheus /metrics instead of statsd"},
    {"statsd-mem-stats", "tern exports Prometheus /metrics instead of statsd"},
    {"statsd-udp-packet-size", "tern exports Prometheus /metrics instead of statsd"},
    {"statsd-exclude-ephemeral", "tern exports Prometheus /metrics instead of statsd"},
    {"log-prefix", "log lines carry a timestamp, level and source location"},
    {"worker-id", "use node-id"},
    {"http-client-connect-timeout", "AUTH requests time out after 5s in all"},
    {"http-client-request-timeout", "AUTH requests time out after 5s in all"},
    {"auth-http-request-method", "AUTH requests are GETs, as nsqauthd expects"},
    {"topology-region", "IDENTIFY answers an empty topology_region"},
    {"topology-zone", "IDENTIFY answers an empty topology_zone"},
    {"broadcast-tcp-port", "clients are told the tcp-address port"},
    {"broadcast-http-port", "clients are told the http-address port"},
};
const size_t tn_config_nsqd_ignored_count = TN_ARRAY_SIZE(tn_config_nsqd_ignored);

static int find_ignored(const char *name, size_t len)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(tn_config_nsqd_ignored); i++) {
        const char *o = tn_config_nsqd_ignored[i].name;
        if (strlen(o) != len)
            continue;
        size_t k = 0;
        while (k < len && (name[k] == '_' ? '-' : name[k]) == o[k])
            k++;
        if (k == len)
            return (int)i;
    }
    return -1;
}

static void note_ignored(tn_config_t *cfg, int idx)
{
    for (uint32_t i = 0; i < cfg->nignored_seen; i++)
        if (cfg->ignored_seen[i] == (uint32_t)idx)
            return;
    if (cfg->nignored_seen < TN_ARRAY_SIZE(cfg->ignored_seen))
        cfg->ignored_seen[cfg->nignored_seen++] = (uint32_t)idx;
}

static const opt_t *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(options); i++) {
        const char *o = options[i].name;
        if (strlen(o) != len)
            continue;
        size_t k = 0;
        for (; k < len; k++) {
            char c = name[k] == '_' ? '-' : name[k];
            if (c != o[k])
                break;
        }
        if (k == len)
            return &options[i];
    }
    return NULL;
}

/* --- value parsers ------------------------------------------------------ */

static int parse_i64(const char *s, const char **end, int64_t *out)
{
    if (!isdigit((unsigned char)*s) && *s != '-')
        return TN_ECONFIG;
    errno = 0;
    char *e;
    long long v = strtoll(s, &e, 10);
    if (errno == ERANGE)
        return TN_ERANGE;
    if (e == s)
        return TN_ECONFIG;
    *end = e;
    *out = v;
    return 0;
}

int tn_parse_size(const char *s, int64_t *out)
{
    if (strcmp(s, "unlimited") == 0) {
        *out = INT64_MAX;
        return 0;
    }
    const char *e;
    int64_t v;
    int rc = parse_i64(s, &e, &v);
    if (rc != 0)
        return rc;
    if (v < 0)
        return TN_ERANGE;
    static const struct {
        const char *suffix;
        int64_t mul;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"K", 1024},
                 {"KB", 1024},
                 {"KiB", 1024},
                 {"M", 1024 * 1024},
                 {"MB", 1024 * 1024},
                 {"MiB", 1024 * 1024},
                 {"G", 1024 * 1024 * 1024},
                 {"GB", 1024 * 1024 * 1024},
                 {"GiB", 1024 * 1024 * 1024}};
    for (size_t i = 0; i < TN_ARRAY_SIZE(units); i++) {
        if (strcasecmp(e, units[i].suffix) == 0) {
            if (v > INT64_MAX / units[i].mul)
                return TN_ERANGE;
            *out = v * units[i].mul;
            return 0;
        }
    }
    return TN_ECONFIG;
}

int tn_parse_duration_ns(const char *s, int64_t *out)
{
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    if (strcmp(s, "unlimited") == 0) {
        *out = INT64_MAX;
        return 0;
    }
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {{"ns", 1},
                 {"us", 1000},
                 {"µs", 1000},
                 {"ms", 1000000},
                 {"s", 1000000000},
                 {"m", 60LL * 1000000000},
                 {"h", 3600LL * 1000000000}};
    int64_t total = 0;
    const char *p = s;
    if (*p == '\0')
        return TN_ECONFIG;
    while (*p != '\0') {
        const char *e;
        int64_t v;
        int rc = parse_i64(p, &e, &v);
        if (rc != 0)
            return rc;
        if (v < 0)
            return TN_ERANGE;
        /* A fraction, as Go's durations take ("1.5s"): up to 9 digits. */
        int64_t frac = 0, scale = 1;
        if (*e == '.') {
            e++;
            if (!isdigit((unsigned char)*e))
                return TN_ECONFIG;
            for (; isdigit((unsigned char)*e); e++) {
                if (scale < 1000000000) {
                    frac = frac * 10 + (*e - '0');
                    scale *= 10;
                }
            }
        }
        size_t best = 0;
        int64_t mul = 0;
        for (size_t i = 0; i < TN_ARRAY_SIZE(units); i++) {
            size_t n = strlen(units[i].unit);
            /* Longest match, so "ms" wins over "m". */
            if (n > best && strncmp(e, units[i].unit, n) == 0) {
                best = n;
                mul = units[i].ns;
            }
        }
        if (best == 0)
            return TN_ECONFIG;
        if (v > (INT64_MAX - total) / mul)
            return TN_ERANGE;
        total += v * mul;
        int64_t part = frac * (mul / scale) + (mul % scale != 0 ? frac * (mul % scale) / scale : 0);
        if (part > INT64_MAX - total)
            return TN_ERANGE;
        total += part;
        p = e + best;
    }
    *out = total;
    return 0;
}

int tn_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return TN_ECONFIG;
}

/* --- formatting values for messages and --help -------------------------- */

static void format_size(char *buf, size_t len, int64_t v)
{
    if (v == INT64_MAX)
        snprintf(buf, len, "unlimited");
    else if (v >= (int64_t)TN_GIB && v % (int64_t)TN_GIB == 0)
        snprintf(buf, len, "%" PRId64 "GiB", v / (int64_t)TN_GIB);
    else if (v >= (int64_t)TN_MIB && v % (int64_t)TN_MIB == 0)
        snprintf(buf, len, "%" PRId64 "MiB", v / (int64_t)TN_MIB);
    else if (v >= (int64_t)TN_KIB && v % (int64_t)TN_KIB == 0)
        snprintf(buf, len, "%" PRId64 "KiB", v / (int64_t)TN_KIB);
    else
        snprintf(buf, len, "%" PRId64, v);
}

/* A duration in the largest unit that holds it exactly (15m, 90s, 750us),
 * so --help and --print-config show it the same way and the printed
 * configuration loads back to the same value. */
static void format_duration(char *buf, size_t len, int64_t ns)
{
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {{"h", 3600 * SEC}, {"m", 60 * SEC}, {"s", SEC}, {"ms", MS}, {"us", 1000}};
    if (ns == INT64_MAX) {
        snprintf(buf, len, "unlimited");
        return;
    }
    if (ns == 0) {
        snprintf(buf, len, "0");
        return;
    }
    for (size_t i = 0; i < TN_ARRAY_SIZE(units); i++) {
        if (ns % units[i].ns == 0) {
            snprintf(buf, len, "%" PRId64 "%s", ns / units[i].ns, units[i].unit);
            return;
        }
    }
    snprintf(buf, len, "%" PRId64 "ns", ns);
}

static void format_range(const opt_t *o, char *buf, size_t len)
{
    char lo[32], hi[32];
    switch (o->type) {
    case OPT_INT:
        snprintf(buf, len, "%" PRId64 "..%" PRId64, o->min, o->max);
        break;
    case OPT_SIZE:
        format_size(lo, sizeof(lo), o->min);
        format_size(hi, sizeof(hi), o->max);
        snprintf(buf, len, "%s..%s", lo, hi);
        break;
    case OPT_DURATION:
        format_duration(lo, sizeof(lo), o->min);
        format_duration(hi, sizeof(hi), o->max);
        snprintf(buf, len, "%s..%s", lo, hi);
        break;
    case OPT_BOOL:
        snprintf(buf, len, "true or false");
        break;
    case OPT_ENUM: {
        size_t n = 0;
        buf[0] = '\0';
        for (const char *const *c = o->choices; *c != NULL; c++)
            n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s",
                                  c == o->choices ? "" : ", ", **c != '\0' ? *c : "\"\"");
        break;
    }
    case OPT_STR:
        snprintf(buf, len, "a string");
        break;
    case OPT_ADDR:
        snprintf(buf, len, "host:port");
        break;
    case OPT_ADDRS:
        snprintf(buf, len, "host:port, comma-separated");
        break;
    case OPT_DIAL:
        snprintf(buf, len, "host:port");
        break;
    case OPT_PEERS:
        snprintf(buf, len, "ID@host:port, comma-separated");
        break;
    }
}

static const char *type_word(opt_type_t t)
{
    switch (t) {
    case OPT_INT:
        return "an integer";
    case OPT_SIZE:
        return "a size (bytes, or with KiB/MiB/GiB)";
    case OPT_DURATION:
        return "a duration (e.g. 250ms, 1s)";
    case OPT_BOOL:
        return "true or false";
    case OPT_ENUM:
        return "one of";
    case OPT_STR:
        return "a string";
    case OPT_ADDR:
        return "host:port";
    case OPT_ADDRS:
        return "host:port, comma-separated";
    case OPT_DIAL:
        return "host:port";
    case OPT_PEERS:
        return "ID@host:port, comma-separated";
    }
    return "";
}

/* --- setting ------------------------------------------------------------ */

static bool is_text(opt_type_t t)
{
    return t == OPT_STR || t == OPT_ADDR || t == OPT_ADDRS || t == OPT_DIAL || t == OPT_PEERS;
}

static int set_text(tn_config_t *cfg, const opt_t *o, const char *value)
{
    char **field = (char **)((char *)cfg + o->offset);
    char *copy = tn_strdup(value);
    if (copy == NULL)
        return UV_ENOMEM;
    tn_free(*field);
    *field = copy;
    return 0;
}

static size_t listener_index(const opt_t *o)
{
    size_t i = 0;
    while (i + 1 < TN_ARRAY_SIZE(listeners) && listeners[i].text != o->offset)
        i++;
    TN_ASSERT(listeners[i].text == o->offset);
    return i;
}

/* A listener address: its syntax is checked here, an IP literal resolved
 * at once (that never blocks); a host name waits for resolve_listeners,
 * so only the value that wins is looked up. */
static int set_addr(tn_config_t *cfg, const opt_t *o, const char *value, const char *source,
                    char *err, size_t errlen)
{
    size_t li = listener_index(o);
    tn_config_listen_t next;
    memset(&next, 0, sizeof(next));
    snprintf(next.source, sizeof(next.source), "%s", source);
    if (value[0] != '\0' || !listeners[li].optional) {
        tn_hostport_t hp;
        char why[384];
        int rc = tn_netaddr_split(value, &hp, why, sizeof(why));
        if (rc == 0 && hp.numeric)
            rc = tn_netaddr_resolve(&hp, listeners[li].flags, &next.addr, why, sizeof(why));
        if (rc != 0) {
            tn_errbuf(err, errlen, "%s (%s): \"%s\": %s", o->name, source, value, why);
            return TN_ECONFIG;
        }
        next.pending = !hp.numeric;
    }
    next.addr.option = o->name;
    int rc = set_text(cfg, o, value);
    if (rc != 0)
        return rc;
    *(tn_config_listen_t *)((char *)cfg + listeners[li].listen) = next;
    return 0;
}

/* Look up the listeners' host names, once, for the values that won. */
static int resolve_listeners(tn_config_t *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(listeners); i++) {
        tn_config_listen_t *cl = (tn_config_listen_t *)((char *)cfg + listeners[i].listen);
        if (!cl->pending)
            continue;
        const char *text = *(char **)((char *)cfg + listeners[i].text);
        const char *option = cl->addr.option;
        tn_hostport_t hp;
        char why[384];
        int rc = tn_netaddr_split(text, &hp, why, sizeof(why));
        if (rc == 0)
            rc = tn_netaddr_resolve(&hp, listeners[i].flags, &cl->addr, why, sizeof(why));
        cl->addr.option = option;
        if (rc != 0) {
            tn_errbuf(err, errlen, "%s (%s): \"%s\": %s", option, cl->source, text, why);
            return TN_ECONFIG;
        }
        cl->pending = false;
    }
    return 0;
}

/* Call fn on each host:port of a server list: comma-separated, or nsqd's
 * config-file array of strings (["a:4160", "b:4160"]). Empty elements are
 * skipped. Returns the first nonzero fn returns. */
static int each_server(const char *list, int (*fn)(void *arg, const char *s, size_t n), void *arg)
{
    const char *p = list;
    const char *end = list + strlen(list);
    while (p < end && isspace((unsigned char)*p))
        p++;
    while (end > p && isspace((unsigned char)end[-1]))
        end--;
    bool array = false;
    if (end - p >= 2 && *p == '[' && end[-1] == ']') {
        /* An array, not an element "[::1]:4160": its first element is
         * quoted, or it has none. */
        const char *q = p + 1;
        while (q < end - 1 && isspace((unsigned char)*q))
            q++;
        if (q == end - 1 || *q == '"') {
            array = true;
            p = q;
            end--;
        }
    }
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma != NULL ? comma : end;
        const char *b = p;
        while (b < e && isspace((unsigned char)*b))
            b++;
        while (e > b && isspace((unsigned char)e[-1]))
            e--;
        if (array && e - b >= 2 && *b == '"' && e[-1] == '"') {
            b++;
            e--;
        }
        if (e > b) {
            int rc = fn(arg, b, (size_t)(e - b));
            if (rc != 0)
                return rc;
        }
        p = comma != NULL ? comma + 1 : end;
    }
    return 0;
}

typedef struct {
    char *why;
    size_t whylen;
} server_check_t;

static int check_server(void *arg, const char *s, size_t n)
{
    server_check_t *c = arg;
    char elem[TN_NETADDR_HOST_MAX + 16];
    tn_hostport_t hp;
    char why[384];
    if (n >= sizeof(elem)) {
        tn_errbuf(c->why, c->whylen, "\"%.40s...\": longer than %zu bytes", s, sizeof(elem) - 1);
        return TN_ECONFIG;
    }
    memcpy(elem, s, n);
    elem[n] = '\0';
    if (tn_netaddr_split(elem, &hp, why, sizeof(why)) != 0) {
        tn_errbuf(c->why, c->whylen, "\"%s\": %s", elem, why);
        return TN_ECONFIG;
    }
    if (hp.host[0] == '\0') {
        tn_errbuf(c->why, c->whylen, "\"%s\": missing host (a server to dial needs one)", elem);
        return TN_ECONFIG;
    }
    if (hp.port == 0) {
        tn_errbuf(c->why, c->whylen, "\"%s\": port 0 cannot be dialled", elem);
        return TN_ECONFIG;
    }
    return 0;
}

/* check_server, and the host is not every interface: an address another
 * node dials (advertise-address, a --peers entry). hp, when not NULL,
 * gets the split address. */
static int check_dial(server_check_t *c, const char *s, size_t n, tn_hostport_t *hp)
{
    int rc = check_server(c, s, n);
    if (rc != 0)
        return rc;
    char elem[TN_NETADDR_HOST_MAX + 16];
    memcpy(elem, s, n);
    elem[n] = '\0';
    tn_hostport_t split;
    tn_netaddr_t na;
    tn_netaddr_split(elem, &split, NULL, 0);
    if (split.numeric && tn_netaddr_resolve(&split, 0, &na, NULL, 0) == 0 && na.any) {
        tn_errbuf(c->why, c->whylen,
                  "\"%s\": every interface is not an address another node can dial", elem);
        return TN_ECONFIG;
    }
    if (hp != NULL)
        *hp = split;
    return 0;
}

/* The id of a --peers entry "ID@host:port" (1..1023, node-id's range),
 * and where its address starts. */
static int split_peer(server_check_t *c, const char *s, size_t n, uint64_t *id, size_t *at)
{
    const char *sep = memchr(s, '@', n);
    if (sep == NULL) {
        tn_errbuf(c->why, c->whylen, "\"%.*s\": expected ID@host:port", (int)TN_MIN(n, 300), s);
        return TN_ECONFIG;
    }
    uint64_t v = 0;
    size_t idlen = (size_t)(sep - s);
    bool ok = idlen > 0 && idlen <= 4;
    for (size_t i = 0; ok && i < idlen; i++) {
        ok = isdigit((unsigned char)s[i]) != 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (!ok || v < 1 || v > 1023) {
        tn_errbuf(c->why, c->whylen, "\"%.*s\": the id must be a node-id of 1..1023",
                  (int)TN_MIN(n, 300), s);
        return TN_ECONFIG;
    }
    *id = v;
    *at = idlen + 1;
    return 0;
}

static int check_peer(void *arg, const char *s, size_t n)
{
    server_check_t *c = arg;
    uint64_t id;
    size_t at;
    int rc = split_peer(c, s, n, &id, &at);
    return rc != 0 ? rc : check_dial(c, s + at, n - at, NULL);
}

typedef struct {
    char *out;
    size_t n;
} server_join_t;

static int join_server(void *arg, const char *s, size_t n)
{
    server_join_t *j = arg;
    if (j->n > 0)
        j->out[j->n++] = ',';
    memcpy(j->out + j->n, s, n);
    j->n += n;
    return 0;
}

char *tn_config_lookupds(const tn_config_t *cfg)
{
    /* The joined list is never longer than the two texts and a comma. */
    size_t cap = strlen(cfg->lookupd_tcp_address) + strlen(cfg->nsqlookupd_tcp_addresses) + 2;
    server_join_t j = {tn_malloc(cap), 0};
    if (j.out == NULL)
        return NULL;
    each_server(cfg->lookupd_tcp_address, join_server, &j);
    each_server(cfg->nsqlookupd_tcp_addresses, join_server, &j);
    j.out[j.n] = '\0';
    return j.out;
}

/* The flag or config-file spelling of the secret, refused: a flag value
 * shows in ps, and one file of its own (cluster-secret-file) can be kept
 * unreadable to others where a whole config file often is not. */
static bool refuse_secret_value(const char *name, size_t len, const char *source, char *err,
                                size_t errlen)
{
    static const char secret[] = "cluster-secret";
    if (len != sizeof(secret) - 1)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((name[i] == '_' ? '-' : name[i]) != secret[i])
            return false;
    tn_errbuf(err, errlen,
              "cluster-secret (%s) is not taken as a value (a flag shows in ps): set "
              "TERN_CLUSTER_SECRET or cluster-secret-file",
              source);
    return true;
}

static int set_opt(tn_config_t *cfg, const opt_t *o, const char *value, const char *source,
                   char *err, size_t errlen)
{
    char *field = (char *)cfg + o->offset;
    char range[256];
    format_range(o, range, sizeof(range));
    int64_t v = 0;
    int rc = 0;

    switch (o->type) {
    case OPT_STR:
        return set_text(cfg, o, value);
    case OPT_ADDR:
        return set_addr(cfg, o, value, source, err, errlen);
    case OPT_ADDRS: {
        char why[512];
        server_check_t chk = {why, sizeof(why)};
        if (each_server(value, check_server, &chk) != 0) {
            tn_errbuf(err, errlen, "%s (%s): %s", o->name, source, why);
            return TN_ECONFIG;
        }
        return set_text(cfg, o, value);
    }
    case OPT_DIAL:
    case OPT_PEERS: {
        char why[512];
        server_check_t chk = {why, sizeof(why)};
        int bad = o->type == OPT_PEERS ? each_server(value, check_peer, &chk)
                  : value[0] != '\0'   ? check_dial(&chk, value, strlen(value), NULL)
                                       : 0;
        if (bad != 0) {
            tn_errbuf(err, errlen, "%s (%s): %s", o->name, source, why);
            return TN_ECONFIG;
        }
        return set_text(cfg, o, value);
    }
    case OPT_BOOL: {
        bool b;
        if (tn_parse_bool(value, &b) != 0) {
            tn_errbuf(err, errlen, "%s (%s): \"%s\" is not %s", o->name, source, value,
                      type_word(o->type));
            return TN_ECONFIG;
        }
        *(bool *)field = b;
        return 0;
    }
    case OPT_ENUM:
        for (int i = 0; o->choices[i] != NULL; i++) {
            if (strcmp(value, o->choices[i]) == 0) {
                *(int *)field = i;
                return 0;
            }
        }
        if (value[0] == '\0' && o->def[0] == '\0' && o->choices[0] != NULL &&
            o->choices[0][0] != '\0') {
            /* An enum whose default is "not given" (-1): "" gives it back. */
            *(int *)field = -1;
            return 0;
        }
        tn_errbuf(err, errlen, "%s (%s): \"%s\" is not one of %s", o->name, source, value, range);
        return TN_ECONFIG;
    case OPT_INT: {
        const char *e;
        rc = parse_i64(value, &e, &v);
        if (rc == 0 && *e != '\0')
            rc = TN_ECONFIG;
        break;
    }
    case OPT_SIZE:
        rc = tn_parse_size(value, &v);
        break;
    case OPT_DURATION:
        rc = tn_parse_duration_ns(value, &v);
        break;
    }
    if (rc == TN_ECONFIG) {
        tn_errbuf(err, errlen, "%s (%s): \"%s\" is not %s; accepted range %s", o->name, source,
                  value, type_word(o->type), range);
        return TN_ECONFIG;
    }
    if (rc != 0 || v < o->min || v > o->max) {
        tn_errbuf(err, errlen, "%s (%s): \"%s\" is out of range; accepted range %s", o->name,
                  source, value, range);
        return TN_ECONFIG;
    }
    *(int64_t *)field = v;
    return 0;
}

int tn_config_set(tn_config_t *cfg, const char *name, const char *value, const char *source,
                  char *err, size_t errlen)
{
    const opt_t *o = find_opt(name, strlen(name));
    if (o == NULL && refuse_secret_value(name, strlen(name), source, err, errlen))
        return TN_ECONFIG;
    if (o == NULL) {
        int ig = find_ignored(name, strlen(name));
        if (ig >= 0) {
            note_ignored(cfg, ig);
            return 0;
        }
        tn_errbuf(err, errlen, "unknown option \"%s\" (%s); see --help", name, source);
        return TN_ECONFIG;
    }
    return set_opt(cfg, o, value, source, err, errlen);
}

int tn_config_init(tn_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < TN_ARRAY_SIZE(options); i++) {
        int rc = set_opt(cfg, &options[i], options[i].def, "default", NULL, 0);
        if (rc != 0) {
            tn_config_fini(cfg);
            return rc;
        }
    }
    return 0;
}

static void free_cluster_lists(tn_config_t *cfg)
{
    tn_free(cfg->peers);
    cfg->peers = NULL;
    cfg->npeers = 0;
    for (size_t i = 0; i < cfg->njoin; i++)
        tn_free(cfg->join[i]);
    tn_free(cfg->join);
    cfg->join = NULL;
    cfg->njoin = 0;
}

void tn_config_fini(tn_config_t *cfg)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(options); i++) {
        if (is_text(options[i].type)) {
            char **p = (char **)((char *)cfg + options[i].offset);
            tn_free(*p);
            *p = NULL;
        }
    }
    free_cluster_lists(cfg);
    OPENSSL_cleanse(cfg->cluster_secret, sizeof(cfg->cluster_secret));
    cfg->cluster_secret_len = 0;
}

bool tn_config_clustered(const tn_config_t *cfg)
{
    return cfg->npeers > 0 || cfg->njoin > 0;
}

uint64_t tn_config_raft_id(const tn_config_t *cfg)
{
    return tn_config_clustered(cfg) ? (uint64_t)cfg->node_id : (uint64_t)cfg->node_id + 1;
}

/* nsq-auth when given, else what nsq-auth-users and auth-http-address
 * imply. */
static int nsq_auth_of(const tn_config_t *cfg)
{
    if (cfg->nsq_auth_given >= 0)
        return cfg->nsq_auth_given;
    if (cfg->nsq_auth_users)
        return TN_NSQ_AUTH_USERS;
    if (cfg->auth_http_address[0] != '\0')
        return TN_NSQ_AUTH_EXTERNAL;
    return TN_NSQ_AUTH_OPEN;
}

/* A given nsq-auth must agree with the older two options, which also
 * exclude each other; users need tern's users to be on. */
static int check_nsq_auth(const tn_config_t *cfg, char *err, size_t errlen)
{
    const char *server = cfg->auth_http_address;
    bool has_server = server[0] != '\0';
    switch (cfg->nsq_auth_given) {
    case TN_NSQ_AUTH_OPEN:
        if (has_server) {
            tn_errbuf(err, errlen,
                      "nsq-auth=open contradicts auth-http-address=\"%s\" (an AUTH server means "
                      "nsq-auth=external); drop one of them",
                      server);
            return TN_ECONFIG;
        }
        if (cfg->nsq_auth_users) {
            tn_errbuf(err, errlen,
                      "nsq-auth=open contradicts nsq-auth-users=true (which means "
                      "nsq-auth=users); drop one of them");
            return TN_ECONFIG;
        }
        break;
    case TN_NSQ_AUTH_USERS:
        if (has_server) {
            tn_errbuf(err, errlen,
                      "nsq-auth=users contradicts auth-http-address=\"%s\" (users checks AUTH "
                      "against tern's own users, not an AUTH server); drop one of them",
                      server);
            return TN_ECONFIG;
        }
        break;
    case TN_NSQ_AUTH_EXTERNAL:
        if (cfg->nsq_auth_users) {
            tn_errbuf(err, errlen,
                      "nsq-auth=external contradicts nsq-auth-users=true (which means "
                      "nsq-auth=users); drop one of them");
            return TN_ECONFIG;
        }
        if (!has_server) {
            tn_errbuf(err, errlen,
                      "nsq-auth=external needs auth-http-address (the nsqauthd servers to ask)");
            return TN_ECONFIG;
        }
        break;
    default:
        if (cfg->nsq_auth_users && has_server) {
            tn_errbuf(err, errlen, "nsq-auth-users and auth-http-address exclude each other");
            return TN_ECONFIG;
        }
        break;
    }
    if (nsq_auth_of(cfg) == TN_NSQ_AUTH_USERS && !cfg->security_enabled) {
        tn_errbuf(err, errlen, "%s needs security-enabled (tern's users are off without it)",
                  cfg->nsq_auth_users ? "nsq-auth-users" : "nsq-auth=users");
        return TN_ECONFIG;
    }
    return 0;
}

/* --- the cluster options ------------------------------------------------ */

static const char *env_get(char **envp, const char *name);

typedef struct {
    tn_config_t *cfg;
    server_check_t chk;
} cluster_parse_t;

/* What Raft records for a named address: "name:port", the name in lower
 * case (DNS names are case-insensitive, Raft compares strings). 0, or
 * TN_ECONFIG with the reason in why. */
static int raft_name_of(const tn_hostport_t *hp, char *out, size_t len, char *why, size_t whylen)
{
    if (!tn_netaddr_dns_name(hp->host)) {
        tn_errbuf(why, whylen,
                  "host \"%s\" is neither an IPv4 address nor a DNS host name (letters, digits, "
                  "'-' and dots; IPv6 is not taken for Raft)",
                  hp->host);
        return TN_ECONFIG;
    }
    char lower[TN_NETADDR_HOST_MAX + 1];
    size_t i = 0;
    for (; i < sizeof(lower) - 1 && hp->host[i] != '\0'; i++)
        lower[i] = (char)tolower((unsigned char)hp->host[i]);
    lower[i] = '\0';
    int w = snprintf(out, len, "%s:%d", lower, hp->port);
    if (w < 0 || (size_t)w >= len) {
        tn_errbuf(why, whylen, "a Raft address is at most %d bytes", TN_CONFIG_RAFT_ADDR_MAX);
        return TN_ECONFIG;
    }
    return 0;
}

static int add_peer(void *arg, const char *s, size_t n)
{
    cluster_parse_t *p = arg;
    uint64_t id;
    size_t at;
    tn_hostport_t hp;
    int rc = split_peer(&p->chk, s, n, &id, &at);
    if (rc == 0)
        rc = check_dial(&p->chk, s + at, n - at, &hp);
    if (rc != 0)
        return rc;
    tn_config_peer_t *peer = &p->cfg->peers[p->cfg->npeers];
    char why[384];
    if (!hp.numeric) {
        /* A name is not looked up here: a peer not scheduled yet has none,
         * and the transport resolves it each time it dials. */
        if (raft_name_of(&hp, peer->name, sizeof(peer->name), why, sizeof(why)) != 0) {
            tn_errbuf(p->chk.why, p->chk.whylen, "\"%.*s\": %s", (int)TN_MIN(n, 300), s, why);
            return TN_ECONFIG;
        }
        peer->addr.option = "peers";
        peer->id = id;
        p->cfg->npeers++;
        return 0;
    }
    if (tn_netaddr_resolve(&hp, TN_NETADDR_IPV4, &peer->addr, why, sizeof(why)) != 0) {
        tn_errbuf(p->chk.why, p->chk.whylen, "\"%.*s\": %s", (int)TN_MIN(n, 300), s, why);
        return TN_ECONFIG;
    }
    snprintf(peer->name, sizeof(peer->name), "%s", peer->addr.name);
    if (peer->addr.any) {
        tn_errbuf(p->chk.why, p->chk.whylen,
                  "\"%.*s\": every interface is not an address another node can dial",
                  (int)TN_MIN(n, 300), s);
        return TN_ECONFIG;
    }
    peer->addr.option = "peers";
    peer->id = id;
    p->cfg->npeers++;
    return 0;
}

static int add_join(void *arg, const char *s, size_t n)
{
    cluster_parse_t *p = arg;
    int rc = check_dial(&p->chk, s, n, NULL);
    if (rc != 0)
        return rc;
    char *copy = tn_malloc(n + 1);
    if (copy == NULL)
        return UV_ENOMEM;
    memcpy(copy, s, n);
    copy[n] = '\0';
    p->cfg->join[p->cfg->njoin++] = copy;
    return 0;
}

/* Elements of a comma-separated list, at most. */
static size_t list_bound(const char *text)
{
    size_t n = 1;
    for (const char *c = text; *c != '\0'; c++)
        n += *c == ',';
    return n;
}

/* The secret from what was read, into cfg; what and source name it for
 * errors (the secret itself never goes into one). */
static int take_secret(tn_config_t *cfg, const uint8_t *b, size_t len, const char *what, char *err,
                       size_t errlen)
{
    if (len < TN_CONFIG_SECRET_MIN || len > TN_CONFIG_SECRET_MAX) {
        tn_errbuf(err, errlen,
                  "%s: the cluster secret is %s%zu bytes; it needs %d to %d (e.g. the 64 "
                  "characters of `openssl rand -hex 32`)",
                  what, len > TN_CONFIG_SECRET_MAX ? "over " : "",
                  TN_MIN(len, (size_t)TN_CONFIG_SECRET_MAX), TN_CONFIG_SECRET_MIN,
                  TN_CONFIG_SECRET_MAX);
        return TN_ECONFIG;
    }
    memcpy(cfg->cluster_secret, b, len);
    cfg->cluster_secret_len = len;
    return 0;
}

/* cluster-secret-file: a regular file that only its owner may read or
 * write (a secret readable by other local users lets any of them act as
 * a node, and node RPC skips authorization; ssh refuses a private key for
 * the same reason), whose one trailing newline ("\n" or "\r\n") is not
 * part of the secret. */
static int read_secret_file(tn_config_t *cfg, char *err, size_t errlen)
{
    const char *path = cfg->cluster_secret_file;
    char what[300];
    snprintf(what, sizeof(what), "cluster-secret-file \"%.200s\"", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tn_errbuf(err, errlen, "%s: cannot open: %s", what, strerror(errno));
        return TN_ECONFIG;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        tn_errbuf(err, errlen, "%s: %s", what, strerror(errno));
        rc = TN_ECONFIG;
    } else if (!S_ISREG(st.st_mode)) {
        tn_errbuf(err, errlen, "%s: not a regular file", what);
        rc = TN_ECONFIG;
    } else if ((st.st_mode & 077) != 0) {
        tn_errbuf(err, errlen,
                  "%s: mode %04o lets group or others at it; the secret must be readable by "
                  "its owner only (chmod 600)",
                  what, (unsigned)(st.st_mode & 07777));
        rc = TN_ECONFIG;
    }
    uint8_t buf[TN_CONFIG_SECRET_MAX + 3];
    size_t len = 0;
    while (rc == 0 && len < sizeof(buf)) {
        ssize_t r = read(fd, buf + len, sizeof(buf) - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            tn_errbuf(err, errlen, "%s: cannot read: %s", what, strerror(errno));
            rc = TN_ECONFIG;
        }
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (rc == 0) {
        if (len > 0 && buf[len - 1] == '\n')
            len--;
        if (len > 0 && buf[len - 1] == '\r' && len < sizeof(buf) - 1)
            len--;
        rc = take_secret(cfg, buf, len, what, err, errlen);
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    return rc;
}

/* After the listeners are resolved: --peers parsed and resolved, --join
 * split, the advertised address, the secret read. The cross-option rules
 * are check_cluster's. */
static int settle_cluster(tn_config_t *cfg, char **envp, char *err, size_t errlen)
{
    free_cluster_lists(cfg);
    char why[512];
    /* What Raft records for this node: a name stays a name (raft_listen
     * has what it resolved to, for the listener). */
    tn_hostport_t rhp;
    int nrc = tn_netaddr_split(cfg->raft_address, &rhp, why, sizeof(why));
    if (nrc == 0 && rhp.numeric)
        snprintf(cfg->raft_name, sizeof(cfg->raft_name), "%s", cfg->raft_listen.addr.name);
    else if (nrc == 0)
        nrc = raft_name_of(&rhp, cfg->raft_name, sizeof(cfg->raft_name), why, sizeof(why));
    if (nrc != 0) {
        tn_errbuf(err, errlen, "raft-address: \"%s\": %s", cfg->raft_address, why);
        return TN_ECONFIG;
    }
    cluster_parse_t p = {cfg, {why, sizeof(why)}};
    if (cfg->peers_text[0] != '\0') {
        cfg->peers = tn_calloc(list_bound(cfg->peers_text), sizeof(*cfg->peers));
        if (cfg->peers == NULL)
            return UV_ENOMEM;
        int rc = each_server(cfg->peers_text, add_peer, &p);
        if (rc == UV_ENOMEM)
            return rc;
        if (rc != 0) {
            tn_errbuf(err, errlen, "peers: %s", why);
            return TN_ECONFIG;
        }
    }
    if (cfg->join_text[0] != '\0') {
        cfg->join = tn_calloc(list_bound(cfg->join_text), sizeof(*cfg->join));
        if (cfg->join == NULL)
            return UV_ENOMEM;
        int rc = each_server(cfg->join_text, add_join, &p);
        if (rc == UV_ENOMEM)
            return rc;
        if (rc != 0) {
            tn_errbuf(err, errlen, "join: %s", why);
            return TN_ECONFIG;
        }
    }
    const tn_netaddr_t *http = &cfg->http_listen.addr;
    if (cfg->advertise_address[0] != '\0')
        snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", cfg->advertise_address);
    else if (!http->any && tn_netaddr_port(&http->sa) != 0)
        snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", http->name);
    else
        cfg->advertise[0] = '\0';

    OPENSSL_cleanse(cfg->cluster_secret, sizeof(cfg->cluster_secret));
    cfg->cluster_secret_len = 0;
    cfg->cluster_secret_generated = false;
    const char *env = env_get(envp, "TERN_CLUSTER_SECRET");
    if (env != NULL && cfg->cluster_secret_file[0] != '\0') {
        tn_errbuf(err, errlen,
                  "TERN_CLUSTER_SECRET and cluster-secret-file are both set; give the cluster "
                  "secret one way");
        return TN_ECONFIG;
    }
    if (env != NULL)
        return take_secret(cfg, (const uint8_t *)env, strlen(env), "TERN_CLUSTER_SECRET", err,
                           errlen);
    if (cfg->cluster_secret_file[0] != '\0')
        return read_secret_file(cfg, err, errlen);
    return 0;
}

/* Only processes on this host reach a loopback (IPv4: Raft's) address. */
static bool loopback4(const tn_netaddr_t *a)
{
    const struct sockaddr_storage *sa = &a->sa;
    if (sa->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    return false;
}

static bool raft_loopback(const tn_config_t *cfg)
{
    return loopback4(&cfg->raft_listen.addr);
}

static int check_readable(const char *option, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        tn_errbuf(err, errlen, "%s: cannot read \"%s\": %s", option, path, strerror(errno));
        return TN_ECONFIG;
    }
    fclose(f);
    return 0;
}

/* The rules of a node that takes peers or joins, and of node RPC and Raft
 * security (the "Starting a cluster"). */
static int check_cluster(const tn_config_t *cfg, char *err, size_t errlen)
{
    bool clustered = tn_config_clustered(cfg);
    const char *raft = cfg->raft_name;
    if (cfg->npeers > 0 && cfg->njoin > 0) {
        tn_errbuf(err, errlen,
                  "peers and join exclude each other: peers names the initial voters (on each of "
                  "them), join is for a node added later");
        return TN_ECONFIG;
    }
    if (clustered && cfg->node_id < 1) {
        tn_errbuf(err, errlen,
                  "node-id must be >= 1 with %s (it is this node's Raft id and member id; 0, the "
                  "default, is a lone node's)",
                  cfg->npeers > 0 ? "peers" : "join");
        return TN_ECONFIG;
    }
    if (clustered && cfg->raft_listen.addr.any) {
        tn_errbuf(err, errlen,
                  "raft-address %s is every interface; with peers or join it must be the one "
                  "address the other nodes dial",
                  raft);
        return TN_ECONFIG;
    }
    if (clustered && tn_netaddr_port(&cfg->raft_listen.addr.sa) == 0) {
        tn_errbuf(err, errlen,
                  "raft-address %s has port 0; with peers or join it needs a fixed port (the "
                  "other nodes dial it)",
                  raft);
        return TN_ECONFIG;
    }
    for (size_t i = 0; i < cfg->npeers; i++) {
        for (size_t j = 0; j < i; j++) {
            if (cfg->peers[i].id == cfg->peers[j].id) {
                tn_errbuf(err, errlen, "peers lists node %" PRIu64 " twice", cfg->peers[i].id);
                return TN_ECONFIG;
            }
            if (strcmp(cfg->peers[i].name, cfg->peers[j].name) == 0) {
                tn_errbuf(err, errlen,
                          "peers lists %s for nodes %" PRIu64 " and %" PRIu64
                          "; every voter needs its own Raft address",
                          cfg->peers[i].name, cfg->peers[j].id, cfg->peers[i].id);
                return TN_ECONFIG;
            }
        }
    }
    /* Among the IPv4 literals: a name's addresses are only known when the
     * transport dials it. */
    const tn_config_peer_t *literal = NULL;
    for (size_t i = 0; i < cfg->npeers; i++) {
        const tn_config_peer_t *pi = &cfg->peers[i];
        if (pi->addr.sa.ss_family != AF_INET)
            continue;
        if (literal != NULL && loopback4(&pi->addr) != loopback4(&literal->addr)) {
            tn_errbuf(err, errlen,
                      "peers mixes loopback and other IPv4 addresses (%s, %s): a node on another "
                      "host cannot reach a loopback Raft address, and Raft keeps the address a "
                      "node first started on",
                      literal->name, pi->name);
            return TN_ECONFIG;
        }
        literal = pi;
    }
    if (cfg->npeers > 0) {
        const tn_config_peer_t *self = NULL;
        for (size_t i = 0; i < cfg->npeers; i++)
            if (cfg->peers[i].id == (uint64_t)cfg->node_id)
                self = &cfg->peers[i];
        if (self == NULL) {
            tn_errbuf(err, errlen,
                      "peers has no entry for this node (node-id %" PRId64
                      "); list every initial voter, this one included, the same on each",
                      cfg->node_id);
            return TN_ECONFIG;
        }
        if (strcmp(self->name, raft) != 0) {
            tn_errbuf(err, errlen,
                      "peers lists this node (%" PRId64 ") at %s but raft-address is %s; they "
                      "must be the same address",
                      cfg->node_id, self->name, raft);
            return TN_ECONFIG;
        }
    }
    const tn_netaddr_t *http = &cfg->http_listen.addr;
    if (clustered && tn_netaddr_port(&http->sa) == 0) {
        tn_errbuf(err, errlen,
                  "http-address %s has port 0; with peers or join the API (and node RPC, on the "
                  "same port over UDP) needs a fixed port",
                  http->name);
        return TN_ECONFIG;
    }
    if (clustered && cfg->advertise[0] == '\0') {
        tn_errbuf(err, errlen,
                  "http-address %s is every interface: with peers or join give advertise-address, "
                  "the address other nodes and clients reach this node at",
                  http->name);
        return TN_ECONFIG;
    }
    if (cfg->security_enabled && clustered && cfg->cluster_secret_len == 0) {
        tn_errbuf(err, errlen,
                  "a node with %s and security-enabled needs the cluster secret: set "
                  "TERN_CLUSTER_SECRET or cluster-secret-file (the same on every node)",
                  cfg->npeers > 0 ? "peers" : "join");
        return TN_ECONFIG;
    }
    if (!cfg->security_enabled && clustered && !cfg->allow_insecure_cluster) {
        tn_errbuf(err, errlen,
                  "security-enabled=false with %s needs allow-insecure-cluster (node RPC "
                  "without a cluster secret is open to anyone who reaches the port)",
                  cfg->npeers > 0 ? "peers" : "join");
        return TN_ECONFIG;
    }
    const char *tls[3] = {cfg->raft_tls_cert, cfg->raft_tls_key, cfg->raft_tls_ca};
    static const char *const tls_names[3] = {"raft-tls-cert", "raft-tls-key", "raft-tls-ca"};
    int ntls = 0;
    for (int i = 0; i < 3; i++)
        ntls += tls[i][0] != '\0';
    if (ntls != 0 && ntls != 3) {
        int missing = tls[0][0] == '\0' ? 0 : tls[1][0] == '\0' ? 1 : 2;
        tn_errbuf(err, errlen,
                  "raft-tls-cert, raft-tls-key and raft-tls-ca go together: %s is "
                  "missing",
                  tls_names[missing]);
        return TN_ECONFIG;
    }
    for (int i = 0; i < ntls; i++) {
        int rc = check_readable(tls_names[i], tls[i], err, errlen);
        if (rc != 0)
            return rc;
    }
    if (cfg->security_enabled && ntls == 0 && !raft_loopback(cfg) && !cfg->allow_plaintext_raft) {
        tn_errbuf(err, errlen,
                  "raft-address %s is not a loopback address: with security-enabled give "
                  "raft-tls-cert, raft-tls-key and raft-tls-ca (Raft has no authentication of "
                  "its own), or allow-plaintext-raft with the Raft port fenced",
                  raft);
        return TN_ECONFIG;
    }
    if (cfg->cluster_dead_after_ns < 2 * cfg->cluster_heartbeat_interval_ns) {
        char d[32], h[32];
        format_duration(d, sizeof(d), cfg->cluster_dead_after_ns);
        format_duration(h, sizeof(h), cfg->cluster_heartbeat_interval_ns);
        tn_errbuf(err, errlen,
                  "cluster-dead-after (%s) must be at least twice cluster-heartbeat-interval "
                  "(%s), so one late heartbeat does not mark a member dead",
                  d, h);
        return TN_ECONFIG;
    }
    return 0;
}

/* A lone secured node with no secret: one for this process only, in
 * memory (never logged or written), so only this node can use its node
 * RPC. */
static int generate_secret(tn_config_t *cfg, char *err, size_t errlen)
{
    if (!cfg->security_enabled || cfg->cluster_secret_len != 0 || tn_config_clustered(cfg))
        return 0;
    if (RAND_bytes(cfg->cluster_secret, TN_CONFIG_SECRET_MIN) != 1) {
        tn_errbuf(err, errlen,
                  "cannot generate a per-process cluster secret (OpenSSL "
                  "RAND_bytes failed)");
        return TN_ECONFIG;
    }
    cfg->cluster_secret_len = TN_CONFIG_SECRET_MIN;
    cfg->cluster_secret_generated = true;
    return 0;
}

int tn_config_validate(const tn_config_t *cfg, char *err, size_t errlen)
{
    if (cfg->disk_low_watermark >= cfg->disk_high_watermark) {
        tn_errbuf(err, errlen,
                  "disk-low-watermark (%" PRId64 ") must be below disk-high-watermark (%" PRId64
                  ")",
                  cfg->disk_low_watermark, cfg->disk_high_watermark);
        return TN_ECONFIG;
    }
    if (cfg->data_path[0] == '\0') {
        tn_errbuf(err, errlen, "data-path must not be empty");
        return TN_ECONFIG;
    }
    if ((cfg->tls_cert[0] == '\0') != (cfg->tls_key[0] == '\0')) {
        tn_errbuf(err, errlen, "tls-cert and tls-key must be given together");
        return TN_ECONFIG;
    }
    int rc = check_nsq_auth(cfg, err, errlen);
    if (rc != 0)
        return rc;
    if (cfg->https_listen.addr.sa.ss_family != AF_UNSPEC && cfg->tls_cert[0] == '\0') {
        tn_errbuf(err, errlen, "https-address needs tls-cert and tls-key");
        return TN_ECONFIG;
    }
    if (cfg->tls_required != 0 && cfg->tls_cert[0] == '\0') {
        tn_errbuf(err, errlen, "tls-required needs tls-cert and tls-key");
        return TN_ECONFIG;
    }
    if (cfg->max_msg_size > cfg->commit_max_bytes) {
        tn_errbuf(err, errlen,
                  "max-msg-size (%" PRId64 ") must not exceed commit-max-bytes (%" PRId64 ")",
                  cfg->max_msg_size, cfg->commit_max_bytes);
        return TN_ECONFIG;
    }
    return check_cluster(cfg, err, errlen);
}

/* --- sources ------------------------------------------------------------ */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int load_file(tn_config_t *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        tn_errbuf(err, errlen, "config: cannot open \"%s\": %s", path, strerror(errno));
        return TN_ECONFIG;
    }
    char line[4096];
    int lineno = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            tn_errbuf(err, errlen, "config %s:%d: line longer than %zu bytes", path, lineno,
                      sizeof(line) - 1);
            rc = TN_ECONFIG;
            break;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            tn_errbuf(err, errlen, "config %s:%d: expected `name = value`", path, lineno);
            rc = TN_ECONFIG;
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        char *val = trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"') {
            char *close = strchr(val + 1, '"');
            if (close == NULL) {
                tn_errbuf(err, errlen, "config %s:%d: unterminated string", path, lineno);
                rc = TN_ECONFIG;
                break;
            }
            *close = '\0';
            val++;
        } else {
            char *hash = strchr(val, '#');
            if (hash != NULL) {
                *hash = '\0';
                val = trim(val);
            }
        }
        char source[512];
        snprintf(source, sizeof(source), "config %s:%d", path, lineno);
        if (strcmp(key, "config") == 0) {
            tn_errbuf(err, errlen, "%s: `config` cannot be set inside a config file", source);
            rc = TN_ECONFIG;
            break;
        }
        rc = tn_config_set(cfg, key, val, source, err, errlen);
    }
    fclose(f);
    return rc;
}

static int apply_env(tn_config_t *cfg, char **envp, char *err, size_t errlen)
{
    if (envp == NULL)
        return 0;
    for (char **e = envp; *e != NULL; e++) {
        if (strncmp(*e, "TERN_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (eq == NULL)
            continue;
        char name[128];
        size_t n = (size_t)(eq - (*e + 5));
        if (n == 0 || n >= sizeof(name))
            continue;
        for (size_t i = 0; i < n; i++)
            name[i] = (char)tolower((unsigned char)(*e)[5 + i]);
        name[n] = '\0';
        const opt_t *o = find_opt(name, n);
        if (o == NULL || strcmp(o->name, "config") == 0)
            continue; /* TERN_ variables of other tools, and TERN_CONFIG, done already */
        char source[160];
        snprintf(source, sizeof(source), "environment %.*s", (int)(eq - *e), *e);
        int rc = set_opt(cfg, o, eq + 1, source, err, errlen);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

/* Walk argv. With `apply` false only --config/--help/--version are noted;
 * with it true every option is set. */
static int walk_args(tn_config_t *cfg, int argc, char **argv, bool apply, const char **config,
                     char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cfg->want_help = true;
            continue;
        }
        if (strcmp(a, "--version") == 0) {
            cfg->want_version = true;
            continue;
        }
        if (strcmp(a, "--print-config") == 0) {
            cfg->want_print = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            tn_errbuf(err, errlen, "unexpected argument \"%s\"; options look like --name=value", a);
            return TN_ECONFIG;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const opt_t *o = find_opt(name, nlen);
        if (o == NULL && refuse_secret_value(name, nlen, "flag --cluster-secret", err, errlen))
            return TN_ECONFIG;
        if (o == NULL) {
            int ig = find_ignored(name, nlen);
            if (ig < 0) {
                tn_errbuf(err, errlen, "unknown option \"--%.*s\"; see --help", (int)nlen, name);
                return TN_ECONFIG;
            }
            /* An nsqd option with no use here: skip its value, if separate. */
            if (eq == NULL && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                i++;
            if (apply)
                note_ignored(cfg, ig);
            continue;
        }
        const char *value;
        if (eq != NULL) {
            value = eq + 1;
        } else if (o->type == OPT_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
            value = "true";
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            tn_errbuf(err, errlen, "option --%s needs a value", o->name);
            return TN_ECONFIG;
        }
        if (strcmp(o->name, "config") == 0) {
            *config = value;
            continue;
        }
        if (apply) {
            char source[128];
            snprintf(source, sizeof(source), "flag --%s", o->name);
            int rc = set_opt(cfg, o, value, source, err, errlen);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

int tn_config_load(tn_config_t *cfg, int argc, char **argv, char **envp, char *err, size_t errlen)
{
    const char *config = env_get(envp, "TERN_CONFIG");
    int rc = walk_args(cfg, argc, argv, false, &config, err, errlen);
    if (rc != 0)
        return rc;
    if (cfg->want_help || cfg->want_version)
        return 0;
    if (config != NULL && config[0] != '\0') {
        rc = set_opt(cfg, &options[0], config, "flag --config", err, errlen);
        if (rc != 0)
            return rc;
        rc = load_file(cfg, config, err, errlen);
        if (rc != 0)
            return rc;
    }
    rc = apply_env(cfg, envp, err, errlen);
    if (rc != 0)
        return rc;
    rc = walk_args(cfg, argc, argv, true, &config, err, errlen);
    if (rc != 0)
        return rc;
    rc = resolve_listeners(cfg, err, errlen);
    if (rc != 0)
        return rc;
    rc = settle_cluster(cfg, envp, err, errlen);
    if (rc == UV_ENOMEM)
        tn_errbuf(err, errlen, "out of memory reading the cluster options");
    if (rc != 0)
        return TN_ECONFIG;
    rc = tn_config_validate(cfg, err, errlen);
    if (rc != 0)
        return rc;
    rc = generate_secret(cfg, err, errlen);
    if (rc != 0)
        return rc;
    cfg->nsq_auth = nsq_auth_of(cfg);
    return 0;
}

/* A value as --print-config writes it and --help shows defaults: sizes in
 * KiB/MiB/GiB, durations in their largest exact unit, text unquoted. */
static void format_value(const opt_t *o, const tn_config_t *cfg, char *buf, size_t len)
{
    const char *field = (const char *)cfg + o->offset;
    switch (o->type) {
    case OPT_STR:
    case OPT_ADDR:
    case OPT_ADDRS:
    case OPT_DIAL:
    case OPT_PEERS:
        snprintf(buf, len, "%s", *(char *const *)field ? *(char *const *)field : "");
        break;
    case OPT_BOOL:
        snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
        break;
    case OPT_ENUM: {
        int v = *(const int *)field;
        snprintf(buf, len, "%s", v >= 0 ? o->choices[v] : "");
        break;
    }
    case OPT_INT:
        snprintf(buf, len, "%" PRId64, *(const int64_t *)field);
        break;
    case OPT_SIZE:
        format_size(buf, len, *(const int64_t *)field);
        break;
    case OPT_DURATION:
        format_duration(buf, len, *(const int64_t *)field);
        break;
    }
}

/* --help's areas, in order, each listing its options in the order shown;
 * every option is in exactly one (the unit test checks), and one left out
 * would still print, under "Other options". */
static const struct {
    const char *title;
    const char *names; /* space-separated */
} help_groups[] = {
    {"General", "config data-path log-level log-format pid-file drain-timeout"},
    {"Listeners and addresses",
     "tcp-address http-address https-address metrics-address broadcast-address "
     "lookupd-tcp-address nsqlookupd-tcp-addresses"},
    {"Storage", "durability segment-bytes index-interval-bytes commit-max-requests "
                "commit-max-bytes commit-max-delay commit-busy-poll commit-busy-poll-min "
                "commit-busy-poll-cost "
                "relaxed-sync-messages relaxed-sync-bytes relaxed-sync-interval "
                "wal-commit-max-records wal-commit-max-delay checkpoint-every "
                "disk-high-watermark disk-low-watermark disk-min-free-bytes "
                "disk-check-interval retention gc-interval scrub-rate scrub-interval "
                "scrub-quiet-period backup-session-ttl"},
    {"Delivery", "msg-timeout max-msg-timeout max-req-timeout bootstrap-window max-attempts "
                 "ttl-discard-topics max-ahead tail-cache-size"},
    {"NSQ protocol", "max-rdy-count max-heartbeat-interval max-output-buffer-size "
                     "max-output-buffer-timeout deflate max-deflate-level snappy"},
    {"HTTP", "http-head-timeout http-body-timeout http-idle-timeout http-max-consume-wait "
             "metrics-max-topics console"},
    {"WebSocket live feed", "websocket-enabled websocket-allowed-origins "
                            "websocket-max-connections websocket-max-connections-per-topic "
                            "websocket-frame-inflight-bytes websocket-heartbeat-interval "
                            "websocket-auth-timeout websocket-write-timeout"},
    {"Security", "security-enabled nsq-auth nsq-auth-users auth-http-address tls-cert tls-key "
                 "tls-root-ca-file tls-client-auth-policy tls-required tls-min-version"},
    {"Metastore", "raft-address node-id raft-election-timeout"},
    {"Cluster", "advertise-address peers join cluster-secret-file raft-tls-cert raft-tls-key "
                "raft-tls-ca allow-plaintext-raft allow-insecure-cluster "
                "cluster-heartbeat-interval cluster-dead-after cluster-rpc-dial-timeout "
                "cluster-rpc-timeout cluster-rpc-reply-write-timeout cluster-join-interval"},
    {"Replication", "experimental-replication default-replication-factor min-insync-replicas "
                    "member-session-timeout replica-lag-time-max move-rate leader-rebalance-delay "
                    "replace-dead-after move-stall-timeout auto-rebalance max-moves-per-node "
                    "max-repairs-per-node"},
    {"Limits", "max-msg-size max-body-size max-connections http-max-connections "
               "http-large-body-budget max-partitions http-max-consumes-per-user "
               "http-max-produces-per-user max-inflight-bytes max-inflight-messages"},
    {"Remotes", "remotes-allowed-ports remotes-allowed-hosts remotes-allow-addresses "
                "remotes-api-hop-encrypted"},
};

/* The help_groups entry holding name, or -1. */
static int group_of(const char *name)
{
    size_t n = strlen(name);
    for (size_t g = 0; g < TN_ARRAY_SIZE(help_groups); g++) {
        for (const char *p = help_groups[g].names; *p != '\0';) {
            size_t len = strcspn(p, " ");
            if (len == n && memcmp(p, name, n) == 0)
                return (int)g;
            p += len;
            p += strspn(p, " ");
        }
    }
    return -1;
}

/* text, indented, in lines of at most 79 columns (a longer word stands
 * alone). */
static void print_wrapped(FILE *out, const char *text, int indent)
{
    const int width = 79;
    int col = 0;
    const char *p = text;
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        size_t w = strcspn(p, " ");
        if (w == 0)
            break;
        if (col > indent && col + 1 + (int)w > width) {
            fputc('\n', out);
            col = 0;
        }
        if (col == 0)
            col = fprintf(out, "%*s", indent, "");
        else
            col += fprintf(out, " ");
        col += fprintf(out, "%.*s", (int)w, p);
        p += w;
    }
    fputc('\n', out);
}

static void print_option(FILE *out, const opt_t *o, const tn_config_t *defaults)
{
    char def[512], range[256];
    format_value(o, defaults, def, sizeof(def));
    if (def[0] == '\0')
        snprintf(def, sizeof(def), "(none)");
    format_range(o, range, sizeof(range));
    switch (o->type) {
    case OPT_STR:
    case OPT_BOOL:
        fprintf(out, "  --%s (default %s)\n", o->name, def);
        break;
    case OPT_ADDR:
    case OPT_ADDRS:
    case OPT_DIAL:
    case OPT_PEERS:
        fprintf(out, "  --%s %s (default %s)\n", o->name, range, def);
        break;
    case OPT_ENUM:
        fprintf(out, "  --%s (default %s; one of %s)\n", o->name, def, range);
        break;
    case OPT_INT:
    case OPT_SIZE:
    case OPT_DURATION:
        fprintf(out, "  --%s (default %s; range %s)\n", o->name, def, range);
        break;
    }
    print_wrapped(out, o->help, 8);
}

void tn_config_print_help(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [--name=value ...]\n\n"
            "Every option can also be set as TERN_<NAME> in the environment (dashes as\n"
            "underscores) or as `name = value` in a --config file. Precedence, lowest first:\n"
            "default < config file < environment < command line. Sizes take KiB, MiB or GiB;\n"
            "durations Go's units (500us, 250ms, 1.5s, 1m30s, 1h); `unlimited` is the\n"
            "largest of either.\n",
            prog);
    /* The defaults as --print-config would print them: from a
     * configuration holding nothing else. */
    tn_config_t defaults;
    if (tn_config_init(&defaults) != 0) {
        fprintf(out, "\n(out of memory: cannot list the options)\n");
        return;
    }
    for (size_t g = 0; g < TN_ARRAY_SIZE(help_groups); g++) {
        fprintf(out, "\n%s:\n", help_groups[g].title);
        for (const char *p = help_groups[g].names; *p != '\0';) {
            size_t len = strcspn(p, " ");
            const opt_t *o = find_opt(p, len);
            if (o != NULL)
                print_option(out, o, &defaults);
            p += len;
            p += strspn(p, " ");
        }
    }
    bool titled = false;
    for (size_t i = 0; i < TN_ARRAY_SIZE(options); i++) {
        if (group_of(options[i].name) >= 0)
            continue;
        if (!titled)
            fprintf(out, "\nOther options:\n");
        titled = true;
        print_option(out, &options[i], &defaults);
    }
    tn_config_fini(&defaults);

    fprintf(out, "\nnsqd options accepted with no effect (an nsqd command line or config file\n"
                 "starts ternd unchanged; each one given logs a warning at startup):\n");
    for (size_t i = 0; i < TN_ARRAY_SIZE(tn_config_nsqd_ignored); i++) {
        fprintf(out, "  --%s\n", tn_config_nsqd_ignored[i].name);
        print_wrapped(out, tn_config_nsqd_ignored[i].instead, 8);
    }

    fprintf(out, "\nEnvironment:\n"
                 "  TERN_<OPTION>\n");
    print_wrapped(out,
                  "any option above, upper case with dashes as underscores "
                  "(TERN_DATA_PATH=/var/lib/tern); above the config file, below the command line",
                  8);
    fprintf(out, "  TERN_CONFIG\n");
    print_wrapped(out, "the config file, as --config", 8);
    fprintf(out, "  TERN_CLUSTER_SECRET\n");
    print_wrapped(
        out,
        "the cluster secret, the same on every node (at least 32 bytes), as "
        "cluster-secret-file would hold it; there is no flag for it (a flag shows in ps). "
        "A lone node without one generates one for the process",
        8);
    fprintf(out, "  TERN_ADMIN_PASSWORD\n");
    print_wrapped(out,
                  "the password of the root user admin, used once, when a data directory's first "
                  "start creates that user (without it a generated one is written to "
                  "<data-path>/admin-password)",
                  8);

    fprintf(out, "\nCommands:\n"
                 "  --print-config\n        print the effective configuration and exit\n"
                 "  --help\n        print this help and exit\n"
                 "  --version\n        print the version and exit\n");
}

void tn_config_print(FILE *out, const tn_config_t *cfg)
{
    /* options[0] is --config itself, which a config file cannot set. */
    for (size_t i = 1; i < TN_ARRAY_SIZE(options); i++) {
        const opt_t *o = &options[i];
        char buf[4096];
        format_value(o, cfg, buf, sizeof(buf));
        if (is_text(o->type))
            fprintf(out, "%s = \"%s\"\n", o->name, buf);
        else
            fprintf(out, "%s = %s\n", o->name, buf);
    }
}

void tn_config_each_change(const tn_config_t *a, const tn_config_t *b,
                           void (*fn)(const char *name, void *arg), void *arg)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(options); i++) {
        const opt_t *o = &options[i];
        char va[4096], vb[4096];
        format_value(o, a, va, sizeof(va));
        format_value(o, b, vb, sizeof(vb));
        if (strcmp(va, vb) != 0)
            fn(o->name, arg);
    }
}

bool tn_config_env_is_setting(const char *entry)
{
    const char *eq = strchr(entry, '=');
    if (strncmp(entry, "TERN_", 5) != 0 || eq == NULL)
        return false;
    size_t n = (size_t)(eq - (entry + 5));
    char name[128];
    if (n == 0 || n >= sizeof(name))
        return false;
    for (size_t i = 0; i < n; i++)
        name[i] = (char)tolower((unsigned char)entry[5 + i]);
    name[n] = '\0';
    if (strcmp(name, "cluster_secret") == 0)
        return true;
    const opt_t *o = find_opt(name, n);
    return o != NULL && strcmp(o->name, "config") != 0;
}
