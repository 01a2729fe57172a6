/* The room the metastore's log needs before libraft starts (room.h). */
#include "core/platform.h"

#include "meta/room.h"

#include "core/err.h"

#include <dirent.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SCAN_BLOCK 4096

/* The end of fd's last block that is not all zeros (0: all zeros, or
 * unreadable: then nothing is counted as given back). */
static uint64_t used_end(int fd, uint64_t size)
{
    static const uint8_t zeros[SCAN_BLOCK];
    uint8_t block[SCAN_BLOCK];
    uint64_t end = 0;
    for (uint64_t off = 0; off < size; off += SCAN_BLOCK) {
        ssize_t n = pread(fd, block, sizeof(block), (off_t)off);
        if (n <= 0)
            return size;
        if (memcmp(block, zeros, (size_t)n) != 0)
            end = off + (uint64_t)n;
    }
    return end;
}

/* The bytes libraft's load frees in dir's open segments (with scan), and
 * how many there are into *nopen. */
static uint64_t open_segments(const char *dir, bool scan, unsigned *nopen)
{
    *nopen = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "open-", 5) != 0)
            continue;
        ++*nopen;
        if (!scan)
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            uint64_t held = (uint64_t)st.st_blocks * 512;
            uint64_t kept = used_end(fd, (uint64_t)st.st_size);
            if (held > kept)
                total += held - kept;
        }
        close(fd);
    }
    closedir(d);
    return total;
}

int tn_meta_room_check(const char *dir, uint64_t *room_out, char *err, size_t errlen)
{
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0)
        return 0;
    unsigned nopen;
    uint64_t room = (uint64_t)sv.f_bavail * sv.f_frsize + open_segments(dir, true, &nopen);
    if (room_out != NULL)
        *room_out = room;
    uint64_t need = (uint64_t)TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE;
    if (room >= need)
        return 0;
    tn_errbuf(err, errlen,
              "metastore: %s: %" PRIu64 " KiB free on its file system, and the metastore's log "
              "needs %" PRIu64 " KiB to start (libraft allocates a %u MiB segment whole and "
              "crashes without it): free at least %" PRIu64 " KiB there, then start ternd again",
              dir, room >> 10, need >> 10, TN_META_SEGMENT_BYTES >> 20, (need - room + 1023) >> 10);
    return UV_ENOSPC;
}

#ifdef TN_TEST
uint64_t tn_meta_room_reads;
#endif

void tn_meta_room_read(const char *dir, tn_meta_room_t *r)
{
#ifdef TN_TEST
    tn_meta_room_reads++;
#endif
    memset(r, 0, sizeof(*r));
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0)
        return;
    r->known = true;
    r->free = (uint64_t)sv.f_bavail * sv.f_frsize;
    /* Counted whenever a judge before the next reading could want it:
     * spent stays under TN_META_ROOM_BURST. */
    if (r->free < (uint64_t)TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE + TN_META_ROOM_BURST)
        open_segments(dir, false, &r->nopen);
}

int tn_meta_room_judge(const tn_meta_room_t *r, uint64_t spent, bool soon, const char *dir,
                       char *err, size_t errlen)
{
    if (!r->known)
        return 0;
    uint64_t room = r->free > spent ? r->free - spent : 0;
    uint64_t need = (uint64_t)TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE;
    if (room >= need)
        return 0;
    if (r->nopen >= (soon ? 2u : 1u))
        return 0;
    tn_errbuf(err, errlen,
              "%s: %" PRIu64 " KiB free on its file system, and the metastore's log needs %" PRIu64
              " KiB for its next segment (libraft allocates it whole and crashes without it)",
              dir, room >> 10, need >> 10);
    return UV_ENOSPC;
}
