/* Per-identity caps. See quota.h. */
#include "core/platform.h"

#include "api/quota.h"

#include "core/alloc.h"

#include <stdio.h>
#include <string.h>

struct tn_quota_entry_s {
    char name[72];
    uint32_t count;
    tn_quota_entry_t *next;
};

void tn_quota_init(tn_quota_t *q, uint32_t cap)
{
    q->cap = cap;
    q->entries = NULL;
}

void tn_quota_fini(tn_quota_t *q)
{
    while (q->entries != NULL) {
        tn_quota_entry_t *e = q->entries;
        q->entries = e->next;
        tn_free(e);
    }
}

bool tn_quota_take(tn_quota_t *q, const char *name, uint32_t n, uint32_t *taken)
{
    *taken = 0;
    if (q->cap == 0 || name[0] == '\0')
        return true;
    n = TN_MIN(n, q->cap);
    tn_quota_entry_t *e = q->entries;
    while (e != NULL && strcmp(e->name, name) != 0)
        e = e->next;
    if ((e != NULL ? e->count : 0) + n > q->cap)
        return false;
    if (e == NULL) {
        e = tn_calloc(1, sizeof(*e));
        if (e == NULL)
            return false;
        snprintf(e->name, sizeof(e->name), "%s", name);
        e->next = q->entries;
        q->entries = e;
    }
    e->count += n;
    *taken = n;
    return true;
}

void tn_quota_give(tn_quota_t *q, const char *name, uint32_t n)
{
    if (n == 0)
        return;
    for (tn_quota_entry_t **pp = &q->entries; *pp != NULL; pp = &(*pp)->next) {
        tn_quota_entry_t *e = *pp;
        if (strcmp(e->name, name) != 0)
            continue;
        e->count -= TN_MIN(n, e->count);
        if (e->count == 0) {
            *pp = e->next;
            tn_free(e);
        }
        return;
    }
}
