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

/* A reading of the file system under the metastore's log, taken by
 * tn_meta_room_read and judged by tn_meta_room_judge for many proposals:
 * statvfs (and opendir when short) for every proposal blocked the loop
 * thread on a slow file system and cost a system call per write. The
 * metastore reads again when a reading may no longer hold (meta.c
 * room_for_entry): a second old, a snapshot due that it was not read for
 * (libraft then needs a segment; once per snapshot, not per proposal),
 * TN_META_ROOM_BURST bytes proposed since, or after a refusal.
 * Between readings, what was proposed since counts as taken (spent). */
typedef struct {
    bool known;     /* false: dir could not be read; nothing is refused */
    uint64_t free;  /* bytes free to unprivileged users (f_bavail) */
    unsigned nopen; /* open-N segments; counted only when free is under
                     * TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE + BURST */
} tn_meta_room_t;

/* Proposed bytes after which a reading is taken again. */
#define TN_META_ROOM_BURST (256u << 10)

/* Read dir's file system into *r. dir: borrowed. Loop thread (blocks on
 * the file system: call it rarely). */
void tn_meta_room_read(const char *dir, tn_meta_room_t *r);

/* 0 when libraft's log can take its next segment, judged from r with
 * spent bytes (under TN_META_ROOM_BURST) proposed since r was read: the
 * file system has TN_META_SEGMENT_BYTES + TN_META_ROOM_SPARE free beyond
 * spent, or a segment is allocated already (an open-N: the one being
 * written, and with soon, a prepared one beyond it). soon: a segment may
 * be needed by the next entry (a snapshot is due: libraft closes the
 * segment being written when it takes one). UV_ENOSPC with the story
 * (naming dir) in err otherwise; 0 when r is not known. Pure. */
int tn_meta_room_judge(const tn_meta_room_t *r, uint64_t spent, bool soon, const char *dir,
                       char *err, size_t errlen);

#ifdef TN_TEST
/* How many readings tn_meta_room_read took: unit tests check that
 * proposals do not each cost one. Loop thread. */
extern uint64_t tn_meta_room_reads;
#endif

#endif
