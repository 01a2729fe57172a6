/* Protected topics. See access.h. */
#include "core/platform.h"

#include "api/access.h"

#include "core/name.h"

#include <stdio.h>
#include <string.h>

static const char *owner_of(const tn_meta_state_t *s, const char *name)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, name);
    return e != NULL && e->rec.owner[0] != '\0' ? e->rec.owner : NULL;
}

/* The hashed form of a dead-letter name (core/name.h), made for a topic
 * whose name is longer than TN_NAME_DLQ_PREFIX: each such topic of the
 * metastore that begins with the name's prefix is a candidate parent (the
 * hash covers the channel too, so it names no one topic). */
static const char *hashed_parent(const char *name, size_t n, char parent[TN_NAME_MAX + 1],
                                 const char *(*fn)(const tn_meta_state_t *, const char *, void *),
                                 const tn_meta_state_t *s, void *arg)
{
    if (n != TN_NAME_DLQ_PREFIX + 1 + 8 + 4 || name[TN_NAME_DLQ_PREFIX] != '.')
        return NULL;
    for (size_t i = TN_NAME_DLQ_PREFIX + 1; i < TN_NAME_DLQ_PREFIX + 9; i++) {
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return NULL;
    }
    for (size_t k = 0; k < s->ntopics; k++) {
        const char *t = s->topics[k]->rec.name;
        if (strlen(t) <= TN_NAME_DLQ_PREFIX || memcmp(t, name, TN_NAME_DLQ_PREFIX) != 0)
            continue;
        snprintf(parent, TN_NAME_MAX + 1, "%s", t);
        const char *r = fn(s, parent, arg);
        if (r != NULL)
            return r;
    }
    return NULL;
}

/* Calls fn for each topic that names a dead-letter topic's parent: every
 * split of `<topic>.<channel>.DLQ`, the longest topic first (channel and
 * topic names may hold dots). Stops at fn's first non-NULL answer and
 * returns it, the parent's name in parent. */
static const char *each_parent(const char *name, char parent[TN_NAME_MAX + 1],
                               const char *(*fn)(const tn_meta_state_t *, const char *, void *),
                               const tn_meta_state_t *s, void *arg)
{
    size_t n = strlen(name);
    if (n < 6 || n - 4 > TN_NAME_MAX || strcmp(name + n - 4, ".DLQ") != 0)
        return NULL;
    size_t bl = n - 4;
    memcpy(parent, name, bl);
    parent[bl] = '\0';
    for (size_t i = bl; i-- > 1;) {
        if (parent[i] != '.')
            continue;
        parent[i] = '\0';
        const char *r = fn(s, parent, arg);
        if (r != NULL)
            return r;
        parent[i] = '.';
    }
    return hashed_parent(name, n, parent, fn, s, arg);
}

static const char *any_owner(const tn_meta_state_t *s, const char *parent, void *arg)
{
    (void)arg;
    return owner_of(s, parent);
}

static const char *other_owner(const tn_meta_state_t *s, const char *parent, void *user)
{
    const char *owner = owner_of(s, parent);
    return owner != NULL && strcmp(owner, user) != 0 ? owner : NULL;
}

const char *tn_access_owner(const tn_meta_t *meta, const char *topic)
{
    if (meta == NULL)
        return NULL;
    const char *owner = owner_of(tn_meta_state(meta), topic);
    return owner != NULL ? owner : tn_access_parent_owner(meta, topic);
}

const char *tn_access_parent_owner(const tn_meta_t *meta, const char *name)
{
    char parent[TN_NAME_MAX + 1];
    return meta != NULL ? each_parent(name, parent, any_owner, tn_meta_state(meta), NULL) : NULL;
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
    if (each_parent(name, parent, other_owner, s, (void *)user) == NULL ||
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
    const char *owner = owner_of(s, dlq);
    if (owner == NULL)
        return false; /* no owner of its own: its parent's (tn_access_owner) */
    const char *want = owner_of(s, parent);
    if (want != NULL && strcmp(owner, want) == 0)
        return false;
    snprintf(why, len,
             "their dead-letter topic %s is owned by %s, not by the owner of %s (%s); an admin "
             "gives it that owner (PATCH /v1/topics/%s {\"owner\": \"%s\"}) or deletes it, and "
             "the moves go on",
             dlq, owner, parent, want != NULL ? want : "none", dlq, want != NULL ? want : "");
    return true;
}
