/* Topic owners in the state machine. See owner.h. */
#include "core/platform.h"

#include "meta/owner.h"

#include "core/err.h"
#include "core/name.h"

#include <stdio.h>
#include <string.h>

#define DLQ_HASHED_LEN (TN_NAME_DLQ_PREFIX + 1 + 8 + 4) /* `<prefix>.<8 hex>.DLQ` */

bool tn_meta_dlq_form(const char *name)
{
    size_t n = strlen(name);
    return n >= 6 && n - 4 <= TN_NAME_MAX && strcmp(name + n - 4, ".DLQ") == 0;
}

/* Whether name is the hashed form (rule 1). */
static bool hashed_form(const char *name, size_t n)
{
    if (n != DLQ_HASHED_LEN || name[TN_NAME_DLQ_PREFIX] != '.')
        return false;
    for (size_t i = TN_NAME_DLQ_PREFIX + 1; i < TN_NAME_DLQ_PREFIX + 9; i++) {
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    }
    return true;
}

bool tn_meta_dlq_names(const char *dlq, const char *parent)
{
    if (!tn_meta_dlq_form(dlq))
        return false;
    size_t n = strlen(dlq), pl = strlen(parent);
    /* A split at a dot: parent, a dot, a channel (maybe empty), ".DLQ". */
    if (pl >= 1 && pl < n - 4 && dlq[pl] == '.' && memcmp(dlq, parent, pl) == 0)
        return true;
    return hashed_form(dlq, n) && pl > TN_NAME_DLQ_PREFIX &&
           memcmp(dlq, parent, TN_NAME_DLQ_PREFIX) == 0;
}

/* The hashed form's candidates: each topic of s that begins with the
 * name's prefix (the hash covers the channel too, so it names no one
 * topic). */
static const char *hashed_parent(const tn_meta_state_t *s, const char *name, size_t n,
                                 char parent[TN_NAME_MAX + 1], tn_meta_parent_fn fn, void *arg)
{
    if (!hashed_form(name, n))
        return NULL;
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

const char *tn_meta_dlq_each_parent(const tn_meta_state_t *s, const char *name,
                                    char parent[TN_NAME_MAX + 1], tn_meta_parent_fn fn, void *arg)
{
    if (!tn_meta_dlq_form(name))
        return NULL;
    size_t n = strlen(name), bl = n - 4;
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
    return hashed_parent(s, name, n, parent, fn, arg);
}

const char *tn_meta_owner(const tn_meta_state_t *s, const char *name)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, name);
    return e != NULL && e->rec.owner[0] != '\0' ? e->rec.owner : NULL;
}

static const char *any_owner(const tn_meta_state_t *s, const char *parent, void *arg)
{
    (void)arg;
    return tn_meta_owner(s, parent);
}

static const char *other_owner(const tn_meta_state_t *s, const char *parent, void *user)
{
    const char *owner = tn_meta_owner(s, parent);
    return owner != NULL && strcmp(owner, user) != 0 ? owner : NULL;
}

const char *tn_meta_dlq_parent_owner(const tn_meta_state_t *s, const char *name,
                                     char parent[TN_NAME_MAX + 1])
{
    return tn_meta_dlq_each_parent(s, name, parent, any_owner, NULL);
}

const char *tn_meta_dlq_other_owner(const tn_meta_state_t *s, const char *name, const char *user,
                                    char parent[TN_NAME_MAX + 1])
{
    return tn_meta_dlq_each_parent(s, name, parent, other_owner, (void *)user);
}

void tn__meta_owner_disown(tn_meta_state_t *s, const char *user)
{
    const char *root = "";
    for (size_t k = 0; k < s->nusers; k++) {
        if (s->users[k]->root && strcmp(s->users[k]->name, user) != 0) {
            root = s->users[k]->name;
            break;
        }
    }
    for (size_t k = 0; k < s->ntopics; k++) {
        tn_meta_topic_t *rec = &s->topics[k]->rec;
        if (strcmp(rec->owner, user) == 0)
            snprintf(rec->owner, sizeof(rec->owner), "%s", root);
    }
}

int tn__meta_owner_made(const tn_meta_state_t *s, uint8_t rule, tn_meta_topic_t *rec)
{
    char parent[TN_NAME_MAX + 1];
    if ((rule & TN_META_OWN_CHECK) != 0 &&
        tn_meta_dlq_other_owner(s, rec->name, rec->owner, parent) != NULL)
        return UV_EPERM;
    const char *owner = NULL;
    if ((rule & TN_META_OWN_FOLLOW) != 0)
        owner = tn_meta_dlq_parent_owner(s, rec->name, parent);
    if (owner != NULL)
        snprintf(rec->owner, sizeof(rec->owner), "%s", owner);
    return 0;
}

/* The carry's decider (rule 3): the first candidate parent of the
 * dead-letter topic that is the topic changed or has an owner, in rule
 * 1's order (the one whose owner a FOLLOW create takes), passing over the
 * dead-letter topic itself (a hashed name begins with its own prefix). */
typedef struct {
    const char *dlq;
    const char *topic;
} carry_t;

static const char *carry_decider(const tn_meta_state_t *s, const char *cand, void *arg)
{
    const carry_t *k = arg;
    if (strcmp(cand, k->dlq) == 0)
        return NULL;
    return strcmp(cand, k->topic) == 0 || tn_meta_owner(s, cand) != NULL ? cand : NULL;
}

void tn__meta_owner_carry(tn_meta_state_t *s, const char *parent, const char *was, const char *now)
{
    /* Decided on the state before any of them changes, then changed: the
     * outcome does not depend on the order of the walk. */
    char cand[TN_NAME_MAX + 1];
    for (size_t k = 0; k < s->ntopics; k++) {
        tn_meta_topic_entry_t *e = s->topics[k];
        carry_t arg = {e->rec.name, parent};
        e->carry = strcmp(e->rec.owner, was) == 0 && tn_meta_dlq_names(e->rec.name, parent) &&
                   tn_meta_dlq_each_parent(s, e->rec.name, cand, carry_decider, &arg) != NULL &&
                   strcmp(cand, parent) == 0;
    }
    for (size_t k = 0; k < s->ntopics; k++) {
        tn_meta_topic_entry_t *e = s->topics[k];
        if (e->carry)
            snprintf(e->rec.owner, sizeof(e->rec.owner), "%s", now);
        e->carry = false;
    }
}
