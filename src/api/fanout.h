/* Fan-out: every message published to a parent topic is copied into each
 * of its child topics.
 *
 * DESIGN: a link (a child's record names its parent and an attach epoch).
 *   1. Attaching creates, on the parent, a durable channel named
 *      `fanout.<epoch>` that starts at the parent's tail (children get no
 *      backfill), then records the link in the metastore.
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
 *      channels (a deleted parent's go with it). Deleting a parent
 *      detaches its children in the metastore itself (meta/state.h).
 * A link's lag is its channel's depth: parent messages not copied yet.
 *
 * Threads: the loop thread. */
#ifndef TN_API_FANOUT_H
#define TN_API_FANOUT_H

#include "core/platform.h"

#include "cluster/router.h"
#include "meta/meta.h"
#include "queue/queue.h"

typedef struct tn_fanout_s tn_fanout_t;

#define TN_FANOUT_CHANNEL_PREFIX "fanout."

/* Copies go through router (cluster/router.h), like every produce. */
int tn_fanout_new(uv_loop_t *loop, tn_broker_t *b, tn_router_t *router, tn_meta_t *m,
                  tn_fanout_t **out);
void tn_fanout_sync(tn_fanout_t *f);
/* The parent messages child's link has not copied yet; false when its
 * runner is not running (yet). */
bool tn_fanout_lag(tn_fanout_t *f, const char *child, uint64_t *lag);
/* The channel name of a link. */
void tn_fanout_channel(uint64_t epoch, char out[32]);
/* Stop every runner (copies under way end on their own); frees f once its
 * timer has closed. */
void tn_fanout_close(tn_fanout_t *f);

#endif
