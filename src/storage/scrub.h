/* Scrub: a background verification of every sealed segment of every open
 * partition log, and of the synced records of its active one, at a
 * bounded rate.
 *
 * A run walks the store's open partition logs and, in each, its sealed
 * segments, then the records of the active segment below the log's
 * durable point (synced, so no write changes them; recovery scans the
 * whole segment at every start): magic, flags, lengths, dense offsets and
 * CRC only, with no sidecar, count or length to compare; a finding there
 * isolates the log only when the record is still below its end (a
 * truncation may cut the file while it is read). For each sealed segment
 * it reads the sidecar index and then the records front to back, and
 * checks:
 *   - the file's length is the length the log holds for it;
 *   - every record: magic, flags, lengths, the next offset in sequence and
 *     its CRC; the records end exactly at the file's end, the last one
 *     closes its batch, and their count is the log's;
 *   - the sidecar: magic, header CRC, base, count, length and publish
 *     times as the scan found them, the entries' CRC, and that every entry
 *     names the byte position where the record of its offset starts.
 * A bad record or a wrong length is corruption of sealed, durable data: the
 * partition is isolated exactly as recovery isolates it (TN_ECORRUPT, the
 * file and byte position in its errmsg and in an error log line; appends
 * and reads refused until restart). A bad sidecar is reported and logged,
 * but does not isolate the partition: the sidecar is redundant, and
 * recovery rebuilds one that is missing or invalid.
 *
 * Reads go through a token bucket (rate bytes per second, a burst of one
 * read); a run never holds a lock while it reads. Each segment is pinned
 * by a reference for its check, so GC deleting it meanwhile leaves the
 * open file readable; a segment gone before its turn is counted as
 * skipped.
 *
 * Threads: the scrubber owns one thread that runs the checks. Every
 * tn_scrub_* call is made on the loop thread given to tn_scrub_new, except
 * tn_scrub_report and tn_scrub_counters (any thread). */
#ifndef TN_STORAGE_SCRUB_H
#define TN_STORAGE_SCRUB_H

#include "core/platform.h"

#include "storage/store.h"

#include <uv.h>

#define TN_SCRUB_MAX_ERRORS 32 /* errors a report lists; errors_total counts all */

typedef struct tn_scrub_s tn_scrub_t;

typedef struct {
    uint64_t rate;       /* bytes per second read, at least 1 */
    int64_t interval_ns; /* a background run this often; 0: none */
    int64_t quiet_ns;    /* the first background run this long after tn_scrub_new */
    /* For tests: the clock the rate limit reads (monotonic ns) and how it
     * waits (ns). NULL: the real clock and a wait that tn_scrub_close
     * interrupts. Called on the scrubber's thread with hook_arg. */
    int64_t (*clock)(void *hook_arg);
    void (*sleep)(void *hook_arg, int64_t ns);
    void *hook_arg;
} tn_scrub_opts_t;

typedef enum {
    TN_SCRUB_NONE = 0, /* no run yet */
    TN_SCRUB_RUNNING,
    TN_SCRUB_DONE,
    TN_SCRUB_STOPPED /* cut short by tn_scrub_close */
} tn_scrub_state_t;

typedef struct {
    char topic[256];
    uint32_t partition;
    uint64_t segment; /* base offset of the segment */
    char file[512];   /* the file the problem is in (.log or .idx) */
    uint64_t pos;     /* byte position in that file */
    uint64_t offset;  /* the offset of the record it is about; UINT64_MAX: none (a sidecar header, a
                         length) */
    bool isolated;    /* the partition was isolated for it */
    char what[160];
} tn_scrub_error_t;

typedef struct {
    uint64_t id; /* 1, 2, ... ; 0 with state NONE */
    tn_scrub_state_t state;
    bool background;    /* started by the timer, not by a request */
    int64_t started_ms; /* wall clock */
    int64_t finished_ms;
    uint64_t partitions;
    uint64_t segments;
    uint64_t
        segments_skipped; /* deleted (GC) before their turn, or in a partition already isolated */
    uint64_t bytes;       /* read: segments and sidecars */
    uint64_t records;
    int64_t throttled_ns; /* waited for the rate limit */
    uint64_t errors_total;
    uint32_t nerrors; /* listed below, at most TN_SCRUB_MAX_ERRORS */
    tn_scrub_error_t errors[TN_SCRUB_MAX_ERRORS];
} tn_scrub_report_t;

/* Totals since tn_scrub_new, for metrics. */
typedef struct {
    uint64_t runs; /* finished (not stopped) */
    uint64_t bytes;
    uint64_t records;
    uint64_t errors;
    int64_t last_success_ms; /* the last run that finished without errors; 0: none */
    int64_t last_duration_ns;
    bool running;
} tn_scrub_counters_t;

/* A token bucket: rate bytes per second, at most burst bytes saved up. */
typedef struct {
    uint64_t rate;
    uint64_t burst;
    double tokens; /* below 0: bytes taken ahead of the rate */
    int64_t last_ns;
} tn_scrub_bucket_t;

void tn_scrub_bucket_init(tn_scrub_bucket_t *b, uint64_t rate, uint64_t burst, int64_t now_ns);
/* Take n bytes at now_ns; returns how long (ns) to wait before using them
 * (0: at once). The debt carries over: n bytes past the burst always cost
 * n / rate seconds of waiting in all. */
int64_t tn_scrub_bucket_take(tn_scrub_bucket_t *b, uint64_t n, int64_t now_ns);

/* Make a scrubber for store (borrowed; it must outlive the scrubber) and
 * start its thread and, when o->interval_ns > 0, its timer. Copies o.
 * 0, UV_EINVAL (rate 0) or a thread/handle error. */
int tn_scrub_new(uv_loop_t *loop, tn_store_t *store, const tn_scrub_opts_t *o, tn_scrub_t **out);

/* Start a run now, unless one is running; *id is the run started or the
 * one running (*started says which). */
void tn_scrub_start(tn_scrub_t *s, uint64_t *id, bool *started);

/* Wait for run id to end. cb runs on the loop thread with the report
 * (borrowed for the call); w is the caller's until cb runs or
 * tn_scrub_wait_cancel returns. A run already over calls back on a later
 * loop turn. */
typedef struct tn_scrub_wait_s tn_scrub_wait_t;
typedef void (*tn_scrub_wait_cb)(tn_scrub_wait_t *w, const tn_scrub_report_t *report);
struct tn_scrub_wait_s {
    void *data;
    /* private */
    uint64_t id;
    tn_scrub_wait_cb cb;
    tn_scrub_wait_t *next;
};
void tn_scrub_wait(tn_scrub_t *s, tn_scrub_wait_t *w, uint64_t id, tn_scrub_wait_cb cb);
void tn_scrub_wait_cancel(tn_scrub_t *s, tn_scrub_wait_t *w);

/* A copy of the run going on, or else of the last one (state NONE when
 * none ran). Any thread. */
void tn_scrub_report(tn_scrub_t *s, tn_scrub_report_t *out);
void tn_scrub_counters(tn_scrub_t *s, tn_scrub_counters_t *out);
/* When the timer starts the next background run (wall ms); 0: no timer. */
int64_t tn_scrub_next_ms(tn_scrub_t *s);

/* Stop: a run going on is cut short (state STOPPED; waiters are called
 * with it), the thread is joined (this waits at most for one read), and
 * the memory is freed once the handles have closed. NULL is a no-op. */
void tn_scrub_close(tn_scrub_t *s);

#endif
