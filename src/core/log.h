/* Levelled, rate-limited logging to stderr.
 *
 * Two line formats: text ("2026-12-01T21:15:00.123Z info   file.c:42:
 * msg") and JSON (one object a line: ts, level, msg, src). Under systemd
 * (JOURNAL_STREAM names the log fd) text lines drop the timestamp, which
 * journald adds, and start with the syslog priority "<N>" that journald
 * reads as the line's level.
 *
 * TN_LOG checks the level before it evaluates its arguments, so a disabled
 * debug line costs one comparison. TN_LOG_RL additionally lets through at
 * most one line per interval from the same call site and reports how many
 * it suppressed; use it for errors that can repeat per request. Nothing at
 * info or below belongs on a per-message path.
 *
 * Thread safety: any thread; each line is written with one write(2). */
#ifndef TN_CORE_LOG_H
#define TN_CORE_LOG_H

#include "core/platform.h"

typedef enum {
    TN_LOG_DEBUG = 0,
    TN_LOG_INFO,
    TN_LOG_NOTICE,
    TN_LOG_WARN,
    TN_LOG_ERROR,
    TN_LOG_OFF
} tn_log_level_t;

/* Atomic: the loop thread changes it at runtime (tn_log_set_level) while
 * worker and storage threads log. */
extern _Atomic int tn_log_level;

/* Change the level at runtime (nsqd's PUT /config/log_level). Lines
 * being written by other threads meanwhile see the old or the new one. */
void tn_log_set_level(int level);

/* Rate limiter state for one call site. */
typedef struct {
    int64_t next_ms;
    uint64_t suppressed;
} tn_log_rl_t;

#define TN_LOG(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) >= tn_log_level)                                                               \
            tn_log_write((level), __FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)

#define TN_LOG_RL(level, interval_ms, ...)                                                         \
    do {                                                                                           \
        static tn_log_rl_t tn__rl_;                                                                \
        if ((level) >= tn_log_level && tn_log_rl_allow(&tn__rl_, (interval_ms)))                   \
            tn_log_write((level), __FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)

void tn_log_write(int level, const char *file, int line, const char *fmt, ...) TN_PRINTF(4, 5);

/* Decide whether a rate-limited line may be written now. Thread-safe enough
 * for logging: a race lets an extra line through, never loses state. */
bool tn_log_rl_allow(tn_log_rl_t *rl, int64_t interval_ms);

/* Parse "debug", "info", "notice", "warn" or "error". Returns the level or
 * -1 for an unknown name. */
int tn_log_level_parse(const char *name);
const char *tn_log_level_name(int level);

/* Direct log output to fd (default 2). For tests. */
void tn_log_set_fd(int fd);

typedef enum { TN_LOG_TEXT = 0, TN_LOG_JSON } tn_log_format_t;

/* Choose the line format and whether text lines are for journald (see
 * above). Call from the thread that configures logging; lines being
 * written by other threads meanwhile take the old or the new format. */
void tn_log_set_format(int format, bool journal);
int tn_log_format(void);
bool tn_log_journal(void);

/* Whether the JOURNAL_STREAM value ("device:inode", may be NULL) names
 * the file fd is open on: systemd sets it when stderr goes to journald. */
bool tn_log_journal_stream(const char *env, int fd);

/* The syslog priority of a level (debug 7, info 6, notice 5, warn 4,
 * error 3). */
int tn_log_priority(int level);

/* Format one line (with its '\n') into buf; wall_ms is the time, file
 * the source path (only its last component is written), msg the text
 * (JSON-escaped in the JSON format). Returns the length, at most cap - 1;
 * a line that does not fit is cut (a JSON line still closes its object). */
size_t tn_log_format_line(char *buf, size_t cap, int format, bool journal, int level,
                          int64_t wall_ms, const char *file, int line, const char *msg);

#endif
