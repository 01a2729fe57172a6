/* Protected topics. See access.h. */
#include "core/platform.h"

#include "api/access.h"

#include "core/name.h"
#include "meta/owner.h"

#include <stdio.h>
#include <string.h>

const char *tn_access_owner(const tn_meta_t *meta, const char *topic)
{
    if (meta == NULL)
        return NULL;
    const char *owner = tn_meta_owner(tn_meta_state(meta), topic);
    return owner != NULL ? owner : tn_access_parent_owner(meta, topic);
}

bool tn_access_unknown(tn_meta_t *meta, const char *topic, char *why, size_t len)
{
    if (meta == NULL || tn_meta_ready(meta))
        return false;
    snprintf(why, len,
             "this node cannot tell yet whether topic \"%s\" is protected: its metastore "
             "replica has not caught up since the start; retry",
             topic);
    return true;
}

const char *tn_access_parent_owner(const tn_meta_t *meta, const char *name)
{
    char parent[TN_NAME_MAX + 1];
    return meta != NULL ? tn_meta_dlq_parent_owner(tn_meta_state(meta), name, parent) : NULL;
}

bool tn_access_user_admin(const tn_meta_user_t *u)
{
    if (u == NULL)
        return false;
    if (u->root)
        return true;
    for (uint16_t i = 0; i < u->ngrants; i++) {
        if (u->grants[i].action == TN_GRANT_ADMIN)
            return true;
    }
    return false;
}

bool tn_access_dlq_refused(const tn_meta_t *meta, const char *name, const char *user, char *why,
                           size_t len)
{
    if (meta == NULL)
        return false;
    const tn_meta_state_t *s = tn_meta_state(meta);
    char parent[TN_NAME_MAX + 1];
    if (tn_meta_dlq_other_owner(s, name, user, parent) == NULL ||
        tn_access_user_admin(tn_meta_user_find(s, user)))
        return false;
    snprintf(why, len,
             "%s is a dead-letter topic of topic %s: only that topic's owner or an admin may make "
             "it or publish to it",
             name, parent);
    return true;
}

bool tn_access_dlq_mismatch(const tn_meta_t *meta, const char *parent, const char *dlq, char *why,
                            size_t len)
{
    const tn_meta_state_t *s = tn_meta_state(meta);
    const char *owner = tn_meta_owner(s, dlq);
    if (owner == NULL)
        return false; /* no owner of its own: its parent's (tn_access_owner) */
    const char *want = tn_meta_owner(s, parent);
    if (want != NULL && strcmp(owner, want) == 0)
        return false;
    snprintf(why, len,
             "their dead-letter topic %s is owned by %s, not by the owner of %s (%s); an admin "
             "gives it that owner (PATCH /v1/topics/%s {\"owner\": \"%s\"}) or deletes it, and "
             "the moves go on",
             dlq, owner, parent, want != NULL ? want : "none", dlq, want != NULL ? want : "");
    return true;
}
