/* Per-identity caps on requests in progress (concurrent consumes, and
 * optionally produces, per user): a count per name, bounded by a cap.
 * Only names with something in progress are held, so memory follows the
 * requests, not the number of users.
 *
 * Threads: the loop thread. */
#ifndef TN_API_QUOTA_H
#define TN_API_QUOTA_H

#include "core/platform.h"

typedef struct tn_quota_entry_s tn_quota_entry_t;

typedef struct {
    uint32_t cap; /* 0: no cap (nothing is counted) */
    tn_quota_entry_t *entries;
} tn_quota_t;

void tn_quota_init(tn_quota_t *q, uint32_t cap);
void tn_quota_fini(tn_quota_t *q);
/* Count n more for name (n is clamped to the cap, so one large request
 * alone is never refused); *taken says how many were counted, to give
 * back. false when that would pass the cap (or out of memory). An empty
 * name is not counted. */
bool tn_quota_take(tn_quota_t *q, const char *name, uint32_t n, uint32_t *taken);
void tn_quota_give(tn_quota_t *q, const char *name, uint32_t n);

#endif
