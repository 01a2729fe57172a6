/* Room under the process's descriptor limit (RLIMIT_NOFILE). Every
 * connection, segment, index and channel file is a descriptor, and a
 * segment roll that cannot open its file stops its partition's writes
 * until a restart (storage errors are sticky). So what clients can make
 * more of stops short of the limit, in tiers: the doors' incoming
 * connections may use the lower three quarters (TN_FD_CONNS), the
 * metastore's Raft port the lower thirteen sixteenths (TN_FD_PEERS: above
 * the doors' mark, so clients that fill the doors do not lock the peers
 * out), the creation of topics and channels the lower seven eighths
 * (TN_FD_CREATE), and the rest stays for the partitions already there.
 *
 * The kernel gives out the lowest free descriptor, so a descriptor at or
 * above a mark means every one below it is taken: checking the number of
 * the descriptor just opened (or of a probe) is enough.
 *
 * Thread safety: any thread. */
#ifndef TN_CORE_FDROOM_H
#define TN_CORE_FDROOM_H

#include "core/platform.h"

typedef enum {
    TN_FD_CONNS,  /* a quarter of the limit kept back, at least 16 */
    TN_FD_PEERS,  /* three sixteenths kept back, at least 12 */
    TN_FD_CREATE, /* an eighth kept back, at least 8 */
} tn_fd_tier_t;

/* Whether descriptor fd lies below tier's mark (true without a limit). */
bool tn_fd_room_at(int fd, tn_fd_tier_t tier);
/* Whether the lowest free descriptor lies below tier's mark: a probe
 * (one dup of stderr, or an open of "/" when stderr is closed, and a
 * close), for before the files are opened. */
bool tn_fd_room(tn_fd_tier_t tier);

#endif
