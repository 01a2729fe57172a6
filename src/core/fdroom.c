/* Room under the descriptor limit. See fdroom.h. */
#include "core/platform.h"

#include "core/fdroom.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

bool tn_fd_room_at(int fd, tn_fd_tier_t tier)
{
    struct rlimit rl;
    if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return true;
    rlim_t keep = tier == TN_FD_CONNS   ? rl.rlim_cur / 4
                  : tier == TN_FD_PEERS ? rl.rlim_cur / 16 * 3
                                        : rl.rlim_cur / 8;
    rlim_t least = tier == TN_FD_CONNS ? 16 : tier == TN_FD_PEERS ? 12 : 8;
    if (keep < least)
        keep = least;
    return (rlim_t)fd + keep < rl.rlim_cur;
}

bool tn_fd_room(tn_fd_tier_t tier)
{
    /* The lowest free descriptor: a copy of stderr, or, when it is
     * closed (a daemon started with 2>&-), of the root directory opened. */
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
    if (fd < 0 && errno == EBADF)
        fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return false; /* none free at all (EMFILE) */
    bool room = tn_fd_room_at(fd, tier);
    close(fd);
    return room;
}
