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
 * Dead-letter topics are the parent's owner's: a name of that form whose
 * parent has an owner is made and published to only by that owner (or an
 * admin: tn_access_dlq_refused), the topic made for it takes that owner
 * (tn_access_parent_owner), and no dead letter moves into one owned by
 * anyone else (tn_access_dlq_mismatch). A name splits into a parent and a
 * channel at every dot: each split is a candidate parent (meta/owner.h,
 * whose rules the metastore applies again to a dead-letter name's create
 * and to an owner change, on its own state).
 *
 * A replica that has not caught up since the start cannot tell an open
 * topic from one given an owner after its last snapshot: until then the
 * open doors treat no topic as open (tn_access_unknown).
 *
 * Threads: the loop thread that owns the metastore. */
#ifndef TN_API_ACCESS_H
#define TN_API_ACCESS_H

#include "core/platform.h"

#include "core/name.h"
#include "meta/meta.h"

/* The owner of topic (borrowed) from the local replica, or NULL when it
 * has none. The string is borrowed until the replica next changes. */
const char *tn_access_owner(const tn_meta_t *meta, const char *topic);

/* The owner (borrowed, as above) of the parent topic that the dead-letter
 * name `<topic>.<channel>.DLQ` names (the longest owned candidate), or
 * NULL: not of that form, or no candidate parent has an owner. */
const char *tn_access_parent_owner(const tn_meta_t *meta, const char *name);

/* Whether u (NULL: none) is an admin: the root user or an admin grant. */
bool tn_access_user_admin(const tn_meta_user_t *u);

/* Whether the user named user may not make or publish to name: it has
 * the dead-letter form, a candidate parent has an owner other than user,
 * and user is no admin. Then why says so (a 403's or E_UNAUTHORIZED's
 * sentence, naming the rule). */
bool tn_access_dlq_refused(const tn_meta_t *meta, const char *name, const char *user, char *why,
                           size_t len);

/* Whether the dead letters of topic parent must not move to the existing
 * topic dlq: it has an owner, other than parent's (none included). Then
 * why says so and what the operator does. A dlq without an owner (made by
 * the broker before owners were given, or with security off) takes them:
 * its owner is the parent's (tn_access_owner). */
bool tn_access_dlq_mismatch(const tn_meta_t *meta, const char *parent, const char *dlq, char *why,
                            size_t len);

static inline bool tn_access_protected(const tn_meta_t *meta, const char *topic)
{
    return tn_access_owner(meta, topic) != NULL;
}

/* Whether the local replica cannot tell yet whether topic is protected:
 * it has not been ready since the start (meta.h tn_meta_ready). Until
 * then it holds its last snapshot (the entries after it are applied only
 * once a leader tells the commit index; restored with --rejoin, nothing),
 * so a topic given an owner since looks unowned (and one whose owner was
 * taken back since looks owned). The open doors then hold topic's
 * anonymous commands a few seconds for it, and refuse them retryably if
 * it still cannot tell, whatever tn_access_protected says; why gets the
 * sentence they answer with. NULL meta: it can always tell. */
bool tn_access_unknown(tn_meta_t *meta, const char *topic, char *why, size_t len);

#endif
