/* Fuzz target: the small record files storage reads at start
 * (tn_io_read_record_file, docs/storage-format.md), each through its own
 * reader. The first byte picks the file, the rest is its contents,
 * written into a scratch data directory (in /dev/shm when there is one):
 *   0  a channel's stamp file <channel>.cstamp (tn_store_channel_stamp_read)
 *   1  a topic's stamp file (tn_store_topic_stamp_read)
 *   2  a partition's floor file (tn__plog_floor_load)
 *   3  a partition's damage file, read by tn_plog_open beside an empty
 *      active segment 0 (load_damage, then apply_damage or drop_damage)
 * Checks: a reader answers 0 or TN_ECORRUPT, never crashes; what it
 * accepts is written back by the writer to exactly the input (one
 * encoding per value), and a stamp is never 0 (a topic's never below 1);
 * a refused file leaves the value 0. A damage file opens the log (0):
 * isolated (TN_ECORRUPT) or not, the file is left (isolated) or gone. */
#include "core/platform.h"

#include "core/err.h"
#include "core/log.h"
#include "storage/io.h"
#include "storage/plog.h"
#include "storage/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t loop;
static tn_store_t *store;
static char root[256], topic_dir[512], part_dir[4096];

static void on_plog_closed(tn_plog_t *plog)
{
    (void)plog;
    *(bool *)loop.data = true;
}

static void close_plog(tn_plog_t *plog)
{
    bool done = false;
    loop.data = &done;
    tn_plog_close(plog, on_plog_closed);
    while (!done)
        uv_run(&loop, UV_RUN_ONCE);
    loop.data = NULL;
}

static void on_store_closed(tn_store_t *s)
{
    (void)s;
    *(bool *)loop.data = true;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* At exit: the store closed, the loop closed cleanly, the scratch
 * directory gone. */
static void teardown(void)
{
    bool done = false;
    loop.data = &done;
    tn_store_close(store, on_store_closed);
    while (!done)
        uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_NOWAIT);
    if (uv_loop_close(&loop) != 0)
        abort();
    (void)nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Once per process: a data directory with topic "t" and partition 0
 * (an empty active segment 0), kept open across inputs. */
static void setup(void)
{
    tn_log_level = TN_LOG_ERROR + 1; /* recovery's notices on every input */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof(root), "%s/tern-fuzz-record-file.XXXXXX", base);
    if (mkdtemp(root) == NULL || uv_loop_init(&loop) != 0)
        abort();
    tn_store_opts_t o;
    memset(&o, 0, sizeof(o));
    o.data_path = root;
    o.segment_bytes = 64 * 1024;
    o.index_interval = 256;
    o.max_body = 1024 * 1024;
    o.durability = TN_DURABILITY_DURABLE;
    o.commit_max_requests = 64;
    o.commit_max_bytes = 1024 * 1024;
    o.commit_max_delay_ns = 1000000;
    o.wal_max_records = 1024;
    o.wal_max_delay_ns = 1000000;
    o.checkpoint_every = 8192;
    o.disk_high_pct = 100;
    o.disk_low_pct = 99;
    o.disk_check_interval_ns = 1000000000;
    char err[512];
    if (tn_store_open(&loop, &o, &store, err, sizeof(err)) != 0) {
        fprintf(stderr, "record_file: %s\n", err);
        abort();
    }
    tn_plog_t *plog;
    if (tn_plog_open(store, "t", 0, &plog) != 0)
        abort();
    snprintf(part_dir, sizeof(part_dir), "%s", plog->dir);
    close_plog(plog);
    snprintf(topic_dir, sizeof(topic_dir), "%s/t", store->topics_path);
    atexit(teardown);
}

static void put_file(const char *dir, const char *name, const uint8_t *data, size_t size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
}

static bool same_file(const char *dir, const char *name, const uint8_t *data, size_t size)
{
    char path[4200];
    tn_buf_t b;
    tn_buf_init(&b);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    bool same = tn_io_read_file(path, 4096, &b) == 0 && tn_buf_size(&b) == size &&
                memcmp(tn_buf_data(&b), data, size) == 0;
    tn_buf_fini(&b);
    return same;
}

static void remove_file(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    (void)unlink(path);
}

static void check_channel_stamp(const uint8_t *data, size_t size)
{
    put_file(topic_dir, "c" TN_STORE_CHAN_STAMP_SUFFIX, data, size);
    uint64_t stamp = 1;
    int rc = tn_store_channel_stamp_read(store, "t", "c", &stamp);
    if (rc != 0 && (rc != TN_ECORRUPT || stamp != 0))
        abort();
    if (rc == 0) {
        bool written = false;
        remove_file(topic_dir, "c" TN_STORE_CHAN_STAMP_SUFFIX);
        if (stamp == 0 || tn_store_channel_stamp_write(store, "t", "c", stamp, &written) != 0 ||
            !written || !same_file(topic_dir, "c" TN_STORE_CHAN_STAMP_SUFFIX, data, size))
            abort();
    }
    remove_file(topic_dir, "c" TN_STORE_CHAN_STAMP_SUFFIX);
}

static void check_topic_stamp(const uint8_t *data, size_t size)
{
    put_file(topic_dir, TN_STORE_STAMP_FILE, data, size);
    int64_t ms = 1;
    int rc = tn_store_topic_stamp_read(store, "t", &ms);
    if (rc != 0 && (rc != TN_ECORRUPT || ms != 0))
        abort();
    if (rc == 0) {
        remove_file(topic_dir, TN_STORE_STAMP_FILE);
        if (ms < 1 || tn_store_stamp_write_dir(topic_dir, ms) != 0 ||
            !same_file(topic_dir, TN_STORE_STAMP_FILE, data, size))
            abort();
    }
    remove_file(topic_dir, TN_STORE_STAMP_FILE);
}

static void check_floor(const uint8_t *data, size_t size)
{
    put_file(part_dir, "floor", data, size);
    uint64_t floor = 7;
    int rc = tn__plog_floor_load(part_dir, &floor);
    if (rc != 0 && (rc != TN_ECORRUPT || floor != 7))
        abort();
    if (rc == 0) {
        uint8_t p[8];
        tn_put_u64(p, floor);
        remove_file(part_dir, "floor");
        if (tn_io_write_record_file(part_dir, "floor", 0x31464E54u, p, sizeof(p)) != 0 ||
            !same_file(part_dir, "floor", data, size))
            abort();
    }
    remove_file(part_dir, "floor");
}

static void check_damage(const uint8_t *data, size_t size)
{
    put_file(part_dir, "damage", data, size);
    tn_plog_t *plog = NULL;
    if (tn_plog_open(store, "t", 0, &plog) != 0)
        abort();
    int err = tn_plog_err(plog);
    if (err != 0 && err != TN_ECORRUPT)
        abort();
    uint64_t base, end;
    if (tn_plog_damage(plog, &base, &end) && err == 0)
        abort(); /* damage named by a log that is not isolated */
    struct stat st;
    char path[4200];
    snprintf(path, sizeof(path), "%s/damage", part_dir);
    if (err == 0 && stat(path, &st) == 0)
        abort(); /* a record the open did not act on is dropped */
    close_plog(plog);
    remove_file(part_dir, "damage");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (store == NULL)
        setup();
    if (size < 1 || size > 1024)
        return 0;
    switch (data[0] % 4) {
    case 0:
        check_channel_stamp(data + 1, size - 1);
        break;
    case 1:
        check_topic_stamp(data + 1, size - 1);
        break;
    case 2:
        check_floor(data + 1, size - 1);
        break;
    default:
        check_damage(data + 1, size - 1);
        break;
    }
    return 0;
}
