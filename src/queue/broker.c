/* The broker: the topic registry, startup load, the tail cache, disk
 * fetches, deadlines, pumping and GC. See queue.h for the design. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/fdroom.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "queue/internal.h"

#include <inttypes.h>
#include <string.h>

#define FETCH_MAX_RECORDS 256
#define FETCH_MAX_BYTES   (1024 * 1024)

static int parse_ttl_rules(tn_broker_opts_t *o, const char *spec, char *err, size_t errlen)
{
    const char *p = spec;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        char dur[64];
        tn_ttl_rule_t r;
        memset(&r, 0, sizeof(r));
        size_t nl = eq != NULL ? (size_t)(eq - p) : 0;
        if (nl > 0 && p[nl - 1] == '*') {
            r.prefix = true;
            nl--;
        }
        size_t dl = eq != NULL ? len - (size_t)(eq - p) - 1 : 0;
        int64_t ns = 0;
        if (eq == NULL || nl >= sizeof(r.name) || dl == 0 || dl >= sizeof(dur) ||
            (nl == 0 && !r.prefix)) {
            tn_errbuf(err, errlen,
                      "ttl-discard-topics: \"%.*s\" is not name=duration (e.g. clicks=10m)",
                      (int)len, p);
            return TN_ECONFIG;
        }
        memcpy(r.name, p, nl);
        r.name[nl] = '\0';
        memcpy(dur, eq + 1, dl);
        dur[dl] = '\0';
        if (tn_parse_duration_ns(dur, &ns) != 0 || ns < 1000000) {
            tn_errbuf(err, errlen, "ttl-discard-topics: \"%s\" is not a duration of 1ms or more",
                      dur);
            return TN_ECONFIG;
        }
        if (nl > 0 && !tn_name_valid(r.name, nl)) {
            tn_errbuf(err, errlen, "ttl-discard-topics: \"%s\" is not a valid topic name", r.name);
            return TN_ECONFIG;
        }
        r.ttl_ms = ns / 1000000;
        tn_ttl_rule_t *nr = tn_realloc(o->ttl_rules, (o->nttl_rules + 1) * sizeof(*nr));
        if (nr == NULL)
            return UV_ENOMEM;
        o->ttl_rules = nr;
        o->ttl_rules[o->nttl_rules++] = r;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return 0;
}

void tn_broker_opts_fini(tn_broker_opts_t *o)
{
    tn_free(o->ttl_rules);
    o->ttl_rules = NULL;
    o->nttl_rules = 0;
}

int64_t tn__ttl_for(const tn_broker_t *b, const char *name)
{
    for (uint32_t i = 0; i < b->opts.nttl_rules; i++) {
        const tn_ttl_rule_t *r = &b->opts.ttl_rules[i];
        if (r->prefix ? strncmp(name, r->name, strlen(r->name)) == 0 : strcmp(name, r->name) == 0)
            return r->ttl_ms;
    }
    return 0;
}

int tn_broker_opts_from_config(tn_broker_opts_t *o, const tn_config_t *cfg, char *err,
                               size_t errlen)
{
    memset(o, 0, sizeof(*o));
    o->default_partitions = 1;
    o->bootstrap_window_ms = cfg->bootstrap_window_ns / 1000000;
    o->retention_ns = cfg->retention_ns;
    o->max_attempts = (uint32_t)cfg->max_attempts;
    o->cache_bytes = (uint64_t)cfg->tail_cache_bytes;
    o->max_inflight_bytes = (uint64_t)cfg->max_inflight_bytes;
    o->max_inflight_msgs = (uint64_t)cfg->max_inflight_messages;
    o->max_ahead = (uint64_t)cfg->max_ahead;
    o->gc_interval_ms = cfg->gc_interval_ns / 1000000;
    o->mem_max_records = 10000;
    o->mem_max_bytes = 64 * 1024 * 1024;
    int rc = parse_ttl_rules(o, cfg->ttl_discard_topics, err, errlen);
    if (rc != 0)
        tn_broker_opts_fini(o);
    return rc;
}

/* --- disk fetches ------------------------------------------------------------ */

typedef struct {
    uint64_t offset;
    int64_t publish_ns;
    int64_t deliver_at_ms;
    tn_msg_t *body; /* NULL: no record at this offset, or a control record */
    tn_msg_t *key;  /* NULL: none */
    bool control;   /* a control record: never delivered */
} fetched_t;

struct tn_fetch_s {
    uv_work_t work;
    tn_part_t *part;
    uint64_t from;
    uint64_t until;
    uint64_t max_bytes;
    fetched_t recs[FETCH_MAX_RECORDS];
    uint32_t n;
    int err;
};

/* Worker thread: read records without touching loop-thread state. */
static void fetch_work(uv_work_t *w)
{
    tn_fetch_t *f = TN_CONTAINER_OF(w, tn_fetch_t, work);
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    uint64_t bytes = 0;
    for (uint64_t off = f->from; off < f->until && f->n < FETCH_MAX_RECORDS; off++) {
        tn_rec_t rec;
        tn_buf_reset(&scratch);
        int rc = tn_plog_read(f->part->plog, off, &scratch, &rec);
        fetched_t *r = &f->recs[f->n];
        r->offset = off;
        r->body = NULL;
        r->key = NULL;
        r->publish_ns = 0;
        r->deliver_at_ms = 0;
        r->control = false;
        if (rc == TN_EGAP || rc == TN_ENOTFOUND) {
            f->n++;
            continue;
        }
        if (rc != 0) {
            f->err = rc;
            break;
        }
        if ((rec.h.flags & TN_REC_F_CONTROL) != 0) {
            /* Skipped like an absent record, but settled as a SKIP. */
            r->control = true;
            r->publish_ns = rec.h.publish_ns;
            f->n++;
            continue;
        }
        r->body = tn_msg_new(rec.body, rec.h.body_len);
        if (r->body != NULL && rec.h.key_len > 0) {
            r->key = tn_msg_new(rec.key, rec.h.key_len);
            if (r->key == NULL) {
                tn_msg_unref(r->body);
                r->body = NULL;
            }
        }
        if (r->body == NULL) {
            f->err = UV_ENOMEM;
            break;
        }
        r->publish_ns = rec.h.publish_ns;
        r->deliver_at_ms = rec.h.deliver_at_ms;
        f->n++;
        bytes += rec.h.body_len;
        if (bytes >= f->max_bytes)
            break;
    }
    tn_buf_fini(&scratch);
}

static void fetch_done(uv_work_t *w, int status)
{
    tn_fetch_t *f = TN_CONTAINER_OF(w, tn_fetch_t, work);
    tn_part_t *p = f->part;
    tn_topic_t *t = p->topic;
    tn_broker_t *b = t->broker;
    (void)status;
    for (uint32_t i = 0; i < f->n; i++) {
        fetched_t *r = &f->recs[i];
        if (!b->closing && !t->deleted &&
            tn__cache_put(p, r->offset, r->publish_ns, r->deliver_at_ms, r->body, r->key,
                          r->control) == 0)
            continue;
        if (b->closing || t->deleted) {
            if (r->body != NULL)
                tn_msg_unref(r->body);
            if (r->key != NULL)
                tn_msg_unref(r->key);
        }
    }
    if (f->err != 0)
        TN_LOG_RL(TN_LOG_ERROR, 10000, "reading %s/%" PRIu32 " at offset %" PRIu64 ": %s", t->name,
                  p->index, f->from + f->n, tn_strerror(f->err));
    p->fetch = NULL;
    /* The read that the channels' scans waited for has ended: a scan that
     * still misses the cache asks again (and sets the flag again). Left
     * set, a consume that found nothing was held FETCH_GRACE_MS past its
     * wait for a read long done (api/consume.c), every time: a forwarded
     * probe (no wait, 500 ms) then always missed its RPC deadline. */
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (ch->state == TN_OBJ_READY && ch->parts != NULL && p->index < t->nparts &&
            ch->parts[p->index] != NULL)
            ch->parts[p->index]->waiting_fetch = false;
    tn__waiters_fire(&p->fetch_waiters, b->closing || t->deleted ? TN_ECLOSED : f->err);
    if (p->close_after_fetch != NULL)
        tn__part_close_deferred(p);
    t->busy--;
    tn_free(f);
    if (!b->closing && !t->deleted)
        tn__topic_pump_all(t);
    else if (t->deleted && t->busy == 0)
        tn__topic_free(t);
    tn__broker_work_done(b);
}

void tn__part_fetch(tn_part_t *p, uint64_t from)
{
    if (p->fetch != NULL)
        return;
    tn_broker_t *b = p->topic->broker;
    tn_fetch_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL)
        return; /* the next pump tries again */
    f->part = p;
    f->from = from;
    f->until = tn_plog_visible_next(p->plog);
    /* Half the cold cache at most, so a read never evicts its own first
     * records before the channel that asked for them takes them. */
    f->max_bytes = TN_MIN((uint64_t)FETCH_MAX_BYTES, b->opts.cache_bytes / 8);
    if (uv_queue_work(b->loop, &f->work, fetch_work, fetch_done) != 0) {
        tn_free(f);
        return;
    }
    p->fetch = f;
    p->topic->busy++;
    b->workers++;
}

int tn_part_record(tn_topic_t *t, uint32_t p, uint64_t offset, tn_waiter_t *w,
                   const tn_centry_t **out)
{
    if (p >= t->nparts)
        return UV_EINVAL;
    tn_part_t *part = t->parts[p];
    if (part->remote)
        return TN_EREMOTE;
    uint64_t end = TN_MIN(tn_plog_visible_next(part->plog), part->appended_next);
    if (offset >= end)
        return TN_ENOTFOUND;
    tn_plog_stats_t st;
    tn_plog_stats(part->plog, &st);
    if (offset < st.first_offset)
        return UV_ERANGE;
    tn_centry_t *e = tn__cache_get(part, offset);
    if (e != NULL) {
        *out = e;
        return e->body != NULL ? 0 : TN_EGAP;
    }
    tn__part_fetch(part, offset);
    if (w != NULL) {
        w->next = part->fetch_waiters;
        part->fetch_waiters = w;
    }
    if (part->fetch == NULL) {
        /* It could not start (out of memory): try again soon. */
        part->fetch_waiters = w != NULL ? w->next : part->fetch_waiters;
        return UV_ENOMEM;
    }
    return UV_EAGAIN;
}

/* --- topics registry ------------------------------------------------------- */

static uint64_t name_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

tn_topic_t *tn__topic_find(tn_broker_t *b, const char *name, size_t len)
{
    tn_topic_t *t = b->buckets[name_hash(name, len) & (b->nbuckets - 1)];
    for (; t != NULL; t = t->hnext)
        if (strlen(t->name) == len && memcmp(t->name, name, len) == 0)
            return t;
    return NULL;
}

static void rehash(tn_broker_t *b)
{
    size_t n = b->nbuckets * 2;
    tn_topic_t **nb = tn_calloc(n, sizeof(*nb));
    if (nb == NULL)
        return; /* chains just get longer */
    for (size_t i = 0; i < b->nbuckets; i++) {
        tn_topic_t *t = b->buckets[i];
        while (t != NULL) {
            tn_topic_t *next = t->hnext;
            size_t k = name_hash(t->name, strlen(t->name)) & (n - 1);
            t->hnext = nb[k];
            nb[k] = t;
            t = next;
        }
    }
    tn_free(b->buckets);
    b->buckets = nb;
    b->nbuckets = n;
}

void tn__topic_insert(tn_broker_t *b, tn_topic_t *t)
{
    if (b->ntopics + 1 > b->nbuckets)
        rehash(b);
    size_t k = name_hash(t->name, strlen(t->name)) & (b->nbuckets - 1);
    t->hnext = b->buckets[k];
    b->buckets[k] = t;
    b->ntopics++;
}

void tn__topic_unlink(tn_broker_t *b, tn_topic_t *t)
{
    tn_topic_t **pp = &b->buckets[name_hash(t->name, strlen(t->name)) & (b->nbuckets - 1)];
    while (*pp != NULL && *pp != t)
        pp = &(*pp)->hnext;
    if (*pp == t) {
        *pp = t->hnext;
        b->ntopics--;
    }
}

/* Creating a topic: open its partition logs on a worker thread. */
typedef struct topic_job_s topic_job_t;
struct topic_job_s {
    uv_work_t work;
    tn_topic_t *t;
    int64_t stamp; /* written before the first partition (0: none) */
    /* This node's pause of this very topic, kept in a directory with no
     * partition (tn__topic_pause_clamp, _take): the read's status, the file's
     * paused (-1: none, or not this topic's) and hold points (owned). */
    int pause_rc;
    int paused;
    uint64_t *holds;
    uint32_t nholds;
    int rc;
};

/* A topic directory holding no partition, found at the start, or what a
 * failed creation left (tn_broker_sweep_bare). */
struct tn_bare_s {
    uv_work_t work;
    tn_broker_t *b;
    bool removing;     /* its removal job is in flight */
    bool failed;       /* left by a failed creation, not found at the start */
    topic_job_t *held; /* a creation of the name, queued once the removal ends */
    int rc;
    tn_bare_t *next;
    char name[TN_NAME_MAX + 1];
};

static tn_bare_t **bare_find(tn_broker_t *b, const char *name, size_t len)
{
    tn_bare_t **pp = &b->bare;
    while (*pp != NULL && (strlen((*pp)->name) != len || memcmp((*pp)->name, name, len) != 0))
        pp = &(*pp)->next;
    return pp;
}

static void topic_create_work(uv_work_t *w)
{
    topic_job_t *j = TN_CONTAINER_OF(w, topic_job_t, work);
    tn_topic_t *t = j->t;
    const tn_broker_opts_t *o = &t->broker->opts;
    /* The stamp first: partition directories without it would be taken,
     * after a crash here, for whatever topic of the name is recorded by
     * then. (What the job reads of t was set before it was queued.) */
    bool local = false;
    for (uint32_t i = 0; i < t->nparts; i++)
        local |= !t->parts[i]->remote;
    /* Made here with no partition's files (so never loaded), unpaused (a
     * metastore record holds no pause), unless the directory's stamp says
     * it is this very topic's: its pause file is then this node's pause,
     * written while it held no copy, or kept after its copies left. A
     * directory stamped with another record is an earlier topic's of the
     * name, deleted while this node was down (its pause files, its
     * channels' stamps): it goes whole, as that deletion would have taken
     * it here. A pause file without a stamp beside it goes too. Both
     * before any partition is made, so that the next start does not take
     * them for this topic's. */
    j->paused = -1;
    int64_t had = 0;
    bool stamped = !t->memory && t->record_created_ms > 0 &&
                   tn_store_topic_stamp_read(t->broker->store, t->name, &had) == 0 && had != 0;
    if (stamped && had == t->record_created_ms)
        j->pause_rc =
            tn_store_topic_pause_read(t->broker->store, t->name, &j->paused, &j->holds, &j->nholds);
    else if (stamped)
        j->rc = tn_store_remove_topic(t->broker->store, t->name);
    else if (!t->memory)
        j->rc = tn_store_topic_pause_remove(t->broker->store, t->name);
    if (j->rc != 0)
        return;
    j->stamp = local ? tn_topic_stamp_due(t) : 0;
    if (j->stamp != 0 &&
        (j->rc = tn_store_topic_stamp_write(t->broker->store, t->name, j->stamp, true)) != 0)
        return;
    if (local && !t->memory)
        tn__place_test_delay(t);
    for (uint32_t i = 0; i < t->nparts; i++) {
        if (t->parts[i]->remote)
            continue; /* its log is on its owner */
        int rc = t->memory ? tn_plog_open_memory(t->broker->store, t->name, i, o->mem_max_records,
                                                 o->mem_max_bytes, &t->parts[i]->plog)
                           : tn_plog_open(t->broker->store, t->name, i, &t->parts[i]->plog);
        if (rc != 0) {
            j->rc = rc;
            return;
        }
    }
    if (j->pause_rc != 0 || j->paused == 1)
        tn__topic_pause_clamp(t, j->pause_rc, j->holds, j->nholds);
}

static void topic_create_done(uv_work_t *w, int status)
{
    topic_job_t *j = TN_CONTAINER_OF(w, topic_job_t, work);
    tn_topic_t *t = j->t;
    tn_broker_t *b = t->broker;
    int rc = j->rc != 0 ? j->rc : status;
    int64_t stamp = j->stamp;
    bool paused = rc == 0 && (j->pause_rc != 0 || j->paused == 1);
    int pause_rc = j->pause_rc;
    uint64_t *holds = j->holds;
    uint32_t nholds = j->nholds;
    tn_free(j);
    t->busy--;
    if (rc != 0) {
        TN_LOG_RL(TN_LOG_ERROR, 10000, "cannot create topic %s: %s", t->name, tn_strerror(rc));
        t->state = TN_OBJ_FAILED;
        t->err = rc;
        tn__topic_unlink(b, t);
        tn__waiters_fire(&t->waiters, rc);
        /* The logs it did open let their descriptors go now, not when the
         * store closes (a creation refused for descriptors would keep
         * them); what it made on disk is left to tn_broker_sweep_bare, as
         * a directory the start found holding no topic: a creation of the
         * name again takes it, or a sweep removes it once its record is
         * gone (before, it stayed until the next start). */
        for (uint32_t i = 0; i < t->nparts; i++) {
            tn_part_t *p = t->parts[i];
            if (p->plog != NULL && !p->remote) {
                tn_plog_close(p->plog, NULL);
                p->plog = NULL;
            }
        }
        if (!t->memory && *bare_find(b, t->name, strlen(t->name)) == NULL) {
            tn_bare_t *x = tn_calloc(1, sizeof(*x));
            if (x != NULL) {
                snprintf(x->name, sizeof(x->name), "%s", t->name);
                x->failed = true;
                x->next = b->bare;
                b->bare = x;
            }
        }
        if (!t->memory)
            tn__broker_event(b, TN_EV_TOPIC_FAILED, t->name, NULL);
        tn__topic_free(t);
    } else {
        if (stamp != 0)
            tn_topic_stamped(t, stamp);
        uint32_t remote = 0;
        for (uint32_t i = 0; i < t->nparts; i++) {
            if (t->parts[i]->remote) {
                remote++;
                continue;
            }
            tn__part_ready(t->parts[i]);
            if (t->durability >= 0)
                tn_plog_set_durability(t->parts[i]->plog, t->durability);
        }
        if (paused)
            tn__topic_pause_take(t, pause_rc, holds, nholds);
        t->state = TN_OBJ_READY;
        if (remote == 0)
            TN_LOG(TN_LOG_INFO, "topic %s created with %" PRIu32 " partition(s)", t->name,
                   t->nparts);
        else
            TN_LOG(TN_LOG_INFO,
                   "topic %s created with %" PRIu32 " partition(s), %" PRIu32
                   " of them on other nodes",
                   t->name, t->nparts, remote);
        tn__broker_event(b, TN_EV_TOPIC_UP, t->name, NULL);
        tn__waiters_fire(&t->waiters, 0);
        tn__topic_place_resume(t);
    }
    tn_free(holds);
    tn__broker_work_done(b);
}

int tn_broker_topic(tn_broker_t *b, const char *name, size_t len, bool create, uint32_t nparts,
                    tn_waiter_t *w, tn_topic_t **out)
{
    if (b->closing)
        return TN_ECLOSED;
    tn_topic_t *t = tn__topic_find(b, name, len);
    if (t != NULL) {
        if (t->state == TN_OBJ_READY) {
            *out = t;
            return 0;
        }
        if (t->state == TN_OBJ_FAILED)
            return t->err;
        if (t->state == TN_OBJ_DELETING)
            return UV_EBUSY;
        if (w != NULL) {
            w->next = t->waiters;
            t->waiters = w;
        }
        return UV_EAGAIN;
    }
    if (!create)
        return TN_ENOTFOUND;
    if (!tn_name_valid_any(name, len))
        return UV_EINVAL;
    /* A durable topic's partitions are files: its creation stops short of
     * the descriptor limit, which the partitions there need to roll. */
    if (!tn_name_ephemeral(name, len) && !tn_fd_room(TN_FD_CREATE))
        return UV_EMFILE;
    t = tn__topic_new(b, name, len, nparts != 0 ? nparts : b->opts.default_partitions);
    if (t == NULL)
        return UV_ENOMEM;
    topic_job_t *j = tn_calloc(1, sizeof(*j));
    if (j == NULL) {
        tn__topic_free(t);
        return UV_ENOMEM;
    }
    j->t = t;
    tn_bare_t **bp = bare_find(b, name, len);
    int rc = 0;
    if (*bp != NULL && (*bp)->removing) {
        (*bp)->held = j; /* its directory is being removed: bare_done queues it */
    } else {
        if (*bp != NULL) {
            /* The creation keeps the directory or removes it, by its stamp. */
            tn_bare_t *x = *bp;
            *bp = x->next;
            tn_free(x);
        }
        rc = tn__gate_then_queue(b, &j->work, topic_create_work, topic_create_done, t, NULL);
    }
    if (rc != 0) {
        tn_free(j);
        tn__topic_free(t);
        return rc;
    }
    t->busy++;
    b->workers++;
    tn__topic_insert(b, t);
    if (w != NULL) {
        w->next = NULL;
        t->waiters = w;
    }
    return UV_EAGAIN;
}

static void bare_work(uv_work_t *w)
{
    tn_bare_t *x = TN_CONTAINER_OF(w, tn_bare_t, work);
    x->rc = tn_store_remove_topic(x->b->store, x->name);
}

static void bare_done(uv_work_t *w, int status)
{
    tn_bare_t *x = TN_CONTAINER_OF(w, tn_bare_t, work);
    tn_broker_t *b = x->b;
    int rc = x->rc != 0 ? x->rc : status;
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR,
               "topic %s: removing its directory here, which holds no partition and which the "
               "metastore no longer records, failed: %s",
               x->name, tn_strerror(rc));
    else if (x->failed)
        TN_LOG(TN_LOG_NOTICE,
               "topic %s: what its failed creation left here is moved to trash: the metastore no "
               "longer records the topic",
               x->name);
    else
        TN_LOG(TN_LOG_NOTICE,
               "topic %s: its directory here (a pause's files, no partition) is moved to trash: "
               "the metastore no longer records the topic (deleted while this node was down)",
               x->name);
    tn_bare_t **pp = bare_find(b, x->name, strlen(x->name));
    *pp = x->next;
    topic_job_t *j = x->held;
    tn_free(x);
    if (j != NULL) {
        int qrc = b->closing ? TN_ECLOSED
                             : tn__gate_then_queue(b, &j->work, topic_create_work,
                                                   topic_create_done, j->t, NULL);
        if (qrc != 0)
            topic_create_done(&j->work, qrc); /* the creation fails as a queued one would */
    }
    tn__broker_work_done(b);
}

void tn_broker_each_local_part(tn_broker_t *b, void (*fn)(tn_topic_t *t, uint32_t p, void *arg),
                               void *arg)
{
    for (size_t i = 0; i < b->nbuckets; i++)
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->state != TN_OBJ_READY)
                continue;
            for (uint32_t p = 0; p < t->nparts; p++)
                if (tn_topic_part_local(t, p))
                    fn(t, p, arg);
        }
}

void tn_broker_sweep_bare(tn_broker_t *b, bool (*recorded)(void *arg, const char *topic), void *arg)
{
    tn_bare_t **pp = &b->bare;
    while (*pp != NULL && !b->closing) {
        tn_bare_t *x = *pp;
        if (x->removing) {
            pp = &x->next;
            continue;
        }
        if (tn__topic_find(b, x->name, strlen(x->name)) != NULL) {
            *pp = x->next; /* the topic's to deal with */
            tn_free(x);
            continue;
        }
        pp = &x->next;
        if (recorded(arg, x->name))
            continue; /* made by the catalog next */
        x->b = b;
        if (uv_queue_work(b->loop, &x->work, bare_work, bare_done) != 0)
            continue; /* tried again at the next sweep */
        x->removing = true;
        b->workers++;
    }
}

void tn_broker_set_gate(tn_broker_t *b, tn_gate_fn fn, void *arg)
{
    b->gate = fn;
    b->gate_arg = arg;
}

void tn_broker_set_stamper(tn_broker_t *b, tn_stamp_fn fn, void *arg)
{
    b->stamp = fn;
    b->stamp_arg = arg;
}

/* A topic's creation passed the gate: its record is committed and
 * applied here, so where its partitions live and which record it is are
 * known (before its job runs, which reads both). */
static void gate_passed(tn_broker_t *b, tn_topic_t *t)
{
    tn__topic_place_new(t, 0);
    if (b->stamp != NULL && !t->memory)
        t->record_created_ms = b->stamp(b->stamp_arg, t->name);
}

void tn_broker_set_grow_here(tn_broker_t *b, tn_grow_here_fn fn, void *arg)
{
    b->grow_here = fn;
    b->grow_here_arg = arg;
}

void tn_broker_set_append_check(tn_broker_t *b, tn_append_check_fn fn, void *arg)
{
    b->append_check = fn;
    b->append_check_arg = arg;
}

void tn_broker_set_publisher(tn_broker_t *b, tn_publish_fn fn, void *arg)
{
    b->publisher = fn;
    b->publisher_arg = arg;
}

void tn_broker_set_placement(tn_broker_t *b, tn_place_fn fn, void *arg)
{
    b->place = fn;
    b->place_arg = arg;
}

void tn_broker_follow_placement(tn_broker_t *b)
{
    if (b->closing || b->place == NULL)
        return;
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->memory || t->state == TN_OBJ_FAILED || t->state == TN_OBJ_DELETING)
                continue;
            /* Busy ones follow by themselves once free; out of memory
             * leaves it for the next change. */
            (void)tn_topic_follow_placement(t, NULL, NULL);
        }
    }
}

int tn__gate_then_queue(tn_broker_t *b, uv_work_t *work, uv_work_cb run, uv_after_work_cb after,
                        tn_topic_t *t, tn_channel_t *ch)
{
    /* Ephemeral topics and their channels are never recorded. */
    if (b->gate == NULL || t->memory) {
        if (ch == NULL)
            tn__topic_place_new(t, 0);
        else
            tn__channel_gate_passed(ch);
        return uv_queue_work(b->loop, work, run, after);
    }
    tn_gate_t *g = tn_calloc(1, sizeof(*g));
    if (g == NULL)
        return UV_ENOMEM;
    *g = (tn_gate_t){b, work, run, after, true, false, 0, ch == NULL ? t : NULL, ch};
    b->gate(b->gate_arg, g, t, ch);
    g->asking = false;
    if (!g->answered)
        return 0;
    /* Answered at once: the caller learns it from the return value. */
    int status = g->status;
    tn_free(g);
    if (status == 0 && ch == NULL)
        gate_passed(b, t);
    if (status == 0 && ch != NULL)
        tn__channel_gate_passed(ch);
    return status != 0 ? status : uv_queue_work(b->loop, work, run, after);
}

void tn_gate_done(tn_gate_t *g, int status)
{
    if (g->asking) {
        g->answered = true;
        g->status = status;
        return;
    }
    tn_broker_t *b = g->b;
    uv_work_t *work = g->work;
    uv_work_cb run = g->run;
    uv_after_work_cb after = g->after;
    tn_topic_t *place = g->place;
    tn_channel_t *chan = g->chan;
    tn_free(g);
    if (status == 0 && b->closing)
        status = TN_ECLOSED;
    if (status == 0 && place != NULL)
        gate_passed(b, place);
    if (status == 0 && chan != NULL)
        tn__channel_gate_passed(chan);
    if (status == 0)
        status = uv_queue_work(b->loop, work, run, after);
    if (status != 0)
        after(work, status); /* the job ends as a failed creation */
}

/* --- pumping and deadlines ------------------------------------------------- */

static void on_idle(uv_idle_t *h)
{
    tn_broker_t *b = h->data;
    /* Pumping may queue channels again (a fetch ended, credit came back);
     * those wait for the next pass, so one pass is bounded. */
    tn_channel_t *list = b->pump_head;
    b->pump_head = NULL;
    while (list != NULL) {
        tn_channel_t *ch = list;
        list = ch->pump_next;
        ch->pump_next = NULL;
        ch->pump_queued = false;
        ch->busy--;
        if (ch->deleted) {
            if (ch->busy == 0)
                tn__channel_free(ch);
            continue;
        }
        if (!b->closing)
            tn__channel_pump(ch);
    }
    if (b->pump_head == NULL)
        uv_idle_stop(&b->idle);
}

void tn__broker_unstarve(tn_broker_t *b)
{
    tn_channel_t *s = b->starved;
    b->starved = NULL;
    while (s != NULL) {
        tn_channel_t *next = s->starve_next;
        s->starve_next = NULL;
        s->starving = false;
        s->busy--;
        if (s->deleted && s->busy == 0)
            tn__channel_free(s);
        else if (!s->deleted)
            tn__broker_pump_later(s);
        s = next;
    }
}

void tn__broker_pump_later(tn_channel_t *ch)
{
    tn_broker_t *b = ch->topic->broker;
    if (ch->pump_queued || b->closing)
        return;
    ch->pump_queued = true;
    ch->busy++;
    ch->pump_next = b->pump_head;
    b->pump_head = ch;
    uv_idle_start(&b->idle, on_idle);
}

static void arm_timer(tn_broker_t *b);

static void on_timer(uv_timer_t *h)
{
    tn_broker_t *b = h->data;
    b->timer_at = INT64_MAX;
    int64_t now = tn_now_mono_ms();
    for (;;) {
        tn_heap_node_t *n = tn_heap_min(&b->wakes);
        if (n == NULL || n->key > now)
            break;
        tn_heap_remove(&b->wakes, n);
        tn_chpart_t *cp = TN_CONTAINER_OF(n, tn_chpart_t, wake);
        tn__chpart_wake(cp, now);
        tn__broker_rewake(cp);
    }
    arm_timer(b);
}

static void arm_timer(tn_broker_t *b)
{
    if (b->closing)
        return;
    tn_heap_node_t *n = tn_heap_min(&b->wakes);
    if (n == NULL) {
        if (b->timer_at != INT64_MAX) {
            uv_timer_stop(&b->timer);
            b->timer_at = INT64_MAX;
        }
        return;
    }
    if (n->key == b->timer_at)
        return;
    int64_t now = tn_now_mono_ms();
    /* +1: a timer may fire a little before its millisecond ends; firing
     * late by a millisecond is fine, early is not. */
    int64_t delay = n->key > now ? n->key - now + 1 : 0;
    b->timer_at = n->key;
    uv_timer_start(&b->timer, on_timer, (uint64_t)delay, 0);
}

void tn__broker_rewake(tn_chpart_t *cp)
{
    tn_broker_t *b = cp->ch->topic->broker;
    int64_t at = tn_leases_next_deadline(&cp->leases);
    tn_heap_node_t *pm = tn_heap_min(&cp->pending);
    if (pm != NULL && pm->key < at)
        at = pm->key;
    if (cp->full != 0 && !cp->full_checking && cp->full_retry_ms < at)
        at = cp->full_retry_ms; /* channel.c, full_check */
    if (cp->ch->deleted || b->closing)
        at = INT64_MAX;
    if (at == INT64_MAX) {
        if (tn_heap_contains(&cp->wake))
            tn_heap_remove(&b->wakes, &cp->wake);
    } else if (tn_heap_contains(&cp->wake)) {
        if (cp->wake.key != at)
            tn_heap_update(&b->wakes, &cp->wake, at);
    } else if (tn_heap_insert(&b->wakes, &cp->wake, at) != 0) {
        /* Out of memory: the GC timer's periodic sweep wakes it instead. */
        return;
    }
    arm_timer(b);
}

/* --- GC ----------------------------------------------------------------------- */

static void on_gc_done(tn_plog_gc_t *req, int status)
{
    tn_part_t *p = req->data;
    tn_topic_t *t = p->topic;
    p->gc_busy = false;
    t->busy--;
    tn_broker_t *b = t->broker;
    if (status == 0 && req->deleted > 0) {
        b->gc_segments += req->deleted;
        tn_plog_stats_t st;
        tn_plog_stats(p->plog, &st);
        p->first_offset = st.first_offset;
        TN_LOG(TN_LOG_INFO,
               "topic %s/%" PRIu32 ": reclaimed %" PRIu32 " segment(s), %" PRIu64
               " bytes; oldest offset now %" PRIu64,
               t->name, p->index, req->deleted, req->deleted_bytes, st.first_offset);
        if (!t->deleted && !b->closing)
            tn__topic_settle_below(t, p->index, st.first_offset);
    } else if (status != 0) {
        TN_LOG_RL(TN_LOG_ERROR, 60000, "GC of %s/%" PRIu32 " failed: %s", t->name, p->index,
                  tn_strerror(status));
    }
    if (t->deleted && t->busy == 0)
        tn__topic_free(t);
    tn__broker_work_done(b);
}

static void gc_topic(tn_broker_t *b, tn_topic_t *t, int64_t now_wall_ns)
{
    if (t->state != TN_OBJ_READY || t->deleted)
        return;
    int64_t retention = t->own_settings ? t->own_retention_ns : b->opts.retention_ns;
    int64_t older = retention ? now_wall_ns - retention : 0;
    if (t->ttl_ms > 0) {
        /* Every record of a segment older than the TTL has expired. */
        int64_t ttl_ns = t->ttl_ms > INT64_MAX / 1000000 ? INT64_MAX : t->ttl_ms * 1000000;
        int64_t ttl_older = now_wall_ns - ttl_ns;
        if (older == 0 || ttl_older > older)
            older = ttl_older;
    }
    int64_t keep_ns = now_wall_ns - b->opts.bootstrap_window_ms * 1000000;
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        if (p->remote)
            continue; /* its owner keeps it (and a copy left here is not touched) */
        if (t->memory) {
            tn__part_mem_trim(p);
            continue;
        }
        if (p->gc_busy || tn_plog_err(p->plog) != 0)
            continue;
        uint64_t below = tn__topic_gc_bound(t, i);
        if (below == UINT64_MAX)
            below = 0; /* no durable channel yet: keep everything for the first */
        /* Keep the bootstrap window for channels created later. */
        uint64_t window = tn_plog_offset_after_ns(p->plog, keep_ns);
        if (window < below)
            below = window;
        if (tn_plog_gc_plan(p->plog, below, older) == 0)
            continue;
        p->gc.data = p;
        if (tn_plog_gc(p->plog, &p->gc, below, older, on_gc_done) == 0) {
            p->gc_busy = true;
            t->busy++;
            b->workers++;
        }
    }
}

static void on_gc_timer(uv_timer_t *h)
{
    tn_broker_t *b = h->data;
    int64_t now = tn_now_wall_ns();
    for (size_t i = 0; i < b->nbuckets; i++)
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext)
            gc_topic(b, t, now);
    /* Starved channels get another chance even if no lease ended. */
    tn__broker_unstarve(b);
}

/* --- open and close --------------------------------------------------------- */

typedef struct {
    tn_broker_t *b;
    int rc;
} load_ctx_t;

/* The partitions of a topic on disk: their count (the highest index + 1)
 * and, once present is allocated, which of them are there. */
typedef struct {
    uint32_t n;
    bool *present;
} load_parts_t;

static int load_partition_count(void *arg, const char *topic, uint32_t partition)
{
    (void)topic;
    load_parts_t *lp = arg;
    if (lp->present != NULL) {
        if (partition < lp->n)
            lp->present[partition] = true;
        return 0;
    }
    if (partition + 1 > lp->n)
        lp->n = partition + 1;
    return 0;
}

/* The names of a topic's channels, gathered over its local partitions. */
typedef struct {
    char **names;
    size_t n, cap;
} load_chans_t;

static int load_channel_name(void *arg, const char *channel)
{
    load_chans_t *lc = arg;
    for (size_t i = 0; i < lc->n; i++)
        if (strcmp(lc->names[i], channel) == 0)
            return 0;
    if (lc->n == lc->cap) {
        size_t cap = lc->cap == 0 ? 8 : lc->cap * 2;
        char **names = tn_realloc(lc->names, cap * sizeof(*names));
        if (names == NULL)
            return UV_ENOMEM;
        lc->names = names;
        lc->cap = cap;
    }
    if ((lc->names[lc->n] = tn_strdup(channel)) == NULL)
        return UV_ENOMEM;
    lc->n++;
    return 0;
}

static int load_topic(void *arg, const char *name)
{
    load_ctx_t *ctx = arg;
    load_parts_t lp = {0, NULL};
    int rc = tn_store_list_partitions(ctx->b->store, name, load_partition_count, &lp);
    if (rc == 0 && lp.n == 0 && strlen(name) <= TN_NAME_MAX) {
        /* Not loaded: it holds no copy (a pause's files at most). */
        tn_bare_t *x = tn_calloc(1, sizeof(*x));
        if (x == NULL)
            return UV_ENOMEM;
        snprintf(x->name, sizeof(x->name), "%s", name);
        x->next = ctx->b->bare;
        ctx->b->bare = x;
    }
    if (rc != 0 || lp.n == 0)
        return rc;
    lp.present = tn_calloc(lp.n, sizeof(*lp.present));
    if (lp.present == NULL)
        return UV_ENOMEM;
    rc = tn_store_list_partitions(ctx->b->store, name, load_partition_count, &lp);
    tn_topic_t *t = NULL;
    if (rc == 0)
        rc = tn__topic_load(ctx->b, name, lp.n, lp.present, &t);
    /* A channel exists when any local partition has its checkpoint (a
     * deletion removes partition 0's last, so one cut short by a crash
     * still finds it); each local partition opens it, and one that lost
     * its files gets it anew (tn__channel_load says so). */
    load_chans_t lc = {NULL, 0, 0};
    for (uint32_t i = 0; rc == 0 && i < lp.n; i++)
        if (lp.present[i])
            rc = tn_chanlog_list(ctx->b->store, name, i, load_channel_name, &lc);
    for (size_t i = 0; rc == 0 && i < lc.n; i++)
        rc = tn__channel_load(t, lc.names[i]);
    for (size_t i = 0; i < lc.n; i++)
        tn_free(lc.names[i]);
    tn_free(lc.names);
    tn_free(lp.present);
    return rc;
}

/* The store's cut watch (storage/store.h): a partition's log was cut;
 * true when the cut waits for t's pause file (tn__topic_hold_cut). */
static bool on_log_cut(void *arg, const char *topic, uint32_t partition, uint64_t cut,
                       tn_store_cut_t *wait)
{
    tn_broker_t *b = arg;
    tn_topic_t *t = tn__topic_find(b, topic, strlen(topic));
    return t != NULL && !b->closing && tn__topic_hold_cut(t, partition, cut, wait);
}

int tn_broker_open(uv_loop_t *loop, tn_store_t *store, const tn_broker_opts_t *opts,
                   tn_broker_t **out)
{
    tn_broker_t *b = tn_calloc(1, sizeof(*b));
    if (b == NULL)
        return UV_ENOMEM;
    b->loop = loop;
    b->store = store;
    b->opts = *opts;
    b->opts.ttl_rules = NULL;
    if (opts->nttl_rules > 0) {
        b->opts.ttl_rules = tn_malloc(opts->nttl_rules * sizeof(*opts->ttl_rules));
        if (b->opts.ttl_rules == NULL) {
            tn_free(b);
            return UV_ENOMEM;
        }
        memcpy(b->opts.ttl_rules, opts->ttl_rules, opts->nttl_rules * sizeof(*opts->ttl_rules));
    }
    if (b->opts.default_partitions == 0)
        b->opts.default_partitions = 1;
    b->nbuckets = 64;
    b->buckets = tn_calloc(b->nbuckets, sizeof(*b->buckets));
    if (b->buckets == NULL) {
        tn_free(b);
        return UV_ENOMEM;
    }
    b->timer_at = INT64_MAX;
    b->nonce_seed = (uint32_t)tn_now_wall_ns() * 2654435761u;
    tn_heap_init(&b->wakes);
    tn_hist_init(&b->pub_hist);
    tn_hist_init(&b->walop_hist);
    uv_idle_init(loop, &b->idle);
    b->idle.data = b;
    uv_timer_init(loop, &b->timer);
    b->timer.data = b;
    uv_timer_init(loop, &b->gc_timer);
    b->gc_timer.data = b;
    b->handles_open = 3;
    load_ctx_t ctx = {b, 0};
    int rc = tn_store_list_topics(store, load_topic, &ctx);
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR, "loading topics: %s", tn_strerror(rc));
    uint64_t gc_ms = b->opts.gc_interval_ms > 0 ? (uint64_t)b->opts.gc_interval_ms : 10000;
    uv_timer_start(&b->gc_timer, on_gc_timer, gc_ms, gc_ms);
    tn_store_set_cut_watch(store, on_log_cut, b);
    *out = b;
    return 0;
}

static void maybe_finish_close(tn_broker_t *b)
{
    if (!b->closing || b->workers != 0 || b->handles_open != 0)
        return;
    for (size_t i = 0; i < b->nbuckets; i++) {
        tn_topic_t *t = b->buckets[i];
        while (t != NULL) {
            tn_topic_t *next = t->hnext;
            tn__topic_free(t);
            t = next;
        }
    }
    tn_free(b->buckets);
    while (b->bare != NULL) {
        tn_bare_t *x = b->bare;
        b->bare = x->next;
        tn_free(x);
    }
    tn_free(b->opts.ttl_rules);
    tn__channel_spares_free();
    tn_heap_fini(&b->wakes);
    void (*cb)(tn_broker_t *) = b->close_cb;
    tn_free(b);
    if (cb != NULL)
        cb(NULL);
}

void tn__broker_work_done(tn_broker_t *b)
{
    b->workers--;
    maybe_finish_close(b);
}

static void on_handle_closed(uv_handle_t *h)
{
    tn_broker_t *b = h->data;
    b->handles_open--;
    maybe_finish_close(b);
}

void tn_broker_close(tn_broker_t *b, void (*cb)(tn_broker_t *b))
{
    if (b->closing)
        return;
    b->closing = true;
    b->close_cb = cb;
    if (b->store->cut_arg == b)
        tn_store_set_cut_watch(b->store, NULL, NULL);
    while (b->pump_head != NULL) {
        tn_channel_t *ch = b->pump_head;
        b->pump_head = ch->pump_next;
        ch->pump_next = NULL;
        ch->pump_queued = false;
        ch->busy--;
    }
    while (b->starved != NULL) {
        tn_channel_t *ch = b->starved;
        b->starved = ch->starve_next;
        ch->starve_next = NULL;
        ch->starving = false;
        ch->busy--;
    }
    uv_close((uv_handle_t *)&b->idle, on_handle_closed);
    uv_close((uv_handle_t *)&b->timer, on_handle_closed);
    uv_close((uv_handle_t *)&b->gc_timer, on_handle_closed);
}

int tn_broker_listen(tn_broker_t *b, tn_broker_event_cb cb, void *arg)
{
    if (b->nlisteners == TN_BROKER_MAX_LISTENERS)
        return UV_ENOSPC;
    b->listeners[b->nlisteners].cb = cb;
    b->listeners[b->nlisteners].arg = arg;
    b->nlisteners++;
    return 0;
}

void tn_broker_unlisten(tn_broker_t *b, tn_broker_event_cb cb, void *arg)
{
    for (uint32_t i = 0; i < b->nlisteners; i++) {
        if (b->listeners[i].cb == cb && b->listeners[i].arg == arg) {
            memmove(&b->listeners[i], &b->listeners[i + 1],
                    (b->nlisteners - i - 1) * sizeof(b->listeners[0]));
            b->nlisteners--;
            return;
        }
    }
}
