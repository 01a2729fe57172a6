/* What a door tells a client when the router refuses a write or a settle
 * of a replicated partition for a reason that passes by itself: too few
 * in-sync replicas (TN_EFEWREPLICAS), a leader epoch that moved on while
 * the request was under way (TN_EFENCED), a new leader that has not yet
 * committed its epoch start (TN_ENOTSERVING), a topic still being
 * created through /v1 past the router's hold (TN_ECREATING,
 * cluster/hold.h), or a partition recovered at start whose placement
 * this node has not followed yet past the same hold (TN_EPLACING). Every
 * door (NSQ TCP, the nsqd HTTP endpoints, /v1 produce, batch and ack,
 * the WebSocket feed, fan-out copies) asks here, so one condition reads
 * the same through all of them: NSQ `E_PUB_FAILED <text>` with the
 * connection kept, HTTP 503 `{"error":"<text>"}` with `Retry-After: 1`.
 *
 * Pure: no state, any thread. */
#ifndef TN_CLUSTER_REPLERR_H
#define TN_CLUSTER_REPLERR_H

#include "core/platform.h"

#include <stdbool.h>
#include <stddef.h>

/* The client-facing text for status when it is one of the retryable
 * replication refusals above (a static string), else NULL. */
const char *tn_replerr_text(int status);

/* Whether status is one of those refusals: the client should retry after
 * a second (HTTP 503 + Retry-After: 1; NSQ error, connection kept). */
bool tn_replerr_retryable(int status);

#ifdef TN_TEST
/* Test hook for the doors' end-to-end tests (a ternd built with the
 * TN_TEST libraries: the ternd-test target): the refusal the environment
 * asks for topic (borrowed, len bytes), else 0. TERN_TEST_REFUSE (for
 * publishes) and TERN_TEST_REFUSE_SETTLE (for settles, settle true) hold
 * comma-separated PREFIX=NAME pairs, NAME one of FEWREPLICAS, FENCED,
 * NOTSERVING: a publish to, or a settle of, a topic whose name starts with
 * PREFIX is refused with that error by the router (cluster/router.c),
 * where a replicated partition's refusal would come from. */
int tn_replerr_test_refusal(const char *topic, size_t len, bool settle);
#else
static inline int tn_replerr_test_refusal(const char *topic, size_t len, bool settle)
{
    (void)topic;
    (void)len;
    (void)settle;
    return 0;
}
#endif

#endif
