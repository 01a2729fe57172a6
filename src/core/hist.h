/* Latency histograms for /metrics: fixed buckets (Prometheus's
 * cumulative `le` form is produced when written), counters updated with
 * relaxed atomics so a storage thread can record while the loop thread
 * reads.
 *
 * Thread safety: tn_hist_observe from any thread; tn_hist_write from any
 * thread (the figures may be a moment apart from one another). */
#ifndef TN_CORE_HIST_H
#define TN_CORE_HIST_H

#include "core/platform.h"

#include "core/buf.h"

#include <stdatomic.h>

#define TN_HIST_BUCKETS 14

typedef struct {
    atomic_uint_fast64_t counts[TN_HIST_BUCKETS + 1]; /* the last one: +Inf */
    atomic_uint_fast64_t sum_ns;
} tn_hist_t;

void tn_hist_init(tn_hist_t *h);
void tn_hist_observe(tn_hist_t *h, int64_t ns);
/* Append the Prometheus text of the histogram called name (with labels, a
 * `key="value"` list or ""), in seconds, HELP and TYPE lines included
 * when help is not NULL. 0 or UV_ENOMEM. */
int tn_hist_write(const tn_hist_t *h, const char *name, const char *labels, const char *help,
                  tn_buf_t *out);

#endif
