/* The catalog: keeps the metastore's record of topics and channels in step
 * with the queue engine. Ephemeral channels stay out of it.
 *
 * DESIGN: creations go through the metastore first. The catalog is the
 * engine's creation gate: before the engine creates a topic (a PUB
 * auto-creating it, /topic/create, a dead-letter topic, /v1) or a durable
 * channel (a SUB, /channel/create, a /v1 consume), the catalog proposes
 * its record (if absent) and the engine goes on once it is committed; a
 * refusal fails the creation. Deletions over the doors are proposed first
 * by the doors themselves (nsq_http.c, v1.c), then done in the engine (a
 * topic's through the router's purge on every member, which reaches the
 * engine here through tn_catalog_purge);
 * the catalog also records engine deletions it hears of (quietly, when the
 * record is already gone).
 *
 * At startup a lone node records what the engine recovered from disk and
 * the metastore does not know yet (data from before the metastore, or a
 * crash between a creation's record and its files), and once the
 * metastore is ready (tn_catalog_reconcile) creates in the engine what
 * the metastore records and the engine lacks (a crash after the record,
 * before the files).
 *
 * DESIGN: deletions in a cluster. Nothing is made in the engine before
 * the replica has its record (the gate holds creations until then), so
 * what the engine has and the replica does not record was deleted through
 * another node, or while this node was down: at start (once the replica
 * is caught up) and at every change the catalog deletes it from the
 * engine, without proposing anything. A record with another creation
 * time than the one a topic was made from is a topic made again: the old
 * one is deleted, then the new one made.
 *
 * DESIGN: placement. The catalog is also the engine's placement function
 * (queue.h): a partition lives here when the metastore names this node its
 * owner. Whenever the replica changes (tn_meta_on_change) in a cluster, it
 * makes in the engine the topics, partitions and channels the records name
 * (other nodes' creations and growths) and has the engine follow the
 * placement: partitions placed here open, the others stay remote. A topic
 * created here on a follower waits at the gate until the replica has
 * applied its record, so its partitions are placed at creation.
 *
 * DESIGN: NSQ topics grow where they are published (the engine's
 * grow-here hook, queue.h). In a cluster, an NSQ publish (PUB, MPUB, DPUB,
 * /pub, /mpub) for a topic with no owner (not native) that finds every
 * partition on other nodes:
 *   1. asks the metastore for one partition more owned by this node
 *      (TOPIC_GROW_FOR; the state machine adds it only when this node
 *      owns none yet, so concurrent asks add one), unless the record
 *      names one here already;
 *   2. waits (at most CLAIM_WAIT_MS) while the replica gets the record and
 *      the catalog grows the engine's topic, as for any growth;
 *   3. goes to that partition once it is open here. A refusal or the
 *      deadline fails the publish (TN_EREMOTE: E_PUB_FAILED), logged.
 *
 * Threads: the loop thread. */
#ifndef TN_API_CATALOG_H
#define TN_API_CATALOG_H

#include "core/platform.h"

#include "cluster/purge.h"
#include "cluster/replica.h"
#include "meta/meta.h"
#include "queue/queue.h"

typedef struct tn_catalog_s tn_catalog_t;

typedef struct {
    int64_t visibility_timeout_ms; /* NSQ's msg-timeout */
    int64_t retention_ms;
    uint32_t max_attempts;
    uint8_t durability;
    /* Placement: this node's member id (the metastore's node id), and
     * whether it is one of a cluster (peers or join addresses given) rather
     * than a lone node; see place() in catalog.c for what that changes. */
    uint64_t node_id;
    bool cluster;
    /* default-replication-factor and min-insync-replicas for the topics
     * NSQ doors make (DLQ topics too); 0 reads as 1. */
    uint8_t replication_factor;
    uint8_t min_insync;
    /* security-enabled: a dead-letter topic the engine makes (a move, or
     * a door's creation) takes the owner of the parent topic its name
     * names, if that has one (api/access.h). Off: no owner, as before. */
    bool security;
} tn_catalog_opts_t;

/* The replica manager (borrowed; NULL: none): for a replicated partition
 * the placement is its answer (tn_replica_local: here once it handed the
 * led partition to the engine), and the engine may take set-aside logs
 * back (tn_broker_t.place_readopt). */
void tn_catalog_set_replica(tn_catalog_t *c, tn_replica_t *rm);
/* Start listening to b and record what b holds now. 0 or an error. */
int tn_catalog_start(tn_broker_t *b, tn_meta_t *m, const tn_catalog_opts_t *o, tn_catalog_t **out);
/* Create in the engine the topics (with their partition counts) and
 * durable channels the metastore records and the engine lacks. */
void tn_catalog_reconcile(tn_catalog_t *c);
/* Purge topic (borrowed) here, as a topic delete confirmed by every
 * member wants (cluster/purge.h; a tn_purge_local_fn, arg the catalog):
 * wait at most wait_ms until the replica no longer has the record made at
 * created_at_ms (none of that name, or one made again at another time),
 * then delete what the engine still has of the old topic, by the same
 * deletion that follows the records (one deletion, whichever path asks
 * first), and call done once its files are gone. done gets 0 (also when
 * nothing of it was here, or what is here is the topic made again);
 * UV_ETIMEDOUT (the replica still had the record); UV_EBUSY (still
 * being deleted after the execution allowance, TN_PURGE_CALL_MS less
 * TN_PURGE_WAIT_MS); TN_ECLOSED (the catalog stopped); or the engine's
 * error, with a sentence. done may run before this returns. 0, or
 * UV_ENOMEM (done never runs). */
int tn_catalog_purge(void *catalog, const char *topic, int64_t created_at_ms, uint64_t wait_ms,
                     tn_purge_done_cb done, void *arg);
/* Another door takes back the record of topic made at created_at_ms (a
 * /v1 create the engine failed: its TOPIC_DELETE under way), hold true,
 * until it releases it, hold false. Meanwhile a creation of topic through
 * the gate waits, then records the topic anew: passed on that record, it
 * would be deleted and purged under its acknowledged messages. Out of
 * memory: not held. */
void tn_catalog_hold_creations(tn_catalog_t *c, const char *topic, int64_t created_at_ms,
                               bool hold);
/* Stop listening (proposals under way finish on their own; purges under
 * way are answered TN_ECLOSED). */
void tn_catalog_stop(tn_catalog_t *c);

#endif
