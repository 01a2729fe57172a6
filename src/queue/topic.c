/* Topics and publishing. See queue.h for the design. */
#include "core/platform.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "queue/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void tn__waiters_fire(tn_waiter_t **list, int status)
{
    /* Oldest first: the list is pushed at the front. */
    tn_waiter_t *rev = NULL;
    while (*list != NULL) {
        tn_waiter_t *w = *list;
        *list = w->next;
        w->next = rev;
        rev = w;
    }
    while (rev != NULL) {
        tn_waiter_t *w = rev;
        rev = w->next;
        w->next = NULL;
        w->cb(w, status);
    }
}

static void on_plog_progress(tn_plog_t *plog)
{
    tn_part_t *p = plog->data;
    if (p != NULL && !p->topic->deleted)
        tn__topic_pump_all(p->topic);
}

tn_topic_t *tn__topic_new(tn_broker_t *b, const char *name, size_t len, uint32_t nparts)
{
    tn_topic_t *t = tn_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->broker = b;
    t->name = tn_malloc(len + 1);
    t->parts = tn_calloc(nparts, sizeof(*t->parts));
    bool ok = t->name != NULL && t->parts != NULL;
    for (uint32_t i = 0; ok && i < nparts; i++)
        ok = (t->parts[i] = tn_calloc(1, sizeof(tn_part_t))) != NULL;
    if (!ok) {
        for (uint32_t i = 0; t->parts != NULL && i < nparts; i++)
            tn_free(t->parts[i]);
        tn_free(t->name);
        tn_free(t->parts);
        tn_free(t);
        return NULL;
    }
    memcpy(t->name, name, len);
    t->name[len] = '\0';
    t->nparts = nparts;
    t->durability = -1;
    t->ttl_ms = tn__ttl_for(b, t->name);
    t->is_dlq = len >= 4 && memcmp(name + len - 4, ".DLQ", 4) == 0;
    t->memory = tn_name_ephemeral(name, len);
    for (uint32_t i = 0; i < nparts; i++) {
        tn_part_t *p = t->parts[i];
        p->topic = t;
        p->index = i;
        tn_u64map_init(&p->cache);
    }
    return t;
}

static void tpause_cuts_run(tn_topic_t *t, uint64_t covers, int status);

void tn__topic_free(tn_topic_t *t)
{
    tpause_cuts_run(t, UINT64_MAX, TN_ECLOSED); /* none is left waiting: the logs stay pinned */
    while (t->channels != NULL) {
        tn_channel_t *ch = t->channels;
        t->channels = ch->next;
        tn__channel_free(ch);
    }
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        tn__cache_drop_part(p);
        tn_u64map_fini(&p->cache);
        if (p->plog != NULL) {
            p->plog->on_progress = NULL;
            p->plog->data = NULL;
            /* The store closes every log still open when it closes. */
            if (t->deleted)
                tn_plog_close(p->plog, NULL);
        }
        tn_free(p);
    }
    tn_free(t->parts);
    tn_free(t->name);
    tn_free(t);
}

void tn__part_ready(tn_part_t *p)
{
    tn_plog_stats_t st;
    tn_plog_stats(p->plog, &st);
    p->first_offset = st.first_offset;
    p->appended_next = st.written_next;
    p->plog->data = p;
    p->plog->on_progress = on_plog_progress;
    tn__topic_pause_dir_made(p->topic);
}

/* A point of the pause file came down to its partition's end at load:
 * the file takes it at once (recovery, before the replica manager starts
 * and appends there), or a second restart, with records at those offsets
 * again, would take the old point back and deliver them. */
static void load_pause_rewrite(tn_topic_t *t, const uint64_t *holds, uint32_t n)
{
    int rc = tn_store_topic_pause_write(t->broker->store, t->name, true, holds, n, NULL);
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR,
               "topic %s: writing its pause file with the hold points lowered to its "
               "partitions' ends: %s (the next write of its pause carries them)",
               t->name, tn_strerror(rc));
}

/* The end of p's log here (0: none here). */
static uint64_t part_end(const tn_part_t *p)
{
    if (p->plog == NULL)
        return 0;
    tn_plog_stats_t st;
    tn_plog_stats(p->plog, &st);
    return st.written_next;
}

void tn__topic_pause_clamp(tn_topic_t *t, int rc, uint64_t *holds, uint32_t n)
{
    bool lowered = false;
    for (uint32_t i = 0; rc == 0 && i < n && i < t->nparts; i++) {
        uint64_t end = part_end(t->parts[i]);
        if (holds[i] > end) {
            holds[i] = end;
            lowered = true;
        }
    }
    if (lowered)
        load_pause_rewrite(t, holds, n);
}

void tn__topic_pause_take(tn_topic_t *t, int rc, const uint64_t *holds, uint32_t n)
{
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR,
               "topic %s: its pause file (%s) cannot be read (%s): paused, holding what arrives "
               "from now on; /topic/unpause resumes it and writes the file anew",
               t->name, TN_STORE_TOPIC_PAUSE_FILE, tn_strerror(rc));
    t->paused = t->paused_kept = true;
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        uint64_t end = part_end(p);
        p->hold = rc != 0 ? end : i < n ? TN_MIN(holds[i], end) : 0;
        p->hold_file = p->hold;
    }
    TN_LOG(TN_LOG_NOTICE,
           "topic %s is paused, as its pause file says: what was published since the "
           "pause stays held until /topic/unpause",
           t->name);
}

/* This node's pause, as the topic's pause file says (startup, its
 * partitions opened): each local partition holds from its hold point,
 * or from its end when the point is past it (records lost in a crash
 * with relaxed publishes, or a cut whose pause write failed:
 * tn__topic_hold_cut; what takes their offsets arrives after the pause);
 * a partition the file does not name (a growth after the write) holds
 * everything, as it did in memory. A file that cannot be read keeps the
 * topic paused from each partition's end: an operator's pause kept
 * rather than deliveries resumed (unpausing writes the file anew). */
static void load_pause(tn_topic_t *t)
{
    int paused;
    uint64_t *holds;
    uint32_t n;
    int rc = tn_store_topic_pause_read(t->broker->store, t->name, &paused, &holds, &n);
    if (rc != 0 || paused == 1) {
        tn__topic_pause_clamp(t, rc, holds, n);
        tn__topic_pause_take(t, rc, holds, n);
    }
    tn_free(holds);
}

int tn__topic_load(tn_broker_t *b, const char *name, uint32_t nparts, const bool *present,
                   tn_topic_t **out)
{
    tn_topic_t *t = tn__topic_new(b, name, strlen(name), nparts);
    if (t == NULL)
        return UV_ENOMEM;
    for (uint32_t i = 0; i < nparts; i++) {
        if (!present[i]) {
            /* Not on disk: another node's, until the placement says. */
            t->parts[i]->remote = true;
            TN_LOG(TN_LOG_INFO, "partition %s/%" PRIu32 " has no files here: remote", name, i);
            continue;
        }
        int rc = tn_plog_open(b->store, name, i, &t->parts[i]->plog);
        if (rc != 0) {
            TN_LOG(TN_LOG_ERROR, "cannot open partition %s/%" PRIu32 ": %s", name, i,
                   tn_strerror(rc));
            tn__topic_free(t);
            return rc;
        }
        tn_plog_t *plog = t->parts[i]->plog;
        tn_plog_stats_t st;
        tn_plog_stats(plog, &st);
        if (st.err != 0)
            TN_LOG(TN_LOG_ERROR, "partition %s/%" PRIu32 " isolated: %s", name, i, plog->errmsg);
        else
            TN_LOG(TN_LOG_INFO,
                   "partition %s/%" PRIu32 ": %" PRIu64 " records from offset %" PRIu64
                   ", next offset %" PRIu64 ", %" PRIu32 " segments, %" PRIu64 " bytes",
                   name, i, st.written_next - st.first_offset, st.first_offset, st.written_next,
                   st.segments, st.bytes);
        tn__part_ready(t->parts[i]);
    }
    int64_t stamp = 0;
    int rc = tn_store_topic_stamp_read(b->store, name, &stamp);
    if (rc != 0)
        TN_LOG(TN_LOG_WARN,
               "topic %s: its stamp (%s) cannot be read (%s): the topic recorded under its "
               "name is taken for its own, as for a directory made before stamps",
               name, TN_STORE_STAMP_FILE, tn_strerror(rc));
    t->record_created_ms = t->stamp_ms = stamp;
    load_pause(t);
    t->state = TN_OBJ_READY;
    tn__topic_insert(b, t);
    *out = t;
    return 0;
}

void tn__topic_pump_all(tn_topic_t *t)
{
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (ch->nconsumers > 0)
            tn__broker_pump_later(ch);
}

/* --- publish --------------------------------------------------------------- */

/* The delivery time of a record set without one of its own, until the
 * append gives it the publish's (times are never negative). */
#define PUB_AT_UNSET INT64_C(-1)

int tn_pub_init(tn_pub_t *p, uint32_t n)
{
    memset(p, 0, sizeof(*p));
    if (n == 0)
        return UV_EINVAL;
    p->n = n;
    if (n == 1) {
        p->msgs = &p->msg1;
        p->recs = &p->rec1;
        return 0;
    }
    p->msgs = tn_calloc(n, sizeof(*p->msgs));
    p->recs = tn_calloc(n, sizeof(*p->recs));
    if (p->msgs == NULL || p->recs == NULL) {
        tn_free(p->msgs);
        tn_free(p->recs);
        p->msgs = NULL;
        p->recs = NULL;
        return UV_ENOMEM;
    }
    return 0;
}

int tn_pub_set(tn_pub_t *p, uint32_t i, const void *data, size_t len)
{
    if (i >= p->n || len > UINT32_MAX)
        return UV_EINVAL;
    tn_msg_t *m = tn_msg_new(data, (uint32_t)len);
    if (m == NULL)
        return UV_ENOMEM;
    if (p->msgs[i] != NULL)
        tn_msg_unref(p->msgs[i]);
    p->msgs[i] = m;
    p->recs[i].key = tn_iov(NULL, 0);
    p->recs[i].body = tn_iov(m->data, m->len);
    p->recs[i].deliver_at_ms = PUB_AT_UNSET;
    return 0;
}

int tn_pub_set_all(tn_pub_t *p, const tn_iov_t *bodies)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (p->msgs[i] != NULL)
            return UV_EINVAL;
    int rc = tn_msg_new_batch(p->n, bodies, p->msgs);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < p->n; i++) {
        p->recs[i].key = tn_iov(NULL, 0);
        p->recs[i].body = tn_iov(p->msgs[i]->data, p->msgs[i]->len);
        p->recs[i].deliver_at_ms = PUB_AT_UNSET;
    }
    return 0;
}

int tn_pub_set_key(tn_pub_t *p, uint32_t i, const void *key, size_t len)
{
    if (i >= p->n || p->msgs[i] == NULL || len > UINT16_MAX)
        return UV_EINVAL;
    if (p->keys == NULL) {
        if (p->n == 1) {
            p->keys = &p->key1;
        } else {
            p->keys = tn_calloc(p->n, sizeof(*p->keys));
            if (p->keys == NULL)
                return UV_ENOMEM;
        }
    }
    tn_msg_t *k = tn_msg_new(key, (uint32_t)len);
    if (k == NULL)
        return UV_ENOMEM;
    if (p->keys[i] != NULL)
        tn_msg_unref(p->keys[i]);
    p->keys[i] = k;
    p->recs[i].key = tn_iov(k->data, k->len);
    return 0;
}

int tn_pub_set_deliver_at(tn_pub_t *p, uint32_t i, int64_t ms)
{
    if (i >= p->n || p->msgs[i] == NULL || ms < 0)
        return UV_EINVAL;
    p->recs[i].deliver_at_ms = ms;
    p->own_times = true;
    return 0;
}

int tn_pub_fill(tn_pub_t *p, const tn_rec_in_t *recs)
{
    tn_iov_t *bodies = tn_malloc(p->n * sizeof(*bodies));
    if (bodies == NULL)
        return UV_ENOMEM;
    for (uint32_t i = 0; i < p->n; i++)
        bodies[i] = recs[i].body;
    int rc = tn_pub_set_all(p, bodies);
    tn_free(bodies);
    for (uint32_t i = 0; i < p->n && rc == 0; i++) {
        if (recs[i].key.len > 0)
            rc = tn_pub_set_key(p, i, recs[i].key.base, recs[i].key.len);
        if (rc == 0)
            rc = tn_pub_set_deliver_at(p, i, recs[i].deliver_at_ms);
    }
    return rc;
}

void tn_pub_fini(tn_pub_t *p)
{
    if (p->keys != NULL) {
        for (uint32_t i = 0; i < p->n; i++)
            if (p->keys[i] != NULL)
                tn_msg_unref(p->keys[i]);
        if (p->keys != &p->key1)
            tn_free(p->keys);
        p->keys = NULL;
    }
    if (p->msgs == NULL)
        return;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->msgs[i] != NULL)
            tn_msg_unref(p->msgs[i]);
    if (p->msgs != &p->msg1) {
        tn_free(p->msgs);
        tn_free(p->recs);
    }
    p->msgs = NULL;
    p->recs = NULL;
}

static void on_appended(tn_append_t *req, int status)
{
    tn_pub_t *p = req->data;
    tn_topic_t *t = p->topic;
    tn_part_t *part = t->parts[p->partition];
    t->busy--;
    if (status == 0) {
        tn_hist_observe(&t->broker->pub_hist, tn_now_mono_ns() - p->start_ns);
        p->first_offset = req->first_offset;
        if (req->first_offset + p->n > part->appended_next)
            part->appended_next = req->first_offset + p->n;
        t->message_count += p->n - p->ncontrol;
        for (uint32_t i = 0; i < p->n; i++) {
            if (i < p->ncontrol) {
                /* A control record holds its offset with no message: the
                 * channels pass over it (queue.h: tn_centry_t.control). */
                if (!t->deleted && !t->broker->closing) {
                    tn__cache_append(part, req->first_offset + i, req->publish_ns, 0, NULL, NULL);
                    tn_centry_t *ce = tn__cache_get(part, req->first_offset + i);
                    if (ce != NULL)
                        ce->control = true; /* settled as a SKIP, not a FIN */
                }
                continue;
            }
            t->message_bytes += p->msgs[i]->len;
            if (!t->deleted && !t->broker->closing)
                tn__cache_append(part, req->first_offset + i, req->publish_ns,
                                 p->recs[i].deliver_at_ms, tn_msg_ref(p->msgs[i]),
                                 p->keys != NULL && p->keys[i] != NULL ? tn_msg_ref(p->keys[i])
                                                                       : NULL);
        }
    }
    bool freed = t->deleted && t->busy == 0;
    tn_broker_t *b = t->broker;
    if (status == 0 && !t->deleted && !b->closing)
        tn__topic_pump_all(t);
    p->cb(p, status);
    if (freed)
        tn__topic_free(t);
    tn__broker_work_done(b);
}

/* The next local partition, round robin; false when every one is remote. */
static bool next_local(tn_topic_t *t, uint32_t *out)
{
    for (uint32_t k = 0; k < t->nparts; k++) {
        uint32_t idx = t->next_part++ % t->nparts;
        if (!t->parts[idx]->remote) {
            *out = idx;
            return true;
        }
    }
    return false;
}

static int append_to(tn_topic_t *t, tn_pub_t *p);
static void on_topic_ready(tn_waiter_t *w, int status);

/* The grow-here hook's answer. The topic was held (busy) while it was
 * asked, so t is still there, if perhaps deleted meanwhile. */
static void on_grown_here(tn_waiter_t *w, int status)
{
    tn_pub_t *p = w->data;
    tn_topic_t *t = p->topic;
    tn_broker_t *b = p->broker;
    t->busy--;
    bool freed = t->deleted && t->busy == 0;
    if (t->deleted)
        status = TN_ENOTFOUND;
    else if (b->closing)
        status = TN_ECLOSED;
    else if (status != 0)
        status = TN_EREMOTE;
    if (status == 0) {
        /* Look again, as a publish does: the topic may be busy again (another
         * node's growth, say), and then the publish waits for it. */
        p->wait.cb = on_topic_ready;
        tn_topic_t *now = NULL;
        int rc = tn_broker_topic(b, t->name, strlen(t->name), false, 0, &p->wait, &now);
        if (rc == UV_EAGAIN)
            return;
        if (rc == 0) {
            p->topic = now;
            rc = append_to(now, p);
        }
        if (rc == 0)
            return;
        status = rc;
    }
    p->owner = 0;
    p->cb(p, status);
    if (freed)
        tn__topic_free(t);
}

/* No partition of t is here: ask the grow-here hook for one, once. 0 when
 * asked (the publish goes on in on_grown_here), else TN_EREMOTE. */
static int grow_here(tn_topic_t *t, tn_pub_t *p)
{
    tn_broker_t *b = t->broker;
    p->owner = 0;
    if (!p->grow_here || p->grew || b->grow_here == NULL || t->memory)
        return TN_EREMOTE;
    p->grew = true;
    p->wait.cb = on_grown_here;
    p->wait.data = p;
    p->wait.next = NULL;
    t->busy++;
    int rc = b->grow_here(b->grow_here_arg, t, &p->wait);
    if (rc == UV_EAGAIN)
        return 0;
    t->busy--;
    return TN_EREMOTE;
}

static int append_to(tn_topic_t *t, tn_pub_t *p)
{
    if (p->pinned && p->pin >= t->nparts)
        return UV_EINVAL;
    uint32_t idx = p->pin;
    if (p->pinned && t->parts[idx]->remote) {
        p->partition = idx;
        p->owner = t->parts[idx]->owner;
        return TN_EREMOTE;
    }
    if (!p->pinned && !next_local(t, &idx))
        return grow_here(t, p);
    tn_part_t *part = t->parts[idx];
    p->partition = idx;
    tn_broker_t *b = t->broker;
    if (b->append_check != NULL && !t->memory) {
        /* A replicated partition whose leader is not ready for it (queue.h:
         * tn_append_check_fn): nothing is written. */
        int refused = b->append_check(b->append_check_arg, t, idx);
        if (refused != 0)
            return refused;
    }
    p->app.data = p;
    /* The common case writes every record's time in one pass; a publish
     * with times of its own fills in only the records without one. */
    if (!p->own_times) {
        for (uint32_t i = 0; i < p->n; i++)
            p->recs[i].deliver_at_ms = p->deliver_at_ms;
    } else {
        for (uint32_t i = 0; i < p->n; i++)
            if (p->recs[i].deliver_at_ms == PUB_AT_UNSET)
                p->recs[i].deliver_at_ms = p->deliver_at_ms;
    }
    if (t->memory)
        tn__part_mem_trim(part);
    int rc = p->ncontrol > 0
                 ? tn_plog_append_ex(part->plog, &p->app, p->recs, p->n, p->ncontrol, on_appended)
                 : tn_plog_append(part->plog, &p->app, p->recs, p->n, on_appended);
    if (rc == 0) {
        t->busy++;
        t->broker->workers++;
    }
    return rc;
}

static void on_topic_ready(tn_waiter_t *w, int status)
{
    tn_pub_t *p = w->data;
    /* On success p->topic is ready; on failure it is being freed. */
    if (status == 0 && p->broker->closing)
        status = TN_ECLOSED;
    if (status == 0) {
        status = append_to(p->topic, p);
        if (status == 0)
            return;
    }
    p->cb(p, status);
}

/* What every publish records before its topic is known or waited for. */
static void pub_start(tn_broker_t *b, tn_pub_t *p, int64_t deliver_at_ms, tn_pub_cb cb)
{
    p->broker = b;
    p->cb = cb;
    p->deliver_at_ms = deliver_at_ms;
    p->start_ns = tn_now_mono_ns();
    p->wait.cb = on_topic_ready;
    p->wait.data = p;
}

int tn_broker_publish(tn_broker_t *b, const char *name, size_t len, tn_pub_t *p,
                      int64_t deliver_at_ms, tn_pub_cb cb)
{
    if (p->n == 0 || !tn_name_valid_any(name, len))
        return UV_EINVAL;
    if (tn_store_disk_high(b->store) && !tn_name_ephemeral(name, len))
        return TN_EDISKHIGH;
    pub_start(b, p, deliver_at_ms, cb);
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(b, name, len, true, 0, &p->wait, &t);
    if (rc == UV_EAGAIN) {
        p->topic = tn__topic_find(b, name, len);
        return 0;
    }
    if (rc != 0)
        return rc;
    p->topic = t;
    return append_to(t, p);
}

int tn_topic_publish(tn_topic_t *t, tn_pub_t *p, int64_t deliver_at_ms, tn_pub_cb cb)
{
    tn_broker_t *b = t->broker;
    if (t->state != TN_OBJ_READY) /* not as the caller found it: the long way */
        return tn_broker_publish(b, t->name, strlen(t->name), p, deliver_at_ms, cb);
    if (p->n == 0)
        return UV_EINVAL;
    if (tn_store_disk_high(b->store) && !t->memory) /* memory: the name is ephemeral */
        return TN_EDISKHIGH;
    if (b->closing)
        return TN_ECLOSED;
    pub_start(b, p, deliver_at_ms, cb);
    p->topic = t;
    return append_to(t, p);
}

/* --- emptying ----------------------------------------------------------------------- */

typedef struct {
    tn_topic_t *t;
    uint32_t left; /* partitions whose floor is being written, + 1 while starting */
    int rc;
    tn_delete_cb cb;
    void *arg;
    tn_plog_floor_t reqs[]; /* one per partition */
} tempty_t;

static void tempty_step(tempty_t *e)
{
    if (--e->left > 0)
        return;
    tn_topic_t *t = e->t;
    tn_broker_t *b = t->broker;
    for (uint32_t i = 0; i < t->nparts && !t->deleted; i++) {
        if (t->parts[i]->remote)
            continue;
        tn_plog_stats_t st;
        tn_plog_stats(t->parts[i]->plog, &st);
        t->parts[i]->first_offset = st.first_offset;
    }
    t->busy--;
    bool freed = t->deleted && t->busy == 0;
    if (e->cb != NULL)
        e->cb(e->arg, e->rc);
    tn_free(e);
    if (freed)
        tn__topic_free(t);
    tn__broker_work_done(b);
}

static void on_floor_written(tn_plog_floor_t *req, int status)
{
    tempty_t *e = req->data;
    if (status != 0 && e->rc == 0)
        e->rc = status;
    tempty_step(e);
}

/* The node's pause file (below). */
typedef struct tn__tpause_wait_s tpause_wait_t;
static tpause_wait_t *tpause_wait_new(tn_topic_pause_cb cb, void *arg);
static void tpause_ask(tn_topic_t *t, tpause_wait_t *w);
static void tpause_wait_end(tpause_wait_t *w, int status);

static void job_end(tn_topic_t *t);

/* A paused topic's empty between the channels' records and the pause
 * file: the file takes the new hold points only once the records that
 * settle the held messages are durable. Written first, a crash (or a
 * channel log that fails) would leave the channels before the held
 * messages with the hold points past them, and a restart would deliver
 * them from a topic still paused. The topic is kept (busy) meanwhile.
 *
 * The in-memory hold points move at once (no channel delivers what was
 * settled, the depth is 0), but any pause write may start during the
 * wait (a /topic/pause again, one asked while another ran, a partition's
 * directory made here): each writes the points the file may take,
 * hold_file, which the emptying moves to its targets only here, once the
 * records are durable. Chosen over deferring every write while an
 * emptying waits (and putting the points back after a failure): that
 * would hold back answers that do not depend on the emptying, and undo
 * in memory what no channel delivers any more. A failure
 * leaves hold_file where it was, for good: a channel log that failed
 * refuses writes until a restart, so no later emptying's records can be
 * durable either; it also counts in pause_epoch, so that an emptying
 * started before it does not move the points past its messages. A pause
 * (from unpaused) during the wait sets hold_file anew with hold, and
 * counts too: the points of a pause are never taken back by an older
 * emptying. So does a cut of a log below its hold point
 * (tn__topic_hold_cut): the emptying's targets are of the log before it. */
typedef struct {
    tn_topic_t *t;
    tpause_wait_t *w; /* the answer's, or NULL */
    uint64_t epoch;   /* t->pause_epoch at the start */
    uint32_t n;
    uint64_t to[]; /* each partition's hold point to take (0: none) */
} theld_t;

static void on_held_settled(void *arg, int status)
{
    theld_t *h = arg;
    tn_topic_t *t = h->t;
    tpause_wait_t *w = h->w;
    t->busy--;
    if (status == 0) {
        if (h->epoch == t->pause_epoch)
            for (uint32_t i = 0; i < h->n && i < t->nparts; i++)
                t->parts[i]->hold_file = TN_MAX(t->parts[i]->hold_file, h->to[i]);
        tpause_ask(t, w);
    } else {
        t->pause_epoch++;
        if (w != NULL)
            tpause_wait_end(w, status);
    }
    tn_free(h);
    job_end(t);
}

int tn_topic_empty(tn_topic_t *t, tn_delete_cb cb, void *arg)
{
    if (t->state != TN_OBJ_READY || t->growing)
        return UV_EBUSY;
    if (t->channels != NULL) {
        if (!t->paused) {
            /* Everything went on to the channels: the topic holds nothing. */
            if (cb != NULL)
                cb(arg, 0);
            return 0;
        }
        /* Paused: settle what was held in every channel, which is exact
         * only for a channel that has finished everything from before. */
        for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
            if (ch->state != TN_OBJ_READY)
                return UV_EBUSY;
            for (uint32_t i = 0; i < t->nparts; i++)
                if (!t->parts[i]->remote && ch->parts[i]->cur.frontier < t->parts[i]->hold)
                    return UV_EAGAIN;
        }
        /* Done once the channels' records are durable, then the pause
         * file holds the new hold points (a restart would otherwise count
         * the settled messages in the topic's depth again): on_held_settled. */
        theld_t *h = tn_calloc(1, sizeof(*h) + t->nparts * sizeof(h->to[0]));
        tpause_wait_t *w = NULL;
        if (h == NULL || (cb != NULL && (w = tpause_wait_new(cb, arg)) == NULL)) {
            tn_free(h);
            return UV_ENOMEM;
        }
        h->t = t;
        h->w = w;
        h->epoch = t->pause_epoch;
        h->n = t->nparts;
        for (uint32_t i = 0; i < t->nparts; i++) {
            tn_part_t *p = t->parts[i];
            if (p->remote)
                continue;
            uint64_t end = TN_MIN(tn_plog_visible_next(p->plog), p->appended_next);
            tn__topic_settle_below(t, i, end);
            p->hold = end; /* hold_file: on_held_settled */
            h->to[i] = end;
        }
        t->busy++;
        t->broker->workers++;
        int rc = tn__topic_sync_channels(t, on_held_settled, h);
        if (rc != 0)
            on_held_settled(h, rc);
        return 0;
    }
    tempty_t *e = tn_calloc(1, sizeof(*e) + t->nparts * sizeof(e->reqs[0]));
    if (e == NULL)
        return UV_ENOMEM;
    e->t = t;
    e->cb = cb;
    e->arg = arg;
    e->left = 1;
    t->busy++;
    t->broker->workers++;
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        if (p->remote)
            continue;
        e->reqs[i].data = e;
        uint64_t end = TN_MIN(tn_plog_visible_next(p->plog), p->appended_next);
        int rc = tn_plog_drop_below(p->plog, &e->reqs[i], end, on_floor_written);
        if (rc == 0)
            e->left++;
        else if (e->rc == 0)
            e->rc = rc;
    }
    tempty_step(e);
    return 0;
}

/* --- deletion ---------------------------------------------------------------------- */

typedef struct {
    uv_work_t work;
    tn_topic_t *t;
    uint32_t left; /* channel logs and partition logs still closing */
    tn_delete_cb cb;
    void *arg;
    int rc;
} tdel_t;

static void tdel_work(uv_work_t *w)
{
    tdel_t *d = TN_CONTAINER_OF(w, tdel_t, work);
    if (!d->t->memory) /* an ephemeral topic has no files */
        d->rc = tn_store_remove_topic(d->t->broker->store, d->t->name);
}

static void tdel_done(uv_work_t *w, int status)
{
    tdel_t *d = TN_CONTAINER_OF(w, tdel_t, work);
    tn_topic_t *t = d->t;
    tn_broker_t *b = t->broker;
    int rc = d->rc != 0 ? d->rc : status;
    if (rc != 0)
        TN_LOG(TN_LOG_ERROR, "deleting topic %s: %s", t->name, tn_strerror(rc));
    else
        TN_LOG(TN_LOG_INFO, "topic %s deleted", t->name);
    tn__topic_unlink(b, t);
    tn__channel_dlq_gone(b, t->name);
    tn__broker_event(b, TN_EV_TOPIC_DOWN, t->name, NULL);
    if (d->cb != NULL)
        d->cb(d->arg, rc);
    tn_free(d);
    t->deleted = true;
    t->busy--;
    if (t->busy == 0)
        tn__topic_free(t);
    tn__broker_work_done(b);
}

static void tdel_step(void *arg)
{
    tdel_t *d = arg;
    if (--d->left > 0)
        return;
    tn_broker_t *b = d->t->broker;
    if (uv_queue_work(b->loop, &d->work, tdel_work, tdel_done) != 0) {
        d->rc = UV_ENOMEM;
        tdel_done(&d->work, 0);
    }
}

static void on_tdel_plog_closed(tn_plog_t *plog)
{
    tdel_step(plog->data);
}

void tn__part_close_deferred(tn_part_t *p)
{
    void *d = p->close_after_fetch;
    p->close_after_fetch = NULL;
    p->plog->on_progress = NULL;
    p->plog->data = d;
    tn_plog_close(p->plog, on_tdel_plog_closed);
    p->plog = NULL;
}

int tn_topic_delete(tn_topic_t *t, tn_delete_cb cb, void *arg)
{
    /* A pause file write would land in the directory of a topic of the
     * name made after this one is deleted. */
    if (t->state != TN_OBJ_READY || t->stamping || t->pause_writing)
        return UV_EBUSY;
    /* A channel being created reads the logs on a worker thread. */
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (ch->state != TN_OBJ_READY)
            return UV_EBUSY;
    tdel_t *d = tn_calloc(1, sizeof(*d));
    if (d == NULL)
        return UV_ENOMEM;
    d->t = t;
    d->cb = cb;
    d->arg = arg;
    d->left = 1; /* held until everything is asked to close */
    t->state = TN_OBJ_DELETING;
    tn__channel_dlq_gone(t->broker, t->name);
    t->busy++;
    /* A broker work from here to tdel_done, not only while the files are
     * removed: tn_broker_close must not free the topic while its logs are
     * still closing (tdel_step would then run on a freed topic). */
    t->broker->workers++;
    while (t->channels != NULL)
        d->left += tn__channel_drop(t->channels, tdel_step, d) > 0 ? 1 : 0; /* one call each */
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        if (p->plog == NULL)
            continue;
        d->left++;
        if (p->fetch != NULL) {
            /* A worker is reading this log: close it when the read ends. */
            p->close_after_fetch = d;
            continue;
        }
        p->plog->on_progress = NULL;
        p->plog->data = d;
        tn_plog_close(p->plog, on_tdel_plog_closed);
        p->plog = NULL;
    }
    tdel_step(d);
    return 0;
}

/* --- growing --------------------------------------------------------------------- */

typedef struct {
    uv_work_t work;
    tn_topic_t *t;
    uint32_t from;      /* the first new partition */
    uint32_t to;        /* the new count */
    tn_plog_t **plogs;  /* [to - from] */
    bool *remote;       /* [to - from]: placed on another node, not opened */
    uint64_t *owners;   /* [to - from] */
    uint32_t nch;       /* durable channels */
    char **names;       /* [nch] */
    tn_chanlog_t **cls; /* [nch][to - from] */
    tn_cursor_t *curs;
    int64_t stamp; /* written before the first local partition (0: none) */
    int rc;
    tn_delete_cb cb;
    void *arg;
} grow_t;

static void grow_work(uv_work_t *w)
{
    grow_t *g = TN_CONTAINER_OF(w, grow_t, work);
    tn_topic_t *t = g->t;
    uint32_t n = g->to - g->from;
    bool local = false;
    for (uint32_t k = 0; k < n; k++)
        local |= !g->remote[k];
    if (!local)
        g->stamp = 0;
    if (g->stamp != 0)
        g->rc = tn_store_topic_stamp_write(t->broker->store, t->name, g->stamp, true);
    for (uint32_t k = 0; k < n && g->rc == 0; k++)
        if (!g->remote[k])
            g->rc = tn_plog_open(t->broker->store, t->name, g->from + k, &g->plogs[k]);
    for (uint32_t c = 0; c < g->nch && g->rc == 0; c++) {
        for (uint32_t k = 0; k < n && g->rc == 0; k++)
            if (!g->remote[k])
                g->rc = tn_chanlog_open(t->broker->store, t->name, g->from + k, g->names[c], NULL,
                                        &g->cls[c * n + k], &g->curs[c * n + k]);
    }
}

static void grow_free(grow_t *g, bool close)
{
    uint32_t n = g->to - g->from;
    for (uint32_t k = 0; close && k < n; k++)
        if (g->plogs[k] != NULL)
            tn_plog_close(g->plogs[k], NULL);
    for (uint32_t i = 0; i < g->nch * n; i++) {
        if (close && g->cls[i] != NULL) {
            tn_chanlog_close(g->cls[i], NULL);
            tn_cursor_fini(&g->curs[i]);
        }
    }
    for (uint32_t c = 0; c < g->nch; c++)
        tn_free(g->names[c]);
    tn_free(g->names);
    tn_free(g->plogs);
    tn_free(g->remote);
    tn_free(g->owners);
    tn_free(g->cls);
    tn_free(g->curs);
    tn_free(g);
}

/* Give every channel its new partitions; false when out of memory. */
static bool grow_channels(grow_t *g)
{
    tn_topic_t *t = g->t;
    uint32_t n = g->to - g->from;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        tn_chpart_t **parts = tn_realloc(ch->parts, g->to * sizeof(*parts));
        if (parts == NULL)
            return false;
        ch->parts = parts;
        uint32_t c = 0;
        while (!ch->ephemeral && c < g->nch && strcmp(g->names[c], ch->name) != 0)
            c++;
        for (uint32_t k = 0; k < n; k++) {
            tn_chpart_t *cp = tn_calloc(1, sizeof(*cp));
            if (cp == NULL)
                return false;
            ch->parts[g->from + k] = cp;
            tn_cursor_t cur;
            tn_chanlog_t *cl = NULL;
            if (!ch->ephemeral && c < g->nch && !g->remote[k]) {
                cl = g->cls[c * n + k];
                cur = g->curs[c * n + k];
                g->cls[c * n + k] = NULL; /* the channel's now */
            } else {
                tn_cursor_init(&cur, 0);
            }
            if (tn__chpart_init(cp, ch, t->parts[g->from + k], cl, &cur) != 0)
                return false;
        }
    }
    return true;
}

/* The last step of every job that held the topic busy (a growth, a
 * placement, a stamp write), once its waiters ran: a deletion that waited
 * for it frees the topic now, else a placement change that came meanwhile
 * starts; the broker hears that one of its worker jobs ended. */
static void job_end(tn_topic_t *t)
{
    tn_broker_t *b = t->broker;
    if (t->deleted && t->busy == 0)
        tn__topic_free(t);
    else
        tn__topic_place_resume(t);
    tn__broker_work_done(b);
}

/* The end of a growth or a placement (grow_done, place_done), once its
 * work is freed: the topic is ready again, its waiters run, its channels
 * pump (rc 0), the caller hears rc, then a deletion that waited frees the
 * topic or a placement change that came meanwhile starts. */
static void reshape_end(tn_topic_t *t, int rc, tn_delete_cb cb, void *arg)
{
    t->growing = false;
    t->state = TN_OBJ_READY;
    tn__waiters_fire(&t->waiters, 0);
    if (rc == 0)
        tn__topic_pump_all(t);
    if (cb != NULL)
        cb(arg, rc);
    job_end(t);
}

static void grow_done(uv_work_t *w, int status)
{
    grow_t *g = TN_CONTAINER_OF(w, grow_t, work);
    tn_topic_t *t = g->t;
    tn_broker_t *b = t->broker;
    int rc = g->rc != 0 ? g->rc : status;
    t->busy--;
    if (rc == 0 && b->closing)
        rc = TN_ECLOSED;
    uint32_t n = g->to - g->from;
    tn_part_t **parts = rc == 0 ? tn_realloc(t->parts, g->to * sizeof(*parts)) : NULL;
    if (rc == 0 && parts == NULL)
        rc = UV_ENOMEM;
    if (rc == 0) {
        t->parts = parts;
        for (uint32_t k = 0; k < n; k++)
            t->parts[g->from + k] = NULL;
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            tn_part_t *p = tn_calloc(1, sizeof(*p));
            if (p == NULL) {
                rc = UV_ENOMEM;
                break;
            }
            p->topic = t;
            p->index = g->from + k;
            tn_u64map_init(&p->cache);
            p->plog = g->plogs[k];
            p->remote = g->remote[k];
            p->owner = g->owners[k];
            g->plogs[k] = NULL;
            t->parts[g->from + k] = p;
        }
    }
    /* Out of memory half-way through leaves the topic unusable: there is no
     * going back from partitions already handed out, so it fails loudly. */
    if (rc == 0 && !grow_channels(g))
        rc = UV_ENOMEM;
    if (rc == 0) {
        if (g->stamp != 0)
            tn_topic_stamped(t, g->stamp);
        for (uint32_t k = 0; k < n; k++) {
            tn_part_t *p = t->parts[g->from + k];
            if (p->remote)
                continue;
            tn__part_ready(p);
            if (t->durability >= 0)
                tn_plog_set_durability(p->plog, t->durability);
        }
        t->nparts = g->to;
        TN_LOG(TN_LOG_NOTICE, "topic %s grew to %" PRIu32 " partitions", t->name, t->nparts);
    } else {
        TN_LOG(TN_LOG_ERROR, "growing topic %s to %" PRIu32 " partitions failed: %s", t->name,
               g->to, tn_strerror(rc));
    }
    tn_delete_cb cb = g->cb;
    void *arg = g->arg;
    grow_free(g, rc != 0);
    reshape_end(t, rc, cb, arg);
}

int tn_topic_grow(tn_topic_t *t, uint32_t nparts, tn_delete_cb cb, void *arg)
{
    if (nparts <= t->nparts)
        return UV_EINVAL;
    if (t->state != TN_OBJ_READY || t->growing || t->stamping)
        return UV_EBUSY;
    uint32_t nch = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        if (ch->state != TN_OBJ_READY)
            return UV_EBUSY;
        nch += !ch->ephemeral;
    }
    uint32_t n = nparts - t->nparts;
    grow_t *g = tn_calloc(1, sizeof(*g));
    if (g == NULL)
        return UV_ENOMEM;
    g->t = t;
    g->from = t->nparts;
    g->to = nparts;
    g->cb = cb;
    g->arg = arg;
    g->nch = nch;
    g->plogs = tn_calloc(n, sizeof(*g->plogs));
    g->remote = tn_calloc(n, sizeof(*g->remote));
    g->owners = tn_calloc(n, sizeof(*g->owners));
    g->names = tn_calloc(nch + 1, sizeof(*g->names));
    g->cls = tn_calloc((size_t)nch * n + 1, sizeof(*g->cls));
    g->curs = tn_calloc((size_t)nch * n + 1, sizeof(*g->curs));
    bool ok = g->plogs != NULL && g->names != NULL && g->cls != NULL && g->curs != NULL &&
              g->remote != NULL && g->owners != NULL;
    /* The new partitions' record is committed: ask where each lives. */
    tn_broker_t *b = t->broker;
    for (uint32_t k = 0; ok && !t->memory && b->place != NULL && k < n; k++)
        g->remote[k] = !b->place(b->place_arg, t, g->from + k, &g->owners[k]);
    uint32_t c = 0;
    for (tn_channel_t *ch = t->channels; ok && ch != NULL; ch = ch->next) {
        if (ch->ephemeral)
            continue;
        ok = (g->names[c++] = tn_strdup(ch->name)) != NULL;
    }
    g->stamp = tn_topic_stamp_due(t);
    if (!ok || uv_queue_work(b->loop, &g->work, grow_work, grow_done) != 0) {
        grow_free(g, false);
        return UV_ENOMEM;
    }
    t->growing = true;
    t->state = TN_OBJ_CREATING;
    t->busy++;
    b->workers++;
    return 0;
}

/* --- placement ------------------------------------------------------------------ */

void tn__topic_place_new(tn_topic_t *t, uint32_t from)
{
    tn_broker_t *b = t->broker;
    if (t->memory || b->place == NULL)
        return;
    for (uint32_t i = from; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        p->owner = 0;
        p->remote = !b->place(b->place_arg, t, i, &p->owner);
        if (!p->remote)
            p->owner = 0;
    }
}

void tn_topic_set_durability(tn_topic_t *t, int mode)
{
    t->durability = mode;
    for (uint32_t i = 0; i < t->nparts; i++)
        if (t->parts[i]->plog != NULL && !t->parts[i]->remote)
            tn_plog_set_durability(t->parts[i]->plog, mode);
}

/* Opening partitions newly placed here: on a worker thread, their logs and
 * the logs of the topic's durable channels on them, from their files (a
 * partition never held here starts empty, its channels at their first
 * offset). A channel log the engine still holds for such a partition (one
 * led here before whose log was abandoned, tn_topic_part_abandon, while its
 * channel logs took a follower's records, tn_broker_chan_apply) is closed
 * first, after its queued records (place_close_held): two log objects on
 * one WAL must never be open together, and the one opened from the files
 * then holds everything the old one wrote. */
typedef struct {
    uv_work_t work;
    tn_topic_t *t;
    uint32_t n;         /* partitions to open */
    uint32_t *idx;      /* [n] */
    tn_plog_t **plogs;  /* [n] */
    uint32_t nch;       /* durable channels */
    char **names;       /* [nch] */
    tn_chanlog_t **cls; /* [nch][n] */
    tn_cursor_t *curs;
    uint32_t closing; /* held channel logs still closing, + 1 while they start */
    int64_t stamp;    /* written before the partitions (0: none) */
    int rc;
    tn_delete_cb cb;
    void *arg;
} place_t;

#ifdef TN_TEST
/* TERN_TEST_PLACE_DELAY_MS=n (ternd-test): every placement's work waits n
 * ms first, and so does a creation's job that opens partitions here
 * (broker.c topic_create_work: a replicated partition handed over before
 * the engine had its topic opens with the topic), so that a test can
 * reach a topic while its partitions are being opened here, whichever
 * job opens them (its state is CREATING until place_done or
 * topic_create_done). */
void tn__place_test_delay(const tn_topic_t *t)
{
    const char *v = getenv("TERN_TEST_PLACE_DELAY_MS");
    if (v == NULL || atoi(v) <= 0)
        return;
    TN_LOG(TN_LOG_NOTICE, "placement of %s held %d ms (TERN_TEST_PLACE_DELAY_MS)", t->name,
           atoi(v));
    uv_sleep((unsigned int)atoi(v));
}
#endif

static void place_work(uv_work_t *w)
{
    place_t *o = TN_CONTAINER_OF(w, place_t, work);
    tn_topic_t *t = o->t;
    tn__place_test_delay(t);
    if (o->stamp != 0 && o->n > 0)
        o->rc = tn_store_topic_stamp_write(t->broker->store, t->name, o->stamp, true);
    for (uint32_t k = 0; k < o->n && o->rc == 0; k++)
        o->rc = tn_plog_open(t->broker->store, t->name, o->idx[k], &o->plogs[k]);
    for (uint32_t c = 0; c < o->nch && o->rc == 0; c++)
        for (uint32_t k = 0; k < o->n && o->rc == 0; k++)
            o->rc = tn_chanlog_open(t->broker->store, t->name, o->idx[k], o->names[c], NULL,
                                    &o->cls[c * o->n + k], &o->curs[c * o->n + k]);
}

/* Free o; close: the logs it still holds (the opening failed). */
static void place_free(place_t *o, bool close)
{
    for (uint32_t k = 0; k < o->n && o->plogs != NULL; k++)
        if (close && o->plogs[k] != NULL)
            tn_plog_close(o->plogs[k], NULL);
    for (uint32_t i = 0; o->cls != NULL && i < o->nch * o->n; i++) {
        if (o->cls[i] != NULL) {
            tn_chanlog_close(o->cls[i], NULL);
            tn_cursor_fini(&o->curs[i]);
        }
    }
    for (uint32_t c = 0; o->names != NULL && c < o->nch; c++)
        tn_free(o->names[c]);
    tn_free(o->names);
    tn_free(o->idx);
    tn_free(o->plogs);
    tn_free(o->cls);
    tn_free(o->curs);
    tn_free(o);
}

/* Hand the opened logs to the partitions and their channels. false when
 * out of memory part-way (the topic's channels are then unusable on those
 * partitions, as after a failed growth). */
static bool place_install(place_t *o)
{
    tn_topic_t *t = o->t;
    for (uint32_t k = 0; k < o->n; k++) {
        tn_part_t *p = t->parts[o->idx[k]];
        /* Only a partition with no log is placed (tn_topic_follow_placement),
         * and nothing gives it one while it opens (the topic is busy): a log
         * overwritten here would stay open beside this one on its files. */
        TN_ASSERT(p->plog == NULL);
        p->plog = o->plogs[k];
        o->plogs[k] = NULL;
        p->remote = false;
        p->opening = false;
        p->owner = 0;
        tn__part_ready(p);
        if (t->durability >= 0)
            tn_plog_set_durability(p->plog, t->durability);
    }
    bool ok = true;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        uint32_t c = 0;
        while (!ch->memory && c < o->nch && strcmp(o->names[c], ch->name) != 0)
            c++;
        for (uint32_t k = 0; k < o->n; k++) {
            tn_chpart_t *cp = ch->parts[o->idx[k]];
            tn_cursor_t cur;
            tn_chanlog_t *cl = NULL;
            if (!ch->memory && c < o->nch) {
                cl = o->cls[c * o->n + k];
                cur = o->curs[c * o->n + k];
                o->cls[c * o->n + k] = NULL; /* the channel's now */
            } else {
                tn_cursor_init(&cur, 0);
            }
            TN_ASSERT(cp->cl == NULL); /* closed by place_close_held */
            if (tn__chpart_reset(cp, cl, &cur) != 0)
                ok = false;
        }
    }
    return ok;
}

static void place_done(uv_work_t *w, int status)
{
    place_t *o = TN_CONTAINER_OF(w, place_t, work);
    tn_topic_t *t = o->t;
    tn_broker_t *b = t->broker;
    int rc = o->rc != 0 ? o->rc : status;
    t->busy--;
    if (rc == 0 && b->closing)
        rc = TN_ECLOSED;
    if (rc == 0 && !place_install(o))
        rc = UV_ENOMEM;
    if (rc == 0) {
        if (o->stamp != 0 && o->n > 0)
            tn_topic_stamped(t, o->stamp);
        for (uint32_t k = 0; k < o->n; k++)
            TN_LOG(TN_LOG_NOTICE, "partition %s/%" PRIu32 " is placed on this node: opened",
                   t->name, o->idx[k]);
    } else {
        for (uint32_t k = 0; k < o->n; k++)
            t->parts[o->idx[k]]->opening = false;
        if (rc != TN_ECLOSED)
            TN_LOG(TN_LOG_ERROR,
                   "opening %" PRIu32 " partition(s) of %s placed on this node failed: %s; "
                   "they stay remote until the next placement change",
                   o->n, t->name, tn_strerror(rc));
    }
    tn_delete_cb cb = o->cb;
    void *arg = o->arg;
    /* Told once the topic is ready again (a listener's publish goes on
     * at once), by name: reshape_end may free a topic deleted meanwhile. */
    char opened[TN_NAME_MAX + 1];
    snprintf(opened, sizeof(opened), "%s", rc == 0 && o->n > 0 && !t->deleted ? t->name : "");
    place_free(o, rc != 0);
    reshape_end(t, rc, cb, arg);
    if (opened[0] != '\0' && !b->closing)
        tn__broker_event(b, TN_EV_PARTS_OPENED, opened, NULL);
}

/* One held channel log of o's partitions closed, or place_close_held
 * asked them all to: once none is left, the partitions are opened from
 * their files on a worker. A broker closing meanwhile opens nothing. */
static void place_closed_one(place_t *o)
{
    if (--o->closing > 0)
        return;
    tn_broker_t *b = o->t->broker;
    if (o->rc == 0 && b->closing)
        o->rc = TN_ECLOSED;
    o->stamp = tn_topic_stamp_due(o->t);
    if (o->rc == 0 && uv_queue_work(b->loop, &o->work, place_work, place_done) == 0)
        return;
    if (o->rc == 0)
        o->rc = UV_ENOMEM;
    place_done(&o->work, 0);
}

static void on_place_held_closed(tn_chanlog_t *cl)
{
    place_t *o = cl->data;
    tn_topic_t *t = o->t;
    /* Its records' completions ran before (the close waits for them, and
     * they read cp->cl): the channel partition lets go of it only now. */
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        for (uint32_t k = 0; k < o->n; k++)
            if (ch->parts[o->idx[k]]->cl == cl)
                ch->parts[o->idx[k]]->cl = NULL;
    place_closed_one(o);
}

/* Close the channel logs the engine still holds on o's partitions, then
 * open them (place_closed_one). Each stays cp->cl until it is closed, so
 * that the completions of its queued records (on_walop) and the waits on
 * them (tn_channel_sync) end as ever; the channel partition is broken
 * meanwhile (a record for it is refused: the log is closing), and
 * place_install resets it. The topic is busy (tn_topic_busy) from here
 * to place_done, so nothing else closes or drops these logs meanwhile. */
static void place_close_held(place_t *o)
{
    tn_topic_t *t = o->t;
    o->closing = 1; /* this call's own, dropped at the end */
    uint32_t nheld = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        for (uint32_t k = 0; k < o->n; k++) {
            tn_chpart_t *cp = ch->parts[o->idx[k]];
            if (cp->cl == NULL)
                continue;
            cp->broken = true;
            cp->cl->data = o;
            o->closing++;
            nheld++;
            tn_chanlog_close(cp->cl, on_place_held_closed);
        }
    }
    if (nheld > 0)
        TN_LOG(TN_LOG_NOTICE,
               "topic %s: closing %" PRIu32 " channel log(s) still held for partition(s) placed "
               "here again, to open them from their files",
               t->name, nheld);
    place_closed_one(o);
}

/* --- the stamp ------------------------------------------------------------------- */

int64_t tn_topic_stamp_due(const tn_topic_t *t)
{
    return !t->memory && t->record_created_ms > 0 && t->stamp_ms != t->record_created_ms
               ? t->record_created_ms
               : 0;
}

void tn_topic_stamped(tn_topic_t *t, int64_t ms)
{
    t->stamp_ms = ms;
}

typedef struct {
    uv_work_t work;
    tn_topic_t *t;
    int64_t ms;
    int rc;
} stamp_job_t;

static void stamp_work(uv_work_t *w)
{
    stamp_job_t *j = TN_CONTAINER_OF(w, stamp_job_t, work);
    j->rc = tn_store_topic_stamp_write(j->t->broker->store, j->t->name, j->ms, false);
}

static void stamp_done(uv_work_t *w, int status)
{
    stamp_job_t *j = TN_CONTAINER_OF(w, stamp_job_t, work);
    tn_topic_t *t = j->t;
    int rc = j->rc != 0 ? j->rc : status;
    t->busy--;
    t->stamping = false;
    if (rc == 0) {
        tn_topic_stamped(t, j->ms);
        /* The directory may be here now for a replica's copy, which the
         * next start loads: a pause kept in memory for want of one is
         * written, as a channel's is beside its stamp (before the waiters:
         * a deletion waits for that write too). */
        tn__topic_pause_dir_made(t);
    } else {
        TN_LOG_RL(TN_LOG_WARN, 60000, "topic %s: writing its stamp failed: %s; tried again later",
                  t->name, tn_strerror(rc));
    }
    tn_free(j);
    tn__waiters_fire(&t->waiters, 0); /* a deletion or growth waiting for it */
    job_end(t);
}

bool tn__topic_dir_here(const tn_topic_t *t, bool copy_here)
{
    bool local = copy_here;
    for (uint32_t i = 0; i < t->nparts; i++)
        local |= t->parts[i]->plog != NULL;
    return local;
}

void tn_topic_keep_stamp(tn_topic_t *t, bool copy_here)
{
    int64_t ms = tn_topic_stamp_due(t);
    if (ms == 0 || tn_topic_busy(t) || t->deleted || t->broker->closing)
        return;
    if (!tn__topic_dir_here(t, copy_here))
        return;
    stamp_job_t *j = tn_calloc(1, sizeof(*j));
    if (j == NULL)
        return;
    j->t = t;
    j->ms = ms;
    if (uv_queue_work(t->broker->loop, &j->work, stamp_work, stamp_done) != 0) {
        tn_free(j);
        return;
    }
    /* Busy, serving on: a deletion, which would move the directory away
     * and let a topic of the name make a new one, waits for it. */
    t->stamping = true;
    t->busy++;
    t->broker->workers++;
}

/* --- the node's pause ------------------------------------------------------------ */

/* An answer waiting for the pause file to hold the ask seq. */
struct tn__tpause_wait_s {
    tpause_wait_t *next;
    uint64_t seq;
    tn_topic_pause_cb cb;
    void *arg;
};

typedef struct {
    uv_work_t work;
    tn_topic_t *t;
    bool paused;
    bool written;    /* the topic has a directory here: the file was written */
    uint64_t covers; /* the asks (t->pause_asked) this write covers */
    /* A pause with the topic's stamp not in its directory here (none
     * there: no copy of any partition here) writes it first, making the
     * directory, so that the pause is durable there too and a restart
     * knows which topic it is of (topic_create_work). 0: nothing. */
    int64_t stamp_ms;
    int rc;
    uint32_t n;
    uint64_t holds[];
} tpause_job_t;

#ifdef TN_TEST
/* TERN_TEST_TOPIC_PAUSE_DELAY_MS=n (ternd-test, unit tests): every topic
 * pause write waits n ms after the file's write (or its finding no
 * directory) and before its end, so that a test can have a partition
 * made here between the two, as a worker descheduled there would. */
static void tpause_test_delay(const tpause_job_t *j)
{
    const char *v = getenv("TERN_TEST_TOPIC_PAUSE_DELAY_MS");
    if (v == NULL || atoi(v) <= 0)
        return;
    TN_LOG(TN_LOG_NOTICE, "pause write of topic %s held %d ms (TERN_TEST_TOPIC_PAUSE_DELAY_MS)",
           j->t->name, atoi(v));
    uv_sleep((unsigned int)atoi(v));
}
#else
#define tpause_test_delay(j) ((void)(j))
#endif

static void tpause_work(uv_work_t *w)
{
    tpause_job_t *j = TN_CONTAINER_OF(w, tpause_job_t, work);
    if (j->stamp_ms > 0)
        j->rc = tn_store_topic_stamp_write(j->t->broker->store, j->t->name, j->stamp_ms, true);
    if (j->rc == 0)
        j->rc = tn_store_topic_pause_write(j->t->broker->store, j->t->name, j->paused, j->holds,
                                           j->n, &j->written);
    tpause_test_delay(j);
}

/* End the cuts held for t's pause file (tn__topic_hold_cut) that the
 * finished write covers (all of them when it failed or cannot start: the
 * store fails their logs). */
static void tpause_cuts_run(tn_topic_t *t, uint64_t covers, int status)
{
    tn_store_cut_t **pp = &t->pause_cuts;
    while (*pp != NULL) {
        tn_store_cut_t *c = *pp;
        if (status == 0 && c->seq > covers) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        tn_store_cut_done(c, status);
    }
}

/* End the waits the finished write covers (all of them when it failed:
 * the answer says so), the cuts held for it first. */
static void tpause_waits_run(tn_topic_t *t, uint64_t covers, int status)
{
    tpause_cuts_run(t, covers, status);
    tpause_wait_t **pp = &t->pause_waits;
    while (*pp != NULL) {
        tpause_wait_t *w = *pp;
        if (status == 0 && w->seq > covers) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        tn_topic_pause_cb cb = w->cb;
        void *arg = w->arg;
        tn_free(w);
        cb(arg, status);
    }
}

static void tpause_write_start(tn_topic_t *t);

/* A pause file write (of paused) failed: every ask it covers, and every
 * one since, is answered with the error (tpause_waits_run), so the topic
 * is taken back to the pause the file held before, as the channel's
 * pause is (tn__pause_take_back; a write asked is written next,
 * tpause_done, no answer waiting for it). Its hold points are those of
 * the pause the file holds (an unpause leaves them as they were; a pause
 * that set them anew is taken back by going unpaused), and that write
 * carries them. What an unpause handed to the channels before its write
 * failed stays theirs. */
static void tpause_take_back(tn_topic_t *t, bool paused)
{
    if (!tn__pause_take_back(&t->paused, t->paused_kept, paused, &t->pause_asked))
        return;
    TN_LOG(TN_LOG_WARN, "topic %s: %s again, as its pause file says", t->name,
           t->paused ? "paused" : "unpaused");
    if (!t->paused)
        tn__topic_pump_all(t);
}

static void tpause_done(uv_work_t *w, int status)
{
    tpause_job_t *j = TN_CONTAINER_OF(w, tpause_job_t, work);
    tn_topic_t *t = j->t;
    int rc = j->rc != 0 ? j->rc : status;
    uint64_t covers = j->covers;
    t->busy--;
    t->pause_writing = false;
    if (rc == 0) {
        if (j->stamp_ms > 0)
            tn_topic_stamped(t, j->stamp_ms);
        t->pause_done = covers;
        t->pause_dirless = !j->written;
        t->paused_kept = j->paused;
    } else {
        TN_LOG_RL(TN_LOG_ERROR, 60000, "topic %s: writing its pause file failed: %s", t->name,
                  tn_strerror(rc));
        if (!t->deleted && t->state != TN_OBJ_DELETING)
            tpause_take_back(t, j->paused);
    }
    tn_free(j);
    tpause_waits_run(t, covers, rc);
    /* Asked again while it ran: the next write, unless the topic goes. */
    if (t->pause_asked > covers)
        tpause_write_start(t);
    /* A deletion waiting for it (tn_topic_wait_idle); not while the topic
     * is being made, placed, grown or stamped: their ends wake them. */
    if (t->state == TN_OBJ_READY && !t->growing && !t->stamping && !t->pause_writing)
        tn__waiters_fire(&t->waiters, 0);
    job_end(t);
}

/* Write t's pause (and each partition's hold point while paused),
 * covering every ask so far. A write that cannot start ends the waits
 * with its error. */
static void tpause_write_start(tn_topic_t *t)
{
    if (t->state == TN_OBJ_DELETING || t->deleted || t->broker->closing) {
        tpause_waits_run(t, UINT64_MAX, TN_ECLOSED);
        return;
    }
    uint32_t n = t->paused ? t->nparts : 0;
    tpause_job_t *j = tn_calloc(1, sizeof(*j) + n * sizeof(j->holds[0]));
    if (j == NULL) {
        tpause_waits_run(t, UINT64_MAX, UV_ENOMEM);
        return;
    }
    j->t = t;
    j->paused = t->paused;
    j->covers = t->pause_asked;
    /* Paused: the directory is made for the file when there is none (its
     * record known: a cluster's topic); unpaused needs none, as no file
     * there is read as unpaused. */
    j->stamp_ms = t->paused ? tn_topic_stamp_due(t) : 0;
    j->n = n;
    for (uint32_t i = 0; i < n; i++)
        j->holds[i] = t->parts[i]->hold_file; /* never past durable settles: theld_t */
    if (uv_queue_work(t->broker->loop, &j->work, tpause_work, tpause_done) != 0) {
        tn_free(j);
        tpause_waits_run(t, UINT64_MAX, UV_ENOMEM);
        return;
    }
    /* Busy for a deletion (tn_topic_delete, tn_topic_wait_idle), serving on. */
    t->pause_writing = true;
    t->busy++;
    t->broker->workers++;
}

/* End w (not on a list) with status. */
static void tpause_wait_end(tpause_wait_t *w, int status)
{
    tn_topic_pause_cb cb = w->cb;
    void *arg = w->arg;
    tn_free(w);
    cb(arg, status);
}

static tpause_wait_t *tpause_wait_new(tn_topic_pause_cb cb, void *arg)
{
    tpause_wait_t *w = tn_calloc(1, sizeof(*w));
    if (w != NULL) {
        w->cb = cb;
        w->arg = arg;
    }
    return w;
}

/* Ask for a write of t's pause as it is now; w (may be NULL; transferred)
 * ends once the file holds it: at once for an ephemeral topic. */
static void tpause_ask(tn_topic_t *t, tpause_wait_t *w)
{
    if (t->memory) {
        if (w != NULL) {
            tn_topic_pause_cb cb = w->cb;
            void *arg = w->arg;
            tn_free(w);
            cb(arg, 0);
        }
        return;
    }
    t->pause_asked++;
    if (w != NULL) {
        w->seq = t->pause_asked;
        w->next = t->pause_waits;
        t->pause_waits = w;
    }
    if (!t->pause_writing)
        tpause_write_start(t);
}

void tn__topic_pause_dir_made(tn_topic_t *t)
{
    /* A write under way may have found no directory yet (its end sets
     * pause_dirless): one more after it. */
    if (t->paused && (t->pause_dirless || t->pause_writing) && !t->memory)
        tpause_ask(t, NULL);
}

/* A cut of the partition's log (a follower's copy cut at a divergence
 * point, or emptied for a reset: cluster/replica.c) removes records below
 * the hold point that the pause saw, and the copy then takes others at
 * the same offsets: the new leader's, which arrived here after the pause.
 * So the hold point never stays above a cut: it comes down to it, as does
 * the one the file may take, and the file is written with it (otherwise a
 * restart would take the old point back). Clean elections never cut
 * below it (it was at most the hw at the pause, and a follower never cuts
 * below its hw); a follower's hw starts at 0 after a restart, and an
 * unclean election may have lost records below it. It counts in
 * pause_epoch: an emptying started before it took its targets from the
 * old log and moves no point past the cut (theld_t).
 *
 * The truncation completes (its caller appends at the cut offsets) only
 * once a write covering the lowered point has ended: wait is kept on
 * pause_cuts with the ask's seq, and so is that of a cut above the point
 * while another waits (the file does not hold their point yet). A
 * failed write fails the cut's log (tn_store_cut_done): retrying would
 * hold the partition's replication on a disk that cannot write a small
 * file, and a failed log refuses the records a restart would deliver
 * (the restart clamps the file's point to the log's end: load_pause). So
 * does a write that cannot start (the broker closing; tn__topic_free ends
 * what is left). A deletion waits for the writes (tn_topic_wait_idle),
 * so for the cuts. A topic not paused, or ephemeral (no file), keeps
 * nothing: the cut completes at once, with no write. A damaged copy's
 * repair (storage/plog.h, tn_plog_repair) comes here as a cut at its
 * base before it changes anything: a failed write fails the repair
 * instead, the copy unchanged and still isolated. */
bool tn__topic_hold_cut(tn_topic_t *t, uint32_t p, uint64_t cut, tn_store_cut_t *wait)
{
    if (p >= t->nparts || !t->paused || t->memory || t->deleted || t->state == TN_OBJ_DELETING)
        return false;
    tn_part_t *part = t->parts[p];
    bool lower = part->hold > cut || part->hold_file > cut;
    /* The file may not hold the point in memory yet: a write is under
     * way, or the last one failed (a repair it failed comes again). */
    bool stale = t->pause_done < t->pause_asked;
    if (!lower && !stale && t->pause_cuts == NULL)
        return false;
    /* On the list first: a write that cannot start ends it at once. With
     * a write under way, the last ask covers it (the next write follows
     * that one); after a failed one, a new write. */
    bool ask = lower || (stale && !t->pause_writing);
    wait->seq = t->pause_asked + (ask ? 1 : 0);
    wait->next = t->pause_cuts;
    t->pause_cuts = wait;
    if (lower) {
        TN_LOG(TN_LOG_NOTICE,
               "partition %s/%" PRIu32 ": its log was cut (or repaired from the leader) at %" PRIu64
               ", below the pause's hold point %" PRIu64
               ": what it takes from there on is held too, until /topic/unpause",
               t->name, p, cut, part->hold);
        part->hold = TN_MIN(part->hold, cut);
        part->hold_file = TN_MIN(part->hold_file, cut);
        t->pause_epoch++;
    }
    if (ask)
        tpause_ask(t, NULL);
    return true;
}

int tn_topic_pause(tn_topic_t *t, bool paused, tn_topic_pause_cb cb, void *arg)
{
    if (t->state != TN_OBJ_READY)
        return UV_EBUSY;
    tpause_wait_t *w = NULL;
    if (cb != NULL && (w = tpause_wait_new(cb, arg)) == NULL)
        return UV_ENOMEM;
    /* Each partition led here holds from its delivery limit; one not led
     * here holds from 0 should it come to lead here while paused (never
     * from a point an earlier pause left it). */
    if (paused && !t->paused) {
        for (uint32_t i = 0; i < t->nparts; i++) {
            tn_part_t *p = t->parts[i];
            p->hold = p->remote ? 0 : tn__part_limit(p);
            p->hold_file = p->hold;
        }
        t->pause_epoch++; /* an emptying still waiting moves nothing (theld_t) */
    }
    t->paused = paused;
    tpause_ask(t, w);
    if (!paused)
        tn__topic_pump_all(t);
    return 0;
}

bool tn_topic_busy(const tn_topic_t *t)
{
    if (t->state != TN_OBJ_READY || t->growing || t->stamping)
        return true;
    for (const tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        if (ch->state != TN_OBJ_READY)
            return true;
    return false;
}

int tn_topic_wait_idle(tn_topic_t *t, tn_waiter_t *w)
{
    if (t->state == TN_OBJ_CREATING || t->stamping || t->pause_writing) {
        w->next = t->waiters;
        t->waiters = w;
        return UV_EAGAIN;
    }
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        if (ch->state == TN_OBJ_CREATING) {
            w->next = ch->waiters;
            ch->waiters = w;
            return UV_EAGAIN;
        }
    }
    return t->state == TN_OBJ_READY ? 0 : UV_EBUSY;
}

void tn__topic_place_resume(tn_topic_t *t)
{
    if (!t->place_again || tn_topic_busy(t) || t->deleted || t->broker->closing)
        return;
    t->place_again = false;
    (void)tn_topic_follow_placement(t, NULL, NULL);
}

void tn_topic_part_hold(tn_topic_t *t, uint32_t p, bool held)
{
    if (p >= t->nparts || t->parts[p]->held == held)
        return;
    t->parts[p]->held = held;
    if (!held)
        tn__topic_pump_all(t);
}

void tn_broker_hold_recovered(tn_broker_t *b, bool held)
{
    for (size_t i = 0; i < b->nbuckets; i++)
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            bool resumed = false;
            for (uint32_t p = 0; p < t->nparts; p++) {
                resumed = resumed || (t->parts[p]->start_held && !held);
                t->parts[p]->start_held = held && !t->memory;
            }
            if (resumed)
                tn__topic_pump_all(t);
        }
}

void tn_topic_part_lease(tn_topic_t *t, uint32_t p, uint64_t until)
{
    if (p >= t->nparts || t->parts[p]->lease_until == until)
        return;
    uint64_t now = uv_now(t->broker->loop);
    uint64_t was = t->parts[p]->lease_until;
    t->parts[p]->lease_until = until;
    if (was != 0 && was <= now && (until == 0 || until > now))
        tn__topic_pump_all(t); /* lapsed, renewed */
}

tn_topic_t *tn_broker_topic_find(tn_broker_t *b, const char *name)
{
    return tn__topic_find(b, name, strlen(name));
}

/* Whether work started before remote partition p was set aside (a read,
 * tn__part_fetch; a collection; an advance) may still use its log on a
 * worker or the committer, or the topic is busy (tn_topic_busy). */
static bool aside_busy(const tn_topic_t *t, const tn_part_t *part)
{
    return tn_topic_busy(t) || part->opening || part->gc_busy || part->fetch != NULL ||
           part->advancing;
}

int tn_topic_part_abandon(tn_topic_t *t, uint32_t p)
{
    if (p >= t->nparts || !t->parts[p]->remote || t->parts[p]->plog == NULL)
        return 0;
    tn_part_t *part = t->parts[p];
    if (aside_busy(t, part))
        return UV_EBUSY;
    /* Set aside, it is no longer the partition's: on_progress and data
     * were cleared then, and nothing of the engine starts work on a remote
     * partition's log. */
    tn_plog_abandon(part->plog, NULL);
    part->plog = NULL;
    TN_LOG(TN_LOG_NOTICE,
           "partition %s/%" PRIu32 ": the log set aside here was written through another "
           "since; closed, to be opened from its files when served here again",
           t->name, p);
    return 0;
}

/* tn_topic_part_release: the logs still closing. */
typedef struct {
    uint32_t left;
    tn_delete_cb cb;
    void *arg;
} release_t;

static void release_step(release_t *r)
{
    if (--r->left > 0)
        return;
    r->cb(r->arg, 0);
    tn_free(r);
}

static void on_release_plog(tn_plog_t *plog)
{
    release_step(plog->data);
}

static void on_release_cl(tn_chanlog_t *cl)
{
    release_step(cl->data);
}

int tn_topic_part_release(tn_topic_t *t, uint32_t p, tn_delete_cb cb, void *arg)
{
    if (p >= t->nparts || !t->parts[p]->remote || t->parts[p]->opening)
        return p >= t->nparts ? UV_EINVAL : UV_EBUSY;
    tn_part_t *part = t->parts[p];
    if (part->plog != NULL && aside_busy(t, part))
        return UV_EBUSY;
    if (tn_topic_busy(t))
        return UV_EBUSY;
    /* A channel log with records in flight (a follower's records applied
     * through the engine, tn_broker_chan_apply) or waits on it: their
     * completions look at cp->cl, so it closes only once they ended. */
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        tn_chpart_t *cp = ch->parts[p];
        if (cp != NULL && cp->cl != NULL &&
            (tn_chanlog_submitted(cp->cl) != tn_chanlog_completed(cp->cl) || cp->sync_head != NULL))
            return UV_EBUSY;
    }
    release_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return UV_ENOMEM;
    r->cb = cb;
    r->arg = arg;
    r->left = 1; /* this call's own, dropped at the end */
    uint32_t ncl = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
        tn_chpart_t *cp = ch->parts[p];
        if (cp == NULL || cp->cl == NULL)
            continue;
        /* Placed here again, the partition's channel state is opened
         * from its files with it (place_install resets cp). */
        cp->broken = true;
        cp->cl->data = r;
        r->left++;
        ncl++;
        tn_chanlog_close(cp->cl, on_release_cl);
        cp->cl = NULL;
    }
    if (part->plog != NULL) {
        /* As tn_topic_part_abandon: what it ends at may be stale, and the
         * copy is never served from it again. */
        part->plog->data = r;
        r->left++;
        tn_plog_abandon(part->plog, on_release_plog);
        part->plog = NULL;
    }
    TN_LOG(TN_LOG_NOTICE,
           "partition %s/%" PRIu32 ": closing what this node held of it (%s%" PRIu32
           " channel log(s)): no longer used here",
           t->name, p, r->left > ncl + 1 ? "its log and " : "", ncl);
    release_step(r);
    return 0;
}

int tn_topic_follow_placement(tn_topic_t *t, tn_delete_cb cb, void *arg)
{
    tn_broker_t *b = t->broker;
    if (t->memory || b->place == NULL || b->closing || t->deleted) {
        if (cb != NULL)
            cb(arg, 0);
        return 0;
    }
    if (tn_topic_busy(t)) {
        /* It asks again once the creation, growth or channel ends. */
        t->place_again = true;
        if (cb != NULL)
            cb(arg, 0);
        return 0;
    }
    uint32_t nopen = 0;
    bool left = false; /* a partition served here went to another node */
    for (uint32_t i = 0; i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        uint64_t owner = 0;
        bool here = b->place(b->place_arg, t, i, &owner);
        if (!p->remote) {
            /* Unplaced keeps what is here; only another owner takes it,
             * or, for a replicated partition, any leader but this node or
             * none (offline: owner 0): a copy not led here is never served
             * (a stale one, one the metastore no longer lists here). */
            bool repl = !here && b->place_readopt != NULL && b->place_readopt(b->place_arg, t, i);
            if (!here && (owner != 0 || repl)) {
                p->remote = true;
                p->left_count++;
                p->owner = owner;
                left = true;
                for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
                    tn__chpart_left(ch->parts[i]);
                if (p->plog != NULL && repl) {
                    /* A replicated partition's leader stepped down (or a
                     * copy not led here was found at start): its log is
                     * set aside for the replica manager to follow on, or
                     * to quarantine; the tail cache would outlive a
                     * truncation there. */
                    tn__cache_drop_part(p);
                    p->plog->on_progress = NULL;
                    p->plog->data = NULL;
                    if (owner != 0)
                        TN_LOG(TN_LOG_NOTICE,
                               "partition %s/%" PRIu32 " is led by node %" PRIu64
                               ": no longer served from this node",
                               t->name, i, owner);
                    else
                        TN_LOG(TN_LOG_NOTICE,
                               "partition %s/%" PRIu32 " has no leader (offline): not served "
                               "from this node's copy",
                               t->name, i);
                    continue;
                }
                TN_LOG(TN_LOG_WARN,
                       "partition %s/%" PRIu32 " is owned by node %" PRIu64
                       " but its log is here: it is no longer served from this node; its files "
                       "are left on disk, untouched",
                       t->name, i, owner);
            }
            continue;
        }
        if (!here) {
            p->owner = owner;
            continue;
        }
        if (p->plog != NULL && b->place_readopt != NULL && b->place_readopt(b->place_arg, t, i)) {
            /* A replicated partition led here again: its set-aside log
             * (followed meanwhile, so its tail may have changed) is
             * served again, the cache starting afresh. */
            tn__cache_drop_part(p);
            p->remote = false;
            p->owner = 0;
            tn__part_ready(p);
            if (t->durability >= 0)
                tn_plog_set_durability(p->plog, t->durability);
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
                tn__chpart_take_pause(ch->parts[i]);
            TN_LOG(TN_LOG_NOTICE, "partition %s/%" PRIu32 " is led by this node: served again",
                   t->name, i);
            tn__topic_pump_all(t);
            continue;
        }
        if (p->plog != NULL) {
            /* Set aside above for another owner. Owners are sticky, so the
             * metastore does not give it back while this node runs; should
             * it, channels made meanwhile have no log on it, and a
             * restart, which loads it from disk, serves it again. */
            continue;
        }
        nopen++;
    }
    if (left) {
        /* Its consumers here that asked (tn_consumer_t.moved, NSQ's) are
         * dropped, to look the topic up again and find the new leader. */
        tn__topic_moved_away(t);
    }
    if (nopen == 0) {
        if (cb != NULL)
            cb(arg, 0);
        return 0;
    }
    uint32_t nch = 0;
    for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next)
        nch += !ch->memory;
    place_t *o = tn_calloc(1, sizeof(*o));
    if (o == NULL)
        return UV_ENOMEM;
    o->t = t;
    o->n = nopen;
    o->nch = nch;
    o->cb = cb;
    o->arg = arg;
    o->idx = tn_calloc(nopen, sizeof(*o->idx));
    o->plogs = tn_calloc(nopen, sizeof(*o->plogs));
    o->names = tn_calloc(nch + 1, sizeof(*o->names));
    o->cls = tn_calloc((size_t)nch * nopen + 1, sizeof(*o->cls));
    o->curs = tn_calloc((size_t)nch * nopen + 1, sizeof(*o->curs));
    bool ok =
        o->idx != NULL && o->plogs != NULL && o->names != NULL && o->cls != NULL && o->curs != NULL;
    uint32_t k = 0;
    for (uint32_t i = 0; ok && i < t->nparts; i++) {
        tn_part_t *p = t->parts[i];
        uint64_t owner = 0;
        if (p->remote && p->plog == NULL && b->place(b->place_arg, t, i, &owner))
            o->idx[k++] = i;
    }
    uint32_t c = 0;
    for (tn_channel_t *ch = t->channels; ok && ch != NULL; ch = ch->next)
        if (!ch->memory)
            ok = (o->names[c++] = tn_strdup(ch->name)) != NULL;
    if (!ok || k != nopen) {
        place_free(o, false);
        return UV_ENOMEM;
    }
    for (k = 0; k < nopen; k++)
        t->parts[o->idx[k]]->opening = true;
    t->growing = true;
    t->state = TN_OBJ_CREATING;
    t->busy++;
    b->workers++;
    place_close_held(o); /* then the work; place_done ends it */
    return 0;
}

/* --- deleting by name ------------------------------------------------------------ */

typedef struct {
    tn_waiter_t w; /* first: the waiter is the request */
    tn_broker_t *b;
    char *topic;
    char *channel; /* NULL: the topic */
    tn_delete_cb cb;
    void *arg;
} named_del_t;

static void named_del_step(named_del_t *d);

static void on_named_del_wait(tn_waiter_t *w, int status)
{
    named_del_t *d = (named_del_t *)w;
    if (status == TN_ECLOSED || d->b->closing) {
        d->cb(d->arg, TN_ECLOSED);
        tn_free(d->topic);
        tn_free(d->channel);
        tn_free(d);
        return;
    }
    named_del_step(d); /* made, or failed to be: look again */
}

static void on_named_deleted(void *arg, int status)
{
    named_del_t *d = arg;
    d->cb(d->arg, status);
    tn_free(d->topic);
    tn_free(d->channel);
    tn_free(d);
}

static void named_del_step(named_del_t *d)
{
    tn_topic_t *t = NULL;
    tn_channel_t *ch = NULL;
    d->w.cb = on_named_del_wait;
    int rc = tn_broker_topic(d->b, d->topic, strlen(d->topic), false, 0, &d->w, &t);
    if (rc == UV_EAGAIN)
        return; /* being created or grown */
    if (rc == 0 && d->channel != NULL) {
        rc = tn_topic_channel(t, d->channel, strlen(d->channel), false, &d->w, &ch);
        if (rc == UV_EAGAIN)
            return;
    }
    /* A channel being made reads the logs on a worker: wait for it. */
    if (rc == 0 && d->channel == NULL && tn_topic_wait_idle(t, &d->w) == UV_EAGAIN)
        return;
    if (rc == 0)
        rc = d->channel != NULL ? tn_channel_delete(ch, on_named_deleted, d)
                                : tn_topic_delete(t, on_named_deleted, d);
    if (rc == 0)
        return;
    /* UV_EBUSY here: another request is deleting it. */
    on_named_deleted(d, rc == UV_EBUSY ? 0 : rc);
}

int tn_broker_delete(tn_broker_t *b, const char *topic, const char *channel, tn_delete_cb cb,
                     void *arg)
{
    named_del_t *d = tn_calloc(1, sizeof(*d));
    if (d == NULL)
        return UV_ENOMEM;
    d->b = b;
    d->cb = cb;
    d->arg = arg;
    d->topic = tn_strdup(topic);
    d->channel = channel != NULL ? tn_strdup(channel) : NULL;
    if (d->topic == NULL || (channel != NULL && d->channel == NULL)) {
        tn_free(d->topic);
        tn_free(d->channel);
        tn_free(d);
        return UV_ENOMEM;
    }
    named_del_step(d);
    return 0;
}
