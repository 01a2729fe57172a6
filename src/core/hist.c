/* Latency histograms. See hist.h. */
#include "core/platform.h"

#include "core/hist.h"

#include <inttypes.h>
#include <stdio.h>

/* Upper bounds in nanoseconds: 100 us .. 10 s. */
static const int64_t bounds_ns[TN_HIST_BUCKETS] = {
    100000,   250000,   500000,    1000000,   2500000,   5000000,    10000000,
    25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 10000000000,
};

void tn_hist_init(tn_hist_t *h)
{
    for (int i = 0; i <= TN_HIST_BUCKETS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum_ns, 0);
}

void tn_hist_observe(tn_hist_t *h, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    int i = 0;
    while (i < TN_HIST_BUCKETS && ns > bounds_ns[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)ns, memory_order_relaxed);
}

int tn_hist_write(const tn_hist_t *h, const char *name, const char *labels, const char *help,
                  tn_buf_t *out)
{
    char line[512];
    int n;
    int rc = 0;
    if (help != NULL) {
        n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        rc = tn_buf_append(out, line, (size_t)n);
    }
    uint64_t cum = 0;
    const char *sep = labels[0] != '\0' ? "," : "";
    for (int i = 0; i <= TN_HIST_BUCKETS && rc == 0; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < TN_HIST_BUCKETS)
            n = snprintf(line, sizeof(line), "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels,
                         sep, (double)bounds_ns[i] / 1e9, cum);
        else
            n = snprintf(line, sizeof(line), "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name,
                         labels, sep, cum);
        rc = tn_buf_append(out, line, (size_t)n);
    }
    if (rc == 0) {
        double sum = (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9;
        const char *open = labels[0] != '\0' ? "{" : "";
        const char *close = labels[0] != '\0' ? "}" : "";
        n = snprintf(line, sizeof(line), "%s_sum%s%s%s %.9f\n%s_count%s%s%s %" PRIu64 "\n", name,
                     open, labels, close, sum, name, open, labels, close, cum);
        rc = tn_buf_append(out, line, (size_t)n);
    }
    return rc;
}
