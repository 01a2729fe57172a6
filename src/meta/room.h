/* The room the metastore's log needs on disk before libraft starts.
 *
 * libraft (0.15) allocates its log in whole segments (posix_fallocate of
 * TN_META_SEGMENT_BYTES each, prepared ahead of need). When the allocation
 * of the segment its first append waits for fails (no space left on
 * device), libraft fails that append and then crashes (SIGSEGV in the
 * loop's after-work callback, reproducible on every start of a new data
 * directory with less than a segment free): no callback of tern's can
 * stop it. So ternd checks before raft_start that a segment fits, and
 * refuses to start, saying so, when it does not.
 *
 * What counts as room: the file system's free blocks (f_bavail) plus what
 * libraft gives back itself while loading, before it allocates anything:
 * an open segment (open-N) holding no entry is removed, one holding
 * entries is cut to its end. Its end is taken as the end of its last
 * non-zero block (libraft preallocates zeros), which never undercounts
 * what stays.
 *
 * Threads: any (reads the file system; no shared state). */
#ifndef TN_META_ROOM_H
#define TN_META_ROOM_H

#include "core/platform.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The size of a libraft log segment: set on the io by tn_meta_open. */
#define TN_META_SEGMENT_BYTES (8u << 20)
/* Beyond the segment: its extent blocks, libraft's metadata file of an
 * election (the 4 KiB probe file is written before the check). Small on
 * purpose: a restart gives back a segment's room and needs it again. */
#define TN_META_ROOM_SPARE (32u << 10)

/* 0 when dir's file system has room for the metastore's next segment
 * (TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE, counting what libraft's
 * load gives back); UV_ENOSPC with the story in err when it has not;
 * 0 also when dir cannot be read (libraft's own start says why).
 * dir: borrowed; *room_out (optional): the bytes counted. */
int tn_meta_room_check(const char *dir, uint64_t *room_out, char *err, size_t errlen);

/* 0 when libraft's log can take its next segment in dir: the file system
 * has TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE free, or a segment is
 * allocated already (an open-N: the one being written, and with soon, a
 * prepared one beyond it). soon: a segment may be needed by the next
 * entry (a snapshot is due: libraft closes the segment being written
 * when it takes one). UV_ENOSPC with the story in err otherwise; 0 when
 * dir cannot be read. dir: borrowed. */
int tn_meta_room_next(const char *dir, bool soon, char *err, size_t errlen);

#endif
