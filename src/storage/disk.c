/* Disk watermarks: statvfs readings and the hysteresis rule. */
#include "core/platform.h"

#include "storage/disk.h"

#include "core/log.h"

#include <sys/statvfs.h>

bool tn_disk_decide(bool was_high, int used_pct, uint64_t free_bytes, int high_pct, int low_pct,
                    uint64_t min_free)
{
    if (used_pct >= high_pct || free_bytes < min_free)
        return true;
    if (was_high)
        return !(used_pct < low_pct);
    return false;
}

void tn__disk_check(tn_store_t *store)
{
    struct statvfs st;
    bool was = atomic_load(&store->disk_high);
    bool high;
    if (statvfs(store->path, &st) != 0 || st.f_blocks == 0) {
        high = true;
        TN_LOG_RL(TN_LOG_ERROR, 60000, "statvfs(%s) failed; refusing publishes until it works",
                  store->path);
    } else {
        uint64_t total = (uint64_t)st.f_blocks * st.f_frsize;
        uint64_t avail = (uint64_t)st.f_bavail * st.f_frsize;
        uint64_t used = total - (uint64_t)st.f_bfree * st.f_frsize;
        /* Like df: used / (used + available to unprivileged users). */
        uint64_t denom = used + avail;
        int pct = denom ? (int)((used * 100 + denom - 1) / denom) : 100;
        atomic_store(&store->disk_used_pct, pct);
        atomic_store(&store->disk_free, avail);
        high = tn_disk_decide(was, pct, avail, store->opts.disk_high_pct, store->opts.disk_low_pct,
                              store->opts.disk_min_free);
    }
    if (high != was) {
        atomic_store(&store->disk_high, high);
        if (high)
            TN_LOG(TN_LOG_WARN,
                   "disk above the high watermark (%d%% used, %llu bytes free): refusing "
                   "publishes",
                   atomic_load(&store->disk_used_pct),
                   (unsigned long long)atomic_load(&store->disk_free));
        else
            TN_LOG(TN_LOG_NOTICE, "disk below the low watermark again: accepting publishes");
    }
}
