/* The router. See router.h. */
#include "core/platform.h"

#include "cluster/router.h"

#include "cluster/forward.h"
#include "cluster/hold.h"
#include "cluster/produce.h"
#include "cluster/replerr.h"
#include "cluster/replica.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A settle (one tn_router_settle) from its call to its callback. Its
 * remote handles are queue entries of their owners, its local ones wait
 * for their channel log records; it ends when the last of them has a
 * result. */
typedef struct settle_op_s settle_op_t;
typedef struct settle_owner_s settle_owner_t;

/* One handle of an op: a remote one waiting in its owner's queue or
 * riding a SETTLE call, or a local one waiting for the channel log record
 * that covers it (sync). */
typedef struct settle_ent_s {
    struct settle_ent_s *next; /* in its owner's queue */
    settle_op_t *op;
    uint32_t idx;      /* its item in op->items */
    int64_t queued_ms; /* monotonic: its 2 s budget started then */
    tn_chan_sync_t sync;
} settle_ent_t;

/* What the router keeps per owner it settles on: its calls in flight and
 * the handles waiting for one. Made on first use, freed with the router. */
struct settle_owner_s {
    settle_owner_t *next;
    uint64_t owner;
    uint32_t inflight;
    uint32_t queued;
    settle_ent_t *head, *tail;
    bool pumping;
};

struct tn_router_s {
    tn_router_opts_t o;
    uint32_t next; /* round robin for unpinned publishes with no local partition */
    tn_router_stats_t st;
    /* Settling (tn_router_settle). */
    tn_rpc_t *rpc;
    uint64_t node_id;
    bool cluster;
    tn_settle_local_fn settle;
    void *settle_arg;
    settle_owner_t *owners; /* per owner: SETTLE calls in flight, handles queued */
    /* Purging (tn_router_purge). */
    tn_purge_local_fn purge;
    void *purge_arg;
    /* Remote checks (tn_router_rcheck). */
    tn_rcheck_local_fn rcheck;
    void *rcheck_arg;
    tn_replica_t *replica; /* NULL: no replicated partitions */
    /* Produce through a non-leader: the leader's PRODUCE handler and its
     * windows, and the forwards of publishes taken here. */
    tn_produce_server_t *produce;
    tn_forward_t *fwd;
    tn_hold_t *hold; /* publishes to topics being created, or not placed yet (cluster/hold.h) */
};

/* A publish being accepted into the ingress log: owned by the router from
 * tn_ilog_append until its callback. recs borrow p's keys and bodies (p
 * lives until its door's callback, which runs last). */
typedef struct {
    tn_ilog_append_t a;
    tn_router_t *r;
    tn_pub_t *p;
    uint32_t partition;
    tn_irec_t recs[];
} spill_t;

/* The leader a 421 names: the metastore replica's (0: none). */
static uint64_t produce_leader(void *arg, const char *topic, uint32_t p)
{
    tn_router_t *r = arg;
    return r->o.meta != NULL ? tn_meta_state_owner(tn_meta_state(r->o.meta), topic, p) : 0;
}

static int replica_accepts(void *arg, const char *topic, uint32_t p, uint32_t *leader_epoch)
{
    return tn_replica_accepts(arg, topic, p, leader_epoch);
}

static int route(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms);

/* A hold ended (cluster/hold.h): route p again, or answer it. */
static void on_hold_end(void *arg, tn_pub_t *p, const char *topic, size_t len,
                        int64_t deliver_at_ms, int status)
{
    tn_router_t *r = arg;
    if (status == 0)
        status = route(r, topic, len, p, deliver_at_ms);
    if (status != 0) {
        r->st.publishing--;
        p->route_cb(p, status);
    }
}

/* Whether topic's record is being created (hold.h): then p is held, and
 * *rc says whether that worked (0: on_hold_end answers). */
static bool held(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms,
                 int *rc)
{
    int64_t at = 0;
    if (!tn_hold_marked(r->hold, topic, len, &at))
        return false;
    *rc = tn_hold_publish(r->hold, topic, len, p, deliver_at_ms, at);
    return true;
}

/* The engine refused p (p->topic its topic, p->partition the partition
 * it picked) with *rc: for a topic being created (TN_ECREATING) or a
 * partition recovered at start and not placed yet (TN_EPLACING), p is
 * held (hold.h) and *rc says whether that worked (0: on_hold_end
 * answers). false: not such a refusal, *rc unchanged. */
static bool held_by_engine(tn_router_t *r, tn_pub_t *p, int64_t deliver_at_ms, int *rc)
{
    if (p->topic == NULL)
        return false;
    const char *name = p->topic->name;
    if (*rc == TN_ECREATING)
        return held(r, name, strlen(name), p, deliver_at_ms, rc);
    if (*rc != TN_EPLACING)
        return false;
    *rc = tn_hold_until_placed(r->hold, name, strlen(name), p->partition, p, deliver_at_ms);
    return true;
}

/* The engine's append check (queue.h), whatever way the publish reached
 * the engine: nothing is appended to a topic being created, nor to a
 * partition recovered at start before this node followed the placement
 * (hold.h; the router holds the publish on TN_ECREATING, TN_EPLACING),
 * and a replicated partition's records only by its serving leader. */
static int may_append(void *arg, const tn_topic_t *t, uint32_t p)
{
    tn_router_t *r = arg;
    if (tn_hold_marked(r->hold, t->name, strlen(t->name), NULL))
        return TN_ECREATING;
    if (tn_hold_start_held(t, p))
        return TN_EPLACING;
    if (r->replica == NULL)
        return 0;
    return tn_replica_may_append(r->replica, t->name, p, tn_topic_part_plog(t, p));
}

/* The engine's own publishes (a dead letter's copy) go the doors' way. */
static int engine_publish(void *arg, const char *topic, size_t len, tn_pub_t *p,
                          int64_t deliver_at_ms, tn_pub_cb cb)
{
    return tn_router_publish(arg, topic, len, p, deliver_at_ms, cb);
}

int tn_router_new(const tn_router_opts_t *o, tn_router_t **out)
{
    tn_router_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return UV_ENOMEM;
    r->o = *o;
    tn_produce_server_opts_t po = {
        .loop = o->broker->loop, .broker = o->broker, .leader = produce_leader, .leader_arg = r};
    int rc = tn_produce_server_new(&po, &r->produce);
    if (rc == 0) {
        tn_forward_opts_t fo = {.loop = o->broker->loop, .meta = o->meta, .produce = r->produce};
        rc = tn_forward_new(&fo, &r->fwd);
        if (rc != 0)
            tn_produce_server_free(r->produce);
    }
    if (rc == 0) {
        rc = tn_hold_new(o->meta, o->broker, on_hold_end, r, &r->hold);
        if (rc != 0) {
            tn_forward_free(r->fwd);
            tn_produce_server_free(r->produce);
        }
    }
    if (rc != 0) {
        tn_free(r);
        return rc;
    }
    tn_broker_set_publisher(o->broker, engine_publish, r);
    tn_broker_set_append_check(o->broker, may_append, r);
    *out = r;
    return 0;
}

void tn_router_free(tn_router_t *r)
{
    if (r == NULL)
        return;
    while (r->owners != NULL) {
        settle_owner_t *q = r->owners;
        r->owners = q->next;
        tn_free(q);
    }
    tn_hold_free(r->hold); /* publishes still held answer TN_ECLOSED */
    tn_forward_free(r->fwd);
    tn_produce_server_free(r->produce);
    tn_free(r);
}

void tn_router_on_accepted(tn_router_t *r, void (*cb)(void *arg), void *arg)
{
    r->o.accepted = cb;
    r->o.accepted_arg = arg;
}

void tn_router_stats(const tn_router_t *r, tn_router_stats_t *out)
{
    *out = r->st;
    tn_forward_stats_t fs;
    tn_forward_stats(r->fwd, &fs);
    out->forwarded = fs.forwarded;
    out->forward_failed = fs.failed;
    out->forward_retries = fs.retries;
}

static bool member_alive(const tn_router_t *r, uint64_t id)
{
    if (id == 0)
        return false;
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(r->o.meta), id);
    return m != NULL && m->status == TN_MEMBER_ALIVE;
}

/* The partition an unpinned publish for t is accepted for: the next one,
 * round robin, whose owner is alive; the next one at all when none is
 * (its owner gets it when it is back, or the dispatcher reroutes it). */
static uint32_t pick(tn_router_t *r, const tn_topic_t *t)
{
    uint32_t start = r->next++;
    for (uint32_t k = 0; k < t->nparts; k++) {
        uint32_t idx = (start + k) % t->nparts;
        if (member_alive(r, t->parts[idx]->owner))
            return idx;
    }
    return start % t->nparts;
}

static void on_spilled(tn_ilog_append_t *a, int status)
{
    spill_t *s = a->data;
    tn_router_t *r = s->r;
    tn_pub_t *p = s->p;
    if (status == 0) {
        r->st.accepted++;
        r->st.accepted_records += p->n;
        p->partition = s->partition;
        p->first_offset = 0;
        p->remote = true;
    } else {
        r->st.failed++;
        TN_LOG_RL(TN_LOG_ERROR, 10000, "ingress log: accepting %u message(s) for %s/%u failed: %s",
                  p->n, p->topic != NULL ? p->topic->name : "?", s->partition, tn_strerror(status));
    }
    tn_free(s);
    r->st.publishing--;
    p->route_cb(p, status);
    if (status == 0 && r->o.accepted != NULL)
        r->o.accepted(r->o.accepted_arg);
}

/* Accept p (the engine said TN_EREMOTE; p->topic is the engine's topic)
 * into the ingress log. 0 when under way, else the error (nothing taken). */
static void on_forwarded(tn_pub_t *p, int status)
{
    tn_router_t *r = p->route;
    r->st.publishing--;
    p->route_cb(p, status);
}

static int spill(tn_router_t *r, tn_pub_t *p)
{
    const tn_topic_t *t = p->topic;
    int held_rc = 0;
    if (t != NULL && held(r, t->name, strlen(t->name), p, p->deliver_at_ms, &held_rc))
        return held_rc;
    bool repl = t != NULL && t->nparts > 0 && tn_forward_replicated(r->fwd, t->name);
    uint32_t part = 0;
    if (repl)
        part = p->pinned ? p->pin : tn_forward_pick(r->fwd, t->name, t->nparts);
    else if (t != NULL && t->nparts > 0)
        part = p->pinned ? p->pin : pick(r, t);
    if (repl || (t != NULL && t->nparts > 0 && tn_forward_part_replicated(r->fwd, t->name, part))) {
        /* A replicated partition (a moved factor-1 one too) is never
         * spilled: its leader takes the batch now, or the publish fails
         * (forward.h). */
        int rc = tn_forward_publish(r->fwd, t->name, part, p, on_forwarded);
        return rc == TN_ECLOSED ? TN_EREMOTE : rc;
    }
    if (r->o.ilog == NULL || t == NULL || t->nparts == 0)
        return TN_EREMOTE;
    spill_t *s = tn_malloc(sizeof(*s) + (size_t)p->n * sizeof(s->recs[0]));
    if (s == NULL)
        return UV_ENOMEM;
    memset(&s->a, 0, sizeof(s->a));
    s->a.data = s;
    s->r = r;
    s->p = p;
    s->partition = part;
    int64_t now = tn_now_wall_ms();
    size_t name_len = strlen(t->name);
    for (uint32_t i = 0; i < p->n; i++) {
        tn_irec_t *rec = &s->recs[i];
        rec->topic = tn_iov(t->name, name_len);
        rec->key = p->recs[i].key;
        rec->body = p->recs[i].body;
        rec->partition = s->partition;
        rec->pinned = p->pinned;
        rec->deliver_at_ms = p->deliver_at_ms;
        rec->created_ms = now;
    }
    int rc = tn_ilog_append(r->o.ilog, &s->a, s->recs, p->n, on_spilled);
    if (rc != 0)
        tn_free(s);
    return rc;
}

/* The engine refused a pinned partition it does not have (UV_EINVAL):
 * true when the metastore's record has it, a growth this node's engine
 * has not made yet; the ingress log takes it then, as for any partition
 * not open here, and the dispatcher delivers it once its owner has it. */
static bool grown_elsewhere(const tn_router_t *r, const tn_pub_t *p)
{
    if (!p->pinned || r->o.meta == NULL || p->topic == NULL || !tn_meta_ready(r->o.meta))
        return false;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(r->o.meta), p->topic->name);
    return e != NULL && p->pin < e->rec.partitions;
}

/* A topic the metastore records and this node's engine does not have yet
 * (the catalog makes it moments after the metastore applied the record)
 * is made now with its recorded partitions, the way the catalog makes it.
 * Left to the engine, a publish would make it with the default count, and
 * one pinned above that count would go through the ingress log as if the
 * topic had grown elsewhere, committed here only after the catalog grew
 * it. Called when the engine has no topic called topic. */
static void make_recorded(tn_router_t *r, const char *topic, size_t len)
{
    if (r->o.meta == NULL || len > TN_NAME_MAX || !tn_meta_ready(r->o.meta))
        return;
    tn_topic_t *t = NULL;
    char name[TN_NAME_MAX + 1];
    memcpy(name, topic, len);
    name[len] = '\0';
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(r->o.meta), name);
    if (e != NULL)
        (void)tn_broker_topic(r->o.broker, topic, len, true, e->rec.partitions, NULL, &t);
}

/* The engine refused p for a replicated partition this node leads that
 * is not serving yet (TN_ENOTSERVING: the append check, or replica_check
 * below): p waits for it as a forwarded publish waits for a remote
 * leader, through this node's own PRODUCE handler (forward.h: retried
 * until the leader serves, within the forward's budget). name is the
 * topic's (NUL-terminated), partition the one refused. 0 when under way
 * (on_forwarded answers), else the refusal to give now. */
static int wait_for_leader(tn_router_t *r, const char *name, uint32_t partition, tn_pub_t *p)
{
    int held_rc = 0;
    if (held(r, name, strlen(name), p, p->deliver_at_ms, &held_rc))
        return held_rc;
    if (!tn_forward_part_replicated(r->fwd, name, partition))
        return TN_ENOTSERVING;
    int rc = tn_forward_publish(r->fwd, name, partition, p, on_forwarded);
    return rc == TN_ECLOSED ? TN_ENOTSERVING : rc;
}

static void on_engine_done(tn_pub_t *p, int status)
{
    if (held_by_engine(p->route, p, p->deliver_at_ms, &status) && status == 0)
        return; /* on_hold_end answers */
    if (status == UV_EINVAL && grown_elsewhere(p->route, p))
        status = TN_EREMOTE;
    if (status == TN_EREMOTE) {
        status = spill(p->route, p);
        if (status == 0)
            return; /* on_spilled answers */
    } else if (status == TN_ENOTSERVING && p->topic != NULL) {
        status = wait_for_leader(p->route, p->topic->name, p->partition, p);
        if (status == 0)
            return; /* on_forwarded answers */
    }
    ((tn_router_t *)p->route)->st.publishing--;
    p->route_cb(p, status);
}

/* A publish to a replicated partition this node leads is refused at once
 * when the committed ISR is below min_insync (TN_EFEWREPLICAS): the
 * engine would otherwise hold the append until the hw covers it. One whose
 * leader here has not started its epoch yet is TN_ENOTSERVING with p
 * pinned to it and *t the engine's topic: tn_router_publish makes it wait
 * for the leader (wait_for_leader), never appended before. An unpinned
 * publish is pinned to the next local partition that takes it (round
 * robin), else to one led by another node (the engine says TN_EREMOTE:
 * forwarded), else to one led here that is not serving yet, else refused
 * with the first refusal. A local replicated partition this node does
 * not lead (being handed back) is TN_ENOTSERVING too: the wait forwards
 * it to the leader the metastore names. Partitions on other nodes go the
 * usual way (TN_EREMOTE from the engine). t is the engine's topic if it
 * is ready, else NULL (nothing to check: the engine makes or waits for
 * it). */
static int replica_check(tn_router_t *r, tn_topic_t *t, tn_pub_t *p)
{
    if (r->replica == NULL || t == NULL || t->memory)
        return 0;
    int first = 0;
    int64_t elsewhere = -1; /* a partition led by another node */
    int64_t waiting = -1;   /* a partition led here, not serving yet */
    for (uint32_t k = 0; k < t->nparts; k++) {
        uint32_t i = p->pinned ? p->pin : (r->next + k) % t->nparts;
        int rc;
        if (i >= t->nparts) {
            return 0; /* the engine refuses it */
        } else if (!tn_topic_part_local(t, i)) {
            /* Led here, not handed to the engine yet: not through this
             * node's own ingress log, refused (retry) instead. */
            if (!tn_replica_leads(r->replica, t->name, i)) {
                if (p->pinned)
                    return 0; /* the engine says TN_EREMOTE: the usual way */
                if (elsewhere < 0)
                    elsewhere = i;
                continue;
            }
            rc = TN_ENOTSERVING;
        } else {
            rc = tn_replica_accepts(r->replica, t->name, i, NULL);
        }
        if (rc == TN_EREMOTE) {
            if (!tn_replica_replicated(r->replica, t->name, i))
                return 0; /* a factor-1 topic: the engine's own way */
            /* Replicated, open in the engine but not (or no longer) led
             * and handed over here: never appended unreplicated. */
            rc = TN_ENOTSERVING;
        }
        if (rc == 0) {
            if (!p->pinned) {
                r->next = i + 1;
                p->pinned = true;
                p->pin = i;
            }
            return 0;
        }
        if (rc == TN_ENOTSERVING && waiting < 0)
            waiting = i;
        if (first == 0)
            first = rc;
        if (p->pinned)
            break;
    }
    if (first != 0 && elsewhere >= 0) {
        /* Unpinned, and nothing here takes it: to a partition led
         * elsewhere (the engine says TN_EREMOTE, the router forwards),
         * never to a local one that would hold it. */
        p->pinned = true;
        p->pin = (uint32_t)elsewhere;
        return 0;
    }
    if (waiting >= 0) {
        /* Wait for the leader here (pinned: the publish was, or nothing
         * else takes it). */
        p->pinned = true;
        p->pin = (uint32_t)waiting;
        return TN_ENOTSERVING;
    }
    return first;
}

int tn_router_publish(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p,
                      int64_t deliver_at_ms, tn_pub_cb cb)
{
    int refused = tn_replerr_test_refusal(topic, len, false); /* 0 unless a TN_TEST build asks */
    if (refused != 0)
        return refused;
    p->route = r;
    p->route_cb = cb;
    p->remote = false;
    /* Counted until the door's callback: a drain waits for the count to
     * reach 0 (api/drain.h). */
    r->st.publishing++;
    int rc = route(r, topic, len, p, deliver_at_ms);
    if (rc != 0)
        r->st.publishing--;
    return rc;
}

/* tn_router_publish's routing, also of a publish held until its topic
 * was created (on_hold_end): 0 when under way (p's callback answers),
 * else the error. */
static int route(tn_router_t *r, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms)
{
    int rc = 0;
    if (held(r, topic, len, p, deliver_at_ms, &rc))
        return rc;
    /* The topic is looked up by name once: the one found ready here is
     * the one the checks below and the engine use (nothing on this call
     * stack deletes or replaces it; tn_topic_publish checks anyway). */
    tn_topic_t *t = NULL;
    int found = tn_broker_topic(r->o.broker, topic, len, false, 0, NULL, &t);
    if (found == TN_ENOTFOUND)
        make_recorded(r, topic, len);
    if (found != 0)
        t = NULL;
    rc = replica_check(r, t, p);
    if (rc == TN_ENOTSERVING) {
        p->deliver_at_ms = deliver_at_ms; /* what the engine would have set */
        rc = wait_for_leader(r, t->name, p->pin, p);
        if (rc == 0)
            return 0; /* on_forwarded answers */
    }
    if (rc != 0)
        return rc;
    rc = t != NULL ? tn_topic_publish(t, p, deliver_at_ms, on_engine_done)
                   : tn_broker_publish(r->o.broker, topic, len, p, deliver_at_ms, on_engine_done);
    if (rc == TN_EREMOTE || (rc == UV_EINVAL && grown_elsewhere(r, p)))
        rc = spill(r, p);
    else if (rc == TN_ENOTSERVING && p->topic != NULL)
        rc = wait_for_leader(r, p->topic->name, p->partition, p);
    else
        (void)held_by_engine(r, p, deliver_at_ms, &rc);
    return rc;
}

/* --- settling receipt handles anywhere ----------------------------------------------- */

#define MSG_STALE    "receipt handle no longer matches an active reservation"
#define MSG_FULL     "acked-ahead set is full; head of queue may be stuck"
#define MSG_DOWN     "partition owner is down; retry later"
#define MSG_UNREACH  "partition owner unreachable"
#define MSG_MOVED    "partition owner changed; retry later"
#define MSG_NOTREADY "partition owner could not settle it now; retry later"
#define MSG_OOM      "out of memory"
#define MSG_CLOSING  "this node is shutting down"
#define MSG_BUSY     "too many receipt handles wait for this partition owner; retry later"
#define MSG_WRITE    "the channel log could not record it durably; the message will be delivered again"

static void pump(tn_router_t *r, settle_owner_t *q);

/* The replica manager's promotion and resignation (tn_replica_on_lead):
 * the PRODUCE window of the partition is rebuilt from the log's tail, or
 * dropped. */
static void on_lead(void *arg, const char *topic, uint32_t p, tn_plog_t *pl)
{
    tn_router_t *r = arg;
    if (pl == NULL) {
        tn_router_resign_window(r, topic, p);
        return;
    }
    int rc = tn_produce_server_rebuild_log(r->produce, topic, p, pl);
    if (rc != 0)
        TN_LOG(TN_LOG_WARN,
               "produce window of %s/%" PRIu32 ": cannot read the log tail (%s); a retry of a "
               "batch the old leader stored could be stored again",
               topic, p, tn_strerror(rc));
}

void tn_router_set_replica(tn_router_t *r, tn_replica_t *rm)
{
    if (r->replica != NULL && r->replica != rm)
        tn_replica_on_lead(r->replica, NULL, NULL);
    r->replica = rm; /* may_append asks it */
    tn_produce_server_set_accepts(r->produce, rm != NULL ? replica_accepts : NULL, rm);
    if (rm != NULL)
        tn_replica_on_lead(rm, on_lead, r);
}

void tn_router_produce_handlers(tn_router_t *r, tn_rpc_handler_t *out, size_t *n)
{
    tn_produce_server_handlers(r->produce, out, n);
}

int tn_router_rebuild_window(tn_router_t *r, const char *topic, uint32_t p, const void *raw,
                             size_t len)
{
    return tn_produce_server_rebuild(r->produce, topic, p, raw, len);
}

void tn_router_resign_window(tn_router_t *r, const char *topic, uint32_t p)
{
    tn_produce_server_resign(r->produce, topic, p, TN_EREMOTE);
}

void tn_router_set_rpc(tn_router_t *r, tn_rpc_t *rpc, uint64_t node_id, bool cluster)
{
    tn_forward_set_rpc(r->fwd, cluster ? rpc : NULL, node_id);
    r->rpc = rpc;
    r->node_id = node_id;
    r->cluster = cluster;
    if (rpc == NULL) /* queued handles answer 503 now; calls in flight end as rpc closes */
        for (settle_owner_t *q = r->owners; q != NULL; q = q->next)
            pump(r, q);
}

void tn_router_on_settle(tn_router_t *r, tn_settle_local_fn fn, void *arg)
{
    r->settle = fn;
    r->settle_arg = arg;
}

/* Where partition p of topic is settled: 0 here, else its owner (0 when
 * the metastore has not placed it). */
static bool settle_here(const tn_router_t *r, const char *topic, uint32_t p, uint64_t *owner)
{
    *owner = 0;
    if (!r->cluster || r->o.meta == NULL)
        return true;
    const tn_meta_state_t *s = tn_meta_state(r->o.meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    if (e == NULL || p >= e->rec.partitions)
        return true; /* no such partition: nowhere holds a lease of it */
    *owner = tn_meta_state_owner(s, topic, p);
    return *owner == r->node_id;
}

bool tn_router_settle_owns(void *router, const char *topic, uint32_t p)
{
    uint64_t owner;
    return settle_here(router, topic, p, &owner);
}

struct settle_op_s {
    tn_router_settle_item_t *items;
    uint32_t n;
    uint32_t pending; /* handles without a result, +1 while starting */
    tn_router_settle_cb cb;
    void *arg;
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1];
    uint8_t how;
    int64_t visibility_ms;
    settle_ent_t ents[];
};

/* One SETTLE call: up to TN_ROUTER_SETTLE_COALESCE handles of one
 * (topic, channel, how, visibility) for one owner. */
typedef struct {
    tn_settle_call_t call;
    tn_router_t *r;
    settle_owner_t *q;
    uint32_t n;
    settle_ent_t *ents[TN_ROUTER_SETTLE_COALESCE];
    tn_wire_handle_t h[TN_ROUTER_SETTLE_COALESCE];
} settle_batch_t;

static void set_result(tn_router_settle_item_t *it, uint16_t status, const char *msg)
{
    it->status = status;
    it->error = msg;
}

static void settle_op_release(settle_op_t *op)
{
    if (--op->pending > 0)
        return;
    op->cb(op->arg, op->items, op->n);
    tn_free(op);
}

/* e has its result: status and msg. */
static void ent_done(settle_ent_t *e, uint16_t status, const char *msg)
{
    set_result(&e->op->items[e->idx], status, msg);
    settle_op_release(e->op);
}

static void on_local_synced(tn_chan_sync_t *sync, int status)
{
    settle_ent_t *e = sync->data;
    const char *why = tn_replerr_text(status);
    if (status == 0)
        ent_done(e, 204, NULL);
    else if (why != NULL) /* a replicated partition refusing for now */
        ent_done(e, 503, why);
    else
        ent_done(e, 500, MSG_WRITE);
}

/* Settle e's handle here; its result comes once the channel log record
 * covering it is durable (or failed), possibly before this returns. */
static void settle_local(tn_router_t *r, settle_op_t *op, settle_ent_t *e)
{
    tn_router_settle_item_t *it = &op->items[e->idx];
    if (r->settle == NULL) {
        set_result(it, 503, "this node is not ready to settle receipt handles");
        return;
    }
    int refused = tn_replerr_test_refusal(op->topic, strlen(op->topic), true);
    if (refused != 0) {
        set_result(it, 503, tn_replerr_text(refused));
        return;
    }
    e->sync.data = e;
    op->pending++;
    int rc = r->settle(r->settle_arg, op->topic, op->channel, it->partition, it->offset, it->nonce,
                       op->how, op->visibility_ms, &e->sync, on_local_synced);
    if (rc == 0)
        return;
    op->pending--;
    if (rc == UV_ENOBUFS)
        set_result(it, 503, MSG_FULL);
    else if (rc == TN_ENOTFOUND)
        set_result(it, 410, MSG_STALE);
    else if (rc == UV_ENOMEM)
        set_result(it, 503, MSG_OOM);
    else if (tn_replerr_retryable(rc))
        set_result(it, 503, tn_replerr_text(rc));
    else
        set_result(it, 500, MSG_WRITE);
}

static settle_owner_t *owner_q(tn_router_t *r, uint64_t owner)
{
    for (settle_owner_t *q = r->owners; q != NULL; q = q->next)
        if (q->owner == owner)
            return q;
    settle_owner_t *q = tn_calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->owner = owner;
    q->next = r->owners;
    r->owners = q;
    return q;
}

static bool same_settle(const settle_op_t *a, const settle_op_t *b)
{
    return a == b || (a->how == b->how && a->visibility_ms == b->visibility_ms &&
                      strcmp(a->topic, b->topic) == 0 && strcmp(a->channel, b->channel) == 0);
}

static void on_batch(tn_settle_call_t *c, int status)
{
    settle_batch_t *b = c->data;
    tn_router_t *r = b->r;
    settle_owner_t *q = b->q;
    if (status != 0 && status != UV_EAGAIN && status != TN_ECLOSED)
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "settle: %u receipt handle(s) for node %" PRIu64 " not settled: %s", b->n,
                  q->owner, tn_strerror(status));
    for (uint32_t i = 0; i < b->n; i++) {
        settle_ent_t *e = b->ents[i];
        if (status == UV_EAGAIN)
            ent_done(e, 503, MSG_NOTREADY);
        else if (status == UV_ENOMEM)
            ent_done(e, 503, MSG_OOM);
        else if (status == TN_ECLOSED)
            ent_done(e, 503, MSG_CLOSING);
        else if (status != 0)
            ent_done(e, 502, MSG_UNREACH);
        else if (c->status[i] == 204)
            ent_done(e, 204, NULL);
        else if (c->status[i] == 410)
            ent_done(e, 410, MSG_STALE);
        else if (c->status[i] == 421)
            ent_done(e, 503, MSG_MOVED);
        else if (c->status[i] == 500)
            ent_done(e, 500, MSG_WRITE);
        else
            ent_done(e, 503, MSG_FULL);
    }
    tn_free(b);
    q->inflight--;
    pump(r, q);
}

/* Take q's oldest handle and up to TN_ROUTER_SETTLE_COALESCE - 1 more of
 * the same kind out of the queue into b. */
static void take_batch(settle_owner_t *q, settle_batch_t *b)
{
    settle_ent_t *first = q->head;
    settle_ent_t **pp = &q->head, *prev = NULL;
    b->n = 0;
    while (*pp != NULL && b->n < TN_ROUTER_SETTLE_COALESCE) {
        settle_ent_t *e = *pp;
        if (!same_settle(e->op, first->op)) {
            prev = e;
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        if (q->tail == e)
            q->tail = prev;
        e->next = NULL;
        q->queued--;
        const tn_router_settle_item_t *it = &e->op->items[e->idx];
        b->h[b->n] = (tn_wire_handle_t){it->partition, it->offset, it->nonce};
        b->ents[b->n++] = e;
    }
}

/* Start calls for q's queue while it has slots free; a handle whose 2 s
 * passed while it waited answers 502 as an unreachable owner does. */
static void pump(tn_router_t *r, settle_owner_t *q)
{
    if (q->pumping)
        return; /* the outer pump goes on */
    q->pumping = true;
    while (q->head != NULL && (q->inflight < TN_ROUTER_SETTLE_INFLIGHT || r->rpc == NULL)) {
        settle_ent_t *first = q->head;
        int64_t left = TN_ROUTER_SETTLE_TIMEOUT_MS - (tn_now_mono_ms() - first->queued_ms);
        const tn_meta_member_t *m =
            r->o.meta != NULL ? tn_meta_member_find(tn_meta_state(r->o.meta), q->owner) : NULL;
        if (left <= 0 || r->rpc == NULL || m == NULL || m->api_addr[0] == '\0') {
            q->head = first->next;
            if (q->head == NULL)
                q->tail = NULL;
            q->queued--;
            ent_done(first, r->rpc == NULL ? 503 : 502, r->rpc == NULL ? MSG_CLOSING : MSG_UNREACH);
            continue;
        }
        settle_batch_t *b = tn_malloc(sizeof(*b));
        if (b == NULL) {
            q->head = first->next;
            if (q->head == NULL)
                q->tail = NULL;
            q->queued--;
            ent_done(first, 503, MSG_OOM);
            continue;
        }
        take_batch(q, b);
        b->r = r;
        b->q = q;
        b->call.data = b;
        r->st.settle_calls++;
        r->st.settle_handles += b->n;
        q->inflight++;
        const settle_op_t *op = first->op;
        int rc = tn_settle_call(r->rpc, m->api_addr, op->topic, op->channel, op->how,
                                op->visibility_ms, b->h, b->n, (uint64_t)left, &b->call, on_batch);
        if (rc != 0)
            on_batch(&b->call, rc);
    }
    q->pumping = false;
}

/* e waits in q's queue (sent at once when q has a slot free). false when
 * the queue is full. */
static bool enqueue(tn_router_t *r, settle_owner_t *q, settle_ent_t *e)
{
    if (q->queued >= TN_ROUTER_SETTLE_QUEUE_MAX)
        return false;
    e->next = NULL;
    e->queued_ms = tn_now_mono_ms();
    if (q->tail != NULL)
        q->tail->next = e;
    else
        q->head = e;
    q->tail = e;
    q->queued++;
    if (q->inflight >= TN_ROUTER_SETTLE_INFLIGHT)
        r->st.settle_queued++;
    return true;
}

void tn_router_settle(tn_router_t *r, const char *topic, const char *channel, uint8_t how,
                      int64_t visibility_ms, tn_router_settle_item_t *items, uint32_t n,
                      tn_router_settle_cb cb, void *arg)
{
    /* Every handle gets an entry: a local one waits for its channel log
     * record, a remote one for its owner's reply. */
    uint32_t nents = n < TN_SETTLE_MAX ? n : TN_SETTLE_MAX;
    settle_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)nents * sizeof(op->ents[0]));
    if (op == NULL) {
        for (uint32_t i = 0; i < n; i++)
            set_result(&items[i], 503, MSG_OOM);
        cb(arg, items, n);
        return;
    }
    op->items = items;
    op->n = n;
    op->cb = cb;
    op->arg = arg;
    snprintf(op->topic, sizeof(op->topic), "%s", topic);
    snprintf(op->channel, sizeof(op->channel), "%s", channel);
    op->how = how;
    op->visibility_ms = visibility_ms;
    op->pending = 1; /* held while the handles are placed */
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    settle_owner_t *touched[TN_SETTLE_MAX];
    uint32_t ntouched = 0;
    for (uint32_t i = 0; i < n; i++) {
        tn_router_settle_item_t *it = &items[i];
        uint64_t owner;
        if (i >= TN_SETTLE_MAX) {
            set_result(it, 400, "a batch holds at most 100 receipt handles");
            continue;
        }
        settle_ent_t *e = &op->ents[i];
        e->op = op;
        e->idx = i;
        if (settle_here(r, topic, it->partition, &owner)) {
            /* A replicated partition led here whose epoch has not started
             * (or that is being handed to the engine): retry shortly. */
            if (r->replica != NULL && tn_replica_replicated(r->replica, topic, it->partition) &&
                !tn_replica_serving(r->replica, topic, it->partition)) {
                set_result(it, 503, MSG_NOTREADY);
                continue;
            }
            settle_local(r, op, e);
            continue;
        }
        const tn_meta_member_t *m = owner != 0 ? tn_meta_member_find(s, owner) : NULL;
        settle_owner_t *q = NULL;
        if (owner == 0 || (m != NULL && m->status == TN_MEMBER_DEAD))
            set_result(it, 503, MSG_DOWN);
        else if (m == NULL || m->api_addr[0] == '\0' || r->rpc == NULL)
            set_result(it, 502, MSG_UNREACH);
        else if ((q = owner_q(r, owner)) == NULL)
            set_result(it, 503, MSG_OOM);
        else {
            if (!enqueue(r, q, e)) {
                set_result(it, 503, MSG_BUSY);
                continue;
            }
            op->pending++;
            uint32_t k = 0;
            while (k < ntouched && touched[k] != q)
                k++;
            if (k == ntouched)
                touched[ntouched++] = q;
        }
    }
    for (uint32_t k = 0; k < ntouched; k++)
        pump(r, touched[k]);
    settle_op_release(op);
}

void tn_router_settle_metrics_write(const tn_router_t *r, tn_buf_t *out)
{
    char text[1024];
    int n = snprintf(
        text, sizeof(text),
        "# HELP tern_cluster_settle_calls_total SETTLE calls this node made to partition owners "
        "(acks, extends and nacks of other nodes' receipt handles).\n"
        "# TYPE tern_cluster_settle_calls_total counter\n"
        "tern_cluster_settle_calls_total %" PRIu64 "\n"
        "# HELP tern_cluster_settle_handles_total Receipt handles those calls carried (over the "
        "calls: the mean batch size).\n"
        "# TYPE tern_cluster_settle_handles_total counter\n"
        "tern_cluster_settle_handles_total %" PRIu64 "\n"
        "# HELP tern_cluster_settle_coalesced_total Receipt handles that waited for a busy "
        "owner's call slot and went in a later call with others.\n"
        "# TYPE tern_cluster_settle_coalesced_total counter\n"
        "tern_cluster_settle_coalesced_total %" PRIu64 "\n",
        r->st.settle_calls, r->st.settle_handles, r->st.settle_queued);
    tn_buf_append(out, text, (size_t)TN_MIN((size_t)n, sizeof(text) - 1));
    /* Produce through a non-leader: this node's forwards, and what its
     * PRODUCE handler served as a leader. */
    tn_forward_stats_t fs;
    tn_forward_stats(r->fwd, &fs);
    tn_produce_stats_t ps;
    tn_produce_server_stats(r->produce, &ps);
    n = snprintf(
        text, sizeof(text),
        "# HELP tern_cluster_produce_forwards_total Publishes for replicated partitions this "
        "node took and forwarded to their leader (PRODUCE), by outcome.\n"
        "# TYPE tern_cluster_produce_forwards_total counter\n"
        "tern_cluster_produce_forwards_total{outcome=\"ok\"} %" PRIu64 "\n"
        "tern_cluster_produce_forwards_total{outcome=\"failed\"} %" PRIu64 "\n"
        "# HELP tern_cluster_produce_forward_retries_total PRODUCE attempts after a forward's "
        "first (same seq).\n"
        "# TYPE tern_cluster_produce_forward_retries_total counter\n"
        "tern_cluster_produce_forward_retries_total %" PRIu64 "\n"
        "# HELP tern_cluster_produce_served_total PRODUCE batches this node served as the "
        "leader: stored, or answered from its window (a retry of a stored batch).\n"
        "# TYPE tern_cluster_produce_served_total counter\n"
        "tern_cluster_produce_served_total{outcome=\"stored\"} %" PRIu64 "\n"
        "tern_cluster_produce_served_total{outcome=\"duplicate\"} %" PRIu64 "\n",
        fs.ok, fs.failed, fs.retries, ps.produces, ps.duplicates);
    tn_buf_append(out, text, (size_t)TN_MIN((size_t)n, sizeof(text) - 1));
}

/* --- consume anywhere ------------------------------------------------------------ */

int tn_router_consume_where(tn_router_t *r, const char *topic, uint32_t partition, uint64_t *owner)
{
    *owner = 0;
    if (r->rpc == NULL || !r->cluster || r->o.meta == NULL)
        return 0;
    const tn_meta_state_t *s = tn_meta_state(r->o.meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    if (e == NULL || partition >= e->rec.partitions)
        return 0; /* the lanes answer what they always have */
    uint64_t id = tn_meta_state_owner(s, topic, partition);
    if (id == 0)
        return UV_EAGAIN;
    if (id == r->node_id)
        return 0;
    *owner = id;
    return member_alive(r, id) ? TN_EREMOTE : UV_EHOSTDOWN;
}

size_t tn_router_consume_owners(tn_router_t *r, const char *topic, uint64_t *out, size_t max)
{
    if (r->rpc == NULL || !r->cluster || r->o.meta == NULL)
        return 0;
    const tn_meta_state_t *s = tn_meta_state(r->o.meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, topic);
    size_t n = 0;
    for (uint32_t p = 0; e != NULL && p < e->rec.partitions; p++) {
        uint64_t id = tn_meta_state_owner(s, topic, p);
        if (id == 0 || id == r->node_id || !member_alive(r, id))
            continue;
        size_t at = 0;
        while (at < n && out[at] < id)
            at++;
        if (at < n && out[at] == id)
            continue;
        if (n == max)
            continue;
        memmove(out + at + 1, out + at, (n - at) * sizeof(*out));
        out[at] = id;
        n++;
    }
    return n;
}

static void on_consume_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    tn_router_consume_t *c = arg;
    c->call = NULL;
    if (status == 0) {
        c->http_status = reply->status;
        if (tn_buf_append(&c->body, reply->body, reply->body_len) != 0) {
            status = UV_ENOMEM;
            snprintf(c->error, sizeof(c->error), "out of memory");
        }
    } else {
        snprintf(c->error, sizeof(c->error), "%s", err != NULL ? err : tn_strerror(status));
    }
    c->cb(c, status);
}

int tn_router_consume_call(tn_router_t *r, uint64_t owner, const tn_wire_consume_t *req,
                           uint64_t timeout_ms, tn_router_consume_t *c, tn_router_consume_cb cb)
{
    if (r->rpc == NULL || !r->cluster)
        return TN_ECLOSED;
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(r->o.meta), owner);
    if (m == NULL || m->api_addr[0] == '\0')
        return UV_EHOSTUNREACH;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_consume_encode(&b, req);
    if (rc != 0) {
        tn_buf_fini(&b);
        return rc;
    }
    c->owner = owner;
    c->http_status = 0;
    c->error[0] = '\0';
    c->cb = cb;
    tn_buf_init(&c->body);
    rc = tn_rpc_call(r->rpc, m->api_addr, TN_OP_CONSUME, tn_buf_data(&b), tn_buf_size(&b),
                     timeout_ms, on_consume_reply, c, &c->call);
    tn_buf_fini(&b);
    return rc;
}

void tn_router_consume_cancel(tn_router_consume_t *c)
{
    if (c->call != NULL)
        tn_rpc_call_cancel(c->call);
}

/* --- partition stats from their owners ------------------------------------------- */

#define PS_UNREACH "owner unreachable"
#define PS_DOWN    "owner is down"
#define PS_MOVED   "owner changed; retry"

typedef enum { PS_HERE, PS_IS_DOWN, PS_NO_ROUTE, PS_CALL } ps_where_t;

/* Where partition p of topic is read (step 1 and 2 of the design), with
 * its owner. */
static ps_where_t pstats_where(const tn_router_t *r, const tn_meta_state_t *s, const char *topic,
                               uint32_t p, uint64_t *owner)
{
    *owner = s != NULL ? tn_meta_state_owner(s, topic, p) : 0;
    if (!r->cluster || s == NULL || *owner == 0 || *owner == r->node_id)
        return PS_HERE;
    const tn_meta_member_t *m = tn_meta_member_find(s, *owner);
    if (m != NULL && m->status == TN_MEMBER_DEAD)
        return PS_IS_DOWN;
    if (m == NULL || m->api_addr[0] == '\0' || r->rpc == NULL)
        return PS_NO_ROUTE;
    return PS_CALL;
}

/* Whether partition p of topic has more than one replica (step 4: its
 * leader may hold errors of the others). */
static bool part_replicated(const tn_meta_state_t *s, const char *topic, uint32_t p)
{
    const tn_pstate_t *ps = s != NULL ? tn_meta_state_pstate(s, topic, p) : NULL;
    return ps != NULL && ps->nreplicas > 1;
}

/* One owner's share of a gather: a PSTATS call for its partitions, which
 * sit at [base, base + n) of the op's arrays, and a PERRS call for the
 * same when one of them is replicated. */
typedef struct pstats_op_s pstats_op_t;
typedef struct {
    tn_pstats_call_t call;
    tn_perrs_call_t perrs; /* its errs are the op's until it is done */
    pstats_op_t *op;
    uint64_t owner;
    uint32_t base;
    uint32_t n;
    bool errs; /* a PERRS call too */
} pstats_group_t;

struct pstats_op_s {
    tn_router_pstat_t *items;
    uint32_t n;
    uint32_t pending; /* calls not yet answered, plus one while they start */
    tn_router_pstats_cb cb;
    void *arg;
    uint32_t *idx;            /* per remote partition, grouped by owner: its item */
    uint32_t *parts;          /* its index, as the call asks */
    tn_wire_pstat_t *out;     /* the owner's answer */
    uint8_t *counts;          /* the owner's PERRS answer: errors per partition */
    tn_replica_perr_t *local; /* the errors read here, items' errs point into it */
    uint32_t ngroups;
    pstats_group_t groups[];
};

static void pstats_op_done(pstats_op_t *op)
{
    op->cb(op->arg, op->items, op->n);
    for (uint32_t g = 0; g < op->ngroups; g++)
        tn_free(op->groups[g].perrs.errs);
    tn_free(op->local);
    tn_free(op->idx);
    tn_free(op->parts);
    tn_free(op->out);
    tn_free(op->counts);
    tn_free(op);
}

/* The sentence for a partition an owner answered without numbers. */
static const char *pstat_refusal(uint16_t status)
{
    switch (status) {
    case 421:
        return PS_MOVED;
    case 404:
        return "owner has no such topic; retry";
    case 416:
        return "owner has no such partition; retry";
    default:
        return "owner is creating or growing the topic; retry";
    }
}

static void on_pstats(tn_pstats_call_t *c, int status)
{
    pstats_group_t *g = c->data;
    pstats_op_t *op = g->op;
    const char *why = status == UV_EAGAIN    ? "owner could not answer now; retry"
                      : status == UV_ENOMEM  ? MSG_OOM
                      : status == TN_ECLOSED ? "this node is shutting down"
                                             : PS_UNREACH;
    for (uint32_t j = 0; j < g->n; j++) {
        tn_router_pstat_t *it = &op->items[op->idx[g->base + j]];
        const tn_wire_pstat_t *st = &op->out[g->base + j];
        if (status != 0)
            it->error = why;
        else if (st->status != 200)
            it->error = pstat_refusal(st->status);
        else {
            it->have = true;
            it->st = *st;
        }
    }
    if (status != 0 && status != TN_ECLOSED)
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "partition stats: %u partition(s) on node %" PRIu64 " not read: %s", g->n,
                  g->owner, tn_strerror(status));
    if (--op->pending == 0)
        pstats_op_done(op);
}

/* The end of an owner's PERRS call: its partitions' errors, or none. */
static void on_perrs(tn_perrs_call_t *c, int status)
{
    pstats_group_t *g = c->data;
    pstats_op_t *op = g->op;
    if (status == 0) {
        size_t at = 0;
        for (uint32_t j = 0; j < g->n; j++) {
            tn_router_pstat_t *it = &op->items[op->idx[g->base + j]];
            uint8_t k = op->counts[g->base + j];
            it->nerrs = k;
            it->errs = k > 0 ? c->errs + at : NULL;
            at += k;
        }
    } else if (status == UV_EINVAL) {
        /* 400: a node of an earlier release, which does not know the op
         * (or a request it would not take): not worth a warning each
         * time, the numbers are there. */
        TN_LOG_RL(TN_LOG_NOTICE, 60000,
                  "partition stats: node %" PRIu64
                  " refused a replica errors request (an earlier release?); its partitions show "
                  "none",
                  g->owner);
    } else if (status != TN_ECLOSED) {
        TN_LOG_RL(TN_LOG_WARN, 10000,
                  "partition stats: replica errors of %u partition(s) on node %" PRIu64
                  " not read: %s",
                  g->n, g->owner, tn_strerror(status));
    }
    if (--op->pending == 0)
        pstats_op_done(op);
}

/* The replica errors of the partitions read here (step 4), in one array
 * that their items point into: NULL when there are none, or no room (then
 * none are shown; the numbers stand). The caller frees it after cb. */
static tn_replica_perr_t *pstats_local_errs(const tn_router_t *r, const tn_meta_state_t *s,
                                            const char *topic, tn_router_pstat_t *items, uint32_t n)
{
    if (r->replica == NULL)
        return NULL;
    tn_replica_perr_t pe[TN_WIRE_PERRS_MAX];
    size_t total = 0;
    uint64_t owner;
    for (uint32_t i = 0; i < n; i++)
        if (pstats_where(r, s, topic, items[i].partition, &owner) == PS_HERE &&
            part_replicated(s, topic, items[i].partition))
            total += tn_perrs_local(r->replica, topic, items[i].partition, pe);
    if (total == 0)
        return NULL;
    tn_replica_perr_t *all = tn_malloc(total * sizeof(*all));
    if (all == NULL) {
        TN_LOG_RL(TN_LOG_WARN, 10000, "partition stats: no memory for the replica errors of %s",
                  topic);
        return NULL;
    }
    size_t at = 0;
    for (uint32_t i = 0; i < n && at < total; i++) {
        tn_router_pstat_t *it = &items[i];
        if (pstats_where(r, s, topic, it->partition, &owner) != PS_HERE ||
            !part_replicated(s, topic, it->partition))
            continue;
        uint32_t k = tn_perrs_local(r->replica, topic, it->partition, pe);
        k = (uint32_t)TN_MIN((size_t)k, total - at); /* the same tick: the same answer */
        memcpy(all + at, pe, k * sizeof(*pe));
        it->nerrs = k;
        it->errs = k > 0 ? all + at : NULL;
        at += k;
    }
    return all;
}

/* The group of op for owner (made in the first pass, so it is there). */
static pstats_group_t *pstats_group(pstats_op_t *op, uint64_t owner)
{
    uint32_t g = 0;
    while (op->groups[g].owner != owner)
        g++;
    return &op->groups[g];
}

void tn_router_pstats(tn_router_t *r, const char *topic, tn_router_pstat_t *items, uint32_t n,
                      tn_router_pstats_cb cb, void *arg)
{
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    /* First pass: the local reads and the refusals now; count the calls
     * and their owners. */
    uint64_t *owners = NULL;
    uint32_t nremote = 0, ngroups = 0;
    bool oom = false;
    for (uint32_t i = 0; i < n; i++) {
        tn_router_pstat_t *it = &items[i];
        it->have = false;
        it->error = NULL;
        it->nerrs = 0;
        it->errs = NULL;
        switch (pstats_where(r, s, topic, it->partition, &it->owner)) {
        case PS_HERE: {
            /* Refused here as a remote owner's refusal reads (a topic
             * being grown answers 503 for a moment). */
            uint16_t st = tn_pstats_local(r->o.broker, topic, it->partition, &it->st);
            it->have = st == 200;
            if (!it->have)
                it->error = pstat_refusal(st);
            break;
        }
        case PS_IS_DOWN:
            it->error = PS_DOWN;
            break;
        case PS_NO_ROUTE:
            it->error = PS_UNREACH;
            break;
        case PS_CALL:
            if (owners == NULL && !oom && (owners = tn_malloc(n * sizeof(*owners))) == NULL)
                oom = true;
            if (oom) {
                it->error = MSG_OOM;
                break;
            }
            nremote++;
            uint32_t k = 0;
            while (k < ngroups && owners[k] != it->owner)
                k++;
            if (k == ngroups)
                owners[ngroups++] = it->owner;
            break;
        }
    }
    tn_replica_perr_t *local = pstats_local_errs(r, s, topic, items, n);
    if (nremote == 0) {
        tn_free(owners);
        cb(arg, items, n);
        tn_free(local);
        return;
    }
    pstats_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)ngroups * sizeof(op->groups[0]));
    if (op != NULL) {
        op->idx = tn_malloc(nremote * sizeof(*op->idx));
        op->parts = tn_malloc(nremote * sizeof(*op->parts));
        op->out = tn_calloc(nremote, sizeof(*op->out));
        op->counts = tn_calloc(nremote, sizeof(*op->counts));
    }
    if (op == NULL || op->idx == NULL || op->parts == NULL || op->out == NULL ||
        op->counts == NULL) {
        for (uint32_t i = 0; i < n; i++)
            if (pstats_where(r, s, topic, items[i].partition, &items[i].owner) == PS_CALL)
                items[i].error = MSG_OOM;
        if (op != NULL) {
            tn_free(op->idx);
            tn_free(op->parts);
            tn_free(op->out);
            tn_free(op->counts);
        }
        tn_free(op);
        tn_free(owners);
        cb(arg, items, n);
        tn_free(local);
        return;
    }
    op->local = local;
    op->items = items;
    op->n = n;
    op->cb = cb;
    op->arg = arg;
    op->ngroups = ngroups;
    for (uint32_t g = 0; g < ngroups; g++) {
        op->groups[g].op = op;
        op->groups[g].owner = owners[g];
    }
    tn_free(owners);
    /* Second pass: each group's size, so its partitions sit together;
     * third: place them (the replica cannot change in between). */
    uint64_t owner;
    for (uint32_t i = 0; i < n; i++)
        if (pstats_where(r, s, topic, items[i].partition, &owner) == PS_CALL)
            pstats_group(op, owner)->n++;
    for (uint32_t g = 0, base = 0; g < ngroups; g++) {
        op->groups[g].base = base;
        base += op->groups[g].n;
        op->groups[g].n = 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (pstats_where(r, s, topic, items[i].partition, &owner) != PS_CALL)
            continue;
        pstats_group_t *g = pstats_group(op, owner);
        op->idx[g->base + g->n] = i;
        op->parts[g->base + g->n] = items[i].partition;
        g->n++;
        if (part_replicated(s, topic, items[i].partition))
            g->errs = true;
    }
    op->pending = 1; /* held while the calls start */
    for (uint32_t gi = 0; gi < ngroups; gi++) {
        pstats_group_t *g = &op->groups[gi];
        const tn_meta_member_t *m = tn_meta_member_find(s, g->owner);
        g->call.data = g;
        int rc =
            tn_pstats_call(r->rpc, m->api_addr, topic, op->parts + g->base, g->n, op->out + g->base,
                           TN_ROUTER_PSTATS_TIMEOUT_MS, &g->call, on_pstats);
        op->pending++;
        if (rc != 0) {
            on_pstats(&g->call, rc);
            continue; /* the owner cannot be asked: no errors either */
        }
        if (!g->errs)
            continue;
        g->perrs.data = g;
        rc = tn_perrs_call(r->rpc, m->api_addr, topic, op->parts + g->base, g->n,
                           op->counts + g->base, TN_ROUTER_PSTATS_TIMEOUT_MS, &g->perrs, on_perrs);
        op->pending++;
        if (rc == UV_EINVAL) {
            /* Refused here (the request would not encode), not by the
             * owner: on_perrs would take it for an earlier release. */
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "partition stats: the replica errors request for node %" PRIu64
                      " could not be made: %s",
                      g->owner, tn_strerror(rc));
            rc = TN_ECLOSED; /* said once: on_perrs counts it done, quietly */
        }
        if (rc != 0)
            on_perrs(&g->perrs, rc);
    }
    if (--op->pending == 0)
        pstats_op_done(op);
}

/* The owner's answer to TN_OP_PERRS, from the replica manager it has now
 * (none while it starts or closes: every partition without errors). */
static void on_perrs_request(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_router_t *r = arg;
    tn_perrs_answer(r->replica, req, payload, len);
}

void tn_router_perrs_handler(tn_router_t *r, tn_rpc_handler_t *out)
{
    *out = (tn_rpc_handler_t){TN_OP_PERRS, 0, on_perrs_request, r};
}

/* --- partition moves' progress from their leaders ------------------------------- */

/* The leader's answer (TN_OP_MOVE_PROGRESS): what it can tell of the move
 * under way in its metastore replica's state. */
static void on_moveprog(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_router_t *r = arg;
    tn_wire_moveprog_t w;
    char msg[256], body[320];
    int n;
    if (tn_wire_moveprog_decode(payload, len, &w, msg, sizeof(msg)) != 0) {
        n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", msg);
        tn_rpc_reply(req, 400, "application/json", body,
                     (size_t)TN_MIN((size_t)n, sizeof(body) - 1));
        return;
    }
    if (r->replica == NULL || r->o.meta == NULL) {
        static const char none[] = "{\"error\":\"no replicated partitions on this node\"}";
        tn_rpc_reply(req, 503, "application/json", none, sizeof(none) - 1);
        return;
    }
    tn_wire_moveprog_reply_t out;
    memset(&out, 0, sizeof(out));
    const tn_pstate_t *ps = tn_meta_state_pstate(tn_meta_state(r->o.meta), w.topic, w.partition);
    if (ps != NULL && ps->ntarget > 0 && ps->leader == r->node_id)
        tn_moveprog_local(r->replica, w.topic, w.partition, ps, &out);
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_wire_moveprog_reply_encode(&b, &out) != 0) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        tn_rpc_reply(req, 503, "application/json", oom, sizeof(oom) - 1);
    } else {
        tn_rpc_reply(req, 200, "application/octet-stream", tn_buf_data(&b), tn_buf_size(&b));
    }
    tn_buf_fini(&b);
}

void tn_router_moveprog_handler(tn_router_t *r, tn_rpc_handler_t *out)
{
    *out = (tn_rpc_handler_t){TN_OP_MOVE_PROGRESS, 0, on_moveprog, r};
}

typedef struct {
    tn_router_moveprog_t *items;
    uint32_t n;
    uint32_t pending; /* calls not yet answered, plus one while they start */
    tn_router_moveprog_cb cb;
    void *arg;
} moveprog_op_t;

static void on_moveprog_answer(tn_moveprog_call_t *c, int status)
{
    tn_router_moveprog_t *it = c->data;
    moveprog_op_t *op = it->op;
    if (status == 0) {
        /* The leader's view, over what this node knew (the lag of a ready
         * move, which the leader knows too). */
        if (c->out.known != 0)
            it->out = c->out;
        else
            it->error = "the partition's leader could not tell (no target member fetched from it "
                        "yet, or it no longer leads the partition)";
    } else {
        it->error = status == TN_ECLOSED ? "this node is shutting down"
                                         : "the partition's leader did not answer";
        if (status != TN_ECLOSED)
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "move progress: %s/%" PRIu32 " not read from its leader %" PRIu32 ": %s",
                      it->topic, it->partition, it->ps.leader, tn_strerror(status));
    }
    if (--op->pending == 0) {
        op->cb(op->arg, op->items, op->n);
        tn_free(op);
    }
}

void tn_router_move_progress(tn_router_t *r, tn_router_moveprog_t *items, uint32_t n,
                             tn_router_moveprog_cb cb, void *arg)
{
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    moveprog_op_t *op = tn_calloc(1, sizeof(*op));
    for (uint32_t i = 0; i < n; i++) {
        tn_router_moveprog_t *it = &items[i];
        it->error = NULL;
        it->op = op;
        tn_moveprog_local(r->replica, it->topic, it->partition, &it->ps, &it->out);
    }
    if (op == NULL) {
        cb(arg, items, n);
        return;
    }
    op->items = items;
    op->n = n;
    op->cb = cb;
    op->arg = arg;
    op->pending = 1; /* held while the calls start */
    for (uint32_t i = 0; i < n; i++) {
        tn_router_moveprog_t *it = &items[i];
        uint32_t leader = it->ps.leader;
        bool whole = it->out.known == (TN_WIRE_MOVEPROG_BYTES | TN_WIRE_MOVEPROG_LAG);
        if (whole || leader == TN_PSTATE_NONE || leader == r->node_id || !r->cluster || s == NULL)
            continue;
        const tn_meta_member_t *m = tn_meta_member_find(s, leader);
        if (m != NULL && m->status == TN_MEMBER_DEAD) {
            it->error = "the partition's leader is down";
            continue;
        }
        if (m == NULL || m->api_addr[0] == '\0' || r->rpc == NULL) {
            it->error = "the partition's leader is unreachable";
            continue;
        }
        it->call.data = it;
        op->pending++;
        int rc = tn_moveprog_call(r->rpc, m->api_addr, it->topic, it->partition,
                                  TN_ROUTER_MOVEPROG_TIMEOUT_MS, &it->call, on_moveprog_answer);
        if (rc != 0)
            on_moveprog_answer(&it->call, rc);
    }
    if (--op->pending == 0) {
        cb(arg, items, n);
        tn_free(op);
    }
}

/* --- purging a deleted topic on every member ------------------------------------- */

void tn_router_on_purge(tn_router_t *r, tn_purge_local_fn fn, void *arg)
{
    r->purge = fn;
    r->purge_arg = arg;
}

typedef struct purge_op_s purge_op_t;

/* One member's share of a fan-out: this node's local purge (node_id is
 * this node's) or a PURGE call. */
typedef struct {
    tn_purge_call_t call;
    purge_op_t *op;
    uint64_t node;
} purge_target_t;

struct purge_op_s {
    tn_router_t *r;
    tn_router_purge_cb cb;
    void *arg;
    uint32_t pending; /* answers not yet in, plus one while the calls start */
    int status;       /* the first failure's */
    tn_buf_t error;   /* "not purged on node N: why; node M: why" */
    char topic[TN_NAME_MAX + 1];
    uint32_t ntargets;
    purge_target_t targets[];
};

static void purge_failed(purge_op_t *op, uint64_t node, int status, const char *why)
{
    if (op->status == 0)
        op->status = status;
    char line[400];
    int n = snprintf(line, sizeof(line), "%snode %" PRIu64 ": %s",
                     tn_buf_size(&op->error) == 0 ? "not purged on " : "; ", node,
                     why != NULL && why[0] != '\0' ? why : tn_strerror(status));
    (void)tn_buf_append(&op->error, line, (size_t)TN_MIN((size_t)n, sizeof(line) - 1));
    TN_LOG(TN_LOG_WARN, "deleting topic %s: node %" PRIu64 " did not confirm its purge: %s",
           op->topic, node, why != NULL && why[0] != '\0' ? why : tn_strerror(status));
}

static void purge_unref(purge_op_t *op)
{
    if (--op->pending > 0)
        return;
    if (op->status == 0) {
        op->cb(op->arg, 0, NULL);
    } else {
        /* Out of memory for the sentence: the status alone. */
        if (tn_buf_append(&op->error, "", 1) != 0) {
            tn_buf_fini(&op->error);
            op->cb(op->arg, op->status, tn_strerror(op->status));
        } else {
            op->cb(op->arg, op->status, tn_buf_data(&op->error));
        }
    }
    tn_buf_fini(&op->error);
    tn_free(op);
}

static void on_member_purged(tn_purge_call_t *c, int status)
{
    purge_target_t *t = c->data;
    if (status != 0)
        purge_failed(t->op, t->node, status, c->error);
    purge_unref(t->op);
}

static void on_local_purged(void *arg, int status, const char *why)
{
    purge_target_t *t = arg;
    if (status == TN_ENOTFOUND)
        status = 0; /* nothing of it here */
    if (status != 0)
        purge_failed(t->op, t->node, status, why);
    purge_unref(t->op);
}

static void on_local_deleted(void *arg, int status)
{
    on_local_purged(arg, status, NULL);
}

int tn_router_purge(tn_router_t *r, const char *topic, int64_t created_at_ms, tn_router_purge_cb cb,
                    void *arg)
{
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    bool fan = r->cluster && r->rpc != NULL && s != NULL;
    uint32_t n = 1; /* this node */
    for (size_t i = 0; fan && i < s->nmembers; i++)
        if (s->members[i].id != r->node_id && s->members[i].status == TN_MEMBER_ALIVE)
            n++;
    purge_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)n * sizeof(op->targets[0]));
    if (op == NULL)
        return UV_ENOMEM;
    op->r = r;
    op->cb = cb;
    op->arg = arg;
    tn_buf_init(&op->error);
    snprintf(op->topic, sizeof(op->topic), "%s", topic);
    op->pending = 1;
    /* The others first: their calls are under way while this node's
     * purge waits for its own replica. */
    for (size_t i = 0; fan && i < s->nmembers; i++) {
        const tn_meta_member_t *m = &s->members[i];
        if (m->id == r->node_id || m->status != TN_MEMBER_ALIVE)
            continue;
        purge_target_t *t = &op->targets[op->ntargets++];
        t->op = op;
        t->node = m->id;
        t->call.data = t;
        op->pending++;
        int rc = m->api_addr[0] == '\0'
                     ? UV_EHOSTUNREACH
                     : tn_purge_call(r->rpc, m->api_addr, topic, created_at_ms, TN_PURGE_CALL_MS,
                                     &t->call, on_member_purged);
        if (rc != 0) {
            purge_failed(op, m->id, rc, m->api_addr[0] == '\0' ? "no address recorded" : NULL);
            op->pending--;
        }
    }
    purge_target_t *self = &op->targets[op->ntargets++];
    self->op = op;
    self->node = r->node_id;
    op->pending++;
    int rc = r->purge != NULL ? r->purge(r->purge_arg, topic, created_at_ms, TN_PURGE_WAIT_MS,
                                         on_local_purged, self)
                              : tn_broker_delete(r->o.broker, topic, NULL, on_local_deleted, self);
    if (rc != 0) {
        purge_failed(op, r->node_id, rc, NULL);
        op->pending--;
    }
    purge_unref(op);
    return 0;
}

/* --- checking a remote from every member ------------------------------------------ */

void tn_router_on_rcheck(tn_router_t *r, tn_rcheck_local_fn fn, void *arg)
{
    r->rcheck = fn;
    r->rcheck_arg = arg;
}

typedef struct rcheck_op_s rcheck_op_t;

/* One member's share: this node's local check or a REMOTE_CHECK call. */
typedef struct {
    tn_rcheck_call_t call;
    rcheck_op_t *op;
    uint32_t row;
} rcheck_target_t;

struct rcheck_op_s {
    tn_router_rcheck_cb cb;
    void *arg;
    uint32_t pending; /* answers not yet in, plus one while the calls start */
    int64_t start_ms;
    uint32_t n;
    tn_router_rcheck_row_t *rows;
    rcheck_target_t targets[];
};

static int rcheck_row_cmp(const void *a, const void *b)
{
    uint64_t x = ((const tn_router_rcheck_row_t *)a)->node;
    uint64_t y = ((const tn_router_rcheck_row_t *)b)->node;
    return x < y ? -1 : x > y;
}

static void rcheck_unref(rcheck_op_t *op)
{
    if (--op->pending > 0)
        return;
    qsort(op->rows, op->n, sizeof(*op->rows), rcheck_row_cmp);
    op->cb(op->arg, op->rows, op->n);
    tn_free(op->rows);
    tn_free(op);
}

/* Row i had no result: why (our words). */
static void rcheck_member_failed(rcheck_op_t *op, uint32_t i, int status, const char *why)
{
    tn_router_rcheck_row_t *row = &op->rows[i];
    row->member_error = true;
    row->res.cls = 1; /* unreachable */
    row->res.status = 0;
    row->res.detail[0] = '\0';
    int64_t took = tn_now_mono_ms() - op->start_ms;
    row->res.ms = took > 0 ? (uint32_t)TN_MIN(took, (int64_t)UINT32_MAX) : 0;
    snprintf(row->error, sizeof(row->error), "%s",
             why != NULL && why[0] != '\0' ? why : tn_strerror(status));
    TN_LOG(TN_LOG_WARN, "remote check: node %" PRIu64 " gave no result: %s", row->node, row->error);
}

static void on_member_checked(tn_rcheck_call_t *c, int status)
{
    rcheck_target_t *t = c->data;
    if (status == 0)
        t->op->rows[t->row].res = c->result;
    else
        rcheck_member_failed(t->op, t->row, status, c->error);
    rcheck_unref(t->op);
}

static void on_local_checked(void *arg, const tn_rcheck_result_t *res)
{
    rcheck_target_t *t = arg;
    t->op->rows[t->row].res = *res;
    rcheck_unref(t->op);
}

int tn_router_rcheck(tn_router_t *r, const char *remote, uint64_t remote_id, const char *topic,
                     tn_router_rcheck_cb cb, void *arg)
{
    const tn_meta_state_t *s = r->o.meta != NULL ? tn_meta_state(r->o.meta) : NULL;
    bool fan = r->cluster && r->rpc != NULL && s != NULL;
    uint32_t n = 1; /* this node */
    for (size_t i = 0; fan && i < s->nmembers; i++)
        if (s->members[i].id != r->node_id && s->members[i].status == TN_MEMBER_ALIVE)
            n++;
    /* op and its rows: owned by the fan-out until the last answer
     * (rcheck_unref frees both after cb). */
    rcheck_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)n * sizeof(op->targets[0]));
    tn_router_rcheck_row_t *rows = op != NULL ? tn_calloc(n, sizeof(*rows)) : NULL;
    if (rows == NULL) {
        tn_free(op);
        return UV_ENOMEM;
    }
    op->cb = cb;
    op->arg = arg;
    op->rows = rows;
    op->start_ms = tn_now_mono_ms();
    op->pending = 1;
    for (size_t i = 0; fan && i < s->nmembers; i++) {
        const tn_meta_member_t *m = &s->members[i];
        if (m->id == r->node_id || m->status != TN_MEMBER_ALIVE)
            continue;
        uint32_t k = op->n++;
        rcheck_target_t *t = &op->targets[k];
        t->op = op;
        t->row = k;
        t->call.data = t;
        rows[k].node = m->id;
        op->pending++;
        int rc = m->api_addr[0] == '\0'
                     ? UV_EHOSTUNREACH
                     : tn_rcheck_call(r->rpc, m->api_addr, remote, remote_id, topic,
                                      TN_RCHECK_CALL_MS, &t->call, on_member_checked);
        if (rc != 0) {
            rcheck_member_failed(op, k, rc, m->api_addr[0] == '\0' ? "no address recorded" : NULL);
            op->pending--;
        }
    }
    uint32_t k = op->n++;
    rcheck_target_t *self = &op->targets[k];
    self->op = op;
    self->row = k;
    rows[k].node = r->node_id;
    op->pending++;
    int rc = r->rcheck != NULL
                 ? r->rcheck(r->rcheck_arg, remote, remote_id, topic, on_local_checked, self)
                 : TN_ECLOSED;
    if (rc != 0) {
        rcheck_member_failed(op, k, rc,
                             rc == TN_ENOTFOUND ? "the remote is not in this node's metastore "
                                                  "replica"
                             : rc == TN_ECLOSED ? "this node cannot check remotes (not set up, or "
                                                  "shutting down)"
                                                : NULL);
        op->pending--;
    }
    rcheck_unref(op);
    return 0;
}
