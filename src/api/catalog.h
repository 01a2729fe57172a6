/* The catalog: keeps the metastore's record of topics and channels in step
 * with what the NSQ doors create and delete in the queue engine (a topic
 * auto-created by a PUB, a channel by a SUB, deletions over HTTP), and, at
 * startup, records what the engine recovered from disk and the metastore
 * does not know yet. Ephemeral channels stay out of it.
 *
 * DESIGN: the engine acts first and the catalog records it (a proposal with
 * if_absent per event; answers that the record already exists or is already
 * gone are expected and quiet). The native /v1 API will invert this for
 * its own writes: metastore first, then the engine.
 *
 * Threads: the loop thread. */
#ifndef TN_API_CATALOG_H
#define TN_API_CATALOG_H

#include "core/platform.h"

#include "meta/meta.h"
#include "queue/queue.h"

typedef struct tn_catalog_s tn_catalog_t;

typedef struct {
    int64_t visibility_timeout_ms; /* NSQ's msg-timeout */
    int64_t retention_ms;
    uint32_t max_attempts;
    uint8_t durability;
} tn_catalog_opts_t;

/* Start listening to b and record what b holds now. 0 or an error. */
int tn_catalog_start(tn_broker_t *b, tn_meta_t *m, const tn_catalog_opts_t *o, tn_catalog_t **out);
/* Stop listening (proposals under way finish on their own). */
void tn_catalog_stop(tn_catalog_t *c);

#endif
