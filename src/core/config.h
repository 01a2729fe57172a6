/* Configuration: every setting of ternd, from four sources with one
 * precedence rule:
 *
 *     built-in default < config file < TERN_* environment < command line
 *
 * Each option has one name. On the command line it is `--name=value` or
 * `--name value`; in the environment TERN_NAME with dashes as underscores
 * (TERN_DATA_PATH); in the config file (--config or TERN_CONFIG) a flat
 * `name = value` line, with dashes or underscores (nsqd's file style),
 * `#` comments and optional double quotes. Every value is validated when it
 * is set, and cross-option rules after all sources are merged; an error
 * names the option, where the value came from and the accepted range.
 *
 * Value syntax: sizes take a plain byte count or a KiB/MiB/GiB suffix (K, M,
 * G also mean binary units); durations take Go-style units (`250ms`, `1.5s`,
 * `1m30s`, `500us`), or a bare 0; `unlimited` is the largest size or
 * duration, for the options whose range goes that far; booleans
 * true/false/1/0/yes/no/on/off.
 *
 * One setting has no option: the cluster secret comes from
 * TERN_CLUSTER_SECRET or the file cluster-secret-file names, never from a
 * flag (which shows in ps) or a config-file value. */
#ifndef TN_CORE_CONFIG_H
#define TN_CORE_CONFIG_H

#include "core/platform.h"

#include "core/netaddr.h"

#include <stdio.h>

typedef enum {
    TN_DURABILITY_DURABLE = 0, /* ack after fdatasync */
    TN_DURABILITY_WRITE_ACK,   /* ack after write; deliverable after fdatasync */
    TN_DURABILITY_RELAXED,     /* ack and deliver after write; background sync */
} tn_durability_t;

/* How the NSQ doors (TCP and nsqd's HTTP endpoints) authenticate: the
 * nsq-auth option, or what nsq-auth-users and auth-http-address imply. */
typedef enum {
    TN_NSQ_AUTH_OPEN = 0, /* nsqd's default: no AUTH */
    TN_NSQ_AUTH_USERS,    /* AUTH user:password against tern's users */
    TN_NSQ_AUTH_EXTERNAL, /* an nsqauthd server, auth-http-address */
} tn_nsq_auth_t;

/* The longest Raft address Raft records (the metastore's TN_META_ADDR_MAX). */
#define TN_CONFIG_RAFT_ADDR_MAX 256

/* One initial voter of --peers, as tn_config_load parsed it. */
typedef struct {
    uint64_t id; /* its Raft id (>= 1) */
    /* What Raft records and dials: the numeric "a.b.c.d:port" for an IPv4
     * literal, "name:port" (the name in lower case) for a DNS name, which
     * the transport resolves each time it dials. */
    char name[TN_CONFIG_RAFT_ADDR_MAX + 1];
    tn_netaddr_t addr; /* an IPv4 literal resolved; ss_family AF_UNSPEC for a name */
} tn_config_peer_t;

/* The cluster secret's bounds, in bytes. */
#define TN_CONFIG_SECRET_MIN 32
#define TN_CONFIG_SECRET_MAX 1024

/* A listener's address option after tn_config_load: addr is what to bind
 * (the option's text stays in its char * field). The rest is the
 * loader's bookkeeping. */
typedef struct {
    tn_netaddr_t addr; /* ss_family AF_UNSPEC: an optional listener left off */
    bool pending;      /* a host name, resolved at the end of tn_config_load */
    char source[256];  /* where the text came from, for errors */
} tn_config_listen_t;

typedef struct tn_config_s {
    char *config_file;
    char *data_path;
    char *pid_file;           /* "": none */
    int64_t drain_timeout_ns; /* drain-timeout: the bound of a graceful drain */
    int log_level;            /* TN_LOG_*, or 5 for nsqd's "fatal" (read as error) */
    int log_format;           /* TN_LOG_TEXT or TN_LOG_JSON */

    /* storage: partition log */
    int64_t segment_bytes;
    int64_t index_interval_bytes;
    int64_t max_msg_size;
    int durability;
    /* storage: publish group commit */
    int64_t commit_max_requests;
    int64_t commit_max_bytes;
    int64_t commit_max_delay_ns;
    int64_t commit_busy_poll_ns;
    int64_t commit_busy_poll_min;
    int64_t commit_busy_poll_cost_ns;
    /* storage: relaxed-mode background sync */
    int64_t relaxed_sync_messages;
    int64_t relaxed_sync_bytes;
    int64_t relaxed_sync_interval_ns;
    /* storage: channel WAL */
    int64_t wal_commit_max_records;
    int64_t wal_commit_max_delay_ns;
    int64_t checkpoint_every;
    /* storage: disk watermarks */
    int64_t disk_high_watermark;
    int64_t disk_low_watermark;
    int64_t disk_min_free_bytes;
    int64_t disk_check_interval_ns;
    /* storage: scrub */
    int64_t scrub_rate;
    int64_t scrub_interval_ns;
    int64_t scrub_quiet_period_ns;

    /* network */
    char *tcp_address;
    char *http_address;
    char *https_address; /* "" (off) or host:port */
    char *broadcast_address;
    int64_t http_max_connections;
    int64_t http_head_timeout_ns;
    int64_t http_body_timeout_ns;
    int64_t http_idle_timeout_ns;
    char *metrics_address;
    char *lookupd_tcp_address;
    char *nsqlookupd_tcp_addresses;
    int64_t metrics_max_topics;
    int64_t http_large_body_budget;
    int64_t node_id;
    char *raft_address;
    bool security_enabled;
    int64_t max_partitions;
    int64_t http_max_consume_wait_ns;
    int64_t http_max_consumes_per_user;
    int64_t http_max_produces_per_user;
    int64_t backup_session_ttl_ns; /* backup: an unused session ends after this */
    int64_t raft_election_timeout_ns;
    int64_t max_connections;
    /* NSQ protocol (nsqd's flags) */
    int64_t max_body_size;
    int64_t max_rdy_count;
    int64_t msg_timeout_ns;
    int64_t max_msg_timeout_ns;
    int64_t max_req_timeout_ns;
    int64_t max_heartbeat_interval_ns;
    int64_t max_output_buffer_size;
    int64_t max_output_buffer_timeout_ns;
    bool deflate;
    int64_t max_deflate_level;
    bool snappy;
    char *tls_cert;
    char *tls_key;
    char *tls_root_ca_file;
    int tls_client_auth_policy; /* 0 none, 1 require, 2 require-verify */
    int tls_required;           /* 0 false, 1 true, 2 tcp-https */
    char *tls_min_version;
    char *auth_http_address;
    bool nsq_auth_users;
    /* The effective choice (tn_nsq_auth_t), set by tn_config_load: nsq-auth
     * when given, else users with nsq-auth-users, external with an
     * auth-http-address, open otherwise. Read this, not the two options. */
    int nsq_auth;
    int nsq_auth_given; /* nsq-auth as given (tn_nsq_auth_t), or -1 */
    /* queue engine */
    int64_t bootstrap_window_ns;
    int64_t retention_ns;
    int64_t max_attempts;
    char *ttl_discard_topics;
    int64_t tail_cache_bytes;
    int64_t max_inflight_bytes;
    int64_t max_inflight_messages;
    int64_t max_ahead;
    int64_t gc_interval_ns;
    bool console; /* the web console under /console/ */
    /* live WebSocket feed */
    bool websocket_enabled;
    int64_t websocket_max_connections;
    int64_t websocket_max_connections_per_topic;
    int64_t websocket_frame_inflight_bytes;
    char *websocket_allowed_origins;
    int64_t websocket_heartbeat_interval_ns;
    int64_t websocket_auth_timeout_ns;
    int64_t websocket_write_timeout_ns;

    /* cluster (the option texts; tn_config_load settles the lists below) */
    char *advertise_address; /* "": derived, see advertise */
    char *peers_text;        /* --peers ID@HOST:PORT,... */
    char *join_text;         /* --join HOST:PORT,... */
    char *cluster_secret_file;
    char *raft_tls_cert;
    char *raft_tls_key;
    char *raft_tls_ca;
    bool allow_plaintext_raft;
    bool allow_insecure_cluster;
    int64_t cluster_heartbeat_interval_ns;
    int64_t cluster_dead_after_ns;
    int64_t cluster_rpc_dial_timeout_ns;
    int64_t cluster_rpc_timeout_ns;
    int64_t cluster_rpc_reply_write_timeout_ns;
    int64_t cluster_join_interval_ns;
    /* Replicated partitions (docs/replication.md).
     * experimental_replication is deprecated and gates nothing (replicated
     * topics are on by default); still parsed so that older command lines
     * and config files start, and ternd logs a notice when it is set. */
    bool experimental_replication;
    int64_t default_replication_factor;
    int64_t min_insync_replicas;
    int64_t member_session_timeout_ns;
    int64_t replica_lag_time_max_ns;
    int64_t move_rate; /* bytes/s; 0: unlimited */
    int64_t leader_rebalance_delay_ns;
    int64_t replace_dead_after_ns; /* 0: never */
    int64_t move_stall_timeout_ns; /* 0: never (cluster/movestall.h) */
    /* Remotes (docs/remotes.md): the address guard's lists, as text
     * (checked by ternd with proto/http/guard.h at start), and whether the
     * hop from an ingress to this node is encrypted. */
    char *remotes_allowed_ports;
    char *remotes_allowed_hosts;
    char *remotes_allow_addresses;
    bool remotes_api_hop_encrypted;
    bool auto_rebalance;          /* a member joining rebalances the replicas */
    int64_t max_moves_per_node;   /* replica-copying moves touching one member at once */
    int64_t max_repairs_per_node; /* repairs of damaged replicas (and reads served) at once */

    /* Settled by tn_config_load (owned; freed, the secret wiped, by
     * tn_config_fini). peers: the initial voters, this node among them
     * (npeers 0: none given); join: the API addresses of --join, each
     * host:port checked, resolved only when dialled. */
    tn_config_peer_t *peers;
    size_t npeers;
    char **join;
    size_t njoin;
    /* The API address other nodes reach this node at: advertise-address,
     * else http-address when it names one interface ("" for a lone node
     * whose HTTP listener is a wildcard or port 0). */
    char advertise[TN_NETADDR_HOST_MAX + 8];
    /* The cluster secret: TERN_CLUSTER_SECRET or cluster-secret-file, or
     * on a lone secured node one generated for this process (never
     * logged or written). Length 0: none (security off, open node RPC). */
    uint8_t cluster_secret[TN_CONFIG_SECRET_MAX];
    size_t cluster_secret_len;
    bool cluster_secret_generated;

    /* Listener addresses (tcp-address, http-address, metrics-address,
     * raft-address) as tn_config_load resolved them: host names are looked
     * up once, there, so no listener resolves anything on the loop. */
    tn_config_listen_t tcp_listen;
    tn_config_listen_t http_listen;
    tn_config_listen_t https_listen; /* AF_UNSPEC when https-address is off */
    tn_config_listen_t metrics_listen;
    tn_config_listen_t raft_listen; /* IPv4 only: what the Raft listener binds */
    /* raft-address as Raft records it (see tn_config_peer_t.name): a name
     * stays a name; raft_listen is what it resolved to at start. */
    char raft_name[TN_CONFIG_RAFT_ADDR_MAX + 1];

    /* nsqd options tern accepts but has no use for, as given (index into
     * tn_config_nsqd_ignored), for one startup warning each */
    uint32_t ignored_seen[64];
    uint32_t nignored_seen;

    /* set by tn_config_load when --help, --version or --print-config was given */
    bool want_help;
    bool want_version;
    bool want_print;
} tn_config_t;

/* Fill cfg with the built-in defaults. Call tn_config_fini when done. */
int tn_config_init(tn_config_t *cfg);
void tn_config_fini(tn_config_t *cfg);

/* Apply the config file, envp (NULL-terminated, may be NULL) and argv on
 * top of the current values, in precedence order, then run cross-option
 * checks. On failure returns TN_ECONFIG and writes one line naming the
 * option and the accepted range into err. Borrows every argument. */
int tn_config_load(tn_config_t *cfg, int argc, char **argv, char **envp, char *err, size_t errlen);

/* Set one option by name (dashes or underscores) from text. `source`
 * describes where the value came from, for the error message. */
int tn_config_set(tn_config_t *cfg, const char *name, const char *value, const char *source,
                  char *err, size_t errlen);

/* Cross-option checks (e.g. low watermark below high, nsq-auth against
 * nsq-auth-users and auth-http-address). */
int tn_config_validate(const tn_config_t *cfg, char *err, size_t errlen);

/* The nsqlookupd servers of lookupd-tcp-address and
 * nsqlookupd-tcp-addresses (either spelling: a comma-separated list, or
 * nsqd's config-file array ["host:port", ...]) as one comma-separated
 * list of host:port, each already checked by tn_netaddr_split. Returns a
 * string the caller frees with tn_free ("" for none), or NULL when out of
 * memory. */
char *tn_config_lookupds(const tn_config_t *cfg);

/* nsqd's options that mean nothing in tern: accepted (so an nsqd unit file
 * or config starts ternd unchanged) and reported once at startup with what
 * tern does instead. */
typedef struct {
    const char *name;
    const char *instead;
} tn_config_ignored_t;
extern const tn_config_ignored_t tn_config_nsqd_ignored[];
extern const size_t tn_config_nsqd_ignored_count;

/* A node of a cluster: --peers or --join was given. */
bool tn_config_clustered(const tn_config_t *cfg);

/* This node's Raft id: node-id in a cluster (where it must be >= 1 and is
 * the id --peers lists it under); node-id + 1 on a lone node, as before
 * clusters, so a data directory made then keeps its id. */
uint64_t tn_config_raft_id(const tn_config_t *cfg);

/* Print every option with its default and help text. */
void tn_config_print_help(FILE *out, const char *prog);

/* Print the effective configuration as a config file. */
void tn_config_print(FILE *out, const tn_config_t *cfg);

/* Call fn with the name of every option whose value differs between a
 * and b (as --print-config would write them), in the table's order. For
 * SIGHUP's report of what a reload changed. */
void tn_config_each_change(const tn_config_t *a, const tn_config_t *b,
                           void (*fn)(const char *name, void *arg), void *arg);

/* Whether an environment entry ("TERN_DATA_PATH=...") is one
 * tn_config_load reads: TERN_ and an option's name (TERN_CONFIG aside),
 * or TERN_CLUSTER_SECRET. */
bool tn_config_env_is_setting(const char *entry);

/* Parsers shared with other modules. Return 0 or TN_ERANGE/TN_ECONFIG. */
int tn_parse_size(const char *s, int64_t *out);
int tn_parse_duration_ns(const char *s, int64_t *out);
int tn_parse_bool(const char *s, bool *out);

#endif
