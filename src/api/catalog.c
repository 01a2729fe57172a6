/* The catalog. See catalog.h. */
#include "core/platform.h"

#include "api/catalog.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <stdio.h>
#include <string.h>

/* The per-partition in-flight and acked-ahead caps a topic gets when none
 * is given (the native API's defaults). */
#define TN_CATALOG_DEFAULT_CAP 1024

struct tn_catalog_s {
    tn_broker_t *broker;
    tn_meta_t *meta;
    tn_catalog_opts_t o;
};

/* One proposal, freed by its callback. */
typedef struct {
    tn_meta_req_t req;
    uint8_t type;
    char what[2 * TN_NAME_MAX + 2];
} prop_t;

static void on_recorded(tn_meta_req_t *req, int status)
{
    prop_t *p = req->data;
    if (status != 0 && status != UV_EEXIST && status != TN_ENOTFOUND && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "metastore: recording %s failed: %s", p->what, tn_strerror(status));
    tn_free(p);
}

static void propose(tn_catalog_t *c, const tn_meta_cmd_t *cmd, const char *what)
{
    prop_t *p = tn_calloc(1, sizeof(*p));
    if (p == NULL) {
        TN_LOG(TN_LOG_WARN, "metastore: out of memory recording %s", what);
        return;
    }
    p->req.data = p;
    snprintf(p->what, sizeof(p->what), "%s", what);
    int rc = tn_meta_propose(c->meta, &p->req, cmd, on_recorded);
    if (rc != 0) {
        if (rc != TN_ECLOSED)
            TN_LOG(TN_LOG_WARN, "metastore: cannot record %s: %s", what, tn_strerror(rc));
        tn_free(p);
    }
}

static bool ephemeral(const char *channel)
{
    static const char suffix[] = "#ephemeral";
    size_t n = strlen(channel), k = sizeof(suffix) - 1;
    return n >= k && strcmp(channel + n - k, suffix) == 0;
}

static void record_topic(tn_catalog_t *c, const tn_topic_t *t)
{
    if (tn_meta_topic_find(tn_meta_state(c->meta), t->name) != NULL)
        return;
    tn_meta_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.type = TN_MC_TOPIC_PUT;
    cmd.if_absent = true;
    snprintf(cmd.topic.name, sizeof(cmd.topic.name), "%s", t->name);
    cmd.topic.partitions = t->nparts;
    cmd.topic.retention_ms = c->o.retention_ms;
    cmd.topic.visibility_timeout_ms = c->o.visibility_timeout_ms;
    cmd.topic.max_inflight = TN_CATALOG_DEFAULT_CAP;
    cmd.topic.max_acked_ahead = TN_CATALOG_DEFAULT_CAP;
    cmd.topic.delivery_mode = t->ttl_ms > 0 ? TN_DELIVERY_TTL_DISCARD : TN_DELIVERY_RELIABLE;
    cmd.topic.ttl_ms = t->ttl_ms;
    cmd.topic.max_attempts = c->o.max_attempts;
    cmd.topic.durability = c->o.durability;
    cmd.topic.created_at_ms = tn_now_wall_ms();
    char what[TN_NAME_MAX + 8];
    snprintf(what, sizeof(what), "topic %s", t->name);
    propose(c, &cmd, what);
}

static void record_channel(tn_catalog_t *c, const char *topic, const char *channel, bool add)
{
    if (ephemeral(channel))
        return;
    if (add && tn_meta_channel_exists(tn_meta_state(c->meta), topic, channel))
        return;
    tn_meta_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.type = add ? TN_MC_CHANNEL_PUT : TN_MC_CHANNEL_DELETE;
    cmd.if_absent = add;
    snprintf(cmd.topic.name, sizeof(cmd.topic.name), "%s", topic);
    snprintf(cmd.channel, sizeof(cmd.channel), "%s", channel);
    char what[2 * TN_NAME_MAX + 16];
    snprintf(what, sizeof(what), "channel %s/%s", topic, channel);
    propose(c, &cmd, what);
}

static void on_event(void *arg, tn_broker_event_t ev, const char *topic, const char *channel)
{
    tn_catalog_t *c = arg;
    switch (ev) {
    case TN_EV_TOPIC_UP: {
        tn_topic_t *t = NULL;
        if (tn_broker_topic(c->broker, topic, strlen(topic), false, 0, NULL, &t) == 0)
            record_topic(c, t);
        break;
    }
    case TN_EV_TOPIC_DOWN: {
        tn_meta_cmd_t cmd;
        memset(&cmd, 0, sizeof(cmd));
        cmd.type = TN_MC_TOPIC_DELETE;
        snprintf(cmd.topic.name, sizeof(cmd.topic.name), "%s", topic);
        char what[TN_NAME_MAX + 16];
        snprintf(what, sizeof(what), "deletion of %s", topic);
        propose(c, &cmd, what);
        break;
    }
    case TN_EV_CHANNEL_UP:
        record_channel(c, topic, channel, true);
        break;
    case TN_EV_CHANNEL_DOWN:
        record_channel(c, topic, channel, false);
        break;
    }
}

int tn_catalog_start(tn_broker_t *b, tn_meta_t *m, const tn_catalog_opts_t *o, tn_catalog_t **out)
{
    tn_catalog_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->broker = b;
    c->meta = m;
    c->o = *o;
    int rc = tn_broker_listen(b, on_event, c);
    if (rc != 0) {
        tn_free(c);
        return rc;
    }
    /* What recovery found on disk. */
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->state != TN_OBJ_READY)
                continue;
            record_topic(c, t);
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
                if (ch->state == TN_OBJ_READY)
                    record_channel(c, t->name, ch->name, true);
            }
        }
    }
    *out = c;
    return 0;
}

void tn_catalog_stop(tn_catalog_t *c)
{
    if (c == NULL)
        return;
    tn_broker_unlisten(c->broker, on_event, c);
    tn_free(c);
}
