/* Helpers shared by the unit tests. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PORT_LO 20000
#define PORT_HI 32768 /* the ephemeral range starts here */

char *tu_tempdir(void)
{
    const char *tmp = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof(tmpl), "%s/tern-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    char *out = strdup(d);
    assert_non_null(out);
    return out;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_rmrf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Whether port can be bound on 127.0.0.1 with type now. */
static bool port_bindable(int type, int port)
{
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    return rc == 0;
}

/* --- port claims ---------------------------------------------------------
 *
 * The protocol, shared with tests/cluster/harness.py (_claim, _release):
 * $TMPDIR/tern-test-ports/<port> is a claim, holding its claimer's pid;
 * one whose pid is gone is stale, free to take. Every change there (a
 * claim made, a stale file removed, a claim's file removed at its
 * release) is made holding an exclusive flock on the directory's .lock,
 * which nobody removes. So no claimer opens a port file another process
 * is removing, and the race of locks on the files removed themselves (a
 * file unlinked while another process has it open, about to lock it, then
 * holding a lock on a name that no longer exists) cannot arise.
 *
 * A claim lasts until its process exits: then (atexit) its files go, by
 * the process that claimed them only (a forked child's exit leaves its
 * parent's claims alone: their pid is not its own). A process that dies
 * without exiting (SIGKILL, a crash) leaves its files; each process's
 * first claim removes the stale files it finds. */

static char port_dir[4096];
static pid_t port_swept_by;                            /* the process that swept port_dir */
static uint8_t port_mine[(PORT_HI - PORT_LO + 7) / 8]; /* claimed by this process */

/* Take the claims' lock; its fd, to close (the lock with it), or -1.
 * No cmocka asserts: it also runs at exit, outside any test. */
static int ports_lock(void)
{
    if (port_dir[0] == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(port_dir, sizeof(port_dir), "%s/tern-test-ports", tmp && *tmp ? tmp : "/tmp");
    }
    if (mkdir(port_dir, 0755) != 0 && errno != EEXIST)
        return -1;
    char lock[4160];
    snprintf(lock, sizeof(lock), "%s/.lock", port_dir);
    int lfd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (lfd < 0)
        return -1;
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            close(lfd);
            return -1;
        }
    }
    return lfd;
}

/* The pid in the claim file path (0: none written, or not a number); -1
 * when there is no such file. */
static long port_owner(const char *path)
{
    char buf[32] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    return atol(buf);
}

static bool port_mine_has(int port)
{
    return port_mine[(port - PORT_LO) / 8] & (1u << ((port - PORT_LO) % 8));
}

static void port_mine_set(int port, bool mine)
{
    uint8_t *byte = &port_mine[(port - PORT_LO) / 8];
    uint8_t bit = (uint8_t)(1u << ((port - PORT_LO) % 8));
    *byte = mine ? (uint8_t)(*byte | bit) : (uint8_t)(*byte & ~bit);
}

static bool pid_alive(long pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* Remove the stale claims (the lock held). */
static void ports_sweep(void)
{
    DIR *d = opendir(port_dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '\0' || strspn(e->d_name, "0123456789") != strlen(e->d_name))
            continue;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", port_dir, e->d_name);
        long pid = port_owner(path);
        if (pid >= 0 && !pid_alive(pid))
            unlink(path);
    }
    closedir(d);
}

/* Remove this process's claims (atexit). */
static void ports_release_all(void)
{
    int lfd = ports_lock();
    if (lfd < 0)
        return;
    for (int p = PORT_LO; p < PORT_HI; p++) {
        if (port_mine_has(p)) {
            char path[4200];
            snprintf(path, sizeof(path), "%s/%d", port_dir, p);
            if (port_owner(path) == (long)getpid())
                unlink(path);
        }
    }
    close(lfd);
}

/* Claim port (the lock held): its file made with this pid, or taken over
 * from a pid that is gone. False when a live process (this one included:
 * handed out before) holds it. */
static bool port_claim(int port)
{
    if (port_swept_by != getpid()) {
        ports_sweep();
        if (port_swept_by == 0)
            atexit(ports_release_all); /* inherited by a forked child */
        port_swept_by = getpid();
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/%d", port_dir, port);
    for (int i = 0; i < 2; i++) {
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0) {
            char pid[32];
            int n = snprintf(pid, sizeof(pid), "%ld", (long)getpid());
            bool ok = write(fd, pid, (size_t)n) == n;
            close(fd);
            assert_true(ok);
            port_mine_set(port, true);
            return true;
        }
        assert_int_equal(errno, EEXIST);
        if (pid_alive(port_owner(path)))
            return false; /* a live owner */
        unlink(path);     /* its owner is gone (or it never wrote one) */
    }
    return false;
}

bool tu_port_claim(int port)
{
    assert_true(port >= PORT_LO && port < PORT_HI);
    int lfd = ports_lock();
    assert_true(lfd >= 0);
    bool ok = port_claim(port);
    close(lfd);
    return ok;
}

void tu_port_release(int port)
{
    assert_true(port >= PORT_LO && port < PORT_HI);
    int lfd = ports_lock();
    assert_true(lfd >= 0);
    char path[4200];
    snprintf(path, sizeof(path), "%s/%d", port_dir, port);
    if (port_owner(path) == (long)getpid())
        unlink(path);
    port_mine_set(port, false);
    close(lfd);
}

int tu_free_port(bool udp_too)
{
    int lfd = ports_lock();
    assert_true(lfd >= 0);
    /* From a start that differs per process, so processes do not all
     * probe the same ports first. */
    unsigned span = PORT_HI - PORT_LO;
    unsigned start = ((unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL)) % span;
    int port = 0;
    for (unsigned k = 0; k < span && port == 0; k++) {
        int p = PORT_LO + (int)((start + k) % span);
        if (port_bindable(SOCK_STREAM, p) && (!udp_too || port_bindable(SOCK_DGRAM, p)) &&
            port_claim(p))
            port = p;
    }
    close(lfd); /* the lock with it */
    if (port == 0)
        fail_msg("no free port in [%d, %d) that no live test process holds (%s)", PORT_LO, PORT_HI,
                 port_dir);
    return port;
}

void tu_store_opts(tn_store_opts_t *o, const char *path)
{
    memset(o, 0, sizeof(*o));
    o->data_path = path;
    o->segment_bytes = 64 * 1024;
    o->index_interval = 256;
    o->max_body = 1024 * 1024;
    o->durability = TN_DURABILITY_DURABLE;
    o->commit_max_requests = 64;
    o->commit_max_bytes = 8 * 1024 * 1024;
    o->commit_max_delay_ns = 1000000;
    o->relaxed_sync_messages = 2500;
    o->relaxed_sync_bytes = 8 * 1024 * 1024;
    o->relaxed_sync_interval_ns = 10 * 1000000;
    o->wal_max_records = 1024;
    o->wal_max_delay_ns = 1000000;
    o->checkpoint_every = 8192;
    o->disk_high_pct = 100;
    o->disk_low_pct = 99;
    o->disk_min_free = 0;
    o->disk_check_interval_ns = 1000000000;
}

tn_store_t *tu_store_open(uv_loop_t *loop, const tn_store_opts_t *o)
{
    tn_store_t *store = NULL;
    char err[512] = "";
    int rc = tn_store_open(loop, o, &store, err, sizeof(err));
    if (rc != 0)
        fail_msg("tn_store_open: %s: %s", tn_strerror(rc), err);
    return store;
}

static void on_store_closed(tn_store_t *store)
{
    *(bool *)store->loop->data = true;
}

void tu_store_close(uv_loop_t *loop, tn_store_t *store)
{
    bool done = false;
    loop->data = &done;
    tn_store_close(store, on_store_closed);
    while (!done)
        uv_run(loop, UV_RUN_ONCE);
    loop->data = NULL;
}

static void on_plog_closed(tn_plog_t *plog)
{
    *(bool *)plog->store->loop->data = true;
}

void tu_plog_close(uv_loop_t *loop, tn_plog_t *plog)
{
    bool done = false;
    loop->data = &done;
    tn_plog_close(plog, on_plog_closed);
    while (!done)
        uv_run(loop, UV_RUN_ONCE);
    loop->data = NULL;
}

void tu_loop_fini(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(loop), 0);
}

typedef struct {
    bool done;
    int status;
} wait_t;

static void on_append(tn_append_t *req, int status)
{
    wait_t *w = req->data;
    w->done = true;
    w->status = status;
}

int tu_append_batch(uv_loop_t *loop, tn_plog_t *plog, const tn_rec_in_t *recs, uint32_t n,
                    uint64_t *first)
{
    tn_append_t req;
    wait_t w = {false, 0};
    req.data = &w;
    int rc = tn_plog_append(plog, &req, recs, n, on_append);
    if (rc != 0)
        return rc;
    while (!w.done)
        uv_run(loop, UV_RUN_ONCE);
    if (first != NULL)
        *first = req.first_offset;
    return w.status;
}

int tu_append(uv_loop_t *loop, tn_plog_t *plog, const void *body, size_t len, uint64_t *offset)
{
    tn_rec_in_t rec = {{NULL, 0}, tn_iov(body, len), 0};
    return tu_append_batch(loop, plog, &rec, 1, offset);
}

void tu_expect_body(tn_plog_t *plog, uint64_t offset, const void *body, size_t len)
{
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    tn_rec_t rec;
    int rc = tn_plog_read(plog, offset, &scratch, &rec);
    if (rc != 0)
        fail_msg("read offset %llu: %s", (unsigned long long)offset, tn_strerror(rc));
    assert_int_equal(rec.h.offset, offset);
    assert_int_equal(rec.h.body_len, len);
    assert_memory_equal(rec.body, body, len);
    tn_buf_fini(&scratch);
}

size_t tu_body(uint64_t n, char *buf, size_t len)
{
    int k = snprintf(buf, len, "msg-%llu-", (unsigned long long)n);
    size_t total = (size_t)k + (size_t)(n * 7 % 300);
    if (total > len)
        total = len;
    for (size_t i = (size_t)k; i < total; i++)
        buf[i] = (char)('a' + (n + i) % 26);
    return total;
}

long tu_file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    return (long)st.st_size;
}

void tu_patch_file(const char *path, long pos, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, data, len, pos), (ssize_t)len);
    close(fd);
}

void tu_truncate_file(const char *path, long len)
{
    assert_int_equal(truncate(path, len), 0);
}

tu_fx_t *tu_fx_new(void (*tweak)(tn_store_opts_t *o))
{
    tu_fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    fx->dir = tu_tempdir();
    tu_store_opts(&fx->opts, fx->dir);
    if (tweak != NULL)
        tweak(&fx->opts);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
    return fx;
}

void tu_fx_free(tu_fx_t *fx)
{
    if (fx->store != NULL)
        tu_store_close(&fx->loop, fx->store);
    tu_loop_fini(&fx->loop);
    tu_rmrf(fx->dir);
    free(fx->dir);
    free(fx);
}

void tu_fx_reopen(tu_fx_t *fx)
{
    if (fx->store != NULL)
        tu_store_close(&fx->loop, fx->store);
    fx->store = tu_store_open(&fx->loop, &fx->opts);
}
