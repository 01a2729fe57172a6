/* One access model across the doors: which topics the open NSQ doors
 * (TCP 4150 and nsqd's HTTP endpoints, with no NSQ auth configured) may
 * not touch anonymously.
 *
 * A topic is protected when its metastore record has an owner (it was
 * created through /v1, or adopted by an admin), and so is the dead-letter
 * topic `<topic>.<channel>.DLQ` of a protected topic, which belongs to the
 * same owner. Topics the NSQ doors made have no owner and stay as open as
 * nsqd's. The caller checks security-enabled (off: nothing is protected).
 *
 * Threads: the loop thread that owns the metastore. */
#ifndef TN_API_ACCESS_H
#define TN_API_ACCESS_H

#include "core/platform.h"

#include "meta/meta.h"

/* The owner of topic (borrowed) from the local replica, or NULL when it
 * has none. The string is borrowed until the replica next changes. */
const char *tn_access_owner(const tn_meta_t *meta, const char *topic);

static inline bool tn_access_protected(const tn_meta_t *meta, const char *topic)
{
    return tn_access_owner(meta, topic) != NULL;
}

#endif
