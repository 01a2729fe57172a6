/* Leases: the in-flight messages of one channel on one partition.
 *
 * A delivery leases a message until a deadline (NSQ msg_timeout, native
 * visibility timeout). Each lease carries a nonce that is new for every
 * delivery, so a FIN or ack meant for an earlier delivery of the same
 * message (a receipt handle `partition:offset:nonce` gone stale after a
 * timeout and redelivery) fails instead of settling the newer one; and an
 * owner (the consumer it went to), so an NSQ FIN, which names only the
 * message, can be checked against the connection that sends it.
 *
 * Deadlines live in an indexed heap (the next expiry is O(1), TOUCH and
 * extend O(log n)); leases are found by offset in a hash map; each owner
 * keeps a list of its leases so a closing connection releases them without
 * a scan. The table counts leased bytes for the in-flight budget.
 *
 * Ownership: the table allocates and frees leases. Thread safety: the
 * loop thread that owns the channel. */
#ifndef TN_QUEUE_LEASE_H
#define TN_QUEUE_LEASE_H

#include "core/platform.h"

#include "core/heap.h"
#include "core/u64map.h"

typedef struct tn_lease_s tn_lease_t;

/* An owner's list of leases (embedded in a consumer). */
typedef struct {
    tn_lease_t *head;
    size_t count;
} tn_lease_owner_t;

struct tn_lease_s {
    tn_heap_node_t deadline; /* key: deadline, monotonic ms */
    uint64_t offset;
    uint32_t nonce;
    uint32_t attempts; /* deliveries so far, this one included */
    uint32_t bytes;
    int64_t leased_ms; /* when it was delivered (monotonic ms); -1 unknown */
    tn_lease_owner_t *owner;
    tn_lease_t *owner_prev;
    tn_lease_t *owner_next;
    void *data; /* for the caller (the message buffer, ...) */
};

typedef struct {
    tn_u64map_t by_offset;
    tn_heap_t deadlines;
    uint64_t bytes;
    uint32_t next_nonce;
    tn_lease_t *spare; /* freed leases kept for reuse (at most TN_LEASE_SPARE) */
    uint32_t nspare;
} tn_leases_t;

#define TN_LEASE_SPARE 256

/* seed varies the first nonce (e.g. from the clock) so nonces differ
 * across restarts, where a stale handle must not match a new lease. */
void tn_leases_init(tn_leases_t *ls, uint32_t seed);
/* Free every lease (their owners' lists are emptied). */
void tn_leases_fini(tn_leases_t *ls);

static inline size_t tn_leases_count(const tn_leases_t *ls)
{
    return tn_u64map_size(&ls->by_offset);
}

/* Lease offset to owner until deadline_ms. UV_EEXIST when it is leased
 * already, UV_ENOMEM. *out is owned by the table. */
int tn_leases_add(tn_leases_t *ls, uint64_t offset, uint32_t attempts, uint32_t bytes,
                  tn_lease_owner_t *owner, int64_t deadline_ms, tn_lease_t **out);

/* The lease on offset, or NULL. */
tn_lease_t *tn_leases_get(const tn_leases_t *ls, uint64_t offset);

/* The lease on offset if it matches: the nonce (when check_nonce) and the
 * owner (when owner is not NULL). TN_ENOTFOUND when offset is not in
 * flight, UV_ESRCH when it is but for another delivery or consumer. */
int tn_leases_find(const tn_leases_t *ls, uint64_t offset, bool check_nonce, uint32_t nonce,
                   const tn_lease_owner_t *owner, tn_lease_t **out);

/* Move a lease's deadline (TOUCH, extend). */
void tn_leases_touch(tn_leases_t *ls, tn_lease_t *l, int64_t deadline_ms);

/* End a lease (settled, requeued, expired, released) and free it. */
void tn_leases_remove(tn_leases_t *ls, tn_lease_t *l);

/* The earliest lease whose deadline is <= now_ms, or NULL. It stays in
 * the table: the caller decides (requeue, dead-letter) and removes it. */
tn_lease_t *tn_leases_expired(const tn_leases_t *ls, int64_t now_ms);

/* The earliest deadline, or INT64_MAX when nothing is leased. */
int64_t tn_leases_next_deadline(const tn_leases_t *ls);

#endif
