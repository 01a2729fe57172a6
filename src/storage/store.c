/* The store: the data directory (lock, FORMAT, layout), the committer
 * threads and the completion path back to the loop thread. */
#include "core/platform.h"

#include "storage/store.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/buf.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"
#include "storage/chanlog.h"
#include "storage/disk.h"
#include "storage/ilog.h"
#include "storage/io.h"
#include "storage/plog.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void tn_store_opts_from_config(tn_store_opts_t *o, const tn_config_t *cfg)
{
    memset(o, 0, sizeof(*o));
    o->data_path = cfg->data_path;
    o->segment_bytes = (uint64_t)cfg->segment_bytes;
    o->index_interval = (uint32_t)cfg->index_interval_bytes;
    o->max_body = (uint32_t)cfg->max_msg_size;
    o->durability = cfg->durability;
    o->commit_max_requests = (uint32_t)cfg->commit_max_requests;
    o->commit_max_bytes = (uint64_t)cfg->commit_max_bytes;
    o->commit_max_delay_ns = cfg->commit_max_delay_ns;
    o->busy_poll_ns = cfg->commit_busy_poll_ns;
    o->busy_poll_min = (uint32_t)cfg->commit_busy_poll_min;
    o->busy_poll_cost_ns = cfg->commit_busy_poll_cost_ns;
    o->relaxed_sync_messages = (uint64_t)cfg->relaxed_sync_messages;
    o->relaxed_sync_bytes = (uint64_t)cfg->relaxed_sync_bytes;
    o->relaxed_sync_interval_ns = cfg->relaxed_sync_interval_ns;
    o->wal_max_records = (uint32_t)cfg->wal_commit_max_records;
    o->wal_max_delay_ns = cfg->wal_commit_max_delay_ns;
    o->checkpoint_every = (uint32_t)cfg->checkpoint_every;
    o->disk_high_pct = (int)cfg->disk_high_watermark;
    o->disk_low_pct = (int)cfg->disk_low_watermark;
    o->disk_min_free = (uint64_t)cfg->disk_min_free_bytes;
    o->disk_check_interval_ns = cfg->disk_check_interval_ns;
}

bool tn_store_valid_name(const char *name)
{
    return tn_name_valid(name, strlen(name));
}

static int take_lock(tn_store_t *store, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/LOCK", store->path);
    int fd;
    int rc = tn_io_open(path, O_RDWR | O_CREAT, 0644, &fd);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot open lock file %s: %s", path, tn_strerror(rc));
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        size_t n = 0;
        tn_io_pread(fd, pid, sizeof(pid) - 1, 0, &n);
        pid[n] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        tn_io_close(fd);
        if (e == EWOULDBLOCK) {
            tn_errbuf(err, errlen, "data directory %s is locked by another process (pid %s)",
                      store->path, pid[0] ? pid : "unknown");
            return TN_ELOCKED;
        }
        tn_errbuf(err, errlen, "cannot lock %s: %s", path, strerror(e));
        return tn_err_from_errno(e);
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    /* The pid is informational; a failure to write it is not fatal. */
    if (ftruncate(fd, 0) == 0)
        (void)tn_io_pwrite(fd, pid, (size_t)len, 0);
    store->lock_fd = fd;
    return 0;
}

static int check_format(tn_store_t *store, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/FORMAT", store->path);
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_io_read_file(path, 4096, &b);
    if (rc == UV_ENOENT) {
        tn_buf_fini(&b);
        struct stat st;
        if (stat(store->topics_path, &st) == 0) {
            tn_errbuf(err, errlen,
                      "data directory %s has topics/ but no FORMAT file; refusing to guess its "
                      "format (restore FORMAT or move the directory aside)",
                      store->path);
            return TN_ECORRUPT;
        }
        char text[64];
        int n = snprintf(text, sizeof(text), "tern-storage %d\n", TN_STORE_FORMAT);
        rc = tn_io_write_file_atomic(store->path, "FORMAT", text, (size_t)n);
        if (rc != 0)
            tn_errbuf(err, errlen, "cannot write %s: %s", path, tn_strerror(rc));
        return rc;
    }
    if (rc != 0) {
        tn_buf_fini(&b);
        tn_errbuf(err, errlen, "cannot read %s: %s", path, tn_strerror(rc));
        return rc;
    }
    char text[64] = "";
    snprintf(text, sizeof(text), "%.*s", (int)TN_MIN(b.len, sizeof(text) - 1), b.base);
    tn_buf_fini(&b);
    const char *prefix = "tern-storage ";
    char *end = NULL;
    long version = -1;
    if (strncmp(text, prefix, strlen(prefix)) == 0) {
        const char *digits = text + strlen(prefix);
        errno = 0;
        version = (*digits >= '0' && *digits <= '9') ? strtol(digits, &end, 10) : -1;
        if (errno != 0 || end == NULL || (*end != '\n' && *end != '\0') ||
            (*end == '\n' && end[1] != '\0'))
            version = -1;
    }
    if (version < 1) {
        tn_errbuf(err, errlen, "%s is not a tern FORMAT file", path);
        return TN_ECORRUPT;
    }
    if (version > TN_STORE_FORMAT) {
        tn_errbuf(err, errlen,
                  "data directory %s has storage format %ld; this ternd reads format %d at most "
                  "(run a newer ternd)",
                  store->path, version, TN_STORE_FORMAT);
        return TN_EFORMAT;
    }
    return 0;
}

/* Run every completion queued so far (loop thread). */
static void run_done(tn_store_t *store)
{
    uv_mutex_lock(&store->done_lock);
    tn__sreq_t *s = store->done_head;
    store->done_head = store->done_tail = NULL;
    uv_mutex_unlock(&store->done_lock);
    while (s != NULL) {
        tn__sreq_t *next = s->next;
        s->done(s);
        s = next;
    }
}

/* wake_fd became readable: take its count first, then the list, so a
 * completion queued after the list was taken leaves the fd readable and
 * wakes the loop again (at worst a wake-up that finds the list empty). */
static void on_wake(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    tn_store_t *store = h->data;
    uint64_t count;
    while (read(store->wake_fd, &count, sizeof(count)) < 0 && errno == EINTR)
        ;
    run_done(store);
}

/* A stalled disk: this many busy_poll_ns with appends out and none
 * completed. Polling ends then, and does not start again until one has,
 * however many appends keep arriving. */
#define POLL_STALL 4

/* Idempotent: a completion run by on_poll may close the store, which
 * stops polling before on_poll looks again. */
static void poll_stop(tn_store_t *store, int64_t now)
{
    if (store->poll_started_ns == 0)
        return;
    uv_idle_stop(&store->poll);
    store->poll_ns_total += (uint64_t)(now - store->poll_started_ns);
    store->poll_started_ns = 0;
}

static bool stalled(const tn_store_t *store, int64_t now)
{
    return now - store->progress_ns >= POLL_STALL * store->opts.busy_poll_ns;
}

/* Whether polling is worth its CPU: enough appends out, commits within the
 * budget on average, and that average shared by the appends out no more
 * than the cost limit. */
static bool worth_polling(const tn_store_t *store)
{
    int64_t round = atomic_load_explicit(&store->logc.round_ns, memory_order_relaxed);
    if (store->appends_out < store->opts.busy_poll_min || round > store->opts.busy_poll_ns)
        return false;
    return store->opts.busy_poll_cost_ns <= 0 ||
           round <= (int64_t)store->appends_out * store->opts.busy_poll_cost_ns;
}

static void on_poll(uv_idle_t *h)
{
    tn_store_t *store = h->data;
    uv_mutex_lock(&store->done_lock);
    bool done = store->done_head != NULL;
    uv_mutex_unlock(&store->done_lock);
    if (done)
        run_done(store); /* moves progress_ns */
    int64_t now = tn_now_mono_ns();
    if (done)
        store->poll_until_ns = now + store->opts.busy_poll_ns;
    if (!worth_polling(store) || now >= store->poll_until_ns || stalled(store, now))
        poll_stop(store, now);
}

void tn__store_append_out(tn_store_t *store)
{
    if (store->opts.busy_poll_ns <= 0) {
        store->appends_out++;
        return;
    }
    int64_t now = tn_now_mono_ns();
    if (store->appends_out++ == 0)
        store->progress_ns = now;
    if (stalled(store, now) || !worth_polling(store))
        return;
    /* New appends keep it going: the round they join is still to come. */
    store->poll_until_ns = now + store->opts.busy_poll_ns;
    if (store->poll_started_ns == 0) {
        store->poll_started_ns = now;
        uv_idle_start(&store->poll, on_poll);
    }
}

void tn__store_append_back(tn_store_t *store)
{
    store->appends_out--;
    if (store->opts.busy_poll_ns <= 0)
        return;
    store->progress_ns = tn_now_mono_ns();
    /* At once, whichever of the wake-up or a poll ran this completion. */
    if (store->appends_out < store->opts.busy_poll_min)
        poll_stop(store, store->progress_ns);
}

void tn__store_complete(tn_store_t *store, tn__sreq_t *head, tn__sreq_t *tail)
{
    tail->next = NULL;
    uv_mutex_lock(&store->done_lock);
    bool was_empty = store->done_head == NULL;
    if (store->done_tail != NULL)
        store->done_tail->next = head;
    else
        store->done_head = head;
    store->done_tail = tail;
    uv_mutex_unlock(&store->done_lock);
    /* Only the first completion of a batch wakes the loop: it takes the
     * whole list. Outside the lock, so the loop never waits for a write. */
    if (was_empty) {
        uint64_t one = 1;
        while (write(store->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
            ;
    }
}

static void store_free(tn_store_t *store)
{
    if (store->lock_fd >= 0)
        tn_io_close(store->lock_fd); /* releases the flock */
    if (store->wake_fd >= 0)
        close(store->wake_fd);
    uv_mutex_destroy(&store->done_lock);
    uv_mutex_destroy(&store->open_lock);
    tn_free(store->path);
    tn_free(store->topics_path);
    tn_free(store);
}

static void on_wake_closed(uv_handle_t *h);
static int quarantine_sweep(tn_store_t *store, char *err, size_t errlen);

int tn_store_open(uv_loop_t *loop, const tn_store_opts_t *opts, tn_store_t **out, char *err,
                  size_t errlen)
{
    tn_store_t *store = tn_calloc(1, sizeof(*store));
    if (store == NULL)
        return UV_ENOMEM;
    store->loop = loop;
    store->opts = *opts;
    tn_hist_init(&store->fsync_hist);
    tn_hist_init(&store->walsync_hist);
    store->lock_fd = -1;
    store->wake_fd = -1;
    store->opts.data_path = NULL;
    int rc = uv_mutex_init(&store->done_lock);
    if (rc != 0) {
        tn_free(store);
        return rc;
    }
    rc = uv_mutex_init(&store->open_lock);
    if (rc != 0) {
        uv_mutex_destroy(&store->done_lock);
        tn_free(store);
        return rc;
    }
    char topics[4096];
    snprintf(topics, sizeof(topics), "%s/topics", opts->data_path);
    store->path = tn_strdup(opts->data_path);
    store->topics_path = tn_strdup(topics);
    if (store->path == NULL || store->topics_path == NULL) {
        store_free(store);
        return UV_ENOMEM;
    }
    store->opts.data_path = store->path;

    rc = tn_io_mkdir_p(store->path, 0755);
    if (rc != 0) {
        tn_errbuf(err, errlen, "cannot create data directory %s: %s", store->path, tn_strerror(rc));
        goto fail;
    }
    if ((rc = take_lock(store, err, errlen)) != 0 || (rc = check_format(store, err, errlen)) != 0)
        goto fail;
    char meta[4096], trash[4096];
    snprintf(meta, sizeof(meta), "%s/meta", store->path);
    snprintf(trash, sizeof(trash), "%s/trash", store->path);
    if ((rc = tn_io_mkdir_p(store->topics_path, 0755)) != 0 ||
        (rc = tn_io_mkdir_p(meta, 0755)) != 0 || (rc = tn_io_mkdir_p(trash, 0755)) != 0) {
        tn_errbuf(err, errlen, "cannot create directories under %s: %s", store->path,
                  tn_strerror(rc));
        goto fail;
    }
    /* What a deletion moved to trash/ before a crash is finished off (a
     * link there is removed as a link: tn_io_remove_children). */
    (void)tn_io_remove_children(trash);
    if ((rc = quarantine_sweep(store, err, errlen)) != 0)
        goto fail;
    tn__disk_check(store);

    store->logc.store = store;
    store->logc.name = "log";
    store->logc.max_reqs = opts->commit_max_requests;
    store->logc.max_bytes = opts->commit_max_bytes;
    store->logc.max_delay_ns = opts->commit_max_delay_ns;
    store->logc.process = tn__plog_round;
    store->logc.tick = tn__plog_tick;
    store->logc.fini = tn__plog_committer_fini;
    store->logc.next_tick_ns = tn_now_mono_ns() + opts->disk_check_interval_ns;
    store->walc.store = store;
    store->walc.name = "wal";
    store->walc.max_reqs = opts->wal_max_records;
    store->walc.max_bytes = UINT64_MAX;
    store->walc.max_delay_ns = opts->wal_max_delay_ns;
    store->walc.process = tn__chanlog_round;
    store->walc.tick = NULL;

    store->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (store->wake_fd < 0) {
        rc = tn_err_from_errno(errno);
        tn_errbuf(err, errlen, "eventfd: %s", tn_strerror(rc));
        goto fail;
    }
    rc = uv_poll_init(loop, &store->wake, store->wake_fd);
    if (rc != 0) { /* no handle was made */
        tn_errbuf(err, errlen, "storage wake-up watcher: %s", uv_strerror(rc));
        goto fail;
    }
    store->wake.data = store;
    /* On Linux, starting a watcher of a new descriptor cannot fail (libuv
     * 1.44 returns 0); the handle exists now and frees only by closing. */
    int started = uv_poll_start(&store->wake, UV_READABLE, on_wake);
    TN_ASSERT(started == 0);

    /* The threads start after: nothing can reach the wake-up before a
     * request is submitted, and no request exists before open returns. */
    if ((rc = tn__committer_start(&store->logc)) != 0 ||
        (rc = tn__committer_start(&store->walc)) != 0) {
        tn_errbuf(err, errlen, "cannot start storage threads: %s", uv_strerror(rc));
        tn__committer_stop(&store->logc);
        goto fail_watched;
    }
    uv_idle_init(loop, &store->poll);
    store->poll.data = store;
    *out = store;
    return 0;
fail_watched:
    /* The watcher's close frees the store (no close_cb: nothing to tell). */
    uv_close((uv_handle_t *)&store->wake, on_wake_closed);
    return rc;
fail:
    store_free(store);
    return rc;
}

static void on_wake_closed(uv_handle_t *h)
{
    tn_store_t *store = h->data;
    tn_store_close_cb cb = store->close_cb;
    if (cb != NULL)
        cb(store);
    store_free(store);
}

/* The wake-up watcher is closed only once the idle handle's close has
 * run: libuv finishes a tick's closes one after the other, and freeing the
 * store in the watcher's callback while the idle handle, inside it, still
 * waited in that list had libuv read freed memory. */
static void on_poll_closed(uv_handle_t *h)
{
    tn_store_t *store = h->data;
    uv_close((uv_handle_t *)&store->wake, on_wake_closed);
}

static void finish_close(tn_store_t *store)
{
    tn__committer_stop(&store->logc);
    tn__committer_stop(&store->walc);
    /* Completions posted by the last rounds. */
    run_done(store);
    poll_stop(store, tn_now_mono_ns());
    uv_close((uv_handle_t *)&store->poll, on_poll_closed);
}

void tn__store_closed_one(tn_store_t *store)
{
    if (store->closing > 0)
        store->closing--;
    if (store->closing == 0 && store->close_cb != NULL && store->plogs == NULL &&
        store->chanlogs == NULL && store->ilog == NULL)
        finish_close(store);
}

static void noop_close_cb(tn_store_t *store)
{
    (void)store;
}

void tn_store_set_repl_watch(tn_store_t *store, void (*cb)(void *arg, tn_plog_t *plog), void *arg)
{
    store->repl_cb = cb;
    store->repl_arg = arg;
}

void tn_store_set_cut_watch(tn_store_t *store, tn_store_cut_watch_cb cb, void *arg)
{
    store->cut_cb = cb;
    store->cut_arg = arg;
}

void tn_store_close(tn_store_t *store, tn_store_close_cb cb)
{
    store->close_cb = cb != NULL ? cb : noop_close_cb;
    if (store->plogs == NULL && store->chanlogs == NULL && store->ilog == NULL &&
        store->closing == 0) {
        finish_close(store);
        return;
    }
    /* Closing does not unlink (that happens in the close completion), so
     * the walk is stable; the lock orders it after any worker's open. */
    uv_mutex_lock(&store->open_lock);
    for (tn_chanlog_t *c = store->chanlogs; c != NULL; c = c->next_open)
        tn_chanlog_close(c, NULL);
    for (tn_plog_t *p = store->plogs; p != NULL; p = p->next_open)
        tn_plog_close(p, NULL);
    if (store->ilog != NULL)
        tn_ilog_close(store->ilog, NULL);
    uv_mutex_unlock(&store->open_lock);
}

/* --- quarantine of dropped copies (store.h) ---------------------------------------- */

static bool partition_name(const char *s)
{
    if (*s == '\0' || strlen(s) > 10 || (s[0] == '0' && s[1] != '\0'))
        return false;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9')
            return false;
    return true;
}

/* The tag a mark holds, kept to [A-Za-z0-9] (at most 24), "x" when none. */
static void mark_tag(const char *path, char *tag, size_t cap)
{
    tn_buf_t b;
    tn_buf_init(&b);
    size_t n = 0;
    if (tn_io_read_file(path, 64, &b) == 0) {
        const char *d = tn_buf_data(&b);
        for (size_t i = 0; i < tn_buf_size(&b) && n + 1 < cap && n < 24; i++)
            if ((d[i] >= 'a' && d[i] <= 'z') || (d[i] >= 'A' && d[i] <= 'Z') ||
                (d[i] >= '0' && d[i] <= '9'))
                tag[n++] = d[i];
    }
    tn_buf_fini(&b);
    if (n == 0 && cap > 1)
        tag[n++] = 'x';
    tag[n] = '\0';
}

/* Move <topics>/<topic>/<p> (marked) to <qdir>/: the rename, then both
 * directories fsynced. A crash before the rename leaves the marked copy
 * in topics/ (the next open moves it); after it, the copy is in
 * quarantine/ (a rename is atomic; the fsyncs only make it durable
 * sooner). The start's sweep and tn_store_quarantine_dropped share it. */
static int quarantine_one(const char *topics_path, const char *qdir, const char *topic,
                          const char *p)
{
    char from[4400], mark[4500], to[4600], tag[32];
    snprintf(from, sizeof(from), "%s/%s/%s", topics_path, topic, p);
    snprintf(mark, sizeof(mark), "%s/" TN_STORE_DROPPED_FILE, from);
    mark_tag(mark, tag, sizeof(tag));
    int64_t ms = tn_now_wall_ms();
    int rc = UV_EEXIST;
    for (unsigned k = 0; rc == UV_EEXIST && k < 100; k++) {
        snprintf(to, sizeof(to), "%s/%.255s.%s.%s.%lld", qdir, topic, p, tag, (long long)ms + k);
        struct stat st;
        rc = lstat(to, &st) == 0 ? UV_EEXIST : tn_io_rename(from, to);
    }
    if (rc != 0)
        return rc;
    char tdir[4400];
    snprintf(tdir, sizeof(tdir), "%s/%s", topics_path, topic);
    if ((rc = tn_io_fsync_dir(tdir)) != 0 || (rc = tn_io_fsync_dir(qdir)) != 0)
        return rc;
    TN_LOG(TN_LOG_NOTICE,
           "partition %s/%s was dropped from this node's replicas: its copy is in %s (never read; "
           "remove it when you no longer want it)",
           topic, p, to);
    return 0;
}

/* At open: every marked partition directory to quarantine/, then count
 * what quarantine/ holds. */
static int quarantine_sweep(tn_store_t *store, char *err, size_t errlen)
{
    char qdir[4096];
    snprintf(qdir, sizeof(qdir), "%s/quarantine", store->path);
    int rc = tn_io_mkdir_p(qdir, 0755);
    DIR *d = rc == 0 ? opendir(store->topics_path) : NULL;
    if (d == NULL) {
        rc = rc != 0 ? rc : tn_err_from_errno(errno);
        tn_errbuf(err, errlen, "cannot sweep %s for dropped copies: %s", store->topics_path,
                  tn_strerror(rc));
        return rc;
    }
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!tn_store_valid_name(e->d_name))
            continue;
        char tdir[4400];
        int tn = snprintf(tdir, sizeof(tdir), "%s/%s", store->topics_path, e->d_name);
        if (tn < 0 || (size_t)tn >= sizeof(tdir))
            continue; /* longer than any path recovery opens */
        DIR *pd = opendir(tdir);
        if (pd == NULL)
            continue; /* not a directory: recovery says what it is */
        struct dirent *pe;
        while (rc == 0 && (pe = readdir(pd)) != NULL) {
            if (!partition_name(pe->d_name))
                continue;
            char mark[4500];
            int mn = snprintf(mark, sizeof(mark), "%s/%s/" TN_STORE_DROPPED_FILE, tdir, pe->d_name);
            if (mn < 0 || (size_t)mn >= sizeof(mark) || access(mark, F_OK) != 0)
                continue;
            rc = quarantine_one(store->topics_path, qdir, e->d_name, pe->d_name);
            if (rc != 0)
                tn_errbuf(err, errlen, "cannot move the dropped copy %s/%s to %s: %s", tdir,
                          pe->d_name, qdir, tn_strerror(rc));
        }
        closedir(pd);
    }
    closedir(d);
    if (rc != 0)
        return rc;
    store->quarantined = 0;
    DIR *q = opendir(qdir);
    while (q != NULL && (e = readdir(q)) != NULL)
        store->quarantined += e->d_name[0] != '.';
    if (q != NULL)
        closedir(q);
    return 0;
}

int tn_store_mark_dropped(const char *data_path, const char *topic, uint32_t p, bool dropped,
                          const char *tag)
{
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char dir[4400], mark[4500];
    snprintf(dir, sizeof(dir), "%s/topics/%s/%" PRIu32, data_path, topic, p);
    snprintf(mark, sizeof(mark), "%s/" TN_STORE_DROPPED_FILE, dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 0 : tn_err_from_errno(errno);
    if (dropped) {
        if (access(mark, F_OK) == 0)
            return 0;
        char text[64];
        int n = snprintf(text, sizeof(text), "%s\n", tag != NULL && tag[0] ? tag : "x");
        return tn_io_write_file_atomic(dir, TN_STORE_DROPPED_FILE, text, (size_t)n);
    }
    int rc = tn_io_unlink(mark);
    if (rc == UV_ENOENT)
        return 0;
    return rc != 0 ? rc : tn_io_fsync_dir(dir);
}

int tn_store_quarantine_dropped(const char *data_path, const char *topic, uint32_t p, bool *moved)
{
    if (moved != NULL)
        *moved = false;
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char topics[4096], qdir[4096], mark[4600], pname[16];
    snprintf(topics, sizeof(topics), "%s/topics", data_path);
    snprintf(qdir, sizeof(qdir), "%s/quarantine", data_path);
    snprintf(pname, sizeof(pname), "%" PRIu32, p);
    snprintf(mark, sizeof(mark), "%s/%s/%s/" TN_STORE_DROPPED_FILE, topics, topic, pname);
    if (access(mark, F_OK) != 0)
        return errno == ENOENT ? 0 : tn_err_from_errno(errno); /* no copy, or given back */
    int rc = tn_io_mkdir_p(qdir, 0755);
    if (rc == 0)
        rc = quarantine_one(topics, qdir, topic, pname);
    if (rc == 0 && moved != NULL)
        *moved = true;
    return rc;
}

int tn_store_remove_topic(tn_store_t *store, const char *topic)
{
    char from[4096], to[4400], trash[4000];
    snprintf(from, sizeof(from), "%s/%s", store->topics_path, topic);
    snprintf(trash, sizeof(trash), "%s/trash", store->path);
    snprintf(to, sizeof(to), "%s/%.255s.%lld", trash, topic, (long long)tn_now_wall_ns());
    /* The rename is the commit point: once it is durable the topic is gone
     * at the next start, whatever happens to the removal below. */
    int rc = tn_io_rename(from, to);
    if (rc == UV_ENOENT)
        return 0;
    if (rc != 0)
        return rc;
    if ((rc = tn_io_fsync_dir(store->topics_path)) != 0 || (rc = tn_io_fsync_dir(trash)) != 0)
        return rc;
    /* Best effort: what stays is removed at the next start. A topic
     * directory that is a symbolic link goes as a link: what it points
     * to is not the topic's to remove, nor is anything a link inside
     * points to. */
    (void)tn_io_remove_tree(to);
    return 0;
}

/* The stamp file: u32 magic "TNS1", u32 crc32c of the next 8 bytes, u64
 * the record's creation time (Unix ms); little-endian. */
#define STAMP_MAGIC 0x31534E54u /* "TNS1" read as a little-endian u32 */

int tn_store_topic_stamp_write(tn_store_t *store, const char *topic, int64_t ms, bool make_dir)
{
    if (!tn_store_valid_name(topic) || ms <= 0)
        return UV_EINVAL;
    char dir[4400];
    snprintf(dir, sizeof(dir), "%s/%s", store->topics_path, topic);
    struct stat st;
    if (make_dir) {
        int rc = tn_io_mkdir_p(dir, 0755);
        if (rc != 0)
            return rc;
    } else if (stat(dir, &st) != 0) {
        return errno == ENOENT ? 0 : tn_err_from_errno(errno);
    }
    return tn_store_stamp_write_dir(dir, ms);
}

int tn_store_stamp_write_dir(const char *topic_dir, int64_t ms)
{
    if (ms <= 0)
        return UV_EINVAL;
    unsigned char payload[8];
    tn_put_u64(payload, (uint64_t)ms);
    return tn_io_write_record_file(topic_dir, TN_STORE_STAMP_FILE, STAMP_MAGIC, payload,
                                   sizeof(payload));
}

int tn_store_topic_stamp_read(tn_store_t *store, const char *topic, int64_t *ms)
{
    *ms = 0;
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char dir[4400];
    snprintf(dir, sizeof(dir), "%s/%s", store->topics_path, topic);
    return tn_store_stamp_read_dir(dir, ms);
}

int tn_store_stamp_read_dir(const char *topic_dir, int64_t *ms)
{
    *ms = 0;
    unsigned char payload[8];
    int rc = tn_io_read_record_file(topic_dir, TN_STORE_STAMP_FILE, STAMP_MAGIC, payload,
                                    sizeof(payload));
    if (rc == UV_ENOENT || rc == UV_ENOTDIR)
        return 0;
    if (rc != 0)
        return rc;
    int64_t v = (int64_t)tn_get_u64(payload);
    if (v <= 0)
        return TN_ECORRUPT;
    *ms = v;
    return 0;
}

/* The channel stamp file: u32 magic "TNSC", u32 crc32c of the next 8
 * bytes, u64 the record's stamp; little-endian. */
#define CHAN_STAMP_MAGIC 0x43534E54u /* "TNSC" read as a little-endian u32 */

/* dir: the topic's directory; name: the channel's file ending in suffix
 * (its stamp, its pause). */
static int chan_file_path(tn_store_t *store, const char *topic, const char *channel,
                          const char *suffix, char *dir, size_t dirlen, char *name, size_t namelen)
{
    if (!tn_store_valid_name(topic) || !tn_store_valid_name(channel))
        return UV_EINVAL;
    int n = snprintf(dir, dirlen, "%s/%s", store->topics_path, topic);
    int m = snprintf(name, namelen, "%s%s", channel, suffix);
    if (n < 0 || (size_t)n >= dirlen || m < 0 || (size_t)m >= namelen)
        return UV_ENAMETOOLONG;
    return 0;
}

/* Write value (a u64) to the channel's file of suffix as a record file of
 * magic, or remove the file when value is 0 (remove), fsyncing the
 * directory; nothing when the topic has no directory here. *written says
 * whether a record was written. */
static int chan_file_write(tn_store_t *store, const char *topic, const char *channel,
                           const char *suffix, uint32_t magic, uint64_t value, bool remove,
                           bool *written)
{
    if (written != NULL)
        *written = false;
    char dir[4400], name[300], path[4800];
    int rc = chan_file_path(store, topic, channel, suffix, dir, sizeof(dir), name, sizeof(name));
    if (rc != 0)
        return rc;
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 0 : tn_err_from_errno(errno);
    if (remove) {
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        rc = tn_io_unlink(path);
        if (rc == UV_ENOENT)
            return 0;
        return rc != 0 ? rc : tn_io_fsync_dir(dir);
    }
    unsigned char payload[8];
    tn_put_u64(payload, value);
    rc = tn_io_write_record_file(dir, name, magic, payload, sizeof(payload));
    if (rc == 0 && written != NULL)
        *written = true;
    return rc;
}

/* Read the u64 of the channel's file of suffix (*found false when there is
 * none, or no directory). */
static int chan_file_read(tn_store_t *store, const char *topic, const char *channel,
                          const char *suffix, uint32_t magic, uint64_t *value, bool *found)
{
    *found = false;
    *value = 0;
    char dir[4400], name[300];
    int rc = chan_file_path(store, topic, channel, suffix, dir, sizeof(dir), name, sizeof(name));
    if (rc != 0)
        return rc;
    unsigned char payload[8];
    rc = tn_io_read_record_file(dir, name, magic, payload, sizeof(payload));
    if (rc == UV_ENOENT || rc == UV_ENOTDIR)
        return 0;
    if (rc != 0)
        return rc;
    *value = tn_get_u64(payload);
    *found = true;
    return 0;
}

int tn_store_channel_stamp_write(tn_store_t *store, const char *topic, const char *channel,
                                 uint64_t stamp, bool *written)
{
    return chan_file_write(store, topic, channel, TN_STORE_CHAN_STAMP_SUFFIX, CHAN_STAMP_MAGIC,
                           stamp, stamp == 0, written);
}

/* The name of channel's stamp file into name (300 bytes). */
static int chan_stamp_name(const char *channel, char *name)
{
    if (!tn_store_valid_name(channel))
        return UV_EINVAL;
    int n = snprintf(name, 300, "%s%s", channel, TN_STORE_CHAN_STAMP_SUFFIX);
    return n < 0 || n >= 300 ? UV_ENAMETOOLONG : 0;
}

int tn_store_channel_stamp_write_dir(const char *topic_dir, const char *channel, uint64_t stamp)
{
    char name[300];
    if (stamp == 0)
        return UV_EINVAL;
    int rc = chan_stamp_name(channel, name);
    if (rc != 0)
        return rc;
    unsigned char payload[8];
    tn_put_u64(payload, stamp);
    return tn_io_write_record_file(topic_dir, name, CHAN_STAMP_MAGIC, payload, sizeof(payload));
}

int tn_store_channel_stamp_read(tn_store_t *store, const char *topic, const char *channel,
                                uint64_t *stamp)
{
    *stamp = 0;
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char dir[4400];
    int n = snprintf(dir, sizeof(dir), "%s/%s", store->topics_path, topic);
    if (n < 0 || (size_t)n >= sizeof(dir))
        return UV_ENAMETOOLONG;
    return tn_store_channel_stamp_read_dir(dir, channel, stamp);
}

int tn_store_channel_stamp_read_dir(const char *topic_dir, const char *channel, uint64_t *stamp)
{
    *stamp = 0;
    char name[300];
    int rc = chan_stamp_name(channel, name);
    if (rc != 0)
        return rc;
    unsigned char payload[8];
    rc = tn_io_read_record_file(topic_dir, name, CHAN_STAMP_MAGIC, payload, sizeof(payload));
    if (rc == UV_ENOENT || rc == UV_ENOTDIR)
        return 0;
    if (rc != 0)
        return rc;
    uint64_t v = tn_get_u64(payload);
    if (v == 0)
        return TN_ECORRUPT;
    *stamp = v;
    return 0;
}

/* The channel pause file: u32 magic "TNSP", u32 crc32c of the next 8
 * bytes, u64 1 (paused) or 0 (unpaused); little-endian. */
#define CHAN_PAUSE_MAGIC 0x50534E54u /* "TNSP" read as a little-endian u32 */

int tn_store_channel_pause_write(tn_store_t *store, const char *topic, const char *channel,
                                 int paused, bool *written)
{
    if (written != NULL)
        *written = false;
    if (paused < -1 || paused > 1)
        return UV_EINVAL;
    return chan_file_write(store, topic, channel, TN_STORE_CHAN_PAUSE_SUFFIX, CHAN_PAUSE_MAGIC,
                           paused < 0 ? 0 : (uint64_t)paused, paused < 0, written);
}

int tn_store_channel_pause_read(tn_store_t *store, const char *topic, const char *channel,
                                int *paused)
{
    *paused = -1;
    uint64_t v;
    bool found;
    int rc = chan_file_read(store, topic, channel, TN_STORE_CHAN_PAUSE_SUFFIX, CHAN_PAUSE_MAGIC, &v,
                            &found);
    if (rc != 0 || !found)
        return rc;
    if (v > 1)
        return TN_ECORRUPT;
    *paused = (int)v;
    return 0;
}

/* The topic pause file: u32 magic "TNTP", u32 crc32c of the bytes from
 * 8 on, u32 1 (paused) or 0 (unpaused), u32 n, then n u64 hold points,
 * one per partition from 0; little-endian. */
#define TOPIC_PAUSE_MAGIC 0x50544E54u /* "TNTP" read as a little-endian u32 */

int tn_store_topic_pause_write(tn_store_t *store, const char *topic, bool paused,
                               const uint64_t *holds, uint32_t n, bool *written)
{
    if (written != NULL)
        *written = false;
    if (!tn_store_valid_name(topic) || n > TN_STORE_TOPIC_PAUSE_MAX_HOLDS)
        return UV_EINVAL;
    char dir[4400];
    int len = snprintf(dir, sizeof(dir), "%s/%s", store->topics_path, topic);
    if (len < 0 || (size_t)len >= sizeof(dir))
        return UV_ENAMETOOLONG;
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 0 : tn_err_from_errno(errno);
    size_t size = 16 + (size_t)n * 8;
    unsigned char *buf = tn_malloc(size);
    if (buf == NULL)
        return UV_ENOMEM;
    tn_put_u32(buf, TOPIC_PAUSE_MAGIC);
    tn_put_u32(buf + 8, paused ? 1 : 0);
    tn_put_u32(buf + 12, n);
    for (uint32_t i = 0; i < n; i++)
        tn_put_u64(buf + 16 + (size_t)i * 8, holds[i]);
    tn_put_u32(buf + 4, tn_crc32c(0, buf + 8, size - 8));
    int rc = tn_io_write_file_atomic(dir, TN_STORE_TOPIC_PAUSE_FILE, buf, size);
    tn_free(buf);
    if (rc == 0 && written != NULL)
        *written = true;
    return rc;
}

int tn_store_topic_pause_read(tn_store_t *store, const char *topic, int *paused, uint64_t **holds,
                              uint32_t *n)
{
    *paused = -1;
    *holds = NULL;
    *n = 0;
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char path[4400];
    int len = snprintf(path, sizeof(path), "%s/%s/%s", store->topics_path, topic,
                       TN_STORE_TOPIC_PAUSE_FILE);
    if (len < 0 || (size_t)len >= sizeof(path))
        return UV_ENAMETOOLONG;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_io_read_file(path, 16 + (size_t)TN_STORE_TOPIC_PAUSE_MAX_HOLDS * 8, &b);
    if (rc == UV_ENOENT || rc == UV_ENOTDIR) {
        tn_buf_fini(&b);
        return 0;
    }
    if (rc == TN_ETOOBIG)
        rc = TN_ECORRUPT;
    const unsigned char *p = (const unsigned char *)tn_buf_data(&b);
    size_t size = tn_buf_size(&b);
    uint32_t count = rc == 0 && size >= 16 ? tn_get_u32(p + 12) : 0;
    if (rc == 0 && (size < 16 || tn_get_u32(p) != TOPIC_PAUSE_MAGIC ||
                    tn_get_u32(p + 4) != tn_crc32c(0, p + 8, size - 8) || tn_get_u32(p + 8) > 1 ||
                    size != 16 + (size_t)count * 8))
        rc = TN_ECORRUPT;
    uint64_t *h = NULL;
    if (rc == 0 && count > 0 && (h = tn_malloc((size_t)count * sizeof(*h))) == NULL)
        rc = UV_ENOMEM;
    if (rc == 0) {
        for (uint32_t i = 0; i < count; i++)
            h[i] = tn_get_u64(p + 16 + (size_t)i * 8);
        *paused = (int)tn_get_u32(p + 8);
        *holds = h;
        *n = count;
    }
    tn_buf_fini(&b);
    return rc;
}

int tn_store_topic_pause_remove(tn_store_t *store, const char *topic)
{
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char dir[4400], path[4500];
    int len = snprintf(dir, sizeof(dir), "%s/%s", store->topics_path, topic);
    if (len < 0 || (size_t)len >= sizeof(dir))
        return UV_ENAMETOOLONG;
    snprintf(path, sizeof(path), "%s/%s", dir, TN_STORE_TOPIC_PAUSE_FILE);
    int rc = tn_io_unlink(path);
    if (rc == UV_ENOENT || rc == UV_ENOTDIR)
        return 0;
    return rc != 0 ? rc : tn_io_fsync_dir(dir);
}

int tn_store_list_topics(tn_store_t *store, tn_store_topic_cb cb, void *arg)
{
    DIR *d = opendir(store->topics_path);
    if (d == NULL)
        return tn_err_from_errno(errno);
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!tn_store_valid_name(e->d_name))
            continue;
        rc = cb(arg, e->d_name);
    }
    closedir(d);
    return rc;
}

bool tn_store_partition_name(const char *s, uint32_t *p)
{
    if (*s == '\0' || strlen(s) > 10 || (s[0] == '0' && s[1] != '\0'))
        return false;
    uint64_t v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return false;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    if (v > UINT32_MAX)
        return false;
    *p = (uint32_t)v;
    return true;
}

int tn_store_list_partitions(tn_store_t *store, const char *topic, tn_store_partition_cb cb,
                             void *arg)
{
    if (!tn_store_valid_name(topic))
        return UV_EINVAL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", store->topics_path, topic);
    DIR *d = opendir(path);
    if (d == NULL)
        return tn_err_from_errno(errno);
    int rc = 0;
    struct dirent *e;
    uint32_t p;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (tn_store_partition_name(e->d_name, &p))
            rc = cb(arg, topic, p);
    }
    closedir(d);
    return rc;
}

bool tn_store_dir_pause_only(const char *topic_dir)
{
    DIR *d = opendir(topic_dir);
    if (d == NULL)
        return false;
    bool pause = false, part = false;
    struct dirent *e;
    uint32_t p;
    size_t n, sl = strlen(TN_STORE_CHAN_PAUSE_SUFFIX);
    while (!part && (e = readdir(d)) != NULL) {
        n = strlen(e->d_name);
        if (strcmp(e->d_name, TN_STORE_TOPIC_PAUSE_FILE) == 0 ||
            (n > sl && strcmp(e->d_name + n - sl, TN_STORE_CHAN_PAUSE_SUFFIX) == 0))
            pause = true;
        else
            part = tn_store_partition_name(e->d_name, &p);
    }
    closedir(d);
    return pause && !part;
}
