/* The storage I/O shim. Every file operation of the storage engine goes
 * through these functions. They return 0 or a negative error (never -1 with
 * errno), retry EINTR and short writes, and fsync directories by path.
 *
 * Under TN_TEST the shim can also simulate a power cut. Between
 * tn_io_sim_start() and tn_io_sim_powerloss() it remembers every write,
 * truncate, create, rename, unlink and mkdir that no fdatasync/fsync (of the
 * file, or of the directory for namespace changes) has covered yet. At a
 * chosen operation the "power goes off": that operation and every later one
 * fail with UV_EIO. tn_io_sim_powerloss() then rewrites the files under the
 * simulated root into one state a real machine could be in after the cut:
 * each uncovered write is kept, dropped or torn (a random subset of its 512
 * byte sectors kept), each directory keeps a random prefix of its uncovered
 * namespace changes, and everything covered by a sync survives exactly.
 *
 * Thread safety: any thread. The simulator serialises on one mutex. */
#ifndef TN_STORAGE_IO_H
#define TN_STORAGE_IO_H

#include "core/platform.h"

#include "core/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/types.h>
#include <uv.h>

/* Whether rc says the file system is full: UV_ENOSPC, or -EDQUOT (a
 * quota). Only a write, a create or a rename that failed for space, before
 * any fsync covered it, may be tried again once space is freed; a failed
 * fsync never is (DESIGN.md, "an fsync or write error is sticky"). */
static inline bool tn_io_nospace(int rc)
{
    return rc == UV_ENOSPC || rc == -EDQUOT;
}

/* Format a path into buf; UV_ENAMETOOLONG when it does not fit. */
int tn_io_path(char *buf, size_t len, const char *fmt, ...) TN_PRINTF(3, 4);

int tn_io_open(const char *path, int flags, int mode, int *fd_out);
int tn_io_close(int fd);
/* Write all of iov at file position off. */
int tn_io_pwritev(int fd, const tn_iov_t *iov, int iovcnt, uint64_t off);
int tn_io_pwrite(int fd, const void *buf, size_t len, uint64_t off);
/* Write zeros over [from, to). */
int tn_io_write_zeros(int fd, uint64_t from, uint64_t to);
/* Read up to len bytes at off; *nread < len only at end of file. */
int tn_io_pread(int fd, void *buf, size_t len, uint64_t off, size_t *nread);
int tn_io_fdatasync(int fd);
int tn_io_fsync(int fd);

/* Several fdatasyncs waited for together, for a thread that would sync
 * several files in turn (the log committer's round): Linux AIO's
 * IOCB_CMD_FDSYNC hands them to the kernel at once and it runs them in
 * parallel, so three files cost about one sync's wait instead of three
 * (docs/performance.md). Where AIO fsync is missing (io_setup or io_submit
 * refuses), and under TN_TEST while the simulator or a sync fault is
 * armed, it is one tn_io_fdatasync after the other. One tn_io_syncs_t per
 * thread, zeroed to start, tn_io_syncs_fini at the end. */
#define TN_IO_SYNCS_MAX 16
typedef struct {
    unsigned long ctx; /* the AIO context (aio_context_t), 0 until set up */
    bool off;          /* AIO fsync refused here: one after the other */
} tn_io_syncs_t;
/* fdatasync fds[0..n) (n <= TN_IO_SYNCS_MAX); rcs[i] gets fds[i]'s result
 * (0 or a negative error). Returns when all are done. */
void tn_io_fdatasync_many(tn_io_syncs_t *s, const int *fds, int *rcs, size_t n);
void tn_io_syncs_fini(tn_io_syncs_t *s);
int tn_io_ftruncate(int fd, uint64_t len);
/* Cut fd back to len and fdatasync it: a full disk's short write undone
 * for good, so that none of its bytes are in the file after a crash (a
 * truncation only in the page cache could be lost with it, and whole
 * records of the short write come back). 0 or the first error (the
 * sync's failing is sticky for the caller, as any). */
int tn_io_cut_back(int fd, uint64_t len);
int tn_io_fsize(int fd, uint64_t *size);
int tn_io_rename(const char *from, const char *to);
int tn_io_unlink(const char *path);
/* Remove path and, when it is a directory, everything under it. A
 * symbolic link is removed as a link, never followed, at any depth (the
 * walk opens each directory with O_NOFOLLOW under its parent's descriptor
 * and unlinks by name there), so nothing outside path is touched, even
 * where a link is put in place of a directory during the walk. Best
 * effort: what cannot be removed stays. 0 (also when path is gone) or the
 * first error met. Blocks on disk; any thread. */
int tn_io_remove_tree(const char *path);
/* The same for everything under the directory dir, not dir itself;
 * UV_ELOOP (or UV_ENOTDIR) when dir is a symbolic link. */
int tn_io_remove_children(const char *dir);
/* Hard-link `to` to the file `from` names now (a backup pinning a file that
 * tn_io_write_file_atomic replaces: a checkpoint, a floor). 0; UV_ENOENT
 * only when `from` names no file; UV_EAGAIN when it was replaced at each of
 * many tries; another error as link(2) gives it. link(2) alone answers
 * ENOENT also when `from` was renamed over between its lookup and the link
 * (the inode it found had lost its last name), so a file that exists
 * throughout would be taken for gone. Any thread. */
int tn_io_link_current(const char *from, const char *to);
/* mkdir; UV_EEXIST when it exists. */
int tn_io_mkdir(const char *path, int mode);
/* mkdir -p, then fsync each directory whose entry was created. */
int tn_io_mkdir_p(const char *path, int mode);
int tn_io_fsync_dir(const char *path);
/* Atomically replace dir/name with data: write dir/name.tmp, fsync it,
 * rename over dir/name, fsync dir. */
int tn_io_write_file_atomic(const char *dir, const char *name, const void *data, size_t len);
/* The same, creating the file with mode (0600 for secrets). */
int tn_io_write_file_atomic_mode(const char *dir, const char *name, const void *data, size_t len,
                                 int mode);
/* Read a whole file of at most max bytes into out (appended). TN_ETOOBIG
 * when larger, UV_ENOENT when absent. */
int tn_io_read_file(const char *path, size_t max, tn_buf_t *out);

/* A small record file (the floor, damage and ingress checkpoint files):
 * u32 magic, u32 CRC32C of the payload, then the payload; little-endian
 * (docs/storage-format.md). The write is atomic (tn_io_write_file_atomic);
 * payload len at most 64 bytes. The read fills payload[0..len): 0,
 * UV_ENOENT when dir/name is absent, TN_ECORRUPT when its size (however
 * large), magic or CRC is not the one asked, or an I/O error. */
int tn_io_write_record_file(const char *dir, const char *name, uint32_t magic, const void *payload,
                            size_t len);
int tn_io_read_record_file(const char *dir, const char *name, uint32_t magic, void *payload,
                           size_t len);

#ifdef TN_TEST
/* Start simulating under root (recursively): the current contents count as
 * durable. */
int tn_io_sim_start(const char *root);
/* Cut the power when n more mutating operations have run (n >= 0); the
 * n+1th fails with UV_EIO, as does everything after it. */
void tn_io_sim_cut_after(long n);
/* Cut the power now. */
void tn_io_sim_cut(void);
bool tn_io_sim_is_cut(void);
/* Mutating operations seen since start. */
long tn_io_sim_ops(void);
/* Rewrite root to a possible post-power-loss state chosen by seed and stop
 * simulating. Call after everything that used the files is closed. */
int tn_io_sim_powerloss(uint64_t seed);
/* Stop simulating without changing any file. */
void tn_io_sim_stop(void);

/* Fault injection outside the simulator: make the nth next write (or
 * fdatasync/fsync) fail with err, once. n < 0 disarms. */
void tn_io_fail_write_after(long n, int err);
/* The same, but that write first writes its first keep bytes (a short
 * write, as a file system that runs out of space partway gives). */
void tn_io_fail_write_partial(long n, int err, size_t keep);
void tn_io_fail_sync_after(long n, int err);
/* The same for the nth next open that creates a file (O_CREAT). */
void tn_io_fail_create_after(long n, int err);
/* Every fdatasync/fsync sleeps ns first (a slow or stalled disk); 0 stops. */
void tn_io_delay_sync(int64_t ns);
#endif

#endif
