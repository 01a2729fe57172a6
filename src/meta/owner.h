/* Topic owners as the metastore's state machine keeps them
 * (docs/http-api.md, docs/operations.md "Dead letters and owners"): the
 * candidate parents of a dead-letter name, and the owner rules the apply
 * of a USER_DELETE or TOPIC_PUT enforces, so that every replica decides
 * them on the same state, not on a door's replica that may lag.
 *
 * 1. A dead-letter name is `<topic>.<channel>.DLQ`: every split at a dot
 *    names a candidate parent (channel and topic names may hold dots),
 *    the longest first. A topic past 243 characters gets `<its first
 *    TN_NAME_DLQ_PREFIX characters>.<8 hex digits>.DLQ` (core/name.h),
 *    whose candidate parents are every topic longer than the prefix that
 *    begins with it.
 * 2. USER_DELETE marked disown (cmd.h): every topic the user owns passes
 *    to the root user in the same apply (none recorded: it loses its
 *    owner), so a user made later under the name owns nothing, and the
 *    topics stay protected (an owner-less topic is open to anonymous
 *    NSQ clients on open doors). Dead-letter topics are topics the user
 *    owns, so they go the same way as their parents. USER_PUT marked
 *    fresh (a /v1 create) does the same for its new user's name as it
 *    makes the user: a topic an older build's deletion left with the
 *    name, or whose create (checked at a door before the deletion)
 *    landed after it, is not taken over either.
 * 3. TOPIC_PUT with an owner rule (cmd.h TN_META_OWN_*), on a create of a
 *    dead-letter name: CHECK refuses it (UV_EPERM) when a candidate parent
 *    has an owner other than the record's (a caller who is no admin);
 *    FOLLOW gives the record the longest owned candidate's owner (an
 *    admin's create, the engine's for a dead letter). On an update that
 *    changes the owner, CARRY gives the new owner to every existing
 *    dead-letter topic of the topic that had the old one and whose
 *    owner the topic decides: passing over the dead-letter topic itself,
 *    the topic is its first candidate parent that is the topic or has
 *    an owner (the one FOLLOW would take the owner of), so a longer
 *    candidate's dead-letter topic (`a.b.c.DLQ` of `a.b`, not of `a`)
 *    stays with that one's owner. Decided before any changes: the walk's
 *    order does not matter.
 * Entries without the marks (older builds' logs) apply as those builds
 * did, so a replica replaying them and one restoring a snapshot taken
 * after them hold the same state.
 *
 * Threads: the caller's (pure functions over the state). */
#ifndef TN_META_OWNER_H
#define TN_META_OWNER_H

#include "core/platform.h"

#include "meta/state.h"

/* The owner of topic name (borrowed: valid until the next apply or
 * restore), or NULL: no such topic, or it has none. */
const char *tn_meta_owner(const tn_meta_state_t *s, const char *name);

/* Whether name has the dead-letter form (ends in ".DLQ", room for a
 * candidate parent). */
bool tn_meta_dlq_form(const char *name);

/* Whether parent (a topic name) is one of the candidate parents of the
 * dead-letter name dlq (rule 1; names only, the state is not asked). */
bool tn_meta_dlq_names(const char *dlq, const char *parent);

/* Calls fn for each candidate parent of name that s has (rule 1, the
 * longest first; the hashed form's in s's order), stopping at fn's first
 * non-NULL answer, which it returns with that parent's name in parent.
 * NULL: name is not of the form, or fn answered NULL for every one. */
typedef const char *(*tn_meta_parent_fn)(const tn_meta_state_t *s, const char *parent, void *arg);
const char *tn_meta_dlq_each_parent(const tn_meta_state_t *s, const char *name,
                                    char parent[TN_NAME_MAX + 1], tn_meta_parent_fn fn, void *arg);

/* The owner of the longest candidate parent of name that has one
 * (borrowed: valid until the next apply or restore), its name in parent;
 * NULL when none has. */
const char *tn_meta_dlq_parent_owner(const tn_meta_state_t *s, const char *name,
                                     char parent[TN_NAME_MAX + 1]);

/* The owner (borrowed, as above) of a candidate parent of name owned by
 * anyone but user, its name in parent; NULL when there is none. */
const char *tn_meta_dlq_other_owner(const tn_meta_state_t *s, const char *name, const char *user,
                                    char parent[TN_NAME_MAX + 1]);

/* Rule 2: every topic user owns passes to the root user other than user
 * (or to none, when there is no other). */
void tn__meta_owner_disown(tn_meta_state_t *s, const char *user);

/* Rule 3 on a create of rec (not yet in s) with the owner rule bits
 * rule: 0 (rec's owner possibly replaced, FOLLOW) or UV_EPERM (CHECK). */
int tn__meta_owner_made(const tn_meta_state_t *s, uint8_t rule, tn_meta_topic_t *rec);

/* Rule 3, CARRY: the dead-letter topics owned by was ("" none) whose
 * owner parent decides get now. */
void tn__meta_owner_carry(tn_meta_state_t *s, const char *parent, const char *was, const char *now);

#endif
