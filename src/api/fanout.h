/* Fan-out: every message published to a parent topic is copied into each
 * of its child topics.
 *
 * DESIGN: a link (a child's record names its parent and an attach epoch).
 *   1. Attaching creates, on the parent, a durable channel named
 *      `fanout.<epoch>` that starts at the parent's tail (children get no
 *      backfill), then records the link in the metastore. The epoch
 *      carries the attach time (tn_fanout_epoch): in a cluster every
 *      other node makes its own channel when it sees the link, starting
 *      its partitions at their first message published from that time on,
 *      so a message produced anywhere after the attach answered is copied
 *      however late a node's replica learns of the link, and nothing from
 *      before is.
 *   2. A runner (a consumer of that channel, up to 256 messages in
 *      flight) publishes each message it gets into the child, with its
 *      key. While the two have as many partitions (a child created with
 *      its parent starts so), parent partition p feeds child partition
 *      p; otherwise the key picks the child's partition as a produce's
 *      key does.
 *      For a delayed child the copy is deferred until its parent publish
 *      time plus the delay, so the child's consumers see it then. Once the
 *      copy is durable the parent message is finished on the channel; a
 *      failed copy is retried a second later. A crash in between copies
 *      it again (at least once), never loses it.
 *   3. tn_fanout_sync (after attach, detach and delete, at startup, and
 *      every two seconds) makes the runners match the links: it starts
 *      missing ones, stops those of links that are gone and deletes their
 *      channels (a deleted parent's go with it), and deletes a
 *      `fanout.*` channel no link names that is not being attached here
 *      (a link detached while this node was down). Deleting a parent
 *      detaches its children in the metastore itself (meta/state.h).
 *      The `fanout.*` channels are this module's alone: the catalog
 *      (catalog.c) neither makes them from their records nor deletes them
 *      when their record goes, since each node's starts where its link
 *      says and a record is shared by every node's channel.
 * A link's lag is its channel's depth: parent messages not copied yet,
 * of the parent partitions this node owns (each node copies its own).
 *
 * Threads: the loop thread. */
#ifndef TN_API_FANOUT_H
#define TN_API_FANOUT_H

#include "core/platform.h"

#include "cluster/router.h"
#include "core/name.h"
#include "meta/meta.h"
#include "queue/queue.h"

typedef struct tn_fanout_s tn_fanout_t;

#define TN_FANOUT_CHANNEL_PREFIX TN_NAME_LINK_PREFIX

/* An attach under way on this node (children.c): its channel exists before
 * its link does, and the sync leaves it alone. Embedded in the caller's
 * request, on f's list from tn_fanout_hold until tn_fanout_release. */
typedef struct tn_fanout_hold_s {
    uint64_t epoch;
    struct tn_fanout_hold_s *next;
} tn_fanout_hold_t;

/* Copies go through router (cluster/router.h), like every produce. */
int tn_fanout_new(uv_loop_t *loop, tn_broker_t *b, tn_router_t *router, tn_meta_t *m,
                  tn_fanout_t **out);
void tn_fanout_sync(tn_fanout_t *f);
/* The parent messages child's link has not copied yet; false when its
 * runner is not running (yet). */
bool tn_fanout_lag(tn_fanout_t *f, const char *child, uint64_t *lag);
/* The channel name of a link. */
void tn_fanout_channel(uint64_t epoch, char out[32]);
/* The cursor channel of the link or remote child (api/rchild.h) of epoch
 * on parent (borrowed for the call), opened on b's engine: at the parent's
 * tail when at_tail (an attach), else from the attach time the epoch
 * carries, or at the tail when it carries none (a runner on a node that
 * has no such channel yet). 0 with *out; UV_EAGAIN: w runs once it is
 * made (or the parent is, when it is being placed or grown here);
 * TN_ENOTFOUND: this node's engine has no parent topic (yet); else
 * the engine's error. */
int tn_fanout_open_channel(tn_broker_t *b, const char *parent, uint64_t epoch, bool at_tail,
                           tn_waiter_t *w, tn_channel_t **out);
/* Delete that channel when b's engine has it (nothing to wait for). */
void tn_fanout_drop_channel(tn_broker_t *b, const char *parent, uint64_t epoch);
/* Whether a channel name is a link's (TN_FANOUT_CHANNEL_PREFIX). */
bool tn_fanout_is_channel(const char *name);
/* A new attach epoch: the wall-clock time in ms in its upper 48 bits and
 * 16 random ones below (nonzero). False when there is no randomness. */
bool tn_fanout_epoch(uint64_t *epoch);
/* Keep the channel of an attach under way (h->epoch set) from the sync's
 * sweep; release once the link is recorded (after its sync) or failed. */
void tn_fanout_hold(tn_fanout_t *f, tn_fanout_hold_t *h);
void tn_fanout_release(tn_fanout_t *f, tn_fanout_hold_t *h);
/* Stop every runner (copies under way end on their own); frees f once its
 * timer has closed. */
void tn_fanout_close(tn_fanout_t *f);

#endif
