/* Publishes held while their topic is being created through /v1, or
 * while the partition they would be appended to was recovered at start
 * and this node has not followed the placement yet.
 *
 * DESIGN: a creation that may still be taken back acknowledges nothing.
 * A /v1 creation writes its topic record with a creation mark (the
 * creating member's id, meta/cmd.h tn_meta_topic_t.creating); the record
 * reaches every node at once, but the creator may still fail to make its
 * part and take the record back (a TOPIC_DELETE, api/v1/topics.c), which
 * deletes the topic with whatever it held. So:
 *   1. The router (cluster/router.h) asks tn_hold_marked before it routes
 *      a publish (every door's: NSQ TCP, /pub, /mpub, /v1 produce and
 *      batch, fan-out copies, dead letters), before it spills one into the
 *      ingress log or forwards it to a replicated partition's leader, and
 *      in the engine's append check (a publish whose topic the engine made
 *      through the gate after the router looked); a marked topic's publish
 *      is handed to tn_hold_publish instead, nothing written.
 *   2. Every TN_HOLD_POLL_MS the hold looks at the metastore replica
 *      again; the publish goes on (cb with 0: the router routes it anew)
 *      once the record is no longer the marked one: ready (TOPIC_READY,
 *      or its creator fenced), or gone (taken back) or made again. A
 *      publish from an NSQ door (tn_pub_t.grow_here) then records the
 *      topic anew as such a publish always does, once this node's engine
 *      no longer holds the topic made from the old record; any other's
 *      gets TN_ENOTFOUND (a /v1 produce: 404).
 *   3. After TN_ROUTER_CREATE_HOLD_MS still marked, cb gets TN_ECREATING:
 *      the door's retryable refusal (cluster/replerr.h: 503 +
 *      Retry-After, E_PUB_FAILED).
 * A topic whose record is not in this replica yet is not held here: the
 * engine makes it only through the gate once the record arrived, and the
 * append check holds it then.
 *
 * DESIGN: no publish acknowledged into a copy that may not be this
 * node's. In a cluster, what recovery opened at start is held
 * (tn_part_t.start_held, api/catalog.c release_recovered) until the
 * catalog followed the placement with a caught-up, confirmed metastore
 * replica: a copy placed elsewhere meanwhile (moved while this node was
 * down, or restored with --rejoin from an older backup) then goes remote,
 * and what was appended to it would be lost with it (quarantine/). So:
 *   1. The engine's append check (the router's, whatever door or path the
 *      publish came by) refuses a partition still start_held with
 *      TN_EPLACING, nothing written; the router hands the publish to
 *      tn_hold_until_placed.
 *   2. Every TN_HOLD_POLL_MS the hold looks at the partition again; once
 *      it is no longer start_held (or gone), cb gets 0: the router routes
 *      the publish anew, to wherever the placement now says (a remote
 *      partition's leader, the ingress log).
 *   3. After TN_ROUTER_CREATE_HOLD_MS still held, cb gets TN_EPLACING:
 *      the doors' retryable refusal (replerr.h). A lone node never holds
 *      (nothing is start_held there).
 *
 * Threads: the loop thread. */
#ifndef TN_CLUSTER_HOLD_H
#define TN_CLUSTER_HOLD_H

#include "core/platform.h"

#include "meta/meta.h"
#include "queue/queue.h"

#define TN_ROUTER_CREATE_HOLD_MS 5000
#define TN_HOLD_POLL_MS          20

typedef struct tn_hold_s tn_hold_t;

/* The end of a hold: status 0, route p again (its topic is ready, or gone
 * for an NSQ door's publish; its partition placed); else answer p with
 * status (TN_ECREATING, TN_EPLACING, TN_ENOTFOUND, TN_ECLOSED). topic (len bytes) is borrowed for
 * the call. */
typedef void (*tn_hold_cb)(void *arg, tn_pub_t *p, const char *topic, size_t len,
                           int64_t deliver_at_ms, int status);

/* meta and b are borrowed for the hold's life; cb gets arg. 0 or UV_ENOMEM. */
int tn_hold_new(tn_meta_t *meta, tn_broker_t *b, tn_hold_cb cb, void *arg, tn_hold_t **out);
/* Every publish still held gets cb with TN_ECLOSED before this returns. */
void tn_hold_free(tn_hold_t *h);
/* Whether the replica's record of topic (len bytes, borrowed) carries a
 * creation mark; then *created_at_ms (may be NULL) is its creation time. */
bool tn_hold_marked(const tn_hold_t *h, const char *topic, size_t len, int64_t *created_at_ms);
/* Hold p (caller-owned until cb) for topic's record made at
 * created_at_ms. 0: cb runs later, from the loop; else an error (out of
 * memory), cb never runs. */
int tn_hold_publish(tn_hold_t *h, const char *topic, size_t len, tn_pub_t *p, int64_t deliver_at_ms,
                    int64_t created_at_ms);
/* Whether partition of t (borrowed) was recovered at start and is still
 * held until this node followed the placement (the second DESIGN above). */
bool tn_hold_start_held(const tn_topic_t *t, uint32_t partition);
/* Hold p (caller-owned until cb) until partition of topic (len bytes,
 * borrowed) is no longer start_held, then cb with 0; TN_EPLACING past the
 * bound. 0 or an error (out of memory), as tn_hold_publish. */
int tn_hold_until_placed(tn_hold_t *h, const char *topic, size_t len, uint32_t partition,
                         tn_pub_t *p, int64_t deliver_at_ms);

#endif
