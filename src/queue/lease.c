/* Leases: the in-flight table. See lease.h. */
#include "core/platform.h"

#include "queue/lease.h"

#include "core/alloc.h"
#include "core/err.h"

#include <string.h>

void tn_leases_init(tn_leases_t *ls, uint32_t seed)
{
    tn_u64map_init(&ls->by_offset);
    tn_heap_init(&ls->deadlines);
    ls->bytes = 0;
    ls->next_nonce = seed;
    ls->spare = NULL;
    ls->nspare = 0;
}

static void owner_unlink(tn_lease_t *l)
{
    tn_lease_owner_t *o = l->owner;
    if (o == NULL)
        return;
    if (l->owner_prev != NULL)
        l->owner_prev->owner_next = l->owner_next;
    else
        o->head = l->owner_next;
    if (l->owner_next != NULL)
        l->owner_next->owner_prev = l->owner_prev;
    o->count--;
    l->owner = NULL;
    l->owner_prev = l->owner_next = NULL;
}

/* Keep a few freed leases: a busy channel adds and removes one per
 * message. */
static void release(tn_leases_t *ls, tn_lease_t *l)
{
    if (ls->nspare >= TN_LEASE_SPARE) {
        tn_free(l);
        return;
    }
    l->owner_next = ls->spare;
    ls->spare = l;
    ls->nspare++;
}

void tn_leases_fini(tn_leases_t *ls)
{
    /* The heap first: it touches the nodes inside the leases. */
    tn_heap_fini(&ls->deadlines);
    size_t pos = 0;
    uint64_t key;
    void *val;
    while (tn_u64map_next(&ls->by_offset, &pos, &key, &val)) {
        tn_lease_t *l = val;
        owner_unlink(l);
        tn_free(l);
    }
    tn_u64map_fini(&ls->by_offset);
    ls->bytes = 0;
    while (ls->spare != NULL) {
        tn_lease_t *l = ls->spare;
        ls->spare = l->owner_next;
        tn_free(l);
    }
    ls->nspare = 0;
}

int tn_leases_add(tn_leases_t *ls, uint64_t offset, uint32_t attempts, uint32_t bytes,
                  tn_lease_owner_t *owner, int64_t deadline_ms, tn_lease_t **out)
{
    if (tn_u64map_get(&ls->by_offset, offset) != NULL)
        return UV_EEXIST;
    tn_lease_t *l = ls->spare;
    if (l != NULL) {
        ls->spare = l->owner_next;
        ls->nspare--;
        memset(l, 0, sizeof(*l));
    } else if ((l = tn_calloc(1, sizeof(*l))) == NULL) {
        return UV_ENOMEM;
    }
    tn_heap_node_init(&l->deadline);
    l->offset = offset;
    l->attempts = attempts;
    l->bytes = bytes;
    l->leased_ms = -1; /* the caller sets it for a delivery */
    int rc = tn_heap_insert(&ls->deadlines, &l->deadline, deadline_ms);
    if (rc == 0) {
        rc = tn_u64map_put(&ls->by_offset, offset, l);
        if (rc != 0)
            tn_heap_remove(&ls->deadlines, &l->deadline);
    }
    if (rc != 0) {
        release(ls, l);
        return rc;
    }
    /* Nonces only need to differ between deliveries of one message; a
     * counter never repeats within 2^32 deliveries on this partition. */
    l->nonce = ls->next_nonce++;
    if (owner != NULL) {
        l->owner = owner;
        l->owner_next = owner->head;
        if (owner->head != NULL)
            owner->head->owner_prev = l;
        owner->head = l;
        owner->count++;
    }
    ls->bytes += bytes;
    *out = l;
    return 0;
}

tn_lease_t *tn_leases_get(const tn_leases_t *ls, uint64_t offset)
{
    return tn_u64map_get(&ls->by_offset, offset);
}

int tn_leases_find(const tn_leases_t *ls, uint64_t offset, bool check_nonce, uint32_t nonce,
                   const tn_lease_owner_t *owner, tn_lease_t **out)
{
    tn_lease_t *l = tn_u64map_get(&ls->by_offset, offset);
    if (l == NULL)
        return TN_ENOTFOUND;
    if ((check_nonce && l->nonce != nonce) || (owner != NULL && l->owner != owner))
        return UV_ESRCH;
    *out = l;
    return 0;
}

void tn_leases_touch(tn_leases_t *ls, tn_lease_t *l, int64_t deadline_ms)
{
    tn_heap_update(&ls->deadlines, &l->deadline, deadline_ms);
}

void tn_leases_remove(tn_leases_t *ls, tn_lease_t *l)
{
    tn_heap_remove(&ls->deadlines, &l->deadline);
    tn_u64map_del(&ls->by_offset, l->offset);
    owner_unlink(l);
    ls->bytes -= l->bytes;
    release(ls, l);
}

tn_lease_t *tn_leases_expired(const tn_leases_t *ls, int64_t now_ms)
{
    tn_heap_node_t *n = tn_heap_min(&ls->deadlines);
    if (n == NULL || n->key > now_ms)
        return NULL;
    return TN_CONTAINER_OF(n, tn_lease_t, deadline);
}

int64_t tn_leases_next_deadline(const tn_leases_t *ls)
{
    tn_heap_node_t *n = tn_heap_min(&ls->deadlines);
    return n != NULL ? n->key : INT64_MAX;
}
