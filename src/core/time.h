/* Clocks. Monotonic time for timers and intervals (never goes back), wall
 * time for what is stored or shown (publish timestamps, deliver-at); and a
 * millisecond duration as a sentence shows it. */
#ifndef TN_CORE_TIME_H
#define TN_CORE_TIME_H

#include "core/platform.h"

int64_t tn_now_mono_ns(void);
int64_t tn_now_mono_ms(void);
int64_t tn_now_wall_ns(void);
int64_t tn_now_wall_ms(void);

/* ms as a sentence says it, into buf (len bytes, NUL ended, cut to fit):
 * whole seconds as "600s", else milliseconds as "1500ms" ("0s" for 0).
 * Moves' failure reasons use it, so a reason reads the same whichever
 * node wrote it. Any thread. */
void tn_time_fmt_ms(char *buf, size_t len, uint64_t ms);

#endif
