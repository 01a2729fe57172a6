/* The storage I/O shim: syscalls with tern's error convention, and under
 * TN_TEST the power-loss simulator described in io.h.
 *
 * Simulator model. Each tracked file has a durable content (what survives a
 * power cut for sure) and a list of pending operations (writes and
 * truncates since its last fdatasync). Namespaces are tracked twice: the
 * volatile one (what the running process sees, mirrored by the real file
 * system) and the durable one (what a power cut keeps), with the pending
 * namespace changes per directory in between. fdatasync/fsync of a file
 * folds its pending operations into its durable content; fsync of a
 * directory folds that directory's pending namespace changes into the
 * durable namespace. */
#include "core/platform.h"

#include "storage/io.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/crc32c.h"
#include "core/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#ifdef __linux__
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#endif

#ifdef TN_TEST
static atomic_long fail_write_countdown = -1;
static atomic_int fail_write_err;
static atomic_size_t fail_write_keep; /* bytes the failing write writes first */
static atomic_long fail_sync_countdown = -1;
static atomic_int fail_sync_err;
static atomic_long fail_create_countdown = -1;
static atomic_int fail_create_err;
static atomic_llong sync_delay_ns;

static int injected(atomic_long *countdown, atomic_int *err)
{
    long n = atomic_load(countdown);
    while (n >= 0) {
        if (atomic_compare_exchange_weak(countdown, &n, n - 1)) {
            if (n == 0)
                return atomic_load(err);
            return 0;
        }
    }
    return 0;
}

void tn_io_fail_write_after(long n, int err)
{
    tn_io_fail_write_partial(n, err, 0);
}

void tn_io_fail_write_partial(long n, int err, size_t keep)
{
    atomic_store(&fail_write_err, err);
    atomic_store(&fail_write_keep, keep);
    atomic_store(&fail_write_countdown, n);
}

/* The first keep bytes of iov written at off (the injected failure's
 * short write); the injection has fired, so this write goes through. */
static void write_prefix(int fd, const tn_iov_t *iov, int iovcnt, uint64_t off, size_t keep)
{
    tn_iov_t *v = malloc((size_t)iovcnt * sizeof(*v));
    if (v == NULL)
        abort();
    int n = 0;
    for (; n < iovcnt && keep > 0; n++) {
        v[n] = iov[n];
        if (v[n].len > keep)
            v[n].len = keep;
        keep -= v[n].len;
    }
    (void)tn_io_pwritev(fd, v, n, off);
    free(v);
}

void tn_io_fail_sync_after(long n, int err)
{
    atomic_store(&fail_sync_err, err);
    atomic_store(&fail_sync_countdown, n);
}

void tn_io_fail_create_after(long n, int err)
{
    atomic_store(&fail_create_err, err);
    atomic_store(&fail_create_countdown, n);
}

void tn_io_delay_sync(int64_t ns)
{
    atomic_store(&sync_delay_ns, ns);
}

/* --- simulator state ----------------------------------------------------- */

enum { P_WRITE, P_TRUNC };
typedef struct {
    int kind;
    uint64_t off; /* write position, or new length for P_TRUNC */
    size_t len;
    unsigned char *data;
} pend_t;

typedef struct {
    unsigned char *data; /* durable content */
    size_t len;
    pend_t *pend;
    size_t npend;
    size_t cap;
} sfile_t;

typedef struct {
    char *path;
    int id;
} nent_t;

enum { D_CREATE, D_RENAME, D_UNLINK, D_MKDIR };
typedef struct {
    int kind;
    char *dir;
    char *a;
    char *b;
    int id;
} dirop_t;

typedef struct {
    nent_t *v;
    size_t n;
    size_t cap;
} nspace_t;

#define SIM_MAX_FD 65536

static struct {
    bool active;
    bool cut;
    long countdown;
    long ops;
    char *root;
    sfile_t *files;
    size_t nfiles;
    size_t files_cap;
    nspace_t vol;   /* volatile path -> file */
    nspace_t dur;   /* durable path -> file */
    nspace_t ddirs; /* durable directories (id unused) */
    dirop_t *dops;
    size_t ndops;
    size_t dops_cap;
    int fdmap[SIM_MAX_FD];
} sim;
static uv_mutex_t sim_lock;
/* Mirrors sim.active for the lock-free fast path of untracked calls. */
static atomic_bool sim_active;
static uv_once_t sim_once = UV_ONCE_INIT;

static void sim_init_lock(void)
{
    uv_mutex_init(&sim_lock);
}

static void *xgrow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (q == NULL)
        abort(); /* test-only code: out of memory is fatal here */
    *cap = c;
    return q;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (p == NULL)
        abort();
    return p;
}

/* Canonical form: no "./" prefix, no doubled or trailing slashes. */
static void canon(const char *in, char *out, size_t outlen)
{
    size_t o = 0;
    while (in[0] == '.' && in[1] == '/')
        in += 2;
    for (size_t i = 0; in[i] != '\0' && o + 1 < outlen; i++) {
        if (in[i] == '/' && o > 0 && out[o - 1] == '/')
            continue;
        out[o++] = in[i];
    }
    while (o > 1 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
}

static void dirname_of(const char *path, char *out, size_t outlen)
{
    const char *s = strrchr(path, '/');
    if (s == NULL) {
        snprintf(out, outlen, ".");
        return;
    }
    size_t n = (size_t)(s - path);
    if (n == 0)
        n = 1;
    snprintf(out, outlen, "%.*s", (int)n, path);
}

static bool under_root(const char *path)
{
    size_t n = strlen(sim.root);
    return strncmp(path, sim.root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static nent_t *ns_find(nspace_t *ns, const char *path)
{
    for (size_t i = 0; i < ns->n; i++) {
        if (strcmp(ns->v[i].path, path) == 0)
            return &ns->v[i];
    }
    return NULL;
}

static void ns_set(nspace_t *ns, const char *path, int id)
{
    nent_t *e = ns_find(ns, path);
    if (e != NULL) {
        e->id = id;
        return;
    }
    ns->v = xgrow(ns->v, &ns->cap, ns->n + 1, sizeof(*ns->v));
    ns->v[ns->n].path = xstrdup(path);
    ns->v[ns->n].id = id;
    ns->n++;
}

static void ns_del(nspace_t *ns, const char *path)
{
    for (size_t i = 0; i < ns->n; i++) {
        if (strcmp(ns->v[i].path, path) == 0) {
            free(ns->v[i].path);
            ns->v[i] = ns->v[--ns->n];
            return;
        }
    }
}

static void ns_free(nspace_t *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free(ns->v[i].path);
    free(ns->v);
    memset(ns, 0, sizeof(*ns));
}

static void ns_copy(nspace_t *dst, const nspace_t *src)
{
    memset(dst, 0, sizeof(*dst));
    for (size_t i = 0; i < src->n; i++)
        ns_set(dst, src->v[i].path, src->v[i].id);
}

static int new_file(const unsigned char *data, size_t len)
{
    sim.files = xgrow(sim.files, &sim.files_cap, sim.nfiles + 1, sizeof(*sim.files));
    sfile_t *f = &sim.files[sim.nfiles];
    memset(f, 0, sizeof(*f));
    if (len > 0) {
        f->data = malloc(len);
        if (f->data == NULL)
            abort();
        memcpy(f->data, data, len);
    }
    f->len = len;
    return (int)sim.nfiles++;
}

static void add_dirop(int kind, const char *path, const char *b, int id)
{
    char dir[4096];
    dirname_of(path, dir, sizeof(dir));
    sim.dops = xgrow(sim.dops, &sim.dops_cap, sim.ndops + 1, sizeof(*sim.dops));
    dirop_t *d = &sim.dops[sim.ndops++];
    d->kind = kind;
    d->dir = xstrdup(dir);
    d->a = xstrdup(path);
    d->b = b ? xstrdup(b) : NULL;
    d->id = id;
}

static void apply_dirop(nspace_t *ns, nspace_t *dirs, const dirop_t *d)
{
    switch (d->kind) {
    case D_CREATE:
        ns_set(ns, d->a, d->id);
        break;
    case D_RENAME: {
        nent_t *e = ns_find(ns, d->a);
        if (e != NULL) {
            int id = e->id;
            ns_del(ns, d->a);
            ns_set(ns, d->b, id);
        }
        break;
    }
    case D_UNLINK:
        ns_del(ns, d->a);
        break;
    case D_MKDIR:
        ns_set(dirs, d->a, -1);
        break;
    }
}

static void free_dirop(dirop_t *d)
{
    free(d->dir);
    free(d->a);
    free(d->b);
}

static void content_set_len(unsigned char **data, size_t *len, size_t n)
{
    if (n > *len) {
        unsigned char *p = realloc(*data, n);
        if (p == NULL)
            abort();
        memset(p + *len, 0, n - *len);
        *data = p;
    }
    *len = n;
}

static void apply_pend(unsigned char **data, size_t *len, const pend_t *p, const bool *keep)
{
    if (p->kind == P_TRUNC) {
        content_set_len(data, len, p->off);
        return;
    }
    size_t end = (size_t)p->off + p->len;
    if (end > *len)
        content_set_len(data, len, end);
    if (keep == NULL) {
        memcpy(*data + p->off, p->data, p->len);
        return;
    }
    /* Torn: copy only the kept 512-byte sectors (by absolute position). */
    for (size_t i = 0; i < p->len;) {
        size_t pos = (size_t)p->off + i;
        size_t sec_end = (pos / 512 + 1) * 512;
        size_t n = TN_MIN(sec_end - pos, p->len - i);
        if (keep[pos / 512 - p->off / 512])
            memcpy(*data + pos, p->data + i, n);
        i += n;
    }
}

/* Called with sim_lock held: counts a mutating operation and reports
 * whether the power is (now) off. */
static bool sim_tick(void)
{
    if (sim.cut)
        return true;
    sim.ops++;
    if (sim.countdown >= 0) {
        if (sim.countdown == 0) {
            sim.cut = true;
            return true;
        }
        sim.countdown--;
    }
    return false;
}

static void snapshot_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            ns_set(&sim.ddirs, path, -1);
            snapshot_dir(path);
        } else if (S_ISREG(st.st_mode)) {
            FILE *f = fopen(path, "rb");
            unsigned char *buf = malloc((size_t)st.st_size + 1);
            if (f == NULL || buf == NULL)
                abort();
            size_t n = fread(buf, 1, (size_t)st.st_size, f);
            fclose(f);
            int id = new_file(buf, n);
            free(buf);
            ns_set(&sim.vol, path, id);
            ns_set(&sim.dur, path, id);
        }
    }
    closedir(d);
}

int tn_io_sim_start(const char *root)
{
    uv_once(&sim_once, sim_init_lock);
    uv_mutex_lock(&sim_lock);
    char c[4096];
    canon(root, c, sizeof(c));
    memset(&sim, 0, sizeof(sim));
    for (int i = 0; i < SIM_MAX_FD; i++)
        sim.fdmap[i] = -1;
    sim.root = xstrdup(c);
    sim.countdown = -1;
    ns_set(&sim.ddirs, sim.root, -1);
    snapshot_dir(sim.root);
    sim.active = true;
    atomic_store(&sim_active, true);
    uv_mutex_unlock(&sim_lock);
    return 0;
}

void tn_io_sim_cut_after(long n)
{
    uv_mutex_lock(&sim_lock);
    sim.countdown = n;
    uv_mutex_unlock(&sim_lock);
}

void tn_io_sim_cut(void)
{
    uv_mutex_lock(&sim_lock);
    sim.cut = true;
    uv_mutex_unlock(&sim_lock);
}

bool tn_io_sim_is_cut(void)
{
    uv_once(&sim_once, sim_init_lock);
    uv_mutex_lock(&sim_lock);
    bool c = sim.active && sim.cut;
    uv_mutex_unlock(&sim_lock);
    return c;
}

long tn_io_sim_ops(void)
{
    uv_mutex_lock(&sim_lock);
    long n = sim.ops;
    uv_mutex_unlock(&sim_lock);
    return n;
}

static void sim_free_all(void)
{
    for (size_t i = 0; i < sim.nfiles; i++) {
        free(sim.files[i].data);
        for (size_t k = 0; k < sim.files[i].npend; k++)
            free(sim.files[i].pend[k].data);
        free(sim.files[i].pend);
    }
    free(sim.files);
    for (size_t i = 0; i < sim.ndops; i++)
        free_dirop(&sim.dops[i]);
    free(sim.dops);
    ns_free(&sim.vol);
    ns_free(&sim.dur);
    ns_free(&sim.ddirs);
    free(sim.root);
    memset(&sim, 0, sizeof(sim));
    atomic_store(&sim_active, false);
}

void tn_io_sim_stop(void)
{
    uv_once(&sim_once, sim_init_lock);
    uv_mutex_lock(&sim_lock);
    if (sim.active)
        sim_free_all();
    uv_mutex_unlock(&sim_lock);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static int cmp_len(const void *a, const void *b)
{
    size_t la = strlen(((const nent_t *)a)->path), lb = strlen(((const nent_t *)b)->path);
    return la < lb ? -1 : la > lb;
}

int tn_io_sim_powerloss(uint64_t seed)
{
    uv_mutex_lock(&sim_lock);
    if (!sim.active) {
        uv_mutex_unlock(&sim_lock);
        return UV_EINVAL;
    }
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    nspace_t ns, dirs;
    ns_copy(&ns, &sim.dur);
    ns_copy(&dirs, &sim.ddirs);

    /* Each directory keeps a random prefix of its pending namespace
     * changes, as a journaling file system commits them in order. */
    bool *done = calloc(sim.ndops + 1, 1);
    if (done == NULL)
        abort();
    for (size_t i = 0; i < sim.ndops; i++) {
        if (done[i])
            continue;
        size_t count = 0;
        for (size_t k = i; k < sim.ndops; k++)
            count += strcmp(sim.dops[k].dir, sim.dops[i].dir) == 0;
        size_t keep = (size_t)(rng_next(&rng) % (count + 1));
        const char *dir = sim.dops[i].dir;
        for (size_t k = i, seen = 0; k < sim.ndops; k++) {
            if (done[k] || strcmp(sim.dops[k].dir, dir) != 0)
                continue;
            done[k] = true;
            if (seen++ < keep)
                apply_dirop(&ns, &dirs, &sim.dops[k]);
        }
    }
    free(done);

    int rc = tn_io_remove_children(sim.root);
    if (dirs.n > 1)
        qsort(dirs.v, dirs.n, sizeof(*dirs.v), cmp_len);
    for (size_t i = 0; i < dirs.n; i++) {
        if (strcmp(dirs.v[i].path, sim.root) == 0)
            continue;
        char parent[4096];
        dirname_of(dirs.v[i].path, parent, sizeof(parent));
        if (ns_find(&dirs, parent) == NULL && strcmp(parent, sim.root) != 0)
            continue; /* its parent's entry was lost */
        if (mkdir(dirs.v[i].path, 0755) != 0 && errno != EEXIST)
            rc = tn_err_from_errno(errno);
    }
    for (size_t i = 0; i < ns.n; i++) {
        char parent[4096];
        dirname_of(ns.v[i].path, parent, sizeof(parent));
        struct stat st;
        if (stat(parent, &st) != 0)
            continue; /* directory lost with the power */
        sfile_t *f = &sim.files[ns.v[i].id];
        unsigned char *data = NULL;
        size_t len = 0;
        content_set_len(&data, &len, f->len);
        if (f->len > 0)
            memcpy(data, f->data, f->len);
        for (size_t k = 0; k < f->npend; k++) {
            pend_t *p = &f->pend[k];
            unsigned r = (unsigned)(rng_next(&rng) % 10);
            if (p->kind == P_TRUNC) {
                if (r < 5)
                    apply_pend(&data, &len, p, NULL);
            } else if (r < 4) {
                apply_pend(&data, &len, p, NULL);
            } else if (r < 7) {
                /* Dropped; sometimes the size grew without the data. */
                if (p->off + p->len > len && rng_next(&rng) % 2 == 0)
                    content_set_len(&data, &len, (size_t)p->off + p->len);
            } else {
                size_t nsec = (size_t)((p->off + p->len + 511) / 512 - p->off / 512);
                bool *keep = malloc(nsec + 1);
                if (keep == NULL)
                    abort();
                for (size_t s = 0; s < nsec; s++)
                    keep[s] = rng_next(&rng) % 2 == 0;
                apply_pend(&data, &len, p, keep);
                free(keep);
            }
        }
        FILE *out = fopen(ns.v[i].path, "wb");
        if (out == NULL) {
            rc = tn_err_from_errno(errno);
        } else {
            if (len > 0 && fwrite(data, 1, len, out) != len)
                rc = UV_EIO;
            fclose(out);
        }
        free(data);
    }
    ns_free(&ns);
    ns_free(&dirs);
    sim_free_all();
    uv_mutex_unlock(&sim_lock);
    return rc;
}

#define SIM_ACTIVE() atomic_load_explicit(&sim_active, memory_order_acquire)
#else
#define SIM_ACTIVE() false
#endif

/* --- real operations ----------------------------------------------------- */

int tn_io_path(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len)
        return UV_ENAMETOOLONG;
    return 0;
}

int tn_io_open(const char *path, int flags, int mode, int *fd_out)
{
#ifdef TN_TEST
    if (flags & O_CREAT) {
        int inj = injected(&fail_create_countdown, &fail_create_err);
        if (inj != 0)
            return inj;
    }
    uv_once(&sim_once, sim_init_lock);
    if (SIM_ACTIVE()) {
        uv_mutex_lock(&sim_lock);
        char c[4096];
        canon(path, c, sizeof(c));
        bool tracked = sim.active && under_root(c);
        if (tracked && (sim.cut || ((flags & (O_CREAT | O_TRUNC)) && sim_tick()))) {
            uv_mutex_unlock(&sim_lock);
            return UV_EIO;
        }
        int fd;
        do {
            fd = open(path, flags | O_CLOEXEC, mode);
        } while (fd < 0 && errno == EINTR);
        if (fd < 0) {
            int e = errno;
            uv_mutex_unlock(&sim_lock);
            return tn_err_from_errno(e);
        }
        if (tracked && fd < SIM_MAX_FD) {
            nent_t *e = ns_find(&sim.vol, c);
            int id;
            if (e == NULL) {
                id = new_file(NULL, 0);
                ns_set(&sim.vol, c, id);
                add_dirop(D_CREATE, c, NULL, id);
            } else {
                id = e->id;
            }
            if (flags & O_TRUNC) {
                sfile_t *f = &sim.files[id];
                f->pend = xgrow(f->pend, &f->cap, f->npend + 1, sizeof(*f->pend));
                f->pend[f->npend++] = (pend_t){P_TRUNC, 0, 0, NULL};
            }
            sim.fdmap[fd] = id;
        }
        uv_mutex_unlock(&sim_lock);
        *fd_out = fd;
        return 0;
    }
#endif
    int fd;
    do {
        fd = open(path, flags | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return tn_err_from_errno(errno);
    *fd_out = fd;
    return 0;
}

int tn_io_close(int fd)
{
#ifdef TN_TEST
    if (SIM_ACTIVE() && fd >= 0 && fd < SIM_MAX_FD) {
        uv_mutex_lock(&sim_lock);
        sim.fdmap[fd] = -1;
        uv_mutex_unlock(&sim_lock);
    }
#endif
    if (close(fd) != 0 && errno != EINTR)
        return tn_err_from_errno(errno);
    return 0;
}

#ifdef TN_TEST
/* The simulated file behind fd, counting one mutating operation. Returns
 * with sim_lock held when *f is set; UV_EIO when the power is off (lock
 * released); 0 with *f NULL when fd is not tracked (lock released). */
static int sim_file_op(int fd, sfile_t **f)
{
    *f = NULL;
    if (!SIM_ACTIVE() || fd < 0 || fd >= SIM_MAX_FD)
        return 0;
    uv_mutex_lock(&sim_lock);
    int id = sim.active ? sim.fdmap[fd] : -1;
    if (id < 0) {
        uv_mutex_unlock(&sim_lock);
        return 0;
    }
    if (sim_tick()) {
        uv_mutex_unlock(&sim_lock);
        return UV_EIO;
    }
    *f = &sim.files[id];
    return 0;
}

/* Record a write in the simulator; returns UV_EIO when the power is off. */
static int sim_write(int fd, const tn_iov_t *iov, int iovcnt, uint64_t off)
{
    sfile_t *f;
    int rc = sim_file_op(fd, &f);
    if (f == NULL)
        return rc;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].len;
    f->pend = xgrow(f->pend, &f->cap, f->npend + 1, sizeof(*f->pend));
    pend_t *p = &f->pend[f->npend++];
    p->kind = P_WRITE;
    p->off = off;
    p->len = total;
    p->data = malloc(total + 1);
    if (p->data == NULL)
        abort();
    size_t o = 0;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(p->data + o, iov[i].base, iov[i].len);
        o += iov[i].len;
    }
    uv_mutex_unlock(&sim_lock);
    return 0;
}

static int sim_truncate(int fd, uint64_t len)
{
    sfile_t *f;
    int rc = sim_file_op(fd, &f);
    if (f == NULL)
        return rc;
    f->pend = xgrow(f->pend, &f->cap, f->npend + 1, sizeof(*f->pend));
    f->pend[f->npend++] = (pend_t){P_TRUNC, len, 0, NULL};
    uv_mutex_unlock(&sim_lock);
    return 0;
}

static int sim_sync(int fd)
{
    sfile_t *f;
    int rc = sim_file_op(fd, &f);
    if (f == NULL)
        return rc;
    for (size_t k = 0; k < f->npend; k++) {
        apply_pend(&f->data, &f->len, &f->pend[k], NULL);
        free(f->pend[k].data);
    }
    f->npend = 0;
    uv_mutex_unlock(&sim_lock);
    return 0;
}

static int sim_dirop(int kind, const char *a, const char *b)
{
    if (!SIM_ACTIVE())
        return 0;
    uv_mutex_lock(&sim_lock);
    char ca[4096], cb[4096];
    canon(a, ca, sizeof(ca));
    if (b != NULL)
        canon(b, cb, sizeof(cb));
    int rc = 0;
    if (sim.active && under_root(ca)) {
        if (sim_tick()) {
            rc = UV_EIO;
        } else if (kind == D_RENAME) {
            nent_t *e = ns_find(&sim.vol, ca);
            if (e != NULL) {
                int id = e->id;
                ns_del(&sim.vol, ca);
                ns_set(&sim.vol, cb, id);
            }
            add_dirop(D_RENAME, ca, cb, -1);
        } else if (kind == D_UNLINK) {
            ns_del(&sim.vol, ca);
            add_dirop(D_UNLINK, ca, NULL, -1);
        } else {
            add_dirop(D_MKDIR, ca, NULL, -1);
        }
    }
    uv_mutex_unlock(&sim_lock);
    return rc;
}

static int sim_sync_dir(const char *path)
{
    if (!SIM_ACTIVE())
        return 0;
    uv_mutex_lock(&sim_lock);
    char c[4096];
    canon(path, c, sizeof(c));
    int rc = 0;
    if (sim.active && under_root(c)) {
        if (sim_tick()) {
            rc = UV_EIO;
        } else {
            size_t w = 0;
            for (size_t i = 0; i < sim.ndops; i++) {
                if (strcmp(sim.dops[i].dir, c) == 0) {
                    apply_dirop(&sim.dur, &sim.ddirs, &sim.dops[i]);
                    free_dirop(&sim.dops[i]);
                } else {
                    sim.dops[w++] = sim.dops[i];
                }
            }
            sim.ndops = w;
        }
    }
    uv_mutex_unlock(&sim_lock);
    return rc;
}
#else
#define sim_write(fd, iov, n, off) 0
#define sim_truncate(fd, len)      0
#define sim_sync(fd)               0
#define sim_dirop(k, a, b)         0
#define sim_sync_dir(p)            0
#endif

int tn_io_pwritev(int fd, const tn_iov_t *iov, int iovcnt, uint64_t off)
{
#ifdef TN_TEST
    int inj = injected(&fail_write_countdown, &fail_write_err);
    if (inj != 0) {
        size_t keep = atomic_exchange(&fail_write_keep, 0);
        if (keep > 0)
            write_prefix(fd, iov, iovcnt, off, keep);
        return inj;
    }
#endif
    int rc = sim_write(fd, iov, iovcnt, off);
    if (rc != 0)
        return rc;
    /* Up to IOV_MAX vectors per call, straight from the caller's array
     * (tn_iov_t is laid out as struct iovec); a short write carries the
     * rest of its chunk over in a local copy that is adjusted in place. */
    enum { CHUNK = 1024 };
    while (iovcnt > 0) {
        int n = TN_MIN(iovcnt, CHUNK);
        const struct iovec *v = (const struct iovec *)iov;
        struct iovec *copy = NULL;
        int left = n;
        while (left > 0) {
            ssize_t w = pwritev(fd, v, left, (off_t)off);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                tn_free(copy);
                return tn_err_from_errno(errno);
            }
            off += (uint64_t)w;
            while (left > 0 && (size_t)w >= v->iov_len) {
                w -= (ssize_t)v->iov_len;
                v++;
                left--;
            }
            if (left > 0) {
                if (copy == NULL) {
                    copy = tn_malloc((size_t)left * sizeof(*copy));
                    if (copy == NULL)
                        return UV_ENOMEM;
                    memcpy(copy, v, (size_t)left * sizeof(*copy));
                    v = copy;
                }
                struct iovec *m = copy + (v - copy); /* v points into copy now */
                m->iov_base = (char *)m->iov_base + w;
                m->iov_len -= (size_t)w;
            }
        }
        tn_free(copy);
        iov += n;
        iovcnt -= n;
    }
    return 0;
}

#define ZERO_CHUNK (64 * 1024)
static const unsigned char zeros[ZERO_CHUNK];

int tn_io_write_zeros(int fd, uint64_t from, uint64_t to)
{
    int rc = 0;
    while (from < to && rc == 0) {
        tn_iov_t iov[16];
        int n = 0;
        uint64_t p = from;
        do {
            size_t len = (size_t)TN_MIN(to - p, (uint64_t)ZERO_CHUNK);
            iov[n++] = tn_iov((void *)zeros, len);
            p += len;
        } while (p < to && n < (int)TN_ARRAY_SIZE(iov));
        rc = tn_io_pwritev(fd, iov, n, from);
        from = p;
    }
    return rc;
}

int tn_io_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
    tn_iov_t v = tn_iov(buf, len);
    return tn_io_pwritev(fd, &v, 1, off);
}

int tn_io_pread(int fd, void *buf, size_t len, uint64_t off, size_t *nread)
{
#ifdef TN_TEST
    if (SIM_ACTIVE() && tn_io_sim_is_cut())
        return UV_EIO;
#endif
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return tn_err_from_errno(errno);
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *nread = done;
    return 0;
}

static int sync_fd(int fd, bool data_only)
{
#ifdef TN_TEST
    int64_t delay = atomic_load(&sync_delay_ns);
    if (delay > 0) {
        struct timespec ts = {(time_t)(delay / 1000000000), (long)(delay % 1000000000)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    int inj = injected(&fail_sync_countdown, &fail_sync_err);
    if (inj != 0)
        return inj;
#endif
    int rc = sim_sync(fd);
    if (rc != 0)
        return rc;
    if ((data_only ? fdatasync(fd) : fsync(fd)) != 0)
        return tn_err_from_errno(errno);
    return 0;
}

int tn_io_fdatasync(int fd)
{
    return sync_fd(fd, true);
}

int tn_io_fsync(int fd)
{
    return sync_fd(fd, false);
}

/* Whether the test hooks want every sync to go through sync_fd. */
static bool syncs_hooked(void)
{
#ifdef TN_TEST
    return SIM_ACTIVE() || atomic_load(&sync_delay_ns) > 0 ||
           atomic_load(&fail_sync_countdown) >= 0;
#else
    return false;
#endif
}

#ifdef __linux__
/* Submit fds[0..n) as IOCB_CMD_FDSYNC and reap them. Every rcs[i] is set
 * (what AIO did not run is run here, one after the other), except when
 * this kernel or file system has no AIO fsync: then s->off is set and
 * nothing was done. */
static void aio_syncs(tn_io_syncs_t *s, const int *fds, int *rcs, size_t n)
{
    if (s->ctx == 0) {
        aio_context_t ctx = 0;
        if (syscall(SYS_io_setup, TN_IO_SYNCS_MAX, &ctx) != 0) {
            s->off = true;
            return;
        }
        s->ctx = (unsigned long)ctx;
    }
    struct iocb cbs[TN_IO_SYNCS_MAX];
    struct iocb *ptrs[TN_IO_SYNCS_MAX];
    bool reaped[TN_IO_SYNCS_MAX];
    memset(cbs, 0, n * sizeof(cbs[0]));
    for (size_t i = 0; i < n; i++) {
        cbs[i].aio_data = i;
        cbs[i].aio_lio_opcode = IOCB_CMD_FDSYNC;
        cbs[i].aio_fildes = (uint32_t)fds[i];
        ptrs[i] = &cbs[i];
        reaped[i] = false;
    }
    long sub;
    do {
        sub = syscall(SYS_io_submit, (aio_context_t)s->ctx, (long)n, ptrs);
    } while (sub < 0 && errno == EINTR);
    if (sub < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        s->off = true; /* no AIO fsync for this file system */
        return;
    }
    if (sub < 0)
        sub = 0; /* the first iocb refused (a bad descriptor): below, one by one */
    /* The iocbs are copied at submission; only the events are reaped. */
    size_t left = (size_t)sub;
    while (left > 0) {
        struct io_event ev[TN_IO_SYNCS_MAX];
        long got = syscall(SYS_io_getevents, (aio_context_t)s->ctx, 1L, (long)left, ev, NULL);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break; /* cannot reap: those left are synced again below */
        for (long j = 0; j < got; j++) {
            size_t i = (size_t)ev[j].data;
            if (i >= (size_t)sub || reaped[i])
                continue;
            reaped[i] = true;
            rcs[i] = ev[j].res < 0 ? tn_err_from_errno((int)-ev[j].res) : 0;
            left--;
        }
    }
    if (left > 0) {
        /* Events of this call must not surface in a later one: drop the
         * context (io_destroy waits for what is in flight); the next call
         * sets up another. */
        (void)syscall(SYS_io_destroy, (aio_context_t)s->ctx);
        s->ctx = 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!reaped[i])
            rcs[i] = sync_fd(fds[i], true);
}
#endif

void tn_io_fdatasync_many(tn_io_syncs_t *s, const int *fds, int *rcs, size_t n)
{
    TN_ASSERT(n <= TN_IO_SYNCS_MAX);
#ifdef __linux__
    if (n > 1 && !s->off && !syncs_hooked()) {
        aio_syncs(s, fds, rcs, n);
        if (!s->off)
            return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        rcs[i] = sync_fd(fds[i], true);
}

void tn_io_syncs_fini(tn_io_syncs_t *s)
{
#ifdef __linux__
    if (s->ctx != 0)
        (void)syscall(SYS_io_destroy, (aio_context_t)s->ctx);
#endif
    s->ctx = 0;
}

int tn_io_ftruncate(int fd, uint64_t len)
{
    int rc = sim_truncate(fd, len);
    if (rc != 0)
        return rc;
    if (ftruncate(fd, (off_t)len) != 0)
        return tn_err_from_errno(errno);
    return 0;
}

int tn_io_cut_back(int fd, uint64_t len)
{
    int rc = tn_io_ftruncate(fd, len);
    return rc != 0 ? rc : tn_io_fdatasync(fd);
}

int tn_io_fsize(int fd, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return tn_err_from_errno(errno);
    *size = (uint64_t)st.st_size;
    return 0;
}

int tn_io_rename(const char *from, const char *to)
{
    int rc = sim_dirop(1, from, to);
    if (rc != 0)
        return rc;
    if (rename(from, to) != 0)
        return tn_err_from_errno(errno);
    return 0;
}

/* Tries of tn_io_link_current: each lost one needs a rename over `from`
 * inside link(2)'s few microseconds between lookup and link. */
#define LINK_TRIES 1000

int tn_io_link_current(const char *from, const char *to)
{
    for (int i = 0; i < LINK_TRIES; i++) {
        if (link(from, to) == 0)
            return 0;
        if (errno != ENOENT)
            return tn_err_from_errno(errno);
        /* Gone, or replaced meanwhile: a name that is still there (its
         * new file) is linked again. */
        struct stat st;
        if (lstat(from, &st) != 0)
            return errno == ENOENT ? UV_ENOENT : tn_err_from_errno(errno);
    }
    return UV_EAGAIN;
}

int tn_io_unlink(const char *path)
{
    int rc = sim_dirop(2, path, NULL);
    if (rc != 0)
        return rc;
    if (unlink(path) != 0)
        return tn_err_from_errno(errno);
    return 0;
}

static int remove_at(int dfd, const char *name);

/* Remove the entries of the directory open as dfd (closed here). */
static int remove_under(int dfd)
{
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        int rc = tn_err_from_errno(errno);
        close(dfd);
        return rc;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int r = remove_at(dirfd(d), e->d_name);
        if (rc == 0)
            rc = r;
    }
    closedir(d);
    return rc;
}

/* Remove name in the directory dfd: a directory with what it holds, or
 * anything else (a symbolic link: the link) by unlinkat. A directory
 * swapped for a link between the look and the open fails the open
 * (O_NOFOLLOW: ELOOP) and is left alone. */
static int remove_at(int dfd, const char *name)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : tn_err_from_errno(errno);
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : tn_err_from_errno(errno);
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return errno == ENOENT ? 0 : tn_err_from_errno(errno);
    int rc = remove_under(sub);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && rc == 0)
        rc = tn_err_from_errno(errno);
    return rc;
}

int tn_io_remove_tree(const char *path)
{
    return remove_at(AT_FDCWD, path);
}

int tn_io_remove_children(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return tn_err_from_errno(errno);
    return remove_under(fd);
}

int tn_io_mkdir(const char *path, int mode)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? UV_EEXIST : UV_ENOTDIR;
    int rc = sim_dirop(3, path, NULL);
    if (rc != 0)
        return rc;
    if (mkdir(path, (mode_t)mode) != 0)
        return tn_err_from_errno(errno);
    return 0;
}

int tn_io_mkdir_p(const char *path, int mode)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return UV_ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        int rc = tn_io_mkdir(buf, mode);
        if (rc == 0) {
            char parent[4096];
            const char *slash = strrchr(buf, '/');
            if (slash == NULL)
                snprintf(parent, sizeof(parent), ".");
            else
                snprintf(parent, sizeof(parent), "%.*s", (int)(slash == buf ? 1 : slash - buf),
                         buf);
            rc = tn_io_fsync_dir(parent);
        } else if (rc == UV_EEXIST) {
            rc = 0;
        }
        if (rc != 0)
            return rc;
        buf[i] = saved;
    }
    return 0;
}

int tn_io_fsync_dir(const char *path)
{
    int rc = sim_sync_dir(path);
    if (rc != 0)
        return rc;
#ifdef TN_TEST
    int inj = injected(&fail_sync_countdown, &fail_sync_err);
    if (inj != 0)
        return inj;
#endif
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tn_err_from_errno(errno);
    rc = fsync(fd) != 0 ? tn_err_from_errno(errno) : 0;
    close(fd);
    return rc;
}

#define RECORD_FILE_MAX 64

int tn_io_write_record_file(const char *dir, const char *name, uint32_t magic, const void *payload,
                            size_t len)
{
    unsigned char b[8 + RECORD_FILE_MAX];
    if (len > RECORD_FILE_MAX)
        return UV_EINVAL;
    tn_put_u32(b, magic);
    memcpy(b + 8, payload, len);
    tn_put_u32(b + 4, tn_crc32c(0, b + 8, len));
    return tn_io_write_file_atomic(dir, name, b, 8 + len);
}

int tn_io_read_record_file(const char *dir, const char *name, uint32_t magic, void *payload,
                           size_t len)
{
    char path[4096];
    if (len > RECORD_FILE_MAX)
        return UV_EINVAL;
    int rc = tn_io_path(path, sizeof(path), "%s/%s", dir, name);
    if (rc != 0)
        return rc;
    tn_buf_t b;
    tn_buf_init(&b);
    rc = tn_io_read_file(path, 2 * RECORD_FILE_MAX, &b);
    if (rc == TN_ETOOBIG)
        rc = TN_ECORRUPT; /* not a record file of ours: isolate, as a bad size does */
    if (rc == 0) {
        const unsigned char *p = (const unsigned char *)tn_buf_data(&b);
        if (tn_buf_size(&b) != 8 + len || tn_get_u32(p) != magic ||
            tn_get_u32(p + 4) != tn_crc32c(0, p + 8, len))
            rc = TN_ECORRUPT;
        else
            memcpy(payload, p + 8, len);
    }
    tn_buf_fini(&b);
    return rc;
}

int tn_io_write_file_atomic(const char *dir, const char *name, const void *data, size_t len)
{
    return tn_io_write_file_atomic_mode(dir, name, data, len, 0644);
}

/* Two threads replacing the same file (a topic's stamp, written by the
 * engine's topic job and a replica's log opening at once) would share its
 * .tmp: one would unlink or rename the other's. Writers of one path take
 * its stripe of these locks; others run side by side. */
#define ATOMIC_STRIPES 32
static uv_mutex_t atomic_locks[ATOMIC_STRIPES];
static uv_once_t atomic_once = UV_ONCE_INIT;

static void atomic_init_locks(void)
{
    for (size_t i = 0; i < ATOMIC_STRIPES; i++)
        uv_mutex_init(&atomic_locks[i]);
}

static int write_atomic_locked(const char *dir, const char *tmp, const char *dst, const void *data,
                               size_t len, int mode)
{
    int fd;
    int rc = 0;
    struct stat st;
    if (stat(tmp, &st) == 0 && (rc = tn_io_unlink(tmp)) != 0)
        return rc; /* a leftover .tmp would keep its own mode */
    rc = tn_io_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode, &fd);
    if (rc != 0)
        return rc;
    rc = tn_io_pwrite(fd, data, len, 0);
    if (rc == 0)
        rc = tn_io_fdatasync(fd);
    tn_io_close(fd);
    if (rc == 0)
        rc = tn_io_rename(tmp, dst);
    if (rc == 0)
        rc = tn_io_fsync_dir(dir);
    if (rc != 0)
        unlink(tmp);
    return rc;
}

int tn_io_write_file_atomic_mode(const char *dir, const char *name, const void *data, size_t len,
                                 int mode)
{
    char tmp[4096], dst[4096];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name) >= sizeof(tmp) ||
        (size_t)snprintf(dst, sizeof(dst), "%s/%s", dir, name) >= sizeof(dst))
        return UV_ENAMETOOLONG;
    uv_once(&atomic_once, atomic_init_locks);
    uv_mutex_t *lock = &atomic_locks[tn_crc32c(0, dst, strlen(dst)) % ATOMIC_STRIPES];
    uv_mutex_lock(lock);
    int rc = write_atomic_locked(dir, tmp, dst, data, len, mode);
    uv_mutex_unlock(lock);
    return rc;
}

int tn_io_read_file(const char *path, size_t max, tn_buf_t *out)
{
    int fd = -1;
    int rc = tn_io_open(path, O_RDONLY, 0, &fd);
    if (rc != 0)
        return rc;
    uint64_t size = 0;
    rc = tn_io_fsize(fd, &size);
    if (rc == 0 && size > max)
        rc = TN_ETOOBIG;
    if (rc == 0)
        rc = tn_buf_reserve(out, (size_t)size);
    if (rc == 0) {
        size_t n = 0;
        rc = tn_io_pread(fd, out->base + out->len, (size_t)size, 0, &n);
        if (rc == 0)
            out->len += n;
    }
    tn_io_close(fd);
    return rc;
}
