/* Disk watermarks. The log committer checks free space on the data path
 * every disk-check-interval (statvfs) and keeps the store's disk_high flag:
 * set when usage reaches the high watermark or free bytes fall under the
 * minimum, cleared only when usage is back under the low watermark and the
 * minimum is met again (hysteresis). A failing statvfs counts as high:
 * when in doubt, refuse new data rather than fill the disk. Appends are
 * refused with TN_EDISKHIGH while the flag is set; reads and channel WAL
 * writes go on. */
#ifndef TN_STORAGE_DISK_H
#define TN_STORAGE_DISK_H

#include "core/platform.h"

#include "storage/store.h"

/* Check now and update the store's flags. Any thread (the log committer,
 * and tn_store_open before the threads start). */
void tn__disk_check(tn_store_t *store);

/* Pure decision, for tests: the new state given the old one and a reading. */
bool tn_disk_decide(bool was_high, int used_pct, uint64_t free_bytes, int high_pct, int low_pct,
                    uint64_t min_free);

#endif
