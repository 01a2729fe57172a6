/* A client's entry in nsqd's /stats, for every kind of consumer and
 * producer tern has (NSQ TCP connections, /v1 long polls), so that
 * nsqadmin and nsq_stat read the same keys from tern as from nsqd 1.3:
 * client_id ... user_agent, authed and the auth identity when authed,
 * pub_counts when the client has published, and the TLS fields (empty
 * strings and false without TLS).
 *
 * Threads: any; pure functions over the caller's data. */
#ifndef TN_PROTO_NSQ_CLIENTSTATS_H
#define TN_PROTO_NSQ_CLIENTSTATS_H

#include "core/platform.h"

#include "core/buf.h"
#include "proto/nsq/tls.h"
#include "queue/queue.h"

/* Messages a connection has published to one topic (a list per
 * connection, newest topic first). An entry is made when a publish is
 * taken and counts once it succeeds; one at 0 is not shown. */
typedef struct tn_nsq_pubcount_s {
    struct tn_nsq_pubcount_s *next;
    uint64_t count;
    char topic[]; /* NUL-terminated */
} tn_nsq_pubcount_t;

/* The entry for topic (copied in), creating it at count 0; NULL when out
 * of memory. */
tn_nsq_pubcount_t *tn_nsq_pubcount_get(tn_nsq_pubcount_t **list, const char *topic, size_t len);
void tn_nsq_pubcount_free(tn_nsq_pubcount_t *list);

/* nsqd's client states. */
enum { TN_NSQ_STATE_INIT = 0, TN_NSQ_STATE_SUBSCRIBED = 3, TN_NSQ_STATE_CLOSING = 4 };

/* What an entry says; every pointer is borrowed for the call, and a NULL
 * string is written as "". */
typedef struct {
    const char *client_id;
    const char *hostname;
    const char *remote_address;
    const char *user_agent;
    int state;
    uint64_t ready_count;
    uint64_t in_flight_count;
    uint64_t message_count;
    uint64_t finish_count;
    uint64_t requeue_count;
    int64_t connect_ts; /* wall clock, seconds */
    int sample_rate;
    bool deflate;
    bool snappy;
    bool authed;
    const char *auth_identity;
    const char *auth_identity_url;
    const tn_nsq_pubcount_t *pubs;
    const tn_tls_info_t *tls; /* NULL: not over TLS */
} tn_nsq_client_stats_t;

/* Append the entry as a JSON object. f (NULL: every topic) limits
 * pub_counts: to its topic, as nsqd's /stats?topic= does, and to those
 * it shows. 0 or UV_ENOMEM. */
int tn_nsq_client_stats_json(tn_buf_t *out, const tn_nsq_client_stats_t *s,
                             const tn_pubs_filter_t *f);

/* Whether pub, counted, passes f (NULL: every topic). */
bool tn_nsq_pubcount_shown(const tn_nsq_pubcount_t *pub, const tn_pubs_filter_t *f);

#endif
