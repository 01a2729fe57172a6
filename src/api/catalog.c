/* The catalog. See catalog.h. */
#include "core/platform.h"

#include "api/catalog.h"

#include "api/access.h"
#include "api/fanout.h"
#include "api/v1.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "meta/owner.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The per-partition in-flight and acked-ahead caps a topic gets when none
 * is given (the native API's defaults). */
#define TN_CATALOG_DEFAULT_CAP 1024

typedef struct pending_s pending_t;
typedef struct held_s held_t;
typedef struct gated_s gated_t;
typedef struct gone_s gone_t;
typedef struct claim_s claim_t;
typedef struct asked_s asked_t;
typedef struct purge_s purge_t;
typedef struct fresh_s fresh_t;
typedef struct undo_s undo_t;
typedef struct parked_s parked_t;

/* How long an NSQ publish waits for the partition it asked for here
 * (grow_here) before it fails: the proposal, its arrival in this replica
 * and the growth in the engine take well under a second when the
 * metastore has a leader. */
#define CLAIM_WAIT_MS  10000
#define CLAIM_CHECK_MS 250

typedef struct confirm_s confirm_t;

struct tn_catalog_s {
    tn_replica_t *replica; /* NULL: no replicated partitions */
    tn_broker_t *broker;
    tn_meta_t *meta;
    tn_catalog_opts_t o;
    pending_t *pending; /* recorded topics being created or grown */
    held_t *held;       /* creations waiting for their record in the replica */
    gated_t *gated;     /* the gate's proposals under way */
    gone_t *gone;       /* deletions following the records (a cluster's) */
    claim_t *claims;    /* NSQ publishes waiting for a partition of their topic here */
    asked_t *asked;     /* TOPIC_GROW_FOR proposals under way */
    uv_timer_t *timer;  /* the claims' deadlines (made with the first claim) */
    purge_t *purges;    /* confirmed deletions under way (tn_catalog_purge) */
    uv_timer_t *ptimer; /* their deadlines and busy topics (made with the first purge) */
    uv_timer_t *retry;  /* the records made again after a refusal for descriptors
                           (make_refused; made with the first) */
    fresh_t *fresh;     /* a lone node's: topics the gate recorded, not made yet */
    undo_t *undoing;    /* their records being taken back (take_back) */
    parked_t *parked;   /* creations of those topics waiting for that */
#ifdef TN_TEST
    undo_t *delayed; /* take-backs TERN_TEST_CATALOG_TAKE_BACK_DELAY holds back */
    uv_timer_t *lag; /* TERN_TEST_CATALOG_LAG_MS: following the replica late */
    /* TERN_TEST_DELETIONS_AFTER_MS: how long deletions are held from the
     * first look (0: not held), and until when (loop ms, 0: not armed). */
    uint64_t deletions_hold, deletions_from;
#endif
    bool recovered_held; /* recovered partitions held until placed (release_recovered) */
    bool purge_checking; /* purges_check is walking the list */
    bool purge_again;    /* and was asked again meanwhile (a deletion that ended at once) */
    /* In a cluster: the replica was confirmed current with the leader
     * since the start (follow_deletions waits for it), and the
     * confirmation under way (NULL: none). */
    bool current;
    confirm_t *confirm;
};

/* A tn_meta_confirm of the catalog's; a catalog that stops first
 * detaches it (c = NULL). */
struct confirm_s {
    tn_catalog_t *c;
};

/* A publish with grow_here (queue.h) that found no partition of its NSQ
 * topic here: answered once the engine has one open here, or at its
 * deadline. */
struct claim_s {
    tn_waiter_t *w;
    char topic[TN_NAME_MAX + 1];
    int64_t deadline_ms; /* monotonic */
    int status;          /* CLAIM_WAITING, or the answer decided for it */
    claim_t *next;
};

#define CLAIM_WAITING 1

/* A TOPIC_GROW_FOR of this node's, on the catalog's list until its
 * callback; a catalog that stops first detaches it (c = NULL). */
struct asked_s {
    tn_meta_req_t req;
    tn_catalog_t *c;
    char topic[TN_NAME_MAX + 1];
    asked_t *next;
};

/* A creation whose record the leader committed before this replica
 * applied it (a follower, in a cluster): the gate stays shut until the
 * record is here. A topic's engine asks where its partitions live as soon
 * as the gate opens; and what the engine has that the replica does not
 * name counts as deleted (follow_deletions), so nothing is made ahead of
 * its record. */
struct held_s {
    tn_gate_t *g;
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1]; /* "": the topic's creation */
    held_t *next;
};

/* A deletion asked of the engine because the records no longer name the
 * topic or channel (deleted through another node, or while this node was
 * away). Its engine events are not proposed (the record is gone already,
 * and one made again meanwhile is another topic). On the catalog's list
 * until its callback; a catalog that stops first detaches it (c = NULL). */
struct gone_s {
    tn_catalog_t *c;
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1]; /* "": the whole topic */
    gone_t *next;
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

/* The record of a topic the engine makes for an NSQ door. */
static void topic_record(tn_catalog_t *c, const tn_topic_t *t, tn_meta_cmd_t *out)
{
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
    const char *owner = c->o.security ? tn_access_parent_owner(c->meta, t->name) : NULL;
    if (owner != NULL)
        snprintf(cmd.topic.owner, sizeof(cmd.topic.owner), "%s", owner);
    /* The metastore gives a dead-letter name its parent's owner from its
     * own state, which this replica may lag (meta/owner.h). */
    if (c->o.security && tn_meta_dlq_form(t->name))
        cmd.owner_rule = TN_META_OWN_FOLLOW;
    /* The server's defaults. The metastore clamps the factor to the
     * members alive when it applies the record (cmd.h, clamp), not this
     * node's copy, which may lag. */
    cmd.topic.replication_factor = c->o.replication_factor > 0 ? c->o.replication_factor : 1;
    cmd.topic.min_insync =
        (uint8_t)TN_MIN(c->o.min_insync > 0 ? c->o.min_insync : 1, cmd.topic.replication_factor);
    cmd.clamp = true;
    *out = cmd;
}

static void record_topic(tn_catalog_t *c, const tn_topic_t *t)
{
    if (tn_meta_topic_find(tn_meta_state(c->meta), t->name) != NULL)
        return;
    tn_meta_cmd_t cmd;
    topic_record(c, t, &cmd);
    char what[TN_NAME_MAX + 8];
    snprintf(what, sizeof(what), "topic %s", t->name);
    propose(c, &cmd, what);
}

/* --- the creation gate ------------------------------------------------------- */

/* A proposal of the gate. On the catalog's list until its callback; a
 * catalog that stops first detaches it (c = NULL). */
struct gated_s {
    tn_meta_req_t req;
    tn_gate_t *g;
    tn_catalog_t *c;
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1]; /* "": a topic creation */
    int64_t created_at_ms;         /* a topic creation's record */
    gated_t *next;
};

/* Whether the replica has the record of topic (channel "") or of its
 * channel. */
static bool recorded(const tn_catalog_t *c, const char *topic, const char *channel)
{
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    return channel[0] == '\0' ? tn_meta_topic_find(s, topic) != NULL
                              : tn_meta_channel_exists(s, topic, channel);
}

/* The engine's channel ch takes the stamp of its record (meta/cmd.h
 * CHANNEL_PUT) when it has none yet: made here before its record (the
 * gate), from its record, or loaded from disk at start (from the record
 * a replica confirmed current holds: adopt_stamps). A channel whose stamp is known
 * is never given another: one whose record has another stamp is an old
 * channel of the name, which follow_deletions replaces. The channels of
 * fan-out links have none: their record is one for every node's channel,
 * which fanout.c makes and deletes (fanout.h), so their state is
 * replicated unchecked, as before stamps. */
static void adopt_stamp(const tn_catalog_t *c, const char *topic, tn_channel_t *ch)
{
    uint64_t stamp;
    if (ch != NULL && ch->stamp == 0 && !ch->memory && !ch->deleted &&
        ch->state != TN_OBJ_DELETING && ch->state != TN_OBJ_FAILED &&
        !tn_fanout_is_channel(ch->name) &&
        tn_meta_channel_find(tn_meta_state(c->meta), topic, ch->name, &stamp))
        ch->stamp = stamp;
}

/* Every engine channel without a stamp takes its record's (adopt_stamp),
 * on each change of a replica confirmed current (replica_current), in a
 * cluster: not only once deletions are followed (TERN_TEST_DELETIONS_AFTER_MS
 * holds those), since a follower refuses the leader's stamped records for
 * a channel whose stamp it does not know. Not before the confirmation: a
 * replica started empty beside files (`ternctl restore --rejoin`) passes
 * through older states while it catches up, and a channel loaded from
 * disk that took a record those show (deleted and made again since)
 * would be replaced by follow_deletions once the replica is current, its
 * state here dropped, although the files are the new record's channel.
 * A restart's replica is current once ready (replica_current), so this
 * waits only on such a node (its 503s to the leader are retried). */
static void adopt_stamps(tn_catalog_t *c)
{
    tn_broker_t *b = c->broker;
    for (size_t i = 0; i < b->nbuckets; i++)
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->memory || t->state != TN_OBJ_READY)
                continue;
            int copy_here = -1; /* asked once per topic, when needed */
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
                adopt_stamp(c, t->name, ch);
                /* On disk too (a channel from before stamps, or made before
                 * its record was matched), so a node that comes back after
                 * the channel was made again tells the two apart. */
                if (ch->stamp == 0 || ch->stamp == ch->stamp_kept)
                    continue;
                if (copy_here < 0)
                    copy_here =
                        c->replica != NULL && tn_replica_holds_own(c->replica, t->name, t->nparts);
                tn_channel_keep_stamp(ch, copy_here == 1);
            }
        }
}

/* The engine's channel of topic named channel (made, or being made), or
 * NULL. */
static tn_channel_t *engine_channel(const tn_catalog_t *c, const char *topic, const char *channel)
{
    tn_topic_t *t = tn_broker_topic_find(c->broker, topic);
    if (t == NULL || t->state == TN_OBJ_DELETING)
        return NULL;
    tn_channel_t *ch = t->channels;
    while (ch != NULL && strcmp(ch->name, channel) != 0)
        ch = ch->next;
    return ch;
}

/* --- a lone node's creations taken back ---------------------------------------- */

/* A topic the gate recorded for a door's creation (an NSQ PUB to a new
 * topic, /topic/create) on a lone node, until the engine made it
 * (TN_EV_TOPIC_UP) or failed to (TN_EV_TOPIC_FAILED: take_back). */
struct fresh_s {
    char topic[TN_NAME_MAX + 1];
    int64_t created_at_ms; /* the record's */
    fresh_t *next;
};

/* The record of a creation the engine failed, being taken back (its
 * TOPIC_DELETE under way). On the catalog's list until its callback; a
 * catalog that stops first detaches it (c = NULL). external: taken back
 * by another door (tn_catalog_hold_creations; req unused), on the list
 * until it releases it, freed by a catalog that stops first. */
struct undo_s {
    tn_meta_req_t req;
    bool external;
    tn_catalog_t *c;
    char topic[TN_NAME_MAX + 1];
    int64_t created_at_ms;
    undo_t *next;
#ifdef TN_TEST
    uv_timer_t delay; /* TERN_TEST_CATALOG_TAKE_BACK_DELAY's (on c->delayed meanwhile) */
#endif
};

/* A creation the gate saw for a topic whose record is being taken back:
 * its record (cmd) is proposed once that ends, so it is never the old
 * record that is deleted under it. */
struct parked_s {
    tn_gate_t *g;
    tn_meta_cmd_t cmd;
    /* The catalog's own making of a record (make): it goes on on the
     * record if it is still there once the take-back ends, and fails
     * (TN_ENOTFOUND) once it is gone; never recorded anew (cmd unused). */
    bool make;
    parked_t *next;
};

static bool making(const tn_catalog_t *c, const char *topic);

static void gate_propose(tn_catalog_t *c, tn_gate_t *g, const char *topic, const char *channel,
                         const tn_meta_cmd_t *cmd);

/* Whether this node is the only member there can be (no cluster). */
static bool lone(const tn_catalog_t *c)
{
    return !c->o.cluster && tn_meta_state(c->meta)->nmembers <= 1;
}

static void fresh_add(tn_catalog_t *c, const char *topic, int64_t created_at_ms)
{
    fresh_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL)
        return; /* its record stays if its making fails, as before */
    snprintf(f->topic, sizeof(f->topic), "%s", topic);
    f->created_at_ms = created_at_ms;
    f->next = c->fresh;
    c->fresh = f;
}

/* Take topic off the fresh list: its record's creation time, 0 when it
 * was not there. */
static int64_t fresh_take(tn_catalog_t *c, const char *topic)
{
    for (fresh_t **pp = &c->fresh; *pp != NULL; pp = &(*pp)->next) {
        fresh_t *f = *pp;
        if (strcmp(f->topic, topic) == 0) {
            int64_t at = f->created_at_ms;
            *pp = f->next;
            tn_free(f);
            return at;
        }
    }
    return 0;
}

static bool undoing(const tn_catalog_t *c, const char *topic)
{
    for (const undo_t *u = c->undoing; u != NULL; u = u->next)
        if (strcmp(u->topic, topic) == 0)
            return true;
    return false;
}

/* Propose the records of the creations parked for topic, whose record
 * taken back was made at old_ms (all of them, refused with TN_ECLOSED:
 * stopping). */
static void unpark(tn_catalog_t *c, const char *topic, int64_t old_ms, bool all)
{
    parked_t **pp = &c->parked;
    while (*pp != NULL) {
        parked_t *k = *pp;
        if (!all && strcmp(k->cmd.topic.name, topic) != 0) {
            pp = &k->next;
            continue;
        }
        *pp = k->next;
        if (all) {
            tn_gate_done(k->g, TN_ECLOSED);
        } else if (k->make) {
            tn_gate_done(
                k->g, tn_meta_topic_find(tn_meta_state(c->meta), topic) != NULL ? 0 : TN_ENOTFOUND);
        } else {
            /* Not the one taken back, even within its millisecond. */
            int64_t now = tn_now_wall_ms();
            k->cmd.topic.created_at_ms = now > old_ms ? now : old_ms + 1;
            gate_propose(c, k->g, topic, "", &k->cmd);
        }
        tn_free(k);
    }
}

static void on_undo_purged(void *arg, int status, const char *error)
{
    (void)arg;
    (void)status;
    (void)error; /* said by the purge; what is left goes at the next start */
}

static void on_taken_back(tn_meta_req_t *req, int status)
{
    undo_t *u = req->data;
    tn_catalog_t *c = u->c;
    if (c != NULL) {
        undo_t **pp = &c->undoing;
        while (*pp != u)
            pp = &(*pp)->next;
        *pp = u->next;
        if (status == TN_ECHANGED) {
            /* The name was deleted and made again meanwhile (through a
             * door of this node's, between take_back's check and the
             * commit): that topic is not the one whose making failed. */
            TN_LOG(TN_LOG_NOTICE,
                   "topic %s: the record of its failed creation was deleted and made again "
                   "meanwhile: nothing to take back, the topic made again stays",
                   u->topic);
        } else if (status != 0 && status != TN_ENOTFOUND) {
            TN_LOG(TN_LOG_ERROR,
                   "topic %s: taking back the record of its failed creation failed: %s; delete "
                   "the topic, or publish to it again once the cause is fixed",
                   u->topic, tn_strerror(status));
        } else {
            TN_LOG(TN_LOG_NOTICE,
                   "topic %s: its record is taken back, as making it here failed (see above)",
                   u->topic);
            /* What the creation left on disk goes (tn_broker_sweep_bare). */
            (void)tn_catalog_purge(c, u->topic, u->created_at_ms, TN_PURGE_WAIT_MS, on_undo_purged,
                                   NULL);
        }
        if (!undoing(c, u->topic))
            unpark(c, u->topic, u->created_at_ms, false);
    }
    tn_free(u);
}

void tn_catalog_hold_creations(tn_catalog_t *c, const char *topic, int64_t created_at_ms, bool hold)
{
    if (c == NULL)
        return;
    if (hold) {
        undo_t *u = tn_calloc(1, sizeof(*u));
        if (u == NULL)
            return;
        u->external = true;
        u->c = c;
        snprintf(u->topic, sizeof(u->topic), "%s", topic);
        u->created_at_ms = created_at_ms;
        u->next = c->undoing;
        c->undoing = u;
        return;
    }
    for (undo_t **pp = &c->undoing; *pp != NULL; pp = &(*pp)->next) {
        undo_t *u = *pp;
        if (u->external && u->created_at_ms == created_at_ms && strcmp(u->topic, topic) == 0) {
            *pp = u->next;
            tn_free(u);
            if (!undoing(c, topic))
                unpark(c, topic, created_at_ms, false);
            return;
        }
    }
}

/* Propose u's TOPIC_DELETE (take_back). It names the record's creation
 * time (if_created): the check that the record is still that creation's
 * was made on the replica, and before the delete commits a door of this
 * node's may delete the name and make it again, a topic the take-back
 * must leave alone (TN_ECHANGED then, on_taken_back). */
static void take_back_now(tn_catalog_t *c, undo_t *u)
{
    tn_meta_cmd_t cmd;
    tn_meta_cmd_take_back(&cmd, u->topic, u->created_at_ms);
    u->req.data = u;
    u->next = c->undoing;
    c->undoing = u;
    if (tn_meta_propose(c->meta, &u->req, &cmd, on_taken_back) != 0) {
        c->undoing = u->next;
        tn_free(u);
    }
}

#ifdef TN_TEST
static bool test_delay_take_back(tn_catalog_t *c, undo_t *u);
#endif

/* The engine failed to make topic, whose record the gate made for that
 * creation at created_at_ms: on a lone node the record is taken back (a
 * TOPIC_DELETE, then the purge of what the creation left), so the topic
 * is not listed without its log; the door's client was refused, and its
 * next try records it anew. In a cluster the record also stands for the
 * partitions other nodes made: the catalog makes it here again (make). */
static void take_back(tn_catalog_t *c, const char *topic, int64_t created_at_ms)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), topic);
    if (!lone(c) || e == NULL || e->rec.created_at_ms != created_at_ms ||
        tn_broker_topic_find(c->broker, topic) != NULL || undoing(c, topic))
        return; /* not that creation's record any longer, or made again */
    undo_t *u = tn_calloc(1, sizeof(*u));
    if (u == NULL)
        return;
    u->c = c;
    snprintf(u->topic, sizeof(u->topic), "%s", topic);
    u->created_at_ms = created_at_ms;
#ifdef TN_TEST
    if (test_delay_take_back(c, u))
        return;
#endif
    take_back_now(c, u);
}

static void on_gate_recorded(tn_meta_req_t *req, int status)
{
    gated_t *x = req->data;
    tn_gate_t *g = x->g;
    tn_catalog_t *c = x->c;
    bool no_topic = status == TN_ENOTFOUND;
    /* Recorded for this creation (not there before it). */
    if (status == 0 && c != NULL && x->channel[0] == '\0' && lone(c))
        fresh_add(c, x->topic, x->created_at_ms);
    if (c != NULL) {
        gated_t **pp = &c->gated;
        while (*pp != x)
            pp = &(*pp)->next;
        *pp = x->next;
    }
    /* Already there (a /v1 creation recorded it first), or a channel of a
     * topic from before the metastore: the engine goes on. */
    if (status == UV_EEXIST || status == TN_ENOTFOUND)
        status = 0;
    if (status == 0 && !no_topic && c != NULL && c->o.cluster &&
        !recorded(c, x->topic, x->channel)) {
        held_t *h = tn_calloc(1, sizeof(*h));
        if (h != NULL) {
            h->g = g;
            snprintf(h->topic, sizeof(h->topic), "%s", x->topic);
            snprintf(h->channel, sizeof(h->channel), "%s", x->channel);
            h->next = c->held;
            c->held = h;
            tn_free(x);
            return; /* on_meta_change opens it */
        }
        /* Out of memory: it goes on, unplaced; the next change places it. */
    }
    if (status == 0 && c != NULL && x->channel[0] != '\0')
        adopt_stamp(c, x->topic, engine_channel(c, x->topic, x->channel));
    tn_free(x);
    tn_gate_done(g, status);
}

/* Open the held gates whose record has arrived (all of them: stopping).
 * A channel's topic was in the replica when the channel was asked for: if
 * that record is gone, so is the topic, and the creation fails. */
static void release_held(tn_catalog_t *c, bool all)
{
    held_t **pp = &c->held;
    while (*pp != NULL) {
        held_t *h = *pp;
        int status = all ? TN_ECLOSED : 0;
        if (!all && !recorded(c, h->topic, h->channel)) {
            if (h->channel[0] == '\0' || recorded(c, h->topic, "")) {
                pp = &h->next;
                continue;
            }
            status = TN_ENOTFOUND;
        }
        *pp = h->next;
        if (status == 0 && h->channel[0] != '\0')
            adopt_stamp(c, h->topic, engine_channel(c, h->topic, h->channel));
        tn_gate_t *g = h->g;
        tn_free(h);
        tn_gate_done(g, status);
    }
}

/* The stamper (queue.h): the record the gate just let a creation through for. */
static int64_t record_stamp(void *arg, const char *name)
{
    tn_catalog_t *c = arg;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), name);
    return e != NULL ? e->rec.created_at_ms : 0;
}

static void gate(void *arg, tn_gate_t *g, tn_topic_t *t, tn_channel_t *ch)
{
    tn_catalog_t *c = arg;
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    tn_meta_cmd_t cmd;
    bool own = ch == NULL && making(c, t->name);
    if (ch == NULL) {
        /* A record being taken back (take_back) is still in the replica
         * until its TOPIC_DELETE commits: a creation passed on it would
         * be deleted (and purged) under its acknowledged messages. */
        if (tn_meta_topic_find(s, t->name) != NULL && !undoing(c, t->name)) {
            tn_gate_done(g, 0);
            return;
        }
        /* The catalog's own making of a record (make) whose record went
         * before the engine asked (a creation queued behind the removal
         * of a directory): deleted, it is not recorded again, as a
         * client's creation would be. */
        if (own && !undoing(c, t->name)) {
            tn_gate_done(g, TN_ENOTFOUND);
            return;
        }
        topic_record(c, t, &cmd);
    } else {
        if (tn_meta_channel_exists(s, t->name, ch->name)) {
            adopt_stamp(c, t->name, ch);
            tn_gate_done(g, 0);
            return;
        }
        memset(&cmd, 0, sizeof(cmd));
        cmd.type = TN_MC_CHANNEL_PUT;
        cmd.if_absent = true;
        snprintf(cmd.topic.name, sizeof(cmd.topic.name), "%s", t->name);
        snprintf(cmd.channel, sizeof(cmd.channel), "%s", ch->name);
    }
    if (ch == NULL && undoing(c, t->name)) {
        parked_t *k = tn_calloc(1, sizeof(*k));
        if (k == NULL) {
            tn_gate_done(g, UV_ENOMEM);
            return;
        }
        k->g = g;
        k->cmd = cmd;
        k->make = own;
        k->next = c->parked;
        c->parked = k;
        return; /* on_taken_back proposes it */
    }
    gate_propose(c, g, t->name, ch != NULL ? ch->name : "", &cmd);
}

/* Propose cmd, the record of topic (channel "") or of its channel, for
 * the creation behind g, which goes on once it is committed. */
static void gate_propose(tn_catalog_t *c, tn_gate_t *g, const char *topic, const char *channel,
                         const tn_meta_cmd_t *cmd)
{
    gated_t *x = tn_calloc(1, sizeof(*x));
    if (x == NULL) {
        tn_gate_done(g, UV_ENOMEM);
        return;
    }
    x->g = g;
    x->c = c;
    snprintf(x->topic, sizeof(x->topic), "%s", topic);
    snprintf(x->channel, sizeof(x->channel), "%s", channel);
    x->created_at_ms = cmd->topic.created_at_ms;
    x->req.data = x;
    x->next = c->gated;
    c->gated = x;
    int rc = tn_meta_propose(c->meta, &x->req, cmd, on_gate_recorded);
    if (rc != 0) {
        c->gated = x->next;
        tn_free(x);
        tn_gate_done(g, rc);
    }
}

static void record_channel(tn_catalog_t *c, const char *topic, const char *channel, bool add)
{
    if (tn_name_ephemeral(channel, strlen(channel)))
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

/* Whether a deletion following the records is under way for topic, or for
 * its channel (channel NULL: the topic's own). */
static bool going(const tn_catalog_t *c, const char *topic, const char *channel)
{
    for (const gone_t *g = c->gone; g != NULL; g = g->next)
        if (strcmp(g->topic, topic) == 0 &&
            (g->channel[0] == '\0' || (channel != NULL && strcmp(g->channel, channel) == 0)))
            return true;
    return false;
}

static void claims_check(tn_catalog_t *c, bool all, int why);

static void on_event(void *arg, tn_broker_event_t ev, const char *topic, const char *channel)
{
    tn_catalog_t *c = arg;
    /* Ephemeral topics live in memory only, and so never in the record. */
    if (tn_name_ephemeral(topic, strlen(topic)))
        return;
    switch (ev) {
    case TN_EV_TOPIC_UP: {
        tn_topic_t *t = NULL;
        /* One made for a record (the gate let it through for it) is not
         * recorded again: a record deleted while the engine made it (a
         * /v1 creation taken back, create_failed in v1/topics.c; a
         * deletion through another node) stays deleted, and the topic
         * goes by follow_deletions. */
        if (tn_broker_topic(c->broker, topic, strlen(topic), false, 0, NULL, &t) == 0 &&
            t->record_created_ms == 0)
            record_topic(c, t);
        (void)fresh_take(c, topic);
        /* A /v1 topic made (again) in the engine takes its record's settings. */
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), topic);
        if (e != NULL)
            tn_v1_apply_topic(c->broker, &e->rec);
        break;
    }
    case TN_EV_TOPIC_DOWN: {
        if (going(c, topic, NULL))
            break;
        tn_meta_cmd_t cmd;
        memset(&cmd, 0, sizeof(cmd));
        cmd.type = TN_MC_TOPIC_DELETE;
        snprintf(cmd.topic.name, sizeof(cmd.topic.name), "%s", topic);
        char what[TN_NAME_MAX + 16];
        snprintf(what, sizeof(what), "deletion of %s", topic);
        propose(c, &cmd, what);
        break;
    }
    case TN_EV_TOPIC_FAILED: {
        int64_t at = fresh_take(c, topic);
        if (at != 0)
            take_back(c, topic, at);
        break;
    }
    case TN_EV_CHANNEL_UP:
        record_channel(c, topic, channel, true);
        break;
    case TN_EV_CHANNEL_DOWN:
        if (!going(c, topic, channel))
            record_channel(c, topic, channel, false);
        break;
    case TN_EV_PARTS_OPENED:
        /* A partition placed here opened (a replicated one this node
         * leads now, handed over by the replica manager): an NSQ publish
         * waiting for one goes on now, not at the claims' next check
         * (CLAIM_CHECK_MS, which an auto-created topic waited for). */
        claims_check(c, false, 0);
        break;
    }
}

/* --- placement ---------------------------------------------------------------- */

/* Where partition p of t lives, for the engine (tn_place_fn): here when
 * the metastore names this node its owner, elsewhere when it names
 * another.
 *
 * Unassigned (owner 0: no member was alive when the partition was made,
 * or a snapshot from before owners were kept), and a topic this replica
 * has no record of yet, count as here on a lone node and as not placed
 * in a cluster. A lone node is the only member there can be: the
 * metastore gives it every unassigned partition once it registers (the
 * rule in meta/state.h), so "here" is what the record will say anyway,
 * and a lone node serves every topic exactly as it did before placement
 * existed, also before its first registration is committed and for data
 * from before the metastore. In a cluster an unassigned partition opened
 * on every node would fork its log, so none opens it until the metastore
 * names its owner (placement follows then). */
static bool place(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner)
{
    tn_catalog_t *c = arg;
    if (c->replica != NULL) {
        /* A replicated partition: here once the replica manager handed
         * the partition it leads to the engine; elsewhere (the leader, or
         * this node while not handed yet) otherwise. Offline: not placed. */
        bool decided = false;
        bool here = tn_replica_local(c->replica, t->name, p, &decided);
        if (decided) {
            *owner = tn_meta_state_owner(tn_meta_state(c->meta), t->name, p);
            return here;
        }
    }
    *owner = tn_meta_state_owner(tn_meta_state(c->meta), t->name, p);
    if (*owner == 0)
        return !c->o.cluster;
    return *owner == c->o.node_id;
}

static void make(tn_catalog_t *c, const tn_meta_topic_entry_t *e, bool following);
static void make_refused(tn_catalog_t *c, const char *topic, const char *channel, int rc);

/* --- NSQ topics grow where they are published ----------------------------------- */

static bool has_local_part(const tn_topic_t *t)
{
    for (uint32_t p = 0; p < t->nparts; p++)
        if (tn_topic_part_local(t, p))
            return true;
    return false;
}

/* Answer the claims whose topic has a partition open here now, whose
 * topic is gone, or whose deadline passed. The answers run after the list
 * is settled: a publish answered may start another that claims. */
static void claims_check(tn_catalog_t *c, bool all, int why)
{
    int64_t now = tn_now_mono_ms();
    claim_t *done = NULL;
    claim_t **pp = &c->claims;
    while (*pp != NULL) {
        claim_t *k = *pp;
        tn_topic_t *t = NULL;
        int rc = tn_broker_topic(c->broker, k->topic, strlen(k->topic), false, 0, NULL, &t);
        int status = k->status;
        if (all)
            status = why;
        else if (status != CLAIM_WAITING)
            ; /* decided (claims_fail) */
        else if (rc == 0 && has_local_part(t))
            status = 0;
        else if (rc != 0 && rc != UV_EAGAIN)
            status = rc; /* deleted, or failed */
        else if (tn_meta_topic_find(tn_meta_state(c->meta), k->topic) == NULL)
            status = TN_ENOTFOUND;
        else if (now >= k->deadline_ms)
            status = UV_ETIMEDOUT;
        if (status == CLAIM_WAITING) {
            pp = &k->next;
            continue;
        }
        *pp = k->next;
        k->next = done;
        done = k;
        k->status = status;
    }
    if (c->claims == NULL && c->timer != NULL)
        uv_timer_stop(c->timer);
    while (done != NULL) {
        claim_t *k = done;
        done = k->next;
        int status = k->status;
        if (status != 0 && status != TN_ECLOSED)
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "NSQ publish to %s: no partition of it here to take it (%s); answered "
                      "E_PUB_FAILED",
                      k->topic, tn_strerror(status));
        tn_waiter_t *w = k->w;
        tn_free(k);
        w->cb(w, status);
    }
}

/* Also asks the engine again for what the records of the waiting claims'
 * topics name: a growth that could not start at the change that brought
 * it (the topic was busy) does not wait for the next change. */
static void on_claim_timer(uv_timer_t *h)
{
    tn_catalog_t *c = h->data;
    for (claim_t *k = c->claims; k != NULL; k = k->next) {
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), k->topic);
        if (e != NULL)
            make(c, e, true);
    }
    claims_check(c, false, 0);
}

/* The claims of topic fail with status (their ask was refused). */
static void claims_fail(tn_catalog_t *c, const char *topic, int status)
{
    for (claim_t *k = c->claims; k != NULL; k = k->next)
        if (strcmp(k->topic, topic) == 0)
            k->status = status;
    claims_check(c, false, 0);
}

static void on_grown_for(tn_meta_req_t *req, int status)
{
    asked_t *a = req->data;
    tn_catalog_t *c = a->c;
    if (c != NULL) {
        asked_t **pp = &c->asked;
        while (*pp != a)
            pp = &(*pp)->next;
        *pp = a->next;
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), a->topic);
        if (status != 0) {
            TN_LOG(TN_LOG_WARN,
                   "metastore: growing NSQ topic %s by a partition on node %" PRIu64 " failed: %s",
                   a->topic, c->o.node_id, tn_strerror(status));
            claims_fail(c, a->topic, status);
        } else if (e != NULL) {
            /* On a follower the leader may answer before this replica has
             * the record; then the change that brings it makes it. */
            make(c, e, true);
            claims_check(c, false, 0);
        }
    }
    tn_free(a);
}

static bool owns_part(const tn_meta_topic_entry_t *e, uint64_t node)
{
    for (uint32_t p = 0; p < e->rec.partitions; p++)
        if (e->owners[p] == node)
            return true;
    return false;
}

/* Whether node leads a partition of e now (owns a factor-1 one). */
static bool leads_part(const tn_meta_topic_entry_t *e, uint64_t node)
{
    for (uint32_t p = 0; p < e->rec.partitions; p++) {
        bool replicated = e->pstates != NULL && e->pstates[p].nreplicas > 0;
        if ((replicated ? e->pstates[p].leader : e->owners[p]) == node)
            return true;
    }
    return false;
}

/* Ask the metastore for a partition of topic owned by this node
 * (TOPIC_GROW_FOR), unless an ask for it is under way. */
static int ask_grow(tn_catalog_t *c, const char *topic)
{
    for (const asked_t *a = c->asked; a != NULL; a = a->next)
        if (strcmp(a->topic, topic) == 0)
            return 0;
    asked_t *a = tn_calloc(1, sizeof(*a));
    if (a == NULL)
        return UV_ENOMEM;
    tn_meta_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.type = TN_MC_TOPIC_GROW_FOR;
    snprintf(cmd.topic.name, sizeof(cmd.topic.name), "%s", topic);
    cmd.member.id = c->o.node_id;
    a->c = c;
    a->req.data = a;
    snprintf(a->topic, sizeof(a->topic), "%s", topic);
    int rc = tn_meta_propose(c->meta, &a->req, &cmd, on_grown_for);
    if (rc != 0) {
        tn_free(a);
        return rc;
    }
    a->next = c->asked;
    c->asked = a;
    TN_LOG(TN_LOG_INFO, "NSQ topic %s has no partition on this node: asking for one", topic);
    return 0;
}

/* The engine's grow-here hook (queue.h): an NSQ publish found every
 * partition of t on other nodes. In a cluster, an NSQ topic (not native)
 * grows by one partition this node owns, as a fleet of nsqd gets the
 * topic on each node its producers publish to; the publish waits for it
 * (at most CLAIM_WAIT_MS). A lone node has every partition, a /v1 topic
 * keeps the count its owner chose, a draining member grows nothing, and the
 * owner of partitions others lead now sends the publish to them. */
static int grow_here(void *arg, tn_topic_t *t, tn_waiter_t *w)
{
    tn_catalog_t *c = arg;
    const tn_meta_state_t *st = tn_meta_state(c->meta);
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(st, t->name);
    if (!c->o.cluster || e == NULL || e->rec.native)
        return TN_EREMOTE;
    /* A draining member takes no new partition: its publishes go to the
     * partitions elsewhere, as a /v1 topic's do (a decommission moves its
     * replicas off; a partition grown here would be moved off in turn,
     * and the next publish would grow another). */
    const tn_meta_member_t *self = tn_meta_member_find(st, c->o.node_id);
    if (self != NULL && self->draining)
        return TN_EREMOTE;
    if (c->timer == NULL) {
        uv_timer_t *h = tn_calloc(1, sizeof(*h));
        if (h == NULL || uv_timer_init(c->broker->loop, h) != 0) {
            tn_free(h);
            return UV_ENOMEM;
        }
        h->data = c;
        c->timer = h;
    }
    /* The owner (preferred leader) of partitions all led elsewhere now (a
     * failover, a forced election): the publish goes to their leaders, as
     * a /v1 produce does, rather than waiting for one to be led here. */
    bool owns = owns_part(e, c->o.node_id);
    if (owns && !leads_part(e, c->o.node_id))
        return TN_EREMOTE;
    claim_t *k = tn_calloc(1, sizeof(*k));
    if (k == NULL)
        return UV_ENOMEM;
    /* Already recorded here (asked before, by another publish): the engine
     * follows the record, and the claim waits for that. */
    int rc = owns ? 0 : ask_grow(c, t->name);
    if (rc != 0) {
        tn_free(k);
        TN_LOG_RL(TN_LOG_WARN, 10000, "NSQ publish to %s: cannot ask for a partition here: %s",
                  t->name, tn_strerror(rc));
        return rc;
    }
    k->w = w;
    snprintf(k->topic, sizeof(k->topic), "%s", t->name);
    k->deadline_ms = tn_now_mono_ms() + CLAIM_WAIT_MS;
    k->status = CLAIM_WAITING;
    k->next = c->claims;
    c->claims = k;
    if (!uv_is_active((uv_handle_t *)c->timer))
        uv_timer_start(c->timer, on_claim_timer, CLAIM_CHECK_MS, CLAIM_CHECK_MS);
    return UV_EAGAIN;
}

/* --- following deletions ---------------------------------------------------- */

static void purges_check(tn_catalog_t *c, bool all, int why);
static void purges_gone(tn_catalog_t *c, const char *topic, int status);

static void on_gone(void *arg, int status)
{
    gone_t *g = arg;
    tn_catalog_t *c = g->c;
    if (status != 0 && status != TN_ENOTFOUND && status != TN_ECLOSED)
        TN_LOG(TN_LOG_ERROR, "deleting %s%s%s, which the metastore no longer records, failed: %s",
               g->channel[0] != '\0' ? "channel " : "topic ", g->channel,
               g->channel[0] != '\0' ? " of " : "", tn_strerror(status));
    if (c != NULL) {
        gone_t **pp = &c->gone;
        while (*pp != g)
            pp = &(*pp)->next;
        *pp = g->next;
        /* Made again meanwhile: a new one, made now that the old is gone. */
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), g->topic);
        if (e != NULL && status != TN_ECLOSED)
            make(c, e, true);
        if (g->channel[0] == '\0')
            purges_gone(c, g->topic, status);
    }
    tn_free(g);
}

/* Whether the engine's ready topic t is not the one the replica records
 * (e, NULL when none): deleted, or deleted and made again. A topic whose
 * record it was made from is not known (its directory was written before
 * stamps, queue.h record_created_ms) takes e's, and keeps it as its stamp.
 * So does a topic whose only files here are the replica manager's own
 * copies, opened before the engine's topic was made (which then had no
 * partition of its own to stamp the directory for). */
static bool stale(tn_catalog_t *c, tn_topic_t *t, const tn_meta_topic_entry_t *e)
{
    if (e != NULL && t->record_created_ms == 0)
        t->record_created_ms = e->rec.created_at_ms;
    if (e == NULL || t->record_created_ms != e->rec.created_at_ms)
        return true;
    if (tn_topic_stamp_due(t) != 0)
        tn_topic_keep_stamp(t, c->replica != NULL &&
                                   tn_replica_holds_own(c->replica, t->name, t->nparts));
    return false;
}

/* Put g (off any list) on c's deletions and ask the engine for it
 * (purge: for a confirmed delete, tn_catalog_purge, which is not news).
 * false when the engine could not take it (out of memory; g is freed). */
static bool gone_start(tn_catalog_t *c, gone_t *g, bool purge)
{
    g->c = c;
    g->next = c->gone;
    c->gone = g;
    bool channel = g->channel[0] != '\0';
    if (purge)
        TN_LOG(TN_LOG_INFO, "purging deleted topic %s here", g->topic);
    else if (channel)
        TN_LOG(TN_LOG_NOTICE, "metastore: channel %s of %s is no longer recorded; deleting it here",
               g->channel, g->topic);
    else
        TN_LOG(TN_LOG_NOTICE,
               "metastore: topic %s is no longer recorded as it is here; deleting it here",
               g->topic);
    if (tn_broker_delete(c->broker, g->topic, channel ? g->channel : NULL, on_gone, g) != 0) {
        c->gone = g->next;
        tn_free(g); /* out of memory: a later change tries again */
        return false;
    }
    return true;
}

static gone_t *gone_new(gone_t **list, const char *topic, const char *channel)
{
    gone_t *g = tn_calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    snprintf(g->topic, sizeof(g->topic), "%s", topic);
    snprintf(g->channel, sizeof(g->channel), "%s", channel);
    g->next = *list;
    *list = g;
    return g;
}

static void follow_meta(tn_catalog_t *c);

static void on_confirmed(void *arg, int status)
{
    confirm_t *k = arg;
    tn_catalog_t *c = k->c;
    tn_free(k);
    if (c == NULL)
        return;
    c->confirm = NULL;
    if (status != 0) {
        TN_LOG_RL(TN_LOG_INFO, 10000,
                  "metastore: this node's replica is not confirmed current yet (%s): deletions "
                  "are followed once it is",
                  tn_strerror(status));
        return; /* the next change asks again */
    }
    c->current = true;
    follow_meta(c);
}

/* Whether the replica may be followed in deleting (follow_deletions).
 * A replica that started with the cluster's log (a restart) has applied
 * at least what it held before once it is ready, and deletions are
 * followed at once, before the replica manager acts on partitions of a
 * topic deleted meanwhile. One that started with none of it (at most its
 * bootstrap entry, tn_meta_start_index) waits until it was confirmed
 * current with the leader (tn_meta_confirm), which is asked for here:
 * "ready" is not enough there, since a metastore started empty beside
 * files (a node restored with `ternctl restore --rejoin`) is ready at its
 * bootstrap entry, before the leader's log has reached it, and would have
 * every topic deleted here as unrecorded. */
#ifdef TN_TEST
static bool unconfirmed_by_file(void);
#endif

static bool replica_current(tn_catalog_t *c)
{
#ifdef TN_TEST
    if (unconfirmed_by_file())
        return false;
#endif
    if (c->current)
        return true;
    if (tn_meta_start_index(c->meta) > 1) {
        c->current = true;
        return true;
    }
    if (c->confirm != NULL)
        return false;
    confirm_t *k = tn_calloc(1, sizeof(*k));
    if (k == NULL)
        return false;
    k->c = c;
    c->confirm = k;
    if (tn_meta_confirm(c->meta, on_confirmed, k) != 0) {
        c->confirm = NULL;
        tn_free(k); /* closing, or out of memory: the next change asks again */
    }
    return false;
}

/* In a cluster, delete from the engine the topics and durable channels the
 * replica no longer records: deleted through another node (or while this
 * node was away; at start the replica has applied at least what it had
 * before). A topic whose record has another creation time was deleted and
 * made again: the old one goes, the new one is made after it. Nothing is
 * made ahead of its record (the gate holds creations until the replica has
 * it), so what is ready here and unrecorded was recorded once. Busy ones
 * (being made, grown, deleted) are looked at on a later change. The
 * channels of fan-out links are left to fanout.c (fanout.h), which makes
 * each node's where its link starts and deletes those of links that are
 * gone: their record is one for every node's channel. */
#ifdef TN_TEST
static bool deletions_held(tn_catalog_t *c);
#endif

static bool topic_recorded(void *arg, const char *topic)
{
    const tn_catalog_t *c = arg;
    return tn_meta_topic_find(tn_meta_state(c->meta), topic) != NULL;
}

static void follow_deletions(tn_catalog_t *c)
{
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    tn_broker_t *b = c->broker;
#ifdef TN_TEST
    if (deletions_held(c))
        return;
#endif
    gone_t *found = NULL; /* collected first: deleting changes the lists walked */
    for (size_t i = 0; i < b->nbuckets; i++) {
        for (tn_topic_t *t = b->buckets[i]; t != NULL; t = t->hnext) {
            if (t->memory || t->state != TN_OBJ_READY || going(c, t->name, NULL))
                continue;
            const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, t->name);
            if (stale(c, t, e)) {
                if (gone_new(&found, t->name, "") == NULL)
                    break;
                continue;
            }
            for (tn_channel_t *ch = t->channels; ch != NULL; ch = ch->next) {
                if (ch->memory || ch->state != TN_OBJ_READY || going(c, t->name, ch->name) ||
                    tn_fanout_is_channel(ch->name))
                    continue;
                uint64_t stamp;
                if (tn_meta_channel_find(s, t->name, ch->name, &stamp)) {
                    if (ch->stamp == 0)
                        ch->stamp = stamp;
                    if (ch->stamp == stamp)
                        continue;
                    /* Deleted and made again, and this replica applied
                     * both before the catalog looked: the old channel goes
                     * (its files, every partition's), and on_gone makes
                     * the recorded one anew. */
                    TN_LOG(TN_LOG_NOTICE,
                           "metastore: channel %s of %s is recorded with another stamp (made "
                           "again); replacing it here",
                           ch->name, t->name);
                    ch->replaced = true; /* its consumers come back for the new one */
                }
                if (gone_new(&found, t->name, ch->name) == NULL)
                    break;
            }
        }
    }
    while (found != NULL) {
        gone_t *g = found;
        found = g->next;
        (void)gone_start(c, g, false);
    }
    /* A directory a pause made here with no copy, of a topic deleted while
     * this node was down and not made again: no topic here takes it. (One
     * recorded is the catalog's to make; one recorded anew, under another
     * stamp, goes with that creation.) */
    tn_broker_sweep_bare(b, topic_recorded, c);
}

/* --- confirmed deletions ------------------------------------------------------- */

/* How often the purges under way look again without a change of the
 * replica (a topic busy being made or grown, their deadlines). */
#define PURGE_CHECK_MS 100
/* How long a purge may take once the replica showed the deletion: the
 * caller's budget (TN_PURGE_CALL_MS) less the wait for the replica. */
#define PURGE_EXEC_MS (TN_PURGE_CALL_MS - TN_PURGE_WAIT_MS)

#define PURGE_WAITING 1

/* A tn_catalog_purge under way: on the catalog's list until answered. */
struct purge_s {
    char topic[TN_NAME_MAX + 1];
    int64_t created_at_ms;
    int64_t wait_deadline_ms; /* monotonic: the replica must show the deletion by then */
    int64_t exec_deadline_ms; /* monotonic: set once it did */
    bool shown;               /* the replica no longer has the record */
    int failed;               /* the engine's deletion failed with this */
    int status;               /* PURGE_WAITING, or the answer */
    tn_purge_done_cb done;
    void *arg;
    purge_t *next;
};

/* One look at p: PURGE_WAITING, or its answer. */
static int purge_step(tn_catalog_t *c, purge_t *p, int64_t now)
{
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    if (!p->shown) {
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, p->topic);
        if (e != NULL && e->rec.created_at_ms == p->created_at_ms)
            return now >= p->wait_deadline_ms ? UV_ETIMEDOUT : PURGE_WAITING;
        p->shown = true;
        p->exec_deadline_ms = now + PURGE_EXEC_MS;
    }
    if (p->failed != 0)
        return p->failed;
    if (!going(c, p->topic, NULL)) {
        tn_topic_t *t = NULL;
        int rc = tn_broker_topic(c->broker, p->topic, strlen(p->topic), false, 0, NULL, &t);
        if (rc == TN_ENOTFOUND) {
            /* Nothing of it here (any longer), but maybe the directory of
             * a creation that failed (a /v1 create whose record was taken
             * back): a lone node sweeps nowhere else. */
            if (!c->o.cluster || replica_current(c))
                tn_broker_sweep_bare(c->broker, topic_recorded, c);
            return 0;
        }
        if (rc == 0 && (t->memory || !stale(c, t, tn_meta_topic_find(s, p->topic))))
            return 0; /* the topic made again after it, not the old one */
        if (rc == 0) {
            /* The old one, not yet followed (a lone node, or the change
             * came while it was busy): deleted the way follow_deletions
             * does, so the two never both delete it. */
            gone_t *g = NULL;
            if (gone_new(&g, p->topic, "") != NULL)
                (void)gone_start(c, g, true);
        } else if (rc != UV_EAGAIN && rc != UV_EBUSY) {
            return rc;
        }
        /* Being made, grown or deleted: a later look. */
    }
    return now >= p->exec_deadline_ms ? UV_EBUSY : PURGE_WAITING;
}

static void on_purge_timer(uv_timer_t *h)
{
    purges_check(h->data, false, 0);
}

/* Answer the purges that are done (all of them with why: stopping). The
 * answers run after the list is settled. */
static void purges_check(tn_catalog_t *c, bool all, int why)
{
    if (c->purge_checking) {
        c->purge_again = true; /* the walk under way looks again */
        return;
    }
    c->purge_checking = true;
    purge_t *done = NULL;
    do {
        c->purge_again = false;
        int64_t now = tn_now_mono_ms();
        purge_t **pp = &c->purges;
        while (*pp != NULL) {
            purge_t *p = *pp;
            int status = all ? why : purge_step(c, p, now);
            if (status == PURGE_WAITING) {
                pp = &p->next;
                continue;
            }
            *pp = p->next;
            p->status = status;
            p->next = done;
            done = p;
        }
    } while (c->purge_again);
    c->purge_checking = false;
    if (c->purges == NULL && c->ptimer != NULL)
        uv_timer_stop(c->ptimer);
    while (done != NULL) {
        purge_t *p = done;
        done = p->next;
        char why_s[320];
        const char *msg = NULL;
        if (p->status == UV_EBUSY) {
            snprintf(why_s, sizeof(why_s), "its deletion was still under way after %d ms",
                     PURGE_EXEC_MS);
            msg = why_s;
        } else if (p->status != 0 && p->status != UV_ETIMEDOUT && p->status != TN_ECLOSED) {
            snprintf(why_s, sizeof(why_s), "removing its partitions failed: %s",
                     tn_strerror(p->status));
            msg = why_s;
        }
        if (msg != NULL)
            TN_LOG(TN_LOG_ERROR, "purging deleted topic %s: %s", p->topic, msg);
        p->done(p->arg, p->status, msg);
        tn_free(p);
    }
}

/* The engine's deletion of topic (one following the records) ended. */
static void purges_gone(tn_catalog_t *c, const char *topic, int status)
{
    if (status != 0 && status != TN_ENOTFOUND && status != TN_ECLOSED)
        for (purge_t *p = c->purges; p != NULL; p = p->next)
            if (p->shown && strcmp(p->topic, topic) == 0) /* not one still waiting */
                p->failed = status;
    purges_check(c, false, 0);
}

int tn_catalog_purge(void *catalog, const char *topic, int64_t created_at_ms, uint64_t wait_ms,
                     tn_purge_done_cb done, void *arg)
{
    tn_catalog_t *c = catalog;
    if (c->ptimer == NULL) {
        uv_timer_t *h = tn_calloc(1, sizeof(*h));
        if (h == NULL || uv_timer_init(c->broker->loop, h) != 0) {
            tn_free(h);
            return UV_ENOMEM;
        }
        h->data = c;
        c->ptimer = h;
    }
    purge_t *p = tn_calloc(1, sizeof(*p));
    if (p == NULL)
        return UV_ENOMEM;
    snprintf(p->topic, sizeof(p->topic), "%s", topic);
    p->created_at_ms = created_at_ms;
    p->wait_deadline_ms = tn_now_mono_ms() + (int64_t)wait_ms;
    p->status = PURGE_WAITING;
    p->done = done;
    p->arg = arg;
    p->next = c->purges;
    c->purges = p;
    if (!uv_is_active((uv_handle_t *)c->ptimer))
        uv_timer_start(c->ptimer, on_purge_timer, PURGE_CHECK_MS, PURGE_CHECK_MS);
    purges_check(c, false, 0); /* may answer it now */
    return 0;
}

/* The catalog's own makings parked behind a take-back (gate) whose
 * record was deleted meanwhile (by a user, through any node) fail now:
 * they would never be let through, and the engine's topic they hold as
 * being made would keep a purge of that deletion here waiting until the
 * take-back ends. */
static void release_parked_makes(tn_catalog_t *c)
{
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    parked_t *done = NULL; /* answered once the list is settled: the answers make and park */
    parked_t **pp = &c->parked;
    while (*pp != NULL) {
        parked_t *k = *pp;
        if (!k->make || tn_meta_topic_find(s, k->cmd.topic.name) != NULL) {
            pp = &k->next;
            continue;
        }
        *pp = k->next;
        k->next = done;
        done = k;
    }
    while (done != NULL) {
        parked_t *k = done;
        done = k->next;
        tn_gate_t *g = k->g;
        tn_free(k);
        tn_gate_done(g, TN_ENOTFOUND);
    }
}

/* What recovery opened in a cluster delivers once the placement was
 * followed with a replica caught up (as /readyz wants it: the log found
 * at start replayed, the leader heard from) and known current
 * (tn_catalog_start holds it): a copy found on disk that the metastore
 * placed elsewhere meanwhile (moved away while this node was down, or a
 * backup restored with --rejoin) went remote first. Once. */
static void release_recovered(tn_catalog_t *c)
{
    if (!c->recovered_held || !tn_meta_ready(c->meta) || !tn_meta_caught_up(c->meta) ||
        !replica_current(c))
        return;
    c->recovered_held = false;
    tn_broker_hold_recovered(c->broker, false);
}

/* The metastore's replica changed (another node's topic, a growth, an
 * assignment, a member's heartbeat): in a cluster, make what the records
 * name and follow the placement. A lone node has every partition already
 * and nothing to follow (it is the only member: its topics all came
 * through its own gate). */
static void follow_meta(tn_catalog_t *c)
{
    release_held(c, false);
    release_parked_makes(c);
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    if (!c->o.cluster && s->nmembers <= 1) {
        purges_check(c, false, 0);
        return;
    }
    if (c->o.cluster && replica_current(c)) {
        adopt_stamps(c);
        follow_deletions(c);
    }
    for (size_t i = 0; i < s->ntopics; i++) {
        make(c, s->topics[i], true);
        /* Settings changed through another node (a PATCH) reach this
         * engine's topic too: its partitions' caps and retention. */
        tn_v1_apply_topic(c->broker, &s->topics[i]->rec);
    }
    tn_broker_follow_placement(c->broker);
    release_recovered(c);
    claims_check(c, false, 0);
    purges_check(c, false, 0);
}

#ifdef TN_TEST
static bool held_by_file(tn_catalog_t *c);

static void on_lag_timer(uv_timer_t *h)
{
    if (held_by_file(h->data))
        return;
    /* Said, so a test knows the catalog looked at the replica as it is now. */
    const char *v = getenv("TERN_TEST_CATALOG_LAG_MS");
    if (v != NULL && atoi(v) > 0)
        TN_LOG(TN_LOG_NOTICE,
               "catalog: following the metastore replica (TERN_TEST_CATALOG_LAG_MS)");
    follow_meta(h->data);
}

/* The test hooks' one timer (c->lag, made on first use) started for ms
 * unless already pending. false when it could not be made. */
static bool lag_timer_start(tn_catalog_t *c, uint64_t ms)
{
    if (c->lag == NULL) {
        uv_timer_t *h = tn_calloc(1, sizeof(*h));
        if (h == NULL || uv_timer_init(c->broker->loop, h) != 0) {
            tn_free(h);
            return false;
        }
        h->data = c;
        c->lag = h;
    }
    if (!uv_is_active((uv_handle_t *)c->lag))
        uv_timer_start(c->lag, on_lag_timer, ms, 0);
    return true;
}

/* TERN_TEST_CATALOG_LAG_MS=n (ternd-test): the catalog follows the
 * replica n ms after a change, so a test can show what a request does
 * between the metastore applying a record and the catalog making what it
 * names. True when the change is left to the timer. */
static bool lagging(tn_catalog_t *c)
{
    const char *v = getenv("TERN_TEST_CATALOG_LAG_MS");
    if (v == NULL || atoi(v) <= 0)
        return false;
    /* One pending timer covers every change until it fires: it reads
     * the replica as it is then. */
    return lag_timer_start(c, (uint64_t)atoi(v));
}
#endif

#ifdef TN_TEST
/* TERN_TEST_DELETIONS_AFTER_MS=n (ternd-test): the catalog follows no
 * deletion (follow_deletions) until n ms after it first would (the
 * replica ready), then looks again by itself, so a test can have the
 * replica manager act first on the partitions of a topic deleted (and
 * made again) while the node was away, whichever order a start takes.
 * True while held. */
static bool deletions_held(tn_catalog_t *c)
{
    if (c->deletions_hold == 0)
        return false;
    uint64_t now = uv_now(c->broker->loop);
    if (c->deletions_from == 0)
        c->deletions_from = now + c->deletions_hold;
    if (now >= c->deletions_from) {
        c->deletions_hold = 0;
        return false;
    }
    (void)lag_timer_start(c, c->deletions_from - now); /* else a later change looks again */
    return true;
}
#endif

#ifdef TN_TEST
/* TERN_TEST_CATALOG_HOLD=path (ternd-test): while the file path exists,
 * the catalog follows no change of the replica (it looks again every
 * 100 ms), so a test can have this node's engine keep a channel that the
 * metastore deleted and recorded again meanwhile, and let both reach the
 * catalog at once when it removes the file. True while held. */
static bool held_by_file(tn_catalog_t *c)
{
    const char *path = getenv("TERN_TEST_CATALOG_HOLD");
    if (path == NULL || path[0] == '\0' || access(path, F_OK) != 0)
        return false;
    (void)lag_timer_start(c, 100); /* else a later change looks again */
    return true;
}
#endif

#ifdef TN_TEST
/* A delayed take-back's timer closed: its TOPIC_DELETE goes now (or,
 * its catalog stopped meanwhile, never). */
static void on_take_back_due(uv_handle_t *h)
{
    undo_t *u = h->data;
    tn_catalog_t *c = u->c;
    if (c == NULL) {
        tn_free(u);
        return;
    }
    undo_t **pp = &c->delayed;
    while (*pp != u)
        pp = &(*pp)->next;
    *pp = u->next;
    take_back_now(c, u);
}

static void on_take_back_timer(uv_timer_t *t)
{
    uv_close((uv_handle_t *)t, on_take_back_due);
}

/* TERN_TEST_CATALOG_TAKE_BACK_DELAY=PREFIX=MS (ternd-test): a lone node's
 * take-back of a gate's record for a topic whose name starts with PREFIX
 * (its hold on the gate and its TOPIC_DELETE) starts MS ms after the check
 * that the record is still that creation's, as one whose proposal was
 * slow to commit would end: the window in which a client deletes the name
 * and makes it again. Whether the hook took u over (on c->delayed). */
static bool test_delay_take_back(tn_catalog_t *c, undo_t *u)
{
    const char *spec = getenv("TERN_TEST_CATALOG_TAKE_BACK_DELAY");
    const char *eq = spec != NULL ? strchr(spec, '=') : NULL;
    if (eq == NULL || strncmp(u->topic, spec, (size_t)(eq - spec)) != 0 ||
        uv_timer_init(c->broker->loop, &u->delay) != 0)
        return false;
    u->delay.data = u;
    uv_timer_start(&u->delay, on_take_back_timer, (uint64_t)atoll(eq + 1), 0);
    u->next = c->delayed;
    c->delayed = u;
    TN_LOG(TN_LOG_NOTICE,
           "topic %s: taking back its record in %s ms (TERN_TEST_CATALOG_TAKE_BACK_DELAY)",
           u->topic, eq + 1);
    return true;
}
#endif

#ifdef TN_TEST
/* TERN_TEST_CATALOG_UNCONFIRMED=path (ternd-test): while the file path
 * exists, the replica counts as not confirmed current (replica_current),
 * as a replica started empty beside files (`ternctl restore --rejoin`)
 * does until the leader's log has reached it, so a test can show what the
 * catalog does with the states such a replica passes through. Looked at
 * on each change: a test makes one once it removed the file. */
static bool unconfirmed_by_file(void)
{
    const char *path = getenv("TERN_TEST_CATALOG_UNCONFIRMED");
    return path != NULL && path[0] != '\0' && access(path, F_OK) == 0;
}
#endif

static void on_meta_change(void *arg)
{
#ifdef TN_TEST
    if (held_by_file(arg) || lagging(arg))
        return;
#endif
    follow_meta(arg);
}

/* Whether partition p of t is replicated (tn_broker_t.place_readopt). */
static bool replicated(void *arg, const tn_topic_t *t, uint32_t p)
{
    tn_catalog_t *c = arg;
    return c->replica != NULL && tn_replica_replicated(c->replica, t->name, p);
}

void tn_catalog_set_replica(tn_catalog_t *c, tn_replica_t *rm)
{
    c->replica = rm;
    c->broker->place_readopt = rm != NULL ? replicated : NULL;
}

int tn_catalog_start(tn_broker_t *b, tn_meta_t *m, const tn_catalog_opts_t *o, tn_catalog_t **out)
{
    tn_catalog_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->broker = b;
    c->meta = m;
    c->o = *o;
#ifdef TN_TEST
    const char *held = getenv("TERN_TEST_DELETIONS_AFTER_MS");
    if (held != NULL && atoi(held) > 0)
        c->deletions_hold = (uint64_t)atoi(held);
#endif
    int rc = tn_broker_listen(b, on_event, c);
    if (rc != 0) {
        tn_free(c);
        return rc;
    }
    tn_broker_set_gate(b, gate, c);
    tn_broker_set_stamper(b, record_stamp, c);
    tn_broker_set_placement(b, place, c);
    tn_broker_set_grow_here(b, grow_here, c);
    tn_meta_on_change(m, on_meta_change, c);
    /* What recovery found on disk. In a cluster nothing is made before its
     * record, so what has none was deleted: tn_catalog_reconcile deletes
     * it once the replica is caught up. */
    if (o->cluster) {
        /* Not delivered until placed (release_recovered); a lone node
         * serves its own data at once. */
        c->recovered_held = true;
        tn_broker_hold_recovered(b, true);
    }
    for (size_t i = 0; i < b->nbuckets && !o->cluster; i++) {
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

/* --- reconciling ------------------------------------------------------------ */

static void on_reconciled(tn_waiter_t *w, int status)
{
    if (status != 0 && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN,
               "metastore: creating a recorded topic or channel in the queue engine "
               "failed: %s",
               tn_strerror(status));
    tn_free(w);
}

/* A recorded topic the engine is creating or growing: once that is done
 * its recorded channels are made too. Owned by the catalog's list until
 * its callback; a catalog that stops first detaches it (c = NULL). */
struct pending_s {
    tn_waiter_t w;
    tn_catalog_t *c;
    pending_t *next;
    bool following; /* make's: a change of the replica */
    char topic[TN_NAME_MAX + 1];
};

static pending_t *pending_new(tn_catalog_t *c, const char *topic)
{
    pending_t *p = tn_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->c = c;
    snprintf(p->topic, sizeof(p->topic), "%s", topic);
    p->w.data = p;
    p->next = c->pending;
    c->pending = p;
    return p;
}

/* Take p off its catalog's list and free it, after making the channels
 * of the topic's record (as the metastore has it now) when it was made. */
static void pending_end(pending_t *p, int status)
{
    tn_catalog_t *c = p->c;
    if (c != NULL) {
        pending_t **pp = &c->pending;
        while (*pp != p)
            pp = &(*pp)->next;
        *pp = p->next;
    }
    if (c != NULL && status == UV_EMFILE)
        make_refused(c, p->topic, NULL, status);
    else if (status == TN_ENOTFOUND)
        TN_LOG(TN_LOG_NOTICE,
               "metastore: topic %s was deleted before it was made here: not made, nor recorded "
               "again",
               p->topic);
    else if (status != 0 && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "metastore: making recorded topic %s in the queue engine failed: %s",
               p->topic, tn_strerror(status));
    if (c != NULL && status == 0) {
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(c->meta), p->topic);
        if (e != NULL)
            make(c, e, p->following);
    }
    tn_free(p);
}

/* A topic made or grown: a publish waiting for a partition here may
 * have it now. */
static void made_or_grown(pending_t *p, int status)
{
    tn_catalog_t *c = p->c;
    pending_end(p, status);
    if (c != NULL)
        claims_check(c, false, 0);
}

static void on_topic_made(tn_waiter_t *w, int status)
{
    made_or_grown(w->data, status);
}

static void on_topic_idle(tn_waiter_t *w, int status)
{
    (void)status; /* what it waited for ended: look again */
    pending_end(w->data, 0);
}

static void on_topic_grown(void *arg, int status)
{
    made_or_grown(arg, status);
}

/* Whether the catalog is making topic (make: a creation or growth of a
 * record's under way). */
static bool making(const tn_catalog_t *c, const char *topic)
{
    for (const pending_t *p = c->pending; p != NULL; p = p->next)
        if (strcmp(p->topic, topic) == 0)
            return true;
    return false;
}

/* Whether the engine has the topic of e with its partitions and its
 * durable channels (or is making them). */
static bool made(tn_catalog_t *c, const tn_meta_topic_entry_t *e)
{
    if (making(c, e->rec.name))
        return true;
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(c->broker, e->rec.name, strlen(e->rec.name), false, 0, NULL, &t);
    if (rc == UV_EAGAIN)
        return true; /* being made or grown: a later change looks again */
    if (rc != 0 || t->nparts < e->rec.partitions)
        return false;
    for (uint32_t i = 0; i < e->nchannels; i++) {
        tn_channel_t *out = NULL;
        if (!tn_fanout_is_channel(e->channels[i]) &&
            tn_topic_channel(t, e->channels[i], strlen(e->channels[i]), false, NULL, &out) ==
                TN_ENOTFOUND)
            return false;
    }
    return true;
}

/* How long after the engine refused to make part of a record for want of
 * descriptors (UV_EMFILE: creations stop short of the limit,
 * core/fdroom.h) the records are made again. Without it the next change
 * of the metastore (in a cluster) or the next start did, and a quiet
 * metastore left another node's new topic without its partition here,
 * its produces waiting for good, after the descriptors were free. */
#define FD_RETRY_MS 1000

static void on_retry_timer(uv_timer_t *h)
{
    tn_catalog_t *c = h->data;
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    if (c->o.cluster || s->nmembers > 1) {
        on_meta_change(c); /* as a change would: make follows every record */
        return;
    }
    for (size_t i = 0; i < s->ntopics; i++)
        make(c, s->topics[i], false); /* a lone node's start-up check, again */
}

/* The engine refused to make topic (channel NULL) or its channel of the
 * records with rc: near the descriptor limit, said and tried again in
 * FD_RETRY_MS; other refusals are said where they are seen. */
static void make_refused(tn_catalog_t *c, const char *topic, const char *channel, int rc)
{
    if (rc != UV_EMFILE)
        return;
    TN_LOG_RL(TN_LOG_WARN, 10000,
              "metastore: %s%s%s%s is recorded but cannot be made here now: too many open files "
              "(this node keeps its last descriptors for the partitions it has); tried again "
              "every second until descriptors free up (or raise the descriptor limit)",
              channel != NULL ? "channel " : "topic ", channel != NULL ? channel : topic,
              channel != NULL ? " of " : "", channel != NULL ? topic : "");
    if (c->retry == NULL) {
        uv_timer_t *h = tn_calloc(1, sizeof(*h));
        if (h == NULL || uv_timer_init(c->broker->loop, h) != 0) {
            tn_free(h);
            return; /* the next change of the metastore tries again */
        }
        h->data = c;
        c->retry = h;
    }
    if (!uv_is_active((uv_handle_t *)c->retry))
        uv_timer_start(c->retry, on_retry_timer, FD_RETRY_MS, 0);
}

/* Ask the engine for what a record names: the topic with its recorded
 * partitions, then its recorded channels but the fan-out links' (fanout.c
 * makes those; after the topic is made or grown, when that must wait). following: a change of the
 * replica (in a cluster, a record another node made), not the start-up check. */
static void make(tn_catalog_t *c, const tn_meta_topic_entry_t *e, bool following)
{
    const char *name = e->rec.name;
    if (going(c, name, NULL) || (following && made(c, e)))
        return; /* being deleted: on_gone makes it again */
    pending_t *p = pending_new(c, name);
    if (p == NULL)
        return;
    p->following = following;
    p->w.cb = on_topic_made;
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(c->broker, name, strlen(name), true, e->rec.partitions, &p->w, &t);
    if (rc == UV_EAGAIN) {
        if (following)
            TN_LOG(TN_LOG_INFO, "metastore: topic %s is recorded; making it here", name);
        else
            TN_LOG(TN_LOG_NOTICE, "metastore: topic %s was recorded but had no files; creating it",
                   name);
        return; /* on_topic_made goes on with its channels */
    }
    if (rc == 0 && t->nparts < e->rec.partitions) {
        /* A crash after the record of a growth, before the engine's part;
         * or, following, a growth another node recorded. A channel being
         * made (or a growth of a /v1 PATCH) first: then look again. */
        p->w.cb = on_topic_idle;
        if (tn_topic_wait_idle(t, &p->w) == UV_EAGAIN)
            return;
        TN_LOG(following ? TN_LOG_INFO : TN_LOG_NOTICE,
               "metastore: topic %s has %" PRIu32 " partitions recorded and %" PRIu32
               " on disk; growing it",
               name, e->rec.partitions, t->nparts);
        if (tn_topic_grow(t, e->rec.partitions, on_topic_grown, p) == 0)
            return;
        TN_LOG(TN_LOG_WARN, "metastore: topic %s cannot grow now; %s", name,
               following ? "the next change of the metastore tries again" : "its next start will");
    }
    pending_end(p, TN_ECLOSED); /* only unlinks and frees: nothing pending */
    if (rc != 0) {
        make_refused(c, name, NULL, rc);
        return;
    }
    for (uint32_t i = 0; i < e->nchannels; i++) {
        const char *ch = e->channels[i];
        tn_channel_t *out = NULL;
        if (going(c, name, ch) || tn_fanout_is_channel(ch) ||
            tn_topic_channel(t, ch, strlen(ch), false, NULL, &out) != TN_ENOTFOUND)
            continue;
        tn_waiter_t *cw = tn_calloc(1, sizeof(*cw));
        if (cw == NULL)
            return;
        cw->cb = on_reconciled;
        rc = tn_topic_channel(t, ch, strlen(ch), true, cw, &out);
        adopt_stamp(c, name, rc == 0 ? out : engine_channel(c, name, ch));
        if (rc == UV_EAGAIN && following)
            TN_LOG(TN_LOG_INFO, "metastore: channel %s of %s is recorded; making it here", ch,
                   name);
        else if (rc == UV_EAGAIN)
            TN_LOG(TN_LOG_NOTICE,
                   "metastore: channel %s of %s was recorded but had no files; creating it", ch,
                   name);
        else {
            tn_free(cw);
            make_refused(c, name, ch, rc);
        }
    }
}

void tn_catalog_reconcile(tn_catalog_t *c)
{
    release_held(c, false);
    if (c->o.cluster && replica_current(c)) {
        adopt_stamps(c);
        follow_deletions(c);
    }
    const tn_meta_state_t *s = tn_meta_state(c->meta);
    for (size_t i = 0; i < s->ntopics; i++)
        make(c, s->topics[i], false);
    /* Partitions with no files at start (another node's, or placed here
     * while this node was down) open once the replica says whose they are. */
    tn_broker_follow_placement(c->broker);
    release_recovered(c);
}

static void on_timer_closed(uv_handle_t *h)
{
    tn_free(h);
}

void tn_catalog_stop(tn_catalog_t *c)
{
    if (c == NULL)
        return;
    tn_broker_unlisten(c->broker, on_event, c);
    tn_broker_set_gate(c->broker, NULL, NULL);
    tn_broker_set_stamper(c->broker, NULL, NULL);
    tn_broker_set_placement(c->broker, NULL, NULL);
    c->broker->place_readopt = NULL;
    tn_broker_set_grow_here(c->broker, NULL, NULL);
    tn_meta_on_change(c->meta, NULL, NULL);
    release_held(c, true);
    claims_check(c, true, TN_ECLOSED);
    purges_check(c, true, TN_ECLOSED);
    if (c->ptimer != NULL)
        uv_close((uv_handle_t *)c->ptimer, on_timer_closed);
    for (asked_t *a = c->asked; a != NULL; a = a->next)
        a->c = NULL;
    if (c->confirm != NULL)
        c->confirm->c = NULL;
    if (c->timer != NULL)
        uv_close((uv_handle_t *)c->timer, on_timer_closed);
    if (c->retry != NULL)
        uv_close((uv_handle_t *)c->retry, on_timer_closed);
#ifdef TN_TEST
    if (c->lag != NULL)
        uv_close((uv_handle_t *)c->lag, on_timer_closed);
#endif
    for (gated_t *x = c->gated; x != NULL; x = x->next)
        x->c = NULL;
    unpark(c, NULL, 0, true);
    while (c->undoing != NULL) {
        undo_t *u = c->undoing;
        c->undoing = u->next;
        if (u->external)
            tn_free(u);
        else
            u->c = NULL; /* on_taken_back frees it */
    }
    while (c->fresh != NULL)
        (void)fresh_take(c, c->fresh->topic);
#ifdef TN_TEST
    for (undo_t *u = c->delayed; u != NULL; u = u->next) {
        u->c = NULL; /* on_take_back_due frees it */
        if (!uv_is_closing((uv_handle_t *)&u->delay))
            uv_close((uv_handle_t *)&u->delay, on_take_back_due);
    }
#endif
    /* Creations and deletions still under way finish without us. */
    for (pending_t *p = c->pending; p != NULL; p = p->next)
        p->c = NULL;
    for (gone_t *g = c->gone; g != NULL; g = g->next)
        g->c = NULL;
    tn_free(c);
}
