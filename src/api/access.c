/* Protected topics. See access.h. */
#include "core/platform.h"

#include "api/access.h"

#include "core/name.h"

#include <string.h>

static const char *owner_of(const tn_meta_state_t *s, const char *name)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, name);
    return e != NULL && e->rec.owner[0] != '\0' ? e->rec.owner : NULL;
}

const char *tn_access_owner(const tn_meta_t *meta, const char *topic)
{
    if (meta == NULL)
        return NULL;
    const tn_meta_state_t *s = tn_meta_state(meta);
    const char *owner = owner_of(s, topic);
    if (owner != NULL)
        return owner;
    /* <topic>.<channel>.DLQ: channel and topic names may hold dots, so
     * every split is a candidate. */
    size_t n = strlen(topic);
    if (n < 6 || n - 4 > TN_NAME_MAX || strcmp(topic + n - 4, ".DLQ") != 0)
        return NULL;
    char base[TN_NAME_MAX + 1];
    size_t bl = n - 4;
    memcpy(base, topic, bl);
    base[bl] = '\0';
    for (size_t i = bl; i-- > 1;) {
        if (base[i] != '.')
            continue;
        base[i] = '\0';
        owner = owner_of(s, base);
        base[i] = '.';
        if (owner != NULL)
            return owner;
    }
    return NULL;
}
