/* Logging: one formatted line per call, timestamped in UTC (or, for
 * journald, prefixed with its syslog priority), as text or as a JSON
 * object, written with a single write(2) so lines from different threads
 * do not interleave. */
#include "core/platform.h"

#include "core/assert.h"
#include "core/log.h"
#include "core/time.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Atomic int tn_log_level = TN_LOG_INFO;

void tn_log_set_level(int level)
{
    tn_log_level = level;
}
static int log_fd = 2;
static int log_format = TN_LOG_TEXT;
static bool log_journal;

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

void tn_log_set_format(int format, bool journal)
{
    log_format = format == TN_LOG_JSON ? TN_LOG_JSON : TN_LOG_TEXT;
    log_journal = journal;
}

int tn_log_format(void)
{
    return log_format;
}

bool tn_log_journal(void)
{
    return log_journal;
}

bool tn_log_journal_stream(const char *env, int fd)
{
    if (env == NULL || *env == '\0')
        return false;
    char *end;
    unsigned long long dev = strtoull(env, &end, 10);
    if (end == env || *end != ':')
        return false;
    const char *ino_text = end + 1;
    unsigned long long ino = strtoull(ino_text, &end, 10);
    if (end == ino_text || *end != '\0')
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int tn_log_priority(int level)
{
    switch (level) {
    case TN_LOG_DEBUG:
        return 7;
    case TN_LOG_INFO:
        return 6;
    case TN_LOG_NOTICE:
        return 5;
    case TN_LOG_WARN:
        return 4;
    default:
        return 3;
    }
}

/* Append msg to buf[n..] as the inside of a JSON string, leaving room
 * for `keep` more bytes; returns the new length. */
static size_t json_escape(char *buf, size_t n, size_t cap, size_t keep, const char *msg)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)msg; *p != '\0'; p++) {
        char esc[6];
        size_t k = 0;
        if (*p == '"' || *p == '\\') {
            esc[k++] = '\\';
            esc[k++] = (char)*p;
        } else if (*p == '\n') {
            esc[k++] = '\\';
            esc[k++] = 'n';
        } else if (*p == '\t') {
            esc[k++] = '\\';
            esc[k++] = 't';
        } else if (*p < 0x20 || *p == 0x7f) {
            esc[0] = '\\';
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[*p >> 4];
            esc[5] = hex[*p & 15];
            k = 6;
        } else {
            esc[k++] = (char)*p;
        }
        if (n + k + keep >= cap)
            break;
        memcpy(buf + n, esc, k);
        n += k;
    }
    return n;
}

size_t tn_log_format_line(char *buf, size_t cap, int format, bool journal, int level,
                          int64_t wall_ms, const char *file, int line, const char *msg)
{
    TN_ASSERT(cap >= 64);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char ts[80];
    time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000));
    int n;
    if (format == TN_LOG_JSON) {
        /* msg last, so a cut line loses only the end of its message. */
        n = snprintf(buf, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"src\":\"%s:%d\",\"msg\":\"", ts,
                     tn_log_level_name(level), base, line);
        if (n < 0 || (size_t)n >= cap - 4)
            n = 0;
        size_t len = json_escape(buf, (size_t)n, cap, 4, msg);
        memcpy(buf + len, "\"}\n", 4); /* with its NUL */
        return len + 3;
    }
    if (journal)
        n = snprintf(buf, cap, "<%d>%s %s:%d: ", tn_log_priority(level), tn_log_level_name(level),
                     base, line);
    else
        n = snprintf(buf, cap, "%s %-6s %s:%d: ", ts, tn_log_level_name(level), base, line);
    if (n < 0 || (size_t)n >= cap - 2)
        n = 0;
    size_t len = (size_t)n;
    size_t m = strlen(msg);
    if (m > cap - 2 - len)
        m = cap - 2 - len;
    memcpy(buf + len, msg, m);
    len += m;
    buf[len++] = '\n';
    buf[len] = '\0';
    return len;
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
    char msg[2048];
    char buf[2048 + 512];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (m < 0)
        msg[0] = '\0';
    size_t len = tn_log_format_line(buf, sizeof(buf), log_format, log_journal, level,
                                    tn_now_wall_ms(), file, line, msg);
    ssize_t w = write(log_fd, buf, len);
    (void)w;
}

void tn_assert_fail(const char *expr, const char *file, int line)
{
    tn_log_write(TN_LOG_ERROR, file, line, "assertion failed: %s", expr);
    abort();
}
