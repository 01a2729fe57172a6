/* tern-storage-bench: the storage engine's group commit against the disk's
 * raw fsync rate, measured in the same run on the same file system.
 *
 *   1. Raw: one thread writes 4 KiB and fdatasyncs, in a loop: the rate
 *      every durable write pays without group commit.
 *   2. For 1, 16 and 64 concurrent appenders and records of 200 B and
 *      4 KiB: each appender appends one record (durable mode, one
 *      partition) and appends the next as soon as the previous is
 *      acknowledged. Reports records/s, MB/s, the ratio to the raw rate,
 *      the ceiling (appenders x raw rate: one fsync per record per
 *      appender, all overlapping) and acknowledgement latency.
 *
 * --raw runs only the first and prints its median latency and rate (the
 * flush ceiling bench/nsq_bench.sh divides by).
 *
 * Usage: tern-storage-bench [--dir PATH] [--seconds N] [--raw] */
#include "core/platform.h"

#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "storage/plog.h"
#include "storage/store.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SAMPLES 2000000

static double seconds = 3.0;
static bool raw_only; /* --raw: the raw loop alone (median latency and rate) */
static const char *root = "bench-data";

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rmrf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int cmp_i64(const void *a, const void *b);

/* The raw loop's rate (writes/s); *median_us gets the median time of one
 * write + fdatasync when not NULL. */
static double raw_fsync_rate(double *median_us)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/raw.bin", root);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    char buf[4096];
    memset(buf, 'r', sizeof(buf));
    int64_t *lat = malloc(MAX_SAMPLES * sizeof(*lat));
    if (lat == NULL) {
        perror("malloc");
        exit(1);
    }
    int64_t start = tn_now_mono_ns(), end = start + (int64_t)(seconds * 1e9), t = start;
    long n = 0;
    while (t < end) {
        if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) || fdatasync(fd) != 0) {
            perror("write/fdatasync");
            exit(1);
        }
        int64_t now = tn_now_mono_ns();
        if (n < MAX_SAMPLES)
            lat[n] = now - t;
        t = now;
        n++;
    }
    double el = (double)(t - start) / 1e9;
    close(fd);
    unlink(path);
    long kept = n < MAX_SAMPLES ? n : MAX_SAMPLES;
    if (median_us != NULL) {
        qsort(lat, (size_t)kept, sizeof(int64_t), cmp_i64);
        *median_us = kept > 0 ? (double)lat[kept / 2] / 1e3 : 0;
    }
    free(lat);
    return (double)n / el;
}

typedef struct run_s run_t;
typedef struct {
    tn_append_t req;
    tn_rec_in_t rec;
    int64_t started;
    run_t *run;
} appender_t;

struct run_s {
    tn_plog_t *plog;
    bool stop;
    int active;
    uint64_t done;
    uint64_t bytes;
    int64_t *lat;
    size_t nlat;
};

static void submit(appender_t *a);

static void on_append(tn_append_t *req, int status)
{
    appender_t *a = req->data;
    run_t *r = a->run;
    if (status != 0) {
        fprintf(stderr, "append failed: %s\n", tn_strerror(status));
        exit(1);
    }
    r->done++;
    r->bytes += a->rec.body.len;
    if (r->nlat < MAX_SAMPLES)
        r->lat[r->nlat++] = tn_now_mono_ns() - a->started;
    if (r->stop) {
        r->active--;
        return;
    }
    submit(a);
}

static void submit(appender_t *a)
{
    a->started = tn_now_mono_ns();
    a->req.data = a;
    int rc = tn_plog_append(a->run->plog, &a->req, &a->rec, 1, on_append);
    if (rc != 0) {
        fprintf(stderr, "append refused: %s\n", tn_strerror(rc));
        exit(1);
    }
}

static void on_timer(uv_timer_t *t)
{
    run_t *r = t->data;
    r->stop = true;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void on_closed(tn_store_t *s)
{
    (void)s;
}

typedef struct {
    double rate;
    double mbps;
    double p50_us;
    double p99_us;
} result_t;

static result_t run_appenders(int n, size_t size)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/store", root);
    rmrf(dir);
    tn_config_t cfg;
    tn_config_init(&cfg);
    tn_store_opts_t o;
    tn_store_opts_from_config(&o, &cfg);
    o.data_path = dir;
    o.disk_min_free = 0;
    o.disk_high_pct = 100;
    o.disk_low_pct = 99;
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_store_t *store;
    char err[512];
    if (tn_store_open(&loop, &o, &store, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    tn_config_fini(&cfg);
    run_t r = {0};
    r.lat = malloc(MAX_SAMPLES * sizeof(int64_t));
    if (r.lat == NULL || tn_plog_open(store, "bench", 0, &r.plog) != 0)
        exit(1);
    char *body = malloc(size);
    memset(body, 'b', size);
    appender_t *apps = calloc((size_t)n, sizeof(*apps));
    uv_timer_t timer;
    uv_timer_init(&loop, &timer);
    timer.data = &r;
    uv_timer_start(&timer, on_timer, (uint64_t)(seconds * 1000), 0);
    int64_t start = tn_now_mono_ns();
    r.active = n;
    for (int i = 0; i < n; i++) {
        apps[i].run = &r;
        apps[i].rec = (tn_rec_in_t){{NULL, 0}, tn_iov(body, size), 0};
        submit(&apps[i]);
    }
    while (r.active > 0)
        uv_run(&loop, UV_RUN_ONCE);
    double el = (double)(tn_now_mono_ns() - start) / 1e9;
    uv_close((uv_handle_t *)&timer, NULL);
    tn_store_close(store, on_closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    qsort(r.lat, r.nlat, sizeof(int64_t), cmp_i64);
    result_t res = {(double)r.done / el, (double)r.bytes / el / 1e6,
                    (double)r.lat[r.nlat / 2] / 1e3, (double)r.lat[r.nlat * 99 / 100] / 1e3};
    free(r.lat);
    free(body);
    free(apps);
    rmrf(dir);
    return res;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            root = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--raw") == 0)
            raw_only = true;
        else {
            fprintf(stderr, "usage: %s [--dir PATH] [--seconds N] [--raw]\n", argv[0]);
            return 2;
        }
    }
    tn_log_level = TN_LOG_WARN;
    mkdir(root, 0755);
    if (raw_only) {
        double median = 0, rate = raw_fsync_rate(&median);
        printf("raw write 4 KiB + fdatasync: median %.0f us, %.0f/s\n", median, rate);
        rmdir(root);
        return 0;
    }
    /* The disk's rate drifts; measure it before and after and use the mean. */
    double raw_before = raw_fsync_rate(NULL);
    int counts[] = {1, 16, 64};
    size_t sizes[] = {200, 4096};
    result_t res[2][3];
    for (size_t s = 0; s < TN_ARRAY_SIZE(sizes); s++) {
        for (size_t c = 0; c < TN_ARRAY_SIZE(counts); c++)
            res[s][c] = run_appenders(counts[c], sizes[s]);
    }
    double raw_after = raw_fsync_rate(NULL);
    double raw = (raw_before + raw_after) / 2;
    printf("raw write 4 KiB + fdatasync: %.0f/s (%.0f us each; %.0f/s before the runs, %.0f/s "
           "after)\n\n",
           raw, 1e6 / raw, raw_before, raw_after);
    printf("| appenders | record | records/s | MB/s | x raw | ceiling (x raw) | ack p50 | ack p99 "
           "|\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double ratio_64_200 = 0;
    for (size_t s = 0; s < TN_ARRAY_SIZE(sizes); s++) {
        for (size_t c = 0; c < TN_ARRAY_SIZE(counts); c++) {
            result_t r = res[s][c];
            double ratio = r.rate / raw;
            if (counts[c] == 64 && sizes[s] == 200)
                ratio_64_200 = ratio;
            printf("| %d | %zu B | %.0f | %.1f | %.1f | %d | %.0f us | %.0f us |\n", counts[c],
                   sizes[s], r.rate, r.mbps, ratio, counts[c], r.p50_us, r.p99_us);
        }
    }
    rmdir(root);
    printf("\n64 appenders x 200 B: %.1fx the raw fdatasync rate (target >= 40x, ceiling 64x): "
           "%s\n",
           ratio_64_200, ratio_64_200 >= 40 ? "met" : "NOT met");
    return 0;
}
