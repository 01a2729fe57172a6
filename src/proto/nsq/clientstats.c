/* /stats client entries in nsqd's shape. See clientstats.h. */
#include "core/platform.h"

#include "proto/nsq/clientstats.h"

#include "core/alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

tn_nsq_pubcount_t *tn_nsq_pubcount_get(tn_nsq_pubcount_t **list, const char *topic, size_t len)
{
    for (tn_nsq_pubcount_t *p = *list; p != NULL; p = p->next)
        if (strlen(p->topic) == len && memcmp(p->topic, topic, len) == 0)
            return p;
    tn_nsq_pubcount_t *p = tn_malloc(sizeof(*p) + len + 1);
    if (p == NULL)
        return NULL;
    p->count = 0;
    memcpy(p->topic, topic, len);
    p->topic[len] = '\0';
    p->next = *list;
    *list = p;
    return p;
}

void tn_nsq_pubcount_free(tn_nsq_pubcount_t *list)
{
    while (list != NULL) {
        tn_nsq_pubcount_t *next = list->next;
        tn_free(list);
        list = next;
    }
}

static int str_field(tn_buf_t *out, const char *key, const char *value)
{
    int rc = tn_buf_append(out, "\"", 1);
    rc = rc ? rc : tn_buf_append(out, key, strlen(key));
    rc = rc ? rc : tn_buf_append(out, "\":\"", 3);
    rc = rc ? rc : tn_buf_json_escape(out, value != NULL ? value : "");
    rc = rc ? rc : tn_buf_append(out, "\",", 2);
    return rc;
}

bool tn_nsq_pubcount_shown(const tn_nsq_pubcount_t *pub, const tn_pubs_filter_t *f)
{
    if (pub->count == 0)
        return false; /* nsqd counts only what was published */
    if (f == NULL)
        return true;
    if (f->topic != NULL && f->topic[0] != '\0' && strcmp(f->topic, pub->topic) != 0)
        return false;
    return f->shown == NULL || f->shown(f->arg, pub->topic);
}

int tn_nsq_client_stats_json(tn_buf_t *out, const tn_nsq_client_stats_t *s,
                             const tn_pubs_filter_t *f)
{
    char line[512];
    int rc = tn_buf_append(out, "{", 1);
    rc = rc ? rc : str_field(out, "client_id", s->client_id);
    rc = rc ? rc : str_field(out, "hostname", s->hostname);
    rc = rc ? rc : str_field(out, "version", "V2");
    rc = rc ? rc : str_field(out, "remote_address", s->remote_address);
    int n = snprintf(line, sizeof(line),
                     "\"state\":%d,\"ready_count\":%" PRIu64 ",\"in_flight_count\":%" PRIu64
                     ",\"message_count\":%" PRIu64 ",\"finish_count\":%" PRIu64
                     ",\"requeue_count\":%" PRIu64 ",\"connect_ts\":%" PRId64
                     ",\"sample_rate\":%d,\"deflate\":%s,\"snappy\":%s,",
                     s->state, s->ready_count, s->in_flight_count, s->message_count,
                     s->finish_count, s->requeue_count, s->connect_ts, s->sample_rate,
                     s->deflate ? "true" : "false", s->snappy ? "true" : "false");
    rc = rc ? rc : tn_buf_append(out, line, (size_t)n);
    rc = rc ? rc : str_field(out, "user_agent", s->user_agent);
    /* nsqd leaves these out unless set (omitempty). */
    if (s->authed) {
        rc = rc ? rc : tn_buf_append(out, "\"authed\":true,", 14);
        if (s->auth_identity != NULL && s->auth_identity[0] != '\0')
            rc = rc ? rc : str_field(out, "auth_identity", s->auth_identity);
        if (s->auth_identity_url != NULL && s->auth_identity_url[0] != '\0')
            rc = rc ? rc : str_field(out, "auth_identity_url", s->auth_identity_url);
    }
    bool any = false;
    for (const tn_nsq_pubcount_t *p = s->pubs; rc == 0 && p != NULL; p = p->next) {
        if (!tn_nsq_pubcount_shown(p, f))
            continue;
        const char *open = any ? ",{\"topic\":\"" : "\"pub_counts\":[{\"topic\":\"";
        rc = tn_buf_append(out, open, strlen(open));
        rc = rc ? rc : tn_buf_json_escape(out, p->topic);
        n = snprintf(line, sizeof(line), "\",\"count\":%" PRIu64 "}", p->count);
        rc = rc ? rc : tn_buf_append(out, line, (size_t)n);
        any = true;
    }
    if (any)
        rc = rc ? rc : tn_buf_append(out, "],", 2);
    const char *tls = s->tls != NULL ? "\"tls\":true," : "\"tls\":false,";
    rc = rc ? rc : tn_buf_append(out, tls, strlen(tls));
    rc = rc ? rc : str_field(out, "tls_cipher_suite", s->tls != NULL ? s->tls->cipher : "");
    rc = rc ? rc : str_field(out, "tls_version", s->tls != NULL ? s->tls->version : "");
    rc = rc ? rc : str_field(out, "tls_negotiated_protocol", s->tls != NULL ? s->tls->alpn : "");
    /* Go has reported true for every TLS connection since 1.16. */
    n = snprintf(line, sizeof(line), "\"tls_negotiated_protocol_is_mutual\":%s}",
                 s->tls != NULL ? "true" : "false");
    rc = rc ? rc : tn_buf_append(out, line, (size_t)n);
    return rc;
}
