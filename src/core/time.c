/* Clocks on clock_gettime(2), and the duration formatter. */
#include "core/platform.h"

#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

static int64_t read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t tn_now_mono_ns(void)
{
    return read_clock(CLOCK_MONOTONIC);
}

int64_t tn_now_mono_ms(void)
{
    return read_clock(CLOCK_MONOTONIC) / 1000000;
}

int64_t tn_now_wall_ns(void)
{
    return read_clock(CLOCK_REALTIME);
}

int64_t tn_now_wall_ms(void)
{
    return read_clock(CLOCK_REALTIME) / 1000000;
}

void tn_time_fmt_ms(char *buf, size_t len, uint64_t ms)
{
    if (ms % 1000 == 0)
        snprintf(buf, len, "%" PRIu64 "s", ms / 1000);
    else
        snprintf(buf, len, "%" PRIu64 "ms", ms);
}
