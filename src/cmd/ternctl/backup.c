/* `ternctl backup DIR` and `ternctl restore DIR --data-path D`: an online
 * backup of every member of the cluster (one node is a cluster of one)
 * through /v1/backup (api/backup.h), and an offline restore of one node's
 * copy into an empty data directory. docs/operations.md ("Backup and
 * restore") is the operator's guide.
 *
 * DESIGN: a backup.
 *   1. DIR must be missing or empty; it is made (0700).
 *   2. GET /v1/cluster/members lists the members; every one must be alive
 *      (a dead member's data would be missing from the copy). One member:
 *      the node asked; several: each at its advertised API address, with
 *      the scheme of --url.
 *   3. POST /v1/backup to every member first, all at once (a thread per
 *      POST, whose answer takes as long as the member's reading of its
 *      data), so the sessions start close together, then copy each: the
 *      manifest to DIR/<id>/manifest.json, each file to
 *      DIR/<id>/data/<path> and the metastore snapshot to
 *      DIR/<id>/metastore.snapshot, each under a temporary name, fetched
 *      in ranges (?offset=), checked against its length and CRC32C, then
 *      fsynced and renamed, and its directory fsynced. Meanwhile every
 *      other session is used once a minute (or each third of its TTL),
 *      from the first answer on, so its TTL never runs out.
 *   4. DIR/backup.json names the members and the one whose metastore
 *      snapshot every restored node starts from (the highest applied
 *      index: the most complete view), then every session is deleted (on
 *      failure too).
 *
 * DESIGN: a restore.
 *   1. Read DIR/backup.json, the node's manifest (--node N, or the only
 *      node) and the metastore source's manifest; check every file's
 *      length and CRC32C before anything is written.
 *   2. D must be missing or empty. Write each file under a temporary name,
 *      checking the CRC again of what is written, fsync, rename; fsync
 *      every directory made. Then each channel whose pause file the
 *      copy holds gets its stamp from the metastore the node starts from
 *      (stamp_channels; with --rejoin the node's own snapshot, as its
 *      topics get theirs, unless the backup holds the stamp that was
 *      beside the channel's files when they were copied: --rejoin
 *      writes that one, a plain restore leaves it out).
 *   3. Write D/meta from the snapshot (meta.h tn_meta_restore_write),
 *      rewritten for the whole cluster (meta/restore.h): before step 2,
 *      every member's manifest and files are checked (a member missing
 *      or damaged fails every member's restore, naming it), each
 *      replica's copy of each replicated partition in DIR is probed as
 *      storage would recover it (tn_plog_probe), the copy to lead is
 *      chosen and the partition states and member incarnations are
 *      rewritten, the same on every node. Then D/incarnation: the one
 *      derived from the backup's id and the node id, which the rewritten
 *      ISR entries and member records name. The copied `incarnation` is
 *      never written back.
 *   4. Print the decision per partition.
 *   With --rejoin (one node of a cluster that keeps running on its other
 *   members' data): step 3 is left out. The node then starts as a
 *   replaced disk: its
 *   metastore bootstraps the cluster's first configuration and catches up
 *   from the running members (the backup's snapshot, written at index 1,
 *   would be taken for the cluster's own first entry and the live log
 *   applied on top of it), and its new incarnation keeps its old copies
 *   out of every ISR and ELR until each leader adds it back, once it has
 *   fetched up to the log end (its log is kept where it agrees with the
 *   leader's epoch history). docs/operations.md says why.
 *
 * Threads: ternctl's, and one per member while its POST runs
 * (post_thread), which touches only its node_t's POST fields and a client
 * of its own. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"
#include "cmd/ternctl/manifest.h"

#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "meta/meta.h"
#include "meta/restore.h"
#include "meta/state.h"
#include "storage/plog.h"
#include "storage/store.h"

#include <uv.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_LEN   4096
#define COPY_BUF   (1024 * 1024)
#define MAX_NODES  TN_MANIFEST_SET_MAX_NODES
#define TOP_FORMAT TN_MANIFEST_SET_FORMAT

/* A string value, after YAJL_IS_STRING said it is one. */
#define SV(v) ((const char *)(v)->u.string)

static void pathf(char *out, size_t n, const char *fmt, ...) TN_PRINTF(3, 4);
static void pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

static int say(const char *cmd, const char *fmt, ...) TN_PRINTF(2, 3);
static int say(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ternctl %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return TN_CTL_FAIL;
}

/* --- files ---------------------------------------------------------------------- */

/* 1: path is a missing or empty directory (made if missing), 0: it has
 * entries (or is not a directory), <0: an error. */
static int empty_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        if (errno != ENOENT)
            return -errno;
        return mkdir(path, 0700) == 0 ? 1 : -errno;
    }
    struct dirent *e;
    int rc = 1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            rc = 0;
            break;
        }
    closedir(d);
    return rc;
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* Make every directory of path's parent under root (root exists), fsyncing
 * each parent of a directory made. */
static int make_parents(const char *root, const char *rel)
{
    char p[PATH_LEN];
    pathf(p, sizeof(p), "%s/%s", root, rel);
    size_t skip = strlen(root) + 1;
    for (char *s = p + skip; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) == 0) {
            char *slash = strrchr(p, '/');
            *slash = '\0';
            int rc = fsync_dir(p);
            *slash = '/';
            if (rc != 0)
                return rc;
        } else if (errno != EEXIST) {
            return -errno;
        }
        *s = '/';
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* path opened for reading (an fd, or <0): a regular file only, UV_EFTYPE
 * for anything else. A backup's files are read as they are found: a FIFO
 * in a file's place blocked the open until a writer came, and a device
 * (a link to /dev/zero) was read for an end that never came; opened
 * without blocking and refused, the restore names the file instead. */
static int open_regular(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : !S_ISREG(st.st_mode) ? UV_EFTYPE : 0;
    if (rc == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = -errno;
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/* An error of open_regular's or a read's, for a message. */
static const char *why(int e)
{
    return e == UV_EFTYPE ? "not a regular file" : tn_strerror(e);
}

/* The length and CRC32C of a file, reading it whole. */
static int file_crc(const char *path, unsigned char *buf, uint64_t *len, uint32_t *crc)
{
    int fd = open_regular(path);
    if (fd < 0)
        return fd;
    uint64_t n = 0;
    uint32_t c = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf, COPY_BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            break;
        }
        if (r == 0)
            break;
        c = tn_crc32c(c, buf, (size_t)r);
        n += (uint64_t)r;
    }
    close(fd);
    *len = n;
    *crc = c;
    return rc;
}

/* Finish a temporary file: fsync, close, rename onto final, fsync the
 * directory. */
static int commit_tmp(int fd, const char *tmp, const char *final)
{
    int rc = fdatasync(fd) == 0 ? 0 : -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, final) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    char dir[PATH_LEN];
    pathf(dir, sizeof(dir), "%s", final);
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    return fsync_dir(slash != NULL ? dir : ".");
}

static int write_file_atomic(const char *path, const void *data, size_t len)
{
    char tmp[PATH_LEN];
    pathf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = write_all(fd, data, len);
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    return commit_tmp(fd, tmp, path);
}

static int read_file(const char *path, size_t max, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = open_regular(path);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > max) {
        int rc = errno ? -errno : TN_ETOOBIG;
        close(fd);
        return (uint64_t)st.st_size > max ? TN_ETOOBIG : rc;
    }
    char *b = tn_malloc((size_t)st.st_size + 1);
    if (b == NULL) {
        close(fd);
        return UV_ENOMEM;
    }
    size_t n = 0;
    while (n < (size_t)st.st_size) {
        ssize_t r = read(fd, b + n, (size_t)st.st_size - n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *out = b;
    *len = n;
    return 0;
}

/* --- backup --------------------------------------------------------------------------- */

typedef struct {
    uint64_t id;
    char url[300];     /* base URL */
    char session[65];  /* "" until POSTed */
    tn_ctl_resp_t man; /* the manifest as the server answered it */
    tn_manifest_t m;
    /* The POST, on a thread of its own (post_thread): it writes post_rc
     * and man, then posted (release); the command thread reads them once
     * it sees posted (acquire), and joins the thread at the end. */
    tn_ctl_t *c;
    uv_thread_t thread;
    bool started;
    int post_rc;
    int posted;
    bool handled; /* its answer looked at by the command thread */
} node_t;

/* The bound on each wait of a POST /v1/backup: it is answered once the
 * node has pinned its files and read each to take its CRC, which takes as
 * long as reading the node's data (--timeout, 30 s by default, failed the
 * backup of a node holding more than that). The longest
 * backup-session-ttl. */
#define POST_TIMEOUT_MS (24 * 3600 * 1000)

/* The sessions wait while ternctl asks the other members for theirs and
 * copies each member in turn: each is used (its manifest read, which
 * renews its TTL) every minute, or every third of its TTL when that is
 * shorter (keep_ms), so none expires however long the others take. */
static node_t *g_nodes;
static size_t g_nnodes;
static uint64_t g_touched_ms;
static uint64_t g_keep_ms = 60000;

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000;
}

static void keep_alive(tn_ctl_t *c)
{
    if (now_ms() - g_touched_ms < g_keep_ms)
        return;
    g_touched_ms = now_ms();
    for (size_t i = 0; i < g_nnodes; i++) {
        if (g_nodes[i].session[0] == '\0')
            continue;
        char path[128];
        pathf(path, sizeof(path), "/v1/backup/%s", g_nodes[i].session);
        tn_ctl_resp_t r;
        memset(&r, 0, sizeof(r));
        if (tn_ctl_call_url(c, g_nodes[i].url, "GET", path, NULL, 0, &r) == 0 && r.status != 200)
            fprintf(stderr, "ternctl backup: node %" PRIu64 ": its session answered %d\n",
                    g_nodes[i].id, r.status);
        tn_ctl_resp_fini(&r);
    }
}

/* Download one file of a session into final (via final.tmp), in ranges,
 * and check its length and CRC. */
static int fetch_file(tn_ctl_t *c, node_t *n, const char *path, uint64_t len, uint32_t crc,
                      const char *final, unsigned char *buf)
{
    char tmp[PATH_LEN];
    pathf(tmp, sizeof(tmp), "%s.tmp", final);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return say("backup", "create %s: %s", tmp, strerror(errno));
    char esc[3 * TN_MANIFEST_PATH_MAX + 1];
    tn_ctl_esc(path, esc, sizeof(esc));
    uint64_t off = 0;
    int rc = TN_CTL_OK;
    do {
        char req[4 * TN_MANIFEST_PATH_MAX + 128];
        pathf(req, sizeof(req), "/v1/backup/%s/file?path=%s&offset=%" PRIu64, n->session, esc, off);
        tn_ctl_resp_t r;
        memset(&r, 0, sizeof(r));
        uint64_t got = 0;
        if (tn_ctl_get_to_fd(c, n->url, req, fd, &got, &r) < 0) {
            rc = TN_CTL_FAIL;
            break;
        }
        if (r.status != 200) {
            char what[600];
            pathf(what, sizeof(what), "backup: node %" PRIu64 ": %s", n->id, path);
            rc = tn_ctl_fail(&r, what);
            tn_ctl_resp_fini(&r);
            break;
        }
        tn_ctl_resp_fini(&r);
        keep_alive(c);
        if (got == 0 && off < len) {
            rc = say("backup", "node %" PRIu64 ": %s: the server sent nothing at offset %" PRIu64,
                     n->id, path, off);
            break;
        }
        off += got;
    } while (off < len);
    if (rc != TN_CTL_OK) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    uint64_t have = 0;
    uint32_t hcrc = 0;
    int e = file_crc(tmp, buf, &have, &hcrc);
    if (e != 0 || have != len || hcrc != crc) {
        close(fd);
        unlink(tmp);
        if (e != 0)
            return say("backup", "read back %s: %s", tmp, tn_strerror(e));
        return say("backup",
                   "node %" PRIu64 ": %s: got %" PRIu64 " bytes with CRC32C %08" PRIx32
                   ", the manifest says %" PRIu64 " bytes with %08" PRIx32,
                   n->id, path, have, hcrc, len, crc);
    }
    if ((e = commit_tmp(fd, tmp, final)) != 0)
        return say("backup", "write %s: %s", final, tn_strerror(e));
    return TN_CTL_OK;
}

static int copy_node(tn_ctl_t *c, node_t *n, const char *dir, unsigned char *buf)
{
    char nd[PATH_LEN], data[PATH_LEN], p[PATH_LEN];
    pathf(nd, sizeof(nd), "%s/%" PRIu64, dir, n->id);
    pathf(data, sizeof(data), "%s/data", nd);
    if ((mkdir(nd, 0700) != 0 && errno != EEXIST) || (mkdir(data, 0700) != 0 && errno != EEXIST))
        return say("backup", "mkdir %s: %s", data, strerror(errno));
    int e;
    if ((e = fsync_dir(dir)) != 0 || (e = fsync_dir(nd)) != 0)
        return say("backup", "fsync %s: %s", nd, tn_strerror(e));
    pathf(p, sizeof(p), "%s/metastore.snapshot", nd);
    int rc = fetch_file(c, n, "metastore.snapshot", n->m.meta_len, n->m.meta_crc, p, buf);
    uint64_t bytes = n->m.meta_len;
    for (size_t i = 0; rc == TN_CTL_OK && i < n->m.nfiles; i++) {
        const tn_manifest_file_t *f = &n->m.files[i];
        if ((e = make_parents(data, f->path)) != 0)
            return say("backup", "mkdir for %s: %s", f->path, tn_strerror(e));
        pathf(p, sizeof(p), "%s/%s", data, f->path);
        rc = fetch_file(c, n, f->path, f->len, f->crc, p, buf);
        bytes += f->len;
    }
    if (rc != TN_CTL_OK)
        return rc;
    /* The manifest last: a node directory with one is complete. */
    pathf(p, sizeof(p), "%s/manifest.json", nd);
    if ((e = write_file_atomic(p, n->man.body, n->man.len)) != 0)
        return say("backup", "write %s: %s", p, tn_strerror(e));
    if (!tn_ctl_json(c))
        printf("node %" PRIu64 ": %zu files and the metastore snapshot, %" PRIu64 " bytes -> %s\n",
               n->id, n->m.nfiles, bytes, nd);
    return TN_CTL_OK;
}

/* The members to back up, into nodes. */
static int members(tn_ctl_t *c, node_t *nodes, size_t *nn)
{
    tn_ctl_resp_t r;
    memset(&r, 0, sizeof(r));
    if (tn_ctl_call(c, "GET", "/v1/cluster/members", NULL, 0, &r) < 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, "backup: members");
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, "backup: members");
    tn_ctl_resp_fini(&r);
    yajl_val ms = v != NULL ? tn_ctl_get(v, "members") : NULL;
    if (ms == NULL || !YAJL_IS_ARRAY(ms) || ms->u.array.len == 0 || ms->u.array.len > MAX_NODES) {
        if (v != NULL)
            yajl_tree_free(v);
        return say("backup", "the node's member list is empty or malformed");
    }
    const char *base = tn_ctl_base_url(c);
    const char *scheme = strncmp(base, "https://", 8) == 0 ? "https" : "http";
    size_t n = ms->u.array.len;
    int rc = TN_CTL_OK;
    for (size_t i = 0; i < n && rc == TN_CTL_OK; i++) {
        yajl_val m = ms->u.array.values[i];
        const char *id = tn_ctl_get_str(m, "id");
        const char *api = tn_ctl_get_str(m, "api_addr");
        const char *status = tn_ctl_get_str(m, "status");
        char *end = NULL;
        unsigned long long x = id != NULL ? strtoull(id, &end, 10) : 0;
        if (id == NULL || *end != '\0' || x == 0 || api == NULL || status == NULL) {
            rc = say("backup", "a member without an id, api_addr or status");
            break;
        }
        if (strcmp(status, "alive") != 0) {
            rc = say("backup",
                     "member %llu is %s: a backup copies every member, and that one's "
                     "partitions would be missing",
                     x, status);
            break;
        }
        if (n > 1 && api[0] == '\0') {
            rc = say("backup", "member %llu has no API address registered yet", x);
            break;
        }
        nodes[i].id = x;
        if (n == 1)
            pathf(nodes[i].url, sizeof(nodes[i].url), "%s", base);
        else
            pathf(nodes[i].url, sizeof(nodes[i].url), "%s://%s", scheme, api);
    }
    yajl_tree_free(v);
    *nn = rc == TN_CTL_OK ? n : 0;
    return rc;
}

static void end_sessions(tn_ctl_t *c, node_t *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].session[0] == '\0')
            continue;
        char path[128];
        pathf(path, sizeof(path), "/v1/backup/%s", nodes[i].session);
        tn_ctl_resp_t r;
        memset(&r, 0, sizeof(r));
        if (tn_ctl_call_url(c, nodes[i].url, "DELETE", path, NULL, 0, &r) == 0 && r.status != 200 &&
            r.status != 404)
            tn_ctl_fail(&r, "backup: ending the session");
        tn_ctl_resp_fini(&r);
        nodes[i].session[0] = '\0';
    }
}

static void post_thread(void *arg)
{
    node_t *nd = arg;
    nd->post_rc = tn_ctl_call_own(nd->c, nd->url, "POST", "/v1/backup", POST_TIMEOUT_MS, &nd->man);
    __atomic_store_n(&nd->posted, 1, __ATOMIC_RELEASE);
}

/* A member's answer to its POST (posted): its session named (so that it
 * is ended whatever happens next) and its manifest decoded. */
static int posted(tn_ctl_t *c, node_t *nd)
{
    if (nd->post_rc < 0)
        return TN_CTL_FAIL; /* said by tn_ctl_call_own */
    if (nd->man.status != 201) {
        char what[64];
        pathf(what, sizeof(what), "backup: node %" PRIu64, nd->id);
        return tn_ctl_fail(&nd->man, what);
    }
    char err[300];
    if (tn_manifest_parse(nd->man.body, nd->man.len, &nd->m, err, sizeof(err)) != 0)
        return say("backup", "node %" PRIu64 ": %s", nd->id, err);
    pathf(nd->session, sizeof(nd->session), "%s", nd->m.session);
    /* A third of the shortest TTL, so a session is used twice before it
     * could expire. */
    if (nd->m.ttl_ms > 0 && nd->m.ttl_ms / 3 < g_keep_ms)
        g_keep_ms = TN_MAX(nd->m.ttl_ms / 3, 1);
    if (nd->m.node_id != nd->id)
        return say("backup", "%s answered as node %" PRIu64 ", the member list says %" PRIu64,
                   nd->url, nd->m.node_id, nd->id);
    for (size_t k = 0; k < nd->m.nisolated; k++) {
        char why[1024];
        fprintf(stderr,
                "ternctl backup: warning: node %" PRIu64 ": partition %s/%" PRIu32
                " is isolated (%s): its files are copied whole, the damage included, and "
                "it is restored isolated as it is now (docs/operations.md, \"A damaged "
                "partition\")\n",
                nd->id, nd->m.isolated[k].topic, nd->m.isolated[k].partition,
                tn_ctl_shown(nd->m.isolated[k].error, why, sizeof(why)));
    }
    return TN_CTL_OK;
}

static int run_backup(tn_ctl_t *c, int argc, char **argv)
{
    static const struct option opts[] = {{NULL, 0, NULL, 0}};
    optind = 1;
    if (getopt_long(argc, argv, "", opts, NULL) != -1)
        return tn_ctl_usage("backup", "unknown option");
    if (argc - optind != 1)
        return tn_ctl_usage("backup", "one argument, the backup directory, is required");
    const char *dir = argv[optind];
    int e = empty_dir(dir);
    if (e < 0)
        return say("backup", "%s: %s", dir, tn_strerror(e));
    if (e == 0)
        return say("backup", "%s is not empty: a backup goes into a new or empty directory", dir);
    node_t *nodes = tn_calloc(MAX_NODES, sizeof(*nodes));
    unsigned char *buf = tn_malloc(COPY_BUF);
    if (nodes == NULL || buf == NULL) {
        tn_free(nodes);
        tn_free(buf);
        return say("backup", "out of memory");
    }
    size_t n = 0;
    int rc = members(c, nodes, &n);
    g_nodes = nodes;
    g_nnodes = n;
    g_touched_ms = now_ms();
    /* Every session first, all asked at once (each POST on a thread of
     * its own): they start close together in time, and while a member
     * reads its data to answer, the sessions already made are kept alive
     * (keep_alive, on this thread). Before, the POSTs went one after
     * another: a session sat unused while a later member answered, and
     * the node removed it once that took longer than its TTL. */
    size_t nstarted = 0;
    for (size_t i = 0; rc == TN_CTL_OK && i < n; i++) {
        nodes[i].c = c;
        if ((e = uv_thread_create(&nodes[i].thread, post_thread, &nodes[i])) != 0) {
            rc = say("backup", "thread: %s", tn_strerror(e));
            break;
        }
        nodes[i].started = true;
        nstarted++;
    }
    for (size_t handled = 0; handled < nstarted;) {
        for (size_t i = 0; i < nstarted; i++) {
            if (nodes[i].handled || __atomic_load_n(&nodes[i].posted, __ATOMIC_ACQUIRE) == 0)
                continue;
            nodes[i].handled = true;
            handled++;
            int prc = posted(c, &nodes[i]);
            if (rc == TN_CTL_OK)
                rc = prc;
        }
        keep_alive(c);
        if (handled < nstarted)
            uv_sleep(20);
    }
    for (size_t i = 0; i < n; i++)
        if (nodes[i].started)
            uv_thread_join(&nodes[i].thread);
    for (size_t i = 0; rc == TN_CTL_OK && i < n; i++)
        rc = copy_node(c, &nodes[i], dir, buf);
    if (rc == TN_CTL_OK) {
        /* The metastore every restored node starts from: the most
         * advanced snapshot of the set. */
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (nodes[i].m.applied_index > nodes[best].m.applied_index)
                best = i;
        /* The set's identity: what the incarnations of a cluster restored
         * from it are derived from (meta/restore.h). */
        unsigned char rnd[16];
        char bid[2 * sizeof(rnd) + 1];
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
            rc = say("backup", "getrandom: %s", strerror(errno));
            goto done;
        }
        for (size_t i = 0; i < sizeof(rnd); i++)
            snprintf(bid + 2 * i, 3, "%02x", rnd[i]);
        char top[4096];
        size_t tl = (size_t)snprintf(top, sizeof(top),
                                     "{\"format\":\"" TOP_FORMAT "\",\"id\":\"%s\","
                                     "\"metastore_from\":%" PRIu64 ",\"nodes\":[",
                                     bid, nodes[best].id);
        for (size_t i = 0; i < n && tl < sizeof(top) - 64; i++)
            tl += (size_t)snprintf(top + tl, sizeof(top) - tl, "%s%" PRIu64, i ? "," : "",
                                   nodes[i].id);
        tl += (size_t)snprintf(top + tl, sizeof(top) - tl, "]}\n");
        char p[PATH_LEN];
        pathf(p, sizeof(p), "%s/backup.json", dir);
        if ((e = write_file_atomic(p, top, tl)) != 0)
            rc = say("backup", "write %s: %s", p, tn_strerror(e));
        else if (tn_ctl_json(c))
            tn_ctl_print_json(top, tl - 1);
        else
            printf("backup of %zu node(s) complete in %s (metastore from node %" PRIu64 ")\n", n,
                   dir, nodes[best].id);
    }
done:
    end_sessions(c, nodes, n);
    for (size_t i = 0; i < n; i++) {
        tn_ctl_resp_fini(&nodes[i].man);
        tn_manifest_fini(&nodes[i].m);
    }
    tn_free(nodes);
    tn_free(buf);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_backup = {
    "backup", "copy every member's data, online, into a new directory",
    "usage: ternctl backup DIR\n"
    "\n"
    "Takes an online backup of every member of the cluster (a single node is a\n"
    "cluster of one) through /v1/backup, into DIR, which must be missing or\n"
    "empty. Needs an admin user. Each member goes to DIR/<member-id>/ with its\n"
    "manifest.json (every file's length and CRC32C, checked as it downloads),\n"
    "its files under data/ and its metastore snapshot; DIR/backup.json names\n"
    "the members. Every member must be alive. What a node acknowledged before\n"
    "the backup started is in it; FINs recorded before it stay FINed.\n"
    "\n"
    "Restore with `ternctl restore DIR --data-path D [--node ID]`.\n"
    "\n"
    "example:\n"
    "  ternctl --url http://10.0.0.1:4151 --user admin --password-file pw backup /srv/backup/t1\n",
    run_backup};

/* --- restore --------------------------------------------------------------------------- */

/* Read and decode DIR/<id>/manifest.json. */
static int load_manifest(const char *dir, uint64_t id, tn_manifest_t *m)
{
    char p[PATH_LEN];
    pathf(p, sizeof(p), "%s/%" PRIu64 "/manifest.json", dir, id);
    char *body = NULL;
    size_t len = 0;
    int e = read_file(p, TN_MANIFEST_MAX_BYTES, &body, &len);
    if (e == UV_ENOENT)
        return say("restore", "%s is missing: the backup lacks node %" PRIu64 "'s copy", p, id);
    if (e != 0)
        return say("restore", "%s: %s", p, why(e));
    char err[300];
    e = tn_manifest_parse(body, len, m, err, sizeof(err));
    tn_free(body);
    if (e != 0)
        return say("restore", "%s: %s", p, err);
    if (m->node_id != id)
        return say("restore", "%s is node %" PRIu64 "'s, not node %" PRIu64 "'s", p, m->node_id,
                   id);
    return TN_CTL_OK;
}

/* The set's description (backup.json, tn_manifest_set_parse) into set,
 * and the node to restore (*id, from --node or the only one). */
static int load_set(const char *dir, bool have_node, uint64_t *id, tn_manifest_set_t *set)
{
    memset(set, 0, sizeof(*set));
    char p[PATH_LEN];
    pathf(p, sizeof(p), "%s/backup.json", dir);
    char *body = NULL;
    size_t len = 0;
    int e = read_file(p, TN_MANIFEST_SET_MAX_BYTES, &body, &len);
    if (e != 0)
        return say("restore", "%s: %s (is %s a complete backup?)", p, why(e), dir);
    char err[200];
    e = tn_manifest_set_parse(body, len, set, err, sizeof(err));
    tn_free(body);
    if (e == UV_ENOMEM)
        return say("restore", "out of memory");
    if (e != 0)
        return say("restore", "%s: %s", p, err);
    if (!have_node) {
        if (set->n != 1)
            return say("restore",
                       "%s holds %zu nodes: say which one this data directory is with --node ID",
                       dir, set->n);
        *id = set->ids[0];
        return TN_CTL_OK;
    }
    for (size_t i = 0; i < set->n; i++)
        if (set->ids[i] == *id)
            return TN_CTL_OK;
    return say("restore", "node %" PRIu64 " is not in the backup %s", *id, dir);
}

static int check_file(const char *path, uint64_t len, uint32_t crc, unsigned char *buf)
{
    uint64_t have = 0;
    uint32_t hcrc = 0;
    int e = file_crc(path, buf, &have, &hcrc);
    if (e != 0)
        return say("restore", "%s: %s", path, why(e));
    if (have != len || hcrc != crc)
        return say("restore",
                   "%s is damaged: %" PRIu64 " bytes with CRC32C %08" PRIx32
                   ", the manifest says %" PRIu64 " bytes with %08" PRIx32,
                   path, have, hcrc, len, crc);
    return TN_CTL_OK;
}

/* Copy src to final via final.tmp, checking the CRC of what goes out. */
static int copy_in(const char *src, const char *final, uint64_t len, uint32_t crc,
                   unsigned char *buf)
{
    char tmp[PATH_LEN];
    pathf(tmp, sizeof(tmp), "%s.tmp", final);
    int in = open_regular(src);
    if (in < 0)
        return say("restore", "%s: %s", src, why(in));
    int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return say("restore", "create %s: %s", tmp, strerror(errno));
    }
    uint64_t n = 0;
    uint32_t c = 0;
    int e = 0;
    for (;;) {
        ssize_t r = read(in, buf, COPY_BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            e = -errno;
            break;
        }
        if (r == 0)
            break;
        c = tn_crc32c(c, buf, (size_t)r);
        n += (uint64_t)r;
        if ((e = write_all(out, buf, (size_t)r)) != 0)
            break;
    }
    close(in);
    if (e == 0 && (n != len || c != crc)) {
        close(out);
        unlink(tmp);
        return say("restore", "%s changed while it was restored", src);
    }
    if (e == 0)
        e = commit_tmp(out, tmp, final);
    else {
        close(out);
        unlink(tmp);
    }
    if (e != 0)
        return say("restore", "write %s: %s", final, tn_strerror(e));
    return TN_CTL_OK;
}

/* --- a whole cluster restored: every member's copy of every replicated partition --- */

typedef struct {
    const char *dir;
    const tn_manifest_set_t *set;
    tn_manifest_t *mans; /* mans[i]: set->ids[i]'s */
    /* copies' probes (meta/restore.h: the replicas', then the other
     * members'): TN_PSTATE_MAX_REPLICAS + set->n of each */
    tn_plog_probe_t *probes;
    bool *probed;
    tn_buf_t text; /* the decisions, printed once the restore is written */
    tn_buf_t json;
    size_t nparts;
    size_t offline;
    uint64_t beyond; /* records of copies beyond their leader's log, over every partition */
    int oom;
} whole_t;

static void bprintf(whole_t *w, tn_buf_t *b, const char *fmt, ...) TN_PRINTF(3, 4);
static void bprintf(whole_t *w, tn_buf_t *b, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0 && tn_buf_append(b, line, TN_MIN((size_t)n, sizeof(line) - 1)) != 0)
        w->oom = UV_ENOMEM;
}

static void drop_probes(whole_t *w)
{
    for (size_t k = 0; w->probed != NULL && k < TN_PSTATE_MAX_REPLICAS + w->set->n; k++)
        if (w->probed[k]) {
            tn_plog_probe_fini(&w->probes[k]);
            w->probed[k] = false;
        }
}

/* Whether man holds files of partition p of topic. */
static bool holds(const tn_manifest_t *man, const char *topic, uint32_t p)
{
    char pre[TN_MANIFEST_PATH_MAX + 32];
    int n = snprintf(pre, sizeof(pre), "topics/%s/%" PRIu32 "/", topic, p);
    for (size_t i = 0; n > 0 && i < man->nfiles; i++)
        if (strncmp(man->files[i].path, pre, (size_t)n) == 0)
            return true;
    return false;
}

static int on_copies(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps,
                     tn_meta_restore_copy_t *copies, uint32_t ncopies, char *err, size_t errlen)
{
    whole_t *w = arg;
    (void)ps;
    drop_probes(w);
    for (uint32_t k = 0; k < ncopies; k++) {
        const tn_manifest_t *man = NULL;
        for (size_t i = 0; i < w->set->n; i++)
            if (w->set->ids[i] == copies[k].node)
                man = &w->mans[i];
        if (man == NULL || !holds(man, topic, p))
            continue; /* no copy: not present */
        char path[PATH_LEN];
        pathf(path, sizeof(path), "%s/%" PRIu32 "/data/topics/%s/%" PRIu32, w->dir, copies[k].node,
              topic, p);
        tn_plog_probe_t *pr = &w->probes[k];
        int rc = tn_plog_probe(path, pr);
        w->probed[k] = true;
        copies[k].present = true;
        copies[k].max_epoch = pr->max_epoch;
        if (rc == TN_ECORRUPT) {
            copies[k].damaged = true;
            continue;
        }
        if (rc != 0) {
            tn_errbuf(err, errlen, "node %" PRIu32 "'s copy of %s/%" PRIu32 ": %s", copies[k].node,
                      topic, p, pr->errmsg);
            return rc;
        }
        uint32_t last = tn_epochs_latest(&pr->epochs);
        copies[k].last_epoch = last == TN_EPOCHS_UNDEFINED ? 0 : last;
        copies[k].log_end = pr->log_end;
    }
    return 0;
}

static void on_told(void *arg, const char *topic, uint32_t p, const tn_pstate_t *old,
                    const tn_pstate_t *now, const tn_meta_restore_copy_t *copies, uint32_t ncopies,
                    int best)
{
    whole_t *w = arg;
    w->nparts++;
    bprintf(w, &w->json,
            "%s{\"topic\":\"%s\",\"partition\":%" PRIu32 ",\"leader\":", w->nparts > 1 ? "," : "",
            topic, p);
    if (best < 0) {
        w->offline++;
        bprintf(w, &w->text,
                "partition %s/%" PRIu32 ": OFFLINE: no copy of it in the backup; it stays without "
                "a leader until an admin forces one (ternctl partitions force-leader %s %" PRIu32
                " NODE --unclean)\n",
                topic, p, topic, p);
        bprintf(w, &w->json, "null");
    } else {
        bprintf(w, &w->text,
                "partition %s/%" PRIu32 ": leader node %" PRIu32 " in leader epoch %" PRIu32
                " (the backup's state: node %" PRIu32 " in epoch %" PRIu32 ")\n",
                topic, p, now->leader, now->leader_epoch, old->leader, old->leader_epoch);
        bprintf(w, &w->json, "\"%" PRIu32 "\"", now->leader);
    }
    bprintf(w, &w->json,
            ",\"leader_epoch\":%" PRIu32 ",\"partition_epoch\":%" PRIu32 ",\"copies\":[",
            now->leader_epoch, now->partition_epoch);
    bool comma = false;
    for (uint32_t k = 0; k < ncopies; k++) {
        const tn_meta_restore_copy_t *cp = &copies[k];
        const tn_plog_probe_t *pr = &w->probes[k];
        /* Another member's copy (not a replica in the backup's metastore:
         * meta/restore.h step 1) is told of only when there is one. */
        bool listed = k < old->nreplicas;
        if (!listed && !cp->present)
            continue;
        bprintf(w, &w->json,
                "%s{\"node\":\"%" PRIu32 "\",\"replica\":%s,\"present\":%s,\"damaged\":%s",
                comma ? "," : "", cp->node, listed ? "true" : "false",
                cp->present ? "true" : "false", cp->damaged ? "true" : "false");
        comma = true;
        if (!listed)
            bprintf(w, &w->text,
                    "  node %" PRIu32 ": not a replica in the backup's metastore (taken after "
                    "this copy, the partition moved in between): %s\n",
                    cp->node,
                    (int)k == best ? "made one, as its copy is the one to lead"
                                   : "its copy is set aside in quarantine/ at its start");
        if (!cp->present) {
            bprintf(w, &w->text, "  node %" PRIu32 ": no copy in the backup\n", cp->node);
            bprintf(w, &w->json, "}");
            continue;
        }
        if (cp->damaged) {
            bprintf(w, &w->text,
                    "  node %" PRIu32 ": damaged (%s): not chosen; it is repaired from the "
                    "leader\n",
                    cp->node, pr->errmsg);
            bprintf(w, &w->json, "}");
            continue;
        }
        bprintf(w, &w->json,
                ",\"log_start\":%" PRIu64 ",\"log_end\":%" PRIu64 ",\"last_epoch\":%" PRIu32,
                pr->log_start, pr->log_end, cp->last_epoch);
        if ((int)k == best) {
            bprintf(w, &w->text,
                    "  node %" PRIu32 ": offsets [%" PRIu64 ", %" PRIu64 "), last epoch %" PRIu32
                    ": leads\n",
                    cp->node, pr->log_start, pr->log_end, cp->last_epoch);
            bprintf(w, &w->json, ",\"beyond_leader\":0}");
            continue;
        }
        /* What the KIP-279 rule will cut from this copy once it follows
         * the leader: its records the leader's log does not hold. A copy
         * without an epoch history (a backup made before backups held the
         * `epochs` file) is copied again whole, and only what lies past
         * the leader's end is counted: which of its records the leader
         * holds is not known. */
        const tn_plog_probe_t *lp = &w->probes[best];
        uint64_t keep = 0;
        int rc = 0;
        if (pr->epochs.n == 0)
            keep = TN_MIN(lp->log_end, pr->log_end);
        else
            rc = tn_epochs_agree_end(&lp->epochs, lp->log_end, &pr->epochs, pr->log_end, &keep);
        if (rc != 0) {
            bprintf(w, &w->text,
                    "  node %" PRIu32 ": offsets [%" PRIu64 ", %" PRIu64 "), last epoch %" PRIu32
                    ": where it parts from the leader's log is unknown (%s)\n",
                    cp->node, pr->log_start, pr->log_end, cp->last_epoch, tn_strerror(rc));
            bprintf(w, &w->json, ",\"beyond_leader\":null}");
            continue;
        }
        uint64_t from = TN_MAX(keep, pr->log_start);
        uint64_t beyond = pr->log_end > from ? pr->log_end - from : 0;
        w->beyond += beyond;
        bprintf(w, &w->text,
                "  node %" PRIu32 ": offsets [%" PRIu64 ", %" PRIu64 "), last epoch %" PRIu32
                ": %" PRIu64 " record(s) beyond the leader's log%s\n",
                cp->node, pr->log_start, pr->log_end, cp->last_epoch, beyond,
                beyond > 0
                    ? " (lost: never acknowledged unless the backup caught a write under way)"
                    : "");
        bprintf(w, &w->json, ",\"beyond_leader\":%" PRIu64 "}", beyond);
    }
    bprintf(w, &w->json, "]}");
}

/* DIR/<id>/metastore.snapshot into *out (*len bytes, the caller frees
 * it), checked against its manifest m. */
static int read_snapshot(const char *dir, uint64_t id, const tn_manifest_t *m, char **out,
                         size_t *len)
{
    char p[PATH_LEN];
    pathf(p, sizeof(p), "%s/%" PRIu64 "/metastore.snapshot", dir, id);
    int e = read_file(p, TN_MANIFEST_MAX_BYTES, out, len);
    if (e != 0)
        return say("restore", "%s: %s", p, why(e));
    if (*len != m->meta_len || tn_crc32c(0, *out, *len) != m->meta_crc) {
        tn_free(*out);
        *out = NULL;
        return say("restore",
                   "%s is damaged (or changed while it was restored): its length or CRC32C is "
                   "not the manifest's",
                   p);
    }
    return TN_CTL_OK;
}

/* Every member's manifest and files checked, then the snapshot of
 * metastore_from rewritten for the whole cluster (meta/restore.h) into
 * *out. Nothing is written. */
static int whole_cluster(whole_t *w, const char *dir, const tn_manifest_set_t *set,
                         uint64_t meta_from, const tn_manifest_t *mm, const char *bid,
                         tn_buf_t *out, unsigned char *buf)
{
    int rc = TN_CTL_OK;
    for (size_t i = 0; i < set->n && rc == TN_CTL_OK; i++) {
        char p[PATH_LEN];
        /* Restoring a whole cluster reads every member's copy of every
         * replicated partition: a member missing fails every restore. */
        if ((rc = load_manifest(dir, set->ids[i], &w->mans[i])) != TN_CTL_OK)
            return rc;
        for (size_t k = 0; k < w->mans[i].nfiles && rc == TN_CTL_OK; k++) {
            pathf(p, sizeof(p), "%s/%" PRIu64 "/data/%s", dir, set->ids[i],
                  w->mans[i].files[k].path);
            rc = check_file(p, w->mans[i].files[k].len, w->mans[i].files[k].crc, buf);
        }
        if (rc != TN_CTL_OK)
            return say("restore",
                       "node %" PRIu64 "'s copy in %s is damaged (above): every "
                       "member's restore reads it, so none may go on",
                       set->ids[i], dir);
    }
    char *snap = NULL;
    size_t snap_len = 0;
    if ((rc = read_snapshot(dir, meta_from, mm, &snap, &snap_len)) != TN_CTL_OK)
        return rc;
    char err[600];
    int e = tn_meta_restore_rewrite(snap, snap_len, bid, set->ids, set->n, on_copies, on_told, w,
                                    out, err, sizeof(err));
    drop_probes(w);
    tn_free(snap);
    if (e != 0)
        return say("restore", "%s", err);
    if (w->oom != 0)
        return say("restore", "out of memory");
    return TN_CTL_OK;
}

/* Whether path (a manifest's) is the file of a channel ending in sfx in
 * its topic's directory, topics/<t>/<c><sfx>; then t and ch (PATH_LEN
 * bytes each) name them. */
static bool chan_file(const char *path, const char *sfx, char *t, char *ch)
{
    if (strncmp(path, "topics/", 7) != 0)
        return false;
    const char *topic = path + 7, *slash = strchr(topic, '/');
    size_t n = strlen(path), sl = strlen(sfx);
    if (slash == NULL || slash == topic || strchr(slash + 1, '/') != NULL || n <= sl ||
        strcmp(path + n - sl, sfx) != 0 || (size_t)(path + n - sl - slash) < 2)
        return false;
    pathf(t, PATH_LEN, "%.*s", (int)(slash - topic), topic);
    pathf(ch, PATH_LEN, "%.*s", (int)(path + n - sl - slash - 1), slash + 1);
    return true;
}

/* Whether path (a manifest's) is the topic's own file name in its
 * directory, topics/<t>/<name>; then t (PATH_LEN bytes) names the topic. */
static bool topic_file(const char *path, const char *name, char *t)
{
    if (strncmp(path, "topics/", 7) != 0)
        return false;
    const char *topic = path + 7, *slash = strchr(topic, '/');
    if (slash == NULL || slash == topic || strcmp(slash + 1, name) != 0)
        return false;
    pathf(t, PATH_LEN, "%.*s", (int)(slash - topic), topic);
    return true;
}

/* Whether path (a manifest's) is a stamp the backup carried (api/backup.c
 * take_stamp, take_topic_stamp): a channel's, topics/<t>/<c>.cstamp, or
 * a topic's, topics/<t>/stamp. */
static bool carried_stamp(const char *path)
{
    char t[PATH_LEN], ch[PATH_LEN];
    return chan_file(path, TN_STORE_CHAN_STAMP_SUFFIX, t, ch) ||
           topic_file(path, TN_STORE_STAMP_FILE, t);
}

/* A plain restore: each topic directory of the node's copy that holds no
 * partition, only a pause's files (a pause this node took of a topic it
 * held no copy of, carried by api/backup.c list_bare), gets the stamp of
 * its topic's record in s, the metastore the node starts from, after the
 * files. The start does not load such a directory, and the topic the
 * catalog then makes keeps its pause files only beside the stamp of its
 * own record (queue/broker.c topic_create_work), where a directory with
 * partitions is loaded and stamped at the first start. A topic s has no
 * record of gets none (the directory goes at the first start, as the
 * topic's deletion took it). One whose stamp in the node's copy (dir/id/
 * data) is not that record's, or that carries none, is another topic's
 * of the name (one deleted and made again while the backup was taken,
 * between the metastore's snapshot and the copy of the files, or while
 * the node still held an earlier one's directory): its directory is
 * removed, as the files of a channel whose stamp differs would be
 * (stamp_channels), so the recorded topic and its channels never take
 * its pauses. With --rejoin stamp_restored stamps it as any restored topic
 * directory. *nstamped: how many were written. */
static int stamp_bare(const tn_meta_state_t *s, const tn_manifest_t *m, const char *dir,
                      uint64_t id, const char *data, size_t *nstamped)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        char t[PATH_LEN], ch[PATH_LEN], tdir[PATH_LEN], sp[PATH_LEN];
        const char *path = m->files[i].path;
        if (!topic_file(path, TN_STORE_TOPIC_PAUSE_FILE, t) &&
            !chan_file(path, TN_STORE_CHAN_PAUSE_SUFFIX, t, ch))
            continue;
        pathf(tdir, sizeof(tdir), "%s/topics/%s", data, t);
        pathf(sp, sizeof(sp), "%s/%s", tdir, TN_STORE_STAMP_FILE);
        struct stat st;
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, t);
        if (e == NULL || e->rec.created_at_ms <= 0 || stat(sp, &st) == 0 ||
            !tn_store_dir_pause_only(tdir))
            continue; /* unrecorded, stamped already, or loaded at the start */
        char cdir[PATH_LEN], cp[PATH_LEN];
        int64_t had = 0;
        pathf(cdir, sizeof(cdir), "%s/%" PRIu64 "/data/topics/%s", dir, id, t);
        pathf(cp, sizeof(cp), "topics/%s/%s", t, TN_STORE_STAMP_FILE);
        if (tn_manifest_find(m, cp) == NULL || tn_store_stamp_read_dir(cdir, &had) != 0)
            had = 0;
        if (had != e->rec.created_at_ms) {
            int rc = tn_manifest_remove_dir(tdir);
            if (rc != 0)
                return say("restore", "%s (an earlier topic's of the name): %s", tdir,
                           tn_strerror(rc));
            continue;
        }
        int rc = tn_store_stamp_write_dir(tdir, e->rec.created_at_ms);
        if (rc != 0)
            return say("restore", "%s: %s", sp, tn_strerror(rc));
        (*nstamped)++;
    }
    return TN_CTL_OK;
}

/* Each channel whose pause file the node's copy holds (api/backup.c
 * take_pauses: this node had the channel recorded, as a pause file is
 * written at its creation) gets a stamp, written after the pause file,
 * as ternd writes them (a stamp beside a pause file): without one a
 * channel that the node's copy holds no file of (a follower's copy no
 * settle reached, made by the catalog at the first start) would be made
 * unpaused, its restored pause file taken for one left by a deleted
 * channel of the name (channel.c chan_create_work keeps it only beside
 * its stamp).
 * With copied true (--rejoin) a channel whose stamp the backup holds
 * (api/backup.c take_stamp; none in an earlier release's) has it already, written with the files:
 * it names the record the files are of, which the running cluster compares with its own (a channel
 * deleted and made again between the backup's snapshot and the copy of its files is the new one).
 * Every other channel, and every channel without copied (a plain restore, whose metastore is the
 * snapshot, a moment older than the files: the files are compared with no other record than the
 * restored one, and one that differs would have them deleted), gets the stamp of its record in s,
 * the metastore the node starts from (with --rejoin its own snapshot).
 * A channel s has no record of (or a record of a build before stamps)
 * gets none. *nstamped: how many were written. */
static int stamp_channels(const tn_meta_state_t *s, const tn_manifest_t *m, bool copied,
                          const char *data, size_t *nstamped)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        char t[PATH_LEN], ch[PATH_LEN], tdir[PATH_LEN], sp[PATH_LEN];
        if (!chan_file(m->files[i].path, TN_STORE_CHAN_PAUSE_SUFFIX, t, ch))
            continue;
        pathf(sp, sizeof(sp), "topics/%s/%s%s", t, ch, TN_STORE_CHAN_STAMP_SUFFIX);
        uint64_t stamp = 0;
        if ((copied && tn_manifest_find(m, sp) != NULL) ||
            !tn_meta_channel_find(s, t, ch, &stamp) || stamp == 0)
            continue;
        pathf(tdir, sizeof(tdir), "%s/topics/%s", data, t);
        int e = tn_store_channel_stamp_write_dir(tdir, ch, stamp);
        if (e != 0)
            return say("restore", "%s/%s%s: %s", tdir, ch, TN_STORE_CHAN_STAMP_SUFFIX,
                       tn_strerror(e));
        (*nstamped)++;
    }
    return TN_CTL_OK;
}

/* The node's own metastore snapshot in the backup (dir/id), checked
 * against its manifest m and decoded into s (the caller's, initialised;
 * the caller finis it): the source of --rejoin's stamps (stamp_restored). */
static int own_snapshot(const char *dir, uint64_t id, const tn_manifest_t *m, tn_meta_state_t *s)
{
    char *snap = NULL;
    size_t len = 0;
    int rc = read_snapshot(dir, id, m, &snap, &len);
    if (rc != TN_CTL_OK)
        return rc;
    int e = tn_meta_state_restore(s, snap, len);
    tn_free(snap);
    if (e != 0)
        return say("restore", "%s/%" PRIu64 "/metastore.snapshot: not a metastore snapshot: %s",
                   dir, id, tn_strerror(e));
    return TN_CTL_OK;
}

/* With --rejoin: each restored topic directory keeps the stamp
 * (storage-format.md, "Topic stamp") the backup copied beside its files
 * (api/backup.c take_topic_stamp), written with them: it names the record
 * the files are of (a topic deleted and made again between the backup's
 * snapshot and the copy of its files is the new one). One without (left
 * out, or a backup of an earlier release) is stamped with the creation
 * time of the topic's record in the node's own metastore snapshot of the
 * backup, taken a moment before its files. Either way a topic deleted and
 * made again under its name since the backup is told apart once the node
 * has caught up: its restored files are deleted there, never served as
 * the new topic's. A directory without a carried stamp that the snapshot
 * has no record for gets none (it takes the topic recorded under its name
 * at the first start, as a directory from before stamps does). Its
 * channels keep the stamps the backup copied beside their files, or are
 * stamped from the same snapshot (stamp_channels), so a channel deleted
 * and made again since is told apart the same way. *nstamped: how many
 * were written. */
static int stamp_restored(const tn_meta_state_t *s, const tn_manifest_t *m, const char *data,
                          size_t *nstamped)
{
    int rc = TN_CTL_OK;
    for (size_t i = 0; i < s->ntopics && rc == TN_CTL_OK; i++) {
        const tn_meta_topic_t *t = &s->topics[i]->rec;
        char tdir[PATH_LEN], sp[PATH_LEN];
        struct stat st;
        pathf(tdir, sizeof(tdir), "%s/topics/%s", data, t->name);
        pathf(sp, sizeof(sp), "topics/%s/%s", t->name, TN_STORE_STAMP_FILE);
        if (t->created_at_ms <= 0 || stat(tdir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue; /* no files of it in this node's backup */
        if (tn_manifest_find(m, sp) != NULL)
            continue; /* carried, written with the files */
        int e = tn_store_stamp_write_dir(tdir, t->created_at_ms);
        if (e != 0)
            rc = say("restore", "%s/%s: %s", tdir, TN_STORE_STAMP_FILE, tn_strerror(e));
        else
            (*nstamped)++;
    }
    if (rc == TN_CTL_OK)
        rc = stamp_channels(s, m, true, data, nstamped);
    return rc;
}

static int run_restore(tn_ctl_t *c, int argc, char **argv)
{
    static const struct option opts[] = {{"data-path", required_argument, NULL, 'd'},
                                         {"node", required_argument, NULL, 'n'},
                                         {"rejoin", no_argument, NULL, 'r'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    const char *data = NULL;
    bool have_node = false;
    bool rejoin = false;
    uint64_t id = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'd') {
            data = optarg;
        } else if (o == 'n') {
            char *end = NULL;
            errno = 0;
            unsigned long long x = strtoull(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || x == 0 || optarg[0] == '-')
                return tn_ctl_usage("restore", "--node takes a member id (a positive integer)");
            id = x;
            have_node = true;
        } else if (o == 'r') {
            rejoin = true;
        } else {
            return tn_ctl_usage("restore", "unknown option");
        }
    }
    if (argc - optind != 1)
        return tn_ctl_usage("restore", "one argument, the backup directory, is required");
    if (data == NULL || data[0] == '\0')
        return tn_ctl_usage("restore", "--data-path D (the data directory to make) is required");
    const char *dir = argv[optind];
    tn_manifest_set_t set;
    int rc = load_set(dir, have_node, &id, &set);
    if (rc != TN_CTL_OK)
        return rc;
    uint64_t meta_from = set.meta_from;
    tn_manifest_t m, mm;
    memset(&m, 0, sizeof(m));
    memset(&mm, 0, sizeof(mm));
    whole_t w;
    memset(&w, 0, sizeof(w));
    tn_meta_state_t own; /* --rejoin: the node's own snapshot, its stamps' source */
    tn_meta_state_init(&own);
    w.dir = dir;
    w.set = &set;
    tn_buf_init(&w.text);
    tn_buf_init(&w.json);
    tn_buf_t snap;
    tn_buf_init(&snap);
    uint64_t inc = 0;
    unsigned char *buf = tn_malloc(COPY_BUF);
    w.mans = tn_calloc(set.n, sizeof(*w.mans));
    w.probes = tn_calloc(TN_PSTATE_MAX_REPLICAS + set.n, sizeof(*w.probes));
    w.probed = tn_calloc(TN_PSTATE_MAX_REPLICAS + set.n, sizeof(*w.probed));
    if (buf == NULL || w.mans == NULL || w.probes == NULL || w.probed == NULL) {
        rc = say("restore", "out of memory");
        goto out;
    }
    if ((rc = load_manifest(dir, id, &m)) != TN_CTL_OK ||
        (!rejoin && (rc = load_manifest(dir, meta_from, &mm)) != TN_CTL_OK))
        goto out;
    /* 1. Every CRC before a byte is written. */
    char p[PATH_LEN], q[PATH_LEN];
    pathf(p, sizeof(p), "%s/%" PRIu64 "/metastore.snapshot", dir, meta_from);
    if (!rejoin && (rc = check_file(p, mm.meta_len, mm.meta_crc, buf)) != TN_CTL_OK)
        goto out;
    /* --rejoin stamps the topics and channels from the node's own
     * snapshot (stamp_restored): checked and decoded before a byte is
     * written too. Before, a damaged one was found after the files were
     * written, and the target was left half made. */
    if (rejoin && (rc = own_snapshot(dir, id, &m, &own)) != TN_CTL_OK)
        goto out;
    for (size_t i = 0; i < m.nfiles; i++) {
        if (strcmp(m.files[i].path, TN_META_INCARNATION_FILE) == 0)
            continue; /* not written: the node starts with a new one */
        pathf(p, sizeof(p), "%s/%" PRIu64 "/data/%s", dir, id, m.files[i].path);
        if ((rc = check_file(p, m.files[i].len, m.files[i].crc, buf)) != TN_CTL_OK)
            goto out;
    }
    /* Partitions copied isolated for damage: said, then restored as they
     * were (ternd opens them isolated again). */
    for (size_t i = 0; i < m.nisolated; i++) {
        char why[1024];
        fprintf(stderr,
                "ternctl restore: warning: partition %s/%" PRIu32 ": node %" PRIu64
                " had it isolated when backed up (%s): restored as it was, the "
                "damage included, so ternd opens it isolated (docs/operations.md, \"A damaged "
                "partition\")\n",
                m.isolated[i].topic, m.isolated[i].partition, id,
                tn_ctl_shown(m.isolated[i].error, why, sizeof(why)));
    }
    /* Channel files that do not go together: said, then restored. */
    if (tn_manifest_check_channels(&m, stderr) < 0) {
        rc = say("restore", "out of memory");
        goto out;
    }
    bool self = rejoin; /* the running cluster's configuration is the one used */
    for (size_t i = 0; i < mm.nvoters; i++)
        self = self || mm.voters[i].id == id;
    if (!self) {
        rc = say("restore", "node %" PRIu64 " is not a voter of node %" PRIu64 "'s metastore", id,
                 meta_from);
        goto out;
    }
    if (!rejoin) {
        /* The whole cluster from this backup: every member's copy read, the
         * same rewritten metastore and incarnations on every node. A set
         * made before sets had an id is named by its metastore source's
         * backup session (random, one per backup). */
        const char *bid = set.id[0] != '\0' ? set.id : mm.session;
        if (bid[0] == '\0') {
            rc = say("restore", "%s has no id and its metastore source no session id", dir);
            goto out;
        }
        if ((rc = whole_cluster(&w, dir, &set, meta_from, &mm, bid, &snap, buf)) != TN_CTL_OK)
            goto out;
        inc = tn_meta_restore_incarnation(bid, id);
    }
    /* 2. The target. */
    int e = empty_dir(data);
    if (e < 0) {
        rc = say("restore", "%s: %s", data, tn_strerror(e));
        goto out;
    }
    if (e == 0) {
        rc = say("restore", "%s is not empty: a restore goes into a new or empty directory", data);
        goto out;
    }
    uint64_t bytes = 0;
    size_t nfiles = 0;
    for (size_t i = 0; i < m.nfiles; i++) {
        if (strcmp(m.files[i].path, TN_META_INCARNATION_FILE) == 0)
            continue;
        if (!rejoin && carried_stamp(m.files[i].path))
            continue; /* channels: the restored metastore's record's instead (stamp_channels);
                       * topics: stamped at the first start from it */
        if ((e = make_parents(data, m.files[i].path)) != 0) {
            rc = say("restore", "mkdir for %s: %s", m.files[i].path, tn_strerror(e));
            goto out;
        }
        pathf(p, sizeof(p), "%s/%" PRIu64 "/data/%s", dir, id, m.files[i].path);
        pathf(q, sizeof(q), "%s/%s", data, m.files[i].path);
        if ((rc = copy_in(p, q, m.files[i].len, m.files[i].crc, buf)) != TN_CTL_OK)
            goto out;
        bytes += m.files[i].len;
        nfiles++;
    }
    if (rejoin) {
        size_t nstamped = 0;
        if ((rc = stamp_restored(&own, &m, data, &nstamped)) != TN_CTL_OK)
            goto out;
        if ((e = fsync_dir(data)) != 0) {
            rc = say("restore", "fsync %s: %s", data, tn_strerror(e));
            goto out;
        }
        if (tn_ctl_json(c)) {
            char js[256];
            int jl = snprintf(js, sizeof(js),
                              "{\"node_id\":%" PRIu64 ",\"files\":%zu,\"bytes\":%" PRIu64
                              ",\"metastore_from\":null,\"rejoin\":true}",
                              id, nfiles, bytes);
            tn_ctl_print_json(js, (size_t)jl);
        } else {
            printf("restored node %" PRIu64 "'s data into %s to rejoin its running cluster: %zu "
                   "files, %" PRIu64 " bytes; no metastore and a new incarnation at start (it "
                   "catches up from the other members, and leads nothing before it is in sync)\n",
                   id, data, nfiles, bytes);
        }
        rc = TN_CTL_OK;
        goto out;
    }
    /* 3. The channels' stamps from the rewritten metastore, and those of
     * the topic directories holding only pause files, then the metastore
     * and the restored incarnation. */
    {
        tn_meta_state_t s;
        tn_meta_state_init(&s);
        size_t nstamped = 0;
        e = tn_meta_state_restore(&s, tn_buf_data(&snap), tn_buf_size(&snap));
        if (e != 0)
            rc = say("restore", "the rewritten metastore: %s", tn_strerror(e));
        else
            rc = stamp_channels(&s, &m, false, data, &nstamped);
        if (rc == TN_CTL_OK)
            rc = stamp_bare(&s, &m, dir, id, data, &nstamped);
        tn_meta_state_fini(&s);
        if (rc != TN_CTL_OK)
            goto out;
    }
    pathf(q, sizeof(q), "%s/meta", data);
    if (mkdir(q, 0700) != 0) {
        rc = say("restore", "mkdir %s: %s", q, strerror(errno));
        goto out;
    }
    char err[400];
    if (tn_meta_restore_write(q, tn_buf_data(&snap), tn_buf_size(&snap), mm.voters, mm.nvoters, id,
                              err, sizeof(err)) != 0 ||
        tn_meta_restore_incarnation_write(data, inc, err, sizeof(err)) != 0) {
        rc = say("restore", "%s", err);
        goto out;
    }
    if ((e = fsync_dir(data)) != 0) {
        rc = say("restore", "fsync %s: %s", data, tn_strerror(e));
        goto out;
    }
    if (tn_ctl_json(c)) {
        tn_buf_t js;
        tn_buf_init(&js);
        bprintf(&w, &js,
                "{\"node_id\":%" PRIu64 ",\"files\":%zu,\"bytes\":%" PRIu64
                ",\"metastore_from\":%" PRIu64 ",\"rejoin\":false,\"incarnation\":\"%016" PRIx64
                "\",\"partitions\":[",
                id, nfiles, bytes, meta_from, inc);
        if ((tn_buf_size(&w.json) > 0 &&
             tn_buf_append(&js, tn_buf_data(&w.json), tn_buf_size(&w.json)) != 0) ||
            tn_buf_append(&js, "]}", 2) != 0)
            w.oom = UV_ENOMEM;
        if (w.oom == 0)
            tn_ctl_print_json(tn_buf_data(&js), tn_buf_size(&js));
        tn_buf_fini(&js);
        if (w.oom != 0) {
            rc = say("restore", "out of memory (the restore itself is written)");
            goto out;
        }
    } else {
        printf("restored node %" PRIu64 " into %s: %zu files, %" PRIu64
               " bytes, metastore from node %" PRIu64 ", incarnation %016" PRIx64 "\n",
               id, data, nfiles, bytes, meta_from, inc);
        printf("replicated partitions, as every node restored from %s starts them: %zu, %zu "
               "offline, %" PRIu64 " record(s) of copies beyond their leader's log\n",
               dir, w.nparts, w.offline, w.beyond);
        if (tn_buf_size(&w.text) > 0)
            fwrite(tn_buf_data(&w.text), 1, tn_buf_size(&w.text), stdout);
    }
    rc = TN_CTL_OK;
out:
    tn_meta_state_fini(&own);
    for (size_t i = 0; w.mans != NULL && i < set.n; i++)
        tn_manifest_fini(&w.mans[i]);
    tn_free(w.mans);
    drop_probes(&w);
    tn_free(w.probes);
    tn_free(w.probed);
    tn_buf_fini(&w.text);
    tn_buf_fini(&w.json);
    tn_buf_fini(&snap);
    tn_free(buf);
    tn_manifest_fini(&m);
    tn_manifest_fini(&mm);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_restore = {
    "restore", "write a node's backup into a new data directory (offline)",
    "usage: ternctl restore DIR --data-path D [--node ID] [--rejoin]\n"
    "\n"
    "Writes one node's copy from the backup DIR (made by `ternctl backup`) into\n"
    "the data directory D, which must be missing or empty; no server is\n"
    "involved (stop nothing, start ternd on D afterwards). Every file's length\n"
    "and CRC32C is checked against the manifest before anything is written,\n"
    "and again as it is written; files are fsynced and renamed into place.\n"
    "The metastore is written from the backup's snapshot (the same one for\n"
    "every node of a cluster). Channel files that do not go together (a WAL\n"
    "without its checkpoint, the reverse, a partition without a channel the\n"
    "topic's other partitions have) are warned about on stderr, then restored.\n"
    "\n"
    "options:\n"
    "  --data-path D   the data directory to make (required)\n"
    "  --node ID       the member id whose copy to restore (required when the\n"
    "                  backup holds several nodes)\n"
    "  --rejoin        one node of a cluster whose other members keep running\n"
    "                  on their own data: no metastore is written, so the\n"
    "                  node catches up from the others as a\n"
    "                  replaced disk and leads no replicated partition before\n"
    "                  it is back in sync\n"
    "\n"
    "A cluster is restored whole: every node from the same backup, each with\n"
    "`--node` its own id, then each started with its old node-id,\n"
    "raft-address and peers. Each restore reads every member's copy in DIR\n"
    "(all must be there and undamaged), gives every replicated partition the\n"
    "copy with the highest (last epoch, log end) as its leader, in a new\n"
    "epoch, and the node the incarnation derived from the backup; every\n"
    "node's restore decides the same and prints it per partition. Records a\n"
    "copy holds beyond its leader's log are dropped when it follows.\n"
    "One node of a running cluster is restored with --rejoin (it gets a new\n"
    "random incarnation at its first start).\n"
    "\n"
    "example:\n"
    "  ternctl restore /srv/backup/t1 --data-path /var/lib/tern --node 2\n",
    run_restore};
