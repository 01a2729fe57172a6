/* Remote children's cursors: every message published to a parent topic is
 * sent to a topic of another tern cluster (a remote, docs/remotes.md), over
 * the outbound HTTPS client (proto/http/rclient.h).
 *
 * DESIGN: a remote child record (meta/remote.h) names its parent, remote,
 * child topic and attach epoch.
 *   1. Its cursor is a durable channel of the parent named as a local
 *      link's (`fanout.<epoch>`, tn_fanout_channel: the catalog leaves
 *      those alone, and the fan-out's sweep keeps the ones a remote child
 *      names), made at the parent's tail by the attach, and on every other
 *      node at the attach time its epoch carries, as fanout.h step 1.
 *   2. A runner per record consumes that channel here. The engine
 *      delivers a partition's messages on the node that serves it (its
 *      leader), so the cursor runs there and moves with it.
 *   3. Per parent partition, messages wait in delivery (offset) order; one
 *      batch at a time (up to 500 messages, 4 MiB of payload) is sent as
 *      `POST /v1/topics/{child}/produce/batch` (payloads base64, keys
 *      kept) with the remote's opened credential. Only a 2xx finishes the
 *      batch's messages on the channel (at least once: a crash or a
 *      leader change before it sends them again); anything else keeps
 *      them leased and in order and sends the same batch again after a
 *      back-off (1 s doubling to 60 s), renewing their leases; a 413 to a
 *      batch of several halves the partition's batch bytes, a 400 its
 *      batch's message count, and sends it again at once. A message sent
 *      alone and answered 400 or 413 is refused for good: it moves to the
 *      channel's dead-letter topic (tn_consumer_dead_letter, with its key)
 *      and the partition goes on. A runner holds at most 2000 messages and
 *      16 MiB, shared by the parent partitions led here: each takes no more
 *      deliveries once it holds its share (the consumer's hold), so one in
 *      back-off does not stop the others.
 *   4. A delayed child's message is sent once its publish time plus the
 *      delay has passed; a batch ends at the first message not due,
 *      and one not due keeps its lease until a lease past its due time.
 *   5. tn_rchild_sync (every two seconds, and after an attach or detach)
 *      makes the runners match the records; a runner whose record is gone
 *      stops, and its channel is deleted.
 * One HTTPS client per remote (its URL, CA and id), shared by that
 * remote's runners and remade when the record changes.
 *
 * Threads: the loop thread. */
#ifndef TN_API_RCHILD_H
#define TN_API_RCHILD_H

#include "core/platform.h"

#include "core/buf.h"
#include "core/name.h"
#include "proto/http/rclient.h"

struct tn_v1_s;
typedef struct tn_rchild_s tn_rchild_t;

/* v (borrowed for the module's life) gives the metastore, the engine, the
 * guard and the opened credentials. 0 or UV_ENOMEM. */
int tn_rchild_new(uv_loop_t *loop, struct tn_v1_s *v, tn_rchild_t **out);
void tn_rchild_sync(tn_rchild_t *f);
/* Stop every runner and client; freed once their handles closed. */
void tn_rchild_close(tn_rchild_t *f);

typedef struct {
    bool running;              /* a runner consumes its channel here */
    uint64_t lag;              /* parent messages not sent yet (of partitions served here) */
    int64_t lag_ms;            /* age of the oldest of them held here; 0 when none */
    bool retrying;             /* the last send failed: waiting to send again */
    tn_rc_class_t cls;         /* of the last failure (retrying) */
    int status;                /* its HTTP status (0: none came) */
    uint64_t sent;             /* messages the remote accepted, since this node started it */
    uint64_t dead_letters;     /* messages the remote refused for good, moved to dlq (same) */
    char dlq[TN_NAME_MAX + 1]; /* the dead-letter topic; "" before the runner first attached */
} tn_rchild_status_t;

/* Append its series to b (Prometheus text; classes only, never anything a
 * remote sent): tern_remote_child_sent_total, tern_remote_child_failures_total
 * by class, and per remote child running here tern_remote_child_lag_messages
 * and tern_remote_child_retrying. 0 or UV_ENOMEM. */
int tn_rchild_metrics_write(tn_rchild_t *f, tn_buf_t *b);

/* The state of the remote child (parent, remote, child) on this node. */
void tn_rchild_status(tn_rchild_t *f, const char *parent, const char *remote, const char *child,
                      tn_rchild_status_t *out);

#endif
