/* Clocks. Monotonic time for timers and intervals (never goes back), wall
 * time for what is stored or shown (publish timestamps, deliver-at). */
#ifndef TN_CORE_TIME_H
#define TN_CORE_TIME_H

#include "core/platform.h"

int64_t tn_now_mono_ns(void);
int64_t tn_now_mono_ms(void);
int64_t tn_now_wall_ns(void);
int64_t tn_now_wall_ms(void);

#endif
