/* Logging: one formatted line per call, timestamped in UTC, written with a
 * single write(2) so lines from different threads do not interleave. */
#include "core/platform.h"

#include "core/assert.h"
#include "core/log.h"
#include "core/time.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tn_log_level = TN_LOG_INFO;
static int log_fd = 2;

static const char *const level_names[] = {"debug", "info", "notice", "warn", "error"};

int tn_log_level_parse(const char *name)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(level_names); i++) {
        if (strcmp(name, level_names[i]) == 0)
            return (int)i;
    }
    return -1;
}

const char *tn_log_level_name(int level)
{
    if (level < 0 || level >= (int)TN_ARRAY_SIZE(level_names))
        return "off";
    return level_names[level];
}

void tn_log_set_fd(int fd)
{
    log_fd = fd;
}

bool tn_log_rl_allow(tn_log_rl_t *rl, int64_t interval_ms)
{
    int64_t now = tn_now_mono_ms();
    if (now < rl->next_ms) {
        rl->suppressed++;
        return false;
    }
    rl->next_ms = now + interval_ms;
    if (rl->suppressed > 0) {
        uint64_t n = rl->suppressed;
        rl->suppressed = 0;
        tn_log_write(TN_LOG_WARN, "log", 0, "suppressed %llu repeats of the next line",
                     (unsigned long long)n);
    }
    return true;
}

void tn_log_write(int level, const char *file, int line, const char *fmt, ...)
{
    char buf[2048];
    int64_t ms = tn_now_wall_ms();
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;

    int n = snprintf(buf, sizeof(buf),
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %-6s %s:%d: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000),
                     tn_log_level_name(level), base, line);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    buf[len++] = '\n';
    ssize_t w = write(log_fd, buf, len);
    (void)w;
}

void tn_assert_fail(const char *expr, const char *file, int line)
{
    tn_log_write(TN_LOG_ERROR, file, line, "assertion failed: %s", expr);
    abort();
}
